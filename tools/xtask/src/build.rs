//! `cargo xtask build`: provisions the host, builds the EL2 image and the
//! test guests, validates the partition config (its rules, then its
//! isolation against the board's own DTB) and writes `pinfold.bin`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cmd;
use crate::error::{IoContext, XtaskError};
use crate::image::{assemble, enrol_key, HeaderWarning};
use crate::provision::{Provisioner, BARE_TARGET};
use crate::qemu::Board;
use crate::signing::SigningKey;
use crate::Workspace;

/// The config `build`, `run` and the default boot test use.
pub const DEFAULT_CONFIG: &str = "vm-configs/qemu-virt/default.toml";

/// A finished hypervisor image and the machine it was built for.
#[derive(Debug)]
pub struct Built {
    pub image: PathBuf,
    pub board: Board,
}

/// Builds images, doing the per-invocation work (provisioning, cargo builds)
/// only once even when several configs are built, as the test suite does.
pub struct Builder<'w> {
    ws: &'w Workspace,
    provisioner: Provisioner,
    /// Host provisioned and the test guest built, in this invocation.
    guests_built: bool,
    /// The flat EL2 images built in this invocation, by cargo feature set
    /// (empty: the default image; the bench's ablations add features).
    el2: Vec<(Vec<String>, PathBuf)>,
    manager_built: bool,
    /// The bundle signing key, once loaded.
    key: Option<SigningKey>,
}

/// The management partition's image, as configs name it.
pub const MANAGER_IMAGE: &str = "target/pinfold/manager.bin";
/// Debian's generic arm64 kernel (gpio-keys for the power button), which a
/// plan names to get it; provisioned only then
/// (`Provisioner::guest_linux_generic`).
pub const GENERIC_IMAGE: &str = "target/guest/generic/Image";

impl<'w> Builder<'w> {
    pub fn new(ws: &'w Workspace) -> Self {
        Self {
            ws,
            provisioner: Provisioner::new(),
            guests_built: false,
            el2: Vec::new(),
            manager_built: false,
            key: None,
        }
    }

    /// Builds `target/pinfold/<out_name>` from `config`. A config that fails
    /// to parse fails before anything is built; one that fails validation
    /// (which needs the guest images) fails before the image is written.
    pub fn build(&mut self, config: &Path, out_name: &str) -> Result<Built, XtaskError> {
        self.build_with_features(config, out_name, &[])
    }

    /// [`Builder::build`] with an EL2 image built with the `pinfold`
    /// package's cargo `features` (the bench's ablations).
    pub fn build_with_features(
        &mut self,
        config: &Path,
        out_name: &str,
        features: &[&str],
    ) -> Result<Built, XtaskError> {
        let config_path = self.ws.resolve(config);
        let config = pinfold_config::load(&config_path)?;
        self.build_loaded(&config, &config_path, out_name, features)
    }

    /// [`Builder::build_with_features`] of a config already loaded from
    /// `config_path` (and perhaps changed by the caller: `run` names its
    /// configuration store in the management partition).
    pub fn build_loaded(
        &mut self,
        config: &pinfold_config::Config,
        config_path: &Path,
        out_name: &str,
        features: &[&str],
    ) -> Result<Built, XtaskError> {
        let config_path = config_path.to_path_buf();
        let config = config.clone();
        let el2 = self.binaries(features)?;
        let (payload, board) = self.payload(&config, &config_path)?;
        let flat = fs::read(&el2).context(|| format!("reading {}", el2.display()))?;
        let assembled = self.assemble(&el2, flat, &payload)?;
        let out = self.ws.root.join("target/pinfold").join(out_name);
        fs::write(&out, &assembled.bytes).context(|| format!("writing {}", out.display()))?;
        println!(
            "xtask: {} ({} bytes: hypervisor {} + payload {} at offset {:#x}; config {})",
            self.ws.relative(&out),
            assembled.bytes.len(),
            assembled.payload_offset,
            payload.len(),
            assembled.payload_offset,
            self.ws.relative(&config_path),
        );
        Ok(Built { image: out, board })
    }

    /// Debian's arm64 GRUB netboot image (the `pxe-grub` test's DHCP boot
    /// file), provisioned once.
    pub fn grub_netboot(&mut self) -> Result<PathBuf, XtaskError> {
        self.provisioner.grub_netboot(self.ws)
    }

    /// The generic image every server boots, with no plan of its own:
    /// `target/pinfold/pinfold.efi`. Plans travel beside it as signed
    /// bundles ([`Builder::bundle`]).
    pub fn generic_image(&mut self) -> Result<PathBuf, XtaskError> {
        let el2 = self.binaries(&[])?;
        let flat = fs::read(&el2).context(|| format!("reading {}", el2.display()))?;
        let assembled = self.assemble(&el2, flat, &[])?;
        let out = self.ws.root.join("target/pinfold/pinfold.efi");
        fs::write(&out, &assembled.bytes).context(|| format!("writing {}", out.display()))?;
        Ok(out)
    }

    /// The signed boot bundle of `config` (already loaded from
    /// `config_path`, and perhaps changed by the caller, e.g. its token),
    /// and the board it is for.
    pub fn bundle(
        &mut self,
        config: &pinfold_config::Config,
        config_path: &Path,
    ) -> Result<(Vec<u8>, Board), XtaskError> {
        let (payload, board) = self.payload(config, config_path)?;
        let key = self.key()?;
        Ok((pinfold_config::bundle::seal(&payload, &key.secret), board))
    }

    /// A bundle of `config` signed with the enrolled key whose device
    /// windows skipped every build check
    /// ([`crate::hostile_plans::forged_payload`]): what a boot loader could
    /// hand over if the build were bypassed (the `hostile-plans` test; the
    /// hypervisor must refuse it at boot).
    pub fn forged_bundle(
        &mut self,
        config: &pinfold_config::Config,
    ) -> Result<(Vec<u8>, Board), XtaskError> {
        self.binaries(&[])?;
        let payload = crate::hostile_plans::forged_payload(config, &self.ws.root)
            .map_err(XtaskError::Provision)?;
        let board = Board {
            cpus: config.board.cpus,
            memory: config.board.memory.bytes(),
            nic: crate::qemu::plan_has_management_nic(config),
            partition_nics: crate::qemu::NicSlots::of_plan(config),
        };
        let key = self.key()?;
        Ok((pinfold_config::bundle::seal(&payload, &key.secret), board))
    }

    /// The bundle signing key ([`SigningKey::load_or_create`]), loaded once.
    pub fn key(&mut self) -> Result<&SigningKey, XtaskError> {
        if self.key.is_none() {
            self.key = Some(SigningKey::load_or_create(self.ws)?);
        }
        Ok(self.key.as_ref().expect("just loaded"))
    }

    /// Pads the EL2 image, appends `payload`, patches the header and
    /// enrols the bundle signing key.
    fn assemble(
        &mut self,
        el2: &Path,
        flat: Vec<u8>,
        payload: &[u8],
    ) -> Result<crate::image::Assembled, XtaskError> {
        let mut assembled = assemble(flat, payload);
        let public = self.key()?.public;
        enrol_key(&mut assembled.bytes, &public).map_err(|why| XtaskError::BadFile {
            path: el2.to_path_buf(),
            why,
        })?;
        for warning in &assembled.warnings {
            match warning {
                HeaderWarning::MissingMagic => eprintln!(
                    "xtask: warning: {} has no arm64 Image header (ARM\\x64 at offset 56); \
                     image_size not patched",
                    el2.display()
                ),
                HeaderWarning::ImageSizeBeyondFile { claimed, file } => eprintln!(
                    "xtask: warning: the Image header claims {claimed} bytes but the flat image \
                     has {file}: the payload overlaps memory the hypervisor thinks is its own"
                ),
                HeaderWarning::MissingPeHeader => eprintln!(
                    "xtask: warning: {} has no PE/COFF header with a .data section: UEFI \
                     cannot start it",
                    el2.display()
                ),
                HeaderWarning::TooLargeForPe { bytes } => eprintln!(
                    "xtask: warning: the image needs {bytes} bytes, more than a PE header can \
                     declare: UEFI cannot start it"
                ),
            }
        }
        Ok(assembled)
    }

    /// Validates `config` and builds its payload (the plan and its images),
    /// building the manager first when a partition boots it, and checks
    /// the plan's isolation against the board's own DTB.
    fn payload(
        &mut self,
        config: &pinfold_config::Config,
        config_path: &Path,
    ) -> Result<(Vec<u8>, Board), XtaskError> {
        if config
            .partitions
            .iter()
            .any(|p| p.kernel.ends_with(MANAGER_IMAGE))
        {
            self.manager()?;
        }
        if config
            .partitions
            .iter()
            .any(|p| p.kernel.ends_with(GENERIC_IMAGE))
        {
            let pipebench = self.ws.root.join("target/guest/pipebench");
            self.provisioner.guest_linux_generic(self.ws, &pipebench)?;
        }

        config.validate(&self.ws.root)?;
        let payload = config.build_payload(&self.ws.root)?;
        let board = Board {
            cpus: config.board.cpus,
            memory: config.board.memory.bytes(),
            nic: crate::qemu::plan_has_management_nic(config),
            partition_nics: crate::qemu::NicSlots::of_plan(config),
        };
        if config.board.name == "qemu-virt" {
            let dtb = self.board_dtb(&board)?;
            check_plan_isolation(&dtb, &payload).map_err(|error| match error {
                IsolationCheck::Isolation(error) => XtaskError::Isolation {
                    config: self.ws.relative(config_path).into(),
                    error: Box::new(error),
                },
                IsolationCheck::Other(error) => error,
            })?;
        } else {
            eprintln!(
                "xtask: warning: no host description for board {:?}; pass-through isolation is \
                 checked only at boot",
                config.board.name
            );
        }
        Ok((payload, board))
    }

    /// The DTB QEMU hands the hypervisor on `board`, dumped by QEMU itself
    /// (provisioning has installed it by now).
    fn board_dtb(&self, board: &Board) -> Result<Vec<u8>, XtaskError> {
        let out = self.ws.root.join(format!(
            "target/pinfold/qemu-virt-{}cpu-{}m.dtb",
            board.cpus,
            board.memory >> 20
        ));
        cmd::run(&mut crate::qemu::dumpdtb_command(board, &out))?;
        fs::read(&out).context(|| format!("reading {}", out.display()))
    }

    /// Builds the management partition's image (Hermit + app + loader),
    /// once per invocation.
    fn manager(&mut self) -> Result<(), XtaskError> {
        if self.manager_built {
            return Ok(());
        }
        crate::hermit::build_manager(&self.ws.root).map_err(XtaskError::Provision)?;
        self.manager_built = true;
        Ok(())
    }

    /// Provisions the host and builds the bare-metal test guest and the
    /// guest Linux files (once), and the EL2 image with `features`; returns
    /// the flat EL2 image.
    fn binaries(&mut self, features: &[&str]) -> Result<PathBuf, XtaskError> {
        let features: Vec<String> = features.iter().map(|f| f.to_string()).collect();
        if let Some((_, el2)) = self.el2.iter().find(|(f, _)| *f == features) {
            return Ok(el2.clone());
        }
        if !self.guests_built {
            self.provisioner.host_tools()?;
        }
        let objcopy = llvm_objcopy()?;
        let release = self
            .ws
            .root
            .join("target")
            .join(BARE_TARGET)
            .join("release");
        let out_dir = self.ws.root.join("target/pinfold");
        if !self.guests_built {
            let guest_dir = self.ws.root.join("target/guest");
            for dir in [&out_dir, &guest_dir] {
                fs::create_dir_all(dir).context(|| format!("creating {}", dir.display()))?;
            }
            cargo_build_bare(&self.ws.root, "pinfold-test-guest", &[])?;
            crate::pie::check(&release.join("pinfold-test-guest"))?;
            flat_binary(
                &objcopy,
                &release.join("pinfold-test-guest"),
                &guest_dir.join("test-guest.bin"),
            )?;
            // The workload goes into the initramfs, so it is built first.
            cargo_build_bare(&self.ws.root, "pinfold-pipebench", &[])?;
            let pipebench = guest_dir.join("pipebench");
            stripped(&objcopy, &release.join("pipebench"), &pipebench)?;
            self.provisioner.guest_linux(self.ws, &pipebench)?;
            self.guests_built = true;
        }

        // The ELF is overwritten by every feature set; the flat image is not.
        cargo_build_bare(&self.ws.root, "pinfold", &features)?;
        let el2 = out_dir.join(el2_flat_name(&features));
        flat_binary(&objcopy, &release.join("pinfold"), &el2)?;

        self.el2.push((features, el2.clone()));
        Ok(el2)
    }
}

/// Why [`check_plan_isolation`] refused.
#[derive(Debug)]
pub enum IsolationCheck {
    /// The plan breaks isolation on this host.
    Isolation(pinfold_config::isolation::IsolationError),
    /// The DTB or the payload could not be read.
    Other(XtaskError),
}

/// Runs the hypervisor's own boot-time checks of the plan against the host
/// on the build host: the DTB goes through `pinfold_hv::dtb::parse_host_dtb`
/// and `host_resources`, the payload's plan through `Plan::decode`, then
/// each partition's `gic` through `pinfold_hv::gichost::check_plan` (a
/// refusal is a `ConfigError` naming the partition and `gic`) and
/// `check_isolation`. The hypervisor's own RAM ranges are not known before
/// boot (its load address is firmware's choice), so only its console UART
/// stands for it here; the boot-time check adds the image, heap and DTB.
pub fn check_plan_isolation(dtb: &[u8], payload: &[u8]) -> Result<(), IsolationCheck> {
    let bad = |why: String| {
        IsolationCheck::Other(XtaskError::BadFile {
            path: "board DTB".into(),
            why,
        })
    };
    let info = pinfold_hv::dtb::parse_host_dtb(dtb).map_err(|e| bad(e.to_string()))?;
    let plan = pinfold_config::Plan::decode(payload)
        .map_err(|e| IsolationCheck::Other(XtaskError::Provision(format!("payload: {e:?}"))))?;
    // Each partition's `gic` against the board's GIC, as `Partition::build`
    // checks it at boot (the description only: no ID register is read here).
    pinfold_hv::gichost::check_plan(&plan.partitions, &info.gic.found).map_err(|rejection| {
        IsolationCheck::Other(XtaskError::Config(pinfold_config::ConfigError::Partition(
            rejection,
        )))
    })?;
    let host = pinfold_hv::dtb::host_resources(&info, &[]);
    pinfold_config::isolation::check_isolation(&plan.partitions, &host)
        .map_err(IsolationCheck::Isolation)
}

/// The flat EL2 image's name in target/pinfold for a feature set:
/// `pinfold-el2.bin`, or `pinfold-el2+<feature>+....bin`.
pub fn el2_flat_name(features: &[String]) -> String {
    let mut name = String::from("pinfold-el2");
    for feature in features {
        name.push('+');
        name.push_str(feature);
    }
    name + ".bin"
}

fn cargo_build_bare(root: &Path, package: &str, features: &[String]) -> Result<(), XtaskError> {
    let mut cargo = cmd::cargo();
    cargo
        .current_dir(root)
        .args(["build", "--release", "-p", package, "--target", BARE_TARGET]);
    if !features.is_empty() {
        cargo.arg("--features").arg(features.join(","));
    }
    cmd::run(&mut cargo)
}

/// `llvm-objcopy` from the toolchain's llvm-tools component.
fn llvm_objcopy() -> Result<PathBuf, XtaskError> {
    llvm_tool("llvm-objcopy")
}

/// `name` (e.g. `llvm-size`) from the toolchain's llvm-tools component.
pub fn llvm_tool(name: &str) -> Result<PathBuf, XtaskError> {
    let sysroot = cmd::stdout_of(Command::new("rustc").args(["--print", "sysroot"]))?;
    let version = cmd::stdout_of(Command::new("rustc").arg("-vV"))?;
    let host = version
        .lines()
        .find_map(|line| line.strip_prefix("host: "))
        .unwrap_or("x86_64-unknown-linux-gnu");
    let tool = Path::new(sysroot.trim())
        .join("lib/rustlib")
        .join(host)
        .join("bin")
        .join(name);
    if tool.exists() {
        Ok(tool)
    } else {
        Err(XtaskError::Provision(format!(
            "{} is missing (rustup component add llvm-tools)",
            tool.display()
        )))
    }
}

/// A copy of `elf` without symbols or debug information: what a program
/// in the guest's initramfs needs (the kernel reads only program headers).
fn stripped(objcopy: &Path, elf: &Path, out: &Path) -> Result<(), XtaskError> {
    cmd::run(Command::new(objcopy).arg("--strip-all").arg(elf).arg(out))
}

/// ELF -> flat binary, with .bss made part of the file so the loaded image
/// is complete without anyone clearing memory past its end.
fn flat_binary(objcopy: &Path, elf: &Path, out: &Path) -> Result<(), XtaskError> {
    cmd::run(
        Command::new(objcopy)
            .args([
                "-O",
                "binary",
                "--set-section-flags",
                ".bss=alloc,load,contents",
            ])
            .arg(elf)
            .arg(out),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    static QEMU_VIRT_DTB: &[u8] =
        include_bytes!("../../../hv/src/dtb/testdata/qemu-virt-gicv3.dtb");

    /// The payload of a plan whose single partition passes `device` through.
    fn payload_with_device(device: &str) -> Vec<u8> {
        // One directory per call: the tests run in parallel, and a shared
        // file being rewritten by one can read as empty in another.
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir =
            std::env::temp_dir().join(format!("xtask-isolation-{}-{call}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("raw"), b"a raw kernel").unwrap();
        let text = format!(
            "[board]\nname = \"qemu-virt\"\ncpus = 4\nmemory = \"2GiB\"\n\
             [[partition]]\nname = \"alpha\"\ncpus = [1]\nmemory = \"64MiB\"\n\
             kernel = \"raw\"\n[[partition.device]]\nname = \"dev\"\n{device}\n"
        );
        pinfold_config::parse(&text)
            .unwrap()
            .build_payload(&dir)
            .unwrap()
    }

    #[test]
    fn each_feature_set_gets_its_own_flat_el2_image() {
        assert_eq!(el2_flat_name(&[]), "pinfold-el2.bin");
        assert_eq!(
            el2_flat_name(&["ablate-irq-fnptr".into(), "ablate-chip-lock".into()]),
            "pinfold-el2+ablate-irq-fnptr+ablate-chip-lock.bin"
        );
    }

    #[test]
    fn plan_passing_the_pl061_through_is_isolated_on_qemu_virt() {
        let payload = payload_with_device("mmio = [{ base = 0x09030000, size = \"4KiB\" }]");

        let checked = check_plan_isolation(QEMU_VIRT_DTB, &payload);

        assert!(checked.is_ok(), "{checked:?}");
    }

    #[test]
    fn plan_mapping_host_ram_fails_naming_partition_and_field() {
        // Host RAM on QEMU virt starts at 1 GiB; the static rules pass it
        // (it is above this 64 MiB partition's own guest RAM window).
        let payload = payload_with_device("mmio = [{ base = 0x50000000, size = \"4KiB\" }]");

        let Err(IsolationCheck::Isolation(error)) = check_plan_isolation(QEMU_VIRT_DTB, &payload)
        else {
            panic!("the plan must break isolation");
        };

        assert_eq!(
            error.to_string(),
            "partition \"alpha\": device[0].mmio[0]: range 0x50000000+0x1000 overlaps host RAM \
             at 0x40000000+0x80000000"
        );
    }

    #[test]
    fn plan_asking_for_gic_v5_on_the_gicv3_board_fails_naming_gic() {
        let dir = std::env::temp_dir().join(format!("xtask-gic-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("raw"), b"a raw kernel").unwrap();
        let plan = |gic: &str| {
            let text = format!(
                "[board]\nname = \"qemu-virt\"\ncpus = 4\nmemory = \"2GiB\"\n\
                 [[partition]]\nname = \"alpha\"\ncpus = [1]\nmemory = \"64MiB\"\n\
                 kernel = \"raw\"\ngic = \"{gic}\"\n"
            );
            pinfold_config::parse(&text)
                .unwrap()
                .build_payload(&dir)
                .unwrap()
        };

        let Err(IsolationCheck::Other(error)) = check_plan_isolation(QEMU_VIRT_DTB, &plan("v5"))
        else {
            panic!("gic = \"v5\" must be refused on a GICv3 board");
        };
        assert_eq!(
            error.to_string(),
            "invalid config: partition \"alpha\": gic: gic = \"v5\" needs a GICv5 host; \
             this host has a GICv3"
        );
        for ok in ["auto", "v3"] {
            let checked = check_plan_isolation(QEMU_VIRT_DTB, &plan(ok));
            assert!(checked.is_ok(), "{ok}: {checked:?}");
        }
    }

    #[test]
    fn plan_mapping_the_its_fails() {
        let payload = payload_with_device("mmio = [{ base = 0x08080000, size = \"4KiB\" }]");

        let checked = check_plan_isolation(QEMU_VIRT_DTB, &payload);

        assert!(
            matches!(checked, Err(IsolationCheck::Isolation(_))),
            "{checked:?}"
        );
    }

    #[test]
    fn qemu_dumps_a_dtb_the_hypervisor_parser_accepts() {
        // Skipped where QEMU is not installed yet (provisioning installs it).
        if Command::new("qemu-system-aarch64")
            .arg("--version")
            .output()
            .is_err()
        {
            eprintln!("qemu-system-aarch64 not installed; skipped");
            return;
        }
        let out = std::env::temp_dir().join(format!("xtask-dump-{}.dtb", std::process::id()));
        let board = Board {
            cpus: 4,
            memory: 2 << 30,
            nic: false,
            partition_nics: crate::qemu::NicSlots::NONE,
        };

        cmd::run(&mut crate::qemu::dumpdtb_command(&board, &out)).unwrap();
        let blob = fs::read(&out).unwrap();
        let _ = fs::remove_file(&out);
        let info = pinfold_hv::dtb::parse_host_dtb(&blob).unwrap();

        assert_eq!(info.cpus.len(), 4);
        assert_eq!(info.memory, [(0x4000_0000, 2 << 30)]);
        assert!(info.device("/pl061").is_some());
    }
}
