//! Keeping the process's resident memory close to what it uses.
//!
//! With glibc's allocator (the operator built for `*-linux-gnu`, as the tests and the local
//! cluster run it) pages freed in the middle of a heap stay resident: a burst of reconciles
//! allocates and frees request bodies and superseded objects, and those pages are not handed
//! back by themselves. So, on glibc: at most two arenas (glibc's default is eight per core,
//! each keeping its own free pages), and the free pages handed back every half minute.
//! Measured after `tests/bench.sh 1000`: 33.5 MiB resident at rest instead of 50.0 MiB; right
//! after a restart, when nearly all of the heap is live cached objects, it changes nothing.
//! The released image is linked with musl, whose allocator returns freed pages by itself.

use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How often freed pages are handed back to the system.
const TRIM_EVERY: Duration = Duration::from_secs(30);

/// Caps the allocator's arenas. Call before any thread starts: arenas are created per thread.
pub fn limit_arenas() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; it is called before any other thread
    // exists.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

/// Hands the allocator's free pages back to the system every [`TRIM_EVERY`] until shutdown.
pub async fn trim_periodically(shutdown: CancellationToken) {
    if !cfg!(all(target_os = "linux", target_env = "gnu")) {
        return;
    }
    loop {
        tokio::select! {
            _ = tokio::time::sleep(TRIM_EVERY) => {}
            _ = shutdown.cancelled() => return,
        }
        // It walks every free chunk under the arenas' locks: off the reconcile threads.
        let _ = tokio::task::spawn_blocking(trim).await;
    }
}

fn trim() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes the allocator's own locks; it is safe to call from any thread.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    fn resident_bytes() -> usize {
        let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
        let pages: usize = statm
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        pages * 4096
    }

    #[test]
    fn freed_pages_between_live_objects_go_back_to_the_system() {
        const MIB: usize = 1 << 20;
        // 64 MiB in small blocks (below the mmap threshold: they live in the heap), then all
        // but every 32nd freed: the heap cannot shrink from its top, only a trim frees them.
        let mut blocks: Vec<Option<Vec<u8>>> =
            (0..16 * 1024).map(|i| Some(vec![i as u8; 4000])).collect();
        for (i, block) in blocks.iter_mut().enumerate() {
            if i % 32 != 0 {
                *block = None;
            }
        }
        let before = resident_bytes();
        trim();
        let after = resident_bytes();
        assert!(
            before.saturating_sub(after) >= 32 * MIB,
            "resident {} MiB before the trim, {} MiB after",
            before / MIB,
            after / MIB
        );
        assert_eq!(blocks.iter().flatten().count(), 512);
    }
}
