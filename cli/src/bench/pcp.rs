//! Suite `pcp`: order-0 alloc+free pairs through the per-CPU lists, one
//! thread and two threads, next to the peers.
//!
//! Owns the case list and the thread set-up. Implementations measured:
//! `mmkit` (the shared API: any thread, served by the per-CPU order-0
//! cache in restartable sequences), `mmkit_pcp_lists` (the same calls on a
//! map built with `cpu_caches(false)`: the locked per-CPU lists, the path
//! where rseq is unavailable), `mmkit_pinned` (a `PinnedCpu` handle:
//! the lists owned by the thread, no lock per operation), mimalloc and the
//! system allocator (4 KiB blocks aligned to 4 KiB), and
//! buddy_system_allocator's frame allocator (which has no per-CPU cache: one
//! instance, behind a mutex in the two-thread case).

use super::harness::{measure, BenchError, CaseResult, CaseSpec, Contender, Settings, SuiteReport};
use super::summary::{Headline, Row};
use super::{Progress, Suite};
use mmkit::Cpus;
use mmkit::{Gfp, MemoryMapBuilder, PageAllocator};
use mmkit_bench::heap::{MiMalloc, StatelessAlloc};
use mmkit_bench::subjects::{names, pair_loop, Bsa, Heap, PageAlloc};
use std::alloc::System;
use std::hint::black_box;
use std::sync::Mutex;

/// The suite as the registry lists it.
pub const SUITE: Suite = Suite {
    name: "pcp",
    about: "order-0 alloc+free through the per-CPU lists, 1 and 2 threads",
    run,
    baselines: &[],
    headline: Some(Headline {
        mmkit: Row { case: "pcp_order0_alloc_free", imp: names::MMKIT },
        peer: Row { case: "pcp_order0_alloc_free", imp: names::MIMALLOC },
        published: None,
    }),
};

/// Name of the pinned-handle variant in results.
pub const MMKIT_PINNED: &str = "mmkit_pinned";
/// Name of the shared API on the locked per-CPU lists (the per-CPU cache
/// off) in results: the default path before the cache, kept for
/// comparison and for machines without restartable sequences.
pub const MMKIT_PCP_LISTS: &str = "mmkit_pcp_lists";

fn map(bytes: u64) -> Result<PageAllocator, BenchError> {
    MemoryMapBuilder::with_memory(bytes).build().map_err(|e| BenchError::context("building the mmkit map", e))
}

fn map_without_cpu_caches(bytes: u64) -> Result<PageAllocator, BenchError> {
    MemoryMapBuilder::with_memory(bytes)
        .cpu_caches(false)
        .build()
        .map_err(|e| BenchError::context("building the mmkit map", e))
}

/// `iters` shared-API pairs on `mm` from the calling thread.
fn shared_pairs(mm: &PageAllocator, iters: u64) -> Result<(), BenchError> {
    for _ in 0..iters {
        let pfn = mm.alloc_pages(Gfp::KERNEL, 0).map_err(|e| BenchError::context("alloc_pages", e))?;
        mm.free_pages(black_box(pfn), 0).map_err(|e| BenchError::context("free_pages", e))?;
    }
    Ok(())
}

fn run(settings: &Settings, progress: &mut Progress<'_>) -> Result<SuiteReport, BenchError> {
    let bytes: u64 = settings.pick(4 << 30, 256 << 20);
    let iters: u64 = settings.pick(4 << 20, 1 << 14);
    let spec = |name| CaseSpec { name, unit: "pair", units_per_iter: 1, iters, warmup_iters: (iters / 8).max(1) };
    let mut cases = Vec::new();

    progress("pcp_order0_alloc_free");
    cases.extend(one_thread(bytes, spec("pcp_order0_alloc_free"), settings)?);
    progress("pcp_order0_alloc_free_2threads");
    // Two threads each run `iters` pairs; the unit is one pair, so the time
    // is the aggregate cost: wall time / (2 × iters).
    let two = CaseSpec { units_per_iter: 2, ..spec("pcp_order0_alloc_free_2threads") };
    cases.extend(two_threads(bytes, two, settings)?);

    let scaling: Vec<String> = [names::MMKIT, MMKIT_PCP_LISTS, MMKIT_PINNED, names::MIMALLOC, names::SYSTEM]
        .iter()
        .filter_map(|&imp| {
            let one = cases.iter().find(|c| c.name == "pcp_order0_alloc_free" && c.impl_name == imp)?;
            let two = cases.iter().find(|c| c.name == "pcp_order0_alloc_free_2threads" && c.impl_name == imp)?;
            Some(format!("{imp} {:.2}x", one.median_ns / two.median_ns))
        })
        .collect();
    let notes = vec![
        "mmkit uses the shared API, served by the per-CPU order-0 cache (restartable sequences: no \
         lock; the reference drop on free is the one atomic); mmkit_pcp_lists is the same API on a \
         map built with cpu_caches(false) (the locked per-CPU lists: a pageset try-lock per \
         operation, the path where rseq is unavailable); mmkit_pinned holds the CPU's lists through a PinnedCpu handle (no lock, no atomic per \
         operation). All allocate with Gfp::KERNEL from a fresh metadata-only map."
            .to_string(),
        "mimalloc and system: 4 KiB blocks aligned to 4 KiB through GlobalAlloc, never touched. \
         buddy_system_allocator: FrameAllocator over the same PFN spans (one instance; behind a \
         Mutex with two threads)."
            .to_string(),
        format!(
            "2-thread scaling (aggregate pairs/s with 2 threads / pairs/s with 1; 2.0 is perfect on \
             2 cores): {}",
            scaling.join(", ")
        ),
    ];
    let description =
        format!("order-0 alloc+free pairs, {} per thread per run, {} map", iters, crate::size::format_size(bytes));
    Ok(SuiteReport { suite: SUITE.name, description, cases, notes })
}

fn one_thread(bytes: u64, spec: CaseSpec, settings: &Settings) -> Result<Vec<CaseResult>, BenchError> {
    let mm = map(bytes)?;
    let lists_mm = map_without_cpu_caches(bytes)?;
    let pinned_mm = map(bytes)?;
    let mut bsa = Bsa::like(&mm);
    let mut mi = Heap::<MiMalloc>::new();
    let mut sys = Heap::<System>::new();
    let shared = |iters: u64| shared_pairs(&mm, iters);
    let lists = |iters: u64| shared_pairs(&lists_mm, iters);
    let pinned = |iters: u64| -> Result<(), BenchError> {
        let mut cpu = Cpus::new(&pinned_mm).pin_cpu(0).map_err(|e| BenchError::context("pin_cpu", e))?;
        for _ in 0..iters {
            let pfn = cpu.alloc_pages(Gfp::KERNEL, 0).map_err(|e| BenchError::context("alloc_pages", e))?;
            cpu.free_pages(black_box(pfn), 0).map_err(|e| BenchError::context("free_pages", e))?;
        }
        Ok(())
    };
    let mut contenders = [
        Contender::new(names::MMKIT, shared),
        Contender::new(MMKIT_PCP_LISTS, lists),
        Contender::new(MMKIT_PINNED, pinned),
        Contender::new(names::MIMALLOC, pair_loop(&mut mi, 0)),
        Contender::new(names::SYSTEM, pair_loop(&mut sys, 0)),
        Contender::new(names::BSA, pair_loop(&mut bsa, 0)),
    ];
    measure(SUITE.name, spec, &mut contenders, settings.runs)
}

/// Runs `body(thread_index, iters)` on two scoped threads, started
/// together: without the barrier the second thread began its loop late by
/// up to a thread's start-up, a sizeable part of a timed run of the pinned
/// contender's pairs, and `pcp_order0_alloc_free_2threads` read 10–20 %
/// less scaling than the loops have.
fn on_two_threads(iters: u64, body: impl Fn(usize, u64) -> Result<(), BenchError> + Sync) -> Result<(), BenchError> {
    let start = std::sync::Barrier::new(2);
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..2)
            .map(|t| {
                scope.spawn({
                    let (body, start) = (&body, &start);
                    move || {
                        start.wait();
                        body(t, iters)
                    }
                })
            })
            .collect();
        handles.into_iter().try_for_each(|h| h.join().map_err(|_| BenchError("benchmark thread panicked".into()))?)
    })
}

fn heap_pairs<A: StatelessAlloc>(iters: u64) -> Result<(), BenchError> {
    let mut heap = Heap::<A>::new();
    let result = pair_loop(&mut heap, 0)(iters);
    result
}

fn two_threads(bytes: u64, spec: CaseSpec, settings: &Settings) -> Result<Vec<CaseResult>, BenchError> {
    let mm = map(bytes)?;
    let lists_mm = map_without_cpu_caches(bytes)?;
    let pinned_mm = map(bytes)?;
    let bsa = Mutex::new(Bsa::like(&mm));
    let shared = |iters: u64| on_two_threads(iters, |_, n| shared_pairs(&mm, n));
    let lists = |iters: u64| on_two_threads(iters, |_, n| shared_pairs(&lists_mm, n));
    let pinned = |iters: u64| {
        on_two_threads(iters, |t, n| {
            let mut cpu = Cpus::new(&pinned_mm).pin_cpu(t).map_err(|e| BenchError::context("pin_cpu", e))?;
            for _ in 0..n {
                let pfn = cpu.alloc_pages(Gfp::KERNEL, 0).map_err(|e| BenchError::context("alloc_pages", e))?;
                cpu.free_pages(black_box(pfn), 0).map_err(|e| BenchError::context("free_pages", e))?;
            }
            Ok(())
        })
    };
    let locked_bsa = |iters: u64| {
        on_two_threads(iters, |_, n| {
            for _ in 0..n {
                let mut guard = bsa.lock().map_err(|_| BenchError("bsa mutex poisoned".into()))?;
                let block = black_box(guard.alloc(0)?);
                guard.free(block, 0)?;
            }
            Ok(())
        })
    };
    let mut contenders = [
        Contender::new(names::MMKIT, shared),
        Contender::new(MMKIT_PCP_LISTS, lists),
        Contender::new(MMKIT_PINNED, pinned),
        Contender::new(names::MIMALLOC, |iters| on_two_threads(iters, |_, n| heap_pairs::<MiMalloc>(n))),
        Contender::new(names::SYSTEM, |iters| on_two_threads(iters, |_, n| heap_pairs::<System>(n))),
        Contender::new(names::BSA, locked_bsa),
    ];
    measure(SUITE.name, spec, &mut contenders, settings.runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_suite_reports_both_cases_for_every_impl() {
        let report = run(&Settings { runs: 1, quick: true }, &mut |_| {}).unwrap();
        for case in ["pcp_order0_alloc_free", "pcp_order0_alloc_free_2threads"] {
            let impls: Vec<_> = report.cases.iter().filter(|c| c.name == case).map(|c| c.impl_name).collect();
            assert_eq!(impls.len(), 6, "{case}: {impls:?}");
            assert!(impls.contains(&names::MMKIT) && impls.contains(&MMKIT_PINNED));
            assert!(impls.contains(&MMKIT_PCP_LISTS));
        }
        assert!(report.cases.iter().all(|c| c.median_ns > 0.0));
    }
}
