//! Free page reporting never discards a page in use: three threads
//! allocate blocks of orders 0, 3, 9 and 10 from a real-memory map, write
//! a pattern unique to (block, word) into every 32nd word of every page
//! (a discarded page reads zero throughout), verify it and
//! free, while a fourth drains the per-CPU lists and runs reporting passes
//! in a loop, and a `FreePageReporter` runs its own passes every
//! millisecond. A discarded page in use would read zero. At the end every
//! page is free again, reporting did give memory back, and the
//! invariants (the `REPORTED` flag's included) hold.

use mmkit::{Backing, FreePageReporter, Gfp, HugePages, MemoryMapBuilder, PageAllocator, Pfn, Report};
use mmkit::{Cpus, Tuning};
use mmkit_testkit::XorShift64;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const ORDERS: [u32; 4] = [0, 3, 9, 10];
/// Words of a page a pattern covers: one in 32 (every 256 bytes).
const STRIDE: usize = 32;

/// Calls `f` with the block's words; the block must be allocated to the
/// calling thread.
fn with_words<R>(mm: &PageAllocator, pfn: Pfn, order: u32, f: impl FnOnce(&mut [u64]) -> R) -> R {
    let ptr = mm.page_address(pfn).unwrap().as_ptr().cast::<u64>();
    // SAFETY: the block is allocated to the calling thread alone until it
    // frees it (after `f` returns), lies inside the map's mapping, and is
    // page-aligned; the slice does not outlive `f`.
    f(unsafe { std::slice::from_raw_parts_mut(ptr, (4096 << order) / 8) })
}

fn check_pattern(mm: &PageAllocator, pfn: Pfn, order: u32, tag: u64) {
    with_words(mm, pfn, order, |words| {
        for (j, &w) in words.iter().enumerate().step_by(STRIDE) {
            assert_eq!(w, pattern(pfn, tag, j), "pfn {} (order {order}) word {j} changed while in use", pfn.0);
        }
    });
}

fn pattern(pfn: Pfn, seed: u64, j: usize) -> u64 {
    (pfn.0 << 24) ^ seed ^ (j as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1
}

fn worker(mm: &PageAllocator, seed: u64, rounds: usize) {
    let mut rng = XorShift64::new(seed);
    let mut held: Vec<(Pfn, u32, u64)> = Vec::new();
    for round in 0..rounds {
        let order = ORDERS[rng.below(ORDERS.len() as u64) as usize];
        if held.len() < 24 {
            if let Ok(pfn) = mm.alloc_pages(Gfp::KERNEL, order) {
                let tag = rng.next_u64();
                with_words(mm, pfn, order, |words| {
                    for (j, w) in words.iter_mut().enumerate().step_by(STRIDE) {
                        *w = pattern(pfn, tag, j);
                    }
                });
                held.push((pfn, order, tag));
            }
        }
        if held.len() >= 24 || (round % 3 == 0 && !held.is_empty()) {
            let (pfn, order, tag) = held.swap_remove(rng.below(held.len() as u64) as usize);
            check_pattern(mm, pfn, order, tag);
            mm.free_pages(pfn, order).unwrap();
        }
    }
    for (pfn, order, tag) in held {
        check_pattern(mm, pfn, order, tag);
        mm.free_pages(pfn, order).unwrap();
    }
}

#[test]
fn reporting_passes_never_discard_pages_in_use() {
    let mm = Arc::new(
        MemoryMapBuilder::with_memory(192 << 20)
            .backing(Backing::RealMemory(HugePages::None))
            .nr_cpus(2)
            .build()
            .unwrap(),
    );
    let free_at_start = Report::new(&mm).nr_free_pages();
    let reporter = FreePageReporter::start(Arc::clone(&mm), Duration::from_millis(1)).unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let passes = {
        let (mm, done) = (Arc::clone(&mm), Arc::clone(&done));
        std::thread::spawn(move || {
            let mut reported = 0;
            while !done.load(Ordering::Relaxed) {
                Cpus::new(&mm).drain_all_pages();
                reported += Tuning::new(&mm).report_free_pages().pages;
            }
            reported
        })
    };
    let workers: Vec<_> = (0..3u64)
        .map(|t| {
            let mm = Arc::clone(&mm);
            std::thread::spawn(move || worker(&mm, 0x5eed_0000 + t, 3000))
        })
        .collect();
    for w in workers {
        w.join().unwrap();
    }
    done.store(true, Ordering::Relaxed);
    let reported = passes.join().unwrap();
    drop(reporter);
    Cpus::new(&mm).drain_all_pages();
    Report::new(&mm).check_invariants().unwrap();
    assert_eq!(Report::new(&mm).nr_free_pages(), free_at_start, "every page is free again");
    assert!(reported > 0 && Report::new(&mm).stats().reported_pages >= reported, "the passes gave memory back");
    // What is left resident is given back now, and reads zero on reuse.
    Tuning::new(&mm).report_free_pages();
    let pfn = mm.alloc_pages(Gfp::KERNEL | Gfp::ZERO, 10).unwrap();
    assert!(with_words(&mm, pfn, 10, |words| words.iter().all(|&w| w == 0)));
    mm.free_pages(pfn, 10).unwrap();
}
