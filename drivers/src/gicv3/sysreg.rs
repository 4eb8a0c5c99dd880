//! GICv3 CPU interface system registers used at EL2: ICC_* for the
//! hypervisor's own interrupts, ICH_* for the guest's virtual CPU interface
//! (Arm IHI 0069, chapter 12). Raw encodings so no assembler feature flags
//! are needed.

use core::arch::asm;

macro_rules! sysreg_rw {
    ($read:ident, $write:ident, $enc:literal) => {
        #[inline(always)]
        pub fn $read() -> u64 {
            let v: u64;
            // SAFETY: reading a GIC CPU interface register has no side effect
            // beyond what the register defines; EL2 may access it.
            unsafe { asm!(concat!("mrs {}, ", $enc), out(reg) v, options(nomem, nostack)) };
            v
        }
        #[inline(always)]
        pub fn $write(v: u64) {
            // SAFETY: the callers in this crate and in platform/arch write
            // values defined by the GIC architecture for this register.
            unsafe { asm!(concat!("msr ", $enc, ", {}"), in(reg) v, options(nomem, nostack)) };
        }
    };
}

sysreg_rw!(icc_sre_el2, set_icc_sre_el2, "S3_4_C12_C9_5");
sysreg_rw!(icc_ctlr_el1, set_icc_ctlr_el1, "S3_0_C12_C12_4");
sysreg_rw!(icc_pmr_el1, set_icc_pmr_el1, "S3_0_C4_C6_0");
sysreg_rw!(icc_bpr1_el1, set_icc_bpr1_el1, "S3_0_C12_C12_3");
sysreg_rw!(icc_igrpen1_el1, set_icc_igrpen1_el1, "S3_0_C12_C12_7");
sysreg_rw!(icc_iar1_el1, set_icc_iar1_el1, "S3_0_C12_C12_0");
sysreg_rw!(icc_eoir1_el1, set_icc_eoir1_el1, "S3_0_C12_C12_1");
sysreg_rw!(icc_dir_el1, set_icc_dir_el1, "S3_0_C12_C11_1");
sysreg_rw!(icc_sgi1r_el1, set_icc_sgi1r_el1, "S3_0_C12_C11_5");
sysreg_rw!(ich_hcr_el2, set_ich_hcr_el2, "S3_4_C12_C11_0");
sysreg_rw!(ich_vtr_el2, set_ich_vtr_el2, "S3_4_C12_C11_1");
sysreg_rw!(ich_misr_el2, set_ich_misr_el2, "S3_4_C12_C11_2");
sysreg_rw!(ich_eisr_el2, set_ich_eisr_el2, "S3_4_C12_C11_3");
sysreg_rw!(ich_elrsr_el2, set_ich_elrsr_el2, "S3_4_C12_C11_5");
sysreg_rw!(ich_vmcr_el2, set_ich_vmcr_el2, "S3_4_C12_C11_7");
sysreg_rw!(ich_ap0r0_el2, set_ich_ap0r0_el2, "S3_4_C12_C8_0");
sysreg_rw!(ich_ap1r0_el2, set_ich_ap1r0_el2, "S3_4_C12_C9_0");

/// ICH_LR<n>_EL2.
pub fn read_lr(n: usize) -> u64 {
    macro_rules! rd {
        ($enc:literal) => {{
            let v: u64;
            // SAFETY: reading a list register has no side effect.
            unsafe { asm!(concat!("mrs {}, ", $enc), out(reg) v, options(nomem, nostack)) };
            v
        }};
    }
    match n {
        0 => rd!("S3_4_C12_C12_0"),
        1 => rd!("S3_4_C12_C12_1"),
        2 => rd!("S3_4_C12_C12_2"),
        3 => rd!("S3_4_C12_C12_3"),
        4 => rd!("S3_4_C12_C12_4"),
        5 => rd!("S3_4_C12_C12_5"),
        6 => rd!("S3_4_C12_C12_6"),
        7 => rd!("S3_4_C12_C12_7"),
        8 => rd!("S3_4_C12_C13_0"),
        9 => rd!("S3_4_C12_C13_1"),
        10 => rd!("S3_4_C12_C13_2"),
        11 => rd!("S3_4_C12_C13_3"),
        12 => rd!("S3_4_C12_C13_4"),
        13 => rd!("S3_4_C12_C13_5"),
        14 => rd!("S3_4_C12_C13_6"),
        15 => rd!("S3_4_C12_C13_7"),
        _ => 0,
    }
}

/// ICH_LR<n>_EL2. `n` must be below ICH_VTR_EL2.ListRegs + 1.
pub fn write_lr(n: usize, v: u64) {
    macro_rules! wr {
        ($enc:literal) => {
            // SAFETY: list registers only affect the virtual CPU interface of
            // the guest running on this CPU.
            unsafe { asm!(concat!("msr ", $enc, ", {}"), in(reg) v, options(nomem, nostack)) }
        };
    }
    match n {
        0 => wr!("S3_4_C12_C12_0"),
        1 => wr!("S3_4_C12_C12_1"),
        2 => wr!("S3_4_C12_C12_2"),
        3 => wr!("S3_4_C12_C12_3"),
        4 => wr!("S3_4_C12_C12_4"),
        5 => wr!("S3_4_C12_C12_5"),
        6 => wr!("S3_4_C12_C12_6"),
        7 => wr!("S3_4_C12_C12_7"),
        8 => wr!("S3_4_C12_C13_0"),
        9 => wr!("S3_4_C12_C13_1"),
        10 => wr!("S3_4_C12_C13_2"),
        11 => wr!("S3_4_C12_C13_3"),
        12 => wr!("S3_4_C12_C13_4"),
        13 => wr!("S3_4_C12_C13_5"),
        14 => wr!("S3_4_C12_C13_6"),
        15 => wr!("S3_4_C12_C13_7"),
        _ => {}
    }
}

/// Number of implemented list registers (ICH_VTR_EL2.ListRegs + 1).
pub fn lr_count() -> usize {
    ((ich_vtr_el2() & 0x1f) + 1) as usize
}

/// Set up this CPU's interface for EL2: system registers on (and allowed at
/// EL1), split priority drop / deactivation (EOImode = 1) so that a
/// HW-linked interrupt stays active until the guest deactivates it, all
/// priorities unmasked, group 1 on, the virtual CPU interface enabled.
pub fn init_cpu_interface() {
    // ICC_SRE_EL2: SRE | DFB | DIB | Enable (EL1 may use ICC_SRE_EL1).
    set_icc_sre_el2(0xf);
    // SAFETY: an ISB makes the SRE write visible before the next ICC access.
    unsafe { asm!("isb", options(nomem, nostack)) };
    set_icc_pmr_el1(0xff);
    set_icc_bpr1_el1(0);
    set_icc_ctlr_el1(icc_ctlr_el1() | (1 << 1));
    set_icc_igrpen1_el1(1);
    set_ich_vmcr_el2(0);
    set_ich_ap0r0_el2(0);
    set_ich_ap1r0_el2(0);
    for n in 0..lr_count() {
        write_lr(n, 0);
    }
    // ICH_HCR_EL2.En
    set_ich_hcr_el2(1);
}

/// Acknowledge the highest priority pending group 1 interrupt (1023: none).
pub fn ack() -> u32 {
    (icc_iar1_el1() & 0xff_ffff) as u32
}

/// Priority drop (EOImode = 1).
pub fn priority_drop(intid: u32) {
    set_icc_eoir1_el1(intid as u64);
}

/// Deactivate (EOImode = 1).
pub fn deactivate(intid: u32) {
    set_icc_dir_el1(intid as u64);
}

/// Send SGI `intid` to the CPU with affinity `mpidr`.
pub fn send_sgi(mpidr: u64, intid: u32) {
    let aff0 = mpidr & 0xff;
    let aff1 = (mpidr >> 8) & 0xff;
    let aff2 = (mpidr >> 16) & 0xff;
    let aff3 = (mpidr >> 32) & 0xff;
    let rs = aff0 >> 4;
    let target_list = 1u64 << (aff0 & 0xf);
    let value = target_list
        | (aff1 << 16)
        | ((intid as u64 & 0xf) << 24)
        | (aff2 << 32)
        | (rs << 44)
        | (aff3 << 48);
    // SAFETY: orders earlier memory writes (a mailbox post) before the SGI.
    unsafe { asm!("dsb ishst", options(nostack)) };
    set_icc_sgi1r_el1(value);
    // SAFETY: context synchronisation so the SGI is issued promptly.
    unsafe { asm!("isb", options(nostack)) };
}
