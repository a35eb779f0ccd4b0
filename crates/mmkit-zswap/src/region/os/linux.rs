//! The real [`Os`]: a region's anonymous mapping (`mapping`) registered
//! with its own userfaultfd (`uffd`), and the handler thread's wake-up
//! pipe. Every method is a thin, inlined delegation: the pager is
//! generic over the facade, so the fault path runs the same instructions
//! as if it called these modules itself.
//!
//! Owns the descriptor, the mapping and the pipe (dropped in that order:
//! the descriptor's close unregisters the range before it is unmapped).

use super::mapping::Mapping;
use super::uffd::{Event, EventBuffer, FaultKind, FeatureFlags, IoctlFlags, RegisterMode, Uffd, UffdBuilder};
use super::{is_again, CopyError, Os, Ready, SignalsBlocked, WakePipe};
use crate::PAGE_SIZE;
use std::sync::atomic::AtomicU32;
use std::sync::Mutex;

/// Why the facade could not be made.
#[derive(Debug)]
pub(crate) enum SetupError {
    /// userfaultfd is unavailable or lacks what the region needs.
    Userfaultfd(String),
    /// The mapping or the pipe could not be made.
    Io(std::io::Error),
}

/// A region's memory and userfaultfd on Linux.
pub(crate) struct Linux {
    uffd: Uffd,
    map: Mapping,
    pipe: WakePipe,
    /// Whether the kernel has `UFFDIO_POISON` for this range.
    poison: bool,
    /// The handler thread's event buffer (only it reads events).
    events: Mutex<EventBuffer>,
}

impl Linux {
    /// Maps `len` bytes (a positive multiple of the page size, kept out of
    /// forked children) and registers them with a new userfaultfd for
    /// missing and write-protect faults; faults raise `SIGBUS` in the
    /// faulting thread when `sigbus` and the kernel can (the caller has
    /// installed the handler first).
    pub(crate) fn new(len: usize, sigbus: bool) -> Result<Self, SetupError> {
        let optional = if sigbus { FeatureFlags::POISON | FeatureFlags::SIGBUS } else { FeatureFlags::POISON };
        let uffd = UffdBuilder::new()
            .close_on_exec(true)
            .non_blocking(true)
            .user_mode_only(true)
            .require_features(FeatureFlags::PAGEFAULT_FLAG_WP)
            .optional_features(optional)
            .create()
            .map_err(|e| SetupError::Userfaultfd(e.to_string()))?;
        let map = Mapping::new(len).map_err(SetupError::Io)?;
        map.dont_fork().map_err(SetupError::Io)?;
        let ioctls = uffd
            .register_with_mode(map.as_ptr().cast(), map.len(), RegisterMode::MISSING | RegisterMode::WRITE_PROTECT)
            .map_err(|e| SetupError::Userfaultfd(format!("register: {e}")))?;
        if !ioctls.contains(IoctlFlags::WRITE_PROTECT | IoctlFlags::COPY) {
            return Err(SetupError::Userfaultfd("no write-protection for anonymous memory".into()));
        }
        let poison = uffd.has_feature(FeatureFlags::POISON) && ioctls.contains(IoctlFlags::POISON);
        let pipe = WakePipe::new().map_err(SetupError::Io)?;
        Ok(Self { uffd, map, pipe, poison, events: Mutex::new(EventBuffer::new(64)) })
    }

    /// Whether raw faults raise `SIGBUS` in the faulting thread.
    pub(crate) fn has_sigbus(&self) -> bool {
        self.uffd.has_feature(FeatureFlags::SIGBUS)
    }

    /// The address of the region's first byte.
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.map.as_ptr()
    }

    /// Bytes of the region.
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the kernel has `UFFDIO_POISON` for this range.
    #[cfg(test)]
    pub(crate) fn can_poison(&self) -> bool {
        self.poison
    }

    /// The mapping, for tests that fork over it or read it through a
    /// system call.
    #[cfg(test)]
    pub(crate) fn mapping(&self) -> &Mapping {
        &self.map
    }
}

impl Os for Linux {
    type SignalsBlocked = SignalsBlocked;

    #[inline]
    fn pages(&self) -> usize {
        self.map.len() / PAGE_SIZE
    }

    #[inline]
    fn read(&self, offset: usize, out: &mut [u8]) {
        self.map.read(offset, out)
    }

    #[inline]
    fn write(&self, offset: usize, data: &[u8]) {
        self.map.write(offset, data)
    }

    #[inline]
    fn load_u64(&self, offset: usize) -> u64 {
        self.map.load_u64(offset)
    }

    #[inline]
    fn store_u64(&self, offset: usize, value: u64) {
        self.map.store_u64(offset, value)
    }

    #[inline]
    fn copy(&self, first: usize, src: &[u8], write_protect: bool, wake: bool) -> Result<usize, CopyError> {
        match self.map.uffd_copy(&self.uffd, first, src, write_protect, wake) {
            Ok(n) => Ok(n),
            Err(e) if is_again(&e) => Err(CopyError::Again),
            Err(_) => Err(CopyError::Refused),
        }
    }

    #[inline]
    fn zero_fill(&self, index: usize) -> bool {
        self.map.uffd_zeropage(&self.uffd, index).is_ok()
    }

    #[inline]
    fn poison(&self, index: usize) {
        if self.poison {
            let _ = self.map.uffd_poison(&self.uffd, index);
        }
    }

    #[inline]
    fn write_protect(&self, first: usize, n: usize) -> bool {
        self.uffd.write_protect(self.map.page_addr(first), n * PAGE_SIZE).is_ok()
    }

    #[inline]
    fn unprotect(&self, first: usize, n: usize, wake: bool) {
        let _ = self.uffd.remove_write_protection(self.map.page_addr(first), n * PAGE_SIZE, wake);
    }

    #[inline]
    fn wake(&self, first: usize, n: usize) {
        let _ = self.uffd.wake(self.map.page_addr(first), n * PAGE_SIZE);
    }

    #[inline]
    fn drop_page(&self, index: usize) {
        let _ = self.map.dontneed(index, 1);
    }

    #[inline]
    fn drop_runs(&self, runs: &[(usize, usize)], dropped: &mut [bool]) {
        self.map.dontneed_runs(runs, dropped)
    }

    #[inline]
    fn read_page(&self, index: usize, out: &mut [u8; PAGE_SIZE]) -> bool {
        self.map.read_page(index, out)
    }

    #[inline]
    fn is_mapped(&self, index: usize) -> bool {
        self.map.is_mapped(index)
    }

    fn mapped_pages(&self) -> std::io::Result<usize> {
        self.map.mapped_pages()
    }

    #[inline]
    fn kick(&self) {
        self.pipe.kick()
    }

    fn wait(&self, poll_only: bool) -> Ready {
        let (faults, kicked) = self.pipe.wait(&self.uffd, poll_only);
        Ready { faults, kicked }
    }

    fn drain_kicks(&self) {
        self.pipe.drain()
    }

    fn read_faults(&self, out: &mut Vec<(usize, FaultKind)>) {
        let mut events = self.events.lock().unwrap_or_else(|p| p.into_inner());
        let base = self.map.as_ptr() as usize;
        let len = self.map.len();
        if let Ok(iter) = self.uffd.read_events(&mut events) {
            out.extend(iter.filter_map(|event| match event {
                Event::Pagefault { kind, addr } => {
                    let offset = (addr as usize).wrapping_sub(base);
                    (offset < len).then_some((offset / PAGE_SIZE, kind))
                }
                Event::Other => None,
            }));
        };
    }

    #[inline]
    fn sleep_while(word: &AtomicU32, expected: u32) {
        super::futex_wait(word, expected)
    }

    #[inline]
    fn wake_sleepers(word: &AtomicU32) {
        super::futex_wake(word)
    }

    #[inline]
    fn block_signals() -> SignalsBlocked {
        SignalsBlocked::new()
    }
}
