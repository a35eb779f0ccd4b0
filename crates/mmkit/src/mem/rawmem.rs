//! The unsafe floor: zero-filled tables and the real-memory region.
//!
//! Owns every raw allocation and raw pointer in the crate: the lazily zeroed
//! descriptor table (on the heap, or in memory the embedder lends) and (with `std`) the anonymous `mmap` region whose pages
//! the allocator hands out. Nothing here knows about free lists or policy; the
//! layers above only see safe slices and [`RealMemory::page_ptr`].

use alloc::boxed::Box;
use core::alloc::Layout;

/// Types for which the all-zero bit pattern is a valid value.
///
/// # Safety
/// Implementors must be valid when every byte is zero and must not be
/// zero-sized.
pub(crate) unsafe trait Zeroable: Sized {}

// SAFETY: PageDesc is four AtomicU32s; zero is a valid AtomicU32.
unsafe impl Zeroable for crate::mem::page::PageDesc {}
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

#[cfg(feature = "std")]
pub use real::{HugePages, RealMemory};

/// Asks the CPU to bring the cache line holding `*value` closer (a hint:
/// it never faults, whatever the address, and changes nothing the program
/// can observe). A no-op on targets without a prefetch instruction here.
#[inline(always)]
pub fn prefetch<T>(value: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 cannot fault and has no architectural effect, so
    // any address is fine; SSE, which it belongs to, is in x86_64's baseline.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(value as *const i8)
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}

/// The calling thread's CPU, or -1 if the kernel cannot tell.
#[cfg(all(feature = "std", target_os = "linux"))]
#[inline]
pub(crate) fn sched_getcpu() -> i32 {
    // Miri cannot call into the C library: report "unknown".
    if cfg!(miri) {
        return -1;
    }
    // SAFETY: sched_getcpu takes no arguments, touches no caller memory and
    // is thread-safe; failure is reported as -1.
    unsafe { libc::sched_getcpu() }
}

#[cfg(feature = "std")]
mod real {
    use core::ptr::NonNull;

    /// How to back the real-memory region with huge pages.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
    pub enum HugePages {
        /// Ordinary pages.
        #[default]
        None,
        /// Ask for transparent huge pages (`madvise(MADV_HUGEPAGE)`).
        Transparent,
        /// Explicit hugetlb pages (`MAP_HUGETLB`). The mapping reserves
        /// its huge pages when made, so building fails (rather than a later
        /// touch dying of `SIGBUS`) unless enough are free in the pool
        /// (`vm.nr_hugepages`).
        Explicit,
    }

    use crate::types::error::RealMemoryError;

    /// One anonymous private mapping that backs every page of the map.
    ///
    /// Invariant: `base` points to `len` bytes mapped readable and writable
    /// for the lifetime of this value.
    pub struct RealMemory {
        base: NonNull<u8>,
        len: usize,
        /// Bytes mapped: `len` rounded up to the huge page size for
        /// hugetlb, whose `munmap` wants whole huge pages.
        mapped: usize,
        page_size: usize,
    }

    // SAFETY: the region is plain memory owned by this value; which thread
    // may write which page is decided by the allocator (one owner per
    // allocated page), not by this type, which only hands out addresses.
    unsafe impl Send for RealMemory {}
    // SAFETY: as above; `&RealMemory` only computes addresses.
    unsafe impl Sync for RealMemory {}

    impl RealMemory {
        /// Maps `pages` pages of `page_size` bytes.
        pub fn map(pages: usize, page_size: usize, huge: HugePages) -> Result<Self, RealMemoryError> {
            let len = pages.saturating_mul(page_size);
            let mut mapped = len;
            // Miri models plain private anonymous mappings only.
            let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
            if huge == HugePages::Explicit {
                // No MAP_NORESERVE here: without it the kernel reserves the
                // huge pages at mmap time and fails with ENOMEM when the
                // pool is short (`hugetlb_reserve_pages`), instead of
                // delivering SIGBUS at the first fault that finds none.
                flags |= libc::MAP_HUGETLB;
                let huge_size = default_huge_page_size();
                mapped = len.div_ceil(huge_size).saturating_mul(huge_size);
            } else if !cfg!(miri) {
                flags |= libc::MAP_NORESERVE;
            }
            // SAFETY: a fresh anonymous mapping with no address hint touches
            // no existing memory; the result is checked below.
            let ptr =
                unsafe { libc::mmap(core::ptr::null_mut(), mapped, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
            if ptr == libc::MAP_FAILED || len == 0 {
                let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
                return Err(RealMemoryError { errno, bytes: len });
            }
            if huge == HugePages::Transparent {
                // SAFETY: advice on the region we just mapped; failure only
                // means no huge pages, which is not an error.
                unsafe {
                    libc::madvise(ptr, len, libc::MADV_HUGEPAGE);
                }
            }
            let base = NonNull::new(ptr as *mut u8).ok_or(RealMemoryError { errno: 0, bytes: len })?;
            Ok(Self { base, len, mapped, page_size })
        }

        /// Address of page `index` (counted from the region's start), or
        /// `None` past the end.
        #[inline]
        pub fn page_ptr(&self, index: usize) -> Option<NonNull<u8>> {
            let offset = index.checked_mul(self.page_size)?;
            if offset >= self.len {
                return None;
            }
            // SAFETY: offset < len, so the result stays inside the mapping
            // and is non-null.
            Some(unsafe { NonNull::new_unchecked(self.base.as_ptr().add(offset)) })
        }

        /// Zero-fills `count` pages starting at page `index`.
        ///
        /// The caller must own those pages (just allocated, not yet handed
        /// out), so no other thread reads or writes them concurrently.
        pub(crate) fn zero_pages(&self, index: usize, count: usize) {
            let (Some(start), Some(bytes)) = (index.checked_mul(self.page_size), count.checked_mul(self.page_size))
            else {
                return;
            };
            if start.checked_add(bytes).is_none_or(|end| end > self.len) {
                return;
            }
            // SAFETY: [start, start + bytes) lies inside the mapping (checked
            // above), and the allocator's caller contract gives this thread
            // sole ownership of those pages.
            unsafe { core::ptr::write_bytes(self.base.as_ptr().add(start), 0, bytes) }
        }
    }

    /// Addresses back to pages (Linux's `virt_to_page`).
    impl RealMemory {
        /// Number of the page that contains `addr`, if it lies in the region.
        pub fn index_of(&self, addr: *const u8) -> Option<usize> {
            let offset = (addr as usize).checked_sub(self.base.as_ptr() as usize)?;
            (offset < self.len).then_some(offset / self.page_size)
        }
    }

    /// Byte access to owned blocks: the only safe way to page contents.
    impl RealMemory {
        /// Bytes `[index, index + 2^order)` pages of the region (empty if
        /// the span leaves it).
        fn block_span(&self, index: usize, order: u32) -> Option<(usize, usize)> {
            let start = index.checked_mul(self.page_size)?;
            let len = self.page_size.checked_shl(order)?;
            (start.checked_add(len)? <= self.len).then_some((start, len))
        }

        /// The bytes of the block at page `index`. `_holder` is the block's
        /// unique handle, borrowed for as long as the slice lives.
        pub(crate) fn block_bytes<'b>(&'b self, index: usize, order: u32, _holder: &'b crate::PageBlock) -> &'b [u8] {
            match self.block_span(index, order) {
                // SAFETY: the span lies inside the mapping (block_span),
                // which lives as long as `self`. A `PageBlock` is the one
                // handle of an owned block and the allocator refuses every
                // other free of it, so while `_holder` is borrowed shared
                // nobody holds it mutably and the bytes cannot change.
                Some((start, len)) => unsafe { core::slice::from_raw_parts(self.base.as_ptr().add(start), len) },
                None => &[],
            }
        }

        /// The bytes of the block at page `index`, writable. `_holder` is
        /// the block's unique handle, borrowed exclusively for as long as
        /// the slice lives.
        pub(crate) fn block_bytes_mut<'b>(
            &'b self,
            index: usize,
            order: u32,
            _holder: &'b mut crate::PageBlock,
        ) -> &'b mut [u8] {
            match self.block_span(index, order) {
                // SAFETY: in bounds as above; `&mut PageBlock` is exclusive
                // use of the block's one handle, so no other reference to
                // these bytes exists while the slice lives.
                Some((start, len)) => unsafe { core::slice::from_raw_parts_mut(self.base.as_ptr().add(start), len) },
                None => &mut [],
            }
        }
    }

    /// Giving memory back to the OS (free page reporting).
    impl RealMemory {
        /// Discards the contents of `count` pages starting at page `index`
        /// with `madvise(MADV_DONTNEED)`: the OS frees the frames now
        /// (the process's resident size falls), and the next touch of each
        /// page faults in a zero-filled one, as for a fresh anonymous
        /// mapping. Only the OS pages wholly inside the span are discarded
        /// (a map page smaller than the OS's shares its OS page with
        /// neighbours). Returns the bytes discarded, 0 when nothing was
        /// (an empty span, a span leaving the mapping, or an OS refusal,
        /// e.g. explicit huge pages and a span that is not huge-page
        /// aligned).
        ///
        /// `MADV_DONTNEED` rather than `MADV_FREE`: the latter leaves the
        /// frames resident until the OS is short of memory, so the process
        /// would keep its resident size, and a page reused before that
        /// keeps its old bytes instead of reading zero.
        ///
        /// The caller must own those pages (a block a reporting pass took
        /// off the free lists), so no other thread reads or writes them
        /// meanwhile: their bytes change under a reader.
        pub(crate) fn discard_pages(&self, index: usize, count: usize) -> usize {
            let (Some(start), Some(bytes)) = (index.checked_mul(self.page_size), count.checked_mul(self.page_size))
            else {
                return 0;
            };
            let Some(end) = start.checked_add(bytes).filter(|&end| end <= self.len) else {
                return 0;
            };
            // Miri has no madvise; discarding is only ever an optimisation.
            if cfg!(miri) {
                return 0;
            }
            let os_page = os_page_size();
            let base = self.base.as_ptr() as usize;
            let first = (base + start).next_multiple_of(os_page);
            let last = (base + end) / os_page * os_page;
            if last <= first {
                return 0;
            }
            // SAFETY: [first, last) lies inside the mapping (it is
            // [base + start, base + end) rounded inwards to OS pages, and
            // end <= len); madvise on a private anonymous mapping only
            // drops page frames, so no Rust reference is invalidated: the
            // caller contract gives this thread sole use of these pages,
            // and nobody holds a reference into them.
            let rc = unsafe { libc::madvise(first as *mut libc::c_void, last - first, libc::MADV_DONTNEED) };
            if rc == 0 {
                last - first
            } else {
                0
            }
        }
    }

    /// The OS's page size (the unit of `madvise`), read once.
    fn os_page_size() -> usize {
        static SIZE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
        *SIZE.get_or_init(|| {
            // SAFETY: sysconf only reads a system constant.
            let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
            usize::try_from(size).ok().filter(|s| s.is_power_of_two()).unwrap_or(4096)
        })
    }

    impl RealMemory {
        /// Copies `count` pages starting at page `from` to page `to`
        /// (migration). Does nothing if either span leaves the mapping or the
        /// two overlap.
        ///
        /// The caller must own both spans: the source is an allocated block
        /// being migrated (its owner is kept from writing it meanwhile) and
        /// the target was just allocated and not yet handed out.
        pub(crate) fn copy_pages(&self, from: usize, to: usize, count: usize) {
            let span = |index: usize| -> Option<(usize, usize)> {
                let start = index.checked_mul(self.page_size)?;
                let bytes = count.checked_mul(self.page_size)?;
                let end = start.checked_add(bytes)?;
                (end <= self.len).then_some((start, end))
            };
            let (Some((src, src_end)), Some((dst, dst_end))) = (span(from), span(to)) else {
                return;
            };
            if src < dst_end && dst < src_end {
                return;
            }
            // SAFETY: both spans lie inside the mapping (checked above), do
            // not overlap (checked above), and the caller contract gives this
            // thread sole access to both while the copy runs.
            unsafe {
                core::ptr::copy_nonoverlapping(self.base.as_ptr().add(src), self.base.as_ptr().add(dst), src_end - src)
            }
        }
    }

    /// The default hugetlb page size (`Hugepagesize:` in `/proc/meminfo`),
    /// 2 MiB when it cannot be read.
    fn default_huge_page_size() -> usize {
        const FALLBACK: usize = 2 << 20;
        let Ok(meminfo) = std::fs::read_to_string("/proc/meminfo") else { return FALLBACK };
        meminfo
            .lines()
            .find_map(|line| line.strip_prefix("Hugepagesize:"))
            .and_then(|rest| rest.split_whitespace().next()?.parse::<usize>().ok())
            .filter(|kb| kb.is_power_of_two())
            .map_or(FALLBACK, |kb| kb << 10)
    }

    impl Drop for RealMemory {
        fn drop(&mut self) {
            // SAFETY: unmapping exactly the region mapped in `map`; no
            // reference into it outlives `self` (page pointers handed out
            // are raw and documented as valid only while the allocator lives).
            unsafe {
                libc::munmap(self.base.as_ptr() as *mut libc::c_void, self.mapped);
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn pages_are_writable_and_zeroable() {
            let mem = RealMemory::map(4, 4096, HugePages::None).unwrap();
            let p = mem.page_ptr(3).unwrap();
            // SAFETY: page 3 is inside the mapping and nobody else uses it.
            unsafe { p.as_ptr().write_bytes(0xab, 4096) };
            mem.copy_pages(3, 1, 1);
            // SAFETY: page 1 is inside the mapping and nobody else uses it.
            let copied = unsafe { mem.page_ptr(1).unwrap().as_ptr().add(17).read() };
            assert_eq!(copied, 0xab);
            mem.copy_pages(3, 3, 1);
            mem.copy_pages(3, 4, 1);
            mem.zero_pages(3, 1);
            // SAFETY: as above.
            let byte = unsafe { p.as_ptr().add(4095).read() };
            assert_eq!(byte, 0);
            assert!(mem.page_ptr(4).is_none());
        }

        #[test]
        fn discarded_pages_read_zero() {
            let mem = RealMemory::map(4, 4096, HugePages::None).unwrap();
            let p = mem.page_ptr(1).unwrap();
            // SAFETY: pages 1 and 2 are inside the mapping and nobody else uses them.
            unsafe { p.as_ptr().write_bytes(0xcd, 2 * 4096) };
            assert_eq!(mem.discard_pages(1, 2), if cfg!(miri) { 0 } else { 2 * 4096 });
            if !cfg!(miri) {
                // SAFETY: as above.
                let bytes = unsafe { core::slice::from_raw_parts(p.as_ptr(), 2 * 4096) };
                assert!(bytes.iter().all(|&b| b == 0), "a discarded page refaults as zero");
            }
            assert_eq!(mem.discard_pages(3, 2), 0, "a span leaving the mapping is refused");
        }

        /// The handle of a block at `index` (the accessors only borrow it).
        fn holder(index: u64, order: u32) -> crate::PageBlock {
            crate::PageBlock::new(crate::Pfn(index), order, crate::PageOwner::MIN_TAG, 0)
        }

        #[test]
        fn held_blocks_have_their_own_bytes_at_once() {
            let mem = RealMemory::map(8, 4096, HugePages::None).unwrap();
            let (mut a, mut b) = (holder(0, 1), holder(4, 2));
            mem.zero_pages(0, 8);
            // Two blocks' writable bytes live at the same time.
            let bytes_a = mem.block_bytes_mut(0, a.order(), &mut a);
            let bytes_b = mem.block_bytes_mut(4, b.order(), &mut b);
            assert_eq!((bytes_a.len(), bytes_b.len()), (2 * 4096, 4 * 4096));
            bytes_a.fill(0x11);
            bytes_b.fill(0x22);
            bytes_a[8191] = 0x33;
            assert_eq!((bytes_a[0], bytes_b[0], bytes_b[16383]), (0x11, 0x22, 0x22));
            // Two shared views of one block, and one of the other.
            let (a1, a2, b1) = (mem.block_bytes(0, 1, &a), mem.block_bytes(0, 1, &a), mem.block_bytes(4, 2, &b));
            assert_eq!((a1[4096], a2[8191], b1[4096]), (0x11, 0x33, 0x22));
            // The pages between them were not touched.
            // SAFETY: pages 2 and 3 are inside the mapping; no slice covers them.
            let gap = unsafe { core::slice::from_raw_parts(mem.page_ptr(2).unwrap().as_ptr(), 2 * 4096) };
            assert!(gap.iter().all(|&x| x == 0));
            // Raw pointers (page_ptr) and the accessors see the same bytes.
            // SAFETY: page 5 is inside the mapping; no slice of it is alive.
            unsafe { mem.page_ptr(5).unwrap().as_ptr().write(0x44) };
            assert_eq!(mem.block_bytes(4, 2, &b)[4096], 0x44);
            assert_eq!(mem.index_of(mem.block_bytes(4, 2, &b)[4096..].as_ptr()), Some(5));
            // Spans leaving the mapping have no bytes.
            let mut c = holder(6, 2);
            assert!(mem.block_bytes(6, 2, &c).is_empty());
            assert!(mem.block_bytes_mut(6, 2, &mut c).is_empty());
            assert!(mem.block_bytes(0, 64, &c).is_empty());
            assert!(mem.block_bytes(usize::MAX, 0, &c).is_empty());
        }

        #[test]
        fn threads_write_their_own_blocks() {
            let mem = RealMemory::map(4, 4096, HugePages::None).unwrap();
            let mut blocks = [holder(0, 0), holder(1, 0), holder(2, 1)];
            let indices = [0, 1, 2];
            std::thread::scope(|scope| {
                for (block, index) in blocks.iter_mut().zip(indices) {
                    let mem = &mem;
                    scope.spawn(move || {
                        let bytes = mem.block_bytes_mut(index, block.order(), block);
                        bytes.fill(index as u8 + 1);
                        assert_eq!(bytes[bytes.len() - 1], index as u8 + 1);
                    });
                }
            });
            for (block, index) in blocks.iter().zip(indices) {
                let bytes = mem.block_bytes(index, block.order(), block);
                assert_eq!((bytes[0], bytes[bytes.len() - 1]), (index as u8 + 1, index as u8 + 1));
            }
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
