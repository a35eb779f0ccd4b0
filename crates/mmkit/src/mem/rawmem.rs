//! The unsafe floor above the OS layer: zero-filled tables and the byte
//! slices of owned blocks.
//!
//! Owns every raw allocation of the crate that is not the OS's: the lazily
//! zeroed descriptor table (on the heap, or in memory the embedder lends),
//! and the one step that turns an owned block's span of the real-memory
//! mapping (`sys::RealMemory`, which owns the mapping) into a borrowed
//! slice, tied to the block's handle. Nothing here knows about free lists
//! or policy; the layers above only see safe slices.

use crate::sys::RealMemory;
use alloc::boxed::Box;
use core::alloc::Layout;

/// Types for which the all-zero bit pattern is a valid value.
///
/// # Safety
/// Implementors must be valid when every byte is zero and must not be
/// zero-sized.
pub(crate) unsafe trait Zeroable: Sized {}

// SAFETY: an AtomicU16 has the representation of a u16, for which zero is valid.
unsafe impl Zeroable for core::sync::atomic::AtomicU16 {}

/// A boxed slice of `len` zeroed values, from `alloc_zeroed` so that the OS
/// can supply untouched pages lazily (a 4 GiB table costs nothing until used).
/// `Err` carries the bytes that could not be allocated (the table is
/// metadata that scales with the map: a typed error, not an abort).
pub(crate) fn try_zeroed_slice<T: Zeroable>(len: usize) -> Result<Box<[T]>, usize> {
    if len == 0 {
        return Ok(Box::new([]));
    }
    let bytes = len.saturating_mul(core::mem::size_of::<T>());
    let layout = Layout::array::<T>(len).map_err(|_| bytes)?;
    // SAFETY: the layout has non-zero size (len > 0 and T is not zero-sized).
    let ptr = unsafe { alloc::alloc::alloc_zeroed(layout) } as *mut T;
    if ptr.is_null() {
        return Err(bytes);
    }
    // SAFETY: `ptr` was allocated by the global allocator with the layout of
    // `[T; len]`, is non-null, and every element is zero, a valid `T` by the
    // `Zeroable` contract; ownership passes to the Box exactly once.
    Ok(unsafe { Box::from_raw(core::ptr::slice_from_raw_parts_mut(ptr, len)) })
}

/// A table of zeroed `T`s that lives as long as its owner: in memory from
/// the global heap, freed on drop, or in memory the embedder lent for good
/// ([`MemoryMapBuilder::descriptor_memory`](crate::MemoryMapBuilder::descriptor_memory)),
/// which is never freed. Reading it is a slice access either way (a
/// pointer and a length, as a `Box<[T]>`), so the hot paths do not care
/// where it lives.
pub(crate) struct ZeroedTable<T: Zeroable> {
    /// The whole table. From `Box::into_raw` when `heap`, else carved out of
    /// the lent memory; valid, initialised and not aliased mutably for as
    /// long as `self` lives.
    ptr: core::ptr::NonNull<[T]>,
    heap: bool,
}

// SAFETY: the table owns (or holds for good) its elements and only hands
// out shared references to them, so sending or sharing it is sending or
// sharing `[T]`, which `T: Send + Sync` allows.
unsafe impl<T: Zeroable + Send + Sync> Send for ZeroedTable<T> {}
// SAFETY: as for Send: `&ZeroedTable<T>` only gives `&[T]`.
unsafe impl<T: Zeroable + Send + Sync> Sync for ZeroedTable<T> {}

/// Why lent memory cannot hold a table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TooSmall {
    /// Bytes the table needs, alignment slack included.
    pub(crate) needed: usize,
    /// Bytes lent.
    pub(crate) given: usize,
}

impl<T: Zeroable> ZeroedTable<T> {
    /// `len` zeroed values on the heap (see [`try_zeroed_slice`]); `Err`
    /// carries the bytes that could not be allocated.
    pub(crate) fn on_heap(len: usize) -> Result<Self, usize> {
        let boxed = try_zeroed_slice::<T>(len)?;
        // The pointer keeps the Box's ownership; `drop` rebuilds it.
        let ptr = core::ptr::NonNull::from(Box::leak(boxed));
        Ok(Self { ptr, heap: true })
    }

    /// Bytes of lent memory a table of `len` values needs: its size plus
    /// the slack to align its start.
    pub(crate) const fn lent_bytes(len: usize) -> usize {
        len.saturating_mul(core::mem::size_of::<T>()).saturating_add(core::mem::align_of::<T>() - 1)
    }

    /// `len` zeroed values carved out of `memory`, aligned for `T`; the
    /// memory is zeroed here and belongs to the table from now on.
    pub(crate) fn in_lent_memory(
        memory: &'static mut [core::mem::MaybeUninit<u8>],
        len: usize,
    ) -> Result<Self, TooSmall> {
        let given = memory.len();
        if len == 0 {
            return Ok(Self {
                ptr: core::ptr::NonNull::slice_from_raw_parts(core::ptr::NonNull::dangling(), 0),
                heap: false,
            });
        }
        let skip = memory.as_ptr().align_offset(core::mem::align_of::<T>());
        let bytes = len.saturating_mul(core::mem::size_of::<T>());
        if skip.saturating_add(bytes) > given {
            return Err(TooSmall { needed: Self::lent_bytes(len), given });
        }
        // A pointer to the whole tail, so that its provenance covers the table.
        let start = core::ptr::NonNull::from(&mut memory[skip..]).cast::<u8>();
        // SAFETY: `start` points into `memory`, which this function holds
        // exclusively for 'static, and `bytes` bytes from it are in bounds
        // (checked above).
        unsafe { core::ptr::write_bytes(start.as_ptr(), 0, bytes) };
        // Aligned for T (align_offset), in bounds, and every byte zero, a
        // valid T by the Zeroable contract.
        Ok(Self { ptr: core::ptr::NonNull::slice_from_raw_parts(start.cast::<T>(), len), heap: false })
    }

    /// The table.
    #[inline(always)]
    pub(crate) fn as_slice(&self) -> &[T] {
        // SAFETY: `ptr` is valid and initialised for the table's lifetime
        // (see the field), and only shared references are ever made from it.
        unsafe { self.ptr.as_ref() }
    }
}

impl<T: Zeroable> Drop for ZeroedTable<T> {
    fn drop(&mut self) {
        if self.heap {
            // SAFETY: `ptr` came from `Box::leak` of a `Box<[T]>` in
            // `on_heap` and is rebuilt exactly once, here; no reference made
            // by `as_slice` outlives `self`.
            drop(unsafe { Box::from_raw(self.ptr.as_ptr()) });
        }
    }
}

/// The bytes of the block of 2^`order` pages at page `index` of `memory`
/// (empty if the span leaves the mapping). `_holder` is the block's unique
/// handle, borrowed shared for as long as the slice lives.
pub(crate) fn block_bytes<'b>(
    memory: &'b RealMemory,
    index: usize,
    order: u32,
    _holder: &'b crate::PageBlock,
) -> &'b [u8] {
    match memory.block_span(index, order) {
        // SAFETY: `block_span` gives `len` bytes inside the mapping, which
        // lives as long as `memory` is borrowed. A `PageBlock` is the one
        // handle of an owned block and the allocator refuses every other
        // free of it, so while `_holder` is borrowed shared nobody holds it
        // mutably and the bytes cannot change.
        Some((start, len)) => unsafe { core::slice::from_raw_parts(start.as_ptr(), len) },
        None => &[],
    }
}

/// The bytes of the block at page `index`, writable. `_holder` is the
/// block's unique handle, borrowed exclusively for as long as the slice
/// lives.
pub(crate) fn block_bytes_mut<'b>(
    memory: &'b RealMemory,
    index: usize,
    order: u32,
    _holder: &'b mut crate::PageBlock,
) -> &'b mut [u8] {
    match memory.block_span(index, order) {
        // SAFETY: in bounds and alive as above; `&mut PageBlock` is
        // exclusive use of the block's one handle, so no other reference to
        // these bytes exists while the slice lives.
        Some((start, len)) => unsafe { core::slice::from_raw_parts_mut(start.as_ptr(), len) },
        None => &mut [],
    }
}

#[cfg(all(test, feature = "std"))]
mod block_tests {
    use super::*;
    use crate::sys::HugePages;

    /// The handle of a block at `index` (the accessors only borrow it).
    fn holder(index: u64, order: u32) -> crate::PageBlock {
        crate::PageBlock::new(crate::Pfn(index), order, crate::PageOwner::MIN_TAG, 0)
    }

    fn map(pages: usize) -> Option<RealMemory> {
        let mem = RealMemory::map(pages, 4096, HugePages::None).ok();
        if mem.is_none() {
            std::eprintln!("skipped: no real memory on this target");
        }
        mem
    }

    #[test]
    fn held_blocks_have_their_own_bytes_at_once() {
        let Some(mem) = map(8) else { return };
        let (mut a, mut b) = (holder(0, 1), holder(4, 2));
        mem.zero_pages(0, 8);
        // Two blocks' writable bytes live at the same time.
        let bytes_a = block_bytes_mut(&mem, 0, a.order(), &mut a);
        let bytes_b = block_bytes_mut(&mem, 4, b.order(), &mut b);
        assert_eq!((bytes_a.len(), bytes_b.len()), (2 * 4096, 4 * 4096));
        bytes_a.fill(0x11);
        bytes_b.fill(0x22);
        bytes_a[8191] = 0x33;
        assert_eq!((bytes_a[0], bytes_b[0], bytes_b[16383]), (0x11, 0x22, 0x22));
        // Two shared views of one block, and one of the other.
        let (a1, a2, b1) = (block_bytes(&mem, 0, 1, &a), block_bytes(&mem, 0, 1, &a), block_bytes(&mem, 4, 2, &b));
        assert_eq!((a1[4096], a2[8191], b1[4096]), (0x11, 0x33, 0x22));
        // The pages between them were not touched.
        // SAFETY: pages 2 and 3 are inside the mapping; no slice covers them.
        let gap = unsafe { core::slice::from_raw_parts(mem.page_ptr(2).unwrap().as_ptr(), 2 * 4096) };
        assert!(gap.iter().all(|&x| x == 0));
        // Raw pointers (page_ptr) and the accessors see the same bytes.
        // SAFETY: page 5 is inside the mapping; no slice of it is alive.
        unsafe { mem.page_ptr(5).unwrap().as_ptr().write(0x44) };
        assert_eq!(block_bytes(&mem, 4, 2, &b)[4096], 0x44);
        assert_eq!(mem.index_of(block_bytes(&mem, 4, 2, &b)[4096..].as_ptr()), Some(5));
        // Spans leaving the mapping have no bytes.
        let mut c = holder(6, 2);
        assert!(block_bytes(&mem, 6, 2, &c).is_empty());
        assert!(block_bytes_mut(&mem, 6, 2, &mut c).is_empty());
        assert!(block_bytes(&mem, 0, 64, &c).is_empty());
        assert!(block_bytes(&mem, usize::MAX, 0, &c).is_empty());
    }

    #[test]
    fn threads_write_their_own_blocks() {
        let Some(mem) = map(4) else { return };
        let mut blocks = [holder(0, 0), holder(1, 0), holder(2, 1)];
        let indices = [0, 1, 2];
        std::thread::scope(|scope| {
            for (block, index) in blocks.iter_mut().zip(indices) {
                let mem = &mem;
                scope.spawn(move || {
                    let bytes = block_bytes_mut(mem, index, block.order(), block);
                    bytes.fill(index as u8 + 1);
                    assert_eq!(bytes[bytes.len() - 1], index as u8 + 1);
                });
            }
        });
        for (block, index) in blocks.iter().zip(indices) {
            let bytes = block_bytes(&mem, index, block.order(), block);
            assert_eq!((bytes[0], bytes[bytes.len() - 1]), (index as u8 + 1, index as u8 + 1));
        }
    }
}

#[cfg(test)]
mod table_tests {
    use super::*;
    use crate::mem::page::PageDesc;
    use core::mem::MaybeUninit;

    /// `len` bytes filled with `fill`, lent as the builder's `'static`
    /// memory is, and given back by [`give_back`] once the table that
    /// holds them is dropped (so that Miri's leak check stays on).
    fn lend(len: usize, fill: u8) -> (*mut [MaybeUninit<u8>], &'static mut [MaybeUninit<u8>]) {
        let raw = Box::into_raw(alloc::vec![MaybeUninit::new(fill); len].into_boxed_slice());
        // SAFETY: `raw` is a live allocation; the reference is the only one
        // used until `give_back`, after every user of it is gone.
        (raw, unsafe { &mut *raw })
    }

    fn give_back(raw: *mut [MaybeUninit<u8>]) {
        // SAFETY: `raw` came from `Box::into_raw` in `lend`, and the table
        // made from its memory has been dropped.
        drop(unsafe { Box::from_raw(raw) });
    }

    #[test]
    fn a_lent_table_lies_in_the_lent_memory_aligned_and_zeroed() {
        for offset in 0..16 {
            let (raw, memory) = lend(1024 + offset, 0xa5);
            let (start, end) = (memory.as_ptr() as usize, memory.as_ptr() as usize + memory.len());
            let table = ZeroedTable::<PageDesc>::in_lent_memory(&mut memory[offset..], 60).unwrap();
            let slice = table.as_slice();
            let (first, last) = (slice.as_ptr() as usize, slice.as_ptr() as usize + slice.len() * 16);
            assert!(start + offset <= first && last <= end, "offset {offset}: outside the memory");
            assert_eq!(first % core::mem::align_of::<PageDesc>(), 0);
            assert!(slice.iter().all(|d| d.refcount() == 0 && d.flags() == crate::PageFlags::EMPTY));
            drop(table);
            give_back(raw);
        }
    }

    #[test]
    fn lent_memory_too_small_is_refused() {
        let (raw, memory) = lend(100, 0);
        let refused = ZeroedTable::<PageDesc>::in_lent_memory(memory, 7).err();
        assert_eq!(refused, Some(TooSmall { needed: ZeroedTable::<PageDesc>::lent_bytes(7), given: 100 }));
        give_back(raw);
        let (raw, empty) = lend(0, 0);
        assert_eq!(ZeroedTable::<PageDesc>::in_lent_memory(empty, 0).map(|t| t.as_slice().len()).ok(), Some(0));
        give_back(raw);
    }

    #[test]
    fn a_heap_table_is_zeroed_and_freed() {
        let table = ZeroedTable::<PageDesc>::on_heap(1000).unwrap();
        assert!(table.as_slice().iter().all(|d| d.refcount() == 0));
        drop(table);
    }
}
