//! [`PageSource`]: one method set over the map and every handle, so code
//! written once (a buffer pool, a slab, a test harness) runs on the shared
//! API, on a CPU handle or on a pinned CPU's fast path, with safe byte
//! access through owned blocks on all of them.
//!
//! Owns only the trait and its three implementations; every call forwards
//! to the path its type already has. It must not add a path of its own.
//!
//! The trait is sealed: these three are its only implementations. An
//! adapter that lends its [`OwnerKey`] to a source (`X86Frames`, whose
//! `unsafe impl FrameAllocator` promises a frame is nobody else's) must
//! not rest that promise on code a caller wrote: a source of the caller's
//! could keep the key's block, take it back with the lent key and return
//! it twice.
#![deny(unsafe_code)]

use crate::mem::owned::OwnerKey;
use crate::mem::owned::PageBlock;
use crate::page_alloc::block::BlockError;
use crate::page_alloc::bulk::BulkFreeError;
use crate::types::error::{AllocError, FreeError};
use crate::types::gfp::Gfp;
use crate::{CpuHandle, PageAllocator, Pfn, PinnedCpu};

/// Allocation, free, bulk, references and owned blocks, the same on
/// `&PageAllocator` (the shared API: any thread, the per-CPU cache), a
/// [`CpuHandle`] (a named CPU's lists) and a [`PinnedCpu`] (the owner's
/// magazine, no lock and no atomic). Each method has the semantics, errors
/// and costs of the method of the same name on the implementing type.
///
/// ```
/// use mmkit::{Blocks, Cpus, Gfp, MemoryMapBuilder, PageSource, Report};
///
/// /// A tiny pool that works on any source.
/// fn fill_and_check(source: &mut impl PageSource) {
///     let pages: Vec<_> = (0..8).map(|_| source.alloc_pages(Gfp::KERNEL, 0).unwrap()).collect();
///     for &pfn in &pages {
///         source.free_pages(pfn, 0).unwrap();
///     }
///     let key = Blocks::new(source.allocator()).new_owner_key().unwrap();
///     let mut block = source.alloc_block(&key, Gfp::KERNEL, 0).unwrap();
///     if let Some(bytes) = Blocks::new(source.allocator()).block_bytes_mut(&mut block) {
///         bytes[0] = 7; // safe bytes: the block is owned, nobody else frees it
///     }
///     source.free_block(block).unwrap();
///     assert!(Blocks::new(source.allocator()).release_owner_key(key));
/// }
///
/// let mm = MemoryMapBuilder::with_memory(64 << 20).nr_cpus(2).build().unwrap();
/// fill_and_check(&mut &mm);                      // the shared API
/// fill_and_check(&mut Cpus::new(&mm).cpu(1).unwrap());       // CPU 1's lists
/// fill_and_check(&mut Cpus::new(&mm).pin_cpu(0).unwrap());   // a pinned CPU's fast path
/// Cpus::new(&mm).drain_all_pages();
/// Report::new(&mm).check_invariants().unwrap();
/// ```
///
/// Sealed: no type outside this crate implements it.
///
/// ```compile_fail
/// use mmkit::{PageAllocator, PageSource};
/// struct Mine<'a>(&'a PageAllocator);
/// impl PageSource for Mine<'_> { // error: the trait is sealed
/// #   fn allocator(&self) -> &PageAllocator { self.0 }
/// #   fn alloc_pages(&mut self, g: mmkit::Gfp, o: u32) -> Result<mmkit::Pfn, mmkit::AllocError> { todo!() }
/// #   fn free_pages(&mut self, p: mmkit::Pfn, o: u32) -> Result<(), mmkit::FreeError> { todo!() }
/// #   fn put_page(&mut self, p: mmkit::Pfn) -> Result<(), mmkit::FreeError> { todo!() }
/// #   fn alloc_pages_bulk(&mut self, g: mmkit::Gfp, a: &mut [Option<mmkit::Pfn>]) -> usize { 0 }
/// #   fn free_pages_bulk(&mut self, p: &[mmkit::Pfn]) -> Result<usize, mmkit::BulkFreeError> { todo!() }
/// #   fn alloc_block(&mut self, k: &mmkit::OwnerKey, g: mmkit::Gfp, o: u32) -> Result<mmkit::PageBlock, mmkit::AllocError> { todo!() }
/// #   fn free_block(&mut self, b: mmkit::PageBlock) -> Result<(), mmkit::BlockError> { todo!() }
/// }
/// ```
pub trait PageSource: sealed::Sealed {
    /// The allocator behind this source (for everything else: counters,
    /// byte access to owned blocks, drains).
    fn allocator(&self) -> &PageAllocator;

    /// Allocates 2^`order` pages (see [`PageAllocator::alloc_pages`]).
    ///
    /// # Errors
    /// As [`PageAllocator::alloc_pages_node`].
    fn alloc_pages(&mut self, gfp: Gfp, order: u32) -> Result<Pfn, AllocError>;

    /// Frees a block with its allocation order (see
    /// [`PageAllocator::free_pages`]).
    ///
    /// # Errors
    /// As [`PageAllocator::free_pages`].
    fn free_pages(&mut self, pfn: Pfn, order: u32) -> Result<(), FreeError>;

    /// Drops a reference to the page or compound page holding `pfn` (see
    /// [`PageAllocator::put_page`]).
    ///
    /// # Errors
    /// As [`PageAllocator::put_page`].
    fn put_page(&mut self, pfn: Pfn) -> Result<(), FreeError>;

    /// Fills the empty slots of `page_array` with order-0 pages; how many
    /// slots from the start are filled (see
    /// [`PageAllocator::alloc_pages_bulk`]).
    fn alloc_pages_bulk(&mut self, gfp: Gfp, page_array: &mut [Option<Pfn>]) -> usize;

    /// Frees blocks allocated with refcount 1 (see
    /// [`PageAllocator::free_pages_bulk`]).
    ///
    /// # Errors
    /// As [`PageAllocator::free_pages_bulk`].
    fn free_pages_bulk(&mut self, pfns: &[Pfn]) -> Result<usize, BulkFreeError>;

    /// Allocates a block owned by layer `owner` (see
    /// [`Blocks::alloc_block`](crate::Blocks::alloc_block)); its bytes are reachable safely
    /// through [`Blocks::block_bytes`](crate::Blocks::block_bytes).
    ///
    /// # Errors
    /// As [`PageAllocator::alloc_pages`].
    fn alloc_block(&mut self, owner: &OwnerKey, gfp: Gfp, order: u32) -> Result<PageBlock, AllocError>;

    /// Frees an owned block (see [`Blocks::free_block`](crate::Blocks::free_block)).
    ///
    /// # Errors
    /// As [`Blocks::free_block`](crate::Blocks::free_block).
    fn free_block(&mut self, block: PageBlock) -> Result<(), BlockError>;
}

mod sealed {
    /// The seal: only this module's impls exist.
    pub trait Sealed {}
    impl Sealed for &crate::PageAllocator {}
    impl Sealed for crate::CpuHandle<'_> {}
    impl Sealed for crate::PinnedCpu<'_> {}
}

impl PageSource for &PageAllocator {
    fn allocator(&self) -> &PageAllocator {
        self
    }
    #[inline]
    fn alloc_pages(&mut self, gfp: Gfp, order: u32) -> Result<Pfn, AllocError> {
        PageAllocator::alloc_pages(self, gfp, order)
    }
    #[inline]
    fn free_pages(&mut self, pfn: Pfn, order: u32) -> Result<(), FreeError> {
        PageAllocator::free_pages(self, pfn, order)
    }
    fn put_page(&mut self, pfn: Pfn) -> Result<(), FreeError> {
        PageAllocator::put_page(self, pfn)
    }
    fn alloc_pages_bulk(&mut self, gfp: Gfp, page_array: &mut [Option<Pfn>]) -> usize {
        PageAllocator::alloc_pages_bulk(self, gfp, page_array)
    }
    fn free_pages_bulk(&mut self, pfns: &[Pfn]) -> Result<usize, BulkFreeError> {
        PageAllocator::free_pages_bulk(self, pfns)
    }
    fn alloc_block(&mut self, owner: &OwnerKey, gfp: Gfp, order: u32) -> Result<PageBlock, AllocError> {
        crate::Blocks::new(self).alloc_block(owner, gfp, order)
    }
    fn free_block(&mut self, block: PageBlock) -> Result<(), BlockError> {
        crate::Blocks::new(self).free_block(block)
    }
}

impl PageSource for CpuHandle<'_> {
    fn allocator(&self) -> &PageAllocator {
        CpuHandle::allocator(self)
    }
    #[inline]
    fn alloc_pages(&mut self, gfp: Gfp, order: u32) -> Result<Pfn, AllocError> {
        CpuHandle::alloc_pages(self, gfp, order)
    }
    #[inline]
    fn free_pages(&mut self, pfn: Pfn, order: u32) -> Result<(), FreeError> {
        CpuHandle::free_pages(self, pfn, order)
    }
    fn put_page(&mut self, pfn: Pfn) -> Result<(), FreeError> {
        CpuHandle::put_page(self, pfn)
    }
    fn alloc_pages_bulk(&mut self, gfp: Gfp, page_array: &mut [Option<Pfn>]) -> usize {
        CpuHandle::alloc_pages_bulk(self, gfp, page_array)
    }
    fn free_pages_bulk(&mut self, pfns: &[Pfn]) -> Result<usize, BulkFreeError> {
        CpuHandle::free_pages_bulk(self, pfns)
    }
    fn alloc_block(&mut self, owner: &OwnerKey, gfp: Gfp, order: u32) -> Result<PageBlock, AllocError> {
        CpuHandle::alloc_block(self, owner, gfp, order)
    }
    fn free_block(&mut self, block: PageBlock) -> Result<(), BlockError> {
        CpuHandle::free_block(self, block)
    }
}

impl PageSource for PinnedCpu<'_> {
    fn allocator(&self) -> &PageAllocator {
        PinnedCpu::allocator(self)
    }
    #[inline]
    fn alloc_pages(&mut self, gfp: Gfp, order: u32) -> Result<Pfn, AllocError> {
        PinnedCpu::alloc_pages(self, gfp, order)
    }
    #[inline]
    fn free_pages(&mut self, pfn: Pfn, order: u32) -> Result<(), FreeError> {
        PinnedCpu::free_pages(self, pfn, order)
    }
    fn put_page(&mut self, pfn: Pfn) -> Result<(), FreeError> {
        PinnedCpu::put_page(self, pfn)
    }
    fn alloc_pages_bulk(&mut self, gfp: Gfp, page_array: &mut [Option<Pfn>]) -> usize {
        PinnedCpu::alloc_pages_bulk(self, gfp, page_array)
    }
    fn free_pages_bulk(&mut self, pfns: &[Pfn]) -> Result<usize, BulkFreeError> {
        PinnedCpu::free_pages_bulk(self, pfns)
    }
    fn alloc_block(&mut self, owner: &OwnerKey, gfp: Gfp, order: u32) -> Result<PageBlock, AllocError> {
        PinnedCpu::alloc_block(self, owner, gfp, order)
    }
    fn free_block(&mut self, block: PageBlock) -> Result<(), BlockError> {
        PinnedCpu::free_block(self, block)
    }
}
