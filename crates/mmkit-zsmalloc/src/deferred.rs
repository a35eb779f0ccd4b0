//! Deferred free (Linux's 2026 `zs_free_deferred`, from the series "reduce
//! zs_free() latency on swap release path"): a caller on a latency-critical
//! path (zram's slot-free notification, a process exiting) queues the
//! handle and returns; a worker frees the queued handles later, in batches
//! sorted by class so that one class lock covers a run of frees.
//!
//! Owns the queue, its worker and their counters. The queue has one shard
//! per CPU of the page allocator (the series' third version's per-CPU
//! buffers: with one shared queue, two freeing threads mostly found it
//! locked), each holding 128 MiB worth of pages' handles, the size of the
//! second version's one queue. The caller only *tries* its CPU's
//! shard, and frees synchronously when it is contended or full, so
//! `zs_free_deferred` never waits. The worker is
//! woken when the queue is half full; `zs_free_deferred_flush` and the
//! pool's teardown drain it synchronously.
//!
//! A queued handle was consumed by the call, so it can be neither queued
//! twice nor freed after it was queued: safe code cannot express either
//! (the `compile_fail` examples on [`Handle`]). A handle of another pool
//! is refused at the call, and a raw word (`zs_free_deferred_raw`) is
//! taken from its object at the call by one compare-and-swap of the
//! object's state word (`slot_state`: raw-held to queued), which refuses a
//! word freed, queued or stale. Neither call takes a class lock: only the
//! drain does (and the synchronous fallback). `DeferredStats::invalid`
//! counts queued words found invalid when drained, which these checks keep
//! at zero.

use crate::handle::{raw_fields, raw_id, Handle};
use crate::pool::Inner;
use crate::size_class::{Held, Name};
use crate::ZsError;
use mmkit::Cpus;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

#[cfg(loom)]
use loom::sync::Mutex;
#[cfg(not(loom))]
use std::sync::Mutex;

/// Handles the queue holds: 128 MiB of pages, the series' size.
pub(crate) fn queue_capacity(page_size: usize) -> usize {
    (128 << 20) / page_size
}

/// How the deferred-free queue is laid out; both designs of Linux's
/// series, to measure one against the other.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DeferredLayout {
    /// One shard per CPU of the page allocator, each holding 128 MiB worth
    /// of pages' handles (the series' third version). The default: with
    /// two or more threads freeing, the one shared queue of `PerPool` was
    /// mostly found locked, and its callers freed synchronously
    /// (`BENCHMARKS.md`, zsmalloc release).
    #[default]
    PerCpu,
    /// One queue per pool holding 128 MiB worth of pages' handles (the
    /// series' second version).
    PerPool,
}

/// Counters of the deferred free.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeferredStats {
    /// Handles queued.
    pub queued: u64,
    /// Calls that freed synchronously: the queue was busy or full.
    pub fallback: u64,
    /// Queued handles freed by a drain.
    pub drained: u64,
    /// Queued handles that were invalid when drained (freed twice, forged).
    pub invalid: u64,
}

/// What a push did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Pushed {
    /// Queued; `kick` when the queue just reached half full.
    Queued { kick: bool },
    /// Not queued (queue busy or full): the caller frees it now.
    Fallback(u64),
}

/// One CPU's part of the queue and its counters, on its own cache lines,
/// so that pushes from different CPUs share no line.
#[repr(align(128))]
struct Shard {
    /// Queued handles as one word each (`Handle::queued_word`): the
    /// queue's memory is what it was when handles were words.
    handles: Mutex<Vec<u64>>,
    queued: AtomicU64,
    fallback: AtomicU64,
}

/// The queue itself, without the pool: what the loom model checks.
pub(crate) struct DeferredQueue {
    shards: Box<[Shard]>,
    /// Held for a whole drain, so that a flush waits for the worker's
    /// drain in progress (Linux's `flush_work`): after a flush every handle
    /// queued before it is freed.
    pub(crate) draining: std::sync::Mutex<()>,
    /// Handles one shard holds.
    capacity: usize,
    drained: AtomicU64,
    invalid: AtomicU64,
}

impl DeferredQueue {
    /// A queue of `shards` shards of `capacity` handles each.
    pub(crate) fn new(capacity: usize, shards: usize) -> Self {
        let shard =
            || Shard { handles: Mutex::new(Vec::new()), queued: AtomicU64::new(0), fallback: AtomicU64::new(0) };
        Self {
            shards: (0..shards.max(1)).map(|_| shard()).collect(),
            draining: std::sync::Mutex::new(()),
            capacity: capacity.max(2),
            drained: AtomicU64::new(0),
            invalid: AtomicU64::new(0),
        }
    }

    /// Queues `handle` on shard `cpu` if its lock is free and there is
    /// room; never waits.
    pub(crate) fn try_push(&self, cpu: usize, handle: u64) -> Pushed {
        let shard = &self.shards[cpu % self.shards.len()];
        let Ok(mut queue) = shard.handles.try_lock() else {
            shard.fallback.fetch_add(1, Relaxed);
            return Pushed::Fallback(handle);
        };
        if queue.len() >= self.capacity {
            drop(queue);
            shard.fallback.fetch_add(1, Relaxed);
            return Pushed::Fallback(handle);
        }
        if queue.capacity() == 0 {
            queue.reserve_exact(self.capacity);
        }
        queue.push(handle);
        let kick = queue.len() == self.capacity / 2;
        drop(queue);
        shard.queued.fetch_add(1, Relaxed);
        Pushed::Queued { kick }
    }

    /// Everything queued so far, emptying every shard (waits for their
    /// locks).
    #[cfg(loom)]
    pub(crate) fn take_all(&self) -> Vec<u64> {
        self.take_up_to(usize::MAX)
    }

    /// The oldest `per_shard` handles of each shard, or all of them if it
    /// holds fewer (waits for the shards' locks).
    pub(crate) fn take_up_to(&self, per_shard: usize) -> Vec<u64> {
        let mut taken = Vec::new();
        for shard in self.shards.iter() {
            let mut queue = match shard.handles.lock() {
                Ok(queue) => queue,
                Err(poisoned) => poisoned.into_inner(),
            };
            let n = queue.len().min(per_shard);
            taken.extend(queue.drain(..n));
        }
        taken
    }

    /// Handles one shard holds.
    pub(crate) fn shard_capacity(&self) -> usize {
        self.capacity
    }

    pub(crate) fn note_drained(&self, freed: u64, invalid: u64) {
        self.drained.fetch_add(freed, Relaxed);
        self.invalid.fetch_add(invalid, Relaxed);
    }

    pub(crate) fn stats(&self) -> DeferredStats {
        DeferredStats {
            queued: self.shards.iter().map(|s| s.queued.load(Relaxed)).sum(),
            fallback: self.shards.iter().map(|s| s.fallback.load(Relaxed)).sum(),
            drained: self.drained.load(Relaxed),
            invalid: self.invalid.load(Relaxed),
        }
    }
}

impl Inner {
    pub(crate) fn free_deferred(&self, handle: Handle, worker: Option<&Worker>) -> Result<(), (ZsError, Handle)> {
        // Another pool's handle is refused now: queued, it would only be
        // counted invalid later, and the caller would believe it freed.
        let (class, name) = match self.name_of(&handle) {
            Ok(name) => name,
            Err(e) => return Err((e, handle)),
        };
        self.queue_taken(class, &name, handle.queued_word(), worker).map_err(|e| (e, handle))
    }

    /// Queues `word`, whose object `name` (of `class`) the caller took
    /// from its holder already (a consumed handle, or a raw word's object
    /// moved to the queued state); frees it now, under the class lock,
    /// when the queue is busy or full. Takes no class lock otherwise.
    pub(crate) fn queue_taken(
        &self,
        class: usize,
        name: &Name,
        word: u64,
        worker: Option<&Worker>,
    ) -> Result<(), ZsError> {
        match self.deferred.try_push(Cpus::new(&self.mm).current_cpu(), word) {
            Pushed::Queued { kick } => {
                if kick {
                    if let Some(worker) = worker {
                        worker.kick();
                    }
                }
                Ok(())
            }
            Pushed::Fallback(_) => self.free(class, name),
        }
    }

    /// Frees everything queued, a class lock per run of same-class handles.
    pub(crate) fn deferred_flush(&self) {
        self.deferred_drain(usize::MAX);
    }

    /// Frees at most `per_shard` queued handles of each shard (the worker's
    /// cap on one run's work, as in the series' zsmalloc-only variant, so
    /// that one wake-up does not monopolise a CPU).
    pub(crate) fn deferred_drain(&self, per_shard: usize) {
        let _draining = self.deferred.draining.lock().unwrap_or_else(|p| p.into_inner());
        let mut batch = self.deferred.take_up_to(per_shard);
        if batch.is_empty() {
            return;
        }
        let class_of = |word: &u64| raw_fields(*word).1;
        batch.sort_unstable_by_key(class_of);
        let (mut freed, mut invalid) = (0, 0);
        for run in batch.chunk_by(|a, b| class_of(a) == class_of(b)) {
            let class = class_of(&run[0]);
            if class >= self.classes.len() || self.table.serving(class) != class {
                invalid += run.len() as u64;
                continue;
            }
            let mut emptied = Vec::new();
            {
                let mut state = self.lock(class);
                for &word in run {
                    let (slot, _, generation) = raw_fields(word);
                    let name = Name { slot, held: Held::Queued(generation), id: raw_id(self.pool_id, word) };
                    match state.free(&self.mm, &name) {
                        Ok(pages) => {
                            freed += 1;
                            emptied.extend(pages.into_iter().flatten());
                        }
                        Err(_) => invalid += 1,
                    }
                }
            }
            self.free_pages(emptied);
        }
        self.deferred.note_drained(freed, invalid);
    }
}

/// The pool's drain thread.
pub(crate) struct Worker {
    shared: Arc<WorkerShared>,
    thread: Option<JoinHandle<()>>,
}

struct WorkerShared {
    stop: AtomicBool,
    kicked: std::sync::Mutex<bool>,
    wake: Condvar,
}

impl Worker {
    /// Starts the drain thread of pool `inner` (it holds the pool weakly,
    /// so a pool is dropped even while its worker sleeps).
    pub(crate) fn start(inner: &Arc<Inner>) -> Self {
        let shared = Arc::new(WorkerShared {
            stop: AtomicBool::new(false),
            kicked: std::sync::Mutex::new(false),
            wake: Condvar::new(),
        });
        let (pool, me): (Weak<Inner>, _) = (Arc::downgrade(inner), shared.clone());
        let thread = std::thread::Builder::new()
            .name(format!("zs-free:{}", inner.name))
            .spawn(move || loop {
                {
                    let kicked = me.kicked.lock().unwrap_or_else(|p| p.into_inner());
                    let (mut kicked, _) = me
                        .wake
                        .wait_timeout_while(kicked, Duration::from_millis(100), |k| !*k && !me.stop.load(Relaxed))
                        .unwrap_or_else(|p| p.into_inner());
                    *kicked = false;
                }
                if me.stop.load(Relaxed) {
                    return;
                }
                match pool.upgrade() {
                    Some(inner) => inner.deferred_drain(inner.deferred.shard_capacity() / 2),
                    None => return,
                }
            })
            .ok();
        Self { shared, thread }
    }

    fn kick(&self) {
        *self.shared.kicked.lock().unwrap_or_else(|p| p.into_inner()) = true;
        self.shared.wake.notify_one();
    }

    /// Stops the thread and waits for it.
    pub(crate) fn stop(mut self) {
        self.shared.stop.store(true, Relaxed);
        self.kick();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl crate::ZsPool {
    /// Queues `handle` to be freed later and returns at once (Linux's
    /// `zs_free_deferred`): for callers on a latency-critical path. When
    /// the queue is busy or full the handle is freed now instead. The
    /// handle is consumed: it cannot be queued twice, nor used after.
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

    /// Frees every queued handle now (Linux's `zs_free_deferred_flush`).
    pub fn zs_free_deferred_flush(&self) {
        self.inner.deferred_flush();
    }

    /// Counters of the deferred free.
    pub fn deferred_stats(&self) -> DeferredStats {
        self.inner.deferred.stats()
    }
}

#[cfg(all(test, loom))]
mod loom_model {
    use super::*;
    use loom::sync::Arc;

    /// Two callers push while a drainer takes batches: every handle ends up
    /// either queued-then-taken or handed back for a synchronous free,
    /// exactly once, whatever the interleaving.
    #[test]
    fn every_handle_is_freed_exactly_once() {
        loom::model(|| {
            let queue = Arc::new(DeferredQueue::new(4, 2));
            let pushers: Vec<_> = (0..2u32)
                .map(|t| {
                    let queue = queue.clone();
                    loom::thread::spawn(move || {
                        let mut sync_freed = Vec::new();
                        for i in 0..2u32 {
                            // Both threads on shard 0 half the time: contention and a full shard.
                            if let Pushed::Fallback(h) = queue.try_push((t * i) as usize, u64::from(t * 2 + i)) {
                                sync_freed.push(h);
                            }
                        }
                        sync_freed
                    })
                })
                .collect();
            let drainer = {
                let queue = queue.clone();
                loom::thread::spawn(move || queue.take_all())
            };
            let mut seen: Vec<u64> = drainer.join().unwrap();
            for p in pushers {
                seen.extend(p.join().unwrap());
            }
            seen.extend(queue.take_all());
            seen.sort();
            let want: Vec<u64> = (0..4).collect();
            assert_eq!(seen, want);
        });
    }
}
