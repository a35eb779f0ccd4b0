//! zram's statistics in the kernel's formats: `mm_stat` (9 columns),
//! `io_stat`, `debug_stat` and debugfs `block_state`
//! (`Documentation/admin-guide/blockdev/zram.rst`).
//!
//! Owns the counters and their text. The device updates the counters; this
//! module only adds them up and prints them.

use crate::device::{Device, PAGE_SIZE};
use crate::slot::flags;
use std::fmt::Write;
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

impl Device {
    /// The memory the device holds, as `mem_used_total` shows it and
    /// `mem_limit` bounds it: the pool's pages, fragmentation included, and
    /// the slot table's directory and chunks. Linux's zram allocates its
    /// whole table at `disksize` time; here it grows with the pages written
    /// (a one-byte write every 16 MiB costs a 64 KiB chunk), so it is
    /// counted with the pool, or a device far larger than the memory it
    /// may use would grow past its limit unseen.
    pub(crate) fn mem_used(&self) -> u64 {
        self.pool.zs_get_total_pages() * PAGE_SIZE as u64 + self.slots.bytes()
    }

    /// `mm_stat` as numbers.
    pub fn mm_stat_values(&self) -> MmStat {
        let c = &self.counters;
        let mem_used_total = self.mem_used();
        MmStat {
            orig_data_size: c.total(|h| &h.pages_stored) * PAGE_SIZE as u64,
            compr_data_size: c.total(|h| &h.compr_data_size),
            mem_used_total,
            mem_limit: self.mem_limit(),
            mem_used_max: c.mem_used_max.load(Relaxed).max(mem_used_total),
            same_pages: c.total(|h| &h.same_pages),
            pages_compacted: self.pool.zs_pool_stats().pages_compacted,
            huge_pages: c.total(|h| &h.huge_pages),
            huge_pages_since: c.total(|h| &h.huge_pages_since),
        }
    }

    /// `mm_stat` as the kernel prints it.
    pub fn mm_stat(&self) -> String {
        self.mm_stat_values().to_string()
    }

    /// `io_stat`: failed reads, failed writes, invalid I/O, free
    /// notifications (and discarded pages).
    pub fn io_stat(&self) -> String {
        let c = &self.counters;
        format!(
            "{:>8} {:>8} {:>8} {:>8}\n",
            c.failed_reads.load(Relaxed),
            c.failed_writes.load(Relaxed),
            c.invalid_io.load(Relaxed),
            c.notify_free.load(Relaxed)
        )
    }

    /// `debug_stat`: the format version and `miss_free` (free
    /// notifications that lost the slot trylock).
    pub fn debug_stat(&self) -> String {
        format!("version: 1\n{:>8}\n", self.counters.miss_free.load(Relaxed))
    }

    /// debugfs `block_state`: one line per stored page with its index, last
    /// access (seconds.microseconds since the device started) and flags
    /// (`s` same, `w` written back, `h` huge, `i` idle, `r` recompressed,
    /// `n` incompressible).
    pub fn block_state(&self) -> String {
        let mut out = String::new();
        for (index, slot) in self.slots.iter() {
            let guard = slot.lock();
            if !guard.allocated() {
                continue;
            }
            let f = guard.flags();
            let mark = |flag: u32, c: char| if f & flag != 0 { c } else { '.' };
            let _ = writeln!(
                out,
                "{index:>12} {:>12}.{:06} {}{}{}{}{}{}",
                guard.ac_time(),
                0,
                mark(flags::SAME, 's'),
                mark(flags::WB, 'w'),
                mark(flags::HUGE, 'h'),
                mark(flags::IDLE, 'i'),
                mark(flags::COMP_PRIORITY_BIT1 | flags::COMP_PRIORITY_BIT2, 'r'),
                mark(flags::INCOMPRESSIBLE, 'n'),
            );
        }
        out
    }
}
