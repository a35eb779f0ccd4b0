//! `mmkit zram train-dict`: trains a zstd dictionary for zram's
//! `algorithm_params dict=PATH` from 4 KiB pages of files (directories are
//! walked, symbolic links are not followed), sampled evenly up to
//! `--samples` bytes, same-filled pages skipped; then reports how much the
//! dictionary saves on pages it was not trained on.
//!
//! The output is refused before any work when it is one of the inputs
//! (by any path, a file under an input directory included) or its
//! directory is missing. Progress goes to stderr when it is a terminal and
//! the input is large; otherwise the command is silent until its report.
//!
//! Owns the command's arguments, the walk and the sampling; training is
//! `mmkit_compress::Dictionary::train`'s. Must not touch devices.

use crate::paths;
use crate::size::parse_size;
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use mmkit_compress::{same_filled, Algorithm, Compressor, Dictionary, MAX_DICT_SIZE, MIN_DICT_SIZE};
use mmkit_zram::PAGE_SIZE;
use std::fs::File;
use std::io::{IsTerminal, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// Input bytes from which progress is shown (on a terminal): below this
/// the command takes well under a second.
const PROGRESS_FROM_BYTES: u64 = 64 << 20;

/// `mmkit zram train-dict`'s arguments.
#[derive(Clone, Debug, Args)]
#[command(after_help = "Example: mmkit zram train-dict --out bin.dict /usr/bin, then \
    mmkit zram serve --comp zstd:9 --algorithm-params \"algo=zstd dict=bin.dict\"")]
pub struct TrainArgs {
    /// Where to write the dictionary (the format `zstd --train` writes): a
    /// file is replaced when the new one is complete, a FIFO or a device is
    /// written through. Refused, before any work, when it is one of the
    /// inputs by any path (symbolic or hard link, a file under an input
    /// directory), a directory or a socket.
    #[arg(long, value_name = "PATH")]
    pub out: PathBuf,
    /// Largest dictionary (K, M suffixes; 256 bytes to 16M).
    #[arg(long, default_value = "112K", value_parser = size_arg)]
    pub size: u64,
    /// Most sample bytes to train on, taken evenly from all the input's
    /// pages: at least 32K (8 pages, the fewest zstd's trainer takes).
    #[arg(long, default_value = "32M", value_parser = samples_arg)]
    pub samples: u64,
    /// zstd level of the report's comparison (with and without the dictionary);
    /// 9 because below level 6 zstd reuses a dictionary's entropy tables
    /// unpriced on 4 KiB pages and the dictionary barely helps or hurts.
    #[arg(long, default_value_t = 9)]
    pub level: i32,
    /// Files or directories to sample pages from (inside directories, what
    /// is not a regular file is skipped; a device or a FIFO named here is
    /// refused: sampling needs files of known size).
    #[arg(required = true, value_name = "INPUT")]
    pub inputs: Vec<PathBuf>,
}

fn size_arg(text: &str) -> Result<u64, String> {
    parse_size(text).map_err(|e| e.to_string())
}

/// `--samples`: a size of at least 8 pages.
fn samples_arg(text: &str) -> Result<u64, String> {
    let bytes = mmkit_zram::parse_size(text).map_err(|e| e.to_string())?;
    if bytes < 8 * PAGE_SIZE as u64 {
        return Err(format!("{bytes} bytes is less than 8 pages (32K), the fewest zstd's trainer takes"));
    }
    Ok(bytes)
}

/// Why `train-dict` failed.
#[derive(Debug)]
pub enum TrainError {
    /// Bad arguments or inputs (exit 2).
    Usage(String),
    /// Training or writing failed (exit 1).
    Failed(String),
}

/// A file to sample: its path, and what it was when walked (a change
/// before the run ends is reported).
struct Walked {
    path: PathBuf,
    meta: std::fs::Metadata,
}

impl Walked {
    fn len(&self) -> u64 {
        self.meta.len()
    }
}

/// Every regular file under `inputs`, sorted within each directory, and
/// how many entries inside directories were not regular files (devices,
/// FIFOs, sockets, symbolic links: skipped, never opened). An input named
/// on the command line that is not a regular file or a directory is
/// refused, saying what it is: pages are sampled evenly across the input,
/// which takes files whose size is known and that can be read at any
/// offset.
fn files_of(inputs: &[PathBuf]) -> Result<(Vec<Walked>, u64), TrainError> {
    let mut out = Vec::new();
    let mut skipped = 0;
    for input in inputs {
        let meta = std::fs::metadata(input).map_err(|e| TrainError::Usage(format!("{}: {e}", input.display())))?;
        if !meta.is_file() && !meta.is_dir() {
            return Err(TrainError::Usage(format!(
                "{}: {}, not a file or directory: pages are sampled evenly across the input, which needs \
                 regular files (save a stream to a file first)",
                input.display(),
                paths::noun(&meta)
            )));
        }
    }
    let mut stack: Vec<(PathBuf, bool)> = inputs.iter().rev().map(|p| (p.clone(), true)).collect();
    while let Some((path, named)) = stack.pop() {
        // Named inputs are followed through a link; inside directories
        // links are not followed.
        let meta = if named { std::fs::metadata(&path) } else { path.symlink_metadata() }
            .map_err(|e| TrainError::Usage(format!("{}: {e}", path.display())))?;
        if meta.is_file() {
            out.push(Walked { path, meta });
        } else if meta.is_dir() {
            let Ok(entries) = std::fs::read_dir(&path) else { continue };
            let mut children: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
            children.sort();
            stack.extend(children.into_iter().rev().map(|c| (c, false)));
        } else {
            skipped += 1;
        }
    }
    Ok((out, skipped))
}

/// Whether every sampled file is as it was when walked (size, modification
/// time, and the file its path names).
fn check_unchanged(files: &[Walked]) -> Result<(), TrainError> {
    for f in files {
        let now = std::fs::metadata(&f.path);
        let same = now.as_ref().is_ok_and(|m| {
            paths::same_file(m, &f.meta) && m.len() == f.meta.len() && m.modified().ok() == f.meta.modified().ok()
        });
        if !same {
            return Err(TrainError::Failed(format!(
                "{} changed while train-dict read it; no dictionary written, run again",
                f.path.display()
            )));
        }
    }
    Ok(())
}

/// Pages of `files` whose index is `offset` modulo `stride` (among all
/// whole pages of all files, in order), at most `max`; only those pages
/// are read. `bar` advances by each file's length.
fn sample_pages(files: &[Walked], stride: u64, offset: u64, max: usize, bar: &ProgressBar) -> Vec<Vec<u8>> {
    let mut pages = Vec::new();
    let mut index = 0u64;
    for file in files {
        let (path, len) = (&file.path, file.len());
        let whole = len / PAGE_SIZE as u64;
        let first = (offset + stride - index % stride) % stride;
        if first < whole {
            if let Ok(mut file) = File::open(path) {
                let mut at = first;
                while at < whole && pages.len() < max {
                    let mut page = vec![0u8; PAGE_SIZE];
                    // A file that shrank since the walk gives what it still has.
                    if file.seek(SeekFrom::Start(at * PAGE_SIZE as u64)).is_err() || file.read_exact(&mut page).is_err()
                    {
                        break;
                    }
                    pages.push(page);
                    at += stride;
                }
            }
        }
        index += whole;
        bar.inc(len);
        if pages.len() >= max {
            break;
        }
    }
    pages
}

/// `2nd`, `3rd`, `11th`, `21st`, ….
fn ordinal(n: u64) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

/// A bar over the input's bytes on stderr when it is a terminal and the
/// input is large; hidden otherwise.
fn progress(bytes: u64) -> ProgressBar {
    if bytes < PROGRESS_FROM_BYTES || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(bytes), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {bytes}/{total_bytes} ({eta})") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}

/// Trains, writes the dictionary and returns the report.
///
/// # Errors
/// [`TrainError::Usage`] for a missing input, an output that is an input
/// or has no directory, a size out of range or input with too few pages
/// (all before anything is written); [`TrainError::Failed`] when zstd's
/// trainer fails or the output cannot be written.
pub fn run(args: &TrainArgs) -> Result<String, TrainError> {
    let size = usize::try_from(args.size).unwrap_or(usize::MAX);
    if !(MIN_DICT_SIZE..=MAX_DICT_SIZE).contains(&size) {
        return Err(TrainError::Usage(format!("--size {}: 256 bytes to 16M", args.size)));
    }
    let level =
        Algorithm::Zstd { level: 3 }.with_level(args.level.into()).map_err(|e| TrainError::Usage(e.to_string()))?;
    paths::check_output(&args.out).map_err(TrainError::Usage)?;
    let (files, not_files) = files_of(&args.inputs)?;
    let inputs = args.inputs.iter().chain(files.iter().map(|f| &f.path)).map(PathBuf::as_path);
    paths::check_outputs(inputs, [args.out.as_path()]).map_err(TrainError::Usage)?;
    let total_pages: u64 = files.iter().map(|f| f.len() / PAGE_SIZE as u64).sum();
    let want = args.samples / PAGE_SIZE as u64;
    // Every stride-th page trains; the page after each is held out for
    // the report, so the two never overlap.
    let stride = (total_pages / want.max(1)).max(2);
    let bar = progress(files.iter().map(Walked::len).sum());
    bar.set_message("sampling");
    let samples = sample_pages(&files, stride, 0, want as usize, &bar);
    bar.set_position(0);
    bar.set_message("held-out pages");
    let held_out = sample_pages(&files, stride, 1, 4096, &bar);
    bar.finish_and_clear();
    check_unchanged(&files)?;
    let same = samples.iter().filter(|p| same_filled(p).is_some()).count();
    if samples.len() - same < 8 {
        let skipped = if not_files > 0 {
            format!("; {not_files} entries inside the directories were not regular files and were skipped")
        } else {
            String::new()
        };
        return Err(TrainError::Usage(format!(
            "{total_pages} whole 4 KiB pages in {} regular files{skipped}; {} of them sampled and not \
             same-filled: at least 8 are needed",
            files.len(),
            samples.len() - same
        )));
    }
    let spinner = if bar.is_hidden() {
        ProgressBar::hidden()
    } else {
        ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr())
    };
    spinner.set_message(format!("training on {} pages", samples.len() - same));
    spinner.enable_steady_tick(std::time::Duration::from_millis(200));
    let dict = Dictionary::train(samples.iter().map(Vec::as_slice), size);
    spinner.finish_and_clear();
    let dict = dict.map_err(|e| TrainError::Failed(e.to_string()))?;
    let mut out = paths::Output::create(&args.out).map_err(TrainError::Failed)?;
    std::io::Write::write_all(&mut out, dict.as_bytes())
        .map_err(|e| TrainError::Failed(format!("{}: {e}", args.out.display())))?;
    out.finish().map_err(TrainError::Failed)?;
    let mut report = format!(
        "{}: dictionary of {} bytes (id {:#010x}) trained on {} pages ({} same-filled skipped) of {} in {} files, every {} page\n",
        args.out.display(),
        dict.len(),
        dict.id(),
        samples.len() - same,
        same,
        total_pages,
        files.len(),
        ordinal(stride)
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
        std::path::absolute(out).unwrap_or_else(|_| out.to_owned()).display()
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
        let (files, skipped) = files_of(&[dir.path().to_owned()]).unwrap();
        assert_eq!((files.len(), skipped), (4, 0));
        let total: u64 = files.iter().map(|f| f.len() / PAGE_SIZE as u64).sum();
        assert_eq!(total, 11);
        let bar = ProgressBar::hidden();
        let even = sample_pages(&files, 2, 0, 100, &bar);
        let odd = sample_pages(&files, 2, 1, 100, &bar);
        assert_eq!((even.len(), odd.len()), (6, 5));
        assert!(even.iter().all(|p| !odd.contains(p)), "disjoint");
        assert_eq!(sample_pages(&files, 1, 0, 4, &bar).len(), 4, "at most max");
        let first = [1u8, 3, 5, 7, 9, 9].map(|b| vec![b; PAGE_SIZE]);
        assert_eq!(even, first, "the pages themselves, in order");
        assert!(matches!(files_of(&[dir.path().join("missing")]), Err(TrainError::Usage(_))));
    }

    #[test]
    fn ordinals() {
        let got: Vec<String> = [1, 2, 3, 4, 11, 12, 13, 21, 22, 23, 101, 111, 112].map(ordinal).into();
        assert_eq!(
            got,
            ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "23rd", "101st", "111th", "112th"]
        );
    }
}
