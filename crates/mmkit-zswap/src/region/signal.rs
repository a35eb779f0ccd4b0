//! Which regions the `SIGBUS` handler (`os::signal`) resolves faults for:
//! a fixed table of live regions in `SIGBUS` mode, found by address with
//! atomic loads only (no lock, no allocation), each entry with its own
//! count of handlers in flight, so that dropping one region waits only
//! for the handlers resolving that region's faults, never another's.
//!
//! A fault is resolved by the region's `fault` (`resolve_signal`); an
//! address in no live region, or a region made before this process was
//! forked (the child has not got its memory, and its userfaultfd reaches
//! the parent's), is not resolved and goes on to the previous action.
//!
//! A fault at a region's address in a thread that is running the
//! region's own code ([`RegionCode`]: a load, an eviction, the handler
//! thread) cannot be resolved: that code may hold the claims and locks the
//! resolution needs. It comes from the region's own allocations landing in
//! region memory (a global allocator whose heap is a region, serving the
//! region's allocations from it too): the process is ended with a message
//! saying so, rather than left to wait on itself for ever.
//!
//! Owns the table, the registrations and the region-code mark; the only
//! `unsafe` is the dereference of a listed region.
#![allow(unsafe_code)]

use super::os::{self, linux::Linux};
use super::pager::Shared;
use crate::PAGE_SIZE;
use std::cell::Cell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

thread_local! {
    /// How deep the thread is in region code (0: not). A `const`
    /// thread-local of a type without a destructor: never initialised
    /// lazily, never destroyed, so a signal handler and an allocator may
    /// read it at any time.
    static REGION_CODE: Cell<u32> = const { Cell::new(0) };
}

/// The calling thread runs the region's own code while this lives: code
/// that may claim pages, take zswap's locks or allocate.
pub(crate) struct RegionCode(PhantomData<*const ()>);

impl RegionCode {
    pub(crate) fn enter() -> Self {
        let _ = REGION_CODE.try_with(|depth| depth.set(depth.get().saturating_add(1)));
        Self(PhantomData)
    }

    /// Whether the calling thread runs region code now.
    pub(crate) fn active() -> bool {
        REGION_CODE.try_with(|depth| depth.get() != 0).unwrap_or(false)
    }
}

impl Drop for RegionCode {
    fn drop(&mut self) {
        let _ = REGION_CODE.try_with(|depth| depth.set(depth.get().saturating_sub(1)));
    }
}

/// What the handler writes before it ends the process on a fault in
/// region code.
const RECURSION: &str = "mmkit-zswap: the region's own code touched region memory \
(its allocations are served from a region: a global allocator whose heap is a region must serve \
the allocations made while SwapRegion::in_region_call() is true from other memory); aborting\n";

/// Regions that may be registered at once.
const SLOTS: usize = 64;

/// One region's entry.
struct Entry {
    /// Taken by a registration (until its drop has waited out its
    /// handlers).
    claimed: AtomicBool,
    /// The region's first address and length, to match an address
    /// without a dereference (0: none).
    base: AtomicUsize,
    len: AtomicUsize,
    /// The region, while listed.
    shared: AtomicPtr<Shared<Linux>>,
    /// Handlers that may hold `shared`.
    in_flight: AtomicUsize,
}

static TABLE: [Entry; SLOTS] = [const {
    Entry {
        claimed: AtomicBool::new(false),
        base: AtomicUsize::new(0),
        len: AtomicUsize::new(0),
        shared: AtomicPtr::new(std::ptr::null_mut()),
        in_flight: AtomicUsize::new(0),
    }
}; SLOTS];

/// A region's entry in the table; dropping it takes the region out and
/// waits until no handler can still be using it.
pub(crate) struct Registration {
    slot: usize,
    /// Keeps the region's shared state alive as long as it is listed.
    _shared: Arc<Shared<Linux>>,
}

/// Installs the handler (once); false when it cannot be.
pub(crate) fn install() -> bool {
    os::signal::install(resolve).is_ok()
}

/// Lists `shared` for the handler, installing the handler on first use.
/// `None` when the handler cannot be installed or the table is full: the
/// region must not then use `SIGBUS` mode.
pub(crate) fn register(shared: &Arc<Shared<Linux>>) -> Option<Registration> {
    if !install() {
        return None;
    }
    for (slot, entry) in TABLE.iter().enumerate() {
        if entry.claimed.compare_exchange(false, true, SeqCst, SeqCst).is_ok() {
            entry.shared.store(Arc::as_ptr(shared).cast_mut(), SeqCst);
            entry.len.store(shared.os.len(), SeqCst);
            entry.base.store(shared.os.as_ptr() as usize, SeqCst);
            return Some(Registration { slot, _shared: shared.clone() });
        }
    }
    None
}

impl Drop for Registration {
    fn drop(&mut self) {
        let entry = &TABLE[self.slot];
        entry.base.store(0, SeqCst);
        entry.shared.store(std::ptr::null_mut(), SeqCst);
        // A handler counts itself in before it loads the pointer: once the
        // count is seen at zero after the store, none holds it.
        while entry.in_flight.load(SeqCst) != 0 {
            std::thread::yield_now();
        }
        entry.len.store(0, SeqCst);
        entry.claimed.store(false, SeqCst);
    }
}

/// The handler's question: resolves a fault at `addr` if a live region of
/// this process holds it. Entries of the parent's regions, inherited by a
/// forked child, are passed over: the child may have mapped a region of
/// its own where one of them was (their memory is not the child's, and
/// the address is free there), and the fault is that one's.
fn resolve(addr: usize, write: bool, small_stack: bool) -> bool {
    for entry in &TABLE {
        let base = entry.base.load(SeqCst);
        if base == 0 || addr < base || addr - base >= entry.len.load(SeqCst) {
            continue;
        }
        entry.in_flight.fetch_add(1, SeqCst);
        let ptr = entry.shared.load(SeqCst);
        let resolved = if ptr.is_null() {
            None
        } else {
            // SAFETY: a listed pointer is an `Arc<Shared>` kept alive by
            // its `Registration`, whose drop unlists it and then waits for
            // this entry's `in_flight` to reach zero, which this handler
            // holds above zero from before its load of the pointer. (In a
            // forked child the pointee is the child's copy of the parent's,
            // which nothing frees.)
            let shared = unsafe { &*ptr };
            let start = shared.os.as_ptr() as usize;
            // The entry may have been handed to another region between
            // the match and the count: the address must be this one's.
            let ours = !shared.forked() && addr >= start && addr - start < shared.os.len();
            if ours && RegionCode::active() {
                os::signal::die(RECURSION);
            }
            ours.then(|| shared.resolve_signal((addr - start) / PAGE_SIZE, write, small_stack))
        };
        entry.in_flight.fetch_sub(1, SeqCst);
        if let Some(resolved) = resolved {
            return resolved;
        }
    }
    false
}
