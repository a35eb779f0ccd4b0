//! Criterion benchmarks of contiguous ranges: 16384 pages allocated as one
//! range and freed, many times. Cases (µs per iteration = per 16384-page
//! operation):
//! - `free_contig_range/per_page`: `free_pages(pfn, 0)` for every page of a
//!   range from `alloc_contig_range` (as Linux freed a frozen range through
//!   `free_frozen_pages()` page by page, `mm/page_alloc.c`);
//! - `free_contig_range/batched`: one `free_contig_range` (the range in the
//!   largest aligned blocks, as `free_contig_range()` does);
//! - `alloc_contig_range`: allocating the range;
//! - `cma_alloc`: allocating the range from a CMA area (`mm/cma.c`).
//!
//! Owns only the criterion wiring. Only the named operation is timed; the
//! matching allocation or free runs outside the clock (`iter_custom`). The
//! workloads are `mmkit_bench::contig`'s, so `mmkit bench contig` times the
//! same code; this file must not grow its own.
//!
//! Run: `cargo bench -p mmkit-bench --bench contig`.

mod common;

use criterion::{criterion_group, criterion_main, Criterion};
use mmkit_bench::contig::{ContigBench, RANGE_PAGES};
use std::time::{Duration, Instant};

fn contig(c: &mut Criterion) {
    let bench = ContigBench::new(RANGE_PAGES).expect("benchmark map");

    let mut free = c.benchmark_group("free_contig_range");
    free.bench_function("per_page", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let pfn = bench.alloc_range().unwrap();
                let t = Instant::now();
                bench.free_per_page(pfn).unwrap();
                total += t.elapsed();
            }
            total
        })
    });
    free.bench_function("batched", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let pfn = bench.alloc_range().unwrap();
                let t = Instant::now();
                bench.free_batched(pfn).unwrap();
                total += t.elapsed();
            }
            total
        })
    });
    free.finish();

    c.bench_function("alloc_contig_range", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let t = Instant::now();
                let pfn = bench.alloc_range().unwrap();
                total += t.elapsed();
                bench.free_batched(pfn).unwrap();
            }
            total
        })
    });

    c.bench_function("cma_alloc", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let t = Instant::now();
                let pfn = bench.cma_alloc().unwrap();
                total += t.elapsed();
                bench.cma_release(pfn).unwrap();
            }
            total
        })
    });
}

criterion_group! {
    name = benches;
    // An iteration takes hundreds of microseconds: more samples and a longer
    // measurement than the shared settings, so each sample sees many.
    config = common::config().sample_size(50).measurement_time(Duration::from_secs(6));
    targets = contig
}
criterion_main!(benches);
