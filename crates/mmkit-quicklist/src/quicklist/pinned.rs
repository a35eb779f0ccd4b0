//! The pinned handle of the quicklists: one thread's sole use of one CPU's
//! lists, so that its calls take no lock and no atomic read-modify-write.
//! Owns the handle, the CPU's lock for as long as it lives (the CPU's
//! stacks move into the handle meanwhile), and the pages it handed out
//! that are still out; the list operations are the parent module's.
//!
//! # Why pages stay with the handle while they are out
//! The shared API hands a page out with refcount 1 and takes it back with
//! one compare-and-swap of that refcount
//! ([`take_back_block`](mmkit::Blocks::take_back_block)), so that of
//! two racing frees of one page exactly one wins. On the pinned hit pair
//! that compare-and-swap was most of the cost (of a 140-instruction pair;
//! `mmkit bench quicklist`, case `quicklist/hit_alloc_free`).
//! The handle instead keeps the page frozen (refcount 0, owned) and keeps
//! its [`PageBlock`]. The race the compare-and-swap settled cannot happen
//! then: a frozen page of the set's owner tag ([`Quicklists::owner`](super::Quicklists::owner)) is
//! refused by every other free path (the allocator's own frees see an
//! owned page, another CPU's `take_back_block` sees refcount 0), so only
//! this handle can take it back. This is the quicklist's counterpart of the
//! page allocator's `LOCAL` magazine pages (`PinnedCpu`), built on the
//! public block API.
//!
//! Where the handle keeps the block matters too: in a separate set of
//! pages out (a small stack, a map beyond it) the pair still moved the
//! 16-byte handle twice and kept two lengths, 122 instructions a pair. Kept
//! in the list itself, just above the cached pages, a hit only moves the
//! list's top index down and the free of that page moves it back up: 66
//! instructions (see docs/perf-log/2026-11.md, the pinned hit without a
//! compare-and-swap). Pages freed out of order are searched above the top
//! (at most [`RECENT`] per list) and in a map.
//!
//! The price is paid where a page leaves the handle: a free anywhere else
//! gets [`QuicklistError::PinnedCpu`] (nothing changes), and the page's
//! bytes are not reachable through `take_back_block`, until the page is
//! given up with [`QuicklistCpu::hand_over`] or the handle is dropped,
//! which hands over every page still out (refcount 1, as the shared API
//! hands them out). A caller that wants the bytes takes a block
//! ([`QuicklistCpu::alloc_block`]) instead.

use super::{HeldList, ListCounters, PageFn, QuicklistError, QuicklistStats, Quicklists, Stacks, StateCheck};
use mmkit::{BlockStack, FreeError, Gfp, PageBlock, Pfn};
use spin::MutexGuard;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::Ordering::Relaxed;

/// Pages handed out from one list that the list keeps above its cached
/// pages; older ones move to the handle's map. A page table is usually
/// freed soon after it was taken (the hit pair, a short-lived address
/// space), so the free finds its page just above the cached ones.
const RECENT: usize = 16;

/// One list while the handle holds it.
pub(super) struct PinnedList<'q> {
    /// The cached pages (`..top`, the next to hand out at `top - 1`), then
    /// pages handed out from this list that the handle still holds (`top..`,
    /// the newest at `top`). A hit moves `top` down, the free of that page
    /// moves it back up: neither moves a block.
    pub(super) stack: BlockStack,
    pub(super) top: usize,
    pub(super) counters: &'q ListCounters,
}

impl PinnedList<'_> {
    /// Publishes the cached count.
    #[inline(always)]
    pub(super) fn set_top(&mut self, top: usize) {
        self.top = top;
        self.counters.nr_pages.store(top, Relaxed);
    }
}

/// The pages out of a list, split off while the list's cached pages are
/// held (`on_cached`): dropped, also by a panic unwinding through the held
/// list's operation, it puts them back above the cached ones.
struct Rejoin<'l, 'q> {
    list: &'l mut PinnedList<'q>,
    out: BlockStack,
    ql: &'q Quicklists,
}

impl Drop for Rejoin<'_, '_> {
    fn drop(&mut self) {
        self.list.top = self.list.stack.len();
        // Both halves are the same stack's, so they always join; were they
        // not, the pages out would be handed out rather than lost.
        if !self.list.stack.append(&mut self.out) {
            while let Some(block) = self.out.pop() {
                self.ql.hand_out(block);
            }
        }
    }
}

/// Fibonacci hashing of a PFN: one multiply, which spreads consecutive
/// PFNs over the table.
#[derive(Default)]
struct PfnHasher(u64);

impl Hasher for PfnHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u64(&mut self, pfn: u64) {
        self.0 = pfn.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// Sole use of one CPU's quicklists: no lock per operation, and no atomic
/// read-modify-write on a hit (see the module doc). A page [`alloc`]
/// hands out stays with the handle until [`free_page`] takes it back,
/// [`hand_over`] gives it up, or the handle is dropped.
///
/// [`alloc`]: QuicklistCpu::alloc
/// [`free_page`]: QuicklistCpu::free_page
/// [`hand_over`]: QuicklistCpu::hand_over
///
/// ```
/// use mmkit_quicklist::Quicklists;
/// use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder};
/// use std::sync::Arc;
///
/// let mm = MemoryMapBuilder::with_memory(16 << 20).backing(Backing::RealMemory(HugePages::None)).nr_cpus(2).build().unwrap();
/// let ql = Quicklists::new(Arc::new(mm), 2).unwrap();
/// let mut cpu1 = ql.pin_cpu(1).unwrap();
/// let pfn = cpu1.alloc(1, Gfp::KERNEL, None).unwrap();
/// cpu1.free_page(1, None, pfn).unwrap();
/// assert_eq!(ql.quicklist_size(1, 1), Some(1));
/// ```
pub struct QuicklistCpu<'q> {
    pub(super) ql: &'q Quicklists,
    /// The CPU's lock; its stacks are moved into `lists` meanwhile (and
    /// back on drop), one indirection and one bounds check less per call.
    stacks: MutexGuard<'q, Stacks>,
    pub(super) lists: Box<[PinnedList<'q>]>,
    /// Pages out of the handle that left their list's `RECENT` window.
    older: HashMap<u64, PageBlock, BuildHasherDefault<PfnHasher>>,
    pub(super) cpu: usize,
    /// The CPU's node, looked up once.
    pub(super) nid: usize,
}

impl<'q> QuicklistCpu<'q> {
    pub(super) fn new(
        ql: &'q Quicklists,
        counters: &'q [ListCounters],
        mut stacks: MutexGuard<'q, Stacks>,
        cpu: usize,
        nid: usize,
    ) -> Self {
        let lists = stacks
            .iter_mut()
            .zip(counters)
            .map(|(stack, counters)| PinnedList { top: stack.len(), stack: std::mem::take(stack), counters })
            .collect();
        Self { ql, stacks, lists, older: HashMap::default(), cpu, nid }
    }

    /// The CPU this handle owns.
    pub fn cpu_id(&self) -> usize {
        self.cpu
    }

    #[cold]
    fn no_such_list(&self, nr: usize) -> QuicklistError {
        QuicklistError::NoSuchList { nr, nr_quick: self.lists.len() }
    }

    /// [`Quicklists::quicklist_alloc`] on this CPU. The page stays with
    /// this handle: free it with [`free_page`](Self::free_page), or
    /// [`hand_over`](Self::hand_over) it first to free it elsewhere.
    ///
    /// # Errors
    /// As `quicklist_alloc`.
    // Always inlined: as a call from another crate, saving and restoring
    // registers cost a third of the pair's instructions (152 against 102).
    #[inline(always)]
    pub fn alloc(&mut self, nr: usize, gfp: Gfp, ctor: Option<PageFn<'_>>) -> Result<Pfn, QuicklistError> {
        let ql = self.ql;
        let Some(list) = self.lists.get_mut(nr) else {
            return Err(self.no_such_list(nr));
        };
        // The hit: the top cached page, unless hardware poisoned it while
        // it was cached (the slow path frees it then).
        if let Some(top) = list.top.checked_sub(1) {
            if let Some(block) = list.stack.get(top) {
                if ql.caching && !ql.is_poisoned(&block) {
                    let pfn = block.pfn();
                    list.set_top(top);
                    list.counters.hits.add(1);
                    if list.stack.len() - top > RECENT {
                        self.spill(nr);
                    }
                    return Ok(pfn);
                }
            }
        }
        self.alloc_slow(nr, gfp, ctor)
    }

    /// A miss, a poisoned top page, or the uncached mode: the shared list
    /// operation on the cached pages, then the page joins the pages out.
    #[cold]
    fn alloc_slow(&mut self, nr: usize, gfp: Gfp, ctor: Option<PageFn<'_>>) -> Result<Pfn, QuicklistError> {
        let block = self.on_cached(nr, |ql, at| ql.alloc_on(at, gfp, ctor))??;
        let pfn = block.pfn();
        let ql = self.ql;
        let list = &mut self.lists[nr];
        if let Err(block) = list.stack.insert(list.top, block) {
            // Not this set's block (which `alloc_on` never returns): out
            // as the shared API hands pages out.
            return Ok(ql.hand_out(block));
        }
        if list.stack.len() - list.top > RECENT {
            self.spill(nr);
        }
        Ok(pfn)
    }

    /// Moves list `nr`'s oldest page out to the map.
    #[cold]
    fn spill(&mut self, nr: usize) {
        if let Some(oldest) = self.lists[nr].stack.pop() {
            self.older.insert(oldest.pfn().0, oldest);
        }
    }

    /// [`Quicklists::quicklist_alloc_block`] on this CPU.
    ///
    /// # Errors
    /// As `quicklist_alloc`.
    pub fn alloc_block(&mut self, nr: usize, gfp: Gfp, ctor: Option<PageFn<'_>>) -> Result<PageBlock, QuicklistError> {
        self.on_cached(nr, |ql, at| ql.alloc_on(at, gfp, ctor))?
    }

    /// [`Quicklists::quicklist_free_page`] on this CPU. A page this handle
    /// handed out comes back without touching its descriptor; any other
    /// page is taken back as the shared API does. Either way the page is
    /// restored to the list's state, since what the caller wrote through
    /// its address is unknown.
    ///
    /// # Errors
    /// As `quicklist_free_page`, and [`QuicklistError::PinnedCpu`] for a
    /// page another pinned handle holds or caches.
    #[inline(always)]
    pub fn free_page(&mut self, nr: usize, dtor: Option<PageFn<'_>>, pfn: Pfn) -> Result<(), QuicklistError> {
        self.free_page_as(nr, dtor, pfn, StateCheck::Restore)
    }

    /// [`Quicklists::quicklist_free_page_in_state`] on this CPU: the page
    /// is cached as it is, neither copied nor (outside debug builds)
    /// checked.
    ///
    /// # Safety
    /// As [`Quicklists::quicklist_free_page_in_state`]: every byte of the
    /// page is what list `nr` holds (zero, or the constructor's bytes).
    ///
    /// # Errors
    /// As [`free_page`](Self::free_page), and
    /// [`QuicklistError::WrongState`] in debug builds.
    #[inline(always)]
    // An `unsafe` contract, not an unsafe operation: the body is safe code.
    #[allow(unsafe_code)]
    pub unsafe fn free_page_in_state(
        &mut self,
        nr: usize,
        dtor: Option<PageFn<'_>>,
        pfn: Pfn,
    ) -> Result<(), QuicklistError> {
        self.free_page_as(nr, dtor, pfn, StateCheck::KnownByCaller)
    }

    #[inline(always)]
    fn free_page_as(
        &mut self,
        nr: usize,
        dtor: Option<PageFn<'_>>,
        pfn: Pfn,
        check: StateCheck,
    ) -> Result<(), QuicklistError> {
        let (ql, nid, cpu) = (self.ql, self.nid, self.cpu);
        let Some(list) = self.lists.get_mut(nr) else {
            return Err(self.no_such_list(nr));
        };
        // The hit's free: the newest page out of this list, back on top of
        // the cached ones. (A second free of it finds another page, or
        // none, above the top and takes the slow path, which refuses it.)
        if list.stack.pfns().get(list.top) == Some(&pfn) && ql.caching && ql.is_local_node(pfn, nid) {
            let in_state = match check {
                StateCheck::Restore => {
                    // Out and back in at the same place: the top page out
                    // is the last of the stack on a hit pair, so neither
                    // moves another block.
                    if let Some(mut block) = list.stack.remove(list.top) {
                        ql.restore(&mut block, nr);
                        if let Err(block) = list.stack.insert(list.top, block) {
                            // Unreachable (the block came off this stack),
                            // but a block is never dropped on the floor.
                            return ql.release(cpu, block, dtor);
                        }
                    }
                    true
                }
                // A promise is checked in debug builds; a page that breaks
                // it is left to the slow path's report.
                StateCheck::KnownByCaller | StateCheck::Clean => {
                    !cfg!(debug_assertions)
                        || list.stack.get(list.top).is_some_and(|block| ql.first_difference(&block, nr).is_none())
                }
            };
            if in_state {
                list.set_top(list.top + 1);
                list.counters.cached.add(1);
                return Ok(());
            }
        }
        self.free_slow(nr, dtor, pfn, check)
    }

    /// Every other free: a page out of another list or an older one, a
    /// page of the shared API, one that goes back to the allocator, or bad
    /// input.
    #[cold]
    fn free_slow(
        &mut self,
        nr: usize,
        dtor: Option<PageFn<'_>>,
        pfn: Pfn,
        check: StateCheck,
    ) -> Result<(), QuicklistError> {
        let block = match self.take_out(pfn) {
            Some(block) => block,
            None => self.take_back_other(pfn)?,
        };
        self.free_block_to_list(nr, dtor, block, check)
    }

    /// A held block back to list `nr` under `check`, on top of the cached
    /// pages; for a list that does not exist the block goes back to the
    /// page allocator and the error says so.
    pub(super) fn free_block_to_list(
        &mut self,
        nr: usize,
        dtor: Option<PageFn<'_>>,
        block: PageBlock,
        check: StateCheck,
    ) -> Result<(), QuicklistError> {
        let (ql, cpu, nid) = (self.ql, self.cpu, self.nid);
        let Some(list) = self.lists.get_mut(nr) else {
            let nr_quick = self.lists.len();
            ql.release(cpu, block, None)?;
            return Err(QuicklistError::NoSuchList { nr, nr_quick });
        };
        if let Some(block) = ql.admit(list.counters, (cpu, nid), nr, dtor, block, check)? {
            if let Err(block) = list.stack.insert(list.top, block) {
                return ql.release(cpu, block, None);
            }
            list.set_top(list.top + 1);
            list.counters.cached.add(1);
        }
        Ok(())
    }

    /// Removes `pfn` from the pages out of the handle.
    fn take_out(&mut self, pfn: Pfn) -> Option<PageBlock> {
        for list in self.lists.iter_mut() {
            if let Some(i) = list.stack.pfns()[list.top..].iter().position(|&p| p == pfn) {
                return list.stack.remove(list.top + i);
            }
        }
        self.older.remove(&pfn.0)
    }

    /// A free of a page this handle does not hold out.
    fn take_back_other(&mut self, pfn: Pfn) -> Result<PageBlock, QuicklistError> {
        self.ql.take_back(pfn).map_err(|e| match e {
            QuicklistError::Free(FreeError::DoubleFree(_))
                if !self.lists.iter().any(|l| l.stack.pfns()[..l.top].contains(&pfn)) =>
            {
                self.ql.held_elsewhere(pfn, Some(self.cpu))
            }
            other => other,
        })
    }

    /// Gives up a page this handle handed out: afterwards it is a page of
    /// the shared API (refcount 1), which any CPU may free.
    ///
    /// # Errors
    /// [`QuicklistError::NotHeld`] for a page this handle does not hold
    /// out (nothing changes).
    pub fn hand_over(&mut self, pfn: Pfn) -> Result<(), QuicklistError> {
        let block = self.take_out(pfn).ok_or(QuicklistError::NotHeld(pfn))?;
        self.ql.hand_out(block);
        Ok(())
    }

    /// Pages this handle handed out and holds.
    pub fn nr_out(&self) -> usize {
        self.lists.iter().map(|l| l.stack.len() - l.top).sum::<usize>() + self.older.len()
    }

    /// Runs `f` on list `nr`'s cached pages as a held list.
    fn on_cached<R>(&mut self, nr: usize, f: impl FnOnce(&Quicklists, HeldList<'_>) -> R) -> Result<R, QuicklistError> {
        let (ql, cpu) = (self.ql, self.cpu);
        let Some(list) = self.lists.get_mut(nr) else {
            return Err(self.no_such_list(nr));
        };
        let out = list.stack.split_off(list.top);
        // `f` runs the caller's constructor or destructor, which may panic:
        // the pages out join the list again on the way out either way.
        let rejoin = Rejoin { list, out, ql };
        let result = f(ql, HeldList { stack: &mut rejoin.list.stack, counters: rejoin.list.counters, cpu, nr });
        drop(rejoin);
        Ok(result)
    }

    /// [`Quicklists::quicklist_trim`] on this CPU.
    ///
    /// # Errors
    /// As `quicklist_trim`.
    pub fn trim(
        &mut self,
        nr: usize,
        dtor: Option<PageFn<'_>>,
        min_pages: u64,
        max_free: u64,
    ) -> Result<u64, QuicklistError> {
        self.on_cached(nr, |ql, at| ql.trim_on(at, dtor, min_pages, max_free))
    }

    /// Empties this CPU's list `nr`; returns the pages freed.
    ///
    /// # Errors
    /// [`QuicklistError::NoSuchList`].
    pub fn drain(&mut self, nr: usize, dtor: Option<PageFn<'_>>) -> Result<u64, QuicklistError> {
        self.on_cached(nr, |ql, at| ql.trim_to(at, dtor, 0, u64::MAX))
    }

    /// Counters of this CPU's list `nr`.
    pub fn stats(&self, nr: usize) -> Option<QuicklistStats> {
        self.lists.get(nr).map(|l| l.counters.stats())
    }
}

impl Drop for QuicklistCpu<'_> {
    /// Hands over every page still out, so that any CPU can free them, and
    /// gives the cached pages back to the CPU's lists.
    fn drop(&mut self) {
        let ql = self.ql;
        for (slot, list) in self.stacks.iter_mut().zip(self.lists.iter_mut()) {
            let mut out = list.stack.split_off(list.top);
            while let Some(block) = out.pop() {
                ql.hand_out(block);
            }
            *slot = std::mem::take(&mut list.stack);
        }
        for (_, block) in self.older.drain() {
            ql.hand_out(block);
        }
        ql.unpin(self.cpu);
    }
}
