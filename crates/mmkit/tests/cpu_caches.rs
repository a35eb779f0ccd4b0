//! The shared API through the per-CPU order-0 cache
//! (`MemoryMapBuilder::cpu_caches`, on by default): a property test of
//! random operation sequences against the live-block model, with a second,
//! long-lived thread that allocates and frees on command (so pages sit in
//! CPU caches while the main thread drains and checks) and short-lived
//! threads that free pages allocated here and exit; bad input on the
//! cached path; drains that reach idle threads' CPUs; many threads at
//! once; and stress tests with real memory that pass pages between threads
//! and check a pattern in every page before freeing it.
//!
//! Where restartable sequences are unavailable the map has no cache
//! ([`Cpus::has_cpu_caches`]); the tests then run on the locked
//! lists and say so.
//!
//! Properties, after every step:
//! 1. no page is handed out twice, every block aligned and in one zone;
//! 2. per zone, buddy-free + cached (lists and CPU caches) + live pages
//!    == managed pages;
//! 3. `check_invariants()` holds, counting pages in CPU caches;
//! 4. a second free, a wrong order, a page with another reference are
//!    refused or handled exactly as without caches.

use mmkit::Cpus;
use mmkit::{FreeError, Gfp, MemoryMapBuilder, PageAllocator, Pfn, Report};
use mmkit_testkit::XorShift64;
use proptest::prelude::*;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;

mod live_blocks;
use live_blocks::{pattern, real_memory_map, two_zone_map, LiveBlocks};

const GFPS: [Gfp; 5] = [Gfp::KERNEL, Gfp::HIGHUSER_MOVABLE, Gfp::ATOMIC, Gfp::KERNEL.union(Gfp::ZERO), Gfp::DMA32];

fn map() -> PageAllocator {
    let mm = two_zone_map().nr_cpus(2).build().unwrap();
    if !Cpus::new(&mm).has_cpu_caches() {
        eprintln!("no restartable sequences here: the shared API runs on the locked lists");
    }
    mm
}

/// What the helper thread is asked to do; it answers every command.
enum Cmd {
    Alloc(Gfp, usize),
    Free(Vec<Pfn>),
}

/// A long-lived thread, idle between commands.
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

    /// Joins the thread.
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
        // Order 4 is the map's pageblock order: the cache's block stacks.
        6 => (prop_oneof![Just(0u32), Just(0), Just(0), Just(1), Just(3), Just(4)], 0..GFPS.len())
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
                    let before = Report::new(&mm).zone_snapshots();
                    assert!(matches!(mm.free_pages(pfn, order + 1), Err(FreeError::WrongOrder { .. })));
                    assert_eq!(Report::new(&mm).zone_snapshots(), before, "a refused free changes nothing");
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
                // The page goes to the cache of the CPU that thread ran
                // on, which outlives it.
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
            Op::Drain => assert_eq!(Cpus::new(&mm).drain_all_pages(), 0, "no CPU is pinned"),
        }
        model.check(&mm);
    }
    for (pfn, order) in std::mem::take(&mut model.live) {
        mm.free_pages(Pfn(pfn), order).unwrap();
    }
    worker.stop();
    model.check(&mm);
    Cpus::new(&mm).drain_all_pages();
    let managed: u64 = mm.zones().iter().map(|z| z.managed_pages()).sum();
    assert_eq!(Report::new(&mm).nr_free_pages(), managed, "every page came back");
    assert_eq!(Report::new(&mm).nr_pcp_pages(), 0);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn cpu_caches_match_the_model(ops in prop::collection::vec(op(), 1..120)) {
        run(ops);
    }
}

#[test]
fn bad_input_on_the_cached_path_changes_nothing() {
    let mm = map();
    let p = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
    mm.free_pages(p, 0).unwrap();
    assert!(Report::new(&mm).nr_pcp_pages() > 0, "the page is cached");
    let report = Report::new(&mm);
    let before = report.zone_snapshots();
    assert_eq!(mm.free_pages(p, 0), Err(FreeError::DoubleFree(p)));
    assert_eq!(mm.put_page(p), Err(FreeError::DoubleFree(p)));
    assert!(mm.free_pages(Pfn(1 << 40), 0).is_err());
    assert!(mm.free_pages(Pfn(3), 0).is_err(), "a hole below the first zone");
    assert_eq!(report.zone_snapshots(), before);
    report.check_invariants().unwrap();
}

/// A drain reaches the caches of CPUs whose threads are idle: it stops
/// each CPU's stacks and takes their pages itself (`sys`'s restartable sequences' stop
/// protocol), nobody is asked to flush.
#[test]
fn a_drain_empties_the_caches_of_idle_threads_at_once() {
    let mm = Arc::new(map());
    let worker = Worker::start(Arc::clone(&mm));
    let pages = worker.ask(Cmd::Alloc(Gfp::KERNEL, 8));
    worker.ask(Cmd::Free(pages));
    if Cpus::new(&mm).has_cpu_caches() {
        assert!(Report::new(&mm).nr_pcp_pages() > 0, "the freed pages are cached");
    }
    assert_eq!(Cpus::new(&mm).drain_all_pages(), 0);
    assert_eq!(Report::new(&mm).nr_pcp_pages(), 0, "the idle worker's CPU cache was emptied by the drain");
    Report::new(&mm).check_invariants().unwrap();
    // The worker goes on as before.
    let one = worker.ask(Cmd::Alloc(Gfp::KERNEL, 1));
    worker.ask(Cmd::Free(one));
    worker.stop();
    Cpus::new(&mm).drain_all_pages();
    assert_eq!(Report::new(&mm).nr_pcp_pages(), 0);
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn many_more_threads_than_cpus() {
    let mm = Arc::new(map());
    // Many threads on two CPUs, all alive at once: sequences are preempted
    // and restarted, threads migrate between allocation and free.
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
    Cpus::new(&mm).drain_all_pages();
    Report::new(&mm).check_invariants().unwrap();
    let managed: u64 = mm.zones().iter().map(|z| z.managed_pages()).sum();
    assert_eq!(Report::new(&mm).nr_free_pages(), managed);
}

#[test]
fn a_poisoned_page_in_a_cache_is_never_handed_out() {
    let mm = MemoryMapBuilder::with_memory(64 << 20).nr_cpus(1).build().unwrap();
    let pages: Vec<Pfn> = (0..8).map(|_| mm.alloc_pages(Gfp::KERNEL, 0).unwrap()).collect();
    for &p in &pages {
        mm.free_pages(p, 0).unwrap();
    }
    let victim = pages[3];
    // memory_failure drains every CPU's cache, then takes the page.
    assert!(mm.memory_failure(victim).is_ok());
    let again: Vec<Pfn> = (0..64).map(|_| mm.alloc_pages(Gfp::KERNEL, 0).unwrap()).collect();
    assert!(!again.contains(&victim));
    for p in again {
        mm.free_pages(p, 0).unwrap();
    }
    assert_eq!(mm.free_pages(victim, 0), Err(FreeError::Poisoned(victim)));
    Cpus::new(&mm).drain_all_pages();
    Report::new(&mm).check_invariants().unwrap();
}

/// `threads` threads (more than the two CPUs: sequences are preempted
/// and restarted, threads migrate) allocate through the CPU caches, write a
/// pattern, pass half of their pages to the next thread (which checks and
/// frees them: a free on another CPU than the allocation, often) and free
/// the rest themselves, while thread 0 drains every CPU now and then.
fn stress_cross_thread_frees(threads: usize) {
    let mm = Arc::new(real_memory_map());
    let free_at_start = Report::new(&mm).nr_free_pages() + Report::new(&mm).nr_pcp_pages();
    let (senders, receivers): (Vec<_>, Vec<_>) = (0..threads).map(|_| mpsc::channel::<(Pfn, u64)>()).unzip();
    let handles: Vec<_> = receivers
        .into_iter()
        .enumerate()
        .map(|(t, inbox)| {
            let mm = Arc::clone(&mm);
            let next = senders[(t + 1) % threads].clone();
            thread::spawn(move || {
                let mut rng = XorShift64::new(0x9e37 + t as u64);
                let mut held: Vec<(Pfn, u64)> = Vec::new();
                for round in 0..20_000u64 {
                    if t == 0 && round % 2048 == 0 {
                        Cpus::new(&mm).drain_all_pages();
                    }
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
    Cpus::new(&mm).drain_all_pages();
    Report::new(&mm).check_invariants().unwrap();
    assert_eq!(Report::new(&mm).nr_pcp_pages(), 0);
    assert_eq!(Report::new(&mm).nr_free_pages(), free_at_start, "every page came back");
    assert_eq!(Report::new(&mm).stats().bad_pages, 0);
}

#[test]
fn stress_cross_thread_frees_2_threads() {
    stress_cross_thread_frees(2);
}

#[test]
fn stress_cross_thread_frees_4_threads() {
    stress_cross_thread_frees(4);
}

#[test]
fn stress_cross_thread_frees_8_threads() {
    stress_cross_thread_frees(8);
}

/// The reference drop under a speculative reference-taker: one thread
/// allocates and frees through its CPU's cache while another calls `get_page` /
/// `put_page` on PFNs near the owner's latest page. A free that stored the
/// free state over a reference taken meanwhile would lose it and show up
/// as a refcount error, a bad page or a broken invariant.
#[test]
fn speculative_references_never_race_the_cached_free() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
    let mm = Arc::new(MemoryMapBuilder::with_memory(16 << 20).nr_cpus(2).build().unwrap());
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
    assert_eq!(Report::new(&mm).stats().bad_pages, 0);
    Cpus::new(&mm).drain_all_pages();
    Report::new(&mm).check_invariants().unwrap();
    let managed: u64 = mm.zones().iter().map(|z| z.managed_pages()).sum();
    assert_eq!(Report::new(&mm).nr_free_pages(), managed);
    eprintln!("speculative references taken: {taken}");
}

/// A thread that only frees (the consumer of pages another thread
/// allocates) caches what it frees on its CPU, each page on the stack of
/// its zone and type; a drain from any thread empties them.
#[test]
fn a_consumer_thread_caches_what_it_frees() {
    let mm = Arc::new(map());
    let pages: Vec<Pfn> = (0..16).map(|_| mm.alloc_pages(Gfp::KERNEL, 0).unwrap()).collect();
    let movable = mm.alloc_pages(Gfp::HIGHUSER_MOVABLE, 0).unwrap();
    let consumer = Worker::start(Arc::clone(&mm));
    consumer.ask(Cmd::Free(pages));
    if Cpus::new(&mm).has_cpu_caches() {
        assert!(Report::new(&mm).nr_pcp_pages() >= 16, "the consumer's CPU cache holds what it freed");
    }
    let report = Report::new(&mm);
    report.check_invariants().unwrap();
    // A page of another type goes on its own stack.
    consumer.ask(Cmd::Free(vec![movable]));
    report.check_invariants().unwrap();
    Cpus::new(&mm).drain_all_pages();
    assert_eq!(Report::new(&mm).nr_pcp_pages(), 0, "a drain from here reaches the consumer's CPU");
    let got = consumer.ask(Cmd::Alloc(Gfp::HIGHUSER_MOVABLE, 1));
    consumer.ask(Cmd::Free(got));
    consumer.stop();
    Cpus::new(&mm).drain_all_pages();
    report.check_invariants().unwrap();
    let managed: u64 = mm.zones().iter().map(|z| z.managed_pages()).sum();
    assert_eq!(Report::new(&mm).nr_free_pages(), managed);
}

/// A pinned CPU's cache is emptied when it is pinned and stays out of use
/// until the handle is dropped: other threads running there go to the
/// buddy, as they do for its lists (a trace replay pins every CPU, and
/// compaction's frees must then reach the buddy to merge).
#[test]
fn pinning_a_cpu_empties_its_cache_and_keeps_others_off_it() {
    let mm = MemoryMapBuilder::with_memory(64 << 20).nr_cpus(2).build().unwrap();
    if !Cpus::new(&mm).has_cpu_caches() {
        eprintln!("skipped: no per-CPU cache here");
        return;
    }
    let pages: Vec<Pfn> = (0..8).map(|_| mm.alloc_pages(Gfp::KERNEL, 0).unwrap()).collect();
    for &p in &pages[..4] {
        mm.free_pages(p, 0).unwrap();
    }
    assert!(Report::new(&mm).nr_pcp_pages() >= 4, "cached");
    {
        // Every CPU of the map: whichever this thread runs on is pinned.
        let pins = (Cpus::new(&mm).pin_cpu(0).unwrap(), Cpus::new(&mm).pin_cpu(1).unwrap());
        assert_eq!(Report::new(&mm).nr_pcp_pages(), 0, "pinning emptied the caches");
        for &p in &pages[4..] {
            mm.free_pages(p, 0).unwrap();
        }
        let p = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
        mm.free_pages(p, 0).unwrap();
        assert_eq!(Report::new(&mm).nr_pcp_pages(), 0, "frees on a pinned CPU skip its cache");
        drop(pins);
    }
    let p = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
    mm.free_pages(p, 0).unwrap();
    assert!(Report::new(&mm).nr_pcp_pages() > 0, "cached again once unpinned");
    assert_eq!(Cpus::new(&mm).drain_all_pages(), 0);
    Report::new(&mm).check_invariants().unwrap();
    let managed: u64 = mm.zones().iter().map(|z| z.managed_pages()).sum();
    assert_eq!(Report::new(&mm).nr_free_pages(), managed);
}
