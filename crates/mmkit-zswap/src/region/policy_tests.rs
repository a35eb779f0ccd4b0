//! The paging and budget policy against the in-memory fake of the
//! operating system (`os::fake`): the pager, the eviction and the handler
//! thread run as they do on Linux, over pages the fake holds in memory,
//! with a log of every call they make. Deterministic (no background
//! reclaim unless asked) and fast, and needing no userfaultfd: these run
//! wherever the crate's tests do.
//!
//! - a model of random sequences of raw touches (in both fault modes),
//!   accessor reads and writes, pins, the program's own drops and reclaims,
//!   with the invariants checked after every step: the budget holds, the
//!   region's resident count is what the fake has mapped, clean pages are
//!   write-protected and stored, dirty ones writable, pinned pages mapped,
//!   pages never written hold no swap slot, every read gives the last
//!   write (or, after the program dropped a page, a value it once held);
//! - clean victims preferred, write protection and drops in runs, pins
//!   never evicted, a full swap keeping the budget with an error, untouched
//!   pages taking no slot, fault-around stopping at a memory area's
//!   boundary and still placing the page asked for.

use super::os::fake::{Call, Fake, Touch};
use super::os::{CopyError, Os};
use super::page::{self, DIRTY, RESIDENT};
use super::pager::Shared;
use super::*;
use crate::{SwapFile, ZswapParams};
use mmkit::{Backing, HugePages, MemoryMapBuilder};
use proptest::prelude::*;
use std::time::Duration;

/// A small zswap; LZ4 in Rust (`lz4_flex`), so that Miri, which runs no
/// C, can run these tests too.
fn zswap(slots: u64) -> Arc<Zswap> {
    // 1 MiB under Miri, where building the descriptor table is most of a
    // test's time.
    let memory = if cfg!(miri) { 1 << 20 } else { 4 << 20 };
    let mm = MemoryMapBuilder::with_memory(memory).backing(Backing::RealMemory(HugePages::None)).build().unwrap();
    let params = ZswapParams { compressor: mmkit_compress::Algorithm::Lz4Flex, ..ZswapParams::default() };
    Arc::new(Zswap::new(Arc::new(mm), SwapFile::create_temp(slots).unwrap(), params).unwrap())
}

/// How long a blocked raw touch waits for the handler thread before the
/// test takes the wake as lost (Miri runs a hundred times slower).
const PATIENCE: Duration = Duration::from_secs(if cfg!(miri) { 3600 } else { 20 });

/// A region over the fake, with its handler thread.
struct Region {
    shared: Arc<Shared<Fake>>,
    handler: Option<JoinHandle<()>>,
}

impl Region {
    fn new(z: &Arc<Zswap>, config: RegionConfig) -> Self {
        let fake = Fake::new(config.len / PAGE_SIZE);
        let shared = Arc::new(Shared::new(fake, z.clone(), config, os::forks()).unwrap());
        let handler = Some(spawn_handler(&shared).unwrap());
        Self { shared, handler }
    }

    /// `pages` pages, `budget` resident, no background reclaim, no
    /// fault-around.
    fn plain(z: &Arc<Zswap>, pages: usize, budget: usize) -> Self {
        let config =
            RegionConfig { background_reclaim: false, fault_around: 1, ..RegionConfig::new(pages * PAGE_SIZE, budget) };
        Self::new(z, config)
    }

    fn fake(&self) -> &Fake {
        &self.shared.os
    }

    /// A raw touch in the `SIGBUS` mode: each fault resolved in this
    /// thread as the handler does it; `Err` for a `SIGBUS` the region does
    /// not resolve.
    fn touch(&self, offset: usize, value: Option<u64>) -> Result<u64, ()> {
        for _ in 0..64 {
            match self.fake().touch(offset, value) {
                Touch::Done(v) => return Ok(v),
                Touch::Sigbus => return Err(()),
                Touch::Fault(kind) => {
                    let write = kind != os::FaultKind::Missing;
                    if !self.shared.resolve_signal(offset / PAGE_SIZE, write, false) {
                        return Err(());
                    }
                }
            }
        }
        panic!("a raw touch at {offset} faults for ever");
    }

    /// A raw touch in the handler-thread mode.
    fn touch_blocking(&self, offset: usize, value: Option<u64>) -> Result<u64, ()> {
        match self.fake().touch_blocking(offset, value, PATIENCE) {
            Touch::Done(v) => Ok(v),
            _ => Err(()),
        }
    }

    fn read_u64(&self, offset: usize) -> Result<u64, RegionError> {
        self.shared.with_page(offset / PAGE_SIZE, false, || self.shared.os.load_u64(offset))
    }

    fn write_u64(&self, offset: usize, value: u64) -> Result<(), RegionError> {
        self.shared.with_page(offset / PAGE_SIZE, true, || self.shared.os.store_u64(offset, value))
    }

    fn resident(&self) -> usize {
        self.shared.resident()
    }

    fn stored(&self, index: usize) -> bool {
        self.shared.slots.lock(index).is_stored()
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        self.shared.stop.store(true, Relaxed);
        self.shared.kick();
        if let Some(h) = self.handler.take() {
            h.join().unwrap();
        }
    }
}

/// A word for page `p` that no other page or round has.
fn word(p: usize, round: u64) -> u64 {
    (p as u64) << 32 | round
}

#[derive(Clone, Debug)]
enum Op {
    /// A raw read (`None`) or write of the page's first word.
    Touch(usize, Option<u64>),
    Read(usize),
    Write(usize, u64),
    /// Pin `n` pages from a page, for writing or not.
    Pin(usize, usize, bool),
    /// Let the oldest pin go.
    Unpin,
    /// The program drops a page behind the region's back.
    ProgramDrop(usize),
    Reclaim(usize),
}

fn ops(pages: usize) -> impl Strategy<Value = Vec<Op>> {
    let page = 0..pages;
    let value = prop_oneof![Just(0u64), 1u64..4, any::<u64>()];
    let op = prop_oneof![
        6 => (page.clone(), proptest::option::of(value.clone())).prop_map(|(p, v)| Op::Touch(p, v)),
        3 => page.clone().prop_map(Op::Read),
        3 => (page.clone(), value).prop_map(|(p, v)| Op::Write(p, v)),
        1 => (page.clone(), 1usize..4, any::<bool>()).prop_map(|(p, n, w)| Op::Pin(p, n, w)),
        1 => Just(Op::Unpin),
        1 => page.prop_map(Op::ProgramDrop),
        1 => (0usize..6).prop_map(Op::Reclaim),
    ];
    // Under Miri, one short sequence: the model's point there is the
    // unsafe code under a few evictions and loads, not the search.
    proptest::collection::vec(op, 1..if cfg!(miri) { 16 } else { 120 })
}

/// What each page must read: its value, `None` once the program dropped
/// it dirty (then any value it ever held), and the values it ever held.
struct Model {
    value: Vec<Option<u64>>,
    held: Vec<Vec<u64>>,
    pins: VecDeque<std::ops::Range<usize>>,
}

use std::collections::VecDeque;

impl Model {
    fn new(pages: usize) -> Self {
        Self { value: vec![Some(0); pages], held: vec![vec![0]; pages], pins: VecDeque::new() }
    }

    fn wrote(&mut self, p: usize, v: u64) {
        self.value[p] = Some(v);
        self.held[p].push(v);
    }

    fn read(&mut self, p: usize, got: u64) {
        match self.value[p] {
            Some(want) => assert_eq!(got, want, "page {p}"),
            None => assert!(self.held[p].contains(&got), "page {p} read {got:#x}, never held"),
        }
        self.value[p] = Some(got);
    }

    fn pinned(&self) -> usize {
        self.pins.iter().map(|r| r.len()).sum()
    }
}

/// The invariants, after every step.
fn check(r: &Region, model: &Model, budget: usize) {
    let pages = r.shared.pages();
    let resident = r.resident();
    assert!(resident <= budget, "{resident} resident, budget {budget}");
    let mut marked = 0;
    let mut dropped_by_program = 0;
    for p in 0..pages {
        let flags = page::flags(&r.shared.states[p]);
        let mapped = r.fake().is_mapped(p);
        assert!(!mapped || flags & RESIDENT != 0, "page {p} mapped but not resident: {flags:#x}");
        if flags & RESIDENT == 0 {
            continue;
        }
        marked += 1;
        if !mapped {
            // The program dropped it; the region finds out when it is
            // touched or picked.
            dropped_by_program += 1;
            continue;
        }
        if flags & DIRTY == 0 {
            assert!(r.fake().is_protected(p), "clean page {p} writable");
            assert!(r.stored(p), "clean page {p} without a stored copy");
        } else {
            assert!(!r.fake().is_protected(p), "dirty page {p} write-protected");
        }
    }
    assert_eq!(marked, resident, "the resident count");
    assert_eq!(r.fake().mapped_pages().unwrap() + dropped_by_program, resident);
    for range in &model.pins {
        for p in range.clone() {
            let mapped = r.fake().is_mapped(p);
            assert!(mapped || page::flags(&r.shared.states[p]) & RESIDENT != 0, "pinned page {p} evicted");
        }
    }
    for p in 0..pages {
        if model.held[p].iter().all(|&v| v == 0) {
            assert!(!r.stored(p), "page {p}, never written but zeros, holds a swap slot");
        }
    }
}

/// Runs `ops` on a region of `pages` pages over the fake, raw faults
/// resolved in the touching thread (`in_thread`) or by the handler thread.
fn run(ops: &[Op], pages: usize, budget: usize, in_thread: bool, fault_around: usize) {
    let z = zswap(pages as u64 + 64);
    let config = RegionConfig {
        background_reclaim: false,
        fault_in_thread: in_thread,
        fault_around,
        ..RegionConfig::new(pages * PAGE_SIZE, budget)
    };
    let r = Region::new(&z, config);
    let mut model = Model::new(pages);
    let raw = |p: usize, v: Option<u64>| {
        if in_thread {
            r.touch(p * PAGE_SIZE, v)
        } else {
            let done = r.touch_blocking(p * PAGE_SIZE, v);
            // The touch runs on once woken; the handler finishes its own
            // work (a pin it holds, its counters) before the next step.
            r.fake().wait_for_idle_handler(PATIENCE);
            done
        }
    };
    // An accessor's access to a page the program dropped faults, as a raw
    // touch does: run it as one.
    let dropped = |p: usize| page::flags(&r.shared.states[p]) & RESIDENT != 0 && !r.fake().is_mapped(p);
    for op in ops {
        match *op {
            Op::Touch(p, None) => model.read(p, raw(p, None).unwrap()),
            Op::Touch(p, Some(v)) => {
                raw(p, Some(v)).unwrap();
                model.wrote(p, v);
            }
            Op::Read(p) if dropped(p) => model.read(p, raw(p, None).unwrap()),
            Op::Read(p) => model.read(p, r.read_u64(p * PAGE_SIZE).unwrap()),
            Op::Write(p, v) if dropped(p) => {
                raw(p, Some(v)).unwrap();
                model.wrote(p, v);
            }
            Op::Write(p, v) => {
                r.write_u64(p * PAGE_SIZE, v).unwrap();
                model.wrote(p, v);
            }
            Op::Pin(p, n, write) => {
                let span = p..(p + n).min(pages);
                // Pins leave at least one page to evict: at the budget with
                // every page pinned, a load goes past it (the pins' doing).
                if model.pinned() + span.len() < budget {
                    r.shared.pin_span(span.clone(), write).unwrap();
                    model.pins.push_back(span);
                }
            }
            Op::Unpin => {
                if let Some(span) = model.pins.pop_front() {
                    r.shared.unpin_span(span);
                }
            }
            Op::ProgramDrop(p) => {
                if r.fake().is_mapped(p) {
                    let clean = page::flags(&r.shared.states[p]) & DIRTY == 0;
                    r.fake().program_drop(p);
                    if !clean {
                        // Its last stored copy, or zeros.
                        model.value[p] = None;
                    }
                }
            }
            Op::Reclaim(keep) => {
                let gone = r.shared.reclaim(keep).unwrap();
                assert!(
                    r.resident() <= keep.max(model.pinned()),
                    "{} resident after reclaim({keep}) evicted {gone}; pins {:?}; {:?}",
                    r.resident(),
                    model.pins,
                    r.fake().take_calls()
                );
            }
        }
        // MMKIT_POLICY_TRACE=1: every step's page states and calls.
        if std::env::var_os("MMKIT_POLICY_TRACE").is_some() {
            let flags: Vec<String> = (0..pages).map(|p| format!("{:x}", page::flags(&r.shared.states[p]))).collect();
            eprintln!("{op:?}: resident {} [{}] {:?}", r.resident(), flags.join(","), r.fake().take_calls());
        }
        check(&r, &model, budget);
    }
    while let Some(span) = model.pins.pop_front() {
        r.shared.unpin_span(span);
    }
    let s = r.shared.stats();
    assert_eq!(s.load_failures, 0, "{s:?}");
    z.check_invariants().unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig { cases: if cfg!(miri) { 1 } else { 256 }, ..ProptestConfig::default() })]

    #[test]
    fn any_sequence_keeps_the_budget_and_the_data(ops in ops(24), budget in 2usize..8, in_thread: bool, around in 1usize..4) {
        run(&ops, 24, budget, in_thread, around);
    }
}

#[test]
fn clean_victims_are_preferred_and_dropped_without_a_store() {
    let z = zswap(256);
    let (pages, budget) = (64, 16);
    let config = RegionConfig {
        background_reclaim: false,
        fault_around: 1,
        evict_batch: 4,
        ..RegionConfig::new(pages * PAGE_SIZE, budget)
    };
    let r = Region::new(&z, config);
    for p in 0..pages {
        r.write_u64(p * PAGE_SIZE, word(p, 1)).unwrap();
    }
    r.shared.reclaim(0).unwrap();
    // Eight clean pages (loaded back, stored copies current), then eight
    // dirty ones: the region is at its budget.
    for p in 0..8 {
        assert_eq!(r.read_u64(p * PAGE_SIZE).unwrap(), word(p, 1));
    }
    for p in 32..40 {
        r.write_u64(p * PAGE_SIZE, word(p, 2)).unwrap();
    }
    assert_eq!(r.resident(), budget);
    // The CLOCK's first pass clears every page's referenced bit; the
    // second finds victims.
    r.fake().take_calls();
    let before = r.shared.stats();
    for p in 48..52 {
        r.write_u64(p * PAGE_SIZE, word(p, 3)).unwrap();
    }
    let after = r.shared.stats();
    let calls = r.fake().take_calls();
    let evicted = after.evictions - before.evictions;
    assert!(evicted > 0, "{after:?}");
    assert_eq!(after.evicted_clean - before.evicted_clean, evicted, "only clean victims: {calls:?}");
    assert!(!calls.iter().any(|c| matches!(c, Call::WriteProtect { .. } | Call::ReadPage(_))), "{calls:?}");
    for p in 32..40 {
        assert!(r.fake().is_mapped(p), "dirty page {p} went while clean ones were there");
    }
    // With no clean page left, dirty ones go.
    for p in 8..24 {
        r.write_u64(p * PAGE_SIZE, word(p, 4)).unwrap();
    }
    assert!(r.shared.stats().evictions - after.evictions >= 8);
    assert!(r.resident() <= budget);
}

#[test]
fn dirty_victims_are_protected_and_dropped_in_runs() {
    let z = zswap(256);
    let r = Region::plain(&z, 64, 32);
    let dirty = [0, 1, 2, 3, 4, 5, 9, 10, 11, 20, 30, 31];
    for &p in &dirty {
        r.write_u64(p * PAGE_SIZE, word(p, 1)).unwrap();
    }
    r.fake().take_calls();
    assert_eq!(r.shared.reclaim(0).unwrap(), dirty.len());
    let calls = r.fake().take_calls();
    let protects: Vec<_> = calls.iter().filter(|c| matches!(c, Call::WriteProtect { .. })).cloned().collect();
    assert_eq!(
        protects,
        [(0, 6), (9, 3), (20, 1), (30, 2)].map(|(first, pages)| Call::WriteProtect { first, pages }),
        "one protection a run of neighbours"
    );
    let drops: Vec<_> = calls.iter().filter(|c| matches!(c, Call::DropRuns(_) | Call::DropPage(_))).collect();
    assert_eq!(drops, [&Call::DropRuns(vec![(0, 6), (9, 3), (20, 1), (30, 2)])], "one drop call for every run");
    // No victim was woken: nobody faulted on them.
    assert!(!calls.iter().any(|c| matches!(c, Call::Wake { .. })), "{calls:?}");
    for &p in &dirty {
        assert_eq!(r.read_u64(p * PAGE_SIZE).unwrap(), word(p, 1));
    }
}

#[test]
fn pinned_pages_are_never_evicted() {
    let z = zswap(256);
    let r = Region::plain(&z, 32, 8);
    for p in 0..32 {
        r.write_u64(p * PAGE_SIZE, word(p, 1)).unwrap();
    }
    r.shared.pin_span(4..7, true).unwrap();
    r.shared.reclaim(0).unwrap();
    assert_eq!(r.resident(), 3, "the pinned pages alone");
    for p in 0..32 {
        // Touched raw and through the accessors, over and over: everything
        // else comes and goes.
        assert_eq!(r.touch(p * PAGE_SIZE, None), Ok(word(p, 1)));
        assert_eq!(r.read_u64(((p * 7) % 32) * PAGE_SIZE).unwrap(), word((p * 7) % 32, 1));
        for q in 4..7 {
            assert!(r.fake().is_mapped(q), "pinned page {q} evicted");
        }
        assert!(r.resident() <= 8);
    }
    r.shared.unpin_span(4..7);
    r.shared.reclaim(0).unwrap();
    assert_eq!(r.resident(), 0);
}

#[test]
fn a_full_swap_keeps_the_budget_and_is_an_error() {
    // Four swap slots; pages of distinct data each need one once evicted.
    let z = zswap(4);
    let r = Region::plain(&z, 32, 4);
    let mut refused = None;
    for p in 0..32 {
        match r.write_u64(p * PAGE_SIZE, word(p, 1)) {
            Ok(()) => {}
            Err(RegionError::SwapFull { offset }) => {
                refused = Some(offset);
                break;
            }
            Err(e) => panic!("{e}"),
        }
        assert!(r.resident() <= 4, "{} resident", r.resident());
    }
    let offset = refused.expect("the swap never filled");
    assert!(r.resident() <= 4);
    assert!(!r.fake().is_mapped(offset / PAGE_SIZE), "the page refused was mapped anyway");
    // A raw touch of that page gets no page either: the handler fails the
    // load (a real thread gets SIGBUS), and the budget still holds.
    assert_eq!(r.touch(offset, None), Err(()));
    assert!(r.resident() <= 4);
    assert!(r.shared.stats().evict_failures > 0);
    // Every page written before reads back.
    for p in 0..offset / PAGE_SIZE {
        let got = r.read_u64(p * PAGE_SIZE);
        assert!(
            matches!(got, Ok(v) if v == word(p, 1)) || matches!(got, Err(RegionError::SwapFull { .. })),
            "page {p}: {got:?}"
        );
    }
}

#[test]
fn untouched_pages_take_no_slot() {
    let z = zswap(64);
    let r = Region::plain(&z, 256, 8);
    // Read, raw and through the accessors, and written with zeros: zero
    // pages, dropped with no stored copy.
    for p in 0..256 {
        match p % 3 {
            0 => assert_eq!(r.read_u64(p * PAGE_SIZE).unwrap(), 0),
            1 => assert_eq!(r.touch(p * PAGE_SIZE, None), Ok(0)),
            _ => r.write_u64(p * PAGE_SIZE, 0).unwrap(),
        }
    }
    r.shared.reclaim(0).unwrap();
    assert_eq!(z.swap_file().used_slots(), 0, "{:?}", r.shared.stats());
    assert!(r.shared.stats().zero_drops > 0);
    // A written page takes one; zeroed again, it gives it back.
    r.write_u64(PAGE_SIZE, 7).unwrap();
    r.shared.reclaim(0).unwrap();
    assert_eq!(z.swap_file().used_slots(), 1);
    r.write_u64(PAGE_SIZE, 0).unwrap();
    r.shared.reclaim(0).unwrap();
    assert_eq!(z.swap_file().used_slots(), 0);
}

#[test]
fn fault_around_stops_at_an_area_boundary_and_places_the_requested_page() {
    let z = zswap(256);
    let config = RegionConfig { background_reclaim: false, fault_around: 8, ..RegionConfig::new(64 * PAGE_SIZE, 32) };
    let r = Region::new(&z, config);
    for p in 0..64 {
        r.write_u64(p * PAGE_SIZE, word(p, 1)).unwrap();
    }
    r.shared.reclaim(0).unwrap();
    // An madvise on pages 12.. splits the area: a copy may not cross 12.
    r.fake().split_area_at(12);
    r.fake().take_calls();
    for p in 8..24 {
        assert_eq!(r.read_u64(p * PAGE_SIZE).unwrap(), word(p, 1), "page {p}");
    }
    let copies: Vec<_> = r.fake().take_calls().into_iter().filter(|c| matches!(c, Call::Copy { .. })).collect();
    let refused = copies.iter().position(|c| matches!(c, Call::Copy { answer: Err(CopyError::Refused), .. }));
    let refused = refused.expect("no copy crossed the boundary");
    let Call::Copy { first, pages, .. } = copies[refused] else { unreachable!() };
    assert!(first < 12 && first + pages > 12, "{copies:?}");
    assert_eq!(
        copies[refused + 1],
        Call::Copy { first, pages: 1, write_protect: true, answer: Ok(1) },
        "the page asked for, alone"
    );
    let s = r.shared.stats();
    assert_eq!(s.load_failures, 0);
    assert!(s.fault_around_pages > 0, "{s:?}");
}

#[test]
fn raw_faults_in_the_handler_thread_mode_are_resolved_and_woken() {
    let z = zswap(512);
    let config = RegionConfig { fault_in_thread: false, fault_around: 4, ..RegionConfig::new(128 * PAGE_SIZE, 8) };
    let r = Region::new(&z, config);
    for round in 1..4u64 {
        for p in 0..128 {
            assert_eq!(r.touch_blocking(p * PAGE_SIZE, Some(word(p, round))), Ok(word(p, round)));
        }
        for p in (0..128).rev() {
            assert_eq!(r.touch_blocking(p * PAGE_SIZE, None), Ok(word(p, round)));
        }
    }
    let s = r.shared.stats();
    assert!(s.missing_faults > 0 && s.evictions > 0, "{s:?}");
    assert!(r.resident() <= 8, "{s:?}");
}

#[test]
fn a_raw_fault_with_no_clean_victim_is_handed_off_and_keeps_the_budget() {
    // Every resident page dirty: the SIGBUS path may not compress, so the
    // handler thread makes the room.
    // Under Miri 12 pages: eight hand-offs are enough there.
    let pages = if cfg!(miri) { 12 } else { 64 };
    let z = zswap(512);
    let r = Region::plain(&z, pages, 4);
    for p in 0..pages {
        assert_eq!(r.touch(p * PAGE_SIZE, Some(word(p, 1))), Ok(word(p, 1)));
        assert!(r.resident() <= 4);
    }
    let s = r.shared.stats();
    assert!(s.handoffs > 0, "{s:?}");
    for p in 0..pages {
        assert_eq!(r.touch(p * PAGE_SIZE, None), Ok(word(p, 1)));
    }
}

#[test]
fn pinned_dirty_pages_do_not_crowd_out_the_victims() {
    // Found by the model above: the CLOCK gathered dirty candidates without
    // looking at pins, and once per pass of its scan, so pinned pages
    // (twice each) filled the list, no victim was picked, and a load went
    // past the budget.
    let z = zswap(64);
    let r = Region::plain(&z, 24, 6);
    r.shared.pin_span(0..3, true).unwrap();
    // A scan clears the pinned pages' referenced bits; they stay.
    r.shared.reclaim(0).unwrap();
    assert_eq!(r.resident(), 3);
    for p in [3, 5, 8] {
        r.write_u64(p * PAGE_SIZE, word(p, 1)).unwrap();
    }
    assert_eq!(r.resident(), 6);
    r.write_u64(13 * PAGE_SIZE, word(13, 1)).unwrap();
    assert!(r.resident() <= 6, "{} resident, budget 6: {:?}", r.resident(), r.shared.stats());
    for p in 0..3 {
        assert!(r.fake().is_mapped(p), "pinned page {p} evicted");
    }
    r.shared.unpin_span(0..3);
}
