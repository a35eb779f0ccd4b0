//! `mmkit info`: build a metadata-only memory map of a given size and print
//! what a freshly booted Linux machine of that shape would show in `/proc`.
//!
//! Owns the command's arguments ([`InfoArgs`], parsed by clap), the layout
//! of several nodes on one physical address line and the zone table (a
//! condensed `/proc/zoneinfo`). Must not format the `/proc` texts
//! themselves: they come from the library (`buddyinfo`, `pagetypeinfo`,
//! `vmstat`); exit codes are `main`'s.

use crate::size::{self, format_size};
use clap::Args;
use mmkit::gfp::Watermark;
use mmkit::Tuning;
use mmkit::{MemoryMapBuilder, PageAllocator, Report, ZoneType};
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// Bytes of descriptor memory mmkit keeps per page (its `PageDesc` is 16
/// bytes); used only to refuse maps that cannot fit in this machine's RAM.
const DESCRIPTOR_BYTES_PER_PAGE: u64 = 16;

/// Page size of the PC layout `MemoryMapBuilder::with_memory` builds.
const PAGE_SIZE: u64 = 4096;

/// `mmkit info`'s arguments, exactly as the command line takes them.
#[derive(Clone, Copy, Debug, Args)]
pub struct InfoArgs {
    /// Total memory, split evenly over the nodes: bytes or K/M/G/T/P
    /// (powers of 1024), e.g. 4G, 512M, 1T.
    #[arg(
        short,
        long,
        value_name = "SIZE",
        default_value = "4G",
        value_parser = size::parse_size
    )]
    pub memory: u64,
    /// Number of NUMA nodes, laid out one after another in physical memory.
    #[arg(
        short,
        long,
        value_name = "N",
        default_value_t = 1,
        value_parser = clap::value_parser!(u16).range(1..=mmkit::MAX_NUMNODES as i64)
    )]
    pub nodes: u16,
}

/// A request that cannot become a map (reported with exit code 2).
#[derive(Debug)]
pub struct InfoError(pub String);

/// Builds the map `args` describes: node 0 from PFN 0, each further node on
/// the PFNs right after the previous one, every node laid out like a PC
/// (DMA below 16 MiB, DMA32 below 4 GiB, NORMAL above).
///
/// # Errors
/// [`InfoError`] when the size is not at least one page per node, the
/// descriptors would not fit in available RAM, or the library refuses the map.
pub fn build_map(args: InfoArgs) -> Result<(PageAllocator, Duration), InfoError> {
    let nodes = u64::from(args.nodes.max(1));
    let pages_per_node = args.memory / PAGE_SIZE / nodes;
    if pages_per_node == 0 {
        return Err(InfoError(format!(
            "{} is less than one {PAGE_SIZE}-byte page per node ({nodes} nodes)",
            format_size(args.memory)
        )));
    }
    let total_pages = pages_per_node * nodes;
    let descriptors = total_pages.saturating_mul(DESCRIPTOR_BYTES_PER_PAGE);
    if let Some(available) = mem_available_bytes() {
        if descriptors > available / 2 {
            let most = available / 2 / DESCRIPTOR_BYTES_PER_PAGE * PAGE_SIZE;
            return Err(InfoError(format!(
                "{} of memory needs about {} of page descriptors, more than half of the {} this machine has \
                 available (the most it takes); --memory up to about {} fits",
                format_size(args.memory),
                human(descriptors),
                human(available),
                human(most)
            )));
        }
    }
    let node_bytes = pages_per_node * PAGE_SIZE;
    let mut builder = MemoryMapBuilder::with_memory(node_bytes);
    for nid in 1..nodes {
        builder = builder.add_pc_node(nid as usize, nid * pages_per_node, node_bytes);
    }
    let start = Instant::now();
    let mm = builder.build().map_err(|e| InfoError(format!("cannot build the map: {e}")))?;
    Ok((mm, start.elapsed()))
}

/// Runs `mmkit info` and returns the report text.
///
/// # Errors
/// As [`build_map`].
pub fn run(args: InfoArgs) -> Result<String, InfoError> {
    let (mm, build_time) = build_map(args)?;
    Ok(report(&mm, args, build_time))
}

/// The full report: summary, buddyinfo, pagetypeinfo, zones, vmstat.
pub fn report(mm: &PageAllocator, args: InfoArgs, build_time: Duration) -> String {
    let geo = mm.geometry();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "mmkit info: {} on {} node(s), metadata-only, {} pages, MAX_PAGE_ORDER {}, \
         pageblock order {}, section order {}",
        format_size((mm.end_pfn().0 - mm.start_pfn().0) * geo.page_size()),
        mm.nr_nodes(),
        format_size(geo.page_size()),
        geo.max_page_order,
        geo.pageblock_order,
        geo.section_order,
    );
    let nodes = u64::from(args.nodes.max(1));
    if args.memory / PAGE_SIZE / nodes * PAGE_SIZE * nodes != args.memory {
        let _ = writeln!(out, "(asked for {}; rounded down to whole pages per node)", format_size(args.memory));
    }
    let _ = writeln!(
        out,
        "PFNs {}..{}, {} free pages, min_free_kbytes {}",
        mm.start_pfn(),
        mm.end_pfn(),
        Report::new(mm).nr_free_pages(),
        Tuning::new(mm).min_free_kbytes()
    );
    let _ = writeln!(out, "build time: {:.3} ms", build_time.as_secs_f64() * 1e3);
    let report = Report::new(mm);
    section(&mut out, "/proc/buddyinfo", &report.buddyinfo());
    section(&mut out, "/proc/pagetypeinfo", &report.pagetypeinfo());
    section(&mut out, "zones", &zone_table(mm));
    section(&mut out, "/proc/vmstat", &report.vmstat());
    out
}

fn section(out: &mut String, title: &str, body: &str) {
    let _ = writeln!(out, "\n== {title} ==");
    out.push_str(body);
    if !body.ends_with('\n') {
        out.push('\n');
    }
}

/// One block per zone in `/proc/zoneinfo`'s vocabulary.
fn zone_table(mm: &PageAllocator) -> String {
    let mut out = String::new();
    let page_size = mm.geometry().page_size();
    for zone in mm.zones() {
        let span = zone.span();
        let spanned = span.end - span.start;
        let _ = writeln!(out, "Node {}, zone {:>8}", zone.nid(), zone.zone_type().name());
        let _ = writeln!(out, "  pages free     {}", zone.free_pages());
        for (name, mark) in [("min", Watermark::Min), ("low", Watermark::Low), ("high", Watermark::High)] {
            let _ = writeln!(out, "        {name:<8} {}", zone.watermark(mark));
        }
        let _ = writeln!(
            out,
            "        spanned  {spanned} (PFN {:#x}..{:#x}, {})",
            span.start,
            span.end,
            format_size(spanned * page_size)
        );
        let _ = writeln!(out, "        present  {}", zone.present_pages());
        let _ = writeln!(out, "        managed  {}", zone.managed_pages());
        let reserve: Vec<String> = ZoneType::ALL.iter().map(|&zt| zone.lowmem_reserve(zt).to_string()).collect();
        let _ = writeln!(
            out,
            "        lowmem_reserve ({})  [for requests up to {}]",
            reserve.join(", "),
            ZoneType::ALL.map(|z| z.name()).join(", ")
        );
    }
    out
}

/// `MemAvailable` from `/proc/meminfo`, when readable.
fn mem_available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// A byte count rounded to one decimal in the largest fitting unit.
fn human(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_nodes_are_consecutive() {
        let args = InfoArgs { memory: 256 << 20, nodes: 2 };
        let (mm, _) = build_map(args).unwrap();
        assert_eq!(mm.nr_nodes(), 2);
        let spans: Vec<_> = mm.zones().iter().map(|z| (z.nid(), z.span())).collect();
        // Node 0: DMA 1..4096, DMA32 4096..32768; node 1: DMA32 32768..65536.
        assert_eq!(spans, vec![(0, 1..4096), (0, 4096..32768), (1, 32768..65536)]);
    }

    #[test]
    fn report_has_every_section() {
        let args = InfoArgs { memory: 64 << 20, nodes: 1 };
        let text = run(args).unwrap();
        for heading in [
            "== /proc/buddyinfo ==",
            "== /proc/pagetypeinfo ==",
            "== zones ==",
            "== /proc/vmstat ==",
            "build time:",
            "lowmem_reserve (",
        ] {
            assert!(text.contains(heading), "missing {heading}:\n{text}");
        }
        assert!(text.contains("Node 0, zone      DMA"));
    }

    #[test]
    fn too_small_is_an_error() {
        let args = InfoArgs { memory: 4096, nodes: 2 };
        assert!(build_map(args).is_err());
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(3 << 30), "3.0 GiB");
    }
}
