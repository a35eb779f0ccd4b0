//! Helpers shared by mmkit's tests and benchmarks, and nothing else: one
//! deterministic pseudo-random generator, [`XorShift64`], and with the `std`
//! feature a private kernel zram device to compare against and pages of
//! real files (the `kernel_zram` module), noise pages and a process's
//! resident bytes (`pages`).
//!
//! Owns only code that several test suites or benchmarks would otherwise
//! copy. It must not depend on mmkit (or anything else), must not hold
//! allocator-specific fixtures (those stay beside the tests that use them),
//! and is never a dependency of a published library crate: mmkit and the
//! command line take it as a dev-dependency, the benchmark crate as an
//! ordinary one.
#![cfg_attr(not(feature = "std"), no_std)]
#![warn(missing_docs)]
#![forbid(unsafe_code)]

#[cfg(feature = "std")]
pub mod kernel_zram;
#[cfg(feature = "std")]
pub mod pages;

/// Marsaglia's xorshift64* ("Xorshift RNGs", 2003; the `*` multiplier from
/// Vigna, 2014): small, fast, deterministic on every machine, good enough to
/// pick pages, orders and flags. Not for anything needing real randomness.
///
/// ```
/// use mmkit_testkit::XorShift64;
/// let mut a = XorShift64::new(42);
/// let mut b = XorShift64::new(42);
/// assert_eq!(a.next_u64(), b.next_u64());
/// assert!(a.below(10) < 10);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XorShift64(u64);

impl XorShift64 {
    /// Replaces a zero seed: xorshift's state must never be 0 (it would stay 0).
    const ZERO_SEED: u64 = 0x9e37_79b9_7f4a_7c15;

    /// A generator from `seed` (0 is replaced, xorshift must not start at 0).
    #[must_use]
    pub const fn new(seed: u64) -> Self {
        Self(if seed == 0 { Self::ZERO_SEED } else { seed })
    }

    /// The next 64 pseudo-random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n` (`n` must not be 0), by the remainder: slightly
    /// biased for huge `n`, which no test here cares about.
    ///
    /// # Panics
    /// When `n` is 0.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// An index in `0..len` (`len` must not be 0).
    ///
    /// # Panics
    /// When `len` is 0.
    pub fn index(&mut self, len: usize) -> usize {
        self.below(len as u64) as usize
    }

    /// A fair coin: the top bit of the next output.
    pub fn coin(&mut self) -> bool {
        self.next_u64() >> 63 == 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_balanced() {
        let mut a = XorShift64::new(0x6d6d_6b69_745f_6d6d);
        let mut b = a.clone();
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        let mut c = XorShift64::new(0);
        let heads = (0..10_000).filter(|_| c.coin()).count();
        assert!((4_500..5_500).contains(&heads), "{heads}");
    }

    #[test]
    fn known_first_outputs() {
        // The generator must not drift: tests and benchmarks rely on the
        // same sequence for the same seed on every machine.
        let mut r = XorShift64::new(1);
        assert_eq!(r.next_u64(), 0x47e4_ce4b_896c_dd1d);
        assert_eq!(XorShift64::new(0), XorShift64::new(0x9e37_79b9_7f4a_7c15));
    }

    #[test]
    fn bounded_draws() {
        let mut r = XorShift64::new(7);
        for _ in 0..1000 {
            assert!(r.below(3) < 3);
            assert!(r.index(5) < 5);
        }
    }
}
