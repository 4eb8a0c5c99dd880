//! The vCPU run loop on a pinned CPU, the platform half: the exception
//! entries read the syndrome registers, decode them (`pinfold_hv::trap`),
//! hand the exit to the core (`pinfold_hv::exit`) and apply the `Next` it
//! returns; vCPU load writes the virtualisation registers the core's load
//! decided on. Nothing here decides what a trap means.
//!
//! On a GICv5 host the synchronous entry is [`pinfold_guest_sync_v5`] (its
//! call site patched at boot) and the cold paths (load, put, idle, restart,
//! SError) hand the core `hw::V5Hw` (`with_hw!`: one branch there, none on
//! the GICv3 exit paths). A GICv5-interface partition's vCPU is loaded and
//! put by the GICv5 driver (`gicv5::vcpu_load`/`vcpu_put`: DVI for its
//! timers and PMU PPI, no lock shared between CPUs) instead of the list
//! registers' ICH_HCR_EL2 (`vgic5::VcpuSwitch`; docs/GICV5.md); a `gicv3`
//! partition's vCPU on a GICv5 host also gets ICH_VCTLR_EL2.V3 (the
//! GICv3-compatible interface) before its GICv3 state and loses it on put.

use crate::arch;
use crate::arch::regs::{self, Fields, Writeable};
use crate::percpu::{this_cpu, CpuLocal};
use aarch64_cpu::registers::{
    CNTHCTL_EL2, CNTKCTL_EL1, CNTP_CTL_EL0, CNTVOFF_EL2, CNTV_CTL_EL0, CONTEXTIDR_EL1, CPACR_EL1,
    CPTR_EL2, HCR_EL2, ID_AA64MMFR0_EL1, MDCR_EL2, MDSCR_EL1, SCTLR_EL1, SPSR_EL2, SP_EL0, SP_EL1,
    TCR_EL1, TTBR0_EL1, TTBR1_EL1, VBAR_EL1, VMPIDR_EL2, VTCR_EL2, VTTBR_EL2,
};
use pinfold_hv::exit::{self, Boot, GuestRegs, Next};
use pinfold_hv::stage2;
use pinfold_hv::vgic5::VcpuSwitch;

/// HCR_EL2 for guests: VM, SWIO, FMO, IMO, AMO, FB, BSU=inner shareable,
/// TID3 (sanitise ID registers), TSC (trap SMC), TACR, TSW (set/way
/// maintenance), RW (EL1 is AArch64), APK/API (pointer auth keys and
/// instructions untrapped: the vCPU owns its CPU, nothing to switch).
/// WFI/WFE are not trapped: the CPU is dedicated, so a guest WFI may sleep
/// the CPU natively; any interrupt (routed to EL2 or virtual) wakes it.
pub const HCR_GUEST: Fields<HCR_EL2::Register> = regs::fields(&[
    HCR_EL2::VM::Enable,
    HCR_EL2::SWIO::SET,
    HCR_EL2::FMO::EnableVirtualFIQ,
    HCR_EL2::IMO::EnableVirtualIRQ,
    HCR_EL2::AMO::SET,
    HCR_EL2::FB::SET,
    HCR_EL2::BSU::InnerShareable,
    HCR_EL2::TID3::SET,
    HCR_EL2::TSC::EnableTrapEl1SmcToEl2,
    HCR_EL2::TACR::SET,
    HCR_EL2::TSW::SET,
    HCR_EL2::RW::EL1IsAarch64,
    HCR_EL2::APK::DisableTrapPointerAuthKeyRegsToEl2,
    HCR_EL2::API::DisableTrapPointerAuthInstToEl2,
]);

/// HCR_EL2 on a CPU with no vCPU loaded: physical IRQ/FIQ/SError are routed
/// to EL2. Without IMO an interrupt targets EL1, which is never taken while
/// the CPU runs at EL2: the idle loop would wake from WFI and never see it.
pub const HCR_HOST: Fields<HCR_EL2::Register> = regs::fields(&[
    HCR_EL2::FMO::SET,
    HCR_EL2::IMO::SET,
    HCR_EL2::AMO::SET,
    HCR_EL2::RW::EL1IsAarch64,
]);

/// SPSR for guest entry: EL1h with D, A, I, F masked.
const SPSR_EL1H_MASKED: Fields<SPSR_EL2::Register> = regs::fields(&[
    SPSR_EL2::D::Masked,
    SPSR_EL2::A::Masked,
    SPSR_EL2::I::Masked,
    SPSR_EL2::F::Masked,
    SPSR_EL2::M::EL1h,
]);

/// SCTLR_EL1 at reset: MMU and caches off; the bits that are RES1 in
/// Armv8.0 set, which later features named for the Armv8.0 behaviour.
/// aarch64-cpu 11 defines none of these fields.
const SCTLR_EL1_RESET: Fields<SCTLR_EL1::Register> = regs::fields(&[
    // EOS (FEAT_ExS): exception return is context synchronising.
    regs::local_field(11, 1, 1),
    // TSCXT (FEAT_CSV2_2): EL0 access to SCXTNUM_EL0 traps.
    regs::local_field(20, 1, 1),
    // EIS (FEAT_ExS): exception entry is context synchronising.
    regs::local_field(22, 1, 1),
    // SPAN (FEAT_PAN): PSTATE.PAN unchanged on exception entry.
    regs::local_field(23, 1, 1),
    // nTLSMD (FEAT_LSMAOC): multiple load/store to Device memory not trapped.
    regs::local_field(28, 1, 1),
    // LSMAOE (FEAT_LSMAOC): ordering of multiple load/store kept.
    regs::local_field(29, 1, 1),
]);

/// CNTHCTL_EL2 (E2H = 0): EL1 may read the physical counter and use the
/// EL1 physical timer.
const CNTHCTL_GUEST: Fields<CNTHCTL_EL2::Register> =
    regs::fields(&[CNTHCTL_EL2::EL1PCTEN::SET, CNTHCTL_EL2::EL1PCEN::SET]);

/// CPTR_EL2 (E2H = 0): FP/SIMD not trapped (TFP clear: EL2 is softfloat and
/// never touches the guest's FP registers); TZ and TSM set, so SVE and SME
/// trap (both bits are RES1 where the feature is absent); the rest RES1.
/// aarch64-cpu 11 defines only CPTR_EL2.TAM.
const CPTR_GUEST: Fields<CPTR_EL2::Register> = regs::fields(&[
    // RES1 [7:0].
    regs::local_field(0, 8, 0xff),
    // TZ: trap SVE.
    regs::local_field(8, 1, 1),
    // RES1 [9].
    regs::local_field(9, 1, 1),
    // TSM: trap SME.
    regs::local_field(12, 1, 1),
    // RES1 [13].
    regs::local_field(13, 1, 1),
]);

// The values these registers had when they were written as raw numbers
// (before the typed fields): a field change must change these on purpose.
const _: () = assert!(HCR_GUEST.value == 0x0000_0300_806c_063b);
const _: () = assert!(HCR_HOST.value == 0x8000_0038);
const _: () = assert!(SPSR_EL1H_MASKED.value == 0x3c5);
const _: () = assert!(SCTLR_EL1_RESET.value == 0x30d0_0800);
const _: () = assert!(CNTHCTL_GUEST.value == 0b11);
const _: () = assert!(CPTR_GUEST.value == 0x33ff);

pub(crate) fn pa_range_bits() -> u8 {
    use ID_AA64MMFR0_EL1::PARange::Value as PARange;
    match regs::pa_range() {
        Some(PARange::Bits_32) => 32,
        Some(PARange::Bits_36) => 36,
        Some(PARange::Bits_40) => 40,
        Some(PARange::Bits_42) => 42,
        Some(PARange::Bits_44) => 44,
        Some(PARange::Bits_48) => 48,
        Some(PARange::Bits_52) | None => 52,
    }
}

/// Load `boot.id` here (the core decides, we write the registers) and enter
/// it at `boot.entry` with x0 = `boot.x0`.
fn boot_vcpu(local: &mut CpuLocal, boot: Boot) -> ! {
    let sys = local.sys;
    // Which virtual interface: the list registers (GICv3, or a GICv5's
    // GICv3-compatible one), or the GICv5's own, loaded by its driver
    // after the core's load (`vgic5::VcpuSwitch`).
    // Whether the boot put its VM in the vIRS (`gicv5::init_virs`): if not,
    // a `gicv5` guest's GIC instructions that name an interrupt trap
    // (`vgic5::UntrappedInsns::for_vcpu`).
    let virs = crate::gicv5::in_virs(boot.id.partition);
    let switch = VcpuSwitch::for_vcpu(
        boot.partition.gic,
        boot.partition.plan.pmu,
        virs,
        boot.id.partition,
        boot.id.vcpu,
    );
    if let VcpuSwitch::ListRegisters = switch {
        // On a GICv5 host that is the GICv3-compatible interface (a GICv3
        // host has no GICv5 chip: nothing happens), as `put` has it.
        crate::gicv5::load_gicv3_compatible(local);
        local.hw.set_virtual_cpu_interface(true);
    }
    let ctx = with_hw!(local, |hw| exit::load(sys, &mut local.state, hw, &boot));
    if let VcpuSwitch::Gicv5 {
        plan,
        vm,
        vpe,
        insns,
    } = switch
    {
        crate::gicv5::vcpu_load(local, plan, insns, vm, vpe);
    }
    // The core decides VTCR_EL2 (stage-2 geometry) and VTTBR_EL2 (VMID and
    // root); here they are only written.
    VTCR_EL2.set(stage2::vtcr_el2(pa_range_bits()));
    VTTBR_EL2.set(stage2::vttbr_el2(ctx.vmid, ctx.stage2_root));
    arch::tlbi_current_vmid();
    HCR_EL2.write(HCR_GUEST);
    regs::set_vpidr_el2(regs::midr_el1());
    VMPIDR_EL2.set(ctx.vmpidr);
    MDCR_EL2.set(ctx.mdcr_el2);
    CNTHCTL_EL2.write(CNTHCTL_GUEST);
    CNTVOFF_EL2.set(0);
    CPTR_EL2.write(CPTR_GUEST);
    SCTLR_EL1.write(SCTLR_EL1_RESET);
    // The rest of the EL1 state starts at zero (timers off, no traps
    // configured, no translation, no vectors).
    CNTV_CTL_EL0.set(0);
    CNTP_CTL_EL0.set(0);
    CNTKCTL_EL1.set(0);
    CPACR_EL1.set(0);
    VBAR_EL1.set(0);
    MDSCR_EL1.set(0);
    TCR_EL1.set(0);
    TTBR0_EL1.set(0);
    TTBR1_EL1.set(0);
    CONTEXTIDR_EL1.set(0);
    SP_EL1.set(0);
    SP_EL0.set(0);
    if let VcpuSwitch::ListRegisters = switch {
        arch::set_vgic_reset_state();
    }
    let frame = GuestRegs {
        x: {
            let mut x = [0; 31];
            x[0] = boot.x0;
            x
        },
        elr: boot.entry,
        spsr: SPSR_EL1H_MASKED.value,
        _pad: 0,
    };
    // enter_guest does not return: the request's reference to the
    // partition goes now (the loaded vCPU holds its own until put).
    drop(boot);
    arch::enter_guest(&frame, local.state.state.index)
}

/// Put the loaded vCPU: timers silenced here, the rest decided by the core.
fn put(local: &mut CpuLocal) {
    if local.state.state.loaded.is_none() {
        return;
    }
    CNTV_CTL_EL0.set(0);
    CNTP_CTL_EL0.set(0);
    with_hw!(local, |hw| exit::put(local.sys, &mut local.state, hw));
    if local.v5_vcpu.is_some() {
        crate::gicv5::vcpu_put(local);
    } else {
        local.hw.set_virtual_cpu_interface(false);
        // On a GICv5 host that was the GICv3-compatible interface (a GICv3
        // host has no GICv5 chip: nothing happens).
        crate::gicv5::put_gicv3_compatible(local);
    }
    HCR_EL2.write(HCR_HOST);
}

/// Put the vCPU on this CPU and go idle.
fn park(local: &mut CpuLocal) -> ! {
    put(local);
    let index = local.state.state.index;
    arch::reset_stack_and_call(index, idle)
}

/// Apply the core's decision after an exit. Resuming needs nothing: the
/// vectors restore the frame and return.
#[inline(always)]
fn apply(local: &mut CpuLocal, next: Next) {
    if next != Next::Resume {
        apply_other(local, next);
    }
}

#[inline(never)]
fn apply_other(local: &mut CpuLocal, next: Next) {
    match next {
        Next::Resume => {}
        Next::Inject(e) => regs::write_el1_exception_state(e.esr, e.far, e.elr, e.spsr),
        Next::Park | Next::Stopped => park(local),
        Next::Restart(partition) => {
            put(local);
            let sys = local.sys;
            if let Some(p) = sys.partition(partition) {
                let index = local.state.state.index;
                with_hw!(local, |hw| sys.finish_restart(&p, hw, index));
            }
            park(local)
        }
    }
}

/// The CPU's main loop when it has no running vCPU: wait for work posted
/// by other CPUs (CPU_ON for our vCPU, partition start/stop), zeroing
/// freed RAM in 2 MiB steps while there is any.
pub extern "C" fn idle() -> ! {
    loop {
        {
            // SAFETY: a per-CPU main loop; the reference is dropped before
            // the WFI window in which an interrupt may be taken.
            let local = unsafe { this_cpu() };
            let sys = local.sys;
            if let Some(boot) = with_hw!(local, |hw| exit::idle_work(sys, &mut local.state, hw)) {
                boot_vcpu(local, boot);
            }
            // Freed RAM to zero: one 2 MiB step, then look at requests
            // again rather than wait (hv `scrub`).
            if with_hw!(local, |hw| sys.idle_scrub(hw)) {
                continue;
            }
        }
        arch::wait_for_interrupt();
    }
}

#[no_mangle]
extern "C" fn pinfold_guest_sync(frame: &mut GuestRegs) {
    // SAFETY: an exception entry, interrupts masked.
    let local = unsafe { this_cpu() };
    let syndrome = (regs::esr_el2(), regs::far_el2(), regs::hpfar_el2());
    let next = exit::handle_sync(local.sys, &mut local.state, &mut local.hw, frame, syndrome);
    apply(local, next);
}

/// The synchronous entry on a GICv5 host (vectors.S's call site patched
/// to it at boot, `irq::install_root_handler`): the same as
/// [`pinfold_guest_sync`] with the GICv5 CPU interface.
#[no_mangle]
pub extern "C" fn pinfold_guest_sync_v5(frame: &mut GuestRegs) {
    // SAFETY: an exception entry, interrupts masked.
    let local = unsafe { this_cpu() };
    let syndrome = (regs::esr_el2(), regs::far_el2(), regs::hpfar_el2());
    let mut hw = crate::hw::V5Hw(&mut local.hw);
    let next = exit::handle_sync(local.sys, &mut local.state, &mut hw, frame, syndrome);
    apply(local, next);
}

#[no_mangle]
extern "C" fn pinfold_guest_serror(_frame: &mut GuestRegs) {
    // SAFETY: an exception entry, interrupts masked.
    let local = unsafe { this_cpu() };
    let sys = local.sys;
    let esr = regs::esr_el2();
    let next = with_hw!(local, |hw| exit::handle_serror(
        sys,
        &mut local.state,
        hw,
        esr
    ));
    apply(local, next);
    park(local);
}

/// Process requests after an interrupt taken from the guest (the guest
/// entry of the root IRQ handler calls it last).
#[inline(always)]
pub fn after_guest_irq(local: &mut CpuLocal) {
    let next = exit::after_guest_irq(&mut local.state);
    apply(local, next);
}
