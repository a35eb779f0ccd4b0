//! The device's lifecycle, as Linux's zram has it (`zram_drv.c`): a device
//! is *initialised* by writing `disksize` (`disksize_store`), after which
//! its configuration (`disksize`, `comp_algorithm`, `recomp_algorithm`,
//! `backing_dev`, `max_comp_streams`) is busy; `reset` (`reset_store`) is
//! refused while the device is open (`disk_openers`, EBUSY) and otherwise
//! frees everything and returns it to *uninitialised* with every statistic
//! zeroed (`zram_reset_device`), where it can be configured again.
//!
//! Owns the public [`Zram`]: a slot holding the initialised device (or
//! nothing), the configuration of an uninitialised one, and the count of
//! openers. The slot is sharded like the hot counters: each thread reads
//! its own shard's reader lock, so the data path pays one uncontended
//! read lock, never a cache line shared with other threads; setting up and
//! resetting take every shard's write lock, in order, and so wait for the
//! I/O in flight (the kernel's `dev_lock`). Everything below the slot is
//! the device's (`device`), which knows nothing of the lifecycle.

use crate::config::ZramConfig;
use crate::counters::{hot_shard, MmStat, HOT_SHARDS};
use crate::device::Device;
use crate::recompress::RecompressParams;
use crate::writeback::WritebackMode;
use crate::PAGE_SIZE;
use crate::{Algorithm, Dictionary, Extent, ZramError};
use mmkit::PageAllocator;
use mmkit::{Cpus, Tuning};
use mmkit_zsmalloc::ZsPool;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::AcqRel, Ordering::Acquire, Ordering::Release};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard};

/// Set in [`Zram::openers`] while a reset runs: opens are refused (the
/// kernel's `zram->claim`).
const CLAIM: u64 = 1 << 63;

/// One shard of the device slot, alone on its cache lines.
#[repr(align(128))]
#[derive(Default)]
struct Shard(RwLock<Option<Arc<Device>>>);

/// Where an initialised device's pages come from.
enum Memory {
    /// A page allocator of its own per initialisation, sized to what the
    /// device may really use ([`Zram::with_own_memory`]).
    Own,
    /// The caller's.
    Shared(Arc<PageAllocator>),
}

/// The configuration while uninitialised, and the lifecycle's lock.
struct Setup {
    pending: ZramConfig,
}

/// A zram device: initialised when built with a configuration, and after
/// a [`reset`](Self::reset) uninitialised until `disksize` is written.
///
/// # Ownership
///
/// Reads and writes go only through an [`OpenHandle`] ([`open`](Self::open)):
/// while any handle lives, [`reset`](Self::reset) is [`ZramError::Busy`],
/// so a reset can never discard the data of a user it did not see. There
/// is no I/O on `&Zram`:
///
/// ```compile_fail,E0599
/// # use mmkit_zram::{Zram, ZramConfig};
/// let zram = Zram::with_own_memory(ZramConfig { disksize: 1 << 20, ..ZramConfig::default() }).unwrap();
/// zram.write(0, b"no handle").unwrap(); // error[E0599]: no method named `write`
/// ```
///
/// Setters that act on the initialised device (`mem_limit`, the writeback
/// limit, the actions of [`attr_store`](Self::attr_store)) hold it for the
/// whole call, so a reset waits for them and they never land on a device
/// a reset already dropped.
///
/// Any number of threads may do I/O at once; setting up and resetting wait
/// for the I/O in flight. On an uninitialised device I/O and actions are
/// [`ZramError::NotInitialised`], statistics read as zeroes.
///
/// ```
/// use mmkit_zram::{Zram, ZramConfig, ZramError};
///
/// let zram = Zram::with_own_memory(ZramConfig { disksize: 1 << 20, ..ZramConfig::default() }).unwrap();
/// let open = zram.open().unwrap();                    // a user, as a mounted disk is
/// open.write(4096 + 10, b"hello").unwrap();           // I/O only through an open handle
/// assert!(matches!(zram.attr_store("reset", "1"), Err(ZramError::Busy(_))));
/// drop(open);
/// zram.attr_store("reset", "1").unwrap();             // back to uninitialised
/// assert_eq!(zram.attr_show("initstate").unwrap(), "0\n");
/// assert_eq!(zram.open().unwrap().write(0, b"x"), Err(ZramError::NotInitialised));
/// zram.attr_store("comp_algorithm", "zstd").unwrap();
/// zram.attr_store("disksize", "64K").unwrap();        // initialised again
/// assert_eq!(zram.attr_show("comp_algorithm").unwrap(), "lz4 lz4_flex lz4hc [zstd]\n");
/// ```
pub struct Zram {
    shards: Box<[Shard]>,
    setup: Mutex<Setup>,
    /// Open users, plus [`CLAIM`] while a reset runs.
    openers: AtomicU64,
    /// `max_comp_streams`: kept for the kernel's interface only (per-CPU
    /// streams made it a no-op; Linux removed it in 2025).
    max_comp_streams: AtomicU64,
    memory: Memory,
}

/// A user of the device (a connection, a mount): while any exists,
/// [`Zram::reset`] is [`ZramError::Busy`]. Dropping it closes.
///
/// Every read and write goes through one ([`read`](Self::read),
/// [`write`](Self::write), [`discard`](Self::discard),
/// [`write_zeroes`](Self::write_zeroes),
/// [`slot_free_notify`](Self::slot_free_notify)): a writer is always one of
/// the openers `reset` counts, so a reset never drops the data of a user it
/// did not see.
#[must_use = "the device counts as open only while the handle lives"]
pub struct OpenHandle<'a> {
    zram: &'a Zram,
}

/// The I/O of a user: only through an open handle, so that
/// [`Zram::reset`]'s busy check covers every reader and writer (Linux's
/// block layer reaches `zram_bio_read`/`zram_bio_write` only through an
/// opened block device).
impl<'a> OpenHandle<'a> {
    /// Reads `buf.len()` bytes at `offset`. Never-written bytes read as 0.
    ///
    /// # Errors
    /// [`ZramError::NotInitialised`]; [`ZramError::OutOfRange`];
    /// [`ZramError::Corrupt`] if a page does not decompress (counted in
    /// `failed_reads`).
    #[inline]
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<(), ZramError> {
        self.zram.with(|d| d.read(offset, buf))
    }

    /// Writes `data` at `offset`; partial pages are read, patched and
    /// written whole, under their slot lock.
    ///
    /// # Errors
    /// [`ZramError::NotInitialised`]; [`ZramError::OutOfRange`] (nothing
    /// written); [`ZramError::NoSpace`] at `mem_limit` or when the page
    /// allocator has no page (the pages before it were written, this one
    /// and those after were not); [`ZramError::Corrupt`] if a partial
    /// page's old contents do not decompress.
    #[inline]
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<(), ZramError> {
        self.zram.with(|d| d.write(offset, data))
    }

    /// Frees the whole pages inside `[offset, offset + len)` (zram's
    /// discard); partial pages are left as they are.
    ///
    /// # Errors
    /// [`ZramError::NotInitialised`]; [`ZramError::OutOfRange`].
    pub fn discard(&self, offset: u64, len: u64) -> Result<(), ZramError> {
        self.zram.with(|d| d.discard(offset, len))
    }

    /// Makes `[offset, offset + len)` read as zeroes: whole pages are
    /// freed, the partial pages at the ends are written with zeroes.
    ///
    /// # Errors
    /// As [`write`](Self::write).
    pub fn write_zeroes(&self, offset: u64, len: u64) -> Result<(), ZramError> {
        self.zram.with(|d| d.write_zeroes(offset, len))
    }

    /// Nothing to do: the device is RAM.
    pub fn flush(&self) {}

    /// The device this handle holds open (its attributes and actions).
    pub fn zram(&self) -> &'a Zram {
        self.zram
    }

    /// The free notification of a swap-like user (Linux's
    /// `zram_slot_free_notify`); nothing on an uninitialised device.
    pub fn slot_free_notify(&self, index: usize) {
        let _ = self.zram.with(|d| {
            d.slot_free_notify(index);
            Ok(())
        });
    }

    /// [`slot_free_notify`](Self::slot_free_notify) as Linux had it before
    /// its 2026 series made it deferred: the page's object is freed before
    /// the call returns (`zs_free`). For callers that want the memory back
    /// at once, and to measure the deferred free against.
    pub fn slot_free_notify_sync(&self, index: usize) {
        let _ = self.zram.with(|d| {
            d.slot_free_notify_sync(index);
            Ok(())
        });
    }

    /// [`slot_free_notify`](Self::slot_free_notify) of every slot in
    /// `first .. first + count`, as the swap layer sends it for each slot
    /// of a range it frees (Linux's `swap_range_free`, a swap cluster of
    /// up to 512 slots at a time on a process exit): the device is held
    /// once for the run and the counters are updated once, instead of
    /// once a slot. Indices past the device count as invalid I/O, one
    /// each; nothing happens on an uninitialised device.
    pub fn slot_free_notify_range(&self, first: usize, count: usize) {
        let _ = self.zram.with(|d| {
            d.slot_free_notify_range(first, count, true);
            Ok(())
        });
    }

    /// [`slot_free_notify_range`](Self::slot_free_notify_range) with each
    /// object freed before the call returns, as
    /// [`slot_free_notify_sync`](Self::slot_free_notify_sync) does.
    pub fn slot_free_notify_range_sync(&self, first: usize, count: usize) {
        let _ = self.zram.with(|d| {
            d.slot_free_notify_range(first, count, false);
            Ok(())
        });
    }
}

impl Drop for OpenHandle<'_> {
    fn drop(&mut self) {
        self.zram.openers.fetch_sub(1, AcqRel);
    }
}

impl Zram {
    fn build(memory: Memory, config: ZramConfig) -> Result<Self, ZramError> {
        let device = match &memory {
            Memory::Own => Device::with_own_memory(config.clone())?,
            Memory::Shared(mm) => Device::new(Arc::clone(mm), config.clone())?,
        };
        let device = Arc::new(device);
        let shards = (0..HOT_SHARDS).map(|_| Shard(RwLock::new(Some(Arc::clone(&device))))).collect();
        Ok(Self {
            shards,
            setup: Mutex::new(Setup { pending: config }),
            openers: AtomicU64::new(0),
            max_comp_streams: AtomicU64::new(default_streams()),
            memory,
        })
    }

    /// An initialised device of `config.disksize` bytes over a new zsmalloc
    /// pool on `mm` (a reset device set up again uses `mm` too).
    ///
    /// # Errors
    /// [`ZramError::Pool`] when the pool cannot be made (no real memory);
    /// [`ZramError::Invalid`] for a zero size, a bad chain size or no
    /// memory for the slot table's directory; [`ZramError::Backing`] when
    /// `backing_dev` cannot be opened or holds less than one page;
    /// [`ZramError::Busy`] when another device holds it.
    pub fn new(mm: Arc<PageAllocator>, config: ZramConfig) -> Result<Self, ZramError> {
        Self::build(Memory::Shared(mm), config)
    }

    /// An initialised device on a page allocator of its own, sized to what
    /// the device may really hold — the smallest of every page stored raw,
    /// `mem_limit` and the machine's memory — which the system commits only
    /// as pages are used. Each initialisation after a reset gets a new one.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn with_own_memory(config: ZramConfig) -> Result<Self, ZramError> {
        Self::build(Memory::Own, config)
    }

    /// The device, for one call: this thread's shard, read-locked.
    #[inline]
    fn current(&self) -> RwLockReadGuard<'_, Option<Arc<Device>>> {
        self.shards[hot_shard()].0.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The device, or none, without holding any lock (for everything but
    /// the data path: a lock on the lifecycle may then be taken safely).
    fn device(&self) -> Option<Arc<Device>> {
        self.current().clone()
    }

    /// Runs `f` on the initialised device.
    #[inline]
    fn with<R>(&self, f: impl FnOnce(&Device) -> Result<R, ZramError>) -> Result<R, ZramError> {
        match self.current().as_deref() {
            Some(device) => f(device),
            None => Err(ZramError::NotInitialised),
        }
    }

    /// Puts `new` in every shard (waiting for the I/O in flight) and
    /// returns the device it replaces.
    fn replace(&self, new: Option<Arc<Device>>) -> Option<Arc<Device>> {
        let mut guards: Vec<_> =
            self.shards.iter().map(|s| s.0.write().unwrap_or_else(PoisonError::into_inner)).collect();
        let old = guards[0].take();
        for guard in &mut guards {
            **guard = new.clone();
        }
        old
    }

    fn lock_setup(&self) -> std::sync::MutexGuard<'_, Setup> {
        self.setup.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether the device is initialised (`initstate`).
    pub fn is_initialised(&self) -> bool {
        self.current().is_some()
    }

    /// Registers a user (Linux's `zram_open`); the device counts as open
    /// until the handle is dropped.
    ///
    /// # Errors
    /// [`ZramError::Busy`] while a reset runs.
    pub fn open(&self) -> Result<OpenHandle<'_>, ZramError> {
        self.openers
            .fetch_update(AcqRel, Acquire, |n| (n & CLAIM == 0).then_some(n + 1))
            .map_err(|_| ZramError::Busy("the device is being reset".into()))?;
        Ok(OpenHandle { zram: self })
    }

    /// Users holding the device open.
    pub fn openers(&self) -> u64 {
        self.openers.load(Acquire) & !CLAIM
    }

    /// Frees every page and returns the device to uninitialised, with
    /// every statistic zeroed, `mem_limit` 0, no backing file and the
    /// default algorithms (Linux's `reset_store` and `zram_reset_device`).
    /// The chain size is kept: it is zsmalloc's, not an attribute.
    ///
    /// # Errors
    /// [`ZramError::Busy`] while the device is open ([`open`](Self::open))
    /// or another reset runs; nothing is changed.
    pub fn reset(&self) -> Result<(), ZramError> {
        if let Err(n) = self.openers.compare_exchange(0, CLAIM, AcqRel, Acquire) {
            return Err(ZramError::Busy(if n & CLAIM != 0 {
                "reset: another reset is running".into()
            } else {
                format!("reset: the device is open ({} user{})", n, if n == 1 { "" } else { "s" })
            }));
        }
        let old = {
            let mut setup = self.lock_setup();
            let chain_size = setup.pending.chain_size;
            setup.pending = ZramConfig { disksize: 0, chain_size, ..ZramConfig::default() };
            self.max_comp_streams.store(default_streams(), Release);
            self.replace(None)
        };
        self.openers.fetch_and(!CLAIM, AcqRel);
        // Dropped here, outside every lock: the pool gives its pages back
        // and the backing file's lock goes with the file. A map nobody
        // else holds goes with it; one still shared (the caller's, or one a
        // user kept) is asked to give its free memory back to the OS (free
        // page reporting), as `compact` does.
        let mm = old.as_ref().map(|device| Arc::clone(device.pool.allocator()));
        drop(old);
        if let Some(Err(shared)) = mm.map(Arc::try_unwrap) {
            Cpus::new(&shared).drain_all_pages();
            Tuning::new(&shared).report_free_pages();
        }
        Ok(())
    }

    /// Initialises an uninitialised device with its configuration and
    /// `disksize` (Linux's `disksize_store`).
    fn initialise(&self, setup: &mut Setup, disksize: &str) -> Result<(), ZramError> {
        let mut config = setup.pending.clone();
        config.set("disksize", disksize)?;
        let device = match &self.memory {
            Memory::Own => Device::with_own_memory(config.clone())?,
            Memory::Shared(mm) => Device::new(Arc::clone(mm), config.clone())?,
        };
        setup.pending = config;
        self.replace(Some(Arc::new(device)));
        Ok(())
    }

    /// Stores a configuration attribute: only while uninitialised, as the
    /// kernel's `*_store` functions check `init_done` and answer EBUSY.
    fn store_config(&self, name: &str, value: &str) -> Result<(), ZramError> {
        let mut setup = self.lock_setup();
        if self.is_initialised() {
            return Err(ZramError::Busy(format!("{name}: the device is initialised; reset it first")));
        }
        match name {
            "disksize" => self.initialise(&mut setup, value),
            "max_comp_streams" => {
                let n = value
                    .parse()
                    .ok()
                    .filter(|&n: &u64| n > 0)
                    .ok_or_else(|| ZramError::Invalid(format!("max_comp_streams: {value:?} is not a count")))?;
                self.max_comp_streams.store(n, Release);
                Ok(())
            }
            _ => {
                let mut config = setup.pending.clone();
                config.set(name, value)?;
                if let Some(path) = &config.backing_dev {
                    // Refused now, as the kernel's `backing_dev_store`
                    // opens and claims the file at once.
                    crate::backing::BackingDev::open(path)?;
                }
                setup.pending = config;
                Ok(())
            }
        }
    }

    /// The device size in bytes (0 while uninitialised).
    pub fn disksize(&self) -> u64 {
        self.current().as_deref().map_or(0, Device::disksize)
    }

    /// The primary compression algorithm (the one set for the next
    /// initialisation while uninitialised).
    pub fn algorithm(&self) -> Algorithm {
        match self.device() {
            Some(device) => device.algorithm(),
            None => self.lock_setup().pending.algorithm,
        }
    }

    /// The dictionary of the algorithm of `priority` (0 the primary), if
    /// the device is initialised and that algorithm has one
    /// (`algorithm_params dict=PATH`).
    pub fn dictionary(&self, priority: usize) -> Option<Dictionary> {
        self.device()?.dictionary(priority).cloned()
    }

    /// The secondary algorithms, by priority.
    pub fn recomp_algorithms(&self) -> Vec<Algorithm> {
        match self.device() {
            Some(device) => device.recomp_algorithms().to_vec(),
            None => self.lock_setup().pending.recomp_algorithms.clone(),
        }
    }

    /// The memory limit in bytes (0: none).
    pub fn mem_limit(&self) -> u64 {
        match self.device() {
            Some(device) => device.mem_limit(),
            None => self.lock_setup().pending.mem_limit,
        }
    }

    /// Sets the memory limit (0: none); pages stored beyond it stay.
    ///
    /// # Errors
    /// [`ZramError::Invalid`] for a limit below one page, or above the
    /// memory the device's page allocator has (or, before
    /// initialisation, the machine's); nothing is changed.
    pub fn set_mem_limit(&self, bytes: u64) -> Result<(), ZramError> {
        if bytes != 0 && bytes < PAGE_SIZE as u64 {
            return Err(ZramError::Invalid(format!("mem_limit {bytes}: below one {PAGE_SIZE}-byte page")));
        }
        // Under the setup lock, which `reset` and `initialise` hold while
        // they swap the device: the device found here is the current one
        // until the limit is set, never one a reset dropped meanwhile (the
        // limit would be lost with it, and the call would say Ok).
        let mut setup = self.lock_setup();
        if let Some(device) = self.device() {
            return device.set_mem_limit(bytes);
        }
        let most = crate::config::machine_memory().unwrap_or(u64::MAX);
        if bytes > most {
            return Err(ZramError::Invalid(format!("mem_limit {bytes}: more than this machine's {most} bytes")));
        }
        setup.pending.mem_limit = bytes;
        Ok(())
    }

    /// The zsmalloc pool under the device (`None` while uninitialised).
    pub fn pool(&self) -> Option<Arc<ZsPool>> {
        self.current().as_deref().map(|d| Arc::clone(&d.pool))
    }

    /// Marks every stored page idle (`echo all > idle`).
    ///
    /// # Errors
    /// [`ZramError::NotInitialised`].
    pub fn idle_all(&self) -> Result<(), ZramError> {
        self.with(|d| {
            d.idle_all();
            Ok(())
        })
    }

    /// Marks idle the pages not accessed for `seconds` (`echo N > idle`).
    ///
    /// # Errors
    /// [`ZramError::NotInitialised`].
    pub fn idle_older_than(&self, seconds: u32) -> Result<(), ZramError> {
        self.with(|d| {
            d.idle_older_than(seconds);
            Ok(())
        })
    }

    /// Compacts the pool (`echo 1 > compact`); returns the pages freed.
    ///
    /// # Errors
    /// [`ZramError::NotInitialised`].
    pub fn compact(&self) -> Result<u64, ZramError> {
        self.with(|d| Ok(d.compact()))
    }

    /// Recompresses the pages `params` picks with the secondary algorithms;
    /// returns how many got smaller. See `RecompressParams`.
    ///
    /// # Errors
    /// [`ZramError::NotInitialised`]; as the device's recompression pass.
    pub fn recompress(&self, params: &RecompressParams) -> Result<u64, ZramError> {
        self.with(|d| d.recompress(params))
    }

    /// Writes the pages `mode` picks to the backing file; returns how many.
    ///
    /// # Errors
    /// [`ZramError::NotInitialised`]; [`ZramError::NoBackingDev`];
    /// [`ZramError::WritebackLimit`] and [`ZramError::BackingFull`] carry
    /// the pages written before the pass stopped.
    pub fn writeback(&self, mode: WritebackMode) -> Result<u64, ZramError> {
        self.with(|d| d.writeback(mode))
    }

    /// Sets `writeback_limit`, in 4 KiB pages.
    ///
    /// # Errors
    /// [`ZramError::NotInitialised`].
    pub fn set_writeback_limit(&self, pages: u64) -> Result<(), ZramError> {
        self.with(|d| {
            d.set_writeback_limit(pages);
            Ok(())
        })
    }

    /// The pages writeback may still write while the limit is enabled.
    pub fn writeback_limit(&self) -> u64 {
        self.device().map_or(0, |d| d.writeback_limit())
    }

    /// Turns `writeback_limit` on or off.
    ///
    /// # Errors
    /// [`ZramError::NotInitialised`].
    pub fn set_writeback_limit_enable(&self, on: bool) -> Result<(), ZramError> {
        self.with(|d| {
            d.set_writeback_limit_enable(on);
            Ok(())
        })
    }

    /// Whether `writeback_limit` applies.
    pub fn writeback_limit_enable(&self) -> bool {
        self.device().is_some_and(|d| d.writeback_limit_enable())
    }

    /// The backing file, if the device has one (or will, once set up).
    pub fn backing_dev(&self) -> Option<PathBuf> {
        match self.device() {
            Some(device) => device.backing_dev().map(PathBuf::from),
            None => self.lock_setup().pending.backing_dev.clone(),
        }
    }

    /// Runs of holes, zero pages and data covering `[offset, offset + len)`.
    ///
    /// # Errors
    /// [`ZramError::NotInitialised`]; [`ZramError::OutOfRange`].
    pub fn extents(&self, offset: u64, len: u64) -> Result<Vec<Extent>, ZramError> {
        self.with(|d| d.extents(offset, len))
    }

    /// `mm_stat` as numbers (zeroes while uninitialised).
    pub fn mm_stat_values(&self) -> MmStat {
        self.current().as_deref().map(Device::mm_stat_values).unwrap_or_default()
    }

    /// `mm_stat` as the kernel prints it.
    pub fn mm_stat(&self) -> String {
        self.mm_stat_values().to_string()
    }

    /// `io_stat`: failed reads, failed writes, invalid I/O, notifications.
    pub fn io_stat(&self) -> String {
        self.current().as_deref().map_or_else(|| format!("{:>8} {:>8} {:>8} {:>8}\n", 0, 0, 0, 0), Device::io_stat)
    }

    /// `bd_stat`: pages on the backing file, read from it, written to it.
    pub fn bd_stat(&self) -> String {
        self.current().as_deref().map_or_else(|| format!("{:>8} {:>8} {:>8}\n", 0, 0, 0), Device::bd_stat)
    }

    /// `debug_stat`: the format version and `miss_free`.
    pub fn debug_stat(&self) -> String {
        self.current().as_deref().map_or_else(|| format!("version: 1\n{:>8}\n", 0), Device::debug_stat)
    }

    /// debugfs `block_state`: one line per stored page.
    pub fn block_state(&self) -> String {
        self.current().as_deref().map(Device::block_state).unwrap_or_default()
    }

    /// The text of a zram attribute, as `cat /sys/block/zramN/NAME` prints
    /// it; statistics of an uninitialised device are zeroes.
    ///
    /// # Errors
    /// [`ZramError::Invalid`] for a name not in `SHOW_ATTRS`.
    pub fn attr_show(&self, name: &str) -> Result<String, ZramError> {
        if name == "max_comp_streams" {
            return Ok(format!("{}\n", self.max_comp_streams.load(Acquire)));
        }
        if let Some(device) = self.device() {
            return match name {
                "initstate" => Ok("1\n".into()),
                _ => device.attr_show(name),
            };
        }
        let setup = self.lock_setup();
        let config = &setup.pending;
        Ok(match name {
            "initstate" | "disksize" | "mem_used_max" | "writeback_limit" | "writeback_limit_enable" => "0\n".into(),
            "mem_limit" => format!("{}\n", config.mem_limit),
            "comp_algorithm" => crate::attrs::algorithm_choice(config.algorithm),
            "recomp_algorithm" => crate::attrs::recomp_choices(&config.recomp_algorithms),
            "backing_dev" => config.backing_dev.as_ref().map_or("none\n".into(), |p| format!("{}\n", p.display())),
            "mm_stat" => MmStat::default().to_string(),
            "io_stat" => format!("{:>8} {:>8} {:>8} {:>8}\n", 0, 0, 0, 0),
            "bd_stat" => format!("{:>8} {:>8} {:>8}\n", 0, 0, 0),
            "debug_stat" => format!("version: 1\n{:>8}\n", 0),
            "block_state" => String::new(),
            _ => return Err(ZramError::Invalid(format!("no attribute {name:?} to show"))),
        })
    }

    /// Stores `value` into a zram attribute, as `echo VALUE >
    /// /sys/block/zramN/NAME` does; returns what the action reports (pages
    /// written back, recompressed or compacted), or an empty string.
    ///
    /// # Errors
    /// [`ZramError::Invalid`] for a name not in `STORE_ATTRS` or a value
    /// it does not take; [`ZramError::Busy`] for a configuration attribute
    /// of an initialised device, or `reset` of an open one;
    /// [`ZramError::NotInitialised`] for an action on an uninitialised
    /// one; the action's own errors. A refused store changes nothing.
    pub fn attr_store(&self, name: &str, value: &str) -> Result<String, ZramError> {
        let value = value.trim();
        match name {
            "reset" => {
                // `reset_store`: kstrtou16, and 0 is EINVAL.
                if !value.parse::<u16>().is_ok_and(|n| n != 0) {
                    return Err(ZramError::Invalid(format!("reset: {value:?}; write 1")));
                }
                self.reset()?;
            }
            "disksize" | "comp_algorithm" | "comp" | "recomp_algorithm" | "recomp" | "backing_dev"
            | "max_comp_streams" | "algorithm_params" | "backing_overwrite" => {
                let name = match name {
                    "comp" => "comp_algorithm",
                    "recomp" => "recomp_algorithm",
                    other => other,
                };
                self.store_config(name, value)?;
            }
            "mem_limit" => {
                let bytes = crate::size::parse_size(value)
                    .map_err(|e| ZramError::Invalid(format!("mem_limit {value:?}: {e}")))?;
                self.set_mem_limit(bytes)?;
            }
            _ => return self.with(|d| d.attr_store(name, value)),
        }
        Ok(String::new())
    }
}

/// `max_comp_streams`' default: one per CPU, as per-CPU streams give.
/// Counted once per process: the count reads cgroup files, and a reset
/// would otherwise pay those system calls every time.
fn default_streams() -> u64 {
    static STREAMS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *STREAMS.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `mem_limit` set while a reset swaps the device out lands on the
    /// device that is current when it is applied, never on the one the
    /// reset dropped. Before issue 37 the setter cloned the device outside
    /// the setup lock and set the limit on it with no lock held: here it
    /// ran while the test held the lock, set the limit on the device about
    /// to go, answered Ok, and the limit was lost with the device.
    #[test]
    fn a_mem_limit_racing_a_reset_is_not_lost_with_the_old_device() {
        let zram = Zram::with_own_memory(ZramConfig { disksize: 1 << 20, ..ZramConfig::default() }).unwrap();
        let setup = zram.lock_setup();
        std::thread::scope(|s| {
            let setter = s.spawn(|| zram.set_mem_limit(8 << 20));
            // Give the setter every chance to run now (it must wait).
            std::thread::sleep(std::time::Duration::from_millis(50));
            // What `reset` does under the setup lock: the device goes.
            let old = zram.replace(None);
            assert!(old.is_some());
            drop(setup);
            assert_eq!(setter.join().unwrap(), Ok(()));
        });
        assert_eq!(zram.mem_limit(), 8 << 20, "the limit the call answered Ok for is in force");
        assert_eq!(zram.attr_show("mem_limit").unwrap(), format!("{}\n", 8 << 20));
    }
}
