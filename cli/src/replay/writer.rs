//! Writing a binary trace (`mmkit_trace::binary`: 8-byte records,
//! zstd-compressed or not, the first pass's summary in the trailer), for
//! `mmkit convert` and `mmkit replay --cache` (`cache`), fed by the first
//! pass (`scan`).
//!
//! Owns the file as it is written, through `crate::paths::Output`: a file
//! is renamed into place when complete, so a cut-short file never carries
//! the final name; a FIFO or a device is written through. Must not know
//! where the events come from or what the cache is for.

use super::engine::Ev;
use super::stream;
use crate::paths::Output;
use mmkit_trace::binary::{preamble, trailer, BinaryMeta, RecordEncoder, FLAG_ZSTD};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// zstd level for the record stream: fast to write, decodes at several
/// hundred million events per second.
const ZSTD_LEVEL: i32 = 3;
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
