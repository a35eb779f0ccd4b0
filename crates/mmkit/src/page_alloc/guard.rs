//! [`PageGuard`]: a block of the shared API that frees itself when dropped,
//! for callers who want Rust's ownership to do the bookkeeping that a bare
//! [`Pfn`] leaves to them.
//!
//! Owns only the guard; allocation and free go through the shared API's
//! ordinary paths (`alloc_path`, `free`), whose errors and costs it keeps.
//! A guard costs nothing per call beyond the reference it carries: the
//! free on drop is the same `free_pages` a caller would write.
#![deny(unsafe_code)]

use crate::types::error::{AllocError, FreeError};
use crate::types::gfp::Gfp;
use crate::{PageAllocator, Pfn};

/// A block of 2^order pages with its one reference, freed with
/// [`PageAllocator::free_pages`] when the guard is dropped.
///
/// The guard borrows its map, so it can neither outlive it nor be freed
/// by another; it is consumed by [`free`](Self::free) and
/// [`into_pfn`](Self::into_pfn) (the `Box::into_raw` of a guard). A guard
/// forgotten with `mem::forget` leaves its block allocated, which
/// [`check_invariants`](crate::Report::check_invariants) counts as such.
///
/// Take the PFN out with [`into_pfn`](Self::into_pfn) to manage the block
/// by hand again, or free it with [`free`](Self::free) to see the result.
/// Freeing the guard's PFN by hand as well is a double free, as with a
/// bare PFN: the drop's free is refused while the block is still free
/// ([`FreeError::DoubleFree`], which a drop cannot return, so it is
/// dropped), but once the block has been allocated again it frees the new
/// owner's block. The map's state stays consistent either way.
///
/// ```
/// use mmkit::{Gfp, MemoryMapBuilder};
///
/// let mm = MemoryMapBuilder::with_memory(16 << 20).build().unwrap();
/// let before = mm.nr_free_pages() + mm.nr_pcp_pages();
/// {
///     let block = mm.alloc_pages_guarded(Gfp::KERNEL, 2).unwrap();
///     assert_eq!(block.order(), 2);
///     let _pfn = block.pfn(); // use the pages
/// } // freed here
/// assert_eq!(mm.nr_free_pages() + mm.nr_pcp_pages(), before);
///
/// let kept = mm.alloc_pages_guarded(Gfp::KERNEL, 0).unwrap().into_pfn();
/// mm.free_pages(kept, 0).unwrap(); // by hand again
/// ```
#[must_use = "a guard dropped at once frees its pages at once"]
pub struct PageGuard<'a> {
    mm: &'a PageAllocator,
    pfn: Pfn,
    order: u32,
}

impl<'a> PageGuard<'a> {
    /// First page of the block.
    #[inline]
    pub fn pfn(&self) -> Pfn {
        self.pfn
    }

    /// The block's order.
    #[inline]
    pub fn order(&self) -> u32 {
        self.order
    }

    /// The allocator the block came from.
    #[inline]
    pub fn allocator(&self) -> &'a PageAllocator {
        self.mm
    }

    /// Gives up the guard and returns the block's first page: the caller
    /// frees it (with this order) from now on.
    #[inline]
    pub fn into_pfn(self) -> Pfn {
        let pfn = self.pfn;
        core::mem::forget(self);
        pfn
    }

    /// Frees the block now and says how it went.
    ///
    /// # Errors
    /// As [`PageAllocator::free_pages`] (the block was freed behind the
    /// guard's back, for instance).
    #[inline]
    pub fn free(self) -> Result<(), FreeError> {
        let (mm, pfn, order) = (self.mm, self.pfn, self.order);
        core::mem::forget(self);
        mm.free_pages(pfn, order)
    }
}

impl core::fmt::Debug for PageGuard<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("PageGuard").field("pfn", &self.pfn).field("order", &self.order).finish_non_exhaustive()
    }
}

impl Drop for PageGuard<'_> {
    fn drop(&mut self) {
        // Refused only after a free behind the guard's back (see the type's
        // doc); a drop has no one to return the error to.
        let _ = self.mm.free_pages(self.pfn, self.order);
    }
}

impl PageAllocator {
    /// [`alloc_pages`](Self::alloc_pages), with the block in a
    /// [`PageGuard`] that frees it when dropped.
    ///
    /// # Errors
    /// As [`alloc_pages`](Self::alloc_pages).
    #[inline]
    pub fn alloc_pages_guarded(&self, gfp: Gfp, order: u32) -> Result<PageGuard<'_>, AllocError> {
        let pfn = self.alloc_pages(gfp, order)?;
        Ok(PageGuard { mm: self, pfn, order })
    }
}
