//! Per-CPU stacks of page indices edited in restartable sequences.
//!
//! Owns the stacks' memory, the sequences that edit them (Linux's
//! `rseq(2)`, as TCMalloc's per-CPU caches use it) and the stop protocol
//! through which another thread empties a CPU's stacks. The stacks are
//! `sys::stack`'s type, the one a pinned CPU's cache owns outright. It
//! knows nothing of pages, zones or lists: a stack holds `u32`s, and what
//! they mean is the per-CPU cache's business (`page_alloc::cache`).
//!
//! # Why restartable sequences
//! A stack belongs to a CPU, and any thread may run there. Linux makes its
//! per-CPU lists safe by disabling preemption; a user-space thread cannot,
//! so until now the lists were behind a try-lock: two atomic
//! read-modify-writes per operation. A restartable sequence gives the same
//! guarantee without an atomic: the kernel aborts the sequence if its
//! thread is preempted, migrated or signalled before the one store that
//! commits it, and the abort handler starts it again, on whatever CPU the
//! thread now runs. An operation is a few loads, one plain store and a
//! publication of the sequence's descriptor (`rseq_cs`).
//!
//! # The stop protocol
//! No thread may edit another CPU's stack with plain stores while a
//! sequence could run there. A drainer (one at a time, under `drain_lock`)
//! sets the stack's `stopped` word, then calls
//! `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ)` for that CPU: when it
//! returns, every sequence that was running there has been aborted, and
//! every sequence that starts afterwards reads `stopped` (it is checked
//! inside the sequence) and gives up. The drainer then owns the stack until
//! it clears `stopped`. A CPU pinned by a `PinnedCpu` keeps its stacks
//! stopped (another bit of the same word) until the handle is dropped.
//!
//! # Where this works
//! x86-64 Linux, with `std`, when the C library registered an rseq area
//! (glibc 2.35 and later does, for every thread) and the kernel accepts the
//! membarrier registration (Linux 5.10 for the per-CPU fence). Elsewhere
//! [`CpuStacks::new`] returns `None` (as the fallback of other targets
//! always does) and the allocator keeps its locked per-CPU lists; a thread
//! whose area is not registered (its `cpu_id` reads as unset) is told
//! [`Pop::Unavailable`] and takes the same path.

use crate::sys::stack::{PageStack, STACK_SLOTS};
use crate::sys::{Pop, Push};
use alloc::vec::Vec;
use core::arch::asm;
use core::sync::atomic::AtomicIsize;
use core::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};

/// Sentinels the sequences return in a 64-bit register (items are `u32`).
const UNAVAILABLE: u64 = u64::MAX;
const EMPTY_OR_FULL: u64 = u64::MAX - 1;
const FOREIGN: u64 = u64::MAX - 2;

/// `stopped` bits: a drainer owns the stack for the moment.
const STOP_DRAIN: u32 = 1;
/// `stopped` bits: the stack's CPU is pinned (its pages belong to the
/// pinned handle's lists; no sequence may use the stack meanwhile).
const STOP_PINNED: u32 = 2;

std::thread_local! {
    /// The CPU of this thread's last cached allocation (`u32::MAX`: none
    /// yet): the `home` a free pushes for (see [`CpuStacks::push`]).
    static HOME_CPU: core::cell::Cell<u32> = const { core::cell::Cell::new(u32::MAX) };
}

/// The calling thread's home CPU for pushes (`u32::MAX`: none yet).
#[inline(always)]
pub(crate) fn home_cpu() -> u32 {
    HOME_CPU.with(core::cell::Cell::get)
}

/// Makes `cpu` the calling thread's home CPU for pushes.
#[inline(always)]
pub(crate) fn set_home_cpu(cpu: u32) {
    HOME_CPU.with(|home| home.set(cpu));
}

/// Offset of the thread's rseq area from its thread pointer
/// (`__rseq_offset`); `isize::MIN` until looked up, `isize::MAX` if absent.
static RSEQ_OFFSET: AtomicIsize = AtomicIsize::new(isize::MIN);

const MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ: libc::c_int = 1 << 7;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ: libc::c_int = 1 << 8;
const MEMBARRIER_CMD_FLAG_CPU: libc::c_uint = 1;

/// Looks up the C library's rseq registration once per process.
fn rseq_offset() -> Option<isize> {
    let mut offset = RSEQ_OFFSET.load(Relaxed);
    if offset == isize::MIN {
        // SAFETY: `dlsym` with `RTLD_DEFAULT` and NUL-terminated names only
        // looks symbols up; glibc defines both before `main` and never
        // changes them (`__rseq_offset` a `ptrdiff_t`, `__rseq_size` an
        // `unsigned int`), so reading them through the found addresses is
        // sound. A C library without them yields null pointers.
        offset = unsafe {
            let off = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_offset".as_ptr());
            let size = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_size".as_ptr());
            if off.is_null() || size.is_null() || *(size as *const u32) == 0 {
                isize::MAX
            } else {
                *(off as *const isize)
            }
        };
        RSEQ_OFFSET.store(offset, Relaxed);
    }
    (offset != isize::MAX).then_some(offset)
}

/// The start of every sequence. Label 8 is where an abort restarts: it
/// publishes the descriptor (label 3) in the area's `rseq_cs`; `{area}` is
/// the area's offset from the thread pointer, so the area is addressed
/// through `fs` without loading that pointer. From the sequence's start
/// (label 2) it finds the current CPU's stack in `{stack}`: `{slot}` is the
/// address of CPU 0's stack of the slot, and CPUs' stacks of one slot are
/// 256 bytes apart (`shl 8`). It goes to label 6 (unavailable) if the CPU
/// number is out of range or the stack is stopped. The CPU number stays in
/// `{cpu}`.
macro_rules! enter {
    () => {
        concat!(
            "8:\n",
            "lea {tmp}, [rip + 3f]\n",
            "mov qword ptr fs:[{area} + 8], {tmp}\n",
            "2:\n",
            "mov {cpu:e}, dword ptr fs:[{area} + 4]\n",
            "cmp {cpu:e}, {nr_cpus:e}\n",
            "jae 6f\n",
            "mov {stack:e}, {cpu:e}\n",
            "shl {stack}, 8\n",
            "add {stack}, {slot}\n",
            "cmp dword ptr [{stack} + 4], 0\n",
            "jne 6f\n",
        )
    };
}

/// The sequence's descriptor (version 0, flags 0, start 2, commit 4, abort
/// 5) and its abort handler, preceded by glibc's registered signature
/// (`RSEQ_SIG`, 0x53053053, inside a `ud1` so it never executes), which
/// restarts from label 8.
macro_rules! descriptor_and_abort {
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
            ".popsection\n",
        )
    };
}

/// Every CPU's stacks: `slots` stacks per CPU, indexed by the CPU number
/// the kernel reports (not the allocator's folded number). Laid out slot
/// by slot: `stacks[slot * nr_cpus + cpu]`, so a sequence finds its CPU's
/// stack with a shift and an add.
pub(crate) struct CpuStacks {
    stacks: Vec<PageStack>,
    slots: usize,
    /// `slot << slot_shift` is the index of CPU 0's stack of `slot`
    /// (`nr_cpus` rounded up to a power of two: a shift, not a multiply).
    slot_shift: u32,
    /// This process's `__rseq_offset`.
    rseq_offset: isize,
    nr_cpus: usize,
    /// One drainer at a time: two would both edit a stopped stack.
    drain_lock: std::sync::Mutex<()>,
    /// The per-CPU fence is refused (a kernel before 5.10): fence all.
    fence_all: core::sync::atomic::AtomicBool,
}

// SAFETY: the stacks are only reached through `&self`; every access to a stack is an atomic, a restartable
// sequence on the stack's CPU, or a drainer's under the stop protocol.
unsafe impl Send for CpuStacks {}
// SAFETY: as for `Send`.
unsafe impl Sync for CpuStacks {}

impl CpuStacks {
    /// Stacks for every possible CPU, `slots` per CPU, each holding at most
    /// `caps[slot]` (clamped to 1..=[`STACK_SLOTS`]) indices. `None` where
    /// restartable sequences or the membarrier fence are unavailable, or
    /// the memory cannot be had.
    pub(crate) fn new(caps: &[u32]) -> Option<Self> {
        let slots = caps.len();
        // Miri runs neither the sequences (inline assembly) nor membarrier.
        if slots == 0 || cfg!(miri) {
            return None;
        }
        rseq_offset()?;
        // SAFETY: registering for the rseq fence takes no pointers; it
        // fails harmlessly on kernels without it.
        let registered =
            unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_RSEQ, 0, 0) };
        if registered != 0 {
            return None;
        }
        // SAFETY: `sysconf` only reads a system value.
        let configured = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
        let nr_cpus = usize::try_from(configured).ok()?.clamp(1, 4096);
        let slot_shift = nr_cpus.next_power_of_two().trailing_zeros();
        let count = slots.checked_shl(slot_shift)?;
        let mut stacks = Vec::new();
        stacks.try_reserve_exact(count).ok()?;
        for &cap in caps {
            for _ in 0..1usize << slot_shift {
                stacks.push(PageStack::new(cap as usize));
            }
        }
        Some(Self {
            stacks,
            slots,
            slot_shift,
            rseq_offset: rseq_offset()?,
            nr_cpus,
            drain_lock: std::sync::Mutex::new(()),
            fence_all: core::sync::atomic::AtomicBool::new(false),
        })
    }

    /// CPUs with stacks (the kernel's CPU numbers `0..nr_cpus`).
    pub(crate) fn nr_cpus(&self) -> usize {
        self.nr_cpus
    }

    /// The CPU the kernel last recorded for the calling thread, if it is
    /// one of ours.
    #[inline(always)]
    pub(crate) fn current_cpu(&self) -> Option<usize> {
        let cpu: u32;
        // SAFETY: `fs:[rseq_offset]` is this thread's registered rseq area
        // (x86-64: `fs` is based at the thread pointer); reading its
        // `cpu_id`, which the kernel updates, has no side effect.
        unsafe {
            asm!(
                "mov {cpu:e}, dword ptr fs:[{area} + 4]",
                area = in(reg) self.rseq_offset,
                cpu = out(reg) cpu,
                options(nostack, readonly, preserves_flags),
            );
        }
        let cpu = cpu as usize;
        (cpu < self.nr_cpus).then_some(cpu)
    }

    /// The address of CPU 0's stack of `slot` (which must exist).
    #[inline(always)]
    fn slot_base(&self, slot: usize) -> *const PageStack {
        debug_assert!(slot < self.slots);
        self.stacks.as_ptr().wrapping_add(slot << self.slot_shift)
    }

    /// Pops the top index of the current CPU's stack of `slot`.
    #[inline(always)]
    pub(crate) fn pop(&self, slot: usize) -> Pop {
        if slot >= self.slots {
            return Pop::Unavailable;
        }
        let (out, cpu): (u64, u64);
        // SAFETY: `fs:[rseq_offset]` is this thread's registered area;
        // `slot` is in range, so `slot_base` and the CPU number (checked
        // against `nr_cpus` inside the sequence) address a stack of
        // `self.stacks`. The sequence writes only the area's `rseq_cs` and,
        // in its one committing store, that stack's `len`; the kernel
        // restarts it if it is interrupted before that store.
        unsafe {
            asm!(
                enter!(),
                "mov {len:e}, dword ptr [{stack}]",
                "test {len:e}, {len:e}",
                "jz 7f",
                "dec {len:e}",
                "mov {out:e}, dword ptr [{stack} + 4*{len} + 12]",
                "mov dword ptr [{stack}], {len:e}",
                "4:",
                "jmp 9f",
                "6:",
                "mov {out}, -1",
                "jmp 9f",
                "7:",
                "mov {out}, -2",
                "9:",
                descriptor_and_abort!(),
                area = in(reg) self.rseq_offset,
                nr_cpus = in(reg) self.nr_cpus as u32,
                slot = in(reg) self.slot_base(slot),
                tmp = out(reg) _,
                cpu = out(reg) cpu,
                stack = out(reg) _,
                len = out(reg) _,
                out = out(reg) out,
                options(nostack),
            );
        }
        match out {
            UNAVAILABLE => Pop::Unavailable,
            EMPTY_OR_FULL => Pop::Empty,
            item => Pop::Item(item as u32, cpu as u32),
        }
    }

    /// Pushes `item` on the current CPU's stack of `slot`, if that CPU is
    /// `home` (any CPU when `home` is `u32::MAX`).
    #[inline(always)]
    pub(crate) fn push(&self, slot: usize, item: u32, home: u32) -> Push {
        if slot >= self.slots {
            return Push::Unavailable;
        }
        let out: u64;
        // SAFETY: as in `pop`; the item is stored above `len` before the
        // committing store of `len`, so an abort leaves nothing behind.
        unsafe {
            asm!(
                enter!(),
                "cmp {home:e}, -1",
                "je 20f",
                "cmp {home:e}, {cpu:e}",
                "jne 21f",
                "20:",
                "mov {len:e}, dword ptr [{stack}]",
                "cmp {len:e}, dword ptr [{stack} + 8]",
                "jae 7f",
                "mov dword ptr [{stack} + 4*{len} + 12], {item:e}",
                "inc {len:e}",
                "mov dword ptr [{stack}], {len:e}",
                "4:",
                "xor {out:e}, {out:e}",
                "jmp 9f",
                "6:",
                "mov {out}, -1",
                "jmp 9f",
                "7:",
                "mov {out}, -2",
                "jmp 9f",
                "21:",
                "mov {out}, -3",
                "9:",
                descriptor_and_abort!(),
                area = in(reg) self.rseq_offset,
                nr_cpus = in(reg) self.nr_cpus as u32,
                slot = in(reg) self.slot_base(slot),
                item = in(reg) item,
                home = in(reg) home,
                tmp = out(reg) _,
                cpu = out(reg) _,
                stack = out(reg) _,
                len = out(reg) _,
                out = out(reg) out,
                options(nostack),
            );
        }
        match out {
            0 => Push::Done,
            EMPTY_OR_FULL => Push::Full,
            FOREIGN => Push::Foreign,
            _ => Push::Unavailable,
        }
    }

    /// Moves up to `out.len()` indices from the top of the current CPU's
    /// stack of `slot` into `out` (topmost last); how many, or `None` if
    /// unavailable.
    #[inline]
    pub(crate) fn pop_many(&self, slot: usize, out: &mut [u32]) -> Option<usize> {
        if slot >= self.slots {
            return None;
        }
        let want = out.len().min(STACK_SLOTS) as u64;
        let moved: u64;
        // SAFETY: as in `pop`; the copy into `out` (the caller's, at least
        // `want` long) happens before the committing store of the lowered
        // `len`, and an abort restarts it from the top.
        unsafe {
            asm!(
                enter!(),
                "mov {len:e}, dword ptr [{stack}]",
                "mov {n}, {want}",
                "cmp {n}, {len}",
                "cmova {n}, {len}",
                "sub {len}, {n}",
                "lea {src}, [{stack} + 4*{len} + 12]",
                "xor {i:e}, {i:e}",
                "22:",
                "cmp {i}, {n}",
                "jae 23f",
                "mov {tmp:e}, dword ptr [{src} + 4*{i}]",
                "mov dword ptr [{dst} + 4*{i}], {tmp:e}",
                "inc {i}",
                "jmp 22b",
                "23:",
                "mov dword ptr [{stack}], {len:e}",
                "4:",
                "jmp 9f",
                "6:",
                "mov {n}, -1",
                "9:",
                descriptor_and_abort!(),
                area = in(reg) self.rseq_offset,
                nr_cpus = in(reg) self.nr_cpus as u32,
                slot = in(reg) self.slot_base(slot),
                want = in(reg) want,
                dst = in(reg) out.as_mut_ptr(),
                tmp = out(reg) _,
                cpu = out(reg) _,
                stack = out(reg) _,
                len = out(reg) _,
                src = out(reg) _,
                i = out(reg) _,
                n = out(reg) moved,
                options(nostack),
            );
        }
        (moved != UNAVAILABLE).then_some(moved as usize)
    }

    /// Pushes all of `items` on the current CPU's stack of `slot` (the
    /// last on top), or none of them: false when they do not fit or the
    /// stack is unavailable.
    #[inline]
    pub(crate) fn push_many(&self, slot: usize, items: &[u32]) -> bool {
        if slot >= self.slots || items.len() > STACK_SLOTS {
            return false;
        }
        let out: u64;
        // SAFETY: as in `pop`; the items are stored above `len` before the
        // committing store of the raised `len`.
        unsafe {
            asm!(
                enter!(),
                "mov {len:e}, dword ptr [{stack}]",
                "lea {tmp}, [{len} + {n}]",
                "cmp {tmp:e}, dword ptr [{stack} + 8]",
                "ja 7f",
                "lea {dst}, [{stack} + 4*{len} + 12]",
                "xor {i:e}, {i:e}",
                "22:",
                "cmp {i}, {n}",
                "jae 23f",
                "mov {tmp:e}, dword ptr [{src} + 4*{i}]",
                "mov dword ptr [{dst} + 4*{i}], {tmp:e}",
                "inc {i}",
                "jmp 22b",
                "23:",
                "add {len}, {n}",
                "mov dword ptr [{stack}], {len:e}",
                "4:",
                "xor {tmp:e}, {tmp:e}",
                "jmp 9f",
                "6:",
                "mov {tmp}, -1",
                "jmp 9f",
                "7:",
                "mov {tmp}, -2",
                "9:",
                descriptor_and_abort!(),
                area = in(reg) self.rseq_offset,
                nr_cpus = in(reg) self.nr_cpus as u32,
                slot = in(reg) self.slot_base(slot),
                n = in(reg) items.len() as u64,
                src = in(reg) items.as_ptr(),
                tmp = out(reg) out,
                cpu = out(reg) _,
                stack = out(reg) _,
                len = out(reg) _,
                dst = out(reg) _,
                i = out(reg) _,
                options(nostack),
            );
        }
        out == 0
    }

    /// Indices on CPU `cpu`'s stack of `slot` (a racy count, exact when no
    /// sequence runs).
    pub(crate) fn len(&self, cpu: usize, slot: usize) -> usize {
        if cpu >= self.nr_cpus {
            return 0;
        }
        self.stacks.get((slot << self.slot_shift) + cpu).map_or(0, |s| s.len.load(Relaxed) as usize)
    }

    /// Empties every stack of CPU `cpu` under the stop protocol, handing
    /// `take` each slot and the indices it held. False (nothing taken) if
    /// the fence failed.
    pub(crate) fn drain_cpu(&self, cpu: usize, mut take: impl FnMut(usize, &[u32])) -> bool {
        if cpu >= self.nr_cpus {
            return false;
        }
        let mine: Vec<&PageStack> = (0..self.slots).map(|slot| &self.stacks[(slot << self.slot_shift) + cpu]).collect();
        if mine.iter().all(|s| s.len.load(Acquire) == 0) {
            return true;
        }
        let mut taken: Vec<(usize, Vec<u32>)> = Vec::new();
        {
            let _one_drainer = self.drain_lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            for stack in &mine {
                stack.stopped.fetch_or(STOP_DRAIN, SeqCst);
            }
            let fenced = self.fence(cpu);
            if fenced {
                for (slot, stack) in mine.iter().enumerate() {
                    let len = (stack.len.load(Acquire) as usize).min(STACK_SLOTS);
                    if len > 0 {
                        taken.push((slot, stack.items[..len].iter().map(|i| i.load(Relaxed)).collect()));
                        stack.len.store(0, Release);
                    }
                }
            }
            for stack in &mine {
                stack.stopped.fetch_and(!STOP_DRAIN, Release);
            }
            if !fenced {
                return false;
            }
        }
        for (slot, items) in &taken {
            take(*slot, items);
        }
        true
    }

    /// Stops (or restarts) every stack of CPU `cpu` for as long as the
    /// caller needs, apart from drains: no sequence succeeds on a stopped
    /// stack. A stack being stopped may still have a sequence in flight;
    /// [`drain_cpu`](Self::drain_cpu) afterwards fences it and empties it.
    pub(crate) fn set_pinned(&self, cpu: usize, pinned: bool) {
        if cpu >= self.nr_cpus {
            return;
        }
        for slot in 0..self.slots {
            let stack = &self.stacks[(slot << self.slot_shift) + cpu];
            if pinned {
                stack.stopped.fetch_or(STOP_PINNED, SeqCst);
            } else {
                stack.stopped.fetch_and(!STOP_PINNED, Release);
            }
        }
    }

    /// Waits until no sequence that started before the call can still
    /// commit on CPU `cpu`.
    fn fence(&self, cpu: usize) -> bool {
        if !self.fence_all.load(Relaxed) {
            // SAFETY: the membarrier fence takes no pointers.
            let r = unsafe {
                libc::syscall(
                    libc::SYS_membarrier,
                    MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ,
                    MEMBARRIER_CMD_FLAG_CPU,
                    cpu as libc::c_int,
                )
            };
            if r == 0 {
                return true;
            }
            self.fence_all.store(true, Relaxed);
        }
        // SAFETY: as above, for every CPU.
        unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED_RSEQ, 0, 0) == 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stacks(caps: &[u32]) -> Option<CpuStacks> {
        let s = CpuStacks::new(caps);
        if s.is_none() {
            std::eprintln!("skipped: no restartable sequences here");
        }
        s
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri runs neither inline assembly nor membarrier")]
    fn push_pop_one_cpu() {
        let Some(s) = stacks(&[4, 61]) else { return };
        assert_eq!(s.pop(0), Pop::Empty);
        // Pin-free: every op may run on any CPU, so count over all CPUs.
        for i in 0..4 {
            assert_eq!(s.push(0, i, u32::MAX), Push::Done);
        }
        let held: usize = (0..s.nr_cpus()).map(|c| s.len(c, 0)).sum();
        assert_eq!(held, 4);
        assert_eq!(s.pop(2), Pop::Unavailable, "no such slot");
        assert_eq!(s.push(2, 1, u32::MAX), Push::Unavailable);
        let no_such_cpu = s.nr_cpus() as u32;
        assert_eq!(s.push(0, 7, no_such_cpu), Push::Foreign, "a push for another CPU is refused");
    }

    #[test]
    #[cfg_attr(miri, ignore = "Miri runs neither inline assembly nor membarrier")]
    fn drain_takes_everything_once_across_threads() {
        let Some(s) = stacks(&[61]) else { return };
        let total = 3 * 400u32;
        let drained = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            for t in 0..3u32 {
                let s = &s;
                let drained = &drained;
                scope.spawn(move || {
                    let mut held: Vec<u32> = (t * 400..(t + 1) * 400).collect();
                    for round in 0..20_000u32 {
                        if round % 3 == 0 {
                            if let Some(item) = held.pop() {
                                if s.push(0, item, u32::MAX) != Push::Done {
                                    held.push(item);
                                }
                            }
                        } else if round % 3 == 1 {
                            let mut buf = [0u32; 7];
                            if let Some(n) = s.pop_many(0, &mut buf) {
                                held.extend_from_slice(&buf[..n]);
                            }
                        } else if let Pop::Item(item, _) = s.pop(0) {
                            held.push(item);
                        }
                        if round % 5000 == 0 && t == 0 {
                            for cpu in 0..s.nr_cpus() {
                                assert!(s.drain_cpu(cpu, |_, items| drained.lock().unwrap().extend_from_slice(items)));
                            }
                        }
                        if round % 7 == 0 && held.len() >= 3 {
                            let at = held.len() - 3;
                            if s.push_many(0, &held[at..]) {
                                held.truncate(at);
                            }
                        }
                    }
                    drained.lock().unwrap().extend(held);
                });
            }
        });
        let mut seen = drained.into_inner().unwrap();
        for cpu in 0..s.nr_cpus() {
            assert!(s.drain_cpu(cpu, |_, items| seen.extend_from_slice(items)));
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..total).collect::<Vec<_>>(), "an index was lost or duplicated");
    }
}
