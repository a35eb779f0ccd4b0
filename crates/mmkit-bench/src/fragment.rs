//! Deterministic fragmentation for "fragmented" cases, the same procedure
//! for every [`PageAlloc`].
//!
//! Owns the two recipes the benchmarks share (`mmkit bench buddy` and the
//! criterion bench `benches/buddy.rs` fragment the same way):
//! - [`scatter`]: allocate many order-0 pages, free a pseudo-random half, so
//!   free memory is scattered in small blocks between held pages;
//! - [`alternate`]: allocate blocks of one order until the implementation
//!   refuses, free every other one, so free blocks of that order exist but
//!   cannot merge (their buddies are held, see `__free_one_page()` in
//!   Linux's `mm/page_alloc.c`) and (nearly) no larger block is left to
//!   split.
//!
//! The pages kept allocated are returned; the caller holds them for as long
//! as the measurement runs. Must not time anything; the pseudo-random
//! choices come from `mmkit_testkit::XorShift64`, not a generator of its own.

use crate::subjects::PageAlloc;
use crate::BenchError;
use mmkit_testkit::XorShift64;

/// Seed of every fragmentation: the same holes on every run and machine.
pub const SEED: u64 = 0x6d6d_6b69_745f_6d6d;

/// Allocates `count` order-0 pages, then frees each with probability 1/2
/// (decided by [`XorShift64`] from `seed`). Returns the pages still held.
///
/// # Errors
/// When the implementation cannot give `count` pages.
pub fn scatter<P: PageAlloc>(p: &mut P, count: u64, seed: u64) -> Result<Vec<P::Block>, BenchError> {
    let mut all = Vec::with_capacity(count as usize);
    for i in 0..count {
        let block = p.alloc(0).map_err(|e| BenchError(format!("fragmenting: page {i} of {count}: {e}")))?;
        all.push(block);
    }
    let mut rng = XorShift64::new(seed);
    let mut held = Vec::with_capacity(all.len() / 2 + 1);
    for block in all {
        if rng.coin() {
            p.free(block, 0)?;
        } else {
            held.push(block);
        }
    }
    Ok(held)
}

/// Allocates blocks of `order` until the implementation refuses or `limit`
/// blocks are held, then frees every other one (the 1st, 3rd, ...). Returns
/// the blocks still held.
///
/// # Errors
/// When freeing fails.
pub fn alternate<P: PageAlloc>(p: &mut P, order: u32, limit: u64) -> Result<Vec<P::Block>, BenchError> {
    let mut all = Vec::new();
    while (all.len() as u64) < limit {
        match p.alloc(order) {
            Ok(block) => all.push(block),
            Err(_) => break,
        }
    }
    let mut held = Vec::with_capacity(all.len() / 2 + 1);
    for (i, block) in all.into_iter().enumerate() {
        if i % 2 == 0 {
            p.free(block, order)?;
        } else {
            held.push(block);
        }
    }
    Ok(held)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::subjects::{buddy_only_map, Bsa, Mmkit};
    use mmkit::Report;

    #[test]
    fn xorshift_is_deterministic_and_balanced() {
        let mut a = XorShift64::new(SEED);
        let mut b = XorShift64::new(SEED);
        let xs: Vec<u64> = (0..100).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..100).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        let mut c = XorShift64::new(0);
        let heads = (0..10_000).filter(|_| c.coin()).count();
        assert!((4_500..5_500).contains(&heads), "{heads}");
    }

    #[test]
    fn scatter_leaves_small_free_blocks() {
        let mm = buddy_only_map(64 << 20).unwrap();
        let free = Report::new(&mm).nr_free_pages();
        let mut m = Mmkit::new(&mm);
        let held = scatter(&mut m, free * 9 / 10, SEED).unwrap();
        assert!(held.len() as u64 > free * 4 / 10 && (held.len() as u64) < free * 5 / 10);
        assert_eq!(Report::new(&mm).nr_free_pages(), free - held.len() as u64);
        Report::new(&mm).check_invariants().unwrap();
        // Most free memory now sits in blocks of order <= 3.
        let snapshots = Report::new(&mm).zone_snapshots();
        let small: u64 = snapshots
            .iter()
            .flat_map(|s| s.free.free_blocks_per_order.iter().take(4).enumerate())
            .map(|(o, n)| n << o)
            .sum();
        let scattered = free * 9 / 10 - held.len() as u64;
        assert!(small >= scattered * 9 / 10, "{small} of {scattered}");
    }

    #[test]
    fn alternate_leaves_unmergeable_blocks() {
        let mut b = Bsa::new(std::iter::once(1..8192));
        let held = alternate(&mut b, 9, u64::MAX).unwrap();
        assert_eq!(held.len(), 7, "15 order-9 blocks in frames 1..8192, 7 kept");
        // The freed ones come back one at a time, never merged into order 10.
        assert!(b.alloc(10).is_err());
        assert!(b.alloc(9).is_ok());

        let mm = buddy_only_map(64 << 20).unwrap();
        let mut m = Mmkit::new(&mm);
        let held = alternate(&mut m, 9, u64::MAX).unwrap();
        assert!(held.len() >= 10);
        let snapshots = Report::new(&mm).zone_snapshots();
        let free_blocks = |order: usize| -> u64 { snapshots.iter().map(|s| s.free.free_blocks_per_order[order]).sum() };
        // Each freed block's buddy is held, except that the last one freed
        // may merge with the watermark-protected remainder of its zone.
        assert!(free_blocks(10) <= 1);
        assert!(free_blocks(9) + 1 >= held.len() as u64);
        Report::new(&mm).check_invariants().unwrap();
    }
}
