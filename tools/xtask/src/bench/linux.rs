//! The Linux row: the default plan's kernel and initramfs booted to `Run
//! /init as init process`, once as the only partition of
//! `vm-configs/qemu-virt/bench-linux.toml` and once bare (QEMU `-kernel` at
//! EL1), under `-icount`, compared by the guest's own printk timestamp.
//!
//! Fairness: the bare kernel gets the same bootargs, the same RAM size, one
//! CPU, and a DTB of the same shape as the partition's, written by the
//! hypervisor's own generator (`pinfold_hv::dtb::build_guest_dtb`), so both
//! kernels probe the same devices (QEMU's own DTB would add PCIe, virtio-mmio,
//! fw_cfg, RTC, GPIO and an ITS). Both get a KASLR seed, so both relocate;
//! QEMU's `-seed` makes the seeds, hence the KASLR offsets, repeat.
//!
//! What printk time means: arm64 Linux stamps printk with sched_clock, which
//! reads 0 until the arch timer registers as sched_clock in time_init and
//! counts from there (kernel/time/sched_clock.c continues from the jiffies
//! clock, which is still 0): neither guest entry nor QEMU's reset, and not
//! moved by CNTVOFF. So the two stamps measure the same stretch of the
//! kernel's boot (time_init -> /init) and nothing is subtracted; the
//! hypervisor's own boot before the kernel is the boot-stamp row.

use std::path::{Path, PathBuf};

use pinfold_config::PartitionConfig;
use pinfold_hv::dtb::{build_guest_dtb, GuestDtbSpec};

use crate::harness::Line;

pub const RUN_INIT: &str = "Run /init as init process";
/// Guest RAM base of the virt board and of every partition.
const RAM_BASE: u64 = pinfold_hv::layout::GUEST_RAM_BASE;
/// Seeds for the bare DTB: the partition's DTB always carries seeds (from
/// the hypervisor), so the bare kernel gets some too and does the same KASLR
/// relocation. QEMU overwrites both with its guest RNG at every reset (so
/// the bench passes `-seed` to make them repeat); these only make the
/// properties exist.
const BARE_KASLR_SEED: u64 = 0x5049_4e46_4f4c_4442;
const BARE_RNG_SEED: [u8; 32] = [0x42; 32];

/// What one Linux boot printed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinuxRun {
    /// printk seconds of `Run /init as init process`.
    pub run_init_s: Option<f64>,
    /// printk seconds of the kernel's first line (`Booting Linux ...`):
    /// 0.000000 when printk time starts in the kernel, as expected.
    pub first_line_s: Option<f64>,
}

impl LinuxRun {
    /// Reads the kernel's lines of `partition` (lines prefixed `[name] `),
    /// or the unprefixed console of a bare run when `None`.
    pub fn parse(lines: &[Line], partition: Option<&str>) -> Self {
        let kernel_lines = || kernel_lines(lines, partition);
        Self {
            run_init_s: kernel_lines()
                .find(|l| l.contains(RUN_INIT))
                .and_then(printk_seconds),
            first_line_s: kernel_lines()
                .find(|l| l.contains("Booting Linux"))
                .and_then(printk_seconds),
        }
    }
}

/// The kernel's console lines of `partition`, its prefix removed; bare,
/// every line.
fn kernel_lines<'a>(
    lines: &'a [Line],
    partition: Option<&'a str>,
) -> impl Iterator<Item = &'a str> + 'a {
    lines.iter().filter_map(move |line| match partition {
        Some(name) => line
            .text
            .strip_prefix('[')
            .and_then(|rest| rest.strip_prefix(name))
            .and_then(|rest| rest.strip_prefix("] ")),
        None => Some(line.text.as_str()),
    })
}

/// The leading `[  seconds.micros]` of a kernel log line.
pub fn printk_seconds(line: &str) -> Option<f64> {
    let inside = line.trim_start().strip_prefix('[')?;
    let (stamp, _) = inside.split_once(']')?;
    stamp.trim().parse().ok()
}

/// The partition of the Linux bench plan and its files, resolved against
/// the workspace root.
#[derive(Debug, Clone)]
pub struct LinuxGuest {
    pub name: String,
    pub kernel: PathBuf,
    pub initrd: Option<PathBuf>,
    pub bootargs: String,
    pub memory: u64,
    pub pmu: bool,
}

impl LinuxGuest {
    pub fn from_plan(partition: &PartitionConfig, root: &Path) -> Self {
        let resolve = |p: &Path| {
            if p.is_absolute() {
                p.to_path_buf()
            } else {
                root.join(p)
            }
        };
        Self {
            name: partition.name.clone(),
            kernel: resolve(&partition.kernel),
            initrd: partition.initrd.as_deref().map(resolve),
            bootargs: partition.bootargs.clone(),
            memory: partition.memory.bytes(),
            pmu: partition.pmu,
        }
    }

    /// The DTB the bare kernel boots with: the partition's shape (one vCPU,
    /// its RAM size, its bootargs, its PMU setting) from the hypervisor's
    /// generator. QEMU adds the initrd range to /chosen itself.
    pub fn bare_dtb(&self) -> Result<Vec<u8>, String> {
        build_guest_dtb(&GuestDtbSpec {
            partition: &self.name,
            ram_base: RAM_BASE,
            ram_size: self.memory,
            vcpu_count: 1,
            bootargs: &self.bootargs,
            initrd: None,
            rng_seed: Some(BARE_RNG_SEED),
            kaslr_seed: Some(BARE_KASLR_SEED),
            pmu: self.pmu,
            its: false,
            pci_probe_only: false,
            devices: &[],
            extra: &[],
            gic: pinfold_hv::vgic5::GicInterface::V3,
        })
        .map_err(|e| format!("the bare DTB: {e:?}"))
    }

    /// QEMU arguments of the bare run after `-kernel`: initrd, bootargs and
    /// the DTB at `dtb`.
    pub fn bare_args(&self, dtb: &Path) -> Vec<String> {
        let mut args = Vec::new();
        if let Some(initrd) = &self.initrd {
            args.extend(["-initrd".to_string(), initrd.display().to_string()]);
        }
        args.extend([
            "-append".to_string(),
            self.bootargs.clone(),
            "-dtb".to_string(),
            dtb.display().to_string(),
        ]);
        args
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn lines(texts: &[&str]) -> Vec<Line> {
        texts
            .iter()
            .enumerate()
            .map(|(index, text)| Line {
                index,
                at: Duration::ZERO,
                text: text.to_string(),
            })
            .collect()
    }

    #[test]
    fn partition_lines_are_read_under_their_prefix_only() {
        let log = lines(&[
            "pinfold: cpu0: partition linux: booting vCPU 0 at IPA 0x40000000",
            "[linuxish] [    0.700000] Run /init as init process",
            "[linux] [    0.000000] Booting Linux on physical CPU 0x0000000000 [0x410fd083]",
            "[linux] [    0.794989] Run /init as init process",
        ]);

        let run = LinuxRun::parse(&log, Some("linux"));

        assert_eq!(
            run,
            LinuxRun {
                run_init_s: Some(0.794989),
                first_line_s: Some(0.0),
            }
        );
    }

    #[test]
    fn bare_lines_have_no_prefix() {
        let log = lines(&[
            "[    0.000000] Booting Linux on physical CPU 0x0000000000 [0x410fd083]",
            "[    0.797119] Run /init as init process",
        ]);

        assert_eq!(LinuxRun::parse(&log, None).run_init_s, Some(0.797119));
    }

    #[test]
    fn a_line_without_a_printk_stamp_gives_no_time() {
        let log = lines(&["[linux] Run /init as init process"]);

        assert_eq!(LinuxRun::parse(&log, Some("linux")).run_init_s, None);
        assert_eq!(printk_seconds("[ 1.5 "), None);
    }

    fn guest() -> LinuxGuest {
        LinuxGuest {
            name: "linux".into(),
            kernel: "/k/Image".into(),
            initrd: Some("/k/initrd".into()),
            bootargs: "console=ttyAMA0 earlycon=pl011,0x09000000".into(),
            memory: 256 << 20,
            pmu: true,
        }
    }

    #[test]
    fn bare_args_pass_initrd_bootargs_and_dtb() {
        let args = guest().bare_args(Path::new("/t/bare.dtb"));

        assert_eq!(
            args,
            [
                "-initrd",
                "/k/initrd",
                "-append",
                "console=ttyAMA0 earlycon=pl011,0x09000000",
                "-dtb",
                "/t/bare.dtb"
            ]
        );
    }

    #[test]
    fn bare_dtb_has_the_partition_shape_and_seeds() {
        let blob = guest().bare_dtb().unwrap();

        let fdt = fdt::Fdt::new(&blob).unwrap();
        let memory = fdt.memory().regions().next().unwrap();
        assert_eq!(memory.starting_address as u64, RAM_BASE);
        assert_eq!(memory.size, Some(256 << 20));
        assert_eq!(fdt.cpus().count(), 1);
        let chosen = fdt.find_node("/chosen").unwrap();
        assert_eq!(
            chosen.property("bootargs").and_then(|p| p.as_str()),
            Some("console=ttyAMA0 earlycon=pl011,0x09000000")
        );
        assert!(chosen.property("kaslr-seed").is_some());
        assert!(fdt.find_node("/pmu").is_some());
    }
}
