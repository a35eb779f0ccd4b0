//! Allocation of one given block: [`PageAllocator::alloc_pages_at`].
//!
//! Owns taking a caller-chosen, naturally aligned block out of the buddy
//! lists (splitting the free block that contains it), the pageblock type
//! decision that goes with it, and handing the block out like any other
//! allocation. Trace replay uses it to put every page exactly where the
//! traced kernel put it. It does not pick blocks, check watermarks or enter
//! the slow path; list edits go through `buddy`, the claim rule is
//! `fallback`'s.
#![deny(unsafe_code)]

use crate::mem::page::PageIdx;
use crate::types::gfp::{Gfp, MigrateType};
use crate::zone::buddy::set_range_type;
use crate::zone::fallback::claim_pageblock;
use crate::{AllocError, PageAllocator, Pfn};

impl PageAllocator {
    /// Allocates exactly the block of 2^`order` pages starting at `pfn`, as
    /// if the allocator had chosen it: the free block containing it is
    /// split, the rest stays free, and the block comes back prepared like
    /// one from [`alloc_pages`](Self::alloc_pages) (refcount 1, compound
    /// with `Gfp::COMP`, zeroed with `Gfp::ZERO` on real memory). Free it
    /// with [`free_pages`](Self::free_pages).
    ///
    /// Watermarks are not checked: the caller has decided where the block
    /// goes. Pages cached on per-CPU lists are drained back to the buddy
    /// when the block needs them (one `drain_all_pages`, then one retry).
    ///
    /// Pageblock types follow the fallback rules of a normal allocation of
    /// the request's migratetype `mt` (from `gfp`; unmovable when grouping by
    /// mobility is off): a block of at least pageblock order gives every
    /// pageblock it covers type `mt`, as a fallback that takes a whole block
    /// does; a smaller block in a pageblock of another per-CPU type claims
    /// that pageblock when at least half of it is free or compatible (or
    /// grouping is off), and otherwise leaves it mixed, as a steal does.
    /// Highatomic and CMA pageblocks keep their type.
    ///
    /// ```
    /// use mmkit::{AllocError, Gfp, MemoryMapBuilder, Pfn, Report};
    /// let mm = MemoryMapBuilder::with_memory(64 << 20).build().unwrap();
    /// let pfn = mm.alloc_pages_at(Pfn(0x2000), 3, Gfp::KERNEL).unwrap();
    /// assert_eq!(pfn, Pfn(0x2000));
    /// assert_eq!(mm.alloc_pages_at(Pfn(0x2004), 0, Gfp::KERNEL), Err(AllocError::NotFree(Pfn(0x2004))));
    /// mm.free_pages(pfn, 3).unwrap();
    /// Report::new(&mm).check_invariants().unwrap();
    /// ```
    ///
    /// # Errors
    /// [`AllocError::OrderTooLarge`]; [`AllocError::InvalidGfp`] for
    /// contradictory zone bits; [`AllocError::BadBlock`] when the block is
    /// misaligned, outside the map or not inside one zone;
    /// [`AllocError::NotFree`] with the first page that is not free. On
    /// error nothing changed (except per-CPU lists drained).
    pub fn alloc_pages_at(&self, pfn: Pfn, order: u32, gfp: Gfp) -> Result<Pfn, AllocError> {
        let max = self.mem.geometry.merge_order();
        if order > max {
            return Err(AllocError::OrderTooLarge { order, max });
        }
        crate::types::gfp::gfp_zone(gfp).map_err(|_| AllocError::InvalidGfp(gfp))?;
        let bad = AllocError::BadBlock { pfn, order };
        let size = 1u64 << order;
        if pfn.0 % size != 0 {
            return Err(bad);
        }
        let idx = self.pfn_to_idx(pfn).ok_or(bad)?;
        let last = self.pfn_to_idx(Pfn(pfn.0.checked_add(size - 1).ok_or(bad)?)).ok_or(bad)?;
        let zi = self.zone_index_of(idx).ok_or(bad)?;
        let zone = &self.zones[zi];
        if last >= zone.end_idx || idx < zone.start_idx {
            return Err(bad);
        }
        let mt = self.request_migratetype(gfp);
        match self.take_block_at(zi, idx, order, mt) {
            // Only pages cached on per-CPU lists can be won back by a drain.
            Err(_) if self.pcp.enabled && self.nr_pcp_pages() > 0 => {
                crate::Cpus::new(self).drain_all_pages();
                self.take_block_at(zi, idx, order, mt)?;
            }
            other => other?,
        }
        self.prep_new_page(idx, order, gfp, mt, false);
        Ok(pfn)
    }

    /// Under the zone lock: checks every page of the block is free, fixes
    /// pageblock types, takes the block off the lists.
    fn take_block_at(&self, zi: usize, idx: PageIdx, order: u32, mt: MigrateType) -> Result<(), AllocError> {
        let zone = &self.zones[zi];
        let cx = zone.cx(&self.mem);
        let end = idx + (1 << order);
        let mut state = zone.state.lock();
        let mut at = idx;
        while at < end {
            let not_free = AllocError::NotFree(self.idx_to_pfn(at));
            if self.mem.blocks.get(at) == MigrateType::Isolate {
                return Err(not_free);
            }
            let (head, block_order) = state.area.enclosing_free_block(cx, at).ok_or(not_free)?;
            at = head + (1 << block_order);
        }
        let pb_order = self.mem.geometry.pageblock_order;
        if order >= pb_order {
            // Each pageblock on its own: a CMA or highatomic one keeps its type.
            for pb in (idx..end).step_by(1 << pb_order) {
                let block_type = self.mem.blocks.get(pb);
                if block_type != mt && block_type.is_pcp_type() {
                    set_range_type(cx, pb, pb_order, mt);
                    state.counters.pageblocks_claimed += 1;
                }
            }
        } else {
            let block_type = self.mem.blocks.get(idx);
            if block_type != mt && block_type.is_pcp_type() {
                let pb_start = idx & !((1u32 << pb_order) - 1);
                state.area.split_to_pageblocks(cx, pb_start);
                claim_pageblock(zone, &mut state, cx, pb_start, mt, block_type);
            }
        }
        state.area.take_range(cx, idx, end);
        state.counters.pgalloc_blocks += 1;
        state.counters.pgalloc_pages += 1 << order;
        zone.publish(&state);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use crate::{AllocError, Gfp, MemoryMapBuilder, MigrateType, Pfn, Report, ZoneType};

    fn map(pcp: bool) -> crate::PageAllocator {
        MemoryMapBuilder::new().zone(0, ZoneType::Normal, 0x1000..0x3000).per_cpu_lists(pcp).build().unwrap()
    }

    #[test]
    fn takes_exactly_the_block_and_leaves_the_rest_free() {
        let mm = map(false);
        let free = crate::Report::new(&mm).nr_free_pages();
        assert_eq!(
            mm.alloc_pages_at(Pfn(0x1236), 2, Gfp::KERNEL),
            Err(AllocError::BadBlock { pfn: Pfn(0x1236), order: 2 })
        );
        assert_eq!(mm.alloc_pages_at(Pfn(0x1238), 2, Gfp::KERNEL | Gfp::COMP), Ok(Pfn(0x1238)));
        assert_eq!(crate::Report::new(&mm).nr_free_pages(), free - 4);
        assert_eq!(mm.compound_head(Pfn(0x123b)), Ok(Pfn(0x1238)));
        assert_eq!(mm.alloc_pages_at(Pfn(0x1239), 0, Gfp::KERNEL), Err(AllocError::NotFree(Pfn(0x1239))));
        assert_eq!(mm.alloc_pages_at(Pfn(0x1230), 4, Gfp::KERNEL), Err(AllocError::NotFree(Pfn(0x1238))));
        let report = Report::new(&mm);
        report.check_invariants().unwrap();
        mm.free_pages(Pfn(0x1238), 2).unwrap();
        assert_eq!(crate::Report::new(&mm).nr_free_pages(), free);
        report.check_invariants().unwrap();
        assert_eq!(report.buddyinfo(), Report::new(&map(false)).buddyinfo(), "everything merged back");
    }

    #[test]
    fn bad_input_changes_nothing() {
        let mm = map(false);
        let report = Report::new(&mm);
        let before = report.buddyinfo();
        for (pfn, order) in [(0x3000, 0), (0x2ffe, 2), (0x800, 0), (0, 11), (u64::MAX, 0), (u64::MAX - 7, 3)] {
            assert!(mm.alloc_pages_at(Pfn(pfn), order, Gfp::KERNEL).is_err(), "{pfn:#x} order {order}");
        }
        assert!(matches!(mm.alloc_pages_at(Pfn(0x1000), 0, Gfp::DMA | Gfp::DMA32), Err(AllocError::InvalidGfp(_))));
        assert_eq!(report.buddyinfo(), before);
        report.check_invariants().unwrap();
    }

    #[test]
    fn pageblock_types_follow_the_claim_rule() {
        let mm = map(false);
        // A small unmovable block in a free movable pageblock claims it.
        mm.alloc_pages_at(Pfn(0x1000), 0, Gfp::KERNEL).unwrap();
        let report = Report::new(&mm);
        assert_eq!(report.pageblock_migratetype(Pfn(0x1000)), Some(MigrateType::Unmovable));
        // Half of the next pageblock in movable use: an unmovable page does
        // not claim it (free < half and movable pages are not alike).
        mm.alloc_pages_at(Pfn(0x1200), 8, Gfp::HIGHUSER_MOVABLE).unwrap();
        mm.alloc_pages_at(Pfn(0x1300), 7, Gfp::HIGHUSER_MOVABLE).unwrap();
        mm.alloc_pages_at(Pfn(0x1380), 0, Gfp::KERNEL).unwrap();
        assert_eq!(report.pageblock_migratetype(Pfn(0x1200)), Some(MigrateType::Movable), "left mixed");
        // A whole-pageblock block takes the pageblock's type outright.
        mm.alloc_pages_at(Pfn(0x1400), 10, Gfp::RECLAIMABLE).unwrap();
        assert_eq!(report.pageblock_migratetype(Pfn(0x1400)), Some(MigrateType::Reclaimable));
        assert_eq!(report.pageblock_migratetype(Pfn(0x1600)), Some(MigrateType::Reclaimable));
        report.check_invariants().unwrap();
    }

    #[test]
    fn a_block_over_a_cma_pageblock_leaves_its_type_alone() {
        let mm = MemoryMapBuilder::new()
            .zone(0, ZoneType::Normal, 0x1000..0x3000)
            .cma("cma", 0x1200..0x1400)
            .per_cpu_lists(false)
            .build()
            .unwrap();
        assert_eq!(mm.alloc_pages_at(Pfn(0x1000), 10, Gfp::KERNEL), Ok(Pfn(0x1000)));
        let report = Report::new(&mm);
        assert_eq!(report.pageblock_migratetype(Pfn(0x1000)), Some(MigrateType::Unmovable));
        assert_eq!(report.pageblock_migratetype(Pfn(0x1200)), Some(MigrateType::Cma));
        report.check_invariants().unwrap();
        mm.free_pages(Pfn(0x1000), 10).unwrap();
        report.check_invariants().unwrap();
    }

    #[test]
    fn drains_per_cpu_lists_when_needed() {
        let mm = map(true);
        // Two neighbours from one refill: the first is freed while the
        // second is in use, the second while the first is on the list, so
        // neither goes straight to the buddy, whatever the policy.
        let pfn = crate::Cpus::new(&mm).cpu(0).unwrap().alloc_pages(Gfp::KERNEL, 0).unwrap();
        let other = crate::Cpus::new(&mm).cpu(0).unwrap().alloc_pages(Gfp::KERNEL, 0).unwrap();
        crate::Cpus::new(&mm).cpu(0).unwrap().free_pages(pfn, 0).unwrap();
        crate::Cpus::new(&mm).cpu(0).unwrap().free_pages(other, 0).unwrap();
        assert!(mm.nr_pcp_pages() > 0);
        assert_eq!(mm.alloc_pages_at(pfn, 0, Gfp::KERNEL), Ok(pfn));
        mm.free_pages(pfn, 0).unwrap();
        Report::new(&mm).check_invariants().unwrap();
    }

    #[test]
    fn grouping_off_treats_everything_as_unmovable() {
        let mm = MemoryMapBuilder::new()
            .zone(0, ZoneType::Normal, 0x1000..0x3000)
            .per_cpu_lists(false)
            .group_by_mobility(false)
            .build()
            .unwrap();
        assert!(!mm.group_by_mobility());
        mm.alloc_pages_at(Pfn(0x1000), 0, Gfp::HIGHUSER_MOVABLE).unwrap();
        let report = Report::new(&mm);
        assert_eq!(report.pageblock_migratetype(Pfn(0x1000)), Some(MigrateType::Unmovable));
        let pfn = mm.alloc_pages(Gfp::HIGHUSER_MOVABLE, 0).unwrap();
        assert_eq!(report.pageblock_migratetype(pfn), Some(MigrateType::Unmovable));
        report.check_invariants().unwrap();
    }
}
