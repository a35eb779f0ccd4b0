//! The region's `unsafe` besides the userfaultfd bindings (`uffd`): the
//! anonymous mapping (mmap, munmap, madvise), copies in and out of it, and
//! the calls that place pages in it (`UFFDIO_COPY`, `UFFDIO_ZEROPAGE`),
//! whose destinations only this module can vouch for.
//!
//! Owns the mapping's life. Callers pass page indices or byte offsets that
//! this module checks against the mapping's length; no raw pointer leaves
//! it except [`Mapping::as_ptr`], which is only an address.
#![allow(unsafe_code)]

use super::uffd::Uffd;
use crate::PAGE_SIZE;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};

/// An anonymous private mapping, unmapped on drop.
pub(crate) struct Mapping {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory owned by this value; every access
// from shared references goes through atomics or the kernel's ioctls, so it
// may be used from any thread.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes (a positive multiple of the page size).
    pub(crate) fn new(len: usize) -> std::io::Result<Self> {
        use rustix::mm::{MapFlags, ProtFlags};
        // SAFETY: a fresh anonymous mapping at an address the kernel picks
        // overlaps nothing this program owns.
        let ptr = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::NORESERVE,
            )
        }?;
        let base = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| std::io::Error::other("mmap returned NULL"))?;
        Ok(Self { base, len })
    }

    /// The mapping's first byte's address.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.base.as_ptr()
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The address of page `index` (which the caller checked is below
    /// `len / PAGE_SIZE`), as the userfaultfd calls take it.
    pub(crate) fn page_addr(&self, index: usize) -> *mut std::ffi::c_void {
        debug_assert!(index < self.len / PAGE_SIZE);
        self.base.as_ptr().wrapping_add(index * PAGE_SIZE).cast()
    }

    /// The mapping as atomic bytes: concurrent readers and writers of the
    /// same bytes are then well defined.
    fn bytes(&self) -> &[AtomicU8] {
        // SAFETY: `base` points at `len` bytes mapped read-write for as long
        // as `self` lives; `AtomicU8` has the layout of `u8`, and all
        // access to the mapping from Rust goes through atomics.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().cast::<AtomicU8>(), self.len) }
    }

    /// The mapping as atomic words.
    fn words(&self) -> &[AtomicU64] {
        // SAFETY: as `bytes`; the base is page-aligned, so 8-aligned, and
        // `len` is a multiple of the page size, so of 8.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().cast::<AtomicU64>(), self.len / 8) }
    }

    /// Copies `out.len()` bytes at `offset` out of the mapping (the caller
    /// checked the range). Touching a missing page blocks until the fault
    /// handler resolves it.
    pub(crate) fn read(&self, offset: usize, out: &mut [u8]) {
        let bytes = &self.bytes()[offset..offset + out.len()];
        if offset % 8 == 0 && out.len() % 8 == 0 {
            let words = &self.words()[offset / 8..(offset + out.len()) / 8];
            for (w, o) in words.iter().zip(out.chunks_exact_mut(8)) {
                o.copy_from_slice(&w.load(Relaxed).to_ne_bytes());
            }
        } else {
            for (b, o) in bytes.iter().zip(out) {
                *o = b.load(Relaxed);
            }
        }
    }

    /// Copies `data` into the mapping at `offset` (the caller checked the
    /// range).
    pub(crate) fn write(&self, offset: usize, data: &[u8]) {
        if offset % 8 == 0 && data.len() % 8 == 0 {
            let words = &self.words()[offset / 8..(offset + data.len()) / 8];
            for (w, d) in words.iter().zip(data.chunks_exact(8)) {
                w.store(u64::from_ne_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]]), Relaxed);
            }
        } else {
            for (b, d) in self.bytes()[offset..offset + data.len()].iter().zip(data) {
                b.store(*d, Relaxed);
            }
        }
    }

    /// The word at `offset` (8-aligned, checked by the caller).
    pub(crate) fn load_u64(&self, offset: usize) -> u64 {
        self.words()[offset / 8].load(Relaxed)
    }

    /// Stores `value` at `offset` (8-aligned, checked by the caller).
    pub(crate) fn store_u64(&self, offset: usize, value: u64) {
        self.words()[offset / 8].store(value, Relaxed)
    }

    /// Drops pages `first .. first + n` (`MADV_DONTNEED`): the next touch
    /// is a missing fault again.
    pub(crate) fn dontneed(&self, first: usize, n: usize) -> std::io::Result<()> {
        let len = n * PAGE_SIZE;
        if (first + n) * PAGE_SIZE > self.len {
            return Err(std::io::Error::other("page range past the mapping"));
        }
        // SAFETY: the range lies inside this private anonymous mapping;
        // dropping its pages only makes later reads see fresh pages (here:
        // userfaultfd faults), no Rust reference points into them.
        unsafe { rustix::mm::madvise(self.page_addr(first).cast(), len, rustix::mm::Advice::LinuxDontNeed) }?;
        Ok(())
    }

    /// Places the `src.len() / PAGE_SIZE` pages of `src` at page `first`
    /// with `UFFDIO_COPY`, mapped write-protected in the same step
    /// (`UFFDIO_COPY_MODE_WP`: a write by any thread after the copy is a
    /// write-protect fault, with no window in which it could go unseen),
    /// without waking the faulting threads. `Ok(false)` when a page was
    /// there already (`EEXIST`: another thread's fault raced this one).
    pub(crate) fn uffd_copy_wp(&self, uffd: &Uffd, first: usize, src: &[u8]) -> std::io::Result<bool> {
        if src.is_empty() || src.len() % PAGE_SIZE != 0 || first * PAGE_SIZE + src.len() > self.len {
            return Ok(false);
        }
        // SAFETY: the destination lies inside the mapping registered with
        // `uffd`, which Rust reaches only through atomics; the kernel refuses
        // (EEXIST) to overwrite a present page.
        match unsafe { uffd.copy(self.page_addr(first), src, false, true) } {
            Ok(_) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Maps the zero page at page `index` (`UFFDIO_ZEROPAGE`), without
    /// waking. `Ok(false)` when a page was there already.
    pub(crate) fn uffd_zeropage(&self, uffd: &Uffd, index: usize) -> std::io::Result<bool> {
        if (index + 1) * PAGE_SIZE > self.len {
            return Ok(false);
        }
        // SAFETY: the range lies inside the registered mapping; the kernel
        // refuses (EEXIST) to replace a present page.
        match unsafe { uffd.zeropage(self.page_addr(index), PAGE_SIZE, false) } {
            Ok(_) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `base .. base + len` is the mapping made in `new`, and
        // nothing borrows it once its owner is dropped.
        let _ = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

impl Mapping {
    /// Keeps the mapping out of children (`MADV_DONTFORK`): a forked child
    /// would otherwise inherit registered memory whose faults nobody
    /// serves.
    pub(crate) fn dont_fork(&self) -> std::io::Result<()> {
        // SAFETY: the range is exactly this mapping; the advice changes only
        // what a future fork copies.
        unsafe { rustix::mm::madvise(self.base.as_ptr().cast(), self.len, rustix::mm::Advice::LinuxDontFork) }?;
        Ok(())
    }
}
