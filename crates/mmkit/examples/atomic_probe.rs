//! What an uncontended atomic read-modify-write costs on this machine: the
//! floor under any alloc+free pair that synchronises through locks or
//! compare-and-swaps. A shared buddy pair (`mmkit bench buddy`, row `mmkit`)
//! takes three: the zone lock on alloc, the descriptor's last-reference
//! drop and the zone lock on free; `buddy_system_allocator_locked` takes two.
//!
//! Usage: `atomic_probe [iterations]`. Each line times a loop whose body
//! does `k` compare-and-swaps, each on its own cache line and each after a
//! plain load of that line (as a lock's try-acquire is), for k = 0..=3,
//! and reports the time per iteration and per compare-and-swap over the
//! k = 0 loop. Single-threaded: nothing contends, so this is the cost of the
//! instruction itself (on x86 a `lock cmpxchg`, which drains the store
//! buffer), not of cache-line transfers.
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering::Acquire, Ordering::Relaxed};
use std::time::Instant;

/// One counter per 64-byte line, so that no two swaps share a line.
#[repr(align(64))]
struct Line(AtomicU64);

fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|v| v.parse().ok()).unwrap_or(50_000_000);
    let lines: Vec<Line> = (0..3).map(|_| Line(AtomicU64::new(0))).collect();
    let mut base = 0.0;
    for k in 0..=3 {
        let ns = best_of_three(|| timed(&lines[..k], n));
        if k == 0 {
            base = ns;
            println!("0 swaps: {ns:.2} ns/iteration");
        } else {
            println!("{k} swaps: {ns:.2} ns/iteration, {:.2} ns per swap", (ns - base) / k as f64);
        }
    }
}

/// Nanoseconds per iteration of `n` iterations, each doing one load and one
/// compare-and-swap on every line of `lines`.
fn timed(lines: &[Line], n: u64) -> f64 {
    let t = Instant::now();
    for i in 0..n {
        for line in lines {
            let seen = line.0.load(Relaxed);
            black_box(line.0.compare_exchange(seen, seen + 1, Acquire, Relaxed).is_ok());
        }
        black_box(i);
    }
    t.elapsed().as_nanos() as f64 / n as f64
}

/// The fastest of three runs (the machine is shared: slower runs are noise).
fn best_of_three(mut run: impl FnMut() -> f64) -> f64 {
    (0..3).map(|_| run()).fold(f64::INFINITY, f64::min)
}
