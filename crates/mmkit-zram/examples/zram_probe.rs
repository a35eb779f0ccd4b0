//! Timing/instruction probe of zram's 4 KiB write and read paths, for
//! profiling with `perf` or `valgrind --tool=callgrind` (the benchmark of
//! record is `mmkit bench zram`, which also drives the kernel's zram).
//!
//! Usage: `zram_probe [write|read] [real|half|same] [lz4|zstd] [threads] [ops]`
//! on a 64 MiB device filled with the same data first, as the benchmark does.
//!
//! `zram_probe release [sync|deferred] [pages] [run]`: `pages` real pages
//! (default 65,536: 256 MiB) written to a device, then every slot freed
//! through the slot-free notification (`phase_notify`, the caller's cost),
//! `run` slots a call (default 1: one call a slot; `mmkit bench zram`'s
//! `release/256MiB` sends runs of 512, a swap cluster), and the deferred
//! frees flushed (`phase_flush`); for callgrind, divide `phase_notify`'s
//! instructions by the pages.
use mmkit_testkit::kernel_zram::real_pages;
use mmkit_testkit::XorShift64;
use mmkit_zram::{Algorithm, Zram, ZramConfig, PAGE_SIZE};
use std::time::Instant;

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

#[inline(never)]
fn phase_notify(io: &mmkit_zram::OpenHandle<'_>, pages: usize, deferred: bool, run: usize) {
    for first in (0..pages).step_by(run) {
        match (deferred, run) {
            (true, 1) => io.slot_free_notify(first),
            (false, 1) => io.slot_free_notify_sync(first),
            (true, _) => io.slot_free_notify_range(first, run.min(pages - first)),
            (false, _) => io.slot_free_notify_range_sync(first, run.min(pages - first)),
        }
    }
}

#[inline(never)]
fn phase_flush(zram: &Zram) {
    if let Some(pool) = zram.pool() {
        pool.zs_free_deferred_flush();
    }
}

/// This thread's time on a CPU so far (Linux's `schedstat`), in ns: the
/// caller's own cost, which the other processes of a loaded machine do not
/// stretch as they stretch its wall-clock time.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn release(deferred: bool, pages: usize, run: usize) {
    let data = real_pages(pages);
    let disksize = (pages * PAGE_SIZE) as u64;
    let zram = Zram::with_own_memory(ZramConfig { disksize, ..ZramConfig::default() }).unwrap();
    let io = zram.open().unwrap();
    for (i, page) in data.iter().enumerate() {
        io.write((i * PAGE_SIZE) as u64, page).unwrap();
    }
    let start = Instant::now();
    let cpu = thread_cpu_ns();
    phase_notify(&io, data.len(), deferred, run.max(1));
    let caller = start.elapsed();
    let caller_cpu = std::time::Duration::from_nanos(thread_cpu_ns() - cpu);
    phase_flush(&zram);
    let drained = start.elapsed();
    assert_eq!(zram.mm_stat_values().orig_data_size, 0);
    println!("{} pages: caller {caller:?} (on a CPU {caller_cpu:?}), drained {drained:?}", data.len());
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("release") {
        let deferred = args.get(1).map(String::as_str) != Some("sync");
        let arg = |i: usize, default: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(default);
        release(deferred, arg(2, 65_536), arg(3, 1));
        return;
    }
    let arg = |i: usize, default: &str| args.get(i).cloned().unwrap_or_else(|| default.to_string());
    let write = arg(0, "write") == "write";
    let data = match arg(1, "half").as_str() {
        "real" => real_pages(16_384),
        "same" => (0..64u64).map(|i| (i * 0x0101_0101).to_ne_bytes().repeat(PAGE_SIZE / 8)).collect(),
        _ => half_pages(1024),
    };
    let algorithm = if arg(2, "lz4") == "zstd" { Algorithm::Zstd { level: 3 } } else { Algorithm::Lz4 };
    let threads: u64 = arg(3, "1").parse().unwrap_or(1);
    let ops: u64 = arg(4, "200000").parse().unwrap_or(200_000);
    let pages = (64u64 << 20) / PAGE_SIZE as u64;
    let zram = Zram::with_own_memory(ZramConfig { disksize: 64 << 20, algorithm, ..ZramConfig::default() }).unwrap();
    let io = zram.open().unwrap();
    for i in 0..pages {
        io.write(i * PAGE_SIZE as u64, &data[i as usize % data.len()]).unwrap();
    }
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let (io, data) = (&io, &data);
            s.spawn(move || {
                let mut rng = XorShift64::new(7 ^ (t << 32));
                let mut buf = vec![0u8; PAGE_SIZE];
                for _ in 0..ops / threads {
                    let at = (rng.next_u64() % pages) * PAGE_SIZE as u64;
                    if write {
                        let page = &data[(rng.next_u64() % data.len() as u64) as usize];
                        io.write(at, page).unwrap();
                    } else {
                        io.read(at, &mut buf).unwrap();
                    }
                }
            });
        }
    });
    let ns = start.elapsed().as_nanos() as f64 / ops as f64;
    println!("{ns:.1} ns/op ({threads} threads, {ops} ops)");
}
