//! The pinned handle of the quicklists: one thread's sole use of one CPU's
//! lists, so that its calls take no lock. Owns nothing but the handle (and
//! the CPU's lock for as long as it lives); the list operations are the
//! parent module's.

use super::{HeldList, ListCounters, PageFn, QuicklistError, QuicklistStats, Quicklists, Stacks};
use mmkit::{Gfp, PageBlock, Pfn};
use spin::MutexGuard;

/// Sole use of one CPU's quicklists: no lock per operation.
///
/// ```
/// use mmkit_quicklist::Quicklists;
/// use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder};
///
/// let mm = MemoryMapBuilder::with_memory(16 << 20).backing(Backing::RealMemory(HugePages::None)).nr_cpus(2).build().unwrap();
/// let ql = Quicklists::new(&mm, 2).unwrap();
/// let mut cpu1 = ql.pin_cpu(1).unwrap();
/// let pfn = cpu1.alloc(1, Gfp::KERNEL, None).unwrap();
/// cpu1.free_page(1, None, pfn).unwrap();
/// assert_eq!(ql.quicklist_size(1, 1), Some(1));
/// ```
pub struct QuicklistCpu<'q> {
    ql: &'q Quicklists<'q>,
    counters: &'q [ListCounters],
    stacks: MutexGuard<'q, Stacks>,
    cpu: usize,
    /// The CPU's node, looked up once.
    nid: usize,
}

impl<'q> QuicklistCpu<'q> {
    pub(super) fn new(
        ql: &'q Quicklists<'q>,
        counters: &'q [ListCounters],
        stacks: MutexGuard<'q, Stacks>,
        cpu: usize,
        nid: usize,
    ) -> Self {
        Self { ql, counters, stacks, cpu, nid }
    }

    /// The CPU this handle owns.
    pub fn cpu_id(&self) -> usize {
        self.cpu
    }

    /// [`Quicklists::quicklist_alloc`] on this CPU.
    ///
    /// # Errors
    /// As `quicklist_alloc`.
    // Always inlined: as a call from another crate, saving and restoring
    // registers cost a third of the pair's instructions (152 against 102).
    #[inline(always)]
    pub fn alloc(&mut self, nr: usize, gfp: Gfp, ctor: Option<PageFn<'_>>) -> Result<Pfn, QuicklistError> {
        let block = self.alloc_block(nr, gfp, ctor)?;
        Ok(self.ql.hand_out(block))
    }

    /// [`Quicklists::quicklist_alloc_block`] on this CPU.
    ///
    /// # Errors
    /// As `quicklist_alloc`.
    #[inline(always)]
    pub fn alloc_block(&mut self, nr: usize, gfp: Gfp, ctor: Option<PageFn<'_>>) -> Result<PageBlock, QuicklistError> {
        let ql = self.ql;
        ql.alloc_on(self.list(nr)?, gfp, ctor)
    }

    /// [`Quicklists::quicklist_free_page`] on this CPU.
    ///
    /// # Errors
    /// As `quicklist_free_page`.
    #[inline(always)]
    pub fn free_page(&mut self, nr: usize, dtor: Option<PageFn<'_>>, pfn: Pfn) -> Result<(), QuicklistError> {
        self.ql.check_list(nr)?;
        let block = self.ql.take_back(pfn)?;
        let (ql, nid) = (self.ql, self.nid);
        ql.free_on(self.list(nr)?, dtor, block, nid)
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
        let ql = self.ql;
        Ok(ql.trim_on(self.list(nr)?, dtor, min_pages, max_free))
    }

    /// Empties this CPU's list `nr`; returns the pages freed.
    ///
    /// # Errors
    /// [`QuicklistError::NoSuchList`].
    pub fn drain(&mut self, nr: usize, dtor: Option<PageFn<'_>>) -> Result<u64, QuicklistError> {
        let ql = self.ql;
        Ok(ql.trim_to(self.list(nr)?, dtor, 0, u64::MAX))
    }

    /// List `nr`, as held by this handle.
    #[inline(always)]
    fn list(&mut self, nr: usize) -> Result<HeldList<'_>, QuicklistError> {
        self.ql.check_list(nr)?;
        Ok(HeldList { stack: &mut self.stacks[nr], counters: &self.counters[nr], cpu: self.cpu, nr })
    }

    /// Counters of this CPU's list `nr`.
    pub fn stats(&self, nr: usize) -> Option<QuicklistStats> {
        self.counters.get(nr).map(ListCounters::stats)
    }
}
