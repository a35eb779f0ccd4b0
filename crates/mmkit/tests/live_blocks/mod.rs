//! The reference model of the per-CPU property tests: the live blocks,
//! with the checks every allocation must pass (aligned, in one zone, no
//! overlap with a live block), the small two-zone map they run on, and the
//! pattern their stress tests write into real memory and check.
#![allow(dead_code)] // each test crate uses the part it needs

use mmkit::{Backing, HugePages, MemoryMapBuilder, PageAllocator, Pfn, Report, ZoneType};
use std::collections::BTreeMap;

/// A map with a DMA32 and a Normal zone, small orders and pageblocks, so
/// that short operation sequences reach refills, spills and fallbacks.
pub fn two_zone_map() -> MemoryMapBuilder {
    MemoryMapBuilder::new()
        .max_page_order(6)
        .pageblock_order(4)
        .section_order(8)
        .zone(0, ZoneType::Dma32, 16..1024)
        .zone(0, ZoneType::Normal, 1024..2048)
        .min_free_kbytes(64)
}

/// 64 MiB of real memory on two CPUs: the map the stress tests write
/// their patterns into.
pub fn real_memory_map() -> PageAllocator {
    MemoryMapBuilder::with_memory(64 << 20).nr_cpus(2).backing(Backing::RealMemory(HugePages::None)).build().unwrap()
}

/// pfn → order of every live block.
#[derive(Default)]
pub struct LiveBlocks {
    pub live: BTreeMap<u64, u32>,
}

impl LiveBlocks {
    /// Records a block the allocator handed out, checking that it is
    /// aligned, inside one zone and overlaps no live block.
    pub fn insert(&mut self, mm: &PageAllocator, pfn: Pfn, order: u32) {
        let size = 1u64 << order;
        assert_eq!(pfn.0 % size, 0, "block {pfn} of order {order} misaligned");
        if let Some((&prev, &prev_order)) = self.live.range(..=pfn.0).next_back() {
            assert!(prev + (1 << prev_order) <= pfn.0, "block {pfn} overlaps live block {prev:#x}");
        }
        if let Some((&next, _)) = self.live.range(pfn.0 + 1..).next() {
            assert!(pfn.0 + size <= next, "block {pfn} overlaps live block {next:#x}");
        }
        let zone = mm.zones().iter().find(|z| z.span().contains(&pfn.0)).expect("in a zone");
        assert!(zone.span().contains(&(pfn.0 + size - 1)), "block {pfn} leaves its zone");
        self.live.insert(pfn.0, order);
    }

    /// The `pick`-th live block (modulo their number), if any.
    pub fn pick(&self, pick: usize) -> Option<(Pfn, u32)> {
        let (&pfn, &order) = self.live.iter().nth(pick % self.live.len().max(1))?;
        Some((Pfn(pfn), order))
    }

    /// Removes and returns the `pick`-th live block.
    pub fn take(&mut self, pick: usize) -> Option<(Pfn, u32)> {
        let (pfn, order) = self.pick(pick)?;
        self.live.remove(&pfn.0);
        Some((pfn, order))
    }

    /// Pages in live blocks.
    pub fn pages(&self) -> u64 {
        self.live.values().map(|&order| 1u64 << order).sum()
    }

    /// The invariant checker, then conservation per zone: buddy-free +
    /// cached (per-CPU lists and thread caches) + live pages == managed.
    pub fn check(&self, mm: &PageAllocator) {
        Report::new(mm).check_invariants().unwrap();
        for (zone, snap) in mm.zones().iter().zip(Report::new(mm).zone_snapshots()) {
            let live: u64 =
                self.live.iter().filter(|(&pfn, _)| zone.span().contains(&pfn)).map(|(_, &order)| 1u64 << order).sum();
            assert_eq!(
                snap.free_pages + snap.pcp_pages + live,
                zone.managed_pages(),
                "zone {:?}: free {} + cached {} + live {live} != managed {}",
                zone.zone_type(),
                snap.free_pages,
                snap.pcp_pages,
                zone.managed_pages()
            );
        }
    }
}

/// Word `j` of the pattern of `seed` in a block starting at `pfn`.
fn pattern_word(pfn: u64, j: usize, seed: u64) -> u64 {
    (pfn << 20) ^ (j as u64).rotate_left(40) ^ seed
}

/// Writes (`check` false) or checks the pattern of `seed` in the `pages`
/// pages from `pfn` of a map with real memory.
pub fn pattern(mm: &PageAllocator, pfn: Pfn, pages: u64, seed: u64, check: bool) {
    let words = (mm.geometry().page_size() * pages) as usize / 8;
    let ptr = mm.page_address(pfn).expect("real memory").as_ptr().cast::<u64>();
    // SAFETY: the block is inside the mapping, page-aligned, allocated to
    // the calling test and touched by one thread at a time (the tests hand
    // blocks over through channels) until it is freed.
    let block = unsafe { std::slice::from_raw_parts_mut(ptr, words) };
    for (j, w) in block.iter_mut().enumerate() {
        if check {
            assert_eq!(*w, pattern_word(pfn.0, j, seed), "block {pfn} word {j} changed while allocated");
        } else {
            *w = pattern_word(pfn.0, j, seed);
        }
    }
}
