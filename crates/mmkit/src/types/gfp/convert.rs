//! Zone and migrate types, ALLOC flags, and the GFP → zone / migratetype /
//! ALLOC conversions. Re-exported from the parent module; see its docs.

use core::fmt;

use super::{write_symbolic, Gfp};

/// Zone types of a node, in index order (x86-64 without highmem or device
/// zones).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ZoneType {
    /// Below 16 MiB, for ISA-style DMA.
    Dma = 0,
    /// Below 4 GiB, for 32-bit DMA.
    Dma32 = 1,
    /// Everything else.
    Normal = 2,
    /// Only movable allocations, so the memory can be offlined or compacted.
    Movable = 3,
}

/// Number of zone types.
pub const MAX_NR_ZONES: usize = 4;

impl ZoneType {
    /// Every zone type, in index order.
    pub const ALL: [ZoneType; MAX_NR_ZONES] = [ZoneType::Dma, ZoneType::Dma32, ZoneType::Normal, ZoneType::Movable];

    /// Index into per-zone arrays.
    #[must_use]
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The name `/proc/zoneinfo` and `/proc/buddyinfo` print.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            ZoneType::Dma => "DMA",
            ZoneType::Dma32 => "DMA32",
            ZoneType::Normal => "Normal",
            ZoneType::Movable => "Movable",
        }
    }

    /// The zone type with index `i`, if there is one.
    #[must_use]
    pub fn from_index(i: usize) -> Option<ZoneType> {
        ZoneType::ALL.get(i).copied()
    }
}

/// Migrate types (pageblock mobility groups), in Linux order with CMA
/// configured and memory isolation on.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MigrateType {
    /// Kernel memory that can neither move nor be reclaimed.
    Unmovable = 0,
    /// Pages that can be migrated (user memory, page cache).
    Movable = 1,
    /// Caches that can be shrunk but not moved.
    Reclaimable = 2,
    /// The reserve for high-order atomic allocations.
    HighAtomic = 3,
    /// Contiguous-memory-allocator areas: movable allocations only.
    Cma = 4,
    /// Pageblocks being isolated (offlining, `alloc_contig_range`).
    Isolate = 5,
}

/// Number of migrate types.
pub const MIGRATE_TYPES: usize = 6;

impl MigrateType {
    /// Every migrate type, in index order.
    pub const ALL: [MigrateType; MIGRATE_TYPES] = [
        MigrateType::Unmovable,
        MigrateType::Movable,
        MigrateType::Reclaimable,
        MigrateType::HighAtomic,
        MigrateType::Cma,
        MigrateType::Isolate,
    ];

    /// Number of types with per-CPU lists (the first three).
    pub const PCPTYPES: usize = 3;

    /// Index into per-migratetype arrays.
    #[must_use]
    pub const fn index(self) -> usize {
        self as usize
    }

    /// The migrate type with index `i`, if there is one.
    #[must_use]
    pub fn from_index(i: usize) -> Option<MigrateType> {
        MigrateType::ALL.get(i).copied()
    }

    /// The name `/proc/pagetypeinfo` prints.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            MigrateType::Unmovable => "Unmovable",
            MigrateType::Movable => "Movable",
            MigrateType::Reclaimable => "Reclaimable",
            MigrateType::HighAtomic => "HighAtomic",
            MigrateType::Cma => "CMA",
            MigrateType::Isolate => "Isolate",
        }
    }

    /// Types to steal from, in order, when this type's free lists are empty.
    /// Only the per-CPU types fall back; the others get an empty list.
    #[must_use]
    pub const fn fallbacks(self) -> &'static [MigrateType] {
        match self {
            MigrateType::Unmovable => &[MigrateType::Reclaimable, MigrateType::Movable],
            MigrateType::Movable => &[MigrateType::Reclaimable, MigrateType::Unmovable],
            MigrateType::Reclaimable => &[MigrateType::Unmovable, MigrateType::Movable],
            MigrateType::HighAtomic | MigrateType::Cma | MigrateType::Isolate => &[],
        }
    }

    /// Whether this type has per-CPU page lists.
    #[must_use]
    pub const fn is_pcp_type(self) -> bool {
        (self as usize) < MigrateType::PCPTYPES
    }
}

/// Internal allocation flags (`ALLOC_*`): a `u32` newtype with Linux's bit
/// values.
///
/// The low two bits are not flags but a [`Watermark`] index; read and set
/// them with [`AllocFlags::watermark`] and [`AllocFlags::with_watermark`].
/// `WMARK_MIN` is zero, so `contains(AllocFlags::WMARK_MIN)` is always true.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AllocFlags(u32);

flag_set_methods!(AllocFlags);

impl AllocFlags {
    /// Check the min watermark (value 0 in the watermark field).
    pub const WMARK_MIN: AllocFlags = AllocFlags(0);
    /// Check the low watermark.
    pub const WMARK_LOW: AllocFlags = AllocFlags(1);
    /// Check the high watermark.
    pub const WMARK_HIGH: AllocFlags = AllocFlags(2);
    /// The watermark field.
    pub const WMARK_MASK: AllocFlags = AllocFlags(3);
    /// Skip watermark checks entirely.
    pub const NO_WATERMARKS: AllocFlags = AllocFlags(0x4);
    /// OOM victim: may go further below min than other reserve users.
    pub const OOM: AllocFlags = AllocFlags(0x8);
    /// The caller cannot block; with [`AllocFlags::MIN_RESERVE`] it may use
    /// a further quarter of the min reserve, and it may fall back to the
    /// high-atomic reserve.
    pub const NON_BLOCK: AllocFlags = AllocFlags(0x10);
    /// `__GFP_HIGH`: may use half of the min reserve.
    pub const MIN_RESERVE: AllocFlags = AllocFlags(0x20);
    /// Respect cpuset memory placement.
    pub const CPUSET: AllocFlags = AllocFlags(0x40);
    /// May allocate from CMA pageblocks.
    pub const CMA: AllocFlags = AllocFlags(0x80);
    /// Do not fall back into other pageblocks below pageblock order.
    pub const NOFRAGMENT: AllocFlags = AllocFlags(0x100);
    /// May allocate from the high-atomic reserve first.
    pub const HIGHATOMIC: AllocFlags = AllocFlags(0x200);
    /// Only try-lock the zone (Linux's lock-free `alloc_pages_nolock`);
    /// named so it prints, never set by this module.
    pub const TRYLOCK: AllocFlags = AllocFlags(0x400);
    /// May wake kswapd.
    pub const KSWAPD: AllocFlags = AllocFlags(0x800);
    /// Any of these lets an allocation go below the min watermark.
    pub const RESERVES: AllocFlags = AllocFlags(0x10 | 0x20 | 0x200 | 0x8);

    /// The watermark to check. The field value 3 (Linux's promotion mark,
    /// not modelled) reads as [`Watermark::High`], the strictest we have.
    #[must_use]
    pub const fn watermark(self) -> Watermark {
        match self.0 & AllocFlags::WMARK_MASK.0 {
            0 => Watermark::Min,
            1 => Watermark::Low,
            _ => Watermark::High,
        }
    }

    /// The same flags with the watermark field set to `w`.
    #[must_use]
    pub const fn with_watermark(self, w: Watermark) -> AllocFlags {
        AllocFlags((self.0 & !AllocFlags::WMARK_MASK.0) | w as u32)
    }
}

/// Flag names for printing, after the watermark field.
const ALLOC_NAMES: &[(&str, u32)] = &[
    ("NO_WATERMARKS", AllocFlags::NO_WATERMARKS.0),
    ("OOM", AllocFlags::OOM.0),
    ("NON_BLOCK", AllocFlags::NON_BLOCK.0),
    ("MIN_RESERVE", AllocFlags::MIN_RESERVE.0),
    ("CPUSET", AllocFlags::CPUSET.0),
    ("CMA", AllocFlags::CMA.0),
    ("NOFRAGMENT", AllocFlags::NOFRAGMENT.0),
    ("HIGHATOMIC", AllocFlags::HIGHATOMIC.0),
    ("TRYLOCK", AllocFlags::TRYLOCK.0),
    ("KSWAPD", AllocFlags::KSWAPD.0),
];

impl fmt::Display for AllocFlags {
    /// `WMARK_MIN|CPUSET|KSWAPD` style: the watermark always comes first
    /// (`WMARK_3` for the unmodelled value 3), unnamed bits last in hex.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 & AllocFlags::WMARK_MASK.0 {
            0 => f.write_str("WMARK_MIN")?,
            1 => f.write_str("WMARK_LOW")?,
            2 => f.write_str("WMARK_HIGH")?,
            _ => f.write_str("WMARK_3")?,
        }
        let rest = self.0 & !AllocFlags::WMARK_MASK.0;
        if rest != 0 {
            f.write_str("|")?;
        }
        write_symbolic(f, rest, ALLOC_NAMES, "")
    }
}

impl fmt::Debug for AllocFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AllocFlags({self})")
    }
}

/// Which of a zone's watermarks an allocation attempt must stay above.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Watermark {
    /// The lowest mark; only reserve users go below it.
    Min = 0,
    /// Below this kswapd is woken; the fast path checks it.
    Low = 1,
    /// kswapd reclaims until free memory is back above this.
    High = 2,
}

impl Watermark {
    /// Index into a zone's watermark array.
    #[must_use]
    pub const fn index(self) -> usize {
        self as usize
    }
}

/// Error from [`gfp_zone`]: more than one of `DMA`, `DMA32`, `HIGHMEM` was
/// set, which names no zone (Linux stops with `BUG()` in debug builds).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GfpZoneError {
    zone_bits: Gfp,
}

impl GfpZoneError {
    /// The zone modifier bits of the rejected request.
    #[must_use]
    pub const fn zone_bits(&self) -> Gfp {
        self.zone_bits
    }
}

impl fmt::Display for GfpZoneError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "conflicting GFP zone modifiers {}", self.zone_bits)
    }
}

#[cfg(feature = "std")]
impl std::error::Error for GfpZoneError {}

/// The highest zone a request may use (Linux `gfp_zone`).
///
/// `DMA` → Dma, `DMA32` → Dma32, `HIGHMEM` together with `MOVABLE` →
/// Movable, anything else (no modifier, `HIGHMEM` alone, `MOVABLE` alone) →
/// Normal. `MOVABLE` does not change a `DMA` or `DMA32` answer. The
/// allocator then tries zones from this one downwards.
///
/// # Errors
///
/// [`GfpZoneError`] when two or more of `DMA`, `DMA32`, `HIGHMEM` are set
/// (with or without `MOVABLE`): the 8 combinations Linux lists as bad.
pub const fn gfp_zone(gfp: Gfp) -> Result<ZoneType, GfpZoneError> {
    let dma = gfp.contains(Gfp::DMA);
    let dma32 = gfp.contains(Gfp::DMA32);
    let highmem = gfp.contains(Gfp::HIGHMEM);
    let modifiers = dma as u32 + dma32 as u32 + highmem as u32;
    if modifiers > 1 {
        return Err(GfpZoneError { zone_bits: gfp.intersection(Gfp::ZONEMASK) });
    }
    if dma {
        Ok(ZoneType::Dma)
    } else if dma32 {
        Ok(ZoneType::Dma32)
    } else if highmem && gfp.contains(Gfp::MOVABLE) {
        Ok(ZoneType::Movable)
    } else {
        Ok(ZoneType::Normal)
    }
}

/// The migrate type a request asks for (Linux `gfp_migratetype`).
///
/// Neither mobility bit → Unmovable, `MOVABLE` → Movable, `RECLAIMABLE` →
/// Reclaimable. Both bits together are invalid: Linux warns and computes
/// `HighAtomic` (the shifted value 3), which would make the request raid the
/// high-atomic reserve. We answer **Unmovable** instead: a request that also
/// claims to be reclaimable cannot be trusted to be migratable, and Unmovable
/// is the one type that promises nothing, so the page can never end up in a
/// movable or CMA pageblock it would then pin.
#[must_use]
pub const fn gfp_migratetype(gfp: Gfp) -> MigrateType {
    let movable = gfp.contains(Gfp::MOVABLE);
    let reclaimable = gfp.contains(Gfp::RECLAIMABLE);
    match (movable, reclaimable) {
        (true, false) => MigrateType::Movable,
        (false, true) => MigrateType::Reclaimable,
        (false, false) | (true, true) => MigrateType::Unmovable,
    }
}

/// Whether the caller may sleep (direct reclaim, compaction, retries).
#[must_use]
pub const fn gfpflags_allow_blocking(gfp: Gfp) -> bool {
    gfp.contains(Gfp::DIRECT_RECLAIM)
}

/// Whether direct compaction may run for this request: Linux requires
/// `__GFP_IO`, since migration may have to write pages back.
#[must_use]
pub const fn gfp_compaction_allowed(gfp: Gfp) -> bool {
    gfp.contains(Gfp::IO)
}

/// Whether the request may use every reserve, ignoring watermarks (Linux
/// `gfp_pfmemalloc_allowed`): `MEMALLOC` without `NOMEMALLOC`. Linux also
/// grants this to tasks in reclaim (`PF_MEMALLOC`) and OOM victims; mmkit
/// has no task context, so the GFP bit is the only source.
#[must_use]
pub const fn gfp_pfmemalloc_allowed(gfp: Gfp) -> bool {
    gfp.contains(Gfp::MEMALLOC) && !gfp.contains(Gfp::NOMEMALLOC)
}

/// Adds `CMA` when the request is movable (Linux `gfp_to_alloc_flags_cma`):
/// only movable pages may be placed in CMA pageblocks.
const fn with_cma_if_movable(gfp: Gfp, flags: AllocFlags) -> AllocFlags {
    if matches!(gfp_migratetype(gfp), MigrateType::Movable) {
        flags.union(AllocFlags::CMA)
    } else {
        flags
    }
}

/// Flags for the first slow-path attempt: Linux `gfp_to_alloc_flags`
/// exactly, before any reserve override.
///
/// Rules, each a plain conditional:
/// - start with `WMARK_MIN | CPUSET`;
/// - `HIGH` → `MIN_RESERVE`; `KSWAPD_RECLAIM` → `KSWAPD`;
/// - without `DIRECT_RECLAIM` (cannot block): unless `NOMEMALLOC`, add
///   `NON_BLOCK`, and also `HIGHATOMIC` when `order > 0` and `MIN_RESERVE`
///   is set; then if `MIN_RESERVE` is set drop `CPUSET` (an atomic request
///   would rather leave its cpuset than fail);
/// - a movable request ([`gfp_migratetype`] = Movable) → `CMA`.
///
/// Linux also grants `MIN_RESERVE` to blocking real-time tasks and adds
/// `NOFRAGMENT` under the `defrag_mode` sysctl (default off); mmkit models
/// neither.
#[must_use]
pub const fn gfp_to_base_alloc_flags(gfp: Gfp, order: u32) -> AllocFlags {
    let mut flags = AllocFlags::WMARK_MIN.union(AllocFlags::CPUSET);
    if gfp.contains(Gfp::HIGH) {
        flags = flags.union(AllocFlags::MIN_RESERVE);
    }
    if gfp.contains(Gfp::KSWAPD_RECLAIM) {
        flags = flags.union(AllocFlags::KSWAPD);
    }
    if !gfp.contains(Gfp::DIRECT_RECLAIM) {
        if !gfp.contains(Gfp::NOMEMALLOC) {
            flags = flags.union(AllocFlags::NON_BLOCK);
            if order > 0 && flags.contains(AllocFlags::MIN_RESERVE) {
                flags = flags.union(AllocFlags::HIGHATOMIC);
            }
        }
        if flags.contains(AllocFlags::MIN_RESERVE) {
            flags = flags.difference(AllocFlags::CPUSET);
        }
    }
    with_cma_if_movable(gfp, flags)
}

/// Slow-path allocation flags for a request of `2^order` pages.
///
/// This is [`gfp_to_base_alloc_flags`] with the reserve override already
/// applied: when [`gfp_pfmemalloc_allowed`] (`MEMALLOC` without
/// `NOMEMALLOC`), the result is `NO_WATERMARKS`, plus `CMA` if movable, plus
/// `KSWAPD` if the request wakes kswapd, and nothing else (no `CPUSET`, no
/// reserve bits): the flag set Linux's slow path switches to at its `retry`
/// step. Linux first makes one attempt with the base flags; a caller that
/// wants that exact sequence uses [`gfp_to_base_alloc_flags`] first.
#[must_use]
pub const fn gfp_to_alloc_flags(gfp: Gfp, order: u32) -> AllocFlags {
    let base = gfp_to_base_alloc_flags(gfp, order);
    if gfp_pfmemalloc_allowed(gfp) {
        let reserve = with_cma_if_movable(gfp, AllocFlags::NO_WATERMARKS);
        reserve.union(base.intersection(AllocFlags::KSWAPD))
    } else {
        base
    }
}

/// Fast-path allocation flags (Linux `__alloc_pages` before the slow path).
///
/// `WMARK_LOW`, plus `KSWAPD` if `KSWAPD_RECLAIM`, plus `NOFRAGMENT` if
/// `nofragment_applies`, plus `CMA` if the request is movable.
///
/// `nofragment_applies` is the caller's zone knowledge (Linux
/// `alloc_flags_nofragment`). Linux's rule: the preferred zone is Normal,
/// and either only one node is online (DMA32 is then assumed populated) or
/// the preferred node's DMA32 zone is populated. The point is to let DMA32
/// take a small request before Normal's pageblocks get mixed types.
#[must_use]
pub const fn fast_path_alloc_flags(gfp: Gfp, nofragment_applies: bool) -> AllocFlags {
    let mut flags = AllocFlags::WMARK_LOW;
    if gfp.contains(Gfp::KSWAPD_RECLAIM) {
        flags = flags.union(AllocFlags::KSWAPD);
    }
    if nofragment_applies {
        flags = flags.union(AllocFlags::NOFRAGMENT);
    }
    with_cma_if_movable(gfp, flags)
}
