//! The per-partition rules of a plan, once, `no_std`: the build checks each
//! `[[partition]]` of a TOML plan with them (`validate`, file order, the
//! partitions before it as `others`), and the hypervisor and the manager
//! check a partition created or changed at run time with them (every other
//! existing partition as `others`), so a bad partition is refused with the
//! same message naming the same field wherever it comes from.
//!
//! `check_partition` covers what a `PartitionPlan` can express: the name,
//! CPUs, RAM size, bootargs, the console/management/PCIe roles, the
//! lifecycle (restart policy and limit, watchdog period, shutdown timeout)
//! and the pass-through devices (names, DT fields, SPIs but the emulated
//! devices' 33/92/93, MMIO in the guest map, the watchdog's and GPIO's
//! frames included, and against every device window). What needs the board or the files (board
//! CPUs and RAM, the RAM budget, images, the token's text) stays with the
//! TOML side; placement on the host is `isolation`'s. `Problem` is every
//! rule's sentence, also those other checks', and `Size` shows byte counts
//! in them.

use alloc::format;
use alloc::string::{String, ToString};
use core::fmt;

use crate::fit::FitError;
use crate::plan::{PartitionPlan, PciAddress, RestartMode, NAME_MAX};
use pinfold_vboard::{
    GICR_STRIDE, GUEST_EMULATED_SPIS, GUEST_GICD_BASE, GUEST_GICD_SIZE, GUEST_GICR_BASE,
    GUEST_GICR_REGION_SIZE, GUEST_GPIO_BASE, GUEST_GPIO_SIZE, GUEST_RAM_BASE, GUEST_UART_BASE,
    GUEST_UART_SIZE, GUEST_WDOG_CONTROL_BASE, GUEST_WDOG_FRAME_SIZE, GUEST_WDOG_REFRESH_BASE,
};

/// Guest RAM and board RAM come in whole stage-2 level-2 blocks (2 MiB with
/// the 4 KiB granule), so that stage 2 maps a partition without 4 KiB pages.
pub const RAM_GRANULE: u64 = 2 * Size::MIB;
/// Linux's arm64 COMMAND_LINE_SIZE, including the terminating NUL.
pub const LINUX_COMMAND_LINE_SIZE: usize = 2048;
/// First and last SPI INTID (GICv3, IHI 0069 2.2.1: 1020..1023 are special).
pub const SPI_FIRST: u32 = 32;
pub const SPI_LAST: u32 = 1019;
/// Longest `watchdog_s` and `shutdown_timeout_s` accepted (an hour).
pub const LIFECYCLE_MAX_S: u32 = 3600;
/// Page size stage 2 maps pass-through MMIO with.
const PAGE: u64 = 4096;

/// Characters allowed in a partition name (it prefixes console lines and
/// goes on the kernel command line).
const PARTITION_NAME_CHARS: &str = "[a-z0-9_-]";
/// Characters allowed in a device name (a DT node name, Devicetree spec
/// 2.2.1).
const DEVICE_NAME_CHARS: &str = "[A-Za-z0-9,._+@-]";

/// What the rules need to know of the host: the board's name (for
/// messages) and how many physical CPUs it has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostLimits<'a> {
    pub board: &'a str,
    pub cpus: u32,
}

/// A broken rule, about one partition and one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub partition: String,
    /// The field as written in TOML, with the device for device fields,
    /// e.g. `cpus` or `device "uart1": spis`.
    pub field: String,
    pub problem: Problem,
}

impl Rejection {
    fn new(candidate: &PartitionPlan, field: impl Into<String>, problem: Problem) -> Rejection {
        Rejection {
            partition: candidate.name.clone(),
            field: field.into(),
            problem,
        }
    }

    /// True when the rule broken is a clash with another partition (a CPU,
    /// SPI, MMIO window, name or role it already has); false for a value
    /// that is invalid on its own (or clashes only within the partition).
    pub fn conflict(&self) -> bool {
        match &self.problem {
            Problem::CpuShared { .. }
            | Problem::SpiShared { .. }
            | Problem::ConsoleInputTaken { .. }
            | Problem::ManagementTaken { .. }
            | Problem::PciHostBridgeTaken { .. }
            | Problem::PciTaken { .. }
            | Problem::PciBesideHostBridge { .. } => true,
            Problem::MmioOverlap { other, .. } => *other != self.partition,
            // Two devices of one partition sharing a name is the
            // partition's own mistake.
            Problem::NameDuplicate => self.field == "name",
            _ => false,
        }
    }
}

impl fmt::Display for Rejection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "partition \"{}\": {}: {}",
            self.partition, self.field, self.problem
        )
    }
}

impl core::error::Error for Rejection {}

/// Every rule that can be checked on one plan entry against the others
/// already accepted (in plan order at build time; every other existing
/// partition at run time). Reports the first rule broken, in the order of
/// docs/CONFIG.md: name, cpus, memory, bootargs, roles, lifecycle, devices.
pub fn check_partition(
    candidate: &PartitionPlan,
    others: &[&PartitionPlan],
    host: &HostLimits,
) -> Result<(), Rejection> {
    check_partition_with_token_text(candidate, others, host, || Ok(()))
}

/// `check_partition`, with the TOML side's check of the token's text (which
/// the plan only carries as a digest) run where the token's rules are, so
/// that the build reports the first broken rule in the order of
/// docs/CONFIG.md.
pub(crate) fn check_partition_with_token_text(
    candidate: &PartitionPlan,
    others: &[&PartitionPlan],
    host: &HostLimits,
    token_text: impl FnOnce() -> Result<(), Rejection>,
) -> Result<(), Rejection> {
    check_name(candidate, others)?;
    check_cpus(candidate, others, host)?;
    if let Some(problem) = ram_problem(Size(candidate.ram_size)) {
        return Err(Rejection::new(candidate, "memory", problem));
    }
    check_bootargs(candidate)?;
    check_roles(candidate, others, token_text)?;
    check_lifecycle(candidate)?;
    check_devices(candidate, others)
}

/// Why `size` cannot be a partition's (or the board's) RAM, if it cannot:
/// less than one 2 MiB block, or not whole blocks.
pub fn ram_problem(size: Size) -> Option<Problem> {
    if size.bytes() < RAM_GRANULE {
        Some(Problem::MemoryTooSmall { size })
    } else if !size.bytes().is_multiple_of(RAM_GRANULE) {
        Some(Problem::MemoryUnaligned { size })
    } else {
        None
    }
}

fn check_name(candidate: &PartitionPlan, others: &[&PartitionPlan]) -> Result<(), Rejection> {
    let name = candidate.name.as_str();
    let fail = |problem| Err(Rejection::new(candidate, "name", problem));
    if name.is_empty() {
        return fail(Problem::NameEmpty);
    }
    if name.len() > NAME_MAX {
        return fail(Problem::NameTooLong {
            len: name.len(),
            max: NAME_MAX,
        });
    }
    let bad = name
        .chars()
        .find(|&c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-'));
    if let Some(ch) = bad {
        return fail(Problem::NameCharacter {
            ch,
            allowed: PARTITION_NAME_CHARS,
        });
    }
    if others.iter().any(|other| other.name == name) {
        return fail(Problem::NameDuplicate);
    }
    Ok(())
}

fn check_cpus(
    candidate: &PartitionPlan,
    others: &[&PartitionPlan],
    host: &HostLimits,
) -> Result<(), Rejection> {
    let cpus = &candidate.cpus;
    let fail = |problem| Err(Rejection::new(candidate, "cpus", problem));
    if cpus.is_empty() {
        return fail(Problem::NoCpus);
    }
    let max_vcpus = GUEST_GICR_REGION_SIZE / GICR_STRIDE;
    if cpus.len() as u64 > max_vcpus {
        return fail(Problem::TooManyVcpus {
            count: cpus.len(),
            max: max_vcpus,
        });
    }
    for (i, &cpu) in cpus.iter().enumerate() {
        if cpu >= host.cpus {
            return fail(Problem::CpuMissing {
                cpu,
                board: host.board.to_string(),
                board_cpus: host.cpus,
            });
        }
        if cpus[..i].contains(&cpu) {
            return fail(Problem::CpuRepeated { cpu });
        }
        if let Some(other) = others.iter().find(|other| other.cpus.contains(&cpu)) {
            return fail(Problem::CpuShared {
                cpu,
                other: other.name.clone(),
            });
        }
    }
    Ok(())
}

fn check_bootargs(candidate: &PartitionPlan) -> Result<(), Rejection> {
    let bootargs = &candidate.bootargs;
    if bootargs.contains('\0') {
        return Err(Rejection::new(candidate, "bootargs", Problem::BootargsNul));
    }
    // The guest's /chosen/bootargs is exactly this string (the partition's
    // identity is the /chosen/pinfold,partition property), so only Linux's
    // own limit applies.
    let len = bootargs.len();
    let max = LINUX_COMMAND_LINE_SIZE - 1;
    if len > max {
        return Err(Rejection::new(
            candidate,
            "bootargs",
            Problem::BootargsTooLong { len, max },
        ));
    }
    Ok(())
}

fn check_roles(
    candidate: &PartitionPlan,
    others: &[&PartitionPlan],
    token_text: impl FnOnce() -> Result<(), Rejection>,
) -> Result<(), Rejection> {
    let holder = |has: fn(&PartitionPlan) -> bool| {
        others
            .iter()
            .find(|other| has(other))
            .map(|other| other.name.clone())
    };
    if candidate.console.input {
        if let Some(other) = holder(|p| p.console.input) {
            return Err(Rejection::new(
                candidate,
                "console_input",
                Problem::ConsoleInputTaken { other },
            ));
        }
    }
    if candidate.token_sha256.is_some() && !candidate.management {
        return Err(Rejection::new(
            candidate,
            "token_sha256",
            Problem::TokenWithoutManagement,
        ));
    }
    token_text()?;
    if let Some(url) = &candidate.config_store {
        if !candidate.management {
            return Err(Rejection::new(
                candidate,
                "config_store",
                Problem::ConfigStoreWithoutManagement,
            ));
        }
        if !config_store_ok(url) {
            return Err(Rejection::new(
                candidate,
                "config_store",
                Problem::ConfigStoreBad { url: url.clone() },
            ));
        }
    }
    if !candidate.api_tls && !candidate.management {
        return Err(Rejection::new(
            candidate,
            "api_tls",
            Problem::ApiTlsWithoutManagement,
        ));
    }
    if candidate.pci_host_bridge {
        if let Some(other) = holder(|p| p.pci_host_bridge) {
            return Err(Rejection::new(
                candidate,
                "pci_host_bridge",
                Problem::PciHostBridgeTaken { other },
            ));
        }
    }
    check_pci(candidate, others)?;
    if candidate.management {
        if let Some(other) = holder(|p| p.management) {
            return Err(Rejection::new(
                candidate,
                "management",
                Problem::ManagementTaken { other },
            ));
        }
    }
    Ok(())
}

/// The `pci` list: segment 0 (the one host bridge), no function twice, none
/// another partition has, and none while another partition has the whole
/// host bridge (or the whole bridge while another has functions).
fn check_pci(candidate: &PartitionPlan, others: &[&PartitionPlan]) -> Result<(), Rejection> {
    if candidate.pci_host_bridge && !candidate.pci.is_empty() {
        return Err(Rejection::new(candidate, "pci", Problem::PciWithHostBridge));
    }
    let whole = if candidate.pci_host_bridge {
        others.iter().find(|o| !o.pci.is_empty())
    } else if !candidate.pci.is_empty() {
        others.iter().find(|o| o.pci_host_bridge)
    } else {
        None
    };
    if let Some(other) = whole {
        let field = if candidate.pci_host_bridge {
            "pci_host_bridge"
        } else {
            "pci"
        };
        return Err(Rejection::new(
            candidate,
            field,
            Problem::PciBesideHostBridge {
                other: other.name.clone(),
            },
        ));
    }
    for (i, &address) in candidate.pci.iter().enumerate() {
        let field = || format!("pci[{i}]");
        if address.segment != 0 {
            return Err(Rejection::new(
                candidate,
                field(),
                Problem::PciSegment { address },
            ));
        }
        if candidate.pci[..i].contains(&address) {
            return Err(Rejection::new(
                candidate,
                field(),
                Problem::PciRepeated { address },
            ));
        }
        if let Some(other) = others.iter().find(|o| o.pci.contains(&address)) {
            return Err(Rejection::new(
                candidate,
                field(),
                Problem::PciTaken {
                    address,
                    other: other.name.clone(),
                },
            ));
        }
    }
    Ok(())
}

/// Longest `config_store` URL.
pub const CONFIG_STORE_MAX: usize = 200;

/// Whether `url` can be a configuration store: `http://HOST[:PORT]/PATH/`
/// with a non-empty host, a port that is a number, the path ending in `/`,
/// printable ASCII without spaces, `?` or `#`.
pub fn config_store_ok(url: &str) -> bool {
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let Some((authority, _path)) = rest.split_once('/') else {
        return false;
    };
    let (host, port) = match authority.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (authority, None),
    };
    url.len() <= CONFIG_STORE_MAX
        && url.ends_with('/')
        && url
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'?' && b != b'#')
        && !host.is_empty()
        && !host.contains('@')
        && port.is_none_or(|p| p.parse::<u16>().is_ok_and(|p| p > 0))
}

/// The restart policy, the watchdog and the shutdown timeout.
fn check_lifecycle(candidate: &PartitionPlan) -> Result<(), Rejection> {
    let life = &candidate.lifecycle;
    let fail = |field: &str, problem| Err(Rejection::new(candidate, field, problem));
    if candidate.management {
        if life.restart != RestartMode::Never {
            return fail("restart", Problem::ManagementRestart);
        }
        if life.restart_limit != 0 {
            return fail("restart_limit", Problem::ManagementRestart);
        }
    }
    if life.restart == RestartMode::Never && life.restart_limit != 0 {
        return fail("restart_limit", Problem::RestartLimitWithoutRestart);
    }
    if life.watchdog_s > LIFECYCLE_MAX_S {
        return fail(
            "watchdog_s",
            Problem::WatchdogRange {
                value: life.watchdog_s,
                max: LIFECYCLE_MAX_S,
            },
        );
    }
    if !(1..=LIFECYCLE_MAX_S).contains(&life.shutdown_timeout_s) {
        return fail(
            "shutdown_timeout_s",
            Problem::ShutdownTimeoutRange {
                value: life.shutdown_timeout_s,
                max: LIFECYCLE_MAX_S,
            },
        );
    }
    Ok(())
}

fn check_devices(candidate: &PartitionPlan, others: &[&PartitionPlan]) -> Result<(), Rejection> {
    let devices = &candidate.devices;
    for (index, device) in devices.iter().enumerate() {
        let name = device.name.as_str();
        let name_field = || format!("device[{index}]: name");
        if name.is_empty() {
            return Err(Rejection::new(candidate, name_field(), Problem::NameEmpty));
        }
        let bad = name
            .chars()
            .find(|&c| !(c.is_ascii_alphanumeric() || ",._+@-".contains(c)));
        if let Some(ch) = bad {
            return Err(Rejection::new(
                candidate,
                name_field(),
                Problem::NameCharacter {
                    ch,
                    allowed: DEVICE_NAME_CHARS,
                },
            ));
        }
        if devices[..index].iter().any(|d| d.name == name) {
            return Err(Rejection::new(
                candidate,
                name_field(),
                Problem::NameDuplicate,
            ));
        }

        if let Some(compatible) = &device.compatible {
            if compatible.is_empty() || compatible.contains('\0') {
                return Err(Rejection::new(
                    candidate,
                    format!("device \"{name}\": compatible"),
                    Problem::CompatibleBad,
                ));
            }
        }
        if let Some(path) = &device.host_node {
            if !path.starts_with('/') || path.contains('\0') {
                return Err(Rejection::new(
                    candidate,
                    format!("device \"{name}\": host_node"),
                    Problem::HostNodeBad { path: path.clone() },
                ));
            }
        }

        // Every window claimed before this one: the other partitions' (in
        // their order), then this partition's earlier ones.
        let claimed_before = |range_index: usize| {
            let earlier_own = devices[..=index]
                .iter()
                .enumerate()
                .flat_map(move |(d, dev)| {
                    let ranges = if d == index {
                        &dev.mmio[..range_index]
                    } else {
                        &dev.mmio[..]
                    };
                    ranges.iter().map(move |r| (candidate, dev, r))
                });
            others
                .iter()
                .flat_map(|p| {
                    p.devices
                        .iter()
                        .flat_map(move |dev| dev.mmio.iter().map(move |r| (*p, dev, r)))
                })
                .chain(earlier_own)
        };
        for (range_index, range) in device.mmio.iter().enumerate() {
            let (base, size) = (range.base, range.size);
            let fail = |problem| {
                Err(Rejection::new(
                    candidate,
                    format!("device \"{name}\": mmio"),
                    problem,
                ))
            };
            if size == 0 {
                return fail(Problem::MmioEmpty { base });
            }
            if !base.is_multiple_of(PAGE) || !size.is_multiple_of(PAGE) {
                return fail(Problem::MmioUnaligned { base, size });
            }
            let Some(end) = base.checked_add(size) else {
                return fail(Problem::MmioWraps { base, size });
            };
            if let Some(problem) = guest_map_overlap(base, end, candidate.ram_size) {
                return fail(problem);
            }
            // Windows already claimed were checked not to wrap.
            let clash = claimed_before(range_index)
                .find(|(_, _, r)| base < r.base.saturating_add(r.size) && r.base < end);
            if let Some((partition, other_device, _)) = clash {
                return fail(Problem::MmioOverlap {
                    base,
                    size,
                    other: partition.name.clone(),
                    other_device: other_device.name.clone(),
                });
            }
        }

        for (spi_index, &spi) in device.spis.iter().enumerate() {
            let fail = |problem| {
                Err(Rejection::new(
                    candidate,
                    format!("device \"{name}\": spis"),
                    problem,
                ))
            };
            if !(SPI_FIRST..=SPI_LAST).contains(&spi) {
                return fail(Problem::SpiOutOfRange { spi });
            }
            if GUEST_EMULATED_SPIS.contains(&spi) {
                return fail(Problem::SpiReserved { spi });
            }
            let owner = others
                .iter()
                .find(|p| p.devices.iter().any(|d| d.spis.contains(&spi)));
            if let Some(other) = owner {
                return fail(Problem::SpiShared {
                    spi,
                    other: other.name.clone(),
                });
            }
            let earlier_own = devices[..index].iter().any(|d| d.spis.contains(&spi))
                || device.spis[..spi_index].contains(&spi);
            if earlier_own {
                return fail(Problem::SpiRepeated { spi });
            }
        }
    }
    Ok(())
}

/// A pass-through range is mapped at its own address in the guest, so it
/// must stay clear of what the guest map already puts there.
fn guest_map_overlap(base: u64, end: u64, ram_size: u64) -> Option<Problem> {
    let regions = [
        ("RAM", GUEST_RAM_BASE, ram_size),
        ("GIC distributor", GUEST_GICD_BASE, GUEST_GICD_SIZE),
        (
            "GIC redistributor region",
            GUEST_GICR_BASE,
            GUEST_GICR_REGION_SIZE,
        ),
        ("PL011", GUEST_UART_BASE, GUEST_UART_SIZE),
        ("PL061 GPIO", GUEST_GPIO_BASE, GUEST_GPIO_SIZE),
        (
            "SBSA watchdog control frame",
            GUEST_WDOG_CONTROL_BASE,
            GUEST_WDOG_FRAME_SIZE,
        ),
        (
            "SBSA watchdog refresh frame",
            GUEST_WDOG_REFRESH_BASE,
            GUEST_WDOG_FRAME_SIZE,
        ),
    ];
    regions
        .into_iter()
        .find(|&(_, region_base, region_size)| {
            base < region_base.saturating_add(region_size) && region_base < end
        })
        .map(|(region, region_base, region_size)| Problem::MmioGuestMap {
            base,
            size: end - base,
            region,
            region_base,
            region_size,
        })
}

/// A byte count written as an integer or as `"<n><unit>"` with a binary
/// unit: `K`/`KiB`, `M`/`MiB`, `G`/`GiB`, `T`/`TiB` (all powers of 1024;
/// the parsing is the TOML side's, in schema.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Size(pub u64);

impl Size {
    pub const KIB: u64 = 1 << 10;
    pub const MIB: u64 = 1 << 20;
    pub const GIB: u64 = 1 << 30;
    pub const TIB: u64 = 1 << 40;

    /// The size in bytes.
    pub fn bytes(self) -> u64 {
        self.0
    }
}

impl fmt::Display for Size {
    /// The largest binary unit that divides the size exactly, so error
    /// messages echo what the user most likely wrote.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let units = [
            (Size::TIB, "TiB"),
            (Size::GIB, "GiB"),
            (Size::MIB, "MiB"),
            (Size::KIB, "KiB"),
        ];
        for (scale, unit) in units {
            if self.0 != 0 && self.0.is_multiple_of(scale) {
                return write!(f, "{}{unit}", self.0 / scale);
            }
        }
        write!(f, "{} bytes", self.0)
    }
}

/// The rule a field breaks; shown after `partition "<name>": <field>: `
/// (or `board: <field>: `).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// A partition or device name is empty.
    NameEmpty,
    /// A partition name is longer than `plan::NAME_MAX`.
    NameTooLong { len: usize, max: usize },
    /// A name holds a character outside its alphabet.
    NameCharacter { ch: char, allowed: &'static str },
    /// Two partitions (or two devices of one partition) share a name.
    NameDuplicate,
    /// The board has no CPUs.
    NoBoardCpus,
    /// The partition lists no CPU.
    NoCpus,
    /// A CPU index beyond the board's CPUs.
    CpuMissing {
        cpu: u32,
        board: String,
        board_cpus: u32,
    },
    /// A CPU appears twice in one partition's list.
    CpuRepeated { cpu: u32 },
    /// A CPU claimed by two partitions.
    CpuShared { cpu: u32, other: String },
    /// More vCPUs than the guest's redistributor region holds.
    TooManyVcpus { count: usize, max: u64 },
    /// Memory below the 2 MiB stage-2 block size.
    MemoryTooSmall { size: Size },
    /// Memory not a whole number of 2 MiB stage-2 blocks.
    MemoryUnaligned { size: Size },
    /// Partitions plus the hypervisor reserve exceed the board's RAM.
    MemoryExhausted {
        /// Partition RAM up to and including this partition.
        partitions: Size,
        reserve: Size,
        board: Size,
    },
    /// The kernel, the initrd and the DTB area do not fit the partition's
    /// RAM as the hypervisor lays them out (`fit::place_images`).
    ImagesDoNotFit { ram: Size, fit: FitError },
    /// An image file does not exist.
    FileMissing { path: String },
    /// An image path names something other than a regular file.
    NotAFile { path: String },
    /// An image file is empty.
    FileEmpty { path: String },
    /// An image file exists but cannot be read; `source` is the OS's reason.
    FileUnreadable { path: String, source: String },
    /// `kernel_format = "linux"` on a file without the arm64 Image magic.
    NotLinuxImage { path: String },
    /// Bootargs too long for Linux's command line.
    BootargsTooLong { len: usize, max: usize },
    /// Bootargs hold a NUL, which would cut the DT string short.
    BootargsNul,
    /// A second partition takes the console input.
    ConsoleInputTaken { other: String },
    /// A second management partition.
    ManagementTaken { other: String },
    /// A token on a partition that is not the management partition.
    TokenWithoutManagement,
    /// A configuration store on a partition that is not the management
    /// partition.
    ConfigStoreWithoutManagement,
    /// A configuration store that is not an `http://` URL of a directory.
    ConfigStoreBad { url: String },
    /// `api_tls = false` on a partition that is not the management
    /// partition (only it serves the API).
    ApiTlsWithoutManagement,
    /// A token that is too short or uses characters outside [A-Za-z0-9._~-].
    BadToken,
    /// Both `token` and `token_sha256` are set.
    TokenTwice,
    /// `token_sha256` is not 64 hex digits.
    BadTokenDigest,
    /// A second partition asks for the PCIe host bridge.
    PciHostBridgeTaken { other: String },
    /// A PCI function outside segment 0.
    PciSegment { address: PciAddress },
    /// A PCI function named twice in one partition's list.
    PciRepeated { address: PciAddress },
    /// A PCI function another partition has.
    PciTaken { address: PciAddress, other: String },
    /// Functions and the whole host bridge in one partition.
    PciWithHostBridge,
    /// Functions assigned while another partition has the whole host
    /// bridge, or the reverse.
    PciBesideHostBridge { other: String },
    /// An SPI INTID outside 32..=1019.
    SpiOutOfRange { spi: u32 },
    /// The INTID of an emulated device (PL011, SBSA watchdog, PL061 GPIO).
    SpiReserved { spi: u32 },
    /// `restart` or `restart_limit` on the management partition.
    ManagementRestart,
    /// `restart_limit` without a policy that restarts.
    RestartLimitWithoutRestart,
    /// `watchdog_s` out of range.
    WatchdogRange { value: u32, max: u32 },
    /// `shutdown_timeout_s` out of range.
    ShutdownTimeoutRange { value: u32, max: u32 },
    /// An SPI listed twice by one partition.
    SpiRepeated { spi: u32 },
    /// An SPI owned by two partitions.
    SpiShared { spi: u32, other: String },
    /// An MMIO range of size zero.
    MmioEmpty { base: u64 },
    /// An MMIO range not on 4 KiB pages.
    MmioUnaligned { base: u64, size: u64 },
    /// An MMIO range that wraps the address space.
    MmioWraps { base: u64, size: u64 },
    /// Two devices' MMIO ranges overlap (`other` may be the partition
    /// itself: two of its own devices).
    MmioOverlap {
        base: u64,
        size: u64,
        other: String,
        other_device: String,
    },
    /// A device `compatible` that is empty or holds a NUL (which would
    /// split the DT string).
    CompatibleBad,
    /// A device `host_node` that is not an absolute DT path.
    HostNodeBad { path: String },
    /// A pass-through range over something the guest map already holds.
    MmioGuestMap {
        base: u64,
        size: u64,
        region: &'static str,
        region_base: u64,
        region_size: u64,
    },
    /// The `gic` interface asked for is not one this host can give
    /// (`vgic5::choose_interface`'s reason, checked by the hypervisor's
    /// `gichost::interface_for` against the host's GIC).
    GicUnavailable { reason: &'static str },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::NameEmpty => f.write_str("the name is empty"),
            Problem::NameTooLong { len, max } => {
                write!(f, "the name has {len} bytes, at most {max} are allowed")
            }
            Problem::NameCharacter { ch, allowed } => {
                write!(f, "the name contains {ch:?}; only {allowed} are allowed")
            }
            Problem::NameDuplicate => f.write_str("the name is used twice"),
            Problem::NoBoardCpus => f.write_str("the board needs at least one CPU"),
            Problem::NoCpus => {
                f.write_str("the list is empty; a partition needs at least one CPU")
            }
            Problem::CpuMissing {
                cpu,
                board,
                board_cpus,
            } => write!(
                f,
                "CPU {cpu} does not exist (board {board} has {board_cpus} CPUs)"
            ),
            Problem::CpuRepeated { cpu } => write!(f, "CPU {cpu} is listed twice"),
            Problem::CpuShared { cpu, other } => {
                write!(f, "CPU {cpu} is also used by partition \"{other}\"")
            }
            Problem::TooManyVcpus { count, max } => write!(
                f,
                "{count} vCPUs, but the guest redistributor region holds at most {max}"
            ),
            Problem::MemoryTooSmall { size } => {
                write!(f, "{size} is less than the minimum of 2MiB")
            }
            Problem::MemoryUnaligned { size } => write!(f, "{size} is not a multiple of 2MiB"),
            Problem::MemoryExhausted {
                partitions,
                reserve,
                board,
            } => write!(
                f,
                "{partitions} of partitions plus the hypervisor's reserve ({reserve}) do not fit in the board's {board}"
            ),
            Problem::ImagesDoNotFit { ram, fit } => write!(f, "{ram} is too small: {fit}"),
            Problem::FileMissing { path } => write!(f, "file {path} not found"),
            Problem::NotAFile { path } => write!(f, "{path} is not a regular file"),
            Problem::FileEmpty { path } => write!(f, "file {path} is empty"),
            Problem::FileUnreadable { path, source } => write!(f, "cannot read {path}: {source}"),
            Problem::NotLinuxImage { path } => write!(
                f,
                "file {path} lacks the arm64 Image magic \"ARM\\x64\" at byte 56 (kernel_format = \"linux\")"
            ),
            Problem::BootargsTooLong { len, max } => {
                write!(f, "{len} bytes, Linux accepts at most {max}")
            }
            Problem::BootargsNul => f.write_str("contains a NUL byte"),
            Problem::ConsoleInputTaken { other } => write!(
                f,
                "partition \"{other}\" already takes console input; at most one partition may"
            ),
            Problem::ManagementTaken { other } => write!(
                f,
                "partition \"{other}\" is already the management partition; at most one may be"
            ),
            Problem::TokenWithoutManagement => {
                f.write_str("only the management partition has a token")
            }
            Problem::ConfigStoreWithoutManagement => {
                f.write_str("only the management partition keeps the configuration")
            }
            Problem::ApiTlsWithoutManagement => {
                f.write_str("only the management partition serves the API (api_tls is its setting)")
            }
            Problem::ConfigStoreBad { url } => write!(
                f,
                "{url:?} is not an http:// URL of a directory (e.g. \"http://10.0.2.2:8082/hosts/NAME/\":                  host, optional port, a path ending in /, at most {CONFIG_STORE_MAX} printable ASCII                  characters without spaces)"
            ),
            Problem::BadToken => {
                f.write_str("a token must be 16 to 128 characters of [A-Za-z0-9._~-]")
            }
            Problem::TokenTwice => f.write_str("give either token or token_sha256, not both"),
            Problem::BadTokenDigest => {
                f.write_str("token_sha256 must be 64 hex digits (the SHA-256 of the token)")
            }
            Problem::PciHostBridgeTaken { other } => write!(
                f,
                "the PCIe host bridge is already passed to partition \"{other}\""
            ),
            Problem::PciSegment { address } => write!(
                f,
                "{address}: only segment 0000 (the host's one PCIe host bridge) is supported"
            ),
            Problem::PciRepeated { address } => write!(f, "{address} is named twice"),
            Problem::PciTaken { address, other } => {
                write!(f, "{address} is already assigned to partition \"{other}\"")
            }
            Problem::PciWithHostBridge => f.write_str(
                "functions cannot be assigned one by one to a partition that has the whole \
                 PCIe host bridge (pci_host_bridge = true)",
            ),
            Problem::PciBesideHostBridge { other } => write!(
                f,
                "partition \"{other}\" has the whole PCIe host bridge, or functions behind it: \
                 the bridge is either one partition's or assigned function by function"
            ),
            Problem::SpiOutOfRange { spi } => {
                write!(f, "INTID {spi} is not an SPI (SPIs are 32..=1019)")
            }
            Problem::SpiReserved { spi } => write!(
                f,
                "SPI {spi} is an emulated device's interrupt in every partition (PL011 {}, SBSA watchdog {}, PL061 GPIO {})",
                pinfold_vboard::GUEST_UART_INTID,
                pinfold_vboard::GUEST_WDOG_INTID,
                pinfold_vboard::GUEST_GPIO_INTID
            ),
            Problem::ManagementRestart => f.write_str(
                "the management partition always restarts (with back-off); remove this field",
            ),
            Problem::RestartLimitWithoutRestart => f.write_str(
                "has no effect with restart = \"never\"; set restart = \"on-crash\" or \"always\"",
            ),
            Problem::WatchdogRange { value, max } => write!(
                f,
                "{value} is out of range: 0 (off) or 1..={max} seconds"
            ),
            Problem::ShutdownTimeoutRange { value, max } => {
                write!(f, "{value} is out of range: 1..={max} seconds")
            }
            Problem::SpiRepeated { spi } => write!(f, "SPI {spi} is listed twice"),
            Problem::SpiShared { spi, other } => {
                write!(f, "SPI {spi} is also used by partition \"{other}\"")
            }
            Problem::MmioEmpty { base } => write!(f, "range at {base:#x} has size 0"),
            Problem::MmioUnaligned { base, size } => write!(
                f,
                "range {base:#x}+{size:#x} is not 4KiB aligned (stage 2 maps whole pages)"
            ),
            Problem::MmioWraps { base, size } => write!(
                f,
                "range {base:#x}+{size:#x} wraps past the end of the address space"
            ),
            Problem::MmioOverlap {
                base,
                size,
                other,
                other_device,
            } => write!(
                f,
                "range {base:#x}+{size:#x} overlaps device \"{other_device}\" of partition \"{other}\""
            ),
            Problem::CompatibleBad => f.write_str("must be a non-empty string without NUL bytes"),
            Problem::HostNodeBad { path } => write!(
                f,
                "{path:?} is not an absolute device tree path (/node/child, no NUL)"
            ),
            Problem::MmioGuestMap {
                base,
                size,
                region,
                region_base,
                region_size,
            } => write!(
                f,
                "range {base:#x}+{size:#x} overlaps the guest's {region} at {region_base:#x}+{region_size:#x}"
            ),
            Problem::GicUnavailable { reason } => f.write_str(reason),
        }
    }
}

impl core::error::Error for Problem {}
