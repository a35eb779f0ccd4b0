//! The compressors zram and zswap share (Linux's `crypto_comp` backends as
//! `zcomp` and zswap pick them): lz4 (the C library through the `lz4` crate), the
//! pure-Rust `lz4_flex` as a second lz4 to compare with, and zstd (the C
//! library, level settable), as zram's own backends since Linux 6.12.
//!
//! lz4 is the C library because it measured better on both counts that
//! matter here (`mmkit bench zram`, BENCHMARKS.md): it makes the same
//! choices as the kernel's lz4, so pages land on the same side of the huge
//! threshold (`huge_pages` within 1 % of the kernel's, where `lz4_flex`
//! stored 6 % more pages raw), and it was faster on 50 %-compressible
//! pages.
//!
//! Owns the choice of algorithm and, per thread, a scratch buffer and the
//! zstd contexts (zram's per-CPU compression streams). Knows nothing of slots, pools or
//! devices.

use std::cell::RefCell;

/// A compression algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    /// LZ4 (the default of most distributions' zram), the C library.
    Lz4,
    /// LZ4 by the pure-Rust `lz4_flex` crate (same format, kept to compare).
    Lz4Flex,
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
            Self::Zstd { .. } => "zstd",
        }
    }

    /// `lz4`, `zstd` or `zstd:LEVEL`.
    pub fn parse(text: &str) -> Option<Self> {
        match text.split_once(':') {
            None if text == "lz4" => Some(Self::Lz4),
            None if text == "lz4_flex" => Some(Self::Lz4Flex),
            None if text == "zstd" => Some(Self::Zstd { level: 3 }),
            Some(("zstd", level)) => {
                level.parse().ok().filter(|l| (1..=22).contains(l)).map(|level| Self::Zstd { level })
            }
            _ => None,
        }
    }

    /// Compresses `page` and passes the compressed bytes to `f`; `None`
    /// when it did not fit in a page (store it raw).
    pub fn compress<R>(self, page: &[u8], f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        SCRATCH.with(|scratch| {
            let mut out = scratch.borrow_mut();
            out.resize(page.len() * 2 + 64, 0);
            let len = match self {
                Self::Lz4 => lz4::block::compress_to_buffer(page, None, false, &mut out).ok()?,
                Self::Lz4Flex => lz4_flex::block::compress_into(page, &mut out).ok()?,
                Self::Zstd { level } => ZSTD.with(|z| {
                    let mut z = z.borrow_mut();
                    let compressor = match &mut z.compressor {
                        Some((l, c)) if *l == level => c,
                        slot => &mut slot.insert((level, zstd::bulk::Compressor::new(level).ok()?)).1,
                    };
                    compressor.compress_to_buffer(page, &mut out[..]).ok()
                })?,
            };
            (len < page.len()).then(|| f(&out[..len]))
        })
    }

    /// Decompresses `data` into `page`, which it must fill exactly.
    pub fn decompress(self, data: &[u8], page: &mut [u8]) -> bool {
        match self {
            Self::Lz4 => {
                lz4::block::decompress_to_buffer(data, Some(page.len() as i32), page).is_ok_and(|n| n == page.len())
            }
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

/// A thread's zstd contexts, kept between pages: making one per page cost
/// more than compressing it.
#[derive(Default)]
struct ZstdContexts {
    compressor: Option<(i32, zstd::bulk::Compressor<'static>)>,
    decompressor: Option<zstd::bulk::Decompressor<'static>>,
}

thread_local! {
    /// This thread's compression buffer (zram's per-CPU stream).
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
    /// This thread's zstd contexts.
    static ZSTD: RefCell<ZstdContexts> = RefCell::new(ZstdContexts::default());
}

/// The text [`Algorithm::parse`] reads back: `lz4`, `zstd` (level 3) or
/// `zstd:LEVEL`.
impl core::fmt::Display for Algorithm {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Lz4 => f.write_str("lz4"),
            Self::Lz4Flex => f.write_str("lz4_flex"),
            Self::Zstd { level: 3 } => f.write_str("zstd"),
            Self::Zstd { level } => write!(f, "zstd:{level}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_round_trip_and_refuse_to_grow() {
        let page: Vec<u8> = (0..4096).map(|i| (i % 17) as u8).collect();
        for algo in [Algorithm::Lz4, Algorithm::Lz4Flex, Algorithm::Zstd { level: 3 }] {
            let packed = algo.compress(&page, <[u8]>::to_vec).unwrap();
            assert!(packed.len() < 512);
            let mut back = vec![0; 4096];
            assert!(algo.decompress(&packed, &mut back));
            assert_eq!(back, page);
            assert!(!algo.decompress(&packed[..packed.len() / 2], &mut back), "a truncated stream is refused");
        }
        let mut noise = 0x9e37_79b9_7f4a_7c15u64;
        let random: Vec<u8> = (0..4096)
            .map(|_| {
                noise ^= noise << 13;
                noise ^= noise >> 7;
                noise ^= noise << 17;
                noise as u8
            })
            .collect();
        assert!(Algorithm::Lz4.compress(&random, |_| ()).is_none(), "incompressible data is not grown");
        assert_eq!(Algorithm::parse("zstd:9"), Some(Algorithm::Zstd { level: 9 }));
        assert_eq!(Algorithm::parse("lzo"), None);
        for algo in [Algorithm::Lz4, Algorithm::Lz4Flex, Algorithm::Zstd { level: 3 }, Algorithm::Zstd { level: 19 }] {
            assert_eq!(Algorithm::parse(&algo.to_string()), Some(algo));
        }
    }
}
