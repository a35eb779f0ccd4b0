//! Test helpers that need `unsafe`: a process `SIGBUS` handler of the
//! test's own, a genuine `SIGBUS` outside every region, forks, signal
//! masks, a `SIGBUS` sent by a process, a chaining handler on a small
//! alternate stack, a timer signal whose handler touches a region.

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
