//! `mmkit zram ctl`: one request to a served device's control socket (what
//! sysfs offers for a kernel zram device), printing the answer, which is
//! in the kernel's format.
//!
//! Owns the client side of the control exchange that the plugin's
//! `control` module serves: one line out (`mm_stat`, `idle all`,
//! `recompress type=huge`), then `ok` and the text, or `error MESSAGE`.

use clap::Args;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `mmkit zram ctl`'s arguments.
#[derive(Clone, Debug, Args)]
#[command(after_help = "Requests: mm_stat, io_stat, bd_stat, debug_stat, block_state, compact, reset, idle all, \
    idle SECONDS, recompress type=idle|huge|huge_idle [threshold=N] [algo=NAME], \
    writeback idle|huge|huge_idle|incompressible|page_index=N, mem_limit [SIZE], writeback_limit [N], …")]
pub struct CtlArgs {
    /// The control socket (`mmkit zram serve --control PATH`, or the path it printed).
    #[arg(value_name = "SOCKET")]
    pub socket: PathBuf,
    /// The attribute, and a value to store into it.
    #[arg(value_name = "REQUEST", required = true, num_args = 1.., allow_hyphen_values = true)]
    pub request: Vec<String>,
}

/// Sends the request and returns the answer's text.
///
/// # Errors
/// The socket cannot be reached, or the device refused the request (its
/// message).
pub fn run(args: &CtlArgs) -> Result<String, String> {
    request(&args.socket, &args.request.join(" "))
}

/// Sends one request line to the control socket at `socket` and returns
/// the answer's text.
///
/// # Errors
/// As [`run`].
pub fn request(socket: &Path, line: &str) -> Result<String, String> {
    let mut stream = UnixStream::connect(socket)
        .map_err(|e| format!("cannot reach the control socket {}: {e}", socket.display()))?;
    let _ = stream.set_read_timeout(Some(Duration::from_secs(600)));
    let mut reply = String::new();
    stream
        .write_all(format!("{line}\n").as_bytes())
        .and_then(|()| stream.read_to_string(&mut reply))
        .map_err(|e| format!("talking to {}: {e}", socket.display()))?;
    parse_reply(&reply)
}

/// `ok\nTEXT` → `TEXT`; `error MESSAGE` → the message.
fn parse_reply(reply: &str) -> Result<String, String> {
    match reply.split_once('\n') {
        Some(("ok", text)) => Ok(text.to_owned()),
        _ => match reply.strip_prefix("error ") {
            Some(message) => Err(message.trim_end().to_owned()),
            None => Err(format!("unexpected answer {reply:?}")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies() {
        assert_eq!(parse_reply("ok\n1 2 3\n"), Ok("1 2 3\n".into()));
        assert_eq!(parse_reply("ok\n"), Ok(String::new()));
        assert_eq!(parse_reply("error no attribute \"x\"\n"), Err("no attribute \"x\"".into()));
        assert!(parse_reply("").is_err());
        assert!(parse_reply("hello\n").is_err());
    }
}
