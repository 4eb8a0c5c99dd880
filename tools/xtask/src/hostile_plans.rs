//! Hostile plans (vm-configs/qemu-virt/hostile/*.toml): one plan per
//! device-window rule of `pinfold_config::isolation` (a window over host
//! RAM, the hypervisor's own range, a GIC frame, another partition's
//! window, the PCIe host bridge another partition owns, or where the host
//! has no device). Each file says the refusal it must get on a line
//! `# refused: partition "NAME": FIELD: WHY`, or, when the build's
//! per-partition rules stop it before the isolation check (a window over
//! the partition's own emulated devices or another partition's window),
//! the two refusals on `# refused at build: ...` and `# refused at boot:
//! ...`.
//!
//! Each is refused twice, each refusal naming the partition and the field:
//! at build (`cargo xtask build`'s rules and isolation check against the
//! board's DTB; host test below against the captured QEMU virt DTB, and the
//! `hostile-plans` boot case through the real builder), and at boot: the
//! boot case forges a bundle signed with the enrolled key whose windows
//! skipped every build check ([`forged_payload`]), boots the generic image
//! with it as QEMU's `-initrd`, and expects the hypervisor's `the partition
//! plan was refused: ...` before any partition starts (the host test checks
//! the forged payload against the same DTB with the hypervisor's check).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::api_checks::Outcome;
use crate::build::Builder;
use crate::error::XtaskError;
use crate::harness::QemuRun;
use crate::qemu::{qemu_command, Extra};
use crate::Workspace;

/// Where the hostile plans are, relative to the workspace.
pub const PLANS_DIR: &str = "vm-configs/qemu-virt/hostile";
/// The comment lines naming a plan's refusals.
const REFUSED: &str = "# refused: ";
const REFUSED_AT_BUILD: &str = "# refused at build: ";
const REFUSED_AT_BOOT: &str = "# refused at boot: ";

/// One hostile plan and the refusals it must get.
pub struct HostilePlan {
    pub path: PathBuf,
    /// The TOML (the host test builds its payload from it).
    #[cfg_attr(not(test), allow(dead_code))]
    pub text: String,
    /// What `cargo xtask build` says.
    pub build: String,
    /// What the hypervisor says at boot after `the partition plan was
    /// refused: `.
    pub boot: String,
}

/// Stand-in windows for the forgery's build: distinct pages nothing in the
/// guest's map uses (QEMU virt's virtio-mmio frames).
const STAND_IN_BASE: u64 = 0x0a00_0000;

/// The payload of `config` with its device windows as written but no
/// build check applied to them: built with a distinct stand-in page per
/// window (so the rules and the images pass), then the plan's windows set
/// back to the config's and the plan re-encoded in front of the same images.
pub fn forged_payload(config: &pinfold_config::Config, root: &Path) -> Result<Vec<u8>, String> {
    let mut benign = config.clone();
    let mut k = 0;
    for p in &mut benign.partitions {
        for d in &mut p.devices {
            for m in &mut d.mmio {
                m.base = STAND_IN_BASE + k * 0x1000;
                m.size = pinfold_config::Size(0x1000);
                k += 1;
            }
        }
    }
    let payload = benign
        .build_payload(root)
        .map_err(|e| format!("the stand-in payload: {e}"))?;
    let mut plan = pinfold_config::Plan::decode(&payload).map_err(|e| format!("{e:?}"))?;
    for (pp, pc) in plan.partitions.iter_mut().zip(&config.partitions) {
        for (dp, dc) in pp.devices.iter_mut().zip(&pc.devices) {
            for (mp, mc) in dp.mmio.iter_mut().zip(&dc.mmio) {
                mp.base = mc.base;
                mp.size = mc.size.bytes();
            }
        }
    }
    let head = plan.encode_header_and_plan();
    let first = plan
        .images
        .iter()
        .map(|i| i.offset as usize)
        .min()
        .unwrap_or(payload.len());
    if head.len() > first {
        return Err("the forged plan does not fit before the first image".into());
    }
    let mut forged = head;
    forged.resize(first, 0);
    forged.extend_from_slice(&payload[first..]);
    Ok(forged)
}

/// Every plan of [`PLANS_DIR`], sorted by file name.
pub fn plans(root: &Path) -> Result<Vec<HostilePlan>, String> {
    let dir = root.join(PLANS_DIR);
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|path| {
            let text =
                std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let line = |prefix: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(prefix))
                    .map(|l| l.trim().to_string())
            };
            let both = line(REFUSED);
            let build = line(REFUSED_AT_BUILD).or(both.clone());
            let boot = line(REFUSED_AT_BOOT).or(both);
            let (Some(build), Some(boot)) = (build, boot) else {
                return Err(format!("{}: no `{REFUSED}...` line", path.display()));
            };
            Ok(HostilePlan {
                path,
                text,
                build,
                boot,
            })
        })
        .collect()
}

/// The boot case: every hostile plan refused by the builder and, forged
/// into a signed bundle, by the hypervisor at boot.
pub fn hostile_plans(ws: &Workspace, builder: &mut Builder<'_>, log_dir: &Path) -> Outcome {
    let image = builder
        .generic_image()
        .map_err(|e| format!("generic image: {e}"))?;
    let mut notes = Vec::new();
    for plan in plans(&ws.root)? {
        let name = plan
            .path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let rel = Path::new(PLANS_DIR).join(plan.path.file_name().unwrap_or_default());
        match builder.build(&rel, "test-hostile-plan.bin") {
            Err(XtaskError::Isolation { error, .. }) if error.to_string() == plan.build => {}
            Err(XtaskError::Config(error)) if error.to_string() == plan.build => {}
            Err(e) => return Err(format!("{name}: the build refused it otherwise: {e}")),
            Ok(_) => return Err(format!("{name}: the build accepted it")),
        }
        let config = pinfold_config::load(&ws.resolve(&rel)).map_err(|e| format!("{name}: {e}"))?;
        let (bundle, board) = builder
            .forged_bundle(&config)
            .map_err(|e| format!("{name}: forging its bundle: {e}"))?;
        let file = ws
            .root
            .join(format!("target/pinfold/test-hostile-{name}.bundle"));
        std::fs::write(&file, &bundle).map_err(|e| format!("{}: {e}", file.display()))?;
        let extra = Extra {
            args: vec!["-initrd".into(), file.display().to_string()],
            ..Extra::default()
        };
        let cmd = qemu_command(&board, &image, &extra);
        let log = log_dir.join(format!("hostile-plans-{name}.log"));
        let qemu = QemuRun::spawn(cmd, &log).map_err(|e| e.to_string())?;
        let deadline = Instant::now() + Duration::from_secs(180);
        let needle = "pinfold: the partition plan was refused: ";
        let line = qemu
            .wait_for(&format!("`{needle}`"), 0, deadline, |l| l.contains(needle))
            .map_err(|e| format!("{name}: {e}"))?;
        let want = format!("{needle}{}: halting", plan.boot);
        if !line.text.trim_end().ends_with(&want) {
            return Err(format!(
                "{name}: refused at boot for another reason: `{}` (wanted `{want}`)",
                line.text.trim()
            ));
        }
        if qemu.lines().iter().any(|l| l.text.contains("booting vCPU")) {
            return Err(format!("{name}: a partition booted from the refused plan"));
        }
        notes.push(format!(
            "{name}: refused at build ({}) and at boot {:.1} s after QEMU start ({})",
            plan.build,
            line.at.as_secs_f64(),
            plan.boot
        ));
    }
    Ok(notes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build::{check_plan_isolation, IsolationCheck};

    static QEMU_VIRT_DTB: &[u8] =
        include_bytes!("../../../hv/src/dtb/testdata/qemu-virt-gicv3.dtb");

    fn root() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    /// The plan with every kernel replaced by a small raw file (the real
    /// images need not exist for a host test), and where that file is.
    fn config(plan: &HostilePlan) -> (pinfold_config::Config, PathBuf) {
        static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("xtask-hostile-{}-{call}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("raw"), b"a raw kernel").unwrap();
        let text = plan.text.replace("target/guest/test-guest.bin", "raw");
        (pinfold_config::parse(&text).unwrap(), dir)
    }

    #[test]
    fn every_hostile_plan_is_refused_at_build_naming_partition_and_field() {
        let plans = plans(&root()).unwrap();
        assert!(plans.len() >= 7, "{} hostile plans", plans.len());

        for plan in &plans {
            let (config, dir) = config(plan);
            let refusal = match config.build_payload(&dir) {
                Err(e) => e.to_string(),
                Ok(payload) => match check_plan_isolation(QEMU_VIRT_DTB, &payload) {
                    Err(IsolationCheck::Isolation(e)) => e.to_string(),
                    other => panic!("{}: {other:?}", plan.path.display()),
                },
            };
            assert_eq!(refusal, plan.build, "{}", plan.path.display());
        }
    }

    #[test]
    fn every_forged_hostile_plan_is_refused_by_the_boot_check() {
        for plan in plans(&root()).unwrap() {
            let (config, dir) = config(&plan);
            let forged = forged_payload(&config, &dir).unwrap();
            match check_plan_isolation(QEMU_VIRT_DTB, &forged) {
                Err(IsolationCheck::Isolation(e)) => {
                    assert_eq!(e.to_string(), plan.boot, "{}", plan.path.display())
                }
                other => panic!("{}: {other:?}", plan.path.display()),
            }
        }
    }

    #[test]
    fn a_forged_payload_keeps_its_images() {
        let plan = &plans(&root()).unwrap()[0];
        let (config, dir) = config(plan);

        let forged = pinfold_config::Plan::decode(&forged_payload(&config, &dir).unwrap()).unwrap();

        let image = &forged.images[forged.partitions[0].kernel.image as usize];
        let forged_bytes = forged_payload(&config, &dir).unwrap();
        assert_eq!(
            &forged_bytes[image.offset as usize..][..image.size as usize],
            b"a raw kernel"
        );
    }

    #[test]
    fn every_refusal_names_a_partition_and_a_device_field() {
        for plan in plans(&root()).unwrap() {
            for refusal in [&plan.build, &plan.boot] {
                assert!(
                    refusal.starts_with("partition \"") && refusal.contains("device"),
                    "{}: {refusal}",
                    plan.path.display()
                );
            }
        }
    }
}
