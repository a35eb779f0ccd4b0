//! NUMA placement: `alloc_pages` prefers the node of the CPU it runs on
//! (Linux's `numa_node_id()`), through every entry point that picks a CPU
//! (the default CPU id, `CpuHandle`, `PinnedCpu`, the bulk allocator), and
//! falls back to other nodes only without `__GFP_THISNODE`; and what a
//! pinned CPU means for the others (no false contention).

use mmkit::{AllocError, BuildError, Gfp, MemoryMapBuilder, PageAllocator, Pfn, Report, ZoneType};
use mmkit::{Cpus, Tuning};

const NODE_PAGES: u64 = 4096;

fn two_nodes(cpu_id: fn() -> usize) -> PageAllocator {
    MemoryMapBuilder::new()
        .zone(0, ZoneType::Normal, 0..NODE_PAGES)
        .zone(1, ZoneType::Normal, NODE_PAGES..2 * NODE_PAGES)
        .nr_cpus(2)
        .cpu_node(0, 0)
        .cpu_node(1, 1)
        .cpu_id_fn(cpu_id)
        .min_free_kbytes(128)
        .build()
        .unwrap()
}

fn node_of(pfn: Pfn) -> usize {
    (pfn.0 / NODE_PAGES) as usize
}

#[test]
fn every_entry_point_prefers_the_cpus_node() {
    let mm = two_nodes(|| 1);
    assert_eq!(Cpus::new(&mm).cpu_to_node(1), Ok(1));
    assert_eq!(node_of(mm.alloc_pages(Gfp::KERNEL, 0).unwrap()), 1, "default CPU id");
    assert_eq!(node_of(mm.alloc_frozen_pages(Gfp::KERNEL, 2).unwrap()), 1);
    assert_eq!(node_of(Cpus::new(&mm).cpu(0).unwrap().alloc_pages(Gfp::KERNEL, 0).unwrap()), 0, "CpuHandle 0");
    assert_eq!(node_of(Cpus::new(&mm).cpu(1).unwrap().alloc_pages(Gfp::KERNEL, 3).unwrap()), 1, "CpuHandle 1");
    {
        let mut pinned = Cpus::new(&mm).pin_cpu(0).unwrap();
        assert_eq!(node_of(pinned.alloc_pages(Gfp::KERNEL, 0).unwrap()), 0, "PinnedCpu 0");
    }
    let mut slots = [None; 16];
    assert_eq!(Cpus::new(&mm).cpu(0).unwrap().alloc_pages_bulk(Gfp::KERNEL, &mut slots), 16);
    assert!(slots.iter().flatten().all(|&p| node_of(p) == 0), "bulk on CPU 0");
    let mut slots = [None; 16];
    assert_eq!(mm.alloc_pages_bulk(Gfp::KERNEL, &mut slots), 16);
    assert!(slots.iter().flatten().all(|&p| node_of(p) == 1), "bulk on the default CPU");
}

#[test]
fn a_full_node_falls_back_unless_thisnode() {
    let mm = two_nodes(|| 1);
    let handle = Cpus::new(&mm).cpu(1).unwrap();
    let mut held = Vec::new();
    while let Ok(pfn) = handle.alloc_pages(Gfp::KERNEL | Gfp::THISNODE, 0) {
        assert_eq!(node_of(pfn), 1, "THISNODE stays on node 1");
        held.push(pfn);
    }
    assert!(matches!(handle.alloc_pages(Gfp::KERNEL | Gfp::THISNODE, 0), Err(AllocError::NoMemory { .. })));
    let remote = handle.alloc_pages(Gfp::KERNEL, 0).unwrap();
    assert_eq!(node_of(remote), 0, "without THISNODE the zonelist goes on to node 0");
    held.push(remote);
    assert_eq!(mm.free_pages_bulk(&held), Ok(held.len()));
    Cpus::new(&mm).drain_all_pages();
    Report::new(&mm).check_invariants().unwrap();
}

#[test]
fn a_cpu_on_a_node_the_map_lacks_is_refused() {
    let built = MemoryMapBuilder::new().zone(0, ZoneType::Normal, 0..NODE_PAGES).nr_cpus(2).cpu_node(1, 3).build();
    assert!(matches!(built, Err(BuildError::CpuOnUnknownNode { cpu: 1, nid: 3 })));
}

#[test]
fn a_pinned_cpu_honours_thisnode_on_a_memoryless_node() {
    // Node 1 has CPUs but no memory: THISNODE can never be satisfied there.
    let mm = MemoryMapBuilder::new()
        .zone(0, ZoneType::Normal, 0..NODE_PAGES)
        .zone(2, ZoneType::Normal, NODE_PAGES..2 * NODE_PAGES)
        .nr_cpus(2)
        .cpu_node(1, 1)
        .build()
        .unwrap();
    let shared = Cpus::new(&mm).cpu(1).unwrap().alloc_pages(Gfp::KERNEL | Gfp::THISNODE, 0);
    assert!(matches!(shared, Err(AllocError::NoMemory { .. })), "{shared:?}");
    let mut pinned = Cpus::new(&mm).pin_cpu(1).unwrap();
    let got = pinned.alloc_pages(Gfp::KERNEL | Gfp::THISNODE, 0);
    assert!(matches!(got, Err(AllocError::NoMemory { .. })), "pinned CPU 1 handed out {got:?}");
    assert!(pinned.alloc_pages(Gfp::KERNEL, 0).is_ok(), "without THISNODE another node serves");
}

#[test]
fn a_pinned_cpu_is_not_contention_for_itself() {
    let mm = two_nodes(|| 0);
    let mut pinned = Cpus::new(&mm).pin_cpu(0).unwrap();
    // A partial free: the first page lives on, the rest is freed on CPU 0,
    // whose lists the handle holds.
    let pfn = pinned.alloc_pages(Gfp::KERNEL, 2).unwrap();
    mm.get_page(pfn).unwrap();
    pinned.free_pages(pfn, 2).unwrap();
    // The shared API on the pinned CPU goes to the buddy.
    let other = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
    mm.free_pages(other, 0).unwrap();
    assert_eq!(Report::new(&mm).stats().pcp_contended, 0, "a pinned pageset is owned, not contended");
    pinned.free_pages(pfn, 0).unwrap();
}

#[test]
fn a_pinned_cpu_takes_a_new_high_fraction_at_its_next_call() {
    let mm = two_nodes(|| 1);
    let before = Cpus::new(&mm).pcp_info(0, 0).unwrap().unwrap();
    let mut pinned = Cpus::new(&mm).pin_cpu(0).unwrap();
    Tuning::new(&mm).set_percpu_pagelist_high_fraction(8).unwrap();
    let other = Cpus::new(&mm).pcp_info(1, 1).unwrap().unwrap();
    assert_ne!((other.high_min, other.high_max), (before.high_min, before.high_max), "an unpinned CPU resized");
    let pfn = pinned.alloc_pages(Gfp::KERNEL, 0).unwrap();
    pinned.free_pages(pfn, 0).unwrap();
    drop(pinned);
    let after = Cpus::new(&mm).pcp_info(0, 0).unwrap().unwrap();
    assert_eq!((after.high_min, after.high_max), (other.high_min, other.high_max), "the pinned CPU resized too");
}
