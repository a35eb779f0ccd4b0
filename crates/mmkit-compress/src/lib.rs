//! The compressors zram and zswap share (Linux's `crypto_comp` backends as
//! `zcomp` and zswap pick them): lz4 (the C library through the `lz4` crate), the
//! pure-Rust `lz4_flex` as a second lz4 to compare with, lz4hc (the C
//! library's high-compression mode, decompressed as plain lz4) and zstd (the C
//! library, level settable, optionally with a trained dictionary), as zram's
//! own backends since Linux 6.12 (`drivers/block/zram/backend_*.c`).
//!
//! [`Algorithm`] is a plain `Copy` value: the algorithm and its level.
//! [`Compressor`] is what a device holds: an algorithm and, for zstd, an
//! optional [`Dictionary`] prepared once (Linux's `zcomp_params` with
//! `dict`, turned into a `CDict`/`DDict` by `backend_zstd.c`'s
//! `zstd_setup_params`).
//!
//! lz4 is the C library because it measured better on both counts that
//! matter here (`mmkit bench zram`, BENCHMARKS.md): it makes the same
//! choices as the kernel's lz4, so pages land on the same side of the huge
//! threshold (`huge_pages` within 1 % of the kernel's, where `lz4_flex`
//! stored 6 % more pages raw), and it was faster on 50 %-compressible
//! pages.
//!
//! Owns the choice of algorithm and, per thread, a scratch buffer and the
//! zstd contexts (zram's per-CPU compression streams). Knows nothing of
//! slots, pools or devices; the dictionary's own code is `dict.rs`'s.

mod dict;
mod error;
mod same;

pub use dict::{Dictionary, DEFAULT_DICT_SIZE, MAX_DICT_SIZE, MIN_DICT_SIZE};
pub use error::CompressError;
pub use same::{fill_same, same_filled};

use std::cell::RefCell;
use std::sync::Arc;
use zstd::zstd_safe::{CCtx, CDict, DCtx};

/// The algorithm names [`Algorithm::from_name`] knows.
pub const ALGORITHMS: &[&str] = &["lz4", "lz4_flex", "lz4hc", "zstd"];

/// zstd's levels (zram's default is 3, `ZSTD_CLEVEL_DEFAULT`).
pub const ZSTD_LEVELS: (i32, i32) = (1, 22);

/// lz4hc's levels (`LZ4HC_CLEVEL_MIN` is 2 in `lz4hc.h`, but the C library
/// takes 1 as well; the kernel's default is `LZ4HC_DEFAULT_CLEVEL`, 9).
pub const LZ4HC_LEVELS: (i32, i32) = (1, 12);

/// A compression algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// LZ4 (the default of most distributions' zram), the C library.
    Lz4,
    /// LZ4 by the pure-Rust `lz4_flex` crate (same format, kept to compare).
    Lz4Flex,
    /// LZ4's high-compression mode at `level` (1 ..= 12; the kernel's
    /// default is 9), the C library. Its output is plain lz4.
    Lz4Hc {
        /// Compression level.
        level: i32,
    },
    /// Zstandard at `level` (1 ..= 22; zram's default is 3).
    Zstd {
        /// Compression level.
        level: i32,
    },
}

impl Algorithm {
    /// The name zram's `comp_algorithm` attribute shows.
    pub fn name(self) -> &'static str {
        match self {
            Self::Lz4 => "lz4",
            Self::Lz4Flex => "lz4_flex",
            Self::Lz4Hc { .. } => "lz4hc",
            Self::Zstd { .. } => "zstd",
        }
    }

    /// The algorithm of that name at its default level.
    ///
    /// # Errors
    /// [`CompressError::UnknownAlgorithm`].
    pub fn from_name(name: &str) -> Result<Self, CompressError> {
        match name {
            "lz4" => Ok(Self::Lz4),
            "lz4_flex" => Ok(Self::Lz4Flex),
            "lz4hc" => Ok(Self::Lz4Hc { level: 9 }),
            "zstd" => Ok(Self::Zstd { level: 3 }),
            _ => Err(CompressError::UnknownAlgorithm(name.to_owned())),
        }
    }

    /// The level, for algorithms that have one.
    pub fn level(self) -> Option<i32> {
        match self {
            Self::Lz4 | Self::Lz4Flex => None,
            Self::Lz4Hc { level } | Self::Zstd { level } => Some(level),
        }
    }

    /// The same algorithm at `level` (`algorithm_params level=N`).
    ///
    /// ```
    /// use mmkit_compress::{Algorithm, CompressError};
    /// assert_eq!(Algorithm::Zstd { level: 3 }.with_level(19), Ok(Algorithm::Zstd { level: 19 }));
    /// assert!(matches!(Algorithm::Lz4Hc { level: 9 }.with_level(13), Err(CompressError::LevelOutOfRange { .. })));
    /// assert_eq!(Algorithm::Lz4.with_level(1), Err(CompressError::NoLevel("lz4")));
    /// ```
    ///
    /// # Errors
    /// [`CompressError::LevelOutOfRange`], or [`CompressError::NoLevel`]
    /// for lz4 and lz4_flex.
    pub fn with_level(self, level: i64) -> Result<Self, CompressError> {
        let (min, max) = match self {
            Self::Lz4 | Self::Lz4Flex => return Err(CompressError::NoLevel(self.name())),
            Self::Lz4Hc { .. } => LZ4HC_LEVELS,
            Self::Zstd { .. } => ZSTD_LEVELS,
        };
        let out_of_range = CompressError::LevelOutOfRange { algorithm: self.name(), level, min, max };
        let level = i32::try_from(level).ok().filter(|l| (min..=max).contains(l)).ok_or(out_of_range)?;
        Ok(match self {
            Self::Lz4Hc { .. } => Self::Lz4Hc { level },
            _ => Self::Zstd { level },
        })
    }

    /// `lz4`, `lz4_flex`, `lz4hc`, `lz4hc:LEVEL`, `zstd` or `zstd:LEVEL`
    /// (the text [`Display`](core::fmt::Display) writes).
    pub fn parse(text: &str) -> Option<Self> {
        match text.split_once(':') {
            None => Self::from_name(text).ok(),
            Some((name @ ("zstd" | "lz4hc"), level)) => {
                Self::from_name(name).ok()?.with_level(level.parse().ok().filter(|_| !level.starts_with('+'))?).ok()
            }
            Some(_) => None,
        }
    }

    /// Compresses `page` and passes the compressed bytes to `f`; `None`
    /// when it did not fit in a page (store it raw).
    pub fn compress<R>(self, page: &[u8], f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        with_scratch(page.len(), |out| match self {
            Self::Lz4 => lz4::block::compress_to_buffer(page, None, false, out).ok(),
            Self::Lz4Hc { level } => {
                let mode = Some(lz4::block::CompressionMode::HIGHCOMPRESSION(level));
                lz4::block::compress_to_buffer(page, mode, false, out).ok()
            }
            Self::Lz4Flex => lz4_flex::block::compress_into(page, out).ok(),
            Self::Zstd { level } => ZSTD.with(|z| {
                let mut z = z.borrow_mut();
                let compressor = match &mut z.compressor {
                    Some((l, c)) if *l == level => c,
                    slot => &mut slot.insert((level, zstd::bulk::Compressor::new(level).ok()?)).1,
                };
                compressor.compress_to_buffer(page, out).ok()
            }),
        })
        .and_then(|len| with_scratch_result(page.len(), len, f))
    }

    /// Decompresses `data` into `page`, which it must fill exactly; false
    /// for anything else (corrupt, truncated, too long or too short, or a
    /// zstd frame that needs a dictionary).
    pub fn decompress(self, data: &[u8], page: &mut [u8]) -> bool {
        match self {
            Self::Lz4 | Self::Lz4Hc { .. } => i32::try_from(page.len()).is_ok_and(|len| {
                lz4::block::decompress_to_buffer(data, Some(len), page).is_ok_and(|n| n == page.len())
            }),
            Self::Lz4Flex => lz4_flex::block::decompress_into(data, page).is_ok_and(|n| n == page.len()),
            Self::Zstd { .. } => ZSTD.with(|z| {
                let mut z = z.borrow_mut();
                if z.decompressor.is_none() {
                    z.decompressor = zstd::bulk::Decompressor::new().ok();
                }
                z.decompressor
                    .as_mut()
                    .is_some_and(|d| d.decompress_to_buffer(data, page).is_ok_and(|n| n == page.len()))
            }),
        }
    }
}

/// Runs `f` on this thread's scratch buffer, sized for the worst case of
/// every algorithm on `len` input bytes; returns the compressed length when
/// it is below `len` (a page that does not shrink is stored raw).
fn with_scratch(len: usize, f: impl FnOnce(&mut [u8]) -> Option<usize>) -> Option<usize> {
    SCRATCH.with(|scratch| {
        let mut out = scratch.borrow_mut();
        out.resize(len * 2 + 64, 0);
        f(&mut out[..]).filter(|&n| n < len)
    })
}

/// Passes the first `n` bytes of the scratch buffer to `f` (`n` < `len`,
/// as [`with_scratch`] returned it).
fn with_scratch_result<R>(len: usize, n: usize, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
    SCRATCH.with(|scratch| {
        let out = scratch.borrow();
        (n < len && n <= out.len()).then(|| f(&out[..n]))
    })
}

/// What a device compresses with: an [`Algorithm`] and, for zstd, an
/// optional [`Dictionary`] (Linux's `zcomp` with its `zcomp_params`).
/// Cloning shares the prepared dictionary.
///
/// ```
/// use mmkit_compress::{Algorithm, Compressor};
/// let lz4hc = Compressor::new(Algorithm::Lz4Hc { level: 12 });
/// let page = [b"zram zswap ".as_slice(); 400].concat()[..4096].to_vec();
/// let packed = lz4hc.compress(&page, <[u8]>::to_vec).unwrap();
/// let mut back = vec![0; 4096];
/// assert!(Compressor::new(Algorithm::Lz4).decompress(&packed, &mut back), "lz4hc's output is lz4");
/// assert_eq!(back, page);
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct Compressor {
    algorithm: Algorithm,
    dict: Option<Arc<Prepared>>,
}

/// A dictionary prepared for compression at one level (`backend_zstd.c`
/// builds its `cdict` once per `zcomp_params`, not per page).
struct Prepared {
    dictionary: Dictionary,
    cdict: CDict<'static>,
}

impl PartialEq for Prepared {
    fn eq(&self, other: &Self) -> bool {
        self.dictionary == other.dictionary
    }
}

impl Eq for Prepared {}

impl Compressor {
    /// `algorithm` without a dictionary.
    pub fn new(algorithm: Algorithm) -> Self {
        Self { algorithm, dict: None }
    }

    /// zstd with `dictionary`, prepared for the algorithm's level.
    ///
    /// # Errors
    /// [`CompressError::NoDictionary`] for any algorithm but zstd;
    /// [`CompressError::CorruptDictionary`] if zstd refuses it at that
    /// level.
    pub fn with_dictionary(algorithm: Algorithm, dictionary: Dictionary) -> Result<Self, CompressError> {
        let Algorithm::Zstd { level } = algorithm else {
            return Err(CompressError::NoDictionary(algorithm.name()));
        };
        let cdict = dictionary.prepare(level)?;
        Ok(Self { algorithm, dict: Some(Arc::new(Prepared { dictionary, cdict })) })
    }

    /// The algorithm and its level.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The dictionary, if any.
    pub fn dictionary(&self) -> Option<&Dictionary> {
        self.dict.as_ref().map(|p| &p.dictionary)
    }

    /// The algorithm's name (as [`Algorithm::name`]).
    pub fn name(&self) -> &'static str {
        self.algorithm.name()
    }

    /// As [`Algorithm::compress`], with the dictionary if there is one.
    pub fn compress<R>(&self, page: &[u8], f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let Some(prepared) = &self.dict else { return self.algorithm.compress(page, f) };
        with_scratch(page.len(), |out| {
            ZSTD.with(|z| {
                let mut z = z.borrow_mut();
                if z.cctx.is_none() {
                    z.cctx = CCtx::try_create();
                }
                z.cctx.as_mut()?.compress_using_cdict(out, page, &prepared.cdict).ok()
            })
        })
        .and_then(|len| with_scratch_result(page.len(), len, f))
    }

    /// As [`Algorithm::decompress`], with the dictionary if there is one:
    /// a frame compressed with another dictionary is refused (zstd checks
    /// the dictionary id each frame carries).
    pub fn decompress(&self, data: &[u8], page: &mut [u8]) -> bool {
        let Some(prepared) = &self.dict else { return self.algorithm.decompress(data, page) };
        ZSTD.with(|z| {
            let mut z = z.borrow_mut();
            if z.dctx.is_none() {
                z.dctx = DCtx::try_create();
            }
            let len = page.len();
            z.dctx.as_mut().is_some_and(|d| {
                d.decompress_using_ddict(page, data, prepared.dictionary.ddict()).is_ok_and(|n| n == len)
            })
        })
    }
}

impl From<Algorithm> for Compressor {
    fn from(algorithm: Algorithm) -> Self {
        Self::new(algorithm)
    }
}

/// The algorithm as [`Algorithm`] shows it; the dictionary is not named.
impl core::fmt::Display for Compressor {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        self.algorithm.fmt(f)
    }
}

impl core::fmt::Debug for Compressor {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Compressor")
            .field("algorithm", &self.algorithm)
            .field("dictionary", &self.dictionary())
            .finish()
    }
}

/// A thread's zstd contexts, kept between pages: making one per page cost
/// more than compressing it.
#[derive(Default)]
struct ZstdContexts {
    compressor: Option<(i32, zstd::bulk::Compressor<'static>)>,
    decompressor: Option<zstd::bulk::Decompressor<'static>>,
    /// For dictionaries: each call names its prepared dictionary, so one
    /// context serves every dictionary and level.
    cctx: Option<CCtx<'static>>,
    dctx: Option<DCtx<'static>>,
}

thread_local! {
    /// This thread's compression buffer (zram's per-CPU stream).
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// This thread's zstd contexts.
    static ZSTD: RefCell<ZstdContexts> = RefCell::new(ZstdContexts::default());
}

/// The text [`Algorithm::parse`] reads back: the name, with `:LEVEL` when
/// the level is not the default (zstd 3, lz4hc 9).
impl core::fmt::Display for Algorithm {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Lz4 | Self::Lz4Flex | Self::Zstd { level: 3 } | Self::Lz4Hc { level: 9 } => f.write_str(self.name()),
            Self::Zstd { level } | Self::Lz4Hc { level } => write!(f, "{}:{level}", self.name()),
        }
    }
}

#[cfg(test)]
mod tests;
