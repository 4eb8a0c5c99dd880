//! The DTB a partition's unmodified Linux boots with: the QEMU-virt-shaped
//! address map of `layout`, PSCI over HVC, a GICv3, a PL011 console, the
//! PMU when the partition is given one, and the partition's pass-through
//! MMIO devices with their SPIs.
//!
//! What the guest sees matches what hardware would show it: /chosen/bootargs
//! is exactly the plan's bootargs (nothing appended); the partition's name
//! is the string property `/chosen/pinfold,partition` (Linux shows it as
//! `/proc/device-tree/chosen/pinfold,partition`, NUL-terminated). Shapes are
//! copied from QEMU virt's own DTB (`-M virt,gic-version=3,dumpdtb=...`):
//! with a GICv3 its PPI specifiers carry no CPU mask in the flags cell (the
//! mask is a GICv2-only field of the binding), so neither do ours.
//!
//! A partition whose interface is GICv5 ([`GuestDtbSpec::gic`] =
//! `GicInterface::V5`; GICv3 is the default) gets the binding Linux 6.17+
//! uses instead (bindings/interrupt-controller/arm,gic-v5.yaml): an
//! `arm,gic-v5` node with one `arm,gic-v5-irs` child whose config frame is
//! at `GUEST_GICD_BASE`, whose `cpus` are every vCPU and whose
//! `arm,iaffids` are their vPE IDs (vCPU n = vPE n = IAFFID n, as
//! `vgic5::plan_virs` numbers them), and every interrupt specifier in the
//! GICv5 encoding: type 1 = PPI with the architected PPI number (the timer
//! <1 29>, <1 30>, <1 27>, <1 26>; the PMU <1 23>), type 3 = SPI with the
//! SPI ID (core INTID - 32). The CPU nodes then carry phandles from
//! [`GUEST_CPU_PHANDLE_BASE`]. What is not built yet: the emulation of
//! the guest's IRS config frame (docs/GICV5.md), so no GICv5 guest boots.

use alloc::format;
use alloc::vec::Vec;

use super::writer::FdtWriter;
use super::DtbError;
use crate::layout::{
    GICR_STRIDE, GUEST_GICD_BASE, GUEST_GICD_SIZE, GUEST_GICR_BASE, GUEST_GICR_REGION_SIZE,
    GUEST_ITS_BASE, GUEST_ITS_SIZE, GUEST_SPI_COUNT, GUEST_UART_BASE, GUEST_UART_INTID,
    GUEST_UART_SIZE, PPI_HYP_TIMER, PPI_PMU, PPI_PTIMER, PPI_SEC_PTIMER, PPI_VTIMER,
};
use crate::vgic5::GicInterface;

/// Phandle of the guest's GIC node; pass-through nodes (e.g. a PCIe host
/// bridge's `interrupt-map`) reference it.
pub const GUEST_GIC_PHANDLE: u32 = 1;
/// Phandle of the fixed 24 MHz `apb-pclk` clock the PL011 uses.
pub const GUEST_APB_PCLK_PHANDLE: u32 = 2;
/// The lowest phandle a pass-through node may claim for itself.
pub const GUEST_FIRST_FREE_PHANDLE: u32 = 4;
/// With a GICv5, cpu@N has phandle `GUEST_CPU_PHANDLE_BASE + N` (the IRS's
/// `cpus` names them); a pass-through node may not claim one.
pub const GUEST_CPU_PHANDLE_BASE: u32 = 0xfff0_0000;
/// The GICv5 guest IRS config frame's size (one 64 KiB frame).
pub const GUEST_IRS_CONFIG_SIZE: u64 = 0x1_0000;
/// The virtual ITS node (`msi-parent`/`msi-map` of the host bridge).
pub const GUEST_ITS_PHANDLE: u32 = 3;
/// vCPU N gets MPIDR Aff0 = N in one cluster. A GICv3 SGI names its targets
/// by a 16-bit TargetList over Aff0 (ICC_SGI1R_EL1, GICv3 ARM IHI 0069
/// 12.2.22); Aff0 beyond 15 would need the range selector (RSS), which Linux
/// only uses if GICD_TYPER.RSS says so. One cluster of 16 keeps it simple.
pub const GUEST_MAX_VCPUS: usize = 16;

/// The GIC interrupt specifier (bindings/interrupt-controller/arm,gic-v3.yaml)
/// type cell for shared and private peripheral interrupts.
const GIC_SPI: u32 = 0;
const GIC_PPI: u32 = 1;
/// The GICv5 binding's type cell: INTID.TYPE (1 = PPI, 3 = SPI).
const GICV5_PPI: u32 = 1;
const GICV5_SPI: u32 = 3;
/// Flags cell: level-sensitive, active high.
const IRQ_LEVEL_HIGH: u32 = 4;
/// Flags cell: edge-triggered, rising edge.
const IRQ_EDGE_RISING: u32 = 1;
/// The first SPI INTID (GICv3 ARM IHI 0069 2.2.1).
const FIRST_SPI_INTID: u32 = 32;
/// The property the partition's name is given in, under /chosen.
pub const PARTITION_PROP: &str = "pinfold,partition";
/// Properties of a pass-through device node that the generator writes
/// itself (from the device's fields) or that would name an interrupt parent
/// other than the guest's GIC; a raw property copied from the host DT may
/// not carry these names.
const GENERATED_DEVICE_PROPS: [&str; 5] = [
    "compatible",
    "reg",
    "interrupts",
    "interrupt-parent",
    "interrupts-extended",
];
/// The PL011's reference clock, as on QEMU virt.
const APB_PCLK_HZ: u32 = 24_000_000;

/// A property value of a pass-through node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PropValue<'a> {
    /// A flag property with no value (`dma-coherent`, `ranges`).
    Empty,
    U32(u32),
    /// Two cells, most significant first.
    U64(u64),
    Cells(&'a [u32]),
    String(&'a str),
    Strings(&'a [&'a str]),
    Bytes(&'a [u8]),
}

/// A pass-through device node, placed under the root of the guest DTB.
#[derive(Debug, Clone, Copy)]
pub struct ExtraNode<'a> {
    pub name: &'a str,
    pub props: &'a [(&'a str, PropValue<'a>)],
    pub children: &'a [ExtraNode<'a>],
}

/// How an SPI is triggered, as the GIC specifier's flags cell says. A GICv3
/// SPI is either level-sensitive active-high or rising-edge; a host DT's
/// active-low or falling-edge line is inverted before the GIC and appears
/// to it as one of these two.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Trigger {
    #[default]
    LevelHigh,
    EdgeRising,
}

impl Trigger {
    fn flags(self) -> u32 {
        match self {
            Trigger::LevelHigh => IRQ_LEVEL_HIGH,
            Trigger::EdgeRising => IRQ_EDGE_RISING,
        }
    }
}

/// A pass-through SPI of a device: its INTID (the same in guest and host,
/// SPIs are not renumbered) and its trigger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuestSpi {
    pub intid: u32,
    pub trigger: Trigger,
}

impl GuestSpi {
    /// A level-high SPI, the common case.
    pub const fn level(intid: u32) -> Self {
        GuestSpi {
            intid,
            trigger: Trigger::LevelHigh,
        }
    }
}

/// A pass-through MMIO device, written as a node under the root: `name`
/// (e.g. `virtio_mmio@a000000`), `compatible`, `reg` (one `<IPA size>` pair
/// of two cells each per window), `interrupts` (one `<0 (INTID-32) flags>`
/// per SPI; the GIC is the root's `interrupt-parent`), then `props`, raw
/// properties copied byte for byte from the host DT node (e.g.
/// `dma-coherent`, `clock-frequency`). A raw property may not repeat a
/// generated one (see `GENERATED_DEVICE_PROPS`) nor claim a reserved phandle.
#[derive(Debug, Clone, Copy)]
pub struct GuestDevice<'a> {
    pub name: &'a str,
    pub compatible: &'a [&'a str],
    /// (IPA, size) windows, as stage 2 maps them.
    pub reg: &'a [(u64, u64)],
    pub spis: &'a [GuestSpi],
    pub props: &'a [(&'a str, &'a [u8])],
}

/// What a partition's DTB describes.
#[derive(Debug, Clone, Copy)]
pub struct GuestDtbSpec<'a> {
    pub partition: &'a str,
    pub ram_base: u64,
    pub ram_size: u64,
    /// vCPU N appears as cpu@N with reg = N, its MPIDR Aff0.
    pub vcpu_count: usize,
    pub bootargs: &'a str,
    /// (start IPA, end IPA), end exclusive as Linux reads it.
    pub initrd: Option<(u64, u64)>,
    pub rng_seed: Option<[u8; 32]>,
    pub kaslr_seed: Option<u64>,
    /// The partition's vCPUs own their CPUs' PMUs (the plan's `pmu`, the
    /// policy of `crate::pmu`): a `pmu` node, `arm,armv8-pmuv3`, with the
    /// overflow interrupt PPI `PPI_PMU` level-high.
    pub pmu: bool,
    /// The partition has a virtual ITS: an `arm,gic-v3-its` node under the
    /// GIC at `GUEST_ITS_BASE`, `msi-controller`, phandle
    /// [`GUEST_ITS_PHANDLE`].
    pub its: bool,
    /// `/chosen/linux,pci-probe-only`: Linux keeps the BARs as the
    /// hypervisor placed them instead of assigning its own (a partition
    /// owning an SR-IOV VF, whose BARs cannot move).
    pub pci_probe_only: bool,
    /// Pass-through MMIO devices, after the generated nodes.
    pub devices: &'a [GuestDevice<'a>],
    pub extra: &'a [ExtraNode<'a>],
    /// The partition's interrupt controller (`vgic5::choose_interface`):
    /// `V3` (the emulated GICv3, the default) or `V5`.
    pub gic: GicInterface,
}

/// Builds the DTB a partition's Linux is entered with (x0 = its IPA).
pub fn build_guest_dtb(spec: &GuestDtbSpec) -> Result<Vec<u8>, DtbError> {
    check_spec(spec)?;
    let uart_path = format!("/pl011@{GUEST_UART_BASE:x}");

    let mut w = FdtWriter::new();
    let root = w.begin_node("")?;
    w.prop_u32("#address-cells", 2)?;
    w.prop_u32("#size-cells", 2)?;
    w.prop_string("compatible", "linux,dummy-virt")?;
    w.prop_string("model", &format!("Pinfold partition {}", spec.partition))?;
    w.prop_u32("interrupt-parent", GUEST_GIC_PHANDLE)?;

    write_chosen(&mut w, spec, &uart_path)?;
    write_memory(&mut w, spec)?;
    let gic = spec.gic;
    write_cpus(&mut w, spec.vcpu_count, gic)?;
    write_psci(&mut w)?;
    write_timer(&mut w, gic)?;
    match gic {
        GicInterface::V3 => write_gic(&mut w, spec.vcpu_count, spec.its)?,
        GicInterface::V5 => write_gicv5(&mut w, spec.vcpu_count)?,
    }
    write_apb_pclk(&mut w)?;
    write_pl011(&mut w, gic)?;
    if spec.pmu {
        write_pmu(&mut w, gic)?;
    }
    for device in spec.devices {
        write_device(&mut w, device, gic)?;
    }
    for node in spec.extra {
        write_extra(&mut w, node, gic)?;
    }

    w.end_node(root)?;
    w.finish()
}

fn check_spec(spec: &GuestDtbSpec) -> Result<(), DtbError> {
    if spec.vcpu_count == 0 {
        return Err(DtbError::NoVcpus);
    }
    if spec.its && spec.gic == GicInterface::V5 {
        // A GICv5 ITS (`arm,gic-v5-its`) is a different device; the
        // virtual ITS Pinfold emulates is a GICv3 one.
        return Err(DtbError::Gicv3ItsOnGicv5);
    }
    // The redistributor frames must also fit the IPA window reserved for them.
    let max = GUEST_MAX_VCPUS.min((GUEST_GICR_REGION_SIZE / GICR_STRIDE) as usize);
    if spec.vcpu_count > max {
        return Err(DtbError::TooManyVcpus {
            count: spec.vcpu_count,
            max,
        });
    }
    let ram_end = spec
        .ram_base
        .checked_add(spec.ram_size)
        .filter(|_| spec.ram_size != 0)
        .ok_or(DtbError::BadRamRange)?;
    if let Some((start, end)) = spec.initrd {
        if start >= end || start < spec.ram_base || end > ram_end {
            return Err(DtbError::InitrdOutsideRam);
        }
    }
    Ok(())
}

fn write_chosen(w: &mut FdtWriter, spec: &GuestDtbSpec, uart_path: &str) -> Result<(), DtbError> {
    let chosen = w.begin_node("chosen")?;
    w.prop_string("bootargs", spec.bootargs)?;
    w.prop_string(PARTITION_PROP, spec.partition)?;
    w.prop_string("stdout-path", uart_path)?;
    if let Some((start, end)) = spec.initrd {
        w.prop_u64("linux,initrd-start", start)?;
        w.prop_u64("linux,initrd-end", end)?;
    }
    if let Some(seed) = &spec.rng_seed {
        w.prop("rng-seed", seed)?;
    }
    if let Some(seed) = spec.kaslr_seed {
        w.prop_u64("kaslr-seed", seed)?;
    }
    if spec.pci_probe_only {
        w.prop_u32("linux,pci-probe-only", 1)?;
    }
    w.end_node(chosen)
}

fn write_memory(w: &mut FdtWriter, spec: &GuestDtbSpec) -> Result<(), DtbError> {
    let memory = w.begin_node(&format!("memory@{:x}", spec.ram_base))?;
    w.prop_string("device_type", "memory")?;
    w.prop_cells("reg", &reg_cells(spec.ram_base, spec.ram_size))?;
    w.end_node(memory)
}

fn write_cpus(w: &mut FdtWriter, vcpu_count: usize, gic: GicInterface) -> Result<(), DtbError> {
    let cpus = w.begin_node("cpus")?;
    w.prop_u32("#address-cells", 1)?;
    w.prop_u32("#size-cells", 0)?;
    for n in 0..vcpu_count {
        let cpu = w.begin_node(&format!("cpu@{n:x}"))?;
        w.prop_string("device_type", "cpu")?;
        w.prop_string("compatible", "arm,armv8")?;
        // check_spec bounds vcpu_count to 16, so the cast cannot truncate.
        w.prop_u32("reg", n as u32)?;
        w.prop_string("enable-method", "psci")?;
        if gic == GicInterface::V5 {
            w.prop_u32("phandle", GUEST_CPU_PHANDLE_BASE + n as u32)?;
        }
        w.end_node(cpu)?;
    }
    w.end_node(cpus)
}

fn write_psci(w: &mut FdtWriter) -> Result<(), DtbError> {
    // PSCI 0.2+ function IDs are fixed by the spec, so no cpu_on etc.
    // properties; HVC because the guest's SMCs trap to us via HCR_EL2.TSC
    // anyway, and HVC is the conduit a hypervisor advertises.
    let psci = w.begin_node("psci")?;
    w.prop_strings("compatible", &["arm,psci-1.0", "arm,psci-0.2"])?;
    w.prop_string("method", "hvc")?;
    w.end_node(psci)
}

fn write_timer(w: &mut FdtWriter, gic: GicInterface) -> Result<(), DtbError> {
    // Order fixed by the arm,arch_timer binding: secure phys, non-secure
    // phys, virtual, hypervisor phys.
    let mut cells = [0u32; 12];
    for (slot, intid) in [PPI_SEC_PTIMER, PPI_PTIMER, PPI_VTIMER, PPI_HYP_TIMER]
        .iter()
        .enumerate()
    {
        cells[slot * 3..slot * 3 + 3].copy_from_slice(&ppi(*intid, gic));
    }
    let timer = w.begin_node("timer")?;
    w.prop_string("compatible", "arm,armv8-timer")?;
    w.prop_cells("interrupts", &cells)?;
    // The counter keeps running in every idle state a guest can reach.
    w.prop_null("always-on")?;
    w.end_node(timer)
}

fn write_gic(w: &mut FdtWriter, vcpu_count: usize, its: bool) -> Result<(), DtbError> {
    let gicr_size = vcpu_count as u64 * GICR_STRIDE;
    let mut reg = [0u32; 8];
    reg[..4].copy_from_slice(&reg_cells(GUEST_GICD_BASE, GUEST_GICD_SIZE));
    reg[4..].copy_from_slice(&reg_cells(GUEST_GICR_BASE, gicr_size));

    let gic = w.begin_node(&format!("intc@{GUEST_GICD_BASE:x}"))?;
    w.prop_string("compatible", "arm,gic-v3")?;
    w.prop_u32("#interrupt-cells", 3)?;
    w.prop_u32("#address-cells", 2)?;
    w.prop_u32("#size-cells", 2)?;
    w.prop_null("ranges")?;
    w.prop_null("interrupt-controller")?;
    w.prop_cells("reg", &reg)?;
    w.prop_u32("#redistributor-regions", 1)?;
    w.prop_u32("phandle", GUEST_GIC_PHANDLE)?;
    if its {
        let node = w.begin_node(&format!("its@{GUEST_ITS_BASE:x}"))?;
        w.prop_string("compatible", "arm,gic-v3-its")?;
        w.prop_null("msi-controller")?;
        w.prop_u32("#msi-cells", 1)?;
        w.prop_cells("reg", &reg_cells(GUEST_ITS_BASE, GUEST_ITS_SIZE))?;
        w.prop_u32("phandle", GUEST_ITS_PHANDLE)?;
        w.end_node(node)?;
    }
    w.end_node(gic)
}

/// The GICv5: no `reg` of its own (its frames are the IRS's), one IRS
/// whose config frame is where a GICv3 guest's distributor would be.
fn write_gicv5(w: &mut FdtWriter, vcpu_count: usize) -> Result<(), DtbError> {
    let gic = w.begin_node("intc")?;
    w.prop_string("compatible", "arm,gic-v5")?;
    w.prop_u32("#interrupt-cells", 3)?;
    w.prop_u32("#address-cells", 2)?;
    w.prop_u32("#size-cells", 2)?;
    w.prop_null("ranges")?;
    w.prop_null("interrupt-controller")?;
    w.prop_u32("phandle", GUEST_GIC_PHANDLE)?;
    let irs = w.begin_node(&format!("irs@{GUEST_GICD_BASE:x}"))?;
    w.prop_string("compatible", "arm,gic-v5-irs")?;
    w.prop_u32("#address-cells", 2)?;
    w.prop_u32("#size-cells", 2)?;
    w.prop_null("ranges")?;
    w.prop_cells("reg", &reg_cells(GUEST_GICD_BASE, GUEST_IRS_CONFIG_SIZE))?;
    w.prop_string("reg-names", "ns-config")?;
    let cpus: Vec<u32> = (0..vcpu_count as u32)
        .map(|n| GUEST_CPU_PHANDLE_BASE + n)
        .collect();
    w.prop_cells("cpus", &cpus)?;
    // 16-bit cells (the binding's `/bits/ 16`): vCPU n has IAFFID n.
    let iaffids: Vec<u8> = (0..vcpu_count as u16).flat_map(u16::to_be_bytes).collect();
    w.prop("arm,iaffids", &iaffids)?;
    w.end_node(irs)?;
    w.end_node(gic)
}

fn write_apb_pclk(w: &mut FdtWriter) -> Result<(), DtbError> {
    // Without a clock the AMBA bus code cannot enable the PL011 and its
    // driver fails to probe.
    let clk = w.begin_node("apb-pclk")?;
    w.prop_string("compatible", "fixed-clock")?;
    w.prop_u32("#clock-cells", 0)?;
    w.prop_u32("clock-frequency", APB_PCLK_HZ)?;
    w.prop_string("clock-output-names", "clk24mhz")?;
    w.prop_u32("phandle", GUEST_APB_PCLK_PHANDLE)?;
    w.end_node(clk)
}

fn write_pl011(w: &mut FdtWriter, gic: GicInterface) -> Result<(), DtbError> {
    let uart = w.begin_node(&format!("pl011@{GUEST_UART_BASE:x}"))?;
    w.prop_strings("compatible", &["arm,pl011", "arm,primecell"])?;
    w.prop_cells("reg", &reg_cells(GUEST_UART_BASE, GUEST_UART_SIZE))?;
    w.prop_cells(
        "interrupts",
        &spi_cells(GUEST_UART_INTID, IRQ_LEVEL_HIGH, gic),
    )?;
    w.prop_cells("clocks", &[GUEST_APB_PCLK_PHANDLE, GUEST_APB_PCLK_PHANDLE])?;
    w.prop_strings("clock-names", &["uartclk", "apb_pclk"])?;
    w.end_node(uart)
}

fn write_pmu(w: &mut FdtWriter, gic: GicInterface) -> Result<(), DtbError> {
    // QEMU virt's shape with a GICv3: compatible after interrupts does not
    // matter, the specifier does: <PPI 7 level-high>, no CPU mask.
    let pmu = w.begin_node("pmu")?;
    w.prop_string("compatible", "arm,armv8-pmuv3")?;
    w.prop_cells("interrupts", &ppi(PPI_PMU, gic))?;
    w.end_node(pmu)
}

fn write_device(
    w: &mut FdtWriter,
    device: &GuestDevice,
    gic: GicInterface,
) -> Result<(), DtbError> {
    let mut reg = Vec::with_capacity(device.reg.len() * 4);
    for &(ipa, size) in device.reg {
        reg.extend_from_slice(&reg_cells(ipa, size));
    }
    let mut interrupts = Vec::with_capacity(device.spis.len() * 3);
    for spi in device.spis {
        if !(FIRST_SPI_INTID..FIRST_SPI_INTID + GUEST_SPI_COUNT).contains(&spi.intid) {
            return Err(DtbError::NotAnSpi {
                node: device.name.into(),
                intid: spi.intid,
            });
        }
        interrupts.extend_from_slice(&spi_cells(spi.intid, spi.trigger.flags(), gic));
    }

    let node = w.begin_node(device.name)?;
    if !device.compatible.is_empty() {
        w.prop_strings("compatible", device.compatible)?;
    }
    if !reg.is_empty() {
        w.prop_cells("reg", &reg)?;
    }
    if !interrupts.is_empty() {
        w.prop_cells("interrupts", &interrupts)?;
    }
    for &(name, value) in device.props {
        if GENERATED_DEVICE_PROPS.contains(&name) {
            return Err(DtbError::GeneratedProperty {
                node: device.name.into(),
                prop: name.into(),
            });
        }
        if let Some(claimed) = claimed_phandle(name, &PropValue::Bytes(value)) {
            if reserved_phandle(claimed, gic) {
                return Err(DtbError::ReservedPhandle(claimed));
            }
        }
        w.prop(name, value)?;
    }
    w.end_node(node)
}

fn write_extra(w: &mut FdtWriter, node: &ExtraNode, gic: GicInterface) -> Result<(), DtbError> {
    let token = w.begin_node(node.name)?;
    for (name, value) in node.props {
        if let Some(claimed) = claimed_phandle(name, value) {
            if reserved_phandle(claimed, gic) {
                return Err(DtbError::ReservedPhandle(claimed));
            }
        }
        match *value {
            PropValue::Empty => w.prop_null(name)?,
            PropValue::U32(v) => w.prop_u32(name, v)?,
            PropValue::U64(v) => w.prop_u64(name, v)?,
            PropValue::Cells(cells) => w.prop_cells(name, cells)?,
            PropValue::String(s) => w.prop_string(name, s)?,
            PropValue::Strings(list) => w.prop_strings(name, list)?,
            PropValue::Bytes(bytes) => w.prop(name, bytes)?,
        }
    }
    for child in node.children {
        write_extra(w, child, gic)?;
    }
    w.end_node(token)
}

/// A phandle the generated nodes use: below [`GUEST_FIRST_FREE_PHANDLE`],
/// and with a GICv5 the CPU nodes' ([`GUEST_CPU_PHANDLE_BASE`] + vCPU, for
/// every vCPU a guest may have).
fn reserved_phandle(p: u32, gic: GicInterface) -> bool {
    let cpus = GUEST_CPU_PHANDLE_BASE..GUEST_CPU_PHANDLE_BASE + GUEST_MAX_VCPUS as u32;
    p < GUEST_FIRST_FREE_PHANDLE || (gic == GicInterface::V5 && cpus.contains(&p))
}

/// The phandle a pass-through property assigns, in whichever form it is written.
fn claimed_phandle(name: &str, value: &PropValue) -> Option<u32> {
    if name != "phandle" && name != "linux,phandle" {
        return None;
    }
    match *value {
        PropValue::U32(v) | PropValue::Cells(&[v]) => Some(v),
        PropValue::Bytes(&[a, b, c, d]) => Some(u32::from_be_bytes([a, b, c, d])),
        _ => None,
    }
}

/// A `reg` entry with #address-cells = #size-cells = 2.
fn reg_cells(base: u64, size: u64) -> [u32; 4] {
    [
        (base >> 32) as u32,
        base as u32,
        (size >> 32) as u32,
        size as u32,
    ]
}

/// The 3-cell specifier of a level-high PPI given by INTID: GICv3 <1
/// (INTID - 16) 4>; GICv5 <1 PPI 4>, the architected PPI numbers being the
/// GICv3 INTIDs (the timers 26..30, the PMU 23).
fn ppi(intid: u32, gic: GicInterface) -> [u32; 3] {
    match gic {
        GicInterface::V3 => [GIC_PPI, intid - 16, IRQ_LEVEL_HIGH],
        GicInterface::V5 => [GICV5_PPI, intid, IRQ_LEVEL_HIGH],
    }
}

/// The 3-cell specifier of the SPI with core INTID `intid` (32 + SPI ID):
/// GICv3 <0 ID flags>, GICv5 <3 ID flags>.
pub fn spi_cells(intid: u32, flags: u32, gic: GicInterface) -> [u32; 3] {
    let ty = match gic {
        GicInterface::V3 => GIC_SPI,
        GicInterface::V5 => GICV5_SPI,
    };
    [ty, intid - FIRST_SPI_INTID, flags]
}

#[cfg(test)]
mod tests {
    use super::*;
    use fdt::Fdt;

    const SEED: [u8; 32] = [0xa5; 32];

    fn spec(vcpu_count: usize) -> GuestDtbSpec<'static> {
        GuestDtbSpec {
            partition: "web",
            ram_base: 0x4000_0000,
            ram_size: 0x2000_0000,
            vcpu_count,
            bootargs: "console=ttyAMA0 earlycon=pl011,0x09000000",
            initrd: Some((0x4800_0000, 0x4810_0000)),
            rng_seed: Some(SEED),
            kaslr_seed: Some(0x0123_4567_89ab_cdef),
            its: false,
            pci_probe_only: false,
            pmu: false,
            devices: &[],
            extra: &[],
            gic: GicInterface::V3,
        }
    }

    fn cells(value: &[u8]) -> Vec<u32> {
        value
            .chunks(4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    fn prop<'a>(fdt: &'a Fdt<'a>, path: &str, name: &str) -> &'a [u8] {
        fdt.find_node(path)
            .unwrap_or_else(|| panic!("no node {path}"))
            .property(name)
            .unwrap_or_else(|| panic!("no {name} in {path}"))
            .value
    }

    fn strings(value: &[u8]) -> Vec<&str> {
        value
            .split(|b| *b == 0)
            .filter(|s| !s.is_empty())
            .map(|s| core::str::from_utf8(s).unwrap())
            .collect()
    }

    #[test]
    fn root_describes_virt_machine_with_gic_as_interrupt_parent() {
        let blob = build_guest_dtb(&spec(1)).unwrap();

        let fdt = Fdt::new(&blob).unwrap();
        assert_eq!(cells(prop(&fdt, "/", "#address-cells")), [2]);
        assert_eq!(cells(prop(&fdt, "/", "#size-cells")), [2]);
        assert_eq!(strings(prop(&fdt, "/", "compatible")), ["linux,dummy-virt"]);
        assert_eq!(strings(prop(&fdt, "/", "model")), ["Pinfold partition web"]);
        assert_eq!(
            cells(prop(&fdt, "/", "interrupt-parent")),
            [GUEST_GIC_PHANDLE]
        );
    }

    #[test]
    fn chosen_carries_bootargs_console_initrd_and_seeds() {
        let blob = build_guest_dtb(&spec(1)).unwrap();

        let fdt = Fdt::new(&blob).unwrap();
        assert_eq!(
            fdt.chosen().bootargs(),
            Some("console=ttyAMA0 earlycon=pl011,0x09000000")
        );
        assert_eq!(fdt.chosen().stdout().map(|n| n.name), Some("pl011@9000000"));
        assert_eq!(
            cells(prop(&fdt, "/chosen", "linux,initrd-start")),
            [0, 0x4800_0000]
        );
        assert_eq!(
            cells(prop(&fdt, "/chosen", "linux,initrd-end")),
            [0, 0x4810_0000]
        );
        assert_eq!(prop(&fdt, "/chosen", "rng-seed"), SEED);
        assert_eq!(
            cells(prop(&fdt, "/chosen", "kaslr-seed")),
            [0x0123_4567, 0x89ab_cdef]
        );
    }

    #[test]
    fn chosen_bootargs_are_exactly_the_plans_and_the_name_is_its_own_property() {
        let blob = build_guest_dtb(&spec(1)).unwrap();

        let fdt = Fdt::new(&blob).unwrap();
        assert_eq!(
            prop(&fdt, "/chosen", "bootargs"),
            b"console=ttyAMA0 earlycon=pl011,0x09000000\0"
        );
        assert_eq!(prop(&fdt, "/chosen", "pinfold,partition"), b"web\0");
    }

    #[test]
    fn no_pmu_node_unless_asked() {
        let blob = build_guest_dtb(&spec(2)).unwrap();

        let fdt = Fdt::new(&blob).unwrap();
        assert!(fdt.find_node("/pmu").is_none());
    }

    #[test]
    fn pci_probe_only_is_in_chosen_only_when_asked() {
        let blob = build_guest_dtb(&spec(1)).unwrap();
        let fdt = Fdt::new(&blob).unwrap();
        let chosen = fdt.find_node("/chosen").unwrap();
        assert!(chosen.property("linux,pci-probe-only").is_none());
        let blob = build_guest_dtb(&GuestDtbSpec {
            pci_probe_only: true,
            ..spec(1)
        })
        .unwrap();
        let fdt = Fdt::new(&blob).unwrap();
        assert_eq!(cells(prop(&fdt, "/chosen", "linux,pci-probe-only")), [1]);
    }

    #[test]
    fn pmu_node_is_pmuv3_on_ppi_23_level_high_as_qemu_virt_gicv3() {
        let spec = GuestDtbSpec {
            pmu: true,
            ..spec(2)
        };

        let blob = build_guest_dtb(&spec).unwrap();

        let fdt = Fdt::new(&blob).unwrap();
        assert_eq!(
            strings(prop(&fdt, "/pmu", "compatible")),
            ["arm,armv8-pmuv3"]
        );
        // PPI 7 = INTID 23; GICv3 specifiers carry no CPU mask.
        assert_eq!(cells(prop(&fdt, "/pmu", "interrupts")), [1, 7, 4]);
    }

    const VIRTIO_SPIS: [GuestSpi; 2] = [
        GuestSpi::level(48),
        GuestSpi {
            intid: 49,
            trigger: Trigger::EdgeRising,
        },
    ];

    fn virtio<'a>(props: &'a [(&'a str, &'a [u8])], spis: &'a [GuestSpi]) -> GuestDevice<'a> {
        GuestDevice {
            name: "virtio_mmio@a000000",
            compatible: &["virtio,mmio"],
            reg: &[(0x0a00_0000, 0x200), (0x1_0000_0000, 0x1000)],
            spis,
            props,
        }
    }

    #[test]
    fn device_node_has_compatible_reg_windows_and_spis_with_their_triggers() {
        let devices = [virtio(&[], &VIRTIO_SPIS)];
        let spec = GuestDtbSpec {
            devices: &devices,
            ..spec(1)
        };

        let blob = build_guest_dtb(&spec).unwrap();

        let fdt = Fdt::new(&blob).unwrap();
        let node = "/virtio_mmio@a000000";
        assert_eq!(strings(prop(&fdt, node, "compatible")), ["virtio,mmio"]);
        assert_eq!(
            cells(prop(&fdt, node, "reg")),
            [0, 0x0a00_0000, 0, 0x200, 1, 0, 0, 0x1000]
        );
        assert_eq!(cells(prop(&fdt, node, "interrupts")), [0, 16, 4, 0, 17, 1]);
    }

    #[test]
    fn device_interrupts_resolve_to_the_guest_gic() {
        let devices = [virtio(&[], &VIRTIO_SPIS)];
        let spec = GuestDtbSpec {
            devices: &devices,
            ..spec(1)
        };

        let blob = build_guest_dtb(&spec).unwrap();

        let fdt = Fdt::new(&blob).unwrap();
        let node = fdt.find_node("/virtio_mmio@a000000").unwrap();
        // No parent of its own: the root's, inherited, is the GIC.
        assert!(node.property("interrupt-parent").is_none());
        let root_parent = cells(prop(&fdt, "/", "interrupt-parent"))[0];
        let parent = fdt
            .find_phandle(root_parent)
            .expect("the root's interrupt parent");
        assert_eq!(parent.name, "intc@8000000");
        assert_eq!(cells(prop(&fdt, "/intc@8000000", "#interrupt-cells")), [3]);
        let reg: Vec<(usize, Option<usize>)> = node
            .reg()
            .unwrap()
            .map(|r| (r.starting_address as usize, r.size))
            .collect();
        assert_eq!(
            reg,
            [(0x0a00_0000, Some(0x200)), (0x1_0000_0000, Some(0x1000))]
        );
    }

    #[test]
    fn device_raw_properties_are_copied_byte_for_byte() {
        let props: [(&str, &[u8]); 2] = [
            ("dma-coherent", b""),
            ("clock-frequency", &[0, 0x16, 0xe3, 0x60]),
        ];
        let devices = [virtio(&props, &[])];
        let spec = GuestDtbSpec {
            devices: &devices,
            ..spec(1)
        };

        let blob = build_guest_dtb(&spec).unwrap();

        let fdt = Fdt::new(&blob).unwrap();
        let node = "/virtio_mmio@a000000";
        assert_eq!(prop(&fdt, node, "dma-coherent"), b"");
        assert_eq!(cells(prop(&fdt, node, "clock-frequency")), [1_500_000]);
        assert!(fdt
            .find_node(node)
            .unwrap()
            .property("interrupts")
            .is_none());
    }

    #[test]
    fn device_with_a_ppi_is_rejected() {
        let spis = [GuestSpi::level(27)];
        let devices = [virtio(&[], &spis)];
        let spec = GuestDtbSpec {
            devices: &devices,
            ..spec(1)
        };

        assert_eq!(
            build_guest_dtb(&spec),
            Err(DtbError::NotAnSpi {
                node: "virtio_mmio@a000000".into(),
                intid: 27
            })
        );
    }

    #[test]
    fn device_with_an_spi_beyond_the_guest_distributor_is_rejected() {
        let spis = [GuestSpi::level(32 + 256)];
        let devices = [virtio(&[], &spis)];
        let spec = GuestDtbSpec {
            devices: &devices,
            ..spec(1)
        };

        assert!(matches!(
            build_guest_dtb(&spec),
            Err(DtbError::NotAnSpi { intid: 288, .. })
        ));
    }

    #[test]
    fn device_raw_interrupt_parent_from_the_host_is_rejected() {
        let props: [(&str, &[u8]); 1] = [("interrupt-parent", &[0, 0, 0x80, 0x03])];
        let devices = [virtio(&props, &[])];
        let spec = GuestDtbSpec {
            devices: &devices,
            ..spec(1)
        };

        assert_eq!(
            build_guest_dtb(&spec),
            Err(DtbError::GeneratedProperty {
                node: "virtio_mmio@a000000".into(),
                prop: "interrupt-parent".into()
            })
        );
    }

    #[test]
    fn device_raw_phandle_claiming_the_gic_is_rejected() {
        let props: [(&str, &[u8]); 1] = [("phandle", &[0, 0, 0, 1])];
        let devices = [virtio(&props, &[])];
        let spec = GuestDtbSpec {
            devices: &devices,
            ..spec(1)
        };

        assert_eq!(
            build_guest_dtb(&spec),
            Err(DtbError::ReservedPhandle(GUEST_GIC_PHANDLE))
        );
    }

    #[test]
    fn device_shadowing_the_console_is_rejected() {
        let devices = [GuestDevice {
            name: "pl011@9000000",
            ..virtio(&[], &[])
        }];
        let spec = GuestDtbSpec {
            devices: &devices,
            ..spec(1)
        };

        assert_eq!(
            build_guest_dtb(&spec),
            Err(DtbError::DuplicateNode("pl011@9000000".into()))
        );
    }

    #[test]
    fn chosen_omits_absent_initrd_and_seeds() {
        let spec = GuestDtbSpec {
            initrd: None,
            rng_seed: None,
            kaslr_seed: None,
            ..spec(1)
        };

        let blob = build_guest_dtb(&spec).unwrap();

        let fdt = Fdt::new(&blob).unwrap();
        let chosen = fdt.find_node("/chosen").unwrap();
        for absent in [
            "linux,initrd-start",
            "linux,initrd-end",
            "rng-seed",
            "kaslr-seed",
        ] {
            assert!(chosen.property(absent).is_none(), "{absent}");
        }
    }

    #[test]
    fn memory_node_covers_partition_ram() {
        let blob = build_guest_dtb(&spec(1)).unwrap();

        let fdt = Fdt::new(&blob).unwrap();
        assert_eq!(
            strings(prop(&fdt, "/memory@40000000", "device_type")),
            ["memory"]
        );
        assert_eq!(
            cells(prop(&fdt, "/memory@40000000", "reg")),
            [0, 0x4000_0000, 0, 0x2000_0000]
        );
    }

    #[test]
    fn two_vcpus_are_cpu0_and_cpu1_started_by_psci() {
        let blob = build_guest_dtb(&spec(2)).unwrap();

        let fdt = Fdt::new(&blob).unwrap();
        assert_eq!(cells(prop(&fdt, "/cpus", "#address-cells")), [1]);
        assert_eq!(cells(prop(&fdt, "/cpus", "#size-cells")), [0]);
        let cpus = fdt.find_node("/cpus").unwrap();
        let names: Vec<&str> = cpus.children().map(|c| c.name).collect();
        assert_eq!(names, ["cpu@0", "cpu@1"]);
        for (n, path) in ["/cpus/cpu@0", "/cpus/cpu@1"].iter().enumerate() {
            assert_eq!(cells(prop(&fdt, path, "reg")), [n as u32]);
            assert_eq!(strings(prop(&fdt, path, "enable-method")), ["psci"]);
            assert_eq!(strings(prop(&fdt, path, "compatible")), ["arm,armv8"]);
            assert_eq!(strings(prop(&fdt, path, "device_type")), ["cpu"]);
        }
    }

    #[test]
    fn psci_is_1_0_over_hvc() {
        let blob = build_guest_dtb(&spec(1)).unwrap();

        let fdt = Fdt::new(&blob).unwrap();
        assert_eq!(
            strings(prop(&fdt, "/psci", "compatible")),
            ["arm,psci-1.0", "arm,psci-0.2"]
        );
        assert_eq!(strings(prop(&fdt, "/psci", "method")), ["hvc"]);
    }

    #[test]
    fn timer_lists_secure_phys_virt_hyp_ppis_level_high() {
        let blob = build_guest_dtb(&spec(1)).unwrap();

        let fdt = Fdt::new(&blob).unwrap();
        assert_eq!(
            strings(prop(&fdt, "/timer", "compatible")),
            ["arm,armv8-timer"]
        );
        assert_eq!(
            cells(prop(&fdt, "/timer", "interrupts")),
            [1, 13, 4, 1, 14, 4, 1, 11, 4, 1, 10, 4]
        );
        assert_eq!(prop(&fdt, "/timer", "always-on"), b"");
    }

    #[test]
    fn gic_node_is_v3_with_distributor_and_one_redistributor_region() {
        let blob = build_guest_dtb(&spec(1)).unwrap();

        let fdt = Fdt::new(&blob).unwrap();
        let gic = "/intc@8000000";
        assert_eq!(strings(prop(&fdt, gic, "compatible")), ["arm,gic-v3"]);
        assert_eq!(cells(prop(&fdt, gic, "#interrupt-cells")), [3]);
        assert_eq!(cells(prop(&fdt, gic, "#address-cells")), [2]);
        assert_eq!(cells(prop(&fdt, gic, "#size-cells")), [2]);
        assert_eq!(prop(&fdt, gic, "ranges"), b"");
        assert_eq!(prop(&fdt, gic, "interrupt-controller"), b"");
        assert_eq!(
            cells(prop(&fdt, gic, "reg")),
            [0, 0x0800_0000, 0, 0x1_0000, 0, 0x080A_0000, 0, 0x2_0000]
        );
        assert_eq!(cells(prop(&fdt, gic, "#redistributor-regions")), [1]);
        assert_eq!(cells(prop(&fdt, gic, "phandle")), [GUEST_GIC_PHANDLE]);
    }

    #[test]
    fn a_gicv5_partition_gets_the_gicv5_binding_and_gicv5_specifiers() {
        const DEV_SPIS: [GuestSpi; 1] = [GuestSpi {
            intid: 32 + 16,
            trigger: Trigger::EdgeRising,
        }];
        let device = GuestDevice {
            name: "virtio_mmio@a000000",
            compatible: &["virtio,mmio"],
            reg: &[(0x0a00_0000, 0x200)],
            spis: &DEV_SPIS,
            props: &[],
        };
        let devices = [device];
        let blob = build_guest_dtb(&GuestDtbSpec {
            gic: GicInterface::V5,
            pmu: true,
            devices: &devices,
            ..spec(2)
        })
        .unwrap();

        // The crate's own host-DT parser reads it back as a GICv5 with one
        // IRS at the guest frame serving both vCPUs, vCPU n = IAFFID n.
        let info = crate::dtb::parse_host_gicv5(&blob)
            .unwrap()
            .expect("a GICv5");
        assert_eq!(info.irs.len(), 1);
        assert_eq!(info.irs[0].config, (GUEST_GICD_BASE, GUEST_IRS_CONFIG_SIZE));
        assert_eq!(info.irs[0].cpus, [(0, 0), (1, 1)]);
        assert!(info.irs[0].its.is_empty());

        let fdt = Fdt::new(&blob).unwrap();
        assert_eq!(strings(prop(&fdt, "/intc", "compatible")), ["arm,gic-v5"]);
        assert_eq!(cells(prop(&fdt, "/intc", "#interrupt-cells")), [3]);
        assert_eq!(prop(&fdt, "/intc", "interrupt-controller"), b"");
        assert_eq!(cells(prop(&fdt, "/intc", "phandle")), [GUEST_GIC_PHANDLE]);
        let irs = "/intc/irs@8000000";
        assert_eq!(strings(prop(&fdt, irs, "compatible")), ["arm,gic-v5-irs"]);
        assert_eq!(strings(prop(&fdt, irs, "reg-names")), ["ns-config"]);
        assert_eq!(
            cells(prop(&fdt, irs, "cpus")),
            [GUEST_CPU_PHANDLE_BASE, GUEST_CPU_PHANDLE_BASE + 1]
        );
        assert_eq!(prop(&fdt, irs, "arm,iaffids"), [0, 0, 0, 1]);
        // Type 1 = PPI with the architected number, type 3 = SPI with the
        // SPI ID: secure phys 29, phys 30, virt 27, hyp 26; PMU 23.
        assert_eq!(
            cells(prop(&fdt, "/timer", "interrupts")),
            [1, 29, 4, 1, 30, 4, 1, 27, 4, 1, 26, 4]
        );
        assert_eq!(cells(prop(&fdt, "/pmu", "interrupts")), [1, 23, 4]);
        assert_eq!(
            cells(prop(&fdt, "/pl011@9000000", "interrupts")),
            [3, GUEST_UART_INTID - 32, 4]
        );
        assert_eq!(
            cells(prop(&fdt, "/virtio_mmio@a000000", "interrupts")),
            [3, 16, 1]
        );
        assert!(fdt.find_node("/intc@8000000").is_none(), "no GICv3 node");

        // dtc, the reference parser, accepts it (when installed).
        if let Some(dts) = crate::dtb::writer::tests::dtc_decompile(&blob) {
            assert!(dts.contains("compatible = \"arm,gic-v5-irs\";"), "{dts}");
        }

        // A GICv3 partition is unchanged: no CPU phandles, no IRS.
        let v3 = build_guest_dtb(&spec(2)).unwrap();
        let fdt = Fdt::new(&v3).unwrap();
        assert!(fdt
            .find_node("/cpus/cpu@0")
            .unwrap()
            .property("phandle")
            .is_none());
        assert_eq!(crate::dtb::parse_host_gicv5(&v3).unwrap(), None);
    }

    #[test]
    fn a_gicv5_partition_refuses_the_gicv3_its_and_reserves_its_cpu_phandles() {
        let e = build_guest_dtb(&GuestDtbSpec {
            gic: GicInterface::V5,
            its: true,
            ..spec(1)
        })
        .unwrap_err();
        assert_eq!(e, DtbError::Gicv3ItsOnGicv5);
        let props = [("phandle", PropValue::U32(GUEST_CPU_PHANDLE_BASE))];
        let extra = [ExtraNode {
            name: "thing",
            props: &props,
            children: &[],
        }];
        let e = build_guest_dtb(&GuestDtbSpec {
            gic: GicInterface::V5,
            extra: &extra,
            ..spec(1)
        })
        .unwrap_err();
        assert_eq!(e, DtbError::ReservedPhandle(GUEST_CPU_PHANDLE_BASE));
        // A GICv3 partition's pass-through node may still use it.
        assert!(build_guest_dtb(&GuestDtbSpec {
            extra: &extra,
            ..spec(1)
        })
        .is_ok());
    }

    #[test]
    fn a_partition_with_a_vits_gets_an_its_node_under_its_gic_and_no_other_does() {
        let fdt_blob = build_guest_dtb(&spec(1)).unwrap();
        let fdt = Fdt::new(&fdt_blob).unwrap();
        assert!(fdt.find_node("/intc@8000000/its@8080000").is_none());

        let blob = build_guest_dtb(&GuestDtbSpec {
            its: true,
            ..spec(2)
        })
        .unwrap();
        let fdt = Fdt::new(&blob).unwrap();
        let its = "/intc@8000000/its@8080000";
        assert_eq!(strings(prop(&fdt, its, "compatible")), ["arm,gic-v3-its"]);
        assert_eq!(prop(&fdt, its, "msi-controller"), b"");
        assert_eq!(cells(prop(&fdt, its, "#msi-cells")), [1]);
        // The control frame and the GITS_TRANSLATER page after it.
        assert_eq!(cells(prop(&fdt, its, "reg")), [0, 0x0808_0000, 0, 0x2_0000]);
        assert_eq!(cells(prop(&fdt, its, "phandle")), [GUEST_ITS_PHANDLE]);
        // It lies between the distributor and the redistributors.
        const {
            assert!(GUEST_ITS_BASE >= GUEST_GICD_BASE + GUEST_GICD_SIZE);
            assert!(GUEST_ITS_BASE + GUEST_ITS_SIZE <= GUEST_GICR_BASE);
            assert!(GUEST_ITS_PHANDLE < GUEST_FIRST_FREE_PHANDLE);
        }
    }

    #[test]
    fn two_vcpus_get_two_redistributor_frames() {
        let blob = build_guest_dtb(&spec(2)).unwrap();

        let fdt = Fdt::new(&blob).unwrap();
        let reg = cells(prop(&fdt, "/intc@8000000", "reg"));
        assert_eq!(reg[4..], [0, 0x080A_0000, 0, 0x4_0000]);
    }

    #[test]
    fn pl011_is_spi1_clocked_by_apb_pclk() {
        let blob = build_guest_dtb(&spec(1)).unwrap();

        let fdt = Fdt::new(&blob).unwrap();
        let uart = "/pl011@9000000";
        assert_eq!(
            strings(prop(&fdt, uart, "compatible")),
            ["arm,pl011", "arm,primecell"]
        );
        assert_eq!(cells(prop(&fdt, uart, "reg")), [0, 0x0900_0000, 0, 0x1000]);
        assert_eq!(cells(prop(&fdt, uart, "interrupts")), [0, 1, 4]);
        let clk = cells(prop(&fdt, "/apb-pclk", "phandle"))[0];
        assert_eq!(cells(prop(&fdt, uart, "clocks")), [clk, clk]);
        assert_eq!(
            strings(prop(&fdt, uart, "clock-names")),
            ["uartclk", "apb_pclk"]
        );
    }

    #[test]
    fn apb_pclk_is_fixed_24mhz_clock() {
        let blob = build_guest_dtb(&spec(1)).unwrap();

        let fdt = Fdt::new(&blob).unwrap();
        let clk = "/apb-pclk";
        assert_eq!(strings(prop(&fdt, clk, "compatible")), ["fixed-clock"]);
        assert_eq!(cells(prop(&fdt, clk, "#clock-cells")), [0]);
        assert_eq!(cells(prop(&fdt, clk, "clock-frequency")), [24_000_000]);
        assert_eq!(strings(prop(&fdt, clk, "clock-output-names")), ["clk24mhz"]);
        assert_eq!(cells(prop(&fdt, clk, "phandle")), [GUEST_APB_PCLK_PHANDLE]);
    }

    #[test]
    fn extra_nodes_are_written_under_root_with_children() {
        let child = [ExtraNode {
            name: "dev@0",
            props: &[("reg", PropValue::U32(0))],
            children: &[],
        }];
        let extra = [ExtraNode {
            name: "pcie@10000000",
            props: &[
                ("compatible", PropValue::String("pci-host-ecam-generic")),
                ("dma-coherent", PropValue::Empty),
                ("bus-range", PropValue::Cells(&[0, 0xff])),
                ("phandle", PropValue::U32(GUEST_FIRST_FREE_PHANDLE)),
            ],
            children: &child,
        }];
        let spec = GuestDtbSpec {
            extra: &extra,
            ..spec(1)
        };

        let blob = build_guest_dtb(&spec).unwrap();

        let fdt = Fdt::new(&blob).unwrap();
        assert_eq!(
            strings(prop(&fdt, "/pcie@10000000", "compatible")),
            ["pci-host-ecam-generic"]
        );
        assert_eq!(cells(prop(&fdt, "/pcie@10000000", "bus-range")), [0, 0xff]);
        assert_eq!(cells(prop(&fdt, "/pcie@10000000/dev@0", "reg")), [0]);
    }

    #[test]
    fn extra_node_claiming_gic_phandle_is_rejected() {
        let extra = [ExtraNode {
            name: "x",
            props: &[("phandle", PropValue::U32(GUEST_GIC_PHANDLE))],
            children: &[],
        }];
        let spec = GuestDtbSpec {
            extra: &extra,
            ..spec(1)
        };

        assert_eq!(
            build_guest_dtb(&spec),
            Err(DtbError::ReservedPhandle(GUEST_GIC_PHANDLE))
        );
    }

    #[test]
    fn extra_node_claiming_clock_phandle_as_cells_is_rejected() {
        let extra = [ExtraNode {
            name: "x",
            props: &[("phandle", PropValue::Cells(&[GUEST_APB_PCLK_PHANDLE]))],
            children: &[],
        }];
        let spec = GuestDtbSpec {
            extra: &extra,
            ..spec(1)
        };

        assert_eq!(
            build_guest_dtb(&spec),
            Err(DtbError::ReservedPhandle(GUEST_APB_PCLK_PHANDLE))
        );
    }

    #[test]
    fn extra_node_shadowing_the_console_is_rejected() {
        let extra = [ExtraNode {
            name: "pl011@9000000",
            props: &[],
            children: &[],
        }];
        let spec = GuestDtbSpec {
            extra: &extra,
            ..spec(1)
        };

        assert_eq!(
            build_guest_dtb(&spec),
            Err(DtbError::DuplicateNode("pl011@9000000".into()))
        );
    }

    #[test]
    fn zero_vcpus_is_rejected() {
        assert_eq!(build_guest_dtb(&spec(0)), Err(DtbError::NoVcpus));
    }

    #[test]
    fn seventeen_vcpus_exceed_one_sgi_target_list() {
        assert_eq!(
            build_guest_dtb(&spec(17)),
            Err(DtbError::TooManyVcpus { count: 17, max: 16 })
        );
    }

    #[test]
    fn initrd_ending_past_ram_is_rejected() {
        let spec = GuestDtbSpec {
            initrd: Some((0x5f00_0000, 0x6000_1000)),
            ..spec(1)
        };

        assert_eq!(build_guest_dtb(&spec), Err(DtbError::InitrdOutsideRam));
    }

    #[test]
    fn bootargs_with_nul_is_rejected() {
        let spec = GuestDtbSpec {
            bootargs: "a\0b",
            ..spec(1)
        };

        assert_eq!(build_guest_dtb(&spec), Err(DtbError::NulInString));
    }

    #[test]
    fn guest_dtb_decompiles_with_dtc_when_available() {
        let devices = [virtio(&[("dma-coherent", b"")], &VIRTIO_SPIS)];
        let spec = GuestDtbSpec {
            pmu: true,
            devices: &devices,
            ..spec(2)
        };
        let blob = build_guest_dtb(&spec).unwrap();
        let Some(dts) = crate::dtb::writer::tests::dtc_decompile(&blob) else {
            return;
        };

        std::println!("{dts}");
        assert!(dts.contains("pl011@9000000 {"), "{dts}");
        assert!(dts.contains("pmu {"), "{dts}");
        assert!(dts.contains("virtio_mmio@a000000 {"), "{dts}");
    }
}
