//! Quiescing the PCI functions behind a host bridge before the partition
//! that owns the bridge (the management partition) starts or restarts:
//! whatever firmware (U-Boot `dhcp`, UEFI PXE) or a previous run of the
//! manager left running is stopped and reset, so the manager's drivers
//! start from the device's reset state.
//!
//! What is decided here (host-tested against a fake configuration space):
//! which functions exist (every device of every bus in the bridge's range,
//! functions 1-7 when function 0 says multi-function; bridges are left
//! alone, the functions behind them are reached by their own bus numbers),
//! and per function, in this order:
//!
//! 1. COMMAND = 0: Bus Master, Memory and I/O decoding off (no more DMA,
//!    the BARs stop answering) and INTx Disable clear, the reset value a
//!    driver expects;
//! 2. MSI and MSI-X enables cleared (while one is set, a function does not
//!    assert INTx, which is the only interrupt the manager's Hermit uses);
//! 3. a reset, the first of these the function allows:
//!    - Function Level Reset where the PCIe capability advertises it
//!      (Transactions Pending waited for, Initiate FLR, the 100 ms the PCIe
//!      base specification requires, then the function must answer
//!      configuration reads again);
//!    - for a virtio function, a virtio device reset (device_status = 0
//!      written through the VIRTIO_PCI_CAP_PCI_CFG window, so no BAR needs
//!      to be mapped or even assigned, and read back until it is 0); kept
//!      before the two below because it is what QEMU's virtio functions
//!      were always reset with here;
//!    - a power-management reset where the PCI Power Management capability
//!      (ID 0x01) has PMCSR.No_Soft_Reset (bit 3) clear: PMCSR.PowerState
//!      = D3hot, 10 ms (PCI PM 1.2, 5.6.1, table 5-6), D0, 10 ms, then the
//!      function must answer as after an FLR (with No_Soft_Reset set the
//!      D3hot->D0 transition keeps the function's state: no reset, skipped);
//!    - a secondary bus reset by the PCI-to-PCI bridge whose secondary bus
//!      the function is on (Bridge Control 0x3e bit 6 set, 2 ms (the spec's
//!      minimum is 1 ms), cleared, then the function waited for as after an
//!      FLR), only when that bridge is reached through the ECAM, the
//!      function is the only one on its bus and no function behind the
//!      bridge (its secondary to subordinate buses) is anyone else's
//!      ([`ResetScope::foreign`]: another partition's, the hypervisor's, or
//!      nobody's): a bus reset reaches every function behind the bridge;
//!    - otherwise none is possible and the report says why
//!      ([`NoReset`]);
//! 4. COMMAND = 0 again (a reset already cleared it). Like the FLR path,
//!    nothing else is put back: the function's next owner programs its
//!    BARs (`vpci::program`) and its driver the rest.
//!
//! The platform only maps the ECAM window and performs the accesses
//! ([`ConfigSpace`]); waits are measured on its counter.

use crate::dtb::PcieInfo;
use crate::exit::Hw;
use alloc::vec::Vec;
use core::fmt;

/// A function's address on the bus.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Bdf {
    pub bus: u8,
    pub dev: u8,
    pub func: u8,
}

impl Bdf {
    /// Its requester ID (PCIe: bus [15:8], device [7:3], function [2:0]),
    /// what an SMMU's and an ITS's ID maps start from.
    pub const fn rid(self) -> u16 {
        (self.bus as u16) << 8 | (self.dev as u16) << 3 | self.func as u16
    }

    /// Offset of its 4 KiB configuration space in an ECAM window whose
    /// first bus is `first_bus`.
    pub fn ecam_offset(self, first_bus: u8) -> u64 {
        (u64::from(self.bus - first_bus) << 20)
            | (u64::from(self.dev) << 15)
            | (u64::from(self.func) << 12)
    }
}

impl fmt::Display for Bdf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:02x}:{:02x}.{}", self.bus, self.dev, self.func)
    }
}

/// Configuration-space access and the clock the waits use. `width` is 1, 2
/// or 4 and `offset` is aligned to it.
pub trait ConfigSpace {
    fn read(&mut self, bdf: Bdf, offset: u16, width: u8) -> u32;
    fn write(&mut self, bdf: Bdf, offset: u16, width: u8, value: u32);
    /// A free-running counter and its frequency (Hz).
    fn now(&mut self) -> u64;
    fn frequency(&self) -> u64;
}

// Type 0/1 header registers (PCI Local Bus 3.0, 6.1).
pub(crate) const VENDOR_ID: u16 = 0x00;
pub(crate) const COMMAND: u16 = 0x04;
pub(crate) const STATUS: u16 = 0x06;
pub(crate) const CLASS_REV: u16 = 0x08;
pub(crate) const HEADER_TYPE: u16 = 0x0e;
pub(crate) const CAP_PTR: u16 = 0x34;
pub(crate) const STATUS_CAP_LIST: u32 = 1 << 4;
pub(crate) const HEADER_MULTI_FUNCTION: u32 = 0x80;
/// A type 1 (PCI-to-PCI bridge) header's Secondary and Subordinate Bus
/// Numbers.
const SECONDARY_BUS: u16 = 0x19;
const SUBORDINATE_BUS: u16 = 0x1a;
/// A type 1 header's Bridge Control (PCI-to-PCI Bridge 1.2, 3.2.5.18) and
/// its bit 6, Secondary Bus Reset.
pub(crate) const BRIDGE_CONTROL: u16 = 0x3e;
pub(crate) const BRIDGE_CTL_BUS_RESET: u32 = 1 << 6;
/// Class code 0x06: bridge devices (host, PCI-PCI, ...).
pub(crate) const CLASS_BRIDGE: u32 = 0x06;

// Capability IDs.
pub(crate) const CAP_PM: u32 = 0x01;
pub(crate) const CAP_MSI: u32 = 0x05;
pub(crate) const CAP_VENDOR: u32 = 0x09;
pub(crate) const CAP_EXP: u32 = 0x10;
pub(crate) const CAP_MSIX: u32 = 0x11;
/// MSI Message Control bit 0: MSI Enable.
pub(crate) const MSI_ENABLE: u32 = 1 << 0;
/// MSI-X Message Control bit 15: MSI-X Enable.
pub(crate) const MSIX_ENABLE: u32 = 1 << 15;
/// PCIe capability: Device Capabilities (+4) bit 28, FLR capable.
const EXP_DEVCAP: u16 = 4;
const DEVCAP_FLR: u32 = 1 << 28;
/// Device Control (+8) bit 15: Initiate Function Level Reset.
pub(crate) const EXP_DEVCTL: u16 = 8;
const DEVCTL_FLR: u32 = 1 << 15;
/// Device Status (+0xa) bit 5: Transactions Pending.
const EXP_DEVSTA: u16 = 0xa;
const DEVSTA_TRPND: u32 = 1 << 5;

/// The wait after Initiate FLR before the function may be accessed (PCIe
/// base specification 6.6.2).
pub const FLR_WAIT_MS: u64 = 100;
/// PCI Power Management: PMCSR at +4 of the capability; PowerState in bits
/// 1:0 (D0 = 0, D3hot = 3); No_Soft_Reset in bit 3.
pub(crate) const PM_CSR: u16 = 4;
pub(crate) const PMCSR_STATE: u32 = 0b11;
pub(crate) const PMCSR_D3HOT: u32 = 0b11;
pub(crate) const PMCSR_NO_SOFT_RESET: u32 = 1 << 3;
/// The wait after a write that moves a function to D3hot or from D3hot to
/// D0 before it may be accessed again (PCI PM 1.2, table 5-6).
pub const PM_WAIT_MS: u64 = 10;
/// How long Secondary Bus Reset is held (at least 1 ms, PCI-to-PCI Bridge
/// 1.2, 3.2.5.18; Linux holds it 2 ms), and the wait after it is cleared
/// before the functions behind may be accessed (as after an FLR).
pub const SBR_HOLD_MS: u64 = 2;
pub const SBR_WAIT_MS: u64 = FLR_WAIT_MS;
/// How long pending transactions may delay an FLR, and a function may take
/// to answer configuration reads after one, before it is reported.
const FLR_PENDING_MS: u64 = 100;
const FLR_READY_MS: u64 = 1000;
/// How long a virtio device may take to read back device_status 0.
const VIRTIO_RESET_MS: u64 = 100;

// Virtio over PCI (virtio 1.x, 4.1).
const VIRTIO_VENDOR: u16 = 0x1af4;
/// Transitional (0x1000-0x103f) and modern (0x1040-0x107f) device IDs.
const VIRTIO_DEVICES: core::ops::RangeInclusive<u16> = 0x1000..=0x107f;
/// virtio_pci_cap: cfg_type at +3, bar at +4, offset at +8.
const VIRTIO_CAP_CFG_TYPE: u16 = 3;
const VIRTIO_CAP_BAR: u16 = 4;
const VIRTIO_CAP_OFFSET: u16 = 8;
const VIRTIO_CAP_LENGTH: u16 = 12;
/// virtio_pci_cfg_cap.pci_cfg_data, after the 16-byte virtio_pci_cap.
const VIRTIO_CFG_DATA: u16 = 16;
const VIRTIO_PCI_CAP_COMMON_CFG: u32 = 1;
const VIRTIO_PCI_CAP_PCI_CFG: u32 = 5;
/// device_status in virtio_pci_common_cfg.
const VIRTIO_DEVICE_STATUS: u32 = 20;

/// What was found at one function and what was done to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Quiesced {
    pub bdf: Bdf,
    pub vendor: u16,
    pub device: u16,
    /// Class code (base, sub, programming interface).
    pub class: u32,
    /// COMMAND as found.
    pub command: u16,
    /// MSI / MSI-X were enabled and have been disabled.
    pub msi_was_on: bool,
    pub msix_was_on: bool,
    pub reset: ResetDone,
    /// Counter ticks the function took.
    pub ticks: u64,
}

/// The reset a function got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetDone {
    /// A bridge: not touched (its secondary buses are scanned on their own).
    Bridge,
    /// Function Level Reset; `ready` = it answered configuration reads
    /// within [`FLR_READY_MS`] after the wait.
    Flr { ready: bool },
    /// Virtio device reset; `status` as found, `done` = it read back 0.
    Virtio { status: u8, done: bool },
    /// Power-management reset (D3hot, then D0); `ready` as for an FLR.
    PowerManagement { ready: bool },
    /// Secondary bus reset by `bridge`; `ready` as for an FLR.
    SecondaryBus { bridge: Bdf, ready: bool },
    /// None is available: bus mastering and decoding are off, nothing
    /// more can be done from configuration space; why no bus reset.
    NoMethod(NoReset),
}

/// Why a function got no secondary bus reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoReset {
    /// No PCI-to-PCI bridge reached through the ECAM has the function's
    /// bus as its secondary bus (it sits on the host bridge's root bus).
    NoBridge,
    /// `other` is on the same bus: it would be reset too.
    NotAlone { bridge: Bdf, other: Bdf },
    /// `other`, behind the same bridge, is not the resetting owner's.
    Foreign { bridge: Bdf, other: Bdf },
}

impl fmt::Display for NoReset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoReset::NoBridge => f.write_str("no bridge above it to reset its bus"),
            NoReset::NotAlone { bridge, other } => {
                write!(f, "bus reset by {bridge} refused: {other} shares its bus")
            }
            NoReset::Foreign { bridge, other } => write!(
                f,
                "bus reset by {bridge} refused: {other} behind it is another owner's"
            ),
        }
    }
}

/// What a secondary bus reset may reach: the buses configuration requests
/// reach (the host bridge's, as [`functions`] walks them) and who holds
/// each function.
pub struct ResetScope<'a> {
    pub buses: (u8, u8),
    /// Whether the function at a BDF is not the resetting owner's (another
    /// partition's, one the hypervisor keeps, or one nobody was given).
    pub foreign: &'a dyn Fn(Bdf) -> bool,
    /// [`functions`] on `buses`, walked at the first need ([`quiesce_all`]'s
    /// start, or the first bus reset considered) and kept for the rest of
    /// the call: one walk however many functions lack FLR.
    reached: core::cell::OnceCell<Vec<Bdf>>,
}

impl<'a> ResetScope<'a> {
    pub fn new(buses: (u8, u8), foreign: &'a dyn Fn(Bdf) -> bool) -> Self {
        ResetScope {
            buses,
            foreign,
            reached: core::cell::OnceCell::new(),
        }
    }

    /// The functions on `buses`, walked once.
    fn reached(&self, cfg: &mut impl ConfigSpace) -> &[Bdf] {
        self.reached.get_or_init(|| functions(cfg, self.buses))
    }
}

impl Quiesced {
    /// Whether the function ended in its reset state as far as the
    /// hypervisor can tell.
    pub fn is_reset(&self) -> bool {
        matches!(
            self.reset,
            ResetDone::Bridge
                | ResetDone::Flr { ready: true }
                | ResetDone::Virtio { done: true, .. }
                | ResetDone::PowerManagement { ready: true }
                | ResetDone::SecondaryBus { ready: true, .. }
        )
    }
}

impl fmt::Display for Quiesced {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "pci {} {:04x}:{:04x} class {:06x}: command {:#06x}",
            self.bdf, self.vendor, self.device, self.class, self.command
        )?;
        if self.msi_was_on {
            f.write_str(", MSI off")?;
        }
        if self.msix_was_on {
            f.write_str(", MSI-X off")?;
        }
        match self.reset {
            ResetDone::Bridge => f.write_str(", bridge: left alone"),
            ResetDone::Flr { ready: true } => f.write_str(" -> 0, function level reset"),
            ResetDone::Flr { ready: false } => {
                f.write_str(" -> 0, function level reset: NOT READY after 1 s")
            }
            ResetDone::Virtio { status, done: true } => {
                write!(f, " -> 0, virtio reset (status {status:#04x} -> 0)")
            }
            ResetDone::Virtio {
                status,
                done: false,
            } => write!(
                f,
                " -> 0, virtio reset: status {status:#04x} did NOT read back 0"
            ),
            ResetDone::PowerManagement { ready: true } => {
                f.write_str(" -> 0, power-management reset (D3hot -> D0)")
            }
            ResetDone::PowerManagement { ready: false } => {
                f.write_str(" -> 0, power-management reset (D3hot -> D0): NOT READY after 1 s")
            }
            ResetDone::SecondaryBus {
                bridge,
                ready: true,
            } => write!(f, " -> 0, secondary bus reset by {bridge}"),
            ResetDone::SecondaryBus {
                bridge,
                ready: false,
            } => write!(
                f,
                " -> 0, secondary bus reset by {bridge}: NOT READY after 1 s"
            ),
            ResetDone::NoMethod(why) => write!(
                f,
                " -> 0, no reset method (bus master off only; no FLR, no PM reset, {why})"
            ),
        }
    }
}

/// Quiesce every function [`functions`] finds on buses `buses`, in that
/// order; `foreign` as [`ResetScope::foreign`].
pub fn quiesce_all(
    cfg: &mut impl ConfigSpace,
    buses: (u8, u8),
    foreign: &dyn Fn(Bdf) -> bool,
) -> Vec<Quiesced> {
    let scope = ResetScope::new(buses, foreign);
    let found = scope.reached(cfg).to_vec();
    found
        .into_iter()
        .map(|bdf| quiesce_function(cfg, bdf, &scope))
        .collect()
}

/// Every function configuration requests reach on buses `buses`, in bus,
/// device, function order: the host bridge's first bus, then the
/// secondary bus of every PCI-to-PCI bridge (header type 1) found on a
/// reached bus, each once; functions 1-7 only where function 0 says it is
/// multi-function. A bus no bridge names is never read: on QEMU virt (one
/// bus of 256 in the ECAM) this is 32 slots instead of 8192, about 1.4
/// million instructions less before the first partition starts. A bridge
/// firmware left without bus numbers (secondary 0) reaches nothing.
pub fn functions(cfg: &mut impl ConfigSpace, buses: (u8, u8)) -> Vec<Bdf> {
    let mut found = Vec::new();
    let mut reached = alloc::vec![buses.0];
    let mut next = 0;
    while let Some(&bus) = reached.get(next) {
        next += 1;
        for dev in 0..32 {
            let f0 = Bdf { bus, dev, func: 0 };
            if !present(cfg, f0) {
                continue;
            }
            let multi = cfg.read(f0, HEADER_TYPE, 1) & HEADER_MULTI_FUNCTION != 0;
            for func in 0..if multi { 8 } else { 1 } {
                let bdf = Bdf { bus, dev, func };
                if func > 0 && !present(cfg, bdf) {
                    continue;
                }
                found.push(bdf);
                let Some(secondary) = secondary_bus(cfg, bdf) else {
                    continue;
                };
                if secondary > bus
                    && (buses.0..=buses.1).contains(&secondary)
                    && !reached.contains(&secondary)
                {
                    reached.push(secondary);
                }
            }
        }
    }
    found
}

/// The Secondary Bus Number of the PCI-to-PCI bridge (header type 1) at
/// `bdf`; None for any other header.
fn secondary_bus(cfg: &mut impl ConfigSpace, bdf: Bdf) -> Option<u8> {
    (cfg.read(bdf, HEADER_TYPE, 1) & 0x7f == 1).then(|| cfg.read(bdf, SECONDARY_BUS, 1) as u8)
}

/// A function answers at `bdf`. An SR-IOV VF's vendor and device ID read
/// 0xffff (PCIe 9.3.4.1.1-2); its class code does not, where nothing at
/// all answers with all-ones.
pub(crate) fn present(cfg: &mut impl ConfigSpace, bdf: Bdf) -> bool {
    let vendor = cfg.read(bdf, VENDOR_ID, 2) as u16;
    vendor != 0 && (vendor != 0xffff || cfg.read(bdf, CLASS_REV, 4) != u32::MAX)
}

/// Quiesce and reset one present function (steps 1-4 of the module's
/// description); `scope` bounds a secondary bus reset.
pub fn quiesce_function(cfg: &mut impl ConfigSpace, bdf: Bdf, scope: &ResetScope<'_>) -> Quiesced {
    let start = cfg.now();
    let id = cfg.read(bdf, VENDOR_ID, 4);
    let (vendor, device) = (id as u16, (id >> 16) as u16);
    let class = cfg.read(bdf, CLASS_REV, 4) >> 8;
    let command = cfg.read(bdf, COMMAND, 2) as u16;
    let mut q = Quiesced {
        bdf,
        vendor,
        device,
        class,
        command,
        msi_was_on: false,
        msix_was_on: false,
        reset: ResetDone::Bridge,
        ticks: 0,
    };
    if class >> 16 == CLASS_BRIDGE {
        return q;
    }
    cfg.write(bdf, COMMAND, 2, 0);
    let caps = capabilities(cfg, bdf);
    for &(id, at) in &caps {
        match id {
            CAP_MSI => q.msi_was_on |= clear_bit(cfg, bdf, at + 2, MSI_ENABLE),
            CAP_MSIX => q.msix_was_on |= clear_bit(cfg, bdf, at + 2, MSIX_ENABLE),
            _ => {}
        }
    }
    // The first method the function has, in this order; each looked for
    // only when the ones before it are missing.
    let cap = |id: u32| caps.iter().find(|&&(c, _)| c == id).map(|&(_, at)| at);
    let is_virtio = vendor == VIRTIO_VENDOR && VIRTIO_DEVICES.contains(&device);
    q.reset = if let Some(exp) =
        cap(CAP_EXP).filter(|&at| cfg.read(bdf, at + EXP_DEVCAP, 4) & DEVCAP_FLR != 0)
    {
        ResetDone::Flr {
            ready: function_level_reset(cfg, bdf, exp),
        }
    } else if let Some(w) = is_virtio.then(|| virtio_windows(cfg, bdf, &caps)).flatten() {
        virtio_reset(cfg, bdf, w)
    } else if let Some(pm) =
        cap(CAP_PM).filter(|&at| cfg.read(bdf, at + PM_CSR, 2) & PMCSR_NO_SOFT_RESET == 0)
    {
        ResetDone::PowerManagement {
            ready: power_management_reset(cfg, bdf, pm),
        }
    } else {
        match bus_reset_bridge(cfg, bdf, scope) {
            Ok(bridge) => ResetDone::SecondaryBus {
                bridge,
                ready: secondary_bus_reset(cfg, bridge, bdf),
            },
            Err(why) => ResetDone::NoMethod(why),
        }
    };
    cfg.write(bdf, COMMAND, 2, 0);
    q.ticks = cfg.now().wrapping_sub(start);
    q
}

/// Clears `bit` in the 16-bit register at `offset`; whether it was set.
fn clear_bit(cfg: &mut impl ConfigSpace, bdf: Bdf, offset: u16, bit: u32) -> bool {
    let v = cfg.read(bdf, offset, 2);
    if v & bit == 0 {
        return false;
    }
    cfg.write(bdf, offset, 2, v & !bit);
    true
}

/// The capability list: (ID, offset), at most 48 entries (a malformed list
/// that loops ends there).
pub(crate) fn capabilities(cfg: &mut impl ConfigSpace, bdf: Bdf) -> Vec<(u32, u16)> {
    let mut caps = Vec::new();
    if cfg.read(bdf, STATUS, 2) & STATUS_CAP_LIST == 0 {
        return caps;
    }
    let mut at = (cfg.read(bdf, CAP_PTR, 1) & 0xfc) as u16;
    while at >= 0x40 && caps.len() < 48 {
        let head = cfg.read(bdf, at, 2);
        caps.push((head & 0xff, at));
        at = ((head >> 8) & 0xfc) as u16;
    }
    caps
}

/// Counter ticks in `ms` milliseconds.
fn ticks(cfg: &impl ConfigSpace, ms: u64) -> u64 {
    cfg.frequency() / 1000 * ms
}

/// Polls `done` until it holds or `ms` pass; whether it held.
fn wait_for(
    cfg: &mut impl ConfigSpace,
    ms: u64,
    mut done: impl FnMut(&mut dyn FnMut(u16, u8) -> u32) -> bool,
    bdf: Bdf,
) -> bool {
    let deadline = cfg.now() + ticks(cfg, ms);
    loop {
        if done(&mut |offset, width| cfg.read(bdf, offset, width)) {
            return true;
        }
        if cfg.now() >= deadline {
            return false;
        }
    }
}

fn function_level_reset(cfg: &mut impl ConfigSpace, bdf: Bdf, exp: u16) -> bool {
    // Linux waits for pending transactions before an FLR too
    // (pci_wait_for_pending_transaction); if they do not drain, reset anyway.
    let _ = wait_for(
        cfg,
        FLR_PENDING_MS,
        |read| read(exp + EXP_DEVSTA, 2) & DEVSTA_TRPND == 0,
        bdf,
    );
    let ctl = cfg.read(bdf, exp + EXP_DEVCTL, 2);
    cfg.write(bdf, exp + EXP_DEVCTL, 2, ctl | DEVCTL_FLR);
    sleep(cfg, FLR_WAIT_MS);
    wait_ready(cfg, bdf)
}

/// Waits `ms` milliseconds on the counter, touching no function.
fn sleep(cfg: &mut impl ConfigSpace, ms: u64) {
    let until = cfg.now() + ticks(cfg, ms);
    while cfg.now() < until {}
}

/// Polls `bdf` until it answers configuration reads (as [`present`]: a
/// VF's IDs read 0xffff even when it is ready, its class code does not),
/// for at most [`FLR_READY_MS`].
fn wait_ready(cfg: &mut impl ConfigSpace, bdf: Bdf) -> bool {
    wait_for(
        cfg,
        FLR_READY_MS,
        |read| {
            let vendor = read(VENDOR_ID, 2);
            vendor != 0 && (vendor != 0xffff || read(CLASS_REV, 4) != u32::MAX)
        },
        bdf,
    )
}

/// D3hot, then D0, each followed by [`PM_WAIT_MS`]; then the function is
/// waited for. PMCSR's other bits are written back as read (PME_Status is
/// write-one-to-clear: a PME the old owner left pending goes too).
fn power_management_reset(cfg: &mut impl ConfigSpace, bdf: Bdf, pm: u16) -> bool {
    let csr = cfg.read(bdf, pm + PM_CSR, 2) & !PMCSR_STATE;
    cfg.write(bdf, pm + PM_CSR, 2, csr | PMCSR_D3HOT);
    sleep(cfg, PM_WAIT_MS);
    cfg.write(bdf, pm + PM_CSR, 2, csr);
    sleep(cfg, PM_WAIT_MS);
    wait_ready(cfg, bdf)
}

/// The PCI-to-PCI bridge whose secondary bus reset may reset `bdf`: the
/// one reached on `scope.buses` whose secondary bus is `bdf`'s, with
/// `bdf` alone on that bus and nothing behind it (secondary to subordinate
/// buses) another owner's.
pub fn bus_reset_bridge(
    cfg: &mut impl ConfigSpace,
    bdf: Bdf,
    scope: &ResetScope<'_>,
) -> Result<Bdf, NoReset> {
    let reached = scope.reached(cfg);
    let bridge = reached
        .iter()
        .copied()
        .find(|&b| b.bus < bdf.bus && secondary_bus(cfg, b) == Some(bdf.bus))
        .ok_or(NoReset::NoBridge)?;
    let subordinate = (cfg.read(bridge, SUBORDINATE_BUS, 1) as u8).max(bdf.bus);
    let behind = reached
        .iter()
        .copied()
        .filter(|&b| b != bdf && (bdf.bus..=subordinate).contains(&b.bus));
    let mut alone = Ok(bridge);
    for other in behind {
        if (scope.foreign)(other) {
            return Err(NoReset::Foreign { bridge, other });
        }
        if other.bus == bdf.bus && alone.is_ok() {
            alone = Err(NoReset::NotAlone { bridge, other });
        }
    }
    alone
}

/// Secondary Bus Reset on `bridge` held [`SBR_HOLD_MS`], cleared, then
/// [`SBR_WAIT_MS`] and `bdf` waited for.
fn secondary_bus_reset(cfg: &mut impl ConfigSpace, bridge: Bdf, bdf: Bdf) -> bool {
    let ctl = cfg.read(bridge, BRIDGE_CONTROL, 2) & !BRIDGE_CTL_BUS_RESET;
    cfg.write(bridge, BRIDGE_CONTROL, 2, ctl | BRIDGE_CTL_BUS_RESET);
    sleep(cfg, SBR_HOLD_MS);
    cfg.write(bridge, BRIDGE_CONTROL, 2, ctl);
    sleep(cfg, SBR_WAIT_MS);
    wait_ready(cfg, bdf)
}

/// Where a virtio function's common configuration is, and its
/// configuration-space access window.
#[derive(Debug, Clone, Copy)]
struct VirtioWindows {
    /// BAR and offset of virtio_pci_common_cfg.
    common: (u8, u32),
    /// Offset of the VIRTIO_PCI_CAP_PCI_CFG capability.
    window: u16,
}

fn virtio_windows(
    cfg: &mut impl ConfigSpace,
    bdf: Bdf,
    caps: &[(u32, u16)],
) -> Option<VirtioWindows> {
    let mut common = None;
    let mut window = None;
    for &(id, at) in caps {
        if id != CAP_VENDOR {
            continue;
        }
        match cfg.read(bdf, at + VIRTIO_CAP_CFG_TYPE, 1) {
            VIRTIO_PCI_CAP_COMMON_CFG if common.is_none() => {
                let bar = cfg.read(bdf, at + VIRTIO_CAP_BAR, 1) as u8;
                let offset = cfg.read(bdf, at + VIRTIO_CAP_OFFSET, 4);
                common = Some((bar, offset));
            }
            VIRTIO_PCI_CAP_PCI_CFG if window.is_none() => window = Some(at),
            _ => {}
        }
    }
    Some(VirtioWindows {
        common: common?,
        window: window?,
    })
}

/// Points the PCI_CFG window at device_status and returns the data
/// register's offset.
fn aim_at_status(cfg: &mut impl ConfigSpace, bdf: Bdf, w: VirtioWindows) -> u16 {
    let (bar, offset) = w.common;
    cfg.write(bdf, w.window + VIRTIO_CAP_BAR, 1, u32::from(bar));
    cfg.write(
        bdf,
        w.window + VIRTIO_CAP_OFFSET,
        4,
        offset + VIRTIO_DEVICE_STATUS,
    );
    cfg.write(bdf, w.window + VIRTIO_CAP_LENGTH, 4, 1);
    w.window + VIRTIO_CFG_DATA
}

fn virtio_reset(cfg: &mut impl ConfigSpace, bdf: Bdf, w: VirtioWindows) -> ResetDone {
    let data = aim_at_status(cfg, bdf, w);
    let status = cfg.read(bdf, data, 1) as u8;
    cfg.write(bdf, data, 1, 0);
    // virtio 1.x 4.1.4.3.2: the driver must wait for device_status to read
    // back 0 before reinitialising the device.
    let done = wait_for(cfg, VIRTIO_RESET_MS, |read| read(data, 1) & 0xff == 0, bdf);
    ResetDone::Virtio { status, done }
}

/// A host bridge's ECAM window reached through the platform's [`Hw`].
pub struct Ecam<'h, H: Hw> {
    hw: &'h mut H,
    base: u64,
    size: u64,
    first_bus: u8,
}

impl<'h, H: Hw> Ecam<'h, H> {
    pub fn new(hw: &'h mut H, bridge: &PcieInfo) -> Self {
        Ecam {
            hw,
            base: bridge.ecam.0,
            size: bridge.ecam.1,
            first_bus: bridge.bus_range.0.min(255) as u8,
        }
    }

    /// The buses the window reaches: the bridge's bus range, cut to the
    /// window's size (1 MiB per bus).
    pub fn buses(&self) -> (u8, u8) {
        let in_window = (self.size >> 20).max(1) - 1;
        let last = (u64::from(self.first_bus) + in_window).min(255) as u8;
        (self.first_bus, last)
    }

    fn address(&self, bdf: Bdf, offset: u16, width: u8) -> Option<u64> {
        if bdf.bus < self.first_bus || !offset.is_multiple_of(u16::from(width)) || offset >= 4096 {
            return None;
        }
        let at = bdf.ecam_offset(self.first_bus) + u64::from(offset);
        (at + u64::from(width) <= self.size).then_some(self.base + at)
    }
}

impl<H: Hw> ConfigSpace for Ecam<'_, H> {
    fn read(&mut self, bdf: Bdf, offset: u16, width: u8) -> u32 {
        match self.address(bdf, offset, width) {
            Some(pa) => self.hw.config_read(pa, width),
            None => u32::MAX >> (32 - 8 * u32::from(width.clamp(1, 4))),
        }
    }
    fn write(&mut self, bdf: Bdf, offset: u16, width: u8, value: u32) {
        if let Some(pa) = self.address(bdf, offset, width) {
            self.hw.config_write(pa, width, value);
        }
    }
    fn now(&mut self) -> u64 {
        self.hw.now()
    }
    fn frequency(&self) -> u64 {
        self.hw.counter_frequency()
    }
}

/// Quiesce every function behind `bridge` (the one the partition `name`
/// owns), logging one line per function and the total time; `foreign` as
/// [`ResetScope::foreign`] (the functions other partitions were given).
pub fn quiesce_bridge(
    hw: &mut impl Hw,
    name: &str,
    bridge: &PcieInfo,
    foreign: &dyn Fn(Bdf) -> bool,
) -> Vec<Quiesced> {
    let start = hw.now();
    let mut ecam = Ecam::new(hw, bridge);
    let buses = ecam.buses();
    let done = quiesce_all(&mut ecam, buses, foreign);
    let ticks = hw.now().wrapping_sub(start);
    let freq = hw.counter_frequency().max(1);
    for q in &done {
        hw.log(format_args!(
            "partition {name}: {q} ({} us)",
            u128::from(q.ticks) * 1_000_000 / u128::from(freq)
        ));
    }
    hw.log(format_args!(
        "partition {name}: {} PCI functions on buses {:02x}-{:02x} quiesced in {} us",
        done.len(),
        buses.0,
        buses.1,
        u128::from(ticks) * 1_000_000 / u128::from(freq)
    ));
    done
}

#[cfg(test)]
#[path = "pci_tests.rs"]
mod tests;
