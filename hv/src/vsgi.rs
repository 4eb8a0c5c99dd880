//! GICv4.1 direct vSGIs wired into the system: the decisions of
//! `vgic::v41` applied at partition start and delete, vCPU load and put,
//! a guest's ICC_SGI1R_EL1 trap, its SGI configuration writes and its
//! GICD_CTLR group enables. The platform applies them (`platform::v41`:
//! the shared vPE table, each CPU's GICR_VPROPBASER and its own VLPI frame
//! and GITS_SGIR as [`V41Hw`] through `exit::Hw::v41`).
//!
//! - Which partitions: on a host where `v41::SgiDelivery::choose` said
//!   Direct (`gichost::GicFound::direct_vsgi`) and the ITS came up, every
//!   partition with the GICv3 interface ([`PartitionVsgi::for_partition`])
//!   gets vPEs, and its distributor offers GICD_TYPER2.nASSGIcap
//!   (`vgic::dist`). Its SGIs go to the vPEs only while the guest has
//!   GICD_CTLR.nASSGIreq set ([`PartitionVsgi::direct`]): a vSGI has no
//!   active state, which the guest must accept (GICv4.1; KVM does the
//!   same, Linux's gic_dist_init asks). A GICv3 or GICv4.0 host has no
//!   [`VsgiHost`] and nothing here runs.
//! - vPE IDs: vCPU n's vPE is the ID of the CPU it is pinned to ([`vpe_of`]):
//!   a CPU runs one vCPU, so IDs are unique host-wide with no allocator.
//! - Which ITSes: every ITS that came up and offers vSGIs (GITS_TYPER
//!   Virtual, VMAPP, VSGI: `ItsSet::vsgi_itses`). Every vPE is mapped on
//!   each (a GITS_SGIR write reaches only a vPE its ITS has mapped), and
//!   each CPU writes the GITS_SGIR of its own ([`ItsSet::local_its`]: the
//!   lowest-numbered ITS with vSGIs in its NUMA node, else the
//!   lowest-numbered with them; seed 004, Linux's "Use local 4_1 ITS to
//!   generate VSGI": a write to the other socket's ITS costs about 100 ns).
//!   A vPE's SGI configuration (VSGI, VSYNC) goes through one ITS only, its
//!   CPU's own ([`cfg_its`]): the configuration lives with the vPE, not in
//!   an ITS (Linux's `its_configure_sgi` sends it to the one ITS
//!   `find_4_1_its` returns), and one ITS keeps a vPE's commands in order.
//! - vPE creation (at a vCPU's first load of a run, on its own CPU, so its
//!   redistributor is online): the VM's configuration table (VCONF, the
//!   vLPI property table: zero, or with direct vLPIs the hypervisor's copy
//!   of the guest's property table, `its`) once per partition and the vCPU's pending table (VPT) from
//!   the EL2 heap, zeroed; its vPE VMAPP'd to its CPU's redistributor on
//!   every ITS with vSGIs, Alloc on the first only (`v41::map_vpe`), then
//!   its SGIs' reset configuration (VSGI, VSYNC). A start ([`restart`])
//!   unmaps the previous run's vPEs and frees their tables; delete
//!   ([`release`]) does the same once every vCPU is put. An SGI to a vCPU
//!   that was never loaded this run is dropped, as the trapped path's
//!   mailbox post is (a load clears it).
//! - Load/put ([`load`], [`put`]): on the vCPU's own CPU, through its own
//!   redistributor, no lock shared between CPUs (`V41Hw::lockless`). Load
//!   writes GICR_VPENDBASER with the vPE ID, Valid and the group enables of
//!   the guest's GICD_CTLR (`v41::group_enables`) and waits for Dirty; put
//!   writes Valid = 0 and waits for Dirty.
//! - Send (`exit::send_sgi`, while nASSGIreq is set): the guest's ICC_SGI1R_EL1 write still traps
//!   (an EL1 write of ICC_SGI*R_EL1 traps to EL2 while HCR_EL2.IMO is set;
//!   GICv4.1 adds no untrapped SGI generation). KVM does the same: the trap
//!   is emulated and a hardware vSGI is made pending by Linux's
//!   `its_sgi_set_irqchip_state`, one GITS_SGIR write of vPE ID and vINTID,
//!   no ITS command. Here each target is one GITS_SGIR write
//!   (`v41::DirectSgi::send`) to this CPU's ITS, whose GITS_SGIR the
//!   platform put in the CPU's frame at boot (so the send path names no
//!   ITS and takes no lock); only the receiver is spared its exit.
//!
//! Locks: the ITS commands (map, unmap, reconfigure) take one ITS's
//! `phys_its` lock at a time and never two (`its::ItsSet`'s rule), a run of
//! commands for one ITS under one hold (`its::Held`). The first ITS with
//! vSGIs is the vPEs' home: its lock covers the check that a vPE is not
//! yet mapped, the tables (from its queue's memory), its VMAPP with Alloc
//! and, at unmap, its VMAPP V = 0 with Alloc (sent last) and the frees.
//! Between the ITSes' holds a vPE is mapped on some ITSes only; nothing
//! sends to it then (its own vCPU has not run yet, and an SGI written to
//! an ITS it is not yet mapped on is ignored, as one to a vCPU not loaded
//! this run is dropped).
//! - Reconfigure ([`reconfigure`]): a guest write to its redistributor that
//!   changed an SGI's enable or priority becomes VSGI + VSYNC.
//!   The vPE's configuration follows the guest's whether or not nASSGIreq
//!   is set, so the switch re-sends none.
//! - GICD_CTLR ([`ctlr_written`]): a write that changes EnableGrp0/1 or
//!   nASSGIreq kicks every other vCPU's CPU; each, on its own CPU (the
//!   writer's at once, the others at the kick's mailbox drain), re-loads
//!   its vPE with the group enables ([`regroup`], as KVM's
//!   KVM_REQ_RELOAD_GICv4) and follows nASSGIreq ([`follow`]): turned on,
//!   the SGIs pending in its list registers move to its vPE ([`pend`], as
//!   KVM's vgic_v4_enable_vsgis); turned off, the vSGIs on the vPE stay
//!   there and are delivered by it (it stays resident at every load).
//!
//! Deviations: vSGIs keep no active state (the guest asked for that); a
//! guest's GICR_ISPENDR0/ICPENDR0 write of an SGI bit goes through the
//! list registers as on the trapped path, and its GICR_ISPENDR0 does not
//! read the vPE's pending vSGIs; those left on the vPE when nASSGIreq is
//! turned off are delivered without active state (KVM reads them back
//! through GICR_VSGIR, which [`V41Hw`] does not have). No doorbells: a
//! vCPU whose vPE is not resident is off (pinned vCPUs), and sees its
//! vSGIs at load.
//! Untested on GICv4.1 hardware (no emulator has it): host-tested against
//! `pinfold-gicmodel` through the exit path (`vsgi_exit_tests.rs`).

use crate::exit::{fault, Hw};
use crate::its::{Held, ItsSet};
use crate::lockstat::{CountedLock, LockPath, LockStat};
use crate::partition::Partition;
use crate::ratelimit::FaultKind;
use crate::system::System;
use crate::vgic::redist::VRedist;
use crate::vgic::v40::{vpt_bytes, VPE_COUNT};
use crate::vgic::v41::{self, cmd, DirectSgi, Residency, SgiCfgs};
use crate::vgic5::GicInterface;
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};

/// vINTID bits of every vPE's pending table and the VM's configuration
/// table: the vITS's (`vgic::redist::LPI_ID_BITS`), so the same vPEs take
/// the partition's direct vLPIs (`its`, `vgic::v41::choose_vlpis`). 64 KiB
/// each either way (`v40::vpt_bytes`).
pub const VPT_BITS: u8 = crate::vgic::redist::LPI_ID_BITS;

/// The vPE ID of a vCPU pinned to CPU `pcpu`.
pub fn vpe_of(pcpu: usize) -> Option<u16> {
    u16::try_from(pcpu).ok().filter(|&v| v < VPE_COUNT)
}

/// The host's side: present when direct vSGIs are on.
pub struct VsgiHost {
    /// `v41::Residency`'s chip lock. Never taken here: the frame every
    /// load and put goes through is the CPU's own redistributor
    /// (`V41Hw::lockless`); it exists for a chip that is not, and counts.
    chip_lock: CountedLock<()>,
}

impl VsgiHost {
    /// On when the host offers direct vSGIs (`GicFound::direct_vsgi`:
    /// every redistributor VLPIS/RVPEID/VSGI, a GICv4.1 ITS) and an ITS
    /// that offers them came up (`ItsSet::vsgi_itses`: its GITS_TYPER
    /// Virtual, VMAPP, VSGI).
    pub fn choose(
        found: &crate::gichost::GicFound,
        its: Option<&crate::its::ItsSet>,
        stat: &'static LockStat,
    ) -> Option<VsgiHost> {
        (found.direct_vsgi && its.is_some_and(|s| !s.vsgi_itses().is_empty())).then(|| VsgiHost {
            chip_lock: CountedLock::new((), stat),
        })
    }
}

/// A partition's direct vSGIs: its vCPUs' vPEs and, while mapped, their
/// tables.
pub struct PartitionVsgi {
    pub direct: DirectSgi,
    /// EnableGrp0 [0], EnableGrp1 [1] of the guest's GICD_CTLR: written
    /// under its distributor's lock, read at load without it.
    groups: AtomicU8,
    /// GICD_CTLR.nASSGIreq of the guest: its SGIs go to the vPEs only
    /// while set (written under its distributor's lock, read on the send
    /// path without it).
    nassgireq: AtomicBool,
    /// The VM's configuration table while its vPEs are mapped (0: none)
    /// and each vCPU's pending table; changed only under the physical
    /// ITS's lock ([`map_partition`], [`release`]).
    vconf: AtomicU64,
    vpts: Vec<AtomicU64>,
}

impl PartitionVsgi {
    /// Direct vSGIs for a partition of `gic` interface whose vCPUs are
    /// pinned to `pcpus`, when the host has them (`host_direct`): not for
    /// a GICv5-interface partition, nor one with a CPU beyond the vPE IDs.
    pub fn for_partition(host_direct: bool, gic: GicInterface, pcpus: &[usize]) -> Option<Self> {
        if !host_direct || gic != GicInterface::V3 {
            return None;
        }
        let vpes = pcpus
            .iter()
            .map(|&c| vpe_of(c))
            .collect::<Option<Vec<u16>>>()?;
        Some(PartitionVsgi {
            direct: DirectSgi::new(vpes),
            groups: AtomicU8::new(0),
            nassgireq: AtomicBool::new(false),
            vconf: AtomicU64::new(0),
            vpts: pcpus.iter().map(|_| AtomicU64::new(0)).collect(),
        })
    }

    /// (EnableGrp0, EnableGrp1) as the guest last wrote them.
    pub fn groups(&self) -> (bool, bool) {
        let g = self.groups.load(Ordering::Acquire);
        (g & 1 != 0, g & 2 != 0)
    }
}

/// (EnableGrp0, EnableGrp1) as the bits [`PartitionVsgi::groups`] and
/// [`VsgiCpu`] keep them: Grp0 [0], Grp1 [1].
fn group_bits((g0, g1): (bool, bool)) -> u8 {
    u8::from(g0) | u8::from(g1) << 1
}

impl PartitionVsgi {
    /// Whether the guest's SGIs are sent to its vPEs (it set
    /// GICD_CTLR.nASSGIreq); otherwise they take the trapped path.
    /// Relaxed (a plain byte load on the send path): the flag publishes
    /// nothing the sender reads, and an SGI sent either way while the
    /// switch is under way is delivered from where it lands.
    #[inline(always)]
    pub fn direct(&self) -> bool {
        self.nassgireq.load(Ordering::Relaxed)
    }

    /// Whether the vPEs are mapped (tables held).
    pub fn mapped(&self) -> bool {
        self.vconf.load(Ordering::Acquire) != 0
    }

    /// Whether vCPU `vcpu`'s vPE is mapped this run (on every ITS with
    /// vSGIs: it has loaded once): a VMAPTI may name it.
    pub fn vpe_mapped(&self, vcpu: usize) -> bool {
        self.vpts
            .get(vcpu)
            .is_some_and(|t| t.load(Ordering::Acquire) != 0)
    }

    /// The VM's configuration table (VCONF) while the vPEs are mapped, 0
    /// otherwise: on a partition with direct vLPIs, the hypervisor's copy
    /// of the guest's property table (`its`).
    pub fn vconf(&self) -> u64 {
        self.vconf.load(Ordering::Acquire)
    }
}

/// What one CPU keeps of the vPE resident on it. Owned by its CPU.
#[derive(Clone, Debug, Default)]
pub struct VsgiCpu {
    pub residency: Residency,
    /// The group enables the resident vPE was loaded with.
    groups: u8,
    /// Whether the loaded vCPU's SGIs were switched to its vPE (the
    /// partition's nASSGIreq as this CPU last followed it, [`follow`]).
    direct: bool,
    /// The SGI configuration this CPU last sent for its vCPU's vPE, when
    /// it is not the reset one `map_partition` sent (None).
    sent: Option<SgiCfgs>,
}

/// vCPU `vcpu`'s SGI configuration out of reset (what a load starts its
/// redistributor with, `exit::load`).
fn reset_cfg(p: &Partition, vcpu: usize) -> SgiCfgs {
    let last = vcpu + 1 == p.vcpus.len();
    VRedist::new(vcpu, p.vcpus[vcpu].mpidr, last, 0).sgi_configs()
}

/// The ITS the vPE of a vCPU pinned to `pcpu` takes its SGI configuration
/// (VSGI, VSYNC) through: its CPU's own ([`ItsSet::local_its`]), so one
/// vPE's configuration always goes through one ITS's queue, in order.
fn cfg_its(set: &ItsSet, pcpu: usize) -> usize {
    set.local_its(pcpu)
}

/// Partition start, every vCPU off: the previous run's vPEs unmapped and
/// their tables freed, the guest's nASSGIreq cleared; each vCPU's is mapped afresh at its first load
/// ([`load`], on its own CPU, whose redistributor is then surely online).
pub fn restart(sys: &System, p: &Partition) {
    release(sys, p);
    // nASSGIreq resets to 0: the new guest asks again (or not).
    if let Some(v) = p.vsgi.as_ref() {
        p.dist.lock(LockPath::Management).reset_nassgireq();
        v.nassgireq.store(false, Ordering::Release);
    }
}

/// vCPU `vcpu`'s vPE VMAPP'd to its CPU's redistributor on every ITS
/// that offers vSGIs, with a fresh zeroed pending table (and the VM's
/// configuration table, if no vCPU made it yet), then its SGIs' reset
/// configuration. Once per run of the partition. On failure nothing of
/// this vCPU is kept and the error says why.
///
/// Locks, one ITS's at a time (`its::Held`; the CPU's RDbase on each
/// ITS is read without one, `ItsSet::rdbase_for`): the first ITS's (the
/// one whose VMAPP has Alloc;
/// the tables come from its queue's memory) for the check, the tables and
/// that VMAPP, which serialises two vCPUs making the VM's configuration
/// table; then each other ITS's for its VMAPP, then the configuration
/// ITS's for the VSGIs and VSYNC. Between them the vPE is mapped on some
/// ITSes only: an SGI written meanwhile to one it is not mapped on is
/// ignored, as one to a vCPU not yet loaded is dropped (only this vCPU's
/// own CPU maps it, at its first load, before it runs).
fn map_vcpu(
    sys: &System,
    v: &PartitionVsgi,
    p: &Partition,
    vcpu: usize,
) -> Result<(), &'static str> {
    let set = sys.its.as_ref().ok_or("no ITS")?;
    let itses = set.vsgi_itses();
    let &home = itses.first().ok_or("no ITS with vSGIs")?;
    let pcpu = p.vcpus[vcpu].pcpu;
    let vpe = v.direct.vpe(vcpu).ok_or("no vPE ID")?;
    let mut rds = Vec::with_capacity(itses.len());
    for &i in itses {
        let rd = set
            .rdbase_for(i, pcpu)
            .ok_or("its CPU's redistributor is not online on every ITS with vSGIs")?;
        rds.push((i, rd as u32));
    }
    let bytes = vpt_bytes(VPT_BITS);
    let mut held = Held::new(set);
    let queue = held.unit(home).ok_or("no ITS")?.queue_mut();
    if v.vpts[vcpu].load(Ordering::Acquire) != 0 {
        return Ok(());
    }
    let mut vconf = v.vconf.load(Ordering::Acquire);
    if vconf == 0 {
        vconf = queue
            .alloc_vpt(bytes)
            .ok_or("no memory for the VM's configuration table")?;
        v.vconf.store(vconf, Ordering::Release);
    }
    let vpt = queue
        .alloc_vpt(bytes)
        .ok_or("no memory for a pending table")?;
    let m = cmd::Vmapp {
        vpe,
        rd: 0,
        vpt,
        vpt_bits: VPT_BITS,
        vconf,
        alloc: true,
        doorbell: None,
    };
    let cmds = v41::map_vpe(&m, &rds, cfg_its(set, pcpu), &reset_cfg(p, vcpu));
    // The first ITS's VMAPP (with Alloc) under this hold, then the others.
    let first = cmds.iter().take_while(|c| c.0 == home).count();
    held.send_words(&cmds[..first]);
    v.vpts[vcpu].store(vpt, Ordering::Release);
    held.send_words(&cmds[first..]);
    Ok(())
}

/// Partition delete, every vCPU put: its vPEs unmapped, tables freed.
pub fn release(sys: &System, p: &Partition) {
    let (Some(_), Some(v), Some(set)) = (sys.vsgi.as_ref(), p.vsgi.as_ref(), sys.its.as_ref())
    else {
        return;
    };
    unmap(set, v);
}

/// Unmaps `v`'s mapped vPEs (VMAPP V = 0 on every ITS with vSGIs, the
/// first, with Alloc, last) and frees their tables (to the first ITS's
/// queue, under its lock, after its VMAPP); nothing when none are mapped.
/// One ITS's lock at a time (`its::Held`).
fn unmap(set: &ItsSet, v: &PartitionVsgi) {
    let itses = set.vsgi_itses();
    let Some(&home) = itses.first() else {
        return;
    };
    let vconf = v.vconf.swap(0, Ordering::AcqRel);
    let bytes = vpt_bytes(VPT_BITS);
    for (n, slot) in v.vpts.iter().enumerate() {
        let vpt = slot.swap(0, Ordering::AcqRel);
        if vpt == 0 {
            continue;
        }
        let cmds = v
            .direct
            .vpe(n)
            .map_or(Vec::new(), |vpe| v41::unmap_vpe(vpe, itses));
        // Every other ITS first; the first ITS's V = 0 with Alloc (last in
        // `cmds`), then the free, under one hold of its lock.
        let mut held = Held::new(set);
        held.send_words(&cmds);
        if let Some(unit) = held.unit(home) {
            unit.queue_mut().free_vpt(vpt, bytes);
        }
    }
    if vconf != 0 {
        if let Some(mut unit) = set.unit(home) {
            unit.queue_mut().free_vpt(vconf, bytes);
        }
    }
}

/// vCPU load on its own CPU: its vPE mapped at the first load of a run,
/// else its SGI configuration brought back to reset if this CPU had
/// changed it (a CPU_ON after the guest's own changes); then made
/// resident with the guest's group enables.
pub fn load(sys: &System, cpu: &mut VsgiCpu, hw: &mut impl Hw, p: &Partition, vcpu: usize) {
    let (Some(host), Some(v)) = (sys.vsgi.as_ref(), p.vsgi.as_ref()) else {
        return;
    };
    // Its list registers are empty: nothing to move whichever way it goes.
    cpu.direct = v.direct();
    let Some(vpe) = v.direct.vpe(vcpu) else {
        return;
    };
    if hw.v41().is_none() {
        // The platform gave this CPU no frame (its redistributor or its ITS
        // turned out not to do vSGIs): nothing is sent to the ITS for it,
        // and its sends keep the mailbox path.
        return fault(
            p,
            hw,
            FaultKind::Dropped,
            format_args!("vCPU {vcpu}: this CPU has no GICv4.1 VLPI frame: no vPE, SGIs to it are not delivered"),
        );
    }
    if v.vpts[vcpu].load(Ordering::Acquire) == 0 {
        // The first load of this run: the mapping sends the reset
        // configuration.
        cpu.sent = None;
        if let Err(why) = map_vcpu(sys, v, p, vcpu) {
            return fault(
                p,
                hw,
                FaultKind::Dropped,
                format_args!("vCPU {vcpu}: no vPE ({why}): its SGIs are not delivered"),
            );
        }
    } else if let Some(sent) = cpu.sent.take() {
        send_reconfigure(sys, p.vcpus[vcpu].pcpu, vpe, &sent, &reset_cfg(p, vcpu));
    }
    make_resident(host, v, cpu, hw, p, vcpu, vpe);
}

fn make_resident(
    host: &VsgiHost,
    v: &PartitionVsgi,
    cpu: &mut VsgiCpu,
    hw: &mut impl Hw,
    p: &Partition,
    vcpu: usize,
    vpe: u16,
) {
    let (g0, g1) = v.groups();
    let why = match hw.v41() {
        None => String::from("this CPU has no GICv4.1 VLPI frame: its SGIs stay pending"),
        Some(frame) => {
            // A vPE still resident from an earlier run goes first.
            let _ = cpu.residency.put(frame, &host.chip_lock);
            match cpu.residency.load(frame, &host.chip_lock, vpe, g0, g1) {
                Ok(()) => {
                    cpu.groups = group_bits((g0, g1));
                    return;
                }
                Err(e) => alloc::format!("vPE {vpe} not made resident: {e:?}"),
            }
        }
    };
    fault(
        p,
        hw,
        FaultKind::Dropped,
        format_args!("vCPU {vcpu}: {why}"),
    );
}

/// vCPU put: its vPE leaves this CPU's redistributor (Valid = 0, Dirty
/// waited for); vSGIs sent from here on stay pending in the GIC.
pub fn put(sys: &System, cpu: &mut VsgiCpu, hw: &mut impl Hw, p: &Partition, vcpu: usize) {
    let Some(host) = sys.vsgi.as_ref() else {
        return;
    };
    if cpu.residency.resident().is_none() {
        return;
    }
    let stuck = match hw.v41() {
        Some(frame) => cpu.residency.put(frame, &host.chip_lock).is_err(),
        None => false,
    };
    if stuck {
        hw.log(format_args!(
            "partition {}: vCPU {vcpu}'s vPE did not leave this CPU (GICR_VPENDBASER.Dirty stuck)",
            p.name
        ));
    }
}

/// The guest of vCPU `vcpu` wrote its redistributor: SGI configuration
/// `before` became `after`; what changed goes to its vPE (VSGI + VSYNC,
/// under the physical ITS's lock; nothing when no SGI changed).
pub fn reconfigure(
    sys: &System,
    cpu: &mut VsgiCpu,
    p: &Partition,
    vcpu: usize,
    before: &SgiCfgs,
    after: &SgiCfgs,
) {
    let Some(vpe) = p.vsgi.as_ref().and_then(|v| v.direct.vpe(vcpu)) else {
        return;
    };
    if send_reconfigure(sys, p.vcpus[vcpu].pcpu, vpe, before, after) {
        cpu.sent = Some(*after);
    }
}

/// The changed SGI configuration of the vPE of a vCPU pinned to `pcpu`,
/// sent through its configuration ITS ([`cfg_its`]) under that ITS's lock
/// alone. True when something was sent.
fn send_reconfigure(
    sys: &System,
    pcpu: usize,
    vpe: u16,
    before: &SgiCfgs,
    after: &SgiCfgs,
) -> bool {
    let cmds = v41::reconfigure(vpe, before, after);
    if cmds.is_empty() {
        return false;
    }
    if let Some(mut unit) = sys
        .its
        .as_ref()
        .and_then(|set| set.unit(cfg_its(set, pcpu)))
    {
        for c in cmds {
            unit.queue_mut().send_words(c);
        }
    }
    true
}

/// The guest wrote GICD_CTLR, which now reads `ctlr` (under its
/// distributor's lock): when its group enables or its nASSGIreq changed,
/// every other vCPU's CPU is kicked to follow at its mailbox drain
/// (`exit`'s vSGI resync: [`regroup`], [`follow`]). Returns whether they
/// changed, for this CPU to follow at once.
pub fn ctlr_written(
    sys: &System,
    cpu: &crate::percpu::CpuState,
    hw: &mut impl Hw,
    p: &Partition,
    ctlr: u32,
) -> bool {
    let Some(v) = p.vsgi.as_ref() else {
        return false;
    };
    let g = group_bits(v41::group_enables(ctlr));
    let regrouped = v.groups.swap(g, Ordering::AcqRel) != g;
    let req = ctlr & crate::vgic::dist::CTLR_NASSGIREQ != 0;
    let switched = v.nassgireq.swap(req, Ordering::AcqRel) != req;
    if !regrouped && !switched {
        return false;
    }
    let me = cpu.index;
    for s in p.vcpus.iter().filter(|s| s.pcpu != me) {
        sys.kick(hw, me, s.pcpu);
    }
    true
}

/// On a vCPU's own CPU, loaded: its SGIs follow the partition's
/// nASSGIreq. Turning on, the SGIs pending in its list registers (the
/// trapped path's) are taken out and made pending on its vPE
/// (`pending`, one GITS_SGIR each) by the caller. Turning off, nothing
/// moves: the vPE stays mapped and resident at every load, so the vSGIs it
/// holds are still delivered by it; new SGIs take the trapped path. The
/// vPE's SGI configuration needs no re-send: [`reconfigure`] keeps it in
/// step with the guest's redistributor whether or not nASSGIreq is set.
/// Returns whether the SGIs pending in the list registers must move.
pub fn follow(cpu: &mut VsgiCpu, p: &Partition) -> bool {
    let Some(v) = p.vsgi.as_ref() else {
        return false;
    };
    let on = v.direct();
    if cpu.direct == on {
        return false;
    }
    cpu.direct = on;
    on
}

/// vCPU `vcpu`'s SGIs `intids` (a bit each) made pending on its vPE from
/// its own CPU (GITS_SGIR of this CPU's ITS, `ItsSet::local_its`).
pub fn pend(hw: &mut impl Hw, p: &Partition, vcpu: usize, intids: u16) {
    let (Some(v), Some(frame)) = (p.vsgi.as_ref(), hw.v41()) else {
        return;
    };
    let Some(vpe) = v.direct.vpe(vcpu) else {
        return;
    };
    for intid in crate::bits::ones(u64::from(intids)) {
        frame.write_sgir(v41::sgir(vpe, intid as u8));
    }
}

/// On a vCPU's own CPU: its resident vPE re-loaded (put, then load) when
/// the guest's group enables differ from those it was loaded with.
pub fn regroup(sys: &System, cpu: &mut VsgiCpu, hw: &mut impl Hw, p: &Partition, vcpu: usize) {
    let (Some(host), Some(v)) = (sys.vsgi.as_ref(), p.vsgi.as_ref()) else {
        return;
    };
    let Some(vpe) = cpu.residency.resident() else {
        return;
    };
    if cpu.groups == group_bits(v.groups()) {
        return;
    }
    put(sys, cpu, hw, p, vcpu);
    make_resident(host, v, cpu, hw, p, vcpu, vpe);
}
