//! Rule 3 of "Safe at the edges", the re-entry half: a callback may call
//! back into the library that called it. From every callback kind, a
//! re-entrant call of the same layer runs under a watchdog: it works, or
//! gets a typed error, or a documented panic; it never hangs. Afterwards
//! the invariants hold and every page and object is back.

use mmkit::hooks::{AllocFailure, BadPageReport, ReclaimRequest};
use mmkit::Blocks;
use mmkit::{
    Backing, Contig, CopyMigrator, Gfp, Hooks, HugePages, MemoryMapBuilder, MigrateType, PageAllocator, PageFlags, Pfn,
    Report,
};
use mmkit::{Cpus, Tuning};
use mmkit_edges::within;
use mmkit_quicklist::Quicklists;
use mmkit_zsmalloc::{ZsError, ZsPool};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock, Weak};

const WATCHDOG_SECONDS: u64 = 60;

fn real_map(bytes: u64) -> MemoryMapBuilder {
    MemoryMapBuilder::with_memory(bytes).backing(Backing::RealMemory(HugePages::None)).nr_cpus(2)
}

fn all_back(mm: &PageAllocator, total: u64, what: &str) {
    Cpus::new(mm).drain_all_pages();
    Report::new(mm).check_invariants().unwrap_or_else(|e| panic!("{what}: {e:?}"));
    assert_eq!(
        Report::new(mm).nr_free_pages() + Report::new(mm).nr_pcp_pages() + Report::new(mm).stats().bad_pages_leaked,
        total,
        "{what}: pages lost"
    );
}

/// The map a hook calls back into, once it is built.
type Later = Arc<OnceLock<Weak<PageAllocator>>>;

/// Every hook calls back into the allocator: an allocation and its free,
/// a bulk free, a drain, and (from the bad-page hooks and the clock) a
/// free that reports another bad page, once, so that it does not recurse
/// for ever.
struct ReentrantHooks {
    mm: Later,
    depth: AtomicU64,
    calls: Arc<AtomicU64>,
}

impl ReentrantHooks {
    fn reenter(&self, bad_page_too: bool) {
        self.calls.fetch_add(1, Relaxed);
        let Some(mm) = self.mm.get().and_then(Weak::upgrade) else { return };
        if self.depth.fetch_add(1, Relaxed) > 0 {
            self.depth.fetch_sub(1, Relaxed);
            return;
        }
        if let Ok(pfn) = mm.alloc_pages(Gfp::KERNEL | Gfp::NOWARN, 0) {
            mm.free_pages(pfn, 0).unwrap();
        }
        let mut burst = [None; 4];
        let n = mm.alloc_pages_bulk(Gfp::KERNEL | Gfp::NOWARN, &mut burst);
        let pages: Vec<Pfn> = burst[..n].iter().flatten().copied().collect();
        mm.free_pages_bulk(&pages).unwrap();
        Cpus::new(&mm).drain_all_pages();
        if bad_page_too {
            if let Ok(pfn) = mm.alloc_pages(Gfp::KERNEL | Gfp::NOWARN, 0) {
                mm.set_page_flags(pfn, PageFlags::LRU).unwrap();
                let _ = mm.free_pages(pfn, 0);
            }
        }
        self.depth.fetch_sub(1, Relaxed);
    }
}

impl Hooks for ReentrantHooks {
    fn wake_kswapd(&self, _: &ReclaimRequest) {
        self.reenter(false);
    }
    fn direct_reclaim(&self, _: &ReclaimRequest) -> u64 {
        self.reenter(false);
        0
    }
    fn direct_compact(&self, _: &ReclaimRequest) -> bool {
        self.reenter(false);
        false
    }
    fn retry_nofail(&self, _: &ReclaimRequest) -> bool {
        self.reenter(false);
        false
    }
    fn bad_page(&self, _: &BadPageReport) {
        self.reenter(true);
    }
    fn alloc_failed(&self, _: &AllocFailure) {
        self.reenter(false);
    }
    fn log(&self, _: core::fmt::Arguments<'_>) {
        self.reenter(true);
    }
    fn now_ns(&self) -> Option<u64> {
        self.reenter(true);
        Some(0)
    }
}

#[test]
fn every_hook_may_call_back_into_the_allocator() {
    let later: Later = Arc::new(OnceLock::new());
    let calls = Arc::new(AtomicU64::new(0));
    let hooks = ReentrantHooks { mm: later.clone(), depth: AtomicU64::new(0), calls: calls.clone() };
    let mm = Arc::new(real_map(8 << 20).hooks(hooks).build().unwrap());
    later.set(Arc::downgrade(&mm)).unwrap();
    let total = Report::new(&mm).nr_free_pages() + Report::new(&mm).nr_pcp_pages();
    let mm = within("hooks re-entering", WATCHDOG_SECONDS, move || {
        // Bad pages on each free path, then every slow-path hook.
        let pfn = mm.alloc_pages(Gfp::KERNEL, 1).unwrap();
        mm.set_page_flags(pfn, PageFlags::LRU).unwrap();
        let _ = mm.free_pages(pfn, 1);
        let mut burst = [None; 8];
        let n = mm.alloc_pages_bulk(Gfp::KERNEL, &mut burst);
        let pages: Vec<Pfn> = burst[..n].iter().flatten().copied().collect();
        mm.set_page_flags(pages[2], PageFlags::LRU).unwrap();
        let _ = mm.free_pages_bulk(&pages);
        let contig = Contig::new(&mm);
        let start = contig.alloc_contig_pages(4, Gfp::KERNEL, 0).unwrap();
        mm.set_page_flags(Pfn(start.0 + 1), PageFlags::LRU).unwrap();
        let _ = contig.free_contig_range(start, 4);
        let mut held = Vec::new();
        while let Ok(pfn) = mm.alloc_pages(Gfp::KERNEL, 3) {
            held.push((pfn, 3));
        }
        while let Ok(pfn) = mm.alloc_pages(Gfp::KERNEL | Gfp::NOFAIL, 0) {
            held.push((pfn, 0));
        }
        for (pfn, order) in held {
            mm.free_pages(pfn, order).unwrap();
        }
        mm
    });
    assert!(calls.load(Relaxed) >= 8, "the hooks ran");
    all_back(&mm, total, "hooks re-entering");
}

#[test]
fn a_migrator_may_call_back_into_the_allocator() {
    let later: Later = Arc::new(OnceLock::new());
    let inner = later.clone();
    let calls = Arc::new(AtomicU64::new(0));
    let counted = calls.clone();
    let mm = real_map(16 << 20)
        .migrator(CopyMigrator::new(move |old: Pfn, _new, _order| {
            counted.fetch_add(1, Relaxed);
            let Some(mm) = inner.get().and_then(Weak::upgrade) else { return };
            // An allocation and free, and a contiguous request over the
            // range being collected (its pageblocks are isolated: busy).
            let pfn = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
            mm.free_pages(pfn, 0).unwrap();
            let got = Contig::new(&mm).alloc_contig_range(old, Pfn(old.0 + 1), MigrateType::Movable, Gfp::KERNEL);
            assert!(got.is_err(), "a page of an isolated range is not handed out twice");
            let _ = Tuning::new(&mm).compact_zone(1, None);
        }))
        .build()
        .unwrap();
    let mm = Arc::new(mm);
    later.set(Arc::downgrade(&mm)).unwrap();
    let total = Report::new(&mm).nr_free_pages() + Report::new(&mm).nr_pcp_pages();
    let mm = within("migrator re-entering", WATCHDOG_SECONDS, move || {
        let pageblock = 1u64 << mm.geometry().pageblock_order;
        let held: Vec<Pfn> = (0..pageblock).map(|_| mm.alloc_pages(Gfp::HIGHUSER_MOVABLE, 0).unwrap()).collect();
        // The highest pageblock they reach, inside the top zone.
        let start = Pfn(held.iter().max().unwrap().0 & !(pageblock - 1));
        let contig = Contig::new(&mm);
        contig.alloc_contig_range(start, Pfn(start.0 + pageblock), MigrateType::Movable, Gfp::KERNEL).unwrap();
        contig.free_contig_range(start, pageblock).unwrap();
        mm
    });
    assert!(calls.load(Relaxed) > 0, "the migrator ran");
    for pfn in (mm.start_pfn().0..mm.end_pfn().0).map(Pfn) {
        if mm.page_flags(pfn).is_ok_and(|f| f.contains(PageFlags::ALLOCATED))
            && Blocks::new(&mm).page_owner(pfn).is_none()
        {
            mm.free_pages(pfn, 0).unwrap();
        }
    }
    all_back(&mm, total, "migrator re-entering");
}

#[test]
fn a_burst_closure_may_call_the_shared_api() {
    let mm = Arc::new(real_map(16 << 20).build().unwrap());
    let total = Report::new(&mm).nr_free_pages() + Report::new(&mm).nr_pcp_pages();
    let mm = within("burst closure re-entering", WATCHDOG_SECONDS, move || {
        let mut cpu = Cpus::new(&mm).pin_cpu(0).unwrap();
        cpu.burst(Gfp::KERNEL, |zone| {
            let own = zone.alloc_pages(Gfp::KERNEL, 0).unwrap();
            // The shared API, the zone this thread holds included: served,
            // or (a path that needs this zone's lock) the documented panic
            // of `PinnedCpu::burst`, which loses nothing.
            let shared = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                for order in [0, 1, 3, 9] {
                    if let Ok(pfn) = mm.alloc_pages(Gfp::KERNEL, order) {
                        mm.free_pages(pfn, order).unwrap();
                    }
                }
                let mut burst = [None; 16];
                let n = mm.alloc_pages_bulk(Gfp::KERNEL, &mut burst);
                let pages: Vec<Pfn> = burst[..n].iter().flatten().copied().collect();
                mm.free_pages_bulk(&pages).unwrap();
                Cpus::new(&mm).drain_all_pages();
            }));
            let another_cpu = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                assert!(Cpus::new(&mm).pin_cpu(0).is_err(), "the CPU is pinned already");
                let mut other = Cpus::new(&mm).pin_cpu(1).unwrap();
                let pfn = other.alloc_pages(Gfp::KERNEL, 0).unwrap();
                other.free_pages(pfn, 0).unwrap();
            }));
            for payload in [shared, another_cpu].into_iter().filter_map(Result::err) {
                let text = payload
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| payload.downcast_ref::<&str>().copied())
                    .unwrap_or("");
                assert!(text.starts_with("self-deadlock"), "an undocumented panic: {text}");
            }
            zone.free_pages(own, 0).unwrap();
        })
        .unwrap();
        drop(cpu);
        mm
    });
    all_back(&mm, total, "burst re-entering");
}

#[test]
fn a_quicklist_constructor_may_call_back_into_its_quicklists() {
    for pinned in [false, true] {
        let mm = Arc::new(real_map(16 << 20).build().unwrap());
        let total = Report::new(&mm).nr_free_pages() + Report::new(&mm).nr_pcp_pages();
        let what = if pinned { "pinned quicklist ctor re-entering" } else { "quicklist ctor re-entering" };
        let mm = within(what, WATCHDOG_SECONDS, move || {
            let ql = Quicklists::new(mm.clone(), 2).unwrap();
            let inner: Vec<Pfn> = {
                let got = std::cell::RefCell::new(Vec::new());
                let ctor = |page: &mut [u8]| {
                    page[0] = 1;
                    // The same list and another one, through the shared API.
                    for nr in [0, 1] {
                        if let Ok(pfn) = ql.quicklist_alloc(nr, Gfp::KERNEL, None) {
                            got.borrow_mut().push((nr, pfn));
                        }
                    }
                    let _ = ql.quicklist_trim(0, None, 0, 1);
                };
                let dtor = |_: &mut [u8]| {
                    let _ = ql.quicklist_drain(1, None);
                };
                let outer = if pinned {
                    let mut cpu = ql.pin_cpu(0).unwrap();
                    let pfn = cpu.alloc(0, Gfp::KERNEL, Some(&ctor)).unwrap();
                    cpu.free_page(0, Some(&dtor), pfn).unwrap();
                    cpu.drain(0, Some(&dtor)).unwrap();
                    pfn
                } else {
                    let pfn = ql.quicklist_alloc(0, Gfp::KERNEL, Some(&ctor)).unwrap();
                    ql.quicklist_free_page(0, Some(&dtor), pfn).unwrap();
                    ql.quicklist_drain(0, Some(&dtor)).unwrap();
                    pfn
                };
                let got = got.into_inner();
                for &(nr, pfn) in &got {
                    ql.quicklist_free_page(nr, None, pfn).unwrap();
                }
                let mut pfns: Vec<Pfn> = got.iter().map(|&(_, p)| p).collect();
                pfns.push(outer);
                pfns
            };
            assert!(!inner.is_empty());
            drop(ql);
            mm
        });
        all_back(&mm, total, what);
    }
}

#[test]
fn a_zsmalloc_read_closure_may_call_back_into_its_pool() {
    let mm = Arc::new(real_map(32 << 20).build().unwrap());
    let total = Report::new(&mm).nr_free_pages() + Report::new(&mm).nr_pcp_pages();
    let mm = within("zs_obj_read_with closure re-entering", WATCHDOG_SECONDS, move || {
        let pool = ZsPool::zs_create_pool("reentry", mm.clone()).unwrap();
        let a = pool.zs_malloc_copy(&[1; 500], Gfp::NOIO, 0).unwrap();
        let b = pool.zs_malloc_copy(&[2; 500], Gfp::NOIO, 0).unwrap();
        let other = pool.zs_malloc_copy(&[3; 2000], Gfp::NOIO, 0).unwrap();
        let b = pool
            .zs_obj_read_with(&a, &mut [0; 4096], |bytes| {
                assert_eq!(bytes[0], 1);
                // The class being read: refused with a typed error, the
                // handle handed back.
                assert!(matches!(pool.zs_malloc(500, Gfp::NOIO, 0), Err(ZsError::Reentered { .. })));
                assert!(matches!(pool.zs_obj_write(&b, &[9; 4]), Err(ZsError::Reentered { .. })));
                let (e, b) = pool.zs_free(b).unwrap_err();
                assert!(matches!(e, ZsError::Reentered { .. }));
                let b = match pool.zs_replace(b, &[8; 500], Gfp::NOIO, 0) {
                    Err((ZsError::Reentered { .. }, b)) => b,
                    other => panic!("a replace in the class being read: {:?}", other.map(|h| h.id())),
                };
                // A read of it: works or is refused, never waits.
                match pool.zs_obj_read(&b, &mut [0; 4096]) {
                    Ok(n) => assert_eq!(n, 500),
                    Err(e) => assert!(matches!(e, ZsError::Reentered { .. })),
                }
                // Another class works.
                let mut back = [0; 4096];
                assert_eq!(pool.zs_obj_read(&other, &mut back), Ok(2000));
                pool.zs_obj_write(&other, &[4; 10]).unwrap();
                let extra = pool.zs_malloc_copy(&[5; 3000], Gfp::NOIO, 0).unwrap();
                pool.zs_free(extra).map_err(|(e, _)| e).unwrap();
                // What has no error to give panics, documented, never hangs.
                let compact = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| pool.zs_compact()));
                let _ = compact;
                b
            })
            .unwrap();
        pool.zs_obj_write(&b, &[6; 10]).unwrap();
        for h in [a, b, other] {
            pool.zs_free(h).map_err(|(e, _)| e).unwrap();
        }
        pool.check_invariants().unwrap();
        drop(pool);
        mm
    });
    all_back(&mm, total, "zsmalloc re-entering");
}
