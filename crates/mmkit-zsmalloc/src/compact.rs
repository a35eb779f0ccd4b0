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
use crate::size_class::ClassState;
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
    let src = state.groups.emptiest()?;
    let mut moved = 0;
    // Objects never handed out (`used` and above) hold no header.
    for obj in 0..state.zspage(src)?.used {
        let Some(slot) = state.live_slot(mm, src, obj) else { continue };
        // Destination: the fullest zspage with room other than the source
        // (`isolate_dst_zspage` scans from ZS_INUSE_RATIO_99 down).
        // Only into objects the destination's pages already hold: growing
        // a chain would take pages, which compaction is there to give back.
        let Some(dst) = state.zspage_with_backed_room(Some(src)) else { break };
        if !state.move_object(mm, src, obj, slot, dst) {
            break;
        }
        state.regroup(dst);
        moved += 1;
    }
    let mut emptied = Vec::new();
    state.settle(src, &mut emptied);
    match emptied.is_empty() {
        false => Some(emptied),
        true if moved > 0 => Some(Vec::new()),
        true => None,
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

#[cfg(test)]
mod tests {
    use crate::{ZsConfig, ZsPool};
    use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder};
    use std::sync::Arc;

    fn bytes(tag: usize, len: usize) -> Vec<u8> {
        (0..len).map(|i| (tag * 31 + i) as u8).collect()
    }

    /// A free leaves its object's header in place, so a freed object can
    /// name a slot that lives elsewhere now. Compaction must take only
    /// objects whose slot points back at them: moving such a freed object
    /// would point the live slot at garbage.
    #[test]
    fn compaction_moves_no_freed_object_whose_old_slot_lives_elsewhere() {
        let mm = Arc::new(
            MemoryMapBuilder::with_memory(16 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap(),
        );
        let (pool, key) = ZsPool::with_raw_key("stale", mm, ZsConfig::default()).unwrap();
        let (len, gfp) = (1100, Gfp::NOIO);
        let class = pool.zs_lookup_class_index(len);
        let objs = pool.inner.table.shape(class).objs_per_zspage;
        assert!(objs >= 4, "{objs}");
        // Three full zspages, 0, 1 and 2, in allocation order.
        let mut words: Vec<Option<u64>> =
            (0..3 * objs).map(|i| Some(pool.zs_malloc_copy_raw(&key, &bytes(i, len), gfp, 0).unwrap())).collect();
        let free = |i: usize, words: &mut Vec<Option<u64>>| pool.zs_free_raw(&key, words[i].take().unwrap()).unwrap();
        // The first object of zspage 0, then enough of zspage 1 to put it a
        // fullness group below zspage 0: the slot freed last is handed out
        // first.
        let k = objs / 10 + 2;
        free(0, &mut words);
        for i in objs..objs + k {
            free(i, &mut words);
        }
        // That slot's new object goes to the fullest zspage with room:
        // zspage 0, in the object freed there. Zspage 1's object keeps the
        // header naming the slot.
        words.push(Some(pool.zs_malloc_copy_raw(&key, &bytes(99, len), gfp, 0).unwrap()));
        let (stale_slot, _, _) = crate::handle::raw_fields(words[3 * objs].unwrap());
        assert_eq!(stale_slot, objs + k - 1);
        {
            let state = pool.inner.lock(class);
            let stale_obj = (0..state.zspage(1).unwrap().used)
                .find(|&obj| {
                    let at = usize::from(obj) * state.shape.size;
                    crate::zspage::header_at(&pool.inner.mm, state.chain_of(1), 12, at) == stale_slot as u64 + 1
                })
                .expect("a freed object of zspage 1 names the slot");
            assert_eq!(state.live_slot(&pool.inner.mm, 1, stale_obj), None, "it is not taken as live");
        }
        // Zspage 1 emptiest (the source, two objects left), room for them
        // in zspage 2: compaction walks every object of zspage 1 and
        // empties it.
        for i in objs + k..2 * objs - 2 {
            free(i, &mut words);
        }
        free(2 * objs, &mut words);
        free(2 * objs + 1, &mut words);
        assert!(pool.zs_compact() > 0);
        pool.check_invariants().unwrap();
        let mut out = [0u8; 4096];
        for (i, word) in words.iter().enumerate() {
            if let Some(word) = *word {
                let tag = if i == 3 * objs { 99 } else { i };
                assert_eq!(pool.zs_obj_read_raw(&key, word, &mut out), Ok(len));
                assert_eq!(&out[..len], &bytes(tag, len)[..], "object {i}");
                pool.zs_free_raw(&key, word).unwrap();
            }
        }
        assert_eq!(pool.zs_get_total_pages(), 0);
    }
}
