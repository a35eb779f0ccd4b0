//! Quick timing probe of the order-0 fast path (not a benchmark of record;
//! `mmkit bench pcp` is).
use mmkit::{Gfp, MemoryMapBuilder};
use std::hint::black_box;
use std::time::Instant;

fn main() {
    let modes: Vec<bool> = if std::env::args().any(|a| a == "pcp-only") { vec![true] } else { vec![true, false] };
    for pcp in modes {
        let mm = MemoryMapBuilder::with_memory(4 << 30).per_cpu_lists(pcp).build().unwrap();
        let n: u32 = std::env::var("PROBE_N").ok().and_then(|v| v.parse().ok()).unwrap_or(5_000_000);
        for _ in 0..3 {
            let t = Instant::now();
            for _ in 0..n {
                let p = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
                mm.free_pages(black_box(p), 0).unwrap();
            }
            println!("pcp={pcp}: {:.2} ns/pair", t.elapsed().as_nanos() as f64 / n as f64);
        }
        let cpu = mm.cpu(0).unwrap();
        let t = Instant::now();
        for _ in 0..n {
            let p = cpu.alloc_pages(Gfp::KERNEL, 0).unwrap();
            cpu.free_pages(black_box(p), 0).unwrap();
        }
        println!("pcp={pcp} handle: {:.2} ns/pair", t.elapsed().as_nanos() as f64 / n as f64);
        let mut pinned = mm.pin_cpu(0).unwrap();
        for _ in 0..3 {
            let t = Instant::now();
            for _ in 0..n {
                let p = pinned.alloc_pages(Gfp::KERNEL, 0).unwrap();
                pinned.free_pages(black_box(p), 0).unwrap();
            }
            println!("pcp={pcp} pinned: {:.2} ns/pair", t.elapsed().as_nanos() as f64 / n as f64);
        }
        for _ in 0..2 {
            let t = Instant::now();
            for _ in 0..n {
                let p = pinned.alloc_frozen_pages(Gfp::KERNEL, 0).unwrap();
                pinned.free_frozen_pages(black_box(p), 0).unwrap();
            }
            println!("pcp={pcp} pinned frozen: {:.2} ns/pair", t.elapsed().as_nanos() as f64 / n as f64);
        }
    }
}
