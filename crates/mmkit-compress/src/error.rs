//! Why choosing an algorithm, its level or its dictionary failed.
//!
//! Owns the error type only; whoever returns one has changed nothing.

use std::path::PathBuf;

/// Why an algorithm, level or dictionary was refused. Whatever returned it
/// has changed nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CompressError {
    /// No algorithm of that name (the known ones are [`crate::ALGORITHMS`]).
    UnknownAlgorithm(String),
    /// The level is outside what the algorithm takes.
    LevelOutOfRange {
        /// The algorithm's name.
        algorithm: &'static str,
        /// The level asked for.
        level: i64,
        /// Lowest level taken.
        min: i32,
        /// Highest level taken.
        max: i32,
    },
    /// The algorithm takes no level (lz4: Linux's lz4 backend reads it as an
    /// acceleration, which this crate does not offer).
    NoLevel(&'static str),
    /// The algorithm cannot use a dictionary here (only zstd can).
    NoDictionary(&'static str),
    /// The dictionary file cannot be read.
    DictionaryFile {
        /// The file.
        path: PathBuf,
        /// What the system said.
        error: String,
    },
    /// The bytes are not a zstd dictionary, or zstd refused them.
    CorruptDictionary(String),
    /// Training found too few distinct pages, or zstd's trainer failed.
    Training(String),
}

impl core::fmt::Display for CompressError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::UnknownAlgorithm(name) => {
                write!(f, "unknown algorithm {name:?} (known: {})", crate::ALGORITHMS.join(", "))
            }
            Self::LevelOutOfRange { algorithm, level, min, max } => {
                write!(f, "{algorithm} takes levels {min}..={max}, not {level}")
            }
            Self::NoLevel(algorithm) => write!(f, "{algorithm} takes no level"),
            Self::NoDictionary(algorithm) => write!(f, "{algorithm} cannot use a dictionary (only zstd can)"),
            Self::DictionaryFile { path, error } => write!(f, "dictionary {}: {error}", path.display()),
            Self::CorruptDictionary(why) => write!(f, "not a usable zstd dictionary: {why}"),
            Self::Training(why) => write!(f, "dictionary training failed: {why}"),
        }
    }
}

impl std::error::Error for CompressError {}
