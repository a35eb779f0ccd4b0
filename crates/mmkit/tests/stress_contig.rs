//! Multi-threaded stress of contiguous allocation against ordinary traffic
//! (not a benchmark): worker threads allocate and free movable and
//! unmovable pages through the per-CPU lists, writing a pattern into every
//! page and checking it before each free, while other threads repeatedly
//! collect ranges with `alloc_contig_range` / `cma_alloc` (pulling movable
//! pages out through the copying migrator) and free them with the batched
//! `free_contig_range` / `cma_release`.
//!
//! What it proves: isolation, draining and migration racing with per-CPU
//! allocation and free never hand a page to two owners (the patterns would
//! clash) nor lose one (every page is back at the end), and a busy range
//! changes nothing that is later visible.

use mmkit::Cpus;
use mmkit::{
    Backing, Contig, CopyMigrator, Gfp, HugePages, MemoryMapBuilder, MigrateError, MigrateRequest, MigrateType,
    Migrator, PageAllocator, Pfn, Report, ZoneType,
};
use mmkit_testkit::XorShift64;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

const PAGES: u64 = 16 << 10;
const WORDS: usize = 4096 / 8;

/// Owner tag of every page a worker holds, keyed by PFN; the migrator moves
/// entries when it moves a page, as an owner's page tables would.
type Owners = Arc<Mutex<HashMap<u64, (u64, u32)>>>;

/// The owner's side of migration: like Linux locking and unmapping a page,
/// the owners table is held for the whole move, so no worker writes or frees
/// a page while it is copied, and the entry moves with the contents.
struct LockedMigrator {
    owners: Owners,
    copy: CopyMigrator<fn(Pfn, Pfn, u32)>,
    moved: Arc<std::sync::atomic::AtomicUsize>,
}

impl Migrator for LockedMigrator {
    fn migrate_page(&self, alloc: &PageAllocator, request: &MigrateRequest) -> Result<Pfn, MigrateError> {
        let mut owners = self.owners.lock().unwrap();
        let new = self.copy.migrate_page(alloc, request)?;
        if let Some(entry) = owners.remove(&request.pfn.0) {
            owners.insert(new.0, entry);
        }
        self.moved.fetch_add(1, Ordering::Relaxed);
        Ok(new)
    }
}

fn tag_at(mm: &PageAllocator, pfn: u64) -> u64 {
    let ptr = mm.page_address(Pfn(pfn)).unwrap().as_ptr() as *const u64;
    // SAFETY: the caller owns the page (it is recorded in `Owners` under the
    // lock the caller holds), the mapping lives as long as `mm`, and word 0
    // is in bounds and aligned.
    unsafe { ptr.read_volatile() }
}

fn write_tag(mm: &PageAllocator, pfn: u64, tag: u64) {
    let ptr = mm.page_address(Pfn(pfn)).unwrap().as_ptr() as *mut u64;
    // SAFETY: as in `tag_at`; the page was just allocated to this thread.
    unsafe {
        ptr.write_volatile(tag);
        ptr.add(WORDS - 1).write_volatile(!tag);
    }
}

fn check_tag(mm: &PageAllocator, pfn: u64, tag: u64) {
    let ptr = mm.page_address(Pfn(pfn)).unwrap().as_ptr() as *const u64;
    // SAFETY: as in `tag_at`.
    let (first, last) = unsafe { (ptr.read_volatile(), ptr.add(WORDS - 1).read_volatile()) };
    assert_eq!((first, last), (tag, !tag), "page {pfn:#x} lost its owner's pattern");
}

#[test]
fn contiguous_collection_races_ordinary_traffic() {
    let owners: Owners = Arc::default();
    let no_report: fn(Pfn, Pfn, u32) = |_, _, order| assert_eq!(order, 0);
    let moved = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mm = Arc::new(
        MemoryMapBuilder::new()
            .max_page_order(6)
            .pageblock_order(4)
            .section_order(10)
            .zone(0, ZoneType::Normal, 0..PAGES)
            .cma("cma", PAGES - 2048..PAGES)
            .backing(Backing::RealMemory(HugePages::None))
            .nr_cpus(2)
            .min_free_kbytes(128)
            .hooks(mmkit::QuietHooks)
            .migrator(LockedMigrator {
                owners: owners.clone(),
                copy: CopyMigrator::new(no_report),
                moved: moved.clone(),
            })
            // Linux's placement leaves workers' pages spread over the ranges
            // the collector wants, so it must migrate; an address-ordered
            // policy packs them and the ranges are often free already.
            .placement(mmkit::PlacementPolicy::Linux)
            .build()
            .unwrap(),
    );
    let free_at_start = Report::new(&mm).nr_free_pages();
    let stop = AtomicBool::new(false);
    let cma = Contig::new(&mm).cma_area("cma").unwrap();
    std::thread::scope(|scope| {
        for worker in 0..2u64 {
            let (mm, owners, stop) = (&mm, &owners, &stop);
            scope.spawn(move || {
                let mut rng = XorShift64::new(0x1234_5678_9abc_def1u64 ^ worker);
                let mut round = 0u64;
                while !stop.load(Ordering::Relaxed) || round < 2000 {
                    round += 1;
                    let seed = rng.next_u64();
                    let gfp = if seed % 3 == 0 { Gfp::KERNEL } else { Gfp::HIGHUSER_MOVABLE };
                    // The owners lock is held across alloc + tag so that the
                    // migrator (which takes it too) never moves a page whose
                    // tag is not written yet.
                    let mut held = owners.lock().unwrap();
                    let mine: Vec<u64> =
                        held.iter().filter(|(_, &(w, _))| w == worker).map(|(&p, _)| p).take(4).collect();
                    if mine.len() < 3 || seed % 2 == 0 {
                        if let Ok(pfn) = mm.alloc_pages(gfp, 0) {
                            let tag = (worker << 48) | round;
                            write_tag(mm, pfn.0, tag);
                            held.insert(pfn.0, (worker, round as u32));
                        }
                    } else {
                        let pfn = mine[(seed % mine.len() as u64) as usize];
                        let (_, r) = held.remove(&pfn).unwrap();
                        check_tag(mm, pfn, (worker << 48) | r as u64);
                        mm.free_pages(Pfn(pfn), 0).unwrap();
                    }
                    if held.values().filter(|&&(w, _)| w == worker).count() > 3000 {
                        let drop: Vec<u64> =
                            held.iter().filter(|(_, &(w, _))| w == worker).map(|(&p, _)| p).take(1000).collect();
                        for pfn in drop {
                            let (_, r) = held.remove(&pfn).unwrap();
                            check_tag(mm, pfn, (worker << 48) | r as u64);
                            mm.free_pages(Pfn(pfn), 0).unwrap();
                        }
                    }
                }
            });
        }
        let (mm, stop) = (&mm, &stop);
        scope.spawn(move || {
            let mut collected = 0;
            for i in 0..1500u64 {
                let start = 1024 + (i * 64) % (PAGES - 4096);
                if let Ok(()) =
                    Contig::new(mm).alloc_contig_range(Pfn(start), Pfn(start + 64), MigrateType::Movable, Gfp::KERNEL)
                {
                    for p in start..start + 64 {
                        write_tag(mm, p, 0xc0de_0000 + p);
                    }
                    for p in start..start + 64 {
                        assert_eq!(tag_at(mm, p), 0xc0de_0000 + p, "contiguous page {p:#x} shared");
                    }
                    Contig::new(mm).free_contig_range(Pfn(start), 64).unwrap();
                    collected += 1;
                }
                if let Ok(pfn) = Contig::new(mm).cma_alloc(cma, 128, 4) {
                    for p in pfn.0..pfn.0 + 128 {
                        write_tag(mm, p, 0xcafe_0000 + p);
                    }
                    for p in pfn.0..pfn.0 + 128 {
                        assert_eq!(tag_at(mm, p), 0xcafe_0000 + p, "CMA page {p:#x} shared");
                    }
                    Contig::new(mm).cma_release(cma, pfn, 128).unwrap();
                }
            }
            stop.store(true, Ordering::Relaxed);
            assert!(collected > 0, "no contiguous range was ever collected");
        });
    });
    // Everything still held goes back; every tag must have survived.
    let mut held = owners.lock().unwrap();
    for (pfn, (worker, r)) in held.drain() {
        check_tag(&mm, pfn, (worker << 48) | r as u64);
        mm.free_pages(Pfn(pfn), 0).unwrap();
    }
    assert_eq!(Cpus::new(&mm).drain_all_pages(), 0);
    Report::new(&mm).check_invariants().unwrap();
    assert_eq!(Report::new(&mm).nr_free_pages(), free_at_start, "every page came back");
    assert!(moved.load(Ordering::Relaxed) > 0, "no page was ever migrated: the test did not exercise migration");
}
