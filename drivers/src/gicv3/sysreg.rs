//! GICv3 CPU interface system registers used at EL2 (Arm IHI 0069, chapter
//! 12): ICC_* for the hypervisor's own interrupts, ICH_* for the guest's
//! virtual CPU interface. Through the crates we depend on: arm-gic's
//! `GicCpuInterface` where it has the operation, arm-sysregs (arm-gic's own
//! register crate) for the ICC registers arm-gic's API does not offer,
//! aarch64-cpu's typed ICC_SRE_EL2 and ICH_* registers; a raw `mrs` only
//! for ICH_ELRSR_EL2, which neither crate has.

use aarch64_cpu::registers::{
    Readable, Writeable, ICC_SRE_EL2, ICH_AP0R0_EL2, ICH_AP1R0_EL2, ICH_HCR_EL2, ICH_LR0_EL2,
    ICH_LR10_EL2, ICH_LR11_EL2, ICH_LR12_EL2, ICH_LR13_EL2, ICH_LR14_EL2, ICH_LR15_EL2,
    ICH_LR1_EL2, ICH_LR2_EL2, ICH_LR3_EL2, ICH_LR4_EL2, ICH_LR5_EL2, ICH_LR6_EL2, ICH_LR7_EL2,
    ICH_LR8_EL2, ICH_LR9_EL2, ICH_VMCR_EL2, ICH_VTR_EL2,
};
use arm_gic::gicv3::GicCpuInterface;
use arm_gic::{IntId, InterruptGroup};
use arm_sysregs::el1::accessors::{
    read_icc_ctlr_el1, write_icc_bpr1_el1, write_icc_ctlr_el1, write_icc_dir_el1,
    write_icc_eoir1_el1, write_icc_sgi1r_el1,
};
use arm_sysregs::el1::registers::{IccBpr1El1, IccCtlrEl1, IccDirEl1, IccEoir1El1, IccSgi1rEl1};
use core::arch::asm;

/// ICH_HCR_EL2.
#[inline(always)]
pub fn set_ich_hcr_el2(v: u64) {
    ICH_HCR_EL2.set(v);
}

/// ICH_ELRSR_EL2: which list registers are empty. Raw: aarch64-cpu 11 has
/// no ICH_ELRSR_EL2 (and arm-gic no ICH_* at all).
#[inline(always)]
pub fn ich_elrsr_el2() -> u64 {
    let v: u64;
    // SAFETY: ICH_ELRSR_EL2 is read-only and reading it has no side effect.
    unsafe { asm!("mrs {}, S3_4_C12_C11_5", out(reg) v, options(nomem, nostack)) };
    v
}

/// ICH_VMCR_EL2.
pub fn set_ich_vmcr_el2(v: u64) {
    ICH_VMCR_EL2.set(v);
}

/// ICH_AP0R0_EL2.
pub fn set_ich_ap0r0_el2(v: u64) {
    ICH_AP0R0_EL2.set(v);
}

/// ICH_AP1R0_EL2.
pub fn set_ich_ap1r0_el2(v: u64) {
    ICH_AP1R0_EL2.set(v);
}

/// ICH_LR<n>_EL2 (0 for `n` >= 16). One register per arm of the `match`: a
/// list register is named in the instruction, so access by index is a
/// jump table, never a loop.
#[inline]
pub fn read_lr(n: usize) -> u64 {
    match n {
        0 => ICH_LR0_EL2.get(),
        1 => ICH_LR1_EL2.get(),
        2 => ICH_LR2_EL2.get(),
        3 => ICH_LR3_EL2.get(),
        4 => ICH_LR4_EL2.get(),
        5 => ICH_LR5_EL2.get(),
        6 => ICH_LR6_EL2.get(),
        7 => ICH_LR7_EL2.get(),
        8 => ICH_LR8_EL2.get(),
        9 => ICH_LR9_EL2.get(),
        10 => ICH_LR10_EL2.get(),
        11 => ICH_LR11_EL2.get(),
        12 => ICH_LR12_EL2.get(),
        13 => ICH_LR13_EL2.get(),
        14 => ICH_LR14_EL2.get(),
        15 => ICH_LR15_EL2.get(),
        _ => 0,
    }
}

/// ICH_LR<n>_EL2. `n` must be below ICH_VTR_EL2.ListRegs + 1.
#[inline(always)]
pub fn write_lr(n: usize, v: u64) {
    match n {
        0 => ICH_LR0_EL2.set(v),
        1 => ICH_LR1_EL2.set(v),
        2 => ICH_LR2_EL2.set(v),
        3 => ICH_LR3_EL2.set(v),
        4 => ICH_LR4_EL2.set(v),
        5 => ICH_LR5_EL2.set(v),
        6 => ICH_LR6_EL2.set(v),
        7 => ICH_LR7_EL2.set(v),
        8 => ICH_LR8_EL2.set(v),
        9 => ICH_LR9_EL2.set(v),
        10 => ICH_LR10_EL2.set(v),
        11 => ICH_LR11_EL2.set(v),
        12 => ICH_LR12_EL2.set(v),
        13 => ICH_LR13_EL2.set(v),
        14 => ICH_LR14_EL2.set(v),
        15 => ICH_LR15_EL2.set(v),
        _ => {}
    }
}

/// Number of implemented list registers (ICH_VTR_EL2.ListRegs + 1).
pub fn lr_count() -> usize {
    ICH_VTR_EL2.read(ICH_VTR_EL2::ListRegs) as usize + 1
}

/// ICC_SRE_EL2: system registers on (SRE), IRQ/FIQ bypass off (DIB, DFB),
/// EL1 may use ICC_SRE_EL1 (Enable). One write through aarch64-cpu's typed
/// register: arm-gic's `enable_system_register_el2` sets only SRE and
/// Enable (DIB/DFB stay as firmware left them) and needs arm-gic's `el2`
/// feature, another generated register crate.
const ICC_SRE_EL2_ON: u64 = ICC_SRE_EL2::SRE::SET.value
    | ICC_SRE_EL2::DFB::SET.value
    | ICC_SRE_EL2::DIB::SET.value
    | ICC_SRE_EL2::ENABLE::SET.value;

// The raw values these registers were written with before the typed
// accessors: a field change must change these on purpose.
const _: () = assert!(ICC_SRE_EL2_ON == 0xf);
const _: () = assert!(IccCtlrEl1::EOIMODE.bits() == 1 << 1);
const _: () = assert!(ICH_HCR_EL2::En::SET.value == 1);

/// Set up this CPU's interface for EL2: system registers on (and allowed at
/// EL1), split priority drop / deactivation (EOImode = 1) so that a
/// HW-linked interrupt stays active until the guest deactivates it, all
/// priorities unmasked, group 1 on, the virtual CPU interface enabled.
pub fn init_cpu_interface() {
    ICC_SRE_EL2.set(ICC_SRE_EL2_ON);
    // SAFETY: an ISB makes the SRE write visible before the next ICC access.
    unsafe { asm!("isb", options(nomem, nostack)) };
    GicCpuInterface::set_priority_mask(0xff);
    // Neither ICC_BPR1_EL1 nor ICC_CTLR_EL1.EOImode is in arm-gic's API.
    write_icc_bpr1_el1(IccBpr1El1::empty());
    write_icc_ctlr_el1(read_icc_ctlr_el1() | IccCtlrEl1::EOIMODE);
    GicCpuInterface::enable_group1(true);
    set_ich_vmcr_el2(0);
    set_ich_ap0r0_el2(0);
    set_ich_ap1r0_el2(0);
    for n in 0..lr_count() {
        write_lr(n, 0);
    }
    ICH_HCR_EL2.write(ICH_HCR_EL2::En::SET);
}

/// Acknowledge the highest priority pending group 1 interrupt (1023: none).
pub fn ack() -> u32 {
    GicCpuInterface::get_and_acknowledge_interrupt(InterruptGroup::Group1)
        .map_or(IntId::SPECIAL_NONE.raw_value(), IntId::raw_value)
}

/// Priority drop (EOImode = 1): the INTID ICC_IAR1_EL1 gave, written back
/// to ICC_EOIR1_EL1. Not through arm-gic's `end_interrupt`: its `IntId`
/// conversion range-checks the value, and since the root handler passes
/// LPIs on too (8192 and up) those checks no longer fold away; they made
/// this an out-of-line call of 12 instructions on every interrupt (the
/// vtimer row 90.8 -> 105.8). An acknowledged INTID is always valid here.
#[inline(always)]
pub fn priority_drop(intid: u32) {
    write_icc_eoir1_el1(IccEoir1El1::from_bits_retain(u64::from(intid)));
}

/// Deactivate (EOImode = 1). arm-gic has no ICC_DIR_EL1.
pub fn deactivate(intid: u32) {
    write_icc_dir_el1(IccDirEl1::from_bits_retain(u64::from(intid)));
}

/// Send SGI `intid` to the CPU with affinity `mpidr`. Not arm-gic's
/// `send_sgi`: its target list has no range selector (RS), so it cannot
/// reach a CPU whose Aff0 is 16 or more, and it checks the INTID again
/// (the core already did); the register is arm-sysregs' typed ICC_SGI1R_EL1.
pub fn send_sgi(mpidr: u64, intid: u32) {
    let aff0 = mpidr as u8;
    let value = IccSgi1rEl1::empty()
        .with_targetlist(1 << (aff0 & 0xf))
        .with_aff1((mpidr >> 8) as u8)
        .with_intid((intid & 0xf) as u8)
        .with_aff2((mpidr >> 16) as u8)
        .with_rs(aff0 >> 4)
        .with_aff3((mpidr >> 32) as u8);
    // SAFETY: orders earlier memory writes (a mailbox post) before the SGI.
    unsafe { asm!("dsb ishst", options(nostack)) };
    write_icc_sgi1r_el1(value);
    // SAFETY: context synchronisation so the SGI is issued promptly.
    unsafe { asm!("isb", options(nostack)) };
}
