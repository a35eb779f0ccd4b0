//! The same-filled check zram, zswap and dictionary training share, and
//! the fill that restores such a page
//! (Linux's `page_same_filled` in `drivers/block/zram/zram_drv.c`, and
//! zswap's `zswap_is_page_same_filled` before it moved to zeromap): a page
//! of one repeated 8-byte word is kept as that word, not compressed.
//!
//! Owns only the scan. Every write runs it first, so it must be cheap on
//! both outcomes: a page that differs should be rejected within its first
//! words, and a same-filled page (the common zero page) scanned whole
//! without a branch per word.

/// The repeated word of `page` when every 8-byte word of it is the same;
/// `None` for a page that differs, an empty one or a length that is not a
/// multiple of 8.
///
/// ```
/// use mmkit_compress::same_filled;
///
/// assert_eq!(same_filled(&[0u8; 4096]), Some(0));
/// let mut page = 0x0102_0304_0506_0708u64.to_ne_bytes().repeat(512);
/// assert_eq!(same_filled(&page), Some(0x0102_0304_0506_0708));
/// page[4095] ^= 1;
/// assert_eq!(same_filled(&page), None);
/// ```
#[inline]
pub fn same_filled(page: &[u8]) -> Option<u64> {
    if page.len() % 8 != 0 {
        return None;
    }
    let first = word_at(page.get(..8)?);
    // Like Linux, look at the last word before the rest: a page that
    // differs anywhere usually differs there too.
    if word_at(&page[page.len() - 8..]) != first {
        return None;
    }
    // Every word equals the first exactly when the page equals itself
    // shifted by one word. One `memcmp` of the two views runs in the C
    // library's vector code (32 bytes a compare with AVX2) and still stops
    // at the first difference; a word-by-word loop was a compare and a
    // branch per word, about 1.7 instructions per word.
    (page[8..] == page[..page.len() - 8]).then_some(first)
}

/// Writes `word` over every 8-byte word of `page`: the contents of a
/// same-filled page, back from the word [`same_filled`] returned.
///
/// ```
/// use mmkit_compress::{fill_same, same_filled};
///
/// let mut page = [0u8; 4096];
/// fill_same(&mut page, 0x0102_0304_0506_0708);
/// assert_eq!(same_filled(&page), Some(0x0102_0304_0506_0708));
/// ```
#[inline]
pub fn fill_same(page: &mut [u8], word: u64) {
    for w in page.chunks_exact_mut(8) {
        w.copy_from_slice(&word.to_ne_bytes());
    }
}

#[inline(always)]
fn word_at(bytes: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[..8]);
    u64::from_ne_bytes(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plain definition the scan must agree with.
    fn reference(page: &[u8]) -> Option<u64> {
        if page.is_empty() || page.len() % 8 != 0 {
            return None;
        }
        let first = word_at(page);
        page.chunks_exact(8).all(|w| word_at(w) == first).then_some(first)
    }

    #[test]
    fn one_differing_byte_anywhere_is_found() {
        let word = 0xdead_beef_0bad_f00du64;
        for len in [16, 120, 128, 136, 256, 4096, 4096 + 64] {
            let page = word.to_ne_bytes().repeat(len / 8);
            assert_eq!(same_filled(&page), Some(word), "{len} bytes");
            for at in 0..len {
                let mut bad = page.clone();
                bad[at] ^= 0x40;
                assert_eq!(same_filled(&bad), None, "{len} bytes, byte {at} changed");
            }
        }
    }

    #[test]
    fn odd_lengths_and_empty_pages_are_not_same_filled() {
        assert_eq!(same_filled(&[]), None);
        for len in [1, 7, 9, 4095, 4097] {
            assert_eq!(same_filled(&vec![0; len]), None, "{len} bytes");
        }
    }

    #[test]
    fn agrees_with_the_word_by_word_definition() {
        let mut rng = mmkit_testkit::XorShift64::new(0x9e37_79b9_7f4a_7c15);
        let mut next = move || rng.next_u64();
        for _ in 0..2000 {
            let len = (next() % 80) as usize * 8;
            let mut page = (next() % 3).to_ne_bytes().repeat(len / 8);
            if next() % 2 == 0 && len > 0 {
                let at = (next() % len as u64) as usize;
                page[at] = next() as u8;
            }
            assert_eq!(same_filled(&page), reference(&page));
        }
    }
}
