//! The operating system and the CPU, behind one module: everything the
//! crate asks of them, and the one place a port edits.
//!
//! What the crate asks:
//! - restartable sequences (`rseq(2)`) editing per-CPU stacks, with the
//!   `membarrier` fence a drainer needs and the C library's registration
//!   found through `dlsym` ([`CpuStacks`], the home CPU of a thread's
//!   pushes);
//! - one anonymous mapping behind a map's pages, with transparent or
//!   explicit huge pages and `madvise` to give pages back ([`RealMemory`],
//!   [`HugePages`]);
//! - the calling thread's CPU ([`cpu_id`]) and the machine's memory
//!   ([`machine_memory`]);
//! - a prefetch hint ([`prefetch`]).
//!
//! One native implementation, for x86-64 Linux with `std`
//! (`linux_x86_64/`), and a fallback for every other target
//! (`unavailable.rs`) whose answers say "not available": no stacks, no
//! mapping, CPU 0, no memory size. The predicate that picks between them is
//! written below and nowhere else in the crate. Both expose the same types
//! and functions, so the layers above never test the target: they ask at
//! run time (`CpuStacks::new` is `None`, `RealMemory::map` an error) and
//! hold types that exist everywhere (a cache that is always `None` where
//! there are no stacks). Loom models run the fallback: loom cannot run a
//! restartable sequence, and `tests/loom_cpu_cache.rs` models the protocol
//! instead.
//!
//! `stack` is portable: the layout the sequences address, which a pinned
//! CPU's cache owns outright.
//!
//! This layer and `mem::rawmem` are the only places of the crate with
//! `unsafe` (`tests/layers.rs`); it imports only `types`.

pub(crate) mod stack;

#[cfg(all(feature = "std", target_os = "linux", target_arch = "x86_64", not(loom)))]
#[path = "linux_x86_64/mod.rs"]
mod imp;
#[cfg(not(all(feature = "std", target_os = "linux", target_arch = "x86_64", not(loom))))]
#[path = "unavailable.rs"]
mod imp;

pub use imp::RealMemory;
pub(crate) use imp::{cpu_id, forget_cpu_id, home_cpu, machine_memory, set_home_cpu, CpuStacks};

/// How to back the real-memory region with huge pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum HugePages {
    /// Ordinary pages.
    #[default]
    None,
    /// Ask for transparent huge pages (`madvise(MADV_HUGEPAGE)`).
    Transparent,
    /// Explicit hugetlb pages (`MAP_HUGETLB`). The mapping reserves its
    /// huge pages when made, so building fails (rather than a later touch
    /// dying of `SIGBUS`) unless enough are free in the pool
    /// (`vm.nr_hugepages`).
    Explicit,
}

/// What a pop from a per-CPU stack found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(dead_code, reason = "only a native implementation makes these")]
pub(crate) enum Pop {
    /// The index on top of the current CPU's stack, now the caller's, and
    /// that CPU.
    Item(u32, u32),
    /// The stack is empty.
    Empty,
    /// The stack is stopped, or this thread has no usable CPU number.
    Unavailable,
}

/// What a push on a per-CPU stack did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(dead_code, reason = "only a native implementation makes these")]
pub(crate) enum Push {
    /// The index is on the current CPU's stack.
    Done,
    /// The stack is at its capacity; nothing changed.
    Full,
    /// As [`Pop::Unavailable`]; nothing changed.
    Unavailable,
    /// The sequence ran on another CPU than the caller's `home`; nothing
    /// changed.
    Foreign,
}

/// Asks the CPU to bring the cache line holding `*value` closer (a hint:
/// it never faults, whatever the address, and changes nothing the program
/// can observe). A no-op on targets without a prefetch instruction here.
#[inline(always)]
pub fn prefetch<T>(value: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 cannot fault and has no architectural effect, so
    // any address is fine; SSE, which it belongs to, is in x86_64's baseline.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(value as *const i8)
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}
