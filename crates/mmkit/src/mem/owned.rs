//! The handle of an owned block: what proves to `rawmem`'s safe byte
//! accessors that the caller alone holds a block. Built and consumed only
//! by the allocator's block API (`page_alloc::block`); this file holds the
//! type, not the transitions.

use crate::types::page_flags::PageOwner;
use crate::Pfn;

/// A block of 2^order pages owned by one layer, allocated and frozen
/// (refcount 0). Exactly one `PageBlock` exists for such a block, so the
/// borrow rules on it decide who may read or write the block's bytes.
///
/// Give it back with [`PageAllocator::free_block`](crate::PageAllocator::free_block); a dropped `PageBlock`
/// leaks its pages (they stay allocated and owned).
#[must_use = "a dropped PageBlock leaks its pages; free it with PageAllocator::free_block"]
#[derive(Debug, PartialEq, Eq)]
pub struct PageBlock {
    pub(crate) pfn: Pfn,
    pub(crate) order: u8,
    pub(crate) owner: PageOwner,
    /// The allocator the block belongs to ([`PageAllocator::map_id`]).
    pub(crate) map_id: u32,
}

impl PageBlock {
    /// First page.
    pub fn pfn(&self) -> Pfn {
        self.pfn
    }
    /// The block is 2^order pages.
    pub fn order(&self) -> u32 {
        u32::from(self.order)
    }
    /// Pages in the block.
    pub fn nr_pages(&self) -> u64 {
        1 << self.order
    }
    /// The layer that owns it.
    pub fn owner(&self) -> PageOwner {
        self.owner
    }
}
