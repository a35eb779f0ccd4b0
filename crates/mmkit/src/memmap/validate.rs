//! The builder's checks: every knob of a [`MemoryMapBuilder`] is checked
//! here before anything is allocated, so that `build()` refuses nonsense
//! with a [`BuildError`] naming the knob instead of building a map that
//! panics or fails every allocation later.
//!
//! Owns the limits (Linux's sysctl bounds from `mm/page_alloc.c`'s
//! `page_alloc_sysctl_table`, where Linux has them). Reads the builder's
//! fields; builds and changes nothing.
#![deny(unsafe_code)]

use super::MemoryMapBuilder;
use crate::types::error::{BadRangeReason, BuildError, RangeKind, Tunable};
use crate::types::geometry::ZoneSpec;
use crate::types::gfp::ZoneType;
use crate::zone::WatermarkConfig;
use core::ops::Range;

/// The largest value of an `int` sysctl.
const INT_MAX: u64 = i32::MAX as u64;

/// `watermark_scale_factor`'s bounds (`SYSCTL_ONE` ..= `SYSCTL_THREE_THOUSAND`).
const WATERMARK_SCALE_FACTOR: core::ops::RangeInclusive<u64> = 1..=3000;

/// Linux's `MIN_PERCPU_PAGELIST_HIGH_FRACTION`.
const MIN_PERCPU_PAGELIST_HIGH_FRACTION: u32 = 8;

fn tunable(tunable: Tunable, value: u64, ok: bool) -> Result<(), BuildError> {
    if ok {
        Ok(())
    } else {
        Err(BuildError::BadTunable { tunable, value })
    }
}

/// The checks that need no zone layout: CPUs and sysctl ranges.
pub(super) fn knobs(b: &MemoryMapBuilder) -> Result<(), BuildError> {
    if b.nr_cpus == 0 || b.nr_cpus > crate::MAX_NR_CPUS {
        return Err(BuildError::BadNrCpus { nr_cpus: b.nr_cpus, max: crate::MAX_NR_CPUS });
    }
    if let Some(&(cpu, _)) = b.cpu_nodes.iter().find(|&&(cpu, _)| cpu >= b.nr_cpus) {
        return Err(BuildError::UnknownCpu { cpu, nr_cpus: b.nr_cpus });
    }
    let w = &b.watermarks;
    let factor = w.watermark_scale_factor;
    tunable(Tunable::WatermarkScaleFactor, factor, WATERMARK_SCALE_FACTOR.contains(&factor))?;
    let boost = w.watermark_boost_factor;
    tunable(Tunable::WatermarkBoostFactor, boost, boost <= INT_MAX)?;
    for &ratio in &w.lowmem_reserve_ratio {
        tunable(Tunable::LowmemReserveRatio, ratio, ratio <= INT_MAX)?;
    }
    if let Some(kbytes) = w.min_free_kbytes {
        tunable(Tunable::MinFreeKbytes, kbytes, kbytes <= INT_MAX)?;
    }
    // Linux's handler refuses 1..=7 with -EINVAL rather than rounding up.
    let fraction = b.pcp_high_fraction;
    let ok = (fraction == 0 || fraction >= MIN_PERCPU_PAGELIST_HIGH_FRACTION) && u64::from(fraction) <= INT_MAX;
    tunable(Tunable::PercpuPagelistHighFraction, fraction.into(), ok)
}

/// Zones in physical order: DMA below DMA32 below NORMAL across the map
/// (their limits are addresses: `MAX_DMA_PFN`, `MAX_DMA32_PFN`), and each
/// node's MOVABLE zone above that node's other zones (Linux carves it from
/// the top of the node, `find_zone_movable_pfns_for_nodes`). `specs` do
/// not overlap (checked before).
pub(super) fn zone_order(specs: &[ZoneSpec]) -> Result<(), BuildError> {
    for a in specs {
        for b in specs {
            let (ta, tb) = (a.zone_type.index(), b.zone_type.index());
            let compared = ta < tb && (b.zone_type != ZoneType::Movable || a.nid == b.nid);
            if compared && a.pfns.start > b.pfns.start {
                return Err(BuildError::ZoneOrder { lower: a.clone(), upper: b.clone() });
            }
        }
    }
    Ok(())
}

/// Holes and reserved ranges: not reversed, and inside `[lowest, highest)`,
/// the span of the zones (an empty range is allowed and ignored).
pub(super) fn ranges(
    holes: &[Range<u64>],
    reserved: &[Range<u64>],
    lowest: u64,
    highest: u64,
) -> Result<(), BuildError> {
    let lists: [(RangeKind, &[Range<u64>]); 2] = [(RangeKind::Hole, holes), (RangeKind::Reserved, reserved)];
    for (kind, list) in lists {
        for pfns in list {
            let reason = if pfns.start > pfns.end {
                Some(BadRangeReason::Reversed)
            } else if pfns.start < pfns.end && (pfns.start < lowest || pfns.end > highest) {
                Some(BadRangeReason::OutsideMap)
            } else {
                None
            };
            if let Some(reason) = reason {
                return Err(BuildError::BadRange { kind, pfns: pfns.clone(), reason });
            }
        }
    }
    Ok(())
}

/// An explicit `min_free_kbytes` must leave the zones something above
/// their `min` watermark: at or above the low memory's managed pages every
/// allocation would fail (Linux has no such bound and simply OOMs).
pub(super) fn min_free_kbytes(w: &WatermarkConfig, lowmem_pages: u64, page_size: u64) -> Result<(), BuildError> {
    let Some(kbytes) = w.min_free_kbytes else { return Ok(()) };
    let pages_min = u128::from(kbytes) * 1024 / u128::from(page_size);
    tunable(Tunable::MinFreeKbytes, kbytes, lowmem_pages == 0 || pages_min < u128::from(lowmem_pages))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(nid: usize, zone_type: ZoneType, pfns: Range<u64>) -> ZoneSpec {
        ZoneSpec { nid, zone_type, pfns }
    }

    #[test]
    fn zone_order_is_physical_except_movable_per_node() {
        let ok = [spec(0, ZoneType::Dma, 0..10), spec(0, ZoneType::Normal, 10..20), spec(1, ZoneType::Normal, 20..30)];
        assert!(zone_order(&ok).is_ok());
        let movable_low_on_other_node = [spec(0, ZoneType::Movable, 0..10), spec(1, ZoneType::Normal, 10..20)];
        assert!(zone_order(&movable_low_on_other_node).is_ok());
        let bad = [spec(0, ZoneType::Dma32, 10..20), spec(0, ZoneType::Dma, 20..30)];
        assert!(matches!(zone_order(&bad), Err(BuildError::ZoneOrder { .. })));
    }
}
