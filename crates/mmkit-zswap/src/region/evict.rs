//! Eviction, callable from any thread (a signal handler's with
//! `clean_only`): the CLOCK that picks victims, preferring clean ones, and
//! the eviction of a batch — clean victims dropped as they are, dirty ones
//! write-protected in runs, read through the kernel and stored (a page of
//! zeros needs no copy), all dropped in one `process_madvise`. Fixed
//! arrays on the stack: nothing is allocated.
//!
//! Works on the `pager`'s shared state; the operating system through its
//! facade (`os::Os`), the stored copies through `slots`.

use super::os::mapping::MAX_RUNS;
use super::os::Os;
use super::page::{self, DIRTY, EVICTING, LOADING, REFERENCED, RESIDENT};
use super::pager::Shared;
use super::Counters;
use crate::PAGE_SIZE;
use std::sync::atomic::Ordering::Relaxed;

/// Victims one eviction step picks at most (its arrays are on the stack).
const EVICT_CHUNK: usize = MAX_RUNS;

impl<O: Os> Shared<O> {
    /// Picks up to `out.len()` victims with the CLOCK, into `out`, and
    /// marks them `EVICTING`; returns how many. A marked page is not
    /// picked again (one scan may pass a page twice), a pinned or loading
    /// one not at all. Clean pages (stored, write-protected: dropped with
    /// no compression) are preferred: dirty ones seen in a window of the
    /// scan are taken only when the window has not found enough clean
    /// ones; with `clean_only` (a signal handler's direct reclaim, which
    /// hands off when it finds too few), never, and the scan ends with the
    /// window.
    fn pick_victims(&self, out: &mut [usize], clean_only: bool) -> usize {
        let want = out.len().min(EVICT_CHUNK);
        let total = self.pages();
        let window = (8 * want).max(64);
        let mut dirty = [0usize; EVICT_CHUNK];
        let mut dirty_seen = 0;
        let mut count = 0;
        for step in 0..2 * total {
            if count >= want || (step >= window && (clean_only || count + dirty_seen >= want)) {
                break;
            }
            let i = self.hand.fetch_add(1, Relaxed) % total;
            let state = &self.states[i];
            let flags = page::flags(state);
            if flags & (RESIDENT | EVICTING | LOADING) != RESIDENT {
                continue;
            }
            if flags & REFERENCED != 0 {
                page::clear(state, REFERENCED);
                continue;
            }
            if flags & DIRTY != 0 {
                // A pinned page is no candidate, and one scan may pass a
                // page twice: neither may take the place of a victim.
                if !clean_only && dirty_seen < want && !page::is_pinned(state) && !dirty[..dirty_seen].contains(&i) {
                    dirty[dirty_seen] = i;
                    dirty_seen += 1;
                }
                continue;
            }
            if page::try_evict(state) {
                out[count] = i;
                count += 1;
            }
        }
        for &i in &dirty[..dirty_seen] {
            if count >= want {
                break;
            }
            let state = &self.states[i];
            if page::flags(state) & REFERENCED == 0 && page::try_evict(state) {
                out[count] = i;
                count += 1;
            }
        }
        count
    }

    /// Evicts up to `n` pages; returns how many went.
    pub(crate) fn evict(&self, n: usize) -> usize {
        self.evict_with(n, false)
    }

    /// Evicts up to `n` pages (clean ones only with `clean_only`), in
    /// steps of at most [`EVICT_CHUNK`]; allocates nothing.
    pub(crate) fn evict_with(&self, n: usize, clean_only: bool) -> usize {
        let mut gone = 0;
        let mut left = n;
        while left > 0 {
            let step = left.min(EVICT_CHUNK);
            let mut victims = [0usize; EVICT_CHUNK];
            let picked = self.pick_victims(&mut victims[..step], clean_only);
            if picked == 0 {
                break;
            }
            gone += self.evict_picked(&mut victims[..picked]);
            left -= step;
            if picked < step {
                break;
            }
        }
        gone
    }

    /// Evicts the victims `pick_victims` marked: clean ones are dropped as
    /// they are; dirty ones are write-protected, one `UFFDIO_WRITEPROTECT`
    /// (one TLB flush) for each run of neighbours, so that a concurrent
    /// writer waits instead of losing its write, read through the kernel,
    /// and stored (a page of zeros is not: it needs no slot, and frees the
    /// one it had); then every victim is dropped, one `process_madvise`
    /// for all the runs.
    fn evict_picked(&self, victims: &mut [usize]) -> usize {
        victims.sort_unstable();
        let mut stored = [0usize; EVICT_CHUNK];
        let mut n_stored = 0;
        let mut dirty = [0usize; EVICT_CHUNK];
        let mut n_dirty = 0;
        for &v in victims.iter() {
            let slot = self.slots.lock(v);
            if page::flags(&self.states[v]) & DIRTY == 0 && slot.is_stored() {
                // Clean: write-protected since it was loaded, its copy
                // current.
                Counters::bump(&self.counters.evicted_clean);
                stored[n_stored] = v;
                n_stored += 1;
            } else {
                dirty[n_dirty] = v;
                n_dirty += 1;
            }
        }
        if n_dirty > 0 {
            n_stored = self.store_dirty(&dirty[..n_dirty], &mut stored, n_stored);
        }
        let stored = &mut stored[..n_stored];
        stored.sort_unstable();
        // Drop the victims in runs of neighbours, all runs in one call.
        let mut runs = [(0usize, 0usize); EVICT_CHUNK];
        let mut n_runs = 0;
        let mut k = 0;
        while k < stored.len() {
            let run = run_length(&stored[k..]);
            runs[n_runs] = (stored[k], run);
            n_runs += 1;
            k += run;
        }
        let mut dropped = [false; EVICT_CHUNK];
        self.os.drop_runs(&runs[..n_runs], &mut dropped);
        let mut gone = 0;
        for (&(first, run), &dropped) in runs[..n_runs].iter().zip(&dropped) {
            for v in first..first + run {
                if !dropped {
                    self.keep(v);
                } else if page::end_eviction(&self.states[v], RESIDENT | DIRTY | REFERENCED) {
                    // After the state: a raw access that faulted on the
                    // victim (a writer stopped by its protection, or a
                    // touch after the drop) faults again and finds the
                    // page missing and free to load. Victims nobody
                    // faulted on need no wake.
                    self.wake(v, 1);
                }
            }
            if dropped {
                gone += run;
                self.counters.resident.fetch_sub(run as u64, Relaxed);
            }
        }
        self.counters.evictions.fetch_add(gone as u64, Relaxed);
        gone
    }

    /// The dirty victims' part of an eviction (apart, so that the clean
    /// eviction a signal handler does needs none of its stack: the page
    /// buffer): write-protected in runs, read, stored; those done are
    /// added to `stored` from `n_stored` on, and the new count returned.
    #[inline(never)]
    fn store_dirty(&self, dirty: &[usize], stored: &mut [usize; EVICT_CHUNK], mut n_stored: usize) -> usize {
        // Stop writers while the pages are read and stored; a run that
        // cannot be protected stays (a write could slip past the read).
        let mut protected = [false; EVICT_CHUNK];
        let mut k = 0;
        while k < dirty.len() {
            let run = run_length(&dirty[k..]);
            let ok = self.os.write_protect(dirty[k], run);
            protected[k..k + run].fill(ok);
            k += run;
        }
        let mut page = [0u8; PAGE_SIZE];
        for (k, &v) in dirty.iter().enumerate() {
            if !protected[k] {
                self.keep(v);
                continue;
            }
            let state = &self.states[v];
            let mut slot = self.slots.lock(v);
            if !self.os.read_page(v, &mut page) {
                // Not in the page tables: the program dropped it (its
                // contents are gone, as `MADV_DONTNEED` drops them; a
                // stored copy stays the page's).
                Counters::bump(&self.counters.program_drops);
            } else if page.iter().all(|&b| b == 0) {
                slot.free(&self.zswap);
                Counters::bump(&self.counters.zero_drops);
            } else if slot.store(&self.zswap, &page).is_err() {
                self.os.unprotect(v, 1, true);
                self.keep(v);
                continue;
            }
            // Stored (or needing no copy) and write-protected: clean,
            // whether it goes or stays.
            page::clear(state, DIRTY);
            stored[n_stored] = v;
            n_stored += 1;
        }
        n_stored
    }

    /// A victim that could not be evicted stays resident; a raw fault left
    /// to its eviction is woken, to find it mapped.
    fn keep(&self, v: usize) {
        Counters::bump(&self.counters.evict_failures);
        if page::end_eviction(&self.states[v], 0) {
            self.wake(v, 1);
        }
    }
}

/// How many of `pages` (sorted) from the first on are consecutive.
fn run_length(pages: &[usize]) -> usize {
    let mut run = 1;
    while run < pages.len() && pages[run] == pages[0] + run {
        run += 1;
    }
    run
}
