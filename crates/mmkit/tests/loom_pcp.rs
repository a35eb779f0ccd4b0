//! Model check (loom) of the per-CPU list locking protocol: allocation and
//! free try the pageset lock and fall back to the zone; drains take pagesets
//! blocking; a pinned CPU's owner serves drain requests raised by others.
//! Every interleaving loom explores must end with all pages accounted for
//! and the buddy invariants intact.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p mmkit --release --test loom_pcp`
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use mmkit::Cpus;
use mmkit::{Gfp, MemoryMapBuilder, PageAllocator, Report, ZoneType};

const PAGES: u64 = 32;

fn small_map() -> PageAllocator {
    MemoryMapBuilder::new()
        .max_page_order(3)
        .pageblock_order(2)
        .section_order(5)
        .zone(0, ZoneType::Normal, 0..PAGES)
        .nr_cpus(2)
        .cpu_id_fn(|| 0)
        .min_free_kbytes(0)
        .build()
        .unwrap()
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(f);
}

fn settle(mm: &PageAllocator) {
    assert_eq!(Cpus::new(&mm).drain_all_pages(), 0);
    Report::new(mm).check_invariants().unwrap();
    assert_eq!(Report::new(&mm).nr_free_pages(), PAGES, "every page is back on the buddy lists");
}

#[test]
fn same_cpu_alloc_free_against_drain() {
    model(|| {
        let mm = Arc::new(small_map());
        let worker = {
            let mm = mm.clone();
            thread::spawn(move || {
                let cpu = Cpus::new(&mm).cpu(0).unwrap();
                let a = cpu.alloc_pages(Gfp::KERNEL, 0).unwrap();
                let b = cpu.alloc_pages(Gfp::KERNEL, 1).unwrap();
                cpu.free_pages(a, 0).unwrap();
                cpu.free_pages(b, 1).unwrap();
            })
        };
        let drainer = {
            let mm = mm.clone();
            thread::spawn(move || {
                Cpus::new(&mm).drain_all_pages();
            })
        };
        let cpu = Cpus::new(&mm).cpu(0).unwrap();
        let c = cpu.alloc_pages(Gfp::KERNEL, 0).unwrap();
        cpu.free_pages(c, 0).unwrap();
        worker.join().unwrap();
        drainer.join().unwrap();
        settle(&mm);
    });
}

#[test]
fn remote_free_lands_on_another_cpu() {
    model(|| {
        let mm = Arc::new(small_map());
        let pfn = Cpus::new(&mm).cpu(0).unwrap().alloc_pages(Gfp::KERNEL, 0).unwrap();
        let freer = {
            let mm = mm.clone();
            thread::spawn(move || Cpus::new(&mm).cpu(1).unwrap().free_pages(pfn, 0).unwrap())
        };
        let cpu0 = Cpus::new(&mm).cpu(0).unwrap();
        let other = cpu0.alloc_pages(Gfp::KERNEL, 0).unwrap();
        assert_ne!(other, pfn, "a live page is never handed out twice");
        cpu0.free_pages(other, 0).unwrap();
        freer.join().unwrap();
        settle(&mm);
    });
}

#[test]
fn pinned_owner_serves_drain_requests() {
    model(|| {
        let mm = Arc::new(small_map());
        let owner = {
            let mm = mm.clone();
            thread::spawn(move || {
                let mut pinned = Cpus::new(&mm).pin_cpu(1).unwrap();
                let a = pinned.alloc_pages(Gfp::KERNEL, 0).unwrap();
                pinned.free_pages(a, 0).unwrap();
                let b = pinned.alloc_pages(Gfp::KERNEL, 0).unwrap();
                pinned.free_pages(b, 0).unwrap();
            })
        };
        let deferred = Cpus::new(&mm).drain_all_pages();
        assert!(deferred <= 1);
        owner.join().unwrap();
        settle(&mm);
    });
}
