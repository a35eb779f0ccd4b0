//! Objects held as raw words: the calls of a pool made with
//! [`ZsPool::with_raw_key`], for a slot table that keeps one word per
//! object (zram's). Each takes the pool's [`RawKey`] and a word, and is the
//! word's twin of a [`Handle`] call.
//!
//! Owns the conversions between handles and words and the raw variants of
//! the object calls; why a word is safe to accept without `unsafe` (the
//! key, the holder recorded per object, generations that retire instead
//! of wrapping) is argued in the handle module's documentation. Every call
//! refuses a word that names no object held as a raw word now: another
//! pool's key, a word freed, queued for a deferred free or turned back
//! into a handle already, and a stale word of a slot reused since.
//!
//! The calls that only change who holds an object (a handle to a word and
//! back, and the deferred free, which takes the object from its word for
//! the queue) take no class lock: each is one compare-and-swap of the
//! slot's state word (`slot_state`), so of two calls with one word exactly
//! one wins and the other is refused at the call. The one exception is
//! `zs_free_deferred_raw_many_drain_checked`, for a slot table releasing
//! words it just took out of its own slots: it queues them unlooked-at, and
//! the drain checks each as a synchronous free would (a word that went
//! stale meanwhile is counted and changes nothing).

use crate::handle::{raw_fields, raw_word, Handle, RawKey, RAW_GEN_LIMIT};
use crate::size_class::{Held, Name};
use crate::slot_state::{state, SlotEntry, HANDLE, QUEUED, RAW};
use crate::{ZsError, ZsPool};
use mmkit::Gfp;

impl ZsPool {
    /// Hands `handle`'s object to a raw word under `key` (as
    /// `Box::into_raw`): from now on only the raw calls reach it.
    ///
    /// # Errors
    /// [`ZsError::InvalidHandle`] for a key or handle of another pool;
    /// then nothing changed and the handle comes back with the error.
    pub fn zs_handle_into_raw(&self, key: &RawKey, handle: Handle) -> Result<u64, (ZsError, Handle)> {
        let (class, name) = match self.inner.name_of(&handle) {
            Ok(name) if key.pool == self.inner.pool_id && self.inner.raw_keyed => name,
            Ok((_, name)) => return Err((ZsError::InvalidHandle(name.id), handle)),
            Err(e) => return Err((e, handle)),
        };
        // A raw-keyed pool's generations are below the limit: the state
        // word holds all of it.
        let generation = handle.generation();
        if generation < RAW_GEN_LIMIT
            && self.inner.states[class].swap_if(name.slot, state(HANDLE, generation), state(RAW, generation))
        {
            Ok(raw_word(name.slot, class, generation))
        } else {
            Err((ZsError::InvalidHandle(name.id), handle))
        }
    }

    /// Takes the object `word` names back into a [`Handle`] (as
    /// `Box::from_raw`, but checked): the word is spent.
    ///
    /// # Errors
    /// [`ZsError::InvalidHandle`] when `word` names no object held as a
    /// raw word under `key` now (freed, queued, taken back already, stale,
    /// forged, or of another pool).
    pub fn zs_handle_from_raw(&self, key: &RawKey, word: u64) -> Result<Handle, ZsError> {
        let (class, name, generation) = self.take_word(key, word, HANDLE)?;
        Ok(Handle::new(self.inner.pool_id, name.slot as u32, class, generation))
    }

    /// [`zs_malloc_copy`](Self::zs_malloc_copy), the object held as a raw
    /// word under `key` from the start (no second lock round trip).
    ///
    /// # Errors
    /// As `zs_malloc_copy`; [`ZsError::InvalidHandle`] for another pool's
    /// key.
    pub fn zs_malloc_copy_raw(&self, key: &RawKey, data: &[u8], gfp: Gfp, nid: usize) -> Result<u64, ZsError> {
        self.check_key(key)?;
        let (class, new) = self.inner.malloc(data.len(), Some(data), gfp, nid, true)?;
        Ok(raw_word(new.slot as usize, class, new.generation))
    }

    /// [`zs_replace`](Self::zs_replace) of the object `old` names; the new
    /// object is held as a raw word too.
    ///
    /// # Errors
    /// As `zs_replace`; then `old` still names its object.
    pub fn zs_replace_raw(&self, key: &RawKey, old: u64, data: &[u8], gfp: Gfp, nid: usize) -> Result<u64, ZsError> {
        let name = self.inner.name_of_raw(key, old)?;
        let (class, new) = self.inner.replace(name, data, gfp, nid, true)?;
        Ok(raw_word(new.slot as usize, class, new.generation))
    }

    /// [`zs_free`](Self::zs_free) of the object `word` names: the word is
    /// spent.
    ///
    /// # Errors
    /// [`ZsError::InvalidHandle`] as for
    /// [`zs_handle_from_raw`](Self::zs_handle_from_raw); nothing changes.
    pub fn zs_free_raw(&self, key: &RawKey, word: u64) -> Result<(), ZsError> {
        let (class, name) = self.inner.name_of_raw(key, word)?;
        self.inner.free(class, &name)
    }

    /// [`zs_free_deferred`](Self::zs_free_deferred) of the object `word`
    /// names: checked and taken from the word now, freed later. A word
    /// already freed or queued is refused here, at the call, which takes
    /// no class lock (one compare-and-swap of the object's state word; the
    /// drain frees it under the lock).
    ///
    /// # Errors
    /// [`ZsError::InvalidHandle`] as for
    /// [`zs_handle_from_raw`](Self::zs_handle_from_raw); nothing changes.
    pub fn zs_free_deferred_raw(&self, key: &RawKey, word: u64) -> Result<(), ZsError> {
        let (class, name, generation) = self.take_word(key, word, QUEUED)?;
        let queued = Name { held: Held::Queued(generation), ..name };
        let queued_now = self.inner.queue_taken(class, &queued, word, self.worker.as_ref());
        if queued_now.is_err() {
            // The synchronous fallback was refused: the word keeps its
            // object, as the error says nothing changed.
            self.give_back(class, name.slot, generation);
        }
        queued_now
    }

    /// Hands a queued object back to its raw word (a deferred free whose
    /// fallback was refused).
    #[cold]
    #[inline(never)]
    fn give_back(&self, class: usize, slot: usize, generation: u64) {
        self.inner.states[class].swap_if(slot, state(QUEUED, generation), state(RAW, generation));
    }

    /// [`zs_free_deferred_raw_many`](Self::zs_free_deferred_raw_many)
    /// for a slot table that took `words` out of its own slots: the words
    /// are queued as they are, with no look at their objects now, and each
    /// is checked when drained, as a synchronous free would check it. The
    /// caller's cost is the queue's and nothing else: no object's slot
    /// entry is read or changed, so a release touches only the caller's
    /// own table and the queue (the slot-free notification of zram's
    /// release path, `release/256MiB` of `mmkit bench zram`).
    ///
    /// A word that names nothing the key holder may free when it is drained
    /// (freed or replaced since, queued twice, stale, forged) is counted in
    /// [`DeferredStats::invalid`](crate::DeferredStats::invalid) and
    /// changes nothing; a word turned back into a
    /// [`Handle`] before the drain is left to the handle. Until the drain,
    /// the object is still the word's: reads of it work, and a free of it
    /// makes the queued word stale. Returns how many words were refused at
    /// the call: every one for another pool's key, and words that could
    /// name no object (0, or of a class that serves none).
    pub fn zs_free_deferred_raw_many_drain_checked(&self, key: &RawKey, words: &[u64]) -> usize {
        if self.check_key(key).is_err() {
            return words.len();
        }
        // Words the queue cannot tell from an empty slot (`u64::MAX`), or
        // that cannot name an object, are refused here; the rest go to the
        // queue together, a run of well-formed words at a time.
        let plausible = |word: u64| word != 0 && word != u64::MAX && self.inner.serves(raw_fields(word).1);
        let mut refused = 0;
        let mut rest = words;
        while !rest.is_empty() {
            let run = rest.iter().position(|&w| !plausible(w)).unwrap_or(rest.len());
            if run > 0 {
                self.inner.queue_taken_many(&rest[..run], self.worker.as_ref());
            }
            refused += usize::from(run < rest.len());
            rest = rest.get(run + 1..).unwrap_or(&[]);
        }
        refused
    }

    /// [`zs_free_deferred_raw`](Self::zs_free_deferred_raw) of every word
    /// in `words`, as a slot table releasing a run of its slots sends
    /// them: each word is checked and taken from its object as one call
    /// would (a refused word changes nothing), and the taken ones are
    /// queued together, with one reservation of the calling CPU's batch
    /// for as many as it has room for instead of one a word. Returns how
    /// many words were refused.
    pub fn zs_free_deferred_raw_many(&self, key: &RawKey, words: &[u64]) -> usize {
        if self.check_key(key).is_err() {
            return words.len();
        }
        // Taken words gather here and go to the queue a run at a time.
        let mut taken = [0u64; 64];
        let (mut n, mut refused) = (0, 0);
        for block in words.chunks(16) {
            // The entries first, each read once: plain loads overlap their
            // cache misses, where each compare-and-swap would wait for its
            // own (a locked instruction orders the loads around it).
            let mut entries: [Option<&SlotEntry>; 16] = [None; 16];
            for (entry, &word) in entries.iter_mut().zip(block) {
                let (slot, class, _) = raw_fields(word);
                *entry = self
                    .inner
                    .states
                    .get(class)
                    .filter(|_| word != 0 && self.inner.serves(class))
                    .and_then(|s| s.get(slot));
                if let Some(e) = entry {
                    std::hint::black_box(e.state());
                }
            }
            for (entry, &word) in entries.iter().zip(block) {
                let generation = raw_fields(word).2;
                if entry.is_some_and(|e| e.swap(state(RAW, generation), state(QUEUED, generation))) {
                    taken[n] = word;
                    n += 1;
                    if n == taken.len() {
                        self.inner.queue_taken_many(&taken, self.worker.as_ref());
                        n = 0;
                    }
                } else {
                    refused += 1;
                }
            }
        }
        if n > 0 {
            self.inner.queue_taken_many(&taken[..n], self.worker.as_ref());
        }
        refused
    }

    /// [`zs_obj_read`](Self::zs_obj_read) of the object `word` names.
    ///
    /// # Errors
    /// As `zs_obj_read`.
    pub fn zs_obj_read_raw(&self, key: &RawKey, word: u64, out: &mut [u8]) -> Result<usize, ZsError> {
        self.inner.read_into(self.inner.name_of_raw(key, word)?, out)
    }

    /// [`zs_obj_read_with`](Self::zs_obj_read_with) of the object `word`
    /// names.
    ///
    /// # Errors
    /// As `zs_obj_read_with`.
    pub fn zs_obj_read_with_raw<R>(
        &self,
        key: &RawKey,
        word: u64,
        local_copy: &mut [u8],
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, ZsError> {
        self.inner.read_with(self.inner.name_of_raw(key, word)?, local_copy, f)
    }

    /// [`zs_obj_write`](Self::zs_obj_write) of the object `word` names.
    ///
    /// # Errors
    /// As `zs_obj_write`.
    pub fn zs_obj_write_raw(&self, key: &RawKey, word: u64, data: &[u8]) -> Result<(), ZsError> {
        self.inner.write(self.inner.name_of_raw(key, word)?, data)
    }

    /// Takes the object `word` names from the word, handing it to holder
    /// `to` (a handle, or the deferred queue), without the class lock: one
    /// compare-and-swap of its state word from "raw-held, of the word's
    /// generation". Returns its class, name and generation (all of it, in
    /// a raw-keyed pool).
    #[inline]
    fn take_word(&self, key: &RawKey, word: u64, to: u32) -> Result<(usize, Name, u64), ZsError> {
        let (class, name) = self.inner.name_of_raw(key, word)?;
        let Held::Raw(generation) = name.held else { return Err(ZsError::InvalidHandle(name.id)) };
        if self.inner.states[class].swap_if(name.slot, state(RAW, generation), state(to, generation)) {
            Ok((class, name, generation))
        } else {
            Err(ZsError::InvalidHandle(name.id))
        }
    }

    fn check_key(&self, key: &RawKey) -> Result<(), ZsError> {
        if key.pool == self.inner.pool_id && self.inner.raw_keyed {
            Ok(())
        } else {
            Err(ZsError::InvalidHandle(crate::handle::raw_id(key.pool, 0)))
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::{ZsConfig, ZsError, ZsPool};
    use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder};
    use std::sync::Arc;

    fn pool() -> (ZsPool, crate::RawKey) {
        let mm = Arc::new(
            MemoryMapBuilder::with_memory(16 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap(),
        );
        ZsPool::with_raw_key("raw", mm, ZsConfig::default()).unwrap()
    }

    #[test]
    fn a_slot_at_the_raw_generation_limit_is_retired_not_wrapped() {
        let (pool, key) = pool();
        let gfp = Gfp::NOIO;
        let w = pool.zs_malloc_copy_raw(&key, &[1; 100], gfp, 0).unwrap();
        let class = pool.zs_lookup_class_index(100);
        pool.zs_free_raw(&key, w).unwrap();
        // Slot 0 is free now: put it one free short of the limit.
        pool.inner.lock(class).set_generation(0, crate::handle::RAW_GEN_LIMIT - 1);
        let last = pool.zs_malloc_copy_raw(&key, &[2; 100], gfp, 0).unwrap();
        assert_eq!(crate::handle::raw_fields(last), (0, class, crate::handle::RAW_GEN_LIMIT - 1));
        pool.zs_free_raw(&key, last).unwrap();
        let next = pool.zs_malloc_copy_raw(&key, &[3; 100], gfp, 0).unwrap();
        assert_eq!(crate::handle::raw_fields(next).0, 1, "slot 0 is retired, the next object takes slot 1");
        assert_eq!(pool.zs_free_raw(&key, last).map_err(|_| ()), Err(()));
        assert!(matches!(pool.zs_obj_read_raw(&key, w, &mut [0; 4096]), Err(ZsError::InvalidHandle(_))));
        pool.zs_free_raw(&key, next).unwrap();
        pool.check_invariants().unwrap();
    }

    /// The owned-handle and raw-word paths end to end on a small map, for
    /// Miri too (`.ci/run`): every byte copy into and out of zspages, both
    /// replace paths, the deferred queue and its drain, and the refusals.
    #[test]
    fn owned_handles_and_raw_words_end_to_end() {
        let (pool, key) = pool();
        let other = ZsPool::zs_create_pool("other", pool.allocator().clone()).unwrap();
        let gfp = Gfp::NOIO;
        let mut out = [0u8; 4096];
        let h = pool.zs_malloc_copy(&[1; 700], gfp, 0).unwrap();
        pool.zs_obj_write(&h, &[2; 10]).unwrap();
        assert_eq!(pool.zs_obj_read(&h, &mut out), Ok(700));
        assert_eq!((out[0], out[10]), (2, 1));
        // Same class, then across classes (a straddling object among them).
        let h = pool.zs_replace(h, &[3; 690], gfp, 0).map_err(|(e, _)| e).unwrap();
        let h = pool.zs_replace(h, &[4; 3000], gfp, 0).map_err(|(e, _)| e).unwrap();
        assert!(pool.zs_obj_read_with(&h, &mut out, |b| b.iter().all(|&x| x == 4)).unwrap());
        let id = h.id();
        assert_eq!(other.zs_obj_read(&h, &mut out), Err(ZsError::InvalidHandle(id)));
        let w = pool.zs_handle_into_raw(&key, h).unwrap();
        assert_eq!(pool.zs_obj_read_raw(&key, w, &mut out), Ok(3000));
        let w = pool.zs_replace_raw(&key, w, &[5; 100], gfp, 0).unwrap();
        let h = pool.zs_handle_from_raw(&key, w).unwrap();
        assert!(matches!(pool.zs_free_raw(&key, w), Err(ZsError::InvalidHandle(_))));
        pool.zs_free_deferred(h).unwrap();
        let w = pool.zs_malloc_copy_raw(&key, &[6; 1500], gfp, 0).unwrap();
        pool.zs_free_deferred_raw(&key, w).unwrap();
        assert!(matches!(pool.zs_free_deferred_raw(&key, w), Err(ZsError::InvalidHandle(_))));
        pool.zs_free_deferred_flush();
        assert_eq!((pool.deferred_stats().invalid, pool.zs_get_total_pages()), (0, 0));
        pool.check_invariants().unwrap();
    }
}
