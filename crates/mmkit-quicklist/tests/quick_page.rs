//! `QuickPage`: a page that came from a quicklist and was written only
//! through the handle goes back without a scan; a written one is restored
//! to its list's state, not scanned (mimalloc's `free_is_zero`).

use mmkit::Cpus;
use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder, PageAllocator, Report};
use mmkit_quicklist::Quicklists;
use std::sync::Arc;

fn real_map(cpus: usize) -> Arc<PageAllocator> {
    Arc::new(
        MemoryMapBuilder::with_memory(8 << 20)
            .backing(Backing::RealMemory(HugePages::None))
            .nr_cpus(cpus)
            .cpu_id_fn(|| 0)
            .build()
            .unwrap(),
    )
}

#[test]
fn a_clean_page_goes_back_as_it_is_and_a_written_one_is_restored() {
    let mm = real_map(1);
    let ql = Quicklists::new(Arc::clone(&mm), 2).unwrap();
    let ctor = |page: &mut [u8]| page.iter_mut().enumerate().for_each(|(i, b)| *b = (i % 251) as u8);
    let page = ql.alloc_page(1, Gfp::KERNEL, Some(&ctor)).unwrap();
    let pfn = page.pfn();
    assert!(!page.is_written());
    assert_eq!(ql.page_bytes(&page)[300], (300 % 251) as u8, "constructed");
    ql.free_quick_page(None, page).unwrap();
    assert_eq!(ql.quicklist_size(0, 1), Some(1));
    let mut page = ql.alloc_page(1, Gfp::KERNEL, Some(&ctor)).unwrap();
    assert_eq!(page.pfn(), pfn, "the cached page again");
    ql.page_bytes_mut(&mut page)[300] = 0;
    ql.page_bytes_mut(&mut page)[4095] ^= 0xff;
    assert!(page.is_written());
    ql.free_quick_page(None, page).unwrap();
    let page = ql.alloc_page(1, Gfp::KERNEL, None).unwrap();
    assert_eq!(page.pfn(), pfn);
    let bytes = ql.page_bytes(&page);
    assert!(bytes.iter().enumerate().all(|(i, &b)| b == (i % 251) as u8), "restored to the constructed state");
    ql.free_quick_page(None, page).unwrap();
    // A zero list restores zeroes.
    let mut page = ql.alloc_page(0, Gfp::KERNEL, None).unwrap();
    ql.page_bytes_mut(&mut page).fill(0x5a);
    ql.free_quick_page(None, page).unwrap();
    let page = ql.alloc_page(0, Gfp::KERNEL, None).unwrap();
    assert!(ql.page_bytes(&page).iter().all(|&b| b == 0));
    ql.free_quick_page(None, page).unwrap();
    assert_eq!(ql.stats(0).cached + ql.stats(1).cached, 5);
    drop(ql);
    Cpus::new(&mm).drain_all_pages();
    Report::new(&mm).check_invariants().unwrap();
}

/// The free of a clean page trusts the handle: nothing reads the page.
/// Bytes changed behind the handle's back (only `unsafe` code can) stay
/// as they are, which is what shows that no scan ran.
#[test]
fn a_clean_page_is_not_scanned() {
    let mm = real_map(1);
    let ql = Quicklists::new(Arc::clone(&mm), 1).unwrap();
    let page = ql.alloc_page(0, Gfp::KERNEL, None).unwrap();
    let addr = mm.page_address(page.pfn()).unwrap();
    // SAFETY: the test holds the page and no reference to its bytes is
    // alive; one byte of it is written.
    unsafe { addr.as_ptr().add(17).write(9) };
    ql.free_quick_page(None, page).unwrap();
    assert_eq!(ql.stats(0).bypassed, 0, "cached, not scanned and refused");
    let page = ql.alloc_page(0, Gfp::KERNEL, None).unwrap();
    assert_eq!(ql.page_bytes(&page)[17], 9);
    let mut page = page;
    ql.page_bytes_mut(&mut page)[17] = 0;
    ql.free_quick_page(None, page).unwrap();
}

#[test]
fn a_pinned_handle_serves_quick_pages_without_lock_or_scan() {
    let mm = real_map(2);
    let ql = Quicklists::new(Arc::clone(&mm), 1).unwrap();
    let mut cpu = ql.pin_cpu(1).unwrap();
    let first = cpu.alloc_page(0, Gfp::KERNEL, None).unwrap();
    let pfn = first.pfn();
    cpu.free_quick_page(None, first).unwrap();
    for round in 0..100u8 {
        let mut page = cpu.alloc_page(0, Gfp::KERNEL, None).unwrap();
        assert_eq!(page.pfn(), pfn, "the hit");
        assert!(cpu.page_bytes(&page).iter().all(|&b| b == 0));
        if round % 3 == 0 {
            cpu.page_bytes_mut(&mut page)[round as usize] = round | 1;
        }
        cpu.free_quick_page(None, page).unwrap();
    }
    let stats = cpu.stats(0).unwrap();
    assert_eq!((stats.hits, stats.misses, stats.cached), (100, 1, 101));
    // A page of another set is not cached here: it goes to the allocator.
    let other = Quicklists::new(Arc::clone(&mm), 1).unwrap();
    let foreign = other.alloc_page(0, Gfp::KERNEL, None).unwrap();
    cpu.free_quick_page(None, foreign).unwrap();
    assert_eq!(cpu.stats(0).unwrap().cached, 101);
    drop(cpu);
    drop((ql, other));
    Cpus::new(&mm).drain_all_pages();
    Report::new(&mm).check_invariants().unwrap();
    let managed: u64 = mm.zones().iter().map(|z| z.managed_pages()).sum();
    assert_eq!(Report::new(&mm).nr_free_pages(), managed);
}
