//! Proves that every builder knob is checked by `build()` (a typed
//! [`BuildError`] naming the knob, never a panic, never a map that fails
//! later), and that every call taking a CPU, node or zone index refuses one
//! that does not exist (issue 22, findings 4–6).

use mmkit::zone::WatermarkConfig;
use mmkit::{
    Backing, BadCmaReason, BadRangeReason, BuildError, Gfp, HugePages, IndexError, MemoryMapBuilder, PageAllocator,
    RangeKind, Report, Tunable, ZoneType,
};
use mmkit::{Cpus, Tuning};

fn small() -> MemoryMapBuilder {
    MemoryMapBuilder::with_memory(16 << 20).nr_cpus(2).hooks(mmkit::QuietHooks)
}

#[track_caller]
fn refused(b: MemoryMapBuilder) -> BuildError {
    match b.build() {
        Ok(_) => panic!("the builder accepted a bad configuration"),
        Err(e) => {
            assert!(!e.to_string().is_empty());
            e
        }
    }
}

#[test]
fn watermark_scale_factor_outside_linux_range() {
    for bad in [0, 3001, u64::MAX] {
        let e = refused(small().watermark_scale_factor(bad));
        assert_eq!(e, BuildError::BadTunable { tunable: Tunable::WatermarkScaleFactor, value: bad });
    }
    for good in [1, 10, 3000] {
        let mm = small().watermark_scale_factor(good).build().unwrap();
        let pfn = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
        mm.free_pages(pfn, 0).unwrap();
        Report::new(&mm).check_invariants().unwrap();
    }
}

#[test]
fn other_watermark_knobs_outside_linux_range() {
    let big = i32::MAX as u64 + 1;
    let e = refused(small().watermarks(WatermarkConfig { watermark_boost_factor: big, ..WatermarkConfig::default() }));
    assert_eq!(e, BuildError::BadTunable { tunable: Tunable::WatermarkBoostFactor, value: big });
    let mut ratio = WatermarkConfig::default();
    ratio.lowmem_reserve_ratio[1] = u64::MAX;
    let e = refused(small().watermarks(ratio));
    assert_eq!(e, BuildError::BadTunable { tunable: Tunable::LowmemReserveRatio, value: u64::MAX });
    for bad in [1, 7] {
        let e = refused(small().percpu_pagelist_high_fraction(bad));
        assert_eq!(e, BuildError::BadTunable { tunable: Tunable::PercpuPagelistHighFraction, value: bad.into() });
    }
    small().percpu_pagelist_high_fraction(8).build().unwrap();
    small().percpu_pagelist_high_fraction(0).build().unwrap();
}

#[test]
fn min_free_kbytes_larger_than_memory() {
    for bad in [16 << 10, 1 << 40, u64::MAX] {
        let e = refused(small().min_free_kbytes(bad));
        assert_eq!(e, BuildError::BadTunable { tunable: Tunable::MinFreeKbytes, value: bad });
    }
    let mm = small().min_free_kbytes(1024).build().unwrap();
    assert_eq!(Tuning::new(&mm).min_free_kbytes(), 1024);
    mm.free_pages(mm.alloc_pages(Gfp::KERNEL, 0).unwrap(), 0).unwrap();
}

#[test]
fn cpu_counts_and_cpu_nodes() {
    assert_eq!(refused(small().nr_cpus(0)), BuildError::BadNrCpus { nr_cpus: 0, max: mmkit::MAX_NR_CPUS });
    let e = refused(small().nr_cpus(usize::MAX));
    assert_eq!(e, BuildError::BadNrCpus { nr_cpus: usize::MAX, max: mmkit::MAX_NR_CPUS });
    let e = refused(small().nr_cpus(2).cpu_node(2, 0));
    assert_eq!(e, BuildError::UnknownCpu { cpu: 2, nr_cpus: 2 });
    let e = refused(small().nr_cpus(2).cpu_node(usize::MAX, 0));
    assert_eq!(e, BuildError::UnknownCpu { cpu: usize::MAX, nr_cpus: 2 });
    small().nr_cpus(mmkit::MAX_NR_CPUS).build().unwrap();
}

#[test]
#[allow(clippy::reversed_empty_ranges)] // reversed on purpose
fn reversed_or_outside_holes_and_reserved_ranges() {
    // The map spans PFNs 1..4096.
    let cases = [
        (small().hole(200..100), RangeKind::Hole, 200..100, BadRangeReason::Reversed),
        (small().reserved(300..299), RangeKind::Reserved, 300..299, BadRangeReason::Reversed),
        (small().hole(4000..5000), RangeKind::Hole, 4000..5000, BadRangeReason::OutsideMap),
        (
            small().reserved(1 << 40..(1 << 40) + 1),
            RangeKind::Reserved,
            1 << 40..(1 << 40) + 1,
            BadRangeReason::OutsideMap,
        ),
    ];
    for (b, kind, pfns, reason) in cases {
        assert_eq!(refused(b), BuildError::BadRange { kind, pfns, reason });
    }
    small().hole(100..200).reserved(300..310).hole(500..500).build().unwrap();
}

#[test]
fn two_cma_areas_with_one_name() {
    let b = small().cma("a", 1024..1536).cma("a", 2048..2560);
    assert_eq!(
        refused(b),
        BuildError::BadCmaArea { name: "a".into(), pfns: 2048..2560, reason: BadCmaReason::DuplicateName }
    );
    small().cma("a", 1024..1536).cma("b", 2048..2560).build().unwrap();
}

#[test]
fn zones_out_of_physical_order() {
    let b = MemoryMapBuilder::new().zone(0, ZoneType::Normal, 0..1024).zone(0, ZoneType::Dma, 1024..2048);
    assert!(matches!(refused(b), BuildError::ZoneOrder { .. }));
    // Across nodes too: DMA is a physical limit, not a node's.
    let b = MemoryMapBuilder::new().zone(0, ZoneType::Normal, 0..1024).zone(1, ZoneType::Dma32, 1024..2048);
    assert!(matches!(refused(b), BuildError::ZoneOrder { .. }));
    // MOVABLE sits above its own node's zones, wherever other nodes are.
    let b = MemoryMapBuilder::new().zone(0, ZoneType::Movable, 0..1024).zone(0, ZoneType::Normal, 1024..2048);
    assert!(matches!(refused(b), BuildError::ZoneOrder { .. }));
    MemoryMapBuilder::new()
        .zone(0, ZoneType::Normal, 0..1024)
        .zone(0, ZoneType::Movable, 1024..2048)
        .zone(1, ZoneType::Normal, 2048..3072)
        .build()
        .unwrap();
}

#[test]
fn sections_smaller_than_a_pageblock() {
    assert!(matches!(refused(small().section_order(0)), BuildError::BadGeometry(_)));
    assert!(matches!(refused(small().section_order(8)), BuildError::BadGeometry(_)));
    let mm = small().section_order(9).build().unwrap();
    mm.free_pages(mm.alloc_pages(Gfp::KERNEL, 9).unwrap(), 9).unwrap();
}

/// Free huge pages the kernel could reserve for a hugetlb mapping now, and
/// how many a 16 MiB map needs.
fn free_and_needed_huge_pages() -> (u64, u64) {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let field = |name: &str| {
        meminfo
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let overcommit = std::fs::read_to_string("/proc/sys/vm/nr_overcommit_hugepages")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(0);
    let size_kib = field("Hugepagesize:").max(1);
    ((field("HugePages_Free:") - field("HugePages_Rsvd:")) + overcommit, (16u64 << 10).div_ceil(size_kib))
}

#[test]
fn explicit_huge_pages_without_a_reservation_fail_at_build() {
    // Counted before the build, whose mapping reserves what it takes.
    let (free, needed) = free_and_needed_huge_pages();
    let built = MemoryMapBuilder::with_memory(16 << 20).backing(Backing::RealMemory(HugePages::Explicit)).build();
    if free >= needed {
        // Enough reserved: the map must work, zeroing included.
        let mm = built.unwrap();
        let pfn = mm.alloc_pages(Gfp::KERNEL | Gfp::ZERO, 0).unwrap();
        mm.free_pages(pfn, 0).unwrap();
    } else {
        // Before the fix this built, and the first zeroing allocation died
        // with SIGBUS.
        assert!(matches!(built, Err(BuildError::HugePagesUnavailable { .. })), "{:?}", built.map(|_| ()));
    }
}

fn two_cpus() -> PageAllocator {
    small().build().unwrap()
}

#[test]
fn calls_on_a_cpu_that_does_not_exist() {
    let mm = two_cpus();
    let no_cpu = IndexError::NoSuchCpu { cpu: 99, nr_cpus: 2 };
    assert_eq!(Cpus::new(&mm).drain_cpu_pages(99), Err(no_cpu));
    assert_eq!(Cpus::new(&mm).drain_cpu_pages(1), Ok(true));
    assert_eq!(Cpus::new(&mm).pcp_info(99, 0), Err(no_cpu));
    assert_eq!(Cpus::new(&mm).cpu_to_node(99), Err(no_cpu));
    assert_eq!(Cpus::new(&mm).cpu_to_node(1), Ok(0));
}

#[test]
fn calls_on_a_zone_or_node_that_does_not_exist() {
    let mm = two_cpus();
    let nr_zones = mm.zones().len();
    assert_eq!(Tuning::new(&mm).compact_zone(99, None).unwrap_err(), IndexError::NoSuchZone { zone: 99, nr_zones });
    assert_eq!(Cpus::new(&mm).pcp_info(0, 99), Err(IndexError::NoSuchZone { zone: 99, nr_zones }));
    let no_node = IndexError::NoSuchNode { nid: 99, nr_nodes: 1 };
    assert_eq!(Tuning::new(&mm).fragmentation_score(99), Err(no_node));
    assert_eq!(Tuning::new(&mm).proactive_compact(99, 20).unwrap_err(), no_node);
    assert_eq!(Tuning::new(&mm).kcompactd_check(99).unwrap_err(), no_node);
    assert_eq!(Tuning::new(&mm).proactive_compact_marks(99, 0, 0).unwrap_err(), no_node);
    assert_eq!(Report::new(&mm).node_free_pages(99), Err(no_node));
    assert!(Tuning::new(&mm).fragmentation_score(0).is_ok());
    assert_eq!(Report::new(&mm).node_free_pages(0), Ok(Report::new(&mm).nr_free_pages()));
    Report::new(&mm).check_invariants().unwrap();
}

/// Found by the `builder` fuzz target: a real-memory map of 255 pages of
/// 512 MiB built (the mapping reserves nothing), and its zeroing
/// allocations then took the process past 3 GB and on towards the OOM
/// killer. A map larger than the machine is refused at build.
#[test]
fn real_memory_larger_than_the_machine_is_refused() {
    let huge_pages = MemoryMapBuilder::new()
        .page_size(512 << 20)
        .section_order(17)
        .pageblock_order(1)
        .max_page_order(13)
        .zone(0, ZoneType::Dma32, 50190..50445)
        .backing(Backing::RealMemory(HugePages::None));
    match huge_pages.build() {
        Err(BuildError::RealMemoryTooLarge { bytes, machine }) => {
            // The span counts from the table's section-aligned base.
            assert!(bytes >= 255 << 29 && machine < bytes, "{bytes} against {machine}");
        }
        other => panic!("a 127 GiB real-memory map: {:?}", other.map(|_| ())),
    }
    // A map the machine can hold still builds.
    MemoryMapBuilder::with_memory(64 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap();
}

/// Sizes and counts handed to the builder never reach an allocation
/// unchecked: a map, CMA area or hole past what the machine can describe
/// is a `BuildError`, not an abort.
#[test]
fn huge_sizes_are_build_errors_not_aborts() {
    for bytes in [1u64 << 62, u64::MAX] {
        assert!(MemoryMapBuilder::with_memory(bytes).build().is_err(), "{bytes} bytes");
    }
    let cma = MemoryMapBuilder::with_memory(16 << 20).cma("huge", 0..u64::MAX).build();
    assert!(cma.is_err());
    let hole = MemoryMapBuilder::with_memory(16 << 20).hole(0..u64::MAX).build();
    assert!(hole.is_err());
}
