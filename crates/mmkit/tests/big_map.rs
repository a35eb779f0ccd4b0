//! Proves that a metadata-only map of 1 TiB (2^28 pages of 4 KiB) can be
//! built and used: every page but the PFN-0 hole is free and managed,
//! allocations and frees of every zone work, and the allocator costs about
//! 16 bytes of descriptor per page (4 GiB), mostly untouched. Build time is
//! printed, not asserted.

use mmkit::{Cpus, Tuning};
use mmkit::{Gfp, MemoryMapBuilder, Report, ZoneType};
use std::time::Instant;

/// (VmSize, VmRSS) of this process in KiB.
fn vm_kib() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmSize:"), field("VmRSS:"))
}

#[test]
fn one_tebibyte_metadata_only() {
    let (size0, rss0) = vm_kib();
    let t = Instant::now();
    let mm = MemoryMapBuilder::with_memory(1 << 40).build().unwrap();
    let built = t.elapsed();
    let (size1, rss1) = vm_kib();
    eprintln!(
        "1 TiB map: built in {built:?}; VmSize +{} MiB, VmRSS +{} MiB",
        (size1 - size0) >> 10,
        (rss1.saturating_sub(rss0)) >> 10
    );

    assert_eq!(mm.start_pfn().0, 0);
    assert_eq!(mm.end_pfn().0, 1 << 28);
    let zones = mm.zones();
    let types: Vec<ZoneType> = zones.iter().map(|z| z.zone_type()).collect();
    assert_eq!(types, [ZoneType::Dma, ZoneType::Dma32, ZoneType::Normal]);
    assert_eq!(zones[0].span(), 1..4096);
    assert_eq!(zones[1].span(), 4096..1 << 20);
    assert_eq!(zones[2].span(), 1 << 20..1 << 28);
    let managed: u64 = zones.iter().map(|z| z.managed_pages()).sum();
    let present: u64 = zones.iter().map(|z| z.present_pages()).sum();
    assert_eq!(present, (1 << 28) - 1, "PFN 0 is not in any zone");
    assert_eq!(managed, present, "nothing else is reserved");
    assert_eq!(Report::new(&mm).nr_free_pages(), managed);
    assert_eq!(Report::new(&mm).nr_free_pages(), (1 << 28) - 1);
    // NORMAL is 2^28 - 2^20 pages: all order-10 blocks.
    let report = Report::new(&mm);
    let normal = &report.zone_snapshots()[2];
    assert_eq!(normal.free.free_blocks_per_order[10], ((1 << 28) - (1 << 20)) >> 10);
    // min_free_kbytes = isqrt(lowmem KiB * 16) = isqrt((2^28 - 1) * 64),
    // just under 2^17 (the 256 MiB ceiling needs 4 TiB).
    assert_eq!(Tuning::new(&mm).min_free_kbytes(), 131_071);

    // Descriptors: 16 B/page = 4 GiB of address space, the rest small.
    let table_mib = (16u64 << 28) >> 20;
    let grew_mib = (size1 - size0) >> 10;
    assert!(grew_mib >= table_mib && grew_mib < table_mib + 512, "address space grew by {grew_mib} MiB");

    // A few allocations in each zone and their frees.
    let t = Instant::now();
    let mut held = Vec::new();
    for (gfp, order, zone) in [
        (Gfp::KERNEL, 0, 2),
        (Gfp::KERNEL, 10, 2),
        (Gfp::HIGHUSER_MOVABLE | Gfp::COMP, 9, 2),
        (Gfp::KERNEL | Gfp::DMA32, 3, 1),
        (Gfp::KERNEL | Gfp::DMA, 0, 0),
        (Gfp::ATOMIC, 5, 2),
    ] {
        let p = mm.alloc_pages(gfp, order).unwrap();
        assert!(zones[zone].span().contains(&p.0), "{gfp} order {order}: {p}");
        assert_eq!(p.0 % (1 << order), 0);
        held.push((p, order));
    }
    let used: u64 = held.iter().map(|&(_, o)| 1u64 << o).sum();
    let pcp: u64 = report.zone_snapshots().iter().map(|z| z.pcp_pages).sum();
    assert_eq!(Report::new(&mm).nr_free_pages() + pcp, managed - used);
    for (p, order) in held {
        mm.free_pages(p, order).unwrap();
    }
    Cpus::new(&mm).drain_all_pages();
    assert_eq!(Report::new(&mm).nr_free_pages(), managed);
    assert_eq!(report.zone_snapshots()[2].free.free_blocks_per_order[10], ((1 << 28) - (1 << 20)) >> 10);
    eprintln!("allocations and frees: {:?}", t.elapsed());
    let (_, rss2) = vm_kib();
    eprintln!("VmRSS after use: +{} MiB", rss2.saturating_sub(rss0) >> 10);
}
