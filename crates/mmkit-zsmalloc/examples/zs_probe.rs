//! Instruction counts of zsmalloc's calls, for callgrind: one thread, a
//! raw-keyed pool (as zram's), `N` objects of 200 to 3,200 bytes (a fixed
//! pseudo-random sequence) allocated with `zs_malloc_copy_raw`, then freed
//! with `zs_free_raw`, twice over; then the same on a second pool, freed
//! with `zs_free_deferred_raw` and a flush. Each phase is a function of its
//! own, so that
//!
//! ```sh
//! cargo build --release -p mmkit-zsmalloc --example zs_probe
//! taskset -c 0 valgrind --tool=callgrind --callgrind-out-file=zs.out target/release/examples/zs_probe 20000
//! callgrind_annotate --inclusive=yes --tree=calling zs.out
//! ```
//!
//! gives each phase's instructions and those of the calls it makes
//! (`zs_malloc_copy_raw` called from `phase_alloc`, `zs_free_raw` from
//! `phase_free`, …); divided by the calls, the cost of one. The drain's
//! is `deferred_drain`'s over the 40,000 queued objects (the worker's runs
//! and the flush's). One CPU (`taskset`): the page allocator's per-CPU
//! lists the probe fills and empties then do not depend on where the
//! scheduler runs it. The deferred pool has a page allocator of its own: its
//! drain runs on the pool's worker as well as in the flush, as the thread
//! scheduler interleaves them, and it would otherwise leave the page
//! allocator of the synchronous phases in a state that differs from run to
//! run (about ±10 instructions a call). `pairs` is the `zs_malloc_free/*`
//! loop of `mmkit bench zsmalloc` (one object kept in the class).

use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder, PageAllocator};
use mmkit_zsmalloc::{RawKey, ZsConfig, ZsPool};
use std::hint::black_box;
use std::sync::Arc;

const GFP: Gfp = Gfp::NOIO.union(Gfp::HIGHMEM).union(Gfp::MOVABLE);

#[inline(never)]
fn phase_alloc(pool: &ZsPool, key: &RawKey, sizes: &[usize], data: &[u8]) -> Vec<u64> {
    let mut words = Vec::with_capacity(sizes.len());
    for &size in sizes {
        words.push(pool.zs_malloc_copy_raw(key, &data[..size], GFP, 0).unwrap());
    }
    words
}

/// [`phase_alloc`] for the deferred pool (a phase of its own, so that the
/// synchronous pool's allocations are counted apart).
#[inline(never)]
fn phase_fill_deferred(pool: &ZsPool, key: &RawKey, sizes: &[usize], data: &[u8]) -> Vec<u64> {
    let mut words = Vec::with_capacity(sizes.len());
    for &size in sizes {
        words.push(pool.zs_malloc_copy_raw(key, &data[..size], GFP, 0).unwrap());
    }
    words
}

#[inline(never)]
fn phase_free(pool: &ZsPool, key: &RawKey, words: Vec<u64>) {
    for w in words {
        pool.zs_free_raw(key, w).unwrap();
    }
}

#[inline(never)]
fn phase_free_deferred(pool: &ZsPool, key: &RawKey, words: Vec<u64>) {
    for w in words {
        pool.zs_free_deferred_raw(key, w).unwrap();
    }
}

#[inline(never)]
fn phase_flush(pool: &ZsPool) {
    pool.zs_free_deferred_flush();
}

#[inline(never)]
fn phase_pairs(pool: &ZsPool, size: usize, n: usize) {
    for _ in 0..n {
        let h = pool.zs_malloc(size, GFP, 0).unwrap();
        let _ = pool.zs_free(black_box(h));
    }
}

fn map() -> Arc<PageAllocator> {
    Arc::new(MemoryMapBuilder::with_memory(512 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap())
}

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let (pool, key) = ZsPool::with_raw_key("probe", map(), ZsConfig::default()).unwrap();
    let (deferred, deferred_key) = ZsPool::with_raw_key("probe-deferred", map(), ZsConfig::default()).unwrap();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let sizes: Vec<usize> = (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            200 + (x % 3001) as usize
        })
        .collect();
    let data = vec![0x5a; 4096];
    for _ in 0..2 {
        let words = phase_alloc(&pool, &key, &sizes, &data);
        phase_free(&pool, &key, words);
    }
    let anchor = pool.zs_malloc(256, GFP, 0).unwrap();
    phase_pairs(&pool, 256, n);
    let _ = pool.zs_free(anchor);
    for _ in 0..2 {
        let words = phase_fill_deferred(&deferred, &deferred_key, &sizes, &data);
        phase_free_deferred(&deferred, &deferred_key, words);
        phase_flush(&deferred);
    }
    assert_eq!(pool.zs_get_total_pages() + deferred.zs_get_total_pages(), 0);
    println!("{} stats {:?}", n, deferred.deferred_stats());
}
