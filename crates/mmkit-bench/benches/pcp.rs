//! Criterion benchmarks of the per-CPU lists: one order-0
//! `alloc_pages(Gfp::KERNEL, 0)` + `free_pages` pair per iteration on a
//! fresh 4 GiB metadata-only map (per-CPU lists on), through each of the
//! four ways in:
//! - `pcp_order0_alloc_free/shared`: `PageAllocator`, served by the
//!   per-CPU order-0 cache in restartable sequences, no lock;
//! - `pcp_order0_alloc_free/pcp_lists`: the same calls on a map built
//!   with `cpu_caches(false)`: the locked per-CPU lists;
//! - `pcp_order0_alloc_free/pinned`: a `PinnedCpu` handle for CPU 0, the
//!   lists held by the thread, no lock per operation;
//! - `pcp_order0_alloc_free/cpu_handle`: a `CpuHandle` for CPU 0, the lists
//!   of a fixed CPU, locked per operation.
//!
//! Owns only the criterion wiring of these cases: the one- and two-thread
//! cases with peers and a JSON report are `mmkit bench pcp`
//! (`cli/src/bench/pcp.rs`). Must not grow workloads of its own.
//! Measurement time is kept short so the whole file runs in well under a
//! minute: `cargo bench -p mmkit-bench --bench pcp`.

mod common;

use criterion::{criterion_group, criterion_main, Criterion};
use mmkit::Cpus;
use mmkit::{Gfp, MemoryMapBuilder, PageAllocator};
use std::hint::black_box;

/// Bytes of every map.
const MAP_BYTES: u64 = 4 << 30;

fn fresh_map() -> PageAllocator {
    MemoryMapBuilder::with_memory(MAP_BYTES).build().expect("a 4 GiB PC map builds")
}

fn pcp(c: &mut Criterion) {
    let mut group = c.benchmark_group("pcp_order0_alloc_free");

    let mm = fresh_map();
    group.bench_function("shared", |b| {
        b.iter(|| {
            let pfn = black_box(mm.alloc_pages(Gfp::KERNEL, 0).expect("alloc"));
            mm.free_pages(pfn, 0).expect("free");
        });
    });
    drop(mm);

    let mm = MemoryMapBuilder::with_memory(MAP_BYTES).cpu_caches(false).build().expect("a 4 GiB PC map builds");
    group.bench_function("pcp_lists", |b| {
        b.iter(|| {
            let pfn = black_box(mm.alloc_pages(Gfp::KERNEL, 0).expect("alloc"));
            mm.free_pages(pfn, 0).expect("free");
        });
    });
    drop(mm);

    let mm = fresh_map();
    let mut cpu = Cpus::new(&mm).pin_cpu(0).expect("pin cpu 0");
    group.bench_function("pinned", |b| {
        b.iter(|| {
            let pfn = black_box(cpu.alloc_pages(Gfp::KERNEL, 0).expect("alloc"));
            cpu.free_pages(pfn, 0).expect("free");
        });
    });
    drop(cpu);
    drop(mm);

    let mm = fresh_map();
    let cpu = Cpus::new(&mm).cpu(0).expect("cpu 0");
    group.bench_function("cpu_handle", |b| {
        b.iter(|| {
            let pfn = black_box(cpu.alloc_pages(Gfp::KERNEL, 0).expect("alloc"));
            cpu.free_pages(pfn, 0).expect("free");
        });
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = pcp
}
criterion_main!(benches);
