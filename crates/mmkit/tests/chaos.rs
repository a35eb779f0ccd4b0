//! Property test of the public API under arbitrary input: any PFN, any
//! order, any GFP bits, any counts and alignments, any page flags, thrown at
//! every entry point (allocation, every free path, references, flags,
//! `memory_failure`, contiguous ranges, CMA, bulk, drains, pinned CPUs and
//! the zones they hold locked).
//!
//! Properties:
//! 1. no call panics, whatever the input;
//! 2. after every step `check_invariants()` holds;
//! 3. accounting is conserved: buddy-free + per-CPU-cached + pages the test
//!    holds + pages the allocator took out of service (poisoned, leaked as
//!    bad pages) == managed pages; the last term is computed from the
//!    allocator's own counters, so a page that simply vanished still fails.

use mmkit::Cpus;
use mmkit::{Contig, Gfp, MemoryMapBuilder, MigrateType, PageAllocator, PageFlags, Pfn, Report, ZoneType};
use proptest::prelude::*;
use std::collections::BTreeMap;

#[derive(Clone, Debug)]
enum Op {
    Alloc {
        gfp: u32,
        order: u32,
        frozen: bool,
        nid: usize,
    },
    Free {
        pick: usize,
        order_delta: i8,
        frozen_path: bool,
    },
    FreeAny {
        pfn: u64,
        order: u32,
    },
    Put {
        pfn: u64,
    },
    Get {
        pfn: u64,
    },
    Flags {
        pfn: u64,
        bits: u32,
        set: bool,
    },
    Poison {
        pfn: u64,
    },
    ContigRange {
        start: u64,
        len: u64,
        gfp: u32,
    },
    ContigPages {
        nr: u64,
        gfp: u32,
        nid: usize,
    },
    FreeContig {
        pfn: u64,
        nr: u64,
    },
    Cma {
        count: u64,
        align: u32,
    },
    CmaRelease {
        pick: usize,
        pfn: u64,
        count: u64,
    },
    Bulk {
        n: usize,
        gfp: u32,
    },
    BulkFreeAny {
        pfns: Vec<u64>,
    },
    Drain {
        cpu: usize,
    },
    Pinned {
        cpu: usize,
        order: u32,
    },
    /// A pinned CPU holds the zone of `gfp` locked: allocates `orders`,
    /// frees every other block at once, tries to free `bad` (a PFN nobody
    /// holds) and keeps the rest (handed over when the handle drops).
    Locked {
        cpu: usize,
        gfp: u32,
        orders: Vec<u32>,
        bad: (u64, u32),
    },
}

const PAGES: u64 = 8192;

fn pfn() -> impl Strategy<Value = u64> {
    prop_oneof![0..PAGES + 64, any::<u64>(), Just(u64::MAX), Just(0)]
}

fn op() -> impl Strategy<Value = Op> {
    let gfp = prop_oneof![
        any::<u32>(),
        Just(Gfp::KERNEL.bits()),
        Just(Gfp::HIGHUSER_MOVABLE.bits()),
        Just(Gfp::ATOMIC.bits()),
        Just((Gfp::KERNEL | Gfp::COMP).bits())
    ];
    prop_oneof![
        4 => (gfp.clone(), prop_oneof![0..12u32, any::<u32>()], any::<bool>(), 0..3usize)
            .prop_map(|(gfp, order, frozen, nid)| Op::Alloc { gfp, order, frozen, nid }),
        4 => (any::<usize>(), -2..3i8, any::<bool>())
            .prop_map(|(pick, order_delta, frozen_path)| Op::Free { pick, order_delta, frozen_path }),
        1 => (pfn(), any::<u32>()).prop_map(|(pfn, order)| Op::FreeAny { pfn, order }),
        1 => pfn().prop_map(|pfn| Op::Put { pfn }),
        1 => pfn().prop_map(|pfn| Op::Get { pfn }),
        1 => (pfn(), any::<u32>(), any::<bool>()).prop_map(|(pfn, bits, set)| Op::Flags { pfn, bits, set }),
        1 => pfn().prop_map(|pfn| Op::Poison { pfn }),
        1 => (pfn(), prop_oneof![0..600u64, any::<u64>()], gfp.clone())
            .prop_map(|(start, len, gfp)| Op::ContigRange { start, len, gfp }),
        1 => (prop_oneof![0..600u64, any::<u64>()], gfp.clone(), 0..3usize)
            .prop_map(|(nr, gfp, nid)| Op::ContigPages { nr, gfp, nid }),
        1 => (pfn(), prop_oneof![0..600u64, any::<u64>()]).prop_map(|(pfn, nr)| Op::FreeContig { pfn, nr }),
        1 => (prop_oneof![0..300u64, any::<u64>()], prop_oneof![0..8u32, any::<u32>()])
            .prop_map(|(count, align)| Op::Cma { count, align }),
        1 => (any::<usize>(), pfn(), prop_oneof![0..300u64, any::<u64>()])
            .prop_map(|(pick, pfn, count)| Op::CmaRelease { pick, pfn, count }),
        1 => (0..80usize, gfp.clone()).prop_map(|(n, gfp)| Op::Bulk { n, gfp }),
        1 => prop::collection::vec(pfn(), 0..6).prop_map(|pfns| Op::BulkFreeAny { pfns }),
        1 => (0..4usize).prop_map(|cpu| Op::Drain { cpu }),
        1 => (0..4usize, prop_oneof![0..6u32, any::<u32>()]).prop_map(|(cpu, order)| Op::Pinned { cpu, order }),
        1 => (0..4usize, gfp.clone(), prop::collection::vec(prop_oneof![0..11u32, any::<u32>()], 0..8), (pfn(), any::<u32>()))
            .prop_map(|(cpu, gfp, orders, bad)| Op::Locked { cpu, gfp, orders, bad }),
    ]
}

fn map() -> PageAllocator {
    MemoryMapBuilder::new()
        .max_page_order(7)
        .pageblock_order(4)
        .section_order(9)
        .zone(0, ZoneType::Dma32, 0..4096)
        .zone(1, ZoneType::Normal, 4096..PAGES)
        .hole(5000..5100)
        .reserved(100..110)
        .cma("cma", 6144..7168)
        .nr_cpus(2)
        .cpu_id_fn(|| 1)
        .min_free_kbytes(128)
        .hooks(mmkit::QuietHooks)
        .build()
        .unwrap()
}

/// What the test holds: blocks by head PFN → (order, frozen), and CMA
/// allocations by PFN → count.
#[derive(Default)]
struct Held {
    blocks: BTreeMap<u64, (u32, bool)>,
    cma: BTreeMap<u64, u64>,
}

impl Held {
    /// Whether `pfn` lies in a block or CMA range the test holds.
    fn owns(&self, pfn: u64) -> bool {
        // Held blocks never overlap, so only the nearest one starting at or
        // below `pfn` can contain it (a compound range from
        // alloc_contig_pages can be larger than the buddy's largest order).
        self.in_cma(pfn) || self.blocks.range(..=pfn).next_back().is_some_and(|(&b, &(o, _))| b + (1 << o) > pfn)
    }

    fn in_cma(&self, pfn: u64) -> bool {
        self.cma.iter().any(|(&c, &n)| c <= pfn && pfn < c + n)
    }

    fn pages(&self) -> u64 {
        self.blocks.values().map(|&(o, _)| 1u64 << o).sum::<u64>() + self.cma.values().sum::<u64>()
    }
}

fn check(mm: &PageAllocator, held: &Held) {
    Report::new(mm).check_invariants().unwrap();
    let snaps = Report::new(mm).zone_snapshots();
    let free: u64 = snaps.iter().map(|z| z.free_pages + z.pcp_pages).sum();
    let managed: u64 = mm.zones().iter().map(|z| z.managed_pages()).sum();
    let stats = Report::new(mm).stats();
    let out_of_service = stats.hwpoison_offlined + stats.bad_pages_leaked;
    assert!(
        free + held.pages() + out_of_service >= managed && free + held.pages() <= managed,
        "free {free} + held {} + out of service {out_of_service} vs managed {managed}",
        held.pages()
    );
}

fn step(mm: &PageAllocator, held: &mut Held, op: Op) {
    let contig = Contig::new(mm);
    match op {
        Op::Alloc { gfp, order, frozen, nid } => {
            let gfp = Gfp::from_bits(gfp);
            let got =
                if frozen { mm.alloc_frozen_pages_node(nid, gfp, order) } else { mm.alloc_pages_node(nid, gfp, order) };
            if let Ok(pfn) = got {
                assert!(held.blocks.insert(pfn.0, (order, frozen)).is_none(), "{pfn} handed out twice");
            }
        }
        Op::Free { pick, order_delta, frozen_path } => {
            let Some((&pfn, &(order, frozen))) = held.blocks.iter().nth(pick % held.blocks.len().max(1)) else {
                return;
            };
            let given = (order as i64 + order_delta as i64).max(0) as u32;
            let result =
                if frozen_path { mm.free_frozen_pages(Pfn(pfn), given) } else { mm.free_pages(Pfn(pfn), given) };
            if result.is_ok() {
                // A non-compound block freed with references left keeps its
                // first page; anything else is gone.
                match mm.page_count(Pfn(pfn)) {
                    Ok(n) if n > 0 && !frozen && mm.page_flags(Pfn(pfn)).unwrap().contains(PageFlags::ALLOCATED) => {
                        held.blocks.insert(pfn, (0, false));
                    }
                    _ => {
                        held.blocks.remove(&pfn);
                    }
                }
            } else if matches!(result, Err(mmkit::FreeError::BadPage { .. })) {
                held.blocks.remove(&pfn);
            }
        }
        Op::FreeAny { pfn, order } => {
            if !held.owns(pfn) {
                assert!(mm.free_pages(Pfn(pfn), order).is_err(), "freed {pfn:#x}, which nobody held");
            }
        }
        Op::Put { pfn } => {
            if !held.owns(pfn) {
                assert!(mm.put_page(Pfn(pfn)).is_err(), "dropped a reference on {pfn:#x}, which nobody held");
            }
        }
        Op::Get { pfn } => {
            if mm.get_page(Pfn(pfn)).is_ok() {
                mm.put_page(Pfn(pfn)).unwrap();
            }
        }
        Op::Flags { pfn, bits, set } => {
            if held.in_cma(pfn) {
                return; // cma_release has no bad-page outcome to account for
            }
            let flags = PageFlags::from_bits(bits);
            let _ = if set { mm.set_page_flags(Pfn(pfn), flags) } else { mm.clear_page_flags(Pfn(pfn), flags) };
        }
        Op::Poison { pfn } => {
            let _ = mm.memory_failure(Pfn(pfn));
        }
        Op::ContigRange { start, len, gfp } => {
            let end = start.saturating_add(len);
            if contig.alloc_contig_range(Pfn(start), Pfn(end), MigrateType::Movable, Gfp::from_bits(gfp)).is_ok() {
                let compound = Gfp::from_bits(gfp).contains(Gfp::COMP);
                if compound {
                    held.blocks.insert(start, (len.trailing_zeros(), false));
                } else {
                    for p in start..end {
                        held.blocks.insert(p, (0, false));
                    }
                }
            }
        }
        Op::ContigPages { nr, gfp, nid } => {
            if let Ok(pfn) = contig.alloc_contig_pages(nr, Gfp::from_bits(gfp), nid) {
                if Gfp::from_bits(gfp).contains(Gfp::COMP) {
                    held.blocks.insert(pfn.0, (nr.trailing_zeros(), false));
                } else {
                    for p in pfn.0..pfn.0 + nr {
                        held.blocks.insert(p, (0, false));
                    }
                }
            }
        }
        Op::FreeContig { pfn, nr } => {
            // Only ever over pages the test does not hold as something else:
            // a run of held order-0 blocks, or pages not held at all.
            let end = pfn.saturating_add(nr);
            let all_ours = nr > 0
                && end <= PAGES
                && (pfn..end).all(|p| matches!(held.blocks.get(&p), Some(&(0, false))))
                && (pfn..end).all(|p| mm.page_count(Pfn(p)) == Ok(1));
            let none_ours = nr < 4096 && (pfn..end).all(|p| !held.owns(p));
            if all_ours {
                contig.free_contig_range(Pfn(pfn), nr).unwrap();
                for p in pfn..end {
                    held.blocks.remove(&p);
                }
            } else if none_ours {
                assert!(contig.free_contig_range(Pfn(pfn), nr).is_err() || nr == 0);
            }
        }
        Op::Cma { count, align } => {
            if let Some(id) = contig.cma_area("cma") {
                if let Ok(pfn) = contig.cma_alloc(id, count, align) {
                    held.cma.insert(pfn.0, count);
                }
            }
        }
        Op::CmaRelease { pick, pfn, count } => {
            let id = contig.cma_area("cma").unwrap();
            if let Some((&p, &n)) = held.cma.iter().nth(pick % held.cma.len().max(1)) {
                contig.cma_release(id, Pfn(p), n).unwrap();
                held.cma.remove(&p);
            } else {
                assert!(contig.cma_release(id, Pfn(pfn), count).is_err());
            }
        }
        Op::Bulk { n, gfp } => {
            let mut slots = vec![None; n];
            let filled = mm.alloc_pages_bulk(Gfp::from_bits(gfp), &mut slots);
            assert!(filled <= n);
            for pfn in slots.into_iter().flatten() {
                assert!(held.blocks.insert(pfn.0, (0, false)).is_none(), "{pfn} handed out twice");
            }
        }
        Op::BulkFreeAny { pfns } => {
            let foreign: Vec<Pfn> = pfns.into_iter().filter(|&p| !held.owns(p)).map(Pfn).collect();
            if !foreign.is_empty() {
                let err = mm.free_pages_bulk(&foreign).unwrap_err();
                assert_eq!(err.done, 0, "a page nobody held was freed");
            }
        }
        Op::Drain { cpu } => match Cpus::new(mm).drain_cpu_pages(cpu) {
            Ok(_) => assert!(cpu < Cpus::new(mm).nr_cpus()),
            Err(e) => assert_eq!(e, mmkit::IndexError::NoSuchCpu { cpu, nr_cpus: Cpus::new(mm).nr_cpus() }),
        },
        Op::Pinned { cpu, order } => {
            if let Ok(mut pinned) = Cpus::new(mm).pin_cpu(cpu) {
                if let Ok(pfn) = pinned.alloc_pages(Gfp::KERNEL, order) {
                    pinned.free_pages(pfn, order).unwrap();
                }
            }
        }
        Op::Locked { cpu, gfp, orders, bad } => {
            let gfp = Gfp::from_bits(gfp);
            let Ok(mut pinned) = Cpus::new(mm).pin_cpu(cpu) else { return };
            let Ok(mut zone) = pinned.lock_zone(gfp) else { return };
            let mut kept = Vec::new();
            for (i, order) in orders.into_iter().enumerate() {
                let Ok(pfn) = zone.alloc_pages(gfp, order) else { continue };
                assert!(!held.owns(pfn.0), "{pfn} handed out twice");
                if i % 2 == 0 {
                    zone.free_pages(pfn, order).unwrap();
                } else {
                    kept.push((pfn, order));
                }
            }
            let mut kept_model = Held::default();
            for &(pfn, order) in &kept {
                assert!(kept_model.blocks.insert(pfn.0, (order, false)).is_none(), "{pfn} handed out twice");
            }
            if !held.owns(bad.0) && !kept_model.owns(bad.0) {
                assert!(zone.free_pages(Pfn(bad.0), bad.1).is_err(), "freed {:#x}, which nobody held", bad.0);
            }
            drop(zone);
            drop(pinned);
            for (pfn, order) in kept {
                assert!(held.blocks.insert(pfn.0, (order, false)).is_none(), "{pfn} handed out twice");
            }
        }
    }
}

proptest! {
    // CHAOS_CASES=N runs more cases (a longer hunt); CI runs 128.
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("CHAOS_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(128)
    ))]
    #[test]
    fn arbitrary_input_never_panics_and_keeps_invariants(ops in prop::collection::vec(op(), 1..120)) {
        let mm = map();
        let mut held = Held::default();
        for op in ops {
            step(&mm, &mut held, op);
            check(&mm, &held);
        }
    }
}
