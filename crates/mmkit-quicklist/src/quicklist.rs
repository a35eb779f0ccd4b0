//! Quicklists (Linux's `include/linux/quicklist.h`, from the 2007 series
//! "Quicklists for page table pages"): per-CPU stacks of free pages kept in
//! a known state, so that a page-table page can be had without zeroing it.
//!
//! Owns [`Quicklists`] and its pinned handle [`QuicklistCpu`]. Each CPU has
//! `nr_quick` lists; every page on list `nr` is in that list's state: zero,
//! or what the list's constructor wrote. A cached allocation touches the
//! CPU's stack and the page's descriptor, never the page allocator's lists.
//!
//! Talks to the page allocator only through its public owned-block API:
//! the quicklists hold their pages as [`PageBlock`]s tagged with the
//! [`OwnerKey`] each `Quicklists` takes from its map
//! ([`Quicklists::owner`]; the allocator's ordinary free paths refuse
//! them, and only this key takes a handed-out page back),
//! hand a page to their caller as a bare PFN with
//! [`hand_out_block`](Blocks::hand_out_block) and take it back with
//! [`take_back_block`](Blocks::take_back_block), one compare-and-swap
//! that makes a second free of the same page an error, even from another
//! CPU. Linux threads the list through the pages' first word; a stack of
//! handles instead leaves a cached page's bytes untouched, so the
//! constructor's state needs no repair on the way out. Must not reach the
//! allocator's internals (there is no way to) or hold a page's bytes past
//! the call that borrowed them.
//!
//! # The pinned fast path
//! Linux's `quicklist_alloc` and `quicklist_free` are a per-CPU list pop
//! and push with interrupts off, nothing more. Here the shared API adds a
//! lock per call and the hand-out/take-back transitions, and even the
//! pinned handle ([`QuicklistCpu`]) spent 140 instructions on a hit pair
//! (callgrind on `examples/quicklist_probe.rs`; `mmkit bench quicklist`,
//! case `quicklist/hit_alloc_free`, times it), 5× faster than allocating
//! and zeroing a page (case `alloc_zero_4k_free`) where the series found
//! quicklists worth having. Most of it was the
//! take-back's compare-and-swap of the refcount, the rest moving the
//! 16-byte handle between the stack and the caller, two poison checks and
//! the checks around them. So a pinned handle does not hand its pages out
//! through the descriptor: it keeps a handed-out page frozen and keeps its
//! [`PageBlock`] in the same stack, just above the cached ones (see
//! `pinned`). A hit moves the stack's top index down, the free of that
//! page checks it is the one just above the top and moves the index back
//! up: no atomic read-modify-write, no descriptor write, no block moved.
//! That bookkeeping is 66 instructions a pair. A bare-PFN free cannot know
//! what its caller wrote through the page's address, so it restores the
//! list's state (one copy of the page: zeroes, or the constructor's
//! bytes), where an older version read the page to check it; a
//! [`QuickPage`] that was never written skips both, and the `unsafe`
//! `*_in_state` frees take the caller's word for it. The price:
//! such a page can only be freed through its handle until it is handed
//! over ([`QuicklistCpu::hand_over`], or the handle's drop); elsewhere the
//! free is refused with [`QuicklistError::PinnedCpu`] and changes nothing,
//! as the page allocator refuses another CPU's free of a pinned CPU's
//! `LOCAL` page.

use mmkit::Blocks;
use mmkit::{BlockError, BlockStack, FreeError, Gfp, OwnerKey, PageAllocator, PageBlock, PageOwner, Pfn};
use mmkit::{Cpus, Report};
use spin::{Mutex, MutexGuard};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

mod error;
mod page;
mod pinned;
mod unwind;

use unwind::FreeOnUnwind;

pub use error::QuicklistError;
pub use page::QuickPage;
pub use pinned::QuicklistCpu;

/// A page constructor or destructor: gets the whole page as bytes.
pub type PageFn<'f> = &'f dyn Fn(&mut [u8]);

/// Linux's default `CONFIG_NR_QUICK`.
pub const DEFAULT_NR_QUICK: usize = 1;

/// Most lists per CPU [`Quicklists::new`] accepts. Linux had one or two
/// (`CONFIG_NR_QUICK`: one per kind of table page); the bound keeps a
/// caller's count from sizing the per-CPU tables without limit.
pub const MAX_NR_QUICK: usize = 64;

/// A trim keeps at least 1/16 of the node's free pages cached (Linux's
/// `FRACTION_OF_NODE_MEM`).
pub const FRACTION_OF_NODE_MEM: u64 = 16;

/// Counters of one CPU's list, or of all unpinned CPUs summed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QuicklistStats {
    /// Allocations served from the list.
    pub hits: u64,
    /// Allocations that had to get a fresh zeroed page (and run the ctor);
    /// every allocation for [`Quicklists::uncached`].
    pub misses: u64,
    /// Pages cached by a free.
    pub cached: u64,
    /// Pages a free sent straight to the page allocator: another node's,
    /// poisoned, not in the list's state, or any page for `uncached`. Calls
    /// that found the CPU's lists pinned by another thread are not counted
    /// (only the lists' holder writes their counters).
    pub bypassed: u64,
    /// Pages a trim gave back.
    pub trimmed: u64,
}

/// A counter only its list's holder writes: a relaxed load and store (plain
/// moves), readable by anyone.
#[derive(Default)]
struct OwnedCounter(AtomicU64);

impl OwnedCounter {
    #[inline(always)]
    fn add(&self, n: u64) {
        self.0.store(self.0.load(Relaxed) + n, Relaxed);
    }
    fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// One list's length and counters, readable without the CPU's lock; only
/// the lock's holder writes them.
#[derive(Default)]
struct ListCounters {
    nr_pages: AtomicUsize,
    hits: OwnedCounter,
    misses: OwnedCounter,
    cached: OwnedCounter,
    bypassed: OwnedCounter,
    trimmed: OwnedCounter,
}

impl ListCounters {
    fn stats(&self) -> QuicklistStats {
        QuicklistStats {
            hits: self.hits.get(),
            misses: self.misses.get(),
            cached: self.cached.get(),
            bypassed: self.bypassed.get(),
            trimmed: self.trimmed.get(),
        }
    }
}

/// The cached pages of one CPU's lists, top of each stack last.
type Stacks = Box<[BlockStack]>;

/// One CPU's lists, on their own cache lines. Holding `stacks`' lock (or
/// the pinned handle, which holds it) makes a thread the lists' only user.
#[repr(align(64))]
struct CpuLists {
    stacks: Mutex<Stacks>,
    counters: Box<[ListCounters]>,
    /// A [`QuicklistCpu`] holds `stacks`: read only to tell a page it holds
    /// from a double free.
    pinned: AtomicBool,
}

/// List `nr` of CPU `cpu`, borrowed from its held lock.
struct HeldList<'h> {
    stack: &'h mut BlockStack,
    counters: &'h ListCounters,
    cpu: usize,
    nr: usize,
}

/// What every page of list `nr` looks like, whichever CPU caches it: the
/// bytes of the first constructed page (every free compares the page
/// against them; a list without constructor is all zero).
struct ListState {
    template: OnceLock<Box<[u8]>>,
}

/// Per-CPU quicklists over a [`PageAllocator`] with real memory.
///
/// ```
/// use mmkit_quicklist::Quicklists;
/// use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder};
/// use std::sync::Arc;
///
/// let mm = MemoryMapBuilder::with_memory(16 << 20)
///     .backing(Backing::RealMemory(HugePages::None))
///     .nr_cpus(1) // every call below uses CPU 0's lists
///     .build()
///     .unwrap();
/// let ql = Quicklists::new(Arc::new(mm), 1).unwrap(); // holds a share of the map
/// let page = ql.quicklist_alloc(0, Gfp::KERNEL, None).unwrap(); // zeroed
/// ql.quicklist_free_page(0, None, page).unwrap();               // cached, still zero
/// assert_eq!(ql.quicklist_total_size(), 1);
/// assert_eq!(ql.quicklist_alloc(0, Gfp::KERNEL, None).unwrap(), page);
/// # ql.quicklist_free_page(0, None, page).unwrap();
/// ```
pub struct Quicklists {
    alloc: Arc<PageAllocator>,
    /// The map's key for this set's pages; `None` only once `Drop` gave
    /// it back.
    key: Option<OwnerKey>,
    /// False for the comparison mode of [`Quicklists::uncached`].
    caching: bool,
    /// One node only: no page can be another node's.
    single_node: bool,
    nr_quick: usize,
    cpus: Box<[CpuLists]>,
    states: Box<[ListState]>,
}

impl Quicklists {
    /// `nr_quick` lists for each of the allocator's CPUs.
    ///
    /// # Errors
    /// [`QuicklistError::NoRealMemory`] for a metadata-only map;
    /// [`QuicklistError::TooManyLists`] for more than [`MAX_NR_QUICK`]
    /// lists; [`QuicklistError::NoOwnerTag`] when the map has no owner tag
    /// left ([`Blocks::new_owner_key`]). Nothing is allocated then.
    pub fn new(alloc: Arc<PageAllocator>, nr_quick: usize) -> Result<Self, QuicklistError> {
        if !alloc.has_real_memory() {
            return Err(QuicklistError::NoRealMemory);
        }
        if nr_quick > MAX_NR_QUICK {
            return Err(QuicklistError::TooManyLists { nr_quick, max: MAX_NR_QUICK });
        }
        let key = Blocks::new(&alloc).new_owner_key().map_err(|_| QuicklistError::NoOwnerTag)?;
        let cpus = (0..Cpus::new(&alloc).nr_cpus())
            .map(|_| CpuLists {
                stacks: Mutex::new((0..nr_quick).map(|_| BlockStack::with_capacity(&key, 0, 64)).collect()),
                counters: (0..nr_quick).map(|_| ListCounters::default()).collect(),
                pinned: AtomicBool::new(false),
            })
            .collect();
        let states = (0..nr_quick).map(|_| ListState { template: OnceLock::new() }).collect();
        let single_node = alloc.nr_nodes() <= 1;
        Ok(Self { alloc, key: Some(key), caching: true, single_node, nr_quick, cpus, states })
    }

    /// The same interface without the caching: every allocation is a fresh
    /// zeroed page passed through the constructor, every free runs the
    /// destructor and frees the page. This is what quicklists replace, kept
    /// for measuring them against it.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn uncached(alloc: Arc<PageAllocator>, nr_quick: usize) -> Result<Self, QuicklistError> {
        let mut lists = Self::new(alloc, nr_quick)?;
        lists.caching = false;
        Ok(lists)
    }

    /// Whether freed pages are cached (false for [`uncached`](Self::uncached)).
    pub fn is_caching(&self) -> bool {
        self.caching
    }

    /// Lists per CPU (`NR_QUICK`).
    pub fn nr_quick(&self) -> usize {
        self.nr_quick
    }

    /// The allocator the pages come from.
    pub fn allocator(&self) -> &Arc<PageAllocator> {
        &self.alloc
    }

    /// The owner tag of the pages this set holds or handed out (what
    /// [`Blocks::page_owner`] and [`FreeError::Owned`] report).
    pub fn owner(&self) -> Option<PageOwner> {
        self.key.as_ref().map(OwnerKey::owner)
    }

    /// This set's key; an error only after `Drop` gave it back.
    #[inline(always)]
    fn key(&self) -> Result<&OwnerKey, QuicklistError> {
        self.key.as_ref().ok_or(QuicklistError::NoOwnerTag)
    }

    /// A page from list `nr` of the calling CPU, or a fresh zeroed page
    /// (`gfp | __GFP_ZERO`) passed through `ctor` when the list is empty.
    /// Give it back with [`quicklist_free_page`](Self::quicklist_free_page).
    ///
    /// # Errors
    /// [`QuicklistError::NoSuchList`], [`QuicklistError::Alloc`].
    pub fn quicklist_alloc(&self, nr: usize, gfp: Gfp, ctor: Option<PageFn<'_>>) -> Result<Pfn, QuicklistError> {
        let block = self.quicklist_alloc_block(nr, gfp, ctor)?;
        Ok(self.hand_out(block))
    }

    /// [`quicklist_alloc`](Self::quicklist_alloc) for a caller that keeps
    /// the page as a [`PageBlock`] (to read and write it through
    /// [`Blocks::block_bytes`]); give it back with
    /// [`quicklist_free_block`](Self::quicklist_free_block).
    ///
    /// # Errors
    /// As `quicklist_alloc`.
    pub fn quicklist_alloc_block(
        &self,
        nr: usize,
        gfp: Gfp,
        ctor: Option<PageFn<'_>>,
    ) -> Result<PageBlock, QuicklistError> {
        let cpu = Cpus::new(&self.alloc).current_cpu();
        let slot = &self.cpus[cpu];
        self.check_list(nr)?;
        match slot.stacks.try_lock() {
            Some(mut stacks) => self.alloc_on(Self::held(&mut stacks, slot, cpu, nr), gfp, ctor),
            None => self.fresh_block(cpu, nr, gfp, ctor),
        }
    }

    /// Gives back the page at `addr` (Linux's `quicklist_free`); see
    /// [`quicklist_free_page`](Self::quicklist_free_page).
    ///
    /// # Errors
    /// As `quicklist_free_page`; an address outside the map is
    /// [`FreeError::OutOfRange`] with PFN 0.
    pub fn quicklist_free(&self, nr: usize, dtor: Option<PageFn<'_>>, addr: *const u8) -> Result<(), QuicklistError> {
        let pfn = self.alloc.address_to_pfn(addr).ok_or(QuicklistError::Free(FreeError::OutOfRange(Pfn(0))))?;
        self.quicklist_free_page(nr, dtor, pfn)
    }

    /// Gives back order-0 page `pfn`. It is cached on the calling CPU's
    /// list unless it belongs to another node (then `dtor` runs and it goes
    /// straight back to the allocator). Pages from
    /// [`PageAllocator::alloc_pages`] are accepted too.
    ///
    /// Whatever the caller wrote through the page's address is unknown
    /// here, so the page is *restored* to list `nr`'s state (zeroes, or
    /// the constructor's bytes) before it is cached: a copy of the page,
    /// not a check of it. A caller that knows the page is in the state
    /// says so with the `unsafe`
    /// [`quicklist_free_page_in_state`](Self::quicklist_free_page_in_state)
    /// and skips the copy; a [`QuickPage`] knows it by itself.
    ///
    /// # Errors
    /// [`QuicklistError::NoSuchList`], [`QuicklistError::Free`],
    /// [`QuicklistError::FlagsSet`] (nothing changed).
    pub fn quicklist_free_page(&self, nr: usize, dtor: Option<PageFn<'_>>, pfn: Pfn) -> Result<(), QuicklistError> {
        let block = self.take_back_for(nr, pfn)?;
        self.free_block_checked(nr, dtor, block, StateCheck::Restore)
    }

    /// [`quicklist_free_page`](Self::quicklist_free_page) of a page the
    /// caller promises is in list `nr`'s state, as Linux's
    /// `quicklist_free` trusts its caller: the page is cached as it is, with
    /// neither a copy nor a check (debug builds still check it and refuse
    /// a page that differs with [`QuicklistError::WrongState`]).
    ///
    /// # Safety
    /// Every byte of the page must be what list `nr` holds: zero, or what
    /// the list's constructor wrote (the bytes of its first constructed
    /// page). The list hands the page out again as being in that state, so
    /// a page that is not becomes, for example, a page table whose stale
    /// entries map memory its new user never chose. Nothing else is asked:
    /// a wrong, foreign or freed `pfn` is still refused with an error.
    ///
    /// # Errors
    /// As [`quicklist_free_page`](Self::quicklist_free_page), and
    /// [`QuicklistError::WrongState`] in debug builds.
    // An `unsafe` contract, not an unsafe operation: the body is safe code.
    #[allow(unsafe_code)]
    pub unsafe fn quicklist_free_page_in_state(
        &self,
        nr: usize,
        dtor: Option<PageFn<'_>>,
        pfn: Pfn,
    ) -> Result<(), QuicklistError> {
        let block = self.take_back_for(nr, pfn)?;
        self.free_block_checked(nr, dtor, block, StateCheck::KnownByCaller)
    }

    /// Takes `pfn` back for a free to list `nr`: the list must exist and
    /// the page be this set's and handed out.
    fn take_back_for(&self, nr: usize, pfn: Pfn) -> Result<PageBlock, QuicklistError> {
        self.check_list(nr)?;
        self.take_back(pfn).map_err(|e| match e {
            QuicklistError::Free(FreeError::DoubleFree(pfn)) => self.held_elsewhere(pfn, None),
            other => other,
        })
    }

    /// Gives back a page taken with
    /// [`quicklist_alloc_block`](Self::quicklist_alloc_block) (or any
    /// order-0 block of this set's [`owner`](Self::owner)); as
    /// [`quicklist_free_page`](Self::quicklist_free_page), restored to the
    /// list's state since the block's bytes were the caller's to write.
    ///
    /// # Errors
    /// [`QuicklistError::NoSuchList`] (the block is freed to the allocator
    /// then, so that it is not lost).
    pub fn quicklist_free_block(
        &self,
        nr: usize,
        dtor: Option<PageFn<'_>>,
        block: PageBlock,
    ) -> Result<(), QuicklistError> {
        self.free_block_checked(nr, dtor, block, StateCheck::Restore)
    }

    /// [`quicklist_free_block`](Self::quicklist_free_block) for a caller
    /// in this crate that knows the page is in the list's state by
    /// construction (a page table freed when its count of used entries,
    /// every write of which goes through it, is back to zero): the scan of
    /// the page is skipped, except in debug builds, which still make it.
    pub(crate) fn free_block_in_state(&self, nr: usize, block: PageBlock) -> Result<(), QuicklistError> {
        self.free_block_checked(nr, None, block, StateCheck::KnownByCaller)
    }

    fn free_block_checked(
        &self,
        nr: usize,
        dtor: Option<PageFn<'_>>,
        block: PageBlock,
        check: StateCheck,
    ) -> Result<(), QuicklistError> {
        let cpu = Cpus::new(&self.alloc).current_cpu();
        let slot = &self.cpus[cpu];
        if let Err(e) = self.check_list(nr) {
            self.release(cpu, block, None)?;
            return Err(e);
        }
        match slot.stacks.try_lock() {
            Some(mut stacks) => {
                // `current_cpu` is one of the map's CPUs: the lookup holds.
                let nid = Cpus::new(&self.alloc).cpu_to_node(cpu).unwrap_or(0);
                self.free_on(Self::held(&mut stacks, slot, cpu, nr), dtor, block, nid, check)
            }
            None => self.release(cpu, block, dtor),
        }
    }

    /// Frees pages of the calling CPU's list `nr` down to
    /// max(`min_pages`, node free pages / 16), at most `max_free` of them;
    /// returns how many were freed. A pinned CPU's lists are left alone.
    ///
    /// # Errors
    /// [`QuicklistError::NoSuchList`].
    pub fn quicklist_trim(
        &self,
        nr: usize,
        dtor: Option<PageFn<'_>>,
        min_pages: u64,
        max_free: u64,
    ) -> Result<u64, QuicklistError> {
        self.check_list(nr)?;
        let cpu = Cpus::new(&self.alloc).current_cpu();
        let slot = &self.cpus[cpu];
        Ok(match slot.stacks.try_lock() {
            Some(mut stacks) => self.trim_on(Self::held(&mut stacks, slot, cpu, nr), dtor, min_pages, max_free),
            None => 0,
        })
    }

    /// Empties list `nr` on every CPU that is not pinned, running `dtor` on
    /// each page; returns how many pages went back to the allocator.
    ///
    /// # Errors
    /// [`QuicklistError::NoSuchList`].
    pub fn quicklist_drain(&self, nr: usize, dtor: Option<PageFn<'_>>) -> Result<u64, QuicklistError> {
        self.check_list(nr)?;
        let mut freed = 0;
        for (cpu, slot) in self.cpus.iter().enumerate() {
            if let Some(mut stacks) = slot.stacks.try_lock() {
                freed += self.trim_to(Self::held(&mut stacks, slot, cpu, nr), dtor, 0, u64::MAX);
            }
        }
        Ok(freed)
    }

    /// Pages cached on every list of every CPU (Linux's
    /// `quicklist_total_size`).
    pub fn quicklist_total_size(&self) -> u64 {
        self.cpus.iter().flat_map(|c| c.counters.iter()).map(|l| l.nr_pages.load(Relaxed) as u64).sum()
    }

    /// Pages cached on list `nr` of `cpu`.
    pub fn quicklist_size(&self, cpu: usize, nr: usize) -> Option<usize> {
        Some(self.cpus.get(cpu)?.counters.get(nr)?.nr_pages.load(Relaxed))
    }

    /// The pages cached on list `nr` of `cpu`, the next to be handed out
    /// first; `None` for a list that does not exist or whose CPU is pinned
    /// or busy.
    pub fn cached_pages(&self, cpu: usize, nr: usize) -> Option<Vec<Pfn>> {
        let stacks = self.cpus.get(cpu)?.stacks.try_lock()?;
        Some(stacks.get(nr)?.pfns().iter().rev().copied().collect())
    }

    /// Counters of list `nr` summed over every CPU.
    pub fn stats(&self, nr: usize) -> QuicklistStats {
        let mut sum = QuicklistStats::default();
        for s in self.cpus.iter().filter_map(|cpu| cpu.counters.get(nr)).map(ListCounters::stats) {
            sum.hits += s.hits;
            sum.misses += s.misses;
            sum.cached += s.cached;
            sum.bypassed += s.bypassed;
            sum.trimmed += s.trimmed;
        }
        sum
    }

    /// Takes CPU `cpu`'s lists for the calling thread until the handle is
    /// dropped: its operations then take no lock at all. Other threads that
    /// land on that CPU bypass its lists meanwhile.
    ///
    /// # Errors
    /// [`QuicklistError::NoSuchCpu`], [`QuicklistError::AlreadyPinned`].
    pub fn pin_cpu(&self, cpu: usize) -> Result<QuicklistCpu<'_>, QuicklistError> {
        let slot = self.cpus.get(cpu).ok_or(QuicklistError::NoSuchCpu(cpu))?;
        let stacks = slot.stacks.try_lock().ok_or(QuicklistError::AlreadyPinned(cpu))?;
        slot.pinned.store(true, Relaxed);
        let nid = Cpus::new(&self.alloc).cpu_to_node(cpu).unwrap_or(0);
        Ok(QuicklistCpu::new(self, &slot.counters, stacks, cpu, nid))
    }

    /// Marks `cpu`'s lists as no longer pinned (the handle's drop).
    fn unpin(&self, cpu: usize) {
        self.cpus[cpu].pinned.store(false, Relaxed);
    }

    /// The error for a page the allocator found frozen and owned by the
    /// quicklists: a double free if it is cached on a list that is not
    /// pinned, else (when some CPU other than `except` is pinned) a page
    /// that a pinned handle holds out or caches.
    #[cold]
    fn held_elsewhere(&self, pfn: Pfn, except: Option<usize>) -> QuicklistError {
        let mut pinned = false;
        for (cpu, slot) in self.cpus.iter().enumerate() {
            if Some(cpu) == except {
                continue;
            }
            if slot.pinned.load(Relaxed) {
                pinned = true;
            } else if let Some(stacks) = slot.stacks.try_lock() {
                if stacks.iter().any(|s| s.pfns().contains(&pfn)) {
                    return QuicklistError::Free(FreeError::DoubleFree(pfn));
                }
            }
        }
        if pinned {
            QuicklistError::PinnedCpu(pfn)
        } else {
            QuicklistError::Free(FreeError::DoubleFree(pfn))
        }
    }

    #[inline(always)]
    fn check_list(&self, nr: usize) -> Result<(), QuicklistError> {
        if nr < self.nr_quick {
            Ok(())
        } else {
            Err(QuicklistError::NoSuchList { nr, nr_quick: self.nr_quick })
        }
    }

    /// List `nr` (checked by the caller) of a CPU whose lock `stacks` holds.
    #[inline(always)]
    fn held<'h>(stacks: &'h mut MutexGuard<'_, Stacks>, slot: &'h CpuLists, cpu: usize, nr: usize) -> HeldList<'h> {
        HeldList { stack: &mut stacks[nr], counters: &slot.counters[nr], cpu, nr }
    }

    // ---- the list operations, on a list whose CPU lock the caller holds ----

    #[inline(always)]
    fn alloc_on(&self, at: HeldList<'_>, gfp: Gfp, ctor: Option<PageFn<'_>>) -> Result<PageBlock, QuicklistError> {
        if self.caching {
            while let Some(block) = at.stack.pop() {
                at.counters.nr_pages.store(at.stack.len(), Relaxed);
                if !self.is_poisoned(&block) {
                    at.counters.hits.add(1);
                    return Ok(block);
                }
                // The allocator takes a poisoned page offline when it
                // comes back.
                at.counters.bypassed.add(1);
                let _ = self.release(at.cpu, block, None);
            }
        }
        at.counters.misses.add(1);
        self.fresh_block(at.cpu, at.nr, gfp, ctor)
    }

    /// The refill path: a zeroed page from the allocator on `cpu`'s behalf,
    /// owned by the quicklists and passed through `ctor`.
    #[cold]
    fn fresh_block(
        &self,
        cpu: usize,
        nr: usize,
        gfp: Gfp,
        ctor: Option<PageFn<'_>>,
    ) -> Result<PageBlock, QuicklistError> {
        let on_cpu = Cpus::new(&self.alloc).cpu(cpu).map_err(|_| QuicklistError::NoSuchCpu(cpu))?;
        let block = on_cpu.alloc_block(self.key()?, gfp | Gfp::ZERO, 0).map_err(QuicklistError::Alloc)?;
        let Some(ctor) = ctor else {
            return Ok(block);
        };
        // The caller's constructor may panic: the page goes back then.
        let mut guard = FreeOnUnwind { alloc: &self.alloc, block: Some(block) };
        if let Some(bytes) = guard.block.as_mut().and_then(|block| Blocks::new(&self.alloc).block_bytes_mut(block)) {
            ctor(bytes);
            // The first constructed page is the list's state: every
            // page freed to the list is compared with it.
            self.states[nr].template.get_or_init(|| bytes.to_vec().into_boxed_slice());
        }
        guard.block.take().ok_or(QuicklistError::NoOwnerTag)
    }

    #[inline(always)]
    fn free_on(
        &self,
        at: HeldList<'_>,
        dtor: Option<PageFn<'_>>,
        block: PageBlock,
        cpu_nid: usize,
        check: StateCheck,
    ) -> Result<(), QuicklistError> {
        if let Some(block) = self.admit(at.counters, (at.cpu, cpu_nid), at.nr, dtor, block, check)? {
            // Every block admitted is this set's (its key, order 0), which
            // is all the stack asks; were it not, it goes back to the
            // allocator rather than being lost.
            if let Err(block) = at.stack.push(block) {
                return self.release(at.cpu, block, None);
            }
            at.counters.nr_pages.store(at.stack.len(), Relaxed);
            at.counters.cached.add(1);
        }
        Ok(())
    }

    /// Whether a page freed to list `nr` of `cpu` (on node `cpu_nid`) may
    /// be cached: `Some` hands it back to be pushed (the caller counts it),
    /// `None` means it went to the page allocator (another node's,
    /// poisoned, or no caching).
    #[inline(always)]
    fn admit(
        &self,
        counters: &ListCounters,
        (cpu, cpu_nid): (usize, usize),
        nr: usize,
        dtor: Option<PageFn<'_>>,
        mut block: PageBlock,
        check: StateCheck,
    ) -> Result<Option<PageBlock>, QuicklistError> {
        if !self.caching || !self.is_local_node(block.pfn(), cpu_nid) || self.is_poisoned(&block) {
            counters.bypassed.add(1);
            return self.release(cpu, block, dtor).map(|()| None);
        }
        if check == StateCheck::Restore {
            self.restore(&mut block, nr);
            return Ok(Some(block));
        }
        // A caller's promise (an `unsafe` free, or the crate's page tables,
        // whose entry counts prove it) is checked in debug builds: a page
        // cached in the wrong state would be handed out as if it were in
        // the list's (a dirty page as a zeroed page table is garbage
        // entries).
        let scan = check == StateCheck::KnownByCaller && cfg!(debug_assertions);
        if let Some(offset) = scan.then(|| self.first_difference(&block, nr)).flatten() {
            counters.bypassed.add(1);
            let pfn = block.pfn();
            Blocks::new(&self.alloc).report_bad_block(&block, offset);
            self.release(cpu, block, dtor)?;
            return Err(QuicklistError::WrongState { pfn, offset });
        }
        Ok(Some(block))
    }

    /// Whether the page is on node `nid` (always, with one node).
    #[inline(always)]
    fn is_local_node(&self, pfn: Pfn, nid: usize) -> bool {
        self.single_node || self.alloc.page_to_nid(pfn) == Some(nid)
    }

    /// Takes `pfn` back from its holder: afterwards only the returned
    /// handle reaches it. A page that is cached, free, shared or flagged is
    /// refused unchanged.
    #[inline(always)]
    fn take_back(&self, pfn: Pfn) -> Result<PageBlock, QuicklistError> {
        Blocks::new(&self.alloc).take_back_block(self.key()?, pfn, 0).map_err(|e| match e {
            FreeError::FlagsSet { pfn, flags } => QuicklistError::FlagsSet { pfn, flags },
            other => QuicklistError::Free(other),
        })
    }

    /// Hands a held page to the caller as a PFN.
    #[inline(always)]
    fn hand_out(&self, block: PageBlock) -> Pfn {
        let pfn = block.pfn();
        // Every block here came from `self.alloc`, so it cannot be foreign.
        let _ = Blocks::new(&self.alloc).hand_out_block(block);
        pfn
    }

    /// Runs `dtor` and gives a held page back to the page allocator,
    /// through `cpu`'s per-CPU lists.
    fn release(&self, cpu: usize, block: PageBlock, dtor: Option<PageFn<'_>>) -> Result<(), QuicklistError> {
        let block = match dtor {
            None => block,
            Some(dtor) => {
                // The caller's destructor may panic: the page goes back then.
                let mut guard = FreeOnUnwind { alloc: &self.alloc, block: Some(block) };
                if let Some(bytes) =
                    guard.block.as_mut().and_then(|block| Blocks::new(&self.alloc).block_bytes_mut(block))
                {
                    dtor(bytes);
                }
                guard.block.take().ok_or(QuicklistError::NoOwnerTag)?
            }
        };
        let result = match Cpus::new(&self.alloc).cpu(cpu) {
            Ok(on_cpu) => on_cpu.free_block(block),
            Err(_) => Blocks::new(&self.alloc).free_block(block),
        };
        result.map_err(|e| match e {
            BlockError::Free(e) => QuicklistError::Free(e),
            BlockError::Foreign(block) => QuicklistError::Free(FreeError::OutOfRange(block.pfn())),
        })
    }

    /// Whether hardware reported the page bad since it was cached.
    #[inline(always)]
    fn is_poisoned(&self, block: &PageBlock) -> bool {
        Blocks::new(&self.alloc).block_poisoned(block)
    }

    fn trim_on(&self, at: HeldList<'_>, dtor: Option<PageFn<'_>>, min_pages: u64, max_free: u64) -> u64 {
        if at.stack.len() as u64 <= min_pages {
            return 0;
        }
        // A CPU of the map is on one of its nodes (checked at build).
        let nid = Cpus::new(&self.alloc).cpu_to_node(at.cpu).unwrap_or(0);
        let node_free = Report::new(&self.alloc).node_free_pages(nid).unwrap_or(0);
        let keep = min_pages.max(node_free / FRACTION_OF_NODE_MEM);
        self.trim_to(at, dtor, keep, max_free)
    }

    fn trim_to(&self, at: HeldList<'_>, dtor: Option<PageFn<'_>>, keep: u64, max_free: u64) -> u64 {
        let mut freed = 0;
        while at.stack.len() as u64 > keep && freed < max_free {
            let Some(block) = at.stack.pop() else { break };
            at.counters.nr_pages.store(at.stack.len(), Relaxed);
            let _ = self.release(at.cpu, block, dtor);
            freed += 1;
        }
        at.counters.trimmed.add(freed);
        freed
    }

    /// Puts list `nr`'s state back into a page whose bytes are unknown:
    /// the first constructed page's bytes, or zeroes.
    #[inline]
    fn restore(&self, block: &mut PageBlock, nr: usize) {
        if let Some(bytes) = Blocks::new(&self.alloc).block_bytes_mut(block) {
            match self.states[nr].template.get() {
                Some(template) if template.len() == bytes.len() => bytes.copy_from_slice(template),
                _ => bytes.fill(0),
            }
        }
    }

    /// Check of a freed page against list `nr`'s state (debug builds, of a
    /// caller's promise): the first byte that differs. A page in the state
    /// costs one `memcmp` of the page (against the template, or a zero
    /// block 4 KiB at a time); only a page that differs is searched byte
    /// by byte.
    fn first_difference(&self, block: &PageBlock, nr: usize) -> Option<usize> {
        let bytes = Blocks::new(&self.alloc).block_bytes(block)?;
        match self.states[nr].template.get() {
            Some(template) if bytes == &template[..] => None,
            Some(template) => bytes.iter().zip(template.iter()).position(|(a, b)| a != b),
            None => first_nonzero(bytes),
        }
    }
}

/// How a free knows that a page is in its list's state.
#[derive(Clone, Copy, PartialEq, Eq)]
enum StateCheck {
    /// The caller promised it: an `unsafe` free, or the crate's page
    /// tables, whose count of used entries proves it (checked in debug
    /// builds all the same).
    KnownByCaller,
    /// A [`QuickPage`] never written: its handle is the proof, in every
    /// build (only `unsafe` code can write it behind the handle's back).
    Clean,
    /// A page whose bytes are unknown (a [`QuickPage`] that was written,
    /// a bare PFN, a block lent to the caller): it is restored to the
    /// list's state (the constructed bytes, or zeroes), not scanned.
    Restore,
}

/// A zero block to compare pages with (4 KiB: most pages are one).
static ZEROES: [u8; 4096] = [0; 4096];

/// The first non-zero byte of `bytes`: whole blocks are compared with
/// [`ZEROES`] (the C library's vectorised `memcmp`), and only a block that
/// differs is searched.
fn first_nonzero(bytes: &[u8]) -> Option<usize> {
    bytes
        .chunks(ZEROES.len())
        .enumerate()
        .find(|(_, chunk)| *chunk != &ZEROES[..chunk.len()])
        .and_then(|(i, chunk)| chunk.iter().position(|&b| b != 0).map(|at| i * ZEROES.len() + at))
}

impl Drop for Quicklists {
    /// Returns every cached page to the allocator. Destructors cannot run
    /// here; call [`quicklist_drain`](Quicklists::quicklist_drain) first if
    /// they matter.
    fn drop(&mut self) {
        for nr in 0..self.nr_quick {
            let _ = self.quicklist_drain(nr, None);
        }
        if let Some(key) = self.key.take() {
            // A page still handed out keeps the tag retired (see
            // `release_owner_key`): nobody else can take it back.
            Blocks::new(&self.alloc).release_owner_key(key);
        }
    }
}
