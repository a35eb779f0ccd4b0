//! What a suite reports: one row per case and implementation
//! ([`CaseResult`]) and a suite's rows with its notes ([`SuiteReport`]),
//! in the one `--json` schema (`docs/benchmarking.md`).
//!
//! Owns the rows and the median they are made of. The harness fills them
//! in and prints them; the summary picks its headline rows from them. Must
//! not know either: both import this module, and it imports neither.

use serde::Serialize;

/// One line of results: one case, one implementation.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CaseResult {
    /// Suite the case belongs to.
    pub suite: &'static str,
    /// Case name.
    pub name: &'static str,
    /// Implementation.
    #[serde(rename = "impl")]
    pub impl_name: &'static str,
    /// Unit the times are per.
    pub unit: &'static str,
    /// Median over the runs, ns per unit.
    pub median_ns: f64,
    /// Fastest run, ns per unit.
    pub min_ns: f64,
    /// Slowest run, ns per unit.
    pub max_ns: f64,
    /// Number of timed runs.
    pub runs: usize,
    /// Units per timed run.
    pub units_per_run: u64,
    /// This implementation's median / mmkit's median: > 1 means mmkit is
    /// faster. `None` when mmkit has no result for the case.
    pub ratio_vs_mmkit: Option<f64>,
    /// The implementation this row is compared with: mmkit's own choice
    /// for the case (`mmkit`, `mmkit/lz4` in `zram`, `deferred` in the
    /// release cases); `None` when the case has none.
    pub baseline: Option<&'static str>,
    /// This row against `baseline`: median / the baseline's median, or for
    /// a compression ratio the baseline's ratio / this one's (> 1: the
    /// baseline does better).
    pub ratio_vs_baseline: Option<f64>,
    /// Case-specific figures (e.g. per-level page-table counts and times),
    /// printed in JSON only; empty for most cases.
    #[serde(skip_serializing_if = "Vec::is_empty", serialize_with = "extra_as_map")]
    pub extra: Vec<(&'static str, f64)>,
}

impl CaseResult {
    /// A row of whole releases timed once a run (`times`, ns, at least
    /// one): unit `release`, their median, fastest and slowest, and the
    /// figures in `extra`.
    pub fn releases(
        suite: &'static str,
        name: &'static str,
        impl_name: &'static str,
        times: &[f64],
        extra: Vec<(&'static str, f64)>,
    ) -> Self {
        let (min_ns, max_ns) = times.iter().fold((f64::MAX, 0.0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        Self {
            unit: "release",
            median_ns: median(&mut times.to_vec()),
            min_ns,
            max_ns,
            runs: times.len(),
            ..Self::untimed(suite, name, impl_name, extra)
        }
    }

    /// A row that times nothing (a device filled once, its compression
    /// ratio): unit `device`, one run of one unit, zero times, the figures
    /// in `extra`.
    pub fn untimed(
        suite: &'static str,
        name: &'static str,
        impl_name: &'static str,
        extra: Vec<(&'static str, f64)>,
    ) -> Self {
        Self {
            suite,
            name,
            impl_name,
            unit: "device",
            median_ns: 0.0,
            min_ns: 0.0,
            max_ns: 0.0,
            runs: 1,
            units_per_run: 1,
            ratio_vs_mmkit: None,
            baseline: None,
            ratio_vs_baseline: None,
            extra,
        }
    }

    /// Whether this row times nothing: its values are in `extra`.
    pub fn is_untimed(&self) -> bool {
        self.median_ns == 0.0 && !self.extra.is_empty()
    }
}

fn extra_as_map<S: serde::Serializer>(extra: &[(&'static str, f64)], s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut map = s.serialize_map(Some(extra.len()))?;
    for (key, value) in extra {
        map.serialize_entry(key, value)?;
    }
    map.end()
}

/// Everything one suite produced.
#[derive(Clone, Debug, Serialize)]
pub struct SuiteReport {
    /// Suite name.
    pub suite: &'static str,
    /// One line saying what was measured and on what.
    pub description: String,
    /// Results, grouped by case in the order measured.
    pub cases: Vec<CaseResult>,
    /// Footnotes: what was skipped or measured differently, and why.
    pub notes: Vec<String>,
}

/// Median of `samples` (mean of the middle two for an even count); NaN for
/// an empty slice.
pub fn median(samples: &mut [f64]) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    samples.sort_by(f64::total_cmp);
    let mid = samples.len() / 2;
    if samples.len() % 2 == 1 {
        samples[mid]
    } else {
        (samples[mid - 1] + samples[mid]) / 2.0
    }
}
