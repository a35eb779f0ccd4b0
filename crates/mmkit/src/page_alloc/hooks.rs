//! What the embedder plugs in: reclaim and compaction hooks, and sinks for
//! bad-page and allocation-failure events.
//!
//! Every hook is called with no allocator lock held, so a hook may free pages
//! back to the allocator (that is what reclaim does). The default
//! implementation of each method does nothing, so [`NoHooks`] makes the
//! allocator fail cleanly where Linux would reclaim.
#![deny(unsafe_code)]

use crate::types::error::BadPageReason;
use crate::types::gfp::Gfp;
use crate::Pfn;

/// The request on whose behalf a hook runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReclaimRequest {
    /// Request flags.
    pub gfp: Gfp,
    /// Requested order.
    pub order: u32,
    /// Preferred node.
    pub nid: usize,
    /// Retry count so far in this slow path.
    pub attempt: u32,
}

/// A page that failed `free_pages_prepare` and was leaked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadPageReport {
    /// The page.
    pub pfn: Pfn,
    /// What was wrong.
    pub reason: BadPageReason,
    /// Bad pages reported so far, this one included.
    pub total: u64,
}

/// An allocation that failed without `__GFP_NOWARN`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllocFailure {
    /// Request flags.
    pub gfp: Gfp,
    /// Requested order.
    pub order: u32,
    /// Preferred node.
    pub nid: usize,
}

/// Embedder callbacks. All methods have do-nothing defaults.
pub trait Hooks: Send + Sync {
    /// Free memory fell below a low watermark: wake background reclaim.
    fn wake_kswapd(&self, _request: &ReclaimRequest) {}
    /// Synchronous reclaim for a request with `__GFP_DIRECT_RECLAIM`.
    /// Returns the number of pages the embedder freed.
    fn direct_reclaim(&self, _request: &ReclaimRequest) -> u64 {
        0
    }
    /// Synchronous compaction for a high-order request; true if progress.
    fn direct_compact(&self, _request: &ReclaimRequest) -> bool {
        false
    }
    /// Whether a `__GFP_NOFAIL` request that found nothing should go round
    /// again (Linux loops forever; with no reclaim to wait for, the default
    /// fails cleanly instead).
    fn retry_nofail(&self, _request: &ReclaimRequest) -> bool {
        false
    }
    /// A bad page was found and leaked; called for every one.
    fn bad_page(&self, _report: &BadPageReport) {}
    /// An allocation without `__GFP_NOWARN` failed.
    fn alloc_failed(&self, _failure: &AllocFailure) {}
    /// Rate-limited log line (bad pages). The default prints to stderr with
    /// `std` and drops the line without it.
    fn log(&self, _line: core::fmt::Arguments<'_>) {
        #[cfg(feature = "std")]
        std::eprintln!("mmkit: {_line}");
    }
    /// Monotonic clock in nanoseconds, for rate limiting. `None` (the
    /// no_std default) limits by count only.
    fn now_ns(&self) -> Option<u64> {
        #[cfg(feature = "std")]
        {
            use std::sync::OnceLock;
            use std::time::Instant;
            static START: OnceLock<Instant> = OnceLock::new();
            let start = START.get_or_init(Instant::now);
            Some(start.elapsed().as_nanos() as u64)
        }
        #[cfg(not(feature = "std"))]
        None
    }
}

/// No reclaim, no compaction; logs bad pages to stderr under `std`.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoHooks;

impl Hooks for NoHooks {}

/// Like [`NoHooks`] but never logs: for tests and benchmarks that provoke
/// bad pages on purpose.
#[derive(Clone, Copy, Debug, Default)]
pub struct QuietHooks;

impl Hooks for QuietHooks {
    fn log(&self, _line: core::fmt::Arguments<'_>) {}
}

/// At most `burst` events per `interval_ns` (Linux's `ratelimit_state`).
pub(crate) struct RateLimit {
    window_start: Option<u64>,
    in_window: u32,
    interval_ns: u64,
    burst: u32,
}

impl RateLimit {
    /// Linux's bad-page limit: 60 reports a minute.
    pub(crate) const fn bad_pages() -> Self {
        Self { window_start: None, in_window: 0, interval_ns: 60_000_000_000, burst: 60 }
    }

    /// Whether an event at `now` may be logged. Without a clock the first
    /// `burst` events pass and the rest are suppressed.
    pub(crate) fn allow(&mut self, now: Option<u64>) -> bool {
        if let Some(now) = now {
            let start = *self.window_start.get_or_insert(now);
            if now.saturating_sub(start) >= self.interval_ns {
                self.window_start = Some(now);
                self.in_window = 0;
            }
        }
        if self.in_window < self.burst {
            self.in_window += 1;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_limit_resets_each_interval() {
        let mut rl = RateLimit::bad_pages();
        let passed = (0..100).filter(|_| rl.allow(Some(5))).count();
        assert_eq!(passed, 60);
        assert!(rl.allow(Some(5 + 60_000_000_000)));
        let mut clockless = RateLimit::bad_pages();
        assert_eq!((0..100).filter(|_| clockless.allow(None)).count(), 60);
    }
}
