//! Property tests for contiguous allocation, batched freeing and CMA.
//!
//! Properties:
//! 1. Under random mixes of ordinary allocations (movable and unmovable),
//!    contiguous allocations (ranges, `alloc_contig_pages`, compound,
//!    frozen), frees (batched and page by page) and CMA alloc/release,
//!    `check_invariants()` holds after every step and every block the model
//!    says is live is allocated, at the place the migrator reported.
//! 2. A call that fails, as busy or on bad input, without having migrated
//!    anything leaves the allocator exactly as it was: buddyinfo,
//!    pagetypeinfo, zone snapshots (free counts, counters, pageblock counts)
//!    and the flags and refcount of every page.
//! 3. `free_contig_range` / `free_contig_frozen_range` leave the allocator
//!    in the same observable state (and the same stats) as freeing each page
//!    on its own, with extra references, bad pages and poisoned pages mixed
//!    into the range.

use mmkit::Cpus;
use mmkit::{
    CmaError, CmaId, Contig, ContigError, CopyMigrator, Geometry, Gfp, MemoryMapBuilder, MigrateType, PageAllocator,
    PageFlags, Pfn, QuietHooks, Report, ZoneType,
};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

mod common;
use common::{first_difference, observe, Observed};

const END: u64 = 6144;
const CMA: std::ops::Range<u64> = 4096..5120;

type Moves = Arc<Mutex<Vec<(Pfn, Pfn, u32)>>>;

/// Two zones with a reserved range, sections of 512 pages, a CMA area.
fn build() -> (PageAllocator, Moves, CmaId) {
    let moves: Moves = Arc::default();
    let log = moves.clone();
    let mm = MemoryMapBuilder::new()
        .geometry(Geometry { page_shift: 12, section_order: 9, pageblock_order: 3, max_page_order: 6 })
        .zone(0, ZoneType::Dma32, 0..2048)
        .zone(0, ZoneType::Normal, 2048..END)
        .reserved(100..103)
        .cma("cma0", CMA)
        .min_free_kbytes(256)
        .hooks(QuietHooks)
        // One CPU's lists whatever CPU the test runs on: twins stay twins.
        .cpu_id_fn(|| 0)
        .migrator(CopyMigrator::new(move |old, new, order| log.lock().unwrap().push((old, new, order))))
        .build()
        .unwrap();
    let id = Contig::new(&mm).cma_area("cma0").unwrap();
    (mm, moves, id)
}

fn same(a: &Observed, b: &Observed) -> Result<(), TestCaseError> {
    match first_difference(a, b) {
        Some(difference) => Err(TestCaseError::fail(difference)),
        None => Ok(()),
    }
}

/// What the model holds at a PFN.
#[derive(Clone, Copy, Debug)]
enum Live {
    /// An ordinary block from `alloc_pages`.
    Block(Block),
    /// Order-0 pages from a contiguous allocation.
    Range { nr: u64, frozen: bool },
    /// One compound page from a contiguous allocation.
    Compound { order: u32, frozen: bool },
    /// Pages from `cma_alloc`.
    Cma { count: u64 },
}

/// An ordinary block; `pinned` when a second reference was taken (the
/// migrator refuses such blocks).
#[derive(Clone, Copy, Debug)]
struct Block {
    order: u32,
    compound: bool,
    pinned: bool,
    movable: bool,
}

#[derive(Clone, Debug)]
enum Op {
    Alloc {
        movable: bool,
        order: u32,
        comp: bool,
    },
    Free {
        pick: usize,
    },
    Range {
        start: u64,
        len: u64,
        cma: bool,
        frozen: bool,
    },
    /// A range around a live block, so that it must move or make it busy.
    Around {
        pick: usize,
        lead: u64,
        len: u64,
    },
    Pin {
        pick: usize,
    },
    Compound {
        start: u64,
        order: u32,
        frozen: bool,
    },
    Pages {
        nr: u64,
        frozen: bool,
    },
    FreeRange {
        pick: usize,
        per_page: bool,
    },
    CmaAlloc {
        count: u64,
        align: u32,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (any::<bool>(), 0u32..4, any::<bool>())
            .prop_map(|(movable, order, comp)| Op::Alloc { movable, order, comp }),
        3 => any::<usize>().prop_map(|pick| Op::Free { pick }),
        3 => (0..END, 1u64..300, any::<bool>(), any::<bool>())
            .prop_map(|(start, len, cma, frozen)| Op::Range { start, len, cma, frozen }),
        3 => (any::<usize>(), 0u64..16, 1u64..64)
            .prop_map(|(pick, lead, len)| Op::Around { pick, lead, len }),
        1 => any::<usize>().prop_map(|pick| Op::Pin { pick }),
        1 => (0..END, 0u32..9, any::<bool>())
            .prop_map(|(start, order, frozen)| Op::Compound { start, order, frozen }),
        1 => (1u64..400, any::<bool>()).prop_map(|(nr, frozen)| Op::Pages { nr, frozen }),
        3 => (any::<usize>(), any::<bool>())
            .prop_map(|(pick, per_page)| Op::FreeRange { pick, per_page }),
        2 => (1u64..300, 0u32..6).prop_map(|(count, align)| Op::CmaAlloc { count, align }),
    ]
}

struct Harness {
    mm: PageAllocator,
    moves: Moves,
    cma: CmaId,
    live: BTreeMap<u64, Live>,
}

impl Harness {
    /// Moves the model's blocks where the migrator put them; returns how
    /// many moved.
    fn apply_moves(&mut self) -> Result<usize, TestCaseError> {
        let moves: Vec<_> = self.moves.lock().unwrap().drain(..).collect();
        for &(old, new, order) in &moves {
            let Some(Live::Block(block)) = self.live.remove(&old.0) else {
                return Err(TestCaseError::fail(format!("moved unknown block {old}")));
            };
            prop_assert_eq!(block.order, order);
            prop_assert!(block.movable && !block.pinned, "{:?} moved", block);
            self.live.insert(new.0, Live::Block(block));
        }
        Ok(moves.len())
    }

    /// One of the live contiguous allocations.
    fn pick_range(&self, pick: usize) -> Option<(u64, Live)> {
        let candidates: Vec<(u64, Live)> =
            self.live.iter().filter(|(_, l)| !matches!(l, Live::Block(_))).map(|(&p, &l)| (p, l)).collect();
        (!candidates.is_empty()).then(|| candidates[pick % candidates.len()])
    }

    /// One of the live ordinary blocks, movable ones only if asked.
    fn pick_block(&self, pick: usize, movable_only: bool) -> Option<(u64, Block)> {
        let candidates: Vec<(u64, Block)> = self
            .live
            .iter()
            .filter_map(|(&p, l)| match l {
                Live::Block(b) if b.movable || !movable_only => Some((p, *b)),
                _ => None,
            })
            .collect();
        (!candidates.is_empty()).then(|| candidates[pick % candidates.len()])
    }

    /// Runs a contiguous request; on failure checks property 2.
    fn contig(
        &mut self,
        before: &Observed,
        result: Result<(), ContigError>,
        start: u64,
        live: Live,
    ) -> Result<(), TestCaseError> {
        let moved = self.apply_moves()?;
        match result {
            Ok(()) => {
                self.live.insert(start, live);
            }
            Err(e) => {
                let allowed = matches!(
                    e,
                    ContigError::Busy { .. }
                        | ContigError::NotInOneZone { .. }
                        | ContigError::OutOfRange(_)
                        | ContigError::BadCompoundRange { .. }
                        | ContigError::NoMemory { .. }
                );
                prop_assert!(allowed, "unexpected {:?}", e);
                if moved == 0 {
                    same(&observe(&self.mm), before)?;
                }
            }
        }
        Ok(())
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        let before = observe(&self.mm);
        let mm = &self.mm;
        match *op {
            Op::Alloc { movable, order, comp } => {
                let mut gfp = if movable { Gfp::HIGHUSER_MOVABLE } else { Gfp::KERNEL };
                if comp {
                    gfp |= Gfp::COMP;
                }
                if let Ok(pfn) = mm.alloc_pages(gfp | Gfp::NOWARN, order) {
                    let block = Block { order, compound: comp && order > 0, pinned: false, movable };
                    self.live.insert(pfn.0, Live::Block(block));
                    if movable && CMA.contains(&pfn.0) {
                        // Fine: CMA lends pages to movable allocations.
                    } else {
                        prop_assert!(!CMA.contains(&pfn.0), "unmovable page in CMA");
                    }
                }
            }
            Op::Free { pick } => {
                if let Some((pfn, block)) = self.pick_block(pick, false) {
                    if block.pinned {
                        mm.put_page(Pfn(pfn)).unwrap();
                    }
                    mm.free_pages(Pfn(pfn), block.order).unwrap();
                    self.live.remove(&pfn);
                }
            }
            Op::Pin { pick } => {
                if let Some((pfn, mut block)) = self.pick_block(pick, true) {
                    if !block.pinned {
                        mm.get_page(Pfn(pfn)).unwrap();
                        block.pinned = true;
                        self.live.insert(pfn, Live::Block(block));
                    }
                }
            }
            Op::Around { pick, lead, len } => {
                let Some((pfn, _)) = self.pick_block(pick, true) else {
                    return Ok(());
                };
                let start = pfn.saturating_sub(lead);
                let end = (pfn + len).min(END);
                let mt = if CMA.contains(&start) { MigrateType::Cma } else { MigrateType::Movable };
                let r = Contig::new(mm).alloc_contig_range(Pfn(start), Pfn(end), mt, Gfp::KERNEL);
                let live = Live::Range { nr: end - start, frozen: false };
                self.contig(&before, r, start, live)?;
            }
            Op::Range { start, len, cma, frozen } => {
                let mt = if cma { MigrateType::Cma } else { MigrateType::Movable };
                let (s, e) = (Pfn(start), Pfn((start + len).min(END)));
                let r = if frozen {
                    Contig::new(mm).alloc_contig_frozen_range(s, e, mt, Gfp::KERNEL)
                } else {
                    Contig::new(mm).alloc_contig_range(s, e, mt, Gfp::KERNEL)
                };
                let live = Live::Range { nr: e.0 - s.0, frozen };
                self.contig(&before, r, start, live)?;
            }
            Op::Compound { start, order, frozen } => {
                let start = start & !((1 << order) - 1);
                let (s, e) = (Pfn(start), Pfn(start + (1 << order)));
                let gfp = Gfp::KERNEL | Gfp::COMP;
                let r = if frozen {
                    Contig::new(mm).alloc_contig_frozen_range(s, e, MigrateType::Movable, gfp)
                } else {
                    Contig::new(mm).alloc_contig_range(s, e, MigrateType::Movable, gfp)
                };
                self.contig(&before, r, start, Live::Compound { order, frozen })?;
            }
            Op::Pages { nr, frozen } => {
                let r = if frozen {
                    Contig::new(mm).alloc_contig_frozen_pages(nr, Gfp::KERNEL, 0)
                } else {
                    Contig::new(mm).alloc_contig_pages(nr, Gfp::KERNEL, 0)
                };
                let start = r.map_or(0, |p| p.0);
                self.contig(&before, r.map(|_| ()), start, Live::Range { nr, frozen })?;
            }
            Op::FreeRange { pick, per_page } => {
                let Some((pfn, live)) = self.pick_range(pick) else {
                    return Ok(());
                };
                match live {
                    Live::Range { nr, frozen } if per_page => {
                        for p in pfn..pfn + nr {
                            if frozen {
                                mm.free_frozen_pages(Pfn(p), 0).unwrap();
                            } else {
                                mm.free_pages(Pfn(p), 0).unwrap();
                            }
                        }
                    }
                    Live::Range { nr, frozen } => {
                        let summary = if frozen {
                            Contig::new(mm).free_contig_frozen_range(Pfn(pfn), nr)
                        } else {
                            Contig::new(mm).free_contig_range(Pfn(pfn), nr)
                        }
                        .unwrap();
                        prop_assert_eq!(summary.freed, nr);
                    }
                    Live::Compound { order, frozen } => {
                        if frozen {
                            mm.free_frozen_pages(Pfn(pfn), order).unwrap();
                        } else {
                            mm.free_pages(Pfn(pfn), order).unwrap();
                        }
                    }
                    Live::Cma { count } => Contig::new(mm).cma_release(self.cma, Pfn(pfn), count).unwrap(),
                    Live::Block(_) => unreachable!(),
                }
                self.live.remove(&pfn);
            }
            Op::CmaAlloc { count, align } => {
                let r = Contig::new(mm).cma_alloc(self.cma, count, align);
                let moved = self.apply_moves()?;
                match r {
                    Ok(pfn) => {
                        prop_assert_eq!(pfn.0 % (1 << align), 0);
                        prop_assert!(CMA.contains(&pfn.0) && pfn.0 + count <= CMA.end);
                        self.live.insert(pfn.0, Live::Cma { count });
                    }
                    Err(CmaError::NoMemory { .. }) => {
                        if moved == 0 {
                            same(&observe(&self.mm), &before)?;
                        }
                    }
                    Err(e) => return Err(TestCaseError::fail(format!("cma_alloc: {e:?}"))),
                }
            }
        }
        if let Err(v) = Report::new(&self.mm).check_invariants() {
            return Err(TestCaseError::fail(format!("after {op:?}: {v}")));
        }
        self.check_model()
    }

    /// Every live block is allocated where the model says.
    fn check_model(&self) -> Result<(), TestCaseError> {
        for (&pfn, &live) in &self.live {
            let flags = self.mm.page_flags(Pfn(pfn)).unwrap();
            prop_assert!(flags.contains(PageFlags::ALLOCATED), "{pfn:#x} {live:?} {flags:?}");
            if let Live::Range { nr, .. } | Live::Cma { count: nr } = live {
                let last = self.mm.page_flags(Pfn(pfn + nr - 1)).unwrap();
                prop_assert!(last.contains(PageFlags::ALLOCATED));
            }
            if let Live::Block(block) = live {
                prop_assert_eq!(flags.contains(PageFlags::HEAD), block.compound);
                let refs = self.mm.page_count(Pfn(pfn)).unwrap();
                prop_assert_eq!(refs, 1 + u32::from(block.pinned));
            }
        }
        let stats = Contig::new(&self.mm).cma_stats(self.cma).unwrap();
        let cma_pages: u64 = self.live.values().map(|l| if let Live::Cma { count } = l { *count } else { 0 }).sum();
        prop_assert_eq!(stats.pages_in_use, cma_pages);
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn random_mixes_keep_invariants_and_busy_changes_nothing(
        ops in proptest::collection::vec(op(), 1..60)
    ) {
        let (mm, moves, cma) = build();
        let mut h = Harness { mm, moves, cma, live: BTreeMap::new() };
        for op in &ops {
            h.step(op)?;
        }
        // Everything given back: all managed memory is free again.
        let live: Vec<(u64, Live)> = h.live.iter().map(|(&p, &l)| (p, l)).collect();
        for (pfn, live) in live {
            let mm = &h.mm;
            match live {
                Live::Block(block) => {
                    if block.pinned {
                        mm.put_page(Pfn(pfn)).unwrap();
                    }
                    mm.free_pages(Pfn(pfn), block.order).unwrap()
                }
                Live::Range { nr, frozen: false } => { Contig::new(mm).free_contig_range(Pfn(pfn), nr).unwrap(); }
                Live::Range { nr, frozen: true } => { Contig::new(mm).free_contig_frozen_range(Pfn(pfn), nr).unwrap(); }
                Live::Compound { order, frozen: false } => mm.free_pages(Pfn(pfn), order).unwrap(),
                Live::Compound { order, frozen: true } => mm.free_frozen_pages(Pfn(pfn), order).unwrap(),
                Live::Cma { count } => Contig::new(mm).cma_release(h.cma, Pfn(pfn), count).unwrap(),
            }
        }
        let managed: u64 = h.mm.zones().iter().map(|z| z.managed_pages()).sum();
        Cpus::new(&h.mm).drain_all_pages();
        prop_assert_eq!(Report::new(&h.mm).nr_free_pages(), managed);
        Report::new(&h.mm).check_invariants().map_err(|v| TestCaseError::fail(v.to_string()))?;
    }
}

/// Something to do to a page of the range before it is freed.
#[derive(Clone, Copy, Debug)]
enum Disturb {
    ExtraRef,
    BadFlag,
    Poison,
}

fn disturb() -> impl Strategy<Value = Disturb> {
    prop_oneof![Just(Disturb::ExtraRef), Just(Disturb::BadFlag), Just(Disturb::Poison)]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn batched_free_equals_page_by_page(
        prelude in proptest::collection::vec((any::<bool>(), 0u32..4, any::<bool>()), 0..80),
        start in 2048u64..END,
        len in 1u64..1200,
        frozen in any::<bool>(),
        disturbances in proptest::collection::vec((any::<u64>(), disturb()), 0..8),
    ) {
        let (a, _, _) = build();
        let (b, _, _) = build();
        let end = (start + len).min(END);
        for mm in [&a, &b] {
            // Identical histories: allocations, some freed again.
            let mut blocks = Vec::new();
            for &(movable, order, free_it) in &prelude {
                let gfp = if movable { Gfp::HIGHUSER_MOVABLE } else { Gfp::KERNEL };
                if let Ok(p) = mm.alloc_pages(gfp | Gfp::NOWARN, order) {
                    blocks.push((p, order, free_it));
                }
            }
            for &(p, order, free_it) in &blocks {
                if free_it {
                    mm.free_pages(p, order).unwrap();
                }
            }
        }
        let mt = if CMA.contains(&start) { MigrateType::Cma } else { MigrateType::Movable };
        let alloc = |mm: &PageAllocator| if frozen {
            Contig::new(mm).alloc_contig_frozen_range(Pfn(start), Pfn(end), mt, Gfp::KERNEL)
        } else {
            Contig::new(mm).alloc_contig_range(Pfn(start), Pfn(end), mt, Gfp::KERNEL)
        };
        let ra = alloc(&a);
        let rb = alloc(&b);
        prop_assert_eq!(ra, rb);
        if ra.is_err() {
            return Ok(());
        }
        for mm in [&a, &b] {
            for &(at, what) in &disturbances {
                let pfn = Pfn(start + at % (end - start));
                match what {
                    Disturb::ExtraRef if !frozen => { mm.get_page(pfn).unwrap(); }
                    Disturb::ExtraRef => {}
                    Disturb::BadFlag => mm.set_page_flags(pfn, PageFlags::WRITEBACK).unwrap(),
                    Disturb::Poison => { mm.memory_failure(pfn).unwrap(); }
                }
            }
        }
        same(&observe(&a), &observe(&b))?;
        for p in start..end {
            let r = if frozen { a.free_frozen_pages(Pfn(p), 0) } else { a.free_pages(Pfn(p), 0) };
            prop_assert!(r.is_ok() || matches!(r, Err(mmkit::FreeError::BadPage { .. })), "{:?}", r);
        }
        if frozen {
            Contig::new(&b).free_contig_frozen_range(Pfn(start), end - start).unwrap();
        } else {
            Contig::new(&b).free_contig_range(Pfn(start), end - start).unwrap();
        }
        same(&observe(&a), &observe(&b))?;
        prop_assert_eq!(Report::new(&a).stats(), Report::new(&b).stats());
        Report::new(&a).check_invariants().map_err(|v| TestCaseError::fail(v.to_string()))?;
        Report::new(&b).check_invariants().map_err(|v| TestCaseError::fail(v.to_string()))?;
    }
}
