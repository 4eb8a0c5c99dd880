//! A minimal HTTP/1.1 client over `std::net::TcpStream`: one request per
//! connection, `http://` or `https://` (rustls, the server's certificate
//! pinned: `crate::tls`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use rustls::{ClientConnection, StreamOwned};

use crate::tls;

/// The token GETs carry when their caller gives none ([`set_default_token`]).
static DEFAULT_TOKEN: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// Every later GET without a token of its own sends `token` (hvctl sets
/// its `--token`/`$PINFOLD_TOKEN`: reads need a credential).
pub fn set_default_token(token: Option<String>) {
    *DEFAULT_TOKEN.lock().unwrap_or_else(|p| p.into_inner()) = token;
}

fn default_token() -> Option<String> {
    DEFAULT_TOKEN
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
}

/// Why a request produced no response.
#[derive(Debug)]
pub enum HttpError {
    /// The URL is not `http(s)://host[:port][/prefix]`.
    BadUrl(String),
    /// `https://` with no certificate pinned (`--fingerprint`/`--cacert`).
    NoPin,
    /// Connecting, sending or receiving failed.
    Io(std::io::Error),
    /// The server's reply is not HTTP/1.x as we understand it.
    BadResponse(String),
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HttpError::BadUrl(u) => {
                write!(f, "bad URL {u:?}: expected http(s)://HOST[:PORT]")
            }
            HttpError::NoPin => write!(
                f,
                "https:// needs the manager's certificate pinned: --fingerprint SHA256 (${}) or --cacert FILE (${}); the manager prints its fingerprint on its console",
                tls::FINGERPRINT_ENV,
                tls::CACERT_ENV
            ),
            HttpError::Io(e) => match pin_mismatch(e) {
                Some(why) => write!(f, "{why}"),
                None => write!(f, "{e}"),
            },
            HttpError::BadResponse(why) => write!(f, "bad HTTP response: {why}"),
        }
    }
}

/// The pinning verifier's own sentence when `e` is its refusal (rustls
/// would show it as a Debug dump).
fn pin_mismatch(e: &std::io::Error) -> Option<String> {
    match e.get_ref()?.downcast_ref::<rustls::Error>()? {
        rustls::Error::InvalidCertificate(rustls::CertificateError::Other(other)) => {
            Some(other.0.to_string())
        }
        _ => None,
    }
}

impl From<std::io::Error> for HttpError {
    fn from(e: std::io::Error) -> Self {
        HttpError::Io(e)
    }
}

/// A response: status and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub body: Vec<u8>,
}

/// Where the API lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// "host:port", for connecting and for the Host header.
    pub authority: String,
    /// Path prefix without a trailing slash ("" for the root).
    pub prefix: String,
    /// `https://`.
    pub tls: bool,
}

impl Endpoint {
    pub fn parse(url: &str) -> Result<Endpoint, HttpError> {
        let (rest, tls) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
            (Some(rest), _) => (rest, false),
            (_, Some(rest)) => (rest, true),
            _ => return Err(HttpError::BadUrl(url.to_string())),
        };
        let (authority, prefix) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if authority.is_empty() {
            return Err(HttpError::BadUrl(url.to_string()));
        }
        let authority = if authority
            .rsplit_once(':')
            .is_some_and(|(_, p)| p.parse::<u16>().is_ok())
            && !authority.ends_with(']')
        {
            authority.to_string()
        } else {
            format!("{authority}:{}", if tls { 443 } else { 80 })
        };
        Ok(Endpoint {
            authority,
            prefix: prefix.trim_end_matches('/').to_string(),
            tls,
        })
    }
}

/// A response with its headers (for `ETag`, `Location`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FullReply {
    pub status: u16,
    /// Name and value, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl FullReply {
    /// The value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The status and body alone.
    pub fn reply(self) -> Reply {
        Reply {
            status: self.status,
            body: self.body,
        }
    }
}

/// How long `request` waits for the connection, each write and each read.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Sends one request and reads the whole response.
pub fn request(
    ep: &Endpoint,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&[u8]>,
) -> Result<Reply, HttpError> {
    request_with_timeout(ep, method, path, token, body, DEFAULT_TIMEOUT)
}

/// `request`, giving up when connecting, a write or a read takes longer
/// than `timeout`.
pub fn request_with_timeout(
    ep: &Endpoint,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&[u8]>,
    timeout: Duration,
) -> Result<Reply, HttpError> {
    let body = body.unwrap_or_default();
    let content = (method == "POST" || !body.is_empty()).then_some("application/json");
    let mut reader = body;
    exchange(
        ep,
        &Head {
            method,
            path,
            token,
            extra: &[],
            content_type: content,
            length: body.len() as u64,
        },
        &mut reader,
        &mut |_| {},
        timeout,
    )
    .map(FullReply::reply)
}

/// One request with extra headers (e.g. `If-Match`) and a JSON body; the
/// reply with its headers.
pub fn request_full(
    ep: &Endpoint,
    method: &str,
    path: &str,
    token: Option<&str>,
    extra: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Result<FullReply, HttpError> {
    let body = body.unwrap_or_default();
    let content =
        (method != "GET" && method != "DELETE" || !body.is_empty()).then_some("application/json");
    let mut reader = body;
    exchange(
        ep,
        &Head {
            method,
            path,
            token,
            extra,
            content_type: content,
            length: body.len() as u64,
        },
        &mut reader,
        &mut |_| {},
        DEFAULT_TIMEOUT,
    )
}

/// One request with extra headers and a body of `content_type` (e.g. a
/// plan TOML); the reply with its headers.
pub fn request_typed(
    ep: &Endpoint,
    method: &str,
    path: &str,
    token: Option<&str>,
    extra: &[(&str, &str)],
    content_type: &str,
    body: &[u8],
) -> Result<FullReply, HttpError> {
    let mut reader = body;
    exchange(
        ep,
        &Head {
            method,
            path,
            token,
            extra,
            content_type: Some(content_type),
            length: body.len() as u64,
        },
        &mut reader,
        &mut |_| {},
        DEFAULT_TIMEOUT,
    )
}

/// How much of an upload is sent per write (and per progress report).
pub const UPLOAD_WRITE: usize = 64 * 1024;

/// POSTs `length` bytes read from `body` as `application/octet-stream`,
/// calling `progress` with the bytes sent so far after every write. A body
/// that ends early stops the upload (the server then answers it is short).
pub fn upload(
    ep: &Endpoint,
    path: &str,
    token: Option<&str>,
    length: u64,
    body: &mut dyn Read,
    progress: &mut dyn FnMut(u64),
) -> Result<FullReply, HttpError> {
    exchange(
        ep,
        &Head {
            method: "POST",
            path,
            token,
            extra: &[],
            content_type: Some("application/octet-stream"),
            length,
        },
        body,
        progress,
        DEFAULT_TIMEOUT,
    )
}

/// A request's head.
struct Head<'a> {
    method: &'a str,
    path: &'a str,
    token: Option<&'a str>,
    extra: &'a [(&'a str, &'a str)],
    content_type: Option<&'a str>,
    length: u64,
}

fn exchange(
    ep: &Endpoint,
    head: &Head<'_>,
    body: &mut dyn Read,
    progress: &mut dyn FnMut(u64),
    timeout: Duration,
) -> Result<FullReply, HttpError> {
    let pin = if ep.tls {
        Some(tls::pin().ok_or(HttpError::NoPin)?)
    } else {
        None
    };
    let addr = ep.authority.to_socket_addrs()?.next().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{} resolves to no address", ep.authority),
        )
    })?;
    let socket = TcpStream::connect_timeout(&addr, timeout)?;
    socket.set_read_timeout(Some(timeout))?;
    socket.set_write_timeout(Some(timeout))?;
    let mut stream = Wire::new(socket, pin, &ep.authority)?;
    let mut text = format!(
        "{} {}{} HTTP/1.1\r\nHost: {}\r\nUser-Agent: hvctl/{}\r\nAccept: application/json\r\nConnection: close\r\n",
        head.method,
        ep.prefix,
        head.path,
        ep.authority,
        env!("CARGO_PKG_VERSION")
    );
    // Reads need a credential too (a viewer's will do): a GET without a
    // token of its own takes the default one; Some("") sends none.
    let default = (head.method == "GET" && head.token.is_none())
        .then(default_token)
        .flatten();
    match head.token.map(str::to_string).or(default) {
        Some(t) if !t.is_empty() => text.push_str(&format!("Authorization: Bearer {t}\r\n")),
        _ => {}
    }
    for (k, v) in head.extra {
        text.push_str(&format!("{k}: {v}\r\n"));
    }
    if let Some(content_type) = head.content_type {
        text.push_str(&format!(
            "Content-Type: {content_type}\r\nContent-Length: {}\r\n",
            head.length
        ));
    }
    text.push_str("\r\n");
    stream.write_all(text.as_bytes())?;
    let mut sent = 0u64;
    let mut chunk = vec![0u8; UPLOAD_WRITE.min(head.length as usize)];
    while sent < head.length {
        let want = (head.length - sent).min(chunk.len() as u64) as usize;
        let n = match body.read(&mut chunk[..want]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(HttpError::Io(e)),
        };
        if let Err(e) = stream.write_all(&chunk[..n]) {
            // The server may have answered early (401, 413): read that.
            let mut reader = BufReader::new(&mut stream);
            return match read_reply_full(&mut reader) {
                Ok(reply) => Ok(reply),
                Err(_) => Err(HttpError::Io(e)),
            };
        }
        sent += n as u64;
        progress(sent);
    }
    stream.flush()?;
    let mut reader = BufReader::new(stream);
    let reply = read_reply_full(&mut reader)?;
    drain_until_close(&mut reader);
    Ok(reply)
}

/// A connection: plain, or TLS with the pinned certificate.
pub enum Wire {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ClientConnection, TcpStream>>),
}

impl Wire {
    /// `socket` as it is, or (with a pin) TLS over it to `authority`'s
    /// host; the handshake happens with the first write.
    pub fn new(
        socket: TcpStream,
        pin: Option<tls::Pin>,
        authority: &str,
    ) -> Result<Wire, HttpError> {
        let Some(pin) = pin else {
            return Ok(Wire::Plain(socket));
        };
        let host = authority
            .rsplit_once(':')
            .map_or(authority, |(h, _)| h)
            .trim_start_matches('[')
            .trim_end_matches(']');
        let name = rustls::pki_types::ServerName::try_from(host.to_string())
            .map_err(|_| HttpError::BadUrl(authority.to_string()))?;
        let conn = ClientConnection::new(tls::client_config(pin), name)
            .map_err(|e| HttpError::Io(std::io::Error::other(e)))?;
        Ok(Wire::Tls(Box::new(StreamOwned::new(conn, socket))))
    }
}

impl Wire {
    pub fn socket(&self) -> &TcpStream {
        match self {
            Wire::Plain(s) => s,
            Wire::Tls(s) => &s.sock,
        }
    }

    pub fn set_read_timeout(&self, d: Option<Duration>) -> std::io::Result<()> {
        self.socket().set_read_timeout(d)
    }

    pub fn set_write_timeout(&self, d: Option<Duration>) -> std::io::Result<()> {
        self.socket().set_write_timeout(d)
    }

    /// Ends our side (for TLS: close_notify first).
    pub fn shutdown(&mut self, how: std::net::Shutdown) -> std::io::Result<()> {
        if let Wire::Tls(s) = self {
            s.conn.send_close_notify();
            s.flush()?;
        }
        self.socket().shutdown(how)
    }
}

impl Read for Wire {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Wire::Plain(s) => s.read(buf),
            Wire::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Wire {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Wire::Plain(s) => s.write(buf),
            Wire::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Wire::Plain(s) => s.flush(),
            Wire::Tls(s) => s.flush(),
        }
    }
}

/// At most this much is read (and dropped) after a complete reply while
/// waiting for the server to close.
const DRAIN_LIMIT: usize = 64 * 1024;

/// Waits for the server to close the connection before we close ours.
///
/// Why: the manager (tiny_http on Hermit 0.11) answers `Connection: close`
/// and then closes. A client that closes as soon as it has Content-Length
/// bytes sends its FIN while the manager closes too; when the two FINs
/// cross (a simultaneous close, RFC 9293 section 3.6) the manager's socket
/// wedges and its whole API stops answering for tens of seconds. Closing
/// only after the server's FIN never races it. The reply is already
/// complete, so errors (reset, timeout) are ignored.
fn drain_until_close(r: &mut impl Read) {
    let mut sink = [0u8; 1024];
    let mut drained = 0;
    while drained < DRAIN_LIMIT {
        match r.read(&mut sink) {
            Ok(0) => return,
            Ok(n) => drained += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

fn bad(why: impl Into<String>) -> HttpError {
    HttpError::BadResponse(why.into())
}

/// Parses a response: status line, headers, then a body framed by
/// Content-Length, chunked encoding, or the end of the connection.
pub fn read_reply(r: impl BufRead) -> Result<Reply, HttpError> {
    read_reply_full(r).map(FullReply::reply)
}

/// [`read_reply`], keeping the headers.
pub fn read_reply_full(mut r: impl BufRead) -> Result<FullReply, HttpError> {
    let mut line = String::new();
    r.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let version = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") {
        return Err(bad(format!("status line {:?}", line.trim_end())));
    }
    let status = parts
        .next()
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| bad(format!("status line {:?}", line.trim_end())))?;
    let mut length = None;
    let mut chunked = false;
    let mut headers = Vec::new();
    loop {
        line.clear();
        if r.read_line(&mut line)? == 0 {
            return Err(bad("headers end early"));
        }
        let header = line.trim_end();
        if header.is_empty() {
            break;
        }
        if let Some((k, v)) = header.split_once(':') {
            let (k, v) = (k.trim(), v.trim());
            headers.push((k.to_string(), v.to_string()));
            if k.eq_ignore_ascii_case("content-length") {
                length = Some(v.parse::<usize>().map_err(|_| bad("bad Content-Length"))?);
            } else if k.eq_ignore_ascii_case("transfer-encoding")
                && v.eq_ignore_ascii_case("chunked")
            {
                chunked = true;
            }
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            line.clear();
            r.read_line(&mut line)?;
            let size_hex = line.trim().split(';').next().unwrap_or_default();
            let size = usize::from_str_radix(size_hex, 16).map_err(|_| bad("bad chunk size"))?;
            if size == 0 {
                break;
            }
            let start = body.len();
            body.resize(start + size, 0);
            r.read_exact(&mut body[start..])?;
            line.clear();
            r.read_line(&mut line)?; // CRLF after the chunk
        }
    } else if let Some(n) = length {
        body.resize(n, 0);
        r.read_exact(&mut body)?;
    } else {
        r.read_to_end(&mut body)?;
    }
    Ok(FullReply {
        status,
        headers,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_without_port_gets_port_80() {
        let ep = Endpoint::parse("http://pinfold.local").expect("parses");

        assert_eq!(
            ep,
            Endpoint {
                authority: "pinfold.local:80".into(),
                prefix: String::new(),
                tls: false,
            }
        );
    }

    #[test]
    fn url_keeps_port_and_prefix_without_trailing_slash() {
        let ep = Endpoint::parse("http://10.0.2.15:8080/mgmt/").expect("parses");

        assert_eq!(
            ep,
            Endpoint {
                authority: "10.0.2.15:8080".into(),
                prefix: "/mgmt".into(),
                tls: false,
            }
        );
    }

    #[test]
    fn https_url_gets_port_443_and_needs_a_pin() {
        let ep = Endpoint::parse("https://h").expect("parses");
        assert_eq!((ep.authority.as_str(), ep.tls), ("h:443", true));
        assert!(matches!(
            Endpoint::parse("ftp://h"),
            Err(HttpError::BadUrl(_))
        ));
        crate::tls::set_pin(None);
        let err = request(&ep, "GET", "/", None, None).expect_err("no pin");
        assert!(matches!(err, HttpError::NoPin), "{err}");
        assert!(err.to_string().contains("--fingerprint"), "{err}");
    }

    #[test]
    fn content_length_body_is_read_exactly() {
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokTRAILING";

        let reply = read_reply(&raw[..]).expect("parses");

        assert_eq!(
            reply,
            Reply {
                status: 200,
                body: b"ok".to_vec()
            }
        );
    }

    #[test]
    fn chunked_body_is_reassembled() {
        let raw = b"HTTP/1.1 202 Accepted\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n";

        let reply = read_reply(&raw[..]).expect("parses");

        assert_eq!(
            reply,
            Reply {
                status: 202,
                body: b"abcde".to_vec()
            }
        );
    }

    #[test]
    fn body_without_length_runs_to_end_of_stream() {
        let raw = b"HTTP/1.0 404 Not Found\r\n\r\n{}";

        assert_eq!(read_reply(&raw[..]).expect("parses").body, b"{}");
    }

    /// What the manager (tiny_http 0.12) sent for `GET /api/v1/partitions`,
    /// byte for byte, with the body cut short.
    const MANAGER_REPLY: &[u8] = b"HTTP/1.1 200 OK\r\nServer: tiny-http (Rust)\r\nDate: Thu, 01 Jan 1970 00:00:16 GMT\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n[]";

    #[test]
    fn client_closes_only_after_the_server_has_closed() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let ep = Endpoint::parse(&format!("http://{}", listener.local_addr().expect("addr")))
            .expect("parses");
        let client = std::thread::spawn(move || {
            request_with_timeout(
                &ep,
                "GET",
                "/api/v1/partitions",
                None,
                None,
                Duration::from_secs(5),
            )
        });
        let (mut conn, _) = listener.accept().expect("accept");
        let mut seen = Vec::new();
        let mut buf = [0u8; 512];
        while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = conn.read(&mut buf).expect("read request");
            seen.extend_from_slice(&buf[..n]);
        }

        conn.write_all(MANAGER_REPLY).expect("write reply");
        conn.set_read_timeout(Some(Duration::from_millis(300)))
            .expect("timeout");
        // Ok(0) here is the client's FIN arriving before ours.
        let client_closed_first = matches!(conn.read(&mut buf), Ok(0));
        drop(conn);
        let reply = client.join().expect("join").expect("reply");

        assert!(
            !client_closed_first,
            "the client sent its FIN before the server closed"
        );
        assert_eq!(
            reply,
            Reply {
                status: 200,
                body: b"[]".to_vec()
            }
        );
    }

    #[test]
    fn garbage_status_line_is_bad_response() {
        assert!(matches!(
            read_reply(&b"SSH-2.0-OpenSSH\r\n"[..]),
            Err(HttpError::BadResponse(_))
        ));
    }
}
