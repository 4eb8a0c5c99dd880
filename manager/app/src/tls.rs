//! HTTPS for the management API: rustls (ring as its crypto provider) fed
//! from the server's non-blocking sockets (docs/MANAGER.md, "TLS").
//!
//! rustls's `ServerConnection` does no I/O of its own: a [`Link`] reads the
//! socket's bytes into it, writes its records back out, and gives the
//! server plaintext, so manager/http's parser and `Conn` never see TLS. The
//! certificate and its PKCS#8 key are the ones `cargo xtask` generated for
//! this output tree (target/pinfold/tls/) and embedded in this image, which
//! only the management partition runs. A client that speaks plain HTTP to
//! the TLS port is told so in plain HTTP (a 400) rather than left to guess
//! at a TLS alert.

use std::io::{self, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ServerConfig, ServerConnection};

/// The certificate (DER) and its key (PKCS#8 DER) from the build, if any.
pub const EMBEDDED: Option<(&[u8], &[u8])> = include!(concat!(env!("OUT_DIR"), "/tls.rs"));

/// The first byte of every TLS handshake record (ContentType handshake).
const TLS_HANDSHAKE: u8 = 0x16;

/// The server's TLS settings, from the embedded certificate and key.
pub fn config(cert: &[u8], key: &[u8]) -> Result<Arc<ServerConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS versions: {e}"))?
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(cert.to_vec())],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.to_vec())),
        )
        .map_err(|e| format!("the embedded certificate or key: {e}"))?;
    Ok(Arc::new(config))
}

/// `AB:CD:...`, the SHA-256 of the certificate's DER (what browsers and
/// `hvctl --fingerprint` show).
pub fn fingerprint(cert: &[u8]) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, cert);
    digest
        .as_ref()
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// One connection's transport: the socket as it is, or TLS over it.
pub enum Link {
    Plain(TcpStream),
    Tls(Box<TlsLink>),
}

pub struct TlsLink {
    sock: TcpStream,
    conn: ServerConnection,
    /// Bytes that came from the socket (the handshake's included).
    raw_in: u64,
    /// The first bytes were not TLS but look like a plain HTTP request.
    plaintext: bool,
}

impl Link {
    /// A new connection: TLS with `config`, plain without.
    pub fn new(sock: TcpStream, config: Option<&Arc<ServerConfig>>) -> io::Result<Link> {
        match config {
            None => Ok(Link::Plain(sock)),
            Some(config) => {
                let conn = ServerConnection::new(config.clone()).map_err(io::Error::other)?;
                Ok(Link::Tls(Box::new(TlsLink {
                    sock,
                    conn,
                    raw_in: 0,
                    plaintext: false,
                })))
            }
        }
    }

    /// The socket (for `poll`).
    pub fn socket(&self) -> &TcpStream {
        match self {
            Link::Plain(s) => s,
            Link::Tls(t) => &t.sock,
        }
    }

    /// Bytes of transport (TLS records) received so far; 0 for plain.
    pub fn raw_in(&self) -> u64 {
        match self {
            Link::Plain(_) => 0,
            Link::Tls(t) => t.raw_in,
        }
    }

    /// A TLS connection whose handshake is not over.
    pub fn handshaking(&self) -> bool {
        matches!(self, Link::Tls(t) if t.conn.is_handshaking())
    }

    /// Whether the peer spoke plain HTTP to the TLS port (then
    /// [`Link::refuse_plaintext`] answers it).
    pub fn spoke_plaintext(&self) -> bool {
        matches!(self, Link::Tls(t) if t.plaintext)
    }

    /// Writes `bytes` to the socket itself, outside TLS (the plain-HTTP
    /// refusal), best effort.
    pub fn write_raw(&mut self, bytes: &[u8]) {
        let sock = match self {
            Link::Plain(s) => s,
            Link::Tls(t) => &mut t.sock,
        };
        let _ = sock.write(bytes);
    }

    /// TLS records waiting for room in the socket's send buffer.
    pub fn pending_out(&self) -> bool {
        matches!(self, Link::Tls(t) if t.conn.wants_write())
    }

    /// Sends what TLS has queued until the socket takes no more; the bytes
    /// that went out.
    pub fn push(&mut self) -> io::Result<usize> {
        match self {
            Link::Plain(_) => Ok(0),
            Link::Tls(t) => t.push(),
        }
    }
}

impl TlsLink {
    fn push(&mut self) -> io::Result<usize> {
        let mut sent = 0;
        while self.conn.wants_write() {
            match self.conn.write_tls(&mut self.sock) {
                Ok(0) => return Err(ErrorKind::WriteZero.into()),
                Ok(n) => sent += n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(sent)
    }

    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        let mut raw = [0u8; 4096];
        loop {
            match self.conn.reader().read(out) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
            // Handshake flights (and alerts) the peer waits for.
            self.push()?;
            let n = match self.sock.read(&mut raw) {
                Ok(0) => return Ok(0),
                Ok(n) => n,
                Err(e) => return Err(e),
            };
            if self.raw_in == 0 && raw[0] != TLS_HANDSHAKE && raw[0].is_ascii_uppercase() {
                self.plaintext = true;
                return Err(io::Error::new(
                    ErrorKind::InvalidData,
                    "plain HTTP on the TLS port",
                ));
            }
            self.raw_in += n as u64;
            let mut rest = &raw[..n];
            while !rest.is_empty() {
                self.conn.read_tls(&mut rest)?;
                if let Err(err) = self.conn.process_new_packets() {
                    // The alert goes out before the connection closes.
                    let _ = self.push();
                    return Err(io::Error::new(ErrorKind::InvalidData, err));
                }
            }
            self.push()?;
        }
    }
}

impl Read for Link {
    /// Plaintext; `WouldBlock` when neither TLS nor the socket holds any
    /// (the handshake goes on meanwhile).
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        match self {
            Link::Plain(s) => s.read(out),
            Link::Tls(t) => t.read(out),
        }
    }
}

impl Write for Link {
    /// Takes plaintext (for TLS: into records, as much as rustls buffers,
    /// sent as far as the socket takes them; the rest goes with later
    /// writes or [`Link::push`]). `WouldBlock` when nothing fits.
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        match self {
            Link::Plain(s) => s.write(data),
            Link::Tls(t) => {
                t.push()?;
                let n = t.conn.writer().write(data)?;
                t.push()?;
                if n == 0 && !data.is_empty() {
                    return Err(ErrorKind::WouldBlock.into());
                }
                Ok(n)
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Link::Plain(s) => s.flush(),
            Link::Tls(t) => {
                t.push()?;
                if t.conn.wants_write() {
                    Err(ErrorKind::WouldBlock.into())
                } else {
                    Ok(())
                }
            }
        }
    }
}

impl Drop for TlsLink {
    /// A close_notify, best effort (the socket's drop never waits: our
    /// Hermit patch), once there is a session to close: a connection that
    /// never finished its handshake (evicted while idle, timed out) just
    /// gets the FIN, as a plain one does.
    fn drop(&mut self) {
        if !self.plaintext && !self.conn.is_handshaking() {
            self.conn.send_close_notify();
            let _ = self.push();
        }
    }
}
