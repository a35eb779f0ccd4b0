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
    let status = wait_or_kill(pid, 10)?;
    libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status))
}

/// Waits up to `seconds` for child `pid` to end and returns its status;
/// `None` when it still ran (it is then killed and reaped: a hang).
fn wait_or_kill(pid: libc::pid_t, seconds: u64) -> Option<libc::c_int> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(seconds);
    let mut status = 0;
    loop {
        // SAFETY: polls the caller's child, writing only `status`.
        let ret = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if ret == pid {
            return Some(status);
        }
        if std::time::Instant::now() > deadline {
            // SAFETY: ends and reaps the caller's child.
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

/// Sends `SIGBUS` to the calling thread as a process would (`tgkill`:
/// `si_code` `SI_TKILL`, no fault).
pub(crate) fn send_sigbus_to_self() {
    // SAFETY: `raise` sends a signal to this thread; no memory is touched.
    assert_eq!(unsafe { libc::raise(libc::SIGBUS) }, 0);
}

/// The action installed for `SIGBUS` now is a function (not the default
/// or "ignore").
pub(crate) fn sigbus_has_a_handler() -> bool {
    // SAFETY: `now` is a live `sigaction` the kernel fills.
    let mut now: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: reads the action into `now`.
    unsafe { libc::sigaction(libc::SIGBUS, std::ptr::null(), &mut now) };
    now.sa_sigaction != libc::SIG_DFL && now.sa_sigaction != libc::SIG_IGN
}

/// This thread's `errno`.
pub(crate) fn errno() -> i32 {
    // SAFETY: this thread's `errno`, a live int.
    unsafe { *libc::__errno_location() }
}

/// Sets this thread's `errno`.
pub(crate) fn set_errno(value: i32) {
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = value };
}

/// The `SIGBUS` action a program's chaining handler replaced.
static REPLACED: std::sync::OnceLock<libc::sigaction> = std::sync::OnceLock::new();

/// A program's `SIGBUS` handler, as language runtimes install them: on the
/// thread's alternate stack (`SA_ONSTACK`), handing every signal to the
/// action it replaced.
extern "C" fn chain_on_alternate_stack(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    let Some(previous) = REPLACED.get() else { return };
    if previous.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the replaced action was installed with `SA_SIGINFO`, so
        // it takes the kernel's three arguments.
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(previous.sa_sigaction) };
        f(signal, info, context);
    }
}

/// An alternate signal stack of `size` bytes above a guard page, painted
/// so that its use can be measured; the calling thread's until dropped.
pub(crate) struct AlternateStack {
    base: *mut u8,
    size: usize,
}

const PAINT: u8 = 0xa5;

impl AlternateStack {
    /// Maps it and makes it the thread's (`sigaltstack`).
    pub(crate) fn new(size: usize) -> Self {
        // SAFETY: a fresh anonymous mapping of the guard page and the stack.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size + 4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(map, libc::MAP_FAILED);
        // SAFETY: the lowest page of the mapping just made becomes the
        // guard: an overflow of the stack faults there.
        assert_eq!(unsafe { libc::mprotect(map, 4096, libc::PROT_NONE) }, 0);
        let base = map.cast::<u8>().wrapping_add(4096);
        // SAFETY: `base .. base + size` is the writable part of the mapping.
        unsafe { std::ptr::write_bytes(base, PAINT, size) };
        let stack = libc::stack_t { ss_sp: base.cast(), ss_flags: 0, ss_size: size };
        // SAFETY: the stack lives until `drop`, which takes it back first.
        assert_eq!(unsafe { libc::sigaltstack(&stack, std::ptr::null_mut()) }, 0);
        Self { base, size }
    }

    /// Bytes of it ever written (from its top down to the lowest byte not
    /// still painted).
    pub(crate) fn used(&self) -> usize {
        // SAFETY: the stack's bytes, read while no handler runs on it.
        let bytes = unsafe { std::slice::from_raw_parts(self.base, self.size) };
        self.size - bytes.iter().take_while(|&&b| b == PAINT).count()
    }
}

impl Drop for AlternateStack {
    fn drop(&mut self) {
        let off = libc::stack_t { ss_sp: std::ptr::null_mut(), ss_flags: libc::SS_DISABLE, ss_size: 0 };
        // SAFETY: takes the stack back from the thread, then unmaps it.
        unsafe {
            libc::sigaltstack(&off, std::ptr::null_mut());
            libc::munmap(self.base.wrapping_sub(4096).cast(), self.size + 4096);
        }
    }
}

/// Installs [`chain_on_alternate_stack`] for `SIGBUS` over whatever is
/// there (the regions' handler), keeping it to chain to.
pub(crate) fn install_chaining_handler_on_alternate_stack() {
    // SAFETY: zeroed `sigaction`s are valid; filled in below.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = chain_on_alternate_stack as *const () as libc::sighandler_t;
    action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: installs a function of this module, keeping the old action.
    assert_eq!(unsafe { libc::sigaction(libc::SIGBUS, &action, &mut old) }, 0);
    assert!(REPLACED.set(old).is_ok());
}

/// The address a `SIGALRM` handler of the test's reads, and how many times
/// it has.
static ALARM_TARGET: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static ALARM_READS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

extern "C" fn read_on_alarm(_: libc::c_int) {
    let addr = ALARM_TARGET.load(std::sync::atomic::Ordering::SeqCst);
    if addr != 0 {
        // SAFETY: the test points the target at a live region's page and
        // clears it before the region goes.
        let _ = unsafe { std::ptr::read_volatile(addr as *const u64) };
        ALARM_READS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Installs a `SIGALRM` handler that reads the word at `addr` (a raw touch
/// of region memory from a program's signal handler); 0 stops it.
pub(crate) fn read_on_alarm_at(addr: usize) {
    ALARM_TARGET.store(addr, std::sync::atomic::Ordering::SeqCst);
    // SAFETY: a zeroed `sigaction` is valid; filled in below.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = read_on_alarm as *const () as libc::sighandler_t;
    action.sa_flags = libc::SA_RESTART;
    // SAFETY: installs a function of this module.
    assert_eq!(unsafe { libc::sigaction(libc::SIGALRM, &action, std::ptr::null_mut()) }, 0);
}

/// Reads the `SIGALRM` handler has done.
pub(crate) fn alarm_reads() -> u64 {
    ALARM_READS.load(std::sync::atomic::Ordering::SeqCst)
}

/// The calling thread, to signal from another.
pub(crate) fn this_thread() -> libc::pthread_t {
    // SAFETY: no memory is touched.
    unsafe { libc::pthread_self() }
}

/// Sends `SIGALRM` to `thread` (which must still run).
pub(crate) fn alarm(thread: libc::pthread_t) {
    // SAFETY: the caller keeps `thread` alive while it signals it.
    unsafe { libc::pthread_kill(thread, libc::SIGALRM) };
}

/// `madvise(advice)` on `len` bytes at `addr`, as a program may do to
/// region memory behind the region's back.
pub(crate) fn madvise(addr: *mut u8, len: usize, advice: libc::c_int) {
    // SAFETY: the test passes a part of a live region; the advice drops or
    // re-flags pages, which the region must cope with (what is tested).
    assert_eq!(unsafe { libc::madvise(addr.cast(), len, advice) }, 0);
}

/// `munmap` of `len` bytes at `addr`: part of a region taken away.
pub(crate) fn munmap(addr: *mut u8, len: usize) {
    // SAFETY: the test unmaps a part of a live region that nothing of
    // Rust's refers to; the region's later calls must cope with it.
    assert_eq!(unsafe { libc::munmap(addr.cast(), len) }, 0);
}

/// Forks a child that runs `f` and `_exit`s with its answer; returns the
/// child's exit code, or `None` if it was killed by a signal or still ran
/// after 20 s (then it is killed: a hang).
pub(crate) fn in_forked_child(f: impl FnOnce() -> i32) -> Option<i32> {
    // SAFETY: the child runs `f`, which the tests keep to the region's
    // calls and plain memory, then `_exit`s without running the parent's
    // destructors.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let code = f();
        // SAFETY: ends the child.
        unsafe { libc::_exit(code) };
    }
    let status = wait_or_kill(pid, 20)?;
    libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status))
}

/// The calling thread's stack, as the C library reports it: its lowest
/// usable address (above the guard page) and its top.
pub(crate) fn stack_bounds() -> (usize, usize) {
    // SAFETY: `attr` is filled by `pthread_getattr_np` before it is read
    // and destroyed after; the calls write only `attr`, `addr` and `size`.
    unsafe {
        let mut attr: libc::pthread_attr_t = std::mem::zeroed();
        assert_eq!(libc::pthread_getattr_np(libc::pthread_self(), &mut attr), 0);
        let mut addr: *mut libc::c_void = std::ptr::null_mut();
        let mut size = 0;
        assert_eq!(libc::pthread_attr_getstack(&attr, &mut addr, &mut size), 0);
        libc::pthread_attr_destroy(&mut attr);
        (addr as usize, addr as usize + size)
    }
}

/// Takes the calling thread's alternate signal stack away (as a thread
/// made by C code has none): its signals land on its own stack.
pub(crate) fn disable_alternate_stack() {
    let off = libc::stack_t { ss_sp: std::ptr::null_mut(), ss_flags: libc::SS_DISABLE, ss_size: 0 };
    // SAFETY: only this thread's alternate stack setting changes; the
    // stack std made stays mapped (std unmaps it when the thread ends).
    assert_eq!(unsafe { libc::sigaltstack(&off, std::ptr::null_mut()) }, 0);
}

/// Keeps `len` bytes at `addr` from being mapped by anything else until
/// [`release`] (an inaccessible mapping placed there, if the range is
/// free); whether it could.
pub(crate) fn reserve(addr: usize, len: usize) -> bool {
    // SAFETY: `MAP_FIXED_NOREPLACE` maps only where nothing is mapped (it
    // fails otherwise): nothing of this program's is replaced.
    let ptr = unsafe {
        libc::mmap(
            addr as *mut libc::c_void,
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    ptr as usize == addr
}

/// Gives back a range [`reserve`] took.
pub(crate) fn release(addr: usize, len: usize) {
    // SAFETY: the range is the caller's reservation, which nothing uses.
    assert_eq!(unsafe { libc::munmap(addr as *mut libc::c_void, len) }, 0);
}
