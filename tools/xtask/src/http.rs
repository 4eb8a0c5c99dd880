//! The boot tests' HTTP client: a thin wrapper over hvctl's
//! (`hvctl::http`), one request per connection, `Connection: close`, over
//! HTTPS with the manager's generated certificate pinned
//! (target/pinfold/tls/cert.der: every boot check speaks HTTPS).

use std::time::Duration;

/// Why a request produced no reply.
#[derive(Debug)]
pub enum HttpError {
    /// Resolving, connecting, sending or receiving failed (including a
    /// timeout).
    Io(std::io::Error),
    /// The address or the bytes that came back are not HTTP/1.x we can use.
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

impl From<hvctl::http::HttpError> for HttpError {
    fn from(err: hvctl::http::HttpError) -> Self {
        match err {
            hvctl::http::HttpError::Io(err) => Self::Io(err),
            other => Self::BadResponse(other.to_string()),
        }
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

/// The manager's certificate as the build made it (tls.rs).
pub fn cert_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/pinfold/tls/cert.der")
}

/// Pins the manager's certificate (target/pinfold/tls/cert.der) for every
/// later HTTPS request of this process, once.
pub fn pin_manager_cert() {
    if hvctl::tls::pin().is_none() {
        if let Ok(der) = std::fs::read(cert_path()) {
            hvctl::tls::set_pin(Some(hvctl::tls::Pin::of_der(&der)));
        }
    }
}

/// The manager's base URL on `authority` ("host:port"): HTTPS.
pub fn base_url(authority: &str) -> String {
    format!("https://{authority}")
}

/// A raw connection to the manager at `authority` over TLS with its
/// certificate pinned (handshake on the first write), for the checks that
/// write their own bytes; `timeout` for each read and write.
pub fn connect_raw(authority: &str, timeout: Duration) -> Result<hvctl::http::Wire, String> {
    pin_manager_cert();
    let sock = std::net::TcpStream::connect(authority).map_err(|e| format!("connect: {e}"))?;
    let _ = sock.set_read_timeout(Some(timeout));
    let _ = sock.set_write_timeout(Some(timeout));
    let _ = sock.set_nodelay(true);
    hvctl::http::Wire::new(sock, hvctl::tls::pin(), authority).map_err(|e| e.to_string())
}

/// Sends `request` to `authority` ("host:port") over HTTPS and reads the
/// reply; the connection, each read and each write give up after
/// `timeout`.
pub fn send(authority: &str, request: &Request<'_>, timeout: Duration) -> Result<Reply, HttpError> {
    pin_manager_cert();
    send_over(true, authority, request, timeout)
}

/// [`send`] over HTTPS (`tls`) or plain HTTP.
pub fn send_over(
    tls: bool,
    authority: &str,
    request: &Request<'_>,
    timeout: Duration,
) -> Result<Reply, HttpError> {
    let endpoint = hvctl::http::Endpoint::parse(&format!("http://{authority}"))?;
    let endpoint = hvctl::http::Endpoint { tls, ..endpoint };
    let reply = hvctl::http::request_with_timeout(
        &endpoint,
        request.method,
        request.path,
        request.token,
        request.body.map(str::as_bytes),
        timeout,
    )?;
    Ok(Reply {
        status: reply.status,
        body: String::from_utf8_lossy(&reply.body).into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

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

        let reply = send_over(
            false,
            &authority,
            &Request::get("/x"),
            Duration::from_secs(5),
        );

        assert_eq!(
            reply.map(|r| (r.status, r.body)).ok(),
            Some((401, "nope!".into()))
        );
        assert!(server
            .join()
            .expect("join")
            .starts_with("GET /x HTTP/1.1\r\n"));
    }

    #[test]
    fn authority_that_is_not_host_and_port_is_a_bad_response() {
        let reply = send("", &Request::get("/x"), Duration::from_secs(1));

        assert!(matches!(reply, Err(HttpError::BadResponse(_))));
    }
}
