//! zswap's module parameters, named and parsed as in
//! `/sys/module/zswap/parameters/` (`mm/zswap.c`'s `module_param_cb`s).
//!
//! Owns their values and their text forms; what they do is `zswap.rs`'s.

use crate::ZswapError;
use mmkit_compress::Algorithm;

/// zswap's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ZswapParams {
    /// Whether stores are accepted (`enabled`, default Y). Loads and
    /// invalidations work either way.
    pub enabled: bool,
    /// The compressor new stores use (`compressor`, default lz4 here).
    /// Entries keep the algorithm they were stored with, so changing it
    /// leaves old entries readable, as Linux's pool switch does.
    pub compressor: Algorithm,
    /// The pool's limit in percent of the page allocator's memory
    /// (`max_pool_percent`, default 20).
    pub max_pool_percent: u32,
    /// After hitting the limit, stores are refused until the pool is below
    /// this percentage of the limit (`accept_threshold_percent`, default 90).
    pub accept_threshold_percent: u32,
    /// Whether the shrinker writes cold entries back when the pool is
    /// full (`shrinker_enabled`, default Y).
    pub shrinker_enabled: bool,
}

impl Default for ZswapParams {
    fn default() -> Self {
        Self {
            enabled: true,
            compressor: Algorithm::Lz4,
            max_pool_percent: 20,
            accept_threshold_percent: 90,
            shrinker_enabled: true,
        }
    }
}

/// Every parameter's name, in `/sys/module/zswap/parameters` order.
pub const PARAM_NAMES: &[&str] =
    &["accept_threshold_percent", "compressor", "enabled", "max_pool_percent", "shrinker_enabled"];

fn parse_bool(value: &str) -> Option<bool> {
    match value.trim() {
        "Y" | "y" | "1" | "on" => Some(true),
        "N" | "n" | "0" | "off" => Some(false),
        _ => None,
    }
}

impl ZswapParams {
    /// Sets parameter `name` from its sysfs text (`Y`/`N`, a number, an
    /// algorithm name such as `lz4` or `zstd:9`).
    ///
    /// # Errors
    /// [`ZswapError::BadParam`] for an unknown name or a refused value;
    /// nothing changes. Percentages are 0 ..= 100, as Linux's
    /// `max_pool_percent` and `accept_threshold_percent` are.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), ZswapError> {
        let bad = || ZswapError::BadParam { name: name.to_string(), value: value.to_string() };
        let percent = || value.trim().parse::<u32>().ok().filter(|p| *p <= 100);
        match name {
            "enabled" => self.enabled = parse_bool(value).ok_or_else(bad)?,
            "shrinker_enabled" => self.shrinker_enabled = parse_bool(value).ok_or_else(bad)?,
            "compressor" => self.compressor = Algorithm::parse(value.trim()).ok_or_else(bad)?,
            "max_pool_percent" => self.max_pool_percent = percent().ok_or_else(bad)?,
            "accept_threshold_percent" => self.accept_threshold_percent = percent().ok_or_else(bad)?,
            _ => return Err(bad()),
        }
        Ok(())
    }

    /// Parameter `name` as sysfs shows it; `None` for an unknown name.
    pub fn show(&self, name: &str) -> Option<String> {
        let yn = |b: bool| if b { "Y" } else { "N" }.to_string();
        Some(match name {
            "enabled" => yn(self.enabled),
            "shrinker_enabled" => yn(self.shrinker_enabled),
            "compressor" => self.compressor.to_string(),
            "max_pool_percent" => self.max_pool_percent.to_string(),
            "accept_threshold_percent" => self.accept_threshold_percent.to_string(),
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_and_show_round_trip_and_bad_values_change_nothing() {
        let mut p = ZswapParams::default();
        for name in PARAM_NAMES {
            let shown = p.show(name).unwrap();
            p.set(name, &shown).unwrap();
        }
        assert_eq!(p, ZswapParams::default());
        p.set("compressor", "zstd:9").unwrap();
        assert_eq!(p.show("compressor").unwrap(), "zstd:9");
        p.set("enabled", "N").unwrap();
        assert!(!p.enabled);
        let before = p;
        for (name, value) in [("max_pool_percent", "101"), ("enabled", "maybe"), ("compressor", "lzo"), ("nope", "1")] {
            assert!(matches!(p.set(name, value), Err(ZswapError::BadParam { .. })));
        }
        assert_eq!(p, before);
        assert_eq!(p.show("nope"), None);
    }
}
