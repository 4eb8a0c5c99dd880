//! A tiny HTTP/1.1 client over std's `TcpStream` for the boot tests that
//! talk to the manager: one request per connection, `Connection: close`.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

/// Why a request produced no reply.
#[derive(Debug)]
pub enum HttpError {
    /// Resolving, connecting, sending or receiving failed (including a
    /// timeout).
    Io(std::io::Error),
    /// The bytes that came back are not an HTTP/1.x response we can read.
    BadResponse(String),
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Io(err) => write!(f, "{err}"),
            Self::BadResponse(why) => write!(f, "bad HTTP response: {why}"),
        }
    }
}

impl From<std::io::Error> for HttpError {
    fn from(err: std::io::Error) -> Self {
        Self::Io(err)
    }
}

/// A whole response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    /// The body as text (the API only sends JSON and plain text).
    pub body: String,
}

/// One request: method, path and what goes with it.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub method: &'a str,
    /// Path and query, e.g. `/api/v1/partitions/beta/console?offset=10`.
    pub path: &'a str,
    /// Sent as `Authorization: Bearer <token>`.
    pub token: Option<&'a str>,
    pub body: Option<&'a str>,
}

impl<'a> Request<'a> {
    pub fn get(path: &'a str) -> Self {
        Self {
            method: "GET",
            path,
            token: None,
            body: None,
        }
    }

    pub fn post(path: &'a str, token: Option<&'a str>, body: Option<&'a str>) -> Self {
        Self {
            method: "POST",
            path,
            token,
            body,
        }
    }
}

/// Sends `request` to `authority` ("host:port") and reads the reply; the
/// connection, each read and each write give up after `timeout`.
pub fn send(authority: &str, request: &Request<'_>, timeout: Duration) -> Result<Reply, HttpError> {
    let addr = authority.to_socket_addrs()?.next().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{authority} resolves to no address"),
        )
    })?;
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.write_all(&encode(authority, request))?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    parse(&raw)
}

/// The request's bytes on the wire.
pub fn encode(authority: &str, request: &Request<'_>) -> Vec<u8> {
    let mut head = format!(
        "{} {} HTTP/1.1\r\nHost: {authority}\r\nConnection: close\r\nAccept: */*\r\n",
        request.method, request.path
    );
    if let Some(token) = request.token {
        head.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    let body = request.body.unwrap_or("");
    if request.body.is_some() {
        head.push_str("Content-Type: application/json\r\n");
    }
    // A POST always says how long its body is, even when empty: some
    // servers refuse a POST without Content-Length (411).
    if request.body.is_some() || request.method == "POST" {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    let mut bytes = head.into_bytes();
    bytes.extend_from_slice(body.as_bytes());
    bytes
}

/// Reads a complete response: status line, headers, and a body framed by
/// `Content-Length`, by chunked transfer coding, or by the end of the
/// connection.
pub fn parse(raw: &[u8]) -> Result<Reply, HttpError> {
    let bad = |why: &str| HttpError::BadResponse(why.to_string());
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no end of headers"))?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let rest = &raw[split + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    let mut words = status_line.split_whitespace();
    let version = words.next().unwrap_or("");
    if !version.starts_with("HTTP/1.") {
        return Err(bad(&format!("status line `{status_line}`")));
    }
    let status: u16 = words
        .next()
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| bad(&format!("status line `{status_line}`")))?;
    let mut length = None;
    let mut chunked = false;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = Some(
                value
                    .parse::<usize>()
                    .map_err(|_| bad(&format!("Content-Length `{value}`")))?,
            );
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.to_ascii_lowercase().contains("chunked");
        }
    }
    let body = if chunked {
        dechunk(rest)?
    } else if let Some(length) = length {
        rest.get(..length)
            .ok_or_else(|| bad(&format!("body shorter than Content-Length {length}")))?
            .to_vec()
    } else {
        rest.to_vec()
    };
    Ok(Reply {
        status,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

/// Undoes chunked transfer coding (RFC 9112 section 7.1); trailers are
/// ignored.
fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, HttpError> {
    let bad = |why: &str| HttpError::BadResponse(why.to_string());
    let mut body = Vec::new();
    loop {
        let end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| bad("chunk size line has no end"))?;
        let line = String::from_utf8_lossy(&rest[..end]);
        let size_text = line.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| bad(&format!("chunk size `{size_text}`")))?;
        rest = &rest[end + 2..];
        if size == 0 {
            return Ok(body);
        }
        let chunk = rest
            .get(..size)
            .ok_or_else(|| bad("chunk shorter than its size"))?;
        body.extend_from_slice(chunk);
        rest = rest.get(size + 2..).unwrap_or(&[]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    #[test]
    fn post_with_token_and_body_sends_bearer_and_length() {
        let request = Request::post("/api/v1/x", Some("t0k"), Some("{}"));

        let text = String::from_utf8(encode("127.0.0.1:8080", &request)).expect("utf8");

        assert!(text.starts_with("POST /api/v1/x HTTP/1.1\r\n"), "{text}");
        assert!(text.contains("\r\nAuthorization: Bearer t0k\r\n"), "{text}");
        assert!(text.contains("\r\nContent-Length: 2\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\n{}"), "{text}");
    }

    #[test]
    fn get_sends_no_authorization_and_no_length() {
        let text = String::from_utf8(encode("h:1", &Request::get("/a"))).expect("utf8");

        assert!(!text.contains("Authorization"), "{text}");
        assert!(!text.contains("Content-Length"), "{text}");
    }

    #[test]
    fn content_length_cuts_the_body() {
        let reply = parse(b"HTTP/1.1 202 Accepted\r\nContent-Length: 2\r\n\r\n{}junk");

        assert_eq!(
            reply.ok(),
            Some(Reply {
                status: 202,
                body: "{}".into()
            })
        );
    }

    #[test]
    fn chunked_body_is_reassembled() {
        let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=1\r\nde\r\n0\r\n\r\n";

        assert_eq!(parse(raw).map(|r| r.body).ok().as_deref(), Some("abcde"));
    }

    #[test]
    fn body_without_framing_runs_to_the_end() {
        let reply = parse(b"HTTP/1.0 404 Not Found\r\n\r\nnope");

        assert_eq!(
            reply.map(|r| (r.status, r.body)).ok(),
            Some((404, "nope".into()))
        );
    }

    #[test]
    fn garbage_is_a_bad_response() {
        assert!(matches!(
            parse(b"SSH-2.0-x\r\n\r\n"),
            Err(HttpError::BadResponse(_))
        ));
        assert!(matches!(
            parse(b"HTTP/1.1 200 OK\r\n"),
            Err(HttpError::BadResponse(_))
        ));
    }

    #[test]
    fn send_round_trips_with_a_local_server() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let authority = listener.local_addr().expect("addr").to_string();
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().expect("accept");
            let mut seen = Vec::new();
            let mut buf = [0u8; 1024];
            while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = conn.read(&mut buf).expect("read");
                seen.extend_from_slice(&buf[..n]);
            }
            conn.write_all(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 5\r\n\r\nnope!")
                .expect("write");
            String::from_utf8_lossy(&seen).into_owned()
        });

        let reply = send(&authority, &Request::get("/x"), Duration::from_secs(5));

        assert_eq!(
            reply.map(|r| (r.status, r.body)).ok(),
            Some((401, "nope!".into()))
        );
        assert!(server
            .join()
            .expect("join")
            .starts_with("GET /x HTTP/1.1\r\n"));
    }
}
