//! Instruction probe of zsmalloc's plain pair, for `valgrind
//! --tool=callgrind` (the benchmark of record is `mmkit bench zsmalloc`,
//! case `zs_malloc_free/SIZE`): `pairs` times a `zs_malloc` of `size`
//! bytes and its `zs_free` on a 64 MiB real-memory map, beside one
//! anchor object that keeps the class's zspage alive, as the benchmark
//! does. The cost of one pair is the difference of two run lengths
//! divided by the difference of their pairs.
//!
//! Usage: `zsmalloc_probe [size] [pairs]`
use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder};
use mmkit_zsmalloc::ZsPool;
use std::hint::black_box;
use std::sync::Arc;

fn main() {
    let mut args = std::env::args().skip(1);
    let size: usize = args.next().and_then(|v| v.parse().ok()).unwrap_or(1024);
    let pairs: u64 = args.next().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    let mm = MemoryMapBuilder::with_memory(64 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap();
    let pool = ZsPool::zs_create_pool("probe", Arc::new(mm)).unwrap();
    let gfp = Gfp::NOIO | Gfp::HIGHMEM | Gfp::MOVABLE;
    let anchor = pool.zs_malloc(size, gfp, 0).unwrap();
    for _ in 0..pairs {
        let h = pool.zs_malloc(black_box(size), gfp, 0).unwrap();
        assert!(pool.zs_free(black_box(h)).is_ok());
    }
    assert!(pool.zs_free(anchor).is_ok());
    println!("{pairs} pairs of {size} bytes");
}
