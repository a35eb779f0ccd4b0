//! Proves that the /proc-style reports have Linux's exact byte layout:
//! `buddyinfo()` against literal strings for maps whose free blocks can be
//! worked out by hand, `pagetypeinfo()` header, rows and pageblock counts,
//! and `vmstat()` as `name value` lines that agree with the allocator.

use mmkit::procfs::parse_buddyinfo;
use mmkit::{Gfp, MemoryMapBuilder, PageAllocator, Report, ZoneType};
use std::collections::HashMap;

fn normal_4096() -> PageAllocator {
    MemoryMapBuilder::new().zone(0, ZoneType::Normal, 0..4096).per_cpu_lists(false).build().unwrap()
}

#[test]
fn buddyinfo_of_one_aligned_normal_zone() {
    let mm = normal_4096();
    let report = Report::new(&mm);
    assert_eq!(
        report.buddyinfo(),
        "Node 0, zone   Normal      0      0      0      0      0      0      0      0      0      0      4 \n"
    );
    // One order-0 allocation splits an order-10 block: one free block of
    // each order 0..=9 is left over.
    let p = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
    assert_eq!(
        report.buddyinfo(),
        "Node 0, zone   Normal      1      1      1      1      1      1      1      1      1      1      3 \n"
    );
    mm.free_pages(p, 0).unwrap();
    assert_eq!(
        report.buddyinfo(),
        "Node 0, zone   Normal      0      0      0      0      0      0      0      0      0      0      4 \n"
    );
}

#[test]
fn buddyinfo_of_a_default_4g_map() {
    let mm = MemoryMapBuilder::with_memory(4 << 30).per_cpu_lists(false).build().unwrap();
    // DMA is PFNs 1..4096: PFN 1 (order 0), 2..4 (1), 4..8 (2), …,
    // 512..1024 (9), then three order-10 blocks. DMA32 is 4096..2^20:
    // 1020 order-10 blocks.
    let expected = concat!(
        "Node 0, zone      DMA      1      1      1      1      1      1      1      1      1      1      3 \n",
        "Node 0, zone    DMA32      0      0      0      0      0      0      0      0      0      0   1020 \n",
    );
    assert_eq!(Report::new(&mm).buddyinfo(), expected);
    let parsed = parse_buddyinfo(&Report::new(&mm).buddyinfo()).unwrap();
    assert_eq!(parsed.len(), 2);
    assert_eq!(parsed[0].0, 0);
    assert_eq!(parsed[0].1, "DMA");
    assert_eq!(parsed[1].2, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1020]);
    let pages: u64 = parsed.iter().flat_map(|(_, _, counts)| counts.iter().enumerate().map(|(o, c)| c << o)).sum();
    assert_eq!(pages, Report::new(&mm).nr_free_pages());
    assert_eq!(pages, (1 << 20) - 1);
}

#[test]
fn buddyinfo_has_one_column_per_order_and_one_line_per_zone() {
    let mm = MemoryMapBuilder::new()
        .max_page_order(6)
        .pageblock_order(4)
        .zone(0, ZoneType::Dma32, 0..1024)
        .zone(1, ZoneType::Normal, 1024..2048)
        .per_cpu_lists(false)
        .build()
        .unwrap();
    assert_eq!(
        Report::new(&mm).buddyinfo(),
        concat!(
            "Node 0, zone    DMA32      0      0      0      0      0      0     16 \n",
            "Node 1, zone   Normal      0      0      0      0      0      0     16 \n",
        )
    );
}

#[test]
fn pagetypeinfo_layout() {
    let mm = normal_4096();
    let text = Report::new(&mm).pagetypeinfo();
    assert!(text.starts_with("Page block order: 9\nPages per block:  512\n\n"));
    let expected = concat!(
        "Page block order: 9\n",
        "Pages per block:  512\n",
        "\n",
        "Free pages count per migrate type at order       0      1      2      3      4      5      6      7      8      9     10 \n",
        "Node    0, zone   Normal, type    Unmovable      0      0      0      0      0      0      0      0      0      0      0 \n",
        "Node    0, zone   Normal, type      Movable      0      0      0      0      0      0      0      0      0      0      4 \n",
        "Node    0, zone   Normal, type  Reclaimable      0      0      0      0      0      0      0      0      0      0      0 \n",
        "Node    0, zone   Normal, type   HighAtomic      0      0      0      0      0      0      0      0      0      0      0 \n",
        "Node    0, zone   Normal, type          CMA      0      0      0      0      0      0      0      0      0      0      0 \n",
        "Node    0, zone   Normal, type      Isolate      0      0      0      0      0      0      0      0      0      0      0 \n",
        "\n",
        "Number of blocks type     Unmovable      Movable  Reclaimable   HighAtomic          CMA      Isolate \n",
        "Node 0, zone   Normal            0            8            0            0            0            0 \n",
    );
    assert_eq!(text, expected);
    // An unmovable allocation claims an order-10 block (two pageblocks)
    // and leaves one free block of each order 0..=9 on the Unmovable list.
    mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
    let text = Report::new(&mm).pagetypeinfo();
    assert!(text.contains(
        "Node    0, zone   Normal, type    Unmovable      1      1      1      1      1      1      1      1      1      1      0 \n"
    ));
    assert!(text.contains(
        "Node    0, zone   Normal, type      Movable      0      0      0      0      0      0      0      0      0      0      3 \n"
    ));
    assert!(text.ends_with(
        "Node 0, zone   Normal            2            6            0            0            0            0 \n"
    ));
}

fn vmstat_map(mm: &PageAllocator) -> HashMap<String, u64> {
    let text = Report::new(mm).vmstat();
    assert!(text.ends_with('\n'));
    text.lines()
        .map(|line| {
            let (name, value) = line.split_once(' ').expect("`name value`");
            assert!(!name.is_empty() && !value.contains(' '), "{line:?}");
            (name.to_string(), value.parse().expect("decimal value"))
        })
        .collect()
}

#[test]
fn vmstat_lines_agree_with_the_allocator() {
    let mm = MemoryMapBuilder::with_memory(64 << 20).per_cpu_lists(false).build().unwrap();
    let text = Report::new(&mm).vmstat();
    assert!(text.starts_with(&format!("nr_free_pages {}\n", Report::new(&mm).nr_free_pages())));
    assert!(text.contains("\nnr_free_cma 0\n"));
    let v = vmstat_map(&mm);
    assert_eq!(v["nr_free_pages"], 16383);
    assert_eq!(v["pgalloc_dma32"], 0);
    let p = mm.alloc_pages(Gfp::KERNEL, 3).unwrap();
    let q = mm.alloc_pages(Gfp::KERNEL | Gfp::DMA, 1).unwrap();
    let v = vmstat_map(&mm);
    assert_eq!(v["nr_free_pages"], 16383 - 10);
    assert_eq!(v["pgalloc_dma32"], 8);
    assert_eq!(v["pgalloc_dma"], 2);
    assert_eq!(v["pgalloc_normal"], 0);
    assert_eq!(v["pgalloc_movable"], 0);
    assert_eq!(v["pgfree"], 0);
    mm.free_pages(p, 3).unwrap();
    mm.free_pages(q, 1).unwrap();
    let v = vmstat_map(&mm);
    assert_eq!(v["nr_free_pages"], 16383);
    assert_eq!(v["pgfree"], 10);
    assert_eq!(v["allocstall"], 0);
    assert_eq!(v["mmkit_bad_pages"], 0);
}

#[test]
fn pagetypeinfo_counts_a_zones_unaligned_first_pageblock() {
    // Linux walks pageblocks from zone_start_pfn in pageblock steps, so the
    // DMA zone (PFNs 1..4096) has 8 pageblocks, as in the kernel capture in
    // procfs/tests.rs ("Node 0, zone      DMA            1            7").
    let mm = MemoryMapBuilder::with_memory(64 << 20).per_cpu_lists(false).build().unwrap();
    let text = Report::new(&mm).pagetypeinfo();
    let expected = concat!(
        "Node 0, zone      DMA            0            8            0            0            0            0 \n",
        "Node 0, zone    DMA32            0           24            0            0            0            0 \n",
    );
    assert!(text.ends_with(expected), "{text}");
    let total: u64 = Report::new(&mm).zone_snapshots()[0].free.pageblocks_per_type.iter().sum();
    assert_eq!(total, 8);
}
