//! Criterion benchmarks of single-block allocation: one order-0 or order-9
//! `alloc_pages(Gfp::KERNEL, ..)` + `free_pages` pair per iteration, on a
//! fresh 4 GiB metadata-only map and on one fragmented first. Each case
//! runs as `<case>` on a map with the builder's defaults (per-CPU lists and
//! cache on), as `<case>/lists_off` on a map built without per-CPU lists
//! (the buddy alone), and as `<case>/locked_zone` through CPU 0's pinned
//! handle holding the lists-off map's zone locked (`PinnedCpu::lock_zone`):
//! the rows `mmkit`, `mmkit_lists_off` and `mmkit_locked_zone` of
//! `mmkit bench buddy`.
//!
//! Owns only the criterion wiring of these cases. The same cases, with peers
//! and a JSON report, are `mmkit bench buddy` (`cli/src/bench/buddy.rs`);
//! both fragment through `mmkit_bench::fragment`, so both measure the same
//! states. Must not grow workloads of its own. Measurement time is kept
//! short so the whole file runs in a minute or two:
//! `cargo bench -p mmkit-bench --bench buddy`.

mod common;

use criterion::{criterion_group, criterion_main, Criterion};
use mmkit::{Cpus, Report};
use mmkit::{Gfp, PageAllocator};
use mmkit_bench::fragment::{self, SEED};
use mmkit_bench::subjects::{buddy_only_map, default_map, Mmkit};
use std::hint::black_box;

/// Bytes of every map.
const MAP_BYTES: u64 = 4 << 30;

/// A fresh map with the builder's defaults and one with per-CPU lists off.
fn fresh_maps() -> (PageAllocator, PageAllocator) {
    (default_map(MAP_BYTES).expect("a 4 GiB PC map builds"), buddy_only_map(MAP_BYTES).expect("a 4 GiB PC map builds"))
}

fn pair_on(c: &mut Criterion, name: &str, mm: &PageAllocator, order: u32) {
    c.bench_function(name, |b| {
        b.iter(|| {
            let pfn = black_box(mm.alloc_pages(Gfp::KERNEL, order).expect("alloc"));
            mm.free_pages(pfn, order).expect("free");
        });
    });
}

fn pair(c: &mut Criterion, name: &str, (default, lists_off): &(PageAllocator, PageAllocator), order: u32) {
    pair_on(c, name, default, order);
    pair_on(c, &format!("{name}/lists_off"), lists_off, order);
    let mut cpu = Cpus::new(lists_off).pin_cpu(0).expect("CPU 0 is free to pin");
    let mut zone = cpu.lock_zone(Gfp::KERNEL).expect("the map has a zone for GFP_KERNEL");
    c.bench_function(&format!("{name}/locked_zone"), |b| {
        b.iter(|| {
            let pfn = black_box(zone.alloc_pages(Gfp::KERNEL, order).expect("alloc"));
            zone.free_pages(pfn, order).expect("free");
        });
    });
}

fn buddy(c: &mut Criterion) {
    let maps = fresh_maps();
    pair(c, "buddy_order0_alloc_free", &maps, 0);
    pair(c, "buddy_order9_alloc_free", &maps, 9);
    drop(maps);

    // Allocate 90% of the free pages at order 0, free a pseudo-random half.
    let maps = fresh_maps();
    let count = Report::new(&maps.0).nr_free_pages() * 9 / 10;
    let held = [&maps.0, &maps.1].map(|mm| fragment::scatter(&mut Mmkit::new(mm), count, SEED).expect("90% of memory"));
    pair(c, "buddy_order0_alloc_free_fragmented", &maps, 0);
    drop((held, maps));

    // Allocate order-9 blocks until refused (quietly), free every other one.
    let maps = fresh_maps();
    let held = [&maps.0, &maps.1].map(|mm| {
        fragment::alternate(&mut Mmkit::with_gfp(mm, Gfp::KERNEL | Gfp::NOWARN), 9, u64::MAX).expect("free order 9")
    });
    pair(c, "buddy_order9_alloc_free_fragmented", &maps, 9);
    drop((held, maps));
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = buddy
}
criterion_main!(benches);
