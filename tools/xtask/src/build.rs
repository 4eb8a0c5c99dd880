//! `cargo xtask build`: provisions the host, builds the EL2 image and the
//! test guests, validates the partition config and writes `pinfold.bin`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cmd;
use crate::error::{IoContext, XtaskError};
use crate::image::{assemble, HeaderWarning};
use crate::provision::{Provisioner, BARE_TARGET};
use crate::qemu::Board;
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
    /// The flat EL2 image, once built in this invocation.
    el2: Option<PathBuf>,
    manager_built: bool,
}

/// The management partition's image, as configs name it.
pub const MANAGER_IMAGE: &str = "target/pinfold/manager.bin";

impl<'w> Builder<'w> {
    pub fn new(ws: &'w Workspace) -> Self {
        Self {
            ws,
            provisioner: Provisioner::new(),
            el2: None,
            manager_built: false,
        }
    }

    /// Builds `target/pinfold/<out_name>` from `config`. A config that fails
    /// to parse fails before anything is built; one that fails validation
    /// (which needs the guest images) fails before the image is written.
    pub fn build(&mut self, config: &Path, out_name: &str) -> Result<Built, XtaskError> {
        let config_path = self.ws.resolve(config);
        let config = pinfold_config::load(&config_path)?;
        let el2 = self.binaries()?;
        if config.partitions.iter().any(|p| p.kernel.ends_with(MANAGER_IMAGE)) {
            self.manager()?;
        }

        config.validate(&self.ws.root)?;
        let payload = config.build_payload(&self.ws.root)?;
        let flat = fs::read(&el2).context(|| format!("reading {}", el2.display()))?;
        let assembled = assemble(flat, &payload);
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
            }
        }
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
        Ok(Built {
            image: out,
            board: Board {
                cpus: config.board.cpus,
                memory: config.board.memory.bytes(),
                nic: config.partitions.iter().any(|p| p.pci_host_bridge),
            },
        })
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

    /// Provisions the host and builds the EL2 image, the bare-metal test
    /// guest and the guest Linux files; returns the flat EL2 image.
    fn binaries(&mut self) -> Result<PathBuf, XtaskError> {
        if let Some(el2) = &self.el2 {
            return Ok(el2.clone());
        }
        self.provisioner.host_tools()?;
        self.provisioner.guest_linux(self.ws)?;
        let objcopy = llvm_objcopy()?;
        let release = self
            .ws
            .root
            .join("target")
            .join(BARE_TARGET)
            .join("release");
        let out_dir = self.ws.root.join("target/pinfold");
        let guest_dir = self.ws.root.join("target/guest");
        for dir in [&out_dir, &guest_dir] {
            fs::create_dir_all(dir).context(|| format!("creating {}", dir.display()))?;
        }

        cargo_build_bare(&self.ws.root, "pinfold")?;
        let el2 = out_dir.join("pinfold-el2.bin");
        flat_binary(&objcopy, &release.join("pinfold"), &el2)?;

        cargo_build_bare(&self.ws.root, "pinfold-test-guest")?;
        flat_binary(
            &objcopy,
            &release.join("pinfold-test-guest"),
            &guest_dir.join("test-guest.bin"),
        )?;

        self.el2 = Some(el2.clone());
        Ok(el2)
    }
}

fn cargo_build_bare(root: &Path, package: &str) -> Result<(), XtaskError> {
    cmd::run(cmd::cargo().current_dir(root).args([
        "build",
        "--release",
        "-p",
        package,
        "--target",
        BARE_TARGET,
    ]))
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
