//! zstd dictionaries: loading one (the format `zstd --train` writes and
//! Linux's zram reads through `algorithm_params dict=PATH`), training one
//! from sample pages, and the prepared forms compression and decompression
//! use (zstd's `CDict` per level and `DDict`), made once per dictionary so
//! that no page pays for them.
//!
//! Owns the dictionary bytes and their prepared forms; the per-thread zstd
//! contexts that use them are `lib.rs`'s. Knows nothing of zram or zswap.

use crate::error::CompressError;
use crate::same_filled;
use std::path::Path;
use std::sync::Arc;
use zstd::zstd_safe::{CDict, DDict};

/// The first four bytes of a zstd dictionary (`ZSTD_MAGIC_DICTIONARY`).
const DICT_MAGIC: u32 = 0xEC30_A437;

/// Smallest dictionary training may produce (zstd's `ZDICT_DICTSIZE_MIN`).
pub const MIN_DICT_SIZE: usize = 256;

/// Largest dictionary this crate trains or loads: Linux's zram reads the
/// file whole into kernel memory, and past a few hundred KiB a dictionary
/// costs more in cache misses than it saves on 4 KiB pages.
pub const MAX_DICT_SIZE: usize = 16 << 20;

/// zstd's own advice for a trained dictionary's size (`zstd --train`'s
/// default `--maxdict`, 112 KiB).
pub const DEFAULT_DICT_SIZE: usize = 112 << 10;

/// A zstd dictionary, checked and prepared for decompression; cloning it
/// shares it (an `Arc`).
///
/// ```
/// use mmkit_compress::{Algorithm, Compressor, Dictionary};
///
/// // Pages that share a vocabulary, as executables do.
/// let pages: Vec<Vec<u8>> = (0..200u32)
///     .map(|i| {
///         let mut page = Vec::new();
///         while page.len() < 4096 {
///             page.extend_from_slice(format!("mov r{}, [rbp-{}]; call sym_{} ", i % 7, i % 13, i % 31).as_bytes());
///         }
///         page.truncate(4096);
///         page
///     })
///     .collect();
/// let dict = Dictionary::train(pages.iter().map(Vec::as_slice), 4096).unwrap();
/// let zstd = Compressor::with_dictionary(Algorithm::Zstd { level: 3 }, dict.clone()).unwrap();
/// let packed = zstd.compress(&pages[7], <[u8]>::to_vec).unwrap();
/// let mut back = vec![0; 4096];
/// assert!(zstd.decompress(&packed, &mut back));
/// assert_eq!(back, pages[7]);
/// ```
#[derive(Clone)]
pub struct Dictionary(Arc<Inner>);

struct Inner {
    bytes: Vec<u8>,
    id: u32,
    ddict: DDict<'static>,
}

impl Dictionary {
    /// Checks `bytes` as a zstd dictionary (magic number, id, entropy
    /// tables) and prepares it for decompression.
    ///
    /// # Errors
    /// [`CompressError::CorruptDictionary`] for bytes that are not one, or
    /// one longer than [`MAX_DICT_SIZE`].
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, CompressError> {
        let corrupt = |why: &str| Err(CompressError::CorruptDictionary(why.to_owned()));
        if bytes.len() > MAX_DICT_SIZE {
            return corrupt("longer than 16 MiB");
        }
        // zstd would take any bytes as a raw-content dictionary; insisting
        // on the magic number turns a wrong path into an error, not into a
        // dictionary that compresses nothing.
        if bytes.len() < 8 || u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) != DICT_MAGIC {
            return corrupt("no zstd dictionary magic number");
        }
        let Some(id) = zstd::zstd_safe::get_dict_id_from_dict(&bytes) else {
            return corrupt("dictionary id 0");
        };
        let Some(ddict) = DDict::try_create(&bytes) else {
            return corrupt("zstd refused its entropy tables");
        };
        // The DDict checks the tables for decompression; compression
        // checks them again (at level 1, cheap) so that a dictionary that
        // loads also compresses.
        if CDict::try_create(&bytes, 1).is_none() {
            return corrupt("zstd refused it for compression");
        }
        Ok(Self(Arc::new(Inner { bytes, id: id.get(), ddict })))
    }

    /// Reads and checks a dictionary file.
    ///
    /// # Errors
    /// [`CompressError::DictionaryFile`] when it cannot be read (missing,
    /// not a regular file, unreadable, or longer than [`MAX_DICT_SIZE`]);
    /// [`CompressError::CorruptDictionary`] as [`from_bytes`](Self::from_bytes).
    pub fn load(path: &Path) -> Result<Self, CompressError> {
        use std::io::Read;
        let file_error = |error: String| CompressError::DictionaryFile { path: path.to_owned(), error };
        // Only regular files, as Linux's `kernel_read_file` takes: a FIFO
        // would block and a device such as /dev/zero never ends.
        let meta = std::fs::metadata(path).map_err(|e| file_error(e.to_string()))?;
        if !meta.is_file() {
            return Err(file_error("not a regular file".into()));
        }
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(MAX_DICT_SIZE as u64 + 1).read_to_end(&mut bytes))
            .map_err(|e| file_error(e.to_string()))?;
        if bytes.len() > MAX_DICT_SIZE {
            return Err(file_error("more than the 16 MiB a dictionary may have".into()));
        }
        Self::from_bytes(bytes)
    }

    /// Trains a dictionary of at most `max_size` bytes on `pages`, skipping
    /// same-filled ones (zram keeps those as one word and never compresses
    /// them, so they would only teach the dictionary runs of zeroes).
    ///
    /// # Errors
    /// [`CompressError::Training`] for a size outside
    /// [`MIN_DICT_SIZE`]`..=`[`MAX_DICT_SIZE`], fewer than 8 pages left,
    /// or zstd's trainer failing (too little variety for the size asked).
    pub fn train<'a>(pages: impl IntoIterator<Item = &'a [u8]>, max_size: usize) -> Result<Self, CompressError> {
        if !(MIN_DICT_SIZE..=MAX_DICT_SIZE).contains(&max_size) {
            return Err(CompressError::Training(format!(
                "a dictionary of {max_size} bytes: sizes {MIN_DICT_SIZE}..={MAX_DICT_SIZE} are taken"
            )));
        }
        let mut data = Vec::new();
        let mut sizes = Vec::new();
        for page in pages {
            if !page.is_empty() && same_filled(page).is_none() {
                data.extend_from_slice(page);
                sizes.push(page.len());
            }
        }
        if sizes.len() < 8 {
            return Err(CompressError::Training(format!(
                "{} pages that are not same-filled; at least 8 are needed",
                sizes.len()
            )));
        }
        let bytes =
            zstd::dict::from_continuous(&data, &sizes, max_size).map_err(|e| CompressError::Training(e.to_string()))?;
        Self::from_bytes(bytes).map_err(|e| CompressError::Training(e.to_string()))
    }

    /// Writes the dictionary to `path` (the bytes [`load`](Self::load)
    /// reads back, and `zstd -D` takes).
    ///
    /// # Errors
    /// [`CompressError::DictionaryFile`].
    pub fn save(&self, path: &Path) -> Result<(), CompressError> {
        std::fs::write(path, self.as_bytes())
            .map_err(|e| CompressError::DictionaryFile { path: path.to_owned(), error: e.to_string() })
    }

    /// The dictionary's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0.bytes
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.0.bytes.len()
    }

    /// Never true: a dictionary has at least its header.
    pub fn is_empty(&self) -> bool {
        self.0.bytes.is_empty()
    }

    /// The id zstd writes into every frame compressed with it, by which a
    /// frame is refused under another dictionary.
    pub fn id(&self) -> u32 {
        self.0.id
    }

    pub(crate) fn ddict(&self) -> &DDict<'static> {
        &self.0.ddict
    }

    /// Prepared for compression at `level`.
    pub(crate) fn prepare(&self, level: i32) -> Result<CDict<'static>, CompressError> {
        CDict::try_create(self.as_bytes(), level)
            .ok_or_else(|| CompressError::CorruptDictionary(format!("zstd refused it at level {level}")))
    }
}

/// Two dictionaries are equal when their bytes are.
impl PartialEq for Dictionary {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.bytes == other.0.bytes
    }
}

impl Eq for Dictionary {}

impl core::fmt::Debug for Dictionary {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Dictionary").field("id", &self.id()).field("len", &self.len()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_that_are_no_dictionary_are_refused() {
        assert!(matches!(Dictionary::from_bytes(Vec::new()), Err(CompressError::CorruptDictionary(_))));
        assert!(matches!(Dictionary::from_bytes(vec![7; 4096]), Err(CompressError::CorruptDictionary(_))));
        let mut magic_only = DICT_MAGIC.to_le_bytes().to_vec();
        magic_only.extend_from_slice(&[1, 2, 3, 4]);
        magic_only.extend_from_slice(&[0xff; 64]);
        assert!(matches!(Dictionary::from_bytes(magic_only), Err(CompressError::CorruptDictionary(_))));
        let missing = Path::new("no/such/dictionary");
        assert!(matches!(Dictionary::load(missing), Err(CompressError::DictionaryFile { .. })));
        assert!(matches!(Dictionary::load(Path::new("/dev/zero")), Err(CompressError::DictionaryFile { .. })));
        assert!(matches!(Dictionary::load(Path::new(".")), Err(CompressError::DictionaryFile { .. })));
    }

    #[test]
    fn training_refuses_bad_sizes_and_too_few_pages() {
        let zeroes = vec![0u8; 4096];
        let pages = vec![zeroes.as_slice(); 100];
        assert!(matches!(Dictionary::train(pages, 4096), Err(CompressError::Training(_))), "all same-filled");
        let page: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
        assert!(matches!(Dictionary::train([page.as_slice()], 4096), Err(CompressError::Training(_))));
        assert!(matches!(Dictionary::train(vec![page.as_slice(); 20], 100), Err(CompressError::Training(_))));
    }
}
