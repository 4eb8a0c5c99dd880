//! Reads the DTB firmware hands the hypervisor (x0 at entry): memory, CPUs,
//! GIC frames, timer PPIs, console UART, PSCI conduit, PCIe host bridge
//! (with its `iommu-map` and its `msi-map`/`msi-parent`: which SMMU and
//! which ITS each requester ID reaches) and every device node with MMIO (an SMMUv3's errata from its quirk
//! properties, `SmmuModel`); turns that into the `HostResources` the
//! plan's isolation check runs against; and finds the console UART alone
//! (`early_uart`) when the full parse fails, so the error can be printed.
//!
//! The blob is read by our own reader, not the `fdt` crate: one pass over
//! the structure block (`Tree::index`) checks its structure as it goes (a
//! bad DTB must stop boot with an error, never a panic at EL2) and records
//! every node (name, parent, first child, next sibling, phandle) and every
//! property (name bytes, value) in two flat tables. Everything after that
//! is a lookup in those tables: a property is found by comparing name bytes
//! among its own node's properties, a phandle by a scan of the node table,
//! and nothing walks the blob again. (Through `fdt` 0.1, every lookup
//! re-parsed the node's properties, each name through `from_utf8`: about
//! 1.1M instructions of a QEMU virt boot, against about 0.05M now.)

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::ops::Range;

use pinfold_config::isolation::{DeviceRegion, HostResources};

use super::DtbError;

mod gicv5;
#[cfg(test)]
pub(crate) use gicv5::tests::gicv5_host_dtb;
pub use gicv5::{Gicv5Info, Gicv5Irs};

/// Everything the hypervisor needs to know about the machine it runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostInfo {
    /// (base, size) of every enabled `device_type = "memory"` region.
    pub memory: Vec<(u64, u64)>,
    /// (base, size): /memreserve/ entries, then static /reserved-memory
    /// regions (those with a `reg`; dynamic `size`-only pools are the OS's).
    pub reserved: Vec<(u64, u64)>,
    /// MPIDR affinity (the `reg` of each /cpus/cpu node) in /cpus order.
    pub cpus: Vec<u64>,
    pub gic: GicInfo,
    pub timer: Option<TimerPpis>,
    pub uart: Option<UartInfo>,
    pub psci: Option<PsciInfo>,
    pub pcie: Option<PcieInfo>,
    /// /chosen/rng-seed: entropy firmware passes on (QEMU fills 32 bytes).
    pub rng_seed: Option<Vec<u8>>,
    /// /chosen/kaslr-seed.
    pub kaslr_seed: Option<u64>,
    /// (base, size) from /chosen linux,initrd-start and linux,initrd-end:
    /// what the boot loader loaded beside the image (U-Boot `booti`'s and
    /// pxelinux's initrd, QEMU `-initrd`, GRUB's `initrd`), which for
    /// Pinfold is the boot bundle.
    pub initrd: Option<(u64, u64)>,
    /// The root `model` string.
    pub model: Option<String>,
    /// Every node with a `reg` that translates to CPU physical addresses,
    /// except memory, /cpus and /reserved-memory (and their children), in
    /// document order, enabled or not.
    pub devices: Vec<HostDevice>,
    /// The NUMA nodes of the CPUs and ITSes (DT `numa-node-id`, ACPI SRAT).
    pub numa: NumaInfo,
}

/// NUMA proximity of the CPUs and ITSes, for choosing each CPU's ITS
/// (`vgic::its_choice`). Both lists are empty when the host description
/// names no node at all; otherwise `cpus[i]` is the node of `HostInfo::cpus[i]`
/// and `its[j]` that of `GicInfo::its[j]` (None: not described).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NumaInfo {
    pub cpus: Vec<Option<u32>>,
    pub its: Vec<Option<u32>>,
}

/// A host DT node with MMIO: what a guest DTB generator needs to describe a
/// passed-through device, and what the isolation check calls a device
/// region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostDevice {
    /// Absolute path, e.g. `/pl061@9030000`.
    pub path: String,
    /// The `compatible` strings, in order.
    pub compatible: Vec<String>,
    /// `reg` as CPU physical (base, size) pairs.
    pub regs: Vec<(u64, u64)>,
    /// SPI INTIDs of its `interrupts`, when they go to the primary GIC
    /// (empty otherwise).
    pub spis: Vec<u32>,
    /// `status` is absent, "okay" or "ok".
    pub enabled: bool,
    /// For an `arm,smmu-v3`: which implementation, for the errata the SMMU
    /// driver works around; `Generic` for every other device.
    pub smmu_model: SmmuModel,
}

/// An SMMUv3's implementation, as far as its errata matter: the IORT
/// SMMUv3 node's Model field (IORT 3.1.1.5), or on the DT path the
/// binding's quirk properties (Linux bindings/iommu/arm,smmu-v3.yaml).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SmmuModel {
    /// Model 0 (or a value this IORT revision does not define).
    #[default]
    Generic,
    /// Model 1, HiSilicon Hi161x (DT `hisilicon,broken-prefetch-cmd`):
    /// CMD_PREFETCH_CONFIG must not be issued. `smmu` never issues it on
    /// any model.
    HisiliconHi161x,
    /// Model 2, Cavium CN99xx (DT `cavium,cn9900-broken-page1-regspace`):
    /// no register page 1; its registers (EVENTQ_PROD/CONS, the PRI
    /// queue's) are at the same offsets in page 0.
    CaviumCn99xx,
}

impl SmmuModel {
    /// The IORT SMMUv3 node's Model value.
    pub fn from_iort(model: u32) -> SmmuModel {
        match model {
            1 => SmmuModel::HisiliconHi161x,
            2 => SmmuModel::CaviumCn99xx,
            _ => SmmuModel::Generic,
        }
    }

    /// Page 1's registers live in page 0 (Linux's
    /// ARM_SMMU_OPT_PAGE0_REGS_ONLY).
    pub fn page0_regs_only(self) -> bool {
        self == SmmuModel::CaviumCn99xx
    }
}

impl HostInfo {
    /// The enabled SMMUv3 nodes (`arm,smmu-v3`).
    pub fn smmus_v3(&self) -> impl Iterator<Item = &HostDevice> {
        self.devices
            .iter()
            .filter(|d| d.enabled && d.compatible.iter().any(|c| c == "arm,smmu-v3"))
    }

    /// The device node at `path`; a component without a unit address
    /// matches the first node of that base name (devicetree spec 2.2.3).
    pub fn device(&self, path: &str) -> Option<&HostDevice> {
        self.devices
            .iter()
            .find(|d| d.path == path)
            .or_else(|| self.devices.iter().find(|d| path_matches(&d.path, path)))
    }
}

fn path_matches(node: &str, wanted: &str) -> bool {
    let mut node = node.split('/').filter(|c| !c.is_empty());
    let mut wanted = wanted.split('/').filter(|c| !c.is_empty());
    loop {
        match (node.next(), wanted.next()) {
            (None, None) => return true,
            (Some(n), Some(w)) => {
                let same = n == w || (!w.contains('@') && n.split('@').next() == Some(w));
                if !same {
                    return false;
                }
            }
            _ => return false,
        }
    }
}

/// The interrupt controller named by the root `interrupt-parent`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GicInfo {
    /// Architecture version as far as the DT tells: 3 for "arm,gic-v3".
    /// GICv4/v4.1 share that binding; the driver confirms the revision from
    /// GICD_PIDR2.ArchRev and GICD_TYPER at run time.
    pub version: u8,
    /// GICD frame (base, size).
    pub dist: (u64, u64),
    /// One (base, size) per redistributor region.
    pub redist_regions: Vec<(u64, u64)>,
    /// `redistributor-stride`, when redistributors are padded.
    pub redist_stride: Option<u64>,
    /// INTID of the virtual CPU interface maintenance interrupt.
    pub maintenance_intid: Option<u32>,
    /// (base, size) of each ITS (an enabled "arm,gic-v3-its" child).
    pub its: Vec<(u64, u64)>,
    /// What the GIC is and offers (`gichost`): from the description when
    /// parsed, refined by the ID registers the platform reads at boot.
    pub found: crate::gichost::GicFound,
    /// A GICv5 host's IRSes, their CPUs and IAFFIDs (`version` 5; the
    /// GICv3 fields above are then empty). None on a GICv3/v4 host.
    pub v5: Option<Gicv5Info>,
}

impl GicInfo {
    /// A GICv3 (or v4) as a host description gives it; `found` from the
    /// description alone until the platform reads the ID registers.
    pub fn described(
        dist: (u64, u64),
        redist_regions: Vec<(u64, u64)>,
        redist_stride: Option<u64>,
        maintenance_intid: Option<u32>,
        its: Vec<(u64, u64)>,
    ) -> GicInfo {
        let mut gic = GicInfo {
            version: 3,
            dist,
            redist_regions,
            redist_stride,
            maintenance_intid,
            its,
            found: crate::gichost::GicFound::default(),
            v5: None,
        };
        gic.found = crate::gichost::GicFound::from_description(&gic);
        gic
    }

    /// A GICv5 as its description gives it: no distributor or
    /// redistributors, the IRSes (their ITSes counted in `its`), the
    /// maintenance PPI.
    pub fn gicv5(info: Gicv5Info) -> GicInfo {
        let mut gic = GicInfo {
            version: 5,
            dist: (0, 0),
            redist_regions: Vec::new(),
            redist_stride: None,
            maintenance_intid: info.maintenance_ppi,
            its: info
                .irs
                .iter()
                .flat_map(|i| i.its.iter().copied())
                .collect(),
            found: crate::gichost::GicFound::default(),
            v5: None,
        };
        gic.v5 = Some(info);
        gic.found = crate::gichost::GicFound::from_description(&gic);
        gic
    }
}

/// Architected timer interrupts as the core's INTIDs (a GICv3 PPI n is
/// INTID 16 + n, a GICv5 PPI n is n). From ACPI, 0 is a timer the GTDT
/// does not provide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimerPpis {
    pub sec_phys: u32,
    pub phys: u32,
    pub virt: u32,
    pub hyp: u32,
}

/// The PL011 the hypervisor logs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UartInfo {
    pub base: u64,
    pub size: u64,
    /// None when the UART has no interrupt or it is not routed to the GIC.
    pub intid: Option<u32>,
}

/// How to call firmware's PSCI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conduit {
    Smc,
    Hvc,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PsciInfo {
    pub conduit: Conduit,
    /// Function ID of CPU_ON (fixed from PSCI 0.2 on; a property for 0.1).
    pub cpu_on_fid: u32,
}

/// Address space of a PCI `ranges` entry (phys.hi bits 25:24, IEEE 1275 PCI
/// binding 2.2.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PciSpace {
    Config,
    Io,
    Mem32,
    Mem64,
}

/// One window of the host bridge: PCI bus addresses -> CPU addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PciRange {
    pub space: PciSpace,
    pub prefetchable: bool,
    pub pci_addr: u64,
    pub cpu_addr: u64,
    pub size: u64,
}

/// One `interrupt-map` row: a device/pin (before masking) -> a GIC SPI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PciIntxMap {
    /// The child unit address (phys.hi, phys.mid, phys.lo); phys.hi carries
    /// the device number in bits 15:11.
    pub child_addr: [u32; 3],
    /// INTA..INTD = 1..4.
    pub pin: u32,
    pub intid: u32,
    /// The GIC specifier's flags cell (4 = level, active high).
    pub flags: u32,
}

/// A generic ECAM PCIe host bridge ("pci-host-ecam-generic").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PcieInfo {
    pub ecam: (u64, u64),
    pub bus_range: (u32, u32),
    pub ranges: Vec<PciRange>,
    pub interrupt_map: Vec<PciIntxMap>,
    pub interrupt_map_mask: [u32; 4],
    pub node_path: String,
    /// `iommu-map` (bindings/pci/pci-iommu.txt): which SMMU each requester
    /// ID reaches and as which StreamID; empty when DMA is not translated.
    pub iommu_map: Vec<PciIommuMap>,
    /// `msi-map` / `msi-parent` (bindings/pci/pci-msi.txt), or the ACPI
    /// IORT's root complex mappings into ITS groups: which ITS each
    /// requester ID's MSIs reach and with which DeviceID. Empty when the
    /// description names none (every requester ID then goes to the first
    /// ITS as its own DeviceID, `its::MsiRouting`).
    pub msi_map: Vec<PciMsiMap>,
}

/// One `msi-map` entry: `len` requester IDs from `rid_base` reach the
/// ITS whose first `reg` is at `its_base` as DeviceIDs from
/// `device_base`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PciMsiMap {
    pub rid_base: u32,
    pub its_base: u64,
    pub device_base: u32,
    pub len: u32,
}

impl PciMsiMap {
    /// The DeviceID of requester ID `rid`, if this entry maps it (and
    /// the DeviceID fits 32 bits: an IORT mapping is not checked for it).
    pub fn device_id(&self, rid: u32) -> Option<u32> {
        let off = rid.checked_sub(self.rid_base).filter(|&o| o < self.len)?;
        self.device_base.checked_add(off)
    }

    fn overlaps(&self, rid_base: u32, len: u32) -> bool {
        let end = |b: u32, l: u32| u64::from(b) + u64::from(l);
        u64::from(rid_base) < end(self.rid_base, self.len)
            && u64::from(self.rid_base) < end(rid_base, len)
    }
}

/// One `iommu-map` entry: `len` requester IDs from `rid_base` reach the
/// IOMMU whose first `reg` is at `iommu_base` as StreamIDs from
/// `sid_base`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PciIommuMap {
    pub rid_base: u32,
    pub iommu_base: u64,
    pub sid_base: u32,
    pub len: u32,
}

/// PSCI_CPU_ON with the SMC64 calling convention (PSCI, ARM DEN 0022, 5.1.4).
const PSCI_CPU_ON_64: u32 = 0xC400_0003;

/// Parses the firmware's DTB.
pub fn parse_host_dtb(blob: &[u8]) -> Result<HostInfo, DtbError> {
    let tree = Tree::index(blob)?;
    // A GICv5 primary controller: its IRSes instead of GICv3 frames; every
    // interrupt specifier below is then read in the GICv5 form
    // (`Tree::gic_interrupts`), into the core's GICv3-style numbers.
    let v5 = parse_gicv5_at(&tree)?;
    let gic = match &v5 {
        Some(_) => tree
            .primary_gic_any()
            .ok_or(DtbError::MissingNode("interrupt-controller"))?,
        None => tree.primary_gic()?,
    };
    let chosen = tree.find_path("/chosen");

    let host = HostInfo {
        memory: parse_memory(&tree)?,
        reserved: parse_reserved(&tree)?,
        cpus: parse_cpus(&tree)?,
        gic: match v5 {
            Some(info) => GicInfo::gicv5(info),
            None => parse_gic(&tree, gic)?,
        },
        timer: parse_timer(&tree, gic)?,
        uart: parse_uart(&tree, gic, chosen)?,
        psci: parse_psci(&tree)?,
        pcie: parse_pcie(&tree, gic)?,
        rng_seed: chosen
            .and_then(|c| tree.prop(c, "rng-seed"))
            .map(<[u8]>::to_vec),
        kaslr_seed: match chosen {
            Some(c) => tree.u64_prop(c, "kaslr-seed")?,
            None => None,
        },
        initrd: match chosen {
            Some(c) => parse_initrd(&tree, c)?,
            None => None,
        },
        model: tree.str_prop(0, "model").map(ToString::to_string),
        devices: parse_devices(&tree, gic),
        numa: parse_numa(&tree, gic)?,
    };
    if let Some(v5) = &host.gic.v5 {
        check_gicv5(&host, v5)?;
    }
    Ok(host)
}

/// A GICv5 host boots only with what the core needs, as far as the
/// description tells (`vgic5::check_described`: an IRS, the timer node's
/// PPIs 26, 27 and 30), and with an IAFFID for every CPU.
fn check_gicv5(host: &HostInfo, v5: &Gicv5Info) -> Result<(), DtbError> {
    crate::vgic5::check_described(&gicv5_described(v5, host.timer.as_ref()))
        .map_err(DtbError::Gicv5Lacks)?;
    for &mpidr in &host.cpus {
        if !v5.cpus().any(|(m, _)| m == mpidr) {
            return Err(DtbError::Gicv5CpuWithoutIaffid { mpidr });
        }
    }
    Ok(())
}

/// What a GICv5 host's description tells `vgic5::check_described`: an
/// IRS or not, and the PPIs its timer interrupts are (core numbers; one
/// the core has no PPI number for is left out, so the check names it).
/// The DT path and the ACPI path (GTDT) both refuse a host failing it.
pub(crate) fn gicv5_described(
    v5: &Gicv5Info,
    timer: Option<&TimerPpis>,
) -> crate::vgic5::HostGicv5 {
    let ppis: Vec<u32> = timer
        .map(|t| [t.sec_phys, t.phys, t.virt, t.hyp])
        .into_iter()
        .flatten()
        .filter(|p| (16..32).contains(p))
        .collect();
    crate::vgic5::HostGicv5::described(!v5.irs.is_empty(), crate::vgic5::PpiSet::of(&ppis))
}

/// /chosen's initrd range. Both properties or neither; the end is
/// exclusive (as Linux reads it) and not below the start.
fn parse_initrd(tree: &Tree, chosen: usize) -> Result<Option<(u64, u64)>, DtbError> {
    let start = tree.u64_prop(chosen, "linux,initrd-start")?;
    let end = tree.u64_prop(chosen, "linux,initrd-end")?;
    match (start, end) {
        (None, None) => Ok(None),
        (Some(start), Some(end)) if end >= start => Ok(Some((start, end - start))),
        (Some(_), Some(_)) => Err(tree.bad(chosen, "linux,initrd-end")),
        (Some(_), None) => Err(tree.bad(chosen, "linux,initrd-end")),
        (None, Some(_)) => Err(tree.bad(chosen, "linux,initrd-start")),
    }
}

/// Device nodes with MMIO. A node whose `reg` is malformed or not
/// memory-mapped (a bus without `ranges`, an I2C address) is not a device
/// region; it is left out rather than failing boot, which only makes the
/// isolation check stricter.
fn parse_devices(tree: &Tree, gic: usize) -> Vec<HostDevice> {
    let excluded = ["/cpus", "/reserved-memory"].map(|p| tree.find_path(p));
    let under_excluded = |mut i: usize| loop {
        if excluded.contains(&Some(i)) {
            return true;
        }
        match tree.parent(i) {
            Some(up) => i = up,
            None => return false,
        }
    };
    (1..tree.nodes.len())
        .filter(|&i| tree.prop(i, Known::Reg).is_some())
        .filter(|&i| tree.str_prop(i, Known::DeviceType) != Some("memory") && !under_excluded(i))
        .filter_map(|i| {
            let regs = tree.reg(i).ok()?;
            let spis = tree
                .gic_interrupts(i, gic)
                .unwrap_or_default()
                .into_iter()
                .map(|(intid, _)| intid)
                .filter(|&intid| (32..1020).contains(&intid) || intid >= 4096)
                .collect();
            let smmu_model = if tree
                .named_prop(i, "cavium,cn9900-broken-page1-regspace")
                .is_some()
            {
                SmmuModel::CaviumCn99xx
            } else if tree
                .named_prop(i, "hisilicon,broken-prefetch-cmd")
                .is_some()
            {
                SmmuModel::HisiliconHi161x
            } else {
                SmmuModel::Generic
            };
            Some(HostDevice {
                path: tree.path(i),
                compatible: tree.strings_prop(i, Known::Compatible),
                regs,
                spis,
                enabled: tree.enabled(i),
                smmu_model,
            })
        })
        .collect()
}

/// The host's GICv5 (an "arm,gic-v5" primary interrupt controller), or
/// None when the primary GIC is something else.
pub fn parse_host_gicv5(blob: &[u8]) -> Result<Option<Gicv5Info>, DtbError> {
    parse_gicv5_at(&Tree::index(blob)?)
}

fn parse_gicv5_at(tree: &Tree) -> Result<Option<Gicv5Info>, DtbError> {
    match tree.primary_gic_any() {
        Some(gic) if tree.is_compatible(gic, &["arm,gic-v5"]) => gicv5::parse(tree, gic).map(Some),
        _ => Ok(None),
    }
}

/// GIC compatibles whose frames belong to the hypervisor.
const GIC_FRAME_COMPATIBLE: [&str; 2] = ["arm,gic-v3", "arm,gic-v3-its"];

/// What the plan's isolation check (`pinfold_config::isolation`) needs to
/// know about this host. `hypervisor` lists the hypervisor's own ranges
/// (its image and payload, heap, the host DTB); the console UART and the
/// SMMUv3 frames are added here. The GIC frames are the distributor, the redistributor regions, the
/// ITSes and every other `reg` window of the GIC node (GICC/GICH/GICV).
pub fn host_resources(info: &HostInfo, hypervisor: &[(u64, u64)]) -> HostResources {
    let mut gic = alloc::vec![info.gic.dist];
    gic.extend_from_slice(&info.gic.redist_regions);
    gic.extend_from_slice(&info.gic.its);
    if let Some(v5) = &info.gic.v5 {
        // GICv5: no distributor; the IRS config frames are the GIC's.
        gic.retain(|&(_, size)| size != 0);
        gic.extend(v5.irs.iter().map(|i| i.config));
        // A translate frame is an ITS's too: a guest mapping it could
        // write any DeviceID's events.
        gic.extend(v5.its_translate.iter().flatten());
    }
    for device in &info.devices {
        if device
            .compatible
            .iter()
            .any(|c| GIC_FRAME_COMPATIBLE.contains(&c.as_str()))
        {
            gic.extend(
                device
                    .regs
                    .iter()
                    .filter(|r| !gic.contains(r))
                    .copied()
                    .collect::<Vec<_>>(),
            );
        }
    }
    let mut hypervisor = hypervisor.to_vec();
    hypervisor.extend(info.uart.map(|u| (u.base, u.size)));
    // The SMMU's frames: a partition that could program it could point any
    // stream anywhere (hv `smmu`).
    hypervisor.extend(info.smmus_v3().flat_map(|d| d.regs.iter().copied()));
    let pcie = info
        .pcie
        .iter()
        .flat_map(|p| core::iter::once(p.ecam).chain(p.ranges.iter().map(|r| (r.cpu_addr, r.size))))
        .collect();
    HostResources {
        ram: info.memory.clone(),
        reserved: info.reserved.clone(),
        devices: info
            .devices
            .iter()
            .flat_map(|d| {
                d.regs.iter().map(|&(base, size)| DeviceRegion {
                    node: d.path.clone(),
                    base,
                    size,
                })
            })
            .collect(),
        gic,
        hypervisor,
        pcie,
    }
}

/// The console UART, found with as little of the DTB as possible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EarlyUart {
    pub base: u64,
    pub size: u64,
}

/// PL011 register block size used when only bootargs name the UART.
const PL011_SIZE: u64 = 0x1000;

/// Finds the console PL011 even when `parse_host_dtb` rejects the blob (no
/// GIC it drives, a broken timer node...), so the platform can print why:
/// `/chosen/stdout-path` if it names a PL011, else an
/// `earlycon=pl011,[mmio32,]ADDR` in `/chosen/bootargs`, else the first
/// enabled PL011 node. None when the blob's structure itself is broken or
/// no PL011 is described.
pub fn early_uart(blob: &[u8]) -> Option<EarlyUart> {
    let tree = Tree::index(blob).ok()?;
    let chosen = tree.find_path("/chosen");
    let node_uart = |i: usize| {
        let &(base, size) = tree.reg(i).ok()?.first()?;
        Some(EarlyUart { base, size })
    };
    let from_stdout = chosen
        .and_then(|c| {
            tree.str_prop(c, "stdout-path")
                .or_else(|| tree.str_prop(c, "linux,stdout-path"))
        })
        .and_then(|path| tree.resolve_stdout(path))
        .filter(|&i| tree.is_compatible(i, &PL011_COMPATIBLE) && tree.enabled(i))
        .and_then(node_uart);
    let from_earlycon = || {
        let bootargs = tree.str_prop(chosen?, "bootargs")?;
        bootargs.split(' ').find_map(|arg| {
            let options = arg.strip_prefix("earlycon=pl011,")?;
            let addr = options
                .split(',')
                .find(|o| *o != "mmio32" && *o != "mmio")?;
            let base = match addr.strip_prefix("0x").or_else(|| addr.strip_prefix("0X")) {
                Some(hex) => u64::from_str_radix(hex, 16).ok()?,
                None => addr.parse().ok()?,
            };
            Some(EarlyUart {
                base,
                size: PL011_SIZE,
            })
        })
    };
    from_stdout
        .or_else(from_earlycon)
        .or_else(|| node_uart(tree.find_compatible(&PL011_COMPATIBLE)?))
}

/// `/chosen/linux,initrd-start` and `-end` as (start, length): where a boot
/// loader (Debian's GRUB 2.06 under UEFI, U-Boot) put the initrd it was
/// given. None when either is absent or the range is empty or inverted.
pub fn chosen_initrd(blob: &[u8]) -> Result<Option<(u64, u64)>, DtbError> {
    let tree = Tree::index(blob)?;
    let Some(chosen) = tree.find_path("/chosen") else {
        return Ok(None);
    };
    let start = tree.u64_prop(chosen, "linux,initrd-start")?;
    let end = tree.u64_prop(chosen, "linux,initrd-end")?;
    Ok(match (start, end) {
        (Some(start), Some(end)) if end > start => Some((start, end - start)),
        _ => None,
    })
}

/// Whether the DT describes the machine (a /cpus node and a memory node)
/// rather than only carrying /chosen, as the DT Debian's GRUB 2.06 makes
/// on an ACPI machine does.
pub fn describes_hardware(blob: &[u8]) -> bool {
    let Ok(tree) = Tree::index(blob) else {
        return false;
    };
    tree.find_path("/cpus").is_some()
        && (1..tree.nodes.len()).any(|i| tree.str_prop(i, Known::DeviceType) == Some("memory"))
}

fn parse_memory(tree: &Tree) -> Result<Vec<(u64, u64)>, DtbError> {
    let mut memory = Vec::new();
    for i in tree.children(0) {
        if tree.str_prop(i, Known::DeviceType) == Some("memory") && tree.enabled(i) {
            memory.extend(tree.reg(i)?.into_iter().filter(|&(_, size)| size != 0));
        }
    }
    if memory.is_empty() {
        return Err(DtbError::MissingNode("memory"));
    }
    Ok(memory)
}

fn parse_reserved(tree: &Tree) -> Result<Vec<(u64, u64)>, DtbError> {
    let mut reserved = tree.reservations.clone();
    if let Some(pool) = tree.find_path("/reserved-memory") {
        for i in tree.children(pool) {
            if tree.enabled(i) && tree.prop(i, Known::Reg).is_some() {
                reserved.extend(tree.reg(i)?);
            }
        }
    }
    Ok(reserved)
}

/// The /cpus children that are CPUs (not cpu-map and friends).
fn cpu_nodes<'t>(tree: &'t Tree<'_>) -> Result<impl Iterator<Item = usize> + 't, DtbError> {
    let cpus = tree
        .find_path("/cpus")
        .ok_or(DtbError::MissingNode("/cpus"))?;
    Ok(tree
        .children(cpus)
        .filter(|&i| tree.str_prop(i, Known::DeviceType) == Some("cpu")))
}

/// The GIC's enabled ITS children with a `reg`, in `GicInfo::its` order.
fn its_nodes<'t>(tree: &'t Tree<'_>, gic: usize) -> impl Iterator<Item = (usize, (u64, u64))> + 't {
    tree.children(gic)
        .filter(|&i| tree.is_compatible(i, &["arm,gic-v3-its"]) && tree.enabled(i))
        .filter_map(|i| Some((i, tree.reg(i).ok()?.first().copied()?)))
}

/// `numa-node-id` (devicetree numa binding) of each CPU and ITS.
fn parse_numa(tree: &Tree, gic: usize) -> Result<NumaInfo, DtbError> {
    let node = |i: usize| tree.u32_prop(i, "numa-node-id");
    let cpus = cpu_nodes(tree)?.map(node).collect::<Result<Vec<_>, _>>()?;
    let its = its_nodes(tree, gic)
        .map(|(i, _)| node(i))
        .collect::<Result<Vec<_>, _>>()?;
    if cpus.iter().chain(&its).all(Option::is_none) {
        return Ok(NumaInfo::default());
    }
    Ok(NumaInfo { cpus, its })
}

fn parse_cpus(tree: &Tree) -> Result<Vec<u64>, DtbError> {
    let cpus = tree
        .find_path("/cpus")
        .ok_or(DtbError::MissingNode("/cpus"))?;
    let address_cells = tree.address_cells(cpus)?;
    let mut mpidrs = Vec::new();
    for i in cpu_nodes(tree)? {
        let reg = tree
            .cells_prop(i, Known::Reg)?
            .ok_or_else(|| tree.missing(i, "reg"))?;
        // A cpu reg is one address of #address-cells (1 or 2), no size.
        if !(1..=2).contains(&address_cells) || reg.len() < address_cells {
            return Err(tree.bad(i, "reg"));
        }
        mpidrs.push(reg.read(0, address_cells));
    }
    if mpidrs.is_empty() {
        return Err(DtbError::MissingNode("/cpus/cpu"));
    }
    Ok(mpidrs)
}

fn parse_gic(tree: &Tree, gic: usize) -> Result<GicInfo, DtbError> {
    let reg = tree.reg(gic)?;
    let regions = tree.u32_prop(gic, "#redistributor-regions")?.unwrap_or(1) as usize;
    // reg = GICD, then the redistributor regions, then optional GICC/GICH/GICV.
    if regions == 0 || reg.len() < 1 + regions {
        return Err(tree.bad(gic, "reg"));
    }
    let maintenance_intid = tree
        .gic_interrupts(gic, gic)?
        .first()
        .map(|&(intid, _)| intid);
    // The binding's stride is a multiple of 64 KiB; one below a frame pair
    // (RD_base + SGI_base, 128 KiB) would step into the frame it left, and
    // 0 would never step: both are refused rather than walked.
    let stride = tree.u64_prop(gic, "redistributor-stride")?;
    if stride.is_some_and(|s| s < 0x2_0000 || s % 0x1_0000 != 0) {
        return Err(tree.bad(gic, "redistributor-stride"));
    }
    Ok(GicInfo::described(
        reg[0],
        reg[1..=regions].to_vec(),
        stride,
        maintenance_intid,
        its_nodes(tree, gic).map(|(_, reg)| reg).collect(),
    ))
}

fn parse_timer(tree: &Tree, gic: usize) -> Result<Option<TimerPpis>, DtbError> {
    let Some(timer) = tree.find_compatible(&["arm,armv8-timer", "arm,armv7-timer"]) else {
        return Ok(None);
    };
    // Binding order: secure phys, non-secure phys, virtual, hyp (then the
    // optional hyp-virtual, which we do not use).
    let irqs = tree.gic_interrupts(timer, gic)?;
    if irqs.len() < 4 {
        return Err(tree.bad(timer, "interrupts"));
    }
    Ok(Some(TimerPpis {
        sec_phys: irqs[0].0,
        phys: irqs[1].0,
        virt: irqs[2].0,
        hyp: irqs[3].0,
    }))
}

/// PL011s and the SBSA generic UART (a PL011 subset) share one driver.
const PL011_COMPATIBLE: [&str; 2] = ["arm,pl011", "arm,sbsa-uart"];

fn parse_uart(
    tree: &Tree,
    gic: usize,
    chosen: Option<usize>,
) -> Result<Option<UartInfo>, DtbError> {
    let from_stdout = chosen
        .and_then(|c| {
            tree.str_prop(c, "stdout-path")
                .or_else(|| tree.str_prop(c, "linux,stdout-path"))
        })
        .and_then(|path| tree.resolve_stdout(path))
        .filter(|&i| tree.is_compatible(i, &PL011_COMPATIBLE) && tree.enabled(i));
    let Some(uart) = from_stdout.or_else(|| tree.find_compatible(&PL011_COMPATIBLE)) else {
        return Ok(None);
    };
    let &(base, size) = tree
        .reg(uart)?
        .first()
        .ok_or_else(|| tree.bad(uart, "reg"))?;
    // The console works polled; an oddly routed interrupt must not stop boot.
    let intid = tree
        .gic_interrupts(uart, gic)
        .ok()
        .and_then(|irqs| irqs.first().map(|&(id, _)| id));
    Ok(Some(UartInfo { base, size, intid }))
}

fn parse_psci(tree: &Tree) -> Result<Option<PsciInfo>, DtbError> {
    let Some(psci) = tree.find_compatible(&["arm,psci-1.0", "arm,psci-0.2", "arm,psci"]) else {
        return Ok(None);
    };
    let conduit = match tree.str_prop(psci, "method") {
        Some("smc") => Conduit::Smc,
        Some("hvc") => Conduit::Hvc,
        Some(_) => return Err(tree.bad(psci, "method")),
        None => return Err(tree.missing(psci, "method")),
    };
    let cpu_on_fid = if tree.is_compatible(psci, &["arm,psci-1.0", "arm,psci-0.2"]) {
        PSCI_CPU_ON_64
    } else {
        // PSCI 0.1 had no standard function IDs.
        tree.u32_prop(psci, "cpu_on")?
            .ok_or_else(|| tree.missing(psci, "cpu_on"))?
    };
    Ok(Some(PsciInfo {
        conduit,
        cpu_on_fid,
    }))
}

fn parse_pcie(tree: &Tree, gic: usize) -> Result<Option<PcieInfo>, DtbError> {
    let Some(pcie) = tree.find_compatible(&["pci-host-ecam-generic"]) else {
        return Ok(None);
    };
    let &ecam = tree
        .reg(pcie)?
        .first()
        .ok_or_else(|| tree.bad(pcie, "reg"))?;
    let bus_range = match tree.cells_prop(pcie, "bus-range")? {
        None => (0, 0xff),
        Some(c) if c.len() == 2 && c.get(0) <= c.get(1) => (c.get(0), c.get(1)),
        Some(_) => return Err(tree.bad(pcie, "bus-range")),
    };
    let interrupt_map_mask = match tree.cells_prop(pcie, "interrupt-map-mask")? {
        None => [u32::MAX; 4],
        Some(c) if c.len() == 4 => [c.get(0), c.get(1), c.get(2), c.get(3)],
        Some(_) => return Err(tree.bad(pcie, "interrupt-map-mask")),
    };
    Ok(Some(PcieInfo {
        ecam,
        bus_range,
        ranges: parse_pci_ranges(tree, pcie)?,
        interrupt_map: parse_interrupt_map(tree, pcie, gic)?,
        interrupt_map_mask,
        node_path: tree.path(pcie),
        iommu_map: parse_iommu_map(tree, pcie)?,
        msi_map: parse_msi_map(tree, pcie)?,
    }))
}

/// The ITS a host bridge's `msi-map` or `msi-parent` names by phandle:
/// an `arm,gic-v3-its` node's first `reg`, or (a GICv5 host) the
/// `arm,gic-v5-its` whose translate frame child it names (the binding's
/// `msi-controller`, whose `reg-names` is "ns-translate"): that ITS's
/// config frame, as `GicInfo::its` keeps it; with `#msi-cells` absent or
/// 1 (the DeviceID); anything else refused naming `prop`.
fn msi_its_base(
    tree: &Tree,
    pcie: usize,
    phandle: u32,
    prop: &'static str,
) -> Result<u64, DtbError> {
    let node = tree
        .by_phandle(phandle)
        .ok_or_else(|| tree.bad(pcie, prop))?;
    let v5_its = tree
        .parent(node)
        .filter(|&p| tree.is_compatible(p, &["arm,gic-v5-its"]))
        .filter(|_| {
            tree.strings_prop(node, "reg-names")
                .iter()
                .any(|n| n == "ns-translate")
        });
    if let Some(its) = v5_its {
        if !matches!(tree.u32_prop(node, "#msi-cells")?, None | Some(1)) {
            return Err(tree.bad(node, "#msi-cells"));
        }
        let &(base, _) = tree.reg(its)?.first().ok_or_else(|| tree.bad(its, "reg"))?;
        return Ok(base);
    }
    let its = Some(node)
        .filter(|&n| tree.is_compatible(n, &["arm,gic-v3-its"]))
        .ok_or_else(|| tree.bad(pcie, prop))?;
    if !matches!(tree.u32_prop(its, "#msi-cells")?, None | Some(1)) {
        return Err(tree.bad(its, "#msi-cells"));
    }
    let &(base, _) = tree.reg(its)?.first().ok_or_else(|| tree.bad(its, "reg"))?;
    Ok(base)
}

/// `msi-map = <rid-base &its device-base length>...` (each ITS with one
/// `#msi-cells`), or else `msi-parent = <&its>`: every requester ID to
/// that ITS as its own DeviceID. `msi-map-mask` other than 0xffff is
/// refused (it would fold requester IDs together), as is an entry whose
/// ranges overflow or overlap an earlier one's requester IDs.
fn parse_msi_map(tree: &Tree, pcie: usize) -> Result<Vec<PciMsiMap>, DtbError> {
    let Some(raw) = tree.cells_prop(pcie, "msi-map")? else {
        let Some(parent) = tree.cells_prop(pcie, "msi-parent")? else {
            return Ok(Vec::new());
        };
        if parent.len() != 1 {
            return Err(tree.bad(pcie, "msi-parent"));
        }
        return Ok(alloc::vec![PciMsiMap {
            rid_base: 0,
            its_base: msi_its_base(tree, pcie, parent.get(0), "msi-parent")?,
            device_base: 0,
            len: 0x1_0000,
        }]);
    };
    let bad = || tree.bad(pcie, "msi-map");
    match tree.cells_prop(pcie, "msi-map-mask")? {
        None => {}
        Some(m) if m.len() == 1 && m.get(0) == 0xffff => {}
        Some(_) => return Err(tree.bad(pcie, "msi-map-mask")),
    }
    if raw.len() % 4 != 0 {
        return Err(bad());
    }
    let mut map: Vec<PciMsiMap> = Vec::new();
    for e in raw.chunks(4) {
        let (rid_base, device_base, len) = (e.get(0), e.get(2), e.get(3));
        if len == 0
            || rid_base.checked_add(len - 1).is_none()
            || device_base.checked_add(len - 1).is_none()
            || map.iter().any(|m| m.overlaps(rid_base, len))
        {
            return Err(bad());
        }
        map.push(PciMsiMap {
            rid_base,
            its_base: msi_its_base(tree, pcie, e.get(1), "msi-map")?,
            device_base,
            len,
        });
    }
    Ok(map)
}

/// `iommu-map = <rid-base &iommu iommu-base length>...`, each IOMMU with
/// `#iommu-cells = <1>` (an SMMUv3's StreamID). `iommu-map-mask` is not
/// supported (refused: it would fold requester IDs together).
fn parse_iommu_map(tree: &Tree, pcie: usize) -> Result<Vec<PciIommuMap>, DtbError> {
    let Some(raw) = tree.cells_prop(pcie, "iommu-map")? else {
        return Ok(Vec::new());
    };
    let bad = || tree.bad(pcie, "iommu-map");
    if tree.prop(pcie, "iommu-map-mask").is_some() || raw.len() % 4 != 0 {
        return Err(bad());
    }
    raw.chunks(4)
        .map(|e| {
            let iommu = tree.by_phandle(e.get(1)).ok_or_else(bad)?;
            if tree.u32_prop(iommu, "#iommu-cells")? != Some(1) {
                return Err(tree.bad(iommu, "#iommu-cells"));
            }
            let &(iommu_base, _) = tree
                .reg(iommu)?
                .first()
                .ok_or_else(|| tree.bad(iommu, "reg"))?;
            let (rid_base, sid_base, len) = (e.get(0), e.get(2), e.get(3));
            if len == 0
                || rid_base.checked_add(len - 1).is_none()
                || sid_base.checked_add(len - 1).is_none()
            {
                return Err(bad());
            }
            Ok(PciIommuMap {
                rid_base,
                iommu_base,
                sid_base,
                len,
            })
        })
        .collect()
}

fn parse_pci_ranges(tree: &Tree, pcie: usize) -> Result<Vec<PciRange>, DtbError> {
    let bad = || tree.bad(pcie, "ranges");
    let bus = tree.parent(pcie).ok_or_else(bad)?;
    let (child_ac, parent_ac, size_c) = (
        tree.address_cells(pcie)?,
        tree.address_cells(bus)?,
        tree.size_cells(pcie)?,
    );
    if child_ac != 3 || !(1..=2).contains(&parent_ac) || !(1..=2).contains(&size_c) {
        return Err(bad());
    }
    let raw = tree.cells_prop(pcie, Known::Ranges)?.unwrap_or_default();
    let stride = child_ac + parent_ac + size_c;
    if raw.len() % stride != 0 {
        return Err(bad());
    }
    raw.chunks(stride)
        .map(|e| {
            let phys_hi = e.get(0);
            let space = match (phys_hi >> 24) & 0x3 {
                0 => PciSpace::Config,
                1 => PciSpace::Io,
                2 => PciSpace::Mem32,
                _ => PciSpace::Mem64,
            };
            Ok(PciRange {
                space,
                prefetchable: phys_hi & (1 << 30) != 0,
                pci_addr: e.read(1, 3),
                cpu_addr: tree.to_cpu(bus, e.read(3, 3 + parent_ac), pcie)?,
                size: e.read(3 + parent_ac, stride),
            })
        })
        .collect()
}

fn parse_interrupt_map(tree: &Tree, pcie: usize, gic: usize) -> Result<Vec<PciIntxMap>, DtbError> {
    let Some(raw) = tree.cells_prop(pcie, "interrupt-map")? else {
        return Ok(Vec::new()); // MSI-only bridge
    };
    let bad = || DtbError::BadInterrupt {
        node: tree.path(pcie),
    };
    if tree.address_cells(pcie)? != 3 || tree.u32_prop(pcie, Known::InterruptCells)? != Some(1) {
        return Err(bad());
    }
    let gic_phandle = tree.phandle(gic).ok_or_else(bad)?;
    // The parent unit address has the GIC's #address-cells, 0 if absent
    // (as Linux's of_irq_parse_raw reads it).
    let parent_ac = tree.u32_prop(gic, Known::AddressCells)?.unwrap_or(0) as usize;
    let parent_ic = tree.u32_prop(gic, Known::InterruptCells)?.unwrap_or(0) as usize;
    if parent_ic < 3 {
        return Err(bad());
    }
    let stride = 3 + 1 + 1 + parent_ac + parent_ic;
    if raw.len() % stride != 0 {
        return Err(bad());
    }
    raw.chunks(stride)
        .map(|e| {
            if e.get(4) != gic_phandle {
                return Err(bad());
            }
            let spec = 5 + parent_ac;
            let intid = gic_intid(e.get(spec), e.get(spec + 1)).ok_or_else(bad)?;
            Ok(PciIntxMap {
                child_addr: [e.get(0), e.get(1), e.get(2)],
                pin: e.get(3),
                intid,
                flags: e.get(spec + 2),
            })
        })
        .collect()
}

/// The GIC binding's (type, number) to an INTID: SPI, PPI, and the GICv3.1
/// extended SPI and PPI ranges (bindings/interrupt-controller/arm,gic-v3.yaml).
fn gic_intid(kind: u32, number: u32) -> Option<u32> {
    match (kind, number) {
        (0, 0..=987) => Some(32 + number),
        (1, 0..=15) => Some(16 + number),
        (2, 0..=1023) => Some(4096 + number),
        (3, 0..=127) => Some(1056 + number),
        _ => None,
    }
}

/// A GICv5 specifier's type and ID (binding arm,gic-v5.yaml: 1 = PPI, 3 =
/// SPI, the ID itself) as the core's GICv3-style INTID
/// (`vgic5::core_intid`: PPIs 16..31 keep their number, SPI n is 32 + n
/// below `vgic5::CORE_SPIS`; the ACPI parser numbers GICv5 GSIVs the
/// same way).
fn gicv5_intid(kind: u32, number: u32) -> Option<u32> {
    crate::vgic5::core_intid(kind, number)
}

/// The first string of a string (list) value: up to its NUL, UTF-8.
fn first_string(value: &[u8]) -> Option<&str> {
    let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
    core::str::from_utf8(&value[..end]).ok()
}

/// A property value read as big-endian 32-bit cells, without copying (the
/// length is a multiple of 4: `Tree::cells_prop` checks).
#[derive(Debug, Clone, Copy, Default)]
struct Cells<'a>(&'a [u8]);

impl<'a> Cells<'a> {
    fn len(self) -> usize {
        self.0.len() / 4
    }

    fn is_empty(self) -> bool {
        self.0.is_empty()
    }

    /// Cell `k`; 0 past the end (callers check `len` first).
    #[inline]
    fn get(self, k: usize) -> u32 {
        match self.0.get(k * 4..k * 4 + 4) {
            Some(&[a, b, c, d]) => u32::from_be_bytes([a, b, c, d]),
            _ => 0,
        }
    }

    /// Cells `from..to` as one number (callers pass at most two cells).
    #[inline]
    fn read(self, from: usize, to: usize) -> u64 {
        (from..to).fold(0, |acc, k| (acc << 32) | u64::from(self.get(k)))
    }

    /// Consecutive groups of `n` cells (n > 0; a short tail is dropped,
    /// callers check `len() % n` first).
    fn chunks(self, n: usize) -> impl Iterator<Item = Cells<'a>> {
        self.0.chunks_exact(n * 4).map(Cells)
    }
}

/// The properties read on many nodes (addressing, interrupts, identity):
/// the indexing pass files their values in the node, so looking one up is
/// a field read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Known {
    Reg,
    Compatible,
    Status,
    DeviceType,
    Interrupts,
    InterruptParent,
    InterruptCells,
    AddressCells,
    SizeCells,
    Ranges,
    Phandle,
    LinuxPhandle,
}

const KNOWN_COUNT: usize = 12;

impl Known {
    /// By `Known as usize`.
    const ALL: [Known; KNOWN_COUNT] = [
        Known::Reg,
        Known::Compatible,
        Known::Status,
        Known::DeviceType,
        Known::Interrupts,
        Known::InterruptParent,
        Known::InterruptCells,
        Known::AddressCells,
        Known::SizeCells,
        Known::Ranges,
        Known::Phandle,
        Known::LinuxPhandle,
    ];

    fn of(name: &[u8]) -> Option<Known> {
        Some(match name {
            b"reg" => Known::Reg,
            b"compatible" => Known::Compatible,
            b"status" => Known::Status,
            b"device_type" => Known::DeviceType,
            b"interrupts" => Known::Interrupts,
            b"interrupt-parent" => Known::InterruptParent,
            b"#interrupt-cells" => Known::InterruptCells,
            b"#address-cells" => Known::AddressCells,
            b"#size-cells" => Known::SizeCells,
            b"ranges" => Known::Ranges,
            b"phandle" => Known::Phandle,
            b"linux,phandle" => Known::LinuxPhandle,
            _ => return None,
        })
    }

    fn name(self) -> &'static str {
        match self {
            Known::Reg => "reg",
            Known::Compatible => "compatible",
            Known::Status => "status",
            Known::DeviceType => "device_type",
            Known::Interrupts => "interrupts",
            Known::InterruptParent => "interrupt-parent",
            Known::InterruptCells => "#interrupt-cells",
            Known::AddressCells => "#address-cells",
            Known::SizeCells => "#size-cells",
            Known::Ranges => "ranges",
            Known::Phandle => "phandle",
            Known::LinuxPhandle => "linux,phandle",
        }
    }
}

/// How a property is looked up: a `Known` one from its node's slot, any
/// other by its name (a byte compare among the node's own properties).
trait PropKey: Copy {
    fn find<'a>(self, tree: &Tree<'a>, node: usize) -> Option<&'a [u8]>;
    /// The name, for error messages.
    fn name(self) -> &'static str;
}

impl PropKey for Known {
    #[inline]
    fn find<'a>(self, tree: &Tree<'a>, node: usize) -> Option<&'a [u8]> {
        let slot = tree.nodes[node].known[self as usize];
        let prop = tree.props.get(slot.checked_sub(1)? as usize)?;
        Some(prop.value)
    }

    fn name(self) -> &'static str {
        Known::name(self)
    }
}

impl PropKey for &'static str {
    fn find<'a>(self, tree: &Tree<'a>, node: usize) -> Option<&'a [u8]> {
        tree.named_prop(node, self)
    }

    fn name(self) -> &'static str {
        self
    }
}

/// One property: its name (from the strings block, checked to be UTF-8
/// when the blob was indexed) and its value.
#[derive(Debug, Clone, Copy)]
struct Prop<'a> {
    name: &'a [u8],
    value: &'a [u8],
}

/// One node: where it sits in the tree and which properties are its own.
#[derive(Debug)]
struct Node<'a> {
    /// `name@unit`; "" for the root.
    name: &'a str,
    parent: Option<u32>,
    first_child: Option<u32>,
    next_sibling: Option<u32>,
    /// Its properties, a range of `Tree::props` (the structure block puts a
    /// node's properties before its children, so they are contiguous).
    props: Range<u32>,
    /// `phandle`, else `linux,phandle`, when 4 bytes long.
    phandle: Option<u32>,
    /// Its `Known` properties, by `Known as usize`: the index in
    /// `Tree::props` + 1, 0 when it has none.
    known: [u32; KNOWN_COUNT],
}

/// Every node in document order (the root at index 0) and every property,
/// indexed in one pass over the blob; the values borrow from the blob.
#[derive(Debug)]
struct Tree<'a> {
    nodes: Vec<Node<'a>>,
    props: Vec<Prop<'a>>,
    /// (address, size) of each /memreserve/ entry.
    reservations: Vec<(u64, u64)>,
    /// (phandle, node) of every node with a phandle, by phandle.
    phandles: Vec<(u32, u32)>,
}

impl<'a> Tree<'a> {
    /// Checks the blob and indexes it in one pass over the structure block.
    /// FDT_NOP tokens (libfdt leaves them where it deleted things) are
    /// skipped where they stand.
    fn index(blob: &'a [u8]) -> Result<Self, DtbError> {
        let field = |n: usize| {
            be32_at(blob, n * 4)
                .ok_or(DtbError::Truncated)
                .map(|v| v as usize)
        };
        if field(0)? != FDT_MAGIC as usize {
            return Err(DtbError::BadMagic);
        }
        let (total, off_struct, off_strings, off_rsvmap) =
            (field(1)?, field(2)?, field(3)?, field(4)?);
        let version = field(5)?;
        let (size_strings, size_struct) = (field(8)?, field(9)?);
        if version < 17 {
            return Err(DtbError::UnsupportedVersion(version as u32));
        }
        if total > blob.len() || total < HEADER_SIZE {
            return Err(DtbError::Truncated);
        }
        let blob = &blob[..total];
        let region = |off: usize, size: usize, what| {
            off.checked_add(size)
                .filter(|&end| off >= HEADER_SIZE && end <= total)
                .map(|end| off..end)
                .ok_or(DtbError::Malformed { offset: off, what })
        };
        let structure = &blob[region(off_struct, size_struct, "structure block outside blob")?];
        let strings = &blob[region(off_strings, size_strings, "strings block outside blob")?];
        let reservations = read_rsvmap(blob, off_rsvmap)?;

        let malformed = |pos: usize, what| DtbError::Malformed {
            offset: off_struct + pos,
            what,
        };
        // dtc output has about a node per 128 bytes of structure block and
        // a property per 32: sized for that, grown if there are more.
        let mut tree = Tree {
            nodes: Vec::with_capacity(size_struct / 128 + 8),
            props: Vec::with_capacity(size_struct / 32 + 8),
            reservations,
            phandles: Vec::new(),
        };
        let mut names = NameCache::new(strings);
        // The open nodes, innermost last, each with its last child so far.
        let mut open: Vec<(usize, Option<usize>)> = Vec::new();
        let mut pos = 0;
        loop {
            let token = be32_at(structure, pos).ok_or_else(|| malformed(pos, "no FDT_END"))?;
            let token_pos = pos;
            pos += 4;
            match token {
                FDT_BEGIN_NODE => {
                    let rest = &structure[pos..];
                    let len = rest
                        .iter()
                        .position(|&b| b == 0)
                        .ok_or_else(|| malformed(pos, "unterminated node name"))?;
                    let name = core::str::from_utf8(&rest[..len])
                        .map_err(|_| malformed(pos, "node name not UTF-8"))?;
                    let index = tree.nodes.len();
                    let parent = match open.last_mut() {
                        None if index != 0 || !name.is_empty() => {
                            return Err(malformed(token_pos, "second or named root"))
                        }
                        None => None,
                        Some((parent, last_child)) => {
                            match *last_child {
                                Some(previous) => {
                                    tree.nodes[previous].next_sibling = Some(index as u32)
                                }
                                None => tree.nodes[*parent].first_child = Some(index as u32),
                            }
                            *last_child = Some(index);
                            Some(*parent as u32)
                        }
                    };
                    let at = tree.props.len() as u32;
                    tree.nodes.push(Node {
                        name,
                        parent,
                        first_child: None,
                        next_sibling: None,
                        props: at..at,
                        phandle: None,
                        known: [0; KNOWN_COUNT],
                    });
                    open.push((index, None));
                    if open.len() > MAX_DEPTH {
                        return Err(malformed(token_pos, "nodes nested too deep"));
                    }
                    pos = align4(pos + len + 1).ok_or_else(|| malformed(pos, "overflow"))?;
                }
                FDT_END_NODE => {
                    open.pop()
                        .ok_or_else(|| malformed(token_pos, "FDT_END_NODE without node"))?;
                }
                FDT_PROP => {
                    let node = match open.last() {
                        None => return Err(malformed(token_pos, "property outside a node")),
                        Some((_, Some(_))) => {
                            return Err(malformed(token_pos, "property after child node"))
                        }
                        Some(&(node, None)) => node,
                    };
                    let truncated = || malformed(pos, "truncated property");
                    let len = be32_at(structure, pos).ok_or_else(truncated)? as usize;
                    let name_off = be32_at(structure, pos + 4).ok_or_else(truncated)? as usize;
                    pos += 8;
                    let end = pos
                        .checked_add(len)
                        .filter(|&e| e <= structure.len())
                        .ok_or_else(|| malformed(pos, "property value outside block"))?;
                    let (name, known) = names
                        .get(name_off)
                        .map_err(|what| malformed(token_pos, what))?;
                    let value = &structure[pos..end];
                    tree.props.push(Prop { name, value });
                    let node = &mut tree.nodes[node];
                    let count = tree.props.len() as u32;
                    node.props.end = count;
                    if let Some(known) = known {
                        // The first of a repeated name counts, as for
                        // `named_prop`.
                        let slot = &mut node.known[known as usize];
                        if *slot == 0 {
                            *slot = count;
                        }
                    }
                    pos = align4(end).ok_or_else(|| malformed(pos, "overflow"))?;
                }
                FDT_NOP => {}
                FDT_END => {
                    if tree.nodes.is_empty() || !open.is_empty() {
                        return Err(malformed(token_pos, "FDT_END inside a node"));
                    }
                    break;
                }
                _ => return Err(malformed(token_pos, "unknown token")),
            }
        }
        for i in 0..tree.nodes.len() {
            let phandle = tree
                .prop(i, Known::Phandle)
                .or_else(|| tree.prop(i, Known::LinuxPhandle))
                .and_then(|value| <[u8; 4]>::try_from(value).ok())
                .map(u32::from_be_bytes);
            tree.nodes[i].phandle = phandle;
            if let Some(phandle) = phandle {
                tree.phandles.push((phandle, i as u32));
            }
        }
        // Stable: of nodes claiming one phandle, the first in the document
        // stays first.
        tree.phandles.sort_by_key(|&(phandle, _)| phandle);
        Ok(tree)
    }

    /// The absolute path of node `i`, e.g. `/soc/serial@1c28000` (built on
    /// demand: only device paths and error messages need one).
    fn path(&self, i: usize) -> String {
        if self.nodes[i].parent.is_none() {
            return String::from("/");
        }
        // "/name" for each node below the root.
        let len = core::iter::successors(Some(i), |&n| self.parent(n))
            .map(|n| self.nodes[n].name.len() + 1)
            .sum::<usize>();
        let mut path = String::with_capacity(len);
        self.push_path(i, &mut path);
        path
    }

    /// Appends the path of node `i` (not the root); the recursion is as
    /// deep as the node, at most MAX_DEPTH.
    fn push_path(&self, i: usize, path: &mut String) {
        let Some(parent) = self.parent(i) else {
            return;
        };
        self.push_path(parent, path);
        path.push('/');
        path.push_str(self.nodes[i].name);
    }

    fn parent(&self, i: usize) -> Option<usize> {
        self.nodes[i].parent.map(|p| p as usize)
    }

    fn children(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
        let next = move |c: u32| self.nodes[c as usize].next_sibling;
        core::iter::successors(self.nodes[i].first_child, move |&c| next(c)).map(|c| c as usize)
    }

    /// A node by absolute path; a component without a unit address matches
    /// the first node of that base name (devicetree spec 2.2.3).
    fn find_path(&self, path: &str) -> Option<usize> {
        if !path.starts_with('/') {
            return None;
        }
        let mut current = 0;
        for component in path.split('/').filter(|c| !c.is_empty()) {
            let with_unit = component.contains('@');
            current = self.children(current).find(|&c| {
                let name = self.nodes[c].name.as_bytes();
                let base = component.as_bytes();
                // "name" also matches "name@unit" when it has no unit itself.
                // The first byte before the prefix compare (a memcmp call):
                // QEMU virt's root has some 50 children.
                name.first() == base.first()
                    && name
                        .strip_prefix(base)
                        .is_some_and(|rest| rest.is_empty() || (!with_unit && rest[0] == b'@'))
            })?;
        }
        Some(current)
    }

    /// stdout-path is a path or an alias, optionally followed by ":options".
    fn resolve_stdout(&self, stdout_path: &str) -> Option<usize> {
        let target = stdout_path.split(':').next()?;
        if target.starts_with('/') {
            return self.find_path(target);
        }
        let aliases = self.find_path("/aliases")?;
        self.find_path(first_string(self.named_prop(aliases, target)?)?)
    }

    fn find_compatible(&self, any: &[&str]) -> Option<usize> {
        (0..self.nodes.len()).find(|&i| self.is_compatible(i, any) && self.enabled(i))
    }

    /// Node `i`'s property `key` (the first, should a broken blob repeat it).
    fn prop(&self, i: usize, key: impl PropKey) -> Option<&'a [u8]> {
        key.find(self, i)
    }

    /// Node `i`'s first property called `name`.
    fn named_prop(&self, i: usize, name: &str) -> Option<&'a [u8]> {
        let Range { start, end } = self.nodes[i].props;
        let props = self.props.get(start as usize..end as usize)?;
        props
            .iter()
            .find(|p| p.name == name.as_bytes())
            .map(|p| p.value)
    }

    /// Every string of a string-list property (non-UTF-8 entries dropped).
    fn strings_prop(&self, i: usize, key: impl PropKey) -> Vec<String> {
        self.prop(i, key)
            .map(|value| {
                value
                    .split(|&b| b == 0)
                    .filter(|s| !s.is_empty())
                    .filter_map(|s| core::str::from_utf8(s).ok())
                    .map(ToString::to_string)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The first string of a string (list) property.
    fn str_prop(&self, i: usize, key: impl PropKey) -> Option<&'a str> {
        first_string(self.prop(i, key)?)
    }

    fn is_compatible(&self, i: usize, any: &[&str]) -> bool {
        // Each NUL-separated entry against each wanted string, length and
        // first byte before the bytes: `find_compatible` asks this of every
        // node before the one it wants (QEMU virt's timer comes after 32
        // virtio-mmio nodes).
        let Some(value) = self.prop(i, Known::Compatible) else {
            return false;
        };
        let mut rest = value;
        while !rest.is_empty() {
            let len = rest.iter().position(|&b| b == 0).unwrap_or(rest.len());
            let (entry, tail) = rest.split_at(len);
            if any.iter().any(|want| {
                let want = want.as_bytes();
                want.len() == len && want.first() == entry.first() && want == entry
            }) {
                return true;
            }
            rest = tail.get(1..).unwrap_or_default();
        }
        false
    }

    fn enabled(&self, i: usize) -> bool {
        matches!(
            self.str_prop(i, Known::Status),
            None | Some("okay") | Some("ok")
        )
    }

    fn u32_prop(&self, i: usize, key: impl PropKey) -> Result<Option<u32>, DtbError> {
        match self.prop(i, key) {
            None => Ok(None),
            Some(&[a, b, c, d]) => Ok(Some(u32::from_be_bytes([a, b, c, d]))),
            Some(_) => Err(self.bad(i, key.name())),
        }
    }

    /// A 64-bit property; one cell is accepted too (`redistributor-stride`
    /// is often written that way).
    fn u64_prop(&self, i: usize, key: impl PropKey) -> Result<Option<u64>, DtbError> {
        match self.prop(i, key) {
            None => Ok(None),
            Some(v) if v.len() == 4 || v.len() == 8 => Ok(Some(Cells(v).read(0, v.len() / 4))),
            Some(_) => Err(self.bad(i, key.name())),
        }
    }

    fn cells_prop(&self, i: usize, key: impl PropKey) -> Result<Option<Cells<'a>>, DtbError> {
        match self.prop(i, key) {
            None => Ok(None),
            Some(v) if v.len() % 4 == 0 => Ok(Some(Cells(v))),
            Some(_) => Err(self.bad(i, key.name())),
        }
    }

    /// #address-cells for node i's children; 2 when absent (spec 2.3.5).
    fn address_cells(&self, i: usize) -> Result<usize, DtbError> {
        Ok(self.u32_prop(i, Known::AddressCells)?.unwrap_or(2) as usize)
    }

    /// #size-cells for node i's children; 1 when absent (spec 2.3.5).
    fn size_cells(&self, i: usize) -> Result<usize, DtbError> {
        Ok(self.u32_prop(i, Known::SizeCells)?.unwrap_or(1) as usize)
    }

    fn phandle(&self, i: usize) -> Option<u32> {
        self.nodes[i].phandle
    }

    /// The first node (in document order) with this phandle.
    fn by_phandle(&self, phandle: u32) -> Option<usize> {
        let at = self.phandles.partition_point(|&(p, _)| p < phandle);
        match self.phandles.get(at) {
            Some(&(p, node)) if p == phandle => Some(node as usize),
            _ => None,
        }
    }

    /// The node the root's `interrupt-parent` names, else the first
    /// "arm,gic-v3" or "arm,gic-v5" node, whatever its kind.
    fn primary_gic_any(&self) -> Option<usize> {
        let named = match self.u32_prop(0, Known::InterruptParent) {
            Ok(Some(phandle)) => self.by_phandle(phandle),
            _ => None,
        };
        named.or_else(|| self.find_compatible(&["arm,gic-v3", "arm,gic-v5"]))
    }

    /// The GIC that the root's `interrupt-parent` names, else the first
    /// "arm,gic-v3" node.
    fn primary_gic(&self) -> Result<usize, DtbError> {
        let named = match self.u32_prop(0, Known::InterruptParent)? {
            Some(phandle) => self.by_phandle(phandle),
            None => None,
        };
        let gic = named
            .or_else(|| self.find_compatible(&["arm,gic-v3"]))
            .ok_or(DtbError::MissingNode("interrupt-controller"))?;
        if self.is_compatible(gic, &["arm,gic-v3"]) {
            Ok(gic)
        } else {
            let compatible = self
                .str_prop(gic, Known::Compatible)
                .unwrap_or("")
                .to_string();
            Err(DtbError::UnsupportedGic(compatible))
        }
    }

    /// A node's interrupt parent as Linux's of_irq_find_parent finds it:
    /// follow `interrupt-parent`, else the tree parent, until a node with
    /// #interrupt-cells. Bounded, so a phandle cycle cannot hang boot.
    fn interrupt_parent(&self, i: usize) -> Option<usize> {
        let mut child = i;
        for _ in 0..=self.nodes.len() {
            let next = match self.prop(child, Known::InterruptParent) {
                Some(value) => {
                    self.by_phandle(u32::from_be_bytes(<[u8; 4]>::try_from(value).ok()?))?
                }
                None => self.parent(child)?,
            };
            if self.prop(next, Known::InterruptCells).is_some() {
                return Some(next);
            }
            child = next;
        }
        None
    }

    /// (INTID, flags) for each entry of `interrupts`, which must be in the
    /// GIC's specifier form.
    fn gic_interrupts(&self, i: usize, gic: usize) -> Result<Vec<(u32, u32)>, DtbError> {
        let Some(raw) = self.cells_prop(i, Known::Interrupts)? else {
            return Ok(Vec::new());
        };
        let bad = || DtbError::BadInterrupt { node: self.path(i) };
        if self.interrupt_parent(i) != Some(gic) {
            return Err(bad());
        }
        // #interrupt-cells may be 4 with PPI partitions; the first three
        // cells are always type, number, flags.
        let cells = self.u32_prop(gic, Known::InterruptCells)?.unwrap_or(0) as usize;
        if cells < 3 || raw.len() % cells != 0 {
            return Err(bad());
        }
        let decode = if self.is_compatible(gic, &["arm,gic-v5"]) {
            gicv5_intid
        } else {
            gic_intid
        };
        let mut irqs = Vec::with_capacity(raw.len() / cells);
        for c in raw.chunks(cells) {
            let intid = decode(c.get(0), c.get(1)).ok_or_else(bad)?;
            irqs.push((intid, c.get(2)));
        }
        Ok(irqs)
    }

    /// `reg` as CPU physical (base, size) pairs.
    fn reg(&self, i: usize) -> Result<Vec<(u64, u64)>, DtbError> {
        let bus = self.parent(i).ok_or_else(|| self.bad(i, "reg"))?;
        let (ac, sc) = (self.address_cells(bus)?, self.size_cells(bus)?);
        let raw = self
            .cells_prop(i, Known::Reg)?
            .ok_or_else(|| self.missing(i, "reg"))?;
        if !(1..=2).contains(&ac) || !(1..=2).contains(&sc) || raw.len() % (ac + sc) != 0 {
            return Err(self.bad(i, "reg"));
        }
        let mut regs = Vec::with_capacity(raw.len() / (ac + sc));
        for e in raw.chunks(ac + sc) {
            regs.push((self.to_cpu(bus, e.read(0, ac), i)?, e.read(ac, ac + sc)));
        }
        Ok(regs)
    }

    /// Translates an address in `bus`'s child address space up through each
    /// ancestor's `ranges` to a CPU physical address (spec 2.3.8). `node`
    /// names the error.
    fn to_cpu(&self, mut bus: usize, mut addr: u64, node: usize) -> Result<u64, DtbError> {
        let untranslatable = || DtbError::Untranslatable {
            node: self.path(node),
        };
        while let Some(up) = self.parent(bus) {
            let ranges = self
                .cells_prop(bus, Known::Ranges)?
                .ok_or_else(untranslatable)?;
            if !ranges.is_empty() {
                let (child_ac, parent_ac, sc) = (
                    self.address_cells(bus)?,
                    self.address_cells(up)?,
                    self.size_cells(bus)?,
                );
                let ok = |n: usize| (1..=2).contains(&n);
                if !ok(child_ac) || !ok(parent_ac) || !ok(sc) {
                    return Err(untranslatable());
                }
                let stride = child_ac + parent_ac + sc;
                if ranges.len() % stride != 0 {
                    return Err(self.bad(bus, "ranges"));
                }
                addr = ranges
                    .chunks(stride)
                    .find_map(|e| {
                        let child = e.read(0, child_ac);
                        let parent = e.read(child_ac, child_ac + parent_ac);
                        let size = e.read(child_ac + parent_ac, stride);
                        let offset = addr.checked_sub(child).filter(|&off| off < size)?;
                        parent.checked_add(offset)
                    })
                    .ok_or_else(untranslatable)?;
            }
            bus = up;
        }
        Ok(addr)
    }

    fn bad(&self, i: usize, prop: &'static str) -> DtbError {
        DtbError::BadProperty {
            node: self.path(i),
            prop,
        }
    }

    fn missing(&self, i: usize, prop: &'static str) -> DtbError {
        DtbError::MissingProperty {
            node: self.path(i),
            prop,
        }
    }
}

// --- blob format -------------------------------------------------------------

const FDT_MAGIC: u32 = 0xd00d_feed;
const FDT_BEGIN_NODE: u32 = 0x1;
const FDT_END_NODE: u32 = 0x2;
const FDT_PROP: u32 = 0x3;
const FDT_NOP: u32 = 0x4;
const FDT_END: u32 = 0x9;
const HEADER_SIZE: usize = 40;
/// Deepest nesting accepted (root included), as `fdt` 0.1 had it: keeps
/// every walk up the parents (interrupt parents, `ranges` translation,
/// paths) short on a hostile blob.
const MAX_DEPTH: usize = 63;

#[inline(always)]
fn be32_at(bytes: &[u8], offset: usize) -> Option<u32> {
    let word = bytes.get(offset..offset.checked_add(4)?)?;
    Some(u32::from_be_bytes([word[0], word[1], word[2], word[3]]))
}

fn align4(n: usize) -> Option<usize> {
    n.checked_add(3).map(|n| n & !3)
}

/// Property names by their offset in the strings block, each found,
/// checked and classified once: a blob names a few dozen distinct
/// properties hundreds of times.
struct NameCache<'a> {
    strings: &'a [u8],
    /// By offset: 0 when not seen yet, else the name's length + 1 (names of
    /// 64 KiB or more are not remembered) and, in the top bits, its `Known`
    /// as `Known as u32 + 1` (0 for none).
    seen: Vec<u32>,
}

impl<'a> NameCache<'a> {
    /// Remembers names for a strings block up to this size (larger ones are
    /// looked up uncached, so a hostile size cannot make the table large).
    const MAX_CACHED: usize = 16 << 10;

    fn new(strings: &'a [u8]) -> Self {
        let size = if strings.len() <= Self::MAX_CACHED {
            strings.len()
        } else {
            0
        };
        NameCache {
            strings,
            seen: alloc::vec![0; size],
        }
    }

    /// The name at `offset` and what it is, or why it is unusable.
    fn get(&mut self, offset: usize) -> Result<(&'a [u8], Option<Known>), &'static str> {
        if let Some(&entry) = self.seen.get(offset) {
            if entry != 0 {
                let len = (entry & 0xffff) as usize - 1;
                let known = (entry >> 16).checked_sub(1).map(|k| Known::ALL[k as usize]);
                return Ok((&self.strings[offset..offset + len], known));
            }
        }
        let name = self
            .strings
            .get(offset..)
            .ok_or("property name outside strings")?;
        let len = name
            .iter()
            .position(|&b| b == 0)
            .ok_or("unterminated property name")?;
        let name = &name[..len];
        // Names are ASCII in practice ([0-9a-zA-Z,._+?#-], spec 2.2.4);
        // from_utf8 only for the rest.
        if !name.is_ascii() && core::str::from_utf8(name).is_err() {
            return Err("property name not UTF-8");
        }
        let known = Known::of(name);
        if let Some(slot) = self.seen.get_mut(offset) {
            if len < 0xffff {
                let known_bits = known.map_or(0, |k| k as u32 + 1);
                *slot = (len as u32 + 1) | (known_bits << 16);
            }
        }
        Ok((name, known))
    }
}

/// The memory reservation block's (address, size) entries up to its (0, 0)
/// terminator.
fn read_rsvmap(blob: &[u8], off_rsvmap: usize) -> Result<Vec<(u64, u64)>, DtbError> {
    let unterminated = || DtbError::Malformed {
        offset: off_rsvmap,
        what: "unterminated memory reservation block",
    };
    if off_rsvmap < HEADER_SIZE {
        return Err(unterminated());
    }
    let mut entries = Vec::new();
    let mut entry = off_rsvmap;
    loop {
        let mut words = [0u64; 4];
        for (n, word) in words.iter_mut().enumerate() {
            *word = u64::from(be32_at(blob, entry + 4 * n).ok_or_else(unterminated)?);
        }
        entry += 16;
        let (address, size) = ((words[0] << 32) | words[1], (words[2] << 32) | words[3]);
        if (address, size) == (0, 0) {
            return Ok(entries);
        }
        entries.push((address, size));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtb::FdtWriter;

    static QEMU_VIRT: &[u8] = include_bytes!("testdata/qemu-virt-gicv3.dtb");
    /// QEMU 10.0.2 `-M virt,virtualization=on,gic-version=3,iommu=smmuv3`
    /// (`-global arm-smmuv3.stage=2`), `-smp 4 -m 2048M`, dumpdtb.
    static QEMU_10_SMMUV3: &[u8] = include_bytes!("testdata/qemu-10-virt-smmuv3.dtb");

    #[test]
    fn qemu_10_smmuv3_is_found_with_the_bridges_iommu_map() {
        let host = parse_host_dtb(QEMU_10_SMMUV3).unwrap();
        let smmus: Vec<_> = host.smmus_v3().collect();
        assert_eq!(smmus.len(), 1);
        assert_eq!(smmus[0].regs, [(0x905_0000, 0x2_0000)]);
        // eventq, priq, cmdq-sync, gerror: SPIs 74-77.
        assert_eq!(smmus[0].spis, [106, 107, 108, 109]);
        let pcie = host.pcie.unwrap();
        assert_eq!(
            pcie.iommu_map,
            [PciIommuMap {
                rid_base: 0,
                iommu_base: 0x905_0000,
                sid_base: 0,
                len: 0x1_0000
            }]
        );
    }

    #[test]
    fn the_smmu_frame_is_the_hypervisors_and_cannot_be_passed_through() {
        assert_the_smmu_frame_is_refused(&parse_host_dtb(QEMU_10_SMMUV3).unwrap());
    }

    #[test]
    fn the_iort_smmu_frame_is_the_hypervisors_and_cannot_be_passed_through() {
        assert_the_smmu_frame_is_refused(&crate::acpi::tests::qemu_smmuv3_host());
    }

    /// A window over either page of QEMU's SMMU at 0x905_0000 is refused
    /// as the hypervisor's range, naming the frame.
    fn assert_the_smmu_frame_is_refused(host: &HostInfo) {
        let res = host_resources(host, &[]);
        assert!(res.hypervisor.contains(&(0x905_0000, 0x2_0000)));
        use pinfold_config::isolation::{check_isolation, HostKind, IsolationProblem};
        for page in [0x905_0000, 0x906_0000] {
            let err = check_isolation(&plan_with_window(page, 0x1000), &res).unwrap_err();
            assert!(
                matches!(
                    err.problem,
                    IsolationProblem::Over {
                        kind: HostKind::Hypervisor,
                        region_base: 0x905_0000,
                        region_size: 0x2_0000,
                        ..
                    }
                ),
                "{err}"
            );
            assert!(
                err.to_string()
                    .ends_with("overlaps the hypervisor's own range at 0x9050000+0x20000"),
                "{err}"
            );
        }
    }

    #[test]
    fn the_smmu_v3_bindings_quirk_properties_give_its_model() {
        // Three SMMUv3 nodes: plain, Hi161x's and CN99xx's quirk.
        let mut w = FdtWriter::new();
        node(&mut w, "", |w| {
            w.prop_u32("#address-cells", 2).unwrap();
            w.prop_u32("#size-cells", 2).unwrap();
            for (at, quirk) in [
                (0x905_0000u32, None),
                (0x907_0000, Some("hisilicon,broken-prefetch-cmd")),
                (0x909_0000, Some("cavium,cn9900-broken-page1-regspace")),
            ] {
                node(w, &alloc::format!("smmuv3@{at:x}"), |w| {
                    w.prop_string("compatible", "arm,smmu-v3").unwrap();
                    w.prop_cells("reg", &[0, at, 0, 0x2_0000]).unwrap();
                    if let Some(q) = quirk {
                        w.prop(q, &[]).unwrap();
                    }
                });
            }
        });
        let blob = w.finish().unwrap();

        let devices = parse_devices(&Tree::index(&blob).unwrap(), 0);

        assert_eq!(
            devices.iter().map(|d| d.smmu_model).collect::<Vec<_>>(),
            [
                SmmuModel::Generic,
                SmmuModel::HisiliconHi161x,
                SmmuModel::CaviumCn99xx
            ]
        );
    }

    #[test]
    fn qemu_virt_without_an_smmu_has_no_iommu_map() {
        let host = qemu();
        assert_eq!(host.smmus_v3().count(), 0);
        assert!(host.pcie.unwrap().iommu_map.is_empty());
    }

    fn qemu() -> HostInfo {
        parse_host_dtb(QEMU_VIRT).unwrap()
    }

    /// A DT like the one Debian's GRUB 2.06 makes on an ACPI machine: only
    /// /chosen, with the initrd it loaded.
    fn grub_chosen_only(start: u64, end: u32) -> Vec<u8> {
        let mut w = FdtWriter::new();
        let root = w.begin_node("").unwrap();
        let chosen = w.begin_node("chosen").unwrap();
        w.prop_u64("linux,initrd-start", start).unwrap();
        w.prop_u32("linux,initrd-end", end).unwrap();
        w.end_node(chosen).unwrap();
        w.end_node(root).unwrap();
        w.finish().unwrap()
    }

    #[test]
    fn chosen_initrd_reads_64_and_32_bit_cells() {
        let blob = grub_chosen_only(0x4800_0000, 0x4810_0000);

        assert_eq!(chosen_initrd(&blob), Ok(Some((0x4800_0000, 0x10_0000))));
        assert!(!describes_hardware(&blob));
    }

    #[test]
    fn chosen_initrd_that_is_empty_or_absent_is_none() {
        assert_eq!(
            chosen_initrd(&grub_chosen_only(0x4800_0000, 0x4800_0000)),
            Ok(None)
        );
        assert_eq!(chosen_initrd(QEMU_VIRT), Ok(None));
    }

    /// The DT configuration table Debian's GRUB 2.06 (2.06-13+deb12u2,
    /// grubnetaa64.efi) installed on QEMU virt under edk2 with ACPI, captured
    /// by the `pxe-grub` test's boot: the root's #address-cells and
    /// #size-cells, and /chosen with the initrd and nothing else.
    static GRUB_ACPI: &[u8] = include_bytes!("testdata/grub-2.06-deb12u2-acpi.dtb");

    #[test]
    fn debian_grub_dt_on_an_acpi_machine_carries_only_the_initrd() {
        assert_eq!(
            chosen_initrd(GRUB_ACPI),
            Ok(Some((0x9abf_0000, 0x9c8f_e42a - 0x9abf_0000)))
        );
        assert!(!describes_hardware(GRUB_ACPI));
        assert!(parse_host_dtb(GRUB_ACPI).is_err());
    }

    #[test]
    fn qemu_virt_dt_describes_the_hardware() {
        assert!(describes_hardware(QEMU_VIRT));
        assert!(!describes_hardware(b"not a dtb"));
    }

    #[test]
    fn qemu_virt_has_four_cpus_with_aff0_mpidrs() {
        assert_eq!(qemu().cpus, [0, 1, 2, 3]);
    }

    #[test]
    fn qemu_virt_has_2gib_at_1gib_and_nothing_reserved() {
        let info = qemu();

        assert_eq!(info.memory, [(0x4000_0000, 0x8000_0000)]);
        assert!(info.reserved.is_empty());
    }

    #[test]
    fn qemu_virt_gic_is_v3_with_qemu_frames() {
        let gic = qemu().gic;

        assert_eq!(gic.version, 3);
        assert_eq!(gic.dist, (0x0800_0000, 0x1_0000));
        assert_eq!(gic.redist_regions, [(0x080A_0000, 0xF6_0000)]);
        assert_eq!(gic.redist_stride, None);
        assert_eq!(gic.maintenance_intid, Some(25));
    }

    #[test]
    fn qemu_virt_console_is_pl011_on_spi1() {
        let uart = qemu().uart.unwrap();

        assert_eq!(
            uart,
            UartInfo {
                base: 0x0900_0000,
                size: 0x1000,
                intid: Some(33)
            }
        );
    }

    #[test]
    fn qemu_virt_psci_is_smc_with_standard_cpu_on() {
        let psci = qemu().psci.unwrap();

        assert_eq!(
            psci,
            PsciInfo {
                conduit: Conduit::Smc,
                cpu_on_fid: 0xC400_0003
            }
        );
    }

    #[test]
    fn qemu_virt_timer_ppis_are_29_30_27_26() {
        let timer = qemu().timer.unwrap();

        assert_eq!(
            timer,
            TimerPpis {
                sec_phys: 29,
                phys: 30,
                virt: 27,
                hyp: 26
            }
        );
    }

    #[test]
    fn qemu_virt_pcie_has_high_ecam_and_three_windows() {
        let pcie = qemu().pcie.unwrap();

        assert_eq!(pcie.ecam, (0x40_1000_0000, 0x1000_0000));
        assert_eq!(pcie.bus_range, (0, 0xff));
        assert_eq!(pcie.node_path, "/pcie@10000000");
        assert_eq!(
            pcie.ranges,
            [
                PciRange {
                    space: PciSpace::Io,
                    prefetchable: false,
                    pci_addr: 0,
                    cpu_addr: 0x3eff_0000,
                    size: 0x1_0000
                },
                PciRange {
                    space: PciSpace::Mem32,
                    prefetchable: false,
                    pci_addr: 0x1000_0000,
                    cpu_addr: 0x1000_0000,
                    size: 0x2eff_0000
                },
                PciRange {
                    space: PciSpace::Mem64,
                    prefetchable: false,
                    pci_addr: 0x80_0000_0000,
                    cpu_addr: 0x80_0000_0000,
                    size: 0x80_0000_0000
                },
            ]
        );
    }

    #[test]
    fn qemu_virt_pcie_intx_swizzle_maps_to_spis_3_to_6() {
        let pcie = qemu().pcie.unwrap();

        assert_eq!(pcie.interrupt_map_mask, [0x1800, 0, 0, 7]);
        assert_eq!(pcie.interrupt_map.len(), 16);
        assert_eq!(
            pcie.interrupt_map[0],
            PciIntxMap {
                child_addr: [0, 0, 0],
                pin: 1,
                intid: 35,
                flags: 4
            }
        );
        // Device 1 (phys.hi 0x800), INTA is swizzled to SPI 4.
        assert_eq!(
            pcie.interrupt_map[4],
            PciIntxMap {
                child_addr: [0x800, 0, 0],
                pin: 1,
                intid: 36,
                flags: 4
            }
        );
    }

    #[test]
    fn qemu_virt_passes_seeds_and_model() {
        let info = qemu();

        assert_eq!(info.rng_seed.map(|s| s.len()), Some(32));
        assert_eq!(info.kaslr_seed, Some(0x39fe_7968_e6b2_cbc8));
        assert_eq!(info.model.as_deref(), Some("linux,dummy-virt"));
    }

    #[test]
    fn qemu_virt_gic_has_its_frame() {
        assert_eq!(qemu().gic.its, [(0x0808_0000, 0x2_0000)]);
    }

    #[test]
    fn qemu_virt_names_no_numa_nodes() {
        assert_eq!(qemu().numa, NumaInfo::default());
    }

    /// Two sockets of two CPUs (numa-node-id 0 and 1) and three ITSes:
    /// node 1, a disabled one, node 0, node 1.
    fn two_socket_dtb() -> Vec<u8> {
        two_socket_dtb_with_bridge(|_| {})
    }

    /// [`two_socket_dtb`] with a host bridge whose MSI properties `msi`
    /// writes; the ITSes have phandles 0x10, 0x11 (disabled), 0x12, 0x13.
    fn two_socket_dtb_with_bridge(msi: impl FnOnce(&mut FdtWriter)) -> Vec<u8> {
        let mut w = FdtWriter::new();
        node(&mut w, "", |w| {
            w.prop_u32("#address-cells", 2).unwrap();
            w.prop_u32("#size-cells", 2).unwrap();
            w.prop_u32("interrupt-parent", 1).unwrap();
            node(w, "memory@40000000", |w| {
                w.prop_string("device_type", "memory").unwrap();
                w.prop_cells("reg", &[0, 0x4000_0000, 0, 0x4000_0000])
                    .unwrap();
            });
            node(w, "cpus", |w| {
                w.prop_u32("#address-cells", 1).unwrap();
                w.prop_u32("#size-cells", 0).unwrap();
                for (mpidr, numa) in [(0, 0), (1, 0), (0x100, 1), (0x101, 1)] {
                    node(w, &alloc::format!("cpu@{mpidr:x}"), |w| {
                        w.prop_string("device_type", "cpu").unwrap();
                        w.prop_u32("reg", mpidr).unwrap();
                        w.prop_u32("numa-node-id", numa).unwrap();
                    });
                }
            });
            node(w, "interrupt-controller@8000000", |w| {
                w.prop_string("compatible", "arm,gic-v3").unwrap();
                w.prop_u32("#interrupt-cells", 3).unwrap();
                w.prop_u32("#address-cells", 2).unwrap();
                w.prop_u32("#size-cells", 2).unwrap();
                w.prop_null("ranges").unwrap();
                w.prop_null("interrupt-controller").unwrap();
                w.prop_cells(
                    "reg",
                    &[0, 0x800_0000, 0, 0x1_0000, 0, 0x80a_0000, 0, 0x10_0000],
                )
                .unwrap();
                w.prop_u32("phandle", 1).unwrap();
                for (base, numa, status) in [
                    (0x808_0000u32, Some(1), "okay"),
                    (0x809_0000, Some(0), "disabled"),
                    (0x80c_0000, Some(0), "okay"),
                    (0x80e_0000, None, "okay"),
                ] {
                    node(w, &alloc::format!("msi-controller@{base:x}"), |w| {
                        w.prop_string("compatible", "arm,gic-v3-its").unwrap();
                        w.prop_null("msi-controller").unwrap();
                        w.prop_cells("reg", &[0, base, 0, 0x2_0000]).unwrap();
                        w.prop_string("status", status).unwrap();
                        w.prop_u32("#msi-cells", 1).unwrap();
                        w.prop_u32("phandle", 0x10 + (base - 0x808_0000) / 0x2_0000)
                            .unwrap();
                        if let Some(n) = numa {
                            w.prop_u32("numa-node-id", n).unwrap();
                        }
                    });
                }
            });
            node(w, "pcie@10000000", |w| {
                w.prop_string("compatible", "pci-host-ecam-generic")
                    .unwrap();
                w.prop_string("device_type", "pci").unwrap();
                w.prop_u32("#address-cells", 3).unwrap();
                w.prop_u32("#size-cells", 2).unwrap();
                w.prop_cells("reg", &[0x40, 0x1000_0000, 0, 0x1000_0000])
                    .unwrap();
                msi(w);
            });
        });
        w.finish().unwrap()
    }

    #[test]
    fn msi_map_sends_each_requester_id_range_to_the_its_it_names() {
        // Buses 0-1 to the node-1 ITS as themselves, buses 2-3 to the
        // node-0 ITS from DeviceID 0x1_0000 (Ampere Altra's shape: one ITS
        // per root complex).
        let dtb = two_socket_dtb_with_bridge(|w| {
            w.prop_cells(
                "msi-map",
                &[0, 0x10, 0, 0x200, 0x200, 0x12, 0x1_0000, 0x200],
            )
            .unwrap();
        });

        let pcie = parse_host_dtb(&dtb).unwrap().pcie.unwrap();

        assert_eq!(
            pcie.msi_map,
            [
                PciMsiMap {
                    rid_base: 0,
                    its_base: 0x808_0000,
                    device_base: 0,
                    len: 0x200
                },
                PciMsiMap {
                    rid_base: 0x200,
                    its_base: 0x80c_0000,
                    device_base: 0x1_0000,
                    len: 0x200
                }
            ]
        );
        assert_eq!(pcie.msi_map[1].device_id(0x210), Some(0x1_0010));
        assert_eq!(pcie.msi_map[1].device_id(0x400), None);
    }

    #[test]
    fn msi_parent_sends_every_requester_id_to_one_its_as_its_own_device_id() {
        let dtb = two_socket_dtb_with_bridge(|w| w.prop_u32("msi-parent", 0x13).unwrap());

        let pcie = parse_host_dtb(&dtb).unwrap().pcie.unwrap();

        assert_eq!(
            pcie.msi_map,
            [PciMsiMap {
                rid_base: 0,
                its_base: 0x80e_0000,
                device_base: 0,
                len: 0x1_0000
            }]
        );
        let none = parse_host_dtb(&two_socket_dtb()).unwrap().pcie.unwrap();
        assert_eq!(none.msi_map, []);
    }

    #[test]
    fn a_malformed_msi_map_is_refused_naming_the_property() {
        let refused = |prop: &str, cells: &[u32]| {
            let dtb = two_socket_dtb_with_bridge(|w| w.prop_cells(prop, cells).unwrap());
            match parse_host_dtb(&dtb) {
                Err(DtbError::BadProperty { node, prop }) => (node, prop),
                other => panic!("{prop} {cells:x?}: {other:?}"),
            }
        };
        let bridge = |prop| (String::from("/pcie@10000000"), prop);

        // The GIC, not an ITS; a phandle nobody has.
        assert_eq!(refused("msi-map", &[0, 1, 0, 0x100]), bridge("msi-map"));
        assert_eq!(refused("msi-map", &[0, 0x99, 0, 0x100]), bridge("msi-map"));
        // Empty, overflowing, overlapping an earlier entry, ragged.
        assert_eq!(refused("msi-map", &[0, 0x10, 0, 0]), bridge("msi-map"));
        assert_eq!(
            refused("msi-map", &[0, 0x10, 0xffff_ff00, 0x200]),
            bridge("msi-map")
        );
        assert_eq!(
            refused("msi-map", &[0, 0x10, 0, 0x200, 0x100, 0x12, 0, 0x10]),
            bridge("msi-map")
        );
        assert_eq!(refused("msi-map", &[0, 0x10, 0]), bridge("msi-map"));
        assert_eq!(refused("msi-parent", &[0x10, 5]), bridge("msi-parent"));
        assert_eq!(refused("msi-parent", &[1]), bridge("msi-parent"));
    }

    #[test]
    fn an_msi_map_mask_that_folds_requester_ids_is_refused() {
        let dtb = two_socket_dtb_with_bridge(|w| {
            w.prop_cells("msi-map", &[0, 0x10, 0, 0x100]).unwrap();
            w.prop_u32("msi-map-mask", 0xff00).unwrap();
        });

        assert_eq!(
            parse_host_dtb(&dtb),
            Err(DtbError::BadProperty {
                node: "/pcie@10000000".into(),
                prop: "msi-map-mask"
            })
        );
    }

    #[test]
    fn qemu_virt_msi_map_sends_every_requester_id_to_its_its() {
        assert_eq!(
            qemu().pcie.unwrap().msi_map,
            [PciMsiMap {
                rid_base: 0,
                its_base: 0x808_0000,
                device_base: 0,
                len: 0x1_0000
            }]
        );
    }

    #[test]
    fn numa_node_ids_of_cpus_and_enabled_itses_are_read_in_order() {
        let info = parse_host_dtb(&two_socket_dtb()).unwrap();

        assert_eq!(
            info.gic.its,
            [
                (0x808_0000, 0x2_0000),
                (0x80c_0000, 0x2_0000),
                (0x80e_0000, 0x2_0000)
            ]
        );
        assert_eq!(info.numa.cpus, [Some(0), Some(0), Some(1), Some(1)]);
        assert_eq!(info.numa.its, [Some(1), Some(0), None]);
        // Each CPU's ITS: its own node's (the disabled node-0 ITS is not one).
        let chosen = crate::vgic::its_choice::choose(&info.numa, info.cpus.len(), &[true; 3]);
        assert_eq!(chosen, [Some(1), Some(1), Some(0), Some(0)]);
    }

    #[test]
    fn qemu_virt_devices_include_pl031_with_compatible_reg_and_spi() {
        let info = qemu();

        let rtc = info.device("/pl031@9010000").unwrap();

        assert_eq!(rtc.compatible, ["arm,pl031", "arm,primecell"]);
        assert_eq!(rtc.regs, [(0x0901_0000, 0x1000)]);
        assert_eq!(rtc.spis, [34]);
        assert!(rtc.enabled);
    }

    #[test]
    fn device_path_without_unit_address_finds_the_node() {
        let info = qemu();

        assert_eq!(
            info.device("/pl061").map(|d| d.regs.clone()),
            Some(alloc::vec![(0x0903_0000, 0x1000)])
        );
        assert_eq!(info.device("/pl061@1"), None);
    }

    #[test]
    fn devices_leave_out_memory_and_cpus() {
        let info = qemu();

        assert!(info.device("/memory@40000000").is_none());
        assert!(info.devices.iter().all(|d| !d.path.starts_with("/cpus")));
    }

    #[test]
    fn qemu_virt_host_resources_list_gic_frames_console_and_pcie() {
        let info = qemu();

        let host = host_resources(&info, &[(0x4000_0000, 0x20_0000)]);

        assert_eq!(
            host.gic,
            [
                (0x0800_0000, 0x1_0000),
                (0x080A_0000, 0xF6_0000),
                (0x0808_0000, 0x2_0000)
            ]
        );
        assert_eq!(
            host.hypervisor,
            [(0x4000_0000, 0x20_0000), (0x0900_0000, 0x1000)]
        );
        assert_eq!(host.ram, [(0x4000_0000, 0x8000_0000)]);
        assert_eq!(host.pcie.len(), 4);
        assert!(host.pcie.contains(&(0x40_1000_0000, 0x1000_0000)));
        assert!(host
            .devices
            .iter()
            .any(|d| d.node == "/pl061@9030000" && d.base == 0x0903_0000));
    }

    fn plan_with_window(base: u64, size: u64) -> alloc::vec::Vec<pinfold_config::PartitionPlan> {
        use pinfold_config::*;
        alloc::vec![PartitionPlan {
            name: "alpha".into(),
            cpus: alloc::vec![1],
            ram_size: 64 << 20,
            kernel: KernelPlan {
                image: 0,
                format: KernelFormat::Raw
            },
            initrd: None,
            bootargs: String::new(),
            console: ConsolePlan { input: false },
            devices: alloc::vec![DevicePlan {
                name: "dev".into(),
                mmio: alloc::vec![MmioRange { base, size }],
                spis: alloc::vec![],
                compatible: None,
                host_node: None,
            }],
            management: false,
            pci_host_bridge: false,
            pci: Vec::new(),
            token_sha256: None,
            autostart: true,
            pmu: true,
            lifecycle: Default::default(),
            config_store: None,
            api_tls: true,
            gic: pinfold_config::GicSetting::Auto,
        }]
    }

    #[test]
    fn qemu_virt_pl061_window_passes_the_isolation_check() {
        let host = host_resources(&qemu(), &[]);

        let checked = pinfold_config::isolation::check_isolation(
            &plan_with_window(0x0903_0000, 0x1000),
            &host,
        );

        assert_eq!(checked, Ok(()));
    }

    #[test]
    fn qemu_virt_its_and_console_windows_fail_the_isolation_check() {
        use pinfold_config::isolation::{check_isolation, HostKind, IsolationProblem};
        let host = host_resources(&qemu(), &[]);

        let its = check_isolation(&plan_with_window(0x0808_0000, 0x1000), &host).unwrap_err();
        let uart = check_isolation(&plan_with_window(0x0900_0000, 0x1000), &host).unwrap_err();

        assert!(
            matches!(
                its.problem,
                IsolationProblem::Over {
                    kind: HostKind::Gic,
                    ..
                }
            ),
            "{its}"
        );
        assert!(
            matches!(
                uart.problem,
                IsolationProblem::Over {
                    kind: HostKind::Hypervisor,
                    ..
                }
            ),
            "{uart}"
        );
    }

    #[test]
    fn early_uart_of_qemu_virt_is_its_stdout_pl011() {
        assert_eq!(
            early_uart(QEMU_VIRT),
            Some(EarlyUart {
                base: 0x0900_0000,
                size: 0x1000
            })
        );
    }

    // --- a synthetic board, deliberately unlike QEMU virt -----------------

    const GIC_PHANDLE: u32 = 1;
    const OTHER_INTC_PHANDLE: u32 = 2;

    struct Board {
        gic_compatible: &'static str,
        stdout_path: Option<&'static str>,
        soc_ranges: bool,
        timer_parent: u32,
        memory: bool,
        /// Raw /chosen linux,initrd-start and linux,initrd-end values.
        initrd: (Option<&'static [u8]>, Option<&'static [u8]>),
        /// The GIC's redistributor-stride.
        redist_stride: u64,
    }

    impl Default for Board {
        fn default() -> Self {
            Board {
                gic_compatible: "arm,gic-v3",
                stdout_path: Some("serial0:115200n8"),
                soc_ranges: true,
                timer_parent: GIC_PHANDLE,
                memory: true,
                initrd: (None, None),
                redist_stride: 0x4_0000,
            }
        }
    }

    fn node(w: &mut FdtWriter, name: &str, body: impl FnOnce(&mut FdtWriter)) {
        let token = w.begin_node(name).unwrap();
        body(w);
        w.end_node(token).unwrap();
    }

    impl Board {
        fn build(&self) -> Vec<u8> {
            let mut w = FdtWriter::new();
            w.add_mem_reserve(0x8000_0000, 0x1_0000);
            node(&mut w, "", |w| {
                w.prop_u32("#address-cells", 2).unwrap();
                w.prop_u32("#size-cells", 2).unwrap();
                w.prop_string("model", "Test board").unwrap();
                w.prop_u32("interrupt-parent", GIC_PHANDLE).unwrap();
                node(w, "aliases", |w| {
                    w.prop_string("serial0", "/soc/serial@1c28000").unwrap()
                });
                node(w, "chosen", |w| {
                    if let Some(path) = self.stdout_path {
                        w.prop_string("stdout-path", path).unwrap();
                    }
                    w.prop("rng-seed", &[7; 16]).unwrap();
                    if let Some(start) = self.initrd.0 {
                        w.prop("linux,initrd-start", start).unwrap();
                    }
                    if let Some(end) = self.initrd.1 {
                        w.prop("linux,initrd-end", end).unwrap();
                    }
                });
                if self.memory {
                    node(w, "memory@80000000", |w| {
                        w.prop_string("device_type", "memory").unwrap();
                        w.prop_cells(
                            "reg",
                            &[
                                0,
                                0x8000_0000,
                                0,
                                0x4000_0000,
                                0x8,
                                0x8000_0000,
                                0,
                                0x4000_0000,
                            ],
                        )
                        .unwrap();
                    });
                }
                node(w, "memory@c0000000", |w| {
                    w.prop_string("device_type", "memory").unwrap();
                    w.prop_string("status", "disabled").unwrap();
                    w.prop_cells("reg", &[0, 0xc000_0000, 0, 0x1000_0000])
                        .unwrap();
                });
                node(w, "reserved-memory", |w| {
                    w.prop_u32("#address-cells", 2).unwrap();
                    w.prop_u32("#size-cells", 2).unwrap();
                    w.prop_null("ranges").unwrap();
                    node(w, "optee@80100000", |w| {
                        w.prop_cells("reg", &[0, 0x8010_0000, 0, 0x20_0000])
                            .unwrap();
                        w.prop_null("no-map").unwrap();
                    });
                    node(w, "cma", |w| w.prop_u64("size", 0x400_0000).unwrap());
                });
                node(w, "cpus", |w| {
                    w.prop_u32("#address-cells", 2).unwrap();
                    w.prop_u32("#size-cells", 0).unwrap();
                    node(w, "cpu-map", |_| {});
                    for (name, mpidr) in [
                        ("cpu@0", 0),
                        ("cpu@100", 0x100),
                        ("cpu@1_0000_0000", 0x1_0000_0000u64),
                    ] {
                        node(w, &name.replace('_', ""), |w| {
                            w.prop_string("device_type", "cpu").unwrap();
                            w.prop_u64("reg", mpidr).unwrap();
                        });
                    }
                });
                node(w, "psci", |w| {
                    w.prop_string("compatible", "arm,psci").unwrap();
                    w.prop_string("method", "hvc").unwrap();
                    w.prop_u32("cpu_on", 0x8400_0003).unwrap();
                });
                node(w, "timer", |w| {
                    w.prop_string("compatible", "arm,armv8-timer").unwrap();
                    w.prop_u32("interrupt-parent", self.timer_parent).unwrap();
                    // Level-low, as several SoCs wire them.
                    w.prop_cells("interrupts", &[1, 13, 8, 1, 14, 8, 1, 11, 8, 1, 10, 8])
                        .unwrap();
                });
                node(w, "interrupt-controller@3000000", |w| {
                    w.prop_string("compatible", self.gic_compatible).unwrap();
                    w.prop_u32("#interrupt-cells", 3).unwrap();
                    w.prop_null("interrupt-controller").unwrap();
                    w.prop_cells(
                        "reg",
                        &[
                            0, 0x300_0000, 0, 0x1_0000, 0, 0x310_0000, 0, 0x8_0000, 0, 0x320_0000,
                            0, 0x8_0000,
                        ],
                    )
                    .unwrap();
                    w.prop_u32("#redistributor-regions", 2).unwrap();
                    w.prop_u64("redistributor-stride", self.redist_stride)
                        .unwrap();
                    w.prop_cells("interrupts", &[1, 9, 4]).unwrap();
                    w.prop_u32("phandle", GIC_PHANDLE).unwrap();
                });
                node(w, "gpio-intc", |w| {
                    w.prop_u32("#interrupt-cells", 2).unwrap();
                    w.prop_null("interrupt-controller").unwrap();
                    w.prop_u32("phandle", OTHER_INTC_PHANDLE).unwrap();
                });
                node(w, "soc", |w| {
                    w.prop_string("compatible", "simple-bus").unwrap();
                    w.prop_u32("#address-cells", 1).unwrap();
                    w.prop_u32("#size-cells", 1).unwrap();
                    if self.soc_ranges {
                        // Bus address 0 is CPU address 0x1000_0000.
                        w.prop_cells("ranges", &[0, 0, 0x1000_0000, 0x1000_0000])
                            .unwrap();
                    }
                    for (name, spi) in [("serial@1c27000", 31), ("serial@1c28000", 32)] {
                        node(w, name, |w| {
                            w.prop_strings("compatible", &["arm,pl011", "arm,primecell"])
                                .unwrap();
                            let base = u32::from_str_radix(&name[7..], 16).unwrap();
                            w.prop_cells("reg", &[base, 0x400]).unwrap();
                            w.prop_cells("interrupts", &[0, spi, 4]).unwrap();
                        });
                    }
                });
                node(w, "pcie@40000000", |w| {
                    w.prop_string("compatible", "pci-host-ecam-generic")
                        .unwrap();
                    w.prop_string("device_type", "pci").unwrap();
                    w.prop_u32("#address-cells", 3).unwrap();
                    w.prop_u32("#size-cells", 2).unwrap();
                    w.prop_u32("#interrupt-cells", 1).unwrap();
                    w.prop_cells("reg", &[0, 0x4000_0000, 0, 0x100_0000])
                        .unwrap();
                    w.prop_cells("bus-range", &[0, 0xf]).unwrap();
                    w.prop_cells(
                        "ranges",
                        &[
                            0x0100_0000,
                            0,
                            0,
                            0,
                            0x5000_0000,
                            0,
                            0x1_0000,
                            0x4200_0000,
                            0,
                            0x6000_0000,
                            0,
                            0x6000_0000,
                            0,
                            0x1000_0000,
                        ],
                    )
                    .unwrap();
                    // The GIC here has no #address-cells: parent unit address is 0 cells.
                    w.prop_cells(
                        "interrupt-map",
                        &[
                            0,
                            0,
                            0,
                            1,
                            GIC_PHANDLE,
                            0,
                            100,
                            4,
                            0,
                            0,
                            0,
                            2,
                            GIC_PHANDLE,
                            0,
                            101,
                            4,
                        ],
                    )
                    .unwrap();
                    w.prop_cells("interrupt-map-mask", &[0, 0, 0, 7]).unwrap();
                });
            });
            w.finish().unwrap()
        }
    }

    fn board(b: Board) -> HostInfo {
        parse_host_dtb(&b.build()).unwrap()
    }

    #[test]
    fn memory_lists_every_region_of_enabled_memory_nodes() {
        let info = board(Board::default());

        assert_eq!(
            info.memory,
            [(0x8000_0000, 0x4000_0000), (0x8_8000_0000, 0x4000_0000)]
        );
    }

    #[test]
    fn reserved_combines_memreserve_and_static_reserved_memory() {
        let info = board(Board::default());

        assert_eq!(
            info.reserved,
            [(0x8000_0000, 0x1_0000), (0x8010_0000, 0x20_0000)]
        );
    }

    #[test]
    fn cpus_are_two_cell_mpidrs_in_order_without_cpu_map() {
        let info = board(Board::default());

        assert_eq!(info.cpus, [0, 0x100, 0x1_0000_0000]);
    }

    #[test]
    fn gic_lists_each_redistributor_region_and_the_stride() {
        let gic = board(Board::default()).gic;

        assert_eq!(gic.dist, (0x300_0000, 0x1_0000));
        assert_eq!(
            gic.redist_regions,
            [(0x310_0000, 0x8_0000), (0x320_0000, 0x8_0000)]
        );
        assert_eq!(gic.redist_stride, Some(0x4_0000));
    }

    #[test]
    fn stdout_alias_with_options_selects_uart_translated_through_soc_ranges() {
        let uart = board(Board::default()).uart.unwrap();

        assert_eq!(
            uart,
            UartInfo {
                base: 0x11c2_8000,
                size: 0x400,
                intid: Some(64)
            }
        );
    }

    #[test]
    fn stdout_given_as_path_selects_that_uart() {
        let uart = board(Board {
            stdout_path: Some("/soc/serial@1c28000"),
            ..Board::default()
        })
        .uart
        .unwrap();

        assert_eq!(uart.base, 0x11c2_8000);
    }

    #[test]
    fn without_stdout_path_the_first_pl011_is_the_console() {
        let uart = board(Board {
            stdout_path: None,
            ..Board::default()
        })
        .uart
        .unwrap();

        assert_eq!(uart.base, 0x11c2_7000);
    }

    #[test]
    fn psci_0_1_takes_cpu_on_from_its_property() {
        let psci = board(Board::default()).psci.unwrap();

        assert_eq!(
            psci,
            PsciInfo {
                conduit: Conduit::Hvc,
                cpu_on_fid: 0x8400_0003
            }
        );
    }

    #[test]
    fn level_low_timer_ppis_decode_to_the_same_intids() {
        let timer = board(Board::default()).timer.unwrap();

        assert_eq!(
            timer,
            TimerPpis {
                sec_phys: 29,
                phys: 30,
                virt: 27,
                hyp: 26
            }
        );
    }

    #[test]
    fn pcie_windows_keep_space_and_prefetchable_bits() {
        let pcie = board(Board::default()).pcie.unwrap();

        assert_eq!(pcie.ecam, (0x4000_0000, 0x100_0000));
        assert_eq!(pcie.bus_range, (0, 0xf));
        assert_eq!(
            pcie.ranges,
            [
                PciRange {
                    space: PciSpace::Io,
                    prefetchable: false,
                    pci_addr: 0,
                    cpu_addr: 0x5000_0000,
                    size: 0x1_0000
                },
                PciRange {
                    space: PciSpace::Mem32,
                    prefetchable: true,
                    pci_addr: 0x6000_0000,
                    cpu_addr: 0x6000_0000,
                    size: 0x1000_0000
                },
            ]
        );
    }

    #[test]
    fn interrupt_map_without_gic_address_cells_decodes() {
        let pcie = board(Board::default()).pcie.unwrap();

        assert_eq!(
            pcie.interrupt_map,
            [
                PciIntxMap {
                    child_addr: [0, 0, 0],
                    pin: 1,
                    intid: 132,
                    flags: 4
                },
                PciIntxMap {
                    child_addr: [0, 0, 0],
                    pin: 2,
                    intid: 133,
                    flags: 4
                },
            ]
        );
        assert_eq!(pcie.interrupt_map_mask, [0, 0, 0, 7]);
    }

    #[test]
    fn seeds_absent_from_chosen_are_none() {
        let info = board(Board::default());

        assert_eq!(info.rng_seed, Some(alloc::vec![7; 16]));
        assert_eq!(info.kaslr_seed, None);
    }

    #[test]
    fn initrd_from_chosen_in_one_or_two_cells() {
        // QEMU writes two cells (the root's #address-cells), U-Boot on a
        // 32-bit-cell board one.
        let two = board(Board {
            initrd: (
                Some(&[0, 0, 0, 0, 0x48, 0, 0, 0]),
                Some(&[0, 0, 0, 0, 0x48, 0x20, 0x10, 0]),
            ),
            ..Board::default()
        });
        let one = board(Board {
            initrd: (Some(&[0x44, 0, 0, 0]), Some(&[0x44, 0, 0x10, 0])),
            ..Board::default()
        });

        assert_eq!(two.initrd, Some((0x4800_0000, 0x20_1000)));
        assert_eq!(one.initrd, Some((0x4400_0000, 0x1000)));
        assert_eq!(board(Board::default()).initrd, None);
    }

    #[test]
    fn initrd_half_given_or_ending_before_it_starts_is_refused() {
        let chosen_bad = |initrd| {
            parse_host_dtb(
                &Board {
                    initrd,
                    ..Board::default()
                }
                .build(),
            )
        };
        let start: &'static [u8] = &[0x44, 0, 0, 0];
        let before: &'static [u8] = &[0x43, 0, 0, 0];

        for (initrd, prop) in [
            ((Some(start), None), "linux,initrd-end"),
            ((None, Some(start)), "linux,initrd-start"),
            ((Some(start), Some(before)), "linux,initrd-end"),
        ] {
            assert_eq!(
                chosen_bad(initrd),
                Err(DtbError::BadProperty {
                    node: "/chosen".into(),
                    prop
                })
            );
        }
    }

    #[test]
    fn a_redistributor_stride_of_zero_or_below_a_frame_pair_is_refused() {
        for stride in [0, 0x1_0000, 0x2_8000] {
            let parsed = parse_host_dtb(
                &Board {
                    redist_stride: stride,
                    ..Board::default()
                }
                .build(),
            );
            assert!(
                matches!(
                    parsed,
                    Err(DtbError::BadProperty { prop, .. }) if prop == "redistributor-stride"
                ),
                "stride {stride:#x}: {parsed:?}"
            );
        }
        let padded = Board {
            redist_stride: 0x8_0000,
            ..Board::default()
        };
        assert_eq!(board(padded).gic.redist_stride, Some(0x8_0000));
    }

    #[test]
    fn gicv2_host_is_unsupported() {
        let blob = Board {
            gic_compatible: "arm,gic-400",
            ..Board::default()
        }
        .build();

        assert_eq!(
            parse_host_dtb(&blob),
            Err(DtbError::UnsupportedGic("arm,gic-400".into()))
        );
    }

    #[test]
    fn reserved_memory_regions_are_not_device_regions() {
        let info = board(Board::default());

        assert!(info.device("/reserved-memory/optee@80100000").is_none());
        assert!(info.device("/memory@80000000").is_none());
        assert_eq!(
            info.device("/soc/serial@1c28000").map(|d| d.regs.clone()),
            Some(alloc::vec![(0x11c2_8000, 0x400)])
        );
    }

    #[test]
    fn gicv2_host_still_yields_the_early_uart() {
        let blob = Board {
            gic_compatible: "arm,gic-400",
            ..Board::default()
        }
        .build();

        assert!(parse_host_dtb(&blob).is_err());
        assert_eq!(
            early_uart(&blob),
            Some(EarlyUart {
                base: 0x11c2_8000,
                size: 0x400
            })
        );
    }

    #[test]
    fn gicv5_specifiers_become_core_numbers_only_where_the_core_has_them() {
        assert_eq!(gicv5_intid(1, 27), Some(27));
        assert_eq!(gicv5_intid(1, 15), None);
        assert_eq!(gicv5_intid(1, 32), None);
        assert_eq!(gicv5_intid(3, 0), Some(32));
        assert_eq!(gicv5_intid(3, 987), Some(1019));
        // SPI 988 would be core INTID 1020 (special in GICv3 numbering).
        assert_eq!(gicv5_intid(3, 988), None);
        assert_eq!(gicv5_intid(2, 5), None);
    }

    #[test]
    fn gicv5_host_still_yields_the_early_uart() {
        let blob = Board {
            gic_compatible: "arm,gic-v5",
            stdout_path: None,
            ..Board::default()
        }
        .build();

        // No "arm,gic-v5-irs" child: a GICv5 without what Pinfold needs.
        assert_eq!(
            parse_host_dtb(&blob),
            Err(DtbError::MissingNode("arm,gic-v5-irs"))
        );
        assert_eq!(early_uart(&blob).map(|u| u.base), Some(0x11c2_7000));
    }

    #[test]
    fn early_uart_falls_back_to_earlycon_in_bootargs() {
        let mut w = FdtWriter::new();
        node(&mut w, "", |w| {
            node(w, "chosen", |w| {
                w.prop_string(
                    "bootargs",
                    "console=ttyAMA0 earlycon=pl011,mmio32,0x1c090000",
                )
                .unwrap()
            });
        });
        let blob = w.finish().unwrap();

        assert_eq!(
            early_uart(&blob),
            Some(EarlyUart {
                base: 0x1c09_0000,
                size: 0x1000
            })
        );
    }

    #[test]
    fn early_uart_of_a_broken_blob_is_none() {
        let mut blob = QEMU_VIRT.to_vec();
        blob[0] ^= 0xff;

        assert_eq!(early_uart(&blob), None);
    }

    #[test]
    fn unsupported_gic_message_says_what_is_supported() {
        let message = DtbError::UnsupportedGic("arm,gic-400".into()).to_string();

        assert_eq!(
            message,
            "unsupported interrupt controller \"arm,gic-400\" (Pinfold drives \"arm,gic-v3\": GICv3/v4)"
        );
    }

    #[test]
    fn device_under_a_bus_without_ranges_is_not_a_device_region() {
        let mut w = FdtWriter::new();
        node(&mut w, "", |w| {
            w.prop_u32("#address-cells", 1).unwrap();
            w.prop_u32("#size-cells", 1).unwrap();
            node(w, "i2c@1000", |w| {
                w.prop_cells("reg", &[0x1000, 0x100]).unwrap();
                w.prop_u32("#address-cells", 1).unwrap();
                w.prop_u32("#size-cells", 0).unwrap();
                node(w, "eeprom@50", |w| w.prop_cells("reg", &[0x50]).unwrap());
            });
        });
        let blob = w.finish().unwrap();
        let tree = Tree::index(&blob).unwrap();

        let devices = parse_devices(&tree, 0);

        assert_eq!(devices.len(), 1);
        assert_eq!(devices[0].path, "/i2c@1000");
    }

    #[test]
    fn corrupting_any_byte_of_qemu_blob_never_panics_early_uart() {
        for offset in 0..QEMU_VIRT.len() {
            let mut blob = QEMU_VIRT.to_vec();
            blob[offset] ^= 0xff;
            let _ = early_uart(&blob);
        }
    }

    #[test]
    fn host_without_memory_is_rejected() {
        let blob = Board {
            memory: false,
            ..Board::default()
        }
        .build();

        assert_eq!(parse_host_dtb(&blob), Err(DtbError::MissingNode("memory")));
    }

    #[test]
    fn device_under_bus_without_ranges_is_untranslatable() {
        let blob = Board {
            soc_ranges: false,
            ..Board::default()
        }
        .build();

        assert_eq!(
            parse_host_dtb(&blob),
            Err(DtbError::Untranslatable {
                node: "/soc/serial@1c28000".into()
            })
        );
    }

    #[test]
    fn timer_wired_to_another_controller_is_bad_interrupt() {
        let blob = Board {
            timer_parent: OTHER_INTC_PHANDLE,
            ..Board::default()
        }
        .build();

        assert_eq!(
            parse_host_dtb(&blob),
            Err(DtbError::BadInterrupt {
                node: "/timer".into()
            })
        );
    }

    // --- blob-level robustness ------------------------------------------

    fn set_be32(blob: &mut [u8], offset: usize, value: u32) {
        blob[offset..offset + 4].copy_from_slice(&value.to_be_bytes());
    }

    fn header(blob: &[u8], field: usize) -> usize {
        be32_at(blob, field * 4).unwrap() as usize
    }

    /// Inserts an FDT_NOP after the root's FDT_BEGIN_NODE (4 bytes: token +
    /// empty name padded) and after the structure block's first property,
    /// as libfdt's fdt_nop_property leaves them.
    fn with_nops(blob: &[u8]) -> Vec<u8> {
        let off_struct = header(blob, 2);
        let nop = FDT_NOP.to_be_bytes();
        let first_prop_end = off_struct + 8 + 12 + 4; // root begin(8) + prop header(12) + u32 value
        let mut out = Vec::new();
        out.extend_from_slice(&blob[..off_struct + 8]);
        out.extend_from_slice(&nop);
        out.extend_from_slice(&blob[off_struct + 8..first_prop_end]);
        out.extend_from_slice(&nop);
        out.extend_from_slice(&blob[first_prop_end..]);
        set_be32(&mut out, 4, (header(blob, 1) + 8) as u32);
        set_be32(&mut out, 12, (header(blob, 3) + 8) as u32);
        set_be32(&mut out, 36, (header(blob, 9) + 8) as u32);
        out
    }

    #[test]
    fn nop_tokens_left_by_libfdt_are_skipped() {
        let clean = Board::default().build();
        let with_nops = with_nops(&clean);

        let parsed = parse_host_dtb(&with_nops);

        assert_eq!(parsed, parse_host_dtb(&clean));
    }

    #[test]
    fn blob_shorter_than_totalsize_is_truncated() {
        assert_eq!(
            parse_host_dtb(&QEMU_VIRT[..QEMU_VIRT.len() - 1]),
            Err(DtbError::Truncated)
        );
    }

    #[test]
    fn wrong_magic_is_rejected() {
        let mut blob = QEMU_VIRT.to_vec();
        blob[0] ^= 0xff;

        assert_eq!(parse_host_dtb(&blob), Err(DtbError::BadMagic));
    }

    #[test]
    fn version_16_is_rejected() {
        let mut blob = QEMU_VIRT.to_vec();
        set_be32(&mut blob, 20, 16);

        assert_eq!(parse_host_dtb(&blob), Err(DtbError::UnsupportedVersion(16)));
    }

    #[test]
    fn property_running_past_structure_block_is_malformed() {
        let mut blob = Board::default().build();
        let first_prop_len = header(&blob, 2) + 8 + 4;
        set_be32(&mut blob, first_prop_len, 0x10_0000);

        assert!(matches!(
            parse_host_dtb(&blob),
            Err(DtbError::Malformed { .. })
        ));
    }

    #[test]
    fn self_referencing_stdout_alias_does_not_recurse() {
        let mut w = FdtWriter::new();
        node(&mut w, "", |w| {
            node(w, "aliases", |w| {
                w.prop_string("serial0", "serial0").unwrap()
            });
            node(w, "chosen", |w| {
                w.prop_string("stdout-path", "serial0").unwrap()
            });
        });
        let blob = w.finish().unwrap();

        assert_eq!(
            parse_host_dtb(&blob),
            Err(DtbError::MissingNode("interrupt-controller"))
        );
    }

    #[test]
    fn corrupting_any_byte_of_qemu_blob_never_panics() {
        // Only errors may come out; a panic at EL2 would take the machine down.
        for offset in 0..QEMU_VIRT.len() {
            let mut blob = QEMU_VIRT.to_vec();
            blob[offset] ^= 0xff;
            let _ = parse_host_dtb(&blob);
        }
    }

    // --- the reader itself ------------------------------------------------

    /// A blob from raw structure-block words and a strings block, for
    /// shapes FdtWriter refuses to write.
    fn raw_blob(structure: &[u32], strings: &[u8]) -> Vec<u8> {
        let off_struct = HEADER_SIZE + 16;
        let off_strings = off_struct + structure.len() * 4;
        let total = off_strings + strings.len();
        let header = [
            FDT_MAGIC,
            total as u32,
            off_struct as u32,
            off_strings as u32,
            HEADER_SIZE as u32,
            17,
            16,
            0,
            strings.len() as u32,
            (structure.len() * 4) as u32,
        ];
        let mut blob: Vec<u8> = header.iter().flat_map(|w| w.to_be_bytes()).collect();
        blob.extend_from_slice(&[0; 16]);
        blob.extend(structure.iter().flat_map(|w| w.to_be_bytes()));
        blob.extend_from_slice(strings);
        blob
    }

    /// FDT_PROP with a one-cell value.
    fn prop_words(name_offset: u32, value: u32) -> [u32; 4] {
        [FDT_PROP, 4, name_offset, value]
    }

    #[test]
    fn a_repeated_property_reads_as_its_first_value() {
        // "phandle" twice (a Known name) and "x" twice (any other name).
        let strings = b"phandle\0x\0";
        let mut words = alloc::vec![FDT_BEGIN_NODE, 0];
        words.extend(prop_words(0, 7));
        words.extend(prop_words(0, 8));
        words.extend(prop_words(8, 1));
        words.extend(prop_words(8, 2));
        words.extend([FDT_END_NODE, FDT_END]);
        let blob = raw_blob(&words, strings);

        let tree = Tree::index(&blob).unwrap();

        assert_eq!(tree.phandle(0), Some(7));
        assert_eq!(tree.u32_prop(0, "x"), Ok(Some(1)));
    }

    #[test]
    fn a_name_that_is_the_tail_of_another_is_its_own_name() {
        // dtc shares string tails: "phandle" at offset 6 of "linux,phandle".
        let strings = b"linux,phandle\0";
        let mut words = alloc::vec![FDT_BEGIN_NODE, 0];
        words.extend(prop_words(0, 3));
        words.extend([FDT_BEGIN_NODE, u32::from_be_bytes(*b"a\0\0\0")]);
        words.extend(prop_words(6, 4));
        words.extend([FDT_END_NODE, FDT_END_NODE, FDT_END]);
        let blob = raw_blob(&words, strings);

        let tree = Tree::index(&blob).unwrap();

        assert_eq!(tree.phandle(0), Some(3));
        assert_eq!(tree.phandle(1), Some(4));
        assert_eq!(tree.prop(1, Known::LinuxPhandle), None);
    }

    #[test]
    fn a_property_name_that_is_not_utf8_is_malformed() {
        let mut words = alloc::vec![FDT_BEGIN_NODE, 0];
        words.extend(prop_words(0, 1));
        words.extend([FDT_END_NODE, FDT_END]);
        let blob = raw_blob(&words, b"\xff\xfe\0");

        assert!(matches!(
            Tree::index(&blob),
            Err(DtbError::Malformed {
                what: "property name not UTF-8",
                ..
            })
        ));
    }

    #[test]
    fn nodes_nested_deeper_than_max_depth_are_malformed() {
        let mut words = Vec::new();
        for _ in 0..=MAX_DEPTH {
            words.extend([FDT_BEGIN_NODE, 0]);
        }
        let blob = raw_blob(&words, b"");

        assert!(matches!(
            Tree::index(&blob),
            Err(DtbError::Malformed {
                what: "nodes nested too deep",
                ..
            })
        ));
    }

    #[test]
    fn of_two_nodes_claiming_one_phandle_the_first_is_found() {
        let mut w = FdtWriter::new();
        node(&mut w, "", |w| {
            node(w, "b", |w| w.prop_u32("phandle", 9).unwrap());
            node(w, "a", |w| w.prop_u32("phandle", 5).unwrap());
            node(w, "c", |w| w.prop_u32("linux,phandle", 9).unwrap());
        });
        let blob = w.finish().unwrap();

        let tree = Tree::index(&blob).unwrap();

        assert_eq!(tree.by_phandle(9), Some(1));
        assert_eq!(tree.by_phandle(5), Some(2));
        assert_eq!(tree.by_phandle(7), None);
    }

    #[test]
    fn children_are_listed_in_document_order_with_their_paths() {
        let mut w = FdtWriter::new();
        node(&mut w, "", |w| {
            node(w, "a@1", |w| node(w, "deep", |_| {}));
            node(w, "b", |_| {});
            node(w, "a@2", |_| {});
        });
        let blob = w.finish().unwrap();

        let tree = Tree::index(&blob).unwrap();

        let paths: Vec<String> = tree.children(0).map(|c| tree.path(c)).collect();
        assert_eq!(paths, ["/a@1", "/b", "/a@2"]);
        assert_eq!(tree.find_path("/a"), Some(1));
        assert_eq!(tree.find_path("/a@2"), Some(4));
        assert_eq!(
            tree.find_path("/a@1/deep").map(|n| tree.path(n)).as_deref(),
            Some("/a@1/deep")
        );
        assert_eq!(tree.find_path("/a@"), None);
    }
}
