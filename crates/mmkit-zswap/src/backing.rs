//! The backing swap device: a file of 4 KiB slots with its own slot
//! allocator (Linux's `swap_info_struct` and its `swap_map`, reduced to one
//! bit per slot), locked exclusively so that no second owner can write over
//! swapped pages.
//!
//! The lock is `flock(LOCK_EX | LOCK_NB)`, which belongs to the open file
//! description: a second open of the same file, from this process or
//! another, gets [`ZswapError::Busy`]. Owns the file, the lock and the slot
//! bitmap; knows nothing of zswap's entries.

use crate::{ZswapError, PAGE_SIZE};
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// Which slots are taken: one bit each, and where to start looking.
struct SlotMap {
    bits: Vec<u64>,
    used: u64,
    /// The word the last allocation came from (Linux's `cluster_next`, in
    /// spirit): allocation scans forward from it.
    hint: usize,
}

impl SlotMap {
    /// The file's size and an empty bitmap for `nr_slots` slots, or why
    /// they cannot be had: checked before anything touches the disk.
    fn new(nr_slots: u64) -> Result<(u64, Self), ZswapError> {
        if nr_slots == 0 {
            return Err(ZswapError::SwapFull);
        }
        let too_many = ZswapError::TooManySlots(nr_slots);
        let bytes = match nr_slots.checked_mul(PAGE_SIZE as u64) {
            Some(bytes) if i64::try_from(bytes).is_ok() => bytes,
            _ => return Err(too_many),
        };
        // The bitmap takes a bit per slot; one larger than a quarter of the
        // machine's memory is refused rather than left to the OOM killer
        // (an allocation that overcommit grants is only made real as it is
        // zeroed).
        let bitmap_bytes = nr_slots.div_ceil(64) * 8;
        if bitmap_bytes > machine_memory() / 4 {
            return Err(too_many);
        }
        let words = usize::try_from(nr_slots.div_ceil(64)).map_err(|_| ZswapError::TooManySlots(nr_slots))?;
        let mut bits = Vec::new();
        bits.try_reserve_exact(words).map_err(|_| too_many)?;
        bits.resize(words, 0u64);
        // Bits past the last slot are permanently taken.
        if nr_slots % 64 != 0 {
            bits[words - 1] = !0u64 << (nr_slots % 64);
        }
        Ok((bytes, Self { bits, used: 0, hint: 0 }))
    }
}

/// Bytes of memory this machine has (`u64::MAX` where it cannot be read).
pub(crate) fn machine_memory() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(u64::MAX, |kib| kib.saturating_mul(1024))
}

/// A swap file: `nr_slots` slots of 4 KiB, exclusively locked while open.
pub struct SwapFile {
    file: File,
    nr_slots: u64,
    map: Mutex<SlotMap>,
    /// Test hook: the next this-many slot writes fail.
    fail_writes: AtomicU64,
}

impl core::fmt::Debug for SwapFile {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("SwapFile").field("nr_slots", &self.nr_slots).field("used", &self.used_slots()).finish()
    }
}

impl SwapFile {
    /// Opens (creating it if needed) the file at `path` as a swap device of
    /// `nr_slots` slots, sized to `nr_slots × 4 KiB`, and locks it.
    ///
    /// # Errors
    /// [`ZswapError::SwapFull`] for 0 slots and [`ZswapError::TooManySlots`]
    /// for a count whose file or slot bitmap cannot be made, both before
    /// anything is created on disk; [`ZswapError::Busy`] when another owner
    /// holds the lock (nothing is changed, the file is not resized);
    /// [`ZswapError::Io`] when it cannot be opened or sized (a file this
    /// call created is removed again).
    pub fn open(path: &Path, nr_slots: u64) -> Result<Self, ZswapError> {
        let (bytes, map) = SlotMap::new(nr_slots)?;
        let created = OpenOptions::new().read(true).write(true).create_new(true).open(path);
        let (file, created) = match created {
            Ok(file) => (file, true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                (OpenOptions::new().read(true).write(true).open(path)?, false)
            }
            Err(e) => return Err(e.into()),
        };
        let opened = Self::from_file(file, nr_slots, bytes, map);
        if opened.is_err() && created {
            let _ = std::fs::remove_file(path);
        }
        opened
    }

    /// A swap file of `nr_slots` slots in the system's temporary directory,
    /// unlinked at once so that it disappears with its last descriptor.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn create_temp(nr_slots: u64) -> Result<Self, ZswapError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let (bytes, map) = SlotMap::new(nr_slots)?;
        let name = format!("mmkit-zswap-{}-{}", std::process::id(), NEXT.fetch_add(1, Relaxed));
        let path = std::env::temp_dir().join(name);
        let file = OpenOptions::new().read(true).write(true).create_new(true).open(&path)?;
        let _ = std::fs::remove_file(&path);
        Self::from_file(file, nr_slots, bytes, map)
    }

    fn from_file(file: File, nr_slots: u64, bytes: u64, map: SlotMap) -> Result<Self, ZswapError> {
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(e) if e == rustix::io::Errno::WOULDBLOCK => return Err(ZswapError::Busy),
            Err(e) => return Err(ZswapError::Io(e.into())),
        }
        if file.metadata()?.len() < bytes {
            file.set_len(bytes)?;
        }
        Ok(Self { file, nr_slots, map: Mutex::new(map), fail_writes: AtomicU64::new(0) })
    }

    /// Slots in the file.
    pub fn nr_slots(&self) -> u64 {
        self.nr_slots
    }

    /// Slots allocated.
    pub fn used_slots(&self) -> u64 {
        self.lock().used
    }

    /// Test hook: the next `n` slot writes fail with an I/O error (a full
    /// or failing disk under writeback).
    pub fn fail_next_writes(&self, n: u64) {
        self.fail_writes.store(n, Relaxed);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SlotMap> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A free slot, now allocated.
    pub(crate) fn alloc_slot(&self) -> Option<u64> {
        let mut map = self.lock();
        let n = map.bits.len();
        let start = map.hint;
        for k in 0..n {
            let w = (start + k) % n;
            let word = map.bits[w];
            if word != !0 {
                let bit = (!word).trailing_zeros();
                map.bits[w] |= 1 << bit;
                map.used += 1;
                map.hint = w;
                return Some(w as u64 * 64 + u64::from(bit));
            }
        }
        None
    }

    /// Frees slot `offset`; false (and nothing changed) when it was not
    /// allocated.
    pub(crate) fn free_slot(&self, offset: u64) -> bool {
        if offset >= self.nr_slots {
            return false;
        }
        let mut map = self.lock();
        let (w, bit) = ((offset / 64) as usize, offset % 64);
        if map.bits[w] & (1 << bit) == 0 {
            return false;
        }
        map.bits[w] &= !(1 << bit);
        map.used -= 1;
        true
    }

    /// Frees every allocated slot of `offsets` under one hold of the map's
    /// lock; returns how many were freed (the others were not allocated).
    pub(crate) fn free_slots(&self, offsets: &[u64]) -> usize {
        let mut map = self.lock();
        let mut freed = 0;
        for &offset in offsets {
            if offset >= self.nr_slots {
                continue;
            }
            let (w, bit) = ((offset / 64) as usize, offset % 64);
            if map.bits[w] & (1 << bit) != 0 {
                map.bits[w] &= !(1 << bit);
                freed += 1;
            }
        }
        map.used -= freed as u64;
        freed
    }

    /// Whether slot `offset` is allocated.
    pub(crate) fn is_allocated(&self, offset: u64) -> bool {
        offset < self.nr_slots && self.lock().bits[(offset / 64) as usize] & (1 << (offset % 64)) != 0
    }

    /// Writes `page` to slot `offset` (Linux's `swap_writepage`).
    pub(crate) fn write_slot(&self, offset: u64, page: &[u8]) -> std::io::Result<()> {
        if self.fail_writes.load(Relaxed) > 0 && self.fail_writes.fetch_sub(1, Relaxed) > 0 {
            return Err(std::io::Error::other("injected write failure"));
        }
        self.file.write_all_at(page, offset * PAGE_SIZE as u64)
    }

    /// Reads slot `offset` into `page` (Linux's `swap_read_folio`).
    pub(crate) fn read_slot(&self, offset: u64, page: &mut [u8]) -> std::io::Result<()> {
        self.file.read_exact_at(page, offset * PAGE_SIZE as u64)
    }
}

impl From<std::io::Error> for ZswapError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_fill_and_free_and_a_second_owner_is_busy() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("swap");
        let swap = SwapFile::open(&dir, 70).unwrap();
        let slots: Vec<u64> = (0..70).map(|_| swap.alloc_slot().unwrap()).collect();
        assert_eq!(swap.alloc_slot(), None, "70 slots, no 71st");
        assert!(slots.iter().all(|&s| s < 70));
        assert!(swap.free_slot(5));
        assert!(!swap.free_slot(5), "freed twice");
        assert!(!swap.free_slot(70), "past the end");
        assert_eq!(swap.alloc_slot(), Some(5));
        assert!(matches!(SwapFile::open(&dir, 70), Err(ZswapError::Busy)));
        drop(swap);
        let again = SwapFile::open(&dir, 70).unwrap();
        assert_eq!(again.used_slots(), 0);
        drop(again);
        assert!(matches!(SwapFile::create_temp(0), Err(ZswapError::SwapFull)));
    }

    #[test]
    fn a_huge_slot_count_is_refused_before_the_file_is_made() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("swap");
        for n in [u64::MAX, u64::MAX / 4096 + 1, 1 << 60, 1 << 50] {
            assert!(matches!(SwapFile::open(&path, n), Err(ZswapError::TooManySlots(m)) if m == n), "{n}");
            assert!(!path.exists(), "{n}: nothing made on disk");
        }
        assert!(matches!(SwapFile::open(&path, 0), Err(ZswapError::SwapFull)));
        assert!(!path.exists());
        assert!(matches!(SwapFile::create_temp(u64::MAX), Err(ZswapError::TooManySlots(_))));
    }
}
