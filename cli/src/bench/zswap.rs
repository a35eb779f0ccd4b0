//! Suite `zswap` (only when named: it swaps a child process to a kernel
//! zram device): mmkit's zswap behind a userfaultfd [`SwapRegion`], and the
//! kernel's own swap path on the same data and the same access loop.
//!
//! - `release/Nthreads` (1, 2, 4): N regions, each holding 64 MiB of real
//!   pages in zswap, dropped by N threads at once — a process exit.
//!   `median_ns` is until the callers return, `drained_ns` until every
//!   page is back with the page allocator. Impls `sync` (`zs_free` in
//!   `zswap_invalidate`) and `deferred` (`zs_free_deferred`).
//! - `randaccess/2x`, `sequential/2x`: time per 4 KiB page touch over a
//!   working set twice the resident budget (128 MiB over 64 MiB), filled
//!   with real pages; every fourth touch writes. Impls `mmkit` (a
//!   `SwapRegion` with a 64 MiB budget) and `kernel/zram-swap` (a child
//!   process in a memory cgroup of 64 MiB plus its own footprint, swapping
//!   to a hot-added lz4 zram device), measured in interleaved rounds. Every
//!   touch is timed on both sides into the same histogram: `mean_ns` and
//!   `p99_ns` per touch (the kernel's tail is its synchronous reclaim).
//!   The kernel's cgroup is limited to the budget plus the child's own
//!   footprint, measured once it has joined the cgroup; its OOM killer is
//!   off, and a watchdog wakes a child sleeping at the limit
//!   (`zswap_kernel::MemCgroup`), so that the child is never killed.
//! - `randaccess/2x/2threads`: two threads touching one region (one
//!   buffer) at random; `median_ns` is the time per touch of the pair.
//! - `randaccess/2x/raw`, `sequential/2x/raw`, `randaccess/2x/raw/2threads`:
//!   the same loops touching the region's memory through its pointer
//!   (`SwapRegion::as_ptr`), as a program uses it: impl `mmkit` is a
//!   region made with `RegionConfig::new` (faults resolved in the
//!   faulting thread), `mmkit/handler-thread` one with `fault_in_thread`
//!   off (the handler thread resolves them); the kernel's child runs the
//!   same loops. `cpu_ns_per_touch` on every access row: all threads of
//!   mmkit's process, against the kernel child's CPU plus `kswapd`'s, over
//!   the timed runs (from `/proc`, in clock ticks), per touch.
//! - `ratio/real`: after the access cases, mmkit's stored bytes over
//!   `pool_total_size` and the kernel device's `orig_data_size /
//!   mem_used_total` (mm_stat).
//!
//! Owns the workloads; the kernel's resources are `zswap_kernel`'s.

use super::harness::{measure, BenchError, CaseResult, CaseSpec, Contender, Settings, SuiteReport, MMKIT};
use super::latency::TouchTimes;
use super::summary::{Headline, Row};
use super::zswap_kernel::{
    access_loop, kernel_cpu_ns, own_cpu_ns, thread_seed, AccessChild, MemCgroup, ZramSwap, DATA_PAGES,
};
use super::{Progress, Suite};
use mmkit::{Backing, HugePages, MemoryMapBuilder, PageAllocator};
use mmkit_testkit::kernel_zram::real_pages;
use mmkit_zswap::{RegionConfig, ReleaseMode, SwapFile, SwapRegion, Zswap, ZswapParams, PAGE_SIZE};
use std::sync::{Arc, Barrier};
use std::time::Instant;

/// The suite as the registry lists it.
pub const SUITE: Suite = Suite {
    name: "zswap",
    about: "zswap behind a userfaultfd region: release of 64 MiB regions from 1/2/4 threads (sync vs deferred), random and sequential 4 KiB touches over twice the budget next to the kernel's zram swap in a memory cgroup, compression ratio",
    run,
    baselines: &[("release/", "deferred")],
    headline: Some(Headline {
        mmkit: Row { case: "randaccess/2x/raw", imp: MMKIT },
        peer: Row { case: "randaccess/2x/raw", imp: "kernel/zram-swap" },
        published: None,
    }),
};

fn err<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> BenchError {
    move |e| BenchError::context(what, e)
}

fn real_map(bytes: u64) -> Result<Arc<PageAllocator>, BenchError> {
    let mm = MemoryMapBuilder::with_memory(bytes).backing(Backing::RealMemory(HugePages::None)).build();
    Ok(Arc::new(mm.map_err(err("building the map"))?))
}

fn zswap(mm: &Arc<PageAllocator>, slots: u64) -> Result<Arc<Zswap>, BenchError> {
    let params = ZswapParams { max_pool_percent: 100, ..ZswapParams::default() };
    let file = SwapFile::create_temp(slots).map_err(err("swap file"))?;
    Ok(Arc::new(Zswap::new(mm.clone(), file, params).map_err(err("zswap"))?))
}

/// Writes `data`'s pages over the region, from page 0 on.
fn fill(region: &SwapRegion, data: &[Vec<u8>], skip: usize) -> Result<(), BenchError> {
    for p in 0..region.len() / PAGE_SIZE {
        region.write(p * PAGE_SIZE, &data[(skip + p) % data.len()]).map_err(err("region write"))?;
    }
    Ok(())
}

fn run(settings: &Settings, progress: &mut Progress<'_>) -> Result<SuiteReport, BenchError> {
    let mut cases = Vec::new();
    let mut notes = Vec::new();
    let probe = zswap(&real_map(16 << 20)?, 16)?;
    if let Err(e) = SwapRegion::new(probe, RegionConfig::new(2 * PAGE_SIZE, 2)) {
        notes.push(format!("zswap: no mmkit rows: {e}"));
        return Ok(SuiteReport { suite: SUITE.name, description: description(), cases, notes });
    }
    let region_bytes: usize = settings.pick(64 << 20, 4 << 20);
    let data = real_pages(4 * region_bytes / PAGE_SIZE);
    for threads in [1usize, 2, 4] {
        let name = match threads {
            1 => "release/1threads",
            2 => "release/2threads",
            _ => "release/4threads",
        };
        progress(name);
        cases.extend(release_case(name, threads, region_bytes, &data, settings)?);
    }
    notes.push(format!(
        "release/*: N regions of {} MiB of real pages each, all in zswap, dropped by N threads at once; median_ns until the callers return, drained_ns until zsmalloc has freed everything",
        region_bytes >> 20
    ));
    access_cases(settings, progress, &mut cases, &mut notes)?;
    Ok(SuiteReport { suite: SUITE.name, description: description(), cases, notes })
}

fn description() -> String {
    format!("{}: zswap behind a userfaultfd region: release, page touches over twice the budget next to the kernel's zram swap, compression ratio", SUITE.name)
}

/// One release case: for each run and impl, fill `threads` regions, then
/// drop them from `threads` threads at once.
fn release_case(
    name: &'static str,
    threads: usize,
    region_bytes: usize,
    data: &[Vec<u8>],
    settings: &Settings,
) -> Result<Vec<CaseResult>, BenchError> {
    let mm = real_map(settings.pick(1 << 30, 128 << 20))?;
    let impls = [("sync", ReleaseMode::Sync), ("deferred", ReleaseMode::Deferred)];
    let mut callers = vec![Vec::new(); impls.len()];
    let mut drained = vec![Vec::new(); impls.len()];
    let mut fallback = vec![0u64; impls.len()];
    for round in 0..settings.runs.max(1) {
        for k in 0..impls.len() {
            let i = (round + k) % impls.len();
            let (impl_name, mode) = impls[i];
            let z = zswap(&mm, (threads * region_bytes / PAGE_SIZE) as u64 + 64)?;
            let mut regions = Vec::with_capacity(threads);
            for t in 0..threads {
                let config = RegionConfig { release: mode, ..RegionConfig::new(region_bytes, 16) };
                let region = SwapRegion::new(z.clone(), config).map_err(err("region"))?;
                fill(&region, data, t * region_bytes / PAGE_SIZE)?;
                region.reclaim(0).map_err(err("reclaim"))?;
                regions.push(region);
            }
            let barrier = Barrier::new(threads);
            let (start, returned) = std::thread::scope(|s| {
                let workers: Vec<_> = regions
                    .into_iter()
                    .map(|region| {
                        let barrier = &barrier;
                        s.spawn(move || {
                            barrier.wait();
                            let start = Instant::now();
                            drop(region);
                            (start, Instant::now())
                        })
                    })
                    .collect();
                let times: Vec<(Instant, Instant)> = workers.into_iter().filter_map(|w| w.join().ok()).collect();
                let now = Instant::now();
                (times.iter().map(|t| t.0).min().unwrap_or(now), times.iter().map(|t| t.1).max().unwrap_or(now))
            });
            callers[i].push(returned.duration_since(start).as_nanos() as f64);
            z.flush_deferred();
            drained[i].push(start.elapsed().as_nanos() as f64);
            fallback[i] += z.pool().deferred_stats().fallback;
            if z.stats().stored_pages != 0 || z.pool().zs_get_total_pages() != 0 {
                return Err(BenchError(format!("{name}/{impl_name}: entries left after the release")));
            }
        }
    }
    let _ = mm;
    Ok(impls
        .iter()
        .enumerate()
        .map(|(i, &(impl_name, _))| {
            let (min, max) = callers[i].iter().fold((f64::MAX, 0.0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
            CaseResult {
                suite: SUITE.name,
                name,
                impl_name,
                unit: "release",
                median_ns: super::harness::median(&mut callers[i].clone()),
                min_ns: min,
                max_ns: max,
                runs: callers[i].len(),
                units_per_run: 1,
                ratio_vs_mmkit: None,
                baseline: None,
                ratio_vs_baseline: None,
                extra: vec![
                    ("drained_ns", super::harness::median(&mut drained[i])),
                    ("fallback_frees_per_run", fallback[i] as f64 / callers[i].len().max(1) as f64),
                ],
            }
        })
        .collect())
}

/// What the kernel's cgroup gets over the budget besides the child's
/// measured footprint: page tables for the buffer (8 bytes per 4 KiB page)
/// and 2 MiB for the swap cache and the kernel's memory in flight.
fn cgroup_limit(budget: u64, working_set: u64, footprint: u64) -> u64 {
    budget + footprint + working_set / 512 + (2 << 20)
}

/// How a touch reaches the region.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Touch {
    /// `read_u64` / `write_u64`.
    Accessors,
    /// Loads and stores through the region's pointer.
    Raw,
}

/// One raw touch of `page`'s first word through the region's pointer: a
/// load, and with `write` a store of the word plus one.
#[allow(unsafe_code)]
fn raw_touch(region: &SwapRegion, page: u64, write: bool) {
    let at = page as usize * PAGE_SIZE;
    assert!(at + 8 <= region.len());
    // SAFETY: `at + 8` is inside the region's mapping, which lives as long
    // as `region`; the word is 8-aligned (pages are); other threads touch
    // the region's words only atomically (the accessors, and this loop),
    // so an atomic view of it races with nothing.
    let word = unsafe { std::sync::atomic::AtomicU64::from_ptr(region.as_ptr().add(at).cast::<u64>()) };
    let v = std::hint::black_box(word.load(std::sync::atomic::Ordering::Relaxed));
    if write {
        word.store(v.wrapping_add(1), std::sync::atomic::Ordering::Relaxed);
    }
}

/// `n` touches of the access loop on `region` by `threads` threads (`n /
/// threads` each), timing each touch into `times` (one per thread).
fn touch_region(
    region: &SwapRegion,
    how: Touch,
    pattern: &'static str,
    n: u64,
    pages: u64,
    states: &mut [u64],
    times: &mut [TouchTimes],
) -> Result<(), BenchError> {
    let one = |state: &mut u64, times: &mut TouchTimes, n: u64| {
        let mut failed = None;
        access_loop(pattern, n, pages, state, times, |page, write| {
            if how == Touch::Raw {
                return raw_touch(region, page, write);
            }
            let at = page as usize * PAGE_SIZE;
            match region.read_u64(at) {
                Ok(v) if write => {
                    if let Err(e) = region.write_u64(at, v.wrapping_add(1)) {
                        failed = Some(e);
                    }
                }
                Ok(_) => {}
                Err(e) => failed = Some(e),
            }
        });
        failed.map_or(Ok(()), |e| Err(BenchError::context("region access", e)))
    };
    if states.len() == 1 {
        return one(&mut states[0], &mut times[0], n);
    }
    let per_thread = n / states.len() as u64;
    std::thread::scope(|s| {
        let workers: Vec<_> = states
            .iter_mut()
            .zip(times.iter_mut())
            .map(|(state, times)| s.spawn(move || one(state, times, per_thread)))
            .collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().unwrap_or_else(|_| Err(BenchError("a touch thread panicked".into()))))
    })
}

/// CPU time of the timed calls of one contender: `cpu()` read around each
/// call but the first (the warm-up), summed with the touches made.
#[derive(Default)]
struct CpuTally {
    ns: f64,
    touches: u64,
}

impl CpuTally {
    fn per_touch(&self) -> f64 {
        if self.touches == 0 {
            f64::NAN
        } else {
            self.ns / self.touches as f64
        }
    }
}

/// The kernel's side, when this machine can give one.
struct Kernel {
    // Field order is drop order: the child exits before its cgroup goes,
    // and the cgroup before the swap device is turned off.
    child: AccessChild,
    cgroup: MemCgroup,
    zram: ZramSwap,
}

fn kernel_side(working_set: u64, budget: u64) -> Result<Kernel, String> {
    let zram = ZramSwap::add(working_set * 4)?;
    let mut cgroup = MemCgroup::create(&format!("mmkit-zswap-{}", std::process::id()))?;
    let child = AccessChild::start(&mut cgroup, working_set, |footprint| cgroup_limit(budget, working_set, footprint))
        .map_err(|e| e.0)?;
    Ok(Kernel { child, cgroup, zram })
}

/// The access cases: each names its loop (`rand`, `seq`, `rand2` for two
/// threads of random touches), its threads and how it touches the region.
const ACCESS_CASES: [(&str, &str, usize, Touch); 6] = [
    ("randaccess/2x", "rand", 1, Touch::Accessors),
    ("randaccess/2x/2threads", "rand2", 2, Touch::Accessors),
    ("sequential/2x", "seq", 1, Touch::Accessors),
    ("randaccess/2x/raw", "rand", 1, Touch::Raw),
    ("randaccess/2x/raw/2threads", "rand2", 2, Touch::Raw),
    ("sequential/2x/raw", "seq", 1, Touch::Raw),
];

/// The impl of the region that resolves raw faults in its handler thread.
const HANDLER_THREAD: &str = "mmkit/handler-thread";

fn access_cases(
    settings: &Settings,
    progress: &mut Progress<'_>,
    cases: &mut Vec<CaseResult>,
    notes: &mut Vec<String>,
) -> Result<(), BenchError> {
    let working_set: u64 = settings.pick(128 << 20, 8 << 20);
    let budget = working_set / 2;
    let pages = working_set / PAGE_SIZE as u64;
    let budget_pages = (budget / PAGE_SIZE as u64) as usize;
    let data = real_pages(DATA_PAGES.min(pages as usize));
    // One zswap each, so that each region's pool and ratio are its own.
    let new_region = |config: RegionConfig| -> Result<(Arc<Zswap>, SwapRegion), BenchError> {
        let z = zswap(&real_map(working_set * 2)?, pages + 64)?;
        let region = SwapRegion::new(z.clone(), config).map_err(err("region"))?;
        fill(&region, &data, 0)?;
        Ok((z, region))
    };
    let (z, region) = new_region(RegionConfig::new(working_set as usize, budget_pages))?;
    let (_, raw_region) = new_region(RegionConfig::new(working_set as usize, budget_pages))?;
    let (_, thread_region) =
        new_region(RegionConfig { fault_in_thread: false, ..RegionConfig::new(working_set as usize, budget_pages) })?;
    if !raw_region.resolves_faults_in_thread() {
        notes.push("mmkit: this kernel has no UFFD_FEATURE_SIGBUS; the default region's raw faults go to its handler thread as well".into());
    }
    let mut kernel = match kernel_side(working_set, budget) {
        Ok(k) => {
            notes.push(format!(
                "kernel/zram-swap: a child process in a memory cgroup of {} MiB (the budget) + {:.1} MiB (its footprint besides the buffer, measured with no limit once it had filled the buffer and run each loop) + {:.1} MiB (the buffer's page tables and 2 MiB for the swap cache), swapping to a hot-added lz4 /dev/zram{} (swapoff, reset and hot_remove afterwards)",
                budget >> 20,
                k.child.footprint as f64 / (1 << 20) as f64,
                (cgroup_limit(budget, working_set, k.child.footprint) - budget - k.child.footprint) as f64
                    / (1 << 20) as f64,
                k.zram.id
            ));
            Some(k)
        }
        Err(why) => {
            notes.push(format!("no kernel rows: {why}"));
            None
        }
    };
    let iters: u64 = settings.pick(200_000, 5_000);
    for (name, pattern, threads, how) in ACCESS_CASES {
        progress(name);
        let spec = CaseSpec { name, unit: "access", units_per_iter: 1, iters, warmup_iters: iters / 4 };
        let regions: Vec<(&'static str, &SwapRegion)> = match how {
            Touch::Accessors => vec![("mmkit", &region)],
            Touch::Raw => vec![("mmkit", &raw_region), (HANDLER_THREAD, &thread_region)],
        };
        let mut attempt = 0;
        let (results, ours, theirs, cpu) = loop {
            let loop_pattern = if pattern == "seq" { "seq" } else { "rand" };
            let mut mmkit_times: Vec<Vec<TouchTimes>> = vec![vec![TouchTimes::default(); threads]; regions.len()];
            let mut tallies: Vec<CpuTally> = (0..=regions.len()).map(|_| CpuTally::default()).collect();
            let mut kernel_times = None;
            let (mine, kernel_tally) = tallies.split_at_mut(regions.len());
            let mut contenders: Vec<Contender<'_>> = regions
                .iter()
                .zip(mmkit_times.iter_mut())
                .zip(mine.iter_mut())
                .map(|((&(imp, region), times), tally)| {
                    let mut states: Vec<u64> =
                        (0..threads as u64).map(|t| if pattern == "seq" { 0 } else { thread_seed(t) }).collect();
                    let mut calls = 0u32;
                    Contender::new(imp, move |n| {
                        // The first call warms up: its touches are not counted.
                        if calls == 1 {
                            times.iter_mut().for_each(TouchTimes::clear);
                        }
                        let before = own_cpu_ns();
                        let out = touch_region(region, how, loop_pattern, n, pages, &mut states, times);
                        if calls >= 1 {
                            tally.ns += own_cpu_ns() - before;
                            tally.touches += n;
                        }
                        calls += 1;
                        out
                    })
                })
                .collect();
            if let Some(k) = kernel.as_mut() {
                let child = &mut k.child;
                let times = &mut kernel_times;
                let tally = &mut kernel_tally[0];
                let mut calls = 0u32;
                // The child times itself; the harness's clock adds the
                // pipe's round trip once per run of many accesses.
                contenders.push(Contender::new("kernel/zram-swap", move |n| {
                    if calls == 1 {
                        child.reset_times()?;
                    }
                    let before = kernel_cpu_ns(child.pid());
                    child.accesses(pattern, n)?;
                    if calls >= 1 {
                        tally.ns += kernel_cpu_ns(child.pid()) - before;
                        tally.touches += n;
                    }
                    calls += 1;
                    *times = Some(child.touch_stats()?);
                    Ok(())
                }));
            }
            let with_kernel = contenders.len() > regions.len();
            let measured = measure(SUITE.name, spec, &mut contenders, settings.runs);
            drop(contenders);
            match measured {
                Ok(results) => {
                    let all: Vec<TouchTimes> = mmkit_times
                        .iter()
                        .map(|per_thread| {
                            let mut all = TouchTimes::default();
                            per_thread.iter().for_each(|t| all.merge(t));
                            all
                        })
                        .collect();
                    let cpu: Vec<f64> = tallies.iter().map(CpuTally::per_touch).collect();
                    break (results, all, kernel_times, cpu);
                }
                Err(e) if with_kernel => {
                    // The kernel's child was killed by its cgroup's OOM
                    // killer: one fresh child, then mmkit alone, and say so.
                    attempt += 1;
                    let restarted = attempt < 2
                        && kernel.as_mut().is_some_and(|k| {
                            let limit = |footprint| cgroup_limit(budget, working_set, footprint);
                            match AccessChild::start(&mut k.cgroup, working_set, limit) {
                                Ok(child) => {
                                    k.child = child;
                                    true
                                }
                                Err(_) => false,
                            }
                        });
                    if restarted {
                        notes.push(format!("{name}: the kernel's child died ({}) and was restarted", e.0));
                    } else {
                        notes.push(format!("{name}: no kernel row: {}", e.0));
                        kernel = None;
                    }
                }
                Err(e) => return Err(e),
            }
        };
        for mut r in results {
            let mine = regions.iter().position(|&(imp, _)| imp == r.impl_name);
            let (mean, p99, cpu_per_touch) = match mine {
                Some(i) => (ours[i].mean_ns(), ours[i].quantile_ns(0.99) as f64, cpu[i]),
                None => {
                    let (mean, p99) = theirs.map_or((f64::NAN, f64::NAN), |(_, mean, p99)| (mean, p99));
                    (mean, p99, cpu[regions.len()])
                }
            };
            r.extra.push(("mean_ns", mean));
            r.extra.push(("p99_ns", p99));
            r.extra.push(("cpu_ns_per_touch", cpu_per_touch));
            cases.push(r);
        }
    }
    progress("ratio/real");
    let s = z.stats();
    let stored = (s.stored_pages * PAGE_SIZE as u64) as f64;
    cases.push(CaseResult::untimed(
        SUITE.name,
        "ratio/real",
        "mmkit",
        vec![("ratio", stored / s.pool_total_size.max(1) as f64), ("bytes", stored)],
    ));
    if let Some(k) = &kernel {
        if let Some(cols) = k.zram.mm_stat() {
            cases.push(CaseResult::untimed(
                SUITE.name,
                "ratio/real",
                "kernel/zram-swap",
                vec![("ratio", cols[0] as f64 / cols[2].max(1) as f64), ("bytes", cols[0] as f64)],
            ));
        }
    }
    for (imp, r) in [("mmkit", &raw_region), (HANDLER_THREAD, &thread_region)] {
        let rs = r.stats();
        notes.push(format!(
            "*/raw, {imp}: raw faults resolved in the faulting thread {} ({} handed to the handler thread), by the handler thread {}, loads {} ({} ahead), evictions {} ({} clean, {} by the background reclaimer; {} loads evicted for themselves), load p99 {:.1} µs",
            rs.faults_in_thread,
            rs.handoffs,
            rs.missing_faults + rs.wp_faults,
            rs.swap_ins,
            rs.fault_around_pages,
            rs.evictions,
            rs.evicted_clean,
            rs.background_evictions,
            rs.direct_reclaims,
            rs.load_p99_ns as f64 / 1e3
        ));
    }
    let rs = region.stats();
    notes.push(format!(
        "randaccess/sequential: {} MiB of real pages, {} MiB resident budget, every fourth touch writes, through the region's accessors (read_u64/write_u64), which load a page in the calling thread; mmkit region: {} loads in the accessing thread, {} faults handled by the handler thread, {} loaded ahead, {} evictions ({} by the background reclaimer, woken {} times; {} loads evicted for themselves), {} of them clean (not recompressed); load p99 {:.1} µs",
        working_set >> 20,
        budget >> 20,
        rs.loads_in_thread,
        rs.missing_faults + rs.wp_faults,
        rs.fault_around_pages,
        rs.evictions,
        rs.background_evictions,
        rs.reclaimer_wakeups,
        rs.direct_reclaims,
        rs.evicted_clean,
        rs.load_p99_ns as f64 / 1e3
    ));
    if let Some(k) = &kernel {
        notes.push(format!(
            "kernel/zram-swap: OOM kills in the child's cgroup: {}; times a thread of the child slept at the cgroup's limit where the OOM killer would have run (v1's is disabled) and the watchdog reclaimed {} MiB for it (the limit lowered by that much and put back, which wakes it): {}",
            k.cgroup.oom_kills(),
            super::zswap_kernel::RESCUE_BYTES >> 20,
            k.cgroup.rescues()
        ));
    }
    notes.push("ratio/real: mmkit is stored pages × 4096 / pool_total_size after the access cases; the kernel is orig_data_size / mem_used_total of its zram swap at the same point".into());
    drop(kernel);
    Ok(())
}
