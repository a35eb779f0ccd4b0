//! Contiguous allocation of a PFN range (Linux's `alloc_contig_range` and
//! `alloc_contig_pages`).
//!
//! Owns the sequence that turns an arbitrary PFN range into allocated pages:
//! isolate the covering pageblocks (`isolation`), drain per-CPU lists, move
//! the in-use movable blocks out through the embedder's `Migrator`, check
//! under the zone lock that the whole range is free, take it off the free
//! lists (`FreeArea::take_range`), give the pageblocks their types back and
//! hand the range out as order-0 pages or one compound page. Any page that
//! cannot be moved makes the call fail as busy with the isolation undone.
//!
//! It edits lists only through `buddy` under the zone lock, holds no lock
//! while the migrator runs, and never changes a pageblock's type for good.
//! Freeing ranges is `free_contig`'s; CMA bookkeeping is `cma`'s.
//!
//! The layer's public face is [`Contig`], a view borrowing the allocator:
//! every operation of the layer is a method of the view, never of
//! [`PageAllocator`] itself, because `page_alloc` sits below this layer and
//! must stay whole without it (`tests/layers.rs` holds the rule). The view
//! reaches the allocator only through what `page_alloc` and the layers
//! under it make visible to the crate.
//!
//! [`PageAllocator`]: crate::PageAllocator
#![deny(unsafe_code)]

pub mod cma;
pub(crate) mod free_contig;
pub(crate) mod isolation;
pub(crate) mod owned;

use crate::contig::isolation::Unit;
use crate::mem::page::{DescWord, PageFlags, PageIdx};
use crate::page_alloc::migrate::MigrateRequest;
use crate::types::error::ContigError;
use crate::types::gfp::{gfp_zone, Gfp, MigrateType};
use crate::zone::Zone;
use crate::Pfn;
use alloc::vec::Vec;

/// How a collected range's pages are handed out.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Prep {
    /// Each page (or the compound head) with one reference.
    Referenced,
    /// Frozen: no references.
    Frozen,
    /// Frozen and owned by a layer, held through a [`ContigRange`](owned::ContigRange).
    Owned(crate::PageOwner),
}

/// Linux's `__alloc_contig_verify_gfp_mask`: placement hints (zone bits,
/// mobility, hardwall, this-node, write) are ignored since the range is
/// given; reclaim, I/O and FS flags and the action flags `COMP`,
/// `RETRY_MAYFAIL`, `NOWARN`, `ZERO`, `ZEROTAGS` are allowed; anything else
/// is an error. Returns the flags for allocating migration targets.
fn contig_migration_gfp(gfp: Gfp) -> Result<Gfp, ContigError> {
    let ignored = Gfp::ZONEMASK | Gfp::RECLAIMABLE | Gfp::WRITE | Gfp::HARDWALL | Gfp::THISNODE | Gfp::MOVABLE;
    let reclaim = Gfp::IO | Gfp::FS | Gfp::RECLAIM;
    let action = Gfp::COMP | Gfp::RETRY_MAYFAIL | Gfp::NOWARN | Gfp::ZERO | Gfp::ZEROTAGS;
    let rest = gfp.difference(ignored);
    if !rest.difference(reclaim | action).is_empty() {
        return Err(ContigError::InvalidGfp(gfp));
    }
    Ok(rest.intersection(reclaim | Gfp::RETRY_MAYFAIL | Gfp::NOWARN) | Gfp::MOVABLE | Gfp::RETRY_MAYFAIL)
}

crate::page_alloc::view::allocator_view! {
    /// The contiguous-allocation layer over one allocator: ranges collected
    /// and freed by PFN, owned ranges, CMA areas. A borrowed view; make one
    /// wherever it is needed, it costs a reference.
    ///
    /// ```
    /// use mmkit::{Contig, Gfp, MemoryMapBuilder, MigrateType, Pfn};
    /// let mm = MemoryMapBuilder::with_memory(64 << 20).build().unwrap();
    /// let contig = Contig::new(&mm);
    /// contig.alloc_contig_range(Pfn(4096), Pfn(4608), MigrateType::Movable, Gfp::KERNEL).unwrap();
    /// assert_eq!(contig.free_contig_range(Pfn(4096), 512).unwrap().freed, 512);
    /// ```
    pub struct Contig;
}

impl Contig<'_> {
    /// Allocates exactly the pages `[start, end)` (Linux's
    /// `alloc_contig_range`), moving in-use movable pages out of the way.
    ///
    /// `migratetype` is `Movable` for ordinary memory or `Cma` for a range
    /// of a CMA area (only then may CMA pageblocks be taken). The covering
    /// pageblocks are isolated, per-CPU lists drained, in-use movable blocks
    /// handed to the [`Migrator`](crate::Migrator) installed with
    /// [`MemoryMapBuilder::migrator`](crate::MemoryMapBuilder::migrator),
    /// and the free range taken off the free lists. The pages come back as
    /// order-0 pages with refcount 1 (free them with
    /// [`free_contig_range`](Self::free_contig_range) or one by one with
    /// [`free_pages`](crate::PageAllocator::free_pages)`(pfn, 0)`), or with `Gfp::COMP` as
    /// one compound page (free it with `free_pages(start, order)`). With
    /// `Gfp::ZERO` and real memory they are zeroed. Pageblock types are as
    /// they were before.
    ///
    /// Watermarks are not checked: the caller asked for these very pages.
    ///
    /// # Errors
    /// [`ContigError::Busy`] when a page in the range is unmovable,
    /// reserved, poisoned, pinned or could not be migrated: every pageblock
    /// is back to its type and free pages are back on their lists; blocks the
    /// migrator already moved stay moved (they are valid at their new
    /// place). Input errors ([`InvalidRange`](ContigError::InvalidRange),
    /// [`OutOfRange`](ContigError::OutOfRange),
    /// [`NotInOneZone`](ContigError::NotInOneZone),
    /// [`InvalidMigrateType`](ContigError::InvalidMigrateType),
    /// [`InvalidGfp`](ContigError::InvalidGfp),
    /// [`BadCompoundRange`](ContigError::BadCompoundRange)) change nothing.
    pub fn alloc_contig_range(
        &self,
        start: Pfn,
        end: Pfn,
        migratetype: MigrateType,
        gfp: Gfp,
    ) -> Result<(), ContigError> {
        self.alloc_contig_range_common(start, end, migratetype, gfp, false)
    }

    /// Like [`alloc_contig_range`](Self::alloc_contig_range) but the pages
    /// come back frozen (refcount 0); free them with
    /// [`free_contig_frozen_range`](Self::free_contig_frozen_range).
    ///
    /// # Errors
    /// As [`alloc_contig_range`](Self::alloc_contig_range).
    pub fn alloc_contig_frozen_range(
        &self,
        start: Pfn,
        end: Pfn,
        migratetype: MigrateType,
        gfp: Gfp,
    ) -> Result<(), ContigError> {
        self.alloc_contig_range_common(start, end, migratetype, gfp, true)
    }

    /// Finds and allocates `nr_pages` contiguous pages (Linux's
    /// `alloc_contig_pages`): walks the zones `gfp` allows, preferring node
    /// `nid`, and tries each range aligned to `nr_pages` rounded up to a
    /// power of two that holds no reserved, unmovable or CMA pages, until
    /// [`alloc_contig_range`](Self::alloc_contig_range) succeeds on one.
    ///
    /// # Errors
    /// [`ContigError::NoMemory`] when no candidate range could be collected;
    /// input errors as [`alloc_contig_range`](Self::alloc_contig_range),
    /// plus [`ContigError::NoSuchNode`].
    pub fn alloc_contig_pages(&self, nr_pages: u64, gfp: Gfp, nid: usize) -> Result<Pfn, ContigError> {
        self.alloc_contig_pages_common(nr_pages, gfp, nid, false)
    }

    /// Like [`alloc_contig_pages`](Self::alloc_contig_pages) with frozen
    /// pages; free them with
    /// [`free_contig_frozen_range`](Self::free_contig_frozen_range).
    ///
    /// # Errors
    /// As [`alloc_contig_pages`](Self::alloc_contig_pages).
    pub fn alloc_contig_frozen_pages(&self, nr_pages: u64, gfp: Gfp, nid: usize) -> Result<Pfn, ContigError> {
        self.alloc_contig_pages_common(nr_pages, gfp, nid, true)
    }

    fn alloc_contig_pages_common(&self, nr_pages: u64, gfp: Gfp, nid: usize, frozen: bool) -> Result<Pfn, ContigError> {
        contig_migration_gfp(gfp)?;
        let highest = gfp_zone(gfp).map_err(|_| ContigError::InvalidGfp(gfp))?;
        if nid >= self.mm.nr_nodes() {
            return Err(ContigError::NoSuchNode(nid));
        }
        if nr_pages == 0 || nr_pages > self.mm.mem.pages.len() as u64 {
            return Err(ContigError::NoMemory { nr_pages });
        }
        let this_node_only = gfp.contains(Gfp::THISNODE);
        let step = nr_pages.next_power_of_two();
        for &zi in self.mm.zonelist(nid) {
            let zone = &self.mm.zones[zi];
            if zone.zone_type > highest || (this_node_only && zone.nid != nid) {
                continue;
            }
            let mut pfn = zone.start_pfn.next_multiple_of(step);
            while pfn + nr_pages <= zone.end_pfn {
                if self.pfn_range_valid_contig(zone, pfn, nr_pages) {
                    let (start, end) = (Pfn(pfn), Pfn(pfn + nr_pages));
                    match self.alloc_contig_range_common(start, end, MigrateType::Movable, gfp, frozen) {
                        Ok(()) => return Ok(start),
                        Err(ContigError::Busy { .. } | ContigError::NotInOneZone { .. }) => {}
                        Err(e) => return Err(e),
                    }
                }
                pfn += step;
            }
        }
        Err(ContigError::NoMemory { nr_pages })
    }

    /// Cheap unlocked pre-check of a candidate (Linux's
    /// `pfn_range_valid_contig`): no hole, reserved, poisoned, unmovable,
    /// CMA or isolated page. A pass is only a hint; the allocation decides.
    fn pfn_range_valid_contig(&self, zone: &Zone, pfn: u64, nr_pages: u64) -> bool {
        let Some(start) = self.mm.pfn_to_idx(Pfn(pfn)) else {
            return false;
        };
        let end = start + nr_pages as u32;
        let pb_pages = 1u32 << self.mm.mem.geometry.pageblock_order;
        let mut pb = start & !(pb_pages - 1);
        while pb < end {
            if matches!(self.mm.mem.blocks.get(pb), MigrateType::Cma | MigrateType::Isolate) {
                return false;
            }
            pb += pb_pages;
        }
        self.scan_collectable(zone, start, end, None).is_ok()
    }

    fn alloc_contig_range_common(
        &self,
        start: Pfn,
        end: Pfn,
        mt: MigrateType,
        gfp: Gfp,
        frozen: bool,
    ) -> Result<(), ContigError> {
        self.collect_contig_range(start, end, mt, gfp, if frozen { Prep::Frozen } else { Prep::Referenced })
    }

    /// Collects `[start, end)` and hands its pages out as `prep` says.
    pub(crate) fn collect_contig_range(
        &self,
        start: Pfn,
        end: Pfn,
        mt: MigrateType,
        gfp: Gfp,
        prep: Prep,
    ) -> Result<(), ContigError> {
        let migration_gfp = contig_migration_gfp(gfp)?;
        if !matches!(mt, MigrateType::Movable | MigrateType::Cma) {
            return Err(ContigError::InvalidMigrateType(mt));
        }
        if start >= end {
            return Err(ContigError::InvalidRange { start, end });
        }
        let s = self.mm.pfn_to_idx(start).ok_or(ContigError::OutOfRange(start))?;
        let last = Pfn(end.0 - 1);
        let e = self.mm.pfn_to_idx(last).ok_or(ContigError::OutOfRange(last))? + 1;
        let nr_pages = end.0 - start.0;
        let compound_order = if gfp.contains(Gfp::COMP) {
            if matches!(prep, Prep::Owned(_)) {
                return Err(ContigError::InvalidGfp(Gfp::COMP));
            }
            let max_folio_order = 30u32.saturating_sub(self.mm.mem.geometry.page_shift).max(1);
            if !nr_pages.is_power_of_two()
                || start.0 & (nr_pages - 1) != 0
                || nr_pages.trailing_zeros() > max_folio_order
            {
                return Err(ContigError::BadCompoundRange { start, nr_pages });
            }
            Some(nr_pages.trailing_zeros())
        } else {
            None
        };
        let zone = self.single_zone(s, e).ok_or(ContigError::NotInOneZone { start, end })?;

        let mut movable = Vec::new();
        let isolated = self
            .start_isolate_page_range(zone, s, e, mt, &mut movable)
            .map_err(|idx| ContigError::Busy { pfn: self.mm.idx_to_pfn(idx) })?;
        crate::Cpus::new(self.mm).drain_all_pages();
        // The migrator is the embedder's code and may panic: the guard
        // gives the pageblocks their types back on the way out.
        let isolation = isolation::Isolation::new(self, zone, isolated);
        let migrated = self.migrate_out(zone, &movable, migration_gfp);
        let isolated = isolation.disarm();
        let collected = migrated.and_then(|()| {
            let cx = zone.cx(&self.mm.mem);
            let mut state = zone.state.lock();
            // Linux's test_pages_isolated + isolate_freepages_range: the
            // whole range must sit in free ISOLATE blocks, taken in one go.
            let mut idx = s;
            while idx < e {
                match state.area.enclosing_free_block(cx, idx) {
                    Some((head, order)) if self.mm.desc(head).tag() == MigrateType::Isolate as u8 => {
                        idx = head + (1 << order);
                    }
                    _ => return Err(idx),
                }
            }
            state.area.take_range(cx, s, e);
            self.unset_isolate_locked(zone, &mut state, &isolated, Some((s, e)));
            state.counters.pgalloc_pages += nr_pages;
            state.counters.pgalloc_blocks += if compound_order.is_some() { 1 } else { nr_pages };
            zone.publish(&state);
            Ok(())
        });
        if let Err(idx) = collected {
            self.undo_isolate_page_range(zone, &isolated);
            return Err(ContigError::Busy { pfn: self.mm.idx_to_pfn(idx) });
        }
        self.prep_contig_pages(s, e, compound_order, prep);
        if gfp.contains(Gfp::ZERO) {
            if let Some(mem) = &self.mm.mem.memory {
                mem.zero_pages(s as usize, nr_pages as usize);
            }
        }
        Ok(())
    }

    /// The zone holding `[s, e)` if the range, rounded out to pageblocks,
    /// touches no other zone (pageblock types are shared by every zone a
    /// pageblock touches, so isolating one must not reach into another).
    fn single_zone(&self, s: PageIdx, e: PageIdx) -> Option<&Zone> {
        let zone = self.mm.zone_of(s)?;
        if e > zone.end_idx {
            return None;
        }
        let pb_pages = 1u32 << self.mm.mem.geometry.pageblock_order;
        let (pb_start, pb_end) = (s & !(pb_pages - 1), e.next_multiple_of(pb_pages));
        let foreign =
            self.mm.zones.iter().any(|z| !core::ptr::eq(z, zone) && z.start_idx < pb_end && pb_start < z.end_idx);
        (!foreign).then_some(zone)
    }

    /// Hands each movable block to the migrator (Linux's
    /// `__alloc_contig_migrate_range`). Err is the first block that stayed.
    fn migrate_out(&self, zone: &Zone, blocks: &[(PageIdx, u32)], gfp: Gfp) -> Result<(), PageIdx> {
        let Some(migrator) = self.mm.migrator.as_deref() else {
            return blocks.first().map_or(Ok(()), |&(head, _)| Err(head));
        };
        for &(head, order) in blocks {
            let still_there = |a: &Self| matches!(a.unit_at(zone, head), Unit::InUse { head: h, .. } if h == head);
            if !still_there(self) {
                continue; // freed by its owner meanwhile
            }
            let request = MigrateRequest { pfn: self.mm.idx_to_pfn(head), order, gfp, nid: zone.nid };
            if migrator.migrate_page(self.mm, &request).is_err() && still_there(self) {
                return Err(head);
            }
        }
        Ok(())
    }

    /// Turns the pages just taken off the free lists into allocated pages,
    /// in the same state `alloc_pages` leaves them: order-0 pages each
    /// `ALLOCATED`, or one compound head with tails. They are tagged
    /// unmovable: nothing but their owner can move them, so a later
    /// contiguous request over them is refused as busy.
    fn prep_contig_pages(&self, s: PageIdx, e: PageIdx, compound_order: Option<u32>, prep: Prep) {
        let refcount = u32::from(prep == Prep::Referenced);
        let tag = MigrateType::Unmovable as u8;
        match compound_order {
            Some(order) => {
                for tail in s + 1..e {
                    let t = self.mm.desc(tail);
                    t.set_state(PageFlags::TAIL, 0, 0);
                    t.set_next(s);
                }
                let head = self.mm.desc(s);
                head.set_private(0);
                head.set_refcount(refcount);
                head.set_state(PageFlags::ALLOCATED | PageFlags::HEAD, order, tag);
            }
            None => {
                // Every page's state and refcount in one store: the pages
                // were just taken off the free lists and nobody else knows
                // them yet.
                let word = match prep {
                    Prep::Owned(owner) => DescWord::owned(PageFlags::ALLOCATED, 0, tag, owner.id(), refcount),
                    _ => DescWord::allocated(PageFlags::ALLOCATED, 0, tag, refcount),
                };
                for page in self.mm.mem.pages.slice(s, e) {
                    page.set_private(0);
                    page.hand_out(word);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A panic at each invocation of the migrator's callback, in turn,
    /// leaves no pageblock isolated and no page lost (the panic harness of
    /// `crates/mmkit-edges` in small, for Miri).
    #[cfg(feature = "std")]
    #[test]
    fn a_panicking_migrator_leaves_every_page_free_or_held() {
        use crate::types::gfp::ZoneType;
        use crate::{CopyMigrator, MemoryMapBuilder, Report};
        use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
        use std::sync::Arc;
        let mut k = 1;
        loop {
            let calls = Arc::new(AtomicU64::new(0));
            let seen = calls.clone();
            let mm = MemoryMapBuilder::new()
                .max_page_order(6)
                .pageblock_order(4)
                .section_order(10)
                .zone(0, ZoneType::Normal, 0..256)
                .min_free_kbytes(0)
                .per_cpu_lists(false)
                .migrator(CopyMigrator::new(move |_, _, _| {
                    if seen.fetch_add(1, Relaxed) + 1 == k {
                        std::panic::panic_any(k);
                    }
                }))
                .build()
                .unwrap();
            let total = crate::Report::new(&mm).nr_free_pages();
            let held: Vec<Pfn> = (0..16).map(|_| mm.alloc_pages(Gfp::HIGHUSER_MOVABLE, 0).unwrap()).collect();
            let start = Pfn(held[0].0 & !15);
            let contig = Contig::new(&mm);
            let collected = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                contig.alloc_contig_range(start, Pfn(start.0 + 16), MigrateType::Movable, Gfp::KERNEL)
            }));
            let panicked = collected.is_err();
            if let Ok(Ok(())) = collected {
                contig.free_contig_range(start, 16).unwrap();
            }
            Report::new(&mm).check_invariants().unwrap();
            assert_ne!(Report::new(&mm).pageblock_migratetype(start), Some(MigrateType::Isolate));
            for pfn in (0..256).map(Pfn) {
                if mm.page_flags(pfn).is_ok_and(|f| f.contains(PageFlags::ALLOCATED)) {
                    mm.free_pages(pfn, 0).unwrap();
                }
            }
            assert_eq!(crate::Report::new(&mm).nr_free_pages(), total, "panic at {k}: pages lost");
            if !panicked {
                assert!(k > 1, "the migrator ran");
                break;
            }
            k += 1;
        }
    }

    #[test]
    fn gfp_verification_follows_linux() {
        let cc = contig_migration_gfp(Gfp::KERNEL).unwrap();
        assert!(cc.contains(Gfp::MOVABLE | Gfp::RETRY_MAYFAIL | Gfp::RECLAIM));
        assert!(contig_migration_gfp(Gfp::KERNEL | Gfp::COMP | Gfp::ZERO).is_ok());
        assert!(contig_migration_gfp(Gfp::HIGHUSER_MOVABLE).is_ok(), "hints ignored");
        assert_eq!(
            contig_migration_gfp(Gfp::KERNEL | Gfp::NOFAIL),
            Err(ContigError::InvalidGfp(Gfp::KERNEL | Gfp::NOFAIL))
        );
        assert!(contig_migration_gfp(Gfp::ATOMIC).is_err(), "HIGH is not allowed");
        let cc = contig_migration_gfp(Gfp::KERNEL | Gfp::COMP).unwrap();
        assert!(!cc.contains(Gfp::COMP), "targets are not told about COMP");
    }
}
