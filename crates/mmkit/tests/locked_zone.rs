//! A zone held locked by a pinned CPU (`PinnedCpu::lock_zone`): a property
//! test of random operation sequences against the live-block model, bad
//! input, hand-over and drops with higher-order `LOCAL` blocks out,
//! watermarks, hardware poison, and a stress test with real memory where
//! the holder, a shared-API thread and a speculative-reference thread run
//! at once.
//!
//! Properties, after every sequence and at every unpin:
//! 1. no page is handed out twice, every block aligned and in one zone;
//! 2. per zone, buddy-free + cached + live pages == managed pages, and
//!    `check_invariants()` holds;
//! 3. a block the holder hands out is `LOCAL` to its CPU until freed,
//!    handed over or the pinned handle is dropped: other paths get
//!    `CpuLocal` and change nothing;
//! 4. bad input through the locked zone gets the shared API's typed error.

use mmkit::Cpus;
use mmkit::{FreeError, Gfp, LockedZone, PageAllocator, PageError, PageFlags, Pfn, PinnedCpu, Report};
use mmkit_testkit::XorShift64;
use proptest::prelude::*;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{mpsc, Arc};
use std::thread;

mod live_blocks;
use live_blocks::{pattern, real_memory_map, two_zone_map, LiveBlocks};

const GFPS: [Gfp; 4] = [Gfp::KERNEL, Gfp::HIGHUSER_MOVABLE, Gfp::KERNEL.union(Gfp::COMP), Gfp::DMA32];

fn map(per_cpu_lists: bool) -> PageAllocator {
    two_zone_map().nr_cpus(2).per_cpu_lists(per_cpu_lists).build().unwrap()
}

fn is_local(mm: &PageAllocator, pfn: Pfn) -> bool {
    mm.page_flags(pfn).unwrap().contains(PageFlags::LOCAL)
}

#[derive(Clone, Debug)]
enum Op {
    /// Lock the zone of `GFPS[i]`, or unlock if locked.
    Lock(usize),
    /// Drop the pinned handle (and any lock), check, pin again.
    Repin,
    Alloc(usize, u32),
    Free(usize),
    /// Free through the shared API: refused for a `LOCAL` block.
    SharedFree(usize),
    HandOver(usize),
    WrongOrder(usize),
    Tail(usize),
    DoubleFree(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (0..GFPS.len()).prop_map(Op::Lock),
        1 => Just(Op::Repin),
        8 => (0..GFPS.len(), 0..7u32).prop_map(|(g, o)| Op::Alloc(g, o)),
        6 => any::<usize>().prop_map(Op::Free),
        2 => any::<usize>().prop_map(Op::SharedFree),
        1 => any::<usize>().prop_map(Op::HandOver),
        1 => any::<usize>().prop_map(Op::WrongOrder),
        1 => any::<usize>().prop_map(Op::Tail),
        1 => any::<usize>().prop_map(Op::DoubleFree),
    ]
}

/// CPU 0's pinned handle, with or without its zone locked.
enum Holder<'h, 'a> {
    Pinned(&'h mut PinnedCpu<'a>),
    Locked(LockedZone<'h, 'a>),
}

impl<'h, 'a> Holder<'h, 'a> {
    fn toggle(self, gfp: Gfp) -> Self {
        match self {
            Self::Pinned(cpu) => Self::Locked(cpu.lock_zone(gfp).unwrap()),
            Self::Locked(zone) => Self::Pinned(zone.unlock()),
        }
    }
    fn alloc(&mut self, gfp: Gfp, order: u32) -> Result<Pfn, mmkit::AllocError> {
        match self {
            Self::Pinned(cpu) => cpu.alloc_pages(gfp, order),
            Self::Locked(zone) => zone.alloc_pages(gfp, order),
        }
    }
    fn free(&mut self, pfn: Pfn, order: u32) -> Result<(), FreeError> {
        match self {
            Self::Pinned(cpu) => cpu.free_pages(pfn, order),
            Self::Locked(zone) => zone.free_pages(pfn, order),
        }
    }
    fn hand_over(&mut self, pfn: Pfn) -> Result<(), FreeError> {
        match self {
            Self::Pinned(cpu) => cpu.hand_over(pfn),
            Self::Locked(zone) => zone.hand_over(pfn),
        }
    }
    fn is_locked(&self) -> bool {
        matches!(self, Self::Locked(_))
    }
}

/// Runs `ops` with CPU 0 pinned; the zone is locked and unlocked as the
/// ops say. The model is the live blocks plus which of them are `LOCAL`.
fn run(ops: &[Op], per_cpu_lists: bool) {
    let mm = map(per_cpu_lists);
    let mut model = LiveBlocks::default();
    let mut local = BTreeSet::new();
    let mut ops = ops.iter();
    loop {
        let mut cpu = Cpus::new(&mm).pin_cpu(0).unwrap();
        let mut holder = Holder::Pinned(&mut cpu);
        let mut repin = false;
        for op in ops.by_ref() {
            match *op {
                Op::Lock(g) => holder = holder.toggle(GFPS[g]),
                Op::Repin => {
                    repin = true;
                    break;
                }
                Op::Alloc(g, order) => {
                    if let Ok(pfn) = holder.alloc(GFPS[g] | Gfp::NOWARN, order) {
                        model.insert(&mm, pfn, order);
                        if is_local(&mm, pfn) {
                            local.insert(pfn.0);
                        }
                    }
                }
                Op::Free(pick) => {
                    let Some((pfn, order)) = model.take(pick) else { continue };
                    assert_eq!(holder.free(pfn, order), Ok(()), "free of {pfn} order {order}");
                    local.remove(&pfn.0);
                }
                Op::SharedFree(pick) => {
                    let Some((pfn, order)) = model.pick(pick) else { continue };
                    if local.contains(&pfn.0) {
                        assert_eq!(mm.free_pages(pfn, order), Err(FreeError::CpuLocal { pfn, cpu: 0 }));
                        assert_eq!(mm.get_page(pfn), Err(PageError::CpuLocal(pfn)));
                        assert!(is_local(&mm, pfn), "a refused free leaves the block LOCAL");
                    } else if !holder.is_locked() {
                        // With the zone locked, this thread must not reach
                        // its lock through the shared API.
                        model.take(pick);
                        assert_eq!(mm.free_pages(pfn, order), Ok(()));
                    }
                }
                Op::HandOver(pick) => {
                    let Some((pfn, _)) = model.pick(pick) else { continue };
                    assert_eq!(holder.hand_over(pfn), Ok(()));
                    assert!(!is_local(&mm, pfn));
                    local.remove(&pfn.0);
                }
                Op::WrongOrder(pick) => {
                    let Some((pfn, order)) = model.pick(pick) else { continue };
                    let was_local = is_local(&mm, pfn);
                    let got = holder.free(pfn, order + 1);
                    assert_eq!(got, Err(FreeError::WrongOrder { pfn, allocated: order, given: order + 1 }));
                    assert_eq!(is_local(&mm, pfn), was_local, "a refused free changes nothing");
                }
                Op::Tail(pick) => {
                    let Some((pfn, order)) = model.pick(pick) else { continue };
                    if order > 0 {
                        let got = holder.free(Pfn(pfn.0 + 1), 0);
                        assert!(got.is_err(), "a tail page freed: {got:?}");
                    }
                }
                Op::DoubleFree(pick) => {
                    let Some((pfn, order)) = model.take(pick) else { continue };
                    assert_eq!(holder.free(pfn, order), Ok(()));
                    local.remove(&pfn.0);
                    let again = holder.free(pfn, order);
                    assert!(
                        matches!(again, Err(FreeError::DoubleFree(_) | FreeError::NotAllocated(_))),
                        "second free of {pfn}: {again:?}"
                    );
                }
            }
        }
        drop(holder);
        drop(cpu);
        // Dropping the pinned handle hands every LOCAL block over.
        for &pfn in &local {
            assert!(!is_local(&mm, Pfn(pfn)), "{pfn:#x} still LOCAL after the handle's drop");
        }
        local.clear();
        Cpus::new(&mm).drain_all_pages();
        model.check(&mm);
        if !repin {
            break;
        }
    }
    while let Some((pfn, order)) = model.take(0) {
        mm.free_pages(pfn, order).unwrap();
    }
    Cpus::new(&mm).drain_all_pages();
    model.check(&mm);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
    #[test]
    fn locked_zone_matches_the_model(ops in prop::collection::vec(op(), 1..150), lists in any::<bool>()) {
        run(&ops, lists);
    }
}

/// The holder's blocks are `LOCAL` (any order), refused elsewhere, and
/// freed after the lock is gone by their CPU, by the shared API once
/// handed over, or handed over when the pinned handle is dropped.
#[test]
fn higher_order_local_blocks_leave_by_every_door() {
    let mm = map(true);
    let before = Report::new(&mm).nr_free_pages();
    let mut cpu = Cpus::new(&mm).pin_cpu(0).unwrap();
    let (a, b, c) = {
        let mut zone = cpu.lock_zone(Gfp::KERNEL).unwrap();
        let blocks = [3, 5, 6].map(|order| zone.alloc_pages(Gfp::KERNEL, order).unwrap());
        blocks.iter().for_each(|&pfn| assert!(is_local(&mm, pfn)));
        (blocks[0], blocks[1], blocks[2])
    };
    assert_eq!(mm.free_pages(a, 3), Err(FreeError::CpuLocal { pfn: a, cpu: 0 }));
    assert_eq!(cpu.free_pages(a, 2), Err(FreeError::WrongOrder { pfn: a, allocated: 3, given: 2 }));
    assert!(is_local(&mm, a), "the refused free left the block as it was");
    cpu.free_pages(a, 3).unwrap();
    cpu.hand_over(b).unwrap();
    mm.free_pages(b, 5).unwrap();
    drop(cpu);
    assert!(!is_local(&mm, c), "dropping the handle handed the block over");
    mm.free_pages(c, 6).unwrap();
    Cpus::new(&mm).drain_all_pages();
    assert_eq!(Report::new(&mm).nr_free_pages(), before);
    Report::new(&mm).check_invariants().unwrap();
}

/// Bad input through a locked zone: the same typed errors as the shared
/// API, and nothing changes (free counts, the blocks' state).
#[test]
fn bad_input_through_a_locked_zone_changes_nothing() {
    let mm = map(false);
    // A block LOCAL to CPU 1 (its zone held, then released; the handle
    // stays alive so the block stays LOCAL).
    let mut cpu1 = Cpus::new(&mm).pin_cpu(1).unwrap();
    let other = cpu1.lock_zone(Gfp::KERNEL).unwrap().alloc_pages(Gfp::KERNEL, 2).unwrap();
    let mut cpu = Cpus::new(&mm).pin_cpu(0).unwrap();
    let frozen = cpu.alloc_frozen_pages(Gfp::KERNEL, 0).unwrap();
    let mut zone = cpu.lock_zone(Gfp::KERNEL).unwrap();
    let mine = zone.alloc_pages(Gfp::KERNEL, 4).unwrap();
    let free_before = zone.nr_free_pages();
    let end = mm.zones().iter().map(|z| z.span().end).max().unwrap();
    let cases = [
        (zone.free_pages(Pfn(end + 7), 0), FreeError::OutOfRange(Pfn(end + 7))),
        (zone.free_pages(other, 2), FreeError::CpuLocal { pfn: other, cpu: 1 }),
        (zone.free_pages(mine, 3), FreeError::WrongOrder { pfn: mine, allocated: 4, given: 3 }),
        (zone.free_pages(Pfn(mine.0 + 1), 0), FreeError::NotAllocated(Pfn(mine.0 + 1))),
        (zone.free_pages(frozen, 0), FreeError::RefcountMismatch { pfn: frozen, refcount: 0 }),
    ];
    for (got, want) in cases {
        assert_eq!(got, Err(want));
    }
    assert_eq!(zone.nr_free_pages(), free_before, "refused frees changed the zone");
    assert!(is_local(&mm, mine) && is_local(&mm, other));
    zone.free_pages(mine, 4).unwrap();
    assert!(matches!(zone.free_pages(mine, 4), Err(FreeError::DoubleFree(_))));
    drop(zone);
    cpu.free_frozen_pages(frozen, 0).unwrap();
    cpu1.free_pages(other, 2).unwrap();
    drop((cpu, cpu1));
    Report::new(&mm).check_invariants().unwrap();
}

/// The holder's watermark budget admits exactly what the shared path
/// admits: on two identical maps without per-CPU lists, order-0
/// allocations until refused get the same number of pages, from the same
/// zones.
#[test]
fn the_holder_stops_at_the_same_watermark_as_the_shared_path() {
    for order in [0, 3] {
        let shared = map(false);
        let mut n_shared = 0u64;
        while shared.alloc_pages(Gfp::KERNEL | Gfp::NOWARN, order).is_ok() {
            n_shared += 1;
        }
        let held = map(false);
        let mut n_held = 0u64;
        {
            let mut cpu = Cpus::new(&held).pin_cpu(0).unwrap();
            let mut zone = cpu.lock_zone(Gfp::KERNEL).unwrap();
            while zone.alloc_pages(Gfp::KERNEL | Gfp::NOWARN, order).is_ok() {
                n_held += 1;
            }
        }
        assert_eq!(n_held, n_shared, "order {order}");
        for (a, b) in Report::new(&shared).zone_snapshots().iter().zip(Report::new(&held).zone_snapshots()) {
            assert_eq!(a.free_pages, b.free_pages, "order {order}");
        }
    }
}

/// A page poisoned while its block is out `LOCAL` is never handed out
/// again; the block's other pages are.
#[test]
fn a_page_poisoned_while_out_is_dropped_at_the_locked_free() {
    let mm = map(false);
    let mut cpu = Cpus::new(&mm).pin_cpu(0).unwrap();
    let block = cpu.lock_zone(Gfp::KERNEL).unwrap().alloc_pages(Gfp::KERNEL, 2).unwrap();
    let victim = Pfn(block.0 + 1);
    mm.memory_failure(victim).unwrap();
    let offlined = Report::new(&mm).stats().hwpoison_offlined;
    let mut zone = cpu.lock_zone(Gfp::KERNEL).unwrap();
    zone.free_pages(block, 2).unwrap();
    let mut got = Vec::new();
    while let Ok(pfn) = zone.alloc_pages(Gfp::KERNEL | Gfp::NOWARN, 0) {
        assert_ne!(pfn, victim, "the poisoned page came back");
        got.push(pfn);
    }
    assert!(got.contains(&block), "the block's healthy pages are free again");
    for pfn in got {
        zone.free_pages(pfn, 0).unwrap();
    }
    drop(zone);
    drop(cpu);
    assert_eq!(Report::new(&mm).stats().hwpoison_offlined, offlined + 1);
    Report::new(&mm).check_invariants().unwrap();
}

/// The holder allocates blocks of orders 0–4 in bursts with the zone
/// locked, writes a pattern, frees most of them itself (checking the
/// pattern) and hands the rest over to a shared-API thread that checks
/// and frees them while allocating its own; a third thread takes and
/// drops speculative references on random pages all along.
#[test]
fn stress_holder_shared_and_speculative_threads_keep_every_block_intact() {
    let mm = Arc::new(real_memory_map());
    let (first, last) = (mm.zones()[0].span().start, mm.zones().last().unwrap().span().end);
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel::<(Pfn, u32, u64)>();
    let consumer = {
        let mm = Arc::clone(&mm);
        thread::spawn(move || {
            let mut rng = XorShift64::new(7);
            let mut own = Vec::new();
            for (pfn, order, seed) in rx {
                pattern(&mm, pfn, 1 << order, seed, true);
                mm.free_pages(pfn, order).unwrap();
                if let Ok(p) = mm.alloc_pages(Gfp::KERNEL | Gfp::NOWARN, rng.below(3) as u32) {
                    own.push(p);
                }
                if own.len() > 32 {
                    for p in own.drain(..) {
                        mm.put_page(p).unwrap();
                    }
                }
            }
            for p in own {
                mm.put_page(p).unwrap();
            }
        })
    };
    let speculator = {
        let (mm, stop) = (Arc::clone(&mm), Arc::clone(&stop));
        thread::spawn(move || {
            let mut rng = XorShift64::new(11);
            while !stop.load(Relaxed) {
                let pfn = Pfn(first + rng.below(last - first));
                if mm.get_page(pfn).is_ok() {
                    mm.put_page(pfn).unwrap();
                }
            }
        })
    };
    let mut rng = XorShift64::new(3);
    let mut cpu = Cpus::new(&mm).pin_cpu(0).unwrap();
    for burst in 0..400u64 {
        let mut zone = cpu.lock_zone(Gfp::KERNEL).unwrap();
        let mut held = Vec::new();
        for i in 0..16 {
            let order = rng.below(5) as u32;
            if let Ok(pfn) = zone.alloc_pages(Gfp::KERNEL | Gfp::NOWARN, order) {
                let seed = burst << 8 | i;
                pattern(&mm, pfn, 1 << order, seed, false);
                held.push((pfn, order, seed));
            }
        }
        for (pfn, order, seed) in held {
            if rng.below(4) == 0 {
                zone.hand_over(pfn).unwrap();
                tx.send((pfn, order, seed)).unwrap();
            } else {
                pattern(&mm, pfn, 1 << order, seed, true);
                zone.free_pages(pfn, order).unwrap();
            }
        }
    }
    drop(tx);
    consumer.join().unwrap();
    stop.store(true, Relaxed);
    speculator.join().unwrap();
    drop(cpu);
    Cpus::new(&mm).drain_all_pages();
    Report::new(&mm).check_invariants().unwrap();
    assert_eq!(Report::new(&mm).nr_free_pages(), mm.zones().iter().map(|z| z.managed_pages()).sum::<u64>());
}

/// A holder that calls the map itself on a path that needs the held
/// zone's lock used to wait for its own thread forever. Now the call
/// panics with what went wrong, the zone is unlocked as the panic unwinds,
/// and the handle and the map work afterwards. (Before, the worker never
/// answered and the receive below timed out.)
#[test]
fn a_holder_calling_the_map_gets_a_panic_not_a_deadlock() {
    let mm = Arc::new(map(false));
    let (tx, rx) = mpsc::channel();
    let worker = {
        let mm = Arc::clone(&mm);
        thread::spawn(move || {
            let mut cpu = Cpus::new(&mm).pin_cpu(0).unwrap();
            let mine = std::cell::Cell::new(None);
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                let mut zone = cpu.lock_zone(Gfp::KERNEL).unwrap();
                mine.set(Some(zone.alloc_pages(Gfp::KERNEL, 2).unwrap()));
                // The mistake: the map, not the zone, while it is held.
                let _ = mm.alloc_pages(Gfp::KERNEL, 2);
            }));
            let message = match outcome {
                Ok(()) => String::from("no panic"),
                Err(payload) => payload
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default(),
            };
            // The zone is free again: its block goes back through the handle.
            cpu.free_pages(mine.get().unwrap(), 2).unwrap();
            let pfn = cpu.alloc_pages(Gfp::KERNEL, 2).unwrap();
            cpu.free_pages(pfn, 2).unwrap();
            tx.send(message).unwrap();
        })
    };
    let message = rx.recv_timeout(std::time::Duration::from_secs(20)).expect("the holder deadlocked");
    assert!(message.contains("self-deadlock"), "{message}");
    worker.join().unwrap();
    Report::new(&mm).check_invariants().unwrap();
    let managed: u64 = mm.zones().iter().map(|z| z.managed_pages()).sum();
    assert_eq!(Report::new(&mm).nr_free_pages(), managed);
}

/// The scoped burst serves like the guard and leaves nothing locked.
#[test]
fn a_burst_allocates_and_frees_and_unlocks() {
    let mm = map(true);
    let mut cpu = Cpus::new(&mm).pin_cpu(1).unwrap();
    let kept = cpu
        .burst(Gfp::KERNEL, |zone| {
            let blocks: Vec<Pfn> = (0..16).map(|i| zone.alloc_pages(Gfp::KERNEL, i % 4).unwrap()).collect();
            for (i, &b) in blocks.iter().enumerate().skip(1) {
                zone.free_pages(b, i as u32 % 4).unwrap();
            }
            blocks[0]
        })
        .unwrap();
    assert!(is_local(&mm, kept));
    assert!(cpu.burst(Gfp::DMA.union(Gfp::HIGHMEM), |_| ()).is_err(), "a contradictory mask runs nothing");
    cpu.free_pages(kept, 0).unwrap();
    drop(cpu);
    Report::new(&mm).check_invariants().unwrap();
}
