//! Binary copies of traces: `mmkit convert` and `mmkit replay --cache`.
//!
//! A text trace costs a replay most of its time in decompression and
//! parsing (xz alone caps it near 2 M events/s). The first pass can write
//! every event it reads to a binary file (`mmkit_trace::binary`: 8-byte
//! records, zstd-compressed, the first pass's summary in the trailer);
//! replaying that file needs no first pass and no parsing.
//!
//! Owns writing such a file (to a temporary name, renamed when complete,
//! so a cut-short file never carries the final name), the cache's name
//! beside its trace and the check that a cache still matches its trace
//! (size and modification time recorded in its metadata). Must not touch
//! the allocator or the replay loop.

use super::engine::Ev;
use super::scan;
use super::stream::{self, EventStream};
use clap::Args;
use mmkit_trace::binary::{preamble, trailer, BinaryMeta, RecordEncoder, FLAG_ZSTD};
use std::fs::{self, File};
use std::io::{self, BufWriter, Seek, Write};
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
    /// The trace to convert (either text format, plain, xz or zstd).
    #[arg(value_name = "TRACE")]
    pub trace: PathBuf,
    /// The binary file to write (default: TRACE.mmkt); refused, before
    /// anything is read or written, when it is the trace by any path
    /// (symbolic or hard link included).
    #[arg(value_name = "OUT")]
    pub out: Option<PathBuf>,
    /// Store the records as they are instead of zstd-compressed: about
    /// three times the size, faster to replay (what `replay --cache`
    /// writes).
    #[arg(long)]
    pub uncompressed: bool,
}

/// Where the records go: through zstd or straight to the file.
enum Sink {
    Zstd(zstd::stream::write::Encoder<'static, BufWriter<File>>),
    Raw(BufWriter<File>),
}

impl Sink {
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Sink::Zstd(e) => e.write_all(bytes),
            Sink::Raw(f) => f.write_all(bytes),
        }
    }

    /// Ends the record stream; returns the file to append the trailer to.
    fn finish(self) -> io::Result<BufWriter<File>> {
        match self {
            Sink::Zstd(e) => e.finish(),
            Sink::Raw(f) => Ok(f),
        }
    }
}

/// Writes a binary trace.
pub struct CacheWriter {
    /// `None` once finished.
    out: Option<Sink>,
    encoder: RecordEncoder,
    buf: Vec<u8>,
    tmp: PathBuf,
    path: PathBuf,
    extra: BinaryMeta,
}

impl CacheWriter {
    /// Starts `path` (written as `path.tmp-PID` until [`finish`](Self::finish)),
    /// zstd-compressed or not; `extra` pairs are added to the metadata.
    ///
    /// # Errors
    /// The temporary file cannot be created or written.
    pub fn create(path: &Path, extra: BinaryMeta, compress: bool) -> io::Result<Self> {
        let tmp = Self::temp_path(path);
        let mut file = BufWriter::with_capacity(1 << 20, File::create(&tmp)?);
        file.write_all(&preamble(if compress { FLAG_ZSTD } else { 0 }))?;
        let out =
            if compress { Sink::Zstd(zstd::stream::write::Encoder::new(file, ZSTD_LEVEL)?) } else { Sink::Raw(file) };
        Ok(Self {
            out: Some(out),
            encoder: RecordEncoder::new(),
            buf: Vec::with_capacity(1 << 20),
            tmp,
            path: path.into(),
            extra,
        })
    }

    /// Where [`create`](Self::create) writes `path` until it is complete.
    pub fn temp_path(path: &Path) -> PathBuf {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(format!(".tmp-{}", std::process::id()));
        PathBuf::from(tmp)
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
            if let Some(out) = &mut self.out {
                out.write_all(&self.buf)?;
            }
            self.buf.clear();
        }
        Ok(())
    }

    /// Ends the record stream, writes `meta` (with the extra pairs) and the
    /// trailer, and renames the file to its final name.
    ///
    /// # Errors
    /// Writing or renaming failed (the temporary file is removed).
    pub fn finish(mut self, meta: &BinaryMeta) -> io::Result<()> {
        let Some(mut out) = self.out.take() else {
            return Err(io::Error::other("already finished"));
        };
        let result = (|| {
            out.write_all(&self.buf)?;
            let mut file = out.finish()?;
            file.flush()?;
            let offset = file.get_mut().stream_position()?;
            let mut all = meta.clone();
            all.pairs.extend(self.extra.pairs.iter().cloned());
            let bytes = all.encode();
            file.write_all(&bytes)?;
            file.write_all(&trailer(offset, bytes.len() as u64))?;
            file.into_inner().map_err(|e| e.into_error())?.sync_all()?;
            fs::rename(&self.tmp, &self.path)
        })();
        if result.is_err() {
            let _ = fs::remove_file(&self.tmp);
        }
        result
    }
}

impl Drop for CacheWriter {
    /// A writer dropped before [`finish`](Self::finish) (the first pass
    /// failed) leaves no file behind.
    fn drop(&mut self) {
        if self.out.take().is_some() {
            let _ = fs::remove_file(&self.tmp);
        }
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
/// size and modification time.
fn source_identity(trace: &Path) -> io::Result<BinaryMeta> {
    let md = fs::metadata(trace)?;
    let modified = md.modified()?.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let mut m = BinaryMeta::default();
    m.push("source_bytes", md.len());
    m.push("source_modified_ns", modified);
    Ok(m)
}

/// The trace to replay for `trace` with `--cache`: a cache that matches it,
/// or else the trace itself and a writer that makes the cache during the
/// first pass (`None` when it cannot be created; the reason is returned
/// for the report; also when the cache's name is another path to the trace
/// itself, which is then only read).
pub fn use_cache(trace: &Path) -> (PathBuf, Option<CacheWriter>, Option<String>) {
    let cache = cache_path(trace);
    let tmp = CacheWriter::temp_path(&cache);
    if let Err(e) = crate::paths::check_outputs([trace], [cache.as_path(), tmp.as_path()]) {
        return (trace.into(), None, Some(format!("no cache written: {e}")));
    }
    let Ok(identity) = source_identity(trace) else {
        return (trace.into(), None, None);
    };
    if let Ok(stream) = EventStream::open(&cache) {
        let same = stream.binary_meta().is_some_and(|m| {
            m.get("source_bytes") == identity.get("source_bytes")
                && m.get("source_modified_ns") == identity.get("source_modified_ns")
                && scan::Scan::from_meta(m).is_some()
        });
        if same {
            return (cache, None, None);
        }
    }
    match CacheWriter::create(&cache, identity, false) {
        Ok(w) => (trace.into(), Some(w), None),
        Err(e) => (trace.into(), None, Some(format!("cannot write the cache {}: {e}", cache.display()))),
    }
}

/// `mmkit convert`: writes the binary form of a trace; returns a one-line
/// summary.
///
/// # Errors
/// The output names the trace (by any path; checked before anything is
/// written) or its directory is missing; reading the trace or writing the
/// output failed.
pub fn convert(args: &ConvertArgs) -> Result<String, String> {
    let out = args.out.clone().unwrap_or_else(|| cache_path(&args.trace));
    crate::paths::check_output_dir(&out)?;
    let tmp = CacheWriter::temp_path(&out);
    crate::paths::check_outputs([args.trace.as_path()], [out.as_path(), tmp.as_path()])?;
    let identity = source_identity(&args.trace).map_err(|e| format!("{}: {e}", args.trace.display()))?;
    let writer =
        CacheWriter::create(&out, identity, !args.uncompressed).map_err(|e| format!("{}: {e}", out.display()))?;
    let s = scan::scan(&args.trace, None, Some(writer))?;
    if let Some(e) = s.cache_error {
        return Err(e);
    }
    let bytes = fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
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
