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
//! order-0 pages before freeing them all (counts are per page). With a
//! second word `locked` (e.g. `buddy_probe frag9 locked`), the timed loop
//! runs through CPU 0's pinned handle holding the zone locked
//! (`PinnedCpu::lock_zone`) instead of the shared API. The map has
//! per-CPU lists off (the suite's `mmkit_lists_off` row) unless the second
//! word is `default`: then it keeps the builder's defaults (per-CPU lists
//! and cache on), as the suite's `mmkit` row.
use mmkit::{Cpus, Report};
use mmkit::{Gfp, MemoryMapBuilder};
use mmkit_testkit::XorShift64;
use std::hint::black_box;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "frag9".into());
    let (mut n, mut locked, mut default_map) = (1_000_000u32, false, false);
    for arg in args {
        match arg.parse() {
            Ok(v) => n = v,
            Err(_) => {
                locked |= arg == "locked";
                default_map |= arg == "default";
            }
        }
    }
    buddy_fragmented(&mode, n, locked, default_map);
}

/// Fragments a 4 GiB map as `mode` says, then times `n` pairs (through a
/// locked zone when `locked`). The map has no per-CPU lists unless
/// `default_map`.
fn buddy_fragmented(mode: &str, n: u32, locked: bool, default_map: bool) {
    let mm = MemoryMapBuilder::with_memory(4 << 30).per_cpu_lists(default_map).build().unwrap();
    let order = match mode {
        "frag0" | "batch" => 0,
        "frag9" | "fresh9" => 9,
        other => panic!("unknown mode {other}"),
    };
    if mode == "batch" && !locked {
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
        let count = Report::new(&mm).nr_free_pages() * 9 / 10;
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
    if locked {
        return timed_locked(&mm, mode, order, n, held.len());
    }
    let t = Instant::now();
    timed_pairs(&mm, order, n);
    println!("{mode}: {:.2} ns/pair ({} blocks held)", t.elapsed().as_nanos() as f64 / n as f64, held.len());
}

/// The timed loop of the shared API, out of line so that callgrind can
/// count it alone (`--toggle-collect='buddy_probe::timed_pairs'`).
#[inline(never)]
fn timed_pairs(mm: &mmkit::PageAllocator, order: u32, n: u32) {
    for _ in 0..n {
        let p = mm.alloc_pages(Gfp::KERNEL, order).unwrap();
        mm.free_pages(black_box(p), order).unwrap();
    }
}

/// The timed loop through CPU 0's pinned handle with the zone held locked.
fn timed_locked(mm: &mmkit::PageAllocator, mode: &str, order: u32, n: u32, held: usize) {
    let mut cpu = Cpus::new(mm).pin_cpu(0).unwrap();
    let mut zone = cpu.lock_zone(Gfp::KERNEL).unwrap();
    let t = Instant::now();
    if mode == "batch" {
        let mut batch = Vec::with_capacity(4096);
        for _ in 0..n / 4096 {
            batch.extend((0..4096).map(|_| black_box(zone.alloc_pages(Gfp::KERNEL, 0).unwrap())));
            for p in batch.drain(..) {
                zone.free_pages(p, 0).unwrap();
            }
        }
        println!("batch locked: {:.2} ns/page", t.elapsed().as_nanos() as f64 / n as f64);
        return;
    }
    for _ in 0..n {
        let p = zone.alloc_pages(Gfp::KERNEL, order).unwrap();
        zone.free_pages(black_box(p), order).unwrap();
    }
    println!("{mode} locked: {:.2} ns/pair ({held} blocks held)", t.elapsed().as_nanos() as f64 / n as f64);
}
