//! Suite `nbd`: mmkit's zram served by nbdkit, next to nbdkit's own
//! memory plugin, through fio's nbd engine — 4 KiB random writes and reads
//! at queue depth 16 on 50 %-compressible buffers
//! (`--buffer_compress_percentage=50 --refill_buffers`), all servers in the
//! same run.
//!
//! - Impls: `mmkit` (the plugin, lz4), `mmkit/zstd` (the plugin, zstd
//!   level 3), `mmkit/lz4hc` (the plugin, lz4hc level 9),
//!   `mmkit/zstd+dict` (the plugin, zstd with a dictionary trained at the
//!   start of the run on real pages disjoint from those stored, see
//!   `DICT_*`), `nbdkit-memory/zstd` (`allocator=zstd` with
//!   `--filter=noextents`, whose block status crashes on never-written
//!   ranges) and `nbdkit-memory/sparse` (`allocator=sparse`, no
//!   compression). Each serves 1 GiB on a Unix socket; the first 256 MiB
//!   are written sequentially first, then fio's random jobs run on them.
//! - Cases `randwrite_4k/half` and `randread_4k/half`: fio's own IOPS per
//!   timed run (its `time_based` runtime), reported as ns per op, median
//!   over `--runs`; rounds interleave the servers. Extras `ops_per_sec` and
//!   `server_cpu_us_per_op` (the server process's user + system CPU time
//!   over all timed runs / their ops: less sensitive to the machine's
//!   other load than IOPS).
//! - Case `randread_4k/real`: the same reads after the 256 MiB were
//!   replaced by real binaries (pages of the system's libraries, loaded
//!   with `nbdcopy`): where nbdkit's zstd allocator decompresses 32 KiB of
//!   hard-to-compress data per 4 KiB read. Skipped without `nbdcopy`.
//! - `ratio/half` rows: `ratio` is each server's own count (mmkit:
//!   `mm_stat` `orig_data_size / mem_used_total`; nbdkit's zstd allocator:
//!   the ratio it logs at exit, bytes in / compressed bytes out; sparse:
//!   1), `rss_ratio` the same for all: bytes held / the server's resident
//!   growth.
//!
//! Owns the fio command lines and their parsing; servers start and stop
//! through `zram::nbdkit`. Needs nbdkit and fio (skipped with a note
//! otherwise) and the plugin next to `mmkit` (`cargo build --release`).

use super::harness::{fill_ratios, median, BenchError, CaseResult, Settings, SuiteReport, MMKIT};
use super::summary::{Headline, Row};
use super::{Progress, Suite};
use crate::zram::nbdkit::{plugin_beside_binary, Listen, Nbdkit, NbdkitError, Spec};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The suite as the registry lists it.
pub const SUITE: Suite = Suite {
    name: "nbd",
    about: "fio's nbd engine, 4 KiB random writes and reads at QD16 on 50 %-compressible data: mmkit's zram plugin vs nbdkit's memory plugin (zstd, sparse); compression ratio",
    run,
    baselines: &[],
    headline: Some(Headline {
        mmkit: Row { case: WRITE, imp: MMKIT },
        peer: Row { case: WRITE, imp: "nbdkit-memory/sparse" },
        published: None,
    }),
};

const WRITE: &str = "randwrite_4k/half";
const READ: &str = "randread_4k/half";
const READ_REAL: &str = "randread_4k/real";

/// The dictionary of `mmkit/zstd+dict`: 1 MiB, trained on every
/// `DICT_STRIDE`-th page after the stored ones (`real_pages_from`),
/// `DICT_SAMPLES` pages in all, used at level 9. Of the designs measured
/// (docs/perf-log/2026-11.md) the smallest level and dictionary with a ratio of 3 on
/// real binaries; below level 6 a dictionary made pages larger (zstd's
/// fast strategies reuse the dictionary's entropy tables unpriced on small
/// blocks: `ZSTD_selectEncodingType` in `zstd_compress_sequences.c`).
const DICT_SIZE: usize = 1 << 20;
const DICT_STRIDE: usize = 4;
const DICT_SAMPLES: usize = 16_384;
const DICT_LEVEL: i32 = 9;

/// One server taking part.
struct Contender {
    impl_name: &'static str,
    server: Nbdkit,
    control: Option<PathBuf>,
    log: Option<PathBuf>,
    rss_before: u64,
    _dir: tempfile::TempDir,
}

fn start(
    impl_name: &'static str,
    plugin: &str,
    args: &[&str],
    nbdkit_args: &[&str],
    mmkit_plugin: bool,
) -> Result<Contender, BenchError> {
    let dir =
        tempfile::Builder::new().prefix("mmkit-bench-nbd-").tempdir().map_err(|e| BenchError::context("tempdir", e))?;
    let control = mmkit_plugin.then(|| dir.path().join("ctl.sock"));
    let log = (!mmkit_plugin).then(|| dir.path().join("nbdkit.log"));
    let mut plugin_args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    if let Some(path) = &control {
        plugin_args.push(format!("control={}", path.display()));
    }
    let spec = Spec {
        plugin: plugin.into(),
        plugin_args,
        nbdkit_args: nbdkit_args.iter().map(|a| (*a).to_owned()).collect(),
        listen: Listen::Unix(dir.path().join("nbd.sock")),
        run_dir: dir.path().to_owned(),
        also_remove: control.iter().cloned().collect(),
        stderr: log.clone(),
    };
    let server = Nbdkit::start(&spec, Duration::from_secs(60), &|| false)
        .map_err(|NbdkitError(e)| BenchError(format!("{impl_name}: {e}")))?;
    let rss_before = server.pid().map_or(0, rss_bytes);
    Ok(Contender { impl_name, server, control, log, rss_before, _dir: dir })
}

/// CPU time a process has used (user + system), in clock ticks; 0 when
/// unreadable. Fields 14 and 15 of `/proc/PID/stat`, counted after the
/// command name, which may hold spaces.
pub(super) fn cpu_ticks_of(pid: u32) -> u64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0 };
    let Some((_, fields)) = stat.rsplit_once(')') else { return 0 };
    fields.split_whitespace().skip(11).take(2).filter_map(|f| f.parse::<u64>().ok()).sum()
}

/// Clock ticks per second of `/proc/PID/stat` (`getconf CLK_TCK`; 100 on
/// Linux unless it says otherwise).
pub(super) fn clock_ticks_per_second() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0)
}

/// Resident bytes of a process (`VmRSS`), 0 when unreadable.
fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib * 1024)
}

/// Runs fio against `uri`; returns the job's IOPS and I/O count.
fn fio(uri: &str, extra: &[String]) -> Result<(f64, u64), BenchError> {
    let out = Command::new("fio")
        .args([
            "--name=nbd",
            "--ioengine=nbd",
            "--output-format=json",
            "--buffer_compress_percentage=50",
            "--refill_buffers",
        ])
        .arg(format!("--uri={uri}"))
        .args(extra)
        .output()
        .map_err(|e| BenchError::context("running fio", e))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(BenchError(format!("fio failed ({}): {}", out.status, String::from_utf8_lossy(&out.stderr))));
    }
    let json: serde_json::Value = text
        .find('{')
        .and_then(|at| serde_json::from_str(&text[at..]).ok())
        .ok_or_else(|| BenchError(format!("fio's output is not JSON: {text}")))?;
    let job = &json["jobs"][0];
    if job["error"].as_i64() != Some(0) {
        return Err(BenchError(format!("fio job error: {}", job["error"])));
    }
    let side = if job["write"]["total_ios"].as_u64().unwrap_or(0) > 0 { &job["write"] } else { &job["read"] };
    let iops = side["iops"].as_f64().unwrap_or(0.0);
    let ios = side["total_ios"].as_u64().unwrap_or(0);
    if iops <= 0.0 {
        return Err(BenchError(format!("fio did no I/O: {job}")));
    }
    Ok((iops, ios))
}

fn random_job(rw: &str, region: u64, seconds: u64) -> Vec<String> {
    vec![
        format!("--rw={rw}"),
        "--bs=4k".into(),
        "--iodepth=16".into(),
        format!("--size={region}"),
        "--time_based".into(),
        format!("--runtime={seconds}"),
        "--norandommap".into(),
        "--randrepeat=0".into(),
    ]
}

fn run(settings: &Settings, progress: &mut Progress<'_>) -> Result<SuiteReport, BenchError> {
    let description = "fio nbd engine, 4 KiB random I/O at QD16, 50 %-compressible buffers, 1 GiB exports on Unix sockets: mmkit's nbdkit plugin vs nbdkit's memory plugin".to_owned();
    let mut notes = Vec::new();
    let missing: Vec<&str> = ["nbdkit", "fio"].into_iter().filter(|tool| !on_path(tool)).collect();
    if !missing.is_empty() {
        notes.push(format!("skipped: {} not installed (apt-get install nbdkit fio)", missing.join(" and ")));
        return Ok(SuiteReport { suite: SUITE.name, description, cases: Vec::new(), notes });
    }
    let region: u64 = settings.pick(256 << 20, 16 << 20);
    let seconds: u64 = settings.pick(3, 1);
    let plugin = match plugin_beside_binary() {
        Ok(plugin) => Some(plugin.display().to_string()),
        Err(NbdkitError(why)) => {
            notes.push(format!("no mmkit rows: {why}"));
            None
        }
    };
    let dict_dir = tempfile::tempdir().map_err(|e| BenchError::context("tempdir", e))?;
    let dict = match &plugin {
        Some(_) => {
            progress("train the zstd dictionary");
            let (path, note) = train_dictionary(settings, region, dict_dir.path())?;
            notes.push(note);
            Some(path)
        }
        None => None,
    };
    let plugin = plugin.map(|p| (p, dict));
    progress("fill with 50 %-compressible data");
    let servers = start_all(plugin.as_ref())?;
    let fill = vec!["--rw=write".into(), "--bs=1m".into(), "--iodepth=4".into(), format!("--size={region}")];
    for s in &servers {
        fio(&s.server.uri(), &fill).map_err(|e| BenchError(format!("filling {}: {}", s.impl_name, e.0)))?;
    }
    let mut cases = Vec::new();
    for (name, rw) in [(WRITE, "randwrite"), (READ, "randread")] {
        progress(name);
        cases.extend(timed_case(settings, &servers, name, &random_job(rw, region, seconds))?);
    }
    let (rows, summary) = ratios(servers, "ratio/half", region)?;
    cases.extend(rows);
    notes.push(format!("compression ratio after the writes (own count, resident growth): {summary}"));
    if on_path("nbdcopy") {
        progress(READ_REAL);
        let file = tempfile::NamedTempFile::new().map_err(|e| BenchError::context("tempfile", e))?;
        let mut data = Vec::with_capacity(region as usize);
        for page in mmkit_testkit::kernel_zram::real_pages(region as usize / 4096) {
            data.extend_from_slice(&page);
        }
        data.resize(region as usize, 0);
        std::fs::write(file.path(), &data).map_err(|e| BenchError::context("writing the real data", e))?;
        let servers = start_all(plugin.as_ref())?;
        for s in &servers {
            let out = Command::new("nbdcopy")
                .arg(file.path())
                .arg(s.server.uri())
                .output()
                .map_err(|e| BenchError::context("running nbdcopy", e))?;
            if !out.status.success() {
                let err = String::from_utf8_lossy(&out.stderr);
                return Err(BenchError(format!("nbdcopy into {}: {err}", s.impl_name)));
            }
        }
        cases.extend(timed_case(settings, &servers, READ_REAL, &random_job("randread", region, seconds))?);
        let (rows, summary) = ratios(servers, "ratio/real", region)?;
        cases.extend(rows);
        notes.push(format!("compression ratio of the real data: {summary}"));
    } else {
        notes.push(format!("no {READ_REAL}: nbdcopy not installed (apt-get install libnbd-bin)"));
    }
    notes.push(format!(
        "{} MiB written first (fio, sequential; real binaries: nbdcopy into fresh servers); each timed run is one fio job of {seconds} s (--time_based) on it; ns/op = 1e9 / fio's IOPS",
        region >> 20
    ));
    notes.extend(aims(&cases));
    Ok(SuiteReport { suite: SUITE.name, description, cases, notes })
}

/// Trains `mmkit/zstd+dict`'s dictionary on real pages that are not among
/// the `region` bytes stored, into `dir`; returns its path and a note.
fn train_dictionary(settings: &Settings, region: u64, dir: &Path) -> Result<(PathBuf, String), BenchError> {
    let stored = (region / 4096) as usize;
    let count = settings.pick(DICT_SAMPLES, 512);
    let pages = mmkit_testkit::kernel_zram::real_pages_from(stored, DICT_STRIDE, count);
    let started = std::time::Instant::now();
    let size = settings.pick(DICT_SIZE, 64 << 10);
    let dict = mmkit_compress::Dictionary::train(pages.iter().map(Vec::as_slice), size)
        .map_err(|e| BenchError(format!("training the dictionary: {e}")))?;
    let seconds = started.elapsed().as_secs_f64();
    let path = dir.join("zstd.dict");
    dict.save(&path).map_err(|e| BenchError(e.to_string()))?;
    let note = format!(
        "mmkit/zstd+dict: zstd level {DICT_LEVEL} with a dictionary of {} bytes trained in {seconds:.1} s on {} pages (every {DICT_STRIDE}th of the real pages after the {stored} stored)",
        dict.len(),
        pages.len()
    );
    Ok((path, note))
}

/// A fresh server of each impl: mmkit's plugin (lz4, zstd, lz4hc, zstd
/// with the dictionary) when built, nbdkit's memory plugin with its zstd
/// and sparse allocators.
fn start_all(plugin: Option<&(String, Option<PathBuf>)>) -> Result<Vec<Contender>, BenchError> {
    let mut servers = Vec::new();
    if let Some((plugin, dict)) = plugin {
        servers.push(start(MMKIT, plugin, &["size=1G", "comp=lz4"], &[], true)?);
        servers.push(start("mmkit/zstd", plugin, &["size=1G", "comp=zstd"], &[], true)?);
        servers.push(start("mmkit/lz4hc", plugin, &["size=1G", "comp=lz4hc"], &[], true)?);
        if let Some(dict) = dict {
            let comp = format!("comp=zstd:{DICT_LEVEL}");
            let params = format!("algorithm_params=algo=zstd dict={}", dict.display());
            servers.push(start("mmkit/zstd+dict", plugin, &["size=1G", &comp, &params], &[], true)?);
        }
    }
    // Debug output (-v) for the ratio the zstd allocator logs at exit; no
    // line per request.
    let debug = ["-v", "-D", "nbdkit.backend.datapath=0", "-D", "nbdkit.backend.controlpath=0"];
    let mut zstd_args = vec!["--filter=noextents"];
    zstd_args.extend(debug);
    servers.push(start("nbdkit-memory/zstd", "memory", &["size=1G", "allocator=zstd"], &zstd_args, false)?);
    servers.push(start("nbdkit-memory/sparse", "memory", &["size=1G", "allocator=sparse"], &debug, false)?);
    Ok(servers)
}

/// Stops the servers and returns one `name` row per server (`ratio`: the
/// server's own count; `rss_ratio`: `bytes` / resident growth) and a
/// one-line summary.
fn ratios(servers: Vec<Contender>, name: &'static str, bytes: u64) -> Result<(Vec<CaseResult>, String), BenchError> {
    let mut rows = Vec::new();
    let mut summary = Vec::new();
    for mut s in servers {
        let rss_growth = s.server.pid().map_or(0, rss_bytes).saturating_sub(s.rss_before);
        let own = match &s.control {
            Some(control) => mm_stat_ratio(control)?,
            None => None,
        };
        s.server.stop();
        let own = match (&s.log, s.impl_name) {
            (_, "nbdkit-memory/sparse") => Some(1.0),
            (Some(log), _) if own.is_none() => logged_ratio(log),
            _ => own,
        };
        let own = own.unwrap_or(f64::NAN);
        let rss_ratio = if rss_growth > 0 { bytes as f64 / rss_growth as f64 } else { f64::NAN };
        summary.push(format!("{} {own:.2} ({rss_ratio:.2})", s.impl_name));
        let extra = vec![("ratio", own), ("rss_ratio", rss_ratio), ("bytes", bytes as f64)];
        rows.push(CaseResult::untimed(SUITE.name, name, s.impl_name, extra));
    }
    Ok((rows, summary.join(", ")))
}

/// Warms up (full runs only), then times `settings.runs` interleaved
/// rounds of `job` on every server: ns per op from fio's IOPS.
fn timed_case(
    settings: &Settings,
    servers: &[Contender],
    name: &'static str,
    job: &[String],
) -> Result<Vec<CaseResult>, BenchError> {
    let n = servers.len();
    if !settings.quick {
        let mut warm = job.to_vec();
        warm.retain(|a| !a.starts_with("--runtime="));
        warm.push("--runtime=1".into());
        for s in servers {
            fio(&s.server.uri(), &warm)?;
        }
    }
    let mut samples = vec![Vec::new(); n];
    let mut ios = vec![0u64; n];
    let mut cpu_ticks = vec![0u64; n];
    for round in 0..settings.runs {
        for k in 0..n {
            let i = (round + k) % n;
            let before = servers[i].server.pid().map_or(0, cpu_ticks_of);
            let (iops, count) = fio(&servers[i].server.uri(), job)
                .map_err(|e| BenchError(format!("{name} / {}: {}", servers[i].impl_name, e.0)))?;
            cpu_ticks[i] += servers[i].server.pid().map_or(0, cpu_ticks_of).saturating_sub(before);
            samples[i].push(1e9 / iops);
            ios[i] += count;
        }
    }
    let tick_us = 1e6 / clock_ticks_per_second();
    let mut results: Vec<CaseResult> = servers
        .iter()
        .zip(samples)
        .zip(&ios)
        .zip(&cpu_ticks)
        .map(|(((s, mut ns), &count), &ticks)| {
            let (min, max) = ns.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| (lo.min(x), hi.max(x)));
            let median_ns = median(&mut ns);
            CaseResult {
                suite: SUITE.name,
                name,
                impl_name: s.impl_name,
                unit: "op",
                median_ns,
                min_ns: min,
                max_ns: max,
                runs: settings.runs,
                units_per_run: count / settings.runs.max(1) as u64,
                ratio_vs_mmkit: None,
                baseline: None,
                ratio_vs_baseline: None,
                extra: vec![
                    ("ops_per_sec", 1e9 / median_ns),
                    ("server_cpu_us_per_op", ticks as f64 * tick_us / count.max(1) as f64),
                ],
            }
        })
        .collect();
    fill_ratios(&mut results);
    Ok(results)
}

/// The aims, as notes: mmkit at least sparse's IOPS and 5× zstd's;
/// with a dictionary, a ratio of at least 3.0 on real binaries and reads
/// at least 3× faster than nbdkit's zstd allocator.
fn aims(cases: &[CaseResult]) -> Vec<String> {
    let iops = |name: &str, impl_name: &str| {
        cases.iter().find(|c| c.name == name && c.impl_name == impl_name).map(|c| 1e9 / c.median_ns)
    };
    let ratio = |impl_name: &str| {
        let row = cases.iter().find(|c| c.name == "ratio/real" && c.impl_name == impl_name)?;
        row.extra.iter().find(|(k, _)| *k == "ratio").map(|&(_, v)| v)
    };
    let mut out = Vec::new();
    if let (Some(mm), Some(zstd), Some(mm_iops), Some(zstd_iops)) = (
        ratio("mmkit/zstd+dict"),
        ratio("nbdkit-memory/zstd"),
        iops(READ_REAL, "mmkit/zstd+dict"),
        iops(READ_REAL, "nbdkit-memory/zstd"),
    ) {
        out.push(format!(
            "mmkit/zstd+dict on real binaries: ratio {mm:.2} (aim >= 3.0; nbdkit's zstd allocator {zstd:.2}), {READ_REAL} {:.1}x the zstd allocator's IOPS (aim >= 3)",
            mm_iops / zstd_iops
        ));
    }
    for name in [WRITE, READ, READ_REAL] {
        if let (Some(mm), Some(sparse), Some(zstd)) =
            (iops(name, MMKIT), iops(name, "nbdkit-memory/sparse"), iops(name, "nbdkit-memory/zstd"))
        {
            out.push(format!(
                "{name}: mmkit {mm:.0} IOPS = {:.2}x sparse's {sparse:.0} (aim >= 1), {:.1}x zstd's {zstd:.0} (aim >= 5)",
                mm / sparse,
                mm / zstd
            ));
        }
    }
    out
}

/// `orig_data_size / mem_used_total` from the control socket.
fn mm_stat_ratio(control: &Path) -> Result<Option<f64>, BenchError> {
    let text = crate::zram::ctl::request(control, "mm_stat").map_err(BenchError)?;
    let cols: Vec<f64> = text.split_whitespace().filter_map(|c| c.parse().ok()).collect();
    Ok((cols.len() == 9 && cols[2] > 0.0).then(|| cols[0] / cols[2]))
}

/// The ratio nbdkit's zstd allocator logs at exit ("compression ratio: R : 1").
fn logged_ratio(log: &Path) -> Option<f64> {
    let text = std::fs::read_to_string(log).ok()?;
    let line = text.lines().find(|l| l.contains("compression ratio:"))?;
    line.split("compression ratio:").nth(1)?.split(':').next()?.trim().parse().ok()
}

fn on_path(name: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(name).is_file()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_of_this_process_are_counted() {
        let spin = std::time::Instant::now();
        while spin.elapsed() < Duration::from_millis(30) {
            std::hint::black_box(0);
        }
        assert!(cpu_ticks_of(std::process::id()) > 0);
        assert_eq!(cpu_ticks_of(u32::MAX), 0);
        assert!(clock_ticks_per_second() > 0.0);
    }

    #[test]
    fn the_zstd_ratio_is_read_from_nbdkits_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        std::fs::write(&log, "nbdkit: debug: x\nnbdkit: debug: zstd: compression ratio: 3.17 : 1\n").unwrap();
        assert_eq!(logged_ratio(&log), Some(3.17));
        std::fs::write(&log, "nothing\n").unwrap();
        assert_eq!(logged_ratio(&log), None);
    }
}
