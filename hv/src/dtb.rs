//! Flattened device trees: our own DTB writer, the DTB each partition's
//! Linux boots with, and the parse of the DTB firmware hands the hypervisor
//! (with the host resources the plan's isolation check needs and an early
//! console finder for reporting a DTB the parse rejects).

use alloc::string::String;
use core::fmt;

mod guest;
mod host;
mod pcie;
mod writer;

pub use guest::{
    build_guest_dtb, spi_cells, ExtraNode, GuestDevice, GuestDtbSpec, GuestSpi, PropValue, Trigger,
    GUEST_APB_PCLK_PHANDLE, GUEST_FIRST_FREE_PHANDLE, GUEST_GIC_PHANDLE, GUEST_ITS_PHANDLE,
    GUEST_MAX_VCPUS, PARTITION_PROP,
};
pub(crate) use host::gicv5_described;
#[cfg(test)]
pub(crate) use host::gicv5_host_dtb;
pub use host::{
    chosen_initrd, describes_hardware, early_uart, host_resources, parse_host_dtb,
    parse_host_gicv5, Conduit, EarlyUart, GicInfo, Gicv5Info, Gicv5Irs, HostDevice, HostInfo,
    NumaInfo, PciIntxMap, PciIommuMap, PciMsiMap, PciRange, PciSpace, PcieInfo, PsciInfo,
    SmmuModel, TimerPpis, UartInfo,
};
pub use pcie::{msi_map, pcie_cells, pcie_cells_for, PcieCells};
pub use writer::{FdtWriter, NodeToken};

/// Why a device tree could not be written, generated or parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DtbError {
    // --- writing ---
    /// A node or property name contains a NUL byte.
    NulInName,
    /// A node name is empty (below the root) or uses characters outside
    /// `[0-9a-zA-Z,._+-@]` (devicetree specification v0.4, 2.2.1).
    InvalidNodeName(String),
    /// A property name is empty or uses characters outside
    /// `[0-9a-zA-Z,._+?#-]` (devicetree specification v0.4, 2.2.4).
    InvalidPropertyName(String),
    /// A string property value contains a NUL byte, which would split it.
    NulInString,
    /// The root node must be named "" and written exactly once, first.
    MisplacedRoot,
    /// A property was written while no node was open.
    PropertyOutsideNode,
    /// A property was written after a child node of the same node; the
    /// structure block requires properties first (spec 5.4.2).
    PropertyAfterChild(String),
    /// The same property name was written twice in one node.
    DuplicateProperty(String),
    /// Two sibling nodes have the same name.
    DuplicateNode(String),
    /// `end_node` was given a token that is not the innermost open node.
    UnbalancedEndNode,
    /// `finish` was called with this many nodes still open.
    UnclosedNodes(usize),
    /// `finish` was called before any root node was written.
    NoRootNode,
    /// The blob would not fit the header's 32-bit sizes and offsets.
    TooLarge,

    // --- guest DTB ---
    /// A partition needs at least one vCPU.
    NoVcpus,
    /// More vCPUs than the guest affinity scheme (reg = Aff0 = N) supports.
    TooManyVcpus { count: usize, max: usize },
    /// The initrd range is empty, inverted, or not inside the partition's RAM.
    InitrdOutsideRam,
    /// The RAM range wraps around the 64-bit address space or is empty.
    BadRamRange,
    /// A pass-through node claims a phandle reserved for the generated nodes.
    ReservedPhandle(u32),
    /// A pass-through device's interrupt is not an SPI the guest's
    /// distributor offers.
    NotAnSpi { node: String, intid: u32 },
    /// A raw property copied to a pass-through device repeats one the
    /// generator writes, or names an interrupt parent other than the GIC.
    GeneratedProperty { node: String, prop: String },
    /// A GICv5 partition was asked for the (GICv3) virtual ITS.
    Gicv3ItsOnGicv5,

    // --- host DTB ---
    /// The blob is shorter than its header or than the header's totalsize.
    Truncated,
    /// The header magic is not 0xd00dfeed.
    BadMagic,
    /// Only version 17 blobs (with size_dt_struct) are accepted.
    UnsupportedVersion(u32),
    /// The blob's structure is broken at this byte offset.
    Malformed { offset: usize, what: &'static str },
    /// A node the hypervisor cannot boot without is missing.
    MissingNode(&'static str),
    /// A node lacks a property the hypervisor needs.
    MissingProperty { node: String, prop: &'static str },
    /// A property has the wrong size or an impossible value.
    BadProperty { node: String, prop: &'static str },
    /// The interrupt controller is not one this hypervisor drives.
    UnsupportedGic(String),
    /// A GICv5 host without what the core needs, as far as its description
    /// tells (`vgic5::check_described`: the IRS, the timer PPIs 26, 27, 30).
    Gicv5Lacks(crate::vgic5::MissingFeatures),
    /// A CPU of /cpus that no IRS serves (no `cpus`/`arm,iaffids` entry):
    /// it could take no interrupt.
    Gicv5CpuWithoutIaffid { mpidr: u64 },
    /// An interrupt specifier is not in the GIC's form.
    BadInterrupt { node: String },
    /// A `reg` address cannot be translated to a CPU physical address
    /// through the parents' `ranges`.
    Untranslatable { node: String },
}

impl fmt::Display for DtbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DtbError::NulInName => write!(f, "name contains a NUL byte"),
            DtbError::InvalidNodeName(n) => write!(f, "invalid node name {n:?}"),
            DtbError::InvalidPropertyName(n) => write!(f, "invalid property name {n:?}"),
            DtbError::NulInString => write!(f, "string value contains a NUL byte"),
            DtbError::MisplacedRoot => write!(f, "root node must be named \"\" and come first"),
            DtbError::PropertyOutsideNode => write!(f, "property written outside any node"),
            DtbError::PropertyAfterChild(p) => {
                write!(f, "property {p:?} written after a child node")
            }
            DtbError::DuplicateProperty(p) => write!(f, "duplicate property {p:?}"),
            DtbError::DuplicateNode(n) => write!(f, "duplicate node {n:?}"),
            DtbError::UnbalancedEndNode => write!(f, "end_node does not match the innermost node"),
            DtbError::UnclosedNodes(n) => write!(f, "{n} nodes still open at finish"),
            DtbError::NoRootNode => write!(f, "no root node written"),
            DtbError::TooLarge => write!(f, "device tree exceeds 32-bit sizes"),
            DtbError::NoVcpus => write!(f, "partition has no vCPUs"),
            DtbError::TooManyVcpus { count, max } => {
                write!(f, "{count} vCPUs requested, at most {max} supported")
            }
            DtbError::InitrdOutsideRam => write!(f, "initrd is not inside the partition's RAM"),
            DtbError::BadRamRange => write!(f, "partition RAM range is empty or wraps"),
            DtbError::ReservedPhandle(p) => write!(f, "phandle {p} is reserved"),
            DtbError::NotAnSpi { node, intid } => {
                write!(f, "{node}: INTID {intid} is not an SPI of the guest's GIC")
            }
            DtbError::GeneratedProperty { node, prop } => {
                write!(f, "{node}: property {prop:?} is generated, not copied")
            }
            DtbError::Gicv3ItsOnGicv5 => write!(
                f,
                "its: a GICv5 partition cannot have the (GICv3) virtual ITS"
            ),
            DtbError::Truncated => write!(f, "device tree blob is truncated"),
            DtbError::BadMagic => write!(f, "bad device tree magic"),
            DtbError::UnsupportedVersion(v) => write!(f, "unsupported device tree version {v}"),
            DtbError::Malformed { offset, what } => {
                write!(f, "malformed device tree at offset {offset:#x}: {what}")
            }
            DtbError::MissingNode(n) => write!(f, "device tree has no {n} node"),
            DtbError::MissingProperty { node, prop } => write!(f, "{node} has no {prop}"),
            DtbError::BadProperty { node, prop } => write!(f, "{node} has a malformed {prop}"),
            DtbError::UnsupportedGic(c) => write!(
                f,
                "unsupported interrupt controller {c:?} (Pinfold drives \"arm,gic-v3\": GICv3/v4)"
            ),
            DtbError::Gicv5Lacks(missing) => write!(f, "{missing}"),
            DtbError::Gicv5CpuWithoutIaffid { mpidr } => write!(
                f,
                "GICv5 host: CPU {mpidr:#x} is in no IRS's cpus (it has no IAFFID)"
            ),
            DtbError::BadInterrupt { node } => write!(f, "{node} has a non-GIC interrupt"),
            DtbError::Untranslatable { node } => {
                write!(f, "{node}: reg cannot be translated through parent ranges")
            }
        }
    }
}
