//! A panic in a caller's closure leaves every page owned by someone or
//! free. The documented case: inside a burst, a free through the map
//! itself needs the zone the burst holds, so it panics instead of waiting
//! for itself. It used to panic after it had prepared the block for the
//! free lists: the block was then neither allocated nor free, its pages
//! gone, and `check_invariants` still said Ok. Now the block is parked for
//! the burst, which frees it as it unwinds, and the checker finds a page
//! in neither state.

use mmkit::Blocks;
use mmkit::Cpus;
use mmkit::{Gfp, MemoryMapBuilder, PageAllocator, Pfn, Report};
use std::panic::{catch_unwind, AssertUnwindSafe};

fn managed(mm: &PageAllocator) -> u64 {
    mm.zones().iter().map(|z| z.managed_pages()).sum()
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Frees `block` of `order` through the map inside a burst of CPU 0, which
/// panics; returns the panic's message.
fn free_inside_a_burst(mm: &PageAllocator, block: Pfn, order: u32) -> String {
    let mut cpu = Cpus::new(mm).pin_cpu(0).unwrap();
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        cpu.burst(Gfp::KERNEL, |zone| {
            let mine = zone.alloc_pages(Gfp::KERNEL, 1).unwrap();
            zone.free_pages(mine, 1).unwrap();
            // The mistake: the map, not the zone, while it is held.
            let _ = mm.free_pages(block, order);
        })
    }));
    drop(cpu);
    panic_message(&*outcome.expect_err("the free inside the burst must panic"))
}

#[test]
fn a_free_refused_inside_a_burst_loses_no_page() {
    for (lists, order) in [(false, 0), (true, 5), (false, 3)] {
        let mm = MemoryMapBuilder::with_memory(64 << 20).nr_cpus(1).per_cpu_lists(lists).build().unwrap();
        let block = mm.alloc_pages(Gfp::KERNEL, order).unwrap();
        let message = free_inside_a_burst(&mm, block, order);
        assert!(message.contains("self-deadlock"), "{message}");
        Cpus::new(&mm).drain_all_pages();
        Report::new(&mm).check_invariants().unwrap();
        assert_eq!(
            Report::new(&mm).nr_free_pages(),
            managed(&mm),
            "per-CPU lists {lists}, order {order}: every page is free"
        );
        // The block is free: a second free is a double free, not a loss.
        assert!(mm.free_pages(block, order).is_err());
    }
}

/// A pinned CPU forgotten with `mem::forget` keeps its magazine and lists
/// to itself for good: the checker counts those pages as the pinned CPU's
/// instead of failing on them.
#[test]
fn pages_a_forgotten_pinned_cpu_holds_are_known() {
    let mm = MemoryMapBuilder::with_memory(64 << 20).nr_cpus(2).build().unwrap();
    let mut cpu = Cpus::new(&mm).pin_cpu(1).unwrap();
    let pages: Vec<Pfn> = (0..40).map(|_| cpu.alloc_pages(Gfp::KERNEL, 0).unwrap()).collect();
    for &pfn in &pages[..30] {
        cpu.free_pages(pfn, 0).unwrap();
    }
    std::mem::forget(cpu);
    Cpus::new(&mm).drain_all_pages();
    Report::new(&mm).check_invariants().unwrap();
    let kept: Vec<_> = pages[30..].to_vec();
    // Its handed-out pages stay its own: nobody else frees them.
    assert!(kept.iter().all(|&p| mm.free_pages(p, 0).is_err()));
}

/// A forgotten `PageGuard` or owned block is allocated, not lost.
#[test]
fn pages_a_forgotten_guard_or_block_holds_are_allocated() {
    let mm = MemoryMapBuilder::with_memory(16 << 20).nr_cpus(1).build().unwrap();
    std::mem::forget(mm.alloc_pages_guarded(Gfp::KERNEL, 2).unwrap());
    let key = Blocks::new(&mm).new_owner_key().unwrap();
    let _held = Blocks::new(&mm).alloc_block(&key, Gfp::KERNEL, 1).unwrap(); // a dropped one leaks, as documented
    Cpus::new(&mm).drain_all_pages();
    Report::new(&mm).check_invariants().unwrap();
    assert_eq!(Report::new(&mm).nr_free_pages() + 4 + 2, managed(&mm));
}
