//! Helpers shared by the contiguous-range tests: the allocator's observable
//! state, and a comparison that names the first difference.

use mmkit::Cpus;
use mmkit::{PageAllocator, PageFlags, Pfn, Report};

/// What a caller can see of an allocator.
#[derive(Debug)]
pub struct Observed {
    pub buddyinfo: String,
    pub pagetypeinfo: String,
    zones: Vec<ZoneEssence>,
    pages: Vec<(PageFlags, u32)>,
}

/// A zone's free state and totals. Which path counted a page (buddy or
/// per-CPU list) may differ between equivalent histories; these may not.
type ZoneEssence = (mmkit::procfs::ZoneFreeInfo, u64, [u64; 6], u64, u64, u64, u64);

/// The observable state, per-CPU lists drained first (a contiguous
/// allocation drains them too, busy or not, as Linux does).
pub fn observe(mm: &PageAllocator) -> Observed {
    assert_eq!(Cpus::new(mm).drain_all_pages(), 0);
    let pages = (mm.start_pfn().0..mm.end_pfn().0)
        .map(|p| {
            let flags = mm.page_flags(Pfn(p)).unwrap();
            let refs = if flags.contains(PageFlags::TAIL) { 0 } else { mm.page_count(Pfn(p)).unwrap_or(0) };
            (flags, refs)
        })
        .collect();
    let report = Report::new(mm);
    let zones = report
        .zone_snapshots()
        .into_iter()
        .map(|z| {
            (
                z.free,
                z.free_pages,
                z.free_pages_by_type,
                z.reserved_highatomic,
                z.pcp_pages,
                z.counters.pgalloc_pages + z.pcp.alloc_pages,
                z.counters.pgfree_pages + z.pcp.free_pages,
            )
        })
        .collect();
    Observed { buddyinfo: report.buddyinfo(), pagetypeinfo: report.pagetypeinfo(), zones, pages }
}

/// The first difference between two observations, described, or `None`.
pub fn first_difference(a: &Observed, b: &Observed) -> Option<String> {
    if a.buddyinfo != b.buddyinfo {
        return Some(format!("buddyinfo:\n{}vs\n{}", a.buddyinfo, b.buddyinfo));
    }
    if a.pagetypeinfo != b.pagetypeinfo {
        return Some(format!("pagetypeinfo:\n{}vs\n{}", a.pagetypeinfo, b.pagetypeinfo));
    }
    if a.zones != b.zones {
        return Some(format!("zone snapshots: {:?} vs {:?}", a.zones, b.zones));
    }
    let i = (0..a.pages.len()).find(|&i| a.pages[i] != b.pages[i])?;
    Some(format!("page {i}: {:?} vs {:?}", a.pages[i], b.pages[i]))
}
