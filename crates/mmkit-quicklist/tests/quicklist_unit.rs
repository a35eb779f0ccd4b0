//! Tests of the quicklist layer's behaviour: state kept, ownership
//! enforced, trim arithmetic, node and poison bypasses.

use mmkit::Blocks;
use mmkit::Cpus;
use mmkit::{Backing, Contig, FreeError, Gfp, HugePages, MemoryMapBuilder, PageAllocator, PageFlags, Pfn, Report};
use mmkit_quicklist::{QuicklistError, Quicklists, FRACTION_OF_NODE_MEM};
use std::cell::Cell;

fn real_map(bytes: u64, cpus: usize) -> Arc<PageAllocator> {
    Arc::new(
        MemoryMapBuilder::with_memory(bytes)
            .backing(Backing::RealMemory(HugePages::None))
            .nr_cpus(cpus)
            .cpu_id_fn(|| 0)
            .build()
            .unwrap(),
    )
}

mod common;
use common::write_byte;
use std::sync::Arc;

/// Reads a byte of a page the quicklists handed out.
fn read_byte(mm: &PageAllocator, pfn: Pfn, offset: usize) -> u8 {
    common::with_page(mm, pfn, |bytes| bytes[offset])
}

/// Free + cached + held pages add up to what was free at the start.
fn assert_conserved(mm: &PageAllocator, ql: &Quicklists, start_free: u64, held: u64) {
    Cpus::new(mm).drain_all_pages();
    assert_eq!(Report::new(mm).nr_free_pages() + ql.quicklist_total_size() + held, start_free);
}

#[test]
fn a_freed_page_comes_back_from_the_list_without_the_allocator() {
    let mm = real_map(16 << 20, 1);
    Cpus::new(&mm).drain_all_pages();
    let start = Report::new(&mm).nr_free_pages();
    let ql = Quicklists::new(Arc::clone(&mm), 2).unwrap();
    let a = ql.quicklist_alloc(1, Gfp::KERNEL, None).unwrap();
    assert!(mm.page_flags(a).unwrap().contains(PageFlags::OWNED));
    ql.quicklist_free_page(1, None, a).unwrap();
    assert_eq!(ql.quicklist_size(0, 1), Some(1));
    assert_eq!(ql.quicklist_size(0, 0), Some(0));
    assert_conserved(&mm, &ql, start, 0);
    let free_before = Report::new(&mm).nr_free_pages() + Report::new(&mm).nr_pcp_pages();
    assert_eq!(ql.quicklist_alloc(1, Gfp::KERNEL, None).unwrap(), a);
    assert_eq!(
        Report::new(&mm).nr_free_pages() + Report::new(&mm).nr_pcp_pages(),
        free_before,
        "a hit does not reach the allocator"
    );
    assert_eq!((0..4096).map(|i| read_byte(&mm, a, i)).max(), Some(0), "a cached page keeps its state");
    let s = ql.stats(1);
    assert_eq!((s.hits, s.misses, s.cached), (1, 1, 1));
    ql.quicklist_free_page(1, None, a).unwrap();
    drop(ql);
    assert_conserved(&mm, &Quicklists::new(Arc::clone(&mm), 1).unwrap(), start, 0);
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn lists_are_lifo() {
    let mm = real_map(16 << 20, 1);
    let ql = Quicklists::new(Arc::clone(&mm), 1).unwrap();
    let pages: Vec<Pfn> = (0..5).map(|_| ql.quicklist_alloc(0, Gfp::KERNEL, None).unwrap()).collect();
    for &p in &pages {
        ql.quicklist_free_page(0, None, p).unwrap();
    }
    let cached = ql.cached_pages(0, 0).unwrap();
    assert_eq!(cached, pages.iter().rev().copied().collect::<Vec<_>>());
    for &p in pages.iter().rev() {
        assert_eq!(ql.quicklist_alloc(0, Gfp::KERNEL, None).unwrap(), p);
    }
    for &p in &pages {
        ql.quicklist_free_page(0, None, p).unwrap();
    }
}

#[test]
fn ctor_runs_only_on_fresh_pages_and_its_state_survives_caching() {
    let mm = real_map(16 << 20, 1);
    let ql = Quicklists::new(Arc::clone(&mm), 1).unwrap();
    let ctor_calls = Cell::new(0);
    let ctor = |page: &mut [u8]| {
        ctor_calls.set(ctor_calls.get() + 1);
        page[0] = 0x5a; // the first word is part of the state too
        page[4000] = 0xa5;
    };
    let a = ql.quicklist_alloc(0, Gfp::KERNEL, Some(&ctor)).unwrap();
    let b = ql.quicklist_alloc(0, Gfp::KERNEL, Some(&ctor)).unwrap();
    assert_eq!(ctor_calls.get(), 2);
    ql.quicklist_free_page(0, None, a).unwrap();
    ql.quicklist_free_page(0, None, b).unwrap();
    let c = ql.quicklist_alloc(0, Gfp::KERNEL, Some(&ctor)).unwrap();
    assert_eq!(ctor_calls.get(), 2, "a cached page is already constructed");
    assert_eq!((read_byte(&mm, c, 0), read_byte(&mm, c, 4000)), (0x5a, 0xa5));
    ql.quicklist_free_page(0, None, c).unwrap();
}

#[test]
fn dtor_runs_exactly_when_a_page_leaves_the_layer() {
    let mm = real_map(16 << 20, 1);
    let ql = Quicklists::new(Arc::clone(&mm), 1).unwrap();
    let dtor_calls = Cell::new(0);
    let dtor = |_: &mut [u8]| dtor_calls.set(dtor_calls.get() + 1);
    let pages: Vec<Pfn> = (0..8).map(|_| ql.quicklist_alloc(0, Gfp::KERNEL, None).unwrap()).collect();
    for &p in &pages {
        ql.quicklist_free_page(0, Some(&dtor), p).unwrap();
    }
    assert_eq!(dtor_calls.get(), 0, "caching is not destruction");
    assert_eq!(ql.quicklist_drain(0, Some(&dtor)).unwrap(), 8);
    assert_eq!(dtor_calls.get(), 8);
    assert_eq!(ql.quicklist_total_size(), 0);
}

#[test]
fn trim_keeps_max_of_min_pages_and_a_sixteenth_of_node_free() {
    // 8 MiB: about 2000 free pages, so node_free / 16 is about 125.
    let mm = real_map(8 << 20, 1);
    let ql = Quicklists::new(Arc::clone(&mm), 1).unwrap();
    let pages: Vec<Pfn> = (0..300).map(|_| ql.quicklist_alloc(0, Gfp::KERNEL, None).unwrap()).collect();
    for &p in &pages {
        ql.quicklist_free_page(0, None, p).unwrap();
    }
    assert_eq!(ql.quicklist_trim(0, None, 400, 1000).unwrap(), 0, "at or below min_pages: nothing");
    assert_eq!(ql.quicklist_trim(0, None, 10, 7).unwrap(), 7, "at most max_free per call");
    let node_free = Report::new(&mm).node_free_pages(0).unwrap();
    let expect_keep = (node_free / FRACTION_OF_NODE_MEM).max(10);
    let freed = ql.quicklist_trim(0, None, 10, u64::MAX).unwrap();
    assert_eq!(ql.quicklist_total_size(), expect_keep.max(293 - freed));
    assert!(freed > 0);
    assert_eq!(ql.quicklist_trim(0, None, 250, u64::MAX).unwrap(), 0, "min_pages above the floor keeps more");
}

#[test]
fn bad_frees_are_refused_and_change_nothing() {
    let mm = real_map(16 << 20, 1);
    let ql = Quicklists::new(Arc::clone(&mm), 1).unwrap();
    let a = ql.quicklist_alloc(0, Gfp::KERNEL, None).unwrap();
    ql.quicklist_free_page(0, None, a).unwrap();
    let size = ql.quicklist_total_size();
    let free = Report::new(&mm).nr_free_pages();
    let refused = |r: Result<(), QuicklistError>, want: QuicklistError| {
        assert_eq!(r, Err(want));
        assert_eq!(ql.quicklist_total_size(), size);
        assert_eq!(Report::new(&mm).nr_free_pages(), free);
    };
    refused(ql.quicklist_free_page(0, None, a), QuicklistError::Free(FreeError::DoubleFree(a)));
    refused(ql.quicklist_free_page(1, None, a), QuicklistError::NoSuchList { nr: 1, nr_quick: 1 });
    let far = Pfn(mm.end_pfn().0 + 5);
    refused(ql.quicklist_free_page(0, None, far), QuicklistError::Free(FreeError::OutOfRange(far)));
    let block = mm.alloc_pages(Gfp::KERNEL, 2).unwrap();
    assert_eq!(
        ql.quicklist_free_page(0, None, block),
        Err(QuicklistError::Free(FreeError::WrongOrder { pfn: block, allocated: 2, given: 0 }))
    );
    let shared = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
    let free = Report::new(&mm).nr_free_pages() + Report::new(&mm).nr_pcp_pages();
    mm.get_page(shared).unwrap();
    assert!(matches!(
        ql.quicklist_free_page(0, None, shared),
        Err(QuicklistError::Free(FreeError::RefcountMismatch { refcount: 2, .. }))
    ));
    assert!(!mm.page_flags(shared).unwrap().contains(PageFlags::OWNED), "the mark is undone");
    mm.set_page_flags(shared, PageFlags::LRU).unwrap();
    mm.put_page(shared).unwrap();
    assert_eq!(
        ql.quicklist_free_page(0, None, shared),
        Err(QuicklistError::FlagsSet { pfn: shared, flags: PageFlags::LRU })
    );
    assert_eq!(Report::new(&mm).nr_free_pages() + Report::new(&mm).nr_pcp_pages(), free);
    assert_eq!(ql.quicklist_total_size(), size);
    // The allocator's own free paths refuse quicklist pages, cached or held.
    assert_eq!(mm.free_pages(a, 0), Err(FreeError::Owned { pfn: a, owner: ql.owner().unwrap() }));
    assert_eq!(mm.put_page(a), Err(FreeError::Owned { pfn: a, owner: ql.owner().unwrap() }));
    let held = ql.quicklist_alloc(0, Gfp::KERNEL, None).unwrap();
    assert_eq!(mm.free_pages(held, 0), Err(FreeError::Owned { pfn: held, owner: ql.owner().unwrap() }));
    assert_eq!(
        Contig::new(&mm).free_contig_range(held, 1),
        Err(FreeError::Owned { pfn: held, owner: ql.owner().unwrap() })
    );
    ql.quicklist_free_page(0, None, held).unwrap();
    mm.clear_page_flags(shared, PageFlags::LRU).unwrap();
    mm.free_pages(shared, 0).unwrap();
    mm.free_pages(block, 2).unwrap();
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn plain_allocator_pages_are_adopted() {
    let mm = real_map(16 << 20, 1);
    let ql = Quicklists::new(Arc::clone(&mm), 1).unwrap();
    let p = mm.alloc_pages(Gfp::KERNEL | Gfp::ZERO, 0).unwrap();
    ql.quicklist_free_page(0, None, p).unwrap();
    assert_eq!(ql.quicklist_alloc(0, Gfp::KERNEL, None).unwrap(), p);
    let addr = mm.page_address(p).unwrap().as_ptr();
    ql.quicklist_free(0, None, addr).unwrap();
    assert_eq!(ql.quicklist_size(0, 0), Some(1));
}

#[test]
fn a_page_not_in_the_list_state_is_restored_and_cached() {
    let mm = real_map(16 << 20, 1);
    let ql = Quicklists::new(Arc::clone(&mm), 1).unwrap();
    let p = ql.quicklist_alloc(0, Gfp::KERNEL, None).unwrap();
    write_byte(&mm, p, 100, 7);
    let free = Report::new(&mm).nr_free_pages() + Report::new(&mm).nr_pcp_pages();
    let bad = Report::new(&mm).stats().bad_pages;
    ql.quicklist_free_page(0, None, p).unwrap();
    assert_eq!(Report::new(&mm).stats().bad_pages, bad, "a page the caller wrote is not a bad page");
    assert_eq!(ql.quicklist_total_size(), 1);
    assert_eq!(Report::new(&mm).nr_free_pages() + Report::new(&mm).nr_pcp_pages(), free, "cached, not returned");
    let q = ql.quicklist_alloc(0, Gfp::KERNEL, None).unwrap();
    assert_eq!(q, p, "the cached page comes back");
    common::with_page(&mm, q, |bytes| assert!(bytes.iter().all(|&b| b == 0)));
    ql.quicklist_free_page(0, None, q).unwrap();
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn pages_of_another_node_bypass_the_cache() {
    let mm = Arc::new(
        MemoryMapBuilder::new()
            .add_pc_node(0, 0, 16 << 20)
            .add_pc_node(1, 0x10000, 16 << 20)
            .backing(Backing::RealMemory(HugePages::None))
            .nr_cpus(1)
            .cpu_id_fn(|| 0)
            .build()
            .unwrap(),
    );
    let ql = Quicklists::new(Arc::clone(&mm), 1).unwrap();
    let remote = mm.alloc_pages_node(1, Gfp::KERNEL | Gfp::THISNODE | Gfp::ZERO, 0).unwrap();
    assert_eq!(mm.page_to_nid(remote), Some(1));
    let dtor_calls = Cell::new(0);
    let dtor = |_: &mut [u8]| dtor_calls.set(dtor_calls.get() + 1);
    ql.quicklist_free_page(0, Some(&dtor), remote).unwrap();
    assert_eq!((ql.quicklist_total_size(), dtor_calls.get()), (0, 1));
    assert!(mm.free_pages(remote, 0).is_err(), "it went back to the allocator");
    let local = ql.quicklist_alloc(0, Gfp::KERNEL, None).unwrap();
    assert_eq!(mm.page_to_nid(local), Some(0));
    ql.quicklist_free_page(0, Some(&dtor), local).unwrap();
    assert_eq!((ql.quicklist_total_size(), dtor_calls.get()), (1, 1));
}

#[test]
fn a_poisoned_cached_page_is_never_handed_out() {
    let mm = real_map(16 << 20, 1);
    let ql = Quicklists::new(Arc::clone(&mm), 1).unwrap();
    let a = ql.quicklist_alloc(0, Gfp::KERNEL, None).unwrap();
    let b = ql.quicklist_alloc(0, Gfp::KERNEL, None).unwrap();
    ql.quicklist_free_page(0, None, a).unwrap();
    ql.quicklist_free_page(0, None, b).unwrap();
    mm.memory_failure(b).unwrap();
    assert_eq!(ql.quicklist_alloc(0, Gfp::KERNEL, None).unwrap(), a, "b is skipped");
    assert_eq!(ql.quicklist_total_size(), 0);
    assert!(mm.page_flags(b).unwrap().contains(PageFlags::HWPOISON));
    ql.quicklist_free_page(0, None, a).unwrap();
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn a_pinned_cpu_is_bypassed_by_the_shared_api() {
    let mm = real_map(16 << 20, 2);
    let ql = Quicklists::new(Arc::clone(&mm), 1).unwrap();
    let mut cpu0 = ql.pin_cpu(0).unwrap();
    assert_eq!(ql.pin_cpu(0).err(), Some(QuicklistError::AlreadyPinned(0)));
    assert_eq!(ql.pin_cpu(2).err(), Some(QuicklistError::NoSuchCpu(2)));
    let p = cpu0.alloc(0, Gfp::KERNEL, None).unwrap();
    cpu0.free_page(0, None, p).unwrap();
    let q = ql.quicklist_alloc(0, Gfp::KERNEL, None).unwrap(); // runs "on" cpu 0: bypass
    assert_ne!(p, q);
    ql.quicklist_free_page(0, None, q).unwrap();
    assert_eq!(ql.quicklist_total_size(), 1, "only the pinned handle's page is cached");
    assert_eq!(cpu0.stats(0).map(|s| (s.hits, s.misses, s.cached)), Some((0, 1, 1)));
    assert_eq!(cpu0.drain(0, None).unwrap(), 1);
}

#[test]
fn metadata_only_maps_are_refused() {
    let mm = Arc::new(MemoryMapBuilder::with_memory(16 << 20).build().unwrap());
    assert_eq!(Quicklists::new(Arc::clone(&mm), 1).err(), Some(QuicklistError::NoRealMemory));
}

/// A count of lists from the caller sized every CPU's tables unchecked:
/// `usize::MAX` lists aborted the process. Now it is a typed error, and
/// the map's owner key is not taken for a refused set.
#[test]
fn a_huge_list_count_is_refused() {
    let mm = real_map(4 << 20, 2);
    for nr_quick in [mmkit_quicklist::MAX_NR_QUICK + 1, 1 << 40, usize::MAX] {
        let refused = Quicklists::new(Arc::clone(&mm), nr_quick).err();
        assert_eq!(refused, Some(QuicklistError::TooManyLists { nr_quick, max: mmkit_quicklist::MAX_NR_QUICK }));
    }
    let keys: Vec<_> = (0..mmkit::PageOwner::MAX).map(|_| Blocks::new(&mm).new_owner_key().unwrap()).collect();
    assert_eq!(keys.len(), 15, "no key was kept by a refused set");
    assert!(Quicklists::new(Arc::clone(&mm), mmkit_quicklist::MAX_NR_QUICK).is_err(), "no tag left");
    for key in keys {
        assert!(Blocks::new(&mm).release_owner_key(key));
    }
    assert!(Quicklists::new(Arc::clone(&mm), mmkit_quicklist::MAX_NR_QUICK).is_ok());
}

/// A constructor or destructor that panics used to leave its page
/// allocated with no handle: owned by the quicklists, reachable by nobody,
/// lost. Now the page goes back to the allocator as the panic unwinds.
#[test]
fn a_panicking_constructor_or_destructor_loses_no_page() {
    use std::panic::{catch_unwind, AssertUnwindSafe};
    let mm = real_map(4 << 20, 1);
    Cpus::new(&mm).drain_all_pages();
    let start = Report::new(&mm).nr_free_pages();
    let boom = |_: &mut [u8]| panic!("constructor failed");
    let ql = Quicklists::new(Arc::clone(&mm), 1).unwrap();
    assert!(catch_unwind(AssertUnwindSafe(|| ql.quicklist_alloc(0, Gfp::KERNEL, Some(&boom)))).is_err());
    assert_conserved(&mm, &ql, start, 0);
    let uncached = Quicklists::uncached(Arc::clone(&mm), 1).unwrap();
    let page = uncached.quicklist_alloc(0, Gfp::KERNEL, None).unwrap();
    assert!(catch_unwind(AssertUnwindSafe(|| uncached.quicklist_free_page(0, Some(&boom), page))).is_err());
    assert_conserved(&mm, &uncached, start, 0);
    drop((ql, uncached));
    Cpus::new(&mm).drain_all_pages();
    Report::new(&mm).check_invariants().unwrap();
    assert_eq!(Report::new(&mm).nr_free_pages(), start);
}
