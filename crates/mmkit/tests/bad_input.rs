//! Proves that every caller mistake gets a typed error and changes nothing.
//!
//! Each case snapshots all observable allocator state (zone snapshots,
//! buddyinfo, free count, stats), makes the bad call, asserts the exact
//! error, asserts the state is identical afterwards and that the invariants
//! hold. Bad pages (flags set at free) are the one case that *does* change
//! state, exactly as documented: the page is reported and leaked. Hardware
//! poison is checked the same way: a poisoned page never returns to the
//! free lists, whether it was free, in use, or inside a larger block.
//!
//! Most maps are built without per-CPU lists so that frees reach the buddy
//! lists at once and counts are exact; the last tests repeat the double
//! free and poison cases for a page cached on a per-CPU list.

use mmkit::hooks::BadPageReport;
use mmkit::Cpus;
use mmkit::{
    AllocError, BadPageReason, FreeError, Gfp, Hooks, MemoryFailure, MemoryMapBuilder, PageAllocator, PageError,
    PageFlags, Pfn, Report, StatsSnapshot, ZoneSnapshot, ZoneType,
};
use std::sync::{Arc, Mutex};

/// Everything observable about the allocator as a whole.
#[derive(Debug, PartialEq)]
struct State {
    zones: Vec<ZoneSnapshot>,
    buddyinfo: String,
    nr_free: u64,
    stats: StatsSnapshot,
}

fn state(mm: &PageAllocator) -> State {
    State {
        zones: Report::new(mm).zone_snapshots(),
        buddyinfo: Report::new(mm).buddyinfo(),
        nr_free: Report::new(mm).nr_free_pages(),
        stats: Report::new(mm).stats(),
    }
}

/// Runs `bad`, which must fail with exactly `expected`, and checks that
/// nothing observable changed.
#[track_caller]
fn rejected<E: PartialEq + std::fmt::Debug, T: std::fmt::Debug>(
    mm: &PageAllocator,
    expected: E,
    bad: impl FnOnce() -> Result<T, E>,
) {
    let before = state(mm);
    let got = bad();
    assert_eq!(got.unwrap_err(), expected);
    assert_eq!(state(mm), before, "a rejected call changed the allocator");
    Report::new(mm).check_invariants().unwrap();
}

/// 64 MiB: DMA (PFNs 1..4096) and DMA32 (4096..16384).
fn small() -> PageAllocator {
    MemoryMapBuilder::with_memory(64 << 20).hooks(mmkit::QuietHooks).per_cpu_lists(false).build().unwrap()
}

#[derive(Clone, Default)]
struct Recorder {
    bad: Arc<Mutex<Vec<BadPageReport>>>,
}

impl Hooks for Recorder {
    fn bad_page(&self, report: &BadPageReport) {
        self.bad.lock().unwrap().push(*report);
    }
    fn log(&self, _line: std::fmt::Arguments<'_>) {}
}

fn zone_free(mm: &PageAllocator, pfn: Pfn) -> u64 {
    let z = mm.zones().iter().find(|z| z.span().contains(&pfn.0)).expect("pfn in a zone");
    z.free_pages()
}

/// Takes every free page of the map (NO_WATERMARKS via MEMALLOC), order by
/// order from `order` down, and returns the blocks.
fn take_everything(mm: &PageAllocator, order: u32) -> Vec<(Pfn, u32)> {
    let gfp = Gfp::ATOMIC | Gfp::MEMALLOC | Gfp::NOWARN;
    Cpus::new(mm).drain_all_pages();
    let mut got = Vec::new();
    for o in (0..=order).rev() {
        while let Ok(p) = mm.alloc_pages(gfp, o) {
            got.push((p, o));
        }
    }
    assert_eq!(Report::new(mm).nr_free_pages(), 0, "MEMALLOC takes every page");
    assert_eq!(pcp_pages(mm), 0);
    got
}

#[test]
fn double_free_order_0_and_3() {
    let mm = small();
    for order in [0, 3] {
        let p = mm.alloc_pages(Gfp::KERNEL, order).unwrap();
        mm.free_pages(p, order).unwrap();
        rejected(&mm, FreeError::DoubleFree(p), || mm.free_pages(p, order));
        // The order is not looked at once the page is known to be free.
        rejected(&mm, FreeError::DoubleFree(p), || mm.free_pages(p, order + 1));
        rejected(&mm, FreeError::DoubleFree(p), || mm.free_frozen_pages(p, order));
        rejected(&mm, FreeError::DoubleFree(p), || mm.put_page(p));
    }
}

#[test]
fn pfn_outside_the_map() {
    // Base PFN 0x10000 (section aligned): PFNs below it have no descriptor.
    let mm = MemoryMapBuilder::new().zone(0, ZoneType::Normal, 0x10000..0x12000).per_cpu_lists(false).build().unwrap();
    assert_eq!(mm.start_pfn(), Pfn(0x10000));
    assert_eq!(mm.end_pfn(), Pfn(0x12000));
    for pfn in [Pfn(0), Pfn(0xffff), Pfn(0x12000), Pfn(0x7fff_ffff), Pfn(u64::MAX)] {
        rejected(&mm, FreeError::OutOfRange(pfn), || mm.free_pages(pfn, 0));
        rejected(&mm, FreeError::OutOfRange(pfn), || mm.free_frozen_pages(pfn, 0));
        rejected(&mm, FreeError::OutOfRange(pfn), || mm.put_page(pfn));
        rejected(&mm, PageError::OutOfRange(pfn), || mm.get_page(pfn));
        rejected(&mm, PageError::OutOfRange(pfn), || mm.memory_failure(pfn));
        rejected(&mm, PageError::OutOfRange(pfn), || mm.page_count(pfn));
        rejected(&mm, PageError::OutOfRange(pfn), || mm.set_page_flags(pfn, PageFlags::LRU));
    }
}

#[test]
fn pfn_in_a_hole() {
    let mm = MemoryMapBuilder::with_memory(64 << 20).hole(5000..5100).per_cpu_lists(false).build().unwrap();
    let dma32 = &mm.zones()[1];
    assert_eq!(dma32.present_pages(), (16384 - 4096) - 100);
    // PFN 0 lies below the DMA zone (which starts at 1): also a hole.
    for pfn in [Pfn(5000), Pfn(5050), Pfn(5099), Pfn(0)] {
        rejected(&mm, FreeError::Hole(pfn), || mm.free_pages(pfn, 0));
        rejected(&mm, FreeError::Hole(pfn), || mm.free_frozen_pages(pfn, 0));
        rejected(&mm, FreeError::Hole(pfn), || mm.put_page(pfn));
        rejected(&mm, PageError::Hole(pfn), || mm.get_page(pfn));
        rejected(&mm, PageError::Hole(pfn), || mm.memory_failure(pfn));
        rejected(&mm, PageError::Hole(pfn), || mm.compound_head(pfn));
    }
}

#[test]
fn compound_tail_page() {
    let mm = small();
    let head = mm.alloc_pages(Gfp::KERNEL | Gfp::COMP, 3).unwrap();
    for i in 1..8 {
        let tail = Pfn(head.0 + i);
        let err = FreeError::TailPage { pfn: tail, head };
        rejected(&mm, err, || mm.free_pages(tail, 0));
        rejected(&mm, err, || mm.free_pages(tail, 3));
        rejected(&mm, err, || mm.free_frozen_pages(tail, 0));
    }
    mm.free_pages(head, 3).unwrap();
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn wrong_order() {
    let mm = small();
    let p = mm.alloc_pages(Gfp::KERNEL, 2).unwrap();
    for given in [0, 1, 3, 10, 11, 31, u32::MAX] {
        let err = FreeError::WrongOrder { pfn: p, allocated: 2, given };
        rejected(&mm, err, || mm.free_pages(p, given));
    }
    let f = mm.alloc_frozen_pages(Gfp::KERNEL, 2).unwrap();
    let err = FreeError::WrongOrder { pfn: f, allocated: 2, given: 1 };
    rejected(&mm, err, || mm.free_frozen_pages(f, 1));
    mm.free_pages(p, 2).unwrap();
    mm.free_frozen_pages(f, 2).unwrap();
    assert_eq!(Report::new(&mm).nr_free_pages(), 16383);
}

#[test]
fn reserved_page() {
    let mm = MemoryMapBuilder::with_memory(64 << 20).reserved(6000..6010).per_cpu_lists(false).build().unwrap();
    assert_eq!(mm.zones()[1].managed_pages(), 16384 - 4096 - 10);
    let p = Pfn(6005);
    rejected(&mm, FreeError::Reserved(p), || mm.free_pages(p, 0));
    rejected(&mm, FreeError::Reserved(p), || mm.free_frozen_pages(p, 0));
    rejected(&mm, FreeError::Reserved(p), || mm.put_page(p));
    rejected(&mm, PageError::NotInUse(p), || mm.get_page(p));
    rejected(&mm, PageError::NotInUse(p), || mm.set_page_flags(p, PageFlags::LRU));
    rejected(&mm, PageError::NotInUse(p), || mm.set_page_private(p, 7));
    assert!(mm.page_flags(p).unwrap().contains(PageFlags::RESERVED));
}

#[test]
fn page_inside_allocated_block() {
    let mm = small();
    let p = mm.alloc_pages(Gfp::KERNEL, 3).unwrap();
    for i in 1..8 {
        let inner = Pfn(p.0 + i);
        rejected(&mm, FreeError::NotAllocated(inner), || mm.free_pages(inner, 0));
        rejected(&mm, FreeError::NotAllocated(inner), || mm.free_pages(inner, 3));
        rejected(&mm, FreeError::NotAllocated(inner), || mm.free_frozen_pages(inner, 0));
        rejected(&mm, FreeError::NotAllocated(inner), || mm.put_page(inner));
        rejected(&mm, PageError::NotInUse(inner), || mm.get_page(inner));
    }
    mm.free_pages(p, 3).unwrap();
}

#[test]
fn page_inside_free_block() {
    let mm = small();
    // PFN 4101 is inside the free order-10 block at 4096 of a fresh map: the
    // code calls it a double free (it is free), not "not allocated".
    let p = Pfn(4101);
    assert!(!mm.page_flags(p).unwrap().contains(PageFlags::BUDDY));
    rejected(&mm, FreeError::DoubleFree(p), || mm.free_pages(p, 0));
    rejected(&mm, FreeError::DoubleFree(p), || mm.put_page(p));
    rejected(&mm, PageError::NotInUse(p), || mm.get_page(p));
    // The head of that free block too.
    let h = Pfn(4096);
    assert!(mm.page_flags(h).unwrap().contains(PageFlags::BUDDY));
    rejected(&mm, FreeError::DoubleFree(h), || mm.free_pages(h, 10));
}

#[test]
fn order_above_max() {
    let mm = small();
    for order in [11, 12, 31, u32::MAX] {
        let err = AllocError::OrderTooLarge { order, max: 10 };
        rejected(&mm, err, || mm.alloc_pages(Gfp::KERNEL, order));
        rejected(&mm, err, || mm.alloc_frozen_pages(Gfp::KERNEL, order));
        rejected(&mm, err, || mm.alloc_pages_node(0, Gfp::KERNEL, order));
    }
    // There is no OrderTooLarge for frees: an allocated page says WrongOrder.
    let p = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
    let err = FreeError::WrongOrder { pfn: p, allocated: 0, given: 11 };
    rejected(&mm, err, || mm.free_pages(p, 11));
    mm.free_pages(p, 0).unwrap();

    // Sections smaller than MAX_PAGE_ORDER cap the order at the section
    // (a pageblock may not be larger than a section).
    let mm = MemoryMapBuilder::new()
        .section_order(8)
        .pageblock_order(8)
        .zone(0, ZoneType::Normal, 0..4096)
        .per_cpu_lists(false)
        .build()
        .unwrap();
    let err = AllocError::OrderTooLarge { order: 9, max: 8 };
    rejected(&mm, err, || mm.alloc_pages(Gfp::KERNEL, 9));
    let p = mm.alloc_pages(Gfp::KERNEL, 8).unwrap();
    mm.free_pages(p, 8).unwrap();
}

#[test]
fn invalid_gfp_zone_bits() {
    let mm = small();
    for gfp in [
        Gfp::DMA | Gfp::DMA32,
        Gfp::KERNEL | Gfp::DMA | Gfp::DMA32,
        Gfp::DMA | Gfp::HIGHMEM,
        Gfp::DMA32 | Gfp::HIGHMEM | Gfp::MOVABLE,
        Gfp::DMA | Gfp::DMA32 | Gfp::HIGHMEM,
    ] {
        rejected(&mm, AllocError::InvalidGfp(gfp), || mm.alloc_pages(gfp, 0));
        rejected(&mm, AllocError::InvalidGfp(gfp), || mm.alloc_frozen_pages(gfp, 0));
    }
}

#[test]
fn missing_node() {
    let mm = small();
    assert_eq!(mm.nr_nodes(), 1);
    for nid in [1, 2, 63, 64, usize::MAX] {
        rejected(&mm, AllocError::NoSuchNode(nid), || mm.alloc_pages_node(nid, Gfp::KERNEL, 0));
        rejected(&mm, AllocError::NoSuchNode(nid), || mm.alloc_frozen_pages_node(nid, Gfp::KERNEL | Gfp::THISNODE, 0));
    }
}

#[test]
fn refcount_mismatches() {
    let mm = small();
    // free_frozen_pages of a page that still has a reference.
    let p = mm.alloc_pages(Gfp::KERNEL, 1).unwrap();
    let err = FreeError::RefcountMismatch { pfn: p, refcount: 1 };
    rejected(&mm, err, || mm.free_frozen_pages(p, 1));
    assert_eq!(mm.get_page(p), Ok(2));
    let err = FreeError::RefcountMismatch { pfn: p, refcount: 2 };
    rejected(&mm, err, || mm.free_frozen_pages(p, 1));
    // free_pages with two references on a non-compound block (Linux's
    // __free_pages): the reference is dropped, the rest of the block is
    // freed, and the first page lives on as an order-0 page.
    let free = Report::new(&mm).nr_free_pages();
    mm.free_pages(p, 1).unwrap();
    assert_eq!(Report::new(&mm).nr_free_pages(), free + 1);
    assert_eq!(mm.page_count(p), Ok(1));
    assert_eq!(mm.free_pages(p, 1), Err(FreeError::WrongOrder { pfn: p, allocated: 0, given: 1 }));
    mm.free_pages(p, 0).unwrap();
    assert_eq!(Report::new(&mm).nr_free_pages(), free + 2);

    // free_pages / put_page of a frozen page (refcount 0).
    let f = mm.alloc_frozen_pages(Gfp::KERNEL, 0).unwrap();
    assert_eq!(mm.page_count(f), Ok(0));
    let err = FreeError::RefcountMismatch { pfn: f, refcount: 0 };
    rejected(&mm, err, || mm.free_pages(f, 0));
    rejected(&mm, err, || mm.put_page(f));
    rejected(&mm, PageError::NotInUse(f), || mm.get_page(f));
    mm.free_frozen_pages(f, 0).unwrap();
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn references_to_free_pages() {
    let mm = small();
    let p = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
    mm.free_pages(p, 0).unwrap();
    rejected(&mm, FreeError::DoubleFree(p), || mm.put_page(p));
    rejected(&mm, PageError::NotInUse(p), || mm.get_page(p));
    rejected(&mm, PageError::NotInUse(p), || mm.set_page_flags(p, PageFlags::LRU));
    rejected(&mm, PageError::NotInUse(p), || mm.clear_page_flags(p, PageFlags::LRU));
    rejected(&mm, PageError::NotInUse(p), || mm.set_page_private(p, 1));
    rejected(&mm, PageError::NotInUse(p), || mm.page_private(p));
    assert_eq!(mm.page_count(p), Ok(0));
}

#[test]
fn allocator_owned_flags_are_not_settable() {
    let mm = small();
    let p = mm.alloc_pages(Gfp::KERNEL | Gfp::COMP, 2).unwrap();
    for flag in [
        PageFlags::BUDDY,
        PageFlags::HEAD,
        PageFlags::TAIL,
        PageFlags::HWPOISON,
        PageFlags::RESERVED,
        PageFlags::HOLE,
        PageFlags::ALLOCATED,
    ] {
        let err = PageError::FlagNotSettable(flag);
        rejected(&mm, err, || mm.set_page_flags(p, flag));
        rejected(&mm, err, || mm.clear_page_flags(p, flag));
        // Mixed with a settable flag: only the foreign part is named, and
        // the settable part is not applied either.
        rejected(&mm, err, || mm.set_page_flags(p, flag | PageFlags::LRU));
        rejected(&mm, err, || mm.set_page_flags(Pfn(p.0 + 1), flag));
    }
    assert!(!mm.page_flags(p).unwrap().contains(PageFlags::LRU));
    mm.free_pages(p, 2).unwrap();
}

#[test]
fn bad_page_flag_set_at_free_is_reported_and_leaked() {
    let rec = Recorder::default();
    let mm = MemoryMapBuilder::with_memory(64 << 20).hooks(rec.clone()).per_cpu_lists(false).build().unwrap();
    let p = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
    mm.set_page_flags(p, PageFlags::LRU).unwrap();
    let free_before = Report::new(&mm).nr_free_pages();
    let zone_before = zone_free(&mm, p);
    let err = mm.free_pages(p, 0).unwrap_err();
    assert_eq!(err, FreeError::BadPage { pfn: p, reason: BadPageReason::FlagsSetAtFree(PageFlags::LRU) });
    let stats = Report::new(&mm).stats();
    assert_eq!(stats.bad_pages, 1);
    assert_eq!(stats.bad_pages_leaked, 1);
    assert_eq!(Report::new(&mm).nr_free_pages(), free_before, "leaked, not freed");
    assert_eq!(zone_free(&mm, p), zone_before);
    assert_eq!(
        *rec.bad.lock().unwrap(),
        vec![BadPageReport { pfn: p, reason: BadPageReason::FlagsSetAtFree(PageFlags::LRU), total: 1 }]
    );
    Report::new(&mm).check_invariants().unwrap();
    // The leaked page is neither allocated nor free: a second free is
    // rejected and changes nothing, and no new report is made.
    rejected(&mm, FreeError::NotAllocated(p), || mm.free_pages(p, 0));
    rejected(&mm, PageError::NotInUse(p), || mm.get_page(p));
    assert_eq!(rec.bad.lock().unwrap().len(), 1);

    // Not even taking all memory finds it.
    let all = take_everything(&mm, 10);
    assert!(all.iter().all(|&(b, o)| !(b.0..b.0 + (1 << o)).contains(&p.0)));
}

#[test]
fn bad_compound_tail_leaks_the_whole_block() {
    let rec = Recorder::default();
    let mm = MemoryMapBuilder::with_memory(64 << 20).hooks(rec.clone()).per_cpu_lists(false).build().unwrap();
    let head = mm.alloc_pages(Gfp::KERNEL | Gfp::COMP, 2).unwrap();
    let tail = Pfn(head.0 + 3);
    mm.set_page_flags(tail, PageFlags::MLOCKED).unwrap();
    let free_before = Report::new(&mm).nr_free_pages();
    let reason = BadPageReason::FlagsSetAtFree(PageFlags::MLOCKED);
    assert_eq!(mm.put_page(tail), Err(FreeError::BadPage { pfn: tail, reason }));
    assert_eq!(Report::new(&mm).nr_free_pages(), free_before);
    let stats = Report::new(&mm).stats();
    assert_eq!((stats.bad_pages, stats.bad_pages_leaked), (1, 4));
    let reports = rec.bad.lock().unwrap().clone();
    assert_eq!(reports.len(), 1);
    assert_eq!((reports[0].pfn, reports[0].reason), (tail, reason));
    Report::new(&mm).check_invariants().unwrap();
    rejected(&mm, FreeError::NotAllocated(head), || mm.free_pages(head, 2));
}

#[test]
fn get_page_keeps_a_block_alive() {
    let mm = small();
    let p = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
    assert_eq!(mm.get_page(p), Ok(2));
    assert_eq!(mm.get_page(p), Ok(3));
    let free = Report::new(&mm).nr_free_pages();
    mm.put_page(p).unwrap();
    mm.free_pages(p, 0).unwrap();
    assert_eq!(Report::new(&mm).nr_free_pages(), free, "one reference is left");
    assert_eq!(mm.page_count(p), Ok(1));
    mm.put_page(p).unwrap();
    assert_eq!(Report::new(&mm).nr_free_pages(), free + 1);
    rejected(&mm, FreeError::DoubleFree(p), || mm.put_page(p));
    assert_eq!(Report::new(&mm).stats().bad_pages, 0);
}

#[test]
fn hwpoison_free_page_never_comes_back() {
    let mm = small();
    let p = Pfn(9000);
    let free = Report::new(&mm).nr_free_pages();
    assert_eq!(mm.memory_failure(p), Ok(MemoryFailure::TakenOffFreeList));
    assert_eq!(Report::new(&mm).nr_free_pages(), free - 1);
    assert_eq!(Report::new(&mm).stats().hwpoison_marked, 1);
    assert_eq!(Report::new(&mm).stats().hwpoison_offlined, 1);
    assert_eq!(mm.page_flags(p), Ok(PageFlags::HWPOISON | PageFlags::RESERVED), "offline for good");
    Report::new(&mm).check_invariants().unwrap();
    let before = state(&mm);
    assert_eq!(mm.memory_failure(p), Ok(MemoryFailure::AlreadyPoisoned));
    assert_eq!(state(&mm), before, "a second memory_failure changes nothing");
    rejected(&mm, FreeError::Poisoned(p), || mm.free_pages(p, 0));
    rejected(&mm, FreeError::Poisoned(p), || mm.put_page(p));
    rejected(&mm, PageError::NotInUse(p), || mm.get_page(p));
    // Every page of both zones, order 0: the poisoned one is not among them.
    let all = take_everything(&mm, 0);
    assert_eq!(all.len() as u64, free - 1);
    assert!(all.iter().all(|&(b, _)| b != p));
    for (b, o) in all {
        mm.free_pages(b, o).unwrap();
    }
    assert_eq!(Report::new(&mm).nr_free_pages(), free - 1);
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn hwpoison_in_use_page_is_dropped_at_free() {
    let mm = small();
    let p = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
    let free = Report::new(&mm).nr_free_pages();
    assert_eq!(mm.memory_failure(p), Ok(MemoryFailure::InUse));
    assert_eq!(mm.memory_failure(p), Ok(MemoryFailure::AlreadyPoisoned));
    assert_eq!(Report::new(&mm).stats().hwpoison_offlined, 0);
    assert_eq!(mm.free_pages(p, 0), Ok(()));
    assert_eq!(Report::new(&mm).nr_free_pages(), free, "the poisoned page is not freed");
    assert_eq!(Report::new(&mm).stats().hwpoison_marked, 1);
    assert_eq!(Report::new(&mm).stats().hwpoison_offlined, 1);
    Report::new(&mm).check_invariants().unwrap();
    rejected(&mm, FreeError::Poisoned(p), || mm.free_pages(p, 0));
    let all = take_everything(&mm, 0);
    assert!(all.iter().all(|&(b, _)| b != p));
}

#[test]
fn hwpoison_inside_order3_block_frees_the_rest_in_aligned_chunks() {
    let mm = small();
    // Fill the map with order-3 blocks so the freed pieces cannot merge
    // with neighbours and the chunks are visible in the snapshot.
    let all = take_everything(&mm, 3);
    let &(block, _) = all.iter().find(|&&(b, o)| o == 3 && b.0 >= 8192).unwrap();
    let zi = mm.zones().iter().position(|z| z.span().contains(&block.0)).unwrap();
    let bad = Pfn(block.0 + 5);
    assert_eq!(mm.memory_failure(bad), Ok(MemoryFailure::InUse));
    assert_eq!(mm.free_pages(block, 3), Ok(()));
    assert_eq!(Report::new(&mm).nr_free_pages(), 7);
    let snap = &Report::new(&mm).zone_snapshots()[zi];
    // [0,4) order 2, [4] order 0, [6,8) order 1; page 5 kept back.
    let per_order = &snap.free.free_blocks_per_order;
    assert_eq!(&per_order[..4], &[1, 1, 1, 0]);
    assert_eq!(Report::new(&mm).stats().hwpoison_offlined, 1);
    assert_eq!(mm.page_flags(bad), Ok(PageFlags::HWPOISON | PageFlags::RESERVED), "offline for good");
    Report::new(&mm).check_invariants().unwrap();
    // The seven pages come back exactly.
    let again = take_everything(&mm, 2);
    let mut pages: Vec<u64> = again.iter().flat_map(|&(b, o)| b.0..b.0 + (1 << o)).collect();
    pages.sort_unstable();
    let expected: Vec<u64> = (block.0..block.0 + 8).filter(|&x| x != bad.0).collect();
    assert_eq!(pages, expected);
}

#[test]
fn hwpoison_compound_tail_and_reserved() {
    let mm = MemoryMapBuilder::with_memory(64 << 20).reserved(6000..6001).per_cpu_lists(false).build().unwrap();
    assert_eq!(mm.memory_failure(Pfn(6000)), Ok(MemoryFailure::Reserved));
    let head = mm.alloc_pages(Gfp::KERNEL | Gfp::COMP, 2).unwrap();
    let free = Report::new(&mm).nr_free_pages();
    assert_eq!(mm.memory_failure(Pfn(head.0 + 2)), Ok(MemoryFailure::InUse));
    mm.put_page(Pfn(head.0 + 1)).unwrap();
    assert_eq!(Report::new(&mm).nr_free_pages(), free + 3);
    assert_eq!(Report::new(&mm).stats().hwpoison_offlined, 1);
    assert_eq!(Report::new(&mm).stats().bad_pages, 0);
    Report::new(&mm).check_invariants().unwrap();
}

/// A map with per-CPU lists on one CPU, so a freed order-0 page is cached.
fn with_pcp() -> PageAllocator {
    MemoryMapBuilder::with_memory(64 << 20).nr_cpus(1).hooks(mmkit::QuietHooks).build().unwrap()
}

fn pcp_pages(mm: &PageAllocator) -> u64 {
    Report::new(mm).zone_snapshots().iter().map(|z| z.pcp_pages).sum()
}

#[test]
fn double_free_of_a_page_on_a_per_cpu_list() {
    let mm = with_pcp();
    let p = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
    mm.free_pages(p, 0).unwrap();
    assert!(pcp_pages(&mm) > 0, "the page is cached on the per-CPU list");
    rejected(&mm, FreeError::DoubleFree(p), || mm.free_pages(p, 0));
    rejected(&mm, FreeError::DoubleFree(p), || mm.put_page(p));
    rejected(&mm, FreeError::DoubleFree(p), || mm.free_frozen_pages(p, 0));
    rejected(&mm, PageError::NotInUse(p), || mm.get_page(p));
}

#[test]
fn hwpoison_of_a_page_on_a_per_cpu_list() {
    let mm = with_pcp();
    let p = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
    mm.free_pages(p, 0).unwrap();
    Cpus::new(&mm).drain_all_pages();
    let free = Report::new(&mm).nr_free_pages();
    let p2 = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
    mm.free_pages(p2, 0).unwrap();
    assert!(pcp_pages(&mm) > 0);
    assert_eq!(mm.memory_failure(p2), Ok(MemoryFailure::TakenOffFreeList));
    assert_eq!(mm.page_flags(p2), Ok(PageFlags::HWPOISON | PageFlags::RESERVED), "offline for good");
    Report::new(&mm).check_invariants().unwrap();
    Cpus::new(&mm).drain_all_pages();
    assert_eq!(Report::new(&mm).nr_free_pages(), free - 1);
    rejected(&mm, FreeError::Poisoned(p2), || mm.free_pages(p2, 0));
    let all = take_everything(&mm, 0);
    assert_eq!(all.len() as u64, free - 1);
    assert!(all.iter().all(|&(b, _)| b != p2));
}

/// A count from the caller is a wish bounded by the map. The old
/// `alloc_pages_bulk_vec` reserved room for it first: `1 << 40` pages
/// aborted the process (allocation failure) and `usize::MAX` panicked
/// (capacity overflow). Now it is a short count, and the pages it did get
/// are the caller's to free.
#[test]
fn a_huge_bulk_count_is_a_short_count_not_an_abort() {
    let mm = small();
    let total = mm.end_pfn().0 - mm.start_pfn().0;
    let free = Report::new(&mm).nr_free_pages();
    for n in [1usize << 40, usize::MAX, (1usize << 40) + 7] {
        let mut pages = Vec::new();
        let got = mm.alloc_pages_bulk_vec(Gfp::KERNEL, n, &mut pages);
        assert_eq!(got, pages.len());
        assert!(got >= 1 && got as u64 <= total, "{got} pages of {total}");
        mm.free_pages_bulk(&pages).unwrap();
        let mut pages = Vec::new();
        let got = Cpus::new(&mm).cpu(0).unwrap().alloc_pages_bulk_vec(Gfp::KERNEL, n, &mut pages);
        assert!(got >= 1 && got as u64 <= total);
        mm.free_pages_bulk(&pages).unwrap();
    }
    assert_eq!(Report::new(&mm).nr_free_pages(), free, "every page came back");
    let before = state(&mm);
    let contig = mmkit::Contig::new(&mm);
    assert!(contig.alloc_contig_pages(u64::MAX, Gfp::KERNEL, 0).is_err());
    assert!(contig.alloc_contig_pages(1 << 40, Gfp::KERNEL, 0).is_err());
    assert_eq!(state(&mm), before);
    Report::new(&mm).check_invariants().unwrap();
}
