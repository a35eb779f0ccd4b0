//! Rule 3 of "Safe at the edges", the panic half: every callback may
//! panic. For each callback kind a scripted workload runs once to count
//! the callback's invocations, then once for every `k` of them with a
//! panic injected at the `k`-th; after each run (the panic caught, the
//! caller's own objects given back) the map's invariants hold and every
//! page is free again, or held by someone who can still give it back, or
//! counted as a bad page the workload itself provoked.

use mmkit::hooks::{AllocFailure, BadPageReport, ReclaimRequest};
use mmkit::Blocks;
use mmkit::{
    Backing, Contig, CopyMigrator, Gfp, Hooks, HugePages, MemoryMapBuilder, MigrateError, MigrateRequest, MigrateType,
    Migrator, PageAllocator, PageFlags, Pfn, Report,
};
use mmkit::{Cpus, Tuning};
use mmkit_edges::{catch_scripted, quiet_scripted_panics, Script};
use mmkit_quicklist::Quicklists;
use mmkit_zsmalloc::ZsPool;
use std::sync::Arc;

/// Under Miri, a smaller workload (and map).
const MIRI: bool = cfg!(miri);

/// Runs `workload(k)` for `k = 0` (no panic: counts the invocations `n`)
/// and then for every `k` in `1..=n`; each run returns the number of
/// invocations it saw. Fails if a run that was to panic did not.
fn for_every_panic(what: &str, mut workload: impl FnMut(u64) -> (u64, bool)) -> u64 {
    quiet_scripted_panics();
    let (n, panicked) = workload(0);
    assert!(!panicked, "{what}: a run without injection panicked");
    assert!(n > 0, "{what}: the workload never called the callback");
    for k in 1..=n {
        let (_, panicked) = workload(k);
        assert!(panicked, "{what}: invocation {k} of {n} did not happen");
    }
    n
}

/// The map's invariants, and every page free (after a drain) but the
/// `leaked` bad pages.
fn all_back(mm: &PageAllocator, total: u64, what: &str) {
    Cpus::new(mm).drain_all_pages();
    Report::new(mm).check_invariants().unwrap_or_else(|e| panic!("{what}: {e:?}"));
    let leaked = Report::new(mm).stats().bad_pages_leaked;
    assert_eq!(Report::new(mm).nr_free_pages() + Report::new(mm).nr_pcp_pages() + leaked, total, "{what}: pages lost");
}

fn real_map(bytes: u64) -> MemoryMapBuilder {
    MemoryMapBuilder::with_memory(bytes).backing(Backing::RealMemory(HugePages::None)).nr_cpus(2)
}

/// Every hook, each a tick of the script; which hooks ran.
struct ScriptedHooks(Arc<Script>, Arc<std::sync::Mutex<std::collections::BTreeSet<&'static str>>>);

impl ScriptedHooks {
    fn tick(&self, hook: &'static str) {
        self.1.lock().unwrap().insert(hook);
        self.0.tick();
    }
}

impl Hooks for ScriptedHooks {
    fn wake_kswapd(&self, _: &ReclaimRequest) {
        self.tick("wake_kswapd");
    }
    fn direct_reclaim(&self, _: &ReclaimRequest) -> u64 {
        self.tick("direct_reclaim");
        0
    }
    fn direct_compact(&self, _: &ReclaimRequest) -> bool {
        self.tick("direct_compact");
        false
    }
    fn retry_nofail(&self, _: &ReclaimRequest) -> bool {
        self.tick("retry_nofail");
        false
    }
    fn bad_page(&self, _: &BadPageReport) {
        self.tick("bad_page");
    }
    fn alloc_failed(&self, _: &AllocFailure) {
        self.tick("alloc_failed");
    }
    fn log(&self, _: core::fmt::Arguments<'_>) {
        self.tick("log");
    }
    fn now_ns(&self) -> Option<u64> {
        self.tick("now_ns");
        Some(0)
    }
}

#[test]
fn a_panic_in_any_hook_loses_no_page() {
    let bytes = 8 << 20;
    let n = for_every_panic("hooks", |k| {
        let script = Arc::new(Script::panic_at(k));
        let seen = Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
        let mm = real_map(bytes).hooks(ScriptedHooks(script.clone(), seen.clone())).build().unwrap();
        let total = Report::new(&mm).nr_free_pages() + Report::new(&mm).nr_pcp_pages();
        let mut held: Vec<(Pfn, u32)> = Vec::new();
        let panicked = catch_scripted(|| {
            // Bad pages on each free path: a plain free, a bulk free and a
            // contiguous free of pages with an embedder flag left set.
            for order in [0, 2] {
                let pfn = mm.alloc_pages(Gfp::KERNEL, order).unwrap();
                mm.set_page_flags(pfn, PageFlags::LRU).unwrap();
                let _ = mm.free_pages(pfn, order);
            }
            let mut burst = [None; 8];
            let n = mm.alloc_pages_bulk(Gfp::KERNEL, &mut burst);
            let pages: Vec<Pfn> = burst[..n].iter().flatten().copied().collect();
            mm.set_page_flags(pages[3], PageFlags::LRU).unwrap();
            let _ = mm.free_pages_bulk(&pages);
            let contig = Contig::new(&mm);
            let start = contig.alloc_contig_pages(8, Gfp::KERNEL, 0).unwrap();
            mm.set_page_flags(Pfn(start.0 + 5), PageFlags::LRU).unwrap();
            let _ = contig.free_contig_range(start, 8);
            // The slow path's hooks: allocate until nothing is left.
            while let Ok(pfn) = mm.alloc_pages(Gfp::KERNEL, 3) {
                held.push((pfn, 3));
            }
            while let Ok(pfn) = mm.alloc_pages(Gfp::KERNEL | Gfp::NOWARN, 0) {
                held.push((pfn, 0));
            }
            // The reserves a NOFAIL request may use, then its retry hook.
            while let Ok(pfn) = mm.alloc_pages(Gfp::KERNEL | Gfp::NOFAIL, 0) {
                held.push((pfn, 0));
            }
        });
        for (pfn, order) in held {
            mm.free_pages(pfn, order).unwrap();
        }
        all_back(&mm, total, &format!("hooks, panic at {k}"));
        if k == 0 {
            let seen: Vec<_> = seen.lock().unwrap().iter().copied().collect();
            let all = [
                "alloc_failed",
                "bad_page",
                "direct_compact",
                "direct_reclaim",
                "log",
                "now_ns",
                "retry_nofail",
                "wake_kswapd",
            ];
            assert_eq!(seen, all, "the workload calls every hook");
        }
        (script.calls(), panicked)
    });
    assert!(n >= 10, "the workload calls every hook: {n} calls");
}

/// A migrator of the embedder's that may panic before it moves anything
/// (the trait's methods), the rest [`CopyMigrator`]'s.
struct PanickyMigrator<F> {
    script: Arc<Script>,
    inner: CopyMigrator<F>,
}

impl<F: Fn(Pfn, Pfn, u32) + Send + Sync> Migrator for PanickyMigrator<F> {
    fn migrate_page(&self, alloc: &PageAllocator, request: &MigrateRequest) -> Result<Pfn, MigrateError> {
        self.script.tick();
        self.inner.migrate_page(alloc, request)
    }
    fn migrate_page_to(
        &self,
        alloc: &PageAllocator,
        request: &MigrateRequest,
        target: Pfn,
    ) -> Result<Pfn, MigrateError> {
        self.script.tick();
        self.inner.migrate_page_to(alloc, request, target)
    }
}

#[test]
fn a_panic_in_a_migrator_loses_no_page() {
    let bytes = if MIRI { 8 << 20 } else { 32 << 20 };
    for in_trait in [false, true] {
        for_every_panic(if in_trait { "Migrator methods" } else { "CopyMigrator on_moved" }, |k| {
            let script = Arc::new(Script::panic_at(k));
            let tripwire = script.clone();
            let builder = real_map(bytes);
            let builder = if in_trait {
                builder.migrator(PanickyMigrator { script: script.clone(), inner: CopyMigrator::new(|_, _, _| {}) })
            } else {
                builder.migrator(CopyMigrator::new(move |_, _, _| tripwire.tick()))
            };
            let mm = builder.build().unwrap();
            let total = Report::new(&mm).nr_free_pages() + Report::new(&mm).nr_pcp_pages();
            let pageblock = 1u64 << mm.geometry().pageblock_order;
            // Movable pages in two pageblocks, half of them freed again so
            // that compaction has holes to fill.
            let mut held: Vec<Pfn> =
                (0..2 * pageblock).filter_map(|_| mm.alloc_pages(Gfp::HIGHUSER_MOVABLE, 0).ok()).collect();
            let mut kept = Vec::new();
            for (i, pfn) in held.drain(..).enumerate() {
                if i % 3 == 0 {
                    kept.push(pfn);
                } else {
                    mm.free_pages(pfn, 0).unwrap();
                }
            }
            let start = Pfn(kept[0].0 & !(pageblock - 1));
            let contig = Contig::new(&mm);
            let mut collected = false;
            let panicked = catch_scripted(|| {
                let _ = Tuning::new(&mm).compact_zone(1, None);
                contig.alloc_contig_range(start, Pfn(start.0 + pageblock), MigrateType::Movable, Gfp::KERNEL).unwrap();
                collected = true;
            });
            if collected {
                contig.free_contig_range(start, pageblock).unwrap();
            }
            // A moved page is somewhere else now: the kept pages are whatever
            // plain pages are allocated, one reference each.
            for pfn in (mm.start_pfn().0..mm.end_pfn().0).map(Pfn) {
                if mm.page_flags(pfn).is_ok_and(|f| f.contains(PageFlags::ALLOCATED))
                    && Blocks::new(&mm).page_owner(pfn).is_none()
                {
                    mm.free_pages(pfn, 0).unwrap();
                }
            }
            all_back(&mm, total, &format!("migrator (in the trait: {in_trait}), panic at {k}"));
            (script.calls(), panicked)
        });
    }
}

#[test]
fn a_panic_in_a_burst_closure_loses_no_page() {
    let bytes = if MIRI { 8 << 20 } else { 32 << 20 };
    for_every_panic("burst closure", |k| {
        let script = Script::panic_at(k);
        let mm = real_map(bytes).build().unwrap();
        let total = Report::new(&mm).nr_free_pages() + Report::new(&mm).nr_pcp_pages();
        let mut held = Vec::new();
        let mut cpu = Cpus::new(&mm).pin_cpu(0).unwrap();
        let panicked = catch_scripted(|| {
            for round in 0..4 {
                cpu.burst(Gfp::KERNEL, |zone| {
                    for _ in 0..8 {
                        let order = round % 2;
                        held.push((zone.alloc_pages(Gfp::KERNEL, order).unwrap(), order));
                        script.tick();
                    }
                    while held.len() > 4 {
                        let (pfn, order) = held.pop().unwrap();
                        zone.free_pages(pfn, order).unwrap();
                        script.tick();
                    }
                })
                .unwrap();
            }
        });
        for (pfn, order) in held {
            cpu.free_pages(pfn, order).unwrap();
        }
        drop(cpu);
        all_back(&mm, total, &format!("burst, panic at {k}"));
        (script.calls(), panicked)
    });
}

#[test]
fn a_panic_in_a_quicklist_constructor_or_destructor_loses_no_page() {
    let bytes = if MIRI { 8 << 20 } else { 32 << 20 };
    for pinned in [false, true] {
        for_every_panic(if pinned { "pinned quicklist ctor/dtor" } else { "quicklist ctor/dtor" }, |k| {
            let script = Script::panic_at(k);
            let mm = Arc::new(real_map(bytes).build().unwrap());
            let total = Report::new(&mm).nr_free_pages() + Report::new(&mm).nr_pcp_pages();
            let ql = Quicklists::new(mm.clone(), 2).unwrap();
            let mut held = Vec::new();
            let ctor = |page: &mut [u8]| {
                script.tick();
                page[0] = 0x11;
            };
            let dtor = |_: &mut [u8]| script.tick();
            let panicked = if pinned {
                let mut cpu = ql.pin_cpu(0).unwrap();
                let panicked = catch_scripted(|| {
                    for _ in 0..6 {
                        held.push(cpu.alloc(1, Gfp::KERNEL, Some(&ctor)).unwrap());
                    }
                    for _ in 0..3 {
                        cpu.free_page(1, Some(&dtor), held.pop().unwrap()).unwrap();
                    }
                    cpu.trim(1, Some(&dtor), 0, 2).unwrap();
                    cpu.drain(1, Some(&dtor)).unwrap();
                });
                for pfn in held.drain(..) {
                    cpu.free_page(1, None, pfn).unwrap();
                }
                panicked
            } else {
                let panicked = catch_scripted(|| {
                    for _ in 0..6 {
                        held.push(ql.quicklist_alloc(1, Gfp::KERNEL, Some(&ctor)).unwrap());
                    }
                    for _ in 0..3 {
                        ql.quicklist_free_page(1, Some(&dtor), held.pop().unwrap()).unwrap();
                    }
                    ql.quicklist_trim(1, Some(&dtor), 0, 2).unwrap();
                    ql.quicklist_drain(1, Some(&dtor)).unwrap();
                });
                for pfn in held.drain(..) {
                    ql.quicklist_free_page(1, None, pfn).unwrap();
                }
                panicked
            };
            drop(ql);
            all_back(&mm, total, &format!("quicklist (pinned {pinned}), panic at {k}"));
            (script.calls(), panicked)
        });
    }
}

#[test]
fn a_panic_in_a_zsmalloc_read_closure_loses_no_object() {
    let bytes = if MIRI { 8 << 20 } else { 32 << 20 };
    for_every_panic("zs_obj_read_with closure", |k| {
        let script = Script::panic_at(k);
        let mm = Arc::new(real_map(bytes).build().unwrap());
        let total = Report::new(&mm).nr_free_pages() + Report::new(&mm).nr_pcp_pages();
        let pool = ZsPool::zs_create_pool("panics", mm.clone()).unwrap();
        let handles: Vec<_> = [100usize, 900, 3000, 4096]
            .iter()
            .map(|&n| pool.zs_malloc_copy(&vec![n as u8; n], Gfp::NOIO, 0).unwrap())
            .collect();
        let panicked = catch_scripted(|| {
            for h in &handles {
                pool.zs_obj_read_with(h, &mut [0; 4096], |bytes| {
                    script.tick();
                    bytes.len()
                })
                .unwrap();
            }
        });
        // Every class is usable again: the read locks went with the panic.
        for h in &handles {
            pool.zs_obj_write(h, &[7; 10]).unwrap();
        }
        for h in handles {
            pool.zs_free(h).map_err(|(e, _)| e).unwrap();
        }
        pool.check_invariants().unwrap();
        drop(pool);
        all_back(&mm, total, &format!("zsmalloc, panic at {k}"));
        (script.calls(), panicked)
    });
}
