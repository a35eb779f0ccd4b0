//! Criterion benchmarks of the buddy allocator alone (maps built without
//! per-CPU lists): one order-0 or order-9 `alloc_pages(Gfp::KERNEL, ..)` +
//! `free_pages` pair per iteration, on a fresh 4 GiB metadata-only map and on
//! one fragmented first; each through the shared API and, as
//! `<case>/locked_zone`, through CPU 0's pinned handle holding the zone
//! locked (`PinnedCpu::lock_zone`).
//!
//! Owns only the criterion wiring of these cases. The same cases, with peers
//! and a JSON report, are `mmkit bench buddy` (`cli/src/bench/buddy.rs`);
//! both fragment through `mmkit_bench::fragment`, so both measure the same
//! states. Must not grow workloads of its own. Measurement time is kept
//! short so the whole file runs in about a minute:
//! `cargo bench -p mmkit-bench --bench buddy`.

mod common;

use criterion::{criterion_group, criterion_main, Criterion};
use mmkit::{Gfp, PageAllocator};
use mmkit_bench::fragment::{self, SEED};
use mmkit_bench::subjects::{buddy_only_map, Mmkit};
use std::hint::black_box;

/// Bytes of every map.
const MAP_BYTES: u64 = 4 << 30;

fn fresh_map() -> PageAllocator {
    buddy_only_map(MAP_BYTES).expect("a 4 GiB PC map builds")
}

fn pair(c: &mut Criterion, name: &str, mm: &PageAllocator, order: u32) {
    c.bench_function(name, |b| {
        b.iter(|| {
            let pfn = black_box(mm.alloc_pages(Gfp::KERNEL, order).expect("alloc"));
            mm.free_pages(pfn, order).expect("free");
        });
    });
    let mut cpu = mm.pin_cpu(0).expect("CPU 0 is free to pin");
    let mut zone = cpu.lock_zone(Gfp::KERNEL).expect("the map has a zone for GFP_KERNEL");
    c.bench_function(&format!("{name}/locked_zone"), |b| {
        b.iter(|| {
            let pfn = black_box(zone.alloc_pages(Gfp::KERNEL, order).expect("alloc"));
            zone.free_pages(pfn, order).expect("free");
        });
    });
}

fn buddy(c: &mut Criterion) {
    let mm = fresh_map();
    pair(c, "buddy_order0_alloc_free", &mm, 0);
    pair(c, "buddy_order9_alloc_free", &mm, 9);
    drop(mm);

    // Allocate 90% of the free pages at order 0, free a pseudo-random half.
    let mm = fresh_map();
    let count = mm.nr_free_pages() * 9 / 10;
    let held = fragment::scatter(&mut Mmkit::new(&mm), count, SEED).expect("90% of memory");
    pair(c, "buddy_order0_alloc_free_fragmented", &mm, 0);
    drop((held, mm));

    // Allocate order-9 blocks until refused (quietly), free every other one.
    let mm = fresh_map();
    let held =
        fragment::alternate(&mut Mmkit::with_gfp(&mm, Gfp::KERNEL | Gfp::NOWARN), 9, u64::MAX).expect("free order 9");
    pair(c, "buddy_order9_alloc_free_fragmented", &mm, 9);
    drop((held, mm));
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = buddy
}
criterion_main!(benches);
