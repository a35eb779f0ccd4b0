//! `mmkit zram serve`: a zram device of mmkit served over NBD by nbdkit
//! with the `mmkit-nbdkit` plugin, in the foreground until SIGINT, SIGTERM
//! or SIGHUP.
//!
//! Owns the command's arguments and the life of one server: the device
//! parameters are checked here with the parser the plugin uses, nbdkit
//! options that would contradict serve's own are refused, the sockets go
//! in a private directory unless paths are given, the URI is printed once
//! nbdkit is ready (a stdout that cannot take it stops the server with an
//! error), and a signal stops nbdkit and removes every file it made
//! (exit 0). Starting nbdkit is `nbdkit`'s.

use super::nbdkit::{
    contradicting_option, hangup_workaround, plugin_beside_binary, tls_requested, Listen, Nbdkit, NbdkitError, Spec,
};
use clap::Args;
use mmkit_zram::ZramConfig;
use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// `mmkit zram serve`'s arguments.
#[derive(Clone, Debug, Args)]
#[command(after_help = "Prints the NBD URI on stdout once the export is ready (nbds:// when nbdkit is given \
    --tls=on or --tls=require after --), and runs until SIGINT, SIGTERM or SIGHUP (then exit 0, socket files \
    removed); if stdout cannot take the URI, it stops with an error. Freed memory goes back to the OS a few \
    seconds after a large trim, without compact. Example: mmkit zram serve --size 1G --comp lz4 --control zram.ctl")]
pub struct ServeArgs {
    /// Device size (K, M, G, T suffixes); refused when its slot table alone (16 bytes a
    /// page) would need more than the machine's memory, as `ctl disksize` is.
    #[arg(long, default_value = "1G", value_parser = size_param)]
    pub size: String,
    /// Primary compression algorithm: lz4, lz4_flex, lz4hc, zstd, or lz4hc:LEVEL, zstd:LEVEL.
    #[arg(long, default_value = "lz4", value_parser = device_param("comp"))]
    pub comp: String,
    /// Up to 3 secondary algorithms for `recompress`, comma-separated, by priority
    /// (or one in the kernel's form, "algo=zstd priority=1").
    #[arg(long, value_parser = device_param("recomp"))]
    pub recomp: Option<String>,
    /// Level and zstd dictionary of an algorithm above, as zram's attribute:
    /// "algo=zstd level=9 dict=PATH" (repeatable; `mmkit zram train-dict` makes dictionaries).
    #[arg(long, value_name = "PARAMS", value_parser = algorithm_params)]
    pub algorithm_params: Vec<String>,
    /// Most memory the device may use (its compressed pages and its slot table, as mm_stat's
    /// mem_used_total counts them), at least a page; 0 means no limit (Linux's meaning). A write
    /// that would pass it fails with ENOSPC and leaves nothing behind.
    #[arg(long, value_name = "SIZE", value_parser = device_param("mem_limit"))]
    pub mem_limit: Option<String>,
    /// An existing file for `writeback` of idle, huge or incompressible pages, locked: no
    /// other device may use it while this one runs. It must read as zeroes (`truncate -s 1G
    /// FILE` makes one); a file holding data is refused unless --force-backing is given.
    #[arg(long, value_name = "FILE")]
    pub backing_dev: Option<PathBuf>,
    /// Let --backing-dev name a file that holds data: writeback overwrites it from its first block.
    #[arg(long, requires = "backing_dev")]
    pub force_backing: bool,
    /// Most pages in one zspage (4..=16).
    #[arg(long, value_name = "N", value_parser = device_param("chain_size"))]
    pub chain_size: Option<String>,
    /// Listen on this Unix socket, which must not exist (a dead server's is replaced); the URI
    /// names it by its absolute path (default: one in a private temporary directory).
    #[arg(long, value_name = "PATH", conflicts_with = "listen")]
    pub unix: Option<PathBuf>,
    /// Listen on TCP at this address instead (e.g. 127.0.0.1:10809; port 0: one the kernel
    /// chooses, which the URI names); anything but loopback exposes the device to the network
    /// without TLS, and a wildcard address (`0.0.0.0`, `[::]`) is warned about.
    #[arg(long, value_name = "ADDR:PORT")]
    pub listen: Option<SocketAddr>,
    /// The control socket for `mmkit zram ctl` (default: ctl.sock beside the private NBD socket).
    #[arg(long, value_name = "PATH")]
    pub control: Option<PathBuf>,
    /// The plugin to load (default: libmmkit_nbdkit.so next to the mmkit binary).
    #[arg(long, value_name = "PATH")]
    pub plugin: Option<PathBuf>,
    /// Options for nbdkit itself, placed before the plugin (e.g. -- -t 8 --filter=log logfile=x,
    /// or -- --tls=require --tls-psk=FILE). Those serve sets itself (-U/--unix, -i/--ipaddr,
    /// -p/--port, -f/--foreground, -P/--pidfile, --exit-with-parent, --run, -s/--single,
    /// --vsock and their aliases) are refused: use --unix, --listen and --control instead.
    #[arg(last = true, value_name = "NBDKIT-ARGS")]
    pub nbdkit_args: Vec<String>,
}

/// A clap value parser that checks a device parameter with the parser the
/// plugin uses, so a bad value is refused before nbdkit starts.
fn device_param(key: &'static str) -> impl Fn(&str) -> Result<String, String> + Clone + Send + Sync + 'static {
    move |value: &str| ZramConfig::default().set(key, value).map(|()| value.to_owned()).map_err(|e| e.to_string())
}

/// A clap value parser for `--size`: a size of at least one byte. Whether
/// the machine can hold its slot table is `check_size`'s, in the user's
/// units.
fn size_param(value: &str) -> Result<String, String> {
    match crate::size::parse_size(value) {
        Ok(_) => Ok(value.to_owned()),
        Err(crate::size::SizeError::Zero) => Err(format!("{value}: the device needs at least one page")),
        Err(e) => Err(e.to_string()),
    }
}

/// A clap value parser for `--algorithm-params`: the words only; which
/// algorithm they name is checked with the whole configuration in `run`.
fn algorithm_params(value: &str) -> Result<String, String> {
    mmkit_zram::AlgorithmParams::parse(value).map(|_| value.to_owned()).map_err(|e| {
        if value.contains("dict=") {
            format!("{e} (the words are split at blanks, so a dict= path cannot hold one: a symbolic link will do)")
        } else {
            e.to_string()
        }
    })
}

/// Why `serve` failed.
#[derive(Debug)]
pub enum ServeError {
    /// Bad arguments (exit 2).
    Usage(String),
    /// The server could not be started or stopped by itself (exit 1).
    Failed(String),
}

impl ServeArgs {
    /// The plugin's `key=value` arguments for the device.
    pub fn plugin_args(&self) -> Vec<String> {
        let mut args = vec![format!("size={}", self.size), format!("comp={}", self.comp)];
        // Before backing_dev=, which checks the file's contents.
        if self.force_backing {
            args.push("backing_overwrite=1".into());
        }
        let optional = [
            ("recomp", &self.recomp),
            ("mem_limit", &self.mem_limit),
            ("backing_dev", &self.backing_dev.as_ref().map(|p| p.to_string_lossy().into_owned())),
            ("chain_size", &self.chain_size),
        ];
        args.extend(optional.iter().filter_map(|(key, value)| value.as_ref().map(|v| format!("{key}={v}"))));
        args.extend(self.algorithm_params.iter().map(|p| format!("algorithm_params={p}")));
        args
    }

    /// The device's configuration as the plugin will build it, checked
    /// whole (an `algorithm_params` naming an algorithm not chosen, a
    /// dictionary file that is missing or not one).
    ///
    /// # Errors
    /// The first parameter refused, by name.
    pub fn check_config(&self) -> Result<ZramConfig, String> {
        let mut config = ZramConfig::default();
        for arg in self.plugin_args() {
            let (key, value) = arg.split_once('=').unwrap_or((arg.as_str(), ""));
            config.set(key, value).map_err(|e| e.to_string())?;
        }
        Ok(config)
    }
}

impl ServeArgs {
    /// The arguments with every path made absolute here (the plugin runs in
    /// nbdkit, and the printed URI must work from any directory); the
    /// paths the plugin takes as text must be UTF-8.
    ///
    /// # Errors
    /// A path that cannot be made absolute, or one the plugin takes that is
    /// not UTF-8.
    fn resolved(&self) -> Result<Self, String> {
        let mut args = self.clone();
        if let Some(path) = &self.backing_dev {
            args.backing_dev = Some(crate::paths::absolute_text(path, "--backing-dev")?.into());
        }
        args.algorithm_params =
            self.algorithm_params.iter().map(|p| crate::paths::absolute_dicts(p)).collect::<Result<_, _>>()?;
        if let Some(path) = &self.control {
            args.control = Some(crate::paths::absolute_text(path, "--control")?.into());
        }
        let absolute =
            |path: &Path, what: &str| std::path::absolute(path).map_err(|e| format!("{what} {}: {e}", path.display()));
        if let Some(path) = &self.unix {
            args.unix = Some(absolute(path, "--unix")?);
        }
        if let Some(path) = &self.plugin {
            args.plugin = Some(absolute(path, "--plugin")?);
        }
        Ok(args)
    }
}

/// `text` as one shell word: quoted when it holds anything but letters,
/// digits and `/._-+:,@%=`.
fn shell_word(text: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+:,@%=".contains(c);
    if !text.is_empty() && text.chars().all(plain) {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

/// A warning for a listen address that is every address of the machine.
fn wildcard_warning(addr: &SocketAddr) -> Option<String> {
    addr.ip().is_unspecified().then(|| {
        format!(
            "mmkit zram serve: warning: --listen {addr} accepts connections on every network address of this \
             machine, without TLS or authentication: anyone who can reach it can read and write the device; \
             listen on 127.0.0.1 (or [::1]) unless that is meant"
        )
    })
}

/// Whether two paths name one file (compared as absolute paths: neither
/// needs to exist).
fn same_path(a: &Path, b: &Path) -> bool {
    match (std::path::absolute(a), std::path::absolute(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// Clears the way for a socket: a dead server's (connect refused) is
/// removed, a live one or anything else is refused. The plugin's control
/// socket does the same check (`mmkit_nbdkit::control::clear_dead_socket`).
fn clear_dead_socket(path: &Path) -> Result<(), String> {
    // sun_path holds 108 bytes with its NUL.
    if path.as_os_str().len() > 107 {
        return Err(format!(
            "{}: {} bytes, longer than a Unix socket's path may be (107); choose a shorter path",
            path.display(),
            path.as_os_str().len()
        ));
    }
    let Ok(meta) = path.symlink_metadata() else {
        let dir = path.parent().unwrap_or(Path::new("/"));
        return match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => Ok(()),
            Ok(m) => {
                Err(format!("{}: {} is {}, not a directory", path.display(), dir.display(), crate::paths::noun(&m)))
            }
            Err(e) => Err(format!("{}: directory {}: {e}", path.display(), dir.display())),
        };
    };
    if !meta.file_type().is_socket() {
        return Err(format!(
            "{} exists and is {}, not a socket; remove it or choose another path",
            path.display(),
            crate::paths::noun(&meta)
        ));
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(format!("{}: a running server listens on it; choose another path", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            eprintln!("mmkit zram serve: replacing {}, left by a server that is gone", path.display());
            std::fs::remove_file(path).map_err(|e| format!("removing the dead socket {}: {e}", path.display()))
        }
        Err(e) => Err(format!("{} exists and cannot be checked: {e}", path.display())),
    }
}

/// `--size` in bytes, rounded up to whole pages (said so on stderr when
/// it was not), and checked against the machine: a device every page of
/// which would need more slot table than the machine has memory is refused
/// in the user's units. The device makes the same check on every
/// `disksize` (`mmkit_zram::slot_table_bytes`).
fn check_size(text: &str) -> Result<u64, ServeError> {
    let asked = crate::size::parse_size(text).map_err(|e| ServeError::Usage(format!("--size {text}: {e}")))?;
    let page = mmkit_zram::PAGE_SIZE as u64;
    let size =
        asked.checked_next_multiple_of(page).ok_or_else(|| ServeError::Usage(format!("--size {text}: too large")))?;
    if let Some(memory) = mmkit_zram::machine_memory() {
        let table = mmkit_zram::slot_table_bytes(size);
        if table > memory {
            return Err(ServeError::Usage(format!(
                "--size {text}: the slot table alone would need {}, this machine has {}",
                gib(table),
                gib(memory)
            )));
        }
    }
    if size != asked {
        eprintln!("mmkit zram serve: --size {text} rounded up to {size} bytes (whole {page}-byte pages)");
    }
    Ok(size)
}

/// The algorithm with its level, for the start-up line (`zstd level 3`).
fn algorithm_words(algorithm: mmkit_zram::Algorithm) -> String {
    match algorithm.level() {
        Some(level) => format!("{} level {level}", algorithm.name()),
        None => algorithm.name().to_owned(),
    }
}

/// Bytes in GiB, as a person reads them.
fn gib(bytes: u64) -> String {
    let g = bytes as f64 / f64::from(1u32 << 30);
    if g >= 10.0 {
        format!("{g:.0} GiB")
    } else {
        format!("{g:.1} GiB")
    }
}

/// Serves until a signal; prints the URI when ready.
///
/// # Errors
/// [`ServeError::Usage`] for a path that already exists or a device
/// configuration the plugin would refuse;
/// [`ServeError::Failed`] when the plugin or nbdkit is missing, nbdkit
/// fails to start, or it stops by itself.
pub fn run(args: &ServeArgs) -> Result<(), ServeError> {
    if let Some(message) = contradicting_option(&args.nbdkit_args) {
        return Err(ServeError::Usage(message));
    }
    let args = &args.resolved().map_err(ServeError::Usage)?;
    if let Some(warning) = args.listen.as_ref().and_then(wildcard_warning) {
        eprintln!("{warning}");
    }
    let size = check_size(&args.size)?;
    // Then, so that a bad dictionary or level is a usage error even where
    // nbdkit or the plugin is missing.
    let config = args.check_config().map_err(ServeError::Usage)?;
    let plugin = match &args.plugin {
        Some(path) if path.is_file() => path.clone(),
        Some(path) => {
            let what = std::fs::metadata(path).map_or_else(|e| e.to_string(), |m| crate::paths::noun(&m).to_owned());
            return Err(ServeError::Usage(format!("--plugin {}: {what}; name the plugin's .so file", path.display())));
        }
        None => plugin_beside_binary().map_err(|NbdkitError(e)| ServeError::Failed(e))?,
    };
    let run_dir = tempfile::Builder::new()
        .prefix("mmkit-zram-")
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
        .map_err(|e| ServeError::Failed(format!("making a private directory: {e}")))?;
    let listen = match (&args.unix, args.listen) {
        (_, Some(addr)) => Listen::Tcp(addr),
        (Some(path), None) => Listen::Unix(path.clone()),
        (None, None) => Listen::Unix(run_dir.path().join("nbd.sock")),
    };
    let control = args.control.clone().unwrap_or_else(|| run_dir.path().join("ctl.sock"));
    if let Some(unix) = &args.unix {
        if same_path(unix, &control) {
            return Err(ServeError::Usage(format!(
                "--unix and --control are both {}: the NBD socket and the control socket need a path each",
                unix.display()
            )));
        }
    }
    for path in [Some(&control), args.unix.as_ref()].into_iter().flatten() {
        clear_dead_socket(path).map_err(ServeError::Usage)?;
    }
    let mut plugin_args = args.plugin_args();
    let control_text = crate::paths::absolute_text(&control, "the control socket").map_err(ServeError::Usage)?;
    plugin_args.push(format!("control={control_text}"));
    // Removed by the plugin when nbdkit exits, should this process be
    // killed before it can remove its private directory itself.
    let private = [run_dir.path().join("nbd.sock"), run_dir.path().join("ctl.sock"), run_dir.path().join("nbdkit.pid")];
    for path in &private {
        let text = crate::paths::absolute_text(path, "the private directory's file").map_err(ServeError::Usage)?;
        plugin_args.push(format!("cleanup={text}"));
    }
    let mut nbdkit_args = args.nbdkit_args.clone();
    if let Some(option) = hangup_workaround(&nbdkit_args) {
        eprintln!(
            "mmkit zram serve: this nbdkit aborts when a client hangs up with requests in flight (fixed in \
             nbdkit 1.33.10), which would lose the device's contents; serving each connection's requests one \
             at a time ({option}; `-- -t 16` overrides)"
        );
        nbdkit_args.insert(0, option.to_owned());
    }
    let spec = Spec {
        plugin: plugin.into_os_string(),
        plugin_args,
        nbdkit_args,
        listen,
        run_dir: run_dir.path().to_owned(),
        also_remove: vec![control.clone()],
        stderr: None,
    };
    let stop = Arc::new(AtomicBool::new(false));
    // SIGHUP too: a closed terminal must not leave the sockets behind.
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM, signal_hook::consts::SIGHUP] {
        signal_hook::flag::register(signal, Arc::clone(&stop))
            .map_err(|e| ServeError::Failed(format!("installing the signal handler: {e}")))?;
    }
    let stopping = || stop.load(Ordering::Relaxed);
    let mut server = match Nbdkit::start(&spec, Duration::from_secs(60), &stopping) {
        Ok(server) => server,
        // Asked to stop before nbdkit was ready: a clean stop all the same.
        Err(_) if stopping() => return Ok(()),
        Err(NbdkitError(e)) => return Err(ServeError::Failed(e)),
    };
    let uri = if tls_requested(&args.nbdkit_args) { server.tls_uri() } else { server.uri() };
    // A full (`/dev/full`) or closed (reader gone: EPIPE) stdout is an
    // error: a server whose URI nobody could read is of no use. A stdout
    // closed before start (`>&-`) is /dev/null by the time this runs (the
    // runtime reopens it), as the user asked.
    let printed = {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{uri}").and_then(|()| out.flush())
    };
    if let Err(e) = printed {
        server.stop();
        return Err(ServeError::Failed(format!("printing the URI {uri} on stdout: {e}; stopped")));
    }
    eprintln!(
        "mmkit zram serve: size {size} bytes, {}; control socket {} (mmkit zram ctl {} mm_stat); SIGINT, SIGTERM \
         or SIGHUP stops it",
        algorithm_words(config.algorithm),
        control_text,
        shell_word(&control_text)
    );
    loop {
        if stopping() {
            server.stop();
            return Ok(());
        }
        if let Some(status) = server.try_wait().map_err(|NbdkitError(e)| ServeError::Failed(e))? {
            return Err(ServeError::Failed(format!("nbdkit stopped by itself ({status})")));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_parameters_are_checked_as_the_plugin_checks_them() {
        assert_eq!(device_param("size")("64M").unwrap(), "64M");
        assert!(device_param("size")("lots").unwrap_err().contains("size=lots"));
        assert!(size_param("lots").is_err() && size_param("0").is_err());
        assert_eq!(size_param("20T").unwrap(), "20T", "the memory check is check_size's, in the user's units");
        assert_eq!(algorithm_words(mmkit_zram::Algorithm::Zstd { level: 3 }), "zstd level 3");
        assert_eq!(algorithm_words(mmkit_zram::Algorithm::Lz4), "lz4");
        assert!(device_param("comp")("lzma").is_err());
        assert!(device_param("chain_size")("3").is_err());
        assert!(algorithm_params("algo=zstd level=x").is_err());
        assert_eq!(algorithm_params("algo=zstd level=9").unwrap(), "algo=zstd level=9");
        assert!(device_param("mem_limit")("1").is_err(), "below one page");
    }

    #[test]
    fn sizes_round_up_and_sizes_beyond_the_machine_say_so_in_gib() {
        assert_eq!(check_size("17").unwrap(), 4096);
        assert_eq!(check_size("1M").unwrap(), 1 << 20);
        if let Some(memory) = mmkit_zram::machine_memory() {
            // A device whose slot table is twice the machine's memory.
            let pages = memory / 16 * 2;
            let text = format!("{}", pages * 4096);
            match check_size(&text) {
                Err(ServeError::Usage(message)) => {
                    assert!(message.starts_with(&format!("--size {text}: the slot table alone")), "{message}");
                    assert!(message.contains("GiB"), "{message}");
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(gib(40 << 30), "40 GiB");
        assert_eq!(gib(3 << 29), "1.5 GiB");
    }

    #[test]
    fn the_same_path_twice_is_caught_however_it_is_written() {
        assert!(same_path(Path::new("a.sock"), Path::new("./a.sock")));
        assert!(!same_path(Path::new("a.sock"), Path::new("b.sock")));
    }
}
