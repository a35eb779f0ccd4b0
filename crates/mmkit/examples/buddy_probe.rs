//! Instruction probe of the buddy path on fragmented memory, for
//! `valgrind --tool=callgrind` (the benchmark of record is
//! `mmkit bench buddy`, whose fragmented cases these reproduce; the fresh
//! case is `pcp_probe buddy`). A separate binary from `pcp_probe` so that a
//! second call site does not change how the allocator inlines there.
//!
//! Usage: `buddy_probe [frag0|frag9|fresh9|batch] [pairs]`. For `frag*` the
//! map is fragmented first with the recipes of `mmkit-bench`'s `fragment`
//! module: `frag0` takes 90% of the pages one by one and frees a xorshift
//! half; `frag9` takes order-9 blocks until refused and frees every other
//! one. The timed loop then allocates and frees one block of that order at
//! a time; `fresh9` does so on a fresh map, and `batch` allocates 4096
//! order-0 pages before freeing them all (counts are per page).
use mmkit::{Gfp, MemoryMapBuilder};
use mmkit_testkit::XorShift64;
use std::hint::black_box;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "frag9".into());
    let n: u32 = args.next().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    buddy_fragmented(&mode, n);
}

/// Fragments a 4 GiB buddy-only map as `mode` says, then times `n` pairs.
fn buddy_fragmented(mode: &str, n: u32) {
    let mm = MemoryMapBuilder::with_memory(4 << 30).per_cpu_lists(false).build().unwrap();
    let order = match mode {
        "frag0" | "batch" => 0,
        "frag9" | "fresh9" => 9,
        other => panic!("unknown mode {other}"),
    };
    if mode == "batch" {
        let mut held = Vec::with_capacity(4096);
        let t = Instant::now();
        for _ in 0..n / 4096 {
            held.extend((0..4096).map(|_| black_box(mm.alloc_pages(Gfp::KERNEL, 0).unwrap())));
            for p in held.drain(..) {
                mm.free_pages(p, 0).unwrap();
            }
        }
        println!("batch: {:.2} ns/page", t.elapsed().as_nanos() as f64 / n as f64);
        return;
    }
    let mut held = Vec::new();
    if mode == "frag0" {
        let count = mm.nr_free_pages() * 9 / 10;
        let all: Vec<_> = (0..count).map(|_| mm.alloc_pages(Gfp::KERNEL, 0).unwrap()).collect();
        let mut rng = XorShift64::new(0x6d6d_6b69_745f_6d6d);
        for p in all {
            if rng.coin() {
                mm.free_pages(p, 0).unwrap();
            } else {
                held.push(p);
            }
        }
    } else if mode == "frag9" {
        let all: Vec<_> = core::iter::from_fn(|| mm.alloc_pages(Gfp::KERNEL | Gfp::NOWARN, 9).ok()).collect();
        for (i, p) in all.into_iter().enumerate() {
            if i % 2 == 0 {
                mm.free_pages(p, 9).unwrap();
            } else {
                held.push(p);
            }
        }
    }
    let t = Instant::now();
    for _ in 0..n {
        let p = mm.alloc_pages(Gfp::KERNEL, order).unwrap();
        mm.free_pages(black_box(p), order).unwrap();
    }
    println!("{mode}: {:.2} ns/pair ({} blocks held)", t.elapsed().as_nanos() as f64 / n as f64, held.len());
}
