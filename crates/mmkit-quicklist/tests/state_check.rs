//! A page freed onto a list whose state it does not have is refused in
//! every build, release included (issue 22, finding 6): before, release
//! builds cached a dirty page on a zero list and handed it out as zeroed,
//! which a page table then read as garbage entries.

use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder, PageAllocator, Pfn, Report};
use mmkit_quicklist::{QuicklistError, Quicklists};

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
fn a_dirty_page_is_refused_by_a_zero_list() {
    let mm = real_map();
    let ql = Quicklists::new(Arc::clone(&mm), 1).unwrap();
    let p = ql.quicklist_alloc(0, Gfp::KERNEL, None).unwrap();
    write_byte(&mm, p, 4095, 0x5a);
    assert_eq!(ql.quicklist_free_page(0, None, p), Err(QuicklistError::WrongState { pfn: p, offset: 4095 }));
    assert_eq!(ql.quicklist_total_size(), 0, "the dirty page was not cached");
    let q = ql.quicklist_alloc(0, Gfp::KERNEL, None).unwrap();
    assert!(page(&mm, q).iter().all(|&b| b == 0), "a zero list hands out zeroed pages only");
    ql.quicklist_free_page(0, None, q).unwrap();
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn a_page_that_differs_from_the_constructor_state_is_refused() {
    let mm = real_map();
    let ql = Quicklists::new(Arc::clone(&mm), 2).unwrap();
    let ctor = |page: &mut [u8]| page[8] = 0xee;
    let p = ql.quicklist_alloc(1, Gfp::KERNEL, Some(&ctor)).unwrap();
    ql.quicklist_free_page(1, None, p).unwrap();
    let p = ql.quicklist_alloc(1, Gfp::KERNEL, Some(&ctor)).unwrap();
    write_byte(&mm, p, 8, 0);
    assert_eq!(ql.quicklist_free_page(1, None, p), Err(QuicklistError::WrongState { pfn: p, offset: 8 }));
    // A constructed page is not in the zero list's state either.
    let c = ql.quicklist_alloc(1, Gfp::KERNEL, Some(&ctor)).unwrap();
    assert_eq!(ql.quicklist_free_page(0, None, c), Err(QuicklistError::WrongState { pfn: c, offset: 8 }));
    assert_eq!(ql.quicklist_total_size(), 0);
}

#[test]
fn the_pinned_hit_path_checks_too() {
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
    assert_eq!(cpu.free_page(0, None, p), Err(QuicklistError::WrongState { pfn: p, offset: 17 }));
    let q = cpu.alloc(0, Gfp::KERNEL, None).unwrap();
    let addr = mm.page_address(q).unwrap();
    // SAFETY: as above; only read.
    let bytes = unsafe { std::slice::from_raw_parts(addr.as_ptr(), 4096) };
    assert!(bytes.iter().all(|&b| b == 0), "a zero list hands out zeroed pages only");
    cpu.free_page(0, None, q).unwrap();
}
