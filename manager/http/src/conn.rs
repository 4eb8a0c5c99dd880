//! One connection's request cycle, without I/O: bytes in, a [`Step`] out
//! (wait, a whole request, a head whose body is streamed, or a refusal),
//! and the clock that times it: [`Conn::expired`] says when an idle
//! connection has waited too long for its next request ([`Expiry::Idle`]:
//! close it) or a started request has not arrived whole within the read
//! timeout ([`Expiry::Read`]: answer 408 and close). [`admit`] is the
//! connection cap's policy.

use std::time::{Duration, Instant};

use crate::parse::{parse_request_with, Head, HttpError, Limits, Parsed};

/// How long a connection may wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Between requests (keep-alive), and before the first.
    pub idle: Duration,
    /// From a request's first byte until its head and (non-streamed) body
    /// are all in.
    pub read: Duration,
}

impl Timeouts {
    /// 30 s idle, 10 s to send a request.
    pub const DEFAULT: Timeouts = Timeouts {
        idle: Duration::from_secs(30),
        read: Duration::from_secs(10),
    };
}

/// What a connection's bytes make so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Nothing to do until more bytes come (or a timeout).
    NeedMore,
    /// The head is in, its body is not, and the client asked to be told to
    /// send it: write `100 Continue`, then wait.
    SendContinue,
    /// A whole request.
    Request { head: Head, body: Vec<u8> },
    /// A head whose body the handler reads from the connection itself
    /// (an upload); `already` is the part of it received with the head.
    Stream { head: Head, already: Vec<u8> },
    /// Answer this and close.
    Refuse(HttpError),
}

/// Why a connection's time is up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// No request within [`Timeouts::idle`]: close without a word.
    Idle,
    /// A request begun but not whole within [`Timeouts::read`]: 408.
    Read,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for a request's first byte since `since`.
    Idle,
    /// A request's first byte came at `since`.
    Reading,
    /// A request is with the handler.
    Working,
}

/// One connection's request cycle.
#[derive(Debug)]
pub struct Conn {
    buf: Vec<u8>,
    phase: Phase,
    since: Instant,
    continue_sent: bool,
    /// Requests handed out on this connection.
    pub requests: u64,
}

impl Conn {
    pub fn new(now: Instant) -> Self {
        Conn {
            buf: Vec::new(),
            phase: Phase::Idle,
            since: now,
            continue_sent: false,
            requests: 0,
        }
    }

    /// Idle: no request begun and none with the handler (what the cap
    /// evicts first).
    pub fn is_idle(&self) -> bool {
        self.phase == Phase::Idle && self.buf.is_empty()
    }

    /// With the handler (the event loop does not read it meanwhile).
    pub fn is_working(&self) -> bool {
        self.phase == Phase::Working
    }

    /// Bytes received and not yet handed out (what the connection holds).
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// When its current phase began (for the oldest-idle choice).
    pub fn since(&self) -> Instant {
        self.since
    }

    /// Transport bytes below HTTP came (a TLS handshake): from the first
    /// of them the read timeout runs as if a request had begun, so a
    /// client that stalls mid-handshake is timed out like one that stalls
    /// mid-request (the server calls it only while the handshake runs).
    /// Nothing changes once a request is under way.
    pub fn transport_started(&mut self, now: Instant) {
        if self.phase == Phase::Idle && self.buf.is_empty() {
            self.phase = Phase::Reading;
            self.since = now;
        }
    }

    /// The transport is ready (the TLS handshake is over): with no request
    /// byte yet the connection is idle again from `now` (the idle timeout,
    /// and first in line for eviction); otherwise the request's clock,
    /// running since the handshake began, goes on.
    pub fn transport_ready(&mut self, now: Instant) {
        if self.phase == Phase::Reading && self.buf.is_empty() {
            self.phase = Phase::Idle;
            self.since = now;
        }
    }

    /// Bytes received, then what they make.
    pub fn received(
        &mut self,
        data: &[u8],
        now: Instant,
        limits: &Limits,
        max_body: u64,
        streamed: &dyn Fn(&Head) -> bool,
    ) -> Step {
        if self.phase == Phase::Idle && !data.is_empty() {
            self.phase = Phase::Reading;
            self.since = now;
        }
        self.buf.extend_from_slice(data);
        self.step(limits, max_body, streamed)
    }

    /// What the bytes held make (after [`Conn::finished`], a pipelined
    /// request may already be whole).
    pub fn step(
        &mut self,
        limits: &Limits,
        max_body: u64,
        streamed: &dyn Fn(&Head) -> bool,
    ) -> Step {
        if self.phase == Phase::Working || self.buf.is_empty() {
            return Step::NeedMore;
        }
        let (head, head_len) = match parse_request_with(&self.buf, limits) {
            Ok(Parsed::Incomplete) => return Step::NeedMore,
            Err(err) => return Step::Refuse(err),
            Ok(Parsed::Complete(head, n)) => (head, n),
        };
        if streamed(&head) {
            // The handler answers an `Expect: 100-continue` itself.
            let have = (self.buf.len() - head_len) as u64;
            let take = have.min(head.content_length) as usize;
            let already = self.buf[head_len..head_len + take].to_vec();
            self.buf.drain(..head_len + take);
            self.hand_out();
            return Step::Stream { head, already };
        }
        if head.content_length > max_body {
            return Step::Refuse(HttpError::new(
                413,
                format!(
                    "request body is {} bytes; at most {max_body}",
                    head.content_length
                ),
            ));
        }
        let need = head.content_length as usize;
        if self.buf.len() - head_len < need {
            if head.expect_continue && !self.continue_sent {
                self.continue_sent = true;
                return Step::SendContinue;
            }
            return Step::NeedMore;
        }
        let body = self.buf[head_len..head_len + need].to_vec();
        self.buf.drain(..head_len + need);
        self.hand_out();
        Step::Request { head, body }
    }

    fn hand_out(&mut self) {
        self.phase = Phase::Working;
        self.continue_sent = false;
        self.requests += 1;
    }

    /// The handler answered and the connection stays open: the next
    /// request's clock starts now (already running if pipelined bytes
    /// wait).
    pub fn finished(&mut self, now: Instant) {
        self.phase = if self.buf.is_empty() {
            Phase::Idle
        } else {
            Phase::Reading
        };
        self.since = now;
    }

    /// Whether its time is up at `now`.
    pub fn expired(&self, now: Instant, timeouts: &Timeouts) -> Option<Expiry> {
        let waited = now.saturating_duration_since(self.since);
        match self.phase {
            Phase::Idle if waited >= timeouts.idle => Some(Expiry::Idle),
            Phase::Reading if waited >= timeouts.read => Some(Expiry::Read),
            _ => None,
        }
    }

    /// The 408 for [`Expiry::Read`], naming what was missing.
    pub fn timeout_error(&self, timeouts: &Timeouts) -> HttpError {
        let what = match parse_request_with(&self.buf, &Limits::DEFAULT) {
            Ok(Parsed::Complete(head, n)) => format!(
                "the body ({} of {} bytes came)",
                self.buf.len() - n,
                head.content_length
            ),
            _ => "the request head".to_string(),
        };
        HttpError::new(
            408,
            format!(
                "{what} did not arrive within {} s",
                timeouts.read.as_secs_f64()
            ),
        )
    }
}

/// What to do with a new connection when `open` are open and at most
/// `cap` may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit<K> {
    /// Room for it.
    Accept,
    /// Close `K`, the connection idle the longest, and take the new one.
    Evict(K),
    /// Every connection is busy with a request: answer 503 and close.
    Refuse,
}

/// The cap's policy: below the cap a new connection is taken; at it, the
/// one idle the longest is closed to make room (an idle connection costs a
/// socket and nothing else; a new client is worth more); when none is idle
/// (all are in a request), the new one is refused with a 503.
pub fn admit<K: Copy>(
    open: usize,
    cap: usize,
    conns: impl Iterator<Item = (K, bool, Instant)>,
) -> Admit<K> {
    if open < cap {
        return Admit::Accept;
    }
    conns
        .filter(|(_, idle, _)| *idle)
        .min_by_key(|(_, _, since)| *since)
        .map_or(Admit::Refuse, |(k, _, _)| Admit::Evict(k))
}
