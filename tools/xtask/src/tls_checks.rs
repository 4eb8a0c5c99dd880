//! The `tls` boot case (on the shared default boot): HTTPS is the
//! management API's transport, with the certificate the build generated.
//!
//! - the manager's console prints the same SHA-256 fingerprint as the
//!   certificate in target/pinfold/tls/, and a pinned handshake is answered;
//! - hvctl with a wrong `--fingerprint` is refused, naming both
//!   fingerprints, and with the right one (`--cacert`) lists partitions;
//! - plain HTTP to the port is answered 400 in plain HTTP, saying the port
//!   speaks HTTPS, at once (no hang);
//! - a client that stops mid-handshake (a TLS record header, then
//!   nothing) is closed by the server within the read timeout (10 s) while
//!   others are answered meanwhile;
//! - the server still answers afterwards;
//! - a keep-alive TLS connection left open holds at most
//!   `MAX_TLS_CONN_HEAP` of the manager's heap (measured, printed).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::api_checks::{self, authority, Outcome, Stack};
use crate::http::{self, Request};
use crate::Workspace;

/// The manager's console line with its certificate's fingerprint.
const FINGERPRINT_LINE: &str = "pinfold-manager: TLS certificate SHA-256 fingerprint ";

pub fn tls(ws: &Workspace, stack: &mut Stack) -> Outcome {
    stack.first_answer()?;
    let mut notes = Vec::new();
    let der = std::fs::read(http::cert_path())
        .map_err(|e| format!("{}: {e}", http::cert_path().display()))?;
    let ours = hvctl::tls::Pin::of_der(&der).to_string();
    let printed = stack
        .qemu
        .lines()
        .into_iter()
        .find_map(|l| {
            l.text
                .split_once(FINGERPRINT_LINE)
                .map(|(_, f)| f.trim().to_string())
        })
        .ok_or("the manager's console has no `TLS certificate SHA-256 fingerprint` line")?;
    if printed != ours {
        return Err(format!(
            "the manager printed fingerprint {printed}, target/pinfold/tls/cert.der is {ours}"
        ));
    }
    notes.push(format!("the manager's console and the build agree: {ours}"));

    // 1. A pinned handshake.
    let reply = http::send(
        &authority(),
        &Request::get("/api/v1/host"),
        Duration::from_secs(10),
    )
    .map_err(|e| format!("GET /api/v1/host over HTTPS: {e}"))?;
    if reply.status != 200 {
        return Err(format!("GET /api/v1/host over HTTPS: {}", reply.status));
    }
    notes.push("HTTPS with the pinned certificate: 200".into());

    // 2. hvctl: a wrong pin refused, the right one (as a file) accepted.
    let hvctl = api_checks::build_hvctl(ws)?;
    let url = http::base_url(&authority());
    let mut wrong = hvctl::tls::Pin::of_der(&der);
    wrong.0[31] ^= 0xff;
    let out = Command::new(&hvctl)
        .args(["--url", &url, "--fingerprint", &wrong.to_string(), "list"])
        .env_remove(hvctl::tls::CACERT_ENV)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running hvctl: {e}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.success() || !stderr.contains("not the pinned") || !stderr.contains(&ours) {
        return Err(format!(
            "hvctl with a wrong --fingerprint: exit {}, stderr `{}` (wanted a refusal naming {ours})",
            out.status,
            stderr.trim()
        ));
    }
    notes.push(format!("hvctl with a wrong pin: `{}`", stderr.trim()));
    let pem = http::cert_path().with_extension("pem");
    let out = Command::new(&hvctl)
        .args(["--url", &url, "--cacert"])
        .arg(&pem)
        .arg("list")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running hvctl: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "hvctl --cacert {} list: exit {}: {}",
            pem.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    notes.push("hvctl --cacert target/pinfold/tls/cert.pem list: ok".into());

    // 3. Plain HTTP on the TLS port.
    let t = Instant::now();
    let mut plain = TcpStream::connect(authority()).map_err(|e| format!("connect: {e}"))?;
    plain
        .set_read_timeout(Some(Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    write!(
        plain,
        "GET /api/v1/host HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        authority()
    )
    .map_err(|e| format!("plain GET: {e}"))?;
    let mut answer = Vec::new();
    let _ = plain.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    if !answer.starts_with("HTTP/1.1 400") || !answer.contains("HTTPS") {
        return Err(format!(
            "plain HTTP to the TLS port: wanted a 400 saying it speaks HTTPS, got {:?} after {:.1} s",
            answer.chars().take(300).collect::<String>(),
            t.elapsed().as_secs_f64()
        ));
    }
    notes.push(format!(
        "plain HTTP refused in {:.0} ms: `{}`",
        t.elapsed().as_secs_f64() * 1000.0,
        answer.lines().last().unwrap_or("").trim()
    ));

    // 4. A handshake that stops after a record header.
    let mut stalled = TcpStream::connect(authority()).map_err(|e| format!("connect: {e}"))?;
    stalled
        .set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    let t = Instant::now();
    stalled
        .write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01])
        .map_err(|e| format!("the stalled handshake: {e}"))?;
    // Meanwhile others are answered.
    let during = http::send(
        &authority(),
        &Request::get("/api/v1/host"),
        Duration::from_secs(10),
    )
    .map_err(|e| format!("GET /api/v1/host beside a stalled handshake: {e}"))?;
    if during.status != 200 {
        return Err(format!(
            "GET /api/v1/host beside a stalled handshake: {}",
            during.status
        ));
    }
    let mut sink = [0u8; 64];
    let closed = loop {
        match stalled.read(&mut sink) {
            Ok(0) | Err(_) => break t.elapsed(),
            Ok(_) => {}
        }
    };
    if closed < Duration::from_secs(9) || closed > Duration::from_secs(15) {
        return Err(format!(
            "a handshake stalled after 6 bytes was closed after {:.1} s (wanted the 10 s read timeout)",
            closed.as_secs_f64()
        ));
    }
    let after = http::send(
        &authority(),
        &Request::get("/api/v1/host"),
        Duration::from_secs(10),
    )
    .map_err(|e| format!("GET /api/v1/host after the stalled handshake: {e}"))?;
    if after.status != 200 {
        return Err(format!("GET /api/v1/host afterwards: {}", after.status));
    }
    notes.push(format!(
        "a handshake stalled after 6 bytes: closed by the server after {:.1} s, others answered meanwhile and after",
        closed.as_secs_f64()
    ));

    // 5. What an open TLS connection costs the manager's heap.
    let token = stack.token(Instant::now() + Duration::from_secs(10))?;
    let per = heap_per_connection(&token)?;
    if per > MAX_TLS_CONN_HEAP {
        return Err(format!(
            "an open TLS connection holds {per} bytes of the manager's heap (the budget in docs/MANAGER.md is {MAX_TLS_CONN_HEAP})"
        ));
    }
    notes.push(format!(
        "{HELD} keep-alive TLS connections after one request each: {per} bytes of the manager's heap each (budget {MAX_TLS_CONN_HEAP})"
    ));
    Ok(notes)
}

/// Connections [`heap_per_connection`] holds open.
const HELD: usize = 32;
/// The heap an idle TLS connection may hold (docs/MANAGER.md, "TLS").
const MAX_TLS_CONN_HEAP: u64 = 48 * 1024;

fn heap_bytes(token: &str) -> Result<u64, String> {
    let reply = http::send(
        &authority(),
        &Request {
            token: Some(token),
            ..Request::get("/metrics")
        },
        Duration::from_secs(10),
    )
    .map_err(|e| format!("GET /metrics: {e}"))?;
    reply
        .body
        .lines()
        .find_map(|l| l.strip_prefix("pinfold_manager_heap_bytes "))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| "GET /metrics has no pinfold_manager_heap_bytes".to_string())
}

/// The manager's heap growth per keep-alive TLS connection left open after
/// one request (handshake done, buffers as they stay between requests).
fn heap_per_connection(token: &str) -> Result<u64, String> {
    let before = heap_bytes(token)?;
    let mut held = Vec::new();
    for _ in 0..HELD {
        let mut c = http::connect_raw(&authority(), Duration::from_secs(10))?;
        write!(
            c,
            "GET /api/v1/host HTTP/1.1\r\nHost: {}\r\n\r\n",
            authority()
        )
        .map_err(|e| format!("keep-alive GET: {e}"))?;
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        // The head and its Content-Length of body.
        loop {
            let n = c
                .read(&mut buf)
                .map_err(|e| format!("keep-alive GET: reading: {e}"))?;
            if n == 0 {
                return Err("a keep-alive connection was closed after one request".into());
            }
            seen.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&seen);
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let len: usize = head
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length:")
                            .map(|v| v.trim().to_string())
                    })
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                if body.len() >= len {
                    break;
                }
            }
        }
        held.push(c);
    }
    let after = heap_bytes(token)?;
    drop(held);
    Ok(after.saturating_sub(before) / HELD as u64)
}
