//! Suite `bulk`: the experiment of Linux's bulk page allocator series (`mm, page_alloc: Add a bulk page allocator`). Cost per page of allocating order-0
//! pages with `alloc_pages_bulk` in batches of N = 1 … 256, next to one page
//! at a time with `alloc_pages`; and the matching cost of freeing them with
//! `free_pages_bulk` against `free_pages`.
//!
//! Owns the batch sizes and the loops; timing and output are the harness's.
//! Like that series, the allocation is timed on its own: each iteration
//! allocates a window of pages in batches (timed) and frees them (untimed),
//! and the free cases do the reverse. The window keeps the clock reads to a
//! few per thousand pages. The shared API is measured (the CPU from
//! `sched_getcpu`, one pageset-lock hold per batch) on a fresh metadata-only
//! map.

use super::harness::{measure_staged, BenchError, CaseResult, CaseSpec, Settings, StagedContender, SuiteReport};
use super::summary::{Figure, Headline, Published, Row};
use super::{Progress, Suite};
use mmkit::{Gfp, MemoryMapBuilder, PageAllocator, Pfn};
use mmkit_bench::subjects::names;
use std::hint::black_box;

/// The suite as the registry lists it.
pub const SUITE: Suite = Suite {
    name: "bulk",
    about: "alloc_pages_bulk / free_pages_bulk per page at batch sizes 1..256 (Linux's bulk page allocator series)",
    run,
    baselines: &[],
    headline: Some(Headline {
        mmkit: Row { case: "bulk/64", imp: names::MMKIT },
        peer: Row { case: "single/1", imp: names::MMKIT },
        published: Some(Published {
            text: "21.3 ns/page",
            figure: Figure::Time(21.3),
            source: "mm, page_alloc: Add a bulk page allocator (2017): 85 cycles a page in batches of 64",
        }),
    }),
};

/// Pages allocated (or freed) per timed step.
const WINDOW: usize = 4096;

/// Batch sizes and their case names, as in that series' table.
const SIZES: [(usize, &str, &str); 9] = [
    (1, "bulk/1", "bulk_free/1"),
    (2, "bulk/2", "bulk_free/2"),
    (4, "bulk/4", "bulk_free/4"),
    (8, "bulk/8", "bulk_free/8"),
    (16, "bulk/16", "bulk_free/16"),
    (32, "bulk/32", "bulk_free/32"),
    (64, "bulk/64", "bulk_free/64"),
    (128, "bulk/128", "bulk_free/128"),
    (256, "bulk/256", "bulk_free/256"),
];

fn alloc_err(what: &'static str) -> impl Fn(mmkit::AllocError) -> BenchError {
    move |e| BenchError::context(what, e)
}

// The page arrays are made and emptied off the clock, as Linux's
// page_bench does with its array, so the timed steps are the allocator's
// work alone: making a 4096-entry array and collecting it into another
// cost a third of a batch-64 allocation per page (case `bulk/64`).

/// An empty window for single-page allocation (off the clock).
fn single_window() -> Result<Vec<Pfn>, BenchError> {
    Ok(Vec::with_capacity(WINDOW))
}

/// An empty window of slots for bulk allocation (off the clock).
fn bulk_window() -> Result<Vec<Option<Pfn>>, BenchError> {
    Ok(vec![None; WINDOW])
}

/// Fills `pages` with `WINDOW` pages through `alloc_pages`, one at a time.
fn alloc_single(mm: &PageAllocator, mut pages: Vec<Pfn>) -> Result<Vec<Pfn>, BenchError> {
    for _ in 0..WINDOW {
        pages.push(mm.alloc_pages(Gfp::KERNEL, 0).map_err(alloc_err("alloc_pages"))?);
    }
    Ok(pages)
}

/// Fills the `WINDOW` slots through `alloc_pages_bulk`, `n` slots per call.
fn alloc_bulk(mm: &PageAllocator, mut slots: Vec<Option<Pfn>>, n: usize) -> Result<Vec<Option<Pfn>>, BenchError> {
    for batch in slots.chunks_mut(n) {
        let filled = mm.alloc_pages_bulk(Gfp::KERNEL, batch);
        if filled != batch.len() {
            return Err(BenchError(format!("alloc_pages_bulk filled {filled} of {}", batch.len())));
        }
    }
    Ok(slots)
}

/// A full window of bulk-allocated pages as a list (off the clock).
fn bulk_pages(mm: &PageAllocator, n: usize) -> Result<Vec<Pfn>, BenchError> {
    Ok(alloc_bulk(mm, bulk_window()?, n)?.into_iter().flatten().collect())
}

/// Frees `pages` one at a time; hands the emptied list back.
fn free_single(mm: &PageAllocator, pages: Vec<Pfn>) -> Result<Vec<Pfn>, BenchError> {
    for &pfn in &pages {
        mm.free_pages(black_box(pfn), 0).map_err(|e| BenchError::context("free_pages", e))?;
    }
    Ok(pages)
}

/// Frees `pages` through `free_pages_bulk`, `n` per call; hands the list back.
fn free_bulk(mm: &PageAllocator, pages: Vec<Pfn>, n: usize) -> Result<Vec<Pfn>, BenchError> {
    for batch in pages.chunks(n) {
        mm.free_pages_bulk(black_box(batch)).map_err(|e| BenchError::context("free_pages_bulk", e))?;
    }
    Ok(pages)
}

fn run(settings: &Settings, progress: &mut Progress<'_>) -> Result<SuiteReport, BenchError> {
    let bytes: u64 = settings.pick(4 << 30, 256 << 20);
    let iters: u64 = settings.pick(512, 8);
    let mm = MemoryMapBuilder::with_memory(bytes).build().map_err(|e| BenchError::context("building the map", e))?;
    let spec =
        |name| CaseSpec { name, unit: "page", units_per_iter: WINDOW as u64, iters, warmup_iters: (iters / 8).max(1) };
    let mm = &mm;
    let mut cases: Vec<CaseResult> = Vec::new();

    progress("single/1");
    let single = StagedContender::new(
        names::MMKIT,
        single_window,
        |pages| alloc_single(mm, pages),
        |pages| free_single(mm, pages).map(drop),
    );
    cases.extend(measure_staged(SUITE.name, spec("single/1"), &mut [single], settings.runs)?);
    for (n, name, _) in SIZES {
        progress(name);
        let bulk = StagedContender::new(
            names::MMKIT,
            bulk_window,
            |slots| alloc_bulk(mm, slots, n),
            |slots| free_bulk(mm, slots.into_iter().flatten().collect(), n).map(drop),
        );
        cases.extend(measure_staged(SUITE.name, spec(name), &mut [bulk], settings.runs)?);
    }
    progress("single_free/1");
    let single = StagedContender::new(
        names::MMKIT,
        || alloc_single(mm, single_window()?),
        |pages| free_single(mm, pages),
        |_pages: Vec<Pfn>| Ok(()),
    );
    cases.extend(measure_staged(SUITE.name, spec("single_free/1"), &mut [single], settings.runs)?);
    for (n, _, name) in SIZES {
        progress(name);
        let bulk = StagedContender::new(
            names::MMKIT,
            || bulk_pages(mm, n),
            |pages| free_bulk(mm, pages, n),
            |_pages: Vec<Pfn>| Ok(()),
        );
        cases.extend(measure_staged(SUITE.name, spec(name), &mut [bulk], settings.runs)?);
    }

    let median = |name: &str| cases.iter().find(|c| c.name == name).map_or(f64::NAN, |c| c.median_ns);
    let mut table =
        String::from("bulk allocator series layout (allocation only, ns per page; free per page after the slash):");
    table.push_str(&format!("\n  single page: {:.1} / {:.1}", median("single/1"), median("single_free/1")));
    for (n, alloc, free) in SIZES {
        table.push_str(&format!(
            "\n  Bulk: {n:>3} nanosec: {:6.1} / {:6.1}  ({:.2}x single)",
            median(alloc),
            median(free),
            median("single/1") / median(alloc)
        ));
    }
    let notes = vec![
        table,
        "Linux's bulk allocator series (2017, allocation only, cycles at ~4 GHz): single page 158 \
         cycles (39.6 ns); bulk of 8: 91 cycles (22.8 ns), of 64: 85 cycles (21.3 ns) per page."
            .to_string(),
        format!(
            "Each iteration allocates {WINDOW} pages in batches of N (bulk/N, single/1) or frees {WINDOW} \
             pages in batches of N (bulk_free/N, single_free/1); only that step is timed; the matching \
             free or allocation, and making and emptying the page array, run off the clock."
        ),
    ];
    let description = format!(
        "{iters} x {WINDOW} pages per run through Gfp::KERNEL, {} map, shared API",
        crate::size::format_size(bytes)
    );
    Ok(SuiteReport { suite: SUITE.name, description, cases, notes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_suite_reports_every_batch_size_both_ways() {
        let report = run(&Settings { runs: 1, quick: true }, &mut |_| {}).unwrap();
        assert_eq!(report.cases.len(), 2 * (1 + SIZES.len()));
        assert_eq!(report.cases[0].name, "single/1");
        for (n, alloc, free) in SIZES {
            for name in [alloc, free] {
                let case = report.cases.iter().find(|c| c.name == name).unwrap_or_else(|| panic!("{name} missing"));
                assert_eq!(case.unit, "page", "{n}");
                assert!(case.median_ns > 0.0);
            }
        }
        assert!(report.notes[0].contains("Bulk:  64 nanosec"));
    }
}
