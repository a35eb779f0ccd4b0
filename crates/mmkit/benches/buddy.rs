//! Criterion benchmarks of the buddy allocator alone (maps built without
//! per-CPU lists): one order-0 or order-9 `alloc_pages(Gfp::KERNEL, ..)` +
//! `free_pages` pair per iteration, on a fresh 4 GiB metadata-only map and on
//! one fragmented first.
//!
//! Owns nothing shared: the same cases, with peers and a JSON report, are in
//! `mmkit bench buddy` (the CLI's `src/bench/buddy.rs`); the fragmentation
//! recipes here are copies of the CLI's (`src/bench/fragment.rs`) so both
//! measure the same states. Measurement time is kept short so the whole file
//! runs in about a minute: `cargo bench -p mmkit --bench buddy`.

use criterion::{criterion_group, criterion_main, Criterion};
use mmkit::{Gfp, MemoryMapBuilder, PageAllocator, Pfn};
use std::hint::black_box;
use std::time::Duration;

/// Bytes of every map.
const MAP_BYTES: u64 = 4 << 30;

/// Seed of the order-0 fragmentation (the CLI's `fragment::SEED`).
const SEED: u64 = 0x6d6d_6b69_745f_6d6d;

fn fresh_map() -> PageAllocator {
    MemoryMapBuilder::with_memory(MAP_BYTES).per_cpu_lists(false).build().expect("a 4 GiB PC map builds")
}

/// xorshift64* (the CLI's `XorShift64`): the top bit of each output is a coin.
fn coins(seed: u64) -> impl FnMut() -> bool {
    let mut x = seed;
    move || {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 63 == 1
    }
}

/// Allocates 90% of the free pages at order 0, frees a pseudo-random half;
/// returns the pages still held.
fn scatter(mm: &PageAllocator) -> Vec<Pfn> {
    let count = mm.nr_free_pages() * 9 / 10;
    let all: Vec<Pfn> = (0..count).map(|_| mm.alloc_pages(Gfp::KERNEL, 0).expect("90% of memory")).collect();
    let mut coin = coins(SEED);
    let mut held = Vec::with_capacity(all.len() / 2 + 1);
    for pfn in all {
        if coin() {
            mm.free_pages(pfn, 0).expect("free what was allocated");
        } else {
            held.push(pfn);
        }
    }
    held
}

/// Allocates order-9 blocks until refused, frees every other one; returns
/// the blocks still held.
fn alternate(mm: &PageAllocator) -> Vec<Pfn> {
    let mut all = Vec::new();
    while let Ok(pfn) = mm.alloc_pages(Gfp::KERNEL | Gfp::NOWARN, 9) {
        all.push(pfn);
    }
    let mut held = Vec::with_capacity(all.len() / 2 + 1);
    for (i, pfn) in all.into_iter().enumerate() {
        if i % 2 == 0 {
            mm.free_pages(pfn, 9).expect("free what was allocated");
        } else {
            held.push(pfn);
        }
    }
    held
}

fn pair(c: &mut Criterion, name: &str, mm: &PageAllocator, order: u32) {
    c.bench_function(name, |b| {
        b.iter(|| {
            let pfn = black_box(mm.alloc_pages(Gfp::KERNEL, order).expect("alloc"));
            mm.free_pages(pfn, order).expect("free");
        });
    });
}

fn buddy(c: &mut Criterion) {
    let mm = fresh_map();
    pair(c, "buddy_order0_alloc_free", &mm, 0);
    pair(c, "buddy_order9_alloc_free", &mm, 9);
    drop(mm);

    let mm = fresh_map();
    let held = scatter(&mm);
    pair(c, "buddy_order0_alloc_free_fragmented", &mm, 0);
    drop((held, mm));

    let mm = fresh_map();
    let held = alternate(&mm);
    pair(c, "buddy_order9_alloc_free_fragmented", &mm, 9);
    drop((held, mm));
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2));
    targets = buddy
}
criterion_main!(benches);
