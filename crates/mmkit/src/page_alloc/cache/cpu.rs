//! The per-CPU cache held by the CPU: the shared API's order-0 pages (and
//! pageblock-order blocks), with no lock and one atomic per pair.
//!
//! Owns [`CpuCaches`], the allocator's stacks (one per CPU, zone and pcp
//! migratetype, edited in restartable sequences by whatever thread runs on
//! the CPU: `sys`), and what only this holder does: its refill from and
//! flush to the current CPU's locked lists, the drain and the pinning of a
//! CPU's stacks. The take and the give, and their checks, are the
//! cache's (`cache/mod.rs`); the lists, their sizing and spills stay
//! `pcp`'s.
//!
//! # Why
//! The per-CPU lists sit behind a try-lock because any thread may land on
//! a CPU's lists: a compare-and-swap and a release store per operation,
//! plus a doubly linked list whose neighbour descriptors are written on
//! every push and pop. Linux avoids the lock by disabling preemption;
//! TCMalloc by restartable sequences, which is what this holder does: a
//! pop or a push is a handful of plain loads and stores in a sequence the
//! kernel restarts if it is interrupted. The pair keeps one atomic: the
//! compare-and-swap that drops the last reference on free (others may hold
//! speculative references, as in `put_page_testzero`).
//!
//! Pages on a stack are free and carry `PCP`, like pages on a per-CPU
//! list, so every other path already treats them as cached: compaction and
//! isolation skip them, `memory_failure` leaves them pending (the pop
//! drops them), and `drain_all_pages` empties the stacks through the stop
//! protocol of `sys`'s restartable sequences.
//!
//! # Whose descriptor lines
//! Descriptors are 16 bytes, four to a cache line. Two CPUs that each
//! recycle one page whose descriptors share a line write that line on
//! every operation, and a pair then costs several times as much (the
//! bimodal two-thread runs of the locked lists). A refill therefore takes
//! whole order-2 blocks (four aligned pages, one descriptor line) from the
//! lists when it can, so the pages a CPU caches come in lines no other
//! CPU's cache holds. A thread that migrates would break that: it
//! allocated its pages on the old CPU and frees them on the new one. So a
//! free pushes onto the stack only when it runs on the CPU of its thread's
//! last cached allocation (checked inside the sequence, so a migration
//! between the check and the push cannot slip through); otherwise that one
//! page goes to the old CPU's locked lists (not the new CPU's, whose next
//! refill would take it), and the thread's CPU becomes the new one.
//! Threads that only free (consumers of pages others allocate) have no
//! such CPU and always push.
//!
//! # Pageblock-order blocks
//! Linux keeps blocks of `pageblock_order` on the per-CPU lists too
//! (`pcp_allowed_order`), so a THP allocation after a THP free takes no
//! zone lock. Here the lists' try-lock costs a compare-and-swap on each
//! side; a stack of at most [`BLOCK_CAP`] blocks per slot leaves the
//! reference drop. An empty stack takes one block from the lists (no batch
//! refill: each block is a pageblock of memory), a full one sends the
//! freed block to them. Blocks are far apart, so no descriptor line is
//! shared and a free pushes on whatever CPU it runs.
#![deny(unsafe_code)]

use super::{Holder, Popped, Target};
use crate::mem::page::{DescWord, PageDesc, PageFlags, PageIdx};
use crate::sys::stack::STACK_SLOTS;
use crate::sys::{CpuStacks, Pop, Push};
use crate::types::gfp::{Gfp, MigrateType};
use crate::{PageAllocator, Pfn};
use alloc::vec::Vec;

/// pcp migratetypes: one stack per zone for each.
const TYPES: usize = MigrateType::PCPTYPES;
/// Pages a refill or a flush moves at most.
const BATCH: usize = 32;
/// Pages per descriptor cache line (64-byte lines of 16-byte descriptors):
/// a refill prefers blocks of this order.
const LINE_ORDER: u32 = 2;
/// Pageblock-order blocks a stack holds at most: a pageblock each, so
/// few (Linux's lists keep about as many: `high` counts pages).
const BLOCK_CAP: u32 = 2;

/// The allocator's per-CPU stacks, and which of them may be used at all.
pub(crate) struct CpuCaches {
    stacks: CpuStacks,
    /// Bit `slot` (`zone * TYPES + migratetype`): whether pages of that
    /// zone and type are cached (a placement that merges before caching,
    /// or a policy that caches movable pages only, leaves slots unused).
    usable: u64,
    /// Per slot: pages a refill brings.
    batch: Vec<u8>,
    /// Slots of order 0 (`zones * TYPES`); the pageblock-order slots, when
    /// they fit in `usable`, follow: slot `order0_slots + zone * TYPES + mt`.
    order0_slots: usize,
    /// The pageblock order, whose blocks the slots from `order0_slots` on
    /// hold.
    block_order: u32,
}

impl CpuCaches {
    /// Stacks for `allocator`'s zones, if restartable sequences work here
    /// (`sys`); `None` elsewhere.
    pub(crate) fn new(allocator: &PageAllocator) -> Option<Self> {
        let order0_slots = allocator.zones.len() * TYPES;
        if order0_slots > 64 {
            return None;
        }
        // The pageblock-order stacks only where their slots fit the mask.
        let with_blocks = 2 * order0_slots <= 64;
        let nr_slots = if with_blocks { 2 * order0_slots } else { order0_slots };
        let mut caps = Vec::with_capacity(nr_slots);
        let mut usable = 0u64;
        let mut batch = Vec::with_capacity(nr_slots);
        for (zi, zone) in allocator.zones.iter().enumerate() {
            let sizing = allocator.pageset(0, zi).lock.lock().sizing;
            // Never more than the lists themselves keep (`high_min`), so a
            // small zone is not hoarded by a CPU.
            let cap = (sizing.high_min.max(2) as usize).min(STACK_SLOTS);
            for mt in 0..TYPES {
                let movable = mt == MigrateType::Movable as usize;
                let slot = zi * TYPES + mt;
                if allocator.pcp.enabled
                    && !zone.placement.merges_before_caching()
                    && (movable || !allocator.pcp.movable_only)
                {
                    usable |= 1 << slot;
                }
                caps.push(cap as u32);
                batch.push((cap / 2).clamp(1, BATCH).min(sizing.batch.max(1) as usize) as u8);
            }
        }
        if with_blocks {
            for slot in 0..order0_slots {
                if usable & (1 << slot) != 0 {
                    usable |= 1 << (order0_slots + slot);
                }
                caps.push(BLOCK_CAP);
                batch.push(1);
            }
        }
        let block_order = allocator.mem.geometry.pageblock_order;
        Some(Self { stacks: CpuStacks::new(&caps)?, usable, batch, order0_slots, block_order })
    }

    /// Whether `slot` is used (and exists).
    #[inline(always)]
    fn usable(&self, slot: usize) -> bool {
        slot < 64 && self.usable & (1 << slot) != 0
    }

    /// The order of the blocks in `slot`'s stacks.
    #[inline(always)]
    fn slot_order(&self, slot: usize) -> u32 {
        if slot < self.order0_slots {
            0
        } else {
            self.block_order
        }
    }

    /// The first slot of the stacks of order 0 (pageblock order with
    /// `BLOCK`).
    #[inline(always)]
    fn first_slot<const BLOCK: bool>(&self) -> usize {
        if BLOCK {
            self.order0_slots
        } else {
            0
        }
    }

    /// Blocks the stacks hold in zone `zi` (racy while sequences run), and
    /// the pages in them.
    pub(crate) fn held_in_zone(&self, zi: usize) -> (u64, u64) {
        let (mut blocks, mut pages) = (0, 0);
        for cpu in 0..self.stacks.nr_cpus() {
            for first in (0..self.batch.len()).step_by(self.order0_slots) {
                for mt in 0..TYPES {
                    let slot = first + zi * TYPES + mt;
                    let held = self.stacks.len(cpu, slot) as u64;
                    blocks += held;
                    pages += held << self.slot_order(slot);
                }
            }
        }
        (blocks, pages)
    }
}

/// The CPU as the holder of its stacks, for one call of the shared API.
#[derive(Clone, Copy)]
pub(crate) struct OnCpu<'a>(&'a CpuCaches);

impl<'a> Holder<'a> for OnCpu<'a> {
    /// Computed per call: the stack depends on the CPU and the request.
    type Resolved = Target<'a>;

    #[inline(always)]
    fn resolve<const BLOCK: bool>(
        &mut self,
        mm: &'a PageAllocator,
        nid: Option<usize>,
        gfp: Gfp,
    ) -> Option<Target<'a>> {
        let caches = self.0;
        // One node: no need to ask where we run before the sequence does.
        let local =
            if mm.zones.nr_nodes() == 1 { 0 } else { mm.node_of_cpu(mm.fold_cpu(caches.stacks.current_cpu()?)) };
        if nid.is_some_and(|nid| nid != local) {
            return None;
        }
        let target = mm.preferred_target(local, gfp)?;
        // `usable` says whether the lists serve the request's type.
        let slot = caches.first_slot::<BLOCK>() + target.zi * TYPES + target.mt as usize;
        if !target.mt.is_pcp_type() || !caches.usable(slot) {
            return None;
        }
        Some(Target { slot, ..target })
    }

    #[inline(always)]
    fn target<'s>(&'s self, resolved: &'s Target<'a>) -> &'s Target<'a> {
        resolved
    }

    #[inline(always)]
    fn pop<const BLOCK: bool>(&mut self, resolved: &Target<'a>) -> Popped {
        match self.0.stacks.pop(resolved.slot) {
            Pop::Item(idx, cpu) => {
                if !BLOCK {
                    crate::sys::set_home_cpu(cpu);
                }
                Popped::Item(idx)
            }
            Pop::Empty => Popped::Empty,
            Pop::Unavailable => Popped::Unavailable,
        }
    }

    #[inline(always)]
    fn refill<const BLOCK: bool>(&mut self, mm: &'a PageAllocator, target: &Target<'a>) -> Option<u32> {
        let caches = self.0;
        let cpu = mm.fold_cpu(caches.stacks.current_cpu()?);
        let mut pcp = mm.try_lock_pcp(cpu, target.zi)?;
        if BLOCK {
            return mm.pcp_take_locked(&mut pcp, target.zi, caches.block_order, target.mt, target.flags);
        }
        let (zi, mt, flags) = (target.zi, target.mt, target.flags);
        let want = usize::from(caches.batch[target.slot]).max(1);
        let mut pages = [0 as PageIdx; BATCH];
        let mut got = 0;
        // Pages this CPU's cache flushed to its list first: they are its
        // own lines, and taking them keeps the list from growing to a
        // spill while fresh blocks come from the buddy.
        let recycled = crate::pcp::order_to_pindex(mt, 0);
        while got < want && !pcp.is_empty(recycled) {
            let Some(idx) = mm.pcp_take_locked(&mut pcp, zi, 0, mt, flags) else {
                break;
            };
            pages[got] = idx;
            got += 1;
        }
        // Fresh pages in whole descriptor lines (see the module doc), so
        // the page kept for the caller, which this CPU will recycle, shares
        // its line with no other CPU's pages.
        if got == 0 {
            while got + (1 << LINE_ORDER) <= want.max(1 << LINE_ORDER) {
                let Some(head) = mm.pcp_take_locked(&mut pcp, zi, LINE_ORDER, mt, flags) else {
                    break;
                };
                for idx in head..head + (1 << LINE_ORDER) {
                    mm.desc(idx).set_free_state(PageFlags::PCP, 0, mt as u8);
                    pages[got] = idx;
                    got += 1;
                }
            }
        }
        // Single pages only when the lists have no block of a line.
        if got == 0 {
            while got < want {
                let Some(idx) = mm.pcp_take_locked(&mut pcp, zi, 0, mt, flags) else {
                    break;
                };
                pages[got] = idx;
                got += 1;
            }
        }
        let (&mut mine, rest) = pages[..got].split_last_mut()?;
        if !rest.is_empty() && !caches.stacks.push_many(target.slot, rest) {
            // The stack filled or stopped meanwhile: back to the lists.
            mm.uncache_pages(Some(&mut pcp), zi, mt, 0, rest);
        }
        Some(mine)
    }

    #[inline(always)]
    fn has_requests(&self, mm: &'a PageAllocator) -> bool {
        // Drains need no request (the stop protocol reaches the stacks);
        // pending poison does: the give stands aside for the slow path,
        // which consults the pending set.
        mm.hwpoison.any()
    }

    #[inline(always)]
    fn page(&self, mm: &'a PageAllocator, item: u32) -> Option<&'a PageDesc> {
        Some(mm.desc(item))
    }

    #[inline(always)]
    fn idx(&self, item: u32) -> PageIdx {
        item
    }

    #[inline(always)]
    fn pfn(&self, mm: &'a PageAllocator, item: u32) -> Pfn {
        mm.idx_to_pfn(item)
    }

    #[inline(always)]
    fn word_out(&self, resolved: &Target<'a>, frozen: bool) -> DescWord {
        DescWord::allocated(PageFlags::ALLOCATED, 0, resolved.mt as u8, u32::from(!frozen))
    }

    #[inline(always)]
    fn handed_out(&mut self, _stored: bool, _frozen: bool) {}

    #[inline(always)]
    fn find(&self, mm: &'a PageAllocator, pfn: Pfn) -> Option<(u32, PageIdx, &'a PageDesc)> {
        let offset = pfn.0.wrapping_sub(mm.mem.base_pfn);
        if offset >= mm.mem.pages.len() as u64 {
            return None;
        }
        let idx = offset as PageIdx;
        Some((idx, idx, mm.desc(idx)))
    }

    #[inline(always)]
    fn expects<const BLOCK: bool>(&self, _mm: &'a PageAllocator, idx: PageIdx, word: DescWord, frozen: bool) -> bool {
        if BLOCK {
            // Aligned, one reference, not compound, owned, local or poisoned.
            let order = self.0.block_order;
            !frozen && idx & ((1 << order) - 1) == 0 && word.is_plain_block(order)
        } else {
            // Any type tag: a contiguous range's pages are tagged
            // unmovable in movable blocks.
            word.is_plain_order0(u32::from(!frozen))
        }
    }

    #[inline(always)]
    fn slot_of<const BLOCK: bool>(&self, mm: &'a PageAllocator, idx: PageIdx) -> Option<(usize, MigrateType)> {
        let caches = self.0;
        let order = if BLOCK { caches.block_order } else { 0 };
        // The stack of the list the page would go on (its pageblock's type;
        // CMA and highatomic ride on the movable list; isolated blocks
        // bypass the lists).
        let mt = mm.pcp_list_type(idx, order)?;
        let zi = mm.zones.index_of(idx)?;
        let slot = caches.first_slot::<BLOCK>() + zi * TYPES + mt as usize;
        caches.usable(slot).then_some((slot, mt))
    }

    #[inline(always)]
    fn claim<const BLOCK: bool>(&mut self, page: &PageDesc, word: DescWord, mt: MigrateType, _frozen: bool) -> bool {
        // One compare-and-swap from exactly the word just checked drops the
        // last reference (claims a frozen page) and writes the cached
        // state: a reference taken, a racing free or a flag set meanwhile
        // fail it, and the slow path finds out which.
        let order = if BLOCK { self.0.block_order } else { 0 };
        page.drop_last_reference(word, DescWord::cached_block(order, mt as u8))
    }

    #[inline(always)]
    fn push<const BLOCK: bool>(
        &mut self,
        mm: &'a PageAllocator,
        slot: usize,
        mt: MigrateType,
        _item: u32,
        idx: PageIdx,
    ) {
        let caches = self.0;
        if BLOCK {
            if caches.stacks.push(slot, idx, u32::MAX) != Push::Done {
                // Full, or the CPU pinned or its stacks stopped: to its
                // lists (the buddy when pinned).
                mm.uncache_to_cpu(mm.current_cpu(), slot_zone(caches, slot), mt, caches.block_order, idx);
            }
            return;
        }
        let home = crate::sys::home_cpu();
        match caches.stacks.push(slot, idx, home) {
            Push::Done => {}
            Push::Full => flush(mm, caches, slot, mt, idx),
            Push::Unavailable => mm.uncache_to_cpu(mm.current_cpu(), slot_zone(caches, slot), mt, 0, idx),
            Push::Foreign => {
                // Back to the lists of the CPU the thread allocated on: on
                // this CPU's, its next refill would take the page and
                // recycle a line of the other CPU's pages.
                mm.uncache_to_cpu(mm.fold_cpu(home as usize), slot_zone(caches, slot), mt, 0, idx);
                // One slow free per migration: the thread's later frees
                // push here (a free-only thread must not stay on the lists).
                if let Some(cpu) = caches.stacks.current_cpu() {
                    crate::sys::set_home_cpu(cpu as u32);
                }
            }
        }
    }
}

/// The zone of `slot`.
#[inline(always)]
fn slot_zone(caches: &CpuCaches, slot: usize) -> usize {
    (slot % caches.order0_slots) / TYPES
}

/// A give found the stack full: moves half of it to the current CPU's
/// lists, then pushes `idx` (or frees it there too).
#[cold]
fn flush(mm: &PageAllocator, caches: &CpuCaches, slot: usize, mt: MigrateType, idx: PageIdx) {
    let mut pages = [0 as PageIdx; BATCH];
    let half = (usize::from(caches.batch[slot])).clamp(1, BATCH);
    let moved = caches.stacks.pop_many(slot, &mut pages[..half]).unwrap_or(0);
    // `pop_many` gives the top last and each page below goes on the
    // list's head, so in this order the list reads as the pages were
    // freed. Pushed the other way round, every flush reversed its run,
    // and after many flushes a walk of the list (a bulk allocation and
    // its free) jumped between descriptor lines every few pages (`mmkit
    // bench bulk`, `bulk_free/N`; test
    // `flushed_pages_keep_their_order_on_the_lists`).
    pages[..moved].reverse();
    let pushed = caches.stacks.push(slot, idx, u32::MAX) == Push::Done;
    let zi = slot_zone(caches, slot);
    let mut pcp = mm.lock_pcp_unless_pinned(mm.current_cpu(), zi);
    mm.uncache_pages(pcp.as_deref_mut(), zi, mt, 0, &pages[..moved]);
    if !pushed {
        mm.uncache_pages(pcp.as_deref_mut(), zi, mt, 0, &[idx]);
    }
}

impl PageAllocator {
    /// The shared API's per-CPU cache, where this map has one.
    #[inline(always)]
    pub(crate) fn cpu_cache(&self) -> Option<super::PageCache<OnCpu<'_>>> {
        self.cpu_caches.as_ref().map(|caches| super::PageCache(OnCpu(caches)))
    }

    /// Frees a cached block of `order`, zone `zi` and type `mt` that could
    /// not go on the current CPU's stack onto CPU `cpu`'s lists (to the
    /// buddy when that CPU is pinned).
    #[cold]
    fn uncache_to_cpu(&self, cpu: usize, zi: usize, mt: MigrateType, order: u32, idx: PageIdx) {
        let mut pcp = self.lock_pcp_unless_pinned(cpu, zi);
        self.uncache_pages(pcp.as_deref_mut(), zi, mt, order, &[idx]);
    }

    /// Empties the stacks of every kernel CPU that folds onto `cpu` into
    /// the buddy (`drain_cpu_pages`, `drain_all_pages`).
    pub(crate) fn drain_cpu_caches(&self, cpu: usize) {
        let Some(caches) = self.cpu_caches.as_ref() else {
            return;
        };
        for real in (cpu..caches.stacks.nr_cpus()).step_by(self.pcp.nr_cpus) {
            caches.stacks.drain_cpu(real, |slot, pages| {
                let mt = MigrateType::ALL[slot % TYPES];
                self.uncache_pages(None, slot_zone(caches, slot), mt, caches.slot_order(slot), pages);
            });
        }
    }

    /// Keeps the stacks of every kernel CPU that folds onto `cpu` out of
    /// use while a [`PinnedCpu`](crate::PinnedCpu) holds `cpu`, emptying
    /// them into the buddy: as with the CPU's lists, other threads running
    /// there go to the buddy meanwhile.
    pub(crate) fn pin_cpu_caches(&self, cpu: usize, pinned: bool) {
        let Some(caches) = self.cpu_caches.as_ref() else {
            return;
        };
        for real in (cpu..caches.stacks.nr_cpus()).step_by(self.pcp.nr_cpus) {
            caches.stacks.set_pinned(real, pinned);
        }
        if pinned {
            self.drain_cpu_caches(cpu);
        }
    }

    /// Blocks (their heads carry `PCP`) the CPUs' stacks hold in zone `zi`,
    /// and the pages in them.
    pub(crate) fn cpu_cached_blocks(&self, zi: usize) -> (u64, u64) {
        self.cpu_caches.as_ref().map_or((0, 0), |caches| caches.held_in_zone(zi))
    }
}
