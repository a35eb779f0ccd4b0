//! Outputs that must not be inputs: every command that writes a file asks
//! [`check_outputs`] before it starts, so that no route to the same file
//! (the same path, a relative and an absolute one, a `..` detour, a
//! symbolic link, a hard link) lets an output replace what it was given to
//! read.
//!
//! Owns the notion of "the same file" and the message that names both
//! paths; each command decides which of its paths are inputs and which are
//! outputs. Reads metadata only: never opens, creates or removes a file.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// What a path names, as far as writing to it is concerned.
#[derive(Debug, PartialEq, Eq)]
enum Identity {
    /// An existing file (symbolic links followed): its device and inode,
    /// shared by every path and every hard link to it.
    Inode(u64, u64),
    /// A file that does not exist yet: its directory, resolved, and its
    /// name in it.
    Name(PathBuf),
}

/// The file `path` names. `None` when neither the file nor its directory
/// can be resolved (then nothing can be written there either, and the
/// write itself reports why).
fn identity(path: &Path) -> Option<Identity> {
    if let Ok(meta) = std::fs::metadata(path) {
        return Some(Identity::Inode(meta.dev(), meta.ino()));
    }
    let name = path.file_name()?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    Some(Identity::Name(parent.canonicalize().ok()?.join(name)))
}

/// A pair of paths that name one file.
#[derive(Debug, PartialEq, Eq)]
pub struct Clash {
    /// The output, as given.
    pub output: PathBuf,
    /// The input it names, as given.
    pub input: PathBuf,
}

impl std::fmt::Display for Clash {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (out, inp) = (self.output.display(), self.input.display());
        if self.output == self.input {
            write!(f, "the output {out} is the input {inp}: refusing to overwrite it; name another output")
        } else {
            write!(
                f,
                "the output {out} is the same file as the input {inp} (another path to it): \
                 refusing to overwrite it; name another output"
            )
        }
    }
}

/// The first output that names the same file as an input, if any.
///
/// An existing output is compared by device and inode with each input
/// that exists; a missing one by its resolved directory and name, which
/// also catches two spellings of an input that does not exist yet.
pub fn clash<'a>(
    inputs: impl IntoIterator<Item = &'a Path>,
    outputs: impl IntoIterator<Item = &'a Path>,
) -> Option<Clash> {
    let inputs: Vec<(&Path, Identity)> = inputs.into_iter().filter_map(|p| Some((p, identity(p)?))).collect();
    for out in outputs {
        let Some(id) = identity(out) else { continue };
        if let Some((input, _)) = inputs.iter().find(|(_, i)| *i == id) {
            return Some(Clash { output: out.to_owned(), input: (*input).to_owned() });
        }
    }
    None
}

/// [`clash`] as a command's error text.
///
/// # Errors
/// The message of the first [`Clash`].
pub fn check_outputs<'a>(
    inputs: impl IntoIterator<Item = &'a Path>,
    outputs: impl IntoIterator<Item = &'a Path>,
) -> Result<(), String> {
    clash(inputs, outputs).map_or(Ok(()), |c| Err(c.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_to_one_file_clashes_and_other_files_do_not() {
        let d = tempfile::tempdir().unwrap();
        let input = d.path().join("in.txt");
        std::fs::write(&input, b"data").unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::os::unix::fs::symlink(&input, d.path().join("link")).unwrap();
        std::fs::hard_link(&input, d.path().join("hard")).unwrap();
        let routes = [
            input.clone(),
            d.path().join("sub/../in.txt"),
            d.path().join("./in.txt"),
            d.path().join("link"),
            d.path().join("hard"),
        ];
        for out in &routes {
            let c = clash([input.as_path()], [out.as_path()]).unwrap_or_else(|| panic!("{}", out.display()));
            assert_eq!((c.output.as_path(), c.input.as_path()), (out.as_path(), input.as_path()));
            let text = c.to_string();
            assert!(text.contains(&*out.to_string_lossy()) && text.contains(&*input.to_string_lossy()), "{text}");
        }
        let other = d.path().join("out.bin");
        assert_eq!(clash([input.as_path()], [other.as_path()]), None, "a new file");
        std::fs::write(&other, b"data").unwrap();
        assert_eq!(clash([input.as_path()], [other.as_path()]), None, "an existing other file");
        assert!(check_outputs([input.as_path()], [other.as_path()]).is_ok());
        // Two spellings of a file that does not exist yet.
        let missing = d.path().join("none");
        assert!(clash([missing.as_path()], [d.path().join("sub/../none").as_path()]).is_some());
    }
}
