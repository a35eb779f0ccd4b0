//! The public allocator: PFN lookup, the zonelist walk, the fast allocation
//! path and `prep_new_page`.
//!
//! Owns `PageAllocator` and the order in which zones are tried. The slow path
//! lives in `slowpath`, per-CPU lists in `cpu`/`pcp`, free paths in `free`,
//! reporting in `info`, invariant checks in `invariants`; all
//! of them go through zones (which lock) to buddy (which edits lists) to page
//! descriptors. Nothing here edits a free list directly.
//!
//! Allocation in one paragraph: walk the zonelist (this node's zones from the
//! highest the GFP allows down, then other nodes by distance) and take a block
//! from the first zone above its LOW watermark. If none is, wake background
//! reclaim, recompute flags for the slow path (MIN watermark, reserves for
//! atomic requests), try again, and only with `__GFP_DIRECT_RECLAIM` call the
//! embedder's reclaim and compaction hooks and retry.
#![deny(unsafe_code)]

pub(crate) mod alloc_at;
pub(crate) mod block;
pub(crate) mod bulk;
pub mod cpu;
pub(crate) mod free;
pub mod hooks;
pub mod migrate;
pub(crate) mod pinned;
pub(crate) mod slowpath;
pub(crate) mod stats;

use crate::mem::page::{PageDesc, PageFlags, PageIdx, PageTable};
use crate::mem::pageblock::PageblockMap;
use crate::page_alloc::hooks::{AllocFailure, Hooks, RateLimit};
use crate::page_alloc::migrate::Migrator;
use crate::page_alloc::stats::{Stats, StatsSnapshot};
use crate::pcp::{pcp_allowed_order, pcp_sizing, Pageset};
use crate::types::geometry::Geometry;
use crate::types::gfp::{fast_path_alloc_flags, gfp_migratetype, gfp_zone, AllocFlags, Gfp, MigrateType, ZoneType};
use crate::types::gfp::{Watermark, MAX_NR_ZONES};
use crate::zone::cma_area::CmaArea;
use crate::zone::fallback::{self, RmqueueMode};
use crate::zone::{node_zone_table, Lock, MemCtx, Zone};
use crate::{AllocError, Pfn};
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

    /// Allocates 2^`order` contiguous pages on the local node (node 0 unless
    /// the map has one zone elsewhere only). See [`alloc_pages_node`](Self::alloc_pages_node).
    ///
    /// # Errors
    /// As [`alloc_pages_node`](Self::alloc_pages_node).
    #[inline]
    pub fn alloc_pages(&self, gfp: Gfp, order: u32) -> Result<Pfn, AllocError> {
        let cpu = self.current_cpu();
        self.alloc_on(cpu, self.cpu_to_node(cpu), gfp, order, false)
    }

    /// Allocates 2^`order` contiguous pages, preferring node `nid`.
    ///
    /// The block's first page has refcount 1; free it with
    /// [`free_pages`](Self::free_pages) (same order) or drop the reference
    /// with [`put_page`](Self::put_page). With `Gfp::COMP` it is a compound
    /// page whose tails point at the head; with `Gfp::ZERO` and real memory
    /// its contents are zeroed.
    ///
    /// # Errors
    /// [`AllocError::NoMemory`] when no allowed zone can serve the request
    /// even after the slow path, [`AllocError::OrderTooLarge`],
    /// [`AllocError::InvalidGfp`] for contradictory zone bits,
    /// [`AllocError::NoSuchNode`].
    #[inline]
    pub fn alloc_pages_node(&self, nid: usize, gfp: Gfp, order: u32) -> Result<Pfn, AllocError> {
        self.alloc_on(self.current_cpu(), nid, gfp, order, false)
    }

    /// Like [`alloc_pages`](Self::alloc_pages) but the page comes back with
    /// refcount 0 ("frozen"); free it with
    /// [`free_frozen_pages`](Self::free_frozen_pages).
    ///
    /// # Errors
    /// As [`alloc_pages_node`](Self::alloc_pages_node).
    #[inline]
    pub fn alloc_frozen_pages(&self, gfp: Gfp, order: u32) -> Result<Pfn, AllocError> {
        let cpu = self.current_cpu();
        self.alloc_on(cpu, self.cpu_to_node(cpu), gfp, order, true)
    }

    /// Frozen allocation preferring node `nid`.
    ///
    /// # Errors
    /// As [`alloc_pages_node`](Self::alloc_pages_node).
    #[inline]
    pub fn alloc_frozen_pages_node(&self, nid: usize, gfp: Gfp, order: u32) -> Result<Pfn, AllocError> {
        self.alloc_on(self.current_cpu(), nid, gfp, order, true)
    }

    /// The node CPU `cpu` belongs to (Linux's `cpu_to_node`): the node
    /// `alloc_pages` prefers when called on that CPU.
    #[inline]
    pub fn cpu_to_node(&self, cpu: usize) -> usize {
        self.cpu_nodes.get(cpu).copied().unwrap_or(0)
    }

    /// Allocation on behalf of CPU `cpu` (its per-CPU lists are used).
    #[inline]
    pub(crate) fn alloc_on(
        &self,
        cpu: usize,
        nid: usize,
        gfp: Gfp,
        order: u32,
        frozen: bool,
    ) -> Result<Pfn, AllocError> {
        if order <= PAGE_ALLOC_COSTLY_ORDER && self.pcp_enabled {
            if let Some(pfn) = self.alloc_fast(cpu, nid, gfp, order, frozen) {
                return Ok(pfn);
            }
        }
        self.alloc_general(cpu, nid, gfp, order, frozen)
    }

    /// The fast path of `get_page_from_freelist` for cached orders: the
    /// preferred zone only, a lockless watermark check, one try of the
    /// pageset lock. `None` sends the request down the general path, which
    /// repeats these steps zone by zone and then enters the slow path.
    #[inline]
    fn alloc_fast(&self, cpu: usize, nid: usize, gfp: Gfp, order: u32, frozen: bool) -> Option<Pfn> {
        let target = self.fast_target(nid, gfp, order)?;
        let idx = {
            let mut pcp = self.try_lock_pcp(cpu, target.zi)?;
            self.pcp_take_locked(&mut pcp, target.zi, order, target.mt, target.flags)?
        };
        Some(self.finish_fast_alloc(&target, idx, order, gfp, frozen))
    }

    /// The checks of the fast path before a per-CPU list is touched: the
    /// preferred zone of node `nid` (on that node), above its watermark.
    #[inline(always)]
    pub(crate) fn fast_target(&self, nid: usize, gfp: Gfp, order: u32) -> Option<FastTarget<'_>> {
        let highest = gfp_zone(gfp).ok()?;
        let (zi, nofragment) = self.preferred_zone(nid, highest)?;
        let zone = &self.zones[zi];
        if zone.nid != nid {
            return None;
        }
        let flags = fast_path_alloc_flags(gfp, nofragment);
        if !self.zone_allows(zone, order, flags, highest) {
            return None;
        }
        Some(FastTarget { zi, zone, flags, mt: self.request_migratetype(gfp) })
    }

    /// The fast path after a block came off a per-CPU list.
    #[inline(always)]
    pub(crate) fn finish_fast_alloc(
        &self,
        target: &FastTarget<'_>,
        idx: PageIdx,
        order: u32,
        gfp: Gfp,
        frozen: bool,
    ) -> Pfn {
        self.wake_kswapd_if_boosted(target.zone, gfp, target.flags);
        self.prep_new_page(idx, order, gfp, target.mt, frozen);
        self.idx_to_pfn(idx)
    }

    /// Lockless watermark check of `get_page_from_freelist`, noting when the
    /// zone has fallen below its high mark (pcp `high` then shrinks). A zone
    /// above its high mark is above every lower mark too, so one check
    /// usually suffices.
    #[inline(always)]
    pub(crate) fn zone_allows(&self, zone: &Zone, order: u32, flags: AllocFlags, highest: ZoneType) -> bool {
        if flags.contains(AllocFlags::NO_WATERMARKS) || zone.comfortably_free() {
            return true;
        }
        if !zone.below_high.load(Relaxed) {
            if zone.watermark_fast(order, zone.watermark(Watermark::High), highest, flags) {
                return true;
            }
            zone.below_high.store(true, Relaxed);
        }
        zone.watermark_fast(order, zone.watermark(flags.watermark()), highest, flags)
    }

    fn alloc_general(&self, cpu: usize, nid: usize, gfp: Gfp, order: u32, frozen: bool) -> Result<Pfn, AllocError> {
        let max = self.geometry.merge_order();
        if order > max {
            return Err(AllocError::OrderTooLarge { order, max });
        }
        let highest = gfp_zone(gfp).map_err(|_| AllocError::InvalidGfp(gfp))?;
        if nid >= self.zonelists.len() {
            return Err(AllocError::NoSuchNode(nid));
        }
        let ac = AllocContext {
            gfp,
            nid,
            highest,
            migratetype: self.request_migratetype(gfp),
            this_node_only: gfp.contains(Gfp::THISNODE),
            cpu,
        };
        let nofragment = self.preferred[nid][highest.index()].is_some_and(|(_, nofrag)| nofrag);
        let flags = fast_path_alloc_flags(gfp, nofragment);
        let got = match self.get_page_from_freelist(order, flags, &ac) {
            Some(got) => Some(got),
            None => self.alloc_slowpath(gfp, order, &ac),
        };
        match got {
            Some((_zone, idx)) => {
                self.prep_new_page(idx, order, gfp, ac.migratetype, frozen);
                Ok(self.idx_to_pfn(idx))
            }
            None => {
                self.stats.alloc_failures.fetch_add(1, Relaxed);
                if !gfp.contains(Gfp::NOWARN) {
                    self.hooks.alloc_failed(&AllocFailure { gfp, order, nid });
                }
                Err(AllocError::NoMemory { order, gfp })
            }
        }
    }

    /// Zones a request may use, in the order to try them.
    pub(crate) fn candidate_zones<'a>(&'a self, ac: &'a AllocContext) -> impl Iterator<Item = (usize, &'a Zone)> + 'a {
        self.zonelists[ac.nid]
            .iter()
            .map(|&i| (i, &self.zones[i]))
            .filter(move |(_, z)| z.zone_type <= ac.highest && (!ac.this_node_only || z.nid == ac.nid))
    }

    /// Tries each candidate zone once (Linux's `get_page_from_freelist`).
    pub(crate) fn get_page_from_freelist(
        &self,
        order: u32,
        alloc_flags: AllocFlags,
        ac: &AllocContext,
    ) -> Option<(usize, PageIdx)> {
        let mut alloc_flags = alloc_flags;
        loop {
            let no_fallback = alloc_flags.contains(AllocFlags::NOFRAGMENT);
            let mut retry_without_nofragment = false;
            for (zi, zone) in self.candidate_zones(ac) {
                if no_fallback && zone.nid != ac.nid {
                    // Fragmenting the local node beats going remote.
                    retry_without_nofragment = true;
                    break;
                }
                if let Some(idx) = self.rmqueue_zone(zi, zone, order, alloc_flags, ac) {
                    return Some((zi, idx));
                }
            }
            if no_fallback || retry_without_nofragment {
                alloc_flags = alloc_flags.difference(AllocFlags::NOFRAGMENT);
                continue;
            }
            return None;
        }
    }

    /// Checks the zone's watermark and takes a block: from the per-CPU list
    /// for cached orders, else from the buddy under the zone lock (Linux's
    /// watermark part of `get_page_from_freelist` plus `rmqueue`).
    #[inline]
    fn rmqueue_zone(
        &self,
        zi: usize,
        zone: &Zone,
        order: u32,
        alloc_flags: AllocFlags,
        ac: &AllocContext,
    ) -> Option<PageIdx> {
        let check = !alloc_flags.contains(AllocFlags::NO_WATERMARKS);
        if !self.zone_allows(zone, order, alloc_flags, ac.highest) {
            return None;
        }
        if self.pcp_enabled && pcp_allowed_order(order, self.geometry.pageblock_order) {
            if let Some(idx) = self.rmqueue_pcplist(ac.cpu, zi, order, ac.migratetype, alloc_flags) {
                if alloc_flags.contains(AllocFlags::HIGHATOMIC) {
                    self.reserve_highatomic_after_pcp(zi, idx, order);
                }
                self.wake_kswapd_if_boosted(zone, ac.gfp, alloc_flags);
                return Some(idx);
            }
        }
        let idx = self.rmqueue_buddy(zone, order, alloc_flags, ac, check)?;
        self.wake_kswapd_if_boosted(zone, ac.gfp, alloc_flags);
        Some(idx)
    }

    /// After an allocation from `zone`: if a fallback boosted its watermarks
    /// for a request that may wake kswapd, wake it once (Linux's
    /// `ZONE_BOOSTED_WATERMARK` check at the end of `rmqueue`).
    #[inline(always)]
    pub(crate) fn wake_kswapd_if_boosted(&self, zone: &Zone, gfp: Gfp, alloc_flags: AllocFlags) {
        if alloc_flags.contains(AllocFlags::KSWAPD) && zone.boost_pending.load(Relaxed) {
            self.wake_kswapd_for_boost(zone, gfp);
        }
    }

    #[cold]
    fn wake_kswapd_for_boost(&self, zone: &Zone, gfp: Gfp) {
        if zone.boost_pending.swap(false, Relaxed) {
            self.stats.kswapd_wakeups.fetch_add(1, Relaxed);
            self.hooks.wake_kswapd(&crate::page_alloc::hooks::ReclaimRequest {
                gfp,
                order: 0,
                nid: zone.nid,
                attempt: 0,
            });
        }
    }

    /// Drops every zone's watermark boost. Boosts are raised when a fallback
    /// claims another type's pageblock; Linux's kswapd clears them once it
    /// has reclaimed, so call this from the work your
    /// [`Hooks::wake_kswapd`](crate::Hooks::wake_kswapd) starts.
    pub fn reset_watermark_boost(&self) {
        for zone in &self.zones {
            let _state = zone.state.lock();
            zone.reset_watermark_boost();
        }
    }

    /// Takes a block straight from the buddy lists, re-checking the
    /// watermark exactly under the lock.
    fn rmqueue_buddy(
        &self,
        zone: &Zone,
        order: u32,
        alloc_flags: AllocFlags,
        ac: &AllocContext,
        check: bool,
    ) -> Option<PageIdx> {
        let cx = zone.cx(self.mem());
        let mut state = zone.state.lock();
        if check {
            let mark = zone.watermark(alloc_flags.watermark());
            if !zone.watermark_ok(&state, order, mark, ac.highest, alloc_flags) {
                return None;
            }
        }
        let mut mode = RmqueueMode::Normal;
        let idx = fallback::rmqueue(zone, &mut state, cx, order, ac.migratetype, alloc_flags, &mut mode)?;
        if alloc_flags.contains(AllocFlags::HIGHATOMIC) {
            fallback::reserve_highatomic_pageblock(zone, &mut state, cx, idx, order);
        }
        state.counters.pgalloc_blocks += 1;
        state.counters.pgalloc_pages += 1 << order;
        zone.publish(&state);
        Some(idx)
    }

    /// Turns a block just taken off the free lists into an allocated block.
    #[inline]
    pub(crate) fn prep_new_page(&self, idx: PageIdx, order: u32, gfp: Gfp, mt: MigrateType, frozen: bool) {
        let head = self.desc(idx);
        let compound = gfp.contains(Gfp::COMP) && order > 0;
        let mut flags = PageFlags::ALLOCATED;
        if compound {
            flags = flags | PageFlags::HEAD;
            for tail in idx + 1..idx + (1 << order) {
                let t = self.desc(tail);
                t.set_state(PageFlags::TAIL, 0, 0);
                t.set_next(idx);
            }
        }
        head.set_private(0);
        head.set_refcount(if frozen { 0 } else { 1 });
        // The state store comes last: a concurrent reader that sees ALLOCATED
        // sees a finished page.
        head.set_state(flags, order, mt as u8);
        #[cfg(feature = "std")]
        if gfp.contains(Gfp::ZERO) {
            if let Some(mem) = &self.memory {
                mem.zero_pages(idx as usize, 1 << order);
            }
        }
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

/// Where a fast-path allocation goes: see [`PageAllocator::fast_target`].
pub(crate) struct FastTarget<'a> {
    /// Zone index.
    pub(crate) zi: usize,
    /// The zone.
    pub(crate) zone: &'a Zone,
    /// ALLOC flags of the fast path.
    pub(crate) flags: AllocFlags,
    /// The request's migratetype.
    pub(crate) mt: MigrateType,
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
