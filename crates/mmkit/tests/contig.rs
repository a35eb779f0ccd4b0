//! Contiguous allocation, batched freeing and CMA, one scenario per test:
//! - freeing a range with poisoned and bad pages frees everything else in
//!   maximal aligned chunks (observed on a zone where nothing else is free,
//!   so the free blocks after the call are exactly the chunks);
//! - with sections smaller than `MAX_PAGE_ORDER` blocks no chunk crosses a
//!   section;
//! - a busy range leaves the allocator exactly as it was;
//! - the batched free equals freeing page by page;
//! - migration moves in-use movable pages (and their contents) out;
//! - CMA areas lend pages to movable allocations and take them back;
//! - zone boundaries: a batched free never builds a block across zones, and
//!   a range whose pageblocks reach into another zone is refused.

use mmkit::Cpus;
use mmkit::{
    Backing, CmaError, Contig, ContigError, CopyMigrator, FreeError, Geometry, Gfp, MemoryMapBuilder, MigrateType,
    PageAllocator, PageFlags, Pfn, PlacementPolicy, QuietHooks, Report, ZoneType,
};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

mod common;
use common::{first_difference, observe, Observed};

type Moves = Arc<Mutex<Vec<(Pfn, Pfn, u32)>>>;

/// One Normal zone over `pfns`, quiet hooks, a copying migrator that logs.
fn map(geometry: Geometry, pfns: std::ops::Range<u64>) -> (PageAllocator, Moves) {
    let moves: Moves = Arc::default();
    let log = moves.clone();
    let mm = MemoryMapBuilder::new()
        .geometry(geometry)
        .zone(0, ZoneType::Normal, pfns)
        .hooks(QuietHooks)
        // One CPU's lists whatever CPU the test runs on: twins stay twins.
        .cpu_id_fn(|| 0)
        .migrator(CopyMigrator::new(move |old, new, order| log.lock().unwrap().push((old, new, order))))
        .build()
        .unwrap();
    (mm, moves)
}

fn small_geometry() -> Geometry {
    Geometry { page_shift: 12, section_order: 15, pageblock_order: 4, max_page_order: 6 }
}

/// Asserts two observations are equal, naming the first difference.
fn assert_same(a: &Observed, b: &Observed, what: &str) {
    if let Some(difference) = first_difference(a, b) {
        panic!("{what}: {difference}");
    }
}

/// Free blocks per order of zone 0.
fn free_blocks(mm: &PageAllocator) -> Vec<u64> {
    assert_eq!(Cpus::new(mm).drain_all_pages(), 0);
    Report::new(mm).zone_snapshots()[0].free.free_blocks_per_order.clone()
}

/// Reference chunking, written independently of the library: runs split at
/// skipped pages and section boundaries, each run cut greedily into the
/// largest naturally aligned blocks of at most `max_order`.
fn expected_chunks(range: std::ops::Range<u64>, skipped: &[u64], section_order: u32, max_order: u32) -> Vec<u64> {
    let mut per_order = vec![0u64; max_order as usize + 1];
    let mut runs: Vec<(u64, u64)> = Vec::new();
    let mut start = None;
    for pfn in range.clone() {
        let boundary = pfn % (1 << section_order) == 0;
        if let Some(s) = start {
            if skipped.contains(&pfn) || boundary {
                runs.push((s, pfn));
                start = None;
            }
        }
        if !skipped.contains(&pfn) && start.is_none() {
            start = Some(pfn);
        }
    }
    if let Some(s) = start {
        runs.push((s, range.end));
    }
    for (mut s, e) in runs {
        while s < e {
            let mut order = max_order;
            while s % (1 << order) != 0 || s + (1 << order) > e {
                order -= 1;
            }
            per_order[order as usize] += 1;
            s += 1 << order;
        }
    }
    per_order
}

#[test]
fn poisoned_and_bad_pages_end_runs_and_the_rest_is_freed_in_maximal_chunks() {
    let geo = Geometry::default();
    let (mm, _) = map(geo, 0..4096);
    // Take the whole zone, so the only free blocks afterwards are the chunks.
    Contig::new(&mm).alloc_contig_range(Pfn(0), Pfn(4096), MigrateType::Movable, Gfp::KERNEL).unwrap();
    assert_eq!(Report::new(&mm).nr_free_pages(), 0);
    Report::new(&mm).check_invariants().unwrap();
    let poisoned = [100u64, 2049];
    let bad = [1000u64, 1001, 3000];
    for &p in &poisoned {
        mm.memory_failure(Pfn(p)).unwrap();
    }
    for &p in &bad {
        mm.set_page_flags(Pfn(p), PageFlags::LRU).unwrap();
    }
    let before = Report::new(&mm).stats();
    let summary = Contig::new(&mm).free_contig_range(Pfn(0), 4096).unwrap();
    assert_eq!(summary.freed, 4096 - 5);
    assert_eq!(summary.bad, 3);
    assert_eq!(summary.hwpoisoned, 2);
    assert_eq!(summary.still_in_use, 0);
    let after = Report::new(&mm).stats();
    assert_eq!(after.hwpoison_offlined - before.hwpoison_offlined, 2);
    assert_eq!(after.bad_pages - before.bad_pages, 3);
    let skipped: Vec<u64> = poisoned.iter().chain(&bad).copied().collect();
    assert_eq!(free_blocks(&mm), expected_chunks(0..4096, &skipped, geo.section_order, geo.max_page_order));
    // The skipped pages are not free and not handed out.
    for &p in &skipped {
        let flags = mm.page_flags(Pfn(p)).unwrap();
        assert!(!flags.contains(PageFlags::ALLOCATED) && !flags.contains(PageFlags::BUDDY));
    }
    assert!(mm.page_flags(Pfn(100)).unwrap().contains(PageFlags::HWPOISON));
    assert!(mm.page_flags(Pfn(1000)).unwrap().contains(PageFlags::LRU));
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn chunks_never_cross_a_small_section() {
    let geo = Geometry { page_shift: 12, section_order: 8, pageblock_order: 4, max_page_order: 10 };
    let (mm, _) = map(geo, 0..4096);
    let contig = Contig::new(&mm);
    contig.alloc_contig_range(Pfn(0), Pfn(4096), MigrateType::Movable, Gfp::KERNEL).unwrap();
    let report = Report::new(&mm);
    report.check_invariants().unwrap();
    // A run that starts and ends mid-section and spans three boundaries.
    let summary = contig.free_contig_range(Pfn(200), 700).unwrap();
    assert_eq!(summary.freed, 700);
    assert_eq!(free_blocks(&mm), expected_chunks(200..900, &[], geo.section_order, geo.max_page_order));
    // check_invariants rejects any free block that crosses a section.
    report.check_invariants().unwrap();
    contig.free_contig_range(Pfn(0), 200).unwrap();
    contig.free_contig_range(Pfn(900), 4096 - 900).unwrap();
    // Whole sections merge up to the section size and no further.
    let mut whole = vec![0u64; 11];
    whole[8] = 16;
    assert_eq!(free_blocks(&mm), whole);
    report.check_invariants().unwrap();
}

#[test]
fn busy_range_leaves_the_allocator_exactly_as_it_was() {
    let (mm, moves) = map(small_geometry(), 0..8192);
    let mut live = Vec::new();
    for i in 0..200u32 {
        let gfp = if i % 3 == 0 { Gfp::KERNEL } else { Gfp::HIGHUSER_MOVABLE };
        live.push(mm.alloc_pages(gfp, i % 3).unwrap());
    }
    let unmovable = live[150];
    assert_eq!(mm.page_flags(unmovable).unwrap(), PageFlags::ALLOCATED);
    let before = observe(&mm);
    eprintln!("unmovable at {unmovable}");
    let start = Pfn(unmovable.0 & !1023);
    let err =
        Contig::new(&mm).alloc_contig_range(start, Pfn(start.0 + 1024), MigrateType::Movable, Gfp::KERNEL).unwrap_err();
    assert!(matches!(err, ContigError::Busy { .. }), "{err:?}");
    assert!(moves.lock().unwrap().is_empty(), "nothing moved");
    assert_same(&observe(&mm), &before, "after");
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn reserved_pages_and_foreign_cma_blocks_are_busy() {
    let mm = MemoryMapBuilder::new()
        .geometry(small_geometry())
        .zone(0, ZoneType::Normal, 0..4096)
        .reserved(100..101)
        .cma("cma", 1024..2048)
        .build()
        .unwrap();
    let before = observe(&mm);
    let contig = Contig::new(&mm);
    let busy = contig.alloc_contig_range(Pfn(64), Pfn(128), MigrateType::Movable, Gfp::KERNEL);
    assert_eq!(busy, Err(ContigError::Busy { pfn: Pfn(100) }));
    let busy = contig.alloc_contig_range(Pfn(1024), Pfn(1040), MigrateType::Movable, Gfp::KERNEL);
    assert_eq!(busy, Err(ContigError::Busy { pfn: Pfn(1024) }));
    assert_same(&observe(&mm), &before, "after");
    // The same CMA pages are fine as CMA.
    contig.alloc_contig_range(Pfn(1024), Pfn(1040), MigrateType::Cma, Gfp::KERNEL).unwrap();
    contig.free_contig_range(Pfn(1024), 16).unwrap();
    assert_eq!(observe(&mm).buddyinfo, before.buddyinfo);
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn input_errors_change_nothing() {
    let (mm, _) = map(small_geometry(), 0..4096);
    let before = observe(&mm);
    let k = Gfp::KERNEL;
    let contig = Contig::new(&mm);
    let r = |s: u64, e: u64, mt, gfp| contig.alloc_contig_range(Pfn(s), Pfn(e), mt, gfp);
    assert!(matches!(r(5, 5, MigrateType::Movable, k), Err(ContigError::InvalidRange { .. })));
    assert!(matches!(r(0, 9999, MigrateType::Movable, k), Err(ContigError::OutOfRange(_))));
    assert!(matches!(
        r(0, 16, MigrateType::Unmovable, k),
        Err(ContigError::InvalidMigrateType(MigrateType::Unmovable))
    ));
    assert!(matches!(r(0, 16, MigrateType::Movable, k | Gfp::NOFAIL), Err(ContigError::InvalidGfp(_))));
    assert!(matches!(r(8, 24, MigrateType::Movable, k | Gfp::COMP), Err(ContigError::BadCompoundRange { .. })));
    assert_same(&observe(&mm), &before, "after");

    // Freeing: a free page inside the range fails the call before any page
    // is touched.
    contig.alloc_contig_range(Pfn(64), Pfn(96), MigrateType::Movable, k).unwrap();
    let mid = observe(&mm);
    assert_eq!(contig.free_contig_range(Pfn(64), 40), Err(FreeError::DoubleFree(Pfn(96))));
    assert!(matches!(
        contig.free_contig_frozen_range(Pfn(64), 32),
        Err(FreeError::RefcountMismatch { pfn: Pfn(64), refcount: 1 })
    ));
    assert!(matches!(contig.free_contig_range(Pfn(4090), 10), Err(FreeError::OutOfRange(_))));
    assert_same(&observe(&mm), &mid, "after");
    contig.free_contig_range(Pfn(64), 32).unwrap();
    assert_eq!(observe(&mm).buddyinfo, before.buddyinfo);
}

/// Prelude shared by two allocators that must end up identical.
fn twin(geometry: Geometry) -> PageAllocator {
    let (mm, _) = map(geometry, 0..8192);
    for i in 0..64u32 {
        mm.alloc_pages(Gfp::HIGHUSER_MOVABLE, i % 4).unwrap();
    }
    mm
}

#[test]
fn batched_free_equals_freeing_page_by_page() {
    for frozen in [false, true] {
        let a = twin(small_geometry());
        let b = twin(small_geometry());
        let (start, n) = (Pfn(1000), 3000u64);
        for mm in [&a, &b] {
            if frozen {
                Contig::new(mm)
                    .alloc_contig_frozen_range(start, Pfn(start.0 + n), MigrateType::Movable, Gfp::KERNEL)
                    .unwrap();
            } else {
                Contig::new(mm).alloc_contig_range(start, Pfn(start.0 + n), MigrateType::Movable, Gfp::KERNEL).unwrap();
                mm.get_page(Pfn(1500)).unwrap(); // still referenced afterwards
            }
            mm.memory_failure(Pfn(1234)).unwrap();
            mm.set_page_flags(Pfn(2047), PageFlags::MLOCKED).unwrap();
        }
        assert_same(&observe(&a), &observe(&b), "prelude");
        for p in start.0..start.0 + n {
            let r = if frozen { a.free_frozen_pages(Pfn(p), 0) } else { a.free_pages(Pfn(p), 0) };
            assert!(r.is_ok() || matches!(r, Err(FreeError::BadPage { .. })), "{r:?}");
        }
        let summary = if frozen {
            Contig::new(&b).free_contig_frozen_range(start, n)
        } else {
            Contig::new(&b).free_contig_range(start, n)
        }
        .unwrap();
        assert_eq!(summary.bad, 1);
        assert_eq!(summary.hwpoisoned, 1);
        assert_eq!(summary.still_in_use, u64::from(!frozen));
        assert_same(&observe(&a), &observe(&b), &format!("frozen={frozen}"));
        assert_eq!(Report::new(&a).stats(), Report::new(&b).stats());
        Report::new(&a).check_invariants().unwrap();
        Report::new(&b).check_invariants().unwrap();
    }
}

#[test]
fn movable_pages_are_migrated_out_of_the_range() {
    let (mm, moves) = map(small_geometry(), 0..8192);
    let mut owned = BTreeMap::new();
    for i in 0..300u32 {
        let order = i % 3;
        let pfn = mm.alloc_pages(Gfp::HIGHUSER_MOVABLE | Gfp::COMP, order).unwrap();
        mm.set_page_flags(pfn, PageFlags::LRU).unwrap();
        mm.set_page_private(pfn, 7000 + u64::from(i)).unwrap();
        owned.insert(pfn, order);
    }
    let in_range = owned.keys().filter(|p| p.0 < 512).count();
    assert!(in_range > 10);
    Contig::new(&mm).alloc_contig_range(Pfn(0), Pfn(512), MigrateType::Movable, Gfp::KERNEL).unwrap();
    let moves = moves.lock().unwrap().clone();
    assert_eq!(moves.len(), in_range);
    for (old, new, order) in moves {
        assert!(old.0 < 512 && new.0 >= 512);
        assert_eq!(owned.remove(&old), Some(order));
        owned.insert(new, order);
        let flags = mm.page_flags(new).unwrap();
        assert!(flags.contains(PageFlags::ALLOCATED | PageFlags::LRU));
        assert_eq!(flags.contains(PageFlags::HEAD), order > 0);
        assert!(mm.page_private(new).unwrap() >= 7000);
    }
    for p in 0..512 {
        let flags = mm.page_flags(Pfn(p)).unwrap();
        assert_eq!(flags, PageFlags::ALLOCATED, "pfn {p}");
    }
    Report::new(&mm).check_invariants().unwrap();
    Contig::new(&mm).free_contig_range(Pfn(0), 512).unwrap();
    for (pfn, order) in owned {
        mm.clear_page_flags(pfn, PageFlags::LRU).unwrap();
        mm.free_pages(pfn, order).unwrap();
    }
    Cpus::new(&mm).drain_all_pages();
    assert_eq!(Report::new(&mm).nr_free_pages(), 8192);
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn pinned_pages_make_the_range_busy_and_moved_pages_stay_valid() {
    let (mm, moves) = map(small_geometry(), 0..4096);
    let a = mm.alloc_pages(Gfp::HIGHUSER_MOVABLE, 0).unwrap();
    let b = mm.alloc_pages(Gfp::HIGHUSER_MOVABLE, 0).unwrap();
    mm.get_page(b).unwrap(); // pinned: refcount 2
    let (lo, hi) = (a.min(b), a.max(b));
    let err =
        Contig::new(&mm).alloc_contig_range(Pfn(0), Pfn(hi.0 + 1), MigrateType::Movable, Gfp::KERNEL).unwrap_err();
    assert_eq!(err, ContigError::Busy { pfn: b });
    let moved = moves.lock().unwrap().clone();
    if lo == a {
        assert_eq!(moved.len(), 1, "the page before the pinned one moved");
        let new = moved[0].1;
        assert_eq!(mm.page_count(new).unwrap(), 1);
    }
    assert_eq!(mm.page_count(b).unwrap(), 2);
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn migration_copies_contents_with_real_memory() {
    let moves: Moves = Arc::default();
    let log = moves.clone();
    let mm = MemoryMapBuilder::new()
        .geometry(small_geometry())
        .zone(0, ZoneType::Normal, 0..2048)
        .backing(Backing::RealMemory(Default::default()))
        .migrator(CopyMigrator::new(move |o, n, k| log.lock().unwrap().push((o, n, k))))
        .build()
        .unwrap();
    let pfn = mm.alloc_pages(Gfp::HIGHUSER_MOVABLE, 1).unwrap();
    assert!(pfn.0 < 64);
    for (i, page) in [pfn, Pfn(pfn.0 + 1)].into_iter().enumerate() {
        let ptr = mm.page_address(page).unwrap().as_ptr();
        // SAFETY: the two pages are ours and the pointer covers one page.
        unsafe { ptr.write_bytes(0x5a + i as u8, 4096) };
    }
    Contig::new(&mm).alloc_contig_range(Pfn(0), Pfn(64), MigrateType::Movable, Gfp::KERNEL | Gfp::ZERO).unwrap();
    let (_, new, order) = moves.lock().unwrap()[0];
    assert_eq!(order, 1);
    for i in 0..2u64 {
        let ptr = mm.page_address(Pfn(new.0 + i)).unwrap().as_ptr();
        // SAFETY: the migrated block is allocated to us now.
        let last = unsafe { ptr.add(4095).read() };
        assert_eq!(last, 0x5a + i as u8);
    }
    let old = mm.page_address(pfn).unwrap().as_ptr();
    // SAFETY: the old page is part of our contiguous range now.
    assert_eq!(unsafe { old.read() }, 0, "__GFP_ZERO zeroed the range");
}

#[test]
fn compound_and_frozen_ranges() {
    let (mm, _) = map(small_geometry(), 0..8192);
    let before = observe(&mm);
    let contig = Contig::new(&mm);
    contig.alloc_contig_range(Pfn(4096), Pfn(8192), MigrateType::Movable, Gfp::KERNEL | Gfp::COMP).unwrap();
    let head = mm.page_flags(Pfn(4096)).unwrap();
    assert!(head.contains(PageFlags::HEAD | PageFlags::ALLOCATED));
    assert_eq!(mm.compound_head(Pfn(8000)), Ok(Pfn(4096)));
    Report::new(&mm).check_invariants().unwrap();
    assert!(matches!(contig.free_contig_range(Pfn(4096), 4096), Err(FreeError::WrongOrder { .. })));
    mm.free_pages(Pfn(4096), 12).unwrap();
    assert_eq!(observe(&mm).buddyinfo, before.buddyinfo);

    contig.alloc_contig_frozen_range(Pfn(100), Pfn(300), MigrateType::Movable, Gfp::KERNEL).unwrap();
    assert_eq!(mm.page_count(Pfn(200)), Ok(0));
    contig.free_contig_frozen_range(Pfn(100), 200).unwrap();
    assert_eq!(observe(&mm).buddyinfo, before.buddyinfo);
    assert_eq!(observe(&mm).pagetypeinfo, before.pagetypeinfo);
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn alloc_contig_pages_skips_unmovable_ranges() {
    let (mm, _) = map(small_geometry(), 0..8192);
    // An unmovable page in the first 1024-aligned range.
    let u = mm.alloc_pages_at(Pfn(300), 0, Gfp::KERNEL).unwrap();
    assert!(u.0 < 1024);
    let contig = Contig::new(&mm);
    let pfn = contig.alloc_contig_pages(1000, Gfp::KERNEL, 0).unwrap();
    assert_eq!(pfn.0 % 1024, 0);
    assert!(pfn.0 >= 1024);
    Report::new(&mm).check_invariants().unwrap();
    contig.free_contig_range(pfn, 1000).unwrap();
    assert_eq!(contig.alloc_contig_pages(9000, Gfp::KERNEL, 0), Err(ContigError::NoMemory { nr_pages: 9000 }));
    assert_eq!(contig.alloc_contig_pages(8, Gfp::KERNEL, 3), Err(ContigError::NoSuchNode(3)));
    let frozen = contig.alloc_contig_frozen_pages(64, Gfp::KERNEL, 0).unwrap();
    contig.free_contig_frozen_range(frozen, 64).unwrap();
    Report::new(&mm).check_invariants().unwrap();
}

/// Without per-CPU lists every request reaches the buddy through the
/// preferred-zone fast path, which must leave CMA balancing to `rmqueue`:
/// while CMA holds most free memory, movable blocks of every order come
/// from it, and unmovable ones never do.
#[test]
fn cma_balancing_holds_on_the_buddy_fast_path() {
    let mm = MemoryMapBuilder::new()
        .geometry(small_geometry())
        .zone(0, ZoneType::Normal, 0..4096)
        .cma("most-of-memory", 1024..3584)
        .per_cpu_lists(false)
        .build()
        .unwrap();
    let cma = 1024..3584;
    for order in [0, 2, 4] {
        let movable = mm.alloc_pages(Gfp::HIGHUSER_MOVABLE, order).unwrap();
        assert!(cma.contains(&movable.0), "order {order}: {movable:?}");
        let unmovable = mm.alloc_pages(Gfp::KERNEL, order).unwrap();
        assert!(!cma.contains(&unmovable.0), "order {order}: {unmovable:?}");
        mm.free_pages(movable, order).unwrap();
        mm.free_pages(unmovable, order).unwrap();
    }
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn cma_lends_pages_to_movable_allocations_and_takes_them_back() {
    let moves: Moves = Arc::default();
    let log = moves.clone();
    let mm = MemoryMapBuilder::new()
        .geometry(small_geometry())
        .zone(0, ZoneType::Normal, 0..4096)
        .cma("reserved-for-camera", 1024..3584)
        .migrator(CopyMigrator::new(move |o, n, k| log.lock().unwrap().push((o, n, k))))
        // Linux's placement scatters the borrowed pages where the CMA
        // allocation will look, which is what this test needs to exercise.
        .placement(PlacementPolicy::Linux)
        .build()
        .unwrap();
    let contig = Contig::new(&mm);
    let id = contig.cma_area("reserved-for-camera").unwrap();
    assert_eq!(contig.cma_areas()[0].pfns, 1024..3584);
    let report = Report::new(&mm);
    report.check_invariants().unwrap();
    // More than half of the free memory is CMA: movable requests take it.
    let movable: Vec<Pfn> = (0..64).map(|_| mm.alloc_pages(Gfp::HIGHUSER_MOVABLE, 0).unwrap()).collect();
    assert!(movable.iter().all(|p| (1024..3584).contains(&p.0)));
    // Unmovable requests never do.
    let unmovable = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
    assert!(!(1024..3584).contains(&unmovable.0), "{unmovable:?}");

    let got = contig.cma_alloc(id, 256, 4).unwrap();
    assert_eq!(got.0 % 16, 0);
    assert!(!moves.lock().unwrap().is_empty(), "borrowed pages were migrated");
    let stats = contig.cma_stats(id).unwrap();
    assert_eq!((stats.allocations, stats.pages_in_use), (1, 256));
    report.check_invariants().unwrap();

    // A pinned borrowed page makes its candidate busy; the next one is used.
    let pinned = loop {
        let p = mm.alloc_pages(Gfp::HIGHUSER_MOVABLE, 0).unwrap();
        if (1536..2048).contains(&p.0) {
            break p;
        }
    };
    mm.get_page(pinned).unwrap();
    let second = contig.cma_alloc(id, 512, 9).unwrap();
    assert_eq!(second, Pfn(2048), "1024 is partly in use, 1536 is busy");
    assert_eq!(contig.cma_stats(id).unwrap().busy_retries, 1);
    assert_eq!(mm.page_count(pinned), Ok(2), "the pinned page did not move");

    assert_eq!(contig.cma_release(id, Pfn(got.0 + 1), 255), Err(CmaError::NotAllocated(Pfn(got.0 + 1))));
    assert!(matches!(contig.cma_release(id, got, 255), Err(CmaError::CountMismatch { .. })));
    assert!(matches!(contig.cma_release(id, Pfn(10), 1), Err(CmaError::NotInArea { .. })));
    assert!(matches!(contig.cma_alloc(id, 0, 0), Err(CmaError::InvalidCount { .. })));
    contig.cma_release(id, got, 256).unwrap();
    contig.cma_release(id, second, 512).unwrap();
    let stats = contig.cma_stats(id).unwrap();
    assert_eq!((stats.releases, stats.pages_in_use), (2, 0));
    assert!(matches!(contig.cma_alloc(id, 4096, 0), Err(CmaError::InvalidCount { .. })));
    report.check_invariants().unwrap();
}

#[test]
fn cma_areas_are_checked_at_build() {
    let base = || {
        MemoryMapBuilder::new()
            .geometry(small_geometry())
            .zone(0, ZoneType::Dma32, 0..4096)
            .zone(0, ZoneType::Normal, 4096..8192)
            .reserved(5000..5001)
    };
    let reason = |b: MemoryMapBuilder| match b.build() {
        Err(mmkit::BuildError::BadCmaArea { reason, .. }) => Some(reason),
        _ => None,
    };
    use mmkit::BadCmaReason::*;
    assert_eq!(reason(base().cma("a", 8..64)), Some(Unaligned));
    assert_eq!(reason(base().cma("a", 64..64)), Some(Empty));
    assert_eq!(reason(base().cma("a", 4000..4112)), Some(NotInOneZone));
    assert_eq!(reason(base().cma("a", 4992..5008)), Some(Unavailable));
    assert_eq!(reason(base().cma("a", 0..64).cma("b", 32..96)), Some(Overlaps));
    assert_eq!(reason(base().cma("a", 0..64).cma("b", 64..96)), None);
}

#[test]
fn a_batched_free_never_builds_a_block_across_zones() {
    let mm = MemoryMapBuilder::new()
        .geometry(small_geometry())
        .zone(0, ZoneType::Dma32, 0..2048)
        .zone(0, ZoneType::Normal, 2048..4096)
        .build()
        .unwrap();
    let before = observe(&mm);
    let contig = Contig::new(&mm);
    contig.alloc_contig_range(Pfn(1024), Pfn(2048), MigrateType::Movable, Gfp::KERNEL).unwrap();
    contig.alloc_contig_range(Pfn(2048), Pfn(3072), MigrateType::Movable, Gfp::KERNEL).unwrap();
    // One call over pages of both zones: runs end at the zone boundary.
    let summary = contig.free_contig_range(Pfn(1024), 2048).unwrap();
    assert_eq!(summary.freed, 2048);
    Report::new(&mm).check_invariants().unwrap();
    assert_eq!(observe(&mm).buddyinfo, before.buddyinfo);
}

#[test]
fn pageblocks_shared_with_another_zone_are_refused() {
    // The zone boundary at 2056 is inside a 16-page pageblock.
    let mm = MemoryMapBuilder::new()
        .geometry(small_geometry())
        .zone(0, ZoneType::Dma32, 0..2056)
        .zone(0, ZoneType::Normal, 2056..4096)
        .build()
        .unwrap();
    let before = observe(&mm);
    let contig = Contig::new(&mm);
    let r = contig.alloc_contig_range(Pfn(2060), Pfn(2070), MigrateType::Movable, Gfp::KERNEL);
    assert!(matches!(r, Err(ContigError::NotInOneZone { .. })), "{r:?}");
    let r = contig.alloc_contig_range(Pfn(2000), Pfn(2100), MigrateType::Movable, Gfp::KERNEL);
    assert!(matches!(r, Err(ContigError::NotInOneZone { .. })), "{r:?}");
    assert_same(&observe(&mm), &before, "refused");
    // Wholly inside one zone's own pageblocks is fine.
    contig.alloc_contig_range(Pfn(2080), Pfn(2100), MigrateType::Movable, Gfp::KERNEL).unwrap();
    Report::new(&mm).check_invariants().unwrap();
}
