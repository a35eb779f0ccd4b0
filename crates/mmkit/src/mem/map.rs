//! The memory map's memory-layer state: geometry, the descriptor table, the
//! pageblock bitmap and the real memory behind the PFNs, if any.
//!
//! Owns those four things and nothing else; zones, per-CPU lists and the
//! allocator hold their own state beside it. Built once by the builder.

use crate::mem::page::PageTable;
use crate::mem::pageblock::PageblockMap;
use crate::types::geometry::Geometry;

/// Everything a zone or the allocator needs from the memory layer.
pub(crate) struct MemMap {
    /// Sizes that shape the map.
    pub(crate) geometry: Geometry,
    /// PFN of descriptor 0.
    pub(crate) base_pfn: u64,
    /// One descriptor per PFN from `base_pfn`.
    pub(crate) pages: PageTable,
    /// Migratetype of every pageblock.
    pub(crate) blocks: PageblockMap,
    /// The memory behind the PFNs, when the map has real backing.
    pub(crate) memory: Option<crate::sys::RealMemory>,
}
