//! The public allocator: PFN lookup, the zonelist walk, the fast and slow
//! allocation paths and `prep_new_page`.
//!
//! Owns `PageAllocator` and the order in which zones are tried. Free paths
//! live in `free`, reporting in `info`, invariant checks in `invariants`; all
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

use crate::cma::CmaArea;
use crate::fallback::{self, RmqueueMode};
use crate::gfp::{
    fast_path_alloc_flags, gfp_migratetype, gfp_to_alloc_flags, gfp_zone, AllocFlags, Gfp,
    MigrateType, ZoneType,
};
use crate::hooks::{AllocFailure, Hooks, RateLimit, ReclaimRequest};
use crate::memmap::{node_zone_table, Geometry};
use crate::migrate::Migrator;
use crate::page::{PageDesc, PageFlags, PageIdx, PageTable};
use crate::pageblock::PageblockMap;
use crate::stats::{Stats, StatsSnapshot};
use crate::zone::{Lock, MemCtx, Zone};
use crate::{AllocError, Pfn};
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Retries of reclaim without progress before giving up (Linux's
/// `MAX_RECLAIM_RETRIES`).
const MAX_RECLAIM_RETRIES: u32 = 16;

/// Orders above this are "costly": they give up sooner.
pub const PAGE_ALLOC_COSTLY_ORDER: u32 = 3;

pub(crate) struct Parts {
    pub geometry: Geometry,
    pub base_pfn: u64,
    pub pages: PageTable,
    pub blocks: PageblockMap,
    pub zones: Vec<Zone>,
    pub hooks: Box<dyn Hooks>,
    pub min_free_kbytes: u64,
    #[cfg(feature = "std")]
    pub memory: Option<crate::rawmem::RealMemory>,
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
    /// Per node: zone indices in fallback order.
    zonelists: Vec<Vec<usize>>,
    pub(crate) hooks: Box<dyn Hooks>,
    pub(crate) stats: Stats,
    pub(crate) bad_page_log: Lock<RateLimit>,
    /// Poisoned pages still allocated; while non-zero, frees scan for them.
    pub(crate) hwpoison_pending: AtomicU64,
    min_free_kbytes: u64,
    #[cfg(feature = "std")]
    pub(crate) memory: Option<crate::rawmem::RealMemory>,
    /// The embedder's page mover, used by contiguous allocations.
    pub(crate) migrator: Option<Box<dyn Migrator>>,
    /// CMA areas, in declaration order.
    pub(crate) cma: Vec<CmaArea>,
}

/// Where an allocation is headed, fixed at entry (Linux's `alloc_context`).
#[derive(Clone, Copy)]
struct AllocContext {
    nid: usize,
    highest: ZoneType,
    migratetype: MigrateType,
    this_node_only: bool,
}

impl PageAllocator {
    pub(crate) fn from_parts(p: Parts) -> Self {
        let mut zones_by_pfn: Vec<usize> = (0..p.zones.len()).collect();
        zones_by_pfn.sort_by_key(|&i| p.zones[i].start_idx);
        let max_nid = p.zones.iter().map(|z| z.nid).max().unwrap_or(0);
        let zonelists = (0..=max_nid)
            .map(|nid| build_zonelist(&p.zones, nid))
            .collect();
        Self {
            geometry: p.geometry,
            base_pfn: p.base_pfn,
            pages: p.pages,
            blocks: p.blocks,
            zones: p.zones,
            zones_by_pfn,
            zonelists,
            hooks: p.hooks,
            stats: Stats::default(),
            bad_page_log: Lock::new(RateLimit::bad_pages()),
            hwpoison_pending: AtomicU64::new(0),
            min_free_kbytes: p.min_free_kbytes,
            #[cfg(feature = "std")]
            memory: p.memory,
            migrator: p.migrator,
            cma: p.cma,
        }
    }

    #[inline]
    pub(crate) fn mem(&self) -> MemCtx<'_> {
        MemCtx {
            pages: &self.pages,
            blocks: &self.blocks,
            geometry: &self.geometry,
        }
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
    /// Free pages over all zones.
    pub fn nr_free_pages(&self) -> u64 {
        self.zones.iter().map(|z| z.free_pages()).sum()
    }
    /// Allocator-wide counters.
    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }
    /// Number of nodes (highest node id + 1).
    pub fn nr_nodes(&self) -> usize {
        self.zonelists.len()
    }

    /// Zone indices node `nid` falls back through, nearest first.
    pub(crate) fn zonelist(&self, nid: usize) -> &[usize] {
        &self.zonelists[nid]
    }

    /// Returns pages held in per-CPU lists to the buddy lists.
    pub fn drain_all_pages(&self) {
        // per-CPU lists are merged in from the pcp branch
    }

    /// Descriptor index of `pfn`, if the map covers it.
    #[inline]
    pub(crate) fn pfn_to_idx(&self, pfn: Pfn) -> Option<PageIdx> {
        let off = pfn.0.checked_sub(self.base_pfn)?;
        (off < self.pages.len() as u64).then_some(off as PageIdx)
    }
    #[inline]
    pub(crate) fn idx_to_pfn(&self, idx: PageIdx) -> Pfn {
        Pfn(self.base_pfn + idx as u64)
    }
    #[inline]
    pub(crate) fn desc(&self, idx: PageIdx) -> &PageDesc {
        self.pages.get(idx)
    }

    /// Zone holding descriptor `idx` (None in a hole between zones).
    #[inline]
    pub(crate) fn zone_of(&self, idx: PageIdx) -> Option<&Zone> {
        let pos = self
            .zones_by_pfn
            .partition_point(|&z| self.zones[z].start_idx <= idx);
        let zone = &self.zones[*self.zones_by_pfn.get(pos.checked_sub(1)?)?];
        (idx < zone.end_idx).then_some(zone)
    }

    /// Allocates 2^`order` contiguous pages on the local node (node 0 unless
    /// the map has one zone elsewhere only). See [`alloc_pages_node`](Self::alloc_pages_node).
    ///
    /// # Errors
    /// As [`alloc_pages_node`](Self::alloc_pages_node).
    pub fn alloc_pages(&self, gfp: Gfp, order: u32) -> Result<Pfn, AllocError> {
        self.alloc_pages_node(self.local_nid(), gfp, order)
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
    pub fn alloc_pages_node(&self, nid: usize, gfp: Gfp, order: u32) -> Result<Pfn, AllocError> {
        self.alloc_inner(nid, gfp, order, false)
    }

    /// Like [`alloc_pages`](Self::alloc_pages) but the page comes back with
    /// refcount 0 ("frozen"); free it with
    /// [`free_frozen_pages`](Self::free_frozen_pages).
    ///
    /// # Errors
    /// As [`alloc_pages_node`](Self::alloc_pages_node).
    pub fn alloc_frozen_pages(&self, gfp: Gfp, order: u32) -> Result<Pfn, AllocError> {
        self.alloc_inner(self.local_nid(), gfp, order, true)
    }

    /// Frozen allocation preferring node `nid`.
    ///
    /// # Errors
    /// As [`alloc_pages_node`](Self::alloc_pages_node).
    pub fn alloc_frozen_pages_node(
        &self,
        nid: usize,
        gfp: Gfp,
        order: u32,
    ) -> Result<Pfn, AllocError> {
        self.alloc_inner(nid, gfp, order, true)
    }

    fn local_nid(&self) -> usize {
        0
    }

    fn alloc_inner(
        &self,
        nid: usize,
        gfp: Gfp,
        order: u32,
        frozen: bool,
    ) -> Result<Pfn, AllocError> {
        let max = self.geometry.merge_order();
        if order > max {
            return Err(AllocError::OrderTooLarge { order, max });
        }
        let highest = gfp_zone(gfp).map_err(|_| AllocError::InvalidGfp(gfp))?;
        if nid >= self.zonelists.len() {
            return Err(AllocError::NoSuchNode(nid));
        }
        let ac = AllocContext {
            nid,
            highest,
            migratetype: gfp_migratetype(gfp),
            this_node_only: gfp.contains(Gfp::THISNODE),
        };
        let flags = fast_path_alloc_flags(gfp, self.nofragment_applies(&ac));
        let got = match self.get_page_from_freelist(order, flags, &ac) {
            Some(got) => Some(got),
            None => self.alloc_slowpath(gfp, order, &ac),
        };
        match got {
            Some((zone, idx)) => {
                self.prep_new_page(zone, idx, order, gfp, ac.migratetype, frozen);
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
    fn candidate_zones<'a>(
        &'a self,
        ac: &'a AllocContext,
    ) -> impl Iterator<Item = (usize, &'a Zone)> + 'a {
        self.zonelists[ac.nid]
            .iter()
            .map(|&i| (i, &self.zones[i]))
            .filter(move |(_, z)| {
                z.zone_type <= ac.highest && (!ac.this_node_only || z.nid == ac.nid)
            })
    }

    /// Linux's `alloc_flags_nofragment`: a NORMAL preferred zone with a
    /// populated DMA32 below it should not be fragmented while DMA32 can
    /// serve the request.
    fn nofragment_applies(&self, ac: &AllocContext) -> bool {
        let Some((_, preferred)) = self.candidate_zones(ac).next() else {
            return false;
        };
        preferred.zone_type == ZoneType::Normal
            && node_zone_table(&self.zones, preferred.nid)[ZoneType::Dma32.index()]
                .is_some_and(|i| self.zones[i].managed_pages > 0)
    }

    /// Tries each candidate zone once (Linux's `get_page_from_freelist`).
    fn get_page_from_freelist(
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
                if let Some(idx) = self.rmqueue_zone(zone, order, alloc_flags, ac) {
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

    /// Checks the watermark and takes a block, all under the zone lock.
    fn rmqueue_zone(
        &self,
        zone: &Zone,
        order: u32,
        alloc_flags: AllocFlags,
        ac: &AllocContext,
    ) -> Option<PageIdx> {
        let cx = zone.cx(self.mem());
        let mut state = zone.state.lock();
        if !alloc_flags.contains(AllocFlags::NO_WATERMARKS) {
            let mark = zone.watermark(alloc_flags.watermark());
            if !zone.watermark_ok(&state, order, mark, ac.highest, alloc_flags) {
                return None;
            }
        }
        let mut mode = RmqueueMode::Normal;
        let idx = fallback::rmqueue(
            zone,
            &mut state,
            cx,
            order,
            ac.migratetype,
            alloc_flags,
            &mut mode,
        )?;
        if alloc_flags.contains(AllocFlags::HIGHATOMIC) {
            fallback::reserve_highatomic_pageblock(zone, &mut state, cx, idx, order);
        }
        state.counters.pgalloc_blocks += 1;
        state.counters.pgalloc_pages += 1 << order;
        zone.publish(&state);
        Some(idx)
    }

    /// Linux's `__alloc_pages_slowpath`, with reclaim as hooks.
    fn alloc_slowpath(&self, gfp: Gfp, order: u32, ac: &AllocContext) -> Option<(usize, PageIdx)> {
        self.stats.slowpath_entries.fetch_add(1, Relaxed);
        let mut alloc_flags = gfp_to_alloc_flags(gfp, order);
        let can_direct_reclaim = gfp.contains(Gfp::DIRECT_RECLAIM);
        let costly = order > PAGE_ALLOC_COSTLY_ORDER;
        let mut request = ReclaimRequest {
            gfp,
            order,
            nid: ac.nid,
            attempt: 0,
        };
        let mut no_progress_loops = 0;
        loop {
            if alloc_flags.contains(AllocFlags::KSWAPD) {
                self.stats.kswapd_wakeups.fetch_add(1, Relaxed);
                self.hooks.wake_kswapd(&request);
            }
            if let Some(got) = self.get_page_from_freelist(order, alloc_flags, ac) {
                return Some(got);
            }
            if gfp.contains(Gfp::MEMALLOC) && !gfp.contains(Gfp::NOMEMALLOC) {
                alloc_flags = alloc_flags.union(AllocFlags::NO_WATERMARKS);
                if let Some(got) = self.get_page_from_freelist(order, alloc_flags, ac) {
                    return Some(got);
                }
            }
            if !can_direct_reclaim {
                break;
            }
            self.stats.allocstall.fetch_add(1, Relaxed);
            let reclaimed = self.hooks.direct_reclaim(&request);
            if let Some(got) = self.get_page_from_freelist(order, alloc_flags, ac) {
                return Some(got);
            }
            let mut compacted = false;
            if order > 0 {
                self.stats.compact_stall.fetch_add(1, Relaxed);
                compacted = self.hooks.direct_compact(&request);
                if compacted {
                    if let Some(got) = self.get_page_from_freelist(order, alloc_flags, ac) {
                        return Some(got);
                    }
                }
            }
            if gfp.contains(Gfp::NORETRY) || (costly && !gfp.contains(Gfp::RETRY_MAYFAIL)) {
                break;
            }
            if reclaimed > 0 || compacted {
                no_progress_loops = 0;
            } else {
                no_progress_loops += 1;
            }
            if no_progress_loops > MAX_RECLAIM_RETRIES {
                // Last resort before failing: give the highatomic reserve back.
                if self.unreserve_highatomic(ac, true) {
                    if let Some(got) = self.get_page_from_freelist(order, alloc_flags, ac) {
                        return Some(got);
                    }
                }
                break;
            }
            request.attempt += 1;
        }
        if gfp.contains(Gfp::NOFAIL) {
            // Some access to reserves, never all of them (Linux avoids
            // NO_WATERMARKS here so the reserves survive for others).
            let flags = alloc_flags.union(AllocFlags::MIN_RESERVE);
            loop {
                if let Some(got) = self.get_page_from_freelist(order, flags, ac) {
                    return Some(got);
                }
                request.attempt += 1;
                if !self.hooks.retry_nofail(&request) {
                    return None;
                }
                self.stats.nofail_retries.fetch_add(1, Relaxed);
                self.hooks.direct_reclaim(&request);
            }
        }
        None
    }

    /// Releases one highatomic pageblock in the first zone that has one.
    fn unreserve_highatomic(&self, ac: &AllocContext, force: bool) -> bool {
        for (_, zone) in self.candidate_zones(ac) {
            let cx = zone.cx(self.mem());
            let mut state = zone.state.lock();
            if fallback::unreserve_highatomic_pageblock(&mut state, cx, ac.migratetype, force) {
                return true;
            }
        }
        false
    }

    /// Turns a block just taken off the free lists into an allocated block.
    fn prep_new_page(
        &self,
        _zone: usize,
        idx: PageIdx,
        order: u32,
        gfp: Gfp,
        mt: MigrateType,
        frozen: bool,
    ) {
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
}

/// Zones in fallback order for node `nid`: nodes by distance (here |a - b|,
/// then id), each node's zones from MOVABLE down to DMA.
fn build_zonelist(zones: &[Zone], nid: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..zones.len()).collect();
    order.sort_by_key(|&i| {
        let z = &zones[i];
        (
            z.nid.abs_diff(nid),
            z.nid,
            core::cmp::Reverse(z.zone_type.index()),
        )
    });
    order
}
