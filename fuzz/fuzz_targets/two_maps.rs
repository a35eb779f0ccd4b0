//! Fuzz target for two page allocators side by side: operation sequences
//! (allocations, frees, bulk, references, contiguous ranges, compaction,
//! drains, pinned CPUs, owned `PageGuard`s) where PFNs cross from one map
//! to the other. The two maps overlap in PFN values, so a PFN of one names
//! a page of the other too, and a guarded block's PFN is tried on every
//! bare-PFN call of both maps: its own map must refuse it. A simple model of each map (which blocks it handed out, with what
//! order and how many references) predicts every result; after every
//! operation both maps keep their invariants and conserve their pages.
//!
//! The maps are kept from one input to the next (see `mmkit_fuzz`): each
//! input starts on maps that hold nothing and frees all it took.
//!
//! Run with `cargo +nightly fuzz run two_maps` from `fuzz/`.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use mmkit::{
    Contig, FreeError, Gfp, IndexError, MemoryMapBuilder, MigrateType, PageAllocator, PageGuard, Pfn, Report, ZoneType,
};
use mmkit::{Cpus, Tuning};
use mmkit_fuzz::Persistent;
use std::collections::BTreeMap;

#[derive(Arbitrary, Debug)]
enum Op {
    Alloc { map: bool, gfp: u8, order: u8 },
    Free { map: bool, pick: u16, wrong_order: bool },
    Bulk { map: bool, n: u8 },
    BulkFree { map: bool, picks: Vec<u16> },
    GetPage { map: bool, pick: u16 },
    PutPage { map: bool, pick: u16 },
    Contig { map: bool, start: u16, len: u8 },
    FreeContig { map: bool, pick: u16 },
    Compact { map: bool, zone: u8 },
    Drain { map: bool, cpu: u8 },
    Pinned { map: bool, cpu: u8, order: u8 },
    Score { map: bool, nid: u8 },
    Guard { map: bool, gfp: u8, order: u8 },
    GuardDrop { pick: u16 },
    GuardIntoPfn { pick: u16 },
}

const GFPS: [Gfp; 5] = [Gfp::KERNEL, Gfp::ATOMIC, Gfp::HIGHUSER_MOVABLE, Gfp::KERNEL.union(Gfp::ZERO), Gfp::NOWAIT];

/// One map and what the model knows of it, kept between inputs.
struct Side {
    mm: PageAllocator,
    /// Block start → (order, references).
    blocks: BTreeMap<u64, (u32, u32)>,
    /// Contiguous ranges: start → pages.
    contig: BTreeMap<u64, u64>,
    /// Free pages (buddy and per-CPU) when nothing is held.
    total: u64,
}

impl Side {
    fn new(mm: PageAllocator) -> Self {
        Cpus::new(&mm).drain_all_pages();
        let total = Report::new(&mm).nr_free_pages();
        Self { mm, blocks: BTreeMap::new(), contig: BTreeMap::new(), total }
    }

    /// The map borrowed apart from the model, so that guards can borrow
    /// the map while the model changes.
    fn view(&mut self) -> View<'_> {
        View {
            mm: &self.mm,
            blocks: &mut self.blocks,
            contig: &mut self.contig,
            guarded: BTreeMap::new(),
            total: self.total,
        }
    }
}

/// One input's view of a side.
struct View<'a> {
    mm: &'a PageAllocator,
    blocks: &'a mut BTreeMap<u64, (u32, u32)>,
    contig: &'a mut BTreeMap<u64, u64>,
    /// Blocks held by this input's guards: start → order.
    guarded: BTreeMap<u64, u32>,
    total: u64,
}

impl View<'_> {
    fn held_pages(&self) -> u64 {
        let blocks = self.blocks.values().map(|&(o, _)| 1u64 << o).sum::<u64>();
        let guarded = self.guarded.values().map(|&o| 1u64 << o).sum::<u64>();
        blocks + guarded + self.contig.values().sum::<u64>()
    }

    fn overlaps(&self, start: u64, pages: u64) -> bool {
        let hit_block = self.blocks.iter().any(|(&s, &(o, _))| s < start + pages && start < s + (1 << o));
        let hit_guard = self.guarded.iter().any(|(&s, &o)| s < start + pages && start < s + (1 << o));
        let hit_range = self.contig.iter().any(|(&s, &n)| s < start + pages && start < s + n);
        hit_block || hit_guard || hit_range
    }

    fn check(&self) {
        Report::new(self.mm).check_invariants().unwrap();
        let free = Report::new(&self.mm).nr_free_pages() + Report::new(&self.mm).nr_pcp_pages();
        assert_eq!(free + self.held_pages(), self.total, "pages lost or made up");
    }

    /// Every bare-PFN call on a page of this map's guards: refused, and
    /// nothing changes.
    fn refuse_guarded(&self, pfn: u64, order: u32) {
        let owned = |r: Result<(), FreeError>| matches!(r, Err(FreeError::Owned { .. }));
        assert!(owned(self.mm.free_pages(Pfn(pfn), order)), "freed guarded {pfn} by pfn");
        assert!(owned(self.mm.free_frozen_pages(Pfn(pfn), order)), "freed guarded {pfn} frozen");
        assert!(self.mm.put_page(Pfn(pfn)).is_err(), "put guarded {pfn}");
        assert!(self.mm.get_page(Pfn(pfn)).is_err(), "referenced guarded {pfn}");
        assert!(self.mm.free_pages_bulk(&[Pfn(pfn)]).is_err(), "bulk-freed guarded {pfn}");
    }
}

/// A PFN chosen among both maps' blocks (so it crosses maps half the time),
/// or a raw value.
fn pick(sides: &[View; 2], pick: u16) -> u64 {
    let held = |s: &View| s.blocks.keys().chain(s.guarded.keys()).copied().collect::<Vec<_>>();
    let all: Vec<u64> = sides.iter().flat_map(held).collect();
    if all.is_empty() || pick % 8 == 7 {
        u64::from(pick)
    } else {
        all[usize::from(pick) % all.len()]
    }
}

/// The two maps, kept from one input to the next (see `mmkit_fuzz`).
static SIDES: Persistent<[Side; 2]> = Persistent::new();

fn fresh_sides() -> [Side; 2] {
    let a = MemoryMapBuilder::with_memory(8 << 20).nr_cpus(2).cpu_id_fn(|| 0).hooks(mmkit::QuietHooks).build();
    let b = MemoryMapBuilder::new()
        .zone(0, ZoneType::Normal, 1024..3072)
        .pageblock_order(6)
        .max_page_order(8)
        .nr_cpus(1)
        .cpu_id_fn(|| 0)
        .hooks(mmkit::QuietHooks)
        .build();
    [Side::new(a.unwrap()), Side::new(b.unwrap())]
}

fuzz_target!(|ops: Vec<Op>| SIDES.with(fresh_sides, |sides| run(sides, ops)));

/// Runs one input on maps that hold nothing, and frees everything it took.
fn run(persistent: &mut [Side; 2], ops: Vec<Op>) {
    let [a, b] = persistent;
    let mut sides = [a.view(), b.view()];
    let sides = &mut sides;
    for s in sides.iter() {
        assert!(s.blocks.is_empty() && s.contig.is_empty());
        s.check();
    }
    // This input's guards, each with its map's index; dropped at the end.
    let mut guards: Vec<(usize, PageGuard<'_>)> = Vec::new();
    for op in ops.into_iter().take(64) {
        match op {
            Op::Alloc { map, gfp, order } => {
                let s = &mut sides[map as usize];
                let order = u32::from(order % 6);
                if let Ok(pfn) = s.mm.alloc_pages(GFPS[usize::from(gfp) % GFPS.len()], order) {
                    assert!(!s.overlaps(pfn.0, 1 << order), "handed out twice: {pfn} order {order}");
                    assert_eq!(pfn.0 % (1 << order), 0, "misaligned");
                    s.blocks.insert(pfn.0, (order, 1));
                }
            }
            Op::Free { map, pick: p, wrong_order } => {
                let pfn = pick(sides, p);
                let s = &mut sides[map as usize];
                if let Some(&order) = s.guarded.get(&pfn) {
                    s.refuse_guarded(pfn, order);
                    continue;
                }
                match s.blocks.get(&pfn).copied() {
                    Some((order, 1)) if !wrong_order => {
                        s.mm.free_pages(Pfn(pfn), order).unwrap();
                        s.blocks.remove(&pfn);
                    }
                    Some((order, refs)) if !wrong_order => {
                        s.mm.free_pages(Pfn(pfn), order).unwrap();
                        s.blocks.insert(pfn, (order, refs - 1));
                    }
                    Some((order, _)) => {
                        assert!(s.mm.free_pages(Pfn(pfn), order + 1).is_err());
                    }
                    // Pages of a contiguous range are order-0 pages of their own.
                    None if s.contig.iter().any(|(&start, &n)| start <= pfn && pfn < start + n) => {}
                    None => {
                        for order in 0..3 {
                            assert!(s.mm.free_pages(Pfn(pfn), order).is_err(), "freed {pfn} it never handed out");
                        }
                    }
                }
            }
            Op::Bulk { map, n } => {
                let s = &mut sides[map as usize];
                let mut out = vec![None; usize::from(n % 24)];
                let got = s.mm.alloc_pages_bulk(Gfp::KERNEL, &mut out);
                assert_eq!(got, out.iter().flatten().count());
                for pfn in out.into_iter().flatten() {
                    assert!(!s.overlaps(pfn.0, 1), "bulk handed out {pfn} twice");
                    s.blocks.insert(pfn.0, (0, 1));
                }
            }
            Op::BulkFree { map, picks } => {
                let mut pfns: Vec<u64> = picks.iter().take(16).map(|&p| pick(sides, p)).collect();
                pfns.sort_unstable();
                pfns.dedup();
                let s = &mut sides[map as usize];
                // Pages of this map's contiguous ranges are order-0 pages
                // of their own, which the model does not split: left out,
                // as `Free` leaves them alone.
                pfns.retain(|&p| !s.contig.iter().any(|(&start, &n)| start <= p && p < start + n));
                // Any held block start is valid (freed with its own order,
                // or one reference dropped); every valid entry is handled
                // even when others are refused.
                // A guarded block is refused like any page not handed out.
                let valid: Vec<u64> = pfns.iter().copied().filter(|p| s.blocks.contains_key(p)).collect();
                let list: Vec<Pfn> = pfns.iter().map(|&p| Pfn(p)).collect();
                let invalid = pfns.len() - valid.len();
                match s.mm.free_pages_bulk(&list) {
                    Ok(done) => assert_eq!((done, invalid), (valid.len(), 0)),
                    Err(e) => assert_eq!((e.done, e.failed), (valid.len(), invalid), "{e:?}"),
                }
                for p in valid {
                    let (order, refs) = s.blocks[&p];
                    if refs == 1 {
                        s.blocks.remove(&p);
                    } else {
                        s.blocks.insert(p, (order, refs - 1));
                    }
                }
            }
            Op::GetPage { map, pick: p } => {
                let pfn = pick(sides, p);
                let s = &mut sides[map as usize];
                match s.blocks.get(&pfn).copied() {
                    Some((0, refs)) => {
                        assert_eq!(s.mm.get_page(Pfn(pfn)), Ok(refs + 1));
                        s.blocks.insert(pfn, (0, refs + 1));
                    }
                    Some(_) => {}
                    None if !s.overlaps(pfn, 1) => assert!(s.mm.get_page(Pfn(pfn)).is_err()),
                    None => {}
                }
            }
            Op::PutPage { map, pick: p } => {
                let pfn = pick(sides, p);
                let s = &mut sides[map as usize];
                match s.blocks.get(&pfn).copied() {
                    Some((0, 1)) => {
                        s.mm.put_page(Pfn(pfn)).unwrap();
                        s.blocks.remove(&pfn);
                    }
                    Some((0, refs)) => {
                        s.mm.put_page(Pfn(pfn)).unwrap();
                        s.blocks.insert(pfn, (0, refs - 1));
                    }
                    Some(_) => {}
                    None if !s.overlaps(pfn, 1) => assert!(s.mm.put_page(Pfn(pfn)).is_err()),
                    None => {}
                }
            }
            Op::Contig { map, start, len } => {
                let s = &mut sides[map as usize];
                let (start, pages) = (u64::from(start % 4096), u64::from(len % 64) + 1);
                let r = Contig::new(&s.mm).alloc_contig_range(
                    Pfn(start),
                    Pfn(start + pages),
                    MigrateType::Movable,
                    Gfp::KERNEL,
                );
                if r.is_ok() {
                    assert!(!s.overlaps(start, pages), "contig range over held pages");
                    s.contig.insert(start, pages);
                }
            }
            Op::FreeContig { map, pick: p } => {
                let s = &mut sides[map as usize];
                if s.contig.is_empty() {
                    continue;
                }
                let (&start, &pages) = s.contig.iter().nth(usize::from(p) % s.contig.len()).unwrap();
                Contig::new(&s.mm).free_contig_range(Pfn(start), pages).unwrap();
                s.contig.remove(&start);
            }
            Op::Compact { map, zone } => {
                let s = &sides[map as usize];
                let zone = usize::from(zone % 8);
                let nr_zones = s.mm.zones().len();
                match Tuning::new(&s.mm).compact_zone(zone, None) {
                    Ok(_) => assert!(zone < nr_zones),
                    Err(e) => assert_eq!(e, IndexError::NoSuchZone { zone, nr_zones }),
                }
            }
            Op::Drain { map, cpu } => {
                let s = &sides[map as usize];
                let cpu = usize::from(cpu % 4);
                match Cpus::new(&s.mm).drain_cpu_pages(cpu) {
                    Ok(_) => assert!(cpu < Cpus::new(&s.mm).nr_cpus()),
                    Err(e) => assert_eq!(e, IndexError::NoSuchCpu { cpu, nr_cpus: Cpus::new(&s.mm).nr_cpus() }),
                }
            }
            Op::Pinned { map, cpu, order } => {
                let s = &sides[map as usize];
                if let Ok(mut pinned) = Cpus::new(&s.mm).pin_cpu(usize::from(cpu % 3)) {
                    let order = u32::from(order % 4);
                    if let Ok(pfn) = pinned.alloc_pages(Gfp::KERNEL, order) {
                        assert!(!s.overlaps(pfn.0, 1 << order), "pinned handed out {pfn} twice");
                        pinned.free_pages(pfn, order).unwrap();
                    }
                }
            }
            Op::Score { map, nid } => {
                let s = &sides[map as usize];
                let nid = usize::from(nid % 3);
                assert_eq!(Tuning::new(&s.mm).fragmentation_score(nid).is_ok(), nid < s.mm.nr_nodes());
            }
            Op::Guard { map, gfp, order } => {
                let s = &mut sides[map as usize];
                let order = u32::from(order % 6);
                let mm: &PageAllocator = s.mm;
                if let Ok(guard) = mm.alloc_pages_guarded(GFPS[usize::from(gfp) % GFPS.len()], order) {
                    let pfn = guard.pfn().0;
                    assert!(!s.overlaps(pfn, 1 << order), "guard over held pages: {pfn} order {order}");
                    s.guarded.insert(pfn, order);
                    s.refuse_guarded(pfn, order);
                    guards.push((map as usize, guard));
                }
            }
            Op::GuardDrop { pick } => {
                if guards.is_empty() {
                    continue;
                }
                let (map, guard) = guards.swap_remove(usize::from(pick) % guards.len());
                sides[map].guarded.remove(&guard.pfn().0);
                assert_eq!(guard.free(), Ok(()));
            }
            Op::GuardIntoPfn { pick } => {
                if guards.is_empty() {
                    continue;
                }
                let (map, guard) = guards.swap_remove(usize::from(pick) % guards.len());
                let s = &mut sides[map];
                let order = s.guarded.remove(&guard.pfn().0).unwrap();
                let pfn = guard.into_pfn();
                assert_eq!(s.mm.page_count(pfn), Ok(1), "a plain block with one reference");
                s.blocks.insert(pfn.0, (order, 1));
            }
        }
        for s in sides.iter() {
            s.check();
        }
    }
    for (map, guard) in guards {
        sides[map].guarded.remove(&guard.pfn().0);
        drop(guard);
    }
    for s in sides.iter_mut() {
        for (pfn, (order, refs)) in std::mem::take(s.blocks) {
            for _ in 0..refs {
                s.mm.free_pages(Pfn(pfn), order).unwrap();
            }
        }
        for (start, pages) in std::mem::take(s.contig) {
            Contig::new(&s.mm).free_contig_range(Pfn(start), pages).unwrap();
        }
        Cpus::new(&s.mm).drain_all_pages();
        s.check();
    }
}
