//! The management server's HTTP/1.1 layer, without I/O so that it is
//! tested (and fuzzed) on the host: strict request-head parsing
//! ([`parse_request`]), one connection's request cycle and its timeouts
//! ([`Conn`]), the connection cap's policy ([`admit`]), and the bytes of
//! a response head ([`response_head`], [`error_response`]). The server
//! that applies them over Hermit's sockets is manager/app's
//! (docs/MANAGER.md, "The HTTP server").
#![forbid(unsafe_code)]

pub mod conn;
pub mod parse;
#[cfg(test)]
mod tests;

pub use conn::{admit, Admit, Conn, Expiry, Step, Timeouts};
pub use parse::{parse_request, parse_request_with, Head, HttpError, Limits, Parsed, Version};

/// The reason phrase of `status`.
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        202 => "Accepted",
        204 => "No Content",
        206 => "Partial Content",
        304 => "Not Modified",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        417 => "Expectation Failed",
        422 => "Unprocessable Content",
        428 => "Precondition Required",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        _ => "Status",
    }
}

/// A response head: status line, `headers` as given (a name or value with
/// CR or LF is left out), Content-Length, Connection, the blank line.
pub fn response_head(
    status: u16,
    headers: &[(&str, &str)],
    content_length: u64,
    keep_alive: bool,
) -> Vec<u8> {
    let mut out = format!("HTTP/1.1 {status} {}\r\n", reason(status));
    for (name, value) in headers {
        let clean = |s: &str| !s.contains(['\r', '\n']);
        if clean(name) && clean(value) {
            out.push_str(&format!("{name}: {value}\r\n"));
        }
    }
    out.push_str(&format!("Content-Length: {content_length}\r\n"));
    out.push_str(if keep_alive {
        "Connection: keep-alive\r\n\r\n"
    } else {
        "Connection: close\r\n\r\n"
    });
    out.into_bytes()
}

/// The error code the REST API's error bodies use for `status`.
pub fn error_code(status: u16) -> &'static str {
    match status {
        400 => "bad_request",
        408 => "request_timeout",
        411 => "length_required",
        413 => "too_large",
        417 => "expectation_failed",
        431 => "header_too_large",
        503 => "busy",
        505 => "version_not_supported",
        _ => "bad_request",
    }
}

/// A whole refusal: the REST API's JSON error body (`error`, `detail`)
/// with `Connection: close` (the server closes after it).
pub fn error_response(err: &HttpError, date: Option<&str>) -> Vec<u8> {
    let body = format!(
        "{{\"error\":\"{}\",\"detail\":\"{}\"}}",
        error_code(err.status),
        json_escape(&err.reason)
    );
    let mut headers = vec![("Content-Type", "application/json")];
    if let Some(d) = date {
        headers.push(("Date", d));
    }
    let mut out = response_head(err.status, &headers, body.len() as u64, false);
    out.extend_from_slice(body.as_bytes());
    out
}

fn json_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out
}
