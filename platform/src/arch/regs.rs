//! System register access for the vCPU run loop: aarch64-cpu's typed
//! registers and fields wherever the crate has them, a named raw `mrs`/`msr`
//! where it does not (VPIDR_EL2, the ID registers by encoding, the PMU).
//! Writes that can break isolation (HCR_EL2, VTTBR_EL2, VTCR_EL2,
//! SCTLR_EL2) happen in the few functions of `platform::vcpu`, `main` and
//! `arch::mmu` that set them.

use aarch64_cpu::registers::*;
use core::arch::asm;
use tock_registers::fields::FieldValue;
use tock_registers::RegisterLongName;

pub use aarch64_cpu::registers::{Readable, Writeable};

/// A whole value of register `R` built from its typed fields.
pub type Fields<R> = FieldValue<u64, R>;

/// `a + b + ...` of register field values, as a `const`: tock-registers'
/// `Add` is not a const impl, `FieldValue::new` is. A field given twice
/// (overlapping masks) fails to compile when used in a `const`.
pub const fn fields<R: RegisterLongName>(parts: &[Fields<R>]) -> Fields<R> {
    let mut mask = 0;
    let mut value = 0;
    let mut i = 0;
    while i < parts.len() {
        assert!(mask & parts[i].mask() == 0, "a register field given twice");
        mask |= parts[i].mask();
        value |= parts[i].value;
        i += 1;
    }
    Fields::<R>::new(mask, 0, value)
}

/// A field of register `R` that aarch64-cpu 11 does not define (typically a
/// bit that is RES1 in Armv8.0 and got a name with a later feature), at
/// `shift`, `bits` wide, set to `value`.
pub const fn local_field<R: RegisterLongName>(shift: usize, bits: u32, value: u64) -> Fields<R> {
    Fields::<R>::new(u64::MAX >> (64 - bits), shift, value)
}

/// The syndrome of the current exception to EL2.
pub fn esr_el2() -> u64 {
    ESR_EL2.get()
}
pub fn far_el2() -> u64 {
    FAR_EL2.get()
}
pub fn hpfar_el2() -> u64 {
    HPFAR_EL2.get()
}
pub fn vbar_el1() -> u64 {
    VBAR_EL1.get()
}

/// Deliver an exception into EL1 state: the registers the hardware would
/// have written had the exception been taken at EL1.
pub fn write_el1_exception_state(esr: u64, far: Option<u64>, elr: u64, spsr: u64) {
    ESR_EL1.set(esr);
    if let Some(far) = far {
        FAR_EL1.set(far);
    }
    ELR_EL1.set(elr);
    SPSR_EL1.set(spsr);
}

/// VPIDR_EL2 (the MIDR_EL1 a guest reads): aarch64-cpu 11 has no VPIDR_EL2.
pub fn set_vpidr_el2(v: u64) {
    // SAFETY: VPIDR_EL2 only changes what EL1 reads from MIDR_EL1.
    unsafe { asm!("msr vpidr_el2, {}", in(reg) v, options(nomem, nostack)) };
}

/// CNTHP_CVAL_EL2, the EL2 physical timer's compare value (the idle loop's
/// wake-up): aarch64-cpu 11 has CNTHP_CTL_EL2 but not this one.
pub fn set_cnthp_cval_el2(v: u64) {
    // SAFETY: the EL2 timer is the hypervisor's own; no guest uses it.
    unsafe { asm!("msr cnthp_cval_el2, {}", in(reg) v, options(nomem, nostack)) };
}

pub fn tpidr_el2() -> u64 {
    TPIDR_EL2.get()
}
pub fn midr_el1() -> u64 {
    MIDR_EL1.get()
}
/// ID_AA64MMFR0_EL1.PARange: the physical address size the CPU supports.
pub fn pa_range() -> Option<ID_AA64MMFR0_EL1::PARange::Value> {
    ID_AA64MMFR0_EL1.read_as_enum(ID_AA64MMFR0_EL1::PARange)
}

/// Read an ID register of the TID3 group (op0=3, op1=0, CRn=0, CRm=1..7)
/// by its CRm/op2. Unallocated encodings in this space read as zero.
#[inline(always)]
pub fn read_id_reg(crm: u8, op2: u8) -> u64 {
    macro_rules! rd {
        ($($crm:literal, $op2:literal => $enc:literal;)*) => {
            match (crm, op2) {
                $(($crm, $op2) => {
                    let v: u64;
                    // SAFETY: ID registers are read-only and side-effect free.
                    unsafe { asm!(concat!("mrs {}, ", $enc), out(reg) v, options(nomem, nostack)) };
                    v
                })*
                _ => 0,
            }
        };
    }
    rd! {
        1,0 => "S3_0_C0_C1_0"; 1,1 => "S3_0_C0_C1_1"; 1,2 => "S3_0_C0_C1_2"; 1,3 => "S3_0_C0_C1_3";
        1,4 => "S3_0_C0_C1_4"; 1,5 => "S3_0_C0_C1_5"; 1,6 => "S3_0_C0_C1_6"; 1,7 => "S3_0_C0_C1_7";
        2,0 => "S3_0_C0_C2_0"; 2,1 => "S3_0_C0_C2_1"; 2,2 => "S3_0_C0_C2_2"; 2,3 => "S3_0_C0_C2_3";
        2,4 => "S3_0_C0_C2_4"; 2,5 => "S3_0_C0_C2_5"; 2,6 => "S3_0_C0_C2_6"; 2,7 => "S3_0_C0_C2_7";
        3,0 => "S3_0_C0_C3_0"; 3,1 => "S3_0_C0_C3_1"; 3,2 => "S3_0_C0_C3_2"; 3,3 => "S3_0_C0_C3_3";
        3,4 => "S3_0_C0_C3_4"; 3,5 => "S3_0_C0_C3_5"; 3,6 => "S3_0_C0_C3_6"; 3,7 => "S3_0_C0_C3_7";
        4,0 => "S3_0_C0_C4_0"; 4,1 => "S3_0_C0_C4_1"; 4,2 => "S3_0_C0_C4_2"; 4,3 => "S3_0_C0_C4_3";
        4,4 => "S3_0_C0_C4_4"; 4,5 => "S3_0_C0_C4_5"; 4,6 => "S3_0_C0_C4_6"; 4,7 => "S3_0_C0_C4_7";
        5,0 => "S3_0_C0_C5_0"; 5,1 => "S3_0_C0_C5_1"; 5,2 => "S3_0_C0_C5_2"; 5,3 => "S3_0_C0_C5_3";
        5,4 => "S3_0_C0_C5_4"; 5,5 => "S3_0_C0_C5_5"; 5,6 => "S3_0_C0_C5_6"; 5,7 => "S3_0_C0_C5_7";
        6,0 => "S3_0_C0_C6_0"; 6,1 => "S3_0_C0_C6_1"; 6,2 => "S3_0_C0_C6_2"; 6,3 => "S3_0_C0_C6_3";
        6,4 => "S3_0_C0_C6_4"; 6,5 => "S3_0_C0_C6_5"; 6,6 => "S3_0_C0_C6_6"; 6,7 => "S3_0_C0_C6_7";
        7,0 => "S3_0_C0_C7_0"; 7,1 => "S3_0_C0_C7_1"; 7,2 => "S3_0_C0_C7_2"; 7,3 => "S3_0_C0_C7_3";
        7,4 => "S3_0_C0_C7_4"; 7,5 => "S3_0_C0_C7_5"; 7,6 => "S3_0_C0_C7_6"; 7,7 => "S3_0_C0_C7_7";
    }
}

/// Read a PMU register by its name in the Arm ARM.
macro_rules! pmu_regs {
    (rw: $($variant:ident => $reg:literal),* ;
     ro: $($ro:ident => $ror:literal),* ;
     wo: $($wo:ident => $wor:literal),* $(;)?) => {
        /// Read one of this CPU's PMU registers. PMEVCNTR<n>/PMEVTYPER<n>
        /// go through PMSELR_EL0 and PMXEV*, restoring the guest's PMSELR.
        pub fn pmu_read(reg: pinfold_hv::pmu::PmuReg) -> u64 {
            use pinfold_hv::pmu::PmuReg;
            let v: u64;
            match reg {
                $(PmuReg::$variant => {
                    // SAFETY: a PMU register read; EL2 may access them all.
                    unsafe { asm!(concat!("mrs {}, ", $reg), out(reg) v, options(nostack)) };
                })*
                $(PmuReg::$ro => {
                    // SAFETY: as above.
                    unsafe { asm!(concat!("mrs {}, ", $ror), out(reg) v, options(nostack)) };
                })*
                // Write-only: the core never asks (reads of it are UNDEF).
                $(PmuReg::$wo => v = 0,)*
                PmuReg::PMEVCNTR_EL0(n) => v = with_selected(n, || pmu_read(PmuReg::PMXEVCNTR_EL0)),
                PmuReg::PMEVTYPER_EL0(n) => v = with_selected(n, || pmu_read(PmuReg::PMXEVTYPER_EL0)),
            }
            v
        }

        /// Write one of this CPU's PMU registers.
        pub fn pmu_write(reg: pinfold_hv::pmu::PmuReg, v: u64) {
            use pinfold_hv::pmu::PmuReg;
            match reg {
                $(PmuReg::$variant => {
                    // SAFETY: a PMU register write with a value the core's
                    // PMU policy produced; PMU state cannot break isolation
                    // (EL2 counting is filtered by MDCR_EL2 or the policy).
                    unsafe { asm!(concat!("msr ", $reg, ", {}"), in(reg) v, options(nostack)) };
                })*
                $(PmuReg::$wo => {
                    // SAFETY: as above.
                    unsafe { asm!(concat!("msr ", $wor, ", {}"), in(reg) v, options(nostack)) };
                })*
                // Read-only: the core never asks (writes to it are UNDEF).
                $(PmuReg::$ro => {})*
                PmuReg::PMEVCNTR_EL0(n) => { with_selected(n, || { pmu_write(PmuReg::PMXEVCNTR_EL0, v); 0 }); }
                PmuReg::PMEVTYPER_EL0(n) => { with_selected(n, || { pmu_write(PmuReg::PMXEVTYPER_EL0, v); 0 }); }
            };
        }
    };
}

pmu_regs! {
    rw:
    PMCR_EL0 => "pmcr_el0",
    PMCNTENSET_EL0 => "pmcntenset_el0",
    PMCNTENCLR_EL0 => "pmcntenclr_el0",
    PMOVSCLR_EL0 => "pmovsclr_el0",
    PMSELR_EL0 => "pmselr_el0",
    PMCCNTR_EL0 => "pmccntr_el0",
    PMXEVTYPER_EL0 => "pmxevtyper_el0",
    PMXEVCNTR_EL0 => "pmxevcntr_el0",
    PMUSERENR_EL0 => "pmuserenr_el0",
    PMINTENSET_EL1 => "pmintenset_el1",
    PMINTENCLR_EL1 => "pmintenclr_el1",
    PMOVSSET_EL0 => "pmovsset_el0",
    PMCCFILTR_EL0 => "pmccfiltr_el0";
    ro: PMCEID0_EL0 => "pmceid0_el0", PMCEID1_EL0 => "pmceid1_el0";
    wo: PMSWINC_EL0 => "pmswinc_el0";
}

/// Run `f` with PMSELR_EL0 = n, then give the guest its PMSELR back.
fn with_selected(n: u8, f: impl FnOnce() -> u64) -> u64 {
    use pinfold_hv::pmu::PmuReg;
    let saved = pmu_read(PmuReg::PMSELR_EL0);
    pmu_write(PmuReg::PMSELR_EL0, u64::from(n));
    // SAFETY: barrier so the selection takes effect before the access.
    unsafe { asm!("isb", options(nostack)) };
    let v = f();
    pmu_write(PmuReg::PMSELR_EL0, saved);
    v
}
