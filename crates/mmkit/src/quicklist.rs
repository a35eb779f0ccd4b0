//! Quicklists (seed 003): per-CPU stacks of free pages kept in a known state.
//!
//! Owns [`Quicklists`] and its pinned handle [`QuicklistCpu`]. Each CPU has
//! `nr_quick` lists; a list is singly linked through the first word of its
//! pages, so a cached allocation touches the list head and one line of the
//! page, never the page allocator. Every page on list `nr` is in that list's
//! state: zero, or what the list's constructor writes (the first word, used
//! as the link while the page is cached, is restored on the way out).
//!
//! Ownership is kept in the page descriptor, so that a mistaken free cannot
//! put one page in two places: a page the quicklist layer handed out or
//! caches carries [`PageFlags::OWNED`] with owner [`QUICKLIST_OWNER`] (the ordinary free paths refuse
//! it), with refcount 1 while a caller holds it and 0 while it is cached.
//! Caching a page is one compare-and-swap of that refcount; taking it is a
//! plain store, as the list's owner is the only one who can reach it.
//!
//! Talks to the allocator only through allocation and free on a CPU and
//! those descriptor transitions; must not touch buddy or per-CPU page lists.
//! Needs real memory (the `std` feature and [`Backing::RealMemory`](crate::Backing)).
//!
//! The `unsafe` here is the three accessors of page contents at the end;
//! each caller states why it holds the page it touches.

use crate::mem::page::{PageDesc, PageIdx, NIL};
use crate::mem::rawmem::RealMemory;
use crate::mem::sync::{Lock, LockGuard};
use crate::types::error::{BadPageReason, FreeError};
use crate::types::gfp::Gfp;
use crate::{PageAllocator, PageFlags, Pfn};
use alloc::boxed::Box;

use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};

mod error;
mod pinned;

pub use error::QuicklistError;
pub use pinned::QuicklistCpu;

/// A page constructor or destructor: gets the whole page as bytes.
pub type PageFn<'f> = &'f dyn Fn(&mut [u8]);

/// The owner tag of pages the quicklists hold or handed out.
pub const QUICKLIST_OWNER: crate::PageOwner = match crate::PageOwner::new(1) {
    Some(owner) => owner,
    None => unreachable!(),
};

/// Linux's default `CONFIG_NR_QUICK`.
pub const DEFAULT_NR_QUICK: usize = 1;

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
    #[inline]
    fn add(&self, n: u64) {
        self.0.store(self.0.load(Relaxed) + n, Relaxed);
    }
    fn get(&self) -> u64 {
        self.0.load(Relaxed)
    }
}

/// One list: the head page (by descriptor index), its length and counters.
/// The fields are atomics so that sizes and counters can be read without
/// the lock, but only the holder of the CPU's lock (or its pinned handle)
/// writes them, with plain relaxed stores.
struct QuickList {
    head: AtomicU32,
    nr_pages: AtomicUsize,
    hits: OwnedCounter,
    misses: OwnedCounter,
    cached: OwnedCounter,
    bypassed: OwnedCounter,
    trimmed: OwnedCounter,
}

impl QuickList {
    fn new() -> Self {
        Self {
            head: AtomicU32::new(NIL),
            nr_pages: AtomicUsize::new(0),
            hits: OwnedCounter::default(),
            misses: OwnedCounter::default(),
            cached: OwnedCounter::default(),
            bypassed: OwnedCounter::default(),
            trimmed: OwnedCounter::default(),
        }
    }

    #[inline]
    fn len(&self) -> usize {
        self.nr_pages.load(Relaxed)
    }

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

/// One CPU's lists, on their own cache lines. Holding `lock` (or the
/// pinned handle, which holds it) is what makes a thread the lists' only
/// writer and the owner of the pages on them.
#[repr(align(64))]
struct CpuLists {
    lock: Lock<()>,
    lists: Box<[QuickList]>,
}

/// A held CPU lock: owning one makes a thread its CPU's lists' only user.
type Held<'g> = LockGuard<'g, ()>;

/// List `nr` of CPU `cpu`, reachable only while the CPU's lock is held:
/// [`HeldList::new`] borrows the guard for as long as the value lives, which
/// is what lets the list operations touch the pages on the list.
#[derive(Clone, Copy)]
struct HeldList<'h> {
    list: &'h QuickList,
    cpu: usize,
    nr: usize,
    _held: core::marker::PhantomData<&'h ()>,
}

impl<'h> HeldList<'h> {
    #[inline(always)]
    fn new(_held: &'h Held<'_>, list: &'h QuickList, cpu: usize, nr: usize) -> Self {
        Self { list, cpu, nr, _held: core::marker::PhantomData }
    }
}

/// What every page of list `nr` looks like, whichever CPU caches it.
struct ListState {
    /// The state's first word (the link overwrites it while cached).
    first_word: AtomicU64,
    /// The state's bytes, captured from the first constructed page; debug
    /// builds compare freed pages against it.
    template: std::sync::OnceLock<Box<[u8]>>,
}

/// Per-CPU quicklists over a [`PageAllocator`] with real memory.
///
/// ```
/// use mmkit::quicklist::Quicklists;
/// use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder};
///
/// let mm = MemoryMapBuilder::with_memory(16 << 20)
///     .backing(Backing::RealMemory(HugePages::None))
///     .nr_cpus(1) // every call below uses CPU 0's lists
///     .build()
///     .unwrap();
/// let ql = Quicklists::new(&mm, 1).unwrap();
/// let page = ql.quicklist_alloc(0, Gfp::KERNEL, None).unwrap(); // zeroed
/// ql.quicklist_free_page(0, None, page).unwrap();               // cached, still zero
/// assert_eq!(ql.quicklist_total_size(), 1);
/// assert_eq!(ql.quicklist_alloc(0, Gfp::KERNEL, None).unwrap(), page);
/// # ql.quicklist_free_page(0, None, page).unwrap();
/// ```
pub struct Quicklists<'a> {
    alloc: &'a PageAllocator,
    mem: &'a RealMemory,
    /// False for the comparison mode of [`Quicklists::uncached`].
    caching: bool,
    /// One node only: no page can be another node's.
    single_node: bool,
    nr_quick: usize,
    cpus: Box<[CpuLists]>,
    states: Box<[ListState]>,
}

impl<'a> Quicklists<'a> {
    /// `nr_quick` lists for each of the allocator's CPUs.
    ///
    /// # Errors
    /// [`QuicklistError::NoRealMemory`] for a metadata-only map.
    pub fn new(alloc: &'a PageAllocator, nr_quick: usize) -> Result<Self, QuicklistError> {
        let mem = alloc.real_memory().ok_or(QuicklistError::NoRealMemory)?;
        let cpus = (0..alloc.nr_cpus())
            .map(|_| CpuLists { lock: Lock::new(()), lists: (0..nr_quick).map(|_| QuickList::new()).collect() })
            .collect();
        let states = (0..nr_quick)
            .map(|_| ListState { first_word: AtomicU64::new(0), template: std::sync::OnceLock::new() })
            .collect();
        Ok(Self { alloc, mem, caching: true, single_node: alloc.nr_nodes() <= 1, nr_quick, cpus, states })
    }

    /// The same interface without the caching: every allocation is a fresh
    /// zeroed page passed through the constructor, every free runs the
    /// destructor and frees the page. This is what quicklists replace, kept
    /// for measuring them against it.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn uncached(alloc: &'a PageAllocator, nr_quick: usize) -> Result<Self, QuicklistError> {
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
    pub fn allocator(&self) -> &'a PageAllocator {
        self.alloc
    }

    /// A page from list `nr` of the calling CPU, or a fresh zeroed page
    /// (`gfp | __GFP_ZERO`) passed through `ctor` when the list is empty.
    /// Give it back with [`quicklist_free_page`](Self::quicklist_free_page).
    ///
    /// # Errors
    /// [`QuicklistError::NoSuchList`], [`QuicklistError::Alloc`].
    pub fn quicklist_alloc(&self, nr: usize, gfp: Gfp, ctor: Option<PageFn<'_>>) -> Result<Pfn, QuicklistError> {
        let cpu = self.alloc.current_cpu();
        let slot = &self.cpus[cpu];
        let list = self.list(slot, nr)?;
        match slot.lock.try_lock() {
            Some(held) => self.alloc_on(HeldList::new(&held, list, cpu, nr), gfp, ctor),
            None => self.fresh_page(cpu, nr, gfp, ctor),
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

    /// Gives back order-0 page `pfn`, which must be in list `nr`'s state.
    /// It is cached on the calling CPU's list unless it belongs to another
    /// node (then `dtor` runs and it goes straight back to the allocator).
    /// Pages from [`PageAllocator::alloc_pages`] are accepted too.
    ///
    /// # Errors
    /// [`QuicklistError::NoSuchList`], [`QuicklistError::Free`],
    /// [`QuicklistError::FlagsSet`] (nothing changed);
    /// [`QuicklistError::WrongState`] (debug builds; reported and freed).
    pub fn quicklist_free_page(&self, nr: usize, dtor: Option<PageFn<'_>>, pfn: Pfn) -> Result<(), QuicklistError> {
        let cpu = self.alloc.current_cpu();
        let slot = &self.cpus[cpu];
        let list = self.list(slot, nr)?;
        match slot.lock.try_lock() {
            Some(held) => self.free_on(HeldList::new(&held, list, cpu, nr), dtor, pfn, self.alloc.cpu_to_node(cpu)),
            None => {
                let (idx, _) = self.take_from_holder(pfn)?;
                self.bypass(cpu, idx, dtor)
            }
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
        let cpu = self.alloc.current_cpu();
        let slot = &self.cpus[cpu];
        let list = self.list(slot, nr)?;
        Ok(match slot.lock.try_lock() {
            Some(held) => self.trim_on(HeldList::new(&held, list, cpu, nr), dtor, min_pages, max_free),
            None => 0,
        })
    }

    /// Empties list `nr` on every CPU that is not pinned, running `dtor` on
    /// each page; returns how many pages went back to the allocator.
    ///
    /// # Errors
    /// [`QuicklistError::NoSuchList`].
    pub fn quicklist_drain(&self, nr: usize, dtor: Option<PageFn<'_>>) -> Result<u64, QuicklistError> {
        let mut freed = 0;
        for (cpu, slot) in self.cpus.iter().enumerate() {
            let list = self.list(slot, nr)?;
            if let Some(held) = slot.lock.try_lock() {
                freed += self.trim_to(HeldList::new(&held, list, cpu, nr), dtor, 0, u64::MAX);
            }
        }
        Ok(freed)
    }

    /// Pages cached on every list of every CPU (Linux's
    /// `quicklist_total_size`).
    pub fn quicklist_total_size(&self) -> u64 {
        self.cpus.iter().flat_map(|c| c.lists.iter()).map(|l| l.len() as u64).sum()
    }

    /// Pages cached on list `nr` of `cpu`.
    pub fn quicklist_size(&self, cpu: usize, nr: usize) -> Option<usize> {
        Some(self.cpus.get(cpu)?.lists.get(nr)?.len())
    }

    /// Counters of list `nr` summed over every CPU.
    pub fn stats(&self, nr: usize) -> QuicklistStats {
        let mut sum = QuicklistStats::default();
        for cpu in self.cpus.iter() {
            if let Some(s) = cpu.lists.get(nr).map(QuickList::stats) {
                sum.hits += s.hits;
                sum.misses += s.misses;
                sum.cached += s.cached;
                sum.bypassed += s.bypassed;
                sum.trimmed += s.trimmed;
            }
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
        let held = slot.lock.try_lock().ok_or(QuicklistError::AlreadyPinned(cpu))?;
        Ok(QuicklistCpu::new(self, slot, held, cpu, self.alloc.cpu_to_node(cpu)))
    }

    #[inline(always)]
    fn list<'s>(&self, slot: &'s CpuLists, nr: usize) -> Result<&'s QuickList, QuicklistError> {
        slot.lists.get(nr).ok_or(QuicklistError::NoSuchList { nr, nr_quick: self.nr_quick })
    }

    // ---- the list operations, on a list whose CPU lock the caller holds ----

    #[inline(always)]
    fn alloc_on(&self, at: HeldList<'_>, gfp: Gfp, ctor: Option<PageFn<'_>>) -> Result<Pfn, QuicklistError> {
        if self.caching {
            if let Some(idx) = self.pop(at) {
                at.list.hits.add(1);
                return Ok(self.alloc.idx_to_pfn(idx));
            }
        }
        at.list.misses.add(1);
        self.fresh_page(at.cpu, at.nr, gfp, ctor)
    }

    /// Takes the first page off the list. Poisoned pages met on the way go
    /// back to the allocator, which takes them offline.
    #[inline(always)]
    fn pop(&self, at: HeldList<'_>) -> Option<PageIdx> {
        let list = at.list;
        loop {
            let idx = list.head.load(Relaxed);
            if idx == NIL {
                return None;
            }
            let restore = self.states[at.nr].first_word.load(Relaxed);
            // SAFETY: `idx` heads a list whose CPU lock the caller holds
            // (`HeldList`), so this layer is the page's only user.
            let link = unsafe { self.read_link(idx) };
            // SAFETY: as above.
            unsafe { self.write_link(idx, restore) };
            list.head.store(link as PageIdx, Relaxed);
            list.nr_pages.store(list.len() - 1, Relaxed);
            let page = self.alloc.desc(idx);
            page.set_refcount(1);
            if !page.has(PageFlags::HWPOISON) {
                return Some(idx);
            }
            list.bypassed.add(1);
            let _ = self.release(at.cpu, idx, None);
        }
    }

    /// The refill path: a zeroed page from the allocator on `cpu`'s behalf,
    /// marked as the quicklist's and passed through `ctor`.
    #[cold]
    fn fresh_page(&self, cpu: usize, nr: usize, gfp: Gfp, ctor: Option<PageFn<'_>>) -> Result<Pfn, QuicklistError> {
        let nid = self.alloc.cpu_to_node(cpu);
        let pfn = self.alloc.alloc_on(cpu, nid, gfp | Gfp::ZERO, 0, false).map_err(QuicklistError::Alloc)?;
        let idx = self.alloc.pfn_to_idx(pfn).unwrap_or(NIL);
        self.alloc.desc(idx).set_owner(QUICKLIST_OWNER.id());
        if let Some(ctor) = ctor {
            // SAFETY: the page was just allocated and is not handed out yet.
            let bytes = unsafe { self.page_bytes(idx) };
            ctor(bytes);
            let state = &self.states[nr];
            state.first_word.store(u64::from_ne_bytes(bytes[..8].try_into().unwrap_or_default()), Relaxed);
            if cfg!(debug_assertions) {
                let _ = state.template.set(bytes.to_vec().into_boxed_slice());
            }
        }
        Ok(pfn)
    }

    #[inline(always)]
    fn free_on(
        &self,
        at: HeldList<'_>,
        dtor: Option<PageFn<'_>>,
        pfn: Pfn,
        cpu_nid: usize,
    ) -> Result<(), QuicklistError> {
        let (idx, page) = self.take_from_holder(pfn)?;
        let foreign = !self.single_node && self.alloc.page_to_nid(pfn) != Some(cpu_nid);
        if !self.caching || foreign || page.has(PageFlags::HWPOISON) {
            at.list.bypassed.add(1);
            return self.bypass(at.cpu, idx, dtor);
        }
        if cfg!(debug_assertions) {
            if let Some(offset) = self.first_difference(idx, at.nr) {
                at.list.bypassed.add(1);
                self.alloc.report_bad_page(idx, BadPageReason::OwnerState { owner: QUICKLIST_OWNER, offset }, 0);
                self.bypass(at.cpu, idx, dtor)?;
                return Err(QuicklistError::WrongState { pfn, offset });
            }
        }
        self.push(at, idx);
        Ok(())
    }

    #[inline(always)]
    fn push(&self, at: HeldList<'_>, idx: PageIdx) {
        let list = at.list;
        // The link is the next page's index (NIL at the end).
        let link = u64::from(list.head.load(Relaxed));
        // SAFETY: `take_from_holder` moved the page to refcount 0 with
        // QUICKLIST set, so its former holder gave it up and no free path
        // accepts it; from here it is on a list whose lock the caller holds.
        unsafe { self.write_link(idx, link) };
        list.head.store(idx, Relaxed);
        list.nr_pages.store(list.len() + 1, Relaxed);
        list.cached.add(1);
    }

    /// Validates `pfn` and takes it from its holder: afterwards it carries
    /// `QUICKLIST` with refcount 0 and only the caller can reach it. A page
    /// that is already cached, free, shared or flagged is refused unchanged.
    #[inline(always)]
    fn take_from_holder(&self, pfn: Pfn) -> Result<(PageIdx, &PageDesc), QuicklistError> {
        let (idx, page) = self.alloc.pfn_to_desc(pfn).ok_or(QuicklistError::Free(FreeError::OutOfRange(pfn)))?;
        let (flags, order) = page.flags_and_order();
        // The common case: a page this layer handed out, back unchanged.
        let handed_out = PageFlags::ALLOCATED.union(PageFlags::OWNED);
        if flags == handed_out && order == 0 && page.owner() == QUICKLIST_OWNER.id() && page.refcount_exchange(1, 0) {
            return Ok((idx, page));
        }
        self.take_from_holder_slow(pfn, idx, flags, order).map(|idx| (idx, page))
    }

    #[cold]
    fn take_from_holder_slow(
        &self,
        pfn: Pfn,
        idx: PageIdx,
        flags: PageFlags,
        order: u32,
    ) -> Result<PageIdx, QuicklistError> {
        let page = self.alloc.desc(idx);
        if !flags.contains(PageFlags::ALLOCATED) {
            let err = self.alloc.validate_allocated(pfn).err().unwrap_or(FreeError::NotAllocated(pfn));
            return Err(QuicklistError::Free(err));
        }
        if order != 0 {
            return Err(QuicklistError::Free(FreeError::WrongOrder { pfn, allocated: order, given: 0 }));
        }
        let embedder = flags.intersection(PageFlags::CHECK_AT_FREE);
        if embedder != PageFlags::EMPTY {
            return Err(QuicklistError::FlagsSet { pfn, flags: embedder });
        }
        // A page from the plain allocator is marked first, so that the free
        // paths refuse it from the moment its refcount can read 0.
        if flags.contains(PageFlags::OWNED) && page.owner() != QUICKLIST_OWNER.id() {
            return Err(QuicklistError::Free(self.alloc.owned_error(pfn, idx)));
        }
        let adopted = !flags.contains(PageFlags::OWNED);
        if adopted && !page.try_set_owner(QUICKLIST_OWNER.id()) {
            return Err(QuicklistError::Free(FreeError::DoubleFree(pfn)));
        }
        if !page.refcount_exchange(1, 0) {
            if adopted {
                page.clear_owner();
            }
            let refcount = page.refcount();
            let err = if refcount == 0 && !adopted {
                FreeError::DoubleFree(pfn)
            } else {
                FreeError::RefcountMismatch { pfn, refcount }
            };
            return Err(QuicklistError::Free(err));
        }
        Ok(idx)
    }

    /// Sends a page just taken from its holder to the page allocator.
    fn bypass(&self, cpu: usize, idx: PageIdx, dtor: Option<PageFn<'_>>) -> Result<(), QuicklistError> {
        self.alloc.desc(idx).set_refcount(1);
        self.release(cpu, idx, dtor)
    }

    /// Runs `dtor` and frees a page the caller holds (refcount 1) to the
    /// page allocator.
    fn release(&self, cpu: usize, idx: PageIdx, dtor: Option<PageFn<'_>>) -> Result<(), QuicklistError> {
        if let Some(dtor) = dtor {
            // SAFETY: the caller holds the page (popped from its list or
            // taken from its holder) and has not freed it yet.
            dtor(unsafe { self.page_bytes(idx) });
        }
        self.alloc.desc(idx).clear_owner();
        self.alloc.free_pages_on(cpu, self.alloc.idx_to_pfn(idx), 0).map_err(QuicklistError::Free)
    }

    fn trim_on(&self, at: HeldList<'_>, dtor: Option<PageFn<'_>>, min_pages: u64, max_free: u64) -> u64 {
        if at.list.len() as u64 <= min_pages {
            return 0;
        }
        let node_free = self.alloc.node_free_pages(self.alloc.cpu_to_node(at.cpu));
        let keep = min_pages.max(node_free / FRACTION_OF_NODE_MEM);
        self.trim_to(at, dtor, keep, max_free)
    }

    fn trim_to(&self, at: HeldList<'_>, dtor: Option<PageFn<'_>>, keep: u64, max_free: u64) -> u64 {
        let mut freed = 0;
        while at.list.len() as u64 > keep && freed < max_free {
            let Some(idx) = self.pop(at) else { break };
            let _ = self.release(at.cpu, idx, dtor);
            freed += 1;
        }
        at.list.trimmed.add(freed);
        freed
    }

    /// Debug check of a freed page against list `nr`'s state.
    fn first_difference(&self, idx: PageIdx, nr: usize) -> Option<usize> {
        // SAFETY: called only on a page just taken from its holder.
        let bytes = unsafe { self.page_bytes(idx) };
        match self.states[nr].template.get() {
            Some(template) => bytes.iter().zip(template.iter()).position(|(a, b)| a != b),
            None => bytes.iter().position(|&b| b != 0),
        }
    }

    // ---- page memory ----

    /// The link word of page `idx`.
    ///
    /// # Safety
    /// This layer holds the page (cached, or just taken from its holder).
    #[inline]
    unsafe fn read_link(&self, idx: PageIdx) -> u64 {
        // SAFETY: the caller's contract is `read_word`'s.
        unsafe { self.mem.read_word(idx as usize, 0) }
    }

    /// # Safety
    /// As [`read_link`](Self::read_link).
    #[inline]
    unsafe fn write_link(&self, idx: PageIdx, value: u64) {
        // SAFETY: the caller's contract is `write_word`'s.
        unsafe { self.mem.write_word(idx as usize, 0, value) }
    }

    /// # Safety
    /// As [`read_link`](Self::read_link), and no other reference to the
    /// page lives while the slice does.
    #[allow(clippy::mut_from_ref)]
    unsafe fn page_bytes(&self, idx: PageIdx) -> &mut [u8] {
        // SAFETY: the caller's contract is `page_bytes_mut`'s.
        unsafe { self.mem.page_bytes_mut(idx as usize) }
    }
}

impl Drop for Quicklists<'_> {
    /// Returns every cached page to the allocator. Destructors cannot run
    /// here; call [`quicklist_drain`](Quicklists::quicklist_drain) first if
    /// they matter.
    fn drop(&mut self) {
        for nr in 0..self.nr_quick {
            let _ = self.quicklist_drain(nr, None);
        }
    }
}

/// Pages of `list` in order, for tests.
#[cfg(test)]
fn list_pages(ql: &Quicklists<'_>, cpu: usize, nr: usize) -> alloc::vec::Vec<PageIdx> {
    let _held = ql.cpus[cpu].lock.lock();
    let mut out = alloc::vec::Vec::new();
    let mut idx = ql.cpus[cpu].lists[nr].head.load(Relaxed);
    while idx != NIL {
        out.push(idx);
        // SAFETY: the page is on a list whose lock this function holds.
        idx = unsafe { ql.read_link(idx) } as PageIdx;
    }
    out
}

#[cfg(test)]
mod tests;
