//! Compaction (Linux's `zs_compact` / `__zs_compact`): in each class, move
//! live objects out of the emptiest zspages into the fullest ones, and give
//! the emptied zspages' pages back.
//!
//! Owns the migration of objects between zspages of one class: it walks a
//! source zspage by its object headers (a non-zero header names the live
//! object's handle slot), copies each object into a free object of the
//! destination and points the handle's slot at the new place, so handles
//! stay valid. Single-flight per pool; it holds one class lock for one
//! source zspage at a time and frees pages with no lock held, so
//! allocations and frees go on meanwhile.

use crate::pool::Inner;
use crate::size_class::{slot_of_header, ClassState, GROUP_FULL};
use mmkit::{PageAllocator, PageBlock};
use std::sync::atomic::Ordering::{AcqRel, Relaxed, Release};

impl Inner {
    /// Compacts every class; returns the pages freed.
    pub(crate) fn compact(&self) -> u64 {
        if self.compacting.swap(true, AcqRel) {
            return 0;
        }
        let mut freed = 0;
        for class in self.serving_classes().collect::<Vec<_>>() {
            if self.table.shape(class).is_huge() {
                continue;
            }
            loop {
                let emptied = {
                    let mut state = self.lock(class);
                    if state.can_compact() == 0 {
                        break;
                    }
                    match compact_one(&self.mm, &mut state) {
                        Some(pages) => pages,
                        None => break,
                    }
                };
                freed += emptied.len() as u64;
                self.free_pages(emptied);
            }
        }
        self.pages_compacted.fetch_add(freed, Relaxed);
        self.compacting.store(false, Release);
        freed
    }
}

/// Moves the objects of the emptiest zspage of the class into the fullest
/// ones that have room; returns the source's pages if it emptied (an empty
/// list if it only shrank), or `None` when nothing could move.
fn compact_one(mm: &PageAllocator, state: &mut ClassState) -> Option<Vec<PageBlock>> {
    // Source: the emptiest zspage that holds anything (Linux's
    // `isolate_src_zspage` scans from ZS_INUSE_RATIO_10 upward).
    let src = (1..GROUP_FULL).find_map(|g| state.groups[g].first()).map(|&id| id as usize)?;
    let shape = state.shape;
    let mut buf = vec![0; shape.size];
    let mut moved = 0;
    // Objects never handed out (`used` and above) hold no header.
    for obj in 0..state.zspages[src].as_ref()?.used() {
        let raw = state.zspages[src].as_ref()?.header(mm, shape, obj);
        let Some(slot) = slot_of_header(raw) else { continue };
        // Destination: the fullest zspage with room other than the source
        // (`isolate_dst_zspage` scans from ZS_INUSE_RATIO_99 down).
        // Only into objects the destination's pages already hold: growing
        // a chain would take pages, which compaction is there to give back.
        let Some(dst) = state.zspage_with_backed_room(Some(src)) else { break };
        state.zspages[src].as_ref()?.read(mm, usize::from(obj) * shape.size, &mut buf);
        let target = state.zspages[dst].as_mut()?;
        let Some(new_obj) = target.alloc_obj(mm, shape, raw) else { break };
        target.write(mm, usize::from(new_obj) * shape.size, &buf);
        state.zspages[src].as_mut()?.free_obj(mm, shape, obj);
        state.relocate(slot, dst, new_obj);
        state.regroup(dst);
        moved += 1;
    }
    match state.regroup_or_unlink(mm, src) {
        Some(pages) => Some(pages),
        None if moved > 0 => Some(Vec::new()),
        None => None,
    }
}

impl crate::ZsPool {
    /// Compacts the pool: moves objects out of sparsely used zspages and
    /// frees the emptied ones; returns the pages freed (Linux's
    /// `zs_compact`). Concurrent calls do nothing while one runs.
    pub fn zs_compact(&self) -> u64 {
        self.inner.compact()
    }
}
