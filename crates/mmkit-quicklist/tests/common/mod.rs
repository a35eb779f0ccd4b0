//! Access to the bytes of a page the quicklists handed out, for the test
//! files. Only the quicklists' own key takes a handed-out page back as a
//! block, so the test reaches the bytes as the page's holder would: by
//! its address.

use mmkit::{PageAllocator, Pfn};

/// Runs `f` on the page's bytes.
pub fn with_page<R>(mm: &PageAllocator, pfn: Pfn, f: impl FnOnce(&mut [u8]) -> R) -> R {
    let addr = mm.page_address(pfn).unwrap();
    // SAFETY: the test holds the page (the quicklists handed it out to it
    // and nobody else has its PFN), the address is valid for one page while
    // the map lives, and no other reference to these bytes exists during `f`.
    let bytes = unsafe { std::slice::from_raw_parts_mut(addr.as_ptr(), mm.geometry().page_size() as usize) };
    f(bytes)
}

/// Writes one byte of the page.
pub fn write_byte(mm: &PageAllocator, pfn: Pfn, offset: usize, value: u8) {
    with_page(mm, pfn, |bytes| bytes[offset] = value);
}
