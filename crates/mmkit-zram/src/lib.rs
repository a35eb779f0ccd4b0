//! # mmkit-zram — zram as a library, on mmkit-zsmalloc
//!
//! Linux's zram (`drivers/block/zram/`): a block device whose pages are
//! kept compressed in RAM. Each 4 KiB page has a 16-byte slot; a page of
//! one repeated word is kept as that word, other pages are compressed (lz4
//! lz4hc or zstd, optionally with a trained dictionary) into a zsmalloc pool, and pages that do not compress below
//! zsmalloc's huge size are stored raw. Reads and writes are byte-granular;
//! discard and write-zeroes free whole pages; statistics come in the
//! kernel's formats (`mm_stat`, `io_stat`, `debug_stat`, `block_state`).
//!
//! A device is initialised when built; `reset` (refused while the device
//! is open) returns it to uninitialised, where `disksize`, the algorithms
//! and the backing file can be set again, as with the kernel's sysfs.
//!
//! Beside the core: recompression of idle or huge pages with up to three
//! secondary algorithms, writeback of idle, huge or incompressible pages to
//! a backing file (`bd_stat`), the sysfs attributes by name, and block
//! status (holes and zero pages) for an NBD server.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod attrs;
mod backing;
mod config;
mod counters;
mod device;
mod lifecycle;
mod params;
mod recompress;
mod release;
mod size;
pub mod slot;
mod stats;
mod table;
mod writeback;

pub use attrs::{Extent, ExtentKind, SHOW_ATTRS, STORE_ATTRS};
pub use config::{file_kind, machine_memory, slot_table_bytes, ZramConfig, MAX_RECOMP_ALGORITHMS};
pub use counters::MmStat;
pub use lifecycle::{OpenHandle, Zram};
pub use mmkit_compress::{Algorithm, CompressError, Compressor, Dictionary};
pub use params::AlgorithmParams;
pub use recompress::{RecompressParams, RecompressType};
pub use size::{parse_size, SizeError};
pub use writeback::WritebackMode;

/// zram's page size.
pub const PAGE_SIZE: usize = 4096;

/// Why a zram call failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ZramError {
    /// The I/O reaches past the device (counted in `invalid_io`); nothing
    /// was done.
    OutOfRange {
        /// First byte asked for.
        offset: u64,
        /// Bytes asked for.
        len: u64,
        /// The device's size.
        size: u64,
    },
    /// `mem_limit` reached, or the page allocator has no page: the page
    /// was not written and keeps its old contents.
    NoSpace,
    /// A stored page did not decompress (counted in `failed_reads`).
    Corrupt {
        /// The page.
        index: usize,
    },
    /// The zsmalloc pool refused.
    Pool(mmkit_zsmalloc::ZsError),
    /// An unknown parameter, attribute or algorithm, or a value it does not
    /// take; nothing was changed.
    Invalid(String),
    /// The backing file cannot be opened, is too small, or an I/O on it
    /// failed (counted in `failed_reads` for reads).
    Backing(String),
    /// Writeback was asked of a device without a backing file.
    NoBackingDev,
    /// `writeback_limit` is enabled and used up.
    WritebackLimit {
        /// Pages the pass wrote back before it stopped (they stay written).
        written: u64,
    },
    /// The backing file has no free block.
    BackingFull {
        /// Pages the pass wrote back before the file filled (they stay
        /// written).
        written: u64,
    },
    /// An algorithm, level or dictionary was refused
    /// (`algorithm_params`); nothing was changed.
    Compress(CompressError),
    /// The device or a resource it needs is in use (the kernel's EBUSY):
    /// `reset` while the device is open, a configuration attribute of an
    /// initialised device, a backing file another device holds. Nothing
    /// was changed.
    Busy(String),
    /// I/O or an action on a device that is not initialised (after a
    /// reset, until `disksize` is written).
    NotInitialised,
}

impl core::fmt::Display for ZramError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::OutOfRange { offset, len, size } => {
                write!(f, "{len} bytes at {offset} reach past the device's {size}")
            }
            Self::NoSpace => f.write_str("no space: mem_limit reached or no free page"),
            Self::Corrupt { index } => write!(f, "page {index} does not decompress"),
            Self::Pool(e) => write!(f, "zsmalloc: {e}"),
            Self::Invalid(what) => write!(f, "invalid: {what}"),
            Self::Backing(what) => f.write_str(what),
            Self::NoBackingDev => f.write_str("no backing_dev: writeback needs a backing file"),
            Self::WritebackLimit { written } => {
                write!(f, "writeback_limit used up after {written} page{} written back", plural(*written))
            }
            Self::BackingFull { written } => write!(
                f,
                "the backing file has no free block: {written} page{} written back before it filled",
                plural(*written)
            ),
            Self::Busy(what) => write!(f, "busy: {what}"),
            Self::NotInitialised => f.write_str("the device is not initialised (reset); write disksize to set it up"),
            Self::Compress(e) => write!(f, "algorithm_params: {e}"),
        }
    }
}

impl std::error::Error for ZramError {}

fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
