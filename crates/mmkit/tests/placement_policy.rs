//! Placement policies: which free block a request gets.

use mmkit::Cpus;
use mmkit::{Gfp, MemoryMapBuilder, PlacementPolicy, Report, ZoneType};

fn map(policy: PlacementPolicy) -> mmkit::PageAllocator {
    MemoryMapBuilder::new()
        .zone(0, ZoneType::Normal, 0x10000..0x14000)
        .per_cpu_lists(false)
        .placement(policy)
        .build()
        .unwrap()
}

#[test]
fn the_default_is_lean_without_an_address_index() {
    let mm = MemoryMapBuilder::new().zone(0, ZoneType::Normal, 0x10000..0x14000).per_cpu_lists(false).build().unwrap();
    assert_eq!(Report::new(&mm).placement_policy(), PlacementPolicy::Lean);
    // The list head, as Linux: the block freed last comes back first.
    let pages: Vec<_> = (0..64).map(|_| mm.alloc_pages(Gfp::HIGHUSER_MOVABLE, 0).unwrap()).collect();
    mm.free_pages(pages[2], 0).unwrap();
    mm.free_pages(pages[40], 0).unwrap();
    assert_eq!(mm.alloc_pages(Gfp::HIGHUSER_MOVABLE, 0).unwrap(), pages[40]);
}

#[test]
fn two_ends_places_unmovable_at_the_top_and_movable_at_the_bottom() {
    let mm = map(PlacementPolicy::TwoEnds);
    assert_eq!(Report::new(&mm).placement_policy(), PlacementPolicy::TwoEnds);
    let movable = mm.alloc_pages(Gfp::HIGHUSER_MOVABLE, 0).unwrap();
    let unmovable = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
    assert_eq!(movable.0, 0x10000);
    assert_eq!(unmovable.0, 0x13fff);
}

#[test]
fn addr_takes_the_lowest_free_block_not_the_last_freed() {
    for (policy, expect_lowest) in [(PlacementPolicy::Addr, true), (PlacementPolicy::Linux, false)] {
        let mm = map(policy);
        let pages: Vec<_> = (0..64).map(|_| mm.alloc_pages(Gfp::HIGHUSER_MOVABLE, 0).unwrap()).collect();
        // Free a low page and then a high one; neither can merge.
        mm.free_pages(pages[2], 0).unwrap();
        mm.free_pages(pages[40], 0).unwrap();
        let again = mm.alloc_pages(Gfp::HIGHUSER_MOVABLE, 0).unwrap();
        assert_eq!(again == pages[2], expect_lowest, "{policy:?} gave {again:?}");
        Report::new(&mm).check_invariants().unwrap();
    }
}

#[test]
fn address_ordered_policies_free_a_mergeable_page_to_the_buddy() {
    for (policy, bypass) in [
        (PlacementPolicy::TwoEnds, true),
        (PlacementPolicy::Addr, true),
        (PlacementPolicy::Lean, false),
        (PlacementPolicy::Linux, false),
    ] {
        let mm = MemoryMapBuilder::new()
            .zone(0, ZoneType::Normal, 0x10000..0x14000)
            .nr_cpus(1)
            .cpu_id_fn(|| 0)
            .placement(policy)
            .build()
            .unwrap();
        let pages: Vec<_> = (0..4).map(|_| mm.alloc_pages(Gfp::HIGHUSER_MOVABLE, 0).unwrap()).collect();
        assert_eq!(pages[3].0, pages[0].0 + 3, "{policy:?}: one refill, in address order");
        // The last page's buddy is the third: free the last, and drain it.
        mm.free_pages(pages[3], 0).unwrap();
        Cpus::new(&mm).drain_all_pages();
        let free = Report::new(&mm).nr_free_pages();
        // Now the third page's buddy sits on the buddy lists.
        mm.free_pages(pages[2], 0).unwrap();
        assert_eq!(Report::new(&mm).nr_free_pages() > free, bypass, "{policy:?}");
        Report::new(&mm).check_invariants().unwrap();
    }
}

#[test]
fn address_ordered_policies_keep_per_cpu_lists_small() {
    let high = |policy| {
        let mm = MemoryMapBuilder::new()
            .zone(0, ZoneType::Normal, 0x10000..0x50000)
            .nr_cpus(1)
            .placement(policy)
            .build()
            .unwrap();
        let info = Cpus::new(&mm).pcp_info(0, 0).unwrap().unwrap();
        (info.high_min, info.high_max)
    };
    let (min, max) = high(PlacementPolicy::TwoEnds);
    assert_eq!(min, max, "no auto-tuning");
    assert_eq!(high(PlacementPolicy::Lean), high(PlacementPolicy::Linux), "lean tunes them as Linux does");
    let (linux_min, linux_max) = high(PlacementPolicy::Linux);
    assert_eq!(min, linux_min);
    assert!(linux_max > linux_min);
}

#[test]
fn lean_movable_pcp_keeps_unmovable_pages_off_the_per_cpu_lists() {
    // (policy, grouping, whether an unmovable request fills the lists)
    for (policy, grouping, cached) in [
        (PlacementPolicy::Lean, true, true),
        (PlacementPolicy::LeanMovablePcp, true, false),
        // Grouping off: every request is unmovable, and all use the lists.
        (PlacementPolicy::LeanMovablePcp, false, true),
    ] {
        let mm = MemoryMapBuilder::new()
            .zone(0, ZoneType::Normal, 0x10000..0x14000)
            .nr_cpus(1)
            .cpu_id_fn(|| 0)
            .group_by_mobility(grouping)
            .placement(policy)
            .build()
            .unwrap();
        let kernel = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
        assert_eq!(
            Report::new(&mm).nr_pcp_pages() > 0,
            cached,
            "{policy:?} grouping {grouping}: a refill brought a batch"
        );
        Cpus::new(&mm).drain_all_pages();
        let free = Report::new(&mm).nr_free_pages();
        mm.free_pages(kernel, 0).unwrap();
        assert_eq!(
            Report::new(&mm).nr_free_pages() == free,
            cached,
            "{policy:?} grouping {grouping}: the free went to the buddy"
        );
        // Movable requests use the lists under every policy.
        Cpus::new(&mm).drain_all_pages();
        let movable = mm.alloc_pages(Gfp::HIGHUSER_MOVABLE, 0).unwrap();
        assert!(Report::new(&mm).nr_pcp_pages() > 0, "{policy:?} grouping {grouping}");
        mm.free_pages(movable, 0).unwrap();
        Cpus::new(&mm).drain_all_pages();
        Report::new(&mm).check_invariants().unwrap();
    }
}

#[test]
fn a_pinned_cpu_decays_its_high_and_spills() {
    // Free as many pages as `high` may grow to on a pinned CPU, then run
    // Linux's periodic decay `decays` times: (free pages, high) after.
    let run = |decays: usize| {
        let mm = MemoryMapBuilder::new().zone(0, ZoneType::Normal, 0x10000..0x50000).nr_cpus(1).build().unwrap();
        let max = Cpus::new(&mm).pcp_info(0, 0).unwrap().unwrap().high_max;
        let mut cpu = Cpus::new(&mm).pin_cpu(0).unwrap();
        let pages: Vec<_> = (0..max).map(|_| cpu.alloc_pages(Gfp::HIGHUSER_MOVABLE, 0).unwrap()).collect();
        for p in pages {
            cpu.free_pages(p, 0).unwrap();
        }
        for _ in 0..decays {
            cpu.decay_pcp_high();
        }
        drop(cpu);
        let out = (Report::new(&mm).nr_free_pages(), Cpus::new(&mm).pcp_info(0, 0).unwrap().unwrap().high);
        Cpus::new(&mm).drain_all_pages();
        Report::new(&mm).check_invariants().unwrap();
        out
    };
    let (free, high) = run(0);
    let (free_decayed, high_decayed) = run(50);
    assert!(free_decayed > free, "decay spilled pages of the pinned lists: {free_decayed} vs {free}");
    assert!(high_decayed < high, "high shrank: {high_decayed} vs {high}");
}

/// Pageblocks of up to 2^20 pages are valid geometry, and the per-pageblock
/// free counts the default policy keeps must hold more than a `u16`: one
/// page taken from a fresh 2^17-page pageblock leaves 2^17 - 1 free pages
/// in smaller blocks inside it (found by the `builder` fuzz target: the
/// count had wrapped to 21206 for 86742 free pages).
#[test]
fn pageblock_free_counts_hold_huge_pageblocks() {
    let geometry = mmkit::Geometry { page_shift: 12, section_order: 20, pageblock_order: 17, max_page_order: 18 };
    let mm = MemoryMapBuilder::new()
        .geometry(geometry)
        .zone(0, ZoneType::Normal, 0..1 << 19)
        .per_cpu_lists(false)
        .build()
        .unwrap();
    let report = Report::new(&mm);
    report.check_invariants().unwrap();
    let pages: Vec<_> = (0..3).map(|_| mm.alloc_pages(Gfp::KERNEL, 0).unwrap()).collect();
    report.check_invariants().unwrap();
    for pfn in pages {
        mm.free_pages(pfn, 0).unwrap();
    }
    report.check_invariants().unwrap();
}
