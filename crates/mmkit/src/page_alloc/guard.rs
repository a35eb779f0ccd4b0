//! [`PageGuard`]: an owned block of the shared API, freed when dropped —
//! the handle for callers who want Rust's ownership, not a bare [`Pfn`],
//! to decide who may free, read and write a block.
//!
//! Owns the map's guard tag (one [`OwnerKey`] tag, taken the first time a
//! guard is made and held for the map's life) and the guard type. Must
//! not touch free lists or per-CPU lists: a guard is an owned block
//! (`page_alloc::block`) whose key the map keeps to itself, so allocation
//! and free go through the block paths.
//!
//! Why a tag and not just the borrow: a guard that held a plain block
//! (refcount 1, no owner) could be freed behind its back by
//! `free_pages(guard.pfn())`, and once that page was allocated again the
//! guard's drop freed the new holder's block. Marked with a tag whose key
//! no caller can hold, the block is refused by every PFN call
//! (`free_pages`, `put_page`, `free_frozen_pages`, the bulk frees,
//! `free_contig_range`: [`FreeError::Owned`]), by every other layer's
//! `take_back_block` and by contiguous allocation's migration; the guard
//! is the one way to the block, so its bytes can be lent out.
#![deny(unsafe_code)]

use crate::mem::owned::{OwnerKey, PageBlock};
use crate::types::error::{AllocError, FreeError};
use crate::types::gfp::Gfp;
use crate::types::page_flags::PageOwner;
use crate::{PageAllocator, Pfn};
use core::sync::atomic::Ordering::{AcqRel, Acquire};

/// A block of 2^order pages that its guard alone owns, freed when the
/// guard is dropped.
///
/// The guard borrows its map, so it can neither outlive it nor reach
/// another; it is not `Clone`, and it is consumed by [`free`](Self::free)
/// and [`into_pfn`](Self::into_pfn) (the `Box::into_raw` of a guard), so
/// it is freed once. Its block carries the map's guard tag: no call that
/// takes a bare PFN frees it ([`FreeError::Owned`]), so nobody can free
/// it behind the guard's back and the guard's bytes
/// ([`bytes`](Self::bytes), [`bytes_mut`](Self::bytes_mut)) are its own.
/// A guard forgotten with `mem::forget` leaves its block allocated, which
/// [`check_invariants`](crate::Report::check_invariants) counts as such.
///
/// The tag is one of the map's [`PageOwner::MAX`] owner tags, taken by the
/// first guard: a map whose tags are all held by [`OwnerKey`]s cannot make
/// guards ([`AllocError::OwnerTagsExhausted`]).
///
/// ```
/// use mmkit::{Backing, FreeError, Gfp, HugePages, MemoryMapBuilder, Report};
///
/// let mm = MemoryMapBuilder::with_memory(16 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap();
/// let before = Report::new(&mm).nr_free_pages() + Report::new(&mm).nr_pcp_pages();
/// {
///     let mut block = mm.alloc_pages_guarded(Gfp::KERNEL | Gfp::ZERO, 2).unwrap();
///     block.bytes_mut().unwrap()[..5].copy_from_slice(b"hello");
///     // A bare PFN grants nothing over a guarded block:
///     assert!(matches!(mm.free_pages(block.pfn(), 2), Err(FreeError::Owned { .. })));
///     assert_eq!(&block.bytes().unwrap()[..5], b"hello");
/// } // freed here
/// assert_eq!(Report::new(&mm).nr_free_pages() + Report::new(&mm).nr_pcp_pages(), before);
///
/// // Back to the PFN world, where the caller frees it by hand:
/// let kept = mm.alloc_pages_guarded(Gfp::KERNEL, 0).unwrap().into_pfn();
/// mm.free_pages(kept, 0).unwrap();
/// ```
///
/// ```compile_fail
/// # let mm = mmkit::MemoryMapBuilder::with_memory(16 << 20).build().unwrap();
/// let guard = mm.alloc_pages_guarded(mmkit::Gfp::KERNEL, 0).unwrap();
/// let twin = guard.clone(); // not Clone: one owner per block
/// ```
#[must_use = "a guard dropped at once frees its pages at once"]
pub struct PageGuard<'a> {
    mm: &'a PageAllocator,
    /// `Some` until the guard is consumed; taken by `free`, `into_pfn` and
    /// the drop.
    block: Option<PageBlock>,
}

impl<'a> PageGuard<'a> {
    /// First page of the block.
    #[inline]
    pub fn pfn(&self) -> Pfn {
        self.block.as_ref().map_or(Pfn(0), PageBlock::pfn)
    }

    /// The block's order.
    #[inline]
    pub fn order(&self) -> u32 {
        self.block.as_ref().map_or(0, PageBlock::order)
    }

    /// The allocator the block came from.
    #[inline]
    pub fn allocator(&self) -> &'a PageAllocator {
        self.mm
    }

    /// The block's bytes (`2^order` pages); `None` on a metadata-only map.
    #[inline]
    pub fn bytes(&self) -> Option<&[u8]> {
        crate::Blocks::new(self.mm).block_bytes(self.block.as_ref()?)
    }

    /// The block's bytes, writable: the guard is the block's only owner,
    /// so `&mut self` is exclusive access. `None` on a metadata-only map.
    #[inline]
    pub fn bytes_mut(&mut self) -> Option<&mut [u8]> {
        crate::Blocks::new(self.mm).block_bytes_mut(self.block.as_mut()?)
    }

    /// Gives up the guard: the block becomes a plain block with one
    /// reference, as [`alloc_pages`](PageAllocator::alloc_pages) returns
    /// it, and the caller frees it (with this order) from now on.
    #[inline]
    pub fn into_pfn(mut self) -> Pfn {
        match self.block.take() {
            Some(block) => self.mm.disown_block(block),
            None => Pfn(0),
        }
    }

    /// Frees the block now and says how it went.
    ///
    /// # Errors
    /// [`FreeError::BadPage`] when the block failed `free_pages_prepare`
    /// (embedder flags left set, for instance): reported and leaked, as
    /// any bad page.
    #[inline]
    pub fn free(mut self) -> Result<(), FreeError> {
        match self.block.take() {
            Some(block) => self.mm.free_guarded(block),
            None => Ok(()),
        }
    }
}

impl core::fmt::Debug for PageGuard<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PageGuard").field("pfn", &self.pfn()).field("order", &self.order()).finish_non_exhaustive()
    }
}

impl Drop for PageGuard<'_> {
    fn drop(&mut self) {
        if let Some(block) = self.block.take() {
            // Refused only for a bad page, which the free path has already
            // reported; a drop has no one to return the error to.
            let _ = self.mm.free_guarded(block);
        }
    }
}

impl PageAllocator {
    /// [`alloc_pages`](Self::alloc_pages), with the block owned by a
    /// [`PageGuard`] that frees it when dropped.
    ///
    /// # Errors
    /// As [`alloc_pages`](Self::alloc_pages);
    /// [`AllocError::OwnerTagsExhausted`] when the map has no tag left for
    /// its guards (all are held by [`OwnerKey`]s).
    #[inline]
    pub fn alloc_pages_guarded(&self, gfp: Gfp, order: u32) -> Result<PageGuard<'_>, AllocError> {
        let key = self.guard_key()?;
        let block = crate::Blocks::new(self).alloc_block(&key, gfp, order)?;
        Ok(PageGuard { mm: self, block: Some(block) })
    }

    /// The key of the map's guard tag, taking a tag the first time. The
    /// key never leaves this module, so no caller can take a guarded block
    /// back or hand one out.
    #[inline]
    fn guard_key(&self) -> Result<OwnerKey, AllocError> {
        let tag = self.guard_tag.load(Acquire);
        match PageOwner::new(tag) {
            Some(owner) => Ok(OwnerKey::new(owner, self.map_id())),
            None => self.take_guard_tag(),
        }
    }

    #[cold]
    fn take_guard_tag(&self) -> Result<OwnerKey, AllocError> {
        let key = crate::Blocks::new(self).new_owner_key().map_err(|_| AllocError::OwnerTagsExhausted)?;
        match self.guard_tag.compare_exchange(0, key.owner().id(), AcqRel, Acquire) {
            Ok(_) => Ok(key),
            Err(theirs) => {
                // Another thread's first guard won: give ours back (no
                // page carries it yet) and use theirs.
                crate::Blocks::new(self).release_owner_key(key);
                let owner = PageOwner::new(theirs).ok_or(AllocError::OwnerTagsExhausted)?;
                Ok(OwnerKey::new(owner, self.map_id()))
            }
        }
    }

    /// Frees a guard's block through the owned-block path.
    fn free_guarded(&self, block: PageBlock) -> Result<(), FreeError> {
        crate::Blocks::new(self).free_block(block).map_err(|e| match e {
            crate::page_alloc::block::BlockError::Free(e) => e,
            // The guard borrows this map, so its block is this map's.
            crate::page_alloc::block::BlockError::Foreign(block) => FreeError::OutOfRange(block.pfn()),
        })
    }
}

/// Small enough for Miri, which checks the byte accessors' `unsafe` (in
/// `mem::rawmem`) along the guard's path.
#[cfg(all(test, feature = "std"))]
mod tests {
    use crate::{Backing, FreeError, Gfp, HugePages, MemoryMapBuilder};

    #[test]
    fn guards_lend_their_own_bytes_and_nobody_frees_them_by_pfn() {
        let mm = MemoryMapBuilder::with_memory(1 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap();
        let mut a = mm.alloc_pages_guarded(Gfp::KERNEL | Gfp::ZERO, 0).unwrap();
        let mut b = mm.alloc_pages_guarded(Gfp::KERNEL | Gfp::ZERO, 1).unwrap();
        a.bytes_mut().unwrap().fill(0xa5);
        b.bytes_mut().unwrap().fill(0x5a);
        assert!(matches!(mm.free_pages(a.pfn(), 0), Err(FreeError::Owned { .. })));
        assert!(a.bytes().unwrap().iter().all(|&x| x == 0xa5));
        assert_eq!(b.bytes().unwrap().len(), 2 * 4096);
        assert!(b.bytes().unwrap().iter().all(|&x| x == 0x5a));
        let pfn = a.into_pfn();
        assert_eq!(crate::Blocks::new(&mm).page_owner(pfn), None, "plain again");
        mm.free_pages(pfn, 0).unwrap();
        assert_eq!(b.free(), Ok(()));
    }
}
