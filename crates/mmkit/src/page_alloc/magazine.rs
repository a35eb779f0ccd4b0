//! The pinned handle's magazine: a small array of order-0 pages of one
//! (zone, migratetype) in front of its per-CPU lists, the lean fast path of
//! [`PinnedCpu`], and the pages it hands out `LOCAL` to its CPU.
//!
//! Owns the array and the transitions through it: a pop (allocation), a
//! push (free), a refill from the per-CPU list, a flush back to it, and a
//! page's hand-over to the rest of the system. The lists, their sizing and
//! spills stay `pcp`'s; the magazine is only ever touched by the thread
//! that holds the handle, so it needs no lock.
//!
//! # Why
//! The general per-CPU path spent about 270 instructions on an order-0
//! alloc+free pair (callgrind on `pcp_probe pinned` before the magazine;
//! `mmkit bench pcp`, case `pcp_order0_alloc_free`, contender
//! `mmkit_pinned`, times the pair): it resolves the zone and watermark from
//! the GFP mask, edits a doubly linked list (writing the neighbour's
//! descriptor on every push and pop), runs the auto-tuning of `high` and
//! the spill check, bumps statistics, and drops the reference with a
//! compare-and-swap, all per operation. Linux does the same per page
//! (`rmqueue_pcplist`, `free_frozen_page_commit`, `put_page_testzero`). The
//! magazine handles exactly the common case and leaves everything else to
//! that path:
//! - an allocation whose GFP mask equals the one the magazine was set up
//!   for (one compare) pops an index from the array, after the same
//!   lockless watermark check as before, and writes the page's state and
//!   refcount in one store;
//! - a free of a page whose whole word (state and refcount, one load) is
//!   exactly what that allocation left there, in the magazine's zone and
//!   pageblock type, with no request from other threads waiting (one
//!   load), stores the free state and pushes the index.
//!
//! Requests (a drain, a resize) are looked at by every free and by an
//! allocation that finds the magazine empty, so an owner that only
//! allocates serves them within one refill's worth of pages.
//!
//! Tuning and statistics run per batch, when the magazine refills from or
//! flushes to its list ([`MAG_BATCH`] pages at a time).
//!
//! # No atomic on the owner's pair
//! With the instructions gone, the refcount's compare-and-swap on free was
//! more than half of what was left of the pair's time (measured by removing
//! it, `mmkit bench pcp`, `pcp_order0_alloc_free`). So a page this magazine
//! hands out carries `LOCAL` and the CPU's number, and its owner frees it
//! with a plain store. That is sound because every read-modify-write that
//! could take the page from its owner (`try_get`, `try_put`,
//! `refcount_exchange`, the frozen claim) is one compare-and-swap of the
//! descriptor's combined word that refuses a `LOCAL` word (`mem::page`):
//! none can succeed between the owner's load and its store. The price is
//! paid where a page leaves its CPU: [`hand_over`](PinnedCpu::hand_over)
//! clears `LOCAL` with one compare-and-swap; until then other threads'
//! frees get [`FreeError::CpuLocal`], `get_page` gets
//! `PageError::CpuLocal`, and compaction and contiguous allocation leave
//! the page alone. Dropping the handle hands over what is still out (a scan
//! of the descriptor table, paid only then). Every CPU's pages can be
//! `LOCAL`: the CPU number takes the refcount's place in the word.
//!
//! Pages in the magazine are free and carry `PCP`, like pages on a list, so
//! every other path treats them as cached on this CPU: `memory_failure`
//! leaves them pending and the pop drops them; a drain request (served by
//! the owner) and dropping the handle flush them to the lists first.
#![deny(unsafe_code)]

use crate::mem::page::{DescWord, PageDesc, PageFlags, PageIdx};
use crate::mem::stack::{PageStack, STACK_SLOTS};
use crate::page_alloc::pinned::PinnedCpu;
use crate::pcp::cpus::CpuSlot;
use crate::types::gfp::{gfp_zone, AllocFlags, Gfp, MigrateType, ZoneType};
use crate::zone::Zone;
use crate::PageAllocator;
use crate::{FreeError, Pfn};
use core::sync::atomic::{AtomicU8, Ordering::Relaxed};

/// Pages the magazine holds at most: a [`PageStack`]'s, the type the
/// per-CPU caches use too.
pub(crate) const MAG_SLOTS: usize = STACK_SLOTS;
/// Pages moved per refill or flush.
pub(crate) const MAG_BATCH: usize = MAG_SLOTS / 2;

/// The magazine's mask key when it serves no mask: no widened `u32`
/// equals it.
const NO_MASK: u64 = u64::MAX;

/// The key of request mask `gfp` in the magazine.
#[inline(always)]
fn serves_key(gfp: Gfp) -> u64 {
    u64::from(gfp.bits())
}

/// What the magazine serves: one
/// request mask's preferred zone and migratetype, resolved once so that a
/// hit is a compare of the mask.
#[derive(Clone, Copy)]
pub(crate) struct Order0Target {
    pub(crate) zi: usize,
    pub(crate) mt: MigrateType,
    pub(crate) flags: AllocFlags,
    pub(crate) highest: ZoneType,
    /// The zone's descriptor range.
    pub(crate) zone_start: PageIdx,
    pub(crate) zone_end: PageIdx,
}

impl Order0Target {
    /// No target yet (the cache's mask is `None`).
    pub(crate) const NONE: Self = Self {
        zi: 0,
        mt: MigrateType::Unmovable,
        flags: AllocFlags::EMPTY,
        highest: ZoneType::Normal,
        zone_start: 0,
        zone_end: 0,
    };

    /// Pages a cache of this target holds before it flushes: never more
    /// than the per-CPU list it refills from keeps (`high_min`), so a small
    /// zone is not hoarded.
    pub(crate) fn capacity(&self, high_min: u32) -> usize {
        MAG_SLOTS.min(high_min.max(2) as usize)
    }
}

impl PageAllocator {
    /// The order-0 target of `gfp` on node `nid` and its zone, if a cache
    /// may serve it: the preferred zone above its watermark, a migratetype
    /// the per-CPU lists take, a placement that does not merge before
    /// caching.
    pub(crate) fn order0_target(&self, nid: usize, gfp: Gfp) -> Option<(Order0Target, &Zone)> {
        let (target, highest) = (self.fast_target(nid, gfp, 0)?, gfp_zone(gfp).ok()?);
        if !self.pcp_serves(gfp) || target.zone.placement.merges_before_caching() {
            return None;
        }
        let zone = target.zone;
        let order0 = Order0Target {
            zi: target.zi,
            mt: target.mt,
            flags: target.flags,
            highest,
            zone_start: zone.start_idx,
            zone_end: zone.end_idx,
        };
        Some((order0, zone))
    }
}

/// See the module doc.
pub(crate) struct Magazine<'a> {
    /// Off for callers that must see exactly Linux's per-CPU lists.
    enabled: bool,
    /// The request mask the target below was resolved for, widened
    /// (`serves_key`), or [`NO_MASK`] until the first order-0 allocation
    /// (or when the magazine is off), and then the target fields mean
    /// nothing. A plain integer, so a hit is one compare.
    gfp_key: u64,
    /// The target zone (`zones[zi]`), held to skip the lookup.
    zone: &'a Zone,
    /// The target zone's descriptors and the PFN of the first, pageblock
    /// types and this CPU's request slot, copied here once: the handle is
    /// `&mut`, so the compiler keeps them in registers instead of
    /// reloading the table's pointer and length after every store to a
    /// descriptor (the allocator's atomics make `&PageAllocator` no promise
    /// that they stay put). With the zone's slice, one bounds check on a
    /// free both finds the descriptor and checks the zone.
    zone_descs: &'a [PageDesc],
    zone_pfn: u64,
    block_types: &'a [AtomicU8],
    pageblock_order: u32,
    slot: &'a CpuSlot,
    target: Order0Target,
    /// `LOCAL` pages handed out (by the magazine or a zone the handle holds
    /// locked) and not yet freed or handed over.
    pub(super) outstanding: u64,
    /// The whole word (`LOCAL` to this CPU) an order-0 allocation of `mt`
    /// leaves in a page, and so the one the free expects.
    allocated_word: DescWord,
    /// The whole word a page takes in the magazine (`PCP`, order 0, `mt`,
    /// no reference), computed with the target.
    free_word: DescWord,
    /// The pages, as offsets into the zone's descriptors: the order-0
    /// cache's one type (`mem::stack`), owned here outright. Its capacity
    /// is [`MAG_SLOTS`], or the list's `high` when that is smaller (a small
    /// zone).
    stack: PageStack,
}

impl<'a> Magazine<'a> {
    /// An empty magazine with no target, for CPU `cpu` of `alloc`.
    pub(crate) fn new(alloc: &'a PageAllocator, cpu: usize) -> Self {
        let (block_types, pageblock_order) = alloc.mem.blocks.raw();
        Self {
            enabled: true,
            gfp_key: NO_MASK,
            zone: &alloc.zones[0],
            zone_descs: &[],
            zone_pfn: alloc.mem.base_pfn,
            block_types,
            pageblock_order,
            slot: &alloc.pcp.slots[cpu],
            target: Order0Target::NONE,
            outstanding: 0,
            allocated_word: DescWord::PREPARED,
            free_word: DescWord::PREPARED,
            stack: PageStack::new(MAG_SLOTS),
        }
    }
}

impl<'a> PinnedCpu<'a> {
    /// The magazine's allocation: `None` sends the caller down the general
    /// path (another mask, a pending request, a zone near its watermark, an
    /// empty magazine that could not refill, a poisoned page).
    #[inline(always)]
    pub(super) fn mag_alloc(&mut self, gfp: Gfp) -> Option<Pfn> {
        let alloc = self.alloc;
        if self.mag.gfp_key != serves_key(gfp) {
            return None;
        }
        let zone = self.mag.zone;
        // Comfortably free also means no boost waits for kswapd.
        if !zone.comfortably_free()
            && !alloc.zone_allows_waking(zone, 0, self.mag.target.flags, self.mag.target.highest, gfp)
        {
            return None;
        }
        let offset = match self.mag.stack.pop() {
            Some(offset) => offset,
            // Waiting requests are served on the general path first.
            None if self.mag.slot.has_requests() => return None,
            // A boost the refill causes wakes kswapd at the next
            // allocation's check (`zone_allows_waking`, above).
            None if self.mag_refill() => self.mag.stack.pop()?,
            None => return None,
        };
        let page = self.mag.zone_descs.get(offset as usize)?;
        if (page.has(PageFlags::HWPOISON) || alloc.hwpoison.any()) && self.mag_drop_if_poisoned(page, offset) {
            return None;
        }
        let idx = self.mag.target.zone_start + offset;
        if alloc.prep_order0(page, idx, gfp, self.mag.target.mt, self.mag.allocated_word) {
            self.mag.outstanding += 1;
        }
        Some(Pfn(self.mag.zone_pfn + u64::from(offset)))
    }

    /// A page just popped whose poison flag is set, or while some poison is
    /// pending: dropped for good if it is poisoned.
    #[cold]
    fn mag_drop_if_poisoned(&self, page: &PageDesc, offset: PageIdx) -> bool {
        let idx = self.mag.target.zone_start + offset;
        if !self.alloc.hwpoisoned_with_flag(page.has(PageFlags::HWPOISON), idx) {
            return false;
        }
        self.alloc.drop_poisoned(idx);
        true
    }

    /// The magazine's free of an order-0 page: true when done, false (and
    /// nothing changed) for anything but the common case.
    #[inline(always)]
    pub(super) fn mag_free(&mut self, pfn: Pfn) -> bool {
        let offset = pfn.0.wrapping_sub(self.mag.zone_pfn);
        let Some(page) = usize::try_from(offset).ok().and_then(|offset| self.mag.zone_descs.get(offset)) else {
            return false;
        };
        // Inside the zone, so the offset fits an index.
        let (offset, idx) = (offset as PageIdx, self.mag.target.zone_start + offset as PageIdx);
        let block_type = self.mag.block_types.get((idx >> self.mag.pageblock_order) as usize);
        // No look at pending poison: `memory_failure` leaves this CPU a
        // drain request after it marks a page pending, so the owner's next
        // free takes the general path, and a page pushed before the request
        // arrived is dropped by the pop's check or by the drain.
        if page.load_word() != self.mag.allocated_word
            || self.mag.slot.has_requests()
            || block_type.map(|t| t.load(Relaxed)) != Some(self.mag.target.mt as u8)
        {
            return false;
        }
        if self.mag.stack.is_full() {
            let half = self.mag.stack.capacity() / 2;
            self.mag_flush(half.max(1));
        }
        // The word compare was free_pages_prepare's checks: exactly one
        // reference, no check-at-free flag, not compound, not owned, not
        // poisoned. And the page is LOCAL: every read-modify-write that
        // could take, drop or exchange a reference refuses its word
        // (mem::page), so between the load above and this store nobody
        // else can have claimed it. No atomic operation.
        #[cfg(all(test, feature = "std"))]
        crate::page_alloc::hwpoison::race_hook::run(idx);
        page.free_from_local(self.mag.free_word);
        self.mag.outstanding -= 1;
        // Room was made above.
        self.mag.stack.push_with_room(offset)
    }

    /// Points the magazine at `gfp`'s order-0 target (flushing pages of
    /// another zone or type first); false when that target cannot use a
    /// magazine.
    #[cold]
    pub(super) fn mag_retarget(&mut self, gfp: Gfp) -> bool {
        let alloc = self.alloc;
        if !self.mag.enabled {
            return false;
        }
        let Some((target, zone)) = alloc.order0_target(self.nid, gfp) else {
            return false;
        };
        if self.mag.gfp_key != NO_MASK && (self.mag.target.zi, self.mag.target.mt) != (target.zi, target.mt) {
            self.mag_flush_all();
        }
        self.mag.gfp_key = serves_key(gfp);
        self.mag.zone = zone;
        self.mag.target = target;
        let descs = alloc.mem.pages.all();
        self.mag.zone_descs = descs.get(target.zone_start as usize..target.zone_end as usize).unwrap_or_default();
        self.mag.zone_pfn = alloc.mem.base_pfn + u64::from(target.zone_start);
        let capacity = target.capacity(self.lists[target.zi].sizing.high_min);
        self.mag.stack.set_capacity(capacity);
        self.mag.allocated_word = DescWord::local(PageFlags::ALLOCATED, 0, target.mt as u8, self.cpu);
        self.mag.free_word = DescWord::cached(target.mt as u8);
        true
    }

    /// Brings up to [`MAG_BATCH`] pages from the per-CPU list (which
    /// refills from the buddy as usual); false if none came.
    #[cold]
    fn mag_refill(&mut self) -> bool {
        let (zi, mt, flags) = (self.mag.target.zi, self.mag.target.mt, self.mag.target.flags);
        // No more than one of the list's own refills would bring: a small
        // zone's batch is a page or two, and a magazine that took 32 of
        // them could hold the whole zone.
        let want = MAG_BATCH.min(self.lists[zi].sizing.batch.max(1) as usize);
        while self.mag.stack.len() < want {
            let Some(idx) = self.alloc.pcp_take_locked(&mut self.lists[zi], zi, 0, mt, flags) else {
                break;
            };
            if !self.mag.stack.push(idx - self.mag.target.zone_start) {
                self.alloc.uncache_pages(Some(&mut self.lists[zi]), zi, mt, 0, &[idx]);
                break;
            }
        }
        self.mag.stack.len() > 0
    }

    /// Returns the `count` oldest pages of the magazine to the per-CPU
    /// list (spilling to the buddy as usual).
    #[cold]
    pub(super) fn mag_flush(&mut self, count: usize) {
        let alloc = self.alloc;
        let zi = self.mag.target.zi;
        let mut oldest = [0 as PageIdx; MAG_SLOTS];
        let count = self.mag.stack.take_oldest(count, &mut oldest);
        for offset in &mut oldest[..count] {
            *offset += self.mag.target.zone_start;
        }
        alloc.uncache_pages(Some(&mut self.lists[zi]), zi, self.mag.target.mt, 0, &oldest[..count]);
    }

    /// Turns the magazine on (the default) or off. Off, order-0 requests
    /// take the per-CPU lists page by page exactly as Linux's
    /// `rmqueue_pcplist` and `free_frozen_page_commit` do, which a trace
    /// replay that models Linux's lists needs: the magazine hands out the
    /// same pages but not in the same order, and moves pages to and from
    /// the lists in batches, so `high` and spills see them later.
    pub fn set_magazine(&mut self, enabled: bool) {
        self.mag_flush_all();
        self.mag.enabled = enabled;
        self.mag.gfp_key = NO_MASK;
    }

    /// Makes page `pfn`, handed out by this handle, an ordinary allocated
    /// page that any thread or path may free or reference (the one atomic a
    /// page pays to leave its CPU). A page that is not this CPU's is left
    /// as it is.
    ///
    /// ```
    /// use mmkit::{FreeError, Gfp, MemoryMapBuilder};
    /// let mm = MemoryMapBuilder::with_memory(64 << 20).nr_cpus(2).build().unwrap();
    /// let mut cpu0 = mm.pin_cpu(0).unwrap();
    /// let pfn = cpu0.alloc_pages(Gfp::KERNEL, 0).unwrap();
    /// assert!(matches!(mm.free_pages(pfn, 0), Err(FreeError::CpuLocal { cpu: 0, .. })));
    /// cpu0.hand_over(pfn).unwrap(); // from here on, any thread may free it
    /// mm.free_pages(pfn, 0).unwrap();
    /// ```
    ///
    /// # Errors
    /// [`FreeError::OutOfRange`], or [`FreeError::CpuLocal`] for a page
    /// local to another CPU.
    pub fn hand_over(&mut self, pfn: Pfn) -> Result<(), FreeError> {
        let idx = self.alloc.pfn_to_idx(pfn).ok_or(FreeError::OutOfRange(pfn))?;
        let page = self.alloc.desc(idx);
        if page.clear_local(self.cpu) {
            self.mag.outstanding -= 1;
            return Ok(());
        }
        match page.local_cpu() {
            Some(cpu) if cpu != self.cpu => Err(FreeError::CpuLocal { pfn, cpu }),
            _ => Ok(()),
        }
    }

    /// Before the general free path: a page local to this CPU becomes an
    /// ordinary one (that path's atomics then apply); one local to another
    /// CPU is left for the validation to refuse. `Err` (and the page stays
    /// `LOCAL`) for a block freed with another order than it was
    /// allocated with.
    pub(super) fn unlocal_for_free(&mut self, pfn: Pfn, order: u32) -> Result<(), FreeError> {
        let Some(idx) = self.alloc.pfn_to_idx(pfn) else {
            return Ok(());
        };
        let page = self.alloc.desc(idx);
        if page.local_cpu() != Some(self.cpu) {
            return Ok(());
        }
        let allocated = page.order();
        if order != allocated {
            return Err(FreeError::WrongOrder { pfn, allocated, given: order });
        }
        if page.clear_local(self.cpu) {
            self.mag.outstanding -= 1;
        }
        Ok(())
    }

    /// Hands over every page this handle still has out (dropping the
    /// handle): a scan of the descriptor table, paid only when pages are
    /// still out.
    #[cold]
    pub(super) fn hand_over_all(&mut self) {
        if self.mag.outstanding == 0 {
            return;
        }
        for page in self.alloc.mem.pages.all() {
            if page.clear_local(self.cpu) {
                self.mag.outstanding -= 1;
                if self.mag.outstanding == 0 {
                    break;
                }
            }
        }
    }

    /// Pages in the magazine.
    pub(super) fn mag_len(&self) -> usize {
        self.mag.stack.count()
    }

    /// Empties the magazine into the per-CPU list.
    pub(super) fn mag_flush_all(&mut self) {
        let len = self.mag.stack.len();
        if len > 0 {
            self.mag_flush(len);
        }
    }
}
