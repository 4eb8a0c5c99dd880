//! Strict HTTP/1.1 request heads (RFC 9112): [`parse_request`] takes the
//! bytes received so far and says `Complete` (the head and where the body
//! starts), `Incomplete` (wait for more), or an [`HttpError`] with the
//! status to answer and why. Never a silent drop: every refusal has a
//! status and a reason.
//!
//! What is refused: a line ended by a bare LF or with a bare CR (400), a
//! request line that is not `METHOD SP origin-form SP HTTP/x.y` in ASCII
//! (400), a version other than 1.0 and 1.1 (505, the HTTP/2 preface
//! included), a header block over [`Limits::max_head`] bytes or with more
//! than [`Limits::max_headers`] fields (431), a header name that is not a
//! token, whitespace before its colon or a folded line (400), a value that
//! is not UTF-8 (400), a Content-Length that is not digits, above
//! `i64::MAX`, or given twice with different values (400), any
//! Transfer-Encoding (411: send Content-Length), an HTTP/1.1 request
//! without exactly one Host (400), an Expect other than `100-continue`
//! (417).

use std::fmt;

/// The size limits of a request head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most bytes of request line + header fields + the blank line.
    pub max_head: usize,
    /// Most header fields.
    pub max_headers: usize,
}

impl Limits {
    /// 16 KiB and 64 fields: far above what browsers, curl and hvctl send.
    pub const DEFAULT: Limits = Limits {
        max_head: 16 * 1024,
        max_headers: 64,
    };
}

/// HTTP/1.0 or HTTP/1.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    Http10,
    Http11,
}

impl Version {
    pub fn as_str(self) -> &'static str {
        match self {
            Version::Http10 => "HTTP/1.0",
            Version::Http11 => "HTTP/1.1",
        }
    }
}

/// A request head that parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    pub method: String,
    /// The origin-form target: path and optional `?query` (an absolute-form
    /// target is reduced to it).
    pub target: String,
    pub version: Version,
    /// Field names as sent; values without surrounding whitespace.
    pub headers: Vec<(String, String)>,
    /// Content-Length, 0 when absent.
    pub content_length: u64,
    /// Whether the connection stays open after the response (HTTP/1.1
    /// unless `Connection: close`; HTTP/1.0 only with `keep-alive`).
    pub keep_alive: bool,
    /// `Expect: 100-continue` was sent: answer `100 Continue` before
    /// reading the body.
    pub expect_continue: bool,
}

impl Head {
    /// The value of header `name` (case-insensitive), if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The path without the query.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }
}

/// What the bytes so far make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// The head, and how many bytes of the input it took (the body starts
    /// there).
    Complete(Head, usize),
    /// No complete head yet, nothing wrong so far.
    Incomplete,
}

/// A request refused: the status to answer and why (sent as the body's
/// `detail`). The connection is closed after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpError {
    pub status: u16,
    pub reason: String,
}

impl HttpError {
    pub fn new(status: u16, reason: impl Into<String>) -> Self {
        HttpError {
            status,
            reason: reason.into(),
        }
    }

    fn bad(reason: impl Into<String>) -> Self {
        HttpError::new(400, reason)
    }
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.status, self.reason)
    }
}

/// [`parse_request_with`] under [`Limits::DEFAULT`].
pub fn parse_request(buf: &[u8]) -> Result<Parsed, HttpError> {
    parse_request_with(buf, &Limits::DEFAULT)
}

/// Parses the request head at the start of `buf` (empty lines before it
/// are skipped, as RFC 9112 2.2 allows, and count toward
/// [`Limits::max_head`]).
pub fn parse_request_with(buf: &[u8], limits: &Limits) -> Result<Parsed, HttpError> {
    let mut start = 0;
    while buf[start..].starts_with(b"\r\n") {
        start += 2;
    }
    let mut lines = Vec::new();
    let mut line_start = start;
    let mut i = start;
    let end = loop {
        // Empty lines before the request line count too: a client
        // sending nothing but CRLFs is held to the same bound.
        if i >= limits.max_head {
            return Err(HttpError::new(
                431,
                format!("request head exceeds {} bytes", limits.max_head),
            ));
        }
        let Some(&byte) = buf.get(i) else {
            return Ok(Parsed::Incomplete);
        };
        match byte {
            b'\n' => {
                return Err(HttpError::bad(
                    "a line ends in a bare LF; lines end in CRLF",
                ))
            }
            b'\r' => match buf.get(i + 1) {
                None => return Ok(Parsed::Incomplete),
                Some(b'\n') => {
                    let line = &buf[line_start..i];
                    i += 2;
                    line_start = i;
                    if line.is_empty() {
                        if i > limits.max_head {
                            return Err(HttpError::new(
                                431,
                                format!("request head exceeds {} bytes", limits.max_head),
                            ));
                        }
                        break i;
                    }
                    if lines.is_empty() {
                        early_version_check(line)?;
                    }
                    lines.push(line);
                    if lines.len() > limits.max_headers + 1 {
                        return Err(HttpError::new(
                            431,
                            format!("more than {} header fields", limits.max_headers),
                        ));
                    }
                }
                Some(_) => return Err(HttpError::bad("a bare CR inside a line")),
            },
            _ => i += 1,
        }
    };
    let (request_line, fields) = lines
        .split_first()
        .ok_or_else(|| HttpError::bad("empty request"))?;
    let (method, target, version) = request_line_parts(request_line)?;
    let mut headers = Vec::with_capacity(fields.len());
    for field in fields {
        headers.push(header_field(field)?);
    }
    let head = finish(method, target, version, headers)?;
    Ok(Parsed::Complete(head, end))
}

/// A version we do not speak is 505 as soon as the request line shows it
/// (the HTTP/2 preface `PRI * HTTP/2.0` included), whatever else is wrong
/// with the request.
fn early_version_check(line: &[u8]) -> Result<(), HttpError> {
    let last = line.rsplit(|&b| b == b' ').next().unwrap_or(line);
    match last {
        b"HTTP/1.1" | b"HTTP/1.0" => Ok(()),
        [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
            if major.is_ascii_digit() && minor.is_ascii_digit() =>
        {
            Err(HttpError::new(
                505,
                format!(
                    "HTTP/{}.{} is not supported; this server speaks HTTP/1.1",
                    *major as char, *minor as char
                ),
            ))
        }
        _ => Ok(()),
    }
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn request_line_parts(line: &[u8]) -> Result<(String, String, Version), HttpError> {
    if !line.is_ascii() {
        return Err(HttpError::bad("the request line is not ASCII"));
    }
    // ASCII, so UTF-8.
    let text = std::str::from_utf8(line).map_err(|_| HttpError::bad("request line"))?;
    let mut parts = text.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(HttpError::bad(format!(
            "the request line must be METHOD SP target SP version, not {text:?}"
        )));
    };
    if method.is_empty() || !method.bytes().all(is_tchar) {
        return Err(HttpError::bad(format!("malformed method {method:?}")));
    }
    let version = match version {
        "HTTP/1.1" => Version::Http11,
        "HTTP/1.0" => Version::Http10,
        v => return Err(HttpError::bad(format!("malformed HTTP version {v:?}"))),
    };
    if target.is_empty() || !target.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(HttpError::bad(format!(
            "malformed request target {target:?}"
        )));
    }
    let target = if target.starts_with('/') {
        target.to_string()
    } else if let Some(rest) = target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("https://"))
    {
        // absolute-form: keep the path (RFC 9112 3.2.2).
        match rest.find('/') {
            Some(at) => rest[at..].to_string(),
            None => "/".to_string(),
        }
    } else {
        return Err(HttpError::bad(format!(
            "the request target must be a path starting with /, not {target:?}"
        )));
    };
    Ok((method.to_string(), target, version))
}

fn header_field(line: &[u8]) -> Result<(String, String), HttpError> {
    if line[0] == b' ' || line[0] == b'\t' {
        return Err(HttpError::bad(
            "a header line starts with whitespace (obsolete line folding)",
        ));
    }
    let colon = line
        .iter()
        .position(|&b| b == b':')
        .ok_or_else(|| HttpError::bad("a header line without a colon"))?;
    let name = &line[..colon];
    if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) {
        return Err(HttpError::bad(format!(
            "malformed header name {:?} (a token, no whitespace before the colon)",
            String::from_utf8_lossy(name)
        )));
    }
    // A token: ASCII.
    let name = String::from_utf8_lossy(name).into_owned();
    let value = std::str::from_utf8(&line[colon + 1..])
        .map_err(|_| HttpError::bad(format!("the value of header {name} is not UTF-8")))?;
    if value.chars().any(|c| c.is_control() && c != '\t') {
        return Err(HttpError::bad(format!(
            "the value of header {name} has a control character"
        )));
    }
    Ok((name, value.trim_matches([' ', '\t']).to_string()))
}

fn has_token(value: &str, token: &str) -> bool {
    value
        .split(',')
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

fn finish(
    method: String,
    target: String,
    version: Version,
    headers: Vec<(String, String)>,
) -> Result<Head, HttpError> {
    let mut content_length: Option<u64> = None;
    let mut hosts = 0;
    let mut close = false;
    let mut keep_alive_token = false;
    let mut expect_continue = false;
    for (name, value) in &headers {
        if name.eq_ignore_ascii_case("content-length") {
            for item in value.split(',') {
                let item = item.trim();
                if item.is_empty() || !item.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(HttpError::bad(format!(
                        "Content-Length must be a decimal number, not {value:?}"
                    )));
                }
                let n = item
                    .parse::<u64>()
                    .ok()
                    .filter(|&n| i64::try_from(n).is_ok())
                    .ok_or_else(|| {
                        HttpError::bad(format!(
                            "Content-Length {item} is above {} (i64::MAX)",
                            i64::MAX
                        ))
                    })?;
                match content_length {
                    Some(old) if old != n => {
                        return Err(HttpError::bad(format!(
                            "two different Content-Length values ({old} and {n})"
                        )))
                    }
                    _ => content_length = Some(n),
                }
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(HttpError::new(
                411,
                format!(
                    "Transfer-Encoding {value:?} is not supported; send the body with a Content-Length"
                ),
            ));
        } else if name.eq_ignore_ascii_case("host") {
            hosts += 1;
        } else if name.eq_ignore_ascii_case("connection") {
            close |= has_token(value, "close");
            keep_alive_token |= has_token(value, "keep-alive");
        } else if name.eq_ignore_ascii_case("expect") {
            if value.eq_ignore_ascii_case("100-continue") {
                expect_continue = true;
            } else {
                return Err(HttpError::new(
                    417,
                    format!("Expect {value:?} is not supported (only 100-continue)"),
                ));
            }
        }
    }
    if version == Version::Http11 && hosts != 1 {
        return Err(HttpError::bad(if hosts == 0 {
            "an HTTP/1.1 request needs a Host header".to_string()
        } else {
            format!("{hosts} Host headers; exactly one is allowed")
        }));
    }
    let keep_alive = match version {
        Version::Http11 => !close,
        Version::Http10 => keep_alive_token && !close,
    };
    Ok(Head {
        method,
        target,
        version,
        headers,
        content_length: content_length.unwrap_or(0),
        keep_alive,
        expect_continue: expect_continue && version == Version::Http11,
    })
}
