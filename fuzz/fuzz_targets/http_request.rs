//! The manager's HTTP/1.1 layer (`pinfold-manager-http`): `parse_request`
//! on arbitrary bytes, then the same bytes through one connection's
//! request cycle (`Conn`) in fuzzed chunks, pipelined requests handed out
//! and finished in turn. Never panics; every input ends as a complete
//! request, a refusal with a status the server answers (and a whole error
//! response), or "need more bytes" that is bounded (never more than the
//! head limit plus the body limit held) and ends in a 408 at the read
//! timeout.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use pinfold_manager_http::{
    error_response, parse_request, parse_request_with, Conn, Expiry, Limits, Parsed, Step, Timeouts,
};

/// The statuses the HTTP layer itself answers.
const STATUSES: [u16; 8] = [400, 408, 411, 413, 417, 431, 503, 505];
/// A small body limit, so the fuzzer reaches it.
const MAX_BODY: u64 = 256;
const LIMITS: Limits = Limits {
    max_head: 1024,
    max_headers: 8,
};

fn check_refusal(status: u16, reason: &str) {
    assert!(STATUSES.contains(&status), "status {status} ({reason})");
    assert!(!reason.is_empty(), "a {status} without a reason");
    let resp = error_response(
        &pinfold_manager_http::HttpError::new(status, reason),
        Some("x"),
    );
    let text = String::from_utf8(resp).expect("an error response is UTF-8");
    let (head, body) = text.split_once("\r\n\r\n").expect("a whole head");
    assert!(head.starts_with(&format!("HTTP/1.1 {status} ")));
    assert!(head.contains(&format!("Content-Length: {}", body.len())));
    serde_json::from_str::<serde_json::Value>(body).expect("the error body is JSON");
}

fuzz_target!(|data: &[u8]| {
    // The first byte sizes the chunks the connection receives them in.
    let Some((&chunk, bytes)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(chunk % 64) + 1;

    for limits in [Limits::DEFAULT, LIMITS] {
        match parse_request_with(bytes, &limits) {
            Ok(Parsed::Complete(head, n)) => {
                assert!(n <= bytes.len() && n <= limits.max_head, "{n}-byte head");
                assert!(head.target.starts_with('/'));
                assert!(head.headers.len() <= limits.max_headers);
                assert!(i64::try_from(head.content_length).is_ok());
            }
            Ok(Parsed::Incomplete) => assert!(
                bytes.len() < limits.max_head,
                "{} bytes and still incomplete (limit {})",
                bytes.len(),
                limits.max_head
            ),
            Err(e) => check_refusal(e.status, &e.reason),
        }
    }
    let _ = parse_request(bytes);

    let t0 = Instant::now();
    let timeouts = Timeouts::DEFAULT;
    let mut conn = Conn::new(t0);
    let streamed = |h: &pinfold_manager_http::Head| h.method == "PUT";
    let mut refused = false;
    let mut handed_out = 0u64;
    'feed: for (i, piece) in bytes.chunks(chunk).enumerate() {
        let now = t0 + Duration::from_millis(i as u64);
        let mut step = conn.received(piece, now, &LIMITS, MAX_BODY, &streamed);
        loop {
            match step {
                Step::NeedMore | Step::SendContinue => break,
                Step::Request { head, body } => {
                    assert_eq!(body.len() as u64, head.content_length);
                    assert!(body.len() as u64 <= MAX_BODY);
                    handed_out += 1;
                }
                Step::Stream { head, already } => {
                    assert!(already.len() as u64 <= head.content_length);
                    handed_out += 1;
                }
                Step::Refuse(e) => {
                    check_refusal(e.status, &e.reason);
                    refused = true;
                    break 'feed;
                }
            }
            assert!(conn.is_working());
            // A working connection reads nothing more until it is done.
            assert_eq!(
                conn.received(b"", now, &LIMITS, MAX_BODY, &streamed),
                Step::NeedMore
            );
            conn.finished(now);
            step = conn.step(&LIMITS, MAX_BODY, &streamed);
        }
        // Bounded: what it waits on is at most a head and a body, plus the
        // chunk that came last.
        assert!(
            conn.buffered() <= LIMITS.max_head + MAX_BODY as usize + chunk,
            "{} bytes held while waiting",
            conn.buffered()
        );
    }
    assert_eq!(conn.requests, handed_out);
    if !refused {
        // Whatever is left is answered at the read timeout (408) or, with
        // nothing left, closed at the idle one.
        let late = t0 + Duration::from_secs(3600);
        match conn.expired(late, &timeouts) {
            Some(Expiry::Read) => {
                let e = conn.timeout_error(&timeouts);
                assert_eq!(e.status, 408);
                check_refusal(e.status, &e.reason);
            }
            Some(Expiry::Idle) => assert_eq!(conn.buffered(), 0),
            None => panic!("a connection that never times out"),
        }
    }
});
