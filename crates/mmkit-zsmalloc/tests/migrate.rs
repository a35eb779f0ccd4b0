//! Contiguous allocation through occupied zspages: the embedder's migrator
//! hands pages owned by zsmalloc to the pool (`zs_migrate_page`), every
//! other page to `CopyMigrator`. After `alloc_contig_range` has collected a
//! range full of zspage pages, every object reads back intact.

use mmkit::Blocks;
use mmkit::{
    Backing, Contig, CopyMigrator, Gfp, HugePages, MemoryMapBuilder, MigrateError, MigrateRequest, MigrateType,
    Migrator, PageAllocator, Pfn, Report,
};
use mmkit_zsmalloc::{Handle, ZsPool};
use std::collections::HashSet;
use std::sync::{Arc, OnceLock, Weak};

/// The embedder's migrator: zsmalloc's pages to their pool, the rest to
/// the default migrator. It learns its pool after the allocator is built.
struct Dispatch {
    pool: Arc<OnceLock<Weak<ZsPool>>>,
    other: CopyMigrator<fn(Pfn, Pfn, u32)>,
}

impl Migrator for Dispatch {
    fn migrate_page(&self, alloc: &PageAllocator, request: &MigrateRequest) -> Result<Pfn, MigrateError> {
        let pool = self.pool.get().and_then(Weak::upgrade);
        let Some(pool) = pool.filter(|pool| Blocks::new(alloc).page_owner(request.pfn) == Some(pool.owner())) else {
            return self.other.migrate_page(alloc, request);
        };
        pool.zs_migrate_page(request.pfn, request.gfp, request.nid).map_err(|_| MigrateError::Refused(request.pfn))
    }
}

fn pattern(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i * 7 + j * 3) as u8).collect()
}

#[test]
fn a_contiguous_range_is_collected_through_live_zspages() {
    let slot: Arc<OnceLock<Weak<ZsPool>>> = Arc::new(OnceLock::new());
    let migrator = Dispatch { pool: slot.clone(), other: CopyMigrator::new(|_, _, _| {}) };
    let mm: Arc<PageAllocator> = Arc::new(
        MemoryMapBuilder::with_memory(64 << 20)
            .backing(Backing::RealMemory(HugePages::None))
            .migrator(migrator)
            .build()
            .unwrap(),
    );
    let pool = Arc::new(ZsPool::zs_create_pool("migrate", mm.clone()).unwrap());
    slot.set(Arc::downgrade(&pool)).unwrap();
    let gfp = Gfp::NOIO | Gfp::HIGHMEM | Gfp::MOVABLE;
    let objects: Vec<(Handle, Vec<u8>)> = (0..3000)
        .map(|i| {
            let len = 100 + (i * 37) % 3900;
            let h = pool.zs_malloc(len, gfp, 0).unwrap();
            let data = pattern(i, len);
            pool.zs_obj_write(&h, &data).unwrap();
            (h, data)
        })
        .collect();
    // A pageblock that holds zspage pages.
    let pb = 1u64 << mm.geometry().pageblock_order;
    let owned: HashSet<u64> = (mm.start_pfn().0..mm.end_pfn().0)
        .filter(|&p| Blocks::new(&mm).page_owner(Pfn(p)) == Some(pool.owner()))
        .map(|p| p & !(pb - 1))
        .collect();
    let start = *owned.iter().min().unwrap();
    let in_range = (start..start + pb).filter(|&p| Blocks::new(&mm).page_owner(Pfn(p)) == Some(pool.owner())).count();
    assert!(in_range > 100, "the range is full of zspage pages ({in_range})");
    let pages_before = pool.zs_get_total_pages();

    Contig::new(&mm).alloc_contig_range(Pfn(start), Pfn(start + pb), MigrateType::Movable, gfp).unwrap();

    assert!(
        (start..start + pb).all(|p| Blocks::new(&mm).page_owner(Pfn(p)).is_none()),
        "every zspage page left the range"
    );
    assert_eq!(pool.zs_get_total_pages(), pages_before);
    pool.check_invariants().unwrap();
    let mut out = vec![0; 4096];
    for (h, data) in &objects {
        let n = pool.zs_obj_read(h, &mut out).unwrap();
        assert_eq!(&out[..n], &data[..], "object {h} after migration");
    }
    Contig::new(&mm).free_contig_range(Pfn(start), pb).unwrap();
    assert_eq!(pool.zs_migrate_page(Pfn(start), gfp, 0).unwrap_err(), mmkit_zsmalloc::ZsError::UnknownPage(Pfn(start)));
    for (h, _) in objects {
        pool.zs_free(h).unwrap();
    }
    assert_eq!(pool.zs_get_total_pages(), 0);
    Report::new(&mm).check_invariants().unwrap();
}
