//! The per-CPU order-0 cache: the default path of `alloc_pages` and
//! `free_pages` for order-0 pages, with no lock and one atomic per pair;
//! beside it, a short stack of pageblock-order (THP-order) blocks per
//! CPU, zone and type, so that the default path of those needs no lock
//! either (see "Pageblock-order blocks" below).
//!
//! Owns the transitions of a page through the cache: a pop (allocation), a
//! push (free), a refill from and a flush to the CPU's per-CPU lists, and
//! the drain. The stacks themselves and the restartable sequences that edit
//! them are `mem::rseq`'s; the lists, their sizing and spills stay `pcp`'s.
//!
//! # Why
//! The per-CPU lists sit behind a try-lock because any thread may land on
//! a CPU's lists: a compare-and-swap and a release store per operation,
//! plus a doubly linked list whose neighbour descriptors are written on
//! every push and pop. Linux avoids the lock by disabling preemption;
//! TCMalloc by restartable sequences, which is what this cache does. One
//! stack of page indices per (CPU, zone, pcp migratetype) is edited in a
//! sequence the kernel restarts if it is interrupted, so a pop or a push is
//! a handful of plain loads and stores. The pair keeps one atomic: the
//! compare-and-swap that drops the last reference on free (others may hold
//! speculative references, as in `put_page_testzero`).
//!
//! Pages on a stack are free and carry `PCP`, like pages on a per-CPU
//! list, so every other path already treats them as cached: compaction and
//! isolation skip them, `memory_failure` leaves them pending (the pop
//! drops them), and `drain_all_pages` empties the stacks through the stop
//! protocol of `mem::rseq`.
//!
//! # Whose descriptor lines
//! Descriptors are 16 bytes, four to a cache line. Two CPUs that each
//! recycle one page whose descriptors share a line write that line on
//! every operation, and a pair then costs several times as much (the
//! bimodal two-thread runs of the locked lists). A refill therefore takes
//! whole order-2 blocks (four aligned pages, one descriptor line) from the
//! lists when it can, so the pages a CPU caches come in lines no other
//! CPU's cache holds. A thread that migrates would break that: it
//! allocated its pages on the old CPU and frees them on the new one, and
//! a thread recycling one page then writes a line the old CPU's threads
//! write too (the two-thread pair ran at a third of its speed in one run
//! of three that way). So a free pushes onto the stack only when it runs
//! on the CPU of its thread's last cached allocation (checked inside the
//! sequence, so a migration between the check and the push cannot slip
//! through); otherwise that one page goes to the old CPU's locked lists
//! (not the new CPU's, whose next refill would take it), and the thread's
//! CPU becomes the new one. Threads that only free (consumers of
//! pages others allocate) have no such CPU and always push.
//!
//! # Pageblock-order blocks
//! Linux keeps blocks of `pageblock_order` on the per-CPU lists too
//! (`pcp_allowed_order`), so a THP allocation after a THP free takes no
//! zone lock. Here the lists' try-lock costs a compare-and-swap on each
//! side, two of a pair's three; a stack of at most [`BLOCK_CAP`] blocks
//! per slot leaves the reference drop. An empty stack takes one block
//! from the lists (no batch refill: each block is a pageblock of memory),
//! a full one sends the freed block to them. Blocks are far apart, so no
//! descriptor line is shared and a free pushes on whatever CPU it runs.
//! While hardware poison is pending a popped block goes to the buddy
//! (whose release skips poisoned pages) and a freed one takes the general
//! path: a block holds 2^order pages, too many for the pop to check.
//!
//! Only the shared API uses the cache (`alloc_pages`, `free_pages`,
//! `put_page` of order 0 when the caller does not name a CPU). Pinned
//! handles have their own magazine, and calls through a [`CpuHandle`]
//! name a CPU and use its lists, as a deterministic replay needs.
//!
//! [`CpuHandle`]: crate::CpuHandle
#![deny(unsafe_code)]

use crate::mem::page::{DescWord, PageFlags, PageIdx};
use crate::mem::rseq::{CpuStacks, Pop, Push};
use crate::mem::stack::STACK_SLOTS;
use crate::types::gfp::{AllocFlags, Gfp, MigrateType};
use crate::{PageAllocator, Pfn};
use alloc::vec::Vec;

std::thread_local! {
    /// The CPU of this thread's last cached allocation (`u32::MAX`: none
    /// yet). A free pushes onto the current CPU's stack only on that CPU;
    /// see the module doc.
    static LAST_CPU: core::cell::Cell<u32> = const { core::cell::Cell::new(u32::MAX) };
}

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

/// The allocator's per-CPU caches: the stacks, and which of them may be
/// used at all.
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

/// The whole word of an order-0 page of type `mt` just allocated with one
/// reference: the word a cached free expects.
#[inline(always)]
const fn allocated_word(mt: u8) -> DescWord {
    DescWord::allocated(PageFlags::ALLOCATED, 0, mt, 1)
}

/// The whole word of a page on a stack (free, `PCP`, order 0, no reference).
#[inline(always)]
const fn cached_word(mt: u8) -> DescWord {
    DescWord::cached(mt)
}

impl CpuCaches {
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

    /// The zone of `slot`.
    #[inline(always)]
    fn slot_zone(&self, slot: usize) -> usize {
        (slot % self.order0_slots) / TYPES
    }

    /// Caches for `allocator`'s zones, if restartable sequences work here.
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

impl PageAllocator {
    /// The cache's order-0 allocation; `None` sends the caller down the
    /// usual path (no cache here, another node's CPU number, a zone near
    /// its watermark, a stopped stack, an empty stack that could not
    /// refill, a poisoned page).
    #[inline(always)]
    pub(crate) fn cpu_cache_alloc(&self, gfp: Gfp) -> Option<Pfn> {
        let caches = self.cpu_caches.as_ref()?;
        // One node: no need to ask where we run before the sequence does.
        let nid =
            if self.zones.nr_nodes() == 1 { 0 } else { self.node_of_cpu(self.fold_cpu(caches.stacks.current_cpu()?)) };
        // `usable` says whether the lists serve the request's type.
        let target = self.fast_target(nid, gfp, 0)?;
        let slot = target.zi * TYPES + target.mt as usize;
        if !target.mt.is_pcp_type() || !caches.usable(slot) {
            return None;
        }
        let idx = match caches.stacks.pop(slot) {
            Pop::Item(idx, cpu) => {
                LAST_CPU.with(|last| last.set(cpu));
                idx
            }
            Pop::Empty => {
                // A boost the refill causes wakes kswapd at the next
                // allocation's check, before it takes a page: no hook runs
                // while a page is in hand (`wake_kswapd_if_boosted`).
                self.cpu_cache_refill(caches, target.zi, target.mt, &target.flags)?
            }
            Pop::Unavailable => return None,
        };
        let page = self.desc(idx);
        if self.hwpoisoned_with_flag(page.has(PageFlags::HWPOISON), idx) {
            // Poisoned while cached: out of circulation for good.
            self.drop_poisoned(idx);
            return None;
        }
        self.prep_order0(page, idx, gfp, target.mt, allocated_word(target.mt as u8));
        Some(self.idx_to_pfn(idx))
    }

    /// The cache's free of an order-0 page: true when done, false (and
    /// nothing changed) for anything but the common case, which the
    /// general path then diagnoses.
    #[inline(always)]
    pub(crate) fn cpu_cache_free(&self, pfn: Pfn) -> bool {
        let Some(caches) = self.cpu_caches.as_ref() else {
            return false;
        };
        let offset = pfn.0.wrapping_sub(self.mem.base_pfn);
        if offset >= self.mem.pages.len() as u64 {
            return false;
        }
        let idx = offset as PageIdx;
        let page = self.desc(idx);
        let word = page.load_word();
        // The mask compare is free_pages_prepare's checks: exactly one
        // reference, order 0, no check-at-free flag, not compound, not
        // owned, not local to a pinned CPU, not poisoned (any type tag: a
        // contiguous range's pages are tagged unmovable in movable blocks).
        if !word.is_plain_order0(1) || self.hwpoison.any() {
            return false;
        }
        // The stack of the list the page would go on (its pageblock's type;
        // CMA and highatomic ride on the movable list; isolated blocks
        // bypass the lists).
        let Some(list_type) = self.pcp_list_type(idx, 0) else {
            return false;
        };
        let mt = list_type as u8;
        let Some(zi) = self.zones.index_of(idx) else {
            return false;
        };
        let slot = zi * TYPES + mt as usize;
        if !caches.usable(slot) {
            return false;
        }
        // One compare-and-swap from exactly the word just checked drops the
        // last reference and writes the cached state (a reference taken, a
        // racing free or a flag set meanwhile fail it; the general path
        // takes over and finds out which).
        #[cfg(test)]
        crate::page_alloc::hwpoison::race_hook::run(idx);
        if !page.drop_last_reference(word, cached_word(mt)) {
            return false;
        }
        let home = LAST_CPU.with(core::cell::Cell::get);
        match caches.stacks.push(slot, idx, home) {
            Push::Done => {}
            Push::Full => self.cpu_cache_flush(caches, slot, zi, idx),
            Push::Unavailable => {
                self.cpu_cache_uncache(self.current_cpu(), zi, MigrateType::ALL[usize::from(mt)], 0, idx);
            }
            Push::Foreign => {
                // Back to the lists of the CPU the thread allocated on: on
                // this CPU's, its next refill would take the page and
                // recycle a line of the other CPU's pages.
                self.cpu_cache_uncache(self.fold_cpu(home as usize), zi, MigrateType::ALL[usize::from(mt)], 0, idx);
                // One slow free per migration: the thread's later frees
                // push here (a free-only thread must not stay on the lists).
                if let Some(cpu) = caches.stacks.current_cpu() {
                    LAST_CPU.with(|last| last.set(cpu as u32));
                }
            }
        }
        true
    }

    /// Refills the current CPU's stack of (`zi`, `mt`) from its lists
    /// (which refill from the buddy as usual), keeping one page for the
    /// caller; `None` when the lists are busy, pinned or empty.
    #[cold]
    fn cpu_cache_refill(&self, caches: &CpuCaches, zi: usize, mt: MigrateType, flags: &AllocFlags) -> Option<PageIdx> {
        let slot = zi * TYPES + mt as usize;
        let want = usize::from(caches.batch[slot]).max(1);
        let mut pages = [0 as PageIdx; BATCH];
        let mut got = 0;
        let cpu = self.fold_cpu(caches.stacks.current_cpu()?);
        let mut pcp = self.try_lock_pcp(cpu, zi)?;
        // Pages this CPU's cache flushed to its list first: they are its
        // own lines, and taking them keeps the list from growing to a
        // spill while fresh blocks come from the buddy.
        let recycled = crate::pcp::order_to_pindex(mt, 0);
        while got < want && !pcp.is_empty(recycled) {
            let Some(idx) = self.pcp_take_locked(&mut pcp, zi, 0, mt, *flags) else {
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
                let Some(head) = self.pcp_take_locked(&mut pcp, zi, LINE_ORDER, mt, *flags) else {
                    break;
                };
                for idx in head..head + (1 << LINE_ORDER) {
                    self.desc(idx).set_free_state(PageFlags::PCP, 0, mt as u8);
                    pages[got] = idx;
                    got += 1;
                }
            }
        }
        // Single pages only when the lists have no block of a line.
        if got == 0 {
            while got < want {
                let Some(idx) = self.pcp_take_locked(&mut pcp, zi, 0, mt, *flags) else {
                    break;
                };
                pages[got] = idx;
                got += 1;
            }
        }
        let (&mut mine, rest) = pages[..got].split_last_mut()?;
        if !rest.is_empty() && !caches.stacks.push_many(slot, rest) {
            // The stack filled or stopped meanwhile: back to the lists.
            self.uncache_pages(Some(&mut pcp), zi, mt, 0, rest);
        }
        Some(mine)
    }

    /// The free found the stack full: moves half of it to the current
    /// CPU's lists, then pushes `idx` (or frees it there too).
    #[cold]
    fn cpu_cache_flush(&self, caches: &CpuCaches, slot: usize, zi: usize, idx: PageIdx) {
        let mut pages = [0 as PageIdx; BATCH];
        let half = (usize::from(caches.batch[slot])).clamp(1, BATCH);
        let moved = caches.stacks.pop_many(slot, &mut pages[..half]).unwrap_or(0);
        // `pop_many` gives the top last and each page below goes on the
        // list's head, so in this order the list reads as the pages were
        // freed. Pushed the other way round, every flush reversed its run,
        // and after many flushes a walk of the list (a bulk allocation and
        // its free) jumped between descriptor lines every few pages:
        // `bulk_free/N` of `mmkit bench bulk` ran about 30 % slower, with
        // the same instructions (test `flushed_pages_keep_their_order_on_the_lists`).
        pages[..moved].reverse();
        let pushed = caches.stacks.push(slot, idx, u32::MAX) == Push::Done;
        let mt = MigrateType::ALL[slot % TYPES];
        let cpu = self.current_cpu();
        let mut pcp = self.lock_pcp_unless_pinned(cpu, zi);
        self.uncache_pages(pcp.as_deref_mut(), zi, mt, 0, &pages[..moved]);
        if !pushed {
            self.uncache_pages(pcp.as_deref_mut(), zi, mt, 0, &[idx]);
        }
    }

    /// Frees a cached block of `order`, zone `zi` and type `mt` that could
    /// not go on the current CPU's stack onto CPU `cpu`'s lists (to the
    /// buddy when that CPU is pinned).
    #[cold]
    fn cpu_cache_uncache(&self, cpu: usize, zi: usize, mt: MigrateType, order: u32, idx: PageIdx) {
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
                self.uncache_pages(None, caches.slot_zone(slot), mt, caches.slot_order(slot), pages);
            });
        }
    }

    /// Keeps the caches of every kernel CPU that folds onto `cpu` out of
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

    /// Blocks the per-CPU caches hold in zone `zi`, and the pages in them.
    pub(crate) fn cpu_cached_blocks(&self, zi: usize) -> (u64, u64) {
        self.cpu_caches.as_ref().map_or((0, 0), |caches| caches.held_in_zone(zi))
    }

    /// The cache's allocation of a pageblock-order block (`order` is the
    /// pageblock order; the caller checked): a pop from the current CPU's stack, or one
    /// block from its lists when the stack is empty. `None` as for
    /// [`cpu_cache_alloc`](Self::cpu_cache_alloc), and while hardware
    /// poison is pending. Inlined into `alloc_pages_block`.
    #[inline(always)]
    pub(crate) fn cpu_cache_alloc_block(&self, gfp: Gfp, order: u32) -> Option<Pfn> {
        let caches = self.cpu_caches.as_ref()?;
        debug_assert_eq!(order, caches.block_order);
        let nid =
            if self.zones.nr_nodes() == 1 { 0 } else { self.node_of_cpu(self.fold_cpu(caches.stacks.current_cpu()?)) };
        let target = self.fast_target(nid, gfp, order)?;
        let slot = caches.order0_slots + target.zi * TYPES + target.mt as usize;
        if !target.mt.is_pcp_type() || !caches.usable(slot) {
            return None;
        }
        let idx = match caches.stacks.pop(slot) {
            Pop::Item(idx, _) => idx,
            Pop::Empty => {
                let cpu = self.fold_cpu(caches.stacks.current_cpu()?);
                let mut pcp = self.try_lock_pcp(cpu, target.zi)?;
                // As after the order-0 refill: a boost wakes kswapd at the
                // next allocation's check.
                self.pcp_take_locked(&mut pcp, target.zi, order, target.mt, target.flags)?
            }
            Pop::Unavailable => return None,
        };
        if self.hwpoison.any() {
            // Poison pending (perhaps in this block: the pop cannot check
            // its 2^order pages): the block goes back, and the release to
            // the buddy leaves any poisoned page out.
            self.uncache_pages(None, target.zi, target.mt, order, &[idx]);
            return None;
        }
        self.prep_new_page(idx, order, gfp, target.mt, false);
        Some(self.idx_to_pfn(idx))
    }

    /// The cache's free of a pageblock-order block: true when done, false
    /// (nothing changed) for anything but a plain block with one reference
    /// and no poison pending. Inlined into `free_pages_block`.
    #[inline(always)]
    pub(crate) fn cpu_cache_free_block(&self, pfn: Pfn, order: u32) -> bool {
        let Some(caches) = self.cpu_caches.as_ref() else {
            return false;
        };
        let offset = pfn.0.wrapping_sub(self.mem.base_pfn);
        debug_assert_eq!(order, caches.block_order);
        if offset >= self.mem.pages.len() as u64 || self.hwpoison.any() {
            return false;
        }
        let idx = offset as PageIdx;
        let page = self.desc(idx);
        let word = page.load_word();
        // Aligned, one reference, not compound, owned, local or poisoned.
        if idx & ((1 << order) - 1) != 0 || !word.is_plain_block(order) {
            return false;
        }
        let Some(list_type) = self.pcp_list_type(idx, order) else {
            return false;
        };
        let Some(zi) = self.zones.index_of(idx) else {
            return false;
        };
        let slot = caches.order0_slots + zi * TYPES + list_type as usize;
        if !caches.usable(slot) {
            return false;
        }
        if !page.drop_last_reference(word, DescWord::cached_block(order, list_type as u8)) {
            return false;
        }
        if caches.stacks.push(slot, idx, u32::MAX) != Push::Done {
            // Full, or the CPU pinned or its stacks stopped: to its lists
            // (the buddy when pinned).
            self.cpu_cache_uncache(self.current_cpu(), zi, list_type, order, idx);
        }
        true
    }
}
