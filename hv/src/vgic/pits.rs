//! The physical ITS as the hypervisor drives it (GICv3 host): the command
//! encoding, the flat device and collection tables, the physical LPIs and
//! their routes to guests, and the translation of a partition's accepted
//! virtual ITS commands ([`super::vits::PhysCmd`]) into physical ones.
//!
//! The hypervisor owns the physical ITS. A device's MSI is a bus write to
//! the physical GITS_TRANSLATER carrying the DeviceID the bus gives it (its
//! requester ID, which no guest can forge) and the EventID the guest wrote
//! as MSI data; so the physical DeviceID and EventID are the guest's own
//! (the virtual ITS already refused DeviceIDs the partition was not
//! assigned). What differs is the INTID: every guest event gets a physical
//! LPI from one pool ([`LpiPool`]), and the collection: one per physical
//! CPU (ICID = CPU index), so an event mapped to a vCPU goes to the
//! collection of the CPU that vCPU is pinned to. Each physical LPI's route
//! (partition slot, vCPU, guest vINTID) sits in [`LpiRoutes`], written on
//! this slow path and read with one atomic load on the hot path (a
//! physical LPI taken at EL2 on the owner's CPU: EOI, look up, inject the
//! vLPI through a list register).
//!
//! Guest INV/INVALL change nothing physical: every mapped physical LPI
//! stays enabled at one priority, and the guest's enable and priority (in
//! its own LPI property table) are applied when the vLPI is injected. Guest
//! INT and CLEAR become physical INT and CLEAR (the interrupt then takes
//! the real path). A physical LPI freed by DISCARD or MAPD V=0 is followed
//! by a SYNC; one still pending in a redistributor at that moment finds no
//! route (or, reused at once, a new owner's route: one spurious interrupt
//! there, never another partition's data).
//!
//! Hypervisor memory per partition is bounded twice: the virtual ITS's
//! [`super::vits::VitsLimits`] (devices, mappings) and here the ITT size
//! ([`MAX_EVENT_BITS`]: 2048 events, the largest MSI-X table).

use super::vits::PhysCmd;
use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

/// The first LPI INTID.
pub const LPI_BASE: u32 = 8192;
/// A device's ITT covers at most 2^11 events (MSI-X has at most 2048
/// vectors); a larger guest MAPD is refused.
pub const MAX_EVENT_BITS: u8 = 11;
/// Physical LPIs the hypervisor hands out (INTIDs 8192..16383: 14 ID
/// bits, an 8 KiB property table).
pub const LPI_COUNT: u32 = 8192;
/// ITTs are 256-byte aligned (MAPD ITT_addr is [51:8]).
pub const ITT_ALIGN: usize = 256;

// Command numbers (GICv3 spec 5.3, DW0 [7:0]).
const MOVI: u64 = 0x01;
const INT: u64 = 0x03;
const CLEAR: u64 = 0x04;
const SYNC: u64 = 0x05;
const MAPD: u64 = 0x08;
const MAPC: u64 = 0x09;
const MAPTI: u64 = 0x0A;
const INV: u64 = 0x0C;
const INVALL: u64 = 0x0D;
const DISCARD: u64 = 0x0F;
/// RDbase in a command's DW2 is bits [51:16] (MAPC, SYNC, VMAPP, VMOVP):
/// 36 bits, a Processor_Number (PTA = 0) or PA[51:16] (PTA = 1).
pub const RDBASE_MASK: u64 = 0xF_FFFF_FFFF;

/// One command for the physical ITS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ItsCmd {
    /// `event_bits` events (MAPD Size = event_bits - 1), ITT at `itt`.
    Mapd {
        device: u32,
        itt: u64,
        event_bits: u8,
        valid: bool,
    },
    /// `rdbase`: GICR_TYPER.Processor_Number (GITS_TYPER.PTA = 0) or the
    /// redistributor's physical address >> 16 (PTA = 1).
    Mapc {
        icid: u16,
        rdbase: u64,
        valid: bool,
    },
    Mapti {
        device: u32,
        event: u32,
        intid: u32,
        icid: u16,
    },
    Movi {
        device: u32,
        event: u32,
        icid: u16,
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
    Invall {
        icid: u16,
    },
    Sync {
        rdbase: u64,
    },
}

impl ItsCmd {
    /// The DeviceID field of the commands that name one: the one list of
    /// them [`ItsCmd::device`] and [`ItsCmd::with_device`] read.
    fn device_mut(&mut self) -> Option<&mut u32> {
        match self {
            ItsCmd::Mapd { device, .. }
            | ItsCmd::Mapti { device, .. }
            | ItsCmd::Movi { device, .. }
            | ItsCmd::Discard { device, .. }
            | ItsCmd::Inv { device, .. }
            | ItsCmd::Int { device, .. }
            | ItsCmd::Clear { device, .. } => Some(device),
            ItsCmd::Mapc { .. } | ItsCmd::Invall { .. } | ItsCmd::Sync { .. } => None,
        }
    }

    /// The DeviceID the command names, if any (MAPC, INVALL and SYNC name
    /// none).
    pub fn device(&self) -> Option<u32> {
        let mut cmd = *self;
        cmd.device_mut().copied()
    }

    /// The same command naming DeviceID `to` (one that names none is
    /// unchanged).
    pub fn with_device(mut self, to: u32) -> ItsCmd {
        if let Some(device) = self.device_mut() {
            *device = to;
        }
        self
    }
}

fn dev_event(op: u64, device: u32, event: u32) -> [u64; 4] {
    [op | u64::from(device) << 32, u64::from(event), 0, 0]
}

impl ItsCmd {
    /// The command's four doublewords (GICv3 spec 5.3, "ITS commands").
    pub fn encode(&self) -> [u64; 4] {
        match *self {
            ItsCmd::Mapd {
                device,
                itt,
                event_bits,
                valid,
            } => [
                MAPD | u64::from(device) << 32,
                u64::from(event_bits.saturating_sub(1) & 0x1F),
                (itt & 0x000F_FFFF_FFFF_FF00) | u64::from(valid) << 63,
                0,
            ],
            ItsCmd::Mapc {
                icid,
                rdbase,
                valid,
            } => [
                MAPC,
                0,
                u64::from(icid) | (rdbase & RDBASE_MASK) << 16 | u64::from(valid) << 63,
                0,
            ],
            ItsCmd::Mapti {
                device,
                event,
                intid,
                icid,
            } => [
                MAPTI | u64::from(device) << 32,
                u64::from(event) | u64::from(intid) << 32,
                u64::from(icid),
                0,
            ],
            ItsCmd::Movi {
                device,
                event,
                icid,
            } => {
                let mut c = dev_event(MOVI, device, event);
                c[2] = u64::from(icid);
                c
            }
            ItsCmd::Discard { device, event } => dev_event(DISCARD, device, event),
            ItsCmd::Inv { device, event } => dev_event(INV, device, event),
            ItsCmd::Int { device, event } => dev_event(INT, device, event),
            ItsCmd::Clear { device, event } => dev_event(CLEAR, device, event),
            ItsCmd::Invall { icid } => [INVALL, 0, u64::from(icid), 0],
            ItsCmd::Sync { rdbase } => [SYNC, 0, (rdbase & RDBASE_MASK) << 16, 0],
        }
    }
}

/// What the physical GITS_TYPER says (GICv3 spec 12.19.18).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ItsTyper {
    /// ITT_entry_size + 1: bytes per ITT entry.
    pub itt_entry_bytes: usize,
    /// ID_bits + 1: EventID bits.
    pub id_bits: u8,
    /// Devbits + 1: DeviceID bits.
    pub device_bits: u8,
    /// PTA: MAPC/SYNC name a redistributor by physical address.
    pub pta: bool,
    /// HCC: collections held in the ITS itself (no memory needed for them).
    pub hcc: u16,
    /// Virtual: a GICv4 ITS (vPEs, VMAPP/VMAPTI; GITS_TYPER [1]).
    pub virt: bool,
    /// A GICv4.1 ITS that takes vSGIs: Virtual, VMAPP [40] (the 4.1
    /// command layouts) and VSGI [39] (GITS_SGIR, the VSGI command).
    pub vsgi: bool,
}

impl ItsTyper {
    pub fn decode(typer: u64) -> ItsTyper {
        ItsTyper {
            itt_entry_bytes: ((typer >> 4) & 0xF) as usize + 1,
            id_bits: ((typer >> 8) & 0x1F) as u8 + 1,
            device_bits: ((typer >> 13) & 0x1F) as u8 + 1,
            pta: typer >> 19 & 1 == 1,
            hcc: ((typer >> 24) & 0xFF) as u16,
            virt: typer >> 1 & 1 == 1,
            vsgi: typer >> 1 & 1 == 1 && typer >> 39 & 3 == 3,
        }
    }

    /// The RDbase that names the redistributor of a CPU in MAPC and SYNC.
    pub fn rdbase(&self, processor_number: u16, redist_pa: u64) -> u64 {
        if self.pta {
            redist_pa >> 16
        } else {
            u64::from(processor_number)
        }
    }

    /// Bytes of a device's ITT for 2^`event_bits` events, rounded up to
    /// the ITT alignment.
    pub fn itt_bytes(&self, event_bits: u8) -> usize {
        ((self.itt_entry_bytes << event_bits) + ITT_ALIGN - 1) & !(ITT_ALIGN - 1)
    }
}

/// GITS_BASER<n>.Type (GICv3 spec 12.19.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BaserType {
    Unused,
    Devices,
    Vpes,
    Collections,
    Other(u8),
}

/// A GITS_BASER<n> as read: its type and entry size (read-only fields).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Baser {
    pub kind: BaserType,
    pub entry_bytes: usize,
}

/// Page_Size [9:8] encodings and the sizes they mean.
pub const PAGE_SIZES: [(u64, usize); 3] = [(2, 0x1_0000), (1, 0x4000), (0, 0x1000)];

impl Baser {
    pub fn decode(baser: u64) -> Baser {
        let kind = match (baser >> 56) & 7 {
            0 => BaserType::Unused,
            1 => BaserType::Devices,
            2 => BaserType::Vpes,
            4 => BaserType::Collections,
            t => BaserType::Other(t as u8),
        };
        Baser {
            kind,
            entry_bytes: ((baser >> 48) & 0x1F) as usize + 1,
        }
    }

    /// Entries a flat table of this type needs: every DeviceID, one
    /// collection per CPU beyond those the ITS holds itself, or on a GICv4
    /// ITS every vPE ID the hypervisor hands out (`v40::VPE_COUNT`).
    /// None: the hypervisor gives this type no memory.
    pub fn entries(&self, typer: &ItsTyper, cpus: usize) -> Option<usize> {
        match self.kind {
            BaserType::Devices => Some(1usize << typer.device_bits),
            BaserType::Collections => Some(cpus.saturating_sub(usize::from(typer.hcc))),
            BaserType::Vpes if typer.virt => Some(usize::from(super::v40::VPE_COUNT)),
            _ => None,
        }
    }

    /// Pages of `page` bytes for `entries` entries, None beyond the 256
    /// pages a flat table's Size field can describe.
    pub fn pages(&self, entries: usize, page: usize) -> Option<usize> {
        let pages = (entries * self.entry_bytes).div_ceil(page).max(1);
        (pages <= 256).then_some(pages)
    }
}

/// The GITS_BASER<n> value that points a flat table at `pa`: Valid,
/// InnerCache RaWaWb, Inner Shareable, the read-only fields as read,
/// Page_Size, Size = pages - 1; None where `pa` has no encoding at that
/// page size.
pub fn baser_value(read: u64, pa: u64, page_code: u64, pages: usize) -> Option<u64> {
    const RO: u64 = 7 << 56 | 0x1F << 48;
    // Physical_Address is PA[47:12]; with 64 KiB pages PA[51:48] goes in
    // [15:12] (the bits a 64 KiB-aligned PA has clear). A PA above 2^48
    // has no encoding with 4 or 16 KiB pages.
    let addr = match page_code {
        2 if pa < 1 << 52 => pa & 0x0000_FFFF_FFFF_0000 | (pa >> 48 & 0xF) << 12,
        _ if pa < 1 << 48 => pa & 0x0000_FFFF_FFFF_F000,
        _ => return None,
    };
    Some(1 << 63 | 7 << 59 | (read & RO) | addr | 1 << 10 | page_code << 8 | (pages as u64 - 1))
}

/// GITS_CBASER for a command queue of `pages` 4 KiB pages at `pa`.
pub fn cbaser_value(pa: u64, pages: usize) -> u64 {
    1 << 63 | 7 << 59 | (pa & 0x000F_FFFF_FFFF_F000) | 1 << 10 | (pages as u64 - 1)
}

/// The physical LPIs the hypervisor hands out: INTIDs LPI_BASE..+count.
#[derive(Clone, Debug)]
pub struct LpiPool {
    used: Vec<u64>,
    count: u32,
}

impl LpiPool {
    pub fn new(count: u32) -> LpiPool {
        LpiPool {
            used: alloc::vec![0; count.div_ceil(64) as usize],
            count,
        }
    }

    pub fn alloc(&mut self) -> Option<u32> {
        for (w, word) in self.used.iter_mut().enumerate() {
            if *word != u64::MAX {
                let bit = (!*word).trailing_zeros();
                let n = w as u32 * 64 + bit;
                if n >= self.count {
                    return None;
                }
                *word |= 1 << bit;
                return Some(LPI_BASE + n);
            }
        }
        None
    }

    /// Gives an LPI back; one not handed out is ignored.
    pub fn free(&mut self, lpi: u32) {
        if let Some(n) = lpi.checked_sub(LPI_BASE).filter(|&n| n < self.count) {
            self.used[(n / 64) as usize] &= !(1 << (n % 64));
        }
    }

    pub fn in_use(&self) -> u32 {
        self.used.iter().map(|w| w.count_ones()).sum()
    }
}

/// Where a physical LPI goes: the partition in `slot`, its `vcpu`, as
/// the guest's LPI `vintid`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LpiRoute {
    pub slot: u16,
    pub vcpu: u16,
    pub vintid: u32,
}

const ROUTE_VALID: u64 = 1 << 63;

impl LpiRoute {
    fn pack(self) -> u64 {
        ROUTE_VALID
            | u64::from(self.slot & 0x7FFF) << 48
            | u64::from(self.vcpu) << 32
            | u64::from(self.vintid)
    }

    fn unpack(v: u64) -> Option<LpiRoute> {
        (v & ROUTE_VALID != 0).then_some(LpiRoute {
            slot: ((v >> 48) & 0x7FFF) as u16,
            vcpu: (v >> 32) as u16,
            vintid: v as u32,
        })
    }
}

/// Each physical LPI's route, one atomic word per LPI: written under the
/// owning partition's vITS lock (slow path), read lock-free by the CPU that
/// takes the LPI (hot path).
#[derive(Debug)]
pub struct LpiRoutes {
    routes: Vec<AtomicU64>,
}

impl LpiRoutes {
    pub fn new(count: u32) -> LpiRoutes {
        LpiRoutes {
            routes: (0..count).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn slot(&self, lpi: u32) -> Option<&AtomicU64> {
        self.routes.get(lpi.checked_sub(LPI_BASE)? as usize)
    }

    pub fn set(&self, lpi: u32, route: Option<LpiRoute>) {
        if let Some(a) = self.slot(lpi) {
            a.store(route.map_or(0, LpiRoute::pack), Ordering::Release);
        }
    }

    /// The hot path's one load.
    pub fn get(&self, lpi: u32) -> Option<LpiRoute> {
        LpiRoute::unpack(self.slot(lpi)?.load(Ordering::Acquire))
    }

    /// A physical LPI taken on a CPU (after its EOI): the guest vINTID to
    /// inject into the vCPU loaded there (`loaded`: its partition's slot
    /// and vCPU index), or None: no route (discarded, stray), or the route
    /// names another partition or vCPU (mapped away or restarted while it
    /// was pending: dropped and counted by the caller, never injected
    /// into the wrong guest).
    pub fn deliver(&self, lpi: u32, loaded: Option<(u16, u16)>) -> Option<u32> {
        let r = self.get(lpi)?;
        (loaded? == (r.slot, r.vcpu)).then_some(r.vintid)
    }
}

/// Why a partition's command could not be applied physically.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PitsError {
    /// MAPD with more events than [`MAX_EVENT_BITS`] or the ITS's ID_bits.
    TooManyEvents { device: u32, event_bits: u8 },
    /// No hypervisor memory left for an ITT.
    NoIttMemory(u32),
    /// No physical LPI left.
    NoLpi,
    /// A vCPU the partition does not have (the vITS checked; defensive).
    NoSuchVcpu(u16),
    /// The DeviceID is beyond the physical ITS's Devbits.
    DeviceOutOfRange(u32),
}

/// What applying needs from the platform (a fake in the tests).
/// Where a partition's ITS mappings go on the machine: its vCPUs' CPUs and
/// their redistributors, and the memory ITTs come from. Shared by the
/// GICv3 path ([`PitsEnv`]) and the GICv4.0 one (`v40::V4Env`).
pub trait ItsPlacement {
    /// The physical CPU (= ICID) vCPU `vcpu` of the partition is pinned to.
    fn cpu_of(&self, vcpu: u16) -> Option<u16>;
    /// That CPU's RDbase (see [`ItsTyper::rdbase`]).
    fn rdbase(&self, cpu: u16) -> u64;
    /// `bytes` of zeroed, [`ITT_ALIGN`]-aligned memory the guest cannot
    /// reach, for an ITT; its physical address.
    fn alloc_itt(&mut self, bytes: usize) -> Option<u64>;
    fn free_itt(&mut self, pa: u64, bytes: usize);
}

/// What applying on the GICv3 path needs from the platform (a fake in the
/// tests).
pub trait PitsEnv: ItsPlacement {
    fn alloc_lpi(&mut self) -> Option<u32>;
    fn free_lpi(&mut self, lpi: u32);
    /// Sets (or clears) a physical LPI's route.
    fn route(&mut self, lpi: u32, route: Option<LpiRoute>);
    /// Queues a command on the physical ITS.
    fn send(&mut self, cmd: ItsCmd);
}

#[derive(Clone, Copy, Debug)]
struct PEvent {
    lpi: u32,
    vcpu: u16,
    vintid: u32,
}

#[derive(Clone, Debug)]
struct PDevice {
    itt: u64,
    itt_bytes: usize,
    /// EventID -> its physical LPI and where it goes.
    events: BTreeMap<u32, PEvent>,
}

/// One partition's side of the physical ITS: its devices' ITTs and the
/// physical LPI of each of its events.
#[derive(Clone, Debug)]
pub struct PartitionIts {
    slot: u16,
    typer: ItsTyper,
    devices: BTreeMap<u32, PDevice>,
}

impl PartitionIts {
    pub fn new(slot: u16, typer: ItsTyper) -> PartitionIts {
        PartitionIts {
            slot,
            typer,
            devices: BTreeMap::new(),
        }
    }

    /// Physical LPIs held.
    pub fn lpis(&self) -> usize {
        self.devices.values().map(|d| d.events.len()).sum()
    }

    /// The physical LPI of a guest event, if mapped.
    pub fn lpi_of(&self, device: u32, event: u32) -> Option<u32> {
        Some(self.devices.get(&device)?.events.get(&event)?.lpi)
    }

    /// Where a guest event goes: its vCPU and vINTID, if mapped.
    pub fn route_of(&self, device: u32, event: u32) -> Option<(u16, u32)> {
        let e = self.devices.get(&device)?.events.get(&event)?;
        Some((e.vcpu, e.vintid))
    }

    /// The vINTIDs of every event mapped to `vcpu` (what a guest INVALL on
    /// its collection re-checks).
    pub fn vintids_of(&self, vcpu: u16) -> impl Iterator<Item = u32> + '_ {
        self.devices
            .values()
            .flat_map(|d| d.events.values())
            .filter(move |e| e.vcpu == vcpu)
            .map(|e| e.vintid)
    }

    fn cpu(env: &impl PitsEnv, vcpu: u16) -> Result<u16, PitsError> {
        env.cpu_of(vcpu).ok_or(PitsError::NoSuchVcpu(vcpu))
    }

    /// Drops one event: DISCARD, route cleared, LPI freed (after the SYNC
    /// the caller's batch ends with).
    fn drop_event(env: &mut impl PitsEnv, device: u32, event: u32, lpi: u32, discard: bool) {
        if discard {
            env.send(ItsCmd::Discard { device, event });
        }
        env.route(lpi, None);
        env.free_lpi(lpi);
    }

    fn unmap_device(&mut self, env: &mut impl PitsEnv, device: u32) {
        if let Some(d) = self.devices.remove(&device) {
            env.send(ItsCmd::Mapd {
                device,
                itt: 0,
                event_bits: 1,
                valid: false,
            });
            for (&event, e) in &d.events {
                Self::drop_event(env, device, event, e.lpi, false);
            }
            env.free_itt(d.itt, d.itt_bytes);
        }
    }

    fn sync(env: &mut impl PitsEnv, cpu: u16) {
        let rdbase = env.rdbase(cpu);
        env.send(ItsCmd::Sync { rdbase });
    }

    /// One accepted virtual ITS command, applied to the physical ITS.
    /// Checks before changing anything: on an error nothing was sent.
    pub fn apply(&mut self, cmd: PhysCmd, env: &mut impl PitsEnv) -> Result<(), PitsError> {
        match cmd {
            PhysCmd::Mapd {
                device,
                event_bits,
                valid,
            } => {
                if self.typer.device_bits < 32 && device >> self.typer.device_bits != 0 {
                    return Err(PitsError::DeviceOutOfRange(device));
                }
                if !valid {
                    self.unmap_device(env, device);
                    Self::sync(env, 0);
                    return Ok(());
                }
                if event_bits > MAX_EVENT_BITS || event_bits > self.typer.id_bits {
                    return Err(PitsError::TooManyEvents { device, event_bits });
                }
                let bytes = self.typer.itt_bytes(event_bits);
                let itt = env.alloc_itt(bytes).ok_or(PitsError::NoIttMemory(device))?;
                // Remapping drops the old ITT and its events.
                self.unmap_device(env, device);
                env.send(ItsCmd::Mapd {
                    device,
                    itt,
                    event_bits,
                    valid: true,
                });
                self.devices.insert(
                    device,
                    PDevice {
                        itt,
                        itt_bytes: bytes,
                        events: BTreeMap::new(),
                    },
                );
                Self::sync(env, 0);
                Ok(())
            }
            PhysCmd::Mapti {
                device,
                event,
                vintid,
                vcpu,
            } => {
                let cpu = Self::cpu(env, vcpu)?;
                let Some(d) = self.devices.get(&device) else {
                    // The vITS mapped it, so the physical MAPD must have
                    // failed earlier; nothing to map onto.
                    return Err(PitsError::DeviceOutOfRange(device));
                };
                let old = d.events.get(&event).copied();
                let lpi = match old {
                    Some(e) => e.lpi,
                    None => env.alloc_lpi().ok_or(PitsError::NoLpi)?,
                };
                if old.is_some() {
                    env.send(ItsCmd::Discard { device, event });
                }
                env.route(
                    lpi,
                    Some(LpiRoute {
                        slot: self.slot,
                        vcpu,
                        vintid,
                    }),
                );
                env.send(ItsCmd::Mapti {
                    device,
                    event,
                    intid: lpi,
                    icid: cpu,
                });
                env.send(ItsCmd::Inv { device, event });
                Self::sync(env, cpu);
                if let Some(d) = self.devices.get_mut(&device) {
                    d.events.insert(event, PEvent { lpi, vcpu, vintid });
                }
                Ok(())
            }
            PhysCmd::Movi {
                device,
                event,
                vcpu,
            } => {
                let cpu = Self::cpu(env, vcpu)?;
                let Some(&PEvent { lpi, vintid, .. }) =
                    self.devices.get(&device).and_then(|d| d.events.get(&event))
                else {
                    return Ok(());
                };
                env.route(
                    lpi,
                    Some(LpiRoute {
                        slot: self.slot,
                        vcpu,
                        vintid,
                    }),
                );
                env.send(ItsCmd::Movi {
                    device,
                    event,
                    icid: cpu,
                });
                Self::sync(env, cpu);
                if let Some(e) = self
                    .devices
                    .get_mut(&device)
                    .and_then(|d| d.events.get_mut(&event))
                {
                    e.vcpu = vcpu;
                }
                Ok(())
            }
            PhysCmd::Discard { device, event } => {
                if let Some(d) = self.devices.get_mut(&device) {
                    if let Some(e) = d.events.remove(&event) {
                        Self::drop_event(env, device, event, e.lpi, true);
                        let cpu = env.cpu_of(e.vcpu).unwrap_or(0);
                        Self::sync(env, cpu);
                    }
                }
                Ok(())
            }
            PhysCmd::Int { device, event } | PhysCmd::Clear { device, event } => {
                if self.lpi_of(device, event).is_some() {
                    env.send(match cmd {
                        PhysCmd::Int { .. } => ItsCmd::Int { device, event },
                        _ => ItsCmd::Clear { device, event },
                    });
                }
                Ok(())
            }
            PhysCmd::Sync { vcpu } => {
                let cpu = Self::cpu(env, vcpu)?;
                Self::sync(env, cpu);
                Ok(())
            }
            // The guest's enable/priority live in its own property table,
            // applied at injection: nothing physical to invalidate.
            PhysCmd::Inv { .. } | PhysCmd::InvAll { .. } => Ok(()),
        }
    }

    /// Every device unmapped and every LPI given back (the partition
    /// stops, restarts or goes; its functions were quiesced first).
    pub fn release(&mut self, env: &mut impl PitsEnv) {
        self.release_where(env, |_| true);
    }

    /// [`PartitionIts::release`] of the devices `on` names only (those of
    /// one physical ITS, the caller holding its lock), then a SYNC.
    pub fn release_where(&mut self, env: &mut impl PitsEnv, on: impl Fn(u32) -> bool) {
        let devices: Vec<u32> = self.devices.keys().copied().filter(|&d| on(d)).collect();
        for device in devices {
            self.unmap_device(env, device);
        }
        Self::sync(env, 0);
    }
}

#[cfg(test)]
#[path = "pits_tests.rs"]
mod tests;
