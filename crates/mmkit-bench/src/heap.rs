//! Safe wrappers over `GlobalAlloc` for the heap-allocator peers (`system`,
//! `mimalloc`), called directly, never installed as the global allocator.
//!
//! This is the only module of the crate with `unsafe`. It owns the two calls
//! `GlobalAlloc` makes unsafe, and keeps their preconditions true by
//! construction:
//! - a [`BlockLayout`] can only be made with a non-zero size, so `alloc` is
//!   never called with a zero-size layout;
//! - a [`HeapBlock<A>`] is created only from a non-null pointer that
//!   `A::alloc` returned for the layout it stores, it is neither `Clone` nor
//!   `Copy`, and it is released exactly once, in `Drop`, with that same
//!   layout and the same allocator `A`. [`StatelessAlloc`] is implemented only
//!   for zero-sized allocators whose every value is the same heap, so "the
//!   same allocator" holds for any value of `A`.
//!
//! Must not install a global allocator or touch the blocks' memory.
#![deny(clippy::undocumented_unsafe_blocks)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::marker::PhantomData;
use std::ptr::NonNull;

/// The mimalloc peer, re-exported so that callers need no dependency of
/// their own (and use the same version).
pub use mimalloc::MiMalloc;

mod sealed {
    pub trait Sealed {}
}

/// A global allocator with no per-value state: every value is the same heap.
/// Sealed; implemented for [`System`] and [`MiMalloc`].
pub trait StatelessAlloc: GlobalAlloc + sealed::Sealed {
    /// A value of the allocator.
    const INSTANCE: Self;
}

impl sealed::Sealed for System {}
impl StatelessAlloc for System {
    const INSTANCE: Self = System;
}

impl sealed::Sealed for MiMalloc {}
impl StatelessAlloc for MiMalloc {
    const INSTANCE: Self = MiMalloc;
}

/// A layout with a non-zero size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockLayout(Layout);

impl BlockLayout {
    /// `size` bytes aligned to `align`; `None` for a zero size, an alignment
    /// that is not a power of two, or a size that overflows when rounded up.
    pub fn new(size: usize, align: usize) -> Option<Self> {
        if size == 0 {
            return None;
        }
        Layout::from_size_align(size, align).ok().map(Self)
    }
}

/// A block allocated from `A`, freed when dropped.
pub struct HeapBlock<A: StatelessAlloc> {
    ptr: NonNull<u8>,
    layout: Layout,
    _alloc: PhantomData<A>,
}

impl<A: StatelessAlloc> HeapBlock<A> {
    /// Allocates one block; `None` if the allocator is out of memory.
    #[inline]
    pub fn alloc(layout: BlockLayout) -> Option<Self> {
        let layout = layout.0;
        // SAFETY: `layout` comes from a `BlockLayout`, whose size is non-zero
        // (checked in `BlockLayout::new`); that is `GlobalAlloc::alloc`'s only
        // precondition.
        let raw = unsafe { A::INSTANCE.alloc(layout) };
        NonNull::new(raw).map(|ptr| Self { ptr, layout, _alloc: PhantomData })
    }

    /// Allocates one zero-filled block; `None` if out of memory.
    #[inline]
    pub fn alloc_zeroed(layout: BlockLayout) -> Option<Self> {
        let layout = layout.0;
        // SAFETY: as in `alloc`: the size is non-zero by construction.
        let raw = unsafe { A::INSTANCE.alloc_zeroed(layout) };
        NonNull::new(raw).map(|ptr| Self { ptr, layout, _alloc: PhantomData })
    }

    /// Address of the block.
    #[cfg(test)]
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// Frees the block (the same as dropping it).
    #[inline]
    pub fn free(self) {
        drop(self);
    }
}

impl<A: StatelessAlloc> Drop for HeapBlock<A> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: `self.ptr` was returned non-null by `A::alloc(self.layout)`
        // in `HeapBlock::alloc` (the only constructor), `A` is stateless so
        // `A::INSTANCE` is the allocator that returned it, and since the block
        // is neither `Clone` nor `Copy` and `drop` runs once, it has not been
        // freed before.
        unsafe { A::INSTANCE.dealloc(self.ptr.as_ptr(), self.layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<A: StatelessAlloc>() {
        let layout = BlockLayout::new(4096, 4096).unwrap();
        let blocks: Vec<HeapBlock<A>> = (0..16).map(|_| HeapBlock::<A>::alloc(layout).unwrap()).collect();
        for b in &blocks {
            assert_eq!(b.addr() % 4096, 0);
        }
        let mut addrs: Vec<usize> = blocks.iter().map(HeapBlock::addr).collect();
        addrs.sort_unstable();
        addrs.dedup();
        assert_eq!(addrs.len(), 16);
        for b in blocks {
            b.free();
        }
        let huge = BlockLayout::new(2 << 20, 2 << 20).unwrap();
        let block = HeapBlock::<A>::alloc(huge).unwrap();
        assert_eq!(block.addr() % (2 << 20), 0);
    }

    #[test]
    fn system_blocks() {
        round_trip::<System>();
    }

    #[test]
    #[cfg_attr(miri, ignore = "mimalloc is C, which Miri cannot run")]
    fn mimalloc_blocks() {
        round_trip::<MiMalloc>();
    }

    #[test]
    fn zero_size_layout_is_refused() {
        assert!(BlockLayout::new(0, 4096).is_none());
        assert!(BlockLayout::new(4096, 3).is_none());
    }
}
