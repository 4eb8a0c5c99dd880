//! The `load` boot case: the management server held under load and abuse,
//! over loopback to QEMU's forwarded port, on the shared default boot.
//!
//! In order: QEMU's forwarder takes a burst (its listen backlog, raised
//! by crate::hostfwd, is at least [`BURST`]); the close stall (8 parallel
//! clients that close right after reading Content-Length bytes, which
//! stalled the old server 5-60 s; every request must be answered within
//! [`STALL_LIMIT`]); the connect burst ([`BURST`] clients connecting at
//! the same moment, one request each, all answered: with QEMU's own
//! backlog of 1 it lost 39 of 100, and the old load phase's first
//! requests with it; docs/MANAGER.md); [`CLIENTS`]
//! keep-alive clients reading partitions, /metrics and a console (with the
//! token: reads need one) for
//! [`LOAD_SECS`] while beta is restarted with the token every 5 s (no
//! error, every request answered; requests/s, p50, p99 printed, never
//! asserted: a shared machine); [`IDLE`] idle connections opened and
//! held, and a new client still answered; then each malformed request of
//! manager/http's parser against the live server, each answered with its
//! status. Latencies are the client's, loopback through QEMU's user
//! network, on whatever else the machine runs.

use hvctl::http::Wire;
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::api_checks::{authority, Outcome, Stack};
use crate::hostfwd;
use crate::qemu::manager_port;

/// Concurrent clients of the load phase.
const CLIENTS: usize = 100;
/// How long the load phase runs (PINFOLD_LOAD_SECS overrides it).
const LOAD_SECS: u64 = 60;
/// Idle connections opened and held.
const IDLE: usize = 500;
/// Longest any request of the close-stall phase may wait for its answer.
const STALL_LIMIT: Duration = Duration::from_secs(4);
/// Longest a request under load may wait: 100 clients queue for a
/// manager on one emulated CPU of a shared machine (latency is printed,
/// never asserted; this only tells a slow answer from none).
const LOAD_LIMIT: Duration = Duration::from_secs(90);

/// One response as read off the wire.
struct Answer {
    status: u16,
    head: String,
    body: Vec<u8>,
}

fn connect() -> Result<Wire, String> {
    let mut last = String::new();
    for _ in 0..5 {
        match crate::http::connect_raw(&authority(), Duration::from_secs(90)) {
            Ok(s) => return Ok(s),
            Err(e) => {
                last = e;
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
    Err(last)
}

/// Reads one response: the head, then Content-Length bytes (none for
/// HEAD). Stops right there: the connection may stay open.
fn read_answer(s: &mut Wire, head_only: bool, limit: Duration) -> Result<Answer, String> {
    s.set_read_timeout(Some(limit)).map_err(|e| e.to_string())?;
    let mut buf = Vec::new();
    let mut byte = [0u8; 4096];
    let end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = s
            .read(&mut byte)
            .map_err(|e| format!("reading the head: {e}"))?;
        if n == 0 {
            return Err(format!(
                "the server closed without a complete answer ({} bytes: {:?})",
                buf.len(),
                String::from_utf8_lossy(&buf)
            ));
        }
        buf.extend_from_slice(&byte[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("no status in {head:?}"))?;
    let length: usize = header(&head, "content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = buf[end..].to_vec();
    if head_only {
        return Ok(Answer { status, head, body });
    }
    while body.len() < length {
        let n = s
            .read(&mut byte)
            .map_err(|e| format!("reading the body: {e}"))?;
        if n == 0 {
            return Err(format!("body cut at {} of {length} bytes", body.len()));
        }
        body.extend_from_slice(&byte[..n]);
    }
    Ok(Answer { status, head, body })
}

fn header<'h>(head: &'h str, name: &str) -> Option<&'h str> {
    head.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// A GET without a credential (`/api/v1/host` needs none).
fn open_get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: {}\r\n\r\n", authority())
}

/// A GET with the token (every other read needs a credential, docs/API.md).
fn get(path: &str, token: &str) -> String {
    format!(
        "GET {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\n\r\n",
        authority()
    )
}

fn post(path: &str, token: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nContent-Length: {}\r\n\r\n{body}",
        authority(),
        body.len()
    )
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let at = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Before the phases: QEMU's forwarder of the manager's port must take a
/// burst (a backlog of at least [`BURST`]; QEMU's own is 1, which loses
/// connections on the host before the guest sees them: crate::hostfwd).
fn forwarder() -> Result<String, String> {
    let port = manager_port();
    match hostfwd::listen_backlog(port)? {
        Some(n) if n as usize >= BURST => Ok(format!(
            "forwarder: QEMU listens on 127.0.0.1:{port} with a backlog of {n}"
        )),
        Some(n) => Err(format!(
            "QEMU's forwarder on 127.0.0.1:{port} has a listen backlog of {n}, below the {BURST} clients of the burst: the host would lose connections before the manager sees them (is `cc` there to build target/pinfold/hostfwd-backlog.so?)"
        )),
        None => Err(format!("nothing listens on 127.0.0.1:{port}")),
    }
}

/// Phase 1: clients that close the moment they have the body.
fn close_stall(token: &str) -> Result<String, String> {
    const ROUNDS: usize = 15;
    let worst = Arc::new(Mutex::new(Duration::ZERO));
    let started = Instant::now();
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let worst = worst.clone();
            let token = token.to_string();
            std::thread::spawn(move || -> Result<(), String> {
                for _ in 0..ROUNDS {
                    let t = Instant::now();
                    let mut s = connect()?;
                    // The server closes after this answer, the client too, at once:
                    // the two FINs cross.
                    let request = format!(
                        "GET /api/v1/partitions HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n",
                        authority()
                    );
                    s.write_all(request.as_bytes()).map_err(|e| e.to_string())?;
                    let a = read_answer(&mut s, false, STALL_LIMIT)
                        .map_err(|e| format!("after {:.1} s: {e}", t.elapsed().as_secs_f64()))?;
                    if a.status != 200 {
                        return Err(format!("status {}", a.status));
                    }
                    drop(s); // at once, crossing the server's own close
                    let took = t.elapsed();
                    let mut w = worst.lock().unwrap();
                    *w = (*w).max(took);
                }
                Ok(())
            })
        })
        .collect();
    for t in threads {
        t.join()
            .map_err(|_| "a close-stall client panicked".to_string())?
            .map_err(|e| {
                format!(
                    "close stall: a request was not answered within {} s: {e}",
                    STALL_LIMIT.as_secs()
                )
            })?;
    }
    let worst = *worst.lock().unwrap();
    Ok(format!(
        "close stall: {} requests from 8 clients closing right after the body, all answered in {:.1} s, slowest {:.0} ms",
        8 * ROUNDS,
        started.elapsed().as_secs_f64(),
        ms(worst)
    ))
}

/// Clients of the connect burst.
const BURST: usize = 100;
/// Longest a burst client waits for its answer.
const BURST_LIMIT: Duration = Duration::from_secs(30);

/// Phase 1b: [`BURST`] clients connect at the same moment, each sends one
/// request and waits for its answer; every one must be answered.
fn burst() -> Result<String, String> {
    let gate = Arc::new(std::sync::Barrier::new(BURST));
    let started = Instant::now();
    let threads: Vec<_> = (0..BURST)
        .map(|_| {
            let gate = gate.clone();
            std::thread::spawn(move || -> Result<Duration, String> {
                gate.wait();
                let t = Instant::now();
                let mut s = connect()?;
                let port = s.socket().local_addr().map(|a| a.port()).unwrap_or(0);
                s.write_all(open_get("/api/v1/host").as_bytes())
                    .map_err(|e| format!("port {port}: {e}"))?;
                let a = read_answer(&mut s, false, BURST_LIMIT).map_err(|e| {
                    format!(
                        "port {port}: {e} (after {:.1} s)",
                        t.elapsed().as_secs_f64()
                    )
                })?;
                if a.status != 200 {
                    return Err(format!("port {port}: status {}", a.status));
                }
                Ok(t.elapsed())
            })
        })
        .collect();
    let mut lost = Vec::new();
    let mut lat = Vec::new();
    for t in threads {
        match t
            .join()
            .map_err(|_| "a burst client panicked".to_string())?
        {
            Ok(d) => lat.push(d),
            Err(e) => lost.push(e),
        }
    }
    lat.sort();
    let summary = format!(
        "burst: {BURST} clients connecting at once, {} answered in {:.1} s (p50 {:.0} ms, max {:.0} ms), {} not",
        lat.len(),
        started.elapsed().as_secs_f64(),
        ms(percentile(&lat, 0.5)),
        ms(lat.last().copied().unwrap_or_default()),
        lost.len()
    );
    if !lost.is_empty() {
        return Err(format!("{summary}: {}", lost.join("; ")));
    }
    Ok(summary)
}

/// Phase 2: the load.
fn load(token: &str) -> Result<String, String> {
    let secs = std::env::var("PINFOLD_LOAD_SECS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(LOAD_SECS);
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let latencies = Arc::new(Mutex::new(Vec::<Duration>::new()));
    let paths = [
        "/api/v1/partitions",
        "/metrics",
        "/api/v1/partitions/alpha/console?offset=0",
        "/api/v1/partitions/beta",
    ];
    let started = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let (stop, errors, latencies) = (stop.clone(), errors.clone(), latencies.clone());
            let token = token.to_string();
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                let mut conn: Option<Wire> = None;
                let mut k = i;
                while !stop.load(Ordering::Relaxed) {
                    let path = paths[k % paths.len()];
                    k += 1;
                    let t = Instant::now();
                    let mut port = 0;
                    let result = (|| -> Result<(), String> {
                        let s = match conn.as_mut() {
                            Some(s) => s,
                            None => conn.insert(connect()?),
                        };
                        port = s.socket().local_addr().map(|a| a.port()).unwrap_or(0);
                        s.write_all(get(path, &token).as_bytes())
                            .map_err(|e| e.to_string())?;
                        let a = read_answer(s, false, LOAD_LIMIT)?;
                        if a.status != 200 {
                            return Err(format!("status {}", a.status));
                        }
                        if header(&a.head, "connection") == Some("close") {
                            conn = None;
                        }
                        Ok(())
                    })();
                    match result {
                        Ok(()) => mine.push(t.elapsed()),
                        Err(e) => {
                            conn = None;
                            errors.lock().unwrap().push(format!(
                                "GET {path} from port {port}: {e} (after {:.1} s, at {:.0} s)",
                                t.elapsed().as_secs_f64(),
                                started.elapsed().as_secs_f64()
                            ));
                        }
                    }
                }
                latencies.lock().unwrap().extend(mine);
            })
        })
        .collect();
    let restarts = AtomicU64::new(0);
    let mut restart_errors = Vec::new();
    while started.elapsed() < Duration::from_secs(secs) {
        std::thread::sleep(Duration::from_secs(5));
        let result = (|| -> Result<u16, String> {
            let mut s = connect()?;
            s.write_all(post("/api/v1/partitions/beta/restart", token, "").as_bytes())
                .map_err(|e| e.to_string())?;
            Ok(read_answer(&mut s, false, LOAD_LIMIT)?.status)
        })();
        match result {
            // 409: beta is still starting from the last one.
            Ok(202 | 409) => {
                restarts.fetch_add(1, Ordering::Relaxed);
            }
            Ok(other) => restart_errors.push(format!("restart: status {other}")),
            Err(e) => restart_errors.push(format!("restart: {e}")),
        }
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().map_err(|_| "a load client panicked".to_string())?;
    }
    let elapsed = started.elapsed();
    let mut errors = errors.lock().unwrap().clone();
    errors.extend(restart_errors);
    let mut lat = latencies.lock().unwrap().clone();
    lat.sort();
    let summary = format!(
        "load: {} reads from {CLIENTS} keep-alive clients in {:.0} s ({:.1} requests/s), p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms (shared-machine numbers); {} restarts of beta answered; {} errors",
        lat.len(),
        elapsed.as_secs_f64(),
        lat.len() as f64 / elapsed.as_secs_f64(),
        ms(percentile(&lat, 0.5)),
        ms(percentile(&lat, 0.99)),
        ms(lat.last().copied().unwrap_or_default()),
        restarts.load(Ordering::Relaxed),
        errors.len()
    );
    if !errors.is_empty() {
        errors.truncate(10);
        return Err(format!("{summary}: {}", errors.join("; ")));
    }
    Ok(summary)
}

/// Phase 3: idle connections, then a new client.
fn idle() -> Result<String, String> {
    let openers: Vec<_> = (0..8)
        .map(|_| {
            std::thread::spawn(|| {
                (0..IDLE / 8 + 1)
                    .map(|_| connect())
                    .collect::<Result<Vec<_>, _>>()
            })
        })
        .collect();
    let mut held = Vec::new();
    for o in openers {
        held.extend(
            o.join()
                .map_err(|_| "an opener panicked".to_string())?
                .map_err(|e| format!("opening idle connections: {e}"))?,
        );
    }
    held.truncate(IDLE);
    // Give the server time to take them all in.
    std::thread::sleep(Duration::from_secs(3));
    let t = Instant::now();
    let mut s = connect()?;
    s.write_all(open_get("/api/v1/host").as_bytes())
        .map_err(|e| e.to_string())?;
    let a = read_answer(&mut s, false, Duration::from_secs(10))
        .map_err(|e| format!("a new client with {IDLE} idle connections open: {e}"))?;
    if a.status != 200 {
        return Err(format!("a new client got {}", a.status));
    }
    let answered = t.elapsed();
    // Which of ours the server closed to make room (EOF at once).
    let mut closed = 0;
    for h in &held {
        // The raw socket: these never began a TLS handshake.
        let _ = h.socket().set_nonblocking(true);
        let mut b = [0u8; 1];
        if matches!(h.socket().read(&mut b), Ok(0)) {
            closed += 1;
        }
    }
    Ok(format!(
        "idle: {} connections opened and held, a new client answered in {:.0} ms; the server had closed the {closed} oldest idle ones to stay within its cap",
        held.len(),
        ms(answered)
    ))
}

/// Phase 4: malformed requests, each answered with its status.
fn malformed(token: &str) -> Result<String, String> {
    let host = authority();
    let long_header = format!(
        "GET / HTTP/1.1\r\nHost: {host}\r\nX-Big: {}\r\n\r\n",
        "a".repeat(20 * 1024)
    );
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        ("bare LF", format!("GET /api/v1/host HTTP/1.1\nHost: {host}\n\n").into_bytes(), 400),
        ("HTTP/2.0 line", format!("GET /api/v1/host HTTP/2.0\r\nHost: {host}\r\n\r\n").into_bytes(), 505),
        ("HTTP/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec(), 505),
        ("non-UTF-8 header", {
            let mut v = format!("GET /api/v1/host HTTP/1.1\r\nHost: {host}\r\nX-A: ").into_bytes();
            v.extend_from_slice(b"\xc3\x28\r\n\r\n");
            v
        }, 400),
        ("non-ASCII target", b"GET /\xff HTTP/1.1\r\nHost: a\r\n\r\n".to_vec(), 400),
        ("two Content-Length", format!("POST /api/v1/partitions/beta/console HTTP/1.1\r\nHost: {host}\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{{}}").into_bytes(), 400),
        ("Transfer-Encoding chunked", format!("POST /api/v1/partitions/beta/console HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n").into_bytes(), 411),
        ("Content-Length > i64::MAX", format!("POST /api/v1/partitions/beta/console HTTP/1.1\r\nHost: {host}\r\nContent-Length: 9223372036854775808\r\n\r\n").into_bytes(), 400),
        ("offset > i64::MAX", get("/api/v1/partitions/alpha/console?offset=9223372036854775808", token).into_bytes(), 400),
        ("20 KiB header", long_header.into_bytes(), 431),
        ("no Host", b"GET /api/v1/host HTTP/1.1\r\n\r\n".to_vec(), 400),
        ("PUT on a GET route", format!("PUT /api/v1/host HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\n\r\n").into_bytes(), 405),
        ("start with a malformed body", post("/api/v1/partitions/beta/start", token, "{garbage").into_bytes(), 400),
        ("body shorter than Content-Length", format!("POST /api/v1/partitions/beta/console HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nContent-Length: 100\r\n\r\n{{\"data\":").into_bytes(), 408),
    ];
    let mut lines = Vec::new();
    let mut wrong = Vec::new();
    for (name, raw, want) in &cases {
        let t = Instant::now();
        let got = (|| -> Result<Answer, String> {
            let mut s = connect()?;
            s.write_all(raw).map_err(|e| e.to_string())?;
            read_answer(&mut s, false, Duration::from_secs(30))
        })();
        match got {
            Ok(a) if a.status == *want => {
                if *want == 405 && header(&a.head, "allow").is_none() {
                    wrong.push(format!("{name}: 405 without Allow"));
                }
                lines.push(format!(
                    "{name} {} in {:.1} s",
                    a.status,
                    t.elapsed().as_secs_f64()
                ));
            }
            Ok(a) => wrong.push(format!(
                "{name}: {} (want {want}): {}",
                a.status,
                String::from_utf8_lossy(&a.body)
            )),
            Err(e) => wrong.push(format!("{name}: {e}")),
        }
    }
    // HEAD like GET, without the body; keep-alive answers twice.
    let mut s = connect()?;
    s.write_all(
        format!(
            "HEAD /api/v1/partitions HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n\r\n{}",
            open_get("/api/v1/host")
        )
        .as_bytes(),
    )
    .map_err(|e| e.to_string())?;
    let head = read_answer(&mut s, true, Duration::from_secs(10))?;
    let length = header(&head.head, "content-length")
        .unwrap_or("0")
        .to_string();
    if head.status != 200
        || length == "0"
        || !head.body.is_empty() && !head.body.starts_with(b"HTTP/1.1")
    {
        wrong.push(format!("HEAD: {} {:?}", head.status, head.head));
    }
    let mut next = head.body;
    if next.is_empty() {
        let a = read_answer(&mut s, false, Duration::from_secs(10))?;
        next = a.head.into_bytes();
    }
    if !next.starts_with(b"HTTP/1.1 200") {
        wrong.push(format!(
            "the pipelined GET after HEAD: {:?}",
            String::from_utf8_lossy(&next[..next.len().min(80)])
        ));
    }
    lines.push(format!(
        "HEAD 200 (Content-Length {length}, no body) then a pipelined GET on the same connection"
    ));
    if !wrong.is_empty() {
        return Err(format!("malformed requests: {}", wrong.join("; ")));
    }
    Ok(format!("malformed: {}", lines.join(", ")))
}

/// The `load` case.
pub fn load_case(stack: &mut Stack) -> Outcome {
    let deadline = Instant::now() + Duration::from_secs(240);
    stack.guests_up(deadline)?;
    let token = stack.token(deadline)?;
    stack.first_answer()?;
    let mut notes = vec![forwarder()?, close_stall(&token)?];
    notes.push(burst()?);
    notes.push(load(&token)?);
    notes.push(idle()?);
    notes.push(malformed(&token)?);
    Ok(notes)
}
