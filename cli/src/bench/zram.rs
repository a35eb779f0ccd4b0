//! Suite `zram`: mmkit's zram device in-process, next to the kernel's own
//! zram in the same run when this machine offers one.
//!
//! - `randwrite_4k/*`, `randread_4k/*`: 4 KiB writes and reads at random
//!   pages of a 64 MiB device, on real data (pages of the system's shared
//!   libraries), on 50 %-compressible data and (writes) on same-filled
//!   pages; `…/2threads` runs the same ops from two threads (time per op
//!   of the whole run). Impls `mmkit/lz4` (the C lz4 library),
//!   `mmkit/lz4_flex` (the pure-Rust crate, to compare), `mmkit/zstd` and, when
//!   `/sys/class/zram-control` lets this process hot-add a private device,
//!   `kernel/lz4` through `O_DIRECT` `pwrite`/`pread`.
//! - `ratio/real`: 256 MiB of real binaries written once;
//!   `orig_data_size / mem_used_total` per impl (the `ratio` extra).
//! - `release/256MiB`: 256 MiB of real pages written to a device, then
//!   every slot freed through the slot-free notification, as a process
//!   exit releases its swap: the swap layer frees a cluster of 512 slots
//!   at a time and notifies each (Linux's `swap_range_free` calling
//!   `zram_slot_free_notify`; here `slot_free_notify_range`, one call a
//!   cluster). Impl `sync` frees each object before the call returns (the
//!   kernel before its 2026 series), `deferred` queues it
//!   (`zs_free_deferred`). `median_ns` until the caller returns,
//!   `drained_ns` until the pages are back with the page allocator;
//!   `fallback_frees`: deferred frees that fell back (most of a run).
//!
//! Owns the data sets and the kernel device's life: it never touches an
//! existing zram device, and resets and hot-removes the one it added.

use super::harness::{measure, BenchError, CaseResult, CaseSpec, Contender, Settings, SuiteReport};
use super::summary::{Headline, Row};
use super::{Progress, Suite};
use mmkit::{Backing, HugePages, MemoryMapBuilder};
use mmkit_testkit::kernel_zram::{real_pages, AlignedPage, KernelZram};
use mmkit_testkit::XorShift64;
use mmkit_zram::{Algorithm, OpenHandle, Zram, ZramConfig, PAGE_SIZE};
use std::sync::Arc;

/// The suite as the registry lists it.
pub const SUITE: Suite = Suite {
    name: "zram",
    about: "4 KiB random writes and reads on a 64 MiB device (real, half-compressible, same-filled data), 1 and 2 threads, lz4 and zstd, next to the kernel's zram; compression ratio on real binaries; release of 256 MiB through the slot-free notification (sync vs deferred)",
    run,
    baselines: &[("release/", "deferred"), ("", "mmkit/lz4")],
    headline: Some(Headline {
        mmkit: Row { case: "randwrite_4k/real", imp: "mmkit/lz4" },
        peer: Row { case: "randwrite_4k/real", imp: "kernel/lz4" },
        published: None,
    }),
};

/// The device for the random I/O cases: 64 MiB (4 MiB under `--quick`).
fn device_bytes(settings: &Settings) -> u64 {
    settings.pick(64 << 20, 4 << 20)
}

/// Pages half random, half a repeated pattern: about 50 % compressible.
fn half_pages(n: usize) -> Vec<Vec<u8>> {
    let mut rng = XorShift64::new(50);
    (0..n)
        .map(|i| {
            let mut page = vec![(i % 251) as u8; PAGE_SIZE];
            for b in &mut page[..PAGE_SIZE / 2] {
                *b = rng.next_u64() as u8;
            }
            page
        })
        .collect()
}

fn same_pages(n: usize) -> Vec<Vec<u8>> {
    (0..n).map(|i| (i as u64 * 0x0101_0101).to_ne_bytes().repeat(PAGE_SIZE / 8)).collect()
}

/// What a contender does to one page.
trait BlockDev: Sync {
    fn write_page(&self, index: u64, page: &[u8]) -> Result<(), BenchError>;
    fn read_page(&self, index: u64, page: &mut [u8]) -> Result<(), BenchError>;
}

/// The device through the open handle its I/O needs (held for the run).
impl BlockDev for OpenHandle<'_> {
    fn write_page(&self, index: u64, page: &[u8]) -> Result<(), BenchError> {
        self.write(index * PAGE_SIZE as u64, page).map_err(|e| BenchError::context("zram write", e))
    }
    fn read_page(&self, index: u64, page: &mut [u8]) -> Result<(), BenchError> {
        self.read(index * PAGE_SIZE as u64, page).map_err(|e| BenchError::context("zram read", e))
    }
}

/// The open handle a device's I/O goes through.
fn open(zram: &Zram) -> Result<OpenHandle<'_>, BenchError> {
    zram.open().map_err(|e| BenchError::context("zram open", e))
}

fn mmkit_device(algorithm: Algorithm, bytes: u64) -> Result<Zram, BenchError> {
    let mm = MemoryMapBuilder::with_memory(512 << 20)
        .backing(Backing::RealMemory(HugePages::None))
        .build()
        .map_err(|e| BenchError::context("building the map", e))?;
    Zram::new(Arc::new(mm), ZramConfig { disksize: bytes, algorithm, mem_limit: 0, ..ZramConfig::default() })
        .map_err(|e| BenchError::context("zram device", e))
}

/// `n` ops from `threads` threads, each at a random page.
/// Pages and threads of one case.
#[derive(Clone, Copy)]
struct Shape {
    pages: u64,
    threads: u64,
}

fn ops(dev: &dyn BlockDev, data: &[Vec<u8>], write: bool, shape: Shape, n: u64, seed: u64) -> Result<(), BenchError> {
    let Shape { pages, threads } = shape;
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || -> Result<(), BenchError> {
                    let mut rng = XorShift64::new(seed ^ (t << 32));
                    let mut buf = AlignedPage::new();
                    for _ in 0..n / threads {
                        let index = rng.next_u64() % pages;
                        if write {
                            let page = &data[(rng.next_u64() % data.len() as u64) as usize];
                            buf.bytes_mut().copy_from_slice(page);
                            dev.write_page(index, buf.bytes())?;
                        } else {
                            dev.read_page(index, buf.bytes_mut())?;
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        workers.into_iter().try_for_each(|w| w.join().unwrap_or_else(|_| Err(BenchError("worker panicked".into()))))
    })
}

fn fill(dev: &dyn BlockDev, data: &[Vec<u8>], pages: u64) -> Result<(), BenchError> {
    let mut buf = AlignedPage::new();
    for index in 0..pages {
        buf.bytes_mut().copy_from_slice(&data[index as usize % data.len()]);
        dev.write_page(index, buf.bytes())?;
    }
    Ok(())
}

fn run(settings: &Settings, progress: &mut Progress<'_>) -> Result<SuiteReport, BenchError> {
    let iters: u64 = settings.pick(100_000, 2_000);
    let real = real_pages(settings.pick(16_384, 1_024));
    let half = half_pages(1024);
    let same = same_pages(64);
    let bytes = device_bytes(settings);
    let pages = bytes / PAGE_SIZE as u64;
    let (lz4, lz4_flex, zstd) = (
        mmkit_device(Algorithm::Lz4, bytes)?,
        mmkit_device(Algorithm::Lz4Flex, bytes)?,
        mmkit_device(Algorithm::Zstd { level: 3 }, bytes)?,
    );
    let (lz4, lz4_flex, zstd) = (open(&lz4)?, open(&lz4_flex)?, open(&zstd)?);
    let kernel = KernelZram::add("lz4", bytes);
    let mut notes = Vec::new();
    match &kernel {
        Ok(dev) => notes
            .push(format!("kernel/lz4 is a hot-added /dev/zram{} (O_DIRECT pwrite/pread), removed afterwards", dev.id)),
        Err(why) => notes.push(format!("no kernel rows: {why}")),
    }
    let mut cases: Vec<CaseResult> = Vec::new();
    let sets: [(&str, &[Vec<u8>]); 3] = [("real", &real), ("half", &half), ("same", &same)];
    for (data_name, data) in sets {
        for threads in [1u64, 2] {
            for write in [true, false] {
                if !write && data_name == "same" {
                    continue;
                }
                let name = case_name(write, data_name, threads);
                progress(name);
                let devices: Vec<(&'static str, &dyn BlockDev)> = {
                    let mut v: Vec<(&'static str, &dyn BlockDev)> =
                        vec![("mmkit/lz4", &lz4), ("mmkit/lz4_flex", &lz4_flex), ("mmkit/zstd", &zstd)];
                    if let Ok(k) = &kernel {
                        v.push(("kernel/lz4", k));
                    }
                    v
                };
                for (_, dev) in &devices {
                    fill(*dev, data, pages)?;
                }
                let spec = CaseSpec { name, unit: "op", units_per_iter: 1, iters, warmup_iters: iters / 10 };
                let mut contenders: Vec<Contender<'_>> = devices
                    .iter()
                    .map(|&(impl_name, dev)| {
                        Contender::new(impl_name, move |n| ops(dev, data, write, Shape { pages, threads }, n, 7))
                    })
                    .collect();
                let mut results = measure(SUITE.name, spec, &mut contenders, settings.runs)?;
                for r in &mut results {
                    r.extra.push(("ops_per_sec", 1e9 / r.median_ns));
                }
                cases.extend(results);
            }
        }
    }
    progress("ratio/real");
    cases.extend(ratio_case(settings, kernel.as_ref().ok())?);
    progress("release/256MiB");
    cases.extend(release_case(settings)?);
    Ok(SuiteReport {
        suite: SUITE.name,
        description: format!(
            "{}: 4 KiB random I/O on a 64 MiB device and the compression ratio, mmkit in-process and the kernel's zram",
            SUITE.name
        ),
        cases,
        notes,
    })
}

fn case_name(write: bool, data: &str, threads: u64) -> &'static str {
    match (write, data, threads) {
        (true, "real", 1) => "randwrite_4k/real",
        (false, "real", 1) => "randread_4k/real",
        (true, "half", 1) => "randwrite_4k/half",
        (false, "half", 1) => "randread_4k/half",
        (true, "same", 1) => "randwrite_4k/same",
        (true, "real", _) => "randwrite_4k/real/2threads",
        (false, "real", _) => "randread_4k/real/2threads",
        (true, "half", _) => "randwrite_4k/half/2threads",
        (false, "half", _) => "randread_4k/half/2threads",
        _ => "randwrite_4k/same/2threads",
    }
}

/// 256 MiB of real binaries written once to a fresh device of each kind.
fn ratio_case(settings: &Settings, kernel: Option<&KernelZram>) -> Result<Vec<CaseResult>, BenchError> {
    let pages = real_pages(settings.pick(65_536, 2_048));
    let bytes = (pages.len() * PAGE_SIZE) as u64;
    let mut out = Vec::new();
    let row = |impl_name: &'static str, ratio: f64| {
        CaseResult::untimed(SUITE.name, "ratio/real", impl_name, vec![("ratio", ratio), ("bytes", bytes as f64)])
    };
    let impls = [
        ("mmkit/lz4", Algorithm::Lz4),
        ("mmkit/lz4_flex", Algorithm::Lz4Flex),
        ("mmkit/zstd", Algorithm::Zstd { level: 3 }),
    ];
    for (impl_name, algorithm) in impls {
        let mm = MemoryMapBuilder::with_memory(bytes * 2 + (64 << 20))
            .backing(Backing::RealMemory(HugePages::None))
            .build()
            .map_err(|e| BenchError::context("building the map", e))?;
        let dev =
            Zram::new(Arc::new(mm), ZramConfig { disksize: bytes, algorithm, mem_limit: 0, ..ZramConfig::default() })
                .map_err(|e| BenchError::context("zram device", e))?;
        let io = open(&dev)?;
        for (i, page) in pages.iter().enumerate() {
            io.write_page(i as u64, page)?;
        }
        drop(io);
        let s = dev.mm_stat_values();
        out.push(row(impl_name, s.orig_data_size as f64 / s.mem_used_total.max(1) as f64));
    }
    if kernel.is_some() {
        if let Ok(dev) = KernelZram::add("lz4", bytes) {
            let mut buf = AlignedPage::new();
            for (i, page) in pages.iter().enumerate() {
                buf.bytes_mut().copy_from_slice(page);
                BlockDev::write_page(&dev, i as u64, buf.bytes())?;
            }
            if let Some(cols) = dev.mm_stat() {
                out.push(row("kernel/lz4", cols[0] as f64 / cols[2].max(1) as f64));
            }
        }
    }
    Ok(out)
}

/// Slots the swap layer frees together (Linux's `SWAPFILE_CLUSTER`).
const SWAP_CLUSTER: usize = 512;

/// `release/256MiB`: for each impl and run, a fresh device gets 256 MiB of
/// real pages, then one thread sends the slot-free notification for every
/// page, a swap cluster a call, as a process exit does.
fn release_case(settings: &Settings) -> Result<Vec<CaseResult>, BenchError> {
    let pages = real_pages(settings.pick(65_536, 2_048));
    let bytes = (pages.len() * PAGE_SIZE) as u64;
    let mut out = Vec::new();
    for impl_name in ["sync", "deferred"] {
        let (mut callers, mut drained, mut fallback) = (Vec::new(), Vec::new(), 0u64);
        for _ in 0..settings.runs.max(1) {
            let mm = MemoryMapBuilder::with_memory(bytes * 2 + (64 << 20))
                .backing(Backing::RealMemory(HugePages::None))
                .build()
                .map_err(|e| BenchError::context("building the map", e))?;
            let dev = Zram::new(Arc::new(mm), ZramConfig { disksize: bytes, mem_limit: 0, ..ZramConfig::default() })
                .map_err(|e| BenchError::context("zram device", e))?;
            let pool = dev.pool().ok_or_else(|| BenchError("the device has no pool".into()))?;
            let io = open(&dev)?;
            for (i, page) in pages.iter().enumerate() {
                io.write_page(i as u64, page)?;
            }
            let start = std::time::Instant::now();
            for first in (0..pages.len()).step_by(SWAP_CLUSTER) {
                let count = SWAP_CLUSTER.min(pages.len() - first);
                if impl_name == "sync" {
                    io.slot_free_notify_range_sync(first, count);
                } else {
                    io.slot_free_notify_range(first, count);
                }
            }
            callers.push(start.elapsed().as_nanos() as f64);
            pool.zs_free_deferred_flush();
            drained.push(start.elapsed().as_nanos() as f64);
            fallback = fallback.max(pool.deferred_stats().fallback);
            if pool.zs_get_total_pages() != 0 || dev.mm_stat_values().orig_data_size != 0 {
                return Err(BenchError(format!("release/256MiB/{impl_name}: pages left after the release")));
            }
        }
        let mut extra = vec![("drained_ns", super::harness::median(&mut drained)), ("pages", pages.len() as f64)];
        if impl_name == "deferred" {
            extra.push(("fallback_frees", fallback as f64));
        }
        out.push(CaseResult::releases(SUITE.name, "release/256MiB", impl_name, &callers, extra));
    }
    Ok(out)
}

impl BlockDev for KernelZram {
    fn write_page(&self, index: u64, page: &[u8]) -> Result<(), BenchError> {
        KernelZram::write_page(self, index, page).map_err(|e| BenchError::context("kernel zram pwrite", e))
    }
    fn read_page(&self, index: u64, page: &mut [u8]) -> Result<(), BenchError> {
        KernelZram::read_page(self, index, page).map_err(|e| BenchError::context("kernel zram pread", e))
    }
}
