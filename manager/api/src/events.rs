//! The manager's event log and console history: the hypervisor's events
//! (EVENTS_READ) merged with the manager's own (`login_refused`, `config`)
//! in one sequence, the Server-Sent Events framing of `GET
//! /api/v1/events/stream` (an [`EventStream`] takes the framing it is
//! given: the Redfish EventService's is `redfish::event_frame`), and the
//! per-partition console history behind
//! `GET /api/v1/partitions/{name}/console/history`.
//!
//! # Sequence numbers
//!
//! The hypervisor's event `s` is the API's event `1000 * (s + 1)`; the
//! manager's own events between two of the hypervisor's take the numbers
//! in between (`1000 * n + k`, k = 1..=999, n = the hypervisor events seen
//! so far). So the numbers only grow, and they survive a restart of the
//! manager: the new manager numbers the hypervisor's events as the old one
//! did, and a client's `Last-Event-ID` from before the restart still means
//! the same place (the old manager's own events are gone with it). A
//! cursor beyond the end reads nothing and resynchronises to the end, as
//! console offsets do. After 999 events of its own without one from the
//! hypervisor, the manager counts further ones and says so in the next
//! one it can number (`login_refused` is rate limited, so this takes
//! about half an hour of refused logins with nothing else happening).
//!
//! # Memory
//!
//! [`EVENTS_KEPT`] events (each under 400 bytes: about 400 KiB), and
//! [`HISTORY_BYTES`] of console history for each of at most
//! [`HISTORY_PARTITIONS`] partitions (32 MiB at most, of the management
//! partition's 256 MiB). Hermit 0.11 has no block device, so history
//! lives in RAM and a restart of the manager starts it again from what the
//! hypervisor's 64 KiB console ring still holds.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::time;

/// Events the manager keeps (hypervisor's and its own).
pub const EVENTS_KEPT: usize = 1024;
/// Console history kept per partition.
pub const HISTORY_BYTES: usize = 1 << 20;
/// Partitions whose history is kept (the least recently followed goes).
pub const HISTORY_PARTITIONS: usize = 32;
/// API sequence numbers per hypervisor event (see the module docs).
pub const SEQ_STRIDE: u64 = 1000;
/// Most `login_refused` events per window (the rest are counted).
pub const LOGIN_BURST: u32 = 5;
/// The rate limit's window.
pub const LOGIN_WINDOW: Duration = Duration::from_secs(10);
/// A stream with nothing to send writes a comment this often.
pub const HEARTBEAT: Duration = Duration::from_secs(15);
/// Event streams open at once (each holds a thread on Hermit).
pub const MAX_STREAMS: usize = 4;

/// One event as the API serves it (`GET /api/v1/events`, the stream).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiEvent {
    pub seq: u64,
    /// RFC 3339 UTC; null when there is no clock.
    pub time: Option<String>,
    /// state, fault, restart, config, login_refused, image.
    pub kind: String,
    pub partition: Option<String>,
    pub message: String,
}

/// `GET /api/v1/events`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventList {
    pub events: Vec<ApiEvent>,
    /// Pass as `since` next time.
    pub next: u64,
}

/// The merged log.
#[derive(Debug, Default)]
pub struct EventLog {
    kept: VecDeque<ApiEvent>,
    /// The next hypervisor sequence number to ask for.
    hv_next: u64,
    /// The manager's own events since the last hypervisor one.
    local: u64,
    /// Own events that found no number (see the module docs).
    unnumbered: u64,
    /// The sequence number the next event gets at the earliest.
    end: u64,
}

impl EventLog {
    pub fn new() -> Self {
        Self::default()
    }

    /// The hypervisor sequence number to read from next.
    /// Events kept.
    pub fn len(&self) -> usize {
        self.kept.len()
    }

    pub fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    pub fn hv_next(&self) -> u64 {
        self.hv_next
    }

    /// One past the last sequence number given out.
    pub fn end(&self) -> u64 {
        self.end
    }

    fn push(&mut self, e: ApiEvent) {
        self.end = e.seq + 1;
        if self.kept.len() == EVENTS_KEPT {
            self.kept.pop_front();
        }
        self.kept.push_back(e);
    }

    /// Takes the hypervisor's events of one EVENTS_READ (`next` its next
    /// sequence number).
    pub fn ingest(&mut self, events: &[pinfold_abi::Event], next: u64) {
        for e in events {
            if e.seq < self.hv_next {
                continue; // already have it
            }
            self.push(ApiEvent {
                seq: SEQ_STRIDE * (e.seq + 1),
                time: e.unix_ms.map(time::rfc3339),
                kind: e.kind.name().to_string(),
                partition: e.partition.as_ref().map(|p| p.1.clone()),
                message: e.message.clone(),
            });
            self.hv_next = e.seq + 1;
            self.local = 0;
        }
        if next > self.hv_next {
            self.hv_next = next;
            self.local = 0;
            self.end = self.end.max(SEQ_STRIDE * next + 1);
        }
    }

    /// Records one of the manager's own events; its sequence number, or
    /// None when 999 are already numbered after the last hypervisor event.
    pub fn record(
        &mut self,
        kind: &str,
        partition: Option<&str>,
        message: &str,
        unix_ms: Option<u64>,
    ) -> Option<u64> {
        if self.local + 1 >= SEQ_STRIDE {
            self.unnumbered += 1;
            return None;
        }
        self.local += 1;
        let seq = SEQ_STRIDE * self.hv_next + self.local;
        let message = match std::mem::take(&mut self.unnumbered) {
            0 => message.to_string(),
            n => format!("{message} ({n} earlier events of the manager lost)"),
        };
        self.push(ApiEvent {
            seq,
            time: unix_ms.map(time::rfc3339),
            kind: kind.to_string(),
            partition: partition.map(str::to_string),
            message,
        });
        Some(seq)
    }

    /// Events with a sequence number of at least `since`, at most `max`,
    /// and the `since` of the next read.
    pub fn since(&self, since: u64, max: usize) -> EventList {
        if since > self.end {
            return EventList {
                events: Vec::new(),
                next: self.end,
            };
        }
        let start = self.kept.partition_point(|e| e.seq < since);
        let events: Vec<ApiEvent> = self.kept.iter().skip(start).take(max).cloned().collect();
        let next = events
            .last()
            .map_or(since.max(self.first_kept()), |e| e.seq + 1);
        EventList { events, next }
    }

    fn first_kept(&self) -> u64 {
        self.kept.front().map_or(self.end, |e| e.seq)
    }
}

/// At most [`LOGIN_BURST`] refused logins per [`LOGIN_WINDOW`] become
/// events; the rest are counted and the next event says how many.
#[derive(Debug, Default)]
pub struct LoginLimiter {
    window_start: Option<Instant>,
    in_window: u32,
    suppressed: u64,
}

impl LoginLimiter {
    /// Whether a refusal at `now` is recorded, with how many were
    /// suppressed before it.
    pub fn check(&mut self, now: Instant) -> Option<u64> {
        let fresh = self
            .window_start
            .is_none_or(|s| now.duration_since(s) >= LOGIN_WINDOW);
        if fresh {
            self.window_start = Some(now);
            self.in_window = 0;
        }
        if self.in_window < LOGIN_BURST {
            self.in_window += 1;
            Some(std::mem::take(&mut self.suppressed))
        } else {
            self.suppressed += 1;
            None
        }
    }
}

/// One event as a Server-Sent Events frame (`id:`, `event:`, `data:` and
/// a blank line). The JSON has no newline, so `data:` is one line.
pub fn sse_frame(e: &ApiEvent) -> String {
    let data = serde_json::to_string(e).unwrap_or_else(|_| "{}".to_string());
    format!("id: {}\nevent: {}\ndata: {data}\n\n", e.seq, e.kind)
}

/// The heartbeat comment a quiet stream sends.
pub const SSE_HEARTBEAT: &str = ": heartbeat\n\n";

/// One open event stream: where it is, when it last wrote, and how it
/// frames an event ([`sse_frame`] for the REST stream, the Redfish
/// `Event` frame for the EventService one).
#[derive(Debug, Clone)]
pub struct EventStream {
    pub next: u64,
    last_write: Instant,
    frame: fn(&ApiEvent) -> String,
}

impl EventStream {
    /// A REST stream from sequence number `since` on; `retry` hint first.
    pub fn new(since: u64, now: Instant) -> Self {
        Self::framed(since, now, sse_frame)
    }

    /// A stream from `since` on whose events `frame` writes.
    pub fn framed(since: u64, now: Instant, frame: fn(&ApiEvent) -> String) -> Self {
        EventStream {
            next: since,
            last_write: now,
            frame,
        }
    }

    /// What to write now, if anything: the frames of the events from
    /// `next` on, else a heartbeat once [`HEARTBEAT`] passed quietly.
    pub fn poll(&mut self, log: &EventLog, now: Instant) -> Option<String> {
        let list = log.since(self.next, 256);
        self.next = list.next;
        if !list.events.is_empty() {
            self.last_write = now;
            return Some(list.events.iter().map(self.frame).collect());
        }
        if now.duration_since(self.last_write) >= HEARTBEAT {
            self.last_write = now;
            return Some(SSE_HEARTBEAT.to_string());
        }
        None
    }
}

/// Counts open streams; a [`StreamTicket`] gives its place back when
/// dropped (the stream's thread ends).
#[derive(Debug, Clone, Default)]
pub struct StreamGate {
    open: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

/// A place among the [`MAX_STREAMS`].
#[derive(Debug)]
pub struct StreamTicket {
    open: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl StreamGate {
    pub fn new() -> Self {
        Self::default()
    }

    /// A place, or None when [`MAX_STREAMS`] are open.
    pub fn enter(&self) -> Option<StreamTicket> {
        use std::sync::atomic::Ordering;
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_STREAMS).then_some(n + 1)
            })
            .ok()?;
        Some(StreamTicket {
            open: self.open.clone(),
        })
    }

    pub fn open(&self) -> usize {
        self.open.load(std::sync::atomic::Ordering::Acquire)
    }
}

impl Drop for StreamTicket {
    fn drop(&mut self) {
        self.open.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// A `Last-Event-ID` header, or the `since` query parameter: a u64 of at
/// most i64::MAX.
pub fn parse_cursor(value: &str) -> Option<u64> {
    value
        .trim()
        .parse()
        .ok()
        .filter(|&v: &u64| i64::try_from(v).is_ok())
}

/// One partition's console history: the last [`HISTORY_BYTES`] bytes it
/// printed since the manager started following it, and where its
/// hypervisor console ring is read next.
#[derive(Debug, Default)]
pub struct History {
    bytes: VecDeque<u8>,
    /// The console position read next.
    pub cursor: u64,
    /// Bytes cut from the front to stay within the budget.
    pub trimmed: u64,
    /// Bytes the hypervisor's ring overwrote before they were read.
    pub lost: u64,
    /// When it was last followed (the least recent one goes first).
    pub touched: u64,
}

impl History {
    /// Appends what one console read gave (`dropped` bytes lost before it).
    pub fn append(&mut self, data: &[u8], next: u64, dropped: u64) {
        if dropped > 0 {
            self.lost += dropped;
            let note = format!("\r\n[pinfold-manager: {dropped} bytes of console output lost]\r\n");
            self.extend(note.as_bytes());
        }
        self.extend(data);
        self.cursor = next;
    }

    /// Trims the front before it appends, so the deque never holds more
    /// than [`HISTORY_BYTES`] and its buffer never grows past them (trimmed
    /// after, a full history's deque doubled to 2 MiB on the next read).
    fn extend(&mut self, data: &[u8]) {
        let data = &data[data.len().saturating_sub(HISTORY_BYTES)..];
        let over = (self.bytes.len() + data.len()).saturating_sub(HISTORY_BYTES);
        if over > 0 {
            self.bytes.drain(..over);
            self.trimmed += over as u64;
        }
        self.bytes.extend(data);
    }

    /// Bytes of RAM its buffer holds (what it may grow to: [`HISTORY_BYTES`]).
    pub fn reserved(&self) -> usize {
        self.bytes.capacity()
    }

    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The whole history.
    pub fn to_vec(&self) -> Vec<u8> {
        self.bytes.iter().copied().collect()
    }
}

/// Every partition's history, by name.
#[derive(Debug, Default)]
pub struct Histories {
    by_name: HashMap<String, History>,
    clock: u64,
}

impl Histories {
    pub fn new() -> Self {
        Self::default()
    }

    /// `name`'s history (made on first use; the least recently used one is
    /// dropped beyond [`HISTORY_PARTITIONS`]).
    pub fn get(&mut self, name: &str) -> &mut History {
        self.clock += 1;
        if !self.by_name.contains_key(name) && self.by_name.len() >= HISTORY_PARTITIONS {
            if let Some(oldest) = self
                .by_name
                .iter()
                .min_by_key(|(_, h)| h.touched)
                .map(|(n, _)| n.clone())
            {
                self.by_name.remove(&oldest);
            }
        }
        let h = self.by_name.entry(name.to_string()).or_default();
        h.touched = self.clock;
        h
    }

    pub fn len(&self) -> usize {
        self.by_name.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// Bytes of RAM the histories' buffers hold together.
    pub fn reserved(&self) -> usize {
        self.by_name.values().map(History::reserved).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_history_keeps_its_budget_of_ram_and_the_newest_bytes() {
        let mut h = History::default();
        let mut next = 0;
        for i in 0..48u8 {
            let chunk = vec![i; 64 * 1024];
            next += chunk.len() as u64;
            h.append(&chunk, next, 0);
            assert!(
                h.reserved() <= HISTORY_BYTES,
                "{} bytes reserved",
                h.reserved()
            );
        }
        assert_eq!(h.len(), HISTORY_BYTES);
        assert_eq!(h.to_vec().last(), Some(&47));
        assert_eq!(h.trimmed, 48 * 64 * 1024 - HISTORY_BYTES as u64);
    }

    #[test]
    fn one_read_larger_than_the_history_keeps_its_tail() {
        let mut h = History::default();
        let mut data = vec![1u8; HISTORY_BYTES];
        data.extend_from_slice(b"end");

        h.append(&data, data.len() as u64, 0);

        assert_eq!(h.len(), HISTORY_BYTES);
        assert!(h.to_vec().ends_with(b"end"));
        assert!(h.reserved() <= HISTORY_BYTES);
    }
    use pinfold_abi::{Event, EventKind};

    fn hv(seq: u64, msg: &str) -> Event {
        Event {
            seq,
            unix_ms: Some(1_796_132_700_000 + seq * 1000),
            kind: EventKind::State,
            partition: Some((1, "beta".into())),
            message: msg.into(),
        }
    }

    #[test]
    fn hypervisor_and_manager_events_share_one_growing_sequence() {
        let mut log = EventLog::new();
        assert_eq!(
            log.record("login_refused", None, "wrong token", None),
            Some(1)
        );
        log.ingest(&[hv(0, "stopped"), hv(1, "running (boot 2)")], 2);
        let own = log
            .record("config", Some("beta"), "changed", Some(0))
            .unwrap();
        log.ingest(&[hv(2, "stopped")], 3);

        let all = log.since(0, 100);

        let seqs: Vec<u64> = all.events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [1, 1000, 2000, 2001, 3000]);
        assert_eq!(own, 2001);
        assert_eq!(all.next, 3001);
        let e = &all.events[1];
        assert_eq!(e.time.as_deref(), Some("2026-12-01T13:45:00Z"));
        assert_eq!(
            (e.kind.as_str(), e.partition.as_deref()),
            ("state", Some("beta"))
        );
        // Reading on from a cursor, and a cursor beyond the end.
        assert_eq!(log.since(2001, 100).events.len(), 2);
        assert_eq!(log.since(3001, 100).events.len(), 0);
        assert_eq!(log.since(9999, 100).next, 3001, "resynchronised");
    }

    #[test]
    fn a_new_manager_numbers_the_hypervisors_events_as_the_old_one_did() {
        let mut old = EventLog::new();
        old.ingest(&[hv(0, "a"), hv(1, "b")], 2);
        old.record("config", None, "x", None);
        let cursor = old.since(0, 100).next;
        let mut new = EventLog::new();
        new.ingest(&[hv(0, "a"), hv(1, "b"), hv(2, "c")], 3);

        let after = new.since(cursor, 100);

        assert_eq!(after.events.len(), 1);
        assert_eq!(after.events[0].message, "c");
    }

    #[test]
    fn hypervisor_events_are_not_taken_twice_and_lost_ones_leave_a_gap() {
        let mut log = EventLog::new();
        log.ingest(&[hv(0, "a")], 1);
        log.ingest(&[hv(0, "a"), hv(5, "f")], 6);
        let seqs: Vec<u64> = log.since(0, 100).events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, [1000, 6000]);
        assert_eq!(log.hv_next(), 6);
    }

    #[test]
    fn the_log_keeps_its_last_events_and_a_reader_behind_starts_at_the_oldest() {
        let mut log = EventLog::new();
        let events: Vec<Event> = (0..EVENTS_KEPT as u64 + 10).map(|s| hv(s, "x")).collect();
        log.ingest(&events, events.len() as u64);

        let got = log.since(0, 5);

        assert_eq!(got.events[0].seq, SEQ_STRIDE * 11);
        assert_eq!(got.next, SEQ_STRIDE * 15 + 1);
    }

    #[test]
    fn own_events_beyond_the_numbers_between_two_of_the_hypervisors_are_counted() {
        let mut log = EventLog::new();
        for _ in 0..999 {
            log.record("login_refused", None, "x", None);
        }
        assert_eq!(log.record("login_refused", None, "y", None), None);
        assert_eq!(log.record("login_refused", None, "y", None), None);
        log.ingest(&[hv(0, "a")], 1);
        let seq = log.record("config", None, "z", None).unwrap();
        let last = log.since(seq, 1).events.remove(0);
        assert_eq!(last.message, "z (2 earlier events of the manager lost)");
    }

    #[test]
    fn refused_logins_are_limited_per_window_and_the_next_says_how_many_went() {
        let mut lim = LoginLimiter::default();
        let t0 = Instant::now();
        let passed = (0..20).filter(|_| lim.check(t0).is_some()).count();
        assert_eq!(passed, LOGIN_BURST as usize);
        assert_eq!(lim.check(t0 + LOGIN_WINDOW), Some(15));
    }

    #[test]
    fn frames_carry_id_event_and_one_data_line_of_the_event_json() {
        let e = ApiEvent {
            seq: 2000,
            time: None,
            kind: "state".into(),
            partition: Some("beta".into()),
            message: "line one\nline two".into(),
        };
        let f = sse_frame(&e);
        assert_eq!(
            f,
            "id: 2000\nevent: state\ndata: {\"seq\":2000,\"time\":null,\"kind\":\"state\",\"partition\":\"beta\",\"message\":\"line one\\nline two\"}\n\n"
        );
    }

    #[test]
    fn a_stream_sends_new_events_then_heartbeats_when_quiet() {
        let mut log = EventLog::new();
        let t0 = Instant::now();
        let mut s = EventStream::new(0, t0);
        assert_eq!(s.poll(&log, t0), None);
        log.ingest(&[hv(0, "a")], 1);
        let out = s.poll(&log, t0 + Duration::from_secs(1)).unwrap();
        assert!(out.starts_with("id: 1000\nevent: state\n"), "{out}");
        assert_eq!(
            s.poll(&log, t0 + Duration::from_secs(2)),
            None,
            "nothing twice"
        );
        assert_eq!(
            s.poll(&log, t0 + Duration::from_secs(16)).as_deref(),
            Some(SSE_HEARTBEAT)
        );
        assert_eq!(s.poll(&log, t0 + Duration::from_secs(17)), None);
    }

    #[test]
    fn the_gate_lets_max_streams_in_and_a_closed_one_frees_its_place() {
        let gate = StreamGate::new();
        let tickets: Vec<_> = (0..MAX_STREAMS).map(|_| gate.enter().unwrap()).collect();
        assert!(gate.enter().is_none());
        drop(tickets);
        assert_eq!(gate.open(), 0);
        assert!(gate.enter().is_some());
    }

    #[test]
    fn history_keeps_its_budget_and_notes_bytes_the_ring_lost() {
        let mut h = History::default();
        h.append(b"boot 1\r\n", 8, 0);
        h.append(b"later", 200, 100);
        let text = String::from_utf8(h.to_vec()).unwrap();
        assert_eq!(
            text,
            "boot 1\r\n\r\n[pinfold-manager: 100 bytes of console output lost]\r\nlater"
        );
        assert_eq!((h.cursor, h.lost), (200, 100));
        h.append(&vec![b'x'; HISTORY_BYTES], 200 + HISTORY_BYTES as u64, 0);
        assert_eq!(h.len(), HISTORY_BYTES);
        assert!(h.to_vec().iter().all(|&b| b == b'x'));
    }

    #[test]
    fn histories_drop_the_least_recently_followed_beyond_the_limit() {
        let mut hs = Histories::new();
        for i in 0..HISTORY_PARTITIONS {
            hs.get(&format!("p{i}")).append(b"x", 1, 0);
        }
        hs.get("p0");
        hs.get("new");
        assert_eq!(hs.len(), HISTORY_PARTITIONS);
        assert_eq!(hs.get("p0").len(), 1, "p0 was used recently");
        assert_eq!(hs.get("p1").len(), 0, "p1 was dropped");
    }
}
