//! Free page reporting gives memory back to the OS: 256 MiB of a
//! real-memory map are allocated and written, freed, and one reporting
//! pass later the map's resident size is
//! below 40 % of its peak; the same memory then allocates again, reads
//! zero under `Gfp::ZERO` and holds a pattern. Resident means present in
//! `/proc/self/pagemap`, counted over the map's own pages only.

use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder, PageAllocator, Pfn, Report};
use mmkit::{Cpus, Tuning};

const MIB: u64 = 1 << 20;

/// Resident bytes of the allocator's memory, read from
/// `/proc/self/pagemap` (exact to the map's range).
fn resident_bytes(mm: &PageAllocator) -> u64 {
    let start = mm.page_address(mm.start_pfn()).unwrap().as_ptr() as u64;
    let len = (mm.end_pfn().0 - mm.start_pfn().0) * mm.geometry().page_size();
    mmkit_testkit::pages::resident_bytes(start, len)
}

fn fill(mm: &PageAllocator, pfn: Pfn, order: u32, byte: u8) {
    let ptr = mm.page_address(pfn).unwrap().as_ptr();
    // SAFETY: the block [pfn, pfn + 2^order) is allocated to this test and
    // lies inside the map's mapping (page_address of its first page, and
    // blocks never leave the map).
    unsafe { ptr.write_bytes(byte, 4096 << order) };
}

fn all_bytes(mm: &PageAllocator, pfn: Pfn, order: u32, byte: u8) -> bool {
    let ptr = mm.page_address(pfn).unwrap().as_ptr();
    // SAFETY: as in `fill`; the block is allocated to this test.
    let bytes = unsafe { std::slice::from_raw_parts(ptr, 4096 << order) };
    bytes.iter().all(|&b| b == byte)
}

/// 128 MiB as 2 MiB blocks and 128 MiB as 4 KiB pages.
fn allocate(mm: &PageAllocator, gfp: Gfp) -> Vec<(Pfn, u32)> {
    let mut blocks = Vec::new();
    for _ in 0..((128 * MIB) >> 21) {
        blocks.push((mm.alloc_pages(gfp, 9).unwrap(), 9));
    }
    for _ in 0..((128 * MIB) >> 12) {
        blocks.push((mm.alloc_pages(gfp, 0).unwrap(), 0));
    }
    blocks
}

#[test]
fn freed_memory_leaves_the_resident_set_and_comes_back_zeroed() {
    let mm = MemoryMapBuilder::with_memory(512 * MIB).backing(Backing::RealMemory(HugePages::None)).build().unwrap();
    let fresh = resident_bytes(&mm);
    assert_eq!(Tuning::new(&mm).report_free_pages().pages, 0, "a fresh map has nothing resident to report");

    let blocks = allocate(&mm, Gfp::KERNEL);
    for &(pfn, order) in &blocks {
        fill(&mm, pfn, order, 0xa5);
    }
    let peak = resident_bytes(&mm);
    assert!(peak >= fresh + 250 * MIB, "written: {peak} bytes resident");
    for &(pfn, order) in &blocks {
        mm.free_pages(pfn, order).unwrap();
    }
    Cpus::new(&mm).drain_all_pages();
    let freed = resident_bytes(&mm);
    assert!(freed >= peak - 8 * MIB, "freeing alone keeps the memory: {freed} of {peak}");

    let summary = Tuning::new(&mm).report_free_pages();
    let after = resident_bytes(&mm);
    eprintln!("map rss: fresh {fresh}, peak {peak}, freed {freed}, after reporting {after}; {summary:?}");
    assert!(summary.pages >= (240 * MIB) >> 12, "{summary:?}");
    assert!(after * 10 < peak * 4, "resident after reporting {after} not below 40 % of the peak {peak}");
    assert!(Report::new(&mm).nr_reported_pages() >= summary.pages);
    assert_eq!(Tuning::new(&mm).report_free_pages().pages, 0, "nothing is reported twice");
    assert!(Report::new(&mm).stats().reported_pages >= summary.pages);
    Report::new(&mm).check_invariants().unwrap();

    // The memory comes back: zeroed when asked, and usable.
    let blocks = allocate(&mm, Gfp::KERNEL | Gfp::ZERO);
    for &(pfn, order) in &blocks {
        assert!(all_bytes(&mm, pfn, order, 0), "a reused page under Gfp::ZERO is not zero");
        fill(&mm, pfn, order, 0x3c);
    }
    for &(pfn, order) in &blocks {
        assert!(all_bytes(&mm, pfn, order, 0x3c));
        mm.free_pages(pfn, order).unwrap();
    }
    assert!(resident_bytes(&mm) >= 250 * MIB, "the pages refaulted on reuse");
    Cpus::new(&mm).drain_all_pages();
    Report::new(&mm).check_invariants().unwrap();
}
