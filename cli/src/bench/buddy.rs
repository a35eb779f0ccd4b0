//! Suite `buddy`: single-block allocation and freeing, order 0 and order 9,
//! on fresh and on fragmented memory, plus a 4096-page batch. mmkit runs
//! three times: the plain calls on a map with the builder's defaults
//! (`mmkit`: per-CPU lists and cache on, as in every suite), the plain
//! calls on a map built with per-CPU lists off (`mmkit_lists_off`: straight
//! through the buddy, a zone lock per call), and a pinned CPU holding that
//! map's zone locked (`mmkit_locked_zone`). The peer
//! `buddy_system_allocator` runs bare (`FrameAllocator`, no lock) and as
//! the crate's `LockedFrameAllocator`, the form a shared caller needs.
//!
//! Owns the case list, each case's setup (fresh or fragmented maps and peer
//! allocators) and the suite's footnotes. Timing and output are the
//! harness's; the loops and the implementations are
//! `mmkit_bench::subjects`'; the fragmentation recipes are
//! `mmkit_bench::fragment`'s.

use super::harness::{measure, BenchError, CaseResult, CaseSpec, Contender, Settings, SuiteReport};
use super::summary::{Headline, Row};
use super::{Progress, Suite};
use crate::size::format_size;
use mmkit::{Cpus, Report};
use mmkit_bench::fragment::{self, SEED};
use mmkit_bench::heap::MiMalloc;
use mmkit_bench::subjects::{
    batch_loop, buddy_only_map, default_map, locked_zone_loop, names, pair_loop, Bsa, BsaLocked, Heap, Mmkit,
    BSA_ORDER, PAGE_SIZE,
};
use std::alloc::System;

/// The suite as the registry lists it.
pub const SUITE: Suite = Suite {
    name: "buddy",
    about: "order-0 / order-9 alloc+free through the buddy allocator, fresh and fragmented",
    run,
    baselines: &[],
    headline: Some(Headline {
        mmkit: Row { case: "buddy_order0_alloc_free_fragmented", imp: names::MMKIT },
        peer: Row { case: "buddy_order0_alloc_free_fragmented", imp: names::BSA },
        published: None,
    }),
};

/// Pages per iteration of the batch case.
const BATCH: usize = 4096;

/// Sizes of one run of the suite.
#[derive(Clone, Copy, Debug)]
struct Plan {
    /// Bytes of each mmkit map (buddy_system_allocator gets its spans).
    map_bytes: u64,
    /// Pairs per timed run, order 0.
    order0_iters: u64,
    /// Pairs per timed run, order 9: a quarter of order 0's. With a
    /// sixteenth, a run of the cached pair was shorter than a scheduler
    /// tick, and single interruptions moved the median.
    order9_iters: u64,
    /// Batches per timed run.
    batch_iters: u64,
}

impl Plan {
    fn new(settings: &Settings) -> Self {
        Self {
            map_bytes: settings.pick(4 << 30, 256 << 20),
            order0_iters: settings.pick(1 << 20, 1 << 13),
            order9_iters: settings.pick(1 << 18, 1 << 10),
            batch_iters: settings.pick(256, 4),
        }
    }

    fn pages(&self) -> u64 {
        self.map_bytes / PAGE_SIZE as u64
    }
}

fn spec(name: &'static str, unit: &'static str, units_per_iter: u64, iters: u64) -> CaseSpec {
    CaseSpec { name, unit, units_per_iter, iters, warmup_iters: (iters / 8).max(1) }
}

fn run(settings: &Settings, progress: &mut Progress<'_>) -> Result<SuiteReport, BenchError> {
    let plan = Plan::new(settings);
    let mut cases = Vec::new();
    for (name, case) in CASES {
        progress(name);
        cases.extend(case(name, &plan, settings)?);
    }
    let description = format!(
        "fresh {} metadata-only mmkit maps per case (Gfp::KERNEL; mmkit: the builder's defaults, \
         mmkit_lists_off: per-CPU lists off), buddy_system_allocator over the same PFN spans; \
         pairs per run: {} at order 0, {} at order 9; batch: {} pages x {}",
        format_size(plan.map_bytes),
        plan.order0_iters,
        plan.order9_iters,
        BATCH,
        plan.batch_iters,
    );
    let notes = vec![
        "mimalloc and system are heap allocators asked for 4 KiB blocks aligned to 4 KiB \
         (order 0) or 2 MiB aligned to 2 MiB (order 9) through GlobalAlloc; the memory is \
         never touched, as mmkit's map is metadata-only."
            .to_string(),
        "Order 9 through a heap allocator costs microseconds when it maps a fresh region \
         per request: mimalloc does for 2 MiB-aligned blocks; glibc (system) does until an \
         earlier large free in the same process raises its dynamic mmap threshold, so its \
         order-9 numbers depend on what ran before (in a full run the fragmented cases' \
         bookkeeping vectors raise it; in --quick they are too small to)."
            .to_string(),
        "mmkit is a map built with MemoryMapBuilder's defaults (per-CPU lists and the per-CPU \
         order-0 cache on) through alloc_pages/free_pages, the plain calls of a caller who \
         chose nothing: the CPU's cache serves order 0 and order 9 (its pageblock-order \
         stacks) with no lock. mmkit_lists_off is a map of the same size built with \
         per_cpu_lists(false), as Linux's zone_pcp_disable leaves a zone, through the same \
         calls: every block goes to and from the buddy under the zone lock, three atomic \
         read-modify-writes a pair (the lock on each side and the last-reference drop)."
            .to_string(),
        "mmkit_locked_zone is the mmkit_lists_off map through CPU 0's PinnedCpu holding the \
         zone locked (lock_zone, taken at the start of each timed run and dropped at its end): \
         no lock and no atomic per call; its blocks are LOCAL to the CPU. \
         buddy_system_allocator_locked is the crate's LockedFrameAllocator (a spin lock per \
         call, one per zone span), what a caller that shares the allocator between threads \
         uses; the bare buddy_system_allocator takes no lock at all, as the shared mmkit rows \
         must."
            .to_string(),
        format!(
            "*_fragmented cases run only for the mmkit rows and the buddy_system_allocator rows: each map or \
             allocator is fragmented by the same recipe (order 0: allocate 90% of the pages one by one, \
             free a xorshift-chosen half with seed {SEED:#x}; order 9: allocate order-9 blocks \
             until refused, free every other one). The heap allocators have no comparable \
             page-frame state to fragment, so they are not run there."
        ),
        format!(
            "buddy_system_allocator is one FrameAllocator<{}> (the crate's default ORDER; \
             a smaller one loses memory, see subjects.rs) per mmkit zone span, tried from the \
             highest zone down like mmkit's zonelist. It has no MAX_PAGE_ORDER: on fresh \
             memory it splits from blocks as large as the span allows (2^19 frames in a 4 GiB \
             map) where mmkit splits from 2^10.",
            BSA_ORDER,
        ),
    ];
    Ok(SuiteReport { suite: SUITE.name, description, cases, notes })
}

/// CPU 0's pinned handle, for the `mmkit_locked_zone` contender (its
/// lists are unused: the map has none).
fn pin(mm: &mmkit::PageAllocator) -> Result<mmkit::PinnedCpu<'_>, BenchError> {
    Cpus::new(mm).pin_cpu(0).map_err(|e| BenchError::context("pinning CPU 0", e))
}

/// A case: its name (as reported), the suite's sizes and settings.
type CaseFn = fn(&'static str, &Plan, &Settings) -> Result<Vec<CaseResult>, BenchError>;

/// Every case, in the order run and reported.
const CASES: [(&str, CaseFn); 5] = [
    ("buddy_order0_alloc_free", order0_fresh),
    ("buddy_order0_alloc_free_fragmented", order0_fragmented),
    ("buddy_order9_alloc_free", order9_fresh),
    ("buddy_order9_alloc_free_fragmented", order9_fragmented),
    ("buddy_order0_batch", order0_batch),
];

/// Alloc+free pairs of `order` on fresh memory, every implementation.
fn pairs_fresh(
    name: &'static str,
    order: u32,
    iters: u64,
    plan: &Plan,
    settings: &Settings,
) -> Result<Vec<CaseResult>, BenchError> {
    let mm = default_map(plan.map_bytes)?;
    let mut mmkit = Mmkit::new(&mm);
    let lists_off_mm = buddy_only_map(plan.map_bytes)?;
    let mut lists_off = Mmkit::new(&lists_off_mm);
    let mut cpu = pin(&lists_off_mm)?;
    let mut bsa = Bsa::like(&mm);
    let mut bsa_locked = BsaLocked::like(&mm);
    let mut mi = Heap::<MiMalloc>::new();
    let mut sys = Heap::<System>::new();
    let mut contenders = [
        Contender::new(names::MMKIT, pair_loop(&mut mmkit, order)),
        Contender::new(names::MMKIT_LISTS_OFF, pair_loop(&mut lists_off, order)),
        Contender::new(names::MMKIT_LOCKED_ZONE, locked_zone_loop(&mut cpu, |z, n| pair_loop(z, order)(n))),
        Contender::new(names::BSA, pair_loop(&mut bsa, order)),
        Contender::new(names::BSA_LOCKED, pair_loop(&mut bsa_locked, order)),
        Contender::new(names::MIMALLOC, pair_loop(&mut mi, order)),
        Contender::new(names::SYSTEM, pair_loop(&mut sys, order)),
    ];
    measure(SUITE.name, spec(name, "pair", 1, iters), &mut contenders, settings.runs)
}

fn order0_fresh(name: &'static str, plan: &Plan, settings: &Settings) -> Result<Vec<CaseResult>, BenchError> {
    pairs_fresh(name, 0, plan.order0_iters, plan, settings)
}

fn order9_fresh(name: &'static str, plan: &Plan, settings: &Settings) -> Result<Vec<CaseResult>, BenchError> {
    pairs_fresh(name, 9, plan.order9_iters, plan, settings)
}

fn order0_fragmented(name: &'static str, plan: &Plan, settings: &Settings) -> Result<Vec<CaseResult>, BenchError> {
    let mm = default_map(plan.map_bytes)?;
    let mut mmkit = Mmkit::new(&mm);
    let count = Report::new(mmkit.map()).nr_free_pages() * 9 / 10;
    let _mmkit_held = fragment::scatter(&mut mmkit, count, SEED)?;
    let lists_off_mm = buddy_only_map(plan.map_bytes)?;
    let mut lists_off = Mmkit::new(&lists_off_mm);
    let _lists_off_held = fragment::scatter(&mut lists_off, count, SEED)?;
    let mut cpu = pin(&lists_off_mm)?;
    let mut bsa = Bsa::like(&mm);
    let _bsa_held = fragment::scatter(&mut bsa, count, SEED)?;
    let mut bsa_locked = BsaLocked::like(&mm);
    let _bsa_locked_held = fragment::scatter(&mut bsa_locked, count, SEED)?;
    let mut contenders = [
        Contender::new(names::MMKIT, pair_loop(&mut mmkit, 0)),
        Contender::new(names::MMKIT_LISTS_OFF, pair_loop(&mut lists_off, 0)),
        Contender::new(names::MMKIT_LOCKED_ZONE, locked_zone_loop(&mut cpu, |z, n| pair_loop(z, 0)(n))),
        Contender::new(names::BSA, pair_loop(&mut bsa, 0)),
        Contender::new(names::BSA_LOCKED, pair_loop(&mut bsa_locked, 0)),
    ];
    measure(SUITE.name, spec(name, "pair", 1, plan.order0_iters), &mut contenders, settings.runs)
}

fn order9_fragmented(name: &'static str, plan: &Plan, settings: &Settings) -> Result<Vec<CaseResult>, BenchError> {
    let mm = default_map(plan.map_bytes)?;
    let mut mmkit = Mmkit::new(&mm);
    let limit = plan.pages() >> 9;
    let _mmkit_held = fragment::alternate(&mut mmkit, 9, limit)?;
    let lists_off_mm = buddy_only_map(plan.map_bytes)?;
    let mut lists_off = Mmkit::new(&lists_off_mm);
    let _lists_off_held = fragment::alternate(&mut lists_off, 9, limit)?;
    let mut cpu = pin(&lists_off_mm)?;
    let mut bsa = Bsa::like(&mm);
    let _bsa_held = fragment::alternate(&mut bsa, 9, limit)?;
    let mut bsa_locked = BsaLocked::like(&mm);
    let _bsa_locked_held = fragment::alternate(&mut bsa_locked, 9, limit)?;
    let mut contenders = [
        Contender::new(names::MMKIT, pair_loop(&mut mmkit, 9)),
        Contender::new(names::MMKIT_LISTS_OFF, pair_loop(&mut lists_off, 9)),
        Contender::new(names::MMKIT_LOCKED_ZONE, locked_zone_loop(&mut cpu, |z, n| pair_loop(z, 9)(n))),
        Contender::new(names::BSA, pair_loop(&mut bsa, 9)),
        Contender::new(names::BSA_LOCKED, pair_loop(&mut bsa_locked, 9)),
    ];
    measure(SUITE.name, spec(name, "pair", 1, plan.order9_iters), &mut contenders, settings.runs)
}

fn order0_batch(name: &'static str, plan: &Plan, settings: &Settings) -> Result<Vec<CaseResult>, BenchError> {
    let mm = default_map(plan.map_bytes)?;
    let mut mmkit = Mmkit::new(&mm);
    let lists_off_mm = buddy_only_map(plan.map_bytes)?;
    let mut lists_off = Mmkit::new(&lists_off_mm);
    let mut cpu = pin(&lists_off_mm)?;
    let mut bsa = Bsa::like(&mm);
    let mut bsa_locked = BsaLocked::like(&mm);
    let mut mi = Heap::<MiMalloc>::new();
    let mut sys = Heap::<System>::new();
    let mut contenders = [
        Contender::new(names::MMKIT, batch_loop(&mut mmkit, 0, BATCH)),
        Contender::new(names::MMKIT_LISTS_OFF, batch_loop(&mut lists_off, 0, BATCH)),
        Contender::new(names::MMKIT_LOCKED_ZONE, locked_zone_loop(&mut cpu, |z, n| batch_loop(z, 0, BATCH)(n))),
        Contender::new(names::BSA, batch_loop(&mut bsa, 0, BATCH)),
        Contender::new(names::BSA_LOCKED, batch_loop(&mut bsa_locked, 0, BATCH)),
        Contender::new(names::MIMALLOC, batch_loop(&mut mi, 0, BATCH)),
        Contender::new(names::SYSTEM, batch_loop(&mut sys, 0, BATCH)),
    ];
    measure(SUITE.name, spec(name, "page", BATCH as u64, plan.batch_iters), &mut contenders, settings.runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_suite_reports_every_case_and_impl() {
        let settings = Settings { runs: 1, quick: true };
        let report = run(&settings, &mut |_| {}).unwrap();
        assert_eq!(report.cases.len(), 7 + 5 + 7 + 5 + 7);
        for (name, _) in CASES {
            let impls: Vec<_> = report.cases.iter().filter(|c| c.name == name).map(|c| c.impl_name).collect();
            assert!(impls.contains(&names::MMKIT), "{name}: {impls:?}");
            assert!(impls.contains(&names::MMKIT_LOCKED_ZONE), "{name}: {impls:?}");
            assert!(impls.contains(&names::BSA), "{name}: {impls:?}");
            assert!(impls.contains(&names::MMKIT_LISTS_OFF), "{name}: {impls:?}");
            assert!(impls.contains(&names::BSA_LOCKED), "{name}: {impls:?}");
        }
        for c in &report.cases {
            assert!(c.median_ns > 0.0, "{c:?}");
            assert!(c.ratio_vs_mmkit.is_some(), "{c:?}");
        }
    }
}
