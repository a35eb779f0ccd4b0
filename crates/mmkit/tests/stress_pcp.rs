//! Multi-threaded stress over real memory (not a benchmark): N threads
//! (2, 4, 8 on a 2-core machine) allocate random orders through the per-CPU
//! lists and the bulk allocator, write a thread-unique pattern into every
//! page, verify it before freeing, hand pages to each other (so pages are
//! freed on other CPUs than they were allocated on), and drain every CPU's
//! lists concurrently. At the end every page is back and the invariants hold.
//!
//! What it proves: no page is handed out twice (a second owner would
//! overwrite the first owner's pattern), remote frees and concurrent drains
//! keep the lists consistent, and accounting is exact.

use mmkit::Cpus;
use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder, PageAllocator, Pfn, Report};
use mmkit_testkit::XorShift64;
use std::sync::mpsc;
use std::sync::Barrier;

const WORDS_PER_PAGE: usize = 4096 / 8;

/// A block this thread owns, and the tag written into it.
struct Owned {
    pfn: Pfn,
    order: u32,
    tag: u64,
    /// Came from the bulk allocator (order 0, refcount 1).
    bulk: bool,
}

fn pattern(tag: u64, pfn: Pfn, word: usize) -> u64 {
    tag.rotate_left(17) ^ (pfn.0 << 12) ^ word as u64
}

fn fill(mm: &PageAllocator, block: &Owned) {
    for page in 0..1u64 << block.order {
        let pfn = Pfn(block.pfn.0 + page);
        let ptr = mm.page_address(pfn).expect("real memory").as_ptr() as *mut u64;
        for word in [0, 1, WORDS_PER_PAGE / 2, WORDS_PER_PAGE - 1] {
            // SAFETY: the page belongs to a block this thread allocated and
            // has not freed or handed on; the mapping lives as long as `mm`;
            // `word` is inside the page and the pointer is 8-byte aligned.
            unsafe { ptr.add(word).write_volatile(pattern(block.tag, pfn, word)) };
        }
    }
}

fn verify(mm: &PageAllocator, block: &Owned) {
    for page in 0..1u64 << block.order {
        let pfn = Pfn(block.pfn.0 + page);
        let ptr = mm.page_address(pfn).expect("real memory").as_ptr() as *const u64;
        for word in [0, 1, WORDS_PER_PAGE / 2, WORDS_PER_PAGE - 1] {
            // SAFETY: as in `fill`; this thread still owns the block.
            let got = unsafe { ptr.add(word).read_volatile() };
            assert_eq!(got, pattern(block.tag, pfn, word), "page {pfn} word {word} overwritten: handed out twice?");
        }
    }
}

fn release(mm: &PageAllocator, block: Owned) {
    verify(mm, &block);
    mm.free_pages(block.pfn, block.order).unwrap();
}

fn stress(threads: usize, rounds: usize) {
    let mm = MemoryMapBuilder::new()
        .zone(0, mmkit::ZoneType::Normal, 0..(64 << 20) / 4096)
        .backing(Backing::RealMemory(HugePages::None))
        .nr_cpus(2)
        .min_free_kbytes(256)
        .build()
        .unwrap();
    let free_at_start = Report::new(&mm).nr_free_pages();
    let barrier = Barrier::new(threads);
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..threads).map(|_| mpsc::channel::<Owned>()).unzip();
    std::thread::scope(|scope| {
        for (me, inbox) in receivers.into_iter().enumerate() {
            let mm = &mm;
            let barrier = &barrier;
            let senders = senders.clone();
            scope.spawn(move || {
                let mut rng = XorShift64::new(0x9e37_79b9_7f4a_7c15 ^ ((me as u64 + 1) * 0x1000_0001));
                let tag = 0xabc0_0000 + me as u64;
                let mut held: Vec<Owned> = Vec::new();
                barrier.wait();
                for round in 0..rounds {
                    // Adopt pages others sent: check their pattern, then own them.
                    while let Ok(mut block) = inbox.try_recv() {
                        verify(mm, &block);
                        block.tag = tag;
                        fill(mm, &block);
                        held.push(block);
                    }
                    match rng.below(10) {
                        0..=3 => {
                            let order = [0, 0, 0, 1, 2, 3, 9][rng.below(7) as usize];
                            let gfp = [Gfp::KERNEL, Gfp::HIGHUSER_MOVABLE, Gfp::ATOMIC][rng.below(3) as usize];
                            if let Ok(pfn) = mm.alloc_pages(gfp, order) {
                                let block = Owned { pfn, order, tag, bulk: false };
                                fill(mm, &block);
                                held.push(block);
                            }
                        }
                        4 => {
                            let mut slots = vec![None; 1 + rng.below(40) as usize];
                            let filled = mm.alloc_pages_bulk(Gfp::KERNEL, &mut slots);
                            assert!(slots[..filled].iter().all(Option::is_some));
                            for pfn in slots.into_iter().flatten() {
                                let block = Owned { pfn, order: 0, tag, bulk: true };
                                fill(mm, &block);
                                held.push(block);
                            }
                        }
                        5..=7 if !held.is_empty() => {
                            let i = rng.below(held.len() as u64) as usize;
                            release(mm, held.swap_remove(i));
                        }
                        8 if !held.is_empty() => {
                            let i = rng.below(held.len() as u64) as usize;
                            let to = rng.below(threads as u64) as usize;
                            let block = held.swap_remove(i);
                            if let Err(mpsc::SendError(block)) = senders[to].send(block) {
                                release(mm, block);
                            }
                        }
                        _ => {
                            if round % 64 == 0 {
                                Cpus::new(mm).drain_all_pages();
                            }
                            // Free the bulk-allocated pages in one batch.
                            let (bulk, rest): (Vec<Owned>, Vec<Owned>) = held.drain(..).partition(|b| b.bulk);
                            held = rest;
                            for block in &bulk {
                                verify(mm, block);
                            }
                            let pfns: Vec<Pfn> = bulk.iter().map(|b| b.pfn).collect();
                            assert_eq!(mm.free_pages_bulk(&pfns), Ok(pfns.len()));
                        }
                    }
                    if held.len() > 600 {
                        for block in held.drain(..300) {
                            release(mm, block);
                        }
                    }
                }
                barrier.wait();
                // Everyone has stopped sending: empty the inbox, free all.
                while let Ok(block) = inbox.try_recv() {
                    held.push(block);
                }
                for block in held {
                    release(mm, block);
                }
            });
        }
        drop(senders);
    });
    assert_eq!(Cpus::new(&mm).drain_all_pages(), 0);
    Report::new(&mm).check_invariants().unwrap();
    assert_eq!(Report::new(&mm).nr_free_pages(), free_at_start, "every page came back");
    let stats = Report::new(&mm).stats();
    assert_eq!(stats.bad_pages, 0);
}

#[test]
fn two_threads() {
    stress(2, 20_000);
}

#[test]
fn four_threads() {
    stress(4, 12_000);
}

#[test]
fn eight_threads() {
    stress(8, 8_000);
}

/// A speculative reference on the first page of a non-compound block
/// while its owner frees it: the owner frees the rest of the block and the
/// reference's drop frees the first page alone (Linux's `__free_pages`).
/// The drop must never see the block's old order: it would free the whole
/// block a second time. One thread allocates and frees order 1–4 blocks,
/// another takes and drops references on their first pages.
#[test]
fn a_speculative_reference_on_a_freed_block_frees_one_page_once() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
    use std::sync::Arc;
    let mm = Arc::new(MemoryMapBuilder::with_memory(32 << 20).nr_cpus(2).build().unwrap());
    let current = Arc::new(AtomicU64::new(u64::MAX));
    let stop = Arc::new(AtomicBool::new(false));
    let speculator = {
        let (mm, current, stop) = (Arc::clone(&mm), Arc::clone(&current), Arc::clone(&stop));
        std::thread::spawn(move || {
            while !stop.load(Relaxed) {
                let pfn = Pfn(current.load(Relaxed));
                if mm.get_page(pfn).is_ok() {
                    std::hint::spin_loop();
                    mm.put_page(pfn).unwrap();
                }
            }
        })
    };
    // A corrupted list can make an allocation loop forever: the owner
    // runs in its own thread and the test fails after a deadline.
    let (done_tx, done_rx) = mpsc::channel();
    let owner = {
        let (mm, current) = (Arc::clone(&mm), Arc::clone(&current));
        std::thread::spawn(move || {
            let mut rng = XorShift64::new(5);
            for _ in 0..200_000 {
                let order = 1 + rng.below(4) as u32;
                let pfn = mm.alloc_pages(Gfp::KERNEL, order).unwrap();
                current.store(pfn.0, Relaxed);
                mm.free_pages(pfn, order).unwrap();
            }
            done_tx.send(()).unwrap();
        })
    };
    done_rx.recv_timeout(std::time::Duration::from_secs(120)).expect("the owner thread is stuck");
    owner.join().unwrap();
    stop.store(true, Relaxed);
    speculator.join().unwrap();
    Cpus::new(&mm).drain_all_pages();
    Report::new(&mm).check_invariants().unwrap();
    assert_eq!(Report::new(&mm).nr_free_pages(), mm.zones().iter().map(|z| z.managed_pages()).sum::<u64>());
}
