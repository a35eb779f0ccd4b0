//! Whole-allocator consistency check, for tests and debug builds.
//!
//! Owns no state: it walks every zone's lists and every descriptor and
//! verifies the invariants stated in `buddy` and `zone`. It takes each zone
//! lock in turn, so it is exact only when no other thread is allocating or
//! freeing (which is how tests call it).
#![deny(unsafe_code)]

use crate::mem::page::{PageFlags, PageIdx};
use crate::pcp::{pindex_to_order, NR_PCP_LISTS};
use crate::report::Report;
use crate::types::gfp::{MigrateType, MIGRATE_TYPES};
use crate::zone::buddy::{types_may_merge, BuddyCtx};
use crate::Pfn;
use alloc::format;
use alloc::string::String;

/// A broken invariant: where and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvariantViolation {
    /// The page involved, if one is.
    pub pfn: Option<Pfn>,
    /// What is wrong.
    pub message: String,
}

impl core::fmt::Display for InvariantViolation {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.pfn {
            Some(pfn) => write!(f, "pfn {pfn}: {}", self.message),
            None => f.write_str(&self.message),
        }
    }
}

macro_rules! ensure {
    ($cond:expr, $pfn:expr, $($msg:tt)*) => {
        if !$cond {
            return Err(InvariantViolation { pfn: $pfn, message: format!($($msg)*) });
        }
    };
}

impl Report<'_> {
    /// Verifies every invariant of every zone:
    /// - list membership matches descriptors (`BUDDY`, order, type), and
    ///   per-list, per-type and total free counts equal the blocks listed;
    /// - free blocks are naturally aligned, inside their zone, within one
    ///   section, and every pageblock they touch has their list's type;
    /// - no page is both free and allocated; pages inside a free block carry
    ///   no state; compound tails point at their head;
    /// - `REPORTED` (free page reporting) marks only heads of free blocks
    ///   of at least the reporting order, or of blocks a pass holds off
    ///   the lists, which add up to the zone's count of such pages;
    /// - no two free buddies are left unmerged where merging is allowed;
    /// - no pageblock is left isolated (isolation never outlives an
    ///   `alloc_contig_range` call);
    /// - exactly the pageblocks of CMA areas have type CMA, and each area's
    ///   bitmap agrees with its allocation records;
    /// - no page is lost: every page of a zone is free (listed, on a
    ///   per-CPU list or cache, or out for reporting), allocated (held by a
    ///   handle or a bare PFN, whether or not that handle was forgotten
    ///   with `mem::forget`), inside such a block, a hole, reserved or
    ///   poisoned page, or a bad page leaked with the state it was found
    ///   in. A page with no state and no reference (prepared for the free
    ///   lists by a free that never finished) is an error.
    ///
    /// Call with no concurrent allocator activity. A
    /// [`PinnedCpu`](crate::PinnedCpu) alive, or forgotten, holds its
    /// lists and magazine to itself, so they cannot be walked: the cached
    /// pages the checker cannot attribute to a list it walked are then
    /// counted as held by the pinned CPUs instead of reported as lost.
    /// Cost: O(pages).
    ///
    /// # Errors
    /// The first violation found.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        for zone in self.mm.zones.iter() {
            let cx = zone.cx(&self.mm.mem);
            let state = zone.state.lock();
            let area = &state.area;
            let mut listed_pages = 0u64;
            let mut listed_heads = 0u64;
            let mut by_type = [0u64; MIGRATE_TYPES];
            for order in 0..=cx.max_order {
                for mt in MigrateType::ALL {
                    let mut blocks = 0;
                    for idx in area.iter_list(cx, order, mt) {
                        self.check_free_block(cx, idx, order, mt)?;
                        blocks += 1;
                        ensure!(blocks <= area.nr_blocks(order, mt), Some(self.mm.idx_to_pfn(idx)), "list cycle");
                    }
                    ensure!(
                        blocks == area.nr_blocks(order, mt),
                        None,
                        "zone {:?}: list ({order}, {mt:?}) holds {blocks} blocks, counter says {}",
                        zone.zone_type,
                        area.nr_blocks(order, mt)
                    );
                    ensure!(
                        (blocks > 0) == area.has_blocks(order, mt),
                        None,
                        "zone {:?}: list ({order}, {mt:?}) holds {blocks} blocks, non-empty mask disagrees",
                        zone.zone_type
                    );
                    listed_heads += blocks;
                    listed_pages += blocks << order;
                    by_type[mt as usize] += blocks << order;
                }
            }
            ensure!(
                listed_pages == area.free_pages(),
                None,
                "zone {:?}: lists hold {listed_pages} pages, free counter says {}",
                zone.zone_type,
                area.free_pages()
            );
            for mt in MigrateType::ALL {
                ensure!(by_type[mt as usize] == area.free_pages_of(mt), None, "free count of {mt:?} wrong");
            }
            if let Some(counts) = area.pageblock_free() {
                self.check_pageblock_free(cx, area, counts)?;
            }
            let zi = self.mm.zone_index_of(zone.start_idx).unwrap_or(0);
            let pcp_heads = self.check_pcp_lists(zi, cx)?;
            // Walk the span: every BUDDY head must be one we listed, and
            // allocated blocks must be well formed.
            let mut idx = zone.start_idx;
            let mut heads_seen = 0u64;
            let mut pcp_seen = 0u64;
            let mut reporting_seen = 0u64;
            while idx < zone.end_idx {
                let page = self.mm.desc(idx);
                let flags = page.flags();
                let pfn = Some(self.mm.idx_to_pfn(idx));
                if flags.contains(PageFlags::BUDDY) {
                    heads_seen += 1;
                    idx += 1 << page.order();
                } else if page.is_reported() {
                    // Off the lists while a reporting pass discards it.
                    ensure!(
                        flags.difference(PageFlags::HWPOISON) == PageFlags::EMPTY && page.refcount() == 0,
                        pfn,
                        "block out for reporting has state {flags:?} and {} references",
                        page.refcount()
                    );
                    reporting_seen += 1 << page.order();
                    idx += 1 << page.order();
                } else if flags.contains(PageFlags::PCP) {
                    pcp_seen += 1;
                    idx += 1 << page.order();
                } else if flags.contains(PageFlags::ALLOCATED) {
                    ensure!(!flags.contains(PageFlags::TAIL), pfn, "allocated page is also a tail");
                    ensure!(!page.is_reported(), pfn, "allocated page marked reported");
                    let order = page.order();
                    ensure!(idx & ((1 << order) - 1) == 0, pfn, "allocated block misaligned");
                    for inner in idx + 1..idx + (1 << order) {
                        let f = self.mm.desc(inner).flags();
                        ensure!(
                            !f.contains(PageFlags::BUDDY),
                            Some(self.mm.idx_to_pfn(inner)),
                            "free page inside an allocated block"
                        );
                        if flags.contains(PageFlags::HEAD) {
                            ensure!(
                                f.contains(PageFlags::TAIL) && self.mm.desc(inner).next() == idx,
                                Some(self.mm.idx_to_pfn(inner)),
                                "compound tail does not point at its head"
                            );
                        }
                    }
                    idx += 1 << order;
                } else {
                    // What stays: holes, reserved and offlined (poisoned)
                    // pages, and bad pages leaked with the state they were
                    // found in (a flag or a reference left). A page with no
                    // state and no reference was prepared for the free
                    // lists and never reached them: lost.
                    ensure!(
                        flags != PageFlags::EMPTY || page.refcount() != 0,
                        pfn,
                        "page is neither free nor allocated (lost): state {flags:?}, {} references",
                        page.refcount()
                    );
                    // A leaked bad block keeps its order (poisoned later or
                    // not): its tails were leaked with it. Holes, reserved
                    // and offlined pages go one by one.
                    let offline = PageFlags::HOLE.union(PageFlags::RESERVED);
                    idx += if flags.intersects(offline) { 1 } else { 1 << page.order() };
                }
            }
            ensure!(
                reporting_seen == state.reporting_pages,
                None,
                "zone {:?}: {reporting_seen} pages out for reporting in the span, the zone counts {}",
                zone.zone_type,
                state.reporting_pages
            );
            ensure!(
                heads_seen == listed_heads,
                None,
                "zone {:?}: {heads_seen} BUDDY pages in the span, {listed_heads} on lists",
                zone.zone_type
            );
            let pcp_heads = pcp_heads + self.mm.cpu_cached_blocks(zi).0;
            // The rest are a pinned CPU's (its lists and magazine), if any
            // CPU is pinned.
            let pinned = self.mm.pcp.slots.iter().any(|slot| slot.pinned.load(core::sync::atomic::Ordering::Relaxed));
            ensure!(
                pcp_seen == pcp_heads || (pinned && pcp_seen > pcp_heads),
                None,
                "zone {:?}: {pcp_seen} PCP pages in the span, {pcp_heads} on per-CPU lists and in per-CPU caches",
                zone.zone_type
            );
            zone_free_matches_hint(zone, area.free_pages())?;
        }
        self.check_pageblock_types()
    }

    /// ISOLATE never stays behind; CMA pageblocks are exactly the areas'.
    fn check_pageblock_types(&self) -> Result<(), InvariantViolation> {
        let pb_order = self.mm.mem.geometry.pageblock_order;
        for block in 0..self.mm.mem.blocks.len() {
            let pfn = self.mm.mem.base_pfn + ((block as u64) << pb_order);
            let mt = self.mm.mem.blocks.get_block(block);
            let in_cma = self.mm.cma.iter().any(|a| a.pfns().contains(&pfn));
            ensure!(mt != MigrateType::Isolate, Some(Pfn(pfn)), "pageblock left isolated");
            ensure!(
                (mt == MigrateType::Cma) == in_cma,
                Some(Pfn(pfn)),
                "pageblock type {mt:?} {} a CMA area",
                if in_cma { "inside" } else { "outside" }
            );
        }
        for area in &self.mm.cma {
            area.check().map_err(|message| InvariantViolation { pfn: None, message })?;
        }
        Ok(())
    }

    fn check_free_block(
        &self,
        cx: BuddyCtx<'_>,
        idx: PageIdx,
        order: u32,
        mt: MigrateType,
    ) -> Result<(), InvariantViolation> {
        let pfn = Some(self.mm.idx_to_pfn(idx));
        let page = self.mm.desc(idx);
        ensure!(page.has(PageFlags::BUDDY), pfn, "listed block lacks BUDDY");
        ensure!(page.order() == order, pfn, "listed at order {order}, descriptor says {}", page.order());
        ensure!(page.tag() == mt as u8, pfn, "listed as {mt:?}, descriptor says {}", page.tag());
        ensure!(idx & ((1 << order) - 1) == 0, pfn, "order-{order} block misaligned");
        let end = idx + (1 << order);
        ensure!(idx >= cx.start && end <= cx.end, pfn, "block leaves its zone");
        let first = self.mm.idx_to_pfn(idx).0;
        let last = first + (1 << order) - 1;
        ensure!(
            self.mm.mem.geometry.pfn_to_section(first) == self.mm.mem.geometry.pfn_to_section(last),
            pfn,
            "block crosses a section boundary"
        );
        let pb = 1u32 << cx.pageblock_order;
        let mut at = idx & !(pb - 1);
        while at < end {
            let t = cx.blocks.get(at);
            ensure!(t == mt, pfn, "block on {mt:?} list touches a {t:?} pageblock");
            at += pb;
        }
        ensure!(
            !page.is_reported() || order >= self.mm.page_reporting_order(),
            pfn,
            "order-{order} block marked reported, below the reporting order"
        );
        if let Some(i) =
            (idx + 1..end).find(|&i| self.mm.desc(i).flags() != PageFlags::EMPTY || self.mm.desc(i).is_reported())
        {
            ensure!(
                false,
                Some(self.mm.idx_to_pfn(i)),
                "page inside the free block at {} (order {order}) has state {:?}",
                self.mm.idx_to_pfn(idx),
                self.mm.desc(i).flags()
            );
        }
        if order < cx.max_order {
            let buddy = idx ^ (1 << order);
            if buddy >= cx.start && buddy + (1 << order) <= cx.end {
                let b = self.mm.desc(buddy);
                let buddy_mt = MigrateType::from_index(b.tag() as usize).unwrap_or(MigrateType::Unmovable);
                let mergeable = types_may_merge(order, cx.pageblock_order, mt, buddy_mt);
                ensure!(
                    !(b.has(PageFlags::BUDDY) && b.order() == order && mergeable),
                    pfn,
                    "free buddies of order {order} left unmerged"
                );
            }
        }
        Ok(())
    }
}

impl Report<'_> {
    /// The per-pageblock free counts (sparsest-first compaction's survey:
    /// free blocks below pageblock order) agree with the free lists.
    fn check_pageblock_free(
        &self,
        cx: crate::zone::buddy::BuddyCtx<'_>,
        area: &crate::zone::buddy::FreeArea,
        counts: &crate::zone::placement::PageblockFree,
    ) -> Result<(), InvariantViolation> {
        let pb = 1u32 << cx.pageblock_order;
        let first = cx.start & !(pb - 1);
        let mut want = alloc::vec![0u32; ((cx.end - first).div_ceil(pb)) as usize];
        for order in 0..cx.pageblock_order.min(cx.max_order + 1) {
            for mt in MigrateType::ALL {
                for idx in area.iter_list(cx, order, mt) {
                    want[((idx - first) / pb) as usize] += 1 << order;
                }
            }
        }
        for (i, &w) in want.iter().enumerate() {
            let pb_start = first + i as u32 * pb;
            ensure!(
                counts.free_in(pb_start) == w,
                Some(self.mm.idx_to_pfn(pb_start.max(cx.start))),
                "pageblock free count {} but its free blocks hold {w} pages",
                counts.free_in(pb_start)
            );
        }
        Ok(())
    }

    /// Checks every per-CPU list of zone `zi`; returns the blocks listed.
    fn check_pcp_lists(&self, zi: usize, cx: BuddyCtx<'_>) -> Result<u64, InvariantViolation> {
        let mut result = Ok(0u64);
        self.mm.for_each_pcp(zi, |pcp| {
            if result.is_err() {
                return;
            }
            let mut pages = 0u64;
            let mut blocks = 0u64;
            for pindex in 0..NR_PCP_LISTS {
                let order = pindex_to_order(pindex, cx.pageblock_order);
                for idx in pcp.iter_list(cx.pages, pindex) {
                    let page = self.mm.desc(idx);
                    let pfn = Some(self.mm.idx_to_pfn(idx));
                    let bad = if !page.has(PageFlags::PCP) {
                        Some("listed per-CPU block lacks PCP")
                    } else if page.order() != order {
                        Some("per-CPU block has the wrong order")
                    } else if page.is_reported() {
                        Some("per-CPU block marked reported")
                    } else if idx & ((1 << order) - 1) != 0 {
                        Some("per-CPU block misaligned")
                    } else if idx < cx.start || idx + (1 << order) > cx.end {
                        Some("per-CPU block outside its zone")
                    } else if (idx + 1..idx + (1 << order)).any(|i| self.mm.desc(i).flags() != PageFlags::EMPTY) {
                        Some("page inside a per-CPU block has state")
                    } else {
                        None
                    };
                    if let Some(message) = bad {
                        result = Err(InvariantViolation { pfn, message: message.into() });
                        return;
                    }
                    pages += 1 << order;
                    blocks += 1;
                }
            }
            if pages != pcp.count as u64 {
                result = Err(InvariantViolation {
                    pfn: None,
                    message: format!("per-CPU count {} but lists hold {pages} pages", pcp.count),
                });
                return;
            }
            if let Ok(total) = result.as_mut() {
                *total += blocks;
            }
        });
        result
    }
}

fn zone_free_matches_hint(zone: &crate::zone::Zone, free: u64) -> Result<(), InvariantViolation> {
    ensure!(zone.free_pages() == free, None, "published free count {} != {free}", zone.free_pages());
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::mem::page::PageFlags;
    use crate::{Gfp, MemoryMapBuilder, Report};

    /// A page prepared for the free lists that never reached them (what a
    /// panic between the two left behind) has no state and no reference:
    /// the checker used to pass over it.
    #[test]
    fn a_page_in_neither_state_is_reported_lost() {
        let mm = MemoryMapBuilder::with_memory(16 << 20).per_cpu_lists(false).build().unwrap();
        let pfn = mm.alloc_pages(Gfp::KERNEL, 0).unwrap();
        Report::new(&mm).check_invariants().unwrap();
        let idx = mm.pfn_to_idx(pfn).unwrap();
        mm.desc(idx).set_state(PageFlags::EMPTY, 0, 0);
        mm.desc(idx).set_refcount(0);
        let err = Report::new(&mm).check_invariants().unwrap_err();
        assert_eq!(err.pfn, Some(pfn));
        assert!(err.message.contains("lost"), "{}", err.message);
    }
}
