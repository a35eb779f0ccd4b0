//! The real-memory region: one anonymous `mmap` behind every page of a
//! map, with transparent or explicit huge pages, `madvise` to give pages
//! back, and the raw copies and fills the allocator makes in it.
//!
//! Owns the mapping and the addresses inside it; who may touch which page
//! is the allocator's business (one owner per allocated page), and the
//! safe byte slices of owned blocks are made in `mem::rawmem`, which holds
//! the handle that proves the borrow.

use crate::sys::HugePages;
use crate::types::error::RealMemoryError;
use core::ptr::NonNull;

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

    /// The bytes of the block of 2^`order` pages at page `index`: their
    /// address and length, inside the mapping and valid while `self`
    /// lives; `None` if the span leaves the mapping.
    #[inline]
    pub(crate) fn block_span(&self, index: usize, order: u32) -> Option<(NonNull<u8>, usize)> {
        let start = index.checked_mul(self.page_size)?;
        let len = self.page_size.checked_shl(order)?;
        if start.checked_add(len)? > self.len {
            return None;
        }
        // SAFETY: start + len <= self.len, so the address is inside the
        // mapping (non-null, in bounds).
        Some((unsafe { NonNull::new_unchecked(self.base.as_ptr().add(start)) }, len))
    }

    /// Number of the page that contains `addr`, if it lies in the region
    /// (Linux's `virt_to_page`).
    pub fn index_of(&self, addr: *const u8) -> Option<usize> {
        let offset = (addr as usize).checked_sub(self.base.as_ptr() as usize)?;
        (offset < self.len).then_some(offset / self.page_size)
    }

    /// Zero-fills `count` pages starting at page `index`.
    ///
    /// The caller must own those pages (just allocated, not yet handed
    /// out), so no other thread reads or writes them concurrently.
    pub(crate) fn zero_pages(&self, index: usize, count: usize) {
        let (Some(start), Some(bytes)) = (index.checked_mul(self.page_size), count.checked_mul(self.page_size)) else {
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

    /// Discards the contents of `count` pages starting at page `index`
    /// with `madvise(MADV_DONTNEED)` (free page reporting): the OS frees
    /// the frames now (the process's resident size falls), and the next
    /// touch of each page faults in a zero-filled one, as for a fresh
    /// anonymous mapping. Only the OS pages wholly inside the span are
    /// discarded (a map page smaller than the OS's shares its OS page with
    /// neighbours). Returns the bytes discarded, 0 when nothing was (an
    /// empty span, a span leaving the mapping, or an OS refusal, e.g.
    /// explicit huge pages and a span that is not huge-page aligned).
    ///
    /// `MADV_DONTNEED` rather than `MADV_FREE`: the latter leaves the
    /// frames resident until the OS is short of memory, so the process
    /// would keep its resident size, and a page reused before that keeps
    /// its old bytes instead of reading zero.
    ///
    /// The caller must own those pages (a block a reporting pass took off
    /// the free lists), so no other thread reads or writes them meanwhile:
    /// their bytes change under a reader.
    pub(crate) fn discard_pages(&self, index: usize, count: usize) -> usize {
        let (Some(start), Some(bytes)) = (index.checked_mul(self.page_size), count.checked_mul(self.page_size)) else {
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
        // end <= len); madvise on a private anonymous mapping only drops
        // page frames, so no Rust reference is invalidated: the caller
        // contract gives this thread sole use of these pages, and nobody
        // holds a reference into them.
        let rc = unsafe { libc::madvise(first as *mut libc::c_void, last - first, libc::MADV_DONTNEED) };
        if rc == 0 {
            last - first
        } else {
            0
        }
    }

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

/// The OS's page size (the unit of `madvise`), read once.
fn os_page_size() -> usize {
    static SIZE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *SIZE.get_or_init(|| {
        // SAFETY: sysconf only reads a system constant.
        let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        usize::try_from(size).ok().filter(|s| s.is_power_of_two()).unwrap_or(4096)
    })
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
        // reference into it outlives `self` (page pointers handed out are
        // raw and documented as valid only while the allocator lives).
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
        assert_eq!(mem.block_span(2, 1), Some((mem.page_ptr(2).unwrap(), 8192)));
        assert!(mem.block_span(3, 1).is_none(), "a span leaving the mapping has no bytes");
        assert!(mem.block_span(usize::MAX, 0).is_none());
        assert!(mem.block_span(0, 64).is_none());
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
}
