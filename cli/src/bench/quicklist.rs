//! Suite `quicklist`: the experiment of Linux's quicklist series ("Quicklists for page table pages", 2007). The raw quicklist hit (take a
//! cached page, held as a `QuickPage` and given back unwritten, so it needs
//! no scan; `mmkit-pfn` is the bare-PFN calls, whose free restores the
//! page's state, one copy of it)
//! against allocating and zeroing a fresh 4 KiB
//! page through mmkit's per-CPU lists and through the heap peers; then a
//! fork/exec-like churn of short-lived address spaces whose page tables come
//! from quicklists or straight from the allocator, reported per level as in
//! the seed (count, total, min/avg/max ns per table allocation).
//!
//! Owns the address-space layout and the loops; timing and output are the
//! harness's. Per-level times use `Instant` around each table allocation,
//! so they include one clock read (its cost is printed in the notes).

use super::harness::{measure, median, BenchError, CaseResult, CaseSpec, Contender, Settings, SuiteReport, MMKIT};
use super::summary::{Figure, Headline, Published, Row};
use super::{Progress, Suite};
use mmkit::Cpus;
use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder, PageAllocator, Pfn};
use mmkit_bench::heap::{BlockLayout, HeapBlock, MiMalloc};
use mmkit_bench::subjects::names;
use mmkit_quicklist::pagetable::{Level, PageTables, TableSource};
use mmkit_quicklist::{QuicklistCpu, QuicklistError, Quicklists};
use std::hint::black_box;
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::Instant;

/// The suite as the registry lists it.
pub const SUITE: Suite = Suite {
    name: "quicklist",
    about: "quicklist hit vs allocate+zero of a 4 KiB page; page-table churn per level with and without quicklists (Linux's quicklist series)",
    run,
    baselines: &[],
    // The change's own comparison: pte_alloc with quicklists against
    // without, which the `pagetable/pte` rows measure.
    headline: Some(Headline {
        mmkit: Row { case: "pagetable/pte", imp: MMKIT },
        peer: Row { case: "pagetable/pte", imp: NO_QUICKLISTS },
        published: Some(Published {
            text: "2.08x",
            figure: Figure::SpeedUp(2.7 / 1.3),
            source: "Quicklists for page table pages V5 (2007): pte_alloc 2.7 -> 1.3 us on average, with and \
                     without quicklists",
        }),
    }),
};

/// mmkit through the shared API (lock per call) rather than a pinned handle.
const MMKIT_SHARED: &str = "mmkit-shared";
/// The pinned handle through the bare-PFN calls, whose free restores the
/// page's state (one copy of the page).
const MMKIT_PFN: &str = "mmkit-pfn";
/// Page tables whose pages come straight from the allocator.
const NO_QUICKLISTS: &str = "mmkit-no-quicklists";

/// Regions of a small process, as (first address, pages): text, data, heap,
/// six shared libraries 2 MiB apart, stack. Each space needs 1 pgd, 3 puds,
/// 3 pmds and 10 ptes.
const LAYOUT: [(u64, u64); 10] = [
    (0x40_0000, 32),
    (0x60_0000, 8),
    (0x100_0000, 64),
    (0x7f00_0000_0000, 8),
    (0x7f00_0020_0000, 8),
    (0x7f00_0040_0000, 8),
    (0x7f00_0060_0000, 8),
    (0x7f00_0080_0000, 8),
    (0x7f00_00a0_0000, 8),
    (0x7fff_ff00_0000, 16),
];

/// Nanoseconds since the first call: the clock page-table times use.
fn now_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

fn real_map(bytes: u64) -> Result<Arc<PageAllocator>, BenchError> {
    MemoryMapBuilder::with_memory(bytes)
        .backing(Backing::RealMemory(HugePages::None))
        .build()
        .map_err(|e| BenchError::context("building the map", e))
        .map(Arc::new)
}

/// Builds and tears down `spaces` address spaces with `LAYOUT`.
fn churn(tables: &PageTables, data: Pfn, spaces: u64) -> Result<(), BenchError> {
    for _ in 0..spaces {
        let mut space = tables.new_address_space().map_err(|e| BenchError::context("new address space", e))?;
        for (base, pages) in LAYOUT {
            for page in 0..pages {
                space.map(base + page * 4096, data).map_err(|e| BenchError::context("map", e))?;
            }
        }
        black_box(space.translate(LAYOUT[2].0));
    }
    Ok(())
}

/// `pairs` quicklist hits through a pinned handle, each page held as a
/// [`QuickPage`](mmkit_quicklist::QuickPage) that is given back unwritten (no scan, no restore): the
/// loop is kept free of the harness's error plumbing so that it measures
/// the quicklist alone.
#[inline(never)]
fn hit_loop(handle: &mut QuicklistCpu<'_>, pairs: u64) -> Result<(), QuicklistError> {
    for _ in 0..pairs {
        let page = handle.alloc_page(0, Gfp::KERNEL, None)?;
        handle.free_quick_page(None, black_box(page))?;
    }
    Ok(())
}

/// The same through the bare-PFN calls, whose free restores the page's
/// state by copying it over the page (the caller's writes are not
/// recorded).
#[inline(never)]
fn pfn_hit_loop(handle: &mut QuicklistCpu<'_>, pairs: u64) -> Result<(), QuicklistError> {
    for _ in 0..pairs {
        let pfn = handle.alloc(0, Gfp::KERNEL, None)?;
        handle.free_page(0, None, black_box(pfn))?;
    }
    Ok(())
}

/// The hit path and allocate+zero cases.
fn hit_cases(settings: &Settings, progress: &mut Progress<'_>) -> Result<Vec<CaseResult>, BenchError> {
    let mm = real_map(settings.pick(256 << 20, 32 << 20))?;
    let ql = Quicklists::new(Arc::clone(&mm), 1).map_err(|e| BenchError::context("quicklists", e))?;
    // One page made and cached on every CPU, so each case below only hits.
    for cpu in 0..Cpus::new(&mm).nr_cpus() {
        let mut handle = ql.pin_cpu(cpu).map_err(|e| BenchError::context("pin", e))?;
        let pfn = handle.alloc(0, Gfp::KERNEL, None).map_err(|e| BenchError::context("quicklist_alloc", e))?;
        handle.free_page(0, None, pfn).map_err(|e| BenchError::context("quicklist_free", e))?;
    }
    let ops: u64 = 4096;
    let iters = settings.pick(256, 4);
    let spec = |name| CaseSpec { name, unit: "op", units_per_iter: ops, iters, warmup_iters: (iters / 8).max(1) };
    let mut cases = Vec::new();

    progress("quicklist/hit_alloc_free");
    let mut results = {
        // A pinned handle takes no lock; it is dropped before the shared
        // API runs, which would otherwise bypass a pinned CPU's lists.
        let handle = std::cell::RefCell::new(ql.pin_cpu(0).map_err(|e| BenchError::context("pin", e))?);
        let pinned = Contender::new(MMKIT, |n| {
            hit_loop(&mut handle.borrow_mut(), n * ops).map_err(|e| BenchError::context("hit", e))
        });
        let pfn = Contender::new(MMKIT_PFN, |n| {
            pfn_hit_loop(&mut handle.borrow_mut(), n * ops).map_err(|e| BenchError::context("hit", e))
        });
        let mut contenders = [pinned, pfn];
        let results = measure(SUITE.name, spec("quicklist/hit_alloc_free"), &mut contenders, settings.runs);
        drop(contenders);
        results?
    };
    let shared = Contender::new(MMKIT_SHARED, |n| {
        for _ in 0..n * ops {
            let page = ql.alloc_page(0, Gfp::KERNEL, None).map_err(|e| BenchError::context("alloc", e))?;
            ql.free_quick_page(None, black_box(page)).map_err(|e| BenchError::context("free", e))?;
        }
        Ok(())
    });
    results.extend(measure(SUITE.name, spec("quicklist/hit_alloc_free"), &mut [shared], settings.runs)?);
    super::harness::fill_ratios(&mut results);
    cases.extend(results);

    progress("alloc_zero_4k_free");
    let layout = BlockLayout::new(4096, 4096).ok_or_else(|| BenchError("4 KiB layout".into()))?;
    let mmkit = Contender::new(MMKIT, |n| {
        for _ in 0..n * ops {
            let pfn = mm.alloc_pages(Gfp::KERNEL | Gfp::ZERO, 0).map_err(|e| BenchError::context("alloc", e))?;
            mm.free_pages(black_box(pfn), 0).map_err(|e| BenchError::context("free", e))?;
        }
        Ok(())
    });
    let mimalloc = Contender::new(names::MIMALLOC, |n| {
        for _ in 0..n * ops {
            let block = HeapBlock::<MiMalloc>::alloc_zeroed(layout).ok_or_else(|| BenchError("oom".into()))?;
            drop(black_box(block));
        }
        Ok(())
    });
    let system = Contender::new(names::SYSTEM, |n| {
        for _ in 0..n * ops {
            let block =
                HeapBlock::<std::alloc::System>::alloc_zeroed(layout).ok_or_else(|| BenchError("oom".into()))?;
            drop(black_box(block));
        }
        Ok(())
    });
    cases.extend(measure(SUITE.name, spec("alloc_zero_4k_free"), &mut [mmkit, mimalloc, system], settings.runs)?);
    drop(ql);
    Ok(cases)
}

/// Per-level rows of one page-table mode: the median over runs of the mean
/// time per table allocation, with the seed's figures in `extra`.
fn level_rows(impl_name: &'static str, runs: &[[mmkit_quicklist::pagetable::LevelStats; 4]]) -> Vec<CaseResult> {
    Level::ALL
        .iter()
        .map(|&level| {
            let per_run: Vec<_> = runs.iter().map(|r| r[level.index()]).collect();
            let mut avgs: Vec<f64> = per_run.iter().map(|s| s.avg_ns()).collect();
            let (min_run, max_run) = avgs.iter().fold((f64::MAX, 0.0f64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
            let median_run = median(&mut avgs);
            let count = per_run.first().map_or(0, |s| s.count);
            let total_ns: u64 = per_run.iter().map(|s| s.total_ns).sum::<u64>() / per_run.len().max(1) as u64;
            let min_ns = per_run.iter().map(|s| s.min_ns).min().unwrap_or(0);
            let max_ns = per_run.iter().map(|s| s.max_ns).max().unwrap_or(0);
            CaseResult {
                suite: SUITE.name,
                name: level_case(level),
                impl_name,
                unit: "table",
                median_ns: median_run,
                min_ns: min_run,
                max_ns: max_run,
                runs: runs.len(),
                units_per_run: count,
                ratio_vs_mmkit: None,
                baseline: None,
                ratio_vs_baseline: None,
                extra: vec![
                    ("count", count as f64),
                    ("total_ns", total_ns as f64),
                    ("alloc_min_ns", min_ns as f64),
                    ("alloc_avg_ns", median_run),
                    ("alloc_max_ns", max_ns as f64),
                ],
            }
        })
        .collect()
}

fn level_case(level: Level) -> &'static str {
    match level {
        Level::Pgd => "pagetable/pgd",
        Level::Pud => "pagetable/pud",
        Level::Pmd => "pagetable/pmd",
        Level::Pte => "pagetable/pte",
    }
}

/// The churn, timed as a whole (`pagetable/churn`, per address space) and
/// per level, for both table sources.
fn pagetable_cases(settings: &Settings, progress: &mut Progress<'_>) -> Result<Vec<CaseResult>, BenchError> {
    let mm = real_map(settings.pick(256 << 20, 32 << 20))?;
    let data = mm.alloc_pages(Gfp::HIGHUSER_MOVABLE, 0).map_err(|e| BenchError::context("data page", e))?;
    let spaces: u64 = settings.pick(2000, 20);
    let with = PageTables::new(Arc::clone(&mm), TableSource::Quicklists)
        .map_err(|e| BenchError::context("page tables", e))?
        .with_clock(now_ns);
    let without = PageTables::new(Arc::clone(&mm), TableSource::Allocator)
        .map_err(|e| BenchError::context("page tables", e))?
        .with_clock(now_ns);
    let mut cases = Vec::new();

    progress("pagetable/churn");
    let spec = CaseSpec { name: "pagetable/churn", unit: "space", units_per_iter: spaces, iters: 1, warmup_iters: 1 };
    let mut contenders = [
        Contender::new(MMKIT, |n| churn(&with, data, n * spaces)),
        Contender::new(NO_QUICKLISTS, |n| churn(&without, data, n * spaces)),
    ];
    cases.extend(measure(SUITE.name, spec, &mut contenders, settings.runs)?);
    drop(contenders);

    for (tables, impl_name) in [(&with, MMKIT), (&without, NO_QUICKLISTS)] {
        progress(&format!("pagetable/<level> ({impl_name})"));
        let mut runs = Vec::new();
        for _ in 0..settings.runs.max(1) {
            tables.reset_stats();
            churn(tables, data, spaces)?;
            runs.push(Level::ALL.map(|level| tables.level_stats(level)));
        }
        cases.extend(level_rows(impl_name, &runs));
    }
    super::harness::fill_ratios(&mut cases);
    drop((with, without));
    mm.free_pages(data, 0).map_err(|e| BenchError::context("data page", e))?;
    Ok(cases)
}

/// The cost of one `now_ns` call, the floor of every per-level time.
fn clock_overhead_ns() -> f64 {
    let mut samples: Vec<f64> = (0..21)
        .map(|_| {
            let start = now_ns();
            for _ in 0..1000 {
                black_box(now_ns());
            }
            (now_ns() - start) as f64 / 1000.0
        })
        .collect();
    median(&mut samples)
}

fn run(settings: &Settings, progress: &mut Progress<'_>) -> Result<SuiteReport, BenchError> {
    let mut cases = hit_cases(settings, progress)?;
    cases.extend(pagetable_cases(settings, progress)?);
    let find = |name: &str, imp: &str| cases.iter().find(|c| c.name == name && c.impl_name == imp);
    let mut table = String::from("quicklist series layout, per table allocation (count  total  (min/avg/max)):");
    for (impl_name, label) in [(NO_QUICKLISTS, "no quicklist"), (MMKIT, "quicklist")] {
        table.push_str(&format!("\n  {label}"));
        for level in Level::ALL {
            if let Some(c) = find(level_case(level), impl_name) {
                let x = |key: &str| c.extra.iter().find(|(k, _)| *k == key).map_or(0.0, |(_, v)| *v);
                table.push_str(&format!(
                    "\n    {}_alloc {:>7} {:>8.2}ms ({:.0}ns/{:.0}ns/{:.1}us)",
                    level.name(),
                    x("count"),
                    x("total_ns") / 1e6,
                    x("alloc_min_ns"),
                    x("alloc_avg_ns"),
                    x("alloc_max_ns") / 1e3
                ));
            }
        }
    }
    let hit = find("quicklist/hit_alloc_free", MMKIT).map_or(f64::NAN, |c| c.median_ns);
    let zero = find("alloc_zero_4k_free", MMKIT).map_or(f64::NAN, |c| c.median_ns);
    let notes = vec![
        table,
        format!(
            "quicklist hit (pinned) {hit:.1} ns vs mmkit allocate+zero+free {zero:.1} ns: {:.1}x faster",
            zero / hit
        ),
        format!(
            "Per-level times bracket each table allocation with a clock read costing {:.1} ns here; \
             the series used the TSC (Linux, 2007: pte_alloc 2.7 us avg without quicklists, 1.3 us with).",
            clock_overhead_ns()
        ),
        format!(
            "pagetable/churn: per address space, {} pages mapped in {} regions, then torn down; the \
             per-level rows count one run of the churn.",
            LAYOUT.iter().map(|r| r.1).sum::<u64>(),
            LAYOUT.len()
        ),
    ];
    let description = "quicklist hit path (pinned handle and shared API) vs allocate+zero of 4 KiB; \
                       page-table churn with and without quicklists, real memory"
        .to_string();
    Ok(SuiteReport { suite: SUITE.name, description, cases, notes })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_suite_reports_the_issue_case_names() {
        let report = run(&Settings { runs: 1, quick: true }, &mut |_| {}).unwrap();
        for name in ["quicklist/hit_alloc_free", "alloc_zero_4k_free", "pagetable/churn"] {
            assert!(report.cases.iter().any(|c| c.name == name && c.impl_name == MMKIT), "{name} missing");
        }
        for level in Level::ALL {
            let row = report
                .cases
                .iter()
                .find(|c| c.name == level_case(level) && c.impl_name == MMKIT)
                .unwrap_or_else(|| panic!("{} missing", level.name()));
            let count = row.extra.iter().find(|(k, _)| *k == "count").unwrap().1;
            // 20 spaces; quicklists hit after the first, so counts are the layout's.
            let per_space = match level {
                Level::Pgd => 1.0,
                Level::Pud | Level::Pmd => 3.0,
                Level::Pte => 10.0,
            };
            assert_eq!(count, 20.0 * per_space, "{}", level.name());
        }
        assert!(report.notes[0].contains("pte_alloc"));
    }
}
