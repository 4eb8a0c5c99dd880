//! Makes a fresh Debian bookworm machine able to build, run and test Pinfold:
//! host packages, Rust targets, and the test guest's Linux kernel and
//! initramfs. Every step checks before it acts, so a second run is quick.

use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use flate2::write::GzEncoder;
use flate2::Compression;

use crate::cmd::{self, describe};
use crate::cpio::CpioWriter;
use crate::error::{IoContext, XtaskError};
use crate::image::is_arm64_image;
use crate::Workspace;

/// Debian packages the host needs: QEMU for aarch64, dtc (to inspect the
/// DTBs the hypervisor generates) and ipxe-qemu, a mere recommendation of
/// QEMU's that holds the option ROMs (efi-virtio.rom) QEMU refuses to start a
/// virtio-net-pci NIC without. Recommends are skipped otherwise: they pull in
/// a GTK front end that a headless machine does not need.
const HOST_PACKAGES: [&str; 10] = [
    "qemu-system-arm",
    "device-tree-compiler",
    "ipxe-qemu",
    // U-Boot for QEMU's virt machine: the `uboot` test starts the image with booti.
    "u-boot-qemu",
    // mkimage: `cargo xtask pxe` wraps the U-Boot boot script (boot.scr.uimg).
    "u-boot-tools",
    // edk2 for QEMU's virt machine (QEMU_EFI.fd, AAVMF_CODE/VARS.fd): the
    // UEFI tests start the generic image as an EFI application; the ACPI
    // tables hv::acpi's host tests read were captured with it
    // (hv/src/acpi/testdata/capture.py).
    "qemu-efi-aarch64",
    // The venv under target/ that holds virt-fw-vars (PyPI virt-firmware),
    // which writes the HTTP boot entry of the `uefi-http` test (uefi.rs).
    "python3-venv",
    // The cross gcc, binutils and C headers (stdint.h) that compile ring's
    // C and assembly (the manager's TLS) for aarch64-unknown-hermit
    // (hermit.rs, CROSS_CC).
    "gcc-aarch64-linux-gnu",
    "binutils-aarch64-linux-gnu",
    "libc6-dev-arm64-cross",
];
/// Debian packages only the web UI's browser test needs (`cargo xtask
/// test`): the Chromium it drives through playwright-core, and a font with
/// Latin metrics so the screenshot shows text, not boxes.
const BROWSER_PACKAGES: [&str; 2] = ["chromium", "fonts-liberation"];
/// The Rust target of the EL2 image and the bare-metal test guest.
pub const BARE_TARGET: &str = "aarch64-unknown-none-softfloat";
/// The meta package that names the current Debian cloud kernel for arm64.
const KERNEL_META: &str = "linux-image-cloud-arm64:arm64";
const BUSYBOX_PACKAGE: &str = "busybox-static:arm64";
/// Debian's signed arm64 GRUB: its monolithic netboot image
/// (grubnetaa64.efi: tftp, efinet, linux and normal built in, prefix
/// `/grub`) is what the `pxe-grub` test PXE-boots. Debian's GRUB 2.06 has
/// no LoadFile2 initrd; the test proves the DT-table path it uses instead.
/// `GRUB_VERSION` is the one the test was written against and is fetched
/// first; when bookworm's mirror has dropped it for a newer point release,
/// the current one is fetched instead (and named in the test's notes).
pub const GRUB_PACKAGE: &str = "grub-efi-arm64-signed";
pub const GRUB_VERSION: &str = "1+2.06+13+deb12u2";
/// The netboot image inside the package.
const GRUB_NETBOOT_MEMBER: &str = "./usr/lib/grub/arm64-efi-signed/grubnetaa64.efi.signed";
/// Bumped when the initramfs layout changes, so old archives are rebuilt.
const INITRAMFS_LAYOUT: u32 = 4;
/// Kernel modules the test guest's /init loads at boot (in
/// /lib/modules/NN-name.ko, loaded in that order), each after the modules
/// its `depends=` names: `sbsa_gwdt` (and the watchdog core) drives the
/// emulated SBSA watchdog of a partition with `watchdog_s`.
pub const GUEST_MODULES: &[&str] = &["sbsa_gwdt"];
/// The generic kernel's initramfs adds the power button: `gpio_keys`
/// (KEYBOARD_GPIO, which the cloud kernel lacks) and `evdev` (its
/// /dev/input/event* device, which /init reads).
pub const GENERIC_MODULES: &[&str] = &["evdev", "gpio_keys", "sbsa_gwdt"];
/// The networked guest's initramfs (`initramfs-net.cpio.gz`, the
/// `net-partitions` plan): the cloud kernel has virtio-pci and virtio-net
/// as modules only. A file of its own, so the default initramfs (and its
/// stamp, shared by every checkout) stays as it is.
pub const NET_MODULES: &[&str] = &["sbsa_gwdt", "virtio_pci", "virtio_net"];

/// Carries "apt-get update already ran" through one xtask invocation.
#[derive(Debug, Default)]
pub struct Provisioner {
    apt_updated: bool,
}

impl Provisioner {
    pub fn new() -> Self {
        Self::default()
    }

    /// Installs the host packages and Rust components that are missing.
    pub fn host_tools(&mut self) -> Result<(), XtaskError> {
        self.packages(&HOST_PACKAGES)?;
        let targets =
            cmd::stdout_of(Command::new("rustup").args(["target", "list", "--installed"]))?;
        if !targets.lines().any(|line| line.trim() == BARE_TARGET) {
            cmd::run(Command::new("rustup").args(["target", "add", BARE_TARGET]))?;
        }
        let components =
            cmd::stdout_of(Command::new("rustup").args(["component", "list", "--installed"]))?;
        // llvm-tools for objcopy/size; clippy and rustfmt because the host
        // tier enforces them.
        for component in ["llvm-tools", "clippy", "rustfmt"] {
            if !components.lines().any(|line| line.starts_with(component)) {
                cmd::run(Command::new("rustup").args(["component", "add", component]))?;
            }
        }
        Ok(())
    }

    /// Provides target/guest/linux/Image and target/guest/initramfs.cpio.gz,
    /// downloading the Debian arm64 packages once into target/guest/cache;
    /// `workload` is the already built `pipebench` program
    /// (tools/guest-rootfs/pipebench) the initramfs carries as /bin/pipebench.
    pub fn guest_linux(&mut self, ws: &Workspace, workload: &Path) -> Result<(), XtaskError> {
        let guest = ws.root.join("target/guest");
        let cache = guest.join("cache");
        fs::create_dir_all(&cache).context(|| format!("creating {}", cache.display()))?;
        let (kernel_deb, busybox_deb) = self.guest_debs(&cache)?;

        let image = guest.join("linux/Image");
        extract_kernel(&kernel_deb, &cache, &image)?;
        let busybox = cache.join("busybox-root/bin/busybox");
        extract_once(
            &busybox_deb,
            &cache.join("busybox-root"),
            "./bin/busybox",
            &busybox,
        )?;

        let init = ws.root.join("tools/guest-rootfs/init");
        for (wanted, file) in [
            (GUEST_MODULES, "initramfs.cpio.gz"),
            (NET_MODULES, "initramfs-net.cpio.gz"),
        ] {
            let modules = guest_modules(&kernel_deb, &cache, wanted)?;
            build_initramfs(
                &InitramfsInputs {
                    init: &init,
                    busybox: &busybox,
                    workload,
                    modules: &modules,
                },
                &guest.join(file),
            )?;
        }
        Ok(())
    }

    /// Provides target/guest/generic/Image (Debian's generic arm64 kernel,
    /// the same version as the cloud one [`Provisioner::guest_linux`]
    /// boots) and target/guest/generic/initramfs.cpio.gz (the same /init,
    /// busybox and workload, with that kernel's [`GENERIC_MODULES`]). The
    /// package is downloaded once into target/guest/generic/cache, apart
    /// from the cloud kernel's cache, whose newest `linux-image-*` is the
    /// cloud kernel. Only plans that name the generic Image need it.
    pub fn guest_linux_generic(
        &mut self,
        ws: &Workspace,
        workload: &Path,
    ) -> Result<(), XtaskError> {
        let guest = ws.root.join("target/guest");
        let dir = guest.join("generic");
        let cache = dir.join("cache");
        fs::create_dir_all(&cache).context(|| format!("creating {}", cache.display()))?;
        let (cloud_deb, busybox_deb) = self.guest_debs(&guest.join("cache"))?;
        let deb = match newest(&cache, "linux-image-", "_arm64.deb")? {
            Some(deb) => deb,
            None => {
                let package = generic_package(&cloud_deb).ok_or_else(|| {
                    XtaskError::Provision(format!(
                        "cannot name the generic kernel of {}",
                        cloud_deb.display()
                    ))
                })?;
                self.arm64_lists()?;
                eprintln!("xtask: downloading {package} into {}", cache.display());
                let download =
                    || cmd::run(apt_get().current_dir(&cache).args(["download", &package]));
                if download().is_err() {
                    self.apt_update()?;
                    download()?;
                }
                newest(&cache, "linux-image-", "_arm64.deb")?.ok_or_else(|| {
                    XtaskError::Provision(format!("apt-get download left no {package}"))
                })?
            }
        };
        extract_kernel(&deb, &cache, &dir.join("Image"))?;
        let busybox = guest.join("cache/busybox-root/bin/busybox");
        extract_once(
            &busybox_deb,
            &guest.join("cache/busybox-root"),
            "./bin/busybox",
            &busybox,
        )?;
        let modules = guest_modules(&deb, &cache, GENERIC_MODULES)?;
        build_initramfs(
            &InitramfsInputs {
                init: &ws.root.join("tools/guest-rootfs/init"),
                busybox: &busybox,
                workload,
                modules: &modules,
            },
            &dir.join("initramfs.cpio.gz"),
        )
    }

    /// The cached kernel and busybox packages, downloading what is missing.
    fn guest_debs(&mut self, cache: &Path) -> Result<(PathBuf, PathBuf), XtaskError> {
        let cached = |cache: &Path| -> Result<(Option<PathBuf>, Option<PathBuf>), XtaskError> {
            Ok((
                newest(cache, "linux-image-", "_arm64.deb")?,
                newest(cache, "busybox-static_", "_arm64.deb")?,
            ))
        };
        if let (Some(kernel), Some(busybox)) = cached(cache)? {
            return Ok((kernel, busybox));
        }
        self.arm64_lists()?;
        // Try with the lists we have; stale lists name files the mirror no
        // longer has, so refresh once and retry before giving up.
        match self.download_guest_debs(cache) {
            Ok(()) => {}
            Err(_) if !self.apt_updated => {
                self.apt_update()?;
                self.download_guest_debs(cache)?;
            }
            Err(err) => return Err(err),
        }
        match cached(cache)? {
            (Some(kernel), Some(busybox)) => Ok((kernel, busybox)),
            _ => Err(XtaskError::Provision(format!(
                "apt-get download left no kernel or busybox package in {}",
                cache.display()
            ))),
        }
    }

    fn download_guest_debs(&self, cache: &Path) -> Result<(), XtaskError> {
        let kernel = resolve_kernel_package()?;
        eprintln!(
            "xtask: downloading {kernel} and {BUSYBOX_PACKAGE} into {}",
            cache.display()
        );
        // apt-get download writes into the current directory; as root it
        // warns that the _apt sandbox user cannot write there, which is
        // harmless (it downloads unsandboxed).
        cmd::run(
            apt_get()
                .current_dir(cache)
                .args(["download", &kernel, BUSYBOX_PACKAGE]),
        )
    }

    /// Debian's GRUB netboot image for arm64 (`GRUB_PACKAGE` at
    /// `GRUB_VERSION`), downloaded once into target/guest/cache and
    /// extracted to target/guest/grub/grubnetaa64.efi.
    pub fn grub_netboot(&mut self, ws: &Workspace) -> Result<PathBuf, XtaskError> {
        let cache = ws.root.join("target/guest/cache");
        fs::create_dir_all(&cache).context(|| format!("creating {}", cache.display()))?;
        let deb = match cached_grub_deb(&cache) {
            Some(deb) => deb,
            None => {
                self.arm64_lists()?;
                let pinned = format!("{GRUB_PACKAGE}:arm64={GRUB_VERSION}");
                let current = format!("{GRUB_PACKAGE}:arm64");
                eprintln!("xtask: downloading {pinned} into {}", cache.display());
                let download =
                    |what: &str| cmd::run(apt_get().current_dir(&cache).args(["download", what]));
                if download(&pinned).is_err() {
                    if !self.apt_updated {
                        self.apt_update()?;
                    }
                    if download(&pinned).is_err() {
                        eprintln!(
                            "xtask: {pinned} is no longer on the mirror; downloading {current}"
                        );
                        download(&current)?;
                    }
                }
                cached_grub_deb(&cache).ok_or_else(|| {
                    XtaskError::Provision(format!(
                        "apt-get download {current} left no {GRUB_PACKAGE}_*_arm64.deb in {}",
                        cache.display()
                    ))
                })?
            }
        };
        eprintln!("xtask: GRUB netboot image from {}", ws.relative(&deb));
        let dir = ws.root.join("target/guest/grub");
        let unpacked = dir.join(&GRUB_NETBOOT_MEMBER[2..]);
        extract_once(&deb, &dir, GRUB_NETBOOT_MEMBER, &unpacked)?;
        let out = dir.join("grubnetaa64.efi");
        fs::copy(&unpacked, &out).context(|| format!("copying {}", unpacked.display()))?;
        Ok(out)
    }

    /// Makes arm64 a dpkg architecture with package lists, once.
    fn arm64_lists(&mut self) -> Result<(), XtaskError> {
        let foreign = cmd::stdout_of(Command::new("dpkg").arg("--print-foreign-architectures"))?;
        if !foreign.lines().any(|arch| arch.trim() == "arm64") {
            cmd::run(Command::new("dpkg").args(["--add-architecture", "arm64"]))?;
            // The package lists predate arm64: they must be fetched again.
            self.apt_updated = false;
            self.apt_update()?;
        }
        Ok(())
    }

    /// Installs Chromium for the web UI's browser test if it is missing.
    pub fn browser(&mut self) -> Result<(), XtaskError> {
        self.packages(&BROWSER_PACKAGES)
    }

    /// Installs those of `packages` that are missing, without recommends.
    fn packages(&mut self, packages: &[&str]) -> Result<(), XtaskError> {
        let missing: Vec<&str> = packages
            .iter()
            .copied()
            .filter(|package| !dpkg_installed(package))
            .collect();
        if !missing.is_empty() {
            self.apt_update()?;
            eprintln!("xtask: installing {}", missing.join(" "));
            cmd::run(
                apt_get()
                    .args(["install", "-y", "--no-install-recommends"])
                    .args(&missing),
            )?;
        }
        Ok(())
    }

    fn apt_update(&mut self) -> Result<(), XtaskError> {
        if !self.apt_updated {
            cmd::run(apt_get().arg("update"))?;
            self.apt_updated = true;
        }
        Ok(())
    }
}

/// The suite QEMU 10 comes from (docs/DEVICES.md, "SMMUv3").
const QEMU_10_SUITE: &str = "bookworm-backports";

/// QEMU 10 from bookworm-backports for the cases that need an SMMUv3 with
/// stage 2 (`smmu-isolation`), unpacked into target/qemu-10 with `dpkg -x`
/// and never installed: the system's QEMU 7.2 stays what the rest of the
/// suite and the bench measure. A private apt configuration
/// (target/qemu-10/apt) names the backports suite, so the system's sources
/// and lists are not touched. Its shared libraries must all resolve on the
/// host (`ldd`), else this says which do not.
pub fn qemu_10(ws: &Workspace) -> Result<crate::qemu::Qemu10, XtaskError> {
    let dir = ws.root.join("target/qemu-10");
    let root = dir.join("root");
    let q = crate::qemu::Qemu10 {
        bin: root.join("usr/bin/qemu-system-aarch64"),
        data: root.join("usr/share/qemu"),
        modules: root.join("usr/lib/x86_64-linux-gnu/qemu"),
    };
    if q.bin.exists() {
        return Ok(q);
    }
    let apt = dir.join("apt");
    for sub in ["lists/partial", "cache/archives/partial", "debs"] {
        let d = apt.join(sub);
        fs::create_dir_all(&d).context(|| format!("creating {}", d.display()))?;
    }
    fs::write(
        apt.join("sources.list"),
        format!(
            "deb http://deb.debian.org/debian {QEMU_10_SUITE} main\n\
             deb http://deb.debian.org/debian bookworm main\n"
        ),
    )
    .context(|| format!("writing {}", apt.join("sources.list").display()))?;
    let conf = apt.join("apt.conf");
    fs::write(
        &conf,
        format!(
            "Dir::Etc::SourceList \"{0}/sources.list\";\n\
             Dir::Etc::SourceParts \"/nonexistent\";\n\
             Dir::State::Lists \"{0}/lists\";\n\
             Dir::Cache \"{0}/cache\";\n",
            apt.display()
        ),
    )
    .context(|| format!("writing {}", conf.display()))?;
    let private = |args: &[&str]| {
        let mut c = apt_get();
        c.env("APT_CONFIG", &conf).args(args);
        c
    };
    eprintln!(
        "xtask: fetching QEMU 10 from {QEMU_10_SUITE} into {}",
        dir.display()
    );
    cmd::run(&mut private(&["update"]))?;
    let packages: Vec<String> = ["qemu-system-arm", "qemu-system-common", "qemu-system-data"]
        .iter()
        .map(|p| format!("{p}/{QEMU_10_SUITE}"))
        .collect();
    let mut download = private(&["download"]);
    download.args(&packages).current_dir(apt.join("debs"));
    cmd::run(&mut download)?;
    let debs = apt.join("debs");
    for entry in fs::read_dir(&debs).context(|| format!("reading {}", debs.display()))? {
        let deb = entry
            .context(|| format!("reading {}", debs.display()))?
            .path();
        if deb.extension().is_some_and(|e| e == "deb") {
            cmd::run(Command::new("dpkg").arg("-x").arg(&deb).arg(&root))?;
        }
    }
    let ldd = cmd::stdout_of(Command::new("ldd").arg(&q.bin))?;
    let missing: Vec<&str> = ldd.lines().filter(|l| l.contains("not found")).collect();
    if !missing.is_empty() {
        let _ = fs::remove_file(&q.bin);
        return Err(XtaskError::Provision(format!(
            "QEMU 10's libraries do not resolve on this host: {}",
            missing.join("; ")
        )));
    }
    Ok(q)
}

fn apt_get() -> Command {
    let mut apt = Command::new("apt-get");
    apt.env("DEBIAN_FRONTEND", "noninteractive");
    apt
}

/// Whether a Debian package is installed: `dpkg -s` also succeeds for a
/// removed package whose config files remain, so read its Status line.
fn dpkg_installed(package: &str) -> bool {
    Command::new("dpkg")
        .args(["-s", package])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|out| {
            out.status.success()
                && String::from_utf8_lossy(&out.stdout)
                    .lines()
                    .any(|line| line.trim() == "Status: install ok installed")
        })
}

/// The concrete kernel package behind the cloud-arm64 meta package.
fn resolve_kernel_package() -> Result<String, XtaskError> {
    let depends = cmd::stdout_of(Command::new("apt-cache").args(["depends", KERNEL_META]))?;
    parse_kernel_dependency(&depends).ok_or_else(|| {
        XtaskError::Provision(format!(
            "`apt-cache depends {KERNEL_META}` names no linux-image package"
        ))
    })
}

/// Picks `linux-image-<version>-cloud-arm64:arm64` out of `apt-cache depends`.
pub fn parse_kernel_dependency(depends: &str) -> Option<String> {
    depends.lines().find_map(|line| {
        let package = line.trim().strip_prefix("Depends:")?.trim();
        let name = package.trim_start_matches('<').trim_end_matches('>');
        (name.starts_with("linux-image-") && name.contains("cloud-arm64")).then(|| name.to_string())
    })
}

/// The generic kernel package of the same version as the cloud kernel
/// package file `cloud_deb` (`linux-image-6.1.0-57-cloud-arm64_..._arm64.deb`
/// -> `linux-image-6.1.0-57-arm64:arm64`).
fn generic_package(cloud_deb: &Path) -> Option<String> {
    let name = cloud_deb.file_name()?.to_str()?;
    let package = name.split('_').next()?;
    let version = package
        .strip_prefix("linux-image-")?
        .strip_suffix("-cloud-arm64")?;
    Some(format!("linux-image-{version}-arm64:arm64"))
}

/// The most recently modified file in `dir` named `<prefix>*<suffix>` (a
/// version sort of Debian file names would need dpkg's rules; the newest
/// download is the one wanted).
fn newest(dir: &Path, prefix: &str, suffix: &str) -> Result<Option<PathBuf>, XtaskError> {
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = fs::read_dir(dir)
        .context(|| format!("listing {}", dir.display()))?
        .filter_map(|entry| entry.ok())
        .filter(|entry| {
            entry
                .file_name()
                .to_str()
                .is_some_and(|name| name.starts_with(prefix) && name.ends_with(suffix))
        })
        .map(|entry| {
            let modified = entry.metadata().and_then(|meta| meta.modified());
            (modified.unwrap_or(std::time::UNIX_EPOCH), entry.path())
        })
        .collect();
    found.sort();
    Ok(found.pop().map(|(_, path)| path))
}

/// Unpacks the members matching `pattern` of a .deb's filesystem into `dir`.
/// A package that does not unpack (say, a download cut short) is deleted,
/// so the next run downloads it again instead of failing the same way.
fn unpack(deb: &Path, dir: &Path, pattern: &str) -> Result<(), XtaskError> {
    let result = unpack_members(deb, dir, pattern);
    if result.is_err() {
        eprintln!(
            "xtask: removing {} so that the next run downloads it again",
            deb.display()
        );
        // If even the removal fails, the unpack error below is the one to show.
        let _ = fs::remove_file(deb);
    }
    result
}

fn unpack_members(deb: &Path, dir: &Path, pattern: &str) -> Result<(), XtaskError> {
    fs::create_dir_all(dir).context(|| format!("creating {}", dir.display()))?;
    let mut dpkg = Command::new("dpkg-deb");
    dpkg.arg("--fsys-tarfile").arg(deb).stdout(Stdio::piped());
    let program = describe(&dpkg);
    let mut dpkg_child = dpkg.spawn().map_err(|source| XtaskError::Spawn {
        program: program.clone(),
        source,
    })?;
    let Some(tarfile) = dpkg_child.stdout.take() else {
        return Err(XtaskError::Provision(format!("`{program}` gave no stdout")));
    };
    let tar_result = cmd::run(
        Command::new("tar")
            .arg("-x")
            .arg("-C")
            .arg(dir)
            .args(["--wildcards", pattern])
            .stdin(tarfile),
    );
    let dpkg_status = dpkg_child.wait().map_err(|source| XtaskError::Spawn {
        program: program.clone(),
        source,
    })?;
    tar_result?;
    if !dpkg_status.success() {
        return Err(XtaskError::Command {
            program,
            status: dpkg_status.to_string(),
        });
    }
    Ok(())
}

/// Extracts `member` of `deb` to `out` unless the stamp says it came from
/// this very package already.
fn extract_once(deb: &Path, dir: &Path, member: &str, out: &Path) -> Result<(), XtaskError> {
    let stamp = stamp_path(out);
    let source = deb
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    if out.exists() && fs::read_to_string(&stamp).is_ok_and(|s| s == source) {
        return Ok(());
    }
    unpack(deb, dir, member)?;
    if !out.exists() {
        return Err(XtaskError::Provision(format!(
            "{} has no {member}",
            deb.display()
        )));
    }
    fs::write(&stamp, source).context(|| format!("writing {}", stamp.display()))
}

/// Copies the kernel's /boot/vmlinuz-* to `image`. Debian's arm64 vmlinuz is
/// already an uncompressed arm64 Image; a gzip'ed one is inflated, since the
/// hypervisor loads Images, not compressed files.
fn extract_kernel(deb: &Path, cache: &Path, image: &Path) -> Result<(), XtaskError> {
    let stamp = stamp_path(image);
    let source = deb
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    if image.exists() && fs::read_to_string(&stamp).is_ok_and(|s| s == source) {
        return Ok(());
    }
    let root = cache.join("kernel-root");
    if root.exists() {
        fs::remove_dir_all(&root).context(|| format!("removing {}", root.display()))?;
    }
    unpack(deb, &root, "./boot/vmlinuz-*")?;
    let vmlinuz = newest(&root.join("boot"), "vmlinuz-", "")?.ok_or_else(|| {
        XtaskError::Provision(format!("{} has no /boot/vmlinuz-*", deb.display()))
    })?;
    let mut bytes = fs::read(&vmlinuz).context(|| format!("reading {}", vmlinuz.display()))?;
    if bytes.starts_with(&[0x1f, 0x8b]) {
        let mut inflated = Vec::new();
        std::io::copy(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut inflated)
            .context(|| format!("inflating {}", vmlinuz.display()))?;
        bytes = inflated;
    }
    if !is_arm64_image(&bytes) {
        return Err(XtaskError::BadFile {
            path: vmlinuz,
            why: "not an arm64 Image (no ARM\\x64 magic at offset 56)".into(),
        });
    }
    if let Some(dir) = image.parent() {
        fs::create_dir_all(dir).context(|| format!("creating {}", dir.display()))?;
    }
    fs::write(image, &bytes).context(|| format!("writing {}", image.display()))?;
    fs::write(&stamp, source).context(|| format!("writing {}", stamp.display()))
}

fn stamp_path(out: &Path) -> PathBuf {
    let mut name = out.file_name().unwrap_or_default().to_os_string();
    name.push(".stamp");
    out.with_file_name(name)
}

/// The files the initramfs is made of.
struct InitramfsInputs<'a> {
    /// tools/guest-rootfs/init.
    init: &'a Path,
    /// busybox-static's /bin/busybox.
    busybox: &'a Path,
    /// The stripped `pipebench` (tools/guest-rootfs/pipebench).
    workload: &'a Path,
    /// Kernel modules in load order: (file name, contents).
    modules: &'a [(String, Vec<u8>)],
}

/// The `.ko` files of `wanted` and of every module they depend on, in load
/// order, from the kernel package (unpacked once into
/// `cache/modules-<package>`; the package's modules.order maps names to
/// paths, each module's `depends=` modinfo names its dependencies).
fn guest_modules(
    deb: &Path,
    cache: &Path,
    wanted: &[&str],
) -> Result<Vec<(String, Vec<u8>)>, XtaskError> {
    let package = deb
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let root = cache.join(format!("modules-{package}"));
    let order_of = |root: &Path| -> Option<PathBuf> {
        let dir = root.join("lib/modules");
        let version = fs::read_dir(&dir).ok()?.filter_map(|e| e.ok()).next()?;
        Some(version.path())
    };
    if order_of(&root).is_none_or(|v| !v.join("modules.order").exists()) {
        // Members that do not match fail the whole extraction; never
        // remove the shared package for that (unlike `unpack`).
        unpack_members(deb, &root, "./lib/modules/*/modules.order")?;
    }
    let version = order_of(&root)
        .ok_or_else(|| XtaskError::Provision(format!("{} has no modules.order", deb.display())))?;
    let order = fs::read_to_string(version.join("modules.order"))
        .context(|| format!("reading {}", version.display()))?;
    let mut loaded: Vec<(String, Vec<u8>)> = Vec::new();
    let mut stack: Vec<(String, bool)> = wanted
        .iter()
        .rev()
        .map(|m| (m.to_string(), false))
        .collect();
    while let Some((name, deps_done)) = stack.pop() {
        let file = format!("{name}.ko");
        if loaded.iter().any(|(f, _)| f.ends_with(&format!("-{file}"))) {
            continue;
        }
        let path = module_path(&order, &name).ok_or_else(|| {
            XtaskError::Provision(format!(
                "module {name} is not in {}'s modules.order",
                deb.display()
            ))
        })?;
        let on_disk = version.join(path);
        if !on_disk.exists() {
            unpack_members(deb, &root, &format!("./lib/modules/*/{path}"))?;
        }
        let bytes = fs::read(&on_disk).context(|| format!("reading {}", on_disk.display()))?;
        let deps = module_depends(&bytes);
        if !deps_done && !deps.is_empty() {
            stack.push((name, true));
            stack.extend(deps.into_iter().map(|d| (d, false)));
            continue;
        }
        loaded.push((format!("{:02}-{file}", loaded.len()), bytes));
    }
    Ok(loaded)
}

/// The modules.order line (`kernel/.../name.ko`) of module `name` (a
/// module's name spells `-` as `_`).
fn module_path<'o>(order: &'o str, name: &str) -> Option<&'o str> {
    order.lines().map(str::trim).find(|line| {
        line.rsplit('/')
            .next()
            .and_then(|f| f.strip_suffix(".ko"))
            .is_some_and(|f| f.replace('-', "_") == name.replace('-', "_"))
    })
}

/// The module names in a `.ko`'s `depends=` modinfo string.
fn module_depends(ko: &[u8]) -> Vec<String> {
    let key = b"depends=";
    ko.split(|&b| b == 0)
        .find_map(|s| s.strip_prefix(&key[..]))
        .map(|list| {
            String::from_utf8_lossy(list)
                .split(',')
                .filter(|d| !d.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Writes the guest initramfs (gzip'ed cpio newc) from the /init script,
/// busybox and the workload, unless the stamp shows those inputs unchanged.
fn build_initramfs(inputs: &InitramfsInputs<'_>, out: &Path) -> Result<(), XtaskError> {
    let read = |path: &Path| fs::read(path).context(|| format!("reading {}", path.display()));
    let files = RootFiles {
        init: read(inputs.init)?,
        busybox: read(inputs.busybox)?,
        pipebench: read(inputs.workload)?,
        modules: inputs.modules.to_vec(),
    };
    let mut hasher = DefaultHasher::new();
    INITRAMFS_LAYOUT.hash(&mut hasher);
    files.init.hash(&mut hasher);
    files.busybox.hash(&mut hasher);
    files.pipebench.hash(&mut hasher);
    files.modules.hash(&mut hasher);
    let fingerprint = format!("{:016x}", hasher.finish());
    let stamp = stamp_path(out);
    if out.exists() && fs::read_to_string(&stamp).is_ok_and(|s| s == fingerprint) {
        return Ok(());
    }
    eprintln!("xtask: building {}", out.display());
    let cpio = initramfs_archive(&files);
    let mut gz = GzEncoder::new(Vec::new(), Compression::best());
    gz.write_all(&cpio)
        .context(|| "compressing the initramfs".into())?;
    let compressed = gz.finish().context(|| "compressing the initramfs".into())?;
    fs::write(out, compressed).context(|| format!("writing {}", out.display()))?;
    fs::write(&stamp, fingerprint).context(|| format!("writing {}", stamp.display()))
}

/// The contents of the initramfs's files.
pub struct RootFiles {
    pub init: Vec<u8>,
    pub busybox: Vec<u8>,
    pub pipebench: Vec<u8>,
    /// Kernel modules, /lib/modules/<name> in load order.
    pub modules: Vec<(String, Vec<u8>)>,
}

/// The uncompressed initramfs: busybox, its shell link, the workload
/// (/bin/pipebench, run by /init only when the command line asks), the
/// mount points and /init. Other applets are linked by /init at boot
/// (`busybox --install`).
pub fn initramfs_archive(files: &RootFiles) -> Vec<u8> {
    let mut cpio = CpioWriter::new();
    for dir in [
        "bin",
        "dev",
        "proc",
        "sys",
        "tmp",
        "root",
        "lib",
        "lib/modules",
    ] {
        cpio.dir(dir, if dir == "tmp" { 0o1777 } else { 0o755 });
    }
    for (name, bytes) in &files.modules {
        cpio.file(&format!("lib/modules/{name}"), 0o644, bytes);
    }
    cpio.char_device("dev/console", 0o600, 5, 1);
    cpio.file("bin/busybox", 0o755, &files.busybox);
    cpio.symlink("bin/sh", "busybox");
    cpio.file("bin/pipebench", 0o755, &files.pipebench);
    cpio.file("init", 0o755, &files.init);
    cpio.finish()
}

/// The GRUB package already in the cache, the pinned version preferred.
fn cached_grub_deb(cache: &Path) -> Option<PathBuf> {
    // apt-get download names the file with the version's colon as %3a.
    let pinned = cache.join(format!(
        "{GRUB_PACKAGE}_{}_arm64.deb",
        GRUB_VERSION.replace(':', "%3a")
    ));
    if pinned.exists() {
        return Some(pinned);
    }
    let prefix = format!("{GRUB_PACKAGE}_");
    let mut found: Vec<PathBuf> = fs::read_dir(cache)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with("_arm64.deb"))
        })
        .collect();
    found.sort();
    found.pop()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pinned_grub_is_preferred_and_any_other_version_is_the_fallback() {
        let dir = std::env::temp_dir().join(format!("pinfold-grub-cache-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        assert_eq!(cached_grub_deb(&dir), None);
        let newer = dir.join(format!("{GRUB_PACKAGE}_1+2.06+13+deb12u3_arm64.deb"));
        fs::write(&newer, b"").unwrap();
        fs::write(dir.join("other_1_arm64.deb"), b"").unwrap();
        assert_eq!(cached_grub_deb(&dir), Some(newer));
        let pinned = dir.join(format!("{GRUB_PACKAGE}_{GRUB_VERSION}_arm64.deb"));
        fs::write(&pinned, b"").unwrap();
        assert_eq!(cached_grub_deb(&dir), Some(pinned));
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn kernel_dependency_is_read_from_apt_cache_depends() {
        let depends =
            "linux-image-cloud-arm64:arm64\n  Depends: linux-image-6.1.0-57-cloud-arm64:arm64\n";

        let package = parse_kernel_dependency(depends);

        assert_eq!(
            package.as_deref(),
            Some("linux-image-6.1.0-57-cloud-arm64:arm64")
        );
    }

    #[test]
    fn kernel_dependency_ignores_other_depends() {
        let depends = "x\n  Depends: initramfs-tools\n  Depends: linux-base\n";

        assert_eq!(parse_kernel_dependency(depends), None);
    }

    #[test]
    fn initramfs_holds_init_before_trailer_and_busybox() {
        let archive = initramfs_archive(&RootFiles {
            init: b"#!/bin/sh\n".to_vec(),
            busybox: b"\x7fELF".to_vec(),
            pipebench: b"\x7fELF pipebench".to_vec(),
            modules: vec![("00-watchdog.ko".into(), b"\x7fELF ko".to_vec())],
        });

        let text = String::from_utf8_lossy(&archive);
        let busybox = text.find("bin/busybox\0").expect("busybox entry");
        let init = text.find("init\0").expect("init entry");
        let trailer = text.find("TRAILER!!!").expect("trailer");
        assert!(busybox < init && init < trailer);
    }

    #[test]
    fn initramfs_carries_the_workload_as_an_executable() {
        let archive = initramfs_archive(&RootFiles {
            init: b"#!/bin/sh\n".to_vec(),
            busybox: b"\x7fELF".to_vec(),
            pipebench: b"\x7fELF pipebench".to_vec(),
            modules: vec![("00-watchdog.ko".into(), b"\x7fELF ko".to_vec())],
        });

        let text = String::from_utf8_lossy(&archive);
        let name = text.find("bin/pipebench\0").expect("pipebench entry");
        // The newc header (110 bytes) precedes the name; its mode field is
        // the second 8-digit field after the 6-byte magic.
        let mode = &text[name - 110 + 14..name - 110 + 22];
        assert_eq!(u32::from_str_radix(mode, 16), Ok(0o100_755));
        assert!(text[name..].contains("\x7fELF pipebench"));
    }

    #[test]
    fn package_that_does_not_unpack_is_deleted_for_a_fresh_download() {
        let dir = std::env::temp_dir().join(format!("xtask-unpack-{}", std::process::id()));
        fs::create_dir_all(&dir).expect("temp dir");
        let deb = dir.join("cut-short_arm64.deb");
        fs::write(&deb, b"!<arch>\ntruncated").expect("write deb");

        let result = unpack(&deb, &dir.join("root"), "./bin/busybox");

        assert!(result.is_err());
        assert!(!deb.exists());
        let _ = fs::remove_dir_all(dir);
    }

    #[test]
    fn stamp_sits_beside_the_output() {
        assert_eq!(
            stamp_path(Path::new("/a/b/Image")),
            PathBuf::from("/a/b/Image.stamp")
        );
    }

    #[test]
    fn module_dependencies_come_from_modinfo_and_paths_from_modules_order() {
        let ko = b"\x7fELF\0license=GPL\0depends=watchdog,foo-bar\0name=sbsa_gwdt\0";
        let order = "kernel/drivers/watchdog/watchdog.ko\nkernel/drivers/watchdog/sbsa_gwdt.ko\nkernel/drivers/input/keyboard/gpio_keys.ko\n";

        assert_eq!(module_depends(ko), ["watchdog", "foo-bar"]);
        assert!(module_depends(b"\0depends=\0").is_empty());
        assert_eq!(
            module_path(order, "sbsa_gwdt"),
            Some("kernel/drivers/watchdog/sbsa_gwdt.ko")
        );
        assert_eq!(
            module_path(order, "gpio-keys"),
            Some("kernel/drivers/input/keyboard/gpio_keys.ko")
        );
        assert_eq!(module_path(order, "dog"), None);
    }

    #[test]
    fn the_generic_kernel_is_the_cloud_ones_version() {
        assert_eq!(
            generic_package(Path::new(
                "/c/linux-image-6.1.0-57-cloud-arm64_6.1.192-3_arm64.deb"
            ))
            .as_deref(),
            Some("linux-image-6.1.0-57-arm64:arm64")
        );
        assert_eq!(generic_package(Path::new("/c/busybox_1_arm64.deb")), None);
    }

    #[test]
    fn modules_are_packed_under_lib_modules() {
        let archive = initramfs_archive(&RootFiles {
            init: b"#!/bin/sh\n".to_vec(),
            busybox: b"\x7fELF".to_vec(),
            pipebench: b"\x7fELF pipebench".to_vec(),
            modules: vec![("01-sbsa_gwdt.ko".into(), b"\x7fELF ko".to_vec())],
        });

        let text = String::from_utf8_lossy(&archive);
        assert!(text.contains("lib/modules/01-sbsa_gwdt.ko"));
    }
}
