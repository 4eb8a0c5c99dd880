//! Per-function PCIe assignment: which host functions a partition gets,
//! where their BARs go, and the virtual ECAM each such partition sees.
//!
//! Decided here, host-tested against a fake configuration space
//! (`vpci_tests.rs`); the platform only traps the guest's accesses to the
//! ECAM window and performs the physical ones ([`ConfigSpace`]).
//!
//! - [`enumerate`]: every function behind the host bridge at boot (after
//!   `pci::quiesce_all` turned decoding off), with its BARs sized (all-ones
//!   written and the old value put back) and its INTx pin.
//! - [`assign`]: a partition's `pci` list checked against that list (the
//!   function exists, is not a bridge or root port, its INTx SPI is not
//!   another partition's) and its BARs placed: per address space (I/O,
//!   32-bit and 64-bit memory) one window of its own, cut from the host
//!   bridge's window of that space where no other partition's window is,
//!   each BAR at least a 4 KiB page (stage 2 maps pages) and aligned to its
//!   size, largest first; a space none of its BARs uses still gets a page
//!   (guests may expect every space the bridge has). [`program`] writes the addresses into the
//!   functions; [`guest_bridge`] is the host bridge the guest's DT shows:
//!   the same ECAM window and bus range (functions at their real BDF),
//!   `ranges` only its windows, `interrupt-map` only its functions' pins.
//! - [`VirtualEcam`]: the filter every guest configuration access goes
//!   through. Functions not assigned (the root complex, other partitions'
//!   functions, empty slots) read all-ones and take no writes. BARs are
//!   shadowed: a sizing probe (all-ones) is answered from the size found at
//!   boot without touching the device. While the BAR's space does not
//!   decode (COMMAND memory or I/O off), any write only moves the shadow.
//!   While it decodes, a new address reaches the device only when the
//!   whole BAR lies in one of the partition's windows (a 64-bit BAR when
//!   both halves are written), otherwise the write is refused. Turning
//!   memory or I/O decoding on first writes every BAR's shadow to the
//!   device and is refused while one lies outside. COMMAND
//!   keeps only I/O, memory, bus master, parity, SERR and INTx disable.
//!   MSI and MSI-X: enables and message writes are refused while the
//!   partition has no MSI doorbell (`msi_doorbell`: set by
//!   `Partition::build` when it gets a virtual ITS, `its::msi_path_to`);
//!   clearing enables is allowed. With a doorbell, an MSI
//!   capability's Message Address may only become the doorbell or zero
//!   (MSI-X tables live in the function's BAR, mapped to the guest: their
//!   addresses are bounded by the SMMU's stage 2, not here). Of the other capabilities
//!   only PCIe Device Control/Status/Control 2 and the power-management
//!   PMCSR are written through; any other write (the expansion ROM, the
//!   read-only header, extended configuration space, vendor capabilities)
//!   is ignored and counted.
//! - [`reset_functions`]: the quiesce and reset (`pci::quiesce_function`:
//!   COMMAND off, MSI/MSI-X off, FLR, virtio, power-management or
//!   secondary bus reset, the last only where every function behind the
//!   bridge is the partition's own) of a partition's functions before its
//!   RAM is scrubbed or it starts again.

use crate::dtb::{PciIntxMap, PciRange, PciSpace, PcieInfo};
use crate::exit::Hw;
use crate::pci::{
    capabilities, present, quiesce_function, Bdf, ConfigSpace, Ecam, Quiesced, ResetScope, CAP_EXP,
    CAP_MSI, CAP_MSIX, CLASS_BRIDGE, CLASS_REV, COMMAND, HEADER_TYPE, MSIX_ENABLE, MSI_ENABLE,
    VENDOR_ID,
};
use alloc::vec::Vec;
use core::fmt;

/// Where a BAR decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BarSpace {
    Io,
    /// A 32-bit memory BAR (below 4 GiB).
    Mem32,
    /// A 64-bit memory BAR (two registers).
    Mem64,
}

/// One implemented BAR as sized at boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostBar {
    /// Register index 0..=5 (the low half of a 64-bit BAR).
    pub reg: u8,
    pub space: BarSpace,
    pub prefetchable: bool,
    pub size: u64,
}

/// A function found behind the host bridge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFunction {
    pub bdf: Bdf,
    pub vendor: u16,
    pub device: u16,
    pub class: u32,
    /// A bridge or root port (class 0x06): never assignable.
    pub bridge: bool,
    /// INTx pin, 1..=4 (INTA..INTD), 0 for none.
    pub pin: u8,
    pub bars: Vec<HostBar>,
    /// Capabilities (ID, offset, length) the filter knows of.
    pub caps: Vec<(u32, u16, u16)>,
    /// An SR-IOV virtual function (`sriov::enable`): its PF and where its
    /// BARs are; None for every other function.
    pub vf: Option<VfOf>,
    /// The most MSI vectors its driver can use at once ([`msi_vectors`]):
    /// what its partition's vITS may map for it.
    pub msi_vectors: u32,
}

/// What makes a function a VF: its BARs cannot move (a VF's BAR registers
/// are read-only zero; the PF's VF BARs placed its apertures at boot).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VfOf {
    pub pf: Bdf,
    /// (BAR register, bus address) of each of its BARs.
    pub bars: Vec<(u8, u64)>,
}

impl HostFunction {
    /// Where VF BAR `reg` is fixed, for a VF.
    fn fixed_bar(&self, reg: u8) -> Option<u64> {
        let vf = self.vf.as_ref()?;
        vf.bars.iter().find(|&&(r, _)| r == reg).map(|&(_, a)| a)
    }
}

const BAR0: u16 = 0x10;
const ROM_BAR: u16 = 0x30;
const INTERRUPT_LINE: u16 = 0x3c;
const INTERRUPT_PIN: u16 = 0x3d;
const CACHE_LINE: u16 = 0x0c;
const CAP_PM: u32 = 0x01;
/// Stage 2 maps BAR windows in pages: no two partitions share one.
const PAGE: u64 = 4096;

/// COMMAND bits a guest may set: I/O space, memory space, bus master,
/// parity error response, SERR#, INTx disable.
pub const COMMAND_ALLOWED: u32 = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 6) | (1 << 8) | (1 << 10);
const COMMAND_IO: u32 = 1 << 0;
const COMMAND_MEM: u32 = 1 << 1;

/// Every function on the buses of `buses` configuration requests reach
/// (`pci::functions`), BARs sized. Decoding must be off (the
/// quiesce has just cleared COMMAND): sizing moves the BAR for a moment.
pub fn enumerate(cfg: &mut impl ConfigSpace, buses: (u8, u8)) -> Vec<HostFunction> {
    crate::pci::functions(cfg, buses)
        .into_iter()
        .map(|bdf| describe(cfg, bdf))
        .collect()
}

fn describe(cfg: &mut impl ConfigSpace, bdf: Bdf) -> HostFunction {
    let id = cfg.read(bdf, VENDOR_ID, 4);
    let class = cfg.read(bdf, CLASS_REV, 4) >> 8;
    let header = cfg.read(bdf, HEADER_TYPE, 1) & 0x7f;
    let bridge = class >> 16 == CLASS_BRIDGE || header != 0;
    let mut f = HostFunction {
        bdf,
        vendor: id as u16,
        device: (id >> 16) as u16,
        class,
        bridge,
        pin: (cfg.read(bdf, INTERRUPT_PIN, 1) as u8).min(4),
        bars: Vec::new(),
        caps: Vec::new(),
        vf: None,
        msi_vectors: 0,
    };
    f.caps = capability_spans(cfg, bdf);
    f.msi_vectors = msi_vectors(cfg, bdf, &f.caps);
    if bridge {
        return f;
    }
    let mut reg = 0u8;
    while reg < 6 {
        let at = BAR0 + 4 * u16::from(reg);
        let old = cfg.read(bdf, at, 4);
        cfg.write(bdf, at, 4, u32::MAX);
        let lo = cfg.read(bdf, at, 4);
        cfg.write(bdf, at, 4, old);
        let io = old & 1 != 0;
        let wide = !io && (old >> 1) & 3 == 2 && reg < 5;
        let mut mask = u64::from(lo & if io { !3 } else { !0xf });
        if wide {
            let hi_at = at + 4;
            let old_hi = cfg.read(bdf, hi_at, 4);
            cfg.write(bdf, hi_at, 4, u32::MAX);
            mask |= u64::from(cfg.read(bdf, hi_at, 4)) << 32;
            cfg.write(bdf, hi_at, 4, old_hi);
        } else if mask != 0 {
            mask |= 0xffff_ffff_0000_0000;
        }
        if mask != 0 {
            f.bars.push(HostBar {
                reg,
                space: if io {
                    BarSpace::Io
                } else if wide {
                    BarSpace::Mem64
                } else {
                    BarSpace::Mem32
                },
                prefetchable: !io && old & 8 != 0,
                size: (!mask).wrapping_add(1),
            });
        }
        reg += if wide { 2 } else { 1 };
    }
    f
}

/// One assigned function and where its BARs went (PCI bus addresses).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    pub bdf: Bdf,
    pub bars: Vec<(HostBar, u64)>,
    /// The SPI its INTx pin reaches through the host's `interrupt-map`.
    pub spi: Option<u32>,
    /// The `interrupt-map` row of that pin, for the guest's bridge node.
    pub intx: Option<PciIntxMap>,
    /// An SR-IOV VF: its BARs are fixed where they are.
    pub vf: bool,
}

/// A partition's functions and its windows.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Assignment {
    pub functions: Vec<Placed>,
    /// Its windows, cut from the host bridge's (one per space used).
    pub windows: Vec<PciRange>,
}

impl Assignment {
    /// The SPIs its functions' INTx pins use (sorted, unique).
    pub fn spis(&self) -> Vec<u32> {
        let mut spis: Vec<u32> = self.functions.iter().filter_map(|f| f.spi).collect();
        spis.sort_unstable();
        spis.dedup();
        spis
    }

    /// Its windows as CPU address ranges (base, size): mapped in its
    /// stage 2, never given to anything else.
    pub fn cpu_windows(&self) -> Vec<(u64, u64)> {
        self.windows.iter().map(|w| (w.cpu_addr, w.size)).collect()
    }

    /// Some function is an SR-IOV VF (the guest must keep BARs where
    /// they are: `linux,pci-probe-only`).
    pub fn has_vf(&self) -> bool {
        self.functions.iter().any(|f| f.vf)
    }

    pub fn owns(&self, bdf: Bdf) -> bool {
        self.functions.iter().any(|f| f.bdf == bdf)
    }
}

/// Why `pci[index]` cannot be assigned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AssignError {
    pub index: usize,
    pub bdf: Bdf,
    pub problem: AssignProblem,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AssignProblem {
    /// No such function behind the host bridge.
    Missing,
    /// A bridge or root port.
    Bridge,
    /// Named twice in the partition's list.
    Repeated,
    /// Its INTx pin's SPI is another partition's (or the hypervisor's).
    IntxShared { spi: u32 },
    /// The host bridge has no window of the space, or no free room of
    /// `size` bytes left in it.
    NoRoom { space: BarSpace, size: u64 },
    /// No host bridge at all.
    NoHostBridge,
    /// A PF whose VFs are enabled: it stays the hypervisor's.
    PfWithVfs,
    /// A VF whose BARs another partition's windows already hold (it is
    /// that partition's).
    VfHeld,
    /// Its MSI vectors, with the partition's functions before it, need more
    /// of the physical ITS's LPIs than other partitions left (`left`).
    LpisExhausted { vectors: u32, left: u32 },
}

impl fmt::Display for AssignError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pci[{}]: 0000:{}: ", self.index, self.bdf)?;
        match &self.problem {
            AssignProblem::Missing => f.write_str("no such function on the host"),
            AssignProblem::Bridge => f.write_str("a bridge or root port cannot be assigned"),
            AssignProblem::Repeated => f.write_str("named twice"),
            AssignProblem::IntxShared { spi } => {
                write!(f, "its INTx is SPI {spi}, which another partition owns")
            }
            AssignProblem::NoRoom { space, size } => write!(
                f,
                "no room for {size:#x} bytes of {space:?} BARs in the host bridge's windows"
            ),
            AssignProblem::NoHostBridge => f.write_str("the host has no PCIe host bridge"),
            AssignProblem::PfWithVfs => f.write_str(
                "a physical function with SR-IOV VFs enabled stays the hypervisor's (assign its VFs)",
            ),
            AssignProblem::VfHeld => f.write_str("this VF is another partition's"),
            AssignProblem::LpisExhausted { vectors, left } => write!(
                f,
                "its MSI vectors bring the partition to {vectors}, but only {left} of the host ITS's {} LPIs are left",
                crate::vgic::pits::LPI_COUNT
            ),
        }
    }
}

/// What a partition's setup needs to place its functions: the host's
/// functions, and what the partitions already there hold.
#[derive(Clone, Default)]
pub struct PciHost<'a> {
    pub functions: &'a [HostFunction],
    /// CPU ranges of other partitions' windows.
    pub taken: Vec<(u64, u64)>,

    /// SPIs other partitions own.
    pub spis: Vec<u32>,
    /// Physical LPIs other partitions reserved for their functions' MSI
    /// vectors (`Partition::lpis_reserved`), out of `vgic::pits::LPI_COUNT`.
    pub lpis_held: u32,
    /// The physical ITSes, when any came up (`System::its`, read without
    /// a lock): partitions whose functions all reach one get a virtual ITS
    /// in front of it (`its::MsiRouting::partition_its_index`,
    /// `its::msi_path_to`), with direct vLPIs when it injects them
    /// (GICv4.0, `its::ItsSet::direct`) or, on GICv4.1, when that ITS is
    /// one the vSGI path maps every vPE on (`its::ItsSet::vsgi_itses`).
    pub its: Option<&'a crate::its::ItsSet>,
    /// SGIs between vCPUs are GICv4.1 direct vSGIs (`vsgi`).
    pub vsgi: bool,
}

/// A partition's assigned functions: where they are and its filter.
pub struct PartitionPci {
    pub assignment: Assignment,
    pub ecam: crate::lockstat::CountedLock<VirtualEcam>,
    /// The filter as it starts (BAR shadows at the placed addresses).
    pub fresh: VirtualEcam,
}

impl PartitionPci {
    pub fn bdfs(&self) -> Vec<Bdf> {
        self.assignment.functions.iter().map(|f| f.bdf).collect()
    }
}

/// The SPI and `interrupt-map` row of `bdf`'s INTx `pin` (1..=4).
pub fn intx_route(bridge: &PcieInfo, bdf: Bdf, pin: u8) -> Option<PciIntxMap> {
    if pin == 0 {
        return None;
    }
    let hi = (u32::from(bdf.bus) << 16) | (u32::from(bdf.dev) << 11) | (u32::from(bdf.func) << 8);
    let mask = bridge.interrupt_map_mask;
    let (hi, pin) = (hi & mask[0], u32::from(pin) & mask[3]);
    bridge
        .interrupt_map
        .iter()
        .find(|m| m.child_addr[0] == hi && m.pin == pin)
        .copied()
}

/// Checks and places a partition's `pci` list. `taken` are CPU address
/// ranges other partitions' windows hold, `reserved` those of every
/// enabled VF's BARs (no carved window goes there; a VF's own windows are
/// its BARs' pages, refused when `taken` holds them); `spi_taken` says
/// whether an SPI is already someone else's.
pub fn assign(
    wanted: &[Bdf],
    host: &[HostFunction],
    bridge: &PcieInfo,
    taken: &[(u64, u64)],
    reserved: &[(u64, u64)],
    spi_taken: impl Fn(u32) -> bool,
) -> Result<Assignment, AssignError> {
    let mut out = Assignment::default();
    let mut found = Vec::new();
    for (index, &bdf) in wanted.iter().enumerate() {
        let err = |problem| AssignError {
            index,
            bdf,
            problem,
        };
        if wanted[..index].contains(&bdf) {
            return Err(err(AssignProblem::Repeated));
        }
        let f = host
            .iter()
            .find(|f| f.bdf == bdf)
            .ok_or_else(|| err(AssignProblem::Missing))?;
        if f.bridge {
            return Err(err(AssignProblem::Bridge));
        }
        if host
            .iter()
            .any(|v| v.vf.as_ref().is_some_and(|v| v.pf == bdf))
        {
            return Err(err(AssignProblem::PfWithVfs));
        }
        let intx = intx_route(bridge, bdf, f.pin);
        let spi = intx.map(|m| m.intid);
        if let Some(spi) = spi.filter(|&s| spi_taken(s)) {
            return Err(err(AssignProblem::IntxShared { spi }));
        }
        let mut placed = Placed {
            bdf,
            bars: Vec::new(),
            spi,
            intx,
            vf: f.vf.is_some(),
        };
        if f.vf.is_some() {
            // A VF's BARs are where its PF's VF BARs put them: its windows
            // are those pages, unless another partition holds them.
            for b in &f.bars {
                let addr = f.fixed_bar(b.reg).unwrap_or(0);
                let size = b.size.max(PAGE);
                let window = fixed_window(bridge, addr, size).ok_or_else(|| {
                    err(AssignProblem::NoRoom {
                        space: b.space,
                        size,
                    })
                })?;
                let cpu = window.cpu_addr;
                if taken
                    .iter()
                    .any(|&(t, ts)| t < cpu + size && cpu < t.saturating_add(ts))
                {
                    return Err(err(AssignProblem::VfHeld));
                }
                placed.bars.push((*b, addr));
                out.windows.push(window);
            }
        } else {
            found.push((index, out.functions.len(), f));
        }
        out.functions.push(placed);
    }
    // Carved windows keep clear of other partitions' and of every VF's.
    let taken: Vec<(u64, u64)> = taken.iter().chain(reserved).copied().collect();
    let taken = &taken[..];
    let has_mem64 = bridge.ranges.iter().any(|r| r.space == PciSpace::Mem64);
    for space in [PciSpace::Io, PciSpace::Mem32, PciSpace::Mem64] {
        let goes_here = |b: &HostBar| match b.space {
            BarSpace::Io => space == PciSpace::Io,
            BarSpace::Mem32 => space == PciSpace::Mem32,
            BarSpace::Mem64 => {
                space
                    == if has_mem64 {
                        PciSpace::Mem64
                    } else {
                        PciSpace::Mem32
                    }
            }
        };
        // (slot in out.functions, index in the plan, the BAR)
        let mut bars: Vec<(usize, usize, HostBar)> = Vec::new();
        for &(index, slot, f) in &found {
            bars.extend(
                f.bars
                    .iter()
                    .filter(|b| goes_here(b))
                    .map(|&b| (slot, index, b)),
            );
        }
        if bars.is_empty() {
            // A page of every space the host bridge has, used or not: a
            // guest may expect each (Hermit 0.11 asserts all three).
            let window = bridge
                .ranges
                .iter()
                .filter(|r| r.space == space)
                .find_map(|r| carve(r, PAGE, PAGE, taken));
            out.windows.extend(window);
            continue;
        }
        bars.sort_by_key(|&(slot, _, b)| (core::cmp::Reverse(b.size.max(PAGE)), slot, b.reg));
        let align = bars[0].2.size.max(PAGE);
        let total: u64 = bars.iter().map(|&(_, _, b)| b.size.max(PAGE)).sum();
        let size = total.div_ceil(align) * align;
        let (first_index, first_bdf) = (bars[0].1, out.functions[bars[0].0].bdf);
        let no_room = || AssignError {
            index: first_index,
            bdf: first_bdf,
            problem: AssignProblem::NoRoom {
                space: bars[0].2.space,
                size,
            },
        };
        let window = bridge
            .ranges
            .iter()
            .filter(|r| r.space == space)
            .find_map(|r| carve(r, size, align, taken))
            .ok_or_else(no_room)?;
        let mut at = window.pci_addr;
        for &(slot, _, b) in &bars {
            out.functions[slot].bars.push((b, at));
            at += b.size.max(PAGE);
        }
        out.windows.push(window);
    }
    for f in &mut out.functions {
        f.bars.sort_by_key(|(b, _)| b.reg);
    }
    Ok(out)
}

/// The first `size` bytes of `range`, aligned to `align` on the bus and
/// clear of every `taken` CPU range.
pub(crate) fn carve(
    range: &PciRange,
    size: u64,
    align: u64,
    taken: &[(u64, u64)],
) -> Option<PciRange> {
    let end = range.pci_addr.checked_add(range.size)?;
    let mut at = range.pci_addr.next_multiple_of(align);
    while at.checked_add(size)? <= end {
        let cpu = range.cpu_addr + (at - range.pci_addr);
        match taken
            .iter()
            .find(|&&(b, s)| b < cpu + size && cpu < b.saturating_add(s))
        {
            None => {
                return Some(PciRange {
                    pci_addr: at,
                    cpu_addr: cpu,
                    size,
                    ..*range
                })
            }
            Some(&(b, s)) => {
                let past = range.pci_addr + (b.saturating_add(s) - range.cpu_addr);
                at = past.max(at + align).next_multiple_of(align);
            }
        }
    }
    None
}

/// Writes the placed BAR addresses into the functions (decoding off).
pub fn program(cfg: &mut impl ConfigSpace, a: &Assignment) {
    for f in &a.functions {
        cfg.write(f.bdf, COMMAND, 2, 0);
        for &(b, addr) in &f.bars {
            write_bar(cfg, f.bdf, b, addr);
        }
    }
}

fn write_bar(cfg: &mut impl ConfigSpace, bdf: Bdf, b: HostBar, addr: u64) {
    let at = BAR0 + 4 * u16::from(b.reg);
    cfg.write(bdf, at, 4, addr as u32);
    if b.space == BarSpace::Mem64 {
        cfg.write(bdf, at + 4, 4, (addr >> 32) as u32);
    }
}

/// The host bridge as the partition's DT shows it: same ECAM window and
/// bus range, only its windows and its functions' INTx rows.
pub fn guest_bridge(host: &PcieInfo, a: &Assignment) -> PcieInfo {
    PcieInfo {
        ranges: a.windows.clone(),
        interrupt_map: a.functions.iter().filter_map(|f| f.intx).collect(),
        ..host.clone()
    }
}

/// At boot: every function behind `bridge` quiesced (`pci::quiesce_all`,
/// so firmware's DMA stops and sizing moves nothing that decodes), then
/// enumerated with its BARs sized; then, for each PF with SR-IOV whose
/// VFs `wanted` names (the plan's `pci` lists), as many VFs enabled as the
/// highest named one needs (`sriov::enable`), each a function of the
/// list. `log` hears each PF's VFs enabled, or why not.
pub fn boot_scan(
    hw: &mut impl Hw,
    bridge: &PcieInfo,
    wanted: &[Bdf],
    log: &mut dyn FnMut(fmt::Arguments<'_>),
) -> Vec<HostFunction> {
    let mut ecam = Ecam::new(hw, bridge);
    let buses = ecam.buses();
    // Before any partition exists: every function is the hypervisor's.
    let _ = crate::pci::quiesce_all(&mut ecam, buses, &|_| false);
    let mut found = enumerate(&mut ecam, buses);
    add_vfs(&mut ecam, bridge, wanted, &mut found, log);
    found
}

/// The VFs `wanted` names, enabled and appended to `found`.
pub fn add_vfs(
    cfg: &mut impl ConfigSpace,
    bridge: &PcieInfo,
    wanted: &[Bdf],
    found: &mut Vec<HostFunction>,
    log: &mut dyn FnMut(fmt::Arguments<'_>),
) {
    // Apertures keep clear of the BARs as they are now: the functions
    // keep them until a partition's placement moves them, and the VFs'
    // must not overlap another partition's window either way.
    let mut taken: Vec<(u64, u64)> = Vec::new();
    let real: Vec<Bdf> = found.iter().map(|f| f.bdf).collect();
    for i in 0..found.len() {
        if found[i].bridge {
            continue;
        }
        let pf = found[i].bdf;
        let s = match crate::sriov::probe(cfg, pf) {
            Ok(Some(s)) => s,
            Ok(None) => continue,
            Err(e) => {
                log(format_args!("sriov {pf}: not probed: {e:?}"));
                continue;
            }
        };
        let num = crate::sriov::vfs_wanted(&s, pf, wanted, |b| real.contains(&b));
        if num == 0 {
            continue;
        }
        match crate::sriov::enable(cfg, &found[i], &s, num, bridge, &mut taken) {
            Ok(vfs) => {
                let first = &vfs[0];
                let mut bars = alloc::string::String::new();
                for &(reg, at) in first.vf.as_ref().map_or(&[][..], |v| &v.bars[..]) {
                    let _ = fmt::Write::write_fmt(&mut bars, format_args!(" BAR{reg} {at:#x}"));
                }
                log(format_args!(
                    "sriov {pf}: {num} of {} VFs enabled ({}..{}), VF 0 at{bars}",
                    s.total_vfs,
                    first.bdf,
                    vfs[vfs.len() - 1].bdf
                ));
                found.extend(vfs);
            }
            Err(e) => log(format_args!("sriov {pf}: VFs not enabled: {e}")),
        }
    }
}

/// The window of the bridge range holding `size` bytes at bus address
/// `addr` (a VF's fixed BAR), with its CPU address.
fn fixed_window(bridge: &PcieInfo, addr: u64, size: u64) -> Option<PciRange> {
    bridge
        .ranges
        .iter()
        .find(|r| addr >= r.pci_addr && addr + size <= r.pci_addr + r.size)
        .map(|r| PciRange {
            pci_addr: addr,
            cpu_addr: r.cpu_addr + (addr - r.pci_addr),
            size,
            ..*r
        })
}

/// The CPU ranges of every VF's BARs in `host` (each a page at least).
pub fn vf_apertures(host: &[HostFunction], bridge: &PcieInfo) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    for f in host {
        for b in &f.bars {
            let window = f
                .fixed_bar(b.reg)
                .and_then(|addr| fixed_window(bridge, addr, b.size.max(PAGE)));
            out.extend(window.map(|w| (w.cpu_addr, w.size)));
        }
    }
    out
}

/// Quiesces and resets `functions`, one partition's (before reuse: stop,
/// restart, delete, reassignment), in order, on a host bridge reaching
/// `buses`. A secondary bus reset is only used where nothing behind the
/// bridge is a function outside `functions` (`pci::bus_reset_bridge`).
pub fn reset_functions(
    cfg: &mut impl ConfigSpace,
    buses: (u8, u8),
    functions: &[Bdf],
) -> Vec<Quiesced> {
    let foreign = |b: Bdf| !functions.contains(&b);
    let scope = ResetScope::new(buses, &foreign);
    let mut done = Vec::new();
    for &bdf in functions {
        if present(cfg, bdf) {
            done.push(quiesce_function(cfg, bdf, &scope));
        }
    }
    done
}

/// A shadowed BAR of an assigned function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct VBar {
    bar: HostBar,
    /// The address the guest last wrote (both halves for a 64-bit BAR).
    addr: u64,
    sizing_lo: bool,
    sizing_hi: bool,
    /// A VF's BAR: where it really is (it cannot move).
    fixed: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct VFunction {
    bdf: Bdf,
    bars: Vec<VBar>,
    /// A VF's vendor and device ID (its own registers read 0xffff).
    vf_ids: Option<u32>,
    /// Capabilities (ID, offset, length), as found at construction.
    caps: Vec<(u32, u16, u16)>,
}

/// What became of a guest's configuration write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Written through (possibly masked), or taken into a BAR's shadow.
    Done,
    /// Dropped without consequence (read-only, unsafe but routine).
    Ignored,
    /// Refused: a fault of the partition's.
    Refused(Refusal),
}

/// Why a write was refused (the partition's fault line says it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The function is not the partition's (or the root complex).
    NotAssigned(Bdf),
    /// The BAR would decode outside the partition's windows.
    BarOutside { bdf: Bdf, reg: u8, addr: u64 },
    /// Decoding on while a BAR's address lies outside its windows.
    DecodeWithBarOutside { bdf: Bdf, reg: u8 },
    /// MSI/MSI-X enabled or its message written with no MSI doorbell.
    MsiWithoutDoorbell(Bdf),
    /// An MSI address other than the partition's doorbell (or zero).
    MsiAddress { bdf: Bdf, addr: u32 },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Refusal::NotAssigned(bdf) => {
                write!(f, "PCI config write to {bdf}, not its function: refused")
            }
            Refusal::BarOutside { bdf, reg, addr } => write!(
                f,
                "PCI {bdf} BAR{reg} to {addr:#x}, outside its windows: refused"
            ),
            Refusal::DecodeWithBarOutside { bdf, reg } => write!(
                f,
                "PCI {bdf} decoding on with BAR{reg} outside its windows: refused"
            ),
            Refusal::MsiWithoutDoorbell(bdf) => {
                write!(f, "PCI {bdf} MSI/MSI-X without a virtual ITS: refused")
            }
            Refusal::MsiAddress { bdf, addr } => write!(
                f,
                "PCI {bdf} MSI address half {addr:#x}, not its virtual ITS doorbell: refused"
            ),
        }
    }
}

/// The virtual ECAM of one partition (module comment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VirtualEcam {
    /// The window the guest accesses (the host's), and its first bus.
    pub base: u64,
    pub size: u64,
    pub first_bus: u8,
    functions: Vec<VFunction>,
    windows: Vec<PciRange>,
    /// The doorbell address MSI messages may carry (the virtual ITS's
    /// GITS_TRANSLATER); None: MSI and MSI-X stay off.
    pub msi_doorbell: Option<u64>,
    /// Writes ignored and refused so far.
    pub ignored: u64,
    pub refused: u64,
}

/// How a byte of a function's configuration space is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Byte {
    Forward,
    Ignore,
    Command,
    /// MSI / MSI-X Message Control (its enable is checked).
    MsiControl,
    /// MSI address/data: a DMA target, so only towards the doorbell.
    MsiMessage,
}

impl VirtualEcam {
    /// The filter for `a`'s functions (capabilities as `host` found them).
    pub fn new(bridge: &PcieInfo, a: &Assignment, host: &[HostFunction]) -> VirtualEcam {
        let functions = a
            .functions
            .iter()
            .map(|f| {
                let h = host.iter().find(|h| h.bdf == f.bdf);
                let vf = h.filter(|h| h.vf.is_some());
                VFunction {
                    bdf: f.bdf,
                    bars: f
                        .bars
                        .iter()
                        .map(|&(bar, addr)| VBar {
                            bar,
                            addr,
                            sizing_lo: false,
                            sizing_hi: false,
                            fixed: vf.and_then(|h| h.fixed_bar(bar.reg)),
                        })
                        .collect(),
                    vf_ids: vf.map(|h| u32::from(h.vendor) | u32::from(h.device) << 16),
                    caps: h.map(|h| h.caps.clone()).unwrap_or_default(),
                }
            })
            .collect();
        VirtualEcam {
            base: bridge.ecam.0,
            size: bridge.ecam.1,
            first_bus: bridge.bus_range.0.min(255) as u8,
            functions,
            windows: a.windows.clone(),
            msi_doorbell: None,
            ignored: 0,
            refused: 0,
        }
    }

    /// The function and register an address in the window names; None
    /// outside it or misaligned.
    pub fn decode(&self, ipa: u64, width: u8) -> Option<(Bdf, u16)> {
        let at = ipa.checked_sub(self.base).filter(|&at| at < self.size)?;
        let bus = u64::from(self.first_bus) + (at >> 20);
        let offset = (at & 0xfff) as u16;
        (bus <= 255 && offset.is_multiple_of(u16::from(width))).then_some((
            Bdf {
                bus: bus as u8,
                dev: ((at >> 15) & 0x1f) as u8,
                func: ((at >> 12) & 7) as u8,
            },
            offset,
        ))
    }

    fn function(&self, bdf: Bdf) -> Option<usize> {
        self.functions.iter().position(|f| f.bdf == bdf)
    }

    /// A guest read: all-ones for what is not its own, the BAR shadows,
    /// no expansion ROM, the rest as the device answers.
    pub fn read(&mut self, cfg: &mut impl ConfigSpace, bdf: Bdf, offset: u16, width: u8) -> u32 {
        let ones = ones(width);
        let Some(i) = self.function(bdf) else {
            return ones;
        };
        let dword = offset & !3;
        let shift = 8 * u32::from(offset & 3);
        if (BAR0..BAR0 + 24).contains(&dword) {
            let reg = ((dword - BAR0) / 4) as u8;
            return (bar_read(&self.functions[i], reg) >> shift) & ones;
        }
        if dword == ROM_BAR {
            return 0;
        }
        if let (VENDOR_ID, Some(ids)) = (dword, self.functions[i].vf_ids) {
            return (ids >> shift) & ones;
        }
        cfg.read(bdf, offset, width)
    }

    /// A guest write, filtered (module comment).
    pub fn write(
        &mut self,
        cfg: &mut impl ConfigSpace,
        bdf: Bdf,
        offset: u16,
        width: u8,
        value: u32,
    ) -> WriteOutcome {
        let outcome = self.write_inner(cfg, bdf, offset, width, value);
        match outcome {
            WriteOutcome::Done => {}
            WriteOutcome::Ignored => self.ignored += 1,
            WriteOutcome::Refused(_) => self.refused += 1,
        }
        outcome
    }

    fn write_inner(
        &mut self,
        cfg: &mut impl ConfigSpace,
        bdf: Bdf,
        offset: u16,
        width: u8,
        value: u32,
    ) -> WriteOutcome {
        let Some(i) = self.function(bdf) else {
            return WriteOutcome::Refused(Refusal::NotAssigned(bdf));
        };
        let value = value & ones(width);
        let dword = offset & !3;
        if (BAR0..BAR0 + 24).contains(&dword) {
            return self.bar_write(cfg, i, offset, width, value);
        }
        let kinds: Vec<Byte> = (0..u16::from(width))
            .map(|b| self.byte_kind(i, offset + b))
            .collect();
        if kinds.iter().all(|&k| k == Byte::Ignore) {
            return WriteOutcome::Ignored;
        }
        if kinds.contains(&Byte::Command) {
            if let Some(r) = self.command_write(cfg, i, offset, width, value) {
                return WriteOutcome::Refused(r);
            }
        }
        if kinds.contains(&Byte::MsiMessage) {
            if let Some(r) = self.msi_address_check(cfg, i, offset, width, value) {
                return WriteOutcome::Refused(r);
            }
        }
        if self.msi_doorbell.is_none() {
            for (b, _) in kinds
                .iter()
                .enumerate()
                .filter(|(_, &k)| k == Byte::MsiControl)
            {
                let at = offset + b as u16;
                let byte = (value >> (8 * b)) & 0xff;
                if let Some(&(id, cap, _)) = self.functions[i]
                    .caps
                    .iter()
                    .find(|&&(_, cap, len)| (cap..cap + len).contains(&at))
                {
                    let enable = if id == CAP_MSIX {
                        MSIX_ENABLE
                    } else {
                        MSI_ENABLE
                    };
                    if (byte << (8 * u32::from(at - cap - 2))) & enable != 0 {
                        return WriteOutcome::Refused(Refusal::MsiWithoutDoorbell(bdf));
                    }
                }
            }
        }
        // Forward the bytes that may be written; a mixed write goes byte by
        // byte so that nothing beside them is touched.
        let forward = |k: Byte| matches!(k, Byte::Forward | Byte::MsiControl | Byte::MsiMessage);
        if kinds.iter().all(|&k| forward(k)) {
            cfg.write(bdf, offset, width, value);
        } else {
            for (b, &k) in kinds.iter().enumerate() {
                if forward(k) {
                    cfg.write(bdf, offset + b as u16, 1, (value >> (8 * b)) & 0xff);
                }
            }
        }
        WriteOutcome::Done
    }

    /// An MSI message write: refused without a doorbell; with one, each
    /// Message Address dword it touches must end up the doorbell's half or
    /// zero (Linux clears the message on teardown), so the device's MSI
    /// write can only ever reach the partition's GITS_TRANSLATER. The
    /// Message Data (the EventID) and the mask bits are the guest's.
    fn msi_address_check(
        &self,
        cfg: &mut impl ConfigSpace,
        i: usize,
        offset: u16,
        width: u8,
        value: u32,
    ) -> Option<Refusal> {
        let f = &self.functions[i];
        let Some(doorbell) = self.msi_doorbell else {
            return Some(Refusal::MsiWithoutDoorbell(f.bdf));
        };
        let &(_, cap, len) = f
            .caps
            .iter()
            .find(|&&(id, cap, len)| id == CAP_MSI && (cap..cap + len).contains(&offset))?;
        // 64-bit capable: 14 bytes, or 24 with per-vector masking.
        let is64 = len == 14 || len >= 24;
        let halves: &[(u16, u32)] = if is64 {
            &[(4, doorbell as u32), (8, (doorbell >> 32) as u32)]
        } else {
            &[(4, doorbell as u32)]
        };
        for &(rel, want) in halves {
            let at = cap + rel;
            let (lo, hi) = (offset.max(at), (offset + u16::from(width)).min(at + 4));
            if lo >= hi {
                continue;
            }
            let mut dword = cfg.read(f.bdf, at, 4);
            for b in lo..hi {
                let byte = (value >> (8 * u32::from(b - offset))) & 0xff;
                let shift = 8 * u32::from(b - at);
                dword = (dword & !(0xff << shift)) | byte << shift;
            }
            if dword != 0 && dword != want {
                return Some(Refusal::MsiAddress {
                    bdf: f.bdf,
                    addr: dword,
                });
            }
        }
        None
    }

    /// COMMAND's bytes of a write: masked to the allowed bits, BARs
    /// written to the device before decoding goes on.
    fn command_write(
        &mut self,
        cfg: &mut impl ConfigSpace,
        i: usize,
        offset: u16,
        width: u8,
        value: u32,
    ) -> Option<Refusal> {
        // The written bytes of COMMAND, over what the device has now.
        let mut command = cfg.read(self.functions[i].bdf, COMMAND, 2);
        for b in 0..u16::from(width) {
            let at = offset + b;
            if at == COMMAND || at == COMMAND + 1 {
                let shift = 8 * u32::from(at - COMMAND);
                command = (command & !(0xff << shift)) | (((value >> (8 * b)) & 0xff) << shift);
            }
        }
        command &= COMMAND_ALLOWED;
        let f = &self.functions[i];
        for v in &f.bars {
            let decodes = match v.bar.space {
                BarSpace::Io => command & COMMAND_IO != 0,
                _ => command & COMMAND_MEM != 0,
            };
            let outside = match v.fixed {
                Some(at) => v.addr != at,
                None => !inside(&self.windows, v.bar, v.addr),
            };
            if decodes && outside {
                return Some(Refusal::DecodeWithBarOutside {
                    bdf: f.bdf,
                    reg: v.bar.reg,
                });
            }
        }
        if command & (COMMAND_IO | COMMAND_MEM) != 0 {
            for v in &f.bars {
                write_bar(cfg, f.bdf, v.bar, v.addr);
            }
        }
        cfg.write(f.bdf, COMMAND, 2, command);
        None
    }

    fn byte_kind(&self, i: usize, at: u16) -> Byte {
        match at {
            0x04 | 0x05 => return Byte::Command,
            0x06 | 0x07 => return Byte::Forward, // STATUS: write 1 to clear
            CACHE_LINE | 0x0d => return Byte::Forward,
            INTERRUPT_LINE => return Byte::Forward,
            _ if !(0x40..0x100).contains(&at) => return Byte::Ignore,
            _ => {}
        }
        for &(id, cap, len) in &self.functions[i].caps {
            let rel = match at.checked_sub(cap) {
                Some(rel) if rel < len => rel,
                _ => continue,
            };
            return match (id, rel) {
                (CAP_MSI, 2 | 3) | (CAP_MSIX, 2 | 3) => Byte::MsiControl,
                (CAP_MSI, 4..) => Byte::MsiMessage,
                // Device Control, Device Status, Device Control 2.
                (CAP_EXP, 8..=0xb) | (CAP_EXP, 0x28 | 0x29) => Byte::Forward,
                (CAP_PM, 4 | 5) => Byte::Forward,
                _ => Byte::Ignore,
            };
        }
        Byte::Ignore
    }

    fn bar_write(
        &mut self,
        cfg: &mut impl ConfigSpace,
        i: usize,
        offset: u16,
        width: u8,
        value: u32,
    ) -> WriteOutcome {
        let dword = offset & !3;
        let reg = ((dword - BAR0) / 4) as u8;
        let shift = 8 * u32::from(offset & 3);
        let mask = ones(width) << shift;
        let current = bar_read(&self.functions[i], reg);
        let value = (current & !mask) | ((value << shift) & mask);
        let f = &mut self.functions[i];
        let bdf = f.bdf;
        let Some(v) = f
            .bars
            .iter_mut()
            .find(|v| v.bar.reg == reg || (v.bar.space == BarSpace::Mem64 && v.bar.reg + 1 == reg))
        else {
            return WriteOutcome::Ignored;
        };
        let hi = v.bar.reg != reg;
        let low_mask: u32 = if v.bar.space == BarSpace::Io {
            !3
        } else {
            !0xf
        };
        let size_mask = !(v.bar.size - 1);
        let command = cfg.read(bdf, COMMAND, 2);
        let decodes = match v.bar.space {
            BarSpace::Io => command & COMMAND_IO != 0,
            _ => command & COMMAND_MEM != 0,
        };
        if !decodes {
            // The BAR does not decode: a new address (or a sizing probe,
            // whatever bits it sets, such as Hermit's 0xfffffff0 to the
            // high half) only moves the shadow. The device gets it when
            // decoding goes on, which `command_write` refuses while any
            // shadow lies outside the windows.
            if hi {
                v.sizing_hi = value == u32::MAX;
                if !v.sizing_hi {
                    v.addr = (u64::from(value) << 32 | (v.addr & 0xffff_ffff)) & size_mask;
                }
            } else {
                v.sizing_lo = value & low_mask == low_mask;
                if !v.sizing_lo {
                    v.addr = ((v.addr & !0xffff_ffff) | u64::from(value & low_mask)) & size_mask;
                }
            }
            return WriteOutcome::Done;
        }
        if hi {
            if value == u32::MAX {
                v.sizing_hi = true;
                return WriteOutcome::Done;
            }
            v.sizing_hi = false;
            let addr = (u64::from(value) << 32 | (v.addr & 0xffff_ffff)) & size_mask;
            v.addr = addr;
            if inside(&self.windows, v.bar, addr) {
                let bar = v.bar;
                write_bar(cfg, bdf, bar, addr);
                return WriteOutcome::Done;
            }
            return WriteOutcome::Refused(Refusal::BarOutside { bdf, reg, addr });
        }
        if value & low_mask == low_mask {
            v.sizing_lo = true;
            return WriteOutcome::Done;
        }
        v.sizing_lo = false;
        let addr = ((v.addr & !0xffff_ffff) | u64::from(value & low_mask)) & size_mask;
        if v.bar.space == BarSpace::Mem64 {
            // The high half may follow: keep the shadow, apply when whole.
            v.addr = addr;
            if inside(&self.windows, v.bar, addr) {
                let bar = v.bar;
                write_bar(cfg, bdf, bar, addr);
            }
            return WriteOutcome::Done;
        }
        if !inside(&self.windows, v.bar, addr) {
            return WriteOutcome::Refused(Refusal::BarOutside { bdf, reg, addr });
        }
        v.addr = addr;
        let bar = v.bar;
        write_bar(cfg, bdf, bar, addr);
        WriteOutcome::Done
    }
}

/// Bytes of a capability the filter knows (MSI: by its Message Control's
/// 64-bit and per-vector masking bits; MSI-X: control and the table/PBA
/// pointers; PCIe: version 2), cut at the next capability.
/// The MSI vectors a function with capabilities `caps`
/// ([`capability_spans`]) can raise: its MSI-X Table Size + 1, or its MSI
/// Multiple Message Capable count (2^MMC), whichever is larger (a driver
/// enables one of the two); 0 without either.
pub(crate) fn msi_vectors(cfg: &mut impl ConfigSpace, bdf: Bdf, caps: &[(u32, u16, u16)]) -> u32 {
    caps.iter()
        .map(|&(id, at, _)| {
            let control = cfg.read(bdf, at + 2, 2);
            match id {
                CAP_MSIX => (control & 0x7ff) + 1,
                CAP_MSI => 1 << ((control >> 1) & 7).min(5),
                _ => 0,
            }
        })
        .max()
        .unwrap_or(0)
}

pub(crate) fn capability_spans(cfg: &mut impl ConfigSpace, bdf: Bdf) -> Vec<(u32, u16, u16)> {
    let caps = capabilities(cfg, bdf);
    caps.iter()
        .map(|&(id, at)| {
            let len = match id {
                CAP_MSI => {
                    let control = cfg.read(bdf, at + 2, 2);
                    10 + if control & (1 << 7) != 0 { 4 } else { 0 }
                        + if control & (1 << 8) != 0 { 10 } else { 0 }
                }
                CAP_MSIX => 12,
                CAP_EXP => 0x3c,
                CAP_PM => 8,
                _ => 2,
            };
            let next = caps
                .iter()
                .map(|&(_, a)| a)
                .filter(|&a| a > at)
                .min()
                .unwrap_or(0x100);
            (id, at, len.min(next - at))
        })
        .collect()
}

fn ones(width: u8) -> u32 {
    u32::MAX >> (32 - 8 * u32::from(width.clamp(1, 4)))
}

/// The value a guest reads from BAR register `reg` of `f`.
fn bar_read(f: &VFunction, reg: u8) -> u32 {
    for v in &f.bars {
        let size_mask = !(v.bar.size - 1);
        if v.bar.reg == reg {
            let flags = match v.bar.space {
                BarSpace::Io => 1,
                BarSpace::Mem32 => u32::from(v.bar.prefetchable) << 3,
                BarSpace::Mem64 => 4 | u32::from(v.bar.prefetchable) << 3,
            };
            let low_mask: u32 = if v.bar.space == BarSpace::Io {
                !3
            } else {
                !0xf
            };
            let addr = if v.sizing_lo { size_mask } else { v.addr };
            return (addr as u32 & low_mask) | flags;
        }
        if v.bar.space == BarSpace::Mem64 && v.bar.reg + 1 == reg {
            let addr = if v.sizing_hi { size_mask } else { v.addr };
            return (addr >> 32) as u32;
        }
    }
    0
}

/// Whether `bar` at bus address `addr` lies wholly in one of `windows` of
/// its space.
fn inside(windows: &[PciRange], bar: HostBar, addr: u64) -> bool {
    let Some(end) = addr.checked_add(bar.size) else {
        return false;
    };
    windows.iter().any(|w| {
        let space_ok = match bar.space {
            BarSpace::Io => w.space == PciSpace::Io,
            BarSpace::Mem32 => w.space == PciSpace::Mem32,
            BarSpace::Mem64 => matches!(w.space, PciSpace::Mem32 | PciSpace::Mem64),
        };
        space_ok && addr >= w.pci_addr && end <= w.pci_addr + w.size
    })
}

#[cfg(test)]
#[path = "vpci_tests.rs"]
mod tests;
