//! Buddy free areas: the free lists of one zone and the split/merge algorithm.
//!
//! Owns `FreeArea` — one intrusive, index-linked list per (order, migratetype)
//! with O(1) insert and remove — and the operations that keep it a valid buddy
//! system: `free_one` (merge upward), `expand_for` (split downward),
//! `rmqueue_smallest`, moving a pageblock's free pages between lists, and
//! taking one page (hardware poison) or a PFN range (contiguous allocation)
//! out of the free blocks; for isolation, splitting a free block into
//! pageblocks and merging a pageblock again afterwards; free page
//! reporting's list edits (`buddy/reporting.rs`).
//!
//! Which block of a list is taken is the map's placement policy: the list
//! head (Linux) or, with an address index (`placement::AddrIndex`) kept
//! beside the lists, the lowest or highest PFN ([`FreeArea::pick`]).
//!
//! It does not decide *which* list to take from (fallback, reserves and
//! watermarks are the zone layer's) and never takes a lock: callers hold the
//! zone lock and pass `&mut FreeArea`.
//!
//! # Invariants (checked by `Report::check_invariants`)
//! - A page heads a free block iff it has `BUDDY`; its order and list
//!   migratetype are in its descriptor; it is on exactly that list.
//! - Free pages of a type `== Σ over its lists of (blocks × 2^order)`.
//! - A free block is naturally aligned, lies inside the zone, never crosses a
//!   memory section, and every pageblock it touches has its list's type.
//! - Two free buddies of equal order are never left unmerged when merging is
//!   allowed (same zone, below the merge limit, compatible types).
//! - Bit `order` of `nonempty[mt]` is set iff list (`order`, `mt`) is
//!   non-empty.
//!
//! # Layout, and why
//! The lists and their block counts are fixed arrays indexed
//! `[migratetype][order & ORDER_MASK]`: `ORDER_SLOTS` is a power of two above
//! any order a geometry allows, so the masked index is provably in range and
//! the compiler drops the bounds check a `Vec` would need on every edit (and
//! the reload of its pointer after each descriptor store). Beside them, one
//! word per migratetype has a bit per non-empty order, so
//! `rmqueue_smallest`, the fallback searches and the watermark's order check
//! find the first usable order with one `trailing_zeros` instead of probing
//! each order's list (Linux's `__rmqueue_smallest` and `__rmqueue_claim`
//! loop over orders; its `free_area` has no such mask).
//!
//! `rmqueue_smallest` and `free_one` are always inlined: as calls, their
//! prologues and register spills were a fifth of a zone holder's pair
//! (`page_alloc::locked_zone`). A merge reads its buddy's flags, order and
//! tag from one load of the word, not three.
//!
//! A list edit (`link`/`unlink`) updates the list, its block count and the
//! bit. The pages-per-type counters, and the per-pageblock free counts of
//! sparsest-first compaction, change once per operation by the net amount
//! (a merge of k levels or a split is one update, not 2k); the zone total
//! is the sum of the per-type counts, read where needed instead of kept.
#![deny(unsafe_code)]

use crate::mem::list::PageList;
use crate::mem::page::{Descs, PageFlags, PageIdx};
use crate::mem::pageblock::PageblockMap;
use crate::types::geometry::MAX_PAGE_ORDER_LIMIT;
use crate::types::gfp::{MigrateType, MIGRATE_TYPES};
use crate::types::placement::{CompactionMode, PlacementPolicy};
use crate::zone::placement::{AddrIndex, PageblockFree, PlacementCounters};

/// Order slots of the fixed arrays: a power of two above any order
/// (`Geometry::validate` caps `max_page_order`), so `order & ORDER_MASK`
/// indexes without a bounds check and one `u32` holds an order mask.
const ORDER_SLOTS: usize = 32;
const ORDER_MASK: u32 = ORDER_SLOTS as u32 - 1;
const _: () = assert!(MAX_PAGE_ORDER_LIMIT < ORDER_SLOTS as u32);

/// Read-only view of what the buddy algorithm needs besides its lists.
#[derive(Clone, Copy)]
pub(crate) struct BuddyCtx<'a> {
    pub pages: Descs<'a>,
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
    /// The free lists, `[migratetype][order]`; orders above `max_order`
    /// stay empty.
    lists: [[PageList; ORDER_SLOTS]; MIGRATE_TYPES],
    /// Blocks per list, indexed like `lists`.
    nr_blocks: [[u64; ORDER_SLOTS]; MIGRATE_TYPES],
    /// Per migratetype, bit `order` set iff that list is non-empty.
    nonempty: [u32; MIGRATE_TYPES],
    /// Free pages per list type; the zone's total is their sum.
    free_pages_by_type: [u64; MIGRATE_TYPES],
    max_order: u32,
    /// How [`pick`](Self::pick) chooses among a list's blocks.
    policy: PlacementPolicy,
    /// The free blocks by address, for address-ordered policies.
    index: Option<AddrIndex>,
    /// Free pages per pageblock, for sparsest-first compaction.
    pageblock_free: Option<PageblockFree>,
    /// Blocks below this order count in `pageblock_free`: the pageblock
    /// order when it is kept, else 0 (a compare instead of an `Option`
    /// test on every split and merge).
    counted_below: u32,
    /// Where pageblock-sized blocks were broken (instrumentation).
    pub(crate) placement: PlacementCounters,
}

/// The address index's number for list (`order`, `mt`).
#[inline]
fn slot(order: u32, mt: MigrateType) -> usize {
    order as usize * MIGRATE_TYPES + mt as usize
}

/// The migratetype a free block's descriptor tag names.
#[inline(always)]
fn tag_type(tag: u8) -> MigrateType {
    MigrateType::from_index(tag as usize).unwrap_or(MigrateType::Unmovable)
}

impl FreeArea {
    /// Empty lists for orders `0..=max_order`.
    pub(crate) fn new(max_order: u32) -> Self {
        assert!(max_order <= MAX_PAGE_ORDER_LIMIT, "order {max_order} above the limit");
        Self {
            lists: [[PageList::EMPTY; ORDER_SLOTS]; MIGRATE_TYPES],
            nr_blocks: [[0; ORDER_SLOTS]; MIGRATE_TYPES],
            nonempty: [0; MIGRATE_TYPES],
            free_pages_by_type: [0; MIGRATE_TYPES],
            max_order,
            policy: PlacementPolicy::Linux,
            index: None,
            pageblock_free: None,
            counted_below: 0,
            placement: PlacementCounters::default(),
        }
    }

    /// Sets the placement policy for a zone over descriptor indices
    /// `[start, end)`; call while the lists are still empty.
    pub(crate) fn set_policy(&mut self, policy: PlacementPolicy, start: PageIdx, end: PageIdx, pageblock_order: u32) {
        debug_assert_eq!(self.free_pages(), 0, "set the policy before freeing memory");
        self.policy = policy;
        self.index = policy.address_ordered().then(|| AddrIndex::new(start, end, self.max_order));
        self.pageblock_free = (policy.compaction() == CompactionMode::SparsestFirst)
            .then(|| PageblockFree::new(start, end, pageblock_order));
        self.counted_below = if self.pageblock_free.is_some() { pageblock_order } else { 0 };
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
        self.free_pages_by_type.iter().sum()
    }

    /// Free pages on lists of one migratetype.
    #[inline]
    pub(crate) fn free_pages_of(&self, mt: MigrateType) -> u64 {
        self.free_pages_by_type[mt as usize]
    }

    /// Free blocks of `order` on list `mt`.
    #[inline]
    pub(crate) fn nr_blocks(&self, order: u32, mt: MigrateType) -> u64 {
        self.nr_blocks[mt as usize][(order & ORDER_MASK) as usize]
    }

    /// Free blocks of `order`, all types (Linux's `free_area[order].nr_free`).
    pub(crate) fn nr_free(&self, order: u32) -> u64 {
        MigrateType::ALL.iter().map(|&mt| self.nr_blocks(order, mt)).sum()
    }

    /// Orders whose list of `mt` is non-empty, as a bit mask.
    #[inline(always)]
    pub(crate) fn orders_of(&self, mt: MigrateType) -> u32 {
        self.nonempty[mt as usize]
    }

    /// Orders with a free block of any type, as a bit mask.
    #[inline]
    pub(crate) fn orders_any(&self) -> u32 {
        self.nonempty.iter().fold(0, |acc, &m| acc | m)
    }

    /// Whether list (`order`, `mt`) has a block.
    #[inline(always)]
    pub(crate) fn has_blocks(&self, order: u32, mt: MigrateType) -> bool {
        self.orders_of(mt) & (1 << (order & ORDER_MASK)) != 0
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
    #[inline(always)]
    pub(crate) fn pick(&self, order: u32, list: MigrateType, requester: MigrateType) -> Option<PageIdx> {
        match &self.index {
            None => self.lists[list as usize][(order & ORDER_MASK) as usize].first(),
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
        self.lists[mt as usize][(order & ORDER_MASK) as usize].iter(cx.pages)
    }

    /// Puts block `idx` of `order` on list `mt` and marks it free, without
    /// touching the page counters (the caller books the net change).
    #[inline(always)]
    fn link(&mut self, cx: BuddyCtx<'_>, idx: PageIdx, order: u32, mt: MigrateType, at_tail: bool) {
        self.link_list(cx, idx, order, mt, at_tail);
        if let Some(counts) = &mut self.pageblock_free {
            counts.update(idx, order, true);
        }
    }

    /// [`link`](Self::link) without the pageblock count, for splits and
    /// merges that book their net change once (see [`Self::pb_weight`]).
    #[inline(always)]
    fn link_list(&mut self, cx: BuddyCtx<'_>, idx: PageIdx, order: u32, mt: MigrateType, at_tail: bool) {
        debug_assert!(order <= self.max_order);
        let o = (order & ORDER_MASK) as usize;
        let page = cx.pages.get(idx);
        page.set_free_state(PageFlags::BUDDY, order, mt as u8);
        let list = &mut self.lists[mt as usize][o];
        if at_tail {
            list.push_tail(cx.pages, idx, page);
        } else {
            list.push_head(cx.pages, idx, page);
        }
        self.nr_blocks[mt as usize][o] += 1;
        self.nonempty[mt as usize] |= 1 << o;
        if let Some(index) = &mut self.index {
            index.insert(slot(order, mt), idx, order);
        }
    }

    /// Takes free block `idx` off its list and clears its free marking,
    /// without touching the page counters; returns its order and list type.
    #[inline(always)]
    fn unlink(&mut self, cx: BuddyCtx<'_>, idx: PageIdx) -> (u32, MigrateType) {
        let (order, mt) = self.unlink_list(cx, idx);
        if let Some(counts) = &mut self.pageblock_free {
            counts.update(idx, order, false);
        }
        (order, mt)
    }

    /// [`unlink`](Self::unlink) without the pageblock count.
    #[inline(always)]
    fn unlink_list(&mut self, cx: BuddyCtx<'_>, idx: PageIdx) -> (u32, MigrateType) {
        let page = cx.pages.get(idx);
        let (order, mt) = (page.order(), tag_type(page.tag()));
        self.unlink_known(cx, idx, order, mt);
        (order, mt)
    }

    /// [`unlink_list`](Self::unlink_list) of a block whose order and list
    /// the caller has just read (merging) or chosen (`rmqueue_smallest`):
    /// saves decoding them again.
    #[inline(always)]
    fn unlink_known(&mut self, cx: BuddyCtx<'_>, idx: PageIdx, order: u32, mt: MigrateType) {
        let page = cx.pages.get(idx);
        debug_assert!(page.has(PageFlags::BUDDY) && page.order() == order && page.tag() == mt as u8);
        let o = (order & ORDER_MASK) as usize;
        let list = &mut self.lists[mt as usize][o];
        list.unlink(cx.pages, page);
        if list.is_empty() {
            self.nonempty[mt as usize] &= !(1 << o);
        }
        self.nr_blocks[mt as usize][o] -= 1;
        if let Some(index) = &mut self.index {
            index.remove(slot(order, mt), idx, order);
        }
        page.set_free_state(PageFlags::EMPTY, 0, 0);
    }

    /// Puts block `idx` of `order` on list `mt` and marks it free.
    pub(crate) fn add(&mut self, cx: BuddyCtx<'_>, idx: PageIdx, order: u32, mt: MigrateType, at_tail: bool) {
        self.link(cx, idx, order, mt, at_tail);
        self.free_pages_by_type[mt as usize] += 1 << order;
    }

    /// Takes free block `idx` off its list and clears its free marking.
    pub(crate) fn del(&mut self, cx: BuddyCtx<'_>, idx: PageIdx) {
        let (order, mt) = self.unlink(cx, idx);
        self.free_pages_by_type[mt as usize] -= 1 << order;
    }

    /// Pages a free block of `order` counts in its pageblock's free count
    /// (0 when the policy keeps no counts, or from pageblock order up).
    #[inline(always)]
    fn pb_weight(&self, order: u32) -> i32 {
        if order < self.counted_below {
            1 << order
        } else {
            0
        }
    }

    /// Books a split's or merge's net change of the pageblock count once:
    /// every block below pageblock order that it links or unlinks lies in
    /// the pageblock holding `idx`.
    #[inline(always)]
    fn pb_adjust(&mut self, idx: PageIdx, delta: i32) {
        if delta != 0 {
            if let Some(counts) = &mut self.pageblock_free {
                counts.adjust(idx, delta);
            }
        }
    }

    /// Moves free block `idx` to the list of `mt`, keeping its order.
    pub(crate) fn move_to(&mut self, cx: BuddyCtx<'_>, idx: PageIdx, mt: MigrateType) {
        let (order, from) = self.unlink(cx, idx);
        self.link(cx, idx, order, mt, true);
        self.free_pages_by_type[from as usize] -= 1 << order;
        self.free_pages_by_type[mt as usize] += 1 << order;
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
        let top_down = self.policy.top_down(requester as usize);
        let got = self.split(cx, idx, (low, high), (mt, top_down), 0);
        self.free_pages_by_type[mt as usize] += (1 << high) - (1 << low);
        got
    }

    /// The list edits of a split (Linux's `expand`): links the halves not
    /// kept to list `mt` and returns the kept part's head. Page counters are
    /// the caller's; the pageblock count gets the halves' pages plus
    /// `pb_delta` (the caller's own unlink) in one update.
    #[inline(always)]
    fn split(
        &mut self,
        cx: BuddyCtx<'_>,
        idx: PageIdx,
        (low, high): (u32, u32),
        (mt, top_down): (MigrateType, bool),
        pb_delta: i32,
    ) -> PageIdx {
        if high >= cx.pageblock_order && low < cx.pageblock_order {
            self.placement.note_break(low, mt as usize);
        }
        let mut order = high;
        let mut head = idx;
        while order > low {
            order -= 1;
            if top_down {
                self.link_list(cx, head, order, mt, false);
                head += 1 << order;
            } else {
                self.link_list(cx, head + (1 << order), order, mt, false);
            }
        }
        // The halves below pageblock order (orders `low..min(high, pb)`)
        // all lie in the kept part's pageblock.
        let top = high.min(self.counted_below);
        let halves = if low < top { (1i32 << top) - (1i32 << low) } else { 0 };
        self.pb_adjust(head, pb_delta + halves);
        head
    }

    /// Takes the smallest block of at least `order` from list `mt` and splits
    /// it to `order` (Linux's `__rmqueue_smallest`, with the order loop
    /// replaced by the non-empty mask); which block and which part of it is
    /// the placement policy's.
    #[inline(always)]
    pub(crate) fn rmqueue_smallest(&mut self, cx: BuddyCtx<'_>, order: u32, mt: MigrateType) -> Option<PageIdx> {
        let usable = self.orders_of(mt) & (u32::MAX << (order & ORDER_MASK));
        if usable == 0 {
            return None;
        }
        let current = usable.trailing_zeros();
        let idx = self.pick(current, mt, mt)?;
        self.unlink_known(cx, idx, current, mt);
        self.free_pages_by_type[mt as usize] -= 1 << order;
        if current == order {
            // An exact fit (the common case on a busy zone): nothing to
            // split, and the pageblock count loses just this block.
            self.pb_adjust(idx, -self.pb_weight(order));
            return Some(idx);
        }
        let top_down = self.policy.top_down(mt as usize);
        Some(self.split(cx, idx, (order, current), (mt, top_down), -self.pb_weight(current)))
    }

    /// Returns block `idx` of `order` to the free lists, merging with free
    /// buddies as far as allowed (Linux's `__free_one_page`). The descriptors
    /// must already be prepared (flags clear, refcount zero).
    #[inline(always)]
    pub(crate) fn free_one(&mut self, cx: BuddyCtx<'_>, idx: PageIdx, order: u32, placement: Placement) {
        if order > cx.pageblock_order {
            self.free_by_pageblock(cx, idx, order, placement);
            return;
        }
        let mut idx = idx;
        let mut order = order;
        let mt = cx.blocks.get(idx);
        // The freed pages join `mt`'s count once; merged buddies only move
        // between lists (and between counts when their type differs).
        self.free_pages_by_type[mt as usize] += 1 << order;
        // Buddies below pageblock order lie in the freed block's pageblock:
        // their pages leave its count, the merged block's join it, once.
        let first = idx;
        let mut pb_delta = 0;
        while order < cx.max_order {
            let buddy = idx ^ (1 << order);
            if buddy < cx.start || buddy + (1 << order) > cx.end {
                break;
            }
            let b = cx.pages.get(buddy);
            let buddy_mt = match b.free_block() {
                Some((buddy_order, tag)) if buddy_order == order => tag_type(tag),
                _ => break,
            };
            if !types_may_merge(order, cx.pageblock_order, mt, buddy_mt) {
                break;
            }
            self.unlink_known(cx, buddy, order, buddy_mt);
            pb_delta -= self.pb_weight(order);
            if buddy_mt != mt {
                // The buddy adopts our type so that the merged block's
                // pageblocks all match its list.
                set_range_type(cx, buddy, order, mt);
                self.free_pages_by_type[buddy_mt as usize] -= 1 << order;
                self.free_pages_by_type[mt as usize] += 1 << order;
            }
            idx = idx.min(buddy);
            order += 1;
        }
        let at_tail = match placement {
            Placement::Tail => true,
            Placement::Auto => self.merge_likely(cx, idx, order),
        };
        self.link_list(cx, idx, order, mt, at_tail);
        self.pb_adjust(first, pb_delta + self.pb_weight(order));
    }

    /// A block larger than a pageblock may span pageblocks of different
    /// types: free it a pageblock at a time so each piece lands on its own
    /// type's list, then let merging rebuild the large block.
    #[cold]
    fn free_by_pageblock(&mut self, cx: BuddyCtx<'_>, idx: PageIdx, order: u32, placement: Placement) {
        let step = 1u32 << cx.pageblock_order;
        for piece in 0..(1u32 << (order - cx.pageblock_order)) {
            self.free_one(cx, idx + piece * step, cx.pageblock_order, placement);
        }
    }

    /// Whether the block's parent has a free buddy, so that one more free
    /// page would merge two orders up; such blocks go to the list tail.
    #[inline(always)]
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
        matches!(u.free_block(), Some((uncle_order, _)) if uncle_order == order + 1)
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
        let mt = tag_type(cx.pages.get(head).tag());
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
        let mt = tag_type(cx.pages.get(head).tag());
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

    /// Gives a whole free block of at least pageblock order at `pb_start`
    /// another chance to merge with its buddies, after its type changed
    /// (back from ISOLATE, Linux's `unset_migratetype_isolate`; a
    /// highatomic reserve given back): at those orders only blocks of
    /// mergeable types merge, so a type change can make a pair mergeable.
    /// Smaller blocks inside a pageblock are already merged as far as they
    /// can be.
    pub(crate) fn remerge_pageblock(&mut self, cx: BuddyCtx<'_>, pb_start: PageIdx) {
        let page = cx.pages.get(pb_start);
        if pb_start < cx.start
            || pb_start + (1 << cx.pageblock_order) > cx.end
            || !page.has(PageFlags::BUDDY)
            || page.order() < cx.pageblock_order
        {
            return;
        }
        let order = page.order();
        self.del(cx, pb_start);
        self.free_one(cx, pb_start, order, Placement::Auto);
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
            let mt = tag_type(cx.pages.get(head).tag());
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

mod reporting;
#[cfg(test)]
mod tests;
