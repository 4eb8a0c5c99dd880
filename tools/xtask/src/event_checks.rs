//! The `events-console` boot check (on the shared default boot): a restart
//! of beta (a Linux partition) seen through the event stream, the console
//! history download with a boot marker per boot, `hvctl console` driven
//! through a pseudo-terminal, and hvctl writing into a closed pipe.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::api_checks::{
    authority, build_hvctl, call_json, console_end, follow_console_until, parse_rfc3339_utc,
    sample, Outcome, Stack, UP_MARKER,
};
use crate::http::Request;
use crate::Workspace;

/// The manager's cap on open event streams (`events::MAX_STREAMS`).
const MAX_STREAMS: usize = 4;
/// An event time is sane within this much of the host's clock.
const CLOCK_SLACK_S: i64 = 120;

/// One Server-Sent Events frame: id, event, data (JSON).
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub id: u64,
    pub event: String,
    pub data: Value,
}

/// Parses one frame's lines (without the blank line); None for a comment
/// (heartbeat) or a frame without id or data.
pub fn parse_frame(text: &str) -> Option<Frame> {
    let mut id = None;
    let mut event = String::from("message");
    let mut data = None;
    for line in text.lines() {
        if let Some(v) = line.strip_prefix("id:") {
            id = v.trim().parse().ok();
        } else if let Some(v) = line.strip_prefix("event:") {
            event = v.trim().to_string();
        } else if let Some(v) = line.strip_prefix("data:") {
            data = serde_json::from_str(v.trim()).ok();
        }
    }
    Some(Frame {
        id: id?,
        event,
        data: data?,
    })
}

/// Status, headers (lower-case names) and body of a reply.
type RawReply = (u16, Vec<(String, String)>, String);

/// A raw HTTP/1.1 GET (Connection: close) read to the server's close.
fn raw_get(path: &str, timeout: Duration) -> Result<RawReply, String> {
    let mut conn = crate::http::connect_raw(&authority(), Duration::from_secs(30))?;
    conn.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    write!(
        conn,
        "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n{}\r\n",
        authority(),
        crate::api_checks::auth_header()
    )
    .map_err(|e| format!("GET {path}: {e}"))?;
    let mut bytes = Vec::new();
    conn.read_to_end(&mut bytes)
        .map_err(|e| format!("GET {path}: reading: {e}"))?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("GET {path}: no end of headers in {} bytes", bytes.len()))?;
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("GET {path}: bad status line"))?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Ok((status, headers, body.to_string()))
}

/// Follows `GET /api/v1/events/stream` (from `since` on) in a thread,
/// handing over every frame until `stop` is set or the stream ends.
fn follow_stream(
    since: u64,
    stop: Arc<AtomicBool>,
) -> Result<mpsc::Receiver<Result<Frame, String>>, String> {
    let mut conn = crate::http::connect_raw(&authority(), Duration::from_secs(30))?;
    conn.set_read_timeout(Some(Duration::from_secs(1)))
        .map_err(|e| e.to_string())?;
    // Last-Event-ID, as a reconnecting EventSource sends it.
    let last = since.saturating_sub(1);
    write!(
        conn,
        "GET /api/v1/events/stream HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\nLast-Event-ID: {last}\r\n{}\r\n",
        authority(),
        crate::api_checks::auth_header()
    )
    .map_err(|e| format!("GET /api/v1/events/stream: {e}"))?;
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(conn);
        let mut head = true;
        let mut frame = String::new();
        let mut line = String::new();
        while !stop.load(Ordering::Relaxed) {
            // A read that times out keeps what it read in `line`: the
            // line is only taken once it is whole.
            if line.ends_with('\n') {
                line.clear();
            }
            match reader.read_line(&mut line) {
                Ok(0) => {
                    let _ = tx.send(Err("the event stream ended".to_string()));
                    return;
                }
                Ok(_) if !line.ends_with('\n') => continue,
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    continue
                }
                Err(e) => {
                    let _ = tx.send(Err(format!("reading the event stream: {e}")));
                    return;
                }
            }
            if head {
                if line.starts_with("HTTP/1.1 ") && !line.starts_with("HTTP/1.1 200") {
                    let _ = tx.send(Err(format!("the event stream answered {}", line.trim())));
                    return;
                }
                if line == "\r\n" {
                    head = false;
                }
                continue;
            }
            if line == "\n" {
                if let Some(f) = parse_frame(&frame) {
                    if tx.send(Ok(f)).is_err() {
                        return;
                    }
                }
                frame.clear();
            } else {
                frame.push_str(&line);
            }
        }
    });
    Ok(rx)
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The boot markers in a console history: (boot number, time text).
pub fn boot_markers(text: &str, name: &str) -> Vec<(u64, String)> {
    let prefix = format!("=== pinfold: {name} boot ");
    text.lines()
        .filter_map(|l| {
            let rest = l.trim_end_matches('\r').strip_prefix(&prefix)?;
            let (n, rest) = rest.split_once(" at ")?;
            let when = rest.strip_suffix(" ===")?;
            Some((n.parse().ok()?, when.to_string()))
        })
        .collect()
}

/// The check.
pub fn events_console(ws: &Workspace, stack: &mut Stack) -> Outcome {
    let deadline = Instant::now() + Duration::from_secs(240);
    stack.guests_up(deadline)?;
    let token = stack.token(deadline)?;
    stack.first_answer()?;
    let mut notes = Vec::new();

    // 1. The stream sees a restart of beta: its stop and start events,
    // numbered upwards, with times near the host's clock.
    let start = call_json(&Request::get("/api/v1/events"), 200)?;
    let since = start
        .get("next")
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("GET /api/v1/events without `next`: {start}"))?;
    let stop = Arc::new(AtomicBool::new(false));
    let frames = follow_stream(since, stop.clone())?;
    let before = sample("beta")?;
    let cursor = console_end("beta")?;
    call_json(
        &Request::post("/api/v1/partitions/beta/restart", Some(&token), None),
        202,
    )?;
    follow_console_until(
        "beta",
        cursor,
        &format!("{UP_MARKER}beta "),
        Instant::now() + Duration::from_secs(180),
    )?;
    let want_boot = before.boot_count + 1;
    let running = format!("running (boot {want_boot})");
    let mut seen: Vec<Frame> = Vec::new();
    let until = Instant::now() + Duration::from_secs(30);
    while !seen
        .iter()
        .any(|f| f.data["partition"] == "beta" && f.data["message"] == running.as_str())
    {
        let left = until.saturating_duration_since(Instant::now());
        match frames.recv_timeout(left) {
            Ok(Ok(f)) => seen.push(f),
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(format!(
                    "no `{running}` event for beta on the stream within 30 s; frames: {seen:?}"
                ))
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    if seen.windows(2).any(|w| w[0].id >= w[1].id) || seen.first().is_some_and(|f| f.id < since) {
        return Err(format!("event ids not increasing from {since}: {seen:?}"));
    }
    let beta: Vec<&Frame> = seen
        .iter()
        .filter(|f| f.data["partition"] == "beta")
        .collect();
    let stopped = beta
        .iter()
        .position(|f| f.data["message"] == "stopped by the manager (restart)");
    let started = beta
        .iter()
        .position(|f| f.data["message"] == running.as_str());
    match (stopped, started) {
        (Some(a), Some(b)) if a < b => {}
        _ => {
            return Err(format!(
                "beta's stop then start not on the stream: {beta:?}"
            ))
        }
    }
    let now = unix_now();
    for f in &beta {
        if f.event != "state" || f.data["kind"] != "state" || f.data["seq"] != f.id {
            return Err(format!("frame's event/id and its JSON disagree: {f:?}"));
        }
        let t = f.data["time"]
            .as_str()
            .and_then(parse_rfc3339_utc)
            .ok_or_else(|| format!("event without an RFC 3339 time: {f:?}"))?;
        if (t - now).abs() > CLOCK_SLACK_S {
            return Err(format!(
                "event time {t} is {} s from the host's {now}",
                t - now
            ));
        }
    }
    notes.push(format!(
        "event stream from Last-Event-ID {}: {} frames, beta's restart as `stopped by the manager (restart)` (id {}) then `{running}` (id {}), times within {CLOCK_SLACK_S} s of the host",
        since.saturating_sub(1),
        seen.len(),
        beta[stopped.unwrap_or(0)].id,
        beta[started.unwrap_or(0)].id
    ));

    // The cap: streams beyond MAX_STREAMS are refused at once (503), and
    // a place comes back once its client has gone.
    notes.push(check_stream_cap()?);

    // 2. The history: a download, with a marker per boot in order.
    let (status, headers, body) = raw_get(
        "/api/v1/partitions/beta/console/history",
        Duration::from_secs(20),
    )?;
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    if status != 200
        || header("content-type") != Some("text/plain; charset=utf-8")
        || header("content-disposition") != Some("attachment; filename=\"beta-console.log\"")
    {
        return Err(format!(
            "history download answered {status} with headers {headers:?}"
        ));
    }
    let markers = boot_markers(&body, "beta");
    let numbers: Vec<u64> = markers.iter().map(|m| m.0).collect();
    if markers.len() < 2
        || numbers.windows(2).any(|w| w[1] != w[0] + 1)
        || numbers.last() != Some(&want_boot)
    {
        return Err(format!(
            "beta's history ({} bytes) should show consecutive boot markers ending at boot {want_boot}: {markers:?}",
            body.len()
        ));
    }
    let last_time = markers
        .last()
        .and_then(|m| parse_rfc3339_utc(&m.1))
        .ok_or_else(|| format!("the last boot marker has no RFC 3339 time: {markers:?}"))?;
    if (last_time - now).abs() > CLOCK_SLACK_S {
        return Err(format!(
            "boot {want_boot}'s marker time is {} s from the host's clock",
            last_time - now
        ));
    }
    notes.push(format!(
        "console history download: {} bytes, text/plain, attachment beta-console.log, boot markers {numbers:?} in order (last at {})",
        body.len(),
        markers.last().map_or("", |m| m.1.as_str())
    ));

    // 3. hvctl console through a pseudo-terminal: a line in, its echo out,
    // Ctrl-] q out with status 0.
    let hvctl = build_hvctl(ws)?;
    let url = crate::http::base_url(&authority());
    let out = Command::new("python3")
        .args(["-c", PTY_SCRIPT])
        .arg(&hvctl)
        .args([&url, &token])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("running python3 for the pty: {e}"))?;
    let said = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() || !said.contains("EXIT 0") {
        return Err(format!(
            "hvctl console beta under a pty: {}: {}{}",
            out.status,
            said.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    notes.push(format!(
        "hvctl console beta in a pty: typed `echo HVCTL-PTY-$((40+2))`, saw HVCTL-PTY-42, Ctrl-] q: {}",
        said.lines().last().unwrap_or("").trim()
    ));

    // 4. Output into a closed pipe ends hvctl quietly, as `| head -1` does.
    for args in [
        vec!["events"],
        vec!["console", "beta", "--history"],
        vec!["list"],
    ] {
        let (reader, writer) = std::io::pipe().map_err(|e| format!("pipe: {e}"))?;
        drop(reader);
        let run = Command::new(&hvctl)
            .arg("--url")
            .arg(&url)
            .args(&args)
            .stdout(writer)
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| format!("running hvctl: {e}"))?;
        let err = String::from_utf8_lossy(&run.stderr);
        if !run.status.success() || err.contains("panicked") || err.contains("Broken pipe") {
            return Err(format!(
                "hvctl {} into a closed pipe: {}: {}",
                args.join(" "),
                run.status,
                err.trim()
            ));
        }
    }
    let piped = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "'{}' --url {url} console beta --history | head -1 >/dev/null; echo ${{?}}",
            hvctl.display()
        ))
        .output()
        .map_err(|e| format!("sh: {e}"))?;
    if String::from_utf8_lossy(&piped.stderr).contains("panicked") {
        return Err(format!(
            "hvctl console beta --history | head -1 panicked: {}",
            String::from_utf8_lossy(&piped.stderr).trim()
        ));
    }
    notes.push(
        "hvctl events / console --history / list into a closed pipe: status 0, no panic; `| head -1` too"
            .to_string(),
    );
    Ok(notes)
}

/// Opens event streams until one is refused: at most MAX_STREAMS (4) may
/// be open (one may still be the first check's, until its thread notices
/// the client went). Then closes them and waits for a place to free up.
fn check_stream_cap() -> Result<String, String> {
    let open = |conn: &mut hvctl::http::Wire| -> Result<String, String> {
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .map_err(|e| e.to_string())?;
        write!(
            conn,
            "GET /api/v1/events/stream?since=999999999999 HTTP/1.1\r\nHost: {}\r\n{}\r\n",
            authority(),
            crate::api_checks::auth_header()
        )
        .map_err(|e| e.to_string())?;
        let mut line = String::new();
        // One byte at a time: the rest of the stream stays in `conn`.
        BufReader::with_capacity(1, conn)
            .read_line(&mut line)
            .map_err(|e| format!("reading a stream's status line: {e}"))?;
        Ok(line.trim().to_string())
    };
    let mut held = Vec::new();
    let max = MAX_STREAMS;
    let refused = loop {
        let mut conn = crate::http::connect_raw(&authority(), Duration::from_secs(30))?;
        let status = open(&mut conn)?;
        if status.starts_with("HTTP/1.1 503") {
            break held.len();
        }
        if !status.starts_with("HTTP/1.1 200") || held.len() == max {
            return Err(format!(
                "stream {} answered `{status}` ({} open): at most {max} may be open",
                held.len() + 1,
                held.len()
            ));
        }
        held.push(conn);
    };
    if refused + 1 < max {
        return Err(format!(
            "only {refused} streams opened before a 503 (at most {max})"
        ));
    }
    drop(held);
    // A stream's thread finds its client gone at its next write: the
    // heartbeat, 15 s at most (twice: the first write into a closed socket
    // may still succeed).
    let until = Instant::now() + Duration::from_secs(45);
    loop {
        let mut conn = crate::http::connect_raw(&authority(), Duration::from_secs(30))?;
        if open(&mut conn)?.starts_with("HTTP/1.1 200") {
            break;
        }
        if Instant::now() > until {
            return Err("no stream place came back 45 s after the clients went".into());
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    Ok(format!(
        "{refused} more event streams opened, the next answered 503; a place came back after the clients went"
    ))
}

/// Runs hvctl (argv 1, with --url argv 2 and --token argv 3) on a pty:
/// waits for its banner, types a line, waits for the shell's answer,
/// types Ctrl-] q and prints `EXIT <status>`.
const PTY_SCRIPT: &str = r#"
import os, pty, select, sys, time
hvctl, url, token = sys.argv[1:4]
pid, fd = pty.fork()
if pid == 0:
    os.execv(hvctl, [hvctl, "--url", url, "--token", token, "console", "beta"])
seen = b""
def wait_for(needle, limit):
    global seen
    end = time.time() + limit
    while time.time() < end:
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            try:
                data = os.read(fd, 4096)
            except OSError:
                return False
            if not data:
                return False
            seen += data
            if needle in seen:
                return True
    return False
if not wait_for(b"escape: Ctrl-] then q", 30):
    print("no banner:", seen[-300:]); sys.exit(1)
time.sleep(1.0)
os.write(fd, b"echo HVCTL-PTY-$((40+2))\r")
if not wait_for(b"HVCTL-PTY-42", 60):
    print("no echo:", seen[-300:]); sys.exit(1)
os.write(fd, b"\x1dq")
end = time.time() + 20
while time.time() < end:
    p, status = os.waitpid(pid, os.WNOHANG)
    if p:
        print("EXIT", os.waitstatus_to_exitcode(status)); sys.exit(0)
    wait_for(b"\x00never", 0.2)
print("hvctl did not exit after Ctrl-] q:", seen[-300:]); sys.exit(1)
"#;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_parse_and_heartbeats_are_skipped() {
        let f = parse_frame("id: 2000\nevent: state\ndata: {\"seq\":2000,\"kind\":\"state\"}\n")
            .unwrap();
        assert_eq!((f.id, f.event.as_str()), (2000, "state"));
        assert_eq!(f.data["seq"], 2000);
        assert_eq!(parse_frame(": heartbeat\n"), None);
    }

    #[test]
    fn boot_markers_are_found_in_order() {
        let text = "x\r\n=== pinfold: beta boot 1 at 2026-12-01T13:45:00Z ===\r\nlogin: \r\n=== pinfold: beta boot 2 at +30s ===\r\n=== pinfold: alpha boot 9 at +1s ===\r\n";
        assert_eq!(
            boot_markers(text, "beta"),
            [
                (1, "2026-12-01T13:45:00Z".to_string()),
                (2, "+30s".to_string())
            ]
        );
    }
}
