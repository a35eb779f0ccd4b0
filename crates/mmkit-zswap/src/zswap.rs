//! The zswap cache itself (`mm/zswap.c`): the tree of entries keyed by swap
//! offset, the LRU and its shrinker, the pool limit, store, load,
//! invalidate and writeback, and the swap-device calls around them that a
//! pager needs (allocate a slot, swap out, swap in, free).
//!
//! Owns the entries and their zsmalloc objects. It must not touch the
//! swap file's slots except through [`SwapFile`]'s slot calls, nor any
//! memory mapping (that is `region`'s).
//!
//! Locking: one mutex over the tree and the LRU (Linux: the xarray's lock
//! and the `list_lru` lock). Compression runs outside it; an exclusive load
//! takes its entry out under the lock and decompresses outside; a keeping
//! load reads the object outside the lock, which is safe because zsmalloc
//! refuses a raw word freed meanwhile (its slot's generation moved on, and
//! never comes back) instead of reading another object; the load then
//! looks the entry up again, so a store that replaced it is seen.
//!
//! Ownership: entries are tokens the caller owns (see [`SwpEntry`]); the
//! zsmalloc objects are held as raw words under this instance's `RawKey`,
//! which nothing outside it has. Writeback runs whole under the lock, so a stale
//! writeback can never land in a slot after its owner wrote newer data
//! there.

use crate::backing::SwapFile;
use crate::params::ZswapParams;
use crate::stats::{Counters, ZswapStats};
use crate::tree::{Entry, Stored, Tree};
use crate::{EntryId, Reject, SwpEntry, ZswapError, PAGE_SIZE};
use mmkit::{Gfp, PageAllocator};
use mmkit_compress::{fill_same, same_filled};
use mmkit_zsmalloc::{RawKey, ZsConfig, ZsPool};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

/// zsmalloc allocation flags for zswap's objects (Linux's `zswap_store`
/// asks for `__GFP_NORETRY | __GFP_NOWARN | __GFP_KSWAPD_RECLAIM`, highmem
/// and movable).
const GFP: Gfp = Gfp::NORETRY.union(Gfp::NOWARN).union(Gfp::KSWAPD_RECLAIM).union(Gfp::HIGHMEM).union(Gfp::MOVABLE);

/// Consecutive writeback failures after which the shrink worker gives up
/// (Linux's `MAX_RECLAIM_RETRIES` in `shrink_worker`).
const MAX_RECLAIM_RETRIES: u32 = 16;

/// Swap types handed out so far: each [`Zswap`] is one swap device. A
/// 64-bit counter that refuses to wrap (as `std::thread::ThreadId`), so
/// an entry of a dropped instance never names a later one.
static NEXT_SWAP_TYPE: AtomicU64 = AtomicU64::new(1);

/// How a batch of swap entries is released.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReleaseMode {
    /// Through `zs_free_deferred` (Linux's 2026 `zswap_invalidate`): the
    /// caller returns before zsmalloc frees anything.
    #[default]
    Deferred,
    /// Through `zs_free`, freed before the call returns (Linux before the
    /// series).
    Sync,
}

/// A failure a test can inject into the next operations of a kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Injected {
    /// The compressor fails (`reject_compress_fail`).
    CompressFail,
    /// The decompressor fails (`decompress_fail`).
    DecompressFail,
    /// zsmalloc has no memory (`reject_alloc_fail`).
    AllocFail,
    /// No entry can be allocated (`reject_kmemcache_fail`).
    KmemcacheFail,
}

/// Failures armed by [`Zswap::inject`].
#[derive(Default)]
struct Injection {
    compress: AtomicU64,
    decompress: AtomicU64,
    alloc: AtomicU64,
    kmem: AtomicU64,
}

fn take(counter: &AtomicU64) -> bool {
    counter.load(Relaxed) > 0 && counter.fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1)).is_ok()
}

/// zswap: a compressed cache in front of a [`SwapFile`].
///
/// Each instance is one swap device with its own swap type; a
/// [`SwpEntry`] of another type is refused with
/// [`ZswapError::ForeignEntry`]. Every method takes `&self` and may be
/// called from any number of threads.
pub struct Zswap {
    pub(crate) swap_type: u64,
    pool: ZsPool,
    /// The right to hold the pool's objects as raw words; only this
    /// instance has it, so every object of the pool is one of its entries'.
    key: RawKey,
    page_bytes: u64,
    total_pages: u64,
    params: RwLock<ZswapParams>,
    pub(crate) tree: Mutex<Tree>,
    pub(crate) file: SwapFile,
    pub(crate) counters: Counters,
    /// Linux's `zswap_pool_reached_full`.
    reached_full: AtomicBool,
    /// One shrink worker at a time (Linux's single `zswap_shrink_work`).
    shrinking: Mutex<()>,
    inject: Injection,
}

impl core::fmt::Debug for Zswap {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Zswap").field("swap_type", &self.swap_type).field("stats", &self.stats()).finish()
    }
}

impl Zswap {
    /// A zswap over `file`, its pool's pages coming from `mm`, which must
    /// have real memory and 4 KiB pages. The pool limit is
    /// `max_pool_percent` of `mm`'s managed pages.
    ///
    /// # Errors
    /// [`ZswapError::Allocator`] when `mm` cannot hold a zsmalloc pool;
    /// [`ZswapError::TooManySlots`] when the file has more slots than the
    /// cache's table can index (an entry's slot a swap slot: one past a
    /// quarter of the machine's memory is refused, before the pool is
    /// made, rather than aborting the process).
    pub fn new(mm: Arc<PageAllocator>, file: SwapFile, params: ZswapParams) -> Result<Self, ZswapError> {
        let page_bytes = mm.geometry().page_size();
        if page_bytes != PAGE_SIZE as u64 {
            return Err(ZswapError::Allocator(format!("pages of {page_bytes} bytes, zswap needs {PAGE_SIZE}")));
        }
        let tree = Tree::try_new(file.nr_slots()).ok_or(ZswapError::TooManySlots(file.nr_slots()))?;
        let total_pages = mm.zones().iter().map(|z| z.managed_pages()).sum();
        let swap_type = NEXT_SWAP_TYPE
            .fetch_update(Relaxed, Relaxed, |n| n.checked_add(1))
            .map_err(|_| ZswapError::Allocator("every swap type was handed out".into()))?;
        let (pool, key) =
            ZsPool::with_raw_key("zswap", mm, ZsConfig::default()).map_err(|e| ZswapError::Allocator(e.to_string()))?;
        Ok(Self {
            swap_type,
            pool,
            key,
            page_bytes,
            total_pages,
            params: RwLock::new(params),
            tree: Mutex::new(tree),
            file,
            counters: Counters::default(),
            reached_full: AtomicBool::new(false),
            shrinking: Mutex::new(()),
            inject: Injection::default(),
        })
    }

    /// This device's swap type.
    pub fn swap_type(&self) -> u64 {
        self.swap_type
    }

    /// The swap file behind the cache.
    pub fn swap_file(&self) -> &SwapFile {
        &self.file
    }

    /// The zsmalloc pool the entries live in.
    pub fn pool(&self) -> &ZsPool {
        &self.pool
    }

    /// The parameters in force.
    pub fn params(&self) -> ZswapParams {
        *self.params.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets parameter `name` from its sysfs text (see [`ZswapParams::set`]).
    ///
    /// # Errors
    /// [`ZswapError::BadParam`]; nothing changes.
    pub fn param_set(&self, name: &str, value: &str) -> Result<(), ZswapError> {
        let mut params = self.params.write().unwrap_or_else(|p| p.into_inner());
        let mut next = *params;
        next.set(name, value)?;
        *params = next;
        Ok(())
    }

    /// Parameter `name` as sysfs shows it; `None` for an unknown name.
    pub fn param_show(&self, name: &str) -> Option<String> {
        self.params().show(name)
    }

    /// The statistics (debugfs's files).
    pub fn stats(&self) -> ZswapStats {
        ZswapStats::from_counters(&self.counters, self.pool.zs_get_total_pages() * self.page_bytes)
    }

    /// Test hook: the next `n` operations of kind `what` fail.
    pub fn inject(&self, what: Injected, n: u64) {
        let counter = match what {
            Injected::CompressFail => &self.inject.compress,
            Injected::DecompressFail => &self.inject.decompress,
            Injected::AllocFail => &self.inject.alloc,
            Injected::KmemcacheFail => &self.inject.kmem,
        };
        counter.store(n, Relaxed);
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Tree> {
        self.tree.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Checks that `entry` is a slot of this device and `len` a page.
    pub(crate) fn check(&self, entry: &SwpEntry, len: usize) -> Result<u64, ZswapError> {
        if entry.swap_type() != self.swap_type {
            return Err(ZswapError::ForeignEntry(entry.id()));
        }
        if len != PAGE_SIZE {
            return Err(ZswapError::BadPageSize(len));
        }
        if !self.file.is_allocated(entry.offset()) {
            return Err(ZswapError::BadSlot(entry.id()));
        }
        Ok(entry.offset())
    }

    // ---- the pool limit (Linux's zswap_check_limits) ----

    fn max_pages(&self) -> u64 {
        self.total_pages * u64::from(self.params().max_pool_percent) / 100
    }

    fn accept_thr_pages(&self) -> u64 {
        self.max_pages() * u64::from(self.params().accept_threshold_percent) / 100
    }

    /// Whether the pool is (still) full: at the limit, or not yet back
    /// below the accept threshold since it was.
    fn check_limits(&self) -> bool {
        let cur = self.pool.zs_get_total_pages();
        if cur >= self.max_pages() {
            Counters::inc(&self.counters.pool_limit_hit);
            self.reached_full.store(true, Relaxed);
        } else if self.reached_full.load(Relaxed) && cur <= self.accept_thr_pages() {
            self.reached_full.store(false, Relaxed);
        }
        self.reached_full.load(Relaxed)
    }

    // ---- store ----

    /// Stores `page` as the contents of swap slot `entry` (Linux's
    /// `zswap_store`). A page of one repeated word is kept as that word;
    /// any other is compressed with the `compressor` in force into the
    /// zsmalloc pool and put on the LRU. An older entry of the same slot
    /// is replaced.
    ///
    /// # Errors
    /// [`ZswapError::Rejected`] with the reason (counted): the caller
    /// writes the page to the swap device instead. As Linux's `check_old`
    /// does, a rejected store drops an older entry of the same slot, whose
    /// contents are stale now. [`ZswapError::ForeignEntry`],
    /// [`ZswapError::BadSlot`], [`ZswapError::BadPageSize`]: nothing
    /// changes.
    pub fn zswap_store(&self, entry: &SwpEntry, page: &[u8]) -> Result<(), ZswapError> {
        let offset = self.check(entry, page.len())?;
        match self.store_inner(page) {
            Ok(stored) => {
                let mut tree = self.lock();
                let Ok(old) = tree.insert(offset, Entry { stored, referenced: true }) else {
                    // Unreachable: `check` found the slot allocated, so inside the tree.
                    drop(tree);
                    if let Stored::Zs { handle, .. } = stored {
                        let _ = self.pool.zs_free_raw(&self.key, handle);
                    }
                    return Err(ZswapError::BadSlot(entry.id()));
                };
                self.account(&stored, 1);
                let old = old.and_then(|old| self.unlink(old));
                drop(tree);
                if let Some(handle) = old {
                    let _ = self.pool.zs_free_raw(&self.key, handle);
                }
                Ok(())
            }
            Err(why) => {
                self.count_reject(why);
                let _ = self.zswap_invalidate_mode(entry, ReleaseMode::Sync);
                if why == Reject::PoolLimit && self.params().shrinker_enabled {
                    self.shrink_worker();
                }
                Err(ZswapError::Rejected(why))
            }
        }
    }

    fn store_inner(&self, page: &[u8]) -> Result<Stored, Reject> {
        let params = self.params();
        if !params.enabled {
            return Err(Reject::Disabled);
        }
        if self.check_limits() {
            return Err(Reject::PoolLimit);
        }
        if let Some(word) = same_filled(page) {
            return Ok(Stored::Same(word));
        }
        if take(&self.inject.kmem) {
            return Err(Reject::KmemcacheFail);
        }
        if take(&self.inject.compress) {
            return Err(Reject::CompressFail);
        }
        let algorithm = params.compressor;
        let alloc = |data: &[u8]| {
            if take(&self.inject.alloc) {
                return Err(Reject::AllocFail);
            }
            let handle = self.pool.zs_malloc_copy_raw(&self.key, data, GFP, 0).map_err(|_| Reject::AllocFail)?;
            Ok(Stored::Zs { handle, len: data.len() as u32, algorithm })
        };
        // `compress` gives `None` when the output would not be smaller than
        // the page: Linux's `dlen >= PAGE_SIZE` check, compress_poor.
        algorithm.compress(page, alloc).unwrap_or(Err(Reject::CompressPoor))
    }

    fn count_reject(&self, why: Reject) {
        let c = &self.counters;
        match why {
            Reject::Disabled | Reject::PoolLimit => {}
            Reject::CompressFail => Counters::inc(&c.reject_compress_fail),
            Reject::CompressPoor => Counters::inc(&c.reject_compress_poor),
            Reject::AllocFail => Counters::inc(&c.reject_alloc_fail),
            Reject::KmemcacheFail => Counters::inc(&c.reject_kmemcache_fail),
        }
    }

    /// Counts `stored` in (`sign` 1) or out (-1).
    fn account(&self, stored: &Stored, sign: i64) {
        let add = |counter: &AtomicU64, n: u64| {
            if sign > 0 {
                counter.fetch_add(n, Relaxed);
            } else {
                counter.fetch_sub(n, Relaxed);
            }
        };
        add(&self.counters.stored_pages, 1);
        match *stored {
            Stored::Same(_) => add(&self.counters.same_filled_pages, 1),
            Stored::Zs { len, .. } => add(&self.counters.stored_bytes, u64::from(len)),
        }
    }

    /// Takes a removed entry out of the counts; returns its handle to free
    /// once the lock is dropped.
    fn unlink(&self, old: Entry) -> Option<u64> {
        self.account(&old.stored, -1);
        match old.stored {
            Stored::Same(_) => None,
            Stored::Zs { handle, .. } => Some(handle),
        }
    }

    // ---- load ----

    /// Loads slot `entry` into `page` and drops the entry (Linux's
    /// `zswap_load` reading into the swap cache: the page's owner holds
    /// the only copy from now on). `Ok(false)` when the slot is not in
    /// zswap (never stored, rejected or written back): read the swap
    /// device.
    ///
    /// # Errors
    /// [`ZswapError::DecompressFail`] (the entry is kept);
    /// [`ZswapError::ForeignEntry`], [`ZswapError::BadSlot`],
    /// [`ZswapError::BadPageSize`]: nothing changes.
    pub fn zswap_load(&self, entry: &SwpEntry, page: &mut [u8]) -> Result<bool, ZswapError> {
        let offset = self.check(entry, page.len())?;
        let Some(found) = self.lock().remove(offset) else { return Ok(false) };
        match self.expand(entry.id(), found.stored, page) {
            Ok(()) => {
                if let Some(handle) = self.unlink(found) {
                    let _ = self.pool.zs_free_raw(&self.key, handle);
                }
                Ok(true)
            }
            Err(e) => {
                // Put it back unless a newer store took the slot meanwhile.
                let mut tree = self.lock();
                if !tree.contains(offset) {
                    let _ = tree.insert(offset, found);
                } else {
                    drop(tree);
                    if let Some(handle) = self.unlink(found) {
                        let _ = self.pool.zs_free_raw(&self.key, handle);
                    }
                }
                Err(e)
            }
        }
    }

    /// Loads slot `entry` into `page` and keeps the entry (Linux's
    /// `zswap_load` for a read that bypasses the swap cache, where "we
    /// remain the primary owner of the entry"): a pager that tracks writes
    /// can drop a clean page later without compressing it again. Marks the
    /// entry referenced for the shrinker. `Ok(false)` as for
    /// [`zswap_load`](Self::zswap_load).
    ///
    /// # Errors
    /// As [`zswap_load`](Self::zswap_load).
    pub fn zswap_load_keep(&self, entry: &SwpEntry, page: &mut [u8]) -> Result<bool, ZswapError> {
        let offset = self.check(entry, page.len())?;
        loop {
            let stored = {
                let mut tree = self.lock();
                let Some(found) = tree.get_mut(offset) else { return Ok(false) };
                found.referenced = true;
                found.stored
            };
            match self.expand(entry.id(), stored, page) {
                Ok(()) => return Ok(true),
                // The object went while we read it (zsmalloc refused its
                // word: freed, and its slot's generation moved on): a store
                // replaced the entry, or an invalidation or writeback took
                // it. Look again. Answering "not in zswap" here sent the
                // caller to the swap file's slot, which a replacing store
                // never wrote: stale data.
                Err(ZswapError::NoEntry(_)) => continue,
                Err(e) => return Err(e),
            }
        }
    }

    /// Whether slot `entry` has an entry in zswap.
    pub fn contains(&self, entry: &SwpEntry) -> bool {
        entry.swap_type() == self.swap_type && self.lock().contains(entry.offset())
    }

    /// Decompresses `stored` into `page`.
    fn expand(&self, entry: EntryId, stored: Stored, page: &mut [u8]) -> Result<(), ZswapError> {
        match stored {
            Stored::Same(word) => {
                fill_same(page, word);
                Ok(())
            }
            Stored::Zs { handle, algorithm, .. } => {
                let mut local = [0u8; PAGE_SIZE];
                let ok = self
                    .pool
                    .zs_obj_read_with_raw(&self.key, handle, &mut local, |data| {
                        !take(&self.inject.decompress) && algorithm.decompress(data, page)
                    })
                    .map_err(|_| ZswapError::NoEntry(entry))?;
                if ok {
                    Ok(())
                } else {
                    Counters::inc(&self.counters.decompress_fail);
                    Err(ZswapError::DecompressFail(entry))
                }
            }
        }
    }

    // ---- invalidate ----

    /// Drops slot `entry`'s zswap entry, if any, with its object freed
    /// through `zs_free_deferred` (Linux's `zswap_invalidate`, called when
    /// a swap entry is freed; the 2026 series defers the free because this
    /// runs on the exit path). `Ok(false)` when there was none.
    ///
    /// # Errors
    /// [`ZswapError::ForeignEntry`]; nothing changes.
    pub fn zswap_invalidate(&self, entry: &SwpEntry) -> Result<bool, ZswapError> {
        self.zswap_invalidate_mode(entry, ReleaseMode::Deferred)
    }

    /// [`zswap_invalidate`](Self::zswap_invalidate) with the object freed
    /// as `mode` says.
    ///
    /// # Errors
    /// As `zswap_invalidate`.
    pub fn zswap_invalidate_mode(&self, entry: &SwpEntry, mode: ReleaseMode) -> Result<bool, ZswapError> {
        if entry.swap_type() != self.swap_type {
            return Err(ZswapError::ForeignEntry(entry.id()));
        }
        let mut tree = self.lock();
        let Some(old) = tree.remove(entry.offset()) else { return Ok(false) };
        drop(tree);
        let handle = self.unlink(old);
        if let Some(handle) = handle {
            self.free_handle(handle, mode);
        }
        Ok(true)
    }

    pub(crate) fn free_handle(&self, handle: u64, mode: ReleaseMode) {
        let _ = match mode {
            ReleaseMode::Deferred => self.pool.zs_free_deferred_raw(&self.key, handle),
            ReleaseMode::Sync => self.pool.zs_free_raw(&self.key, handle),
        };
    }

    /// Waits until every deferred free has reached zsmalloc (Linux's
    /// `zs_free_deferred_flush`).
    pub fn flush_deferred(&self) {
        self.pool.zs_free_deferred_flush();
    }

    // ---- writeback and the shrinker ----

    /// Writes slot `entry`'s page to the swap file and drops the entry
    /// (Linux's `zswap_writeback_entry`): the slot's data lives on the
    /// device from now on.
    ///
    /// # Errors
    /// [`ZswapError::NoEntry`] when the slot is not in zswap;
    /// [`ZswapError::WritebackFail`] when decompression or the write
    /// failed (counted in `reject_reclaim_fail`; the entry stays);
    /// [`ZswapError::ForeignEntry`], [`ZswapError::BadSlot`].
    pub fn zswap_writeback_entry(&self, entry: &SwpEntry) -> Result<(), ZswapError> {
        let offset = self.check(entry, PAGE_SIZE)?;
        let mut tree = self.lock();
        if !tree.contains(offset) {
            return Err(ZswapError::NoEntry(entry.id()));
        }
        self.writeback_locked(&mut tree, offset)
    }

    fn writeback_locked(&self, tree: &mut Tree, offset: u64) -> Result<(), ZswapError> {
        let entry = EntryId::new(self.swap_type, offset);
        let Some(&found) = tree.get(offset) else { return Err(ZswapError::NoEntry(entry)) };
        let mut page = [0u8; PAGE_SIZE];
        let done = self.expand(entry, found.stored, &mut page).is_ok() && self.file.write_slot(offset, &page).is_ok();
        if !done {
            Counters::inc(&self.counters.reject_reclaim_fail);
            return Err(ZswapError::WritebackFail(entry));
        }
        tree.remove(offset);
        if let Some(handle) = self.unlink(found) {
            let _ = self.pool.zs_free_raw(&self.key, handle);
        }
        Counters::inc(&self.counters.written_back_pages);
        Ok(())
    }

    /// Scans up to `nr_to_scan` entries from the LRU's cold end and writes
    /// back those not referenced since the last scan; referenced ones get a
    /// second chance (Linux's `shrink_memcg_cb` rotation). Returns the
    /// entries written back. Does nothing when `shrinker_enabled` is off.
    pub fn zswap_shrink(&self, nr_to_scan: usize) -> usize {
        if !self.params().shrinker_enabled {
            return 0;
        }
        let mut tree = self.lock();
        let mut written = 0;
        let mut failures = 0;
        for _ in 0..nr_to_scan {
            let Some(offset) = tree.lru_cold() else { break };
            let Some(e) = tree.get_mut(offset) else { break };
            if e.referenced {
                e.referenced = false;
                tree.rotate(offset);
                continue;
            }
            if self.writeback_locked(&mut tree, offset).is_ok() {
                written += 1;
            } else {
                // A failed writeback keeps the entry: off to the warm end.
                tree.rotate(offset);
                failures += 1;
                if failures >= MAX_RECLAIM_RETRIES {
                    break;
                }
            }
        }
        written
    }

    /// Writes cold entries back until the pool is below the accept
    /// threshold (Linux's `shrink_worker`), giving up after repeated
    /// failures. Runs in the storing thread that found the pool full; one
    /// at a time.
    pub fn shrink_worker(&self) {
        let Ok(_one) = self.shrinking.try_lock() else { return };
        let mut idle_rounds = 0;
        while self.pool.zs_get_total_pages() > self.accept_thr_pages() && idle_rounds < MAX_RECLAIM_RETRIES {
            if self.zswap_shrink(64) == 0 {
                idle_rounds += 1;
                if self.lock().lru_len() == 0 {
                    break;
                }
            }
        }
    }

    /// Checks the tree against the LRU, the counters, the swap file's
    /// slots and the pool (after draining deferred frees): every LRU key names an entry that points back
    /// at it, every compressed entry is on the LRU once and its object is
    /// readable at its length, every entry's slot is allocated.
    ///
    /// # Errors
    /// The first inconsistency, described.
    pub fn check_invariants(&self) -> Result<(), String> {
        let tree = self.lock();
        tree.check()?;
        let (mut same, mut bytes) = (0u64, 0u64);
        for (offset, e) in tree.iter() {
            if !self.file.is_allocated(offset) {
                return Err(format!("entry of unallocated slot {offset}"));
            }
            match e.stored {
                Stored::Same(_) => same += 1,
                Stored::Zs { handle, len, .. } => {
                    bytes += u64::from(len);
                    let mut buf = [0u8; PAGE_SIZE];
                    match self.pool.zs_obj_read_raw(&self.key, handle, &mut buf) {
                        Ok(n) if n == len as usize => {}
                        other => return Err(format!("slot {offset}: object read gave {other:?}, stored {len}")),
                    }
                }
            }
        }
        if tree.lru_len() as u64 + same != tree.len() as u64 {
            return Err(format!("{} entries, {same} same-filled, {} on the LRU", tree.len(), tree.lru_len()));
        }
        let s = self.stats();
        if (s.stored_pages, s.same_filled_pages, s.compressed_bytes) != (tree.len() as u64, same, bytes) {
            return Err(format!("counters {s:?} against {} entries, {same} same, {bytes} bytes", tree.len()));
        }
        drop(tree);
        // zsmalloc's own check is only exact with no free in flight.
        self.pool.zs_free_deferred_flush();
        self.pool.check_invariants()
    }
}

impl Drop for Zswap {
    fn drop(&mut self) {
        self.pool.zs_free_deferred_flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_filled_detection() {
        assert_eq!(same_filled(&[0u8; PAGE_SIZE]), Some(0));
        let mut page = [7u8; PAGE_SIZE];
        assert_eq!(same_filled(&page), Some(u64::from_ne_bytes([7; 8])));
        page[4095] = 8;
        assert_eq!(same_filled(&page), None);
        let mut back = [0u8; PAGE_SIZE];
        fill_same(&mut back, 0x0102_0304_0506_0708);
        assert_eq!(same_filled(&back), Some(0x0102_0304_0506_0708));
    }
}
