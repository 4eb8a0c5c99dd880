//! The vCPU run loop on a pinned CPU: load/put (no lock shared between CPUs
//! on either), guest entry, and the handling of every trap. Arch code here
//! decodes (through `pinfold_hv::trap`) and applies; the decisions are the
//! portable crate's.

use crate::arch::regs;
use crate::arch::{self, GuestFrame};
use crate::irq::{self, HwLrs, Post};
use crate::partition::{self, Partition, STATE_RUNNING, STATE_STOPPED, STATE_STOPPING};
use crate::percpu::{self, this_cpu, CpuLocal, VcpuId, PUBLIC, REQ_CPU_ON, REQ_START, REQ_STOP};
use crate::{hvlog, LOCKSTAT};
use core::sync::atomic::Ordering;
use pinfold_drivers::gicv3::{sysreg as gic, GICV3_CAPS};
use pinfold_hv::layout::*;
use pinfold_hv::lockstat::{change_percpu_state, HotPath, PpiStateChange};
use pinfold_hv::psci::{self, Call, PowerState};
use pinfold_hv::stage2;
use pinfold_hv::sysreg::sanitise_id_reg;
use pinfold_hv::trap::{self, Exit, InjectKind, MmioAccess, SysRegId};
use pinfold_hv::vgic::redist::{RedistAction, VRedist};
use pinfold_hv::vgic::sgi;

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

/// The per-CPU PPIs a pinned vCPU owns: its EL1 virtual and physical timers.
pub const PASSTHROUGH_PPIS: u32 = (1 << PPI_VTIMER) | (1 << PPI_PTIMER);

fn ppi_change(cpu: &mut CpuLocal, path: HotPath, change: PpiStateChange) {
    let redist = &mut cpu.redist;
    change_percpu_state(
        GICV3_CAPS,
        &LOCKSTAT,
        path,
        change,
        |c| {
            if let Some(r) = redist.as_mut() {
                match c {
                    PpiStateChange::Enable(i, on) => r.set_enable(i, on),
                    PpiStateChange::Active(i, on) => r.set_active(i, on),
                    PpiStateChange::Pending(i, on) => r.set_pending(i, on),
                }
            }
        },
        |_| {
            // A chip without the lockless capability would take its
            // chip-wide lock here; GICv3 never gets here.
        },
    );
}

/// Load the vCPU pinned to this CPU: stage 2, traps, a reset EL1, the
/// virtual CPU interface and the timer PPIs. Touches only this CPU's own
/// registers and redistributor: no lock shared between CPUs.
pub fn load(cpu: &mut CpuLocal, p: &Partition, v: usize) {
    let pa_bits = match regs::id_aa64mmfr0() & 0xf {
        0 => 32,
        1 => 36,
        2 => 40,
        3 => 42,
        4 => 44,
        5 => 48,
        _ => 52,
    };
    regs::set_vtcr_el2(stage2::vtcr_el2(pa_bits));
    regs::set_vttbr_el2(stage2::vttbr_el2(p.vmid, p.stage2_root));
    arch::tlbi_current_vmid();
    regs::set_hcr_el2(HCR_GUEST);
    regs::set_vpidr_el2(regs::midr_el1());
    regs::set_vmpidr_el2(p.vcpus[v].mpidr);
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

    cpu.lrs.clear(&mut HwLrs);
    gic::set_ich_vmcr_el2(0);
    gic::set_ich_ap0r0_el2(0);
    gic::set_ich_ap1r0_el2(0);
    gic::set_ich_hcr_el2(1);
    for ppi in [PPI_VTIMER, PPI_PTIMER] {
        ppi_change(cpu, HotPath::VcpuLoad, PpiStateChange::Enable(ppi, false));
        ppi_change(cpu, HotPath::VcpuLoad, PpiStateChange::Active(ppi, false));
    }
    PUBLIC[cpu.index].reset_counters();
    // Drain stale posts from a previous run of this vCPU.
    irq::drain_posts(cpu.index);
    let last = v + 1 == p.vcpus.len();
    cpu.vredist = Some(VRedist::new(v, p.vcpus[v].mpidr, last, PASSTHROUGH_PPIS));
    cpu.vcpu = Some(VcpuId {
        partition: p.index,
        vcpu: v,
    });
    cpu.loaded = true;
}

/// Put the vCPU: forget its interrupts, silence its timers and give the
/// timer PPIs back inactive and disabled. Own-CPU state only, no lock.
pub fn put(cpu: &mut CpuLocal) {
    if !cpu.loaded {
        return;
    }
    regs::set_cntv_ctl_el0(0);
    regs::set_cntp_ctl_el0(0);
    // HW-linked interrupts still in the list registers keep their physical
    // interrupt active; nobody would deactivate them once the LRs are gone.
    cpu.lrs.clear_reporting_hw(&mut HwLrs, &mut |pintid| {
        if pintid >= 32 {
            gic::deactivate(pintid)
        }
    });
    gic::set_ich_hcr_el2(0);
    for ppi in [PPI_VTIMER, PPI_PTIMER] {
        ppi_change(cpu, HotPath::VcpuPut, PpiStateChange::Enable(ppi, false));
        ppi_change(cpu, HotPath::VcpuPut, PpiStateChange::Active(ppi, false));
    }
    cpu.vredist = None;
    cpu.loaded = false;
    if let Some(id) = cpu.vcpu {
        if let Some(p) = partition::get(id.partition) {
            p.vcpus[id.vcpu].power.set_off();
        }
    }
}

/// Load vCPU `v` of `p` here and enter it at `entry` with x0 = `x0`.
pub fn boot_vcpu(p: &Partition, v: usize, entry: u64, x0: u64) -> ! {
    let cpu = this_cpu();
    load(cpu, p, v);
    p.vcpus[v].power.set_on();
    let mut frame = GuestFrame::default();
    frame.x[0] = x0;
    frame.elr = entry;
    frame.spsr = SPSR_EL1H_MASKED;
    let index = cpu.index;
    arch::enter_guest(&frame, index)
}

/// The CPU's main loop when it has no running vCPU: wait for work posted
/// by other CPUs (CPU_ON for our vCPU, partition start/stop).
pub extern "C" fn idle() -> ! {
    loop {
        let index = percpu::current_index().unwrap_or(0);
        let req = PUBLIC[index].take_requests();
        if req & (REQ_CPU_ON | REQ_START) != 0 {
            try_start_assigned(req);
        }
        arch::wait_for_interrupt();
    }
}

/// Start this CPU's vCPU if a request says so. Returns if there is nothing
/// to start.
fn try_start_assigned(req: u32) {
    let cpu = this_cpu();
    let Some(id) = cpu.vcpu.or_else(|| crate::assigned_vcpu(cpu.index)) else {
        return;
    };
    cpu.vcpu = Some(id);
    let Some(p) = partition::get(id.partition) else {
        return;
    };
    if p.state.load(Ordering::Acquire) != STATE_RUNNING {
        return;
    }
    let shared = &p.vcpus[id.vcpu];
    if req & REQ_START != 0 && id.vcpu == 0 {
        let entry = p.entry_ipa.load(Ordering::Relaxed);
        let dtb = p.dtb_ipa.load(Ordering::Relaxed);
        hvlog!("partition {}: booting vCPU 0 at IPA {:#x}", p.name, entry);
        let _ = shared.power.try_claim_on();
        boot_vcpu(p, 0, entry, dtb);
    }
    if req & REQ_CPU_ON != 0 && shared.power.state() == PowerState::OnPending {
        let entry = shared.entry.load(Ordering::Acquire);
        let ctx = shared.context.load(Ordering::Acquire);
        boot_vcpu(p, id.vcpu, entry, ctx);
    }
}

/// Stop the vCPU on this CPU and go idle.
pub fn park() -> ! {
    let cpu = this_cpu();
    put(cpu);
    let index = cpu.index;
    arch::reset_stack_and_call(index, idle)
}

fn current(cpu: &CpuLocal) -> Option<(&'static Partition, usize)> {
    let id = cpu.vcpu?;
    Some((partition::get(id.partition)?, id.vcpu))
}

/// Report a partition's misbehaviour: its fault, contained, not a
/// hypervisor error.
fn guest_fault(p: &Partition, args: core::fmt::Arguments) {
    p.faults.fetch_add(1, Ordering::Relaxed);
    hvlog!("partition {}: {}", p.name, args);
}

#[no_mangle]
extern "C" fn pinfold_guest_sync(frame: &mut GuestFrame) {
    let cpu = this_cpu();
    let Some((p, v)) = current(cpu) else {
        hvlog!("trap with no vCPU loaded: ESR {:#x}", regs::esr_el2());
        park();
    };
    let exit = trap::decode(regs::esr_el2(), regs::far_el2(), regs::hpfar_el2());
    PUBLIC[cpu.index].count_exit(match exit {
        Exit::DataAbort {
            access: Some(_),
            ipa,
            ..
        } if is_emulated(p, ipa.0) => percpu::EXIT_MMIO,
        Exit::DataAbort { .. } | Exit::InstrAbort { .. } => percpu::EXIT_ABORT,
        Exit::SysReg(_) => percpu::EXIT_SYSREG,
        Exit::Hvc { .. } | Exit::Smc { .. } => percpu::EXIT_HVC,
        _ => percpu::EXIT_OTHER,
    });
    match exit {
        Exit::DataAbort {
            ipa,
            far,
            access: Some(access),
            ..
        } => {
            if mmio(cpu, p, v, ipa.0, &access, frame) {
                frame.elr += 4;
            } else {
                guest_fault(
                    p,
                    format_args!("access to unmapped IPA {:#x}: data abort injected", ipa.0),
                );
                inject(frame, InjectKind::DataAbort, far);
            }
        }
        Exit::DataAbort {
            ipa,
            far,
            access: None,
            ..
        } => {
            guest_fault(
                p,
                format_args!(
                    "undecodable access (ISV=0) to IPA {:#x}: data abort injected",
                    ipa.0
                ),
            );
            inject(frame, InjectKind::DataAbort, far);
        }
        Exit::InstrAbort { ipa, far, .. } => {
            guest_fault(p, format_args!("instruction fetch from IPA {:#x} (FAR {:#x}, ESR {:#x}): prefetch abort injected", ipa.0, far, regs::esr_el2()));
            inject(frame, InjectKind::InstrAbort, far);
        }
        Exit::Hvc { .. } => hvc(cpu, p, v, frame),
        Exit::Smc { .. } => {
            frame.x[0] = psci::NOT_SUPPORTED as u64;
            frame.elr += 4;
        }
        Exit::SysReg(access) => {
            if sysreg(cpu, p, v, access.reg, access.rt, access.read, frame) {
                frame.elr += 4;
            } else {
                guest_fault(
                    p,
                    format_args!(
                        "unhandled system register {:?}: undefined injected",
                        access.reg
                    ),
                );
                inject(frame, InjectKind::Undefined, 0);
            }
        }
        Exit::Wfx { .. } => {
            frame.elr += 4;
        }
        Exit::FpAccess | Exit::Unknown { .. } => {
            guest_fault(
                p,
                format_args!(
                    "unexpected trap {:?} (ESR {:#x}): undefined injected",
                    exit,
                    regs::esr_el2()
                ),
            );
            inject(frame, InjectKind::Undefined, 0);
        }
    }
}

#[no_mangle]
extern "C" fn pinfold_guest_serror(_frame: &mut GuestFrame) {
    let cpu = this_cpu();
    if let Some((p, _)) = current(cpu) {
        guest_fault(
            p,
            format_args!(
                "SError/FIQ from guest (ESR {:#x}): partition stopped",
                regs::esr_el2()
            ),
        );
        stop_partition(p);
    }
    park();
}

/// Whether `ipa` is one of the emulated devices (GICD, GICR, PL011).
fn is_emulated(p: &Partition, ipa: u64) -> bool {
    emulated_device(ipa, p.vcpus.len()).is_some()
}

/// Deliver a synchronous exception to the guest's EL1.
fn inject(frame: &mut GuestFrame, kind: InjectKind, far: u64) {
    let inj = trap::inject(kind, frame.spsr, regs::vbar_el1(), far);
    regs::write_el1_exception_state(inj.esr_el1, inj.far_el1, frame.elr, frame.spsr);
    frame.elr = inj.elr_el2;
    frame.spsr = inj.spsr_el2;
}

/// Emulate an MMIO access; false if nothing is at `ipa`.
fn mmio(
    cpu: &mut CpuLocal,
    p: &Partition,
    v: usize,
    ipa: u64,
    a: &MmioAccess,
    frame: &mut GuestFrame,
) -> bool {
    let value = if a.write {
        trap::mmio_store_value(a, frame.reg(a.reg))
    } else {
        0
    };
    let Some(device) = emulated_device(ipa, p.vcpus.len()) else {
        return false;
    };
    let result: u64;
    match device {
        EmulatedDevice::Gicd { offset: off } => {
            let mut posts = Post::new();
            {
                let mut dist = p.dist.lock();
                if a.write {
                    dist.write(off, a.width, value, &mut |act| posts.dist_action(p, act));
                    result = 0;
                } else {
                    result = dist.read(off, a.width);
                }
            }
            posts.deliver(cpu, p);
        }
        EmulatedDevice::Gicr {
            vcpu: idx,
            offset: off,
        } => {
            if idx == v {
                let mut acts: [Option<RedistAction>; 8] = [None; 8];
                let mut n = 0;
                let Some(vr) = cpu.vredist.as_mut() else {
                    return false;
                };
                if a.write {
                    vr.write(off, a.width, value, &mut |act| {
                        if n < acts.len() {
                            acts[n] = Some(act);
                            n += 1;
                        }
                    });
                    result = 0;
                } else {
                    result = vr.read(off, a.width);
                }
                for act in acts.iter().take(n).flatten() {
                    redist_action(cpu, *act);
                }
            } else {
                // Another vCPU's redistributor: Linux reads GICR_TYPER of every
                // frame to find its own. Only identification registers are
                // meaningful from here; they are the same for any instance.
                let last = idx + 1 == p.vcpus.len();
                let view = VRedist::new(idx, p.vcpus[idx].mpidr, last, PASSTHROUGH_PPIS);
                result = if a.write { 0 } else { view.read(off, a.width) };
                if a.write {
                    guest_fault(
                        p,
                        format_args!("write to vCPU {idx}'s redistributor from vCPU {v}: ignored"),
                    );
                }
            }
        }
        EmulatedDevice::Uart { offset: off } => {
            result = crate::console::guest_access(cpu, p, off, a.width, a.write, value);
        }
    }
    if !a.write {
        if let Some(r) = a.target_reg() {
            frame.set_reg(r, trap::mmio_load_value(a, result));
        }
    }
    true
}

pub fn redist_action(cpu: &mut CpuLocal, act: RedistAction) {
    match act {
        RedistAction::Inject(irq) => irq::inject_local(cpu, irq),
        RedistAction::Retract(intid) => cpu.lrs.retract(&mut HwLrs, intid),
        RedistAction::PhysPpiEnable { intid, enable } => ppi_change(
            cpu,
            HotPath::TimerPpiState,
            PpiStateChange::Enable(intid, enable),
        ),
        RedistAction::PhysPpiPending { intid, pending } => ppi_change(
            cpu,
            HotPath::TimerPpiState,
            PpiStateChange::Pending(intid, pending),
        ),
        RedistAction::PhysPpiActive { intid, active } => ppi_change(
            cpu,
            HotPath::TimerPpiState,
            PpiStateChange::Active(intid, active),
        ),
    }
}

const ICC_SGI1R: SysRegId = SysRegId::ICC_SGI1R_EL1;

fn sysreg(
    cpu: &mut CpuLocal,
    p: &Partition,
    v: usize,
    reg: SysRegId,
    rt: u8,
    read: bool,
    frame: &mut GuestFrame,
) -> bool {
    if reg == ICC_SGI1R || reg == SysRegId::ICC_ASGI1R_EL1 || reg == SysRegId::ICC_SGI0R_EL1 {
        if !read {
            send_sgi(cpu, p, v, frame.reg(rt));
        }
        return true;
    }
    if reg.is_id_group3() {
        if read {
            let real = regs::read_id_reg(reg.crm, reg.op2);
            frame.set_reg(rt, sanitise_id_reg(reg, real));
            return true;
        }
        return false;
    }
    if reg.is_dc_set_way() {
        // Set/way maintenance is meaningless for a guest that shares caches
        // with nobody it can name; memory stays coherent (KVM makes the
        // same argument). Ignored.
        return true;
    }
    if reg == SysRegId::ACTLR_EL1 {
        if read {
            frame.set_reg(rt, 0);
        }
        return true;
    }
    false
}

fn send_sgi(cpu: &mut CpuLocal, p: &Partition, v: usize, value: u64) {
    let req = sgi::decode_sgi1r(value);
    let res = sgi::resolve(&req, &p.vcpu_mpidrs, v);
    if res.outside > 0 {
        guest_fault(
            p,
            format_args!(
                "SGI {} to {} target(s) outside the partition: dropped",
                req.intid, res.outside
            ),
        );
    }
    for t in 0..p.vcpus.len() {
        if res.vcpus & (1 << t) == 0 {
            continue;
        }
        if t == v {
            if let Some(irq) = cpu
                .vredist
                .as_mut()
                .and_then(|r| r.raise_sgi(req.intid as u32))
            {
                irq::inject_local(cpu, irq);
            }
        } else {
            irq::post_remote(
                p.vcpus[t].pcpu,
                pinfold_hv::mailbox::MailboxOp::Sgi(req.intid as u32),
            );
        }
    }
}

fn hvc(cpu: &mut CpuLocal, p: &Partition, v: usize, frame: &mut GuestFrame) {
    let call = psci::decode(frame.x[0], frame.x[1], frame.x[2], frame.x[3]);
    let ret: i64 = match call {
        Call::PsciVersion => psci::PSCI_VERSION_1_1 as i64,
        Call::SmcccVersion => psci::SMCCC_VERSION_1_1 as i64,
        Call::PsciFeatures { fid } => psci::psci_features(fid),
        Call::SmcccArchFeatures { fid } => psci::smccc_arch_features(fid),
        Call::MigrateInfoType => psci::MIGRATE_INFO_TYPE_NOT_REQUIRED,
        Call::CpuSuspend { .. } => {
            // Standby only: a WFI's worth of waiting, done natively by the
            // guest's next WFI; report success.
            psci::SUCCESS
        }
        Call::CpuOn {
            target_mpidr,
            entry,
            context_id,
        } => cpu_on(p, target_mpidr, entry, context_id),
        Call::AffinityInfo { target_mpidr, .. } => match p
            .vcpus
            .iter()
            .find(|s| s.mpidr & 0xff_00ff_ffff == target_mpidr & 0xff_00ff_ffff)
        {
            None => psci::INVALID_PARAMETERS,
            Some(s) => match s.power.state() {
                PowerState::On => psci::AFFINITY_INFO_ON,
                PowerState::Off => psci::AFFINITY_INFO_OFF,
                PowerState::OnPending => psci::AFFINITY_INFO_ON_PENDING,
            },
        },
        Call::CpuOff => {
            hvlog!("partition {}: vCPU {} off", p.name, v);
            park();
        }
        Call::SystemOff => {
            hvlog!("partition {}: powered off by the guest", p.name);
            stop_partition(p);
            park();
        }
        Call::SystemReset => {
            hvlog!("partition {}: reset by the guest", p.name);
            restart_partition(cpu, p);
        }
        Call::Pinfold { .. } => {
            let regs = [
                frame.x[0], frame.x[1], frame.x[2], frame.x[3], frame.x[4], frame.x[5],
            ];
            let mut mem = crate::manage::CallerRam(p);
            let mut mgr = crate::manage::Manager { cpu };
            let out = pinfold_hv::hypercall::dispatch(p.plan.management, &regs, &mut mem, &mut mgr);
            frame.x[..4].copy_from_slice(&out);
            return;
        }
        Call::Unknown { .. } => psci::NOT_SUPPORTED,
    };
    frame.x[0] = ret as u64;
}

fn cpu_on(p: &Partition, target: u64, entry: u64, ctx: u64) -> i64 {
    let Some(t) = p
        .vcpus
        .iter()
        .position(|s| s.mpidr & 0xff_00ff_ffff == target & 0xff_00ff_ffff)
    else {
        guest_fault(
            p,
            format_args!(
                "PSCI CPU_ON for MPIDR {target:#x}, not a vCPU of this partition: refused"
            ),
        );
        return psci::INVALID_PARAMETERS;
    };
    let s = &p.vcpus[t];
    if let Err(e) = s.power.try_claim_on() {
        return e;
    }
    s.entry.store(entry, Ordering::Release);
    s.context.store(ctx, Ordering::Release);
    irq::post_request(s.pcpu, REQ_CPU_ON);
    psci::SUCCESS
}

/// Stop every vCPU of `p` (the caller parks its own afterwards).
pub fn stop_partition(p: &Partition) {
    p.state.store(STATE_STOPPING, Ordering::Release);
    let me = percpu::current_index().unwrap_or(usize::MAX);
    for s in &p.vcpus {
        if s.pcpu != me {
            irq::post_request(s.pcpu, REQ_STOP);
        }
    }
    p.state.store(STATE_STOPPED, Ordering::Release);
}

/// Stop, reload and boot `p` again. Called on one of its vCPUs' CPUs.
pub fn restart_partition(cpu: &mut CpuLocal, p: &Partition) -> ! {
    stop_partition(p);
    put(cpu);
    if !wait_all_off(p) {
        hvlog!("partition {}: a vCPU did not stop in time", p.name);
    }
    start_partition(p);
    park()
}

/// Wait until every vCPU of `p` has been put (bounded: ~1 s of counter
/// time; false if one did not answer).
pub fn wait_all_off(p: &Partition) -> bool {
    let deadline = arch::counter() + arch::counter_frequency() as u64;
    while p.vcpus.iter().any(|s| s.power.state() != PowerState::Off) {
        if arch::counter() > deadline {
            return false;
        }
        core::hint::spin_loop();
    }
    true
}

/// Load images and boot vCPU 0 (on its own CPU).
pub fn start_partition(p: &Partition) {
    if let Err(e) = p.load() {
        hvlog!("partition {}: cannot start: {}", p.name, e);
        return;
    }
    p.boot_count.fetch_add(1, Ordering::Relaxed);
    p.started_at.store(arch::counter(), Ordering::Relaxed);
    p.state.store(STATE_RUNNING, Ordering::Release);
    irq::post_request(p.vcpus[0].pcpu, REQ_START);
}

/// Process mailbox requests after an interrupt taken from the guest.
#[no_mangle]
extern "C" fn pinfold_after_guest_irq(_frame: &mut GuestFrame) {
    let cpu = this_cpu();
    PUBLIC[cpu.index].count_exit(percpu::EXIT_IRQ);
    let req = PUBLIC[cpu.index].take_requests();
    if req & REQ_STOP != 0 {
        // A start posted together with the stop (a restart) is for the
        // idle loop we are about to enter.
        PUBLIC[cpu.index].post_request(req & REQ_START);
        park();
    }
    // A start or CPU_ON while this vCPU runs is stale: CPU_ON was refused
    // by the power state machine, and a start follows a stop.
}
