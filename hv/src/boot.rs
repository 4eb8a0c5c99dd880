//! Which partition plan to boot: the signed boot bundle the boot loader
//! handed over (U-Boot/pxelinux/GRUB `initrd` or QEMU `-initrd`, found in
//! /chosen; or the bundle the EFI entry loaded), else the payload appended
//! to the image itself (`cargo xtask build`, the convenience for one
//! machine). A bundle from outside the image must carry a signature by the
//! key enrolled in the image (`pinfold_config::bundle`); the appended
//! payload is part of the image and trusted as the image is.

use pinfold_config::bundle::{self, BundleError, PublicKey};
use pinfold_config::plan::PAYLOAD_MAGIC;

/// Where the plan came from, for the console line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanSource {
    /// A signed bundle the boot loader (or the EFI entry) handed over.
    Bundle,
    /// The payload appended to the image.
    Image,
}

/// Why no plan can be booted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectError {
    /// The boot loader handed over a bundle that was refused.
    Bundle(BundleError),
    /// The boot loader handed over a bare payload (`PINFPAYL`): only signed
    /// bundles are accepted from outside the image.
    Unsigned,
    /// Neither a handed-over bundle nor an appended payload.
    Nothing,
}

impl core::fmt::Display for SelectError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SelectError::Bundle(e) => write!(f, "the boot bundle was refused: {e}"),
            SelectError::Unsigned => write!(
                f,
                "the boot loader handed over an unsigned payload; only bundles \
                 signed by `cargo xtask pxe` are accepted from outside the image"
            ),
            SelectError::Nothing => write!(
                f,
                "no partition plan: the image carries none and the boot loader \
                 handed over no bundle (initrd)"
            ),
        }
    }
}

/// The payload to boot: `handed` (what the boot loader loaded beside the
/// image) when there is one, opened against `key`; otherwise the image's
/// own `appended` payload when it has one.
pub fn select_payload<'a>(
    appended: &'a [u8],
    handed: Option<&'a [u8]>,
    key: &PublicKey,
) -> Result<(PlanSource, &'a [u8]), SelectError> {
    match handed {
        Some(bytes) if bytes.starts_with(&PAYLOAD_MAGIC) => Err(SelectError::Unsigned),
        Some(bytes) => bundle::open(bytes, key)
            .map(|payload| (PlanSource::Bundle, payload))
            .map_err(SelectError::Bundle),
        None if appended.starts_with(&PAYLOAD_MAGIC) => Ok((PlanSource::Image, appended)),
        None => Err(SelectError::Nothing),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    const SECRET: [u8; 32] = [3u8; 32];

    fn payload(tag: u8) -> Vec<u8> {
        let mut p = PAYLOAD_MAGIC.to_vec();
        p.extend([tag; 100]);
        p
    }

    #[test]
    fn a_handed_bundle_wins_over_the_appended_payload() {
        let appended = payload(1);
        let bundle = bundle::seal(&payload(2), &SECRET);
        let key = bundle::public_key(&SECRET);

        let (source, chosen) = select_payload(&appended, Some(&bundle), &key).unwrap();

        assert_eq!(source, PlanSource::Bundle);
        assert_eq!(chosen, &payload(2)[..]);
    }

    #[test]
    fn without_a_bundle_the_appended_payload_boots() {
        let appended = payload(1);

        let chosen = select_payload(&appended, None, &[0; 32]);

        assert_eq!(chosen, Ok((PlanSource::Image, &appended[..])));
    }

    #[test]
    fn a_refused_bundle_does_not_fall_back_to_the_appended_payload() {
        let appended = payload(1);
        let bundle = bundle::seal(&payload(2), &[4u8; 32]);
        let key = bundle::public_key(&SECRET);

        let err = select_payload(&appended, Some(&bundle), &key).unwrap_err();

        assert!(matches!(
            err,
            SelectError::Bundle(BundleError::OtherKey { .. })
        ));
    }

    #[test]
    fn an_unsigned_payload_from_the_boot_loader_is_refused() {
        let handed = payload(2);

        let err = select_payload(&[], Some(&handed), &bundle::public_key(&SECRET));

        assert_eq!(err, Err(SelectError::Unsigned));
    }

    #[test]
    fn nothing_at_all_is_an_error_that_says_so() {
        let err = select_payload(&[0u8; 16], None, &[0; 32]).unwrap_err();

        assert_eq!(err, SelectError::Nothing);
        assert!(alloc::format!("{err}").contains("no partition plan"));
    }
}
