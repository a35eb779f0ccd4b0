//! Suite `zsmalloc`: the compressed-object allocator under zram.
//!
//! - `zs_malloc_free/SIZE`: a `zs_malloc` + `zs_free` pair for objects of
//!   64 … 3000 bytes, next to mimalloc and the system allocator doing the
//!   same sizes.
//! - `memory/after_compact`: a million objects whose sizes are those of real
//!   4 KiB pages compressed with lz4 (pages of this program's own binary and
//!   of the system's shared libraries), a random half freed, then
//!   `zs_compact`: pages used against bytes stored.
//! - `release/Nthreads`: the experiment of Linux's 2026 series "reduce
//!   zs_free() latency on swap release path": 256 MiB worth of pages'
//!   objects freed from 1, 2 and 4 threads with the pre-series pool-locked
//!   free, the lock-light `zs_free` and `zs_free_deferred` (per-CPU batches,
//!   and one per-pool shard); the time until the callers return, and
//!   (`drained_ns`) until everything is freed; the deferred rows count the
//!   frees that fell back to a synchronous free (`fallback_frees`, the most of
//!   any run).
//!
//! Owns the workloads; timing and output are the harness's.

use super::harness::{measure, BenchError, CaseResult, CaseSpec, Contender, Settings, SuiteReport};
use super::summary::{Figure, Headline, Published, Row};
use super::{Progress, Suite};
use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder, PageAllocator};
use mmkit_bench::heap::{BlockLayout, HeapBlock, MiMalloc};
use mmkit_bench::subjects::names;
use mmkit_testkit::XorShift64;
use mmkit_zsmalloc::{DeferredLayout, Handle, ZsConfig, ZsPool};
use std::alloc::System;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

/// The suite as the registry lists it.
pub const SUITE: Suite = Suite {
    name: "zsmalloc",
    about: "zs_malloc+zs_free by size vs mimalloc and system; memory after compaction on lz4 page sizes; release from 1/2/4 threads (pool-locked, lock-light, deferred)",
    run,
    baselines: &[("release/", "deferred")],
    headline: Some(Headline {
        mmkit: Row { case: "release/1threads", imp: "deferred" },
        peer: Row { case: "release/1threads", imp: "pool_locked" },
        published: Some(Published {
            text: "3.27x",
            figure: Figure::SpeedUp(56.2 / 17.2),
            source: "mm/zsmalloc: reduce zs_free() latency on swap release path: 256 MB, 56.2 -> 17.2 ms",
        }),
    }),
};

const GFP: Gfp = Gfp::NOIO.union(Gfp::HIGHMEM).union(Gfp::MOVABLE);
const SIZES: [(usize, &str); 5] = [
    (64, "zs_malloc_free/64"),
    (256, "zs_malloc_free/256"),
    (1024, "zs_malloc_free/1024"),
    (2048, "zs_malloc_free/2048"),
    (3000, "zs_malloc_free/3000"),
];

fn real_map(bytes: u64) -> Result<Arc<PageAllocator>, BenchError> {
    let mm = MemoryMapBuilder::with_memory(bytes)
        .backing(Backing::RealMemory(HugePages::None))
        .build()
        .map_err(|e| BenchError::context("building the map", e))?;
    Ok(Arc::new(mm))
}

fn pool(mm: &Arc<PageAllocator>) -> Result<ZsPool, BenchError> {
    ZsPool::zs_create_pool("bench", mm.clone()).map_err(|e| BenchError::context("zs_create_pool", e))
}

fn zs_err(what: &'static str) -> impl Fn(mmkit_zsmalloc::ZsError) -> BenchError {
    move |e| BenchError::context(what, e)
}

/// [`zs_err`] for a refused free, which hands the handle back with its
/// error (dropped here: the run stops).
fn zs_free_err(what: &'static str) -> impl Fn((mmkit_zsmalloc::ZsError, mmkit_zsmalloc::Handle)) -> BenchError {
    move |(e, _)| BenchError::context(what, e)
}

fn heap_pair<A: mmkit_bench::heap::StatelessAlloc>(size: usize, n: u64) -> Result<(), BenchError> {
    let layout = BlockLayout::new(size, 8).ok_or_else(|| BenchError("bad layout".into()))?;
    for _ in 0..n {
        let block = HeapBlock::<A>::alloc(layout).ok_or_else(|| BenchError("heap allocation failed".into()))?;
        black_box(&block);
        block.free();
    }
    Ok(())
}

/// Compressed sizes of real 4 KiB pages: lz4 over this program's binary
/// and a few shared libraries; generated data when none can be read.
fn page_sizes(max_pages: usize) -> Vec<usize> {
    let mut files: Vec<std::path::PathBuf> = std::env::current_exe().into_iter().collect();
    for dir in ["/usr/lib/x86_64-linux-gnu", "/usr/lib", "/usr/bin"] {
        if let Ok(entries) = std::fs::read_dir(dir) {
            files.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_file()).take(40));
        }
    }
    let mut sizes = Vec::new();
    for file in files {
        let Ok(data) = std::fs::read(&file) else { continue };
        for page in data.chunks_exact(4096) {
            sizes.push(lz4_flex::block::compress(page).len().clamp(1, 4096));
            if sizes.len() >= max_pages {
                return sizes;
            }
        }
    }
    if sizes.is_empty() {
        let mut rng = XorShift64::new(7);
        sizes = (0..max_pages).map(|_| 200 + (rng.next_u64() % 3000) as usize).collect();
    }
    sizes
}

fn run(settings: &Settings, progress: &mut Progress<'_>) -> Result<SuiteReport, BenchError> {
    let mut cases: Vec<CaseResult> = Vec::new();
    let mut notes = Vec::new();
    let iters: u64 = settings.pick(200_000, 2_000);
    let mm = real_map(settings.pick(1 << 30, 64 << 20))?;
    let zs = pool(&mm)?;
    for (size, name) in SIZES {
        progress(name);
        let spec = CaseSpec { name, unit: "pair", units_per_iter: 1, iters, warmup_iters: iters / 10 };
        // One object stays allocated in the class, as in any pool in use:
        // otherwise every free empties the zspage and every allocation
        // builds a new one.
        let anchor = zs.zs_malloc(size, GFP, 0).map_err(zs_err("zs_malloc"))?;
        let zs = &zs;
        let mut contenders = [
            Contender::new(names::MMKIT, move |n| {
                for _ in 0..n {
                    let h = zs.zs_malloc(size, GFP, 0).map_err(zs_err("zs_malloc"))?;
                    zs.zs_free(black_box(h)).map_err(zs_free_err("zs_free"))?;
                }
                Ok(())
            }),
            Contender::new(names::MIMALLOC, move |n| heap_pair::<MiMalloc>(size, n)),
            Contender::new(names::SYSTEM, move |n| heap_pair::<System>(size, n)),
        ];
        cases.extend(measure(SUITE.name, spec, &mut contenders, settings.runs)?);
        zs.zs_free(anchor).map_err(zs_free_err("zs_free"))?;
    }
    drop(zs);

    progress("memory/after_compact");
    let objects = settings.pick(1_000_000, 20_000);
    let sizes = page_sizes(objects);
    cases.push(memory_case(&sizes, objects, settings)?);
    notes.push(format!(
        "memory/after_compact: object sizes of {} real 4 KiB pages compressed with lz4, {objects} objects, half freed at random; pages_used vs bytes_stored in the JSON",
        sizes.len()
    ));

    let release_objects = settings.pick((256usize << 20) / 4096, 2_000);
    for threads in [1usize, 2, 4] {
        let name: &'static str = match threads {
            1 => "release/1threads",
            2 => "release/2threads",
            _ => "release/4threads",
        };
        progress(name);
        cases.extend(release_case(name, threads, &sizes, release_objects, settings)?);
    }
    notes.push(format!(
        "release/*: {release_objects} objects (256 MiB of pages) freed by N threads; median_ns is the time until the callers return, drained_ns until every page is freed, fallback_frees the most frees of one run that fell back to a synchronous free; Linux's series reports 56.2 -> 17.2 ms for 256 MB single-threaded with per-CPU deferral"
    ));
    Ok(SuiteReport {
        suite: SUITE.name,
        description: format!(
            "{}: zs_malloc+zs_free pairs, memory after compaction, release from 1/2/4 threads on a real-memory map",
            SUITE.name
        ),
        cases,
        notes,
    })
}

/// Fills a pool with `objects` objects of the sizes in `sizes` (cycled),
/// frees a random half, compacts, and reports pages used against bytes
/// stored; mimalloc's resident growth for the same sequence is an extra.
fn memory_case(sizes: &[usize], objects: usize, settings: &Settings) -> Result<CaseResult, BenchError> {
    let mm = real_map(settings.pick(6 << 30, 256 << 20))?;
    let zs = pool(&mm)?;
    let mut rng = XorShift64::new(42);
    let mut live: Vec<(Handle, usize)> = Vec::with_capacity(objects);
    let page = [0x5a_u8; 4096];
    for i in 0..objects {
        let size = sizes[i % sizes.len()];
        let h = zs.zs_malloc(size, GFP, 0).map_err(zs_err("zs_malloc"))?;
        zs.zs_obj_write(&h, &page[..size]).map_err(zs_err("zs_obj_write"))?;
        live.push((h, size));
    }
    let mut kept = Vec::with_capacity(objects / 2 + 1);
    for (h, size) in live {
        if rng.next_u64() % 2 == 0 {
            zs.zs_free(h).map_err(zs_free_err("zs_free"))?;
        } else {
            kept.push(size);
        }
    }
    let start = Instant::now();
    zs.zs_compact();
    let compact_ns = start.elapsed().as_nanos() as f64;
    let pages_used = zs.zs_get_total_pages() as f64;
    let bytes_stored: f64 = kept.iter().map(|&s| s as f64).sum();
    let ratio = pages_used * 4096.0 / bytes_stored.max(1.0);
    let mimalloc_growth = mimalloc_resident_growth(sizes, objects);
    let mut extra = vec![("pages_used", pages_used), ("bytes_stored", bytes_stored), ("pages_per_byte_ratio", ratio)];
    if let Some(growth) = mimalloc_growth {
        extra.push(("mimalloc_resident_growth_bytes", growth));
    }
    Ok(CaseResult {
        suite: SUITE.name,
        name: "memory/after_compact",
        impl_name: names::MMKIT,
        unit: "compaction",
        median_ns: compact_ns,
        min_ns: compact_ns,
        max_ns: compact_ns,
        runs: 1,
        units_per_run: 1,
        ratio_vs_mmkit: Some(1.0),
        baseline: None,
        ratio_vs_baseline: None,
        extra,
    })
}

/// Resident-set growth of this process while mimalloc holds the same
/// objects (half freed), from `/proc/self/statm`; `None` off Linux.
fn mimalloc_resident_growth(sizes: &[usize], objects: usize) -> Option<f64> {
    let rss = || -> Option<f64> {
        let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
        Some(statm.split_whitespace().nth(1)?.parse::<f64>().ok()? * 4096.0)
    };
    let before = rss()?;
    let mut rng = XorShift64::new(42);
    let mut blocks = Vec::with_capacity(objects);
    for i in 0..objects {
        let layout = BlockLayout::new(sizes[i % sizes.len()], 8)?;
        let block = HeapBlock::<MiMalloc>::alloc(layout)?;
        blocks.push(block);
    }
    let mut kept = Vec::with_capacity(objects / 2 + 1);
    for block in blocks {
        if rng.next_u64() % 2 == 0 {
            block.free();
        } else {
            kept.push(block);
        }
    }
    let growth = rss()? - before;
    kept.into_iter().for_each(HeapBlock::free);
    Some(growth)
}

/// The release experiment for `threads` threads: each variant fills a
/// fresh pool, then the threads free their share; returns one result per
/// variant with the drain time as `drained_ns`.
fn release_case(
    name: &'static str,
    threads: usize,
    sizes: &[usize],
    objects: usize,
    settings: &Settings,
) -> Result<Vec<CaseResult>, BenchError> {
    let mm = real_map(settings.pick(2 << 30, 128 << 20))?;
    let mut results = Vec::new();
    for variant in ["pool_locked", "lock_light", "deferred", "deferred_per_pool"] {
        let mut callers = Vec::new();
        let mut drained = Vec::new();
        let mut fallback = 0u64;
        for _ in 0..settings.runs.max(1) {
            let config = ZsConfig {
                deferred: if variant == "deferred_per_pool" { DeferredLayout::PerPool } else { DeferredLayout::PerCpu },
                ..ZsConfig::default()
            };
            let zs = ZsPool::with_config("bench", mm.clone(), config).map_err(zs_err("zs_create_pool"))?;
            let mut handles = Vec::with_capacity(objects);
            for i in 0..objects {
                handles.push(zs.zs_malloc(sizes[i % sizes.len()], GFP, 0).map_err(zs_err("zs_malloc"))?);
            }
            let chunk = objects.div_ceil(threads);
            // Each thread's share, owned (handles are consumed by the free).
            let mut parts: Vec<Vec<Handle>> = (0..threads).map(|_| Vec::with_capacity(chunk)).collect();
            for (i, h) in handles.into_iter().enumerate() {
                parts[i / chunk].push(h);
            }
            let start = Instant::now();
            std::thread::scope(|s| {
                for part in parts {
                    let zs = &zs;
                    s.spawn(move || {
                        for h in part {
                            let _ = match variant {
                                "pool_locked" => zs.zs_free_pool_locked(h),
                                "lock_light" => zs.zs_free(h),
                                _ => zs.zs_free_deferred(h),
                            };
                        }
                    });
                }
            });
            callers.push(start.elapsed().as_nanos() as f64);
            zs.zs_free_deferred_flush();
            drained.push(start.elapsed().as_nanos() as f64);
            fallback = fallback.max(zs.deferred_stats().fallback);
            if zs.zs_get_total_pages() != 0 {
                return Err(BenchError(format!("{name}/{variant}: pages left after the release")));
            }
        }
        let drained_median = super::harness::median(&mut drained);
        let extra = if variant.starts_with("deferred") {
            vec![("drained_ns", drained_median), ("fallback_frees", fallback as f64)]
        } else {
            vec![("drained_ns", drained_median)]
        };
        results.push(CaseResult::releases(SUITE.name, name, variant, &callers, extra));
    }
    Ok(results)
}
