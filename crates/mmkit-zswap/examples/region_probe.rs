//! Where a region's CPU goes: random touches (every fourth a write) over a
//! region of real pages twice its resident budget, from 1 or 2 threads,
//! as `mmkit bench zswap`'s `randaccess/2x` cases do, with each thread's
//! CPU time (the accessors' and the handler thread's, the background
//! reclaimer) from `/proc/self/task/*/schedstat` and the region's counters.
//!
//! `cargo run --release -p mmkit-zswap --example region_probe -- THREADS TOUCHES [MiB [MODE]]`
//! where MODE is `accessors` (the default: `read_u64`/`write_u64`),
//! `direct` (accessors, no background reclaimer: loads evict for
//! themselves), `raw` (touches through the region's pointer, a region made
//! with `RegionConfig::new`: faults resolved in the faulting thread) or
//! `raw-handler` (raw, faults resolved by the handler thread); or `--
//! codec`: LZ4's time a page alone, on the same pages.

use mmkit::{Backing, HugePages, MemoryMapBuilder};
use mmkit_testkit::kernel_zram::real_pages;
use mmkit_zswap::{RegionConfig, RegionStats, SwapFile, SwapRegion, Zswap, ZswapParams, PAGE_SIZE};
use std::sync::{Arc, Barrier};
use std::time::Instant;

/// Nanoseconds on a CPU of each of this process's threads, by name.
fn thread_cpu() -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return out };
    for task in tasks.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        let sched = std::fs::read_to_string(task.path().join("schedstat")).unwrap_or_default();
        let ns = sched.split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or(0);
        out.push((format!("{}:{}", comm.trim(), task.file_name().to_string_lossy()), ns));
    }
    out
}

/// Nanoseconds this process's threads waited for a CPU (runnable, not
/// running), summed.
fn waited() -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return 0 };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().nth(1).and_then(|n| n.parse::<u64>().ok()))
        .sum()
}

fn handler_cpu() -> u64 {
    thread_cpu().iter().filter(|(name, _)| name.starts_with("mmkit-zswap-uff")).map(|(_, ns)| ns).sum()
}

/// This thread's CPU time in ns.
fn my_cpu() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|n| n.parse().ok()))
        .unwrap_or(0)
}

fn seed(t: u64) -> u64 {
    0x9e37_79b9_7f4a_7c15u64 ^ (t.wrapping_add(1)).wrapping_mul(0xd1b5_4a32_d192_ed03)
}

/// `n` random touches (through the pointer when `raw`); returns this
/// thread's CPU ns.
fn touches(region: &SwapRegion, pages: u64, mut state: u64, n: u64, raw: bool) -> u64 {
    let cpu = my_cpu();
    for k in 0..n {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let at = (state % pages) as usize * PAGE_SIZE;
        if raw {
            // SAFETY: `at + 8` is inside the region, which outlives the
            // touches; every access to its words is atomic.
            let word = unsafe { std::sync::atomic::AtomicU64::from_ptr(region.as_ptr().add(at).cast::<u64>()) };
            let v = std::hint::black_box(word.load(std::sync::atomic::Ordering::Relaxed));
            if k % 4 == 3 {
                word.store(v.wrapping_add(1), std::sync::atomic::Ordering::Relaxed);
            }
            continue;
        }
        let v = region.read_u64(at).expect("read");
        if k % 4 == 3 {
            region.write_u64(at, v.wrapping_add(1)).expect("write");
        }
    }
    my_cpu() - cpu
}

fn delta(a: &RegionStats, b: &RegionStats) -> String {
    format!(
        "loads {} evictions {} (clean {}, background {}) wakeups {} direct {} zero {} in-thread faults {} hand-offs {} handler faults {}",
        b.swap_ins - a.swap_ins,
        b.evictions - a.evictions,
        b.evicted_clean - a.evicted_clean,
        b.background_evictions - a.background_evictions,
        b.reclaimer_wakeups - a.reclaimer_wakeups,
        b.direct_reclaims - a.direct_reclaims,
        b.zero_fills - a.zero_fills,
        b.faults_in_thread - a.faults_in_thread,
        b.handoffs - a.handoffs,
        (b.missing_faults + b.wp_faults) - (a.missing_faults + a.wp_faults),
    )
}

/// LZ4's time a page on `data`, alone on a thread: what a dirty eviction
/// and a load cannot do without.
fn codec_times(data: &[Vec<u8>]) {
    let lz4 = mmkit_compress::Algorithm::Lz4;
    let rounds = 4;
    let start = Instant::now();
    let mut stored = Vec::with_capacity(data.len());
    for _ in 0..rounds {
        stored.clear();
        stored.extend(data.iter().map(|p| lz4.compress(p, <[u8]>::to_vec).unwrap_or_else(|| p.clone())));
    }
    let compress = start.elapsed().as_nanos() as f64 / (rounds * data.len()) as f64;
    let mut page = vec![0u8; PAGE_SIZE];
    let start = Instant::now();
    for _ in 0..rounds {
        for s in &stored {
            if s.len() < PAGE_SIZE {
                assert!(lz4.decompress(s, &mut page));
            } else {
                page.copy_from_slice(s);
            }
        }
    }
    let decompress = start.elapsed().as_nanos() as f64 / (rounds * data.len()) as f64;
    println!("lz4 on these pages: compress {compress:.0} ns, decompress {decompress:.0} ns a page");
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("codec") {
        codec_times(&real_pages(4096));
        return;
    }
    let mut args = std::env::args().skip(1);
    let threads: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(400_000);
    let mib: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(128);
    let mode = args.next().unwrap_or_else(|| "accessors".into());
    let background = mode != "direct";
    let raw = mode.starts_with("raw");
    let len = mib << 20;
    let pages = (len / PAGE_SIZE) as u64;
    let mm = MemoryMapBuilder::with_memory(2 * len as u64).backing(Backing::RealMemory(HugePages::None)).build();
    let params = ZswapParams { max_pool_percent: 100, ..ZswapParams::default() };
    let zswap = Arc::new(
        Zswap::new(Arc::new(mm.expect("map")), SwapFile::create_temp(pages + 64).expect("swap file"), params)
            .expect("zswap"),
    );
    let config = RegionConfig {
        background_reclaim: background,
        fault_in_thread: mode != "raw-handler",
        ..RegionConfig::new(len, len / PAGE_SIZE / 2)
    };
    let region = SwapRegion::new(zswap, config).expect("region");
    let data = real_pages(4096.min(pages as usize));
    codec_times(&data);
    for p in 0..pages as usize {
        region.write(p * PAGE_SIZE, &data[p % data.len()]).expect("fill");
    }
    // Warm up: the first quarter of the touches, not counted.
    std::thread::scope(|s| {
        for t in 0..threads {
            let region = &region;
            s.spawn(move || touches(region, pages, seed(t + 100), n / 4 / threads, raw));
        }
    });
    let before = region.stats();
    let handler0 = handler_cpu();
    let waited0 = waited();
    let barrier = Barrier::new(threads as usize);
    let start = Instant::now();
    let cpus: Vec<u64> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (region, barrier) = (&region, &barrier);
                s.spawn(move || {
                    barrier.wait();
                    touches(region, pages, seed(t), n / threads, raw)
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("touch thread")).collect()
    });
    let wall = start.elapsed().as_nanos() as f64;
    let handler = handler_cpu() - handler0;
    let waited = waited() - waited0;
    let after = region.stats();
    let accessors: u64 = cpus.iter().sum();
    let n = n as f64;
    println!(
        "threads {threads}: {:.0} ns per touch (wall); CPU per touch: accessors {:.0} ns ({}), handler {:.0} ns; cores used {:.2}; waiting for a CPU {:.0} ns",
        wall / n,
        accessors as f64 / n,
        cpus.iter().map(|c| format!("{:.0}", *c as f64 / (n / threads as f64))).collect::<Vec<_>>().join("/"),
        handler as f64 / n,
        (accessors + handler) as f64 / wall,
        waited as f64 / n,
    );
    println!("  {}", delta(&before, &after));
}
