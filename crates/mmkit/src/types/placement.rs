//! The placement policy a map is built with: which free block of a free
//! list serves a request. A plain configuration value; the zone layer
//! (`zone::placement`) carries it out.

/// Which free block a request gets among those of the right order and
/// migratetype. Every policy is a valid buddy allocator (same splits,
/// merges, fallbacks and invariants); only the choice of block differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum PlacementPolicy {
    /// Linux's choice: the head of the free list, i.e. roughly the most
    /// recently freed block (`__rmqueue_smallest` takes
    /// `get_page_from_free_area`'s first entry). Kept as the baseline.
    Linux,
    /// Lowest PFN first for every request and every fallback, as an
    /// address-ordered buddy allocator does: long-lived pages collect at
    /// the bottom of the zone and the top stays in whole free blocks.
    Addr,
    /// Movable requests take the lowest PFN, unmovable and reclaimable ones
    /// the highest (their own pageblocks first, then claiming from the top
    /// of the zone), so the two populations grow from opposite ends and
    /// never interleave; free memory stays one run in between.
    #[default]
    TwoEnds,
}

impl PlacementPolicy {
    /// Every policy, in the order reports list them.
    pub const ALL: [PlacementPolicy; 3] = [PlacementPolicy::Linux, PlacementPolicy::Addr, PlacementPolicy::TwoEnds];

    /// Name on command lines and in reports.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            PlacementPolicy::Linux => "linux",
            PlacementPolicy::Addr => "addr",
            PlacementPolicy::TwoEnds => "two-ends",
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
        !matches!(self, PlacementPolicy::Linux)
    }

    /// Whether per-CPU lists keep their smallest `high` (the low-watermark
    /// share, at least four batches) instead of auto-tuning up to an eighth
    /// of the zone, unless `percpu_pagelist_high_fraction` is set.
    #[must_use]
    pub const fn keeps_pcp_small(self) -> bool {
        self.address_ordered()
    }

    /// Whether a freed block whose buddy is free goes straight to the buddy
    /// lists (to merge) instead of onto a per-CPU list.
    #[must_use]
    pub const fn merges_before_caching(self) -> bool {
        self.address_ordered()
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
        assert!(!PlacementPolicy::Linux.address_ordered());
    }
}
