//! Pageblock migratetypes: one byte per pageblock, kept apart from the page
//! descriptors so the descriptor stays at 16 bytes.
//!
//! Owns only the storage and the PFN→pageblock arithmetic. Changing a
//! pageblock's type is a zone operation (free blocks must move lists with it),
//! so writers are the zone layer, holding the zone lock; readers may look at
//! any time.
#![deny(unsafe_code)]

use crate::mem::page::PageIdx;
use crate::types::gfp::MigrateType;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU8, Ordering::Relaxed};

/// Migratetype of every pageblock in the map.
pub(crate) struct PageblockMap {
    types: Vec<AtomicU8>,
    order: u32,
}

impl PageblockMap {
    /// Map for `pages` descriptors with pageblocks of `1 << order` pages,
    /// every block initially `initial`.
    /// `Err` when the map cannot be allocated.
    pub(crate) fn try_new(
        pages: usize,
        order: u32,
        initial: MigrateType,
    ) -> Result<Self, crate::types::error::BuildError> {
        let blocks = pages.div_ceil(1usize << order);
        let mut types = Vec::new();
        types
            .try_reserve_exact(blocks)
            .map_err(|_| crate::types::error::BuildError::NoMetadataMemory { bytes: blocks })?;
        types.resize_with(blocks, || AtomicU8::new(initial as u8));
        Ok(Self { types, order })
    }

    /// Number of pageblocks covered.
    pub(crate) fn len(&self) -> usize {
        self.types.len()
    }

    /// The raw type bytes and the pageblock order, for a hot path that
    /// keeps them in registers (see `page_alloc::cache::pinned`).
    #[inline]
    pub(crate) fn raw(&self) -> (&[AtomicU8], u32) {
        (&self.types, self.order)
    }

    /// Type of the pageblock holding page `idx`.
    #[inline(always)]
    pub(crate) fn get(&self, idx: PageIdx) -> MigrateType {
        let raw = self.types[(idx >> self.order) as usize].load(Relaxed);
        MigrateType::from_index(raw as usize).unwrap_or(MigrateType::Unmovable)
    }

    /// Sets the type of the pageblock holding page `idx`. Caller holds the
    /// zone lock and moves the block's free pages itself.
    #[inline]
    pub(crate) fn set(&self, idx: PageIdx, mt: MigrateType) {
        self.types[(idx >> self.order) as usize].store(mt as u8, Relaxed);
    }

    /// Type of pageblock number `block`.
    pub(crate) fn get_block(&self, block: usize) -> MigrateType {
        MigrateType::from_index(self.types[block].load(Relaxed) as usize).unwrap_or(MigrateType::Unmovable)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_cover_partial_tail() {
        let map = PageblockMap::try_new(1025, 9, MigrateType::Movable).unwrap();
        assert_eq!(map.len(), 3);
        map.set(1024, MigrateType::Cma);
        assert_eq!(map.get(1024), MigrateType::Cma);
        assert_eq!(map.get(1023), MigrateType::Movable);
        assert_eq!(map.get_block(2), MigrateType::Cma);
    }
}
