//! Owned blocks: the public API that layers above the page allocator
//! (quicklists, page tables, zsmalloc) build on.
//!
//! Owns [`OwnerKey`]s (which map issues which tag), [`PageBlock`] and the
//! descriptor transitions between
//! "allocated", "owned by a layer" and "handed out by that layer". Must not
//! touch free lists or per-CPU lists: allocation and free go through the
//! ordinary paths.
//!
//! A layer first asks the map for an [`OwnerKey`]
//! ([`Blocks::new_owner_key`]): the right to one tag of the map, not
//! `Clone`, made nowhere else, so the tag's pages answer to one holder.
//! It marks the pages it manages with the key's [`PageOwner`] tag, much as
//! Linux marks them with a page type (`PGTY_zsmalloc`, `PGTY_table`): the
//! ordinary free paths (`free_pages`, `put_page`, `free_frozen_pages`,
//! `free_contig_range`) refuse an owned page with [`FreeError::Owned`], and
//! contiguous allocation does not migrate it. The layer holds each block as
//! a [`PageBlock`]: a unique handle (not `Clone`), so `&mut PageBlock` is
//! exclusive access to the block's bytes and giving the block back consumes
//! the handle. A block the layer hands to its own caller as a bare PFN
//! ([`Blocks::hand_out_block`]) carries refcount 1; taking it back
//! ([`Blocks::take_back_block`]) needs the key, and is one
//! compare-and-swap of that refcount to 0, so of two racing frees of the
//! same page exactly one wins, and nobody without the key wins at all.
//!
//! ```
//! use mmkit::{Backing, Blocks, Gfp, HugePages, MemoryMapBuilder};
//!
//! let mm = MemoryMapBuilder::with_memory(16 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap();
//! let blocks = Blocks::new(&mm);
//! let mine = blocks.new_owner_key().unwrap();
//! let mut block = blocks.alloc_block(&mine, Gfp::KERNEL | Gfp::ZERO, 0).unwrap();
//! blocks.block_bytes_mut(&mut block).unwrap()[..5].copy_from_slice(b"hello");
//! assert_eq!(&blocks.block_bytes(&block).unwrap()[..5], b"hello");
//! assert!(mm.free_pages(block.pfn(), 0).is_err());   // owned: the plain free refuses it
//! blocks.free_block(block).unwrap();
//! blocks.release_owner_key(mine);
//! ```
#![deny(unsafe_code)]

pub use crate::mem::owned::{OwnerKey, PageBlock};
use crate::mem::page::{PageFlags, PageIdx};
use crate::page_alloc::bulk::BulkFreeError;
use crate::page_alloc::cpu::Locked;
use crate::page_alloc::cpus::CpuHandle;
use crate::page_alloc::free::Claim;
use crate::page_alloc::Blocks;
use crate::types::error::{BadPageReason, FreeError, OwnerTagsExhausted};
use crate::types::gfp::Gfp;
pub use crate::types::page_flags::PageOwner;
use crate::{AllocError, PageAllocator, Pfn};

/// Why a block operation failed. Nothing was changed.
#[derive(Debug, PartialEq, Eq)]
pub enum BlockError {
    /// The block belongs to another allocator; it is handed back unchanged.
    Foreign(PageBlock),
    /// The free path refused or reported the block (see [`FreeError`]).
    Free(FreeError),
}

impl core::fmt::Display for BlockError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Foreign(block) => write!(f, "block at pfn {} belongs to another allocator", block.pfn()),
            Self::Free(e) => write!(f, "{e}"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for BlockError {}

impl<'a> Blocks<'a> {
    /// A key for a tag no live key of this map holds: the right to own
    /// blocks here ([`alloc_block`](Self::alloc_block)) and to take back
    /// the ones handed out ([`take_back_block`](Self::take_back_block)).
    /// Each layer instance (a quicklist set, a zsmalloc pool, a frame
    /// adapter) takes its own, so that none can take another's pages.
    ///
    /// # Errors
    /// [`OwnerTagsExhausted`] when all [`PageOwner::MAX`] tags are held.
    pub fn new_owner_key(&self) -> Result<OwnerKey, OwnerTagsExhausted> {
        let all = ((1u32 << (PageOwner::MAX + 1)) - 1) & !1;
        let taken = self
            .mm
            .owner_tags
            .fetch_update(core::sync::atomic::Ordering::AcqRel, core::sync::atomic::Ordering::Acquire, |t| {
                let free = all & !t;
                (free != 0).then(|| t | (free & free.wrapping_neg()))
            })
            .map_err(|_| OwnerTagsExhausted)?;
        let free = all & !taken;
        let tag = free.trailing_zeros() as u8;
        Ok(OwnerKey::new(PageOwner::new(tag).ok_or(OwnerTagsExhausted)?, self.mm.map_id()))
    }

    /// Gives a key back. Its tag becomes free for a later key only if no
    /// page of the map carries it any more (one pass over the
    /// descriptors): a page the layer handed out and never took back
    /// would otherwise fall to the tag's next holder, so such a tag is
    /// retired for the map's life instead. Returns whether the tag was
    /// freed. A key of another map is dropped and its tag stays taken there.
    pub fn release_owner_key(&self, key: OwnerKey) -> bool {
        if key.map_id() != self.mm.map_id() {
            return false;
        }
        let tag = key.owner().id();
        // The key is consumed: no block gets this tag from now on, so a
        // pass that finds none stays true.
        let in_use = (0..self.mm.mem.pages.len() as PageIdx).any(|idx| self.mm.desc(idx).owner() == tag);
        if !in_use {
            self.mm.owner_tags.fetch_and(!(1u32 << tag), core::sync::atomic::Ordering::AcqRel);
        }
        !in_use
    }

    /// Allocates a block of 2^`order` pages for layer `owner` on the calling
    /// CPU: the ordinary allocation path, then the block is marked as
    /// `owner`'s and frozen.
    ///
    /// # Errors
    /// As [`alloc_pages`](PageAllocator::alloc_pages);
    /// [`AllocError::ForeignOwnerKey`] for a key of another map.
    #[inline]
    pub fn alloc_block(&self, owner: &OwnerKey, gfp: Gfp, order: u32) -> Result<PageBlock, AllocError> {
        let cpu = self.mm.current_cpu();
        self.mm.alloc_block_on(cpu, self.mm.node_of_cpu(cpu), owner, gfp, order)
    }

    /// [`alloc_block`](Self::alloc_block) preferring node `nid` (Linux's
    /// `alloc_pages_node`).
    ///
    /// # Errors
    /// As [`alloc_pages_node`](PageAllocator::alloc_pages_node).
    #[inline]
    pub fn alloc_block_node(
        &self,
        nid: usize,
        owner: &OwnerKey,
        gfp: Gfp,
        order: u32,
    ) -> Result<PageBlock, AllocError> {
        self.mm.alloc_block_on(self.mm.current_cpu(), nid, owner, gfp, order)
    }

    /// Frees an owned block on the calling CPU: the owner mark is cleared
    /// and the block goes down the frozen free path.
    ///
    /// # Errors
    /// [`BlockError::Foreign`] for another allocator's block (given back);
    /// [`BlockError::Free`] when `free_pages_prepare` found the block bad
    /// (for example embedder flags left set): reported and leaked, as any
    /// bad page.
    #[inline]
    pub fn free_block(&self, block: PageBlock) -> Result<(), BlockError> {
        self.mm.free_block_on(self.mm.current_cpu(), block)
    }

    /// Frees owned blocks in one pass, as [`free_pages_bulk`](PageAllocator::free_pages_bulk)
    /// frees plain ones: each is checked and prepared as
    /// [`free_block`](Self::free_block) does, and they go to the calling
    /// CPU's lists under one pageset-lock hold per zone instead of one per
    /// block. Blocks of another allocator stay in `blocks` (given back);
    /// every other block is taken out, and `blocks` keeps its capacity.
    /// Returns how many were freed.
    ///
    /// # Errors
    /// [`BulkFreeError`] when `free_pages_prepare` found blocks bad (for
    /// example embedder flags left set): reported and leaked, as by
    /// `free_block`; every other block is still freed.
    pub fn free_blocks_bulk(&self, blocks: &mut alloc::vec::Vec<PageBlock>) -> Result<usize, BulkFreeError> {
        let cpu = self.mm.current_cpu();
        let mut held = None;
        let (mut done, mut failed, mut first) = (0, 0, None);
        let mut foreign = alloc::vec::Vec::new();
        for (i, block) in blocks.drain(..).enumerate() {
            let Ok(idx) = self.mm.block_idx(&block) else {
                foreign.push(block);
                continue;
            };
            let order = block.order();
            self.mm.desc(idx).clear_owner();
            let freed = self
                .mm
                .validate_frozen_block(self.mm.idx_to_pfn(idx), order)
                .and_then(|idx| self.mm.claim_and_prepare(idx, order, Claim::Frozen));
            match freed {
                Ok(()) => {
                    self.mm.free_prepared_batched(cpu, idx, order, &mut held);
                    done += 1;
                }
                Err(e) => {
                    failed += 1;
                    first.get_or_insert((i, e));
                }
            }
        }
        // `blocks` keeps its allocation, for a caller that reuses it.
        blocks.append(&mut foreign);
        match first {
            None => Ok(done),
            Some(first) => Err(BulkFreeError { done, failed, first }),
        }
    }

    /// The bytes of a block this caller holds (`nr_pages × page size`);
    /// `None` for a metadata-only map or another allocator's block.
    #[inline]
    pub fn block_bytes<'b>(&self, block: &'b PageBlock) -> Option<&'b [u8]>
    where
        'a: 'b,
    {
        let idx = self.mm.block_idx(block).ok()?;
        Some(crate::mem::rawmem::block_bytes(self.mm.real_memory()?, idx as usize, block.order(), block))
    }

    /// The bytes of a block this caller holds, writable: `&mut PageBlock`
    /// is exclusive, so nobody else reads or writes them meanwhile. `None`
    /// as for [`block_bytes`](Self::block_bytes).
    #[inline]
    pub fn block_bytes_mut<'b>(&self, block: &'b mut PageBlock) -> Option<&'b mut [u8]>
    where
        'a: 'b,
    {
        let idx = self.mm.block_idx(block).ok()?;
        Some(crate::mem::rawmem::block_bytes_mut(self.mm.real_memory()?, idx as usize, block.order(), block))
    }

    /// Hands an owned block to the layer's caller as a bare PFN: its
    /// refcount becomes 1 and it stays owned, so only
    /// [`take_back_block`](Self::take_back_block) with the same owner
    /// accepts it again.
    ///
    /// # Errors
    /// [`BlockError::Foreign`] for another allocator's block (given back).
    #[inline]
    pub fn hand_out_block(&self, block: PageBlock) -> Result<Pfn, BlockError> {
        let Ok(idx) = self.mm.block_idx(&block) else {
            return Err(BlockError::Foreign(block));
        };
        self.mm.desc(idx).set_refcount(1);
        Ok(self.mm.idx_to_pfn(idx))
    }

    /// Takes back a block of `order` that `owner` handed out (or, to adopt
    /// it, a plain block from [`alloc_pages`](PageAllocator::alloc_pages) with one
    /// reference): afterwards it is `owner`'s and frozen, and the returned
    /// handle is the only way to it. Of racing calls for one block, one
    /// wins; the others get [`FreeError::DoubleFree`].
    ///
    /// # Errors
    /// Every [`FreeError`] of [`free_pages`](PageAllocator::free_pages) for a PFN
    /// that does not start an allocated block of `order`;
    /// [`FreeError::Owned`] for another owner's block;
    /// [`FreeError::FlagsSet`] for a block with embedder flags still set;
    /// [`FreeError::RefcountMismatch`] for a block with other references;
    /// [`FreeError::ForeignOwnerKey`] for a key of another map.
    /// Nothing is changed.
    #[inline]
    pub fn take_back_block(&self, key: &OwnerKey, pfn: Pfn, order: u32) -> Result<PageBlock, FreeError> {
        if key.map_id() != self.mm.map_id() {
            return Err(FreeError::ForeignOwnerKey(pfn));
        }
        let owner = key.owner();
        let (idx, page) = self.mm.pfn_to_desc(pfn).ok_or(FreeError::OutOfRange(pfn))?;
        let (flags, got_order) = page.flags_and_order();
        // The common case: a block this owner handed out, back unchanged.
        let handed_out = PageFlags::ALLOCATED.union(PageFlags::OWNED);
        if flags == handed_out && got_order == order && page.owner() == owner.id() && page.refcount_exchange(1, 0) {
            return Ok(self.mm.block_handle(pfn, order, owner));
        }
        self.mm.take_back_slow(owner, pfn, idx, order).map(|()| self.mm.block_handle(pfn, order, owner))
    }

    /// Whether hardware reported a page of the block bad
    /// ([`memory_failure`](PageAllocator::memory_failure)) while it was held; such
    /// a block should be freed (the allocator then takes the page offline)
    /// rather than used. Checks the first page, where Linux's
    /// `PageHWPoison` of a small page lives.
    #[inline]
    pub fn block_poisoned(&self, block: &PageBlock) -> bool {
        self.mm.block_idx(block).is_ok_and(|idx| self.mm.desc(idx).has(PageFlags::HWPOISON))
    }

    /// The owner tag of `pfn`'s page, if a layer owns it.
    pub fn page_owner(&self, pfn: Pfn) -> Option<PageOwner> {
        let (_, page) = self.mm.pfn_to_desc(pfn)?;
        if page.has(PageFlags::OWNED) {
            PageOwner::new(page.owner())
        } else {
            None
        }
    }

    /// Reports a block whose contents its owner found wrong (for example a
    /// cached page that is not in its cache's state) as a bad page, through
    /// the hooks and the bad-page rate limit. Changes no state.
    pub fn report_bad_block(&self, block: &PageBlock, offset: usize) {
        if let Ok(idx) = self.mm.block_idx(block) {
            self.mm.report_bad_page(idx, BadPageReason::OwnerState { owner: block.owner(), offset }, 0);
        }
    }
}

impl PageAllocator {
    #[inline]
    pub(crate) fn alloc_block_on(
        &self,
        cpu: usize,
        nid: usize,
        key: &OwnerKey,
        gfp: Gfp,
        order: u32,
    ) -> Result<PageBlock, AllocError> {
        if key.map_id() != self.map_id() {
            return Err(AllocError::ForeignOwnerKey);
        }
        let owner = key.owner();
        let pfn = self.alloc_slow(&mut Locked(cpu), nid, gfp, order, true)?;
        let idx = self.pfn_to_idx(pfn).unwrap_or_default();
        // Nobody else knows the block yet, so marking it cannot race.
        self.desc(idx).set_owner(owner.id());
        Ok(self.block_handle(pfn, order, owner))
    }

    #[inline]
    pub(crate) fn free_block_on(&self, cpu: usize, block: PageBlock) -> Result<(), BlockError> {
        let Ok(idx) = self.block_idx(&block) else {
            return Err(BlockError::Foreign(block));
        };
        self.desc(idx).clear_owner();
        self.free_frozen_pages_on(&mut Locked(cpu), self.idx_to_pfn(idx), block.order()).map_err(BlockError::Free)
    }

    /// Turns an owned block into a plain one with one reference, as
    /// [`alloc_pages`](PageAllocator::alloc_pages) returns it (a
    /// [`PageGuard`](crate::PageGuard) given up). The refcount is set while
    /// the tag still guards the block, so no PFN call can claim it in
    /// between; then the tag goes.
    pub(crate) fn disown_block(&self, block: PageBlock) -> Pfn {
        let pfn = block.pfn();
        if let Ok(idx) = self.block_idx(&block) {
            let page = self.desc(idx);
            page.set_refcount(1);
            page.clear_owner();
        }
        pfn
    }

    #[cold]
    fn take_back_slow(&self, owner: PageOwner, pfn: Pfn, idx: PageIdx, order: u32) -> Result<(), FreeError> {
        let page = self.desc(idx);
        let (flags, got_order) = page.flags_and_order();
        if flags.contains(PageFlags::OWNED) && page.owner() != owner.id() {
            return Err(self.owned_error(pfn, idx));
        }
        if !flags.contains(PageFlags::ALLOCATED) {
            let err = self.validate_allocated(pfn).err().unwrap_or(FreeError::NotAllocated(pfn));
            // An owned, frozen page of this owner is one it still holds: a
            // second give-back of a page it already took back.
            return Err(if matches!(err, FreeError::Owned { .. }) { FreeError::DoubleFree(pfn) } else { err });
        }
        if got_order != order {
            return Err(FreeError::WrongOrder { pfn, allocated: got_order, given: order });
        }
        let embedder = flags.intersection(PageFlags::CHECK_AT_FREE);
        if embedder != PageFlags::EMPTY {
            return Err(FreeError::FlagsSet { pfn, flags: embedder });
        }
        // A plain block is marked first, so that the free paths refuse it
        // from the moment its refcount can read 0.
        let adopted = !flags.contains(PageFlags::OWNED);
        if adopted && !page.try_set_owner(owner.id()) {
            return Err(FreeError::DoubleFree(pfn));
        }
        if !page.refcount_exchange(1, 0) {
            if adopted {
                page.clear_owner();
            }
            let refcount = page.refcount();
            return Err(if refcount == 0 && !adopted {
                FreeError::DoubleFree(pfn)
            } else {
                FreeError::RefcountMismatch { pfn, refcount }
            });
        }
        Ok(())
    }

    /// [`FreeError::Owned`] for owned page `idx`.
    #[cold]
    pub(crate) fn owned_error(&self, pfn: Pfn, idx: PageIdx) -> FreeError {
        match PageOwner::new(self.desc(idx).owner()) {
            Some(owner) => FreeError::Owned { pfn, owner },
            None => FreeError::NotAllocated(pfn),
        }
    }

    #[inline(always)]
    fn block_handle(&self, pfn: Pfn, order: u32, owner: PageOwner) -> PageBlock {
        PageBlock::new(pfn, order, owner, self.map_id())
    }

    /// The block's descriptor index, if it is this allocator's.
    #[inline(always)]
    fn block_idx(&self, block: &PageBlock) -> Result<PageIdx, ()> {
        if block.map_id() != self.map_id() {
            return Err(());
        }
        // This allocator made the handle from a PFN of its map, so the
        // offset is in range; no second bounds check on the hot paths.
        Ok(block.pfn().0.wrapping_sub(self.mem.base_pfn) as PageIdx)
    }
}

impl CpuHandle<'_> {
    /// [`Blocks::alloc_block`] on this handle's CPU.
    ///
    /// # Errors
    /// As `alloc_block`.
    #[inline]
    pub fn alloc_block(&self, owner: &OwnerKey, gfp: Gfp, order: u32) -> Result<PageBlock, AllocError> {
        let mm = self.allocator();
        mm.alloc_block_on(self.cpu_id(), mm.node_of_cpu(self.cpu_id()), owner, gfp, order)
    }

    /// [`Blocks::free_block`] to this handle's CPU's lists.
    ///
    /// # Errors
    /// As `free_block`.
    #[inline]
    pub fn free_block(&self, block: PageBlock) -> Result<(), BlockError> {
        self.allocator().free_block_on(self.cpu_id(), block)
    }
}

/// Small enough for Miri, which checks the byte accessors' `unsafe` (in
/// `mem::rawmem`) along the allocator's own path here.
#[cfg(all(test, feature = "std"))]
mod tests {
    use crate::{Backing, Gfp, HugePages, MemoryMapBuilder, PageAllocator};

    /// 1 MiB of real memory: 256 pages.
    fn small_real_map() -> PageAllocator {
        MemoryMapBuilder::with_memory(1 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap()
    }

    #[test]
    fn held_blocks_have_zeroed_bytes_of_their_own() {
        let mm = small_real_map();
        let blocks = crate::Blocks::new(&mm);
        let key = blocks.new_owner_key().unwrap();
        let mut a = blocks.alloc_block(&key, Gfp::KERNEL | Gfp::ZERO, 0).unwrap();
        let mut b = blocks.alloc_block(&key, Gfp::KERNEL | Gfp::ZERO, 2).unwrap();
        let (bytes_a, bytes_b) = (blocks.block_bytes_mut(&mut a).unwrap(), blocks.block_bytes_mut(&mut b).unwrap());
        assert_eq!((bytes_a.len(), bytes_b.len()), (4096, 4 * 4096));
        assert!(bytes_a.iter().all(|&x| x == 0), "__GFP_ZERO");
        bytes_a.fill(0xa5);
        bytes_b.fill(0x5a);
        assert_eq!((blocks.block_bytes(&a).unwrap()[4095], blocks.block_bytes(&b).unwrap()[0]), (0xa5, 0x5a));
        let addr = mm.page_address(b.pfn()).unwrap();
        assert_eq!(mm.address_to_pfn(addr.as_ptr()), Some(b.pfn()));
        blocks.free_block(a).unwrap();
        // The page just freed holds 0xa5; __GFP_ZERO clears whichever comes.
        let mut c = blocks.alloc_block(&key, Gfp::KERNEL | Gfp::ZERO, 0).unwrap();
        assert!(blocks.block_bytes_mut(&mut c).unwrap().iter().all(|&x| x == 0), "__GFP_ZERO");
        assert!(blocks.block_bytes(&b).unwrap().iter().all(|&x| x == 0x5a), "the other block kept its bytes");
        blocks.free_block(b).unwrap();
        blocks.free_block(c).unwrap();
    }

    /// A block written on one thread and freed on another comes back to
    /// the first: the allocator's free and allocation must order the
    /// writes (Miri's data-race detector checks that they do).
    #[test]
    fn blocks_pass_between_threads_with_their_bytes() {
        let mm = small_real_map();
        let key = crate::Blocks::new(&mm).new_owner_key().unwrap();
        let (to_consumer, from_producer) = std::sync::mpsc::sync_channel(2);
        std::thread::scope(|scope| {
            let (mm, key) = (&mm, &key);
            scope.spawn(move || {
                for round in 1..=8u8 {
                    let mut block = crate::Blocks::new(mm).alloc_block(key, Gfp::KERNEL, round as u32 % 2).unwrap();
                    crate::Blocks::new(mm).block_bytes_mut(&mut block).unwrap().fill(round);
                    to_consumer.send((block, round)).unwrap();
                }
            });
            scope.spawn(move || {
                for (mut block, round) in from_producer {
                    let bytes = crate::Blocks::new(mm).block_bytes_mut(&mut block).unwrap();
                    assert!(bytes.iter().all(|&x| x == round), "round {round}");
                    bytes.fill(!round);
                    crate::Blocks::new(mm).free_block(block).unwrap();
                }
            });
        });
        assert_eq!(crate::Report::new(&mm).stats().bad_pages, 0);
    }

    /// A bulk free of owned blocks frees this map's blocks (their pages are
    /// free again and no longer owned) and gives another map's back.
    #[test]
    fn a_bulk_free_of_blocks_frees_ours_and_gives_foreign_ones_back() {
        let (mm, other) = (small_real_map(), small_real_map());
        let (blocks_of, others) = (crate::Blocks::new(&mm), crate::Blocks::new(&other));
        let (key, other_key) = (blocks_of.new_owner_key().unwrap(), others.new_owner_key().unwrap());
        crate::Cpus::new(&mm).drain_all_pages();
        let free_before = crate::Report::new(&mm).nr_free_pages();
        let mut blocks: alloc::vec::Vec<_> =
            (0..6).map(|i| blocks_of.alloc_block(&key, Gfp::KERNEL, i % 2).unwrap()).collect();
        let pfns: alloc::vec::Vec<_> = blocks.iter().map(|b| b.pfn()).collect();
        blocks.push(others.alloc_block(&other_key, Gfp::KERNEL, 0).unwrap());
        assert_eq!(blocks_of.free_blocks_bulk(&mut blocks), Ok(6));
        assert_eq!(blocks.len(), 1, "the other map's block is given back");
        assert!(pfns.iter().all(|&pfn| blocks_of.page_owner(pfn).is_none()));
        crate::Cpus::new(&mm).drain_all_pages();
        assert_eq!(crate::Report::new(&mm).nr_free_pages(), free_before);
        others.free_block(blocks.pop().unwrap()).unwrap();
        assert_eq!(blocks_of.free_blocks_bulk(&mut blocks), Ok(0));
    }

    /// Blocks through a `BlockStack` (kept as PFNs, handles rebuilt on the
    /// pop) keep their bytes, and a lent `BlockRef` reads them.
    #[test]
    fn blocks_keep_their_bytes_through_a_block_stack() {
        let mm = small_real_map();
        let blocks = crate::Blocks::new(&mm);
        let key = blocks.new_owner_key().unwrap();
        let mut stack = crate::BlockStack::new(&key, 0);
        for i in 0..4u8 {
            let mut block = blocks.alloc_block(&key, Gfp::KERNEL, 0).unwrap();
            blocks.block_bytes_mut(&mut block).unwrap().fill(i);
            stack.push(block).unwrap();
        }
        {
            let lent = stack.get(1).unwrap();
            assert!(blocks.block_bytes(&lent).unwrap().iter().all(|&b| b == 1));
        }
        for i in (0..4u8).rev() {
            let block = stack.pop().unwrap();
            assert!(blocks.block_bytes(&block).unwrap().iter().all(|&b| b == i));
            blocks.free_block(block).unwrap();
        }
        assert!(blocks.release_owner_key(key));
    }
}
