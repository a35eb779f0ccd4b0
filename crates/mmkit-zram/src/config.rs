//! How a device is set up: zram's `disksize`, `comp_algorithm`,
//! `recomp_algorithm`, `algorithm_params` (`params.rs`'s), `mem_limit` and
//! `backing_dev`, plus zsmalloc's chain
//! size, with a `key=value` parser for command lines and plugin arguments.
//!
//! Owns the configuration's text forms (sizes with K/M/G suffixes, as the
//! kernel's `memparse`). Knows nothing of slots, pools or files.

use crate::ZramError;
use mmkit_compress::{Algorithm, Dictionary};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Most secondary algorithms (Linux's `ZRAM_MAX_COMPS` is 4, one primary).
pub const MAX_RECOMP_ALGORITHMS: usize = 3;

/// How a device is set up.
///
/// ```
/// use mmkit_zram::{Algorithm, ZramConfig};
/// let mut config = ZramConfig::default();
/// config.set("size", "256M").unwrap();
/// config.set("comp", "lz4").unwrap();
/// config.set("recomp", "zstd:9").unwrap();
/// assert_eq!(config.disksize, 256 << 20);
/// assert_eq!(config.recomp_algorithms, vec![Algorithm::Zstd { level: 9 }]);
/// assert!(config.set("comp", "lzma").is_err());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZramConfig {
    /// Device size in bytes, rounded up to whole pages.
    pub disksize: u64,
    /// The primary compression algorithm (priority 0).
    pub algorithm: Algorithm,
    /// Secondary algorithms for recompression, priority 1, 2, 3 in order
    /// (Linux's `CONFIG_ZRAM_MULTI_COMP`).
    pub recomp_algorithms: Vec<Algorithm>,
    /// Most memory the pool may hold, in bytes; 0 for no limit.
    pub mem_limit: u64,
    /// The file idle and huge pages are written back to.
    pub backing_dev: Option<PathBuf>,
    /// Most pages in one zspage (4 ..= 16).
    pub chain_size: usize,
    /// The zstd dictionary of each priority that has one (0 the primary),
    /// from `algorithm_params dict=PATH`.
    pub dictionaries: BTreeMap<usize, Dictionary>,
}

impl Default for ZramConfig {
    fn default() -> Self {
        Self {
            disksize: 1 << 30,
            algorithm: Algorithm::Lz4,
            recomp_algorithms: Vec::new(),
            mem_limit: 0,
            backing_dev: None,
            chain_size: 8,
            dictionaries: BTreeMap::new(),
        }
    }
}

impl ZramConfig {
    /// The keys [`set`](Self::set) knows, with what each means.
    pub const KEYS: &'static [(&'static str, &'static str)] = &[
        ("size", "device size in bytes, K/M/G/T suffixes allowed (alias: disksize)"),
        ("comp", "primary algorithm: lz4, lz4hc, zstd, or lz4hc:LEVEL, zstd:LEVEL (alias: comp_algorithm)"),
        ("recomp", "up to 3 secondary algorithms, comma-separated, by priority (alias: recomp_algorithm)"),
        (
            "algorithm_params",
            "\"algo=NAME [priority=N] [level=N] [dict=PATH]\": level and zstd dictionary of an algorithm set above",
        ),
        ("mem_limit", "most memory the compressed pages may use, K/M/G suffixes; 0 for none"),
        ("backing_dev", "an existing file for writeback of idle and huge pages"),
        ("chain_size", "most pages in one zspage, 4..=16"),
    ];

    /// Sets one parameter from its text form.
    ///
    /// # Errors
    /// [`ZramError::Invalid`] naming the key or value; the configuration is
    /// unchanged.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ZramError> {
        let bad = |what: &str| ZramError::Invalid(format!("{key}={value}: {what}"));
        match key {
            "size" | "disksize" => {
                let size = parse_size(value).ok_or_else(|| bad("not a size"))?;
                if size == 0 {
                    return Err(bad("the device needs at least one page"));
                }
                self.disksize = size;
            }
            "comp" | "comp_algorithm" => {
                self.algorithm = Algorithm::parse(value)
                    .ok_or_else(|| bad("unknown algorithm (lz4, lz4hc, lz4hc:1..12, zstd, zstd:1..22)"))?;
            }
            "recomp" | "recomp_algorithm" => {
                let mut list = Vec::new();
                for name in value.split(',').filter(|n| !n.is_empty()) {
                    list.push(
                        Algorithm::parse(name)
                            .ok_or_else(|| bad("unknown algorithm (lz4, lz4hc, lz4hc:1..12, zstd, zstd:1..22)"))?,
                    );
                }
                if list.len() > MAX_RECOMP_ALGORITHMS {
                    return Err(bad("at most 3 secondary algorithms"));
                }
                self.recomp_algorithms = list;
            }
            "algorithm_params" => crate::params::apply(self, value)?,
            "mem_limit" => {
                let bytes = parse_size(value).ok_or_else(|| bad("not a size"))?;
                check_mem_limit(bytes)?;
                self.mem_limit = bytes;
            }
            "backing_dev" => {
                self.backing_dev = (!value.is_empty() && value != "none").then(|| PathBuf::from(value));
            }
            "chain_size" => {
                self.chain_size =
                    value.parse().ok().filter(|n| (4..=16).contains(n)).ok_or_else(|| bad("not in 4..=16"))?;
            }
            _ => return Err(ZramError::Invalid(format!("unknown parameter {key:?}"))),
        }
        Ok(())
    }

    /// The algorithm of each priority: the primary, then the secondaries.
    pub(crate) fn algorithms(&self) -> Vec<Algorithm> {
        std::iter::once(self.algorithm).chain(self.recomp_algorithms.iter().copied()).collect()
    }
}

/// The machine's memory in bytes (`MemTotal` of `/proc/meminfo`), if it
/// can be read; the page allocator's, which also bounds real-memory maps.
pub fn machine_memory() -> Option<u64> {
    mmkit::machine_memory()
}

/// A `mem_limit` that makes sense: 0 (none), or from one page up to the
/// machine's memory.
pub(crate) fn check_mem_limit(bytes: u64) -> Result<(), ZramError> {
    if bytes != 0 && bytes < crate::PAGE_SIZE as u64 {
        return Err(ZramError::Invalid(format!("mem_limit {bytes}: below one {}-byte page", crate::PAGE_SIZE)));
    }
    match machine_memory() {
        Some(most) if bytes > most => {
            Err(ZramError::Invalid(format!("mem_limit {bytes}: more than this machine's {most} bytes of memory")))
        }
        _ => Ok(()),
    }
}

/// `1234`, `64K`, `256M`, `1G`, `2T` (also `KiB`, `MB`…; 1024-based as the
/// kernel's `memparse`).
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let digits = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let number: u64 = text[..digits].parse().ok()?;
    let suffix = text[digits..].trim().to_ascii_lowercase();
    let shift = match suffix.trim_end_matches("ib").trim_end_matches('b') {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        _ => return None,
    };
    number.checked_mul(1 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_as_memparse_does_and_bad_input_changes_nothing() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("64K"), Some(64 << 10));
        assert_eq!(parse_size("1GiB"), Some(1 << 30));
        assert_eq!(parse_size("2mb"), Some(2 << 20));
        assert_eq!(parse_size("1X"), None);
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("99999999999999999999T"), None);
        let mut config = ZramConfig::default();
        let before = config.clone();
        assert!(matches!(config.set("size", "lots"), Err(ZramError::Invalid(_))));
        assert!(config.set("recomp", "zstd,lz4,zstd:5,zstd:7").is_err(), "four secondaries");
        assert!(config.set("chain_size", "3").is_err());
        assert!(config.set("colour", "blue").is_err());
        assert!(config.set("mem_limit", "1").is_err(), "below one page");
        assert!(config.set("mem_limit", "18446744073709551615").is_err(), "more than any machine");
        assert_eq!(config, before);
        config.set("recomp", "zstd,zstd:12").unwrap();
        config.set("backing_dev", "wb.img").unwrap();
        assert_eq!(config.algorithms().len(), 3);
        assert_eq!(config.backing_dev, Some(PathBuf::from("wb.img")));
    }
}
