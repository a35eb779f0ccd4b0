//! Buddy free areas: the free lists of one zone and the split/merge algorithm.
//!
//! Owns `FreeArea` — one intrusive, index-linked list per (order, migratetype)
//! with O(1) insert and remove — and the operations that keep it a valid buddy
//! system: `free_one` (merge upward), `expand` (split downward),
//! `rmqueue_smallest`, moving a pageblock's free pages between lists, and
//! taking one page (hardware poison) or a PFN range (contiguous allocation)
//! out of the free blocks; for isolation, splitting a free block into
//! pageblocks and merging a pageblock again afterwards.
//!
//! Which block of a list is taken is the map's placement policy: the list
//! head (Linux) or, with an address index (`placement::AddrIndex`) kept
//! beside the lists, the lowest or highest PFN ([`FreeArea::pick`]).
//!
//! It does not decide *which* list to take from (fallback, reserves and
//! watermarks are the zone layer's) and never takes a lock: callers hold the
//! zone lock and pass `&mut FreeArea`.
//!
//! # Invariants (checked by `PageAllocator::check_invariants`)
//! - A page heads a free block iff it has `BUDDY`; its order and list
//!   migratetype are in its descriptor; it is on exactly that list.
//! - `free_pages == Σ over lists of (blocks × 2^order)`, likewise per type.
//! - A free block is naturally aligned, lies inside the zone, never crosses a
//!   memory section, and every pageblock it touches has its list's type.
//! - Two free buddies of equal order are never left unmerged when merging is
//!   allowed (same zone, below the merge limit, compatible types).
#![deny(unsafe_code)]

use crate::mem::list::PageList;
use crate::mem::page::{PageFlags, PageIdx, PageTable};
use crate::mem::pageblock::PageblockMap;
use crate::types::gfp::{MigrateType, MIGRATE_TYPES};
use crate::types::placement::{CompactionMode, PlacementPolicy};
use crate::zone::placement::{AddrIndex, PageblockFree, PlacementCounters};
use alloc::vec;
use alloc::vec::Vec;

/// Read-only view of what the buddy algorithm needs besides its lists.
#[derive(Clone, Copy)]
pub(crate) struct BuddyCtx<'a> {
    pub pages: &'a PageTable,
    pub blocks: &'a PageblockMap,
    /// First descriptor index of the zone.
    pub start: PageIdx,
    /// One past the zone's last descriptor index.
    pub end: PageIdx,
    /// Largest order a free block may have: min(MAX_PAGE_ORDER, section order).
    pub max_order: u32,
    pub pageblock_order: u32,
}

/// Where a freed block goes on its list.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Placement {
    /// Decide by whether a higher-order merge looks likely (Linux's
    /// `buddy_merge_likely`): likely → tail, so it stays free longer.
    Auto,
    /// Always at the tail (freeing a whole range at once).
    Tail,
}

/// Lists of free blocks of one zone. See the module doc for its invariants.
pub(crate) struct FreeArea {
    lists: Vec<PageList>,
    /// Blocks per list, indexed like `heads`.
    nr_blocks: Vec<u64>,
    free_pages: u64,
    free_pages_by_type: [u64; MIGRATE_TYPES],
    max_order: u32,
    /// How [`pick`](Self::pick) chooses among a list's blocks.
    policy: PlacementPolicy,
    /// The free blocks by address, for address-ordered policies.
    index: Option<AddrIndex>,
    /// Free pages per pageblock, for sparsest-first compaction.
    pageblock_free: Option<PageblockFree>,
    /// Where pageblock-sized blocks were broken (instrumentation).
    pub(crate) placement: PlacementCounters,
}

#[inline]
fn slot(order: u32, mt: MigrateType) -> usize {
    order as usize * MIGRATE_TYPES + mt as usize
}

impl FreeArea {
    /// Empty lists for orders `0..=max_order`.
    pub(crate) fn new(max_order: u32) -> Self {
        let n = (max_order as usize + 1) * MIGRATE_TYPES;
        Self {
            lists: vec![PageList::EMPTY; n],
            nr_blocks: vec![0; n],
            free_pages: 0,
            free_pages_by_type: [0; MIGRATE_TYPES],
            max_order,
            policy: PlacementPolicy::Linux,
            index: None,
            pageblock_free: None,
            placement: PlacementCounters::default(),
        }
    }

    /// Sets the placement policy for a zone over descriptor indices
    /// `[start, end)`; call while the lists are still empty.
    pub(crate) fn set_policy(&mut self, policy: PlacementPolicy, start: PageIdx, end: PageIdx, pageblock_order: u32) {
        debug_assert_eq!(self.free_pages, 0, "set the policy before freeing memory");
        self.policy = policy;
        self.index = policy.address_ordered().then(|| AddrIndex::new(start, end, self.max_order));
        self.pageblock_free = (policy.compaction() == CompactionMode::SparsestFirst)
            .then(|| PageblockFree::new(start, end, pageblock_order));
    }

    /// The free pages per pageblock, when the policy keeps them
    /// (sparsest-first compaction).
    pub(crate) fn pageblock_free(&self) -> Option<&PageblockFree> {
        self.pageblock_free.as_ref()
    }

    /// The placement policy in force.
    pub(crate) fn policy(&self) -> PlacementPolicy {
        self.policy
    }

    /// Highest order with a list.
    #[inline]
    pub(crate) fn max_order(&self) -> u32 {
        self.max_order
    }

    /// Free pages in the zone.
    #[inline]
    pub(crate) fn free_pages(&self) -> u64 {
        self.free_pages
    }

    /// Free pages on lists of one migratetype.
    #[inline]
    pub(crate) fn free_pages_of(&self, mt: MigrateType) -> u64 {
        self.free_pages_by_type[mt as usize]
    }

    /// Free blocks of `order` on list `mt`.
    #[inline]
    pub(crate) fn nr_blocks(&self, order: u32, mt: MigrateType) -> u64 {
        self.nr_blocks[slot(order, mt)]
    }

    /// Free blocks of `order`, all types (Linux's `free_area[order].nr_free`).
    pub(crate) fn nr_free(&self, order: u32) -> u64 {
        MigrateType::ALL.iter().map(|&mt| self.nr_blocks(order, mt)).sum()
    }

    /// The block of list (`order`, `mt`) a request of type `mt` gets: see
    /// [`pick`](Self::pick).
    #[inline]
    pub(crate) fn first(&self, order: u32, mt: MigrateType) -> Option<PageIdx> {
        self.pick(order, mt, mt)
    }

    /// The block of list (`order`, `list`) the policy gives a request of
    /// type `requester`: the list head (Linux), else the lowest PFN, or the
    /// highest for requests the policy places top-down.
    #[inline]
    pub(crate) fn pick(&self, order: u32, list: MigrateType, requester: MigrateType) -> Option<PageIdx> {
        match &self.index {
            None => self.lists[slot(order, list)].first(),
            Some(index) => index.pick(slot(order, list), order, self.policy.top_down(requester as usize)),
        }
    }

    /// Blocks on one list, head to tail (for invariant checks and tests).
    pub(crate) fn iter_list<'a>(
        &'a self,
        cx: BuddyCtx<'a>,
        order: u32,
        mt: MigrateType,
    ) -> impl Iterator<Item = PageIdx> + 'a {
        self.lists[slot(order, mt)].iter(cx.pages)
    }

    /// Puts block `idx` of `order` on list `mt` and marks it free.
    pub(crate) fn add(&mut self, cx: BuddyCtx<'_>, idx: PageIdx, order: u32, mt: MigrateType, at_tail: bool) {
        let s = slot(order, mt);
        let page = cx.pages.get(idx);
        page.set_state(PageFlags::BUDDY, order, mt as u8);
        if at_tail {
            self.lists[s].push_tail(cx.pages, idx, page);
        } else {
            self.lists[s].push_head(cx.pages, idx, page);
        }
        if let Some(index) = &mut self.index {
            index.insert(s, idx, order);
        }
        if let Some(counts) = &mut self.pageblock_free {
            counts.update(idx, order, true);
        }
        self.nr_blocks[s] += 1;
        self.free_pages += 1 << order;
        self.free_pages_by_type[mt as usize] += 1 << order;
    }

    /// Takes free block `idx` off its list and clears its free marking.
    pub(crate) fn del(&mut self, cx: BuddyCtx<'_>, idx: PageIdx) {
        let page = cx.pages.get(idx);
        debug_assert!(page.has(PageFlags::BUDDY));
        let order = page.order();
        let mt = MigrateType::from_index(page.tag() as usize).unwrap_or(MigrateType::Unmovable);
        let s = slot(order, mt);
        self.lists[s].unlink(cx.pages, page);
        if let Some(index) = &mut self.index {
            index.remove(s, idx, order);
        }
        if let Some(counts) = &mut self.pageblock_free {
            counts.update(idx, order, false);
        }
        page.set_state(PageFlags::EMPTY, 0, 0);
        self.nr_blocks[s] -= 1;
        self.free_pages -= 1 << order;
        self.free_pages_by_type[mt as usize] -= 1 << order;
    }

    /// Moves free block `idx` to the list of `mt`, keeping its order.
    pub(crate) fn move_to(&mut self, cx: BuddyCtx<'_>, idx: PageIdx, mt: MigrateType) {
        let order = cx.pages.get(idx).order();
        self.del(cx, idx);
        self.add(cx, idx, order, mt, true);
    }

    /// Splits block `idx` of order `high` down to order `low`, returning the
    /// upper halves to list `mt`. The caller owns `[idx, idx + 2^low)`.
    pub(crate) fn expand(&mut self, cx: BuddyCtx<'_>, idx: PageIdx, low: u32, high: u32, mt: MigrateType) {
        if high >= cx.pageblock_order && low < cx.pageblock_order {
            self.placement.note_break(low, mt as usize);
        }
        let mut order = high;
        while order > low {
            order -= 1;
            self.add(cx, idx + (1 << order), order, mt, false);
        }
    }

    /// Splits block `idx` of order `high` down to `low` for a request of
    /// type `requester` and returns the part the request gets: the lowest
    /// one, or the highest when the policy places `requester` top-down
    /// (the other halves go to list `mt` either way).
    pub(crate) fn expand_for(
        &mut self,
        cx: BuddyCtx<'_>,
        idx: PageIdx,
        (low, high): (u32, u32),
        mt: MigrateType,
        requester: MigrateType,
    ) -> PageIdx {
        if !self.policy.top_down(requester as usize) {
            self.expand(cx, idx, low, high, mt);
            return idx;
        }
        if high >= cx.pageblock_order && low < cx.pageblock_order {
            self.placement.note_break(low, mt as usize);
        }
        let mut order = high;
        let mut head = idx;
        while order > low {
            order -= 1;
            self.add(cx, head, order, mt, false);
            head += 1 << order;
        }
        head
    }

    /// Takes the smallest block of at least `order` from list `mt` and splits
    /// it to `order` (Linux's `__rmqueue_smallest`); which block and which
    /// part of it is the placement policy's.
    pub(crate) fn rmqueue_smallest(&mut self, cx: BuddyCtx<'_>, order: u32, mt: MigrateType) -> Option<PageIdx> {
        for current in order..=cx.max_order {
            if let Some(idx) = self.first(current, mt) {
                self.del(cx, idx);
                return Some(self.expand_for(cx, idx, (order, current), mt, mt));
            }
        }
        None
    }

    /// Returns block `idx` of `order` to the free lists, merging with free
    /// buddies as far as allowed (Linux's `__free_one_page`). The descriptors
    /// must already be prepared (flags clear, refcount zero).
    pub(crate) fn free_one(&mut self, cx: BuddyCtx<'_>, idx: PageIdx, order: u32, placement: Placement) {
        // A block larger than a pageblock may span pageblocks of different
        // types: free it a pageblock at a time so each piece lands on its own
        // type's list, then let merging rebuild the large block.
        if order > cx.pageblock_order {
            let step = 1u32 << cx.pageblock_order;
            for piece in 0..(1u32 << (order - cx.pageblock_order)) {
                self.free_one(cx, idx + piece * step, cx.pageblock_order, placement);
            }
            return;
        }
        let mut idx = idx;
        let mut order = order;
        let mt = cx.blocks.get(idx);
        while order < cx.max_order {
            let buddy = idx ^ (1 << order);
            if buddy < cx.start || buddy + (1 << order) > cx.end {
                break;
            }
            let b = cx.pages.get(buddy);
            if !b.has(PageFlags::BUDDY) || b.order() != order {
                break;
            }
            let buddy_mt = MigrateType::from_index(b.tag() as usize).unwrap_or(MigrateType::Unmovable);
            if !types_may_merge(order, cx.pageblock_order, mt, buddy_mt) {
                break;
            }
            self.del(cx, buddy);
            if buddy_mt != mt {
                // The buddy adopts our type so that the merged block's
                // pageblocks all match its list.
                set_range_type(cx, buddy, order, mt);
            }
            idx = idx.min(buddy);
            order += 1;
        }
        let at_tail = match placement {
            Placement::Tail => true,
            Placement::Auto => self.merge_likely(cx, idx, order),
        };
        self.add(cx, idx, order, mt, at_tail);
    }

    /// Whether the block's parent has a free buddy, so that one more free
    /// page would merge two orders up; such blocks go to the list tail.
    fn merge_likely(&self, cx: BuddyCtx<'_>, idx: PageIdx, order: u32) -> bool {
        if order + 2 > cx.max_order {
            return false;
        }
        let parent = idx & !((1 << (order + 1)) - 1);
        let uncle = parent ^ (1 << (order + 1));
        if uncle < cx.start || uncle + (1 << (order + 1)) > cx.end {
            return false;
        }
        let u = cx.pages.get(uncle);
        u.has(PageFlags::BUDDY) && u.order() == order + 1
    }

    /// Frees `[idx, idx + count)` as the largest naturally aligned chunks
    /// (order = min(alignment of the index, log2 of what is left, max
    /// order)), each through [`free_one`](Self::free_one). Pages must be
    /// prepared and the range must not cross a section.
    pub(crate) fn free_range(&mut self, cx: BuddyCtx<'_>, idx: PageIdx, count: u32, placement: Placement) {
        let mut idx = idx;
        let mut left = count;
        while left > 0 {
            let order = chunk_order(idx, left, cx.max_order);
            self.free_one(cx, idx, order, placement);
            idx += 1 << order;
            left -= 1 << order;
        }
    }

    /// Free block containing page `idx`, as (head, order).
    pub(crate) fn enclosing_free_block(&self, cx: BuddyCtx<'_>, idx: PageIdx) -> Option<(PageIdx, u32)> {
        for order in 0..=cx.max_order {
            let head = idx & !((1u32 << order) - 1);
            if head < cx.start {
                return None;
            }
            let p = cx.pages.get(head);
            if p.has(PageFlags::BUDDY) {
                let size = 1u32 << p.order();
                return (idx < head + size).then_some((head, p.order()));
            }
        }
        None
    }

    /// Removes the single page `idx` from the free block containing it,
    /// returning the rest of the block to the lists. False if `idx` is not
    /// free (Linux's `take_page_off_buddy`).
    pub(crate) fn take_page(&mut self, cx: BuddyCtx<'_>, idx: PageIdx) -> bool {
        let Some((mut head, mut order)) = self.enclosing_free_block(cx, idx) else {
            return false;
        };
        let mt = MigrateType::from_index(cx.pages.get(head).tag() as usize).unwrap_or(MigrateType::Unmovable);
        self.del(cx, head);
        while order > 0 {
            order -= 1;
            let half = 1u32 << order;
            if idx < head + half {
                self.add(cx, head + half, order, mt, false);
            } else {
                self.add(cx, head, order, mt, false);
                head += half;
            }
        }
        true
    }

    /// Moves every free block inside the pageblock starting at `block_start`
    /// to the list of `mt`; returns the number of free pages moved. Free
    /// blocks larger than a pageblock are the caller's to split first.
    pub(crate) fn move_freepages_block(&mut self, cx: BuddyCtx<'_>, block_start: PageIdx, mt: MigrateType) -> u64 {
        self.move_freepages(cx, block_start, block_start + (1 << cx.pageblock_order), mt)
    }

    /// Moves every free block inside `[start, end)` of one pageblock to the
    /// list of `mt`; returns the number of free pages moved. No free block
    /// may straddle `start` or `end`.
    pub(crate) fn move_freepages(&mut self, cx: BuddyCtx<'_>, start: PageIdx, end: PageIdx, mt: MigrateType) -> u64 {
        let end = end.min(cx.end);
        let mut idx = start.max(cx.start);
        let mut moved = 0;
        while idx < end {
            let p = cx.pages.get(idx);
            if p.has(PageFlags::BUDDY) {
                let order = p.order();
                if p.tag() != mt as u8 {
                    self.move_to(cx, idx, mt);
                }
                moved += 1u64 << order;
                idx += 1 << order;
            } else {
                idx += 1;
            }
        }
        moved
    }

    /// If the pageblock at `pb_start` lies inside a free block larger than a
    /// pageblock, splits that block down to the pageblock, so that the
    /// pageblock's type can change on its own. Like `take_page`, only the
    /// halves on the way down are split: the others go back whole, so that
    /// freeing the pageblock again rebuilds the original block. Returns
    /// whether a block was split.
    pub(crate) fn split_to_pageblocks(&mut self, cx: BuddyCtx<'_>, pb_start: PageIdx) -> bool {
        let Some((mut head, mut order)) = self.enclosing_free_block(cx, pb_start) else {
            return false;
        };
        if order <= cx.pageblock_order {
            return false;
        }
        let mt = MigrateType::from_index(cx.pages.get(head).tag() as usize).unwrap_or(MigrateType::Unmovable);
        self.del(cx, head);
        while order > cx.pageblock_order {
            order -= 1;
            let half = 1u32 << order;
            if pb_start < head + half {
                self.add(cx, head + half, order, mt, false);
            } else {
                self.add(cx, head, order, mt, false);
                head += half;
            }
        }
        self.add(cx, head, order, mt, false);
        true
    }

    /// Gives a whole free pageblock at `pb_start` another chance to merge
    /// with its buddies (after its type changed back from ISOLATE, Linux's
    /// `unset_migratetype_isolate`). Smaller blocks inside a pageblock are
    /// already merged as far as they can be, so only a block of exactly
    /// pageblock order needs it.
    pub(crate) fn remerge_pageblock(&mut self, cx: BuddyCtx<'_>, pb_start: PageIdx) {
        let page = cx.pages.get(pb_start);
        if pb_start < cx.start
            || pb_start + (1 << cx.pageblock_order) > cx.end
            || !page.has(PageFlags::BUDDY)
            || page.order() != cx.pageblock_order
        {
            return;
        }
        self.del(cx, pb_start);
        self.free_one(cx, pb_start, cx.pageblock_order, Placement::Auto);
    }

    /// Takes every page of `[start, end)` off the free lists. The caller has
    /// checked (under the same lock) that each page lies in a free block.
    /// Parts of those blocks outside the range go back to the list they came
    /// from as aligned chunks; they cannot merge, because their buddies are
    /// the pages just taken.
    pub(crate) fn take_range(&mut self, cx: BuddyCtx<'_>, start: PageIdx, end: PageIdx) {
        let mut idx = start;
        while idx < end {
            let Some((head, order)) = self.enclosing_free_block(cx, idx) else {
                debug_assert!(false, "take_range: page {idx} is not free");
                idx += 1;
                continue;
            };
            let mt = MigrateType::from_index(cx.pages.get(head).tag() as usize).unwrap_or(MigrateType::Unmovable);
            let block_end = head + (1 << order);
            self.del(cx, head);
            self.add_aligned(cx, head, idx - head, mt);
            if block_end > end {
                self.add_aligned(cx, end, block_end - end, mt);
            }
            idx = block_end;
        }
    }

    /// Puts `[idx, idx + count)` on list `mt` as the largest aligned chunks,
    /// without trying to merge.
    fn add_aligned(&mut self, cx: BuddyCtx<'_>, idx: PageIdx, count: u32, mt: MigrateType) {
        let mut idx = idx;
        let mut left = count;
        while left > 0 {
            let order = chunk_order(idx, left, cx.max_order);
            self.add(cx, idx, order, mt, false);
            idx += 1 << order;
            left -= 1 << order;
        }
    }
}

/// Whether free buddies of `order` on lists `mt` and `buddy_mt` may merge.
/// Below pageblock order both lie in one pageblock (same type). At and
/// above it, isolated, CMA and highatomic blocks keep their identity;
/// ordinary types may merge.
#[inline]
pub(crate) fn types_may_merge(order: u32, pageblock_order: u32, mt: MigrateType, buddy_mt: MigrateType) -> bool {
    order < pageblock_order || mt == buddy_mt || (mt.is_pcp_type() && buddy_mt.is_pcp_type())
}

/// Order of the largest naturally aligned chunk at `idx` no bigger than `left`.
#[inline]
pub(crate) fn chunk_order(idx: PageIdx, left: u32, max_order: u32) -> u32 {
    let align = if idx == 0 { max_order } else { idx.trailing_zeros() };
    let fits = 31 - left.leading_zeros();
    align.min(fits).min(max_order)
}

/// Sets every pageblock of block (`idx`, `order`) to `mt` (at least one).
pub(crate) fn set_range_type(cx: BuddyCtx<'_>, idx: PageIdx, order: u32, mt: MigrateType) {
    let pb = 1u32 << cx.pageblock_order;
    let mut at = idx;
    let end = idx + (1 << order);
    loop {
        cx.blocks.set(at, mt);
        at += pb;
        if at >= end {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixture {
        pages: PageTable,
        blocks: PageblockMap,
    }

    impl Fixture {
        fn new(n: usize) -> Self {
            Self { pages: PageTable::new_zeroed(n), blocks: PageblockMap::new(n, 2, MigrateType::Movable) }
        }
        fn cx(&self, max_order: u32) -> BuddyCtx<'_> {
            BuddyCtx {
                pages: &self.pages,
                blocks: &self.blocks,
                start: 0,
                end: self.pages.len() as u32,
                max_order,
                pageblock_order: 2,
            }
        }
    }

    #[test]
    fn chunk_orders_follow_alignment_and_size() {
        assert_eq!(chunk_order(0, 16, 10), 4);
        assert_eq!(chunk_order(4, 16, 10), 2);
        assert_eq!(chunk_order(8, 3, 10), 1);
        assert_eq!(chunk_order(1 << 12, 1 << 12, 10), 10);
        assert_eq!(chunk_order(7, 100, 10), 0);
    }

    #[test]
    fn freeing_every_page_merges_to_max_order() {
        let f = Fixture::new(64);
        let cx = f.cx(4);
        let mut area = FreeArea::new(4);
        for i in 0..64 {
            area.free_one(cx, i, 0, Placement::Auto);
        }
        assert_eq!(area.free_pages(), 64);
        assert_eq!(area.nr_free(4), 4);
        for o in 0..4 {
            assert_eq!(area.nr_free(o), 0, "order {o} left unmerged");
        }
    }

    #[test]
    fn split_and_take_back() {
        let f = Fixture::new(16);
        let cx = f.cx(4);
        let mut area = FreeArea::new(4);
        area.free_range(cx, 0, 16, Placement::Tail);
        let a = area.rmqueue_smallest(cx, 0, MigrateType::Movable).unwrap();
        assert_eq!(a, 0);
        assert_eq!(area.free_pages(), 15);
        assert_eq!((0..4).map(|o| area.nr_free(o)).collect::<Vec<_>>(), vec![1, 1, 1, 1]);
        area.free_one(cx, a, 0, Placement::Auto);
        assert_eq!(area.nr_free(4), 1);
        assert!(area.rmqueue_smallest(cx, 0, MigrateType::Unmovable).is_none());
    }

    #[test]
    fn take_page_leaves_the_rest_free() {
        let f = Fixture::new(16);
        let cx = f.cx(4);
        let mut area = FreeArea::new(4);
        area.free_range(cx, 0, 16, Placement::Tail);
        assert!(area.take_page(cx, 5));
        assert!(!area.take_page(cx, 5), "already taken");
        assert_eq!(area.free_pages(), 15);
        assert_eq!(area.enclosing_free_block(cx, 5), None);
        assert_eq!(area.enclosing_free_block(cx, 4), Some((4, 0)));
        assert_eq!(area.enclosing_free_block(cx, 12), Some((8, 3)));
    }

    #[test]
    fn isolated_blocks_do_not_merge_with_other_types() {
        let f = Fixture::new(16);
        let cx = f.cx(4);
        f.blocks.set(4, MigrateType::Isolate);
        let mut area = FreeArea::new(4);
        area.free_range(cx, 0, 8, Placement::Tail);
        assert_eq!(area.nr_blocks(2, MigrateType::Movable), 1);
        assert_eq!(area.nr_blocks(2, MigrateType::Isolate), 1);
        let f = Fixture::new(16);
        let cx = f.cx(4);
        f.blocks.set(4, MigrateType::Unmovable);
        let mut area = FreeArea::new(4);
        area.free_range(cx, 0, 8, Placement::Tail);
        // Page 4's pageblock is freed second, so its buddy adopts its type.
        assert_eq!(area.nr_blocks(3, MigrateType::Unmovable), 1, "pcp types merge");
        assert_eq!(f.blocks.get(0), MigrateType::Unmovable, "buddy adopted the type");
    }

    #[test]
    fn split_isolate_and_remerge_pageblocks() {
        let f = Fixture::new(16);
        let cx = f.cx(4);
        let mut area = FreeArea::new(4);
        area.free_range(cx, 0, 16, Placement::Tail);
        assert!(area.split_to_pageblocks(cx, 8));
        assert_eq!(area.nr_blocks(2, MigrateType::Movable), 2);
        assert_eq!(area.nr_blocks(3, MigrateType::Movable), 1);
        assert!(!area.split_to_pageblocks(cx, 8), "already pageblock-sized");
        f.blocks.set(8, MigrateType::Isolate);
        assert_eq!(area.move_freepages_block(cx, 8, MigrateType::Isolate), 4);
        f.blocks.set(8, MigrateType::Movable);
        area.move_freepages_block(cx, 8, MigrateType::Movable);
        for pb in [0, 4, 8, 12] {
            area.remerge_pageblock(cx, pb);
        }
        assert_eq!(area.nr_free(4), 1, "one block again");
        assert_eq!(area.free_pages(), 16);
    }

    #[test]
    fn take_range_returns_the_outside_parts() {
        let f = Fixture::new(16);
        let cx = f.cx(4);
        let mut area = FreeArea::new(4);
        area.free_range(cx, 0, 16, Placement::Tail);
        area.take_range(cx, 3, 6);
        assert_eq!(area.free_pages(), 13);
        assert_eq!(area.enclosing_free_block(cx, 0), Some((0, 1)));
        assert_eq!(area.enclosing_free_block(cx, 2), Some((2, 0)));
        assert_eq!(area.enclosing_free_block(cx, 3), None);
        assert_eq!(area.enclosing_free_block(cx, 5), None);
        assert_eq!(area.enclosing_free_block(cx, 6), Some((6, 1)));
        assert_eq!(area.enclosing_free_block(cx, 9), Some((8, 3)));
    }

    #[test]
    fn merge_stops_at_zone_edge() {
        let f = Fixture::new(16);
        let mut cx = f.cx(4);
        cx.start = 4;
        let mut area = FreeArea::new(4);
        area.free_range(cx, 4, 12, Placement::Tail);
        assert_eq!(area.nr_free(2), 1);
        assert_eq!(area.nr_free(3), 1);
        assert_eq!(area.free_pages(), 12);
    }
}
