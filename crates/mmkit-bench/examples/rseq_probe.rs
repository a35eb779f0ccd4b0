//! What a per-CPU cache under restartable sequences would cost, measured
//! against the two designs mmkit has for order-0 caching on the shared
//! API: the per-CPU pageset behind a try-lock (the default) and the
//! per-thread cache (`MemoryMapBuilder::thread_caches`).
//!
//! Each design here is only the cache: a stack of 63 page indices, popped
//! and pushed back (one "pair"), with no descriptor work. The difference
//! between two designs' pairs is what replacing one by the other would
//! change in mmkit's order-0 pair, whose descriptor work and reference
//! drop stay the same.
//!
//! - `lock`: the CPU's stack behind a spin try-lock, taken and released per
//!   operation (a compare-and-swap and a release store), the CPU read from
//!   the thread's rseq area;
//! - `tls`: the calling thread's stack in thread-local storage, borrowed
//!   through a `RefCell` per operation, as the thread caches are;
//! - `rseq`: the CPU's stack edited in a restartable sequence (Linux's
//!   `rseq(2)`, as TCMalloc's per-CPU caches are): the kernel restarts the
//!   sequence if the thread is preempted, migrated or signalled before its
//!   one committing store, so no atomic instruction is needed.
//!
//! A prototype for measurement only: x86-64 Linux with the C library's
//! rseq registration (glibc 2.35 and later); elsewhere it says so and
//! exits. Usage: `rseq_probe [pairs]`; `rseq_probe check [pairs]` runs
//! three threads on the same stacks (more threads than CPUs, so sequences
//! are preempted and restarted) and checks that no index is lost or
//! duplicated.

use std::cell::RefCell;
use std::hint::black_box;
use std::time::Instant;

/// Page indices a stack holds (the length word fills the 64th slot).
const SLOTS: usize = 63;

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
mod rseq {
    use super::SLOTS;
    use std::arch::asm;
    use std::sync::atomic::{AtomicBool, Ordering};

    extern "C" {
        /// The dynamic linker's symbol lookup (the C library's rseq
        /// symbols are looked up at run time, so that the probe still links
        /// against a C library older than 2.35).
        fn dlsym(handle: *mut std::ffi::c_void, symbol: *const std::ffi::c_char) -> *mut std::ffi::c_void;
    }

    /// The start of both sequences: publish the descriptor (label 3) in
    /// the area's `rseq_cs` (label 8, where an abort restarts), then, from
    /// the sequence's start (label 2), find the current CPU's stack.
    macro_rules! rseq_enter {
        () => {
            concat!(
                "8:\n",
                "lea {tmp}, [rip + 3f]\n",
                "mov qword ptr [{area} + 8], {tmp}\n",
                "2:\n",
                "mov {stack:e}, dword ptr [{area} + 4]\n",
                "shl {stack}, 8\n",
                "add {stack}, {stacks}\n",
            )
        };
    }

    /// The sequence's descriptor (start 2, commit 4, abort 5) and its abort
    /// handler, preceded by the signature the C library registered, which
    /// retries from label 8.
    macro_rules! rseq_descriptor_and_abort {
        () => {
            concat!(
                ".pushsection __rseq_cs, \"aw\"\n",
                ".balign 32\n",
                "3:\n",
                ".long 0, 0\n",
                ".quad 2b, 4b - 2b, 5f\n",
                ".popsection\n",
                ".pushsection __rseq_failure, \"ax\"\n",
                ".byte 0x0f, 0xb9, 0x3d\n",
                ".long 0x53053053\n",
                "5:\n",
                "jmp 8b\n",
                ".popsection",
            )
        };
    }

    /// The kernel-shared area: `cpu_id_start`, `cpu_id`, `rseq_cs`.
    #[repr(C)]
    pub struct Area {
        cpu_id_start: u32,
        cpu_id: u32,
        rseq_cs: u64,
    }

    /// One CPU's stack: the length, then the indices (256 bytes, one per
    /// CPU, so the `shl 8` in the sequences finds it).
    #[repr(C, align(256))]
    pub struct Stack {
        len: u32,
        items: [u32; SLOTS],
    }

    const _: () = assert!(std::mem::size_of::<Stack>() == 256);

    impl Stack {
        pub const EMPTY: Self = Self { len: 0, items: [0; SLOTS] };

        /// The indices on the stack (read when no sequence runs).
        pub fn items(&self) -> &[u32] {
            &self.items[..self.len as usize]
        }
    }

    /// The calling thread's rseq area, if the C library registered one.
    pub fn area() -> Option<*const Area> {
        // SAFETY: `dlsym` with the default handle (null) and a
        // NUL-terminated name only looks the symbol up.
        let (offset, size) = unsafe {
            (
                dlsym(std::ptr::null_mut(), c"__rseq_offset".as_ptr()),
                dlsym(std::ptr::null_mut(), c"__rseq_size".as_ptr()),
            )
        };
        if offset.is_null() || size.is_null() {
            return None;
        }
        // SAFETY: the C library defines `__rseq_offset` (a `ptrdiff_t`) and
        // `__rseq_size` (an `unsigned int`) before `main` and never changes
        // them afterwards.
        let (offset, size) = unsafe { (*(offset as *const isize), *(size as *const u32)) };
        if size == 0 {
            return None;
        }
        let tp: usize;
        // SAFETY: on x86-64 Linux `fs:0` holds the thread pointer (the TCB
        // points to itself); reading it has no side effect.
        unsafe { asm!("mov {}, qword ptr fs:[0]", out(reg) tp, options(nostack, readonly, preserves_flags)) };
        Some(tp.wrapping_add_signed(offset) as *const Area)
    }

    /// The CPU the kernel last recorded for this thread.
    #[inline(always)]
    pub fn cpu(area: *const Area) -> usize {
        // SAFETY: `area` is this thread's registered rseq area (from
        // `area()`); the kernel updates the field, a volatile read sees it.
        unsafe { std::ptr::addr_of!((*area).cpu_id).read_volatile() as usize }
    }

    /// Pops an index from the current CPU's stack in a restartable
    /// sequence; `None` when the stack is empty.
    ///
    /// # Safety
    /// `area` is the calling thread's registered rseq area and `stacks`
    /// points to one [`Stack`] per possible CPU, touched only by these
    /// sequences while they run.
    #[inline(always)]
    pub unsafe fn pop(area: *const Area, stacks: *mut Stack) -> Option<u32> {
        let (item, found): (u32, u32);
        // SAFETY: the caller's contract; the sequence writes only the
        // rseq_cs field of the area and the current CPU's stack, and its
        // one committing store is the length.
        unsafe {
            asm!(
                rseq_enter!(),
                "mov {len:e}, dword ptr [{stack}]",
                "test {len:e}, {len:e}",
                "jz 6f",
                "dec {len:e}",
                "mov {item:e}, dword ptr [{stack} + 4*{len} + 4]",
                "mov dword ptr [{stack}], {len:e}",
                "4:",
                "mov {found:e}, 1",
                "jmp 7f",
                "6:",
                "xor {found:e}, {found:e}",
                "7:",
                rseq_descriptor_and_abort!(),
                area = in(reg) area,
                stacks = in(reg) stacks,
                tmp = out(reg) _,
                stack = out(reg) _,
                len = out(reg) _,
                item = out(reg) item,
                found = out(reg) found,
                options(nostack),
            );
        }
        (found != 0).then_some(item)
    }

    /// Pushes `item` on the current CPU's stack in a restartable sequence;
    /// false when it is full.
    ///
    /// # Safety
    /// As [`pop`].
    #[inline(always)]
    pub unsafe fn push(area: *const Area, stacks: *mut Stack, item: u32) -> bool {
        let pushed: u32;
        // SAFETY: as in `pop`; the index is stored above the length before
        // the committing store of the length, so an abort leaves nothing.
        unsafe {
            asm!(
                rseq_enter!(),
                "mov {len:e}, dword ptr [{stack}]",
                "cmp {len:e}, {slots}",
                "jae 6f",
                "mov dword ptr [{stack} + 4*{len} + 4], {item:e}",
                "inc {len:e}",
                "mov dword ptr [{stack}], {len:e}",
                "4:",
                "mov {pushed:e}, 1",
                "jmp 7f",
                "6:",
                "xor {pushed:e}, {pushed:e}",
                "7:",
                rseq_descriptor_and_abort!(),
                area = in(reg) area,
                stacks = in(reg) stacks,
                item = in(reg) item,
                slots = const SLOTS,
                tmp = out(reg) _,
                stack = out(reg) _,
                len = out(reg) _,
                pushed = out(reg) pushed,
                options(nostack),
            );
        }
        pushed != 0
    }

    /// A CPU's stack behind a try-lock, as mmkit's pagesets are.
    pub struct Locked {
        lock: AtomicBool,
        stack: std::cell::UnsafeCell<Vec<u32>>,
    }

    // SAFETY: the stack is only touched while `lock` is held.
    unsafe impl Sync for Locked {}

    impl Locked {
        pub fn new() -> Self {
            Self { lock: AtomicBool::new(false), stack: std::cell::UnsafeCell::new(Vec::with_capacity(SLOTS)) }
        }

        /// Runs `f` on the stack if the lock is free.
        #[inline(always)]
        pub fn try_with<T>(&self, f: impl FnOnce(&mut Vec<u32>) -> T) -> Option<T> {
            if self.lock.compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
                return None;
            }
            // SAFETY: the lock is held, so this is the only reference.
            let out = f(unsafe { &mut *self.stack.get() });
            self.lock.store(false, Ordering::Release);
            Some(out)
        }
    }
}

thread_local! {
    static TLS_STACK: RefCell<Vec<u32>> = RefCell::new(Vec::with_capacity(SLOTS));
}

fn per_pair(start: Instant, pairs: u64) -> f64 {
    start.elapsed().as_nanos() as f64 / pairs as f64
}

fn tls_pairs(pairs: u64) -> f64 {
    TLS_STACK.with(|s| s.borrow_mut().extend(0..32));
    let start = Instant::now();
    for _ in 0..pairs {
        let item = TLS_STACK.with(|s| s.borrow_mut().pop()).expect("filled above");
        TLS_STACK.with(|s| s.borrow_mut().push(black_box(item)));
    }
    per_pair(start, pairs)
}

/// Three threads pop and push back on shared per-CPU stacks; every index
/// must still be there exactly once at the end.
#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn check(pairs: u64) {
    struct Stacks(*mut rseq::Stack);
    // SAFETY: the stacks are only edited inside restartable sequences,
    // which the kernel makes atomic with respect to every other thread on
    // the same CPU, and each CPU edits only its own stack.
    unsafe impl Sync for Stacks {}
    let cpus = std::thread::available_parallelism().map_or(64, |n| n.get()).max(64);
    let mut stacks: Vec<rseq::Stack> = (0..cpus).map(|_| rseq::Stack::EMPTY).collect();
    let shared = Stacks(stacks.as_mut_ptr());
    let total: u32 = 3 * 20;
    std::thread::scope(|scope| {
        for t in 0..3u32 {
            let shared = &shared;
            scope.spawn(move || {
                let area = rseq::area().expect("registered in every thread");
                let mut held: Vec<u32> = (t * 20..t * 20 + 20).collect();
                for i in 0..pairs {
                    if i % 2 == 0 {
                        if let Some(item) = held.pop() {
                            // SAFETY: see `Stacks`.
                            if !unsafe { rseq::push(area, shared.0, item) } {
                                held.push(item);
                            }
                        }
                    } else {
                        // SAFETY: see `Stacks`.
                        if let Some(item) = unsafe { rseq::pop(area, shared.0) } {
                            held.push(item);
                        }
                    }
                }
                // Whatever this thread holds at the end goes back to a stack.
                for item in held {
                    // SAFETY: see `Stacks`.
                    while !unsafe { rseq::push(area, shared.0, item) } {}
                }
            });
        }
    });
    let mut seen: Vec<u32> = Vec::new();
    for stack in &stacks {
        seen.extend(stack.items());
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..total).collect::<Vec<_>>(), "an index was lost or duplicated");
    println!("check: {pairs} operations on each of 3 threads, all {total} indices there once");
}

#[cfg(all(target_os = "linux", target_arch = "x86_64"))]
fn main() {
    let mut args = std::env::args().skip(1).peekable();
    let checking = args.peek().is_some_and(|a| a == "check");
    if checking {
        args.next();
    }
    let pairs: u64 = args.next().and_then(|v| v.parse().ok()).unwrap_or(50_000_000);
    if checking {
        return check(pairs);
    }
    let Some(area) = rseq::area() else {
        println!("rseq_probe: the C library registered no rseq area here");
        return;
    };
    let cpus = std::thread::available_parallelism().map_or(64, |n| n.get()).max(64);

    let locked: Vec<rseq::Locked> = (0..cpus).map(|_| rseq::Locked::new()).collect();
    for l in &locked {
        l.try_with(|s| s.extend(0..32));
    }
    let start = Instant::now();
    for _ in 0..pairs {
        let cpu = rseq::cpu(area);
        // A thread moved to another CPU finds that CPU's stack empty and
        // pushes index 0 there: the pair stays a pop and a push.
        let item = locked[cpu].try_with(|s| s.pop()).flatten().unwrap_or(0);
        let cpu = rseq::cpu(area);
        locked[cpu].try_with(|s| s.push(black_box(item)));
    }
    let lock_ns = per_pair(start, pairs);

    let tls_ns = tls_pairs(pairs);

    let mut stacks: Vec<rseq::Stack> = (0..cpus).map(|_| rseq::Stack::EMPTY).collect();
    let base = stacks.as_mut_ptr();
    for i in 0..32 {
        // SAFETY: `area` is this thread's registered area, `base` holds a
        // stack for every CPU number the kernel can report here, and only
        // this thread runs sequences on them.
        unsafe { rseq::push(area, base, i) };
    }
    let start = Instant::now();
    for _ in 0..pairs {
        // SAFETY: as above.
        let item = unsafe { rseq::pop(area, base) }.unwrap_or(0);
        // SAFETY: as above.
        unsafe { rseq::push(area, base, black_box(item)) };
    }
    let rseq_ns = per_pair(start, pairs);

    println!("cache pop+push, ns per pair over {pairs} pairs: lock {lock_ns:.2}  tls {tls_ns:.2}  rseq {rseq_ns:.2}");
}

#[cfg(not(all(target_os = "linux", target_arch = "x86_64")))]
fn main() {
    println!("rseq_probe: x86-64 Linux only (tls alone: {:.2} ns per pair)", tls_pairs(10_000_000));
}
