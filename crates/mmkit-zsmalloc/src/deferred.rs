//! Deferred free (Linux's 2026 `zs_free_deferred`, from the series "reduce
//! zs_free() latency on swap release path"): a caller on a latency-critical
//! path (zram's slot-free notification, a process exiting) queues the
//! handle and returns; a worker frees the queued handles later.
//!
//! Owns the pool's side of the queue (what a queued word is, the queue's
//! cap, the synchronous fallback) and the drain. The queue's mechanics are
//! `deferred_queue`'s (per-CPU batches filled with no lock, handed whole
//! to the drain), the state a pool keeps for it `deferred_state`'s, and
//! the thread that runs the drain `worker`'s; all three sit below the
//! pool, and this module above it.
//!
//! # Bound
//!
//! The queue grows by batches of `BATCH_LEN` handles (4 KiB of words)
//! and may have at most [`Inner::deferred_cap`] of them: the series' 128
//! MiB worth of pages' handles plus one batch per CPU, or, in a larger
//! pool, as many as make the queue's words 1/64 of the pool's pages
//! (the cap is read when a new batch is needed, so it follows the pool).
//! Only a free that finds every batch full and the cap reached falls back
//! to a synchronous free (`DeferredStats::fallback`). Worst case: the
//! queue holds `cap × BATCH_LEN` handles, at most 1/64 of the pool's
//! memory in words beyond the fixed floor, and its batches stay allocated
//! (for reuse) until the pool goes. Every word a checked call queued
//! names a distinct live object; an unchecked run
//! (`zs_free_deferred_raw_many_drain_checked`) may queue stale or repeated
//! words of its key holder, which take room under the same cap and are
//! counted invalid when drained.
//!
//! # The drain
//!
//! The worker is woken when a batch is sealed, it is asleep and half the
//! queue is waiting in full batches (half its cap, and at least half the
//! series' 128 MiB of handles), as Linux schedules its drain when its array
//! is half full: a burst of frees runs without the drain taking a CPU from
//! it until then. The cap grows with the pool, so in a large pool a whole
//! release (256 MiB of swap) queues before the worker wakes; its memory
//! comes back at the next flush or within the worker's idle period. On a
//! machine whose other CPUs are busy, a worker woken earlier shares the
//! releasing caller's CPU, which is what the deferral exists to spare.
//! Awake, it takes every full batch until none is left; a flush (or a
//! worker that slept its full period, 100 ms) also seals the partial ones.
//! Words of up to `DRAIN_GROUP` batches at a time are sorted by class (a
//! counting sort: classes are 9 bits), each
//! class is locked once for all its handles in the group, and the pages of
//! the zspages they emptied go back to the page allocator together
//! ([`PageAllocator::free_blocks_bulk`](mmkit::PageAllocator::free_blocks_bulk):
//! one pageset-lock hold instead of one per page), with no class lock
//! held.
//!
//! A queued handle was consumed by the call, so it can be neither queued
//! twice nor freed after it was queued: safe code cannot express either
//! (the `compile_fail` examples on [`Handle`]). A handle of another pool
//! is refused at the call, and a raw word (`zs_free_deferred_raw`) is
//! taken from its object at the call by one compare-and-swap of the
//! object's state word (`slot_state`: raw-held to queued), which refuses a
//! word freed, queued or stale. Neither call takes a class lock: only the
//! drain does (and the synchronous fallback). A slot table releasing its
//! own words may instead queue them unchecked
//! (`zs_free_deferred_raw_many_drain_checked`): the drain then frees a
//! queued word's object only if the word still names it as raw-held, and
//! never an object a handle holds (a handle queued in a raw-keyed pool is
//! moved to the queued state at its call, so the drain needs no handle
//! state there). `DeferredStats::invalid` counts queued words found
//! invalid when drained: zero for the checked calls, the words that went
//! stale before their drain for the unchecked one.

use crate::deferred_queue::Pushed;
use crate::deferred_state::{queue_floor, DrainBuffers, BATCH_LEN, DRAIN_GROUP};
use crate::handle::{raw_fields, raw_id, Handle, MAX_CLASSES};
use crate::pool::Inner;
use crate::size_class::{Held, Name};
use crate::slot_state::{state, HANDLE, QUEUED};
use crate::worker::{Drain, Worker};
use crate::{DeferredStats, ZsError};
use mmkit::{Cpus, PageBlock};
use std::sync::atomic::Ordering::Relaxed;

impl Inner {
    pub(crate) fn free_deferred(&self, handle: Handle, worker: Option<&Worker>) -> Result<(), (ZsError, Handle)> {
        // Another pool's handle is refused now: queued, it would only be
        // counted invalid later, and the caller would believe it freed.
        let (class, name) = match self.name_of(&handle) {
            Ok(name) => name,
            Err(e) => return Err((e, handle)),
        };
        // In a raw-keyed pool the drain frees a queued object still held
        // by a raw word (a slot table's words are checked there), never
        // one held by a handle: so the object leaves its handle here, by
        // one compare-and-swap (the handle is the caller's, so it wins).
        let generation = handle.generation();
        if self.raw_keyed
            && !self.states[class].swap_if(name.slot, state(HANDLE, generation), state(QUEUED, generation))
        {
            return Err((ZsError::InvalidHandle(name.id), handle));
        }
        let queued = Name { held: Held::Queued(generation), ..name };
        self.queue_taken(class, &queued, handle.queued_word(), worker).map_err(|e| {
            // The synchronous fallback was refused: the handle gets its
            // object back with the error.
            if self.raw_keyed {
                self.states[class].swap_if(name.slot, state(QUEUED, generation), state(HANDLE, generation));
            }
            (e, handle)
        })
    }

    /// The most batches the deferred queue may have (see the module
    /// documentation): read when it needs a new one.
    pub(crate) fn deferred_cap(&self) -> usize {
        let page_size = self.table.page_size();
        let floor = queue_floor(page_size).div_ceil(BATCH_LEN) + Cpus::new(&self.mm).nr_cpus();
        let pool_bytes = self.pages_allocated.load(Relaxed) as usize * page_size;
        floor.max(pool_bytes / 64 / (8 * BATCH_LEN))
    }

    /// Queues `word`, whose object `name` (of `class`) the caller took
    /// from its holder already (a consumed handle, or a raw word's object
    /// moved to the queued state); frees it now, under the class lock,
    /// when the queue is at its cap. Takes no lock otherwise.
    pub(crate) fn queue_taken(
        &self,
        class: usize,
        name: &Name,
        word: u64,
        worker: Option<&Worker>,
    ) -> Result<(), ZsError> {
        match self.deferred.batches.push(Cpus::new(&self.mm).current_cpu(), word, || self.deferred_cap()) {
            Pushed::Queued { sealed } => {
                if sealed {
                    self.wake_if_due(worker);
                }
                Ok(())
            }
            Pushed::Fallback(_) => self.free_fallback(class, name),
        }
    }

    /// Queues `words`, whose objects the caller took from their raw words
    /// already (each moved to the queued state) or whose checks are the
    /// drain's (a slot table's own words), with one reservation of
    /// the calling CPU's batch for as many as it has room for; frees the
    /// ones that find the queue at its cap now, under their class locks.
    pub(crate) fn queue_taken_many(&self, words: &[u64], worker: Option<&Worker>) {
        let mut sealed = false;
        let queued = self.deferred.batches.push_many(
            Cpus::new(&self.mm).current_cpu(),
            words,
            || self.deferred_cap(),
            &mut sealed,
        );
        if sealed {
            self.wake_if_due(worker);
        }
        for &word in &words[queued..] {
            let (slot, class, generation) = raw_fields(word);
            let name = Name { slot, held: Held::Queued(generation), id: raw_id(self.pool_id, word) };
            let _ = self.free_fallback(class, &name);
        }
    }

    /// Wakes the worker once half the queue is waiting (half its cap, at
    /// least half the series' queue): a burst of frees (a process exiting)
    /// runs without the drain taking a CPU from it until then, and the
    /// worker's idle period drains what a smaller burst left. The cap is
    /// read only here, once a batch is sealed.
    #[inline]
    fn wake_if_due(&self, worker: Option<&Worker>) {
        if let Some(worker) = worker {
            let pending = self.deferred.batches.pending();
            if pending >= self.deferred.wake_at && pending >= self.deferred_cap() / 2 {
                worker.kick();
            }
        }
    }

    /// The synchronous free of a call that found the queue at its cap.
    #[cold]
    #[inline(never)]
    fn free_fallback(&self, class: usize, name: &Name) -> Result<(), ZsError> {
        self.free(class, name)
    }

    /// Frees everything queued before the call.
    pub(crate) fn deferred_flush(&self) {
        self.deferred_drain(true);
    }

    /// Frees the handles of every full batch, and with `seal` of every
    /// partial one too; returns how many batches it drained.
    pub(crate) fn deferred_drain(&self, seal: bool) -> usize {
        let mut buffers = self.deferred.draining.lock().unwrap_or_else(|p| p.into_inner());
        let DrainBuffers { ids, words, sorted, touched, pages } = &mut *buffers;
        let queue = &self.deferred.batches;
        if seal {
            queue.seal_partial();
        }
        queue.take_full(ids);
        for group in ids.chunks(DRAIN_GROUP) {
            words.clear();
            for &id in group {
                queue.read(id, words);
                queue.recycle(id);
            }
            self.free_queued(words, sorted, touched, pages);
        }
        ids.len()
    }

    /// Frees queued `words`: sorted by class into `sorted`, one hold of
    /// each class lock for all of its words (each zspage they leave moved
    /// between fullness groups once: `ClassState::free_run`), then the
    /// emptied zspages' pages (gathered in `pages`) in one bulk free.
    fn free_queued(&self, words: &[u64], sorted: &mut Vec<u64>, touched: &mut Vec<u32>, pages: &mut Vec<PageBlock>) {
        let class_of = |word: u64| raw_fields(word).1;
        // A counting sort: classes are below `MAX_CLASSES` (9 bits).
        let mut start = [0usize; MAX_CLASSES + 1];
        for &word in words {
            start[class_of(word) + 1] += 1;
        }
        for class in 1..start.len() {
            start[class] += start[class - 1];
        }
        let bounds = start;
        sorted.clear();
        sorted.resize(words.len(), 0);
        for &word in words {
            let at = &mut start[class_of(word)];
            sorted[*at] = word;
            *at += 1;
        }
        let (mut freed, mut invalid) = (0u64, 0u64);
        for class in 0..MAX_CLASSES {
            let run = &sorted[bounds[class]..bounds[class + 1]];
            if run.is_empty() {
                continue;
            }
            if class >= self.classes.len() || self.table.serving(class) != class {
                invalid += run.len() as u64;
                continue;
            }
            let names = run.iter().map(|&word| {
                let (slot, _, generation) = raw_fields(word);
                Name { slot, held: Held::Queued(generation), id: raw_id(self.pool_id, word) }
            });
            let (ok, bad) = self.lock(class).free_run(names, touched, pages);
            freed += ok;
            invalid += bad;
        }
        self.free_page_list(pages);
        self.deferred.drained.fetch_add(freed, Relaxed);
        self.deferred.invalid.fetch_add(invalid, Relaxed);
    }
}

/// The pool's queue, as its worker drains it.
impl Drain for Inner {
    fn drain_name(&self) -> &str {
        &self.name
    }

    fn drain(&self, seal: bool) -> usize {
        self.deferred_drain(seal)
    }

    fn pending(&self) -> usize {
        self.deferred.batches.pending()
    }
}

impl crate::ZsPool {
    /// Queues `handle` to be freed later and returns at once (Linux's
    /// `zs_free_deferred`): for callers on a latency-critical path. Takes
    /// no lock; only when the queue is at its cap (see the crate's
    /// documentation of the queue's bound) is the handle freed now
    /// instead. The handle is consumed: it cannot be queued twice, nor
    /// used after.
    ///
    /// # Errors
    /// [`ZsError::InvalidHandle`] at once for a handle of another pool (or
    /// of a dropped one); nothing is queued, and the handle comes back
    /// with the error (as from `zs_free`). So does an error of the
    /// synchronous free a busy or full queue falls back to
    /// ([`ZsError::Reentered`]): nothing was queued or freed.
    pub fn zs_free_deferred(&self, handle: Handle) -> Result<(), (ZsError, Handle)> {
        self.inner.free_deferred(handle, self.worker.as_ref())
    }

    /// Frees every handle queued before the call (Linux's
    /// `zs_free_deferred_flush`).
    pub fn zs_free_deferred_flush(&self) {
        self.inner.deferred_flush();
    }

    /// Counters of the deferred free.
    pub fn deferred_stats(&self) -> DeferredStats {
        self.inner.deferred.stats()
    }
}
