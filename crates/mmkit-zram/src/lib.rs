//! # mmkit-zram — zram as a library, on mmkit-zsmalloc
//!
//! Linux's zram (`drivers/block/zram/`): a block device whose pages are
//! kept compressed in RAM. Each 4 KiB page has a 16-byte slot; a page of
//! one repeated word is kept as that word, other pages are compressed (lz4
//! or zstd) into a zsmalloc pool, and pages that do not compress below
//! zsmalloc's huge size are stored raw. Reads and writes are byte-granular;
//! discard and write-zeroes free whole pages; statistics come in the
//! kernel's formats (`mm_stat`, `io_stat`, `debug_stat`, `block_state`).
//!
//! This crate is the device core. Recompression, idle writeback to a
//! backing file and `bd_stat` are not built yet.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod comp;
mod device;
pub mod slot;
mod stats;

pub use comp::Algorithm;
pub use device::{Zram, ZramConfig, PAGE_SIZE};
pub use stats::MmStat;

/// Why a zram call failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
        }
    }
}

impl std::error::Error for ZramError {}
