//! The process-wide `SIGBUS` action of regions in `SIGBUS` mode, at the
//! system-call level: installing it, reading what the kernel passes, and
//! handing every signal that is not a region's fault to the action that
//! was there before (wasmtime's `vm/sys/unix/signals.rs` is the model for
//! installing and chaining).
//!
//! What the handler does, in order, all async-signal-safe: saves `errno`;
//! takes the signal as a region fault only when the kernel raised it for
//! a fault (`si_code` `BUS_ADRERR`; a `kill`/`tgkill` has `SI_USER` or
//! `SI_TKILL`, never a fault) and the resolver (the region table's lookup,
//! `region::signal`) says the address is a live region's and resolves it;
//! otherwise chains; restores `errno`. The resolver runs on one of the
//! handler's own stacks (`stack`), so that where the signal landed it
//! needs only the kernel's signal frame and this module's few hundred
//! bytes; with every own stack taken (or without the switch, on other
//! architectures than x86-64) it runs where it is, told the stack is small
//! (it then hands loads to the handler thread). Installed with
//! `SA_SIGINFO` and every blockable signal in `sa_mask`, so no handler of
//! the program's runs on top of it; without `SA_NODEFER` (a fault inside
//! it is fatal, as for any handler); with `SA_ONSTACK` where it can switch
//! stacks, so that on a thread with an alternate signal stack (Rust's
//! threads have one) even the kernel's frame lands there, not on a stack
//! that may be nearly used up. Its needs are measured in the region tests
//! (`docs/zsmalloc-zswap.md`).
//!
//! Chaining keeps the previous action intact: a function is called; the
//! default action or "ignore" is put back for a fault (the access faults
//! again and gets it, as without regions); for a signal sent by a
//! process, "ignore" ignores it, the default action is applied (put back,
//! the signal raised again, delivered once the handler returns), and
//! after a function ours is put back if the function replaced it (std's
//! handler resets the action to the default before it returns, expecting
//! the fault to come again: a `kill -BUS` would otherwise leave regions
//! without their handler).

use super::stack;
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::OnceLock;

/// What resolves a fault: `(address, write, small_stack)` → resolved.
/// `small_stack`: the handler could not move to a stack of its own and
/// runs on one of unknown room (the faulting thread's, perhaps nearly used
/// up, or an alternate stack that may be as small as glibc's `SIGSTKSZ`,
/// 8 KiB): the resolver must then use the least stack it can.
pub(crate) type Resolver = fn(usize, bool, bool) -> bool;

/// The resolver, as an address (0 until installed).
static RESOLVER: AtomicUsize = AtomicUsize::new(0);
/// The `SIGBUS` action before ours, or the error that kept ours out.
static PREVIOUS: OnceLock<Result<libc::sigaction, i32>> = OnceLock::new();

/// Our action.
fn ours() -> libc::sigaction {
    // SAFETY: a zeroed `sigaction` is a valid value (no handler, empty
    // mask, no flags), filled in below.
    let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
    action.sa_sigaction = on_sigbus as *const () as libc::sighandler_t;
    action.sa_flags = if stack::CAN_SWITCH { libc::SA_SIGINFO | libc::SA_ONSTACK } else { libc::SA_SIGINFO };
    // SAFETY: `sa_mask` is a live `sigset_t` of ours.
    unsafe { libc::sigfillset(&mut action.sa_mask) };
    action
}

/// Installs the handler (once), keeping the previous action for chaining;
/// `resolve` is what it asks about each fault.
pub(crate) fn install(resolve: Resolver) -> Result<(), i32> {
    let previous = PREVIOUS.get_or_init(|| {
        RESOLVER.store(resolve as usize, SeqCst);
        let action = ours();
        // SAFETY: as in `ours`, a value the kernel fills.
        let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: `sigaction` reads `action` and writes `old`, both live;
        // the handler it installs is a function of this module, which stays
        // loaded for the life of the process.
        if unsafe { libc::sigaction(libc::SIGBUS, &action, &mut old) } != 0 {
            return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
        }
        Ok(old)
    });
    previous.map(|_| ())
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

/// Whether the stack the handler runs on may be small: where it cannot
/// switch stacks, whether the thread is on its alternate stack
/// (`sigaltstack`); where it can but found no stack of its own free,
/// always (it may be the faulting thread's, nearly used up).
fn small_stack_here() -> bool {
    if stack::CAN_SWITCH {
        return true;
    }
    // SAFETY: `now` is a live `stack_t` the kernel fills.
    let mut now: libc::stack_t = unsafe { std::mem::zeroed() };
    // SAFETY: reads this thread's alternate stack into `now`.
    let read = unsafe { libc::sigaltstack(std::ptr::null(), &mut now) };
    read == 0 && now.ss_flags & libc::SS_ONSTACK != 0
}

/// A fault for the resolver, called on one of the handler's stacks.
struct Call {
    resolve: Resolver,
    addr: usize,
    write: bool,
    resolved: bool,
}

extern "C" fn resolve_call(call: *mut c_void) {
    // SAFETY: `on_sigbus` passes its live, exclusive `Call`, which outlives
    // this call.
    let call = unsafe { &mut *call.cast::<Call>() };
    call.resolved = (call.resolve)(call.addr, call.write, false);
}

/// Ends the process after writing `message` to standard error (both
/// async-signal-safe): a fault the handler must not resolve and must not
/// leave to fault for ever.
pub(crate) fn die(message: &str) -> ! {
    // SAFETY: `write` reads `message`'s bytes; `abort` ends the process.
    unsafe {
        libc::write(2, message.as_ptr().cast(), message.len());
        libc::abort()
    }
}

extern "C" fn on_sigbus(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    // SAFETY: `__errno_location` gives this thread's `errno`, a live int.
    let errno = unsafe { *libc::__errno_location() };
    // SAFETY: for an `SA_SIGINFO` handler the kernel passes a live
    // `siginfo_t`; `si_addr` is the faulting address for a fault's
    // `SIGBUS`.
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    let resolver = RESOLVER.load(SeqCst);
    let handled = code == libc::BUS_ADRERR && resolver != 0 && {
        // SAFETY: `RESOLVER` holds only a `Resolver` stored by `install`.
        let resolve: Resolver = unsafe { std::mem::transmute::<usize, Resolver>(resolver) };
        let mut call = Call { resolve, addr, write: is_write(context), resolved: false };
        if stack::call_on_own_stack(resolve_call, std::ptr::addr_of_mut!(call).cast()) {
            call.resolved
        } else {
            resolve(addr, call.write, small_stack_here())
        }
    };
    if !handled {
        chain(signal, info, context, code <= 0);
    }
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
}

/// Hands the signal to the action that was installed before ours;
/// `sent` when a process sent it (no fault will come again).
fn chain(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void, sent: bool) {
    let Some(Ok(previous)) = PREVIOUS.get() else { return };
    let handler = previous.sa_sigaction;
    if handler == libc::SIG_IGN && sent {
        return;
    }
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        // SAFETY: `previous` is a valid action the kernel gave us.
        unsafe { libc::sigaction(signal, previous, std::ptr::null_mut()) };
        if sent {
            // The default action of a sent SIGBUS ends the process: raised
            // again, it is delivered as the handler returns (it is blocked
            // while the handler runs).
            // SAFETY: `raise` is async-signal-safe.
            unsafe { libc::raise(signal) };
        }
        // A fault: the access faults again and gets the default action
        // (for a fault, "ignore" is not possible: the kernel forces the
        // default).
        return;
    }
    if previous.sa_flags & libc::SA_SIGINFO != 0 {
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
    if sent {
        // SAFETY: `now` is a live `sigaction` the kernel fills.
        let mut now: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: reads the action into `now`.
        unsafe { libc::sigaction(signal, std::ptr::null(), &mut now) };
        if now.sa_sigaction == libc::SIG_DFL {
            // SAFETY: installs our action again, as `install` did.
            unsafe { libc::sigaction(signal, &ours(), std::ptr::null_mut()) };
        }
    }
}
