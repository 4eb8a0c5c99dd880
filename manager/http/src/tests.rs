use std::time::{Duration, Instant};

use super::*;

fn err(raw: &[u8]) -> HttpError {
    match parse_request(raw) {
        Err(e) => e,
        other => panic!("{:?} parsed as {other:?}", String::from_utf8_lossy(raw)),
    }
}

fn ok(raw: &[u8]) -> (Head, usize) {
    match parse_request(raw) {
        Ok(Parsed::Complete(h, n)) => (h, n),
        other => panic!("{:?} gave {other:?}", String::from_utf8_lossy(raw)),
    }
}

#[test]
fn a_plain_get_parses() {
    let raw = b"GET /api/v1/partitions?x=1 HTTP/1.1\r\nHost: a\r\nAccept: */*\r\n\r\n";
    let (h, n) = ok(raw);
    assert_eq!(n, raw.len());
    assert_eq!(h.method, "GET");
    assert_eq!(h.target, "/api/v1/partitions?x=1");
    assert_eq!(h.path(), "/api/v1/partitions");
    assert_eq!(h.version, Version::Http11);
    assert_eq!(h.header("accept"), Some("*/*"));
    assert_eq!(h.content_length, 0);
    assert!(h.keep_alive);
}

#[test]
fn incomplete_until_the_blank_line() {
    let raw = b"GET / HTTP/1.1\r\nHost: a\r\n\r\n";
    for cut in 0..raw.len() {
        assert_eq!(parse_request(&raw[..cut]), Ok(Parsed::Incomplete), "{cut}");
    }
    ok(raw);
}

#[test]
fn leading_empty_lines_are_skipped() {
    let (h, n) = ok(b"\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\nrest");
    assert_eq!(h.target, "/");
    assert_eq!(n, 4 + 27);
}

/// Found by the `http_request` fuzz target: a client sending only CRLFs
/// was `Incomplete` forever, its buffer growing without bound until the
/// read timeout.
#[test]
fn leading_empty_lines_count_toward_the_head_limit() {
    let limits = Limits {
        max_head: 64,
        max_headers: 3,
    };
    let flood = "\r\n".repeat(40);
    assert_eq!(
        parse_request_with(flood.as_bytes(), &limits)
            .unwrap_err()
            .status,
        431
    );
    let late = format!("{}GET / HTTP/1.1\r\nHost: a\r\n\r\n", "\r\n".repeat(25));
    assert_eq!(
        parse_request_with(late.as_bytes(), &limits)
            .unwrap_err()
            .status,
        431
    );
    // A head of exactly the limit parses; one byte more is refused.
    let exact = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(64 - 27));
    assert_eq!(exact.len(), 64);
    assert!(matches!(
        parse_request_with(exact.as_bytes(), &limits),
        Ok(Parsed::Complete(_, 64))
    ));
    let over = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(64 - 26));
    assert_eq!(
        parse_request_with(over.as_bytes(), &limits)
            .unwrap_err()
            .status,
        431
    );
}

#[test]
fn bare_lf_is_400_at_once() {
    let e = err(b"GET / HTTP/1.1\nHost: a\n\n");
    assert_eq!(e.status, 400);
    assert!(e.reason.contains("bare LF"), "{e}");
    // Even before the head could be complete.
    assert_eq!(err(b"GET / HTTP/1.1\n").status, 400);
    assert_eq!(err(b"GET / HTTP/1.1\r\nHost: a\n\r\n").status, 400);
}

#[test]
fn bare_cr_is_400() {
    assert_eq!(err(b"GET / HTTP/1.1\rHost: a\r\n\r\n").status, 400);
}

#[test]
fn http2_line_and_preface_are_505() {
    let e = err(b"GET / HTTP/2.0\r\nHost: a\r\n\r\n");
    assert_eq!(e.status, 505);
    assert!(e.reason.contains("HTTP/2.0"), "{e}");
    // The preface: answered on its first line, before the rest comes.
    let e = err(b"PRI * HTTP/2.0\r\n");
    assert_eq!(e.status, 505);
    assert_eq!(err(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").status, 505);
    assert_eq!(err(b"GET / HTTP/3.0\r\n\r\n").status, 505);
}

#[test]
fn malformed_versions_are_400() {
    for raw in [
        &b"GET / HTTP/1\r\nHost: a\r\n\r\n"[..],
        b"GET / http/1.1\r\nHost: a\r\n\r\n",
        b"GET / FOO\r\n\r\n",
        b"GET /\r\n\r\n",
    ] {
        assert_eq!(err(raw).status, 400, "{:?}", String::from_utf8_lossy(raw));
    }
}

#[test]
fn http10_defaults_to_close_and_needs_no_host() {
    let (h, _) = ok(b"GET / HTTP/1.0\r\n\r\n");
    assert!(!h.keep_alive);
    let (h, _) = ok(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    assert!(h.keep_alive);
    let (h, _) = ok(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: foo, Close\r\n\r\n");
    assert!(!h.keep_alive);
}

#[test]
fn request_line_shape_is_strict() {
    for raw in [
        &b"GET  / HTTP/1.1\r\nHost: a\r\n\r\n"[..],
        b"GET / HTTP/1.1 \r\nHost: a\r\n\r\n",
        b" GET / HTTP/1.1\r\nHost: a\r\n\r\n",
        b"G(T / HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET api HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET /\x7f HTTP/1.1\r\nHost: a\r\n\r\n",
    ] {
        assert_eq!(err(raw).status, 400, "{:?}", String::from_utf8_lossy(raw));
    }
}

#[test]
fn absolute_form_is_reduced_to_its_path() {
    let (h, _) = ok(b"GET http://host:8080/api/v1/host HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(h.target, "/api/v1/host");
}

#[test]
fn non_utf8_is_400_with_a_reason() {
    let e = err(b"GET /\xff HTTP/1.1\r\nHost: a\r\n\r\n");
    assert_eq!(e.status, 400);
    assert!(e.reason.contains("ASCII"), "{e}");
    let e = err(b"GET / HTTP/1.1\r\nHost: a\r\nX-A: \xc3\x28\r\n\r\n");
    assert_eq!(e.status, 400);
    assert!(
        e.reason.contains("X-A") && e.reason.contains("UTF-8"),
        "{e}"
    );
    // UTF-8 in a value is fine.
    let (h, _) = ok("GET / HTTP/1.1\r\nHost: a\r\nX-A: grüß\r\n\r\n".as_bytes());
    assert_eq!(h.header("x-a"), Some("grüß"));
}

#[test]
fn header_names_and_folding() {
    for raw in [
        &b"GET / HTTP/1.1\r\nHost : a\r\n\r\n"[..],
        b"GET / HTTP/1.1\r\nHost: a\r\nNo colon\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\n folded\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\n: empty\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nX: a\x01b\r\n\r\n",
    ] {
        assert_eq!(err(raw).status, 400, "{:?}", String::from_utf8_lossy(raw));
    }
}

#[test]
fn host_is_required_once_in_http11() {
    assert!(err(b"GET / HTTP/1.1\r\n\r\n").reason.contains("Host"));
    assert_eq!(
        err(b"GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n").status,
        400
    );
}

#[test]
fn content_length_rules() {
    let (h, _) = ok(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\n\r\n");
    assert_eq!(h.content_length, 12);
    // The same value twice is one value.
    let (h, _) =
        ok(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-length: 3\r\n\r\n");
    assert_eq!(h.content_length, 3);
    let e = err(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n");
    assert_eq!(e.status, 400);
    assert!(e.reason.contains("two different Content-Length"), "{e}");
    assert_eq!(
        err(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3, 4\r\n\r\n").status,
        400
    );
    for bad in ["-1", "+3", "0x10", "", "1 2", "3.0"] {
        let raw = format!("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: {bad}\r\n\r\n");
        assert_eq!(err(raw.as_bytes()).status, 400, "{bad:?}");
    }
    // i64::MAX is the largest accepted; one more is refused, and so is
    // anything past u64.
    let max = format!(
        "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n",
        i64::MAX
    );
    assert_eq!(ok(max.as_bytes()).0.content_length, i64::MAX as u64);
    for big in [
        (i64::MAX as u64 + 1).to_string(),
        u64::MAX.to_string(),
        "99999999999999999999999".to_string(),
    ] {
        let raw = format!("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: {big}\r\n\r\n");
        let e = err(raw.as_bytes());
        assert_eq!(e.status, 400, "{big}");
        assert!(e.reason.contains("i64::MAX"), "{e}");
    }
}

#[test]
fn transfer_encoding_is_411() {
    let e = err(b"POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n");
    assert_eq!(e.status, 411);
    assert!(e.reason.contains("Content-Length"), "{e}");
    assert_eq!(
        err(b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: gzip\r\n\r\n")
            .status,
        411
    );
}

#[test]
fn expect() {
    let (h, _) =
        ok(b"POST / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n");
    assert!(h.expect_continue);
    assert_eq!(
        err(b"POST / HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\n\r\n").status,
        417
    );
}

#[test]
fn head_size_and_field_count_limits_are_431() {
    let limits = Limits {
        max_head: 64,
        max_headers: 3,
    };
    let long = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(80));
    assert_eq!(
        parse_request_with(long.as_bytes(), &limits)
            .unwrap_err()
            .status,
        431
    );
    // Without the blank line ever coming, too.
    let endless = format!("GET / HTTP/1.1\r\nX: {}", "a".repeat(80));
    assert_eq!(
        parse_request_with(endless.as_bytes(), &limits)
            .unwrap_err()
            .status,
        431
    );
    let many = "GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n";
    assert_eq!(
        parse_request_with(many.as_bytes(), &limits)
            .unwrap_err()
            .status,
        431
    );
    let three = "GET / HTTP/1.1\r\nHost: a\r\nA: 1\r\nB: 2\r\n\r\n";
    assert!(matches!(
        parse_request_with(three.as_bytes(), &limits),
        Ok(Parsed::Complete(..))
    ));
    // The default: 16 KiB.
    let big = format!(
        "GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n\r\n",
        "a".repeat(17 * 1024)
    );
    assert_eq!(err(big.as_bytes()).status, 431);
}

#[test]
fn parse_never_panics_on_prefixes_of_odd_input() {
    let inputs: [&[u8]; 6] = [
        b"\r",
        b"\r\n\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello",
        b"\xff\xfe\r\n\r\n",
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        b"GET / HTTP/1.1\r\n\r\r\n",
    ];
    for raw in inputs {
        for cut in 0..=raw.len() {
            let _ = parse_request(&raw[..cut]);
        }
    }
}

// --- Conn ---------------------------------------------------------------

fn never(_: &Head) -> bool {
    false
}

fn uploads(h: &Head) -> bool {
    h.method == "POST" && h.path() == "/up"
}

#[test]
fn conn_gives_whole_requests_and_keeps_pipelined_bytes() {
    let t0 = Instant::now();
    let mut c = Conn::new(t0);
    assert!(c.is_idle());
    let step = c.received(
        b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhel",
        t0,
        &Limits::DEFAULT,
        100,
        &never,
    );
    assert_eq!(step, Step::NeedMore);
    assert!(!c.is_idle());
    let step = c.received(
        b"loGET / HTTP/1.1\r\nHost: a\r\n\r\n",
        t0,
        &Limits::DEFAULT,
        100,
        &never,
    );
    let Step::Request { head, body } = step else {
        panic!("{step:?}")
    };
    assert_eq!(
        (head.target.as_str(), body.as_slice()),
        ("/x", &b"hello"[..])
    );
    assert!(c.is_working());
    // Not read again while the handler has it.
    assert_eq!(c.step(&Limits::DEFAULT, 100, &never), Step::NeedMore);
    c.finished(t0);
    let Step::Request { head, .. } = c.step(&Limits::DEFAULT, 100, &never) else {
        panic!()
    };
    assert_eq!(head.target, "/");
    c.finished(t0);
    assert!(c.is_idle());
    assert_eq!(c.requests, 2);
}

#[test]
fn conn_refuses_a_body_over_the_limit_unless_streamed() {
    let t0 = Instant::now();
    let mut c = Conn::new(t0);
    let raw = b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 101\r\n\r\n";
    let Step::Refuse(e) = c.received(raw, t0, &Limits::DEFAULT, 100, &uploads) else {
        panic!()
    };
    assert_eq!(e.status, 413);
    let mut c = Conn::new(t0);
    let raw = b"POST /up HTTP/1.1\r\nHost: a\r\nContent-Length: 1000\r\n\r\nabc";
    let step = c.received(raw, t0, &Limits::DEFAULT, 100, &uploads);
    assert_eq!(
        step,
        Step::Stream {
            head: ok(&raw[..raw.len() - 3]).0,
            already: b"abc".to_vec()
        }
    );
}

#[test]
fn conn_says_continue_once() {
    let t0 = Instant::now();
    let mut c = Conn::new(t0);
    let raw = b"POST /x HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n";
    assert_eq!(
        c.received(raw, t0, &Limits::DEFAULT, 100, &never),
        Step::SendContinue
    );
    assert_eq!(
        c.received(b"a", t0, &Limits::DEFAULT, 100, &never),
        Step::NeedMore
    );
    assert!(matches!(
        c.received(b"b", t0, &Limits::DEFAULT, 100, &never),
        Step::Request { .. }
    ));
}

#[test]
fn conn_timeouts() {
    let t = Timeouts {
        idle: Duration::from_secs(30),
        read: Duration::from_secs(10),
    };
    let t0 = Instant::now();
    let s = Duration::from_secs;
    let mut c = Conn::new(t0);
    assert_eq!(c.expired(t0 + s(29), &t), None);
    assert_eq!(c.expired(t0 + s(30), &t), Some(Expiry::Idle));
    // A request begun at 20 s has until 30 s.
    let raw = b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabc";
    assert_eq!(
        c.received(raw, t0 + s(20), &Limits::DEFAULT, 100, &never),
        Step::NeedMore
    );
    assert_eq!(c.expired(t0 + s(29), &t), None);
    assert_eq!(c.expired(t0 + s(30), &t), Some(Expiry::Read));
    let e = c.timeout_error(&t);
    assert_eq!(e.status, 408);
    assert!(e.reason.contains("3 of 10"), "{e}");
    // Slow drips do not extend it.
    let _ = c.received(b"d", t0 + s(29), &Limits::DEFAULT, 100, &never);
    assert_eq!(c.expired(t0 + s(30), &t), Some(Expiry::Read));
    // A head that never ends is a read timeout too.
    let mut c = Conn::new(t0);
    let _ = c.received(b"GET / HT", t0, &Limits::DEFAULT, 100, &never);
    assert_eq!(c.expired(t0 + s(10), &t), Some(Expiry::Read));
    assert!(c.timeout_error(&t).reason.contains("head"));
    // While the handler has it, no timeout applies; after, the idle one.
    let mut c = Conn::new(t0);
    let _ = c.received(
        b"GET / HTTP/1.1\r\nHost: a\r\n\r\n",
        t0,
        &Limits::DEFAULT,
        100,
        &never,
    );
    assert_eq!(c.expired(t0 + s(1000), &t), None);
    c.finished(t0 + s(1000));
    assert_eq!(c.expired(t0 + s(1029), &t), None);
    assert_eq!(c.expired(t0 + s(1030), &t), Some(Expiry::Idle));
}

#[test]
fn a_tls_handshake_counts_against_the_read_timeout() {
    let t = Timeouts {
        idle: Duration::from_secs(30),
        read: Duration::from_secs(10),
    };
    let t0 = Instant::now();
    let s = Duration::from_secs;
    // A handshake begun at 5 s and never finished: timed out at 15 s, like
    // a request head that never ends (not at the idle 30 s).
    let mut c = Conn::new(t0);
    c.transport_started(t0 + s(5));
    assert!(!c.is_idle());
    assert_eq!(c.expired(t0 + s(14), &t), None);
    assert_eq!(c.expired(t0 + s(15), &t), Some(Expiry::Read));
    // More handshake bytes do not extend it.
    c.transport_started(t0 + s(14));
    assert_eq!(c.expired(t0 + s(15), &t), Some(Expiry::Read));
    // A handshake over at 8 s with no request: idle again from then.
    let mut c = Conn::new(t0);
    c.transport_started(t0 + s(5));
    c.transport_ready(t0 + s(8));
    assert!(c.is_idle());
    assert_eq!(c.expired(t0 + s(37), &t), None);
    assert_eq!(c.expired(t0 + s(38), &t), Some(Expiry::Idle));
    // The request's first bytes in the same round as the handshake's last:
    // its clock started with the handshake.
    let mut c = Conn::new(t0);
    c.transport_started(t0 + s(5));
    let _ = c.received(b"GET / HT", t0 + s(6), &Limits::DEFAULT, 100, &never);
    c.transport_ready(t0 + s(6));
    assert_eq!(c.expired(t0 + s(15), &t), Some(Expiry::Read));
}

#[test]
fn admit_evicts_the_oldest_idle_then_refuses() {
    let t0 = Instant::now();
    let s = Duration::from_secs;
    let conns = [(1, true, t0 + s(5)), (2, false, t0), (3, true, t0 + s(2))];
    assert_eq!(admit(2, 3, conns.iter().copied()), Admit::Accept);
    assert_eq!(admit(3, 3, conns.iter().copied()), Admit::Evict(3));
    let busy = [(1, false, t0), (2, false, t0)];
    assert_eq!(admit(2, 2, busy.iter().copied()), Admit::<i32>::Refuse);
}

#[test]
fn responses() {
    let head = response_head(
        405,
        &[("Allow", "GET, HEAD"), ("X", "a\r\nInjected: 1")],
        7,
        true,
    );
    let text = String::from_utf8(head).unwrap();
    assert_eq!(
        text,
        "HTTP/1.1 405 Method Not Allowed\r\nAllow: GET, HEAD\r\nContent-Length: 7\r\nConnection: keep-alive\r\n\r\n"
    );
    let e = error_response(&HttpError::new(400, "a \"bare\" LF\n"), Some("D"));
    let text = String::from_utf8(e).unwrap();
    assert!(text.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{text}");
    assert!(text.contains("Connection: close\r\n"));
    assert!(text.contains("Date: D\r\n"));
    let body = text.split("\r\n\r\n").nth(1).unwrap();
    assert_eq!(
        body,
        r#"{"error":"bad_request","detail":"a \"bare\" LF\u000a"}"#
    );
}
