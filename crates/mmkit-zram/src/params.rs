//! zram's `algorithm_params` (Linux 6.12+, `algorithm_params_store` and
//! `comp_params_store` in `drivers/block/zram/zram_drv.c`):
//! `algo=NAME [priority=N] [level=N] [dict=PATH]`, which sets the level
//! and the pre-trained dictionary of one algorithm — the primary
//! (priority 0) or a recompression one, picked by `algo` or `priority`.
//!
//! Owns the parameters' text form, their checking (an unknown key, a level
//! the algorithm does not take, a dictionary file that is missing or not
//! one: each a typed error that changes nothing) and turning a
//! configuration into the device's compressors; and setting a
//! configuration from its text forms ([`ZramConfig::set`], every key
//! checked before the configuration changes). Must not touch slots, pools,
//! the device or the I/O paths.

use crate::config::{
    check_disksize, check_mem_limit, parse_algorithm, refuse_backing_not_a_file, refuse_backing_with_data, ZramConfig,
    MAX_RECOMP_ALGORITHMS,
};
use crate::size::parse_size;
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

impl ZramConfig {
    /// Sets one parameter from its text form.
    ///
    /// # Errors
    /// [`ZramError::Invalid`] naming the key or value; the configuration is
    /// unchanged.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ZramError> {
        let bad = |what: &str| ZramError::Invalid(format!("{key}={value}: {what}"));
        match key {
            "size" | "disksize" => {
                let size = parse_size(value).map_err(|e| bad(&e.to_string()))?;
                if size == 0 {
                    return Err(bad("the device needs at least one page"));
                }
                check_disksize(size).map_err(|what| bad(&what))?;
                self.disksize = size;
            }
            "comp" | "comp_algorithm" => self.algorithm = parse_algorithm(value).map_err(|what| bad(&what))?,
            "recomp" | "recomp_algorithm" if value.contains('=') => self.set_recomp_priority(value)?,
            "recomp" | "recomp_algorithm" => {
                let mut list = Vec::new();
                for name in value.split(',').filter(|n| !n.is_empty()) {
                    list.push(parse_algorithm(name).map_err(|what| bad(&what))?);
                }
                if list.len() > MAX_RECOMP_ALGORITHMS {
                    return Err(bad("at most 3 secondary algorithms"));
                }
                self.recomp_algorithms = list;
            }
            "algorithm_params" => crate::params::apply(self, value)?,
            "mem_limit" => {
                let bytes = parse_size(value).map_err(|e| bad(&e.to_string()))?;
                check_mem_limit(bytes)?;
                self.mem_limit = bytes;
            }
            "backing_dev" => {
                let path = (!value.is_empty() && value != "none").then(|| PathBuf::from(value));
                if let Some(path) = &path {
                    refuse_backing_not_a_file(path).map_err(|what| bad(&what))?;
                    if !self.backing_overwrite {
                        refuse_backing_with_data(path).map_err(|what| bad(&what))?;
                    }
                }
                self.backing_dev = path;
            }
            "backing_overwrite" => {
                self.backing_overwrite = match value {
                    "1" | "yes" | "true" => true,
                    "0" | "no" | "false" => false,
                    _ => return Err(bad("want 1 or 0")),
                };
            }
            "chain_size" => {
                self.chain_size =
                    value.parse().ok().filter(|n| (4..=16).contains(n)).ok_or_else(|| bad("not in 4..=16"))?;
            }
            _ => return Err(ZramError::Invalid(format!("unknown parameter {key:?}"))),
        }
        Ok(())
    }

    /// `recomp_algorithm` in the kernel's form, `algo=NAME [priority=N]`
    /// (`recomp_algorithm_store`: priority 1 when not given, 1..=3): sets
    /// the secondary algorithm of one priority. A priority may replace one
    /// set before or come next after them (the secondaries are kept in
    /// order with no gap).
    fn set_recomp_priority(&mut self, value: &str) -> Result<(), ZramError> {
        let bad = |what: String| ZramError::Invalid(format!("recomp_algorithm {value:?}: {what}"));
        let (mut algo, mut priority) = (None, None);
        for word in value.split_whitespace() {
            match word.split_once('=') {
                Some(("algo", name)) if algo.is_none() => algo = Some(name),
                Some(("priority", n)) if priority.is_none() => {
                    priority = Some(n.parse::<usize>().map_err(|_| bad(format!("priority={n}: not a number")))?)
                }
                _ => return Err(bad(format!("{word:?}: want algo=NAME [priority=1..=3], each once"))),
            }
        }
        let name = algo.ok_or_else(|| bad("algo=NAME is missing".into()))?;
        let algorithm = parse_algorithm(name).map_err(bad)?;
        let priority = priority.unwrap_or(1);
        if !(1..=MAX_RECOMP_ALGORITHMS).contains(&priority) {
            return Err(bad(format!("priority {priority}: secondary priorities are 1..={MAX_RECOMP_ALGORITHMS}")));
        }
        let set = self.recomp_algorithms.len();
        match priority - 1 {
            i if i < set => self.recomp_algorithms[i] = algorithm,
            i if i == set => self.recomp_algorithms.push(algorithm),
            _ => return Err(bad(format!("priority {priority}: set priority {} first", set + 1))),
        }
        Ok(())
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
