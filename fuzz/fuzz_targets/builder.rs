//! Fuzz target for `MemoryMapBuilder`: arbitrary configurations, every knob
//! able to reach its extremes, over small maps so that a run is quick.
//! `build()` must return a map or a typed error, never panic; a map that
//! builds must serve a few allocations and frees and keep its invariants.
//!
//! Run with `cargo +nightly fuzz run builder` from `fuzz/`.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use mmkit::zone::WatermarkConfig;
use mmkit::Cpus;
use mmkit::{Backing, Geometry, Gfp, HugePages, MemoryMapBuilder, Pfn, PlacementPolicy, Report, ZoneType};

/// A value that is often at an edge: 0, 1, the type's maximum, a limit.
#[derive(Arbitrary, Debug)]
enum Knob {
    Small(u16),
    Zero,
    One,
    Max,
    Limit,
    Raw(u64),
}

impl Knob {
    fn get(&self, limit: u64) -> u64 {
        match *self {
            Knob::Small(v) => u64::from(v),
            Knob::Zero => 0,
            Knob::One => 1,
            Knob::Max => u64::MAX,
            Knob::Limit => limit,
            Knob::Raw(v) => v,
        }
    }
}

#[derive(Arbitrary, Debug)]
struct Config {
    geometry: Option<(u8, u8, u8, u8)>,
    zones: Vec<(u8, u8, u16, u16)>,
    pc_node: Option<(u8, u16, u16)>,
    holes: Vec<(u16, u16)>,
    reserved: Vec<(u16, u16)>,
    nr_cpus: Option<Knob>,
    cpu_nodes: Vec<(Knob, u8)>,
    min_free_kbytes: Option<Knob>,
    scale_factor: Option<Knob>,
    boost_factor: Option<Knob>,
    reserve_ratio: Option<[u8; 4]>,
    high_fraction: Option<Knob>,
    per_cpu_lists: bool,
    cpu_caches: bool,
    group_by_mobility: bool,
    placement: u8,
    cma: Vec<(u8, u16, u16)>,
    real_memory: u8,
    ops: Vec<(u8, u8)>,
}

const ZONES: [ZoneType; 4] = [ZoneType::Dma, ZoneType::Dma32, ZoneType::Normal, ZoneType::Movable];
const GFPS: [Gfp; 6] = [
    Gfp::KERNEL,
    Gfp::ATOMIC,
    Gfp::HIGHUSER_MOVABLE,
    Gfp::KERNEL.union(Gfp::DMA),
    Gfp::KERNEL.union(Gfp::ZERO),
    Gfp::KERNEL.union(Gfp::COMP),
];

fn build(c: &Config) -> MemoryMapBuilder {
    let mut b = MemoryMapBuilder::new().hooks(mmkit::QuietHooks).cpu_id_fn(|| 0);
    if let Some((page_shift, section, pageblock, max)) = c.geometry {
        b = b.geometry(Geometry {
            page_shift: u32::from(page_shift % 40),
            section_order: u32::from(section % 40),
            pageblock_order: u32::from(pageblock % 24),
            max_page_order: u32::from(max % 24),
        });
    }
    // Zones of at most 4 Ki pages each below PFN 64 Ki: descriptors stay
    // small, and so does the invariant check after every operation.
    for &(nid, zt, start, len) in c.zones.iter().take(6) {
        let start = u64::from(start);
        b = b.zone(usize::from(nid % 70), ZONES[usize::from(zt) % 4], start..start + u64::from(len % 4096));
    }
    if let Some((nid, start, kib)) = c.pc_node {
        b = b.add_pc_node(usize::from(nid % 4), u64::from(start), u64::from(kib) * 1024);
    }
    for &(s, e) in c.holes.iter().take(4) {
        b = b.hole(u64::from(s)..u64::from(e));
    }
    for &(s, e) in c.reserved.iter().take(4) {
        b = b.reserved(u64::from(s)..u64::from(e));
    }
    if let Some(k) = &c.nr_cpus {
        // Knob::Max is usize::MAX; keep the other values small enough to build quickly.
        let n = k.get(mmkit::MAX_NR_CPUS as u64 + 1);
        b = b.nr_cpus(if n > 1 << 16 { usize::MAX } else { n as usize });
    }
    for (cpu, nid) in c.cpu_nodes.iter().take(4) {
        b = b.cpu_node(cpu.get(mmkit::MAX_NR_CPUS as u64).min(usize::MAX as u64) as usize, usize::from(*nid));
    }
    if let Some(k) = &c.min_free_kbytes {
        b = b.min_free_kbytes(k.get(i32::MAX as u64));
    }
    if let Some(k) = &c.scale_factor {
        b = b.watermark_scale_factor(k.get(3000));
    }
    if c.boost_factor.is_some() || c.reserve_ratio.is_some() {
        let mut w = WatermarkConfig::default();
        if let Some(k) = &c.boost_factor {
            w.watermark_boost_factor = k.get(i32::MAX as u64);
        }
        if let Some(r) = c.reserve_ratio {
            w.lowmem_reserve_ratio = r.map(|v| if v == 255 { u64::MAX } else { u64::from(v) });
        }
        if let Some(k) = &c.scale_factor {
            w.watermark_scale_factor = k.get(3000);
        }
        b = b.watermarks(w);
    }
    if let Some(k) = &c.high_fraction {
        b = b.percpu_pagelist_high_fraction(k.get(8).min(u64::from(u32::MAX)) as u32);
    }
    let policies = [PlacementPolicy::Linux, PlacementPolicy::Addr, PlacementPolicy::TwoEnds, PlacementPolicy::Lean];
    b = b
        .per_cpu_lists(c.per_cpu_lists)
        .cpu_caches(c.cpu_caches)
        .group_by_mobility(c.group_by_mobility)
        .placement(policies[usize::from(c.placement) % policies.len()]);
    for &(name, s, e) in c.cma.iter().take(3) {
        b = b.cma(format!("cma{}", name % 3), u64::from(s)..u64::from(e));
    }
    // Real memory only for maps this process can hold under libFuzzer's
    // RSS limit (2 GiB): a bigger one is for the machine to hold or for
    // `build` to refuse (`RealMemoryTooLarge`, tested in bad_config.rs).
    let page_shift = c.geometry.map_or(12, |g| u32::from(g.0 % 40));
    let pages = b.descriptor_table_bytes().map_or(u64::MAX, |bytes| bytes as u64 / 16);
    if pages.checked_mul(1 << page_shift).is_none_or(|bytes| bytes > 256 << 20) {
        return b;
    }
    match c.real_memory % 8 {
        0 => b.backing(Backing::RealMemory(HugePages::None)),
        1 => b.backing(Backing::RealMemory(HugePages::Explicit)),
        _ => b,
    }
}

fuzz_target!(|c: Config| {
    let Ok(mm) = build(&c).build() else { return };
    Report::new(&mm).check_invariants().unwrap();
    let mut held: Vec<(Pfn, u32)> = Vec::new();
    for &(gfp, order) in c.ops.iter().take(16) {
        let order = u32::from(order % 12);
        match mm.alloc_pages(GFPS[usize::from(gfp) % GFPS.len()], order) {
            Ok(pfn) => held.push((pfn, order)),
            Err(_) => {
                if let Some((pfn, order)) = held.pop() {
                    mm.free_pages(pfn, order).unwrap();
                }
            }
        }
        Report::new(&mm).check_invariants().unwrap();
    }
    for (pfn, order) in held {
        mm.free_pages(pfn, order).unwrap();
    }
    Cpus::new(&mm).drain_all_pages();
    Report::new(&mm).check_invariants().unwrap();
});
