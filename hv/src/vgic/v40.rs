//! GICv4.0 direct vLPI injection: the core's decisions, host-tested against
//! a fake ITS queue and a fake redistributor. `its` wires them to the
//! partitions' virtual ITSes and `exit` to vCPU residency; the platform
//! gives the ITS its vPE table and each CPU its VLPI frame
//! (`platform/src/its.rs`); the `gicv4` boot case runs it on QEMU. On a
//! GICv4.1 host [`PartitionVlpis::apply`] translates the guest's commands
//! too (the same encodings), on the vSGI path's vPEs (`vgic::v41::choose_vlpis`);
//! its VMAPP and [`Residency`] are GICv4.0's only.
//!
//! - [`LpiDelivery::choose`]: a partition gets direct vLPIs when every
//!   redistributor's GICR_TYPER reports VLPIS, the ITS's GITS_TYPER reports
//!   Virtual, and the partition has a virtual ITS (`its::msi_path_to`);
//!   otherwise its MSIs take the GICv3 path of `pits` (a physical LPI taken
//!   at EL2 and injected through a list register). The host half is
//!   `gichost::GicFound::direct_vlpi`, which the platform turns on with.
//! - [`VpeIds`]: one vPE per vCPU, IDs allocated host-wide (never shared
//!   between partitions). Each vPE has a virtual LPI pending table
//!   ([`vpt_bytes`], [`VPT_ALIGN`]: 64 KiB aligned) in hypervisor memory
//!   no guest maps (the platform's allocator; the core only asks).
//! - The vLPI property table is the guest's own GICR_PROPBASER table,
//!   translated to a PA and bounds-checked inside one of the partition's
//!   RAM ranges ([`vpropbaser`]). Chosen over a hypervisor copy refreshed
//!   on INV/INVALL because the GIC then reads exactly what the guest wrote
//!   (enable and priority), a guest INV becomes the physical INV on the
//!   same (DeviceID, EventID) and a guest INVALL a VINVALL, with no copy to
//!   keep coherent and no hypervisor memory per partition; the table can
//!   only hold the guest's own vLPIs' configuration, so a hostile guest
//!   reaches nothing but itself. The bound it implies: a vINTID must be
//!   below 2^(the guest's PROPBASER IDbits + 1) as well as the vITS's
//!   ID_bits, or the GIC would read past the table ([`V4Error::VintidOutOfRange`]).
//! - [`PartitionVlpis::apply`]: the vITS's accepted [`PhysCmd`]s become
//!   GICv4.0 commands on the physical ITS: MAPD as on GICv3 (ITT in
//!   hypervisor memory), MAPTI/MAPI -> VMAPTI (the guest's vINTID on the
//!   target vCPU's vPE, no doorbell), MOVI -> VMOVI, DISCARD -> DISCARD,
//!   INV -> INV, INVALL -> VINVALL, INT/CLEAR -> INT/CLEAR, SYNC -> VSYNC;
//!   each mapping change ends with a VSYNC of the vPE. [`PartitionVlpis::map_vpes`]
//!   issues VMAPP per vPE with the redistributor of the CPU its vCPU is
//!   pinned to (partition start), [`PartitionVlpis::release`] the VMAPP V=0s.
//! - [`Residency`]: one CPU's vPE residency (GICv4.0 layout: no vPE ID;
//!   the vPE is named by its pending table address, and GICR_VPROPBASER is
//!   written per residency while VPENDBASER.Valid is 0). Load writes
//!   VPROPBASER then VPENDBASER with Valid; put clears Valid and waits for
//!   Dirty = 0 ([`DIRTY_POLLS`], bounded), returning PendingLast. Only the
//!   CPU's own redistributor is touched, owned by that CPU: no lock.
//! - WFI: HCR_EL2.TWI is not set (`platform/src/vcpu.rs` HCR_GUEST), so a
//!   vCPU's WFI sleeps at EL1 on its dedicated CPU, and a pending virtual
//!   interrupt of the resident vPE is a WFI wake-up event there. The
//!   EL2-WFI case the doorbells exist for (a vPE made non-resident while
//!   its CPU idles) does not arise with pinned vCPUs: the vPE is resident
//!   the whole time its partition runs. So no doorbell: VMAPTI and VMOVI
//!   carry Dbell_pINTID = 1023 ([`NO_DOORBELL`]). Were WFI ever trapped for
//!   such a vCPU, the exit path would have to stop idling at EL2 or the
//!   vLPI would wait for the next physical interrupt.
//!
//! Command encodings are written from the GICv4.0 command tables (GIC
//! architecture specification, "ITS commands": VMAPP 0x29, VMAPTI 0x2A,
//! VMAPI 0x2B, VMOVI 0x21, VSYNC 0x25, VINVALL 0x2D; vPEID DW1 [47:32],
//! vINTID DW2 [31:0], Dbell_pINTID DW2 [63:32], VMOVI D DW2 [0], VMAPP
//! V DW2 [63], RDbase DW2 [51:16], VPT_addr DW3 [51:16], VPT_size DW3
//! [4:0]) and checked field by field against Linux's irq-gic-v3-its.c
//! encoders.
//!
use super::pits::{ItsCmd, ItsPlacement, ItsTyper, ITT_ALIGN, LPI_BASE, MAX_EVENT_BITS};
use super::vits::PhysCmd;
use alloc::collections::BTreeMap;
use alloc::vec::Vec;

// GICR_TYPER (RD_base + 0x0008) and GITS_TYPER (ITS_base + 0x0008).
const GICR_TYPER_VLPIS: u64 = 1 << 1;
const GITS_TYPER_VIRTUAL: u64 = 1 << 1;

/// Dbell_pINTID meaning "no doorbell" (VMAPTI, VMOVI).
pub const NO_DOORBELL: u32 = 1023;
/// Virtual LPI pending tables are 64 KiB aligned (GICR_VPENDBASER and
/// VMAPP VPT_addr hold PA [51:16]).
pub const VPT_ALIGN: usize = 0x1_0000;
/// vPE IDs the hypervisor hands out (VMAPP vPEID is 16 bits; one per vCPU
/// of the machine is far below this).
pub const VPE_COUNT: u16 = 1024;

/// How a partition's MSIs reach its vCPUs on this host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LpiDelivery {
    /// GICv3 path: a physical LPI taken at EL2, injected via a list register.
    Trapped,
    /// GICv4.0: VMAPTI to the vCPU's vPE, no exit to EL2.
    Direct,
}

impl LpiDelivery {
    /// From every redistributor's GICR_TYPER, the ITS's GITS_TYPER and
    /// whether the partition has a virtual ITS at all.
    pub fn choose(gicr_typers: &[u64], gits_typer: Option<u64>, has_vits: bool) -> LpiDelivery {
        let all_rd = !gicr_typers.is_empty()
            && gicr_typers
                .iter()
                .all(|t| t & GICR_TYPER_VLPIS == GICR_TYPER_VLPIS);
        match gits_typer {
            Some(t) if has_vits && all_rd && t & GITS_TYPER_VIRTUAL != 0 => LpiDelivery::Direct,
            _ => LpiDelivery::Trapped,
        }
    }
}

/// The host's vPE IDs.
#[derive(Clone, Debug)]
pub struct VpeIds {
    used: Vec<u64>,
    count: u16,
}

impl VpeIds {
    pub fn new(count: u16) -> VpeIds {
        VpeIds {
            used: alloc::vec![0; usize::from(count).div_ceil(64)],
            count,
        }
    }

    pub fn alloc(&mut self) -> Option<u16> {
        for (w, word) in self.used.iter_mut().enumerate() {
            if *word != u64::MAX {
                let bit = (!*word).trailing_zeros();
                let n = w as u32 * 64 + bit;
                if n >= u32::from(self.count) {
                    return None;
                }
                *word |= 1 << bit;
                return Some(n as u16);
            }
        }
        None
    }

    /// Gives an ID back; one not handed out is ignored.
    pub fn free(&mut self, vpe: u16) {
        if vpe < self.count {
            self.used[usize::from(vpe / 64)] &= !(1 << (vpe % 64));
        }
    }
}

/// Bytes of a virtual LPI pending table for vINTIDs below 2^`id_bits`
/// (one bit per INTID), rounded up to [`VPT_ALIGN`].
pub fn vpt_bytes(id_bits: u8) -> usize {
    ((1usize << id_bits) / 8).next_multiple_of(VPT_ALIGN)
}

/// One range of a partition's RAM: guest physical `ipa`, host `pa`, `size`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RamRange {
    pub ipa: u64,
    pub pa: u64,
    pub size: u64,
}

/// Why the guest's property table cannot serve as the vLPI property table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PropError {
    /// IDbits + 1 below 14: no LPI fits (GICv3 spec: LPIs unsupported).
    TooFewIdBits(u8),
    /// The table (ipa, bytes) is not wholly inside one RAM range.
    OutsideRam { ipa: u64, bytes: u64 },
}

/// The guest's table as the vPE's property table: the GICR_VPROPBASER
/// value and the vINTID bits it covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vprop {
    pub value: u64,
    pub id_bits: u8,
}

/// From the guest's GICR_PROPBASER (IPA [51:12], IDbits [4:0]): the
/// table's PA if all 2^(IDbits+1) - 8192 bytes sit in one RAM range, its
/// ID bits capped at `max_id_bits` (the vITS's ID_bits).
pub fn vpropbaser(propbaser: u64, ram: &[RamRange], max_id_bits: u8) -> Result<Vprop, PropError> {
    let id_bits = ((propbaser & 0x1F) as u8 + 1).min(max_id_bits);
    if id_bits < 14 {
        return Err(PropError::TooFewIdBits(id_bits));
    }
    let ipa = propbaser & 0x000F_FFFF_FFFF_F000;
    let bytes = (1u64 << id_bits) - u64::from(LPI_BASE);
    let r = ram
        .iter()
        .find(|r| ipa >= r.ipa && ipa.checked_add(bytes).is_some_and(|e| e <= r.ipa + r.size))
        .ok_or(PropError::OutsideRam { ipa, bytes })?;
    let pa = r.pa + (ipa - r.ipa);
    // InnerCache RaWaWb [9:7], Inner Shareable [11:10], IDbits [4:0].
    let value = (pa & 0x000F_FFFF_FFFF_F000) | 7 << 7 | 1 << 10 | u64::from(id_bits - 1);
    Ok(Vprop { value, id_bits })
}

const VPENDBASER_VALID: u64 = 1 << 63;
const VPENDBASER_PENDING_LAST: u64 = 1 << 61;
const VPENDBASER_DIRTY: u64 = 1 << 60;

/// GICR_VPENDBASER (GICv4.0 layout): Valid [63], PA [51:16], InnerCache
/// RaWaWb, Inner Shareable.
pub fn vpendbaser(vpt: u64, valid: bool) -> u64 {
    u64::from(valid) << 63 | (vpt & 0x000F_FFFF_FFFF_0000) | 7 << 7 | 1 << 10
}

// GICv4.0 command numbers (DW0 [7:0]).
const VMOVI: u64 = 0x21;
const VSYNC: u64 = 0x25;
const VMAPP: u64 = 0x29;
const VMAPTI: u64 = 0x2A;
const VINVALL: u64 = 0x2D;

/// One GICv4.0 command, or a GICv3 one (MAPD, DISCARD, INV, INT, CLEAR,
/// SYNC keep their encodings and act on the vLPI mapping).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum V4Cmd {
    Phys(ItsCmd),
    /// `vpt_bits`: vINTID bits the pending table covers (VPT_size + 1).
    Vmapp {
        vpe: u16,
        rdbase: u64,
        vpt: u64,
        vpt_bits: u8,
        valid: bool,
    },
    Vmapti {
        device: u32,
        event: u32,
        vpe: u16,
        vintid: u32,
        doorbell: u32,
    },
    Vmovi {
        device: u32,
        event: u32,
        vpe: u16,
        doorbell: Option<u32>,
    },
    Vsync {
        vpe: u16,
    },
    Vinvall {
        vpe: u16,
    },
}

impl V4Cmd {
    /// The DeviceID the command names, if any.
    pub fn device(&self) -> Option<u32> {
        match *self {
            V4Cmd::Phys(c) => c.device(),
            V4Cmd::Vmapti { device, .. } | V4Cmd::Vmovi { device, .. } => Some(device),
            V4Cmd::Vmapp { .. } | V4Cmd::Vsync { .. } | V4Cmd::Vinvall { .. } => None,
        }
    }

    /// The same command naming DeviceID `to` (one that names none is
    /// unchanged).
    pub fn with_device(self, to: u32) -> V4Cmd {
        match self {
            V4Cmd::Phys(c) => V4Cmd::Phys(c.with_device(to)),
            V4Cmd::Vmapti {
                event,
                vpe,
                vintid,
                doorbell,
                ..
            } => V4Cmd::Vmapti {
                device: to,
                event,
                vpe,
                vintid,
                doorbell,
            },
            V4Cmd::Vmovi {
                event,
                vpe,
                doorbell,
                ..
            } => V4Cmd::Vmovi {
                device: to,
                event,
                vpe,
                doorbell,
            },
            other => other,
        }
    }
}

const fn vpe_dw1(vpe: u16) -> u64 {
    (vpe as u64) << 32
}

impl V4Cmd {
    pub fn encode(&self) -> [u64; 4] {
        match *self {
            V4Cmd::Phys(c) => c.encode(),
            V4Cmd::Vmapp {
                vpe,
                rdbase,
                vpt,
                vpt_bits,
                valid,
            } => [
                VMAPP,
                vpe_dw1(vpe),
                u64::from(valid) << 63 | (rdbase & super::pits::RDBASE_MASK) << 16,
                (vpt & 0x000F_FFFF_FFFF_0000) | u64::from(vpt_bits.saturating_sub(1) & 0x1F),
            ],
            V4Cmd::Vmapti {
                device,
                event,
                vpe,
                vintid,
                doorbell,
            } => [
                VMAPTI | u64::from(device) << 32,
                u64::from(event) | vpe_dw1(vpe),
                u64::from(vintid) | u64::from(doorbell) << 32,
                0,
            ],
            V4Cmd::Vmovi {
                device,
                event,
                vpe,
                doorbell,
            } => [
                VMOVI | u64::from(device) << 32,
                u64::from(event) | vpe_dw1(vpe),
                match doorbell {
                    Some(db) => 1 | u64::from(db) << 32,
                    None => u64::from(NO_DOORBELL) << 32,
                },
                0,
            ],
            V4Cmd::Vsync { vpe } => [VSYNC, vpe_dw1(vpe), 0, 0],
            V4Cmd::Vinvall { vpe } => [VINVALL, vpe_dw1(vpe), 0, 0],
        }
    }
}

/// Why a partition's command could not be applied as vLPIs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum V4Error {
    TooManyEvents {
        device: u32,
        event_bits: u8,
    },
    NoIttMemory(u32),
    NoSuchVcpu(u16),
    DeviceOutOfRange(u32),
    DeviceNotMapped(u32),
    EventOutOfRange {
        device: u32,
        event: u32,
    },
    /// Below 8192 or at/above 2^(the guest's property table ID bits): the
    /// GIC would read outside the guest's table.
    VintidOutOfRange(u32),
    /// MAPTI before the guest gave its redistributors a property table.
    NoPropertyTable,
}

/// What applying needs from the platform (a fake in the tests).
pub trait V4Env: ItsPlacement {
    fn send(&mut self, cmd: V4Cmd);
}

/// A vCPU's vPE: its ID and pending table (hypervisor memory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Vpe {
    pub id: u16,
    pub vpt: u64,
}

#[derive(Clone, Debug)]
struct VDevice {
    itt: u64,
    itt_bytes: usize,
    event_bits: u8,
    /// EventID -> (vCPU, vINTID).
    events: BTreeMap<u32, (u16, u32)>,
}

/// One partition's direct-vLPI side of the physical ITS.
#[derive(Clone, Debug)]
pub struct PartitionVlpis {
    typer: ItsTyper,
    /// vCPU index -> its vPE.
    vpes: Vec<Vpe>,
    /// vINTID bits the pending tables cover (the vITS's ID_bits).
    vpt_bits: u8,
    /// vCPU index -> vINTID bits of the property table its guest gave
    /// that vCPU's redistributor, once known (each redistributor has its
    /// own GICR_PROPBASER; Linux gives them all one table).
    prop_bits: Vec<Option<u8>>,
    devices: BTreeMap<u32, VDevice>,
}

impl PartitionVlpis {
    pub fn new(typer: ItsTyper, vpes: Vec<Vpe>, vpt_bits: u8) -> PartitionVlpis {
        PartitionVlpis {
            typer,
            prop_bits: alloc::vec![None; vpes.len()],
            vpes,
            vpt_bits,
            devices: BTreeMap::new(),
        }
    }

    /// The guest's property table for vCPU `vcpu`'s redistributor was
    /// accepted ([`vpropbaser`]); an index past the vCPUs is ignored.
    pub fn set_property_table(&mut self, vcpu: u16, prop: Vprop) {
        if let Some(b) = self.prop_bits.get_mut(usize::from(vcpu)) {
            *b = Some(prop.id_bits);
        }
    }

    /// The next vCPU's vPE (while the partition's vPEs are being made,
    /// before [`PartitionVlpis::map_vpes`]).
    pub fn push_vpe(&mut self, vpe: Vpe) {
        self.vpes.push(vpe);
        self.prop_bits.push(None);
    }

    /// Every vCPU's vPE (partition deletion gives them back).
    pub fn vpes(&self) -> &[Vpe] {
        &self.vpes
    }

    /// vINTID bits the pending tables cover.
    pub fn vpt_bits(&self) -> u8 {
        self.vpt_bits
    }

    pub fn vpe(&self, vcpu: u16) -> Option<Vpe> {
        self.vpes.get(usize::from(vcpu)).copied()
    }

    /// Where a guest event goes: its vCPU and vINTID, if mapped.
    pub fn route_of(&self, device: u32, event: u32) -> Option<(u16, u32)> {
        self.devices.get(&device)?.events.get(&event).copied()
    }

    /// The vINTIDs mapped to vCPU `vcpu` (a guest INVALL's).
    pub fn vintids_of(&self, vcpu: u16) -> impl Iterator<Item = u32> + '_ {
        self.devices
            .values()
            .flat_map(|d| d.events.values())
            .filter(move |e| e.0 == vcpu)
            .map(|e| e.1)
    }

    fn vmapp(&self, env: &mut impl V4Env, valid: bool) -> Result<(), V4Error> {
        for (i, v) in self.vpes.iter().enumerate() {
            let cpu = env.cpu_of(i as u16).ok_or(V4Error::NoSuchVcpu(i as u16))?;
            env.send(V4Cmd::Vmapp {
                vpe: v.id,
                rdbase: env.rdbase(cpu),
                vpt: v.vpt,
                vpt_bits: self.vpt_bits,
                valid,
            });
            env.send(V4Cmd::Vsync { vpe: v.id });
        }
        Ok(())
    }

    /// Partition start: VMAPP each vPE to the redistributor of its vCPU's CPU.
    pub fn map_vpes(&self, env: &mut impl V4Env) -> Result<(), V4Error> {
        self.vmapp(env, true)
    }

    fn vpe_of(&self, vcpu: u16) -> Result<u16, V4Error> {
        self.vpe(vcpu)
            .map(|v| v.id)
            .ok_or(V4Error::NoSuchVcpu(vcpu))
    }

    fn unmap_device(&mut self, env: &mut impl V4Env, device: u32) {
        if let Some(d) = self.devices.remove(&device) {
            env.send(V4Cmd::Phys(ItsCmd::Mapd {
                device,
                itt: 0,
                event_bits: 1,
                valid: false,
            }));
            env.free_itt(d.itt, d.itt_bytes);
        }
    }

    /// One accepted virtual ITS command, applied as vLPIs. Checks before
    /// changing anything: on an error nothing was sent.
    pub fn apply(&mut self, cmd: PhysCmd, env: &mut impl V4Env) -> Result<(), V4Error> {
        match cmd {
            PhysCmd::Mapd {
                device,
                event_bits,
                valid,
            } => {
                if self.typer.device_bits < 32 && device >> self.typer.device_bits != 0 {
                    return Err(V4Error::DeviceOutOfRange(device));
                }
                if !valid {
                    self.unmap_device(env, device);
                    env.send(V4Cmd::Phys(ItsCmd::Sync {
                        rdbase: env.rdbase(0),
                    }));
                    return Ok(());
                }
                if event_bits > MAX_EVENT_BITS || event_bits > self.typer.id_bits {
                    return Err(V4Error::TooManyEvents { device, event_bits });
                }
                let bytes = self.typer.itt_bytes(event_bits).max(ITT_ALIGN);
                let itt = env.alloc_itt(bytes).ok_or(V4Error::NoIttMemory(device))?;
                self.unmap_device(env, device);
                env.send(V4Cmd::Phys(ItsCmd::Mapd {
                    device,
                    itt,
                    event_bits,
                    valid: true,
                }));
                env.send(V4Cmd::Phys(ItsCmd::Sync {
                    rdbase: env.rdbase(0),
                }));
                self.devices.insert(
                    device,
                    VDevice {
                        itt,
                        itt_bytes: bytes,
                        event_bits,
                        events: BTreeMap::new(),
                    },
                );
                Ok(())
            }
            PhysCmd::Mapti {
                device,
                event,
                vintid,
                vcpu,
            } => {
                let vpe = self.vpe_of(vcpu)?;
                let bits = self
                    .prop_bits
                    .get(usize::from(vcpu))
                    .copied()
                    .flatten()
                    .ok_or(V4Error::NoPropertyTable)?;
                let limit = 1u64 << bits.min(self.vpt_bits);
                if vintid < LPI_BASE || u64::from(vintid) >= limit {
                    return Err(V4Error::VintidOutOfRange(vintid));
                }
                let d = self
                    .devices
                    .get_mut(&device)
                    .ok_or(V4Error::DeviceNotMapped(device))?;
                if u64::from(event) >> d.event_bits != 0 {
                    return Err(V4Error::EventOutOfRange { device, event });
                }
                if d.events.contains_key(&event) {
                    env.send(V4Cmd::Phys(ItsCmd::Discard { device, event }));
                }
                env.send(V4Cmd::Vmapti {
                    device,
                    event,
                    vpe,
                    vintid,
                    doorbell: NO_DOORBELL,
                });
                env.send(V4Cmd::Phys(ItsCmd::Inv { device, event }));
                env.send(V4Cmd::Vsync { vpe });
                d.events.insert(event, (vcpu, vintid));
                Ok(())
            }
            PhysCmd::Movi {
                device,
                event,
                vcpu,
            } => {
                let vpe = self.vpe_of(vcpu)?;
                let Some(e) = self
                    .devices
                    .get_mut(&device)
                    .and_then(|d| d.events.get_mut(&event))
                else {
                    return Ok(());
                };
                env.send(V4Cmd::Vmovi {
                    device,
                    event,
                    vpe,
                    doorbell: None,
                });
                env.send(V4Cmd::Vsync { vpe });
                e.0 = vcpu;
                Ok(())
            }
            PhysCmd::Discard { device, event } => {
                if let Some((vcpu, _)) = self
                    .devices
                    .get_mut(&device)
                    .and_then(|d| d.events.remove(&event))
                {
                    env.send(V4Cmd::Phys(ItsCmd::Discard { device, event }));
                    env.send(V4Cmd::Vsync {
                        vpe: self.vpe_of(vcpu)?,
                    });
                }
                Ok(())
            }
            PhysCmd::Inv { device, event }
            | PhysCmd::Int { device, event }
            | PhysCmd::Clear { device, event } => {
                let Some((vcpu, _)) = self.route_of(device, event) else {
                    return Ok(());
                };
                env.send(V4Cmd::Phys(match cmd {
                    PhysCmd::Inv { .. } => ItsCmd::Inv { device, event },
                    PhysCmd::Int { .. } => ItsCmd::Int { device, event },
                    _ => ItsCmd::Clear { device, event },
                }));
                env.send(V4Cmd::Vsync {
                    vpe: self.vpe_of(vcpu)?,
                });
                Ok(())
            }
            PhysCmd::InvAll { vcpu } => {
                let vpe = self.vpe_of(vcpu)?;
                env.send(V4Cmd::Vinvall { vpe });
                env.send(V4Cmd::Vsync { vpe });
                Ok(())
            }
            PhysCmd::Sync { vcpu } => {
                let vpe = self.vpe_of(vcpu)?;
                env.send(V4Cmd::Vsync { vpe });
                Ok(())
            }
        }
    }

    /// Every device unmapped (partition stop, restart, crash: its
    /// functions were quiesced first), the property tables forgotten (the
    /// next boot gives them again). The vPEs stay mapped: a vCPU of the
    /// partition may still be resident on its CPU until its put, and the
    /// next start uses them again.
    pub fn release_devices(&mut self, env: &mut impl V4Env) {
        self.release_devices_where(env, |_| true);
    }

    /// [`PartitionVlpis::release_devices`] of the devices `on` names only
    /// (those of one physical ITS, the caller holding its lock).
    pub fn release_devices_where(&mut self, env: &mut impl V4Env, on: impl Fn(u32) -> bool) {
        let devices: Vec<u32> = self.devices.keys().copied().filter(|&d| on(d)).collect();
        let any = !devices.is_empty();
        for device in devices {
            self.unmap_device(env, device);
        }
        if any {
            env.send(V4Cmd::Phys(ItsCmd::Sync {
                rdbase: env.rdbase(0),
            }));
        }
        self.prop_bits.iter_mut().for_each(|b| *b = None);
    }

    /// Every device and every vPE unmapped (partition deletion, every
    /// vCPU put first): the vPE IDs and pending tables may then be reused.
    pub fn release(&mut self, env: &mut impl V4Env) {
        self.release_devices(env);
        self.unmap_vpes(env);
    }

    /// Every vPE unmapped (VMAPP V = 0) on the ITS `env` drives: with
    /// several ITSes, [`PartitionVlpis::release`]'s second half on each.
    pub fn unmap_vpes(&self, env: &mut impl V4Env) {
        // A vCPU without a CPU cannot have been mapped: nothing to undo.
        let _ = self.vmapp(env, false);
    }
}

/// The calling CPU's own redistributor VLPI frame (RD_base + 0x20000 on
/// GICv4: VPROPBASER at 0x70, VPENDBASER at 0x78).
pub trait V40Hw {
    fn write_vpropbaser(&mut self, value: u64);
    fn read_vpendbaser(&mut self) -> u64;
    fn write_vpendbaser(&mut self, value: u64);
}

/// Why a residency change did not complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResidencyError {
    DirtyStuck,
    AlreadyResident,
}

/// Reads of GICR_VPENDBASER before a Dirty that will not clear is an error.
pub const DIRTY_POLLS: u32 = 1 << 16;

/// One CPU's vPE residency (GICv4.0), owned by its CPU: no lock.
#[derive(Clone, Debug, Default)]
pub struct Residency {
    resident: Option<u64>,
}

impl Residency {
    pub const fn new() -> Self {
        Residency { resident: None }
    }

    /// The resident vPE's pending table.
    pub fn resident(&self) -> Option<u64> {
        self.resident
    }

    /// vCPU load (partition start on this CPU): VPROPBASER while
    /// VPENDBASER.Valid is 0, then VPENDBASER with Valid.
    pub fn load(
        &mut self,
        hw: &mut dyn V40Hw,
        prop: Vprop,
        vpt: u64,
    ) -> Result<(), ResidencyError> {
        if self.resident.is_some() {
            return Err(ResidencyError::AlreadyResident);
        }
        hw.write_vpropbaser(prop.value);
        hw.write_vpendbaser(vpendbaser(vpt, true));
        self.resident = Some(vpt);
        Ok(())
    }

    /// vCPU put (stop, restart, reset): Valid cleared, Dirty waited for
    /// (bounded). Returns PendingLast.
    pub fn put(&mut self, hw: &mut dyn V40Hw) -> Result<bool, ResidencyError> {
        let Some(vpt) = self.resident.take() else {
            return Ok(false);
        };
        hw.write_vpendbaser(vpendbaser(vpt, false));
        for _ in 0..DIRTY_POLLS {
            let v = hw.read_vpendbaser();
            if v & VPENDBASER_DIRTY == 0 {
                return Ok(v & VPENDBASER_PENDING_LAST != 0);
            }
            core::hint::spin_loop();
        }
        Err(ResidencyError::DirtyStuck)
    }
}

/// Whether GICR_VPENDBASER says a vPE is resident.
pub fn vpendbaser_valid(v: u64) -> bool {
    v & VPENDBASER_VALID != 0
}

#[cfg(test)]
#[path = "v40_tests.rs"]
mod tests;
