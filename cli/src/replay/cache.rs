//! Binary copies of traces: `mmkit convert` and `mmkit replay --cache`.
//!
//! A text trace costs a replay most of its time in decompression and
//! parsing (xz alone caps it near 2 M events/s). The first pass can write
//! every event it reads to a binary file (`mmkit_trace::binary`: 8-byte
//! records, zstd-compressed, the first pass's summary in the trailer);
//! replaying that file needs no first pass and no parsing.
//!
//! Owns writing such a file (through `crate::paths::Output`: a file is
//! renamed into place when complete, so a cut-short file never carries the
//! final name; a FIFO or a device is written through), the cache's name
//! beside its trace and the check that a cache still matches its trace
//! (size and modification time recorded in its metadata). Must not touch
//! the allocator or the replay loop.

use super::engine::Ev;
use super::scan;
use super::stream::{self, EventStream};
use crate::paths::{Input, Output, Passes};
use clap::Args;
use mmkit_trace::binary::{preamble, trailer, BinaryMeta, RecordEncoder, FLAG_ZSTD};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

/// zstd level for the record stream: fast to write, decodes at several
/// hundred million events per second.
const ZSTD_LEVEL: i32 = 3;
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

/// Where the records go: through zstd or straight to the output.
enum Sink {
    Zstd(zstd::stream::write::Encoder<'static, BufWriter<Output>>),
    Raw(BufWriter<Output>),
}

impl Sink {
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Sink::Zstd(e) => e.write_all(bytes),
            Sink::Raw(f) => f.write_all(bytes),
        }
    }

    /// Ends the record stream; returns the output to append the trailer to.
    fn finish(self) -> io::Result<BufWriter<Output>> {
        match self {
            Sink::Zstd(e) => e.finish(),
            Sink::Raw(f) => Ok(f),
        }
    }
}

/// Writes a binary trace (through [`Output`]: a regular file or a new name
/// is replaced only when complete, a FIFO or a device is written through).
pub struct CacheWriter {
    out: Sink,
    encoder: RecordEncoder,
    buf: Vec<u8>,
    path: PathBuf,
    extra: BinaryMeta,
}

impl CacheWriter {
    /// Starts `path`, zstd-compressed or not; `extra` pairs are added to
    /// the metadata. Dropped before [`finish`](Self::finish), it leaves no
    /// file behind.
    ///
    /// # Errors
    /// `path` cannot be written ([`Output::create`]), or writing failed.
    pub fn create(path: &Path, extra: BinaryMeta, compress: bool) -> Result<Self, String> {
        let at = |e: io::Error| format!("{}: {e}", path.display());
        let mut file = BufWriter::with_capacity(1 << 20, Output::create(path)?);
        file.write_all(&preamble(if compress { FLAG_ZSTD } else { 0 })).map_err(at)?;
        let out = if compress {
            Sink::Zstd(zstd::stream::write::Encoder::new(file, ZSTD_LEVEL).map_err(at)?)
        } else {
            Sink::Raw(file)
        };
        Ok(Self { out, encoder: RecordEncoder::new(), buf: Vec::with_capacity(1 << 20), path: path.into(), extra })
    }

    /// The final path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends events.
    ///
    /// # Errors
    /// Writing failed.
    pub fn push_all(&mut self, events: &[Ev]) -> io::Result<()> {
        for e in events {
            self.encoder.encode(&stream::to_binary(e), &mut self.buf);
        }
        if self.buf.len() >= 1 << 20 {
            self.out.write_all(&self.buf)?;
            self.buf.clear();
        }
        Ok(())
    }

    /// Ends the record stream, writes `meta` (with the extra pairs) and the
    /// trailer, and completes the output; returns the bytes written.
    ///
    /// # Errors
    /// Writing or completing the output failed (nothing is left at a new
    /// name, a replaced file keeps its old contents).
    pub fn finish(mut self, meta: &BinaryMeta) -> Result<u64, String> {
        let at = |e: io::Error| format!("{}: {e}", self.path.display());
        self.out.write_all(&self.buf).map_err(at)?;
        let mut file = self.out.finish().map_err(at)?;
        file.flush().map_err(at)?;
        // The offset as counted: a FIFO or a device cannot be asked.
        let offset = file.get_ref().written();
        let mut all = meta.clone();
        all.pairs.extend(self.extra.pairs.iter().cloned());
        let bytes = all.encode();
        file.write_all(&bytes).map_err(at)?;
        file.write_all(&trailer(offset, bytes.len() as u64)).map_err(at)?;
        file.into_inner().map_err(|e| at(e.into_error()))?.finish()
    }
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
