//! The deferred-free queue itself, without the pool: per-CPU batches of
//! queued words, filled without a lock and handed whole to the drain, as
//! the kernel gathers work in an `llist` of batches.
//!
//! Owns the batches, the shards that fill them, the stack of full batches
//! waiting for the drain and the stack of empty ones. Knows nothing of
//! classes or pages: a word is an opaque `u64` here, and what to do with
//! one that cannot be queued (the queue at its cap, or `u64::MAX`, which
//! a slot cannot tell from an unwritten one) is the caller's.
//!
//! # The protocol
//!
//! A *batch* is a fixed array of `batch_len` words. Each shard (one per
//! CPU of the page allocator) has one word of state, `[batch id | words
//! reserved]`, naming the batch being filled or none. A push reserves the
//! next word by one compare-and-swap of that state and writes its word
//! (stored as `word + 1`: a slot of an empty batch is 0, so a slot that
//! is not 0 is written); that compare-and-swap is the push's one atomic
//! read-modify-write. The push that reserves the last word also *seals*
//! the batch: its compare-and-swap leaves the shard with no batch, and it
//! pushes the batch on the stack of full ones. A push
//! that finds no batch takes an empty one (from the stack of empty
//! batches, or a new one while the queue is under its cap), writes its
//! word first, and installs it with one compare-and-swap; when another
//! push installed one meanwhile it gives its batch back and tries again.
//! No push waits for another: every step is one atomic operation on a
//! word that a failed compare-and-swap only re-reads.
//!
//! The drain takes the whole stack of full batches with one swap (the
//! `llist_del_all` of the kernel's lists, so neither stack's take suffers
//! ABA; the empty stack's single pops carry a tag that every pop bumps).
//! A batch sealed while some of its pushes are still writing reaches the
//! drain with some of its slots still 0: the drain waits for each slot to
//! be written (those pushes write within a few instructions of their
//! reservation) before it reads it, and clears it after, so that a batch
//! goes back to the empty stack all zeroes. A flush also seals every
//! shard's partial batch (one
//! compare-and-swap of the shard's state: the batch leaves the shard with
//! the words reserved so far) and waits until no push is between sealing
//! a batch and pushing it on the full stack, so that every word whose push
//! returned before the flush began is drained by it.
//!
//! # Bound and worst case
//!
//! The queue makes at most `cap` batches (the caller computes the cap at
//! each new batch: the pool's is in `deferred`), reuses them for the
//! pool's life and never frees one before the pool goes. A push falls back
//! (the caller frees synchronously) only when its shard has no batch, no
//! empty batch is left and `cap` batches exist: then `cap × batch_len`
//! words are queued or being drained. Memory: `cap` batches of `batch_len`
//! words, plus a header of 12 bytes per batch.
//! Every queued word names a distinct live object, so the queue never
//! holds more words than the pool has objects.

#[cfg(loom)]
use loom::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize};
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize};
use std::sync::OnceLock;

/// No batch: a shard's state without one, the end of a stack.
const NONE: u32 = u32::MAX;
/// Chunks of the batch table: chunk `k` has `2^k` batches, enough for
/// every id below `NONE`.
const NR_CHUNKS: usize = 32;

/// One batch: `len` words (the batch's length unless a drain sealed it
/// early), written by the pushes that reserved them, each as `word + 1`
/// (0: not written yet).
struct Batch {
    words: OnceLock<Box<[AtomicU64]>>,
    /// Words the batch holds, set when it is sealed.
    len: AtomicU32,
    /// The next batch on the stack this one is on.
    next: AtomicU32,
}

impl Batch {
    fn new() -> Self {
        Self { words: OnceLock::new(), len: AtomicU32::new(0), next: AtomicU32::new(NONE) }
    }
}

/// Batches by id, at addresses that never change: chunk `k` holds ids
/// `2^k - 1 .. 2^(k+1) - 1`, made when the first of them is.
struct BatchTable {
    chunks: [OnceLock<Box<[Batch]>>; NR_CHUNKS],
    batch_len: usize,
}

impl BatchTable {
    fn locate(id: u32) -> (usize, usize) {
        let v = u64::from(id) + 1;
        let top = 63 - v.leading_zeros() as usize;
        (top, (v - (1 << top)) as usize)
    }

    /// Batch `id`, made (empty) if it was not yet.
    fn get(&self, id: u32) -> &Batch {
        let (chunk, at) = Self::locate(id);
        let batches = self.chunks[chunk].get_or_init(|| (0..1usize << chunk).map(|_| Batch::new()).collect());
        &batches[at]
    }

    /// The words of `batch`, one of this table's.
    fn words_of<'a>(&self, batch: &'a Batch) -> &'a [AtomicU64] {
        batch.words.get_or_init(|| (0..self.batch_len).map(|_| AtomicU64::new(0)).collect())
    }
}

/// A shard's state word: `[batch id:32 | words reserved:32]`.
fn state(id: u32, reserved: u32) -> u64 {
    u64::from(id) << 32 | u64::from(reserved)
}

fn split(word: u64) -> (u32, u32) {
    ((word >> 32) as u32, word as u32)
}

/// One CPU's part of the queue and its counters, on its own cache lines,
/// so that pushes from different CPUs share no line.
#[repr(align(128))]
struct Shard {
    /// The batch being filled and the words reserved in it.
    state: AtomicU64,
    /// Words of the batches this shard sealed (the queue's `queued` count
    /// is these and the words reserved in `state`).
    sealed: AtomicU64,
    fallback: AtomicU64,
}

/// What a push did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Pushed {
    /// Queued; `sealed` when the push sealed a full batch (the drain has
    /// work).
    Queued { sealed: bool },
    /// Not queued (no empty batch, and the cap reached): the caller frees
    /// it now.
    Fallback(u64),
}

/// The queue: shards, batches, the stacks of full and empty batches.
pub(crate) struct BatchQueue {
    shards: Box<[Shard]>,
    table: BatchTable,
    batch_len: u32,
    /// Batches made so far: ids `0..made`.
    made: AtomicU32,
    /// Full (sealed) batches for the drain, newest first; `NONE`: empty.
    full: AtomicU32,
    /// Batches on `full`.
    pending: AtomicUsize,
    /// Empty batches, `[pop tag:32 | top id:32]`.
    empty: AtomicU64,
    /// Pushes between sealing a batch and putting it on `full`.
    sealing: AtomicUsize,
    /// A step of the protocol left out, for the loom models that must fail.
    #[cfg(loom)]
    broken: Broken,
}

/// Steps of the protocol the loom models leave out, one at a time, to show
/// that each is needed (each broken model must fail).
#[cfg(loom)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Broken {
    /// The protocol as written.
    Nothing,
    /// The drain reads a sealed batch without waiting for the pushes
    /// still writing into it.
    ReadBeforeWritten,
    /// A flush does not wait for pushes between sealing a batch and
    /// putting it on the full stack.
    FlushIgnoresSealers,
}

impl BatchQueue {
    /// A queue of `shards` shards and batches of `batch_len` words (at
    /// least 2).
    pub(crate) fn new(shards: usize, batch_len: usize) -> Self {
        let batch_len = batch_len.clamp(2, u32::MAX as usize / 2);
        let shard =
            || Shard { state: AtomicU64::new(state(NONE, 0)), sealed: AtomicU64::new(0), fallback: AtomicU64::new(0) };
        Self {
            shards: (0..shards.max(1)).map(|_| shard()).collect(),
            table: BatchTable { chunks: std::array::from_fn(|_| OnceLock::new()), batch_len },
            batch_len: batch_len as u32,
            made: AtomicU32::new(0),
            full: AtomicU32::new(NONE),
            pending: AtomicUsize::new(0),
            empty: AtomicU64::new(state(0, NONE)),
            sealing: AtomicUsize::new(0),
            #[cfg(loom)]
            broken: Broken::Nothing,
        }
    }

    /// The queue with one step of its protocol left out.
    #[cfg(loom)]
    pub(crate) fn broken(shards: usize, batch_len: usize, broken: Broken) -> Self {
        Self { broken, ..Self::new(shards, batch_len) }
    }

    #[cfg(loom)]
    fn is_broken(&self, step: Broken) -> bool {
        self.broken == step
    }

    #[cfg(not(loom))]
    fn is_broken(&self, _: Broken) -> bool {
        false
    }

    /// Batches made so far.
    #[cfg(all(test, not(loom)))]
    pub(crate) fn batches_made(&self) -> usize {
        self.made.load(Relaxed) as usize
    }

    /// Full batches waiting for the drain.
    pub(crate) fn pending(&self) -> usize {
        self.pending.load(SeqCst)
    }

    /// Queues `word` on shard `cpu`; never waits. `cap` gives the most
    /// batches the queue may have, asked only when it needs a new one.
    #[inline]
    pub(crate) fn push(&self, cpu: usize, word: u64, cap: impl FnOnce() -> usize) -> Pushed {
        let shard = &self.shards[fold(cpu, self.shards.len())];
        if word == u64::MAX {
            shard.fallback.fetch_add(1, Relaxed);
            return Pushed::Fallback(word);
        }
        let mut cap = Some(cap);
        let mut current = shard.state.load(Acquire);
        loop {
            let (id, reserved) = split(current);
            if id == NONE {
                match self.install(shard, current, word, &mut cap) {
                    Ok(()) => return Pushed::Queued { sealed: false },
                    Err(Some(now)) => {
                        current = now;
                        continue;
                    }
                    Err(None) => {
                        shard.fallback.fetch_add(1, Relaxed);
                        return Pushed::Fallback(word);
                    }
                }
            }
            let last = reserved + 1 == self.batch_len;
            // The push that takes the last word seals the batch: the shard
            // is left without one.
            let next = if last { state(NONE, 0) } else { current + 1 };
            if last {
                self.sealing.fetch_add(1, AcqRel);
            }
            match shard.state.compare_exchange_weak(current, next, AcqRel, Acquire) {
                Ok(_) => {
                    self.write(id, reserved, word);
                    if last {
                        self.seal(shard, id, self.batch_len);
                        self.sealing.fetch_sub(1, AcqRel);
                    }
                    return Pushed::Queued { sealed: last };
                }
                Err(now) => {
                    if last {
                        self.sealing.fetch_sub(1, AcqRel);
                    }
                    current = now;
                }
            }
        }
    }

    /// Writes `word` into word `at` of batch `id`, which the caller
    /// reserved.
    #[inline]
    fn write(&self, id: u32, at: u32, word: u64) {
        let batch = self.table.get(id);
        self.table.words_of(batch)[at as usize].store(word.wrapping_add(1), Release);
    }

    /// Puts batch `id`, which the caller took out of `shard` with `len`
    /// words reserved, on the full stack.
    fn seal(&self, shard: &Shard, id: u32, len: u32) {
        self.table.get(id).len.store(len, Relaxed);
        shard.sealed.fetch_add(u64::from(len), Relaxed);
        self.push_full(id);
    }

    /// Queues `words` on shard `cpu`, as many calls of
    /// [`push`](Self::push) would, but reserving as many words as the
    /// shard's batch has room for with one compare-and-swap (a slot table
    /// releasing a run of its slots). Returns how many were queued: the
    /// first ones; the rest found the queue at its cap (or start with a
    /// `u64::MAX`), for the caller to free. `sealed` is set when the call
    /// sealed a batch.
    pub(crate) fn push_many(&self, cpu: usize, words: &[u64], cap: impl Fn() -> usize, sealed: &mut bool) -> usize {
        let shard = &self.shards[fold(cpu, self.shards.len())];
        let all = words;
        let words = &all[..all.iter().position(|&w| w == u64::MAX).unwrap_or(all.len())];
        let mut done = 0;
        let mut current = shard.state.load(Acquire);
        while done < words.len() {
            let (id, reserved) = split(current);
            if id == NONE {
                match self.install(shard, current, words[done], &mut Some(&cap)) {
                    Ok(()) => {
                        done += 1;
                        current = shard.state.load(Acquire);
                    }
                    Err(Some(now)) => current = now,
                    Err(None) => break,
                }
                continue;
            }
            let room = self.batch_len - reserved;
            let n = room.min((words.len() - done).min(u32::MAX as usize) as u32);
            let last = n == room;
            // A run that takes the batch's last word seals it, as one
            // push does.
            let next = if last { state(NONE, 0) } else { current + u64::from(n) };
            if last {
                self.sealing.fetch_add(1, AcqRel);
            }
            match shard.state.compare_exchange_weak(current, next, AcqRel, Acquire) {
                Ok(_) => {
                    let batch = self.table.get(id);
                    let dst = &self.table.words_of(batch)[reserved as usize..][..n as usize];
                    for (slot, &word) in dst.iter().zip(&words[done..]) {
                        slot.store(word.wrapping_add(1), Release);
                    }
                    done += n as usize;
                    if last {
                        self.seal(shard, id, self.batch_len);
                        self.sealing.fetch_sub(1, AcqRel);
                        *sealed = true;
                        current = shard.state.load(Acquire);
                    } else {
                        current = next;
                    }
                }
                Err(now) => {
                    if last {
                        self.sealing.fetch_sub(1, AcqRel);
                    }
                    current = now;
                }
            }
        }
        if done < all.len() {
            shard.fallback.fetch_add((all.len() - done) as u64, Relaxed);
        }
        done
    }

    /// Installs a new batch holding `word` in `shard`, whose state was
    /// `seen` (no batch). `Err(Some(state))`: another push changed the
    /// state first (the batch went back); `Err(None)`: no batch to be had.
    fn install(
        &self,
        shard: &Shard,
        seen: u64,
        word: u64,
        cap: &mut Option<impl FnOnce() -> usize>,
    ) -> Result<(), Option<u64>> {
        let id = self.take_empty(cap).ok_or(None)?;
        let first = &self.table.words_of(self.table.get(id))[0];
        first.store(word.wrapping_add(1), Release);
        match shard.state.compare_exchange(seen, state(id, 1), AcqRel, Acquire) {
            Ok(_) => Ok(()),
            Err(now) => {
                // An empty batch is all zeroes.
                first.store(0, Relaxed);
                self.push_empty(id);
                Err(Some(now))
            }
        }
    }

    /// An empty batch: one from the empty stack, else a new one while
    /// fewer than the cap exist.
    fn take_empty(&self, cap: &mut Option<impl FnOnce() -> usize>) -> Option<u32> {
        let mut top = self.empty.load(Acquire);
        loop {
            let (tag, id) = split(top);
            if id == NONE {
                break;
            }
            // A stale `next` (the batch popped and pushed back meanwhile)
            // fails the swap: every pop bumps the tag.
            let next = self.table.get(id).next.load(Relaxed);
            match self.empty.compare_exchange_weak(top, state(tag.wrapping_add(1), next), AcqRel, Acquire) {
                Ok(_) => return Some(id),
                Err(now) => top = now,
            }
        }
        let cap = (cap.take()?)().min(NONE as usize) as u32;
        let id = self.made.fetch_update(AcqRel, Acquire, |made| (made < cap).then_some(made + 1)).ok()?;
        Some(id)
    }

    /// Puts empty batch `id` on the empty stack.
    fn push_empty(&self, id: u32) {
        let batch = self.table.get(id);
        let mut top = self.empty.load(Acquire);
        loop {
            let (tag, next) = split(top);
            batch.next.store(next, Relaxed);
            match self.empty.compare_exchange_weak(top, state(tag, id), AcqRel, Acquire) {
                Ok(_) => return,
                Err(now) => top = now,
            }
        }
    }

    /// Puts sealed batch `id` on the full stack.
    fn push_full(&self, id: u32) {
        let batch = self.table.get(id);
        let mut top = self.full.load(Acquire);
        loop {
            batch.next.store(top, Relaxed);
            match self.full.compare_exchange_weak(top, id, AcqRel, Acquire) {
                Ok(_) => break,
                Err(now) => top = now,
            }
        }
        // Sequentially consistent, as the worker's check of it after it
        // says it is asleep: one of the two sees the other.
        self.pending.fetch_add(1, SeqCst);
    }

    /// Seals every shard's partial batch and puts it on the full stack,
    /// then waits until no push is between sealing a batch and putting it
    /// there: afterwards every word whose push returned before this call
    /// is on the full stack (or was taken by a drain before).
    pub(crate) fn seal_partial(&self) {
        for shard in self.shards.iter() {
            let mut current = shard.state.load(Acquire);
            loop {
                let (id, reserved) = split(current);
                if id == NONE {
                    break;
                }
                match shard.state.compare_exchange(current, state(NONE, 0), AcqRel, Acquire) {
                    Ok(_) => {
                        self.seal(shard, id, reserved);
                        break;
                    }
                    Err(now) => current = now,
                }
            }
        }
        while self.sealing.load(Acquire) != 0 && !self.is_broken(Broken::FlushIgnoresSealers) {
            yield_now();
        }
    }

    /// Takes every full batch, oldest first, into `out` (cleared first).
    /// The caller is the only drain (it holds the pool's drain lock) and
    /// reads them with [`read`](Self::read), then gives them back with
    /// [`recycle`](Self::recycle).
    pub(crate) fn take_full(&self, out: &mut Vec<u32>) {
        out.clear();
        let mut id = self.full.swap(NONE, AcqRel);
        while id != NONE {
            out.push(id);
            id = self.table.get(id).next.load(Relaxed);
        }
        self.pending.fetch_sub(out.len(), Relaxed);
        out.reverse();
    }

    /// Appends the words of taken batch `id` to `out`, each once the push
    /// that reserved it has written it, and clears them (an empty batch is
    /// all zeroes).
    pub(crate) fn read(&self, id: u32, out: &mut Vec<u64>) {
        let batch = self.table.get(id);
        let len = batch.len.load(Relaxed) as usize;
        for slot in &self.table.words_of(batch)[..len] {
            let mut value = slot.load(Acquire);
            while value == 0 && !self.is_broken(Broken::ReadBeforeWritten) {
                yield_now();
                value = slot.load(Acquire);
            }
            slot.store(0, Relaxed);
            out.push(value.wrapping_sub(1));
        }
    }

    /// Gives taken batch `id`, read, back to the empty stack.
    pub(crate) fn recycle(&self, id: u32) {
        self.push_empty(id);
    }

    /// Words queued (those of sealed batches, and those reserved in the
    /// batches being filled) and pushes that fell back, summed over the
    /// shards.
    pub(crate) fn counts(&self) -> (u64, u64) {
        let queued =
            self.shards.iter().map(|s| s.sealed.load(Relaxed) + u64::from(split(s.state.load(Acquire)).1)).sum();
        let fallback = self.shards.iter().map(|s| s.fallback.load(Relaxed)).sum();
        (queued, fallback)
    }
}

/// Shard of CPU `cpu` among `shards`: the CPU itself, unless the page
/// allocator has more CPUs than the queue has shards (a per-pool queue).
#[inline]
fn fold(cpu: usize, shards: usize) -> usize {
    if cpu < shards {
        cpu
    } else {
        cpu % shards
    }
}

/// Outside loom the protocol is never broken: one variant, never chosen.
#[cfg(not(loom))]
#[derive(Clone, Copy)]
enum Broken {
    ReadBeforeWritten,
    FlushIgnoresSealers,
}

fn yield_now() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::yield_now();
}

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_model;
