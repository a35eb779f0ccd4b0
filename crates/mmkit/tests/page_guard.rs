//! `PageGuard`: a guarded block is freed on drop, exactly once, and a
//! guard taken apart or freed by hand frees nothing more.

use mmkit::{FreeError, Gfp, MemoryMapBuilder, PageAllocator, Report};

fn free(mm: &PageAllocator) -> u64 {
    mm.nr_free_pages() + mm.nr_pcp_pages()
}

#[test]
fn a_dropped_guard_frees_its_block_once() {
    let mm = MemoryMapBuilder::with_memory(16 << 20).nr_cpus(2).build().unwrap();
    let before = free(&mm);
    for order in [0, 1, 3, 9] {
        let guard = mm.alloc_pages_guarded(Gfp::KERNEL, order).unwrap();
        assert_eq!(guard.order(), order);
        assert_eq!(free(&mm), before - (1 << order));
        assert!(mm.page_flags(guard.pfn()).is_ok());
        drop(guard);
        assert_eq!(free(&mm), before, "order {order} back on drop");
    }
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn into_pfn_hands_the_block_back_to_the_caller() {
    let mm = MemoryMapBuilder::with_memory(16 << 20).build().unwrap();
    let before = free(&mm);
    let pfn = mm.alloc_pages_guarded(Gfp::KERNEL, 2).unwrap().into_pfn();
    assert_eq!(free(&mm), before - 4, "still allocated after the guard is gone");
    mm.free_pages(pfn, 2).unwrap();
    assert_eq!(free(&mm), before);
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn free_reports_and_a_double_free_behind_the_guard_changes_nothing() {
    let mm = MemoryMapBuilder::with_memory(16 << 20).cpu_caches(false).per_cpu_lists(false).build().unwrap();
    let before = free(&mm);
    assert_eq!(mm.alloc_pages_guarded(Gfp::KERNEL, 1).unwrap().free(), Ok(()));
    assert_eq!(free(&mm), before);

    let guard = mm.alloc_pages_guarded(Gfp::KERNEL, 0).unwrap();
    let pfn = guard.pfn();
    mm.free_pages(pfn, 0).unwrap(); // behind the guard's back
    assert!(matches!(guard.free(), Err(FreeError::DoubleFree(p) | FreeError::NotAllocated(p)) if p == pfn));
    assert_eq!(free(&mm), before);

    let guard = mm.alloc_pages_guarded(Gfp::KERNEL, 0).unwrap();
    mm.free_pages(guard.pfn(), 0).unwrap();
    drop(guard); // refused inside the drop: no panic, no page counted twice
    assert_eq!(free(&mm), before);
    Report::new(&mm).check_invariants().unwrap();
}
