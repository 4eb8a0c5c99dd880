//! The hypervisor's event log: partition state changes, contained guest
//! faults, restarts by a policy, configuration and image changes, each with
//! a sequence number and the counter value it happened at (turned into
//! wall-clock time when read: `System::wall_clock`). The management ABI's
//! EVENTS_READ reads it (`Manage::events`); the manager merges it with its
//! own events (REST `GET /api/v1/events`).
//!
//! # Design
//!
//! One ring per host CPU ([`EventLog::shards`]): an event goes into the
//! ring of the CPU that records it, so a guest's fault storm writes only
//! the rings of its own CPUs (every CPU belongs to at most one partition),
//! and another partition's events (recorded on its own CPUs, or on the
//! management CPU by a management call) cannot be pushed out by it. The
//! only thing shared between CPUs on the write path is one atomic sequence
//! counter (`fetch_add`). A ring's lock ([`LockPath::Event`]) is taken by
//! its own CPU and by the management partition's EVENTS_READ, never by
//! another guest's CPU; guest-driven events are rate limited before they
//! get there (faults: only those `ratelimit::FaultLog` lets through,
//! at most `BURST` per kind per `WINDOW_SECONDS` per partition).
//!
//! Nothing allocates on the write path (the heap's lock is shared by every
//! CPU): each ring is allocated whole when the log is made, an event's
//! message is formatted into a fixed [`MESSAGE_MAX`]-byte slot (cut at a
//! character boundary), the partition's name into [`NAME_MAX`] bytes.
//!
//! A read merges the rings by sequence number. The sequence number is
//! taken with the ring's lock held, so a reader that first loads the
//! counter (`end`) and then locks each ring sees every event numbered below
//! `end` that is still kept; a number below `end` that no ring holds was
//! overwritten, and is counted as lost (`dropped`). A reader passes the
//! previous reply's `next`; a cursor beyond the end (from a previous boot
//! of the hypervisor) reads nothing and resynchronises to the end, as
//! console positions do.

use crate::lockstat::{CountedLock, LockPath, LockStat};
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};
use pinfold_abi::{Event, EventKind};

/// Events each CPU's ring keeps.
pub const EVENTS_PER_CPU: usize = 64;
/// Bytes of an event's message kept (longer ones are cut).
pub const MESSAGE_MAX: usize = 160;
/// Bytes of a partition name kept (plan names have at most 15).
pub const NAME_MAX: usize = 16;

/// One event as a ring keeps it (fixed size: no allocation).
#[derive(Clone, Copy)]
struct Slot {
    seq: u64,
    counter: u64,
    kind: EventKind,
    partition: Option<u32>,
    name: [u8; NAME_MAX],
    name_len: u8,
    message: [u8; MESSAGE_MAX],
    message_len: u8,
}

const EMPTY: Slot = Slot {
    seq: 0,
    counter: 0,
    kind: EventKind::State,
    partition: None,
    name: [0; NAME_MAX],
    name_len: 0,
    message: [0; MESSAGE_MAX],
    message_len: 0,
};

/// One CPU's ring: the last [`EVENTS_PER_CPU`] events recorded on it.
pub struct Shard {
    /// Grows to [`EVENTS_PER_CPU`] as events come (its room is reserved at
    /// boot, so recording never allocates; nothing is written at boot).
    slots: Vec<Slot>,
    /// Events ever pushed; the next goes to `pushed % EVENTS_PER_CPU`.
    pushed: u64,
}

impl Shard {
    fn new() -> Shard {
        Shard {
            slots: Vec::with_capacity(EVENTS_PER_CPU),
            pushed: 0,
        }
    }

    fn kept(&self) -> impl Iterator<Item = &Slot> {
        self.slots.iter()
    }
}

/// Formats into a fixed buffer, cutting at a character boundary.
struct Cut<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl fmt::Write for Cut<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = self.buf.len() - self.len;
        let mut take = s.len().min(room);
        while !s.is_char_boundary(take) {
            take -= 1;
        }
        self.buf[self.len..self.len + take].copy_from_slice(&s.as_bytes()[..take]);
        self.len += take;
        Ok(())
    }
}

fn cut_into(buf: &mut [u8], args: fmt::Arguments) -> usize {
    let mut w = Cut { buf, len: 0 };
    let _ = fmt::write(&mut w, args);
    w.len
}

/// What one read returns: the events, the cursor for the next read, and
/// how many events between the cursor given and `next` were lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventsRead {
    pub events: Vec<Event>,
    pub next: u64,
    pub dropped: u64,
}

/// The log: one ring per CPU and the sequence counter.
pub struct EventLog {
    shards: Vec<CountedLock<Shard>>,
    seq: AtomicU64,
}

/// Bytes of postcard's varint length prefix for `n`.
fn varint_len(mut n: usize) -> usize {
    let mut len = 1;
    while n >= 0x80 {
        n >>= 7;
        len += 1;
    }
    len
}

impl EventLog {
    /// A log with one ring per CPU (at least one).
    pub fn new(cpus: usize, stat: &'static LockStat) -> EventLog {
        EventLog {
            shards: (0..cpus.max(1))
                .map(|_| CountedLock::new(Shard::new(), stat))
                .collect(),
            seq: AtomicU64::new(0),
        }
    }

    /// The sequence number the next event will get.
    pub fn end(&self) -> u64 {
        self.seq.load(Ordering::Acquire)
    }

    /// Records an event on CPU `cpu`'s ring (a CPU beyond the log's goes
    /// to the last ring) at counter value `counter`; its sequence number.
    pub fn record(
        &self,
        cpu: usize,
        counter: u64,
        kind: EventKind,
        partition: Option<(u32, &str)>,
        args: fmt::Arguments,
    ) -> u64 {
        let shard = &self.shards[cpu.min(self.shards.len() - 1)];
        let mut s = shard.lock(LockPath::Event);
        // Numbered under the ring's lock: see the module docs.
        let seq = self.seq.fetch_add(1, Ordering::AcqRel);
        let at = (s.pushed % EVENTS_PER_CPU as u64) as usize;
        s.pushed += 1;
        if s.slots.len() < EVENTS_PER_CPU {
            // Within the capacity reserved at boot: no allocation.
            s.slots.push(EMPTY);
        }
        let slot = &mut s.slots[at];
        slot.seq = seq;
        slot.counter = counter;
        slot.kind = kind;
        slot.partition = partition.map(|(i, _)| i);
        let name = partition.map_or("", |(_, n)| n);
        slot.name_len = cut_into(&mut slot.name, format_args!("{name}")) as u8;
        slot.message_len = cut_into(&mut slot.message, args) as u8;
        seq
    }

    /// Events from sequence number `from` on, as many as fit `max_bytes`
    /// encoded as a postcard `Vec<Event>`, oldest first; `unix_ms` maps a
    /// counter value to wall-clock time (None without a clock).
    pub fn read(
        &self,
        from: u64,
        max_bytes: usize,
        unix_ms: impl Fn(u64) -> Option<u64>,
    ) -> EventsRead {
        let end = self.end();
        if from >= end {
            return EventsRead {
                events: Vec::new(),
                next: end,
                dropped: 0,
            };
        }
        let mut found: Vec<Slot> = Vec::new();
        for shard in &self.shards {
            let s = shard.lock(LockPath::Event);
            found.extend(s.kept().filter(|e| e.seq >= from && e.seq < end).copied());
        }
        found.sort_unstable_by_key(|e| e.seq);
        let mut events = Vec::new();
        let mut bytes = 0;
        let mut next = end;
        for slot in &found {
            let event = Event {
                seq: slot.seq,
                unix_ms: unix_ms(slot.counter),
                kind: slot.kind,
                partition: slot.partition.map(|i| {
                    (
                        i,
                        String::from_utf8_lossy(&slot.name[..slot.name_len as usize]).into_owned(),
                    )
                }),
                message: String::from_utf8_lossy(&slot.message[..slot.message_len as usize])
                    .into_owned(),
            };
            let len = pinfold_abi::reply_len(&event);
            if bytes + len + varint_len(events.len() + 1) > max_bytes {
                next = slot.seq;
                break;
            }
            bytes += len;
            events.push(event);
        }
        EventsRead {
            dropped: next - from - events.len() as u64,
            events,
            next,
        }
    }
}

pub use pinfold_abi::civil_from_days;

/// A time as the boot marker prints it: RFC 3339 UTC to the second
/// (`2026-12-01T13:45:00Z`) from Unix milliseconds, or, without a clock,
/// seconds since the hypervisor started (`+12s`).
pub struct When {
    pub unix_ms: Option<u64>,
    pub uptime_s: u64,
}

impl fmt::Display for When {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(ms) = self.unix_ms else {
            return write!(f, "+{}s", self.uptime_s);
        };
        let secs = ms / 1000;
        let (y, mo, d) = civil_from_days((secs / 86_400) as i64);
        let rem = secs % 86_400;
        write!(
            f,
            "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}Z",
            rem / 3600,
            rem / 60 % 60,
            rem % 60
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use std::boxed::Box;

    fn stat() -> &'static LockStat {
        Box::leak(Box::new(LockStat::new()))
    }

    fn all(log: &EventLog, from: u64) -> EventsRead {
        log.read(from, 64 * 1024, |c| Some(c * 10))
    }

    #[test]
    fn events_of_every_cpu_come_back_in_sequence_order() {
        let log = EventLog::new(4, stat());
        for i in 0..12u64 {
            // CPUs 3, 2, 1, 0, 3, ... : each ring holds every fourth.
            log.record(
                3 - (i % 4) as usize,
                i,
                EventKind::State,
                Some((i as u32 % 2, "alpha")),
                format_args!("event {i}"),
            );
        }

        let got = all(&log, 0);

        let seqs: Vec<u64> = got.events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (0..12).collect::<Vec<_>>());
        assert_eq!(got.events[5].message, "event 5");
        assert_eq!(got.events[5].unix_ms, Some(50));
        assert_eq!(got.events[5].partition, Some((1, "alpha".into())));
        assert_eq!((got.next, got.dropped), (12, 0));
        // From the middle, and from the end.
        assert_eq!(all(&log, 7).events.first().map(|e| e.seq), Some(7));
        assert_eq!(all(&log, 12).events.len(), 0);
    }

    #[test]
    fn recording_from_many_threads_loses_and_repeats_nothing() {
        let log: &'static EventLog = Box::leak(Box::new(EventLog::new(4, stat())));
        let threads: Vec<_> = (0..4)
            .map(|cpu| {
                std::thread::spawn(move || {
                    for i in 0..EVENTS_PER_CPU {
                        log.record(cpu, 0, EventKind::Fault, None, format_args!("{cpu}/{i}"));
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }

        let got = all(log, 0);

        let seqs: Vec<u64> = got.events.iter().map(|e| e.seq).collect();
        assert_eq!(seqs, (0..4 * EVENTS_PER_CPU as u64).collect::<Vec<_>>());
        // Within one CPU the messages keep their order.
        let cpu2: Vec<String> = got
            .events
            .iter()
            .filter(|e| e.message.starts_with("2/"))
            .map(|e| e.message.clone())
            .collect();
        assert_eq!(
            cpu2,
            (0..EVENTS_PER_CPU)
                .map(|i| format!("2/{i}"))
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_reader_that_fell_behind_is_told_how_many_were_lost() {
        let log = EventLog::new(1, stat());
        for i in 0..EVENTS_PER_CPU as u64 + 10 {
            log.record(0, 0, EventKind::State, None, format_args!("{i}"));
        }

        let got = all(&log, 3);

        assert_eq!(got.dropped, 7, "seq 3..10 were overwritten");
        assert_eq!(got.events.first().map(|e| e.seq), Some(10));
        assert_eq!(got.events.len(), EVENTS_PER_CPU);
        assert_eq!(got.next, EVENTS_PER_CPU as u64 + 10);
        // A cursor from an earlier boot: nothing, resynchronised.
        let later = all(&log, 10_000);
        assert_eq!(
            (later.events.len(), later.next, later.dropped),
            (0, got.next, 0)
        );
    }

    #[test]
    fn a_fault_storm_on_one_partitions_cpu_keeps_the_others_events() {
        // Partition "storm" runs on CPU 2; "quiet" on CPU 1; the manager
        // on CPU 0 starts and stops things.
        let log = EventLog::new(3, stat());
        log.record(
            1,
            0,
            EventKind::State,
            Some((1, "quiet")),
            format_args!("running"),
        );
        log.record(
            0,
            0,
            EventKind::State,
            Some((2, "storm")),
            format_args!("started"),
        );
        for i in 0..10_000 {
            log.record(
                2,
                0,
                EventKind::Fault,
                Some((2, "storm")),
                format_args!("fault {i}"),
            );
        }
        log.record(
            0,
            0,
            EventKind::State,
            Some((1, "quiet")),
            format_args!("stopped"),
        );

        let got = all(&log, 0);

        let quiet: Vec<&str> = got
            .events
            .iter()
            .filter(|e| e.partition.as_ref().is_some_and(|p| p.1 == "quiet"))
            .map(|e| e.message.as_str())
            .collect();
        assert_eq!(quiet, ["running", "stopped"]);
        assert!(got.events.iter().any(|e| e.message == "started"));
        // What the storm can push out: its own older faults only.
        assert_eq!(got.dropped, 10_000 - EVENTS_PER_CPU as u64);
        assert_eq!(got.events.len(), EVENTS_PER_CPU + 3);
    }

    #[test]
    fn a_read_fits_the_buffer_and_continues_where_it_stopped() {
        let log = EventLog::new(2, stat());
        for i in 0..40 {
            log.record(
                i % 2,
                0,
                EventKind::Config,
                Some((0, "a")),
                format_args!("{:>100}", i),
            );
        }
        for max in [0usize, 1, 50, 300, 1000, 4096] {
            let mut from = 0;
            let mut seen = Vec::new();
            loop {
                let got = log.read(from, max, |_| None);
                let encoded = pinfold_abi::reply_len(&got.events);
                assert!(encoded <= max.max(1), "{encoded} > {max}");
                assert_eq!(got.dropped, 0);
                if got.events.is_empty() {
                    break;
                }
                seen.extend(got.events.iter().map(|e| e.seq));
                from = got.next;
            }
            if max >= 300 {
                assert_eq!(seen, (0..40).collect::<Vec<_>>(), "max {max}");
            } else {
                assert!(
                    seen.is_empty(),
                    "an event of ~120 bytes fits no {max}-byte buffer"
                );
            }
        }
    }

    #[test]
    fn long_messages_and_names_are_cut_at_a_character() {
        let log = EventLog::new(1, stat());
        let long = "é".repeat(200);
        log.record(
            0,
            0,
            EventKind::Fault,
            Some((0, "ñññññññññ")),
            format_args!("{long}"),
        );

        let got = all(&log, 0);

        let e = &got.events[0];
        assert_eq!(e.message, "é".repeat(MESSAGE_MAX / 2));
        assert_eq!(e.partition.as_ref().unwrap().1, "ñ".repeat(NAME_MAX / 2));
    }

    #[test]
    fn times_print_as_rfc3339_or_seconds_since_boot() {
        let t = When {
            unix_ms: Some(1_796_132_700_123),
            uptime_s: 5,
        };
        assert_eq!(format!("{t}"), "2026-12-01T13:45:00Z");
        let leap = When {
            unix_ms: Some(1_709_164_800_000),
            uptime_s: 0,
        };
        assert_eq!(format!("{leap}"), "2024-02-29T00:00:00Z");
        let none = When {
            unix_ms: None,
            uptime_s: 42,
        };
        assert_eq!(format!("{none}"), "+42s");
    }
}
