//! Per-touch times of the `zswap` suite's access loops, kept in a fixed
//! log-linear histogram so that recording allocates nothing (the kernel
//! side records inside a memory cgroup whose limit is the budget) and a
//! tail percentile costs one pass over 1,024 counters.
//!
//! Owns only the histogram; both sides of the suite record into it the same
//! way, so their means and percentiles are comparable.

use std::time::Instant;

/// Sub-buckets per power of two: a recorded time is placed within
/// 1/`SUB` of its value, so a percentile reads at most 6.25 % high.
const SUB: usize = 16;
/// Powers of two covered: 1 ns up to 2^64 ns.
const POWERS: usize = 64;

/// Counts of touch times, log-linear in nanoseconds.
#[derive(Clone)]
pub struct TouchTimes {
    counts: Box<[u64; POWERS * SUB]>,
    total: u64,
    sum_ns: u128,
}

impl Default for TouchTimes {
    fn default() -> Self {
        Self { counts: Box::new([0; POWERS * SUB]), total: 0, sum_ns: 0 }
    }
}

/// The bucket of `ns`: its power of two, then which sixteenth of the way
/// to the next one (exact below 16 ns).
fn bucket(ns: u64) -> usize {
    if ns < SUB as u64 {
        return ns as usize;
    }
    let power = 63 - ns.leading_zeros() as usize; // 2^power <= ns
    let fraction = ((ns >> (power - 4)) & (SUB as u64 - 1)) as usize; // the next four bits
    (power - 3) * SUB + fraction
}

/// The largest time in bucket `b` (what a percentile reports).
fn upper_bound(b: usize) -> u64 {
    if b < SUB {
        return b as u64;
    }
    let power = b / SUB + 3;
    let fraction = (b % SUB) as u64;
    let step = 1u64 << (power - 4);
    ((1u64 << power) - 1) + (fraction + 1) * step
}

impl TouchTimes {
    /// Records one touch that took `ns`.
    pub fn record(&mut self, ns: u64) {
        self.counts[bucket(ns)] += 1;
        self.total += 1;
        self.sum_ns += u128::from(ns);
    }

    /// Runs `touch` and records how long it took.
    #[inline]
    pub fn time<T>(&mut self, touch: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let out = touch();
        self.record(start.elapsed().as_nanos() as u64);
        out
    }

    /// Adds another histogram's counts to this one.
    pub fn merge(&mut self, other: &TouchTimes) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.total += other.total;
        self.sum_ns += other.sum_ns;
    }

    /// Forgets every recorded touch.
    pub fn clear(&mut self) {
        *self = Self::default();
    }

    /// Mean time per touch in ns (0 when none was recorded).
    pub fn mean_ns(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.sum_ns as f64 / self.total as f64
        }
    }

    /// The time `q` (0..=1) of the touches took at most, to the histogram's
    /// resolution (0 when none was recorded).
    pub fn quantile_ns(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (b, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return upper_bound(b);
            }
        }
        upper_bound(self.counts.len() - 1)
    }

    /// `count mean_ns p99_ns`, the line the access child answers `stats`
    /// with; [`parse_line`] reads it back.
    pub fn line(&self) -> String {
        format!("{} {:.1} {}", self.total, self.mean_ns(), self.quantile_ns(0.99))
    }
}

/// Count, mean and p99 from a [`TouchTimes::line`].
pub fn parse_line(line: &str) -> Option<(u64, f64, f64)> {
    let mut words = line.split_whitespace();
    let count = words.next()?.parse().ok()?;
    let mean = words.next()?.parse().ok()?;
    let p99: u64 = words.next()?.parse().ok()?;
    words.next().is_none().then_some((count, mean, p99 as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_ordered_and_tight() {
        let mut last = 0;
        for ns in (0..20_000u64).chain([1 << 20, u64::MAX / 3, u64::MAX]) {
            let b = bucket(ns);
            assert!(b >= last, "{ns}");
            last = b;
            let top = upper_bound(b);
            assert!(top >= ns, "{ns} above its bucket's top {top}");
            assert!((top - ns) as f64 <= ns as f64 / 16.0 + 1.0, "{ns}: bucket top {top} too loose");
        }
    }

    #[test]
    fn mean_and_percentiles() {
        let mut t = TouchTimes::default();
        for ns in 1..=1000u64 {
            t.record(ns * 100);
        }
        assert_eq!(t.total, 1000);
        assert!((t.mean_ns() - 50_050.0).abs() < 1e-6);
        let p99 = t.quantile_ns(0.99);
        assert!((99_000..=99_000 + 99_000 / 16).contains(&p99), "{p99}");
        assert_eq!(t.quantile_ns(0.0), upper_bound(bucket(100)));
        let mut other = TouchTimes::default();
        other.record(10_000_000);
        t.merge(&other);
        assert_eq!(t.total, 1001);
        assert!(t.quantile_ns(1.0) >= 10_000_000);
        let (count, mean, p99) = parse_line(&t.line()).unwrap();
        assert_eq!(count, 1001);
        assert!((mean - t.mean_ns()).abs() < 0.1);
        assert_eq!(p99, t.quantile_ns(0.99) as f64);
        t.clear();
        assert_eq!((t.total, t.mean_ns(), t.quantile_ns(0.99)), (0, 0.0, 0));
        assert_eq!(parse_line("1 2"), None);
        assert_eq!(parse_line("1 2 3 4"), None);
    }
}
