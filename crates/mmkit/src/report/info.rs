//! Reporting: the allocator's state as plain structs and in the `/proc`
//! layouts users already parse (`buddyinfo`, `pagetypeinfo`, `vmstat`, and
//! debugfs `extfrag`).
//!
//! Owns the snapshot taking (one zone lock at a time, never two) and the
//! mapping of counters to vmstat names; the text layouts are `procfs`'s.
#![deny(unsafe_code)]

use crate::pcp::PcpCounters;
use crate::report::procfs::{self, PageblockGeometry, ZoneFreeInfo};
use crate::report::Report;
use crate::types::gfp::{MigrateType, ZoneType, MIGRATE_TYPES};
use crate::zone::placement::PlacementCounters;
use crate::zone::ZoneCounters;
use alloc::string::String;
use alloc::vec::Vec;
use alloc::{format, vec};

/// Counters of one zone at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneSnapshot {
    /// Node id.
    pub nid: usize,
    /// Zone type.
    pub zone_type: ZoneType,
    /// Free pages.
    pub free_pages: u64,
    /// Free pages per migratetype list.
    pub free_pages_by_type: [u64; MIGRATE_TYPES],
    /// Pages in the highatomic reserve.
    pub reserved_highatomic: u64,
    /// Event counters of the buddy paths.
    pub counters: ZoneCounters,
    /// Where pageblock-sized free blocks were broken, and steals.
    pub placement: PlacementCounters,
    /// Pages cached on per-CPU lists (free, but not counted in `free_pages`).
    pub pcp_pages: u64,
    /// Per-CPU list counters summed over CPUs.
    pub pcp: PcpCounters,
    /// Free blocks, pageblocks per type, for the /proc layouts.
    pub free: ZoneFreeInfo,
}

impl ZoneSnapshot {
    /// Free pages per order and migratetype: `[order][migratetype]`, from
    /// the free block counts (blocks × 2^order).
    pub fn free_pages_by_order_and_type(&self) -> Vec<[u64; MIGRATE_TYPES]> {
        let orders = self.free.free_blocks_per_order.len();
        (0..orders)
            .map(|order| {
                let mut row = [0u64; MIGRATE_TYPES];
                for (mt, counts) in self.free.free_blocks_per_type.iter().enumerate().take(MIGRATE_TYPES) {
                    row[mt] = counts.get(order).copied().unwrap_or(0) << order;
                }
                row
            })
            .collect()
    }

    /// The zone's unusable free space index for `order`, in thousandths
    /// (the number debugfs `extfrag/unusable_index` prints as `0.066`).
    pub fn unusable_index(&self, order: u32) -> u32 {
        procfs::unusable_index(&self.free.free_blocks_per_order, order)
    }

    /// The zone's fragmentation index for `order`, in thousandths (debugfs
    /// `extfrag/extfrag_index`; -1000 when a block of that order is free).
    pub fn fragmentation_index(&self, order: u32) -> i32 {
        procfs::fragmentation_index(&self.free.free_blocks_per_order, order)
    }
}

/// Counters: the allocator's statistics (Linux's `/proc/vmstat` and
/// `/proc/zoneinfo` numbers, as values).
impl Report<'_> {
    /// Allocator-wide counters.
    pub fn stats(&self) -> crate::StatsSnapshot {
        self.mm.stats.snapshot()
    }

    /// Free pages on the buddy lists of all zones. As in Linux, pages cached
    /// on per-CPU lists and caches are not included: see
    /// [`nr_pcp_pages`](Self::nr_pcp_pages), or drain them first
    /// ([`Cpus::drain_all_pages`](crate::Cpus::drain_all_pages)).
    pub fn nr_free_pages(&self) -> u64 {
        self.mm.zones.iter().map(|z| z.free_pages()).sum()
    }

    /// Pages cached on every CPU's lists and per-CPU caches (free, but not
    /// in [`nr_free_pages`](Self::nr_free_pages)). Pinned CPUs are not
    /// counted.
    pub fn nr_pcp_pages(&self) -> u64 {
        self.mm.nr_pcp_pages()
    }

    /// Free pages on node `nid`'s buddy lists (Linux's
    /// `node_page_state(nid, NR_FREE_PAGES)`).
    ///
    /// # Errors
    /// [`IndexError::NoSuchNode`](crate::IndexError::NoSuchNode) for a node
    /// at or above [`nr_nodes`](crate::PageAllocator::nr_nodes).
    pub fn node_free_pages(&self, nid: usize) -> Result<u64, crate::IndexError> {
        self.mm.check_node(nid)?;
        Ok(self.mm.zones.iter().filter(|z| z.nid == nid).map(|z| z.free_pages()).sum())
    }

    /// Free pages in `REPORTED` blocks: memory the allocator manages but
    /// the OS does not back. Takes each zone's lock in turn; cost O(free
    /// blocks of reporting order).
    pub fn nr_reported_pages(&self) -> u64 {
        let order = self.mm.page_reporting_order();
        self.mm.zones.iter().map(|zone| zone.state.lock().area.reported_pages(zone.cx(&self.mm.mem), order)).sum()
    }
}

impl Report<'_> {
    /// The placement policy the map was built with (the same in every zone).
    pub fn placement_policy(&self) -> crate::types::placement::PlacementPolicy {
        self.mm.zones.iter().next().map_or_else(Default::default, |z| z.state.lock().area.policy())
    }

    /// Migratetype of the pageblock holding `pfn`, if the map covers it.
    pub fn pageblock_migratetype(&self, pfn: crate::Pfn) -> Option<MigrateType> {
        self.mm.pfn_to_idx(pfn).map(|idx| self.mm.mem.blocks.get(idx))
    }

    /// One snapshot per zone, in node then zone order.
    pub fn zone_snapshots(&self) -> Vec<ZoneSnapshot> {
        let pb_order = self.mm.mem.geometry.pageblock_order;
        self.mm
            .zones
            .iter()
            .enumerate()
            .map(|(zi, zone)| {
                let (pcp, pcp_pages) = self.mm.pcp_totals(zi);
                let pcp_pages = pcp_pages + self.mm.cpu_cached_blocks(zi).1;
                let state = zone.state.lock();
                let area = &state.area;
                let orders = self.mm.mem.geometry.merge_order() as usize + 1;
                let mut per_order = vec![0u64; self.mm.mem.geometry.nr_orders()];
                let mut per_type = vec![vec![0u64; self.mm.mem.geometry.nr_orders()]; MIGRATE_TYPES];
                for o in 0..orders {
                    per_order[o] = area.nr_free(o as u32);
                    for mt in MigrateType::ALL {
                        per_type[mt as usize][o] = area.nr_blocks(o as u32, mt);
                    }
                }
                let mut free_by_type = [0u64; MIGRATE_TYPES];
                for mt in MigrateType::ALL {
                    free_by_type[mt as usize] = area.free_pages_of(mt);
                }
                let snapshot = ZoneSnapshot {
                    nid: zone.nid,
                    zone_type: zone.zone_type,
                    free_pages: area.free_pages(),
                    free_pages_by_type: free_by_type,
                    reserved_highatomic: state.nr_reserved_highatomic,
                    counters: state.counters,
                    placement: area.placement,
                    pcp_pages,
                    pcp,
                    free: ZoneFreeInfo {
                        node: zone.nid,
                        zone_name: zone.zone_type.name(),
                        free_blocks_per_order: per_order,
                        free_blocks_per_type: per_type,
                        pageblocks_per_type: Vec::new(),
                    },
                };
                drop(state);
                let mut snapshot = snapshot;
                snapshot.free.pageblocks_per_type = self.count_pageblocks(zone.start_idx, zone.end_idx, pb_order);
                snapshot
            })
            .collect()
    }

    /// Pageblocks per migratetype whose first page lies in `[start, end)`.
    fn count_pageblocks(&self, start: u32, end: u32, pb_order: u32) -> Vec<u64> {
        let mut counts = vec![0u64; MIGRATE_TYPES];
        // Like Linux: step from the zone's first page a pageblock at a time,
        // so a partial first pageblock counts.
        let mut at = start as usize;
        while at < end as usize {
            let block = at >> pb_order;
            if block < self.mm.mem.blocks.len() {
                counts[self.mm.mem.blocks.get_block(block) as usize] += 1;
            }
            at += 1 << pb_order;
        }
        counts
    }

    fn free_infos(&self) -> Vec<ZoneFreeInfo> {
        self.zone_snapshots().into_iter().map(|s| s.free).collect()
    }

    /// `/proc/buddyinfo` text.
    pub fn buddyinfo(&self) -> String {
        procfs::buddyinfo(&self.free_infos())
    }

    /// `/proc/pagetypeinfo` text (free counts and pageblock counts).
    pub fn pagetypeinfo(&self) -> String {
        let names: Vec<&str> = MigrateType::ALL.iter().map(|m| m.name()).collect();
        let geometry = PageblockGeometry { pageblock_order: self.mm.mem.geometry.pageblock_order };
        procfs::pagetypeinfo(&geometry, &names, &self.free_infos())
    }

    /// debugfs `extfrag/unusable_index` text.
    pub fn unusable_index(&self) -> String {
        procfs::unusable_index_text(&self.free_infos())
    }

    /// debugfs `extfrag/extfrag_index` text.
    pub fn extfrag_index(&self) -> String {
        procfs::extfrag_index_text(&self.free_infos())
    }

    /// `/proc/vmstat`-style counters as (name, value) pairs: Linux's names
    /// where Linux has the counter, `mmkit_`-prefixed ones otherwise.
    pub fn vmstat_counters(&self) -> Vec<(String, u64)> {
        let zones = self.zone_snapshots();
        let sum = |f: &dyn Fn(&ZoneSnapshot) -> u64| zones.iter().map(f).sum::<u64>();
        let mut out = vec![
            (String::from("nr_free_pages"), sum(&|z| z.free_pages)),
            (String::from("nr_free_cma"), sum(&|z| z.free_pages_by_type[MigrateType::Cma as usize])),
            (String::from("nr_free_highatomic"), sum(&|z| z.reserved_highatomic)),
        ];
        for zt in ZoneType::ALL {
            let name = format!("pgalloc_{}", zt.name().to_ascii_lowercase());
            out.push((
                name,
                sum(&|z| {
                    if z.zone_type == zt {
                        z.counters.pgalloc_pages + z.pcp.alloc_pages
                    } else {
                        0
                    }
                }),
            ));
        }
        out.push((String::from("pgfree"), sum(&|z| z.counters.pgfree_pages + z.pcp.free_pages)));
        let stats = self.stats();
        for (name, value) in stats.pairs() {
            let name = match name {
                "allocstall"
                | "compact_stall"
                | "compact_success"
                | "compact_fail"
                | "compact_migrate_scanned"
                | "compact_free_scanned"
                | "compact_daemon_wake"
                | "compact_daemon_migrate_scanned"
                | "compact_daemon_free_scanned"
                | "pgmigrate_success"
                | "pgmigrate_fail" => String::from(name),
                _ => format!("mmkit_{name}"),
            };
            out.push((name, value));
        }
        out.push((String::from("mmkit_fallback_allocs"), sum(&|z| z.counters.fallback_allocs)));
        out.push((String::from("mmkit_pageblocks_claimed"), sum(&|z| z.counters.pageblocks_claimed)));
        out.push((String::from("mmkit_pcp_pages"), sum(&|z| z.pcp_pages)));
        out.push((String::from("mmkit_pcp_refills"), sum(&|z| z.pcp.refills)));
        out.push((String::from("mmkit_pcp_refill_pages"), sum(&|z| z.pcp.refill_pages)));
        out.push((String::from("mmkit_pcp_spills"), sum(&|z| z.pcp.spills)));
        out.push((String::from("mmkit_pcp_spill_pages"), sum(&|z| z.pcp.spill_pages)));
        out
    }

    /// `/proc/vmstat` text of [`vmstat_counters`](Self::vmstat_counters).
    pub fn vmstat(&self) -> String {
        let counters = self.vmstat_counters();
        let pairs: Vec<(&str, u64)> = counters.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        procfs::vmstat(&pairs)
    }
}

#[cfg(test)]
mod tests {
    use crate::{Gfp, MemoryMapBuilder, MigrateType, Pfn, Report, ZoneType};

    #[test]
    fn numeric_indices_match_the_text_files() {
        let mm =
            MemoryMapBuilder::new().zone(0, ZoneType::Normal, 0x1000..0x1400).per_cpu_lists(false).build().unwrap();
        for pfn in (0x1000..0x1010).step_by(2) {
            mm.alloc_pages_at(Pfn(pfn), 0, Gfp::HIGHUSER_MOVABLE).unwrap();
        }
        let snap = &Report::new(&mm).zone_snapshots()[0];
        let by_order = snap.free_pages_by_order_and_type();
        assert_eq!(by_order.iter().flatten().sum::<u64>(), crate::Report::new(&mm).nr_free_pages());
        assert_eq!(by_order[0][MigrateType::Movable as usize], 8);
        assert_eq!(by_order[9][MigrateType::Movable as usize], 512);
        // 1016 free pages, 512 of them in a block of order >= 9.
        assert_eq!(snap.unusable_index(9), 504 * 1000 / 1016);
        assert!(Report::new(&mm).unusable_index().contains(" 0.496 "), "{}", Report::new(&mm).unusable_index());
        assert_eq!(snap.fragmentation_index(9), -1000);
        assert_eq!(
            snap.fragmentation_index(10),
            crate::report::procfs::fragmentation_index(&snap.free.free_blocks_per_order, 10)
        );
        assert_eq!(Report::new(&mm).pageblock_migratetype(Pfn(0x1000)), Some(MigrateType::Movable));
        assert_eq!(Report::new(&mm).pageblock_migratetype(Pfn(0x9000)), None);
    }
}
