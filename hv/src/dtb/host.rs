//! Reads the DTB firmware hands the hypervisor (x0 at entry): memory, CPUs,
//! GIC frames, timer PPIs, console UART, PSCI conduit, PCIe host bridge and
//! every device node with MMIO; turns that into the `HostResources` the
//! plan's isolation check runs against; and finds the console UART alone
//! (`early_uart`) when the full parse fails, so the error can be printed.
//!
//! The blob's structure is checked here before the `fdt` crate sees it: that
//! crate panics on malformed input, and a bad DTB must stop boot with an
//! error, not a panic at EL2.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use fdt::node::FdtNode;
use fdt::{Fdt, FdtError};

use pinfold_config::isolation::{DeviceRegion, HostResources};

use super::DtbError;

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
    /// The root `model` string.
    pub model: Option<String>,
    /// Every node with a `reg` that translates to CPU physical addresses,
    /// except memory, /cpus and /reserved-memory (and their children), in
    /// document order, enabled or not.
    pub devices: Vec<HostDevice>,
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
}

impl HostInfo {
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
}

/// Architected timer interrupts as INTIDs (PPI n is INTID 16 + n).
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
}

/// PSCI_CPU_ON with the SMC64 calling convention (PSCI, ARM DEN 0022, 5.1.4).
const PSCI_CPU_ON_64: u32 = 0xC400_0003;

/// Parses the firmware's DTB.
pub fn parse_host_dtb(blob: &[u8]) -> Result<HostInfo, DtbError> {
    let compacted = check_blob(blob)?;
    let bytes = compacted.as_deref().unwrap_or(blob);
    let fdt = Fdt::new(bytes).map_err(|e| match e {
        FdtError::BadMagic => DtbError::BadMagic,
        _ => DtbError::Truncated,
    })?;
    let tree = Tree::index(&fdt)?;
    let gic = tree.primary_gic()?;
    let chosen = tree.find_path("/chosen");

    Ok(HostInfo {
        memory: parse_memory(&tree)?,
        reserved: parse_reserved(&fdt, &tree)?,
        cpus: parse_cpus(&tree)?,
        gic: parse_gic(&tree, gic)?,
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
        model: tree.str_prop(0, "model").map(ToString::to_string),
        devices: parse_devices(&tree, gic),
    })
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
    (1..tree.entries.len())
        .filter(|&i| tree.prop(i, "reg").is_some())
        .filter(|&i| tree.str_prop(i, "device_type") != Some("memory") && !under_excluded(i))
        .filter_map(|i| {
            let regs = tree.reg(i).ok()?;
            let spis = tree
                .gic_interrupts(i, gic)
                .unwrap_or_default()
                .into_iter()
                .map(|(intid, _)| intid)
                .filter(|&intid| (32..1020).contains(&intid) || intid >= 4096)
                .collect();
            Some(HostDevice {
                path: tree.path(i).to_string(),
                compatible: tree.strings_prop(i, "compatible"),
                regs,
                spis,
                enabled: tree.enabled(i),
            })
        })
        .collect()
}

/// GIC compatibles whose frames belong to the hypervisor.
const GIC_FRAME_COMPATIBLE: [&str; 2] = ["arm,gic-v3", "arm,gic-v3-its"];

/// What the plan's isolation check (`pinfold_config::isolation`) needs to
/// know about this host. `hypervisor` lists the hypervisor's own ranges
/// (its image and payload, heap, the host DTB); the console UART is added
/// here. The GIC frames are the distributor, the redistributor regions, the
/// ITSes and every other `reg` window of the GIC node (GICC/GICH/GICV).
pub fn host_resources(info: &HostInfo, hypervisor: &[(u64, u64)]) -> HostResources {
    let mut gic = alloc::vec![info.gic.dist];
    gic.extend_from_slice(&info.gic.redist_regions);
    gic.extend_from_slice(&info.gic.its);
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
    let compacted = check_blob(blob).ok()?;
    let bytes = compacted.as_deref().unwrap_or(blob);
    let fdt = Fdt::new(bytes).ok()?;
    let tree = Tree::index(&fdt).ok()?;
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

fn parse_memory(tree: &Tree) -> Result<Vec<(u64, u64)>, DtbError> {
    let mut memory = Vec::new();
    for i in tree.children(0) {
        if tree.str_prop(i, "device_type") == Some("memory") && tree.enabled(i) {
            memory.extend(tree.reg(i)?.into_iter().filter(|&(_, size)| size != 0));
        }
    }
    if memory.is_empty() {
        return Err(DtbError::MissingNode("memory"));
    }
    Ok(memory)
}

fn parse_reserved(fdt: &Fdt, tree: &Tree) -> Result<Vec<(u64, u64)>, DtbError> {
    let mut reserved: Vec<(u64, u64)> = fdt
        .memory_reservations()
        .map(|r| (r.address() as usize as u64, r.size() as u64))
        .collect();
    if let Some(pool) = tree.find_path("/reserved-memory") {
        for i in tree.children(pool) {
            if tree.enabled(i) && tree.prop(i, "reg").is_some() {
                reserved.extend(tree.reg(i)?);
            }
        }
    }
    Ok(reserved)
}

fn parse_cpus(tree: &Tree) -> Result<Vec<u64>, DtbError> {
    let cpus = tree
        .find_path("/cpus")
        .ok_or(DtbError::MissingNode("/cpus"))?;
    let address_cells = tree.address_cells(cpus)?;
    let mut mpidrs = Vec::new();
    for i in tree.children(cpus) {
        if tree.str_prop(i, "device_type") != Some("cpu") {
            continue; // cpu-map and friends
        }
        let reg = tree
            .cells_prop(i, "reg")?
            .ok_or_else(|| tree.missing(i, "reg"))?;
        // A cpu reg is one address of #address-cells (1 or 2), no size.
        if !(1..=2).contains(&address_cells) || reg.len() < address_cells {
            return Err(tree.bad(i, "reg"));
        }
        mpidrs.push(read_cells(&reg[..address_cells]));
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
    Ok(GicInfo {
        version: 3,
        dist: reg[0],
        redist_regions: reg[1..=regions].to_vec(),
        redist_stride: tree.u64_prop(gic, "redistributor-stride")?,
        maintenance_intid,
        its: tree
            .children(gic)
            .filter(|&i| tree.is_compatible(i, &["arm,gic-v3-its"]) && tree.enabled(i))
            .filter_map(|i| tree.reg(i).ok()?.first().copied())
            .collect(),
    })
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
        Some(c) if c.len() == 2 && c[0] <= c[1] => (c[0], c[1]),
        Some(_) => return Err(tree.bad(pcie, "bus-range")),
    };
    let interrupt_map_mask = match tree.cells_prop(pcie, "interrupt-map-mask")? {
        None => [u32::MAX; 4],
        Some(c) => {
            <[u32; 4]>::try_from(c.as_slice()).map_err(|_| tree.bad(pcie, "interrupt-map-mask"))?
        }
    };
    Ok(Some(PcieInfo {
        ecam,
        bus_range,
        ranges: parse_pci_ranges(tree, pcie)?,
        interrupt_map: parse_interrupt_map(tree, pcie, gic)?,
        interrupt_map_mask,
        node_path: tree.path(pcie).to_string(),
    }))
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
    let raw = tree.cells_prop(pcie, "ranges")?.unwrap_or_default();
    let stride = child_ac + parent_ac + size_c;
    if raw.len() % stride != 0 {
        return Err(bad());
    }
    raw.chunks(stride)
        .map(|e| {
            let phys_hi = e[0];
            let space = match (phys_hi >> 24) & 0x3 {
                0 => PciSpace::Config,
                1 => PciSpace::Io,
                2 => PciSpace::Mem32,
                _ => PciSpace::Mem64,
            };
            Ok(PciRange {
                space,
                prefetchable: phys_hi & (1 << 30) != 0,
                pci_addr: read_cells(&e[1..3]),
                cpu_addr: tree.to_cpu(bus, read_cells(&e[3..3 + parent_ac]), pcie)?,
                size: read_cells(&e[3 + parent_ac..]),
            })
        })
        .collect()
}

fn parse_interrupt_map(tree: &Tree, pcie: usize, gic: usize) -> Result<Vec<PciIntxMap>, DtbError> {
    let Some(raw) = tree.cells_prop(pcie, "interrupt-map")? else {
        return Ok(Vec::new()); // MSI-only bridge
    };
    let bad = || DtbError::BadInterrupt {
        node: tree.path(pcie).to_string(),
    };
    if tree.address_cells(pcie)? != 3 || tree.u32_prop(pcie, "#interrupt-cells")? != Some(1) {
        return Err(bad());
    }
    let gic_phandle = tree.phandle(gic).ok_or_else(bad)?;
    // The parent unit address has the GIC's #address-cells, 0 if absent
    // (as Linux's of_irq_parse_raw reads it).
    let parent_ac = tree.u32_prop(gic, "#address-cells")?.unwrap_or(0) as usize;
    let parent_ic = tree.u32_prop(gic, "#interrupt-cells")?.unwrap_or(0) as usize;
    if parent_ic < 3 {
        return Err(bad());
    }
    let stride = 3 + 1 + 1 + parent_ac + parent_ic;
    if raw.len() % stride != 0 {
        return Err(bad());
    }
    raw.chunks(stride)
        .map(|e| {
            if e[4] != gic_phandle {
                return Err(bad());
            }
            let spec = &e[5 + parent_ac..];
            let intid = gic_intid(spec[0], spec[1]).ok_or_else(bad)?;
            Ok(PciIntxMap {
                child_addr: [e[0], e[1], e[2]],
                pin: e[3],
                intid,
                flags: spec[2],
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

/// Big-endian cells (at most two) as one number.
fn read_cells(cells: &[u32]) -> u64 {
    cells.iter().fold(0, |acc, &c| (acc << 32) | u64::from(c))
}

fn be_cells(value: &[u8]) -> Vec<u32> {
    value
        .chunks_exact(4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// One node with where it sits.
struct Entry<'b, 'a> {
    node: FdtNode<'b, 'a>,
    path: String,
    parent: Option<usize>,
    phandle: Option<u32>,
}

/// Every node in document order (the root at index 0), so lookups can walk
/// to parents, which `fdt` 0.1 cannot.
struct Tree<'b, 'a> {
    entries: Vec<Entry<'b, 'a>>,
}

impl<'b, 'a> Tree<'b, 'a> {
    fn index(fdt: &'b Fdt<'a>) -> Result<Self, DtbError> {
        // Not Fdt::find_node: its alias fallback recurses without bound on a
        // self-referencing alias.
        let root = fdt.all_nodes().next().ok_or(DtbError::MissingNode("/"))?;
        let mut tree = Tree {
            entries: Vec::new(),
        };
        tree.add(root, String::from("/"), None);
        Ok(tree)
    }

    /// Recursion depth is bounded by check_blob's MAX_DEPTH.
    fn add(&mut self, node: FdtNode<'b, 'a>, path: String, parent: Option<usize>) {
        let index = self.entries.len();
        let phandle = node
            .property("phandle")
            .or_else(|| node.property("linux,phandle"))
            .and_then(|p| <[u8; 4]>::try_from(p.value).ok())
            .map(u32::from_be_bytes);
        self.entries.push(Entry {
            node,
            path,
            parent,
            phandle,
        });
        for child in node.children() {
            let parent_path = &self.entries[index].path;
            let child_path = if parent.is_none() {
                format!("/{}", child.name)
            } else {
                format!("{parent_path}/{}", child.name)
            };
            self.add(child, child_path, Some(index));
        }
    }

    fn path(&self, i: usize) -> &str {
        &self.entries[i].path
    }

    fn parent(&self, i: usize) -> Option<usize> {
        self.entries[i].parent
    }

    fn children(&self, i: usize) -> impl Iterator<Item = usize> + '_ {
        (i + 1..self.entries.len()).filter(move |&c| self.entries[c].parent == Some(i))
    }

    /// A node by absolute path; a component without a unit address matches
    /// the first node of that base name (devicetree spec 2.2.3).
    fn find_path(&self, path: &str) -> Option<usize> {
        if !path.starts_with('/') {
            return None;
        }
        let mut current = 0;
        for component in path.split('/').filter(|c| !c.is_empty()) {
            current = self.children(current).find(|&c| {
                let name = self.entries[c].node.name;
                name == component
                    || (!component.contains('@') && name.split('@').next() == Some(component))
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
        self.find_path(self.str_prop(aliases, target)?)
    }

    fn find_compatible(&self, any: &[&str]) -> Option<usize> {
        (0..self.entries.len()).find(|&i| self.is_compatible(i, any) && self.enabled(i))
    }

    fn prop(&self, i: usize, name: &str) -> Option<&'a [u8]> {
        self.entries[i].node.property(name).map(|p| p.value)
    }

    /// Every string of a string-list property (non-UTF-8 entries dropped).
    fn strings_prop(&self, i: usize, name: &str) -> Vec<String> {
        self.prop(i, name)
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
    fn str_prop(&self, i: usize, name: &str) -> Option<&'a str> {
        let value = self.prop(i, name)?;
        let end = value.iter().position(|&b| b == 0).unwrap_or(value.len());
        core::str::from_utf8(&value[..end]).ok()
    }

    fn is_compatible(&self, i: usize, any: &[&str]) -> bool {
        self.prop(i, "compatible").is_some_and(|value| {
            value
                .split(|&b| b == 0)
                .any(|c| any.iter().any(|want| want.as_bytes() == c))
        })
    }

    fn enabled(&self, i: usize) -> bool {
        matches!(self.str_prop(i, "status"), None | Some("okay") | Some("ok"))
    }

    fn u32_prop(&self, i: usize, name: &'static str) -> Result<Option<u32>, DtbError> {
        match self.prop(i, name) {
            None => Ok(None),
            Some(&[a, b, c, d]) => Ok(Some(u32::from_be_bytes([a, b, c, d]))),
            Some(_) => Err(self.bad(i, name)),
        }
    }

    /// A 64-bit property; one cell is accepted too (`redistributor-stride`
    /// is often written that way).
    fn u64_prop(&self, i: usize, name: &'static str) -> Result<Option<u64>, DtbError> {
        match self.prop(i, name) {
            None => Ok(None),
            Some(v) if v.len() == 4 || v.len() == 8 => Ok(Some(read_cells(&be_cells(v)))),
            Some(_) => Err(self.bad(i, name)),
        }
    }

    fn cells_prop(&self, i: usize, name: &'static str) -> Result<Option<Vec<u32>>, DtbError> {
        match self.prop(i, name) {
            None => Ok(None),
            Some(v) if v.len() % 4 == 0 => Ok(Some(be_cells(v))),
            Some(_) => Err(self.bad(i, name)),
        }
    }

    /// #address-cells for node i's children; 2 when absent (spec 2.3.5).
    fn address_cells(&self, i: usize) -> Result<usize, DtbError> {
        Ok(self.u32_prop(i, "#address-cells")?.unwrap_or(2) as usize)
    }

    /// #size-cells for node i's children; 1 when absent (spec 2.3.5).
    fn size_cells(&self, i: usize) -> Result<usize, DtbError> {
        Ok(self.u32_prop(i, "#size-cells")?.unwrap_or(1) as usize)
    }

    fn phandle(&self, i: usize) -> Option<u32> {
        self.entries[i].phandle
    }

    fn by_phandle(&self, phandle: u32) -> Option<usize> {
        (0..self.entries.len()).find(|&i| self.phandle(i) == Some(phandle))
    }

    /// The GIC that the root's `interrupt-parent` names, else the first
    /// "arm,gic-v3" node.
    fn primary_gic(&self) -> Result<usize, DtbError> {
        let named = match self.u32_prop(0, "interrupt-parent")? {
            Some(phandle) => self.by_phandle(phandle),
            None => None,
        };
        let gic = named
            .or_else(|| self.find_compatible(&["arm,gic-v3"]))
            .ok_or(DtbError::MissingNode("interrupt-controller"))?;
        if self.is_compatible(gic, &["arm,gic-v3"]) {
            Ok(gic)
        } else {
            let compatible = self.str_prop(gic, "compatible").unwrap_or("").to_string();
            Err(DtbError::UnsupportedGic(compatible))
        }
    }

    /// A node's interrupt parent as Linux's of_irq_find_parent finds it:
    /// follow `interrupt-parent`, else the tree parent, until a node with
    /// #interrupt-cells. Bounded, so a phandle cycle cannot hang boot.
    fn interrupt_parent(&self, i: usize) -> Option<usize> {
        let mut child = i;
        for _ in 0..=self.entries.len() {
            let next = match self.prop(child, "interrupt-parent") {
                Some(value) => {
                    self.by_phandle(u32::from_be_bytes(<[u8; 4]>::try_from(value).ok()?))?
                }
                None => self.parent(child)?,
            };
            if self.prop(next, "#interrupt-cells").is_some() {
                return Some(next);
            }
            child = next;
        }
        None
    }

    /// (INTID, flags) for each entry of `interrupts`, which must be in the
    /// GIC's specifier form.
    fn gic_interrupts(&self, i: usize, gic: usize) -> Result<Vec<(u32, u32)>, DtbError> {
        let Some(raw) = self.cells_prop(i, "interrupts")? else {
            return Ok(Vec::new());
        };
        let bad = || DtbError::BadInterrupt {
            node: self.path(i).to_string(),
        };
        if self.interrupt_parent(i) != Some(gic) {
            return Err(bad());
        }
        // #interrupt-cells may be 4 with PPI partitions; the first three
        // cells are always type, number, flags.
        let cells = self.u32_prop(gic, "#interrupt-cells")?.unwrap_or(0) as usize;
        if cells < 3 || raw.len() % cells != 0 {
            return Err(bad());
        }
        raw.chunks(cells)
            .map(|c| {
                gic_intid(c[0], c[1])
                    .map(|intid| (intid, c[2]))
                    .ok_or_else(bad)
            })
            .collect()
    }

    /// `reg` as CPU physical (base, size) pairs.
    fn reg(&self, i: usize) -> Result<Vec<(u64, u64)>, DtbError> {
        let bus = self.parent(i).ok_or_else(|| self.bad(i, "reg"))?;
        let (ac, sc) = (self.address_cells(bus)?, self.size_cells(bus)?);
        let raw = self
            .cells_prop(i, "reg")?
            .ok_or_else(|| self.missing(i, "reg"))?;
        if !(1..=2).contains(&ac) || !(1..=2).contains(&sc) || raw.len() % (ac + sc) != 0 {
            return Err(self.bad(i, "reg"));
        }
        raw.chunks(ac + sc)
            .map(|e| {
                Ok((
                    self.to_cpu(bus, read_cells(&e[..ac]), i)?,
                    read_cells(&e[ac..]),
                ))
            })
            .collect()
    }

    /// Translates an address in `bus`'s child address space up through each
    /// ancestor's `ranges` to a CPU physical address (spec 2.3.8). `node`
    /// names the error.
    fn to_cpu(&self, mut bus: usize, mut addr: u64, node: usize) -> Result<u64, DtbError> {
        let untranslatable = || DtbError::Untranslatable {
            node: self.path(node).to_string(),
        };
        while let Some(up) = self.parent(bus) {
            let ranges = self.cells_prop(bus, "ranges")?.ok_or_else(untranslatable)?;
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
                        let child = read_cells(&e[..child_ac]);
                        let parent = read_cells(&e[child_ac..child_ac + parent_ac]);
                        let size = read_cells(&e[child_ac + parent_ac..]);
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
            node: self.path(i).to_string(),
            prop,
        }
    }

    fn missing(&self, i: usize, prop: &'static str) -> DtbError {
        DtbError::MissingProperty {
            node: self.path(i).to_string(),
            prop,
        }
    }
}

// --- structural check -------------------------------------------------------

const FDT_MAGIC: u32 = 0xd00d_feed;
const FDT_BEGIN_NODE: u32 = 0x1;
const FDT_END_NODE: u32 = 0x2;
const FDT_PROP: u32 = 0x3;
const FDT_NOP: u32 = 0x4;
const FDT_END: u32 = 0x9;
const HEADER_SIZE: usize = 40;
/// `fdt` 0.1 tracks at most 64 ancestors (root included) in all_nodes.
const MAX_DEPTH: usize = 63;

fn be32_at(bytes: &[u8], offset: usize) -> Option<u32> {
    let word = bytes.get(offset..offset.checked_add(4)?)?;
    Some(u32::from_be_bytes([word[0], word[1], word[2], word[3]]))
}

fn align4(n: usize) -> Option<usize> {
    n.checked_add(3).map(|n| n & !3)
}

/// Checks everything the `fdt` crate would otherwise panic on. Returns a
/// copy without FDT_NOP tokens when there are any (libfdt leaves them where
/// it deleted things; `fdt` 0.1 mis-walks some of them).
fn check_blob(blob: &[u8]) -> Result<Option<Vec<u8>>, DtbError> {
    let field = |n: usize| {
        be32_at(blob, n * 4)
            .ok_or(DtbError::Truncated)
            .map(|v| v as usize)
    };
    if field(0)? != FDT_MAGIC as usize {
        return Err(DtbError::BadMagic);
    }
    let (total, off_struct, off_strings, off_rsvmap) = (field(1)?, field(2)?, field(3)?, field(4)?);
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
    let rsvmap = &blob[off_rsvmap..check_rsvmap(blob, off_rsvmap)?];

    let malformed = |pos: usize, what| DtbError::Malformed {
        offset: off_struct + pos,
        what,
    };
    let mut pos = 0;
    let mut open_has_child: Vec<bool> = Vec::new();
    let mut root_seen = false;
    let mut nops = Vec::new();
    loop {
        let token = be32_at(structure, pos).ok_or(malformed(pos, "no FDT_END"))?;
        let token_pos = pos;
        pos += 4;
        match token {
            FDT_BEGIN_NODE => {
                let len = structure[pos..]
                    .iter()
                    .position(|&b| b == 0)
                    .ok_or(malformed(pos, "unterminated node name"))?;
                let name = core::str::from_utf8(&structure[pos..pos + len])
                    .map_err(|_| malformed(pos, "node name not UTF-8"))?;
                match open_has_child.last_mut() {
                    None if root_seen || !name.is_empty() => {
                        return Err(malformed(token_pos, "second or named root"))
                    }
                    None => root_seen = true,
                    Some(has_child) => *has_child = true,
                }
                open_has_child.push(false);
                if open_has_child.len() > MAX_DEPTH {
                    return Err(malformed(token_pos, "nodes nested too deep"));
                }
                pos = align4(pos + len + 1).ok_or(malformed(pos, "overflow"))?;
            }
            FDT_END_NODE => {
                open_has_child
                    .pop()
                    .ok_or(malformed(token_pos, "FDT_END_NODE without node"))?;
            }
            FDT_PROP => {
                match open_has_child.last() {
                    None => return Err(malformed(token_pos, "property outside a node")),
                    Some(true) => return Err(malformed(token_pos, "property after child node")),
                    Some(false) => {}
                }
                let len =
                    be32_at(structure, pos).ok_or(malformed(pos, "truncated property"))? as usize;
                let name_off = be32_at(structure, pos + 4)
                    .ok_or(malformed(pos, "truncated property"))?
                    as usize;
                pos += 8;
                let end = pos
                    .checked_add(len)
                    .filter(|&e| e <= structure.len())
                    .ok_or(malformed(pos, "property value outside block"))?;
                let name = strings
                    .get(name_off..)
                    .ok_or(malformed(token_pos, "property name outside strings"))?;
                let name_len = name
                    .iter()
                    .position(|&b| b == 0)
                    .ok_or(malformed(token_pos, "unterminated property name"))?;
                core::str::from_utf8(&name[..name_len])
                    .map_err(|_| malformed(token_pos, "property name not UTF-8"))?;
                pos = align4(end).ok_or(malformed(pos, "overflow"))?;
            }
            FDT_NOP => nops.push(token_pos),
            FDT_END => {
                if !root_seen || !open_has_child.is_empty() {
                    return Err(malformed(token_pos, "FDT_END inside a node"));
                }
                break;
            }
            _ => return Err(malformed(token_pos, "unknown token")),
        }
    }
    if nops.is_empty() {
        return Ok(None);
    }
    Ok(Some(without_nops(
        &blob[..HEADER_SIZE],
        rsvmap,
        &structure[..pos],
        &nops,
        strings,
    )))
}

/// Walks the reservation block to its (0, 0) terminator; returns the offset
/// just past it.
fn check_rsvmap(blob: &[u8], off_rsvmap: usize) -> Result<usize, DtbError> {
    let unterminated = DtbError::Malformed {
        offset: off_rsvmap,
        what: "unterminated memory reservation block",
    };
    if off_rsvmap < HEADER_SIZE {
        return Err(unterminated);
    }
    let mut entry = off_rsvmap;
    loop {
        let words = [0, 4, 8, 12].map(|n| be32_at(blob, entry + n));
        if words.iter().any(Option::is_none) {
            return Err(unterminated);
        }
        entry += 16;
        if words.iter().all(|w| *w == Some(0)) {
            return Ok(entry);
        }
    }
}

/// Rebuilds the blob as header, reservation block, structure block without
/// its FDT_NOP tokens, strings block. Only shrinks, so sizes stay in u32.
fn without_nops(
    header: &[u8],
    rsvmap: &[u8],
    structure: &[u8],
    nops: &[usize],
    strings: &[u8],
) -> Vec<u8> {
    let mut compact = Vec::with_capacity(structure.len());
    let mut from = 0;
    for &nop in nops {
        compact.extend_from_slice(&structure[from..nop]);
        from = nop + 4;
    }
    compact.extend_from_slice(&structure[from..]);

    let off_rsvmap = HEADER_SIZE;
    let off_struct = off_rsvmap + rsvmap.len();
    let off_strings = off_struct + compact.len();
    let total = off_strings + strings.len();
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(header);
    for (field, value) in [
        (1, total),
        (2, off_struct),
        (3, off_strings),
        (4, off_rsvmap),
        (8, strings.len()),
        (9, compact.len()),
    ] {
        out[field * 4..field * 4 + 4].copy_from_slice(&(value as u32).to_be_bytes());
    }
    out.extend_from_slice(rsvmap);
    out.extend_from_slice(&compact);
    out.extend_from_slice(strings);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtb::FdtWriter;

    static QEMU_VIRT: &[u8] = include_bytes!("testdata/qemu-virt-gicv3.dtb");

    fn qemu() -> HostInfo {
        parse_host_dtb(QEMU_VIRT).unwrap()
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
            token: None,
            autostart: true,
            pmu: true,
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
    }

    impl Default for Board {
        fn default() -> Self {
            Board {
                gic_compatible: "arm,gic-v3",
                stdout_path: Some("serial0:115200n8"),
                soc_ranges: true,
                timer_parent: GIC_PHANDLE,
                memory: true,
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
                    w.prop_u64("redistributor-stride", 0x4_0000).unwrap();
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
    fn gicv5_host_still_yields_the_early_uart() {
        let blob = Board {
            gic_compatible: "arm,gic-v5",
            stdout_path: None,
            ..Board::default()
        }
        .build();

        assert_eq!(
            parse_host_dtb(&blob),
            Err(DtbError::UnsupportedGic("arm,gic-v5".into()))
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
        let bytes = check_blob(&blob).unwrap();
        let fdt = Fdt::new(bytes.as_deref().unwrap_or(&blob)).unwrap();
        let tree = Tree::index(&fdt).unwrap();

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
}
