//! A GICv5 ITS behind the core's ITS seam (`its::ItsQueue`): on a GICv5
//! host a partition with the GICv3-compatible interface keeps its GICv3
//! virtual ITS (`vgic::vits`) and the commands the core accepts from it
//! (`vgic::pits`: its own DeviceIDs only, each event to an LPI of the
//! machine-wide pool, each LPI routed to the vCPU it is for, `LpiRoutes`)
//! are applied here on a GICv5 ITS instead of a GICv3 one. A GICv5 ITS has
//! no command queue, collections or property table: what a command means
//! is decided here as [`Its5Op`]s (table entries, invalidates, an LPI's
//! target PE, syncs) and the driver (`pinfold_drivers::gicv5_its`) only
//! encodes them.
//!
//! The translation, command by command (ICID = the CPU index, as
//! `its::ItsSet` maps collections):
//! - MAPD V=1: the device's table entry names its ITT (the ITT memory
//!   `pits` took for it, 8 bytes an event) and EventID bits; V=0: its
//!   remaining events' LPIs are disabled, then its entry invalidated;
//! - MAPTI: the LPI (`vgic5::IrsLayout::msi_lpi` of the core's GICv3 LPI
//!   number) is targeted at the CPU's IAFFID and enabled *before* its ITT
//!   entry is written, so the ITS never translates to an LPI the IRS does
//!   not route; MOVI: the LPI retargeted;
//! - DISCARD: the ITT entry invalidated, the device synced (ITS_SYNCR: the
//!   events the ITS took before are in the IRS), then the LPI disabled;
//! - INT / CLEAR: the LPI made pending / not pending (GIC CDPEND);
//! - MAPC, INV, INVALL, SYNC: nothing (the target is in each LPI, the
//!   enable is its CDEN, and every step above waits for the ITS to be
//!   idle).
//!
//! Refused, named ([`Its5Refusal`], counted and kept for the log), and
//! nothing sent: a DeviceID beyond the ITS's device table, EventID bits
//! beyond the ITS's, an event of a device not mapped or beyond its bits,
//! an LPI outside the MSI pool, an ICID no CPU has, and any GICv4 command
//! (a GICv5 ITS offers the core no direct vLPIs: its typer says Virtual =
//! 0). `pits` already refuses these from a guest; here they would be the
//! core's own mistakes, and the ITS's tables are not trusted to catch them.
//!
//! No lock of its own: an [`V5Its`] is one ITS's queue inside its
//! `ItsUnit`, behind that ITS's counted lock in `its::ItsSet`.
//!
//! Delivery to a partition with the GICv5 interface (its vLPIs made
//! pending by EL2, or an ITT entry naming a VM's virtual LPI, ITTE.VIRTUAL
//! and VM_ID) is not built: the GIC VD* instructions' encodings are not
//! confirmed (docs/GICV5.md).

use crate::its::ItsQueue;
use crate::vgic::pits::{ItsCmd, ItsTyper};
use crate::vgic::v40::V4Cmd;
use crate::vgic5::IrsLayout;
use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::fmt;

/// Where in a GICv5 ITS's translate frame a device writes its MSI:
/// Linux's MSI address is the frame's base (`its_translate_frame_address`,
/// `gicv5_its_compose_msi_msg`). The register's name and offset in IHI
/// 0101 were not read; a guest's GICv3 doorbell is at 0x40 in its page,
/// so `its::msi_path_to` refuses the SMMU path to such a frame
/// (`NoMsi::TranslaterOffset`).
pub const TRANSLATER_OFFSET: u64 = 0;

/// One step on a GICv5 ITS or the IRS, for the driver to apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Its5Op {
    /// DeviceID `device`'s table entry: its linear ITT at `itt` of
    /// `event_bits`, or (None) invalid; then ITS_INV_DEVICER.
    Device {
        device: u32,
        itt: Option<u64>,
        event_bits: u8,
    },
    /// Event `event` of `device` (ITT at `itt`) to physical LPI `lpi`, or
    /// (None) unmapped; then ITS_INV_EVENTR.
    Event {
        device: u32,
        itt: u64,
        event: u32,
        lpi: Option<u32>,
    },
    /// Physical LPI `lpi` targeted at the PE `iaffid` and enabled (GIC
    /// CDPRI, CDHM edge, CDAFF, CDEN), or (None) disabled.
    Target { lpi: u32, iaffid: Option<u16> },
    /// Physical LPI `lpi` made pending or not (GIC CDPEND).
    Pend { lpi: u32, pending: bool },
    /// ITS_SYNCR for `device`.
    Sync { device: u32 },
}

/// A command the GICv5 ITS will not take, by what is wrong with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Its5Refusal {
    /// A DeviceID beyond the device table, or EventID bits beyond the
    /// ITS's.
    DeviceOutOfRange { device: u32, event_bits: u8 },
    /// A command for a device no MAPD mapped, or an event beyond its bits
    /// or not mapped.
    NoSuchEvent { device: u32, event: u32 },
    /// An INTID that is not one of the MSI pool's LPIs.
    NotAnMsiLpi { intid: u32 },
    /// An ICID no CPU has.
    NoSuchCpu { icid: u16 },
    /// A GICv4 command: a GICv5 ITS has no vPEs for the core.
    Gicv4,
    /// The driver said the ITS did not finish (an IDLE bit never came).
    Stuck,
}

impl fmt::Display for Its5Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Its5Refusal::DeviceOutOfRange { device, event_bits } => write!(
                f,
                "GICv5 ITS: DeviceID {device:#x} with {event_bits} EventID bits is beyond the ITS's tables: refused"
            ),
            Its5Refusal::NoSuchEvent { device, event } => write!(
                f,
                "GICv5 ITS: event {event} of DeviceID {device:#x} is not mapped: refused"
            ),
            Its5Refusal::NotAnMsiLpi { intid } => {
                write!(f, "GICv5 ITS: INTID {intid} is not an MSI pool LPI: refused")
            }
            Its5Refusal::NoSuchCpu { icid } => {
                write!(f, "GICv5 ITS: ICID {icid} names no CPU: refused")
            }
            Its5Refusal::Gicv4 => write!(f, "GICv5 ITS: a GICv4 command: refused"),
            Its5Refusal::Stuck => write!(f, "GICv5 ITS: the ITS did not become idle"),
        }
    }
}

/// The ITS's GITS_TYPER as the core's ITS code sizes things by: 8-byte
/// ITT entries, the ITS's EventID and DeviceID bits (ITS_IDR2, the device
/// table's), no collections to place (PTA = 0: an RDbase is the CPU index)
/// and no GICv4 (Virtual = 0, no vSGIs).
pub fn typer(device_bits: u8, event_bits: u8) -> ItsTyper {
    ItsTyper {
        itt_entry_bytes: 8,
        id_bits: event_bits,
        device_bits,
        pta: false,
        hcc: 0,
        virt: false,
        vsgi: false,
    }
}

/// What applying needs from the platform: the driver over one ITS (and
/// the CPU's GIC instructions for an LPI's target), and hypervisor memory
/// for ITTs. A fake in the tests.
pub trait Its5Hw: Send {
    /// Applies one step; false when the ITS did not finish it.
    fn apply(&mut self, op: &Its5Op) -> bool;
    /// Zeroed, 256-byte aligned memory no guest can reach, for an ITT.
    fn alloc_itt(&mut self, bytes: usize) -> Option<u64>;
    fn free_itt(&mut self, pa: u64, bytes: usize);
}

/// One GICv5 ITS as an [`ItsQueue`]: what its devices and events are
/// mapped to, and the refusals so far.
pub struct V5Its<H: Its5Hw> {
    hw: H,
    typer: ItsTyper,
    msi: IrsLayout,
    /// Each CPU's IAFFID, by index (= ICID).
    iaffids: Vec<u16>,
    /// Mapped devices: their ITT and EventID bits.
    devices: BTreeMap<u32, (u64, u8)>,
    /// Mapped events: their physical LPI.
    events: BTreeMap<(u32, u32), u32>,
    refusals: u64,
    last_refusal: Option<Its5Refusal>,
}

impl<H: Its5Hw> V5Its<H> {
    /// The ITS the platform brought up (its `typer`, [`typer`]), the
    /// layout whose MSI pool its events map to, each CPU's IAFFID.
    pub fn new(hw: H, typer: ItsTyper, msi: IrsLayout, iaffids: Vec<u16>) -> V5Its<H> {
        V5Its {
            hw,
            typer,
            msi,
            iaffids,
            devices: BTreeMap::new(),
            events: BTreeMap::new(),
            refusals: 0,
            last_refusal: None,
        }
    }

    pub fn refusals(&self) -> u64 {
        self.refusals
    }

    pub fn last_refusal(&self) -> Option<Its5Refusal> {
        self.last_refusal
    }

    pub fn hw(&self) -> &H {
        &self.hw
    }

    pub fn hw_mut(&mut self) -> &mut H {
        &mut self.hw
    }

    fn refuse(&mut self, why: Its5Refusal) {
        self.refusals += 1;
        self.last_refusal = Some(why);
    }

    fn iaffid(&self, icid: u16) -> Result<u16, Its5Refusal> {
        self.iaffids
            .get(usize::from(icid))
            .copied()
            .ok_or(Its5Refusal::NoSuchCpu { icid })
    }

    fn event(&self, device: u32, event: u32) -> Result<((u64, u8), Option<u32>), Its5Refusal> {
        let &(itt, bits) = self
            .devices
            .get(&device)
            .filter(|&&(_, bits)| event >> bits == 0)
            .ok_or(Its5Refusal::NoSuchEvent { device, event })?;
        Ok(((itt, bits), self.events.get(&(device, event)).copied()))
    }

    fn mapped(&self, device: u32, event: u32) -> Result<u32, Its5Refusal> {
        self.event(device, event)?
            .1
            .ok_or(Its5Refusal::NoSuchEvent { device, event })
    }

    /// What `cmd` means on a GICv5 ITS, the core's record of its devices
    /// and events updated; refused whole.
    pub fn decide(&mut self, cmd: &ItsCmd) -> Result<Vec<Its5Op>, Its5Refusal> {
        let mut ops = Vec::new();
        match *cmd {
            ItsCmd::Mapd {
                device,
                itt,
                event_bits,
                valid,
            } => {
                let bits = if valid { event_bits } else { 0 };
                if u64::from(device) >> self.typer.device_bits != 0 || bits > self.typer.id_bits {
                    return Err(Its5Refusal::DeviceOutOfRange {
                        device,
                        event_bits: bits,
                    });
                }
                for (&(_, _), &lpi) in self.events.range((device, 0)..=(device, u32::MAX)) {
                    ops.push(Its5Op::Target { lpi, iaffid: None });
                }
                self.events.retain(|&(d, _), _| d != device);
                ops.push(Its5Op::Device {
                    device,
                    itt: valid.then_some(itt),
                    event_bits: bits,
                });
                if valid {
                    self.devices.insert(device, (itt, bits));
                } else {
                    self.devices.remove(&device);
                }
            }
            ItsCmd::Mapti {
                device,
                event,
                intid,
                icid,
            } => {
                let ((itt, _), _) = self.event(device, event)?;
                let lpi = self
                    .msi
                    .msi_lpi(intid)
                    .ok_or(Its5Refusal::NotAnMsiLpi { intid })?;
                let iaffid = self.iaffid(icid)?;
                ops.push(Its5Op::Target {
                    lpi,
                    iaffid: Some(iaffid),
                });
                ops.push(Its5Op::Event {
                    device,
                    itt,
                    event,
                    lpi: Some(lpi),
                });
                self.events.insert((device, event), lpi);
            }
            ItsCmd::Movi {
                device,
                event,
                icid,
            } => {
                let lpi = self.mapped(device, event)?;
                let iaffid = self.iaffid(icid)?;
                ops.push(Its5Op::Target {
                    lpi,
                    iaffid: Some(iaffid),
                });
            }
            ItsCmd::Discard { device, event } => {
                let lpi = self.mapped(device, event)?;
                let ((itt, _), _) = self.event(device, event)?;
                ops.push(Its5Op::Event {
                    device,
                    itt,
                    event,
                    lpi: None,
                });
                ops.push(Its5Op::Sync { device });
                ops.push(Its5Op::Target { lpi, iaffid: None });
                self.events.remove(&(device, event));
            }
            ItsCmd::Int { device, event } | ItsCmd::Clear { device, event } => {
                let lpi = self.mapped(device, event)?;
                ops.push(Its5Op::Pend {
                    lpi,
                    pending: matches!(cmd, ItsCmd::Int { .. }),
                });
            }
            ItsCmd::Mapc { .. }
            | ItsCmd::Inv { .. }
            | ItsCmd::Invall { .. }
            | ItsCmd::Sync { .. } => {}
        }
        Ok(ops)
    }
}

impl<H: Its5Hw> ItsQueue for V5Its<H> {
    fn send(&mut self, cmd: &ItsCmd) {
        match self.decide(cmd) {
            Ok(ops) => {
                for op in &ops {
                    if !self.hw.apply(op) {
                        self.refuse(Its5Refusal::Stuck);
                        return;
                    }
                }
            }
            Err(why) => self.refuse(why),
        }
    }
    fn send_v4(&mut self, _cmd: &V4Cmd) {
        self.refuse(Its5Refusal::Gicv4);
    }
    fn send_words(&mut self, _words: [u64; 4]) {
        self.refuse(Its5Refusal::Gicv4);
    }
    fn alloc_itt(&mut self, bytes: usize) -> Option<u64> {
        self.hw.alloc_itt(bytes)
    }
    fn free_itt(&mut self, pa: u64, bytes: usize) {
        self.hw.free_itt(pa, bytes)
    }
    fn alloc_vpt(&mut self, _bytes: usize) -> Option<u64> {
        None
    }
    fn free_vpt(&mut self, _pa: u64, _bytes: usize) {}
}

#[cfg(test)]
mod tests;
