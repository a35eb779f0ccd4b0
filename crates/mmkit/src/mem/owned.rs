//! The handle of an owned block: what proves to `rawmem`'s safe byte
//! accessors that the caller alone holds a block; and the key of a layer
//! that owns blocks, what proves to `take_back_block` that the caller is
//! that layer. Built and consumed only by the allocator's block API
//! (`page_alloc::block`); this file holds the types, not the transitions.

use crate::types::page_flags::PageOwner;
use crate::Pfn;

/// A block of 2^order pages owned by one layer, allocated and frozen
/// (refcount 0). Exactly one `PageBlock` exists for such a block, so the
/// borrow rules on it decide who may read or write the block's bytes.
///
/// It carries its map's identity (an id no other map of the process ever
/// gets: see `docs/architecture.md`, "Ownership of pages"), so another
/// map refuses it and hands it back; it is consumed when it is freed or
/// handed out, so it cannot be freed twice.
///
/// ```compile_fail
/// # let mm = mmkit::MemoryMapBuilder::with_memory(16 << 20).build().unwrap();
/// # let blocks = mmkit::Blocks::new(&mm);
/// # let key = blocks.new_owner_key().unwrap();
/// let block = blocks.alloc_block(&key, mmkit::Gfp::KERNEL, 0).unwrap();
/// let twin = block.clone(); // not Clone: one holder per block
/// ```
///
/// Give it back with [`Blocks::free_block`](crate::Blocks::free_block); a dropped `PageBlock`
/// leaks its pages (they stay allocated and owned, and
/// [`check_invariants`](crate::Report::check_invariants) counts them as
/// allocated).
#[must_use = "a dropped PageBlock leaks its pages; free it with Blocks::free_block"]
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
            None => PageOwner::MIN_TAG,
        }
    }
    /// Whether the block is one of `key`'s: its tag and its map (a layer's
    /// check that a block handed to it is its own, in one compare each).
    #[inline(always)]
    pub fn belongs_to(&self, key: &OwnerKey) -> bool {
        (self.meta >> 8) as u8 == key.owner().id() && self.map_id() == key.map_id()
    }
    /// The allocator the block belongs to.
    #[inline(always)]
    pub(crate) fn map_id(&self) -> u64 {
        self.meta >> 16
    }
}

/// The right to be one owner of pages in one map: issued by
/// [`Blocks::new_owner_key`](crate::Blocks::new_owner_key)
/// with a tag no other live key of the map has, neither `Clone` nor
/// `Copy`, and made nowhere else. Allocating owned blocks
/// ([`alloc_block`](crate::Blocks::alloc_block)) and taking back a
/// block handed out as a bare PFN
/// ([`take_back_block`](crate::Blocks::take_back_block)) ask for it,
/// so only the layer holding the key can turn its handed-out PFNs into
/// [`PageBlock`]s again; a tag alone grants nothing. Give it back with
/// [`release_owner_key`](crate::Blocks::release_owner_key) when the
/// layer is done (a dropped key keeps its tag taken).
///
/// ```compile_fail
/// # let mm = mmkit::MemoryMapBuilder::with_memory(16 << 20).build().unwrap();
/// let key = mmkit::Blocks::new(&mm).new_owner_key().unwrap();
/// let copy = key.clone(); // not Clone: one holder per tag
/// ```
#[derive(Debug, PartialEq, Eq)]
pub struct OwnerKey {
    owner: PageOwner,
    map_id: u64,
}

impl OwnerKey {
    /// The key of tag `owner` in map `map_id`; only the allocator's block
    /// API makes one, after claiming the tag.
    pub(crate) fn new(owner: PageOwner, map_id: u64) -> Self {
        Self { owner, map_id }
    }
    /// The tag the key's blocks carry (what
    /// [`page_owner`](crate::Blocks::page_owner) and
    /// [`FreeError::Owned`](crate::FreeError::Owned) report).
    #[inline(always)]
    pub fn owner(&self) -> PageOwner {
        self.owner
    }
    /// The map that issued the key.
    #[inline(always)]
    pub(crate) fn map_id(&self) -> u64 {
        self.map_id
    }
}

/// A stack of [`PageBlock`]s of one [`OwnerKey`] and one order, kept as
/// bare PFNs: the layer's cache of its own free blocks (a quicklist).
///
/// Every block on the stack shares its owner tag, order and map, so the
/// stack keeps that part of the handle once and a block costs one 8-byte
/// word: pushing stores its PFN, popping rebuilds the handle from the PFN
/// and the stack's own part. (A stack of whole handles moved 16 bytes per
/// push and pop, and a pop that loaded both words at once right after a
/// push had stored them one by one waited for the stores to reach the
/// cache: `mmkit bench quicklist`, case `quicklist/hit_alloc_free`.)
///
/// It is a container of handles, not a way to make them: only blocks
/// pushed onto it come off it, a block of another key, order or map is
/// refused and handed back, and a popped block is gone from the stack.
///
/// ```
/// use mmkit::{BlockStack, Blocks, Gfp, MemoryMapBuilder};
///
/// let mm = MemoryMapBuilder::with_memory(16 << 20).build().unwrap();
/// let blocks = Blocks::new(&mm);
/// let key = blocks.new_owner_key().unwrap();
/// let mut cache = BlockStack::new(&key, 0);
/// let block = blocks.alloc_block(&key, Gfp::KERNEL, 0).unwrap();
/// let pfn = block.pfn();
/// cache.push(block).unwrap();
/// let wrong_order = blocks.alloc_block(&key, Gfp::KERNEL, 1).unwrap();
/// let wrong_order = cache.push(wrong_order).unwrap_err(); // handed back
/// let again = cache.pop().unwrap();
/// assert_eq!(again.pfn(), pfn);
/// blocks.free_block(again).unwrap();
/// blocks.free_block(wrong_order).unwrap();
/// ```
#[derive(Debug, Default)]
pub struct BlockStack {
    pfns: alloc::vec::Vec<Pfn>,
    /// The `meta` word of every block on the stack; 0 (owner tag 0, which
    /// no key has) for a stack made by `Default`, which refuses every
    /// block.
    meta: u64,
}

impl BlockStack {
    /// An empty stack for blocks of `key` and `order`.
    pub fn new(key: &OwnerKey, order: u32) -> Self {
        Self::with_capacity(key, order, 0)
    }

    /// An empty stack with room for `capacity` blocks, as far as memory
    /// allows: the capacity is a hint, and one the heap cannot serve (a
    /// caller's count at its extreme) leaves the stack with no room made
    /// ahead instead of aborting the process. The stack still grows as
    /// blocks are pushed, and never past the blocks a map can have, whose
    /// descriptor table (16 bytes a page) is twice the stack's word a page.
    /// [`try_with_capacity`](Self::try_with_capacity) says when the room
    /// could not be made.
    pub fn with_capacity(key: &OwnerKey, order: u32, capacity: usize) -> Self {
        Self::try_with_capacity(key, order, capacity).unwrap_or_else(|_| Self::with_capacity(key, order, 0))
    }

    /// An empty stack with room for `capacity` blocks.
    ///
    /// # Errors
    /// The heap's refusal, when `capacity` blocks' words (8 bytes each)
    /// overflow or cannot be allocated; nothing is allocated then.
    pub fn try_with_capacity(
        key: &OwnerKey,
        order: u32,
        capacity: usize,
    ) -> Result<Self, alloc::collections::TryReserveError> {
        let meta = PageBlock::new(Pfn(0), order, key.owner(), key.map_id()).meta;
        let mut pfns = alloc::vec::Vec::new();
        pfns.try_reserve_exact(capacity)?;
        Ok(Self { pfns, meta })
    }

    /// Puts `block` on top; a block of another key, order or map is
    /// handed back unchanged.
    ///
    /// # Errors
    /// The block itself, when it does not belong on this stack.
    #[inline(always)]
    pub fn push(&mut self, block: PageBlock) -> Result<(), PageBlock> {
        if block.meta != self.meta {
            return Err(block);
        }
        self.pfns.push(block.pfn);
        Ok(())
    }

    /// Takes the top block off.
    #[inline(always)]
    pub fn pop(&mut self) -> Option<PageBlock> {
        let pfn = self.pfns.pop()?;
        Some(PageBlock { pfn, meta: self.meta })
    }

    /// Puts `block` at position `index` (at most [`len`](Self::len)); as
    /// [`push`](Self::push) for a block that does not belong here.
    ///
    /// # Errors
    /// The block itself, when it does not belong on this stack or `index`
    /// is past the top.
    pub fn insert(&mut self, index: usize, block: PageBlock) -> Result<(), PageBlock> {
        if block.meta != self.meta || index > self.pfns.len() {
            return Err(block);
        }
        self.pfns.insert(index, block.pfn);
        Ok(())
    }

    /// Takes the block at position `index` off; `None` past the top.
    pub fn remove(&mut self, index: usize) -> Option<PageBlock> {
        if index >= self.pfns.len() {
            return None;
        }
        let pfn = self.pfns.remove(index);
        Some(PageBlock { pfn, meta: self.meta })
    }

    /// Moves the blocks at positions `at..` into a new stack of the same
    /// kind (none when `at` is past the top).
    pub fn split_off(&mut self, at: usize) -> Self {
        let at = at.min(self.pfns.len());
        Self { pfns: self.pfns.split_off(at), meta: self.meta }
    }

    /// Moves every block of `other` on top of this stack if both stacks
    /// are of the same kind (made for the same key and order), and says
    /// whether it did; `other` is left unchanged if not.
    #[must_use = "a stack of another kind is left as it was"]
    pub fn append(&mut self, other: &mut Self) -> bool {
        if other.meta != self.meta && !other.pfns.is_empty() {
            return false;
        }
        self.pfns.append(&mut other.pfns);
        true
    }

    /// The block at position `index` (0 is the bottom), to look at: the
    /// stack stays borrowed while the reference lives, and nothing can be
    /// moved out of it.
    #[inline(always)]
    pub fn get(&self, index: usize) -> Option<BlockRef<'_>> {
        let pfn = *self.pfns.get(index)?;
        Some(BlockRef { block: PageBlock { pfn, meta: self.meta }, _stack: core::marker::PhantomData })
    }

    /// The PFNs of the blocks, bottom first: to look, not to take.
    #[inline(always)]
    pub fn pfns(&self) -> &[Pfn] {
        &self.pfns
    }

    /// Blocks on the stack.
    #[inline(always)]
    pub fn len(&self) -> usize {
        self.pfns.len()
    }

    /// Whether the stack is empty.
    #[inline(always)]
    pub fn is_empty(&self) -> bool {
        self.pfns.is_empty()
    }
}

/// A block on a [`BlockStack`], lent by [`BlockStack::get`]: a shared
/// reference to its handle, for the calls that read (its bytes, its
/// poison), while the block stays on the stack.
#[derive(Debug)]
pub struct BlockRef<'s> {
    block: PageBlock,
    _stack: core::marker::PhantomData<&'s BlockStack>,
}

impl core::ops::Deref for BlockRef<'_> {
    type Target = PageBlock;

    #[inline(always)]
    fn deref(&self) -> &PageBlock {
        &self.block
    }
}
