//! The pool: `zs_create_pool` … `zs_destroy_pool` in Linux's vocabulary.
//!
//! Owns the class table, one lock per size class (with the class's slot
//! state words beside it, which calls read and change without the lock:
//! `slot_state`) and the page counts.
//! There is no pool-wide lock: a handle names its class, so `zs_free`,
//! reads and writes lock that class only (Linux reached this in 2026 by
//! encoding `class_idx` in the object and dropping `pool->lock` from
//! `zs_free`). New zspages are allocated with no lock held, and an emptied
//! zspage's pages go back to the page allocator after the class lock is
//! dropped. The class lock is a reader-writer lock: reads of objects share
//! it, so readers of one class run together (Linux gets that from a
//! per-zspage reader lock); writes, allocation, free and compaction hold it
//! exclusively.
//! Compaction is `compact`'s, the deferred free `deferred`'s.

use crate::class::{ClassTable, DEFAULT_CHAIN_SIZE, ZS_HANDLE_SIZE};
use crate::deferred_state::{DeferredLayout, DeferredQueue};
use crate::handle::{new_pool_id, raw_fields, raw_id, Handle, RawKey, MAX_CLASSES};
use crate::size_class::{AllocMiss, ClassState, Held, Name, NewObj};
use crate::slot_state::SlotStates;
use crate::worker::{Drain, Worker};
use crate::ZsError;
use mmkit::Blocks;
use mmkit::Cpus;
use mmkit::{Gfp, PageAllocator, PageBlock};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError};

thread_local! {
    /// Pages of a zspage a free emptied, on their way back to the page
    /// allocator: one buffer per thread, reused.
    static EMPTIED: std::cell::Cell<Vec<PageBlock>> = const { std::cell::Cell::new(Vec::new()) };
}

/// This thread's buffer for the pages of emptied zspages, or a new one
/// once the thread's locals are being destroyed (a free from another
/// thread-local's destructor).
fn take_emptied() -> Vec<PageBlock> {
    EMPTIED.try_with(std::cell::Cell::take).unwrap_or_default()
}

/// Gives an emptied buffer back to the thread for the next free.
fn keep_emptied(pages: Vec<PageBlock>) {
    debug_assert!(pages.is_empty());
    let _ = EMPTIED.try_with(|buffer| buffer.set(pages));
}

/// How a pool is built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZsConfig {
    /// Most pages in one zspage (Linux's `CONFIG_ZSMALLOC_CHAIN_SIZE`,
    /// 4 ..= 16; default 8).
    pub chain_size: usize,
    /// Layout of the deferred-free queue.
    pub deferred: DeferredLayout,
}

impl Default for ZsConfig {
    fn default() -> Self {
        Self { chain_size: DEFAULT_CHAIN_SIZE, deferred: DeferredLayout::default() }
    }
}

/// Counters of a pool (Linux's `struct zs_pool_stats`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ZsPoolStats {
    /// Pages freed by compaction.
    pub pages_compacted: u64,
}

/// What a pool shares with its deferred-free worker.
pub(crate) struct Inner {
    pub(crate) name: String,
    /// Stamped on every handle; a handle with another id is refused. No
    /// other pool of the process ever has it.
    pub(crate) pool_id: u64,
    /// Whether the pool was made with a raw key (its slots retire at
    /// `RAW_GEN_LIMIT`, and raw words are accepted).
    pub(crate) raw_keyed: bool,
    pub(crate) mm: Arc<PageAllocator>,
    /// The map's key for this pool's pages; `None` only in `Drop`.
    pub(crate) key: Option<mmkit::OwnerKey>,
    /// The key's tag.
    pub(crate) owner: mmkit::PageOwner,
    pub(crate) table: ClassTable,
    /// Whether each class index a handle can name serves objects (merged
    /// classes and indices past the table do not).
    serving: [bool; MAX_CLASSES],
    /// One per class index; only the classes that serve others are used.
    pub(crate) classes: Box<[RwLock<ClassState>]>,
    /// Each class's slot state words (the same table its `ClassState`
    /// holds), for the calls that need no class lock.
    pub(crate) states: Box<[Arc<SlotStates>]>,
    pub(crate) pages_allocated: AtomicU64,
    pub(crate) pages_compacted: AtomicU64,
    /// Compaction is single-flight (Linux's `compaction_in_progress`).
    pub(crate) compacting: AtomicBool,
    pub(crate) deferred: DeferredQueue,
    /// Linux's `pool->lock` before 2026, for the `legacy-free` variant only.
    #[cfg(feature = "legacy-free")]
    pub(crate) legacy_pool_lock: std::sync::RwLock<()>,
}

impl Drop for Inner {
    /// Gives the pool's owner key back once its pages are freed.
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            Blocks::new(&self.mm).release_owner_key(key);
        }
    }
}

impl Inner {
    /// The pool's owner key; refused only while the pool is dropped.
    pub(crate) fn key(&self) -> Result<&mmkit::OwnerKey, ZsError> {
        self.key.as_ref().ok_or(ZsError::NoMemory(None))
    }

    pub(crate) fn new(name: &str, mm: Arc<PageAllocator>, config: ZsConfig, raw_keyed: bool) -> Result<Self, ZsError> {
        let ZsConfig { chain_size, deferred } = config;
        if !mm.has_real_memory() {
            return Err(ZsError::NoRealMemory);
        }
        if !crate::class::CHAIN_SIZES.contains(&chain_size) {
            return Err(ZsError::BadChainSize(chain_size));
        }
        let page_size = mm.geometry().page_size() as usize;
        if !crate::class::PAGE_SIZES.contains(&page_size) {
            return Err(ZsError::UnsupportedPageSize(page_size));
        }
        let table = ClassTable::new(page_size, chain_size);
        // At most 257 classes on the page sizes above: every index fits
        // the 9 bits of a handle's and a raw word's class field.
        if table.nr_classes() > MAX_CLASSES {
            return Err(ZsError::UnsupportedPageSize(page_size));
        }
        let pool_id = new_pool_id().ok_or(ZsError::TooManyPools)?;
        let key = Blocks::new(&mm).new_owner_key().map_err(|_| ZsError::OwnerTagsExhausted)?;
        // A merged class never has a slot (its sizes go to the class that
        // serves it): those share one empty table.
        let unused = Arc::new(SlotStates::new());
        let states: Box<[Arc<SlotStates>]> = (0..table.nr_classes())
            .map(|i| if table.serving(i) == i { Arc::new(SlotStates::new()) } else { unused.clone() })
            .collect();
        let classes = (0..table.nr_classes())
            .map(|i| {
                let page_size = table.page_size();
                RwLock::new(ClassState::new(pool_id, raw_keyed, i, table.shape(i), page_size, states[i].clone()))
            })
            .collect();
        let shards = match deferred {
            DeferredLayout::PerCpu => Cpus::new(&mm).nr_cpus(),
            DeferredLayout::PerPool => 1,
        };
        let deferred = DeferredQueue::new(shards, table.page_size());
        Ok(Self {
            name: name.to_string(),
            pool_id,
            raw_keyed,
            mm,
            owner: key.owner(),
            key: Some(key),
            serving: std::array::from_fn(|i| i < table.nr_classes() && table.serving(i) == i),
            table,
            classes,
            states,
            pages_allocated: AtomicU64::new(0),
            pages_compacted: AtomicU64::new(0),
            compacting: AtomicBool::new(false),
            deferred,
            #[cfg(feature = "legacy-free")]
            legacy_pool_lock: std::sync::RwLock::new(()),
        })
    }

    /// Class `index`'s lock. A panic while it was held cannot leave the
    /// class half-edited in a way later calls would trust blindly (every
    /// handle is validated), so a poisoned lock is used as it is.
    ///
    /// # Panics
    /// When this thread reads class `index` in a `zs_obj_read_with`
    /// closure (the read holds the lock: waiting would hang for ever).
    /// The calls with an error to give (`zs_malloc`, `zs_free`, writes,
    /// reads, replaces) lock through [`lock_checked`](Self::lock_checked)
    /// and give [`ZsError::Reentered`] instead; this is for the rest
    /// (compaction, the deferred drain, migration).
    pub(crate) fn lock(&self, index: usize) -> RwLockWriteGuard<'_, ClassState> {
        match self.lock_checked(index) {
            Ok(state) => state,
            Err(e) => panic!("zsmalloc pool {}: {e}", self.name),
        }
    }

    /// [`lock`](Self::lock), or [`ZsError::Reentered`] when this thread
    /// reads class `index` in a `zs_obj_read_with` closure. Uncontended,
    /// the same one compare-and-swap as `write`; the thread's reads are
    /// looked at only when the lock is busy.
    #[inline]
    pub(crate) fn lock_checked(&self, index: usize) -> Result<RwLockWriteGuard<'_, ClassState>, ZsError> {
        match self.classes[index].try_write() {
            Ok(state) => Ok(state),
            Err(TryLockError::Poisoned(poisoned)) => Ok(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => self.lock_contended(index),
        }
    }

    #[cold]
    fn lock_contended(&self, index: usize) -> Result<RwLockWriteGuard<'_, ClassState>, ZsError> {
        if reading::holds(self.pool_id, index) {
            return Err(ZsError::Reentered { class: index });
        }
        Ok(self.classes[index].write().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    /// Class `index` for reading objects: readers of one class run
    /// together (Linux gets the same from its per-zspage read lock).
    /// [`ZsError::Reentered`] as for [`lock_checked`](Self::lock_checked):
    /// a second read of a class this thread reads already waits behind a
    /// writer that waits for the first.
    #[inline]
    pub(crate) fn read_lock(&self, index: usize) -> Result<RwLockReadGuard<'_, ClassState>, ZsError> {
        match self.classes[index].try_read() {
            Ok(state) => Ok(state),
            Err(TryLockError::Poisoned(poisoned)) => Ok(poisoned.into_inner()),
            Err(TryLockError::WouldBlock) => self.read_lock_contended(index),
        }
    }

    #[cold]
    fn read_lock_contended(&self, index: usize) -> Result<RwLockReadGuard<'_, ClassState>, ZsError> {
        if reading::holds(self.pool_id, index) {
            return Err(ZsError::Reentered { class: index });
        }
        Ok(self.classes[index].read().unwrap_or_else(|poisoned| poisoned.into_inner()))
    }

    /// The class and name of `handle`'s object, if the handle is this
    /// pool's (a handle of this pool is live until it is consumed).
    pub(crate) fn name_of(&self, handle: &Handle) -> Result<(usize, Name), ZsError> {
        let class = handle.class();
        let name = Name { slot: handle.slot(), held: Held::Handle(handle.generation()), id: handle.id() };
        if handle.pool() == self.pool_id && self.serves(class) {
            Ok((class, name))
        } else {
            Err(ZsError::InvalidHandle(name.id))
        }
    }

    /// The class and name of the object raw word `word` names under `key`,
    /// if the key is this pool's and the word could name an object (whether
    /// it does, and is raw-held, the class lock tells).
    #[inline]
    pub(crate) fn name_of_raw(&self, key: &RawKey, word: u64) -> Result<(usize, Name), ZsError> {
        let (slot, class, generation) = raw_fields(word);
        let name = Name { slot, held: Held::Raw(generation), id: raw_id(key.pool, word) };
        // Word 0 names no object: a live slot's generation is never 0 in
        // its low bits (generations start at 1 and retire before 2^27).
        // A key of this pool's id was made by `with_raw_key` for this pool
        // (ids are never reused), so the pool is raw-keyed.
        if key.pool == self.pool_id && self.serves(class) {
            Ok((class, name))
        } else {
            Err(ZsError::InvalidHandle(name.id))
        }
    }

    /// Whether class index `class` (of a handle or a word: below
    /// `MAX_CLASSES`) serves objects; one load.
    #[inline]
    pub(crate) fn serves(&self, class: usize) -> bool {
        self.serving[class & (MAX_CLASSES - 1)]
    }

    /// The handle of new object `new` of `class`.
    pub(crate) fn handle_of(&self, class: usize, new: NewObj) -> Handle {
        Handle::new(self.pool_id, new.slot, class, new.generation)
    }

    /// An object of `size` bytes, held by a handle or (`raw`) a raw word;
    /// with `data`, its bytes are written before the class lock is
    /// dropped. Returns its class and slot.
    #[inline(always)]
    pub(crate) fn malloc(
        &self,
        size: usize,
        data: Option<&[u8]>,
        gfp: Gfp,
        nid: usize,
        raw: bool,
    ) -> Result<(usize, NewObj), ZsError> {
        let page_size = self.table.page_size();
        if size == 0 || size > page_size {
            return Err(ZsError::BadSize { size, max: page_size });
        }
        // The header is added before the lookup, as in Linux.
        let class = self.table.class_for(size + ZS_HANDLE_SIZE);
        let mut state = self.lock_checked(class)?;
        match state.alloc(&self.mm, size, raw, data) {
            Ok(new) => Ok((class, new)),
            Err(miss) => self.malloc_slow(state, class, miss, size, data, gfp, nid, raw),
        }
    }

    /// [`malloc`](Self::malloc) when no zspage of the class has a backed
    /// free object: a page is needed, for the zspage growing its chain or
    /// for a new zspage. Pages come from the allocator with no class lock
    /// held (as Linux's `alloc_zspage`): its slow path may compact, and
    /// compaction may call back into this pool to migrate a page.
    #[cold]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn malloc_slow<'a>(
        &'a self,
        mut state: RwLockWriteGuard<'a, ClassState>,
        class: usize,
        mut miss: AllocMiss,
        size: usize,
        data: Option<&[u8]>,
        gfp: Gfp,
        nid: usize,
        raw: bool,
    ) -> Result<(usize, NewObj), ZsError> {
        loop {
            if state.slots_exhausted() {
                return Err(ZsError::NoMemory(None));
            }
            drop(state);
            let page = self.alloc_page(gfp, nid)?;
            state = match self.lock_checked(class) {
                Ok(state) => state,
                Err(e) => {
                    self.free_pages(vec![page]);
                    return Err(e);
                }
            };
            match miss {
                AllocMiss::NeedsPage(id) => match state.attach_page(id, page) {
                    Ok(()) => {
                        // The page backs the zspage's next object.
                        if let Some(new) = state.take_object(&self.mm, id, size, raw, data) {
                            return Ok((class, new));
                        }
                    }
                    Err(unused) => {
                        // Another caller grew or emptied that zspage
                        // meanwhile: give the page back and look again.
                        drop(state);
                        self.free_pages(vec![unused]);
                        state = self.lock_checked(class)?;
                    }
                },
                AllocMiss::NoRoom if state.slots_exhausted() || state.zspages_exhausted() => {
                    // Every handle the class can name is live or retired
                    // (2^28 slots), or every zspage id is taken: an empty zspage
                    // would stay behind, so the page goes back.
                    drop(state);
                    self.free_pages(vec![page]);
                    return Err(ZsError::NoMemory(None));
                }
                AllocMiss::NoRoom => {
                    // The object goes into the new zspage even if another
                    // one gained room meanwhile (as Linux's zs_malloc
                    // does): an empty zspage left behind would never be
                    // freed.
                    let id = state.insert_zspage(page);
                    let new = state.alloc_in(&self.mm, id, size, raw, data).ok_or(ZsError::NoMemory(None))?;
                    return Ok((class, new));
                }
            }
            miss = match state.alloc(&self.mm, size, raw, data) {
                Ok(new) => return Ok((class, new)),
                Err(miss) => miss,
            };
        }
    }

    /// One page for a zspage.
    fn alloc_page(&self, gfp: Gfp, nid: usize) -> Result<PageBlock, ZsError> {
        let block =
            Blocks::new(&self.mm).alloc_block_node(nid, self.key()?, gfp, 0).map_err(|e| ZsError::NoMemory(Some(e)))?;
        self.pages_allocated.fetch_add(1, Relaxed);
        Ok(block)
    }

    /// Returns pages to the page allocator (no class lock may be held).
    pub(crate) fn free_pages(&self, mut pages: Vec<PageBlock>) {
        self.free_page_list(&mut pages);
    }

    /// Returns the pages in `pages` to the page allocator in one bulk
    /// free, leaving `pages` empty (no class lock may be held).
    pub(crate) fn free_page_list(&self, pages: &mut Vec<PageBlock>) {
        let n = pages.len() as u64;
        if n == 0 {
            return;
        }
        // Blocks of this pool come from `self.mm`, so none is given back;
        // a bad-page report (embedder flags set on our page) leaks it, as
        // in Linux.
        let _ = Blocks::new(&self.mm).free_blocks_bulk(pages);
        pages.clear();
        self.pages_allocated.fetch_sub(n, Relaxed);
    }

    /// A copy of `data` in a new object (held as `raw` says), then the
    /// object `old` names freed: under one hold of the class lock when both
    /// are of one class and the class has a backed free object, else as
    /// `malloc` followed by `free`. On any error nothing changed.
    pub(crate) fn replace(
        &self,
        (old_class, old): (usize, Name),
        data: &[u8],
        gfp: Gfp,
        nid: usize,
        raw: bool,
    ) -> Result<(usize, NewObj), ZsError> {
        let size = data.len();
        if size > 0 && size <= self.table.page_size() {
            let class = self.table.class_for(size + ZS_HANDLE_SIZE);
            if old_class == class {
                let mut state = self.lock_checked(class)?;
                state.resolve(&old)?;
                if !state.slots_exhausted() {
                    if let Ok(new) = state.alloc(&self.mm, size, raw, Some(data)) {
                        let mut emptied = Vec::new();
                        // A lock-free call (a deferred free of its word) can
                        // have taken `old` since it was resolved: then the
                        // new object goes too, and nothing changed.
                        let result = match state.free(&old, &mut emptied) {
                            Ok(()) => Ok((class, new)),
                            Err(e) => {
                                let _ = state.free(&self.name_of_new(class, new, raw), &mut emptied);
                                Err(e)
                            }
                        };
                        drop(state);
                        self.free_pages(emptied);
                        return result;
                    }
                }
            }
        }
        // No check of `old` before the store: that would cost the
        // overwrite a third lock round trip. A handle of this pool names a
        // live object until it is consumed, so its free cannot fail; a word
        // that names nothing it may reach has the store undone, so that
        // nothing changed.
        let (class, new) = self.malloc(size, Some(data), gfp, nid, raw)?;
        if let Err(e) = self.free(old_class, &old) {
            let _ = self.free(class, &self.name_of_new(class, new, raw));
            return Err(e);
        }
        Ok((class, new))
    }

    /// The name of object `new` of `class`, just allocated and held as
    /// `raw` says.
    fn name_of_new(&self, class: usize, new: NewObj, raw: bool) -> Name {
        let id = Handle::new(self.pool_id, new.slot, class, new.generation).id();
        let held = if raw { Held::Raw(new.generation) } else { Held::Handle(new.generation) };
        Name { slot: new.slot as usize, held, id }
    }

    #[inline(always)]
    pub(crate) fn free(&self, class: usize, name: &Name) -> Result<(), ZsError> {
        let mut state = self.lock_checked(class)?;
        if let Some(id) = state.free_regrouped(name)? {
            self.free_emptied(state, id);
        }
        Ok(())
    }

    /// The end of a free that emptied zspage `id`: it leaves the class,
    /// and its pages go back to the page allocator once the lock is
    /// dropped, through this thread's buffer (a free allocates nothing).
    #[cold]
    #[inline(never)]
    fn free_emptied(&self, mut state: RwLockWriteGuard<'_, ClassState>, id: usize) {
        let mut pages = take_emptied();
        state.release_zspage(id, &mut pages);
        drop(state);
        self.free_page_list(&mut pages);
        keep_emptied(pages);
    }

    pub(crate) fn read_with<R>(
        &self,
        (class, name): (usize, Name),
        local_copy: &mut [u8],
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, ZsError> {
        let state = self.read_lock(class)?;
        let at = state.resolve(&name)?;
        // `f` is the caller's code and runs under the class's read lock:
        // a call of its that needs the class again gets
        // `ZsError::Reentered` (or, without an error to give, a panic)
        // instead of waiting for ever on the lock this read holds.
        let _reading = reading::Reading::enter(self.pool_id, class)?;
        if let Some(bytes) = state.object_bytes(&self.mm, at) {
            return Ok(f(bytes));
        }
        let got = local_copy.len();
        let buf = local_copy.get_mut(..at.len).ok_or(ZsError::BufferTooSmall { need: at.len, got })?;
        state.read_object(&self.mm, at, buf);
        Ok(f(buf))
    }

    pub(crate) fn write(&self, (class, name): (usize, Name), data: &[u8]) -> Result<(), ZsError> {
        self.lock_checked(class)?.write_obj(&self.mm, &name, data)
    }

    pub(crate) fn read_into(&self, (class, name): (usize, Name), out: &mut [u8]) -> Result<usize, ZsError> {
        let state = self.read_lock(class)?;
        let at = state.resolve(&name)?;
        let got = out.len();
        let dst = out.get_mut(..at.len).ok_or(ZsError::BufferTooSmall { need: at.len, got })?;
        state.read_object(&self.mm, at, dst);
        Ok(at.len)
    }

    /// Serving class indices, smallest first.
    pub(crate) fn serving_classes(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.table.nr_classes()).filter(|&i| self.table.serving(i) == i)
    }

    /// Every class's bookkeeping checked, for tests.
    pub(crate) fn check(&self) -> Result<(), String> {
        // The deferred worker drops a class's pages under the class lock and
        // the pool's count after it: holding off drains keeps the sum and
        // the count from being read on either side of one.
        let _no_drain = self.deferred.draining.lock().unwrap_or_else(|p| p.into_inner());
        let mut pages = 0u64;
        for class in self.serving_classes() {
            let state = self.lock(class);
            state.check(&self.mm)?;
            pages += state.pages_held;
        }
        let counted = self.pages_allocated.load(Relaxed);
        if pages != counted {
            return Err(format!("zspages hold {pages} pages, the pool counts {counted}"));
        }
        Ok(())
    }
}

/// A zsmalloc pool over pages of a [`PageAllocator`] with real memory.
///
/// Objects are owned through [`Handle`]s (see its documentation): reads
/// and writes borrow a handle, frees consume it, and a handle of another
/// pool, or of a dropped one, is refused with [`ZsError::InvalidHandle`].
///
/// ```
/// use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder};
/// use mmkit_zsmalloc::{ZsError, ZsPool};
/// use std::sync::Arc;
///
/// let mm = Arc::new(MemoryMapBuilder::with_memory(64 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap());
/// let pool = ZsPool::zs_create_pool("zram0", mm.clone()).unwrap();
/// let h = pool.zs_malloc(700, Gfp::NOIO | Gfp::HIGHMEM | Gfp::MOVABLE, 0).unwrap();
/// pool.zs_obj_write(&h, &[7; 700]).unwrap();
/// let mut out = [0; 700];
/// assert_eq!(pool.zs_obj_read(&h, &mut out).unwrap(), 700);
/// assert_eq!(out, [7; 700]);
/// let other = ZsPool::zs_create_pool("zram1", mm).unwrap();
/// let id = h.id();
/// let (e, h) = other.zs_free(h).unwrap_err(); // not the other pool's: handed back
/// assert_eq!(e, ZsError::InvalidHandle(id));
/// pool.zs_free(h).unwrap(); // its own pool frees it
/// ```
pub struct ZsPool {
    pub(crate) inner: Arc<Inner>,
    pub(crate) worker: Option<Worker>,
}

impl ZsPool {
    /// The owner tag of this pool's pages (what
    /// [`Blocks::page_owner`] reports for them): an embedder's
    /// [`Migrator`](mmkit::Migrator) hands such a page to
    /// [`zs_migrate_page`](Self::zs_migrate_page).
    pub fn owner(&self) -> mmkit::PageOwner {
        self.inner.owner
    }

    /// A pool named `name` with the default chain size (8 pages), whose
    /// zspages come from `mm` (Linux's `zs_create_pool`). It starts the
    /// worker that drains deferred frees.
    ///
    /// # Errors
    /// [`ZsError::NoRealMemory`] for a metadata-only map;
    /// [`ZsError::UnsupportedPageSize`] for pages other than 4, 8, 16,
    /// 32 or 64 KiB; [`ZsError::TooManyPools`] once the process made 2^64 - 1 pools;
    /// [`ZsError::OwnerTagsExhausted`] when the page allocator has no owner
    /// tag left.
    pub fn zs_create_pool(name: &str, mm: Arc<PageAllocator>) -> Result<Self, ZsError> {
        Self::with_config(name, mm, ZsConfig::default())
    }

    /// As [`zs_create_pool`](Self::zs_create_pool), with zspage chains of
    /// at most `chain_size` pages (Linux's `CONFIG_ZSMALLOC_CHAIN_SIZE`,
    /// 4 ..= 16).
    ///
    /// # Errors
    /// [`ZsError::NoRealMemory`], [`ZsError::BadChainSize`],
    /// [`ZsError::UnsupportedPageSize`], [`ZsError::TooManyPools`],
    /// [`ZsError::OwnerTagsExhausted`].
    pub fn with_chain_size(name: &str, mm: Arc<PageAllocator>, chain_size: usize) -> Result<Self, ZsError> {
        Self::with_config(name, mm, ZsConfig { chain_size, ..ZsConfig::default() })
    }

    /// A pool built as `config` says.
    ///
    /// # Errors
    /// [`ZsError::NoRealMemory`], [`ZsError::BadChainSize`],
    /// [`ZsError::UnsupportedPageSize`], [`ZsError::TooManyPools`],
    /// [`ZsError::OwnerTagsExhausted`].
    pub fn with_config(name: &str, mm: Arc<PageAllocator>, config: ZsConfig) -> Result<Self, ZsError> {
        Self::build(name, mm, config, false)
    }

    /// A pool built as `config` says, and the [`RawKey`] under which its
    /// objects may be held as raw words, one word each (for a slot table
    /// such as zram's; see the raw calls, `zs_malloc_copy_raw` and the
    /// others). A slot of such a pool is retired after 2^27 objects, so
    /// that the 27 generation bits a word carries never repeat.
    ///
    /// # Errors
    /// As [`with_config`](Self::with_config).
    pub fn with_raw_key(name: &str, mm: Arc<PageAllocator>, config: ZsConfig) -> Result<(Self, RawKey), ZsError> {
        let pool = Self::build(name, mm, config, true)?;
        let key = RawKey { pool: pool.inner.pool_id };
        Ok((pool, key))
    }

    fn build(name: &str, mm: Arc<PageAllocator>, config: ZsConfig, raw_keyed: bool) -> Result<Self, ZsError> {
        let inner = Arc::new(Inner::new(name, mm, config, raw_keyed)?);
        let worker = Worker::start(&inner);
        Ok(Self { inner, worker: Some(worker) })
    }

    /// The pool's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The pool's id, which its handles carry: no other pool of the
    /// process has had it or will.
    pub fn id(&self) -> u64 {
        self.inner.pool_id
    }

    /// The page allocator the zspages come from.
    pub fn allocator(&self) -> &Arc<PageAllocator> {
        &self.inner.mm
    }

    /// Allocates an object of `size` bytes (1 ..= page size), preferring
    /// node `nid` for new zspages. Its contents are unspecified until
    /// written.
    ///
    /// # Errors
    /// [`ZsError::BadSize`], [`ZsError::NoMemory`].
    pub fn zs_malloc(&self, size: usize, gfp: Gfp, nid: usize) -> Result<Handle, ZsError> {
        let (class, new) = self.inner.malloc(size, None, gfp, nid, false)?;
        Ok(self.inner.handle_of(class, new))
    }

    /// [`zs_malloc`](Self::zs_malloc) of `data.len()` bytes and
    /// [`zs_obj_write`](Self::zs_obj_write) of `data`, in one hold of the
    /// class lock: a store costs one lock round trip instead of two, which
    /// is what two threads storing objects of one class wait on.
    ///
    /// # Errors
    /// As `zs_malloc`.
    pub fn zs_malloc_copy(&self, data: &[u8], gfp: Gfp, nid: usize) -> Result<Handle, ZsError> {
        let (class, new) = self.inner.malloc(data.len(), Some(data), gfp, nid, false)?;
        Ok(self.inner.handle_of(class, new))
    }

    /// [`zs_malloc_copy`](Self::zs_malloc_copy) of `data`, then
    /// [`zs_free`](Self::zs_free) of `old`: an overwrite, as zram stores a
    /// page again. When both objects are of one class the two share one
    /// hold of the class lock, the store's second lock round trip that two
    /// threads overwriting objects of one class otherwise queue on. The new
    /// object is complete before `old` goes.
    ///
    /// ```
    /// use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder};
    /// use mmkit_zsmalloc::ZsPool;
    /// use std::sync::Arc;
    ///
    /// let mm = Arc::new(MemoryMapBuilder::with_memory(16 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap());
    /// let pool = ZsPool::zs_create_pool("zram0", mm).unwrap();
    /// let gfp = Gfp::NOIO | Gfp::HIGHMEM | Gfp::MOVABLE;
    /// let old = pool.zs_malloc_copy(&[1; 1800], gfp, 0).unwrap();
    /// let new = pool.zs_replace(old, &[2; 1790], gfp, 0).unwrap(); // `old` is consumed
    /// let mut back = [0; 4096];
    /// assert_eq!(pool.zs_obj_read(&new, &mut back), Ok(1790));
    /// ```
    ///
    /// # Errors
    /// As `zs_malloc_copy`, and [`ZsError::InvalidHandle`] for a handle of
    /// another pool: then nothing changed and `old` comes back with the
    /// error.
    pub fn zs_replace(&self, old: Handle, data: &[u8], gfp: Gfp, nid: usize) -> Result<Handle, (ZsError, Handle)> {
        let name = match self.inner.name_of(&old) {
            Ok(name) => name,
            Err(e) => return Err((e, old)),
        };
        match self.inner.replace(name, data, gfp, nid, false) {
            Ok((class, new)) => Ok(self.inner.handle_of(class, new)),
            Err(e) => Err((e, old)),
        }
    }

    /// Frees `handle`'s object, consuming the handle; an emptied zspage
    /// goes back to the page allocator after the class lock is dropped.
    ///
    /// # Errors
    /// [`ZsError::InvalidHandle`] for a handle of another pool or of a
    /// dropped one, [`ZsError::Reentered`] from a `zs_obj_read_with`
    /// closure reading the object's class: nothing changes, and the handle
    /// comes back with the error (as from `zs_replace`), so that its
    /// object is not lost.
    pub fn zs_free(&self, handle: Handle) -> Result<(), (ZsError, Handle)> {
        let (class, name) = match self.inner.name_of(&handle) {
            Ok(name) => name,
            Err(e) => return Err((e, handle)),
        };
        match self.inner.free(class, &name) {
            Ok(()) => Ok(()),
            Err(e) => Err((e, handle)),
        }
    }

    /// `zs_free` as Linux had it before its 2026 series: the pool lock
    /// (read side, shared by every free) held throughout, and an emptied
    /// zspage's pages returned to the page allocator while the class lock
    /// is still held. Only with the `legacy-free` feature, to measure the
    /// series against (`mmkit bench zsmalloc`'s `release` cases).
    ///
    /// # Errors
    /// As [`zs_free`](Self::zs_free).
    #[cfg(feature = "legacy-free")]
    pub fn zs_free_pool_locked(&self, handle: Handle) -> Result<(), (ZsError, Handle)> {
        let _pool = self.inner.legacy_pool_lock.read().unwrap_or_else(|p| p.into_inner());
        let freed = self.inner.name_of(&handle).and_then(|(class, name)| {
            let mut state = self.inner.lock_checked(class)?;
            // The same free as `zs_free`'s, but the pages of an emptied
            // zspage go back while the class lock is held.
            if let Some(id) = state.free_regrouped(&name)? {
                let mut pages = take_emptied();
                state.release_zspage(id, &mut pages);
                self.inner.free_page_list(&mut pages);
                keep_emptied(pages);
            }
            Ok(())
        });
        freed.map_err(|e| (e, handle))
    }

    /// Copies `handle`'s object into `out` and returns its length.
    ///
    /// # Errors
    /// [`ZsError::InvalidHandle`], [`ZsError::BufferTooSmall`].
    pub fn zs_obj_read(&self, handle: &Handle, out: &mut [u8]) -> Result<usize, ZsError> {
        self.inner.read_into(self.inner.name_of(handle)?, out)
    }

    /// Runs `f` on `handle`'s object (Linux's `zs_obj_read_begin` …
    /// `zs_obj_read_end`): in place when the object lies in one page,
    /// otherwise copied into `local_copy` first, which must hold it.
    /// The class stays locked (for reading) while `f` runs, and is
    /// unlocked if `f` panics.
    ///
    /// `f` may call back into the pool. A call that needs the class being
    /// read (a write or free of an object of it, an allocation of its
    /// size, a replace into it) gets [`ZsError::Reentered`] (a refused free
    /// or replace hands its handle back) instead of waiting for ever on
    /// the lock this read holds; a read of the class works, or gets the
    /// same error when a writer waits.
    ///
    /// # Errors
    /// [`ZsError::InvalidHandle`], [`ZsError::BufferTooSmall`],
    /// [`ZsError::Reentered`] when this thread reads the class already.
    ///
    /// # Panics
    /// The calls with no error to give, [`zs_compact`](Self::zs_compact),
    /// [`zs_free_deferred_flush`](Self::zs_free_deferred_flush),
    /// [`zs_pool_stats`](Self::zs_pool_stats),
    /// [`check_invariants`](Self::check_invariants) (and page migration),
    /// panic when made from `f` while they need the class it reads, rather
    /// than wait for ever.
    pub fn zs_obj_read_with<R>(
        &self,
        handle: &Handle,
        local_copy: &mut [u8],
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R, ZsError> {
        self.inner.read_with(self.inner.name_of(handle)?, local_copy, f)
    }

    /// Writes `data` at the start of `handle`'s object (Linux's
    /// `zs_obj_write`).
    ///
    /// # Errors
    /// [`ZsError::InvalidHandle`], [`ZsError::TooLong`] (nothing written).
    pub fn zs_obj_write(&self, handle: &Handle, data: &[u8]) -> Result<(), ZsError> {
        self.inner.write(self.inner.name_of(handle)?, data)
    }

    /// Pages the pool holds (Linux's `zs_get_total_pages`).
    pub fn zs_get_total_pages(&self) -> u64 {
        self.inner.pages_allocated.load(Relaxed)
    }

    /// The pool's counters (Linux's `zs_pool_stats`).
    pub fn zs_pool_stats(&self) -> ZsPoolStats {
        ZsPoolStats { pages_compacted: self.inner.pages_compacted.load(Relaxed) }
    }

    /// Objects of at least this many bytes are stored one per page
    /// (Linux's `zs_huge_class_size`); zram stores a page that compresses
    /// no smaller uncompressed.
    pub fn zs_huge_class_size(&self) -> usize {
        self.inner.table.huge_class_size()
    }

    /// The class an object of `size` bytes lands in (Linux's
    /// `zs_lookup_class_index`).
    pub fn zs_lookup_class_index(&self, size: usize) -> usize {
        self.inner.table.class_for(size + ZS_HANDLE_SIZE)
    }

    /// Checks every class's bookkeeping (groups, counts, every live
    /// handle's object header) and the pool's page count.
    ///
    /// # Errors
    /// The first inconsistency, described.
    pub fn check_invariants(&self) -> Result<(), String> {
        self.inner.check()
    }
}

impl Drop for ZsPool {
    /// Linux's `zs_destroy_pool`: deferred frees are finished, then every
    /// page goes back to the page allocator. Handles still held become
    /// invalid with the pool.
    fn drop(&mut self) {
        if let Some(worker) = self.worker.take() {
            worker.stop();
        }
        // What is still queued is freed first (the deferred free's
        // flush, through the trait the worker drains by).
        self.inner.drain(true);
        for class in 0..self.inner.classes.len() {
            let pages = self.inner.lock(class).take_all_pages();
            self.inner.free_pages(pages);
        }
    }
}

/// The classes this thread reads in `zs_obj_read_with` closures, innermost
/// last: what tells a busy class lock that waiting would wait on this
/// thread itself.
///
/// Plain `Cell`s of `Copy` data with constant initial values, so the
/// thread-locals need no destructor: a read from another thread-local's
/// destructor (a `SwapRegion` touched while a thread exits) still finds
/// them, and entering a read allocates nothing.
mod reading {
    use super::ZsError;
    use std::cell::Cell;

    /// Reads one thread may nest in each other's closures.
    pub(crate) const MAX_NESTED_READS: usize = 16;

    std::thread_local! {
        static HELD: Cell<[(u64, usize); MAX_NESTED_READS]> = const { Cell::new([(0, 0); MAX_NESTED_READS]) };
        static DEPTH: Cell<usize> = const { Cell::new(0) };
    }

    /// Whether this thread reads class `class` of pool `pool` in a closure.
    pub(super) fn holds(pool: u64, class: usize) -> bool {
        let depth = DEPTH.with(Cell::get);
        HELD.with(|held| held.get()[..depth].contains(&(pool, class)))
    }

    /// One read in progress; dropped (also by a panic of the closure
    /// unwinding through it) it is gone from the thread's list.
    pub(super) struct Reading(());

    impl Reading {
        /// Records a read of `class` of `pool`, or refuses one nested
        /// [`MAX_NESTED_READS`] deep.
        pub(super) fn enter(pool: u64, class: usize) -> Result<Self, ZsError> {
            let depth = DEPTH.with(Cell::get);
            if depth >= MAX_NESTED_READS {
                return Err(ZsError::ReadsNestedTooDeep { max: MAX_NESTED_READS });
            }
            HELD.with(|held| {
                let mut all = held.get();
                all[depth] = (pool, class);
                held.set(all);
            });
            DEPTH.with(|d| d.set(depth + 1));
            Ok(Self(()))
        }
    }

    impl Drop for Reading {
        fn drop(&mut self) {
            DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
        }
    }
}
