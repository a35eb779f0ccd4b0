//! An adapter from any [`PageSource`] to the `x86_64` crate's
//! `FrameAllocator` and `FrameDeallocator` (feature `x86_64`), so that a
//! kernel written against that crate's page-table code can take its frames
//! from mmkit.
//!
//! Owns only the adapter: a frame of 4 KiB, 2 MiB or 1 GiB is a block of
//! order 0, 9 or 18 from the source, with the source's paths, errors and
//! costs. It must not keep frames of its own. The map's PFNs must be
//! physical frame numbers (a metadata-only map over the machine's memory)
//! and its pages 4 KiB, which [`X86Frames::new`] checks.

use crate::page_alloc::source::PageSource;
use crate::types::error::FreeError;
use crate::types::gfp::Gfp;
use crate::Pfn;
use x86_64::structures::paging::{FrameAllocator, FrameDeallocator, PageSize, PhysFrame, Size1GiB, Size2MiB, Size4KiB};
use x86_64::PhysAddr;

/// Bits of a 4 KiB frame's offset.
const FRAME_SHIFT: u32 = 12;

/// A [`PageSource`] seen as an x86-64 frame allocator.
///
/// ```
/// use mmkit::{Gfp, MemoryMapBuilder, Report, X86Frames};
/// use x86_64::structures::paging::{FrameAllocator, FrameDeallocator, PhysFrame, Size2MiB, Size4KiB};
///
/// let mm = MemoryMapBuilder::with_memory(64 << 20).build().unwrap();
/// let mut frames = X86Frames::new(&mm, Gfp::KERNEL).unwrap();
/// let small: PhysFrame<Size4KiB> = frames.allocate_frame().unwrap();
/// let huge: PhysFrame<Size2MiB> = frames.allocate_frame().unwrap();
/// assert_eq!(huge.start_address().as_u64() % (2 << 20), 0);
/// // SAFETY: the trait's contract holds: nothing maps these frames any more.
/// unsafe {
///     frames.deallocate_frame(small);
///     frames.deallocate_frame(huge);
/// }
/// Report::new(&mm).check_invariants().unwrap();
/// ```
pub struct X86Frames<P: PageSource> {
    source: P,
    gfp: Gfp,
}

impl<P: PageSource> X86Frames<P> {
    /// Frames from `source`, allocated with `gfp`; `None` unless the map's
    /// pages are 4 KiB.
    pub fn new(source: P, gfp: Gfp) -> Option<Self> {
        (source.allocator().geometry().page_shift == FRAME_SHIFT).then_some(Self { source, gfp })
    }

    /// The source, for everything else.
    pub fn source(&mut self) -> &mut P {
        &mut self.source
    }

    /// The source back.
    pub fn into_inner(self) -> P {
        self.source
    }

    /// Frees `frame` and says how it went, which
    /// `FrameDeallocator::deallocate_frame` cannot: a frame the source
    /// never handed out, or freed already, is refused and changes nothing.
    ///
    /// # Errors
    /// As [`PageAllocator::free_pages`](crate::PageAllocator::free_pages).
    pub fn try_deallocate<S: PageSize>(&mut self, frame: PhysFrame<S>) -> Result<(), FreeError> {
        let pfn = Pfn(frame.start_address().as_u64() >> FRAME_SHIFT);
        self.source.free_pages(pfn, order_of::<S>())
    }

    fn allocate<S: PageSize>(&mut self) -> Option<PhysFrame<S>> {
        let order = order_of::<S>();
        let pfn = self.source.alloc_pages(self.gfp, order).ok()?;
        let frame = pfn
            .0
            .checked_mul(1 << FRAME_SHIFT)
            .and_then(|addr| PhysAddr::try_new(addr).ok())
            .and_then(|addr| PhysFrame::from_start_address(addr).ok());
        if frame.is_none() {
            // A PFN past the 52-bit physical address space: not a frame.
            let _ = self.source.free_pages(pfn, order);
        }
        frame
    }
}

/// The buddy order of a frame size: 0 for 4 KiB, 9 for 2 MiB, 18 for 1 GiB.
fn order_of<S: PageSize>() -> u32 {
    (S::SIZE >> FRAME_SHIFT).trailing_zeros()
}

// SAFETY: every frame comes from the page allocator, which hands a block
// out only while it is free and marks it allocated in the same step, so a
// frame is never returned twice before it is freed (the allocator's
// central invariant, which its model tests and `check_invariants` check).
unsafe impl<P: PageSource> FrameAllocator<Size4KiB> for X86Frames<P> {
    fn allocate_frame(&mut self) -> Option<PhysFrame<Size4KiB>> {
        self.allocate()
    }
}

// SAFETY: as for 4 KiB frames; a 2 MiB frame is one order-9 block.
unsafe impl<P: PageSource> FrameAllocator<Size2MiB> for X86Frames<P> {
    fn allocate_frame(&mut self) -> Option<PhysFrame<Size2MiB>> {
        self.allocate()
    }
}

// SAFETY: as for 4 KiB frames; a 1 GiB frame is one order-18 block (maps
// built with `max_page_order(18)` or more; others return `None`).
unsafe impl<P: PageSource> FrameAllocator<Size1GiB> for X86Frames<P> {
    fn allocate_frame(&mut self) -> Option<PhysFrame<Size1GiB>> {
        self.allocate()
    }
}

/// Frees frames as [`X86Frames::try_deallocate`] does; a refused free
/// (a double free) changes nothing and is dropped, as the trait returns
/// nothing.
impl<P: PageSource> FrameDeallocator<Size4KiB> for X86Frames<P> {
    unsafe fn deallocate_frame(&mut self, frame: PhysFrame<Size4KiB>) {
        let _ = self.try_deallocate(frame);
    }
}

/// As for 4 KiB frames.
impl<P: PageSource> FrameDeallocator<Size2MiB> for X86Frames<P> {
    unsafe fn deallocate_frame(&mut self, frame: PhysFrame<Size2MiB>) {
        let _ = self.try_deallocate(frame);
    }
}

/// As for 4 KiB frames.
impl<P: PageSource> FrameDeallocator<Size1GiB> for X86Frames<P> {
    unsafe fn deallocate_frame(&mut self, frame: PhysFrame<Size1GiB>) {
        let _ = self.try_deallocate(frame);
    }
}
