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
    pfn: Pfn,
    /// Order (bits 0..8), owner tag (8..16) and the allocator's map id
    /// (16..64; ids stop at 2^48 - 1 and are never reused), packed into one word: a cache of handles (a quicklist's
    /// stack) stores and reloads a handle as two 8-byte words, which the
    /// CPU forwards from its store buffer. Separate narrow fields were
    /// stored in pieces and reloaded with one wider load, a failed
    /// store-to-load forward: the load waits until the stores reach the
    /// cache, on every quicklist hit (`mmkit bench quicklist`, case
    /// `quicklist/hit_alloc_free`).
    meta: u64,
}

impl PageBlock {
    /// The handle of block `pfn` of `order`, owned by `owner`, in the
    /// allocator with `map_id`. Only the allocator's block API makes one.
    #[inline(always)]
    pub(crate) fn new(pfn: Pfn, order: u32, owner: PageOwner, map_id: u64) -> Self {
        // Map ids fit 48 bits (`page_alloc::MAX_MAP_ID`).
        let meta = u64::from(order as u8) | u64::from(owner.id()) << 8 | map_id << 16;
        Self { pfn, meta }
    }
    /// First page.
    #[inline(always)]
    pub fn pfn(&self) -> Pfn {
        self.pfn
    }
    /// The block is 2^order pages.
    #[inline(always)]
    pub fn order(&self) -> u32 {
        (self.meta & 0xff) as u32
    }
    /// Pages in the block.
    pub fn nr_pages(&self) -> u64 {
        1 << self.order()
    }
    /// The layer that owns it.
    pub fn owner(&self) -> PageOwner {
        match PageOwner::new((self.meta >> 8) as u8) {
            Some(owner) => owner,
            // `new` stored a valid tag; unreachable, but no panic path.
            None => PageOwner::MIN,
        }
    }
    /// The allocator the block belongs to.
    #[inline(always)]
    pub(crate) fn map_id(&self) -> u64 {
        self.meta >> 16
    }
}
