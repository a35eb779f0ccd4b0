//! Every page on a list is in the list's state, in every build. A page
//! given back by PFN (or as a lent block) is restored to that state before
//! it is cached, since nothing says what its holder wrote (issue 37:
//! "a page whose state is unknown is restored, not scanned"); before,
//! such a free read the page and refused one that differed. The `unsafe`
//! `*_in_state` frees take the caller's word, and debug builds check it.
//! (Issue 22, finding 6, is what this protects: a release build once
//! cached a dirty page on a zero list and handed it out as zeroed, which a
//! page table then read as garbage entries.)

use mmkit::Blocks;
use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder, PageAllocator, Pfn, Report};
use mmkit_quicklist::Quicklists;

fn real_map() -> Arc<PageAllocator> {
    Arc::new(
        MemoryMapBuilder::with_memory(16 << 20)
            .backing(Backing::RealMemory(HugePages::None))
            .nr_cpus(1)
            .cpu_id_fn(|| 0)
            .hooks(mmkit::QuietHooks)
            .build()
            .unwrap(),
    )
}

mod common;
use common::write_byte;
use std::sync::Arc;

fn page(mm: &PageAllocator, pfn: Pfn) -> Vec<u8> {
    common::with_page(mm, pfn, |bytes| bytes.to_vec())
}

#[test]
fn a_dirty_page_freed_to_a_zero_list_is_zeroed_and_cached() {
    let mm = real_map();
    let ql = Quicklists::new(Arc::clone(&mm), 1).unwrap();
    let p = ql.quicklist_alloc(0, Gfp::KERNEL, None).unwrap();
    write_byte(&mm, p, 0, 0x11);
    write_byte(&mm, p, 4095, 0x5a);
    let bad = Report::new(&mm).stats().bad_pages;
    ql.quicklist_free_page(0, None, p).unwrap();
    assert_eq!(ql.quicklist_total_size(), 1, "the page was cached");
    assert_eq!(Report::new(&mm).stats().bad_pages, bad);
    let q = ql.quicklist_alloc(0, Gfp::KERNEL, None).unwrap();
    assert_eq!(q, p);
    assert!(page(&mm, q).iter().all(|&b| b == 0), "a zero list hands out zeroed pages only");
    ql.quicklist_free_page(0, None, q).unwrap();
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn a_page_freed_to_a_constructor_list_gets_the_constructed_bytes_back() {
    let mm = real_map();
    let ql = Quicklists::new(Arc::clone(&mm), 2).unwrap();
    let ctor = |page: &mut [u8]| page[8] = 0xee;
    let p = ql.quicklist_alloc(1, Gfp::KERNEL, Some(&ctor)).unwrap();
    ql.quicklist_free_page(1, None, p).unwrap();
    let p = ql.quicklist_alloc(1, Gfp::KERNEL, Some(&ctor)).unwrap();
    write_byte(&mm, p, 8, 0);
    write_byte(&mm, p, 100, 7);
    ql.quicklist_free_page(1, None, p).unwrap();
    let again = ql.quicklist_alloc(1, Gfp::KERNEL, Some(&ctor)).unwrap();
    assert_eq!(again, p);
    let bytes = page(&mm, again);
    assert_eq!((bytes[8], bytes[100]), (0xee, 0), "the constructor's state, not the caller's writes");
    assert_eq!(bytes.iter().filter(|&&b| b != 0).count(), 1);
    // A constructed page freed to the zero list is zeroed there.
    ql.quicklist_free_page(0, None, again).unwrap();
    let zero = ql.quicklist_alloc(0, Gfp::KERNEL, None).unwrap();
    assert_eq!(zero, again);
    assert!(page(&mm, zero).iter().all(|&b| b == 0));
    ql.quicklist_free_page(0, None, zero).unwrap();
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn a_lent_block_is_restored_too() {
    let mm = real_map();
    let ql = Quicklists::new(Arc::clone(&mm), 1).unwrap();
    let mut block = ql.quicklist_alloc_block(0, Gfp::KERNEL, None).unwrap();
    let pfn = block.pfn();
    Blocks::new(&mm).block_bytes_mut(&mut block).unwrap().fill(0xab);
    ql.quicklist_free_block(0, None, block).unwrap();
    let q = ql.quicklist_alloc(0, Gfp::KERNEL, None).unwrap();
    assert_eq!(q, pfn);
    assert!(page(&mm, q).iter().all(|&b| b == 0));
    ql.quicklist_free_page(0, None, q).unwrap();
}

#[test]
fn the_pinned_hit_path_restores_too() {
    let mm = real_map();
    let ql = Quicklists::new(Arc::clone(&mm), 1).unwrap();
    let mut cpu = ql.pin_cpu(0).unwrap();
    let p = cpu.alloc(0, Gfp::KERNEL, None).unwrap();
    cpu.free_page(0, None, p).unwrap();
    let p = cpu.alloc(0, Gfp::KERNEL, None).unwrap();
    // The caller writes the page through its address, as a page table does.
    let addr = mm.page_address(p).unwrap();
    // SAFETY: the page is allocated to this test (handed out by the pinned
    // handle, not freed), 4096 bytes long, and nothing else touches it.
    unsafe { addr.as_ptr().add(17).write(1) };
    cpu.free_page(0, None, p).unwrap();
    let q = cpu.alloc(0, Gfp::KERNEL, None).unwrap();
    assert_eq!(q, p, "the hit's page, cached again");
    let addr = mm.page_address(q).unwrap();
    // SAFETY: as above; only read.
    let bytes = unsafe { std::slice::from_raw_parts(addr.as_ptr(), 4096) };
    assert!(bytes.iter().all(|&b| b == 0), "a zero list hands out zeroed pages only");
    cpu.free_page(0, None, q).unwrap();
}

#[test]
fn a_kept_promise_caches_the_page_as_it_is() {
    let mm = real_map();
    let ql = Quicklists::new(Arc::clone(&mm), 2).unwrap();
    let ctor = |page: &mut [u8]| page[8] = 0xee;
    let p = ql.quicklist_alloc(1, Gfp::KERNEL, Some(&ctor)).unwrap();
    // SAFETY: the page is as the constructor left it, list 1's state.
    unsafe { ql.quicklist_free_page_in_state(1, None, p) }.unwrap();
    assert_eq!(ql.quicklist_total_size(), 1);
    let mut cpu = ql.pin_cpu(0).unwrap();
    let q = cpu.alloc(1, Gfp::KERNEL, Some(&ctor)).unwrap();
    assert_eq!(q, p);
    // SAFETY: untouched since the constructor wrote it.
    unsafe { cpu.free_page_in_state(1, None, q) }.unwrap();
    drop(cpu);
    assert_eq!(ql.quicklist_total_size(), 1);
    assert_eq!(page(&mm, p)[8], 0xee);
    // Wrong input is still refused: a second free of the cached page.
    // SAFETY: the promise is about bytes; the PFN's error is the point.
    assert!(unsafe { ql.quicklist_free_page_in_state(1, None, p) }.is_err());
    assert_eq!(ql.quicklist_total_size(), 1);
    Report::new(&mm).check_invariants().unwrap();
}

/// A broken promise is caught where it can be: in debug builds the
/// trusting frees still compare the page and refuse one that differs.
#[cfg(debug_assertions)]
#[test]
fn a_broken_promise_is_refused_in_debug_builds() {
    use mmkit_quicklist::QuicklistError;
    let mm = real_map();
    let ql = Quicklists::new(Arc::clone(&mm), 1).unwrap();
    let p = ql.quicklist_alloc(0, Gfp::KERNEL, None).unwrap();
    write_byte(&mm, p, 4095, 0x5a);
    // SAFETY: deliberately broken, to see the debug check; the page is
    // refused and freed, so it is never handed out as zeroed.
    let result = unsafe { ql.quicklist_free_page_in_state(0, None, p) };
    assert_eq!(result, Err(QuicklistError::WrongState { pfn: p, offset: 4095 }));
    assert_eq!(ql.quicklist_total_size(), 0, "the dirty page was not cached");
    let mut cpu = ql.pin_cpu(0).unwrap();
    let q = cpu.alloc(0, Gfp::KERNEL, None).unwrap();
    write_byte(&mm, q, 17, 1);
    // SAFETY: as above, on the pinned hit path.
    let result = unsafe { cpu.free_page_in_state(0, None, q) };
    assert_eq!(result, Err(QuicklistError::WrongState { pfn: q, offset: 17 }));
    drop(cpu);
    assert_eq!(ql.quicklist_total_size(), 0);
    Report::new(&mm).check_invariants().unwrap();
}
