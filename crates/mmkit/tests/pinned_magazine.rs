//! The pinned handle's magazine (`page_alloc::cache::pinned`) under a long-lived
//! [`PinnedCpu`](mmkit::PinnedCpu): random sequences of order-0 and higher
//! allocations with several GFP masks, frees through the handle and (after
//! a hand-over) through the shared API, frees and references refused for
//! pages still local to the CPU, double frees, extra references, embedder
//! flags left set, hardware poison, drain requests and re-pinning (which
//! hands over what is still out), against a model of the live blocks.
//!
//! Properties:
//! 1. no page is handed out twice, and a poisoned page never again;
//! 2. every bad free (double, wrong order, a foreign free of a local page,
//!    flags set) is a typed error, and a refused free or reference changes
//!    nothing the model can see;
//! 3. conservation and `check_invariants()` whenever the handle is dropped
//!    (a pinned CPU's lists cannot be inspected while it is held).

use mmkit::Cpus;
use mmkit::{
    FreeError, Gfp, MemoryFailure, MemoryMapBuilder, PageAllocator, PageError, PageFlags, Pfn, PinnedCpu, Report,
};
use proptest::prelude::*;
use std::collections::BTreeSet;

mod live_blocks;
use live_blocks::{two_zone_map, LiveBlocks};

#[derive(Clone, Debug)]
enum Op {
    Alloc { gfp: usize, order: u32 },
    Free { pick: usize, shared: bool },
    FreeTwice { pick: usize },
    WrongOrder { pick: usize },
    ExtraReference { pick: usize },
    FlagsLeftSet { pick: usize },
    Poison { pick: usize },
    DrainRequest,
    Repin { cpu: usize },
}

const GFPS: [Gfp; 4] = [Gfp::KERNEL, Gfp::HIGHUSER_MOVABLE, Gfp::ATOMIC, Gfp::DMA32];

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..GFPS.len(), prop_oneof![4 => Just(0u32), 1 => Just(1), 1 => Just(3)])
            .prop_map(|(gfp, order)| Op::Alloc { gfp, order }),
        6 => (any::<usize>(), prop::bool::weighted(0.2)).prop_map(|(pick, shared)| Op::Free { pick, shared }),
        1 => any::<usize>().prop_map(|pick| Op::FreeTwice { pick }),
        1 => any::<usize>().prop_map(|pick| Op::WrongOrder { pick }),
        1 => any::<usize>().prop_map(|pick| Op::ExtraReference { pick }),
        1 => any::<usize>().prop_map(|pick| Op::FlagsLeftSet { pick }),
        1 => any::<usize>().prop_map(|pick| Op::Poison { pick }),
        1 => Just(Op::DrainRequest),
        1 => (0..2usize).prop_map(|cpu| Op::Repin { cpu }),
    ]
}

fn map() -> PageAllocator {
    two_zone_map().nr_cpus(2).build().unwrap()
}

/// The live blocks, and the pages taken out of service by poison or leaked
/// as bad pages (no block may hold one again).
#[derive(Default)]
struct Model {
    blocks: LiveBlocks,
    gone: BTreeSet<u64>,
}

impl Model {
    fn insert(&mut self, mm: &PageAllocator, pfn: Pfn, order: u32) {
        assert!(
            self.gone.range(pfn.0..pfn.0 + (1 << order)).next().is_none(),
            "block {pfn} holds a page out of service"
        );
        self.blocks.insert(mm, pfn, order);
    }
}

fn check(mm: &PageAllocator, model: &Model) {
    assert_eq!(Cpus::new(mm).drain_all_pages(), 0);
    Report::new(mm).check_invariants().unwrap();
    let live: u64 = model.blocks.live.values().map(|&order| 1u64 << order).sum();
    let managed: u64 = mm.zones().iter().map(|z| z.managed_pages()).sum();
    assert_eq!(
        Report::new(mm).nr_free_pages() + Report::new(mm).nr_pcp_pages() + live + model.gone.len() as u64,
        managed
    );
}

fn run(ops: Vec<Op>) {
    let mm = map();
    let mut model = Model::default();
    let mut pinned: Option<PinnedCpu<'_>> = Some(Cpus::new(&mm).pin_cpu(0).unwrap());
    for op in ops {
        let cpu = pinned.as_mut().expect("held between steps");
        match op {
            Op::Alloc { gfp, order } => {
                if let Ok(pfn) = cpu.alloc_pages(GFPS[gfp], order) {
                    model.insert(&mm, pfn, order);
                }
            }
            Op::Free { pick, shared } => {
                if let Some((pfn, order)) = model.blocks.pick(pick) {
                    // The shared API on another CPU stands for a free from
                    // another thread: refused while the page is this CPU's,
                    // fine once handed over.
                    let freed = if shared {
                        let foreign = Cpus::new(&mm).cpu(1).unwrap().free_pages(pfn, order);
                        if let Err(FreeError::CpuLocal { pfn: refused, cpu: owner }) = foreign {
                            assert_eq!((refused, owner, order), (pfn, cpu.cpu_id(), 0));
                            assert_eq!(mm.get_page(pfn), Err(PageError::CpuLocal(pfn)));
                            cpu.hand_over(pfn).unwrap();
                            Cpus::new(&mm).cpu(1).unwrap().free_pages(pfn, order)
                        } else {
                            foreign
                        }
                    } else {
                        cpu.free_pages(pfn, order)
                    };
                    freed.unwrap();
                    model.blocks.live.remove(&pfn.0);
                }
            }
            Op::FreeTwice { pick } => {
                if let Some((pfn, order)) = model.blocks.pick(pick) {
                    cpu.free_pages(pfn, order).unwrap();
                    model.blocks.live.remove(&pfn.0);
                    assert!(cpu.free_pages(pfn, order).is_err(), "second free of {pfn} through the handle");
                    assert!(mm.free_pages(pfn, order).is_err(), "second free of {pfn} through the shared API");
                }
            }
            Op::WrongOrder { pick } => {
                if let Some((pfn, order)) = model.blocks.pick(pick) {
                    let given = order + 1;
                    assert_eq!(cpu.free_pages(pfn, given), Err(FreeError::WrongOrder { pfn, allocated: order, given }));
                }
            }
            Op::ExtraReference { pick } => {
                if let Some((pfn, order)) = model.blocks.pick(pick) {
                    // A page local to the CPU takes no reference until the
                    // handle hands it over.
                    if mm.get_page(pfn) == Err(PageError::CpuLocal(pfn)) {
                        cpu.hand_over(pfn).unwrap();
                    } else {
                        mm.put_page(pfn).unwrap();
                    }
                    assert_eq!(mm.get_page(pfn), Ok(2));
                    // Drops ours; the block lives on with the other reference.
                    cpu.free_pages(pfn, order).unwrap();
                    if order == 0 {
                        assert_eq!(mm.get_page(pfn), Ok(2), "still in use after the first free");
                        mm.put_page(pfn).unwrap();
                    } else {
                        // A non-compound block keeps only its first page;
                        // the rest went back (Linux's __free_pages).
                        model.blocks.live.insert(pfn.0, 0);
                    }
                }
            }
            Op::FlagsLeftSet { pick } => {
                if let Some((pfn, order)) = model.blocks.pick(pick) {
                    mm.set_page_flags(pfn, PageFlags::LRU).unwrap();
                    assert!(matches!(cpu.free_pages(pfn, order), Err(FreeError::BadPage { .. })));
                    model.blocks.live.remove(&pfn.0);
                    model.gone.extend(pfn.0..pfn.0 + (1 << order));
                }
            }
            Op::Poison { pick } => {
                if let Some((pfn, order)) = model.blocks.pick(pick) {
                    assert_eq!(mm.memory_failure(pfn), Ok(MemoryFailure::InUse));
                    cpu.free_pages(pfn, order).unwrap();
                    model.blocks.live.remove(&pfn.0);
                    // Only the poisoned page leaves service; the rest of a
                    // larger block is freed.
                    model.gone.insert(pfn.0);
                }
            }
            Op::DrainRequest => assert_eq!(Cpus::new(&mm).drain_all_pages(), 1, "the pinned CPU defers its drain"),
            Op::Repin { cpu } => {
                drop(pinned.take());
                check(&mm, &model);
                pinned = Some(Cpus::new(&mm).pin_cpu(cpu).unwrap());
            }
        }
    }
    drop(pinned);
    check(&mm, &model);
    for (pfn, order) in std::mem::take(&mut model.blocks.live) {
        mm.free_pages(Pfn(pfn), order).unwrap();
    }
    check(&mm, &model);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]
    #[test]
    fn a_long_lived_pinned_handle_matches_the_model(ops in prop::collection::vec(op(), 1..300)) {
        run(ops);
    }
}

/// Two pinned workers hand pages to each other: each writes a pattern
/// into the pages it allocates and sends some to the other, which checks
/// the pattern and frees them through its own handle (a cross-CPU free on
/// the magazine's path), while a third thread requests drains.
#[test]
fn pinned_workers_exchange_pages_and_keep_their_bytes() {
    use std::sync::mpsc;
    let mm = MemoryMapBuilder::with_memory(64 << 20)
        .backing(mmkit::Backing::RealMemory(mmkit::HugePages::None))
        .nr_cpus(2)
        .build()
        .unwrap();
    let page_size = 4096;
    let (to_b, from_a) = mpsc::sync_channel::<(Pfn, u64)>(256);
    let (to_a, from_b) = mpsc::sync_channel::<(Pfn, u64)>(256);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let write = |pfn: Pfn, stamp: u64| {
        let addr = mm.page_address(pfn).unwrap();
        // SAFETY: the page is allocated and held by this thread only.
        let bytes = unsafe { std::slice::from_raw_parts_mut(addr.as_ptr(), page_size) };
        for (i, chunk) in bytes.chunks_exact_mut(8).enumerate() {
            chunk.copy_from_slice(&(stamp ^ i as u64).to_le_bytes());
        }
    };
    let verify = |pfn: Pfn, stamp: u64| {
        let addr = mm.page_address(pfn).unwrap();
        // SAFETY: the page was handed to this thread and nobody else holds it.
        let bytes = unsafe { std::slice::from_raw_parts(addr.as_ptr(), page_size) };
        for (i, chunk) in bytes.chunks_exact(8).enumerate() {
            assert_eq!(u64::from_le_bytes(chunk.try_into().unwrap()), stamp ^ i as u64, "page {pfn} torn");
        }
    };
    let worker = |cpu_id: usize, send: mpsc::SyncSender<(Pfn, u64)>, recv: mpsc::Receiver<(Pfn, u64)>| {
        let mut cpu = Cpus::new(&mm).pin_cpu(cpu_id).unwrap();
        let mut mine = Vec::new();
        for round in 0..20_000u64 {
            let stamp = (cpu_id as u64) << 56 | round;
            let pfn = cpu.alloc_pages(Gfp::KERNEL, 0).unwrap();
            write(pfn, stamp);
            if round % 3 == 0 {
                // Leaving this CPU: one atomic, then any thread may free it.
                cpu.hand_over(pfn).unwrap();
                send.send((pfn, stamp)).unwrap();
            } else {
                mine.push((pfn, stamp));
            }
            while let Ok((pfn, stamp)) = recv.try_recv() {
                verify(pfn, stamp);
                cpu.free_pages(pfn, 0).unwrap();
            }
            if mine.len() > 48 {
                for (pfn, stamp) in mine.drain(..40) {
                    verify(pfn, stamp);
                    cpu.free_pages(pfn, 0).unwrap();
                }
            }
        }
        drop(send);
        for (pfn, stamp) in mine {
            verify(pfn, stamp);
            cpu.free_pages(pfn, 0).unwrap();
        }
        for (pfn, stamp) in recv {
            verify(pfn, stamp);
            cpu.free_pages(pfn, 0).unwrap();
        }
    };
    std::thread::scope(|s| {
        let a = s.spawn(|| worker(0, to_b, from_b));
        let b = s.spawn(|| worker(1, to_a, from_a));
        s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                Cpus::new(&mm).drain_all_pages();
                std::thread::yield_now();
            }
        });
        let results = [a.join(), b.join()];
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for r in results {
            if let Err(panic) = r {
                std::panic::resume_unwind(panic);
            }
        }
    });
    assert_eq!(Cpus::new(&mm).drain_all_pages(), 0);
    Report::new(&mm).check_invariants().unwrap();
    let managed: u64 = mm.zones().iter().map(|z| z.managed_pages()).sum();
    assert_eq!(Report::new(&mm).nr_free_pages(), managed);
}

/// The `LOCAL` protocol under a speculative reference-taker: one pinned
/// owner allocates and frees with plain stores (handing every fourth page
/// over first), while another thread calls `get_page` / `put_page` on
/// PFNs all over the zone. A reference taken on a page the owner was
/// freeing with a plain store would be lost and show up as a refcount
/// error, a bad page or a broken invariant.
#[test]
fn speculative_references_never_race_the_owners_plain_free() {
    let mm = MemoryMapBuilder::with_memory(16 << 20).nr_cpus(2).build().unwrap();
    let zone = mm.zones().iter().find(|z| z.managed_pages() > 0).unwrap().span();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let taken = std::sync::atomic::AtomicU64::new(0);
    // The owner publishes its latest page so the other thread aims there.
    let latest = std::sync::atomic::AtomicU64::new(zone.start);
    std::thread::scope(|s| {
        let owner = s.spawn(|| {
            let mut cpu = Cpus::new(&mm).pin_cpu(0).unwrap();
            let mut held = std::collections::VecDeque::new();
            for round in 0..2_000_000u64 {
                let pfn = cpu.alloc_pages(Gfp::KERNEL, 0).unwrap();
                latest.store(pfn.0, std::sync::atomic::Ordering::Relaxed);
                if round % 4 == 0 {
                    cpu.hand_over(pfn).unwrap();
                }
                held.push_back(pfn);
                if held.len() > 16 {
                    let old = held.pop_front().unwrap();
                    cpu.free_pages(old, 0).unwrap();
                }
            }
            for pfn in held {
                cpu.free_pages(pfn, 0).unwrap();
            }
        });
        s.spawn(|| {
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let near = latest.load(std::sync::atomic::Ordering::Relaxed) + x % 64;
                let pfn = Pfn(if x & 1 == 0 && near < zone.end {
                    near.saturating_sub(32).max(zone.start)
                } else {
                    zone.start + x % (zone.end - zone.start)
                });
                if mm.get_page(pfn).is_ok() {
                    taken.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    mm.put_page(pfn).unwrap();
                }
            }
        });
        owner.join().unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    assert_eq!(Report::new(&mm).stats().bad_pages, 0);
    assert_eq!(Cpus::new(&mm).drain_all_pages(), 0);
    Report::new(&mm).check_invariants().unwrap();
    let managed: u64 = mm.zones().iter().map(|z| z.managed_pages()).sum();
    assert_eq!(Report::new(&mm).nr_free_pages(), managed);
    eprintln!("speculative references taken: {}", taken.into_inner());
}

/// `LOCAL` means the same on every CPU: pages a pinned handle hands out,
/// from its magazine or from a zone it holds locked, are its own on CPU 0
/// as on CPU 63 (the CPU number takes the refcount's place in the
/// descriptor word, so no CPU is past the field's width). Other threads'
/// frees and references are refused until the owner hands the page over.
#[test]
fn every_cpu_hands_out_local_pages() {
    let mm = two_zone_map().nr_cpus(64).build().unwrap();
    for cpu in [0, 1, 31, 32, 33, 40, 63] {
        let mut pinned = Cpus::new(&mm).pin_cpu(cpu).unwrap();
        let page = pinned.alloc_pages(Gfp::KERNEL, 0).unwrap();
        assert_eq!(mm.free_pages(page, 0), Err(FreeError::CpuLocal { pfn: page, cpu }), "cpu {cpu}");
        assert_eq!(mm.get_page(page), Err(PageError::CpuLocal(page)), "cpu {cpu}");
        assert_eq!(mm.page_count(page), Ok(1), "a LOCAL page has its owner's one reference");
        pinned.hand_over(page).unwrap();
        assert_eq!(mm.page_count(page), Ok(1), "handed over with that reference");
        assert_eq!(mm.get_page(page), Ok(2));
        mm.put_page(page).unwrap();

        let block = {
            let mut zone = pinned.lock_zone(Gfp::KERNEL).unwrap();
            let block = zone.alloc_pages(Gfp::KERNEL, 3).unwrap();
            let own = zone.alloc_pages(Gfp::KERNEL, 2).unwrap();
            assert_eq!(mm.free_pages(own, 2), Err(FreeError::CpuLocal { pfn: own, cpu }));
            zone.free_pages(own, 2).unwrap();
            block
        };
        assert_eq!(mm.free_pages(block, 3), Err(FreeError::CpuLocal { pfn: block, cpu }));
        pinned.free_pages(block, 3).unwrap();
        drop(pinned);
        mm.free_pages(page, 0).unwrap();
        Report::new(&mm).check_invariants().unwrap();
    }
}
