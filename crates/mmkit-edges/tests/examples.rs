//! The examples of issue 44, one test each (each failed on bb93be1, the
//! base of that work): the instances the enumerating tests
//! (`pfn_calls.rs`, `panics.rs`, `reentry.rs`) generalise. A trait impl of
//! the caller's that lends the frame adapter's key is a compile error now
//! (`PageSource` is sealed: its `compile_fail` doctest).

use mmkit::Blocks;
use mmkit::Cpus;
use mmkit::{
    Backing, BlockStack, Contig, CopyMigrator, FreeError, Gfp, HugePages, MemoryMapBuilder, MigrateType, PageAllocator,
    PageError, PageFlags, Pfn, Report, X86Frames,
};
use mmkit_edges::{catch_scripted, quiet_scripted_panics, within, Script};
use mmkit_quicklist::Quicklists;
use mmkit_zsmalloc::{ZsError, ZsPool};
use std::sync::Arc;
use x86_64::structures::paging::{FrameAllocator, PhysFrame, Size4KiB};

fn real_map(bytes: u64) -> Arc<PageAllocator> {
    Arc::new(MemoryMapBuilder::with_memory(bytes).backing(Backing::RealMemory(HugePages::None)).build().unwrap())
}

#[test]
fn get_page_takes_no_reference_on_a_frame_or_a_quicklist_page() {
    let mm = real_map(64 << 20);
    let mut frames = X86Frames::new(&*mm, Gfp::KERNEL).unwrap();
    let frame: PhysFrame<Size4KiB> = frames.allocate_frame().unwrap();
    let pfn = Pfn(frame.start_address().as_u64() >> 12);
    // Was Ok(2): a reference nobody could drop, and the adapter's free
    // failed for ever.
    assert!(matches!(mm.get_page(pfn), Err(PageError::Owned { .. })));
    assert!(matches!(mm.put_page(pfn), Err(FreeError::Owned { .. })));
    // SAFETY: nothing maps the frame.
    unsafe { frames.try_deallocate(frame) }.unwrap();
    frames.into_inner();

    let ql = Quicklists::new(mm.clone(), 1).unwrap();
    let page = ql.quicklist_alloc(0, Gfp::KERNEL, None).unwrap();
    assert!(matches!(mm.get_page(page), Err(PageError::Owned { .. })));
    ql.quicklist_free_page(0, None, page).unwrap();
    drop(ql);
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn flags_and_private_words_of_owned_pages_are_their_owners() {
    let mm = real_map(64 << 20);
    // A guard: its free reported a bad page and leaked it.
    let guard = mm.alloc_pages_guarded(Gfp::KERNEL, 0).unwrap();
    assert!(matches!(mm.set_page_flags(guard.pfn(), PageFlags::LRU), Err(PageError::Owned { .. })));
    assert!(matches!(mm.set_page_private(guard.pfn(), 7), Err(PageError::Owned { .. })));
    guard.free().unwrap();
    // A contiguous range.
    let key = Blocks::new(&mm).new_owner_key().unwrap();
    let contig = Contig::new(&mm);
    let start = Pfn(mm.start_pfn().0 + 4096);
    let range = contig.alloc_contig_block(&key, start, Pfn(start.0 + 8), MigrateType::Movable, Gfp::KERNEL).unwrap();
    assert!(matches!(mm.set_page_flags(Pfn(start.0 + 3), PageFlags::LRU), Err(PageError::Owned { .. })));
    assert!(matches!(mm.set_page_private(Pfn(start.0 + 3), 7), Err(PageError::Owned { .. })));
    assert_eq!(contig.free_contig_block(range).unwrap().freed, 8);
    // A zspage's page.
    let pool = ZsPool::zs_create_pool("flags", mm.clone()).unwrap();
    let handle = pool.zs_malloc_copy(&[9; 300], Gfp::NOIO, 0).unwrap();
    let page = (mm.start_pfn().0..mm.end_pfn().0)
        .map(Pfn)
        .find(|&p| Blocks::new(&mm).page_owner(p) == Some(pool.owner()))
        .unwrap();
    assert!(matches!(mm.set_page_flags(page, PageFlags::LRU), Err(PageError::Owned { .. })));
    assert!(matches!(mm.set_page_private(page, 7), Err(PageError::Owned { .. })));
    pool.zs_free(handle).map_err(|(e, _)| e).unwrap();
    drop(pool);
    assert_eq!(Report::new(&mm).stats().bad_pages, 0, "no owner's free found a bad page");
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn a_panicking_copy_migrator_leaves_no_pageblock_isolated() {
    quiet_scripted_panics();
    let script = Arc::new(Script::panic_at(1));
    let tripwire = script.clone();
    let mm = MemoryMapBuilder::with_memory(64 << 20)
        .backing(Backing::RealMemory(HugePages::None))
        .migrator(CopyMigrator::new(move |_, _, _| tripwire.tick()))
        .build()
        .unwrap();
    let before = Report::new(&mm).nr_free_pages() + Report::new(&mm).nr_pcp_pages();
    let page = mm.alloc_pages(Gfp::HIGHUSER_MOVABLE, 0).unwrap();
    let pageblock = 1u64 << mm.geometry().pageblock_order;
    let start = Pfn(page.0 & !(pageblock - 1));
    let contig = Contig::new(&mm);
    assert!(catch_scripted(|| {
        let _ = contig.alloc_contig_range(start, Pfn(start.0 + pageblock), MigrateType::Movable, Gfp::KERNEL);
    }));
    // Was: the pageblock left isolated, its free pages out of reach.
    Report::new(&mm).check_invariants().unwrap();
    assert_ne!(Report::new(&mm).pageblock_migratetype(start), Some(MigrateType::Isolate));
    assert_eq!(mm.page_count(page), Ok(1), "the move was undone: the page is where it was, with its reference");
    mm.free_pages(page, 0).unwrap();
    Cpus::new(&mm).drain_all_pages();
    assert_eq!(Report::new(&mm).nr_free_pages() + Report::new(&mm).nr_pcp_pages(), before);
    // The range can be collected now.
    let tripwire_spent = script.calls();
    contig.alloc_contig_range(start, Pfn(start.0 + pageblock), MigrateType::Movable, Gfp::KERNEL).unwrap();
    contig.free_contig_range(start, pageblock).unwrap();
    assert_eq!(tripwire_spent, 1);
}

#[test]
fn a_panicking_pinned_quicklist_constructor_keeps_the_handles_record() {
    quiet_scripted_panics();
    let mm = real_map(64 << 20);
    let before = Report::new(&mm).nr_free_pages() + Report::new(&mm).nr_pcp_pages();
    let ql = Quicklists::new(mm.clone(), 1).unwrap();
    let mut cpu = ql.pin_cpu(0).unwrap();
    let held = cpu.alloc(0, Gfp::KERNEL, None).unwrap();
    let script = Script::panic_at(1);
    let ctor = |_: &mut [u8]| script.tick();
    assert!(catch_scripted(|| {
        let _ = cpu.alloc(0, Gfp::KERNEL, Some(&ctor));
    }));
    // Was DoubleFree: the handle had lost its record of `held`.
    cpu.free_page(0, None, held).unwrap();
    drop(cpu);
    drop(ql);
    Report::new(&mm).check_invariants().unwrap();
    Cpus::new(&mm).drain_all_pages();
    assert_eq!(
        Report::new(&mm).nr_free_pages() + Report::new(&mm).nr_pcp_pages(),
        before,
        "every page back once the set is gone"
    );
}

#[test]
fn a_read_closure_that_writes_its_own_class_gets_an_error_not_a_hang() {
    let mm = real_map(64 << 20);
    let pool = Arc::new(ZsPool::zs_create_pool("reenter", mm).unwrap());
    let a = pool.zs_malloc_copy(&[1; 500], Gfp::NOIO, 0).unwrap();
    let b = pool.zs_malloc_copy(&[2; 500], Gfp::NOIO, 0).unwrap();
    let (pool2, b) = within("zs_obj_read_with re-entry", 20, move || {
        let got = pool.zs_obj_read_with(&a, &mut [0; 4096], |bytes| {
            assert_eq!(bytes[0], 1);
            // Was: waits for ever on the class lock the read holds.
            pool.zs_obj_write(&b, &[3; 10])
        });
        assert_eq!(got, Ok(Err(ZsError::Reentered { class: pool.zs_lookup_class_index(500) })));
        pool.zs_free(a).map_err(|(e, _)| e).unwrap();
        (pool, b)
    });
    // Outside the closure the write works.
    pool2.zs_obj_write(&b, &[3; 10]).unwrap();
    pool2.zs_free(b).map_err(|(e, _)| e).unwrap();
    pool2.check_invariants().unwrap();
}

#[test]
fn a_refused_zs_free_hands_the_handle_back() {
    let mm = real_map(64 << 20);
    let a = ZsPool::zs_create_pool("a", mm.clone()).unwrap();
    let b = ZsPool::zs_create_pool("b", mm.clone()).unwrap();
    let h = a.zs_malloc_copy(&[1; 100], Gfp::NOIO, 0).unwrap();
    let (e, h) = b.zs_free(h).unwrap_err();
    assert!(matches!(e, ZsError::InvalidHandle(_)));
    let (e, h) = b.zs_free_deferred(h).unwrap_err();
    assert!(matches!(e, ZsError::InvalidHandle(_)));
    // Was: dropped with the error; the object leaked until `a` went.
    a.zs_free(h).map_err(|(e, _)| e).unwrap();
    assert_eq!(a.zs_get_total_pages(), 0);
}

#[test]
fn sizes_a_caller_drives_are_refused_not_aborted() {
    let mm = MemoryMapBuilder::with_memory(16 << 20).build().unwrap();
    let key = Blocks::new(&mm).new_owner_key().unwrap();
    // Was: "memory allocation failed", the process aborted.
    let stack = BlockStack::with_capacity(&key, 0, 1 << 40);
    assert!(stack.is_empty());
    assert!(BlockStack::try_with_capacity(&key, 0, 1 << 40).is_err());
    assert!(BlockStack::try_with_capacity(&key, 0, usize::MAX).is_err());

    let mm = real_map(64 << 20);
    let file = mmkit_zswap::SwapFile::create_temp(1 << 30).unwrap();
    // Was: 60 GB of tree entries asked of the heap, the process aborted.
    let got = mmkit_zswap::Zswap::new(mm, file, mmkit_zswap::ZswapParams::default());
    assert!(matches!(got, Err(mmkit_zswap::ZswapError::TooManySlots(n)) if n == 1 << 30));
}

#[test]
fn no_owner_tag_left_is_named_as_such() {
    let mm = real_map(64 << 20);
    let mut keys = Vec::new();
    while let Ok(key) = Blocks::new(&mm).new_owner_key() {
        keys.push(key);
    }
    let Err(zs) = ZsPool::zs_create_pool("late", mm.clone()) else { panic!("a pool without an owner tag") };
    assert_eq!(zs, ZsError::OwnerTagsExhausted);
    let text = zs.to_string();
    assert!(text.contains("owner tag") && !text.contains("pool id"), "{text}");
    let file = mmkit_zswap::SwapFile::create_temp(64).unwrap();
    let zswap = mmkit_zswap::Zswap::new(mm.clone(), file, mmkit_zswap::ZswapParams::default()).unwrap_err();
    assert!(zswap.to_string().contains("owner tag"), "{zswap}");
    let config = mmkit_zram::ZramConfig { disksize: 1 << 20, ..mmkit_zram::ZramConfig::default() };
    let Err(zram) = mmkit_zram::Zram::new(mm.clone(), config) else { panic!("a zram without an owner tag") };
    assert!(zram.to_string().contains("owner tag"), "{zram}");
    for key in keys {
        Blocks::new(&mm).release_owner_key(key);
    }
}
