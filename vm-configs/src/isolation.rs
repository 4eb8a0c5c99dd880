//! Whether a plan's pass-through MMIO keeps partitions apart on a given
//! host: the one check the xtask runs at build time (against the board's
//! DTB) and the hypervisor runs at boot (against the DTB firmware passed),
//! so both refuse the same plans with the same message.
//!
//! A `[[partition.device]]` window is mapped 1:1 into the partition's stage
//! 2, so the rule is about host physical addresses. Every window of every
//! partition must
//!
//! - have a non-zero size and not wrap past 2^64;
//! - lie outside host RAM and reserved memory, the hypervisor's own ranges
//!   (its image, payload, heap, the host DTB, its console UART), every GIC
//!   frame (distributor, redistributors, ITS), and the PCIe host bridge's
//!   ECAM and windows when a partition owns the bridge
//!   (`pci_host_bridge = true`);
//! - lie entirely inside one device region of the host description (a
//!   `reg` window of a device node), so a window cannot reach memory the
//!   host does not describe;
//! - not overlap any other window, of another partition or of its own (a
//!   page is mapped once).
//!
//! At most one partition owns the PCIe host bridge, and only a host that
//! has one can give it.
//!
//! `no_std` + `alloc`: the EL2 image uses this without the crate's `std`
//! feature.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::plan::PartitionPlan;

/// One `reg` window of a host device node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceRegion {
    /// The node's path in the host description, e.g. `/pl061@9030000`.
    pub node: String,
    pub base: u64,
    pub size: u64,
}

/// What the host has, as far as isolation is concerned. Every range is
/// `(base, size)` in host physical addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostResources {
    /// Host RAM (the memory nodes).
    pub ram: Vec<(u64, u64)>,
    /// /memreserve/ entries and static /reserved-memory regions.
    pub reserved: Vec<(u64, u64)>,
    /// Device regions: the `reg` windows of every node that is not memory,
    /// a CPU or reserved memory.
    pub devices: Vec<DeviceRegion>,
    /// GIC frames: distributor, redistributor regions, ITS frames.
    pub gic: Vec<(u64, u64)>,
    /// The hypervisor's own ranges: its image and payload, its heap, the
    /// host DTB, its console UART. Empty when not known (build time).
    pub hypervisor: Vec<(u64, u64)>,
    /// The PCIe host bridge's ECAM and its CPU-side windows.
    pub pcie: Vec<(u64, u64)>,
}

/// Which host resource a window runs into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostKind {
    Ram,
    Reserved,
    Hypervisor,
    Gic,
    /// The PCIe host bridge, owned by this partition.
    Pcie {
        owner: String,
    },
}

impl fmt::Display for HostKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostKind::Ram => f.write_str("host RAM"),
            HostKind::Reserved => f.write_str("host reserved memory"),
            HostKind::Hypervisor => f.write_str("the hypervisor's own range"),
            HostKind::Gic => f.write_str("a GIC frame"),
            HostKind::Pcie { owner } => {
                write!(f, "the PCIe host bridge passed to partition \"{owner}\"")
            }
        }
    }
}

/// The rule a plan breaks; shown after `partition "<name>": <field>: `.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IsolationProblem {
    /// A window of size zero.
    Empty { base: u64 },
    /// A window that wraps past 2^64.
    Wraps { base: u64, size: u64 },
    /// A window over RAM, the hypervisor, the GIC or an owned PCIe bridge.
    Over {
        base: u64,
        size: u64,
        kind: HostKind,
        region_base: u64,
        region_size: u64,
    },
    /// A window not inside any device region of the host; `straddles` is a
    /// region it partly covers, if any.
    NotInDevice {
        base: u64,
        size: u64,
        straddles: Option<DeviceRegion>,
    },
    /// A window overlapping another window (`partition: None` when it is
    /// one of the same partition's).
    Overlap {
        base: u64,
        size: u64,
        partition: Option<String>,
        field: String,
    },
    /// A second partition asks for the PCIe host bridge.
    PciHostBridgeTaken { other: String },
    /// The host description has no PCIe host bridge to give.
    NoPciHostBridge,
}

impl fmt::Display for IsolationProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IsolationProblem::Empty { base } => write!(f, "range at {base:#x} has size 0"),
            IsolationProblem::Wraps { base, size } => write!(
                f,
                "range {base:#x}+{size:#x} wraps past the end of the address space"
            ),
            IsolationProblem::Over {
                base,
                size,
                kind,
                region_base,
                region_size,
            } => write!(
                f,
                "range {base:#x}+{size:#x} overlaps {kind} at {region_base:#x}+{region_size:#x}"
            ),
            IsolationProblem::NotInDevice {
                base,
                size,
                straddles: None,
            } => write!(
                f,
                "range {base:#x}+{size:#x} is not inside any device region of the host description"
            ),
            IsolationProblem::NotInDevice {
                base,
                size,
                straddles: Some(region),
            } => write!(
                f,
                "range {base:#x}+{size:#x} is not inside one device region of the host \
                 description: it runs past {} at {:#x}+{:#x}",
                region.node, region.base, region.size
            ),
            IsolationProblem::Overlap {
                base,
                size,
                partition: None,
                field,
            } => write!(
                f,
                "range {base:#x}+{size:#x} overlaps {field} of the same partition (a page is \
                 mapped once)"
            ),
            IsolationProblem::Overlap {
                base,
                size,
                partition: Some(other),
                field,
            } => write!(
                f,
                "range {base:#x}+{size:#x} overlaps {field} of partition \"{other}\""
            ),
            IsolationProblem::PciHostBridgeTaken { other } => write!(
                f,
                "the PCIe host bridge is already passed to partition \"{other}\""
            ),
            IsolationProblem::NoPciHostBridge => {
                f.write_str("the host description has no PCIe host bridge")
            }
        }
    }
}

/// A plan that would break isolation on this host, naming the partition and
/// the field (`device[0].mmio[1]`, `pci_host_bridge`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsolationError {
    pub partition: String,
    pub field: String,
    pub problem: IsolationProblem,
}

impl fmt::Display for IsolationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "partition \"{}\": {}: {}",
            self.partition, self.field, self.problem
        )
    }
}

impl core::error::Error for IsolationError {}

fn overlaps(base: u64, end: u64, region_base: u64, region_size: u64) -> bool {
    base < region_base.saturating_add(region_size) && region_base < end
}

/// A window already checked, for the overlap rule.
struct Claimed {
    base: u64,
    end: u64,
    partition: usize,
    field: String,
}

/// Checks the rules of this module for `partitions` (in plan order) on
/// `host`; reports the first broken one.
pub fn check_isolation(
    partitions: &[PartitionPlan],
    host: &HostResources,
) -> Result<(), IsolationError> {
    let error = |p: &PartitionPlan, field: String, problem| IsolationError {
        partition: p.name.clone(),
        field,
        problem,
    };
    let bridge_owner = partitions.iter().find(|p| p.pci_host_bridge);
    if let Some(owner) = bridge_owner {
        if host.pcie.is_empty() {
            return Err(error(
                owner,
                "pci_host_bridge".into(),
                IsolationProblem::NoPciHostBridge,
            ));
        }
        if let Some(second) = partitions.iter().filter(|p| p.pci_host_bridge).nth(1) {
            return Err(error(
                second,
                "pci_host_bridge".into(),
                IsolationProblem::PciHostBridgeTaken {
                    other: owner.name.clone(),
                },
            ));
        }
    }

    let mut claimed: Vec<Claimed> = Vec::new();
    for (p_index, partition) in partitions.iter().enumerate() {
        for (d_index, device) in partition.devices.iter().enumerate() {
            for (m_index, range) in device.mmio.iter().enumerate() {
                let field = alloc::format!("device[{d_index}].mmio[{m_index}]");
                let (base, size) = (range.base, range.size);
                if size == 0 {
                    return Err(error(partition, field, IsolationProblem::Empty { base }));
                }
                let Some(end) = base.checked_add(size) else {
                    return Err(error(
                        partition,
                        field,
                        IsolationProblem::Wraps { base, size },
                    ));
                };
                let pcie_kind = bridge_owner.map(|owner| HostKind::Pcie {
                    owner: owner.name.clone(),
                });
                let forbidden = [
                    (Some(HostKind::Ram), &host.ram),
                    (Some(HostKind::Reserved), &host.reserved),
                    (Some(HostKind::Hypervisor), &host.hypervisor),
                    (Some(HostKind::Gic), &host.gic),
                    (pcie_kind, &host.pcie),
                ];
                for (kind, ranges) in forbidden {
                    let Some(kind) = kind else { continue };
                    let hit = ranges.iter().find(|&&(rb, rs)| overlaps(base, end, rb, rs));
                    if let Some(&(region_base, region_size)) = hit {
                        return Err(error(
                            partition,
                            field,
                            IsolationProblem::Over {
                                base,
                                size,
                                kind,
                                region_base,
                                region_size,
                            },
                        ));
                    }
                }
                let inside = host.devices.iter().any(|d| {
                    d.base <= base && d.base.checked_add(d.size).is_some_and(|e| end <= e)
                });
                if !inside {
                    let straddles = host
                        .devices
                        .iter()
                        .find(|d| overlaps(base, end, d.base, d.size))
                        .cloned();
                    return Err(error(
                        partition,
                        field,
                        IsolationProblem::NotInDevice {
                            base,
                            size,
                            straddles,
                        },
                    ));
                }
                if let Some(other) = claimed.iter().find(|c| base < c.end && c.base < end) {
                    let other_partition = (other.partition != p_index)
                        .then(|| partitions[other.partition].name.clone());
                    return Err(error(
                        partition,
                        field,
                        IsolationProblem::Overlap {
                            base,
                            size,
                            partition: other_partition,
                            field: other.field.clone(),
                        },
                    ));
                }
                claimed.push(Claimed {
                    base,
                    end,
                    partition: p_index,
                    field,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{ConsolePlan, DevicePlan, KernelFormat, KernelPlan, MmioRange};
    use alloc::string::ToString;
    use alloc::vec;

    /// A host deliberately unlike QEMU virt: RAM at 2 GiB, devices on a
    /// low bus, a GIC with an ITS, a bridge high up.
    fn host() -> HostResources {
        HostResources {
            ram: vec![(0x8000_0000, 0x4000_0000)],
            reserved: vec![(0x7000_0000, 0x10_0000)],
            devices: vec![
                DeviceRegion {
                    node: "/soc/gpio@1000000".into(),
                    base: 0x100_0000,
                    size: 0x1000,
                },
                DeviceRegion {
                    node: "/soc/dma@1010000".into(),
                    base: 0x101_0000,
                    size: 0x1_0000,
                },
                DeviceRegion {
                    node: "/soc/interrupt-controller@3000000".into(),
                    base: 0x300_0000,
                    size: 0x1_0000,
                },
                DeviceRegion {
                    node: "/soc/serial@2000000".into(),
                    base: 0x200_0000,
                    size: 0x1000,
                },
                DeviceRegion {
                    node: "/pcie@4000000000".into(),
                    base: 0x40_0000_0000,
                    size: 0x1000_0000,
                },
            ],
            gic: vec![(0x300_0000, 0x1_0000), (0x310_0000, 0x10_0000)],
            hypervisor: vec![(0xbc00_0000, 0x400_0000), (0x200_0000, 0x1000)],
            pcie: vec![(0x40_0000_0000, 0x1000_0000), (0x5000_0000, 0x1000_0000)],
        }
    }

    fn partition(name: &str, windows: &[&[(u64, u64)]]) -> PartitionPlan {
        PartitionPlan {
            name: name.to_string(),
            cpus: vec![0],
            ram_size: 64 << 20,
            kernel: KernelPlan {
                image: 0,
                format: KernelFormat::Raw,
            },
            initrd: None,
            bootargs: String::new(),
            console: ConsolePlan { input: false },
            devices: windows
                .iter()
                .enumerate()
                .map(|(i, mmio)| DevicePlan {
                    name: alloc::format!("dev{i}"),
                    mmio: mmio
                        .iter()
                        .map(|&(base, size)| MmioRange { base, size })
                        .collect(),
                    spis: vec![],
                    compatible: None,
                    host_node: None,
                })
                .collect(),
            management: false,
            pci_host_bridge: false,
            pci: Vec::new(),
            token_sha256: None,
            autostart: true,
            pmu: true,
            lifecycle: Default::default(),
            config_store: None,
            api_tls: true,
            gic: crate::plan::GicSetting::Auto,
        }
    }

    fn bridge_owner(name: &str) -> PartitionPlan {
        PartitionPlan {
            pci_host_bridge: true,
            pci: Vec::new(),
            ..partition(name, &[])
        }
    }

    /// What a lone window of alpha is refused for running into.
    fn refused_over(window: (u64, u64)) -> HostKind {
        let plan = [partition("alpha", &[&[window]])];
        let error = check_isolation(&plan, &host()).unwrap_err();
        match error.problem {
            IsolationProblem::Over { kind, .. } => kind,
            ref other => panic!("{error}: not an overlap but {other:?}"),
        }
    }

    #[test]
    fn windows_inside_distinct_device_regions_pass() {
        let plan = [
            partition("alpha", &[&[(0x100_0000, 0x1000)]]),
            partition("beta", &[&[(0x101_0000, 0x1_0000)]]),
        ];

        assert_eq!(check_isolation(&plan, &host()), Ok(()));
    }

    #[test]
    fn window_over_host_ram_is_refused() {
        let plan = [partition(
            "alpha",
            &[&[(0x100_0000, 0x1000), (0x9000_0000, 0x1000)]],
        )];

        let error = check_isolation(&plan, &host()).unwrap_err();

        assert_eq!(error.partition, "alpha");
        assert_eq!(error.field, "device[0].mmio[1]");
        assert!(
            matches!(
                error.problem,
                IsolationProblem::Over {
                    kind: HostKind::Ram,
                    ..
                }
            ),
            "{error}"
        );
        assert_eq!(
            error.to_string(),
            "partition \"alpha\": device[0].mmio[1]: range 0x90000000+0x1000 overlaps host RAM \
             at 0x80000000+0x40000000"
        );
    }

    #[test]
    fn window_over_reserved_memory_is_refused() {
        assert_eq!(refused_over((0x7000_0000, 0x1000)), HostKind::Reserved);
    }

    #[test]
    fn window_over_the_hypervisors_console_is_refused() {
        assert_eq!(refused_over((0x200_0000, 0x1000)), HostKind::Hypervisor);
    }

    #[test]
    fn window_over_a_gic_frame_is_refused_although_the_gic_is_a_device_node() {
        assert_eq!(refused_over((0x300_0000, 0x1000)), HostKind::Gic);
    }

    #[test]
    fn window_over_an_owned_pcie_ecam_is_refused() {
        let plan = [
            bridge_owner("mgmt"),
            partition("alpha", &[&[(0x40_0000_0000, 0x1000)]]),
        ];

        let error = check_isolation(&plan, &host()).unwrap_err();

        assert_eq!(error.partition, "alpha");
        assert_eq!(
            error.problem,
            IsolationProblem::Over {
                base: 0x40_0000_0000,
                size: 0x1000,
                kind: HostKind::Pcie {
                    owner: "mgmt".into()
                },
                region_base: 0x40_0000_0000,
                region_size: 0x1000_0000
            }
        );
    }

    #[test]
    fn unowned_pcie_ecam_may_be_passed_as_a_device() {
        let plan = [partition("alpha", &[&[(0x40_0000_0000, 0x1000)]])];

        assert_eq!(check_isolation(&plan, &host()), Ok(()));
    }

    #[test]
    fn window_where_the_host_has_no_device_is_refused() {
        let plan = [partition("alpha", &[&[(0x600_0000, 0x1000)]])];

        let error = check_isolation(&plan, &host()).unwrap_err();

        assert_eq!(
            error.problem,
            IsolationProblem::NotInDevice {
                base: 0x600_0000,
                size: 0x1000,
                straddles: None
            }
        );
    }

    #[test]
    fn window_running_past_its_device_region_is_refused_naming_the_region() {
        let plan = [partition("alpha", &[&[(0x100_0000, 0x2000)]])];

        let error = check_isolation(&plan, &host()).unwrap_err();

        assert!(
            error.to_string().contains("runs past /soc/gpio@1000000"),
            "{error}"
        );
    }

    #[test]
    fn window_overlapping_another_partitions_window_is_refused() {
        let plan = [
            partition("alpha", &[&[(0x101_0000, 0x1000)]]),
            partition("beta", &[&[], &[(0x101_0000, 0x1_0000)]]),
        ];

        let error = check_isolation(&plan, &host()).unwrap_err();

        assert_eq!(error.partition, "beta");
        assert_eq!(error.field, "device[1].mmio[0]");
        assert_eq!(
            error.problem,
            IsolationProblem::Overlap {
                base: 0x101_0000,
                size: 0x1_0000,
                partition: Some("alpha".into()),
                field: "device[0].mmio[0]".into()
            }
        );
    }

    #[test]
    fn window_mapped_twice_by_one_partition_is_refused() {
        let plan = [partition(
            "alpha",
            &[&[(0x101_0000, 0x1000)], &[(0x101_0000, 0x1000)]],
        )];

        let error = check_isolation(&plan, &host()).unwrap_err();

        assert!(
            matches!(
                error.problem,
                IsolationProblem::Overlap {
                    partition: None,
                    ..
                }
            ),
            "{error}"
        );
    }

    #[test]
    fn empty_window_is_refused() {
        let plan = [partition("alpha", &[&[(0x100_0000, 0)]])];

        let error = check_isolation(&plan, &host()).unwrap_err();

        assert_eq!(error.problem, IsolationProblem::Empty { base: 0x100_0000 });
    }

    #[test]
    fn wrapping_window_is_refused() {
        let plan = [partition("alpha", &[&[(u64::MAX - 0xfff, 0x2000)]])];

        let error = check_isolation(&plan, &host()).unwrap_err();

        assert!(
            matches!(error.problem, IsolationProblem::Wraps { .. }),
            "{error}"
        );
    }

    #[test]
    fn second_pcie_bridge_owner_is_refused() {
        let plan = [bridge_owner("mgmt"), bridge_owner("alpha")];

        let error = check_isolation(&plan, &host()).unwrap_err();

        assert_eq!(error.partition, "alpha");
        assert_eq!(error.field, "pci_host_bridge");
        assert_eq!(
            error.problem,
            IsolationProblem::PciHostBridgeTaken {
                other: "mgmt".into()
            }
        );
    }

    #[test]
    fn pcie_bridge_on_a_host_without_one_is_refused() {
        let host = HostResources {
            pcie: vec![],
            ..host()
        };

        let error = check_isolation(&[bridge_owner("mgmt")], &host).unwrap_err();

        assert_eq!(error.problem, IsolationProblem::NoPciHostBridge);
    }
}
