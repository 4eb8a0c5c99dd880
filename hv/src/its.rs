//! A partition's virtual ITS wired to the physical one (GICv3 host): the
//! guest's GITS frame accesses go to its [`Vits`] under the partition's
//! lock, the commands it accepts are applied on the physical ITS through
//! the partition's [`PartitionIts`] under the physical ITS's lock, and the
//! guest's INV/INVALL become a re-check of the vLPI on the redistributor
//! of the vCPU the event targets (`VRedist::lpi_recheck`, through the
//! mailbox when that vCPU runs on another CPU).
//!
//! On a GICv4.0 host ([`HostIts::enable_direct`]) a partition's MSIs are
//! direct vLPIs instead (`vgic::v40`, [`LpiDelivery::Direct`]): its vCPUs
//! get vPEs (IDs and zeroed pending tables from the platform, VMAPP'd to
//! their pinned CPUs' redistributors) at the first need, the guest's
//! commands become VMAPTI/VMOVI/VSYNC/VINVALL on them, and a device's MSI
//! reaches the resident vCPU with no exit. A vCPU's vPE is made resident
//! on its own CPU when its guest sets EnableLPIs ([`lpis_on`]: the guest's
//! property table checked inside its RAM; `exit` applies it through the
//! CPU's own VLPI frame, no lock) and non-resident at its put. A reset
//! unmaps the devices and keeps the vPEs; deletion unmaps and frees them
//! ([`release_vpes`]).
//!
//! Two locks, taken in this order, both counted:
//! - the partition's vITS (`its_trap`): its command queue is one device
//!   that every vCPU of the partition may program, like its distributor;
//! - the physical ITS (`phys_its`, [`HostIts`]): one command queue for the
//!   whole machine, with the LPI pool its commands allocate from. No
//!   per-CPU design works: the ITS has one GITS_CWRITER, and an LPI freed
//!   by one partition is reused by another. Taken only on this slow path
//!   (a guest's ITS command, a partition's reset, a CPU coming online),
//!   never when an LPI is delivered (`LpiRoutes` is read lock-free).
//!
//! Which partitions get a vITS (their ECAM filter's `msi_doorbell` and the
//! DT's ITS node and `msi-map`), and how their devices' MSIs reach the
//! physical translater (directly, or through the SMMU's stage 2), is
//! [`msi_path`].

use crate::exit::Hw;
use crate::lockstat::{CountedLock, LockPath};
use crate::partition::{HostMemory, Partition};
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
use pinfold_vboard::GUEST_ITS_DOORBELL;

/// The physical ITS's command queue and the memory ITTs come from, as the
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

/// The physical ITS as the core keeps it, behind `System::its`.
pub struct HostIts {
    pub typer: ItsTyper,
    queue: Box<dyn ItsQueue>,
    pool: LpiPool,
    /// Each CPU's RDbase once its collection (ICID = CPU index) is mapped.
    rdbase: Vec<Option<u64>>,
    /// GICv4.0 direct vLPIs are on ([`HostIts::enable_direct`]): the vPE
    /// IDs handed out.
    vpe_ids: Option<VpeIds>,
}

impl HostIts {
    /// An initialised ITS (tables and command queue set up, enabled) for
    /// `cpus` CPUs; no collection is mapped yet ([`HostIts::cpu_online`]).
    pub fn new(typer: ItsTyper, queue: Box<dyn ItsQueue>, cpus: usize) -> HostIts {
        HostIts {
            typer,
            queue,
            pool: LpiPool::new(LPI_COUNT),
            rdbase: alloc::vec![None; cpus],
            vpe_ids: None,
        }
    }

    /// Direct vLPI injection on, when the host offers it
    /// (`found.direct_vlpi`: every redistributor VLPIS, an ITS Virtual)
    /// and is a GICv4.0, and this ITS is a GICv4 one (GITS_TYPER.Virtual:
    /// it took a vPE table at init). A GICv4.1 keeps the trapped path: its
    /// VMAPP and GICR_VPENDBASER have the 4.1 layouts (vPE ID, shared vPE
    /// table) that `vgic::v40` does not speak. False, and nothing changed,
    /// otherwise.
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

    /// CPU `cpu` has enabled LPIs on its redistributor: its collection is
    /// mapped to it (MAPC ICID = cpu, then SYNC).
    pub fn cpu_online(&mut self, cpu: usize, processor_number: u16, redist_pa: u64) {
        let Some(slot) = self.rdbase.get_mut(cpu) else {
            return;
        };
        let rdbase = self.typer.rdbase(processor_number, redist_pa);
        *slot = Some(rdbase);
        self.queue.send(&ItsCmd::Mapc {
            icid: cpu as u16,
            rdbase,
            valid: true,
        });
        self.queue.send(&ItsCmd::Sync { rdbase });
    }

    /// The command queue, for the GICv4.1 vPE commands (`vsgi`).
    pub fn queue_mut(&mut self) -> &mut dyn ItsQueue {
        &mut *self.queue
    }

    /// CPU `cpu`'s RDbase, once its collection is mapped.
    pub fn rdbase_for(&self, cpu: usize) -> Option<u64> {
        self.rdbase.get(cpu).copied().flatten()
    }

    pub fn lpis_in_use(&self) -> u32 {
        self.pool.in_use()
    }

    /// The CPU vCPU `vcpu` of `p` is pinned to, if its collection is
    /// mapped (a CPU that did not come online cannot take the interrupt).
    fn cpu_of(&self, p: &Partition, vcpu: u16) -> Option<u16> {
        let cpu = p.vcpus.get(usize::from(vcpu))?.pcpu;
        self.rdbase.get(cpu)?.map(|_| cpu as u16)
    }

    /// CPU `cpu`'s RDbase (0 for one not online: never named by a mapping).
    fn rdbase_of(&self, cpu: u16) -> u64 {
        self.rdbase
            .get(usize::from(cpu))
            .copied()
            .flatten()
            .unwrap_or(0)
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
}

impl PartitionVits {
    /// `mappings`: the events it may map at once, all devices together
    /// (its functions' MSI vectors: `partition::lpi_budget`).
    pub fn new(
        slot: u16,
        vcpus: u16,
        typer: ItsTyper,
        delivery: LpiDelivery,
        mappings: u32,
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
        }
    }

    /// The partition's vPEs, made and mapped (VMAPP to each vCPU's CPU)
    /// if they are not yet: one ID and one zeroed pending table per vCPU.
    /// On failure nothing is kept.
    fn vlpis_ready(
        &mut self,
        host: &mut HostIts,
        p: &Partition,
    ) -> Result<&mut PartitionVlpis, alloc::string::String> {
        if self.vlpis.is_none() {
            let mut vl = PartitionVlpis::new(self.typer, Vec::new(), LPI_ID_BITS);
            let made = (0..self.limits.vcpus).try_for_each(|vcpu| {
                let vpe = new_vpe(host, vcpu)?;
                vl.push_vpe(vpe);
                Ok(())
            });
            let mapped = made.and_then(|()| {
                let mut env = Env {
                    host: &mut *host,
                    routes: None,
                    p,
                };
                vl.map_vpes(&mut env)
                    .map_err(|e| alloc::format!("VMAPP refused: {e:?}"))
            });
            if let Err(why) = mapped {
                give_back(host, &vl);
                return Err(why);
            }
            self.vlpis = Some(vl);
        }
        Ok(self.vlpis.as_mut().expect("made above"))
    }
}

/// One vPE for vCPU `vcpu`: an ID and a zeroed pending table, or nothing.
fn new_vpe(host: &mut HostIts, vcpu: u16) -> Result<Vpe, alloc::string::String> {
    let id = host
        .vpe_ids
        .as_mut()
        .and_then(VpeIds::alloc)
        .ok_or_else(|| alloc::format!("no vPE ID left for vCPU {vcpu}"))?;
    match host.queue.alloc_vpt(vpt_bytes(LPI_ID_BITS)) {
        Some(vpt) => Ok(Vpe { id, vpt }),
        None => {
            if let Some(ids) = host.vpe_ids.as_mut() {
                ids.free(id);
            }
            Err(alloc::format!("no memory for vCPU {vcpu}'s pending table"))
        }
    }
}

/// A partition's vPE IDs and pending tables back to the host.
fn give_back(host: &mut HostIts, vl: &PartitionVlpis) {
    let bytes = vpt_bytes(vl.vpt_bits());
    for v in vl.vpes() {
        host.queue.free_vpt(v.vpt, bytes);
        if let Some(ids) = host.vpe_ids.as_mut() {
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
    /// No SMMU, and the host's translater (`translater`) is not at the
    /// guest's doorbell: a device's MSI would be a DMA write to whatever
    /// sits at the doorbell's physical address.
    Misplaced { translater: u64 },
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
            NoMsi::Misplaced { translater } => write!(
                f,
                "INTx only: no SMMU, and the host's GITS_TRANSLATER {translater:#x} is not at the guest's doorbell {GUEST_ITS_DOORBELL:#x}"
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
pub fn msi_path(management: bool, host_its: Option<u64>, smmu: bool) -> Result<MsiPath, NoMsi> {
    if management {
        return Err(NoMsi::Management);
    }
    let base = host_its.ok_or(NoMsi::NoHostIts)?;
    let translater = base + TRANSLATER_FRAME + TRANSLATER_OFFSET;
    if smmu {
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

/// [`PitsEnv`] over the locked physical ITS and the partition's pinning.
struct Env<'a> {
    host: &'a mut HostIts,
    /// The LPI routes the GICv3 path sets (None on the GICv4.0 path,
    /// which takes no physical LPI).
    routes: Option<&'a LpiRoutes>,
    p: &'a Partition,
}

impl ItsPlacement for Env<'_> {
    fn cpu_of(&self, vcpu: u16) -> Option<u16> {
        self.host.cpu_of(self.p, vcpu)
    }
    fn rdbase(&self, cpu: u16) -> u64 {
        self.host.rdbase_of(cpu)
    }
    fn alloc_itt(&mut self, bytes: usize) -> Option<u64> {
        self.host.queue.alloc_itt(bytes)
    }
    fn free_itt(&mut self, pa: u64, bytes: usize) {
        self.host.queue.free_itt(pa, bytes)
    }
}

impl PitsEnv for Env<'_> {
    fn alloc_lpi(&mut self) -> Option<u32> {
        self.host.pool.alloc()
    }
    fn free_lpi(&mut self, lpi: u32) {
        self.host.pool.free(lpi)
    }
    fn route(&mut self, lpi: u32, route: Option<LpiRoute>) {
        if let Some(routes) = self.routes {
            routes.set(lpi, route)
        }
    }
    fn send(&mut self, cmd: ItsCmd) {
        self.host.queue.send(&cmd)
    }
}

/// The same [`Env`] on the GICv4.0 path: its commands as [`V4Cmd`]s.
impl V4Env for Env<'_> {
    fn send(&mut self, cmd: V4Cmd) {
        self.host.queue.send_v4(&cmd)
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
    its: &CountedLock<Option<HostIts>>,
    routes: &LpiRoutes,
    p: &Partition,
    owner: &impl crate::vgic::vits::DeviceOwner,
    hw: &impl Hw,
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
    v.vits.write(reg, value, &Queue { p, hw }, owner, &mut sink);
    for (e, at) in sink.faults {
        out.faults.push(alloc::format!(
            "ITS command at queue offset {at:#x} refused: {e:?}"
        ));
    }
    if sink.cmds.is_empty() {
        return out;
    }
    let mut host = its.lock(LockPath::PhysIts);
    let Some(host) = host.as_mut() else {
        return out;
    };
    let v = &mut *v;
    if v.delivery == LpiDelivery::Direct {
        direct_commands(v, host, p, sink.cmds, &mut out);
        return out;
    }
    for cmd in sink.cmds {
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
        let mut env = Env {
            host: &mut *host,
            routes: Some(routes),
            p,
        };
        let applied = v.pits.apply(cmd, &mut env).map_err(|e| pits_fault(cmd, e));
        record(&mut out, cmd, applied, |device, event, vcpu| {
            let lpi = v.pits.lpi_of(device, event).unwrap_or(0);
            let cpu = env.cpu_of(vcpu).unwrap_or(0);
            alloc::format!("LPI {lpi} on CPU {cpu}")
        });
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
    host: &mut HostIts,
    p: &Partition,
    cmds: Vec<PhysCmd>,
    out: &mut Outcome,
) {
    for cmd in cmds {
        let vl = match v.vlpis_ready(host, p) {
            Ok(vl) => vl,
            Err(why) => {
                out.faults.push(alloc::format!(
                    "ITS command {cmd:?} not applied: its vPEs could not be made ({why})"
                ));
                continue;
            }
        };
        let applied = vl
            .apply(
                cmd,
                &mut Env {
                    host,
                    routes: None,
                    p,
                },
            )
            .map_err(|e| alloc::format!("ITS command {cmd:?} not applied as a direct vLPI: {e:?}"));
        record(out, cmd, applied, |_, _, vcpu| {
            let vpe = vl.vpe(vcpu).map_or(0, |x| x.id);
            alloc::format!("direct to vPE {vpe} (GICv4.0, no exit)")
        });
    }
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
/// direct; otherwise its vPEs are made if needed and the guest's table is
/// checked to lie wholly inside its RAM (`v40::vpropbaser`), or the error
/// says why its vLPIs stay off.
pub fn lpis_on(
    its: &CountedLock<Option<HostIts>>,
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
    let mut host = its.lock(LockPath::PhysIts);
    let host = host.as_mut()?;
    let vl = match v.vlpis_ready(host, p) {
        Ok(vl) => vl,
        Err(why) => return Some(Err(why)),
    };
    let vpe = vl.vpe(vcpu)?;
    vl.set_property_table(vcpu, prop);
    Some(Ok(DirectLpis {
        prop,
        vpe,
        vpt_bytes: vpt_bytes(vl.vpt_bits()),
    }))
}

/// The partition is being deleted (every vCPU put): its vPEs unmapped
/// (VMAPP V = 0) and their IDs and pending tables given back.
pub fn release_vpes(its: &CountedLock<Option<HostIts>>, p: &Partition) {
    let Some(lock) = p.vits.as_ref() else {
        return;
    };
    let mut v = lock.lock(LockPath::Management);
    let Some(mut vl) = v.vlpis.take() else {
        return;
    };
    let mut host = its.lock(LockPath::PhysIts);
    if let Some(host) = host.as_mut() {
        vl.release(&mut Env {
            host,
            routes: None,
            p,
        });
        give_back(host, &vl);
    }
}

/// The partition's vITS starts afresh (its start, stop, crash or
/// deletion, after its functions were quiesced): every device unmapped on
/// the physical ITS, its LPIs and ITTs given back, its routes cleared.
pub fn reset(its: &CountedLock<Option<HostIts>>, routes: &LpiRoutes, p: &Partition) {
    let Some(lock) = p.vits.as_ref() else {
        return;
    };
    let mut v = lock.lock(LockPath::Management);
    if v.pits.lpis() > 0 || v.vits.devices() > 0 || v.vlpis.is_some() {
        let mut host = its.lock(LockPath::PhysIts);
        if let Some(host) = host.as_mut() {
            v.pits.release(&mut Env {
                host,
                routes: Some(routes),
                p,
            });
            if let Some(vl) = v.vlpis.as_mut() {
                vl.release_devices(&mut Env {
                    host,
                    routes: None,
                    p,
                });
            }
        }
    }
    let limits = v.limits;
    v.vits = Vits::new(limits);
}

// Tested through the exit path: `its_exit_tests.rs`.
