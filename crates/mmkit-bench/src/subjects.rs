//! The implementations under test behind one page-granular interface,
//! [`PageAlloc`]: allocate and free a block of 2^order pages.
//!
//! Owns how each implementation maps "a block of 2^order pages":
//! - `mmkit`: `alloc_pages(gfp, order)` / `free_pages(pfn, order)` on a
//!   metadata-only map built with the builder's defaults (per-CPU lists and
//!   the per-CPU order-0 cache on): what a caller gets without choosing;
//! - `mmkit_lists_off`: the same calls on a map built with per-CPU lists
//!   off, so that every block goes through the buddy;
//! - `mmkit_locked_zone`: those calls through CPU 0's pinned handle
//!   holding the zone locked (`PinnedCpu::lock_zone`) for each timed run;
//! - `buddy_system_allocator`: one `FrameAllocator` per mmkit zone span,
//!   highest zone first, `alloc(1 << order)` / `dealloc(frame, 1 << order)`;
//! - `buddy_system_allocator_locked`: the same with the crate's own
//!   `LockedFrameAllocator` (a spin lock per call), what a caller sharing it
//!   between threads uses;
//! - `mimalloc` and `system`: `GlobalAlloc` with a (4 KiB << order)-byte,
//!   equally aligned layout, memory never touched (see [`crate::heap`]).
//!
//! Suites write their loops once, generic over `PageAlloc`; the loops are
//! monomorphised per implementation, so the interface costs nothing at run
//! time. Must not touch timing or reporting (the caller's) nor mmkit's
//! internals: mmkit is driven through its public API only.

use crate::heap::{BlockLayout, HeapBlock, StatelessAlloc};
use crate::BenchError;
use buddy_system_allocator::{FrameAllocator, LockedFrameAllocator};
use mmkit::{Gfp, LockedZone, MemoryMapBuilder, PageAllocator, Pfn, PinnedCpu};
use std::hint::black_box;
use std::ops::Range;

/// Implementation names as they appear in results.
pub mod names {
    /// mmkit's allocator through its plain calls on a map with the
    /// builder's defaults; ratios in reports are relative to it.
    pub const MMKIT: &str = "mmkit";
    /// mmkit's shared API on a map built with per-CPU lists off.
    pub const MMKIT_LISTS_OFF: &str = "mmkit_lists_off";
    /// mmkit through a pinned CPU holding the zone locked.
    pub const MMKIT_LOCKED_ZONE: &str = "mmkit_locked_zone";
    /// The `buddy_system_allocator` crate's `FrameAllocator`.
    pub const BSA: &str = "buddy_system_allocator";
    /// The same crate's `LockedFrameAllocator` (a spin lock per call).
    pub const BSA_LOCKED: &str = "buddy_system_allocator_locked";
    /// The `mimalloc` crate through `GlobalAlloc`.
    pub const MIMALLOC: &str = "mimalloc";
    /// `std::alloc::System` (the C library's allocator).
    pub const SYSTEM: &str = "system";
}

/// Bytes per page for every implementation.
pub const PAGE_SIZE: usize = 4096;

/// Largest order the benchmarks use with the heap peers (4 MiB blocks).
const MAX_HEAP_ORDER: u32 = 10;

/// `FrameAllocator`'s `ORDER` parameter, the crate's default: free lists for
/// blocks of 2^0..2^31 frames. It must exceed log2 of every frame number in
/// use: when a merge reaches class `ORDER - 1` and finds that block's buddy
/// free, `FrameAllocator::dealloc` (0.11) leaves the loop without inserting
/// the merged block, and both blocks are lost. (With `ORDER = 11`, chosen to
/// mirror mmkit's `MAX_PAGE_ORDER` 10, a 4 GiB allocator ran dry after a few
/// hundred alloc+free pairs.)
pub const BSA_ORDER: usize = 32;

/// The peer `buddy_system_allocator::FrameAllocator` with [`BSA_ORDER`], for
/// callers that drive it directly (the trace replay's peer) rather than
/// through [`Bsa`].
pub type BsaFrames = FrameAllocator<BSA_ORDER>;

/// Something that hands out naturally aligned blocks of 2^order pages.
pub trait PageAlloc {
    /// What identifies an allocated block.
    type Block;
    /// Allocates a block of 2^`order` pages.
    ///
    /// # Errors
    /// When the implementation has no block to give.
    fn alloc(&mut self, order: u32) -> Result<Self::Block, BenchError>;
    /// Frees a block that `alloc(order)` returned.
    ///
    /// # Errors
    /// When the implementation rejects the free (mmkit checks it).
    fn free(&mut self, block: Self::Block, order: u32) -> Result<(), BenchError>;
}

/// Builds a metadata-only map of `bytes` laid out like a PC (one node),
/// without per-CPU lists: every allocation and free goes to the buddy
/// allocator under the zone lock.
///
/// # Errors
/// When the library refuses the map.
pub fn buddy_only_map(bytes: u64) -> Result<PageAllocator, BenchError> {
    MemoryMapBuilder::with_memory(bytes)
        .per_cpu_lists(false)
        .build()
        .map_err(|e| BenchError::context("building the mmkit map", e))
}

/// Builds a metadata-only map of `bytes` with the builder's defaults (per-CPU
/// lists and the per-CPU order-0 cache on), the map a caller gets without
/// choosing anything.
///
/// # Errors
/// When the library refuses the map.
pub fn default_map(bytes: u64) -> Result<PageAllocator, BenchError> {
    MemoryMapBuilder::with_memory(bytes).build().map_err(|e| BenchError::context("building the mmkit map", e))
}

/// mmkit's buddy allocator with a fixed GFP mask.
pub struct Mmkit<'a> {
    mm: &'a PageAllocator,
    gfp: Gfp,
}

impl<'a> Mmkit<'a> {
    /// Allocates with `Gfp::KERNEL`, as the kernel's ordinary callers do.
    pub fn new(mm: &'a PageAllocator) -> Self {
        Self::with_gfp(mm, Gfp::KERNEL)
    }

    /// Allocates with `gfp` (e.g. `Gfp::KERNEL | Gfp::NOWARN` where failures
    /// are expected, as `__GFP_NOWARN` callers do in Linux).
    pub fn with_gfp(mm: &'a PageAllocator, gfp: Gfp) -> Self {
        Self { mm, gfp }
    }

    /// The map.
    pub fn map(&self) -> &'a PageAllocator {
        self.mm
    }
}

impl PageAlloc for Mmkit<'_> {
    type Block = Pfn;
    #[inline]
    fn alloc(&mut self, order: u32) -> Result<Pfn, BenchError> {
        self.mm.alloc_pages(self.gfp, order).map_err(|e| BenchError::context("mmkit alloc_pages", e))
    }
    #[inline]
    fn free(&mut self, block: Pfn, order: u32) -> Result<(), BenchError> {
        self.mm.free_pages(block, order).map_err(|e| BenchError::context("mmkit free_pages", e))
    }
}

// Always inlined, as the other subjects' calls are without being asked:
// here LLVM kept the two calls out of the loop, a call and return each per
// pair that showed in `mmkit bench buddy`'s `mmkit_locked_zone` contender
// (see docs/perf-log/2026-11.md, the buddy owner path).
impl PageAlloc for LockedZone<'_, '_> {
    type Block = Pfn;
    #[inline(always)]
    fn alloc(&mut self, order: u32) -> Result<Pfn, BenchError> {
        self.alloc_pages(Gfp::KERNEL, order).map_err(|e| BenchError::context("mmkit LockedZone::alloc_pages", e))
    }
    #[inline(always)]
    fn free(&mut self, block: Pfn, order: u32) -> Result<(), BenchError> {
        self.free_pages(block, order).map_err(|e| BenchError::context("mmkit LockedZone::free_pages", e))
    }
}

/// A suite loop (`pair_loop`, `batch_loop`, ...) run through `cpu` with
/// the zone of `Gfp::KERNEL` locked for each timed run and unlocked
/// between runs, so that other contenders can use the same map.
pub fn locked_zone_loop<'c, 'a: 'c, F>(
    cpu: &'c mut PinnedCpu<'a>,
    mut body: F,
) -> impl FnMut(u64) -> Result<(), BenchError> + use<'c, 'a, F>
where
    F: FnMut(&mut LockedZone<'_, 'a>, u64) -> Result<(), BenchError> + 'c,
{
    move |iters| {
        let mut zone = cpu.lock_zone(Gfp::KERNEL).map_err(|e| BenchError::context("mmkit lock_zone", e))?;
        body(&mut zone, iters)
    }
}

/// `buddy_system_allocator::FrameAllocator`s, one per zone, tried from the
/// highest zone down as mmkit's zonelist does; built over the same PFN spans
/// as an mmkit map (see [`Bsa::like`]), so both serve a request from the same
/// kind of block.
pub struct Bsa {
    /// Highest zone first.
    zones: Vec<(Range<usize>, Box<BsaFrames>)>,
}

impl Bsa {
    /// One frame allocator per span (given lowest zone first), each holding
    /// every frame of its span.
    pub fn new(spans: impl IntoIterator<Item = Range<u64>>) -> Self {
        let mut zones: Vec<_> = spans
            .into_iter()
            .map(|span| {
                let span = span.start as usize..span.end as usize;
                let mut frames = Box::new(BsaFrames::new());
                frames.add_frame(span.start, span.end);
                (span, frames)
            })
            .collect();
        zones.reverse();
        Self { zones }
    }

    /// Frame allocators over the zone spans of `mm` (which must be fresh:
    /// every page of a span is handed out as free).
    pub fn like(mm: &PageAllocator) -> Self {
        Self::new(mm.zones().iter().map(|z| z.span()))
    }
}

impl PageAlloc for Bsa {
    type Block = usize;
    #[inline]
    fn alloc(&mut self, order: u32) -> Result<usize, BenchError> {
        for (_, frames) in self.zones.iter_mut() {
            if let Some(frame) = frames.alloc(1 << order) {
                return Ok(frame);
            }
        }
        Err(BenchError(format!("buddy_system_allocator: no block of order {order}")))
    }
    #[inline]
    fn free(&mut self, block: usize, order: u32) -> Result<(), BenchError> {
        let (_, frames) = self
            .zones
            .iter_mut()
            .find(|(span, _)| span.contains(&block))
            .ok_or_else(|| BenchError(format!("buddy_system_allocator: frame {block} not managed")))?;
        frames.dealloc(block, 1 << order);
        Ok(())
    }
}

/// [`Bsa`] with the crate's `LockedFrameAllocator`: the same zones and
/// order of trial, each zone's allocator behind its spin lock, taken once
/// per call (per zone tried), as a caller that shares it between threads
/// must.
pub struct BsaLocked {
    /// Highest zone first.
    zones: Vec<(Range<usize>, Box<LockedFrameAllocator<BSA_ORDER>>)>,
}

impl BsaLocked {
    /// Locked frame allocators over the zone spans of `mm` (which must be
    /// fresh, as for [`Bsa::like`]).
    pub fn like(mm: &PageAllocator) -> Self {
        let mut zones: Vec<_> = mm
            .zones()
            .iter()
            .map(|z| {
                let span = z.span();
                let span = span.start as usize..span.end as usize;
                let frames = Box::new(LockedFrameAllocator::<BSA_ORDER>::new());
                frames.lock().add_frame(span.start, span.end);
                (span, frames)
            })
            .collect();
        zones.reverse();
        Self { zones }
    }
}

impl PageAlloc for BsaLocked {
    type Block = usize;
    #[inline]
    fn alloc(&mut self, order: u32) -> Result<usize, BenchError> {
        for (_, frames) in &self.zones {
            if let Some(frame) = frames.lock().alloc(1 << order) {
                return Ok(frame);
            }
        }
        Err(BenchError(format!("buddy_system_allocator (locked): no block of order {order}")))
    }
    #[inline]
    fn free(&mut self, block: usize, order: u32) -> Result<(), BenchError> {
        let (_, frames) = self
            .zones
            .iter()
            .find(|(span, _)| span.contains(&block))
            .ok_or_else(|| BenchError(format!("buddy_system_allocator (locked): frame {block} not managed")))?;
        frames.lock().dealloc(block, 1 << order);
        Ok(())
    }
}

/// A heap allocator asked for page-sized, page-aligned blocks.
pub struct Heap<A: StatelessAlloc> {
    layouts: Vec<BlockLayout>,
    _alloc: std::marker::PhantomData<A>,
}

impl<A: StatelessAlloc> Heap<A> {
    /// Layouts for orders `0..=MAX_HEAP_ORDER`: (4 KiB << order) bytes with
    /// the same alignment.
    pub fn new() -> Self {
        let layouts = (0..=MAX_HEAP_ORDER).filter_map(|o| BlockLayout::new(PAGE_SIZE << o, PAGE_SIZE << o)).collect();
        Self { layouts, _alloc: std::marker::PhantomData }
    }
}

impl<A: StatelessAlloc> Default for Heap<A> {
    fn default() -> Self {
        Self::new()
    }
}

impl<A: StatelessAlloc> PageAlloc for Heap<A> {
    type Block = HeapBlock<A>;
    #[inline]
    fn alloc(&mut self, order: u32) -> Result<HeapBlock<A>, BenchError> {
        let layout = *self
            .layouts
            .get(order as usize)
            .ok_or_else(|| BenchError(format!("heap peer: order {order} not supported")))?;
        HeapBlock::alloc(layout).ok_or_else(|| BenchError(format!("heap peer: out of memory at order {order}")))
    }
    #[inline]
    fn free(&mut self, block: HeapBlock<A>, _order: u32) -> Result<(), BenchError> {
        block.free();
        Ok(())
    }
}

/// The loop of an alloc+free pair case: `iters` times, allocate one block of
/// `order` and free it at once.
pub fn pair_loop<P: PageAlloc>(p: &mut P, order: u32) -> impl FnMut(u64) -> Result<(), BenchError> + '_ {
    move |iters| {
        for _ in 0..iters {
            let block = black_box(p.alloc(order)?);
            p.free(block, order)?;
        }
        Ok(())
    }
}

/// The loop of a batch case: `iters` times, allocate `batch` blocks of
/// `order`, then free them in the order they were allocated.
pub fn batch_loop<P: PageAlloc>(p: &mut P, order: u32, batch: usize) -> impl FnMut(u64) -> Result<(), BenchError> + '_ {
    let mut held: Vec<P::Block> = Vec::with_capacity(batch);
    move |iters| {
        for _ in 0..iters {
            for _ in 0..batch {
                held.push(black_box(p.alloc(order)?));
            }
            for block in held.drain(..) {
                p.free(block, order)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mmkit::Cpus;
    use mmkit::Report;
    use std::alloc::System;

    fn exercise<P: PageAlloc>(p: &mut P) {
        pair_loop(p, 0)(100).unwrap();
        pair_loop(p, 9)(10).unwrap();
        batch_loop(p, 0, 64)(3).unwrap();
    }

    #[test]
    fn every_subject_runs_the_loops() {
        let mm = buddy_only_map(64 << 20).unwrap();
        let free_before = Report::new(&mm).nr_free_pages();
        exercise(&mut Mmkit::new(&mm));
        assert_eq!(Report::new(&mm).nr_free_pages(), free_before);
        Report::new(&mm).check_invariants().unwrap();
        {
            let mut cpu = Cpus::new(&mm).pin_cpu(0).unwrap();
            locked_zone_loop(&mut cpu, |zone, iters| {
                for _ in 0..iters {
                    exercise(zone);
                }
                Ok(())
            })(2)
            .unwrap();
        }
        assert_eq!(Report::new(&mm).nr_free_pages(), free_before);
        Report::new(&mm).check_invariants().unwrap();
        exercise(&mut Bsa::like(&mm));
        exercise(&mut Heap::<System>::new());
        exercise(&mut Heap::<crate::heap::MiMalloc>::new());
    }

    #[test]
    fn bsa_blocks_are_aligned() {
        let mut b = Bsa::new(std::iter::once(1..4096));
        let block = b.alloc(9).unwrap();
        assert_eq!(block % 512, 0);
        assert!(b.alloc(10).is_ok());
    }

    #[test]
    fn bsa_pairs_lose_no_frames() {
        // Guards BSA_ORDER: too small an ORDER drops merged blocks.
        let frames = 1u64 << 16;
        let mut b = Bsa::new([1..4096, 4096..frames]);
        pair_loop(&mut b, 0)(10_000).unwrap();
        pair_loop(&mut b, 9)(10_000).unwrap();
        let mut count = 0;
        while b.alloc(0).is_ok() {
            count += 1;
        }
        assert_eq!(count, frames - 1);
    }
}
