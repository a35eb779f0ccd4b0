//! Timing/instruction probe of the quicklist hit path, for profiling with
//! `perf` or `valgrind --tool=callgrind` (the benchmarks of record are
//! `mmkit bench quicklist` and the criterion benches).
//!
//! Usage: `quicklist_probe [pinned|pinned_in_state|pinned_page|shared|shared_page|zero] [pairs]`
//! (`pinned`, `shared`: bare PFNs, whose free restores the page's state;
//! `pinned_in_state`: the `unsafe` free that takes the caller's word for
//! it; `*_page`: the pair as a `QuickPage`, which goes back as it is when
//! unwritten).
use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder};
use mmkit_quicklist::Quicklists;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "pinned".into());
    let n: u32 = args.next().and_then(|v| v.parse().ok()).unwrap_or(10_000_000);
    let mm = Arc::new(
        MemoryMapBuilder::with_memory(64 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap(),
    );
    let ql = Quicklists::new(Arc::clone(&mm), 1).unwrap();
    let t = Instant::now();
    match mode.as_str() {
        "pinned" => {
            let mut cpu = ql.pin_cpu(0).unwrap();
            for _ in 0..n {
                let p = cpu.alloc(0, Gfp::KERNEL, None).unwrap();
                cpu.free_page(0, None, black_box(p)).unwrap();
            }
        }
        "pinned_in_state" => {
            let mut cpu = ql.pin_cpu(0).unwrap();
            for _ in 0..n {
                let p = cpu.alloc(0, Gfp::KERNEL, None).unwrap();
                // SAFETY: the page came off the zero list and nothing wrote
                // it, so it is still all zeroes.
                unsafe { cpu.free_page_in_state(0, None, black_box(p)) }.unwrap();
            }
        }
        "pinned_page" => {
            let mut cpu = ql.pin_cpu(0).unwrap();
            for _ in 0..n {
                let p = cpu.alloc_page(0, Gfp::KERNEL, None).unwrap();
                cpu.free_quick_page(None, black_box(p)).unwrap();
            }
        }
        "shared_page" => {
            for _ in 0..n {
                let p = ql.alloc_page(0, Gfp::KERNEL, None).unwrap();
                ql.free_quick_page(None, black_box(p)).unwrap();
            }
        }
        "shared" => {
            for _ in 0..n {
                let p = ql.quicklist_alloc(0, Gfp::KERNEL, None).unwrap();
                ql.quicklist_free_page(0, None, black_box(p)).unwrap();
            }
        }
        "zero" => {
            for _ in 0..n {
                let p = mm.alloc_pages(Gfp::KERNEL | Gfp::ZERO, 0).unwrap();
                mm.free_pages(black_box(p), 0).unwrap();
            }
        }
        other => panic!("unknown mode {other}"),
    }
    let ns = t.elapsed().as_nanos() as f64 / f64::from(n);
    println!("{mode}: {ns:.1} ns per alloc+free pair");
}
