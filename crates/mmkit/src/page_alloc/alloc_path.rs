//! The allocation path: the front doors of `alloc_pages` and friends (the
//! per-CPU cache first, `page_alloc::cache`), the one slow path behind it
//! (`alloc_slow`: the per-CPU lists, the preferred zone's buddy lists,
//! then the zonelist walk of `get_page_from_freelist`), `rmqueue` and
//! `prep_new_page`.
//!
//! Allocation in one paragraph: walk the zonelist (this node's zones from the
//! highest the GFP allows down, then other nodes by distance) and take a block
//! from the first zone above its LOW watermark. If none is, wake background
//! reclaim, recompute flags for the slow path (MIN watermark, reserves for
//! atomic requests), try again, and only with `__GFP_DIRECT_RECLAIM` call the
//! embedder's reclaim and compaction hooks and retry (`slowpath`).
//!
//! Nothing here edits a free list directly: blocks come off per-CPU lists
//! (`pcp`) or, under the zone lock, off the buddy lists (`zone`).
#![deny(unsafe_code)]

use crate::mem::page::{DescWord, PageDesc, PageFlags, PageIdx};
use crate::page_alloc::cache::Target;
use crate::page_alloc::cpu::{Lists, Locked};
use crate::page_alloc::hooks::AllocFailure;
use crate::page_alloc::{AllocContext, Cpus, PageAllocator, Tuning};
use crate::pcp::pcp_allowed_order;
use crate::types::gfp::Watermark;
use crate::types::gfp::{fast_path_alloc_flags, gfp_zone, AllocFlags, Gfp, MigrateType, ZoneType};
use crate::zone::fallback::{self, RmqueueMode, RmqueueRequest};
use crate::zone::Zone;
use crate::{AllocError, Pfn};
use core::sync::atomic::Ordering::Relaxed;

impl PageAllocator {
    /// Allocates 2^`order` contiguous pages on the local node: the node of
    /// the CPU the call runs on (its `cpu_node`; node 0 for a CPU placed on
    /// none), as Linux's `numa_node_id()`. See
    /// [`alloc_pages_node`](Self::alloc_pages_node).
    ///
    /// # Errors
    /// As [`alloc_pages_node`](Self::alloc_pages_node).
    #[inline(always)]
    pub fn alloc_pages(&self, gfp: Gfp, order: u32) -> Result<Pfn, AllocError> {
        if order == 0 {
            if let Some(pfn) = self.cpu_cache().and_then(|mut cache| cache.take::<false>(self, None, gfp, false)) {
                return Ok(pfn);
            }
        }
        self.alloc_pages_uncached(gfp, order)
    }

    /// [`alloc_pages`](Self::alloc_pages) past the per-CPU cache's order-0
    /// stacks: its pageblock-order stacks, then the slow path. Out of
    /// line: inlined, the slow path's callee-saved registers and stack
    /// frame were set up on every cached allocation too
    /// (docs/perf-log/2026-11.md). A compare and a jump to one of two
    /// functions, so that neither the block path nor the slow path pays
    /// the other's saved registers (nor does `alloc_pages` grow where it
    /// is inlined).
    #[inline(never)]
    fn alloc_pages_uncached(&self, gfp: Gfp, order: u32) -> Result<Pfn, AllocError> {
        if order == self.mem.geometry.pageblock_order && self.pcp.enabled {
            return self.alloc_pages_block(gfp, order);
        }
        self.alloc_pages_general(gfp, order)
    }

    /// A pageblock-order allocation: the per-CPU cache's block stacks,
    /// else the slow path.
    #[inline(never)]
    fn alloc_pages_block(&self, gfp: Gfp, order: u32) -> Result<Pfn, AllocError> {
        if let Some(pfn) = self.cpu_cache().and_then(|mut cache| cache.take::<true>(self, None, gfp, false)) {
            return Ok(pfn);
        }
        self.alloc_pages_general(gfp, order)
    }

    /// [`alloc_pages`](Self::alloc_pages) into the slow path, with the
    /// calling CPU's lists.
    #[inline(never)]
    fn alloc_pages_general(&self, gfp: Gfp, order: u32) -> Result<Pfn, AllocError> {
        let cpu = self.cpu_if_it_matters();
        self.alloc_slow(&mut Locked(cpu), self.node_of_cpu(cpu), gfp, order, false)
    }

    /// Allocates 2^`order` contiguous pages, preferring node `nid`. An
    /// order-0 page for the local node comes from the per-CPU cache, as
    /// [`alloc_pages`](Self::alloc_pages)'s does.
    ///
    /// The block's first page has refcount 1; free it with
    /// [`free_pages`](Self::free_pages) (same order) or drop the reference
    /// with [`put_page`](Self::put_page). With `Gfp::COMP` it is a compound
    /// page whose tails point at the head; with `Gfp::ZERO` and real memory
    /// its contents are zeroed.
    ///
    /// # Errors
    /// [`AllocError::NoMemory`] when no allowed zone can serve the request
    /// even after the slow path, [`AllocError::OrderTooLarge`],
    /// [`AllocError::InvalidGfp`] for contradictory zone bits,
    /// [`AllocError::NoSuchNode`].
    #[inline]
    pub fn alloc_pages_node(&self, nid: usize, gfp: Gfp, order: u32) -> Result<Pfn, AllocError> {
        if order == 0 {
            if let Some(pfn) = self.cpu_cache().and_then(|mut cache| cache.take::<false>(self, Some(nid), gfp, false)) {
                return Ok(pfn);
            }
        }
        self.alloc_pages_slow(Some(nid), gfp, order, false)
    }

    /// Like [`alloc_pages`](Self::alloc_pages) but the page comes back with
    /// refcount 0 ("frozen"); free it with
    /// [`free_frozen_pages`](Self::free_frozen_pages).
    ///
    /// # Errors
    /// As [`alloc_pages_node`](Self::alloc_pages_node).
    #[inline]
    pub fn alloc_frozen_pages(&self, gfp: Gfp, order: u32) -> Result<Pfn, AllocError> {
        if order == 0 {
            if let Some(pfn) = self.cpu_cache().and_then(|mut cache| cache.take::<false>(self, None, gfp, true)) {
                return Ok(pfn);
            }
        }
        self.alloc_pages_slow(None, gfp, order, true)
    }

    /// Frozen allocation preferring node `nid`.
    ///
    /// # Errors
    /// As [`alloc_pages_node`](Self::alloc_pages_node).
    #[inline]
    pub fn alloc_frozen_pages_node(&self, nid: usize, gfp: Gfp, order: u32) -> Result<Pfn, AllocError> {
        if order == 0 {
            if let Some(pfn) = self.cpu_cache().and_then(|mut cache| cache.take::<false>(self, Some(nid), gfp, true)) {
                return Ok(pfn);
            }
        }
        self.alloc_pages_slow(Some(nid), gfp, order, true)
    }

    /// The `_node` and frozen forms past the per-CPU cache: the slow path
    /// with the calling CPU's lists (`nid`: `None` for the local node).
    #[inline(never)]
    fn alloc_pages_slow(&self, nid: Option<usize>, gfp: Gfp, order: u32, frozen: bool) -> Result<Pfn, AllocError> {
        let cpu = self.current_cpu();
        self.alloc_slow(&mut Locked(cpu), nid.unwrap_or_else(|| self.node_of_cpu(cpu)), gfp, order, frozen)
    }

    /// [`cpu_to_node`](Self::cpu_to_node) for a CPU the caller already
    /// checked (or folded): node 0 past the table.
    #[inline]
    pub(crate) fn node_of_cpu(&self, cpu: usize) -> usize {
        self.pcp.cpu_nodes.get(cpu).copied().unwrap_or(0)
    }

    /// The one slow path, where every allocation the per-CPU cache did not
    /// serve goes (and every order it does not cache): the per-CPU
    /// `lists` (locked or held, `cpu.rs`) for the orders they cache, the
    /// preferred zone's buddy lists for the others, then, `#[cold]`, the
    /// zonelist walk and `slowpath` (`alloc_general`).
    ///
    /// Always inlined, with the cold part out of line: for a map without
    /// a per-CPU cache (no restartable sequences, `cpu_caches(false)`) and
    /// for a [`CpuHandle`](crate::CpuHandle) the lists step is the main
    /// path. Out of line (or cold) it took the mask's constant folding and
    /// the list code's inlining with it (`examples/pcp_probe.rs lists` and
    /// `handle` under callgrind); the shared API reaches it out of line
    /// anyway, from `alloc_pages_uncached`.
    #[inline(always)]
    pub(crate) fn alloc_slow(
        &self,
        lists: &mut impl Lists,
        nid: usize,
        gfp: Gfp,
        order: u32,
        frozen: bool,
    ) -> Result<Pfn, AllocError> {
        if self.pcp_serves(gfp) && pcp_allowed_order(order, self.mem.geometry.pageblock_order) {
            // Every cached order, the pageblock (THP) order included, as
            // Linux's `rmqueue` sends each to `rmqueue_pcplist`.
            if let Some(pfn) = self.alloc_from_lists(lists, nid, gfp, order, frozen) {
                return Ok(pfn);
            }
        } else if let Some(pfn) = self.alloc_buddy_fast(nid, gfp, order, frozen) {
            return Ok(pfn);
        }
        self.alloc_general(lists, nid, gfp, order, frozen)
    }

    /// The first pass of `get_page_from_freelist` for a block no per-CPU
    /// list serves, on the preferred zone alone: the lockless watermark
    /// check, then under the zone lock the request's own lists (Linux's
    /// `rmqueue_buddy` reaching `__rmqueue_smallest`). `None` changes
    /// nothing and sends the request down the general path, which walks the
    /// zonelist, the fallback chain, CMA balancing and highatomic reserves.
    ///
    /// The general path spends most of its instructions before and around
    /// the list edit on the zonelist iterator, the allocation context and
    /// the fallback chain's checks (`buddy_probe frag0` under callgrind);
    /// this path is the list edit plus one lock and a few loads.
    #[inline(always)]
    fn alloc_buddy_fast(&self, nid: usize, gfp: Gfp, order: u32, frozen: bool) -> Option<Pfn> {
        if order > self.mem.geometry.merge_order() {
            return None;
        }
        let target = self.preferred_target(nid, gfp)?;
        if !self.fast_watermark_ok(&target, order, gfp) {
            return None;
        }
        let Target { zone, flags, highest, mt, .. } = target;
        // Highatomic requests reserve pageblocks, which the general path's
        // `rmqueue` does.
        if flags.contains(AllocFlags::HIGHATOMIC) {
            return None;
        }
        let cx = zone.cx(&self.mem);
        let idx = {
            let mut state = zone.state.lock();
            // With free CMA pages `rmqueue` may prefer them (its balancing
            // step): the general path decides.
            if flags.contains(AllocFlags::CMA) && state.area.free_pages_of(MigrateType::Cma) != 0 {
                return None;
            }
            // Under the lock the published counts are exact, and a zone
            // comfortably free is above every mark for any order up to a
            // pageblock (`comfortably_above` counts a pageblock's pages);
            // the exact check covers the rest, as `rmqueue_buddy`'s does.
            let comfortable = order <= cx.pageblock_order && zone.comfortably_free();
            if !comfortable && !flags.contains(AllocFlags::NO_WATERMARKS) {
                let mark = zone.watermark(flags.watermark());
                if !zone.watermark_ok(&state, order, mark, highest, flags) {
                    return None;
                }
            }
            let idx = state.area.rmqueue_smallest(cx, order, mt)?;
            state.counters.pgalloc_blocks += 1;
            state.counters.pgalloc_pages += 1 << order;
            zone.publish(&state);
            idx
        };
        self.prep_new_page(idx, order, gfp, mt, frozen);
        Some(self.idx_to_pfn(idx))
    }

    /// The first step of the slow path for cached orders: the preferred
    /// zone only, the fast path's watermark check, the pageset of `lists`.
    /// `None` sends the request down the general path, which repeats these
    /// steps zone by zone and then enters `slowpath`.
    #[inline(always)]
    fn alloc_from_lists(&self, lists: &mut impl Lists, nid: usize, gfp: Gfp, order: u32, frozen: bool) -> Option<Pfn> {
        let target = self.preferred_target(nid, gfp)?;
        if !self.fast_watermark_ok(&target, order, gfp) {
            return None;
        }
        let Target { zi, flags, mt, .. } = target;
        // A boost this take causes wakes kswapd at the next allocation's
        // check, before it takes a page (`wake_kswapd_if_boosted`).
        let idx = self.rmqueue_pcplist(lists, zi, order, mt, flags)?;
        self.prep_new_page(idx, order, gfp, mt, frozen);
        Some(self.idx_to_pfn(idx))
    }

    /// Where a request for `gfp` on node `nid` goes on the fast paths: the
    /// preferred zone of that node (on that node), the fast path's ALLOC
    /// flags, the request's migratetype (the target's stack is the
    /// per-CPU cache's business, 0 here). No watermark is checked.
    #[inline(always)]
    pub(crate) fn preferred_target(&self, nid: usize, gfp: Gfp) -> Option<Target<'_>> {
        let highest = gfp_zone(gfp).ok()?;
        let (zi, nofragment) = self.preferred_zone(nid, highest)?;
        let zone = &self.zones[zi];
        if zone.nid != nid {
            return None;
        }
        let flags = fast_path_alloc_flags(gfp, nofragment);
        Some(Target { slot: 0, zi, zone, mt: self.request_migratetype(gfp), flags, highest })
    }

    /// The fast paths' one watermark check (the per-CPU cache's, the
    /// lists' and the buddy's first step): a zone comfortably free is
    /// above every mark and has no boost waiting for kswapd (one load, one
    /// compare); otherwise the lockless check, which also wakes kswapd for
    /// a waiting boost. The target is read field by field, so a hit loads
    /// only the zone.
    #[inline(always)]
    pub(crate) fn fast_watermark_ok(&self, target: &Target<'_>, order: u32, gfp: Gfp) -> bool {
        target.zone.comfortably_free() || self.zone_allows_waking(target.zone, order, target.flags, target.highest, gfp)
    }

    /// The fast paths' check when the zone is not comfortably free
    /// ([`zone_allows`](Self::zone_allows)), which is also when a boost may
    /// be waiting for kswapd: wakes it if so (the allocation that comes
    /// first after a boost wakes it, as `rmqueue`'s check does).
    #[inline(never)]
    pub(crate) fn zone_allows_waking(
        &self,
        zone: &Zone,
        order: u32,
        flags: AllocFlags,
        highest: ZoneType,
        gfp: Gfp,
    ) -> bool {
        if !self.zone_allows(zone, order, flags, highest) {
            return false;
        }
        self.wake_kswapd_if_boosted(zone, gfp, flags);
        true
    }

    /// Lockless watermark check of `get_page_from_freelist`, noting when the
    /// zone has fallen below its high mark (pcp `high` then shrinks). A zone
    /// above its high mark is above every lower mark too, so one check
    /// usually suffices.
    #[inline(always)]
    pub(crate) fn zone_allows(&self, zone: &Zone, order: u32, flags: AllocFlags, highest: ZoneType) -> bool {
        if flags.contains(AllocFlags::NO_WATERMARKS) || zone.comfortably_free() {
            return true;
        }
        if !zone.below_high.load(Relaxed) {
            if zone.watermark_fast(order, zone.watermark(Watermark::High), highest, flags) {
                return true;
            }
            zone.below_high.store(true, Relaxed);
        }
        zone.watermark_fast(order, zone.watermark(flags.watermark()), highest, flags)
    }

    #[cold]
    fn alloc_general(
        &self,
        lists: &mut impl Lists,
        nid: usize,
        gfp: Gfp,
        order: u32,
        frozen: bool,
    ) -> Result<Pfn, AllocError> {
        let max = self.mem.geometry.merge_order();
        if order > max {
            return Err(AllocError::OrderTooLarge { order, max });
        }
        let highest = gfp_zone(gfp).map_err(|_| AllocError::InvalidGfp(gfp))?;
        if nid >= self.zones.nr_nodes() {
            return Err(AllocError::NoSuchNode(nid));
        }
        let ac = AllocContext {
            gfp,
            nid,
            highest,
            migratetype: self.request_migratetype(gfp),
            this_node_only: gfp.contains(Gfp::THISNODE),
        };
        let nofragment = self.zones.preferred_zone(nid, highest).is_some_and(|(_, nofrag)| nofrag);
        let flags = fast_path_alloc_flags(gfp, nofragment);
        let got = match self.get_page_from_freelist(lists, order, flags, &ac) {
            Some(got) => Some(got),
            None => self.alloc_slowpath(lists, gfp, order, &ac),
        };
        match got {
            Some((_zone, idx)) => {
                self.prep_new_page(idx, order, gfp, ac.migratetype, frozen);
                Ok(self.idx_to_pfn(idx))
            }
            None => {
                self.stats.alloc_failures.fetch_add(1, Relaxed);
                if !gfp.contains(Gfp::NOWARN) {
                    self.hooks.alloc_failed(&AllocFailure { gfp, order, nid });
                }
                Err(AllocError::NoMemory { order, gfp })
            }
        }
    }

    /// Zones a request may use, in the order to try them.
    pub(crate) fn candidate_zones<'a>(&'a self, ac: &'a AllocContext) -> impl Iterator<Item = (usize, &'a Zone)> + 'a {
        self.zones
            .zonelist(ac.nid)
            .iter()
            .map(|&i| (i, &self.zones[i]))
            .filter(move |(_, z)| z.zone_type <= ac.highest && (!ac.this_node_only || z.nid == ac.nid))
    }

    /// Tries each candidate zone once (Linux's `get_page_from_freelist`).
    pub(crate) fn get_page_from_freelist(
        &self,
        lists: &mut impl Lists,
        order: u32,
        alloc_flags: AllocFlags,
        ac: &AllocContext,
    ) -> Option<(usize, PageIdx)> {
        let mut alloc_flags = alloc_flags;
        loop {
            let no_fallback = alloc_flags.contains(AllocFlags::NOFRAGMENT);
            let mut retry_without_nofragment = false;
            for (zi, zone) in self.candidate_zones(ac) {
                if no_fallback && zone.nid != ac.nid {
                    // Fragmenting the local node beats going remote.
                    retry_without_nofragment = true;
                    break;
                }
                if let Some(idx) = self.rmqueue_zone(lists, zi, zone, order, alloc_flags, ac) {
                    return Some((zi, idx));
                }
            }
            if no_fallback || retry_without_nofragment {
                alloc_flags = alloc_flags.difference(AllocFlags::NOFRAGMENT);
                continue;
            }
            return None;
        }
    }

    /// Checks the zone's watermark and takes a block: from the per-CPU list
    /// for cached orders, else from the buddy under the zone lock (Linux's
    /// watermark part of `get_page_from_freelist` plus `rmqueue`).
    #[inline]
    fn rmqueue_zone(
        &self,
        lists: &mut impl Lists,
        zi: usize,
        zone: &Zone,
        order: u32,
        alloc_flags: AllocFlags,
        ac: &AllocContext,
    ) -> Option<PageIdx> {
        let check = !alloc_flags.contains(AllocFlags::NO_WATERMARKS);
        if !self.zone_allows(zone, order, alloc_flags, ac.highest) {
            return None;
        }
        // Before a page is taken: the hook is the embedder's code, and a
        // panic in it must not strand a page in hand.
        self.wake_kswapd_if_boosted(zone, ac.gfp, alloc_flags);
        if self.pcp_serves(ac.gfp) && pcp_allowed_order(order, self.mem.geometry.pageblock_order) {
            if let Some(idx) = self.rmqueue_pcplist(lists, zi, order, ac.migratetype, alloc_flags) {
                if alloc_flags.contains(AllocFlags::HIGHATOMIC) {
                    self.reserve_highatomic_after_pcp(zi, idx, order);
                }
                return Some(idx);
            }
        }
        self.rmqueue_buddy(zone, order, alloc_flags, ac, check)
    }

    /// Before an allocation from `zone` takes a page: if a fallback boosted
    /// its watermarks for a request that may wake kswapd, wake it once
    /// (Linux's `ZONE_BOOSTED_WATERMARK` check, which Linux makes at the
    /// end of `rmqueue`; here the allocation after the boosting one makes
    /// it, so that the hook, the embedder's code, never runs with a page
    /// in hand that a panic would strand, nor under a lock).
    #[inline(always)]
    pub(crate) fn wake_kswapd_if_boosted(&self, zone: &Zone, gfp: Gfp, alloc_flags: AllocFlags) {
        if alloc_flags.contains(AllocFlags::KSWAPD) && zone.boost_pending.load(Relaxed) {
            self.wake_kswapd_for_boost(zone, gfp);
        }
    }

    #[cold]
    fn wake_kswapd_for_boost(&self, zone: &Zone, gfp: Gfp) {
        if zone.boost_pending.swap(false, Relaxed) {
            // The fast paths' hint comes back with the next publish; make
            // it now unless the lock is busy (or held by this caller, a
            // locked zone: its own operations publish).
            if let Some(state) = zone.state.try_lock() {
                zone.publish(&state);
            }
            self.stats.kswapd_wakeups.fetch_add(1, Relaxed);
            self.hooks.wake_kswapd(&crate::page_alloc::hooks::ReclaimRequest {
                gfp,
                order: 0,
                nid: zone.nid,
                attempt: 0,
            });
        }
    }

    /// Takes a block straight from the buddy lists, re-checking the
    /// watermark exactly under the lock.
    fn rmqueue_buddy(
        &self,
        zone: &Zone,
        order: u32,
        alloc_flags: AllocFlags,
        ac: &AllocContext,
        check: bool,
    ) -> Option<PageIdx> {
        let cx = zone.cx(&self.mem);
        let mut state = zone.state.lock();
        if check {
            let mark = zone.watermark(alloc_flags.watermark());
            if !zone.watermark_ok(&state, order, mark, ac.highest, alloc_flags) {
                return None;
            }
        }
        let mut mode = RmqueueMode::Normal;
        let idx = fallback::rmqueue(
            zone,
            &mut state,
            cx,
            RmqueueRequest { order, mt: ac.migratetype, alloc_flags },
            &mut mode,
        )?;
        if alloc_flags.contains(AllocFlags::HIGHATOMIC) {
            fallback::reserve_highatomic_pageblock(zone, &mut state, cx, idx, order);
        }
        state.counters.pgalloc_blocks += 1;
        state.counters.pgalloc_pages += 1 << order;
        zone.publish(&state);
        Some(idx)
    }

    /// `prep_new_page` for an order-0 page a cache or a list walk has in
    /// hand: without `__GFP_ZERO` the page is free and on no list, so nobody
    /// else can touch its word, and its private word and `word` (state and
    /// refcount, which the caller computed once) are two stores. Returns
    /// whether `word` was stored; with `__GFP_ZERO` the general preparation
    /// runs instead (one reference, or none when `frozen`; never `LOCAL`).
    #[inline(always)]
    pub(crate) fn prep_order0(
        &self,
        page: &PageDesc,
        idx: PageIdx,
        gfp: Gfp,
        mt: MigrateType,
        word: DescWord,
        frozen: bool,
    ) -> bool {
        if gfp.contains(Gfp::ZERO) {
            self.prep_new_page(idx, 0, gfp, mt, frozen);
            return false;
        }
        page.set_private(0);
        page.hand_out(word);
        true
    }

    /// Turns a block just taken off the free lists into an allocated block.
    #[inline(always)]
    pub(crate) fn prep_new_page(&self, idx: PageIdx, order: u32, gfp: Gfp, mt: MigrateType, frozen: bool) {
        self.prep_new_page_for(idx, order, gfp, mt, HandedTo::References(u32::from(!frozen)));
    }

    /// [`prep_new_page`](Self::prep_new_page) for the holder `to`, written
    /// in the head's one store with the state: a mark stored later could
    /// overwrite a reference taken in between.
    #[inline(always)]
    pub(crate) fn prep_new_page_for(&self, idx: PageIdx, order: u32, gfp: Gfp, mt: MigrateType, to: HandedTo) {
        let head = self.desc(idx);
        let compound = gfp.contains(Gfp::COMP) && order > 0;
        let mut flags = PageFlags::ALLOCATED;
        if compound {
            flags = flags | PageFlags::HEAD;
            for tail in idx + 1..idx + (1 << order) {
                let t = self.desc(tail);
                t.set_state(PageFlags::TAIL, 0, 0);
                t.set_next(idx);
            }
        }
        head.set_private(0);
        // State and refcount in one store, after the tails: a concurrent
        // reader that sees ALLOCATED sees a finished page.
        head.hand_out(match to {
            HandedTo::Cpu(cpu) => DescWord::local(flags, order, mt as u8, cpu),
            HandedTo::References(refcount) => DescWord::allocated(flags, order, mt as u8, refcount),
        });
        if gfp.contains(Gfp::ZERO) {
            if let Some(mem) = &self.mem.memory {
                mem.zero_pages(idx as usize, 1 << order);
            }
        }
    }
}

/// Who a block that `prep_new_page_for` hands out belongs to.
#[derive(Clone, Copy)]
pub(crate) enum HandedTo {
    /// Any thread, with this many references (0: frozen).
    References(u32),
    /// The pinned handle of this CPU, with its one reference: `LOCAL`.
    Cpu(usize),
}

impl Cpus<'_> {
    /// The node CPU `cpu` belongs to (Linux's `cpu_to_node`): the node
    /// `alloc_pages` prefers when called on that CPU.
    ///
    /// # Errors
    /// [`IndexError::NoSuchCpu`](crate::IndexError::NoSuchCpu) for a CPU at
    /// or above [`nr_cpus`](Self::nr_cpus).
    pub fn cpu_to_node(&self, cpu: usize) -> Result<usize, crate::IndexError> {
        self.mm.check_cpu(cpu)?;
        Ok(self.mm.node_of_cpu(cpu))
    }
}

impl Tuning<'_> {
    /// Drops every zone's watermark boost. Boosts are raised when a fallback
    /// claims another type's pageblock; Linux's kswapd clears them once it
    /// has reclaimed, so call this from the work your
    /// [`Hooks::wake_kswapd`](crate::Hooks::wake_kswapd) starts.
    pub fn reset_watermark_boost(&self) {
        for zone in self.mm.zones.iter() {
            let _state = zone.state.lock();
            zone.reset_watermark_boost();
        }
    }
}
