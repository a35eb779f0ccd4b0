//! Page migration: moving one page of a live zspage elsewhere when the page
//! allocator asks (Linux's zsmalloc `movable_operations`, `zs_page_migrate`),
//! so that `alloc_contig_range` can collect a range that holds zsmalloc
//! pages.
//!
//! Owns the swap of one page of a chain for a copy of it. The page
//! allocator's default migrator refuses pages a layer owns; an embedder's
//! [`Migrator`](mmkit::Migrator) hands a page whose owner is
//! the pool's ([`ZsPool::owner`](crate::ZsPool::owner)) to [`ZsPool::zs_migrate_page`](crate::ZsPool::zs_migrate_page). Handles name zspages
//! and object indices, not pages, so no handle changes. The target is
//! allocated and the old page freed with no class lock held.

use crate::pool::Inner;
use crate::ZsError;
use mmkit::Blocks;
use mmkit::{Gfp, Pfn};

impl Inner {
    /// Class, zspage and chain position of page `pfn`, if a zspage of the
    /// pool holds it. A scan: migration is rare, and a reverse map would
    /// cost every zspage allocation a pool-wide lock.
    fn find_page(&self, pfn: Pfn) -> Option<(usize, usize, usize)> {
        for class in self.serving_classes() {
            if let Some((id, at)) = self.lock(class).find_page(pfn) {
                return Some((class, id, at));
            }
        }
        None
    }

    pub(crate) fn migrate_page(&self, pfn: Pfn, gfp: Gfp, nid: usize) -> Result<Pfn, ZsError> {
        let blocks = Blocks::new(&self.mm);
        let (class, id, at) = self.find_page(pfn).ok_or(ZsError::UnknownPage(pfn))?;
        let target =
            Blocks::new(&self.mm).alloc_block_node(nid, self.key()?, gfp, 0).map_err(|e| ZsError::NoMemory(Some(e)))?;
        let new = target.pfn();
        // Still there (not freed or moved since the scan): copied under
        // the class lock, so no object changes meanwhile.
        let swapped = self.lock(class).replace_page(&self.mm, id, at, pfn, target);
        let old = match swapped {
            Ok(old) => Some(old),
            Err(target) => {
                let _ = Blocks::new(&self.mm).free_block(target);
                None
            }
        };
        let old = old.ok_or(ZsError::UnknownPage(pfn))?;
        // The old page was this pool's: a failure can only be a bad-page
        // report (embedder flags set on it), which leaks it as Linux does.
        let _ = blocks.free_block(old);
        Ok(new)
    }
}

impl crate::ZsPool {
    /// Moves page `pfn` of one of the pool's zspages to a new page
    /// allocated with `gfp` on node `nid`, and frees the old one; returns
    /// the new page. For an embedder's [`Migrator`](mmkit::Migrator) asked
    /// to move a page whose [`page_owner`](mmkit::Blocks::page_owner)
    /// is this pool's [`owner`](Self::owner).
    ///
    /// # Errors
    /// [`ZsError::UnknownPage`] when no zspage of this pool holds `pfn`
    /// (or it was freed meanwhile); [`ZsError::NoMemory`] without a target.
    /// Nothing changes.
    pub fn zs_migrate_page(&self, pfn: Pfn, gfp: Gfp, nid: usize) -> Result<Pfn, ZsError> {
        self.inner.migrate_page(pfn, gfp, nid)
    }
}
