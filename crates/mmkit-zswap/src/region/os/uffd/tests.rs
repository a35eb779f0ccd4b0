//! Tests for the userfaultfd bindings: the request numbers and layouts
//! against the kernel header's values, and missing and write-protect
//! faults read, decoded and resolved on a live descriptor (skipped, with a
//! message, where the kernel or process has none).

use super::super::mapping::Mapping;
use super::*;
use crate::PAGE_SIZE;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The request numbers are the header's, as a C compiler expands them
/// (`_IOR`'s direction bits differ on the architectures with their own
/// layout; `_IOWR`'s do not: 6 << 29 == 3 << 30).
#[test]
fn request_numbers_are_the_headers() {
    assert_eq!(UFFDIO_API.code, 0xc018_aa3f);
    assert_eq!(UFFDIO_REGISTER.code, 0xc020_aa00);
    assert_eq!(UFFDIO_UNREGISTER.code, if OWN_IOC_LAYOUT { 0x4010_aa01 } else { 0x8010_aa01 });
    assert_eq!(UFFDIO_WAKE.code, if OWN_IOC_LAYOUT { 0x4010_aa02 } else { 0x8010_aa02 });
    assert_eq!(UFFDIO_COPY.code, 0xc028_aa03);
    assert_eq!(UFFDIO_ZEROPAGE.code, 0xc020_aa04);
    assert_eq!(UFFDIO_WRITEPROTECT.code, 0xc018_aa06);
    assert_eq!(UFFDIO_POISON.code, 0xc020_aa08);
    assert_eq!(USERFAULTFD_IOC_NEW, if OWN_IOC_LAYOUT { 0x2000_aa00 } else { 0xaa00 });
}

#[test]
fn layouts_are_the_headers() {
    use core::mem::offset_of;
    assert_eq!(size_of::<uffd_msg>(), 32);
    assert_eq!(offset_of!(uffd_msg, arg), 8);
    assert_eq!(size_of::<uffd_msg_arg>(), 24);
    assert_eq!(offset_of!(uffd_msg_pagefault, address), 8);
    assert_eq!(offset_of!(uffd_msg_pagefault, ptid), 16);
    assert_eq!(size_of::<uffdio_api>(), 24);
    assert_eq!(size_of::<uffdio_range>(), 16);
    assert_eq!(size_of::<uffdio_register>(), 32);
    assert_eq!(size_of::<uffdio_copy>(), 40);
    assert_eq!(offset_of!(uffdio_copy, copy), 32);
    assert_eq!(size_of::<uffdio_zeropage>(), 32);
    assert_eq!(size_of::<uffdio_writeprotect>(), 24);
    assert_eq!(size_of::<uffdio_poison>(), 32);
}

/// A non-blocking descriptor with `features`, or `None` (and a message)
/// where this kernel or process has none.
fn uffd(features: Option<FeatureFlags>) -> Option<Uffd> {
    let builder = UffdBuilder::new().close_on_exec(true).non_blocking(true);
    match features.map_or(builder, |f| builder.require_features(f)).create() {
        Ok(uffd) => Some(uffd),
        Err(e) => {
            eprintln!("skipped: userfaultfd unavailable: {e}");
            None
        }
    }
}

/// The next event, polling for up to 10 s.
fn next_event(uffd: &Uffd, events: &mut EventBuffer) -> Event {
    let start = Instant::now();
    loop {
        if let Some(event) = uffd.read_events(events).unwrap().next() {
            return event;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "no event");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn fault(kind: FaultKind, map: &Mapping, index: usize) -> Event {
    Event::Pagefault { kind, addr: map.page_addr(index) }
}

#[test]
fn missing_faults_are_read_and_resolved() {
    let Some(uffd) = uffd(None) else { return };
    let mut events = EventBuffer::new(4);
    // Non-blocking with nothing pending: EAGAIN reads as no events.
    assert_eq!(uffd.read_events(&mut events).unwrap().count(), 0);
    let map = Arc::new(Mapping::new(2 * PAGE_SIZE).unwrap());
    let ioctls = uffd.register_with_mode(map.as_ptr().cast(), map.len(), RegisterMode::MISSING).unwrap();
    assert!(ioctls.contains(IoctlFlags::COPY));

    let reader = std::thread::spawn({
        let map = map.clone();
        move || map.load_u64(PAGE_SIZE + 8)
    });
    assert_eq!(next_event(&uffd, &mut events), fault(FaultKind::Missing, &map, 1));
    let mut page = vec![0u8; PAGE_SIZE];
    page[8..16].copy_from_slice(&0x1234_5678_9abc_def0u64.to_ne_bytes());
    // SAFETY: page 1 of the registered mapping, which Rust reaches only
    // through atomics.
    assert_eq!(unsafe { uffd.copy(map.page_addr(1), &page, true, false) }.unwrap(), PAGE_SIZE);
    assert_eq!(reader.join().unwrap(), 0x1234_5678_9abc_def0);

    // A present page is never replaced.
    // SAFETY: as above.
    let again = unsafe { uffd.zeropage(map.page_addr(1), PAGE_SIZE, false) }.unwrap_err();
    assert_eq!(again.raw_os_error(), Some(libc::EEXIST));
    // SAFETY: as above.
    let again = unsafe { uffd.copy(map.page_addr(1), &page, false, false) }.unwrap_err();
    assert_eq!(again.raw_os_error(), Some(libc::EEXIST));

    let reader = std::thread::spawn({
        let map = map.clone();
        move || map.load_u64(0)
    });
    assert_eq!(next_event(&uffd, &mut events), fault(FaultKind::Missing, &map, 0));
    // SAFETY: as above, page 0.
    assert_eq!(unsafe { uffd.zeropage(map.page_addr(0), PAGE_SIZE, false) }.unwrap(), PAGE_SIZE);
    uffd.wake(map.page_addr(0), PAGE_SIZE).unwrap();
    assert_eq!(reader.join().unwrap(), 0);
}

#[test]
fn write_protect_faults_are_read_and_resolved() {
    let Some(uffd) = uffd(Some(FeatureFlags::PAGEFAULT_FLAG_WP)) else { return };
    let map = Arc::new(Mapping::new(PAGE_SIZE).unwrap());
    let mode = RegisterMode::MISSING | RegisterMode::WRITE_PROTECT;
    let ioctls = match uffd.register_with_mode(map.as_ptr().cast(), map.len(), mode) {
        Ok(ioctls) => ioctls,
        Err(e) => return eprintln!("skipped: no write-protection for anonymous memory: {e}"),
    };
    assert!(ioctls.contains(IoctlFlags::COPY | IoctlFlags::WRITE_PROTECT));
    // Placed write-protected, as the region loads pages.
    // SAFETY: the registered mapping, which Rust reaches only through
    // atomics.
    unsafe { uffd.copy(map.page_addr(0), &[7u8; PAGE_SIZE], true, true) }.unwrap();

    let writer = std::thread::spawn({
        let map = map.clone();
        move || map.store_u64(0, 42)
    });
    let mut events = EventBuffer::new(1);
    assert_eq!(next_event(&uffd, &mut events), fault(FaultKind::WriteProtected, &map, 0));
    uffd.remove_write_protection(map.page_addr(0), PAGE_SIZE, true).unwrap();
    writer.join().unwrap();
    assert_eq!(map.load_u64(0), 42);
    assert_eq!(map.load_u64(8), u64::from_ne_bytes([7; 8]));
    uffd.write_protect(map.page_addr(0), PAGE_SIZE).unwrap();
}

#[test]
fn a_partial_copy_reports_the_pages_placed() {
    // Page 2 of 4 is present: the copy places pages 0 and 1 and stops with
    // EAGAIN; those two pages are in place and must be counted as such.
    let Some(uffd) = uffd(None) else { return };
    let map = Mapping::new(4 * PAGE_SIZE).unwrap();
    uffd.register_with_mode(map.as_ptr().cast(), map.len(), RegisterMode::MISSING).unwrap();
    // SAFETY: page 2 of the registered mapping, which Rust reaches only
    // through atomics.
    unsafe { uffd.zeropage(map.page_addr(2), PAGE_SIZE, false) }.unwrap();
    let src = vec![3u8; 4 * PAGE_SIZE];
    // SAFETY: as above, pages 0..4.
    assert_eq!(unsafe { uffd.copy(map.page_addr(0), &src, false, false) }.unwrap(), 2 * PAGE_SIZE);
    assert_eq!(map.load_u64(PAGE_SIZE), u64::from_ne_bytes([3; 8]));
    assert_eq!(map.mapped_pages().unwrap(), 3);
    // Nothing placed at all: the error.
    // SAFETY: as above, pages 2..4.
    let e = unsafe { uffd.copy(map.page_addr(2), &src[..2 * PAGE_SIZE], false, false) }.unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
}

#[test]
fn missing_writes_are_told_from_reads() {
    let Some(uffd) = uffd(None) else { return };
    let map = Arc::new(Mapping::new(PAGE_SIZE).unwrap());
    uffd.register_with_mode(map.as_ptr().cast(), map.len(), RegisterMode::MISSING).unwrap();
    let writer = std::thread::spawn({
        let map = map.clone();
        move || map.store_u64(0, 5)
    });
    let mut events = EventBuffer::new(1);
    assert_eq!(next_event(&uffd, &mut events), fault(FaultKind::MissingWrite, &map, 0));
    // SAFETY: the registered mapping, which Rust reaches only through
    // atomics.
    unsafe { uffd.zeropage(map.page_addr(0), PAGE_SIZE, true) }.unwrap();
    writer.join().unwrap();
    assert_eq!(map.load_u64(0), 5);
}
