//! The memory map: geometry (page size, sections, pageblocks, orders), nodes
//! and zones as PFN ranges, holes, reserved ranges and backing — and the
//! builder that turns them into a ready [`PageAllocator`].
//!
//! Owns configuration validation and the boot-time hand-over of free memory
//! to the buddy lists (Linux's `memblock_free_all`), including the CMA
//! areas' pageblock types, which are set before that hand-over. It reads
//! descriptors only to mark holes and reserved pages; everything after boot
//! belongs to the allocator layers.
#![deny(unsafe_code)]

mod validate;

use crate::mem::map::MemMap;
use crate::mem::page::{PageFlags, PageTable};
use crate::mem::pageblock::PageblockMap;
use crate::page_alloc::hooks::{Hooks, NoHooks};
use crate::page_alloc::migrate::Migrator;
use crate::types::error::{BadCmaReason, BuildError};
pub use crate::types::geometry::{Geometry, ZoneSpec};
use crate::types::gfp::{MigrateType, ZoneType};
use crate::types::placement::PlacementPolicy;
use crate::zone::buddy::Placement;
use crate::zone::cma_area::CmaArea;
use crate::zone::{setup_watermarks, WatermarkConfig, Zone};
use crate::PageAllocator;
use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::ops::Range;

/// What stands behind the PFNs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Backing {
    /// Descriptors only: the embedder owns the frames (physical memory in a
    /// kernel, device memory, a simulated machine).
    #[default]
    MetadataOnly,
    /// One anonymous mapping covering the whole map; `page_address` works and
    /// `Gfp::ZERO` zeroes.
    /// Where the target has no such mapping (no `std`, no native OS layer:
    /// `sys`), building fails with [`BuildError::RealMemory`].
    RealMemory(crate::sys::HugePages),
}

/// Builds a [`PageAllocator`]; see the crate example.
pub struct MemoryMapBuilder {
    geometry: Geometry,
    zones: Vec<ZoneSpec>,
    holes: Vec<Range<u64>>,
    reserved: Vec<Range<u64>>,
    backing: Backing,
    watermarks: WatermarkConfig,
    hooks: Box<dyn Hooks>,
    nr_cpus: usize,
    cpu_id: fn() -> usize,
    /// `(cpu, nid)` as given; checked and laid out by `build`.
    cpu_nodes: Vec<(usize, usize)>,
    pcp_high_fraction: u32,
    pcp_enabled: bool,
    cpu_caches: bool,
    cpu_id_given: bool,
    group_by_mobility: bool,
    placement: PlacementPolicy,
    populate: bool,
    cma: Vec<(String, Range<u64>)>,
    migrator: Option<Box<dyn Migrator>>,
    descriptor_memory: Option<&'static mut [core::mem::MaybeUninit<u8>]>,
}

impl Default for MemoryMapBuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryMapBuilder {
    /// An empty map with default geometry; add zones with [`zone`](Self::zone).
    pub fn new() -> Self {
        Self {
            geometry: Geometry::default(),
            zones: Vec::new(),
            holes: Vec::new(),
            reserved: Vec::new(),
            backing: Backing::MetadataOnly,
            watermarks: WatermarkConfig::default(),
            hooks: Box::new(NoHooks),
            nr_cpus: default_nr_cpus(),
            cpu_id: crate::pcp::cpus::default_cpu_id,
            cpu_nodes: Vec::new(),
            pcp_high_fraction: 0,
            pcp_enabled: true,
            cpu_caches: true,
            cpu_id_given: false,
            group_by_mobility: true,
            placement: PlacementPolicy::default(),
            populate: false,
            cma: Vec::new(),
            migrator: None,
            descriptor_memory: None,
        }
    }

    /// One node of `bytes` of memory with 4 KiB pages, laid out like an
    /// x86-64 PC: DMA below 16 MiB (starting at PFN 1: firmware keeps PFN 0,
    /// so it is a hole), DMA32 below 4 GiB, NORMAL above. For another page
    /// size use `new().page_size(..).add_pc_node(0, 0, bytes)`.
    pub fn with_memory(bytes: u64) -> Self {
        Self::new().add_pc_node(0, 0, bytes)
    }

    /// Adds node `nid` of `bytes` starting at `start_pfn`, split into
    /// DMA/DMA32/NORMAL by the 16 MiB and 4 GiB physical boundaries.
    pub fn add_pc_node(mut self, nid: usize, start_pfn: u64, bytes: u64) -> Self {
        let shift = self.geometry.page_shift;
        let end = start_pfn + (bytes >> shift);
        let dma_end = (16u64 << 20) >> shift;
        let dma32_end = (4u64 << 30) >> shift;
        let bounds = [
            (ZoneType::Dma, start_pfn.max(1), dma_end),
            (ZoneType::Dma32, start_pfn.max(dma_end), dma32_end),
            (ZoneType::Normal, start_pfn.max(dma32_end), u64::MAX),
        ];
        for (zone_type, lo, hi) in bounds {
            let hi = hi.min(end);
            if lo < hi {
                self = self.zone(nid, zone_type, lo..hi);
            }
        }
        self
    }

    /// Replaces the geometry.
    pub fn geometry(mut self, geometry: Geometry) -> Self {
        self.geometry = geometry;
        self
    }
    /// Page size in bytes (a power of two).
    pub fn page_size(mut self, bytes: u64) -> Self {
        self.geometry.page_shift = bytes.trailing_zeros();
        if !bytes.is_power_of_two() {
            self.geometry.page_shift = u32::MAX;
        }
        self
    }
    /// Pages per section as a power of two; at least the pageblock order
    /// (checked by [`build`](Self::build)).
    pub fn section_order(mut self, order: u32) -> Self {
        self.geometry.section_order = order;
        self
    }
    /// Pages per pageblock as a power of two.
    pub fn pageblock_order(mut self, order: u32) -> Self {
        self.geometry.pageblock_order = order;
        self
    }
    /// `MAX_PAGE_ORDER`.
    pub fn max_page_order(mut self, order: u32) -> Self {
        self.geometry.max_page_order = order;
        self
    }
    /// Adds a zone spanning `pfns` on node `nid`.
    pub fn zone(mut self, nid: usize, zone_type: ZoneType, pfns: Range<u64>) -> Self {
        self.zones.push(ZoneSpec { nid, zone_type, pfns });
        self
    }
    /// Marks `pfns` as a hole: no memory, no descriptor use.
    pub fn hole(mut self, pfns: Range<u64>) -> Self {
        self.holes.push(pfns);
        self
    }
    /// Marks `pfns` reserved: present but never given to the allocator.
    pub fn reserved(mut self, pfns: Range<u64>) -> Self {
        self.reserved.push(pfns);
        self
    }
    /// Chooses what backs the pages.
    pub fn backing(mut self, backing: Backing) -> Self {
        self.backing = backing;
        self
    }
    /// Replaces all watermark settings.
    pub fn watermarks(mut self, config: WatermarkConfig) -> Self {
        self.watermarks = config;
        self
    }
    /// Sets `min_free_kbytes` instead of Linux's default (at most
    /// `i32::MAX`, and below the map's low memory: checked by
    /// [`build`](Self::build)).
    pub fn min_free_kbytes(mut self, kbytes: u64) -> Self {
        self.watermarks.min_free_kbytes = Some(kbytes);
        self
    }
    /// Sets `watermark_scale_factor` (1/10000 of managed memory; Linux's
    /// bounds 1 ..= 3000, checked by [`build`](Self::build)).
    pub fn watermark_scale_factor(mut self, factor: u64) -> Self {
        self.watermarks.watermark_scale_factor = factor;
        self
    }
    /// CPUs to keep per-CPU lists for (default: the machine's CPU count
    /// with `std`, 1 without): 1 ..= [`MAX_NR_CPUS`](crate::MAX_NR_CPUS),
    /// checked by [`build`](Self::build). CPU ids the
    /// [`cpu_id_fn`](Self::cpu_id_fn) reports at or above it fold onto it.
    pub fn nr_cpus(mut self, nr_cpus: usize) -> Self {
        self.nr_cpus = nr_cpus;
        self
    }
    /// How the allocator learns the calling thread's CPU (default:
    /// `sched_getcpu` with `std`, always 0 without). Callers that know their
    /// CPU can instead use [`Cpus::cpu`](crate::Cpus::cpu).
    ///
    /// The per-CPU order-0 cache ([`cpu_caches`](Self::cpu_caches)) follows
    /// the CPU the kernel reports, so a map given its own source does
    /// without it.
    pub fn cpu_id_fn(mut self, cpu_id: fn() -> usize) -> Self {
        self.cpu_id = cpu_id;
        self.cpu_id_given = true;
        self
    }
    /// Puts CPU `cpu` on node `nid` (default: every CPU on node 0), so that
    /// `alloc_pages` called there prefers that node, as Linux's
    /// `numa_node_id()` makes it. A node without memory falls back through
    /// the zonelist like any other. [`build`](Self::build) refuses a CPU
    /// at or above `nr_cpus` and a node above every node of the map.
    pub fn cpu_node(mut self, cpu: usize, nid: usize) -> Self {
        self.cpu_nodes.retain(|&(c, _)| c != cpu);
        self.cpu_nodes.push((cpu, nid));
        self
    }
    /// Linux's `percpu_pagelist_high_fraction`: 0 (default) auto-tunes each
    /// list's `high`; N ≥ 8 pins it to managed/N split across CPUs. Values
    /// 1..=7 make [`build`](Self::build) fail, as Linux's sysctl refuses
    /// them.
    pub fn percpu_pagelist_high_fraction(mut self, fraction: u32) -> Self {
        self.pcp_high_fraction = fraction;
        self
    }
    /// Whether to keep per-CPU lists at all (default true). Without them
    /// every allocation and free goes straight to the buddy under the zone
    /// lock, which is what the `bench buddy` suite measures.
    pub fn per_cpu_lists(mut self, enabled: bool) -> Self {
        self.pcp_enabled = enabled;
        self
    }
    /// Whether `alloc_pages`, `free_pages` and `put_page` of order-0 pages
    /// go through a per-CPU cache edited in restartable sequences, with no
    /// lock (default true; x86-64 Linux with `std`, where the C library
    /// registers rseq and the kernel has the membarrier rseq fence;
    /// elsewhere, with a [custom CPU-id source](Self::cpu_id_fn) or without
    /// per-CPU lists, the calls use the locked per-CPU lists as before).
    /// `false` gives exactly Linux's per-CPU lists, for tests and
    /// comparisons. See `docs/fast-paths.md`.
    ///
    /// ```
    /// use mmkit::{Cpus, Gfp, MemoryMapBuilder, Report};
    /// let mm = MemoryMapBuilder::with_memory(64 << 20).build().unwrap();
    /// let pfn = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
    /// mm.free_pages(pfn, 0).unwrap(); // onto this CPU's cache, no lock
    /// assert_eq!(Cpus::new(&mm).drain_all_pages(), 0); // every CPU's cache, too
    /// assert_eq!(Report::new(&mm).nr_pcp_pages(), 0);
    /// Report::new(&mm).check_invariants().unwrap();
    /// ```
    pub fn cpu_caches(mut self, enabled: bool) -> Self {
        self.cpu_caches = enabled;
        self
    }
    /// Whether free memory is grouped by mobility (default true). `false`
    /// is Linux's `page_group_by_mobility_disabled` (which Linux sets when
    /// memory is too small for grouping to pay): every request is treated
    /// as unmovable, whatever its GFP mobility bits, and a fallback always
    /// claims the whole pageblock it takes from, so pageblocks drift to one
    /// type and anti-fragmentation is off. Useful to measure what grouping
    /// is worth on the same workload.
    pub fn group_by_mobility(mut self, enabled: bool) -> Self {
        self.group_by_mobility = enabled;
        self
    }
    /// Which free block serves a request among those of the right order
    /// and type (default [`PlacementPolicy::default`]); see
    /// [`PlacementPolicy`] for the choices and `PlacementPolicy::Linux` for
    /// Linux's own.
    pub fn placement(mut self, policy: PlacementPolicy) -> Self {
        self.placement = policy;
        self
    }
    /// Whether [`build`](Self::build) writes every page descriptor once
    /// (default false). The descriptor table comes from zeroed memory the OS
    /// maps lazily, so that huge maps build in seconds; the first write to
    /// each of its pages then takes a page fault during allocation. With
    /// `true` the faults are taken at build time instead (as Linux
    /// initialises every `struct page` at boot), which is what timing
    /// measurements of allocation paths want.
    pub fn populate_descriptors(mut self, populate: bool) -> Self {
        self.populate = populate;
        self
    }
    /// Puts the descriptor table, the one allocation that grows with the
    /// map (16 bytes a page), in `memory` instead of on the heap, as Linux
    /// places `mem_map` in memory taken from memblock before it has a
    /// heap. [`descriptor_table_bytes`](Self::descriptor_table_bytes) says
    /// how much it needs; [`build`](Self::build) zeroes what it uses and
    /// refuses memory that is too small with
    /// [`BuildError::DescriptorMemoryTooSmall`]. The memory is the map's
    /// for good, even if `build` fails; everything else still comes from
    /// the global allocator (a few KiB plus a byte per pageblock).
    ///
    /// ```
    /// use core::mem::MaybeUninit;
    /// use mmkit::{Gfp, MemoryMapBuilder};
    ///
    /// let builder = MemoryMapBuilder::with_memory(1 << 30);
    /// let bytes = builder.descriptor_table_bytes().unwrap();
    /// // In a kernel: memory the boot allocator set aside. Here, leaked.
    /// let memory: &'static mut [MaybeUninit<u8>] = Vec::leak(vec![MaybeUninit::uninit(); bytes]);
    /// let mm = builder.descriptor_memory(memory).build().unwrap();
    /// let pfn = mm.alloc_pages(Gfp::KERNEL, 9).unwrap();
    /// mm.free_pages(pfn, 9).unwrap();
    /// ```
    pub fn descriptor_memory(mut self, memory: &'static mut [core::mem::MaybeUninit<u8>]) -> Self {
        self.descriptor_memory = Some(memory);
        self
    }
    /// Bytes of memory the descriptor table needs for the zones given so
    /// far (alignment slack included), for
    /// [`descriptor_memory`](Self::descriptor_memory): 16 bytes a page
    /// from the lowest zone's start, rounded down to a section, to the
    /// highest zone's end.
    ///
    /// # Errors
    /// [`BuildError::NoZones`] before any zone is given,
    /// [`BuildError::BadGeometry`] and [`BuildError::TooLarge`] as
    /// [`build`](Self::build) reports them.
    pub fn descriptor_table_bytes(&self) -> Result<usize, BuildError> {
        if !self.geometry.is_valid() {
            return Err(BuildError::BadGeometry(self.geometry));
        }
        let (base_pfn, highest) = span(&self.zones, &self.geometry).ok_or(BuildError::NoZones)?;
        let nr_pages = highest - base_pfn;
        if nr_pages >= u32::MAX as u64 {
            return Err(BuildError::TooLarge { pages: nr_pages });
        }
        Ok(PageTable::lent_bytes(nr_pages as usize))
    }
    /// Installs reclaim hooks and event sinks.
    pub fn hooks(mut self, hooks: impl Hooks + 'static) -> Self {
        self.hooks = Box::new(hooks);
        self
    }
    /// Declares a CMA area called `name` over `pfns` (Linux's
    /// `cma_declare_contiguous` + `cma_init_reserved_areas`): its pageblocks
    /// get type CMA before the free pages reach the buddy lists, so movable
    /// allocations may borrow them until
    /// [`cma_alloc`](crate::Contig::cma_alloc) wants them back. The span
    /// must be pageblock-aligned, inside one zone, free of holes and
    /// reserved pages, and disjoint from other areas (checked by
    /// [`build`](Self::build)). Areas get [`CmaId`](crate::CmaId)s in
    /// declaration order.
    pub fn cma(mut self, name: impl Into<String>, pfns: Range<u64>) -> Self {
        self.cma.push((name.into(), pfns));
        self
    }
    /// Installs the page mover contiguous allocations use for in-use
    /// movable pages (see [`Migrator`]). Without one, any in-use page in a
    /// requested range makes the request busy.
    pub fn migrator(mut self, migrator: impl Migrator + 'static) -> Self {
        self.migrator = Some(Box::new(migrator));
        self
    }

    /// Validates the map, builds descriptors and zones, and frees every
    /// present, unreserved page to the buddy lists.
    ///
    /// # Errors
    /// [`BuildError`] for bad geometry, overlapping, empty or misordered
    /// zones, a map too large for 32-bit page indices, a knob out of range
    /// (each names its knob: [`BuildError::BadTunable`],
    /// [`BuildError::BadNrCpus`], [`BuildError::UnknownCpu`],
    /// [`BuildError::BadRange`], [`BuildError::BadCmaArea`]), metadata that
    /// cannot be allocated, or a failed real-memory mapping (huge pages not
    /// reserved included).
    pub fn build(mut self) -> Result<PageAllocator, BuildError> {
        let geo = self.geometry;
        if !geo.is_valid() {
            return Err(BuildError::BadGeometry(geo));
        }
        validate::knobs(&self)?;
        let mut specs = self.zones;
        if specs.is_empty() {
            return Err(BuildError::NoZones);
        }
        specs.sort_by_key(|z| (z.nid, z.zone_type.index(), z.pfns.start));
        for (i, z) in specs.iter().enumerate() {
            if z.pfns.start >= z.pfns.end {
                return Err(BuildError::EmptyZone(z.clone()));
            }
            if z.nid >= crate::MAX_NUMNODES {
                return Err(BuildError::TooManyNodes(z.nid));
            }
            for other in &specs[i + 1..] {
                if other.nid == z.nid && other.zone_type == z.zone_type {
                    return Err(BuildError::DuplicateZone(z.clone()));
                }
                if other.pfns.start < z.pfns.end && z.pfns.start < other.pfns.end {
                    return Err(BuildError::OverlappingZones(z.clone(), other.clone()));
                }
            }
        }
        validate::zone_order(&specs)?;
        let max_nid = specs.iter().map(|z| z.nid).max().unwrap_or(0);
        if let Some(&(cpu, nid)) = self.cpu_nodes.iter().find(|&&(_, nid)| nid > max_nid) {
            return Err(BuildError::CpuOnUnknownNode { cpu, nid });
        }
        let lowest = specs.iter().map(|z| z.pfns.start).min().unwrap_or(0);
        let (base_pfn, highest) = span(&specs, &geo).ok_or(BuildError::NoZones)?;
        validate::ranges(&self.holes, &self.reserved, lowest, highest)?;
        let nr_pages = highest - base_pfn;
        if nr_pages >= u32::MAX as u64 {
            return Err(BuildError::TooLarge { pages: nr_pages });
        }
        let idx = |pfn: u64| (pfn.clamp(base_pfn, highest) - base_pfn) as u32;

        // Holes first, then reserved ranges (a reserved range inside a hole
        // stays a hole). PFNs outside every zone are holes too.
        let mut holes = self.holes;
        let mut covered: Vec<Range<u64>> = specs.iter().map(|z| z.pfns.clone()).collect();
        covered.sort_by_key(|r| r.start);
        let mut cursor = base_pfn;
        for r in &covered {
            if cursor < r.start {
                holes.push(cursor..r.start);
            }
            cursor = cursor.max(r.end);
        }
        let holes = normalize(holes, base_pfn, highest);
        let reserved = subtract(&normalize(self.reserved, base_pfn, highest), &holes);

        let mut zones = Vec::with_capacity(specs.len());
        let mut free_runs = Vec::with_capacity(specs.len());
        for z in &specs {
            let span = z.pfns.clone();
            let hole_pages = overlap_pages(&holes, &span);
            let reserved_pages = overlap_pages(&reserved, &span);
            let present = (span.end - span.start) - hole_pages;
            let managed = present - reserved_pages;
            zones.push(Zone::new(
                z.nid,
                z.zone_type,
                (span.start, span.end),
                (idx(span.start), idx(span.end)),
                present,
                managed,
                geo.merge_order(),
            ));
            let unavailable: Vec<Range<u64>> = holes.iter().chain(reserved.iter()).cloned().collect();
            free_runs.push(subtract(&[span], &normalize(unavailable, base_pfn, highest)));
        }
        let lowmem_pages = zones.iter().filter(|z| z.zone_type != ZoneType::Movable).map(|z| z.managed_pages).sum();
        validate::min_free_kbytes(&self.watermarks, lowmem_pages, geo.page_size())?;
        let cma = activate_cma_areas(self.cma, &specs, &holes, &reserved, &geo)?;

        // Everything is checked: now the tables that scale with the map.
        let pages = match self.descriptor_memory.take() {
            Some(memory) => PageTable::try_in_lent_memory(memory, nr_pages as usize)?,
            None => PageTable::try_new_zeroed(nr_pages as usize)?,
        };
        if self.populate {
            for i in 0..nr_pages as u32 {
                pages.get(i).set_refcount(0);
            }
        }
        let blocks = PageblockMap::try_new(nr_pages as usize, geo.pageblock_order, MigrateType::Movable)?;
        for r in &holes {
            for i in idx(r.start)..idx(r.end) {
                pages.get(i).set_state(PageFlags::HOLE | PageFlags::RESERVED, 0, 0);
            }
        }
        for r in &reserved {
            for i in idx(r.start)..idx(r.end) {
                pages.get(i).set_state(PageFlags::RESERVED, 0, 0);
                pages.get(i).set_refcount(1);
            }
        }

        for zone in zones.iter_mut() {
            zone.mobility_disabled = !self.group_by_mobility;
            zone.placement = self.placement;
        }
        let min_free_kbytes = setup_watermarks(&mut zones, geo.page_size(), geo.pageblock_nr_pages(), &self.watermarks);
        for area in &cma {
            let mut pfn = area.pfns().start;
            while pfn < area.pfns().end {
                blocks.set(idx(pfn), MigrateType::Cma);
                pfn += geo.pageblock_nr_pages();
            }
        }

        let memory = match self.backing {
            Backing::MetadataOnly => None,
            Backing::RealMemory(huge) => {
                // The mapping is made without a reservation (pages come as
                // they are touched), so a map the machine cannot hold would
                // build and then be killed at its first large zeroing:
                // refused here instead, as `mmkit zram serve` refuses a size.
                let bytes = nr_pages.saturating_mul(geo.page_size());
                if let Some(machine) = machine_memory().filter(|&machine| bytes > machine) {
                    return Err(BuildError::RealMemoryTooLarge { bytes, machine });
                }
                Some(crate::sys::RealMemory::map(nr_pages as usize, geo.page_size() as usize, huge).map_err(|e| {
                    if huge == crate::sys::HugePages::Explicit {
                        BuildError::HugePagesUnavailable { bytes: e.bytes, errno: e.errno }
                    } else {
                        BuildError::RealMemory(e)
                    }
                })?)
            }
        };

        let mem = MemMap { geometry: geo, base_pfn, pages, blocks, memory };
        for (zone, runs) in zones.iter().zip(&free_runs) {
            let cx = zone.cx(&mem);
            let mut state = zone.state.lock();
            state.area.set_policy(self.placement, zone.start_idx, zone.end_idx, geo.pageblock_order);
            for run in runs {
                for (start, end) in split_at_sections(run.clone(), geo.section_order) {
                    state.area.free_range(cx, idx(start), idx(end) - idx(start), Placement::Tail);
                }
            }
            // A fresh anonymous mapping has no frames yet: its free blocks
            // start out reported, so the first reporting pass skips them.
            if mem.memory.is_some() {
                state.area.mark_all_reported(cx, geo.pageblock_order);
            }
            zone.publish(&state);
        }

        let mut cpu_nodes = Vec::new();
        cpu_nodes.try_reserve_exact(self.nr_cpus).map_err(|_| BuildError::NoMetadataMemory { bytes: self.nr_cpus })?;
        cpu_nodes.resize(self.nr_cpus, 0);
        for &(cpu, nid) in &self.cpu_nodes {
            cpu_nodes[cpu] = nid;
        }
        PageAllocator::from_parts(crate::page_alloc::Parts {
            mem,
            zones,
            hooks: self.hooks,
            min_free_kbytes,
            nr_cpus: self.nr_cpus,
            cpu_id: self.cpu_id,
            cpu_nodes,
            pcp_high_fraction: self.pcp_high_fraction,
            pcp_enabled: self.pcp_enabled,
            cpu_caches: self.cpu_caches && !self.cpu_id_given,
            mobility_disabled: !self.group_by_mobility,
            migrator: self.migrator,
            cma,
        })
    }
}

/// The machine's memory in bytes (`MemTotal` of `/proc/meminfo`), if the
/// OS layer can tell (`None` on targets without it): the most a
/// [`Backing::RealMemory`] map may span.
pub fn machine_memory() -> Option<u64> {
    crate::sys::machine_memory()
}

/// The descriptor table's first PFN and the map's end: the lowest zone
/// start aligned down so that index alignment equals PFN alignment for
/// every order that matters (blocks, pageblocks, sections), and the
/// highest zone end. `None` without zones.
fn span(zones: &[ZoneSpec], geo: &Geometry) -> Option<(u64, u64)> {
    let lowest = zones.iter().map(|z| z.pfns.start).min()?;
    let highest = zones.iter().map(|z| z.pfns.end).max()?;
    let align_order = geo.section_order.max(geo.max_page_order).max(geo.pageblock_order);
    Some((lowest & !((1u64 << align_order) - 1), highest))
}

fn default_nr_cpus() -> usize {
    // Counted once per process: the count reads cgroup files, several
    // system calls a builder would otherwise pay every time.
    #[cfg(feature = "std")]
    {
        static NR_CPUS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        *NR_CPUS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
    }
    #[cfg(not(feature = "std"))]
    {
        1
    }
}

/// Checks the declared CMA areas (Linux's `cma_activate_area` checks) and
/// creates them.
fn activate_cma_areas(
    declared: Vec<(String, Range<u64>)>,
    zones: &[ZoneSpec],
    holes: &[Range<u64>],
    reserved: &[Range<u64>],
    geo: &Geometry,
) -> Result<Vec<CmaArea>, BuildError> {
    let pb = geo.pageblock_nr_pages();
    let mut areas: Vec<CmaArea> = Vec::with_capacity(declared.len());
    for (name, pfns) in declared {
        let reason = if pfns.start >= pfns.end {
            Some(BadCmaReason::Empty)
        } else if pfns.start % pb != 0 || pfns.end % pb != 0 {
            Some(BadCmaReason::Unaligned)
        } else if !zones.iter().any(|z| z.pfns.start <= pfns.start && pfns.end <= z.pfns.end) {
            Some(BadCmaReason::NotInOneZone)
        } else if overlap_pages(holes, &pfns) + overlap_pages(reserved, &pfns) > 0 {
            Some(BadCmaReason::Unavailable)
        } else if areas.iter().any(|a| a.pfns().start < pfns.end && pfns.start < a.pfns().end) {
            Some(BadCmaReason::Overlaps)
        } else if areas.iter().any(|a| a.name == name) {
            Some(BadCmaReason::DuplicateName)
        } else {
            None
        };
        if let Some(reason) = reason {
            return Err(BuildError::BadCmaArea { name, pfns, reason });
        }
        areas.push(CmaArea::new(name, pfns));
    }
    Ok(areas)
}

/// Pages of `span` covered by the sorted, disjoint `ranges`.
fn overlap_pages(ranges: &[Range<u64>], span: &Range<u64>) -> u64 {
    ranges.iter().map(|r| r.end.min(span.end).saturating_sub(r.start.max(span.start))).sum()
}

/// Clips ranges to `[lo, hi)`, sorts and merges them.
fn normalize(mut ranges: Vec<Range<u64>>, lo: u64, hi: u64) -> Vec<Range<u64>> {
    for r in ranges.iter_mut() {
        r.start = r.start.clamp(lo, hi);
        r.end = r.end.clamp(lo, hi);
    }
    ranges.retain(|r| r.start < r.end);
    ranges.sort_by_key(|r| r.start);
    let mut out: Vec<Range<u64>> = Vec::with_capacity(ranges.len());
    for r in ranges {
        match out.last_mut() {
            Some(last) if r.start <= last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

/// `from` minus the sorted, disjoint `remove`.
fn subtract(from: &[Range<u64>], remove: &[Range<u64>]) -> Vec<Range<u64>> {
    let mut out = Vec::new();
    for r in from {
        let mut start = r.start;
        for cut in remove {
            if cut.end <= start || cut.start >= r.end {
                continue;
            }
            if cut.start > start {
                out.push(start..cut.start);
            }
            start = start.max(cut.end);
        }
        if start < r.end {
            out.push(start..r.end);
        }
    }
    out
}

/// Splits a PFN range at section boundaries.
pub(crate) fn split_at_sections(range: Range<u64>, section_order: u32) -> impl Iterator<Item = (u64, u64)> {
    let section = 1u64 << section_order;
    let mut start = range.start;
    core::iter::from_fn(move || {
        if start >= range.end {
            return None;
        }
        let end = ((start / section) + 1).saturating_mul(section).min(range.end);
        let piece = (start, end);
        start = end;
        Some(piece)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Report;

    #[test]
    fn range_helpers() {
        assert_eq!(normalize(vec![5..9, 1..3, 2..6], 0, 8), vec![1..8]);
        let whole = core::slice::from_ref(&(0..10));
        assert_eq!(subtract(whole, &[2..3, 5..7]), vec![0..2, 3..5, 7..10]);
        assert_eq!(overlap_pages(&[2..3, 5..7], &(0..6)), 2);
        let pieces: Vec<_> = split_at_sections(3..20, 3).collect();
        assert_eq!(pieces, vec![(3, 8), (8, 16), (16, 20)]);
    }

    #[test]
    fn pc_layout_has_three_zones() {
        let b = MemoryMapBuilder::with_memory(8 << 30);
        let types: Vec<_> = b.zones.iter().map(|z| z.zone_type).collect();
        assert_eq!(types, vec![ZoneType::Dma, ZoneType::Dma32, ZoneType::Normal]);
        assert_eq!(b.zones[0].pfns, 1..4096);
        assert_eq!(b.zones[2].pfns, (1 << 20)..(2 << 20));
    }

    #[test]
    fn populated_descriptors_change_nothing_visible() {
        let lazy = MemoryMapBuilder::with_memory(64 << 20).build().unwrap();
        let populated = MemoryMapBuilder::with_memory(64 << 20).populate_descriptors(true).build().unwrap();
        assert_eq!(Report::new(&lazy).buddyinfo(), Report::new(&populated).buddyinfo());
        assert_eq!(Report::new(&lazy).pagetypeinfo(), Report::new(&populated).pagetypeinfo());
        Report::new(&populated).check_invariants().unwrap();
        let pfn = populated.alloc_pages(crate::Gfp::KERNEL, 3).unwrap();
        populated.free_pages(pfn, 3).unwrap();
    }

    #[test]
    fn rejects_bad_maps() {
        assert!(matches!(MemoryMapBuilder::new().build(), Err(BuildError::NoZones)));
        let overlap =
            MemoryMapBuilder::new().zone(0, ZoneType::Dma32, 0..100).zone(0, ZoneType::Normal, 50..200).build();
        assert!(matches!(overlap, Err(BuildError::OverlappingZones(..))));
        let geo = MemoryMapBuilder::new().pageblock_order(11).zone(0, ZoneType::Normal, 0..4096).build();
        assert!(matches!(geo, Err(BuildError::BadGeometry(_))));
        let empty = MemoryMapBuilder::new().zone(0, ZoneType::Normal, 5..5).build();
        assert!(matches!(empty, Err(BuildError::EmptyZone(_))));
    }
}
