//! Hardware poison on the allocator's side (Linux's `memory_failure` for
//! pages the page allocator owns, mm/memory-failure.c): marking a page,
//! taking a free one off the lists, and remembering an in-use one until a
//! free path drops it.
//!
//! Owns the set of *pending* poisoned pages: pages `memory_failure` marked
//! while they were allocated, cached on a per-CPU list or in the middle of
//! a free. It touches free lists only through the zone (`take_page`) and
//! per-CPU lists only through drains.
//!
//! # Why a set and not only the flag
//! `HWPOISON` lives in the descriptor's state word, which the fast paths
//! write with plain stores computed from an earlier load
//! (`free_pages_prepare`, the per-CPU push and spill, `prep_new_page`):
//! making each of those a read-modify-write would put an atomic on every
//! free. A `memory_failure` that sets the flag between such a load and
//! its store loses it, and a pinned CPU would then cache and hand out the
//! page again. So the flag is only a hint; the pending set is the truth.
//! While it is non-empty (`hwpoison_pending != 0`, one relaxed load):
//! frees bypass the per-CPU lists (a pinned CPU's owner is sent the
//! drain request `memory_failure` leaves instead), every release to the buddy
//! (`release_locked`) and every per-CPU pop asks the set, and a page found
//! there is dropped and leaves the set. No path puts a pending page on a
//! list that hands pages out without asking, so the lost flag is harmless.
#![deny(unsafe_code)]

use crate::mem::page::{PageFlags, PageIdx};
use crate::mem::sync::Lock;
use crate::types::error::PageError;
use crate::{PageAllocator, Pfn};
use alloc::vec::Vec;
use core::sync::atomic::AtomicU64;
use core::sync::atomic::Ordering::Relaxed;

/// What `memory_failure` did with the page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryFailure {
    /// The page was free; it is now off the free lists for good.
    TakenOffFreeList,
    /// The page is in use (or cached on a pinned CPU's list); it will be
    /// dropped instead of freed.
    InUse,
    /// The page is reserved; it was never going to be handed out.
    Reserved,
    /// The page had been leaked as a bad page; it is out of circulation.
    Leaked,
    /// The page was already poisoned.
    AlreadyPoisoned,
}

/// Poisoned pages not yet out of circulation, and their count for the
/// fast paths' one-load check.
pub(crate) struct PendingPoison {
    /// Descriptor indices; a handful at most, so a vector is the set.
    pages: Lock<Vec<PageIdx>>,
    /// `pages.len()`, readable without the lock.
    count: AtomicU64,
}

impl Default for PendingPoison {
    fn default() -> Self {
        Self { pages: Lock::new(Vec::new()), count: AtomicU64::new(0) }
    }
}

impl PendingPoison {
    /// Whether any page is pending: the fast paths' check.
    #[inline(always)]
    pub(crate) fn any(&self) -> bool {
        self.count.load(Relaxed) != 0
    }

    /// Whether page `idx` is pending.
    #[cold]
    pub(crate) fn contains(&self, idx: PageIdx) -> bool {
        self.pages.lock().contains(&idx)
    }

    /// Adds page `idx`; false if it was there already.
    fn insert(&self, idx: PageIdx) -> bool {
        let mut pages = self.pages.lock();
        if pages.contains(&idx) {
            return false;
        }
        pages.push(idx);
        self.count.store(pages.len() as u64, Relaxed);
        true
    }

    /// Removes page `idx`; false if it was not pending.
    pub(crate) fn remove(&self, idx: PageIdx) -> bool {
        let mut pages = self.pages.lock();
        let Some(at) = pages.iter().position(|&p| p == idx) else {
            return false;
        };
        pages.swap_remove(at);
        self.count.store(pages.len() as u64, Relaxed);
        true
    }

    /// Pages pending.
    #[cfg(test)]
    pub(crate) fn len(&self) -> u64 {
        self.count.load(Relaxed)
    }
}

impl PageAllocator {
    /// Marks `pfn` as hardware-poisoned (Linux's `memory_failure`, for the
    /// page-allocator side): a free page leaves the free lists at once; an
    /// in-use page (or one a free path is returning, or one cached on a
    /// pinned CPU's list) is dropped when it next reaches a free list or a
    /// per-CPU pop. Either way it is never handed out again.
    ///
    /// # Errors
    /// [`PageError::OutOfRange`] or [`PageError::Hole`].
    pub fn memory_failure(&self, pfn: Pfn) -> Result<MemoryFailure, PageError> {
        let idx = self.pfn_to_idx(pfn).ok_or(PageError::OutOfRange(pfn))?;
        let page = self.desc(idx);
        if page.has(PageFlags::HOLE) {
            return Err(PageError::Hole(pfn));
        }
        if !page.set_flag_once(PageFlags::HWPOISON) {
            return Ok(MemoryFailure::AlreadyPoisoned);
        }
        self.stats.hwpoison_marked.fetch_add(1, Relaxed);
        if page.has(PageFlags::RESERVED) {
            return Ok(MemoryFailure::Reserved);
        }
        // Pending before the drain, so that every path that could put the
        // page on a list from now on sees it (see the module doc).
        self.hwpoison.insert(idx);
        // A page cached on a per-CPU list is free but not on the buddy
        // lists: drain, which drops it (marking it reserved) on the way.
        crate::Cpus::new(self).drain_all_pages();
        if !self.hwpoison.contains(idx) {
            return Ok(MemoryFailure::TakenOffFreeList);
        }
        let Some(zone) = self.zone_of(idx) else {
            return Ok(MemoryFailure::InUse);
        };
        let cx = zone.cx(&self.mem);
        let mut state = zone.state.lock();
        if state.area.take_page(cx, idx) {
            // Offline for good: poisoned and reserved.
            page.set_state(PageFlags::HWPOISON.union(PageFlags::RESERVED), 0, 0);
            self.hwpoison.remove(idx);
            self.stats.hwpoison_offlined.fetch_add(1, Relaxed);
            zone.publish(&state);
            return Ok(MemoryFailure::TakenOffFreeList);
        }
        drop(state);
        if !self.inside_block_with(idx, PageFlags::ALLOCATED.union(PageFlags::PCP)) && self.inside_leaked_block(idx) {
            // Leaked earlier as a bad page: it never comes back, so no free
            // path will look for it.
            self.hwpoison.remove(idx);
            return Ok(MemoryFailure::Leaked);
        }
        // Allocated, cached, or between a free path's preparation and its
        // release: whichever list it reaches drops it.
        Ok(MemoryFailure::InUse)
    }

    /// Whether page `idx` is poisoned: the flag, or (when any page is
    /// pending) the pending set, which a racing plain store cannot undo.
    #[inline(always)]
    pub(crate) fn is_hwpoisoned(&self, idx: PageIdx) -> bool {
        self.hwpoisoned_with_flag(self.desc(idx).has(PageFlags::HWPOISON), idx)
    }

    /// [`is_hwpoisoned`](Self::is_hwpoisoned) for a caller that has already
    /// read the page's `HWPOISON` flag (`flag`) from its own load.
    #[inline(always)]
    pub(crate) fn hwpoisoned_with_flag(&self, flag: bool, idx: PageIdx) -> bool {
        flag || (self.hwpoison.any() && self.hwpoison.contains(idx))
    }

    /// Drops a poisoned page found on a free path for good.
    pub(crate) fn drop_poisoned(&self, idx: PageIdx) {
        self.desc(idx).set_state(PageFlags::HWPOISON.union(PageFlags::RESERVED), 0, 0);
        self.hwpoison.remove(idx);
        self.stats.hwpoison_offlined.fetch_add(1, Relaxed);
    }

    /// Whether page `idx` is a tail or lies in a block whose head carries
    /// one of `heads` (allocated, or cached on a pinned CPU's list).
    pub(crate) fn inside_block_with(&self, idx: PageIdx, heads: PageFlags) -> bool {
        let page = self.desc(idx);
        if page.has(PageFlags::TAIL) {
            return self.desc(page.next()).flags().intersects(heads);
        }
        (0..=self.mem.geometry.merge_order()).any(|order| {
            let head = idx & !((1u32 << order) - 1);
            let page = self.desc(head);
            page.flags().intersects(heads) && page.order() >= order
        })
    }

    /// Whether page `idx` lies in a block that `free_pages_prepare`
    /// refused and leaked: its head kept a reference, a check-at-free flag
    /// or its compound mark, none of which a block being freed normally
    /// still has once it is prepared.
    fn inside_leaked_block(&self, idx: PageIdx) -> bool {
        let leaked_marks = PageFlags::CHECK_AT_FREE.union(PageFlags::HEAD);
        (0..=self.mem.geometry.merge_order()).any(|order| {
            let head = self.desc(idx & !((1u32 << order) - 1));
            let flags = head.flags();
            !flags.intersects(PageFlags::ALLOCATED.union(PageFlags::BUDDY).union(PageFlags::PCP))
                && head.order() >= order
                && (head.refcount() != 0 || flags.intersects(leaked_marks))
        })
    }
}

/// A test-only hook inside `free_pages_prepare` (and the pinned
/// magazine's free), between the load of the state word and the store
/// computed from it: the window in which a concurrent `memory_failure`
/// used to be lost.
#[cfg(all(test, feature = "std"))]
pub(crate) mod race_hook {
    use crate::mem::page::PageIdx;
    use std::boxed::Box;
    use std::cell::RefCell;

    type Hook = Box<dyn FnOnce(PageIdx)>;

    std::thread_local! {
        static HOOK: RefCell<Option<Hook>> = RefCell::new(None);
    }

    /// Runs `f` (once) at the next preparation on this thread.
    pub(crate) fn set(f: impl FnOnce(PageIdx) + 'static) {
        HOOK.with(|h| *h.borrow_mut() = Some(Box::new(f)));
    }

    pub(crate) fn run(idx: PageIdx) {
        if let Some(f) = HOOK.with(|h| h.borrow_mut().take()) {
            f(idx);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Gfp, MemoryMapBuilder, Report};
    use std::sync::Arc;

    /// A map whose shared API uses the per-CPU cache (`cached`, where
    /// restartable sequences work) or only the locked lists.
    fn allocator(cached: bool) -> Arc<PageAllocator> {
        Arc::new(MemoryMapBuilder::with_memory(64 << 20).nr_cpus(2).cpu_caches(cached).build().unwrap())
    }

    /// Every page the allocator can still hand out, taken and kept.
    fn drain_everything(mm: &PageAllocator) -> Vec<Pfn> {
        let mut got = Vec::new();
        while let Ok(pfn) = mm.alloc_pages(Gfp::KERNEL, 0) {
            got.push(pfn);
        }
        got
    }

    /// `memory_failure` lands between `free_pages_prepare`'s load and its
    /// store (the hook puts it exactly there); the page must still never
    /// be handed out again, on the pinned and on the shared path, with and
    /// without the per-CPU cache.
    #[test]
    fn poison_set_inside_the_free_window_is_not_lost() {
        for (pinned, cached) in [(true, false), (false, false), (false, true)] {
            let mm = allocator(cached);
            let pfn = if pinned {
                let mut cpu = crate::Cpus::new(&mm).pin_cpu(1).unwrap();
                let pfn = cpu.alloc_pages(Gfp::KERNEL, 0).unwrap();
                let inner = Arc::clone(&mm);
                race_hook::set(move |_| {
                    assert_eq!(inner.memory_failure(pfn), Ok(MemoryFailure::InUse));
                });
                cpu.free_pages(pfn, 0).unwrap();
                // The owner keeps allocating from its own list first.
                for _ in 0..64 {
                    let again = cpu.alloc_pages(Gfp::KERNEL, 0).unwrap();
                    assert_ne!(again, pfn, "pinned CPU handed out the poisoned page");
                }
                pfn
            } else {
                let pfn = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
                let inner = Arc::clone(&mm);
                race_hook::set(move |_| {
                    assert_eq!(inner.memory_failure(pfn), Ok(MemoryFailure::InUse));
                });
                mm.free_pages(pfn, 0).unwrap();
                // The CPU's cache serves this thread before any drain.
                let again: Vec<Pfn> = (0..64).map(|_| mm.alloc_pages(Gfp::KERNEL, 0).unwrap()).collect();
                assert!(!again.contains(&pfn), "the CPU's cache handed out the poisoned page");
                for p in again {
                    mm.free_pages(p, 0).unwrap();
                }
                pfn
            };
            crate::Cpus::new(&mm).drain_all_pages();
            let all = drain_everything(&mm);
            assert!(!all.contains(&pfn), "poisoned page handed out again (pinned: {pinned}, cached: {cached})");
            assert_eq!(mm.hwpoison.len(), 0, "the page left the pending set when dropped");
            assert_eq!(crate::Report::new(&mm).stats().hwpoison_offlined, 1);
            for p in all {
                mm.free_pages(p, 0).unwrap();
            }
            crate::Cpus::new(&mm).drain_all_pages();
            Report::new(&mm).check_invariants().unwrap();
        }
    }

    #[test]
    fn pending_set_counts_what_it_holds() {
        let set = PendingPoison::default();
        assert!(!set.any());
        assert!(set.insert(7));
        assert!(!set.insert(7), "a page is pending once");
        assert!(set.insert(9));
        assert_eq!(set.len(), 2);
        assert!(set.contains(9));
        assert!(set.remove(7));
        assert!(!set.remove(7));
        assert!(!set.contains(7));
        assert!(set.any());
        assert!(set.remove(9));
        assert!(!set.any());
    }
}
