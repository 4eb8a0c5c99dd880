//! The rules a config must satisfy before boot that need no image file:
//! names, CPU ownership, RAM granularity, console and management
//! uniqueness, SPI ownership, pass-through MMIO placement in the guest map
//! and device DT fields. Placement on the host is `isolation`'s.

use std::collections::HashMap;

use crate::error::{ConfigError, Problem};
use crate::plan::NAME_MAX;
use crate::schema::{Config, PartitionConfig, RestartSetting, Size};
use pinfold_vboard::{
    GICR_STRIDE, GUEST_GICD_BASE, GUEST_GICD_SIZE, GUEST_GICR_BASE, GUEST_GICR_REGION_SIZE,
    GUEST_RAM_BASE, GUEST_UART_BASE, GUEST_UART_SIZE,
};

/// Guest RAM and board RAM come in whole stage-2 level-2 blocks (2 MiB with
/// the 4 KiB granule), so that stage 2 maps a partition without 4 KiB pages.
pub const RAM_GRANULE: u64 = 2 * Size::MIB;
/// RAM the hypervisor keeps for itself before the payload: its image, stacks,
/// heap, stage-2 tables and per-partition DTBs. The whole reserve is this
/// plus the payload size rounded up to `RAM_GRANULE`.
pub const HYPERVISOR_RESERVE_BASE: u64 = 64 * Size::MIB;
/// Linux's arm64 COMMAND_LINE_SIZE, including the terminating NUL.
pub const LINUX_COMMAND_LINE_SIZE: usize = 2048;
/// First and last SPI INTID (GICv3, IHI 0069 2.2.1: 1020..1023 are special).
pub const SPI_FIRST: u32 = 32;
pub const SPI_LAST: u32 = 1019;
/// Page size stage 2 maps pass-through MMIO with.
const PAGE: u64 = 4096;

/// Characters allowed in a partition name (it prefixes console lines and
/// goes on the kernel command line).
const PARTITION_NAME_CHARS: &str = "[a-z0-9_-]";
/// Characters allowed in a device name (a DT node name, Devicetree spec
/// 2.2.1).
const DEVICE_NAME_CHARS: &str = "[A-Za-z0-9,._+@-]";

/// Shorthand for a partition error.
pub(crate) fn partition_error(
    partition: &PartitionConfig,
    field: impl Into<String>,
    problem: Problem,
) -> ConfigError {
    ConfigError::Partition {
        partition: partition.name.clone(),
        field: field.into(),
        problem,
    }
}

/// A pass-through MMIO range already claimed, for overlap checks.
struct ClaimedRange<'c> {
    base: u64,
    end: u64,
    partition: &'c str,
    device: &'c str,
}

/// Who owns what so far, while walking the partitions in file order.
#[derive(Default)]
struct Owners<'c> {
    names: HashMap<&'c str, ()>,
    cpus: HashMap<u32, &'c str>,
    spis: HashMap<u32, &'c str>,
    mmio: Vec<ClaimedRange<'c>>,
    console_input: Option<&'c str>,
    management: Option<&'c str>,
    pci_host_bridge: Option<&'c str>,
}

impl Config {
    /// Checks every rule that needs no image file, in file order, and
    /// reports the first broken one.
    pub(crate) fn check_static(&self) -> Result<(), ConfigError> {
        self.check_board()?;
        if self.partitions.is_empty() {
            return Err(ConfigError::NoPartitions);
        }
        let mut owners = Owners::default();
        for partition in &self.partitions {
            check_name(partition, &mut owners)?;
            self.check_cpus(partition, &mut owners)?;
            check_memory(partition)?;
            check_bootargs(partition)?;
            check_roles(partition, &mut owners)?;
            check_lifecycle(partition)?;
            check_devices(partition, &mut owners)?;
        }
        Ok(())
    }

    fn check_board(&self) -> Result<(), ConfigError> {
        if self.board.cpus == 0 {
            return Err(ConfigError::Board {
                field: "cpus",
                problem: Problem::NoBoardCpus,
            });
        }
        ram_problem(self.board.memory).map_or(Ok(()), |problem| {
            Err(ConfigError::Board {
                field: "memory",
                problem,
            })
        })
    }

    fn check_cpus<'c>(
        &'c self,
        partition: &'c PartitionConfig,
        owners: &mut Owners<'c>,
    ) -> Result<(), ConfigError> {
        if partition.cpus.is_empty() {
            return Err(partition_error(partition, "cpus", Problem::NoCpus));
        }
        let max_vcpus = GUEST_GICR_REGION_SIZE / GICR_STRIDE;
        if partition.cpus.len() as u64 > max_vcpus {
            return Err(partition_error(
                partition,
                "cpus",
                Problem::TooManyVcpus {
                    count: partition.cpus.len(),
                    max: max_vcpus,
                },
            ));
        }
        for (i, &cpu) in partition.cpus.iter().enumerate() {
            if cpu >= self.board.cpus {
                return Err(partition_error(
                    partition,
                    "cpus",
                    Problem::CpuMissing {
                        cpu,
                        board: self.board.name.clone(),
                        board_cpus: self.board.cpus,
                    },
                ));
            }
            if partition.cpus[..i].contains(&cpu) {
                return Err(partition_error(
                    partition,
                    "cpus",
                    Problem::CpuRepeated { cpu },
                ));
            }
            if let Some(other) = owners.cpus.insert(cpu, &partition.name) {
                return Err(partition_error(
                    partition,
                    "cpus",
                    Problem::CpuShared {
                        cpu,
                        other: other.to_owned(),
                    },
                ));
            }
        }
        Ok(())
    }

    /// Checks that the partitions plus the hypervisor's reserve fit in the
    /// board's RAM; the error names the first partition that does not fit.
    pub(crate) fn check_memory_fit(&self, payload_len: u64) -> Result<(), ConfigError> {
        let reserve = hypervisor_reserve(payload_len);
        let mut partitions_total: u64 = 0;
        for partition in &self.partitions {
            partitions_total = partitions_total.saturating_add(partition.memory.bytes());
            if partitions_total.saturating_add(reserve) > self.board.memory.bytes() {
                return Err(partition_error(
                    partition,
                    "memory",
                    Problem::MemoryExhausted {
                        partitions: Size(partitions_total),
                        reserve: Size(reserve),
                        board: self.board.memory,
                    },
                ));
            }
        }
        Ok(())
    }
}

/// The RAM the hypervisor keeps: `HYPERVISOR_RESERVE_BASE` plus the payload
/// rounded up to `RAM_GRANULE`.
pub fn hypervisor_reserve(payload_len: u64) -> u64 {
    HYPERVISOR_RESERVE_BASE.saturating_add(align_up(payload_len, RAM_GRANULE))
}

pub(crate) fn align_up(value: u64, align: u64) -> u64 {
    value.div_ceil(align).saturating_mul(align)
}

fn ram_problem(size: Size) -> Option<Problem> {
    if size.bytes() < RAM_GRANULE {
        Some(Problem::MemoryTooSmall { size })
    } else if !size.bytes().is_multiple_of(RAM_GRANULE) {
        Some(Problem::MemoryUnaligned { size })
    } else {
        None
    }
}

fn check_name<'c>(
    partition: &'c PartitionConfig,
    owners: &mut Owners<'c>,
) -> Result<(), ConfigError> {
    let name = partition.name.as_str();
    if name.is_empty() {
        return Err(partition_error(partition, "name", Problem::NameEmpty));
    }
    if name.len() > NAME_MAX {
        return Err(partition_error(
            partition,
            "name",
            Problem::NameTooLong {
                len: name.len(),
                max: NAME_MAX,
            },
        ));
    }
    let bad = name
        .chars()
        .find(|&c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-'));
    if let Some(ch) = bad {
        return Err(partition_error(
            partition,
            "name",
            Problem::NameCharacter {
                ch,
                allowed: PARTITION_NAME_CHARS,
            },
        ));
    }
    if owners.names.insert(name, ()).is_some() {
        return Err(partition_error(partition, "name", Problem::NameDuplicate));
    }
    Ok(())
}

fn check_memory(partition: &PartitionConfig) -> Result<(), ConfigError> {
    ram_problem(partition.memory).map_or(Ok(()), |problem| {
        Err(partition_error(partition, "memory", problem))
    })
}

fn check_bootargs(partition: &PartitionConfig) -> Result<(), ConfigError> {
    let bootargs = &partition.bootargs;
    if bootargs.contains('\0') {
        return Err(partition_error(partition, "bootargs", Problem::BootargsNul));
    }
    // The guest's /chosen/bootargs is exactly this string (the partition's
    // identity is the /chosen/pinfold,partition property), so only Linux's
    // own limit applies.
    let len = bootargs.len();
    let max = LINUX_COMMAND_LINE_SIZE - 1;
    if len > max {
        return Err(partition_error(
            partition,
            "bootargs",
            Problem::BootargsTooLong { len, max },
        ));
    }
    Ok(())
}

/// Longest `watchdog_s` and `shutdown_timeout_s` accepted (an hour).
pub const LIFECYCLE_MAX_S: u32 = 3600;

fn check_lifecycle(partition: &PartitionConfig) -> Result<(), ConfigError> {
    let fail = |field: &str, problem| Err(partition_error(partition, field, problem));
    if partition.management {
        if partition.restart.is_some() {
            return fail("restart", Problem::ManagementRestart);
        }
        if partition.restart_limit.is_some() {
            return fail("restart_limit", Problem::ManagementRestart);
        }
    }
    let never = matches!(partition.restart, None | Some(RestartSetting::Never));
    if never && partition.restart_limit.is_some_and(|l| l != 0) {
        return fail("restart_limit", Problem::RestartLimitWithoutRestart);
    }
    if partition.watchdog_s > LIFECYCLE_MAX_S {
        return fail(
            "watchdog_s",
            Problem::WatchdogRange {
                value: partition.watchdog_s,
                max: LIFECYCLE_MAX_S,
            },
        );
    }
    if !(1..=LIFECYCLE_MAX_S).contains(&partition.shutdown_timeout_s) {
        return fail(
            "shutdown_timeout_s",
            Problem::ShutdownTimeoutRange {
                value: partition.shutdown_timeout_s,
                max: LIFECYCLE_MAX_S,
            },
        );
    }
    Ok(())
}

fn check_roles<'c>(
    partition: &'c PartitionConfig,
    owners: &mut Owners<'c>,
) -> Result<(), ConfigError> {
    if partition.console_input {
        if let Some(other) = owners.console_input.replace(&partition.name) {
            return Err(partition_error(
                partition,
                "console_input",
                Problem::ConsoleInputTaken {
                    other: other.to_owned(),
                },
            ));
        }
    }
    if let Some(token) = &partition.token {
        if !partition.management {
            return Err(partition_error(
                partition,
                "token",
                Problem::TokenWithoutManagement,
            ));
        }
        let ok_char = |c: char| c.is_ascii_alphanumeric() || "._~-".contains(c);
        if !(16..=128).contains(&token.len()) || !token.chars().all(ok_char) {
            return Err(partition_error(partition, "token", Problem::BadToken));
        }
    }
    if let Some(digest) = &partition.token_sha256 {
        if !partition.management {
            return Err(partition_error(
                partition,
                "token_sha256",
                Problem::TokenWithoutManagement,
            ));
        }
        if partition.token.is_some() {
            return Err(partition_error(
                partition,
                "token_sha256",
                Problem::TokenTwice,
            ));
        }
        if crate::bundle::parse_hex32(digest).is_none() {
            return Err(partition_error(
                partition,
                "token_sha256",
                Problem::BadTokenDigest,
            ));
        }
    }
    if partition.pci_host_bridge {
        if let Some(other) = owners.pci_host_bridge.replace(&partition.name) {
            return Err(partition_error(
                partition,
                "pci_host_bridge",
                Problem::PciHostBridgeTaken {
                    other: other.to_owned(),
                },
            ));
        }
    }
    if partition.management {
        if let Some(other) = owners.management.replace(&partition.name) {
            return Err(partition_error(
                partition,
                "management",
                Problem::ManagementTaken {
                    other: other.to_owned(),
                },
            ));
        }
    }
    Ok(())
}

fn check_devices<'c>(
    partition: &'c PartitionConfig,
    owners: &mut Owners<'c>,
) -> Result<(), ConfigError> {
    for (index, device) in partition.devices.iter().enumerate() {
        let name = device.name.as_str();
        let name_field = format!("device[{index}]: name");
        if name.is_empty() {
            return Err(partition_error(partition, name_field, Problem::NameEmpty));
        }
        let bad = name
            .chars()
            .find(|&c| !(c.is_ascii_alphanumeric() || ",._+@-".contains(c)));
        if let Some(ch) = bad {
            return Err(partition_error(
                partition,
                name_field,
                Problem::NameCharacter {
                    ch,
                    allowed: DEVICE_NAME_CHARS,
                },
            ));
        }
        if partition.devices[..index].iter().any(|d| d.name == name) {
            return Err(partition_error(
                partition,
                name_field,
                Problem::NameDuplicate,
            ));
        }

        if let Some(compatible) = &device.compatible {
            if compatible.is_empty() || compatible.contains('\0') {
                return Err(partition_error(
                    partition,
                    format!("device \"{name}\": compatible"),
                    Problem::CompatibleBad,
                ));
            }
        }
        if let Some(path) = &device.host_node {
            if !path.starts_with('/') || path.contains('\0') {
                return Err(partition_error(
                    partition,
                    format!("device \"{name}\": host_node"),
                    Problem::HostNodeBad { path: path.clone() },
                ));
            }
        }

        let mmio_field = format!("device \"{name}\": mmio");
        for range in &device.mmio {
            let (base, size) = (range.base, range.size.bytes());
            let fail = |problem| Err(partition_error(partition, mmio_field.clone(), problem));
            if size == 0 {
                return fail(Problem::MmioEmpty { base });
            }
            if !base.is_multiple_of(PAGE) || !size.is_multiple_of(PAGE) {
                return fail(Problem::MmioUnaligned { base, size });
            }
            let Some(end) = base.checked_add(size) else {
                return fail(Problem::MmioWraps { base, size });
            };
            if let Some(problem) = guest_map_overlap(base, end, partition.memory.bytes()) {
                return fail(problem);
            }
            let clash = owners.mmio.iter().find(|c| base < c.end && c.base < end);
            if let Some(claimed) = clash {
                return fail(Problem::MmioOverlap {
                    base,
                    size,
                    other: claimed.partition.to_owned(),
                    other_device: claimed.device.to_owned(),
                });
            }
            owners.mmio.push(ClaimedRange {
                base,
                end,
                partition: &partition.name,
                device: name,
            });
        }

        let spis_field = format!("device \"{name}\": spis");
        for &spi in &device.spis {
            let fail = |problem| Err(partition_error(partition, spis_field.clone(), problem));
            if !(SPI_FIRST..=SPI_LAST).contains(&spi) {
                return fail(Problem::SpiOutOfRange { spi });
            }
            if pinfold_vboard::GUEST_EMULATED_SPIS.contains(&spi) {
                return fail(Problem::SpiReserved { spi });
            }
            if let Some(other) = owners.spis.insert(spi, &partition.name) {
                if other == partition.name {
                    return fail(Problem::SpiRepeated { spi });
                }
                return fail(Problem::SpiShared {
                    spi,
                    other: other.to_owned(),
                });
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
        (
            "PL061 GPIO",
            pinfold_vboard::GUEST_GPIO_BASE,
            pinfold_vboard::GUEST_GPIO_SIZE,
        ),
        (
            "SBSA watchdog control frame",
            pinfold_vboard::GUEST_WDOG_CONTROL_BASE,
            pinfold_vboard::GUEST_WDOG_FRAME_SIZE,
        ),
        (
            "SBSA watchdog refresh frame",
            pinfold_vboard::GUEST_WDOG_REFRESH_BASE,
            pinfold_vboard::GUEST_WDOG_FRAME_SIZE,
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

impl PartitionConfig {
    /// The lifecycle the plan blob carries (fields validated).
    pub fn lifecycle(&self) -> crate::plan::LifecyclePlan {
        crate::plan::LifecyclePlan {
            restart: match self.restart {
                None | Some(RestartSetting::Never) => crate::plan::RestartMode::Never,
                Some(RestartSetting::OnCrash) => crate::plan::RestartMode::OnCrash,
                Some(RestartSetting::Always) => crate::plan::RestartMode::Always,
            },
            restart_limit: self.restart_limit.unwrap_or(0),
            watchdog_s: self.watchdog_s,
            shutdown_timeout_s: self.shutdown_timeout_s,
        }
    }

    /// The SHA-256 of the management token the plan blob carries: of
    /// `token`, or `token_sha256` as given (both were validated).
    pub fn token_digest(&self) -> Option<[u8; 32]> {
        match (&self.token, &self.token_sha256) {
            (Some(token), _) => Some(crate::bundle::token_digest(token.as_bytes())),
            (None, Some(hex)) => crate::bundle::parse_hex32(hex),
            (None, None) => None,
        }
    }
}
