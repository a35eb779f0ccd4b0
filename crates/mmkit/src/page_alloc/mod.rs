//! The allocator's state and its lookups: `PageAllocator`, built from the
//! builder's parts, with PFN ↔ descriptor ↔ zone lookups and the zonelists.
//!
//! The layer's other files each own one path: `cache` (the per-CPU cache,
//! the front door of an order-0 page, held by a CPU or a pinned handle),
//! `alloc_path` (the front doors, the one slow path, the zonelist walk),
//! `slowpath`, `free`, `cpu` (the per-CPU lists, locked or held), `bulk`,
//! `locked_zone`, `pinned` and `cpus` (pinned CPUs, handles that name a
//! CPU, the `Cpus` view), hardware poison (`hwpoison`), `alloc_at` (placed
//! allocation for replay), `block` (owned blocks for the layers above),
//! `guard` (blocks freed on drop), `hooks` and `migrate` (the embedder's
//! side), `compaction` and `reporting` (the `Tuning` view's background
//! work). All of them go through zones (which lock) to buddy (which edits
//! lists) to page descriptors; nothing here edits a free list directly.
#![deny(unsafe_code)]

pub(crate) mod alloc_at;
pub(crate) mod alloc_path;
pub(crate) mod block;
pub(crate) mod bulk;
pub(crate) mod cache;
pub(crate) mod compaction;
pub mod cpu;
pub(crate) mod cpus;
pub(crate) mod evacuate;
pub(crate) mod free;
pub(crate) mod guard;
pub mod hooks;
pub(crate) mod hwpoison;
pub(crate) mod locked_zone;
pub mod migrate;
pub(crate) mod pinned;
pub(crate) mod reporting;
pub(crate) mod slowpath;
pub(crate) mod source;
pub(crate) mod stats;
pub(crate) mod view;

use crate::mem::map::MemMap;
use crate::mem::page::{PageDesc, PageIdx};
use crate::mem::sync::Lock;
use crate::page_alloc::hooks::{Hooks, RateLimit};
use crate::page_alloc::hwpoison::PendingPoison;
use crate::page_alloc::migrate::Migrator;
use crate::page_alloc::stats::Stats;
use crate::pcp::cpus::PerCpu;
use crate::pcp::{pcp_sizing, Pageset};
use crate::types::geometry::Geometry;
use crate::types::gfp::{gfp_migratetype, Gfp, MigrateType, ZoneType};
use crate::zone::cma_area::CmaArea;
use crate::zone::zonelist::ZoneSet;
use crate::zone::Zone;
use crate::Pfn;
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::Ordering::Relaxed;

#[cfg(test)]
mod map_id_tests {
    use super::{next_map_id, MAX_MAP_ID};
    use core::sync::atomic::AtomicU64;

    /// The old counter was a wrapping `u32`: after 2^32 builds a map got
    /// an id an earlier map still used. Now the last id is handed out once
    /// and every later request is refused.
    #[test]
    fn map_ids_stop_at_the_limit_instead_of_wrapping() {
        let counter = AtomicU64::new(u64::from(u32::MAX));
        assert_eq!(next_map_id(&counter), Some(u64::from(u32::MAX)));
        assert_eq!(next_map_id(&counter), Some(1 << 32), "no wrap at 2^32");
        let counter = AtomicU64::new(MAX_MAP_ID);
        assert_eq!(next_map_id(&counter), Some(MAX_MAP_ID));
        assert_eq!(next_map_id(&counter), None);
        assert_eq!(next_map_id(&counter), None, "refused for good");
    }
}

/// Retries of reclaim without progress before giving up (Linux's
/// `MAX_RECLAIM_RETRIES`).
pub(crate) const MAX_RECLAIM_RETRIES: u32 = 16;

/// Compaction rounds a request may go through (Linux's `MAX_COMPACT_RETRIES`).
pub(crate) const MAX_COMPACT_RETRIES: u32 = 16;

pub(crate) struct Parts {
    pub mem: MemMap,
    pub zones: Vec<Zone>,
    pub hooks: Box<dyn Hooks>,
    pub min_free_kbytes: u64,
    pub nr_cpus: usize,
    pub cpu_id: fn() -> usize,
    pub cpu_nodes: Vec<usize>,
    pub pcp_high_fraction: u32,
    pub pcp_enabled: bool,
    pub mobility_disabled: bool,
    pub migrator: Option<Box<dyn Migrator>>,
    pub cma: Vec<CmaArea>,
    /// The per-CPU order-0 cache may be used (on, the CPU-id source the
    /// default one, per-CPU lists on).
    pub cpu_caches: bool,
}

/// A page allocator over one memory map: nodes, zones, buddy free lists.
/// Built by [`MemoryMapBuilder`](crate::MemoryMapBuilder).
///
/// Its methods are the allocation API, Linux's names in Rust casing:
/// - allocate: [`alloc_pages`](Self::alloc_pages) (2^order pages on the
///   local node), [`alloc_pages_node`](Self::alloc_pages_node),
///   [`alloc_frozen_pages`](Self::alloc_frozen_pages) (no reference),
///   [`alloc_pages_guarded`](Self::alloc_pages_guarded) (freed on drop),
///   [`alloc_pages_bulk`](Self::alloc_pages_bulk) (many order-0 pages);
/// - free: [`free_pages`](Self::free_pages) (same order),
///   [`put_page`](Self::put_page) (drop a reference),
///   [`free_frozen_pages`](Self::free_frozen_pages),
///   [`free_pages_bulk`](Self::free_pages_bulk);
/// - a page's state: [`get_page`](Self::get_page),
///   [`page_count`](Self::page_count), [`page_flags`](Self::page_flags),
///   [`page_address`](Self::page_address) with real memory,
///   [`memory_failure`](Self::memory_failure);
/// - the map's shape: [`geometry`](Self::geometry), [`zones`](Self::zones),
///   [`start_pfn`](Self::start_pfn)..[`end_pfn`](Self::end_pfn).
///
/// An order-0 page comes from the per-CPU cache and goes back to it
/// (`docs/fast-paths.md`); everything else takes the per-CPU lists, the
/// buddy and the zonelist, as Linux's `get_page_from_freelist` does.
/// Other concerns are views that borrow the allocator, made where needed
/// (a view costs a reference): [`Cpus`] (per-CPU handles, pinning,
/// drains), [`Tuning`] (knobs, compaction, free page reporting),
/// [`Blocks`] (owner keys and owned blocks, for layers built on the
/// allocator), [`Report`](crate::Report) (counters, `/proc` texts, the
/// invariant checker), [`Contig`](crate::Contig) (contiguous ranges, CMA).
///
/// `Send + Sync`: any thread may allocate and free. Each zone has its own
/// lock; page references are atomic.
///
/// ```
/// use mmkit::{Cpus, Gfp, MemoryMapBuilder, Report};
/// let mm = MemoryMapBuilder::with_memory(64 << 20).build().unwrap();
/// let pfn = mm.alloc_pages(Gfp::KERNEL, 0).unwrap(); // this CPU's cache
/// mm.free_pages(pfn, 0).unwrap();
/// Cpus::new(&mm).drain_all_pages(); // caches and lists back to the buddy
/// assert_eq!(Report::new(&mm).nr_pcp_pages(), 0);
/// ```
pub struct PageAllocator {
    /// The memory layer: geometry, descriptors, pageblock types, backing.
    pub(crate) mem: MemMap,
    /// The zone layer: zones, lookups, zonelists.
    pub(crate) zones: ZoneSet,
    pub(crate) hooks: Box<dyn Hooks>,
    pub(crate) stats: Stats,
    pub(crate) bad_page_log: Lock<RateLimit>,
    /// Poisoned pages not yet out of circulation; while any is, frees
    /// bypass the per-CPU lists and releases ask for them.
    pub(crate) hwpoison: PendingPoison,
    min_free_kbytes: u64,
    /// The per-CPU layer: pagesets, CPU ids and nodes, pinning.
    pub(crate) pcp: PerCpu,
    /// Built with `group_by_mobility(false)`.
    pub(crate) mobility_disabled: bool,
    /// The embedder's page mover, used by contiguous allocations.
    pub(crate) migrator: Option<Box<dyn Migrator>>,
    /// CMA areas, in declaration order.
    pub(crate) cma: Vec<CmaArea>,
    /// Tells this allocator's [`PageBlock`](crate::PageBlock)s and
    /// [`ContigRange`](crate::ContigRange)s from others': unique among the
    /// maps of the process, never reused (see [`next_map_id`]).
    map_id: u64,
    /// Owner tags held by live [`OwnerKey`](crate::OwnerKey)s or retired:
    /// bit `t` for tag `t` (`page_alloc::block`).
    pub(crate) owner_tags: core::sync::atomic::AtomicU32,
    /// The tag of this map's [`PageGuard`](crate::PageGuard)s, 0 until the
    /// first guard takes one (`page_alloc::guard`).
    pub(crate) guard_tag: core::sync::atomic::AtomicU8,
    /// The per-CPU cache's stacks held by the CPUs, the shared API's
    /// (`page_alloc::cache::cpu`); `None` where restartable sequences are
    /// unavailable (`sys`) or the map was built without them.
    pub(crate) cpu_caches: Option<cache::cpu::CpuCaches>,
}

view::allocator_view! {
    /// Per-CPU control of an allocator: handles on a named CPU's lists
    /// ([`cpu`](Self::cpu)), a CPU pinned to the calling thread
    /// ([`pin_cpu`](Self::pin_cpu)), drains, each CPU's lists and node.
    ///
    /// ```
    /// use mmkit::{Cpus, Gfp, MemoryMapBuilder};
    /// let mm = MemoryMapBuilder::with_memory(64 << 20).nr_cpus(2).build().unwrap();
    /// let cpus = Cpus::new(&mm);
    /// let mut cpu1 = cpus.pin_cpu(1).unwrap();
    /// let pfn = cpu1.alloc_pages(Gfp::KERNEL, 0).unwrap();
    /// cpu1.free_pages(pfn, 0).unwrap();
    /// drop(cpu1);
    /// assert_eq!(cpus.drain_all_pages(), 0, "no pinned CPU left to ask");
    /// ```
    pub struct Cpus;
}

view::allocator_view! {
    /// The knobs of an allocator and the background work Linux's sysctls
    /// and daemons drive: `percpu_pagelist_high_fraction`, the per-CPU
    /// lists' decay (vmstat), a watermark boost's reset (kswapd),
    /// compaction (`compact_memory`, kcompactd's proactive rounds) and
    /// free page reporting.
    ///
    /// ```
    /// use mmkit::{MemoryMapBuilder, Tuning};
    /// let mm = MemoryMapBuilder::with_memory(64 << 20).build().unwrap();
    /// let tuning = Tuning::new(&mm);
    /// assert!(tuning.set_percpu_pagelist_high_fraction(4).is_err(), "below 8: Linux's EINVAL");
    /// tuning.set_percpu_pagelist_high_fraction(8).unwrap();
    /// tuning.decay_pcp_high();
    /// ```
    pub struct Tuning;
}

view::allocator_view! {
    /// Owned blocks, what the layers above the page allocator build on
    /// (quicklists, page tables, zsmalloc): owner keys, blocks of a key,
    /// their bytes, handing a block out as a bare PFN and taking it back
    /// (`page_alloc::block` says how; `docs/architecture.md`, "Ownership of
    /// pages", who may do what).
    ///
    /// ```
    /// use mmkit::{Backing, Blocks, Gfp, HugePages, MemoryMapBuilder};
    /// let mm = MemoryMapBuilder::with_memory(16 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap();
    /// let blocks = Blocks::new(&mm);
    /// let key = blocks.new_owner_key().unwrap();
    /// let mut block = blocks.alloc_block(&key, Gfp::KERNEL | Gfp::ZERO, 0).unwrap();
    /// blocks.block_bytes_mut(&mut block).unwrap()[0] = 7; // the key's holder alone
    /// blocks.free_block(block).unwrap();
    /// assert!(blocks.release_owner_key(key));
    /// ```
    pub struct Blocks;
}

impl Tuning<'_> {
    /// `min_free_kbytes` in force.
    pub fn min_free_kbytes(&self) -> u64 {
        self.mm.min_free_kbytes
    }
}

/// Source of [`PageAllocator::map_id`]s: the next id to hand out.
static NEXT_MAP_ID: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(1);

/// Largest map id: a [`PageBlock`](crate::PageBlock) packs its map's id
/// into 48 bits beside its order and owner tag, so that a handle stays
/// two words. At one map built per microsecond the ids last 8.9 years of
/// builds; past them a build fails rather than reuse one.
pub(crate) const MAX_MAP_ID: u64 = (1 << 48) - 1;

/// Takes the next id from `counter`, or `None` once every id up to
/// [`MAX_MAP_ID`] has been handed out. Never wraps: a compare-and-swap
/// that stops at the limit (as `std::thread::ThreadId`), so an id, once
/// taken, is never handed out again and a handle of a dropped map can
/// never pass a later map's check.
pub(crate) fn next_map_id(counter: &core::sync::atomic::AtomicU64) -> Option<u64> {
    counter.fetch_update(Relaxed, Relaxed, |id| (id <= MAX_MAP_ID).then_some(id + 1)).ok()
}

/// Where an allocation is headed, fixed at entry (Linux's `alloc_context`).
#[derive(Clone, Copy)]
pub(crate) struct AllocContext {
    pub(crate) gfp: Gfp,
    pub(crate) nid: usize,
    pub(crate) highest: ZoneType,
    pub(crate) migratetype: MigrateType,
    pub(crate) this_node_only: bool,
}

impl PageAllocator {
    /// The allocator over checked parts.
    ///
    /// # Errors
    /// [`BuildError::NoMetadataMemory`](crate::BuildError::NoMetadataMemory)
    /// when the zone table or the per-CPU pagesets cannot be allocated.
    pub(crate) fn from_parts(p: Parts) -> Result<Self, crate::types::error::BuildError> {
        let map_id = next_map_id(&NEXT_MAP_ID).ok_or(crate::types::error::BuildError::MapIdsExhausted)?;
        let zones = ZoneSet::try_new(p.zones, p.mem.pages.len(), p.mem.geometry.pageblock_order)?;
        let nr_cpus = p.nr_cpus.max(1);
        let nr_pagesets = nr_cpus.saturating_mul(zones.len());
        let mut pagesets = Vec::new();
        pagesets.try_reserve_exact(nr_pagesets).map_err(|_| crate::types::error::BuildError::NoMetadataMemory {
            bytes: nr_pagesets.saturating_mul(core::mem::size_of::<Pageset>()),
        })?;
        for _cpu in 0..nr_cpus {
            for zone in zones.iter() {
                pagesets.push(Pageset::new(pcp_sizing(zone, p.mem.geometry.page_size(), nr_cpus, p.pcp_high_fraction)));
            }
        }
        let mut pcp = PerCpu::new(nr_cpus, pagesets, p.cpu_id, &p.cpu_nodes, p.pcp_high_fraction, p.pcp_enabled);
        // With grouping off every request is unmovable: the lists then serve
        // everything, as under the policy's other settings.
        pcp.movable_only = !p.mobility_disabled && zones.iter().next().is_some_and(|z| z.placement.pcp_movable_only());
        let mut allocator = Self {
            mem: p.mem,
            zones,
            hooks: p.hooks,
            stats: Stats::default(),
            bad_page_log: Lock::new(RateLimit::bad_pages()),
            hwpoison: PendingPoison::default(),
            min_free_kbytes: p.min_free_kbytes,
            pcp,
            map_id,
            owner_tags: core::sync::atomic::AtomicU32::new(0),
            guard_tag: core::sync::atomic::AtomicU8::new(0),
            mobility_disabled: p.mobility_disabled,
            migrator: p.migrator,
            cma: p.cma,
            cpu_caches: None,
        };
        if p.cpu_caches && p.pcp_enabled {
            allocator.cpu_caches = cache::cpu::CpuCaches::new(&allocator);
        }
        Ok(allocator)
    }

    /// This allocator's identity among the allocators of the process.
    #[inline(always)]
    pub(crate) fn map_id(&self) -> u64 {
        self.map_id
    }

    /// The map's geometry.
    pub fn geometry(&self) -> &Geometry {
        &self.mem.geometry
    }
    /// Every zone, ordered by node then zone type.
    pub fn zones(&self) -> &[Zone] {
        &self.zones
    }
    /// First PFN covered by descriptors.
    pub fn start_pfn(&self) -> Pfn {
        Pfn(self.mem.base_pfn)
    }
    /// One past the last PFN covered by descriptors.
    pub fn end_pfn(&self) -> Pfn {
        Pfn(self.mem.base_pfn + self.mem.pages.len() as u64)
    }
    /// Pages cached on every CPU's lists and per-CPU caches (free, but not
    /// in the zones' free counts). Pinned CPUs are not counted.
    pub(crate) fn nr_pcp_pages(&self) -> u64 {
        (0..self.zones.len()).map(|zi| self.pcp_totals(zi).1 + self.cpu_cached_blocks(zi).1).sum()
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

    /// Whether a request with `gfp` may use the per-CPU lists: they are on,
    /// and the request is movable or the policy caches every migratetype.
    #[inline(always)]
    pub(crate) fn pcp_serves(&self, gfp: Gfp) -> bool {
        self.pcp.enabled && (!self.pcp.movable_only || self.request_migratetype(gfp) == MigrateType::Movable)
    }

    /// Number of nodes (highest node id + 1).
    pub fn nr_nodes(&self) -> usize {
        self.zones.nr_nodes()
    }

    /// `Ok` if the allocator has CPU `cpu`.
    pub(crate) fn check_cpu(&self, cpu: usize) -> Result<(), crate::IndexError> {
        let nr_cpus = self.pcp.nr_cpus;
        if cpu < nr_cpus {
            Ok(())
        } else {
            Err(crate::IndexError::NoSuchCpu { cpu, nr_cpus })
        }
    }

    /// `Ok` if the map has node `nid` (memoryless nodes below the highest
    /// included).
    pub(crate) fn check_node(&self, nid: usize) -> Result<(), crate::IndexError> {
        let nr_nodes = self.nr_nodes();
        if nid < nr_nodes {
            Ok(())
        } else {
            Err(crate::IndexError::NoSuchNode { nid, nr_nodes })
        }
    }

    /// `Ok` if the map has a zone of index `zone`.
    pub(crate) fn check_zone(&self, zone: usize) -> Result<(), crate::IndexError> {
        let nr_zones = self.zones.len();
        if zone < nr_zones {
            Ok(())
        } else {
            Err(crate::IndexError::NoSuchZone { zone, nr_zones })
        }
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
        let off = pfn.0.checked_sub(self.mem.base_pfn)?;
        (off < self.mem.pages.len() as u64).then_some(off as PageIdx)
    }
    /// Brings `pfn`'s page descriptor into the cache ahead of a free or a
    /// flag change, for callers that know their next PFNs (a replayer, a
    /// batch free). A hint: does nothing for a PFN outside the map.
    #[inline]
    pub fn prefetch_page(&self, pfn: Pfn) {
        if let Some(idx) = self.pfn_to_idx(pfn) {
            crate::sys::prefetch(self.desc(idx));
        }
    }

    /// Descriptor index and descriptor of `pfn` in one bounds check.
    #[inline]
    pub(crate) fn pfn_to_desc(&self, pfn: Pfn) -> Option<(PageIdx, &PageDesc)> {
        let off = pfn.0.checked_sub(self.mem.base_pfn)?;
        Some((off as PageIdx, self.mem.pages.try_get(off)?))
    }
    #[inline]
    pub(crate) fn idx_to_pfn(&self, idx: PageIdx) -> Pfn {
        Pfn(self.mem.base_pfn + idx as u64)
    }
    #[inline]
    pub(crate) fn desc(&self, idx: PageIdx) -> &PageDesc {
        self.mem.pages.get(idx)
    }

    /// Preferred zone index for node `nid` and highest zone type, and
    /// whether `ALLOC_NOFRAGMENT` applies to it.
    #[inline]
    pub(crate) fn preferred_zone(&self, nid: usize, highest: ZoneType) -> Option<(usize, bool)> {
        self.zones.preferred_zone(nid, highest)
    }

    /// Zone indices in fallback order for node `nid`.
    pub(crate) fn zonelist(&self, nid: usize) -> &[usize] {
        self.zones.zonelist(nid)
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
        self.zones.index_of(idx)
    }

    /// Whether real memory stands behind the PFNs
    /// ([`Backing::RealMemory`](crate::Backing)): only then do blocks have
    /// bytes ([`block_bytes`](crate::Blocks::block_bytes)).
    pub fn has_real_memory(&self) -> bool {
        self.mem.memory.is_some()
    }

    /// Address of `pfn`'s memory when the map has real backing.
    ///
    /// The pointer is valid for one page while the allocator lives. Reading
    /// or writing through it is the caller's `unsafe` promise that nobody
    /// else uses the page meanwhile. For a plain page (one the PFN calls
    /// handed out) the crate cannot keep that promise for it: any code that
    /// holds the map may free a plain page by its number, as in Linux, so
    /// the promise holds only in a program that controls every caller
    /// naming that PFN. Code that wants the page's bytes without such a
    /// promise holds a [`PageGuard`](crate::PageGuard) (its
    /// `bytes`/`bytes_mut`) or a [`PageBlock`](crate::PageBlock), which no
    /// PFN call can free (`docs/architecture.md`, "Ownership of pages").
    pub fn page_address(&self, pfn: Pfn) -> Option<core::ptr::NonNull<u8>> {
        let idx = self.pfn_to_idx(pfn)?;
        self.mem.memory.as_ref()?.page_ptr(idx as usize)
    }

    /// The page that holds `addr` (Linux's `virt_to_page`), when the map has
    /// real backing and `addr` lies in it.
    pub fn address_to_pfn(&self, addr: *const u8) -> Option<Pfn> {
        let index = self.mem.memory.as_ref()?.index_of(addr)?;
        Some(self.idx_to_pfn(index as PageIdx))
    }

    /// The real-memory region, if the map has one.
    #[inline]
    pub(crate) fn real_memory(&self) -> Option<&crate::sys::RealMemory> {
        self.mem.memory.as_ref()
    }
}
