//! The shared API with per-thread caches (`MemoryMapBuilder::thread_caches`):
//! a property test of random operation sequences against the live-block
//! model, with a second, long-lived thread that allocates and frees on
//! command (so its cache is live and idle while the main thread drains and
//! checks) and short-lived threads that free pages allocated here and exit
//! with them cached; bad input on the cached path; drain requests; the
//! table filling up; and a stress test with real memory that passes pages
//! between threads and checks a pattern in every page before freeing it.
//!
//! Properties, after every step:
//! 1. no page is handed out twice, every block aligned and in one zone;
//! 2. per zone, buddy-free + cached (lists and thread caches) + live pages
//!    == managed pages;
//! 3. `check_invariants()` holds, counting pages in thread caches;
//! 4. a second free, a wrong order, a page with another reference are
//!    refused or handled exactly as without caches.

use mmkit::{Backing, FreeError, Gfp, HugePages, MemoryMapBuilder, PageAllocator, Pfn};
use mmkit_testkit::XorShift64;
use proptest::prelude::*;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;

mod live_blocks;
use live_blocks::{pattern, two_zone_map, LiveBlocks};

const GFPS: [Gfp; 5] = [Gfp::KERNEL, Gfp::HIGHUSER_MOVABLE, Gfp::ATOMIC, Gfp::KERNEL.union(Gfp::ZERO), Gfp::DMA32];

fn map() -> PageAllocator {
    two_zone_map().nr_cpus(2).thread_caches(true).build().unwrap()
}

/// What the helper thread is asked to do; it answers every command.
enum Cmd {
    Alloc(Gfp, usize),
    Free(Vec<Pfn>),
}

/// A long-lived thread with its own cache, idle between commands.
struct Worker {
    commands: mpsc::Sender<Cmd>,
    replies: mpsc::Receiver<Vec<Pfn>>,
    handle: thread::JoinHandle<()>,
}

impl Worker {
    fn start(mm: Arc<PageAllocator>) -> Self {
        let (commands, inbox) = mpsc::channel::<Cmd>();
        let (outbox, replies) = mpsc::channel();
        let handle = thread::spawn(move || {
            for cmd in inbox {
                let reply = match cmd {
                    Cmd::Alloc(gfp, n) => (0..n).filter_map(|_| mm.alloc_pages(gfp, 0).ok()).collect(),
                    Cmd::Free(pfns) => {
                        for pfn in pfns {
                            mm.free_pages(pfn, 0).unwrap();
                        }
                        Vec::new()
                    }
                };
                outbox.send(reply).unwrap();
            }
        });
        Self { commands, replies, handle }
    }

    fn ask(&self, cmd: Cmd) -> Vec<Pfn> {
        self.commands.send(cmd).unwrap();
        self.replies.recv().unwrap()
    }

    /// Joins the thread: its destructors, and so its cache's, have run.
    fn stop(self) {
        drop(self.commands);
        self.handle.join().unwrap();
    }
}

#[derive(Clone, Debug)]
enum Op {
    Alloc { order: u32, gfp: usize },
    Free { pick: usize },
    WrongOrder { pick: usize },
    ExtraReference { pick: usize },
    FreeOnExitingThread { pick: usize },
    WorkerAlloc { gfp: usize, n: usize },
    WorkerFree { n: usize },
    Drain,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (prop_oneof![Just(0u32), Just(0), Just(0), Just(1), Just(3)], 0..GFPS.len())
            .prop_map(|(order, gfp)| Op::Alloc { order, gfp }),
        5 => any::<usize>().prop_map(|pick| Op::Free { pick }),
        1 => any::<usize>().prop_map(|pick| Op::WrongOrder { pick }),
        1 => any::<usize>().prop_map(|pick| Op::ExtraReference { pick }),
        1 => any::<usize>().prop_map(|pick| Op::FreeOnExitingThread { pick }),
        1 => (0..GFPS.len(), 0..40usize).prop_map(|(gfp, n)| Op::WorkerAlloc { gfp, n }),
        1 => (0..40usize).prop_map(|n| Op::WorkerFree { n }),
        1 => Just(Op::Drain),
    ]
}

fn run(ops: Vec<Op>) {
    let mm = Arc::new(map());
    let worker = Worker::start(Arc::clone(&mm));
    let mut model = LiveBlocks::default();
    for op in ops {
        match op {
            Op::Alloc { order, gfp } => {
                if let Ok(pfn) = mm.alloc_pages(GFPS[gfp], order) {
                    model.insert(&mm, pfn, order);
                }
            }
            Op::Free { pick } => {
                if let Some((pfn, order)) = model.take(pick) {
                    mm.free_pages(pfn, order).unwrap();
                    let again = mm.free_pages(pfn, order);
                    assert!(
                        matches!(again, Err(FreeError::DoubleFree(_) | FreeError::NotAllocated(_))),
                        "second free of {pfn}: {again:?}"
                    );
                }
            }
            Op::WrongOrder { pick } => {
                if let Some((pfn, order)) = model.pick(pick) {
                    let before = mm.zone_snapshots();
                    assert!(matches!(mm.free_pages(pfn, order + 1), Err(FreeError::WrongOrder { .. })));
                    assert_eq!(mm.zone_snapshots(), before, "a refused free changes nothing");
                }
            }
            Op::ExtraReference { pick } => {
                // Someone else holds a reference: the free only drops ours,
                // and the last put frees the block.
                if let Some((pfn, order)) = model.take(pick) {
                    // (A block's other pages go back at once; its first
                    // page lives on as an order-0 page until the put.)
                    mm.get_page(pfn).unwrap();
                    mm.free_pages(pfn, order).unwrap();
                    let mut still = LiveBlocks { live: model.live.clone() };
                    still.live.insert(pfn.0, 0);
                    still.check(&mm);
                    mm.put_page(pfn).unwrap();
                }
            }
            Op::FreeOnExitingThread { pick } => {
                // The page goes to that thread's cache, and with it into
                // the table when the thread exits.
                if let Some((pfn, order)) = model.take(pick) {
                    let remote = Arc::clone(&mm);
                    thread::spawn(move || remote.free_pages(pfn, order).unwrap()).join().unwrap();
                }
            }
            Op::WorkerAlloc { gfp, n } => {
                for pfn in worker.ask(Cmd::Alloc(GFPS[gfp], n)) {
                    model.insert(&mm, pfn, 0);
                }
            }
            Op::WorkerFree { n } => {
                let zero: Vec<u64> = model.live.iter().filter(|(_, &o)| o == 0).map(|(&p, _)| p).take(n).collect();
                for p in &zero {
                    model.live.remove(p);
                }
                worker.ask(Cmd::Free(zero.into_iter().map(Pfn).collect()));
            }
            Op::Drain => assert_eq!(mm.drain_all_pages(), 0, "no CPU is pinned"),
        }
        model.check(&mm);
    }
    for (pfn, order) in std::mem::take(&mut model.live) {
        mm.free_pages(Pfn(pfn), order).unwrap();
    }
    worker.stop();
    model.check(&mm);
    mm.drain_all_pages();
    let managed: u64 = mm.zones().iter().map(|z| z.managed_pages()).sum();
    assert_eq!(mm.nr_free_pages(), managed, "every page came back");
    assert_eq!(mm.nr_pcp_pages(), 0);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn thread_caches_match_the_model(ops in prop::collection::vec(op(), 1..120)) {
        run(ops);
    }
}

#[test]
fn bad_input_on_the_cached_path_changes_nothing() {
    let mm = map();
    let p = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
    mm.free_pages(p, 0).unwrap();
    assert!(mm.nr_pcp_pages() > 0, "the page is cached");
    let before = mm.zone_snapshots();
    assert_eq!(mm.free_pages(p, 0), Err(FreeError::DoubleFree(p)));
    assert_eq!(mm.put_page(p), Err(FreeError::DoubleFree(p)));
    assert!(mm.free_pages(Pfn(1 << 40), 0).is_err());
    assert!(mm.free_pages(Pfn(3), 0).is_err(), "a hole below the first zone");
    assert_eq!(mm.zone_snapshots(), before);
    mm.check_invariants().unwrap();
}

#[test]
fn an_idle_thread_flushes_at_its_next_call_after_a_drain() {
    let mm = Arc::new(map());
    let worker = Worker::start(Arc::clone(&mm));
    let pages = worker.ask(Cmd::Alloc(Gfp::KERNEL, 8));
    worker.ask(Cmd::Free(pages));
    mm.drain_all_pages();
    let held = mm.nr_pcp_pages();
    assert!(held > 0, "the idle worker's cache cannot be reached");
    mm.check_invariants().unwrap();
    // Its next call serves the request first.
    let one = worker.ask(Cmd::Alloc(Gfp::KERNEL, 1));
    worker.ask(Cmd::Free(one));
    mm.drain_all_pages();
    assert!(mm.nr_pcp_pages() <= 1, "flushed at the next call, not {} pages left", mm.nr_pcp_pages());
    worker.stop();
    mm.drain_all_pages();
    assert_eq!(mm.nr_pcp_pages(), 0);
    mm.check_invariants().unwrap();
}

#[test]
fn threads_beyond_the_table_use_the_lists() {
    let mm = Arc::new(map());
    // More threads than cache slots, all alive at once.
    let barrier = Arc::new(std::sync::Barrier::new(80));
    let handles: Vec<_> = (0..80)
        .map(|_| {
            let (mm, barrier) = (Arc::clone(&mm), Arc::clone(&barrier));
            thread::spawn(move || {
                let p = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
                barrier.wait();
                mm.free_pages(p, 0).unwrap();
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    mm.drain_all_pages();
    mm.check_invariants().unwrap();
    let managed: u64 = mm.zones().iter().map(|z| z.managed_pages()).sum();
    assert_eq!(mm.nr_free_pages(), managed);
}

#[test]
fn a_poisoned_page_in_a_cache_is_never_handed_out() {
    let mm = MemoryMapBuilder::with_memory(64 << 20).nr_cpus(1).thread_caches(true).build().unwrap();
    let pages: Vec<Pfn> = (0..8).map(|_| mm.alloc_pages(Gfp::KERNEL, 0).unwrap()).collect();
    for &p in &pages {
        mm.free_pages(p, 0).unwrap();
    }
    let victim = pages[3];
    // memory_failure drains this thread's cache, then takes the page.
    assert!(mm.memory_failure(victim).is_ok());
    let again: Vec<Pfn> = (0..64).map(|_| mm.alloc_pages(Gfp::KERNEL, 0).unwrap()).collect();
    assert!(!again.contains(&victim));
    for p in again {
        mm.free_pages(p, 0).unwrap();
    }
    assert_eq!(mm.free_pages(victim, 0), Err(FreeError::Poisoned(victim)));
    mm.drain_all_pages();
    mm.check_invariants().unwrap();
}

/// Four threads allocate through their caches, write a pattern, pass half
/// of their pages to the next thread (which checks and frees them: a free
/// into the other thread's cache) and free the rest themselves.
#[test]
fn stress_cross_thread_frees_keep_every_page_intact() {
    const THREADS: usize = 4;
    let mm = Arc::new(
        MemoryMapBuilder::with_memory(64 << 20)
            .nr_cpus(2)
            .thread_caches(true)
            .backing(Backing::RealMemory(HugePages::None))
            .build()
            .unwrap(),
    );
    let free_at_start = mm.nr_free_pages() + mm.nr_pcp_pages();
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..THREADS).map(|_| mpsc::channel::<(Pfn, u64)>()).unzip();
    let handles: Vec<_> = receivers
        .into_iter()
        .enumerate()
        .map(|(t, inbox)| {
            let mm = Arc::clone(&mm);
            let next = senders[(t + 1) % THREADS].clone();
            thread::spawn(move || {
                let mut rng = XorShift64::new(0x9e37 + t as u64);
                let mut held: Vec<(Pfn, u64)> = Vec::new();
                for round in 0..20_000u64 {
                    if rng.next_u64() % 3 != 0 || held.is_empty() {
                        let gfp = if rng.next_u64() % 2 == 0 { Gfp::KERNEL } else { Gfp::HIGHUSER_MOVABLE };
                        if let Ok(pfn) = mm.alloc_pages(gfp, 0) {
                            let seed = rng.next_u64() ^ round;
                            pattern(&mm, pfn, 1, seed, false);
                            held.push((pfn, seed));
                        }
                    } else {
                        let i = (rng.next_u64() % held.len() as u64) as usize;
                        let (pfn, seed) = held.swap_remove(i);
                        pattern(&mm, pfn, 1, seed, true);
                        if rng.next_u64() % 2 == 0 {
                            next.send((pfn, seed)).unwrap();
                        } else {
                            mm.free_pages(pfn, 0).unwrap();
                        }
                    }
                    while let Ok((pfn, seed)) = inbox.try_recv() {
                        pattern(&mm, pfn, 1, seed, true);
                        mm.free_pages(pfn, 0).unwrap();
                    }
                }
                drop(next);
                for (pfn, seed) in held {
                    pattern(&mm, pfn, 1, seed, true);
                    mm.free_pages(pfn, 0).unwrap();
                }
                inbox
            })
        })
        .collect();
    drop(senders);
    let inboxes: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    // Pages still in flight when their receiver finished.
    for inbox in inboxes {
        while let Ok((pfn, seed)) = inbox.try_recv() {
            pattern(&mm, pfn, 1, seed, true);
            mm.free_pages(pfn, 0).unwrap();
        }
    }
    mm.drain_all_pages();
    mm.check_invariants().unwrap();
    assert_eq!(mm.nr_pcp_pages(), 0);
    assert_eq!(mm.nr_free_pages(), free_at_start, "every page came back");
    assert_eq!(mm.stats().bad_pages, 0);
}

/// The reference drop under a speculative reference-taker: one thread
/// allocates and frees through its cache while another calls `get_page` /
/// `put_page` on PFNs near the owner's latest page. A free that stored the
/// free state over a reference taken meanwhile would lose it and show up
/// as a refcount error, a bad page or a broken invariant.
#[test]
fn speculative_references_never_race_the_cached_free() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
    let mm = Arc::new(MemoryMapBuilder::with_memory(16 << 20).nr_cpus(2).thread_caches(true).build().unwrap());
    let zone = mm.zones().iter().find(|z| z.managed_pages() > 0).unwrap().span();
    let stop = Arc::new(AtomicBool::new(false));
    let latest = Arc::new(AtomicU64::new(zone.start));
    let owner = {
        let (mm, latest) = (Arc::clone(&mm), Arc::clone(&latest));
        thread::spawn(move || {
            let mut held = std::collections::VecDeque::new();
            for _ in 0..1_000_000u64 {
                let pfn = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
                latest.store(pfn.0, Relaxed);
                held.push_back(pfn);
                if held.len() > 16 {
                    mm.free_pages(held.pop_front().unwrap(), 0).unwrap();
                }
            }
            for pfn in held {
                mm.free_pages(pfn, 0).unwrap();
            }
        })
    };
    let taker = {
        let (mm, latest, stop) = (Arc::clone(&mm), Arc::clone(&latest), Arc::clone(&stop));
        thread::spawn(move || {
            let mut rng = XorShift64::new(7);
            let mut taken = 0u64;
            while !stop.load(Relaxed) {
                let x = rng.next_u64();
                let near = (latest.load(Relaxed) + x % 64).saturating_sub(32);
                let pfn = Pfn(if x & 1 == 0 {
                    near.clamp(zone.start, zone.end - 1)
                } else {
                    zone.start + x % (zone.end - zone.start)
                });
                if mm.get_page(pfn).is_ok() {
                    taken += 1;
                    mm.put_page(pfn).unwrap();
                }
            }
            taken
        })
    };
    owner.join().unwrap();
    stop.store(true, Relaxed);
    let taken = taker.join().unwrap();
    assert_eq!(mm.stats().bad_pages, 0);
    mm.drain_all_pages();
    mm.check_invariants().unwrap();
    let managed: u64 = mm.zones().iter().map(|z| z.managed_pages()).sum();
    assert_eq!(mm.nr_free_pages(), managed);
    eprintln!("speculative references taken: {taken}");
}

std::thread_local! {
    static CPU: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// A thread's cache follows it to another node at its next refill, and a
/// request that must stay on the current node never takes a cached page.
#[test]
fn a_thread_that_changes_node_refills_from_the_new_one() {
    const NODE_PAGES: u64 = 4096;
    let mm = MemoryMapBuilder::new()
        .zone(0, mmkit::ZoneType::Normal, 0..NODE_PAGES)
        .zone(1, mmkit::ZoneType::Normal, NODE_PAGES..2 * NODE_PAGES)
        .nr_cpus(2)
        .cpu_node(0, 0)
        .cpu_node(1, 1)
        .cpu_id_fn(|| CPU.with(|c| c.get()))
        .min_free_kbytes(128)
        .thread_caches(true)
        .build()
        .unwrap();
    let node_of = |pfn: Pfn| pfn.0 / NODE_PAGES;
    CPU.with(|c| c.set(0));
    let first = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
    assert_eq!(node_of(first), 0);
    mm.free_pages(first, 0).unwrap();
    assert!(mm.nr_pcp_pages() > 0, "node 0 pages cached");
    // The thread now runs on node 1.
    CPU.with(|c| c.set(1));
    let here = mm.alloc_pages(Gfp::KERNEL | Gfp::THISNODE, 0).unwrap();
    assert_eq!(node_of(here), 1, "THISNODE bypasses the cache");
    let mut held = vec![here];
    for _ in 0..200 {
        held.push(mm.alloc_pages(Gfp::KERNEL, 0).unwrap());
    }
    assert!(held[100..].iter().all(|&p| node_of(p) == 1), "after the cached pages ran out, node 1's");
    for p in held {
        mm.free_pages(p, 0).unwrap();
    }
    mm.drain_all_pages();
    mm.check_invariants().unwrap();
}

/// A thread that only frees (the consumer of pages another thread
/// allocates) caches what it frees, in its first page's zone and type;
/// its first allocation of another type flushes them.
#[test]
fn a_consumer_thread_caches_what_it_frees() {
    let mm = Arc::new(map());
    let pages: Vec<Pfn> = (0..16).map(|_| mm.alloc_pages(Gfp::KERNEL, 0).unwrap()).collect();
    let movable = mm.alloc_pages(Gfp::HIGHUSER_MOVABLE, 0).unwrap();
    let consumer = Worker::start(Arc::clone(&mm));
    consumer.ask(Cmd::Free(pages));
    // A drain from here empties every list and this thread's cache, not
    // the idle consumer's.
    mm.drain_all_pages();
    assert!(mm.nr_pcp_pages() > 0, "the consumer's cache holds what it freed");
    mm.check_invariants().unwrap();
    // A page of another type is not mixed in: it takes the lists.
    consumer.ask(Cmd::Free(vec![movable]));
    mm.check_invariants().unwrap();
    // Its first allocation of another type flushes the cache to the lists.
    let got = consumer.ask(Cmd::Alloc(Gfp::HIGHUSER_MOVABLE, 1));
    consumer.ask(Cmd::Free(got));
    consumer.stop();
    mm.drain_all_pages();
    mm.check_invariants().unwrap();
    let managed: u64 = mm.zones().iter().map(|z| z.managed_pages()).sum();
    assert_eq!(mm.nr_free_pages(), managed);
}
