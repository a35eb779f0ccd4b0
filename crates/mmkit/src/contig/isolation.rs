//! Pageblock isolation: fencing off the pageblocks under a PFN range so that
//! nothing allocates from them while a contiguous allocation collects the
//! range (Linux's `mm/page_isolation.c`).
//!
//! Owns the ISOLATE round trip of a pageblock: the check that the range holds
//! nothing that can never move (`has_unmovable_pages`), saving each
//! pageblock's type, moving its free pages to the ISOLATE list, and the undo
//! that restores the saved types, moves the free pages back and lets whole
//! free pageblocks merge again. Also owns the descriptor walk both steps use
//! to tell what a page belongs to.
//!
//! Everything that changes lists runs under the zone lock and goes through
//! `buddy::FreeArea`. It does not migrate pages or take the range off the
//! free lists; that is `contig`'s job.
//!
//! While a pageblock is isolated, pages freed into it land on the ISOLATE
//! list (`FreeArea::free_one` reads the pageblock type), ISOLATE free pages
//! count as unusable for watermarks, and ISOLATE blocks never merge with
//! blocks of another type at pageblock order or above.
#![deny(unsafe_code)]

use crate::contig::Contig;
use crate::mem::page::{PageFlags, PageIdx};
use crate::types::gfp::MigrateType;
use crate::zone::{Zone, ZoneState};
use alloc::vec::Vec;

/// What page `idx` belongs to, read from descriptors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unit {
    /// Inside free block (`head`, `order`).
    Free { head: PageIdx, order: u32 },
    /// Inside allocated block (`head`, `order`); `movable` when the block
    /// was allocated as movable and the embedder can migrate it.
    InUse { head: PageIdx, order: u32, movable: bool },
    /// Reserved, a hole, poisoned or leaked: it will never be free.
    Unusable,
}

/// Pageblocks isolated by [`Contig::start_isolate_page_range`] and
/// the types to give them back.
pub(crate) struct IsolatedRange {
    /// First page of the first pageblock.
    pb_start: PageIdx,
    /// Type each pageblock had before, in order.
    saved: Vec<MigrateType>,
}

/// An isolated range while code of the embedder's runs (the migrator):
/// dropped armed, as a panic unwinding through it drops it, it gives the
/// pageblocks their saved types back, as the failure path does.
pub(crate) struct Isolation<'c, 'a> {
    contig: &'c Contig<'a>,
    zone: &'c Zone,
    range: Option<IsolatedRange>,
}

impl<'c, 'a> Isolation<'c, 'a> {
    pub(crate) fn new(contig: &'c Contig<'a>, zone: &'c Zone, range: IsolatedRange) -> Self {
        Self { contig, zone, range: Some(range) }
    }

    /// The range back, isolated still: the caller goes on with it.
    pub(crate) fn disarm(mut self) -> IsolatedRange {
        // `new` stores Some and only `disarm`, which consumes the guard,
        // takes it.
        self.range.take().unwrap_or(IsolatedRange { pb_start: 0, saved: Vec::new() })
    }
}

impl Drop for Isolation<'_, '_> {
    fn drop(&mut self) {
        if let Some(range) = self.range.take() {
            self.contig.undo_isolate_page_range(self.zone, &range);
        }
    }
}

impl IsolatedRange {
    fn pageblocks(&self, pb_pages: u32) -> impl Iterator<Item = (PageIdx, MigrateType)> + '_ {
        self.saved.iter().enumerate().map(move |(i, &mt)| (self.pb_start + i as u32 * pb_pages, mt))
    }
}

impl Contig<'_> {
    /// Classifies page `idx` of `zone`. Reads descriptors without the zone
    /// lock, so a page in the middle of being allocated or freed shows as
    /// [`Unit::Unusable`]; callers treat that as busy, like Linux does.
    pub(crate) fn unit_at(&self, zone: &Zone, idx: PageIdx) -> Unit {
        let page = self.mm.desc(idx);
        let flags = page.flags();
        // A block cached on a per-CPU list is free too: the drain that
        // follows isolation returns it to the (isolated) buddy lists.
        if flags.intersects(PageFlags::BUDDY.union(PageFlags::PCP)) {
            return Unit::Free { head: idx, order: page.order() };
        }
        if flags.contains(PageFlags::ALLOCATED) {
            return self.in_use(idx);
        }
        if flags.contains(PageFlags::TAIL) {
            let head = page.next();
            return if self.mm.desc(head).has(PageFlags::ALLOCATED) { self.in_use(head) } else { Unit::Unusable };
        }
        if flags.intersects(PageFlags::HOLE.union(PageFlags::RESERVED)) {
            return Unit::Unusable;
        }
        // An inner page of a larger block: the first aligned block head
        // above it decides. A head found at a finer alignment that does not
        // cover `idx` means no larger block can.
        for order in 1..=self.mm.mem.geometry.merge_order() {
            let head = idx & !((1u32 << order) - 1);
            if head < zone.start_idx {
                break;
            }
            let h = self.mm.desc(head);
            let hf = h.flags();
            if hf.intersects(PageFlags::BUDDY.union(PageFlags::ALLOCATED).union(PageFlags::PCP)) {
                if idx >= head + (1u32 << h.order()) {
                    break;
                }
                return if hf.intersects(PageFlags::BUDDY.union(PageFlags::PCP)) {
                    Unit::Free { head, order: h.order() }
                } else {
                    self.in_use(head)
                };
            }
        }
        Unit::Unusable
    }

    fn in_use(&self, head: PageIdx) -> Unit {
        let page = self.mm.desc(head);
        // An owned movable block is a candidate too: the embedder's migrator
        // hands it to its owner (zsmalloc moves its own zspage pages, as
        // Linux's `movable_operations` do); `CopyMigrator` refuses it. A
        // page local to a pinned CPU is not: only that CPU may free it.
        let movable = page.tag() == MigrateType::Movable as u8
            && !page.has(PageFlags::HWPOISON.union(PageFlags::LOCAL))
            && self.mm.migrator.is_some();
        Unit::InUse { head, order: page.order(), movable }
    }

    /// Walks `[from, to)` block by block (Linux's `has_unmovable_pages`):
    /// the first page that cannot be collected, or Ok. Movable in-use blocks
    /// are appended to `movable` when given.
    pub(crate) fn scan_collectable(
        &self,
        zone: &Zone,
        from: PageIdx,
        to: PageIdx,
        mut movable: Option<&mut Vec<(PageIdx, u32)>>,
    ) -> Result<(), PageIdx> {
        let mut idx = from;
        while idx < to {
            match self.unit_at(zone, idx) {
                Unit::Free { head, order } => idx = head + (1 << order),
                Unit::InUse { head, order, movable: true } => {
                    if let Some(list) = movable.as_deref_mut() {
                        list.push((head, order));
                    }
                    idx = head + (1 << order);
                }
                Unit::InUse { .. } | Unit::Unusable => return Err(idx),
            }
        }
        Ok(())
    }

    /// Isolates every pageblock covering `[start, end)` of `zone`, or none.
    ///
    /// Busy (the first blocking page) when a pageblock is already isolated,
    /// when a CMA pageblock is asked for as anything but `Cma`, or when a
    /// page inside the range is in use and cannot move or will never be free.
    /// Pages of those pageblocks outside the range do not matter: they may
    /// stay in use. The check and the isolation happen under one hold of the
    /// zone lock, so on error nothing changed. On success the movable in-use
    /// blocks found in the range are appended to `movable`.
    pub(crate) fn start_isolate_page_range(
        &self,
        zone: &Zone,
        start: PageIdx,
        end: PageIdx,
        mt: MigrateType,
        movable: &mut Vec<(PageIdx, u32)>,
    ) -> Result<IsolatedRange, PageIdx> {
        let pb_pages = 1u32 << self.mm.mem.geometry.pageblock_order;
        let pb_start = start & !(pb_pages - 1);
        let pb_end = end.next_multiple_of(pb_pages);
        let cx = zone.cx(&self.mm.mem);
        let mut state = zone.state.lock();
        let mut saved = Vec::with_capacity(((pb_end - pb_start) / pb_pages) as usize);
        let mut pb = pb_start;
        while pb < pb_end {
            let old = cx.blocks.get(pb);
            let refuse = match old {
                MigrateType::Isolate => true,
                MigrateType::Cma => mt != MigrateType::Cma,
                _ => false,
            };
            if refuse {
                return Err(pb.max(start));
            }
            saved.push(old);
            pb += pb_pages;
        }
        self.scan_collectable(zone, start, end, Some(movable))?;
        let range = IsolatedRange { pb_start, saved };
        for (pb, _) in range.pageblocks(pb_pages) {
            state.area.split_to_pageblocks(cx, pb);
            cx.blocks.set(pb, MigrateType::Isolate);
            state.area.move_freepages_block(cx, pb, MigrateType::Isolate);
        }
        zone.publish(&state);
        Ok(range)
    }

    /// Gives the pageblocks of `range` their saved types back (Linux's
    /// `undo_isolate_page_range`).
    pub(crate) fn undo_isolate_page_range(&self, zone: &Zone, range: &IsolatedRange) {
        let mut state = zone.state.lock();
        self.unset_isolate_locked(zone, &mut state, range, None);
        zone.publish(&state);
    }

    /// The undo, with the zone lock held: free blocks that grew past a
    /// pageblock while isolated are split back first, then each pageblock
    /// gets its type and its free blocks back, then whole free pageblocks
    /// merge with their buddies as ordinary freeing would have merged them.
    /// `taken` is a range just taken off the free lists, with no free block
    /// straddling its ends: it holds no free page, so it is not scanned.
    pub(crate) fn unset_isolate_locked(
        &self,
        zone: &Zone,
        state: &mut ZoneState,
        range: &IsolatedRange,
        taken: Option<(PageIdx, PageIdx)>,
    ) {
        let pb_pages = 1u32 << self.mm.mem.geometry.pageblock_order;
        let cx = zone.cx(&self.mm.mem);
        for (pb, _) in range.pageblocks(pb_pages) {
            state.area.split_to_pageblocks(cx, pb);
        }
        for (pb, mt) in range.pageblocks(pb_pages) {
            cx.blocks.set(pb, mt);
            let pb_end = pb + pb_pages;
            match taken {
                Some((s, e)) if s < pb_end && pb < e => {
                    state.area.move_freepages(cx, pb, s.max(pb), mt);
                    state.area.move_freepages(cx, e.min(pb_end), pb_end, mt);
                }
                _ => {
                    state.area.move_freepages_block(cx, pb, mt);
                }
            }
        }
        for (pb, _) in range.pageblocks(pb_pages) {
            state.area.remerge_pageblock(cx, pb);
        }
    }
}
