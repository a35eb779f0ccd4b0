//! How a device is set up: zram's `disksize`, `comp_algorithm`,
//! `recomp_algorithm`, `algorithm_params` (`params.rs`'s), `mem_limit` and
//! `backing_dev`, plus zsmalloc's chain
//! size: plain data, and the checks of one value each (a size, an
//! algorithm's name, a backing file, a memory limit).
//!
//! Owns the configuration. `params` validates it and sets it from its text
//! forms (`ZramConfig::set`, the `key=value` parser for command lines and
//! plugin arguments). Knows nothing of slots, pools or the device.

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
    /// Most memory the device may hold (the pool and the slot table), in
    /// bytes; 0 for no limit.
    pub mem_limit: u64,
    /// The file idle and huge pages are written back to.
    pub backing_dev: Option<PathBuf>,
    /// Whether `backing_dev` may name a file that holds data (any byte not
    /// zero), which writeback then overwrites; without it such a file is
    /// refused when named (`backing_overwrite=1` before `backing_dev=`).
    pub backing_overwrite: bool,
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
            backing_overwrite: false,
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
        ("mem_limit", "most memory the device may use (compressed pages and slot table), K/M/G suffixes; 0 for none"),
        (
            "backing_dev",
            "an existing file for writeback of idle and huge pages; one holding data (a byte not zero) is refused \
             unless backing_overwrite=1 comes first",
        ),
        ("backing_overwrite", "1: let backing_dev name a file that holds data, which writeback overwrites"),
        ("chain_size", "most pages in one zspage, 4..=16"),
    ];

    /// The algorithm of each priority: the primary, then the secondaries.
    pub(crate) fn algorithms(&self) -> Vec<Algorithm> {
        std::iter::once(self.algorithm).chain(self.recomp_algorithms.iter().copied()).collect()
    }
}

/// An algorithm by name, with a message that says what is wrong: an
/// unknown name, or a level the algorithm does not take (`zstd:0` is
/// zstd, at a level out of its range).
pub(crate) fn parse_algorithm(text: &str) -> Result<Algorithm, String> {
    const KNOWN: &str = "lz4, lz4_flex, lz4hc, lz4hc:1..12, zstd, zstd:1..22";
    if let Some(algorithm) = Algorithm::parse(text) {
        return Ok(algorithm);
    }
    let (name, level) = text.split_once(':').unwrap_or((text, ""));
    match Algorithm::parse(name) {
        None => Err(format!("unknown algorithm {name:?} ({KNOWN})")),
        Some(_) if level.is_empty() => Err(format!("{text:?}: a level after `:` is missing ({KNOWN})")),
        Some(algorithm) => match level.parse::<i64>() {
            Ok(n) => Err(algorithm.with_level(n).err().map_or_else(|| format!("{text:?}: {KNOWN}"), |e| e.to_string())),
            Err(_) => Err(format!("{text:?}: the level {level:?} is not a number ({KNOWN})")),
        },
    }
}

/// The machine's memory in bytes (`MemTotal` of `/proc/meminfo`), if it
/// can be read; the page allocator's, which also bounds real-memory maps.
pub fn machine_memory() -> Option<u64> {
    mmkit::machine_memory()
}

/// Bytes of slot table a device of `disksize` bytes needs when every page
/// of it has been written: a 16-byte slot a page (Linux's
/// `zram_table_entry`) and the table's directory. The table is allocated
/// as pages arrive; `mm_stat`'s `mem_used_total` counts what it holds.
pub fn slot_table_bytes(disksize: u64) -> u64 {
    crate::table::table_bytes_for(disksize.div_ceil(crate::PAGE_SIZE as u64))
}

/// The memory check every size change makes (start-up and `disksize`):
/// a device whose slot table alone would need more than the machine's
/// memory is refused, as the kernel's `disksize_store` fails when it cannot
/// vmalloc the table. Returns the reason in GiB.
pub(crate) fn check_disksize(disksize: u64) -> Result<(), String> {
    let table = slot_table_bytes(disksize);
    match machine_memory() {
        Some(memory) if table > memory => {
            Err(format!("the slot table alone would need {}, this machine has {}", gib(table), gib(memory)))
        }
        _ => Ok(()),
    }
}

/// Bytes in GiB, as a person reads them.
pub(crate) fn gib(bytes: u64) -> String {
    let g = bytes as f64 / f64::from(1u32 << 30);
    if g >= 10.0 {
        format!("{g:.0} GiB")
    } else {
        format!("{g:.1} GiB")
    }
}

/// Refuses a backing file that holds data: any byte that is not zero,
/// looked for in its data extents only (`SEEK_DATA`; a file made with
/// `truncate -s` or `fallocate` has none). Writeback overwrites the file
/// from its first block, and the kernel's zram takes only block devices,
/// claimed exclusively; a regular file full of someone's data is refused
/// unless `backing_overwrite` says otherwise. A path that cannot be opened
/// or is not a regular file is left to the backing device's own checks.
pub(crate) fn refuse_backing_with_data(path: &std::path::Path) -> Result<(), String> {
    let Ok(file) = std::fs::File::open(path) else { return Ok(()) };
    match first_data_byte(&file) {
        Ok(None) => Ok(()),
        Ok(Some(at)) => Err(format!(
            "the file holds data (a byte not zero at offset {at}) that writeback would overwrite; empty it \
             (truncate -s 0, then to the size wanted) or say backing_overwrite=1 first (serve --force-backing)"
        )),
        Err(e) => Err(format!("cannot check whether the file holds data: {e}")),
    }
}

/// A backing file that is not a regular file (symbolic links followed),
/// refused before it is opened: opening a FIFO would wait for a writer, a
/// device or a directory is no file to write pages into. A missing file is
/// the open's to report.
pub(crate) fn refuse_backing_not_a_file(path: &std::path::Path) -> Result<(), String> {
    match std::fs::metadata(path) {
        Ok(meta) if !meta.is_file() => Err(format!(
            "{}, not a regular file: writeback needs a file of at least one page (truncate -s 1G FILE makes one)",
            file_kind(&meta)
        )),
        _ => Ok(()),
    }
}

/// What kind of file `meta` names, in words for a message ("a FIFO (a
/// named or unnamed pipe)"): the one wording of zram's and the CLI's
/// refusals of a path.
pub fn file_kind(meta: &std::fs::Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    if t.is_symlink() {
        "a symbolic link"
    } else if t.is_file() {
        "a regular file"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_fifo() {
        "a FIFO (a named or unnamed pipe)"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// The offset of the first byte not zero in `file`, reading only its data
/// extents (every byte where `SEEK_DATA` is not supported).
fn first_data_byte(file: &std::fs::File) -> std::io::Result<Option<u64>> {
    use rustix::fs::{seek, SeekFrom};
    use std::os::unix::fs::FileExt;
    let len = file.metadata()?.len();
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    while at < len {
        let data = match seek(file, SeekFrom::Data(at)) {
            Ok(data) => data,
            // No data past `at`: the rest is a hole.
            Err(rustix::io::Errno::NXIO) => return Ok(None),
            Err(rustix::io::Errno::INVAL) if at == 0 => 0,
            Err(e) => return Err(e.into()),
        };
        let hole = seek(file, SeekFrom::Hole(data)).unwrap_or(len).min(len);
        let mut pos = data;
        while pos < hole {
            let want = usize::try_from((hole - pos).min(buf.len() as u64)).unwrap_or(buf.len());
            let n = file.read_at(&mut buf[..want], pos)?;
            if n == 0 {
                return Ok(None);
            }
            if let Some(i) = buf[..n].iter().position(|&b| b != 0) {
                return Ok(Some(pos + i as u64));
            }
            pos += n as u64;
        }
        at = hole.max(at + 1);
    }
    Ok(None)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::size::parse_size;

    #[test]
    fn sizes_parse_as_memparse_does_and_bad_input_changes_nothing() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("2mb"), Ok(2 << 20));
        assert!(parse_size("1X").is_err() && parse_size("").is_err() && parse_size("10 G").is_err());
        assert!(parse_size("99999999999999999999T").is_err());
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

    #[test]
    fn recomp_algorithm_takes_the_kernels_form_and_refuses_bad_ones_changing_nothing() {
        let mut config = ZramConfig::default();
        config.set("recomp_algorithm", "algo=zstd priority=1").unwrap();
        assert_eq!(config.recomp_algorithms, vec![Algorithm::Zstd { level: 3 }]);
        config.set("recomp_algorithm", "algo=lz4hc").unwrap();
        assert_eq!(config.recomp_algorithms, vec![Algorithm::Lz4Hc { level: 9 }], "priority 1 when not given");
        config.set("recomp_algorithm", "priority=2 algo=zstd:9").unwrap();
        assert_eq!(config.recomp_algorithms[1], Algorithm::Zstd { level: 9 });
        let before = config.clone();
        for bad in [
            "algo=lzma priority=1",
            "priority=1",
            "algo=zstd priority=0",
            "algo=zstd priority=4",
            "algo=zstd priority=x",
            "algo=zstd priority=1 priority=2",
            "algo=zstd colour=blue",
            "algo=zstd stray",
        ] {
            let err = config.set("recomp_algorithm", bad).unwrap_err();
            assert!(err.to_string().contains("recomp_algorithm"), "{bad}: {err}");
            assert_eq!(config, before, "{bad} changed the configuration");
        }
        let mut fresh = ZramConfig::default();
        assert!(fresh.set("recomp_algorithm", "algo=zstd priority=3").unwrap_err().to_string().contains("priority 1"));
        // mmkit's own comma-separated form still works.
        fresh.set("recomp", "zstd,lz4hc").unwrap();
        assert_eq!(fresh.recomp_algorithms.len(), 2);
    }

    #[test]
    fn sizes_whose_slot_table_exceeds_the_machine_are_refused_wherever_they_are_set() {
        assert_eq!(slot_table_bytes(16 << 20), 64 * 1024 + table_entry());
        let Some(memory) = machine_memory() else { return };
        let too_big = (memory / 16 + 4096) * 4096 * 2;
        let mut config = ZramConfig::default();
        let err = config.set("disksize", &too_big.to_string()).unwrap_err().to_string();
        assert!(err.contains("slot table alone would need") && err.contains("GiB"), "{err}");
        assert_eq!(config, ZramConfig::default());
        config.set("size", "1T").unwrap_or_else(|e| assert!(memory < 4 << 30, "{e}"));
    }

    fn table_entry() -> u64 {
        slot_table_bytes(1) - 64 * 1024
    }

    #[test]
    fn a_backing_file_holding_data_is_refused_unless_overwrite_is_said_first() {
        /// Removed when dropped, however the test ends.
        struct Scratch(PathBuf);
        impl Drop for Scratch {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
        let scratch = Scratch(std::env::temp_dir().join(format!("mmkit-zram-backing-{}", std::process::id())));
        let dir = &scratch.0;
        std::fs::create_dir_all(dir).unwrap();
        let sparse = dir.join("sparse.img");
        std::fs::File::create(&sparse).unwrap().set_len(8 << 20).unwrap();
        let zeroes = dir.join("zeroes.img");
        std::fs::write(&zeroes, vec![0u8; 1 << 20]).unwrap();
        let data = dir.join("data.img");
        let mut bytes = vec![0u8; 3 << 20];
        bytes[(2 << 20) + 5] = 1;
        std::fs::write(&data, &bytes).unwrap();
        let mut config = ZramConfig::default();
        config.set("backing_dev", sparse.to_str().unwrap()).unwrap();
        config.set("backing_dev", zeroes.to_str().unwrap()).unwrap();
        let before = config.clone();
        let err = config.set("backing_dev", data.to_str().unwrap()).unwrap_err().to_string();
        assert!(err.contains("holds data") && err.contains(&((2 << 20) + 5).to_string()), "{err}");
        assert!(err.contains("backing_overwrite=1"), "{err}");
        assert_eq!(config, before, "nothing changed");
        assert!(config.set("backing_overwrite", "maybe").is_err());
        config.set("backing_overwrite", "1").unwrap();
        config.set("backing_dev", data.to_str().unwrap()).unwrap();
        assert_eq!(config.backing_dev.as_deref(), Some(data.as_path()));
    }
}
