//! The binary replay format (v1): a trace's events as fixed 8-byte words,
//! for replaying without parsing text.
//!
//! Owns the file's framing (a leading magic, a record stream, a trailer
//! with the metadata), the record codec and their typed errors. The record
//! stream may be stored compressed; which compression is a flag here, and
//! the (de)compression itself is the caller's, as is every file operation.
//! Must not touch the allocator or know what a replay does with an event.
//!
//! # Layout
//!
//! ```text
//! 0      8  magic "MMKTRACE"
//! 8      4  version (u32, little endian) = 1
//! 12     4  flags (u32): bit 0 = the record stream is zstd-compressed
//! 16     .. record stream (8-byte little-endian words)
//! M      .. metadata: events (u64), then UTF-8 `key=value` lines
//! end-24 8  M, the metadata's offset (u64)
//! end-16 8  the metadata's length (u64)
//! end-8  8  end magic "MMKTEND\0"
//! ```
//!
//! The metadata sits at the end so that a writer can stream events without
//! knowing their summary beforehand; a reader seeks to the trailer first. A
//! file cut short has no trailer and is refused.
//!
//! # Records
//!
//! One word per event in the common case:
//!
//! | bits | field |
//! |---|---|
//! | 0–1 | kind: 0 alloc, 1 free, 2 failed alloc, 3 wide |
//! | 2–6 | order (0..=[`MAX_TRACE_ORDER`]) |
//! | 7–15 | CPU (0..=511) |
//! | 16–25 | index into the GFP table (allocations; 0 for the others) |
//! | 26–63 | PFN minus the previous event's PFN, zigzag-coded (0 for a failed allocation) |
//!
//! An event that does not fit (CPU above 511, a PFN jump of 2^37 or more,
//! a GFP value not in the table) is *wide*: the word has kind 3, the order
//! in bits 2–6 and the real kind in bits 7–8, and two more words follow:
//! the PFN, then the CPU (low 32 bits) and the GFP bits (high 32). A wide
//! allocation whose GFP value is not in the table adds it, while the table
//! has fewer than [`MAX_GFP_TABLE`] entries; reader and writer grow the
//! table the same way, so the table is never stored. Sequence numbers,
//! timestamps and the migratetype column are not kept: the replay needs
//! none of them.
#![deny(unsafe_code)]

use crate::{EventKind, TraceEvent, MAX_TRACE_ORDER};
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use mmkit::gfp::Gfp;

/// First eight bytes of a binary trace.
pub const BINARY_MAGIC: [u8; 8] = *b"MMKTRACE";
/// Last eight bytes of a complete binary trace.
pub const BINARY_END_MAGIC: [u8; 8] = *b"MMKTEND\0";
/// The format version this crate reads and writes.
pub const BINARY_VERSION: u32 = 1;
/// Bytes before the record stream.
pub const BINARY_PREAMBLE_BYTES: usize = 16;
/// Bytes of the trailer after the metadata.
pub const BINARY_TRAILER_BYTES: usize = 24;
/// Most distinct GFP values a record can name by index.
pub const MAX_GFP_TABLE: usize = 1024;
/// Largest metadata block a reader accepts.
pub const MAX_META_BYTES: u64 = 16 << 20;
/// Flag bit: the record stream is zstd-compressed.
pub const FLAG_ZSTD: u32 = 1;

const KIND_ALLOC: u64 = 0;
const KIND_FREE: u64 = 1;
const KIND_FAILED: u64 = 2;
const KIND_WIDE: u64 = 3;
const CPU_BITS: u32 = 9;
const GFP_BITS: u32 = 10;
const DELTA_SHIFT: u32 = 26;
/// Zigzag-coded deltas below this fit the compact word.
const DELTA_LIMIT: u64 = 1 << (64 - DELTA_SHIFT);

/// Why binary trace bytes could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryError {
    /// The file does not start with [`BINARY_MAGIC`].
    NotBinary,
    /// A version this crate does not read.
    UnsupportedVersion(u32),
    /// Flag bits this crate does not know.
    UnknownFlags(u32),
    /// No trailer: the file was cut short (or is not a binary trace).
    NoTrailer,
    /// The trailer points outside the file or the metadata is too large.
    BadTrailer,
    /// The metadata is not `events` followed by UTF-8 `key=value` lines.
    BadMetadata,
    /// A record is malformed; `at` is its event index.
    BadRecord {
        /// Index of the event the record would have been.
        at: u64,
        /// What was wrong with it.
        reason: &'static str,
    },
    /// The stream ended inside a record, or with fewer events than the
    /// metadata announced.
    Truncated,
}

impl fmt::Display for BinaryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BinaryError::NotBinary => f.write_str("not a binary mmkit trace (no MMKTRACE magic)"),
            BinaryError::UnsupportedVersion(v) => write!(f, "binary trace version {v}; this build reads 1"),
            BinaryError::UnknownFlags(bits) => write!(f, "binary trace has unknown flags {bits:#x}"),
            BinaryError::NoTrailer => f.write_str("binary trace has no trailer (cut short?)"),
            BinaryError::BadTrailer => f.write_str("binary trace trailer points outside the file"),
            BinaryError::BadMetadata => f.write_str("binary trace metadata is malformed"),
            BinaryError::BadRecord { at, reason } => write!(f, "binary trace record of event {at}: {reason}"),
            BinaryError::Truncated => f.write_str("binary trace record stream ends early"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for BinaryError {}

/// What a record says happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RecordKind {
    /// A block was allocated.
    Alloc,
    /// A block was freed (batched frees included).
    Free,
    /// The kernel's allocation failed (no PFN).
    FailedAlloc,
}

/// One event as the binary format keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BinaryEvent {
    /// What happened.
    pub kind: RecordKind,
    /// First PFN of the block (0 for a failed allocation).
    pub pfn: u64,
    /// The block is 2^order pages (at most [`MAX_TRACE_ORDER`]).
    pub order: u8,
    /// CPU the event fired on.
    pub cpu: u32,
    /// GFP bits of an allocation (0 for frees).
    pub gfp: u32,
}

impl BinaryEvent {
    /// The binary form of a parsed event (sequence number, time,
    /// migratetype column and the unknown-GFP mark are dropped).
    #[must_use]
    pub fn from_trace_event(ev: &TraceEvent) -> Self {
        let (kind, pfn) = match (ev.kind, ev.pfn) {
            (EventKind::Alloc, Some(pfn)) => (RecordKind::Alloc, pfn),
            (EventKind::Alloc, None) => (RecordKind::FailedAlloc, 0),
            (_, pfn) => (RecordKind::Free, pfn.unwrap_or(0)),
        };
        let gfp = if ev.kind == EventKind::Alloc { ev.gfp.bits() } else { 0 };
        Self { kind, pfn, order: ev.order.min(MAX_TRACE_ORDER) as u8, cpu: ev.cpu, gfp }
    }

    /// The event as a [`TraceEvent`] numbered `seq` (time 0, no
    /// migratetype).
    #[must_use]
    pub fn to_trace_event(&self, seq: u64) -> TraceEvent {
        let (kind, pfn) = match self.kind {
            RecordKind::Alloc => (EventKind::Alloc, Some(self.pfn)),
            RecordKind::FailedAlloc => (EventKind::Alloc, None),
            RecordKind::Free => (EventKind::Free, Some(self.pfn)),
        };
        TraceEvent {
            seq,
            time_ns: 0,
            cpu: self.cpu,
            kind,
            pfn,
            order: u32::from(self.order),
            migratetype: None,
            gfp: Gfp::from_bits(self.gfp),
            unknown_gfp: false,
        }
    }
}

#[inline(always)]
fn zigzag(delta: i64) -> u64 {
    ((delta << 1) ^ (delta >> 63)) as u64
}

#[inline(always)]
fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// The GFP values seen so far, grown identically by writer and reader.
#[derive(Clone, Debug, Default)]
struct GfpTable {
    values: Vec<u32>,
}

impl GfpTable {
    fn find(&self, gfp: u32) -> Option<usize> {
        self.values.iter().position(|&v| v == gfp)
    }

    /// Adds `gfp` after a wide allocation carried it, if there is room.
    fn learn(&mut self, gfp: u32) {
        if self.values.len() < MAX_GFP_TABLE && self.find(gfp).is_none() {
            self.values.push(gfp);
        }
    }
}

/// Turns events into records; keep one per stream.
#[derive(Clone, Debug, Default)]
pub struct RecordEncoder {
    prev_pfn: u64,
    table: GfpTable,
    /// Index of the last GFP value looked up (allocations repeat theirs).
    last_gfp: Option<(u32, usize)>,
}

impl RecordEncoder {
    /// An encoder at the start of a stream.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends `ev`'s record (one or three words) to `out`. Orders above
    /// [`MAX_TRACE_ORDER`] are clamped to it (a parsed event never has
    /// one); a free's GFP bits and a failed allocation's PFN are written as
    /// 0, which is what [`BinaryEvent::from_trace_event`] gives them.
    pub fn encode(&mut self, ev: &BinaryEvent, out: &mut Vec<u8>) {
        let mut ev = *ev;
        match ev.kind {
            RecordKind::Free => ev.gfp = 0,
            RecordKind::FailedAlloc => ev.pfn = 0,
            RecordKind::Alloc => {}
        }
        let order = u64::from(ev.order.min(MAX_TRACE_ORDER as u8));
        let (kind, pfn) = match ev.kind {
            RecordKind::Alloc => (KIND_ALLOC, ev.pfn),
            RecordKind::Free => (KIND_FREE, ev.pfn),
            RecordKind::FailedAlloc => (KIND_FAILED, self.prev_pfn),
        };
        let gfp_index = match ev.kind {
            RecordKind::Alloc | RecordKind::FailedAlloc => self.gfp_index(ev.gfp),
            RecordKind::Free => Some(0),
        };
        // The true difference, so that the reader's checked add gives `pfn`
        // back (a wrapping one could cross 0 or u64::MAX).
        let diff = i128::from(pfn) - i128::from(self.prev_pfn);
        let delta = i64::try_from(diff).map_or(u64::MAX, zigzag);
        let fits = u64::from(ev.cpu) < 1 << CPU_BITS && delta < DELTA_LIMIT;
        match gfp_index {
            Some(g) if fits => {
                let word = kind | order << 2 | u64::from(ev.cpu) << 7 | (g as u64) << 16 | delta << DELTA_SHIFT;
                out.extend_from_slice(&word.to_le_bytes());
            }
            _ => {
                out.extend_from_slice(&(KIND_WIDE | order << 2 | kind << 7).to_le_bytes());
                out.extend_from_slice(&ev.pfn.to_le_bytes());
                out.extend_from_slice(&(u64::from(ev.cpu) | u64::from(ev.gfp) << 32).to_le_bytes());
                if ev.kind != RecordKind::Free {
                    self.table.learn(ev.gfp);
                    self.last_gfp = None;
                }
            }
        }
        if ev.kind != RecordKind::FailedAlloc {
            self.prev_pfn = ev.pfn;
        }
    }

    fn gfp_index(&mut self, gfp: u32) -> Option<usize> {
        if let Some((v, i)) = self.last_gfp {
            if v == gfp {
                return Some(i);
            }
        }
        let i = self.table.find(gfp)?;
        self.last_gfp = Some((gfp, i));
        Some(i)
    }
}

/// Turns records back into events; keep one per stream.
#[derive(Clone, Debug, Default)]
pub struct RecordDecoder {
    prev_pfn: u64,
    table: GfpTable,
    /// Events decoded so far.
    decoded: u64,
}

impl RecordDecoder {
    /// A decoder at the start of a stream.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Events decoded so far.
    #[must_use]
    pub fn decoded(&self) -> u64 {
        self.decoded
    }

    /// Decodes the whole records at the start of `bytes`, at most `max`
    /// events, handing each to `sink`; returns the bytes consumed (a
    /// record cut by the end of `bytes` is left for the next call, with
    /// the bytes after it).
    ///
    /// # Errors
    /// [`BinaryError::BadRecord`] for an unknown kind, an order above
    /// [`MAX_TRACE_ORDER`], a GFP index outside the table, a free with a
    /// GFP value, or a PFN that over- or underflows; events before it were
    /// handed out.
    #[inline]
    pub fn decode(&mut self, bytes: &[u8], max: u64, mut sink: impl FnMut(BinaryEvent)) -> Result<usize, BinaryError> {
        let mut at = 0usize;
        let mut left = max;
        while left > 0 && bytes.len() - at >= 8 {
            let word = read_word(bytes, at);
            let bad = |reason| BinaryError::BadRecord { at: self.decoded, reason };
            let order = (word >> 2 & 0x1f) as u8;
            if u32::from(order) > MAX_TRACE_ORDER {
                return Err(bad("order too large"));
            }
            let ev = if word & 3 == KIND_WIDE {
                if bytes.len() - at < 24 {
                    break;
                }
                if word >> 9 != 0 {
                    return Err(bad("unused bits set in a wide record"));
                }
                let pfn = read_word(bytes, at + 8);
                let extra = read_word(bytes, at + 16);
                let (cpu, gfp) = (extra as u32, (extra >> 32) as u32);
                let kind = match word >> 7 & 3 {
                    KIND_ALLOC => RecordKind::Alloc,
                    KIND_FREE => RecordKind::Free,
                    KIND_FAILED => RecordKind::FailedAlloc,
                    _ => return Err(bad("wide record of unknown kind")),
                };
                match kind {
                    RecordKind::Free if gfp != 0 => return Err(bad("a free carries gfp bits")),
                    RecordKind::FailedAlloc if pfn != 0 => return Err(bad("a failed allocation carries a pfn")),
                    RecordKind::Free => {}
                    _ => self.table.learn(gfp),
                }
                at += 24;
                BinaryEvent { kind, pfn, order, cpu, gfp }
            } else {
                let g = (word >> 16 & ((1 << GFP_BITS) - 1)) as usize;
                let delta = unzigzag(word >> DELTA_SHIFT);
                let cpu = (word >> 7 & ((1 << CPU_BITS) - 1)) as u32;
                let (kind, gfp) = match word & 3 {
                    KIND_FREE if g != 0 => return Err(bad("a free carries a gfp index")),
                    KIND_FREE => (RecordKind::Free, 0),
                    kind => {
                        let Some(&gfp) = self.table.values.get(g) else {
                            return Err(bad("gfp index outside the table"));
                        };
                        (if kind == KIND_ALLOC { RecordKind::Alloc } else { RecordKind::FailedAlloc }, gfp)
                    }
                };
                at += 8;
                if kind == RecordKind::FailedAlloc {
                    if delta != 0 {
                        return Err(bad("a failed allocation carries a pfn"));
                    }
                    BinaryEvent { kind, pfn: 0, order, cpu, gfp }
                } else {
                    let Some(pfn) = self.prev_pfn.checked_add_signed(delta) else {
                        return Err(bad("pfn out of range"));
                    };
                    BinaryEvent { kind, pfn, order, cpu, gfp }
                }
            };
            if ev.kind != RecordKind::FailedAlloc {
                self.prev_pfn = ev.pfn;
            }
            self.decoded += 1;
            left -= 1;
            sink(ev);
        }
        Ok(at)
    }
}

#[inline(always)]
fn read_word(bytes: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(w)
}

/// The file's first bytes: magic, version, flags.
///
/// ```
/// use mmkit_trace::binary::{preamble, read_preamble, FLAG_ZSTD};
/// let bytes = preamble(FLAG_ZSTD);
/// assert_eq!(read_preamble(&bytes), Ok(FLAG_ZSTD));
/// assert!(read_preamble(b"0 0 0 a 10 0 0 0xcc0\n").is_err());
/// ```
#[must_use]
pub fn preamble(flags: u32) -> [u8; BINARY_PREAMBLE_BYTES] {
    let mut out = [0u8; BINARY_PREAMBLE_BYTES];
    out[..8].copy_from_slice(&BINARY_MAGIC);
    out[8..12].copy_from_slice(&BINARY_VERSION.to_le_bytes());
    out[12..].copy_from_slice(&flags.to_le_bytes());
    out
}

/// Checks a file's first bytes; returns its flags.
///
/// # Errors
/// [`BinaryError::NotBinary`], [`BinaryError::UnsupportedVersion`],
/// [`BinaryError::UnknownFlags`].
pub fn read_preamble(bytes: &[u8]) -> Result<u32, BinaryError> {
    if bytes.len() < BINARY_PREAMBLE_BYTES || bytes[..8] != BINARY_MAGIC {
        return Err(BinaryError::NotBinary);
    }
    let version = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    if version != BINARY_VERSION {
        return Err(BinaryError::UnsupportedVersion(version));
    }
    let flags = u32::from_le_bytes([bytes[12], bytes[13], bytes[14], bytes[15]]);
    if flags & !FLAG_ZSTD != 0 {
        return Err(BinaryError::UnknownFlags(flags));
    }
    Ok(flags)
}

/// The metadata block: how many events, and what the writer wanted to
/// keep about the trace as `key=value` pairs (keys of `[a-z0-9_]`, values
/// without line breaks; a key may repeat).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BinaryMeta {
    /// Events in the record stream.
    pub events: u64,
    /// The pairs, in order.
    pub pairs: Vec<(String, String)>,
}

impl BinaryMeta {
    /// Adds a pair. Keys are lowercased and any other character outside
    /// `[a-z0-9_]` becomes `_`; line breaks in the value become spaces, so
    /// the block always reads back.
    pub fn push(&mut self, key: &str, value: impl fmt::Display) {
        use core::fmt::Write;
        let key: String = if key.is_empty() {
            String::from("_")
        } else {
            key.chars()
                .map(|c| c.to_ascii_lowercase())
                .map(|c| if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' { c } else { '_' })
                .collect()
        };
        let mut v = String::new();
        let _ = write!(v, "{value}");
        let v = v.replace(['\n', '\r'], " ");
        self.pairs.push((key, v));
    }

    /// The first value of `key`.
    #[must_use]
    pub fn get(&self, key: &str) -> Option<&str> {
        self.pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// The first value of `key` as a decimal `u64`.
    #[must_use]
    pub fn get_u64(&self, key: &str) -> Option<u64> {
        self.get(key).and_then(crate::parse_dec)
    }

    /// Every value of `key`, in order.
    pub fn all<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.pairs.iter().filter(move |(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// The block's bytes.
    #[must_use]
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&self.events.to_le_bytes());
        for (k, v) in &self.pairs {
            out.extend_from_slice(k.as_bytes());
            out.push(b'=');
            out.extend_from_slice(v.as_bytes());
            out.push(b'\n');
        }
        out
    }

    /// Reads a block.
    ///
    /// # Errors
    /// [`BinaryError::BadMetadata`]: shorter than 8 bytes, not UTF-8, a
    /// line without `=`, a bad key, or no final line break.
    pub fn decode(bytes: &[u8]) -> Result<Self, BinaryError> {
        if bytes.len() < 8 {
            return Err(BinaryError::BadMetadata);
        }
        let events = read_word(bytes, 0);
        let text = core::str::from_utf8(&bytes[8..]).map_err(|_| BinaryError::BadMetadata)?;
        if !text.is_empty() && !text.ends_with('\n') {
            return Err(BinaryError::BadMetadata);
        }
        let mut pairs = Vec::new();
        for line in text.split_terminator('\n') {
            let (k, v) = line.split_once('=').ok_or(BinaryError::BadMetadata)?;
            if k.is_empty() || !k.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') {
                return Err(BinaryError::BadMetadata);
            }
            if v.contains('\r') {
                return Err(BinaryError::BadMetadata);
            }
            pairs.push((String::from(k), String::from(v)));
        }
        Ok(Self { events, pairs })
    }
}

/// The trailer for metadata at `offset` of `len` bytes.
#[must_use]
pub fn trailer(offset: u64, len: u64) -> [u8; BINARY_TRAILER_BYTES] {
    let mut out = [0u8; BINARY_TRAILER_BYTES];
    out[..8].copy_from_slice(&offset.to_le_bytes());
    out[8..16].copy_from_slice(&len.to_le_bytes());
    out[16..].copy_from_slice(&BINARY_END_MAGIC);
    out
}

/// Reads the trailer (the last [`BINARY_TRAILER_BYTES`] of a file of
/// `file_len` bytes); returns the metadata's offset and length, checked to
/// lie between the preamble and the trailer.
///
/// # Errors
/// [`BinaryError::NoTrailer`] or [`BinaryError::BadTrailer`].
pub fn read_trailer(bytes: &[u8], file_len: u64) -> Result<(u64, u64), BinaryError> {
    if bytes.len() != BINARY_TRAILER_BYTES || bytes[16..] != BINARY_END_MAGIC {
        return Err(BinaryError::NoTrailer);
    }
    let offset = read_word(bytes, 0);
    let len = read_word(bytes, 8);
    let limit = file_len.checked_sub(BINARY_TRAILER_BYTES as u64).ok_or(BinaryError::BadTrailer)?;
    let end = offset.checked_add(len).ok_or(BinaryError::BadTrailer)?;
    if offset < BINARY_PREAMBLE_BYTES as u64 || end != limit || len > MAX_META_BYTES {
        return Err(BinaryError::BadTrailer);
    }
    Ok((offset, len))
}

#[cfg(test)]
mod tests;
