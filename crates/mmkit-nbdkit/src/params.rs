//! The plugin's `key=value` parameters: every `ZramConfig` key (`size`,
//! `comp`, `recomp`, `algorithm_params`, `mem_limit`, `backing_dev`,
//! `chain_size` and their
//! sysfs-style aliases) plus `control`, the path of the control socket, and
//! `cleanup`, files to remove at exit, and the `--help` text that lists
//! them.
//!
//! Owns the parameter names and their checking only; it builds no device
//! and opens no socket.

use mmkit_zram::ZramConfig;
use std::path::PathBuf;

/// Everything the command line configured.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Params {
    /// The device to build.
    pub config: ZramConfig,
    /// Where to serve the control socket; none without `control=`.
    pub control: Option<PathBuf>,
    /// Files to remove when nbdkit unloads the plugin, then their
    /// directory if empty (`cleanup=`, repeated: `mmkit zram serve`'s
    /// private directory, which a killed `serve` cannot remove itself).
    pub cleanup: Vec<PathBuf>,
}

/// The key of a bare parameter (`nbdkit plugin.so 1G` means `size=1G`, as
/// with nbdkit's memory plugin).
pub const MAGIC_KEY: &str = "size";

impl Params {
    /// Takes one `key=value` parameter.
    ///
    /// # Errors
    /// A message naming the key and what is wrong; nothing is changed.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "control" => {
                if value.is_empty() {
                    return Err("control=: the path of the control socket is empty".into());
                }
                self.control = Some(PathBuf::from(value));
                Ok(())
            }
            "cleanup" => {
                if value.is_empty() {
                    return Err("cleanup=: the path is empty".into());
                }
                self.cleanup.push(PathBuf::from(value));
                Ok(())
            }
            _ => self.config.set(key, value).map_err(|e| e.to_string()),
        }
    }

    /// The `--help` text: one line per parameter.
    pub fn help() -> String {
        let mut text = String::new();
        for (key, what) in ZramConfig::KEYS {
            text.push_str(&format!("{key}=...\n    {what}\n"));
        }
        text.push_str(
            "control=PATH\n    a Unix socket (mode 0600) answering zram's sysfs attributes: mm_stat, io_stat,\n    \
             bd_stat, debug_stat, compact, reset, idle all, recompress ..., writeback ...\n    \
             (one line in; back `busy ...`, or `running` then `ok` and the text or `error MESSAGE`)\n",
        );
        text.push_str(
            "cleanup=PATH\n    a file to remove when nbdkit exits, then its directory if empty (repeatable)\n",
        );
        text.push_str("A bare value is the size (size=1G). Defaults: size=1G comp=lz4 chain_size=8, no limit.");
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mmkit_zram::Algorithm;

    #[test]
    fn every_device_parameter_and_the_control_path_are_taken() {
        let mut params = Params::default();
        for (key, value) in [
            ("size", "64M"),
            ("comp", "zstd:5"),
            ("recomp", "zstd:12"),
            ("mem_limit", "32M"),
            ("backing_dev", "wb.img"),
            ("chain_size", "4"),
            ("control", "ctl.sock"),
        ] {
            params.set(key, value).unwrap();
        }
        assert_eq!(params.config.disksize, 64 << 20);
        assert_eq!(params.config.algorithm, Algorithm::Zstd { level: 5 });
        assert_eq!(params.config.recomp_algorithms, vec![Algorithm::Zstd { level: 12 }]);
        assert_eq!(params.config.mem_limit, 32 << 20);
        assert_eq!(params.config.backing_dev, Some(PathBuf::from("wb.img")));
        assert_eq!(params.config.chain_size, 4);
        assert_eq!(params.control, Some(PathBuf::from("ctl.sock")));
        params.set("algorithm_params", "algo=zstd:12 level=19").unwrap();
        assert_eq!(params.config.recomp_algorithms, vec![Algorithm::Zstd { level: 19 }]);
        params.set("comp", "lz4hc").unwrap();
        params.set("algorithm_params", "priority=0 level=12").unwrap();
        assert_eq!(params.config.algorithm, Algorithm::Lz4Hc { level: 12 });
    }

    #[test]
    fn bad_parameters_are_refused_by_name_and_change_nothing() {
        let mut params = Params::default();
        let before = params.clone();
        let err = params.set("colour", "blue").unwrap_err();
        assert!(err.contains("colour"), "{err}");
        assert!(params.set("size", "lots").unwrap_err().contains("size=lots"));
        assert!(params.set("comp", "lzma").is_err());
        assert!(params.set("control", "").is_err());
        assert!(params.set("algorithm_params", "algo=zstd level=3").unwrap_err().contains("no algorithm"));
        assert!(params.set("algorithm_params", "level=3").unwrap_err().contains("lz4 takes no level"));
        assert!(params.set("algorithm_params", "priority=0 dict=no/such/file").unwrap_err().contains("no/such/file"));
        assert_eq!(params, before);
    }

    #[test]
    fn help_names_every_key() {
        let help = Params::help();
        for (key, _) in ZramConfig::KEYS {
            assert!(help.contains(&format!("{key}=")), "{key} missing from the help");
        }
        assert!(help.contains("control=PATH"));
    }
}
