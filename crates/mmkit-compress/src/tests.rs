//! Round trips of every algorithm, with and without a dictionary, and the
//! refusals: bad levels and names, corrupt and truncated input, a frame
//! under the wrong dictionary.

use super::*;

fn xorshift(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// Pages drawn from a shared vocabulary of 8-byte words with runs of
/// random bytes between them: what a dictionary can learn from and pages
/// it has not seen still share.
pub(crate) fn vocabulary_pages(n: usize, mut state: u64) -> Vec<Vec<u8>> {
    let mut vocab_state = 0x2545_f491_4f6c_dd1d;
    let vocab: Vec<[u8; 8]> = (0..256).map(|_| xorshift(&mut vocab_state).to_le_bytes()).collect();
    (0..n)
        .map(|_| {
            let mut page = Vec::with_capacity(4096);
            while page.len() < 4096 {
                let r = xorshift(&mut state);
                if r % 4 == 0 {
                    page.push(r as u8);
                } else {
                    page.extend_from_slice(&vocab[(r >> 8) as usize % vocab.len()]);
                }
            }
            page.truncate(4096);
            page
        })
        .collect()
}

fn random_page(mut state: u64) -> Vec<u8> {
    (0..4096).map(|_| xorshift(&mut state) as u8).collect()
}

fn every_compressor(dict: &Dictionary) -> Vec<Compressor> {
    let mut all: Vec<Compressor> = [
        Algorithm::Lz4,
        Algorithm::Lz4Flex,
        Algorithm::Lz4Hc { level: 1 },
        Algorithm::Lz4Hc { level: 9 },
        Algorithm::Lz4Hc { level: 12 },
        Algorithm::Zstd { level: 1 },
        Algorithm::Zstd { level: 3 },
        Algorithm::Zstd { level: 19 },
    ]
    .into_iter()
    .map(Compressor::new)
    .collect();
    for level in [1, 3, 19] {
        all.push(Compressor::with_dictionary(Algorithm::Zstd { level }, dict.clone()).unwrap());
    }
    all
}

#[test]
fn every_algorithm_round_trips_and_refuses_truncated_or_random_input() {
    let dict = Dictionary::train(vocabulary_pages(300, 1).iter().map(Vec::as_slice), 8 << 10).unwrap();
    let pages = vocabulary_pages(8, 99);
    let mut simple: Vec<u8> = (0..4096).map(|i| (i % 17) as u8).collect();
    simple[100] = 200;
    for comp in every_compressor(&dict) {
        for page in pages.iter().chain([&simple]) {
            let packed = comp.compress(page, <[u8]>::to_vec).unwrap_or_else(|| panic!("{comp:?} did not shrink"));
            let mut back = vec![0; 4096];
            assert!(comp.decompress(&packed, &mut back), "{comp:?}");
            assert_eq!(&back, page, "{comp:?}");
            for cut in [0, 1, packed.len() / 2, packed.len() - 1] {
                assert!(!comp.decompress(&packed[..cut], &mut back), "{comp:?}: truncated to {cut} is refused");
            }
            let mut short = vec![0; 4095];
            assert!(!comp.decompress(&packed, &mut short), "{comp:?}: a page that is not filled exactly");
            let mut long = vec![0; 4097];
            assert!(!comp.decompress(&packed, &mut long), "{comp:?}: a page that is not filled exactly");
        }
        let random = random_page(7);
        assert!(comp.compress(&random, |_| ()).is_none(), "{comp:?}: incompressible data is not grown");
        let mut back = vec![0; 4096];
        assert!(!comp.decompress(&random, &mut back), "{comp:?}: random bytes are not a stream");
        assert!(!comp.decompress(&[], &mut back), "{comp:?}: nothing is not a page");
    }
}

#[test]
fn lz4hc_shrinks_at_least_as_much_as_lz4_and_is_read_as_lz4() {
    let pages = vocabulary_pages(16, 5);
    let total = |algo: Algorithm| -> usize { pages.iter().map(|p| algo.compress(p, <[u8]>::len).unwrap()).sum() };
    let lz4 = total(Algorithm::Lz4);
    let hc = total(Algorithm::Lz4Hc { level: 12 });
    assert!(hc < lz4, "lz4hc:12 {hc} bytes, lz4 {lz4}");
    let packed = Algorithm::Lz4Hc { level: 9 }.compress(&pages[0], <[u8]>::to_vec).unwrap();
    let mut back = vec![0; 4096];
    assert!(Algorithm::Lz4.decompress(&packed, &mut back));
    assert_eq!(back, pages[0]);
}

#[test]
fn a_frame_is_refused_under_another_dictionary_or_none() {
    let a = Dictionary::train(vocabulary_pages(300, 1).iter().map(Vec::as_slice), 8 << 10).unwrap();
    let b = Dictionary::train(vocabulary_pages(300, 2).iter().map(Vec::as_slice), 4 << 10).unwrap();
    assert_ne!(a.id(), b.id());
    assert_ne!(a, b);
    let with_a = Compressor::with_dictionary(Algorithm::Zstd { level: 3 }, a.clone()).unwrap();
    let with_b = Compressor::with_dictionary(Algorithm::Zstd { level: 3 }, b).unwrap();
    let page = &vocabulary_pages(1, 1234)[0];
    let packed = with_a.compress(page, <[u8]>::to_vec).unwrap();
    let mut back = vec![0; 4096];
    assert!(!with_b.decompress(&packed, &mut back), "another dictionary");
    assert!(!Algorithm::Zstd { level: 3 }.decompress(&packed, &mut back), "no dictionary");
    assert!(with_a.decompress(&packed, &mut back));
    assert_eq!(&back, page);
    // A frame without a dictionary needs none: the dictionary's device
    // still reads it.
    let plain = Algorithm::Zstd { level: 3 }.compress(page, <[u8]>::to_vec).unwrap();
    assert!(with_a.decompress(&plain, &mut back));
    assert_eq!(&back, page);
    // The dictionary helps pages it has not seen that share its words.
    let unseen = vocabulary_pages(32, 777);
    let size = |c: &Compressor| -> usize { unseen.iter().map(|p| c.compress(p, <[u8]>::len).unwrap()).sum() };
    let (with, without) = (size(&with_a), size(&Compressor::new(Algorithm::Zstd { level: 3 })));
    assert!(with * 10 < without * 9, "with the dictionary {with} bytes, without {without}");
    // Saved and loaded, it is the same dictionary and reads the same frames.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dict");
    a.save(&path).unwrap();
    let loaded = Dictionary::load(&path).unwrap();
    assert_eq!(loaded, a);
    assert_eq!(loaded.id(), a.id());
    let reloaded = Compressor::with_dictionary(Algorithm::Zstd { level: 3 }, loaded).unwrap();
    assert!(reloaded.decompress(&packed, &mut back));
    // Cut inside the entropy tables (a cut in the content after them
    // leaves a shorter dictionary that is still one).
    std::fs::write(&path, &a.as_bytes()[..40]).unwrap();
    assert!(matches!(Dictionary::load(&path), Err(CompressError::CorruptDictionary(_))), "a truncated file");
}

#[test]
fn one_compressor_serves_many_threads() {
    let dict = Dictionary::train(vocabulary_pages(300, 1).iter().map(Vec::as_slice), 8 << 10).unwrap();
    let comp = Compressor::with_dictionary(Algorithm::Zstd { level: 5 }, dict).unwrap();
    std::thread::scope(|s| {
        for t in 0..3u64 {
            let comp = comp.clone();
            s.spawn(move || {
                for page in vocabulary_pages(20, 50 + t) {
                    let packed = comp.compress(&page, <[u8]>::to_vec).unwrap();
                    let mut back = vec![0; 4096];
                    assert!(comp.decompress(&packed, &mut back));
                    assert_eq!(back, page);
                }
            });
        }
    });
}

#[test]
fn names_and_levels_parse_and_bad_ones_are_typed_errors() {
    assert_eq!(Algorithm::parse("zstd:9"), Some(Algorithm::Zstd { level: 9 }));
    assert_eq!(Algorithm::parse("lz4hc"), Some(Algorithm::Lz4Hc { level: 9 }));
    assert_eq!(Algorithm::parse("lz4hc:12"), Some(Algorithm::Lz4Hc { level: 12 }));
    for bad in
        ["lzo", "", "zstd:", "zstd:0", "zstd:23", "zstd:+5", "lz4hc:13", "lz4hc:0", "lz4:1", "zstd:x", "zstd:9:1"]
    {
        assert_eq!(Algorithm::parse(bad), None, "{bad}");
    }
    assert_eq!(Algorithm::from_name("deflate"), Err(CompressError::UnknownAlgorithm("deflate".into())));
    assert_eq!(
        Algorithm::Zstd { level: 3 }.with_level(i64::MAX),
        Err(CompressError::LevelOutOfRange { algorithm: "zstd", level: i64::MAX, min: 1, max: 22 })
    );
    assert_eq!(Algorithm::Lz4Flex.with_level(3), Err(CompressError::NoLevel("lz4_flex")));
    assert_eq!(Algorithm::Lz4Hc { level: 9 }.with_level(1), Ok(Algorithm::Lz4Hc { level: 1 }));
    for algo in [
        Algorithm::Lz4,
        Algorithm::Lz4Flex,
        Algorithm::Lz4Hc { level: 9 },
        Algorithm::Lz4Hc { level: 3 },
        Algorithm::Zstd { level: 3 },
        Algorithm::Zstd { level: 19 },
    ] {
        assert_eq!(Algorithm::parse(&algo.to_string()), Some(algo));
        assert_eq!(Algorithm::from_name(algo.name()).map(Algorithm::name), Ok(algo.name()));
    }
    let dict = Dictionary::train(vocabulary_pages(300, 1).iter().map(Vec::as_slice), 4 << 10).unwrap();
    for algo in [Algorithm::Lz4, Algorithm::Lz4Flex, Algorithm::Lz4Hc { level: 9 }] {
        assert_eq!(Compressor::with_dictionary(algo, dict.clone()), Err(CompressError::NoDictionary(algo.name())));
    }
    assert!(CompressError::UnknownAlgorithm("x".into()).to_string().contains("lz4hc"));
}

#[test]
fn training_skips_empty_and_same_filled_pages() {
    let pages = vocabulary_pages(300, 1);
    let plain = Dictionary::train(pages.iter().map(Vec::as_slice), 4 << 10).unwrap();
    let (empty, zeroes) = (Vec::new(), vec![0u8; 4096]);
    let mixed = pages.iter().flat_map(|p| [p.as_slice(), empty.as_slice(), zeroes.as_slice()]);
    let with_noise = Dictionary::train(mixed, 4 << 10).unwrap();
    assert_eq!(with_noise.as_bytes(), plain.as_bytes(), "empty or same-filled pages took part in training");
    // Seven real pages are too few, however many empty ones come with them.
    let few = pages[..7].iter().map(Vec::as_slice).chain([empty.as_slice(); 20]);
    assert!(matches!(Dictionary::train(few, 4 << 10), Err(CompressError::Training(_))));
}
