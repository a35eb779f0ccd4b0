//! The text parsers fuzzed with random input (stable-toolchain fuzzing by
//! proptest; `fuzz/fuzz_targets/zram_attrs.rs` is the same under
//! cargo-fuzz): configuration keys, `recompress` and `writeback` requests
//! and attribute stores never panic, and one refused as invalid changes
//! nothing.

use mmkit_zram::{
    Algorithm, RecompressParams, WritebackMode, Zram, ZramConfig, ZramError, PAGE_SIZE, SHOW_ATTRS, STORE_ATTRS,
};
use proptest::prelude::*;

fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        "\\PC{0,24}",
        "[a-z_]{1,12}=[0-9a-zA-Z:,_-]{0,10}",
        "(type|threshold|algo|priority|max_pages)=(idle|huge|huge_idle|zstd|lz4|[0-9]{1,6})",
        "(idle|huge|huge_idle|incompressible|all|page_index=[0-9]{1,4}|page_indexes=[0-9]{1,3}-[0-9]{1,3})",
        "[0-9]{1,22}[kKmMgGtTxX]?(i?[bB])?",
    ]
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::sample::select(STORE_ATTRS).prop_map(str::to_owned),
        proptest::sample::select(SHOW_ATTRS).prop_map(str::to_owned),
        "[a-z_]{0,16}",
    ]
}

/// Everything an invalid store must leave alone.
fn state(zram: &Zram) -> (String, String, String, u64, bool) {
    (zram.mm_stat(), zram.block_state(), zram.bd_stat(), zram.writeback_limit(), zram.writeback_limit_enable())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn configuration_keys_refuse_bad_values_without_change(key in name(), value in word()) {
        let mut config = ZramConfig::default();
        let before = config.clone();
        match config.set(&key, &value) {
            Ok(()) => {}
            Err(ZramError::Invalid(why)) => {
                prop_assert!(!why.is_empty());
                prop_assert_eq!(config, before);
            }
            Err(other) => prop_assert!(false, "set returned {:?}", other),
        }
        let _ = RecompressParams::parse(&value);
        let _ = WritebackMode::parse(&value);
        let _ = mmkit_zram::parse_size(&value);
    }

}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(80))]

    #[test]
    fn attribute_stores_never_panic_and_invalid_ones_change_nothing(
        stores in proptest::collection::vec((name(), word()), 1..12),
    ) {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path().to_path_buf();
        let backing = dir.join(format!("b{}", stores.len()));
        std::fs::write(&backing, vec![0u8; 8 * PAGE_SIZE]).unwrap();
        let zram = Zram::with_own_memory(ZramConfig {
            disksize: 32 * PAGE_SIZE as u64,
            recomp_algorithms: vec![Algorithm::Zstd { level: 5 }],
            backing_dev: Some(backing),
            ..ZramConfig::default()
        })
        .unwrap();
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        for (i, page) in exe.chunks_exact(PAGE_SIZE).skip(4).take(16).enumerate() {
            zram.open().unwrap().write((i * PAGE_SIZE) as u64, page).unwrap();
        }
        for (name, value) in &stores {
            let before = state(&zram);
            if let Err(ZramError::Invalid(_)) = zram.attr_store(name, value) {
                prop_assert!(state(&zram) == before, "{} {:?} changed the device", name, value);
            }
            let _ = zram.attr_show(name);
            // A store of `reset 1` leaves the device uninitialised: no pool.
            if let Some(pool) = zram.pool() {
                pool.check_invariants().map_err(TestCaseError::fail)?;
            }
        }
    }
}
