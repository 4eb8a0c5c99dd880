//! Boot tests of deployment: firmware fetches the generic image and a
//! host's signed boot bundle from the tree `cargo xtask pxe` writes, over
//! QEMU's user-network TFTP, with no keystroke; and the hypervisor refuses
//! a bundle that was changed. UEFI (edk2) starts the same image as an EFI
//! application over PXE and over HTTP boot; Debian's GRUB 2.06 netboot
//! image loads it with its bundle on an ACPI machine.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::api_checks::{self, Outcome, Stack};
use crate::build::{Builder, DEFAULT_CONFIG};
use crate::harness::{Line, QemuRun};
use crate::pxe::{self, Mac, Tree};
use crate::qemu::{qemu_command, Board, Extra, Netboot, Uefi, UefiFirmware};
use crate::uefi;
use crate::Workspace;

/// U-Boot for QEMU virt (Debian's u-boot-qemu).
pub const UBOOT: &str = "/usr/lib/u-boot/qemu_arm64/u-boot.bin";
/// The host that boots the default plan from its own per-MAC file.
const HOST_A: &str = "52:54:00:12:34:56";
/// A second host: the same image, another plan (the isolation probe's).
const HOST_B: &str = "52:54:00:12:34:57";
const HOST_B_PLAN: &str = "vm-configs/qemu-virt/test-isolation.toml";

/// What a deployment test works with: the suite's builder, the tree
/// (made on first use and shared by the tests of one run) and its log.
pub struct Deploy<'c, 'w> {
    pub ws: &'w Workspace,
    pub builder: &'c mut Builder<'w>,
    pub tree: &'c mut Option<Tree>,
    pub log: PathBuf,
}

/// The tree the deployment tests boot from, written once per test run.
fn tree<'t>(
    ws: &Workspace,
    builder: &mut Builder<'_>,
    cached: &'t mut Option<Tree>,
) -> Result<&'t Tree, String> {
    if cached.is_none() {
        let options = pxe::Options {
            out: ws.root.join("target/pinfold/test-pxe"),
            default: PathBuf::from(DEFAULT_CONFIG),
            hosts: vec![
                (mac(HOST_A), PathBuf::from(DEFAULT_CONFIG)),
                (mac(HOST_B), PathBuf::from(HOST_B_PLAN)),
            ],
        };
        let _ = std::fs::remove_dir_all(&options.out);
        let made = pxe::write_tree(ws, builder, &options)
            .map_err(|err| format!("cargo xtask pxe failed: {err}"))?;
        *cached = Some(made);
    }
    cached.as_ref().ok_or_else(|| "no tree".to_string())
}

fn mac(text: &str) -> Mac {
    Mac::parse(text).expect("a constant MAC")
}

fn bundle_for<'t>(tree: &'t Tree, host: &str) -> Result<&'t pxe::HostBundle, String> {
    tree.bundles
        .iter()
        .find(|b| b.mac == Some(mac(host)))
        .ok_or_else(|| format!("no bundle for {host} in the tree"))
}

fn expect(qemu: &QemuRun, needle: &str, from: usize, deadline: Instant) -> Result<Line, String> {
    qemu.wait_for(&format!("`{needle}`"), from, deadline, |line| {
        line.contains(needle)
    })
    .map_err(|err| err.to_string())
}

/// U-Boot netbooting `host` from the tree: `dhcp` fetches boot.scr.uimg,
/// which runs `pxe get` (the host's pxelinux.cfg by MAC) and `pxe boot`.
fn uboot_netboot(tree: &Tree, board: &Board, host: &str, log: &Path) -> Result<QemuRun, String> {
    let extra = Extra {
        firmware: Some((UBOOT.into(), 0)),
        netboot: Some(Netboot {
            tftp: tree.dir.clone(),
            bootfile: pxe::UBOOT_SCRIPT.into(),
            mac: host.into(),
        }),
        ..Extra::default()
    };
    let cmd = qemu_command(board, &tree.dir.join(pxe::IMAGE_NAME), &extra);
    QemuRun::spawn(cmd, log).map_err(|err| err.to_string())
}

/// Checks that U-Boot took `host`'s own pxelinux.cfg and that the
/// hypervisor opened the bundle it names; returns the bundle line.
fn booted_own_bundle(
    qemu: &QemuRun,
    tree: &Tree,
    host: &str,
    deadline: Instant,
) -> Result<Line, String> {
    let bundle = bundle_for(tree, host)?;
    // Only the host's own pxelinux.cfg names its per-MAC bundle (`default`
    // names default.bundle).
    expect(
        qemu,
        &format!("Retrieving file: {}", bundle.file),
        0,
        deadline,
    )?;
    let line = expect(qemu, "pinfold: boot bundle: ", 0, deadline)?;
    let size = format!("boot bundle: {} bytes", bundle.size);
    if !line.text.contains(&size) {
        return Err(format!(
            "the hypervisor did not boot {}'s bundle ({size}): `{}`",
            bundle.file, line.text
        ));
    }
    Ok(line)
}

/// Tier 2: U-Boot with no keystroke netboots two hosts from one tree. Host
/// A (its own pxelinux.cfg by MAC, the default plan) boots its partitions
/// and its REST API answers, through the very NIC U-Boot used, to the
/// token `cargo xtask pxe` made; host B boots a different plan from the
/// same image.
pub fn pxe_uboot(d: Deploy<'_, '_>) -> Outcome {
    let log = &d.log;
    let tree = tree(d.ws, d.builder, d.tree)?;
    let a = bundle_for(tree, HOST_A)?;
    let token = a
        .token
        .clone()
        .ok_or("cargo xtask pxe made no token for the default plan")?;
    api_checks::port_is_free()?;
    let qemu = uboot_netboot(tree, &a.board, HOST_A, log)?;
    let deadline = Instant::now() + Duration::from_secs(300);
    let bundle_line = booted_own_bundle(&qemu, tree, HOST_A, deadline)?;
    for name in ["alpha", "beta"] {
        expect(
            &qemu,
            &format!("[{name}] PINFOLD-GUEST-UP name={name} "),
            0,
            deadline,
        )?;
    }
    let mut stack = Stack::with_token(qemu, token);
    let first = api_checks::token_accepted(&mut stack)?;
    drop(stack);

    let b = bundle_for(tree, HOST_B)?;
    let log_b = log.with_file_name("pxe-uboot-host-b.log");
    let qemu = uboot_netboot(tree, &b.board, HOST_B, &log_b)?;
    let deadline = Instant::now() + Duration::from_secs(300);
    booted_own_bundle(&qemu, tree, HOST_B, deadline)?;
    let up = expect(&qemu, "[steady] PINFOLD-GUEST-UP", 0, deadline)?;
    Ok(vec![
        format!(
            "host {HOST_A}: bundle at {:.1} s, API answered the bundle's token {:.1} s after QEMU start",
            bundle_line.at.as_secs_f64(),
            first.as_secs_f64()
        ),
        format!(
            "host {HOST_B}: {} booted from the same image, steady up at {:.1} s",
            b.plan.display(),
            up.at.as_secs_f64()
        ),
        format!(
            "image {} bytes, default bundle {} bytes",
            tree.image_size,
            tree.bundles.first().map_or(0, |b| b.size)
        ),
    ])
}

/// Tier 2: a bundle changed after signing is refused at boot with the
/// reason on the console, and nothing boots. (QEMU `-kernel` + `-initrd`:
/// the same /chosen handover U-Boot makes.)
pub fn bundle_refused(d: Deploy<'_, '_>) -> Outcome {
    let (ws, log) = (d.ws, &d.log);
    let tree = tree(d.ws, d.builder, d.tree)?;
    let good = tree.dir.join(&bundle_for(tree, HOST_B)?.file);
    let mut bytes = std::fs::read(&good).map_err(|e| format!("{}: {e}", good.display()))?;
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    let tampered = ws.root.join("target/pinfold/test-tampered.bundle");
    std::fs::write(&tampered, &bytes).map_err(|e| format!("{}: {e}", tampered.display()))?;
    let board = bundle_for(tree, HOST_B)?.board;
    let extra = Extra {
        args: vec!["-initrd".into(), tampered.display().to_string()],
        ..Extra::default()
    };
    let cmd = qemu_command(&board, &tree.dir.join(pxe::IMAGE_NAME), &extra);
    let qemu = QemuRun::spawn(cmd, log).map_err(|err| err.to_string())?;
    let deadline = Instant::now() + Duration::from_secs(120);
    let refused = expect(&qemu, "pinfold: the boot bundle was refused: ", 0, deadline)?;
    if !refused
        .text
        .contains("the payload was changed after signing")
    {
        return Err(format!("refused for another reason: `{}`", refused.text));
    }
    if qemu.lines().iter().any(|l| l.text.contains("booting vCPU")) {
        return Err("a partition booted from a refused bundle".into());
    }
    Ok(vec![format!("refused: `{}`", refused.text.trim())])
}

/// After a UEFI firmware started the generic image for host A: the image
/// took A's own bundle from `source` (`TFTP` or `HTTP`), named `file`,
/// with the size `cargo xtask pxe` wrote; the hypervisor opened the signed
/// bundle; the API answers to A's token. Notes the times from QEMU start.
fn uefi_booted_own_bundle(
    qemu: QemuRun,
    tree: &Tree,
    source: &str,
    file: &str,
    host_from: &str,
) -> Outcome {
    let a = bundle_for(tree, HOST_A)?;
    let token = a
        .token
        .clone()
        .ok_or("cargo xtask pxe made no token for the default plan")?;
    let deadline = Instant::now() + Duration::from_secs(300);
    let entered = expect(&qemu, "UEFI application at EL2", 0, deadline)?;
    let fetched = expect(&qemu, "Pinfold: boot bundle from ", entered.index, deadline)?;
    let wanted = format!("from {source}: {file} ({} bytes)", a.size);
    if !fetched.text.contains(&wanted) {
        return Err(format!(
            "the image did not fetch host A's own bundle (`{wanted}`): `{}`",
            fetched.text
        ));
    }
    let handed = expect(
        &qemu,
        "pinfold: booted from UEFI: ",
        fetched.index,
        deadline,
    )?;
    if !handed.text.contains(host_from) {
        return Err(format!(
            "the host was not described by {host_from}: `{}`",
            handed.text
        ));
    }
    let opened = expect(&qemu, "pinfold: boot bundle: ", handed.index, deadline)?;
    if !opened
        .text
        .contains(&format!("boot bundle: {} bytes", a.size))
    {
        return Err(format!(
            "the hypervisor did not open the fetched bundle: `{}`",
            opened.text
        ));
    }
    // The wall clock came from UEFI GetTime, before ExitBootServices.
    let got_time = expect(&qemu, "Pinfold: GetTime: ", entered.index, deadline)?;
    // Entropy from EFI_RNG_PROTOCOL (the virtio-rng device every UEFI boot
    // has), read before ExitBootServices and mixed in by the hypervisor.
    let entropy = expect(&qemu, "pinfold: entropy: ", handed.index, deadline)?;
    if !entropy.text.contains("EFI_RNG_PROTOCOL 32 bytes") {
        return Err(format!(
            "the hypervisor did not mix in EFI_RNG_PROTOCOL: `{}`",
            entropy.text.trim()
        ));
    }
    let mut stack = Stack::with_token(qemu, token);
    let first = api_checks::token_accepted(&mut stack)?;
    let clock = api_checks::check_clock()?;
    Ok(vec![
        format!("{} -> {clock}", got_time.text.trim()),
        format!(
            "image entered {:.1} s, bundle fetched {:.1} s, hypervisor {:.1} s, API answered \
             the bundle's token {:.1} s after QEMU start",
            entered.at.as_secs_f64(),
            fetched.at.as_secs_f64(),
            handed.at.as_secs_f64(),
            first.as_secs_f64()
        ),
        format!("`{}`; image {} bytes", fetched.text.trim(), tree.image_size),
        format!("`{}`", entropy.text.trim()),
    ])
}

/// Tier 2: edk2 (`-bios QEMU_EFI.fd`) PXE-boots the generic image with no
/// keystroke on a machine QEMU describes by DT only (`acpi=off`): the
/// image finds the DTB in the configuration table, fetches host A's bundle
/// over TFTP by the NIC's MAC, boots the plan, and the API answers.
pub fn pxe_uefi_dt(d: Deploy<'_, '_>) -> Outcome {
    pxe_uefi(d, false)
}

/// Tier 2: the same with QEMU describing the machine by ACPI only (edk2
/// publishes no DT): the image reads the host from the RSDP it found in the
/// configuration table (`hv::acpi`, within the memory map's ACPI ranges).
pub fn pxe_uefi_acpi(d: Deploy<'_, '_>) -> Outcome {
    pxe_uefi(d, true)
}

fn pxe_uefi(d: Deploy<'_, '_>, acpi: bool) -> Outcome {
    let tree = tree(d.ws, d.builder, d.tree)?;
    let a = bundle_for(tree, HOST_A)?;
    api_checks::port_is_free()?;
    let qemu = edk2_pxe(tree, &a.board, acpi, true, pxe::IMAGE_NAME, &d.log)?;
    let file = format!("tftp://10.0.2.2/{}", a.file);
    let host_from = if acpi {
        "host from ACPI"
    } else {
        "host from the DT"
    };
    uefi_booted_own_bundle(qemu, tree, "TFTP", &file, host_from)
}

/// Tier 2: edk2 HTTP boot of the same tree from a loopback HTTP server:
/// QEMU's DHCP sends no boot URI, so the URI is a boot entry written into
/// a copy of an initialised variable store (pflash AAVMF_CODE + that
/// copy). HTTP boot hands over no initrd: the image fetches host A's
/// bundle over HTTP beside its own URI.
pub fn uefi_http(d: Deploy<'_, '_>) -> Outcome {
    let ws = d.ws;
    let tree = tree(d.ws, d.builder, d.tree)?;
    let a = bundle_for(tree, HOST_A)?;
    let server = uefi::HttpServer::serve(&tree.dir, &d.log.with_file_name("uefi-http-server.log"))
        .map_err(|err| err.to_string())?;
    let base = format!("http://10.0.2.2:{}", server.port);
    let uri = format!("{base}/{}", pxe::IMAGE_NAME);
    let vars = ws.root.join("target/pinfold/AAVMF_VARS.uefi-http.fd");
    uefi::vars_with_boot_uri(&ws.root, &uri, &vars).map_err(|err| err.to_string())?;
    api_checks::port_is_free()?;
    let extra = Extra {
        uefi: Some(Uefi {
            firmware: UefiFirmware::Pflash {
                code: uefi::AAVMF_CODE.into(),
                vars,
            },
            acpi: false,
            el2: true,
        }),
        ..Extra::default()
    };
    // No Netboot: the NIC keeps QEMU's first MAC, which is host A's.
    let cmd = qemu_command(&a.board, &tree.dir.join(pxe::IMAGE_NAME), &extra);
    let qemu = QemuRun::spawn(cmd, &d.log).map_err(|err| err.to_string())?;
    let mut notes = uefi_booted_own_bundle(
        qemu,
        tree,
        "HTTP",
        &format!("{base}/{}", a.file),
        "host from the DT",
    )?;
    notes.push(format!("boot URI {uri}"));
    Ok(notes)
}

/// Tier 2: firmware that runs the image at EL1 (QEMU without EL2) gets the
/// reason on its console and an error status back, and goes on with its
/// next boot option; nothing of the hypervisor runs.
pub fn uefi_el1(d: Deploy<'_, '_>) -> Outcome {
    let tree = tree(d.ws, d.builder, d.tree)?;
    let a = bundle_for(tree, HOST_A)?;
    let qemu = edk2_pxe(tree, &a.board, false, false, pxe::IMAGE_NAME, &d.log)?;
    let deadline = Instant::now() + Duration::from_secs(120);
    let refused = expect(
        &qemu,
        "Pinfold needs EL2; firmware entered at EL1",
        0,
        deadline,
    )?;
    let failed = qemu
        .wait_for(
            "edk2 reporting the image's Unsupported status",
            refused.index,
            deadline,
            |line| line.contains("failed to start") && line.contains("Unsupported"),
        )
        .map_err(|err| err.to_string())?;
    if let Some(line) = qemu
        .lines()
        .iter()
        .find(|l| l.text.contains("Pinfold: boot bundle") || l.text.contains("pinfold: "))
    {
        return Err(format!("the image went on at EL1: `{}`", line.text));
    }
    Ok(vec![format!(
        "refused at {:.1} s: `{}`; firmware: `{}`",
        refused.at.as_secs_f64(),
        refused.text.trim(),
        failed.text.trim()
    )])
}

/// The DHCP boot file of the GRUB test, in the tree.
const GRUB_BOOT_FILE: &str = "grubnetaa64.efi";

/// Tier 2: edk2 on an ACPI machine (QEMU `virt` as edk2 describes it, no
/// DT table) PXE-boots Debian's arm64 GRUB 2.06 netboot image, which reads
/// the tree's grub/grub.cfg, goes to host A's own grub.cfg-01-<mac>,
/// `linux`-loads the generic image and `initrd`-loads A's bundle. That
/// GRUB has no LoadFile2: it hands the initrd over in a DT configuration
/// table it makes with only /chosen. The image must take the bundle from
/// that /chosen and the hardware from ACPI; the plan boots and the API
/// answers to A's token.
pub fn pxe_grub(d: Deploy<'_, '_>) -> Outcome {
    let grub = d
        .builder
        .grub_netboot()
        .map_err(|err| format!("Debian's arm64 GRUB: {err}"))?;
    let tree = tree(d.ws, d.builder, d.tree)?;
    let a = bundle_for(tree, HOST_A)?;
    let token = a
        .token
        .clone()
        .ok_or("cargo xtask pxe made no token for the default plan")?;
    std::fs::copy(&grub, tree.dir.join(GRUB_BOOT_FILE))
        .map_err(|e| format!("copying {} into the tree: {e}", grub.display()))?;
    api_checks::port_is_free()?;
    let qemu = edk2_pxe(tree, &a.board, true, true, GRUB_BOOT_FILE, &d.log)?;
    let deadline = Instant::now() + Duration::from_secs(300);
    let welcome = expect(&qemu, "Welcome to GRUB!", 0, deadline)?;
    // Only host A's own file has this title; grub.cfg's is "(default)".
    let title = pxe::grub_title(Some(mac(HOST_A)));
    let booting = expect(
        &qemu,
        &format!("Booting `{title}'"),
        welcome.index,
        deadline,
    )?;
    let entered = expect(&qemu, "UEFI application at EL2", booting.index, deadline)?;
    let described = expect(
        &qemu,
        "Pinfold: host described by ACPI (RSDP at ",
        entered.index,
        deadline,
    )?;
    if !described.text.contains(" only for /chosen") {
        return Err(format!(
            "GRUB installed no DT configuration table (or one describing hardware): `{}`",
            described.text
        ));
    }
    let fetched = expect(
        &qemu,
        "Pinfold: boot bundle from ",
        described.index,
        deadline,
    )?;
    let wanted = "from the DT's /chosen initrd: ";
    let size = format!(" ({} bytes)", a.size);
    if !fetched.text.contains(wanted) || !fetched.text.contains(&size) {
        return Err(format!(
            "the image did not take host A's bundle from GRUB's /chosen (`{wanted}...{size}`): `{}`",
            fetched.text
        ));
    }
    let handed = expect(
        &qemu,
        "pinfold: booted from UEFI: host from ACPI (RSDP at ",
        fetched.index,
        deadline,
    )?;
    // A refusal ends the boot with "...: halting": fail on it at once.
    let opened = qemu
        .wait_for(
            "`pinfold: boot bundle: ` (or a refusal)",
            handed.index,
            deadline,
            |line| {
                line.contains("pinfold: boot bundle: ") || line.trim_end().ends_with(": halting")
            },
        )
        .map_err(|err| err.to_string())?;
    if !opened
        .text
        .contains(&format!("boot bundle: {} bytes", a.size))
    {
        return Err(format!(
            "the hypervisor did not open the bundle GRUB loaded: `{}`",
            opened.text
        ));
    }
    for name in ["alpha", "beta"] {
        expect(
            &qemu,
            &format!("[{name}] PINFOLD-GUEST-UP name={name} "),
            opened.index,
            deadline,
        )?;
    }
    let mut stack = Stack::with_token(qemu, token);
    let first = api_checks::token_accepted(&mut stack)?;
    Ok(vec![
        format!(
            "GRUB {:.1} s, image entered {:.1} s, hypervisor {:.1} s, API answered host A's \
             token {:.1} s after QEMU start",
            welcome.at.as_secs_f64(),
            entered.at.as_secs_f64(),
            handed.at.as_secs_f64(),
            first.as_secs_f64()
        ),
        format!("`{}`", described.text.trim()),
        format!("`{}`", fetched.text.trim()),
        format!("`{}`", handed.text.trim()),
        format!("{} ({GRUB_BOOT_FILE})", crate::provision::GRUB_PACKAGE),
    ])
}

/// edk2 (`-bios QEMU_EFI.fd`) PXE-booting host A from the tree: DHCP names
/// `bootfile`, QEMU's TFTP serves the tree; `acpi` false publishes QEMU's
/// DT instead of ACPI tables, `el2` false takes EL2 away from the machine.
fn edk2_pxe(
    tree: &Tree,
    board: &Board,
    acpi: bool,
    el2: bool,
    bootfile: &str,
    log: &Path,
) -> Result<QemuRun, String> {
    let extra = Extra {
        uefi: Some(Uefi {
            firmware: UefiFirmware::Bios(uefi::QEMU_EFI.into()),
            acpi,
            el2,
        }),
        netboot: Some(Netboot {
            tftp: tree.dir.clone(),
            bootfile: bootfile.into(),
            mac: HOST_A.into(),
        }),
        ..Extra::default()
    };
    let cmd = qemu_command(board, &tree.dir.join(pxe::IMAGE_NAME), &extra);
    QemuRun::spawn(cmd, log).map_err(|err| err.to_string())
}
