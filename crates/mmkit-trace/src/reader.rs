//! Streaming trace reader over `std::io::BufRead` (`std` only).
//!
//! Owns the line loop: bounded line buffers (a line longer than
//! [`MAX_LINE_BYTES`] is skipped as malformed, never buffered whole), line
//! numbers, skip counting, the header lines before the first event. Must not
//! touch decompression or files: callers hand in a reader.

use crate::{parse_line, EventKind, TraceEvent, TraceLine, TraceParseError};
use std::io::{self, BufRead};
use std::string::String;
use std::vec::Vec;

/// Longest line kept; longer lines are skipped and counted.
pub const MAX_LINE_BYTES: usize = 16 * 1024;

/// How many skipped lines are remembered with their reasons.
pub const MAX_REMEMBERED_ERRORS: usize = 16;

/// Most header lines kept (only those before the first event are kept).
const MAX_HEADER_LINES: usize = 512;

/// What a [`TraceReader`] has seen so far.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Lines read, including headers, blanks and skipped ones.
    pub lines: u64,
    /// Events returned.
    pub events: u64,
    /// Allocation events (failed ones included).
    pub allocs: u64,
    /// Allocations the trace records as failed (no PFN).
    pub failed_allocs: u64,
    /// `mm_page_free` events.
    pub frees: u64,
    /// `mm_page_free_batched` events.
    pub batched_frees: u64,
    /// Malformed lines skipped.
    pub skipped: u64,
    /// The first [`MAX_REMEMBERED_ERRORS`] skipped lines and why.
    pub first_errors: Vec<TraceParseError>,
    /// `perf script` lines of other tracepoints, ignored.
    pub other_events: u64,
    /// Events whose GFP text named a flag this kernel does not know.
    pub unknown_gfp: u64,
}

/// Streams [`TraceEvent`]s from a text trace in either format, skipping
/// (and counting) malformed lines. Memory use is bounded whatever the
/// input: one line buffer, a capped header and a capped error list.
///
/// ```
/// use mmkit_trace::TraceReader;
/// let text = "# header\n0 0 1 a 10 0 0 0xcc0\nbad line\n1 5 1 f 10 0 - -\n";
/// let mut reader = TraceReader::new(text.as_bytes());
/// let events: Vec<_> = reader.by_ref().collect();
/// assert_eq!(events.len(), 2);
/// assert_eq!(reader.stats().skipped, 1);
/// assert_eq!(reader.stats().first_errors[0].line, 3);
/// assert!(reader.io_error().is_none());
/// ```
pub struct TraceReader<R> {
    input: R,
    buf: Vec<u8>,
    stats: ReadStats,
    header: Vec<String>,
    io_error: Option<io::Error>,
}

impl<R: BufRead> TraceReader<R> {
    /// A reader over `input`.
    pub fn new(input: R) -> Self {
        Self { input, buf: Vec::with_capacity(256), stats: ReadStats::default(), header: Vec::new(), io_error: None }
    }

    /// Counts so far.
    pub fn stats(&self) -> &ReadStats {
        &self.stats
    }

    /// The `#` lines before the first event (without the `#`), at most 512.
    pub fn header(&self) -> &[String] {
        &self.header
    }

    /// The I/O error that ended the stream early, if any.
    pub fn io_error(&self) -> Option<&io::Error> {
        self.io_error.as_ref()
    }

    /// Reads the next line into `buf` (without its newline). Returns false
    /// at the end of input; a line over [`MAX_LINE_BYTES`] is truncated
    /// there and `too_long` is set, the rest of it is consumed and dropped.
    fn next_line(&mut self, too_long: &mut bool) -> io::Result<bool> {
        self.buf.clear();
        *too_long = false;
        let mut any = false;
        loop {
            let chunk = match self.input.fill_buf() {
                Ok(chunk) => chunk,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if chunk.is_empty() {
                return Ok(any);
            }
            any = true;
            let (take, done) = match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => (i, true),
                None => (chunk.len(), false),
            };
            let room = MAX_LINE_BYTES.saturating_sub(self.buf.len());
            if take > room {
                *too_long = true;
            }
            self.buf.extend_from_slice(&chunk[..take.min(room)]);
            self.input.consume(if done { take + 1 } else { take });
            if done {
                return Ok(true);
            }
        }
    }
}

/// Records a skipped line.
fn skip(stats: &mut ReadStats, err: TraceParseError) {
    stats.skipped += 1;
    if stats.first_errors.len() < MAX_REMEMBERED_ERRORS {
        stats.first_errors.push(err);
    }
}

/// Handles one complete line (without its newline): counts it and returns
/// its event, if it is one.
fn handle_line(stats: &mut ReadStats, header: &mut Vec<String>, bytes: &[u8], too_long: bool) -> Option<TraceEvent> {
    stats.lines += 1;
    let line_no = stats.lines;
    if too_long {
        skip(stats, TraceParseError { line: line_no, reason: "line too long" });
        return None;
    }
    let Ok(text) = core::str::from_utf8(bytes) else {
        skip(stats, TraceParseError { line: line_no, reason: "line is not UTF-8" });
        return None;
    };
    match parse_line(text, line_no) {
        Ok(TraceLine::Blank) => None,
        Ok(TraceLine::Header(h)) => {
            if stats.events == 0 && header.len() < MAX_HEADER_LINES {
                header.push(String::from(h));
            }
            None
        }
        Ok(TraceLine::OtherEvent(_)) => {
            stats.other_events += 1;
            None
        }
        Ok(TraceLine::Event { mut event, numbered }) => {
            if !numbered {
                event.seq = stats.events;
            }
            stats.events += 1;
            match event.kind {
                EventKind::Alloc => {
                    stats.allocs += 1;
                    stats.failed_allocs += u64::from(event.pfn.is_none());
                }
                EventKind::Free => stats.frees += 1,
                EventKind::FreeBatched => stats.batched_frees += 1,
            }
            stats.unknown_gfp += u64::from(event.unknown_gfp);
            Some(event)
        }
        Err(e) => {
            skip(stats, e);
            None
        }
    }
}

impl<R: BufRead> Iterator for TraceReader<R> {
    type Item = TraceEvent;

    fn next(&mut self) -> Option<TraceEvent> {
        if self.io_error.is_some() {
            return None;
        }
        loop {
            // Fast path: a whole line in the reader's buffer is parsed in
            // place, without copying it.
            let chunk = match self.input.fill_buf() {
                Ok(chunk) => chunk,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.io_error = Some(e);
                    return None;
                }
            };
            if let Some(end) = chunk.iter().take(MAX_LINE_BYTES + 1).position(|&b| b == b'\n') {
                let event = handle_line(&mut self.stats, &mut self.header, &chunk[..end], false);
                self.input.consume(end + 1);
                if event.is_some() {
                    return event;
                }
                continue;
            }
            // A line across the buffer's end, a long line or the last line.
            let mut too_long = false;
            match self.next_line(&mut too_long) {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => {
                    self.io_error = Some(e);
                    return None;
                }
            }
            if let Some(event) = handle_line(&mut self.stats, &mut self.header, &self.buf, too_long) {
                return Some(event);
            }
        }
    }
}
