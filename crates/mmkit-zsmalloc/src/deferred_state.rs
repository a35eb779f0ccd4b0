//! What a pool keeps for its deferred free, below both the pool and the
//! deferred-free logic (`deferred`) that works on it: the queue with its
//! counters and the drain's buffers, the layout a pool is built with, and
//! the statistics type.
//!
//! Owns these types and the queue's sizes (batch length, the series'
//! queue floor); not what is done with a queued word, which is
//! `deferred`'s. Must not import the pool.

use crate::deferred_queue::BatchQueue;
use mmkit::PageBlock;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// Handles in one batch of the queue: 4 KiB of words.
pub(crate) const BATCH_LEN: usize = 512;
/// Batches the drain sorts and frees together.
pub(crate) const DRAIN_GROUP: usize = 8;

/// Handles worth 128 MiB of pages, the series' queue size: the queue's
/// cap in a small pool.
pub(crate) fn queue_floor(page_size: usize) -> usize {
    (128 << 20) / page_size
}

/// How the deferred-free queue is laid out; both designs of Linux's
/// series, to measure one against the other.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DeferredLayout {
    /// One shard per CPU of the page allocator, each filling its own
    /// batch (the series' third version's per-CPU buffers). The default.
    #[default]
    PerCpu,
    /// One shard for the pool (the series' second version's one queue):
    /// every CPU fills the same batch.
    PerPool,
}

/// Counters of the deferred free.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeferredStats {
    /// Handles queued.
    pub queued: u64,
    /// Calls that freed synchronously: the queue was at its cap.
    pub fallback: u64,
    /// Queued handles freed by a drain.
    pub drained: u64,
    /// Queued handles that were invalid when drained (freed twice, forged).
    pub invalid: u64,
}

/// What the drain reuses from one run to the next.
#[derive(Default)]
pub(crate) struct DrainBuffers {
    pub(crate) ids: Vec<u32>,
    pub(crate) words: Vec<u64>,
    pub(crate) sorted: Vec<u64>,
    pub(crate) touched: Vec<u32>,
    pub(crate) pages: Vec<PageBlock>,
}

/// The queue and the drain's state.
pub(crate) struct DeferredQueue {
    pub(crate) batches: BatchQueue,
    /// Full batches that wake the worker at the least: half the series'
    /// 128 MiB of handles (Linux's `zs_free_deferred` schedules its drain
    /// when the array is half full); in a pool whose cap is larger, half
    /// the cap.
    pub(crate) wake_at: usize,
    /// Held for a whole drain, so that a flush waits for the worker's
    /// drain in progress (Linux's `flush_work`): after a flush every handle
    /// queued before it is freed.
    pub(crate) draining: Mutex<DrainBuffers>,
    pub(crate) drained: AtomicU64,
    pub(crate) invalid: AtomicU64,
}

impl DeferredQueue {
    /// A queue of `shards` shards.
    pub(crate) fn new(shards: usize, page_size: usize) -> Self {
        Self {
            batches: BatchQueue::new(shards, BATCH_LEN),
            wake_at: (queue_floor(page_size).div_ceil(BATCH_LEN) / 2).max(1),
            draining: Mutex::new(DrainBuffers::default()),
            drained: AtomicU64::new(0),
            invalid: AtomicU64::new(0),
        }
    }

    pub(crate) fn stats(&self) -> DeferredStats {
        let (queued, fallback) = self.batches.counts();
        DeferredStats { queued, fallback, drained: self.drained.load(Relaxed), invalid: self.invalid.load(Relaxed) }
    }
}
