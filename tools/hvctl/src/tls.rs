//! HTTPS to the manager: rustls (ring provider) with the server's
//! certificate pinned by its SHA-256 fingerprint.
//!
//! The manager's certificate is self-signed (`cargo xtask pxe` makes one per
//! output tree), so no CA vouches for it: the client trusts exactly one
//! certificate, named by `--fingerprint SHA256` (as the manager prints it on
//! its console, colons optional) or `--cacert FILE` (its PEM or DER; the
//! fingerprint is taken from it). Anything else is refused with both
//! fingerprints in the message. The handshake's signatures are still
//! checked (the server must hold the pinned certificate's key); validity
//! dates and names are not (the pin says more than either).

use std::fmt;
use std::sync::{Arc, Mutex};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use sha2::{Digest, Sha256};

/// Environment variable for `--fingerprint`.
pub const FINGERPRINT_ENV: &str = "PINFOLD_FINGERPRINT";
/// Environment variable for `--cacert`.
pub const CACERT_ENV: &str = "PINFOLD_CACERT";

/// The one certificate an HTTPS connection accepts: its SHA-256.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pin(pub [u8; 32]);

impl Pin {
    /// `AB:CD:...` or `abcd...` (64 hex digits, colons and a `SHA256:`
    /// prefix allowed).
    pub fn parse(text: &str) -> Result<Pin, String> {
        let t = text.trim();
        let t = t
            .strip_prefix("SHA256:")
            .or_else(|| t.strip_prefix("sha256:"))
            .unwrap_or(t);
        let hex: String = t.chars().filter(|c| *c != ':').collect();
        if hex.len() != 64 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
            return Err(format!(
                "fingerprint {text:?} is not a SHA-256 (64 hex digits, colons allowed)"
            ));
        }
        let mut out = [0u8; 32];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
                .map_err(|_| format!("fingerprint {text:?}: not hex"))?;
        }
        Ok(Pin(out))
    }

    /// The pin of a certificate: PEM (the first CERTIFICATE block) or DER.
    pub fn of_certificate(bytes: &[u8]) -> Result<Pin, String> {
        Ok(Pin::of_der(&certificate_der(bytes)?))
    }

    pub fn of_der(der: &[u8]) -> Pin {
        Pin(Sha256::digest(der).into())
    }
}

impl fmt::Display for Pin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let hex: Vec<String> = self.0.iter().map(|b| format!("{b:02X}")).collect();
        write!(f, "{}", hex.join(":"))
    }
}

/// The DER of a PEM (first `CERTIFICATE` block) or DER certificate.
pub fn certificate_der(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let Ok(text) = std::str::from_utf8(bytes) else {
        return Ok(bytes.to_vec());
    };
    let Some(start) = text.find("-----BEGIN CERTIFICATE-----") else {
        if text.trim_start().starts_with("-----BEGIN") {
            return Err("no CERTIFICATE block in the PEM".into());
        }
        return Ok(bytes.to_vec());
    };
    let body = &text[start + "-----BEGIN CERTIFICATE-----".len()..];
    let end = body
        .find("-----END CERTIFICATE-----")
        .ok_or("the PEM's CERTIFICATE block has no END line")?;
    base64_decode(&body[..end]).ok_or_else(|| "the PEM's CERTIFICATE block is not base64".into())
}

fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut acc = 0u32;
    let mut bits = 0;
    for c in text.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            b'=' | b'\r' | b'\n' | b' ' | b'\t' => continue,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

/// The pin every HTTPS request uses ([`set_pin`]).
static PIN: Mutex<Option<Pin>> = Mutex::new(None);

/// Every later HTTPS connection accepts only the certificate `pin` names.
pub fn set_pin(pin: Option<Pin>) {
    *PIN.lock().unwrap_or_else(|p| p.into_inner()) = pin;
}

pub fn pin() -> Option<Pin> {
    *PIN.lock().unwrap_or_else(|p| p.into_inner())
}

/// The certificate's fingerprint is not the pinned one.
#[derive(Debug)]
pub struct Mismatch {
    pub pinned: Pin,
    pub got: Pin,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the server's certificate has SHA-256 fingerprint {}, not the pinned {}: refusing it (the manager prints its fingerprint on its console; check --fingerprint / --cacert)",
            self.got, self.pinned
        )
    }
}

impl std::error::Error for Mismatch {}

#[derive(Debug)]
struct PinVerifier {
    pin: Pin,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for PinVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let got = Pin::of_der(end_entity);
        if got == self.pin {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::Other(rustls::OtherError(Arc::new(Mismatch {
                    pinned: self.pin,
                    got,
                }))),
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// A client configuration that accepts only `pin`'s certificate.
pub fn client_config(pin: Pin) -> Arc<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Arc::new(PinVerifier {
        pin,
        provider: provider.clone(),
    });
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default TLS versions")
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Arc::new(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprints_parse_with_or_without_colons_and_print_with() {
        let hex = "ab".repeat(32);
        let colons = vec!["AB"; 32].join(":");
        assert_eq!(Pin::parse(&hex), Pin::parse(&colons));
        assert_eq!(Pin::parse(&format!("SHA256:{colons}")), Pin::parse(&hex));
        assert_eq!(Pin::parse(&hex).map(|p| p.to_string()), Ok(colons));
        assert!(Pin::parse("abcd").is_err());
        assert!(Pin::parse(&"zz".repeat(32)).is_err());
    }

    #[test]
    fn a_pem_certificate_pins_its_der() {
        let der = b"\x30\x03\x02\x01\x05".to_vec();
        let pem = "-----BEGIN CERTIFICATE-----\nMAMCAQU=\n-----END CERTIFICATE-----\n";
        assert_eq!(certificate_der(pem.as_bytes()), Ok(der.clone()));
        assert_eq!(certificate_der(&der), Ok(der.clone()));
        assert_eq!(Pin::of_certificate(pem.as_bytes()), Ok(Pin::of_der(&der)));
        assert!(certificate_der(b"-----BEGIN PRIVATE KEY-----\n").is_err());
    }
}
