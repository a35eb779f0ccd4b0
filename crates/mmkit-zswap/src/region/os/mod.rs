//! The operating system behind one facade: everything a region asks of
//! Linux — the mapping and its copies, reads, drops and advice
//! (`mapping`), the userfaultfd calls (`uffd`: copy, zero, poison,
//! write-protect, wake, next event), the `SIGBUS` registration and what a
//! signal handler may call (`signal`), and here the handler thread's
//! wake-up pipe and wait, futexes, signal masks and the fork count.
//!
//! The rest of the region calls only this module: no `rustix` or `libc`
//! outside it (its tests' fork helpers are `cfg(test)` items here). Every
//! call made from the `SIGBUS` handler is a plain system call or an atomic
//! operation: async-signal-safe, no allocation, no lock.
#![allow(unsafe_code)]

pub(crate) mod mapping;
pub(crate) mod signal;
pub(crate) mod uffd;

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
use std::sync::Once;

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
pub(crate) fn is_again(e: &std::io::Error) -> bool {
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

/// Blocks every asynchronous signal in the calling thread for good (the
/// handler thread: a program's signals land on its own threads).
pub(crate) fn block_asynchronous_signals() {
    std::mem::forget(SignalsBlocked::new());
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
