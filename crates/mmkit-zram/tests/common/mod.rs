//! Page contents shared by the zram test files: pages of the test binary
//! (real, compressible data) and noise (incompressible).

use mmkit_zram::PAGE_SIZE;

/// `n` pages of this test binary from page `skip` on.
pub fn exe_pages(skip: usize, n: usize) -> Vec<Vec<u8>> {
    let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
    exe.chunks_exact(PAGE_SIZE).skip(skip).take(n).map(<[u8]>::to_vec).collect()
}

/// A page of xorshift noise: stored raw (huge) by every algorithm.
pub fn noise(seed: u64) -> Vec<u8> {
    mmkit_testkit::pages::noise_page(seed, PAGE_SIZE)
}
