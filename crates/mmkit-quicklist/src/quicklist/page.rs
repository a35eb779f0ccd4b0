//! [`QuickPage`]: a quicklist page held by its caller as a unique handle
//! that records whether its bytes were written, so that giving it back
//! needs no scan of the page.
//!
//! Owns the handle and its two frees (shared API and pinned handle). The
//! idea is mimalloc's `free_is_zero` and the standard library's `PeekMut`:
//! the state a page left its list in stays known as long as every write
//! goes through something that notes it. Here that is
//! [`Quicklists::page_bytes_mut`] (or the pinned handle's), which marks
//! the page written. A page never written goes back on its list as it is:
//! no scan, no copy. A written page's state is unknown, so it is restored
//! (the list's constructed bytes copied back, or zeroes), not scanned. The
//! bare-PFN calls (`quicklist_alloc` / `quicklist_free_page`) cannot know
//! what a caller wrote through the page's address, so they restore it
//! too, unless the caller vouches for the bytes with the `unsafe`
//! `quicklist_free_page_in_state`.

use super::{PageFn, QuicklistCpu, QuicklistError, Quicklists, StateCheck};
use mmkit::Blocks;
use mmkit::Cpus;
use mmkit::{Gfp, PageBlock, Pfn};

/// A page from list [`list`](Self::list) of a [`Quicklists`], held by its
/// caller: unique (neither `Clone` nor constructible outside this crate),
/// reached through [`Quicklists::page_bytes`] and
/// [`Quicklists::page_bytes_mut`], and given back with
/// [`Quicklists::free_quick_page`] (or the pinned handle's
/// [`QuicklistCpu::free_quick_page`]). A dropped `QuickPage` leaks its page
/// (it stays allocated and owned), as a dropped [`PageBlock`] does.
///
/// ```
/// use mmkit_quicklist::Quicklists;
/// use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder};
/// use std::sync::Arc;
///
/// let mm = MemoryMapBuilder::with_memory(16 << 20).backing(Backing::RealMemory(HugePages::None)).nr_cpus(1).build().unwrap();
/// let ql = Quicklists::new(Arc::new(mm), 1).unwrap();
/// let page = ql.alloc_page(0, Gfp::KERNEL, None).unwrap();
/// assert!(ql.page_bytes(&page).iter().all(|&b| b == 0)); // reading keeps it clean
/// ql.free_quick_page(None, page).unwrap();               // back without a scan
/// let mut page = ql.alloc_page(0, Gfp::KERNEL, None).unwrap();
/// ql.page_bytes_mut(&mut page)[8] = 1;                   // written: state unknown
/// ql.free_quick_page(None, page).unwrap();               // restored to zeroes
/// let page = ql.alloc_page(0, Gfp::KERNEL, None).unwrap();
/// assert_eq!(ql.page_bytes(&page)[8], 0);
/// # ql.free_quick_page(None, page).unwrap();
/// ```
///
/// A `QuickPage` cannot be copied, nor freed twice (freeing consumes it):
///
/// ```compile_fail
/// # use mmkit_quicklist::Quicklists;
/// # use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder};
/// # let mm = MemoryMapBuilder::with_memory(16 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap();
/// # let ql = Quicklists::new(std::sync::Arc::new(mm), 1).unwrap();
/// let page = ql.alloc_page(0, Gfp::KERNEL, None).unwrap();
/// ql.free_quick_page(None, page).unwrap();
/// ql.free_quick_page(None, page).unwrap(); // error: use of a moved value
/// ```
#[must_use = "a dropped QuickPage leaks its page; give it back with free_quick_page"]
#[derive(Debug)]
pub struct QuickPage {
    block: PageBlock,
    /// The list (bits 0..32, below [`MAX_NR_QUICK`](super::MAX_NR_QUICK))
    /// and whether the bytes were handed out writable ([`WRITTEN`]), in
    /// one word: the handle is stored and reloaded as whole words, which
    /// the CPU forwards from its store buffer (a word stored in two
    /// narrow pieces and reloaded whole waits for the stores to reach the
    /// cache, on every hit: `quicklist_probe pinned_page`).
    list_and_state: u64,
}

/// The bit of [`QuickPage::list_and_state`] that says the bytes were
/// handed out writable.
const WRITTEN: u64 = 1 << 32;

impl QuickPage {
    /// A clean page of list `nr` (a list that exists: below
    /// [`MAX_NR_QUICK`](super::MAX_NR_QUICK)).
    #[inline(always)]
    fn new(block: PageBlock, nr: usize) -> Self {
        Self { block, list_and_state: nr as u64 }
    }
    /// The page.
    #[inline(always)]
    pub fn pfn(&self) -> Pfn {
        self.block.pfn()
    }
    /// The list it came from, and goes back to.
    #[inline(always)]
    pub fn list(&self) -> usize {
        (self.list_and_state & u64::from(u32::MAX)) as usize
    }
    /// Whether its bytes were handed out writable since it left its list
    /// (then it is restored on the way back).
    #[inline(always)]
    pub fn is_written(&self) -> bool {
        self.list_and_state & WRITTEN != 0
    }
    /// The page as a plain owned block, for a caller that keeps it: its
    /// state is no longer tracked (give it back with
    /// [`Quicklists::quicklist_free_block`], which restores it).
    pub fn into_block(self) -> PageBlock {
        self.block
    }

    #[inline(always)]
    fn check(&self) -> StateCheck {
        if self.is_written() {
            StateCheck::Restore
        } else {
            StateCheck::Clean
        }
    }
}

impl Quicklists {
    /// A page from list `nr` of the calling CPU as a [`QuickPage`] (see
    /// [`quicklist_alloc`](Self::quicklist_alloc)): no hand-out, so no
    /// take-back on the way back either.
    ///
    /// # Errors
    /// As `quicklist_alloc`.
    #[inline]
    pub fn alloc_page(&self, nr: usize, gfp: Gfp, ctor: Option<PageFn<'_>>) -> Result<QuickPage, QuicklistError> {
        let block = self.quicklist_alloc_block(nr, gfp, ctor)?;
        Ok(QuickPage::new(block, nr))
    }

    /// The page's bytes, to read; the page stays clean.
    pub fn page_bytes<'p>(&'p self, page: &'p QuickPage) -> &'p [u8] {
        Blocks::new(&self.alloc).block_bytes(&page.block).unwrap_or_default()
    }

    /// The page's bytes, writable; the page is marked written, so that it
    /// is restored to its list's state when it goes back.
    pub fn page_bytes_mut<'p>(&'p self, page: &'p mut QuickPage) -> &'p mut [u8] {
        page.list_and_state |= WRITTEN;
        Blocks::new(&self.alloc).block_bytes_mut(&mut page.block).unwrap_or_default()
    }

    /// Gives a [`QuickPage`] back to its list on the calling CPU: as it is
    /// if it was never written, restored to the list's state if it was
    /// (no scan either way). `dtor` runs only if the page goes back to
    /// the allocator (another node's, poisoned, or no caching).
    ///
    /// # Errors
    /// As [`quicklist_free_block`](Self::quicklist_free_block), without
    /// [`QuicklistError::WrongState`].
    #[inline]
    pub fn free_quick_page(&self, dtor: Option<PageFn<'_>>, page: QuickPage) -> Result<(), QuicklistError> {
        if !self.owns(&page) {
            return self.release(Cpus::new(&self.alloc).current_cpu(), page.block, dtor);
        }
        let check = page.check();
        self.free_block_checked(page.list(), dtor, page.block, check)
    }

    /// Whether `page` is one of this set's (its tag and map are this set's
    /// key's): another set's page goes to the page allocator, not on these
    /// lists.
    #[inline(always)]
    pub(super) fn owns(&self, page: &QuickPage) -> bool {
        self.key.as_ref().is_some_and(|key| page.block.belongs_to(key))
    }
}

impl QuicklistCpu<'_> {
    /// [`Quicklists::alloc_page`] on this CPU: a hit takes the top cached
    /// page with no lock and no atomic.
    ///
    /// # Errors
    /// As [`alloc`](Self::alloc).
    #[inline(always)]
    pub fn alloc_page(&mut self, nr: usize, gfp: Gfp, ctor: Option<PageFn<'_>>) -> Result<QuickPage, QuicklistError> {
        // The slow path's result is unpacked here, so that both paths meet
        // with the handle in registers rather than in the result's memory
        // (which the hit filled in pieces and the caller then copied whole).
        let block = match self.hit(nr) {
            Some(block) => block,
            None => self.alloc_page_slow(nr, gfp, ctor)?,
        };
        Ok(QuickPage::new(block, nr))
    }

    /// The hit: the top cached page of list `nr`, unless hardware
    /// poisoned it.
    #[inline(always)]
    fn hit(&mut self, nr: usize) -> Option<PageBlock> {
        let ql = self.ql;
        let list = self.lists.get_mut(nr)?;
        if list.top != list.stack.len() || !ql.caching {
            return None;
        }
        let block = list.stack.pop()?;
        if !ql.is_poisoned(&block) {
            list.set_top(list.stack.len());
            list.counters.hits.add(1);
            return Some(block);
        }
        // Back where it was; the slow path frees it.
        if let Err(block) = list.stack.push(block) {
            let _ = ql.release(self.cpu, block, None);
        }
        None
    }

    #[cold]
    fn alloc_page_slow(&mut self, nr: usize, gfp: Gfp, ctor: Option<PageFn<'_>>) -> Result<PageBlock, QuicklistError> {
        self.alloc_block(nr, gfp, ctor)
    }

    /// The page's bytes, to read (see [`Quicklists::page_bytes`]).
    pub fn page_bytes<'p>(&'p self, page: &'p QuickPage) -> &'p [u8] {
        self.ql.page_bytes(page)
    }

    /// The page's bytes, writable; marks it written (see
    /// [`Quicklists::page_bytes_mut`]).
    pub fn page_bytes_mut<'p>(&'p self, page: &'p mut QuickPage) -> &'p mut [u8] {
        self.ql.page_bytes_mut(page)
    }

    /// [`Quicklists::free_quick_page`] on this CPU: a page never written,
    /// of this node, goes back on top of its list with no lock, no atomic
    /// and no scan.
    ///
    /// # Errors
    /// As `free_quick_page`.
    #[inline(always)]
    pub fn free_quick_page(&mut self, dtor: Option<PageFn<'_>>, page: QuickPage) -> Result<(), QuicklistError> {
        let (ql, nid) = (self.ql, self.nid);
        if let Some(list) = self.lists.get_mut(page.list()) {
            if !page.is_written()
                && list.top == list.stack.len()
                && ql.caching
                && ql.is_local_node(page.block.pfn(), nid)
            {
                // The stack takes only this set's blocks: the push is the
                // check that the page is ours.
                match list.stack.push(page.block) {
                    Ok(()) => {
                        list.set_top(list.stack.len());
                        list.counters.cached.add(1);
                        return Ok(());
                    }
                    Err(block) => return self.free_quick_page_slow(dtor, QuickPage { block, ..page }),
                }
            }
        }
        self.free_quick_page_slow(dtor, page)
    }

    #[cold]
    fn free_quick_page_slow(&mut self, dtor: Option<PageFn<'_>>, page: QuickPage) -> Result<(), QuicklistError> {
        if !self.ql.owns(&page) {
            return self.ql.release(self.cpu, page.block, dtor);
        }
        let check = page.check();
        self.free_block_to_list(page.list(), dtor, page.block, check)
    }
}
