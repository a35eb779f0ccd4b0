//! The process-wide `SIGBUS` handler of regions whose userfaultfd has
//! `UFFD_FEATURE_SIGBUS`: a touch of a missing or write-protected page of
//! such a region raises `SIGBUS` in the touching thread instead of waking
//! the handler thread, and this handler resolves the fault right there
//! (`pager`'s `resolve_signal`) and returns, so the access runs again.
//!
//! Installed once, on the first such region, with `SA_SIGINFO |
//! SA_NODEFER` (wasmtime's `vm/sys/unix/signals.rs` is the model for
//! installing and chaining). Not `SA_ONSTACK`: the resolution decompresses
//! (and may compress, to evict) on the stack, more than a thread's
//! alternate signal stack holds (Rust's runtime gives threads one of a few
//! pages for its stack-overflow report). Every other `SIGBUS` — an address
//! outside every live region, or a region page whose load failed — goes to
//! the handler that was installed before this one: called if it is a
//! function; if it was the default action or "ignore", it is put back and
//! the handler returns, so the access faults again and gets it.
//!
//! Live regions are found in a fixed table of pointers (no lock, no
//! allocation in the handler); a count of handlers in flight lets a
//! region's drop wait until no handler can still be looking at it before
//! the region is freed. Owns the table, the count and the saved previous
//! action; the only `unsafe` is `sigaction`, reading the `siginfo` and
//! `ucontext` the kernel passes, and dereferencing a table entry.
#![allow(unsafe_code)]

use super::pager::Shared;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, OnceLock};

/// Regions that may be registered at once.
const SLOTS: usize = 64;

/// Live regions in `SIGBUS` mode.
static REGIONS: [AtomicPtr<Shared>; SLOTS] = [const { AtomicPtr::new(std::ptr::null_mut()) }; SLOTS];
/// Handlers running now (that may hold a pointer from `REGIONS`).
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);
/// The `SIGBUS` action before ours, or the error that kept ours out.
static PREVIOUS: OnceLock<Result<libc::sigaction, i32>> = OnceLock::new();

/// A region's entry in the table; dropping it takes the region out and
/// waits until no handler can still be using it.
pub(crate) struct Registration {
    slot: usize,
    /// Keeps the region's shared state alive as long as it is listed.
    _shared: Arc<Shared>,
}

/// Lists `shared` for the handler, installing the handler on first use.
/// `None` when the handler cannot be installed or the table is full: the
/// region must not then use `SIGBUS` mode.
pub(crate) fn register(shared: &Arc<Shared>) -> Option<Registration> {
    install().ok()?;
    let ptr = Arc::as_ptr(shared).cast_mut();
    for (slot, entry) in REGIONS.iter().enumerate() {
        if entry.compare_exchange(std::ptr::null_mut(), ptr, SeqCst, SeqCst).is_ok() {
            return Some(Registration { slot, _shared: shared.clone() });
        }
    }
    None
}

impl Drop for Registration {
    fn drop(&mut self) {
        REGIONS[self.slot].store(std::ptr::null_mut(), SeqCst);
        // A handler that loaded the pointer counted itself in first: once
        // the count is seen at zero after the store, none holds it.
        while IN_FLIGHT.load(SeqCst) != 0 {
            std::thread::yield_now();
        }
    }
}

/// Installs the handler (once), keeping the previous action for chaining.
pub(crate) fn install() -> Result<(), i32> {
    let previous = PREVIOUS.get_or_init(|| {
        // SAFETY: a zeroed `sigaction` is a valid value (no handler, empty
        // mask, no flags) that is filled in before use.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = on_sigbus as *const () as libc::sighandler_t;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_NODEFER;
        // SAFETY: `sa_mask` is a live `sigset_t` of ours.
        unsafe { libc::sigemptyset(&mut action.sa_mask) };
        // SAFETY: as above, a value the kernel fills.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: `sigaction` reads `action` and writes `old`, both live;
        // the handler it installs is a function of this module, which stays
        // loaded for the life of the process.
        if unsafe { libc::sigaction(libc::SIGBUS, &action, &mut old) } != 0 {
            return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
        }
        // A forked child has none of the regions (they are MADV_DONTFORK)
        // but would inherit the table and the parent's userfaultfds, through
        // which a SIGBUS at a region's old address would reach into the
        // parent: the child starts with an empty table.
        // SAFETY: registers a function of this module, which only stores to
        // atomics, to run in the child after a fork.
        unsafe { libc::pthread_atfork(None, None, Some(forget_in_child)) };
        Ok(old)
    });
    previous.map(|_| ())
}

/// Empties the table in a forked child (the regions stay the parent's).
extern "C" fn forget_in_child() {
    for entry in &REGIONS {
        entry.store(std::ptr::null_mut(), SeqCst);
    }
}

/// Whether the fault was a write, where the architecture says so (x86's
/// page-fault error code, bit 1); elsewhere a write is found out by a
/// second fault on the write-protected page.
fn is_write(context: *mut libc::c_void) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        if context.is_null() {
            return false;
        }
        // SAFETY: for an `SA_SIGINFO` handler the third argument is the
        // interrupted thread's `ucontext_t`, live while the handler runs.
        let context = unsafe { &*context.cast::<libc::ucontext_t>() };
        context.uc_mcontext.gregs[libc::REG_ERR as usize] & 2 != 0
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = context;
        false
    }
}

extern "C" fn on_sigbus(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: for an `SA_SIGINFO` handler the kernel passes a live
    // `siginfo_t`; `si_addr` is the faulting address for `SIGBUS`.
    let addr = unsafe { (*info).si_addr() } as usize;
    IN_FLIGHT.fetch_add(1, SeqCst);
    let mut handled = false;
    for entry in &REGIONS {
        let ptr = entry.load(SeqCst);
        if ptr.is_null() {
            continue;
        }
        // SAFETY: a listed pointer is an `Arc<Shared>` kept alive by its
        // `Registration`, whose drop unlists it and then waits for
        // `IN_FLIGHT` to reach zero, which this handler holds above zero.
        let shared = unsafe { &*ptr };
        if let Some(offset) = addr.checked_sub(shared.map.as_ptr() as usize).filter(|&o| o < shared.map.len()) {
            handled = shared.resolve_signal(offset / crate::PAGE_SIZE, is_write(context));
            break;
        }
    }
    IN_FLIGHT.fetch_sub(1, SeqCst);
    if !handled {
        chain(signal, info, context);
    }
}

/// Hands the signal to the action that was installed before ours.
fn chain(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    let Some(Ok(previous)) = PREVIOUS.get() else { return };
    let handler = previous.sa_sigaction;
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        // Put the old action back and return: the access faults again and
        // gets the default action (for a SIGBUS from a fault, ignoring is
        // not possible: the kernel forces the default).
        // SAFETY: `previous` is a valid action the kernel gave us.
        unsafe { libc::sigaction(signal, previous, std::ptr::null_mut()) };
    } else if previous.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler was installed with `SA_SIGINFO`, so
        // it takes these three arguments, which are the kernel's.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(handler) };
        f(signal, info, context);
    } else {
        // SAFETY: without `SA_SIGINFO` the previous handler takes the
        // signal number alone.
        let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(handler) };
        f(signal);
    }
}

/// Test helpers that need `unsafe`: a process `SIGBUS` handler of the
/// test's own, and a genuine `SIGBUS` outside every region.
#[cfg(test)]
pub(crate) mod testing {
    /// Installs a `SIGBUS` handler that exits the process with `code`
    /// (the code is kept in a static: a handler gets no argument of ours).
    pub(crate) fn install_exiting_handler(code: i32) {
        static CODE: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);
        extern "C" fn exit_with_code(_: libc::c_int) {
            // SAFETY: `_exit` is async-signal-safe and ends the process.
            unsafe { libc::_exit(CODE.load(std::sync::atomic::Ordering::SeqCst)) }
        }
        CODE.store(code, std::sync::atomic::Ordering::SeqCst);
        // SAFETY: a zeroed `sigaction` is valid; it is filled in below.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = exit_with_code as *const () as libc::sighandler_t;
        // SAFETY: `sigaction` reads `action`; the handler is a function of
        // this module.
        assert_eq!(unsafe { libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut()) }, 0);
    }

    /// Touches a page of a file mapping past the file's end: a genuine
    /// `SIGBUS`, at an address in no region (the file is an empty memfd,
    /// so nothing is left behind).
    pub(crate) fn touch_past_end_of_file() {
        // SAFETY: the name is a NUL-terminated literal; a new descriptor
        // or -1 is returned.
        let fd = unsafe { libc::memfd_create(c"mmkit-sigbus-test".as_ptr(), libc::MFD_CLOEXEC) };
        assert!(fd >= 0);
        // SAFETY: a new shared mapping of a page of an empty file, at an
        // address the kernel picks; reading it raises SIGBUS (past EOF).
        let ptr = unsafe { libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ, libc::MAP_SHARED, fd, 0) };
        assert_ne!(ptr, libc::MAP_FAILED);
        // SAFETY: the mapping is live and readable; the read is what raises
        // the signal.
        let _ = unsafe { std::ptr::read_volatile(ptr.cast::<u8>()) };
    }

    /// Forks a child that maps an empty file at `addr` (where the parent
    /// has a region, which the child does not have) and reads it: a genuine
    /// SIGBUS at a region's address in a process without the region.
    /// Returns the signal that ended the child, or `None` if it exited or
    /// was still running after 10 s (then it is killed).
    pub(crate) fn fork_and_touch_file_at(addr: *mut u8) -> Option<i32> {
        // SAFETY: the child runs only async-signal-safe calls (memfd_create,
        // mmap, a read, _exit) and no code that could need a lock another
        // thread of the parent held at the fork.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // SAFETY: in the child; the fixed address is inside the
            // parent's region, which the child does not have mapped.
            unsafe {
                let fd = libc::memfd_create(c"mmkit-fork-test".as_ptr(), 0);
                let flags = libc::MAP_SHARED | libc::MAP_FIXED;
                let ptr = libc::mmap(addr.cast(), 4096, libc::PROT_READ, flags, fd, 0);
                if fd < 0 || ptr != addr.cast() {
                    libc::_exit(4);
                }
                let _ = std::ptr::read_volatile(addr);
                libc::_exit(0);
            }
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut status = 0;
        loop {
            // SAFETY: polls the child just made, writing only `status`.
            let ret = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
            if ret == pid {
                return libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status));
            }
            if std::time::Instant::now() > deadline {
                // SAFETY: ends and reaps the child this function made.
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                    libc::waitpid(pid, &mut status, 0);
                }
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// Blocks `SIGBUS` in the calling thread.
    pub(crate) fn block_sigbus() {
        // SAFETY: `set` is a live `sigset_t`, emptied before use.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGBUS);
            assert_eq!(libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()), 0);
        }
    }
}
