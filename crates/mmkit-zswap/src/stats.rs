//! zswap's statistics, named as in its debugfs directory
//! (`/sys/kernel/debug/zswap/`, `mm/zswap.c`'s `zswap_debugfs_init`).
//!
//! Owns the counters and their text form; who counts what is `zswap.rs`'s.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The live counters.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) stored_pages: AtomicU64,
    pub(crate) same_filled_pages: AtomicU64,
    pub(crate) written_back_pages: AtomicU64,
    pub(crate) pool_limit_hit: AtomicU64,
    pub(crate) reject_compress_fail: AtomicU64,
    pub(crate) reject_compress_poor: AtomicU64,
    pub(crate) reject_alloc_fail: AtomicU64,
    pub(crate) reject_reclaim_fail: AtomicU64,
    pub(crate) reject_kmemcache_fail: AtomicU64,
    pub(crate) decompress_fail: AtomicU64,
    pub(crate) stored_bytes: AtomicU64,
}

impl Counters {
    pub(crate) fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Relaxed);
    }
}

/// A snapshot of zswap's statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZswapStats {
    /// Bytes the pool's pages take (`pool_total_size`).
    pub pool_total_size: u64,
    /// Pages held, same-filled ones included (`stored_pages`).
    pub stored_pages: u64,
    /// Of those, pages kept as their repeated word (`same_filled_pages`,
    /// as kernels before 6.12 counted them).
    pub same_filled_pages: u64,
    /// Compressed bytes of the pages held in the pool (no debugfs name;
    /// the ratio's denominator before zsmalloc's packing).
    pub compressed_bytes: u64,
    /// Entries written back to the swap device (`written_back_pages`).
    pub written_back_pages: u64,
    /// Stores refused because the pool was full (`pool_limit_hit`).
    pub pool_limit_hit: u64,
    /// The compressor failed (`reject_compress_fail`).
    pub reject_compress_fail: u64,
    /// A page did not compress below a page (`reject_compress_poor`).
    pub reject_compress_poor: u64,
    /// zsmalloc had no memory (`reject_alloc_fail`).
    pub reject_alloc_fail: u64,
    /// Writeback to make room failed (`reject_reclaim_fail`).
    pub reject_reclaim_fail: u64,
    /// No entry could be allocated (`reject_kmemcache_fail`).
    pub reject_kmemcache_fail: u64,
    /// Loads whose data did not decompress (`decompress_fail`).
    pub decompress_fail: u64,
}

impl ZswapStats {
    pub(crate) fn from_counters(c: &Counters, pool_total_size: u64) -> Self {
        Self {
            pool_total_size,
            stored_pages: c.stored_pages.load(Relaxed),
            same_filled_pages: c.same_filled_pages.load(Relaxed),
            compressed_bytes: c.stored_bytes.load(Relaxed),
            written_back_pages: c.written_back_pages.load(Relaxed),
            pool_limit_hit: c.pool_limit_hit.load(Relaxed),
            reject_compress_fail: c.reject_compress_fail.load(Relaxed),
            reject_compress_poor: c.reject_compress_poor.load(Relaxed),
            reject_alloc_fail: c.reject_alloc_fail.load(Relaxed),
            reject_reclaim_fail: c.reject_reclaim_fail.load(Relaxed),
            reject_kmemcache_fail: c.reject_kmemcache_fail.load(Relaxed),
            decompress_fail: c.decompress_fail.load(Relaxed),
        }
    }

    /// The debugfs files and their values, one `name value` per line, in
    /// the directory's (alphabetical) order.
    pub fn debugfs(&self) -> String {
        let rows = [
            ("decompress_fail", self.decompress_fail),
            ("pool_limit_hit", self.pool_limit_hit),
            ("pool_total_size", self.pool_total_size),
            ("reject_alloc_fail", self.reject_alloc_fail),
            ("reject_compress_fail", self.reject_compress_fail),
            ("reject_compress_poor", self.reject_compress_poor),
            ("reject_kmemcache_fail", self.reject_kmemcache_fail),
            ("reject_reclaim_fail", self.reject_reclaim_fail),
            ("same_filled_pages", self.same_filled_pages),
            ("stored_pages", self.stored_pages),
            ("written_back_pages", self.written_back_pages),
        ];
        rows.iter().map(|(name, value)| format!("{name} {value}\n")).collect()
    }
}
