//! The management HTTP server: one event-loop thread over non-blocking
//! sockets and a fixed pool of [`WORKERS`] threads, on manager/http's
//! parser and connection cycle (docs/MANAGER.md, "The HTTP server").
//!
//! Why this shape: Hermit 0.11's sockets take `FIONBIO` (std's
//! `set_nonblocking`) and it has `poll` (`sys_poll`, with a timeout), but
//! no SO_RCVTIMEO; so the loop owns every connection that is between
//! requests or receiving one, and times them itself (idle 30 s, a request
//! whole within 10 s, else 408). Each round it looks once (`poll` with no
//! timeout: with one, Hermit 0.11 spins until it expires) which
//! connections have bytes, tries `accept`, and when nothing is to be done
//! sleeps [`POLL_MS`] (the shortest sleep that blocks rather than spins),
//! giving the CPU to the workers. A request that is
//! whole (head and body, at most `MAX_BODY_BYTES`), or an upload's head,
//! goes to a worker with its socket; the worker runs the router, writes
//! the answer (no progress for [`WRITE_TIMEOUT`] ends the connection) and
//! gives a keep-alive connection back to the loop. An upload's body is
//! read by its worker as the router streams it (no progress within the
//! read timeout ends it). Event streams get a thread of their own, at most
//! `events::MAX_STREAMS`.
//!
//! At most [`MAX_CONNECTIONS`] connections are open; a new one when all
//! are taken closes the one idle the longest (`admit`), and when none is
//! idle (all in a request) it is answered 503 and closed. Memory: a
//! Hermit TCP socket is 128 KiB of buffers (64 KiB each way), so the cap
//! is 32 MiB, plus Hermit's 128 listening sockets of the backlog (16 MiB)
//! and at most 16 KiB of head + `MAX_BODY_BYTES` per connection (~10 MiB),
//! inside the management partition's 256 MiB beside the 32 MiB of console
//! history; a TLS connection adds about 8 KB of rustls state (measured by
//! the `tls` boot case, asserted under 48 KiB).
//!
//! Closing never waits: our Hermit patch makes a socket's drop hand the
//! close handshake to the network task (which aborts it after 3 s), where
//! Hermit 0.11 blocked the dropping thread until the peer answered (the
//! close stall).
//!
//! With TLS (the default), every connection is a [`Link`]: rustls fed from
//! the non-blocking socket (`tls.rs`), so the loop, the workers and
//! manager/http see plaintext only. The handshake runs in the loop as
//! bytes come; its time counts against the read timeout (a client that
//! stalls mid-handshake is closed after 10 s), and a connection still in
//! its handshake is evicted by the cap like an idle one. Plain HTTP on the
//! TLS port is answered 400 in plain HTTP and closed.

use std::collections::HashMap;
use std::io::{self, ErrorKind, Read, Write};
use std::net::{IpAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use pinfold_manager_api::events::{EventStream, StreamGate, StreamTicket};
use pinfold_manager_api::{Request, Response, MAX_BODY_BYTES};
use pinfold_manager_http::{self as http, Admit, Conn, Expiry, Head, HttpError, Limits, Step};

use rustls::ServerConfig;

use crate::tls::Link;
use crate::SharedRouter;

/// Most connections open at once (see the module's memory budget).
pub const MAX_CONNECTIONS: usize = 256;
/// Requests handled at once.
pub const WORKERS: usize = 4;
/// The event loop's longest sleep in `poll`, and so the latest a new
/// connection is accepted.
const POLL_MS: i32 = 10;
/// The shortest sleep that blocks in Hermit 0.11 (`usleep` spins below
/// 10 ms, and `poll` with a timeout spins until it expires, taking the one
/// CPU from the workers).
const SLEEP: Duration = Duration::from_millis(POLL_MS as u64);
/// A response write that makes no progress for this long ends the
/// connection.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Stack of the workers and event streams, which run the router and its
/// JSON.
pub const WORKER_STACK_BYTES: usize = 512 * 1024;
/// How often an event stream looks for new events.
const STREAM_POLL: Duration = Duration::from_millis(500);

const TIMEOUTS: http::Timeouts = http::Timeouts::DEFAULT;

/// A request the loop hands to a worker, with its connection.
struct Job {
    id: u64,
    stream: Link,
    /// The client's address (the failed-token throttle counts per address).
    peer: Option<IpAddr>,
    head: Head,
    body: Body,
}

enum Body {
    /// All of it (at most MAX_BODY_BYTES).
    Whole(Vec<u8>),
    /// An upload: what came with the head; the rest is in the socket.
    Streamed(Vec<u8>),
}

/// A worker's answer to the loop: the connection back for its next
/// request, or `None` (closed).
struct Back {
    id: u64,
    stream: Option<Link>,
}

struct Entry {
    /// `None` while a worker has it.
    stream: Option<Link>,
    conn: Conn,
    /// The address `accept` gave.
    peer: Option<IpAddr>,
}

/// The requests whose body the router reads from the socket itself: an
/// image upload (streamed into the hypervisor) and a configuration import.
fn streamed(head: &Head) -> bool {
    match head.method.as_str() {
        "POST" => matches!(head.path(), "/api/v1/images" | "/api/v1/images/"),
        // A configuration may be larger than MAX_BODY_BYTES (up to
        // `config::CONFIG_MAX_BYTES`): the router reads it from the socket
        // rather than the loop holding it.
        "PUT" => matches!(head.path(), "/api/v1/config" | "/api/v1/config/"),
        _ => false,
    }
}

// -- Hermit's poll --------------------------------------------------------

#[repr(C)]
struct PollFd {
    fd: i32,
    events: i16,
    revents: i16,
}

const POLLIN: i16 = 0x1;

extern "C" {
    /// Hermit 0.11's `poll` (kernel `sys_poll`): ready descriptors, 0 on
    /// timeout, a negative errno on failure.
    fn sys_poll(fds: *mut PollFd, nfds: usize, timeout: i32) -> i32;
}

fn poll(fds: &mut [PollFd], timeout_ms: i32) -> i32 {
    // SAFETY: `fds` is a valid, exclusively borrowed array of `PollFd`s
    // (the kernel's layout: i32, i16, i16) for the call's duration; the
    // kernel writes only their `revents`.
    unsafe { sys_poll(fds.as_mut_ptr(), fds.len(), timeout_ms) }
}

/// Waits until `stream` may be read or written (`events`), at most
/// `timeout_ms` (spinning: only an upload's worker waits this way, for
/// its next body bytes).
fn wait_for(stream: &Link, events: i16, timeout_ms: i32) {
    let mut fd = [PollFd {
        fd: stream.socket().as_raw_fd(),
        events,
        revents: 0,
    }];
    if poll(&mut fd, timeout_ms) < 0 {
        thread::sleep(Duration::from_millis(timeout_ms as u64));
    }
}

/// Writes all of `data` to a non-blocking socket, giving up when no byte
/// went out for `WRITE_TIMEOUT`.
fn write_all(stream: &mut Link, data: &[u8]) -> io::Result<()> {
    write_within(stream, data, WRITE_TIMEOUT)
}

/// The event loop's own writes (a refusal, `100 Continue`: small, into an
/// empty send buffer) may hold it at most this long: a socket still in its
/// handshake cannot take them yet.
const LOOP_WRITE_TIMEOUT: Duration = Duration::from_millis(500);

/// [`write_all`] giving up after `timeout` without progress (for TLS:
/// until the last record is out of rustls too).
fn write_within(stream: &mut Link, mut data: &[u8], timeout: Duration) -> io::Result<()> {
    let mut progress = Instant::now();
    while !data.is_empty() || stream.pending_out() {
        if data.is_empty() {
            if stream.push()? > 0 {
                progress = Instant::now();
            }
            if !stream.pending_out() {
                break;
            }
            if progress.elapsed() >= timeout {
                return Err(ErrorKind::TimedOut.into());
            }
            thread::sleep(SLEEP);
            continue;
        }
        match stream.write(data) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => {
                data = &data[n..];
                progress = Instant::now();
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                if progress.elapsed() >= timeout {
                    return Err(ErrorKind::TimedOut.into());
                }
                // The send buffer drains as the peer acknowledges; a sleep
                // of 10 ms or more blocks the thread (a shorter one, or
                // poll with a timeout, spins in Hermit 0.11).
                thread::sleep(SLEEP);
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// An upload's body: what came with the head, then the socket, up to
/// Content-Length; no byte for the read timeout is an error (TimedOut).
struct BodyReader<'s> {
    already: Vec<u8>,
    at: usize,
    stream: &'s mut Link,
    remaining: u64,
}

impl Read for BodyReader<'_> {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if self.remaining == 0 || out.is_empty() {
            return Ok(0);
        }
        let want = out
            .len()
            .min(self.remaining.try_into().unwrap_or(usize::MAX));
        if self.at < self.already.len() {
            let n = want.min(self.already.len() - self.at);
            out[..n].copy_from_slice(&self.already[self.at..self.at + n]);
            self.at += n;
            self.remaining -= n as u64;
            return Ok(n);
        }
        let started = Instant::now();
        loop {
            match self.stream.read(&mut out[..want]) {
                Ok(0) => {
                    return Err(io::Error::new(
                        ErrorKind::UnexpectedEof,
                        format!("the body ended {} bytes short", self.remaining),
                    ))
                }
                Ok(n) => {
                    self.remaining -= n as u64;
                    return Ok(n);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    if started.elapsed() >= TIMEOUTS.read {
                        return Err(io::Error::new(
                            ErrorKind::TimedOut,
                            format!("no body byte within {} s", TIMEOUTS.read.as_secs()),
                        ));
                    }
                    wait_for(self.stream, POLLIN, 20);
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// The last `Date` a worker had from the hypervisor's clock, for the
/// loop's own refusals (the loop never takes the router's lock).
type DateCache = Arc<Mutex<Option<String>>>;

/// Serves forever on `listener`, with TLS when `tls` is given.
pub fn run(listener: TcpListener, router: SharedRouter, tls: Option<Arc<ServerConfig>>) -> ! {
    if let Err(err) = listener.set_nonblocking(true) {
        eprintln!("pinfold-manager: the listener cannot be non-blocking: {err}");
    }
    let (job_tx, job_rx) = mpsc::channel::<Job>();
    let job_rx = Arc::new(Mutex::new(job_rx));
    let (back_tx, back_rx) = mpsc::channel::<Back>();
    let gate = StreamGate::new();
    let dates: DateCache = Arc::new(Mutex::new(None));
    for n in 0..WORKERS {
        let (jobs, back, router, gate, dates) = (
            job_rx.clone(),
            back_tx.clone(),
            router.clone(),
            gate.clone(),
            dates.clone(),
        );
        let spawned = thread::Builder::new()
            .name(format!("http-worker-{n}"))
            .stack_size(WORKER_STACK_BYTES)
            .spawn(move || worker(&jobs, &back, &router, &gate, &dates));
        if let Err(err) = spawned {
            eprintln!("pinfold-manager: cannot start a worker: {err}");
        }
    }
    event_loop(&listener, tls.as_ref(), &job_tx, &back_rx, &dates)
}

fn date_of(dates: &DateCache) -> Option<String> {
    dates.lock().ok().and_then(|d| d.clone())
}

/// Answers `err` on a connection the loop is about to close (best effort:
/// a refusal is small and the socket's send buffer empty).
fn refuse(mut stream: Link, err: &HttpError, dates: &DateCache) {
    let bytes = http::error_response(err, date_of(dates).as_deref());
    if stream.handshaking() {
        // No HTTP can reach the client before the handshake is over.
        return;
    }
    let _ = write_within(&mut stream, &bytes, LOOP_WRITE_TIMEOUT);
}

/// The answer to plain HTTP on the TLS port, in plain HTTP.
fn refuse_plaintext(mut stream: Link, dates: &DateCache) {
    let err = HttpError::new(
        400,
        "this port speaks HTTPS (TLS): use https:// (the certificate's SHA-256 fingerprint is on the manager's console)".to_string(),
    );
    stream.write_raw(&http::error_response(&err, date_of(dates).as_deref()));
}

fn event_loop(
    listener: &TcpListener,
    tls: Option<&Arc<ServerConfig>>,
    jobs: &Sender<Job>,
    back: &Receiver<Back>,
    dates: &DateCache,
) -> ! {
    let mut conns: HashMap<u64, Entry> = HashMap::new();
    let mut next_id = 0u64;
    let mut ready: Vec<u64> = Vec::new();
    // Connections with more to read than one round took (TLS may hold
    // their plaintext, where poll cannot see it).
    let mut again: Vec<u64> = Vec::new();
    let mut fds: Vec<PollFd> = Vec::new();
    let mut ids: Vec<u64> = Vec::new();
    let limits = Limits::DEFAULT;
    let max_body = MAX_BODY_BYTES as u64;
    loop {
        let now = Instant::now();
        ready.append(&mut again);
        // Connections the workers are done with.
        while let Ok(Back { id, stream }) = back.try_recv() {
            match stream {
                Some(stream) => {
                    if let Some(e) = conns.get_mut(&id) {
                        e.stream = Some(stream);
                        e.conn.finished(now);
                        ready.push(id);
                    }
                }
                None => {
                    conns.remove(&id);
                }
            }
        }
        // New connections.
        loop {
            match listener.accept() {
                Ok((stream, addr)) => {
                    let _ = stream.set_nonblocking(true);
                    let _ = stream.set_nodelay(true);
                    let verdict = http::admit(
                        conns.len(),
                        MAX_CONNECTIONS,
                        conns.iter().map(|(id, e)| {
                            // A handshake not over holds no request: it
                            // goes like an idle connection.
                            let idle = e
                                .stream
                                .as_ref()
                                .is_some_and(|s| e.conn.is_idle() || s.handshaking());
                            (*id, idle, e.conn.since())
                        }),
                    );
                    match verdict {
                        Admit::Accept => {}
                        Admit::Evict(old) => {
                            conns.remove(&old);
                        }
                        Admit::Refuse => {
                            // A TLS client could not read a plain 503: it is
                            // closed (and retries, like after an eviction).
                            if tls.is_some() {
                                continue;
                            }
                            let Ok(stream) = Link::new(stream, None) else {
                                continue;
                            };
                            refuse(
                                stream,
                                &HttpError::new(
                                    503,
                                    format!(
                                        "all {MAX_CONNECTIONS} connections are in a request; try again"
                                    ),
                                ),
                                dates,
                            );
                            continue;
                        }
                    }
                    let stream = match Link::new(stream, tls) {
                        Ok(link) => link,
                        Err(err) => {
                            eprintln!("pinfold-manager: TLS session: {err}");
                            continue;
                        }
                    };
                    next_id += 1;
                    conns.insert(
                        next_id,
                        Entry {
                            stream: Some(stream),
                            conn: Conn::new(now),
                            peer: Some(addr.ip()),
                        },
                    );
                    ready.push(next_id);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => {
                    eprintln!("pinfold-manager: accept failed: {e}");
                    break;
                }
            }
        }
        // Wait for bytes (not at all when some connection has work).
        fds.clear();
        ids.clear();
        for (id, e) in &conns {
            if let Some(s) = &e.stream {
                fds.push(PollFd {
                    fd: s.socket().as_raw_fd(),
                    events: POLLIN,
                    revents: 0,
                });
                ids.push(*id);
            }
        }
        // One look (a timeout would spin); nothing ready and nothing to do:
        // sleep, which gives the CPU to the workers.
        let mut n = if fds.is_empty() { 0 } else { poll(&mut fds, 0) };
        if n == 0 && ready.is_empty() {
            thread::sleep(SLEEP);
            if !fds.is_empty() {
                n = poll(&mut fds, 0);
            }
        }
        match n.cmp(&0) {
            // poll failed: read them all.
            std::cmp::Ordering::Less => ready.extend(ids.iter().copied()),
            std::cmp::Ordering::Greater => ready.extend(
                fds.iter()
                    .zip(&ids)
                    .filter(|(f, _)| f.revents != 0)
                    .map(|(_, id)| *id),
            ),
            std::cmp::Ordering::Equal => {}
        }
        ready.sort_unstable();
        ready.dedup();
        let now = Instant::now();
        for id in ready.drain(..) {
            let Some(entry) = conns.get_mut(&id) else {
                continue;
            };
            match service(entry, now, &limits, max_body) {
                Next::Keep => {}
                Next::Again => again.push(id),
                Next::Close => {
                    conns.remove(&id);
                }
                Next::Plaintext => {
                    if let Some(s) = conns.remove(&id).and_then(|e| e.stream) {
                        refuse_plaintext(s, dates);
                    }
                }
                Next::Refuse(err) => {
                    if let Some(e) = conns.remove(&id) {
                        if let Some(s) = e.stream {
                            refuse(s, &err, dates);
                        }
                    }
                }
                Next::Work(head, body) => {
                    if let Some(stream) = entry.stream.take() {
                        let job = Job {
                            id,
                            stream,
                            peer: entry.peer,
                            head,
                            body,
                        };
                        if jobs.send(job).is_err() {
                            conns.remove(&id);
                        }
                    }
                }
            }
        }
        // Timeouts.
        let now = Instant::now();
        let expired: Vec<(u64, Expiry)> = conns
            .iter()
            .filter(|(_, e)| e.stream.is_some())
            .filter_map(|(id, e)| e.conn.expired(now, &TIMEOUTS).map(|x| (*id, x)))
            .collect();
        for (id, why) in expired {
            if let Some(e) = conns.remove(&id) {
                if let (Expiry::Read, Some(s)) = (why, e.stream) {
                    refuse(s, &e.conn.timeout_error(&TIMEOUTS), dates);
                }
            }
        }
    }
}

enum Next {
    Keep,
    /// More may be waiting: service it again next round.
    Again,
    Close,
    /// Plain HTTP on the TLS port.
    Plaintext,
    Refuse(HttpError),
    Work(Head, Body),
}

/// Reads what a connection has and says what follows.
fn service(entry: &mut Entry, now: Instant, limits: &Limits, max_body: u64) -> Next {
    let Some(stream) = entry.stream.as_mut() else {
        return Next::Keep;
    };
    // A pipelined request may be whole already.
    let mut step = entry.conn.step(limits, max_body, &streamed);
    let mut buf = [0u8; 8192];
    for _ in 0..8 {
        match step {
            Step::NeedMore => {}
            Step::SendContinue => {
                if write_within(stream, b"HTTP/1.1 100 Continue\r\n\r\n", LOOP_WRITE_TIMEOUT)
                    .is_err()
                {
                    return Next::Close;
                }
            }
            Step::Request { head, body } => return Next::Work(head, Body::Whole(body)),
            Step::Stream { head, already } => return Next::Work(head, Body::Streamed(already)),
            Step::Refuse(err) => return Next::Refuse(err),
        }
        let (handshaking, raw) = (stream.handshaking(), stream.raw_in());
        let read = stream.read(&mut buf);
        if handshaking {
            // The handshake's bytes start the read timeout; once it is over
            // with no request yet, the connection is idle again.
            if stream.raw_in() > raw {
                entry.conn.transport_started(now);
            }
            if !stream.handshaking() {
                entry.conn.transport_ready(now);
            }
        }
        match read {
            // The client is done with it.
            Ok(0) => return Next::Close,
            Ok(n) => {
                step = entry
                    .conn
                    .received(&buf[..n], now, limits, max_body, &streamed)
            }
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Next::Keep,
            Err(e) if e.kind() == ErrorKind::Interrupted => step = Step::NeedMore,
            Err(_) if stream.spoke_plaintext() => return Next::Plaintext,
            Err(_) => return Next::Close,
        }
    }
    // More to read: the next round comes back to it at once.
    match step {
        Step::Request { head, body } => Next::Work(head, Body::Whole(body)),
        Step::Stream { head, already } => Next::Work(head, Body::Streamed(already)),
        Step::Refuse(err) => Next::Refuse(err),
        Step::NeedMore | Step::SendContinue => Next::Again,
    }
}

fn worker(
    jobs: &Mutex<Receiver<Job>>,
    back: &Sender<Back>,
    router: &SharedRouter,
    gate: &StreamGate,
    dates: &DateCache,
) {
    loop {
        let job = match jobs.lock() {
            Ok(rx) => match rx.recv() {
                Ok(job) => job,
                Err(_) => return,
            },
            Err(_) => return,
        };
        let id = job.id;
        let stream = handle(job, router, gate, dates);
        if back.send(Back { id, stream }).is_err() {
            return;
        }
    }
}

fn internal(detail: &str) -> Response {
    Response::new(
        500,
        "application/json",
        format!(r#"{{"error":"internal","detail":"{detail}"}}"#).into_bytes(),
    )
}

/// One request: the router's answer written back; the connection if it
/// stays open.
fn handle(job: Job, router: &SharedRouter, gate: &StreamGate, dates: &DateCache) -> Option<Link> {
    let Job {
        mut stream,
        head,
        body,
        peer,
        ..
    } = job;
    let api = Request {
        method: head.method.clone(),
        path: head.target.clone(),
        headers: head.headers.clone(),
        body: Vec::new(),
        peer,
    };
    let date = router.lock().ok().and_then(|mut r| r.date_header());
    if let Ok(mut d) = dates.lock() {
        d.clone_from(&date);
    }
    // The REST event stream, and Redfish's EventService one (same frames).
    let path = head.path();
    if head.method == "GET"
        && (path == "/api/v1/events/stream" || path == pinfold_manager_api::redfish::SSE_URI)
    {
        match open_stream(&api, router, gate) {
            Ok((events, ticket)) => {
                let router = router.clone();
                let spawned = thread::Builder::new()
                    .name("event-stream".into())
                    .stack_size(WORKER_STACK_BYTES)
                    .spawn(move || stream_events(stream, router, events, date, ticket));
                if let Err(err) = spawned {
                    eprintln!("pinfold-manager: cannot start an event stream: {err}");
                }
                return None;
            }
            Err(resp) => {
                return respond(stream, &head, resp, true, date.as_deref());
            }
        }
    }
    let (response, whole) = match body {
        Body::Whole(bytes) => {
            let mut reader = &bytes[..];
            (pinfold_manager_api::serve(router, api, &mut reader), true)
        }
        Body::Streamed(already) => {
            if head.expect_continue
                && write_all(&mut stream, b"HTTP/1.1 100 Continue\r\n\r\n").is_err()
            {
                return None;
            }
            let mut reader = BodyReader {
                already,
                at: 0,
                stream: &mut stream,
                remaining: head.content_length,
            };
            let response = pinfold_manager_api::serve(router, api, &mut reader);
            let whole = reader.remaining == 0;
            (response, whole)
        }
    };
    respond(stream, &head, response, whole, date.as_deref())
}

/// Writes `response` (its head only for HEAD); the connection back if it
/// stays open: the client wants it and the request's body was read whole.
fn respond(
    mut stream: Link,
    head: &Head,
    response: Response,
    whole: bool,
    date: Option<&str>,
) -> Option<Link> {
    let keep = head.keep_alive && whole;
    let mut headers: Vec<(&str, &str)> = vec![("Content-Type", response.content_type)];
    for (name, value) in &response.headers {
        headers.push((name, value));
    }
    if let Some(d) = date {
        headers.push(("Date", d));
    }
    let mut out = http::response_head(response.status, &headers, response.body.len() as u64, keep);
    if head.method != "HEAD" {
        out.extend_from_slice(&response.body);
    }
    write_all(&mut stream, &out).ok()?;
    keep.then_some(stream)
}

/// A place among the open event streams and where the stream starts, or
/// the answer refusing it (401, 400, 503 when MAX_STREAMS are open).
fn open_stream(
    api: &Request,
    router: &SharedRouter,
    gate: &StreamGate,
) -> Result<(EventStream, StreamTicket), Response> {
    let stream = router
        .lock()
        .map_err(|_| internal("router poisoned"))?
        .open_stream(api)?;
    let ticket = gate.enter().ok_or_else(|| {
        Response::new(
            503,
            "application/json",
            format!(
                r#"{{"error":"hypervisor_error","detail":"{} event streams are open, the most the manager serves; try again later"}}"#,
                pinfold_manager_api::events::MAX_STREAMS
            )
            .into_bytes(),
        )
    })?;
    Ok((stream, ticket))
}

/// Serves one event stream until the client goes (a write fails or makes
/// no progress for WRITE_TIMEOUT): the head, then what
/// `EventStream::poll` gives every STREAM_POLL (events, heartbeats).
fn stream_events(
    mut out: Link,
    router: SharedRouter,
    mut stream: EventStream,
    date: Option<String>,
    _ticket: StreamTicket,
) {
    let mut head = String::from(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n",
    );
    if let Some(d) = date {
        head.push_str(&format!("Date: {d}\r\n"));
    }
    // The client reconnects after 3 s if the stream breaks.
    head.push_str("\r\nretry: 3000\n\n");
    if write_all(&mut out, head.as_bytes()).is_err() {
        return;
    }
    let mut probe = [0u8; 512];
    loop {
        let chunk = match router.lock() {
            Ok(mut r) => {
                r.poll_events();
                stream.poll(&r.events, Instant::now())
            }
            Err(_) => return,
        };
        if let Some(text) = chunk {
            if write_all(&mut out, text.as_bytes()).is_err() {
                return; // the client went away
            }
        }
        // A client that closed its side is gone (reads 0).
        if matches!(out.read(&mut probe), Ok(0)) {
            return;
        }
        thread::sleep(STREAM_POLL);
    }
}
