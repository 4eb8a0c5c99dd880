//! `cargo xtask pxe --out DIR [--config PLAN] [--host MAC=PLAN ...]`: a
//! complete TFTP/HTTP tree for deploying Pinfold over the network. One
//! generic image for every server, and one signed boot bundle per host
//! (plus a default), selected by MAC the way each boot loader does it:
//!
//! ```text
//! DIR/pinfold.efi                      the generic image (PE/COFF + arm64 Image)
//! DIR/bundles/default.bundle           --config's plan, signed
//! DIR/bundles/01-<mac>.bundle          each --host's plan, signed
//! DIR/boot.scr.uimg, boot.scr          U-Boot: `pxe get; pxe boot`
//! DIR/pxelinux.cfg/01-<mac>, default   U-Boot pxe / pxelinux: image + bundle as initrd (booti)
//! DIR/grub/grub.cfg-01-<mac>, grub.cfg GRUB: `linux` the image, `initrd` the bundle
//! DIR/README.md                        how to point a DHCP server (dnsmasq) at it
//! DIR/tls-cert.pem                     the management API's certificate (clients pin it)
//! ```
//!
//! Each bundle's management token is made here, printed once, and only its
//! SHA-256 goes into the bundle (a plan that sets `token` or `token_sha256`
//! keeps its own). The tree holds no secret: the signing key stays on the
//! build host (`signing.rs`).

use std::fs;
use std::path::{Path, PathBuf};

use crate::build::Builder;
use crate::cmd;
use crate::error::{IoContext, XtaskError};
use crate::qemu::Board;
use crate::signing::{hex, random_bytes};
use crate::Workspace;

/// What `cargo xtask pxe` was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    pub out: PathBuf,
    /// The plan of hosts without a bundle of their own.
    pub default: PathBuf,
    /// Per-host plans.
    pub hosts: Vec<(Mac, PathBuf)>,
}

/// A NIC's MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mac(pub [u8; 6]);

impl Mac {
    /// `52:54:00:12:34:56` or `52-54-00-12-34-56`, any case.
    pub fn parse(text: &str) -> Option<Mac> {
        let parts: Vec<&str> = text.split([':', '-']).collect();
        if parts.len() != 6 {
            return None;
        }
        let mut mac = [0u8; 6];
        for (byte, part) in mac.iter_mut().zip(parts) {
            if part.len() != 2 {
                return None;
            }
            *byte = u8::from_str_radix(part, 16).ok()?;
        }
        Some(Mac(mac))
    }

    /// `01-52-54-00-12-34-56`: the ARP hardware type (Ethernet) and the
    /// address, as pxelinux, U-Boot's `pxe get` and GRUB name per-host files.
    pub fn file_name(&self) -> String {
        // The name the image looks for under UEFI (hv::efi), one definition.
        pinfold_hv::efi::mac_name(&self.0)
    }

    /// `52:54:00:12:34:56`.
    pub fn colons(&self) -> String {
        let bytes: Vec<String> = self.0.iter().map(|b| format!("{b:02x}")).collect();
        bytes.join(":")
    }
}

/// One bundle written into the tree.
#[derive(Debug, Clone)]
pub struct HostBundle {
    /// None: the default bundle.
    pub mac: Option<Mac>,
    pub plan: PathBuf,
    /// Path inside the tree, e.g. `bundles/default.bundle`.
    pub file: String,
    pub size: u64,
    /// The token made for it (None when the plan sets its own).
    pub token: Option<String>,
    pub board: Board,
}

/// The tree `write_tree` made.
#[derive(Debug)]
pub struct Tree {
    pub dir: PathBuf,
    pub image_size: u64,
    pub bundles: Vec<HostBundle>,
}

/// The generic image's name in the tree.
pub const IMAGE_NAME: &str = "pinfold.efi";
/// The management API's certificate in the tree (for clients to pin).
pub const TLS_CERT_NAME: &str = "tls-cert.pem";
/// U-Boot's `dhcp` boot target fetches this script by name.
pub const UBOOT_SCRIPT: &str = "boot.scr.uimg";

/// Writes the tree `options` describe and prints each host's token once.
pub fn write_tree(
    ws: &Workspace,
    builder: &mut Builder<'_>,
    options: &Options,
) -> Result<Tree, XtaskError> {
    let dir = &options.out;
    for sub in ["bundles", "pxelinux.cfg", "grub"] {
        let path = dir.join(sub);
        fs::create_dir_all(&path).context(|| format!("creating {}", path.display()))?;
    }
    let image = builder.generic_image()?;
    let image_size = copy(&image, &dir.join(IMAGE_NAME))?;

    let mut bundles = Vec::new();
    let hosts = std::iter::once((None, &options.default))
        .chain(options.hosts.iter().map(|(mac, plan)| (Some(*mac), plan)));
    for (mac, plan) in hosts {
        let bundle = write_bundle(ws, builder, dir, mac, plan)?;
        let config = pxelinux_cfg(&bundle);
        let name = bundle.mac.map_or("default".into(), |m| m.file_name());
        write(&dir.join("pxelinux.cfg").join(&name), &config)?;
        let grub = match bundle.mac {
            Some(m) => format!("grub.cfg-{}", m.file_name()),
            None => "grub.cfg".into(),
        };
        let config = match bundle.mac {
            Some(_) => grub_cfg(&bundle),
            None => {
                let macs: Vec<Mac> = options.hosts.iter().map(|(mac, _)| *mac).collect();
                grub_default_cfg(&bundle, &macs)
            }
        };
        write(&dir.join("grub").join(grub), &config)?;
        bundles.push(bundle);
    }
    write(&dir.join("boot.scr"), UBOOT_SCRIPT_TEXT)?;
    cmd::run(
        std::process::Command::new("mkimage")
            .args(["-A", "arm64", "-T", "script", "-C", "none", "-n", "Pinfold"])
            .arg("-d")
            .arg(dir.join("boot.scr"))
            .arg(dir.join(UBOOT_SCRIPT)),
    )?;
    write(&dir.join("README.md"), &readme(&bundles))?;
    // The management API's certificate (never its key, which is in the
    // manager's image only): what clients pin (docs/DEPLOY.md,
    // "Certificates").
    let cert = ws.root.join("target/pinfold/tls/cert.pem");
    copy(&cert, &dir.join(TLS_CERT_NAME))?;
    println!(
        "xtask: {} ({IMAGE_NAME} {image_size} bytes, {} bundle(s))",
        dir.display(),
        bundles.len()
    );
    if let Ok(der) = fs::read(ws.root.join("target/pinfold/tls/cert.der")) {
        println!(
            "xtask: management API certificate {TLS_CERT_NAME}: SHA-256 fingerprint {} (every bundle of this tree)",
            hvctl::tls::Pin::of_der(&der)
        );
    }
    for b in &bundles {
        let host = b.mac.map_or("default".into(), |m| m.colons());
        match &b.token {
            Some(token) => println!(
                "xtask: host {host}: management token {token} (printed once; the bundle holds only its SHA-256)"
            ),
            None => println!("xtask: host {host}: management token set by the plan"),
        }
    }
    Ok(Tree {
        dir: dir.clone(),
        image_size,
        bundles,
    })
}

fn write_bundle(
    ws: &Workspace,
    builder: &mut Builder<'_>,
    dir: &Path,
    mac: Option<Mac>,
    plan: &Path,
) -> Result<HostBundle, XtaskError> {
    let plan_path = ws.resolve(plan);
    let mut config = pinfold_config::load(&plan_path)?;
    let mut token = None;
    if let Some(mgmt) = config.partitions.iter_mut().find(|p| p.management) {
        if mgmt.token.is_none() && mgmt.token_sha256.is_none() {
            let made = hex(&random_bytes::<16>()?);
            mgmt.token_sha256 = Some(hex(&pinfold_config::bundle::token_digest(made.as_bytes())));
            token = Some(made);
        }
    }
    let (bytes, board) = builder.bundle(&config, &plan_path)?;
    let file = format!(
        "bundles/{}.bundle",
        mac.map_or("default".into(), |m| m.file_name())
    );
    write_bytes(&dir.join(&file), &bytes)?;
    Ok(HostBundle {
        mac,
        plan: plan.to_path_buf(),
        file,
        size: bytes.len() as u64,
        token,
        board,
    })
}

/// The U-Boot script the `dhcp` boot target runs: the host's pxelinux.cfg
/// (by MAC, then by IP, then `default`) and `pxe boot`, which starts the
/// image with booti and hands the bundle over as the initrd. Without it
/// U-Boot's DHCP target would fall through to `bootefi` of whatever the
/// DHCP server names.
const UBOOT_SCRIPT_TEXT: &str = "\
# Pinfold: pick this host's boot bundle by MAC (pxelinux.cfg/01-<mac>, then
# default) and start the generic image with booti, the bundle as initrd.
echo Pinfold: pxe get for ${ethaddr}
pxe get && pxe boot
echo Pinfold: no pxelinux.cfg entry booted
";

/// The comment line both boot loader configs start with.
fn config_comment(b: &HostBundle) -> String {
    let host = b
        .mac
        .map_or("any host without its own file".into(), |m| m.colons());
    format!(
        "# Pinfold for {host}: plan {} (made by cargo xtask pxe)\n",
        b.plan.display()
    )
}

fn pxelinux_cfg(b: &HostBundle) -> String {
    format!(
        "{}default pinfold\nprompt 0\ntimeout 0\n\n\
         label pinfold\n  kernel {IMAGE_NAME}\n  initrd {}\n",
        config_comment(b),
        b.file,
    )
}

/// GRUB's title of the entry (it prints "Booting `<title>'"): the host it
/// is for, so a console shows which file GRUB took.
pub fn grub_title(mac: Option<Mac>) -> String {
    format!("Pinfold ({})", mac.map_or("default".into(), |m| m.colons()))
}

fn grub_cfg(b: &HostBundle) -> String {
    format!(
        "{}set timeout=0\n\
         menuentry \"{}\" {{\n  linux /{IMAGE_NAME}\n  initrd /{}\n}}\n",
        config_comment(b),
        grub_title(b.mac),
        b.file,
    )
}

/// The default grub.cfg: first each host with its own file goes to
/// it by the MAC GRUB booted from. Debian's grubnetaa64.efi (GRUB 2.06)
/// reads only `$prefix/grub.cfg` (its built-in config sources it; it never
/// looks for `grub.cfg-01-<mac>` itself, as upstream's `normal` does), so
/// the per-MAC choice is made here, with nothing but `if`, `[` and
/// `configfile`. GRUB prints MACs in lower case, as `colons` does.
fn grub_default_cfg(b: &HostBundle, macs: &[Mac]) -> String {
    let mut text = config_comment(b);
    for mac in macs {
        text += &format!(
            "if [ \"$net_default_mac\" = \"{}\" ]; then\n  configfile $prefix/grub.cfg-{}\nfi\n",
            mac.colons(),
            mac.file_name()
        );
    }
    text + &grub_cfg(b)[config_comment(b).len()..]
}

fn readme(bundles: &[HostBundle]) -> String {
    let mut hosts = String::new();
    for b in bundles {
        let host = b.mac.map_or("default".into(), |m| m.colons());
        hosts += &format!(
            "| {host} | {} | `{}` | {} |\n",
            b.plan.display(),
            b.file,
            b.size
        );
    }
    format!(
        "# Pinfold network boot tree\n\n\
         Made by `cargo xtask pxe`. Serve this directory over TFTP (and/or HTTP) and\n\
         point your DHCP server's boot file at it. Every server boots the same image,\n\
         `{IMAGE_NAME}`; each picks its own signed boot bundle by MAC.\n\n\
         | host | plan | bundle | bytes |\n|---|---|---|---|\n{hosts}\n\
         ## How each firmware finds its bundle\n\n\
         - U-Boot: its `dhcp` boot target runs `{UBOOT_SCRIPT}`, which runs `pxe get`\n  \
           (`pxelinux.cfg/01-<mac>`, then `default`) and `pxe boot`: booti of the image\n  \
           with the bundle as initrd.\n\
         - UEFI PXE or HTTP boot: the boot file is `{IMAGE_NAME}` itself; it fetches\n  \
           `bundles/01-<mac>.bundle`, else `bundles/default.bundle`, from the directory\n  \
           it was loaded from.\n\
         - GRUB (Debian's grubnetaa64.efi, prefix `/grub`, as the DHCP boot file): it\n  \
           reads `grub/grub.cfg`, which sends each host to its `grub/grub.cfg-01-<mac>`\n  \
           by `$net_default_mac`: `linux` the image, `initrd` the bundle.\n\n\
         ## dnsmasq\n\n\
         ```\n\
         # /etc/dnsmasq.d/pinfold.conf: DHCP on the management network, TFTP from this tree.\n\
         enable-tftp\n\
         tftp-root={dir}\n\
         dhcp-range=192.0.2.100,192.0.2.199,12h\n\
         # U-Boot says who it is in the vendor class.\n\
         dhcp-vendorclass=set:uboot,U-Boot\n\
         dhcp-boot=tag:uboot,{UBOOT_SCRIPT}\n\
         # UEFI PXE on arm64 (client architecture 11): the image itself.\n\
         dhcp-match=set:efi-arm64,option:client-arch,11\n\
         dhcp-boot=tag:efi-arm64,tag:!uboot,{IMAGE_NAME}\n\
         # UEFI HTTP boot on arm64 (client architecture 19): a URL, and the vendor class it expects.\n\
         dhcp-match=set:efi-http,option:client-arch,19\n\
         dhcp-option-force=tag:efi-http,60,HTTPClient\n\
         dhcp-boot=tag:efi-http,http://192.0.2.1/pinfold/{IMAGE_NAME}\n\
         ```\n\n\
         The bundles are signed: a server refuses one that the build host's key did\n\
         not sign or that was changed, and prints why on its console. They hold no\n\
         token, only its SHA-256. See docs/DEPLOY.md in the Pinfold tree.\n",
        dir = "/srv/tftp/pinfold",
    )
}

fn copy(from: &Path, to: &Path) -> Result<u64, XtaskError> {
    fs::copy(from, to).context(|| format!("copying {} to {}", from.display(), to.display()))
}

fn write(path: &Path, text: &str) -> Result<(), XtaskError> {
    write_bytes(path, text.as_bytes())
}

fn write_bytes(path: &Path, bytes: &[u8]) -> Result<(), XtaskError> {
    fs::write(path, bytes).context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mac_parses_with_colons_or_dashes_and_names_files_like_pxelinux() {
        let mac = Mac::parse("52:54:00:AB:cd:0f").unwrap();

        assert_eq!(Mac::parse("52-54-00-ab-cd-0f"), Some(mac));
        assert_eq!(mac.file_name(), "01-52-54-00-ab-cd-0f");
        assert_eq!(mac.colons(), "52:54:00:ab:cd:0f");
    }

    #[test]
    fn malformed_macs_are_refused() {
        for bad in [
            "52:54:00:ab:cd",
            "52:54:00:ab:cd:0f:11",
            "5:54:00:ab:cd:0f",
            "zz:54:00:ab:cd:0f",
            "",
        ] {
            assert_eq!(Mac::parse(bad), None, "{bad}");
        }
    }

    fn default_plan_bundle(mac: Option<Mac>, file: &str) -> HostBundle {
        HostBundle {
            mac,
            plan: "vm-configs/qemu-virt/default.toml".into(),
            file: file.into(),
            size: 1,
            token: None,
            board: Board {
                cpus: 4,
                memory: 2 << 30,
                nic: true,
                partition_nics: crate::qemu::NicSlots::NONE,
            },
        }
    }

    #[test]
    fn pxelinux_entry_names_image_and_bundle_relative_to_the_tree() {
        let b = default_plan_bundle(
            Mac::parse("52:54:00:12:34:56"),
            "bundles/01-52-54-00-12-34-56.bundle",
        );

        let cfg = pxelinux_cfg(&b);

        assert!(cfg.contains("\n  kernel pinfold.efi\n"));
        assert!(cfg.contains("\n  initrd bundles/01-52-54-00-12-34-56.bundle\n"));
        assert!(grub_cfg(&b).contains("initrd /bundles/01-52-54-00-12-34-56.bundle"));
    }

    #[test]
    fn default_grub_cfg_sends_each_host_to_its_own_file_by_mac() {
        let b = default_plan_bundle(None, "bundles/default.bundle");
        let macs = [Mac::parse("52:54:00:12:34:56").unwrap()];

        let cfg = grub_default_cfg(&b, &macs);

        assert!(cfg.starts_with("# Pinfold for any host without its own file"));
        let dispatch = "if [ \"$net_default_mac\" = \"52:54:00:12:34:56\" ]; then\n  \
                        configfile $prefix/grub.cfg-01-52-54-00-12-34-56\nfi\n";
        let at = cfg.find(dispatch).expect("the per-MAC dispatch");
        assert!(at < cfg.find("menuentry").expect("the default entry"));
        assert!(cfg.contains("initrd /bundles/default.bundle"));
        assert_eq!(cfg.matches("# Pinfold").count(), 1);
    }
}
