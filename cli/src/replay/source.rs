//! Opening a trace file: plain text, xz or zstd, recognised by the first
//! bytes (magic numbers), not by the file name; the binary format is
//! recognised here too, and read by `stream`.
//!
//! Owns decompression and nothing else: the line format is
//! `mmkit_trace`'s, what happens to events is the engine's.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
#[cfg(test)]
use std::path::Path;

/// xz stream header: `FD 37 7A 58 5A 00`.
const XZ_MAGIC: &[u8] = &[0xfd, b'7', b'z', b'X', b'Z', 0x00];
/// zstd frame header: `28 B5 2F FD`.
const ZSTD_MAGIC: &[u8] = &[0x28, 0xb5, 0x2f, 0xfd];

/// How a trace file is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// Plain text.
    None,
    /// xz (liblzma).
    Xz,
    /// Zstandard.
    Zstd,
    /// mmkit's binary format (`mmkit_trace::binary`), not text at all.
    Binary,
}

impl Compression {
    /// Name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Xz => "xz",
            Compression::Zstd => "zstd",
            Compression::Binary => "binary",
        }
    }
}

/// Which compression the first bytes of a file announce.
pub fn detect(head: &[u8]) -> Compression {
    if head.starts_with(&mmkit_trace::binary::BINARY_MAGIC) {
        Compression::Binary
    } else if head.starts_with(XZ_MAGIC) {
        Compression::Xz
    } else if head.starts_with(ZSTD_MAGIC) {
        Compression::Zstd
    } else {
        Compression::None
    }
}

/// Opens `path` and returns a buffered reader of its decompressed text (of
/// the raw bytes for the binary format).
///
/// # Errors
/// The file cannot be opened or read, or the zstd decoder cannot start.
#[cfg(test)]
pub fn open(path: &Path) -> io::Result<(Box<dyn BufRead>, Compression)> {
    open_file(File::open(path)?)
}

/// A buffered reader of the decompressed text of `file`, read from where
/// it stands (of the raw bytes for the binary format).
///
/// # Errors
/// The file cannot be read, or the zstd decoder cannot start.
pub fn open_file(file: File) -> io::Result<(Box<dyn BufRead>, Compression)> {
    let mut file = BufReader::with_capacity(1 << 16, file);
    let kind = detect(file.fill_buf()?);
    let reader: Box<dyn BufRead> = match kind {
        Compression::None | Compression::Binary => Box::new(file),
        Compression::Xz => {
            Box::new(BufReader::with_capacity(1 << 16, xz2::bufread::XzDecoder::new_multi_decoder(file)))
        }
        Compression::Zstd => {
            Box::new(BufReader::with_capacity(1 << 16, zstd::stream::read::Decoder::with_buffer(file)?))
        }
    };
    Ok((reader, kind))
}

/// Reads a whole (small) trace file into a string, decompressing it; used
/// by tests.
#[cfg(test)]
pub fn read_to_string(path: &Path) -> io::Result<String> {
    use std::io::Read;
    let (mut r, _) = open(path)?;
    let mut s = String::new();
    r.read_to_string(&mut s)?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn detects_by_magic_not_by_name() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        let text = "0 0 0 a 10 0 0 0xcc0\n1 1 0 f 10 0 - -\n";
        let plain = dir.join("trace.xz"); // misleading extension
        std::fs::write(&plain, text).unwrap();
        let xz = dir.join("trace.txt");
        let mut enc = xz2::write::XzEncoder::new(Vec::new(), 6);
        enc.write_all(text.as_bytes()).unwrap();
        std::fs::write(&xz, enc.finish().unwrap()).unwrap();
        let zst = dir.join("trace");
        std::fs::write(&zst, zstd::encode_all(text.as_bytes(), 3).unwrap()).unwrap();
        for (path, kind) in [(&plain, Compression::None), (&xz, Compression::Xz), (&zst, Compression::Zstd)] {
            assert_eq!(open(path).unwrap().1, kind);
            assert_eq!(read_to_string(path).unwrap(), text);
        }
    }
}
