//! Criterion benchmarks of the quicklist series' experiment: the quicklist hit path
//! (pinned handle and shared API) next to allocating and zeroing a fresh
//! 4 KiB page through the per-CPU lists, and building plus tearing down one
//! small address space (17 table pages, 168 mappings) with page tables from
//! quicklists or straight from the allocator. Real-memory 64 MiB map.
//!
//! Owns nothing shared: the per-level table of that series and the heap peers
//! are in `mmkit bench quicklist` (the CLI's `src/bench/quicklist.rs`).
//! `cargo bench -p mmkit-quicklist --bench quicklist`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder, PageAllocator, Pfn};
use mmkit_quicklist::pagetable::{PageTables, TableSource};
use mmkit_quicklist::Quicklists;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

fn real_map() -> Arc<PageAllocator> {
    Arc::new(
        MemoryMapBuilder::with_memory(64 << 20)
            .backing(Backing::RealMemory(HugePages::None))
            .build()
            .expect("a 64 MiB real map builds"),
    )
}

fn hit_path(c: &mut Criterion) {
    let mm = real_map();
    let ql = Quicklists::new(Arc::clone(&mm), 1).expect("quicklists");
    let mut group = c.benchmark_group("quicklist");
    group.throughput(Throughput::Elements(1));
    {
        let mut cpu = ql.pin_cpu(0).expect("pin");
        group.bench_function("hit_alloc_free/pinned", |b| {
            b.iter(|| {
                let pfn = cpu.alloc(0, Gfp::KERNEL, None).expect("alloc");
                cpu.free_page(0, None, black_box(pfn)).expect("free");
            });
        });
        // The same hit with the page as a `QuickPage`: never written, so
        // it goes back without a scan.
        group.bench_function("hit_alloc_free/pinned_page", |b| {
            b.iter(|| {
                let page = cpu.alloc_page(0, Gfp::KERNEL, None).expect("alloc");
                cpu.free_quick_page(None, black_box(page)).expect("free");
            });
        });
    }
    group.bench_function("hit_alloc_free/shared", |b| {
        b.iter(|| {
            let pfn = ql.quicklist_alloc(0, Gfp::KERNEL, None).expect("alloc");
            ql.quicklist_free_page(0, None, black_box(pfn)).expect("free");
        });
    });
    group.bench_function("hit_alloc_free/shared_page", |b| {
        b.iter(|| {
            let page = ql.alloc_page(0, Gfp::KERNEL, None).expect("alloc");
            ql.free_quick_page(None, black_box(page)).expect("free");
        });
    });
    group.bench_function("alloc_zero_4k_free", |b| {
        b.iter(|| {
            let pfn = mm.alloc_pages(Gfp::KERNEL | Gfp::ZERO, 0).expect("alloc");
            mm.free_pages(black_box(pfn), 0).expect("free");
        });
    });
    group.finish();
}

fn one_process(tables: &PageTables, data: Pfn) {
    let mut space = tables.new_address_space().expect("pgd");
    for (base, pages) in [(0x40_0000u64, 32u64), (0x100_0000, 64), (0x7f00_0000_0000, 48), (0x7fff_ff00_0000, 24)] {
        for page in 0..pages {
            space.map(base + page * 4096, data).expect("map");
        }
    }
    black_box(space.translate(0x40_0000));
}

fn page_tables(c: &mut Criterion) {
    let mm = real_map();
    let data = mm.alloc_pages(Gfp::HIGHUSER_MOVABLE, 0).expect("data page");
    let mut group = c.benchmark_group("pagetable_churn");
    group.throughput(Throughput::Elements(1));
    for (name, source) in [("quicklists", TableSource::Quicklists), ("no_quicklists", TableSource::Allocator)] {
        let tables = PageTables::new(Arc::clone(&mm), source).expect("tables");
        group.bench_function(name, |b| b.iter(|| one_process(&tables, data)));
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(2));
    targets = hit_path, page_tables
}
criterion_main!(benches);
