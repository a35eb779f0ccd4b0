//! The per-CPU cache held by a pinned handle: its magazine, one stack of
//! order-0 pages for one request mask, in front of the CPU's lists it
//! holds; the lean fast path of [`PinnedCpu`](crate::PinnedCpu), whose
//! pages are `LOCAL` to its CPU.
//!
//! Owns [`Magazine`] (the stack, what it serves, the held lists) and what
//! only this holder does: aiming at a mask, refilling from and flushing to
//! the held lists, and handing `LOCAL` pages over to the rest of the
//! system. The take and the give, and their checks, are the cache's
//! (`cache/mod.rs`); only the thread that holds the handle touches the
//! magazine, so it needs no lock.
//!
//! # Why
//! The per-CPU lists path resolves the zone and watermark from the GFP
//! mask, edits a doubly linked list (writing the neighbour's descriptor on
//! every push and pop), runs the auto-tuning of `high` and the spill
//! check, bumps statistics, and drops the reference with a
//! compare-and-swap, all per operation, as Linux does per page
//! (`rmqueue_pcplist`, `free_frozen_page_commit`, `put_page_testzero`).
//! The magazine handles exactly the common case and leaves everything else
//! to that path:
//! - an allocation whose GFP mask equals the one the magazine was aimed
//!   at (one compare) pops an index, after the watermark check every path
//!   makes, and writes the page's state and refcount in one store;
//! - a free of a page whose whole word (state and refcount, one load) is
//!   exactly what that allocation left there, in the magazine's zone and
//!   pageblock type, with no request from other threads waiting (one
//!   load), stores the free state and pushes the index.
//!
//! Requests (a drain, a resize; `memory_failure` leaves a drain) are
//! looked at by every free and by an allocation that finds the magazine
//! empty, so an owner that only allocates serves them within one refill's
//! worth of pages. Tuning and statistics run per batch, when the magazine
//! refills from or flushes to its list ([`MAG_BATCH`] pages at a time).
//! The pair's cost: `mmkit bench pcp`, case `pcp_order0_alloc_free`,
//! contender `mmkit_pinned` (instructions: `examples/pcp_probe.rs pinned`
//! under callgrind, `docs/perf-log/`).
//!
//! # No atomic on the owner's pair
//! A page this magazine hands out carries `LOCAL` and the CPU's number,
//! and its owner frees it with a plain store. That is sound because every
//! read-modify-write that could take the page from its owner (`try_get`,
//! `try_put`, `refcount_exchange`, the frozen claim) is one
//! compare-and-swap of the descriptor's combined word that refuses a
//! `LOCAL` word (`mem::page`): none can succeed between the owner's load
//! and its store. The price is paid where a page leaves its CPU:
//! `PinnedCpu::hand_over` clears `LOCAL` with one compare-and-swap; until
//! then other threads' frees get `FreeError::CpuLocal`, `get_page` gets
//! `PageError::CpuLocal`, and compaction and contiguous allocation leave
//! the page alone. Dropping the handle hands over what is still out (a
//! scan of the descriptor table, paid only then). Frozen pages are not
//! `LOCAL` (they have no reference to stand for): their take leaves the
//! frozen word and their give claims it with a compare-and-swap.
//!
//! Pages in the magazine are free and carry `PCP`, like pages on a list, so
//! every other path treats them as cached on this CPU: `memory_failure`
//! leaves them pending and the pop drops them; a drain request (served by
//! the owner) and dropping the handle flush them to the lists first.
#![deny(unsafe_code)]

use super::{Holder, Popped, Target};
use crate::mem::page::{DescWord, PageDesc, PageFlags, PageIdx};
use crate::mem::sync::LockGuard;
use crate::pcp::cpus::CpuSlot;
use crate::pcp::PcpState;
use crate::sys::stack::{PageStack, STACK_SLOTS};
use crate::types::gfp::{AllocFlags, Gfp, MigrateType, ZoneType};
use crate::{PageAllocator, Pfn};
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU8, Ordering::Relaxed};

/// Pages the magazine holds at most: a [`PageStack`]'s.
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

/// A pinned CPU's stack and lists; see the module doc.
pub(crate) struct Magazine<'a> {
    /// The CPU's pagesets, one per zone, held for the handle's life.
    pub(crate) lists: Vec<LockGuard<'a, PcpState>>,
    /// The pinned CPU.
    cpu: usize,
    /// Off for callers that must see exactly Linux's per-CPU lists.
    enabled: bool,
    /// The request mask the target below was resolved for, widened
    /// (`serves_key`), or [`NO_MASK`] until the first order-0 allocation
    /// (or when the magazine is off), and then the target means nothing.
    /// A plain integer, so a hit is one compare.
    gfp_key: u64,
    target: Target<'a>,
    /// The target zone's descriptors and the PFN and index of the first,
    /// pageblock types and this CPU's request slot, copied here once: the
    /// handle is `&mut`, so the compiler keeps them in registers instead
    /// of reloading the table's pointer and length after every store to a
    /// descriptor (the allocator's atomics make `&PageAllocator` no
    /// promise that they stay put). With the zone's slice, one bounds
    /// check on a free both finds the descriptor and checks the zone.
    zone_descs: &'a [PageDesc],
    zone_pfn: u64,
    zone_start: PageIdx,
    block_types: &'a [AtomicU8],
    pageblock_order: u32,
    slot: &'a CpuSlot,
    /// `LOCAL` pages handed out (by the magazine or a zone the handle holds
    /// locked) and not yet freed or handed over.
    pub(crate) outstanding: u64,
    /// The whole word (`LOCAL` to this CPU) an order-0 allocation of the
    /// target leaves in a page, and so the one the free expects; the
    /// frozen allocation's; and the word a page takes in the magazine
    /// (`PCP`, order 0, the type, no reference).
    allocated_word: DescWord,
    frozen_word: DescWord,
    free_word: DescWord,
    /// The pages, as offsets into the zone's descriptors, owned here
    /// outright. Its capacity is [`MAG_SLOTS`], or the list's `high` when
    /// that is smaller (a small zone).
    stack: PageStack,
}

impl<'a> Magazine<'a> {
    /// An empty magazine with no target for CPU `cpu` of `alloc`, in front
    /// of its held `lists`.
    pub(crate) fn new(alloc: &'a PageAllocator, cpu: usize, lists: Vec<LockGuard<'a, PcpState>>) -> Self {
        let (block_types, pageblock_order) = alloc.mem.blocks.raw();
        Self {
            lists,
            cpu,
            enabled: true,
            gfp_key: NO_MASK,
            target: Target {
                slot: 0,
                zi: 0,
                zone: &alloc.zones[0],
                mt: MigrateType::Unmovable,
                flags: AllocFlags::EMPTY,
                highest: ZoneType::Normal,
            },
            zone_descs: &[],
            zone_pfn: alloc.mem.base_pfn,
            zone_start: 0,
            block_types,
            pageblock_order,
            slot: &alloc.pcp.slots[cpu],
            outstanding: 0,
            allocated_word: DescWord::PREPARED,
            frozen_word: DescWord::PREPARED,
            free_word: DescWord::PREPARED,
            stack: PageStack::new(MAG_SLOTS),
        }
    }

    /// Aims the magazine at `gfp`'s order-0 target on node `nid` (flushing
    /// pages of another zone or type first); false when that target
    /// cannot use a magazine (off, a mask the lists do not serve, a
    /// placement that merges before caching).
    #[cold]
    pub(crate) fn retarget(&mut self, alloc: &'a PageAllocator, nid: usize, gfp: Gfp) -> bool {
        if !self.enabled || !alloc.pcp_serves(gfp) {
            return false;
        }
        let Some(target) = alloc.preferred_target(nid, gfp) else {
            return false;
        };
        let (zi, zone, mt) = (target.zi, target.zone, target.mt);
        if zone.placement.merges_before_caching() {
            return false;
        }
        if self.gfp_key != NO_MASK && (self.target.zi, self.target.mt) != (zi, mt) {
            self.flush_all(alloc);
        }
        self.gfp_key = serves_key(gfp);
        self.target = target;
        let descs = alloc.mem.pages.all();
        self.zone_descs = descs.get(zone.start_idx as usize..zone.end_idx as usize).unwrap_or_default();
        self.zone_pfn = alloc.mem.base_pfn + u64::from(zone.start_idx);
        self.zone_start = zone.start_idx;
        // Never more than the list it refills from keeps (`high_min`), so
        // a small zone is not hoarded.
        self.stack.set_capacity(MAG_SLOTS.min(self.lists[zi].sizing.high_min.max(2) as usize));
        self.allocated_word = DescWord::local(PageFlags::ALLOCATED, 0, mt as u8, self.cpu);
        self.frozen_word = DescWord::allocated(PageFlags::ALLOCATED, 0, mt as u8, 0);
        self.free_word = DescWord::cached(mt as u8);
        true
    }

    /// Turns the magazine on or off (flushing it); see
    /// `PinnedCpu::set_magazine`.
    pub(crate) fn set_enabled(&mut self, alloc: &PageAllocator, enabled: bool) {
        self.flush_all(alloc);
        self.enabled = enabled;
        self.gfp_key = NO_MASK;
    }

    /// Returns the `count` oldest pages of the magazine to the held list
    /// (spilling to the buddy as usual).
    #[cold]
    fn flush(&mut self, alloc: &PageAllocator, count: usize) {
        let zi = self.target.zi;
        let mut oldest = [0 as PageIdx; MAG_SLOTS];
        let count = self.stack.take_oldest(count, &mut oldest);
        for offset in &mut oldest[..count] {
            *offset += self.zone_start;
        }
        alloc.uncache_pages(Some(&mut self.lists[zi]), zi, self.target.mt, 0, &oldest[..count]);
    }

    /// Empties the magazine into the held list.
    pub(crate) fn flush_all(&mut self, alloc: &PageAllocator) {
        let len = self.stack.len();
        if len > 0 {
            self.flush(alloc, len);
        }
    }

    /// Pages in the magazine.
    pub(crate) fn len(&self) -> usize {
        self.stack.count()
    }
}

impl<'a> Holder<'a> for Magazine<'a> {
    /// Kept in the magazine: one mask at a time.
    type Resolved = ();

    #[inline(always)]
    fn resolve<const BLOCK: bool>(&mut self, _mm: &'a PageAllocator, nid: Option<usize>, gfp: Gfp) -> Option<()> {
        // One mask at a time, on the handle's own node.
        (!BLOCK && nid.is_none() && self.gfp_key == serves_key(gfp)).then_some(())
    }

    #[inline(always)]
    fn target<'s>(&'s self, _resolved: &'s ()) -> &'s Target<'a> {
        &self.target
    }

    #[inline(always)]
    fn pop<const BLOCK: bool>(&mut self, _resolved: &()) -> Popped {
        match self.stack.pop() {
            Some(offset) => Popped::Item(offset),
            None => Popped::Empty,
        }
    }

    #[inline(always)]
    fn refill<const BLOCK: bool>(&mut self, mm: &'a PageAllocator, _resolved: &()) -> Option<u32> {
        let (zi, mt, flags) = (self.target.zi, self.target.mt, self.target.flags);
        // No more than one of the list's own refills would bring: a small
        // zone's batch is a page or two, and a magazine that took 32 of
        // them could hold the whole zone.
        let want = MAG_BATCH.min(self.lists[zi].sizing.batch.max(1) as usize);
        while self.stack.len() < want {
            let Some(idx) = mm.pcp_take_locked(&mut self.lists[zi], zi, 0, mt, flags) else {
                break;
            };
            if !self.stack.push(idx - self.zone_start) {
                mm.uncache_pages(Some(&mut self.lists[zi]), zi, mt, 0, &[idx]);
                break;
            }
        }
        self.stack.pop()
    }

    #[inline(always)]
    fn has_requests(&self, _mm: &'a PageAllocator) -> bool {
        // `memory_failure` leaves this CPU a drain request after it marks
        // a page pending, so this one load also covers pending poison: the
        // owner's next free takes the slow path, and a page pushed before
        // the request arrived is dropped by the take's check or the drain.
        self.slot.has_requests()
    }

    #[inline(always)]
    fn page(&self, _mm: &'a PageAllocator, item: u32) -> Option<&'a PageDesc> {
        self.zone_descs.get(item as usize)
    }

    #[inline(always)]
    fn idx(&self, item: u32) -> PageIdx {
        self.zone_start + item
    }

    #[inline(always)]
    fn pfn(&self, _mm: &'a PageAllocator, item: u32) -> Pfn {
        Pfn(self.zone_pfn + u64::from(item))
    }

    #[inline(always)]
    fn word_out(&self, _resolved: &(), frozen: bool) -> DescWord {
        if frozen {
            self.frozen_word
        } else {
            self.allocated_word
        }
    }

    #[inline(always)]
    fn handed_out(&mut self, stored: bool, frozen: bool) {
        if stored && !frozen {
            self.outstanding += 1;
        }
    }

    #[inline(always)]
    fn find(&self, _mm: &'a PageAllocator, pfn: Pfn) -> Option<(u32, PageIdx, &'a PageDesc)> {
        let offset = pfn.0.wrapping_sub(self.zone_pfn);
        let page = self.zone_descs.get(usize::try_from(offset).ok()?)?;
        // Inside the zone, so the offset fits an index.
        Some((offset as u32, self.zone_start + offset as PageIdx, page))
    }

    #[inline(always)]
    fn expects<const BLOCK: bool>(&self, _mm: &'a PageAllocator, _idx: PageIdx, word: DescWord, frozen: bool) -> bool {
        word == if frozen { self.frozen_word } else { self.allocated_word }
    }

    #[inline(always)]
    fn slot_of<const BLOCK: bool>(&self, _mm: &'a PageAllocator, idx: PageIdx) -> Option<(usize, MigrateType)> {
        let block_type = self.block_types.get((idx >> self.pageblock_order) as usize)?;
        let mt = self.target.mt;
        if block_type.load(Relaxed) != mt as u8 {
            return None;
        }
        Some((0, mt))
    }

    #[inline(always)]
    fn claim<const BLOCK: bool>(&mut self, page: &PageDesc, word: DescWord, _mt: MigrateType, frozen: bool) -> bool {
        if frozen {
            return page.drop_last_reference(word, self.free_word);
        }
        // The page is LOCAL: every read-modify-write that could take, drop
        // or exchange a reference refuses its word (mem::page), so between
        // the give's load and this store nobody else can have claimed it.
        // No atomic operation.
        page.free_from_local(self.free_word);
        self.outstanding -= 1;
        true
    }

    #[inline(always)]
    fn push<const BLOCK: bool>(
        &mut self,
        mm: &'a PageAllocator,
        _slot: usize,
        mt: MigrateType,
        item: u32,
        idx: PageIdx,
    ) {
        if self.stack.is_full() {
            let half = self.stack.capacity() / 2;
            self.flush(mm, half.max(1));
        }
        if !self.stack.push_with_room(item) {
            let zi = self.target.zi;
            mm.uncache_pages(Some(&mut self.lists[zi]), zi, mt, 0, &[idx]);
        }
    }
}
