//! The placement policy a map is built with: which free block of a free
//! list serves a request, how large the per-CPU lists may grow, and how
//! compaction runs. A plain configuration value; the zone layer
//! (`zone::placement`), the per-CPU layer and compaction carry it out.

/// Which free block a request gets among those of the right order and
/// migratetype, with the per-CPU list sizing and the compaction that go
/// with it. Every policy is a valid buddy allocator (same splits, merges,
/// fallbacks and invariants). `zone::placement`'s module doc has the
/// measurements behind each.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum PlacementPolicy {
    /// Linux's choice: the head of the free list, i.e. roughly the most
    /// recently freed block (`__rmqueue_smallest` takes
    /// `get_page_from_free_area`'s first entry); per-CPU lists auto-tuned
    /// up to an eighth of the zone; Linux's compaction scanners and its
    /// default `vm.compaction_proactiveness` of 20. Kept as the baseline.
    Linux,
    /// Lowest PFN first for every request and every fallback, as an
    /// address-ordered buddy allocator does: long-lived pages collect at
    /// the bottom of the zone and the top stays in whole free blocks.
    Addr,
    /// Movable requests take the lowest PFN, unmovable and reclaimable ones
    /// the highest (their own pageblocks first, then claiming from the top
    /// of the zone), so the two populations grow from opposite ends and
    /// never interleave; free memory stays one run in between.
    TwoEnds,
    /// Linux's choice of block (the list head, no address index) and
    /// Linux's per-CPU lists, with sparsest-first compaction at fine
    /// proactive marks. The default:
    /// against `buddy_system_allocator` it keeps the order-9 unusable
    /// index lower on every recorded workload but `gittar`, and replays
    /// somewhat slower than Linux's placement (`mmkit replay --compare`;
    /// `docs/perf-log/2026-11.md`, "replay — placement and compaction").
    #[default]
    Lean,
    /// `Lean` with per-CPU lists for movable pages only: unmovable and
    /// reclaimable requests and frees go straight to the buddy lists (in
    /// Linux every migratetype of `MIGRATE_PCPTYPES` has lists). Where
    /// kernel pages are freed on one CPU and allocated on another (pipe
    /// buffers, `gittar`), Linux's lists park the freed ones on the freeing
    /// CPU while the allocating CPU claims new pageblocks; here every free
    /// is a hole the next unmovable request fills (`rmqueue_smallest` takes
    /// the smallest free block). Kept apart from `Lean` because every
    /// unmovable request then takes the zone lock, and only `gittar` could
    /// be measured.
    LeanMovablePcp,
}

/// Which pass compaction runs (`Tuning::compact_zone`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CompactionMode {
    /// Linux's two scanners: movable pages from the bottom of the zone
    /// into holes near its top (`mm/compaction.c`).
    Linear,
    /// The sparsest movable pageblocks are emptied into the holes of the
    /// densest ones, and only when those have room for all of them.
    SparsestFirst,
}

impl PlacementPolicy {
    /// Every policy, in the order reports list them.
    pub const ALL: [PlacementPolicy; 5] = [
        PlacementPolicy::Linux,
        PlacementPolicy::Addr,
        PlacementPolicy::TwoEnds,
        PlacementPolicy::Lean,
        PlacementPolicy::LeanMovablePcp,
    ];

    /// Name on command lines and in reports.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            PlacementPolicy::Linux => "linux",
            PlacementPolicy::Addr => "addr",
            PlacementPolicy::TwoEnds => "two-ends",
            PlacementPolicy::Lean => "lean",
            PlacementPolicy::LeanMovablePcp => "lean-movable-pcp",
        }
    }

    /// The policy called `name`, if any.
    #[must_use]
    pub fn from_name(name: &str) -> Option<PlacementPolicy> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Whether the policy needs free blocks ordered by address (an index
    /// beside the free lists).
    #[must_use]
    pub const fn address_ordered(self) -> bool {
        matches!(self, PlacementPolicy::Addr | PlacementPolicy::TwoEnds)
    }

    /// Whether per-CPU lists keep their smallest `high` (the low-watermark
    /// share, at least four batches) instead of auto-tuning up to an eighth
    /// of the zone, unless `percpu_pagelist_high_fraction` is set.
    #[must_use]
    pub const fn keeps_pcp_small(self) -> bool {
        self.address_ordered()
    }

    /// Whether only movable requests and frees use the per-CPU lists (with
    /// grouping by mobility on; with it off every request is unmovable and
    /// all use them).
    #[must_use]
    pub const fn pcp_movable_only(self) -> bool {
        matches!(self, PlacementPolicy::LeanMovablePcp)
    }

    /// Whether a freed block whose buddy is free goes straight to the buddy
    /// lists (to merge) instead of onto a per-CPU list.
    #[must_use]
    pub const fn merges_before_caching(self) -> bool {
        self.address_ordered()
    }

    /// How compaction runs under this policy: Linux's scanners for Linux's
    /// placement; sparsest-first for the others (under the address-ordered
    /// ones the lowest pageblocks, where Linux's migrate scanner starts,
    /// are the densest).
    #[must_use]
    pub const fn compaction(self) -> CompactionMode {
        match self {
            PlacementPolicy::Linux => CompactionMode::Linear,
            _ => CompactionMode::SparsestFirst,
        }
    }

    /// Proactive compaction's marks, in thousandths of the fragmentation
    /// score (the order-9 unusable free space index): a round starts above
    /// the first and stops at the second. Linux's are whole points from
    /// `vm.compaction_proactiveness` (default 20: 900 and 800, i.e. it
    /// waits until 90 % of free memory is in blocks below order 9); the
    /// other policies start above 1.5 % and stop at 0.5 %, since their
    /// compaction only moves pages that empty a whole pageblock.
    #[must_use]
    pub const fn proactive_marks(self) -> (u32, u32) {
        match self {
            PlacementPolicy::Linux => (900, 800),
            _ => (15, 5),
        }
    }

    /// Whether a request of migratetype index `mt` (0 unmovable, 1 movable,
    /// 2 reclaimable, ...) is served from the top of the zone down.
    #[must_use]
    pub const fn top_down(self, mt: usize) -> bool {
        matches!(self, PlacementPolicy::TwoEnds) && mt != 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for p in PlacementPolicy::ALL {
            assert_eq!(PlacementPolicy::from_name(p.name()), Some(p));
        }
        assert_eq!(PlacementPolicy::from_name("nope"), None);
    }

    #[test]
    fn only_two_ends_goes_top_down_and_never_for_movable() {
        assert!(PlacementPolicy::TwoEnds.top_down(0));
        assert!(!PlacementPolicy::TwoEnds.top_down(1));
        assert!(!PlacementPolicy::Addr.top_down(0));
        assert!(!PlacementPolicy::Lean.top_down(0));
        assert!(!PlacementPolicy::Linux.address_ordered());
        assert!(!PlacementPolicy::Lean.address_ordered());
    }

    #[test]
    fn linux_keeps_every_linux_default() {
        let l = PlacementPolicy::Linux;
        assert!(!l.keeps_pcp_small() && !l.merges_before_caching());
        assert_eq!(l.compaction(), CompactionMode::Linear);
        assert_eq!(l.proactive_marks(), (900, 800), "proactiveness 20");
        let lean = PlacementPolicy::Lean;
        assert!(!lean.keeps_pcp_small() && !lean.merges_before_caching(), "lean keeps Linux's lists");
        for p in PlacementPolicy::ALL {
            assert_eq!(p.pcp_movable_only(), p == PlacementPolicy::LeanMovablePcp);
        }
        for p in
            [PlacementPolicy::Addr, PlacementPolicy::TwoEnds, PlacementPolicy::Lean, PlacementPolicy::LeanMovablePcp]
        {
            assert_eq!(p.merges_before_caching(), p.address_ordered());
            assert_eq!(p.keeps_pcp_small(), p.address_ordered());
            assert_eq!(p.compaction(), CompactionMode::SparsestFirst);
            let (start, stop) = p.proactive_marks();
            assert!(stop < start);
        }
    }
}
