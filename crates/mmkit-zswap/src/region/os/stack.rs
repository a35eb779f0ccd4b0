//! The `SIGBUS` handler's own stacks: a fixed pool of [`STACKS`] stacks of
//! [`STACK_BYTES`] each, above a guard page, mapped the first time one is
//! taken (by the handler itself: `mmap` and `mprotect` are system calls)
//! and kept for the life of the process, and the switch onto one.
//!
//! Why: a load in the handler needs several KiB of stack (a decompression,
//! a page-sized buffer when the region's buffers are all taken); the
//! faulting thread may be deep in a recursion near the end of its stack,
//! or the handler may have been called by a program's handler on a small
//! alternate stack. On its own stack the handler needs only the kernel's
//! signal frame and a few hundred bytes where the signal landed (wasmtime
//! gives its handlers a stack of their own for the same reason, as a
//! per-thread alternate stack; here the pool needs no per-thread set-up,
//! which a raw touch of region memory gives no chance for).
//!
//! A stack is taken with a compare-and-swap and given back when the call
//! on it returns; a thread takes at most one at a time (the handler blocks
//! every signal while it runs). With every stack taken, or on an
//! architecture without the switch (anything but x86-64), the caller runs
//! where it is.
//!
//! Owns the pool; the only `unsafe` is the mapping and the switch.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::AcqRel, Ordering::Acquire, Ordering::Release};

/// Stacks in the pool: more threads than this in the handler at once run
/// where the signal landed.
pub(crate) const STACKS: usize = 64;
/// Bytes of each stack (the guard page below is extra).
pub(crate) const STACK_BYTES: usize = 64 << 10;
const GUARD: usize = 4096;

struct Stack {
    taken: AtomicBool,
    /// The lowest byte of the stack (above its guard), 0 until mapped.
    base: AtomicUsize,
}

static POOL: [Stack; STACKS] = [const { Stack { taken: AtomicBool::new(false), base: AtomicUsize::new(0) } }; STACKS];

/// Whether this architecture can switch stacks.
pub(crate) const CAN_SWITCH: bool = cfg!(target_arch = "x86_64");

/// Maps a stack with its guard page; its base, or `None`.
fn map_stack() -> Option<usize> {
    // SAFETY: a fresh private anonymous mapping at an address the kernel
    // picks overlaps nothing of this program's.
    let ptr = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            GUARD + STACK_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK,
            -1,
            0,
        )
    };
    if ptr == libc::MAP_FAILED {
        return None;
    }
    // SAFETY: the lowest page of the mapping just made becomes the guard:
    // an overflow of the stack faults there instead of running into other
    // memory.
    if unsafe { libc::mprotect(ptr, GUARD, libc::PROT_NONE) } != 0 {
        // SAFETY: the mapping just made, which nothing else uses.
        unsafe { libc::munmap(ptr, GUARD + STACK_BYTES) };
        return None;
    }
    Some(ptr as usize + GUARD)
}

/// Calls `f(arg)` on one of the pool's stacks and returns true; false
/// (nothing called) when none can be had here. Async-signal-safe: atomics,
/// and `mmap`/`mprotect` the first time a stack is used.
pub(crate) fn call_on_own_stack(f: extern "C" fn(*mut c_void), arg: *mut c_void) -> bool {
    if !CAN_SWITCH {
        return false;
    }
    // Start where another thread is unlikely to: by this stack's address.
    let here = std::ptr::addr_of!(f) as usize;
    let first = (here >> 12) % STACKS;
    for k in 0..STACKS {
        let stack = &POOL[(first + k) % STACKS];
        if stack.taken.compare_exchange(false, true, AcqRel, Acquire).is_err() {
            continue;
        }
        let mut base = stack.base.load(Acquire);
        if base == 0 {
            match map_stack() {
                Some(b) => {
                    stack.base.store(b, Release);
                    base = b;
                }
                None => {
                    stack.taken.store(false, Release);
                    return false;
                }
            }
        }
        let top = base + STACK_BYTES;
        // SAFETY: `base .. top` is a stack of this pool, mapped read-write
        // above its guard page, that no other thread uses (taken above) and
        // no frame of this thread's lies on (a thread takes one at a time);
        // `top` is page-aligned, so 16-aligned.
        unsafe { switch_and_call(top as *mut u8, f, arg) };
        stack.taken.store(false, Release);
        return true;
    }
    false
}

/// Calls `f(arg)` with the stack pointer at `top`, and comes back to this
/// stack.
///
/// # Safety
/// `top` is the 16-aligned end of a writable stack large enough for `f`,
/// used by nothing else while `f` runs; `f` does not unwind (an
/// `extern "C"` function that panics aborts).
#[cfg(target_arch = "x86_64")]
unsafe fn switch_and_call(top: *mut u8, f: extern "C" fn(*mut c_void), arg: *mut c_void) {
    // SAFETY: the old stack pointer is kept in r12, which the System V ABI
    // makes callee-saved (so `f` gives it back), declared clobbered here;
    // the `call` runs with the stack pointer 16-aligned as the ABI wants,
    // the red zone under the old stack pointer is never touched, and every
    // register `f` may change is declared clobbered (`clobber_abi`).
    unsafe {
        core::arch::asm!(
            "mov r12, rsp",
            "mov rsp, {top}",
            "call {f}",
            "mov rsp, r12",
            top = in(reg) top,
            f = in(reg) f,
            in("rdi") arg,
            out("r12") _,
            clobber_abi("C"),
        );
    }
}

#[cfg(not(target_arch = "x86_64"))]
unsafe fn switch_and_call(_: *mut u8, _: extern "C" fn(*mut c_void), _: *mut c_void) {
    unreachable!("no stack switch on this architecture (CAN_SWITCH is false)")
}

/// The most bytes of any of the pool's stacks ever written, from its top
/// down to its lowest byte that is not zero (stacks start zeroed); for the
/// tests that measure the handler's need.
#[cfg(test)]
pub(crate) fn deepest_use() -> usize {
    let mut deepest = 0;
    for stack in &POOL {
        let base = stack.base.load(Acquire);
        if base == 0 || stack.taken.load(Acquire) {
            continue;
        }
        // SAFETY: a mapped stack of the pool, not in use (checked above;
        // a test reads this with no handler running).
        let bytes = unsafe { std::slice::from_raw_parts(base as *const u8, STACK_BYTES) };
        let untouched = bytes.iter().take_while(|&&b| b == 0).count();
        deepest = deepest.max(STACK_BYTES - untouched);
    }
    deepest
}
