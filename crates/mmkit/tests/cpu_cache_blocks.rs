//! Pageblock-order (THP-order) blocks through the per-CPU cache's block
//! stacks (`page_alloc::cache::cpu`, "Pageblock-order blocks"): a freed
//! block is served again without the lists, the stacks are counted by the
//! invariant checker and `nr_pcp_pages`, drained by `drain_all_pages` and
//! by pinning, a full stack sends blocks to the lists, bad frees change
//! nothing, poison pending keeps blocks off the stacks, and threads that
//! write a pattern into real blocks never share one.
//!
//! Where restartable sequences are unavailable the map has no cache; the
//! tests then check the same outcomes through the per-CPU lists and say so.

use mmkit::Cpus;
use mmkit::{FreeError, Gfp, MemoryMapBuilder, PageAllocator, Pfn, Report};
use std::sync::Arc;
use std::thread;

mod live_blocks;
use live_blocks::{pattern, real_memory_map};

const ORDER: u32 = 9;
const PAGES: u64 = 1 << ORDER;

fn map(bytes: u64) -> PageAllocator {
    let mm = MemoryMapBuilder::with_memory(bytes).nr_cpus(2).build().unwrap();
    assert_eq!(mm.geometry().pageblock_order, ORDER, "the tests assume pageblocks of order 9");
    if !Cpus::new(&mm).has_cpu_caches() {
        eprintln!("no restartable sequences here: blocks go through the per-CPU lists");
    }
    mm
}

/// Free pages plus pages cached on lists and in caches: what the map has
/// when nothing is allocated.
fn free_and_cached(mm: &PageAllocator) -> u64 {
    Report::new(mm).nr_free_pages() + Report::new(mm).nr_pcp_pages()
}

#[test]
fn a_freed_block_is_served_again_and_counted_while_cached() {
    let mm = map(256 << 20);
    let before = free_and_cached(&mm);
    let block = mm.alloc_pages(Gfp::KERNEL, ORDER).unwrap();
    assert_eq!(block.0 % PAGES, 0);
    mm.free_pages(block, ORDER).unwrap();
    // Cached (on the CPU's stack or its list), counted, and consistent.
    assert!(Report::new(&mm).nr_pcp_pages() >= PAGES);
    assert_eq!(free_and_cached(&mm), before);
    Report::new(&mm).check_invariants().unwrap();
    // The next request of the order takes it back (LIFO on either path),
    // unless the thread moved to the other CPU in between.
    let again = mm.alloc_pages(Gfp::KERNEL, ORDER).unwrap();
    if Cpus::new(&mm).has_cpu_caches() && again != block {
        eprintln!("the thread moved CPUs between the free and the allocation");
    }
    mm.free_pages(again, ORDER).unwrap();
    assert_eq!(Cpus::new(&mm).drain_all_pages(), 0);
    assert_eq!(Report::new(&mm).nr_pcp_pages(), 0, "the drain empties the block stacks");
    assert_eq!(Report::new(&mm).nr_free_pages(), before);
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn more_blocks_than_a_stack_holds_go_to_the_lists() {
    let mm = map(256 << 20);
    let before = free_and_cached(&mm);
    let blocks: Vec<Pfn> = (0..8).map(|_| mm.alloc_pages(Gfp::KERNEL, ORDER).unwrap()).collect();
    for &b in &blocks {
        mm.free_pages(b, ORDER).unwrap();
        Report::new(&mm).check_invariants().unwrap();
    }
    assert_eq!(free_and_cached(&mm), before);
    // All eight come back, each once.
    let mut again: Vec<Pfn> = (0..8).map(|_| mm.alloc_pages(Gfp::KERNEL, ORDER).unwrap()).collect();
    again.sort_unstable();
    again.dedup();
    assert_eq!(again.len(), 8);
    for b in again {
        mm.free_pages(b, ORDER).unwrap();
    }
    Cpus::new(&mm).drain_all_pages();
    assert_eq!(Report::new(&mm).nr_free_pages(), before);
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn bad_frees_of_a_cached_block_change_nothing() {
    let mm = map(256 << 20);
    let block = mm.alloc_pages(Gfp::KERNEL, ORDER).unwrap();
    mm.free_pages(block, ORDER).unwrap();
    let cached = free_and_cached(&mm);
    // A second free, a free at another order, a free of a page inside it.
    assert!(matches!(mm.free_pages(block, ORDER), Err(FreeError::DoubleFree(_))), "{:?}", mm.free_pages(block, ORDER));
    assert!(mm.free_pages(block, 0).is_err());
    assert!(mm.free_pages(Pfn(block.0 + 8), 3).is_err());
    assert_eq!(free_and_cached(&mm), cached);
    Report::new(&mm).check_invariants().unwrap();
    // A live block freed at the wrong order or with a second reference.
    let live = mm.alloc_pages(Gfp::KERNEL, ORDER).unwrap();
    assert!(matches!(mm.free_pages(live, ORDER - 1), Err(FreeError::WrongOrder { .. })));
    // With a second reference the free drops it and frees all but the
    // first page, which lives on at order 0 (Linux's `__free_pages`).
    mm.get_page(live).unwrap();
    mm.free_pages(live, ORDER).unwrap();
    assert_eq!(mm.page_count(live).unwrap(), 1, "one reference dropped, the first page still in use");
    assert!(matches!(mm.free_pages(live, ORDER), Err(FreeError::WrongOrder { .. })));
    mm.free_pages(live, 0).unwrap();
    Cpus::new(&mm).drain_all_pages();
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn a_poisoned_page_in_a_cached_block_is_never_handed_out() {
    let mm = map(64 << 20);
    let blocks: Vec<Pfn> = (0..2).map(|_| mm.alloc_pages(Gfp::KERNEL, ORDER).unwrap()).collect();
    for &b in &blocks {
        mm.free_pages(b, ORDER).unwrap();
    }
    // A page in the middle of a cached block.
    let victim = Pfn(blocks[0].0 + 100);
    assert!(mm.memory_failure(victim).is_ok());
    let mut got = Vec::new();
    while let Ok(b) = mm.alloc_pages(Gfp::KERNEL | Gfp::NOWARN, ORDER) {
        assert!(!(b.0..b.0 + PAGES).contains(&victim.0), "block {b:?} holds the poisoned page");
        got.push(b);
    }
    assert!(!got.is_empty());
    Report::new(&mm).check_invariants().unwrap();
    for b in got {
        mm.free_pages(b, ORDER).unwrap();
    }
    Cpus::new(&mm).drain_all_pages();
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn pinning_a_cpu_empties_its_block_stacks() {
    let mm = map(256 << 20);
    let before = free_and_cached(&mm);
    let block = mm.alloc_pages(Gfp::KERNEL, ORDER).unwrap();
    mm.free_pages(block, ORDER).unwrap();
    let cached = Report::new(&mm).nr_pcp_pages();
    assert!(cached >= PAGES);
    // Pinning a CPU takes its stacks' blocks to the buddy (its lists stay
    // with the handle): after both CPUs were pinned, the freed block is on
    // no stack, and only list pages are left cached.
    for cpu in 0..2 {
        let pinned = Cpus::new(&mm).pin_cpu(cpu).unwrap();
        assert!(Report::new(&mm).nr_free_pages() + Report::new(&mm).nr_pcp_pages() <= before);
        drop(pinned);
        Report::new(&mm).check_invariants().unwrap();
    }
    if Cpus::new(&mm).has_cpu_caches() {
        assert_eq!(Report::new(&mm).nr_pcp_pages(), cached - PAGES, "the block left its stack");
    }
    assert_eq!(free_and_cached(&mm), before);
    Cpus::new(&mm).drain_all_pages();
    assert_eq!(Report::new(&mm).nr_free_pages(), before);
    Report::new(&mm).check_invariants().unwrap();
}

/// Threads (up to more than the two CPUs) allocate blocks, write their own
/// pattern into every word, yield, check it and free the block: a block
/// handed to two threads at once would show the other's pattern.
fn stress_blocks(threads: usize) {
    let mm = Arc::new(real_memory_map());
    let before = free_and_cached(&mm);
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let mm = Arc::clone(&mm);
            thread::spawn(move || {
                for round in 0..(160 / threads) as u64 {
                    let Ok(block) = mm.alloc_pages(Gfp::KERNEL | Gfp::NOWARN, ORDER) else {
                        thread::yield_now();
                        continue;
                    };
                    let seed = (t as u64) << 32 | round;
                    pattern(&mm, block, PAGES, seed, false);
                    thread::yield_now();
                    pattern(&mm, block, PAGES, seed, true);
                    mm.free_pages(block, ORDER).unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    Cpus::new(&mm).drain_all_pages();
    assert_eq!(Report::new(&mm).nr_free_pages(), before);
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn stress_blocks_2_threads() {
    stress_blocks(2);
}

#[test]
fn stress_blocks_4_threads() {
    stress_blocks(4);
}

#[test]
fn stress_blocks_8_threads() {
    stress_blocks(8);
}
