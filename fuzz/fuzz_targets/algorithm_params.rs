//! Fuzz target for the compressors and zram's `algorithm_params`: the
//! input is tried as parameters (parsed, then set on a configuration,
//! which must be left as it was when refused), as compressed data for
//! every algorithm (with and without a dictionary), and as a page to round
//! trip through each. Nothing may panic.
//!
//! Run with `cargo +nightly fuzz run algorithm_params` from the repository
//! root.
#![no_main]

use libfuzzer_sys::fuzz_target;
use mmkit_zram::{Algorithm, AlgorithmParams, Compressor, Dictionary, ZramConfig};
use std::sync::OnceLock;

/// Pages sharing a vocabulary, to train the dictionary once.
fn training_pages() -> Vec<Vec<u8>> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let vocab: Vec<[u8; 8]> = (0..128).map(|_| next().to_le_bytes()).collect();
    (0..200)
        .map(|_| {
            let mut page = Vec::with_capacity(4096);
            while page.len() < 4096 {
                let r = next();
                page.extend_from_slice(&vocab[r as usize % vocab.len()][..1 + (r >> 32) as usize % 8]);
            }
            page.truncate(4096);
            page
        })
        .collect()
}

fn compressors() -> &'static [Compressor] {
    static ALL: OnceLock<Vec<Compressor>> = OnceLock::new();
    ALL.get_or_init(|| {
        let pages = training_pages();
        let dict = Dictionary::train(pages.iter().map(Vec::as_slice), 4096).expect("a dictionary");
        let mut all: Vec<Compressor> = [
            Algorithm::Lz4,
            Algorithm::Lz4Flex,
            Algorithm::Lz4Hc { level: 9 },
            Algorithm::Zstd { level: 1 },
            Algorithm::Zstd { level: 3 },
        ]
        .into_iter()
        .map(Compressor::new)
        .collect();
        all.push(Compressor::with_dictionary(Algorithm::Zstd { level: 3 }, dict).expect("zstd takes it"));
        all
    })
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    // Parameters: never a dictionary path that is not a plain file of ours
    // (the fuzzer must not read the machine's devices or block on a FIFO;
    // `Dictionary::load` refuses those, tested in mmkit-compress).
    if !text.contains("dict=") {
        let _ = AlgorithmParams::parse(&text);
        let mut config = ZramConfig::default();
        config.set("comp", "zstd").expect("zstd");
        config.set("recomp", "lz4hc,zstd:12").expect("two secondaries");
        let before = config.clone();
        if config.set("algorithm_params", &text).is_err() {
            assert_eq!(config, before, "a refused store changed the configuration");
        }
    }
    let mut page = [0u8; 4096];
    for comp in compressors() {
        // Arbitrary bytes as a stream: refused or a full page, never a panic.
        let _ = comp.decompress(data, &mut page);
        let mut short = [0u8; 100];
        let _ = comp.decompress(data, &mut short);
        // Arbitrary bytes as a page: what compresses comes back the same.
        let mut input = data.to_vec();
        input.resize(4096, 0);
        if let Some(packed) = comp.compress(&input, <[u8]>::to_vec) {
            assert!(comp.decompress(&packed, &mut page), "{comp:?} refused its own stream");
            assert_eq!(&page[..], &input[..], "{comp:?} round trip");
        }
    }
});
