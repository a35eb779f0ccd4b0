//! Where each page of a region keeps its stored copy: the region's only
//! use of swap entries, so that a change in how entries are named or
//! owned touches this file alone.
//!
//! One lock a page: the thread that loads or evicts a page (which the
//! page's state makes exclusive, `page`) takes it, so it is never
//! contended but by the release and a look by fault-around. The region's
//! drop releases every entry at once.

use crate::{KeepEntry, ReleaseMode, SwpEntry, Zswap, ZswapError};
use std::sync::{Mutex, MutexGuard};

/// Each page's stored copy, if it has one.
pub(crate) struct Slots(Box<[Mutex<Option<SwpEntry>>]>);

/// One page's slot, locked.
pub(crate) struct Slot<'a>(MutexGuard<'a, Option<SwpEntry>>);

impl Slots {
    /// What one page's slot takes.
    pub(crate) const BYTES_PER_PAGE: usize = size_of::<Mutex<Option<SwpEntry>>>();

    /// No page stored yet; `None` when the memory for them cannot be had.
    pub(crate) fn new(pages: usize) -> Option<Self> {
        let mut slots = Vec::new();
        slots.try_reserve_exact(pages).ok()?;
        slots.extend((0..pages).map(|_| Mutex::new(None)));
        Some(Self(slots.into_boxed_slice()))
    }

    /// Page `index`'s slot.
    pub(crate) fn lock(&self, index: usize) -> Slot<'_> {
        Slot(self.0[index].lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Frees every stored copy in one batch (the process exit). Exclusive,
    /// so no lock is taken: the release of a large region is a walk.
    pub(crate) fn release(&mut self, zswap: &Zswap, mode: ReleaseMode) {
        let entries: Vec<SwpEntry> =
            self.0.iter_mut().filter_map(|slot| slot.get_mut().unwrap_or_else(|p| p.into_inner()).take()).collect();
        // Every entry is this region's, made by this zswap: none comes back.
        let _ = zswap.swap_free_batch(entries, mode);
    }

    /// [`release`](Self::release) where other references may remain.
    pub(crate) fn release_shared(&self, zswap: &Zswap, mode: ReleaseMode) {
        let entries: Vec<SwpEntry> =
            self.0.iter().filter_map(|slot| slot.lock().unwrap_or_else(|p| p.into_inner()).take()).collect();
        let _ = zswap.swap_free_batch(entries, mode);
    }
}

impl Slot<'_> {
    /// Whether the page has a stored copy.
    pub(crate) fn is_stored(&self) -> bool {
        self.0.is_some()
    }

    /// Loads the stored copy into `page`, keeping it (a clean page can then
    /// be dropped without a new store). `Ok(false)` when there is none.
    ///
    /// # Errors
    /// The load's: the stored copy stays where it was.
    pub(crate) fn load(&self, zswap: &Zswap, page: &mut [u8]) -> Result<bool, ZswapError> {
        match &*self.0 {
            Some(entry) => zswap.swap_in(entry, page, KeepEntry::Keep).map(|()| true),
            None => Ok(false),
        }
    }

    /// Frees the stored copy, if any (a page of zeros needs none: its next
    /// load maps the zero page). Its zswap entry is freed here, in the
    /// region's code, not queued for zsmalloc's drain thread: that thread
    /// is no region code, and its allocations (made under zsmalloc's
    /// locks) would come from the region if a global allocator's heap is
    /// one. A copy the instance refuses to free (it is not its own, which
    /// a region's never is) is kept.
    pub(crate) fn free(&mut self, zswap: &Zswap) {
        if let Some(entry) = self.0.take() {
            let _ = zswap.zswap_invalidate_mode(&entry, ReleaseMode::Sync);
            if let Err((_, entry)) = zswap.swap_free(entry) {
                *self.0 = Some(entry);
            }
        }
    }

    /// Stores the page: over its old slot when it has one (the store
    /// replaces the old entry, or the swap file's copy when zswap refuses
    /// the page), else in a new slot.
    ///
    /// # Errors
    /// The store's; the page keeps its old copy, if any.
    pub(crate) fn store(&mut self, zswap: &Zswap, page: &[u8]) -> Result<(), ZswapError> {
        match &*self.0 {
            Some(entry) => match zswap.zswap_store(entry, page) {
                Ok(()) => Ok(()),
                Err(ZswapError::Rejected(_)) => zswap.swap_writepage(entry, page),
                Err(e) => Err(e),
            },
            None => {
                *self.0 = Some(zswap.swap_out(page)?);
                Ok(())
            }
        }
    }
}
