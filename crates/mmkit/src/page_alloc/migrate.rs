//! Page migration, as the embedder provides it: the hook a contiguous
//! allocation calls to move an in-use movable block out of its way.
//!
//! The allocator knows which pages are in use and which were allocated as
//! movable, but not who owns them or what points at them; only the embedder
//! does. So moving a page is the embedder's [`Migrator`]: allocate a target,
//! copy, repoint the owner, free the old block. [`CopyMigrator`] is a ready
//! implementation that does the allocator-side work (target, contents with
//! real memory, embedder flags, private word, freeing) and reports each move
//! to a callback, which is where the owner gets updated.
//!
//! This module owns only that contract. It touches allocator state through
//! the public API (plus the crate-internal page copy, the one `unsafe`
//! operation it needs, which lives in `rawmem`).
#![deny(unsafe_code)]

use crate::mem::page::PageFlags;
use crate::types::error::{MigrateError, PageError};
use crate::types::gfp::Gfp;
use crate::{PageAllocator, Pfn};

/// One block [`alloc_contig_range`](crate::Contig::alloc_contig_range) wants
/// moved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MigrateRequest {
    /// First page of the in-use block.
    pub pfn: Pfn,
    /// Its order.
    pub order: u32,
    /// Flags to allocate the target with: the caller's reclaim flags plus
    /// `MOVABLE | RETRY_MAYFAIL`, as Linux's `__alloc_contig_verify_gfp_mask`
    /// builds them.
    pub gfp: Gfp,
    /// Node of the range being collected (allocate the target there).
    pub nid: usize,
}

/// Moves in-use movable blocks; implemented by the embedder and installed
/// with [`MemoryMapBuilder::migrator`](crate::MemoryMapBuilder::migrator).
///
/// Called with no allocator lock held, from the thread running the
/// contiguous allocation. The pageblocks under the range are isolated, so an
/// allocation made here never returns a page of the range.
///
/// On `Ok(new)` the old block must have been freed (its last reference
/// dropped); if it was not, the contiguous allocation fails as busy. On
/// `Err` the old block must still be valid and owned as before.
pub trait Migrator: Send + Sync {
    /// Moves the block described by `request`; returns where it went.
    ///
    /// # Errors
    /// Any [`MigrateError`]: the contiguous allocation then fails as busy.
    fn migrate_page(&self, alloc: &PageAllocator, request: &MigrateRequest) -> Result<Pfn, MigrateError>;

    /// Moves the block described by `request` into `target`, a block of
    /// the same order (and compound-ness) the allocator has already
    /// allocated for it: compaction's free scanner chose it
    /// ([`Tuning::compact_zone`](crate::Tuning::compact_zone)). Same contract as
    /// [`migrate_page`](Self::migrate_page) otherwise; on `Err` the
    /// allocator frees `target` again. The default refuses, so compaction
    /// moves nothing for a migrator that does not implement it.
    ///
    /// # Errors
    /// Any [`MigrateError`].
    fn migrate_page_to(
        &self,
        alloc: &PageAllocator,
        request: &MigrateRequest,
        target: Pfn,
    ) -> Result<Pfn, MigrateError> {
        let _ = (alloc, target);
        Err(MigrateError::Refused(request.pfn))
    }
}

/// The default migrator: allocates a target of the same order (and
/// compound-ness and frozen-ness), copies the contents when the map has real
/// memory, carries the embedder's page flags and private word over, calls
/// `on_moved(old, new, order)` so the owner can repoint itself, and frees the
/// old block. If `on_moved` panics the move is undone before the panic goes
/// on: the old block stays where it was, with its reference, flags and
/// private word, and the target is freed (so `on_moved` must not keep `new`
/// when it panics); a contiguous allocation then gives its pageblocks back.
///
/// It refuses blocks with references besides the owner's (refcount above
/// one), as Linux's migration refuses pinned pages, and blocks a layer
/// owns ([`PageOwner`](crate::PageOwner)): those only their owner can move
/// (a migrator of the embedder's hands them to it, as zsmalloc's
/// `zs_migrate_page`). A block with one reference is frozen first, as
/// Linux's `folio_ref_freeze` (`mm/migrate.c`, `__folio_migrate_mapping`)
/// freezes a folio's count before it moves it: the reference count goes
/// from 1 to 0 in one compare-and-swap, so from then until the move ends no
/// one takes a reference, adopts the block
/// ([`take_back_block`](crate::Blocks::take_back_block) sees a
/// frozen block and refuses it) or frees it, and a block adopted before
/// the freeze is refused. Copying still races with plain writes through a
/// pointer: the embedder must keep the owner from writing the block while
/// it is being moved (Linux unmaps it first).
pub struct CopyMigrator<F> {
    on_moved: F,
}

impl<F> CopyMigrator<F>
where
    F: Fn(Pfn, Pfn, u32) + Send + Sync,
{
    /// A migrator that reports every move to `on_moved(old, new, order)`.
    pub fn new(on_moved: F) -> Self {
        Self { on_moved }
    }
}

impl<F> Migrator for CopyMigrator<F>
where
    F: Fn(Pfn, Pfn, u32) + Send + Sync,
{
    fn migrate_page(&self, alloc: &PageAllocator, request: &MigrateRequest) -> Result<Pfn, MigrateError> {
        self.move_block(alloc, request, None)
    }

    fn migrate_page_to(
        &self,
        alloc: &PageAllocator,
        request: &MigrateRequest,
        target: Pfn,
    ) -> Result<Pfn, MigrateError> {
        self.move_block(alloc, request, Some(target))
    }
}

impl<F> CopyMigrator<F>
where
    F: Fn(Pfn, Pfn, u32) + Send + Sync,
{
    /// The move itself, into `target` when the caller allocated one (it
    /// must match the source: same order, compound-ness, not frozen).
    fn move_block(
        &self,
        alloc: &PageAllocator,
        request: &MigrateRequest,
        target: Option<Pfn>,
    ) -> Result<Pfn, MigrateError> {
        let old = request.pfn;
        let order = request.order;
        let not_movable = |_: PageError| MigrateError::NotMovable(old);
        let flags = alloc.page_flags(old).map_err(not_movable)?;
        if !flags.contains(PageFlags::ALLOCATED) {
            return Err(MigrateError::NotMovable(old));
        }
        if flags.contains(PageFlags::OWNED) {
            // Only the owning layer knows what points into the block.
            return Err(MigrateError::Refused(old));
        }
        let refcount = alloc.page_count(old).map_err(not_movable)?;
        if refcount > 1 {
            return Err(MigrateError::Pinned { pfn: old, refcount });
        }
        // A layer that adopted the block between the flags load above and
        // the count load marked it before its count went to 0
        // (`take_back_block` marks, then swaps the count), and this load of
        // the same word comes after the count's: a 0 read here is the
        // holder's freeze, not an adoption.
        if alloc.page_flags(old).map_or(true, |f| f.contains(PageFlags::OWNED)) {
            return Err(MigrateError::Refused(old));
        }
        let frozen = refcount == 0;
        // The caller's target holds a reference; a frozen block needs a
        // frozen one.
        if frozen && target.is_some() {
            return Err(MigrateError::Refused(old));
        }
        if !frozen {
            // Linux's `folio_ref_freeze(folio, 1)`: the block is in flight
            // from here, and the one reference checked above is still the
            // only one, or nothing happens.
            if !alloc.ref_freeze(old, 1) {
                let refcount = alloc.page_count(old).unwrap_or(0);
                return Err(MigrateError::Pinned { pfn: old, refcount });
            }
            // Adopted by a layer between the check above and the freeze:
            // the layer's take-back loses its compare-and-swap only if we
            // keep the count at 0, so give the reference back instead.
            if alloc.page_flags(old).map_or(true, |f| f.contains(PageFlags::OWNED)) {
                alloc.ref_unfreeze(old, 1);
                return Err(MigrateError::Refused(old));
            }
        }
        let compound = flags.contains(PageFlags::HEAD);
        let gfp = if compound { request.gfp | Gfp::COMP } else { request.gfp };
        let new = match target {
            Some(target) => Ok(target),
            None if frozen => alloc.alloc_frozen_pages_node(request.nid, gfp, order),
            None => alloc.alloc_pages_node(request.nid, gfp, order),
        };
        let new = match new {
            Ok(new) => new,
            Err(e) => {
                if !frozen {
                    alloc.ref_unfreeze(old, 1);
                }
                return Err(MigrateError::NoTarget(e));
            }
        };
        #[cfg(feature = "std")]
        alloc.copy_page_contents(old, new, 1 << order);
        // The embedder's state moves with the contents: flags on every page
        // that can carry them (the head, and the tails of a compound page).
        let flagged = if compound { 1u64 << order } else { 1 };
        move_embedder_state(alloc, old, new, flagged);
        // `on_moved` is the embedder's code and may panic: the move is then
        // undone (the old block keeps its place, reference and flags; a
        // target this migrator allocated is freed, the caller's is left to
        // the caller, which frees it as for an `Err`).
        let undo = UndoMove { alloc, old, new, order, flagged, frozen, own_target: target.is_none(), armed: true };
        (self.on_moved)(old, new, order);
        let mut undo = undo;
        undo.armed = false;
        // A failure here is reported (bad page) by the free path itself; the
        // range check that follows the migration then fails as busy.
        // The old block is frozen now either way (by its holder or by the
        // freeze above).
        let _ = alloc.free_frozen_pages(old, order);
        Ok(new)
    }
}

/// Moves the embedder's flags of `pages` pages and the private word from
/// `from` to `to`.
fn move_embedder_state(alloc: &PageAllocator, from: Pfn, to: Pfn, pages: u64) {
    for i in 0..pages {
        let (from, to) = (Pfn(from.0 + i), Pfn(to.0 + i));
        let Ok(flags) = alloc.page_flags(from) else { continue };
        let owned = flags.intersection(PageFlags::EMBEDDER_SETTABLE);
        if owned != PageFlags::EMPTY {
            let _ = alloc.set_page_flags(to, owned);
            let _ = alloc.clear_page_flags(from, owned);
        }
    }
    if let Ok(private) = alloc.page_private(from) {
        let _ = alloc.set_page_private(to, private);
    }
}

/// A move in flight while `on_moved` runs; dropped armed (a panic unwinding
/// through it), it puts the old block back as it was and frees a target the
/// migrator allocated.
struct UndoMove<'a> {
    alloc: &'a PageAllocator,
    old: Pfn,
    new: Pfn,
    order: u32,
    flagged: u64,
    /// The old block was frozen by its holder (not by the migrator).
    frozen: bool,
    /// The migrator allocated `new` (else the caller's target).
    own_target: bool,
    armed: bool,
}

impl Drop for UndoMove<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let alloc = self.alloc;
        move_embedder_state(alloc, self.new, self.old, self.flagged);
        let _ = alloc.set_page_private(self.new, 0);
        if !self.frozen {
            alloc.ref_unfreeze(self.old, 1);
        }
        if self.own_target {
            let _ = if self.frozen {
                alloc.free_frozen_pages(self.new, self.order)
            } else {
                alloc.free_pages(self.new, self.order)
            };
        }
    }
}

impl PageAllocator {
    /// Linux's `folio_ref_freeze`: the head's reference count from
    /// `expected` to 0 in one compare-and-swap; false (nothing changed) if
    /// it held another count or the page is `LOCAL`.
    pub(crate) fn ref_freeze(&self, pfn: Pfn, expected: u32) -> bool {
        self.pfn_to_desc(pfn).is_some_and(|(_, page)| page.refcount_exchange(expected, 0))
    }

    /// Linux's `folio_ref_unfreeze`: a block frozen by
    /// [`ref_freeze`](Self::ref_freeze) gets `count` references back.
    pub(crate) fn ref_unfreeze(&self, pfn: Pfn, count: u32) {
        if let Some((_, page)) = self.pfn_to_desc(pfn) {
            let _ = page.refcount_exchange(0, count);
        }
    }
}

impl PageAllocator {
    /// Copies the contents of `count` pages from `from` to `to` when the map
    /// has real memory (migration). Both blocks must belong to the caller.
    #[cfg(feature = "std")]
    pub(crate) fn copy_page_contents(&self, from: Pfn, to: Pfn, count: u64) {
        let (Some(src), Some(dst), Some(mem)) = (self.pfn_to_idx(from), self.pfn_to_idx(to), self.mem.memory.as_ref())
        else {
            return;
        };
        mem.copy_pages(src as usize, dst as usize, count as usize);
    }
}
