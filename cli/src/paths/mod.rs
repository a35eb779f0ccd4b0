//! What a path on the command line means, for every command: the one
//! place that opens a file the user named, as the user meant it.
//!
//! - Outputs ([`output`]): a regular file, or a new name, is replaced
//!   atomically (a temporary file beside it, renamed over it when
//!   complete); a character device or a FIFO (a pipe, `/dev/stdout`) is
//!   written through, never replaced; a symbolic link is followed (the file
//!   it names is written by the same rules, the link stays); a directory,
//!   a block device, a socket or a link to nothing is refused, before any
//!   work, with a message that says what the path is.
//! - Inputs ([`input`]): a regular file is read where it is, and a change
//!   to it during the run (size, modification time, or another file put
//!   at its path) is an error; a pipe or FIFO is read once — copied to an
//!   unnamed temporary file when the command reads it more than once —
//!   never silently read as empty the second time; a device or a
//!   directory is refused.
//! - Outputs that are inputs ([`clash`]): refused by any route.
//!
//! Owns these rules and their messages; each command decides which of its
//! paths are inputs and which are outputs. `docs/benchmarking.md` ("What a
//! path means") states the rules for users.

pub mod clash;
pub mod input;
pub mod output;

pub use clash::check_outputs;
pub use input::{Input, Passes};
pub use output::{check_output, Output};

use std::fs::Metadata;

/// What kind of file a path names, in words for a message.
pub use mmkit_zram::file_kind as noun;

/// Whether `meta` (of this process's standard output, say) is the file
/// `other` is: same device and inode.
pub fn same_file(meta: &Metadata, other: &Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    meta.dev() == other.dev() && meta.ino() == other.ino()
}

/// `path` made absolute in this process's working directory, as text: a
/// path handed to another process (nbdkit's plugin, a served device's
/// control socket) must not be resolved in that process's directory, and
/// those take their parameters as UTF-8 text.
///
/// # Errors
/// The working directory is gone, or the absolute path is not UTF-8
/// (the message names `what`).
pub fn absolute_text(path: &std::path::Path, what: &str) -> Result<String, String> {
    let absolute = std::path::absolute(path).map_err(|e| format!("{what} {}: {e}", path.display()))?;
    absolute.into_os_string().into_string().map_err(|raw| {
        format!(
            "{what} {}: not UTF-8; the device takes its paths as text, so name it by a UTF-8 path (a symbolic \
             link will do)",
            std::path::Path::new(&raw).display()
        )
    })
}

/// `algorithm_params` words with every `dict=PATH` made absolute by
/// [`absolute_text`].
///
/// # Errors
/// As [`absolute_text`].
pub fn absolute_dicts(params: &str) -> Result<String, String> {
    let words: Result<Vec<String>, String> = params
        .split_whitespace()
        .map(|word| match word.strip_prefix("dict=") {
            Some(path) if !path.is_empty() => {
                absolute_text(std::path::Path::new(path), "dict=").map(|p| format!("dict={p}"))
            }
            _ => Ok(word.to_owned()),
        })
        .collect();
    words.map(|w| w.join(" "))
}
