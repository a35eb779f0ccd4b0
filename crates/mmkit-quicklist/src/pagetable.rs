//! A four-level radix page table built on quicklists (the page tables of
//! the Linux quicklist series, on x86-64's layout).
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
//! An address space holds its table pages as [`PageBlock`]s, found by PFN
//! (what an entry stores) in a map of its own, and reads and writes the
//! entries in place through the allocator's safe byte access.

use crate::quicklist::{PageFn, QuicklistError, Quicklists};
use mmkit::Blocks;
use mmkit::{Gfp, PageAllocator, PageBlock, Pfn};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

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

impl std::error::Error for MapError {}

/// Table pages allocated at one level, and how long the allocations took
/// when a clock is set (the per-level table of the quicklist series).
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

/// Where table pages come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableSource {
    /// Cached on one quicklist per level (what the series adds).
    Quicklists,
    /// Allocated zeroed and freed each time, through the per-CPU lists:
    /// what quicklists replace, kept to measure them against it.
    Allocator,
}

/// What address spaces share; see the module doc.
///
/// ```
/// use mmkit_quicklist::pagetable::{Level, PageTables, TableSource};
/// use mmkit::{Backing, HugePages, MemoryMapBuilder, Gfp};
/// use std::sync::Arc;
///
/// let mm = Arc::new(MemoryMapBuilder::with_memory(32 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap());
/// let tables = PageTables::new(Arc::clone(&mm), TableSource::Quicklists).unwrap();
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
pub struct PageTables {
    quicklists: Quicklists,
    /// Entries `256..512` of every pgd.
    kernel_half: Box<[u64]>,
    kernel_tables: Vec<PageBlock>,
    levels: [LevelCounters; 4],
    clock: Option<fn() -> u64>,
}

impl PageTables {
    /// Page tables over `alloc`'s memory, with table pages from `source`.
    ///
    /// # Errors
    /// [`QuicklistError::NoRealMemory`]; [`QuicklistError::Alloc`] if the
    /// kernel tables cannot be allocated.
    pub fn new(alloc: Arc<PageAllocator>, source: TableSource) -> Result<Self, QuicklistError> {
        let lists = Level::ALL.len();
        let quicklists = match source {
            TableSource::Quicklists => Quicklists::new(alloc, lists)?,
            TableSource::Allocator => Quicklists::uncached(alloc, lists)?,
        };
        let mut tables = Self {
            quicklists,
            kernel_half: vec![0; PTRS_PER_TABLE / 2].into_boxed_slice(),
            kernel_tables: Vec::new(),
            levels: [LevelCounters::new(), LevelCounters::new(), LevelCounters::new(), LevelCounters::new()],
            clock: None,
        };
        for slot in 0..KERNEL_TABLES {
            let block = tables.quicklists.quicklist_alloc_block(Level::Pud.index(), Gfp::KERNEL, None)?;
            tables.kernel_half[slot] = (block.pfn().0 << PAGE_SHIFT) | PRESENT;
            tables.kernel_tables.push(block);
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
        let pgd_pfn = pgd.pfn();
        let mut tables = TableMap::default();
        tables.insert(pgd_pfn, Table { block: pgd, used: 0 });
        Ok(PageTable { shared: self, pgd: pgd_pfn, tables, nr_mapped: 0 })
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
    pub fn quicklists(&self) -> &Quicklists {
        &self.quicklists
    }

    fn alloc_table(&self, level: Level) -> Result<PageBlock, MapError> {
        let kernel_half = &self.kernel_half;
        let pgd_ctor = move |page: &mut [u8]| {
            for (i, entry) in kernel_half.iter().enumerate() {
                let at = (PTRS_PER_TABLE / 2 + i) * 8;
                page[at..at + 8].copy_from_slice(&entry.to_ne_bytes());
            }
        };
        let ctor: Option<PageFn<'_>> = if level == Level::Pgd { Some(&pgd_ctor) } else { None };
        let start = self.clock.map(|now| now());
        let block = self.quicklists.quicklist_alloc_block(level.index(), Gfp::KERNEL, ctor).map_err(MapError::Table)?;
        let c = &self.levels[level.index()];
        c.count.fetch_add(1, Relaxed);
        if let (Some(start), Some(now)) = (start, self.clock) {
            let took = now().saturating_sub(start);
            c.total_ns.fetch_add(took, Relaxed);
            c.min_ns.fetch_min(took, Relaxed);
            c.max_ns.fetch_max(took, Relaxed);
        }
        Ok(block)
    }

    /// Gives back a table whose user entries are all clear again. Its
    /// count of used entries, which every entry write goes through, is zero,
    /// so the table is in its list's state by construction and the free
    /// skips the scan of the page that untrusted frees pay (debug builds
    /// still scan, and the tests check the count against a model).
    fn free_table(&self, level: Level, block: PageBlock) {
        self.levels[level.index()].freed.fetch_add(1, Relaxed);
        let result = self.quicklists.free_block_in_state(level.index(), block);
        debug_assert!(result.is_ok(), "a table left its state: {result:?}");
    }
}

impl Drop for PageTables {
    fn drop(&mut self) {
        for block in std::mem::take(&mut self.kernel_tables) {
            let _ = self.quicklists.quicklist_free_block(Level::Pud.index(), None, block);
        }
    }
}

/// One table page of an address space and its count of present entries.
struct Table {
    block: PageBlock,
    used: u16,
}

/// Hashes a PFN by one multiplication (Fibonacci hashing): the keys are
/// page numbers, not attacker-chosen strings.
#[derive(Default)]
struct PfnHasher(u64);

impl Hasher for PfnHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// An address space's table pages by PFN.
type TableMap = HashMap<Pfn, Table, BuildHasherDefault<PfnHasher>>;

/// One address space; see [`PageTables`]. Dropping it tears every table
/// down (what `exit` does).
pub struct PageTable<'t> {
    shared: &'t PageTables,
    pgd: Pfn,
    tables: TableMap,
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
        let mut table = self.pgd;
        for (level, child_level) in [(Level::Pgd, Level::Pud), (Level::Pud, Level::Pmd), (Level::Pmd, Level::Pte)] {
            let i = level.entry_index(va);
            table = match entry_target(self.entry(table, i)) {
                Some(child) => child,
                None => {
                    let block = self.shared.alloc_table(child_level)?;
                    let child = block.pfn();
                    self.tables.insert(child, Table { block, used: 0 });
                    self.set_entry(table, i, (child.0 << PAGE_SHIFT) | PRESENT);
                    self.add_used(table, 1);
                    child
                }
            };
        }
        let i = Level::Pte.entry_index(va);
        let old = self.entry(table, i);
        if old & PRESENT != 0 {
            return Err(MapError::AlreadyMapped { va, pfn: Pfn(old >> PAGE_SHIFT) });
        }
        self.set_entry(table, i, (pfn.0 << PAGE_SHIFT) | PRESENT);
        self.add_used(table, 1);
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
        // The walk down: (table, entry index) per level.
        let mut path = [(self.pgd, 0usize); 4];
        let mut table = self.pgd;
        for level in Level::ALL {
            let i = level.entry_index(va);
            path[level.index()] = (table, i);
            if level == Level::Pte {
                break;
            }
            table = entry_target(self.entry(table, i)).ok_or(MapError::NotMapped(va))?;
        }
        let (pte_table, i) = path[Level::Pte.index()];
        let old = self.entry(pte_table, i);
        if old & PRESENT == 0 {
            return Err(MapError::NotMapped(va));
        }
        self.set_entry(pte_table, i, 0);
        self.add_used(pte_table, -1);
        self.nr_mapped -= 1;
        // Walk back up, freeing tables that just became empty.
        for level in [Level::Pte, Level::Pmd, Level::Pud] {
            let (table, _) = path[level.index()];
            if self.tables.get(&table).is_some_and(|t| t.used != 0) {
                break;
            }
            let (parent, parent_i) = path[level.index() - 1];
            self.set_entry(parent, parent_i, 0);
            self.add_used(parent, -1);
            self.free_table(level, table);
        }
        Ok(Pfn(old >> PAGE_SHIFT))
    }

    /// The PFN `va` maps to (any offset inside the page), or `None`.
    pub fn translate(&self, va: u64) -> Option<Pfn> {
        if va >= 1 << 48 {
            return None;
        }
        let mut table = self.pgd;
        for level in [Level::Pgd, Level::Pud, Level::Pmd] {
            table = entry_target(self.entry(table, level.entry_index(va)))?;
        }
        let entry = self.entry(table, Level::Pte.entry_index(va));
        (entry & PRESENT != 0).then_some(Pfn(entry >> PAGE_SHIFT))
    }

    /// Pages mapped.
    pub fn nr_mapped(&self) -> u64 {
        self.nr_mapped
    }

    /// Table pages held, the pgd included.
    pub fn nr_tables(&self) -> u64 {
        self.tables.len() as u64
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

    /// Entry `i` of this space's table `table` (0 for a table it does not
    /// hold, such as a kernel table).
    fn entry(&self, table: Pfn, i: usize) -> u64 {
        let Some(t) = self.tables.get(&table) else { return 0 };
        let Some(bytes) = Blocks::new(self.shared.quicklists.allocator()).block_bytes(&t.block) else { return 0 };
        bytes.get(i * 8..i * 8 + 8).and_then(|b| b.try_into().ok()).map_or(0, u64::from_ne_bytes)
    }

    /// Sets entry `i` of table `table`.
    fn set_entry(&mut self, table: Pfn, i: usize, value: u64) {
        // The shared tables outlive this borrow of `self`.
        let shared: &PageTables = self.shared;
        let alloc = shared.quicklists.allocator();
        let Some(t) = self.tables.get_mut(&table) else { return };
        if let Some(word) = Blocks::new(alloc).block_bytes_mut(&mut t.block).and_then(|b| b.get_mut(i * 8..i * 8 + 8)) {
            word.copy_from_slice(&value.to_ne_bytes());
        }
    }

    /// Adds `delta` to the present-entry count of `table`.
    fn add_used(&mut self, table: Pfn, delta: i16) {
        if let Some(t) = self.tables.get_mut(&table) {
            t.used = t.used.wrapping_add_signed(delta);
        }
    }

    fn free_table(&mut self, level: Level, table: Pfn) {
        if let Some(t) = self.tables.remove(&table) {
            self.shared.free_table(level, t.block);
        }
    }

    /// Clears entry `i` of `table`, returning the table it pointed at.
    fn take_entry(&mut self, table: Pfn, i: usize) -> Option<Pfn> {
        let child = entry_target(self.entry(table, i))?;
        self.set_entry(table, i, 0);
        self.add_used(table, -1);
        Some(child)
    }

    fn clear_table(&mut self, level: Level, table: Pfn, unmapped: &mut Vec<Pfn>) {
        for i in 0..PTRS_PER_TABLE {
            if self.tables.get(&table).is_none_or(|t| t.used == 0) {
                break;
            }
            let entry = self.entry(table, i);
            if entry & PRESENT == 0 {
                continue;
            }
            if level == Level::Pte {
                self.set_entry(table, i, 0);
                self.add_used(table, -1);
                unmapped.push(Pfn(entry >> PAGE_SHIFT));
            } else if let Some(child) = self.take_entry(table, i) {
                let child_level = Level::ALL[level.index() + 1];
                self.clear_table(child_level, child, unmapped);
            }
        }
        self.free_table(level, table);
    }
}

impl Drop for PageTable<'_> {
    fn drop(&mut self) {
        self.clear();
        let pgd = self.pgd;
        self.free_table(Level::Pgd, pgd);
    }
}

/// The table or page a present entry points at.
fn entry_target(entry: u64) -> Option<Pfn> {
    (entry & PRESENT != 0).then_some(Pfn(entry >> PAGE_SHIFT))
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
