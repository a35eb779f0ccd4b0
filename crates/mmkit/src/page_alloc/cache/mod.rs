//! The per-CPU cache: the front door of an order-0 page in both directions
//! (and of a pageblock-order block through the shared API).
//!
//! One type, [`PageCache`], with one allocation ([`take`](PageCache::take))
//! and one free ([`give`](PageCache::give)): stacks of free pages
//! (`sys::stack::PageStack`) in front of a CPU's per-CPU lists. Who holds
//! the stacks is the only thing that varies ([`Holder`]):
//!
//! - **the CPU** (`cpu.rs`): the shared API's stacks, one per (CPU, zone,
//!   pcp migratetype), edited in restartable sequences (`sys`) by whatever
//!   thread runs there; no lock, and the reference drop on free is the
//!   pair's one atomic;
//! - **a pinned handle** (`pinned.rs`): one stack owned by `&mut`, for one
//!   request mask at a time; its pages are `LOCAL` to the CPU, so the pair
//!   has no atomic at all.
//!
//! What every path checks is written here, once:
//! - the watermark, and the kswapd wake a boosted zone is owed, before a
//!   page is in hand ([`PageAllocator::fast_watermark_ok`]);
//! - hardware poison: a popped page whose flag is set or that is pending is
//!   dropped (a pageblock-order block, too many pages to look at, goes
//!   back while any poison is pending);
//! - work other threads left for the holder ([`Holder::has_requests`]: a
//!   drain or resize request for a pinned CPU, pending poison for the
//!   CPU's stacks): the cache stands aside, a free takes the slow path,
//!   an empty stack is not refilled;
//! - on free, that the page's whole word is what a take leaves (one load
//!   and compare stands for `free_pages_prepare`'s checks).
//!
//! A miss changes nothing and sends the call to the one slow path
//! (`alloc_path`: the pcp lists of `cpu.rs`, locked or held, then the
//! buddy, then the zonelist and `slowpath`). Calls that name a CPU
//! ([`CpuHandle`](crate::CpuHandle)) have no stack: the named CPU's lists
//! are reachable from any thread only under their lock, so they enter at
//! the slow path. Bulk calls and a held zone are the two explicit batch
//! paths beside this one (`bulk.rs`, `locked_zone.rs`).
#![deny(unsafe_code)]

pub(crate) mod cpu;
pub(crate) mod pinned;

use crate::mem::page::{DescWord, PageDesc, PageFlags, PageIdx};
use crate::types::gfp::{AllocFlags, Gfp, MigrateType, ZoneType};
use crate::zone::Zone;
use crate::{PageAllocator, Pfn};

/// A request resolved by a holder: which of its stacks serves it, and
/// what the fast path checks on the way.
#[derive(Clone, Copy)]
pub(crate) struct Target<'a> {
    /// The holder's stack.
    pub(crate) slot: usize,
    /// The preferred zone and its index.
    pub(crate) zi: usize,
    pub(crate) zone: &'a Zone,
    /// The request's migratetype (a pcp type).
    pub(crate) mt: MigrateType,
    /// ALLOC flags of the fast path.
    pub(crate) flags: AllocFlags,
    /// The highest zone type the request allows.
    pub(crate) highest: ZoneType,
}

/// What a pop found.
pub(crate) enum Popped {
    /// An item of the stack: the holder's name for a page.
    Item(u32),
    /// The stack is empty.
    Empty,
    /// The stack cannot be used now (stopped, pinned, no CPU number).
    Unavailable,
}

/// Who holds a cache's stacks, and what differs between holders; see the
/// module doc. `BLOCK` selects the stacks of pageblock-order blocks (only
/// the CPU holder has them). Everything here is on the hit path and is
/// always inlined, except `refill` and what `push` does when a stack is
/// full or foreign.
pub(crate) trait Holder<'a> {
    /// What [`resolve`](Self::resolve) hands back: the target itself when
    /// it is computed per call (a value the compiler keeps in registers),
    /// nothing when the holder keeps it (read field by field from the
    /// holder where used).
    type Resolved: Copy;

    /// Finds the stack that serves a request with `gfp` on node `nid`
    /// (`None`: the local node), or `None` (a miss) when this holder does
    /// not serve it. Checks no watermark.
    fn resolve<const BLOCK: bool>(
        &mut self,
        mm: &'a PageAllocator,
        nid: Option<usize>,
        gfp: Gfp,
    ) -> Option<Self::Resolved>;

    /// The target `resolved` stands for.
    fn target<'s>(&'s self, resolved: &'s Self::Resolved) -> &'s Target<'a>;

    /// Pops from the target's stack.
    fn pop<const BLOCK: bool>(&mut self, resolved: &Self::Resolved) -> Popped;

    /// Refills the target's empty stack from the lists (which refill from
    /// the buddy as usual) and keeps one page for the caller.
    fn refill<const BLOCK: bool>(&mut self, mm: &'a PageAllocator, resolved: &Self::Resolved) -> Option<u32>;

    /// Whether other threads left work for this holder (see the module
    /// doc): while they have, the cache stands aside.
    fn has_requests(&self, mm: &'a PageAllocator) -> bool;

    /// The descriptor of `item`.
    fn page(&self, mm: &'a PageAllocator, item: u32) -> Option<&'a PageDesc>;

    /// The descriptor index of `item` (computed where used: a hit needs
    /// it only on its slow branches).
    fn idx(&self, item: u32) -> PageIdx;

    /// The PFN of `item`.
    fn pfn(&self, mm: &'a PageAllocator, item: u32) -> Pfn;

    /// The whole word an order-0 take leaves in a page of the target: one
    /// reference (`LOCAL` to a pinned CPU), or none when `frozen`.
    fn word_out(&self, resolved: &Self::Resolved, frozen: bool) -> DescWord;

    /// A page left with [`word_out`](Self::word_out) (`stored`: the word
    /// was written as computed; false when `__GFP_ZERO` took the general
    /// preparation).
    fn handed_out(&mut self, stored: bool, frozen: bool);

    /// The item, index and descriptor of `pfn`, if this holder's stacks
    /// could take it back.
    fn find(&self, mm: &'a PageAllocator, pfn: Pfn) -> Option<(u32, PageIdx, &'a PageDesc)>;

    /// Whether `word` is exactly what a take of this holder leaves (a
    /// frozen take when `frozen`), for a block of the stacks' order.
    fn expects<const BLOCK: bool>(&self, mm: &'a PageAllocator, idx: PageIdx, word: DescWord, frozen: bool) -> bool;

    /// The stack a freed page of index `idx` goes on (its pageblock's pcp
    /// list), or `None` when it must take the slow path.
    fn slot_of<const BLOCK: bool>(&self, mm: &'a PageAllocator, idx: PageIdx) -> Option<(usize, MigrateType)>;

    /// Takes the page from its caller: from `word` to the cached word of
    /// `mt` (a compare-and-swap, or a plain store for the owner of a
    /// `LOCAL` page). False, with nothing changed, if another thread got
    /// there first.
    fn claim<const BLOCK: bool>(&mut self, page: &PageDesc, word: DescWord, mt: MigrateType, frozen: bool) -> bool;

    /// Puts a claimed page on stack `slot` (flushing a full stack, or
    /// sending the page to the lists when the stack cannot take it).
    fn push<const BLOCK: bool>(&mut self, mm: &'a PageAllocator, slot: usize, mt: MigrateType, item: u32, idx: PageIdx);
}

/// The per-CPU cache over holder `H`; see the module doc.
pub(crate) struct PageCache<H>(pub(crate) H);

impl<'a, H: Holder<'a>> PageCache<H> {
    /// The cache's allocation: a page of order 0 (a pageblock-order block
    /// with `BLOCK`) for `gfp` on node `nid` (`None`: the local node), with
    /// one reference or none (`frozen`). `None` is a miss that changed
    /// nothing.
    #[inline(always)]
    pub(crate) fn take<const BLOCK: bool>(
        &mut self,
        mm: &'a PageAllocator,
        nid: Option<usize>,
        gfp: Gfp,
        frozen: bool,
    ) -> Option<Pfn> {
        let holder = &mut self.0;
        let resolved = holder.resolve::<BLOCK>(mm, nid, gfp)?;
        let order = if BLOCK { mm.mem.geometry.pageblock_order } else { 0 };
        if !mm.fast_watermark_ok(holder.target(&resolved), order, gfp) {
            return None;
        }
        let item = match holder.pop::<BLOCK>(&resolved) {
            Popped::Item(item) => item,
            Popped::Empty => return Self::refill_and_take::<BLOCK>(holder, mm, &resolved, gfp, frozen),
            Popped::Unavailable => return None,
        };
        Self::hand_out::<BLOCK>(holder, mm, &resolved, item, gfp, frozen)
    }

    /// The end of a take, once a page is in hand: the poison check, the
    /// page's new word, its PFN.
    #[inline(always)]
    fn hand_out<const BLOCK: bool>(
        holder: &mut H,
        mm: &'a PageAllocator,
        resolved: &H::Resolved,
        item: u32,
        gfp: Gfp,
        frozen: bool,
    ) -> Option<Pfn> {
        let page = holder.page(mm, item)?;
        if BLOCK {
            let order = mm.mem.geometry.pageblock_order;
            if mm.hwpoison.any() {
                // Poison pending, perhaps in this block: the pop cannot
                // check its 2^order pages, and the release to the buddy
                // leaves any poisoned page out.
                let target = holder.target(resolved);
                mm.uncache_pages(None, target.zi, target.mt, order, &[holder.idx(item)]);
                return None;
            }
            mm.prep_new_page(holder.idx(item), order, gfp, holder.target(resolved).mt, frozen);
        } else {
            // The flag, or any page pending (one load each); the page's
            // index only past them.
            if (page.has(PageFlags::HWPOISON) || mm.hwpoison.any())
                && Self::drop_if_poisoned(mm, page, holder.idx(item))
            {
                return None;
            }
            let (mt, word) = (holder.target(resolved).mt, holder.word_out(resolved, frozen));
            let stored = mm.prep_order0(page, holder.idx(item), gfp, mt, word, frozen);
            holder.handed_out(stored, frozen);
        }
        Some(holder.pfn(mm, item))
    }

    /// An empty stack: refilled (unless work waits for the holder), and the
    /// take finished here, so that the hit path has no join with this one.
    #[cold]
    fn refill_and_take<const BLOCK: bool>(
        holder: &mut H,
        mm: &'a PageAllocator,
        resolved: &H::Resolved,
        gfp: Gfp,
        frozen: bool,
    ) -> Option<Pfn> {
        if holder.has_requests(mm) {
            return None;
        }
        // A boost the refill causes wakes kswapd at the next allocation's
        // check, before it takes a page: no hook runs while a page is in
        // hand (`wake_kswapd_if_boosted`).
        let item = holder.refill::<BLOCK>(mm, resolved)?;
        Self::hand_out::<BLOCK>(holder, mm, resolved, item, gfp, frozen)
    }

    /// A popped page whose poison flag is set, or while some poison is
    /// pending: dropped for good (out of circulation) if it is poisoned.
    #[cold]
    fn drop_if_poisoned(mm: &PageAllocator, page: &PageDesc, idx: PageIdx) -> bool {
        if !mm.hwpoisoned_with_flag(page.has(PageFlags::HWPOISON), idx) {
            return false;
        }
        mm.drop_poisoned(idx);
        true
    }

    /// The cache's free of a page of order 0 (a pageblock-order block with
    /// `BLOCK`) with one reference, or none (`frozen`): true when done,
    /// false (nothing changed) for anything but the common case, which the
    /// slow path then serves or diagnoses.
    #[inline(always)]
    pub(crate) fn give<const BLOCK: bool>(&mut self, mm: &'a PageAllocator, pfn: Pfn, frozen: bool) -> bool {
        let holder = &mut self.0;
        let Some((item, idx, page)) = holder.find(mm, pfn) else {
            return false;
        };
        // One load and compare stands for `free_pages_prepare`'s checks:
        // the references, no check-at-free flag, not compound, not owned,
        // not another CPU's, not poisoned.
        let word = page.load_word();
        if !holder.expects::<BLOCK>(mm, idx, word, frozen) || holder.has_requests(mm) {
            return false;
        }
        let Some((slot, mt)) = holder.slot_of::<BLOCK>(mm, idx) else {
            return false;
        };
        #[cfg(all(test, feature = "std"))]
        crate::page_alloc::hwpoison::race_hook::run(idx);
        if !holder.claim::<BLOCK>(page, word, mt, frozen) {
            return false;
        }
        holder.push::<BLOCK>(mm, slot, mt, item, idx);
        true
    }
}
