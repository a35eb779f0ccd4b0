//! A trace as a stream of engine events, whatever it is stored as: text
//! (either text format, plain or compressed) parsed line by line, or the
//! binary format (`mmkit_trace::binary`) decoded a buffer at a time.
//!
//! Owns the conversion of parsed or decoded events into the engine's
//! compact [`Ev`], the skip counts that go with it (orders above 10,
//! migratetype columns that disagree with the GFP bits) and the binary
//! file's framing (preamble, trailer, metadata, the record range).
//! Decompression is `source`'s; what happens to the events is the
//! caller's.

use super::engine::{Ev, Op, MAX_ORDER};
use super::source::{self, Compression};
use mmkit::gfp::gfp_migratetype;
use mmkit_trace::binary::{
    self, BinaryEvent, BinaryMeta, RecordDecoder, RecordKind, BINARY_PREAMBLE_BYTES, BINARY_TRAILER_BYTES, FLAG_ZSTD,
};
use mmkit_trace::{EventKind, ReadStats, TraceEvent, TraceReader};
use std::fs::File;
use std::io::{self, BufRead, Read, Seek, SeekFrom};
use std::path::Path;

/// Bytes of records decoded per read from a binary file.
const BINARY_BUF: usize = 1 << 20;

/// The engine's form of a parsed event; `None` for orders above 10.
#[inline]
pub fn convert(ev: &TraceEvent) -> Option<Ev> {
    if ev.order > MAX_ORDER {
        return None;
    }
    let (op, pfn) = match (ev.kind, ev.pfn) {
        (EventKind::Alloc, Some(pfn)) => (Op::Alloc, pfn),
        (EventKind::Alloc, None) => (Op::FailedAlloc, 0),
        (_, pfn) => (Op::Free, pfn.unwrap_or(0)),
    };
    Some(Ev { pfn, gfp: ev.gfp.bits(), cpu: ev.cpu.min(u32::from(u16::MAX)) as u16, order: ev.order as u8, op })
}

/// The engine's form of a decoded record; `None` for orders above 10.
#[inline(always)]
fn convert_binary(ev: &BinaryEvent) -> Option<Ev> {
    if u32::from(ev.order) > MAX_ORDER {
        return None;
    }
    let op = match ev.kind {
        RecordKind::Alloc => Op::Alloc,
        RecordKind::Free => Op::Free,
        RecordKind::FailedAlloc => Op::FailedAlloc,
    };
    Some(Ev { pfn: ev.pfn, gfp: ev.gfp, cpu: ev.cpu.min(u32::from(u16::MAX)) as u16, order: ev.order, op })
}

/// The binary record of an engine event (what a cache file stores).
#[inline]
pub fn to_binary(ev: &Ev) -> BinaryEvent {
    let kind = match ev.op {
        Op::Alloc => RecordKind::Alloc,
        Op::Free => RecordKind::Free,
        Op::FailedAlloc => RecordKind::FailedAlloc,
    };
    BinaryEvent { kind, pfn: ev.pfn, order: ev.order, cpu: u32::from(ev.cpu), gfp: ev.gfp }
}

/// A binary trace's framing: flags, metadata and where its records lie.
pub struct BinaryFile {
    /// The metadata block.
    pub meta: BinaryMeta,
    /// Preamble flags.
    pub flags: u32,
    /// Bytes of the record stream (after the preamble).
    pub records_len: u64,
}

/// Reads a binary trace's preamble and trailer.
///
/// # Errors
/// I/O errors and [`binary::BinaryError`]s, as text.
pub fn read_binary_file(file: &mut File) -> Result<BinaryFile, String> {
    let len = file.metadata().map_err(|e| e.to_string())?.len();
    let mut pre = [0u8; BINARY_PREAMBLE_BYTES];
    file.seek(SeekFrom::Start(0))
        .and_then(|_| file.read_exact(&mut pre))
        .map_err(|_| binary::BinaryError::NotBinary.to_string())?;
    let flags = binary::read_preamble(&pre).map_err(|e| e.to_string())?;
    if len < (BINARY_PREAMBLE_BYTES + BINARY_TRAILER_BYTES) as u64 {
        return Err(binary::BinaryError::NoTrailer.to_string());
    }
    let mut tail = [0u8; BINARY_TRAILER_BYTES];
    file.seek(SeekFrom::Start(len - BINARY_TRAILER_BYTES as u64))
        .and_then(|_| file.read_exact(&mut tail))
        .map_err(|e| e.to_string())?;
    let (offset, meta_len) = binary::read_trailer(&tail, len).map_err(|e| e.to_string())?;
    let mut meta = vec![0u8; meta_len as usize];
    file.seek(SeekFrom::Start(offset)).and_then(|_| file.read_exact(&mut meta)).map_err(|e| e.to_string())?;
    let meta = BinaryMeta::decode(&meta).map_err(|e| e.to_string())?;
    Ok(BinaryFile { meta, flags, records_len: offset - BINARY_PREAMBLE_BYTES as u64 })
}

/// Where events come from.
enum Input {
    Text(TraceReader<Box<dyn BufRead>>),
    Binary {
        records: Box<dyn Read>,
        decoder: RecordDecoder,
        /// Undecoded bytes: `buf[at..filled]`.
        buf: Vec<u8>,
        at: usize,
        filled: usize,
        /// Events the metadata announced and not yet decoded.
        left: u64,
        /// The metadata (header lines, counts of the text it came from).
        meta: Box<BinaryMeta>,
    },
}

/// Events of one trace file, in chunks.
pub struct EventStream {
    input: Input,
    /// How the file is stored.
    pub compression: Compression,
    /// Events skipped for an order above 10.
    pub unsupported_order: u64,
    /// Allocations whose migratetype column disagrees with their GFP bits
    /// (text only).
    pub migratetype_mismatches: u64,
}

impl EventStream {
    /// Opens `path`, recognising the binary format and compression by
    /// their first bytes.
    ///
    /// # Errors
    /// The file cannot be opened or read, or its binary framing is bad.
    pub fn open(path: &Path) -> Result<Self, String> {
        let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::from_file(file, path)
    }

    /// Reads `file` (a handle at its start, named `path` in messages), as
    /// [`open`](Self::open) does.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn from_file(file: File, path: &Path) -> Result<Self, String> {
        let at = |e: String| format!("{}: {e}", path.display());
        let again = file.try_clone().map_err(|e| at(e.to_string()))?;
        let (reader, compression) = source::open_file(file).map_err(|e| at(e.to_string()))?;
        let input = if compression == Compression::Binary {
            drop(reader);
            let mut file = again;
            if !file.metadata().is_ok_and(|m| m.is_file()) {
                return Err(at("a binary trace is read from its end first: give it as a file, not a stream".into()));
            }
            let framing = read_binary_file(&mut file).map_err(at)?;
            file.seek(SeekFrom::Start(BINARY_PREAMBLE_BYTES as u64)).map_err(|e| at(e.to_string()))?;
            let raw = io::BufReader::with_capacity(1 << 16, file).take(framing.records_len);
            let records: Box<dyn Read> = if framing.flags & FLAG_ZSTD != 0 {
                Box::new(zstd::stream::read::Decoder::with_buffer(raw).map_err(|e| at(e.to_string()))?)
            } else {
                Box::new(raw)
            };
            Input::Binary {
                records,
                decoder: RecordDecoder::new(),
                buf: vec![0; BINARY_BUF],
                at: 0,
                filled: 0,
                left: framing.meta.events,
                meta: Box::new(framing.meta),
            }
        } else {
            Input::Text(TraceReader::new(reader))
        };
        Ok(Self { input, compression, unsupported_order: 0, migratetype_mismatches: 0 })
    }

    /// The binary file's metadata, if this is one.
    pub fn binary_meta(&self) -> Option<&BinaryMeta> {
        match &self.input {
            Input::Binary { meta, .. } => Some(meta),
            Input::Text(_) => None,
        }
    }

    /// The text reader's counts (empty for a binary file).
    pub fn text_stats(&self) -> Option<(&ReadStats, &[String])> {
        match &self.input {
            Input::Text(r) => Some((r.stats(), r.header())),
            Input::Binary { .. } => None,
        }
    }

    /// `--strict`'s verdict so far: the first malformed line of a text
    /// trace, as an error.
    ///
    /// # Errors
    /// `line N: why (--strict …)`.
    pub fn check_strict(&self) -> Result<(), String> {
        match self.text_stats().and_then(|(st, _)| st.first_errors.first()) {
            Some(e) => {
                Err(format!("{e} (--strict: a malformed line is an error; without it, it is skipped and counted)"))
            }
            None => Ok(()),
        }
    }

    /// Appends up to `max` events to `out`; returns how many (0 at the end).
    ///
    /// # Errors
    /// A read error, or a malformed or cut binary record stream.
    pub fn fill(&mut self, out: &mut Vec<Ev>, max: usize) -> Result<usize, String> {
        let before = out.len();
        match &mut self.input {
            Input::Text(reader) => {
                while out.len() - before < max {
                    let Some(ev) = reader.next() else {
                        break;
                    };
                    if let (EventKind::Alloc, Some(mt)) = (ev.kind, ev.migratetype) {
                        self.migratetype_mismatches += u64::from(mt != gfp_migratetype(ev.gfp) as u8);
                    }
                    match convert(&ev) {
                        Some(e) => out.push(e),
                        None => self.unsupported_order += 1,
                    }
                }
                if let Some(e) = reader.io_error() {
                    return Err(format!("reading line {}: {e}", reader.stats().lines + 1));
                }
            }
            Input::Binary { records, decoder, buf, at, filled, left, .. } => {
                let mut room = max;
                while room > 0 && *left > 0 {
                    let want = (room as u64).min(*left);
                    let (mut got, mut skipped) = (0u64, 0u64);
                    let used = decoder
                        .decode(&buf[*at..*filled], want, |b| {
                            got += 1;
                            match convert_binary(&b) {
                                Some(e) => out.push(e),
                                None => skipped += 1,
                            }
                        })
                        .map_err(|e| e.to_string())?;
                    *at += used;
                    *left -= got;
                    room -= (got - skipped) as usize;
                    self.unsupported_order += skipped;
                    if got == 0 {
                        // At most a partial record is left: move it to the
                        // front and read more.
                        buf.copy_within(*at..*filled, 0);
                        *filled -= *at;
                        *at = 0;
                        let n = read_some(records, &mut buf[*filled..]).map_err(|e| e.to_string())?;
                        if n == 0 {
                            return Err(binary::BinaryError::Truncated.to_string());
                        }
                        *filled += n;
                    }
                }
            }
        }
        Ok(out.len() - before)
    }
}

/// One `read` that retries on interruption.
fn read_some(r: &mut dyn Read, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match r.read(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}
