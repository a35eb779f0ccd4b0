//! zram's sysfs attributes by name, and block status: the text interface a
//! control socket or a shell user drives (`cat mm_stat`, `echo all >
//! idle`), and the holes and zero pages an NBD server reports as extents.
//!
//! Owns the attribute names and their text forms only; every attribute
//! calls the device's typed API, which does the work.

use crate::device::Device;
use crate::recompress::RecompressParams;
use crate::slot::flags;
use crate::table::CHUNK_PAGES;
use crate::writeback::WritebackMode;
use crate::ZramError;
use crate::PAGE_SIZE;
use mmkit_compress::{Algorithm, Compressor};
use std::sync::atomic::Ordering::Relaxed;

/// What a run of pages holds, for block status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExtentKind {
    /// Never written, discarded or reset: reads as zeroes, holds nothing.
    Hole,
    /// A stored page of zeroes (same-filled with 0): reads as zeroes.
    Zero,
    /// Anything else.
    Data,
}

/// A run of bytes of one [`ExtentKind`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// First byte.
    pub offset: u64,
    /// Bytes in the run.
    pub length: u64,
    /// What they hold.
    pub kind: ExtentKind,
}

/// Attributes [`Zram::attr_show`](crate::Zram::attr_show) knows.
pub const SHOW_ATTRS: &[&str] = &[
    "mm_stat",
    "io_stat",
    "bd_stat",
    "debug_stat",
    "block_state",
    "disksize",
    "comp_algorithm",
    "recomp_algorithm",
    "mem_limit",
    "mem_used_max",
    "backing_dev",
    "writeback_limit",
    "writeback_limit_enable",
    "initstate",
    "max_comp_streams",
];

/// Attributes [`Zram::attr_store`](crate::Zram::attr_store) knows. The
/// first five configure the device and take a value only while it is
/// uninitialised (writing `disksize` initialises it).
pub const STORE_ATTRS: &[&str] = &[
    "disksize",
    "comp_algorithm",
    "recomp_algorithm",
    "backing_dev",
    "max_comp_streams",
    "compact",
    "reset",
    "idle",
    "writeback",
    "recompress",
    "algorithm_params",
    "mem_limit",
    "mem_used_max",
    "writeback_limit",
    "writeback_limit_enable",
    "backing_overwrite",
];

impl Device {
    /// Runs of holes, zero pages and data covering `[offset, offset + len)`
    /// (the first and last runs cut to the range).
    ///
    /// # Errors
    /// [`ZramError::OutOfRange`].
    pub fn extents(&self, offset: u64, len: u64) -> Result<Vec<Extent>, ZramError> {
        self.check_range_u64(offset, len)?;
        let mut out: Vec<Extent> = Vec::new();
        let end = offset + len;
        let mut at = offset;
        while at < end {
            let index = (at / PAGE_SIZE as u64) as usize;
            let Some(slot) = self.slots.get(index) else {
                // A chunk never written: one hole to its end.
                let chunk_end = ((index / CHUNK_PAGES + 1) * CHUNK_PAGES) as u64 * PAGE_SIZE as u64;
                let run_end = chunk_end.min(end);
                match out.last_mut() {
                    Some(last) if last.kind == ExtentKind::Hole => last.length += run_end - at,
                    _ => out.push(Extent { offset: at, length: run_end - at, kind: ExtentKind::Hole }),
                }
                at = run_end;
                continue;
            };
            let page_end = ((index as u64 + 1) * PAGE_SIZE as u64).min(end);
            let kind = {
                let slot = slot.lock();
                if !slot.allocated() {
                    ExtentKind::Hole
                } else if slot.has(flags::SAME) && slot.handle() == 0 {
                    ExtentKind::Zero
                } else {
                    ExtentKind::Data
                }
            };
            match out.last_mut() {
                Some(last) if last.kind == kind => last.length += page_end - at,
                _ => out.push(Extent { offset: at, length: page_end - at, kind }),
            }
            at = page_end;
        }
        Ok(out)
    }

    /// The text of a zram attribute, as `cat /sys/block/zramN/NAME` prints
    /// it (the lifecycle's own — `initstate`, `max_comp_streams` — are
    /// [`Zram`](crate::Zram)'s).
    ///
    /// # Errors
    /// [`ZramError::Invalid`] for a name not in [`SHOW_ATTRS`].
    pub fn attr_show(&self, name: &str) -> Result<String, ZramError> {
        let line = |v: u64| format!("{v}\n");
        Ok(match name {
            "mm_stat" => self.mm_stat(),
            "io_stat" => self.io_stat(),
            "bd_stat" => self.bd_stat(),
            "debug_stat" => self.debug_stat(),
            "block_state" => self.block_state(),
            "disksize" => line(self.disksize()),
            "comp_algorithm" => algorithm_choice(self.comps[0].algorithm()),
            "recomp_algorithm" => {
                recomp_choices(&self.comps[1..].iter().map(Compressor::algorithm).collect::<Vec<_>>())
            }
            "mem_limit" => line(self.mem_limit()),
            "mem_used_max" => line(self.counters.mem_used_max.load(Relaxed)),
            "backing_dev" => match self.backing_dev() {
                Some(path) => format!("{}\n", path.display()),
                None => "none\n".to_owned(),
            },
            "writeback_limit" => line(self.writeback_limit()),
            "writeback_limit_enable" => line(u64::from(self.writeback_limit_enable())),
            _ => return Err(ZramError::Invalid(format!("no attribute {name:?} to show"))),
        })
    }

    /// Stores `value` into a zram attribute, as `echo VALUE >
    /// /sys/block/zramN/NAME` does; returns what the action reports (pages
    /// written back, recompressed or compacted), or an empty string.
    ///
    /// # Errors
    /// [`ZramError::Invalid`] for a name not in [`STORE_ATTRS`] or a value
    /// it does not take (nothing changed); the action's own errors.
    pub fn attr_store(&self, name: &str, value: &str) -> Result<String, ZramError> {
        let value = value.trim();
        let number =
            || value.parse::<u64>().map_err(|_| ZramError::Invalid(format!("{name}: {value:?} is not a number")));
        match name {
            "compact" => return Ok(format!("{}\n", self.compact())),
            "idle" => match value {
                "all" => self.idle_all(),
                _ => self.idle_older_than(u32::try_from(number()?).unwrap_or(u32::MAX)),
            },
            "writeback" => {
                let mut written = 0;
                for mode in self.writeback_requests(value)? {
                    written += self.writeback(mode)?;
                }
                return Ok(format!("{written}\n"));
            }
            "recompress" => return self.recompress(&RecompressParams::parse(value)?).map(|n| format!("{n}\n")),
            "mem_used_max" => {
                if number()? != 0 {
                    return Err(ZramError::Invalid("mem_used_max: only 0 (reset to the current use) is taken".into()));
                }
                self.counters.mem_used_max.store(self.mem_used(), Relaxed);
            }
            "writeback_limit" => self.set_writeback_limit(number()?),
            "writeback_limit_enable" => self.set_writeback_limit_enable(number()? != 0),
            // Configuration: the lifecycle stores it while uninitialised.
            _ if STORE_ATTRS[..5].contains(&name) => {
                return Err(ZramError::Busy(format!("{name}: the device is initialised; reset it first")))
            }
            _ => return Err(ZramError::Invalid(format!("no attribute {name:?} to store"))),
        }
        Ok(String::new())
    }
}

impl Device {
    /// A `writeback` store's words, in the kernel's forms (Linux 6.13's
    /// `writeback_store`): a mode alone (`idle`, `huge`, `huge_idle`,
    /// `incompressible`) or as `type=MODE`, or any number of
    /// `page_index=N` and `page_indexes=FIRST-LAST`; a mode and page
    /// indexes together, or two modes, are refused. Every word is checked,
    /// page indexes against the device, before anything is written back.
    fn writeback_requests(&self, value: &str) -> Result<Vec<WritebackMode>, ZramError> {
        let mut modes = Vec::new();
        let mut pages = Vec::new();
        for word in value.split_whitespace() {
            let word = word.strip_prefix("type=").unwrap_or(word);
            let mode = WritebackMode::parse(word)?;
            match mode {
                WritebackMode::Pages { last, .. } => {
                    if last >= self.slots.len() {
                        return Err(ZramError::Invalid(format!(
                            "writeback {word}: the device has {} pages",
                            self.slots.len()
                        )));
                    }
                    pages.push(mode);
                }
                _ => modes.push(mode),
            }
        }
        match (modes.len(), pages.is_empty()) {
            (0, false) => Ok(pages),
            (1, true) => Ok(modes),
            (0, true) => Err(ZramError::Invalid(
                "writeback: say which pages: idle, huge, huge_idle, incompressible (or type=MODE), \
                 page_index=N or page_indexes=N-M"
                    .into(),
            )),
            _ => Err(ZramError::Invalid(format!(
                "writeback {value:?}: one mode, or page indexes, not both and not two modes"
            ))),
        }
    }
}

/// `comp_algorithm` as the kernel prints it: every available algorithm
/// (`mmkit_compress::ALGORITHMS`),
/// the selected one in brackets (`lz4 lz4_flex lz4hc [zstd]`; a zstd level other
/// than the default shows as `[zstd:9]`).
pub(crate) fn algorithm_choice(selected: Algorithm) -> String {
    let names: Vec<String> = mmkit_compress::ALGORITHMS
        .iter()
        .map(|&name| if name == selected.name() { format!("[{selected}]") } else { name.to_owned() })
        .collect();
    format!("{}\n", names.join(" "))
}

/// `recomp_algorithm` as the kernel prints it: one `#PRIORITY: ` line per
/// secondary algorithm set.
pub(crate) fn recomp_choices(secondaries: &[Algorithm]) -> String {
    secondaries.iter().enumerate().map(|(i, &a)| format!("#{}: {}", i + 1, algorithm_choice(a))).collect()
}
