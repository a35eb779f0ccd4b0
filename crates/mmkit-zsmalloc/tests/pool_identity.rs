//! Handles name their pool: a handle from another pool, or from a pool that
//! was dropped, is refused by every call that takes one, and the refusal
//! changes nothing in either pool (issue 22, finding 3).

use mmkit::{Backing, Gfp, HugePages, MemoryMapBuilder, PageAllocator};
use mmkit_zsmalloc::{Handle, ZsError, ZsPool};
use std::sync::Arc;

fn gfp() -> Gfp {
    Gfp::NOIO | Gfp::HIGHMEM | Gfp::MOVABLE
}

fn real_map(bytes: u64) -> Arc<PageAllocator> {
    Arc::new(MemoryMapBuilder::with_memory(bytes).backing(Backing::RealMemory(HugePages::None)).build().unwrap())
}

fn read(pool: &ZsPool, h: Handle) -> Result<Vec<u8>, ZsError> {
    let mut out = vec![0; 4096];
    let n = pool.zs_obj_read(h, &mut out)?;
    out.truncate(n);
    Ok(out)
}

/// Every call that takes a handle refuses `foreign` on `pool`, and `pool`'s
/// own object `own` (holding `bytes`) is untouched afterwards.
fn refuses_everywhere(pool: &ZsPool, foreign: Handle, own: Handle, bytes: &[u8]) {
    let pages = pool.zs_get_total_pages();
    let invalid = Err(ZsError::InvalidHandle(foreign));
    assert_eq!(pool.zs_free(foreign), invalid);
    assert_eq!(pool.zs_free_deferred(foreign), invalid);
    assert_eq!(pool.zs_obj_read(foreign, &mut [0; 4096]), Err(ZsError::InvalidHandle(foreign)));
    assert_eq!(pool.zs_obj_read_with(foreign, &mut [0; 4096], |b| b.len()), Err(ZsError::InvalidHandle(foreign)));
    assert_eq!(pool.zs_obj_write(foreign, &[0xaa; 8]), invalid);
    pool.zs_free_deferred_flush();
    assert_eq!(pool.deferred_stats().invalid, 0, "nothing foreign was queued");
    assert_eq!(read(pool, own).unwrap(), bytes, "the pool's own object is untouched");
    assert_eq!(pool.zs_get_total_pages(), pages);
    pool.check_invariants().unwrap();
}

#[test]
fn a_handle_from_another_pool_is_refused_by_every_call() {
    let mm = real_map(32 << 20);
    let a = ZsPool::zs_create_pool("a", mm.clone()).unwrap();
    let b = ZsPool::zs_create_pool("b", mm.clone()).unwrap();
    let ha = a.zs_malloc_copy(&[1; 100], gfp(), 0).unwrap();
    let hb = b.zs_malloc_copy(&[2; 100], gfp(), 0).unwrap();
    // Same size, same class, same first slot: only the pool tells them apart.
    assert_ne!(ha, hb, "two pools must not hand out the same handle");
    refuses_everywhere(&b, ha, hb, &[2; 100]);
    refuses_everywhere(&a, hb, ha, &[1; 100]);
    // The raw word round-trips (zram stores it) and keeps naming its pool.
    let raw = Handle::from_raw(ha.to_raw()).unwrap();
    assert_eq!(b.zs_free(raw), Err(ZsError::InvalidHandle(raw)));
    a.zs_free(raw).unwrap();
    b.zs_free(hb).unwrap();
}

#[test]
fn a_handle_from_a_dropped_pool_is_refused() {
    let mm = real_map(32 << 20);
    let old = ZsPool::zs_create_pool("old", mm.clone()).unwrap();
    let stale = old.zs_malloc_copy(&[3; 64], gfp(), 0).unwrap();
    drop(old);
    let new = ZsPool::zs_create_pool("new", mm.clone()).unwrap();
    let own = new.zs_malloc_copy(&[4; 64], gfp(), 0).unwrap();
    refuses_everywhere(&new, stale, own, &[4; 64]);
    new.zs_free(own).unwrap();
}

#[test]
fn many_pools_keep_distinct_handles() {
    let mm = real_map(64 << 20);
    let pools: Vec<ZsPool> = (0..16).map(|i| ZsPool::zs_create_pool(&format!("p{i}"), mm.clone()).unwrap()).collect();
    let handles: Vec<Handle> = pools.iter().map(|p| p.zs_malloc_copy(&[7; 40], gfp(), 0).unwrap()).collect();
    for (i, p) in pools.iter().enumerate() {
        for (j, &h) in handles.iter().enumerate() {
            if i != j {
                assert_eq!(p.zs_obj_write(h, &[0]), Err(ZsError::InvalidHandle(h)));
            }
        }
    }
    for (p, h) in pools.iter().zip(handles) {
        p.zs_free(h).unwrap();
        p.check_invariants().unwrap();
    }
}
