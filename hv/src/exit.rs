//! The portable exit handler: what a trap, an interrupt or a request means
//! and what the platform must do about it. Arch code reads the syndrome
//! registers and calls [`handle_sync`] with this CPU's [`CpuState`], the
//! guest's registers and the small hardware trait [`Hw`]; it gets back a
//! typed [`Next`] to apply. `handle_sync` answers the exits that only ask
//! in line and hands the rest, decoded into an [`Exit`] (`trap::decode`),
//! to [`handle_exit`].
//! MMIO routing to the emulated devices (GICD, GICR, PL011), the
//! system-register policy, SGI resolution, PSCI/SMCCC, the management
//! hypercalls and fault accounting all live here, as do vCPU load/put, the
//! interrupt dispatch of the root IRQ handler and the idle loop's decisions.
//! A trace of one trap goes down once (platform -> here) and comes back once.
//!
//! Nothing here takes a lock shared between CPUs on vCPU load/put, timer PPI
//! forwarding or local injection; the locks it does take (the partition's
//! distributor and console) are `CountedLock`s, counted per path.

use crate::addr::{Ipa, IpaRange, PhysAddr};
use crate::bits::ones;
use crate::hypercall::{self, GuestMemory, GuestMemoryFault};
use crate::irqchip::{change_percpu_state, PerCpuIrqChip, PpiBits, PpiStateChange};
use crate::layout::{emulated_device, EmulatedDevice};
use crate::lockstat::LockPath;
use crate::mailbox::MailboxOp;
use crate::partition::{HostMemory, Partition, State};
use crate::percpu::{
    Cpu, CpuState, LoadedVcpu, PublicCpu, VcpuId, REQ_CPU_ON, REQ_START, REQ_STOP,
};
use crate::pmu::{self, PmuAccess, PmuAction, PmuPolicy, PmuReg, PmuView};
use crate::psci::{self, Call, PowerState};
use crate::ratelimit::{FaultKind, Verdict};
use crate::restart::Cause;
use crate::sysreg::{id_reg_view, ID_AA64DFR0_EL1};
use crate::system::System;
use crate::trap::{self, Exit, InjectKind, MmioAccess, SysRegId};
use crate::vgic::dist::DistAction;
use crate::vgic::lr::{ListRegisters, VirtIrq, MAX_LR_COUNT};
use crate::vgic::redist::{RedistAction, VRedist};
use crate::vgic::v40::{Residency, V40Hw};
use alloc::sync::Arc;
use core::cell::RefCell;
use core::fmt;
use core::sync::atomic::Ordering;
use pinfold_vboard::{
    ExitClass, GUEST_UART_INTID, PPI_HYP_TIMER, PPI_MAINTENANCE, PPI_PMU, PPI_PTIMER, PPI_VTIMER,
};

/// The SGI other CPUs send after posting to this CPU's mailbox.
pub const SGI_MAILBOX: u32 = 8;

/// The per-CPU PPIs a pinned vCPU owns: its EL1 virtual and physical timers,
/// and the PMU overflow interrupt when the partition has the PMU.
pub const PASSTHROUGH_PPIS: u32 = (1 << PPI_VTIMER) | (1 << PPI_PTIMER);

/// The PPIs load and put reset on this CPU.
const OWNED_PPIS: [u32; 3] = [PPI_VTIMER, PPI_PTIMER, PPI_PMU];

/// The pass-through PPIs the loaded vCPU's emulated redistributor mirrors
/// onto this CPU's own (`vgic5::mirrored_ppis`: none for a `gicv5`
/// partition, whose timers are DVI).
fn passthrough_ppis(p: &Partition) -> u32 {
    let owned = if p.plan.pmu {
        PASSTHROUGH_PPIS | 1 << PPI_PMU
    } else {
        PASSTHROUGH_PPIS
    };
    crate::vgic5::mirrored_ppis(p.gic, owned)
}

fn pmu_policy(p: &Partition) -> PmuPolicy {
    if p.plan.pmu {
        PmuPolicy::Owned
    } else {
        PmuPolicy::Hidden
    }
}

/// Times a full mailbox is retried before the operation is counted lost.
const POST_RETRIES: u32 = 1000;

/// The guest's general-purpose registers and return state, saved by the
/// vectors (layout shared with vectors.S: x0-x30, ELR_EL2, SPSR_EL2, pad).
#[repr(C)]
#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct GuestRegs {
    pub x: [u64; 31],
    pub elr: u64,
    pub spsr: u64,
    pub _pad: u64,
}

const _: () = assert!(core::mem::size_of::<GuestRegs>() == 272);

impl GuestRegs {
    /// Register `n` as an instruction names it (31 = xzr).
    pub fn reg(&self, n: u8) -> u64 {
        if n >= 31 {
            0
        } else {
            self.x[n as usize]
        }
    }

    pub fn set_reg(&mut self, n: u8, value: u64) {
        if n < 31 {
            self.x[n as usize] = value;
        }
    }
}

/// An operation on the shared distributor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpiOp {
    Enable { intid: u32, enable: bool },
    Route { intid: u32, mpidr: u64 },
    SetEdge { intid: u32, edge: bool },
}

/// The hardware the core needs, implemented by the platform over the real
/// registers and by the tests over a fake. The per-CPU interrupt chip is a
/// supertrait: the CPU's own SGI/PPI state and CPU interface.
pub trait Hw: PerCpuIrqChip + HostMemory {
    /// Where stage-2 tables come from (and go back to) at run time.
    fn tables(&mut self) -> &mut dyn crate::stage2::TableMemory;
    /// Number of list registers (ICH_VTR_EL2.ListRegs + 1).
    fn lr_count(&self) -> usize;
    fn read_lr(&self, n: usize) -> u64;
    fn write_lr(&mut self, n: usize, value: u64);
    /// ICH_ELRSR_EL2.
    fn empty_lr_mask(&self) -> u16;
    /// ICH_HCR_EL2.UIE.
    fn set_underflow_irq(&mut self, enable: bool);
    /// An operation on the shared distributor; the platform takes its
    /// chip-wide lock (counted as `path`).
    fn spi(&mut self, path: LockPath, op: SpiOp);
    /// The real value of an ID register (op0 = 3, op1 = 0, CRn = 0).
    fn read_id_reg(&self, reg: SysRegId) -> u64;
    /// Read or write one of this CPU's PMU registers (the vCPU owns them).
    fn pmu_read(&mut self, reg: PmuReg) -> u64;
    fn pmu_write(&mut self, reg: PmuReg, value: u64);
    /// The guest's VBAR_EL1 (for exception injection).
    fn vbar_el1(&self) -> u64;
    /// The physical counter and its frequency.
    fn now(&self) -> u64;
    fn counter_frequency(&self) -> u64;
    /// A whole console line of partition `source` (index + 1) for the host
    /// UART.
    fn console_line(&mut self, source: u32, line: &[u8]);
    /// A hypervisor log line (the platform tags it with the CPU).
    fn log(&mut self, args: fmt::Arguments);
    /// An untagged `pinfold: ` line that tools read (the stats lines).
    fn report(&mut self, args: fmt::Arguments);
    /// The index of the CPU this runs on (`System::cpus`): which ring of
    /// the event log (`events`) an event goes to.
    fn cpu_index(&self) -> usize {
        0
    }
    /// Wake this CPU's idle loop at counter value `at` (the EL2 timer,
    /// PPI 26), or never. The wake-up only ends the idle loop's WFI.
    fn set_wakeup(&mut self, at: Option<u64>) {
        let _ = at;
    }
    /// Read `width` (1, 2, 4) bytes of PCI configuration space at host
    /// physical address `pa`, inside a host bridge's ECAM window and
    /// aligned (`pci::Ecam` checks both). Without one, nothing answers.
    fn config_read(&mut self, pa: u64, width: u8) -> u32 {
        let _ = pa;
        u32::MAX >> (32 - 8 * u32::from(width.clamp(1, 4)))
    }
    /// Write PCI configuration space (as [`Hw::config_read`]).
    fn config_write(&mut self, pa: u64, width: u8, value: u32) {
        let _ = (pa, width, value);
    }
    /// The registers of the SMMUv3 at `base` and the memory its stream
    /// table and queues live in (`smmu`), if the platform drives one.
    fn smmu_io(
        &mut self,
        base: u64,
    ) -> Option<(
        &mut dyn crate::smmu::SmmuRegs,
        &mut dyn crate::smmu::DmaMemory,
    )> {
        let _ = base;
        None
    }
    /// This CPU's own GICv4 VLPI frame (RD_base + 0x2_0000, GICR_VPROPBASER
    /// and GICR_VPENDBASER) for direct vLPIs (`vgic::v40::Residency`), if
    /// its redistributor has one (GICR_TYPER.VLPIS).
    fn vlpi_frame(&mut self) -> Option<&mut dyn V40Hw> {
        None
    }
    /// An IRS software error record's syndrome, cleared (a GICv5 host's
    /// `Gicv5Irs::take_swerr` of the first IRS that has one: records are
    /// drained from every IRS); `None` when no IRS has one, or there is no
    /// IRS. Drained by [`System::virs_poll`].
    fn virs_swerr(&mut self) -> Option<u64> {
        None
    }
    /// Issue GIC VDPEND with operand `op` (`vgic5::vdpend_operand`: one of
    /// a `gicv5` partition's emulated devices' virtual SPIs made pending or
    /// not in its own VM) on this CPU's GICv5 interface
    /// (`Gicv5Cpu::vdpend`). The platform issues it only for a VM the
    /// boot put in the vIRS; without a GICv5, nothing.
    fn virs_pend(&mut self, op: u64) {
        let _ = op;
    }
    /// Re-arm the doorbell of vPE `vpe` of VM `vm`, which is the doorbell
    /// LPI of CPU `cpu` (`Gicv5Irs::rearm_doorbell` on the IRS serving
    /// `cpu`, `vgic5::irses::IrsRoutes::of_cpu`, under that IRS's lock).
    fn virs_rearm(&mut self, vm: u16, vpe: u16, cpu: usize) {
        let _ = (vm, vpe, cpu);
    }
    /// Apply vIRS steps the core decided at run time (`vgic5::release_virs`
    /// for VM `vm`'s destroyed partition) to the IRSes as
    /// `vgic5::irses::IrsRoutes::split_virs` splits them, each under its
    /// own lock; a VM the boot did not put in the vIRS is left alone.
    fn virs_apply(&mut self, vm: u16, ops: &[crate::vgic5::VirsOp]) {
        let _ = (vm, ops);
    }
    /// Read one of the resident `gicv5` vCPU's ICH_PPI_*_EL2 virtual PPI
    /// state registers (a trapped ICC_PPI_* access, `vgic5::ppitrap`);
    /// without a GICv5 CPU interface on this CPU, 0.
    fn vppi_read(&mut self, reg: crate::vgic5::ppitrap::IchPpiReg) -> u64 {
        let _ = reg;
        0
    }
    /// Write one (as [`Hw::vppi_read`]); without one, nothing.
    fn vppi_write(&mut self, reg: crate::vgic5::ppitrap::IchPpiReg, value: u64) {
        let _ = (reg, value);
    }
    /// This CPU's own GICv4.1 redistributor VLPI frame and the ITSes'
    /// GITS_SGIR for direct vSGIs (`vsgi`), if the platform set them up.
    fn v41(&mut self) -> Option<&mut dyn crate::vgic::v41::V41Hw> {
        None
    }
    /// Zero `bytes` of hypervisor memory at `pa` (a vPE's pending table,
    /// non-resident) and make the zeros visible to the GIC.
    fn zero_table(&mut self, pa: u64, bytes: usize) {
        let _ = (pa, bytes);
    }
}

/// The list registers of an [`Hw`], for `LrManager`.
pub struct Lrs<'a, H: Hw>(pub &'a mut H);

impl<H: Hw> ListRegisters for Lrs<'_, H> {
    #[inline(always)]
    fn lr_count(&self) -> usize {
        self.0.lr_count()
    }
    #[inline(always)]
    fn read_lr(&self, n: usize) -> u64 {
        self.0.read_lr(n)
    }
    #[inline(always)]
    fn write_lr(&mut self, n: usize, value: u64) {
        self.0.write_lr(n, value)
    }
    #[inline(always)]
    fn empty_lr_mask(&self) -> u16 {
        self.0.empty_lr_mask()
    }
    fn set_underflow_irq(&mut self, enable: bool) {
        self.0.set_underflow_irq(enable)
    }
}

/// EL1 exception state to write before resuming (an injected exception).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct El1Exception {
    pub esr: u64,
    /// None leaves FAR_EL1 alone.
    pub far: Option<u64>,
    pub elr: u64,
    pub spsr: u64,
}

/// What the platform does after an exit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Enter the guest again with the (possibly changed) registers.
    Resume,
    /// Write this EL1 exception state, then enter the guest (the registers'
    /// ELR/SPSR already point at the guest's vector).
    Inject(El1Exception),
    /// Put this vCPU and go idle (PSCI CPU_OFF, a stop request).
    Park,
    /// The partition was stopped (SYSTEM_OFF, SError): put, go idle.
    Stopped,
    /// The guest asked for SYSTEM_RESET of partition `.0`: put this vCPU,
    /// then call [`System::finish_restart`], then go idle.
    Restart(usize),
}

/// Where the idle loop enters a vCPU.
#[derive(Clone)]
pub struct Boot {
    /// Its partition, found by the request's lookup (so that the load
    /// itself takes no lock).
    pub partition: Arc<Partition>,
    pub id: VcpuId,
    pub entry: u64,
    pub x0: u64,
}

/// What vCPU load decided, for the platform to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VcpuContext {
    pub vmpidr: u64,
    /// MDCR_EL2: the PMU as the plan and the CPU's PMU version decide.
    pub mdcr_el2: u64,
    pub vmid: u16,
    pub stage2_root: PhysAddr,
}

/// Report a partition's fault, rate-limited per kind (the count is exact);
/// a fault whose line is printed is also an event (`events`), so the event
/// log is limited the same way.
pub fn fault(p: &Partition, hw: &mut impl Hw, kind: FaultKind, args: fmt::Arguments) {
    match p.fault(kind, hw.now(), hw.counter_frequency()) {
        Verdict::Print { suppressed: 0 } => {
            hw.log(format_args!("partition {}: {}", p.name, args));
            p.fault_event(&*hw, args);
        }
        Verdict::Print { suppressed } => {
            hw.log(format_args!(
                "partition {}: {} ({} more of this kind suppressed)",
                p.name, args, suppressed
            ));
            p.fault_event(
                &*hw,
                format_args!("{args} ({suppressed} more of this kind suppressed)"),
            );
        }
        Verdict::Suppress => {}
    }
}

#[cold]
#[inline(never)]
fn no_vcpu(hw: &mut impl Hw, exit: Exit) -> Next {
    hw.log(format_args!("trap with no vCPU loaded: {exit:?}"));
    Next::Park
}

/// Handle one synchronous exit from its syndrome (ESR_EL2, FAR_EL2,
/// HPFAR_EL2), the platform's entry point. The exits a guest takes all the
/// time are handled here in line, decoding only what they need: a hypercall
/// that only asks (versions, features), an SGI (ICC_SGI1R_EL1, Linux's
/// IPIs) and a read of an emulated register whose value no guest action
/// changes (GICD_TYPER and the identification registers). Everything else
/// is decoded in full and goes to [`handle_exit`], out of line, so that
/// these two keep a small frame. Both are counted as the class they are.
#[inline(always)]
pub fn handle_sync(
    sys: &System,
    cpu: &mut Cpu,
    hw: &mut impl Hw,
    regs: &mut GuestRegs,
    syndrome: (u64, u64, u64),
) -> Next {
    let (esr, far, hpfar) = syndrome;
    let (loaded, state) = cpu.split();
    if let Some((p, v)) = loaded {
        let cpu = state;
        if trap::exception_class(esr) == trap::ec::HVC64 {
            if let Some(ret) = psci::query(regs.x[0], regs.x[1]) {
                cpu.public.counters.exit(ExitClass::Hvc);
                regs.x[0] = ret as u64;
                return Next::Resume;
            }
        } else if trap::exception_class(esr) == trap::ec::SYSREG {
            let access = trap::sysreg_access(esr);
            if access.reg == SysRegId::ICC_SGI1R_EL1 && !access.read {
                // Linux's IPIs: straight to the SGI path.
                cpu.public.counters.exit(ExitClass::SysReg);
                send_sgi(sys, cpu, hw, p, v, regs.reg(access.rt));
                regs.elr += 4;
                return Next::Resume;
            }
        } else if let Some((ipa, a)) = trap::mmio_access(esr, far, hpfar) {
            let offset = ipa.0.wrapping_sub(pinfold_vboard::GUEST_GICD_BASE);
            // A `gicv5` partition's frame there is its IRS's (`virs_frame`).
            if !a.write && offset < pinfold_vboard::GUEST_GICD_SIZE && p.virs_frame.is_none() {
                if let Some(value) = crate::vgic::dist::constant_register(offset, a.width) {
                    let value = crate::vgic::dist::partition_constant(
                        offset,
                        value,
                        p.vits.is_some(),
                        p.vsgi.is_some(),
                    );
                    cpu.public.counters.exit(ExitClass::Mmio);
                    // Constant registers are 32-bit: a plain LDR of one
                    // zero-extends into W or X alike; other forms (LDRSW)
                    // take the general conversion.
                    let value = if a.sign_extend {
                        trap::mmio_load_value(&a, value)
                    } else {
                        value
                    };
                    regs.set_reg(a.reg, value);
                    regs.elr += 4;
                    return Next::Resume;
                }
            }
        }
    }
    decode_and_handle(sys, cpu, hw, regs, esr, far, hpfar)
}

#[inline(never)]
fn decode_and_handle(
    sys: &System,
    cpu: &mut Cpu,
    hw: &mut impl Hw,
    regs: &mut GuestRegs,
    esr: u64,
    far: u64,
    hpfar: u64,
) -> Next {
    let (loaded, cpu) = cpu.split();
    // The console: every byte a Linux guest prints is two or three UART
    // accesses (UARTFR polls, then the UARTDR write), 98% of its exits
    // before /init; answered without the full decode and dispatch. Here
    // rather than in `handle_sync`, whose in-line paths it would lengthen
    // (docs/PERFORMANCE.md, the Linux row).
    if let (Some((p, v)), Some((ipa, a))) = (loaded, trap::mmio_access(esr, far, hpfar)) {
        let offset = ipa.0.wrapping_sub(pinfold_vboard::GUEST_UART_BASE);
        if offset < pinfold_vboard::GUEST_UART_SIZE {
            cpu.public.counters.exit(ExitClass::Mmio);
            mmio(
                sys,
                cpu,
                hw,
                p,
                v,
                EmulatedDevice::Uart { offset },
                &a,
                regs,
            );
            regs.elr += 4;
            return Next::Resume;
        }
    }
    exit_of(sys, cpu, hw, loaded, regs, trap::decode(esr, far, hpfar))
}

/// Handle one synchronous exit of the vCPU loaded on this CPU.
///
/// The exits a running guest takes all the time (hypercalls, emulated
/// device accesses, trapped system registers) are handled in line; guest
/// mistakes (aborts, unknown traps) go to `contained_exit`, out of line, so
/// that the hot arms keep their registers to themselves.
pub fn handle_exit(
    sys: &System,
    cpu: &mut Cpu,
    hw: &mut impl Hw,
    regs: &mut GuestRegs,
    exit: Exit,
) -> Next {
    let (loaded, cpu) = cpu.split();
    exit_of(sys, cpu, hw, loaded, regs, exit)
}

fn exit_of(
    sys: &System,
    cpu: &mut CpuState,
    hw: &mut impl Hw,
    loaded: Option<(&Partition, usize)>,
    regs: &mut GuestRegs,
    exit: Exit,
) -> Next {
    let Some((p, v)) = loaded else {
        return no_vcpu(hw, exit);
    };
    let counters = &cpu.public.counters;
    match exit {
        Exit::Hvc { .. } => {
            counters.exit(ExitClass::Hvc);
            hvc(sys, cpu, hw, p, v, regs)
        }
        Exit::DataAbort {
            ipa,
            access: Some(access),
            ..
        } if p
            .vpci
            .as_ref()
            .is_some_and(|v| v.fresh.decode(ipa.0, 1).is_some()) =>
        {
            counters.exit(ExitClass::Mmio);
            pci_config(sys, hw, p, ipa.0, &access, regs);
            regs.elr += 4;
            Next::Resume
        }
        Exit::DataAbort {
            ipa,
            access: Some(access),
            ..
        } if p.vits.is_some()
            && (pinfold_vboard::GUEST_ITS_BASE
                ..pinfold_vboard::GUEST_ITS_BASE + pinfold_vboard::GUEST_ITS_SIZE)
                .contains(&ipa.0) =>
        {
            counters.exit(ExitClass::Mmio);
            its_access(sys, cpu, hw, p, v, ipa.0, &access, regs);
            regs.elr += 4;
            Next::Resume
        }
        Exit::DataAbort {
            ipa,
            access: Some(access),
            ..
        } => match emulated_device(ipa.0, p.vcpus.len()) {
            Some(device) => {
                counters.exit(ExitClass::Mmio);
                mmio(sys, cpu, hw, p, v, device, &access, regs);
                regs.elr += 4;
                Next::Resume
            }
            None => contained_exit(cpu, hw, p, regs, exit),
        },
        Exit::SysReg(access) => {
            counters.exit(ExitClass::SysReg);
            if sysreg(sys, cpu, hw, p, v, access.reg, access.rt, access.read, regs) {
                regs.elr += 4;
                Next::Resume
            } else {
                contained_exit(cpu, hw, p, regs, exit)
            }
        }
        Exit::Wfx { .. } => {
            counters.exit(ExitClass::Other);
            regs.elr += 4;
            Next::Resume
        }
        _ => contained_exit(cpu, hw, p, regs, exit),
    }
}

/// The exits that are a guest's mistake or a refusal: counted, reported
/// (rate-limited) and answered with the exception hardware would raise.
#[cold]
#[inline(never)]
fn contained_exit(
    cpu: &CpuState,
    hw: &mut impl Hw,
    p: &Partition,
    regs: &mut GuestRegs,
    exit: Exit,
) -> Next {
    let counters = &cpu.public.counters;
    match exit {
        Exit::DataAbort {
            ipa,
            far,
            access: Some(_),
            ..
        } => {
            counters.exit(ExitClass::Abort);
            fault(
                p,
                hw,
                FaultKind::UnmappedIpa,
                format_args!("access to unmapped IPA {:#x}: data abort injected", ipa.0),
            );
            inject(hw, regs, InjectKind::DataAbort, far)
        }
        Exit::DataAbort {
            ipa,
            far,
            access: None,
            ..
        } => {
            counters.exit(ExitClass::Abort);
            fault(
                p,
                hw,
                FaultKind::Undecodable,
                format_args!(
                    "undecodable access (ISV=0) to IPA {:#x}: data abort injected",
                    ipa.0
                ),
            );
            inject(hw, regs, InjectKind::DataAbort, far)
        }
        Exit::InstrAbort { ipa, far, ifsc } => {
            counters.exit(ExitClass::Abort);
            fault(
                p,
                hw,
                FaultKind::InstrAbort,
                format_args!(
                    "instruction fetch from IPA {:#x} (FAR {far:#x}, IFSC {ifsc:#x}): prefetch abort injected",
                    ipa.0
                ),
            );
            inject(hw, regs, InjectKind::InstrAbort, far)
        }
        Exit::Smc { .. } => {
            // No secure firmware is offered to partitions.
            counters.exit(ExitClass::Hvc);
            regs.x[0] = psci::NOT_SUPPORTED as u64;
            regs.elr += 4;
            Next::Resume
        }
        Exit::SysReg(access) => {
            // Counted as SysReg by handle_exit.
            fault(
                p,
                hw,
                FaultKind::UnknownSysReg,
                format_args!(
                    "unhandled system register {:?}: undefined injected",
                    access.reg
                ),
            );
            inject(hw, regs, InjectKind::Undefined, 0)
        }
        Exit::Hvc { .. } | Exit::Wfx { .. } | Exit::FpAccess | Exit::Unknown { .. } => {
            counters.exit(ExitClass::Other);
            fault(
                p,
                hw,
                FaultKind::Other,
                format_args!("unexpected trap {exit:?}: undefined injected"),
            );
            inject(hw, regs, InjectKind::Undefined, 0)
        }
    }
}

/// An SError (or FIQ) taken from the guest: the partition is stopped.
pub fn handle_serror(sys: &System, cpu: &mut Cpu, hw: &mut impl Hw, esr: u64) -> Next {
    let (Some((p, _)), cpu) = cpu.split() else {
        return Next::Park;
    };
    fault(
        p,
        hw,
        FaultKind::Other,
        format_args!("SError/FIQ from guest (ESR {esr:#x}): partition stopped"),
    );
    let reason = alloc::format!("fatal fault: SError (ESR {esr:#x})");
    sys.crash_partition(p, hw, cpu.index, &reason);
    Next::Stopped
}

fn inject(hw: &mut impl Hw, regs: &mut GuestRegs, kind: InjectKind, far: u64) -> Next {
    let inj = trap::inject(kind, regs.spsr, hw.vbar_el1(), far);
    let el1 = El1Exception {
        esr: inj.esr_el1,
        far: inj.far_el1,
        elr: regs.elr,
        spsr: regs.spsr,
    };
    regs.elr = inj.elr_el2;
    regs.spsr = inj.spsr_el2;
    Next::Inject(el1)
}

#[allow(clippy::too_many_arguments)]
fn mmio(
    sys: &System,
    cpu: &mut CpuState,
    hw: &mut impl Hw,
    p: &Partition,
    v: usize,
    device: EmulatedDevice,
    a: &MmioAccess,
    regs: &mut GuestRegs,
) {
    let value = if a.write {
        trap::mmio_store_value(a, regs.reg(a.reg))
    } else {
        0
    };
    let result = match device {
        EmulatedDevice::Gicd { offset } if p.virs_frame.is_some() => {
            virs_frame_access(hw, p, offset, a, value)
        }
        EmulatedDevice::Gicd { offset } if !a.write => {
            match crate::vgic::dist::constant_register(offset, a.width) {
                Some(v) => crate::vgic::dist::partition_constant(
                    offset,
                    v,
                    p.vits.is_some(),
                    p.vsgi.is_some(),
                ),
                None => gicd_read(p, offset, a.width),
            }
        }
        EmulatedDevice::Gicd { offset } => {
            gicd_write(sys, cpu, hw, p, offset, a.width, value);
            0
        }
        EmulatedDevice::Gicr { vcpu, offset } if vcpu == v => {
            redist_access(sys, cpu, hw, p, offset, a.width, a.write, value)
        }
        EmulatedDevice::Gicr { vcpu, offset } => foreign_redist(hw, p, v, vcpu, offset, a),
        EmulatedDevice::Uart { offset } => {
            uart_access(sys, cpu, hw, p, offset, a.width, a.write, value)
        }
        EmulatedDevice::Wdog { frame, offset } => {
            wdog_access(sys, cpu, hw, p, frame, offset, a.width, a.write, value)
        }
        EmulatedDevice::Gpio { offset } => gpio_access(sys, cpu, hw, p, offset, a.write, value),
    };
    if !a.write {
        if let Some(r) = a.target_reg() {
            regs.set_reg(r, trap::mmio_load_value(a, result));
        }
    }
}

/// A guest access to its virtual ECAM (`vpci`): filtered under the
/// partition's lock, performed on the host's ECAM window. A 64-bit access
/// (no configuration register is one) reads all-ones and writes nothing.
#[cold]
#[inline(never)]
fn pci_config(
    sys: &System,
    hw: &mut impl Hw,
    p: &Partition,
    ipa: u64,
    a: &MmioAccess,
    regs: &mut GuestRegs,
) {
    let (Some(v), Some(bridge)) = (p.vpci.as_ref(), sys.host.pcie.as_ref()) else {
        return;
    };
    let decoded = v.fresh.decode(ipa, a.width).filter(|_| a.width <= 4);
    if a.write {
        let Some((bdf, offset)) = decoded else {
            return;
        };
        let value = trap::mmio_store_value(a, regs.reg(a.reg)) as u32;
        let outcome = {
            let mut ecam = v.ecam.lock(LockPath::PciConfigTrap);
            let mut cfg = crate::pci::Ecam::new(hw, bridge);
            ecam.write(&mut cfg, bdf, offset, a.width, value)
        };
        if let crate::vpci::WriteOutcome::Refused(why) = outcome {
            fault(p, hw, FaultKind::PciConfig, format_args!("{why}"));
        }
        return;
    }
    let result = match decoded {
        Some((bdf, offset)) => {
            let mut ecam = v.ecam.lock(LockPath::PciConfigTrap);
            let mut cfg = crate::pci::Ecam::new(hw, bridge);
            u64::from(ecam.read(&mut cfg, bdf, offset, a.width))
        }
        None => u64::MAX,
    };
    if let Some(r) = a.target_reg() {
        regs.set_reg(r, trap::mmio_load_value(a, result));
    }
}

/// A guest access to its virtual ITS (`its`): its command queue run under
/// the partition's lock, accepted commands applied on the physical ITS,
/// INV/INVALL re-checked on the target vCPU's redistributor.
#[cold]
#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn its_access(
    sys: &System,
    cpu: &mut CpuState,
    hw: &mut impl Hw,
    p: &Partition,
    v: usize,
    ipa: u64,
    a: &MmioAccess,
    regs: &mut GuestRegs,
) {
    let value = a.write.then(|| trap::mmio_store_value(a, regs.reg(a.reg)));
    let owner = |device: u32| {
        p.vpci.as_ref().is_some_and(|v| {
            v.assignment
                .functions
                .iter()
                .any(|f| u32::from(f.bdf.rid()) == device)
        })
    };
    let out = crate::its::access(
        sys.its.as_ref(),
        &sys.lpi_routes,
        p,
        &owner,
        &mut *hw,
        ipa - pinfold_vboard::GUEST_ITS_BASE,
        a.width,
        value,
    );
    for f in &out.faults {
        fault(p, hw, FaultKind::Its, format_args!("{f}"));
    }
    for m in &out.mapped {
        hw.log(format_args!("partition {}: {m}", p.name));
    }
    for r in out.rechecks {
        deliver(sys, cpu, hw, p, r.vcpu, MailboxOp::LpiRecheck(r.vintid));
    }
    let _ = v;
    if !a.write {
        if let Some(r) = a.target_reg() {
            regs.set_reg(r, trap::mmio_load_value(a, out.value));
        }
    }
}

/// A `gicv5` partition's access to its IRS config frame (`vgic5::frame`),
/// under the partition's frame lock: the frame decides, a refusal is the
/// partition's fault, an SPI's trigger mode goes to the physical SPI.
#[cold]
#[inline(never)]
fn virs_frame_access(
    hw: &mut impl Hw,
    p: &Partition,
    offset: u64,
    a: &MmioAccess,
    value: u64,
) -> u64 {
    use crate::vgic5::frame::FrameAction;
    let Some(frame) = p.virs_frame.as_ref() else {
        return 0;
    };
    let out = {
        let mut f = frame.lock(LockPath::GicdTrap);
        if a.write {
            f.write(offset, a.width, value)
        } else {
            f.read(offset, a.width)
        }
    };
    if let Some(why) = out.fault {
        let kind = match why {
            crate::vgic5::frame::FrameFault::ForeignSpi { .. } => FaultKind::ForeignSpi,
            _ => FaultKind::Virs,
        };
        fault(p, hw, kind, format_args!("{why}"));
    }
    if let Some(FrameAction::SpiTrigger { intid, level }) = out.action {
        let edge = !level;
        hw.spi(LockPath::PhysDist, SpiOp::SetEdge { intid, edge });
    }
    out.value
}

/// A GICD register whose value is state: under the partition's lock.
#[inline(never)]
fn gicd_read(p: &Partition, offset: u64, width: u8) -> u64 {
    p.dist.lock(LockPath::GicdTrap).read(offset, width)
}

#[inline(never)]
fn gicd_write(
    sys: &System,
    cpu: &mut CpuState,
    hw: &mut impl Hw,
    p: &Partition,
    offset: u64,
    width: u8,
    value: u64,
) {
    let mut dist = p.dist.lock(LockPath::GicdTrap);
    dist.write(offset, width, value, &mut |act| {
        dist_action(sys, cpu, hw, p, act)
    });
    if p.vsgi.is_some() && offset < 4 {
        // GICD_CTLR: its group enables reach every vCPU's vPE, its
        // nASSGIreq switches every vCPU's SGIs (here at once, elsewhere
        // after the kick).
        let ctlr = dist.read(0, 4) as u32;
        if crate::vsgi::ctlr_written(sys, cpu, hw, p, ctlr) {
            vsgi_resync(sys, cpu, hw, p);
        }
    }
}

/// GICv4.1, on the CPU of a loaded vCPU of `p` after its GICD_CTLR
/// changed: its vPE re-loaded with the group enables (`vsgi::regroup`) and
/// its SGIs switched to the vPE when the guest set nASSGIreq, those pending
/// in the list registers moved there (`vsgi::follow`, `vsgi::pend`).
#[cold]
#[inline(never)]
fn vsgi_resync(sys: &System, cpu: &mut CpuState, hw: &mut impl Hw, p: &Partition) {
    if cpu.loaded.is_none() {
        return;
    }
    crate::vsgi::regroup(sys, &mut cpu.vsgi, hw, p, cpu.vcpu);
    if crate::vsgi::follow(&mut cpu.vsgi, p) {
        let pending = cpu.lrs.private_bits(&Lrs(hw)).pending & 0xFFFF;
        for intid in ones(u64::from(pending)) {
            cpu.lrs.retract(&mut Lrs(hw), intid);
        }
        crate::vsgi::pend(hw, p, cpu.vcpu, pending as u16);
    }
}

/// Another vCPU's redistributor: Linux reads GICR_TYPER of every frame to
/// find its own. Only identification registers are meaningful from here;
/// they are the same for any instance.
#[cold]
#[inline(never)]
fn foreign_redist(
    hw: &mut impl Hw,
    p: &Partition,
    v: usize,
    vcpu: usize,
    offset: u64,
    a: &MmioAccess,
) -> u64 {
    if a.write {
        fault(
            p,
            hw,
            FaultKind::ForeignRedist,
            format_args!("write to vCPU {vcpu}'s redistributor from vCPU {v}: ignored"),
        );
        0
    } else {
        let last = vcpu + 1 == p.vcpus.len();
        let r = VRedist::new(vcpu, p.vcpus[vcpu].mpidr, last, passthrough_ppis(p));
        if p.has_vits() { r.with_lpis() } else { r }.read(offset, a.width)
    }
}

#[inline(never)]
#[allow(clippy::too_many_arguments)]
fn redist_access(
    sys: &System,
    cpu: &mut CpuState,
    hw: &mut impl Hw,
    p: &Partition,
    offset: u64,
    width: u8,
    write: bool,
    value: u64,
) -> u64 {
    let CpuState {
        lrs,
        loaded,
        public,
        vlpi,
        vsgi,
        ..
    } = cpu;
    let Some(loaded) = loaded.as_mut() else {
        return 0;
    };
    // GICv4.1: the SGI configuration before the write, to send what changed.
    let sgis_before = (write && p.vsgi.is_some()).then(|| loaded.vredist.sgi_configs());
    let vcpu = loaded.id.vcpu as u16;
    if !write {
        let held = lrs.private_bits(&Lrs(hw));
        let phys = hw.ppi_bits();
        let state = PpiBits {
            pending: held.pending | phys.pending,
            active: held.active | phys.active,
        };
        return loaded.vredist.read_with_hw(offset, width, state);
    }
    loaded
        .vredist
        .write(offset, width, value, &mut |act| match act {
            RedistAction::Inject(irq) => inject_into(public, p, lrs, hw, irq),
            RedistAction::Retract(intid) => lrs.retract(&mut Lrs(hw), intid),
            RedistAction::PhysPpiEnable { intid, enable } => ppi_change(
                sys,
                hw,
                LockPath::TimerPpiState,
                PpiStateChange::Enable(intid, enable),
            ),
            RedistAction::PhysPpiPending { intid, pending } => ppi_change(
                sys,
                hw,
                LockPath::TimerPpiState,
                PpiStateChange::Pending(intid, pending),
            ),
            RedistAction::PhysPpiActive { intid, active } => ppi_change(
                sys,
                hw,
                LockPath::TimerPpiState,
                PpiStateChange::Active(intid, active),
            ),
            RedistAction::LpisOn { propbaser } => vlpis_resident(sys, vlpi, hw, p, vcpu, propbaser),
        });
    if let Some(before) = sgis_before {
        let after = loaded.vredist.sgi_configs();
        crate::vsgi::reconfigure(sys, vsgi, p, usize::from(vcpu), &before, &after);
    }
    cpu.hw_ppis = loaded.vredist.hw_ppis();
    0
}

/// The guest enabled LPIs on its vCPU's redistributor: with direct vLPIs
/// (`its::lpis_on`) its vPE is made resident on this CPU's own VLPI frame,
/// with a zeroed pending table and the guest's property table. Once per
/// boot of the vCPU (a slow path: both ITS locks, `its`); a refusal is the
/// partition's fault and leaves its MSIs undelivered.
#[cold]
#[inline(never)]
fn vlpis_resident(
    sys: &System,
    residency: &mut Residency,
    hw: &mut impl Hw,
    p: &Partition,
    vcpu: u16,
    propbaser: u64,
) {
    let why = match crate::its::lpis_on(sys.its.as_ref(), p, vcpu, propbaser) {
        None => return,
        Some(Err(why)) => why,
        Some(Ok(d)) => {
            hw.zero_table(d.vpe.vpt, d.vpt_bytes);
            let Some(frame) = hw.vlpi_frame() else {
                return fault(
                    p,
                    hw,
                    FaultKind::Dropped,
                    format_args!("vCPU {vcpu}: this CPU has no VLPI frame: its vLPIs stay off"),
                );
            };
            // A vPE still resident from an earlier boot goes first.
            let _ = residency.put(&mut *frame);
            match residency.load(frame, d.prop, d.vpe.vpt) {
                Ok(()) => {
                    return hw.log(format_args!(
                        "partition {}: vCPU {vcpu}'s vPE {} resident on this CPU (direct vLPIs)",
                        p.name, d.vpe.id
                    ))
                }
                Err(e) => alloc::format!("vPE {} not made resident: {e:?}", d.vpe.id),
            }
        }
    };
    fault(
        p,
        hw,
        FaultKind::Dropped,
        format_args!("vCPU {vcpu}: {why}: its MSIs are not delivered"),
    );
}

fn ppi_change(sys: &System, hw: &mut impl Hw, path: LockPath, change: PpiStateChange) {
    change_percpu_state(hw, &sys.chip_lock, path, change);
}

/// The PPIs a vCPU owns, disabled and inactive on this CPU's own
/// redistributor (vCPU load and put).
fn quiesce_owned_ppis(sys: &System, hw: &mut impl Hw, path: LockPath) {
    for ppi in OWNED_PPIS {
        ppi_change(sys, hw, path, PpiStateChange::Enable(ppi, false));
        ppi_change(sys, hw, path, PpiStateChange::Active(ppi, false));
    }
}

/// A guest access to its SBSA watchdog (`lifecycle`); a change of its WS0
/// line goes to the distributor.
#[allow(clippy::too_many_arguments)]
#[cold]
#[inline(never)]
fn wdog_access(
    sys: &System,
    cpu: &mut CpuState,
    hw: &mut impl Hw,
    p: &Partition,
    frame: crate::wdog::Frame,
    offset: u64,
    width: u8,
    write: bool,
    value: u64,
) -> u64 {
    let (result, line) = crate::lifecycle::wdog_access(p, hw, frame, offset, width, write, value);
    if let Some(level) = line {
        emulated_line(sys, cpu, hw, p, crate::lifecycle::WDOG_INTID, level);
    }
    result
}

/// A guest access to its PL061 GPIO (`lifecycle`, the power button).
#[cold]
#[inline(never)]
fn gpio_access(
    sys: &System,
    cpu: &mut CpuState,
    hw: &mut impl Hw,
    p: &Partition,
    offset: u64,
    write: bool,
    value: u64,
) -> u64 {
    let (result, line) = crate::lifecycle::gpio_access(p, offset, write, value);
    if let Some(level) = line {
        emulated_line(sys, cpu, hw, p, pinfold_vboard::GUEST_GPIO_INTID, level);
    }
    result
}

/// Give `p` the level of one of its emulated devices' interrupt lines
/// (watchdog WS0, GPIO), from whichever CPU changed it.
pub(crate) fn emulated_line(
    sys: &System,
    cpu: &mut CpuState,
    hw: &mut impl Hw,
    p: &Partition,
    intid: u32,
    level: bool,
) {
    signal_line(sys, cpu, hw, p, intid, level, LockPath::Management);
}

/// The one place an emulated device's interrupt line (the PL011's, the
/// watchdog's, the PL061's) reaches its partition, by its GIC interface:
/// with the GICv3 one, the emulated distributor (`set_emulated_level`,
/// then list registers or a mailbox); with the GICv5 one, a GIC VDPEND of
/// the partition's own VM (partition index = VM ID, as
/// `vgic5::VcpuSwitch::for_vcpu` loads it) for the device's virtual SPI
/// (`vgic5::vdpend_operand`), which the vIRS delivers to the vCPU it is
/// targeted at with no list register and no mailbox.
fn signal_line(
    sys: &System,
    cpu: &mut CpuState,
    hw: &mut impl Hw,
    p: &Partition,
    intid: u32,
    level: bool,
    path: LockPath,
) {
    match p.gic {
        crate::vgic5::GicInterface::V5 => {
            if let Some(op) = crate::vgic5::vdpend_operand(p.index as u16, intid, level) {
                hw.virs_pend(op);
            }
        }
        crate::vgic5::GicInterface::V3 => {
            let mut dist = p.dist.lock(path);
            dist.set_emulated_level(intid, level, &mut |act| dist_action(sys, cpu, hw, p, act));
        }
    }
}

#[allow(clippy::too_many_arguments)]
#[inline(never)]
fn uart_access(
    sys: &System,
    cpu: &mut CpuState,
    hw: &mut impl Hw,
    p: &Partition,
    offset: u64,
    width: u8,
    write: bool,
    value: u64,
) -> u64 {
    let mut con = p.console.lock(LockPath::ConsoleTrap);
    let con = &mut *con;
    let result = if write {
        let source = p.index as u32 + 1;
        let crate::partition::Console {
            pl011,
            prefix,
            ring,
            ..
        } = con;
        pl011.write(offset, width, value, &mut |byte| {
            ring.push(&[byte]);
            prefix.feed(byte, &mut |line| hw.console_line(source, line));
        });
        if prefix.ends_with_prompt() {
            prefix.flush(&mut |line| hw.console_line(source, line));
        }
        0
    } else {
        con.pl011.read(offset, width)
    };
    uart_line(sys, cpu, hw, p, con, LockPath::ConsoleTrap);
    result
}

/// Give the partition the PL011's interrupt line if it changed since it
/// was last given ([`signal_line`]): the distributor's lock is taken (or
/// the VDPEND issued) only on an edge, not on every character a guest
/// writes. Called with the console locked, so the remembered level and the
/// distributor's never disagree.
fn uart_line(
    sys: &System,
    cpu: &mut CpuState,
    hw: &mut impl Hw,
    p: &Partition,
    con: &mut crate::partition::Console,
    path: LockPath,
) {
    let level = con.pl011.irq_level();
    if level == con.line {
        return;
    }
    con.line = level;
    signal_line(sys, cpu, hw, p, GUEST_UART_INTID, level, path);
}

/// Apply one distributor action: deliver injections (locally or through the
/// target CPU's mailbox), program the physical distributor for the
/// partition's own SPIs, report refusals. Runs under the partition's
/// distributor lock; nothing is buffered, so nothing can be dropped for want
/// of a slot.
fn dist_action(sys: &System, cpu: &mut CpuState, hw: &mut impl Hw, p: &Partition, act: DistAction) {
    match act {
        DistAction::Inject { vcpu, irq } => deliver(sys, cpu, hw, p, vcpu, MailboxOp::Inject(irq)),
        DistAction::Retract { vcpu, intid } => {
            deliver(sys, cpu, hw, p, vcpu, MailboxOp::Retract(intid))
        }
        DistAction::PhysSpiEnable { intid, enable } => {
            hw.spi(LockPath::PhysDist, SpiOp::Enable { intid, enable })
        }
        DistAction::PhysSpiRoute { intid, vcpu } => {
            if let Some(s) = p.vcpus.get(vcpu) {
                let mpidr = sys.cpus[s.pcpu].mpidr.load(Ordering::Relaxed);
                hw.spi(LockPath::PhysDist, SpiOp::Route { intid, mpidr });
            }
        }
        DistAction::PhysSpiPending { .. } | DistAction::PhysSpiActive { .. } => {
            // Pending/active of a pass-through SPI stay with the hardware;
            // the guest's view is the list register's.
        }
        DistAction::Refused { intid, what } => fault(
            p,
            hw,
            FaultKind::ForeignSpi,
            format_args!("{what} SPI {intid} it does not own: ignored"),
        ),
    }
}

/// Deliver `op` to vCPU `vcpu` of `p`: into our own list registers when it
/// runs here, otherwise through its CPU's mailbox.
fn deliver(
    sys: &System,
    cpu: &mut CpuState,
    hw: &mut impl Hw,
    p: &Partition,
    vcpu: usize,
    op: MailboxOp,
) {
    let Some(s) = p.vcpus.get(vcpu) else {
        return;
    };
    let here = cpu
        .loaded
        .as_ref()
        .is_some_and(|l| l.id.partition == p.index && l.id.vcpu == vcpu);
    if s.pcpu == cpu.index && here {
        apply_op(cpu, hw, p, op);
    } else {
        post_remote(sys, cpu.index, hw, p, s.pcpu, op);
    }
}

/// Apply a mailbox operation to the vCPU loaded here.
#[inline(always)]
fn apply_op(cpu: &mut CpuState, hw: &mut impl Hw, p: &Partition, op: MailboxOp) {
    let CpuState {
        lrs,
        loaded,
        public,
        ..
    } = cpu;
    let Some(loaded) = loaded.as_mut() else {
        return;
    };
    match op {
        MailboxOp::Inject(irq) => inject_into(public, p, lrs, hw, irq),
        MailboxOp::Retract(intid) => lrs.retract(&mut Lrs(hw), intid),
        MailboxOp::Sgi(intid) => {
            if let Some(irq) = loaded.vredist.raise_sgi(intid) {
                inject_into(public, p, lrs, hw, irq);
            }
        }
        MailboxOp::LpiRecheck(vintid) => {
            let again = loaded
                .vredist
                .lpi_recheck(vintid, &mut PartitionRam { p, hw: &mut *hw });
            if let Some(irq) = again {
                inject_into(public, p, lrs, hw, irq);
            }
        }
    }
}

/// Inject into the vCPU running on this CPU: its own list registers only,
/// no lock shared between CPUs. A full overflow queue is counted and
/// reported, never silent.
#[inline(always)]
fn inject_into(
    public: &PublicCpu,
    p: &Partition,
    lrs: &mut crate::vgic::lr::LrManager,
    hw: &mut impl Hw,
    irq: VirtIrq,
) {
    public.counters.injected();
    if let Err(e) = lrs.inject(&mut Lrs(hw), irq) {
        lost(public, p, hw, irq.intid, e);
    }
}

#[cold]
#[inline(never)]
fn lost(
    public: &PublicCpu,
    p: &Partition,
    hw: &mut impl Hw,
    intid: u32,
    e: crate::vgic::lr::InjectError,
) {
    public.counters.dropped();
    fault(
        p,
        hw,
        FaultKind::Dropped,
        format_args!("interrupt {intid} lost: {e}"),
    );
}

/// Post `op` to CPU `pcpu`'s mailbox and kick it. A mailbox that stays full
/// after bounded retries loses the operation: counted as the partition's
/// fault and reported.
fn post_remote(
    sys: &System,
    me: usize,
    hw: &mut impl Hw,
    p: &Partition,
    pcpu: usize,
    op: MailboxOp,
) {
    let Some(target) = sys.cpus.get(pcpu) else {
        return;
    };
    let posted = (0..POST_RETRIES).any(|_| {
        let ok = target.mailbox.post(op);
        if !ok {
            core::hint::spin_loop();
        }
        ok
    });
    if !posted {
        fault(
            p,
            hw,
            FaultKind::Dropped,
            format_args!("mailbox of CPU {pcpu} full: {op:?} lost"),
        );
    }
    sys.kick(hw, me, pcpu);
}

#[allow(clippy::too_many_arguments)]
fn sysreg(
    sys: &System,
    cpu: &mut CpuState,
    hw: &mut impl Hw,
    p: &Partition,
    v: usize,
    reg: SysRegId,
    rt: u8,
    read: bool,
    regs: &mut GuestRegs,
) -> bool {
    if reg == SysRegId::ICC_SGI1R_EL1
        || reg == SysRegId::ICC_ASGI1R_EL1
        || reg == SysRegId::ICC_SGI0R_EL1
    {
        if !read {
            send_sgi(sys, cpu, hw, p, v, regs.reg(rt));
        }
        return true;
    }
    if p.gic == crate::vgic5::GicInterface::V5 {
        if let Some(done) = ppi_trap(hw, p, reg, rt, read, regs) {
            return done;
        }
    }
    if let Some(r) = pmu::classify(reg) {
        let Some(view) = cpu.loaded.as_ref().map(|l| l.pmu) else {
            return false;
        };
        let access = if read {
            PmuAccess::Read
        } else {
            PmuAccess::Write(regs.reg(rt))
        };
        return match pmu::on_trap(&view, r, access) {
            PmuAction::Read(r) => {
                regs.set_reg(rt, hw.pmu_read(r));
                true
            }
            PmuAction::Write(r, value) => {
                hw.pmu_write(r, value);
                true
            }
            PmuAction::Undef => false,
        };
    }
    if reg.is_id_group3() {
        if read {
            let real = hw.read_id_reg(reg);
            regs.set_reg(rt, id_reg_view(reg, real, pmu_policy(p)));
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
            regs.set_reg(rt, 0);
        }
        return true;
    }
    false
}

/// A `gicv5` guest's trapped ICC_PPI_* access (its load trapped them
/// because it has hidden PPIs: `vgic5::ppitrap`): emulated on the resident
/// vCPU's ICH_PPI_*_EL2 state with the PPIs its plan makes visible; None
/// for any other register.
#[inline(never)]
fn ppi_trap(
    hw: &mut impl Hw,
    p: &Partition,
    reg: SysRegId,
    rt: u8,
    read: bool,
    regs: &mut GuestRegs,
) -> Option<bool> {
    use crate::vgic5::ppitrap::{emulate, PpiEmulation};
    // The same plan the vCPU's load used (`VcpuSwitch::for_vcpu`); what is
    // visible does not depend on pinning.
    let visible = crate::vgic5::PpiPlan::for_vcpu(true, p.plan.pmu).visible;
    let write = (!read).then(|| regs.reg(rt));
    match emulate(reg, write, visible)? {
        PpiEmulation::Read { state, mask } => regs.set_reg(rt, hw.vppi_read(state) & mask),
        e @ PpiEmulation::Write { state, .. } => {
            let old = hw.vppi_read(state);
            hw.vppi_write(state, e.apply(old));
        }
    }
    Some(true)
}

#[inline(never)]
fn send_sgi(
    sys: &System,
    cpu: &mut CpuState,
    hw: &mut impl Hw,
    p: &Partition,
    v: usize,
    value: u64,
) {
    // GICv4.1, once the guest set GICD_CTLR.nASSGIreq: each target's vPE
    // straight through the ITS, no receiver exit. The frame is tested
    // before the flag, so a chip that has none (GICv5's) drops the test.
    if let Some(d) = p.vsgi.as_ref() {
        if let Some(frame) = hw.v41().filter(|_| d.direct()) {
            let direct = &d.direct;
            let res = direct.send(frame, &p.sgi, &p.vcpu_mpidrs, value, v);
            if res.outside > 0 {
                sgi_outside(p, hw, (value >> 24 & 0xF) as u8, res.outside);
            }
            return;
        }
    }
    let (intid, res) = p.sgi.resolve(&p.vcpu_mpidrs, value, v);
    // The common IPI: one sibling, nobody outside.
    if res.outside == 0 && res.vcpus.is_power_of_two() {
        let t = res.vcpus.trailing_zeros() as usize;
        if t != v {
            if let Some(c) = p.vcpus.get(t).and_then(|s| sys.cpus.get(s.pcpu)) {
                c.mailbox.post_sgi(u32::from(intid));
                hw.send_sgi(c.mpidr.load(Ordering::Relaxed), SGI_MAILBOX);
            }
            return;
        }
    }
    send_sgi_general(sys, cpu, hw, p, v, intid, res);
}

#[inline(never)]
fn send_sgi_general(
    sys: &System,
    cpu: &mut CpuState,
    hw: &mut impl Hw,
    p: &Partition,
    v: usize,
    intid: u8,
    res: crate::vgic::sgi::SgiResolution,
) {
    if res.outside > 0 {
        sgi_outside(p, hw, intid, res.outside);
    }
    let intid = u32::from(intid);
    for t in ones(res.vcpus) {
        let t = t as usize;
        if t == v {
            sgi_to_self(cpu, hw, p, intid);
        } else if let Some(target) = p.vcpus.get(t) {
            // An SGI is a doorbell bit: it needs no slot and cannot be lost.
            if let Some(c) = sys.cpus.get(target.pcpu) {
                c.mailbox.post_sgi(intid);
                hw.send_sgi(c.mpidr.load(Ordering::Relaxed), SGI_MAILBOX);
            }
        }
    }
}

#[inline(never)]
fn sgi_to_self(cpu: &mut CpuState, hw: &mut impl Hw, p: &Partition, intid: u32) {
    apply_op(cpu, hw, p, MailboxOp::Sgi(intid));
}

#[cold]
#[inline(never)]
fn sgi_outside(p: &Partition, hw: &mut impl Hw, intid: u8, outside: u32) {
    fault(
        p,
        hw,
        FaultKind::ForeignCpu,
        format_args!("SGI {intid} to {outside} target(s) outside the partition: dropped"),
    );
}

/// The caller's RAM and the management operations, sharing the hardware.
struct Caller<'a, 'h, H: Hw> {
    p: &'a Partition,
    hw: &'a RefCell<&'h mut H>,
}

impl<H: Hw> GuestMemory for Caller<'_, '_, H> {
    fn ram_range(&self) -> IpaRange {
        IpaRange::new(self.p.ram_ipa, self.p.ram_size)
    }
    fn write(&mut self, ipa: Ipa, bytes: &[u8]) -> Result<(), GuestMemoryFault> {
        let pa = self
            .p
            .host_addr(ipa.0, bytes.len() as u64)
            .ok_or(GuestMemoryFault)?;
        HostMemory::write(&mut **self.hw.borrow_mut(), pa, bytes);
        Ok(())
    }
    fn read(&self, ipa: Ipa, out: &mut [u8]) -> Result<(), GuestMemoryFault> {
        let pa = self
            .p
            .host_addr(ipa.0, out.len() as u64)
            .ok_or(GuestMemoryFault)?;
        HostMemory::read(&**self.hw.borrow(), pa, out);
        Ok(())
    }
}

fn hvc(
    sys: &System,
    cpu: &mut CpuState,
    hw: &mut impl Hw,
    p: &Partition,
    v: usize,
    regs: &mut GuestRegs,
) -> Next {
    let call = psci::decode(regs.x[0], regs.x[1], regs.x[2], regs.x[3]);
    let ret: i64 = match call {
        // The calls that only ask have one answer, psci::query's, which
        // handle_sync gives in line; these arms are reached from
        // handle_exit alone.
        Call::PsciVersion
        | Call::SmcccVersion
        | Call::PsciFeatures { .. }
        | Call::SmcccArchFeatures { .. }
        | Call::MigrateInfoType
        | Call::CpuSuspend { .. } => {
            psci::query(regs.x[0], regs.x[1]).unwrap_or(psci::NOT_SUPPORTED)
        }
        Call::CpuOn {
            target_mpidr,
            entry,
            context_id,
        } => cpu_on(sys, cpu.index, hw, p, target_mpidr, entry, context_id),
        Call::AffinityInfo { target_mpidr, .. } => match p.vcpu_by_mpidr(target_mpidr) {
            None => psci::INVALID_PARAMETERS,
            Some(t) => p.vcpus[t].power.state().affinity_info(),
        },
        Call::CpuOff | Call::SystemOff | Call::SystemReset => {
            return power_call(sys, cpu, hw, p, v, call)
        }
        Call::Pinfold { .. } => return management_call(sys, cpu, hw, p, regs),
        Call::Unknown { .. } => psci::NOT_SUPPORTED,
    };
    regs.x[0] = ret as u64;
    Next::Resume
}

/// PSCI calls that take the vCPU or its partition down.
#[cold]
#[inline(never)]
fn power_call(
    sys: &System,
    cpu: &mut CpuState,
    hw: &mut impl Hw,
    p: &Partition,
    v: usize,
    call: Call,
) -> Next {
    match call {
        Call::SystemOff => {
            hw.log(format_args!(
                "partition {}: powered off by the guest",
                p.name
            ));
            // The end of a graceful shutdown the operator asked for is
            // not the restart policy's business.
            let requested = p.state() == State::ShuttingDown;
            sys.stop_partition_for(p, hw, cpu.index, "stopped (powered off by the guest)");
            if !requested {
                sys.after_stop(
                    p,
                    hw,
                    cpu.index,
                    Cause::PowerOff,
                    "powered off by the guest",
                );
            }
            Next::Stopped
        }
        // The management partition's resets go through its restart
        // policy too, so a manager that resets in a loop backs off.
        Call::SystemReset if p.plan.management => {
            hw.log(format_args!("partition {}: reset by the guest", p.name));
            sys.stop_partition_for(p, hw, cpu.index, "stopped (reset by the guest)");
            sys.after_stop(p, hw, cpu.index, Cause::PowerOff, "reset by the guest");
            Next::Stopped
        }
        Call::SystemReset => {
            hw.log(format_args!("partition {}: reset by the guest", p.name));
            sys.stop_partition_for(p, hw, cpu.index, "stopped (reset by the guest)");
            Next::Restart(p.index)
        }
        _ => {
            hw.log(format_args!("partition {}: vCPU {v} off", p.name));
            Next::Park
        }
    }
}

/// A Pinfold vendor hypercall (the management ABI).
#[inline(never)]
fn management_call(
    sys: &System,
    cpu: &mut CpuState,
    hw: &mut impl Hw,
    p: &Partition,
    regs: &mut GuestRegs,
) -> Next {
    let args = [
        regs.x[0], regs.x[1], regs.x[2], regs.x[3], regs.x[4], regs.x[5],
    ];
    let cell = RefCell::new(hw);
    let mut caller = Caller { p, hw: &cell };
    let mut mgr = crate::manage::Manager {
        sys,
        cpu,
        hw: &cell,
    };
    if p.plan.management {
        // DMA faults and IRS software errors are counted before the
        // manager reads any count.
        sys.smmu_poll(&mut **cell.borrow_mut());
        sys.virs_poll(&mut **cell.borrow_mut());
    }
    let out = hypercall::dispatch(p.plan.management, &args, &mut caller, &mut mgr);
    regs.x[..4].copy_from_slice(&out);
    if p.plan.management {
        // One bounded step of the scrub queue per management call, so freed
        // RAM drains even when no CPU is idle (`scrub`).
        sys.scrub_step(cell.into_inner());
    }
    Next::Resume
}

fn cpu_on(
    sys: &System,
    me: usize,
    hw: &mut impl Hw,
    p: &Partition,
    target: u64,
    entry: u64,
    ctx: u64,
) -> i64 {
    let Some(t) = p.vcpu_by_mpidr(target) else {
        fault(
            p,
            hw,
            FaultKind::ForeignCpu,
            format_args!(
                "PSCI CPU_ON for MPIDR {target:#x}, not a vCPU of this partition: refused"
            ),
        );
        return psci::INVALID_PARAMETERS;
    };
    let s = &p.vcpus[t];
    // A vCPU already on or pending answers as PSCI says whatever the
    // entry; one that would start must start in its RAM.
    if s.power.state() == psci::PowerState::Off
        && !psci::entry_point_valid(entry, p.ram_ipa, p.ram_size)
    {
        fault(
            p,
            hw,
            FaultKind::BadEntry,
            format_args!(
                "PSCI CPU_ON of vCPU {t} at {entry:#x}, not an instruction in its RAM: refused"
            ),
        );
        return psci::INVALID_ADDRESS;
    }
    if let Err(e) = s.power.try_claim_on() {
        return e;
    }
    s.entry.store(entry, Ordering::Release);
    s.context.store(ctx, Ordering::Release);
    sys.request(hw, me, s.pcpu, REQ_CPU_ON);
    psci::SUCCESS
}

/// Load vCPU `id` on this CPU: a clean list-register state, the timer PPIs
/// disabled and inactive on this CPU's own redistributor, fresh counters and
/// mailbox, a reset emulated redistributor. Touches only this CPU's state:
/// no lock shared between CPUs. Returns what the platform writes to the
/// virtualisation registers.
pub fn load(sys: &System, cpu: &mut Cpu, hw: &mut impl Hw, boot: &Boot) -> VcpuContext {
    let id = boot.id;
    let p = &*boot.partition;
    cpu.resident = Some(boot.partition.clone());
    let cpu = &mut cpu.state;
    cpu.lrs.clear(&mut Lrs(hw));
    quiesce_owned_ppis(sys, hw, LockPath::VcpuLoad);
    let public = cpu.public;
    public.counters.reset();
    // Stale posts from a previous run of this vCPU.
    public.mailbox.clear();
    let last = id.vcpu + 1 == p.vcpus.len();
    let mpidr = p.vcpus[id.vcpu].mpidr;
    let dfr0 = hw.read_id_reg(ID_AA64DFR0_EL1);
    let pmcr_n = (hw.pmu_read(PmuReg::PMCR_EL0) >> pmu::PMCR_N_SHIFT) & pmu::PMCR_N_MASK;
    let view = PmuView::new(pmu_policy(p), dfr0, pmcr_n as u8);
    if let PmuView::Owned { .. } = view {
        // Nothing of the previous vCPU's counting carries over.
        for (r, value) in pmu::reset_writes(&view) {
            hw.pmu_write(r, value);
        }
    }
    cpu.vcpu = id.vcpu;
    cpu.loaded = Some(LoadedVcpu {
        id,
        vredist: {
            let r = VRedist::new(id.vcpu, mpidr, last, passthrough_ppis(p));
            if p.has_vits() {
                r.with_lpis()
            } else {
                r
            }
        },
        pmu: view,
    });
    cpu.hw_ppis = cpu
        .loaded
        .as_ref()
        .map_or_else(Default::default, |l| l.vredist.hw_ppis());
    // Its vPE resident here (GICv4.1 direct vSGIs): the vSGIs sent while
    // it was off are in its virtual CPU interface before it enters.
    if p.vsgi.is_some() {
        crate::vsgi::load(sys, &mut cpu.vsgi, hw, p, id.vcpu);
    }
    p.vcpus[id.vcpu].power.set_on();
    VcpuContext {
        vmpidr: mpidr,
        mdcr_el2: view.mdcr_el2(),
        vmid: p.vmid,
        stage2_root: p.stage2_root,
    }
}

/// Put the loaded vCPU: forget its interrupts and give the timer PPIs back
/// inactive and disabled. HW-linked interrupts still in the list registers
/// keep their physical SPI active; they are deactivated here. Own-CPU state
/// only, no lock. The platform silences the timers first.
pub fn put(sys: &System, cpu: &mut Cpu, hw: &mut impl Hw) {
    let resident = cpu.resident.take();
    let cpu = &mut cpu.state;
    let (Some(loaded), Some(p)) = (cpu.loaded.take(), resident) else {
        return;
    };
    cpu.hw_ppis = crate::percpu::HwPpis::default();
    let mut dropped = [0u32; MAX_LR_COUNT + crate::vgic::lr::QUEUE_CAPACITY];
    let mut n = 0;
    cpu.lrs.clear_reporting_hw(&mut Lrs(hw), &mut |pintid| {
        if pintid >= 32 && n < dropped.len() {
            dropped[n] = pintid;
            n += 1;
        }
    });
    for &pintid in &dropped[..n] {
        hw.deactivate(pintid);
    }
    quiesce_owned_ppis(sys, hw, LockPath::VcpuPut);
    // Its vPE leaves this CPU's redistributor (direct vLPIs): what arrives
    // from here on waits in its pending table, which the next load zeroes.
    if cpu.vlpi.resident().is_some() {
        if let Some(frame) = hw.vlpi_frame() {
            if cpu.vlpi.put(frame).is_err() {
                hw.log(format_args!(
                    "partition {}: vCPU {}'s vPE did not leave this CPU (GICR_VPENDBASER.Dirty stuck)",
                    p.name, loaded.id.vcpu
                ));
            }
        }
    }
    // Its vSGI vPE leaves too: what is sent from here on waits for the
    // next load.
    crate::vsgi::put(sys, &mut cpu.vsgi, hw, &p, loaded.id.vcpu);
    // The last use of `p` here: its clone is dropped after the vCPU reads
    // as off, so a destroy that waits for all-off may still find it held
    // for a moment (`runtime::reap`).
    p.vcpus[loaded.id.vcpu].power.set_off();
}

/// What the root IRQ handler does with an acknowledged interrupt (after
/// priority drop) that is not the host UART's.
#[inline(always)]
pub fn dispatch_irq(sys: &System, cpu: &mut Cpu, hw: &mut impl Hw, intid: u32) {
    match intid {
        PPI_VTIMER | PPI_PTIMER | PPI_PMU => timer_ppi(sys, cpu, hw, intid),
        SGI_MAILBOX => {
            hw.deactivate(intid);
            drain_mailbox(sys, cpu, hw);
        }
        crate::vgic::pits::LPI_BASE.. => lpi(sys, cpu, hw, intid),
        _ => {
            let Cpu { resident, state } = cpu;
            other_irq(sys, state, hw, resident.as_deref(), intid)
        }
    }
}

#[inline(never)]
fn drain_mailbox(sys: &System, cpu: &mut Cpu, hw: &mut impl Hw) {
    let Cpu {
        resident,
        state: cpu,
    } = cpu;
    let p = resident.as_deref();
    let public = cpu.public;
    let bell = public.mailbox.take();
    // Posts for a vCPU that is no longer loaded are dropped (a new load
    // clears the mailbox anyway).
    let Some(p) = p else {
        if bell.has_slots() {
            public.mailbox.drain_slots(bell, |_| {});
        }
        return;
    };
    bell.for_each_sgi(|intid| apply_op(cpu, hw, p, MailboxOp::Sgi(intid)));
    if bell.has_slots() {
        drain_slots(cpu, hw, p, bell);
    }
    // A kick from a GICD_CTLR write (`vsgi::ctlr_written`).
    if p.vsgi.is_some() {
        vsgi_resync(sys, cpu, hw, p);
    }
}

#[inline(never)]
fn drain_slots(
    cpu: &mut CpuState,
    hw: &mut impl Hw,
    p: &Partition,
    bell: crate::mailbox::Doorbell,
) {
    let public = cpu.public;
    public
        .mailbox
        .drain_slots(bell, |op| apply_op(cpu, hw, p, op));
}

/// The partition's RAM for the vLPI tables of its redistributors.
struct PartitionRam<'a, H: Hw> {
    p: &'a Partition,
    hw: &'a mut H,
}

impl<H: Hw> GuestMemory for PartitionRam<'_, H> {
    fn ram_range(&self) -> IpaRange {
        IpaRange::new(self.p.ram_ipa, self.p.ram_size)
    }
    fn write(&mut self, ipa: Ipa, bytes: &[u8]) -> Result<(), GuestMemoryFault> {
        let pa = self
            .p
            .host_addr(ipa.0, bytes.len() as u64)
            .ok_or(GuestMemoryFault)?;
        HostMemory::write(self.hw, pa, bytes);
        Ok(())
    }
    fn read(&self, ipa: Ipa, out: &mut [u8]) -> Result<(), GuestMemoryFault> {
        let pa = self
            .p
            .host_addr(ipa.0, out.len() as u64)
            .ok_or(GuestMemoryFault)?;
        HostMemory::read(&*self.hw, pa, out);
        Ok(())
    }
}

/// A physical LPI (a device's MSI through the physical ITS) taken on this
/// CPU: LPIs have no active state, so the priority drop was its EOI. Its
/// route (one atomic load) names the partition and vCPU; only the one
/// loaded here gets it, as the vLPI its redistributor's tables in the
/// guest's RAM say (injected, or kept pending there while disabled). No
/// lock on this path.
#[inline(never)]
fn lpi(sys: &System, cpu: &mut Cpu, hw: &mut impl Hw, intid: u32) {
    let (loaded, state) = cpu.split();
    let here = loaded.map(|(p, v)| (p.index as u16, v as u16));
    let Some(vintid) = sys.lpi_routes.deliver(intid, here) else {
        // Discarded or moved while pending, or a stray: nothing to do.
        return;
    };
    let Some((p, v)) = loaded else {
        return;
    };
    let Some(l) = state.loaded.as_ref() else {
        return;
    };
    state.public.counters.lpi();
    let delivery = l
        .vredist
        .lpi_arrived(vintid, &mut PartitionRam { p, hw: &mut *hw });
    match delivery {
        crate::vgic::redist::LpiDelivery::Inject(irq) => {
            state.public.counters.injected();
            deliver(sys, state, hw, p, v, MailboxOp::Inject(irq));
        }
        crate::vgic::redist::LpiDelivery::Pended => {}
        crate::vgic::redist::LpiDelivery::Dropped => fault(
            p,
            hw,
            FaultKind::Dropped,
            format_args!("LPI {vintid}: LPIs off or its tables outside RAM: dropped"),
        ),
    }
}

/// Maintenance and forwarded SPIs: out of line, so that the timer and
/// mailbox paths of the root handler keep their registers.
#[inline(never)]
fn other_irq(
    sys: &System,
    cpu: &mut CpuState,
    hw: &mut impl Hw,
    resident: Option<&Partition>,
    intid: u32,
) {
    match intid {
        PPI_MAINTENANCE => {
            hw.deactivate(intid);
            if let Some(p) = resident {
                maintenance(sys, cpu, hw, p);
            }
        }
        PPI_HYP_TIMER => {
            // The idle loop's wake-up (a scheduled restart) and the
            // lifecycle checks (watchdog, hung vCPU, shutdown deadline):
            // silenced, checked, armed again if still needed.
            hw.set_wakeup(None);
            hw.deactivate(intid);
            crate::lifecycle::on_timer(sys, cpu, hw);
        }
        _ => match (sys.spi_owner(intid), resident) {
            // The usual case: routed to a CPU of its owner, which runs.
            (Some(owner), Some(p)) if owner == p.index => passthrough_spi(sys, cpu, hw, p, intid),
            (Some(owner), _) => spi_elsewhere(sys, cpu, hw, owner, intid),
            (None, _) => {
                hw.deactivate(intid);
                hw.log(format_args!("unexpected interrupt {intid}"));
            }
        },
    }
}

/// A pass-through PPI of this CPU (timer, PMU) fired: forward it HW-linked
/// to the vCPU, which deactivates the physical interrupt when it
/// deactivates the virtual one.
#[inline(always)]
fn timer_ppi(sys: &System, cpu: &mut Cpu, hw: &mut impl Hw, intid: u32) {
    let Cpu {
        resident,
        state: cpu,
    } = cpu;
    // The mirror of the loaded vCPU's redistributor: nothing loaded, or the
    // guest has it disabled, reads as not enabled.
    match cpu.hw_ppis.fired(intid) {
        Some(irq) => {
            cpu.public.counters.injected();
            if let Err(e) = cpu.lrs.reinject_hw(&mut Lrs(hw), irq) {
                if let Some(p) = resident.as_deref() {
                    lost(cpu.public, p, hw, irq.intid, e);
                }
            }
        }
        None => silence_ppi(sys, hw, intid),
    }
}

/// A pass-through PPI no vCPU wants: silenced on our own redistributor.
#[cold]
#[inline(never)]
fn silence_ppi(sys: &System, hw: &mut impl Hw, intid: u32) {
    ppi_change(
        sys,
        hw,
        LockPath::TimerPpiState,
        PpiStateChange::Enable(intid, false),
    );
    hw.deactivate(intid);
}

fn maintenance(sys: &System, cpu: &mut CpuState, hw: &mut impl Hw, p: &Partition) {
    // At most one EOI per list register: MAX_LR_COUNT slots never overflow.
    let mut eoied = [0u32; MAX_LR_COUNT];
    let mut n = 0;
    cpu.lrs.maintenance(&mut Lrs(hw), &mut |intid| {
        if n < eoied.len() {
            eoied[n] = intid;
            n += 1;
        }
    });
    if n == 0 {
        return;
    }
    let mut dist = p.dist.lock(LockPath::Maintenance);
    for &intid in &eoied[..n] {
        dist.on_eoi(intid, &mut |act| dist_action(sys, cpu, hw, p, act));
    }
}

/// A physical SPI that arrived on a CPU not running its owner (the
/// guest routed it to a vCPU that is off, or the partition is down): the
/// owner is looked up (a cold path) and decides as usual.
#[cold]
#[inline(never)]
fn spi_elsewhere(sys: &System, cpu: &mut CpuState, hw: &mut impl Hw, owner: usize, intid: u32) {
    match sys.partition(owner) {
        Some(p) => passthrough_spi(sys, cpu, hw, &p, intid),
        None => mask_spi(hw, intid),
    }
}

/// Mask SPI `intid` and end it: its line is sampled again when its guest
/// enables it.
fn mask_spi(hw: &mut impl Hw, intid: u32) {
    hw.spi(
        LockPath::SpiForward,
        SpiOp::Enable {
            intid,
            enable: false,
        },
    );
    hw.deactivate(intid);
}

/// A physical SPI owned by a partition: forward it HW-linked (vINTID ==
/// pINTID) so the guest's deactivation reaches the device's line.
fn passthrough_spi(sys: &System, cpu: &mut CpuState, hw: &mut impl Hw, p: &Partition, intid: u32) {
    let target = p.dist.lock(LockPath::SpiForward).passthrough_fired(intid);
    match target {
        Some((vcpu, irq)) => deliver(sys, cpu, hw, p, vcpu, MailboxOp::Inject(irq)),
        // The guest has it disabled (or the partition is down).
        None => mask_spi(hw, intid),
    }
}

/// After an interrupt taken from the guest: what requests say to do.
#[inline]
pub fn after_guest_irq(cpu: &mut Cpu) -> Next {
    let public = cpu.state.public;
    public.counters.exit(ExitClass::Irq);
    let req = public.take_requests();
    if req & REQ_STOP != 0 {
        // A start posted together with the stop (a restart) is for the idle
        // loop we are about to enter.
        public.post_request(req & REQ_START);
        return Next::Park;
    }
    // A start or CPU_ON while this vCPU runs is stale: CPU_ON was refused by
    // the power state machine, and a start follows a stop.
    Next::Resume
}

/// A vPE doorbell taken on this CPU (the driver's `ack` ended it and kept
/// it, `Gicv5Cpu::take_doorbell`): the doorbell LPI of CPU `doorbell_cpu`,
/// which belongs to the vCPU pinned there (`vgic5::IrsLayout::doorbell_lpi`,
/// as the boot's vIRS armed it). The core decides (`vgic5::on_doorbell`);
/// a woken vCPU's doorbell is re-armed (its IRS's lock, nothing else: the
/// IRS's software error records wait for the next management call or
/// stats report, [`System::virs_poll`], rather than every IRS's lock being
/// taken here on an interrupt).
#[cold]
#[inline(never)]
pub fn doorbell(
    sys: &System,
    cpu: &Cpu,
    hw: &mut impl Hw,
    doorbell_cpu: usize,
) -> crate::vgic5::DoorbellAction {
    use crate::vgic5::{on_doorbell, DoorbellAction, DoorbellVcpu, GicInterface};
    let owner = sys.assigned(doorbell_cpu).and_then(|id| {
        let p = sys.partition(id.partition)?;
        let shared = p.vcpus.get(id.vcpu)?;
        (p.gic == GicInterface::V5).then(|| DoorbellVcpu {
            vm: id.partition as u16,
            vpe: id.vcpu as u16,
            loaded_here: doorbell_cpu == cpu.state.index
                && cpu.state.loaded.as_ref().is_some_and(|l| l.id == id),
            power: shared.power.state(),
            up: p.state().is_up(),
        })
    });
    let action = on_doorbell(owner);
    match action {
        DoorbellAction::Wake { vm, vpe } => hw.virs_rearm(vm, vpe, doorbell_cpu),
        DoorbellAction::Unowned => hw.log(format_args!(
            "gicv5: doorbell of CPU {doorbell_cpu}, which runs no gicv5 vCPU: ignored"
        )),
        DoorbellAction::Resident | DoorbellAction::Parked { .. } => {}
    }
    action
}

/// The idle loop's decision: which vCPU to enter, if a request says so.
/// With nothing to enter, the platform runs [`System::idle_scrub`] and
/// waits for an interrupt only once it returns false.
/// A restart the policy scheduled for a partition of this CPU is started
/// first once it is due (the platform wakes the CPU then: [`idle_deadline`]).
pub fn idle_work(sys: &System, cpu: &mut Cpu, hw: &mut impl Hw) -> Option<Boot> {
    let cpu = &mut cpu.state;
    let wakeup = sys.restart_due_on(cpu.index);
    if wakeup.is_some() {
        restart_if_due(sys, cpu, hw);
        hw.set_wakeup(sys.wakeup_on(cpu, hw.now(), hw.counter_frequency()));
    }
    let req = cpu.public.take_requests();
    if req & (REQ_CPU_ON | REQ_START) == 0 {
        return None;
    }
    let id = sys.assigned(cpu.index)?;
    let p = sys.partition(id.partition)?;
    if !p.state().is_up() {
        return None;
    }
    // Lifecycle hook: the checks of a watched partition run on every CPU
    // of it from its vCPU's entry on.
    cpu.hang.reset();
    let now = hw.now();
    hw.set_wakeup(sys.wakeup_on(cpu, now, hw.counter_frequency()));
    let shared = &p.vcpus[id.vcpu];
    if req & REQ_START != 0 && id.vcpu == 0 {
        let entry = p.entry_ipa.load(Ordering::Relaxed);
        hw.log(format_args!(
            "partition {}: booting vCPU 0 at IPA {entry:#x}",
            p.name
        ));
        let _ = shared.power.try_claim_on();
        if p.state() == State::Starting {
            p.set_state(State::Running, now);
        }
        return Some(Boot {
            partition: p.clone(),
            id,
            entry,
            x0: p.dtb_ipa.load(Ordering::Relaxed),
        });
    }
    if req & REQ_CPU_ON != 0 && shared.power.state() == PowerState::OnPending {
        return Some(Boot {
            partition: p.clone(),
            id,
            entry: shared.entry.load(Ordering::Acquire),
            x0: shared.context.load(Ordering::Acquire),
        });
    }
    None
}

#[cold]
#[inline(never)]
fn restart_if_due(sys: &System, cpu: &mut CpuState, hw: &mut impl Hw) {
    let now = hw.now();
    if let Some(p) = sys.partition_on(cpu.index) {
        if p.vcpus[0].pcpu != cpu.index {
            return;
        }
        if !p.state().is_up() && sys.take_restart_due(&p, now) {
            if !sys.wait_all_off(&p, hw) {
                hw.log(format_args!(
                    "partition {}: a vCPU did not stop in time",
                    p.name
                ));
            }
            hw.log(format_args!("partition {}: restarting", p.name));
            // Posts REQ_START to this CPU, taken right after.
            let _ = sys.start_partition(&p, hw, cpu.index);
        }
    }
}

/// When the idle loop of this CPU must wake on its own (counter value), if
/// ever: a scheduled restart (the lifecycle checks add theirs,
/// [`System::wakeup_on`]).
pub fn idle_deadline(sys: &System, cpu: &Cpu) -> Option<u64> {
    sys.restart_due_on(cpu.state.index)
}

/// Queue console input for `p` (host UART or management); returns how many
/// bytes fitted in its receive FIFO.
pub fn console_input(
    sys: &System,
    cpu: &mut CpuState,
    hw: &mut impl Hw,
    p: &Partition,
    bytes: &[u8],
) -> usize {
    let mut con = p.console.lock(LockPath::ConsoleIo);
    let accepted = bytes.iter().take_while(|&&b| con.pl011.push_rx(b)).count();
    uart_line(sys, cpu, hw, p, &mut con, LockPath::ConsoleIo);
    accepted
}

const CTRL_A: u8 = 0x01;

/// What the monitor asks of the platform.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Monitor {
    Nothing,
    /// Ctrl-A x: power the machine off.
    PowerOff,
}

/// One byte of host UART input: the Ctrl-A monitor, or input for the
/// partition marked `console_input`.
///
/// Ctrl-A m sends the rest of the line (through Enter) to the management
/// partition's console: the manager's console commands (`status`,
/// `poweroff`, ...) stay reachable from the host console, the one place
/// they may come from (the API refuses input to the management partition).
pub fn host_input(sys: &System, cpu: &mut CpuState, hw: &mut impl Hw, byte: u8) -> Monitor {
    if sys.mgmt_line.load(Ordering::Relaxed) {
        if byte == b'\r' || byte == b'\n' {
            sys.mgmt_line.store(false, Ordering::Relaxed);
        }
        if let Some(p) = sys.partitions().into_iter().find(|p| p.plan.management) {
            console_input(sys, cpu, hw, &p, &[byte]);
        }
        return Monitor::Nothing;
    }
    if sys.escape.swap(false, Ordering::Relaxed) {
        match byte {
            b's' => sys.stats(hw),
            b'm' => {
                hw.log(format_args!(
                    "monitor: the next line goes to the management partition's console"
                ));
                sys.mgmt_line.store(true, Ordering::Relaxed);
            }
            b'x' => {
                hw.log(format_args!("monitor: powering off"));
                return Monitor::PowerOff;
            }
            CTRL_A => to_input_partition(sys, cpu, hw, byte),
            _ => hw.log(format_args!(
                "monitor: Ctrl-A s = stats, Ctrl-A m = a line to the manager's console, \
                 Ctrl-A x = power off, Ctrl-A Ctrl-A = send Ctrl-A"
            )),
        }
        return Monitor::Nothing;
    }
    if byte == CTRL_A {
        sys.escape.store(true, Ordering::Relaxed);
        return Monitor::Nothing;
    }
    to_input_partition(sys, cpu, hw, byte);
    Monitor::Nothing
}

fn to_input_partition(sys: &System, cpu: &mut CpuState, hw: &mut impl Hw, byte: u8) {
    if let Some(p) = sys.partitions().into_iter().find(|p| p.plan.console.input) {
        console_input(sys, cpu, hw, &p, &[byte]);
    }
}

#[cfg(test)]
#[path = "exit_tests.rs"]
mod tests;
