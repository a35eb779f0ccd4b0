//! The backing file of writeback (Linux's `backing_dev`): the file, which
//! of its 4 KiB blocks hold a page, and `bd_stat`'s counters with the
//! writeback limit.
//!
//! The file is the device's alone: it is locked exclusively (`flock`, on
//! the open file, so every path to the same file — a symlink, a hard link
//! — meets the same lock) for as long as the device holds it, as the
//! kernel's `backing_dev_store` claims its block device exclusively. Its
//! contents are overwritten.
//!
//! Owns the file and its blocks. A part of the device: must not know the
//! device, its slots or the writeback pass (`writeback`).

use crate::ZramError;
use crate::PAGE_SIZE;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64};
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
    pub(crate) fn alloc_block(&self) -> Option<u64> {
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

    pub(crate) fn write_block(&self, block: u64, page: &[u8]) -> Result<(), ZramError> {
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
