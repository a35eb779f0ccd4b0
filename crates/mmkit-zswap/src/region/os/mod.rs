//! The operating system behind one facade: the [`Os`] trait is
//! everything the pager and the handler thread ask of it for one region —
//! place, protect, drop and read back pages, the handler thread's wake-ups
//! and faults, waits between threads, signal masks. [`linux::Linux`] is
//! the real one (the mapping and its copies, reads, drops and advice in
//! `mapping`, the userfaultfd calls in `uffd`); the tests have an
//! in-memory fake (`fake`) that models a region's pages and records the
//! calls. The pager is generic over it, not `dyn`: the fault path pays no
//! indirect call. Besides: the `SIGBUS` registration and what a signal
//! handler may call (`signal`), the handler's own stacks (`stack`), and
//! here the wake-up pipe, futexes, signal masks and the fork count.
//!
//! The rest of the region calls only this module: no `rustix` or `libc`
//! outside it (its tests' fork helpers are `cfg(test)` items here). Every
//! call made from the `SIGBUS` handler is a plain system call or an atomic
//! operation: async-signal-safe, no allocation, no lock.
#![allow(unsafe_code)]

#[cfg(test)]
pub(crate) mod fake;
pub(crate) mod linux;
pub(crate) mod mapping;
pub(crate) mod signal;
pub(crate) mod stack;
pub(crate) mod uffd;

pub(crate) use uffd::FaultKind;

use crate::PAGE_SIZE;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
use std::sync::Once;

/// Why a copy placed nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CopyError {
    /// The address space changed under the copy (`EAGAIN`): try again.
    Again,
    /// Refused whole (`ENOENT` for a copy that crosses the end of a
    /// memory area, or another error).
    Refused,
}

/// What woke the handler thread's wait.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Ready {
    /// Faults are waiting to be read.
    pub(crate) faults: bool,
    /// Someone kicked it.
    pub(crate) kicked: bool,
}

/// What the pager and the handler thread ask of the operating system for
/// one region of `pages()` pages. Pages are named by index, bytes by
/// offset; every index or range passed is inside the region (the pager's
/// indices come from its own state array, which has `pages()` entries).
pub(crate) trait Os: Send + Sync + Sized + 'static {
    /// A guard that keeps the calling thread's asynchronous signals
    /// blocked while it lives.
    type SignalsBlocked;

    /// Pages of the region.
    fn pages(&self) -> usize;

    /// Copies bytes out of the region at `offset` (pages mapped, pinned by
    /// the caller).
    fn read(&self, offset: usize, out: &mut [u8]);
    /// Copies bytes into the region at `offset` (pages mapped writable,
    /// pinned by the caller).
    fn write(&self, offset: usize, data: &[u8]);
    /// The word at `offset` (8-aligned, mapped, pinned).
    fn load_u64(&self, offset: usize) -> u64;
    /// Stores the word at `offset` (8-aligned, mapped writable, pinned).
    fn store_u64(&self, offset: usize, value: u64);

    /// Places the pages of `src` from page `first` on (`UFFDIO_COPY`),
    /// write-protected when `write_protect`, waking their faulting threads
    /// when `wake`. Returns the pages placed: fewer than asked when the
    /// copy stopped at a page that was there, 0 when page `first` was.
    fn copy(&self, first: usize, src: &[u8], write_protect: bool, wake: bool) -> Result<usize, CopyError>;
    /// Maps the zero page at page `index` (`UFFDIO_ZEROPAGE`); true when
    /// it is mapped now (or a page was there), false when refused.
    fn zero_fill(&self, index: usize) -> bool;
    /// Poisons page `index` (`UFFDIO_POISON`) where the kernel can: a raw
    /// touch of it raises `SIGBUS` until [`drop_page`](Self::drop_page).
    fn poison(&self, index: usize);
    /// Write-protects pages `first .. first + n`; false when refused.
    fn write_protect(&self, first: usize, n: usize) -> bool;
    /// Lifts the write protection of pages `first .. first + n`, waking
    /// the writers waiting on it when `wake`.
    fn unprotect(&self, first: usize, n: usize, wake: bool);
    /// Wakes the threads waiting on faults in pages `first .. first + n`.
    fn wake(&self, first: usize, n: usize);
    /// Drops page `index` (`MADV_DONTNEED`).
    fn drop_page(&self, index: usize);
    /// Drops each run `(first, n)` of pages, all in one call where it can;
    /// `dropped[k]` says whether run `k` was. At most
    /// [`mapping::MAX_RUNS`] runs go in one call; allocates nothing.
    fn drop_runs(&self, runs: &[(usize, usize)], dropped: &mut [bool]);
    /// Copies page `index` into `out` without faulting; false when it is
    /// not mapped (the program dropped it).
    fn read_page(&self, index: usize, out: &mut [u8; PAGE_SIZE]) -> bool;
    /// Whether page `index` is mapped now.
    fn is_mapped(&self, index: usize) -> bool;
    /// How many pages are mapped now.
    fn mapped_pages(&self) -> std::io::Result<usize>;

    /// Wakes the handler thread out of [`wait`](Self::wait)
    /// (async-signal-safe).
    fn kick(&self);
    /// Waits until faults are waiting or a kick came (no wait when
    /// `poll_only`).
    fn wait(&self, poll_only: bool) -> Ready;
    /// Forgets the kicks seen.
    fn drain_kicks(&self);
    /// Appends the raw faults waiting, as `(page, kind)`.
    fn read_faults(&self, out: &mut Vec<(usize, FaultKind)>);

    /// Sleeps a little while `word` holds `expected` (the caller looks
    /// again). Async-signal-safe.
    fn sleep_while(word: &AtomicU32, expected: u32);
    /// Wakes the threads in [`sleep_while`](Self::sleep_while) on `word`.
    fn wake_sleepers(word: &AtomicU32);
    /// Blocks the calling thread's asynchronous signals until the guard
    /// drops.
    fn block_signals() -> Self::SignalsBlocked;
}

/// The handler thread's wake-up pipe (non-blocking, close-on-exec).
pub(crate) struct WakePipe {
    r: OwnedFd,
    w: OwnedFd,
}

impl WakePipe {
    pub(crate) fn new() -> std::io::Result<Self> {
        use rustix::pipe::{pipe_with, PipeFlags};
        let (r, w) = pipe_with(PipeFlags::CLOEXEC | PipeFlags::NONBLOCK)?;
        Ok(Self { r, w })
    }

    /// Wakes the waiter (async-signal-safe: one `write`; a full pipe
    /// already wakes it).
    pub(crate) fn kick(&self) {
        let _ = rustix::io::write(&self.w, &[1]);
    }

    /// Empties the pipe after a wake.
    pub(crate) fn drain(&self) {
        let mut sink = [0u8; 64];
        while matches!(rustix::io::read(&self.r, &mut sink), Ok(n) if n > 0) {}
    }

    /// Waits until `uffd` has an event or the pipe a wake (no wait when
    /// `poll_only`); returns `(uffd ready, woken)`.
    pub(crate) fn wait(&self, uffd: &uffd::Uffd, poll_only: bool) -> (bool, bool) {
        use rustix::event::{poll, PollFd, PollFlags, Timespec};
        let zero = Timespec { tv_sec: 0, tv_nsec: 0 };
        let mut fds = [PollFd::new(uffd, PollFlags::IN), PollFd::new(&self.r, PollFlags::IN)];
        if poll(&mut fds, poll_only.then_some(&zero)).is_err() {
            return (false, false);
        }
        (!fds[0].revents().is_empty(), !fds[1].revents().is_empty())
    }
}

/// Whether `e` is `EAGAIN` (the address space changed under a copy).
fn is_again(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::EAGAIN)
}

/// Sleeps while `word` holds `expected` (`FUTEX_WAIT`, private), at most
/// 10 ms (the caller looks again). Async-signal-safe.
pub(crate) fn futex_wait(word: &AtomicU32, expected: u32) {
    let timeout = libc::timespec { tv_sec: 0, tv_nsec: 10_000_000 };
    // SAFETY: the kernel reads the live atomic at `word` and the timeout;
    // it writes nothing of ours.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            &timeout as *const libc::timespec,
        );
    }
}

/// Wakes every thread sleeping on `word` (`FUTEX_WAKE`, private).
pub(crate) fn futex_wake(word: &AtomicU32) {
    // SAFETY: the kernel only uses `word`'s address as a key.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, i32::MAX);
    }
}

/// The calling thread's asynchronous signals blocked until the guard
/// drops (the synchronous ones, which a fault raises, stay open): region
/// code that holds a page claim or a lock is never interrupted by a
/// handler of the program's that could touch the region and need them.
pub(crate) struct SignalsBlocked {
    old: libc::sigset_t,
}

/// The signal set of every asynchronous signal: all but those a faulting
/// instruction raises, which cannot be deferred.
fn asynchronous_signals() -> libc::sigset_t {
    // SAFETY: `set` is a live `sigset_t`, filled before use; the calls
    // only write it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut set);
        for sync in [libc::SIGBUS, libc::SIGSEGV, libc::SIGILL, libc::SIGFPE, libc::SIGTRAP] {
            libc::sigdelset(&mut set, sync);
        }
        set
    }
}

impl SignalsBlocked {
    pub(crate) fn new() -> Self {
        let set = asynchronous_signals();
        // SAFETY: both sets are live `sigset_t`s; the call writes `old`.
        let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old) };
        Self { old }
    }
}

impl Drop for SignalsBlocked {
    fn drop(&mut self) {
        // SAFETY: puts back the mask read in `new`, a live `sigset_t`.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, std::ptr::null_mut()) };
    }
}

/// Forks this process has made since the first region (counted in each
/// child by a `pthread_atfork` handler): a region remembers the count it
/// was made under and refuses calls from a child, whose count is higher.
static FORKS: AtomicU64 = AtomicU64::new(0);

extern "C" fn count_fork_in_child() {
    FORKS.fetch_add(1, SeqCst);
}

/// Starts counting forks (once; before the first region is made) and
/// returns the count now.
pub(crate) fn watch_forks() -> u64 {
    static WATCH: Once = Once::new();
    WATCH.call_once(|| {
        // SAFETY: registers a function of this module, which only adds to
        // an atomic, to run in the child after a fork.
        unsafe { libc::pthread_atfork(None, None, Some(count_fork_in_child)) };
    });
    forks()
}

/// The fork count now (a forked child's is higher than its parent's was
/// at the fork). Async-signal-safe: one atomic load.
pub(crate) fn forks() -> u64 {
    FORKS.load(SeqCst)
}

/// Bytes of physical memory (`sysconf(_SC_PHYS_PAGES)`), or 4 GiB where
/// unknown.
pub(crate) fn physical_memory() -> u64 {
    // SAFETY: `sysconf` reads no memory of ours.
    let (pages, size) = unsafe { (libc::sysconf(libc::_SC_PHYS_PAGES), libc::sysconf(libc::_SC_PAGESIZE)) };
    match (u64::try_from(pages), u64::try_from(size)) {
        (Ok(pages), Ok(size)) if pages > 0 && size > 0 => pages.saturating_mul(size),
        _ => 4 << 30,
    }
}

#[cfg(test)]
pub(crate) mod testing;
