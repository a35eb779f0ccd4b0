//! Fuzz target for the library's edges (`docs/architecture.md`, "Safe at
//! the edges"): an input scripts user callbacks over the page allocator,
//! quicklists, zsmalloc and a `SwapRegion` (through its public API only):
//! every hook, the migrator's `on_moved`, burst closures, quicklist
//! constructors and destructors and zsmalloc read closures tick one script
//! that panics at the input's step `k`, and may call back into their layer
//! with the input's call `c`; guards may be forgotten (`mem::forget`), and
//! every bare-PFN call of `mmkit::PFN_CALLS` that changes state is tried on
//! owned blocks. After every step the map's and the pool's invariants
//! hold; at the end of the input, after everything held is given back,
//! every page is free, held by a forgotten guard, or a bad page the input
//! made on purpose, and the region reads back what was written.
//!
//! Run with `cargo +nightly fuzz run callbacks` from `fuzz/`.
#![no_main]

use mmkit::{Blocks, Cpus, Tuning};
use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use mmkit::hooks::{AllocFailure, BadPageReport, ReclaimRequest};
use mmkit::{
    Backing, Contig, CopyMigrator, Gfp, Hooks, HugePages, MemoryMapBuilder, MigrateType, PageAllocator, PageFlags, Pfn,
    Report,
};
use mmkit_fuzz::Persistent;
use mmkit_quicklist::Quicklists;
use mmkit_zsmalloc::{Handle, ZsError, ZsPool};
use mmkit_zswap::{RegionConfig, SwapFile, SwapRegion, Zswap, ZswapParams, PAGE_SIZE};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::{Arc, OnceLock, Weak};

const REGION_PAGES: usize = 16;

#[derive(Arbitrary, Debug)]
struct Input {
    /// The callback invocation that panics (0: none).
    panic_at: u8,
    /// The call a callback makes back into its layer (see `reenter`).
    reenter: u8,
    ops: Vec<Op>,
}

#[derive(Arbitrary, Debug)]
enum Op {
    Alloc { order: u8, movable: bool },
    Free { pick: u8 },
    /// Frees a held page with an embedder flag left set: a bad page.
    BadFree { pick: u8 },
    Bulk { n: u8, bad: Option<u8> },
    Contig { pick: u8 },
    Compact,
    Burst { n: u8 },
    Guard { order: u8 },
    GuardDrop { pick: u8 },
    GuardForget { pick: u8 },
    /// A state-changing bare-PFN call on a guard's page, which it refuses.
    PfnCall { pick: u8, call: u8 },
    QlAlloc { nr: bool, pinned: bool, ctor: bool },
    QlFree { pick: u8, dtor: bool },
    QlTrim { nr: bool, dtor: bool },
    ZsMalloc { size: u16 },
    ZsFree { pick: u8, deferred: bool },
    ZsRead { pick: u8 },
    ZsForeign { pick: u8 },
    RegionWrite { page: u8, byte: u8 },
    RegionRead { page: u8 },
    RegionReclaim { keep: u8 },
}

/// The input's script: every callback ticks it.
struct Script {
    calls: AtomicU64,
    panic_at: AtomicU64,
    reenter: AtomicU8,
    /// A callback calls back only from depth 0.
    depth: AtomicU64,
}

static SCRIPT: Script =
    Script { calls: AtomicU64::new(0), panic_at: AtomicU64::new(0), reenter: AtomicU8::new(0), depth: AtomicU64::new(0) };

struct Scripted;

fn tick() {
    let n = SCRIPT.calls.fetch_add(1, Relaxed) + 1;
    if n == SCRIPT.panic_at.load(Relaxed) {
        std::panic::panic_any(Scripted);
    }
}

/// The map a hook or migrator calls back into.
static MAP: OnceLock<std::sync::Mutex<Weak<PageAllocator>>> = OnceLock::new();

fn map_now() -> Option<Arc<PageAllocator>> {
    MAP.get()?.lock().ok()?.upgrade()
}

/// A call back into the page allocator from a hook or the migrator.
fn reenter_allocator() {
    if SCRIPT.depth.fetch_add(1, Relaxed) == 0 {
        if let Some(mm) = map_now() {
            match SCRIPT.reenter.load(Relaxed) % 4 {
                0 => {}
                1 => {
                    if let Ok(pfn) = mm.alloc_pages(Gfp::KERNEL | Gfp::NOWARN, 0) {
                        let _ = mm.free_pages(pfn, 0);
                    }
                }
                2 => {
                    Cpus::new(&mm).drain_all_pages();
                }
                _ => {
                    let mut burst = [None; 4];
                    let n = mm.alloc_pages_bulk(Gfp::KERNEL | Gfp::NOWARN, &mut burst);
                    let pages: Vec<Pfn> = burst[..n].iter().flatten().copied().collect();
                    let _ = mm.free_pages_bulk(&pages);
                }
            }
        }
    }
    SCRIPT.depth.fetch_sub(1, Relaxed);
}

struct FuzzHooks;

impl Hooks for FuzzHooks {
    fn wake_kswapd(&self, _: &ReclaimRequest) {
        tick();
        reenter_allocator();
    }
    fn direct_reclaim(&self, _: &ReclaimRequest) -> u64 {
        tick();
        reenter_allocator();
        0
    }
    fn direct_compact(&self, _: &ReclaimRequest) -> bool {
        tick();
        false
    }
    fn retry_nofail(&self, _: &ReclaimRequest) -> bool {
        tick();
        false
    }
    fn bad_page(&self, _: &BadPageReport) {
        tick();
        reenter_allocator();
    }
    fn alloc_failed(&self, _: &AllocFailure) {
        tick();
    }
    fn log(&self, _: core::fmt::Arguments<'_>) {
        tick();
    }
    fn now_ns(&self) -> Option<u64> {
        tick();
        reenter_allocator();
        Some(0)
    }
}

struct Fixture {
    mm: Arc<PageAllocator>,
    ql: Quicklists,
    pool: ZsPool,
    other_pool: ZsPool,
    region: Option<SwapRegion>,
    region_model: Vec<u8>,
    total: u64,
    /// Pages forgotten guards hold, for good.
    forgotten: u64,
}

static FIXTURE: Persistent<Fixture> = Persistent::new();

fn fixture() -> Fixture {
    // libFuzzer's panic hook aborts on every panic, to report it: the
    // scripted ones are caught by `run` and pass it by.
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let fuzzer = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !info.payload().is::<Scripted>() {
                fuzzer(info);
            }
        }));
    });
    let mm = Arc::new(
        MemoryMapBuilder::with_memory(16 << 20)
            .backing(Backing::RealMemory(HugePages::None))
            .nr_cpus(2)
            .hooks(FuzzHooks)
            .migrator(CopyMigrator::new(|_, _, _| {
                tick();
                reenter_allocator();
            }))
            .build()
            .unwrap(),
    );
    *MAP.get_or_init(|| std::sync::Mutex::new(Weak::new())).lock().unwrap() = Arc::downgrade(&mm);
    Cpus::new(&mm).drain_all_pages();
    let total = Report::new(&mm).nr_free_pages();
    let ql = Quicklists::new(mm.clone(), 2).unwrap();
    let pool = ZsPool::zs_create_pool("callbacks", mm.clone()).unwrap();
    let other_pool = ZsPool::zs_create_pool("other", mm.clone()).unwrap();
    let region = region();
    Fixture { mm, ql, pool, other_pool, region, region_model: vec![0; REGION_PAGES * PAGE_SIZE], total, forgotten: 0 }
}

/// A small region over a zswap of its own (None where userfaultfd is not
/// there).
fn region() -> Option<SwapRegion> {
    let mm = Arc::new(
        MemoryMapBuilder::with_memory(16 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap(),
    );
    let zswap = Arc::new(Zswap::new(mm, SwapFile::create_temp(64).ok()?, ZswapParams::default()).ok()?);
    let config = RegionConfig { background_reclaim: false, ..RegionConfig::new(REGION_PAGES * PAGE_SIZE, 4) };
    SwapRegion::new(zswap, config).ok()
}

fuzz_target!(|input: Input| FIXTURE.with(fixture, |f| run(f, input)));

/// What an input holds, given back at its end.
#[derive(Default)]
struct Held<'m> {
    pages: Vec<(Pfn, u32)>,
    guards: Vec<mmkit::PageGuard<'m>>,
    ql_pages: Vec<(usize, Pfn)>,
    handles: Vec<Handle>,
    contig: Vec<(Pfn, u64)>,
}

fn pick<T>(v: &[T], i: u8) -> Option<usize> {
    (!v.is_empty()).then(|| usize::from(i) % v.len())
}

fn run(f: &mut Fixture, input: Input) {
    SCRIPT.calls.store(0, Relaxed);
    SCRIPT.panic_at.store(u64::from(input.panic_at), Relaxed);
    SCRIPT.reenter.store(input.reenter, Relaxed);
    let mm = f.mm.clone();
    let mut held = Held::default();
    for op in input.ops.iter().take(64) {
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| step(f, &mm, &mut held, op)));
        if let Err(payload) = caught {
            if !payload.is::<Scripted>() {
                std::panic::resume_unwind(payload);
            }
        }
        // The pool's drain thread frees pages of its own: the map is
        // checked once nothing is queued and no drain runs (the flush
        // waits for one in progress).
        f.pool.zs_free_deferred_flush();
        Report::new(&mm).check_invariants().unwrap_or_else(|e| panic!("after {op:?}: {e:?}"));
        f.pool.check_invariants().unwrap_or_else(|e| panic!("after {op:?}: {e}"));
    }
    // No more panics: give everything back.
    SCRIPT.panic_at.store(0, Relaxed);
    f.forgotten += FORGOTTEN.with(|n| n.replace(0));
    for (at, byte) in REGION_WRITES.with(|w| std::mem::take(&mut *w.borrow_mut())) {
        f.region_model[at..at + 64].fill(byte);
    }
    for (pfn, order) in held.pages.drain(..) {
        mm.free_pages(pfn, order).unwrap();
    }
    for (start, n) in held.contig.drain(..) {
        Contig::new(&mm).free_contig_range(start, n).unwrap();
    }
    for guard in held.guards.drain(..) {
        guard.free().unwrap();
    }
    for (nr, pfn) in held.ql_pages.drain(..) {
        f.ql.quicklist_free_page(nr, None, pfn).unwrap();
    }
    for h in held.handles.drain(..) {
        f.pool.zs_free(h).map_err(|(e, _)| e).unwrap();
    }
    f.pool.zs_free_deferred_flush();
    assert_eq!(f.pool.zs_get_total_pages(), 0, "every zspage back");
    for nr in 0..2 {
        f.ql.quicklist_drain(nr, None).unwrap();
    }
    // Pages a migrator moved are plain pages held by nobody the model
    // names: the ones left allocated without an owner.
    for pfn in (mm.start_pfn().0..mm.end_pfn().0).map(Pfn) {
        if mm.page_flags(pfn).is_ok_and(|fl| fl.contains(PageFlags::ALLOCATED) && !fl.contains(PageFlags::TAIL))
            && Blocks::new(&mm).page_owner(pfn).is_none()
        {
            let _ = mm.put_page(pfn);
        }
    }
    Cpus::new(&mm).drain_all_pages();
    Report::new(&mm).check_invariants().unwrap();
    let leaked = Report::new(&mm).stats().bad_pages_leaked;
    assert_eq!(Report::new(&mm).nr_free_pages() + leaked + f.forgotten, f.total, "pages lost");
    if let Some(region) = &f.region {
        let mut all = vec![0; REGION_PAGES * PAGE_SIZE];
        region.read(0, &mut all).unwrap();
        assert!(all == f.region_model, "the region reads back what was written");
    }
}

const PFN_CALLS: u8 = 6;

fn step<'m>(f: &Fixture, mm: &'m PageAllocator, held: &mut Held<'m>, op: &Op) {
    let gfp = Gfp::KERNEL | Gfp::NOWARN;
    match *op {
        Op::Alloc { order, movable } => {
            let order = u32::from(order % 4);
            let gfp = if movable { Gfp::HIGHUSER_MOVABLE | Gfp::NOWARN } else { gfp };
            if let Ok(pfn) = mm.alloc_pages(gfp, order) {
                held.pages.push((pfn, order));
            }
        }
        Op::Free { pick: i } => {
            if let Some(i) = pick(&held.pages, i) {
                let (pfn, order) = held.pages.swap_remove(i);
                mm.free_pages(pfn, order).unwrap();
            }
        }
        Op::BadFree { pick: i } => {
            if let Some(i) = pick(&held.pages, i) {
                let (pfn, order) = held.pages.swap_remove(i);
                mm.set_page_flags(pfn, PageFlags::LRU).unwrap();
                assert!(matches!(mm.free_pages(pfn, order), Err(mmkit::FreeError::BadPage { .. })));
            }
        }
        Op::Bulk { n, bad } => {
            let mut burst = [None; 16];
            let got = mm.alloc_pages_bulk(gfp, &mut burst[..usize::from(n % 16) + 1]);
            let pages: Vec<Pfn> = burst[..got].iter().flatten().copied().collect();
            if let Some(b) = bad.and_then(|b| pick(&pages, b)) {
                mm.set_page_flags(pages[b], PageFlags::LRU).unwrap();
            }
            // Taken out of `held` first: the free consumes them, bad or not.
            let _ = mm.free_pages_bulk(&pages);
        }
        Op::Contig { pick: i } => {
            let pageblock = 1u64 << mm.geometry().pageblock_order;
            let Some(i) = pick(&held.pages, i) else { return };
            let start = Pfn(held.pages[i].0 .0 & !(pageblock - 1));
            // Only movable pages move; the range is a pageblock.
            if Contig::new(mm).alloc_contig_range(start, Pfn(start.0 + pageblock), MigrateType::Movable, gfp).is_ok() {
                // Pages of the range the input held were moved: their new
                // places are plain pages found at the end.
                held.pages.retain(|&(p, _)| p.0 < start.0 || p.0 >= start.0 + pageblock);
                held.contig.push((start, pageblock));
            }
        }
        Op::Compact => {
            let _ = Tuning::new(&mm).compact_zone(1, None);
            // Moved pages are found at the end, as after `Contig`.
            held.pages.retain(|&(p, _)| mm.page_count(p) == Ok(1));
        }
        Op::Burst { n } => {
            let Ok(mut cpu) = Cpus::new(&mm).pin_cpu(1) else { return };
            let mut got = Vec::new();
            let _ = cpu.burst(gfp, |zone| {
                for _ in 0..n % 8 {
                    if let Ok(pfn) = zone.alloc_pages(gfp, 0) {
                        got.push(pfn);
                    }
                    tick();
                }
            });
            for pfn in got {
                cpu.free_pages(pfn, 0).unwrap();
            }
        }
        Op::Guard { order } => {
            if let Ok(guard) = mm.alloc_pages_guarded(gfp, u32::from(order % 3)) {
                held.guards.push(guard);
            }
        }
        Op::GuardDrop { pick: i } => {
            if let Some(i) = pick(&held.guards, i) {
                drop(held.guards.swap_remove(i));
            }
        }
        Op::GuardForget { pick: i } => {
            if let Some(i) = pick(&held.guards, i) {
                let guard = held.guards.swap_remove(i);
                let pages = 1u64 << guard.order();
                std::mem::forget(guard);
                // Counted through the fixture's total on the next check.
                FORGOTTEN.with(|n| n.set(n.get() + pages));
            }
        }
        Op::PfnCall { pick: i, call } => {
            let Some(i) = pick(&held.guards, i) else { return };
            let pfn = held.guards[i].pfn();
            let refused = match call % PFN_CALLS {
                0 => mm.free_pages(pfn, 0).is_err(),
                1 => mm.put_page(pfn).is_err(),
                2 => mm.get_page(pfn).is_err(),
                3 => mm.set_page_flags(pfn, PageFlags::LRU).is_err(),
                4 => mm.set_page_private(pfn, 1).is_err(),
                _ => mm.free_pages_bulk(&[pfn]).is_err(),
            };
            assert!(refused, "a bare-PFN call changed a guard's page");
        }
        Op::QlAlloc { nr, pinned, ctor } => {
            let nr = usize::from(nr);
            let ctor_fn = |page: &mut [u8]| {
                tick();
                if SCRIPT.reenter.load(Relaxed) % 2 == 1 {
                    if let Ok(pfn) = f.ql.quicklist_alloc(1 - nr, gfp, None) {
                        let _ = f.ql.quicklist_free_page(1 - nr, None, pfn);
                    }
                }
                page[0] = 0x5a;
            };
            let ctor: Option<&dyn Fn(&mut [u8])> = if ctor { Some(&ctor_fn) } else { None };
            if pinned {
                if let Ok(mut cpu) = f.ql.pin_cpu(0) {
                    if let Ok(pfn) = cpu.alloc(nr, gfp, ctor) {
                        // Given up by the handle's drop, as the shared API
                        // hands pages out.
                        held.ql_pages.push((nr, pfn));
                    }
                }
            } else if let Ok(pfn) = f.ql.quicklist_alloc(nr, gfp, ctor) {
                held.ql_pages.push((nr, pfn));
            }
        }
        Op::QlFree { pick: i, dtor } => {
            let Some(i) = pick(&held.ql_pages, i) else { return };
            let (nr, pfn) = held.ql_pages.swap_remove(i);
            let dtor_fn = |_: &mut [u8]| tick();
            let dtor: Option<&dyn Fn(&mut [u8])> = if dtor { Some(&dtor_fn) } else { None };
            f.ql.quicklist_free_page(nr, dtor, pfn).unwrap();
        }
        Op::QlTrim { nr, dtor } => {
            let dtor_fn = |_: &mut [u8]| tick();
            let dtor: Option<&dyn Fn(&mut [u8])> = if dtor { Some(&dtor_fn) } else { None };
            let _ = f.ql.quicklist_trim(usize::from(nr), dtor, 0, 2);
        }
        Op::ZsMalloc { size } => {
            let size = usize::from(size) % PAGE_SIZE + 1;
            if let Ok(h) = f.pool.zs_malloc_copy(&vec![size as u8; size], Gfp::NOIO, 0) {
                held.handles.push(h);
            }
        }
        Op::ZsFree { pick: i, deferred } => {
            let Some(i) = pick(&held.handles, i) else { return };
            let h = held.handles.swap_remove(i);
            let freed = if deferred { f.pool.zs_free_deferred(h) } else { f.pool.zs_free(h) };
            freed.map_err(|(e, _)| e).unwrap();
        }
        Op::ZsRead { pick: i } => {
            let Some(i) = pick(&held.handles, i) else { return };
            let (before, after) = held.handles.split_at(i);
            let (h, after) = after.split_first().expect("picked");
            let neighbour = before.last().or(after.first());
            let got = f.pool.zs_obj_read_with(h, &mut [0; PAGE_SIZE], |bytes| {
                tick();
                let want = bytes.len() as u8;
                assert!(bytes.iter().all(|&b| b == want), "the object's bytes");
                // A call back into the pool: works or is refused.
                match (SCRIPT.reenter.load(Relaxed) % 3, neighbour) {
                    (1, Some(n)) => match f.pool.zs_obj_read(n, &mut [0; PAGE_SIZE]) {
                        Ok(_) | Err(ZsError::Reentered { .. }) => {}
                        Err(e) => panic!("a nested read: {e}"),
                    },
                    (2, _) => {
                        if let Ok(h) = f.pool.zs_malloc(100, Gfp::NOIO, 0) {
                            match f.pool.zs_free(h) {
                                Ok(()) => {}
                                Err((ZsError::Reentered { .. }, h)) => {
                                    // Freed once the read is over.
                                    LATE_FREE.with(|late| late.borrow_mut().push(h));
                                }
                                Err((e, _)) => panic!("a nested free: {e}"),
                            }
                        }
                    }
                    _ => {}
                }
            });
            got.unwrap();
            for h in LATE_FREE.with(|late| std::mem::take(&mut *late.borrow_mut())) {
                f.pool.zs_free(h).map_err(|(e, _)| e).unwrap();
            }
        }
        Op::ZsForeign { pick: i } => {
            let Some(i) = pick(&held.handles, i) else { return };
            let h = held.handles.swap_remove(i);
            let (e, h) = f.other_pool.zs_free(h).unwrap_err();
            assert!(matches!(e, ZsError::InvalidHandle(_)));
            let (_, h) = f.other_pool.zs_free_deferred(h).unwrap_err();
            held.handles.push(h);
        }
        Op::RegionWrite { page, byte } => {
            let Some(region) = &f.region else { return };
            let at = usize::from(page) % REGION_PAGES * PAGE_SIZE + usize::from(byte);
            region.write(at, &[byte; 64]).unwrap();
            REGION_WRITES.with(|w| w.borrow_mut().push((at, byte)));
        }
        Op::RegionRead { page } => {
            let Some(region) = &f.region else { return };
            let at = usize::from(page) % REGION_PAGES * PAGE_SIZE;
            let mut out = vec![0; PAGE_SIZE];
            region.read(at, &mut out).unwrap();
        }
        Op::RegionReclaim { keep } => {
            let Some(region) = &f.region else { return };
            region.reclaim(usize::from(keep % 4)).unwrap();
        }
    }
}

thread_local! {
    static FORGOTTEN: Cell<u64> = const { Cell::new(0) };
    static LATE_FREE: std::cell::RefCell<Vec<Handle>> = const { std::cell::RefCell::new(Vec::new()) };
    static REGION_WRITES: std::cell::RefCell<Vec<(usize, u8)>> = const { std::cell::RefCell::new(Vec::new()) };
}
