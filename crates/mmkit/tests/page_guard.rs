//! `PageGuard`: a guarded block is freed on drop, exactly once, and a
//! guard taken apart or freed by hand frees nothing more.

use mmkit::Blocks;
use mmkit::{FreeError, Gfp, MemoryMapBuilder, PageAllocator, Report};

fn free(mm: &PageAllocator) -> u64 {
    Report::new(mm).nr_free_pages() + Report::new(mm).nr_pcp_pages()
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
fn no_bare_pfn_call_frees_a_guarded_block() {
    // Before guards carried a tag, `free_pages(guard.pfn())` succeeded and
    // the guard's drop later freed whoever held the page next.
    for (lists, caches) in [(false, false), (true, false), (true, true)] {
        let mm = MemoryMapBuilder::with_memory(16 << 20).per_cpu_lists(lists).cpu_caches(caches).build().unwrap();
        let blocks = Blocks::new(&mm);
        let before = free(&mm);
        assert_eq!(mm.alloc_pages_guarded(Gfp::KERNEL, 1).unwrap().free(), Ok(()));
        assert_eq!(free(&mm), before);

        for order in [0, 3] {
            let guard = mm.alloc_pages_guarded(Gfp::KERNEL, order).unwrap();
            let pfn = guard.pfn();
            assert!(matches!(mm.free_pages(pfn, order), Err(FreeError::Owned { pfn: p, .. }) if p == pfn));
            assert!(matches!(mm.put_page(pfn), Err(FreeError::Owned { .. })));
            assert!(matches!(mm.free_frozen_pages(pfn, order), Err(FreeError::Owned { .. })));
            assert!(mm.free_pages_bulk(&[pfn]).is_err() || order != 0);
            assert_eq!(free(&mm), before - (1 << order), "nothing freed behind the guard");
            // Another layer's key cannot take it either.
            let key = blocks.new_owner_key().unwrap();
            assert!(matches!(blocks.take_back_block(&key, pfn, order), Err(FreeError::Owned { .. })));
            assert!(blocks.release_owner_key(key));
            assert_eq!(guard.free(), Ok(()));
            assert_eq!(free(&mm), before);
        }
        Report::new(&mm).check_invariants().unwrap();
    }
}

#[test]
fn a_page_freed_and_reallocated_is_not_freed_by_a_stale_guard() {
    // The old hole end to end: a guard's page freed by PFN, reallocated to
    // someone else, then the guard dropped. Now the first step is refused,
    // so the other holder keeps its page.
    let mm = MemoryMapBuilder::with_memory(16 << 20).cpu_caches(false).per_cpu_lists(false).build().unwrap();
    let guard = mm.alloc_pages_guarded(Gfp::KERNEL, 0).unwrap();
    assert!(mm.free_pages(guard.pfn(), 0).is_err());
    let other = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
    assert_ne!(other, guard.pfn());
    drop(guard);
    assert_eq!(mm.page_count(other), Ok(1), "the other holder's page is still allocated");
    mm.free_pages(other, 0).unwrap();
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn guards_share_one_tag_and_fail_cleanly_when_keys_hold_them_all() {
    let mm = MemoryMapBuilder::with_memory(16 << 20).build().unwrap();
    let blocks = Blocks::new(&mm);
    let keys: Vec<_> = std::iter::from_fn(|| blocks.new_owner_key().ok()).collect();
    assert_eq!(keys.len(), usize::from(mmkit::PageOwner::MAX));
    let before = free(&mm);
    assert_eq!(mm.alloc_pages_guarded(Gfp::KERNEL, 0).err(), Some(mmkit::AllocError::OwnerTagsExhausted));
    assert_eq!(free(&mm), before, "nothing allocated");
    for key in keys {
        assert!(blocks.release_owner_key(key));
    }
    let a = mm.alloc_pages_guarded(Gfp::KERNEL, 0).unwrap();
    let b = mm.alloc_pages_guarded(Gfp::KERNEL, 0).unwrap();
    assert_eq!(blocks.page_owner(a.pfn()), blocks.page_owner(b.pfn()));
    // The guards' tag stays taken: one fewer key for layers.
    let keys: Vec<_> = std::iter::from_fn(|| blocks.new_owner_key().ok()).collect();
    assert_eq!(keys.len(), usize::from(mmkit::PageOwner::MAX) - 1);
    drop((a, b));
    assert_eq!(free(&mm), before);
}

#[test]
fn threads_racing_for_the_first_guard_take_one_tag() {
    let mm = MemoryMapBuilder::with_memory(16 << 20).nr_cpus(2).build().unwrap();
    let owners: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let g = mm.alloc_pages_guarded(Gfp::KERNEL, 0).unwrap();
                    let owner = Blocks::new(&mm).page_owner(g.pfn());
                    g.free().unwrap();
                    owner
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(owners.iter().all(|o| o.is_some() && *o == owners[0]));
    let keys: Vec<_> = std::iter::from_fn(|| Blocks::new(&mm).new_owner_key().ok()).collect();
    assert_eq!(keys.len(), usize::from(mmkit::PageOwner::MAX) - 1, "losers gave their tags back");
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn guarded_bytes_are_the_guards_own() {
    let mm = MemoryMapBuilder::with_memory(8 << 20)
        .backing(mmkit::Backing::RealMemory(mmkit::HugePages::None))
        .build()
        .unwrap();
    let mut guards: Vec<_> = (0..64u8)
        .map(|i| {
            let mut g = mm.alloc_pages_guarded(Gfp::KERNEL | Gfp::ZERO, u32::from(i % 3)).unwrap();
            g.bytes_mut().unwrap().fill(i);
            g
        })
        .collect();
    // Free every other one; the rest keep their bytes.
    let mut i = 0u8;
    guards.retain(|_| {
        i += 1;
        i % 2 == 0
    });
    for g in &guards {
        let bytes = g.bytes().unwrap();
        assert_eq!(bytes.len(), 4096 << g.order());
        assert!(bytes.iter().all(|&b| b == bytes[0]));
    }
    let metadata_only = MemoryMapBuilder::with_memory(8 << 20).build().unwrap();
    assert!(metadata_only.alloc_pages_guarded(Gfp::KERNEL, 0).unwrap().bytes().is_none());
}
