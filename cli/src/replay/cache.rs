//! Binary copies of traces: `mmkit convert` and `mmkit replay --cache`.
//!
//! A text trace costs a replay most of its time in decompression and
//! parsing (xz alone caps it near 2 M events/s). The first pass can write
//! every event it reads to a binary file (`mmkit_trace::binary`: 8-byte
//! records, zstd-compressed, the first pass's summary in the trailer);
//! replaying that file needs no first pass and no parsing. The file is
//! written by `writer` ([`CacheWriter`]), which the first pass (`scan`)
//! feeds.
//!
//! Owns the cache's name beside its trace and the check that a cache still matches its trace
//! (size and modification time recorded in its metadata). Must not touch
//! the allocator or the replay loop.

use super::scan;
use super::stream::EventStream;
use super::writer::CacheWriter;
use crate::paths::{Input, Passes};
use clap::Args;
use mmkit_trace::binary::BinaryMeta;
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

/// Extension of a cache beside its trace.
pub const CACHE_EXTENSION: &str = "mmkt";

/// `mmkit convert`'s arguments.
#[derive(Clone, Debug, Args)]
pub struct ConvertArgs {
    /// The trace to convert (either text format, plain, xz or zstd): a
    /// file, or a pipe or FIFO (read once as it comes).
    #[arg(value_name = "TRACE")]
    pub trace: PathBuf,
    /// The binary file to write (default: TRACE.mmkt; needed when TRACE is
    /// a stream). A file is replaced when the new one is complete; a FIFO
    /// or a device (/dev/stdout) is written through. Refused, before
    /// anything is read or written, when it is the trace by any path
    /// (symbolic or hard link included), a directory or a socket.
    #[arg(value_name = "OUT")]
    pub out: Option<PathBuf>,
    /// Store the records as they are instead of zstd-compressed: about
    /// three times the size, faster to replay (what `replay --cache`
    /// writes).
    #[arg(long)]
    pub uncompressed: bool,
    /// A malformed line (a field out of range included) is an error naming
    /// its line, instead of being skipped and counted.
    #[arg(long)]
    pub strict: bool,
}

/// The cache file of `trace`: `TRACE.mmkt` beside it.
pub fn cache_path(trace: &Path) -> PathBuf {
    let mut name = trace.as_os_str().to_owned();
    name.push(".");
    name.push(CACHE_EXTENSION);
    PathBuf::from(name)
}

/// What identifies a source file's contents well enough for a cache: its
/// size and modification time (`None` for a stream).
fn source_identity(trace: &Input) -> Option<BinaryMeta> {
    let (len, modified) = trace.size_and_mtime()?;
    let modified = modified.and_then(|m| m.duration_since(UNIX_EPOCH).ok()).map_or(0, |d| d.as_nanos());
    let mut m = BinaryMeta::default();
    m.push("source_bytes", len);
    m.push("source_modified_ns", modified);
    Some(m)
}

/// A cache that matches `trace`, to replay instead of it; or else a writer
/// that makes the cache during the first pass (`None` when it cannot be
/// created, the trace is a stream, or the cache's name is another path to
/// the trace itself, which is then only read); and why no cache is used,
/// for the report.
pub fn use_cache(trace: &Input) -> (Option<PathBuf>, Option<CacheWriter>, Option<String>) {
    let Some(identity) = source_identity(trace) else {
        return (None, None, Some("no cache: the trace is a stream, not a file".into()));
    };
    let cache = cache_path(trace.path());
    if let Err(e) = crate::paths::check_outputs([trace.path()], [cache.as_path()]) {
        return (None, None, Some(format!("no cache written: {e}")));
    }
    if let Ok(stream) = EventStream::open(&cache) {
        let same = stream.binary_meta().is_some_and(|m| {
            m.get("source_bytes") == identity.get("source_bytes")
                && m.get("source_modified_ns") == identity.get("source_modified_ns")
                && scan::Scan::from_meta(m).is_some()
        });
        if same {
            return (Some(cache), None, None);
        }
    }
    match CacheWriter::create(&cache, identity, false) {
        Ok(w) => (None, Some(w), None),
        Err(e) => (None, None, Some(format!("cannot write the cache: {e}"))),
    }
}

/// `mmkit convert`: writes the binary form of a trace; returns a one-line
/// summary.
///
/// # Errors
/// The output names the trace (by any path) or cannot be written (a
/// directory, a missing directory, a socket: checked before anything is
/// read); no output was named for a trace that is a stream; reading the
/// trace (a line out of range with `--strict`) or writing the output
/// failed, or the trace changed meanwhile (then no output is left at a new
/// name, and a replaced file keeps its contents).
pub fn convert(args: &ConvertArgs) -> Result<String, String> {
    let out = match &args.out {
        Some(out) => out.clone(),
        None => cache_path(&args.trace),
    };
    crate::paths::check_output(&out)?;
    crate::paths::check_outputs([args.trace.as_path()], [out.as_path()])?;
    let input = Input::open(&args.trace, Passes::One)?;
    let identity = match (source_identity(&input), &args.out) {
        (Some(identity), _) => identity,
        (None, Some(_)) => BinaryMeta::default(),
        (None, None) => {
            return Err(format!(
                "{}: a stream, not a file: name the output (mmkit convert {} OUT)",
                args.trace.display(),
                args.trace.display()
            ))
        }
    };
    let writer = CacheWriter::create(&out, identity, !args.uncompressed)?;
    let file = input.reader().map_err(|e| format!("{}: {e}", args.trace.display()))?;
    let (s, writer) = scan::scan(file, input.path(), None, Some(writer), args.strict)?;
    if let Some(e) = s.cache_error {
        return Err(e);
    }
    input.check_unchanged()?;
    let bytes = match writer {
        Some(w) => w.finish(&s.to_meta())?,
        None => return Err(format!("{}: not written", out.display())),
    };
    Ok(format!(
        "{}: {} events ({} lines, {} skipped as malformed{}) -> {} ({} bytes, {:.1} per event) in {:.1} s\n",
        args.trace.display(),
        s.events,
        s.stats.lines,
        s.stats.skipped,
        if s.unsupported_order > 0 {
            format!(", {} events of an order above {} dropped", s.unsupported_order, super::engine::MAX_ORDER)
        } else {
            String::new()
        },
        out.display(),
        bytes,
        bytes as f64 / s.events.max(1) as f64,
        s.seconds
    ))
}
