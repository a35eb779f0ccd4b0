//! The allocator's state and its lookups: `PageAllocator`, built from the
//! builder's parts, with PFN ↔ descriptor ↔ zone lookups and the zonelists.
//!
//! The layer's other files each own one path: `alloc_path` (allocation and
//! the zonelist walk), `slowpath`, `free`, `bulk`, per-CPU handles (`cpu`,
//! `pinned`), `alloc_at` (placed allocation for replay), `block` (owned
//! blocks for the layers above), `hooks` and `migrate` (the embedder's
//! side). All of them go through zones (which lock) to buddy (which edits
//! lists) to page descriptors; nothing here edits a free list directly.
#![deny(unsafe_code)]

pub(crate) mod alloc_at;
pub(crate) mod alloc_path;
pub(crate) mod block;
pub(crate) mod bulk;
pub mod cpu;
pub(crate) mod free;
pub mod hooks;
pub mod migrate;
pub(crate) mod pinned;
pub(crate) mod slowpath;
pub(crate) mod stats;

use crate::mem::page::{PageDesc, PageIdx, PageTable};
use crate::mem::pageblock::PageblockMap;
use crate::page_alloc::hooks::{Hooks, RateLimit};
use crate::page_alloc::migrate::Migrator;
use crate::page_alloc::stats::{Stats, StatsSnapshot};
use crate::pcp::{pcp_sizing, Pageset};
use crate::types::geometry::Geometry;
use crate::types::gfp::{gfp_migratetype, Gfp, MigrateType, ZoneType};
use crate::types::gfp::{Watermark, MAX_NR_ZONES};
use crate::zone::cma_area::CmaArea;
use crate::zone::{node_zone_table, Lock, MemCtx, Zone};
use crate::Pfn;
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Retries of reclaim without progress before giving up (Linux's
/// `MAX_RECLAIM_RETRIES`).
pub(crate) const MAX_RECLAIM_RETRIES: u32 = 16;

/// Compaction rounds a request may go through (Linux's `MAX_COMPACT_RETRIES`).
pub(crate) const MAX_COMPACT_RETRIES: u32 = 16;

pub use crate::types::PAGE_ALLOC_COSTLY_ORDER;

pub(crate) struct Parts {
    pub geometry: Geometry,
    pub base_pfn: u64,
    pub pages: PageTable,
    pub blocks: PageblockMap,
    pub zones: Vec<Zone>,
    pub hooks: Box<dyn Hooks>,
    pub min_free_kbytes: u64,
    pub nr_cpus: usize,
    pub cpu_id: fn() -> usize,
    pub cpu_nodes: Vec<usize>,
    pub pcp_high_fraction: u32,
    pub pcp_enabled: bool,
    pub mobility_disabled: bool,
    #[cfg(feature = "std")]
    pub memory: Option<crate::mem::rawmem::RealMemory>,
    pub migrator: Option<Box<dyn Migrator>>,
    pub cma: Vec<CmaArea>,
}

/// A page allocator over one memory map: nodes, zones, buddy free lists.
///
/// `Send + Sync`: any thread may allocate and free. Each zone has its own
/// lock; page references are atomic.
pub struct PageAllocator {
    pub(crate) geometry: Geometry,
    pub(crate) base_pfn: u64,
    pub(crate) pages: PageTable,
    pub(crate) blocks: PageblockMap,
    pub(crate) zones: Vec<Zone>,
    /// Zone indices sorted by start PFN, for PFN → zone lookups.
    zones_by_pfn: Vec<usize>,
    /// Zone index of each pageblock (`ZONE_NONE`, `ZONE_SHARED` otherwise).
    zone_by_block: Vec<u8>,
    /// Per node: zone indices in fallback order.
    zonelists: Vec<Vec<usize>>,
    pub(crate) hooks: Box<dyn Hooks>,
    pub(crate) stats: Stats,
    pub(crate) bad_page_log: Lock<RateLimit>,
    /// Poisoned pages still allocated; while non-zero, frees scan for them.
    pub(crate) hwpoison_pending: AtomicU64,
    min_free_kbytes: u64,
    /// Per node and highest usable zone type: the preferred zone and
    /// whether `ALLOC_NOFRAGMENT` applies to it.
    preferred: Vec<[Option<(usize, bool)>; MAX_NR_ZONES]>,
    /// Pagesets, indexed `cpu * zones.len() + zone`.
    pub(crate) pagesets: Vec<Pageset>,
    pub(crate) cpu_slots: Vec<crate::page_alloc::cpu::CpuSlot>,
    pub(crate) nr_cpus: usize,
    /// `percpu_pagelist_high_fraction` in force (0: auto-tuned).
    pub(crate) pcp_high_fraction: core::sync::atomic::AtomicU32,
    pub(crate) cpu_id: fn() -> usize,
    /// Node of each CPU.
    cpu_nodes: Vec<usize>,
    /// False when built with `per_cpu_lists(false)`.
    pub(crate) pcp_enabled: bool,
    /// Built with `group_by_mobility(false)`.
    pub(crate) mobility_disabled: bool,
    #[cfg(feature = "std")]
    pub(crate) memory: Option<crate::mem::rawmem::RealMemory>,
    /// The embedder's page mover, used by contiguous allocations.
    pub(crate) migrator: Option<Box<dyn Migrator>>,
    /// CMA areas, in declaration order.
    pub(crate) cma: Vec<CmaArea>,
    /// Tells this allocator's [`PageBlock`](crate::PageBlock)s from others'.
    map_id: u32,
}

/// Source of [`PageAllocator::map_id`]s.
static NEXT_MAP_ID: core::sync::atomic::AtomicU32 = core::sync::atomic::AtomicU32::new(1);

/// Where an allocation is headed, fixed at entry (Linux's `alloc_context`).
#[derive(Clone, Copy)]
pub(crate) struct AllocContext {
    pub(crate) gfp: Gfp,
    pub(crate) nid: usize,
    pub(crate) highest: ZoneType,
    pub(crate) migratetype: MigrateType,
    pub(crate) this_node_only: bool,
    /// Whose per-CPU lists to use.
    pub(crate) cpu: usize,
}

impl PageAllocator {
    pub(crate) fn from_parts(p: Parts) -> Self {
        let mut zones_by_pfn: Vec<usize> = (0..p.zones.len()).collect();
        zones_by_pfn.sort_by_key(|&i| p.zones[i].start_idx);
        let max_nid = p.zones.iter().map(|z| z.nid).max().unwrap_or(0);
        let zone_by_block = zone_block_table(&p.zones, p.pages.len(), p.geometry.pageblock_order);
        let zonelists: Vec<Vec<usize>> = (0..=max_nid).map(|nid| build_zonelist(&p.zones, nid)).collect();
        let preferred = zonelists
            .iter()
            .map(|list| {
                let mut row = [None; MAX_NR_ZONES];
                for highest in ZoneType::ALL {
                    row[highest.index()] = list.iter().copied().find(|&i| p.zones[i].zone_type <= highest).map(|i| {
                        let z = &p.zones[i];
                        let dma32 = node_zone_table(&p.zones, z.nid)[ZoneType::Dma32.index()];
                        // Linux assumes a DMA32 zone below NORMAL on a
                        // single node and checks only with several nodes.
                        let single_node = max_nid == 0;
                        let nofrag = z.zone_type == ZoneType::Normal
                            && (single_node || dma32.is_some_and(|d| p.zones[d].managed_pages > 0));
                        (i, nofrag)
                    });
                }
                row
            })
            .collect();
        let mut p = p;
        let largest_cached = 1u64 << p.geometry.pageblock_order.max(PAGE_ALLOC_COSTLY_ORDER);
        for zone in p.zones.iter_mut() {
            let reserve = zone.lowmem_reserve.iter().copied().max().unwrap_or(0);
            zone.comfortably_above = zone.watermark(Watermark::High) + zone.max_boost + reserve + largest_cached;
        }
        let nr_cpus = p.nr_cpus.max(1);
        let mut pagesets = Vec::with_capacity(nr_cpus * p.zones.len());
        for _cpu in 0..nr_cpus {
            for zone in &p.zones {
                pagesets.push(Pageset::new(pcp_sizing(zone, p.geometry.page_size(), nr_cpus, p.pcp_high_fraction)));
            }
        }
        Self {
            geometry: p.geometry,
            base_pfn: p.base_pfn,
            pages: p.pages,
            blocks: p.blocks,
            zones: p.zones,
            zones_by_pfn,
            zone_by_block,
            zonelists,
            hooks: p.hooks,
            stats: Stats::default(),
            bad_page_log: Lock::new(RateLimit::bad_pages()),
            hwpoison_pending: AtomicU64::new(0),
            min_free_kbytes: p.min_free_kbytes,
            preferred,
            pagesets,
            cpu_slots: (0..nr_cpus).map(|_| crate::page_alloc::cpu::CpuSlot::default()).collect(),
            pcp_high_fraction: core::sync::atomic::AtomicU32::new(p.pcp_high_fraction),
            nr_cpus,
            cpu_id: p.cpu_id,
            map_id: NEXT_MAP_ID.fetch_add(1, Relaxed),
            cpu_nodes: (0..nr_cpus).map(|cpu| p.cpu_nodes.get(cpu).copied().unwrap_or(0)).collect(),
            pcp_enabled: p.pcp_enabled,
            mobility_disabled: p.mobility_disabled,
            #[cfg(feature = "std")]
            memory: p.memory,
            migrator: p.migrator,
            cma: p.cma,
        }
    }

    #[inline]
    pub(crate) fn mem(&self) -> MemCtx<'_> {
        MemCtx { pages: &self.pages, blocks: &self.blocks, geometry: &self.geometry }
    }

    /// This allocator's identity among the allocators of the process.
    #[inline(always)]
    pub(crate) fn map_id(&self) -> u32 {
        self.map_id
    }

    /// The map's geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.geometry
    }
    /// Every zone, ordered by node then zone type.
    pub fn zones(&self) -> &[Zone] {
        &self.zones
    }
    /// `min_free_kbytes` in force.
    pub fn min_free_kbytes(&self) -> u64 {
        self.min_free_kbytes
    }
    /// First PFN covered by descriptors.
    pub fn start_pfn(&self) -> Pfn {
        Pfn(self.base_pfn)
    }
    /// One past the last PFN covered by descriptors.
    pub fn end_pfn(&self) -> Pfn {
        Pfn(self.base_pfn + self.pages.len() as u64)
    }
    /// Free pages on the buddy lists of all zones. As in Linux, pages cached
    /// on per-CPU lists are not included: see
    /// [`nr_pcp_pages`](Self::nr_pcp_pages), or call
    /// [`drain_all_pages`](Self::drain_all_pages) first.
    pub fn nr_free_pages(&self) -> u64 {
        self.zones.iter().map(|z| z.free_pages()).sum()
    }

    /// Pages cached on every CPU's lists (free, but not in
    /// [`nr_free_pages`](Self::nr_free_pages)). Pinned CPUs are not counted.
    pub fn nr_pcp_pages(&self) -> u64 {
        (0..self.zones.len()).map(|zi| self.pcp_totals(zi).1).sum()
    }
    /// Allocator-wide counters.
    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }
    /// Whether free memory is grouped by mobility (see
    /// [`MemoryMapBuilder::group_by_mobility`](crate::MemoryMapBuilder::group_by_mobility)).
    pub fn group_by_mobility(&self) -> bool {
        !self.mobility_disabled
    }

    /// The migratetype a request is served as: [`gfp_migratetype`], or
    /// unmovable for every request when grouping by mobility is off.
    #[inline(always)]
    pub(crate) fn request_migratetype(&self, gfp: Gfp) -> MigrateType {
        if self.mobility_disabled {
            MigrateType::Unmovable
        } else {
            gfp_migratetype(gfp)
        }
    }

    /// Number of nodes (highest node id + 1).
    pub fn nr_nodes(&self) -> usize {
        self.zonelists.len()
    }

    /// Free pages on node `nid`'s buddy lists (Linux's
    /// `node_page_state(nid, NR_FREE_PAGES)`); 0 for an unknown node.
    pub fn node_free_pages(&self, nid: usize) -> u64 {
        self.zones.iter().filter(|z| z.nid == nid).map(|z| z.free_pages()).sum()
    }

    /// The node `pfn` belongs to (Linux's `page_to_nid`), or `None` outside
    /// every zone.
    #[inline]
    pub fn page_to_nid(&self, pfn: Pfn) -> Option<usize> {
        self.zone_of(self.pfn_to_idx(pfn)?).map(|z| z.nid)
    }

    /// Descriptor index of `pfn`, if the map covers it.
    #[inline]
    pub(crate) fn pfn_to_idx(&self, pfn: Pfn) -> Option<PageIdx> {
        let off = pfn.0.checked_sub(self.base_pfn)?;
        (off < self.pages.len() as u64).then_some(off as PageIdx)
    }
    /// Brings `pfn`'s page descriptor into the cache ahead of a free or a
    /// flag change, for callers that know their next PFNs (a replayer, a
    /// batch free). A hint: does nothing for a PFN outside the map.
    #[inline]
    pub fn prefetch_page(&self, pfn: Pfn) {
        if let Some(idx) = self.pfn_to_idx(pfn) {
            crate::mem::rawmem::prefetch(self.desc(idx));
        }
    }

    /// Descriptor index and descriptor of `pfn` in one bounds check.
    #[inline]
    pub(crate) fn pfn_to_desc(&self, pfn: Pfn) -> Option<(PageIdx, &PageDesc)> {
        let off = pfn.0.checked_sub(self.base_pfn)?;
        Some((off as PageIdx, self.pages.try_get(off)?))
    }
    #[inline]
    pub(crate) fn idx_to_pfn(&self, idx: PageIdx) -> Pfn {
        Pfn(self.base_pfn + idx as u64)
    }
    #[inline]
    pub(crate) fn desc(&self, idx: PageIdx) -> &PageDesc {
        self.pages.get(idx)
    }

    /// Preferred zone index for node `nid` and highest zone type, and
    /// whether `ALLOC_NOFRAGMENT` applies to it.
    #[inline]
    pub(crate) fn preferred_zone(&self, nid: usize, highest: ZoneType) -> Option<(usize, bool)> {
        self.preferred.get(nid)?[highest.index()]
    }

    /// Zone indices in fallback order for node `nid`.
    pub(crate) fn zonelist(&self, nid: usize) -> &[usize] {
        self.zonelists.get(nid).map_or(&[], |l| l.as_slice())
    }

    /// Zone holding descriptor `idx` (None in a hole between zones).
    #[inline]
    pub(crate) fn zone_of(&self, idx: PageIdx) -> Option<&Zone> {
        self.zone_index_of(idx).map(|zi| &self.zones[zi])
    }

    /// Index in `zones` of the zone holding descriptor `idx`: one table
    /// load, or a search for the rare pageblock that two zones share.
    #[inline]
    pub(crate) fn zone_index_of(&self, idx: PageIdx) -> Option<usize> {
        match *self.zone_by_block.get((idx >> self.geometry.pageblock_order) as usize)? {
            ZONE_NONE => None,
            ZONE_SHARED => self.zone_index_search(idx),
            zi => Some(zi as usize),
        }
    }

    fn zone_index_search(&self, idx: PageIdx) -> Option<usize> {
        let pos = self.zones_by_pfn.partition_point(|&z| self.zones[z].start_idx <= idx);
        let zi = *self.zones_by_pfn.get(pos.checked_sub(1)?)?;
        (idx < self.zones[zi].end_idx).then_some(zi)
    }

    /// Address of `pfn`'s memory when the map has real backing.
    ///
    /// The pointer is valid for one page while the allocator lives; the
    /// caller may read and write it only while it owns the page.
    #[cfg(feature = "std")]
    pub fn page_address(&self, pfn: Pfn) -> Option<core::ptr::NonNull<u8>> {
        let idx = self.pfn_to_idx(pfn)?;
        self.memory.as_ref()?.page_ptr(idx as usize)
    }

    /// The page that holds `addr` (Linux's `virt_to_page`), when the map has
    /// real backing and `addr` lies in it.
    #[cfg(feature = "std")]
    pub fn address_to_pfn(&self, addr: *const u8) -> Option<Pfn> {
        let index = self.memory.as_ref()?.index_of(addr)?;
        Some(self.idx_to_pfn(index as PageIdx))
    }

    /// The real-memory region, if the map has one.
    #[cfg(feature = "std")]
    #[inline]
    pub(crate) fn real_memory(&self) -> Option<&crate::mem::rawmem::RealMemory> {
        self.memory.as_ref()
    }
}

const ZONE_NONE: u8 = u8::MAX;
const ZONE_SHARED: u8 = u8::MAX - 1;

/// Which zone each pageblock belongs to, for O(1) PFN → zone lookups.
fn zone_block_table(zones: &[Zone], nr_pages: usize, pageblock_order: u32) -> Vec<u8> {
    let nr_blocks = nr_pages.div_ceil(1 << pageblock_order);
    let mut table = alloc::vec![ZONE_NONE; nr_blocks];
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
    table
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
