//! QEMU's user network forwards the manager's port with a listen backlog of
//! 1; this gives it [`BACKLOG`] instead, so a burst of clients connecting
//! at once reaches the guest (docs/MANAGER.md, "Requests lost in a connect
//! burst: QEMU's forwarder, not the server").
//!
//! libslirp (Debian's 4.7, behind `-netdev user,hostfwd=...`) listens on
//! the host port with `listen(s, 1)` (`ss -ltn` shows Send-Q 1). When more
//! than two handshakes complete before QEMU's main loop accepts, Linux
//! answers the SYNs with cookies (the SYN queue of one is full), the
//! client's `connect` succeeds, and the ACK that would make the server
//! side is dropped as a listen overflow (`ListenOverflows` in
//! /proc/net/netstat). The client's request then sits unacknowledged in
//! its own send queue, retransmitted with backoff in step with every other
//! such client, a few getting in per round: the guest never sees the
//! connection (a `filter-dump` pcap of the NIC has no SYN for its port),
//! and the client waits past its timeout. No server, in the guest or not,
//! can answer a connection it is never given.
//!
//! QEMU has no option for that backlog, so every QEMU run with a forwarded
//! port gets a one-function preload library, built here with the host's C
//! compiler into `target/pinfold/`, whose `listen` passes at least
//! [`BACKLOG`] on. Only the host side of QEMU's forwarder changes; the
//! guest, its network and Pinfold are exactly as before. Without a C
//! compiler QEMU runs without it (a warning says so) and the `load` case
//! refuses to run, naming the backlog it found.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The backlog QEMU's forwarded port gets (at least): Linux's SOMAXCONN,
/// above the `load` case's 100 clients connecting at once.
pub const BACKLOG: u32 = 4096;

/// The preload library's source: `listen` with at least [`BACKLOG`].
const SOURCE: &str = r#"/* Pinfold xtask (tools/xtask/src/hostfwd.rs): QEMU's user-network
 * forwarder listens with a backlog of 1; pass at least BACKLOG on. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <sys/socket.h>

int listen(int fd, int backlog)
{
	static int (*real_listen)(int, int);
	if (!real_listen)
		real_listen = (int (*)(int, int))dlsym(RTLD_NEXT, "listen");
	if (!real_listen)
		return -1;
	return real_listen(fd, backlog < BACKLOG ? BACKLOG : backlog);
}
"#;

/// The preload library for QEMU, built once per xtask run (`None`, with a
/// warning, when it cannot be built).
pub fn preload() -> Option<&'static Path> {
    static LIB: OnceLock<Option<PathBuf>> = OnceLock::new();
    LIB.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        match build(&root.join("target/pinfold")) {
            Ok(lib) => Some(lib),
            Err(err) => {
                eprintln!(
                    "xtask: warning: QEMU's forwarded port keeps its listen backlog of 1 ({err}); a burst of connections can be lost on the host"
                );
                None
            }
        }
    })
    .as_deref()
}

/// Builds `dir/hostfwd-backlog.so` from [`SOURCE`] unless it is there and
/// was built from this very source.
fn build(dir: &Path) -> Result<PathBuf, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let lib = dir.join("hostfwd-backlog.so");
    let src = dir.join("hostfwd-backlog.c");
    let current = std::fs::read_to_string(&src).is_ok_and(|s| s == SOURCE);
    if current && lib.exists() {
        return Ok(lib);
    }
    std::fs::write(&src, SOURCE).map_err(|e| format!("{}: {e}", src.display()))?;
    let out = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2"])
        .arg(format!("-DBACKLOG={BACKLOG}"))
        .arg("-o")
        .arg(&lib)
        .arg(&src)
        .arg("-ldl")
        .output()
        .map_err(|e| format!("cc: {e}"))?;
    if !out.status.success() {
        let _ = std::fs::remove_file(&src);
        return Err(format!(
            "cc failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(lib)
}

/// `LD_PRELOAD` with `lib` in front of what the environment has.
pub fn ld_preload(lib: &Path) -> String {
    match std::env::var("LD_PRELOAD") {
        Ok(v) if !v.trim().is_empty() => format!("{}:{v}", lib.display()),
        _ => lib.display().to_string(),
    }
}

/// The listen backlog of the host's TCP listener on 127.0.0.1:`port`
/// (`ss -ltn`'s Send-Q), if one listens there.
pub fn listen_backlog(port: u16) -> Result<Option<u32>, String> {
    let out = Command::new("ss")
        .args(["-ltnH"])
        .arg(format!("sport = :{port}"))
        .output()
        .map_err(|e| format!("ss: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "ss failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(parse_ss_backlog(&String::from_utf8_lossy(&out.stdout)))
}

/// Send-Q of the first LISTEN line of `ss -ltnH` output.
fn parse_ss_backlog(text: &str) -> Option<u32> {
    text.lines().find_map(|line| {
        let mut cols = line.split_whitespace();
        (cols.next()? == "LISTEN").then_some(())?;
        let _recv_q = cols.next()?;
        cols.next()?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;
    use std::process::Stdio;

    #[test]
    fn ss_backlog_is_send_q_of_the_listen_line() {
        let text = "LISTEN 0      1          127.0.0.1:18520      0.0.0.0:*\n";
        assert_eq!(parse_ss_backlog(text), Some(1));
        assert_eq!(
            parse_ss_backlog("LISTEN 2 4096 127.0.0.1:8080 0.0.0.0:*"),
            Some(4096)
        );
        assert_eq!(parse_ss_backlog(""), None);
        assert_eq!(parse_ss_backlog("ESTAB 0 0 a b"), None);
    }

    /// A listener asking for a backlog of 1 under the library gets
    /// BACKLOG (and 1 without it: the check can fail).
    #[test]
    fn the_library_raises_a_backlog_of_one() {
        let dir = std::env::temp_dir().join(format!("pinfold-hostfwd-{}", std::process::id()));
        let lib = build(&dir).expect("the preload library builds with cc");
        let backlog_under = |preload: Option<&Path>| -> u32 {
            let mut cmd = Command::new("python3");
            cmd.args([
                "-c",
                "import socket,sys\ns=socket.socket()\ns.bind(('127.0.0.1',0))\ns.listen(1)\nprint(s.getsockname()[1],flush=True)\nsys.stdin.read()",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .env_remove("LD_PRELOAD");
            if let Some(lib) = preload {
                cmd.env("LD_PRELOAD", lib);
            }
            let mut child = cmd.spawn().expect("python3 runs");
            let mut line = String::new();
            std::io::BufReader::new(child.stdout.take().unwrap())
                .read_line(&mut line)
                .unwrap();
            let port: u16 = line.trim().parse().expect("the listener's port");
            let backlog = listen_backlog(port).unwrap();
            drop(child.stdin.take());
            let _ = child.wait();
            backlog.expect("ss shows the listener")
        };
        assert_eq!(backlog_under(None), 1);
        // Linux caps it at net.core.somaxconn (4096 by default, 128 before 5.4).
        let raised = backlog_under(Some(&lib));
        assert!(raised >= 128, "the backlog under the library is {raised}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
