//! The region's mapping, besides the userfaultfd bindings (`uffd`): the
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
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// The most runs one [`Mapping::dontneed_runs`] hands to one
/// `process_madvise` (a fixed array: no allocation).
pub(crate) const MAX_RUNS: usize = 64;

/// An anonymous private mapping, unmapped on drop.
pub(crate) struct Mapping {
    base: NonNull<u8>,
    len: usize,
    /// This process's pidfd, for `process_madvise` (none where the kernel
    /// has no `pidfd_open`).
    pidfd: Option<std::os::fd::OwnedFd>,
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
        #[cfg(test)]
        let hint = testing_hint::take();
        #[cfg(not(test))]
        let hint = std::ptr::null_mut();
        // SAFETY: a fresh anonymous mapping at an address the kernel picks
        // (a hint, without `MAP_FIXED`, is only a wish: the kernel never
        // maps over anything for it) overlaps nothing this program owns.
        let ptr = unsafe {
            rustix::mm::mmap_anonymous(
                hint,
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE | MapFlags::NORESERVE,
            )
        }?;
        let base = NonNull::new(ptr.cast::<u8>()).ok_or_else(|| std::io::Error::other("mmap returned NULL"))?;
        Ok(Self { base, len, pidfd: own_pidfd() })
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

    /// The mapping as atomic words: every access from Rust goes through
    /// them, one size for all, so that concurrent accesses to the same
    /// bytes never mix sizes (which Rust's memory model leaves undefined).
    fn words(&self) -> &[AtomicU64] {
        // SAFETY: `base` points at `len` bytes mapped read-write for as long
        // as `self` lives; the base is page-aligned, so 8-aligned, and `len`
        // is a multiple of the page size, so of 8; `AtomicU64` has the size
        // of 8 bytes, and all access to the mapping from Rust goes through
        // these atomics.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().cast::<AtomicU64>(), self.len / 8) }
    }

    /// Copies `out.len()` bytes at `offset` out of the mapping (the caller
    /// checked the range): whole words loaded, the bytes wanted taken
    /// from them.
    pub(crate) fn read(&self, offset: usize, out: &mut [u8]) {
        let mut at = offset;
        let mut done = 0;
        while done < out.len() {
            let skip = at % 8;
            let n = (8 - skip).min(out.len() - done);
            let word = self.words()[at / 8].load(Relaxed).to_ne_bytes();
            out[done..done + n].copy_from_slice(&word[skip..skip + n]);
            at += n;
            done += n;
        }
    }

    /// Copies `data` into the mapping at `offset` (the caller checked the
    /// range): whole words stored; a part of a word as a compare-and-swap
    /// of the word, so that other threads' writes to its other bytes stay.
    pub(crate) fn write(&self, offset: usize, data: &[u8]) {
        let mut at = offset;
        let mut done = 0;
        while done < data.len() {
            let skip = at % 8;
            let n = (8 - skip).min(data.len() - done);
            let word = &self.words()[at / 8];
            if n == 8 {
                let d = &data[done..done + 8];
                word.store(u64::from_ne_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]]), Relaxed);
            } else {
                let _ = word.fetch_update(Relaxed, Relaxed, |old| {
                    let mut bytes = old.to_ne_bytes();
                    bytes[skip..skip + n].copy_from_slice(&data[done..done + n]);
                    Some(u64::from_ne_bytes(bytes))
                });
            }
            at += n;
            done += n;
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

    /// Drops each run `(first, n)` of pages, as [`dontneed`](Self::dontneed)
    /// does, in one `process_madvise` call for all of them (Linux 5.10; for
    /// `MADV_DONTNEED` on the caller's own pidfd, 6.13) where the kernel
    /// takes it, else one `madvise` per run; `dropped[k]` says whether run
    /// `k` was. Allocates nothing (at most [`MAX_RUNS`] runs a call: the
    /// rest go one `madvise` each).
    pub(crate) fn dontneed_runs(&self, runs: &[(usize, usize)], dropped: &mut [bool]) {
        let dropped = &mut dropped[..runs.len()];
        dropped.fill(false);
        let mut done = 0;
        if let (Some(pidfd), true) = (&self.pidfd, runs.len() > 1) {
            let count = runs.len().min(MAX_RUNS);
            let empty = libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 };
            let mut iov = [empty; MAX_RUNS];
            let fits = runs[..count].iter().all(|&(first, n)| n > 0 && (first + n) * PAGE_SIZE <= self.len);
            if fits {
                for (v, &(first, n)) in iov.iter_mut().zip(&runs[..count]) {
                    *v = libc::iovec { iov_base: self.page_addr(first), iov_len: n * PAGE_SIZE };
                }
            }
            if fits {
                use std::os::fd::AsRawFd;
                // SAFETY: every range lies inside this private anonymous
                // mapping (checked above); dropping its pages only makes
                // later reads see fresh pages (userfaultfd faults), and no
                // Rust reference points into them. The kernel reads only
                // `iov[..count]`.
                let ret = unsafe {
                    libc::syscall(
                        libc::SYS_process_madvise,
                        libc::c_long::from(pidfd.as_raw_fd()),
                        iov.as_ptr(),
                        count,
                        libc::c_long::from(libc::MADV_DONTNEED),
                        0usize,
                    )
                };
                // The runs wholly inside the bytes advised are dropped.
                let mut bytes = usize::try_from(ret).unwrap_or(0);
                for (k, v) in iov[..count].iter().enumerate() {
                    if bytes < v.iov_len {
                        break;
                    }
                    bytes -= v.iov_len;
                    dropped[k] = true;
                    done = k + 1;
                }
            }
        }
        for (k, &(first, n)) in runs.iter().enumerate().skip(done) {
            dropped[k] = self.dontneed(first, n).is_ok();
        }
    }

    /// Copies page `index` into `out` through the kernel
    /// (`process_vm_readv` on this process), which answers `EFAULT` for a
    /// page that is not mapped instead of faulting: eviction reads its
    /// victims so, and a victim the program dropped behind the region's
    /// back (`MADV_DONTNEED`) is an error here, not a fault on a page the
    /// reading thread itself is evicting. False when the page could not be
    /// read whole.
    pub(crate) fn read_page(&self, index: usize, out: &mut [u8; PAGE_SIZE]) -> bool {
        if (index + 1) * PAGE_SIZE > self.len {
            return false;
        }
        let local = libc::iovec { iov_base: out.as_mut_ptr().cast(), iov_len: PAGE_SIZE };
        let remote = libc::iovec { iov_base: self.page_addr(index), iov_len: PAGE_SIZE };
        // SAFETY: the kernel writes at most `PAGE_SIZE` bytes into `out`,
        // which has them, and reads the mapping's page as a system call
        // (no Rust reference is made to it).
        let ret = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
        ret == PAGE_SIZE as isize
    }

    /// Whether page `index` is in the page tables now (`mincore`).
    pub(crate) fn is_mapped(&self, index: usize) -> bool {
        if (index + 1) * PAGE_SIZE > self.len {
            return false;
        }
        let mut vec = [0u8; 1];
        // SAFETY: `mincore` reads no memory of the mapping; it writes one
        // byte for the one page into `vec`.
        let ret = unsafe { libc::mincore(self.page_addr(index), PAGE_SIZE, vec.as_mut_ptr()) };
        ret == 0 && vec[0] & 1 != 0
    }

    /// Places the `src.len() / PAGE_SIZE` pages of `src` at page `first`
    /// with `UFFDIO_COPY`, waking the threads waiting on them when `wake`;
    /// mapped write-protected in the same step when `write_protect`
    /// (`UFFDIO_COPY_MODE_WP`: a write by any thread after the copy is a
    /// write-protect fault, with no window in which it could go unseen).
    /// Returns the pages placed, from `first` on: fewer than asked when
    /// the kernel stopped early (a partial copy), 0 when page `first` was
    /// there already (`EEXIST`: another thread's fault raced this one).
    pub(crate) fn uffd_copy(
        &self,
        uffd: &Uffd,
        first: usize,
        src: &[u8],
        write_protect: bool,
        wake: bool,
    ) -> std::io::Result<usize> {
        if src.is_empty() || src.len() % PAGE_SIZE != 0 || first * PAGE_SIZE + src.len() > self.len {
            return Ok(0);
        }
        // SAFETY: the destination lies inside the mapping registered with
        // `uffd`, which Rust reaches only through atomics; the kernel refuses
        // (EEXIST) to overwrite a present page.
        match unsafe { uffd.copy(self.page_addr(first), src, wake, write_protect) } {
            Ok(bytes) => Ok(bytes / PAGE_SIZE),
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// Poisons page `index` (`UFFDIO_POISON`) and wakes its faulting
    /// threads: a touch of it raises `SIGBUS` until [`dontneed`] drops the
    /// marker. The region's own accessors never touch a page whose load
    /// failed; a raw access through [`as_ptr`] gets the signal, as a touch
    /// of memory with an uncorrectable error does.
    ///
    /// [`dontneed`]: Self::dontneed
    /// [`as_ptr`]: Self::as_ptr
    pub(crate) fn uffd_poison(&self, uffd: &Uffd, index: usize) -> std::io::Result<()> {
        if (index + 1) * PAGE_SIZE > self.len {
            return Err(std::io::Error::other("page past the mapping"));
        }
        // SAFETY: the range lies inside the registered mapping; poisoning
        // writes no memory, and the region's safe accessors pin and load a
        // page before touching it, so only raw accesses meet the marker.
        unsafe { uffd.poison(self.page_addr(index), PAGE_SIZE) }?;
        Ok(())
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

impl Mapping {
    /// How many of the mapping's pages are in the page tables now
    /// (`mincore`): the kernel's count, to check the region's own.
    pub(crate) fn mapped_pages(&self) -> std::io::Result<usize> {
        let mut vec = vec![0u8; self.len / PAGE_SIZE];
        // SAFETY: `mincore` reads no memory of the mapping; it writes one
        // byte per page of `base .. base + len` into `vec`, which has
        // exactly that many.
        let ret = unsafe { libc::mincore(self.base.as_ptr().cast(), self.len, vec.as_mut_ptr()) };
        if ret < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(vec.iter().filter(|&&b| b & 1 != 0).count())
    }
}

/// This process's pidfd (`pidfd_open`), if the kernel has it.
fn own_pidfd() -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: `pidfd_open` takes a pid and flags and reads no memory; it
    // returns a new descriptor or -1.
    let ret = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::c_long::from(std::process::id() as i32), 0usize) };
    let fd = i32::try_from(ret).ok().filter(|&fd| fd >= 0)?;
    // SAFETY: the kernel just returned `fd` as a new descriptor that
    // nothing else owns (`pidfd_open` sets close-on-exec itself).
    Some(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
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

/// The address the next mapping asks the kernel for (tests that need a
/// region where another was).
#[cfg(test)]
pub(crate) mod testing_hint {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

    static HINT: AtomicUsize = AtomicUsize::new(0);

    /// The next [`Mapping::new`](super::Mapping::new) asks for `addr`.
    pub(crate) fn set(addr: usize) {
        HINT.store(addr, SeqCst);
    }

    pub(super) fn take() -> *mut std::ffi::c_void {
        HINT.swap(0, SeqCst) as *mut std::ffi::c_void
    }
}

/// How a forked child ended.
#[cfg(test)]
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ChildEnd {
    /// `_exit(code)`.
    Exited(i32),
    /// Killed by this signal.
    Signaled(i32),
}

#[cfg(test)]
impl Mapping {
    /// Forks a child that reads the word at `offset` (checked against the
    /// length) through the mapping's address and exits 0; returns how it
    /// ended. The mapping is `MADV_DONTFORK`, so the child has nothing
    /// mapped there: the documented fork behaviour is a `SIGSEGV`.
    pub(crate) fn fork_and_read(&self, offset: usize) -> std::io::Result<ChildEnd> {
        assert!(offset + 8 <= self.len && offset % 8 == 0);
        let addr = self.base.as_ptr().wrapping_add(offset).cast::<u64>();
        // SAFETY: the child runs only a volatile read and `_exit`, both
        // async-signal-safe (no allocation, no lock another thread of the
        // parent could have held at the fork); the parent goes on as
        // before.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: in the child: a read of an address, which either is
            // mapped (a plain read) or raises SIGSEGV and ends the child;
            // then `_exit`, which runs no destructor of the parent's state.
            unsafe {
                let _ = std::ptr::read_volatile(addr);
                libc::_exit(0);
            }
        }
        let mut status = 0;
        // SAFETY: waits for the child just made, writing only `status`.
        if unsafe { libc::waitpid(pid, &mut status, 0) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(if libc::WIFSIGNALED(status) {
            ChildEnd::Signaled(libc::WTERMSIG(status))
        } else {
            ChildEnd::Exited(libc::WEXITSTATUS(status))
        })
    }
}

/// What a system call sees of `len` bytes at `ptr`: it writes them into a
/// pipe (the kernel reads the memory, as `write(2)` to a file would) and
/// reads them back; the error is the system call's (`EFAULT` for a page
/// the kernel would not fault in).
#[cfg(test)]
pub(crate) fn through_a_pipe(ptr: *const u8, len: usize) -> std::io::Result<Vec<u8>> {
    let (r, w) = rustix::pipe::pipe()?;
    // SAFETY: `write(2)` only reads `len` bytes at `ptr` from the kernel,
    // which checks the addresses and answers `EFAULT` for one it cannot
    // read; no Rust reference to that memory is made.
    let written = unsafe { libc::write(std::os::fd::AsRawFd::as_raw_fd(&w), ptr.cast(), len) };
    if written < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let mut out = vec![0u8; written as usize];
    rustix::io::read(&r, &mut out)?;
    Ok(out)
}
