//! Owned contiguous ranges (`alloc_contig_block` / `free_contig_block`):
//! - an owned range frees to exactly the state the frozen-range free leaves
//!   (twin allocators, ranges at aligned and unaligned starts);
//! - every other free path refuses its pages with a typed error or leaves
//!   them to their owner (counted), and `get_page` cannot take a reference;
//! - another allocator's range is handed back unchanged;
//! - a poisoned page is taken out of service and the rest is freed;
//! - a page whose embedder flags were set meanwhile is reported and leaked.

use mmkit::Blocks;
use mmkit::Cpus;
use mmkit::{
    Contig, ContigError, ContigRangeError, FreeError, Gfp, MemoryFailure, MemoryMapBuilder, MigrateType, PageAllocator,
    PageError, PageFlags, Pfn, QuietHooks, Report, ZoneType,
};

mod common;
use common::{first_difference, observe};

fn map() -> PageAllocator {
    MemoryMapBuilder::new().zone(0, ZoneType::Normal, 0..0x8000).hooks(QuietHooks).cpu_id_fn(|| 0).build().unwrap()
}

#[test]
fn owned_free_leaves_what_the_frozen_free_leaves() {
    let (owned, frozen) = (map(), map());
    let pool = Blocks::new(&owned).new_owner_key().unwrap();
    for (start, end) in [(0x1000, 0x2000), (0x2003, 0x2a11), (0x4001, 0x4002), (0x5000, 0x7fff)] {
        let (start, end) = (Pfn(start), Pfn(end));
        let range =
            Contig::new(&owned).alloc_contig_block(&pool, start, end, MigrateType::Movable, Gfp::KERNEL).unwrap();
        assert_eq!((range.start(), range.end(), range.nr_pages()), (start, end, end.0 - start.0));
        Contig::new(&frozen).alloc_contig_frozen_range(start, end, MigrateType::Movable, Gfp::KERNEL).unwrap();
        let a = Contig::new(&owned).free_contig_block(range).unwrap();
        let b = Contig::new(&frozen).free_contig_frozen_range(start, end.0 - start.0).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.freed, end.0 - start.0);
        Cpus::new(&owned).drain_all_pages();
        Cpus::new(&frozen).drain_all_pages();
        if let Some(diff) = first_difference(&observe(&owned), &observe(&frozen)) {
            panic!("owned and frozen frees differ after {start}..{end}: {diff}");
        }
        Report::new(&owned).check_invariants().unwrap();
    }
}

#[test]
fn other_paths_refuse_owned_pages() {
    let mm = map();
    let pool = Blocks::new(&mm).new_owner_key().unwrap();
    let contig = Contig::new(&mm);
    let range = contig.alloc_contig_block(&pool, Pfn(0x1000), Pfn(0x1010), MigrateType::Movable, Gfp::KERNEL).unwrap();
    let free_before = Report::new(&mm).nr_free_pages();
    let owned = FreeError::Owned { pfn: Pfn(0x1004), owner: pool.owner() };
    assert_eq!(mm.free_pages(Pfn(0x1004), 0), Err(owned));
    assert_eq!(mm.free_frozen_pages(Pfn(0x1004), 0), Err(owned));
    assert_eq!(mm.put_page(Pfn(0x1004)), Err(owned));
    // Owned: both range frees refuse them before touching anything.
    let first = FreeError::Owned { pfn: Pfn(0x1000), owner: pool.owner() };
    assert_eq!(contig.free_contig_range(Pfn(0x1000), 16), Err(first));
    assert_eq!(contig.free_contig_frozen_range(Pfn(0x1000), 16), Err(first));
    assert_eq!(
        mm.get_page(Pfn(0x1004)),
        Err(PageError::Owned { pfn: Pfn(0x1004), owner: pool.owner() }),
        "owned: no references"
    );
    assert!(Blocks::new(&mm).take_back_block(&pool, Pfn(0x1004), 0).is_err());
    assert_eq!(Report::new(&mm).nr_free_pages(), free_before, "nothing changed");
    assert_eq!(
        contig.alloc_contig_block(&pool, Pfn(0x1008), Pfn(0x1020), MigrateType::Movable, Gfp::KERNEL),
        Err(ContigError::Busy { pfn: Pfn(0x1008) }),
        "an owned range is not collected again"
    );
    assert_eq!(contig.free_contig_block(range).unwrap().freed, 16);
    Cpus::new(&mm).drain_all_pages();
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn compound_owned_ranges_are_refused() {
    let mm = map();
    let pool = Blocks::new(&mm).new_owner_key().unwrap();
    let got = Contig::new(&mm).alloc_contig_block(
        &pool,
        Pfn(0x1000),
        Pfn(0x1010),
        MigrateType::Movable,
        Gfp::KERNEL | Gfp::COMP,
    );
    assert_eq!(got, Err(ContigError::InvalidGfp(Gfp::COMP)));
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn a_foreign_range_is_handed_back() {
    let (a, b) = (map(), map());
    let pool = Blocks::new(&a).new_owner_key().unwrap();
    let range =
        Contig::new(&a).alloc_contig_block(&pool, Pfn(0x1000), Pfn(0x1100), MigrateType::Movable, Gfp::KERNEL).unwrap();
    let free_b = Report::new(&b).nr_free_pages();
    let Err(ContigRangeError::Foreign(range)) = Contig::new(&b).free_contig_block(range) else {
        panic!("another allocator's range must be refused");
    };
    assert_eq!(Report::new(&b).nr_free_pages(), free_b);
    assert_eq!(Contig::new(&a).free_contig_block(range).unwrap().freed, 0x100);
    Report::new(&a).check_invariants().unwrap();
}

#[test]
fn poisoned_pages_leave_service_and_the_rest_is_freed() {
    let mm = map();
    let pool = Blocks::new(&mm).new_owner_key().unwrap();
    let free_before = Report::new(&mm).nr_free_pages();
    let range = Contig::new(&mm)
        .alloc_contig_block(&pool, Pfn(0x2000), Pfn(0x2400), MigrateType::Movable, Gfp::KERNEL)
        .unwrap();
    assert_eq!(mm.memory_failure(Pfn(0x2123)), Ok(MemoryFailure::InUse));
    let summary = Contig::new(&mm).free_contig_block(range).unwrap();
    assert_eq!((summary.freed, summary.hwpoisoned, summary.bad), (0x3ff, 1, 0));
    Cpus::new(&mm).drain_all_pages();
    assert_eq!(Report::new(&mm).nr_free_pages(), free_before - 1);
    let mut all = Vec::new();
    while let Ok(pfn) = mm.alloc_pages(Gfp::KERNEL, 0) {
        assert_ne!(pfn, Pfn(0x2123), "a poisoned page came back");
        all.push(pfn);
    }
    for pfn in all {
        mm.free_pages(pfn, 0).unwrap();
    }
    Cpus::new(&mm).drain_all_pages();
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn pages_cannot_be_changed_behind_the_handle() {
    let mm = map();
    let pool = Blocks::new(&mm).new_owner_key().unwrap();
    let free_before = Report::new(&mm).nr_free_pages();
    let range = Contig::new(&mm)
        .alloc_contig_block(&pool, Pfn(0x3000), Pfn(0x3040), MigrateType::Movable, Gfp::KERNEL)
        .unwrap();
    // A flag or private word set behind the handle made its free report a
    // bad page and leak it; the bare-PFN calls refuse owned pages now.
    let owned = Err(PageError::Owned { pfn: Pfn(0x3007), owner: pool.owner() });
    assert_eq!(mm.set_page_flags(Pfn(0x3007), PageFlags::LRU), owned);
    assert_eq!(mm.set_page_private(Pfn(0x3007), 7), owned);
    let summary = Contig::new(&mm).free_contig_block(range).unwrap();
    assert_eq!((summary.freed, summary.bad), (0x40, 0));
    assert_eq!(Report::new(&mm).stats().bad_pages, 0);
    Cpus::new(&mm).drain_all_pages();
    assert_eq!(Report::new(&mm).nr_free_pages(), free_before, "every page back");
    Report::new(&mm).check_invariants().unwrap();
}
