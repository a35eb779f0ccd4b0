//! Suite `bulk`: seed 004's experiment. Cost per page of allocating N
//! order-0 pages with `alloc_pages_bulk` and freeing them with
//! `free_pages_bulk`, for N = 1 … 256, next to one page at a time.
//!
//! Owns the batch sizes and the loops; timing and output are the harness's.
//! The shared API is measured (the CPU from `sched_getcpu`, one pageset lock
//! per batch), on a fresh metadata-only map.

use super::harness::{measure, BenchError, CaseResult, CaseSpec, Contender, Settings, SuiteReport};
use super::subjects::names;
use super::{Progress, Suite};
use mmkit::{Gfp, MemoryMapBuilder, Pfn};
use std::hint::black_box;

/// The suite as the registry lists it.
pub const SUITE: Suite =
    Suite { name: "bulk", about: "alloc_pages_bulk + free_pages_bulk per page at batch sizes 1..256 (seed 004)", run };

/// Batch sizes and their case names, as in seed 004's table.
const SIZES: [(usize, &str); 9] = [
    (1, "bulk/1"),
    (2, "bulk/2"),
    (4, "bulk/4"),
    (8, "bulk/8"),
    (16, "bulk/16"),
    (32, "bulk/32"),
    (64, "bulk/64"),
    (128, "bulk/128"),
    (256, "bulk/256"),
];

fn run(settings: &Settings, progress: &mut Progress<'_>) -> Result<SuiteReport, BenchError> {
    let bytes: u64 = settings.pick(4 << 30, 256 << 20);
    let pages_per_run: u64 = settings.pick(4 << 20, 1 << 14);
    let mm = MemoryMapBuilder::with_memory(bytes).build().map_err(|e| BenchError::context("building the map", e))?;
    let mut cases: Vec<CaseResult> = Vec::new();

    progress("single/1");
    let single = |iters: u64| -> Result<(), BenchError> {
        for _ in 0..iters {
            let pfn = mm.alloc_pages(Gfp::KERNEL, 0).map_err(|e| BenchError::context("alloc_pages", e))?;
            mm.free_pages(black_box(pfn), 0).map_err(|e| BenchError::context("free_pages", e))?;
        }
        Ok(())
    };
    let spec = CaseSpec {
        name: "single/1",
        unit: "page",
        units_per_iter: 1,
        iters: pages_per_run,
        warmup_iters: (pages_per_run / 8).max(1),
    };
    cases.extend(measure(SUITE.name, spec, &mut [Contender::new(names::MMKIT, single)], settings.runs)?);

    for (n, name) in SIZES {
        progress(name);
        let mut slots: Vec<Option<Pfn>> = vec![None; n];
        let mut pfns: Vec<Pfn> = Vec::with_capacity(n);
        let batch = |iters: u64| -> Result<(), BenchError> {
            for _ in 0..iters {
                slots.fill(None);
                let filled = mm.alloc_pages_bulk(Gfp::KERNEL, &mut slots);
                if filled != n {
                    return Err(BenchError(format!("alloc_pages_bulk filled {filled} of {n}")));
                }
                pfns.clear();
                pfns.extend(slots.iter().flatten().copied());
                mm.free_pages_bulk(black_box(&pfns)).map_err(|e| BenchError::context("free_pages_bulk", e))?;
            }
            Ok(())
        };
        let iters = (pages_per_run / n as u64).max(1);
        let spec = CaseSpec { name, unit: "page", units_per_iter: n as u64, iters, warmup_iters: (iters / 8).max(1) };
        cases.extend(measure(SUITE.name, spec, &mut [Contender::new(names::MMKIT, batch)], settings.runs)?);
    }

    let single_ns = cases.first().map(|c| c.median_ns).unwrap_or(f64::NAN);
    let mut table = String::from("seed 004 layout (alloc + free per page):");
    table.push_str(&format!("\n  single page: {single_ns:.1} ns"));
    for c in cases.iter().skip(1) {
        table.push_str(&format!(
            "\n  Bulk: {:>3} nanosec: {:6.1}  ({:.2}x single)",
            c.name.trim_start_matches("bulk/"),
            c.median_ns,
            single_ns / c.median_ns
        ));
    }
    let notes = vec![
        table,
        "Seed 004 (Linux, 2017, alloc only, cycles at ~4 GHz): single page 158 cycles (39.6 ns); bulk of \
         8: 91 cycles, 64: 85 cycles per page. mmkit's numbers include the free."
            .to_string(),
    ];
    let description = format!(
        "{pages_per_run} pages per run through Gfp::KERNEL, {} map, shared API",
        crate::size::format_size(bytes)
    );
    Ok(SuiteReport { suite: SUITE.name, description, cases, notes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_suite_reports_every_batch_size() {
        let report = run(&Settings { runs: 1, quick: true }, &mut |_| {}).unwrap();
        assert_eq!(report.cases.len(), 1 + SIZES.len());
        assert_eq!(report.cases[0].name, "single/1");
        for (c, (_, name)) in report.cases.iter().skip(1).zip(SIZES) {
            assert_eq!(c.name, name);
            assert_eq!(c.unit, "page");
            assert!(c.median_ns > 0.0);
        }
    }
}
