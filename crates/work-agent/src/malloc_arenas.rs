//! How the agent uses glibc's allocator: how many arenas its threads share, and handing free
//! memory back. glibc gives each thread that meets a locked arena one of its own, up to 8 per
//! core; the agent's objects are made on one thread and freed on another, so every arena ends up
//! holding free pieces of the others' work. Two arenas keep that waste small (0.7 MiB of 23 MiB
//! at 1,000 works, docs/performance.md). And glibc gives back to the system only the free memory
//! at the top of an arena: the pages of chunks freed in the middle stay resident. After a burst
//! (the first apply of 10,000 works, a restart, a resync sweep) that is tens of megabytes:
//! an idle agent at 10,000 works held 95 MB, of which `malloc_trim` gave 32 MB back.

use std::time::Duration;

/// Arenas when `MALLOC_ARENA_MAX` does not say otherwise.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const ARENAS: libc::c_int = 2;

/// How often the free pages are handed back. A trim walks the free chunks (milliseconds at
/// 10,000 works) and writes nothing: a memory figure, never a decision, depends on it.
pub const TRIM_EVERY: Duration = Duration::from_secs(30);

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

/// Hands the arenas' free pages back to the system (glibc only; elsewhere nothing).
fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases pages of free chunks; it is safe from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Trims every [`TRIM_EVERY`] for the life of the runtime, on its blocking pool.
pub fn spawn_trim() {
    tokio::spawn(trim_every(TRIM_EVERY, trim));
}

/// Calls `trim` on the blocking pool every `period`, the first time one period from now.
async fn trim_every(period: Duration, trim: fn()) {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        // Waited for, so trims never pile up behind a slow one.
        let _ = tokio::task::spawn_blocking(trim).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    static TRIMS: AtomicUsize = AtomicUsize::new(0);

    fn count() {
        TRIMS.fetch_add(1, Ordering::SeqCst);
    }

    #[tokio::test(start_paused = true)]
    async fn trims_once_a_period_from_one_period_on() {
        let task = tokio::spawn(trim_every(Duration::from_secs(30), count));
        tokio::time::sleep(Duration::from_secs(29)).await;
        assert_eq!(TRIMS.load(Ordering::SeqCst), 0);
        for _ in 0..3 {
            tokio::time::sleep(Duration::from_secs(30)).await;
        }
        // At 30, 60 and 90 s (the blocking pool's calls are done by now).
        tokio::task::yield_now().await;
        assert_eq!(TRIMS.load(Ordering::SeqCst), 3);
        task.abort();
        trim();
    }
}
