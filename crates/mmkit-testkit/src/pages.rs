//! Page-sized test data and a view of what is resident: incompressible
//! noise pages, and the resident bytes of a range of this process read
//! from `/proc/self/pagemap`.
//!
//! Owns only helpers that several crates' tests would otherwise copy; knows
//! nothing of mmkit's types (callers pass addresses and lengths).

/// A page of xorshift noise of `len` bytes: incompressible, so every
/// compressor stores it raw.
pub fn noise_page(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Resident bytes of `len` bytes of this process's memory from `start`:
/// the 4 KiB pages whose `/proc/self/pagemap` entry says present (bit 63).
/// Exact to the range, where a mapping's `Rss` in `smaps` may include a
/// neighbour the kernel merged it with.
///
/// # Panics
/// If `/proc/self/pagemap` cannot be read (a test helper: the test fails).
pub fn resident_bytes(start: u64, len: u64) -> u64 {
    use std::io::{Read, Seek, SeekFrom};
    let os_page = 4096;
    let mut pagemap = std::fs::File::open("/proc/self/pagemap").expect("/proc/self/pagemap");
    pagemap.seek(SeekFrom::Start(start / os_page * 8)).expect("seek in pagemap");
    let mut entries = vec![0u8; (len / os_page * 8) as usize];
    pagemap.read_exact(&mut entries).expect("read pagemap");
    let present = entries.chunks_exact(8).filter(|e| e[7] >> 7 == 1).count();
    present as u64 * os_page
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn noise_is_deterministic_and_a_touched_buffer_is_resident() {
        assert_eq!(noise_page(7, 64), noise_page(7, 64));
        assert_ne!(noise_page(7, 64), noise_page(8, 64));
        let buffer = vec![1u8; 64 << 10];
        let start = buffer.as_ptr() as u64;
        let aligned = start.next_multiple_of(4096);
        assert!(resident_bytes(aligned, 32 << 10) >= 32 << 10);
    }
}
