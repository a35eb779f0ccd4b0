//! zram's statistics in the kernel's formats: `mm_stat` (9 columns),
//! `io_stat`, `debug_stat` and debugfs `block_state`
//! (`Documentation/admin-guide/blockdev/zram.rst`).
//!
//! Owns the counters' text. The counters are `counters`'s, a part of the
//! device the I/O paths update; this module only adds them up and prints
//! them.

use crate::counters::MmStat;
use crate::device::Device;
use crate::slot::flags;
use crate::PAGE_SIZE;
use std::fmt::Write;
use std::sync::atomic::Ordering::Relaxed;

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
