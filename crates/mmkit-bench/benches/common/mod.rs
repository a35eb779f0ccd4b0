//! What every criterion bench of this crate shares: the criterion settings.
//!
//! Owns the sample size, warm-up and measurement time, chosen so that a
//! whole bench file runs in about a minute on a shared machine. Must not
//! hold workloads: those are the library's (`mmkit_bench`).

use criterion::Criterion;
use std::time::Duration;

/// The settings of every bench: 20 samples, 1 s of warm-up, 2 s of
/// measurement. A bench whose iterations are long may raise the sample
/// count and measurement time on top of these, saying why.
pub fn config() -> Criterion {
    Criterion::default().sample_size(20).warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(2))
}
