//! The swap device around the cache: what a pager calls (Linux's
//! `folio_alloc_swap`, `swap_writepage`, `swap_read_folio`, `swap_free`,
//! and the exit path's `free_swap_and_cache_nr`), each offering the page to
//! zswap first and using the swap file when zswap has no entry or refuses
//! one.
//!
//! Owns the order of those calls only; entries are `zswap.rs`'s, slots
//! the swap file's.

use crate::tree::Stored;
use crate::zswap::ReleaseMode;
use crate::{SwpEntry, Zswap, ZswapError, PAGE_SIZE};
use std::sync::atomic::Ordering::Relaxed;

/// Whether [`Zswap::swap_in`] keeps the zswap entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeepEntry {
    /// Keep it: the page may be dropped again without recompression while
    /// it stays clean.
    Keep,
    /// Drop it (an exclusive load).
    Drop,
}

impl Zswap {
    /// A free slot of the swap file, now the caller's (Linux's
    /// `folio_alloc_swap`).
    ///
    /// # Errors
    /// [`ZswapError::SwapFull`].
    pub fn alloc_swap_slot(&self) -> Result<SwpEntry, ZswapError> {
        self.file.alloc_slot().map(|offset| SwpEntry::new(self.swap_type, offset)).ok_or(ZswapError::SwapFull)
    }

    /// Writes `page` straight to slot `entry` of the swap file (Linux's
    /// `swap_writepage` after zswap refused the page).
    ///
    /// # Errors
    /// [`ZswapError::Io`]; [`ZswapError::ForeignEntry`],
    /// [`ZswapError::BadSlot`], [`ZswapError::BadPageSize`].
    pub fn swap_writepage(&self, entry: &SwpEntry, page: &[u8]) -> Result<(), ZswapError> {
        let offset = self.check(entry, page.len())?;
        Ok(self.file.write_slot(offset, page)?)
    }

    /// Swaps `page` out: a new slot, offered to zswap, written to the
    /// swap file when zswap refuses it. Returns the slot.
    ///
    /// # Errors
    /// [`ZswapError::SwapFull`]; [`ZswapError::Io`] (the slot is freed
    /// again); [`ZswapError::BadPageSize`].
    pub fn swap_out(&self, page: &[u8]) -> Result<SwpEntry, ZswapError> {
        if page.len() != PAGE_SIZE {
            return Err(ZswapError::BadPageSize(page.len()));
        }
        let entry = self.alloc_swap_slot()?;
        match self.zswap_store(&entry, page) {
            Ok(()) => Ok(entry),
            Err(ZswapError::Rejected(_)) => match self.swap_writepage(&entry, page) {
                Ok(()) => Ok(entry),
                Err(e) => {
                    self.file.free_slot(entry.offset());
                    Err(e)
                }
            },
            Err(e) => {
                self.file.free_slot(entry.offset());
                Err(e)
            }
        }
    }

    /// Reads slot `entry` into `page`: from zswap when it is there
    /// (keeping the entry when `keep`, see
    /// [`zswap_load_keep`](Self::zswap_load_keep)), else from the swap
    /// file.
    ///
    /// # Errors
    /// As the load; [`ZswapError::Io`].
    pub fn swap_in(&self, entry: &SwpEntry, page: &mut [u8], keep: KeepEntry) -> Result<(), ZswapError> {
        let found = match keep {
            KeepEntry::Keep => self.zswap_load_keep(entry, page)?,
            KeepEntry::Drop => self.zswap_load(entry, page)?,
        };
        if !found {
            self.file.read_slot(entry.offset(), page)?;
        }
        Ok(())
    }

    /// Frees swap slot `entry`, consuming the entry: its zswap entry is
    /// invalidated (deferred free) and the slot goes back to the file
    /// (Linux's `swap_free`). A second free of one entry does not compile.
    ///
    /// # Errors
    /// [`ZswapError::ForeignEntry`] for an entry of another instance (the
    /// entry comes back with the error, still its owner's); nothing
    /// changes.
    pub fn swap_free(&self, entry: SwpEntry) -> Result<(), (ZswapError, SwpEntry)> {
        if let Err(e) = self.check(&entry, PAGE_SIZE) {
            return Err((e, entry));
        }
        if let Err(e) = self.zswap_invalidate(&entry) {
            return Err((e, entry));
        }
        self.file.free_slot(entry.offset());
        Ok(())
    }

    /// Frees many slots at once, consuming their entries, taking the tree
    /// lock once per chunk of 256 (a process exit's
    /// `free_swap_and_cache_nr` over its whole range): entries are
    /// invalidated with their objects freed as `mode` says. Returns the
    /// slots freed and the entries of another device, which are given back
    /// untouched.
    pub fn swap_free_batch(&self, entries: Vec<SwpEntry>, mode: ReleaseMode) -> (usize, Vec<SwpEntry>) {
        const CHUNK: usize = 256;
        let mut handles = Vec::with_capacity(CHUNK);
        let mut offsets = Vec::with_capacity(entries.len());
        let (mut pages, mut same, mut bytes) = (0u64, 0u64, 0u64);
        // The tree lock is held for one chunk at a time, and the chunk's
        // objects are freed after it is dropped: two threads exiting at
        // once interleave instead of one waiting for the other's whole
        // range.
        for chunk in entries.chunks(CHUNK) {
            {
                let mut tree = self.lock();
                for entry in chunk {
                    if entry.swap_type() != self.swap_type {
                        continue;
                    }
                    offsets.push(entry.offset());
                    if let Some(old) = tree.remove(entry.offset()) {
                        pages += 1;
                        match old.stored {
                            Stored::Same(_) => same += 1,
                            Stored::Zs { handle, len, .. } => {
                                bytes += u64::from(len);
                                handles.push(handle);
                            }
                        }
                    }
                }
            }
            for handle in handles.drain(..) {
                self.free_handle(handle, mode);
            }
        }
        // The counters once per batch, not once per entry: threads exiting
        // at once would otherwise bounce their cache lines.
        self.counters.stored_pages.fetch_sub(pages, Relaxed);
        self.counters.same_filled_pages.fetch_sub(same, Relaxed);
        self.counters.stored_bytes.fetch_sub(bytes, Relaxed);
        let freed = self.file.free_slots(&offsets);
        // Only this device's entries were freed; every one named an
        // allocated slot (an entry is consumed by its free), so `freed`
        // is all of them.
        (freed, entries.into_iter().filter(|e| e.swap_type() != self.swap_type).collect())
    }
}
