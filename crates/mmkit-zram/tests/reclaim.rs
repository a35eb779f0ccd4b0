//! A discard and a `compact` give the device's memory back to the OS:
//! 256 MiB of real pages (the system's libraries and programs, which
//! compress as real data does) are written, everything is discarded, and
//! after `compact` the resident size of the device's memory (its map's
//! pages present in `/proc/self/pagemap`) is below 40 % of its peak.
//! `reset` gives it back the same way.

use mmkit::PageAllocator;
use mmkit::Report;
use mmkit_zram::{Zram, ZramConfig, PAGE_SIZE};

const WRITTEN: usize = 256 << 20;

/// Resident bytes of the allocator's memory, read from
/// `/proc/self/pagemap` (exact to the map's range).
fn resident_bytes(mm: &PageAllocator) -> u64 {
    let start = mm.page_address(mm.start_pfn()).expect("real memory").as_ptr() as u64;
    let len = (mm.end_pfn().0 - mm.start_pfn().0) * mm.geometry().page_size();
    mmkit_testkit::pages::resident_bytes(start, len)
}

fn write_all(zram: &Zram, pages: &[Vec<u8>]) {
    for i in 0..WRITTEN / PAGE_SIZE {
        zram.open().unwrap().write((i * PAGE_SIZE) as u64, &pages[i % pages.len()]).unwrap();
    }
}

#[test]
fn discard_and_compact_give_the_memory_back() {
    let mut config = ZramConfig::default();
    config.set("size", "512M").unwrap();
    let zram = Zram::with_own_memory(config).unwrap();
    let mm = std::sync::Arc::clone(zram.pool().expect("initialised").allocator());
    let pages = mmkit_testkit::kernel_zram::real_pages(WRITTEN / PAGE_SIZE);
    write_all(&zram, &pages);
    let peak = resident_bytes(&mm);
    // The pool's pages; mm_stat's mem_used_total adds the slot table, which
    // is heap memory, not the allocator's.
    let stored = zram.pool().unwrap().zs_get_total_pages() * PAGE_SIZE as u64;
    assert!(stored > 16 << 20 && peak >= stored, "stored {stored} bytes, {peak} resident");

    zram.open().unwrap().discard(0, WRITTEN as u64).unwrap();
    let discarded = resident_bytes(&mm);
    zram.attr_store("compact", "1").unwrap();
    let after = resident_bytes(&mm);
    eprintln!("device memory rss: peak {peak}, after discard {discarded}, after compact {after} (stored {stored})");
    assert!(after * 10 < peak * 4, "resident {after} after compact, not below 40 % of the peak {peak}");
    assert_eq!(zram.pool().unwrap().zs_get_total_pages(), 0);
    // What mem_used_total still counts is the slot table: 64 KiB for every
    // 16 MiB written, and the directory.
    let mm_stat = zram.mm_stat_values();
    assert_eq!(mm_stat.mem_used_total, 16 * (64 << 10) + 32 * 24, "mem_used_total: {mm_stat:?}");

    // Written again, the memory comes back and holds the data; reset gives
    // it back again.
    write_all(&zram, &pages);
    assert!(resident_bytes(&mm) * 10 >= peak * 8, "the device's pages refaulted");
    let mut out = vec![0u8; PAGE_SIZE];
    for i in (0..WRITTEN / PAGE_SIZE).step_by(97) {
        zram.open().unwrap().read((i * PAGE_SIZE) as u64, &mut out).unwrap();
        assert_eq!(out, pages[i % pages.len()], "page {i}");
    }
    zram.attr_store("reset", "1").unwrap();
    let after_reset = resident_bytes(&mm);
    assert!(after_reset * 10 < peak * 4, "resident {after_reset} after reset, not below 40 % of the peak {peak}");
    Report::new(&mm).check_invariants().unwrap();
}
