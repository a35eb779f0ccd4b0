//! The device against a plain `Vec<u8>`: random writes of real-file,
//! random, zero and same-filled pages, partial writes, discards,
//! write-zeroes, reads, compactions, idle marking, recompression and
//! writeback to a backing file (and reads from it). The device must always
//! read back exactly what the model holds, and `mm_stat` and `bd_stat` must
//! add up.

use mmkit::{Backing, HugePages, MemoryMapBuilder};
use mmkit_zram::{Algorithm, RecompressParams, WritebackMode, Zram, ZramConfig, ZramError, PAGE_SIZE};
use proptest::prelude::*;
use std::sync::Arc;

const PAGES: usize = 32;

#[derive(Clone, Debug)]
enum Fill {
    Real(usize),
    Random(u64),
    Zero,
    Same(u8),
}

#[derive(Clone, Debug)]
enum Op {
    WritePage { page: usize, fill: Fill },
    WriteBytes { offset: usize, len: usize, byte: u8 },
    Discard { offset: usize, len: usize },
    WriteZeroes { offset: usize, len: usize },
    Read { offset: usize, len: usize },
    Compact,
    IdleAll,
    Recompress(&'static str),
    Writeback(&'static str),
}

fn fill() -> impl Strategy<Value = Fill> {
    prop_oneof![
        (0usize..64).prop_map(Fill::Real),
        any::<u64>().prop_map(Fill::Random),
        Just(Fill::Zero),
        any::<u8>().prop_map(Fill::Same),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let span = (0..PAGES * PAGE_SIZE, 1usize..3 * PAGE_SIZE);
    prop_oneof![
        4 => (0..PAGES, fill()).prop_map(|(page, fill)| Op::WritePage { page, fill }),
        2 => (span.clone(), any::<u8>()).prop_map(|((offset, len), byte)| Op::WriteBytes { offset, len, byte }),
        1 => span.clone().prop_map(|(offset, len)| Op::Discard { offset, len }),
        1 => span.clone().prop_map(|(offset, len)| Op::WriteZeroes { offset, len }),
        2 => span.prop_map(|(offset, len)| Op::Read { offset, len }),
        1 => Just(Op::Compact),
        1 => Just(Op::IdleAll),
        1 => prop_oneof![Just(""), Just("type=idle"), Just("type=huge"), Just("type=huge_idle threshold=2000")].prop_map(Op::Recompress),
        1 => prop_oneof![Just("idle"), Just("huge"), Just("huge_idle"), Just("incompressible"), Just("page_index=3"), Just("page_indexes=0-15")].prop_map(Op::Writeback),
    ]
}

mod common;

fn real_pages() -> Vec<Vec<u8>> {
    common::exe_pages(4, 64)
}

fn page_of(fill: &Fill, real: &[Vec<u8>]) -> Vec<u8> {
    match *fill {
        Fill::Real(i) => real[i % real.len()].clone(),
        Fill::Random(seed) => common::noise(seed),
        Fill::Zero => vec![0; PAGE_SIZE],
        Fill::Same(b) => vec![b; PAGE_SIZE],
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(40))]

    #[test]
    fn the_device_reads_back_what_a_vec_holds(ops in proptest::collection::vec(op(), 1..60), zstd in any::<bool>()) {
        let mm = Arc::new(MemoryMapBuilder::with_memory(32 << 20).backing(Backing::RealMemory(HugePages::None)).build().unwrap());
        let algorithm = if zstd { Algorithm::Zstd { level: 1 } } else { Algorithm::Lz4 };
        let disksize = (PAGES * PAGE_SIZE) as u64;
        let backing = BackingFile::new();
        let config = ZramConfig {
            disksize,
            algorithm,
            recomp_algorithms: vec![Algorithm::Zstd { level: 9 }],
            backing_dev: Some(backing.0.clone()),
            ..ZramConfig::default()
        };
        let zram = Zram::new(mm, config).unwrap();
        let real = real_pages();
        let mut model = vec![0u8; PAGES * PAGE_SIZE];
        for op in ops {
            match op {
                Op::WritePage { page, fill } => {
                    let data = page_of(&fill, &real);
                    zram.open().unwrap().write((page * PAGE_SIZE) as u64, &data).unwrap();
                    model[page * PAGE_SIZE..(page + 1) * PAGE_SIZE].copy_from_slice(&data);
                }
                Op::WriteBytes { offset, len, byte } => {
                    let len = len.min(model.len() - offset);
                    zram.open().unwrap().write(offset as u64, &vec![byte; len]).unwrap();
                    model[offset..offset + len].fill(byte);
                }
                Op::Discard { offset, len } => {
                    let len = len.min(model.len() - offset);
                    zram.open().unwrap().discard(offset as u64, len as u64).unwrap();
                    // Whole pages only.
                    let first = offset.div_ceil(PAGE_SIZE);
                    let end = (offset + len) / PAGE_SIZE;
                    for p in first..end {
                        model[p * PAGE_SIZE..(p + 1) * PAGE_SIZE].fill(0);
                    }
                }
                Op::WriteZeroes { offset, len } => {
                    let len = len.min(model.len() - offset);
                    zram.open().unwrap().write_zeroes(offset as u64, len as u64).unwrap();
                    model[offset..offset + len].fill(0);
                }
                Op::Read { offset, len } => {
                    let len = len.min(model.len() - offset);
                    let mut back = vec![0; len];
                    zram.open().unwrap().read(offset as u64, &mut back).unwrap();
                    prop_assert_eq!(&back[..], &model[offset..offset + len]);
                }
                Op::Compact => {
                    zram.compact().unwrap();
                }
                Op::IdleAll => zram.idle_all().unwrap(),
                Op::Recompress(params) => {
                    // Every page through the API; the text must name the pages.
                    let params = if params.is_empty() { RecompressParams::default() } else { RecompressParams::parse(params).unwrap() };
                    zram.recompress(&params).unwrap();
                }
                Op::Writeback(mode) => match zram.writeback(WritebackMode::parse(mode).unwrap()) {
                    Ok(_) | Err(ZramError::BackingFull { .. }) => {}
                    Err(e) => prop_assert!(false, "writeback {}: {}", mode, e),
                },
            }
            let mut all = vec![0; model.len()];
            zram.open().unwrap().read(0, &mut all).unwrap();
            prop_assert!(all == model, "device and model differ");
            // mm_stat adds up: every stored page is same-filled, huge or
            // compressed, and never-written or discarded pages hold nothing.
            let s = zram.mm_stat_values();
            let stored = s.orig_data_size / PAGE_SIZE as u64;
            let on_file: u64 = zram.bd_stat().split_whitespace().next().unwrap().parse().unwrap();
            prop_assert!(s.same_pages + s.huge_pages + on_file <= stored);
            prop_assert!(s.compr_data_size <= (stored - s.same_pages - on_file) * PAGE_SIZE as u64);
            prop_assert!(s.compr_data_size >= s.huge_pages * PAGE_SIZE as u64);
            prop_assert_eq!(zram.block_state().lines().count() as u64, stored);
            zram.pool().unwrap().check_invariants().map_err(TestCaseError::fail)?;
        }
        zram.reset().unwrap();
        prop_assert!(zram.pool().is_none(), "reset drops the pool with its pages");
        prop_assert!(zram.bd_stat().starts_with("       0 "), "reset returns every block");
    }
}

/// A backing file of 24 pages (fewer than the device's, so writeback can
/// fill it), removed when dropped.
struct BackingFile(std::path::PathBuf);

impl BackingFile {
    fn new() -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("mmkit-zram-model-{}-{n}", std::process::id()));
        std::fs::write(&path, vec![0u8; 24 * PAGE_SIZE]).unwrap();
        Self(path)
    }
}

impl Drop for BackingFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
