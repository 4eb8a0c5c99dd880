//! A partition's virtual ITS wired to the physical ITSes (a GICv3 host's,
//! or a GICv5 host's through `its5::V5Its` behind the same [`ItsQueue`],
//! whose MSI address is its translate frame, [`MsiRouting::translater`]):
//! the guest's GITS frame accesses go to its [`Vits`] under the
//! partition's lock, the commands it accepts are applied through the
//! partition's [`PartitionIts`] on the physical ITS that owns the device
//! under that ITS's lock, and the guest's INV/INVALL become a re-check of
//! the vLPI on the redistributor of the vCPU the event targets
//! (`VRedist::lpi_recheck`, through the mailbox when that vCPU runs on
//! another CPU).
//!
//! A host may have several ITSes (one per socket, or one per PCIe root
//! complex as on Ampere Altra). Each requester ID's MSIs reach the ITS the
//! host bridge's `msi-map`/`msi-parent` or IORT names, as the DeviceID it
//! names ([`MsiRouting`]); a guest's DeviceID is its function's requester
//! ID, turned into that ITS's DeviceID only when a command is sent (`Env`).
//! A command naming a device goes to that device's ITS only; SYNC and
//! INVALL (no device) to the partition's own ITS (`PartitionVits::its`),
//! the one all its functions reach. Every CPU maps its
//! collection (ICID = CPU index) on every ITS ([`ItsSet::cpu_online`]). A
//! partition's functions must all reach one ITS that came up, whose
//! translater its one doorbell is ([`MsiRouting::partition_its`]);
//! otherwise it gets no vITS ([`NoMsi::SeveralIts`], [`NoMsi::NoRoute`]).
//! An ITS that did not come up serves nobody; the others keep working.
//! Each CPU's own ITS (its NUMA node's among those offering GICv4.1 vSGIs,
//! `vgic::its_choice`) is chosen once at boot ([`ItsSet::local_its`]): the
//! GITS_SGIR its vSGIs are written to and the ITS its vPE's SGI
//! configuration goes through; every vPE is mapped on every ITS offering
//! vSGIs ([`ItsSet::vsgi_itses`], `crate::vsgi`), one ITS's lock at a time.
//!
//! On a GICv4.0 host ([`HostIts::enable_direct`]) a partition's MSIs are
//! direct vLPIs instead (`vgic::v40`, [`LpiDelivery::Direct`]): its vCPUs
//! get vPEs (IDs and zeroed pending tables from the platform, VMAPP'd to
//! their pinned CPUs' redistributors on every ITS that came up: any may
//! own a device of the partition, and a vLPI reaches only a vPE its ITS
//! has mapped) at the first need, the guest's commands become
//! VMAPTI/VMOVI/VSYNC/VINVALL on them (VSYNC and VINVALL on the
//! partition's own ITS, as SYNC), and a device's MSI reaches the resident vCPU with no exit. No
//! VMOVP is ever sent: vCPUs are pinned, so a vPE never moves, and the
//! GITS_TYPER.VMOVP = 0 form (the ITSList/SequenceNumber VMOVP to every
//! ITS) never arises; a vPE's mapping is the same RDbase on each ITS,
//! made and undone one ITS at a time. A vCPU's vPE is made resident on its
//! own CPU when its guest sets EnableLPIs ([`lpis_on`]: the guest's
//! property table checked inside its RAM; `exit` applies it through the
//! CPU's own VLPI frame, no lock) and non-resident at its put. A reset
//! unmaps the devices and keeps the vPEs; deletion unmaps and frees them
//! ([`release_vpes`]).
//!
//! On a GICv4.1 host with direct vSGIs a partition whose functions reach an
//! ITS offering vSGIs gets direct vLPIs too (`vgic::v41::choose_vlpis`,
//! [`PartitionVits::v41`]): on the vSGI path's vPEs (`crate::vsgi` maps,
//! unmaps and makes them resident; nothing here VMAPPs), with the same
//! command translation (the GICv4.0 encodings of VMAPTI/VMOVI/VSYNC/
//! VINVALL hold), the VCONF being the partition's copy of the guest's
//! property table, refreshed before each MAPTI, MOVI, INV and INVALL is
//! sent (VMAPP precedes EnableLPIs and VCONF_Addr cannot change while the
//! vPE is mapped). A MAPTI or MOVI to a vCPU whose vPE is not yet mapped is
//! refused.
//!
//! Locks, taken in this order, all counted:
//! - the partition's vITS (`its_trap`): its command queue is one device
//!   that every vCPU of the partition may program, like its distributor;
//! - one physical ITS (`phys_its`, [`ItsSet`]: one lock per ITS): its one
//!   GITS_CWRITER and the ITT memory its commands name (each CPU's RDbase
//!   on it is stored under it once, at the CPU's bring-up, and read
//!   without it: [`ItsSet::rdbase_for`]). One lock per ITS, not one for all: commands for
//!   devices behind different ITSes (different partitions, different
//!   sockets) do not contend, and no command needs two ITSes at once
//!   (a vPE is mapped, and a SYNC sent, one ITS after the other, each
//!   under its own lock; never two held together). One CWRITER write's
//!   commands keep the lock while they go to the same ITS (`Held`): a
//!   guest's MAPD, MAPC, MAPTI, INV take it once;
//! - the machine-wide LPI pool and vPE IDs (`phys_its` too, held only for
//!   an allocation or a free): an LPI INTID is global (any ITS may take
//!   one; one freed by a partition is reused by another), and a vPE ID
//!   names the same vPE on every ITS.
//!
//! No per-CPU design works for either, and both are taken only on this
//! slow path (a guest's ITS command, a partition's reset, a CPU coming
//! online), never when an LPI is delivered (`LpiRoutes` is read
//! lock-free).
//!
//! Which partitions get a vITS (their ECAM filter's `msi_doorbell` and the
//! DT's ITS node and `msi-map`), and how their devices' MSIs reach the
//! physical translater (directly, or through the SMMU's stage 2), is
//! [`MsiRouting::partition_its`] (the one ITS its functions reach) and
//! [`msi_path_to`] (that ITS's translater against the doorbell page).

use crate::dtb::PciMsiMap;
use crate::exit::Hw;
use crate::lockstat::{CountedLock, LockPath};
use crate::partition::{HostMemory, Partition};
use crate::vgic::its_choice;
use crate::vgic::pits::{
    ItsCmd, ItsPlacement, ItsTyper, LpiPool, LpiRoute, LpiRoutes, PartitionIts, PitsEnv, PitsError,
    LPI_COUNT,
};
use crate::vgic::redist::LPI_ID_BITS;
use crate::vgic::v40::{
    vpropbaser, vpt_bytes, LpiDelivery, PartitionVlpis, RamRange, V4Cmd, V4Env, Vpe, VpeIds, Vprop,
    VPE_COUNT,
};
use crate::vgic::vits::{PhysCmd, QueueMemory, Vits, VitsError, VitsLimits, VitsSink};
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};
use pinfold_vboard::GUEST_ITS_DOORBELL;

/// One physical ITS's command queue and the memory ITTs come from, as the
/// platform drives them (`drivers::gicv3_its`); a fake in the tests.
pub trait ItsQueue: Send {
    /// Queues one command and waits until the ITS has read it.
    fn send(&mut self, cmd: &ItsCmd);
    /// The same for a GICv4.0 command (or a GICv3 one inside [`V4Cmd`]).
    fn send_v4(&mut self, cmd: &V4Cmd);
    /// The same for a command the core encoded itself (GICv4.1's VMAPP,
    /// VSGI, VSYNC: `vsgi`).
    fn send_words(&mut self, words: [u64; 4]);
    /// Zeroed, 256-byte aligned memory no guest can reach, for an ITT.
    fn alloc_itt(&mut self, bytes: usize) -> Option<u64>;
    fn free_itt(&mut self, pa: u64, bytes: usize);
    /// Zeroed, [`VPT_ALIGN`]-aligned memory no guest can reach, for a
    /// vPE's virtual LPI pending table.
    fn alloc_vpt(&mut self, bytes: usize) -> Option<u64>;
    fn free_vpt(&mut self, pa: u64, bytes: usize);
}

/// One physical ITS as the core drives it: its GITS_TYPER and its
/// command queue. Behind its own lock in [`ItsSet`] (each CPU's RDbase on
/// it beside the lock, [`ItsSet::rdbase_for`]).
pub struct ItsUnit {
    pub typer: ItsTyper,
    queue: Box<dyn ItsQueue>,
}

impl ItsUnit {
    /// The command queue, for the GICv4.1 vPE commands (`vsgi`).
    pub fn queue_mut(&mut self) -> &mut dyn ItsQueue {
        &mut *self.queue
    }
}

/// The physical ITSes the platform brought up, in the host description's
/// order (`GicInfo::its`; None for one that did not come up), before the
/// system holds them ([`ItsSet`]).
pub struct HostIts {
    /// What every partition's vITS and ITTs are sized by: the narrowest of
    /// the ITSes that came up ([`narrowest`]).
    pub typer: ItsTyper,
    units: Vec<Option<ItsUnit>>,
    /// The CPUs each ITS will map a collection for ([`ItsSet::cpu_online`]).
    cpus: usize,
    /// GICv4.0 direct vLPIs are on ([`HostIts::enable_direct`]): the vPE
    /// IDs handed out.
    vpe_ids: Option<VpeIds>,
    /// How many LPIs the machine-wide pool hands out: `LPI_COUNT`, or
    /// fewer where the interrupt controller holds fewer
    /// ([`HostIts::with_lpis`]).
    lpis: u32,
}

/// One GITS_TYPER that suits every ITS of `typers`: the largest ITT entry,
/// the fewest EventID bits and collections held in the ITS, the most
/// DeviceID bits (a partition's DeviceIDs are requester IDs, checked
/// against the ITS they reach when routed, [`MsiRouting`]), Virtual only
/// when all are. PTA is each ITS's own (its RDbases).
fn narrowest(typers: impl Iterator<Item = ItsTyper>) -> Option<ItsTyper> {
    typers.reduce(|a, b| ItsTyper {
        itt_entry_bytes: a.itt_entry_bytes.max(b.itt_entry_bytes),
        id_bits: a.id_bits.min(b.id_bits),
        device_bits: a.device_bits.max(b.device_bits),
        pta: a.pta,
        hcc: a.hcc.min(b.hcc),
        virt: a.virt && b.virt,
        vsgi: a.vsgi && b.vsgi,
    })
}

impl HostIts {
    /// One ITS (the host description's first), initialised (tables and
    /// command queue set up, enabled) for `cpus` CPUs; no collection is
    /// mapped yet ([`ItsSet::cpu_online`]).
    pub fn new(typer: ItsTyper, queue: Box<dyn ItsQueue>, cpus: usize) -> HostIts {
        HostIts {
            typer,
            units: alloc::vec![Some(ItsUnit { typer, queue })],
            cpus,
            vpe_ids: None,
            lpis: LPI_COUNT,
        }
    }

    /// Every ITS of the host description, each initialised or None (it
    /// did not come up: its devices get no MSI). None when none came up.
    pub fn several(
        units: Vec<Option<(ItsTyper, Box<dyn ItsQueue>)>>,
        cpus: usize,
    ) -> Option<HostIts> {
        let units: Vec<Option<ItsUnit>> = units
            .into_iter()
            .map(|u| u.map(|(typer, queue)| ItsUnit { typer, queue }))
            .collect();
        let typer = narrowest(units.iter().flatten().map(|u| u.typer))?;
        Some(HostIts {
            typer,
            units,
            cpus,
            vpe_ids: None,
            lpis: LPI_COUNT,
        })
    }

    /// The pool limited to `lpis` LPIs (at most `LPI_COUNT`): a GICv5
    /// host's MSI pool is what its IST has room for
    /// (`vgic5::IrsLayout::msi_lpis`), so no LPI is handed out that the
    /// GICv5 ITS would then refuse as outside it.
    pub fn with_lpis(mut self, lpis: u32) -> HostIts {
        self.lpis = lpis.min(LPI_COUNT);
        self
    }

    /// Direct vLPI injection on, when the host offers it
    /// (`found.direct_vlpi`: every redistributor VLPIS, an ITS Virtual)
    /// and is a GICv4.0, and every ITS that came up is a GICv4 one
    /// (GITS_TYPER.Virtual: it took a vPE table at init; a vPE is mapped
    /// on each). Not on a GICv4.1, whose VMAPP and GICR_VPENDBASER have
    /// the 4.1 layouts (vPE ID, shared vPE table): its direct vLPIs use
    /// the vSGI path's vPEs instead (`vgic::v41::choose_vlpis`). False,
    /// and nothing changed, otherwise.
    pub fn enable_direct(&mut self, found: &crate::gichost::GicFound) -> bool {
        if found.direct_vlpi && !found.v4_1 && self.typer.virt && self.vpe_ids.is_none() {
            self.vpe_ids = Some(VpeIds::new(VPE_COUNT));
        }
        self.vpe_ids.is_some()
    }

    /// Whether partitions' MSIs are injected directly ([`LpiDelivery`]).
    pub fn direct(&self) -> bool {
        self.vpe_ids.is_some()
    }
}

/// Where each requester ID's MSIs go: the ITS (its place in the host
/// description) and the DeviceID it sees there, from the host bridge's
/// `msi_map` (`dtb::PciMsiMap`: DT `msi-map`/`msi-parent`, ACPI IORT).
/// A host bridge that names none sends every requester ID to the first
/// ITS as itself (QEMU virt without its `msi-map`). Requester IDs no entry
/// covers, or whose ITS did not come up or is not described, reach none.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MsiRouting {
    /// The `msi_map` entries whose ITS the host describes (or, when it
    /// names none, one sending every requester ID to the first ITS as
    /// itself), each with that ITS's place in the description; looked up
    /// with `PciMsiMap::device_id`.
    map: Vec<(PciMsiMap, usize)>,
    /// Each described ITS, in the description's order.
    its: Vec<RoutedIts>,
    /// A GICv5 host's translate frames were named
    /// ([`MsiRouting::with_translate_frames`]); false on GICv3, whose
    /// translater is in the ITS's own second frame.
    v5: bool,
}

/// What [`MsiRouting`] knows of one ITS of the host description.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct RoutedIts {
    /// Its control frame, when it came up.
    live: Option<u64>,
    /// Its DeviceID bits (0 when it did not come up).
    device_bits: u8,
    /// On a GICv5 host, its translate frame (`Gicv5Info::its_translate`).
    translate: Option<u64>,
}

/// A requester ID's MSI target: ITS `its` (index in the host
/// description), as DeviceID `device`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MsiTarget {
    pub its: usize,
    pub device: u32,
}

impl MsiRouting {
    /// `its`: the host description's ITSes (base, size); `live[i]`: ITS i
    /// came up, with its GITS_TYPER.
    pub fn new(msi_map: &[PciMsiMap], its: &[(u64, u64)], live: &[Option<ItsTyper>]) -> MsiRouting {
        let map = if msi_map.is_empty() {
            let first = PciMsiMap {
                rid_base: 0,
                its_base: its.first().map_or(0, |&(base, _)| base),
                device_base: 0,
                len: 0x1_0000,
            };
            alloc::vec![(first, 0)]
        } else {
            msi_map
                .iter()
                .filter_map(|m| {
                    let i = its.iter().position(|&(base, _)| base == m.its_base)?;
                    Some((*m, i))
                })
                .collect()
        };
        let its = its
            .iter()
            .enumerate()
            .map(|(i, &(base, _))| {
                let typer = live.get(i).copied().flatten();
                RoutedIts {
                    live: typer.map(|_| base),
                    device_bits: typer.map_or(0, |t| t.device_bits),
                    translate: None,
                }
            })
            .collect();
        MsiRouting {
            map,
            its,
            v5: false,
        }
    }

    /// A GICv5 host's ITSes: each one's translate frame, in the host
    /// description's order (`Gicv5Info::its_translate`).
    pub fn with_translate_frames(mut self, frames: &[Option<(u64, u64)>]) -> MsiRouting {
        self.v5 = !frames.is_empty();
        for (i, its) in self.its.iter_mut().enumerate() {
            its.translate = frames.get(i).copied().flatten().map(|(base, _)| base);
        }
        self
    }

    /// The address a device's MSI must reach for the ITS whose control
    /// frame is `base`: GITS_TRANSLATER in its second frame (GICv3), or
    /// on a GICv5 host its translate frame's base (Linux's MSI address,
    /// `its5::TRANSLATER_OFFSET`); None for a GICv5 ITS that names no
    /// translate frame.
    pub fn translater(&self, base: u64) -> Option<u64> {
        if !self.v5 {
            return Some(base + TRANSLATER_FRAME + TRANSLATER_OFFSET);
        }
        let its = self.its.iter().find(|its| its.live == Some(base))?;
        Some(its.translate? + crate::its5::TRANSLATER_OFFSET)
    }

    /// The ITS and DeviceID requester ID `rid`'s MSIs reach, if that ITS
    /// came up and the DeviceID fits its GITS_TYPER.Devbits.
    pub fn route(&self, rid: u32) -> Option<MsiTarget> {
        let (device, its) = self
            .map
            .iter()
            .find_map(|(m, its)| Some((m.device_id(rid)?, *its)))?;
        let bits = self.its.get(its).filter(|u| u.live.is_some())?.device_bits;
        (bits >= 32 || device >> bits == 0).then_some(MsiTarget { its, device })
    }

    /// ITS `its`'s control frame, when it came up.
    pub fn base(&self, its: usize) -> Option<u64> {
        self.its.get(its)?.live
    }

    /// The ITSes that came up.
    pub fn live(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.its.len()).filter(|&i| self.its[i].live.is_some())
    }

    /// The one ITS the requester IDs `rids` (a partition's functions) all
    /// reach, as its control frame: a partition's vITS has one doorbell,
    /// so functions reaching no ITS or two refuse it MSI (were the doorbell
    /// the page of one, a function behind another would write that one's
    /// translater with whatever DeviceID the interconnect gives it there,
    /// which could be another partition's device).
    pub fn partition_its(&self, rids: impl Iterator<Item = u32>) -> Result<u64, NoMsi> {
        self.partition_its_index(rids)
            .and_then(|i| self.base(i).ok_or(NoMsi::NoHostIts))
    }

    /// [`MsiRouting::partition_its`] as the ITS's index (`GicInfo::its`
    /// order): the one ITS a partition's vITS commands go to.
    pub fn partition_its_index(&self, rids: impl Iterator<Item = u32>) -> Result<usize, NoMsi> {
        let mut one: Option<usize> = None;
        for rid in rids {
            let t = self.route(rid).ok_or(NoMsi::NoRoute { rid })?;
            match one {
                Some(i) if i != t.its => {
                    return Err(NoMsi::SeveralIts {
                        first: i,
                        second: t.its,
                    })
                }
                _ => one = Some(t.its),
            }
        }
        one.filter(|&i| self.base(i).is_some())
            .ok_or(NoMsi::NoHostIts)
    }
}

/// What the machine-wide side of the ITSes holds: the LPI pool (an LPI
/// INTID is global: any ITS may take one, and one freed by a partition is
/// reused by another) and the vPE IDs (a vPE is mapped on every ITS).
struct Shared {
    pool: LpiPool,
    vpe_ids: Option<VpeIds>,
}

/// One ITS that came up, as [`ItsSet`] holds it.
struct HeldUnit {
    unit: CountedLock<ItsUnit>,
    /// Each CPU's RDbase on this ITS once its collection is mapped
    /// ([`NO_RDBASE`] before): stored once, at the CPU's bring-up under
    /// `unit`'s lock after its MAPC and SYNC, and fixed from then on, so
    /// read without the lock ([`ItsSet::rdbase_for`]).
    rdbase: Vec<AtomicU64>,
}

/// A CPU whose collection is not mapped yet: no RDbase is all ones (a
/// redistributor's 64 KiB-aligned address, or a processor number shifted
/// by 16).
const NO_RDBASE: u64 = u64::MAX;

/// The physical ITSes as the system holds them, behind `System::its`: each
/// ITS behind its own counted lock, the LPI pool and vPE IDs behind one
/// more, the routing, each CPU's RDbases and its local ITS read without a
/// lock.
pub struct ItsSet {
    /// See [`HostIts::typer`].
    pub typer: ItsTyper,
    units: Vec<Option<HeldUnit>>,
    pub routing: MsiRouting,
    shared: CountedLock<Shared>,
    /// Each CPU's ITS: [`its_choice::choose`] over the ITSes that offer
    /// vSGIs (over those that came up when none does).
    local: Vec<usize>,
    /// The ITSes that came up and offer vSGIs (`ItsTyper::vsgi`), lowest
    /// first: every vPE of the vSGI path is mapped on each.
    vsgi: Vec<usize>,
    direct: bool,
}

impl ItsSet {
    /// The platform's ITSes as the system keeps them: routed by the host
    /// bridge's `msi_map`, each CPU given the ITS of its NUMA node
    /// ([`its_choice::choose`], at boot, once).
    pub fn new(
        its: HostIts,
        host: &crate::dtb::HostInfo,
        cpus: usize,
        locks: &'static crate::lockstat::LockStat,
    ) -> ItsSet {
        let live: Vec<Option<ItsTyper>> = its
            .units
            .iter()
            .map(|u| u.as_ref().map(|u| u.typer))
            .collect();
        let mut routing = MsiRouting::new(
            host.pcie.as_ref().map_or(&[][..], |p| &p.msi_map),
            &host.gic.its,
            &live,
        );
        if let Some(v5) = &host.gic.v5 {
            routing = routing.with_translate_frames(&v5.its_translate);
        }
        let up: Vec<bool> = live.iter().map(Option::is_some).collect();
        let vsgi_mask: Vec<bool> = live.iter().map(|t| t.is_some_and(|t| t.vsgi)).collect();
        let vsgi: Vec<usize> = (0..vsgi_mask.len()).filter(|&i| vsgi_mask[i]).collect();
        // A CPU's ITS is for its vSGIs: among those that offer them when
        // any does, else among those that came up (then nothing reads it).
        let usable = if vsgi.is_empty() { &up } else { &vsgi_mask };
        let first = usable.iter().position(|&u| u).unwrap_or(0);
        let local = its_choice::choose(&host.numa, cpus, usable)
            .into_iter()
            .map(|c| c.unwrap_or(first))
            .collect();
        ItsSet {
            typer: its.typer,
            direct: its.vpe_ids.is_some(),
            units: its
                .units
                .into_iter()
                .map(|u| {
                    u.map(|u| HeldUnit {
                        unit: CountedLock::new(u, locks),
                        rdbase: (0..its.cpus).map(|_| AtomicU64::new(NO_RDBASE)).collect(),
                    })
                })
                .collect(),
            routing,
            shared: CountedLock::new(
                Shared {
                    pool: LpiPool::new(its.lpis),
                    vpe_ids: its.vpe_ids,
                },
                locks,
            ),
            local,
            vsgi,
        }
    }

    /// Whether partitions' MSIs are injected directly ([`LpiDelivery`]).
    pub fn direct(&self) -> bool {
        self.direct
    }

    /// The ITS CPU `cpu` sends its vSGIs to (GITS_SGIR) and its vPE's
    /// SGI configuration through (VSGI, VSYNC): the lowest-numbered ITS
    /// offering vSGIs in its NUMA node, else the lowest-numbered offering
    /// them anywhere (seed 004: Linux's `find_4_1_its` after "Use local
    /// 4_1 ITS to generate VSGI"). When no ITS offers vSGIs, the same
    /// choice among those that came up, which nothing uses.
    pub fn local_its(&self, cpu: usize) -> usize {
        self.local.get(cpu).copied().unwrap_or(0)
    }

    /// The ITSes that came up and offer GICv4.1 vSGIs, lowest first: the
    /// vSGI path maps every vPE on each (a GITS_SGIR write reaches only a
    /// vPE its ITS has mapped, and each CPU writes its own [`local_its`]).
    ///
    /// [`local_its`]: ItsSet::local_its
    pub fn vsgi_itses(&self) -> &[usize] {
        &self.vsgi
    }

    /// ITS `i`, locked, if it came up.
    pub(crate) fn unit(&self, i: usize) -> Option<spin::MutexGuard<'_, ItsUnit>> {
        Some(self.units.get(i)?.as_ref()?.unit.lock(LockPath::PhysIts))
    }

    /// CPU `cpu`'s RDbase on ITS `i`, once its collection is mapped there.
    /// No lock: it is fixed once stored ([`ItsSet::cpu_online`]).
    pub fn rdbase_for(&self, i: usize, cpu: usize) -> Option<u64> {
        let slot = self.units.get(i)?.as_ref()?.rdbase.get(cpu)?;
        Some(slot.load(Ordering::Acquire)).filter(|&rd| rd != NO_RDBASE)
    }

    /// CPU `cpu` has enabled LPIs on its redistributor: its collection is
    /// mapped to it on every ITS (MAPC ICID = cpu, then SYNC), one lock at
    /// a time, and its RDbase there kept.
    pub fn cpu_online(&self, cpu: usize, processor_number: u16, redist_pa: u64) {
        for i in self.routing.live() {
            let Some(held) = self.units.get(i).and_then(Option::as_ref) else {
                continue;
            };
            let mut u = held.unit.lock(LockPath::PhysIts);
            let rdbase = u.typer.rdbase(processor_number, redist_pa);
            let Some(slot) = held.rdbase.get(cpu) else {
                return;
            };
            u.queue.send(&ItsCmd::Mapc {
                icid: cpu as u16,
                rdbase,
                valid: true,
            });
            u.queue.send(&ItsCmd::Sync { rdbase });
            slot.store(rdbase, Ordering::Release);
        }
    }

    pub fn lpis_in_use(&self) -> u32 {
        self.shared.lock(LockPath::PhysIts).pool.in_use()
    }
}

/// One partition's virtual ITS and its share of the physical one: on a
/// GICv3 host (or `delivery` Trapped) its events are physical LPIs taken
/// at EL2 (`pits`); with direct vLPIs they are VMAPTI'd to its vCPUs' vPEs
/// (`vlpis`, made at the first need: the first EnableLPIs of one of its
/// redistributors or the first command, whichever comes first; kept until
/// the partition is deleted, [`release_vpes`]).
pub struct PartitionVits {
    pub vits: Vits,
    pub pits: PartitionIts,
    pub delivery: LpiDelivery,
    pub vlpis: Option<PartitionVlpis>,
    limits: VitsLimits,
    typer: ItsTyper,
    /// The one ITS its functions' MSIs reach (`MsiRouting::partition_its`):
    /// where its SYNC and INVALL go.
    its: usize,
    /// GICv4.1 direct vLPIs (`vgic::v41::choose_vlpis`): the vPEs are the
    /// vSGI path's (`vsgi`, which maps, unmaps and makes them resident) and
    /// the VCONF is its copy of the guest's property table, kept here.
    v41: bool,
    /// On GICv4.1: each vCPU's property table as its guest enabled LPIs
    /// with it (`lpis_on`), where the VCONF copy's bytes come from.
    v41_props: Vec<Option<Vprop>>,
}

impl PartitionVits {
    /// `mappings`: the events it may map at once, all devices together
    /// (its functions' MSI vectors: `partition::lpi_budget`); `its`: the
    /// ITS its functions reach (`MsiRouting::partition_its_index`).
    pub fn new(
        slot: u16,
        vcpus: u16,
        typer: ItsTyper,
        delivery: LpiDelivery,
        mappings: u32,
        its: usize,
    ) -> PartitionVits {
        let limits = VitsLimits {
            max_mappings: mappings as usize,
            ..VitsLimits::for_vcpus(vcpus)
        };
        PartitionVits {
            vits: Vits::new(limits),
            pits: PartitionIts::new(slot, typer),
            delivery,
            vlpis: None,
            limits,
            typer,
            its,
            v41: false,
            v41_props: alloc::vec![None; usize::from(vcpus)],
        }
    }

    /// The same with GICv4.1 direct vLPIs on the vSGI path's vPEs
    /// (`delivery` Direct, `vgic::v41::choose_vlpis` said so).
    pub fn on_vsgi_vpes(mut self) -> PartitionVits {
        self.v41 = true;
        self
    }

    /// Whether its direct vLPIs are GICv4.1's, on the vSGI path's vPEs.
    pub fn v41(&self) -> bool {
        self.v41
    }

    /// The partition's vPEs, made and mapped (VMAPP to each vCPU's CPU on
    /// every ITS that came up: any of them may own one of its devices, so
    /// any may deliver it a vLPI) if they are not yet: one ID and one
    /// zeroed pending table per vCPU. On failure nothing is kept (the
    /// ITSes already mapped are unmapped again).
    fn vlpis_ready(
        &mut self,
        set: &ItsSet,
        p: &Partition,
    ) -> Result<&mut PartitionVlpis, alloc::string::String> {
        if self.vlpis.is_none() && self.v41 {
            // GICv4.1: the vSGI path's vPEs, which it maps at each vCPU's
            // first load and makes resident; nothing to VMAPP here.
            let vsgi = p
                .vsgi
                .as_ref()
                .ok_or_else(|| alloc::string::String::from("no vPEs (no direct vSGIs)"))?;
            let vpes = (0..usize::from(self.limits.vcpus))
                .map(|n| vsgi.direct.vpe(n).map(|id| Vpe { id, vpt: 0 }))
                .collect::<Option<Vec<Vpe>>>()
                .ok_or_else(|| alloc::string::String::from("a vCPU without a vPE ID"))?;
            self.vlpis = Some(PartitionVlpis::new(self.typer, vpes, crate::vsgi::VPT_BITS));
        }
        if self.vlpis.is_none() {
            let mut vl = PartitionVlpis::new(self.typer, Vec::new(), LPI_ID_BITS);
            let made = (0..self.limits.vcpus).try_for_each(|vcpu| {
                let vpe = new_vpe(set, vcpu)?;
                vl.push_vpe(vpe);
                Ok(())
            });
            let mut mapped_on = Vec::new();
            let mapped = made.and_then(|()| {
                set.routing.live().try_for_each(|i| {
                    let Some(mut unit) = set.unit(i) else {
                        return Ok(());
                    };
                    let mut env = Env::on(set, i, &mut unit, None, p);
                    vl.map_vpes(&mut env)
                        .map_err(|e| alloc::format!("VMAPP refused on ITS {i}: {e:?}"))?;
                    mapped_on.push(i);
                    Ok(())
                })
            });
            if let Err(why) = mapped {
                for i in mapped_on {
                    if let Some(mut unit) = set.unit(i) {
                        vl.unmap_vpes(&mut Env::on(set, i, &mut unit, None, p));
                    }
                }
                give_back(set, &vl);
                return Err(why);
            }
            self.vlpis = Some(vl);
        }
        Ok(self.vlpis.as_mut().expect("made above"))
    }
}

/// The queue vPE pending tables come from (any ITS's: they are EL2 heap
/// memory the redistributors read, no ITS's own).
fn vpt_unit(set: &ItsSet) -> Option<spin::MutexGuard<'_, ItsUnit>> {
    set.routing.live().next().and_then(|i| set.unit(i))
}

/// One vPE for vCPU `vcpu`: an ID and a zeroed pending table, or nothing.
fn new_vpe(set: &ItsSet, vcpu: u16) -> Result<Vpe, alloc::string::String> {
    let id = set
        .shared
        .lock(LockPath::PhysIts)
        .vpe_ids
        .as_mut()
        .and_then(VpeIds::alloc)
        .ok_or_else(|| alloc::format!("no vPE ID left for vCPU {vcpu}"))?;
    let vpt = vpt_unit(set).and_then(|mut u| u.queue.alloc_vpt(vpt_bytes(LPI_ID_BITS)));
    match vpt {
        Some(vpt) => Ok(Vpe { id, vpt }),
        None => {
            if let Some(ids) = set.shared.lock(LockPath::PhysIts).vpe_ids.as_mut() {
                ids.free(id);
            }
            Err(alloc::format!("no memory for vCPU {vcpu}'s pending table"))
        }
    }
}

/// A partition's vPE IDs and pending tables back to the host.
fn give_back(set: &ItsSet, vl: &PartitionVlpis) {
    let bytes = vpt_bytes(vl.vpt_bits());
    if let Some(mut u) = vpt_unit(set) {
        for v in vl.vpes() {
            u.queue.free_vpt(v.vpt, bytes);
        }
    }
    if let Some(ids) = set.shared.lock(LockPath::PhysIts).vpe_ids.as_mut() {
        for v in vl.vpes() {
            ids.free(v.id);
        }
    }
}

/// How a device's MSI reaches the physical GITS_TRANSLATER from a
/// partition's doorbell (`GUEST_ITS_DOORBELL`, the only MSI address its
/// ECAM filter lets its functions be given).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MsiPath {
    /// No SMMU: the device's write goes out with the address the guest
    /// programmed as a physical one, and the host's translater is at the
    /// guest's doorbell (QEMU virt: both at 0x0809_0040).
    Direct,
    /// An SMMU translates the host bridge's DMA: the partition's DMA stage
    /// 2 (`Partition::dma_root`, the tables its stream table entries name,
    /// never the CPU's) maps the doorbell's 4 KiB page at `ipa` onto the
    /// host translater's page at `pa`.
    Smmu { ipa: u64, pa: u64 },
}

/// Why a partition with functions gets no virtual ITS (its functions stay
/// on INTx: the filter refuses MSI and MSI-X enables).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoMsi {
    /// Hermit 0.11 drives a GICv3 without an ITS: the manager keeps INTx.
    Management,
    /// The host has no ITS, or it did not come up.
    NoHostIts,
    /// Function requester ID `rid`'s MSIs reach no ITS that came up (the
    /// host bridge's `msi_map` names none for it, or its ITS is down).
    NoRoute { rid: u32 },
    /// The partition's functions reach two ITSes (`first`, `second`, by
    /// place in the host description): its vITS has one doorbell
    /// ([`MsiRouting::partition_its`]).
    SeveralIts { first: usize, second: usize },
    /// No SMMU, and the host's translater (`translater`) is not at the
    /// guest's doorbell: a device's MSI would be a DMA write to whatever
    /// sits at the doorbell's physical address.
    Misplaced { translater: u64 },
    /// An SMMU, but the host's translater (`translater`) is not at the
    /// doorbell's offset in its page (GICv3's GITS_TRANSLATER is at 0x40,
    /// a GICv5 translate frame's MSI address is its base): a page
    /// mapping cannot send the device's write to it.
    TranslaterOffset { translater: u64 },
    /// A GICv5 ITS whose description names no translate frame.
    NoTranslateFrame,
}

impl fmt::Display for MsiPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MsiPath::Direct => write!(
                f,
                "MSI through a virtual ITS, doorbell {GUEST_ITS_DOORBELL:#x} is the host's translater (no SMMU)"
            ),
            MsiPath::Smmu { ipa, pa } => write!(
                f,
                "MSI through a virtual ITS, doorbell page {ipa:#x} mapped to the host's translater page {pa:#x} in the SMMU's stage 2 only"
            ),
        }
    }
}

impl fmt::Display for NoMsi {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NoMsi::Management => write!(f, "INTx only: the manager (Hermit) has no ITS driver"),
            NoMsi::NoHostIts => write!(f, "INTx only: the host's ITS is absent or did not come up"),
            NoMsi::NoRoute { rid } => write!(
                f,
                "INTx only: requester ID {rid:#06x}'s MSIs reach no host ITS that came up"
            ),
            NoMsi::SeveralIts { first, second } => write!(
                f,
                "INTx only: its functions' MSIs reach two host ITSes ({first} and {second}), its virtual ITS has one doorbell"
            ),
            NoMsi::Misplaced { translater } => write!(
                f,
                "INTx only: no SMMU, and the host's GITS_TRANSLATER {translater:#x} is not at the guest's doorbell {GUEST_ITS_DOORBELL:#x}"
            ),
            NoMsi::TranslaterOffset { translater } => write!(
                f,
                "INTx only: the host's translater {translater:#x} is not at the guest doorbell's offset in its page ({GUEST_ITS_DOORBELL:#x}), so the SMMU cannot map one onto the other"
            ),
            NoMsi::NoTranslateFrame => write!(
                f,
                "INTx only: the host's GICv5 ITS names no translate frame"
            ),
        }
    }
}

/// Whether a partition with assigned PCI functions gets a virtual ITS,
/// and how its devices' MSIs reach the physical one: `host_its` is the
/// control frame base of the host ITS that came up (`None` when none
/// did), `smmu` whether an SMMU translates the host bridge's DMA.
///
/// With an SMMU the translater page goes into the DMA stage 2 only: were
/// it in the CPU's stage 2 too, a guest CPU's store there would signal
/// the ITS with whatever DeviceID the interconnect gives CPU writes
/// (implementation defined), which could be another partition's device.
#[cfg(test)]
pub fn msi_path(management: bool, host_its: Option<u64>, smmu: bool) -> Result<MsiPath, NoMsi> {
    msi_path_to(
        management,
        host_its.map(|base| Some(base + TRANSLATER_FRAME + TRANSLATER_OFFSET)),
        smmu,
    )
}

/// The decision `msi_path` (the GICv3 form, kept for its tests) makes,
/// for the translater address itself (`MsiRouting::
/// translater`; `Some(None)`: the host's ITS has none, a GICv5 ITS with
/// no translate frame). The SMMU maps pages: the translater must sit at
/// the doorbell's offset in its page, or the device's write lands
/// elsewhere in the frame.
pub fn msi_path_to(
    management: bool,
    translater: Option<Option<u64>>,
    smmu: bool,
) -> Result<MsiPath, NoMsi> {
    if management {
        return Err(NoMsi::Management);
    }
    let translater = translater
        .ok_or(NoMsi::NoHostIts)?
        .ok_or(NoMsi::NoTranslateFrame)?;
    if smmu && translater & PAGE_MASK != GUEST_ITS_DOORBELL & PAGE_MASK {
        Err(NoMsi::TranslaterOffset { translater })
    } else if smmu {
        Ok(MsiPath::Smmu {
            ipa: GUEST_ITS_DOORBELL & !PAGE_MASK,
            pa: translater & !PAGE_MASK,
        })
    } else if translater == GUEST_ITS_DOORBELL {
        Ok(MsiPath::Direct)
    } else {
        Err(NoMsi::Misplaced { translater })
    }
}

/// GITS_TRANSLATER: the second 64 KiB frame of an ITS, offset 0x40.
const TRANSLATER_FRAME: u64 = 0x1_0000;
const TRANSLATER_OFFSET: u64 = 0x40;
const PAGE_MASK: u64 = 0xfff;

/// The partition's RAM, where its command queue is.
struct Queue<'a, H: Hw> {
    p: &'a Partition,
    hw: &'a H,
}

impl<H: Hw> QueueMemory for Queue<'_, H> {
    fn read_command(&self, ipa: u64) -> Option<[u64; 4]> {
        let pa = self.p.host_addr(ipa, 32)?;
        let mut bytes = [0u8; 32];
        HostMemory::read(self.hw, pa, &mut bytes);
        let mut cmd = [0u64; 4];
        for (i, w) in cmd.iter_mut().enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(&bytes[8 * i..8 * i + 8]);
            *w = u64::from_le_bytes(b);
        }
        Some(cmd)
    }
}

/// What one GITS_CWRITER (or GITS_CTLR) write let run, in order.
#[derive(Default)]
struct Collected {
    cmds: Vec<PhysCmd>,
    faults: Vec<(VitsError, u64)>,
}

impl VitsSink for Collected {
    fn apply(&mut self, cmd: PhysCmd) {
        self.cmds.push(cmd);
    }
    fn fault(&mut self, error: VitsError, offset: u64) {
        self.faults.push((error, offset));
    }
}

/// [`PitsEnv`] over one locked physical ITS (ITS `its`), the machine-wide
/// LPI pool and the partition's pinning. A command's DeviceID is the
/// guest's (its function's requester ID) until it is sent: then the
/// DeviceID that ITS sees ([`MsiRouting::route`]).
struct Env<'a, 'u> {
    set: &'a ItsSet,
    its: usize,
    unit: &'a mut spin::MutexGuard<'u, ItsUnit>,
    /// The LPI routes the GICv3 path sets (None on the GICv4.0 path,
    /// which takes no physical LPI).
    routes: Option<&'a LpiRoutes>,
    p: &'a Partition,
}

impl<'a, 'u> Env<'a, 'u> {
    fn on(
        set: &'a ItsSet,
        its: usize,
        unit: &'a mut spin::MutexGuard<'u, ItsUnit>,
        routes: Option<&'a LpiRoutes>,
        p: &'a Partition,
    ) -> Env<'a, 'u> {
        Env {
            set,
            its,
            unit,
            routes,
            p,
        }
    }

    /// The DeviceID this ITS sees for the guest's `device`; None when it
    /// reaches another ITS or none (never sent: the caller routed first).
    fn phys_device(&self, device: u32) -> Option<u32> {
        self.set
            .routing
            .route(device)
            .filter(|t| t.its == self.its)
            .map(|t| t.device)
    }

    /// `cmd` (naming the guest's DeviceID `device`, if any) as this ITS
    /// is sent it: renamed to the DeviceID it sees there (`with`), or None
    /// when the device is not behind it ([`Env::phys_device`]).
    fn on_this_its<C>(&self, cmd: C, device: Option<u32>, with: fn(C, u32) -> C) -> Option<C> {
        match device {
            None => Some(cmd),
            Some(d) => self.phys_device(d).map(|to| with(cmd, to)),
        }
    }
}

impl ItsPlacement for Env<'_, '_> {
    fn cpu_of(&self, vcpu: u16) -> Option<u16> {
        let cpu = self.p.vcpus.get(usize::from(vcpu))?.pcpu;
        self.set.rdbase_for(self.its, cpu).map(|_| cpu as u16)
    }
    fn rdbase(&self, cpu: u16) -> u64 {
        // 0 for a CPU not online: never named by a mapping.
        self.set.rdbase_for(self.its, usize::from(cpu)).unwrap_or(0)
    }
    fn alloc_itt(&mut self, bytes: usize) -> Option<u64> {
        self.unit.queue.alloc_itt(bytes)
    }
    fn free_itt(&mut self, pa: u64, bytes: usize) {
        self.unit.queue.free_itt(pa, bytes)
    }
}

impl PitsEnv for Env<'_, '_> {
    fn alloc_lpi(&mut self) -> Option<u32> {
        self.set.shared.lock(LockPath::PhysIts).pool.alloc()
    }
    fn free_lpi(&mut self, lpi: u32) {
        self.set.shared.lock(LockPath::PhysIts).pool.free(lpi)
    }
    fn route(&mut self, lpi: u32, route: Option<LpiRoute>) {
        if let Some(routes) = self.routes {
            routes.set(lpi, route)
        }
    }
    fn send(&mut self, cmd: ItsCmd) {
        if let Some(cmd) = self.on_this_its(cmd, cmd.device(), ItsCmd::with_device) {
            self.unit.queue.send(&cmd)
        }
    }
}

/// The same [`Env`] on the GICv4.0 path: its commands as [`V4Cmd`]s.
impl V4Env for Env<'_, '_> {
    fn send(&mut self, cmd: V4Cmd) {
        if let Some(cmd) = self.on_this_its(cmd, cmd.device(), V4Cmd::with_device) {
            self.unit.queue.send_v4(&cmd)
        }
    }
}

/// The one ITS lock a batch of commands holds: kept while consecutive
/// commands go to the same ITS (one acquisition for a guest's whole
/// MAPD..MAPTI..INV run, or for the vSGI path's run of VMAPPs, VSGIs and
/// VSYNC to one ITS, `vsgi`), released before another ITS's is taken, so
/// never two at once.
pub(crate) struct Held<'s> {
    set: &'s ItsSet,
    at: Option<(usize, spin::MutexGuard<'s, ItsUnit>)>,
}

impl<'s> Held<'s> {
    /// Nothing held yet.
    pub(crate) fn new(set: &'s ItsSet) -> Held<'s> {
        Held { set, at: None }
    }

    /// ITS `i`, locked (kept from the last command when it was the same).
    pub(crate) fn unit(&mut self, i: usize) -> Option<&mut spin::MutexGuard<'s, ItsUnit>> {
        if self.at.as_ref().map(|&(j, _)| j) != Some(i) {
            self.at = None;
            self.at = Some((i, self.set.unit(i)?));
        }
        self.at.as_mut().map(|(_, unit)| unit)
    }

    /// The lock held, if any, let go.
    pub(crate) fn release(&mut self) {
        self.at = None;
    }

    /// `cmds` in order, each on its ITS (`ItsQueue::send_words`), a run
    /// for the same ITS under one hold of its lock. A command for an ITS
    /// that did not come up is not sent.
    pub(crate) fn send_words(&mut self, cmds: &[(usize, [u64; 4])]) {
        for &(i, cmd) in cmds {
            if let Some(unit) = self.unit(i) {
                unit.queue.send_words(cmd);
            }
        }
    }
}

/// The ITSes a partition's accepted command is applied on: the one its
/// DeviceID reaches, or for SYNC and INVALL (which name none) the
/// partition's own ITS `home` (every function it has reaches that one,
/// `MsiRouting::partition_its`; another ITS holds none of its devices and,
/// on GICv4.1, may not have its vPEs mapped); Err when its DeviceID
/// reaches none.
fn targets(set: &ItsSet, cmd: &PhysCmd, home: usize) -> Result<Vec<usize>, alloc::string::String> {
    let device = match *cmd {
        PhysCmd::Mapd { device, .. }
        | PhysCmd::Mapti { device, .. }
        | PhysCmd::Movi { device, .. }
        | PhysCmd::Discard { device, .. }
        | PhysCmd::Inv { device, .. }
        | PhysCmd::Int { device, .. }
        | PhysCmd::Clear { device, .. } => device,
        PhysCmd::InvAll { .. } | PhysCmd::Sync { .. } => return Ok(alloc::vec![home]),
    };
    match set.routing.route(device) {
        Some(t) => Ok(alloc::vec![t.its]),
        None => Err(alloc::format!(
            "ITS command {cmd:?} not applied: DeviceID {device:#x} reaches no host ITS that came up"
        )),
    }
}

/// A vLPI whose configuration the guest invalidated: re-check it on the
/// redistributor of `vcpu` (the caller delivers it there).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recheck {
    pub vcpu: usize,
    pub vintid: u32,
}

/// What a guest access to its GITS frame did.
#[derive(Default)]
pub struct Outcome {
    /// The value read (reads only).
    pub value: u64,
    /// Faults to report as the partition's (refused commands or writes,
    /// commands the physical ITS could not take).
    pub faults: Vec<alloc::string::String>,
    /// vLPIs to re-check (INV, INVALL).
    pub rechecks: Vec<Recheck>,
    /// One line per event mapped (MAPTI/MAPI applied), for the log.
    pub mapped: Vec<alloc::string::String>,
}

/// A guest access to its vITS control frame at `offset`. 32-bit accesses
/// reach either half of a 64-bit register; the GITS_TRANSLATER page
/// (64 KiB up) reads as zero and ignores writes (a device's MSI goes to the
/// physical ITS; a CPU write here has no DeviceID to give).
#[allow(clippy::too_many_arguments)]
pub fn access(
    its: Option<&ItsSet>,
    routes: &LpiRoutes,
    p: &Partition,
    owner: &impl crate::vgic::vits::DeviceOwner,
    hw: &mut impl Hw,
    offset: u64,
    width: u8,
    write: Option<u64>,
) -> Outcome {
    let mut out = Outcome::default();
    let Some(lock) = p.vits.as_ref() else {
        return out;
    };
    if offset >= 0x1_0000 || !matches!(width, 4 | 8) || !offset.is_multiple_of(u64::from(width)) {
        return out;
    }
    let reg = offset & !7;
    let shift = 8 * (offset & 4);
    let mut v = lock.lock(LockPath::ItsTrap);
    let Some(value) = write else {
        let full = v.vits.read(reg);
        out.value = if width == 8 {
            full
        } else {
            (full >> shift) & 0xFFFF_FFFF
        };
        return out;
    };
    // A 32-bit write to half of a 64-bit register merges with the other.
    let value = if width == 8 || reg == crate::vgic::vits::GITS_CTLR {
        value
    } else {
        let old = v.vits.read(reg);
        let mask = 0xFFFF_FFFFu64 << shift;
        (old & !mask) | ((value & 0xFFFF_FFFF) << shift)
    };
    let mut sink = Collected::default();
    v.vits
        .write(reg, value, &Queue { p, hw: &*hw }, owner, &mut sink);
    for (e, at) in sink.faults {
        out.faults.push(alloc::format!(
            "ITS command at queue offset {at:#x} refused: {e:?}"
        ));
    }
    if sink.cmds.is_empty() {
        return out;
    }
    let Some(set) = its else {
        return out;
    };
    let v = &mut *v;
    if v.delivery == LpiDelivery::Direct {
        direct_commands(v, set, p, hw, sink.cmds, &mut out);
        return out;
    }
    let mut held = Held::new(set);
    for cmd in sink.cmds {
        let on = match targets(set, &cmd, v.its) {
            Ok(on) => on,
            Err(why) => {
                out.faults.push(why);
                continue;
            }
        };
        match cmd {
            PhysCmd::Inv { device, event } => {
                if let Some((vcpu, vintid)) = v.pits.route_of(device, event) {
                    out.rechecks.push(Recheck {
                        vcpu: usize::from(vcpu),
                        vintid,
                    });
                }
            }
            PhysCmd::InvAll { vcpu } => {
                out.rechecks
                    .extend(v.pits.vintids_of(vcpu).map(|vintid| Recheck {
                        vcpu: usize::from(vcpu),
                        vintid,
                    }))
            }
            _ => {}
        }
        for i in on {
            let Some(unit) = held.unit(i) else {
                continue;
            };
            let mut env = Env::on(set, i, unit, Some(routes), p);
            let applied = v.pits.apply(cmd, &mut env).map_err(|e| pits_fault(cmd, e));
            record(&mut out, cmd, applied, |device, event, vcpu| {
                let lpi = v.pits.lpi_of(device, event).unwrap_or(0);
                let cpu = env.cpu_of(vcpu).unwrap_or(0);
                alloc::format!("LPI {lpi} on CPU {cpu}, ITS {i}")
            });
        }
    }
    out
}

fn pits_fault(cmd: PhysCmd, e: PitsError) -> alloc::string::String {
    alloc::format!("ITS command {cmd:?} not applied on the physical ITS: {e:?}")
}

/// What applying `cmd` gave, into `out`: its fault, or for a mapping the
/// log line, ending with where `target` (DeviceID, EventID, vCPU) says it
/// went.
fn record(
    out: &mut Outcome,
    cmd: PhysCmd,
    applied: Result<(), alloc::string::String>,
    target: impl FnOnce(u32, u32, u16) -> alloc::string::String,
) {
    match applied {
        Err(why) => out.faults.push(why),
        Ok(()) => {
            if let PhysCmd::Mapti {
                device,
                event,
                vintid,
                vcpu,
            } = cmd
            {
                out.mapped.push(alloc::format!(
                    "vITS: DeviceID {device:#x} event {event} -> vLPI {vintid} on vCPU {vcpu}: {}",
                    target(device, event, vcpu)
                ));
            }
        }
    }
}

/// The accepted commands of a partition with direct vLPIs, as GICv4.0
/// commands on its vPEs (`v40::PartitionVlpis::apply`). No re-check: the
/// GIC reads the guest's own property table, and a guest INV/INVALL
/// becomes the physical INV/VINVALL.
fn direct_commands(
    v: &mut PartitionVits,
    set: &ItsSet,
    p: &Partition,
    hw: &mut impl Hw,
    cmds: Vec<PhysCmd>,
    out: &mut Outcome,
) {
    let mut held = Held::new(set);
    let gic = if v.v41 { "GICv4.1" } else { "GICv4.0" };
    for cmd in cmds {
        if v.v41 {
            if let Err(why) = v41_before(v, p, hw, cmd) {
                out.faults
                    .push(alloc::format!("ITS command {cmd:?} not applied: {why}"));
                continue;
            }
        }
        let on = match targets(set, &cmd, v.its) {
            Ok(on) => on,
            Err(why) => {
                out.faults.push(why);
                continue;
            }
        };
        if v.vlpis.is_none() {
            // Making the vPEs takes each ITS's lock in turn.
            held.release();
        }
        let vl = match v.vlpis_ready(set, p) {
            Ok(vl) => vl,
            Err(why) => {
                out.faults.push(alloc::format!(
                    "ITS command {cmd:?} not applied: its vPEs could not be made ({why})"
                ));
                continue;
            }
        };
        for i in on {
            let Some(unit) = held.unit(i) else {
                continue;
            };
            let applied = vl
                .apply(cmd, &mut Env::on(set, i, unit, None, p))
                .map_err(|e| {
                    alloc::format!("ITS command {cmd:?} not applied as a direct vLPI: {e:?}")
                });
            record(out, cmd, applied, |_, _, vcpu| {
                let vpe = vl.vpe(vcpu).map_or(0, |x| x.id);
                alloc::format!("direct to vPE {vpe} ({gic}, no exit), ITS {i}")
            });
        }
    }
}

/// GICv4.1, before `cmd` goes to the ITS: a MAPTI/MOVI names only a vPE
/// the vSGI path has mapped (its vCPU has loaded this run), and the VCONF
/// copy takes the guest's byte of every vINTID the command makes the GIC
/// read (MAPTI, MOVI, INV: the event's; INVALL: every one of the vCPU's),
/// before the command is sent.
fn v41_before(
    v: &PartitionVits,
    p: &Partition,
    hw: &mut impl Hw,
    cmd: PhysCmd,
) -> Result<(), alloc::string::String> {
    let Some(vsgi) = p.vsgi.as_ref() else {
        return Err("no vPEs".into());
    };
    let vintids: Vec<(u16, u32)> = match cmd {
        PhysCmd::Mapti { vintid, vcpu, .. } => alloc::vec![(vcpu, vintid)],
        PhysCmd::Movi {
            device,
            event,
            vcpu,
        } => v
            .vlpis
            .as_ref()
            .and_then(|vl| vl.route_of(device, event))
            .map(|(_, vintid)| alloc::vec![(vcpu, vintid)])
            .unwrap_or_default(),
        PhysCmd::Inv { device, event } => v
            .vlpis
            .as_ref()
            .and_then(|vl| vl.route_of(device, event))
            .into_iter()
            .collect(),
        PhysCmd::InvAll { vcpu } => v
            .vlpis
            .as_ref()
            .map(|vl| vl.vintids_of(vcpu).map(|i| (vcpu, i)).collect())
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    if let PhysCmd::Mapti { vcpu, .. } | PhysCmd::Movi { vcpu, .. } = cmd {
        if !vsgi.vpe_mapped(usize::from(vcpu)) {
            return Err(alloc::format!(
                "vCPU {vcpu}'s vPE is not mapped yet (the vCPU has not run this boot)"
            ));
        }
    }
    let vconf = vsgi.vconf();
    for (vcpu, vintid) in vintids {
        let Some(prop) = v.v41_props.get(usize::from(vcpu)).copied().flatten() else {
            continue; // MAPTI is refused without it (NoPropertyTable).
        };
        copy_vconf_byte(hw, prop, vconf, vintid);
    }
    Ok(())
}

/// vINTID `vintid`'s byte of the guest's property table `prop` copied into
/// the VCONF table at `vconf` (the same offset, `v41::vconf_offset`) and
/// cleaned to the point of coherency for the GIC; nothing for a vINTID
/// outside either table (the MAPTI is then refused) or without a VCONF.
fn copy_vconf_byte(hw: &mut impl Hw, prop: Vprop, vconf: u64, vintid: u32) {
    let Some(off) = crate::vgic::v41::vconf_offset(vintid, prop.id_bits, crate::vsgi::VPT_BITS)
    else {
        return;
    };
    if vconf == 0 {
        return;
    }
    let guest = (prop.value & 0x000F_FFFF_FFFF_F000) + off;
    let mut byte = [0u8];
    HostMemory::read(&*hw, crate::addr::PhysAddr(guest), &mut byte);
    let at = crate::addr::PhysAddr(vconf + off);
    HostMemory::write(hw, at, &byte);
    hw.clean_for_guest(at, 1);
}

/// What a vCPU's redistributor needs to take direct vLPIs: the vPE made
/// resident on its CPU with the guest's property table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DirectLpis {
    pub prop: Vprop,
    pub vpe: Vpe,
    /// Bytes of its pending table (zeroed before it is made resident).
    pub vpt_bytes: usize,
}

/// The guest set EnableLPIs on vCPU `vcpu`'s redistributor with
/// GICR_PROPBASER `propbaser`. None for a partition whose MSIs are not
/// direct, or are GICv4.1's (the table kept for the VCONF copy; the vSGI
/// path makes the vPE resident); otherwise its vPEs are made if needed and the guest's table is
/// checked to lie wholly inside its RAM (`v40::vpropbaser`), or the error
/// says why its vLPIs stay off.
pub fn lpis_on(
    its: Option<&ItsSet>,
    p: &Partition,
    vcpu: u16,
    propbaser: u64,
) -> Option<Result<DirectLpis, alloc::string::String>> {
    let lock = p.vits.as_ref()?;
    let mut v = lock.lock(LockPath::ItsTrap);
    if v.delivery != LpiDelivery::Direct {
        return None;
    }
    let ram = [RamRange {
        ipa: p.ram_ipa,
        pa: p.ram.0,
        size: p.ram_size,
    }];
    let prop = match vpropbaser(propbaser, &ram, LPI_ID_BITS) {
        Ok(prop) => prop,
        Err(e) => {
            return Some(Err(alloc::format!(
                "GICR_PROPBASER {propbaser:#x} of vCPU {vcpu} refused for direct vLPIs: {e:?}"
            )))
        }
    };
    let v41 = v.v41;
    let vl = match v.vlpis_ready(its?, p) {
        Ok(vl) => vl,
        Err(why) => return Some(Err(why)),
    };
    let vpe = vl.vpe(vcpu)?;
    vl.set_property_table(vcpu, prop);
    if v41 {
        // GICv4.1: the vSGI path makes the vPE resident at every load;
        // the table is where the VCONF copy's bytes come from.
        if let Some(slot) = v.v41_props.get_mut(usize::from(vcpu)) {
            *slot = Some(prop);
        }
        return None;
    }
    Some(Ok(DirectLpis {
        prop,
        vpe,
        vpt_bytes: vpt_bytes(vl.vpt_bits()),
    }))
}

/// The partition is being deleted (every vCPU put): its vPEs unmapped
/// (VMAPP V = 0) on every ITS and their IDs and pending tables given back.
pub fn release_vpes(its: Option<&ItsSet>, p: &Partition) {
    let Some(lock) = p.vits.as_ref() else {
        return;
    };
    let mut v = lock.lock(LockPath::Management);
    let Some(mut vl) = v.vlpis.take() else {
        return;
    };
    let Some(set) = its else {
        return;
    };
    let v41 = v.v41;
    for i in set.routing.live() {
        if let Some(mut unit) = set.unit(i) {
            let mut env = Env::on(set, i, &mut unit, None, p);
            vl.release_devices_where(&mut env, |d| on_its(set, d, i));
            if !v41 {
                vl.unmap_vpes(&mut env);
            }
        }
    }
    // GICv4.1's vPEs are the vSGI path's: `vsgi::release` unmaps them.
    if !v41 {
        give_back(set, &vl);
    }
}

/// Whether the guest's DeviceID `device` reaches ITS `its`.
fn on_its(set: &ItsSet, device: u32, its: usize) -> bool {
    set.routing.route(device).is_some_and(|t| t.its == its)
}

/// The partition's vITS starts afresh (its start, stop, crash or
/// deletion, after its functions were quiesced): every device unmapped on
/// the ITS it reaches, its LPIs and ITTs given back, its routes cleared.
pub fn reset(its: Option<&ItsSet>, routes: &LpiRoutes, p: &Partition) {
    let Some(lock) = p.vits.as_ref() else {
        return;
    };
    let mut v = lock.lock(LockPath::Management);
    if v.pits.lpis() > 0 || v.vits.devices() > 0 || v.vlpis.is_some() {
        if let Some(set) = its {
            for i in set.routing.live() {
                let Some(mut unit) = set.unit(i) else {
                    continue;
                };
                v.pits
                    .release_where(&mut Env::on(set, i, &mut unit, Some(routes), p), |d| {
                        on_its(set, d, i)
                    });
                if let Some(vl) = v.vlpis.as_mut() {
                    vl.release_devices_where(&mut Env::on(set, i, &mut unit, None, p), |d| {
                        on_its(set, d, i)
                    });
                }
            }
        }
    }
    let limits = v.limits;
    v.vits = Vits::new(limits);
    v.v41_props.iter_mut().for_each(|t| *t = None);
}

// Tested through the exit path: `its_exit_tests.rs`.
