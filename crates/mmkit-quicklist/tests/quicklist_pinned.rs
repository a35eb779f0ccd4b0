//! Tests of the pinned handle's hand-out: a page it hands out stays with
//! it (frozen, no atomic on the pair) until it is freed there, handed over
//! or the handle is dropped; every other free of it is refused unchanged.

use mmkit::Blocks;
use mmkit::{Backing, FreeError, Gfp, HugePages, MemoryMapBuilder, PageAllocator, Pfn};
use mmkit::{Cpus, Report};
use mmkit_quicklist::{QuicklistError, Quicklists};
use std::sync::Arc;

fn real_map(cpus: usize) -> Arc<PageAllocator> {
    Arc::new(
        MemoryMapBuilder::with_memory(16 << 20)
            .backing(Backing::RealMemory(HugePages::None))
            .nr_cpus(cpus)
            .cpu_id_fn(|| 0)
            .build()
            .unwrap(),
    )
}

/// Free + cached + held pages add up to what was free at the start.
fn assert_conserved(mm: &PageAllocator, ql: &Quicklists, start_free: u64, held: u64) {
    Cpus::new(mm).drain_all_pages();
    assert_eq!(Report::new(mm).nr_free_pages() + ql.quicklist_total_size() + held, start_free);
}

#[test]
fn the_hit_pair_reuses_the_top_page_and_counts_it() {
    let mm = real_map(1);
    let ql = Quicklists::new(Arc::clone(&mm), 1).unwrap();
    let mut cpu = ql.pin_cpu(0).unwrap();
    let a = cpu.alloc(0, Gfp::KERNEL, None).unwrap();
    cpu.free_page(0, None, a).unwrap();
    for _ in 0..10 {
        let p = cpu.alloc(0, Gfp::KERNEL, None).unwrap();
        assert_eq!(p, a);
        assert_eq!(ql.quicklist_size(0, 0), Some(0));
        assert_eq!(cpu.nr_out(), 1);
        cpu.free_page(0, None, p).unwrap();
        assert_eq!(ql.quicklist_size(0, 0), Some(1));
    }
    assert_eq!(cpu.stats(0).map(|s| (s.hits, s.misses, s.cached)), Some((10, 1, 11)));
    assert_eq!(cpu.nr_out(), 0);
}

#[test]
fn pinned_pages_are_refused_elsewhere_until_handed_over() {
    let mm = real_map(2);
    let start = Report::new(&mm).nr_free_pages();
    let ql = Quicklists::new(Arc::clone(&mm), 1).unwrap();
    let mut cpu1 = ql.pin_cpu(1).unwrap();
    let p = cpu1.alloc(0, Gfp::KERNEL, None).unwrap();
    let free = Report::new(&mm).nr_free_pages();
    // The shared API (on CPU 0) and the allocator refuse it, changing nothing.
    assert_eq!(ql.quicklist_free_page(0, None, p), Err(QuicklistError::PinnedCpu(p)));
    assert_eq!(mm.free_pages(p, 0), Err(FreeError::Owned { pfn: p, owner: ql.owner().unwrap() }));
    let thief = Blocks::new(&mm).new_owner_key().unwrap();
    assert!(Blocks::new(&mm).take_back_block(&thief, p, 0).is_err(), "another key cannot take it");
    {
        let mut cpu0 = ql.pin_cpu(0).unwrap();
        assert_eq!(cpu0.free_page(0, None, p), Err(QuicklistError::PinnedCpu(p)));
        assert_eq!(cpu0.hand_over(p), Err(QuicklistError::NotHeld(p)));
    }
    assert_eq!(Report::new(&mm).nr_free_pages(), free);
    assert_eq!(ql.quicklist_total_size(), 0);
    assert_eq!(cpu1.nr_out(), 1);
    // Handed over, it is a page of the shared API.
    cpu1.hand_over(p).unwrap();
    assert_eq!(cpu1.nr_out(), 0);
    // Refcount 1 again: the handle takes it back as the shared API does.
    cpu1.free_page(0, None, p).unwrap();
    assert_eq!(ql.quicklist_size(1, 0), Some(1));
    drop(cpu1);
    assert_conserved(&mm, &ql, start, 0);
}

#[test]
fn a_handed_over_page_is_freed_by_any_cpu() {
    let mm = real_map(2);
    let start = Report::new(&mm).nr_free_pages();
    let ql = Quicklists::new(Arc::clone(&mm), 1).unwrap();
    let mut cpu1 = ql.pin_cpu(1).unwrap();
    let p = cpu1.alloc(0, Gfp::KERNEL, None).unwrap();
    cpu1.hand_over(p).unwrap();
    assert_eq!(cpu1.hand_over(p), Err(QuicklistError::NotHeld(p)));
    ql.quicklist_free_page(0, None, p).unwrap(); // CPU 0's list
    assert_eq!(ql.quicklist_size(0, 0), Some(1));
    assert_eq!(ql.quicklist_free_page(0, None, p), Err(QuicklistError::Free(FreeError::DoubleFree(p))));
    drop(cpu1);
    assert_conserved(&mm, &ql, start, 0);
}

#[test]
fn double_frees_to_a_pinned_handle_change_nothing() {
    let mm = real_map(1);
    let ql = Quicklists::new(Arc::clone(&mm), 2).unwrap();
    let mut cpu = ql.pin_cpu(0).unwrap();
    let p = cpu.alloc(0, Gfp::KERNEL, None).unwrap();
    cpu.free_page(0, None, p).unwrap();
    let free = Report::new(&mm).nr_free_pages();
    for nr in 0..2 {
        assert_eq!(cpu.free_page(nr, None, p), Err(QuicklistError::Free(FreeError::DoubleFree(p))));
    }
    assert_eq!(cpu.free_page(2, None, p), Err(QuicklistError::NoSuchList { nr: 2, nr_quick: 2 }));
    let far = Pfn(mm.end_pfn().0 + 5);
    assert_eq!(cpu.free_page(0, None, far), Err(QuicklistError::Free(FreeError::OutOfRange(far))));
    assert_eq!(Report::new(&mm).nr_free_pages(), free);
    assert_eq!(ql.quicklist_size(0, 0), Some(1));
    assert_eq!(ql.quicklist_size(0, 1), Some(0));
    // Still usable, and the list-1 free of a list-0 page is cached on list 1.
    let q = cpu.alloc(0, Gfp::KERNEL, None).unwrap();
    assert_eq!(q, p);
    cpu.free_page(1, None, q).unwrap();
    assert_eq!((ql.quicklist_size(0, 0), ql.quicklist_size(0, 1)), (Some(0), Some(1)));
}

#[test]
fn many_pages_out_in_any_order_come_back() {
    let mm = real_map(1);
    let start = Report::new(&mm).nr_free_pages();
    let ql = Quicklists::new(Arc::clone(&mm), 2).unwrap();
    let mut cpu = ql.pin_cpu(0).unwrap();
    // More than the recent window, from both lists.
    let mut out: Vec<(usize, Pfn)> = (0..100).map(|i| (i % 2, cpu.alloc(i % 2, Gfp::KERNEL, None).unwrap())).collect();
    assert_eq!(cpu.nr_out(), 100);
    // Free in a scrambled order, each to the list it came from.
    let mut x = 12345u64;
    while !out.is_empty() {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let (nr, pfn) = out.swap_remove((x >> 33) as usize % out.len());
        cpu.free_page(nr, None, pfn).unwrap();
        assert_eq!(cpu.free_page(nr, None, pfn), Err(QuicklistError::Free(FreeError::DoubleFree(pfn))));
    }
    assert_eq!(cpu.nr_out(), 0);
    assert_eq!(ql.quicklist_total_size(), 100);
    // Trim and drain see only cached pages, also with pages out.
    let held: Vec<Pfn> = (0..20).map(|_| cpu.alloc(0, Gfp::KERNEL, None).unwrap()).collect();
    assert_eq!(cpu.drain(0, None).unwrap(), 30);
    assert_eq!(cpu.nr_out(), 20);
    for &p in held.iter().rev() {
        cpu.free_page(0, None, p).unwrap();
    }
    assert_eq!(ql.quicklist_size(0, 0), Some(20));
    drop(cpu);
    assert_eq!(ql.quicklist_total_size(), 70);
    assert_conserved(&mm, &ql, start, 0);
}

#[test]
fn dropping_the_handle_hands_over_what_is_out() {
    let mm = real_map(1);
    let start = Report::new(&mm).nr_free_pages();
    let ql = Quicklists::new(Arc::clone(&mm), 1).unwrap();
    let mut cpu = ql.pin_cpu(0).unwrap();
    let pages: Vec<Pfn> = (0..40).map(|_| cpu.alloc(0, Gfp::KERNEL, None).unwrap()).collect();
    cpu.free_page(0, None, pages[0]).unwrap();
    drop(cpu);
    assert_eq!(ql.cached_pages(0, 0), Some(vec![pages[0]]));
    for &p in &pages[1..] {
        ql.quicklist_free_page(0, None, p).unwrap();
    }
    assert_eq!(ql.quicklist_total_size(), 40);
    assert_conserved(&mm, &ql, start, 0);
    // A new handle sees the cached pages and hands them out LIFO.
    let mut cpu = ql.pin_cpu(0).unwrap();
    assert_eq!(cpu.alloc(0, Gfp::KERNEL, None).unwrap(), pages[39]);
}

#[test]
fn blocks_from_a_pinned_handle_are_the_callers() {
    let mm = real_map(1);
    let ql = Quicklists::new(Arc::clone(&mm), 1).unwrap();
    let mut cpu = ql.pin_cpu(0).unwrap();
    let p = cpu.alloc(0, Gfp::KERNEL, None).unwrap();
    cpu.free_page(0, None, p).unwrap();
    let out = cpu.alloc(0, Gfp::KERNEL, None).unwrap(); // p, out
    let mut block = cpu.alloc_block(0, Gfp::KERNEL, None).unwrap(); // a fresh page
    assert_ne!(block.pfn(), out);
    assert!(Blocks::new(&mm).block_bytes_mut(&mut block).unwrap().iter().all(|&b| b == 0));
    assert_eq!(cpu.nr_out(), 1);
    // The shared API runs on CPU 0, which this handle pins: it bypasses the lists.
    ql.quicklist_free_block(0, None, block).unwrap();
    assert_eq!(ql.quicklist_size(0, 0), Some(0));
    cpu.free_page(0, None, out).unwrap();
}
