//! The vCPU run loop on a pinned CPU, the platform half: the exception
//! entries read the syndrome registers, decode them (`pinfold_hv::trap`),
//! hand the exit to the core (`pinfold_hv::exit`) and apply the `Next` it
//! returns; vCPU load writes the virtualisation registers the core's load
//! decided on. Nothing here decides what a trap means.

use crate::arch::{self, regs};
use crate::percpu::{this_cpu, CpuLocal};
use pinfold_hv::exit::{self, Boot, GuestRegs, Next};
use pinfold_hv::stage2;
use pinfold_hv::trap;

/// HCR_EL2 for guests: VM, SWIO, FMO, IMO, AMO, FB, BSU=inner shareable,
/// TID3 (sanitise ID registers), TSC (trap SMC), TACR, TSW (set/way
/// maintenance), RW (EL1 is AArch64), APK/API (pointer auth keys and
/// instructions untrapped: the vCPU owns its CPU, nothing to switch).
/// WFI/WFE are not trapped: the CPU is dedicated, so a guest WFI may sleep
/// the CPU natively; any interrupt (routed to EL2 or virtual) wakes it.
const HCR_GUEST: u64 = (1 << 0)
    | (1 << 1)
    | (1 << 3)
    | (1 << 4)
    | (1 << 5)
    | (1 << 9)
    | (1 << 10)
    | (1 << 18)
    | (1 << 19)
    | (1 << 21)
    | (1 << 22)
    | (1 << 31)
    | (1 << 40)
    | (1 << 41);

/// HCR_EL2 on a CPU with no vCPU loaded: physical IRQ/FIQ/SError are routed
/// to EL2. Without IMO an interrupt targets EL1, which is never taken while
/// the CPU runs at EL2: the idle loop would wake from WFI and never see it.
pub const HCR_HOST: u64 = (1 << 3) | (1 << 4) | (1 << 5) | (1 << 31);

/// SPSR for guest entry: EL1h with D, A, I, F masked.
const SPSR_EL1H_MASKED: u64 = 0x3c5;
/// SCTLR_EL1 at reset: RES1 bits, MMU and caches off.
const SCTLR_EL1_RESET: u64 = 0x30d0_0800;

fn pa_range_bits() -> u8 {
    match regs::id_aa64mmfr0() & 0xf {
        0 => 32,
        1 => 36,
        2 => 40,
        3 => 42,
        4 => 44,
        5 => 48,
        _ => 52,
    }
}

/// Load `boot.id` here (the core decides, we write the registers) and enter
/// it at `boot.entry` with x0 = `boot.x0`.
fn boot_vcpu(local: &mut CpuLocal, boot: Boot) -> ! {
    let sys = local.sys;
    local.hw.set_virtual_cpu_interface(true);
    let ctx = exit::load(sys, &mut local.state, &mut local.hw, boot.id);
    regs::set_vtcr_el2(stage2::vtcr_el2(pa_range_bits()));
    regs::set_vttbr_el2(stage2::vttbr_el2(ctx.vmid, ctx.stage2_root));
    arch::tlbi_current_vmid();
    regs::set_hcr_el2(HCR_GUEST);
    regs::set_vpidr_el2(regs::midr_el1());
    regs::set_vmpidr_el2(ctx.vmpidr);
    regs::set_mdcr_el2(ctx.mdcr_el2);
    // EL1 may read the physical counter and use the EL1 physical timer.
    regs::set_cnthctl_el2(0b11);
    regs::set_cntvoff_el2(0);
    // CPTR_EL2: RES1 bits; FP/SIMD not trapped (EL2 is softfloat and never
    // touches the guest's FP registers).
    regs::set_cptr_el2(0x33ff);
    regs::set_sctlr_el1(SCTLR_EL1_RESET);
    regs::set_cntv_ctl_el0(0);
    regs::set_cntp_ctl_el0(0);
    regs::set_cntkctl_el1(0);
    regs::set_cpacr_el1(0);
    regs::set_vbar_el1(0);
    regs::set_mdscr_el1(0);
    regs::set_tcr_el1(0);
    regs::set_ttbr0_el1(0);
    regs::set_ttbr1_el1(0);
    regs::set_contextidr_el1(0);
    regs::set_sp_el1(0);
    regs::set_sp_el0(0);
    arch::set_vgic_reset_state();
    let frame = GuestRegs {
        x: {
            let mut x = [0; 31];
            x[0] = boot.x0;
            x
        },
        elr: boot.entry,
        spsr: SPSR_EL1H_MASKED,
        _pad: 0,
    };
    arch::enter_guest(&frame, local.state.index)
}

/// Put the loaded vCPU: timers silenced here, the rest decided by the core.
fn put(local: &mut CpuLocal) {
    if local.state.loaded.is_none() {
        return;
    }
    regs::set_cntv_ctl_el0(0);
    regs::set_cntp_ctl_el0(0);
    exit::put(local.sys, &mut local.state, &mut local.hw);
    local.hw.set_virtual_cpu_interface(false);
    regs::set_hcr_el2(HCR_HOST);
}

/// Put the vCPU on this CPU and go idle.
fn park(local: &mut CpuLocal) -> ! {
    put(local);
    let index = local.state.index;
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
            if let Some(p) = sys.partitions.get(partition) {
                sys.finish_restart(p, &mut local.hw, local.state.index);
            }
            park(local)
        }
    }
}

/// The CPU's main loop when it has no running vCPU: wait for work posted
/// by other CPUs (CPU_ON for our vCPU, partition start/stop).
pub extern "C" fn idle() -> ! {
    loop {
        {
            // SAFETY: a per-CPU main loop; the reference is dropped before
            // the WFI window in which an interrupt may be taken.
            let local = unsafe { this_cpu() };
            if let Some(boot) = exit::idle_work(local.sys, &mut local.state, &mut local.hw) {
                boot_vcpu(local, boot);
            }
        }
        arch::wait_for_interrupt();
    }
}

#[no_mangle]
extern "C" fn pinfold_guest_sync(frame: &mut GuestRegs) {
    // SAFETY: an exception entry, interrupts masked.
    let local = unsafe { this_cpu() };
    let exit = trap::decode(regs::esr_el2(), regs::far_el2(), regs::hpfar_el2());
    let next = exit::handle_exit(local.sys, &mut local.state, &mut local.hw, frame, exit);
    apply(local, next);
}

#[no_mangle]
extern "C" fn pinfold_guest_serror(_frame: &mut GuestRegs) {
    // SAFETY: an exception entry, interrupts masked.
    let local = unsafe { this_cpu() };
    let next = exit::handle_serror(local.sys, &mut local.state, &mut local.hw, regs::esr_el2());
    apply(local, next);
    park(local);
}

/// Process requests after an interrupt taken from the guest.
#[no_mangle]
extern "C" fn pinfold_after_guest_irq() {
    // SAFETY: an exception entry, interrupts masked.
    let local = unsafe { this_cpu() };
    let next = exit::after_guest_irq(&mut local.state);
    apply(local, next);
}
