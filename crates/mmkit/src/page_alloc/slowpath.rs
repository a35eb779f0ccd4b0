//! The allocation slow path: what happens when no zone passed its LOW
//! watermark on the fast path (Linux's `__alloc_pages_slowpath`).
//!
//! Owns the retry policy: wake background reclaim, retry at MIN with the
//! slow-path ALLOC flags (reserves for atomic requests), then — only with
//! `__GFP_DIRECT_RECLAIM` — call the embedder's reclaim and compaction hooks,
//! give back the highatomic reserve and drain per-CPU lists before failing,
//! and honour `__GFP_NORETRY`, `__GFP_RETRY_MAYFAIL` and `__GFP_NOFAIL`.
//! Takes blocks only through the zonelist walk in `alloc_path`.
#![deny(unsafe_code)]

use crate::mem::page::PageIdx;
use crate::page_alloc::cpu::Lists;
use crate::page_alloc::hooks::ReclaimRequest;
use crate::page_alloc::{AllocContext, MAX_COMPACT_RETRIES, MAX_RECLAIM_RETRIES};
use crate::types::gfp::{gfp_to_alloc_flags, AllocFlags, Gfp};
use crate::zone::fallback;
use crate::{PageAllocator, PAGE_ALLOC_COSTLY_ORDER};
use core::sync::atomic::Ordering::Relaxed;

impl PageAllocator {
    /// Linux's `__alloc_pages_slowpath`, with reclaim as hooks.
    pub(crate) fn alloc_slowpath(
        &self,
        lists: &mut impl Lists,
        gfp: Gfp,
        order: u32,
        ac: &AllocContext,
    ) -> Option<(usize, PageIdx)> {
        self.stats.slowpath_entries.fetch_add(1, Relaxed);
        let mut alloc_flags = gfp_to_alloc_flags(gfp, order);
        let can_direct_reclaim = gfp.contains(Gfp::DIRECT_RECLAIM);
        let costly = order > PAGE_ALLOC_COSTLY_ORDER;
        let mut request = ReclaimRequest { gfp, order, nid: ac.nid, attempt: 0 };
        let mut no_progress_loops = 0;
        let mut compact_retries = 0;
        let mut drained = false;
        loop {
            if alloc_flags.contains(AllocFlags::KSWAPD) {
                self.stats.kswapd_wakeups.fetch_add(1, Relaxed);
                self.hooks.wake_kswapd(&request);
            }
            if let Some(got) = self.get_page_from_freelist(lists, order, alloc_flags, ac) {
                return Some(got);
            }
            if gfp.contains(Gfp::MEMALLOC) && !gfp.contains(Gfp::NOMEMALLOC) {
                alloc_flags = alloc_flags.union(AllocFlags::NO_WATERMARKS);
                if let Some(got) = self.get_page_from_freelist(lists, order, alloc_flags, ac) {
                    return Some(got);
                }
            }
            if !can_direct_reclaim {
                break;
            }
            self.stats.allocstall.fetch_add(1, Relaxed);
            let reclaimed = self.hooks.direct_reclaim(&request);
            if let Some(got) = self.get_page_from_freelist(lists, order, alloc_flags, ac) {
                return Some(got);
            }
            if !drained {
                // Reclaim did not help: the pages may sit on per-CPU lists or
                // in the highatomic reserve. Shrink both and retry once.
                drained = true;
                self.unreserve_highatomic(ac, false);
                crate::Cpus::new(self).drain_all_pages();
                if let Some(got) = self.get_page_from_freelist(lists, order, alloc_flags, ac) {
                    return Some(got);
                }
            }
            let mut compacted = false;
            if order > 0 && compact_retries <= MAX_COMPACT_RETRIES {
                self.stats.compact_stall.fetch_add(1, Relaxed);
                compacted = self.direct_compact_zones(order, ac.nid) || self.hooks.direct_compact(&request);
                if compacted {
                    compact_retries += 1;
                    if let Some(got) = self.get_page_from_freelist(lists, order, alloc_flags, ac) {
                        self.stats.compact_success.fetch_add(1, Relaxed);
                        return Some(got);
                    }
                    self.stats.compact_fail.fetch_add(1, Relaxed);
                }
            }
            if gfp.contains(Gfp::NORETRY) || (costly && !gfp.contains(Gfp::RETRY_MAYFAIL)) {
                break;
            }
            // Linux's should_reclaim_retry: progress on a costly order says
            // nothing about whether such a block will form, so it never
            // resets the count; compaction has its own bounded count.
            if reclaimed > 0 && !costly {
                no_progress_loops = 0;
            } else {
                no_progress_loops += 1;
            }
            if no_progress_loops > MAX_RECLAIM_RETRIES {
                // Before failing, give the highatomic reserve back, a
                // pageblock per round, until nothing is left to release.
                if self.unreserve_highatomic(ac, true) {
                    request.attempt += 1;
                    continue;
                }
                if !(compacted && compact_retries <= MAX_COMPACT_RETRIES) {
                    break;
                }
            }
            request.attempt += 1;
        }
        // Pages cached on other CPUs' lists are free too: drain and retry
        // once before giving up.
        crate::Cpus::new(self).drain_all_pages();
        if let Some(got) = self.get_page_from_freelist(lists, order, alloc_flags, ac) {
            return Some(got);
        }
        if gfp.contains(Gfp::NOFAIL) {
            // Some access to reserves, never all of them (Linux avoids
            // NO_WATERMARKS here so the reserves survive for others).
            let flags = alloc_flags.union(AllocFlags::MIN_RESERVE);
            loop {
                if let Some(got) = self.get_page_from_freelist(lists, order, flags, ac) {
                    return Some(got);
                }
                request.attempt += 1;
                if !self.hooks.retry_nofail(&request) {
                    return None;
                }
                self.stats.nofail_retries.fetch_add(1, Relaxed);
                self.hooks.direct_reclaim(&request);
            }
        }
        None
    }

    /// Releases one highatomic pageblock in the first zone that has one.
    fn unreserve_highatomic(&self, ac: &AllocContext, force: bool) -> bool {
        for (_, zone) in self.candidate_zones(ac) {
            let cx = zone.cx(&self.mem);
            let mut state = zone.state.lock();
            if fallback::unreserve_highatomic_pageblock(&mut state, cx, ac.migratetype, force) {
                return true;
            }
        }
        false
    }
}
