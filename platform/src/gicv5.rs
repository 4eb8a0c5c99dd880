//! A GICv5 host, the platform half: the IRS brought up at boot with its
//! LPI IST (and the vIRS's VM table after it) in host RAM taken before
//! partitions are placed (`vgic5::IrsLayout` decides the sizes, as the
//! GICv3 ITS takes its region in `its.rs`), the boot CPU's interface
//! probed and the host checked (`vgic5::check_host`, naming what is
//! missing), the host view made from the registers (`GicFound::from_v5`),
//! the IRS put behind the same counted lock as a GICv3 distributor
//! (`hw::DIST`), and each CPU's own GICv5 half (`Gicv5Cpu`: PPIs, its 16
//! IPI LPIs, its doorbell range) from its own bring-up, and once the
//! partitions are built the vIRS ([`init_virs`]: the VM table, the core's
//! plan of every GICv5 partition's VM applied under the IRS's lock), and
//! at run time what the core decides about the vIRS: a doorbell re-armed
//! ([`rearm_doorbell`], `exit::doorbell`), software error records taken
//! ([`take_swerr`], `System::virs_poll`), a destroyed partition's VM and
//! SPIs released ([`virs_apply`], `vgic5::release_virs`), all under that
//! lock.
//! Nothing here runs
//! on a GICv3 host. No emulator runs EL2 on a GICv5, so this is built and
//! linted, not booted (docs/GICV5.md).

use crate::hvlog;
use alloc::boxed::Box;
use alloc::vec::Vec;
use pinfold_drivers::gicv5::hw::{IrsFrame, PhysMem, SysRegs};
use pinfold_drivers::gicv5::{Gicv5Cpu, Gicv5Irs, GICV5_CAPS};
use pinfold_hv::dtb::HostInfo;
use pinfold_hv::irqchip::{PerCpuIrqChip, PpiStateChange};
use pinfold_hv::lockstat::{CountedLock, LockPath};
use pinfold_hv::memmap::FreeMemory;
use pinfold_hv::vgic5::{
    check_host, vm_id_bits_for, IrsLayout, PpiPlan, PpiSet, UntrappedInsns, VPpiContext,
};
use pinfold_vboard::{same_cpu, PPI_HYP_TIMER, PPI_MAINTENANCE};

/// What every CPU's bring-up needs: the LPI layout and each CPU's
/// (MPIDR, IAFFID) in the core's CPU order (an IPI's LPI is found by that
/// index, `vgic5::ipi_lpi`).
struct Layout {
    lpis: IrsLayout,
    cpus: &'static [(u64, u16)],
    /// Physical address of the vIRS's VM table (zeroed), given to the IRS
    /// by [`init_virs`].
    vmt: u64,
}

static LAYOUT: spin::Once<Layout> = spin::Once::new();

/// The partitions (indices) whose VM the boot put in the vIRS
/// (`vgic5::VirsBoot::vms`), each with whether its destroy took it out
/// again (`virs_apply`); read lock-free by every vCPU load.
static VIRS_VMS: spin::Once<Vec<(usize, core::sync::atomic::AtomicBool)>> = spin::Once::new();

/// After the partitions are built, before any starts, when any partition
/// has the GICv5 interface: the IRS gets its VM table (`Gicv5Irs::
/// init_virs`, with the VM ID bits the highest such partition needs,
/// `vgic5::vm_id_bits_for`), the core plans every GICv5 partition's VM
/// (`System::plan_virs`: VM = partition index, vPE = vCPU, doorbells, its
/// own SPIs, the VM's tables from free RAM), the tables are zeroed and the
/// plan applied (`apply_virs`), all under the IRS's own counted lock
/// (`hw::DIST`). `Err` is the reason boot stops: a refusal names the
/// partition and the plan field. Nothing here runs on a GICv3 host.
pub fn init_virs(sys: &pinfold_hv::system::System) -> Result<(), alloc::string::String> {
    use alloc::format;
    use alloc::string::ToString;
    let Some(l) = LAYOUT.get() else {
        return Err("the IRS is not up".into());
    };
    let Some(dist) = crate::hw::DIST.get() else {
        return Err("the IRS is not up".into());
    };
    let mut chip = dist.lock(LockPath::PhysDist);
    let Some(irs) = chip
        .as_any_mut()
        .and_then(|c| c.downcast_mut::<Gicv5Irs<IrsFrame, SysRegs>>())
    else {
        return Err("the interrupt chip is not a GICv5 IRS".into());
    };
    let members = sys.virs_members();
    let Some(vm_id_bits) = vm_id_bits_for(&members) else {
        hvlog!("gicv5: no gicv5 partition: the vIRS is not set up");
        return Ok(());
    };
    let caps = irs
        .init_virs(l.vmt, vm_id_bits)
        .map_err(|e| format!("the IRS's vIRS did not come up: {e:?}"))?;
    let boot = sys
        .plan_virs(&members, &l.lpis, &caps)
        .map_err(|r| r.to_string())?;
    for &(base, bytes) in &boot.memory {
        // SAFETY: taken from free RAM by `plan_virs` for these tables
        // (identity mapped, normal memory at EL2); nothing else uses it.
        unsafe { core::ptr::write_bytes(base as *mut u8, 0, bytes as usize) };
        crate::arch::clean_dcache_range(base, bytes);
    }
    irs.apply_virs(&mut PhysMem, &boot.ops)
        .map_err(|e| format!("the IRS refused the vIRS plan: {e:?}"))?;
    hvlog!(
        "gicv5: vIRS: VMs for partitions {:?} ({} steps)",
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

/// The IRS behind its counted lock (`hw::DIST`), for the vIRS's run-time
/// steps; `None` on a GICv3 host or before bring-up.
fn with_irs<T>(f: impl FnOnce(&mut Gicv5Irs<IrsFrame, SysRegs>) -> T) -> Option<T> {
    let dist = crate::hw::DIST.get()?;
    let mut chip = dist.lock(LockPath::PhysDist);
    let irs = chip
        .as_any_mut()?
        .downcast_mut::<Gicv5Irs<IrsFrame, SysRegs>>()?;
    Some(f(irs))
}

/// The CPU whose doorbell `lpi` is (`IrsLayout::doorbell_lpis`: one per
/// CPU, by the core's CPU index), for `exit::doorbell`.
pub fn doorbell_cpu(lpi: u32) -> Option<usize> {
    let range = LAYOUT.get()?.lpis.doorbell_lpis();
    range.contains(&lpi).then(|| (lpi - range.start) as usize)
}

/// Re-arm the doorbell of vPE `vpe` of VM `vm`, CPU `cpu`'s doorbell LPI,
/// as the core decided (`vgic5::DoorbellAction::Wake`), under the IRS's
/// lock: the shared IRS has one VPE_SELR.
pub fn rearm_doorbell(vm: u16, vpe: u16, cpu: usize) {
    let Some(lpi) = LAYOUT.get().and_then(|l| l.lpis.doorbell_lpi(cpu)) else {
        return;
    };
    if let Some(Err(e)) = with_irs(|irs| irs.rearm_doorbell(vm, vpe, lpi)) {
        hvlog!("gicv5: doorbell of VM {vm} vPE {vpe} not re-armed: {e:?}");
    }
}

/// The oldest IRS software error record (`Gicv5Irs::take_swerr`), for the
/// core's `System::virs_poll`, under the IRS's lock.
pub fn take_swerr() -> Option<u64> {
    with_irs(|irs| irs.take_swerr()).flatten()
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
/// partition's `vgic5::release_virs`) under the IRS's lock, only while the
/// boot's vIRS still has that VM; afterwards it has not.
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
    match with_irs(|irs| irs.apply_virs(&mut PhysMem, ops)) {
        Some(Ok(())) => hvlog!("gicv5: VM {vm} and its SPIs released from the vIRS"),
        Some(Err(e)) => hvlog!("gicv5: VM {vm} not released from the vIRS: {e:?}"),
        None => {}
    }
}

/// Bring the GICv5 up for `cpu_count` CPUs, the boot CPU being `index`:
/// the IRS with its IST, the boot CPU probed, the host checked. Returns
/// the IRS for `hw::DIST` and what was found for the host view; `Err` is
/// the reason boot stops (printed by the caller).
pub fn init(
    host: &mut HostInfo,
    free: &mut FreeMemory,
    cpu_count: usize,
    index: usize,
) -> Result<Gicv5Irs<IrsFrame, SysRegs>, alloc::string::String> {
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
    let lpis = IrsLayout::for_cpus(cpu_count);
    let Some(region) = free.take_top(lpis.region, lpis.align) else {
        return Err(format!(
            "no {} KiB of RAM for the IRS's IST and VM table",
            lpis.region >> 10
        ));
    };
    // SAFETY: `region` was just taken from free RAM (identity mapped,
    // normal memory at EL2); nothing else uses it.
    unsafe { core::ptr::write_bytes(region as *mut u8, 0, lpis.region as usize) };
    crate::arch::clean_dcache_range(region, lpis.region);
    // Every IRS serves its own CPUs; Pinfold drives the first (one IRS is
    // what the driver and the model know).
    let frame = v5.irs[0].config.0;
    if v5.irs.len() > 1 {
        hvlog!(
            "gicv5: {} IRSes described; only the first ({frame:#x}) is driven",
            v5.irs.len()
        );
    }
    let mut irs = Gicv5Irs::init(
        IrsFrame(frame as usize),
        SysRegs,
        cpus,
        region,
        lpis.lpi_id_bits,
    )
    .map_err(|e| format!("the IRS at {frame:#x} did not come up: {e:?}"))?;
    // The boot CPU's interface, only to probe its PPIs and GCIE_LEGACY
    // (its own bring-up, `init_cpu`, sets it up again).
    let mut probe = Gicv5Cpu::init_this_cpu(SysRegs, index as u32, lpis.ipi_base, cpus, GICV5_CAPS);
    probe.probe(&mut irs.host);
    check_host(&irs.host).map_err(|m| format!("{m}"))?;
    host.gic.found = pinfold_hv::gichost::GicFound::from_v5(&host.gic, &irs.host);
    hvlog!(
        "gicv5: IRS at {frame:#x}: IST of {} LPIs at {region:#x} (IPIs from {}, doorbells {:?}), VM table for {} VMs",
        1u64 << lpis.lpi_id_bits,
        lpis.ipi_base,
        lpis.doorbell_lpis(),
        1u64 << lpis.vm_id_bits
    );
    LAYOUT.call_once(|| Layout {
        lpis,
        cpus,
        vmt: region + lpis.vmt_offset,
    });
    Ok(irs)
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
/// PPI hidden), a fresh virtual PPI state (the vCPU is (re)entering at its
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

/// Load a `gicv3` partition's vCPU on this GICv5 host
/// (`vgic5::VcpuSwitch::ListRegisters { gcie_legacy: true }`): the
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
