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
//! The file itself, its blocks and its lock are `backing`'s.

use crate::backing::BackingDev;
use crate::device::Device;
use crate::slot::{flags, SlotGuard};
use crate::ZramError;
use crate::PAGE_SIZE;
use std::path::Path;
use std::sync::atomic::Ordering::Relaxed;

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
