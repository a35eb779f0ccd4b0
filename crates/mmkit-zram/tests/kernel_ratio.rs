//! The same real data written to mmkit's zram and to a private kernel zram
//! device with the same algorithm: `orig_data_size`, `same_pages` and
//! `huge_pages` must agree within 1 %, mmkit's compressed bytes must be
//! within 1 % of the kernel's and its `mem_used_total` no larger. Skips (with a message) where the kernel
//! device cannot be made: no zram module, not root, or no
//! `/sys/class/zram-control`. Never touches `/dev/zram0`.

use mmkit_testkit::kernel_zram::{real_pages, AlignedPage, KernelZram};
use mmkit_zram::{Algorithm, Zram, ZramConfig, PAGE_SIZE};

/// 32 MiB of the system's libraries, plus zero and same-filled pages.
fn data() -> Vec<Vec<u8>> {
    let mut pages = real_pages(8192);
    for i in 0..pages.len() / 64 {
        pages[i * 64] = vec![0; PAGE_SIZE];
        pages[i * 64 + 1] = (i as u64 * 0x0101_0101).to_ne_bytes().repeat(PAGE_SIZE / 8);
    }
    pages
}

fn within(ours: u64, theirs: u64, fraction: f64) -> bool {
    (ours as f64 - theirs as f64).abs() <= fraction * (theirs.max(1) as f64)
}

#[test]
fn mm_stat_agrees_with_the_kernels_zram_on_the_same_data() {
    let pages = data();
    let bytes = (pages.len() * PAGE_SIZE) as u64;
    let kernel = match KernelZram::add("lz4", bytes) {
        Ok(dev) => dev,
        Err(why) => {
            eprintln!("skipped: no private kernel zram device ({why})");
            return;
        }
    };
    let ours =
        Zram::with_own_memory(ZramConfig { disksize: bytes, algorithm: Algorithm::Lz4, ..ZramConfig::default() })
            .unwrap();
    let mut buf = AlignedPage::new();
    for (i, page) in pages.iter().enumerate() {
        buf.bytes_mut().copy_from_slice(page);
        kernel.write_page(i as u64, buf.bytes()).unwrap();
        ours.open().unwrap().write((i * PAGE_SIZE) as u64, page).unwrap();
    }
    let theirs = kernel.mm_stat().expect("the kernel device's mm_stat");
    let s = ours.mm_stat_values();
    let report = format!(
        "mmkit: orig {} compr {} used {} same {} huge {}; kernel: orig {} compr {} used {} same {} huge {}",
        s.orig_data_size,
        s.compr_data_size,
        s.mem_used_total,
        s.same_pages,
        s.huge_pages,
        theirs[0],
        theirs[1],
        theirs[2],
        theirs[5],
        theirs[7]
    );
    eprintln!("{report}");
    assert!(within(s.orig_data_size, theirs[0], 0.01), "orig_data_size: {report}");
    assert!(within(s.same_pages, theirs[5], 0.01), "same_pages: {report}");
    assert!(within(s.huge_pages, theirs[7], 0.01), "huge_pages: {report}");
    assert!(within(s.compr_data_size, theirs[1], 0.01), "compr_data_size: {report}");
    // Same objects in the same size classes, but zspages here take their
    // pages as objects reach them: never more memory than the kernel's.
    assert!(s.mem_used_total <= theirs[2], "mem_used_total: {report}");
}
