//! Compaction: the migrate and free scanners, direct compaction for a
//! pageblock-sized request, and the vmstat counters.

use mmkit::Tuning;
use mmkit::{CopyMigrator, Gfp, MemoryMapBuilder, PageAllocator, Pfn, PlacementPolicy, Report, ZoneType};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

type Moves = Arc<Mutex<Vec<(Pfn, Pfn, u32)>>>;

/// A map of `pages` pages: pageblocks of 16 pages, blocks up to
/// `max_order`, per-CPU lists off.
fn small_map(pages: u64, max_order: u32) -> MemoryMapBuilder {
    MemoryMapBuilder::new()
        .max_page_order(max_order)
        .pageblock_order(4)
        .section_order(12)
        .zone(0, ZoneType::Normal, 0..pages)
        .per_cpu_lists(false)
}

/// A migrator that logs every move into the returned log.
fn logging_migrator() -> (CopyMigrator<impl Fn(Pfn, Pfn, u32) + Send + Sync>, Moves) {
    let moves: Moves = Arc::default();
    let log = moves.clone();
    (CopyMigrator::new(move |o, n, k| log.lock().unwrap().push((o, n, k))), moves)
}

/// [`small_map`] under `policy` with a logging migrator.
fn map_with_migrator(
    policy: PlacementPolicy,
    pages: u64,
    max_order: u32,
    min_free_kbytes: u64,
) -> (PageAllocator, Moves) {
    let (migrator, moves) = logging_migrator();
    let mm = small_map(pages, max_order)
        .min_free_kbytes(min_free_kbytes)
        .placement(policy)
        .migrator(migrator)
        .build()
        .unwrap();
    (mm, moves)
}

/// 4096 pages, pageblocks of 16 pages, blocks up to order 6; every
/// aligned group of four pages keeps one live movable page, so no free
/// block is larger than order 1. Returns the map, the live pages and the
/// move log.
fn fragmented(policy: PlacementPolicy) -> (PageAllocator, BTreeSet<Pfn>, Moves) {
    let (mm, moves) = map_with_migrator(policy, 4096, 6, 64);
    // Every page, watermarks or not (a block at a PFN ignores them).
    let mut live = BTreeSet::new();
    for pfn in 0..4096 {
        if let Ok(p) = mm.alloc_pages_at(Pfn(pfn), 0, Gfp::HIGHUSER_MOVABLE) {
            live.insert(p);
        }
    }
    let all: Vec<Pfn> = live.iter().copied().collect();
    for p in all {
        if p.0 % 4 != 0 {
            mm.free_pages(p, 0).unwrap();
            live.remove(&p);
        }
    }
    assert_eq!(Report::new(&mm).zone_snapshots()[0].unusable_index(4), 1000, "no free block of a pageblock");
    (mm, live, moves)
}

/// Applies the move log to the set of live pages.
fn follow(live: &mut BTreeSet<Pfn>, moves: &Moves) {
    for (old, new, order) in moves.lock().unwrap().drain(..) {
        assert_eq!(order, 0);
        assert!(live.remove(&old), "moved a page that was not live: {old:?}");
        assert!(live.insert(new), "moved onto a live page: {new:?}");
    }
}

#[test]
fn compact_zone_makes_a_pageblock_free_and_keeps_every_page() {
    for policy in PlacementPolicy::ALL {
        let (mm, mut live, moves) = fragmented(policy);
        let before = live.len();
        let result = Tuning::new(&mm).compact_zone(0, Some(4)).unwrap();
        assert!(result.success, "{policy:?}: {result:?}");
        assert!(result.migrated > 0 && result.migrate_scanned > 0 && result.free_scanned > 0, "{result:?}");
        follow(&mut live, &moves);
        assert_eq!(live.len(), before);
        for p in &live {
            assert_eq!(mm.page_count(*p), Ok(1), "{p:?} still allocated once");
        }
        Report::new(&mm).check_invariants().unwrap();
        assert!(mm.alloc_pages(Gfp::HIGHUSER_MOVABLE, 4).is_ok(), "{policy:?}: a pageblock-sized block now");
        let vmstat = Report::new(&mm).vmstat();
        assert!(vmstat.contains(&format!("compact_migrate_scanned {}", result.migrate_scanned)), "{vmstat}");
        assert!(vmstat.contains(&format!("pgmigrate_success {}", result.migrated)), "{vmstat}");
    }
}

#[test]
fn linux_scanners_move_pages_up_until_they_meet() {
    let (mm, mut live, moves) = fragmented(PlacementPolicy::Linux);
    let result = Tuning::new(&mm).compact_zone(0, None).unwrap();
    assert!(!result.success, "no order asked");
    follow(&mut live, &moves);
    Report::new(&mm).check_invariants().unwrap();
    // The low half of the zone is free now: the pages went up.
    let low = live.iter().filter(|p| p.0 < 1024).count();
    assert!(low < live.len() / 8, "{low} of {} pages still low", live.len());
    assert!(Report::new(&mm).zone_snapshots()[0].unusable_index(4) < 500);
}

#[test]
fn sparsest_first_empties_equally_used_pageblocks_from_the_top() {
    for policy in [PlacementPolicy::Lean, PlacementPolicy::TwoEnds, PlacementPolicy::Addr] {
        let (mm, mut live, moves) = fragmented(policy);
        let result = Tuning::new(&mm).compact_zone(0, None).unwrap();
        follow(&mut live, &moves);
        Report::new(&mm).check_invariants().unwrap();
        // Every pageblock had 4 of 16 pages in use: three of every four
        // emptied into the lowest ones, which are full now.
        assert_eq!(result.migrated, 768, "{policy:?}");
        let high = live.iter().filter(|p| p.0 >= 1024).count();
        assert_eq!(high, 0, "{policy:?}: {high} pages left above the first quarter");
        assert_eq!(Report::new(&mm).zone_snapshots()[0].unusable_index(4), 0, "{policy:?}");
    }
}

/// 64 pageblocks of 16 pages (blocks up to order 4), per-CPU lists off,
/// with `used[i]` order-0 movable pages in use at the start of pageblock i.
fn with_occupancy(policy: PlacementPolicy, used: &[u32]) -> (PageAllocator, BTreeSet<Pfn>, Moves) {
    let (mm, moves) = map_with_migrator(policy, 1024, 4, 16);
    let mut live = BTreeSet::new();
    for (pb, &n) in used.iter().enumerate() {
        for i in 0..u64::from(n) {
            live.insert(mm.alloc_pages_at(Pfn(pb as u64 * 16 + i), 0, Gfp::HIGHUSER_MOVABLE).unwrap());
        }
    }
    (mm, live, moves)
}

#[test]
fn sparsest_first_moves_only_what_frees_a_pageblock() {
    // Pageblocks 0..4 hold 14, 14, 3 and 2 pages; the rest is free. The
    // two dense ones have 4 holes: the 2-page pageblock fits and is
    // emptied; the 3-page one then does not fit the 2 holes left, and a
    // pageblock is only started when all of it fits.
    let (mm, mut live, moves) = with_occupancy(PlacementPolicy::Lean, &[14, 14, 3, 2]);
    let result = Tuning::new(&mm).compact_zone(0, None).unwrap();
    follow(&mut live, &moves);
    Report::new(&mm).check_invariants().unwrap();
    assert_eq!(result.migrated, 2, "{result:?}");
    assert!(live.iter().all(|p| p.0 < 48), "pageblock 3 is empty");
    assert_eq!(live.iter().filter(|p| p.0 >= 32).count(), 3, "pageblock 2 untouched");
    assert_eq!(live.iter().filter(|p| p.0 < 32).count(), 30, "the dense ones took them");
}

#[test]
fn proactive_compaction_starts_above_its_mark_and_stops_at_the_low_one() {
    assert_eq!((mmkit::fragmentation_score_wmark(20, false), mmkit::fragmentation_score_wmark(20, true)), (90, 80));
    assert_eq!((mmkit::fragmentation_score_wmark(100, false), mmkit::fragmentation_score_wmark(100, true)), (15, 5));
    assert_eq!(mmkit::fragmentation_score_wmark(0, false), 100);
    let (mm, mut live, moves) = fragmented(PlacementPolicy::Lean);
    assert_eq!(
        Tuning::new(&mm).fragmentation_score(0).unwrap(),
        1000,
        "every free page is in a block below a pageblock"
    );
    assert!(Tuning::new(&mm).proactive_compact(0, 0).unwrap().is_none(), "proactiveness 0: off");
    assert!(Tuning::new(&mm).proactive_compact_marks(0, 1000, 0).unwrap().is_none(), "the score is not above 1000");
    let before = Report::new(&mm).stats().compact_daemon_wake;
    let r = Tuning::new(&mm).proactive_compact_marks(0, 500, 400).unwrap().expect("above the start mark");
    assert!(r.success, "{r:?}");
    assert_eq!(Report::new(&mm).stats().compact_daemon_wake, before + 1);
    let score = Tuning::new(&mm).fragmentation_score(0).unwrap();
    assert!(score <= 400, "stopped at the low mark: {score}");
    assert!(score > 0, "and not much further: one move at a time");
    follow(&mut live, &moves);
    Report::new(&mm).check_invariants().unwrap();
    // The policy's own marks (15 and 5 thousandths) go on from there.
    assert!(Tuning::new(&mm).kcompactd_check(0).unwrap().is_some());
    assert!(Tuning::new(&mm).fragmentation_score(0).unwrap() <= 5);
    assert!(Tuning::new(&mm).kcompactd_check(0).unwrap().is_none(), "below the start mark now");
    let vmstat = Report::new(&mm).vmstat();
    assert!(vmstat.lines().any(|l| l == "compact_daemon_wake 2"), "Linux's name: {vmstat}");
}

#[test]
fn direct_compaction_serves_a_failing_pageblock_request() {
    let (mm, mut live, moves) = fragmented(PlacementPolicy::Linux);
    let got = mm.alloc_pages(Gfp::HIGHUSER_MOVABLE | Gfp::COMP, 4).unwrap();
    follow(&mut live, &moves);
    assert!(live.iter().all(|p| p.0 < got.0 || p.0 >= got.0 + 16), "the block is free of live pages");
    let stats = Report::new(&mm).stats();
    assert!(stats.compact_stall >= 1);
    assert_eq!(stats.compact_success, 1);
    assert!(stats.compact_migrate_scanned > 0);
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn without_migrate_page_to_nothing_moves() {
    struct OnlyRangeMigrator;
    impl mmkit::Migrator for OnlyRangeMigrator {
        fn migrate_page(
            &self,
            _: &PageAllocator,
            r: &mmkit::MigrateRequest,
        ) -> Result<Pfn, mmkit::error::MigrateError> {
            Err(mmkit::error::MigrateError::Refused(r.pfn))
        }
    }
    let mm = small_map(1024, 6).migrator(OnlyRangeMigrator).build().unwrap();
    let pages: Vec<Pfn> = (0..64).map(|_| mm.alloc_pages(Gfp::HIGHUSER_MOVABLE, 0).unwrap()).collect();
    for p in pages.iter().filter(|p| p.0 % 2 == 1) {
        mm.free_pages(*p, 0).unwrap();
    }
    let free = Report::new(&mm).nr_free_pages();
    let result = Tuning::new(&mm).compact_zone(0, None).unwrap();
    assert_eq!(result.migrated, 0);
    assert!(result.failed > 0);
    assert_eq!(Report::new(&mm).nr_free_pages(), free, "every target was given back");
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn sparsest_first_moves_contents_with_real_memory() {
    let (migrator, moves) = logging_migrator();
    let mm = small_map(1024, 6)
        .min_free_kbytes(16)
        .backing(mmkit::Backing::RealMemory(Default::default()))
        .migrator(migrator)
        .build()
        .unwrap();
    assert_eq!(Report::new(&mm).placement_policy(), PlacementPolicy::Lean);
    // Order-0 and order-1 blocks; every block's bytes say which it is.
    let mut live: Vec<(Pfn, u32, u8)> = Vec::new();
    for i in 0..600u32 {
        let order = u32::from(i % 5 == 0);
        let Ok(pfn) = mm.alloc_pages(Gfp::HIGHUSER_MOVABLE, order) else { break };
        let tag = (i % 251) as u8;
        for p in 0..1u64 << order {
            let ptr = mm.page_address(Pfn(pfn.0 + p)).unwrap().as_ptr();
            // SAFETY: the block is ours and each pointer covers one page.
            unsafe { ptr.write_bytes(tag, 4096) };
        }
        live.push((pfn, order, tag));
    }
    // Free two of every three blocks: every pageblock keeps a few.
    let mut kept = Vec::new();
    for (i, b) in live.into_iter().enumerate() {
        if i % 3 == 0 {
            kept.push(b);
        } else {
            mm.free_pages(b.0, b.1).unwrap();
        }
    }
    let result = Tuning::new(&mm).compact_zone(0, None).unwrap();
    assert!(result.migrated > 0, "{result:?}");
    let mut moved: std::collections::BTreeMap<Pfn, Pfn> = std::collections::BTreeMap::new();
    for (old, new, _) in moves.lock().unwrap().drain(..) {
        // A block moves at most once per pass: a pageblock that received
        // pages is not emptied in the same pass.
        assert!(moved.insert(old, new).is_none(), "{old:?} moved twice");
    }
    for (pfn, order, tag) in kept {
        let now = moved.get(&pfn).copied().unwrap_or(pfn);
        assert_eq!(mm.page_count(now), Ok(1), "{now:?} still allocated");
        for p in 0..1u64 << order {
            let ptr = mm.page_address(Pfn(now.0 + p)).unwrap().as_ptr();
            // SAFETY: the (moved) block is allocated to us; reading one page.
            let bytes = unsafe { core::slice::from_raw_parts(ptr, 4096) };
            assert!(bytes.iter().all(|&b| b == tag), "{pfn:?} -> {now:?}: contents lost");
        }
    }
    Report::new(&mm).check_invariants().unwrap();
}
