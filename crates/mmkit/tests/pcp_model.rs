//! Property test: random single-threaded sequences of allocations and frees
//! through different CPUs' lists, bulk allocations and frees, drains, pinned
//! handles and `high` changes, checked after every step against a reference
//! model (the set of live blocks) and the allocator's invariant checker.
//!
//! Properties:
//! 1. no page is handed out twice (live blocks never overlap);
//! 2. every block is naturally aligned and lies in one zone;
//! 3. conservation: per zone, buddy-free + per-CPU-cached + live pages ==
//!    managed pages;
//! 4. `check_invariants()` holds (lists, counters, merging, pcp lists);
//! 5. bulk allocation fills a prefix of the array and never more than asked.

use mmkit::{Cpus, Tuning};
use mmkit::{Gfp, PageAllocator, Pfn, Report};

mod live_blocks;
use live_blocks::{two_zone_map, LiveBlocks};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Alloc { cpu: usize, order: u32, gfp: usize },
    Free { cpu: usize, pick: usize },
    BulkAlloc { cpu: usize, n: usize, prefilled: usize },
    BulkFree { cpu: usize, n: usize },
    Drain { cpu: Option<usize> },
    PinnedPair { cpu: usize, order: u32 },
    HighFraction { fraction: u32 },
    Decay,
}

const GFPS: [Gfp; 5] = [Gfp::KERNEL, Gfp::HIGHUSER_MOVABLE, Gfp::ATOMIC, Gfp::NOWAIT, Gfp::DMA32];

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..3usize, prop_oneof![Just(0u32), Just(1), Just(2), Just(3), Just(4), Just(5)], 0..GFPS.len())
            .prop_map(|(cpu, order, gfp)| Op::Alloc { cpu, order, gfp }),
        4 => (0..3usize, any::<usize>()).prop_map(|(cpu, pick)| Op::Free { cpu, pick }),
        1 => (0..3usize, 0..70usize, 0..4usize).prop_map(|(cpu, n, prefilled)| Op::BulkAlloc { cpu, n, prefilled }),
        1 => (0..3usize, 0..40usize).prop_map(|(cpu, n)| Op::BulkFree { cpu, n }),
        1 => prop::option::of(0..3usize).prop_map(|cpu| Op::Drain { cpu }),
        1 => (0..3usize, 0..4u32).prop_map(|(cpu, order)| Op::PinnedPair { cpu, order }),
        1 => prop_oneof![Just(0u32), Just(8), Just(64)].prop_map(|fraction| Op::HighFraction { fraction }),
        1 => Just(Op::Decay),
    ]
}

fn map() -> PageAllocator {
    two_zone_map().reserved(1500..1503).nr_cpus(3).build().unwrap()
}

type Model = LiveBlocks;

fn run(ops: Vec<Op>) {
    let mm = map();
    let mut model = Model::default();
    for op in ops {
        match op {
            Op::Alloc { cpu, order, gfp } => {
                if let Ok(pfn) = Cpus::new(&mm).cpu(cpu).unwrap().alloc_pages(GFPS[gfp], order) {
                    model.insert(&mm, pfn, order);
                }
            }
            Op::Free { cpu, pick } => {
                if let Some((pfn, order)) = model.take(pick) {
                    Cpus::new(&mm).cpu(cpu).unwrap().free_pages(pfn, order).unwrap();
                    assert!(mm.free_pages(pfn, order).is_err(), "second free of {pfn} must fail");
                }
            }
            Op::BulkAlloc { cpu, n, prefilled } => {
                let mut slots = vec![None; n];
                let prefilled = prefilled.min(n);
                let mut mine = Vec::new();
                for slot in slots.iter_mut().take(prefilled) {
                    if let Ok(pfn) = mm.alloc_pages(Gfp::KERNEL, 0) {
                        *slot = Some(pfn);
                        mine.push(pfn);
                    }
                }
                let filled = Cpus::new(&mm).cpu(cpu).unwrap().alloc_pages_bulk(Gfp::KERNEL, &mut slots);
                assert!(filled <= n);
                assert!(slots[..filled].iter().all(Option::is_some), "filled slots form a prefix");
                for pfn in slots.into_iter().flatten() {
                    model.insert(&mm, pfn, 0);
                }
            }
            Op::BulkFree { cpu, n } => {
                let zero: Vec<u64> = model.live.iter().filter(|(_, &o)| o == 0).map(|(&p, _)| p).take(n).collect();
                let pfns: Vec<Pfn> = zero.iter().map(|&p| Pfn(p)).collect();
                for p in &zero {
                    model.live.remove(p);
                }
                assert_eq!(Cpus::new(&mm).cpu(cpu).unwrap().free_pages_bulk(&pfns), Ok(pfns.len()));
                if let Some(&first) = pfns.first() {
                    let err = mm.free_pages_bulk(&[first]).unwrap_err();
                    assert_eq!((err.done, err.failed), (0, 1));
                }
            }
            Op::Drain { cpu } => match cpu {
                Some(cpu) => assert_eq!(Cpus::new(&mm).drain_cpu_pages(cpu), Ok(true)),
                None => assert_eq!(Cpus::new(&mm).drain_all_pages(), 0),
            },
            Op::PinnedPair { cpu, order } => {
                let mut pinned = Cpus::new(&mm).pin_cpu(cpu).unwrap();
                if let Ok(pfn) = pinned.alloc_pages(Gfp::KERNEL, order) {
                    model.insert(&mm, pfn, order);
                    assert_eq!(Cpus::new(&mm).drain_all_pages(), 1, "the pinned CPU defers its drain");
                    pinned.free_pages(pfn, order).unwrap();
                    model.live.remove(&pfn.0);
                }
            }
            Op::HighFraction { fraction } => Tuning::new(&mm).set_percpu_pagelist_high_fraction(fraction).unwrap(),
            Op::Decay => Tuning::new(&mm).decay_pcp_high(),
        }
        model.check(&mm);
    }
    for (pfn, order) in std::mem::take(&mut model.live) {
        mm.free_pages(Pfn(pfn), order).unwrap();
    }
    model.check(&mm);
    assert_eq!(Cpus::new(&mm).drain_all_pages(), 0);
    let managed: u64 = mm.zones().iter().map(|z| z.managed_pages()).sum();
    assert_eq!(Report::new(&mm).nr_free_pages(), managed);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
    #[test]
    fn pcp_and_bulk_match_the_model(ops in prop::collection::vec(op(), 1..160)) {
        run(ops);
    }
}

#[test]
fn rejected_bulk_entries_change_nothing() {
    let mm = map();
    let a = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
    let before = Report::new(&mm).zone_snapshots();
    let err = mm.free_pages_bulk(&[Pfn(1_000_000), Pfn(3)]).unwrap_err();
    assert_eq!((err.done, err.failed, err.first.0), (0, 2, 0));
    assert_eq!(Report::new(&mm).zone_snapshots(), before);
    assert_eq!(mm.free_pages_bulk(&[a]), Ok(1));
}
