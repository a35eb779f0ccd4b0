//! A four-level radix page table built on quicklists (seed 003).
//!
//! Owns [`PageTables`], the part address spaces share (where table pages
//! come from, the kernel half every pgd carries, per-level counters and
//! times), and [`PageTable`], one address space: `map`, `unmap`,
//! `translate` over 48-bit virtual addresses with 4 KiB pages, the layout of
//! x86-64 (pgd → pud → pmd → pte, 512 entries of 8 bytes per table) minus the
//! permission bits. An entry holds a PFN shifted by 12 with bit 0 "present".
//!
//! Table pages come from one quicklist per level. The pgd list has a
//! constructor that copies the kernel half, so a recycled pgd needs no work;
//! the other lists hold zeroed tables, and `unmap` gives a table back (it is
//! zero again by then) as soon as its last entry goes. Must not touch the
//! allocator's own lists: pages come and go through [`Quicklists`] only.
//!
//! The entries are read and written in place, inside table pages that this
//! module holds (marked [`OWNED`](crate::PageFlags::OWNED), so no
//! free path of the allocator accepts them); that is the `unsafe` here.

use crate::mem::page::PageIdx;
use crate::mem::rawmem::RealMemory;
use crate::quicklist::{PageFn, QuicklistError, Quicklists};
use crate::types::gfp::Gfp;
use crate::{PageAllocator, Pfn};
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU16, AtomicU64, Ordering::Relaxed};

/// Entries per table.
pub const PTRS_PER_TABLE: usize = 512;
/// User addresses are `[0, USER_VA_END)`: the lower half of a 48-bit space.
pub const USER_VA_END: u64 = 1 << 47;
/// Kernel tables every pgd points at from its upper half.
pub const KERNEL_TABLES: usize = 4;

const PAGE_SHIFT: u32 = 12;
const PRESENT: u64 = 1;
/// Highest PFN an entry can hold (bits 12..51).
const MAX_ENTRY_PFN: u64 = (1 << 40) - 1;

/// A level of the table, top first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Level {
    /// Page global directory: the root, one per address space.
    Pgd,
    /// Page upper directory.
    Pud,
    /// Page middle directory.
    Pmd,
    /// Page table proper: entries map pages.
    Pte,
}

impl Level {
    /// Every level, top first.
    pub const ALL: [Level; 4] = [Level::Pgd, Level::Pud, Level::Pmd, Level::Pte];

    /// `pgd`, `pud`, `pmd` or `pte`.
    pub fn name(self) -> &'static str {
        match self {
            Level::Pgd => "pgd",
            Level::Pud => "pud",
            Level::Pmd => "pmd",
            Level::Pte => "pte",
        }
    }

    /// Position from the top (0 for pgd); also the level's quicklist.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The index into a table of this level that `va` selects.
    fn entry_index(self, va: u64) -> usize {
        ((va >> (PAGE_SHIFT + 9 * (3 - self.index() as u32))) as usize) % PTRS_PER_TABLE
    }
}

/// Why a page-table operation failed; nothing was changed, except that a
/// `Table` failure in `map` may leave empty tables linked (freed with the
/// address space, as in Linux).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapError {
    /// The address is not a multiple of 4 KiB.
    NotPageAligned(u64),
    /// The address is not a user address (`>= USER_VA_END`).
    NotUserAddress(u64),
    /// The PFN does not fit an entry.
    PfnTooLarge(Pfn),
    /// `map` of an address that is already mapped.
    AlreadyMapped {
        /// The address.
        va: u64,
        /// What it maps to.
        pfn: Pfn,
    },
    /// `unmap` of an address that is not mapped.
    NotMapped(u64),
    /// No table page could be had.
    Table(QuicklistError),
}

impl core::fmt::Display for MapError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::NotPageAligned(va) => write!(f, "address {va:#x} is not page aligned"),
            Self::NotUserAddress(va) => write!(f, "address {va:#x} is not a user address"),
            Self::PfnTooLarge(pfn) => write!(f, "pfn {pfn} does not fit a page-table entry"),
            Self::AlreadyMapped { va, pfn } => write!(f, "address {va:#x} already maps pfn {pfn}"),
            Self::NotMapped(va) => write!(f, "address {va:#x} is not mapped"),
            Self::Table(e) => write!(f, "no page-table page: {e}"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for MapError {}

/// Table pages allocated at one level, and how long the allocations took
/// when a clock is set (seed 003's table).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LevelStats {
    /// Tables allocated.
    pub count: u64,
    /// Tables given back.
    pub freed: u64,
    /// Sum of the timed allocations, in clock units (ns for the CLI).
    pub total_ns: u64,
    /// Fastest timed allocation (0 when none was timed).
    pub min_ns: u64,
    /// Slowest timed allocation.
    pub max_ns: u64,
}

impl LevelStats {
    /// Mean time per allocation.
    pub fn avg_ns(&self) -> f64 {
        if self.count == 0 {
            0.0
        } else {
            self.total_ns as f64 / self.count as f64
        }
    }
}

struct LevelCounters {
    count: AtomicU64,
    freed: AtomicU64,
    total_ns: AtomicU64,
    min_ns: AtomicU64,
    max_ns: AtomicU64,
}

impl LevelCounters {
    fn new() -> Self {
        Self {
            count: AtomicU64::new(0),
            freed: AtomicU64::new(0),
            total_ns: AtomicU64::new(0),
            min_ns: AtomicU64::new(u64::MAX),
            max_ns: AtomicU64::new(0),
        }
    }
}

/// What address spaces share; see the module doc.
///
/// ```
/// use mmkit::pagetable::{Level, PageTables};
/// use mmkit::{Backing, HugePages, MemoryMapBuilder, Gfp};
///
/// let mm = MemoryMapBuilder::with_memory(32 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap();
/// let tables = PageTables::new(&mm, true).unwrap();
/// let data = mm.alloc_pages(Gfp::HIGHUSER_MOVABLE, 0).unwrap();
/// let mut space = tables.new_address_space().unwrap();
/// space.map(0x7fff_0000_0000, data).unwrap();
/// assert_eq!(space.translate(0x7fff_0000_0123), Some(data));
/// assert_eq!(space.unmap(0x7fff_0000_0000), Ok(data));
/// assert_eq!(space.nr_tables(), 1, "emptied tables went back; the pgd stays");
/// drop(space);
/// assert_eq!(tables.level_stats(Level::Pte).count, 1);
/// # mm.free_pages(data, 0).unwrap();
/// ```
pub struct PageTables<'a> {
    alloc: &'a PageAllocator,
    mem: &'a RealMemory,
    quicklists: Quicklists<'a>,
    /// Entries `256..512` of every pgd.
    kernel_half: Box<[u64]>,
    kernel_tables: Vec<Pfn>,
    /// Present entries of each table page, by descriptor index.
    used: Box<[AtomicU16]>,
    levels: [LevelCounters; 4],
    clock: Option<fn() -> u64>,
}

impl<'a> PageTables<'a> {
    /// Page tables over `alloc`'s memory, with table pages cached on
    /// quicklists when `quicklists` is true, or allocated and freed each
    /// time (zeroed, through the per-CPU lists) when false.
    ///
    /// # Errors
    /// [`QuicklistError::NoRealMemory`]; [`QuicklistError::Alloc`] if the
    /// kernel tables cannot be allocated.
    pub fn new(alloc: &'a PageAllocator, quicklists: bool) -> Result<Self, QuicklistError> {
        let lists = Level::ALL.len();
        let quicklists = if quicklists { Quicklists::new(alloc, lists)? } else { Quicklists::uncached(alloc, lists)? };
        let mem = alloc.real_memory().ok_or(QuicklistError::NoRealMemory)?;
        let nr_pages = (alloc.end_pfn().0 - alloc.start_pfn().0) as usize;
        let mut tables = Self {
            alloc,
            mem,
            quicklists,
            kernel_half: alloc::vec![0; PTRS_PER_TABLE / 2].into_boxed_slice(),
            kernel_tables: Vec::new(),
            // Lazily zeroed: only the pages that become tables are touched.
            used: crate::mem::rawmem::zeroed_slice(nr_pages),
            levels: [LevelCounters::new(), LevelCounters::new(), LevelCounters::new(), LevelCounters::new()],
            clock: None,
        };
        for slot in 0..KERNEL_TABLES {
            let pfn = tables.quicklists.quicklist_alloc(Level::Pud.index(), Gfp::KERNEL, None)?;
            tables.kernel_half[slot] = (pfn.0 << PAGE_SHIFT) | PRESENT;
            tables.kernel_tables.push(pfn);
        }
        Ok(tables)
    }

    /// Times every table allocation with `clock` (any monotonic counter;
    /// the CLI passes nanoseconds).
    pub fn with_clock(mut self, clock: fn() -> u64) -> Self {
        self.clock = Some(clock);
        self
    }

    /// A new, empty address space: just a pgd with the kernel half.
    ///
    /// # Errors
    /// [`MapError::Table`] if no pgd page can be had.
    pub fn new_address_space(&self) -> Result<PageTable<'_>, MapError> {
        let pgd = self.alloc_table(Level::Pgd)?;
        Ok(PageTable { tables: self, pgd, nr_tables: 1, nr_mapped: 0 })
    }

    /// Counters and times of `level` so far.
    pub fn level_stats(&self, level: Level) -> LevelStats {
        let c = &self.levels[level.index()];
        let min = c.min_ns.load(Relaxed);
        LevelStats {
            count: c.count.load(Relaxed),
            freed: c.freed.load(Relaxed),
            total_ns: c.total_ns.load(Relaxed),
            min_ns: if min == u64::MAX { 0 } else { min },
            max_ns: c.max_ns.load(Relaxed),
        }
    }

    /// Zeroes every level's counters.
    pub fn reset_stats(&self) {
        for c in &self.levels {
            for counter in [&c.count, &c.freed, &c.total_ns, &c.max_ns] {
                counter.store(0, Relaxed);
            }
            c.min_ns.store(u64::MAX, Relaxed);
        }
    }

    /// The quicklists the table pages come from (list `n` is level `n`).
    pub fn quicklists(&self) -> &Quicklists<'a> {
        &self.quicklists
    }

    fn alloc_table(&self, level: Level) -> Result<PageIdx, MapError> {
        let kernel_half = &self.kernel_half;
        let pgd_ctor = move |page: &mut [u8]| {
            for (i, entry) in kernel_half.iter().enumerate() {
                let at = (PTRS_PER_TABLE / 2 + i) * 8;
                page[at..at + 8].copy_from_slice(&entry.to_ne_bytes());
            }
        };
        let ctor: Option<PageFn<'_>> = if level == Level::Pgd { Some(&pgd_ctor) } else { None };
        let start = self.clock.map(|now| now());
        let pfn = self.quicklists.quicklist_alloc(level.index(), Gfp::KERNEL, ctor).map_err(MapError::Table)?;
        let c = &self.levels[level.index()];
        c.count.fetch_add(1, Relaxed);
        if let (Some(start), Some(now)) = (start, self.clock) {
            let took = now().saturating_sub(start);
            c.total_ns.fetch_add(took, Relaxed);
            c.min_ns.fetch_min(took, Relaxed);
            c.max_ns.fetch_max(took, Relaxed);
        }
        // Quicklist pages come from this allocator, so the PFN is in its map.
        Ok(self.alloc.pfn_to_idx(pfn).unwrap_or_default())
    }

    /// Gives back a table whose user entries are all clear again.
    fn free_table(&self, level: Level, table: PageIdx) {
        self.levels[level.index()].freed.fetch_add(1, Relaxed);
        let result = self.quicklists.quicklist_free_page(level.index(), None, self.alloc.idx_to_pfn(table));
        debug_assert!(result.is_ok(), "a table left its state: {result:?}");
    }

    /// Entry `i` of `table`.
    fn entry(&self, table: PageIdx, i: usize) -> u64 {
        // SAFETY: `table` is a table page of a live address space or a
        // kernel table. Table pages are held by this module (marked, so no
        // free path takes them) and written only through `&mut PageTable`
        // of their one address space, which cannot coexist with this read
        // of the same space; kernel tables are never written after `new`.
        unsafe { self.mem.read_word(table as usize, i) }
    }

    /// Sets entry `i` of `table`.
    fn set_entry(&self, table: PageIdx, i: usize, value: u64) {
        // SAFETY: as in `entry`; the caller holds the address space that
        // owns `table` mutably.
        unsafe { self.mem.write_word(table as usize, i, value) }
    }

    fn entry_target(&self, entry: u64) -> Option<PageIdx> {
        if entry & PRESENT == 0 {
            return None;
        }
        self.alloc.pfn_to_idx(Pfn(entry >> PAGE_SHIFT))
    }

    fn used(&self, table: PageIdx) -> &AtomicU16 {
        &self.used[table as usize]
    }
}

impl Drop for PageTables<'_> {
    fn drop(&mut self) {
        for &pfn in &self.kernel_tables {
            let _ = self.quicklists.quicklist_free_page(Level::Pud.index(), None, pfn);
        }
    }
}

/// One address space; see [`PageTables`]. Dropping it tears every table
/// down (what `exit` does).
pub struct PageTable<'t> {
    tables: &'t PageTables<'t>,
    pgd: PageIdx,
    nr_tables: u64,
    nr_mapped: u64,
}

impl PageTable<'_> {
    /// Maps the 4 KiB page at `va` to `pfn`, allocating missing tables.
    ///
    /// # Errors
    /// [`MapError::NotPageAligned`], [`MapError::NotUserAddress`],
    /// [`MapError::PfnTooLarge`], [`MapError::AlreadyMapped`],
    /// [`MapError::Table`].
    pub fn map(&mut self, va: u64, pfn: Pfn) -> Result<(), MapError> {
        check_user_address(va)?;
        if pfn.0 > MAX_ENTRY_PFN {
            return Err(MapError::PfnTooLarge(pfn));
        }
        let t = self.tables;
        let mut table = self.pgd;
        for (level, child_level) in [(Level::Pgd, Level::Pud), (Level::Pud, Level::Pmd), (Level::Pmd, Level::Pte)] {
            let i = level.entry_index(va);
            table = match t.entry_target(t.entry(table, i)) {
                Some(child) => child,
                None => {
                    let child = t.alloc_table(child_level)?;
                    t.set_entry(table, i, (t.alloc.idx_to_pfn(child).0 << PAGE_SHIFT) | PRESENT);
                    t.used(table).fetch_add(1, Relaxed);
                    self.nr_tables += 1;
                    child
                }
            };
        }
        let i = Level::Pte.entry_index(va);
        let old = t.entry(table, i);
        if old & PRESENT != 0 {
            return Err(MapError::AlreadyMapped { va, pfn: Pfn(old >> PAGE_SHIFT) });
        }
        t.set_entry(table, i, (pfn.0 << PAGE_SHIFT) | PRESENT);
        t.used(table).fetch_add(1, Relaxed);
        self.nr_mapped += 1;
        Ok(())
    }

    /// Unmaps `va` and returns the PFN it mapped; tables left empty go back
    /// to their quicklists.
    ///
    /// # Errors
    /// [`MapError::NotPageAligned`], [`MapError::NotUserAddress`],
    /// [`MapError::NotMapped`].
    pub fn unmap(&mut self, va: u64) -> Result<Pfn, MapError> {
        check_user_address(va)?;
        let t = self.tables;
        // The walk down: (table, entry index) per level.
        let mut path = [(self.pgd, 0usize); 4];
        let mut table = self.pgd;
        for level in Level::ALL {
            let i = level.entry_index(va);
            path[level.index()] = (table, i);
            if level == Level::Pte {
                break;
            }
            table = t.entry_target(t.entry(table, i)).ok_or(MapError::NotMapped(va))?;
        }
        let (pte_table, i) = path[Level::Pte.index()];
        let old = t.entry(pte_table, i);
        if old & PRESENT == 0 {
            return Err(MapError::NotMapped(va));
        }
        t.set_entry(pte_table, i, 0);
        t.used(pte_table).fetch_sub(1, Relaxed);
        self.nr_mapped -= 1;
        // Walk back up, freeing tables that just became empty.
        for level in [Level::Pte, Level::Pmd, Level::Pud] {
            let (table, _) = path[level.index()];
            if t.used(table).load(Relaxed) != 0 {
                break;
            }
            let (parent, parent_i) = path[level.index() - 1];
            t.set_entry(parent, parent_i, 0);
            t.used(parent).fetch_sub(1, Relaxed);
            t.free_table(level, table);
            self.nr_tables -= 1;
        }
        Ok(Pfn(old >> PAGE_SHIFT))
    }

    /// The PFN `va` maps to (any offset inside the page), or `None`.
    pub fn translate(&self, va: u64) -> Option<Pfn> {
        if va >= 1 << 48 {
            return None;
        }
        let t = self.tables;
        let mut table = self.pgd;
        for level in [Level::Pgd, Level::Pud, Level::Pmd] {
            table = t.entry_target(t.entry(table, level.entry_index(va)))?;
        }
        let entry = t.entry(table, Level::Pte.entry_index(va));
        (entry & PRESENT != 0).then_some(Pfn(entry >> PAGE_SHIFT))
    }

    /// Pages mapped.
    pub fn nr_mapped(&self) -> u64 {
        self.nr_mapped
    }

    /// Table pages held, the pgd included.
    pub fn nr_tables(&self) -> u64 {
        self.nr_tables
    }

    /// Unmaps everything and frees every table but the pgd; returns the
    /// pages that were mapped, in address order.
    pub fn clear(&mut self) -> Vec<Pfn> {
        let mut unmapped = Vec::new();
        for i in 0..PTRS_PER_TABLE / 2 {
            if let Some(pud) = self.take_entry(self.pgd, i) {
                self.clear_table(Level::Pud, pud, &mut unmapped);
            }
        }
        self.nr_mapped = 0;
        unmapped
    }

    /// Clears entry `i` of `table`, returning the table it pointed at.
    fn take_entry(&mut self, table: PageIdx, i: usize) -> Option<PageIdx> {
        let t = self.tables;
        let child = t.entry_target(t.entry(table, i))?;
        t.set_entry(table, i, 0);
        t.used(table).fetch_sub(1, Relaxed);
        Some(child)
    }

    fn clear_table(&mut self, level: Level, table: PageIdx, unmapped: &mut Vec<Pfn>) {
        let t = self.tables;
        for i in 0..PTRS_PER_TABLE {
            if t.used(table).load(Relaxed) == 0 {
                break;
            }
            let entry = t.entry(table, i);
            if entry & PRESENT == 0 {
                continue;
            }
            if level == Level::Pte {
                t.set_entry(table, i, 0);
                t.used(table).fetch_sub(1, Relaxed);
                unmapped.push(Pfn(entry >> PAGE_SHIFT));
            } else if let Some(child) = self.take_entry(table, i) {
                let child_level = Level::ALL[level.index() + 1];
                self.clear_table(child_level, child, unmapped);
            }
        }
        t.free_table(level, table);
        self.nr_tables -= 1;
    }
}

impl Drop for PageTable<'_> {
    fn drop(&mut self) {
        self.clear();
        self.tables.free_table(Level::Pgd, self.pgd);
    }
}

fn check_user_address(va: u64) -> Result<(), MapError> {
    if va % (1 << PAGE_SHIFT) != 0 {
        return Err(MapError::NotPageAligned(va));
    }
    if va >= USER_VA_END {
        return Err(MapError::NotUserAddress(va));
    }
    Ok(())
}
