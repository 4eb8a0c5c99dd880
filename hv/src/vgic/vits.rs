//! A partition's virtual ITS: the emulated GITS_* frame and command queue,
//! with each guest command checked and translated into what the hypervisor
//! does on the physical ITS for the partition's own devices.
//!
//! The guest programs it as any GICv3 ITS: GITS_CBASER (Valid [63],
//! Physical_Address [51:12], Size [7:0] = 4 KiB pages - 1), GITS_CTLR.Enabled,
//! then commands of 32 bytes written into its own RAM and GITS_CWRITER
//! (Offset [19:5], Retry [0]) advanced; GITS_CREADR (Offset [19:5],
//! Stalled [0]) follows as commands are processed, wrapping at the queue's
//! end. Commands decoded: MAPD, MAPC, MAPTI, MAPI, INV, INVALL, SYNC,
//! DISCARD, MOVI, CLEAR, INT (and MOVALL, refused: one collection per vCPU
//! makes it meaningless). Each valid one becomes a [`PhysCmd`] for the
//! platform to apply (GICv3 host: MAPD/MAPTI... on the physical ITS with an
//! ITT and a physical LPI the hypervisor allocates, the collection of the
//! target vCPU's CPU; GICv4 host: VMAPTI of the guest's vINTID to the
//! target vCPU's vPE, decided in `v40`, not wired to the platform yet); the guest's own ITT and table memory is never read
//! or written, so overlapping or bogus tables cannot harm anything but the
//! guest's own view.
//!
//! Refused, recorded as the partition's fault ([`VitsSink::fault`]) and
//! answered the way the architecture lets an ITS answer a command error
//! (this one stalls: GITS_CREADR.Stalled = 1, CREADR left at the command;
//! a GITS_CWRITER write with Retry = 1 tries it again, a new GITS_CBASER
//! starts over): a DeviceID the partition does not own ([`DeviceOwner`],
//! the hook per-function PCIe assignment fills), IDs out of the ranges
//! GITS_TYPER reports (DeviceID, EventID beyond the device's MAPD size,
//! LPI INTIDs outside 8192..2^IDbits, ICIDs beyond HCC, an RDbase that is
//! not one of the partition's vCPUs), commands on unmapped devices,
//! events or collections, an unknown command, a queue that is not in the
//! partition's RAM. The hypervisor's memory for a partition is bounded
//! ([`VitsLimits`]: devices, mappings), and one CWRITER write processes at
//! most one queue's worth of commands, so no command sequence (wrap-around,
//! CWRITER beyond the queue, huge MAPD sizes) makes it loop or allocate
//! without bound.

use alloc::collections::BTreeMap;

/// Whether a partition owns a PCIe DeviceID (requester ID as the ITS sees
/// it). Filled by the per-function PCIe assignment; the tests use sets.
pub trait DeviceOwner {
    fn owns(&self, device_id: u32) -> bool;
}

impl<F: Fn(u32) -> bool> DeviceOwner for F {
    fn owns(&self, device_id: u32) -> bool {
        self(device_id)
    }
}

/// Reads the command queue from the partition's RAM.
pub trait QueueMemory {
    /// The 32 bytes at guest physical `ipa` as four little-endian
    /// doublewords, or None when they are not in the partition's RAM.
    fn read_command(&self, ipa: u64) -> Option<[u64; 4]>;
}

/// What one accepted command asks of the physical side. `vcpu` is the
/// partition's vCPU index a collection was mapped to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PhysCmd {
    /// Map (or unmap, `valid` false) a device with 2^`event_bits` events.
    Mapd {
        device: u32,
        event_bits: u8,
        valid: bool,
    },
    /// Map an event to the guest's LPI `vintid` on `vcpu`.
    Mapti {
        device: u32,
        event: u32,
        vintid: u32,
        vcpu: u16,
    },
    Movi {
        device: u32,
        event: u32,
        vcpu: u16,
    },
    Discard {
        device: u32,
        event: u32,
    },
    Inv {
        device: u32,
        event: u32,
    },
    Int {
        device: u32,
        event: u32,
    },
    Clear {
        device: u32,
        event: u32,
    },
    InvAll {
        vcpu: u16,
    },
    Sync {
        vcpu: u16,
    },
}

/// Why a guest command (or register write) was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VitsError {
    UnknownCommand(u8),
    /// The DeviceID is beyond GITS_TYPER.Devbits.
    DeviceOutOfRange(u32),
    /// A DeviceID of a function the partition was not assigned.
    ForeignDevice(u32),
    DeviceNotMapped(u32),
    /// MAPD Size beyond GITS_TYPER.ID_bits.
    IttSizeOutOfRange(u8),
    EventOutOfRange {
        device: u32,
        event: u32,
    },
    EventNotMapped {
        device: u32,
        event: u32,
    },
    /// An LPI INTID below 8192 or at or above 2^IDbits.
    IntidOutOfRange(u32),
    CollectionOutOfRange(u32),
    CollectionNotMapped(u16),
    /// An RDbase that is not one of the partition's vCPUs.
    TargetOutOfRange(u64),
    /// MOVALL: not supported by this ITS (one collection per vCPU).
    Unsupported(u8),
    /// A mapping beyond what the hypervisor keeps for a partition.
    TooManyMappings,
    TooManyDevices,
    /// The command at `ipa` is not in the partition's RAM.
    QueueOutsideRam(u64),
    /// GITS_CWRITER.Offset at or beyond the queue's end.
    WriterBeyondQueue(u64),
}

/// Where the translator's results and the guest's faults go.
pub trait VitsSink {
    fn apply(&mut self, cmd: PhysCmd);
    /// A refused command or write: the partition's fault (rate-limited
    /// by the caller like every other guest fault).
    fn fault(&mut self, error: VitsError, offset: u64);
}

/// What the guest is told (GITS_TYPER) and what the hypervisor keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VitsLimits {
    /// DeviceID bits (GITS_TYPER.Devbits + 1); 16 covers every BDF.
    pub device_bits: u8,
    /// EventID/INTID bits (GITS_TYPER.ID_bits + 1).
    pub id_bits: u8,
    /// Collections (GITS_TYPER.HCC): one per vCPU is enough.
    pub collections: u16,
    /// vCPUs of the partition (valid RDbase targets, PTA = 0).
    pub vcpus: u16,
    /// Devices mapped at once.
    pub max_devices: usize,
    /// Event mappings at once, all devices together.
    pub max_mappings: usize,
}

impl VitsLimits {
    pub const fn for_vcpus(vcpus: u16) -> Self {
        VitsLimits {
            device_bits: 16,
            id_bits: 16,
            collections: vcpus,
            vcpus,
            max_devices: 64,
            max_mappings: 4096,
        }
    }
}

// Register offsets of the ITS control frame.
pub const GITS_CTLR: u64 = 0x0000;
pub const GITS_IIDR: u64 = 0x0004;
pub const GITS_TYPER: u64 = 0x0008;
pub const GITS_CBASER: u64 = 0x0080;
pub const GITS_CWRITER: u64 = 0x0088;
pub const GITS_CREADR: u64 = 0x0090;
pub const GITS_BASER0: u64 = 0x0100;
const CTLR_ENABLED: u64 = 1 << 0;
const CTLR_QUIESCENT: u64 = 1 << 31;
const CBASER_VALID: u64 = 1 << 63;
const CBASER_ADDR: u64 = 0x000F_FFFF_FFFF_F000;
/// CBASER fields kept: Valid, InnerCache [61:59], OuterCache [55:53],
/// Physical_Address, Shareability [11:10], Size.
const CBASER_KEPT: u64 = CBASER_VALID | 7 << 59 | 7 << 53 | CBASER_ADDR | 3 << 10 | 0xFF;
const OFFSET: u64 = 0xF_FFE0;
const STALLED: u64 = 1 << 0;
const RETRY: u64 = 1 << 0;
/// The first LPI INTID.
const LPI_BASE: u32 = 8192;
/// GITS_BASER<n> Type [58:56] (1: devices, 4: collections) and
/// Entry_Size [52:48] (bytes - 1), read-only.
const BASER_RO: u64 = 7 << 56 | 0x1F << 48;
const BASER_DEVICES: u64 = 1 << 56 | 7 << 48;

// Command numbers (DW0 [7:0]).
const MOVI: u8 = 0x01;
const INT: u8 = 0x03;
const CLEAR: u8 = 0x04;
const SYNC: u8 = 0x05;
const MAPD: u8 = 0x08;
const MAPC: u8 = 0x09;
const MAPTI: u8 = 0x0A;
const MAPI: u8 = 0x0B;
const INV: u8 = 0x0C;
const INVALL: u8 = 0x0D;
const MOVALL: u8 = 0x0E;
const DISCARD: u8 = 0x0F;

#[derive(Clone, Debug, Default)]
struct Device {
    event_bits: u8,
    /// EventID -> (vINTID, ICID).
    events: BTreeMap<u32, (u32, u16)>,
}

/// One partition's virtual ITS. Touched under the partition's lock (the
/// guest's GITS accesses, like its GICD ones, are a per-partition path).
#[derive(Clone, Debug)]
pub struct Vits {
    limits: VitsLimits,
    ctlr: u64,
    cbaser: u64,
    cwriter: u64,
    creadr: u64,
    baser: [u64; 2],
    devices: BTreeMap<u32, Device>,
    mappings: usize,
    /// ICID -> vCPU.
    collections: alloc::vec::Vec<Option<u16>>,
}

impl Vits {
    pub fn new(limits: VitsLimits) -> Self {
        Vits {
            limits,
            ctlr: 0,
            cbaser: 0,
            cwriter: 0,
            creadr: 0,
            baser: [BASER_DEVICES, 0],
            devices: BTreeMap::new(),
            mappings: 0,
            collections: alloc::vec![None; usize::from(limits.collections)],
        }
    }

    /// GITS_TYPER as the guest sees it: Physical, ITT_entry_size 8 bytes,
    /// ID_bits, Devbits, PTA = 0 (RDbase is a vCPU number), HCC.
    pub fn typer(&self) -> u64 {
        let l = &self.limits;
        1 | 7 << 4
            | u64::from(l.id_bits - 1) << 8
            | u64::from(l.device_bits - 1) << 13
            | u64::from(l.collections.min(255)) << 24
    }

    /// Event mappings held (all devices).
    pub fn mappings(&self) -> usize {
        self.mappings
    }

    pub fn devices(&self) -> usize {
        self.devices.len()
    }

    pub fn stalled(&self) -> bool {
        self.creadr & STALLED != 0
    }

    /// A 64-bit (or 32-bit, for GITS_CTLR/IIDR) read of the control frame.
    pub fn read(&self, offset: u64) -> u64 {
        match offset {
            GITS_CTLR => {
                let idle = self.creadr & OFFSET == self.cwriter || self.stalled();
                (self.ctlr & CTLR_ENABLED) | if idle { CTLR_QUIESCENT } else { 0 }
            }
            GITS_IIDR => u64::from(super::IIDR),
            GITS_TYPER => self.typer(),
            GITS_CBASER => self.cbaser,
            GITS_CWRITER => self.cwriter,
            GITS_CREADR => self.creadr,
            o if (GITS_BASER0..GITS_BASER0 + 16).contains(&o) && o % 8 == 0 => {
                self.baser[((o - GITS_BASER0) / 8) as usize]
            }
            0xFFE8 => 0x3B, // GITS_PIDR2: ArchRev 3
            _ => 0,
        }
    }

    /// A write of the control frame; commands it lets run are read through
    /// `mem`, checked against `owner` and reported to `sink`.
    pub fn write(
        &mut self,
        offset: u64,
        value: u64,
        mem: &impl QueueMemory,
        owner: &impl DeviceOwner,
        sink: &mut impl VitsSink,
    ) {
        match offset {
            GITS_CTLR => {
                self.ctlr = value & CTLR_ENABLED;
                self.run(mem, owner, sink);
            }
            // Writable only while disabled (UNPREDICTABLE otherwise:
            // ignored, below).
            GITS_CBASER if self.ctlr & CTLR_ENABLED == 0 => {
                self.cbaser = value & CBASER_KEPT;
                self.creadr = 0;
                self.cwriter = 0;
            }
            GITS_CWRITER => {
                let off = value & OFFSET;
                if off >= self.queue_bytes() {
                    sink.fault(VitsError::WriterBeyondQueue(off), off);
                    return;
                }
                self.cwriter = off;
                if value & RETRY != 0 {
                    self.creadr &= !STALLED;
                }
                self.run(mem, owner, sink);
            }
            o if (GITS_BASER0..GITS_BASER0 + 16).contains(&o) && o % 8 == 0 => {
                let i = ((o - GITS_BASER0) / 8) as usize;
                self.baser[i] = (self.baser[i] & BASER_RO) | (value & !BASER_RO);
            }
            _ => {} // read-only and reserved: ignored
        }
    }

    fn queue_bytes(&self) -> u64 {
        ((self.cbaser & 0xFF) + 1) * 4096
    }

    /// Processes commands from CREADR to CWRITER: at most one queue's
    /// worth, stopping at the first refused one.
    fn run(&mut self, mem: &impl QueueMemory, owner: &impl DeviceOwner, sink: &mut impl VitsSink) {
        if self.ctlr & CTLR_ENABLED == 0 || self.cbaser & CBASER_VALID == 0 {
            return;
        }
        let size = self.queue_bytes();
        let base = self.cbaser & CBASER_ADDR;
        for _ in 0..size / 32 {
            if self.stalled() || self.creadr & OFFSET == self.cwriter {
                return;
            }
            let off = self.creadr & OFFSET;
            let result = match mem.read_command(base + off) {
                Some(cmd) => self.execute(cmd, owner, sink),
                None => Err(VitsError::QueueOutsideRam(base + off)),
            };
            match result {
                Ok(()) => self.creadr = (off + 32) % size,
                Err(e) => {
                    self.creadr = off | STALLED;
                    sink.fault(e, off);
                    return;
                }
            }
        }
    }

    fn device_id(&self, cmd: &[u64; 4], owner: &impl DeviceOwner) -> Result<u32, VitsError> {
        let device = (cmd[0] >> 32) as u32;
        if self.limits.device_bits < 32 && device >> self.limits.device_bits != 0 {
            return Err(VitsError::DeviceOutOfRange(device));
        }
        if !owner.owns(device) {
            return Err(VitsError::ForeignDevice(device));
        }
        Ok(device)
    }

    /// The mapped event (device, EventID) of a command naming one.
    fn event(&self, cmd: &[u64; 4], owner: &impl DeviceOwner) -> Result<(u32, u32), VitsError> {
        let device = self.device_id(cmd, owner)?;
        let event = cmd[1] as u32;
        let d = self
            .devices
            .get(&device)
            .ok_or(VitsError::DeviceNotMapped(device))?;
        if !d.events.contains_key(&event) {
            return Err(VitsError::EventNotMapped { device, event });
        }
        Ok((device, event))
    }

    fn icid(&self, dw2: u64) -> Result<u16, VitsError> {
        let icid = (dw2 & 0xFFFF) as u32;
        if icid >= u32::from(self.limits.collections) {
            return Err(VitsError::CollectionOutOfRange(icid));
        }
        Ok(icid as u16)
    }

    fn collection(&self, icid: u16) -> Result<u16, VitsError> {
        self.collections[usize::from(icid)].ok_or(VitsError::CollectionNotMapped(icid))
    }

    fn rdbase(&self, dw2: u64) -> Result<u16, VitsError> {
        let rd = (dw2 >> 16) & super::pits::RDBASE_MASK;
        if rd >= u64::from(self.limits.vcpus) {
            return Err(VitsError::TargetOutOfRange(rd));
        }
        Ok(rd as u16)
    }

    /// One command; checks everything before changing anything.
    fn execute(
        &mut self,
        cmd: [u64; 4],
        owner: &impl DeviceOwner,
        sink: &mut impl VitsSink,
    ) -> Result<(), VitsError> {
        let op = cmd[0] as u8;
        match op {
            MAPD => {
                let device = self.device_id(&cmd, owner)?;
                let size = (cmd[1] & 0x1F) as u8;
                let valid = cmd[2] >> 63 & 1 == 1;
                if !valid {
                    if let Some(d) = self.devices.remove(&device) {
                        self.mappings -= d.events.len();
                    }
                    sink.apply(PhysCmd::Mapd {
                        device,
                        event_bits: 0,
                        valid: false,
                    });
                    return Ok(());
                }
                if size >= self.limits.id_bits {
                    return Err(VitsError::IttSizeOutOfRange(size));
                }
                // Remapping a mapped device drops its events (the new ITT
                // is empty as far as the ITS knows).
                let old = self.devices.get(&device).map(|d| d.events.len());
                if old.is_none() && self.devices.len() >= self.limits.max_devices {
                    return Err(VitsError::TooManyDevices);
                }
                self.mappings -= old.unwrap_or(0);
                self.devices.insert(
                    device,
                    Device {
                        event_bits: size + 1,
                        events: BTreeMap::new(),
                    },
                );
                sink.apply(PhysCmd::Mapd {
                    device,
                    event_bits: size + 1,
                    valid: true,
                });
                Ok(())
            }
            MAPC => {
                let icid = self.icid(cmd[2])?;
                let valid = cmd[2] >> 63 & 1 == 1;
                let target = if valid {
                    Some(self.rdbase(cmd[2])?)
                } else {
                    None
                };
                self.collections[usize::from(icid)] = target;
                Ok(())
            }
            MAPTI | MAPI => {
                let device = self.device_id(&cmd, owner)?;
                let event = cmd[1] as u32;
                let vintid = if op == MAPTI {
                    (cmd[1] >> 32) as u32
                } else {
                    event
                };
                let icid = self.icid(cmd[2])?;
                let d = self
                    .devices
                    .get(&device)
                    .ok_or(VitsError::DeviceNotMapped(device))?;
                if u64::from(event) >> d.event_bits != 0 {
                    return Err(VitsError::EventOutOfRange { device, event });
                }
                if vintid < LPI_BASE || u64::from(vintid) >> self.limits.id_bits != 0 {
                    return Err(VitsError::IntidOutOfRange(vintid));
                }
                let vcpu = self.collection(icid)?;
                let new = !d.events.contains_key(&event);
                if new && self.mappings >= self.limits.max_mappings {
                    return Err(VitsError::TooManyMappings);
                }
                let d = self.devices.get_mut(&device).expect("checked");
                d.events.insert(event, (vintid, icid));
                if new {
                    self.mappings += 1;
                }
                sink.apply(PhysCmd::Mapti {
                    device,
                    event,
                    vintid,
                    vcpu,
                });
                Ok(())
            }
            MOVI => {
                let (device, event) = self.event(&cmd, owner)?;
                let icid = self.icid(cmd[2])?;
                let vcpu = self.collection(icid)?;
                if let Some(e) = self
                    .devices
                    .get_mut(&device)
                    .and_then(|d| d.events.get_mut(&event))
                {
                    e.1 = icid;
                }
                sink.apply(PhysCmd::Movi {
                    device,
                    event,
                    vcpu,
                });
                Ok(())
            }
            DISCARD => {
                let (device, event) = self.event(&cmd, owner)?;
                if let Some(d) = self.devices.get_mut(&device) {
                    d.events.remove(&event);
                    self.mappings -= 1;
                }
                sink.apply(PhysCmd::Discard { device, event });
                Ok(())
            }
            INV | INT | CLEAR => {
                let (device, event) = self.event(&cmd, owner)?;
                // The event's collection must still be mapped.
                let icid = self.devices[&device].events[&event].1;
                self.collection(icid)?;
                sink.apply(match op {
                    INV => PhysCmd::Inv { device, event },
                    INT => PhysCmd::Int { device, event },
                    _ => PhysCmd::Clear { device, event },
                });
                Ok(())
            }
            INVALL => {
                let vcpu = self.collection(self.icid(cmd[2])?)?;
                sink.apply(PhysCmd::InvAll { vcpu });
                Ok(())
            }
            SYNC => {
                let vcpu = self.rdbase(cmd[2])?;
                sink.apply(PhysCmd::Sync { vcpu });
                Ok(())
            }
            MOVALL => Err(VitsError::Unsupported(op)),
            other => Err(VitsError::UnknownCommand(other)),
        }
    }
}

#[cfg(test)]
#[path = "vits_tests.rs"]
mod tests;
