//! Boot bundles: a payload (plan + images, `plan.rs`) that travels outside
//! the hypervisor image, over TFTP or HTTP or as a boot loader's initrd, and
//! is therefore signed. The hypervisor refuses a bundle that another key
//! signed, that was changed after signing, or that is cut short, and says
//! which of these it was.
//!
//! Layout (little endian), `BUNDLE_HEADER_LEN` bytes of header then the
//! payload:
//!
//! ```text
//! offset 0    magic "PINFBNDL"
//! offset 8    revision u32 (BUNDLE_REVISION)
//! offset 12   header length u32 (BUNDLE_HEADER_LEN)
//! offset 16   payload length u64
//! offset 24   SHA-256 of the payload [32]
//! offset 56   key id [8]: the first 8 bytes of SHA-256(public key)
//! offset 64   ed25519 signature [64] over bytes 0..64
//! offset 128  payload (starts with "PINFPAYL")
//! ```
//!
//! The signature covers the header only, and the header carries the
//! payload's digest: checking is one SHA-256 pass over the payload and one
//! signature check over 64 bytes. The key id lets a refusal say "signed by
//! another key" rather than only "bad signature".
//!
//! `open` (no_std) is what the hypervisor runs; `seal` (feature `std`) is
//! what `cargo xtask pxe` runs.

use ed25519_dalek::{Signature, VerifyingKey};
use sha2::{Digest, Sha256};

/// Magic at the start of a bundle.
pub const BUNDLE_MAGIC: [u8; 8] = *b"PINFBNDL";
/// Bumped whenever the header layout changes.
pub const BUNDLE_REVISION: u32 = 1;
/// Bytes of header before the payload.
pub const BUNDLE_HEADER_LEN: usize = 128;
/// Length of the part of the header the signature covers.
const SIGNED_LEN: usize = 64;

/// An ed25519 public key as the image carries it. All zeros: no key
/// enrolled, so no bundle can be accepted.
pub type PublicKey = [u8; 32];

/// Why a bundle was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BundleError {
    /// Shorter than its header, or than the payload length it declares.
    Truncated { have: u64, need: u64 },
    /// The magic is not `PINFBNDL` (not a bundle at all).
    BadMagic,
    /// Made by a newer or older `cargo xtask pxe`.
    Revision(u32),
    /// The header length field is not this revision's.
    HeaderLength(u32),
    /// The image carries no public key, so it trusts no bundle.
    NoKeyEnrolled,
    /// The image's key is not a valid ed25519 point.
    BadKey,
    /// Signed by another key (the key ids of bundle and image).
    OtherKey { bundle: [u8; 8], image: [u8; 8] },
    /// The signature does not verify: the header was changed.
    BadSignature,
    /// The payload is not what was signed.
    DigestMismatch,
}

impl core::fmt::Display for BundleError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            BundleError::Truncated { have, need } => {
                write!(f, "truncated: {have} bytes, the header needs {need}")
            }
            BundleError::BadMagic => write!(f, "not a Pinfold bundle (no PINFBNDL magic)"),
            BundleError::Revision(r) => write!(
                f,
                "bundle revision {r}, this hypervisor reads revision {BUNDLE_REVISION}"
            ),
            BundleError::HeaderLength(n) => write!(
                f,
                "header length {n}, revision {BUNDLE_REVISION} has {BUNDLE_HEADER_LEN}"
            ),
            BundleError::NoKeyEnrolled => {
                write!(f, "this image has no bundle signing key enrolled")
            }
            BundleError::BadKey => write!(f, "the image's bundle key is not an ed25519 key"),
            BundleError::OtherKey { bundle, image } => write!(
                f,
                "signed by key {}, this image trusts key {}",
                Hex(bundle),
                Hex(image)
            ),
            BundleError::BadSignature => write!(f, "the signature does not verify"),
            BundleError::DigestMismatch => {
                write!(f, "the payload was changed after signing (SHA-256 differs)")
            }
        }
    }
}

/// Lower-case hex of a byte string, for messages.
pub struct Hex<'a>(pub &'a [u8]);

impl core::fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// The key id of a public key: the first 8 bytes of its SHA-256.
pub fn key_id(key: &PublicKey) -> [u8; 8] {
    let digest = Sha256::digest(key);
    let mut id = [0u8; 8];
    id.copy_from_slice(&digest[..8]);
    id
}

/// Whether `bytes` start like a bundle (the magic only; `open` checks the
/// rest).
pub fn is_bundle(bytes: &[u8]) -> bool {
    bytes.get(..8) == Some(&BUNDLE_MAGIC[..])
}

/// Checks a bundle against the image's key and returns its payload.
/// Trailing bytes after the declared payload (a loader rounding the file
/// up) are ignored.
pub fn open<'b>(bytes: &'b [u8], key: &PublicKey) -> Result<&'b [u8], BundleError> {
    let have = bytes.len() as u64;
    let header = bytes
        .get(..BUNDLE_HEADER_LEN)
        .ok_or(BundleError::Truncated {
            have,
            need: BUNDLE_HEADER_LEN as u64,
        })?;
    if header[..8] != BUNDLE_MAGIC {
        return Err(BundleError::BadMagic);
    }
    let revision = u32::from_le_bytes(array(&header[8..12]));
    if revision != BUNDLE_REVISION {
        return Err(BundleError::Revision(revision));
    }
    let header_len = u32::from_le_bytes(array(&header[12..16]));
    if header_len as usize != BUNDLE_HEADER_LEN {
        return Err(BundleError::HeaderLength(header_len));
    }
    if *key == [0u8; 32] {
        return Err(BundleError::NoKeyEnrolled);
    }
    let image_id = key_id(key);
    let bundle_id: [u8; 8] = array(&header[56..64]);
    if bundle_id != image_id {
        return Err(BundleError::OtherKey {
            bundle: bundle_id,
            image: image_id,
        });
    }
    let verifying = VerifyingKey::from_bytes(key).map_err(|_| BundleError::BadKey)?;
    let signature = Signature::from_bytes(&array(&header[SIGNED_LEN..BUNDLE_HEADER_LEN]));
    verifying
        .verify_strict(&header[..SIGNED_LEN], &signature)
        .map_err(|_| BundleError::BadSignature)?;
    let payload_len = u64::from_le_bytes(array(&header[16..24]));
    let need = (BUNDLE_HEADER_LEN as u64).saturating_add(payload_len);
    if have < need {
        return Err(BundleError::Truncated { have, need });
    }
    let payload = &bytes[BUNDLE_HEADER_LEN..need as usize];
    if Sha256::digest(payload)[..] != header[24..56] {
        return Err(BundleError::DigestMismatch);
    }
    Ok(payload)
}

fn array<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(bytes);
    out
}

/// Signs `payload` into a bundle with the ed25519 secret key `secret`.
#[cfg(feature = "std")]
pub fn seal(payload: &[u8], secret: &[u8; 32]) -> Vec<u8> {
    use ed25519_dalek::{Signer, SigningKey};
    let signing = SigningKey::from_bytes(secret);
    let public = signing.verifying_key().to_bytes();
    let mut out = Vec::with_capacity(BUNDLE_HEADER_LEN + payload.len());
    out.extend_from_slice(&BUNDLE_MAGIC);
    out.extend_from_slice(&BUNDLE_REVISION.to_le_bytes());
    out.extend_from_slice(&(BUNDLE_HEADER_LEN as u32).to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&Sha256::digest(payload));
    out.extend_from_slice(&key_id(&public));
    let signature = signing.sign(&out[..SIGNED_LEN]);
    out.extend_from_slice(&signature.to_bytes());
    out.extend_from_slice(payload);
    out
}

/// The public key of an ed25519 secret key.
#[cfg(feature = "std")]
pub fn public_key(secret: &[u8; 32]) -> PublicKey {
    ed25519_dalek::SigningKey::from_bytes(secret)
        .verifying_key()
        .to_bytes()
}

/// 64 hex digits (either case) as 32 bytes: a `token_sha256` in a plan, a
/// signing key file.
pub fn parse_hex32(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// SHA-256 of a management token, as bundles carry it.
pub fn token_digest(token: &[u8]) -> [u8; 32] {
    sha256(token)
}

/// SHA-256 of `bytes` (images, tokens).
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

#[cfg(all(test, feature = "std"))]
mod tests {
    use super::*;

    const SECRET: [u8; 32] = [7u8; 32];
    const OTHER: [u8; 32] = [9u8; 32];

    fn payload() -> Vec<u8> {
        let mut p = b"PINFPAYL".to_vec();
        p.extend((0..5000u32).map(|i| (i * 31) as u8));
        p
    }

    #[test]
    fn a_sealed_bundle_opens_to_its_payload() {
        let bundle = seal(&payload(), &SECRET);

        assert_eq!(open(&bundle, &public_key(&SECRET)), Ok(&payload()[..]));
    }

    #[test]
    fn trailing_padding_is_ignored() {
        let mut bundle = seal(&payload(), &SECRET);
        bundle.extend_from_slice(&[0u8; 4096]);

        assert_eq!(open(&bundle, &public_key(&SECRET)), Ok(&payload()[..]));
    }

    #[test]
    fn another_key_is_named_as_such() {
        let bundle = seal(&payload(), &OTHER);

        let err = open(&bundle, &public_key(&SECRET)).unwrap_err();

        assert_eq!(
            err,
            BundleError::OtherKey {
                bundle: key_id(&public_key(&OTHER)),
                image: key_id(&public_key(&SECRET)),
            }
        );
    }

    #[test]
    fn an_image_without_a_key_refuses_every_bundle() {
        let bundle = seal(&payload(), &SECRET);

        assert_eq!(open(&bundle, &[0u8; 32]), Err(BundleError::NoKeyEnrolled));
    }

    #[test]
    fn a_changed_payload_byte_is_a_digest_mismatch() {
        let mut bundle = seal(&payload(), &SECRET);
        let last = bundle.len() - 1;
        bundle[last] ^= 1;

        assert_eq!(
            open(&bundle, &public_key(&SECRET)),
            Err(BundleError::DigestMismatch)
        );
    }

    #[test]
    fn a_changed_header_byte_fails_the_signature() {
        let mut bundle = seal(&payload(), &SECRET);
        // The payload length: the digest alone would not catch a shorter
        // payload whose length was edited to match.
        bundle[16] ^= 1;

        assert_eq!(
            open(&bundle, &public_key(&SECRET)),
            Err(BundleError::BadSignature)
        );
    }

    #[test]
    fn truncation_at_every_length_is_refused_without_panic() {
        let bundle = seal(&payload(), &SECRET);
        let key = public_key(&SECRET);
        for len in 0..bundle.len() {
            let err = open(&bundle[..len], &key).unwrap_err();
            assert!(
                matches!(err, BundleError::Truncated { .. } | BundleError::BadMagic),
                "{len}: {err:?}"
            );
        }
    }

    #[test]
    fn bad_magic_revision_and_header_length_are_named() {
        let key = public_key(&SECRET);
        let good = seal(&payload(), &SECRET);
        let mut b = good.clone();
        b[0] = b'X';
        assert_eq!(open(&b, &key), Err(BundleError::BadMagic));
        let mut b = good.clone();
        b[8] = 2;
        assert_eq!(open(&b, &key), Err(BundleError::Revision(2)));
        let mut b = good;
        b[12] = 64;
        assert_eq!(open(&b, &key), Err(BundleError::HeaderLength(64)));
    }

    #[test]
    fn every_single_bit_flip_in_the_header_is_refused() {
        let good = seal(&payload(), &SECRET);
        let key = public_key(&SECRET);
        for byte in 0..BUNDLE_HEADER_LEN {
            for bit in 0..8 {
                let mut b = good.clone();
                b[byte] ^= 1 << bit;
                assert!(open(&b, &key).is_err(), "flip {byte}.{bit} accepted");
            }
        }
    }

    #[test]
    fn messages_name_the_reason() {
        let text = BundleError::OtherKey {
            bundle: [0xab; 8],
            image: [0x01; 8],
        }
        .to_string();
        assert_eq!(
            text,
            "signed by key abababababababab, this image trusts key 0101010101010101"
        );
    }
}
