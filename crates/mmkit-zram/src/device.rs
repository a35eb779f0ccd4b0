//! The device: `disksize` bytes of 4 KiB slots over one zsmalloc pool, with
//! byte-granular reads and writes, discard, write-zeroes and the free
//! notification of swap-like users (`drivers/block/zram/zram_drv.c`).
//!
//! Owns the write path in the kernel's order — same-filled detection,
//! compression, huge pages stored raw, `mem_limit`, then the new contents
//! installed under the slot lock and the old ones freed — and the read path.
//! There is no device-wide lock on the data path: each page's slot lock
//! orders the operations on that page, and a partial-page write holds it
//! across its read-modify-write so that writes to other bytes of the page
//! are never lost. Statistics are `stats`' to print; the counters and the
//! backing file are parts the device holds (`counters`, `backing`).

use crate::backing::{BackingDev, Writeback};
use crate::config::ZramConfig;
use crate::counters::Counters;
use crate::slot::{flags, SlotGuard};
use crate::table::{SlotTable, CHUNK_PAGES};
use crate::ZramError;
use crate::PAGE_SIZE;
use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder, PageAllocator};
use mmkit::{Cpus, Tuning};
use mmkit_compress::{fill_same, same_filled, Algorithm, Compressor, Dictionary};
use mmkit_zsmalloc::{RawKey, ZsConfig, ZsPool};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Instant;

/// zsmalloc's flags for zram's objects (Linux's `GFP_NOIO | __GFP_NOWARN |
/// __GFP_HIGHMEM | __GFP_MOVABLE` in the write fast path: no reclaim that
/// could recurse into block I/O).
const ZRAM_GFP: Gfp = Gfp::NOIO.union(Gfp::NOWARN).union(Gfp::HIGHMEM).union(Gfp::MOVABLE);

/// What a slot will hold after a write.
enum Content {
    Same(u64),
    Stored { handle: u64, size: usize, huge: bool },
}

/// An initialised zram device, a composition of parts that know nothing of
/// it: the slot table (`table`, `slot`), the store (the zsmalloc pool and
/// its key, the compressors), the counters (`counters`) and the backing
/// file of writeback (`backing`). The modules of the operations over
/// several parts (`stats`, `writeback`, `recompress`, `release`) take the
/// device; no part imports them or the device. The public
/// [`Zram`](crate::Zram) holds one while initialised (`lifecycle`).
pub(crate) struct Device {
    pub(crate) pool: Arc<ZsPool>,
    /// The right to hold the pool's objects as raw words: the slot table
    /// keeps one word per page (the zsmalloc handle module argues why a
    /// word checked under this key cannot reach an object zram does not
    /// own). Only the device holds it, so every raw-held object of the
    /// pool is one of its slots'.
    pub(crate) key: RawKey,
    pub(crate) slots: SlotTable,
    pub(crate) config: ZramConfig,
    /// The compressor of each priority: 0 the primary, then the secondaries.
    pub(crate) comps: Vec<Compressor>,
    mem_limit: AtomicU64,
    pub(crate) huge_size: usize,
    started: Instant,
    pub(crate) counters: Counters,
    pub(crate) wb: Writeback,
}

impl Device {
    /// A device of `config.disksize` bytes over a new zsmalloc pool on `mm`.
    ///
    /// # Errors
    /// [`ZramError::Pool`] when the pool cannot be made (no real memory);
    /// [`ZramError::Invalid`] for a zero size or a bad chain size;
    /// [`ZramError::Backing`] when `backing_dev` cannot be opened or holds
    /// less than one page.
    pub(crate) fn new(mm: Arc<PageAllocator>, config: ZramConfig) -> Result<Self, ZramError> {
        if config.disksize == 0 {
            return Err(ZramError::Invalid("disksize: the device needs at least one page".into()));
        }
        if config.recomp_algorithms.len() > crate::config::MAX_RECOMP_ALGORITHMS {
            return Err(ZramError::Invalid("recomp_algorithm: at most 3 secondary algorithms".into()));
        }
        let backing = config.backing_dev.as_deref().map(BackingDev::open).transpose()?;
        let zs_config = ZsConfig { chain_size: config.chain_size, ..ZsConfig::default() };
        let nr = usize::try_from(config.disksize.div_ceil(PAGE_SIZE as u64))
            .map_err(|_| ZramError::Invalid(format!("disksize {}: too many pages", config.disksize)))?;
        let slots = SlotTable::new(nr)?;
        let (pool, key) = ZsPool::with_raw_key("zram", mm, zs_config).map_err(ZramError::Pool)?;
        let pool = Arc::new(pool);
        let huge_size = pool.zs_huge_class_size();
        Ok(Self {
            pool,
            key,
            slots,
            comps: crate::params::compressors(&config)?,
            mem_limit: AtomicU64::new(config.mem_limit),
            config: ZramConfig { disksize: nr as u64 * PAGE_SIZE as u64, ..config },
            huge_size,
            started: Instant::now(),
            counters: Counters::default(),
            wb: Writeback { backing, ..Writeback::default() },
        })
    }

    /// A device on a page allocator of its own, with real memory enough
    /// for every page stored raw, but never more than `mem_limit` or the
    /// machine's memory: the allocator's page map costs 16 bytes per page
    /// it covers, so sizing it to `disksize` made a 10 TiB device ask for
    /// 50 GiB before holding anything. The system commits pages only as
    /// they are used.
    ///
    /// # Errors
    /// As [`new`](Self::new); [`ZramError::Pool`] when the memory cannot be
    /// mapped.
    pub(crate) fn with_own_memory(config: ZramConfig) -> Result<Self, ZramError> {
        let mut raw = config.disksize.saturating_add(config.disksize / 4);
        if config.mem_limit != 0 {
            raw = raw.min(config.mem_limit);
        }
        let mut bytes = raw.saturating_add(32 << 20).next_multiple_of(2 << 20);
        // Never past the machine, which `build` refuses for real memory.
        if let Some(machine) = crate::config::machine_memory() {
            bytes = bytes.min(machine / (2 << 20) * (2 << 20));
        }
        let mm = MemoryMapBuilder::with_memory(bytes)
            .backing(Backing::RealMemory(HugePages::None))
            .build()
            .map_err(|e| ZramError::Invalid(format!("no memory for the device: {e}")))?;
        Self::new(Arc::new(mm), config)
    }

    /// The device size in bytes.
    pub fn disksize(&self) -> u64 {
        self.config.disksize
    }

    /// The primary compression algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.config.algorithm
    }

    /// The secondary algorithms, by priority.
    pub fn recomp_algorithms(&self) -> &[Algorithm] {
        &self.config.recomp_algorithms
    }

    /// The memory limit in bytes (0: none).
    pub fn mem_limit(&self) -> u64 {
        self.mem_limit.load(Relaxed)
    }

    /// Sets the memory limit (0: none); pages stored beyond it stay.
    ///
    /// # Errors
    /// [`ZramError::Invalid`] for a limit below one page or above the
    /// machine's memory (no limit can be reached there; the kernel takes
    /// any number, which hides typing errors); nothing is changed.
    pub fn set_mem_limit(&self, bytes: u64) -> Result<(), ZramError> {
        crate::config::check_mem_limit(bytes)?;
        self.mem_limit.store(bytes, Relaxed);
        Ok(())
    }

    fn now(&self) -> u32 {
        self.started.elapsed().as_secs() as u32
    }

    /// `[offset, offset + len)` checked against the device.
    pub(crate) fn check_range(&self, offset: u64, len: usize) -> Result<(), ZramError> {
        self.check_range_u64(offset, len as u64)
    }

    /// As [`check_range`](Self::check_range), for lengths that need not fit
    /// in memory (discard, write-zeroes, block status).
    pub(crate) fn check_range_u64(&self, offset: u64, len: u64) -> Result<(), ZramError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.config.disksize => Ok(()),
            _ => {
                self.counters.invalid_io.fetch_add(1, Relaxed);
                Err(ZramError::OutOfRange { offset, len, size: self.config.disksize })
            }
        }
    }

    /// Reads `buf.len()` bytes at `offset`. Never-written bytes read as 0.
    ///
    /// # Errors
    /// [`ZramError::OutOfRange`]; [`ZramError::Corrupt`] if a page does not
    /// decompress (counted in `failed_reads`).
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ZramError> {
        self.check_range(offset, buf.len())?;
        let mut done = 0;
        while done < buf.len() {
            let at = offset + done as u64;
            let (index, start) = ((at / PAGE_SIZE as u64) as usize, (at % PAGE_SIZE as u64) as usize);
            let n = (PAGE_SIZE - start).min(buf.len() - done);
            let Some(slot) = self.slots.get(index) else {
                // Its chunk was never written: a hole.
                buf[done..done + n].fill(0);
                done += n;
                continue;
            };
            let slot = slot.lock();
            if n == PAGE_SIZE {
                self.read_locked(index, &slot, &mut buf[done..done + n])?;
            } else {
                // Only partial pages need the bounce page (zeroing 4 KiB
                // per whole-page read was 9 % of a read's time).
                let mut page = [0u8; PAGE_SIZE];
                self.read_locked(index, &slot, &mut page)?;
                buf[done..done + n].copy_from_slice(&page[start..start + n]);
            }
            done += n;
        }
        Ok(())
    }

    /// Writes `data` at `offset`; partial pages are read, patched and
    /// written whole, under their slot lock.
    ///
    /// # Errors
    /// [`ZramError::OutOfRange`] (nothing written); [`ZramError::NoSpace`]
    /// at `mem_limit` or when the page allocator has no page (the pages
    /// before it were written, this one and those after were not);
    /// [`ZramError::Corrupt`] if a partial page's old contents do not
    /// decompress.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), ZramError> {
        self.check_range(offset, data.len())?;
        let mut done = 0;
        while done < data.len() {
            let at = offset + done as u64;
            let (index, start) = ((at / PAGE_SIZE as u64) as usize, (at % PAGE_SIZE as u64) as usize);
            let n = (PAGE_SIZE - start).min(data.len() - done);
            // A new chunk of the slot table counts against mem_limit.
            let slot = match self.slots.get(index).map_or_else(|| self.new_chunk_slot(index), Ok) {
                Ok(slot) => slot.lock(),
                Err(e) => {
                    self.counters.failed_writes.fetch_add(1, Relaxed);
                    return Err(e);
                }
            };
            let result = if n == PAGE_SIZE {
                self.write_locked(&slot, &data[done..done + n])
            } else {
                let mut page = [0u8; PAGE_SIZE];
                self.read_locked(index, &slot, &mut page).and_then(|()| {
                    page[start..start + n].copy_from_slice(&data[done..done + n]);
                    self.write_locked(&slot, &page)
                })
            };
            drop(slot);
            if let Err(e) = result {
                self.counters.failed_writes.fetch_add(1, Relaxed);
                return Err(e);
            }
            done += n;
        }
        Ok(())
    }

    /// Frees the whole pages inside `[offset, offset + len)`; partial pages
    /// are left as they are, as zram's discard does ("our intent with a
    /// discard request is to save memory"). Counted in `notify_free`.
    ///
    /// # Errors
    /// [`ZramError::OutOfRange`].
    pub fn discard(&self, offset: u64, len: u64) -> Result<(), ZramError> {
        self.check_range_u64(offset, len)?;
        let first = offset.div_ceil(PAGE_SIZE as u64);
        let end = (offset + len) / PAGE_SIZE as u64;
        self.free_pages(first as usize, end.max(first) as usize);
        self.counters.notify_free.fetch_add(end.saturating_sub(first), Relaxed);
        Ok(())
    }

    /// Makes `[offset, offset + len)` read as zeroes: whole pages are freed,
    /// the partial pages at the ends are written with zeroes.
    ///
    /// # Errors
    /// As [`write`](Self::write).
    pub fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), ZramError> {
        self.check_range_u64(offset, len)?;
        let end = offset + len;
        let first_whole = offset.div_ceil(PAGE_SIZE as u64) * PAGE_SIZE as u64;
        let last_whole = end / PAGE_SIZE as u64 * PAGE_SIZE as u64;
        if first_whole >= last_whole {
            return self.write(offset, &vec![0; len as usize]);
        }
        self.write(offset, &vec![0; (first_whole - offset) as usize])?;
        self.free_pages((first_whole / PAGE_SIZE as u64) as usize, (last_whole / PAGE_SIZE as u64) as usize);
        self.write(last_whole, &vec![0; (end - last_whole) as usize])
    }

    /// Marks every stored page idle (`echo all > idle`).
    pub fn idle_all(&self) {
        self.mark_idle(|_| true);
    }

    /// Marks idle the pages not accessed for `seconds`, and not idle the
    /// others (`echo N > idle`).
    pub fn idle_older_than(&self, seconds: u32) {
        let now = self.now();
        self.mark_idle(|ac_time| now.saturating_sub(ac_time) >= seconds);
    }

    /// As Linux's `mark_idle`: same-filled and written-back pages hold no
    /// memory to reclaim and are left out.
    fn mark_idle(&self, is_idle: impl Fn(u32) -> bool) {
        for (_, slot) in self.slots.iter() {
            let guard = slot.lock();
            if !guard.allocated() || guard.has(flags::SAME | flags::WB) {
                continue;
            }
            if is_idle(guard.ac_time()) {
                guard.update_flags(flags::IDLE, 0);
            } else {
                guard.update_flags(0, flags::IDLE);
            }
        }
    }

    /// Compacts the pool (`echo 1 > compact`); returns the pages freed.
    /// Then gives the allocator's free memory back to the OS
    /// ([`give_back_memory`](Self::give_back_memory)), so that a compact
    /// after a discard lowers the process's resident size.
    pub fn compact(&self) -> u64 {
        let freed = self.pool.zs_compact();
        self.give_back_memory();
        freed
    }

    /// Drains the allocator's per-CPU lists and runs a free page reporting
    /// pass ([`Tuning::report_free_pages`]): free blocks of 2 MiB
    /// and more go back to the OS. `compact` and `reset` call it; with a
    /// map shared with others, it gives back their free memory too.
    pub fn give_back_memory(&self) -> mmkit::ReportSummary {
        let mm = self.pool.allocator();
        Cpus::new(mm).drain_all_pages();
        Tuning::new(mm).report_free_pages()
    }

    // ---- slot operations, under the slot's lock ----

    /// A read by the device's user: the page's contents, and it is no
    /// longer idle.
    fn read_locked(&self, index: usize, slot: &SlotGuard<'_>, out: &mut [u8]) -> Result<(), ZramError> {
        slot.touch(self.now());
        slot.update_flags(0, flags::IDLE);
        self.load_locked(index, slot, out)
    }

    /// The page's contents, without counting an access (post-processing
    /// reads pages this way).
    pub(crate) fn load_locked(&self, index: usize, slot: &SlotGuard<'_>, out: &mut [u8]) -> Result<(), ZramError> {
        if slot.has(flags::SAME) {
            fill_same(out, slot.handle());
            return Ok(());
        }
        if slot.has(flags::WB) {
            let backing = self.wb.backing.as_ref().ok_or(ZramError::NoBackingDev)?;
            self.wb.bd_reads.fetch_add(1, Relaxed);
            return backing.read_block(slot.handle(), out).inspect_err(|_| {
                self.counters.failed_reads.fetch_add(1, Relaxed);
            });
        }
        let handle = slot.handle();
        if handle == 0 {
            out.fill(0);
            return Ok(());
        }
        let corrupt = |_| {
            self.counters.failed_reads.fetch_add(1, Relaxed);
            ZramError::Corrupt { index }
        };
        if slot.has(flags::HUGE) {
            self.pool.zs_obj_read_raw(&self.key, handle, out).map_err(corrupt)?;
            return Ok(());
        }
        let algorithm = &self.comps[slot.priority()];
        // The bounce buffer for objects that span two pages is the
        // thread's, not a fresh (zeroed) one per read.
        let ok = BOUNCE
            .with(|bounce| {
                let mut bounce = bounce.borrow_mut();
                self.pool
                    .zs_obj_read_with_raw(&self.key, handle, &mut bounce[..], |bytes| algorithm.decompress(bytes, out))
            })
            .map_err(corrupt)?;
        if ok {
            Ok(())
        } else {
            self.counters.failed_reads.fetch_add(1, Relaxed);
            Err(ZramError::Corrupt { index })
        }
    }

    fn write_locked(&self, slot: &SlotGuard<'_>, page: &[u8]) -> Result<(), ZramError> {
        // An overwrite hands the old object to the pool with the new one
        // (`zs_replace`): both usually share a class, and then one hold of
        // its lock serves the store and the free.
        let replacing = self.stored_object(slot);
        let (content, replaced) = self.store(page, replacing)?;
        let old = self.slot_free_extract(slot).filter(|_| !replaced);
        match content {
            Content::Same(word) => {
                slot.set_handle(word);
                slot.update_flags(flags::SAME, 0);
                self.counters.hot().same_pages.fetch_add(1, Relaxed);
            }
            Content::Stored { handle, size, huge } => {
                slot.set_handle(handle);
                slot.set_size(size);
                if huge {
                    slot.update_flags(flags::HUGE, 0);
                    self.counters.hot().huge_pages.fetch_add(1, Relaxed);
                    self.counters.hot().huge_pages_since.fetch_add(1, Relaxed);
                }
                self.counters.hot().compr_data_size.fetch_add(size as i64, Relaxed);
            }
        }
        slot.touch(self.now());
        self.counters.hot().pages_stored.fetch_add(1, Relaxed);
        if let Some(old) = old {
            // Ours: the old contents go once the new are in place.
            let _ = self.pool.zs_free_raw(&self.key, old);
        }
        self.counters.note_memory(self.mem_used());
        Ok(())
    }

    /// The new contents of a page, allocated and written (no slot state
    /// touched yet): the same-filled check, then compression, then raw
    /// storage for a page that compresses to the huge size or more.
    /// With `replacing`, the slot's current object is freed as the new one
    /// is stored, and the flag returned says so (false: the caller frees
    /// it, as for same-filled contents).
    fn store(&self, page: &[u8], replacing: Option<u64>) -> Result<(Content, bool), ZramError> {
        if let Some(word) = same_filled(page) {
            return Ok((Content::Same(word), false));
        }
        let huge_size = self.huge_size;
        let compressed = self.comps[0]
            .compress(page, |bytes| (bytes.len() < huge_size).then(|| self.alloc_object_replacing(bytes, replacing)));
        let (stored, huge) = match compressed.flatten() {
            Some(stored) => (stored, false),
            None => (self.alloc_object_replacing(page, replacing), true),
        };
        stored.map(|(handle, size, replaced)| (Content::Stored { handle, size, huge }, replaced))
    }

    /// The pool object slot `slot` holds, if any (not same-filled, not
    /// written back).
    fn stored_object(&self, slot: &SlotGuard<'_>) -> Option<u64> {
        (slot.allocated() && !slot.has(flags::SAME | flags::WB) && slot.handle() != 0).then(|| slot.handle())
    }

    /// [`alloc_object`](Self::alloc_object), freeing `replacing` with the
    /// same hold of the class lock when there is one; the flag says whether
    /// it was freed. Under a `mem_limit` the new object is allocated and
    /// checked first and the old one left to the caller, as Linux's
    /// `zram_write_page` does: a store the limit refuses must leave the
    /// old contents in place.
    fn alloc_object_replacing(&self, bytes: &[u8], replacing: Option<u64>) -> Result<(u64, usize, bool), ZramError> {
        let Some(old) = replacing.filter(|_| self.mem_limit() == 0) else {
            return self.alloc_object(bytes).map(|(handle, size)| (handle, size, false));
        };
        // The old word came from the slot, which holds it under the slot
        // lock: the pool can only refuse it on a corrupted table, and then
        // stores nothing.
        let handle = self.pool.zs_replace_raw(&self.key, old, bytes, ZRAM_GFP, 0).map_err(|_| ZramError::NoSpace)?;
        Ok((handle, bytes.len(), true))
    }

    /// A pool object holding `bytes`. Under a `mem_limit`, an object whose
    /// allocation took the device past the limit (a new zspage) is freed
    /// again and the store is [`ZramError::NoSpace`] (Linux's
    /// `zram_write_page`: `zs_free` when `alloced_pages > limit_pages`), so
    /// a refused store leaves nothing behind.
    pub(crate) fn alloc_object(&self, bytes: &[u8]) -> Result<(u64, usize), ZramError> {
        self.check_mem_limit()?;
        let handle = self.pool.zs_malloc_copy_raw(&self.key, bytes, ZRAM_GFP, 0).map_err(|_| ZramError::NoSpace)?;
        if self.check_room(0).is_err() {
            let _ = self.pool.zs_free_raw(&self.key, handle);
            return Err(ZramError::NoSpace);
        }
        Ok((handle, bytes.len()))
    }

    /// The slot of page `index`, whose chunk of the slot table does not
    /// exist yet: allocated only if the chunk and the largest zspage the
    /// page's object could need fit under `mem_limit` together. Chunks are
    /// freed only with the device, so a chunk allocated for a store the
    /// limit then refused would stay behind.
    #[cold]
    fn new_chunk_slot(&self, index: usize) -> Result<&crate::slot::Slot, ZramError> {
        let largest_zspage = self.config.chain_size as u64 * PAGE_SIZE as u64;
        self.check_room(crate::table::CHUNK_BYTES + largest_zspage)?;
        self.slots.get_or_alloc(index)
    }

    /// [`ZramError::NoSpace`] once the device holds `mem_limit` bytes (the
    /// pool and the slot table, `stats`' `mem_used`).
    fn check_mem_limit(&self) -> Result<(), ZramError> {
        let limit = self.mem_limit();
        if limit != 0 && self.mem_used() >= limit {
            return Err(ZramError::NoSpace);
        }
        Ok(())
    }

    /// [`ZramError::NoSpace`] when `more` bytes on top of what the device
    /// holds would pass `mem_limit`.
    fn check_room(&self, more: u64) -> Result<(), ZramError> {
        let limit = self.mem_limit();
        if limit != 0 && self.mem_used().saturating_add(more) > limit {
            return Err(ZramError::NoSpace);
        }
        Ok(())
    }

    /// Frees pages `first..end`, skipping the chunks never written (a
    /// discard of a whole fresh 1 TiB device touches no slot).
    fn free_pages(&self, first: usize, end: usize) {
        let mut index = first;
        while index < end {
            if self.slots.chunk_exists(index) {
                self.free_slot(index);
                index += 1;
            } else {
                index = (index / CHUNK_PAGES + 1) * CHUNK_PAGES;
            }
        }
    }

    fn free_slot(&self, index: usize) {
        let Some(slot) = self.slots.get(index) else { return };
        let guard = slot.lock();
        let handle = self.slot_free_extract(&guard);
        drop(guard);
        if let Some(handle) = handle {
            let _ = self.pool.zs_free_raw(&self.key, handle);
        }
    }
}

thread_local! {
    /// This thread's copy of objects that span two pages, for reading.
    static BOUNCE: std::cell::RefCell<Box<[u8; PAGE_SIZE]>> = std::cell::RefCell::new(Box::new([0; PAGE_SIZE]));
}

impl Device {
    /// The dictionary of the algorithm of `priority`, if it has one.
    pub(crate) fn dictionary(&self, priority: usize) -> Option<&Dictionary> {
        self.comps.get(priority)?.dictionary()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mmkit::{Backing, HugePages, MemoryMapBuilder};

    #[test]
    fn corrupt_stored_data_is_a_counted_typed_error_that_changes_nothing() {
        let zram = Device::with_own_memory(ZramConfig { disksize: 1 << 20, ..ZramConfig::default() }).unwrap();
        let page: Vec<u8> = (0..PAGE_SIZE).map(|i| (i % 13) as u8).collect();
        zram.write(0, &page).unwrap();
        zram.write(PAGE_SIZE as u64, &page).unwrap();
        let (handle, size) = {
            let slot = zram.slots.get(0).unwrap().lock();
            (slot.handle(), slot.size())
        };
        zram.pool.zs_obj_write_raw(&zram.key, handle, &vec![0xff; size]).unwrap();
        let before = zram.mm_stat();
        let mut back = vec![0; PAGE_SIZE];
        assert_eq!(zram.read(0, &mut back), Err(ZramError::Corrupt { index: 0 }));
        assert_eq!(zram.write(10, b"patch"), Err(ZramError::Corrupt { index: 0 }), "a partial write must read first");
        assert_eq!(zram.io_stat().split_whitespace().take(2).collect::<Vec<_>>(), ["2", "1"]);
        assert_eq!(zram.mm_stat(), before);
        zram.read(PAGE_SIZE as u64, &mut back).unwrap();
        assert_eq!(back, page, "the other page is untouched");
        zram.write(0, &page).unwrap();
        zram.read(0, &mut back).unwrap();
        assert_eq!(back, page, "a whole-page write replaces the corrupt page");
    }

    #[test]
    fn a_notify_that_finds_the_slot_locked_is_a_counted_miss_and_frees_nothing() {
        let mm = Arc::new(
            MemoryMapBuilder::with_memory(16 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap(),
        );
        let zram = Device::new(mm, ZramConfig { disksize: 1 << 20, ..ZramConfig::default() }).unwrap();
        let page: Vec<u8> = (0..PAGE_SIZE).map(|i| (i % 13) as u8).collect();
        zram.write(0, &page).unwrap();
        let held = zram.slots.get(0).unwrap().lock();
        zram.slot_free_notify(0);
        drop(held);
        assert_eq!(zram.counters.miss_free.load(Relaxed), 1);
        assert!(zram.debug_stat().ends_with("       1\n"));
        let mut back = vec![0; PAGE_SIZE];
        zram.read(0, &mut back).unwrap();
        assert_eq!(back, page, "the page is still there");
    }

    #[test]
    fn overwrites_free_every_old_object_whatever_class_it_was_in() {
        let zram = Device::with_own_memory(ZramConfig { disksize: 1 << 20, ..ZramConfig::default() }).unwrap();
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let mut noise = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng as u8
        };
        // Random prefixes of every length: compressed sizes over many
        // classes, incompressible pages (stored raw) and same-filled ones.
        for round in 0..300usize {
            let random = (round * 37) % (PAGE_SIZE + 1);
            let page: Vec<u8> = (0..PAGE_SIZE)
                .map(|i| {
                    if round % 7 == 0 {
                        5
                    } else if i < random {
                        noise()
                    } else {
                        1
                    }
                })
                .collect();
            zram.write(0, &page).unwrap();
            let mut back = vec![0; PAGE_SIZE];
            zram.read(0, &mut back).unwrap();
            assert_eq!(back, page, "round {round}");
            let stored = zram.slots.get(0).unwrap().lock().size() as i64;
            let stats = zram.mm_stat_values();
            assert_eq!(stats.compr_data_size as i64, stored, "round {round}: only the last contents count");
        }
        zram.write(0, &[3; PAGE_SIZE]).unwrap();
        assert_eq!(zram.pool.zs_get_total_pages(), 0, "the last object went, and its zspage with it");
        zram.pool.check_invariants().unwrap();
    }
}
