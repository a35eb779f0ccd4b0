//! Allocator-wide event counters (Linux's vm events plus mmkit's own).
//!
//! Owns only counters: relaxed atomics bumped on slow or rare paths (the
//! per-zone allocation counts live in the zone, under its lock, so the fast
//! path touches no shared counter). Read them with [`Stats::snapshot`].
#![deny(unsafe_code)]

use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

macro_rules! counters {
    ($( $(#[$doc:meta])* $name:ident ),* $(,)?) => {
        /// Live counters; see [`StatsSnapshot`] for meanings.
        #[derive(Default)]
        pub(crate) struct Stats {
            $( pub(crate) $name: AtomicU64, )*
        }

        /// A copy of the allocator-wide counters at one moment.
        #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
        pub struct StatsSnapshot {
            $( $(#[$doc])* pub $name: u64, )*
        }

        impl Stats {
            /// Copies every counter.
            pub(crate) fn snapshot(&self) -> StatsSnapshot {
                StatsSnapshot { $( $name: self.$name.load(Relaxed), )* }
            }
        }

        impl StatsSnapshot {
            /// (name, value) pairs in declaration order, for vmstat output.
            pub fn pairs(&self) -> [(&'static str, u64); counters!(@count $($name)*)] {
                [ $( (stringify!($name), self.$name), )* ]
            }
        }
    };
    (@count) => { 0 };
    (@count $head:ident $($rest:ident)*) => { 1 + counters!(@count $($rest)*) };
}

counters! {
    /// Direct-reclaim entries (Linux `allocstall`).
    allocstall,
    /// Direct-compaction attempts (`compact_stall`).
    compact_stall,
    /// Direct compactions after which the allocation succeeded
    /// (`compact_success`).
    compact_success,
    /// Direct compactions after which it still failed (`compact_fail`).
    compact_fail,
    /// Pages the migrate scanner looked at (`compact_migrate_scanned`).
    compact_migrate_scanned,
    /// Pages the free scanner looked at (`compact_free_scanned`).
    compact_free_scanned,
    /// Proactive compaction rounds that ran (`compact_daemon_wake`).
    compact_daemon_wake,
    /// Pages proactive compaction's migrate scanner looked at
    /// (`compact_daemon_migrate_scanned`).
    compact_daemon_migrate_scanned,
    /// Pages proactive compaction's free scanner looked at
    /// (`compact_daemon_free_scanned`).
    compact_daemon_free_scanned,
    /// Blocks compaction moved (`pgmigrate_success`, in blocks).
    pgmigrate_success,
    /// Blocks compaction could not move (`pgmigrate_fail`, in blocks).
    pgmigrate_fail,
    /// Background-reclaim wake-ups requested.
    kswapd_wakeups,
    /// Allocations that entered the slow path.
    slowpath_entries,
    /// Per-CPU list operations that found the pageset busy and went to the
    /// buddy instead.
    pcp_contended,
    /// Allocations that failed.
    alloc_failures,
    /// `__GFP_NOFAIL` retries granted by the hooks.
    nofail_retries,
    /// Pages reported bad at free and leaked.
    bad_pages,
    /// Pages leaked with bad blocks (a bad block of order n leaks 2^n).
    bad_pages_leaked,
    /// Bad-page log lines suppressed by the rate limit.
    bad_pages_suppressed,
    /// Pages marked by `memory_failure`.
    hwpoison_marked,
    /// Poisoned pages kept out of the free lists for good.
    hwpoison_offlined,
    /// Free page reporting passes run on a map with real memory.
    reporting_passes,
    /// Free pages given back to the OS by those passes (Linux counts
    /// reported pages per order in `page_reporting_order`'s debugfs).
    reported_pages,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_copies_values() {
        let s = Stats::default();
        s.bad_pages.fetch_add(3, Relaxed);
        let snap = s.snapshot();
        assert_eq!(snap.bad_pages, 3);
        assert!(snap.pairs().contains(&("bad_pages", 3)));
    }
}
