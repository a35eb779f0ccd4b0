//! Proves the allocation slow path behaves like Linux's
//! `__alloc_pages_slowpath`, with reclaim supplied as hooks: GFP_KERNEL
//! retries reclaim MAX_RECLAIM_RETRIES + 1 times without progress and is
//! rescued when `direct_reclaim` frees pages; GFP_NOWAIT and GFP_ATOMIC
//! wake kswapd but never reclaim; NORETRY and costly orders give up after
//! one round; NOFAIL loops while `retry_nofail` says so and fails cleanly
//! without hooks; a failing request first exhausts the highatomic reserve;
//! and progress claimed by reclaim or compaction cannot keep a request
//! retrying forever. Maps have no per-CPU lists, so counts are exact.

use mmkit::gfp::Watermark;
use mmkit::{AllocError, Gfp, Hooks, MemoryMapBuilder, MigrateType, PageAllocator, Pfn, Report, ZoneType};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex, OnceLock, Weak};

/// What `zone_watermark_ok` lets an order-0 GFP_ATOMIC request (MIN_RESERVE
/// and NON_BLOCK) go down to: min, less half, less a further quarter.
fn atomic_mark(min: u64) -> u64 {
    let m = min - min / 2;
    m - m / 4
}

// ---------------------------------------------------------------- hooks

#[derive(Default)]
struct Shared {
    mm: OnceLock<Weak<PageAllocator>>,
    /// Order-0 pages that "reclaim" may give back.
    stash: Mutex<Vec<Pfn>>,
    reclaim_frees: AtomicBool,
    reclaim_calls: AtomicU64,
    kswapd_calls: AtomicU64,
    compact_calls: AtomicU64,
    nofail_calls: AtomicU64,
    /// retry_nofail frees the stash on this call and says "retry" until it.
    nofail_release_at: AtomicU64,
}

impl Shared {
    fn release_stash(&self) -> u64 {
        let mm = self.mm.get().and_then(Weak::upgrade).expect("allocator");
        let pages: Vec<Pfn> = std::mem::take(&mut *self.stash.lock().unwrap());
        for &p in &pages {
            mm.free_pages(p, 0).unwrap();
        }
        pages.len() as u64
    }
}

struct TestHooks(Arc<Shared>);

impl Hooks for TestHooks {
    fn wake_kswapd(&self, _: &mmkit::hooks::ReclaimRequest) {
        self.0.kswapd_calls.fetch_add(1, SeqCst);
    }
    fn direct_reclaim(&self, _: &mmkit::hooks::ReclaimRequest) -> u64 {
        self.0.reclaim_calls.fetch_add(1, SeqCst);
        if self.0.reclaim_frees.load(SeqCst) {
            self.0.release_stash()
        } else {
            0
        }
    }
    fn direct_compact(&self, _: &mmkit::hooks::ReclaimRequest) -> bool {
        self.0.compact_calls.fetch_add(1, SeqCst);
        false
    }
    fn retry_nofail(&self, _: &mmkit::hooks::ReclaimRequest) -> bool {
        let n = self.0.nofail_calls.fetch_add(1, SeqCst) + 1;
        let at = self.0.nofail_release_at.load(SeqCst);
        if n == at {
            self.0.release_stash();
        }
        n <= at
    }
    fn log(&self, _: std::fmt::Arguments<'_>) {}
}

/// One NORMAL zone of 4096 pages with test hooks, filled with GFP_KERNEL
/// down to MIN; returns the allocator, the hooks' state and the pages.
fn full_zone_with_hooks() -> (Arc<PageAllocator>, Arc<Shared>, Vec<Pfn>) {
    let shared = Arc::new(Shared::default());
    let mm = Arc::new(
        MemoryMapBuilder::new()
            .zone(0, ZoneType::Normal, 0..4096)
            .hooks(TestHooks(shared.clone()))
            .per_cpu_lists(false)
            .build()
            .unwrap(),
    );
    shared.mm.set(Arc::downgrade(&mm)).unwrap();
    let mut held = Vec::new();
    while let Ok(p) = mm.alloc_pages(Gfp::KERNEL | Gfp::NOWARN, 0) {
        held.push(p);
    }
    let z = &mm.zones()[0];
    assert_eq!(z.free_pages(), z.watermark(Watermark::Min));
    (mm, shared, held)
}

#[test]
fn no_progress_reclaim_retries_then_fails() {
    let (mm, shared, _held) = full_zone_with_hooks();
    // The failing call that ended the fill: 16 retries + 1 (MAX_RECLAIM_RETRIES).
    assert_eq!(shared.reclaim_calls.load(SeqCst), 17);
    assert_eq!(Report::new(&mm).stats().allocstall, 17);
    assert!(shared.kswapd_calls.load(SeqCst) >= 17);
}

#[test]
fn direct_reclaim_that_frees_pages_rescues_gfp_kernel() {
    let (mm, shared, mut held) = full_zone_with_hooks();
    let stall = Report::new(&mm).stats().allocstall;
    let calls = shared.reclaim_calls.load(SeqCst);
    shared.stash.lock().unwrap().extend(held.drain(..32));
    shared.reclaim_frees.store(true, SeqCst);
    let p = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
    assert_eq!(Report::new(&mm).stats().allocstall, stall + 1);
    assert_eq!(shared.reclaim_calls.load(SeqCst), calls + 1);
    assert!(shared.stash.lock().unwrap().is_empty());
    let z = &mm.zones()[0];
    assert_eq!(z.free_pages(), z.watermark(Watermark::Min) + 31);
    mm.free_pages(p, 0).unwrap();
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn nowait_and_atomic_wake_kswapd_but_never_reclaim() {
    let (mm, shared, _held) = full_zone_with_hooks();
    let (reclaim, kswapd, stall) =
        (shared.reclaim_calls.load(SeqCst), shared.kswapd_calls.load(SeqCst), Report::new(&mm).stats().allocstall);
    assert!(mm.alloc_pages(Gfp::NOWAIT, 0).is_err());
    assert_eq!(shared.reclaim_calls.load(SeqCst), reclaim);
    assert_eq!(shared.kswapd_calls.load(SeqCst), kswapd + 1);
    assert_eq!(Report::new(&mm).stats().allocstall, stall);
    // GFP_ATOMIC succeeds below MIN without any reclaim.
    mm.alloc_pages(Gfp::ATOMIC, 0).unwrap();
    assert_eq!(shared.reclaim_calls.load(SeqCst), reclaim);
    assert_eq!(shared.kswapd_calls.load(SeqCst), kswapd + 2);
    // A request without KSWAPD_RECLAIM does not wake it.
    assert!(mm.alloc_pages(Gfp::NOWARN, 0).is_err());
    assert_eq!(shared.kswapd_calls.load(SeqCst), kswapd + 2);
}

#[test]
fn noretry_and_costly_orders_give_up_after_one_round() {
    let (mm, shared, _held) = full_zone_with_hooks();
    let reclaim = shared.reclaim_calls.load(SeqCst);
    assert!(mm.alloc_pages(Gfp::KERNEL | Gfp::NORETRY, 0).is_err());
    assert_eq!(shared.reclaim_calls.load(SeqCst), reclaim + 1);
    assert_eq!(shared.compact_calls.load(SeqCst), 0, "no compaction at order 0");
    // Order 4 > PAGE_ALLOC_COSTLY_ORDER: one reclaim and one compaction.
    assert!(mm.alloc_pages(Gfp::KERNEL, 4).is_err());
    assert_eq!(shared.reclaim_calls.load(SeqCst), reclaim + 2);
    assert_eq!(shared.compact_calls.load(SeqCst), 1);
    assert_eq!(Report::new(&mm).stats().compact_stall, 1);
}

#[test]
fn nofail_retries_until_pages_appear() {
    let (mm, shared, mut held) = full_zone_with_hooks();
    // Go below what NOFAIL may use (MIN less half) with GFP_ATOMIC.
    while let Ok(p) = mm.alloc_pages(Gfp::ATOMIC | Gfp::NOWARN, 0) {
        held.push(p);
    }
    let z = &mm.zones()[0];
    let min = z.watermark(Watermark::Min);
    assert_eq!(z.free_pages(), atomic_mark(min));
    shared.stash.lock().unwrap().extend(held.drain(..64));
    shared.nofail_release_at.store(3, SeqCst);
    let p = mm.alloc_pages(Gfp::KERNEL | Gfp::NOFAIL, 0).unwrap();
    assert_eq!(shared.nofail_calls.load(SeqCst), 3);
    assert_eq!(Report::new(&mm).stats().nofail_retries, 3);
    assert!(shared.stash.lock().unwrap().is_empty());
    mm.free_pages(p, 0).unwrap();
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn nofail_without_hooks_fails_cleanly() {
    let mm = MemoryMapBuilder::new().zone(0, ZoneType::Normal, 0..4096).per_cpu_lists(false).build().unwrap();
    while mm.alloc_pages(Gfp::ATOMIC | Gfp::NOWARN, 0).is_ok() {}
    let err = mm.alloc_pages(Gfp::KERNEL | Gfp::NOFAIL, 0).unwrap_err();
    assert_eq!(err, AllocError::NoMemory { order: 0, gfp: Gfp::KERNEL | Gfp::NOFAIL });
    assert_eq!(Report::new(&mm).stats().nofail_retries, 0);
}

#[test]
fn failing_request_exhausts_the_highatomic_reserve_first() {
    // Linux's should_reclaim_retry: "Before OOM, exhaust highatomic_reserve"
    // — every retry after MAX_RECLAIM_RETRIES releases one more pageblock
    // (force) and goes round again until none is left.
    let mm = MemoryMapBuilder::new()
        .pageblock_order(4)
        .zone(0, ZoneType::Normal, 0..8192)
        .per_cpu_lists(false)
        .build()
        .unwrap();
    while mm.alloc_pages(Gfp::KERNEL | Gfp::NOWARN, 0).is_ok() {}
    // Reserve highatomic pageblocks; remember one allocation per reserved
    // pageblock.
    let mut firsts = Vec::new();
    let report = Report::new(&mm);
    loop {
        let reserved = report.zone_snapshots()[0].counters.highatomic_reserved;
        let Ok(p) = mm.alloc_pages(Gfp::ATOMIC | Gfp::NOWARN, 2) else {
            break;
        };
        if report.zone_snapshots()[0].counters.highatomic_reserved > reserved {
            firsts.push(p);
        }
    }
    assert_eq!(firsts.len(), 6);
    // Give three reserved pageblocks free pages again (they stay HighAtomic).
    for &p in &firsts[..3] {
        mm.free_pages(p, 2).unwrap();
    }
    let snap = &report.zone_snapshots()[0];
    let ha_free = snap.free_pages_by_type[MigrateType::HighAtomic as usize];
    assert!(ha_free >= 12, "{ha_free}");
    // Far below MIN even if every reserved page were usable: this fails.
    assert!(snap.free_pages < mm.zones()[0].watermark(Watermark::Min));
    assert!(mm.alloc_pages(Gfp::KERNEL | Gfp::NOWARN, 0).is_err());
    let snap = &report.zone_snapshots()[0];
    assert_eq!(
        snap.free_pages_by_type[MigrateType::HighAtomic as usize],
        0,
        "highatomic pageblocks with free pages were left reserved \
         (released {} of them)",
        snap.counters.highatomic_released
    );
}

/// Hooks that claim progress for their first `lie_for` calls.
struct Liar {
    reclaim_progress: bool,
    compact_progress: bool,
    lie_for: u64,
    reclaim_calls: Arc<AtomicU64>,
    compact_calls: Arc<AtomicU64>,
}

impl Hooks for Liar {
    fn direct_reclaim(&self, _: &mmkit::hooks::ReclaimRequest) -> u64 {
        let n = self.reclaim_calls.fetch_add(1, SeqCst);
        u64::from(self.reclaim_progress && n < self.lie_for)
    }
    fn direct_compact(&self, _: &mmkit::hooks::ReclaimRequest) -> bool {
        let n = self.compact_calls.fetch_add(1, SeqCst);
        self.compact_progress && n < self.lie_for
    }
}

/// A fragmented zone: every other order-0 page allocated, so nothing of
/// order 1 or more is free; returns the reclaim and compaction call counts
/// of one failing request.
fn fragmented_request(reclaim: bool, compact: bool, gfp: Gfp, order: u32) -> (u64, u64) {
    let (r, c) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mm = MemoryMapBuilder::new()
        .zone(0, ZoneType::Normal, 0..4096)
        .hooks(Liar {
            reclaim_progress: reclaim,
            compact_progress: compact,
            lie_for: 200,
            reclaim_calls: r.clone(),
            compact_calls: c.clone(),
        })
        .per_cpu_lists(false)
        .build()
        .unwrap();
    let all: Vec<Pfn> =
        std::iter::from_fn(|| mm.alloc_pages(Gfp::ATOMIC | Gfp::MEMALLOC | Gfp::NOWARN, 0).ok()).collect();
    for p in all.iter().filter(|p| p.0 % 2 == 0) {
        mm.free_pages(*p, 0).unwrap();
    }
    assert_eq!(Report::new(&mm).zone_snapshots()[0].free.free_blocks_per_order[0], 2048);
    r.store(0, SeqCst);
    c.store(0, SeqCst);
    assert!(mm.alloc_pages(gfp | Gfp::NOWARN, order).is_err());
    (r.load(SeqCst), c.load(SeqCst))
}

#[test]
fn costly_retry_mayfail_does_not_count_reclaim_progress() {
    // Linux: "Costly allocations might have made a progress but this doesn't
    // mean their order will become available due to high fragmentation so
    // always increment the no progress counter for them."
    let (reclaims, _) = fragmented_request(true, false, Gfp::KERNEL | Gfp::RETRY_MAYFAIL, 4);
    assert!(reclaims <= 34, "{reclaims} reclaim rounds for an order-4 request");
}

#[test]
fn compaction_progress_alone_does_not_retry_forever() {
    // Linux retries on compaction only after reclaim progress, and at most
    // MAX_COMPACT_RETRIES (16) times; reclaim that frees nothing ends the
    // request after MAX_RECLAIM_RETRIES.
    let (reclaims, compactions) = fragmented_request(false, true, Gfp::KERNEL, 2);
    assert!(compactions <= 34, "{compactions} compaction rounds ({reclaims} reclaims) for an order-2 request");
}

/// A highatomic pageblock given back by a failing request merges with its
/// free buddies of the type it goes back to (found by the `builder` fuzz
/// target: the released pageblock and its buddy stayed two free blocks,
/// which the invariant checker reports as left unmerged).
#[test]
fn a_released_highatomic_pageblock_merges_with_its_buddies() {
    let mm = MemoryMapBuilder::new()
        .hooks(mmkit::QuietHooks)
        .cpu_id_fn(|| 0)
        .geometry(mmkit::Geometry { page_shift: 9, section_order: 9, pageblock_order: 4, max_page_order: 14 })
        .add_pc_node(0, 63940, 81 * 1024)
        .watermark_scale_factor(3000)
        .percpu_pagelist_high_fraction(8)
        .cpu_caches(false)
        .group_by_mobility(false)
        .build()
        .unwrap();
    let atomic = mm.alloc_pages(Gfp::ATOMIC, 0).unwrap(); // reserves a highatomic pageblock
    mm.free_pages(atomic, 0).unwrap();
    let pair = mm.alloc_pages(Gfp::ATOMIC, 1).unwrap();
    mm.free_pages(pair, 1).unwrap();
    // Watermarks far above the zone: this fails, and gives the reserve back.
    assert!(mm.alloc_pages(Gfp::KERNEL | Gfp::ZERO, 1).is_err());
    Report::new(&mm).check_invariants().unwrap();
}
