//! Instruction-count probe for the bulk allocator, shaped like the `bulk`
//! bench suite: each round allocates a window of order-0 pages with
//! `alloc_pages_bulk` in batches, then frees them with `free_pages_bulk` in
//! batches of the same size (refills and spills count once the window
//! outgrows the lists' `high`). The allocation is timed on its own and, as
//! the bench's step does it, together with building a fresh slot array and
//! collecting the filled slots into a `Vec`.
//!
//! Usage: `bulk_probe [rounds] [batch] [window]`.
//! Under `valgrind --tool=callgrind`, instructions per page are
//! (Ir at 2R rounds - Ir at R rounds) / (R * window).
use mmkit::{Gfp, MemoryMapBuilder, Pfn};
use std::hint::black_box;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().and_then(|v| v.parse().ok()).unwrap_or(1000);
    let batch: usize = args.next().and_then(|v| v.parse().ok()).unwrap_or(64);
    let window: usize = args.next().and_then(|v| v.parse().ok()).unwrap_or(4096);
    let mm = MemoryMapBuilder::with_memory(4 << 30).build().unwrap();
    let mut slots: Vec<Option<Pfn>> = vec![None; window];
    let (mut t_alloc, mut t_free) = (0u128, 0u128);
    for _ in 0..rounds {
        slots.fill(None);
        let t = Instant::now();
        for chunk in slots.chunks_mut(batch) {
            assert_eq!(mm.alloc_pages_bulk(Gfp::KERNEL, chunk), chunk.len());
        }
        t_alloc += t.elapsed().as_nanos();
        let pfns: Vec<Pfn> = slots.iter().flatten().copied().collect();
        let t = Instant::now();
        for chunk in pfns.chunks(batch) {
            mm.free_pages_bulk(black_box(chunk)).unwrap();
        }
        t_free += t.elapsed().as_nanos();
    }
    // The bench's timed step: a fresh slot array, the batches, the collect.
    let mut t_step = 0u128;
    for _ in 0..rounds {
        let t = Instant::now();
        let mut fresh: Vec<Option<Pfn>> = vec![None; window];
        for chunk in fresh.chunks_mut(batch) {
            assert_eq!(mm.alloc_pages_bulk(Gfp::KERNEL, chunk), chunk.len());
        }
        let pfns: Vec<Pfn> = fresh.into_iter().flatten().collect();
        t_step += t.elapsed().as_nanos();
        for chunk in pfns.chunks(batch) {
            mm.free_pages_bulk(black_box(chunk)).unwrap();
        }
    }
    let pages = (rounds * window) as f64;
    println!(
        "batch {batch}, window {window}: alloc {:.2} ns/page, free {:.2} ns/page; bench-shaped alloc step {:.2} ns/page",
        t_alloc as f64 / pages,
        t_free as f64 / pages,
        t_step as f64 / pages
    );
}
