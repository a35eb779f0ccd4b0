//! A lock-free histogram of load times, for the p99 in `RegionStats`: four
//! buckets per power of two of nanoseconds, so a percentile read from it
//! is the upper edge of its bucket, within a quarter of the true value.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Sub-buckets per power of two (as bits).
const SUB_BITS: u32 = 2;
const BUCKETS: usize = (64 << SUB_BITS) as usize;

/// Counts of durations by bucket.
pub(crate) struct Times(Box<[AtomicU64]>);

impl Times {
    pub(crate) fn new() -> Self {
        Self((0..BUCKETS).map(|_| AtomicU64::new(0)).collect())
    }

    /// The bucket of `ns`: its power of two and the next two bits.
    fn bucket(ns: u64) -> usize {
        if ns < 1 << SUB_BITS {
            return ns as usize;
        }
        let log = 63 - ns.leading_zeros();
        let sub = (ns >> (log - SUB_BITS)) & ((1 << SUB_BITS) - 1);
        (((log - SUB_BITS + 1) << SUB_BITS) as u64 + sub) as usize
    }

    /// The largest duration in bucket `b`.
    fn upper(b: usize) -> u64 {
        let b = b as u64;
        if b < 1 << SUB_BITS {
            return b;
        }
        let log = (b >> SUB_BITS) + u64::from(SUB_BITS) - 1;
        if log > 63 {
            return u64::MAX;
        }
        let step = 1u64 << (log - u64::from(SUB_BITS));
        let sub = b & ((1 << SUB_BITS) - 1);
        (1u64 << log) + sub * step + (step - 1)
    }

    pub(crate) fn record(&self, ns: u64) {
        self.0[Self::bucket(ns)].fetch_add(1, Relaxed);
    }

    /// The `per_mille`-th permille (990: the p99), 0 with no samples.
    pub(crate) fn percentile(&self, per_mille: u64) -> u64 {
        let counts: Vec<u64> = self.0.iter().map(|c| c.load(Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return 0;
        }
        let want = (total * per_mille).div_ceil(1000);
        let mut seen = 0;
        for (b, &n) in counts.iter().enumerate() {
            seen += n;
            if seen >= want {
                return Self::upper(b);
            }
        }
        u64::MAX
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_hold_their_values_within_a_quarter() {
        for ns in [0u64, 1, 3, 4, 5, 7, 8, 100, 999, 4096, 6000, 1 << 40, u64::MAX] {
            let b = Times::bucket(ns);
            assert!(Times::upper(b) >= ns, "{ns}: bucket {b} ends at {}", Times::upper(b));
            assert!(b == 0 || Times::upper(b - 1) < ns, "{ns}: bucket {b} is not the first to hold it");
            assert!(Times::upper(b) - ns <= ns / 4 + 1, "{ns}: {}", Times::upper(b));
        }
        let t = Times::new();
        assert_eq!(t.percentile(990), 0);
        for ns in 1..=1000u64 {
            t.record(ns * 1000);
        }
        let p99 = t.percentile(990);
        assert!((990_000..=990_000 * 5 / 4).contains(&p99), "{p99}");
        let p50 = t.percentile(500);
        assert!((500_000..=500_000 * 5 / 4).contains(&p50), "{p50}");
    }
}
