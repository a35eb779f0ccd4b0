//! Suite `contig`: a range of 16384 pages is allocated with
//! `alloc_contig_range` and freed, over and over; the free is timed page by
//! page (the "before": Linux's `free_frozen_pages()` per page,
//! `mm/page_alloc.c`) and as one batched `free_contig_range` (the "after"),
//! and the allocation itself and `cma_alloc` (`mm/cma.c`) of the same size
//! are timed too.
//!
//! Owns the case list, the iteration counts and the before/after comparison
//! in the notes. The workloads are `mmkit_bench::contig`'s, the same code
//! the criterion bench `crates/mmkit-bench/benches/contig.rs` times; timing
//! and output are the harness's (`measure_staged`: the allocation a free
//! needs, or the free that undoes an allocation, stays off the clock).

use super::harness::{measure_staged, BenchError, CaseResult, CaseSpec, Settings, StagedContender, SuiteReport};
use super::summary::{Figure, Headline, Published, Row};
use super::{Progress, Suite};
use mmkit::Pfn;
use mmkit_bench::contig::{ContigBench, RANGE_PAGES};
use mmkit_bench::subjects::names;

/// The suite as the registry lists it.
pub const SUITE: Suite = Suite {
    name: "contig",
    about: "free_contig_range per page vs batched, alloc_contig_range, cma_alloc of 16384 pages (Linux's batched free_contig_frozen_range change)",
    run,
    baselines: &[],
    headline: Some(Headline {
        mmkit: Row { case: BATCHED, imp: names::MMKIT },
        peer: Row { case: PER_PAGE, imp: names::MMKIT },
        published: Some(Published {
            text: "3.5x",
            figure: Figure::SpeedUp(3.5),
            source: "batched __free_contig_frozen_range(): 16384 pages, 1406 -> 402 usec",
        }),
    }),
};

/// Case names, as reported.
const PER_PAGE: &str = "free_contig_range/per_page";
const BATCHED: &str = "free_contig_range/batched";
const FROZEN: &str = "free_contig_range/frozen";
const OWNED: &str = "free_contig_range/owned";
const ALLOC: &str = "alloc_contig_range";
const CMA: &str = "cma_alloc";

/// Builds a case's contender over a prepared map: which step is timed and
/// which steps around it are not.
type Staging = for<'a> fn(&'a ContigBench) -> StagedContender<'a>;

/// Every case, in the order run and reported.
const CASES: [(&str, Staging); 6] =
    [(PER_PAGE, per_page), (BATCHED, batched), (FROZEN, frozen), (OWNED, owned), (ALLOC, alloc), (CMA, cma)];

fn run(settings: &Settings, progress: &mut Progress<'_>) -> Result<SuiteReport, BenchError> {
    let iters: u64 = settings.pick(200, 5);
    let mut cases: Vec<CaseResult> = Vec::new();
    for (name, staging) in CASES {
        progress(name);
        // A fresh map per case, so no case inherits another's per-CPU lists.
        let bench = ContigBench::new(RANGE_PAGES).map_err(|e| BenchError::context("building the map", e))?;
        let spec = CaseSpec { name, unit: "iteration", units_per_iter: 1, iters, warmup_iters: (iters / 8).max(1) };
        cases.extend(measure_staged(SUITE.name, spec, &mut [staging(&bench)], settings.runs)?);
    }

    let usec = |name: &str| cases.iter().find(|c| c.name == name).map_or(f64::NAN, |c| c.median_ns / 1000.0);
    let (before, after) = (usec(PER_PAGE), usec(BATCHED));
    let notes = vec![
        format!(
            "Before: {before:.1} usec per iteration / After: {after:.1} usec per iteration (ratio {:.1}x; \
             Linux's change: 1406 / 402 usec, 3.5x)",
            before / after
        ),
        format!(
            "Frozen pages (an atomic clear of ALLOCATED per page instead of the reference drop): \
             free_contig_frozen_range {:.1} usec ({:.1}x per page). An owned range (no atomic per page: the \
             ContigRange handle is the claim): free_contig_block {:.1} usec ({:.1}x per page).",
            usec(FROZEN),
            before / usec(FROZEN),
            usec(OWNED),
            before / usec(OWNED)
        ),
        format!(
            "Allocating the same {RANGE_PAGES} pages: alloc_contig_range {:.1} usec, cma_alloc {:.1} usec per \
             iteration (medians).",
            usec(ALLOC),
            usec(CMA)
        ),
        "Only the named operation is timed. The two free cases allocate their range with \
         alloc_contig_range off the clock; alloc_contig_range and cma_alloc give the range back \
         (free_contig_range, cma_release) off the clock."
            .to_string(),
        "Seed 000 (Linux, 2026, CMA through debugfs) timed the frozen-page free of a CMA range: before, \
         free_frozen_pages for each page (each one through the order-0 per-CPU list); after, the range \
         freed in the largest aligned blocks. mmkit's before is free_pages(pfn, 0) per page through the \
         shared API, per-CPU lists on; its after is one free_contig_range."
            .to_string(),
    ];
    let description = format!(
        "{RANGE_PAGES} pages per iteration, {iters} iterations per run, on a fresh metadata-only map per case \
         (one NORMAL zone of {} pages with a CMA area of {RANGE_PAGES}), Gfp::KERNEL, shared API",
        4 * RANGE_PAGES.next_multiple_of(1024),
    );
    Ok(SuiteReport { suite: SUITE.name, description, cases, notes })
}

/// `alloc_contig_range` of the bench's range, errors as the suite reports them.
fn alloc_range(bench: &ContigBench) -> Result<Pfn, BenchError> {
    bench.alloc_range().map_err(|e| BenchError::context("alloc_contig_range", e))
}

/// `free_contig_range` of what [`alloc_range`] returned.
fn free_batched(bench: &ContigBench, pfn: Pfn) -> Result<(), BenchError> {
    bench.free_batched(pfn).map_err(|e| BenchError::context("free_contig_range", e))
}

fn per_page(bench: &ContigBench) -> StagedContender<'_> {
    StagedContender::new(
        names::MMKIT,
        || alloc_range(bench),
        |pfn| bench.free_per_page(pfn).map_err(|e| BenchError::context("free_pages", e)),
        |()| Ok(()),
    )
}

fn batched(bench: &ContigBench) -> StagedContender<'_> {
    StagedContender::new(names::MMKIT, || alloc_range(bench), |pfn| free_batched(bench, pfn), |()| Ok(()))
}

fn frozen(bench: &ContigBench) -> StagedContender<'_> {
    StagedContender::new(
        names::MMKIT,
        || bench.alloc_frozen_range().map_err(|e| BenchError::context("alloc_contig_frozen_range", e)),
        |pfn| bench.free_frozen(pfn).map_err(|e| BenchError::context("free_contig_frozen_range", e)),
        |()| Ok(()),
    )
}

fn owned(bench: &ContigBench) -> StagedContender<'_> {
    StagedContender::new(
        names::MMKIT,
        || bench.alloc_owned_range().map_err(|e| BenchError::context("alloc_contig_block", e)),
        |range| bench.free_owned(range).map_err(|e| BenchError::context("free_contig_block", e)),
        |()| Ok(()),
    )
}

fn alloc(bench: &ContigBench) -> StagedContender<'_> {
    StagedContender::new(names::MMKIT, || Ok(()), |()| alloc_range(bench), |pfn| free_batched(bench, pfn))
}

fn cma(bench: &ContigBench) -> StagedContender<'_> {
    StagedContender::new(
        names::MMKIT,
        || Ok(()),
        |()| bench.cma_alloc().map_err(|e| BenchError::context("cma_alloc", e)),
        |pfn| bench.cma_release(pfn).map_err(|e| BenchError::context("cma_release", e)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_suite_reports_every_case_and_the_seed_comparison() {
        let report = run(&Settings { runs: 1, quick: true }, &mut |_| {}).unwrap();
        let names: Vec<_> = report.cases.iter().map(|c| c.name).collect();
        assert_eq!(names, [PER_PAGE, BATCHED, FROZEN, OWNED, ALLOC, CMA]);
        for c in &report.cases {
            assert_eq!((c.impl_name, c.unit, c.units_per_run), (names::MMKIT, "iteration", 5), "{c:?}");
            assert!(c.median_ns > 0.0, "{c:?}");
        }
        let ratio = report.notes.iter().find(|n| n.starts_with("Before: ")).expect("the before/after line");
        assert!(
            ratio.contains(" usec per iteration / After: ") && ratio.contains("Linux's change: 1406 / 402 usec, 3.5x)")
        );
        assert!(report.notes.iter().any(|n| n.contains("alloc_contig_range") && n.contains("cma_alloc")));
    }
}
