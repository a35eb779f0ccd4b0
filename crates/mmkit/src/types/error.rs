//! Typed errors of the public API. Every caller mistake maps to one of these;
//! none of them leaves the allocator changed.
#![deny(unsafe_code)]

use crate::types::geometry::{Geometry, ZoneSpec};
use crate::types::gfp::Gfp;
use crate::Pfn;
use core::fmt;

pub use crate::types::config_error::{BadRangeReason, IndexError, RangeKind, Tunable};

/// Why an allocation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllocError {
    /// No zone the request may use had a block of this order above its
    /// watermark, and reclaim (if allowed) did not help.
    NoMemory {
        /// Requested order.
        order: u32,
        /// Request flags.
        gfp: Gfp,
    },
    /// `order` is above `MAX_PAGE_ORDER` (or above the section size).
    OrderTooLarge {
        /// Requested order.
        order: u32,
        /// Largest order this map can hand out.
        max: u32,
    },
    /// The GFP zone bits are contradictory (for example DMA together with DMA32).
    InvalidGfp(Gfp),
    /// The node does not exist in the map.
    NoSuchNode(usize),
    /// The [`OwnerKey`](crate::OwnerKey) passed was issued by another map.
    ForeignOwnerKey,
    /// [`alloc_pages_guarded`](crate::PageAllocator::alloc_pages_guarded):
    /// the map's guards need an owner tag and every tag is held by an
    /// [`OwnerKey`](crate::OwnerKey).
    OwnerTagsExhausted,
    /// [`alloc_pages_at`](crate::PageAllocator::alloc_pages_at): the block
    /// is not naturally aligned to its order, lies (partly) outside the map,
    /// or is not inside one zone.
    BadBlock {
        /// Requested first PFN.
        pfn: Pfn,
        /// Requested order.
        order: u32,
    },
    /// [`alloc_pages_at`](crate::PageAllocator::alloc_pages_at): this page
    /// of the block is not free (allocated, reserved, a hole, isolated, or
    /// cached on a pinned CPU's list).
    NotFree(Pfn),
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoMemory { order, gfp } => write!(f, "out of memory: order {order}, gfp {gfp}"),
            Self::ForeignOwnerKey => f.write_str("the owner key belongs to another map"),
            Self::OwnerTagsExhausted => f.write_str("every owner tag of the map is held; none is left for guards"),
            Self::OrderTooLarge { order, max } => {
                write!(f, "order {order} above the largest order {max}")
            }
            Self::InvalidGfp(gfp) => write!(f, "invalid zone bits in gfp {gfp}"),
            Self::NoSuchNode(nid) => write!(f, "no node {nid}"),
            Self::BadBlock { pfn, order } => {
                write!(f, "no aligned order-{order} block at pfn {pfn} inside one zone")
            }
            Self::NotFree(pfn) => write!(f, "page {pfn} is not free"),
        }
    }
}

/// What is wrong with a page that a free path found wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadPageReason {
    /// The refcount was not zero when the page was released.
    NonzeroRefcount(u32),
    /// A "check at free" flag (LRU, locked, mapped, …) was still set.
    FlagsSetAtFree(crate::PageFlags),
    /// A tail of a compound page did not point at its head.
    CorruptCompoundTail {
        /// The inconsistent tail.
        tail: Pfn,
    },
    /// The layer that owns the block found its contents wrong (for example
    /// a page given back to a quicklist that is not in the list's state);
    /// see [`Blocks::report_bad_block`](crate::Blocks::report_bad_block).
    OwnerState {
        /// The owning layer.
        owner: crate::PageOwner,
        /// Offset of the first wrong byte.
        offset: usize,
    },
}

impl fmt::Display for BadPageReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NonzeroRefcount(c) => write!(f, "nonzero _refcount ({c})"),
            Self::FlagsSetAtFree(flags) => {
                write!(f, "PAGE_FLAGS_CHECK_AT_FREE flag(s) set: {flags:?}")
            }
            Self::CorruptCompoundTail { tail } => {
                write!(f, "corrupted compound tail at pfn {tail}")
            }
            Self::OwnerState { owner, offset } => {
                write!(f, "owner {} found the block's contents wrong (byte {offset})", owner.id())
            }
        }
    }
}

/// Why a page or block could not be freed. Apart from `BadPage` (the page was
/// reported and deliberately leaked, like Linux does), nothing was changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FreeError {
    /// The PFN is outside the map.
    OutOfRange(Pfn),
    /// The PFN is in a hole.
    Hole(Pfn),
    /// The PFN is a reserved page, never given out.
    Reserved(Pfn),
    /// The PFN is a tail of a compound page; free it through its head.
    TailPage {
        /// The tail that was passed.
        pfn: Pfn,
        /// Its head.
        head: Pfn,
    },
    /// The page is already free.
    DoubleFree(Pfn),
    /// The PFN does not start an allocated block (inside one, or long free).
    NotAllocated(Pfn),
    /// The order does not match the allocation's.
    WrongOrder {
        /// Block start.
        pfn: Pfn,
        /// Order it was allocated with.
        allocated: u32,
        /// Order passed to the free.
        given: u32,
    },
    /// The page was taken offline by `memory_failure` while free.
    Poisoned(Pfn),
    /// A frozen free of a page that still has references, or a reference
    /// drop on a frozen page.
    RefcountMismatch {
        /// Block start.
        pfn: Pfn,
        /// Its refcount.
        refcount: u32,
    },
    /// The block belongs to a layer above the allocator (see
    /// [`PageOwner`](crate::PageOwner)); give it back through that layer.
    Owned {
        /// Block start.
        pfn: Pfn,
        /// Its owner.
        owner: crate::PageOwner,
    },
    /// The [`OwnerKey`](crate::OwnerKey) passed was issued by another map;
    /// the page is left as it was.
    ForeignOwnerKey(Pfn),
    /// The page was handed out by a pinned CPU's magazine and is still
    /// that CPU's ([`PageFlags::LOCAL`](crate::PageFlags::LOCAL)): free it
    /// through that CPU's [`PinnedCpu`](crate::PinnedCpu), or have the
    /// handle [`hand_over`](crate::PinnedCpu::hand_over) it first.
    CpuLocal {
        /// The page.
        pfn: Pfn,
        /// The CPU it belongs to.
        cpu: usize,
    },
    /// Taking back a block that still has embedder flags (LRU, mapped, …).
    FlagsSet {
        /// Block start.
        pfn: Pfn,
        /// The flags left set.
        flags: crate::PageFlags,
    },
    /// `free_pages_prepare` failed: reported as a bad page and leaked.
    BadPage {
        /// The bad page.
        pfn: Pfn,
        /// What was wrong.
        reason: BadPageReason,
    },
}

impl fmt::Display for FreeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OutOfRange(p) => write!(f, "pfn {p} is outside the memory map"),
            Self::Hole(p) => write!(f, "pfn {p} is in a hole"),
            Self::ForeignOwnerKey(p) => write!(f, "pfn {p}: the owner key belongs to another map"),
            Self::Owned { pfn, owner } => {
                write!(f, "pfn {pfn} is owned by layer {}; give it back through that layer", owner.id())
            }
            Self::CpuLocal { pfn, cpu } => {
                write!(f, "pfn {pfn} belongs to pinned cpu {cpu}; free it there or hand it over first")
            }
            Self::FlagsSet { pfn, flags } => write!(f, "pfn {pfn} still has flags {flags:?}"),
            Self::Reserved(p) => write!(f, "pfn {p} is reserved"),
            Self::TailPage { pfn, head } => {
                write!(f, "pfn {pfn} is a tail page of compound page {head}")
            }
            Self::DoubleFree(p) => write!(f, "double free of pfn {p}"),
            Self::NotAllocated(p) => write!(f, "pfn {p} does not start an allocated block"),
            Self::WrongOrder { pfn, allocated, given } => {
                write!(f, "pfn {pfn} was allocated with order {allocated}, freed with order {given}")
            }
            Self::Poisoned(p) => write!(f, "pfn {p} is hardware-poisoned"),
            Self::RefcountMismatch { pfn, refcount } => {
                write!(f, "pfn {pfn} has refcount {refcount}")
            }
            Self::BadPage { pfn, reason } => write!(f, "bad page at pfn {pfn}: {reason}"),
        }
    }
}

/// Why the memory map could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BuildError {
    /// Page size, orders or section size out of range or inconsistent.
    BadGeometry(Geometry),
    /// No zones were given.
    NoZones,
    /// A zone spans no pages.
    EmptyZone(ZoneSpec),
    /// Two zones overlap.
    OverlappingZones(ZoneSpec, ZoneSpec),
    /// The same zone type twice on one node.
    DuplicateZone(ZoneSpec),
    /// Node id at or above `MAX_NUMNODES`.
    TooManyNodes(usize),
    /// A CPU was put on a node above every node of the map.
    CpuOnUnknownNode {
        /// The CPU.
        cpu: usize,
        /// Its node.
        nid: usize,
    },
    /// The map needs more than 2^32 - 1 page descriptors.
    TooLarge {
        /// Pages the map would span.
        pages: u64,
    },
    /// Mapping real memory failed (or the target has no mapping to offer).
    RealMemory(RealMemoryError),
    /// [`HugePages::Explicit`](crate::HugePages::Explicit) backing, and the
    /// kernel could not reserve enough hugetlb pages for the whole map
    /// (`/proc/sys/vm/nr_hugepages` too low): refused here rather than a
    /// `SIGBUS` at the first touch.
    HugePagesUnavailable {
        /// Bytes the map needs.
        bytes: usize,
        /// `errno` from `mmap` (`ENOMEM` when the pool is short).
        errno: i32,
    },
    /// A tunable outside the range Linux's sysctl accepts, or one this map
    /// cannot honour (a `min_free_kbytes` at or above its memory).
    BadTunable {
        /// Which knob.
        tunable: Tunable,
        /// The value given.
        value: u64,
    },
    /// `nr_cpus` of 0, or above [`MAX_NR_CPUS`](crate::MAX_NR_CPUS).
    BadNrCpus {
        /// The count given.
        nr_cpus: usize,
        /// The largest count accepted.
        max: usize,
    },
    /// [`cpu_node`](crate::MemoryMapBuilder::cpu_node) for a CPU at or
    /// above `nr_cpus`.
    UnknownCpu {
        /// The CPU given.
        cpu: usize,
        /// CPUs the map has.
        nr_cpus: usize,
    },
    /// A hole or reserved range that is reversed or reaches outside the
    /// zones' span.
    BadRange {
        /// Hole or reserved.
        kind: RangeKind,
        /// The range given.
        pfns: core::ops::Range<u64>,
        /// What is wrong with it.
        reason: BadRangeReason,
    },
    /// Zones out of physical order: DMA, DMA32 and NORMAL ascend across
    /// the whole map (their limits are physical addresses), and a node's
    /// MOVABLE zone lies above its other zones.
    ZoneOrder {
        /// The zone of the lower type, found above `upper`.
        lower: ZoneSpec,
        /// The zone of the higher type.
        upper: ZoneSpec,
    },
    /// The allocator's own metadata (descriptor table, pageblock map,
    /// per-CPU pagesets) could not be allocated.
    NoMetadataMemory {
        /// Bytes asked for.
        bytes: usize,
    },
    /// Every map id has been handed out: the process built 2^48 - 1 maps.
    /// Ids are never reused, so that a handle of a dropped map cannot pass
    /// a later map's check.
    MapIdsExhausted,
    /// A [`Backing::RealMemory`](crate::Backing) map larger than the
    /// machine's memory: its pages would fail only when touched.
    RealMemoryTooLarge {
        /// Bytes the map's pages span.
        bytes: u64,
        /// The machine's memory (`MemTotal`).
        machine: u64,
    },
    /// The memory given to
    /// [`MemoryMapBuilder::descriptor_memory`](crate::MemoryMapBuilder::descriptor_memory)
    /// cannot hold the descriptor table
    /// ([`MemoryMapBuilder::descriptor_table_bytes`](crate::MemoryMapBuilder::descriptor_table_bytes)).
    DescriptorMemoryTooSmall {
        /// Bytes the table needs, alignment slack included.
        needed: usize,
        /// Bytes given.
        given: usize,
    },
    /// A CMA area given to [`MemoryMapBuilder::cma`](crate::MemoryMapBuilder::cma)
    /// cannot be activated.
    BadCmaArea {
        /// The area's name.
        name: alloc::string::String,
        /// Its PFN span.
        pfns: core::ops::Range<u64>,
        /// What is wrong with it.
        reason: BadCmaReason,
    },
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadGeometry(g) => write!(f, "bad geometry {g:?}"),
            Self::NoZones => f.write_str("the memory map has no zones"),
            Self::EmptyZone(z) => write!(f, "zone {z:?} is empty"),
            Self::OverlappingZones(a, b) => write!(f, "zones {a:?} and {b:?} overlap"),
            Self::DuplicateZone(z) => write!(f, "zone {z:?} given twice"),
            Self::TooManyNodes(n) => write!(f, "node {n} is above the node limit"),
            Self::CpuOnUnknownNode { cpu, nid } => write!(f, "cpu {cpu} is on node {nid}, which the map does not have"),
            Self::TooLarge { pages } => write!(f, "{pages} pages exceed 2^32 - 1 descriptors"),
            Self::RealMemory(e) => write!(f, "{e}"),
            Self::BadCmaArea { name, pfns, reason } => {
                write!(f, "CMA area {name} ({pfns:?}): {reason}")
            }
            Self::HugePagesUnavailable { bytes, errno } => {
                write!(f, "cannot reserve hugetlb pages for {bytes} bytes (errno {errno}); raise vm.nr_hugepages")
            }
            Self::BadTunable { tunable, value } => {
                write!(f, "{} = {value} is outside {}", tunable.name(), tunable.allowed())
            }
            Self::BadNrCpus { nr_cpus, max } => write!(f, "nr_cpus = {nr_cpus} is outside 1..={max}"),
            Self::UnknownCpu { cpu, nr_cpus } => write!(f, "cpu_node for cpu {cpu}, but the map has {nr_cpus} CPUs"),
            Self::BadRange { kind, pfns, reason } => write!(f, "{} {pfns:?}: {reason}", kind.name()),
            Self::ZoneOrder { lower, upper } => write!(f, "zone {lower:?} lies above zone {upper:?}"),
            Self::NoMetadataMemory { bytes } => write!(f, "cannot allocate {bytes} bytes of allocator metadata"),
            Self::MapIdsExhausted => f.write_str("every map id has been handed out"),
            Self::RealMemoryTooLarge { bytes, machine } => {
                write!(f, "real memory of {bytes} bytes is more than the machine's {machine}")
            }
            Self::DescriptorMemoryTooSmall { needed, given } => {
                write!(f, "the descriptor table needs {needed} bytes; the memory given has {given}")
            }
        }
    }
}

/// A page-level query or operation on a PFN that cannot be one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PageError {
    /// Outside the map.
    OutOfRange(Pfn),
    /// In a hole.
    Hole(Pfn),
    /// The page is free (or reserved), so it has no references to take.
    NotInUse(Pfn),
    /// Only embedder-owned flags may be changed.
    FlagNotSettable(crate::PageFlags),
    /// The page belongs to a pinned CPU ([`FreeError::CpuLocal`]); no
    /// reference can be taken until its handle hands it over.
    CpuLocal(Pfn),
    /// The page is part of a block a handle owns (a layer's
    /// [`PageBlock`](crate::PageBlock), a [`PageGuard`](crate::PageGuard),
    /// a frame adapter's frame, a contiguous range): no bare-PFN call
    /// changes it ([`FreeError::Owned`] for the frees).
    Owned {
        /// The page asked about (its block's head for a compound page).
        pfn: Pfn,
        /// Its owner.
        owner: crate::PageOwner,
    },
    /// The page's reference count is at its maximum: one more would wrap.
    RefcountSaturated(Pfn),
}

impl fmt::Display for PageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OutOfRange(p) => write!(f, "pfn {p} is outside the memory map"),
            Self::Hole(p) => write!(f, "pfn {p} is in a hole"),
            Self::NotInUse(p) => write!(f, "pfn {p} is not in use"),
            Self::FlagNotSettable(flags) => write!(f, "flags {flags:?} are owned by the allocator"),
            Self::CpuLocal(p) => write!(f, "pfn {p} belongs to a pinned cpu; it must hand the page over first"),
            Self::Owned { pfn, owner } => {
                write!(f, "pfn {pfn} is owned by layer {}; only that layer's handle changes it", owner.id())
            }
            Self::RefcountSaturated(p) => write!(f, "pfn {p} has the most references a page can hold"),
        }
    }
}

/// Why a CMA area cannot be activated at build time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BadCmaReason {
    /// The area spans no pages.
    Empty,
    /// Start or end is not on a pageblock boundary.
    Unaligned,
    /// The area is not inside a single zone.
    NotInOneZone,
    /// The area contains holes or reserved pages.
    Unavailable,
    /// The area overlaps another CMA area.
    Overlaps,
    /// Another area has the same name (areas are looked up by name).
    DuplicateName,
}

impl fmt::Display for BadCmaReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Empty => "empty",
            Self::Unaligned => "not aligned to pageblocks",
            Self::NotInOneZone => "not inside one zone",
            Self::Unavailable => "contains holes or reserved pages",
            Self::Overlaps => "overlaps another CMA area",
            Self::DuplicateName => "another CMA area has this name",
        })
    }
}

/// Why a contiguous range could not be allocated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ContigError {
    /// The [`OwnerKey`](crate::OwnerKey) passed was issued by another map.
    ForeignOwnerKey,
    /// The range is empty or reversed.
    InvalidRange {
        /// First PFN.
        start: Pfn,
        /// One past the last PFN.
        end: Pfn,
    },
    /// Part of the range is outside the memory map.
    OutOfRange(Pfn),
    /// The range, rounded out to pageblocks, is not inside one zone.
    NotInOneZone {
        /// First PFN.
        start: Pfn,
        /// One past the last PFN.
        end: Pfn,
    },
    /// Only `Movable` and `Cma` ranges can be collected.
    InvalidMigrateType(crate::MigrateType),
    /// The GFP mask holds flags a contiguous allocation does not support
    /// (only reclaim, I/O, FS, `COMP`, `RETRY_MAYFAIL`, `NOWARN`, `ZERO`
    /// and placement hints, which are ignored, are allowed).
    InvalidGfp(Gfp),
    /// `__GFP_COMP` needs a naturally aligned power-of-two range no larger
    /// than the largest folio.
    BadCompoundRange {
        /// First PFN.
        start: Pfn,
        /// Pages asked for.
        nr_pages: u64,
    },
    /// A page in the range is in use and could not be moved, or is reserved,
    /// poisoned or a hole (Linux's `-EBUSY`). The allocator is as it was,
    /// except that pages already migrated stay at their new place.
    Busy {
        /// The first page found that blocked the allocation.
        pfn: Pfn,
    },
    /// No suitable range was found (`alloc_contig_pages`).
    NoMemory {
        /// Pages asked for.
        nr_pages: u64,
    },
    /// The node does not exist in the map.
    NoSuchNode(usize),
}

impl fmt::Display for ContigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InvalidRange { start, end } => write!(f, "invalid PFN range {start}..{end}"),
            Self::ForeignOwnerKey => f.write_str("the owner key belongs to another map"),
            Self::OutOfRange(p) => write!(f, "pfn {p} is outside the memory map"),
            Self::NotInOneZone { start, end } => {
                write!(f, "range {start}..{end} is not inside one zone")
            }
            Self::InvalidMigrateType(mt) => {
                write!(f, "cannot allocate a contiguous range as {}", mt.name())
            }
            Self::InvalidGfp(gfp) => write!(f, "gfp {gfp} not supported for contiguous ranges"),
            Self::BadCompoundRange { start, nr_pages } => {
                write!(f, "{nr_pages} pages at {start} cannot form one compound page")
            }
            Self::Busy { pfn } => write!(f, "pfn {pfn} is busy"),
            Self::NoMemory { nr_pages } => write!(f, "no free range of {nr_pages} pages"),
            Self::NoSuchNode(nid) => write!(f, "no node {nid}"),
        }
    }
}

/// Why the embedder's [`Migrator`](crate::Migrator) could not move a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MigrateError {
    /// The block is not a movable allocation.
    NotMovable(Pfn),
    /// Someone besides the owner holds a reference.
    Pinned {
        /// Block start.
        pfn: Pfn,
        /// Its refcount.
        refcount: u32,
    },
    /// No target block could be allocated.
    NoTarget(AllocError),
    /// The embedder refused (owner unknown, page locked, …).
    Refused(Pfn),
}

impl fmt::Display for MigrateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotMovable(p) => write!(f, "pfn {p} is not movable"),
            Self::Pinned { pfn, refcount } => {
                write!(f, "pfn {pfn} is pinned (refcount {refcount})")
            }
            Self::NoTarget(e) => write!(f, "no migration target: {e}"),
            Self::Refused(p) => write!(f, "migration of pfn {p} refused"),
        }
    }
}

/// Why a CMA allocation or release failed. Nothing was changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmaError {
    /// No CMA area has this id.
    NoSuchArea(crate::CmaId),
    /// Zero pages, or more than the area holds.
    InvalidCount {
        /// Pages asked for.
        count: u64,
        /// Pages in the area.
        area_pages: u64,
    },
    /// Alignment order too large.
    InvalidAlign(u32),
    /// Every aligned candidate range was in use or busy.
    NoMemory {
        /// Pages asked for.
        count: u64,
        /// Candidates that failed as busy before giving up.
        busy_retries: u64,
    },
    /// The range is not inside the area.
    NotInArea {
        /// First PFN.
        pfn: Pfn,
        /// Pages.
        count: u64,
    },
    /// No allocation from this area starts at `pfn`.
    NotAllocated(Pfn),
    /// The count differs from the allocation's.
    CountMismatch {
        /// Allocation start.
        pfn: Pfn,
        /// Pages allocated.
        allocated: u64,
        /// Pages passed to the release.
        given: u64,
    },
    /// The contiguous allocation failed for a reason other than busy.
    Contig(ContigError),
    /// Freeing the range was refused (its pages are not in the state
    /// `cma_alloc` left them in).
    Free(FreeError),
}

impl fmt::Display for CmaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoSuchArea(id) => write!(f, "no CMA area {}", id.index()),
            Self::InvalidCount { count, area_pages } => {
                write!(f, "cannot allocate {count} pages from an area of {area_pages}")
            }
            Self::InvalidAlign(a) => write!(f, "alignment order {a} too large"),
            Self::NoMemory { count, busy_retries } => {
                write!(f, "no free range of {count} pages ({busy_retries} busy candidates)")
            }
            Self::NotInArea { pfn, count } => {
                write!(f, "{count} pages at {pfn} are not inside the area")
            }
            Self::NotAllocated(p) => write!(f, "no CMA allocation starts at pfn {p}"),
            Self::CountMismatch { pfn, allocated, given } => {
                write!(f, "CMA allocation at {pfn} has {allocated} pages, release says {given}")
            }
            Self::Contig(e) => write!(f, "{e}"),
            Self::Free(e) => write!(f, "{e}"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for ContigError {}
#[cfg(feature = "std")]
impl std::error::Error for MigrateError {}
#[cfg(feature = "std")]
impl std::error::Error for CmaError {}
#[cfg(feature = "std")]
impl std::error::Error for AllocError {}
#[cfg(feature = "std")]
impl std::error::Error for FreeError {}
#[cfg(feature = "std")]
impl std::error::Error for BuildError {}
#[cfg(feature = "std")]
impl std::error::Error for PageError {}

/// Why the real-memory region could not be mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RealMemoryError {
    /// `errno` from `mmap`; 0 where the target has no real memory to offer
    /// (no `std`, or no native OS layer).
    pub errno: i32,
    /// Bytes requested.
    pub bytes: usize,
}

impl core::fmt::Display for RealMemoryError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.errno == 0 {
            return write!(f, "real memory ({} bytes) is not available on this target", self.bytes);
        }
        write!(f, "mmap of {} bytes failed with errno {}", self.bytes, self.errno)
    }
}

/// [`Blocks::new_owner_key`](crate::Blocks::new_owner_key):
/// every owner tag of the map is held by a live key (or retired, see
/// [`release_owner_key`](crate::Blocks::release_owner_key)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnerTagsExhausted;

impl fmt::Display for OwnerTagsExhausted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "all {} owner tags of the map are in use", crate::PageOwner::MAX)
    }
}

#[cfg(feature = "std")]
impl std::error::Error for OwnerTagsExhausted {}
