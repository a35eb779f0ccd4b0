//! Instruction counts of zsmalloc's calls, for callgrind: one thread, a
//! raw-keyed pool (as zram's), `N` objects of 200 to 3,200 bytes (a fixed
//! pseudo-random sequence) allocated with `zs_malloc_copy_raw`, then freed
//! with `zs_free_raw` or `zs_free_deferred_raw` and a flush, twice over.
//! Each phase is a function of its own, so that
//!
//! ```sh
//! cargo build --release -p mmkit-zsmalloc --example zs_probe
//! valgrind --tool=callgrind --callgrind-out-file=zs.out target/release/examples/zs_probe 20000
//! callgrind_annotate --inclusive=yes zs.out | grep zs_probe::phase
//! ```
//!
//! gives each phase's instructions; divided by `N`, the cost of one call.
//! `pairs` is the `zs_malloc_free/*` loop of `mmkit bench zsmalloc` (one
//! object kept in the class).

use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder};
use mmkit_zsmalloc::{RawKey, ZsConfig, ZsPool};
use std::hint::black_box;
use std::sync::Arc;

const GFP: Gfp = Gfp::NOIO.union(Gfp::HIGHMEM).union(Gfp::MOVABLE);

#[inline(never)]
fn phase_alloc(pool: &ZsPool, key: &RawKey, sizes: &[usize], data: &[u8]) -> Vec<u64> {
    sizes.iter().map(|&size| pool.zs_malloc_copy_raw(key, &data[..size], GFP, 0).unwrap()).collect()
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
        pool.zs_free(black_box(h)).unwrap();
    }
}

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(20_000);
    let mm = Arc::new(
        MemoryMapBuilder::with_memory(512 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap(),
    );
    let (pool, key) = ZsPool::with_raw_key("probe", mm, ZsConfig::default()).unwrap();
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
        let words = phase_alloc(&pool, &key, &sizes, &data);
        phase_free_deferred(&pool, &key, words);
        phase_flush(&pool);
    }
    let anchor = pool.zs_malloc(256, GFP, 0).unwrap();
    phase_pairs(&pool, 256, n);
    pool.zs_free(anchor).unwrap();
    assert_eq!(pool.zs_get_total_pages(), 0);
    println!("{} stats {:?}", n, pool.deferred_stats());
}
