//! The one place that knows how QEMU is started for Pinfold, shared by
//! `cargo xtask run`, the boot tests and the build's DTB dump so all three
//! see the same machine, and the one place that reads `PINFOLD_MANAGER_PORT`
//! (the host port forwarded to the manager). The forwarder's listen
//! backlog is raised by crate::hostfwd's preload library; `PINFOLD_NET_DUMP`
//! records the management NIC into a pcap.

use std::path::Path;
use std::process::Command;

use crate::hostfwd;

/// The emulated machine as a config's `[board]` describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Board {
    pub cpus: u32,
    /// Bytes of RAM.
    pub memory: u64,
    /// A partition owns the PCIe host bridge: give QEMU the management NIC
    /// (virtio-net-pci on user networking, the REST API forwarded to
    /// 127.0.0.1:[`manager_port`]).
    pub nic: bool,
    /// The functions the plan assigns to partitions other than the
    /// manager: each gets a virtio-net-pci at that address on a user
    /// network of its own ([`PartitionNic`]), so every boot of the plan
    /// (run, tests, netboots) has the devices its partitions were given.
    pub partition_nics: NicSlots,
}

/// At most this many partition NICs on one board.
pub const MAX_PARTITION_NICS: usize = 8;

/// The (device, function) addresses on bus 0 of the partition NICs of a
/// board, in plan order (a fixed array so [`Board`] stays `Copy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct NicSlots([Option<(u8, u8)>; MAX_PARTITION_NICS]);

impl NicSlots {
    /// None: a board whose partitions have no functions of their own.
    pub const NONE: NicSlots = NicSlots([None; MAX_PARTITION_NICS]);

    /// The slots of [`partition_nics`] of `config` (the first
    /// [`MAX_PARTITION_NICS`]; the plan check refuses more functions
    /// than QEMU's bus 0 can hold long before).
    pub fn of_plan(config: &pinfold_config::Config) -> NicSlots {
        let mut slots = NicSlots::NONE;
        for (slot, nic) in slots
            .0
            .iter_mut()
            .zip(partition_nics(config, DEFAULT_MANAGER_PORT))
        {
            *slot = Some((nic.device, nic.function));
        }
        slots
    }

    pub fn iter(&self) -> impl Iterator<Item = (u8, u8)> + '_ {
        self.0.iter().flatten().copied()
    }
}

/// Host port forwarded to the manager's REST API and web UI unless
/// [`MANAGER_PORT_ENV`] names another.
pub const DEFAULT_MANAGER_PORT: u16 = 8080;
/// Environment variable that moves the forwarded port, so two checkouts can
/// boot at once (e.g. `PINFOLD_MANAGER_PORT=18080 cargo xtask test`).
pub const MANAGER_PORT_ENV: &str = "PINFOLD_MANAGER_PORT";
/// The port the manager listens on inside the guest (its NIC, not ours).
const GUEST_MANAGER_PORT: u16 = 8080;

/// The host port forwarded to the manager: `PINFOLD_MANAGER_PORT` if set
/// (read once; a value that is not a port is a usage error and panics with
/// the variable's name), else 8080. Every hostfwd and every API check takes
/// the port from here.
pub fn manager_port() -> u16 {
    static PORT: std::sync::OnceLock<u16> = std::sync::OnceLock::new();
    *PORT.get_or_init(|| parse_manager_port(std::env::var(MANAGER_PORT_ENV).ok().as_deref()))
}

fn parse_manager_port(value: Option<&str>) -> u16 {
    match value.map(str::trim) {
        None | Some("") => DEFAULT_MANAGER_PORT,
        Some(v) => match v.parse::<u16>() {
            Ok(port) if port != 0 => port,
            _ => panic!("{MANAGER_PORT_ENV}={v:?} is not a TCP port (1-65535)"),
        },
    }
}

/// Whether the plan's management partition has a NIC: the whole host
/// bridge, or a function of it assigned (`pci`).
pub fn plan_has_management_nic(config: &pinfold_config::Config) -> bool {
    config
        .partitions
        .iter()
        .any(|p| p.pci_host_bridge || (p.management && !p.pci.is_empty()))
}

/// A NIC of a partition other than the manager's: a virtio-net-pci
/// function at the plan's device.function on the one host bridge, on a
/// user network of its own that forwards 127.0.0.1:`host_port` to port 80
/// of the guest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionNic {
    pub partition: String,
    pub device: u8,
    pub function: u8,
    pub host_port: u16,
}

/// The host port forwarded to port 80 of the partition whose NIC is at
/// device `device`: the manager's port + 10 + device (the store is + 2).
pub fn partition_nic_port(manager_port: u16, device: u8) -> u16 {
    manager_port.wrapping_add(10 + u16::from(device))
}

/// One NIC per function the plan assigns to a partition that is not the
/// management partition (QEMU's virtio-net-pci at that address).
pub fn partition_nics(config: &pinfold_config::Config, manager_port: u16) -> Vec<PartitionNic> {
    config
        .partitions
        .iter()
        .filter(|p| !p.management)
        .flat_map(|p| {
            p.pci.iter().map(|a| PartitionNic {
                partition: p.name.clone(),
                device: a.device,
                function: a.function,
                host_port: partition_nic_port(manager_port, a.device),
            })
        })
        .collect()
}

/// Byte QEMU's console multiplexer reacts to: Ctrl-] (0x1d). QEMU's default,
/// Ctrl-A, is the hypervisor monitor's prefix and must reach the UART.
pub const QEMU_ESCAPE: u8 = 0x1d;

/// What a particular invocation adds to the machine.
#[derive(Debug, Clone, Default)]
pub struct Extra {
    /// Further arguments, appended last.
    pub args: Vec<String>,
    /// Replaces the `-accel` value; `None` keeps multi-threaded TCG. Needed
    /// because QEMU refuses `thread=multi` together with `-icount`.
    pub accel: Option<String>,
    /// Boot through firmware instead of `-kernel`: the firmware image
    /// (`-bios`) and the address where QEMU places our image for it to
    /// start (`-device loader`).
    pub firmware: Option<(std::path::PathBuf, u64)>,
    /// The management NIC's QEMU device model when the board has one;
    /// `None` is `virtio-net-pci` (the one Hermit drives). `e1000` gives a
    /// NIC the manager has no driver for.
    pub nic_model: Option<String>,
    /// Network boot: the management NIC's user network serves this TFTP
    /// tree and names this boot file in its DHCP offers.
    pub netboot: Option<Netboot>,
    /// Boot through UEFI: edk2 starts the generic image from the network
    /// (with [`Extra::netboot`] for PXE, or a boot entry in its variable
    /// store for HTTP); the image argument of [`qemu_command`] is unused.
    pub uefi: Option<Uefi>,
    /// Run on the private QEMU 10 (`provision::qemu_10`) with an SMMUv3 in
    /// front of the PCIe host bridge doing stage 2 (`-M ...,iommu=smmuv3
    /// -global arm-smmuv3.stage=2`): QEMU 7.2's SMMUv3 has stage 1 only.
    pub smmu: Option<Qemu10>,
    /// `gic-version=4` instead of 3: a GICv4.0 (vPEs, direct vLPI
    /// injection; QEMU 7.2 and 10 emulate it under TCG, without vSGIs).
    pub gicv4: bool,
}

/// A QEMU 10 unpacked beside the system's 7.2 (never installed over it):
/// the binary, its data directory (`-L`) and its modules
/// (`QEMU_MODULE_DIR`: it must not load 7.2's).
#[derive(Debug, Clone)]
pub struct Qemu10 {
    pub bin: std::path::PathBuf,
    pub data: std::path::PathBuf,
    pub modules: std::path::PathBuf,
}

/// What QEMU's user-network DHCP and TFTP server offer a netbooting
/// firmware.
#[derive(Debug, Clone)]
pub struct Netboot {
    /// The TFTP root (`cargo xtask pxe --out`).
    pub tftp: std::path::PathBuf,
    /// The DHCP boot file name.
    pub bootfile: String,
    /// The NIC's MAC address, which picks the host's boot bundle.
    pub mac: String,
}

/// A UEFI boot: which firmware, and whether QEMU describes the machine
/// with ACPI (edk2 then publishes no DT).
#[derive(Debug, Clone)]
pub struct Uefi {
    pub firmware: UefiFirmware,
    /// `false` adds `acpi=off` to `-M`: edk2 then installs QEMU's DTB as a
    /// configuration table and no ACPI tables.
    pub acpi: bool,
    /// `false`: the machine without EL2 (`virtualization=on` left out), so
    /// firmware runs at EL1 and starts the image there.
    pub el2: bool,
}

/// The firmware images of a UEFI boot.
#[derive(Debug, Clone)]
pub enum UefiFirmware {
    /// `-bios`: edk2 with its variables in RAM (the boot order it makes up).
    Bios(std::path::PathBuf),
    /// Two pflash drives: the code, read-only, and a copy of a variable
    /// store (boot entries written into it beforehand, e.g. an HTTP URI).
    Pflash {
        code: std::path::PathBuf,
        vars: std::path::PathBuf,
    },
}

/// The management NIC unless an [`Extra`] names another model: a modern
/// (non-transitional, 1af4:1041) virtio-net, the interface Hermit drives.
/// With the default transitional device U-Boot 2023.01 binds its legacy
/// virtio driver, which reads the MAC as 52:52:52:52:52:52: its `dhcp`
/// then holds the user network's first lease (10.0.2.15, where hostfwd
/// points) for a MAC the NIC does not have, and the manager, asking with
/// the real MAC, is given 10.0.2.16 (docs/MANAGER.md).
pub const DEFAULT_NIC_MODEL: &str = "virtio-net-pci,disable-legacy=on";

/// The `-accel` value unless an [`Extra`] overrides it: one host thread per
/// vCPU, so a four-CPU board boots in a reasonable time.
pub const DEFAULT_ACCEL: &str = "tcg,thread=multi";

/// The `-M` value: `virt` with EL2 and a GICv3.
const MACHINE: &str = "virt,virtualization=on,gic-version=3";

/// The machine, CPU model, CPU count and RAM: what decides the DTB QEMU
/// generates, shared by the run and the DTB dump so they describe one board.
fn machine(qemu: &mut Command, board: &Board, machine: String) {
    qemu.arg("-M")
        .arg(machine)
        .args(["-cpu", "cortex-a72"])
        .arg("-smp")
        .arg(board.cpus.to_string())
        .arg("-m")
        .arg(format!("{}M", board.memory.div_ceil(1 << 20)));
}

/// `qemu-system-aarch64` writing the DTB it would hand the hypervisor on
/// `board` to `out` (`-M ...,dumpdtb=FILE`) and exiting at once; the build
/// checks the plan's isolation against it. `out` must not contain a comma.
pub fn dumpdtb_command(board: &Board, out: &Path) -> Command {
    let mut qemu = Command::new("qemu-system-aarch64");
    machine(
        &mut qemu,
        board,
        format!("{MACHINE},dumpdtb={}", out.display()),
    );
    qemu.args(["-display", "none"]);
    qemu
}

/// `qemu-system-aarch64` booting `image` at EL2 on a GICv3 `virt` board.
///
/// The console: one stdio character device, multiplexed between the UART and
/// QEMU's monitor with Ctrl-] as the escape (Ctrl-] x quits, Ctrl-] c toggles
/// the monitor), and with `signal=off` so Ctrl-C reaches the guest rather
/// than killing QEMU. Ctrl-A therefore reaches the hypervisor's own monitor
/// untouched. With stdin not a terminal (tests) the same device just pipes.
pub fn qemu_command(board: &Board, image: &Path, extra: &Extra) -> Command {
    let mut qemu = match &extra.smmu {
        None => Command::new("qemu-system-aarch64"),
        Some(q) => {
            let mut c = Command::new(&q.bin);
            c.env("QEMU_MODULE_DIR", &q.modules).arg("-L").arg(&q.data);
            c
        }
    };
    let mut machine_value = match &extra.uefi {
        Some(u) if !u.el2 => BARE_MACHINE.to_string(),
        _ => MACHINE.to_string(),
    };
    if extra.gicv4 {
        machine_value = machine_value.replace("gic-version=3", "gic-version=4");
    }
    if extra.smmu.is_some() {
        machine_value.push_str(",iommu=smmuv3");
        qemu.args(["-global", "arm-smmuv3.stage=2"]);
    }
    if extra.uefi.as_ref().is_some_and(|u| !u.acpi) {
        machine_value.push_str(",acpi=off");
    }
    machine(&mut qemu, board, machine_value);
    accel_and_console(&mut qemu, extra);
    // edk2 offers EFI_RNG_PROTOCOL only with an entropy device: every UEFI
    // boot has one, so the hypervisor's boot entropy includes it. At the
    // bus's last slot: first on the command line it would take slot 1, the
    // management NIC's 00:01.0 in the per-function plans, and push that NIC
    // onto a partition NIC's slot.
    if extra.uefi.is_some() {
        qemu.args(["-device", "virtio-rng-pci,addr=0x1f.0"]);
    }
    match (&extra.firmware, &extra.uefi) {
        (_, Some(uefi)) => match &uefi.firmware {
            UefiFirmware::Bios(bios) => {
                qemu.arg("-bios").arg(bios);
            }
            UefiFirmware::Pflash { code, vars } => {
                qemu.arg("-drive").arg(format!(
                    "if=pflash,format=raw,unit=0,readonly=on,file={}",
                    code.display()
                ));
                qemu.arg("-drive").arg(format!(
                    "if=pflash,format=raw,unit=1,file={}",
                    vars.display()
                ));
            }
        },
        (None, None) => {
            qemu.arg("-kernel").arg(image);
        }
        // Netbooting firmware fetches the image from the tree itself.
        (Some((bios, _)), None) if extra.netboot.is_some() => {
            qemu.arg("-bios").arg(bios);
        }
        (Some((bios, addr)), None) => {
            qemu.arg("-bios").arg(bios).arg("-device").arg(format!(
                "loader,file={},addr={addr:#x},force-raw=on",
                image.display()
            ));
        }
    }
    match &extra.netboot {
        None if board.nic => {
            let model = extra.nic_model.as_deref().unwrap_or(DEFAULT_NIC_MODEL);
            qemu.arg("-device")
                .arg(format!("{model},netdev=mgmt0"))
                .arg("-netdev")
                .arg(netdev(manager_port()));
            forwarder_backlog(&mut qemu);
            if let Some(file) = net_dump() {
                qemu.arg("-object")
                    .arg(format!("filter-dump,id=netdump,netdev=mgmt0,file={file}"));
            }
        }
        None => {}
        Some(boot) => {
            // Modern-only: U-Boot 2023.01's legacy virtio-net driver reports
            // 52:52:52:52:52:52 whatever the device's MAC, so its per-MAC
            // pxelinux.cfg lookup would never find the host's own file.
            qemu.arg("-device")
                .arg(format!(
                    "virtio-net-pci,netdev=mgmt0,mac={},disable-legacy=on",
                    boot.mac
                ))
                .arg("-netdev");
            forwarder_backlog(&mut qemu);
            qemu.arg(format!(
                "{},tftp={},bootfile={}",
                netdev(manager_port()),
                boot.tftp.display(),
                boot.bootfile
            ));
        }
    }
    for (i, (device, function)) in board.partition_nics.iter().enumerate() {
        let id = format!("pnet{i}");
        qemu.arg("-device")
            .arg(format!(
                "{DEFAULT_NIC_MODEL},netdev={id},addr={device:#x}.{function}"
            ))
            .arg("-netdev")
            .arg(format!(
                "user,id={id},hostfwd=tcp:127.0.0.1:{}-:80",
                partition_nic_port(manager_port(), device)
            ));
    }
    qemu.args(&extra.args);
    qemu
}

/// The accelerator and the console both kinds of run share (see
/// [`qemu_command`] for the console's keys).
fn accel_and_console(qemu: &mut Command, extra: &Extra) {
    qemu.arg("-accel")
        .arg(extra.accel.as_deref().unwrap_or(DEFAULT_ACCEL))
        .args(["-display", "none"])
        .args(["-chardev", "stdio,id=console,mux=on,signal=off"])
        .args(["-serial", "chardev:console"])
        .args(["-mon", "chardev=console,mode=readline"])
        .arg("-echr")
        .arg(QEMU_ESCAPE.to_string());
}

/// The `-M` value of a bare run: the same `virt` board and GICv3 without
/// EL2, so `-kernel` enters the image at EL1 (the benchmark's reference).
const BARE_MACHINE: &str = "virt,gic-version=3";
/// The bare board with a GICv4.0: `virt` with EL2 (QEMU: "gic-version=4
/// requires virtualization enabled"), which the image leaves idle.
const BARE_GICV4_MACHINE: &str = "virt,virtualization=on,gic-version=4";

/// `qemu-system-aarch64` booting `kernel` directly at EL1 on the board a
/// Pinfold image would run on (same machine but for EL2, CPU model, CPU
/// count, RAM and console): the bare-metal reference of `cargo xtask bench`.
/// QEMU answers PSCI itself (over HVC, as its DTB's /psci says).
/// With [`Extra::gicv4`] the board has QEMU's GICv4.0, as the hosted run
/// beside it: QEMU refuses `gic-version=4` without EL2, so that board is
/// [`BARE_GICV4_MACHINE`] and enters the image at EL2; the probe guest then
/// drops to EL1 itself (tools/test-guest `_start`).
pub fn bare_command(board: &Board, kernel: &Path, extra: &Extra) -> Command {
    let mut qemu = Command::new("qemu-system-aarch64");
    let machine_value = if extra.gicv4 {
        BARE_GICV4_MACHINE
    } else {
        BARE_MACHINE
    };
    machine(&mut qemu, board, machine_value.to_string());
    accel_and_console(&mut qemu, extra);
    qemu.arg("-kernel").arg(kernel);
    qemu.args(&extra.args);
    qemu
}

/// QEMU's forwarder of the manager's port listens with a backlog of 1,
/// which loses connections of a burst on the host: QEMU runs with
/// [`hostfwd`]'s preload library that raises it.
fn forwarder_backlog(qemu: &mut Command) {
    if let Some(lib) = hostfwd::preload() {
        qemu.env("LD_PRELOAD", hostfwd::ld_preload(lib));
    }
}

/// Environment variable naming a pcap file: QEMU then records every frame
/// of the management NIC's user network into it (`filter-dump`), the
/// manager's side of every forwarded connection (tcpdump or tshark read
/// it). Timestamps are QEMU's virtual clock.
const NET_DUMP_ENV: &str = "PINFOLD_NET_DUMP";

fn net_dump() -> Option<String> {
    std::env::var(NET_DUMP_ENV)
        .ok()
        .filter(|v| !v.trim().is_empty())
}

/// The management NIC's user-mode network, forwarding `host_port` on
/// 127.0.0.1 to the manager.
fn netdev(host_port: u16) -> String {
    format!("user,id=mgmt0,hostfwd=tcp:127.0.0.1:{host_port}-:{GUEST_MANAGER_PORT}")
}

#[cfg(test)]
mod smmu_tests {
    use super::*;

    #[test]
    fn the_default_plan_gives_alpha_and_beta_a_nic_each_on_every_boot() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let plan = pinfold_config::load(&root.join(crate::build::DEFAULT_CONFIG)).unwrap();
        let board = Board {
            cpus: 4,
            memory: 2 << 30,
            nic: plan_has_management_nic(&plan),
            partition_nics: NicSlots::of_plan(&plan),
        };
        assert_eq!(
            board.partition_nics.iter().collect::<Vec<_>>(),
            [(2, 0), (3, 0)]
        );
        let names: Vec<_> = partition_nics(&plan, 8080)
            .into_iter()
            .map(|n| (n.partition, n.host_port))
            .collect();
        assert_eq!(names, [("alpha".into(), 8092), ("beta".into(), 8093)]);
        let args: Vec<String> = qemu_command(&board, Path::new("x"), &Extra::default())
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let devices: Vec<&str> = args
            .windows(2)
            .filter(|w| w[0] == "-device")
            .map(|w| w[1].as_str())
            .collect();
        assert_eq!(
            devices,
            [
                "virtio-net-pci,disable-legacy=on,netdev=mgmt0",
                "virtio-net-pci,disable-legacy=on,netdev=pnet0,addr=0x2.0",
                "virtio-net-pci,disable-legacy=on,netdev=pnet1,addr=0x3.0",
            ]
        );
        let port = manager_port();
        for (id, device) in [("pnet0", 2), ("pnet1", 3)] {
            let want = format!(
                "user,id={id},hostfwd=tcp:127.0.0.1:{}-:80",
                partition_nic_port(port, device)
            );
            assert!(args.contains(&want), "{want} in {args:?}");
        }
    }

    #[test]
    fn a_gicv4_run_asks_for_gic_version_4_and_nothing_else_changes() {
        let board = Board {
            cpus: 4,
            memory: 2 << 30,
            nic: true,
            partition_nics: crate::qemu::NicSlots::NONE,
        };
        let args = |extra: &Extra| -> Vec<String> {
            qemu_command(&board, Path::new("/i.bin"), extra)
                .get_args()
                .map(|a| a.to_string_lossy().into_owned())
                .collect()
        };
        let v3 = args(&Extra::default());
        let v4 = args(&Extra {
            gicv4: true,
            ..Extra::default()
        });
        let m = |a: &[String]| a[a.iter().position(|x| x == "-M").unwrap() + 1].clone();
        assert_eq!(m(&v4), "virt,virtualization=on,gic-version=4");
        assert_eq!(m(&v3), "virt,virtualization=on,gic-version=3");
        let rest = |a: &[String]| {
            let mut a = a.to_vec();
            a.retain(|x| !x.starts_with("virt,"));
            a
        };
        assert_eq!(rest(&v3), rest(&v4));
    }

    #[test]
    fn a_gicv4_bare_run_is_the_board_with_el2_and_gic_version_4() {
        let board = Board {
            cpus: 4,
            memory: 2 << 30,
            nic: false,
            partition_nics: crate::qemu::NicSlots::NONE,
        };
        let m = |extra: &Extra| -> String {
            let args: Vec<String> = bare_command(&board, Path::new("/g.bin"), extra)
                .get_args()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            args[args.iter().position(|x| x == "-M").unwrap() + 1].clone()
        };

        assert_eq!(m(&Extra::default()), "virt,gic-version=3");
        let gicv4 = Extra {
            gicv4: true,
            ..Extra::default()
        };
        assert_eq!(m(&gicv4), "virt,virtualization=on,gic-version=4");
    }

    #[test]
    fn an_smmu_run_uses_qemu_10_with_a_stage_2_smmuv3() {
        let board = Board {
            cpus: 4,
            memory: 2 << 30,
            nic: true,
            partition_nics: crate::qemu::NicSlots::NONE,
        };
        let q = Qemu10 {
            bin: "/q/usr/bin/qemu-system-aarch64".into(),
            data: "/q/usr/share/qemu".into(),
            modules: "/q/usr/lib/x86_64-linux-gnu/qemu".into(),
        };
        let extra = Extra {
            smmu: Some(q),
            ..Extra::default()
        };
        let cmd = qemu_command(&board, Path::new("/i.bin"), &extra);
        assert_eq!(cmd.get_program(), "/q/usr/bin/qemu-system-aarch64");
        let args: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let after = |k: &str| {
            args.iter()
                .position(|a| a == k)
                .map(|i| args[i + 1].clone())
        };
        assert_eq!(
            after("-M").as_deref(),
            Some("virt,virtualization=on,gic-version=3,iommu=smmuv3")
        );
        assert_eq!(after("-global").as_deref(), Some("arm-smmuv3.stage=2"));
        assert_eq!(after("-L").as_deref(), Some("/q/usr/share/qemu"));
        assert!(cmd.get_envs().any(|(k, v)| k == "QEMU_MODULE_DIR"
            && v.is_some_and(|v| v == "/q/usr/lib/x86_64-linux-gnu/qemu")));
        // Without it: the system's QEMU, no SMMU.
        let plain = qemu_command(&board, Path::new("/i.bin"), &Extra::default());
        assert_eq!(plain.get_program(), "qemu-system-aarch64");
        assert!(!plain.get_args().any(|a| a == "-global"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nic_board_gets_virtio_net_with_the_api_port_forwarded() {
        let board = Board {
            cpus: 4,
            memory: 2 << 30,
            nic: true,
            partition_nics: crate::qemu::NicSlots::NONE,
        };

        let cmd = qemu_command(&board, Path::new("x.bin"), &Extra::default());

        let args = args(&cmd);
        assert_eq!(
            value_after(&args, "-device").as_deref(),
            Some("virtio-net-pci,disable-legacy=on,netdev=mgmt0")
        );
        assert_eq!(
            value_after(&args, "-netdev"),
            Some(format!(
                "user,id=mgmt0,hostfwd=tcp:127.0.0.1:{}-:8080",
                manager_port()
            ))
        );
    }

    #[test]
    fn uefi_pxe_boot_has_firmware_no_kernel_acpi_off_and_the_tftp_tree() {
        let board = Board {
            cpus: 4,
            memory: 2 << 30,
            nic: true,
            partition_nics: crate::qemu::NicSlots::NONE,
        };
        let extra = Extra {
            uefi: Some(Uefi {
                firmware: UefiFirmware::Bios("/fw/QEMU_EFI.fd".into()),
                acpi: false,
                el2: true,
            }),
            netboot: Some(Netboot {
                tftp: "/srv/tree".into(),
                bootfile: "pinfold.efi".into(),
                mac: "52:54:00:12:34:56".into(),
            }),
            ..Extra::default()
        };

        let args = args(&qemu_command(&board, Path::new("unused.bin"), &extra));

        assert_eq!(
            value_after(&args, "-bios").as_deref(),
            Some("/fw/QEMU_EFI.fd")
        );
        assert_eq!(value_after(&args, "-kernel"), None);
        assert!(value_after(&args, "-M")
            .unwrap_or_default()
            .ends_with(",acpi=off"));
        assert!(value_after(&args, "-netdev")
            .unwrap_or_default()
            .ends_with(",tftp=/srv/tree,bootfile=pinfold.efi"));
    }

    #[test]
    fn uefi_pflash_boot_has_read_only_code_and_writable_vars_with_acpi() {
        let board = Board {
            cpus: 1,
            memory: 1 << 30,
            nic: true,
            partition_nics: crate::qemu::NicSlots::NONE,
        };
        let extra = Extra {
            uefi: Some(Uefi {
                firmware: UefiFirmware::Pflash {
                    code: "/fw/CODE.fd".into(),
                    vars: "/tmp/VARS.fd".into(),
                },
                acpi: true,
                el2: true,
            }),
            ..Extra::default()
        };

        let args = args(&qemu_command(&board, Path::new("unused.bin"), &extra));

        let drives: Vec<&String> = args
            .iter()
            .zip(args.iter().skip(1))
            .filter(|(flag, _)| *flag == "-drive")
            .map(|(_, value)| value)
            .collect();
        assert_eq!(
            drives,
            [
                "if=pflash,format=raw,unit=0,readonly=on,file=/fw/CODE.fd",
                "if=pflash,format=raw,unit=1,file=/tmp/VARS.fd"
            ]
        );
        assert!(!value_after(&args, "-M")
            .unwrap_or_default()
            .contains("acpi"));
        assert_eq!(value_after(&args, "-bios"), None);
    }

    #[test]
    fn nic_model_replaces_virtio_net_on_the_same_netdev() {
        let board = Board {
            cpus: 4,
            memory: 2 << 30,
            nic: true,
            partition_nics: crate::qemu::NicSlots::NONE,
        };
        let extra = Extra {
            nic_model: Some("e1000".into()),
            ..Extra::default()
        };

        let cmd = qemu_command(&board, Path::new("x.bin"), &extra);

        let args = args(&cmd);
        assert_eq!(
            value_after(&args, "-device").as_deref(),
            Some("e1000,netdev=mgmt0")
        );
        assert!(!args.iter().any(|a| a.contains("virtio-net")));
    }

    #[test]
    fn manager_port_is_8080_without_the_variable() {
        assert_eq!(parse_manager_port(None), 8080);
        assert_eq!(parse_manager_port(Some("")), 8080);
    }

    #[test]
    fn manager_port_variable_moves_the_forwarded_port() {
        let port = parse_manager_port(Some("18080"));

        assert_eq!(port, 18080);
        assert_eq!(
            netdev(port),
            "user,id=mgmt0,hostfwd=tcp:127.0.0.1:18080-:8080"
        );
    }

    #[test]
    #[should_panic(expected = "PINFOLD_MANAGER_PORT")]
    fn manager_port_variable_that_is_not_a_port_is_refused() {
        parse_manager_port(Some("80x"));
    }

    fn args(cmd: &Command) -> Vec<String> {
        cmd.get_args()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect()
    }

    fn value_after(args: &[String], flag: &str) -> Option<String> {
        args.iter()
            .position(|arg| arg == flag)
            .and_then(|i| args.get(i + 1).cloned())
    }

    #[test]
    fn smp_and_memory_come_from_the_board() {
        let board = Board {
            cpus: 4,
            memory: 2 << 30,
            nic: false,
            partition_nics: crate::qemu::NicSlots::NONE,
        };

        let cmd = qemu_command(&board, Path::new("pinfold.bin"), &Extra::default());

        let args = args(&cmd);
        assert_eq!(value_after(&args, "-smp").as_deref(), Some("4"));
        assert_eq!(value_after(&args, "-m").as_deref(), Some("2048M"));
    }

    #[test]
    fn machine_has_el2_and_gicv3() {
        let board = Board {
            cpus: 1,
            memory: 1 << 30,
            nic: false,
            partition_nics: crate::qemu::NicSlots::NONE,
        };

        let cmd = qemu_command(&board, Path::new("x"), &Extra::default());

        let machine = value_after(&args(&cmd), "-M").unwrap_or_default();
        assert!(machine.contains("virtualization=on"), "{machine}");
        assert!(machine.contains("gic-version=3"), "{machine}");
    }

    #[test]
    fn dtb_dump_uses_the_run_machine_cpus_and_memory() {
        let board = Board {
            cpus: 3,
            memory: 1 << 30,
            nic: false,
            partition_nics: crate::qemu::NicSlots::NONE,
        };

        let dump = args(&dumpdtb_command(&board, Path::new("/tmp/x.dtb")));
        let run = args(&qemu_command(&board, Path::new("x"), &Extra::default()));

        assert_eq!(
            value_after(&dump, "-M").as_deref(),
            Some("virt,virtualization=on,gic-version=3,dumpdtb=/tmp/x.dtb")
        );
        for flag in ["-cpu", "-smp", "-m"] {
            assert_eq!(value_after(&dump, flag), value_after(&run, flag), "{flag}");
        }
    }

    #[test]
    fn bare_run_is_the_same_board_without_el2() {
        let board = Board {
            cpus: 4,
            memory: 2 << 30,
            nic: true,
            partition_nics: crate::qemu::NicSlots::NONE,
        };
        let extra = Extra {
            args: vec!["-icount".into(), "shift=0".into()],
            accel: Some("tcg,thread=single".into()),
            ..Extra::default()
        };

        let bare = args(&bare_command(&board, Path::new("guest.bin"), &extra));
        let hosted = args(&qemu_command(&board, Path::new("x"), &extra));

        assert_eq!(
            value_after(&bare, "-M").as_deref(),
            Some("virt,gic-version=3")
        );
        assert_eq!(value_after(&bare, "-kernel").as_deref(), Some("guest.bin"));
        for flag in ["-cpu", "-smp", "-m", "-accel", "-icount"] {
            assert_eq!(
                value_after(&bare, flag),
                value_after(&hosted, flag),
                "{flag}"
            );
        }
        // No management NIC: nothing in a bare run would drive it.
        assert_eq!(value_after(&bare, "-device"), None);
    }

    #[test]
    fn qemu_escape_is_not_ctrl_a() {
        let cmd = qemu_command(
            &Board {
                cpus: 1,
                memory: 1 << 30,
                nic: false,
                partition_nics: crate::qemu::NicSlots::NONE,
            },
            Path::new("x"),
            &Extra::default(),
        );

        assert_eq!(value_after(&args(&cmd), "-echr").as_deref(), Some("29"));
    }

    #[test]
    fn extra_args_come_last() {
        let extra = Extra {
            args: vec!["-s".into()],
            ..Extra::default()
        };

        let cmd = qemu_command(
            &Board {
                cpus: 1,
                memory: 1 << 30,
                nic: false,
                partition_nics: crate::qemu::NicSlots::NONE,
            },
            Path::new("x"),
            &extra,
        );

        assert_eq!(args(&cmd).last().map(String::as_str), Some("-s"));
    }

    #[test]
    fn accel_is_multi_threaded_tcg_unless_overridden() {
        let board = Board {
            cpus: 1,
            memory: 1 << 30,
            nic: false,
            partition_nics: crate::qemu::NicSlots::NONE,
        };
        let single = Extra {
            accel: Some("tcg,thread=single".into()),
            ..Extra::default()
        };

        let default = qemu_command(&board, Path::new("x"), &Extra::default());
        let overridden = qemu_command(&board, Path::new("x"), &single);

        assert_eq!(
            value_after(&args(&default), "-accel").as_deref(),
            Some("tcg,thread=multi")
        );
        let overridden = args(&overridden);
        assert_eq!(
            value_after(&overridden, "-accel").as_deref(),
            Some("tcg,thread=single")
        );
        assert_eq!(overridden.iter().filter(|a| *a == "-accel").count(), 1);
    }
}
