//! A register-level model of the GICv4.1 redistributor and ITS as far as
//! vPEs and vSGIs go: the reference the hypervisor's GICv4.1 path
//! (`pinfold_hv::vgic::v41`) is host-tested against, because no emulator
//! here has GICv4.1 vSGIs (QEMU 7.2 and 10.0 stop at GICv4.0).
//!
//! It is written from the register and command descriptions of the GIC
//! architecture specification (IHI 0069, GICv3/GICv4), apart from the
//! driver: its own constants, its own decoding, and it checks what software
//! must not do (RES0 bits written as one, UNPREDICTABLE sequences) instead of
//! trusting the driver, in the manner of a fake architecture layer. What it
//! models:
//!
//! - per redistributor (`RD_base` + `VLPI_base` frames): GICR_TYPER (PLPIS,
//!   VLPIS, Dirty, RVPEID, VSGI, Processor_Number, Affinity), GICR_VPROPBASER
//!   in its GICv4.1 layout (Valid, the shared vPE configuration table) and
//!   GICR_VPENDBASER (Valid, Dirty, PendingLast, VGrp0En/VGrp1En, vPEID in
//!   [15:0] under RVPEID). "Resident" means VPENDBASER.Valid = 1 with that
//!   vPEID on that redistributor; after a write of Valid (1 or 0) Dirty reads
//!   as 1 for `dirty_reads` reads, and only then does a newly resident vPE's
//!   pending state reach its virtual CPU interface;
//! - per ITS: GITS_CTLR (Enabled, Quiescent), GITS_TYPER (Physical, Virtual,
//!   PTA = 0 so RDbase is the Processor_Number, VMOVP, VSGI, VMAPP, SVPET),
//!   the command queue (GITS_CBASER Valid/Size, GITS_CWRITER with Retry,
//!   GITS_CREADR with Stalled) over a memory of its own, the commands VMAPP
//!   (GICv4.1 layout, its field rules checked: a vPE pending table and
//!   configuration table, VPT_size, PTZ only with Alloc, the default
//!   doorbell, RES0), VSGI (enable, priority, group, clear), VMOVP, VINVALL,
//!   VSYNC and INVDB, and GITS_SGIR (vPEID [47:32], vINTID [3:0]) in the
//!   ITS's third 64 KiB frame (`SGI_base`, +0x20000);
//! - a vSGI to a resident vPE whose SGI is enabled and whose group is
//!   enabled in VPENDBASER reaches the vCPU interface at once
//!   ([`Event::Delivered`]) and nothing runs on the receiving PE's
//!   hypervisor (no physical interrupt: [`Model::receiver_exits`] stays 0).
//!   To a non-resident vPE it stays pending in the vPE's state and is seen
//!   when the vPE is next made resident (after Dirty clears). A pending SGI
//!   is one bit, so any number of GITS_SGIR writes keeps at most 16 pending;
//! - command errors: an out-of-range or unmapped vPE ID, a target
//!   redistributor that does not exist, an unknown command. The model's
//!   ITS stalls on an error (one of the two behaviours the architecture
//!   allows): GITS_CREADR.Stalled = 1, CREADR left at the failing command,
//!   processing resumes on a GITS_CWRITER write with Retry = 1 (which meets
//!   the same command again) or a new GITS_CBASER.
//!
//! - vLPIs (GICv4.1): per ITS a device table (MAPD: DeviceID, Size, V) and
//!   each device's events (VMAPTI: EventID to a vPE mapped on that ITS and
//!   a vINTID, Dbell_pINTID 1023 only, GICv4.1 having no per-vLPI doorbell;
//!   VMOVI with D = 0; DISCARD; INV; INT; CLEAR; SYNC), checked against the
//!   device's Size and the vPE's VPT_size; a device's MSI ([`Model::translate`],
//!   the write of its EventID to GITS_TRANSLATER with the DeviceID the
//!   interconnect gives it) makes the vLPI pending in the vPE's state. It
//!   reaches the vCPU interface ([`Event::VlpiDelivered`]) only while the
//!   vPE is resident (Dirty clear) and the vLPI's byte in the vPE's VCONF
//!   table (the last VMAPP's VCONF_Addr, memory written with
//!   [`Model::mem_write_byte`]) has Enable [0] set; otherwise it stays
//!   pending and is re-examined at the next residency, INV, VINVALL or
//!   VMAPTI/VMOVI. A vLPI is always group 1: the group enables of
//!   GICR_VPENDBASER do not hold it (they are for doorbell decisions).
//!
//! Doorbells and physical LPIs are not modelled; neither rule needs them.

use std::collections::BTreeMap;

/// Register offsets and fields, as the specification names them.
pub mod reg {
    // RD_base frame.
    pub const GICR_TYPER: u64 = 0x0008;
    pub const TYPER_PLPIS: u64 = 1 << 0;
    pub const TYPER_VLPIS: u64 = 1 << 1;
    pub const TYPER_DIRTY: u64 = 1 << 2;
    pub const TYPER_RVPEID: u64 = 1 << 7;
    pub const TYPER_VSGI: u64 = 1 << 26;
    // VLPI_base frame (RD_base + 0x20000), offsets within it.
    pub const GICR_VPROPBASER: u64 = 0x0070;
    pub const GICR_VPENDBASER: u64 = 0x0078;
    pub const VPROP_VALID: u64 = 1 << 63;
    pub const VPEND_VALID: u64 = 1 << 63;
    pub const VPEND_DB: u64 = 1 << 62;
    pub const VPEND_PENDING_LAST: u64 = 1 << 61;
    pub const VPEND_DIRTY: u64 = 1 << 60;
    pub const VPEND_VGRP0EN: u64 = 1 << 59;
    pub const VPEND_VGRP1EN: u64 = 1 << 58;
    pub const VPEND_VPEID: u64 = 0xFFFF;
    /// Bits of GICR_VPENDBASER with a meaning in GICv4.1 (others RES0).
    pub const VPEND_DEFINED: u64 = VPEND_VALID
        | VPEND_DB
        | VPEND_PENDING_LAST
        | VPEND_DIRTY
        | VPEND_VGRP0EN
        | VPEND_VGRP1EN
        | VPEND_VPEID;

    // ITS control frame.
    pub const GITS_CTLR: u64 = 0x0000;
    pub const GITS_TYPER: u64 = 0x0008;
    pub const GITS_CBASER: u64 = 0x0080;
    pub const GITS_CWRITER: u64 = 0x0088;
    pub const GITS_CREADR: u64 = 0x0090;
    pub const CTLR_ENABLED: u64 = 1 << 0;
    pub const CTLR_QUIESCENT: u64 = 1 << 31;
    pub const GITS_TYPER_PHYSICAL: u64 = 1 << 0;
    pub const GITS_TYPER_VIRTUAL: u64 = 1 << 1;
    pub const GITS_TYPER_VMOVP: u64 = 1 << 37;
    pub const GITS_TYPER_VSGI: u64 = 1 << 39;
    pub const GITS_TYPER_VMAPP: u64 = 1 << 40;
    pub const GITS_TYPER_SVPET_SHIFT: u32 = 41;
    pub const CBASER_VALID: u64 = 1 << 63;
    pub const CREADR_STALLED: u64 = 1 << 0;
    pub const CWRITER_RETRY: u64 = 1 << 0;
    /// CWRITER/CREADR Offset [19:5].
    pub const QUEUE_OFFSET: u64 = 0xF_FFE0;
    // ITS SGI frame (ITS_base + 0x20000), offsets within it.
    pub const GITS_SGIR: u64 = 0x0020;
    pub const SGIR_DEFINED: u64 = 0xFFFF << 32 | 0xF;

    // Command numbers (DW0 [7:0]).
    pub const CMD_VMOVP: u8 = 0x22;
    pub const CMD_VSGI: u8 = 0x23;
    pub const CMD_VSYNC: u8 = 0x25;
    pub const CMD_VMAPP: u8 = 0x29;
    /// VMAPP's VCONF_Addr (DW0) and VPT_addr (DW3): bits [51:16].
    /// RDbase (VMAPP, VMOVP DW2) is [51:16] too: 36 bits from 16.
    pub const RDBASE: u64 = 0xF_FFFF_FFFF;
    pub const VMAPP_ADDR: u64 = 0x000F_FFFF_FFFF_0000;
    pub const CMD_VINVALL: u8 = 0x2D;
    pub const CMD_INVDB: u8 = 0x2E;
    // The device commands the vLPI path uses (GICv3 numbers, acting on
    // the vLPI mapping of an event VMAPTI made).
    pub const CMD_INT: u8 = 0x03;
    pub const CMD_CLEAR: u8 = 0x04;
    pub const CMD_SYNC: u8 = 0x05;
    pub const CMD_MAPD: u8 = 0x08;
    pub const CMD_INV: u8 = 0x0C;
    pub const CMD_DISCARD: u8 = 0x0F;
    pub const CMD_VMOVI: u8 = 0x21;
    pub const CMD_VMAPTI: u8 = 0x2A;
    /// Dbell_pINTID meaning no doorbell.
    pub const NO_DOORBELL: u64 = 1023;
    /// The first LPI INTID; a vLPI's byte in VCONF is at vINTID - 8192.
    pub const LPI_BASE: u32 = 8192;
    /// LPI configuration byte: Enable [0].
    pub const PROP_ENABLE: u8 = 1;
}

use reg::*;

/// What the modelled hardware is.
#[derive(Clone, Debug)]
pub struct Config {
    pub cpus: usize,
    pub its_count: usize,
    /// GICv4.1 (RVPEID, VSGI, VMAPP) rather than GICv4.0.
    pub v4_1: bool,
    /// GITS_TYPER.VMOVP: one VMOVP moves a vPE on every ITS.
    pub vmovp: bool,
    /// vPE IDs the vPE table holds (IDs at or above are out of range).
    pub vpes: u32,
    /// Reads of GICR_VPENDBASER that still see Dirty after a Valid change.
    pub dirty_reads: u32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            cpus: 4,
            its_count: 1,
            v4_1: true,
            vmovp: true,
            vpes: 64,
            dirty_reads: 2,
        }
    }
}

/// A vSGI's configuration (the VSGI command's fields).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SgiConfig {
    pub enabled: bool,
    /// Priority [7:4] (the command's 4-bit field).
    pub priority: u8,
    /// Group 1 (true) or group 0.
    pub group1: bool,
}

/// Why the model's ITS stalled on a command (or ignored a register write).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmdError {
    UnknownCommand(u8),
    VpeIdOutOfRange(u32),
    VpeNotMapped(u32),
    TargetOutOfRange(u64),
    /// A GICv4.1-only command on a GICv4.0 ITS.
    NotV41(u8),
    /// A device command naming a DeviceID MAPD has not mapped on this ITS.
    DeviceNotMapped(u32),
    /// An EventID at or above 2^(the device's MAPD Size + 1).
    EventOutOfRange {
        device: u32,
        event: u32,
    },
    /// A device command naming an event no VMAPTI mapped.
    EventNotMapped {
        device: u32,
        event: u32,
    },
    /// A vINTID below 8192 or at/above 2^(the vPE's VPT_size + 1).
    VintidOutOfRange(u32),
}

/// Something software could observe, or did wrong, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// vSGI `intid` of `vpe` reached the virtual CPU interface of `cpu`.
    Delivered { cpu: usize, vpe: u32, intid: u8 },
    /// vLPI `vintid` of `vpe` reached the virtual CPU interface of `cpu`.
    VlpiDelivered { cpu: usize, vpe: u32, vintid: u32 },
    /// A device's MSI that ITS `its` could not translate (DeviceID or
    /// EventID not mapped): dropped.
    MsiDropped { its: usize, device: u32, event: u32 },
    /// The ITS stalled at the command at queue offset `offset`.
    CommandError {
        its: usize,
        offset: u64,
        error: CmdError,
    },
    /// A GITS_SGIR write the ITS ignored (the vPE is not mapped on it, or
    /// its ID is out of range).
    SgirIgnored { its: usize, vpe: u32 },
    /// Software broke a rule: RES0 bits written as one, or an
    /// UNPREDICTABLE sequence. The text names the register and the rule.
    Misuse(String),
}

#[derive(Clone, Debug, Default)]
struct Redist {
    vpropbaser: u64,
    /// The last value written (Valid, vPEID, group enables).
    vpendbaser: u64,
    dirty_left: u32,
    /// Reads of GICR_TYPER, VPENDBASER and the VLPI frame (a driver's
    /// accesses on its own CPU).
    accesses: u64,
}

#[derive(Clone, Debug, Default)]
struct Vpe {
    /// Processor_Number of the target redistributor (VMAPP/VMOVP RDbase).
    rd: usize,
    /// ITSes it is mapped on (bit per ITS).
    mapped_on: u64,
    sgi: [SgiConfig; 16],
    pending: u16,
    /// The last valid VMAPP's VPT_addr and VCONF_Addr, and the vINTID
    /// bits its VPT_size covers.
    vpt: u64,
    vconf: u64,
    vpt_bits: u32,
    /// vLPIs pending in the vPE's state (its VPT).
    vlpi_pending: std::collections::BTreeSet<u32>,
}

/// One device an ITS has mapped (MAPD).
#[derive(Clone, Debug, Default)]
struct Device {
    event_bits: u32,
    /// EventID -> (vPE, vINTID), as VMAPTI/VMOVI left it.
    events: BTreeMap<u32, (u32, u32)>,
}

#[derive(Clone, Debug, Default)]
struct Its {
    ctlr: u64,
    cbaser: u64,
    cwriter: u64,
    /// Offset [19:5] and Stalled [0].
    creadr: u64,
    /// GITS_SGIR writes received.
    sgir_writes: u64,
    /// Commands executed.
    commands: u64,
    /// DeviceID -> its mapping on this ITS.
    devices: BTreeMap<u32, Device>,
}

/// The whole modelled interrupt controller: redistributors, ITSes, the
/// shared vPE table, and the memory command queues live in.
pub struct Model {
    cfg: Config,
    rd: Vec<Redist>,
    its: Vec<Its>,
    vpes: Vec<Option<Vpe>>,
    mem: BTreeMap<u64, u64>,
    events: Vec<Event>,
    receiver_exits: u64,
}

impl Model {
    pub fn new(cfg: Config) -> Self {
        Model {
            rd: vec![Redist::default(); cfg.cpus],
            its: vec![Its::default(); cfg.its_count],
            vpes: vec![None; cfg.vpes as usize],
            mem: BTreeMap::new(),
            events: Vec::new(),
            receiver_exits: 0,
            cfg,
        }
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Everything observed so far, oldest first.
    pub fn events(&self) -> &[Event] {
        &self.events
    }

    /// Drains the events.
    pub fn take_events(&mut self) -> Vec<Event> {
        std::mem::take(&mut self.events)
    }

    /// The misuse events (software's mistakes) so far.
    pub fn misuse(&self) -> Vec<&str> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::Misuse(m) => Some(m.as_str()),
                _ => None,
            })
            .collect()
    }

    /// Physical interrupts the model raised on a receiving PE to get a vSGI
    /// delivered (the vSGI path never needs one: always 0).
    pub fn receiver_exits(&self) -> u64 {
        self.receiver_exits
    }

    /// The vPE resident on `cpu`'s redistributor, if any.
    pub fn resident(&self, cpu: usize) -> Option<u32> {
        let v = self.rd.get(cpu)?.vpendbaser;
        (v & VPEND_VALID != 0).then_some((v & VPEND_VPEID) as u32)
    }

    /// The vSGIs pending in `vpe`'s state (bit n = SGI n).
    pub fn pending(&self, vpe: u32) -> u16 {
        self.vpe(vpe).map_or(0, |v| v.pending)
    }

    /// `vpe`'s SGI configuration as the last VSGI commands left it.
    pub fn sgi_config(&self, vpe: u32, intid: u8) -> Option<SgiConfig> {
        self.vpe(vpe)?.sgi.get(usize::from(intid)).copied()
    }

    /// Whether `vpe` is mapped on ITS `its`.
    pub fn mapped(&self, its: usize, vpe: u32) -> bool {
        self.vpe(vpe).is_some_and(|v| v.mapped_on & (1 << its) != 0)
    }

    /// The redistributor `vpe` targets.
    pub fn target(&self, vpe: u32) -> Option<usize> {
        self.vpe(vpe).map(|v| v.rd)
    }

    /// The VPT_addr and VCONF_Addr of `vpe`'s last valid VMAPP.
    pub fn vpe_tables(&self, vpe: u32) -> Option<(u64, u64)> {
        self.vpe(vpe).map(|v| (v.vpt, v.vconf))
    }

    /// The vLPIs pending in `vpe`'s state.
    pub fn vlpis_pending(&self, vpe: u32) -> Vec<u32> {
        self.vpe(vpe)
            .map_or(Vec::new(), |v| v.vlpi_pending.iter().copied().collect())
    }

    /// Where ITS `its` sends `device`'s `event`: (vPE, vINTID).
    pub fn vlpi_route(&self, its: usize, device: u32, event: u32) -> Option<(u32, u32)> {
        self.its[its]
            .devices
            .get(&device)?
            .events
            .get(&event)
            .copied()
    }

    /// GITS_SGIR writes ITS `its` received.
    pub fn sgir_writes(&self, its: usize) -> u64 {
        self.its[its].sgir_writes
    }

    /// Commands ITS `its` executed.
    pub fn commands(&self, its: usize) -> u64 {
        self.its[its].commands
    }

    /// Accesses to `cpu`'s redistributor frames.
    pub fn rd_accesses(&self, cpu: usize) -> u64 {
        self.rd[cpu].accesses
    }

    fn vpe(&self, id: u32) -> Option<&Vpe> {
        self.vpes.get(id as usize)?.as_ref()
    }

    fn misuse_event(&mut self, text: String) {
        self.events.push(Event::Misuse(text));
    }

    // --- the redistributor -------------------------------------------

    /// A read of `cpu`'s RD_base frame.
    pub fn gicr_read(&mut self, cpu: usize, offset: u64) -> u64 {
        self.rd[cpu].accesses += 1;
        match offset {
            GICR_TYPER => {
                let mut v = TYPER_PLPIS | TYPER_VLPIS | TYPER_DIRTY | (cpu as u64) << 8;
                if self.cfg.v4_1 {
                    v |= TYPER_RVPEID | TYPER_VSGI;
                }
                if cpu + 1 == self.cfg.cpus {
                    v |= 1 << 4; // Last
                }
                v | (cpu as u64) << 32
            }
            _ => 0,
        }
    }

    /// A read of `cpu`'s VLPI_base frame.
    pub fn vlpi_read(&mut self, cpu: usize, offset: u64) -> u64 {
        self.rd[cpu].accesses += 1;
        let rd = &mut self.rd[cpu];
        match offset {
            GICR_VPROPBASER => rd.vpropbaser,
            GICR_VPENDBASER => {
                let mut v = rd.vpendbaser & !(VPEND_DIRTY | VPEND_PENDING_LAST);
                if rd.dirty_left > 0 {
                    rd.dirty_left -= 1;
                    v |= VPEND_DIRTY;
                    if rd.dirty_left == 0 {
                        self.settle(cpu);
                    }
                } else if v & VPEND_VALID == 0 {
                    // PendingLast (Valid = 0, Dirty = 0): the vPE just put
                    // had pending interrupts.
                    let last = self.last_put_pending(cpu);
                    if last {
                        v |= VPEND_PENDING_LAST;
                    }
                }
                v
            }
            _ => 0,
        }
    }

    /// A write of `cpu`'s VLPI_base frame.
    pub fn vlpi_write(&mut self, cpu: usize, offset: u64, value: u64) {
        self.rd[cpu].accesses += 1;
        match offset {
            GICR_VPROPBASER => {
                if self.rd[cpu].vpendbaser & VPEND_VALID != 0 {
                    self.misuse_event(format!(
                        "GICR_VPROPBASER of cpu {cpu} written while a vPE is resident"
                    ));
                }
                self.rd[cpu].vpropbaser = value;
            }
            GICR_VPENDBASER => self.vpendbaser_write(cpu, value),
            _ => self.misuse_event(format!(
                "VLPI frame offset {offset:#x} of cpu {cpu} written"
            )),
        }
    }

    fn vpendbaser_write(&mut self, cpu: usize, value: u64) {
        if value & !VPEND_DEFINED != 0 {
            self.misuse_event(format!(
                "GICR_VPENDBASER of cpu {cpu}: RES0 bits {:#x} written as one",
                value & !VPEND_DEFINED
            ));
        }
        if value & (VPEND_DIRTY | VPEND_PENDING_LAST) != 0 && value & VPEND_VALID != 0 {
            self.misuse_event(format!(
                "GICR_VPENDBASER of cpu {cpu}: Dirty/PendingLast (read-only) written as one"
            ));
        }
        let old = self.rd[cpu].vpendbaser;
        if self.rd[cpu].dirty_left > 0 {
            self.misuse_event(format!(
                "GICR_VPENDBASER of cpu {cpu} written while Dirty (UNPREDICTABLE)"
            ));
        }
        let valid = value & VPEND_VALID != 0;
        if valid {
            if old & VPEND_VALID != 0 {
                self.misuse_event(format!(
                    "GICR_VPENDBASER of cpu {cpu}: Valid written 1 while already 1 (UNPREDICTABLE)"
                ));
            }
            if self.rd[cpu].vpropbaser & VPROP_VALID == 0 {
                self.misuse_event(format!(
                    "GICR_VPENDBASER of cpu {cpu}: vPE made resident without a valid GICR_VPROPBASER"
                ));
            }
            let id = (value & VPEND_VPEID) as u32;
            match self.vpe(id) {
                None => self.misuse_event(format!(
                    "GICR_VPENDBASER of cpu {cpu}: vPE {id} made resident but not mapped (VMAPP)"
                )),
                Some(v) if v.rd != cpu => self.misuse_event(format!(
                    "GICR_VPENDBASER of cpu {cpu}: vPE {id} made resident on another redistributor than its VMAPP/VMOVP target {}",
                    v.rd
                )),
                Some(_) => {}
            }
            if let Some(other) =
                (0..self.cfg.cpus).find(|&c| c != cpu && self.resident(c) == Some(id))
            {
                self.misuse_event(format!(
                    "GICR_VPENDBASER of cpu {cpu}: vPE {id} already resident on cpu {other}"
                ));
            }
        } else if old & VPEND_VALID == 0 {
            // Valid 0 -> 0: nothing changes.
            self.rd[cpu].vpendbaser = value & (VPEND_VPEID | VPEND_VGRP0EN | VPEND_VGRP1EN);
            return;
        }
        self.rd[cpu].vpendbaser =
            value & (VPEND_VALID | VPEND_VPEID | VPEND_VGRP0EN | VPEND_VGRP1EN | VPEND_DB);
        if !valid {
            // Keep the ID of the vPE put, for PendingLast.
            self.rd[cpu].vpendbaser |= old & VPEND_VPEID;
        }
        self.rd[cpu].dirty_left = self.cfg.dirty_reads;
        if self.cfg.dirty_reads == 0 {
            self.settle(cpu);
        }
    }

    fn last_put_pending(&self, cpu: usize) -> bool {
        let id = (self.rd[cpu].vpendbaser & VPEND_VPEID) as u32;
        self.pending(id) != 0 || !self.vlpis_pending(id).is_empty()
    }

    /// Dirty cleared on `cpu`: a resident vPE's pending vSGIs reach its
    /// vCPU interface.
    fn settle(&mut self, cpu: usize) {
        if let Some(id) = self.resident(cpu) {
            for intid in 0..16 {
                self.try_deliver(id, intid);
            }
            self.try_deliver_vlpis(id);
        }
    }

    /// One byte of the memory tables live in (VCONF: the vLPI
    /// configuration bytes).
    pub fn mem_write_byte(&mut self, addr: u64, value: u8) {
        let word = self.mem.entry(addr & !7).or_insert(0);
        let shift = (addr & 7) * 8;
        *word = *word & !(0xFF << shift) | u64::from(value) << shift;
    }

    fn mem_byte(&self, addr: u64) -> u8 {
        (self.mem.get(&(addr & !7)).copied().unwrap_or(0) >> ((addr & 7) * 8)) as u8
    }

    /// Every pending vLPI of `vpe` that can be delivered now, delivered.
    fn try_deliver_vlpis(&mut self, vpe: u32) {
        for vintid in self.vlpis_pending(vpe) {
            self.try_deliver_vlpi(vpe, vintid);
        }
    }

    /// `vpe`'s pending vLPI `vintid` delivered if its vPE is resident
    /// (Dirty clear) and its VCONF byte enables it.
    fn try_deliver_vlpi(&mut self, vpe: u32, vintid: u32) {
        let Some(v) = self.vpe(vpe) else { return };
        if !v.vlpi_pending.contains(&vintid) || vintid < LPI_BASE {
            return;
        }
        let cpu = v.rd;
        let byte = self.mem_byte(v.vconf + u64::from(vintid - LPI_BASE));
        if self.resident(cpu) != Some(vpe) || self.rd[cpu].dirty_left > 0 || byte & PROP_ENABLE == 0
        {
            return;
        }
        if let Some(Some(v)) = self.vpes.get_mut(vpe as usize) {
            v.vlpi_pending.remove(&vintid);
        }
        self.events.push(Event::VlpiDelivered { cpu, vpe, vintid });
    }

    /// A device's MSI: EventID `event` written to ITS `its`'s
    /// GITS_TRANSLATER with DeviceID `device`. A mapped event makes its
    /// vLPI pending on its vPE (delivered at once when it can be); any
    /// other is dropped ([`Event::MsiDropped`]).
    pub fn translate(&mut self, its: usize, device: u32, event: u32) {
        let Some((vpe, vintid)) = self.vlpi_route(its, device, event) else {
            self.events.push(Event::MsiDropped { its, device, event });
            return;
        };
        if let Some(Some(v)) = self.vpes.get_mut(vpe as usize) {
            v.vlpi_pending.insert(vintid);
        }
        self.try_deliver_vlpi(vpe, vintid);
    }

    /// Whether `vpe`'s pending vSGI `intid` can be delivered now, and if
    /// so deliver it.
    fn try_deliver(&mut self, vpe: u32, intid: u8) {
        let Some(v) = self.vpe(vpe) else { return };
        if v.pending & (1 << intid) == 0 {
            return;
        }
        let cfg = v.sgi[usize::from(intid)];
        let cpu = v.rd;
        if self.resident(cpu) != Some(vpe) || self.rd[cpu].dirty_left > 0 || !cfg.enabled {
            return;
        }
        let grp = if cfg.group1 {
            VPEND_VGRP1EN
        } else {
            VPEND_VGRP0EN
        };
        if self.rd[cpu].vpendbaser & grp == 0 {
            return;
        }
        if let Some(Some(v)) = self.vpes.get_mut(vpe as usize) {
            v.pending &= !(1 << intid);
        }
        self.events.push(Event::Delivered { cpu, vpe, intid });
    }

    // --- the ITS ------------------------------------------------------

    /// A read of ITS `its`'s control frame.
    pub fn its_read(&mut self, its: usize, offset: u64) -> u64 {
        let cfg = &self.cfg;
        let i = &self.its[its];
        match offset {
            GITS_CTLR => {
                let quiescent = i.creadr & QUEUE_OFFSET == i.cwriter & QUEUE_OFFSET
                    || i.creadr & CREADR_STALLED != 0;
                (i.ctlr & CTLR_ENABLED)
                    | if quiescent { CTLR_QUIESCENT } else { 0 }
                    | (its as u64) << 4
            }
            GITS_TYPER => {
                let mut v = GITS_TYPER_PHYSICAL | GITS_TYPER_VIRTUAL | 7 << 4; // ITT entry 8 bytes
                if cfg.vmovp {
                    v |= GITS_TYPER_VMOVP;
                }
                if cfg.v4_1 {
                    // SVPET = 1: the vPE table is shared with the
                    // redistributors (GICR_VPROPBASER describes it).
                    v |= GITS_TYPER_VSGI | GITS_TYPER_VMAPP | 1 << GITS_TYPER_SVPET_SHIFT;
                }
                v
            }
            GITS_CBASER => i.cbaser,
            GITS_CWRITER => i.cwriter,
            GITS_CREADR => i.creadr,
            _ => 0,
        }
    }

    /// A write of ITS `its`'s control frame.
    pub fn its_write(&mut self, its: usize, offset: u64, value: u64) {
        match offset {
            GITS_CTLR => {
                self.its[its].ctlr = value & CTLR_ENABLED;
                self.run_queue(its);
            }
            GITS_CBASER => {
                if self.its[its].ctlr & CTLR_ENABLED != 0 {
                    self.misuse_event(format!("GITS_CBASER of ITS {its} written while enabled"));
                }
                self.its[its].cbaser = value;
                self.its[its].creadr = 0;
            }
            GITS_CWRITER => {
                if value & !(QUEUE_OFFSET | CWRITER_RETRY) != 0 {
                    self.misuse_event(format!("GITS_CWRITER of ITS {its}: RES0 bits written"));
                }
                if value & QUEUE_OFFSET >= self.queue_bytes(its) {
                    self.misuse_event(format!(
                        "GITS_CWRITER of ITS {its}: offset {:#x} beyond the queue (UNPREDICTABLE)",
                        value & QUEUE_OFFSET
                    ));
                    return;
                }
                self.its[its].cwriter = value & QUEUE_OFFSET;
                if value & CWRITER_RETRY != 0 {
                    self.its[its].creadr &= !CREADR_STALLED;
                }
                self.run_queue(its);
            }
            GITS_CREADR | GITS_TYPER => self.misuse_event(format!(
                "read-only register {offset:#x} of ITS {its} written"
            )),
            _ => {}
        }
    }

    /// A write of ITS `its`'s SGI frame (`ITS_base + 0x20000`).
    pub fn its_sgi_write(&mut self, its: usize, offset: u64, value: u64) {
        if offset != GITS_SGIR {
            return;
        }
        if !self.cfg.v4_1 {
            self.misuse_event(format!("GITS_SGIR of ITS {its} written on a GICv4.0 ITS"));
            return;
        }
        if value & !SGIR_DEFINED != 0 {
            self.misuse_event(format!(
                "GITS_SGIR of ITS {its}: RES0 bits {:#x} written as one",
                value & !SGIR_DEFINED
            ));
        }
        self.its[its].sgir_writes += 1;
        let vpe = ((value >> 32) & 0xFFFF) as u32;
        let intid = (value & 0xF) as u8;
        if !self.mapped(its, vpe) {
            self.events.push(Event::SgirIgnored { its, vpe });
            return;
        }
        if let Some(Some(v)) = self.vpes.get_mut(vpe as usize) {
            v.pending |= 1 << intid;
        }
        self.try_deliver(vpe, intid);
    }

    /// Writes `bytes` of guest-invisible memory (where command queues are).
    pub fn mem_write(&mut self, addr: u64, value: u64) {
        self.mem.insert(addr, value);
    }

    fn queue_bytes(&self, its: usize) -> u64 {
        ((self.its[its].cbaser & 0xFF) + 1) * 4096
    }

    fn run_queue(&mut self, its: usize) {
        let i = &self.its[its];
        if i.ctlr & CTLR_ENABLED == 0 || i.cbaser & CBASER_VALID == 0 {
            return;
        }
        let base = i.cbaser & 0x000F_FFFF_FFFF_F000;
        let size = self.queue_bytes(its);
        // At most one pass over the queue per write.
        for _ in 0..size / 32 {
            let i = &self.its[its];
            if i.creadr & CREADR_STALLED != 0 || i.creadr & QUEUE_OFFSET == i.cwriter {
                return;
            }
            let off = i.creadr & QUEUE_OFFSET;
            let at = base + off;
            let cmd = [0, 8, 16, 24].map(|o| self.mem.get(&(at + o)).copied().unwrap_or(0));
            match self.execute(its, cmd) {
                Ok(()) => {
                    self.its[its].commands += 1;
                    self.its[its].creadr = (off + 32) % size;
                }
                Err(error) => {
                    self.its[its].creadr = off | CREADR_STALLED;
                    self.events.push(Event::CommandError {
                        its,
                        offset: off,
                        error,
                    });
                    return;
                }
            }
        }
    }

    fn mapped_vpe(&self, its: usize, id: u32) -> Result<(), CmdError> {
        if id >= self.cfg.vpes {
            return Err(CmdError::VpeIdOutOfRange(id));
        }
        if !self.mapped(its, id) {
            return Err(CmdError::VpeNotMapped(id));
        }
        Ok(())
    }

    /// `device` mapped on `its` with `event` in its range.
    fn device_event(&self, its: usize, device: u32, event: u32) -> Result<(), CmdError> {
        let d = self.its[its]
            .devices
            .get(&device)
            .ok_or(CmdError::DeviceNotMapped(device))?;
        if u64::from(event) >> d.event_bits != 0 {
            return Err(CmdError::EventOutOfRange { device, event });
        }
        Ok(())
    }

    /// The (vPE, vINTID) `device`'s `event` is mapped to on `its`.
    fn mapped_event(&self, its: usize, device: u32, event: u32) -> Result<(u32, u32), CmdError> {
        self.device_event(its, device, event)?;
        self.vlpi_route(its, device, event)
            .ok_or(CmdError::EventNotMapped { device, event })
    }

    /// The GICv4.1 VMAPP's field rules (IHI 0069 "VMAPP", the 4.1 layout):
    /// DW0 Alloc [8], PTZ [9], VCONF_Addr [51:16]; DW1 Default_Doorbell
    /// [31:0], vPEID [47:32]; DW2 RDbase [51:16], V [63]; DW3 VPT_size
    /// [4:0], VPT_addr [51:16]; everything else RES0. With V = 1 the vPE
    /// needs its virtual pending table (VPT_addr) and configuration
    /// (VCONF_Addr, the vLPI property table) and a VPT_size covering the
    /// LPI range (at least 14 ID bits: VPT_size >= 13); PTZ says the table
    /// is zero and is only meaningful with Alloc; the default doorbell is
    /// 1023 (none) or a physical LPI. With V = 0 only Alloc may be set.
    fn check_vmapp(&mut self, its: usize, vpe: u32, cmd: [u64; 4], valid: bool) {
        let mut wrong = Vec::new();
        let res0 = [
            cmd[0] & !(0xFF | 1 << 8 | 1 << 9 | VMAPP_ADDR),
            cmd[1] & !(0xFFFF_FFFF | 0xFFFF << 32),
            cmd[2] & !(1 << 63 | RDBASE << 16),
            cmd[3] & !(0x1F | VMAPP_ADDR),
        ];
        for (dw, bits) in res0.iter().enumerate() {
            if *bits != 0 {
                wrong.push(format!("RES0 bits {bits:#x} of DW{dw} set"));
            }
        }
        if valid {
            let (vpt, vpt_size, vconf) = (cmd[3] & VMAPP_ADDR, cmd[3] & 0x1F, cmd[0] & VMAPP_ADDR);
            let db = cmd[1] & 0xFFFF_FFFF;
            if vpt == 0 {
                wrong.push("V = 1 without a VPT_addr".into());
            }
            if vpt_size < 13 {
                wrong.push(format!(
                    "VPT_size {vpt_size} below 13 (the LPI range needs 14 ID bits)"
                ));
            }
            if vconf == 0 {
                wrong.push("V = 1 without a VCONF_Addr".into());
            }
            if cmd[0] >> 9 & 1 == 1 && cmd[0] >> 8 & 1 == 0 {
                wrong.push("PTZ without Alloc".into());
            }
            if db != 1023 && db < 8192 {
                wrong.push(format!("Default_Doorbell {db} is neither 1023 nor an LPI"));
            }
        } else {
            let fields = cmd[0] & (1 << 9 | VMAPP_ADDR)
                | cmd[1] & 0xFFFF_FFFF
                | cmd[2] & RDBASE << 16
                | cmd[3];
            if fields != 0 {
                wrong.push("V = 0 with fields other than Alloc set".into());
            }
        }
        for w in wrong {
            self.misuse_event(format!("VMAPP of vPE {vpe} on ITS {its}: {w}"));
        }
    }

    fn rdbase(&self, dw2: u64) -> Result<usize, CmdError> {
        // PTA = 0: RDbase [51:16] is the target's Processor_Number.
        let rd = (dw2 >> 16) & RDBASE;
        if rd >= self.cfg.cpus as u64 {
            return Err(CmdError::TargetOutOfRange(rd));
        }
        Ok(rd as usize)
    }

    /// One ITS command (four doublewords).
    pub fn execute(&mut self, its: usize, cmd: [u64; 4]) -> Result<(), CmdError> {
        let op = cmd[0] as u8;
        let vpe = ((cmd[1] >> 32) & 0xFFFF) as u32;
        let v41_only = matches!(op, CMD_VSGI | CMD_INVDB);
        if v41_only && !self.cfg.v4_1 {
            return Err(CmdError::NotV41(op));
        }
        match op {
            CMD_VMAPP => {
                if vpe >= self.cfg.vpes {
                    return Err(CmdError::VpeIdOutOfRange(vpe));
                }
                let valid = cmd[2] >> 63 & 1 == 1;
                self.check_vmapp(its, vpe, cmd, valid);
                if valid {
                    let rd = self.rdbase(cmd[2])?;
                    let entry = self.vpes[vpe as usize].get_or_insert_with(Vpe::default);
                    entry.rd = rd;
                    entry.mapped_on |= 1 << its;
                    entry.vpt = cmd[3] & VMAPP_ADDR;
                    entry.vconf = cmd[0] & VMAPP_ADDR;
                    entry.vpt_bits = (cmd[3] & 0x1F) as u32 + 1;
                } else if let Some(entry) = self.vpes[vpe as usize].as_mut() {
                    entry.mapped_on &= !(1 << its);
                    if entry.mapped_on == 0 {
                        self.vpes[vpe as usize] = None;
                    }
                }
                Ok(())
            }
            CMD_VMOVP => {
                self.mapped_vpe(its, vpe)?;
                let rd = self.rdbase(cmd[2])?;
                let entry = self.vpes[vpe as usize].as_mut().expect("mapped");
                entry.rd = rd;
                Ok(())
            }
            CMD_VSGI => {
                self.mapped_vpe(its, vpe)?;
                let intid = ((cmd[0] >> 32) & 0xF) as u8;
                let cfg = SgiConfig {
                    enabled: cmd[0] >> 8 & 1 == 1,
                    priority: ((cmd[0] >> 20) & 0xF) as u8,
                    group1: cmd[0] >> 10 & 1 == 1,
                };
                let clear = cmd[0] >> 9 & 1 == 1;
                let entry = self.vpes[vpe as usize].as_mut().expect("mapped");
                entry.sgi[usize::from(intid)] = cfg;
                if clear {
                    entry.pending &= !(1 << intid);
                }
                self.try_deliver(vpe, intid);
                Ok(())
            }
            CMD_VSYNC | CMD_INVDB => self.mapped_vpe(its, vpe),
            CMD_VINVALL => {
                self.mapped_vpe(its, vpe)?;
                self.try_deliver_vlpis(vpe);
                Ok(())
            }
            CMD_MAPD => {
                let device = (cmd[0] >> 32) as u32;
                if cmd[2] >> 63 & 1 == 1 {
                    if self.its[its].devices.contains_key(&device) {
                        self.misuse_event(format!(
                            "MAPD of device {device:#x} on ITS {its}: mapped again while mapped (UNPREDICTABLE)"
                        ));
                    }
                    let event_bits = (cmd[1] & 0x1F) as u32 + 1;
                    self.its[its].devices.insert(
                        device,
                        Device {
                            event_bits,
                            events: BTreeMap::new(),
                        },
                    );
                } else {
                    self.its[its].devices.remove(&device);
                }
                Ok(())
            }
            CMD_VMAPTI => {
                let (device, event) = ((cmd[0] >> 32) as u32, cmd[1] as u32);
                let vintid = cmd[2] as u32;
                let db = cmd[2] >> 32;
                self.device_event(its, device, event)?;
                self.mapped_vpe(its, vpe)?;
                let bits = self.vpe(vpe).map_or(0, |v| v.vpt_bits);
                if vintid < LPI_BASE || u64::from(vintid) >> bits != 0 {
                    return Err(CmdError::VintidOutOfRange(vintid));
                }
                if self.cfg.v4_1 && db != NO_DOORBELL {
                    self.misuse_event(format!(
                        "VMAPTI of device {device:#x} event {event} on ITS {its}: Dbell_pINTID {db} (GICv4.1 has no per-vLPI doorbell: 1023)"
                    ));
                }
                if let Some(d) = self.its[its].devices.get_mut(&device) {
                    d.events.insert(event, (vpe, vintid));
                }
                self.try_deliver_vlpi(vpe, vintid);
                Ok(())
            }
            CMD_VMOVI => {
                let (device, event) = ((cmd[0] >> 32) as u32, cmd[1] as u32);
                let (_, vintid) = self.mapped_event(its, device, event)?;
                self.mapped_vpe(its, vpe)?;
                if self.cfg.v4_1 && cmd[2] & 1 == 1 {
                    self.misuse_event(format!(
                        "VMOVI of device {device:#x} event {event} on ITS {its}: D = 1 (GICv4.1 has no per-vLPI doorbell)"
                    ));
                }
                if let Some(d) = self.its[its].devices.get_mut(&device) {
                    d.events.insert(event, (vpe, vintid));
                }
                Ok(())
            }
            CMD_DISCARD | CMD_INV | CMD_INT | CMD_CLEAR => {
                let (device, event) = ((cmd[0] >> 32) as u32, cmd[1] as u32);
                let (target, vintid) = self.mapped_event(its, device, event)?;
                match op {
                    CMD_DISCARD => {
                        if let Some(d) = self.its[its].devices.get_mut(&device) {
                            d.events.remove(&event);
                        }
                        if let Some(Some(v)) = self.vpes.get_mut(target as usize) {
                            v.vlpi_pending.remove(&vintid);
                        }
                    }
                    CMD_INT | CMD_CLEAR => {
                        if let Some(Some(v)) = self.vpes.get_mut(target as usize) {
                            if op == CMD_INT {
                                v.vlpi_pending.insert(vintid);
                            } else {
                                v.vlpi_pending.remove(&vintid);
                            }
                        }
                    }
                    _ => {}
                }
                self.try_deliver_vlpi(target, vintid);
                Ok(())
            }
            CMD_SYNC => {
                self.rdbase(cmd[2])?;
                Ok(())
            }
            other => Err(CmdError::UnknownCommand(other)),
        }
    }

    /// Puts a command in the queue of ITS `its` at CWRITER and advances
    /// CWRITER (what a driver does; for tests that drive the model alone).
    pub fn enqueue(&mut self, its: usize, cmd: [u64; 4]) {
        let base = self.its[its].cbaser & 0x000F_FFFF_FFFF_F000;
        let at = self.its[its].cwriter;
        for (k, dw) in cmd.iter().enumerate() {
            self.mem_write(base + at + 8 * k as u64, *dw);
        }
        let next = (at + 32) % self.queue_bytes(its);
        self.its_write(its, GITS_CWRITER, next);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn its_up(m: &mut Model, its: usize) {
        m.its_write(
            its,
            GITS_CBASER,
            CBASER_VALID | (0x4000_0000 * (its as u64 + 1)),
        );
        m.its_write(its, GITS_CTLR, CTLR_ENABLED);
    }

    fn vmapp(vpe: u32, rd: u64) -> [u64; 4] {
        [
            CMD_VMAPP as u64 | 1 << 8 | 0x7000_0000,
            1023 | u64::from(vpe) << 32,
            1 << 63 | rd << 16,
            0x6000_0000 | u64::from(vpe) << 16 | 15,
        ]
    }

    fn vsgi(vpe: u32, intid: u8, enabled: bool) -> [u64; 4] {
        let dw0 = CMD_VSGI as u64 | u64::from(intid) << 32 | u64::from(enabled) << 8 | 1 << 10;
        [dw0, u64::from(vpe) << 32, 0, 0]
    }

    fn model() -> Model {
        let mut m = Model::new(Config::default());
        its_up(&mut m, 0);
        for cpu in 0..4 {
            m.vlpi_write(cpu, GICR_VPROPBASER, VPROP_VALID | 0x5000_0000);
        }
        m
    }

    fn wait_clean(m: &mut Model, cpu: usize) {
        while m.vlpi_read(cpu, GICR_VPENDBASER) & VPEND_DIRTY != 0 {}
    }

    #[test]
    fn typer_reports_v4_1_only_when_modelled() {
        let mut m = Model::new(Config::default());
        assert_ne!(m.gicr_read(0, GICR_TYPER) & TYPER_VSGI, 0);
        assert_ne!(m.its_read(0, GITS_TYPER) & GITS_TYPER_VSGI, 0);
        let mut old = Model::new(Config {
            v4_1: false,
            ..Config::default()
        });
        assert_eq!(
            old.gicr_read(0, GICR_TYPER) & (TYPER_VSGI | TYPER_RVPEID),
            0
        );
        assert_eq!(
            old.its_read(0, GITS_TYPER) & (GITS_TYPER_VSGI | GITS_TYPER_VMAPP),
            0
        );
        assert_ne!(old.gicr_read(0, GICR_TYPER) & TYPER_VLPIS, 0);
    }

    #[test]
    fn a_vsgi_to_a_resident_vpe_is_delivered_without_a_receiver_exit() {
        let mut m = model();
        m.enqueue(0, vmapp(7, 2));
        m.enqueue(0, vsgi(7, 3, true));
        m.vlpi_write(2, GICR_VPENDBASER, VPEND_VALID | VPEND_VGRP1EN | 7);
        wait_clean(&mut m, 2);

        m.its_sgi_write(0, GITS_SGIR, 7 << 32 | 3);

        assert_eq!(
            m.events(),
            [Event::Delivered {
                cpu: 2,
                vpe: 7,
                intid: 3
            }]
        );
        assert_eq!(m.receiver_exits(), 0);
        assert_eq!(m.pending(7), 0);
    }

    #[test]
    fn a_vsgi_to_a_non_resident_vpe_stays_pending_until_load_and_dirty_clears() {
        let mut m = model();
        m.enqueue(0, vmapp(7, 2));
        m.enqueue(0, vsgi(7, 3, true));

        m.its_sgi_write(0, GITS_SGIR, 7 << 32 | 3);
        m.its_sgi_write(0, GITS_SGIR, 7 << 32 | 3);
        assert!(m.events().is_empty());
        assert_eq!(m.pending(7), 1 << 3);

        m.vlpi_write(2, GICR_VPENDBASER, VPEND_VALID | VPEND_VGRP1EN | 7);
        assert!(m.events().is_empty(), "nothing before Dirty clears");
        wait_clean(&mut m, 2);
        assert_eq!(
            m.events(),
            [Event::Delivered {
                cpu: 2,
                vpe: 7,
                intid: 3
            }]
        );
    }

    #[test]
    fn a_disabled_sgi_or_group_stays_pending() {
        let mut m = model();
        m.enqueue(0, vmapp(1, 0));
        m.enqueue(0, vsgi(1, 5, false));
        m.vlpi_write(0, GICR_VPENDBASER, VPEND_VALID | VPEND_VGRP0EN | 1);
        wait_clean(&mut m, 0);
        m.its_sgi_write(0, GITS_SGIR, 1 << 32 | 5);
        assert_eq!(m.pending(1), 1 << 5);
        m.enqueue(0, vsgi(1, 5, true)); // enabled, but group 1 while only group 0 is on
        assert_eq!(m.pending(1), 1 << 5);
        assert!(m.events().is_empty());
    }

    #[test]
    fn a_command_for_an_unmapped_vpe_stalls_the_queue_and_retry_meets_it_again() {
        let mut m = model();
        m.enqueue(0, vsgi(9, 0, true));
        assert_eq!(
            m.events(),
            [Event::CommandError {
                its: 0,
                offset: 0,
                error: CmdError::VpeNotMapped(9)
            }]
        );
        assert_eq!(m.its_read(0, GITS_CREADR), CREADR_STALLED);
        m.its_write(0, GITS_CWRITER, 32 | CWRITER_RETRY);
        assert_eq!(m.take_events().len(), 2);
        assert_eq!(m.its_read(0, GITS_CREADR), CREADR_STALLED);
    }

    #[test]
    fn out_of_range_ids_and_targets_are_command_errors() {
        let mut m = model();
        assert_eq!(
            m.execute(0, vmapp(64, 0)),
            Err(CmdError::VpeIdOutOfRange(64))
        );
        assert_eq!(
            m.execute(0, vmapp(1, 4)),
            Err(CmdError::TargetOutOfRange(4))
        );
        assert_eq!(
            m.execute(0, [0x7F, 0, 0, 0]),
            Err(CmdError::UnknownCommand(0x7F))
        );
    }

    /// RDbase is DW2 [51:16] (Linux's `its_encode_target`, QEMU's VMAPP_2
    /// RDBASE 16+36): bit 51 is part of the target, not RES0 (the model
    /// had [50:16], as the driver did, and took the command for CPU 0).
    #[test]
    fn rdbase_is_dw2_bits_51_to_16() {
        let mut m = model();
        assert_eq!(
            m.execute(0, vmapp(1, 1 << 35)),
            Err(CmdError::TargetOutOfRange(1 << 35))
        );
        assert!(m.misuse().is_empty(), "{:?}", m.misuse());
    }

    #[test]
    fn a_vmapp_without_its_tables_or_with_res0_bits_is_misuse() {
        let mut m = model();
        m.enqueue(0, vmapp(1, 0));
        assert!(m.misuse().is_empty(), "{:?}", m.misuse());
        assert_eq!(m.vpe_tables(1), Some((0x6001_0000, 0x7000_0000)));
        // The GICv4.0 shape: no VCONF_Addr, no VPT, no doorbell field.
        m.enqueue(0, [CMD_VMAPP as u64, 2 << 32, 1 << 63, 0]);
        let text = m.misuse().join("; ");
        for rule in [
            "without a VPT_addr",
            "VPT_size 0",
            "without a VCONF_Addr",
            "Default_Doorbell 0",
        ] {
            assert!(text.contains(rule), "{rule}: {text}");
        }
        m.take_events();
        // PTZ without Alloc, and an unmap carrying an address.
        let mut ptz = vmapp(3, 0);
        ptz[0] = ptz[0] & !(1 << 8) | 1 << 9;
        m.enqueue(0, ptz);
        m.enqueue(0, [CMD_VMAPP as u64 | 1 << 8, 3 << 32, 0, 0x6000_0000]);
        m.enqueue(0, [CMD_VMAPP as u64 | 1 << 12, 3 << 32, 0, 0]);
        assert_eq!(
            m.misuse(),
            [
                "VMAPP of vPE 3 on ITS 0: PTZ without Alloc",
                "VMAPP of vPE 3 on ITS 0: V = 0 with fields other than Alloc set",
                "VMAPP of vPE 3 on ITS 0: RES0 bits 0x1000 of DW0 set",
            ]
        );
    }

    #[test]
    fn misuse_is_reported() {
        let mut m = model();
        m.vlpi_write(1, GICR_VPENDBASER, VPEND_VALID | 3); // not mapped
        m.vlpi_write(1, GICR_VPENDBASER, VPEND_VALID | 3); // while Dirty, while Valid
        m.its_sgi_write(0, GITS_SGIR, 1 << 20); // RES0
        let misuse = m.misuse();
        assert!(
            misuse.iter().any(|t| t.contains("not mapped")),
            "{misuse:?}"
        );
        assert!(
            misuse.iter().any(|t| t.contains("while Dirty")),
            "{misuse:?}"
        );
        assert!(misuse.iter().any(|t| t.contains("already 1")), "{misuse:?}");
        assert!(misuse.iter().any(|t| t.contains("RES0")), "{misuse:?}");
    }

    #[test]
    fn pending_last_reports_what_the_put_vpe_left() {
        let mut m = model();
        m.enqueue(0, vmapp(2, 1));
        m.enqueue(0, vsgi(2, 1, true));
        m.vlpi_write(1, GICR_VPENDBASER, VPEND_VALID | VPEND_VGRP1EN | 2);
        wait_clean(&mut m, 1);
        m.vlpi_write(1, GICR_VPENDBASER, 0);
        wait_clean(&mut m, 1);
        m.its_sgi_write(0, GITS_SGIR, 2 << 32 | 1);
        assert_ne!(m.vlpi_read(1, GICR_VPENDBASER) & VPEND_PENDING_LAST, 0);
    }

    #[test]
    fn vmovp_moves_the_target_and_sgir_is_ignored_on_an_its_without_the_vpe() {
        let mut m = Model::new(Config {
            its_count: 2,
            ..Config::default()
        });
        its_up(&mut m, 0);
        its_up(&mut m, 1);
        m.enqueue(0, vmapp(4, 0));
        m.enqueue(0, [CMD_VMOVP as u64, 4 << 32, 3 << 16, 0]);
        assert_eq!(m.target(4), Some(3));
        m.its_sgi_write(1, GITS_SGIR, 4 << 32);
        assert_eq!(m.events(), [Event::SgirIgnored { its: 1, vpe: 4 }]);
    }

    /// MAPD of `device` with 2^`event_bits` events.
    fn mapd(device: u32, event_bits: u64) -> [u64; 4] {
        [
            CMD_MAPD as u64 | u64::from(device) << 32,
            event_bits - 1,
            1 << 63 | 0x5100_0000,
            0,
        ]
    }

    fn vmapti(device: u32, event: u32, vpe: u32, vintid: u32, db: u64) -> [u64; 4] {
        [
            CMD_VMAPTI as u64 | u64::from(device) << 32,
            u64::from(event) | u64::from(vpe) << 32,
            u64::from(vintid) | db << 32,
            0,
        ]
    }

    fn dev_event(op: u8, device: u32, event: u32) -> [u64; 4] {
        [op as u64 | u64::from(device) << 32, u64::from(event), 0, 0]
    }

    /// vPE 7 on redistributor 2 (VCONF at 0x7000_0000, 16 vINTID bits)
    /// with device 0x10's event 3 as its vLPI 8300.
    fn vlpi_model() -> Model {
        let mut m = model();
        m.enqueue(0, vmapp(7, 2));
        m.enqueue(0, mapd(0x10, 4));
        m.enqueue(0, vmapti(0x10, 3, 7, 8300, NO_DOORBELL));
        assert!(m.take_events().is_empty());
        m
    }

    #[test]
    fn a_device_msi_reaches_a_resident_vpe_only_while_its_vconf_byte_enables_it() {
        let mut m = vlpi_model();
        m.vlpi_write(2, GICR_VPENDBASER, VPEND_VALID | VPEND_VGRP1EN | 7);
        wait_clean(&mut m, 2);

        m.translate(0, 0x10, 3);
        assert!(m.take_events().is_empty(), "VCONF byte 0: held");
        assert_eq!(m.vlpis_pending(7), [8300]);

        m.mem_write_byte(0x7000_0000 + (8300 - 8192), 0xA0 | PROP_ENABLE);
        m.enqueue(0, dev_event(CMD_INV, 0x10, 3));
        assert_eq!(
            m.take_events(),
            [Event::VlpiDelivered {
                cpu: 2,
                vpe: 7,
                vintid: 8300
            }]
        );
        m.translate(0, 0x10, 3);
        assert_eq!(m.take_events().len(), 1, "enabled: at once");
        assert_eq!(m.receiver_exits(), 0);
    }

    #[test]
    fn a_vlpi_for_a_vpe_resident_nowhere_stays_pending_until_it_is_loaded() {
        let mut m = vlpi_model();
        m.mem_write_byte(0x7000_0000 + (8300 - 8192), PROP_ENABLE);

        m.translate(0, 0x10, 3);
        assert!(m.take_events().is_empty());
        m.vlpi_write(2, GICR_VPENDBASER, VPEND_VALID | 7);
        assert!(m.take_events().is_empty(), "not before Dirty clears");
        wait_clean(&mut m, 2);

        assert_eq!(
            m.take_events(),
            [Event::VlpiDelivered {
                cpu: 2,
                vpe: 7,
                vintid: 8300
            }]
        );
        m.translate(0, 0x11, 0);
        assert_eq!(
            m.take_events(),
            [Event::MsiDropped {
                its: 0,
                device: 0x11,
                event: 0
            }]
        );
    }

    #[test]
    fn vmapti_is_checked_against_the_device_the_vpe_and_the_gicv4_1_doorbell_rule() {
        let mut m = vlpi_model();
        let errors = [
            (
                vmapti(0x11, 0, 7, 8300, NO_DOORBELL),
                CmdError::DeviceNotMapped(0x11),
            ),
            (
                vmapti(0x10, 16, 7, 8300, NO_DOORBELL),
                CmdError::EventOutOfRange {
                    device: 0x10,
                    event: 16,
                },
            ),
            (
                vmapti(0x10, 1, 9, 8300, NO_DOORBELL),
                CmdError::VpeNotMapped(9),
            ),
            (
                vmapti(0x10, 1, 7, 8191, NO_DOORBELL),
                CmdError::VintidOutOfRange(8191),
            ),
            (
                vmapti(0x10, 1, 7, 1 << 16, NO_DOORBELL),
                CmdError::VintidOutOfRange(1 << 16),
            ),
        ];
        for (cmd, error) in errors {
            assert_eq!(m.execute(0, cmd), Err(error));
        }
        assert_eq!(m.execute(0, vmapti(0x10, 1, 7, 8400, 8200)), Ok(()));
        assert_eq!(m.misuse().len(), 1, "{:?}", m.misuse());
        // DISCARD forgets the event: an MSI for it is then dropped.
        assert_eq!(m.execute(0, dev_event(CMD_DISCARD, 0x10, 3)), Ok(()));
        assert_eq!(m.vlpi_route(0, 0x10, 3), None);
    }
}
