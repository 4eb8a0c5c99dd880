//! What the UEFI boot tests need besides QEMU: edk2's firmware files, an
//! initialised variable store with an HTTP boot URI written into a copy of
//! it (`virt-fw-vars` from PyPI's virt-firmware, in a venv under target/),
//! and a loopback HTTP server for the netboot tree.

use std::fs;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::cmd;
use crate::error::{IoContext, XtaskError};
use crate::harness::QemuRun;

/// edk2 for QEMU's arm64 `virt` (Debian's qemu-efi-aarch64), as `-bios`.
pub const QEMU_EFI: &str = "/usr/share/qemu-efi-aarch64/QEMU_EFI.fd";
/// The same firmware split for pflash: code and an empty variable store.
pub const AAVMF_CODE: &str = "/usr/share/AAVMF/AAVMF_CODE.fd";
pub const AAVMF_VARS: &str = "/usr/share/AAVMF/AAVMF_VARS.fd";
/// The PyPI package that edits edk2 variable stores, and its version.
const VIRT_FIRMWARE: &str = "virt-firmware==26.10";

/// `virt-fw-vars`, installed once into `target/tools-venv` (Debian's
/// Python refuses system-wide pip installs).
pub fn virt_fw_vars(root: &Path) -> Result<PathBuf, XtaskError> {
    let venv = root.join("target/tools-venv");
    let tool = venv.join("bin/virt-fw-vars");
    if tool.exists() {
        return Ok(tool);
    }
    cmd::run(Command::new("python3").arg("-m").arg("venv").arg(&venv))?;
    cmd::run(
        Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet"])
            .arg(VIRT_FIRMWARE),
    )?;
    Ok(tool)
}

/// A copy of AAVMF_VARS.fd that edk2 has formatted. Debian ships the store
/// all zeros, which virt-fw-vars cannot read: edk2 writes the variable
/// store's headers on its first boot, so the copy is booted once (no NIC,
/// until its boot manager runs) and kept in target/pinfold.
pub fn initialised_vars(root: &Path) -> Result<PathBuf, XtaskError> {
    let out = root.join("target/pinfold/AAVMF_VARS.initialised.fd");
    if out.exists() {
        return Ok(out);
    }
    let fresh = root.join("target/pinfold/AAVMF_VARS.initialising.fd");
    fs::copy(AAVMF_VARS, &fresh).context(|| format!("copying {AAVMF_VARS}"))?;
    let mut qemu = Command::new("qemu-system-aarch64");
    qemu.args([
        "-M",
        "virt,virtualization=on,gic-version=3",
        "-cpu",
        "cortex-a72",
        "-m",
        "1024M",
        "-display",
        "none",
        "-serial",
        "stdio",
        "-net",
        "none",
        "-drive",
    ])
    .arg(format!(
        "if=pflash,format=raw,unit=0,readonly=on,file={AAVMF_CODE}"
    ))
    .arg("-drive")
    .arg(format!(
        "if=pflash,format=raw,unit=1,file={}",
        fresh.display()
    ));
    let log = root.join("target/pinfold/test-logs/aavmf-vars-init.log");
    let run = QemuRun::spawn(qemu, &log)?;
    run.wait_for(
        "edk2's boot manager (`BdsDxe:`)",
        0,
        Instant::now() + Duration::from_secs(120),
        |line| line.contains("BdsDxe:"),
    )
    .map_err(|err| XtaskError::Provision(format!("initialising a VARS store: {err}")))?;
    drop(run);
    fs::rename(&fresh, &out).context(|| format!("renaming {}", fresh.display()))?;
    Ok(out)
}

/// A copy of the initialised store at `out` whose BootNext is an HTTP boot
/// of `uri` (virt-fw-vars --set-boot-uri).
pub fn vars_with_boot_uri(root: &Path, uri: &str, out: &Path) -> Result<(), XtaskError> {
    let tool = virt_fw_vars(root)?;
    let vars = initialised_vars(root)?;
    cmd::run(
        Command::new(tool)
            .arg("--input")
            .arg(&vars)
            .arg("--output")
            .arg(out)
            .arg("--set-boot-uri")
            .arg(uri),
    )
}

/// Python's http.server serving a directory on 127.0.0.1 only; stopped on
/// drop. QEMU's user networking makes it 10.0.2.2:`port` for the guest.
pub struct HttpServer {
    child: Child,
    pub port: u16,
}

impl HttpServer {
    pub fn serve(dir: &Path, log: &Path) -> Result<Self, XtaskError> {
        // A port the kernel just handed out is free (nearly always still
        // when the server binds it a moment later).
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .context(|| "finding a free loopback port".into())?
            .port();
        let log = fs::File::create(log).context(|| format!("creating {}", log.display()))?;
        let err = log
            .try_clone()
            .context(|| "duplicating the HTTP log".into())?;
        let child = Command::new("python3")
            .args(["-m", "http.server", "--bind", "127.0.0.1", "--directory"])
            .arg(dir)
            .arg(port.to_string())
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .map_err(|source| XtaskError::Spawn {
                program: "python3 -m http.server".into(),
                source,
            })?;
        let server = Self { child, port };
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            if Instant::now() > deadline {
                return Err(XtaskError::Provision(format!(
                    "the HTTP server did not listen on 127.0.0.1:{port}"
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Ok(server)
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        // Our own child, by its id; nothing to do if it already exited.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
