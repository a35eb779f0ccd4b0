//! Where each page of a region keeps its stored copy: the region's only
//! use of swap entries, so that a change in how entries are named or
//! owned touches this file alone.
//!
//! Owned by the handler thread (loads and stores happen there); the
//! region's drop releases every entry at once.

use crate::{KeepEntry, ReleaseMode, SwpEntry, Zswap, ZswapError};

/// Each page's stored copy, if it has one.
pub(crate) struct Slots(Vec<Option<SwpEntry>>);

impl Slots {
    /// No page stored yet.
    pub(crate) fn new(pages: usize) -> Self {
        Self(vec![None; pages])
    }

    /// Whether page `index` has a stored copy.
    pub(crate) fn is_stored(&self, index: usize) -> bool {
        self.0[index].is_some()
    }

    /// Loads page `index`'s stored copy into `page`, keeping it (a clean
    /// page can then be dropped without a new store). `Ok(false)` when it
    /// has none.
    ///
    /// # Errors
    /// The load's: the stored copy stays where it was.
    pub(crate) fn load(&self, zswap: &Zswap, index: usize, page: &mut [u8]) -> Result<bool, ZswapError> {
        match self.0[index] {
            Some(entry) => zswap.swap_in(entry, page, KeepEntry::Keep).map(|()| true),
            None => Ok(false),
        }
    }

    /// Stores page `index`: over its old slot when it has one (the store
    /// replaces the old entry, or the swap file's copy when zswap refuses
    /// the page), else in a new slot.
    ///
    /// # Errors
    /// The store's; page `index` keeps its old copy, if any.
    pub(crate) fn store(&mut self, zswap: &Zswap, index: usize, page: &[u8]) -> Result<(), ZswapError> {
        match self.0[index] {
            Some(entry) => match zswap.zswap_store(entry, page) {
                Ok(()) => Ok(()),
                Err(ZswapError::Rejected(_)) => zswap.swap_writepage(entry, page),
                Err(e) => Err(e),
            },
            None => {
                self.0[index] = Some(zswap.swap_out(page)?);
                Ok(())
            }
        }
    }

    /// Frees every stored copy in one batch (the process exit).
    pub(crate) fn release(&self, zswap: &Zswap, mode: ReleaseMode) {
        let entries: Vec<SwpEntry> = self.0.iter().flatten().copied().collect();
        zswap.swap_free_batch(&entries, mode);
    }
}
