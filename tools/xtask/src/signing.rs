//! The bundle signing key: an ed25519 secret the xtask keeps on the build
//! host, whose public half is enrolled in every image it assembles
//! (`image::enrol_key`) and whose signature every boot bundle carries
//! (`pinfold_config::bundle`). `PINFOLD_SIGNING_KEY` names the file; by
//! default it is `target/pinfold/keys/bundle-signing.key`, made on first
//! use. The file holds the 32 secret bytes as 64 hex digits; it is created
//! with mode 0600. Losing it means re-imaging every server (their images
//! trust only its public key); leaking it means anyone can make bundles
//! those servers boot. docs/DEPLOY.md says how to keep it.

use std::fs;
use std::io::Read;
use std::path::PathBuf;

use crate::error::{IoContext, XtaskError};
use crate::Workspace;

/// Environment variable naming the key file.
pub const SIGNING_KEY_ENV: &str = "PINFOLD_SIGNING_KEY";
/// The key file when the variable is unset, relative to the workspace.
const DEFAULT_KEY: &str = "target/pinfold/keys/bundle-signing.key";

/// A loaded signing key.
pub struct SigningKey {
    pub secret: [u8; 32],
    pub public: [u8; 32],
}

impl SigningKey {
    /// The key named by `PINFOLD_SIGNING_KEY`, or the default one (made
    /// now if it does not exist yet; a named file must exist).
    pub fn load_or_create(ws: &Workspace) -> Result<Self, XtaskError> {
        let named = std::env::var_os(SIGNING_KEY_ENV).filter(|v| !v.is_empty());
        let path = match &named {
            Some(p) => PathBuf::from(p),
            None => ws.root.join(DEFAULT_KEY),
        };
        if named.is_none() && !path.exists() {
            create(&path)?;
            println!(
                "xtask: made a bundle signing key at {} (keep it: images trust only it)",
                ws.relative(&path)
            );
        }
        let text = fs::read_to_string(&path).context(|| {
            format!(
                "reading the bundle signing key {} ({SIGNING_KEY_ENV})",
                path.display()
            )
        })?;
        let secret = pinfold_config::bundle::parse_hex32(text.trim()).ok_or_else(|| {
            XtaskError::BadFile {
                path: path.clone(),
                why: "a bundle signing key is 64 hex digits".into(),
            }
        })?;
        Ok(SigningKey {
            secret,
            public: pinfold_config::bundle::public_key(&secret),
        })
    }
}

fn create(path: &std::path::Path) -> Result<(), XtaskError> {
    let secret = random_bytes::<32>()?;
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).context(|| format!("creating {}", dir.display()))?;
    }
    let mut options = fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(path)
        .context(|| format!("creating {}", path.display()))?;
    std::io::Write::write_all(&mut file, format!("{}\n", hex(&secret)).as_bytes())
        .context(|| format!("writing {}", path.display()))
}

/// `N` bytes from the kernel's CSPRNG.
pub fn random_bytes<const N: usize>() -> Result<[u8; N], XtaskError> {
    let mut out = [0u8; N];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut out))
        .context(|| "reading /dev/urandom".to_string())?;
    Ok(out)
}

/// Lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    pinfold_config::bundle::Hex(bytes).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips() {
        let bytes: [u8; 32] = std::array::from_fn(|i| (i * 7) as u8);

        assert_eq!(
            pinfold_config::bundle::parse_hex32(&hex(&bytes)),
            Some(bytes)
        );
        assert_eq!(pinfold_config::bundle::parse_hex32("00"), None);
        assert_eq!(pinfold_config::bundle::parse_hex32(&"zz".repeat(32)), None);
    }
}
