//! The management API's TLS certificate: a self-signed ECDSA P-256
//! certificate and key made once per output tree (`target/pinfold/tls/`)
//! with rcgen, kept so that rebuilds keep the same fingerprint, and
//! embedded in the manager's image (the management partition's alone:
//! docs/DEPLOY.md, "Certificates").
//!
//! Files: `cert.pem` + `key.pem` (for people and for `hvctl --cacert`),
//! `cert.der` + `key.der` (PKCS#8; what the manager's build embeds).
//! Bring your own: `PINFOLD_TLS_CERT` and `PINFOLD_TLS_KEY` name PEM files
//! that replace the generated pair (checked: the key must be the
//! certificate's, the certificate must be P-256 or Ed25519 PEM).
//! The fingerprint (SHA-256 of the certificate's DER) is what the manager
//! prints at start and `hvctl --fingerprint` takes; the SPKI hash (base64)
//! is what Chromium's `--ignore-certificate-errors-spki-list` takes.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair};
use sha2::{Digest, Sha256};

/// Environment variables naming a certificate and key (PEM) to use instead
/// of the generated ones.
pub const CERT_ENV: &str = "PINFOLD_TLS_CERT";
pub const KEY_ENV: &str = "PINFOLD_TLS_KEY";

/// Names the certificate is valid for besides the plan's hostnames: the
/// addresses the management partition is reached by in the test rig and on
/// the host itself (QEMU's user network gives it 10.0.2.15).
pub const DEFAULT_NAMES: [&str; 4] = ["localhost", "127.0.0.1", "::1", "10.0.2.15"];

/// A certificate and key ready for the manager's build.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cert {
    /// The directory of cert.pem, key.pem, cert.der, key.der.
    pub dir: PathBuf,
    pub der: Vec<u8>,
    /// SHA-256 of the certificate's DER, `AB:CD:...`.
    pub fingerprint: String,
    /// base64 of the SHA-256 of the SubjectPublicKeyInfo (Chromium's
    /// `--ignore-certificate-errors-spki-list`).
    pub spki_sha256: String,
}

/// The pair in `target/pinfold/tls/` under `root`: made on first use, kept
/// afterwards (or the bring-your-own pair from [`CERT_ENV`]/[`KEY_ENV`]).
pub fn ensure(root: &Path, names: &[String]) -> Result<Cert, String> {
    let dir = root.join("target/pinfold/tls");
    fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let (cert_pem, key_pem) = match (std::env::var_os(CERT_ENV), std::env::var_os(KEY_ENV)) {
        (Some(c), Some(k)) => {
            let read = |p: &std::ffi::OsStr| {
                fs::read_to_string(p).map_err(|e| format!("{}: {e}", Path::new(p).display()))
            };
            (read(&c)?, read(&k)?)
        }
        (None, None) => {
            let (c, k) = (dir.join("cert.pem"), dir.join("key.pem"));
            match (fs::read_to_string(&c), fs::read_to_string(&k)) {
                (Ok(c), Ok(k)) => (c, k),
                _ => generate(names)?,
            }
        }
        _ => {
            return Err(format!(
                "{CERT_ENV} and {KEY_ENV} go together: set both or neither"
            ))
        }
    };
    let cert = check(&cert_pem, &key_pem)?;
    let key = KeyPair::from_pem(&key_pem).map_err(|e| format!("the TLS key: {e}"))?;
    for (name, bytes) in [
        ("cert.pem", cert_pem.as_bytes()),
        ("key.pem", key_pem.as_bytes()),
        ("cert.der", &cert.der[..]),
        ("key.der", &key.serialize_der()[..]),
    ] {
        let path = dir.join(name);
        if fs::read(&path).ok().as_deref() != Some(bytes) {
            fs::write(&path, bytes).map_err(|e| format!("writing {}: {e}", path.display()))?;
        }
    }
    Ok(Cert { dir, ..cert })
}

/// A new self-signed ECDSA P-256 certificate for `names` and
/// [`DEFAULT_NAMES`], valid from the start of this year for 20 years
/// (the manager's clock is the hypervisor's; clients pin the certificate
/// rather than trust its dates): (cert PEM, key PEM).
pub fn generate(names: &[String]) -> Result<(String, String), String> {
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(|e| format!("generating the TLS key: {e}"))?;
    let mut sans: Vec<String> = DEFAULT_NAMES.iter().map(|s| s.to_string()).collect();
    for n in names {
        if !sans.contains(n) {
            sans.push(n.clone());
        }
    }
    let mut params =
        CertificateParams::new(sans).map_err(|e| format!("the certificate's names: {e}"))?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "Pinfold management API");
    params.distinguished_name = dn;
    let year = 1970
        + SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() / 31_556_952) as i32;
    params.not_before = rcgen::date_time_ymd(year, 1, 1);
    params.not_after = rcgen::date_time_ymd(year + 20, 1, 1);
    let cert = params
        .self_signed(&key)
        .map_err(|e| format!("signing the certificate: {e}"))?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Checks that `key_pem` is the key of `cert_pem` (the certificate holds
/// the key's SubjectPublicKeyInfo) and gives the certificate's figures.
pub fn check(cert_pem: &str, key_pem: &str) -> Result<Cert, String> {
    let der = hvctl::tls::certificate_der(cert_pem.as_bytes())
        .map_err(|e| format!("the TLS certificate: {e}"))?;
    if !cert_pem.contains("-----BEGIN CERTIFICATE-----") {
        return Err("the TLS certificate is not PEM (-----BEGIN CERTIFICATE-----)".into());
    }
    let key = KeyPair::from_pem(key_pem).map_err(|e| format!("the TLS key: {e}"))?;
    let spki = key.public_key_der();
    if !der.windows(spki.len()).any(|w| w == spki.as_slice()) {
        return Err("the TLS key does not belong to the certificate (its public key is not the certificate's)".into());
    }
    Ok(Cert {
        dir: PathBuf::new(),
        fingerprint: hvctl::tls::Pin::of_der(&der).to_string(),
        spki_sha256: base64(&Sha256::digest(&spki)),
        der,
    })
}

fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;
    use std::sync::Arc;

    #[test]
    fn base64_pads() {
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
    }

    #[test]
    fn a_generated_pair_checks_and_a_foreign_key_does_not() {
        let (cert, key) = generate(&["pinfold-mgmt.example".into()]).expect("generates");
        let c = check(&cert, &key).expect("its own key");
        assert_eq!(c.fingerprint.len(), 32 * 3 - 1);
        assert_eq!(c.spki_sha256.len(), 44);
        let (_, other) = generate(&[]).expect("generates");
        let err = check(&cert, &other).expect_err("a foreign key");
        assert!(err.contains("does not belong"), "{err}");
        assert!(check("not a certificate", &key).is_err());
        assert!(check(&cert, "not a key").is_err());
    }

    #[test]
    fn ensure_keeps_the_pair_and_its_fingerprint_across_runs() {
        let root = std::env::temp_dir().join(format!("pinfold-tls-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let first = ensure(&root, &[]).expect("made");
        let second = ensure(&root, &[]).expect("kept");
        assert_eq!(first, second);
        assert_eq!(
            fs::read(first.dir.join("cert.der")).expect("der"),
            first.der
        );
        let _ = fs::remove_dir_all(&root);
    }

    /// hvctl's client against a rustls server with a generated certificate:
    /// the right pin gets the answer, a wrong one is refused with both
    /// fingerprints named, and no pin at all is refused before connecting.
    #[test]
    fn hvctl_speaks_https_to_the_pinned_certificate_only() {
        let (cert_pem, key_pem) = generate(&[]).expect("generates");
        let cert = check(&cert_pem, &key_pem).expect("checks");
        let key = KeyPair::from_pem(&key_pem).expect("key");
        let config = Arc::new(
            rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_no_client_auth()
            .with_single_cert(
                vec![cert.der.clone().into()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
            .expect("server config"),
        );
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let server = std::thread::spawn(move || {
            for _ in 0..2 {
                let (sock, _) = listener.accept().expect("accept");
                let conn = rustls::ServerConnection::new(config.clone()).expect("conn");
                let mut tls = rustls::StreamOwned::new(conn, sock);
                let mut seen = Vec::new();
                let mut buf = [0u8; 1024];
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                if seen.is_empty() {
                    continue; // the refused client
                }
                let _ = tls.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
                tls.conn.send_close_notify();
                let _ = tls.flush();
            }
        });
        let ep = hvctl::http::Endpoint::parse(&format!("https://127.0.0.1:{port}")).expect("url");
        let right = hvctl::tls::Pin::parse(&cert.fingerprint).expect("pin");
        let mut wrong = right;
        wrong.0[0] ^= 1;
        hvctl::tls::set_pin(Some(wrong));
        let err = hvctl::http::request(&ep, "GET", "/", None, None).expect_err("wrong pin");
        let text = err.to_string();
        assert!(text.contains("not the pinned"), "{text}");
        assert!(text.contains(&cert.fingerprint), "{text}");
        hvctl::tls::set_pin(Some(right));
        let reply = hvctl::http::request(&ep, "GET", "/", None, None).expect("right pin");
        assert_eq!((reply.status, reply.body), (200, b"ok".to_vec()));
        server.join().expect("server");
    }
}
