//! Timing/instruction probe of the order-0 fast paths, for profiling with
//! `perf` or `valgrind --tool=callgrind` (the benchmarks of record are
//! `mmkit bench pcp` and the criterion benches).
//!
//! Usage: `pcp_probe [shared|node|sfrozen|lists|shared2|shared2x|handle|pinned|pinned2|frozen|buddy|bulk64] [pairs]`
//! (`node`: `alloc_pages_node` for the local node; `sfrozen`: the shared
//! API's frozen pair; `frozen`: a pinned CPU's; `lists`: the shared API
//! with the per-CPU cache off, on the locked lists as before it; `shared2x`: `shared2` after one page moved from CPU 0's list to CPU 1's,
//! so that the two CPUs' hot pages are neighbours: their descriptors share
//! a cache line)
use mmkit::{Cpus, Report};
use mmkit::{Gfp, MemoryMapBuilder};
use std::hint::black_box;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "shared".into());
    let n: u32 = args.next().and_then(|v| v.parse().ok()).unwrap_or(5_000_000);
    let mm = MemoryMapBuilder::with_memory(4 << 30)
        .per_cpu_lists(mode != "buddy")
        .cpu_caches(mode != "lists")
        .build()
        .unwrap();
    let t = Instant::now();
    match mode.as_str() {
        "shared" | "lists" | "buddy" => {
            for _ in 0..n {
                let p = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
                mm.free_pages(black_box(p), 0).unwrap();
            }
        }
        "node" => {
            for _ in 0..n {
                let p = mm.alloc_pages_node(0, Gfp::KERNEL, 0).unwrap();
                mm.free_pages(black_box(p), 0).unwrap();
            }
        }
        "sfrozen" => {
            for _ in 0..n {
                let p = mm.alloc_frozen_pages(Gfp::KERNEL, 0).unwrap();
                mm.free_frozen_pages(black_box(p), 0).unwrap();
            }
        }
        "handle" => {
            let cpu = Cpus::new(&mm).cpu(0).unwrap();
            for _ in 0..n {
                let p = cpu.alloc_pages(Gfp::KERNEL, 0).unwrap();
                cpu.free_pages(black_box(p), 0).unwrap();
            }
        }
        "pinned" => {
            let mut cpu = Cpus::new(&mm).pin_cpu(0).unwrap();
            for _ in 0..n {
                let p = cpu.alloc_pages(Gfp::KERNEL, 0).unwrap();
                cpu.free_pages(black_box(p), 0).unwrap();
            }
        }
        "pinned2" => {
            // Two pinned workers, one per CPU of the map; prints each
            // worker's hot page (a shared descriptor cache line between
            // them would show as poor scaling).
            for round in 0..4 {
                let t = Instant::now();
                std::thread::scope(|s| {
                    for cpu in 0..2 {
                        let mm = &mm;
                        s.spawn(move || {
                            let mut pinned = Cpus::new(mm).pin_cpu(cpu).unwrap();
                            let mut last = mmkit::Pfn(0);
                            for _ in 0..n {
                                let p = pinned.alloc_pages(Gfp::KERNEL, 0).unwrap();
                                last = p;
                                pinned.free_pages(black_box(p), 0).unwrap();
                            }
                            if round == 0 {
                                println!("cpu {cpu}: hot page {last}");
                            }
                        });
                    }
                });
                println!("round {round}: {:.2} ns/pair aggregate", t.elapsed().as_nanos() as f64 / (2 * n) as f64);
            }
        }
        "frozen" => {
            let mut cpu = Cpus::new(&mm).pin_cpu(0).unwrap();
            for _ in 0..n {
                let p = cpu.alloc_frozen_pages(Gfp::KERNEL, 0).unwrap();
                cpu.free_frozen_pages(black_box(p), 0).unwrap();
            }
        }
        "bulk64" => {
            let mut slots = [None; 64];
            let mut pfns = Vec::with_capacity(64);
            for _ in 0..n / 64 {
                slots.fill(None);
                assert_eq!(mm.alloc_pages_bulk(Gfp::KERNEL, &mut slots), 64);
                pfns.clear();
                pfns.extend(slots.iter().flatten().copied());
                mm.free_pages_bulk(black_box(&pfns)).unwrap();
            }
        }
        "shared2" | "shared2x" => {
            if mode == "shared2x" {
                // A page allocated on CPU 0 and freed on CPU 1 becomes CPU
                // 1's hot page, next to CPU 0's: four 16-byte descriptors
                // share a cache line, which both CPUs then write per pair.
                let (c0, c1) = (Cpus::new(&mm).cpu(0).unwrap(), Cpus::new(&mm).cpu(1).unwrap());
                let warm = c1.alloc_pages(Gfp::KERNEL, 0).unwrap();
                c1.free_pages(warm, 0).unwrap();
                let moved = c0.alloc_pages(Gfp::KERNEL, 0).unwrap();
                c1.free_pages(moved, 0).unwrap();
            }
            for round in 0..8 {
                let busy = Report::new(&mm).stats().pcp_contended;
                let t = Instant::now();
                std::thread::scope(|s| {
                    for _ in 0..2 {
                        s.spawn(|| {
                            for _ in 0..n {
                                let p = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
                                mm.free_pages(black_box(p), 0).unwrap();
                            }
                        });
                    }
                });
                println!(
                    "round {round}: {:.2} ns/pair aggregate, pageset busy {} times",
                    t.elapsed().as_nanos() as f64 / (2 * n) as f64,
                    Report::new(&mm).stats().pcp_contended - busy
                );
            }
        }
        other => panic!("unknown mode {other}"),
    }
    println!("{mode}: {:.2} ns/pair", t.elapsed().as_nanos() as f64 / n as f64);
}
