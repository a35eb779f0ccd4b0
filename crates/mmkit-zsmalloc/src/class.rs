//! Size classes, computed as Linux's `mm/zsmalloc.c` computes them for the
//! page size: `ZS_MIN_ALLOC_SIZE` 32 bytes, a step of `PAGE_SIZE >> 8`
//! (16 bytes on 4 KiB pages), 255 classes; for each the zspage chain length
//! that wastes least (`calculate_zspage_chain_size`), classes merged when
//! their pages per zspage and objects per zspage agree (`can_merge`), and
//! the huge-class threshold.
//!
//! Owns only arithmetic: no pages, no locks.

/// Bytes of the in-object header (Linux's `ZS_HANDLE_SIZE`).
pub const ZS_HANDLE_SIZE: usize = 8;
/// Smallest object size (Linux's `ZS_MIN_ALLOC_SIZE` on 64-bit).
pub const ZS_MIN_ALLOC_SIZE: usize = 32;
/// log2 of the number of class steps per page (Linux's `CLASS_BITS`).
const CLASS_BITS: u32 = 8;
/// Default `CONFIG_ZSMALLOC_CHAIN_SIZE`.
pub const DEFAULT_CHAIN_SIZE: usize = 8;
/// Page sizes a pool can be made for (Linux builds zsmalloc with 4, 16
/// and 64 KiB pages): a zspage's object indices are 16 bits, which 32-byte
/// objects in a chain of 16 pages of more than 64 KiB would overflow.
pub const PAGE_SIZES: core::ops::RangeInclusive<usize> = 4096..=65536;
/// Chain sizes Linux's Kconfig allows.
pub const CHAIN_SIZES: core::ops::RangeInclusive<usize> = 4..=16;

/// One (unmerged) size class.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClassShape {
    /// Object size, header included.
    pub size: usize,
    /// Pages chained into one zspage.
    pub pages_per_zspage: usize,
    /// Objects one zspage holds.
    pub objs_per_zspage: usize,
}

impl ClassShape {
    /// One object per page: the object is stored alone and without header.
    pub fn is_huge(&self) -> bool {
        self.pages_per_zspage == 1 && self.objs_per_zspage == 1
    }
}

/// The class table of a pool: every size class and which merged class
/// serves it.
#[derive(Clone, Debug)]
pub struct ClassTable {
    page_size: usize,
    /// Shape of every class index `0..nr_classes`.
    shapes: Vec<ClassShape>,
    /// Class index `i` is served by class `merged_into[i]` (itself when it
    /// was not merged), as `pool->size_class[i]` points in Linux.
    merged_into: Vec<usize>,
    /// The serving class of every object size `0..=page_size` (header
    /// included): `class_for` as one load.
    by_size: Box<[u16]>,
    huge_class_size: usize,
}

impl ClassTable {
    /// The table for `page_size` (a power of two, at least 4 KiB) and
    /// zspage chains of at most `chain_size` pages.
    pub fn new(page_size: usize, chain_size: usize) -> Self {
        let delta = page_size >> CLASS_BITS;
        let max = page_size;
        let nr_classes = (max - ZS_MIN_ALLOC_SIZE).div_ceil(delta) + 1;
        let mut shapes = vec![ClassShape { size: 0, pages_per_zspage: 0, objs_per_zspage: 0 }; nr_classes];
        let mut merged_into = vec![0; nr_classes];
        let mut huge_class_size = 0;
        let mut prev: Option<usize> = None;
        // From the largest class down, as `zs_create_pool` does: a class
        // merges into the one above it when both have the same shape.
        for i in (0..nr_classes).rev() {
            let size = (ZS_MIN_ALLOC_SIZE + i * delta).min(max);
            let pages_per_zspage = chain_length(size, page_size, chain_size);
            let objs_per_zspage = pages_per_zspage * page_size / size;
            shapes[i] = ClassShape { size, pages_per_zspage, objs_per_zspage };
            // The first class from the top that is not one object in one
            // page: anything this big or bigger is stored as a huge object.
            // zs_malloc adds the header before the lookup, hence the
            // subtraction (Linux's comment in zs_create_pool).
            if huge_class_size == 0 && !(pages_per_zspage == 1 && objs_per_zspage == 1) {
                huge_class_size = size - (ZS_HANDLE_SIZE - 1);
            }
            merged_into[i] = match prev {
                Some(p)
                    if shapes[p].pages_per_zspage == pages_per_zspage
                        && shapes[p].objs_per_zspage == objs_per_zspage =>
                {
                    merged_into[p]
                }
                _ => {
                    prev = Some(i);
                    i
                }
            };
        }
        let lookup = |size: usize| {
            let idx = if size > ZS_MIN_ALLOC_SIZE { (size - ZS_MIN_ALLOC_SIZE).div_ceil(delta) } else { 0 };
            merged_into[idx.min(nr_classes - 1)]
        };
        let by_size = (0..=max).map(|size| lookup(size) as u16).collect();
        Self { page_size, shapes, merged_into, by_size, huge_class_size }
    }

    /// Size classes before merging (255 on 4 KiB pages).
    pub fn nr_classes(&self) -> usize {
        self.shapes.len()
    }

    /// Classes left after merging.
    pub fn nr_distinct(&self) -> usize {
        (0..self.shapes.len()).filter(|&i| self.merged_into[i] == i).count()
    }

    /// Shape of class index `i`.
    pub fn shape(&self, i: usize) -> ClassShape {
        self.shapes[i]
    }

    /// The class that serves class index `i`.
    pub fn serving(&self, i: usize) -> usize {
        self.merged_into[i]
    }

    /// Linux's `zs_huge_class_size`: objects of at least this many bytes
    /// get a page of their own.
    pub fn huge_class_size(&self) -> usize {
        self.huge_class_size
    }

    /// Page size the table was made for.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// The class index for an object of `size` bytes, header included
    /// (Linux's `get_size_class_index`), then the class serving it.
    #[inline]
    pub fn class_for(&self, size: usize) -> usize {
        match self.by_size.get(size) {
            Some(&class) => usize::from(class),
            None => self.merged_into[self.shapes.len() - 1],
        }
    }
}

/// Linux's `calculate_zspage_chain_size`: a power-of-two size fills one
/// page exactly; otherwise the chain of `1..=chain_size` pages that leaves
/// the least tail waste (the first such, on ties).
fn chain_length(size: usize, page_size: usize, chain_size: usize) -> usize {
    if size.is_power_of_two() {
        return 1;
    }
    let mut best = (usize::MAX, 1);
    for pages in 1..=chain_size {
        let waste = (pages * page_size) % size;
        if waste < best.0 {
            best = (waste, pages);
        }
    }
    best.1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linux_counts_for_4k_pages() {
        for (chain, distinct, huge) in [(4, 69, 3257), (8, 119, 3625), (16, 192, 3833)] {
            let t = ClassTable::new(4096, chain);
            assert_eq!(t.nr_classes(), 255);
            assert_eq!(t.nr_distinct(), distinct, "chain {chain}");
            assert_eq!(t.huge_class_size(), huge, "chain {chain}");
        }
    }

    #[test]
    fn lookups_round_up_and_land_on_a_serving_class() {
        let t = ClassTable::new(4096, 8);
        assert_eq!(t.shape(t.class_for(1)).size, 32);
        assert_eq!(t.shape(t.class_for(32)).size, 32);
        assert!(t.shape(t.class_for(33)).size >= 48);
        assert_eq!(t.shape(t.class_for(4096)).size, 4096);
        assert!(t.shape(t.class_for(4096)).is_huge());
        for size in 1..=4096 {
            let c = t.class_for(size);
            assert_eq!(t.serving(c), c);
            assert!(t.shape(c).size >= size, "size {size} in class of {}", t.shape(c).size);
        }
    }

    #[test]
    fn the_lookup_table_agrees_with_linux_arithmetic() {
        for (page_size, chain) in [(4096, 4), (4096, 8), (4096, 16), (16384, 8), (65536, 8)] {
            let t = ClassTable::new(page_size, chain);
            for size in 0..=page_size + 64 {
                let idx = if size > ZS_MIN_ALLOC_SIZE {
                    (size - ZS_MIN_ALLOC_SIZE).div_ceil(page_size >> CLASS_BITS)
                } else {
                    0
                };
                assert_eq!(t.class_for(size), t.merged_into[idx.min(t.nr_classes() - 1)], "size {size}");
            }
        }
    }

    #[test]
    fn chain_length_prefers_least_waste() {
        assert_eq!(chain_length(512, 4096, 8), 1);
        // 3 pages hold exactly 8 objects of 1536 bytes.
        assert_eq!(chain_length(1536, 4096, 8), 3);
    }
}
