//! The zones of a map as one set: the zones themselves, PFN → zone lookup
//! tables and each node's zonelist (Linux's `build_zonelists`), with the
//! preferred zone per (node, highest zone type).
//!
//! Owns the order in which zones are tried and which zone holds a page;
//! built once from the builder's zones. Must not lock a zone or touch a
//! free list.
#![deny(unsafe_code)]

use crate::mem::page::PageIdx;
use crate::types::gfp::{Watermark, ZoneType, MAX_NR_ZONES};
use crate::types::PAGE_ALLOC_COSTLY_ORDER;
use crate::zone::{node_zone_table, Zone};
use alloc::vec::Vec;

/// Every zone of the map and the tables that find them.
pub(crate) struct ZoneSet {
    zones: Vec<Zone>,
    /// Zone indices sorted by start PFN, for PFN → zone lookups.
    by_pfn: Vec<usize>,
    /// Zone index of each pageblock (`ZONE_NONE`, `ZONE_SHARED` otherwise).
    by_block: Vec<u8>,
    /// Per node: zone indices in fallback order.
    zonelists: Vec<Vec<usize>>,
    /// Per node and highest usable zone type: the preferred zone and
    /// whether `ALLOC_NOFRAGMENT` applies to it.
    preferred: Vec<[Option<(usize, bool)>; MAX_NR_ZONES]>,
    pageblock_order: u32,
}

impl ZoneSet {
    /// The set over `zones` (ordered by node, then zone type) of a map of
    /// `nr_pages` descriptors.
    /// `Err` when the per-pageblock zone table cannot be allocated.
    pub(crate) fn try_new(
        mut zones: Vec<Zone>,
        nr_pages: usize,
        pageblock_order: u32,
    ) -> Result<Self, crate::types::error::BuildError> {
        let mut by_pfn: Vec<usize> = (0..zones.len()).collect();
        by_pfn.sort_by_key(|&i| zones[i].start_idx);
        let max_nid = zones.iter().map(|z| z.nid).max().unwrap_or(0);
        let by_block = zone_block_table(&zones, nr_pages, pageblock_order)?;
        let zonelists: Vec<Vec<usize>> = (0..=max_nid).map(|nid| build_zonelist(&zones, nid)).collect();
        let preferred = zonelists.iter().map(|list| preferred_row(&zones, list, max_nid == 0)).collect();
        let largest_cached = 1u64 << pageblock_order.max(PAGE_ALLOC_COSTLY_ORDER);
        for zone in zones.iter_mut() {
            let reserve = zone.lowmem_reserve.iter().copied().max().unwrap_or(0);
            zone.comfortably_above = zone.watermark(Watermark::High) + zone.max_boost + reserve + largest_cached;
        }
        Ok(Self { zones, by_pfn, by_block, zonelists, preferred, pageblock_order })
    }

    /// The preferred zone for node `nid` and requests up to `highest`, and
    /// whether `ALLOC_NOFRAGMENT` applies there.
    #[inline]
    pub(crate) fn preferred_zone(&self, nid: usize, highest: ZoneType) -> Option<(usize, bool)> {
        self.preferred.get(nid)?[highest.index()]
    }

    /// Nodes with a zonelist (highest node id + 1).
    pub(crate) fn nr_nodes(&self) -> usize {
        self.zonelists.len()
    }

    /// Zone indices in fallback order for node `nid`.
    pub(crate) fn zonelist(&self, nid: usize) -> &[usize] {
        self.zonelists.get(nid).map_or(&[], |l| l.as_slice())
    }

    /// Index of the zone holding descriptor `idx`: one table load, or a
    /// search for the rare pageblock that two zones share.
    #[inline(always)]
    pub(crate) fn index_of(&self, idx: PageIdx) -> Option<usize> {
        match *self.by_block.get((idx >> self.pageblock_order) as usize)? {
            ZONE_NONE => None,
            ZONE_SHARED => self.index_search(idx),
            zi => Some(zi as usize),
        }
    }

    fn index_search(&self, idx: PageIdx) -> Option<usize> {
        let pos = self.by_pfn.partition_point(|&z| self.zones[z].start_idx <= idx);
        let zi = *self.by_pfn.get(pos.checked_sub(1)?)?;
        (idx < self.zones[zi].end_idx).then_some(zi)
    }
}

/// A zone set reads as the slice of its zones.
impl core::ops::Deref for ZoneSet {
    type Target = [Zone];
    #[inline(always)]
    fn deref(&self) -> &[Zone] {
        &self.zones
    }
}

/// Preferred zone per highest zone type for one node's zonelist.
fn preferred_row(zones: &[Zone], list: &[usize], single_node: bool) -> [Option<(usize, bool)>; MAX_NR_ZONES] {
    let mut row = [None; MAX_NR_ZONES];
    for highest in ZoneType::ALL {
        row[highest.index()] = list.iter().copied().find(|&i| zones[i].zone_type <= highest).map(|i| {
            let z = &zones[i];
            let dma32 = node_zone_table(zones, z.nid)[ZoneType::Dma32.index()];
            // Linux assumes a DMA32 zone below NORMAL on a single node and
            // checks only with several nodes (`zone_allows_nofragment`'s
            // caller, `alloc_flags_nofragment`).
            let nofrag =
                z.zone_type == ZoneType::Normal && (single_node || dma32.is_some_and(|d| zones[d].managed_pages > 0));
            (i, nofrag)
        });
    }
    row
}

const ZONE_NONE: u8 = u8::MAX;
const ZONE_SHARED: u8 = u8::MAX - 1;

/// Which zone each pageblock belongs to, for O(1) PFN → zone lookups.
fn zone_block_table(
    zones: &[Zone],
    nr_pages: usize,
    pageblock_order: u32,
) -> Result<Vec<u8>, crate::types::error::BuildError> {
    let nr_blocks = nr_pages.div_ceil(1 << pageblock_order);
    let mut table = Vec::new();
    table
        .try_reserve_exact(nr_blocks)
        .map_err(|_| crate::types::error::BuildError::NoMetadataMemory { bytes: nr_blocks })?;
    table.resize(nr_blocks, ZONE_NONE);
    let many = zones.len() >= ZONE_SHARED as usize;
    for (zi, zone) in zones.iter().enumerate() {
        let first = (zone.start_idx >> pageblock_order) as usize;
        let last = ((zone.end_idx - 1) >> pageblock_order) as usize;
        for (block, entry) in table.iter_mut().enumerate().take(last + 1).skip(first) {
            let whole = (block << pageblock_order) as u32 >= zone.start_idx
                && ((block + 1) << pageblock_order) as u32 <= zone.end_idx;
            *entry = if many || *entry != ZONE_NONE || !whole { ZONE_SHARED } else { zi as u8 };
        }
    }
    Ok(table)
}

/// Zones in fallback order for node `nid`: nodes by distance (here |a - b|,
/// then id), each node's zones from MOVABLE down to DMA.
fn build_zonelist(zones: &[Zone], nid: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..zones.len()).collect();
    order.sort_by_key(|&i| {
        let z = &zones[i];
        (z.nid.abs_diff(nid), z.nid, core::cmp::Reverse(z.zone_type.index()))
    });
    order
}
