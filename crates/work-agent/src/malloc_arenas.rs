//! How many malloc arenas the agent's threads share (glibc only). glibc gives each thread that
//! meets a locked arena one of its own, up to 8 per core; the agent's objects are made on one
//! thread and freed on another, so every arena ends up holding free pieces of the others' work.
//! Two arenas keep that waste small (0.7 MiB of 23 MiB at 1,000 works, docs/performance.md).

/// Arenas when `MALLOC_ARENA_MAX` does not say otherwise.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const ARENAS: libc::c_int = 2;

/// Limits the arenas unless the environment sets `MALLOC_ARENA_MAX` (glibc read it at start).
/// Called before the runtime starts its threads.
pub fn limit() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: mallopt only sets an allocator parameter; no thread allocates concurrently yet.
        // A refusal (0) leaves glibc's default, which is only a larger footprint.
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, ARENAS);
        }
    }
}
