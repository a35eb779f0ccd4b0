//! zram's `algorithm_params` (Linux 6.12+, `algorithm_params_store` and
//! `comp_params_store` in `drivers/block/zram/zram_drv.c`):
//! `algo=NAME [priority=N] [level=N] [dict=PATH]`, which sets the level
//! and the pre-trained dictionary of one algorithm — the primary
//! (priority 0) or a recompression one, picked by `algo` or `priority`.
//!
//! Owns the parameters' text form, their checking (an unknown key, a level
//! the algorithm does not take, a dictionary file that is missing or not
//! one: each a typed error that changes nothing) and turning a
//! configuration into the device's compressors. Must not touch slots,
//! pools or the I/O paths; `config.rs` and `attrs.rs` only call in here.

use crate::config::ZramConfig;
use crate::device::Device;
use crate::ZramError;
use mmkit_compress::{Algorithm, Compressor, Dictionary};
use std::path::PathBuf;

/// Linux's `ZRAM_MAX_COMPS`: the primary and three secondaries.
const MAX_COMPS: usize = 4;

/// One `algorithm_params` store, parsed.
///
/// ```
/// use mmkit_zram::{AlgorithmParams, ZramConfig, ZramError};
/// let p = AlgorithmParams::parse("algo=zstd level=9").unwrap();
/// assert_eq!((p.algo.as_deref(), p.level), (Some("zstd"), Some(9)));
/// assert!(matches!(AlgorithmParams::parse("level=nine"), Err(ZramError::Invalid(_))));
///
/// let mut config = ZramConfig::default();
/// config.set("comp", "zstd").unwrap();
/// config.set("algorithm_params", "algo=zstd level=12").unwrap();
/// assert_eq!(config.algorithm, mmkit_zram::Algorithm::Zstd { level: 12 });
/// let before = config.clone();
/// assert!(config.set("algorithm_params", "algo=zstd level=23").is_err());
/// assert!(config.set("algorithm_params", "algo=zstd dict=no/such/file").is_err());
/// assert_eq!(config, before);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AlgorithmParams {
    /// `priority=N`: 0 the primary, 1..=3 the secondaries (default 0).
    pub priority: Option<usize>,
    /// `algo=NAME`: the priority whose algorithm has this name (`zstd`, or
    /// as shown, `zstd:9`); wins over `priority`, as in the kernel.
    pub algo: Option<String>,
    /// `level=N`: the algorithm's level; without it the level stays.
    pub level: Option<i64>,
    /// `dict=PATH`: a zstd dictionary file; without it the priority has
    /// none (the kernel's `comp_params_store` resets the old one).
    pub dict: Option<PathBuf>,
}

impl AlgorithmParams {
    /// Parses `key=value` words separated by blanks.
    ///
    /// # Errors
    /// [`ZramError::Invalid`] for an unknown key, a key without a value (the
    /// kernel's `-EINVAL` for `!val || !*val`), a key given twice, or a
    /// number that is not one.
    pub fn parse(text: &str) -> Result<Self, ZramError> {
        let bad = |what: String| ZramError::Invalid(format!("algorithm_params: {what}"));
        let mut params = Self::default();
        for word in text.split_whitespace() {
            let (key, value) = word.split_once('=').ok_or_else(|| bad(format!("{word:?} is not key=value")))?;
            if value.is_empty() {
                return Err(bad(format!("{key}= needs a value")));
            }
            let number = || value.parse::<i64>().map_err(|_| bad(format!("{key}={value}: not a number")));
            let twice = || bad(format!("{key} given twice"));
            match key {
                "priority" => {
                    let p = usize::try_from(number()?).map_err(|_| bad(format!("priority={value}: negative")))?;
                    params.priority.replace(p).map_or(Ok(()), |_| Err(twice()))?;
                }
                "level" => params.level.replace(number()?).map_or(Ok(()), |_| Err(twice()))?,
                "algo" => params.algo.replace(value.to_owned()).map_or(Ok(()), |_| Err(twice()))?,
                "dict" => params.dict.replace(PathBuf::from(value)).map_or(Ok(()), |_| Err(twice()))?,
                _ => return Err(bad(format!("unknown key {key:?} (algo, priority, level, dict)"))),
            }
        }
        if params == Self::default() {
            return Err(bad("nothing given (algo=NAME [priority=N] [level=N] [dict=PATH])".into()));
        }
        Ok(params)
    }

    /// The priority these parameters are for among `algorithms` (by
    /// priority: the primary first).
    ///
    /// # Errors
    /// [`ZramError::Invalid`] when `algo` names none of them, or the
    /// priority has no algorithm.
    pub fn priority_in(&self, algorithms: &[Algorithm]) -> Result<usize, ZramError> {
        if let Some(name) = &self.algo {
            return algorithms
                .iter()
                .position(|a| a.name() == name || a.to_string() == *name)
                .ok_or_else(|| ZramError::Invalid(format!("algorithm_params: the device has no algorithm {name:?}")));
        }
        let priority = self.priority.unwrap_or(0);
        if priority >= MAX_COMPS || priority >= algorithms.len() {
            return Err(ZramError::Invalid(format!("algorithm_params: no algorithm of priority {priority}")));
        }
        Ok(priority)
    }

    /// The algorithm at its new level and the dictionary loaded and
    /// checked, for the algorithm of `priority`; nothing is changed.
    fn resolve(&self, algorithm: Algorithm) -> Result<(Algorithm, Option<Dictionary>), ZramError> {
        let algorithm = match self.level {
            Some(level) => algorithm.with_level(level).map_err(ZramError::Compress)?,
            None => algorithm,
        };
        let dict = match &self.dict {
            Some(path) => {
                let dict = Dictionary::load(path).map_err(ZramError::Compress)?;
                // Prepared once here so that a dictionary zstd refuses at
                // this level is refused now, not when the device is made.
                Compressor::with_dictionary(algorithm, dict.clone()).map_err(ZramError::Compress)?;
                Some(dict)
            }
            None => None,
        };
        Ok((algorithm, dict))
    }
}

/// `ZramConfig::set("algorithm_params", text)`: the level goes into the
/// algorithm of that priority, the dictionary into `dictionaries`.
pub(crate) fn apply(config: &mut ZramConfig, text: &str) -> Result<(), ZramError> {
    let params = AlgorithmParams::parse(text)?;
    let priority = params.priority_in(&config.algorithms())?;
    let (algorithm, dict) = params.resolve(config.algorithms()[priority])?;
    match priority {
        0 => config.algorithm = algorithm,
        p => config.recomp_algorithms[p - 1] = algorithm,
    }
    match dict {
        Some(dict) => config.dictionaries.insert(priority, dict),
        None => config.dictionaries.remove(&priority),
    };
    Ok(())
}

/// The compressor of each priority: the configured algorithms with their
/// dictionaries.
///
/// # Errors
/// [`ZramError::Compress`] when a dictionary belongs to an algorithm that
/// cannot use one (the algorithm was changed after `algorithm_params`);
/// [`ZramError::Invalid`] for a dictionary of a priority with no algorithm.
pub(crate) fn compressors(config: &ZramConfig) -> Result<Vec<Compressor>, ZramError> {
    let algorithms = config.algorithms();
    if let Some(p) = config.dictionaries.keys().find(|&&p| p >= algorithms.len()) {
        return Err(ZramError::Invalid(format!(
            "algorithm_params: a dictionary for priority {p}, which has no algorithm"
        )));
    }
    algorithms
        .into_iter()
        .enumerate()
        .map(|(p, algorithm)| match config.dictionaries.get(&p) {
            Some(dict) => Compressor::with_dictionary(algorithm, dict.clone()).map_err(ZramError::Compress),
            None => Ok(Compressor::new(algorithm)),
        })
        .collect()
}

impl Device {
    /// The dictionary of the algorithm of `priority`, if it has one.
    pub(crate) fn dictionary(&self, priority: usize) -> Option<&Dictionary> {
        self.comps.get(priority)?.dictionary()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parsing_takes_the_kernels_keys_and_refuses_anything_else() {
        let p = AlgorithmParams::parse("  priority=2   level=7 dict=/x/y ").unwrap();
        assert_eq!(p.priority, Some(2));
        assert_eq!(p.level, Some(7));
        assert_eq!(p.dict, Some(PathBuf::from("/x/y")));
        for bad in ["", "   ", "algo", "algo=", "level=x", "priority=-1", "colour=blue", "level=1 level=2", "dict"] {
            assert!(matches!(AlgorithmParams::parse(bad), Err(ZramError::Invalid(_))), "{bad:?}");
        }
    }

    #[test]
    fn bad_parameters_are_typed_errors_that_change_nothing() {
        let mut config = ZramConfig::default();
        config.set("comp", "zstd").unwrap();
        config.set("recomp", "lz4hc,zstd:15").unwrap();
        let before = config.clone();
        type Expected = fn(&ZramError) -> bool;
        let cases: [(&str, Expected); 7] = [
            ("algo=deflate level=3", |e| matches!(e, ZramError::Invalid(_))),
            ("priority=3 level=1", |e| matches!(e, ZramError::Invalid(_))),
            ("algo=zstd level=0", |e| {
                matches!(e, ZramError::Compress(mmkit_compress::CompressError::LevelOutOfRange { .. }))
            }),
            ("algo=lz4hc level=13", |e| {
                matches!(e, ZramError::Compress(mmkit_compress::CompressError::LevelOutOfRange { .. }))
            }),
            ("algo=zstd dict=no/such/dictionary", |e| {
                matches!(e, ZramError::Compress(mmkit_compress::CompressError::DictionaryFile { .. }))
            }),
            ("algo=zstd dict=Cargo.toml", |e| {
                matches!(e, ZramError::Compress(mmkit_compress::CompressError::CorruptDictionary(_)))
            }),
            ("algo=zstd priority=1 level=5 speed=9", |e| matches!(e, ZramError::Invalid(_))),
        ];
        for (text, expected) in cases {
            let err = config.set("algorithm_params", text).unwrap_err();
            assert!(expected(&err), "{text}: {err:?}");
            assert_eq!(config, before, "{text} changed the configuration");
        }
        config.set("algorithm_params", "priority=1 level=12").unwrap();
        assert_eq!(config.recomp_algorithms[0], Algorithm::Lz4Hc { level: 12 });
        config.set("algorithm_params", "algo=zstd:15 level=19").unwrap();
        assert_eq!(config.recomp_algorithms[1], Algorithm::Zstd { level: 19 });
        assert_eq!(config.algorithm, Algorithm::Zstd { level: 3 }, "algo= picks the first priority of that name");
    }
}
