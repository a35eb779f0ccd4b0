//! Raw faults resolved in the faulting thread's `SIGBUS` handler, and
//! the loads that handler hands to the handler thread.
//!
//! What runs in the handler (`resolve_signal` and what it calls) is
//! async-signal-safe by construction: atomics, system calls, zswap's load
//! (its locks, which no code interrupted by the handler holds: region code
//! runs with asynchronous signals blocked, and a raw touch is no region
//! code), a load buffer taken with a non-blocking `try_lock` from a pool
//! made with the region (or, when all are taken, one page on the
//! handler's own stack, `os::stack`), and eviction of clean pages only (a
//! drop, no compression, no allocation). What it cannot do — no clean
//! victim at the budget, or no room on the stack it runs on — is handed to
//! the handler thread, and the handler waits on a futex for its answer.
//!
//! Works on the `pager`'s shared state, through its facade.

use super::handoff::{DONE_FAILED, DONE_OK, FILLING, FREE, PENDING, TAKEN};
use super::os::Os;
use super::page::{self, DIRTY, EVICTING, FAILED, LOADING, RESIDENT};
use super::pager::{Room, Shared};
use super::Counters;
use crate::PAGE_SIZE;
use std::sync::atomic::{Ordering::Relaxed, Ordering::SeqCst};

impl<O: Os> Shared<O> {
    /// Resolves a fault on page `index` in the faulting thread's `SIGBUS`
    /// handler (`signal`): waits for a thread loading or evicting the page,
    /// makes a mapped page writable (the fault was a write to it, being
    /// clean), reloads one the program dropped behind the region's back
    /// (marked mapped, not in the page tables), or loads a missing one
    /// (writable and dirty when `write`). False when the fault is not the
    /// region's to resolve (a load that failed, or a forked child's): the
    /// signal then goes on to the program's handler or the default action,
    /// as a `SIGBUS` from a swap-in error does in the kernel.
    ///
    /// Async-signal-safe (see the module docs): no allocation, no lock the
    /// interrupted code may hold, no wait on a claim of its own thread
    /// (region code that claims pages runs with asynchronous signals
    /// blocked, and reads victims through the kernel, never faulting).
    ///
    /// On a small stack (`small_stack`: the handler could not move to one
    /// of its own stacks, `os::stack`, and runs on the faulting thread's or
    /// an alternate stack of unknown room) a load is handed to the handler
    /// thread at once: the hand-off needs a few hundred bytes, a load in
    /// the handler a few KiB (measured in the region's tests;
    /// `docs/zsmalloc-zswap.md`).
    pub(crate) fn resolve_signal(&self, index: usize, write: bool, small_stack: bool) -> bool {
        if self.forked() {
            return false;
        }
        Counters::bump(&self.counters.faults_in_thread);
        let state = &self.states[index];
        loop {
            let flags = page::flags(state);
            if flags & FAILED != 0 {
                return false;
            }
            if flags & (EVICTING | LOADING) != 0 {
                // Another thread's claim: it finishes without this one.
                std::thread::yield_now();
                continue;
            }
            if flags & RESIDENT != 0 {
                if write && flags & DIRTY == 0 {
                    // A write to a clean page: writable, and the access
                    // runs again (and faults again if the page is gone).
                    if let Some(pinned) = page::try_pin(state) {
                        if pinned & (RESIDENT | DIRTY) == RESIDENT {
                            self.make_writable(index);
                        }
                        page::unpin(state);
                    }
                    return true;
                }
                // A read, or a write to a writable page: only a page that
                // is not there faults so. Another thread's load may have
                // placed it since; else the program dropped it.
                if self.os.is_mapped(index) {
                    return true;
                }
                if page::try_claim_reload(state) {
                    self.dropped_by_program();
                    return self.signal_load(index, write, small_stack);
                }
                continue;
            }
            if page::try_claim_load(state) {
                return self.signal_load(index, write, small_stack);
            }
        }
    }

    /// A page marked mapped was not: counted, and out of the resident
    /// count (its reload claimed it).
    pub(crate) fn dropped_by_program(&self) {
        self.counters.resident.fetch_sub(1, Relaxed);
        Counters::bump(&self.counters.program_drops);
    }

    /// The `SIGBUS` handler's load of claimed page `index`: room from
    /// clean victims and a pool buffer (or a page on the stack), else
    /// handed to the handler thread.
    fn signal_load(&self, index: usize, write: bool, small_stack: bool) -> bool {
        if small_stack {
            return self.hand_off(index, write);
        }
        let start = std::time::Instant::now();
        let loaded = match self.make_room(true) {
            Room::Made => match self.buffers.iter().find_map(|b| b.try_lock().ok()) {
                Some(mut buf) => self.load_claimed(index, write, false, &mut buf).is_ok(),
                None => self.load_one_page(index, write),
            },
            Room::HandOff => self.hand_off(index, write),
            Room::SwapFull => {
                self.fail_load(index, false);
                false
            }
        };
        self.load_times.record(start.elapsed().as_nanos().try_into().unwrap_or(u64::MAX));
        loaded
    }

    /// The load of claimed page `index` into a page on the stack (no
    /// fault-around): all the pool's buffers are taken, and the handler runs
    /// on a stack of its own with room for it.
    #[inline(never)]
    fn load_one_page(&self, index: usize, write: bool) -> bool {
        let mut page = [0u8; PAGE_SIZE];
        self.load_claimed(index, write, false, &mut page).is_ok()
    }

    /// Hands the load of claimed page `index` to the handler thread and
    /// sleeps until it is done; false when it failed or the thread is
    /// gone.
    fn hand_off(&self, index: usize, write: bool) -> bool {
        Counters::bump(&self.counters.handoffs);
        loop {
            if !self.handler_alive.load(SeqCst) {
                self.fail_load(index, false);
                return false;
            }
            for h in self.handoffs.iter() {
                if h.state.compare_exchange(FREE, FILLING, SeqCst, SeqCst).is_err() {
                    continue;
                }
                h.page.store(index, SeqCst);
                h.write.store(write, SeqCst);
                h.state.store(PENDING, SeqCst);
                self.kick();
                loop {
                    match h.state.load(SeqCst) {
                        done @ (DONE_OK | DONE_FAILED) => {
                            h.state.store(FREE, SeqCst);
                            return done == DONE_OK;
                        }
                        PENDING if !self.handler_alive.load(SeqCst) => {
                            // Taken back unless the thread took it first.
                            if h.state.compare_exchange(PENDING, FREE, SeqCst, SeqCst).is_ok() {
                                self.fail_load(index, false);
                                return false;
                            }
                        }
                        seen => O::sleep_while(&h.state, seen),
                    }
                }
            }
            // Every hand-off in use: wait for one.
            std::thread::yield_now();
        }
    }

    /// The handler thread's side of the hand-offs: does each pending
    /// load (with `buf`) and wakes its handler.
    pub(crate) fn serve_handoffs(&self, buf: &mut [u8]) {
        for h in self.handoffs.iter() {
            if h.state.compare_exchange(PENDING, TAKEN, SeqCst, SeqCst).is_err() {
                continue;
            }
            let index = h.page.load(SeqCst);
            let write = h.write.load(SeqCst);
            let loaded = self.load_in_thread(index, write, false, Some(buf)).is_ok();
            h.state.store(if loaded { DONE_OK } else { DONE_FAILED }, SeqCst);
            O::wake_sleepers(&h.state);
        }
    }
}
