//! Watermark boosting (Linux's `boost_watermark`): when a fallback claims a
//! pageblock of another migratetype from below pageblock order, every
//! watermark of the zone rises by a pageblock (up to
//! `watermark_boost_factor` of the high mark), kswapd is woken once (by the
//! next allocation, before it takes a page), and the boost stays until
//! reclaim resets it.

use mmkit::Tuning;
use mmkit::{Gfp, Hooks, MemoryMapBuilder, Pfn, Report, Watermark, ZoneType};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Default)]
struct KswapdCounter(Arc<AtomicU64>);

impl Hooks for KswapdCounter {
    fn wake_kswapd(&self, _request: &mmkit::hooks::ReclaimRequest) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn claiming_a_mixed_pageblock_boosts_the_watermarks_until_reset() {
    let wakeups = Arc::new(AtomicU64::new(0));
    let mm = MemoryMapBuilder::new()
        .max_page_order(6)
        .pageblock_order(4)
        .section_order(10)
        .zone(0, ZoneType::Normal, 0..1024)
        .min_free_kbytes(0)
        .per_cpu_lists(false)
        .hooks(KswapdCounter(wakeups.clone()))
        .build()
        .unwrap();
    let zone = &mm.zones()[0];
    let base_min = zone.watermark(Watermark::Min);
    assert_eq!(zone.watermark_boost(), 0);

    // Fill the zone with movable pages, then give one pageblock 12 of its
    // 16 pages back: the only free memory is in blocks below pageblock order.
    let mut held = Vec::new();
    while let Ok(pfn) = mm.alloc_pages(Gfp::HIGHUSER_MOVABLE, 0) {
        held.push(pfn);
    }
    for p in 512..524 {
        mm.free_pages(Pfn(p), 0).unwrap();
        held.retain(|&h| h != Pfn(p));
    }
    let wakeups_before = wakeups.load(Ordering::Relaxed);

    // An unmovable request must fall back; it claims the mostly free block.
    let unmovable = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
    assert!((512..528).contains(&unmovable.0), "served from the claimed pageblock, got {unmovable}");
    let report = Report::new(&mm);
    assert!(report.pagetypeinfo().contains("Unmovable"), "{}", report.pagetypeinfo());
    assert_eq!(zone.watermark_boost(), 16, "boosted by one pageblock");
    assert_eq!(zone.watermark(Watermark::Min), base_min + 16, "every watermark includes the boost");
    // The allocation after the boosting one wakes kswapd, before it takes
    // a page (a hook never runs with a page in hand), and only once.
    assert_eq!(wakeups.load(Ordering::Relaxed), wakeups_before, "not with the boosting allocation's page in hand");
    // Room above the boosted marks, so that the next allocation passes them.
    for pfn in held.drain(..32) {
        mm.free_pages(pfn, 0).unwrap();
    }
    let next = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
    assert_eq!(wakeups.load(Ordering::Relaxed), wakeups_before + 1, "kswapd woken once for the boost");
    mm.free_pages(next, 0).unwrap();
    let again = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
    assert_eq!(wakeups.load(Ordering::Relaxed), wakeups_before + 1, "and only once");
    mm.free_pages(again, 0).unwrap();

    Tuning::new(&mm).reset_watermark_boost();
    assert_eq!(zone.watermark_boost(), 0);
    assert_eq!(zone.watermark(Watermark::Min), base_min);

    held.push(unmovable);
    assert_eq!(mm.free_pages_bulk(&held), Ok(held.len()));
    report.check_invariants().unwrap();
}

#[test]
fn small_zones_and_a_zero_factor_never_boost() {
    for (pages, factor) in [(48u64, 15_000u64), (1024, 0)] {
        let mut config = mmkit::zone::WatermarkConfig { min_free_kbytes: Some(0), ..Default::default() };
        config.watermark_boost_factor = factor;
        let mm = MemoryMapBuilder::new()
            .max_page_order(6)
            .pageblock_order(4)
            .section_order(10)
            .zone(0, ZoneType::Normal, 0..pages)
            .watermarks(config)
            .per_cpu_lists(false)
            .build()
            .unwrap();
        let mut held = Vec::new();
        while let Ok(pfn) = mm.alloc_pages(Gfp::HIGHUSER_MOVABLE, 0) {
            held.push(pfn);
        }
        for pfn in held.drain(..).filter(|p| p.0 % 16 < 12) {
            mm.free_pages(pfn, 0).unwrap();
        }
        let _ = mm.alloc_pages(Gfp::KERNEL, 0);
        assert_eq!(mm.zones()[0].watermark_boost(), 0, "{pages} pages, factor {factor}");
    }
}
