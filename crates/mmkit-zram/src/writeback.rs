//! Writeback: moving idle, huge or incompressible pages out of RAM into a
//! backing file (Linux's `CONFIG_ZRAM_WRITEBACK`: `backing_dev`,
//! `writeback`, `writeback_limit`, `writeback_limit_enable`, `bd_stat`).
//!
//! Owns the backing file, its block bitmap and the writeback pass. A
//! written-back slot keeps the `WB` flag and the block index in its handle
//! word; the device's read path reads such pages from the file and its free
//! path returns the block. As the kernel does, a pass first marks the
//! chosen slots `PP_SLOT` and then writes them one by one; a slot written
//! or freed in between loses the mark and is left alone. Pages are written
//! uncompressed, one 4 KiB block each.
//!
//! The file is the device's alone: it is locked exclusively (`flock`, on
//! the open file, so every path to the same file — a symlink, a hard link
//! — meets the same lock) for as long as the device holds it, as the
//! kernel's `backing_dev_store` claims its block device exclusively. Its
//! contents are overwritten.

use crate::device::{Device, PAGE_SIZE};
use crate::slot::{flags, SlotGuard};
use crate::ZramError;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;

/// The backing file and which of its 4 KiB blocks hold a page.
pub(crate) struct BackingDev {
    file: File,
    path: PathBuf,
    blocks: Mutex<BlockMap>,
}

/// One bit per block of the file, and where the last search stopped.
struct BlockMap {
    used: Vec<u64>,
    nr_blocks: u64,
    next: u64,
}

impl BackingDev {
    /// Opens an existing file for reading and writing; it must hold at
    /// least one block.
    pub(crate) fn open(path: &Path) -> Result<Self, ZramError> {
        let fail = |why: String| ZramError::Backing(format!("backing_dev {}: {why}", path.display()));
        let file = File::options().read(true).write(true).open(path).map_err(|e| fail(e.to_string()))?;
        // Two devices writing back into one file would read each other's
        // pages. The lock goes when the file is closed (device dropped).
        match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(rustix::io::Errno::WOULDBLOCK) => {
                return Err(ZramError::Busy(format!("backing_dev {}: another device holds this file", path.display())))
            }
            Err(e) => return Err(fail(format!("locking it: {e}"))),
        }
        let len = file.metadata().map_err(|e| fail(e.to_string()))?.len();
        let nr_blocks = len / PAGE_SIZE as u64;
        if nr_blocks == 0 {
            return Err(fail(format!("{len} bytes is smaller than one {PAGE_SIZE}-byte block")));
        }
        let used = vec![0; nr_blocks.div_ceil(64) as usize];
        Ok(Self { file, path: path.to_owned(), blocks: Mutex::new(BlockMap { used, nr_blocks, next: 0 }) })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// A free block, marked used; `None` when the file is full.
    fn alloc_block(&self) -> Option<u64> {
        let mut map = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        for step in 0..map.nr_blocks {
            let block = (map.next + step) % map.nr_blocks;
            let (word, bit) = ((block / 64) as usize, block % 64);
            if map.used[word] & (1 << bit) == 0 {
                map.used[word] |= 1 << bit;
                map.next = block + 1;
                return Some(block);
            }
        }
        None
    }

    /// Returns `block`; a block that is not in use is left as it is.
    pub(crate) fn free_block(&self, block: u64) {
        let mut map = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        if block < map.nr_blocks {
            map.used[(block / 64) as usize] &= !(1 << (block % 64));
        }
    }

    pub(crate) fn read_block(&self, block: u64, out: &mut [u8]) -> Result<(), ZramError> {
        self.file
            .read_exact_at(out, block * PAGE_SIZE as u64)
            .map_err(|e| ZramError::Backing(format!("reading block {block} of {}: {e}", self.path.display())))
    }

    fn write_block(&self, block: u64, page: &[u8]) -> Result<(), ZramError> {
        self.file
            .write_all_at(page, block * PAGE_SIZE as u64)
            .map_err(|e| ZramError::Backing(format!("writing block {block} of {}: {e}", self.path.display())))
    }
}

/// The device's writeback state: the file, the limit and `bd_stat`'s
/// counters.
#[derive(Default)]
pub(crate) struct Writeback {
    pub(crate) backing: Option<BackingDev>,
    pub(crate) limit_enable: AtomicBool,
    /// Pages that may still be written back while the limit is enabled.
    pub(crate) limit: AtomicU64,
    pub(crate) bd_count: AtomicU64,
    pub(crate) bd_reads: AtomicU64,
    pub(crate) bd_writes: AtomicU64,
}

/// Which pages a writeback pass takes (`echo MODE > writeback`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WritebackMode {
    /// Pages marked idle.
    Idle,
    /// Pages stored uncompressed.
    Huge,
    /// Pages both huge and idle.
    HugeIdle,
    /// Pages no secondary algorithm could shrink.
    Incompressible,
    /// The pages with these indexes, `first ..= last` (`page_index=N` or
    /// `page_indexes=N-M`).
    Pages {
        /// First page.
        first: usize,
        /// Last page, included.
        last: usize,
    },
}

impl WritebackMode {
    /// Parses what zram's `writeback` attribute takes.
    ///
    /// # Errors
    /// [`ZramError::Invalid`].
    pub fn parse(text: &str) -> Result<Self, ZramError> {
        let text = text.trim();
        let bad = || {
            ZramError::Invalid(format!(
                "writeback {text:?}: want idle, huge, huge_idle, incompressible, page_index=N or page_indexes=N-M"
            ))
        };
        Ok(match text {
            "idle" => Self::Idle,
            "huge" => Self::Huge,
            "huge_idle" => Self::HugeIdle,
            "incompressible" => Self::Incompressible,
            _ => {
                if let Some(n) = text.strip_prefix("page_index=") {
                    let n = n.parse().map_err(|_| bad())?;
                    Self::Pages { first: n, last: n }
                } else if let Some(range) = text.strip_prefix("page_indexes=") {
                    let (a, b) = range.split_once('-').ok_or_else(bad)?;
                    let (first, last) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                    if first > last {
                        return Err(bad());
                    }
                    Self::Pages { first, last }
                } else {
                    return Err(bad());
                }
            }
        })
    }

    fn wants(self, slot_flags: u32) -> bool {
        let has = |f: u32| slot_flags & f != 0;
        match self {
            Self::Idle => has(flags::IDLE),
            Self::Huge => has(flags::HUGE),
            Self::HugeIdle => has(flags::HUGE) && has(flags::IDLE),
            Self::Incompressible => has(flags::INCOMPRESSIBLE),
            Self::Pages { .. } => true,
        }
    }
}

impl Device {
    /// Writes the pages `mode` picks to the backing file and frees their
    /// memory; returns how many were written. Reads of those pages then
    /// come from the file.
    ///
    /// # Errors
    /// [`ZramError::NoBackingDev`]; [`ZramError::Invalid`] for page indexes
    /// past the device; [`ZramError::WritebackLimit`] when the enabled limit
    /// runs out and [`ZramError::BackingFull`] when the file has no free
    /// block, each carrying the pages written so far (which stay written
    /// back); [`ZramError::Backing`] when writing fails.
    pub fn writeback(&self, mode: WritebackMode) -> Result<u64, ZramError> {
        let backing = self.wb.backing.as_ref().ok_or(ZramError::NoBackingDev)?;
        let range = match mode {
            WritebackMode::Pages { last, .. } if last >= self.slots.len() => {
                return Err(ZramError::Invalid(format!("page {last} is past the device's {} pages", self.slots.len())));
            }
            WritebackMode::Pages { first, last } => first..last + 1,
            _ => 0..self.slots.len(),
        };
        let mut chosen = Vec::new();
        for (index, slot) in self.slots.iter().skip_while(|(i, _)| *i < range.start).take_while(|(i, _)| *i < range.end)
        {
            let slot = slot.lock();
            if slot.allocated() && !slot.has(flags::WB | flags::SAME) && mode.wants(slot.flags()) {
                slot.update_flags(flags::PP_SLOT, 0);
                chosen.push(index);
            }
        }
        let mut written = 0;
        let mut result = Ok(());
        for (n, &index) in chosen.iter().enumerate() {
            let Some(slot) = self.slots.get(index) else { continue };
            let slot = slot.lock();
            if !slot.has(flags::PP_SLOT) {
                continue;
            }
            slot.update_flags(0, flags::PP_SLOT);
            match self.write_back_slot(backing, index, &slot) {
                Ok(()) => written += 1,
                Err(e) => {
                    result = Err(match e {
                        ZramError::BackingFull { .. } => ZramError::BackingFull { written },
                        ZramError::WritebackLimit { .. } => ZramError::WritebackLimit { written },
                        other => other,
                    });
                    drop(slot);
                    // The rest stay in RAM: take their marks back.
                    for &rest in &chosen[n + 1..] {
                        if let Some(slot) = self.slots.get(rest) {
                            slot.lock().update_flags(0, flags::PP_SLOT);
                        }
                    }
                    break;
                }
            }
        }
        result.map(|()| written)
    }

    /// One slot to the file, under its lock: the page is read (decompressed)
    /// and written to a free block before the memory is freed.
    fn write_back_slot(&self, backing: &BackingDev, index: usize, slot: &SlotGuard<'_>) -> Result<(), ZramError> {
        if self.wb.limit_enable.load(Relaxed) && self.wb.limit.load(Relaxed) == 0 {
            return Err(ZramError::WritebackLimit { written: 0 });
        }
        let block = backing.alloc_block().ok_or(ZramError::BackingFull { written: 0 })?;
        let mut page = [0u8; PAGE_SIZE];
        let stored = self.load_locked(index, slot, &mut page).and_then(|()| backing.write_block(block, &page));
        if let Err(e) = stored {
            backing.free_block(block);
            return Err(e);
        }
        let idle = slot.flags() & flags::IDLE;
        let old = self.slot_free_extract(slot);
        slot.set_handle(block);
        slot.update_flags(flags::WB | idle, 0);
        self.counters.hot().pages_stored.fetch_add(1, Relaxed);
        self.wb.bd_count.fetch_add(1, Relaxed);
        self.wb.bd_writes.fetch_add(1, Relaxed);
        if self.wb.limit_enable.load(Relaxed) {
            // Only this pass's thread lowers it while enabled; saturate in
            // case the limit was rewritten meanwhile.
            let _ = self.wb.limit.fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1));
        }
        if let Some(old) = old {
            let _ = self.pool.zs_free_raw(&self.key, old);
        }
        Ok(())
    }

    /// Sets `writeback_limit`, in 4 KiB pages.
    pub fn set_writeback_limit(&self, pages: u64) {
        self.wb.limit.store(pages, Relaxed);
    }

    /// The pages writeback may still write while the limit is enabled.
    pub fn writeback_limit(&self) -> u64 {
        self.wb.limit.load(Relaxed)
    }

    /// Turns `writeback_limit` on or off.
    pub fn set_writeback_limit_enable(&self, on: bool) {
        self.wb.limit_enable.store(on, Relaxed);
    }

    /// Whether `writeback_limit` applies.
    pub fn writeback_limit_enable(&self) -> bool {
        self.wb.limit_enable.load(Relaxed)
    }

    /// The backing file, if the device has one.
    pub fn backing_dev(&self) -> Option<&Path> {
        self.wb.backing.as_ref().map(BackingDev::path)
    }

    /// `bd_stat`: pages on the backing file now, pages read from it and
    /// pages written to it, in 4 KiB units.
    pub fn bd_stat(&self) -> String {
        format!(
            "{:>8} {:>8} {:>8}\n",
            self.wb.bd_count.load(Relaxed),
            self.wb.bd_reads.load(Relaxed),
            self.wb.bd_writes.load(Relaxed)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_as_the_attribute_takes_them() {
        assert_eq!(WritebackMode::parse("idle"), Ok(WritebackMode::Idle));
        assert_eq!(WritebackMode::parse("huge_idle\n"), Ok(WritebackMode::HugeIdle));
        assert_eq!(WritebackMode::parse("page_index=7"), Ok(WritebackMode::Pages { first: 7, last: 7 }));
        assert_eq!(WritebackMode::parse("page_indexes=2-5"), Ok(WritebackMode::Pages { first: 2, last: 5 }));
        for bad in ["", "all", "page_index=x", "page_indexes=5-2", "page_indexes=3"] {
            assert!(matches!(WritebackMode::parse(bad), Err(ZramError::Invalid(_))), "{bad}");
        }
    }

    #[test]
    fn a_missing_or_empty_file_is_refused() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path().to_path_buf();
        assert!(matches!(BackingDev::open(&dir.join("absent")), Err(ZramError::Backing(_))));
        let small = dir.join("small");
        std::fs::write(&small, [0u8; 100]).unwrap();
        assert!(matches!(BackingDev::open(&small), Err(ZramError::Backing(_))));
        std::fs::write(&small, vec![0u8; 2 * PAGE_SIZE]).unwrap();
        let dev = BackingDev::open(&small).unwrap();
        assert_eq!((dev.alloc_block(), dev.alloc_block(), dev.alloc_block()), (Some(0), Some(1), None));
        dev.free_block(0);
        assert_eq!(dev.alloc_block(), Some(0));
        // Held: no second device on it, by its own name or another.
        let link = dir.join("link");
        std::os::unix::fs::symlink(&small, &link).unwrap();
        let hard = dir.join("hard");
        std::fs::hard_link(&small, &hard).unwrap();
        for path in [&small, &link, &hard] {
            match BackingDev::open(path) {
                Err(ZramError::Busy(what)) => assert!(what.contains(&path.display().to_string()), "{what}"),
                other => panic!("a second device on {}: {:?}", path.display(), other.map(|_| ())),
            }
        }
        drop(dev);
        BackingDev::open(&hard).expect("free again once the first device let go");
    }
}
