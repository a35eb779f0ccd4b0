//! The shape of a memory map: page size, section, pageblock and largest
//! block orders, and the zone spans a map is declared with. Plain values;
//! imports only the error and GFP types beside it.

use crate::types::gfp::ZoneType;
use core::ops::Range;

/// Largest `max_page_order` a geometry may have (the buddy's fixed
/// per-order arrays are sized by it).
pub(crate) const MAX_PAGE_ORDER_LIMIT: u32 = 20;

/// Sizes that shape the map. Defaults are x86-64 Linux's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// log2 of the page size (12 → 4 KiB).
    pub page_shift: u32,
    /// log2 of pages per memory section (15 → 128 MiB of 4 KiB pages).
    pub section_order: u32,
    /// log2 of pages per pageblock (9 → 2 MiB).
    pub pageblock_order: u32,
    /// Largest block order, Linux's `MAX_PAGE_ORDER` (10 → 4 MiB).
    pub max_page_order: u32,
}

impl Default for Geometry {
    fn default() -> Self {
        Self { page_shift: 12, section_order: 15, pageblock_order: 9, max_page_order: 10 }
    }
}

impl Geometry {
    /// Bytes per page.
    pub const fn page_size(&self) -> u64 {
        1 << self.page_shift
    }
    /// Orders `0..=max_page_order`.
    pub const fn nr_orders(&self) -> usize {
        self.max_page_order as usize + 1
    }
    /// Largest order a free block can reach: merging never crosses a section.
    pub const fn merge_order(&self) -> u32 {
        if self.section_order < self.max_page_order {
            self.section_order
        } else {
            self.max_page_order
        }
    }
    /// Pages per pageblock.
    pub const fn pageblock_nr_pages(&self) -> u64 {
        1 << self.pageblock_order
    }
    /// Section number of a PFN.
    pub const fn pfn_to_section(&self, pfn: u64) -> u64 {
        pfn >> self.section_order
    }

    /// Whether these sizes make a map (the builder refuses the rest with
    /// `BuildError::BadGeometry`).
    pub(crate) fn is_valid(&self) -> bool {
        (9..=30).contains(&self.page_shift)
            && self.max_page_order <= MAX_PAGE_ORDER_LIMIT
            && self.pageblock_order <= self.max_page_order
            // A pageblock never straddles a section (Linux: `pageblock_order`
            // <= `MAX_PAGE_ORDER` <= `SECTION_SIZE_BITS - PAGE_SHIFT`); with
            // smaller sections every order above the section's would fail.
            && self.pageblock_order <= self.section_order
            && self.section_order <= 30
    }
}

/// One zone's PFN span on one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneSpec {
    /// NUMA node id.
    pub nid: usize,
    /// Which zone.
    pub zone_type: ZoneType,
    /// PFN span.
    pub pfns: Range<u64>,
}
