//! The slot table as two levels: a directory with one entry per
//! [`CHUNK_PAGES`] pages, and chunks of slots allocated on the first write
//! into them. Linux's `zram_meta_alloc` vmallocs the whole table at
//! `disksize` time (16 bytes a page, 4 GiB for a 1 TiB device); a user
//! space device that may be far larger than what it ever holds pays only
//! for the directory (24 bytes per 16 MiB of device) until pages arrive.
//!
//! Owns the table's memory: the directory is reserved with `try_reserve`
//! and a chunk that cannot be allocated is a typed error, never an abort.
//! Chunks are never freed before the device is (a freed slot is a cleared
//! entry, as in the kernel). The bytes the table holds are counted, so that
//! `mm_stat` and `mem_limit` see them. Knows nothing of what a slot holds.

use crate::slot::Slot;
use crate::ZramError;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::OnceLock;

/// Bytes of one directory entry.
const ENTRY_BYTES: u64 = size_of::<OnceLock<Box<[Slot]>>>() as u64;
/// Bytes of one chunk of slots.
pub(crate) const CHUNK_BYTES: u64 = (CHUNK_PAGES * size_of::<Slot>()) as u64;

/// Bytes the table of a device of `pages` pages holds once every chunk
/// exists: the directory and every chunk.
pub(crate) fn table_bytes_for(pages: u64) -> u64 {
    let chunks = pages.div_ceil(CHUNK_PAGES as u64);
    chunks.saturating_mul(ENTRY_BYTES + CHUNK_BYTES)
}

/// Pages per chunk: 4096 slots, 64 KiB, covering 16 MiB of device.
pub(crate) const CHUNK_PAGES: usize = 4096;

/// The slots of a device of `len` pages.
pub(crate) struct SlotTable {
    chunks: Box<[OnceLock<Box<[Slot]>>]>,
    len: usize,
    /// Chunks allocated so far.
    allocated: AtomicUsize,
}

/// A typed error for memory the table could not get.
fn no_memory(what: &str, bytes: usize) -> ZramError {
    ZramError::Invalid(format!("no memory for the slot table's {what} ({bytes} bytes)"))
}

impl SlotTable {
    /// A table of `len` pages with no chunk allocated.
    ///
    /// # Errors
    /// [`ZramError::Invalid`] when the directory cannot be allocated.
    pub(crate) fn new(len: usize) -> Result<Self, ZramError> {
        let nr_chunks = len.div_ceil(CHUNK_PAGES);
        let mut chunks: Vec<OnceLock<Box<[Slot]>>> = Vec::new();
        chunks
            .try_reserve_exact(nr_chunks)
            .map_err(|_| no_memory("directory", nr_chunks.saturating_mul(size_of::<OnceLock<Box<[Slot]>>>())))?;
        chunks.resize_with(nr_chunks, OnceLock::new);
        Ok(Self { chunks: chunks.into_boxed_slice(), len, allocated: AtomicUsize::new(0) })
    }

    /// Pages in the table.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The slot of page `index` if its chunk exists (a page whose chunk does
    /// not exist was never written: a hole).
    #[inline]
    pub(crate) fn get(&self, index: usize) -> Option<&Slot> {
        self.chunks.get(index / CHUNK_PAGES)?.get().map(|chunk| &chunk[index % CHUNK_PAGES])
    }

    /// The slots of pages `index ..` up to `end` or the end of `index`'s
    /// chunk, whichever comes first, if that chunk exists: a walk over a
    /// range looks each chunk up once instead of once a page. `Err` gives
    /// the first index past the hole when the chunk was never written.
    #[inline]
    pub(crate) fn run(&self, index: usize, end: usize) -> Result<&[Slot], usize> {
        let base = index / CHUNK_PAGES * CHUNK_PAGES;
        let chunk_end = base + CHUNK_PAGES;
        match self.chunks.get(index / CHUNK_PAGES).and_then(OnceLock::get) {
            Some(chunk) => Ok(chunk.get(index - base..end.min(chunk_end) - base).unwrap_or(&[])),
            None => Err(chunk_end),
        }
    }

    /// The slot of page `index`, allocating its chunk on first use.
    ///
    /// # Errors
    /// [`ZramError::Invalid`] when `index` is past the table or the chunk
    /// cannot be allocated.
    #[inline]
    pub(crate) fn get_or_alloc(&self, index: usize) -> Result<&Slot, ZramError> {
        let cell = self
            .chunks
            .get(index / CHUNK_PAGES)
            .ok_or_else(|| ZramError::Invalid(format!("page {index} is past the slot table")))?;
        let chunk: &[Slot] = match cell.get() {
            Some(chunk) => chunk,
            None => self.alloc_chunk(cell)?,
        };
        Ok(&chunk[index % CHUNK_PAGES])
    }

    #[cold]
    fn alloc_chunk<'a>(&self, cell: &'a OnceLock<Box<[Slot]>>) -> Result<&'a [Slot], ZramError> {
        let mut slots: Vec<Slot> = Vec::new();
        // No memory for the chunk: the write fails as at mem_limit (ENOSPC).
        slots.try_reserve_exact(CHUNK_PAGES).map_err(|_| ZramError::NoSpace)?;
        slots.resize_with(CHUNK_PAGES, Slot::default);
        let fresh = slots.into_boxed_slice();
        // Two first writers may race: one chunk is kept, the other dropped
        // before any slot of it was used; only the kept one is counted.
        if cell.set(fresh).is_ok() {
            self.allocated.fetch_add(1, Relaxed);
        }
        cell.get().map(|chunk| &chunk[..]).ok_or(ZramError::NoSpace)
    }

    /// Bytes the table holds now: the directory and the chunks allocated.
    pub(crate) fn bytes(&self) -> u64 {
        self.chunks.len() as u64 * ENTRY_BYTES + self.allocated.load(Relaxed) as u64 * CHUNK_BYTES
    }

    /// Whether the chunk holding page `index` exists.
    pub(crate) fn chunk_exists(&self, index: usize) -> bool {
        self.chunks.get(index / CHUNK_PAGES).is_some_and(|c| c.get().is_some())
    }

    /// Every slot of an allocated chunk, with its page index, in order
    /// (slots of chunks never written are holes and are skipped).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (usize, &Slot)> {
        let len = self.len;
        self.chunks.iter().enumerate().filter_map(|(c, cell)| cell.get().map(|chunk| (c, chunk))).flat_map(
            move |(c, chunk)| {
                let first = c * CHUNK_PAGES;
                chunk.iter().enumerate().map(move |(i, slot)| (first + i, slot)).take_while(move |(i, _)| *i < len)
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_appear_on_first_write_only_and_a_huge_table_costs_its_directory() {
        let table = SlotTable::new(3 * CHUNK_PAGES + 5).unwrap();
        assert_eq!(table.len(), 3 * CHUNK_PAGES + 5);
        assert!(table.get(0).is_none() && !table.chunk_exists(CHUNK_PAGES));
        table.get_or_alloc(CHUNK_PAGES + 7).unwrap();
        assert!(table.chunk_exists(CHUNK_PAGES) && table.get(CHUNK_PAGES).is_some());
        assert!(table.get(0).is_none(), "other chunks stay unallocated");
        assert_eq!(table.bytes(), 4 * ENTRY_BYTES + CHUNK_BYTES, "the directory and one chunk");
        table.get_or_alloc(3 * CHUNK_PAGES + 4).unwrap();
        assert!(table.get_or_alloc(4 * CHUNK_PAGES).is_err(), "past the directory");
        let indexes: Vec<usize> = table.iter().map(|(i, _)| i).collect();
        assert_eq!(indexes.len(), CHUNK_PAGES + 5, "the last chunk stops at the table's end");
        assert_eq!((indexes[0], *indexes.last().unwrap()), (CHUNK_PAGES, 3 * CHUNK_PAGES + 4));
        // A 1 TiB device: 65536 directory entries and nothing else.
        let big = SlotTable::new((1usize << 40) / 4096).unwrap();
        assert!(big.bytes() < 2 << 20, "{} bytes for an empty 1 TiB table", big.bytes());
        // An absurd one is a typed error, not an abort.
        assert!(SlotTable::new(usize::MAX).is_err());
    }
}
