//! Per-thread page caches: the shared API's order-0 fast path without a
//! per-operation lock.
//!
//! Owns the caches (a small array of free order-0 pages of one zone and
//! migratetype per thread and allocator, held in thread-local storage), the
//! allocator's table of cache slots through which other threads reach them
//! (drain requests, the counts the invariant checker and `nr_pcp_pages`
//! read, the pages of threads that exited), and the transitions through a
//! cache: pop, push, refill from and flush to the calling CPU's per-CPU
//! list. List mechanics, sizing and spills stay `pcp`'s.
//!
//! # Why
//! `alloc_pages` + `free_pages` on the per-CPU lists cost about 45 ns a
//! pair here with three locked instructions: the pageset try-lock on the
//! allocation and again on the free, and the reference drop. The pageset
//! lock is there because any thread may land on a CPU's lists. Linux makes
//! that safe by disabling preemption; TCMalloc by restartable sequences. A
//! thread's own cache needs neither: only its thread touches it, so the
//! pair keeps one atomic, the compare-and-swap that drops the last
//! reference (other threads may hold speculative references to a page that
//! is out, so that one stays, as in `put_page_testzero`).
//!
//! Pages in a cache are free and carry `PCP`, exactly like pages on a
//! per-CPU list, so every other path already treats them as cached:
//! compaction and isolation skip them, `memory_failure` leaves them pending
//! and the pop drops them. A page allocated from one thread's cache may be
//! freed by any thread; it goes to the freeing thread's cache (a thread
//! that has only freed so far caches pages of the zone and type of the
//! first one, so a consumer of pages another thread allocates skips the
//! lock too).
//!
//! # Reaching another thread's cache
//! No other thread may touch a cache, so the rest of the allocator reaches
//! it through its slot: `drain_all_pages` flushes the calling thread's own
//! cache and the pages of exited threads, and raises a request bit on every
//! other slot that holds pages; the owner flushes at its next call (as a
//! pinned CPU does). A thread that exits leaves its pages in the table
//! (thread-local destructors cannot know whether the allocator is still
//! alive; the table is shared with the thread through an `Arc`), where the
//! next drain returns them. A cache holds at most a batch of the list it
//! refills from, so what an idle thread keeps is bounded by
//! `MAX_THREAD_CACHES` × 64 pages.
//!
//! A cache serves one request mask's preferred zone and migratetype on the
//! node of the CPU its thread ran on at the last refill; a thread that
//! moves to another node's CPU switches at its next refill, and requests
//! with `__GFP_THISNODE` always take the lists. Other orders, frozen
//! pages and everything a cache cannot serve take the usual paths.
//!
//! Requires `std` (thread-local storage); without it, and in loom models,
//! the shared API takes the per-CPU lists as before.
#![deny(unsafe_code)]

use crate::mem::page::{PageDesc, PageFlags, PageIdx};
use crate::mem::sync::Lock;
use crate::page_alloc::magazine::{Order0Target, MAG_BATCH, MAG_SLOTS};
use crate::types::gfp::Gfp;
use crate::{PageAllocator, Pfn};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::cell::RefCell;
use core::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicU8};

/// Threads that can have a cache on one allocator at once; later threads
/// use the per-CPU lists.
pub(crate) const MAX_THREAD_CACHES: usize = 64;

/// Ask the owner to flush its cache.
const REQUEST_FLUSH: u8 = 1;

/// The allocator's side of the caches, shared with the threads that have
/// one.
pub(crate) struct ThreadCaches {
    slots: Vec<Arc<CacheSlot>>,
    /// Pages of threads that exited with a non-empty cache: (zone index,
    /// page).
    orphans: Lock<Vec<(usize, PageIdx)>>,
}

/// One thread's entry in the table, padded to a cache line: only its
/// owner writes `held`.
#[repr(align(128))]
#[derive(Default)]
struct CacheSlot {
    claimed: AtomicBool,
    requests: AtomicU8,
    /// Zone index in the high half, pages held in the low half; written by
    /// the owner after every change, read by counts.
    held: AtomicU64,
}

impl ThreadCaches {
    pub(crate) fn new() -> Self {
        Self {
            slots: (0..MAX_THREAD_CACHES).map(|_| Arc::new(CacheSlot::default())).collect(),
            orphans: Lock::new(Vec::new()),
        }
    }

    /// A free slot for a new thread, if any.
    fn claim(&self) -> Option<Arc<CacheSlot>> {
        let slot = self.slots.iter().find(|slot| {
            !slot.claimed.load(Relaxed) && slot.claimed.compare_exchange(false, true, Acquire, Relaxed).is_ok()
        })?;
        Some(Arc::clone(slot))
    }

    /// Pages the caches and exited threads hold in zone `zi`.
    pub(crate) fn held_in_zone(&self, zi: usize) -> u64 {
        let live: u64 = self
            .slots
            .iter()
            .map(|slot| slot.held.load(Acquire))
            .filter(|held| (held >> 32) as usize == zi)
            .map(|held| held & u64::from(u32::MAX))
            .sum();
        live + self.orphans.lock().iter().filter(|&&(z, _)| z == zi).count() as u64
    }
}

/// A thread's cache for one allocator (thread-local).
struct ThreadCache {
    table: Arc<ThreadCaches>,
    /// This thread's entry in the table, held directly to save the lookup.
    slot: Arc<CacheSlot>,
    /// The request mask the target was resolved for; `None` until the
    /// first order-0 allocation, and then the target fields mean nothing.
    gfp: Option<Gfp>,
    target: Order0Target,
    /// The whole word (state and refcount 1) an order-0 allocation of `mt`
    /// leaves in a page, and so the one the free expects.
    allocated_word: u64,
    /// The word of a cached page.
    cached_word: u64,
    capacity: usize,
    batch: usize,
    len: usize,
    pages: [PageIdx; MAG_SLOTS],
}

impl ThreadCache {
    #[inline(always)]
    fn publish(&self) {
        self.slot.held.store(((self.target.zi as u64) << 32) | self.len as u64, Release);
    }
}

impl Drop for ThreadCache {
    /// The thread exits (or the allocator went away): the pages wait in
    /// the table for the next drain.
    fn drop(&mut self) {
        if self.len > 0 {
            let zi = self.target.zi;
            self.table.orphans.lock().extend(self.pages[..self.len].iter().map(|&idx| (zi, idx)));
            self.len = 0;
        }
        let slot = &self.slot;
        slot.held.store(0, Release);
        slot.requests.store(0, Relaxed);
        slot.claimed.store(false, Release);
    }
}

std::thread_local! {
    /// This thread's caches, one per allocator it used; the most recently
    /// used first.
    static CACHES: RefCell<Vec<ThreadCache>> = const { RefCell::new(Vec::new()) };
}

impl PageAllocator {
    /// Runs `f` on this thread's cache for this allocator, making one when
    /// `create` is set; `None` without caches, when the table is full, or
    /// during thread exit.
    #[inline(always)]
    fn with_thread_cache<R>(&self, create: bool, f: impl FnOnce(&mut ThreadCache) -> Option<R>) -> Option<R> {
        let table = self.thread_caches.as_ref()?;
        CACHES
            .try_with(|caches| {
                let mut caches = caches.try_borrow_mut().ok()?;
                let found = caches.first().is_some_and(|tc| Arc::ptr_eq(&tc.table, table));
                if !found && !locate(&mut caches, table, create) {
                    return None;
                }
                f(&mut caches[0])
            })
            .ok()
            .flatten()
    }

    /// The thread cache's order-0 allocation; `None` sends the caller to
    /// the per-CPU lists (another mask's first request, a zone near its
    /// watermark, an empty cache that could not refill, a poisoned page).
    #[inline(always)]
    pub(crate) fn thread_cache_alloc(&self, gfp: Gfp) -> Option<Pfn> {
        if gfp.contains(Gfp::THISNODE) {
            // The cache holds pages of the node its thread ran on at the
            // last refill; a request that must not leave the current node
            // takes the lists.
            return None;
        }
        self.with_thread_cache(true, |tc| {
            if tc.gfp != Some(gfp) && !self.tc_retarget(tc, gfp) {
                return None;
            }
            if tc.slot.requests.load(Relaxed) != 0 {
                self.tc_serve(tc);
            }
            let zone = &self.zones[tc.target.zi];
            if !self.zone_allows(zone, 0, tc.target.flags, tc.target.highest) {
                return None;
            }
            if tc.len == 0 && !self.tc_refill(tc, gfp) {
                return None;
            }
            tc.len -= 1;
            let idx = tc.pages[tc.len];
            let page = self.desc(idx);
            if self.hwpoisoned_with_flag(page.has(PageFlags::HWPOISON), idx) {
                self.drop_poisoned(idx);
                tc.publish();
                return None;
            }
            self.wake_kswapd_if_boosted(zone, gfp, tc.target.flags);
            self.prep_order0(page, idx, gfp, tc.target.mt, tc.allocated_word);
            tc.publish();
            Some(self.idx_to_pfn(idx))
        })
    }

    /// The thread cache's free of an order-0 page: true when done, false
    /// (and nothing changed) for anything but the common case.
    #[inline(always)]
    pub(crate) fn thread_cache_free(&self, pfn: Pfn) -> bool {
        self.with_thread_cache(true, |tc| {
            let offset = pfn.0.wrapping_sub(self.mem.base_pfn);
            if (offset < u64::from(tc.target.zone_start) || offset >= u64::from(tc.target.zone_end))
                && !self.tc_adopt(tc, offset)
            {
                return None;
            }
            let idx = offset as PageIdx;
            let page = self.desc(idx);
            // The word compare is free_pages_prepare's checks: exactly one
            // reference, no check-at-free flag, not compound, not owned, not
            // local to a pinned CPU, not poisoned.
            if page.load_word() != tc.allocated_word || self.hwpoison.any() || self.mem.blocks.get(idx) != tc.target.mt
            {
                return None;
            }
            if tc.slot.requests.load(Relaxed) != 0 {
                self.tc_serve(tc);
            }
            if tc.len >= tc.capacity {
                self.tc_flush(tc, tc.capacity / 2);
            }
            // One compare-and-swap from exactly the word just checked drops
            // the last reference and writes the cached state (others
            // holding references, a racing free or a flag set meanwhile fail
            // it, and the general path takes over).
            #[cfg(test)]
            crate::page_alloc::hwpoison::race_hook::run(idx);
            if !page.replace_word(tc.allocated_word, tc.cached_word) {
                return None;
            }
            tc.pages[tc.len] = idx;
            tc.len += 1;
            tc.publish();
            Some(())
        })
        .is_some()
    }

    /// Points the cache at `gfp`'s order-0 target on the calling CPU's node
    /// (flushing pages of another zone or type first); false when that
    /// target cannot be cached.
    #[cold]
    fn tc_retarget(&self, tc: &mut ThreadCache, gfp: Gfp) -> bool {
        let cpu = self.current_cpu();
        let Some((target, _)) = self.order0_target(self.node_of_cpu(cpu), gfp) else {
            return false;
        };
        let same_list = (tc.target.zi, tc.target.mt) == (target.zi, target.mt);
        if same_list && tc.capacity > 0 {
            // Another mask for the same list (say with and without
            // __GFP_ZERO): the cached pages, sizes and words all stay.
            tc.gfp = Some(gfp);
            tc.target = target;
            return true;
        }
        if tc.len > 0 && !same_list {
            self.tc_flush(tc, tc.len);
        }
        let Some(sizing) = self.pcp_info(cpu, target.zi).ok().flatten() else {
            return false;
        };
        tc.gfp = Some(gfp);
        tc.target = target;
        self.tc_set_words(tc, sizing);
        true
    }

    /// Points an empty cache at the zone and pageblock type of the page at
    /// `offset` being freed, so that a thread that only frees (the consumer
    /// of pages another thread allocates) caches them too; false when it
    /// holds pages of another target or that page cannot be cached. The
    /// mask stays unset: the thread's first allocation resolves its own.
    #[cold]
    fn tc_adopt(&self, tc: &mut ThreadCache, offset: u64) -> bool {
        if tc.len > 0 || offset >= self.mem.pages.len() as u64 {
            return false;
        }
        let idx = offset as PageIdx;
        let (Some(zi), Some(mt)) = (self.zone_index_of(idx), self.pcp_list_type(idx, 0)) else {
            return false;
        };
        let zone = &self.zones[zi];
        if mt != self.mem.blocks.get(idx) || zone.placement.merges_before_caching() {
            return false;
        }
        let Some(sizing) = self.pcp_info(self.current_cpu(), zi).ok().flatten() else {
            return false;
        };
        tc.gfp = None;
        tc.target = Order0Target { zi, mt, zone_start: zone.start_idx, zone_end: zone.end_idx, ..Order0Target::NONE };
        self.tc_set_words(tc, sizing);
        true
    }

    /// The cache's sizes and descriptor words for its target.
    fn tc_set_words(&self, tc: &mut ThreadCache, sizing: crate::PcpInfo) {
        let mt = tc.target.mt as u8;
        tc.capacity = tc.target.capacity(sizing.high_min);
        tc.batch = MAG_BATCH.min(sizing.batch.max(1) as usize);
        tc.allocated_word = PageDesc::word_of(PageDesc::state_word_of(PageFlags::ALLOCATED, 0, mt), 1);
        tc.cached_word = PageDesc::word_of(PageDesc::state_word_of(PageFlags::PCP, 0, mt), 0);
        tc.publish();
    }

    /// Brings up to a batch of pages from the calling CPU's list (which
    /// refills from the buddy as usual); false if none came or the list is
    /// busy.
    #[cold]
    fn tc_refill(&self, tc: &mut ThreadCache, gfp: Gfp) -> bool {
        let cpu = self.current_cpu();
        // A thread that moved to another node's CPU refills from its new
        // node (the pages still cached came from the old one; preferring
        // the local node is a hint, as for a task Linux migrates).
        if self.zones[tc.target.zi].nid != self.node_of_cpu(cpu) && !self.tc_retarget(tc, gfp) {
            return false;
        }
        let Some(mut pcp) = self.try_lock_pcp(cpu, tc.target.zi) else {
            return false;
        };
        while tc.len < tc.batch {
            match self.pcp_take_locked(&mut pcp, tc.target.zi, 0, tc.target.mt, tc.target.flags) {
                Some(idx) => {
                    tc.pages[tc.len] = idx;
                    tc.len += 1;
                }
                None => break,
            }
        }
        tc.publish();
        tc.len > 0
    }

    /// Returns the `count` oldest pages of the cache to the calling CPU's
    /// list (spilling to the buddy as usual; straight to the buddy when that
    /// CPU is pinned).
    #[cold]
    fn tc_flush(&self, tc: &mut ThreadCache, count: usize) {
        let count = count.min(tc.len);
        let mut pcp = self.lock_pcp_unless_pinned(self.current_cpu(), tc.target.zi);
        self.uncache_pages(pcp.as_deref_mut(), tc.target.zi, tc.target.mt, &tc.pages[..count]);
        tc.pages.copy_within(count..tc.len, 0);
        tc.len -= count;
        tc.publish();
    }

    /// Serves a drain request left by another thread.
    #[cold]
    fn tc_serve(&self, tc: &mut ThreadCache) {
        if tc.slot.requests.swap(0, AcqRel) & REQUEST_FLUSH != 0 {
            self.tc_flush(tc, tc.len);
        }
    }

    /// `drain_all_pages`' part: empties this thread's cache and what exited
    /// threads left, and asks every other thread holding pages to flush at
    /// its next call.
    pub(crate) fn drain_thread_caches(&self) {
        let Some(table) = self.thread_caches.as_ref() else {
            return;
        };
        let own = self.with_thread_cache(false, |tc| {
            self.tc_flush(tc, tc.len);
            Some(Arc::as_ptr(&tc.slot))
        });
        let orphans = core::mem::take(&mut *table.orphans.lock());
        for (zi, idx) in orphans {
            let mt = self.mem.blocks.get(idx);
            self.uncache_pages(None, zi, mt, &[idx]);
        }
        for slot in &table.slots {
            if Some(Arc::as_ptr(slot)) != own && slot.held.load(Acquire) & u64::from(u32::MAX) != 0 {
                slot.requests.fetch_or(REQUEST_FLUSH, Release);
            }
        }
    }

    /// Pages held by thread caches in zone `zi` (including exited threads'
    /// until the next drain).
    pub(crate) fn thread_cached_pages(&self, zi: usize) -> u64 {
        self.thread_caches.as_ref().map_or(0, |table| table.held_in_zone(zi))
    }
}

/// Brings this thread's cache for `table` to the front of `caches`, making
/// one if `create` (and a slot is free); drops caches of allocators that
/// are gone. False when there is none.
#[cold]
fn locate(caches: &mut Vec<ThreadCache>, table: &Arc<ThreadCaches>, create: bool) -> bool {
    caches.retain(|tc| Arc::strong_count(&tc.table) > 1);
    if let Some(i) = caches.iter().position(|tc| Arc::ptr_eq(&tc.table, table)) {
        caches.swap(0, i);
        return true;
    }
    if !create {
        return false;
    }
    let Some(slot) = table.claim() else {
        return false;
    };
    caches.push(ThreadCache {
        table: Arc::clone(table),
        slot,
        gfp: None,
        target: Order0Target::NONE,
        allocated_word: 0,
        cached_word: 0,
        capacity: 0,
        batch: 0,
        len: 0,
        pages: [0; MAG_SLOTS],
    });
    let last = caches.len() - 1;
    caches.swap(0, last);
    true
}
