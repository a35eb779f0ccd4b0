//! The benchmark harness every suite shares: timing runs, medians, ratios
//! against mmkit, the machine description, and the two output formats (a
//! table for people, one JSON document for tools). The rows themselves
//! ([`CaseResult`], [`SuiteReport`]) are `report`'s, shared with the
//! summary.
//!
//! A suite describes each case as a [`CaseSpec`] plus one [`Contender`] per
//! implementation and calls [`measure`]; it never reads a clock itself. All
//! contenders of a case are warmed up first, then measured in interleaved
//! rounds (round `r` starts with contender `r mod n`), so slow drift on a busy
//! machine spreads over every implementation instead of hitting one. A case
//! whose iterations need untimed preparation (allocate a range, then time
//! only its free) uses [`StagedContender`] and [`measure_staged`] instead:
//! same rounds, but only the measured step of each iteration is on the clock.

pub use super::report::{median, CaseResult, SuiteReport};
use super::summary::SummaryLine;
pub use mmkit_bench::subjects::names::MMKIT;
pub use mmkit_bench::BenchError;
use serde::Serialize;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// Knobs common to all suites.
#[derive(Clone, Copy, Debug)]
pub struct Settings {
    /// Timed runs per case and implementation; the median is reported.
    pub runs: usize,
    /// Small maps and few iterations: a smoke test, not a measurement.
    pub quick: bool,
}

impl Settings {
    /// `full` normally, `quick` under `--quick`.
    pub fn pick<T>(&self, full: T, quick: T) -> T {
        if self.quick {
            quick
        } else {
            full
        }
    }
}

/// One case: what one iteration does and how many iterations a run has.
#[derive(Clone, Copy, Debug)]
pub struct CaseSpec {
    /// Case name, the same for every implementation.
    pub name: &'static str,
    /// What the reported time is per (`pair`, `page`).
    pub unit: &'static str,
    /// Units one iteration performs.
    pub units_per_iter: u64,
    /// Iterations per timed run.
    pub iters: u64,
    /// Iterations run once, untimed, before the first timed run.
    pub warmup_iters: u64,
}

/// One implementation taking part in a case. `run(n)` performs `n`
/// iterations; it is called once to warm up and then once per timed run.
pub struct Contender<'a> {
    /// Implementation name (`mmkit`, `mimalloc`, ...).
    pub impl_name: &'static str,
    /// The measured work.
    pub run: Box<dyn FnMut(u64) -> Result<(), BenchError> + 'a>,
}

impl<'a> Contender<'a> {
    /// A contender from a closure.
    pub fn new(impl_name: &'static str, run: impl FnMut(u64) -> Result<(), BenchError> + 'a) -> Self {
        Self { impl_name, run: Box::new(run) }
    }
}

/// One implementation taking part in a case whose iterations each have an
/// untimed setup, a timed step and an untimed teardown. Only the step is
/// timed: the clock is read around each step and the times are summed, so
/// use it for steps long enough (microseconds) that reading the clock per
/// step is noise.
pub struct StagedContender<'a> {
    /// Implementation name (`mmkit`, ...).
    pub impl_name: &'static str,
    /// Runs `n` iterations; returns the summed time of their steps.
    run: Box<dyn FnMut(u64) -> Result<Duration, BenchError> + 'a>,
}

impl<'a> StagedContender<'a> {
    /// A contender whose iteration is `teardown(step(setup()?)?)`, with only
    /// `step` timed.
    pub fn new<S, T>(
        impl_name: &'static str,
        mut setup: impl FnMut() -> Result<S, BenchError> + 'a,
        mut step: impl FnMut(S) -> Result<T, BenchError> + 'a,
        mut teardown: impl FnMut(T) -> Result<(), BenchError> + 'a,
    ) -> Self {
        let run = move |iters: u64| -> Result<Duration, BenchError> {
            let mut timed = Duration::ZERO;
            for _ in 0..iters {
                let input = setup()?;
                let start = Instant::now();
                let output = step(input);
                timed += start.elapsed();
                teardown(output?)?;
            }
            Ok(timed)
        };
        Self { impl_name, run: Box::new(run) }
    }
}

/// Warms up every contender, then times `runs` interleaved rounds
/// and returns one result per contender (ratios filled in).
///
/// # Errors
/// The first error a contender returns.
pub fn measure(
    suite: &'static str,
    spec: CaseSpec,
    contenders: &mut [Contender<'_>],
    runs: usize,
) -> Result<Vec<CaseResult>, BenchError> {
    let impls: Vec<&'static str> = contenders.iter().map(|c| c.impl_name).collect();
    measure_rounds(suite, spec, &impls, runs, |i, iters| {
        let start = Instant::now();
        let result = (contenders[i].run)(iters);
        let elapsed = start.elapsed();
        result.map(|()| elapsed)
    })
}

/// [`measure`] for contenders with untimed setup and teardown: the same
/// warm-up and interleaved rounds, each run's time being the sum of its
/// timed steps only.
///
/// # Errors
/// The first error a contender's setup, step or teardown returns.
pub fn measure_staged(
    suite: &'static str,
    spec: CaseSpec,
    contenders: &mut [StagedContender<'_>],
    runs: usize,
) -> Result<Vec<CaseResult>, BenchError> {
    let impls: Vec<&'static str> = contenders.iter().map(|c| c.impl_name).collect();
    measure_rounds(suite, spec, &impls, runs, |i, iters| (contenders[i].run)(iters))
}

/// Warms up contender `i` of `impls` with `run(i, warmup_iters)`, then
/// records `runs` interleaved rounds of `run(i, iters)`, which returns the
/// time its run counts for.
fn measure_rounds(
    suite: &'static str,
    spec: CaseSpec,
    impls: &[&'static str],
    runs: usize,
    mut run: impl FnMut(usize, u64) -> Result<Duration, BenchError>,
) -> Result<Vec<CaseResult>, BenchError> {
    let runs = runs.max(1);
    let n = impls.len();
    for (i, impl_name) in impls.iter().enumerate() {
        if spec.warmup_iters > 0 {
            run(i, spec.warmup_iters).map_err(|e| BenchError(format!("{} / {impl_name} (warm-up): {e}", spec.name)))?;
        }
    }
    let units = (spec.iters * spec.units_per_iter).max(1) as f64;
    let mut samples = vec![Vec::with_capacity(runs); n];
    for round in 0..runs {
        for k in 0..n {
            let i = (round + k) % n;
            let elapsed = run(i, spec.iters).map_err(|e| BenchError(format!("{} / {}: {e}", spec.name, impls[i])))?;
            samples[i].push(elapsed.as_nanos() as f64 / units);
        }
    }
    let mut results: Vec<CaseResult> = impls
        .iter()
        .zip(samples)
        .map(|(&impl_name, mut s)| {
            let (min, max) = min_max(&s);
            CaseResult {
                suite,
                name: spec.name,
                impl_name,
                unit: spec.unit,
                median_ns: median(&mut s),
                min_ns: min,
                max_ns: max,
                runs,
                units_per_run: spec.iters * spec.units_per_iter,
                ratio_vs_mmkit: None,
                baseline: None,
                ratio_vs_baseline: None,
                extra: Vec::new(),
            }
        })
        .collect();
    fill_ratios(&mut results);
    Ok(results)
}

fn min_max(samples: &[f64]) -> (f64, f64) {
    samples.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| (lo.min(x), hi.max(x)))
}

/// Sets `ratio_vs_mmkit` = median / mmkit's median of the same case name.
pub fn fill_ratios(results: &mut [CaseResult]) {
    let base: Vec<(&'static str, f64)> =
        results.iter().filter(|r| r.impl_name == MMKIT).map(|r| (r.name, r.median_ns)).collect();
    for r in results.iter_mut() {
        r.ratio_vs_mmkit =
            base.iter().find(|(name, _)| *name == r.name).filter(|(_, mm)| *mm > 0.0).map(|(_, mm)| r.median_ns / mm);
    }
}

/// The machine the numbers come from.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// Logical CPUs available to this process.
    pub cpus: usize,
    /// `model name` from `/proc/cpuinfo`, when readable.
    pub model: Option<String>,
}

impl Machine {
    /// Looks at this machine.
    pub fn detect() -> Self {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let model = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|text| cpu_model(&text));
        Self { cpus, model }
    }
}

/// The first `model name` value of a `/proc/cpuinfo` text.
pub fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// The JSON document, fields in this order.
#[derive(Serialize)]
struct Document<'a> {
    /// Suite names, comma-separated when several ran.
    suite: String,
    machine: &'a Machine,
    runs: usize,
    quick: bool,
    /// One line per suite, prefixed with its name.
    description: Vec<String>,
    cases: Vec<&'a CaseResult>,
    /// Footnotes, prefixed with their suite's name.
    notes: Vec<String>,
    /// One line per suite that declares a headline case.
    summary: &'a [SummaryLine],
    /// The suites a run without names left out, why, and (in `why`) what
    /// they need.
    left_out: &'a [super::summary::LeftOut],
}

/// The JSON document: suite name(s), machine, settings, cases, notes and
/// the summary.
pub fn to_json(
    reports: &[SuiteReport],
    summary: &[SummaryLine],
    left_out: &[super::summary::LeftOut],
    machine: &Machine,
    settings: Settings,
) -> String {
    let doc = Document {
        suite: reports.iter().map(|r| r.suite).collect::<Vec<_>>().join(","),
        machine,
        runs: settings.runs,
        quick: settings.quick,
        description: reports.iter().map(|r| format!("{}: {}", r.suite, r.description)).collect(),
        cases: reports.iter().flat_map(|r| &r.cases).collect(),
        notes: reports.iter().flat_map(|r| r.notes.iter().map(move |n| format!("{}: {n}", r.suite))).collect(),
        summary,
        left_out,
    };
    serde_json::to_string_pretty(&doc).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

/// The human-readable table of one suite, with its footnotes. Rows are
/// compared with their case's baseline (see `summary::fill_baselines`);
/// untimed rows (compression ratios) show their figures instead of a time.
pub fn to_table(report: &SuiteReport, machine: &Machine) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "suite {}: {}", report.suite, report.description);
    let _ =
        writeln!(out, "machine: {} CPUs, {}", machine.cpus, machine.model.as_deref().unwrap_or("unknown CPU model"));
    let vs = super::summary::column_header(report);
    let header = ["case", "impl", "ns/unit (median)", "min..max", vs.as_str()];
    let rows: Vec<[String; 5]> = report
        .cases
        .iter()
        .map(|r| {
            let (median, range) = if r.is_untimed() {
                (extra_text(&r.extra), "-".to_string())
            } else {
                (format!("{:.1}", r.median_ns), format!("{:.1}..{:.1}", r.min_ns, r.max_ns))
            };
            [
                format!("{} ({})", r.name, r.unit),
                r.impl_name.to_string(),
                median,
                range,
                r.ratio_vs_baseline.map_or_else(|| "-".to_string(), |x| format!("{x:.2}")),
            ]
        })
        .collect();
    let mut widths = header.map(|h| h.chars().count());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 5]| {
        format!(
            "{:<w0$}  {:<w1$}  {:>w2$}  {:>w3$}  {:>w4$}\n",
            cells[0],
            cells[1],
            cells[2],
            cells[3],
            cells[4],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
            w3 = widths[3],
            w4 = widths[4],
        )
    };
    out.push_str(&line(header));
    // A blank line between cases only where a case has several rows: a
    // suite of one implementation reads as one block.
    let grouped = report.cases.windows(2).any(|w| w[0].name == w[1].name);
    let mut previous_case = "";
    for (row, result) in rows.iter().zip(&report.cases) {
        if grouped && !previous_case.is_empty() && previous_case != result.name {
            out.push('\n');
        }
        previous_case = result.name;
        out.push_str(&line([&row[0], &row[1], &row[2], &row[3], &row[4]]));
    }
    let base = vs.trim_start_matches("vs ");
    let _ = writeln!(
        out,
        "\n{vs} = the row's median / {base}'s (> 1: {base} is faster); for a compression ratio, {base}'s \
         ratio / the row's (> 1: {base} compresses better). Runs per case: {}.",
        report.cases.first().map_or(0, |r| r.runs)
    );
    let rules = baseline_rules(report);
    if rules.len() > 1 {
        let _ = writeln!(out, "compared with: {}", rules.join("; "));
    }
    for (i, note) in report.notes.iter().enumerate() {
        let _ = writeln!(out, "[{}] {note}", i + 1);
    }
    out
}

/// `case: baseline` for each case that has one, in order, cases that share
/// a baseline with the case before them folded into it.
fn baseline_rules(report: &SuiteReport) -> Vec<String> {
    let mut rules: Vec<(Vec<&str>, &str)> = Vec::new();
    for case in &report.cases {
        let Some(base) = case.baseline else { continue };
        match rules.last_mut() {
            Some((names, b)) if *b == base => {
                if !names.contains(&case.name) {
                    names.push(case.name);
                }
            }
            _ => rules.push((vec![case.name], base)),
        }
    }
    rules.into_iter().map(|(names, base)| format!("{} against {base}", names.join(", "))).collect()
}

/// An untimed row's figures: `ratio 2.41, bytes 268435456`.
pub fn extra_text(extra: &[(&'static str, f64)]) -> String {
    let values: Vec<String> = extra.iter().map(|(key, value)| format!("{key} {}", number(*value))).collect();
    values.join(", ")
}

/// An extra field's value: whole numbers without decimals, others with two.
fn number(value: f64) -> String {
    if value.fract() == 0.0 && value.abs() < 1e15 {
        format!("{value:.0}")
    } else {
        format!("{value:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(&mut [7.0]), 7.0);
        assert!(median(&mut []).is_nan());
    }

    #[test]
    fn measure_interleaves_and_computes_ratios() {
        let mut calls = Vec::new();
        let log = std::cell::RefCell::new(&mut calls);
        let spec = CaseSpec { name: "case", unit: "op", units_per_iter: 2, iters: 10, warmup_iters: 1 };
        let mut contenders = [
            Contender::new(MMKIT, |n| {
                log.borrow_mut().push(("mmkit", n));
                Ok(())
            }),
            Contender::new("peer", |n| {
                log.borrow_mut().push(("peer", n));
                std::thread::sleep(std::time::Duration::from_millis(2));
                Ok(())
            }),
        ];
        let results = measure("s", spec, &mut contenders, 3).unwrap();
        drop(contenders);
        assert_eq!(
            calls,
            vec![
                ("mmkit", 1),
                ("peer", 1),
                ("mmkit", 10),
                ("peer", 10),
                ("peer", 10),
                ("mmkit", 10),
                ("mmkit", 10),
                ("peer", 10),
            ]
        );
        assert_eq!(results.len(), 2);
        assert_eq!(results[0].ratio_vs_mmkit, Some(1.0));
        let peer = &results[1];
        assert!(peer.ratio_vs_mmkit.unwrap() > 1.0);
        assert!(peer.min_ns <= peer.median_ns && peer.median_ns <= peer.max_ns);
        // 2 ms over 20 units: at least 100 µs per unit.
        assert!(peer.min_ns >= 100_000.0);
        assert_eq!(peer.units_per_run, 20);
    }

    #[test]
    fn errors_name_the_case() {
        let spec = CaseSpec { name: "c", unit: "op", units_per_iter: 1, iters: 1, warmup_iters: 0 };
        let mut contenders = [Contender::new("x", |_| Err(BenchError("boom".into())))];
        let err = measure("s", spec, &mut contenders, 1).unwrap_err();
        assert_eq!(err.0, "c / x: boom");
    }

    #[test]
    fn staged_times_only_the_step() {
        let spec = CaseSpec { name: "staged", unit: "iteration", units_per_iter: 1, iters: 3, warmup_iters: 1 };
        let sleep = |ms| std::thread::sleep(std::time::Duration::from_millis(ms));
        let steps = std::cell::Cell::new(0u64);
        let mut contenders = [StagedContender::new(
            MMKIT,
            || {
                sleep(20);
                Ok(7u64)
            },
            |x| {
                sleep(1);
                steps.set(steps.get() + 1);
                Ok(x * 2)
            },
            |y| if y == 14 { Ok(()) } else { Err(BenchError("lost".into())) },
        )];
        let results = measure_staged("s", spec, &mut contenders, 2).unwrap();
        drop(contenders);
        assert_eq!(steps.get(), 1 + 2 * 3);
        let r = &results[0];
        assert_eq!((r.name, r.unit, r.runs, r.units_per_run), ("staged", "iteration", 2, 3));
        // Each step sleeps 1 ms; each setup 20 ms, which must not be counted.
        assert!(r.min_ns >= 1_000_000.0 && r.max_ns < 15_000_000.0, "{r:?}");
        assert_eq!(r.ratio_vs_mmkit, Some(1.0));
    }

    #[test]
    fn staged_errors_name_the_case() {
        let spec = CaseSpec { name: "c", unit: "op", units_per_iter: 1, iters: 1, warmup_iters: 1 };
        let mut contenders = [StagedContender::new("x", || Ok(()), Ok, |()| Err(BenchError("boom".into())))];
        let err = measure_staged("s", spec, &mut contenders, 1).unwrap_err();
        assert_eq!(err.0, "c / x (warm-up): boom");
    }

    #[test]
    fn cpu_model_line() {
        let text = "processor\t: 0\nmodel name\t: AMD EPYC 7B13\nflags\t: fpu\n";
        assert_eq!(cpu_model(text).as_deref(), Some("AMD EPYC 7B13"));
        assert_eq!(cpu_model("processor: 0\n"), None);
    }

    #[test]
    fn ratio_missing_without_mmkit() {
        let mut r = vec![CaseResult {
            suite: "s",
            name: "c",
            impl_name: "peer",
            unit: "op",
            median_ns: 1.0,
            min_ns: 1.0,
            max_ns: 1.0,
            runs: 1,
            units_per_run: 1,
            ratio_vs_mmkit: Some(9.0),
            baseline: None,
            ratio_vs_baseline: None,
            extra: Vec::new(),
        }];
        fill_ratios(&mut r);
        assert_eq!(r[0].ratio_vs_mmkit, None);
    }
}
