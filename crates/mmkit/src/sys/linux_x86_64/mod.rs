//! x86-64 Linux with `std`: the one native implementation of `sys`.
//!
//! Restartable sequences and the membarrier fence (`rseq`), the real-memory
//! mapping (`mmap`), and here the calling thread's CPU and the machine's
//! memory size. Every function keeps the signature of its fallback in
//! `sys/unavailable.rs`; what they promise is written in `sys`'s module doc.

mod mmap;
mod rseq;

pub use mmap::RealMemory;
pub(crate) use rseq::{home_cpu, set_home_cpu, CpuStacks};

std::thread_local! {
    /// This thread's CPU and how many more calls may use it unchecked.
    static CACHED_CPU: core::cell::Cell<(u32, u32)> = const { core::cell::Cell::new((0, 0)) };
}

/// The calling thread's CPU as the kernel last saw it (`sched_getcpu`,
/// which glibc answers from the rseq area without a system call), cached
/// per thread for 64 calls; 0 where the kernel cannot tell (and under
/// Miri, which cannot call into the C library).
#[inline]
pub(crate) fn cpu_id() -> usize {
    CACHED_CPU.with(|cached| {
        let (cpu, left) = cached.get();
        if left > 0 {
            cached.set((cpu, left - 1));
            return cpu as usize;
        }
        let cpu = if cfg!(miri) {
            0
        } else {
            // SAFETY: sched_getcpu takes no arguments, touches no caller
            // memory and is thread-safe; failure is reported as -1.
            unsafe { libc::sched_getcpu() }.max(0) as u32
        };
        cached.set((cpu, 63));
        cpu as usize
    })
}

/// Makes the next [`cpu_id`] call ask the kernel again.
#[inline]
pub(crate) fn forget_cpu_id() {
    CACHED_CPU.with(|cached| cached.set((cached.get().0, 0)));
}

/// The machine's memory in bytes (`MemTotal` of `/proc/meminfo`), if it
/// can be read.
pub(crate) fn machine_memory() -> Option<u64> {
    // Miri keeps the program from the file system: unknown.
    if cfg!(miri) {
        return None;
    }
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}
