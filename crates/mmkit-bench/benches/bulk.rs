//! Criterion benchmarks of the bulk interfaces (`alloc_pages_bulk()` and
//! `free_pages_bulk()`, after Linux's `__alloc_pages_bulk()` in
//! `mm/page_alloc.c`): one `alloc_pages_bulk(Gfp::KERNEL, ..)` of N order-0
//! pages into a `[None; N]` array plus one `free_pages_bulk` of the result
//! per iteration, for N = 1, 8, 64, 256 (throughput in pages, so criterion
//! reports pages/s), next to one `alloc_pages` + `free_pages` pair. Shared
//! API, fresh 4 GiB metadata-only map, per-CPU lists on.
//!
//! Owns only the criterion wiring of these cases; every batch size from 1
//! to 256, each step timed on its own, is `mmkit bench bulk`
//! (`cli/src/bench/bulk.rs`). Must not grow workloads the command line lacks.
//! Measurement time is kept short so the whole file runs in well under a
//! minute: `cargo bench -p mmkit-bench --bench bulk`.

mod common;

use criterion::measurement::WallTime;
use criterion::{criterion_group, criterion_main, BenchmarkGroup, BenchmarkId, Criterion, Throughput};
use mmkit::{Gfp, MemoryMapBuilder, PageAllocator, Pfn};
use std::hint::black_box;

/// Bytes of the map.
const MAP_BYTES: u64 = 4 << 30;

/// Allocates `N` pages in one call into a fresh `[None; N]` and frees them in
/// one call.
fn bulk_round<const N: usize>(mm: &PageAllocator, pfns: &mut Vec<Pfn>) {
    let mut pages: [Option<Pfn>; N] = [None; N];
    let filled = mm.alloc_pages_bulk(Gfp::KERNEL, &mut pages);
    assert_eq!(filled, N, "alloc_pages_bulk");
    pfns.clear();
    pfns.extend(pages.iter().flatten().copied());
    mm.free_pages_bulk(black_box(pfns)).expect("free_pages_bulk");
}

fn bench_bulk<const N: usize>(group: &mut BenchmarkGroup<'_, WallTime>, mm: &PageAllocator) {
    let mut pfns = Vec::with_capacity(N);
    group.throughput(Throughput::Elements(N as u64));
    group.bench_function(BenchmarkId::new("bulk", N), |b| b.iter(|| bulk_round::<N>(mm, &mut pfns)));
}

fn bulk(c: &mut Criterion) {
    let mm = MemoryMapBuilder::with_memory(MAP_BYTES).build().expect("a 4 GiB PC map builds");
    let mut group = c.benchmark_group("order0_alloc_free");
    group.throughput(Throughput::Elements(1));
    group.bench_function("single", |b| {
        b.iter(|| {
            let pfn = black_box(mm.alloc_pages(Gfp::KERNEL, 0).expect("alloc"));
            mm.free_pages(pfn, 0).expect("free");
        });
    });
    bench_bulk::<1>(&mut group, &mm);
    bench_bulk::<8>(&mut group, &mm);
    bench_bulk::<64>(&mut group, &mm);
    bench_bulk::<256>(&mut group, &mm);
    group.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = bulk
}
criterion_main!(benches);
