//! `mmkit zram train-dict`: trains a zstd dictionary for zram's
//! `algorithm_params dict=PATH` from 4 KiB pages of files (directories are
//! walked, symbolic links are not followed), sampled evenly up to
//! `--samples` bytes, same-filled pages skipped; then reports how much the
//! dictionary saves on pages it was not trained on.
//!
//! Owns the command's arguments, the walk and the sampling; training is
//! `mmkit_compress::Dictionary::train`'s. Must not touch devices.

use clap::Args;
use mmkit_compress::{same_filled, Algorithm, Compressor, Dictionary, MAX_DICT_SIZE, MIN_DICT_SIZE};
use mmkit_zram::{parse_size, PAGE_SIZE};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

/// `mmkit zram train-dict`'s arguments.
#[derive(Clone, Debug, Args)]
#[command(after_help = "Example: mmkit zram train-dict --out bin.dict /usr/bin, then \
    mmkit zram serve --comp zstd:9 --algorithm-params \"algo=zstd dict=bin.dict\"")]
pub struct TrainArgs {
    /// Where to write the dictionary (the format `zstd --train` writes).
    #[arg(long, value_name = "PATH")]
    pub out: PathBuf,
    /// Largest dictionary (K, M suffixes; 256 bytes to 16M).
    #[arg(long, default_value = "112K", value_parser = size_arg)]
    pub size: u64,
    /// Most sample bytes to train on, taken evenly from all the input's pages.
    #[arg(long, default_value = "32M", value_parser = size_arg)]
    pub samples: u64,
    /// zstd level of the report's comparison (with and without the dictionary);
    /// 9 because below level 6 zstd reuses a dictionary's entropy tables
    /// unpriced on 4 KiB pages and the dictionary barely helps or hurts.
    #[arg(long, default_value_t = 9)]
    pub level: i32,
    /// Files or directories to sample pages from.
    #[arg(required = true, value_name = "INPUT")]
    pub inputs: Vec<PathBuf>,
}

fn size_arg(text: &str) -> Result<u64, String> {
    parse_size(text).ok_or_else(|| format!("`{text}` is not a size"))
}

/// Why `train-dict` failed.
#[derive(Debug)]
pub enum TrainError {
    /// Bad arguments or inputs (exit 2).
    Usage(String),
    /// Training or writing failed (exit 1).
    Failed(String),
}

/// Every regular file under `inputs`, sorted within each directory.
fn files_of(inputs: &[PathBuf]) -> Result<Vec<(PathBuf, u64)>, TrainError> {
    let mut out = Vec::new();
    let mut stack: Vec<PathBuf> = inputs.iter().rev().cloned().collect();
    while let Some(path) = stack.pop() {
        let meta = path.symlink_metadata().map_err(|e| TrainError::Usage(format!("{}: {e}", path.display())))?;
        if meta.is_file() {
            out.push((path, meta.len()));
        } else if meta.is_dir() {
            let Ok(entries) = std::fs::read_dir(&path) else { continue };
            let mut children: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
            children.sort();
            stack.extend(children.into_iter().rev());
        }
    }
    Ok(out)
}

/// Pages of `files` whose index is `offset` modulo `stride` (among all
/// whole pages of all files, in order), at most `max`.
fn sample_pages(files: &[(PathBuf, u64)], stride: u64, offset: u64, max: usize) -> Vec<Vec<u8>> {
    let mut pages = Vec::new();
    let mut index = 0u64;
    for (path, len) in files {
        let whole = len / PAGE_SIZE as u64;
        let first = (offset + stride - index % stride) % stride;
        if first < whole {
            if let Ok(mut file) = File::open(path) {
                let mut data = Vec::new();
                if file.read_to_end(&mut data).is_ok() {
                    let mut at = first;
                    while at < whole && (at as usize + 1) * PAGE_SIZE <= data.len() && pages.len() < max {
                        let start = at as usize * PAGE_SIZE;
                        pages.push(data[start..start + PAGE_SIZE].to_vec());
                        at += stride;
                    }
                }
            }
        }
        index += whole;
        if pages.len() >= max {
            break;
        }
    }
    pages
}

/// Trains, writes the dictionary and returns the report.
///
/// # Errors
/// [`TrainError::Usage`] for a missing input, a size out of range or
/// input with too few pages; [`TrainError::Failed`] when zstd's trainer
/// fails or the output cannot be written.
pub fn run(args: &TrainArgs) -> Result<String, TrainError> {
    let size = usize::try_from(args.size).unwrap_or(usize::MAX);
    if !(MIN_DICT_SIZE..=MAX_DICT_SIZE).contains(&size) {
        return Err(TrainError::Usage(format!("--size {}: 256 bytes to 16M", args.size)));
    }
    let level =
        Algorithm::Zstd { level: 3 }.with_level(args.level.into()).map_err(|e| TrainError::Usage(e.to_string()))?;
    let files = files_of(&args.inputs)?;
    let total_pages: u64 = files.iter().map(|(_, len)| len / PAGE_SIZE as u64).sum();
    let want = (args.samples / PAGE_SIZE as u64).max(8);
    // Every stride-th page trains; the page after each is held out for
    // the report, so the two never overlap.
    let stride = (total_pages / want).max(2);
    let samples = sample_pages(&files, stride, 0, want as usize);
    let held_out = sample_pages(&files, stride, 1, 4096);
    let same = samples.iter().filter(|p| same_filled(p).is_some()).count();
    if samples.len() - same < 8 {
        return Err(TrainError::Usage(format!(
            "{} pages in the input, {} of them sampled and not same-filled: at least 8 are needed",
            total_pages,
            samples.len() - same
        )));
    }
    let dict =
        Dictionary::train(samples.iter().map(Vec::as_slice), size).map_err(|e| TrainError::Failed(e.to_string()))?;
    dict.save(&args.out).map_err(|e| TrainError::Failed(e.to_string()))?;
    let mut report = format!(
        "{}: dictionary of {} bytes (id {:#010x}) trained on {} pages ({} same-filled skipped) of {} in {} files, every {}th page\n",
        args.out.display(),
        dict.len(),
        dict.id(),
        samples.len() - same,
        same,
        total_pages,
        files.len(),
        stride
    );
    report.push_str(&held_out_report(&held_out, level, &dict, &args.out));
    Ok(report)
}

/// Bytes the held-out pages take with and without the dictionary.
fn held_out_report(pages: &[Vec<u8>], algorithm: Algorithm, dict: &Dictionary, out: &Path) -> String {
    let pages: Vec<&Vec<u8>> = pages.iter().filter(|p| same_filled(p).is_none()).collect();
    if pages.is_empty() {
        return "no held-out pages to compare on\n".to_owned();
    }
    let Ok(with) = Compressor::with_dictionary(algorithm, dict.clone()) else {
        return String::new();
    };
    let without = Compressor::new(algorithm);
    // A page that does not shrink is stored raw, as zram stores it.
    let stored =
        |c: &Compressor| -> usize { pages.iter().map(|p| c.compress(p, <[u8]>::len).unwrap_or(PAGE_SIZE)).sum() };
    let raw = (pages.len() * PAGE_SIZE) as f64;
    let (a, b) = (stored(&without), stored(&with));
    format!(
        "{} held-out pages (not trained on), {algorithm}: ratio {:.3} without, {:.3} with the dictionary ({:+.1} %)\n\
         use it: --comp {algorithm} --algorithm-params \"algo=zstd dict={}\"\n",
        pages.len(),
        raw / a as f64,
        raw / b as f64,
        (a as f64 / b as f64 - 1.0) * 100.0,
        out.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampling_takes_every_strideth_page_across_files_and_the_held_out_set_is_disjoint() {
        let dir = tempfile::tempdir().unwrap();
        let mut next = 0u8;
        for (name, pages) in [("a", 3), ("b", 5), ("c", 2)] {
            let data: Vec<u8> = (0..pages)
                .flat_map(|_| {
                    next += 1;
                    vec![next; PAGE_SIZE]
                })
                .collect();
            std::fs::write(dir.path().join(name), data).unwrap();
        }
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/d"), vec![9u8; PAGE_SIZE + 100]).unwrap();
        let files = files_of(&[dir.path().to_owned()]).unwrap();
        assert_eq!(files.len(), 4);
        let total: u64 = files.iter().map(|(_, l)| l / PAGE_SIZE as u64).sum();
        assert_eq!(total, 11);
        let even = sample_pages(&files, 2, 0, 100);
        let odd = sample_pages(&files, 2, 1, 100);
        assert_eq!((even.len(), odd.len()), (6, 5));
        assert!(even.iter().all(|p| !odd.contains(p)), "disjoint");
        assert_eq!(sample_pages(&files, 1, 0, 4).len(), 4, "at most max");
        assert!(matches!(files_of(&[dir.path().join("missing")]), Err(TrainError::Usage(_))));
    }
}
