//! Proves the Linux behaviours mmkit promises, through the public API:
//! compound and frozen pages, `__GFP_ZERO` on real memory, zone selection
//! (DMA, DMA32, NORMAL, MOVABLE, `__GFP_THISNODE` and node fallback), the
//! exact watermark boundaries of `zone_watermark_ok` (MIN/LOW marks,
//! `lowmem_reserve`, the extra reserves of GFP_ATOMIC) and migratetype
//! grouping (claiming whole pageblocks, the highatomic reserve and its 1%
//! cap). The slow path and its hooks are in `slow_path.rs`.

use mmkit::gfp::Watermark;
use mmkit::Tuning;
use mmkit::{
    AllocError, Backing, Gfp, HugePages, MemoryMapBuilder, MigrateType, PageAllocator, PageFlags, Pfn, Report, ZoneType,
};

/// Index of the zone holding `pfn`.
fn zone_index(mm: &PageAllocator, pfn: Pfn) -> usize {
    mm.zones().iter().position(|z| z.span().contains(&pfn.0)).expect("allocated pfn lies in a zone")
}

fn zone_type_of(mm: &PageAllocator, pfn: Pfn) -> ZoneType {
    mm.zones()[zone_index(mm, pfn)].zone_type()
}

/// DMA 0..1024, DMA32 1024..2048, NORMAL 2048..4096, MOVABLE 4096..5120.
fn four_zones() -> PageAllocator {
    MemoryMapBuilder::new()
        .zone(0, ZoneType::Dma, 0..1024)
        .zone(0, ZoneType::Dma32, 1024..2048)
        .zone(0, ZoneType::Normal, 2048..4096)
        .zone(0, ZoneType::Movable, 4096..5120)
        .per_cpu_lists(false)
        .build()
        .unwrap()
}

/// What `zone_watermark_ok` lets an order-0 GFP_ATOMIC request (MIN_RESERVE
/// and NON_BLOCK) go down to: min, less half, less a further quarter.
fn atomic_mark(min: u64) -> u64 {
    let m = min - min / 2;
    m - m / 4
}

// ---------------------------------------------------------------- pages

#[test]
fn compound_page_tails_point_at_head_and_share_its_count() {
    let mm = MemoryMapBuilder::with_memory(64 << 20).per_cpu_lists(false).build().unwrap();
    let free = Report::new(&mm).nr_free_pages();
    let head = mm.alloc_pages(Gfp::KERNEL | Gfp::COMP, 3).unwrap();
    assert_eq!(head.0 % 8, 0);
    let hf = mm.page_flags(head).unwrap();
    assert!(hf.contains(PageFlags::HEAD | PageFlags::ALLOCATED));
    for i in 0..8 {
        let p = Pfn(head.0 + i);
        assert_eq!(mm.compound_head(p), Ok(head));
        assert_eq!(mm.page_count(p), Ok(1));
        if i > 0 {
            assert!(mm.page_flags(p).unwrap().contains(PageFlags::TAIL));
        }
    }
    // A reference taken through a tail raises the head's count.
    assert_eq!(mm.get_page(Pfn(head.0 + 5)), Ok(2));
    assert_eq!(mm.page_count(head), Ok(2));
    // Dropping it through another tail keeps the page...
    mm.put_page(Pfn(head.0 + 7)).unwrap();
    assert_eq!(mm.page_count(head), Ok(1));
    assert_eq!(Report::new(&mm).nr_free_pages(), free - 8);
    // ...and the last reference, dropped through a tail, frees all 8 pages.
    mm.put_page(Pfn(head.0 + 1)).unwrap();
    assert_eq!(Report::new(&mm).nr_free_pages(), free);
    for i in 0..8 {
        let f = mm.page_flags(Pfn(head.0 + i)).unwrap();
        assert!(!f.intersects(PageFlags::HEAD | PageFlags::TAIL | PageFlags::ALLOCATED));
        assert_eq!(mm.compound_head(Pfn(head.0 + i)), Ok(Pfn(head.0 + i)));
    }
    Report::new(&mm).check_invariants().unwrap();

    // Without COMP an order-3 block is not compound; COMP at order 0 is a
    // plain page.
    let p = mm.alloc_pages(Gfp::KERNEL, 3).unwrap();
    assert_eq!(mm.compound_head(Pfn(p.0 + 3)), Ok(Pfn(p.0 + 3)));
    assert!(!mm.page_flags(p).unwrap().contains(PageFlags::HEAD));
    let q = mm.alloc_pages(Gfp::KERNEL | Gfp::COMP, 0).unwrap();
    assert!(!mm.page_flags(q).unwrap().contains(PageFlags::HEAD));
    mm.free_pages(p, 3).unwrap();
    mm.put_page(q).unwrap();
    assert_eq!(Report::new(&mm).nr_free_pages(), free);
}

#[test]
fn frozen_pages_have_no_references() {
    let mm = MemoryMapBuilder::with_memory(64 << 20).per_cpu_lists(false).build().unwrap();
    let free = Report::new(&mm).nr_free_pages();
    let p = mm.alloc_frozen_pages(Gfp::KERNEL, 2).unwrap();
    assert_eq!(mm.page_count(p), Ok(0));
    assert!(mm.page_flags(p).unwrap().contains(PageFlags::ALLOCATED));
    assert_eq!(Report::new(&mm).nr_free_pages(), free - 4);
    let c = mm.alloc_frozen_pages(Gfp::KERNEL | Gfp::COMP, 2).unwrap();
    assert_eq!(mm.compound_head(Pfn(c.0 + 3)), Ok(c));
    assert_eq!(mm.page_count(Pfn(c.0 + 3)), Ok(0));
    mm.free_frozen_pages(p, 2).unwrap();
    mm.free_frozen_pages(c, 2).unwrap();
    assert_eq!(Report::new(&mm).nr_free_pages(), free);
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn gfp_zero_zeroes_real_memory() {
    let mm = MemoryMapBuilder::new()
        .zone(0, ZoneType::Normal, 0..4096)
        .backing(Backing::RealMemory(HugePages::None))
        .per_cpu_lists(false)
        .build()
        .unwrap();
    let size = mm.geometry().page_size() as usize;
    let fill = |p: Pfn, pages: usize, byte: u8| {
        let ptr = mm.page_address(p).unwrap().as_ptr();
        // SAFETY: the test owns these allocated pages.
        unsafe { ptr.write_bytes(byte, pages * size) };
    };
    let bytes = |p: Pfn, pages: usize| -> Vec<u8> {
        let ptr = mm.page_address(p).unwrap().as_ptr();
        // SAFETY: the test owns these allocated pages.
        unsafe { std::slice::from_raw_parts(ptr, pages * size).to_vec() }
    };
    for order in [0u32, 3] {
        let n = 1usize << order;
        let dirty = mm.alloc_pages(Gfp::KERNEL, order).unwrap();
        fill(dirty, n, 0xa5);
        mm.free_pages(dirty, order).unwrap();
        // Without ZERO the old contents survive (so zeroing is real work).
        let mut held = Vec::new();
        loop {
            let p = mm.alloc_pages(Gfp::KERNEL, order).unwrap();
            held.push(p);
            if p == dirty {
                assert!(bytes(p, n).iter().all(|&b| b == 0xa5));
                break;
            }
            assert!(held.len() < 4096 >> order, "never got the dirty block back");
        }
        for p in held.drain(..) {
            mm.free_pages(p, order).unwrap();
        }
        // With ZERO every block handed out is zero, the dirty one included.
        loop {
            let p = mm.alloc_pages(Gfp::KERNEL | Gfp::ZERO, order).unwrap();
            assert!(bytes(p, n).iter().all(|&b| b == 0), "pfn {p} not zeroed");
            fill(p, n, 0x5a);
            held.push(p);
            if p == dirty {
                break;
            }
            assert!(held.len() < 4096 >> order, "never got the dirty block back");
        }
        for p in held {
            mm.free_pages(p, order).unwrap();
        }
    }
    Report::new(&mm).check_invariants().unwrap();
}

// ---------------------------------------------------------------- zones

#[test]
fn watermark_setup_follows_linux_formulas() {
    let mm = four_zones();
    // lowmem = DMA + DMA32 + NORMAL = 4096 pages = 16 MiB → 512 KiB.
    assert_eq!(Tuning::new(&mm).min_free_kbytes(), 512);
    let z = mm.zones();
    let mins: Vec<u64> = z.iter().map(|z| z.watermark(Watermark::Min)).collect();
    // 128 pages split by managed pages; MOVABLE gets the clamp to 32.
    assert_eq!(mins, [32, 32, 64, 32]);
    let lows: Vec<u64> = z.iter().map(|z| z.watermark(Watermark::Low)).collect();
    assert_eq!(lows, [40, 40, 80, 40]);
    // lowmem_reserve: pages of the zones above / ratio (256, 256, 32).
    assert_eq!(z[0].lowmem_reserve(ZoneType::Normal), (1024 + 2048) / 256);
    assert_eq!(z[1].lowmem_reserve(ZoneType::Normal), 2048 / 256);
    assert_eq!(z[1].lowmem_reserve(ZoneType::Movable), 3072 / 256);
    assert_eq!(z[2].lowmem_reserve(ZoneType::Movable), 1024 / 32);
    assert_eq!(z[2].lowmem_reserve(ZoneType::Normal), 0);
}

#[test]
fn watermarks_convert_kbytes_to_pages_for_any_page_size() {
    // 8192 pages of 512 bytes = 4 MiB: min_free_kbytes = sqrt(4096 * 16) =
    // 256 KiB = 512 pages.
    let mm =
        MemoryMapBuilder::new().page_size(512).zone(0, ZoneType::Normal, 0..8192).per_cpu_lists(false).build().unwrap();
    assert_eq!(Tuning::new(&mm).min_free_kbytes(), 256);
    assert_eq!(mm.zones()[0].watermark(Watermark::Min), 512);
    // 4096 pages of 64 KiB = 256 MiB: 2048 KiB = 32 pages.
    let mm = MemoryMapBuilder::new()
        .page_size(64 << 10)
        .zone(0, ZoneType::Normal, 0..4096)
        .per_cpu_lists(false)
        .build()
        .unwrap();
    assert_eq!(Tuning::new(&mm).min_free_kbytes(), 2048);
    assert_eq!(mm.zones()[0].watermark(Watermark::Min), 32);
}

#[test]
fn gfp_kernel_prefers_normal_and_stops_at_min_plus_lowmem_reserve() {
    let mm = four_zones();
    let zones = mm.zones();
    let [dma, dma32, normal, movable] = [&zones[0], &zones[1], &zones[2], &zones[3]];
    let mut got = Vec::new();
    let mut first_dma32 = None;
    let mut first_dma = None;
    while let Ok(p) = mm.alloc_pages(Gfp::KERNEL | Gfp::NOWARN, 0) {
        let t = zone_type_of(&mm, p);
        assert_ne!(t, ZoneType::Movable, "GFP_KERNEL must never use MOVABLE");
        if t == ZoneType::Dma32 && first_dma32.is_none() {
            first_dma32 = Some(got.len());
            // The fast path leaves NORMAL only at its LOW mark.
            assert_eq!(normal.free_pages(), normal.watermark(Watermark::Low));
        }
        if t == ZoneType::Dma && first_dma.is_none() {
            first_dma = Some(got.len());
            let low = dma32.watermark(Watermark::Low);
            assert_eq!(dma32.free_pages(), low + dma32.lowmem_reserve(ZoneType::Normal));
        }
        got.push(p);
    }
    let normal_low = normal.watermark(Watermark::Low);
    assert_eq!(first_dma32, Some((2048 - normal_low) as usize));
    assert!(got[..first_dma32.unwrap()].iter().all(|&p| zone_type_of(&mm, p) == ZoneType::Normal));
    assert!(first_dma.unwrap() > first_dma32.unwrap());
    // Each zone ends exactly at MIN + lowmem_reserve[NORMAL].
    for z in [dma, dma32, normal] {
        let floor = z.watermark(Watermark::Min) + z.lowmem_reserve(ZoneType::Normal);
        assert_eq!(z.free_pages(), floor, "{:?}", z.zone_type());
    }
    assert_eq!(movable.free_pages(), 1024);
    let expected: u64 = [dma, dma32, normal]
        .iter()
        .map(|z| z.managed_pages() - z.watermark(Watermark::Min) - z.lowmem_reserve(ZoneType::Normal))
        .sum();
    assert_eq!(got.len() as u64, expected);
    assert_eq!(expected, (1024 - 44) + (1024 - 40) + (2048 - 64));

    // GFP_NOWAIT has no reserves: it fails here too.
    assert!(mm.alloc_pages(Gfp::NOWAIT, 0).is_err());
    // GFP_ATOMIC goes deeper, to half of MIN less a quarter.
    let mut atomic = 0u64;
    while let Ok(p) = mm.alloc_pages(Gfp::ATOMIC | Gfp::NOWARN, 0) {
        assert_ne!(zone_type_of(&mm, p), ZoneType::Movable);
        atomic += 1;
    }
    let mut expected_atomic = 0;
    for z in [dma, dma32, normal] {
        let min = z.watermark(Watermark::Min);
        let floor = atomic_mark(min) + z.lowmem_reserve(ZoneType::Normal);
        assert_eq!(z.free_pages(), floor, "{:?}", z.zone_type());
        expected_atomic += min - atomic_mark(min);
    }
    assert_eq!(atomic, expected_atomic);
    // A DMA request is not held back by DMA's lowmem_reserve[NORMAL]: its
    // own reserve (index DMA) is 0, so it may take the DMA zone down to
    // the atomic mark alone.
    let mut dma_only = 0;
    while let Ok(p) = mm.alloc_pages(Gfp::ATOMIC | Gfp::DMA | Gfp::NOWARN, 0) {
        assert_eq!(zone_type_of(&mm, p), ZoneType::Dma);
        dma_only += 1;
    }
    assert_eq!(dma_only, dma.lowmem_reserve(ZoneType::Normal));
    assert_eq!(dma.free_pages(), atomic_mark(dma.watermark(Watermark::Min)));
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn dma_requests_stay_in_dma() {
    let mm = four_zones();
    let mut n = 0;
    while let Ok(p) = mm.alloc_pages(Gfp::KERNEL | Gfp::DMA | Gfp::NOWARN, 1) {
        assert_eq!(zone_type_of(&mm, p), ZoneType::Dma);
        n += 1;
    }
    assert!(n > 400, "only {n} DMA allocations");
    let z = mm.zones();
    assert_eq!(z[1].free_pages(), 1024);
    assert_eq!(z[2].free_pages(), 2048);
    assert_eq!(z[3].free_pages(), 1024);
}

#[test]
fn dma32_requests_use_dma32_then_dma() {
    let mm = four_zones();
    let z = mm.zones();
    let mut seen_dma = false;
    while let Ok(p) = mm.alloc_pages(Gfp::KERNEL | Gfp::DMA32 | Gfp::NOWARN, 0) {
        match zone_type_of(&mm, p) {
            ZoneType::Dma32 => assert!(!seen_dma || z[1].free_pages() >= 32),
            ZoneType::Dma => {
                if !seen_dma {
                    assert_eq!(z[1].free_pages(), z[1].watermark(Watermark::Low));
                }
                seen_dma = true;
            }
            other => panic!("DMA32 request served from {other:?}"),
        }
    }
    assert!(seen_dma);
    assert_eq!(z[1].free_pages(), z[1].watermark(Watermark::Min));
    let dma_floor = z[0].watermark(Watermark::Min) + z[0].lowmem_reserve(ZoneType::Dma32);
    assert_eq!(z[0].free_pages(), dma_floor);
    assert_eq!(z[2].free_pages(), 2048);
    assert_eq!(z[3].free_pages(), 1024);
}

#[test]
fn highuser_movable_uses_the_movable_zone_first() {
    let mm = four_zones();
    let z = mm.zones();
    let movable_low = z[3].watermark(Watermark::Low);
    for _ in 0..(1024 - movable_low) {
        let p = mm.alloc_pages(Gfp::HIGHUSER_MOVABLE, 0).unwrap();
        assert_eq!(zone_type_of(&mm, p), ZoneType::Movable);
    }
    let p = mm.alloc_pages(Gfp::HIGHUSER_MOVABLE, 0).unwrap();
    assert_eq!(zone_type_of(&mm, p), ZoneType::Normal);
    // HIGHMEM without MOVABLE, or MOVABLE without HIGHMEM, means NORMAL.
    for gfp in [Gfp::HIGHUSER, Gfp::KERNEL | Gfp::MOVABLE] {
        let before = z[3].free_pages();
        let p = mm.alloc_pages(gfp, 0).unwrap();
        assert_eq!(zone_type_of(&mm, p), ZoneType::Normal, "{gfp}");
        assert_eq!(z[3].free_pages(), before);
    }
}

/// Node 0: NORMAL 0..2048; node 1: NORMAL 2048..4096.
fn two_nodes() -> PageAllocator {
    MemoryMapBuilder::new()
        .zone(0, ZoneType::Normal, 0..2048)
        .zone(1, ZoneType::Normal, 2048..4096)
        .per_cpu_lists(false)
        .build()
        .unwrap()
}

#[test]
fn thisnode_never_leaves_the_node_and_plain_requests_fall_back() {
    let mm = two_nodes();
    assert_eq!(mm.nr_nodes(), 2);
    let (n0, n1) = (&mm.zones()[0], &mm.zones()[1]);
    assert_eq!((n0.nid(), n1.nid()), (0, 1));
    // Without THISNODE node 0 is used down to its LOW mark, then node 1.
    let low = n0.watermark(Watermark::Low);
    for _ in 0..(2048 - low) {
        let p = mm.alloc_pages_node(0, Gfp::KERNEL, 0).unwrap();
        assert!(p.0 < 2048);
    }
    let p = mm.alloc_pages_node(0, Gfp::KERNEL, 0).unwrap();
    assert!(p.0 >= 2048, "fell back to node 1");
    // With THISNODE node 0 goes down to MIN and no further.
    let mut n = 0;
    loop {
        match mm.alloc_pages_node(0, Gfp::KERNEL | Gfp::THISNODE | Gfp::NOWARN, 0) {
            Ok(p) => {
                assert!(p.0 < 2048, "THISNODE returned node 1's pfn {p}");
                n += 1;
            }
            Err(e) => {
                assert!(matches!(e, AllocError::NoMemory { order: 0, .. }));
                break;
            }
        }
    }
    assert_eq!(n, low - n0.watermark(Watermark::Min));
    assert_eq!(n0.free_pages(), n0.watermark(Watermark::Min));
    let n1_free = n1.free_pages();
    assert!(mm.alloc_pages_node(0, Gfp::KERNEL | Gfp::THISNODE | Gfp::NOWARN, 3).is_err());
    assert_eq!(n1.free_pages(), n1_free);
    // The other node's own requests are unaffected.
    let q = mm.alloc_pages_node(1, Gfp::KERNEL | Gfp::THISNODE, 3).unwrap();
    assert!(q.0 >= 2048);
    Report::new(&mm).check_invariants().unwrap();
}

// ---------------------------------------------------------------- migratetypes

fn pageblocks(mm: &PageAllocator, zone: usize) -> Vec<u64> {
    Report::new(mm).zone_snapshots()[zone].free.pageblocks_per_type.clone()
}

#[test]
fn movable_round_trip_keeps_pageblocks_movable() {
    let mm = MemoryMapBuilder::new().zone(0, ZoneType::Normal, 0..4096).per_cpu_lists(false).build().unwrap();
    let line = "Node 0, zone   Normal            0            8            0            0            0            0 \n";
    let report = Report::new(&mm);
    assert!(report.pagetypeinfo().ends_with(line), "{}", report.pagetypeinfo());
    let mut held = Vec::new();
    while let Ok(p) = mm.alloc_pages(Gfp::HIGHUSER_MOVABLE | Gfp::MEMALLOC | Gfp::NOWARN, 0) {
        held.push(p);
    }
    assert_eq!(held.len(), 4096);
    assert_eq!(report.zone_snapshots()[0].counters.fallback_allocs, 0);
    for p in held {
        mm.free_pages(p, 0).unwrap();
    }
    assert!(report.pagetypeinfo().ends_with(line), "{}", report.pagetypeinfo());
    assert_eq!(pageblocks(&mm, 0), [0, 8, 0, 0, 0, 0]);
    assert_eq!(report.zone_snapshots()[0].free.free_blocks_per_order[10], 4);
    report.check_invariants().unwrap();
}

#[test]
fn unmovable_request_claims_whole_pageblocks() {
    let mm = MemoryMapBuilder::new().zone(0, ZoneType::Normal, 0..4096).per_cpu_lists(false).build().unwrap();
    assert_eq!(pageblocks(&mm, 0)[MigrateType::Unmovable as usize], 0);
    let p = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
    let report = Report::new(&mm);
    let snap = &report.zone_snapshots()[0];
    // The largest free block (order 10 = two pageblocks) is claimed whole:
    // no unmovable page sits in a movable pageblock.
    assert_eq!(snap.free.pageblocks_per_type, [2, 6, 0, 0, 0, 0]);
    assert_eq!(snap.counters.pageblocks_claimed, 2);
    assert_eq!(snap.counters.fallback_allocs, 1);
    assert_eq!(snap.free_pages_by_type[MigrateType::Unmovable as usize], 1023);
    assert_eq!(snap.free_pages_by_type[MigrateType::Movable as usize], 3072);
    // Further unmovable requests use the claimed blocks, no new fallback.
    let q = mm.alloc_pages(Gfp::KERNEL, 3).unwrap();
    assert_eq!(q.0 / 1024, p.0 / 1024, "same claimed block");
    assert_eq!(report.zone_snapshots()[0].counters.fallback_allocs, 1);
    // Reclaimable requests claim their own pageblocks.
    mm.alloc_pages(Gfp::KERNEL | Gfp::RECLAIMABLE, 0).unwrap();
    assert_eq!(pageblocks(&mm, 0), [2, 4, 2, 0, 0, 0]);
    report.check_invariants().unwrap();
}

#[test]
fn atomic_high_order_success_reserves_highatomic_capped_at_one_percent() {
    // 8192 pages, pageblocks of 16: 1% = 81 pages, rounded up to 96.
    let mm = MemoryMapBuilder::new()
        .pageblock_order(4)
        .zone(0, ZoneType::Normal, 0..8192)
        .per_cpu_lists(false)
        .build()
        .unwrap();
    let cap = 96;
    // Below LOW so GFP_ATOMIC takes the slow path with ALLOC_HIGHATOMIC.
    while mm.alloc_pages(Gfp::KERNEL | Gfp::NOWARN, 0).is_ok() {}
    let report = Report::new(&mm);
    assert_eq!(report.zone_snapshots()[0].reserved_highatomic, 0);
    mm.alloc_pages(Gfp::ATOMIC, 2).unwrap();
    let snap = &report.zone_snapshots()[0];
    assert_eq!(snap.reserved_highatomic, 16);
    assert_eq!(snap.counters.highatomic_reserved, 1);
    assert_eq!(snap.free.pageblocks_per_type[MigrateType::HighAtomic as usize], 1);
    // The rest of that pageblock's free pages moved to the HighAtomic list.
    assert!(snap.free_pages_by_type[MigrateType::HighAtomic as usize] <= 12);
    let mut n = 1;
    while mm.alloc_pages(Gfp::ATOMIC | Gfp::NOWARN, 2).is_ok() {
        n += 1;
        let r = report.zone_snapshots()[0].reserved_highatomic;
        assert!(r <= cap, "reserve {r} above 1% after {n} allocations");
        report.check_invariants().unwrap();
    }
    let snap = &report.zone_snapshots()[0];
    assert_eq!(snap.reserved_highatomic, cap, "after {n} order-2 allocations");
    assert_eq!(snap.free.pageblocks_per_type[MigrateType::HighAtomic as usize], 6);
    report.check_invariants().unwrap();
}

/// A pageblock-order block (Linux's THP order, which the per-CPU lists
/// cache) goes back to the CPU's list when freed and the next allocation
/// of that order takes it from there, not from the buddy: the buddy's
/// fast path is only for orders no list serves.
#[test]
fn pageblock_order_allocations_take_the_per_cpu_list_first() {
    // Movable: the buddy has free blocks of the request's own type from
    // the start, so a buddy fast path taking this order would find one.
    // Big enough that the list's `high` holds two blocks.
    let mm = MemoryMapBuilder::with_memory(1 << 30).nr_cpus(1).cpu_id_fn(|| 0).build().unwrap();
    let gfp = Gfp::HIGHUSER_MOVABLE;
    let block = mm.alloc_pages(gfp, 9).unwrap();
    let before = Report::new(&mm).nr_pcp_pages();
    mm.free_pages(block, 9).unwrap();
    assert_eq!(Report::new(&mm).nr_pcp_pages(), before + 512, "the freed block is on the list");
    let again = mm.alloc_pages(gfp, 9).unwrap();
    assert_eq!(again, block, "the list's block came back");
    assert_eq!(Report::new(&mm).nr_pcp_pages(), before);
    mm.free_pages(again, 9).unwrap();
    Report::new(&mm).check_invariants().unwrap();
}
