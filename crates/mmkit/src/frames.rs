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
//!
//! # Why a frame is never handed out twice
//! `FrameAllocator` is an `unsafe` trait: the page-table code trusts that
//! a frame it gets is used by nobody else. So the adapter's frames must
//! not come back to the allocator through any safe call but its own
//! deallocation. Each adapter takes an [`OwnerKey`] from the map and hands
//! every frame out as a block of that key ([`Blocks::alloc_block`](crate::Blocks::alloc_block),
//! then [`Blocks::hand_out_block`](crate::Blocks::hand_out_block)): allocated, marked `OWNED` with
//! the key's tag, one reference. Every ordinary free path (`free_pages`,
//! `put_page`, `free_frozen_pages`, the bulk and range frees, a
//! [`PageGuard`](crate::PageGuard)'s drop) refuses such a page with
//! [`FreeError::Owned`], contiguous allocation does not migrate it, and
//! [`take_back_block`](crate::Blocks::take_back_block) gives it back only
//! to the holder of this adapter's key (not `Clone`; a tag is reissued only
//! once no page carries it). The adapter's deallocations are `unsafe`, with
//! the contract of `FrameDeallocator::deallocate_frame` written down.

use crate::mem::owned::OwnerKey;
use crate::page_alloc::source::PageSource;
use crate::types::error::FreeError;
use crate::types::gfp::Gfp;
use crate::PageAllocator;
use crate::Pfn;
use x86_64::structures::paging::{FrameAllocator, FrameDeallocator, PageSize, PhysFrame, Size1GiB, Size2MiB, Size4KiB};
use x86_64::PhysAddr;

/// Bits of a 4 KiB frame's offset.
const FRAME_SHIFT: u32 = 12;

/// A [`PageSource`] seen as an x86-64 frame allocator, whose frames only
/// this adapter's `unsafe` deallocation gives back (see the module doc).
///
/// Safe code cannot free a frame the adapter handed out:
///
/// ```
/// use mmkit::{FreeError, Gfp, MemoryMapBuilder, Pfn, X86Frames};
/// use x86_64::structures::paging::{FrameAllocator, PhysFrame, Size4KiB};
///
/// let mm = MemoryMapBuilder::with_memory(64 << 20).build().unwrap();
/// let mut frames = X86Frames::new(&mm, Gfp::KERNEL).unwrap();
/// let table: PhysFrame<Size4KiB> = frames.allocate_frame().unwrap();
/// let pfn = Pfn(table.start_address().as_u64() >> 12);
/// assert!(matches!(mm.free_pages(pfn, 0), Err(FreeError::Owned { .. })));
/// assert!(matches!(mm.put_page(pfn), Err(FreeError::Owned { .. })));
/// let next: PhysFrame<Size4KiB> = frames.allocate_frame().unwrap();
/// assert_ne!(next, table);
/// ```
///
/// and giving a frame back is `unsafe`, with the trait's contract:
///
/// ```compile_fail
/// # use mmkit::{Gfp, MemoryMapBuilder, X86Frames};
/// # use x86_64::structures::paging::{FrameAllocator, PhysFrame, Size4KiB};
/// # let mm = MemoryMapBuilder::with_memory(64 << 20).build().unwrap();
/// # let mut frames = X86Frames::new(&mm, Gfp::KERNEL).unwrap();
/// let table: PhysFrame<Size4KiB> = frames.allocate_frame().unwrap();
/// frames.try_deallocate(table).unwrap(); // error: unsafe without an unsafe block
/// ```
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
///
/// An adapter takes one of its map's [`PageOwner::MAX`](crate::PageOwner::MAX)
/// owner keys; [`into_inner`](Self::into_inner) gives it back. A dropped
/// adapter keeps its key's tag taken, so that frames it handed out stay
/// beyond every other owner's reach.
pub struct X86Frames<P: PageSource> {
    source: P,
    gfp: Gfp,
    key: OwnerKey,
}

impl<P: PageSource> X86Frames<P> {
    /// Frames from `source`, allocated with `gfp`; `None` unless the map's
    /// pages are 4 KiB and it has an owner key left
    /// ([`Blocks::new_owner_key`](crate::Blocks::new_owner_key)).
    pub fn new(source: P, gfp: Gfp) -> Option<Self> {
        let mm = source.allocator();
        if mm.geometry().page_shift != FRAME_SHIFT {
            return None;
        }
        let key = crate::Blocks::new(mm).new_owner_key().ok()?;
        Some(Self { source, gfp, key })
    }

    /// The source, for everything else.
    pub fn source(&mut self) -> &mut P {
        &mut self.source
    }

    /// The source back; the adapter's owner key goes back to the map
    /// (its tag is reissued only once no frame of it is still out).
    pub fn into_inner(self) -> P {
        let Self { source, key, .. } = self;
        crate::Blocks::new(source.allocator()).release_owner_key(key);
        source
    }

    /// Frees `frame` and says how it went, which
    /// `FrameDeallocator::deallocate_frame` cannot: a frame this adapter
    /// did not hand out (another adapter's, a plain page, another size),
    /// or freed already, is refused and changes nothing.
    ///
    /// # Safety
    /// As `FrameDeallocator::deallocate_frame`: nothing uses the frame any
    /// more (no page table maps it, no page-table entry points to it), since
    /// the adapter may hand it out again at once.
    ///
    /// # Errors
    /// [`FreeError::NotAllocated`] for a frame not handed out by this
    /// adapter (or freed already); otherwise as
    /// [`Blocks::take_back_block`](crate::Blocks::take_back_block) and [`Blocks::free_block`](crate::Blocks::free_block).
    pub unsafe fn try_deallocate<S: PageSize>(&mut self, frame: PhysFrame<S>) -> Result<(), FreeError> {
        let pfn = Pfn(frame.start_address().as_u64() >> FRAME_SHIFT);
        let mm: &PageAllocator = self.source.allocator();
        // Only this adapter's frames: `take_back_block` alone would also
        // adopt a plain page of the map (someone else's).
        if crate::Blocks::new(mm).page_owner(pfn) != Some(self.key.owner()) {
            return Err(match mm.validate_allocated(pfn) {
                Err(e) => e,
                Ok(_) => FreeError::NotAllocated(pfn),
            });
        }
        let block = crate::Blocks::new(mm).take_back_block(&self.key, pfn, order_of::<S>())?;
        self.source.free_block(block).map_err(|e| match e {
            crate::BlockError::Free(e) => e,
            crate::BlockError::Foreign(block) => FreeError::OutOfRange(block.pfn()),
        })
    }

    fn allocate<S: PageSize>(&mut self) -> Option<PhysFrame<S>> {
        let order = order_of::<S>();
        let block = self.source.alloc_block(&self.key, self.gfp, order).ok()?;
        let frame = block
            .pfn()
            .0
            .checked_mul(1 << FRAME_SHIFT)
            .and_then(|addr| PhysAddr::try_new(addr).ok())
            .and_then(|addr| PhysFrame::from_start_address(addr).ok());
        if frame.is_none() {
            // A PFN past the 52-bit physical address space: not a frame.
            let _ = self.source.free_block(block);
            return None;
        }
        // Allocated, owned by this adapter's key, one reference: refused by
        // every free path but this adapter's `try_deallocate`.
        crate::Blocks::new(self.source.allocator()).hand_out_block(block).ok()?;
        frame
    }
}

/// The buddy order of a frame size: 0 for 4 KiB, 9 for 2 MiB, 18 for 1 GiB.
fn order_of<S: PageSize>() -> u32 {
    (S::SIZE >> FRAME_SHIFT).trailing_zeros()
}

// SAFETY: `allocate` returns a frame only for a block the page allocator
// just took off its free structures (it hands a block out only while it is
// free and marks it allocated in the same step: the allocator's central
// invariant, which its model tests and `check_invariants` check), marked
// owned by this adapter's key and handed out with one reference. Such a
// block becomes free again only through `take_back_block` with this key:
// every ordinary free path (`free_pages`, `put_page`, `free_frozen_pages`,
// `free_pages_bulk`, `free_contig_range`, a `PageGuard`'s drop) refuses an
// owned page with `FreeError::Owned`, contiguous allocation and compaction
// do not migrate it, another key takes back only its own tag's pages (and a
// tag is reissued only once no page carries it), and the key is neither
// `Clone` nor reachable outside the adapter. The adapter calls
// `take_back_block` only in `try_deallocate`, which is `unsafe` with the
// trait's contract: the frame is unused. The key is lent to one call only,
// `PageSource::alloc_block`, and `PageSource` is sealed: its three impls are
// this crate's and forward to the allocator's own `alloc_block`, so no code
// a caller wrote ever holds the key (a caller's source could otherwise take
// a frame back with it and return it again). So no safe call sequence frees
// a frame the adapter handed out, and a frame is never returned twice while
// it is in use. A panic cannot break this either: `allocate` calls no code
// of the caller's, and a block it holds when the allocator's own code
// unwinds stays allocated and owned (leaked, never handed out).
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
/// (a double free, another owner's frame) changes nothing and is dropped,
/// as the trait returns nothing.
impl<P: PageSource> FrameDeallocator<Size4KiB> for X86Frames<P> {
    unsafe fn deallocate_frame(&mut self, frame: PhysFrame<Size4KiB>) {
        // SAFETY: the caller promises what the trait asks, which is
        // `try_deallocate`'s contract: nothing uses the frame.
        let _ = unsafe { self.try_deallocate(frame) };
    }
}

/// As for 4 KiB frames.
impl<P: PageSource> FrameDeallocator<Size2MiB> for X86Frames<P> {
    unsafe fn deallocate_frame(&mut self, frame: PhysFrame<Size2MiB>) {
        // SAFETY: as for 4 KiB frames.
        let _ = unsafe { self.try_deallocate(frame) };
    }
}

/// As for 4 KiB frames.
impl<P: PageSource> FrameDeallocator<Size1GiB> for X86Frames<P> {
    unsafe fn deallocate_frame(&mut self, frame: PhysFrame<Size1GiB>) {
        // SAFETY: as for 4 KiB frames.
        let _ = unsafe { self.try_deallocate(frame) };
    }
}
