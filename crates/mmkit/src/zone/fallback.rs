//! Taking a block out of a zone: migratetype fallback, pageblock claiming and
//! the highatomic reserve.
//!
//! Owns the policy of `rmqueue`: which free list serves a request. The state
//! machine NORMAL → CMA → CLAIM → STEAL mirrors Linux's `__rmqueue`; the mode
//! reached is returned so a batch refill can resume where the last one
//! stopped. Everything here runs with the zone lock held (`&mut ZoneState`)
//! and changes lists only through `buddy`.
//!
//! Anti-fragmentation in one paragraph: free memory is grouped by pageblock
//! into migratetypes so that unmovable allocations do not pepper every
//! pageblock. When a type runs dry we would rather *claim* a whole pageblock
//! of another type (largest blocks first, and only when at least half of the
//! pageblock is free or compatible) than *steal* one small block and leave the
//! pageblock mixed. `ALLOC_NOFRAGMENT` forbids stealing below a pageblock, so
//! the caller tries another zone before mixing this one.
#![deny(unsafe_code)]

use crate::mem::page::{PageFlags, PageIdx};
use crate::types::gfp::{AllocFlags, MigrateType};
use crate::zone::buddy::{set_range_type, BuddyCtx};
use crate::zone::{Zone, ZoneState};

/// How far down the fallback chain the last request went.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) enum RmqueueMode {
    /// Own type first.
    #[default]
    Normal,
    /// CMA pageblocks (movable requests only).
    Cma,
    /// Take a single block of another type.
    Steal,
}

/// What a request asks of a zone's free lists: the part of Linux's
/// `alloc_context` that `rmqueue` reads, passed as one value instead of
/// three arguments through every step of the fallback chain.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RmqueueRequest {
    /// Block order.
    pub order: u32,
    /// The request's migratetype.
    pub mt: MigrateType,
    /// Its ALLOC flags.
    pub alloc_flags: AllocFlags,
}

/// Takes a block of `order` for a request of type `mt` (Linux's
/// `rmqueue_buddy` body without the lock): highatomic reserve first for
/// high-order atomic requests, then the fallback chain, then the reserve
/// again for requests that cannot wait.
pub(crate) fn rmqueue(
    zone: &Zone,
    state: &mut ZoneState,
    cx: BuddyCtx<'_>,
    req: RmqueueRequest,
    mode: &mut RmqueueMode,
) -> Option<PageIdx> {
    let RmqueueRequest { order, alloc_flags, .. } = req;
    if alloc_flags.contains(AllocFlags::HIGHATOMIC) {
        if let Some(idx) = state.area.rmqueue_smallest(cx, order, MigrateType::HighAtomic) {
            return Some(idx);
        }
    }
    if let Some(idx) = rmqueue_fallback_chain(zone, state, cx, req, mode) {
        return Some(idx);
    }
    // Failing now is worse than failing a future high-order atomic request.
    if alloc_flags.intersects(AllocFlags::OOM.union(AllocFlags::NON_BLOCK)) {
        return state.area.rmqueue_smallest(cx, order, MigrateType::HighAtomic);
    }
    None
}

fn rmqueue_fallback_chain(
    zone: &Zone,
    state: &mut ZoneState,
    cx: BuddyCtx<'_>,
    req: RmqueueRequest,
    mode: &mut RmqueueMode,
) -> Option<PageIdx> {
    let RmqueueRequest { order, mt, alloc_flags } = req;
    let use_cma = alloc_flags.contains(AllocFlags::CMA);
    // Balance CMA use: when most free memory is CMA, movable requests take it
    // first so that unmovable requests still find ordinary pages.
    if use_cma && state.area.free_pages_of(MigrateType::Cma) > state.area.free_pages() / 2 {
        if let Some(idx) = state.area.rmqueue_smallest(cx, order, MigrateType::Cma) {
            return Some(idx);
        }
    }
    if *mode == RmqueueMode::Normal {
        if let Some(idx) = state.area.rmqueue_smallest(cx, order, mt) {
            return Some(idx);
        }
    }
    if matches!(*mode, RmqueueMode::Normal | RmqueueMode::Cma) && use_cma {
        if let Some(idx) = state.area.rmqueue_smallest(cx, order, MigrateType::Cma) {
            *mode = RmqueueMode::Cma;
            return Some(idx);
        }
    }
    if *mode != RmqueueMode::Steal {
        if let Some(idx) = rmqueue_claim(zone, state, cx, req) {
            state.counters.fallback_allocs += 1;
            *mode = RmqueueMode::Normal;
            return Some(idx);
        }
    }
    if !alloc_flags.contains(AllocFlags::NOFRAGMENT) {
        if let Some(idx) = rmqueue_steal(state, cx, order, mt) {
            state.counters.fallback_allocs += 1;
            *mode = RmqueueMode::Steal;
            return Some(idx);
        }
    }
    None
}

/// Whether a fallback block of `block_order` may be claimed for `mt`:
/// big blocks always; unmovable and reclaimable requests always (they are
/// the ones that fragment); movable ones only from half a pageblock up;
/// anything when grouping by mobility is off.
fn should_try_claim_block(block_order: u32, mt: MigrateType, pageblock_order: u32, mobility_disabled: bool) -> bool {
    block_order >= pageblock_order / 2
        || matches!(mt, MigrateType::Unmovable | MigrateType::Reclaimable)
        || mobility_disabled
}

/// First fallback type with a free block of `order`.
fn find_fallback(state: &ZoneState, order: u32, mt: MigrateType) -> Option<MigrateType> {
    mt.fallbacks().iter().copied().find(|&f| state.area.has_blocks(order, f))
}

/// Orders where some fallback type of `mt` has a free block, as a mask.
fn fallback_orders(state: &ZoneState, mt: MigrateType) -> u32 {
    mt.fallbacks().iter().fold(0, |acc, &f| acc | state.area.orders_of(f))
}

fn rmqueue_claim(zone: &Zone, state: &mut ZoneState, cx: BuddyCtx<'_>, req: RmqueueRequest) -> Option<PageIdx> {
    let RmqueueRequest { order, mt, alloc_flags } = req;
    let min_order = if order < cx.pageblock_order && alloc_flags.contains(AllocFlags::NOFRAGMENT) {
        cx.pageblock_order
    } else {
        order
    };
    // Linux's `__rmqueue_claim` walks the orders from the top down,
    // skipping those with no block of a fallback type; the mask visits
    // only orders with some free block (the others have nothing to claim).
    let mut orders = state.area.orders_any() & (u32::MAX << min_order.min(31));
    while orders != 0 {
        let current = 31 - orders.leading_zeros();
        orders &= !(1 << current);
        if !should_try_claim_block(current, mt, cx.pageblock_order, zone.mobility_disabled) {
            return None;
        }
        if let Some(fallback) = find_fallback(state, current, mt) {
            // The policy's end of the list for the requester: under
            // `TwoEnds` an unmovable claim comes from the top.
            let block = state.area.pick(current, fallback, mt)?;
            if let Some(idx) = try_to_claim_block(zone, state, cx, (block, current, fallback), req) {
                return Some(idx);
            }
        }
    }
    None
}

/// Claims for `req` the free `block` of `block_order` found on the lists
/// of `block_type` (Linux's `try_to_claim_block`).
fn try_to_claim_block(
    zone: &Zone,
    state: &mut ZoneState,
    cx: BuddyCtx<'_>,
    (block, block_order, block_type): (PageIdx, u32, MigrateType),
    req: RmqueueRequest,
) -> Option<PageIdx> {
    let RmqueueRequest { order, mt, alloc_flags } = req;
    if block_order >= cx.pageblock_order {
        state.area.del(cx, block);
        set_range_type(cx, block, block_order, mt);
        let got = state.area.expand_for(cx, block, (order, block_order), mt, mt);
        state.counters.pageblocks_claimed += 1 << (block_order - cx.pageblock_order);
        return Some(got);
    }
    let pb_pages = 1u32 << cx.pageblock_order;
    // Mixing pageblocks is what fragments a zone: raise the watermarks for a
    // while so background reclaim makes room before it spreads.
    if zone.boost_watermark(pb_pages as u64) && alloc_flags.contains(AllocFlags::KSWAPD) {
        zone.mark_boost_pending();
    }
    let pb_start = block & !(pb_pages - 1);
    if claim_pageblock(zone, state, cx, pb_start, mt, block_type) {
        return state.area.rmqueue_smallest(cx, order, mt);
    }
    None
}

/// The claim rule for a pageblock of type `block_type` that a request of
/// type `mt` takes part of: when at least half of it is free or in use by
/// compatible pages (or grouping by mobility is off), move its free pages
/// to `mt`'s lists and give it type `mt`; returns whether it did. A
/// pageblock that straddles the zone edge is never converted. Free blocks
/// larger than the pageblock must have been split first.
pub(crate) fn claim_pageblock(
    zone: &Zone,
    state: &mut ZoneState,
    cx: BuddyCtx<'_>,
    pb_start: PageIdx,
    mt: MigrateType,
    block_type: MigrateType,
) -> bool {
    let pb_pages = 1u32 << cx.pageblock_order;
    if pb_start < zone.start_idx || pb_start + pb_pages > zone.end_idx {
        return false;
    }
    let (free, movable) = scan_pageblock(cx, pb_start);
    let alike = if mt == MigrateType::Movable {
        movable
    } else if block_type == MigrateType::Movable {
        // Everything in use that is not movable counts as compatible.
        pb_pages as u64 - free - movable
    } else {
        0
    };
    if free + alike >= (pb_pages as u64) / 2 || zone.mobility_disabled {
        state.area.move_freepages_block(cx, pb_start, mt);
        cx.blocks.set(pb_start, mt);
        state.counters.pageblocks_claimed += 1;
        return true;
    }
    false
}

/// Free pages and in-use movable pages of the pageblock at `pb_start`.
fn scan_pageblock(cx: BuddyCtx<'_>, pb_start: PageIdx) -> (u64, u64) {
    let end = pb_start + (1 << cx.pageblock_order);
    let (mut free, mut movable) = (0u64, 0u64);
    let mut idx = pb_start;
    while idx < end {
        let p = cx.pages.get(idx);
        let flags = p.flags();
        if flags.contains(PageFlags::BUDDY) {
            free += 1 << p.order();
            idx += 1 << p.order();
        } else if flags.contains(PageFlags::ALLOCATED) {
            let size = 1u32 << p.order();
            if p.tag() == MigrateType::Movable as u8 {
                movable += size as u64;
            }
            idx += size;
        } else {
            idx += 1;
        }
    }
    (free, movable)
}

fn rmqueue_steal(state: &mut ZoneState, cx: BuddyCtx<'_>, order: u32, mt: MigrateType) -> Option<PageIdx> {
    // Linux's `__rmqueue_steal`: the smallest order any fallback type has.
    let orders = fallback_orders(state, mt) & (u32::MAX << order.min(31));
    if orders == 0 {
        return None;
    }
    let current = orders.trailing_zeros();
    let fallback = find_fallback(state, current, mt)?;
    let block = state.area.pick(current, fallback, mt)?;
    state.area.del(cx, block);
    let got = state.area.expand_for(cx, block, (order, current), fallback, mt);
    state.area.placement.steals += 1;
    Some(got)
}

/// After a successful high-order atomic allocation, turns its pageblock
/// into a HIGHATOMIC reserve, up to 1% of the zone (rounded up to a
/// pageblock).
pub(crate) fn reserve_highatomic_pageblock(
    zone: &Zone,
    state: &mut ZoneState,
    cx: BuddyCtx<'_>,
    idx: PageIdx,
    order: u32,
) {
    let pb_pages = 1u64 << cx.pageblock_order;
    let max_reserved = (zone.managed_pages / 100).div_ceil(pb_pages) * pb_pages;
    if state.nr_reserved_highatomic >= max_reserved {
        return;
    }
    let mt = cx.blocks.get(idx);
    if !mt.is_pcp_type() {
        return;
    }
    if order < cx.pageblock_order {
        let pb_start = idx & !((pb_pages as u32) - 1);
        if pb_start < zone.start_idx || pb_start + pb_pages as u32 > zone.end_idx {
            return;
        }
        state.area.move_freepages_block(cx, pb_start, MigrateType::HighAtomic);
        cx.blocks.set(pb_start, MigrateType::HighAtomic);
        state.nr_reserved_highatomic += pb_pages;
    } else {
        set_range_type(cx, idx, order, MigrateType::HighAtomic);
        state.nr_reserved_highatomic += 1 << order;
    }
    state.counters.highatomic_reserved += 1;
}

/// Gives one highatomic pageblock back to `mt` (Linux's
/// `unreserve_highatomic_pageblock`). With `force` the last reserved
/// pageblock may go too. Returns whether anything was released.
pub(crate) fn unreserve_highatomic_pageblock(
    state: &mut ZoneState,
    cx: BuddyCtx<'_>,
    mt: MigrateType,
    force: bool,
) -> bool {
    let pb_pages = 1u64 << cx.pageblock_order;
    if !force && state.nr_reserved_highatomic <= pb_pages {
        return false;
    }
    // The lowest order with a highatomic block, as Linux's order loop finds.
    let orders = state.area.orders_of(MigrateType::HighAtomic);
    if orders == 0 {
        return false;
    }
    let order = orders.trailing_zeros();
    let Some(block) = state.area.first(order, MigrateType::HighAtomic) else {
        return false;
    };
    let size = pb_pages.max(1 << order).min(state.nr_reserved_highatomic);
    state.nr_reserved_highatomic -= size;
    // Given back, the free pages may merge with buddies of their new type
    // (a whole free pageblock next to one of `mt` would otherwise stay two
    // blocks until one is allocated and freed again).
    if order < cx.pageblock_order {
        let pb_start = block & !((pb_pages as u32) - 1);
        state.area.move_freepages_block(cx, pb_start, mt);
        cx.blocks.set(pb_start, mt);
        state.area.remerge_pageblock(cx, pb_start);
    } else {
        state.area.move_to(cx, block, mt);
        set_range_type(cx, block, order, mt);
        state.area.remerge_pageblock(cx, block);
    }
    state.counters.highatomic_released += 1;
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claim_thresholds_follow_linux() {
        assert!(should_try_claim_block(9, MigrateType::Movable, 9, false));
        assert!(should_try_claim_block(4, MigrateType::Movable, 9, false));
        assert!(!should_try_claim_block(3, MigrateType::Movable, 9, false));
        assert!(should_try_claim_block(0, MigrateType::Unmovable, 9, false));
        assert!(should_try_claim_block(0, MigrateType::Reclaimable, 9, false));
        assert!(should_try_claim_block(0, MigrateType::Movable, 9, true), "grouping off: always");
    }
}
