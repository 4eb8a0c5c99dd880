//! A GICv5 host, the platform half: every IRS the description names
//! brought up at boot (IRSEN), the first with the LPI IST, each with a
//! vIRS VM table, in host RAM taken before partitions are placed
//! (`vgic5::IrsLayout` decides the sizes, as the GICv3 ITS takes its
//! region in `its.rs`), each CPU's PE set up on the IRS that serves it,
//! the boot CPU's interface probed and the host checked
//! (`vgic5::check_host`, naming what is missing), the host view made from
//! the registers (`GicFound::from_v5`), each IRS behind its own counted
//! lock ([`IRSES`]; `vgic5::irses` says why one per IRS) and the core's
//! routes (`Layout::routes`, `vgic5::irses::IrsRoutes`: which IRS an
//! SPI, a CPU or a vIRS step goes to), an SPI operation sent to its IRS
//! ([`spi`]), and each CPU's own GICv5 half (`Gicv5Cpu`: PPIs, its 16 IPI
//! LPIs, its doorbell range) from its own bring-up, and once the
//! partitions are built every partition's SPI checked against the IRSes'
//! ranges and the vIRS ([`init_virs`]: each IRS's VM table, the core's
//! plan of every GICv5 partition's VM split by IRS and applied under each
//! one's lock), and at run time what the core decides about the vIRS: a
//! doorbell re-armed on its CPU's IRS ([`rearm_doorbell`],
//! `exit::doorbell`), software error records taken from every IRS
//! ([`take_swerr`], `System::virs_poll`), a destroyed partition's VM and
//! SPIs released on their IRSes ([`virs_apply`], `vgic5::release_virs`),
//! and every GICv5 ITS the description names ([`init_its`]: a linear
//! device table each, `drivers::gicv5_its`, each given to the core as an
//! `its::ItsQueue` through `its5::V5Its`, the core's `ItsSet` keeping
//! each behind its own lock; every CPU online on them, [`its_cpu_online`]).
//! Nothing here runs
//! on a GICv3 host. No emulator runs EL2 on a GICv5, so this is built and
//! linted, not booted (docs/GICV5.md).

use crate::hvlog;
use alloc::boxed::Box;
use alloc::vec::Vec;
use pinfold_drivers::gicv5::hw::{IrsFrame, PhysMem, SysRegs};
use pinfold_drivers::gicv5::{lpi_id_bits_of, spi_range_of, Gicv5Cpu, Gicv5Irs, GICV5_CAPS};
use pinfold_drivers::gicv5_its::hw::ItsFrame;
use pinfold_drivers::gicv5_its::Gicv5Its;
use pinfold_hv::dtb::HostInfo;
use pinfold_hv::exit::SpiOp;
use pinfold_hv::irqchip::{PerCpuIrqChip, PpiStateChange, SharedIrqChip};
use pinfold_hv::its::HostIts;
use pinfold_hv::its5::{typer, Its5Hw, Its5Op, V5Its};
use pinfold_hv::lockstat::{CountedLock, LockPath};
use pinfold_hv::memmap::FreeMemory;
use pinfold_hv::vgic::pits::ITT_ALIGN;
use pinfold_hv::vgic5::irses::{IrsDown, IrsRoutes};
use pinfold_hv::vgic5::{
    check_host, vm_id_bits_for, IrsLayout, PpiPlan, PpiSet, UntrappedInsns, VPpiContext, VirsOp,
};
use pinfold_vboard::{same_cpu, PPI_HYP_TIMER, PPI_MAINTENANCE};

/// What every CPU's bring-up needs: the LPI layout and each CPU's
/// (MPIDR, IAFFID) in the core's CPU order (an IPI's LPI is found by that
/// index, `vgic5::ipi_lpi`).
struct Layout {
    lpis: IrsLayout,
    cpus: &'static [(u64, u16)],
    /// Physical address of each IRS's vIRS VM table (zeroed), by IRS,
    /// given to it by [`init_virs`].
    vmts: Vec<u64>,
    /// Each IRS's config frame, by IRS (for messages).
    frames: Vec<u64>,
    /// Which IRS each CPU, SPI and vIRS step goes to (the core decides).
    routes: IrsRoutes,
}

static LAYOUT: spin::Once<Layout> = spin::Once::new();

/// One IRS's driver.
type Irs = Gicv5Irs<IrsFrame, SysRegs>;

/// Every IRS, in description order, each behind its own counted lock:
/// an operation on one (select-then-act on its own frame) never waits for
/// another's (`vgic5::irses`).
pub static IRSES: spin::Once<Vec<CountedLock<Irs>>> = spin::Once::new();

/// IRS `i` under its lock, counted against `path`; `None` on a GICv3
/// host, before bring-up or for an IRS there is not.
fn with_irs<T>(i: usize, path: LockPath, f: impl FnOnce(&mut Irs) -> T) -> Option<T> {
    let irs = IRSES.get()?.get(i)?;
    let mut g = irs.lock(path);
    Some(f(&mut g))
}

/// An SPI operation the core decided (`Hw::spi`), sent to the IRS whose
/// SPI range holds it (`IrsRoutes::of_intid`) under that IRS's lock only;
/// an SPI no IRS has (refused at boot for every partition's own,
/// `System::check_irs_spis`) is logged and dropped.
pub fn spi(path: LockPath, op: SpiOp) {
    let intid = match op {
        SpiOp::Enable { intid, .. } | SpiOp::Route { intid, .. } | SpiOp::SetEdge { intid, .. } => {
            intid
        }
    };
    let Some(i) = LAYOUT.get().and_then(|l| l.routes.of_intid(intid)) else {
        hvlog!("gicv5: interrupt {intid} is no IRS's SPI: {op:?} dropped");
        return;
    };
    with_irs(i, path, |irs| match op {
        SpiOp::Enable { intid, enable } => irs.spi_enable(intid, enable),
        SpiOp::Route { intid, mpidr } => irs.spi_route(intid, mpidr),
        SpiOp::SetEdge { intid, edge } => irs.spi_set_edge(intid, edge),
    });
}

/// Apply `ops` as the core's routes split them, each IRS's share under
/// its own lock; `cpu_of(vm, vpe)` is the CPU a vPE's vCPU is pinned to.
fn apply_split(
    ops: &[VirsOp],
    cpu_of: impl Fn(u16, u16) -> Option<usize>,
) -> Result<(), alloc::string::String> {
    use alloc::format;
    let Some(l) = LAYOUT.get() else {
        return Err("the IRSes are not up".into());
    };
    let split = l
        .routes
        .split_virs(ops, cpu_of)
        .map_err(|op| format!("no IRS takes the vIRS step {op:?}"))?;
    for (i, ops) in split.iter().enumerate().filter(|(_, o)| !o.is_empty()) {
        let frame = l.frames.get(i).copied().unwrap_or(0);
        match with_irs(i, LockPath::PhysDist, |irs| {
            irs.apply_virs(&mut PhysMem, ops)
        }) {
            Some(Ok(())) => {}
            Some(Err(e)) => {
                return Err(format!(
                    "the IRS at {frame:#x} refused the vIRS steps: {e:?}"
                ))
            }
            None => return Err(format!("IRS {i} is not up")),
        }
    }
    Ok(())
}

/// The partitions (indices) whose VM the boot put in the vIRS
/// (`vgic5::VirsBoot::vms`), each with whether its destroy took it out
/// again (`virs_apply`); read lock-free by every vCPU load.
static VIRS_VMS: spin::Once<Vec<(usize, core::sync::atomic::AtomicBool)>> = spin::Once::new();

/// After the partitions are built, before any starts: every partition's
/// SPIs checked against the IRSes' ranges (`System::check_irs_spis`: one
/// no IRS has stops boot naming the partition and plan field), then, when
/// any partition has the GICv5 interface, each IRS gets its VM table
/// (`Gicv5Irs::init_virs`, with the VM ID bits the highest such partition
/// needs, `vgic5::vm_id_bits_for`), the core plans every GICv5
/// partition's VM (`System::plan_virs`: VM = partition index, vPE =
/// vCPU, doorbells, its own SPIs, the VM's tables from free RAM), the
/// tables are zeroed and the plan applied, split by IRS
/// (`IrsRoutes::split_virs`: each vPE on its CPU's IRS, each SPI on its
/// own, the VM on every IRS), each share under that IRS's counted lock.
/// `Err` is the reason boot stops. Nothing here runs on a GICv3 host.
pub fn init_virs(sys: &pinfold_hv::system::System) -> Result<(), alloc::string::String> {
    use alloc::format;
    use alloc::string::ToString;
    let (Some(l), Some(irses)) = (LAYOUT.get(), IRSES.get()) else {
        return Err("the IRSes are not up".into());
    };
    sys.check_irs_spis(&l.routes).map_err(|r| r.to_string())?;
    let members = sys.virs_members();
    let Some(vm_id_bits) = vm_id_bits_for(&members) else {
        hvlog!("gicv5: no gicv5 partition: the vIRS is not set up");
        return Ok(());
    };
    // What every IRS offers: the VM ID bits asked of each, the fewest vPE
    // ID bits any has, the system's SPIs.
    let mut caps: Option<pinfold_hv::vgic5::VirsCaps> = None;
    for (i, irs) in irses.iter().enumerate() {
        let c = irs
            .lock(LockPath::PhysDist)
            .init_virs(l.vmts[i], vm_id_bits)
            .map_err(|e| {
                format!(
                    "the vIRS of the IRS at {:#x} did not come up: {e:?}",
                    l.frames[i]
                )
            })?;
        caps = Some(caps.map_or(c, |k| pinfold_hv::vgic5::VirsCaps {
            vpe_id_bits: k.vpe_id_bits.min(c.vpe_id_bits),
            spis: k.spis.min(c.spis),
            ..k
        }));
    }
    let Some(caps) = caps else {
        return Err("no IRS".into());
    };
    let boot = sys
        .plan_virs(&members, &l.lpis, &caps)
        .map_err(|r| r.to_string())?;
    for &(base, bytes) in &boot.memory {
        // SAFETY: taken from free RAM by `plan_virs` for these tables
        // (identity mapped, normal memory at EL2); nothing else uses it.
        unsafe { core::ptr::write_bytes(base as *mut u8, 0, bytes as usize) };
        crate::arch::clean_dcache_range(base, bytes);
    }
    apply_split(&boot.ops, |vm, vpe| {
        pinfold_hv::vgic5::irses::vpe_cpu(&members, vm, vpe)
    })?;
    hvlog!(
        "gicv5: vIRS on {} IRSes: VMs for partitions {:?} ({} steps)",
        irses.len(),
        boot.vms,
        boot.ops.len()
    );
    VIRS_VMS.call_once(|| {
        boot.vms
            .into_iter()
            .map(|i| (i, core::sync::atomic::AtomicBool::new(false)))
            .collect()
    });
    Ok(())
}

/// The CPU whose doorbell `lpi` is (`IrsLayout::doorbell_lpis`: one per
/// CPU, by the core's CPU index), for `exit::doorbell`.
pub fn doorbell_cpu(lpi: u32) -> Option<usize> {
    let range = LAYOUT.get()?.lpis.doorbell_lpis();
    range.contains(&lpi).then(|| (lpi - range.start) as usize)
}

/// Re-arm the doorbell of vPE `vpe` of VM `vm`, CPU `cpu`'s doorbell LPI,
/// as the core decided (`vgic5::DoorbellAction::Wake`), on the IRS that
/// serves `cpu` (where the vPE is) under its lock: an IRS has one
/// VPE_SELR.
pub fn rearm_doorbell(vm: u16, vpe: u16, cpu: usize) {
    let Some((lpi, irs)) = LAYOUT
        .get()
        .and_then(|l| Some((l.lpis.doorbell_lpi(cpu)?, l.routes.of_cpu(cpu)?)))
    else {
        return;
    };
    if let Some(Err(e)) = with_irs(irs, LockPath::PhysDist, |irs| {
        irs.rearm_doorbell(vm, vpe, lpi)
    }) {
        hvlog!("gicv5: doorbell of VM {vm} vPE {vpe} not re-armed: {e:?}");
    }
}

/// An IRS software error record (`Gicv5Irs::take_swerr`), for the core's
/// `System::virs_poll`: the first IRS in description order that has one,
/// each asked under its own lock; `None` once no IRS has any.
pub fn take_swerr() -> Option<u64> {
    let count = IRSES.get().map_or(0, Vec::len);
    (0..count).find_map(|i| with_irs(i, LockPath::PhysDist, |irs| irs.take_swerr()).flatten())
}

/// Whether partition `index`'s VM is in the vIRS (its guest's GIC
/// instructions then need no trap, `vgic5::UntrappedInsns::for_vcpu`).
/// Only the partitions the boot planned: one created at run time has no
/// VM.
pub fn in_virs(index: usize) -> bool {
    use core::sync::atomic::Ordering;
    VIRS_VMS.get().is_some_and(|v| {
        v.iter()
            .any(|(i, gone)| *i == index && !gone.load(Ordering::Acquire))
    })
}

/// Apply the core's run-time vIRS steps for VM `vm` (a destroyed boot
/// partition's `vgic5::release_virs`: each SPI released on its IRS, the VM
/// unmapped on every IRS, `IrsRoutes::split_virs`) under each IRS's lock,
/// only while the boot's vIRS still has that VM; afterwards it has not.
pub fn virs_apply(vm: u16, ops: &[pinfold_hv::vgic5::VirsOp]) {
    use core::sync::atomic::Ordering;
    let Some(entry) = VIRS_VMS
        .get()
        .and_then(|v| v.iter().find(|(i, _)| *i == usize::from(vm)))
    else {
        return;
    };
    if entry.1.swap(true, Ordering::AcqRel) {
        return;
    }
    // A release names no vPE.
    match apply_split(ops, |_, _| None) {
        Ok(()) => hvlog!("gicv5: VM {vm} and its SPIs released from the vIRS"),
        Err(e) => hvlog!("gicv5: VM {vm} not released from the vIRS: {e}"),
    }
}

/// Bring the GICv5 up for `cpu_count` CPUs, the boot CPU being `index`:
/// every IRS the description names (the first with the LPI IST, each
/// with a VM table), each CPU's PE on the IRS that serves it, the boot
/// CPU probed, the host checked; the IRSes kept in [`IRSES`]. `Err` is
/// the reason boot stops (printed by the caller): an IRS that does not
/// come up is named with the CPUs and SPIs it would have served.
pub fn init(
    host: &mut HostInfo,
    free: &mut FreeMemory,
    cpu_count: usize,
    index: usize,
) -> Result<(), alloc::string::String> {
    use alloc::format;
    let Some(v5) = host.gic.v5.as_ref() else {
        return Err("no GICv5 in the host description".into());
    };
    // Every CPU's IAFFID in the core's order (the description checked that
    // each has one).
    let cpus: Vec<(u64, u16)> = host
        .cpus
        .iter()
        .take(cpu_count)
        .map(|&m| {
            let iaffid = v5
                .cpus()
                .find(|&(c, _)| same_cpu(c, m))
                .map_or(0, |(_, i)| i);
            (m, iaffid)
        })
        .collect();
    let cpus: &'static [(u64, u16)] = Box::leak(cpus.into_boxed_slice());
    // The MSI pool is sized to what the IST's owner can hold.
    let have_bits = v5
        .irs
        .get(IrsRoutes::IST_OWNER)
        .map_or(0, |d| lpi_id_bits_of(&mut IrsFrame(d.config.0 as usize)));
    let lpis = IrsLayout::for_cpus_within(cpu_count, have_bits);
    let Some(region) = crate::its::take_table(free, lpis.region, lpis.align) else {
        return Err(format!(
            "no {} KiB of RAM for the IRS's IST and VM table",
            lpis.region >> 10
        ));
    };
    // The first IRS's VM table follows the IST; each other IRS has its own.
    let mut vmts = alloc::vec![region + lpis.vmt_offset];
    let vmt_block = lpis.vmt_bytes.next_multiple_of(0x1000);
    for _ in 1..v5.irs.len() {
        let Some(vmt) = crate::its::take_table(free, vmt_block, 0x1000) else {
            return Err(format!(
                "no {} KiB of RAM for an IRS's VM table",
                vmt_block >> 10
            ));
        };
        vmts.push(vmt);
    }
    let frames: Vec<u64> = v5.irs.iter().map(|d| d.config.0).collect();
    let mut irses: Vec<Irs> = Vec::new();
    let mut spis = Vec::new();
    for (n, d) in v5.irs.iter().enumerate() {
        let frame = d.config.0;
        let range = spi_range_of(&mut IrsFrame(frame as usize));
        let ist = (n == IrsRoutes::IST_OWNER).then_some((region, lpis.lpi_id_bits));
        let irs = Gicv5Irs::init(IrsFrame(frame as usize), SysRegs, cpus, ist)
            .map_err(|e| format!("{}", IrsDown::new(d, range.clone(), format_args!("{e:?}"))))?;
        hvlog!(
            "gicv5: IRS at {frame:#x}: SPIs {range:?}, {} CPUs{}",
            d.cpus.len(),
            if ist.is_some() { ", the LPI IST" } else { "" }
        );
        spis.push(range);
        irses.push(irs);
    }
    let described = &host.cpus[..cpu_count.min(host.cpus.len())];
    let routes = IrsRoutes::from_description(&v5.irs, described, &spis);
    // Each CPU's PE on the IRS that serves it.
    for (cpu, &(mpidr, iaffid)) in cpus.iter().enumerate() {
        let Some(i) = routes.of_cpu(cpu) else {
            return Err(format!("CPU {cpu} (MPIDR {mpidr:#x}) is served by no IRS"));
        };
        irses[i].register_pe(iaffid).map_err(|e| {
            format!(
                "the IRS at {:#x} did not take CPU {cpu}'s PE (MPIDR {mpidr:#x}, IAFFID {iaffid}): {e:?}",
                frames[i]
            )
        })?;
    }
    let Some(owner) = irses.get_mut(IrsRoutes::IST_OWNER) else {
        return Err("no IRS in the host description".into());
    };
    // The boot CPU's interface, only to probe its PPIs and GCIE_LEGACY
    // (its own bring-up, `init_cpu`, sets it up again).
    let mut probe = Gicv5Cpu::init_this_cpu(SysRegs, index as u32, lpis.ipi_base, cpus, GICV5_CAPS);
    probe.probe(&mut owner.host);
    check_host(&owner.host).map_err(|m| format!("{m}"))?;
    host.gic.found = pinfold_hv::gichost::GicFound::from_v5(&host.gic, &owner.host);
    hvlog!(
        "gicv5: {} IRSes; IST of {} LPIs at {region:#x} on the first (IPIs from {}, doorbells {:?}), VM tables for {} VMs",
        irses.len(),
        1u64 << lpis.lpi_id_bits,
        lpis.ipi_base,
        lpis.doorbell_lpis(),
        1u64 << lpis.vm_id_bits
    );
    LAYOUT.call_once(|| Layout {
        lpis,
        cpus,
        vmts,
        frames,
        routes,
    });
    IRSES.call_once(|| {
        irses
            .into_iter()
            .map(|i| CountedLock::new(i, &crate::LOCKSTAT))
            .collect()
    });
    Ok(())
}

/// This CPU's GICv5 half, from its own bring-up: PPIs off, its IPI LPIs
/// targeted here, the doorbell range known, the EL2 timer and the
/// maintenance PPI on (the mailbox SGI is one of its IPI LPIs, already
/// enabled).
pub fn init_cpu(local: &mut crate::percpu::CpuLocal) {
    let Some(l) = LAYOUT.get() else {
        return;
    };
    let index = local.state.state.index as u32;
    let mut chip = Gicv5Cpu::init_this_cpu(SysRegs, index, l.lpis.ipi_base, l.cpus, GICV5_CAPS);
    chip.set_doorbells(l.lpis.doorbell_lpis());
    chip.set_msi_lpis(l.lpis.msi_base..l.lpis.msi_base + l.lpis.msi_lpis);
    chip.apply_ppi(PpiStateChange::Enable(PPI_MAINTENANCE, true));
    chip.apply_ppi(PpiStateChange::Enable(PPI_HYP_TIMER, true));
    local.hw.v5 = Some(chip);
}

/// The chip-wide lock of the slow per-CPU path (`irqchip::
/// change_percpu_state`), taken only by a chip without the lockless
/// capability; the GICv5's declares it, so vCPU load and put take none.
static CHIP_LOCK: CountedLock<()> = CountedLock::new((), &crate::LOCKSTAT);

/// Load a GICv5-interface partition's vCPU (`vgic5::VcpuSwitch::Gicv5`)
/// on this CPU: the driver's `vcpu_load` with its PPI plan (the timers and
/// the PMU's PPI as DVI, their host copies masked, every other implemented
/// PPI hidden: its ICC_PPI_* accesses trapped, emulated by the core through
/// `V5Hw::vppi_read`/`vppi_write`), a fresh virtual PPI state (the vCPU is (re)entering at its
/// entry point), the GIC instructions it executes untrapped (`insns`, as
/// ICH_HFGITR_EL2), VM `vm`, vPE `vpe`. Only this CPU's registers.
pub fn vcpu_load(
    local: &mut crate::percpu::CpuLocal,
    plan: PpiPlan,
    insns: UntrappedInsns,
    vm: u16,
    vpe: u16,
) {
    let implemented = local
        .sys
        .host
        .gic
        .found
        .v5
        .map_or(PpiSet::EMPTY, |h| h.ppis);
    let ctx = VPpiContext::default();
    if let Some(chip) = local.hw.v5.as_mut() {
        chip.vcpu_load(&CHIP_LOCK, &ctx, &plan, implemented, insns, vpe, vm);
    }
    local.v5_vcpu = Some((plan, ctx));
}

/// Load a `gicv3` partition's vCPU (`vgic5::VcpuSwitch::ListRegisters`)
/// on this GICv5 host (nothing without this CPU's GICv5 half): the
/// driver sets ICH_VCTLR_EL2.V3, synchronised before the caller enables
/// and restores the GICv3 virtual interface (ICH_HCR_EL2, ICH_VMCR_EL2,
/// whose behaviour follows V3).
pub fn load_gicv3_compatible(local: &mut crate::percpu::CpuLocal) {
    if let Some(chip) = local.hw.v5.as_mut() {
        chip.load_gicv3_compatible();
        // SAFETY: a context synchronisation barrier; no memory access.
        unsafe { core::arch::asm!("isb", options(nostack)) };
    }
}

/// Put that vCPU: ICH_VCTLR_EL2.V3 cleared after the GICv3 interface is
/// switched off.
pub fn put_gicv3_compatible(local: &mut crate::percpu::CpuLocal) {
    if let Some(chip) = local.hw.v5.as_mut() {
        chip.put_gicv3_compatible();
    }
}

/// Put it: the driver's `vcpu_put` reads its virtual PPI state out and
/// makes it non-resident; the host copies of its DVI PPIs stay masked. The
/// state read is then dropped, not kept: a pinned vCPU is put only when it
/// stops or parks (PSCI CPU_OFF), and every later load is a fresh entry
/// at an entry point ([`vcpu_load`]). Time-sliced vCPUs would need it kept.
pub fn vcpu_put(local: &mut crate::percpu::CpuLocal) {
    let Some((plan, mut ctx)) = local.v5_vcpu.take() else {
        return;
    };
    if let Some(chip) = local.hw.v5.as_mut() {
        chip.vcpu_put(&CHIP_LOCK, &mut ctx, &plan, false);
    }
}

/// The most DeviceID bits a GICv5 ITS's linear device table is given (a
/// 512 KiB table); an ITS offering more is used for the first 2^16
/// DeviceIDs (`MsiRouting` refuses a DeviceID beyond them).
const ITS_DEVICE_BITS: u8 = 16;

/// One GICv5 ITS as the core's `its5::V5Its` applies to it: the driver,
/// table writes through the identity map, an LPI's target through this
/// CPU's GIC instructions, ITTs from the EL2 heap.
struct ItsHw(Gicv5Its<ItsFrame>);

impl Its5Hw for ItsHw {
    fn apply(&mut self, op: &Its5Op) -> bool {
        match self.0.apply(&mut PhysMem, &mut SysRegs, op) {
            Ok(()) => true,
            Err(e) => {
                hvlog!("gicv5: ITS: {op:?}: {e:?}");
                false
            }
        }
    }
    fn alloc_itt(&mut self, bytes: usize) -> Option<u64> {
        let at = crate::heap::alloc_zeroed(bytes, ITT_ALIGN)?;
        crate::arch::clean_dcache_range(at.0, bytes as u64);
        Some(at.0)
    }
    fn free_itt(&mut self, pa: u64, bytes: usize) {
        crate::heap::free(pinfold_hv::addr::PhysAddr(pa), bytes, ITT_ALIGN);
    }
}

/// Every GICv5 ITS of the host description brought up (after [`init`]:
/// their events' LPIs are the first IRS's MSI pool): a zeroed linear
/// device table from `free`, the driver's `init`, the core's `V5Its`
/// over it. An ITS that does not come up is said on the log and left out;
/// None when none did (no partition gets a vITS). Whether a partition's
/// devices can reach a translate frame is the core's (`its::msi_path_to`).
pub fn init_its(host: &HostInfo, free: &mut FreeMemory, cpus: usize) -> Option<HostIts> {
    let l = LAYOUT.get()?;
    if host.gic.its.is_empty() {
        return None;
    }
    let iaffids: Vec<u16> = l.cpus.iter().map(|&(_, iaffid)| iaffid).collect();
    let units = host
        .gic
        .its
        .iter()
        .enumerate()
        .map(|(i, &(base, _))| {
            let mut frame = ItsFrame(base as usize);
            let (have, _) = Gicv5Its::id_bits(&mut frame);
            let bits = have.min(ITS_DEVICE_BITS);
            let bytes = Gicv5Its::<ItsFrame>::table_bytes(bits).next_multiple_of(0x1_0000);
            let Some(dt) = crate::its::take_table(free, bytes, 0x1_0000) else {
                hvlog!("gicv5: ITS {i}: no {} KiB for its device table", bytes >> 10);
                return None;
            };
            match Gicv5Its::init(frame, dt, bits) {
                Ok(its) => {
                    let t = typer(its.device_bits(), its.event_bits());
                    hvlog!(
                        "gicv5: ITS {i} at {base:#x}: DeviceID bits {}, EventID bits {}",
                        t.device_bits,
                        t.id_bits
                    );
                    let q = V5Its::new(ItsHw(its), t, l.lpis, iaffids.clone());
                    Some((t, Box::new(q) as Box<dyn pinfold_hv::its::ItsQueue>))
                }
                Err(e) => {
                    hvlog!("gicv5: ITS {i} at {base:#x} did not come up ({e:?}): its devices get no MSI");
                    None
                }
            }
        })
        .collect();
    let its = HostIts::several(units, cpus).map(|i| i.with_lpis(l.lpis.msi_lpis));
    if its.is_none() {
        hvlog!("gicv5: no ITS came up: MSI stays off");
    }
    its
}

/// CPU `index` takes the GICv5 ITSes' events (its LPIs are targeted by
/// IAFFID, no collection is mapped: the core's `ItsSet` only learns the
/// CPU is there, ICID = its index).
pub fn its_cpu_online(sys: &pinfold_hv::system::System, index: usize) {
    if LAYOUT.get().is_some() {
        sys.its_cpu_online(index, index as u16, 0);
    }
}
