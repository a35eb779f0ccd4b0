//! [`PinnedRange`]: a range of a region loaded and pinned against eviction
//! while the guard lives, the documented way to hand region memory to a
//! system call. The kernel does not fault a missing page of a
//! userfaultfd-registered range on a system call's behalf (the region's
//! userfaultfd takes user-mode faults only): `read(2)` into an evicted page
//! returns `EFAULT`. A pinned page is mapped, and writable when the range
//! was pinned for writing, until the guard drops.
//!
//! Owns only the guard; pinning and loading are the region's (`calls`).

use super::{RegionError, SwapRegion};
use crate::PAGE_SIZE;

/// A byte range of a [`SwapRegion`] whose pages stay mapped (loaded first
/// if they were evicted) until the guard drops: hand
/// [`as_ptr`](Self::as_ptr) / [`as_mut_ptr`](Self::as_mut_ptr) to a system
/// call, which would get `EFAULT` on an evicted page.
///
/// The guard gives pointers, not slices: other threads may still read and
/// write the same bytes through the region, so a `&[u8]` over them would
/// be a data race. Made by [`SwapRegion::pin`].
///
/// ```
/// use mmkit::{Backing, HugePages, MemoryMapBuilder};
/// use mmkit_zswap::{RegionConfig, SwapFile, SwapRegion, Zswap, ZswapParams};
/// use std::sync::Arc;
///
/// let mm = MemoryMapBuilder::with_memory(64 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap();
/// let zswap = Arc::new(Zswap::new(Arc::new(mm), SwapFile::create_temp(4096).unwrap(), ZswapParams::default()).unwrap());
/// let region = match SwapRegion::new(zswap, RegionConfig::new(1 << 20, 16)) {
///     Ok(region) => region,
///     Err(e) => { eprintln!("skipped: {e}"); return; }      // no userfaultfd here
/// };
/// region.write(0, b"hello").unwrap();
/// region.reclaim(0).unwrap();                               // evicted: a syscall would get EFAULT
/// let pinned = region.pin(0, 5, false).unwrap();            // loaded and kept mapped
/// assert_eq!(pinned.len(), 5);
/// let _for_a_syscall = pinned.as_ptr();
/// assert_eq!(region.stats().resident, 1);
/// ```
#[must_use = "the range is unpinned when the guard drops"]
pub struct PinnedRange<'r> {
    region: &'r SwapRegion,
    offset: usize,
    len: usize,
    write: bool,
}

impl PinnedRange<'_> {
    /// The first byte of the range.
    pub fn as_ptr(&self) -> *const u8 {
        self.region.as_ptr().wrapping_add(self.offset).cast_const()
    }

    /// The first byte of the range, for a system call that writes into it:
    /// `None` unless the range was pinned for writing (its pages are
    /// write-protected otherwise, and the system call would get `EFAULT`).
    pub fn as_mut_ptr(&self) -> Option<*mut u8> {
        self.write.then(|| self.region.as_ptr().wrapping_add(self.offset))
    }

    /// Bytes in the range.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the range has no bytes (it then pins no page).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The pages the range touches.
    fn pages(&self) -> std::ops::Range<usize> {
        page_span(self.offset, self.len)
    }
}

/// The pages `len` bytes at `offset` touch.
fn page_span(offset: usize, len: usize) -> std::ops::Range<usize> {
    if len == 0 {
        return 0..0;
    }
    offset / PAGE_SIZE..(offset + len - 1) / PAGE_SIZE + 1
}

impl Drop for PinnedRange<'_> {
    /// Unpins the range. Pins may hold more pages between them than the
    /// budget (each alone holds at most the budget), so the region can be
    /// over it when they are let go; the excess is evicted here, in the
    /// thread that drops the guard, rather than left resident until the
    /// next load evicts for itself (as `munlock` hands pages back to
    /// reclaim at once).
    fn drop(&mut self) {
        self.region.shared.unpin_span(self.pages());
    }
}

impl SwapRegion {
    /// Loads the pages of `len` bytes at `offset` (writable and dirty when
    /// `write`) and keeps them mapped until the returned guard drops, so
    /// that a system call may read (or, with `write`, fill) them: see
    /// [`PinnedRange`]. The pages count against the resident budget; the
    /// range may hold at most the budget's pages. Ranges pinned at once may
    /// take the region past its budget while they are held; dropping a
    /// guard evicts what is over it.
    ///
    /// # Errors
    /// [`RegionError::OutOfBounds`]; [`RegionError::PinTooLarge`];
    /// [`RegionError::LoadFailed`], [`RegionError::SwapFull`],
    /// [`RegionError::TooManyPins`], [`RegionError::Forked`] and
    /// [`RegionError::HandlerGone`] as for [`read`](Self::read). On an
    /// error no page stays pinned.
    pub fn pin(&self, offset: usize, len: usize, write: bool) -> Result<PinnedRange<'_>, RegionError> {
        self.check(offset, len)?;
        let span = page_span(offset, len);
        let budget = self.shared.config.resident_budget;
        if span.len() > budget {
            return Err(RegionError::PinTooLarge { pages: span.len(), budget });
        }
        self.shared.pin_span(span, write)?;
        Ok(PinnedRange { region: self, offset, len, write })
    }
}

#[cfg(test)]
mod tests {
    use super::page_span;

    #[test]
    fn spans_cover_every_touched_page() {
        assert_eq!(page_span(0, 0), 0..0);
        assert_eq!(page_span(0, 1), 0..1);
        assert_eq!(page_span(4095, 2), 0..2);
        assert_eq!(page_span(4096, 4096), 1..2);
        assert_eq!(page_span(100, 3 * 4096), 0..4);
    }
}
