//! Criterion benchmarks of zsmalloc: a `zs_malloc` + `zs_free` pair by
//! object size (64 … 3000 bytes), with one object kept in the class so the
//! zspage stays, and the same pair through mimalloc. The memory and
//! release experiments are `mmkit bench zsmalloc`'s (`cli/src/bench/zsmalloc.rs`).
//! `cargo bench -p mmkit-bench --bench zsmalloc`.

mod common;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder};
use mmkit_bench::heap::{BlockLayout, HeapBlock, MiMalloc};
use mmkit_zsmalloc::ZsPool;
use std::hint::black_box;
use std::sync::Arc;

const GFP: Gfp = Gfp::NOIO.union(Gfp::HIGHMEM).union(Gfp::MOVABLE);

fn pairs(c: &mut Criterion) {
    let mm = Arc::new(
        MemoryMapBuilder::with_memory(256 << 20)
            .backing(Backing::RealMemory(HugePages::None))
            .build()
            .expect("a 256 MiB real map builds"),
    );
    let pool = ZsPool::zs_create_pool("bench", mm).expect("pool");
    let mut group = c.benchmark_group("zs_malloc_free");
    for size in [64usize, 256, 1024, 2048, 3000] {
        let anchor = pool.zs_malloc(size, GFP, 0).expect("anchor");
        group.bench_with_input(BenchmarkId::new("mmkit", size), &size, |b, &size| {
            b.iter(|| {
                let h = pool.zs_malloc(size, GFP, 0).expect("zs_malloc");
                pool.zs_free(black_box(h)).expect("zs_free");
            });
        });
        pool.zs_free(anchor).expect("free anchor");
        let layout = BlockLayout::new(size, 8).expect("layout");
        group.bench_with_input(BenchmarkId::new("mimalloc", size), &layout, |b, &layout| {
            b.iter(|| HeapBlock::<MiMalloc>::alloc(layout).expect("mimalloc").free());
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = common::config();
    targets = pairs
}
criterion_main!(benches);
