//! The agent's allocator on Linux: jemalloc, configured to hand free pages back to the system by
//! itself. glibc's malloc keeps the pages of chunks freed in the middle of an arena resident until
//! `malloc_trim`: with a trim every 30 s an agent at 10,000 works held 86 MiB after its first
//! apply for about 48 MiB of heap in use, and its reconciles touched the trimmed pages again
//! within seconds (docs/performance.md, "Limits per cluster"; jemalloc: 66 MiB). jemalloc's background thread purges pages unused for `dirty_decay_ms` without a
//! trim and without a lock on the allocating threads. The same crate builds for glibc and musl.

/// jemalloc's options, read once at its first allocation (the prefixed `malloc_conf` of
/// tikv-jemalloc-sys). A `MALLOC_CONF`-style environment variable (`_RJEM_MALLOC_CONF`) still
/// overrides each of them.
/// - `background_thread:true`: one thread purges unused pages, so an idle agent shrinks too.
/// - `dirty_decay_ms:1000`, `muzzy_decay_ms:0`: free pages go back within about a second of their
///   last use rather than ten (jemalloc's default); a burst reuses them before that.
/// - `narenas:2`: the agent's allocations are made on one worker and freed on another; few arenas
///   keep the free room in one place.
pub const CONF: &[u8] = b"background_thread:true,dirty_decay_ms:1000,muzzy_decay_ms:0,narenas:2\0";
