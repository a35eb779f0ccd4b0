//! Compaction: the migrate and free scanners, direct compaction for a
//! pageblock-sized request, and the vmstat counters.

use mmkit::{CopyMigrator, Gfp, MemoryMapBuilder, PageAllocator, Pfn, PlacementPolicy, ZoneType};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

type Moves = Arc<Mutex<Vec<(Pfn, Pfn, u32)>>>;

/// 4096 pages, pageblocks of 16 pages, blocks up to order 6; every
/// aligned group of four pages keeps one live movable page, so no free
/// block is larger than order 1. Returns the map, the live pages and the
/// move log.
fn fragmented(policy: PlacementPolicy) -> (PageAllocator, BTreeSet<Pfn>, Moves) {
    let moves: Moves = Arc::default();
    let log = moves.clone();
    let mm = MemoryMapBuilder::new()
        .max_page_order(6)
        .pageblock_order(4)
        .section_order(12)
        .zone(0, ZoneType::Normal, 0..4096)
        .per_cpu_lists(false)
        .min_free_kbytes(64)
        .placement(policy)
        .migrator(CopyMigrator::new(move |o, n, k| log.lock().unwrap().push((o, n, k))))
        .build()
        .unwrap();
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
    assert_eq!(mm.zone_snapshots()[0].unusable_index(4), 1000, "no free block of a pageblock");
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
        let result = mm.compact_zone(0, Some(4));
        assert!(result.success, "{policy:?}: {result:?}");
        assert!(result.migrated > 0 && result.migrate_scanned > 0 && result.free_scanned > 0, "{result:?}");
        follow(&mut live, &moves);
        assert_eq!(live.len(), before);
        for p in &live {
            assert_eq!(mm.page_count(*p), Ok(1), "{p:?} still allocated once");
        }
        mm.check_invariants().unwrap();
        assert!(mm.alloc_pages(Gfp::HIGHUSER_MOVABLE, 4).is_ok(), "{policy:?}: a pageblock-sized block now");
        let vmstat = mm.vmstat();
        assert!(vmstat.contains(&format!("compact_migrate_scanned {}", result.migrate_scanned)), "{vmstat}");
        assert!(vmstat.contains(&format!("pgmigrate_success {}", result.migrated)), "{vmstat}");
    }
}

#[test]
fn a_whole_zone_pass_moves_pages_up_until_the_scanners_meet() {
    let (mm, mut live, moves) = fragmented(PlacementPolicy::TwoEnds);
    let result = mm.compact_zone(0, None);
    assert!(!result.success, "no order asked");
    follow(&mut live, &moves);
    mm.check_invariants().unwrap();
    // The low half of the zone is free now: the pages went up.
    let low = live.iter().filter(|p| p.0 < 1024).count();
    assert!(low < live.len() / 8, "{low} of {} pages still low", live.len());
    assert!(mm.zone_snapshots()[0].unusable_index(4) < 500);
}

#[test]
fn direct_compaction_serves_a_failing_pageblock_request() {
    let (mm, mut live, moves) = fragmented(PlacementPolicy::Linux);
    let got = mm.alloc_pages(Gfp::HIGHUSER_MOVABLE | Gfp::COMP, 4).unwrap();
    follow(&mut live, &moves);
    assert!(live.iter().all(|p| p.0 < got.0 || p.0 >= got.0 + 16), "the block is free of live pages");
    let stats = mm.stats();
    assert!(stats.compact_stall >= 1);
    assert_eq!(stats.compact_success, 1);
    assert!(stats.compact_migrate_scanned > 0);
    mm.check_invariants().unwrap();
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
    let mm = MemoryMapBuilder::new()
        .max_page_order(6)
        .pageblock_order(4)
        .section_order(12)
        .zone(0, ZoneType::Normal, 0..1024)
        .per_cpu_lists(false)
        .migrator(OnlyRangeMigrator)
        .build()
        .unwrap();
    let pages: Vec<Pfn> = (0..64).map(|_| mm.alloc_pages(Gfp::HIGHUSER_MOVABLE, 0).unwrap()).collect();
    for p in pages.iter().filter(|p| p.0 % 2 == 1) {
        mm.free_pages(*p, 0).unwrap();
    }
    let free = mm.nr_free_pages();
    let result = mm.compact_zone(0, None);
    assert_eq!(result.migrated, 0);
    assert!(result.failed > 0);
    assert_eq!(mm.nr_free_pages(), free, "every target was given back");
    mm.check_invariants().unwrap();
}
