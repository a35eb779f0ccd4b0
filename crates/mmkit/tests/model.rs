//! Proves, by model-based property testing, that random sequences of
//! allocations, frees, reference changes, bad frees and hardware poison keep
//! the allocator consistent with a simple reference model.
//!
//! The model knows the live blocks (pfn, order, compound, refcount), the
//! leaked bad blocks and the poisoned pages. After every step: the
//! allocator's invariants hold; no block is handed out twice and none
//! overlaps a hole, a reserved, poisoned or leaked page; blocks are
//! naturally aligned and lie in one zone the GFP allows (the requested
//! node for `__GFP_THISNODE`); every error is the one the model predicts and
//! changes nothing; and per zone, free + live + offline (poisoned or leaked)
//! pages == managed pages. Each map is run twice: without per-CPU lists
//! (pure buddy), and with two CPUs' lists, allocating and freeing through
//! `CpuHandle`s of both CPUs, where pages cached on the lists count as free.

use mmkit::gfp::gfp_zone;
use mmkit::Cpus;
use mmkit::{
    AllocError, BadPageReason, FreeError, Gfp, MemoryFailure, MemoryMapBuilder, PageAllocator, PageError, PageFlags,
    Pfn, Report, ZoneType,
};
use proptest::prelude::*;
use proptest::sample::Index;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

const GFPS: [Gfp; 14] = [
    Gfp::KERNEL,
    Gfp::ATOMIC,
    Gfp::NOWAIT,
    Gfp::HIGHUSER_MOVABLE,
    Gfp::KERNEL.union(Gfp::COMP),
    Gfp::KERNEL.union(Gfp::DMA),
    Gfp::KERNEL.union(Gfp::DMA32),
    Gfp::KERNEL.union(Gfp::THISNODE),
    Gfp::HIGHUSER_MOVABLE.union(Gfp::COMP),
    Gfp::KERNEL.union(Gfp::RECLAIMABLE),
    Gfp::ATOMIC.union(Gfp::MEMALLOC),
    Gfp::KERNEL.union(Gfp::NORETRY),
    Gfp::TRANSHUGE_LIGHT,
    Gfp::ATOMIC.union(Gfp::COMP).union(Gfp::THISNODE),
];

/// A map for the model: zones, holes and reserved ranges.
struct Config {
    section_order: u32,
    zones: Vec<(usize, ZoneType, Range<u64>)>,
    holes: Vec<Range<u64>>,
    reserved: Vec<Range<u64>>,
}

fn ranges(r: &[(u64, u64)]) -> Vec<Range<u64>> {
    r.iter().map(|&(a, b)| a..b).collect()
}

fn config(which: u8) -> Config {
    match which {
        // One node, three zones with unaligned edges, a hole and reserved
        // pages; sections of 256 pages.
        0 => Config {
            section_order: 8,
            zones: vec![(0, ZoneType::Dma, 3..700), (0, ZoneType::Dma32, 700..1500), (0, ZoneType::Normal, 1500..2600)],
            holes: vec![900..950, 2300..2317],
            reserved: vec![1200..1213, 2000..2001, 940..960],
        },
        // Two nodes; node 1 has a MOVABLE zone. PFNs 2000..2100 are not in
        // any zone.
        1 => Config {
            section_order: 8,
            zones: vec![
                (0, ZoneType::Dma32, 0..1000),
                (0, ZoneType::Normal, 1000..2000),
                (1, ZoneType::Normal, 2100..3000),
                (1, ZoneType::Movable, 3000..3500),
            ],
            holes: ranges(&[(1400, 1410)]),
            reserved: ranges(&[(2500, 2530)]),
        },
        // Sections of 32 pages, smaller than MAX_PAGE_ORDER's 64: blocks
        // stop at order 5 and never cross a section.
        _ => Config {
            section_order: 5,
            zones: vec![(0, ZoneType::Dma32, 5..600), (0, ZoneType::Normal, 600..1300)],
            holes: ranges(&[(100, 140)]),
            reserved: ranges(&[(700, 701)]),
        },
    }
}

fn build(c: &Config, pcp: bool) -> PageAllocator {
    let mut b = MemoryMapBuilder::new()
        .per_cpu_lists(pcp)
        .nr_cpus(2)
        .pageblock_order(4)
        .max_page_order(6)
        .section_order(c.section_order)
        .hooks(mmkit::QuietHooks);
    for (nid, t, r) in &c.zones {
        b = b.zone(*nid, *t, r.clone());
    }
    for h in &c.holes {
        b = b.hole(h.clone());
    }
    for r in &c.reserved {
        b = b.reserved(r.clone());
    }
    b.build().unwrap()
}

#[derive(Clone, Debug)]
enum Op {
    Alloc {
        gfp: usize,
        order: u32,
        frozen: bool,
        node: usize,
        cpu: usize,
    },
    /// Frees (or drops a reference to) a live block, maybe with a wrong order.
    Free {
        which: Index,
        wrong: Option<u32>,
        cpu: usize,
    },
    /// Empties the per-CPU lists.
    Drain,
    /// put_page through a tail (or the head) of a live block.
    PutTail {
        which: Index,
        tail: Index,
    },
    /// get_page, and maybe put_page right after.
    Get {
        which: Index,
        put_too: bool,
    },
    /// Sets LRU on a live block and frees it: a bad page.
    BadFree {
        which: Index,
    },
    MemoryFailure {
        pfn: Index,
    },
    /// Frees a recently freed pfn again.
    FreeAgain {
        which: Index,
        order: u32,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..GFPS.len(), 0u32..=6, prop::bool::weighted(0.2), 0usize..3, 0usize..2)
            .prop_map(|(gfp, order, frozen, node, cpu)| Op::Alloc { gfp, order, frozen, node, cpu }),
        4 => (any::<Index>(), prop::option::weighted(0.1, 0u32..=7), 0usize..2)
            .prop_map(|(which, wrong, cpu)| Op::Free { which, wrong, cpu }),
        1 => Just(Op::Drain),
        1 => (any::<Index>(), any::<Index>()).prop_map(|(which, tail)| Op::PutTail { which, tail }),
        1 => (any::<Index>(), any::<bool>()).prop_map(|(which, put_too)| Op::Get { which, put_too }),
        1 => any::<Index>().prop_map(|which| Op::BadFree { which }),
        1 => any::<Index>().prop_map(|pfn| Op::MemoryFailure { pfn }),
        1 => (any::<Index>(), 0u32..=6).prop_map(|(which, order)| Op::FreeAgain { which, order }),
    ]
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Block {
    pfn: u64,
    order: u32,
    compound: bool,
    frozen: bool,
    refs: u32,
}

impl Block {
    fn pages(&self) -> Range<u64> {
        self.pfn..self.pfn + (1 << self.order)
    }
}

struct Model<'a> {
    mm: &'a PageAllocator,
    pcp: bool,
    live: Vec<Block>,
    leaked: Vec<Block>,
    poisoned: BTreeSet<u64>,
    holes: BTreeSet<u64>,
    reserved: BTreeSet<u64>,
    recently_freed: Vec<u64>,
}

impl<'a> Model<'a> {
    fn new(mm: &'a PageAllocator, c: &Config, pcp: bool) -> Self {
        let in_zone = |p: u64| mm.zones().iter().any(|z| z.span().contains(&p));
        let range = mm.start_pfn().0..mm.end_pfn().0;
        let holes: BTreeSet<u64> =
            range.clone().filter(|&p| !in_zone(p) || c.holes.iter().any(|h| h.contains(&p))).collect();
        let reserved = range.filter(|p| !holes.contains(p) && c.reserved.iter().any(|r| r.contains(p))).collect();
        Model {
            mm,
            pcp,
            live: Vec::new(),
            leaked: Vec::new(),
            poisoned: BTreeSet::new(),
            holes,
            reserved,
            recently_freed: Vec::new(),
        }
    }

    fn containing(blocks: &[Block], pfn: u64) -> Option<Block> {
        blocks.iter().copied().find(|b| b.pages().contains(&pfn))
    }

    fn is_free(&self, pfn: u64) -> bool {
        !self.holes.contains(&pfn)
            && !self.reserved.contains(&pfn)
            && !self.poisoned.contains(&pfn)
            && Self::containing(&self.live, pfn).is_none()
            && Self::containing(&self.leaked, pfn).is_none()
    }

    /// What freeing `pfn` must return when it does not start a live block.
    fn expected_free_error(&self, pfn: u64) -> FreeError {
        let p = Pfn(pfn);
        if let Some(b) = Self::containing(&self.live, pfn).or(Self::containing(&self.leaked, pfn)) {
            return if b.compound && pfn != b.pfn {
                FreeError::TailPage { pfn: p, head: Pfn(b.pfn) }
            } else if self.poisoned.contains(&pfn) {
                FreeError::Poisoned(p)
            } else {
                FreeError::NotAllocated(p)
            };
        }
        if self.holes.contains(&pfn) {
            FreeError::Hole(p)
        } else if self.poisoned.contains(&pfn) {
            FreeError::Poisoned(p)
        } else if self.reserved.contains(&pfn) {
            FreeError::Reserved(p)
        } else {
            FreeError::DoubleFree(p)
        }
    }

    fn remove_live(&mut self, i: usize) -> Block {
        let b = self.live.swap_remove(i);
        self.recently_freed.push(b.pfn);
        if self.recently_freed.len() > 16 {
            self.recently_freed.remove(0);
        }
        b
    }

    fn step(&mut self, op: &Op) {
        let mm = self.mm;
        match *op {
            Op::Alloc { gfp, order, frozen, node, cpu } => self.alloc(GFPS[gfp], order, frozen, node, cpu),
            Op::Drain => {
                Cpus::new(mm).drain_all_pages();
            }
            Op::Free { which, wrong, cpu } => {
                if self.live.is_empty() {
                    return;
                }
                let i = which.index(self.live.len());
                let b = self.live[i];
                let given = wrong.unwrap_or(b.order);
                let h = Cpus::new(mm).cpu(cpu).unwrap();
                let got = match (b.frozen, self.pcp) {
                    (true, true) => h.free_frozen_pages(Pfn(b.pfn), given),
                    (false, true) => h.free_pages(Pfn(b.pfn), given),
                    (true, false) => mm.free_frozen_pages(Pfn(b.pfn), given),
                    (false, false) => mm.free_pages(Pfn(b.pfn), given),
                };
                if given != b.order {
                    let err = FreeError::WrongOrder { pfn: Pfn(b.pfn), allocated: b.order, given };
                    assert_eq!(got, Err(err));
                } else {
                    assert_eq!(got, Ok(()));
                    if !b.frozen && !b.compound && b.order > 0 && b.refs > 1 {
                        // Linux's __free_pages: the rest of the block is
                        // freed, the first page stays as an order-0 page.
                        self.live[i].order = 0;
                    }
                    self.drop_ref(i);
                }
            }
            Op::PutTail { which, tail } => {
                if self.live.is_empty() {
                    return;
                }
                let i = which.index(self.live.len());
                let b = self.live[i];
                let pfn = if b.compound { b.pfn + tail.index(1 << b.order) as u64 } else { b.pfn };
                let got = mm.put_page(Pfn(pfn));
                if b.frozen {
                    let err = FreeError::RefcountMismatch { pfn: Pfn(b.pfn), refcount: 0 };
                    assert_eq!(got, Err(err));
                } else {
                    assert_eq!(got, Ok(()));
                    self.drop_ref(i);
                }
            }
            Op::Get { which, put_too } => {
                if self.live.is_empty() {
                    return;
                }
                let i = which.index(self.live.len());
                let b = self.live[i];
                let got = mm.get_page(Pfn(b.pfn));
                if b.frozen {
                    assert_eq!(got, Err(PageError::NotInUse(Pfn(b.pfn))));
                    return;
                }
                assert_eq!(got, Ok(b.refs + 1));
                self.live[i].refs += 1;
                if put_too {
                    mm.put_page(Pfn(b.pfn)).unwrap();
                    self.live[i].refs -= 1;
                }
                assert_eq!(mm.page_count(Pfn(b.pfn)), Ok(self.live[i].refs));
            }
            Op::BadFree { which } => {
                if self.live.is_empty() {
                    return;
                }
                let i = which.index(self.live.len());
                let b = self.live[i];
                if b.refs > 1 {
                    return;
                }
                mm.set_page_flags(Pfn(b.pfn), PageFlags::LRU).unwrap();
                let got = if b.frozen {
                    mm.free_frozen_pages(Pfn(b.pfn), b.order)
                } else {
                    mm.free_pages(Pfn(b.pfn), b.order)
                };
                let err = FreeError::BadPage { pfn: Pfn(b.pfn), reason: BadPageReason::FlagsSetAtFree(PageFlags::LRU) };
                assert_eq!(got, Err(err));
                let b = self.remove_live(i);
                self.leaked.push(b);
            }
            Op::MemoryFailure { pfn } => {
                let span = mm.end_pfn().0 - mm.start_pfn().0;
                let pfn = mm.start_pfn().0 + pfn.index(span as usize) as u64;
                let got = mm.memory_failure(Pfn(pfn));
                let expected = if self.holes.contains(&pfn) {
                    Err(PageError::Hole(Pfn(pfn)))
                } else if self.poisoned.contains(&pfn) {
                    Ok(MemoryFailure::AlreadyPoisoned)
                } else if self.reserved.contains(&pfn) {
                    Ok(MemoryFailure::Reserved)
                } else if self.is_free(pfn) {
                    Ok(MemoryFailure::TakenOffFreeList)
                } else if Self::containing(&self.leaked, pfn).is_some() {
                    Ok(MemoryFailure::Leaked)
                } else {
                    Ok(MemoryFailure::InUse)
                };
                assert_eq!(got, expected, "memory_failure({pfn})");
                if got.is_ok() {
                    self.poisoned.insert(pfn);
                }
            }
            Op::FreeAgain { which, order } => {
                if self.recently_freed.is_empty() {
                    return;
                }
                let pfn = self.recently_freed[which.index(self.recently_freed.len())];
                if self.live.iter().any(|b| b.pfn == pfn) {
                    return; // handed out again: a legitimate free
                }
                let expected = self.expected_free_error(pfn);
                let before = snapshot(mm);
                assert_eq!(mm.free_pages(Pfn(pfn), order), Err(expected));
                // put_page accepts tails (it drops the head's reference), so
                // it must fail only where no live block holds the page.
                // A tail of a leaked compound page resolves to its head.
                if Self::containing(&self.live, pfn).is_none() {
                    let put_expected = match Self::containing(&self.leaked, pfn) {
                        Some(b) if b.compound => self.expected_free_error(b.pfn),
                        _ => expected,
                    };
                    assert_eq!(mm.put_page(Pfn(pfn)), Err(put_expected));
                }
                assert_eq!(snapshot(mm), before, "a rejected free changed state");
            }
        }
    }

    /// Drops one reference of live block `i`, removing it on the last.
    fn drop_ref(&mut self, i: usize) {
        let b = self.live[i];
        if b.frozen || b.refs == 1 {
            self.remove_live(i);
        } else {
            self.live[i].refs -= 1;
        }
    }

    fn alloc(&mut self, gfp: Gfp, order: u32, frozen: bool, node: usize, cpu: usize) {
        let mm = self.mm;
        let max = mm.geometry().merge_order();
        let before = snapshot(mm);
        let got = if frozen {
            mm.alloc_frozen_pages_node(node, gfp, order)
        } else if self.pcp {
            Cpus::new(mm).cpu(cpu).unwrap().alloc_pages_node(node, gfp, order)
        } else {
            mm.alloc_pages_node(node, gfp, order)
        };
        let pfn = match got {
            Ok(p) => p.0,
            Err(e) => {
                let expected_err = if order > max {
                    Some(AllocError::OrderTooLarge { order, max })
                } else if node >= mm.nr_nodes() {
                    Some(AllocError::NoSuchNode(node))
                } else {
                    None
                };
                match expected_err {
                    Some(x) => {
                        assert_eq!(e, x);
                        assert_eq!(snapshot(mm), before);
                    }
                    None => {
                        assert_eq!(e, AllocError::NoMemory { order, gfp });
                        // (Other CPUs' lists may hold pages it cannot use.)
                        if gfp.contains(Gfp::MEMALLOC) && !self.pcp {
                            self.assert_no_usable_block(gfp, order);
                        }
                    }
                }
                return;
            }
        };
        assert!(order <= max && node < mm.nr_nodes(), "should have failed");
        assert_eq!(pfn % (1 << order), 0, "misaligned order-{order} block {pfn}");
        let block =
            Block { pfn, order, compound: gfp.contains(Gfp::COMP) && order > 0, frozen, refs: u32::from(!frozen) };
        for p in block.pages() {
            assert!(self.is_free(p), "pfn {p} handed out while not free");
        }
        let zone = mm.zones().iter().find(|z| z.span().contains(&pfn)).expect("block in a zone");
        assert!(zone.span().end >= block.pages().end, "block crosses a zone");
        assert!(zone.zone_type() <= gfp_zone(gfp).unwrap(), "{gfp} got {:?}", zone.zone_type());
        if gfp.contains(Gfp::THISNODE) {
            assert_eq!(zone.nid(), node, "THISNODE left node {node}");
        }
        assert_eq!(mm.page_count(Pfn(pfn)), Ok(block.refs));
        if block.compound {
            let last = Pfn(block.pages().end - 1);
            assert_eq!(mm.compound_head(last), Ok(Pfn(pfn)));
        }
        self.live.push(block);
    }

    /// A NO_WATERMARKS request failed: no allowed zone may hold a free
    /// block of at least `order` on an ordinary (pcp-type) list, since
    /// claiming and stealing may take any of them.
    fn assert_no_usable_block(&self, gfp: Gfp, order: u32) {
        let highest = gfp_zone(gfp).unwrap();
        for s in Report::new(self.mm).zone_snapshots() {
            if s.zone_type > highest {
                continue;
            }
            for mt in 0..3 {
                let row = &s.free.free_blocks_per_type[mt];
                let usable: u64 = row[order as usize..].iter().sum();
                assert_eq!(usable, 0, "{gfp} order {order} failed; {:?} has blocks: {row:?}", s.zone_type);
            }
        }
    }

    fn check(&self) {
        let mm = self.mm;
        if let Err(v) = Report::new(mm).check_invariants() {
            panic!("invariant broken: {v}");
        }
        let mut used: BTreeMap<u64, ()> = BTreeMap::new();
        for b in self.live.iter().chain(&self.leaked) {
            for p in b.pages() {
                assert!(used.insert(p, ()).is_none(), "pfn {p} in two blocks");
            }
        }
        let snaps = Report::new(mm).zone_snapshots();
        for (z, snap) in mm.zones().iter().zip(&snaps) {
            let span = z.span();
            let live: u64 = self.live.iter().filter(|b| span.contains(&b.pfn)).map(|b| 1u64 << b.order).sum();
            let leaked: u64 = self.leaked.iter().filter(|b| span.contains(&b.pfn)).map(|b| 1u64 << b.order).sum();
            // Poisoned pages outside every block (blocks count their own).
            let offline = self
                .poisoned
                .range(span.clone())
                .filter(|&&p| {
                    !self.reserved.contains(&p)
                        && Self::containing(&self.live, p).is_none()
                        && Self::containing(&self.leaked, p).is_none()
                })
                .count() as u64;
            assert_eq!(snap.free_pages, z.free_pages());
            assert!(self.pcp || snap.pcp_pages == 0);
            assert_eq!(
                z.free_pages() + snap.pcp_pages + live + leaked + offline,
                z.managed_pages(),
                "conservation in {:?} of node {}",
                z.zone_type(),
                z.nid()
            );
        }
    }
}

/// State that a rejected call must leave alone.
fn snapshot(mm: &PageAllocator) -> (Vec<mmkit::ZoneSnapshot>, mmkit::StatsSnapshot) {
    (Report::new(mm).zone_snapshots(), Report::new(mm).stats())
}

fn run(which: u8, pcp: bool, ops: &[Op]) {
    let c = config(which);
    let mm = build(&c, pcp);
    let mut model = Model::new(&mm, &c, pcp);
    model.check();
    for op in ops {
        model.step(op);
        model.check();
    }
    // Free everything that is left: every free page comes back.
    while let Some(b) = model.live.pop() {
        let p = Pfn(b.pfn);
        if b.frozen {
            mm.free_frozen_pages(p, b.order).unwrap();
        } else {
            let mut order = b.order;
            for _ in 0..b.refs {
                mm.free_pages(p, order).unwrap();
                if !b.compound {
                    // Freed with references left, a non-compound block
                    // keeps only its first page.
                    order = 0;
                }
            }
        }
    }
    Cpus::new(&mm).drain_all_pages();
    model.check();
}

fn cases() -> u32 {
    std::env::var("MODEL_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(96)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn one_node_three_zones(ops in prop::collection::vec(op(), 1..300)) {
        run(0, false, &ops);
    }

    #[test]
    fn two_nodes_with_movable(ops in prop::collection::vec(op(), 1..300)) {
        run(1, false, &ops);
    }

    #[test]
    fn sections_smaller_than_max_order(ops in prop::collection::vec(op(), 1..300)) {
        run(2, false, &ops);
    }

    #[test]
    fn one_node_three_zones_per_cpu(ops in prop::collection::vec(op(), 1..300)) {
        run(0, true, &ops);
    }

    #[test]
    fn two_nodes_with_movable_per_cpu(ops in prop::collection::vec(op(), 1..300)) {
        run(1, true, &ops);
    }

    #[test]
    fn sections_smaller_than_max_order_per_cpu(ops in prop::collection::vec(op(), 1..300)) {
        run(2, true, &ops);
    }
}

/// Regression (found by the per-CPU model): a page freed to a per-CPU list
/// and drained next to a free buddy merged into it but kept its per-CPU
/// marking, leaving a page with state inside a free block.
#[test]
fn drained_page_merges_cleanly() {
    let mm = MemoryMapBuilder::new().nr_cpus(2).zone(0, ZoneType::Normal, 0..4096).build().unwrap();
    let (c0, c1) = (Cpus::new(&mm).cpu(0).unwrap(), Cpus::new(&mm).cpu(1).unwrap());
    let a = c0.alloc_pages(Gfp::KERNEL, 0).unwrap();
    let b = c0.alloc_pages(Gfp::KERNEL, 0).unwrap();
    assert_eq!(a.0 ^ 1, b.0, "buddies");
    c0.free_pages(a, 0).unwrap();
    Cpus::new(&mm).drain_all_pages();
    c1.free_pages(b, 0).unwrap();
    Report::new(&mm).check_invariants().unwrap();
    Cpus::new(&mm).drain_all_pages();
    Report::new(&mm).check_invariants().unwrap();
    assert_eq!(mm.page_flags(b), Ok(PageFlags::EMPTY));
    assert_eq!(Report::new(&mm).nr_free_pages(), 4096);
}

/// Regression: a tail of a leaked (bad) compound page resolves to its head
/// in `put_page`, which then reports the head as not allocated, while
/// `free_pages` of the tail names the tail.
#[test]
fn put_page_on_a_leaked_compound_tail() {
    let mm = build(&config(0), false);
    let head = mm.alloc_pages(Gfp::KERNEL | Gfp::COMP, 2).unwrap();
    mm.set_page_flags(head, PageFlags::LRU).unwrap();
    assert!(matches!(mm.free_pages(head, 2), Err(FreeError::BadPage { .. })));
    let tail = Pfn(head.0 + 1);
    assert_eq!(mm.free_pages(tail, 0), Err(FreeError::TailPage { pfn: tail, head }));
    assert_eq!(mm.put_page(tail), Err(FreeError::NotAllocated(head)));
    Report::new(&mm).check_invariants().unwrap();
}
