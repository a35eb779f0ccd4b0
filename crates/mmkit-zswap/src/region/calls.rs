//! What the region's calls do, over any facade: pin a page and map it
//! (loading it in the calling thread first), copy in and out page by page,
//! reclaim, pin and unpin ranges, read the counters. [`SwapRegion`]
//! checks its arguments and the process and calls these; the policy tests
//! call them on the in-memory fake (`os::fake`).
//!
//! Works on the `pager`'s shared state. The parts that may claim pages,
//! take zswap's locks or allocate run as region code (`signal::RegionCode`)
//! with the thread's asynchronous signals blocked.
//!
//! [`SwapRegion`]: super::SwapRegion

use super::os::Os;
use super::page::{self, PinRefused, DIRTY, EVICTING, FAILED, RESIDENT};
use super::pager::{LoadError, Shared};
use super::signal::RegionCode;
use super::{Counters, RegionError, RegionStats};
use crate::PAGE_SIZE;
use std::ops::Range;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};

impl<O: Os> Shared<O> {
    /// Whether the handler thread still serves faults and requests (and
    /// this is the process the region was made in).
    pub(crate) fn alive(&self) -> bool {
        !self.forked() && !self.stop.load(Relaxed) && self.handler_alive.load(SeqCst)
    }

    /// Runs `access` on page `index` pinned (not evicted meanwhile) and
    /// mapped (writable when `write`): a page that is not mapped is loaded
    /// in this thread first, so that `access` never faults on a missing
    /// page and a failed load is an error here, never a page of zeros.
    pub(crate) fn with_page<T>(&self, index: usize, write: bool, access: impl FnOnce() -> T) -> Result<T, RegionError> {
        let state = &self.states[index];
        page::pin(state, || self.alive()).map_err(|why| self.pin_refused(why, index))?;
        let out = self.ensure(index, write).map(|()| access());
        page::unpin(state);
        out
    }

    /// The error for a pin of page `index` refused.
    pub(crate) fn pin_refused(&self, why: PinRefused, index: usize) -> RegionError {
        match why {
            PinRefused::Gone => RegionError::HandlerGone,
            PinRefused::TooMany => RegionError::TooManyPins { offset: index * PAGE_SIZE },
        }
    }

    /// Maps pinned page `index` (writable when `write`) unless it is.
    pub(crate) fn ensure(&self, index: usize, write: bool) -> Result<(), RegionError> {
        let state = &self.states[index];
        loop {
            let flags = page::flags(state);
            if flags & (RESIDENT | FAILED) == RESIDENT {
                if write && flags & DIRTY == 0 {
                    self.make_writable(index);
                }
                return Ok(());
            }
            if !self.alive() {
                // Raw accesses would wait for ever: the region is broken.
                return Err(RegionError::HandlerGone);
            }
            // No handler of the program's runs while this thread holds the
            // claim (and zswap's locks): one that touched the region could
            // need them. Blocked before the claim is taken.
            let _blocked = O::block_signals();
            let _region_code = RegionCode::enter();
            if page::try_claim_load(state) {
                return match self.load_in_thread(index, write, false, None) {
                    Ok(_) => {
                        Counters::bump(&self.counters.loads_in_thread);
                        Ok(())
                    }
                    Err(LoadError::Failed) => Err(RegionError::LoadFailed { offset: index * PAGE_SIZE }),
                    Err(LoadError::SwapFull) => Err(RegionError::SwapFull { offset: index * PAGE_SIZE }),
                };
            }
            // Another thread is loading it.
            std::thread::yield_now();
        }
    }

    /// Calls `access(at, from, n)` for each page's part of `len` bytes at
    /// `offset` (`at`: region offset, `from`: offset into the caller's
    /// buffer), each on its page pinned and mapped. The caller checked the
    /// range.
    pub(crate) fn by_page(
        &self,
        offset: usize,
        len: usize,
        write: bool,
        mut access: impl FnMut(usize, usize, usize),
    ) -> Result<(), RegionError> {
        let mut done = 0;
        while done < len {
            let at = offset + done;
            let n = (PAGE_SIZE - at % PAGE_SIZE).min(len - done);
            self.with_page(at / PAGE_SIZE, write, || access(at, done, n))?;
            done += n;
        }
        Ok(())
    }

    /// Evicts pages until at most `keep` are resident, and returns how many
    /// were evicted (pinned pages, and pages that cannot be stored, stay).
    pub(crate) fn reclaim(&self, keep: usize) -> Result<usize, RegionError> {
        if self.forked() {
            return Err(RegionError::Forked);
        }
        if !self.alive() {
            return Err(RegionError::HandlerGone);
        }
        let _blocked = O::block_signals();
        let _region_code = RegionCode::enter();
        let mut evicted = 0;
        while self.resident() > keep {
            let want = (self.resident() - keep).min(self.config.evict_batch.max(64));
            match self.evict(want) {
                // Nothing picked: done, unless another thread (the
                // background reclaimer) is evicting pages right now, whose
                // count has not gone down yet.
                0 if self.states.iter().any(|s| page::flags(s) & EVICTING != 0) => std::thread::yield_now(),
                0 => break,
                n => evicted += n,
            }
        }
        Ok(evicted)
    }

    /// Pins pages `span` (at most the budget, checked by the caller) and
    /// maps them, writable when `write`; on an error no page of the span
    /// stays pinned.
    pub(crate) fn pin_span(&self, span: Range<usize>, write: bool) -> Result<(), RegionError> {
        for index in span.clone() {
            let state = &self.states[index];
            let pinned = page::pin(state, || self.alive()).map_err(|why| self.pin_refused(why, index));
            if let Err(e) = pinned.and_then(|_| self.ensure(index, write).inspect_err(|_| page::unpin(state))) {
                for earlier in span.start..index {
                    page::unpin(&self.states[earlier]);
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Unpins pages `span` pinned by [`pin_span`](Self::pin_span). Pins
    /// may hold more pages between them than the budget (each alone holds
    /// at most the budget), so the region can be over it when they are let
    /// go; the excess is evicted here, in the calling thread, rather than
    /// left resident until the next load evicts for itself (as `munlock`
    /// hands pages back to reclaim at once).
    pub(crate) fn unpin_span(&self, span: Range<usize>) {
        for index in span {
            page::unpin(&self.states[index]);
        }
        if self.alive() {
            let _blocked = O::block_signals();
            let _region_code = RegionCode::enter();
            self.evict_to_budget();
        }
    }

    /// The region's counters.
    pub(crate) fn stats(&self) -> RegionStats {
        let _region_code = RegionCode::enter();
        let c = &self.counters;
        RegionStats {
            missing_faults: c.missing_faults.load(Relaxed),
            wp_faults: c.wp_faults.load(Relaxed),
            zero_fills: c.zero_fills.load(Relaxed),
            swap_ins: c.swap_ins.load(Relaxed),
            fault_around_pages: c.fault_around_pages.load(Relaxed),
            evictions: c.evictions.load(Relaxed),
            evicted_clean: c.evicted_clean.load(Relaxed),
            evict_failures: c.evict_failures.load(Relaxed),
            load_failures: c.load_failures.load(Relaxed),
            resident: c.resident.load(Relaxed),
            loads_in_thread: c.loads_in_thread.load(Relaxed),
            direct_reclaims: c.direct_reclaims.load(Relaxed),
            reclaimer_wakeups: c.reclaimer_wakeups.load(Relaxed),
            background_evictions: c.background_evictions.load(Relaxed),
            load_p99_ns: self.load_times.percentile(990),
            faults_in_thread: c.faults_in_thread.load(Relaxed),
            handoffs: c.handoffs.load(Relaxed),
            program_drops: c.program_drops.load(Relaxed),
            zero_drops: c.zero_drops.load(Relaxed),
        }
    }
}
