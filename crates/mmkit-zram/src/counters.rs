//! The device's counters (Linux's `struct zram_stats`): the per-page ones
//! in per-thread shards, the rest shared, and `mm_stat`'s columns as
//! numbers.
//!
//! Owns the counters. The write, free and I/O paths update them; `stats`
//! adds them up and prints them. Must not know the device: a part of it.

use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering::Relaxed};

/// The counters every write and free changes, one set per shard: two
/// threads writing at once would otherwise pass one cache line back and
/// forth four times a page (Linux's `zram_stats` are shared atomics; with
/// two writers here they cost more than the class lock). A shard may go
/// negative (a page stored by one thread, overwritten by another); only
/// the sum means anything.
#[derive(Default)]
#[repr(align(128))]
pub(crate) struct HotCounters {
    pub(crate) compr_data_size: AtomicI64,
    /// Pages holding data (same-filled included): `orig_data_size` / 4096.
    pub(crate) pages_stored: AtomicI64,
    pub(crate) same_pages: AtomicI64,
    pub(crate) huge_pages: AtomicI64,
    pub(crate) huge_pages_since: AtomicI64,
}

/// Shards of [`HotCounters`]: enough that threads rarely share one.
pub(crate) const HOT_SHARDS: usize = 16;

/// This thread's shard, handed out round robin on first use.
#[inline]
pub(crate) fn hot_shard() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SHARD: usize = NEXT.fetch_add(1, Relaxed) % HOT_SHARDS;
    }
    SHARD.with(|s| *s)
}

/// The device's counters (Linux's `struct zram_stats`).
#[derive(Default)]
pub(crate) struct Counters {
    hot: [HotCounters; HOT_SHARDS],
    pub(crate) mem_used_max: AtomicU64,
    pub(crate) failed_reads: AtomicU64,
    pub(crate) failed_writes: AtomicU64,
    pub(crate) invalid_io: AtomicU64,
    pub(crate) notify_free: AtomicU64,
    pub(crate) miss_free: AtomicU64,
}

impl Counters {
    /// This thread's shard of the per-page counters.
    pub(crate) fn hot(&self) -> &HotCounters {
        &self.hot[hot_shard()]
    }

    /// One per-page counter summed over the shards.
    pub(crate) fn total(&self, counter: impl Fn(&HotCounters) -> &AtomicI64) -> u64 {
        let sum: i64 = self.hot.iter().map(|shard| counter(shard).load(Relaxed)).sum();
        sum.max(0) as u64
    }

    /// Raises `mem_used_max` to `bytes` if it is below: a plain load first,
    /// so the shared line is written only when the pool grew past its
    /// peak (as Linux's `update_used_max`).
    pub(crate) fn note_memory(&self, bytes: u64) {
        if bytes > self.mem_used_max.load(Relaxed) {
            self.mem_used_max.fetch_max(bytes, Relaxed);
        }
    }
}

/// `mm_stat`'s nine columns, as numbers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MmStat {
    /// Bytes of the pages stored, before compression.
    pub orig_data_size: u64,
    /// Bytes after compression (huge pages count 4096).
    pub compr_data_size: u64,
    /// Bytes of memory the device holds: the pool's pages, fragmentation
    /// included, and the slot table.
    pub mem_used_total: u64,
    /// The memory limit (0: none).
    pub mem_limit: u64,
    /// The most `mem_used_total` has been.
    pub mem_used_max: u64,
    /// Same-filled pages (nothing allocated for them).
    pub same_pages: u64,
    /// Pages freed by compaction.
    pub pages_compacted: u64,
    /// Pages stored uncompressed.
    pub huge_pages: u64,
    /// Pages ever stored uncompressed since the device was set up.
    pub huge_pages_since: u64,
}

impl core::fmt::Display for MmStat {
    /// The nine columns as the kernel's `mm_stat_show` prints them.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let s = self;
        writeln!(
            f,
            "{:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
            s.orig_data_size,
            s.compr_data_size,
            s.mem_used_total,
            s.mem_limit,
            s.mem_used_max,
            s.same_pages,
            s.pages_compacted,
            s.huge_pages,
            s.huge_pages_since
        )
    }
}
