//! Access to the bytes of a page the quicklists handed out, for the test
//! files: the page is taken back as a block, read or written, and handed
//! out again, all through the allocator's public owned-block API.

use mmkit::{PageAllocator, Pfn};
use mmkit_quicklist::QUICKLIST_OWNER;

/// Runs `f` on the page's bytes.
pub fn with_page<R>(mm: &PageAllocator, pfn: Pfn, f: impl FnOnce(&mut [u8]) -> R) -> R {
    let mut block = mm.take_back_block(QUICKLIST_OWNER, pfn, 0).unwrap();
    let result = f(mm.block_bytes_mut(&mut block).unwrap());
    assert_eq!(mm.hand_out_block(block).unwrap(), pfn);
    result
}

/// Writes one byte of the page.
pub fn write_byte(mm: &PageAllocator, pfn: Pfn, offset: usize, value: u8) {
    with_page(mm, pfn, |bytes| bytes[offset] = value);
}
