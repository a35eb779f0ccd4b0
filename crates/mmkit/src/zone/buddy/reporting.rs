//! Free page reporting's edits of the free lists (Linux's
//! `page_reporting_cycle` and `__isolate_free_page`, mm/page_reporting.c and
//! mm/page_alloc.c): taking unreported free blocks off the lists so that a
//! pass can discard their memory with the zone lock dropped, and marking
//! blocks reported once they are back.
//!
//! Owns only those list edits; the pass itself (batches, the lock, the
//! discard, returning blocks through the free path) is
//! `page_alloc::reporting`'s. Like the rest of `buddy`, it takes no lock:
//! callers hold the zone lock and pass `&mut FreeArea`.
//!
//! # The flag
//! `REPORTED` lives in the head's state word (`mem::page`): the one store
//! with which `unlink_known` takes a block off a
//! list, and the one with which `link_list` puts one
//! on, both clear it. So allocating a reported block, splitting it, moving
//! it to another type's list and merging it with a buddy all leave an
//! unreported block, with no instruction added to those paths; as in
//! Linux, a merged block is reported again later, discarding its already
//! discarded half a second time (an `madvise` of pages that are not there,
//! which the OS answers from the page tables alone).
#![deny(unsafe_code)]

use super::{BuddyCtx, FreeArea};
use crate::mem::page::PageIdx;
use crate::types::gfp::MigrateType;

impl FreeArea {
    /// Takes unreported free blocks of at least `min_order` off the lists
    /// into `out` (head, order), largest orders first, until `out` is full
    /// or taking one more would leave fewer than `keep_free` free pages;
    /// returns how many it took. Each taken head gets the reporting state
    /// (`REPORTED` without `BUDDY`), so nothing merges with it or hands it
    /// out until the caller frees it again; the free counts no longer
    /// include it (the caller publishes them).
    ///
    /// Isolated pageblocks (contiguous allocation's) are left alone, as in
    /// Linux. Cost: a walk of every list of order `min_order` and above,
    /// O(free blocks of those orders), under the caller's zone lock.
    pub(crate) fn isolate_unreported(
        &mut self,
        cx: BuddyCtx<'_>,
        min_order: u32,
        keep_free: u64,
        out: &mut [(PageIdx, u32)],
    ) -> usize {
        let mut taken = 0;
        for order in (min_order..=self.max_order).rev() {
            for mt in MigrateType::ALL {
                if mt == MigrateType::Isolate || !self.has_blocks(order, mt) {
                    continue;
                }
                // Collect first: the list cannot be walked while edited.
                let start = taken;
                for idx in self.iter_list(cx, order, mt) {
                    if taken == out.len() {
                        break;
                    }
                    if !cx.pages.get(idx).is_reported() {
                        out[taken] = (idx, order);
                        taken += 1;
                    }
                }
                let mut kept = start;
                for i in start..taken {
                    let (idx, order) = out[i];
                    if self.free_pages() < keep_free + (1 << order) {
                        break;
                    }
                    self.del(cx, idx);
                    cx.pages.get(idx).set_reporting_state(order);
                    out[kept] = (idx, order);
                    kept += 1;
                }
                taken = kept;
                if taken == out.len() || self.free_pages() < keep_free + (1 << order) {
                    return taken;
                }
            }
        }
        taken
    }

    /// Marks the free block at `idx` reported if it is still a free block
    /// of `order` (freeing it back may have merged it with a free buddy:
    /// the merged block stays unreported, Linux's rule in
    /// `page_reporting_drain`). True if marked.
    pub(crate) fn mark_reported(&self, cx: BuddyCtx<'_>, idx: PageIdx, order: u32) -> bool {
        let page = cx.pages.get(idx);
        if matches!(page.free_block(), Some((o, _)) if o == order) {
            page.set_reported();
            true
        } else {
            false
        }
    }

    /// Marks every free block of at least `min_order` reported: for memory
    /// the OS has never backed (a fresh anonymous mapping at build), which
    /// a pass would otherwise discard for nothing. Returns the pages marked.
    pub(crate) fn mark_all_reported(&self, cx: BuddyCtx<'_>, min_order: u32) -> u64 {
        let mut pages = 0;
        for order in min_order..=self.max_order {
            for mt in MigrateType::ALL {
                for idx in self.iter_list(cx, order, mt) {
                    cx.pages.get(idx).set_reported();
                    pages += 1 << order;
                }
            }
        }
        pages
    }

    /// Free pages in reported blocks.
    pub(crate) fn reported_pages(&self, cx: BuddyCtx<'_>, min_order: u32) -> u64 {
        let mut pages = 0;
        for order in min_order..=self.max_order {
            for mt in MigrateType::ALL {
                pages += self.iter_list(cx, order, mt).filter(|&idx| cx.pages.get(idx).is_reported()).count() as u64
                    * (1 << order);
            }
        }
        pages
    }
}

#[cfg(test)]
mod tests {
    use super::super::Placement;
    use super::*;
    use crate::mem::page::PageTable;
    use crate::mem::pageblock::PageblockMap;

    /// 64 pages, pageblocks of 4, blocks up to order 4.
    fn fixture() -> (PageTable, PageblockMap) {
        (PageTable::try_new_zeroed(64).unwrap(), PageblockMap::try_new(64, 2, MigrateType::Movable).unwrap())
    }

    fn cx<'a>(pages: &'a PageTable, blocks: &'a PageblockMap) -> BuddyCtx<'a> {
        BuddyCtx { pages: pages.descs(), blocks, start: 0, end: 64, max_order: 4, pageblock_order: 2 }
    }

    #[test]
    fn isolates_unreported_blocks_and_keeps_a_reserve() {
        let (pages, blocks) = fixture();
        let cx = cx(&pages, &blocks);
        let mut area = FreeArea::new(4);
        area.free_range(cx, 0, 64, Placement::Tail);
        let mut out = [(0, 0); 8];
        // Keep 40 pages free: only one order-4 block (16 pages) may go.
        assert_eq!(area.isolate_unreported(cx, 2, 40, &mut out), 1);
        assert_eq!(area.free_pages(), 48);
        let (idx, order) = out[0];
        assert_eq!(order, 4);
        assert!(pages.get(idx).is_reported() && pages.get(idx).free_block().is_none());
        // Back through the free path, then marked: no longer a candidate.
        pages.get(idx).clear_reporting_state();
        area.free_one(cx, idx, order, Placement::Tail);
        assert!(area.mark_reported(cx, idx, order));
        assert_eq!(area.reported_pages(cx, 2), 16);
        assert_eq!(area.isolate_unreported(cx, 2, 0, &mut out), 3, "the three others");
        for &(idx, order) in &out[..3] {
            pages.get(idx).clear_reporting_state();
            area.free_one(cx, idx, order, Placement::Tail);
            area.mark_reported(cx, idx, order);
        }
        assert_eq!(area.reported_pages(cx, 2), 64);
        assert_eq!(area.isolate_unreported(cx, 2, 0, &mut out), 0, "nothing is reported twice");
    }

    #[test]
    fn allocation_and_merging_clear_the_flag() {
        let (pages, blocks) = fixture();
        let cx = cx(&pages, &blocks);
        let mut area = FreeArea::new(4);
        area.free_range(cx, 0, 64, Placement::Tail);
        assert_eq!(area.mark_all_reported(cx, 2), 64);
        // Splitting a reported block for an order-0 request: the halves
        // left on the lists are unreported, the page handed out too.
        let got = area.rmqueue_smallest(cx, 0, MigrateType::Movable).unwrap();
        assert!(!pages.get(got).is_reported());
        assert_eq!(area.reported_pages(cx, 2), 48);
        // Freeing it merges everything back into an unreported order-4 block.
        pages.get(got).set_free_state(crate::mem::page::PageFlags::EMPTY, 0, 0);
        area.free_one(cx, got, 0, Placement::Tail);
        assert_eq!(area.reported_pages(cx, 2), 48);
        let head = got & !15;
        assert_eq!(pages.get(head).free_block().map(|b| b.0), Some(4));
        assert!(!pages.get(head).is_reported(), "a merged block is not reported");
    }
}
