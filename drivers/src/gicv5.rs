//! The physical GICv5 (Arm IHI 0101): the CPU interface (ICC_* system
//! registers, the GIC CDxx and GICR CDIA system instructions), each CPU's
//! PPIs (per-CPU system-register state in GICv5, so the owning CPU changes
//! them with no lock at all: the chip declares `percpu_state_lockless`),
//! the IRS (SPIs routed with GIC CDAFF, trigger mode in IRS_SPI_CFGR, the
//! LPI interrupt state table), IPIs as edge LPIs targeted at each CPU
//! (GICv5 has no SGIs), and the EL2 virtual CPU interface of a vCPU
//! (ICH_VCTLR/CONTEXTR/VMCR/APR, ICH_PPI_DVIR/HVIR and the ICH_PPI_* state,
//! ICH_HFGRTR/HFGWTR trapping the ICC_PPI_* classes for a vCPU with hidden
//! PPIs, whose trapped accesses the core emulates: `vgic5::ppitrap`)
//! loaded and put with the PPIs the core's `vgic5::PpiPlan` chose as
//! direct virtual interrupts (or, for a vCPU with the GICv3-compatible
//! interface, only ICH_VCTLR_EL2.V3: `load_gicv3_compatible`), and the vIRS: the VM table given to the IRS
//! (`Gicv5Irs::init_virs`) and the core's `vgic5::plan_virs` applied
//! (`Gicv5Irs::apply_virs`: VM and vPE table entries written through
//! [`TableMem`], VMs, virtual ISTs and vPEs made valid, doorbells armed,
//! the partitions' own SPIs assigned to their VMs; and for a destroyed
//! partition its SPIs given back to the physical domain and its VM
//! unmapped), doorbell LPIs taken in
//! `ack` (`Gicv5Cpu::take_doorbell`), IRS software errors drained
//! (`Gicv5Irs::take_swerr`) for the core to count.
//!
//! On a GICv5 host the platform brings up `Gicv5Irs` and each CPU's
//! `Gicv5Cpu` at boot and its root IRQ handler acknowledges through them
//! (platform `gicv5.rs`, `irq.rs`) and loads/puts a `gicv5` partition's
//! vCPU with `vcpu_load`/`vcpu_put` (platform `vcpu.rs`), and once the
//! partitions are built it gives the IRS the VM table and the core's boot
//! vIRS plan (`init_virs`, `apply_virs`); no emulator runs that
//! (docs/GICV5.md, "What is not done").
//!
//! The driver reaches the hardware only through [`CpuRegs`] (system
//! registers and instructions, by encoding) and [`IrsMmio`] (the IRS
//! config frame). The platform implements them with the real instructions
//! (`hw`, aarch64 only: `mrs`/`msr s3_x_cx_cx_x` and `sys`/`sysl`, since
//! the assembler does not know the GICv5 names); the host tests implement
//! them with the register-level model `pinfold-gicv5model`, which decodes
//! the raw encodings itself, so a wrong encoding here fails a test.
//!
//! The core keeps GICv3 INTID numbers (`pinfold_hv::vgic5::CoreIntid`):
//! PPIs 16..31 are GICv5 PPIs 16..31, SGI n to CPU c is the LPI
//! `ipi_base + 16 c + n`, core INTID 32 + n is SPI n, core INTID
//! `LPI_BASE + n` (a device event's LPI, as on GICv3) is the MSI pool's
//! LPI `msi_base + n` (`Gicv5Cpu::set_msi_lpis`).

use pinfold_hv::irqchip::{
    change_percpu_state, IrqChipCaps, PerCpuIrqChip, PpiBits, PpiStateChange, SharedIrqChip,
};
use pinfold_hv::lockstat::{CountedLock, LockPath};
use pinfold_hv::vgic5::ppitrap::{traps_ppis, IchPpiReg};
use pinfold_hv::vgic5::{
    ipi_lpi, msi_pool_core_intid, CoreIntid, GicInsn, HostGicv5, PpiPlan, PpiSet, UntrappedInsns,
    VPpiContext, VirsCaps, VirsOp, CORE_SPIS,
};

/// GICv5 declares lockless per-CPU state: PPIs are the CPU's own system
/// registers.
pub const GICV5_CAPS: IrqChipCaps = IrqChipCaps {
    percpu_state_lockless: true,
};

/// A system register or instruction encoding packed as
/// `op0[20:19] op1[18:16] CRn[15:12] CRm[11:8] op2[7:5]` (the `mrs`/`msr`
/// instruction's own field layout shifted down by 5).
pub const fn sysreg(op0: u32, op1: u32, crn: u32, crm: u32, op2: u32) -> u32 {
    (op0 << 19) | (op1 << 16) | (crn << 12) | (crm << 8) | (op2 << 5)
}

/// Unpack an encoding into (op0, op1, CRn, CRm, op2).
pub const fn fields(enc: u32) -> (u8, u8, u8, u8, u8) {
    (
        (enc >> 19 & 3) as u8,
        (enc >> 16 & 7) as u8,
        (enc >> 12 & 15) as u8,
        (enc >> 8 & 15) as u8,
        (enc >> 5 & 7) as u8,
    )
}

macro_rules! encodings {
    ($($(#[$doc:meta])* $name:ident = ($op0:literal, $op1:literal, $crn:literal, $crm:literal, $op2:literal);)*) => {
        /// The GICv5 system registers the driver uses.
        pub mod reg {
            $($(#[$doc])* pub const $name: u32 = super::sysreg($op0, $op1, $crn, $crm, $op2);)*
            /// Every register, for the hardware accessors' match.
            pub const ALL: &[u32] = &[$($name),*];
        }
        #[cfg(target_arch = "aarch64")]
        fn hw_read(enc: u32) -> u64 {
            $(if enc == reg::$name {
                let v: u64;
                // SAFETY: a GICv5 system register read at EL2; reading has
                // no side effect on the registers this driver uses.
                unsafe {
                    core::arch::asm!(
                        concat!("mrs {}, s", stringify!($op0), "_", stringify!($op1), "_c",
                                stringify!($crn), "_c", stringify!($crm), "_", stringify!($op2)),
                        out(reg) v, options(nomem, nostack));
                }
                return v;
            })*
            0
        }
        #[cfg(target_arch = "aarch64")]
        fn hw_write(enc: u32, v: u64) {
            $(if enc == reg::$name {
                // SAFETY: a GICv5 system register write at EL2 with a value
                // the driver computed for it.
                unsafe {
                    core::arch::asm!(
                        concat!("msr s", stringify!($op0), "_", stringify!($op1), "_c",
                                stringify!($crn), "_c", stringify!($crm), "_", stringify!($op2), ", {}"),
                        in(reg) v, options(nostack));
                }
                return;
            })*
        }
    };
}

// Source of every encoding below: Linux arch/arm64/tools/sysreg (the ICC_*
// registers since 6.17 with the host GICv5 driver; ICH_APR, ICH_CONTEXTR,
// ICH_PPI_{DVIR,ENABLER,PENDR,ACTIVER,PRIORITYR}<n> from the KVM GICv5
// series v4 patch 04/36, ICH_VCTLR_EL2 = 3 4 12 11 4 from the same series,
// ICH_HFGRTR/HFGWTR from the host series). Read with the `search` tool,
// checked one by one (drivers/src/gicv5/tests.rs
// `encodings_match_linux_sysreg`); not copied. ICH_PPI_HVIR is the one
// exception (no source).
encodings! {
    ICC_APR_EL1 = (3, 1, 12, 0, 0);
    ICC_CR0_EL1 = (3, 1, 12, 0, 1);
    ICC_PCR_EL1 = (3, 1, 12, 0, 2);
    ICC_IDR0_EL1 = (3, 0, 12, 10, 2);
    ICC_IAFFIDR_EL1 = (3, 0, 12, 10, 5);
    ICC_PPI_ENABLER0_EL1 = (3, 0, 12, 10, 6);
    ICC_PPI_ENABLER1_EL1 = (3, 0, 12, 10, 7);
    ICC_PPI_CACTIVER0_EL1 = (3, 0, 12, 13, 0);
    ICC_PPI_CACTIVER1_EL1 = (3, 0, 12, 13, 1);
    ICC_PPI_SACTIVER0_EL1 = (3, 0, 12, 13, 2);
    ICC_PPI_SACTIVER1_EL1 = (3, 0, 12, 13, 3);
    ICC_PPI_CPENDR0_EL1 = (3, 0, 12, 13, 4);
    ICC_PPI_CPENDR1_EL1 = (3, 0, 12, 13, 5);
    ICC_PPI_SPENDR0_EL1 = (3, 0, 12, 13, 6);
    ICC_PPI_SPENDR1_EL1 = (3, 0, 12, 13, 7);
    ICC_PPI_PRIORITYR0_EL1 = (3, 0, 12, 14, 0);
    ICC_PPI_PRIORITYR1_EL1 = (3, 0, 12, 14, 1);
    ICC_PPI_PRIORITYR2_EL1 = (3, 0, 12, 14, 2);
    ICC_PPI_PRIORITYR3_EL1 = (3, 0, 12, 14, 3);
    ICC_PPI_PRIORITYR4_EL1 = (3, 0, 12, 14, 4);
    ICC_PPI_PRIORITYR5_EL1 = (3, 0, 12, 14, 5);
    ICC_PPI_PRIORITYR6_EL1 = (3, 0, 12, 14, 6);
    ICC_PPI_PRIORITYR7_EL1 = (3, 0, 12, 14, 7);
    ICC_PPI_PRIORITYR8_EL1 = (3, 0, 12, 15, 0);
    ICC_PPI_PRIORITYR9_EL1 = (3, 0, 12, 15, 1);
    ICC_PPI_PRIORITYR10_EL1 = (3, 0, 12, 15, 2);
    ICC_PPI_PRIORITYR11_EL1 = (3, 0, 12, 15, 3);
    ICC_PPI_PRIORITYR12_EL1 = (3, 0, 12, 15, 4);
    ICC_PPI_PRIORITYR13_EL1 = (3, 0, 12, 15, 5);
    ICC_PPI_PRIORITYR14_EL1 = (3, 0, 12, 15, 6);
    ICC_PPI_PRIORITYR15_EL1 = (3, 0, 12, 15, 7);
    ICH_APR_EL2 = (3, 4, 12, 8, 4);
    ICH_HFGRTR_EL2 = (3, 4, 12, 9, 4);
    ICH_HFGWTR_EL2 = (3, 4, 12, 9, 6);
    /// Linux arch/arm64/tools/sysreg (host series, "arm64/sysreg: Add
    /// ICH_HFGITR_EL2") and FreeBSD's GICv5 register header agree on the
    /// encoding and the fields ([`hfgitr_bit`]).
    ICH_HFGITR_EL2 = (3, 4, 12, 9, 7);
    ICH_PPI_DVIR0_EL2 = (3, 4, 12, 10, 0);
    ICH_PPI_DVIR1_EL2 = (3, 4, 12, 10, 1);
    ICH_PPI_ENABLER0_EL2 = (3, 4, 12, 10, 2);
    ICH_PPI_ENABLER1_EL2 = (3, 4, 12, 10, 3);
    ICH_PPI_PENDR0_EL2 = (3, 4, 12, 10, 4);
    ICH_PPI_PENDR1_EL2 = (3, 4, 12, 10, 5);
    ICH_PPI_ACTIVER0_EL2 = (3, 4, 12, 10, 6);
    ICH_PPI_ACTIVER1_EL2 = (3, 4, 12, 10, 7);
    /// UNCONFIRMED encoding (docs/GICV5.md): no primary source gives one.
    /// Linux's arch/arm64/tools/sysreg with the KVM GICv5 series (v4,
    /// 2026-01-28, "arm64/sysreg: Add remaining GICv5 ICC_ & ICH_ sysregs
    /// for KVM support") has no ICH_PPI_HVIR at all, and this guess is
    /// GICv3's read-only ICH_MISR_EL2 (`_3`: ICH_EISR_EL2), so the
    /// hardware accessors never emit it ([`hw_emits`]); only the model
    /// sees it.
    ICH_PPI_HVIR0_EL2 = (3, 4, 12, 11, 2);
    /// UNCONFIRMED, as HVIR0.
    ICH_PPI_HVIR1_EL2 = (3, 4, 12, 11, 3);
    ICH_VCTLR_EL2 = (3, 4, 12, 11, 4);
    ICH_CONTEXTR_EL2 = (3, 4, 12, 11, 6);
    ICH_VMCR_EL2 = (3, 4, 12, 11, 7);
    ICH_PPI_PRIORITYR0_EL2 = (3, 4, 12, 14, 0);
    ICH_PPI_PRIORITYR1_EL2 = (3, 4, 12, 14, 1);
    ICH_PPI_PRIORITYR2_EL2 = (3, 4, 12, 14, 2);
    ICH_PPI_PRIORITYR3_EL2 = (3, 4, 12, 14, 3);
    ICH_PPI_PRIORITYR4_EL2 = (3, 4, 12, 14, 4);
    ICH_PPI_PRIORITYR5_EL2 = (3, 4, 12, 14, 5);
    ICH_PPI_PRIORITYR6_EL2 = (3, 4, 12, 14, 6);
    ICH_PPI_PRIORITYR7_EL2 = (3, 4, 12, 14, 7);
    ICH_PPI_PRIORITYR8_EL2 = (3, 4, 12, 15, 0);
    ICH_PPI_PRIORITYR9_EL2 = (3, 4, 12, 15, 1);
    ICH_PPI_PRIORITYR10_EL2 = (3, 4, 12, 15, 2);
    ICH_PPI_PRIORITYR11_EL2 = (3, 4, 12, 15, 3);
    ICH_PPI_PRIORITYR12_EL2 = (3, 4, 12, 15, 4);
    ICH_PPI_PRIORITYR13_EL2 = (3, 4, 12, 15, 5);
    ICH_PPI_PRIORITYR14_EL2 = (3, 4, 12, 15, 6);
    ICH_PPI_PRIORITYR15_EL2 = (3, 4, 12, 15, 7);
}

/// Encodings with no primary source behind them, which the hardware
/// accessors (`hw`) must never emit: a guess could name another
/// register (ICH_PPI_HVIR's guess is GICv3's read-only ICH_MISR/EISR_EL2,
/// whose write is UNDEFINED). The model still decodes them for the tests.
pub const UNCONFIRMED: &[u32] = &[reg::ICH_PPI_HVIR0_EL2, reg::ICH_PPI_HVIR1_EL2];

/// Whether the hardware accessors execute an access to `enc` (false for
/// [`UNCONFIRMED`] encodings: the write is dropped, the read gives 0).
pub const fn hw_emits(enc: u32) -> bool {
    let mut i = 0;
    while i < UNCONFIRMED.len() {
        if UNCONFIRMED[i] == enc {
            return false;
        }
        i += 1;
    }
    true
}

/// The GIC system instructions (`sys #op1, c12, cCRm, #op2, Xt`).
///
/// Every encoding here is the one binutils' `gas/testsuite/gas/aarch64`
/// GCIE test disassembles and FreeBSD's GICv5 register header
/// (`arm64/include/gicv5reg.h`) defines; the CD* ones and GSB also Linux's
/// `arch_gicv5.h` (`insn_words_match_binutils_gcie_test` pins each as the
/// 32-bit `sys` word binutils lists).
pub mod insn {
    use super::sysreg;
    pub const GSB_SYS: u32 = sysreg(1, 0, 12, 0, 0);
    pub const GSB_ACK: u32 = sysreg(1, 0, 12, 0, 1);
    pub const GIC_CDDIS: u32 = sysreg(1, 0, 12, 1, 0);
    pub const GIC_CDEN: u32 = sysreg(1, 0, 12, 1, 1);
    pub const GIC_CDPRI: u32 = sysreg(1, 0, 12, 1, 2);
    pub const GIC_CDAFF: u32 = sysreg(1, 0, 12, 1, 3);
    pub const GIC_CDPEND: u32 = sysreg(1, 0, 12, 1, 4);
    pub const GIC_CDEOI: u32 = sysreg(1, 0, 12, 1, 7);
    pub const GIC_CDDI: u32 = sysreg(1, 0, 12, 2, 0);
    pub const GIC_CDHM: u32 = sysreg(1, 0, 12, 2, 1);
    /// `sysl Xt, #0, c12, c3, #0`.
    pub const GICR_CDIA: u32 = sysreg(1, 0, 12, 3, 0);

    /// The EL2 virtual-domain instructions (IHI 0101 8.2): the CD* ones
    /// with op1 = 4, acting on the VM the operand names. Confirmed
    /// encodings. Only GIC VDPEND is issued (`Gicv5Cpu::vdpend`, `hw`'s
    /// `sys #4` arm; the model decodes it); its operand layout (PENDING
    /// [63], VM [47:32], TYPE [31:29], ID [23:0]) has one source, FreeBSD's
    /// header (docs/GICV5.md, "Encodings"). The others are not issued.
    pub const GIC_VDDIS: u32 = sysreg(1, 4, 12, 1, 0);
    pub const GIC_VDEN: u32 = sysreg(1, 4, 12, 1, 1);
    pub const GIC_VDPRI: u32 = sysreg(1, 4, 12, 1, 2);
    pub const GIC_VDAFF: u32 = sysreg(1, 4, 12, 1, 3);
    pub const GIC_VDPEND: u32 = sysreg(1, 4, 12, 1, 4);
    pub const GIC_VDRCFG: u32 = sysreg(1, 4, 12, 1, 5);
    pub const GIC_VDDI: u32 = sysreg(1, 4, 12, 2, 0);
    pub const GIC_VDHM: u32 = sysreg(1, 4, 12, 2, 1);
}

const ICC_PPI_PRIORITYR: [u32; 16] = [
    reg::ICC_PPI_PRIORITYR0_EL1,
    reg::ICC_PPI_PRIORITYR1_EL1,
    reg::ICC_PPI_PRIORITYR2_EL1,
    reg::ICC_PPI_PRIORITYR3_EL1,
    reg::ICC_PPI_PRIORITYR4_EL1,
    reg::ICC_PPI_PRIORITYR5_EL1,
    reg::ICC_PPI_PRIORITYR6_EL1,
    reg::ICC_PPI_PRIORITYR7_EL1,
    reg::ICC_PPI_PRIORITYR8_EL1,
    reg::ICC_PPI_PRIORITYR9_EL1,
    reg::ICC_PPI_PRIORITYR10_EL1,
    reg::ICC_PPI_PRIORITYR11_EL1,
    reg::ICC_PPI_PRIORITYR12_EL1,
    reg::ICC_PPI_PRIORITYR13_EL1,
    reg::ICC_PPI_PRIORITYR14_EL1,
    reg::ICC_PPI_PRIORITYR15_EL1,
];

const ICH_PPI_PRIORITYR: [u32; 16] = [
    reg::ICH_PPI_PRIORITYR0_EL2,
    reg::ICH_PPI_PRIORITYR1_EL2,
    reg::ICH_PPI_PRIORITYR2_EL2,
    reg::ICH_PPI_PRIORITYR3_EL2,
    reg::ICH_PPI_PRIORITYR4_EL2,
    reg::ICH_PPI_PRIORITYR5_EL2,
    reg::ICH_PPI_PRIORITYR6_EL2,
    reg::ICH_PPI_PRIORITYR7_EL2,
    reg::ICH_PPI_PRIORITYR8_EL2,
    reg::ICH_PPI_PRIORITYR9_EL2,
    reg::ICH_PPI_PRIORITYR10_EL2,
    reg::ICH_PPI_PRIORITYR11_EL2,
    reg::ICH_PPI_PRIORITYR12_EL2,
    reg::ICH_PPI_PRIORITYR13_EL2,
    reg::ICH_PPI_PRIORITYR14_EL2,
    reg::ICH_PPI_PRIORITYR15_EL2,
];

/// INTID types in instruction operands and CDIA results ([31:29]).
pub const TYPE_PPI: u64 = 1;
pub const TYPE_LPI: u64 = 2;
pub const TYPE_SPI: u64 = 3;
/// GICR CDIA: the result is valid.
pub const CDIA_VALID: u64 = 1 << 32;

const fn operand(ty: u64, id: u32) -> u64 {
    (ty << 29) | (id as u64 & 0xff_ffff)
}

/// A device event's LPI (the MSI pool's, `vgic5::IrsLayout::msi_lpi`)
/// made ready to be taken at the PE `iaffid` names: the default
/// priority, edge (an MSI is an edge), targeted there with GIC CDAFF,
/// enabled; or, with `iaffid` None, disabled. The GIC instructions go from
/// the CPU that runs this (any: the LPI is named, not the CPU), closed
/// with GSB SYS so the IRS has them before the ITS can translate an event
/// to the LPI.
pub fn route_lpi(regs: &mut impl CpuRegs, lpi: u32, iaffid: Option<u16>) {
    let op = operand(TYPE_LPI, lpi);
    match iaffid {
        Some(iaffid) => {
            regs.gic(insn::GIC_CDPRI, op | (DEFAULT_PRIORITY << 35));
            regs.gic(insn::GIC_CDHM, op); // HM = 0: edge
            regs.gic(insn::GIC_CDAFF, op | (u64::from(iaffid) << 32));
            regs.gic(insn::GIC_CDEN, op);
        }
        None => regs.gic(insn::GIC_CDDIS, op),
    }
    regs.gic(insn::GSB_SYS, 0);
}

/// LPI `lpi` made pending (or not) with GIC CDPEND, closed with GSB SYS:
/// a GICv3 INT / CLEAR of a device event on a GICv5 host.
pub fn pend_lpi(regs: &mut impl CpuRegs, lpi: u32, pending: bool) {
    let op = operand(TYPE_LPI, lpi) | (u64::from(pending) << 32);
    regs.gic(insn::GIC_CDPEND, op);
    regs.gic(insn::GSB_SYS, 0);
}

/// GICv5 priorities are 5 bits; lower is more urgent. Everything the
/// hypervisor owns runs at one priority (as on GICv3, where all are 0x80).
pub const DEFAULT_PRIORITY: u64 = 0x10;
/// ICC_PCR_EL1: let every priority below 31 through.
pub const PCR_ALL: u64 = 0x1f;
/// ICC_CR0_EL1.EN.
pub const CR0_EN: u64 = 1;
/// ICH_VCTLR_EL2.En / .V3.
pub const VCTLR_EN: u64 = 1;
pub const VCTLR_V3: u64 = 1 << 1;
/// ICH_VMCR_EL2, GCIE layout (Linux arch/arm64/tools/sysreg, the FEAT_GCIE
/// prefix): EN [0] is the guest's ICC_CR0_EL1.EN, VPMR [31:27] its
/// ICC_PCR_EL1.PRIORITY.
pub const VMCR_EN: u64 = 1;
pub const VMCR_VPMR_SHIFT: u32 = 27;
/// ICH_CONTEXTR_EL2.V (a vPE is resident).
pub const CONTEXTR_V: u64 = 1 << 63;
/// ICH_HFGRTR_EL2 with every ICC register class untrapped (a bit set =
/// the guest's access does not trap): ICC_APR [0], ICC_IDRn [1], ICC_CR0
/// [2], ICC_HAPR [3], ICC_HPPIR [4], ICC_PCR [5], ICC_ICSR [6],
/// ICC_IAFFIDR [7], ICC_PPI_HMRn [16], ICC_PPI_ENABLERn [17],
/// ICC_PPI_PENDRn [18], ICC_PPI_PRIORITYRn [19], ICC_PPI_ACTIVERn [20];
/// [15:8] and [63:21] RES0 (Linux's arch/arm64/tools/sysreg, "arm64/
/// sysreg: Add ICH_HFGRTR_EL2"; the polarity from its `__init_el2_gicv5`,
/// which sets these bits to "Disable reg read traps").
pub const HFGRTR_NO_TRAPS: u64 = 0x1f_00ff;
/// ICH_HFGWTR_EL2 likewise: only the writable classes have a bit (ICC_APR
/// [0], ICC_CR0 [2], ICC_PCR [5], ICC_ICSR [6], ICC_PPI_ENABLERn [17],
/// ICC_PPI_PENDRn [18], ICC_PPI_PRIORITYRn [19], ICC_PPI_ACTIVERn [20];
/// the rest RES0; same source, "arm64/sysreg: Add ICH_HFGWTR_EL2").
pub const HFGWTR_NO_TRAPS: u64 = 0x1e_0065;
/// The ICC_PPI_* classes a vCPU with hidden PPIs traps, in both registers
/// (ENABLERn, PENDRn, PRIORITYRn, ACTIVERn; not the read-only HMRn, which
/// `vgic5::ppitrap` leaves untrapped): the core emulates those accesses.
pub const HFG_PPI_TRAPS: u64 = 0x1e_0000;

/// ICH_HFGRTR_EL2 and ICH_HFGWTR_EL2 for a vCPU: the ICC_PPI_* classes
/// trapped only when it has hidden PPIs (`vgic5::ppitrap::traps_ppis`),
/// so a vCPU with nothing hidden runs with no trap at all.
pub const fn hfg_traps(trap_ppis: bool) -> (u64, u64) {
    let ppi = if trap_ppis { HFG_PPI_TRAPS } else { 0 };
    (HFGRTR_NO_TRAPS & !ppi, HFGWTR_NO_TRAPS & !ppi)
}

/// The encoding of the ICH_PPI_*_EL2 register the core names.
pub const fn ich_ppi_reg(r: IchPpiReg) -> u32 {
    match r {
        IchPpiReg::Enabler(w) => {
            [reg::ICH_PPI_ENABLER0_EL2, reg::ICH_PPI_ENABLER1_EL2][w as usize & 1]
        }
        IchPpiReg::Pendr(w) => [reg::ICH_PPI_PENDR0_EL2, reg::ICH_PPI_PENDR1_EL2][w as usize & 1],
        IchPpiReg::Activer(w) => {
            [reg::ICH_PPI_ACTIVER0_EL2, reg::ICH_PPI_ACTIVER1_EL2][w as usize & 1]
        }
        IchPpiReg::Priorityr(n) => ICH_PPI_PRIORITYR[n as usize & 15],
    }
}
/// ICH_HFGITR_EL2's bit for each GIC instruction a guest executes
/// (GICCDEN [0], GICCDDIS [1], GICCDPRI [2], GICCDAFF [3], GICCDPEND [4],
/// GICCDRCFG [5], GICCDHM [6], GICCDEOI [7], GICCDDI [8], GICRCDIA [9],
/// GICRCDNMIA [10]; [63:11] RES0). A bit set = the instruction does not
/// trap (Linux's booting rules ask EL2 to set them all for an EL1 kernel).
pub const fn hfgitr_bit(insn: GicInsn) -> u32 {
    match insn {
        GicInsn::Cden => 0,
        GicInsn::Cddis => 1,
        GicInsn::Cdpri => 2,
        GicInsn::Cdaff => 3,
        GicInsn::Cdpend => 4,
        GicInsn::Cdrcfg => 5,
        GicInsn::Cdhm => 6,
        GicInsn::Cdeoi => 7,
        GicInsn::Cddi => 8,
        GicInsn::Cdia => 9,
        GicInsn::Cdnmia => 10,
    }
}

/// ICH_HFGITR_EL2 for the core's choice of untrapped instructions.
pub fn hfgitr(insns: UntrappedInsns) -> u64 {
    GicInsn::ALL
        .iter()
        .filter(|&&i| insns.contains(i))
        .fold(0, |v, &i| v | 1 << hfgitr_bit(i))
}

/// ICC_IDR0_EL1.GCIE_LEGACY (this driver's reading: bit 8).
pub const IDR0_GCIE_LEGACY: u64 = 1 << 8;

/// The system registers and GIC instructions of the CPU this runs on.
pub trait CpuRegs {
    fn read(&mut self, reg: u32) -> u64;
    fn write(&mut self, reg: u32, value: u64);
    /// `sys` GIC CDxx / GSB with operand `xt`.
    fn gic(&mut self, insn: u32, xt: u64);
    /// `sysl` GICR CDIA.
    fn cdia(&mut self) -> u64;
}

/// The IRS config frame.
pub trait IrsMmio {
    fn read32(&mut self, offset: usize) -> u32;
    fn write32(&mut self, offset: usize, value: u32);
    fn write64(&mut self, offset: usize, value: u64);
    fn read64(&mut self, offset: usize) -> u64;
}

/// Physical memory the IRS reads its VM and vPE tables from (the
/// platform: the EL2 identity map; the host tests: the model's memory).
pub trait TableMem {
    fn write64(&mut self, pa: u64, value: u64);
}

/// IRS config frame registers (offsets) and fields.
pub mod irs {
    pub const IDR0: usize = 0x0000;
    pub const IDR2: usize = 0x0008;
    pub const IDR5: usize = 0x0014;
    /// IRS_IDR6.SPI_IRS_RANGE [24:0], IRS_IDR7.SPI_BASE [23:0]: this IRS's
    /// SPIs (Linux's `gicv5_irs_init`).
    pub const IDR6: usize = 0x0018;
    pub const IDR7: usize = 0x001c;
    /// IRS_PE_SELR.IAFFID [15:0], IRS_PE_STATUSR (IDLE [0], V [1]),
    /// IRS_PE_CR0.DPS [0] (Linux's `gicv5_irs_register_cpu`).
    pub const PE_SELR: usize = 0x0140;
    pub const PE_STATUSR: usize = 0x0144;
    pub const PE_CR0: usize = 0x0148;
    pub const PE_STATUSR_IDLE: u32 = 1;
    pub const PE_STATUSR_V: u32 = 1 << 1;
    pub const PE_CR0_DPS: u32 = 1;
    pub const CR0: usize = 0x0080;
    pub const SPI_SELR: usize = 0x0108;
    pub const SPI_CFGR: usize = 0x0114;
    pub const SPI_STATUSR: usize = 0x0118;
    pub const IST_BASER: usize = 0x0180;
    pub const IST_CFGR: usize = 0x0190;
    pub const IST_STATUSR: usize = 0x0194;
    pub const IDR0_VIRT: u32 = 1 << 6;
    pub const IDR2_LPI: u32 = 1 << 5;
    pub const IDR2_ID_BITS: u32 = 0x1f;
    pub const CR0_IRSEN: u32 = 1;
    pub const CR0_IDLE: u32 = 1 << 1;
    pub const SPI_STATUSR_IDLE: u32 = 1;
    pub const SPI_STATUSR_V: u32 = 1 << 1;
    pub const IST_STATUSR_IDLE: u32 = 1;
    pub const IST_BASER_VALID: u64 = 1;
    /// IRS_SPI_CFGR.TM: 1 = level.
    pub const SPI_CFGR_LEVEL: u32 = 1;

    // The vIRS (offsets and fields in docs/GICV5.md, "Encodings").
    pub const IDR3: usize = 0x000c;
    pub const IDR4: usize = 0x0010;
    pub const SPI_VMR: usize = 0x0100;
    pub const VMT_BASER: usize = 0x0200;
    pub const VMT_CFGR: usize = 0x0210;
    pub const VMT_STATUSR: usize = 0x0214;
    pub const VPE_SELR: usize = 0x0240;
    pub const VPE_DBR: usize = 0x0248;
    pub const VPE_CR0: usize = 0x0258;
    pub const VPE_STATUSR: usize = 0x025c;
    pub const VMAP_VMR: usize = 0x02c8;
    pub const VMAP_VISTR: usize = 0x02d0;
    pub const VMAP_VPER: usize = 0x02e0;
    pub const SWERR_STATUSR: usize = 0x03c0;
    pub const SWERR_SYNDROMER0: usize = 0x03c8;
    /// IRS_IDR3.VM_ID_BITS [9:5], IRS_IDR4.VPE_ID_BITS [9:6].
    pub const fn idr3_vm_id_bits(v: u32) -> u8 {
        (v >> 5 & 0x1f) as u8
    }
    pub const fn idr4_vpe_id_bits(v: u32) -> u8 {
        (v >> 6 & 0xf) as u8
    }
    pub const SPI_VMR_VIRT: u64 = 1 << 63;
    pub const VMT_BASER_VALID: u64 = 1;
    pub const VMT_STATUSR_IDLE: u32 = 1;
    pub const VPE_SELR_S: u64 = 1 << 63;
    pub const VPE_STATUSR_IDLE: u32 = 1;
    pub const VPE_STATUSR_V: u32 = 1 << 1;
    pub const VPE_CR0_DPS: u32 = 1;
    pub const VPE_DBR_DBV: u64 = 1 << 63;
    pub const VMAP_M: u64 = 1 << 63;
    /// IRS_VMAP_VMR.U: with M, unmap the VM.
    pub const VMAP_U: u64 = 1 << 62;
    pub const SWERR_V: u32 = 1;
    /// Table entries: a VMTE is four words (VM descriptor, vPE table +
    /// VPE_ID_BITS [63:59], LPI IST, SPI IST; the ISTs' ID_BITS [63:59]);
    /// a vPE table entry is one word (the vPE descriptor address).
    pub const VMTE_SIZE: u64 = 32;
    pub const VPETE_SIZE: u64 = 8;
    pub const ADDR_MASK_3: u64 = 0x00ff_ffff_ffff_fff8;
    pub const ADDR_MASK_5: u64 = 0x00ff_ffff_ffff_ffe0;
    pub const ADDR_MASK_6: u64 = 0x00ff_ffff_ffff_ffc0;
    pub const ID_BITS_SHIFT: u32 = 59;
}

/// How long to poll an IDLE bit before giving up (the IRS's and the
/// ITS's, `gicv5_its`).
const POLL_LIMIT: u32 = 1 << 20;

/// True once `f` is, false after [`POLL_LIMIT`] tries.
pub(crate) fn poll(mut f: impl FnMut() -> bool) -> bool {
    for _ in 0..POLL_LIMIT {
        if f() {
            return true;
        }
        core::hint::spin_loop();
    }
    false
}

/// Why the IRS could not be brought up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IrsError {
    /// The IST needs more ID bits than the IRS has (IRS_IDR2.ID_BITS).
    TooFewLpiBits { need: u32, have: u32 },
    /// An IDLE bit never came up.
    Timeout(&'static str),
    /// The IRS has no virtualisation (IRS_IDR0.VIRT = 0), or fewer VM ID
    /// bits than asked.
    NoVirt { need: u8, have: u8 },
    /// A vPE the IRS did not report valid after IRS_VMAP_VPER.
    VpeNotValid { vm: u16, vpe: u16 },
    /// An SPI IRS_SPI_SELR did not accept.
    SpiNotValid(u32),
    /// An IAFFID IRS_PE_SELR did not accept (not a PE this IRS serves).
    PeNotValid(u16),
}

/// IRS_IDR2.ID_BITS: the widest LPI ID this IRS's IST can take (what
/// `vgic5::IrsLayout::for_cpus_within` sizes the MSI pool by).
pub fn lpi_id_bits_of(mmio: &mut impl IrsMmio) -> u32 {
    mmio.read32(irs::IDR2) & irs::IDR2_ID_BITS
}

/// The SPI IDs of the IRS whose config frame is `mmio` (IRS_IDR7.SPI_BASE,
/// IRS_IDR6.SPI_IRS_RANGE), readable before it is enabled (for naming
/// what an IRS that does not come up would have served).
pub fn spi_range_of(mmio: &mut impl IrsMmio) -> core::ops::Range<u32> {
    let base = mmio.read32(irs::IDR7) & 0xff_ffff;
    let count = mmio.read32(irs::IDR6) & 0x1ff_ffff;
    base..base.saturating_add(count)
}

/// The shared half: one IRS's config frame, plus the CDxx instructions any
/// CPU may issue for an SPI. The platform keeps each IRS behind its own
/// CountedLock (`vgic5::irses` says why) and takes it only at boot and on
/// the slow guest-configuration path (never on vCPU load/put or the timer
/// path); the core's `vgic5::irses::IrsRoutes` says which IRS an SPI, a
/// CPU's PE or a vIRS step goes to.
pub struct Gicv5Irs<M: IrsMmio, R: CpuRegs> {
    mmio: M,
    cpu: R,
    /// IAFFID of each CPU, by the core's CPU index.
    cpus: &'static [(u64, u16)],
    pub host: HostGicv5,
}

impl<M: IrsMmio, R: CpuRegs> Gicv5Irs<M, R> {
    /// Read what the IRS offers, give it (`ist`: the IRS that holds the
    /// LPI IST, `vgic5::irses::IrsRoutes::IST_OWNER`) an IST of
    /// 2^`lpi_bits` LPIs at physical address `base` (zeroed, 4 bytes an
    /// entry, linear), enable it. The other IRSes of a host with several
    /// get no IST (`None`): the LPI space is the system's, and Linux gives
    /// only its first IRS one. `cpus` maps MPIDR to IAFFID (DT
    /// `arm,iaffids` / MADT).
    pub fn init(
        mut mmio: M,
        cpu: R,
        cpus: &'static [(u64, u16)],
        ist: Option<(u64, u32)>,
    ) -> Result<Self, IrsError> {
        let idr0 = mmio.read32(irs::IDR0);
        let idr2 = mmio.read32(irs::IDR2);
        let have = idr2 & irs::IDR2_ID_BITS;
        let lpis = idr2 & irs::IDR2_LPI != 0;
        if let (true, Some((ist, lpi_bits))) = (lpis, ist) {
            if lpi_bits > have {
                return Err(IrsError::TooFewLpiBits {
                    need: lpi_bits,
                    have,
                });
            }
            mmio.write32(irs::IST_CFGR, lpi_bits);
            mmio.write64(irs::IST_BASER, ist | irs::IST_BASER_VALID);
            if !poll(|| mmio.read32(irs::IST_STATUSR) & irs::IST_STATUSR_IDLE != 0) {
                return Err(IrsError::Timeout("IRS_IST_STATUSR.IDLE"));
            }
        }
        mmio.write32(irs::CR0, irs::CR0_IRSEN);
        if !poll(|| mmio.read32(irs::CR0) & irs::CR0_IDLE != 0) {
            return Err(IrsError::Timeout("IRS_CR0.IDLE"));
        }
        let host = HostGicv5 {
            irs: true,
            lpis,
            virt: idr0 & irs::IDR0_VIRT != 0,
            gcie_legacy: false,
            ppis: PpiSet::EMPTY,
        };
        Ok(Gicv5Irs {
            mmio,
            cpu,
            cpus,
            host,
        })
    }

    /// Number of SPIs of the whole system (IRS_IDR5.SPI_RANGE).
    pub fn spi_count(&mut self) -> u32 {
        self.mmio.read32(irs::IDR5) & 0xff_ffff
    }

    /// This IRS's own SPI IDs (IRS_IDR7.SPI_BASE, IRS_IDR6.SPI_IRS_RANGE),
    /// for the core's `vgic5::irses::IrsRoutes`.
    pub fn spi_range(&mut self) -> core::ops::Range<u32> {
        spi_range_of(&mut self.mmio)
    }

    /// Set up the PE with IAFFID `iaffid`, one this IRS serves (the core's
    /// `IrsRoutes::of_cpu`): IRS_PE_SELR, then IRS_PE_CR0.DPS (targeted
    /// routing only; 1-of-N is not used), each waited idle.
    pub fn register_pe(&mut self, iaffid: u16) -> Result<(), IrsError> {
        self.mmio.write32(irs::PE_SELR, u32::from(iaffid));
        self.wait(irs::PE_STATUSR, irs::PE_STATUSR_IDLE, "IRS_PE_STATUSR.IDLE")?;
        if self.mmio.read32(irs::PE_STATUSR) & irs::PE_STATUSR_V == 0 {
            return Err(IrsError::PeNotValid(iaffid));
        }
        self.mmio.write32(irs::PE_CR0, irs::PE_CR0_DPS);
        self.wait(irs::PE_STATUSR, irs::PE_STATUSR_IDLE, "IRS_PE_STATUSR.IDLE")
    }

    fn iaffid(&self, mpidr: u64) -> Option<u16> {
        let aff = mpidr & 0xff_00ff_ffff;
        self.cpus
            .iter()
            .find(|&&(m, _)| m & 0xff_00ff_ffff == aff)
            .map(|&(_, i)| i)
    }
}

/// The vIRS half of the IRS (virtual SPIs and LPIs of the partitions'
/// VMs). Like the rest of `Gicv5Irs` it runs on the slow path only: once
/// when the partitions are set up (the platform's `gicv5::init_virs`, on
/// every IRS under its own lock, each given its share of the core's plan
/// as `vgic5::irses::IrsRoutes::split_virs` decides), when a doorbell is
/// re-armed, a destroyed partition released, and when IRS software errors
/// are drained.
impl<M: IrsMmio, R: CpuRegs> Gicv5Irs<M, R> {
    /// Give the IRS a linear VM table of 2^`vm_id_bits` 32-byte entries at
    /// `vmt` (zeroed, 32-byte aligned) and return what the vIRS offers.
    pub fn init_virs(&mut self, vmt: u64, vm_id_bits: u8) -> Result<VirsCaps, IrsError> {
        let have = irs::idr3_vm_id_bits(self.mmio.read32(irs::IDR3));
        if !self.host.virt || vm_id_bits > have {
            return Err(IrsError::NoVirt {
                need: vm_id_bits,
                have: if self.host.virt { have } else { 0 },
            });
        }
        self.wait(
            irs::VMT_STATUSR,
            irs::VMT_STATUSR_IDLE,
            "IRS_VMT_STATUSR.IDLE",
        )?;
        self.mmio.write32(irs::VMT_CFGR, u32::from(vm_id_bits));
        self.mmio.write64(
            irs::VMT_BASER,
            (vmt & irs::ADDR_MASK_3) | irs::VMT_BASER_VALID,
        );
        self.wait(
            irs::VMT_STATUSR,
            irs::VMT_STATUSR_IDLE,
            "IRS_VMT_STATUSR.IDLE",
        )?;
        Ok(VirsCaps {
            vm_id_bits,
            vpe_id_bits: irs::idr4_vpe_id_bits(self.mmio.read32(irs::IDR4)),
            spis: self.spi_count(),
        })
    }

    fn wait(&mut self, reg: usize, bit: u32, what: &'static str) -> Result<(), IrsError> {
        let mmio = &mut self.mmio;
        if poll(|| mmio.read32(reg) & bit != 0) {
            Ok(())
        } else {
            Err(IrsError::Timeout(what))
        }
    }

    /// Apply the core's vIRS plan (`vgic5::plan_virs`): table entries
    /// written to memory, then the IRS told through its VMAP/VPE/SPI_VMR
    /// registers, waiting for each to go idle. (On hardware whose IRS is
    /// not coherent, the table writes need a cache clean first; the
    /// platform's `TableMem` does that.)
    pub fn apply_virs(&mut self, mem: &mut impl TableMem, ops: &[VirsOp]) -> Result<(), IrsError> {
        let vmt = self.mmio.read64(irs::VMT_BASER) & irs::ADDR_MASK_3;
        for op in ops {
            match *op {
                VirsOp::WriteVmte {
                    vm,
                    tables,
                    vpe_id_bits,
                    lpi_id_bits,
                    spi_id_bits,
                } => {
                    let e = vmt + u64::from(vm) * irs::VMTE_SIZE;
                    let bits = |b: u8| u64::from(b) << irs::ID_BITS_SHIFT;
                    mem.write64(e, tables.vmd & irs::ADDR_MASK_3);
                    mem.write64(e + 8, (tables.vpet & irs::ADDR_MASK_3) | bits(vpe_id_bits));
                    mem.write64(
                        e + 16,
                        (tables.lpi_ist & irs::ADDR_MASK_6) | bits(lpi_id_bits),
                    );
                    mem.write64(
                        e + 24,
                        (tables.spi_ist & irs::ADDR_MASK_6) | bits(spi_id_bits),
                    );
                }
                VirsOp::WriteVpete {
                    vpe, vpet, vped, ..
                } => {
                    mem.write64(
                        vpet + u64::from(vpe) * irs::VPETE_SIZE,
                        vped & irs::ADDR_MASK_5,
                    );
                }
                VirsOp::MapVm { vm } => self.vm_op(irs::VMAP_VMR, irs::VMAP_M | u64::from(vm))?,
                VirsOp::MapVist { vm, spi } => {
                    let ty = if spi { TYPE_SPI } else { TYPE_LPI };
                    self.vm_op(
                        irs::VMAP_VISTR,
                        irs::VMAP_M | (u64::from(vm) << 32) | (ty << 29),
                    )?
                }
                VirsOp::MapVpe { vm, vpe } => self.vm_op(
                    irs::VMAP_VPER,
                    irs::VMAP_M | (u64::from(vm) << 32) | u64::from(vpe),
                )?,
                VirsOp::ArmDoorbell { vm, vpe, db } => {
                    // The doorbell is a physical LPI, edge, at the CPU the
                    // vCPU is pinned to.
                    let lpi = operand(TYPE_LPI, db.lpi);
                    let iaffid = self.iaffid(db.mpidr).unwrap_or(0);
                    self.cpu
                        .gic(insn::GIC_CDPRI, lpi | (DEFAULT_PRIORITY << 35));
                    self.cpu.gic(insn::GIC_CDHM, lpi);
                    self.cpu
                        .gic(insn::GIC_CDAFF, lpi | (u64::from(iaffid) << 32));
                    self.cpu.gic(insn::GIC_CDEN, lpi);
                    self.cpu.gic(insn::GSB_SYS, 0);
                    self.select_vpe(vm, vpe)?;
                    self.mmio.write32(irs::VPE_CR0, irs::VPE_CR0_DPS);
                    self.wait(
                        irs::VPE_STATUSR,
                        irs::VPE_STATUSR_IDLE,
                        "IRS_VPE_STATUSR.IDLE",
                    )?;
                    self.mmio
                        .write64(irs::VPE_DBR, irs::VPE_DBR_DBV | u64::from(db.lpi));
                    self.wait(
                        irs::VPE_STATUSR,
                        irs::VPE_STATUSR_IDLE,
                        "IRS_VPE_STATUSR.IDLE",
                    )?;
                }
                VirsOp::ReleaseSpi { spi } => self.set_spi_vmr(spi, 0)?,
                VirsOp::UnmapVm { vm } => {
                    self.vm_op(irs::VMAP_VMR, irs::VMAP_M | irs::VMAP_U | u64::from(vm))?
                }
                VirsOp::AssignSpi { spi, vm } => {
                    self.set_spi_vmr(spi, irs::SPI_VMR_VIRT | u64::from(vm))?
                }
            }
        }
        Ok(())
    }

    /// Physical SPI `spi` given to a VM or back (IRS_SPI_VMR = `vmr`):
    /// selected, checked valid, written, each step waited idle.
    fn set_spi_vmr(&mut self, spi: u32, vmr: u64) -> Result<(), IrsError> {
        self.mmio.write32(irs::SPI_SELR, spi);
        self.wait(
            irs::SPI_STATUSR,
            irs::SPI_STATUSR_IDLE,
            "IRS_SPI_STATUSR.IDLE",
        )?;
        if self.mmio.read32(irs::SPI_STATUSR) & irs::SPI_STATUSR_V == 0 {
            return Err(IrsError::SpiNotValid(spi));
        }
        self.mmio.write64(irs::SPI_VMR, vmr);
        self.wait(
            irs::SPI_STATUSR,
            irs::SPI_STATUSR_IDLE,
            "IRS_SPI_STATUSR.IDLE",
        )
    }

    fn vm_op(&mut self, reg: usize, value: u64) -> Result<(), IrsError> {
        self.wait(
            irs::VMT_STATUSR,
            irs::VMT_STATUSR_IDLE,
            "IRS_VMT_STATUSR.IDLE",
        )?;
        self.mmio.write64(reg, value);
        self.wait(
            irs::VMT_STATUSR,
            irs::VMT_STATUSR_IDLE,
            "IRS_VMT_STATUSR.IDLE",
        )
    }

    fn select_vpe(&mut self, vm: u16, vpe: u16) -> Result<(), IrsError> {
        self.mmio.write64(
            irs::VPE_SELR,
            irs::VPE_SELR_S | (u64::from(vpe) << 32) | u64::from(vm),
        );
        self.wait(
            irs::VPE_STATUSR,
            irs::VPE_STATUSR_IDLE,
            "IRS_VPE_STATUSR.IDLE",
        )?;
        if self.mmio.read32(irs::VPE_STATUSR) & irs::VPE_STATUSR_V == 0 {
            return Err(IrsError::VpeNotValid { vm, vpe });
        }
        Ok(())
    }

    /// Re-arm a vPE's doorbell (the vCPU was put to wait for an interrupt).
    pub fn rearm_doorbell(&mut self, vm: u16, vpe: u16, lpi: u32) -> Result<(), IrsError> {
        self.select_vpe(vm, vpe)?;
        self.mmio
            .write64(irs::VPE_DBR, irs::VPE_DBR_DBV | u64::from(lpi));
        self.wait(
            irs::VPE_STATUSR,
            irs::VPE_STATUSR_IDLE,
            "IRS_VPE_STATUSR.IDLE",
        )
    }

    /// The oldest IRS software error record's syndrome (IRS_SWERR_
    /// SYNDROMER0, for `vgic5::VirsFault::from_syndrome`), cleared.
    pub fn take_swerr(&mut self) -> Option<u64> {
        if self.mmio.read32(irs::SWERR_STATUSR) & irs::SWERR_V == 0 {
            return None;
        }
        let s = self.mmio.read64(irs::SWERR_SYNDROMER0);
        self.mmio.write32(irs::SWERR_STATUSR, irs::SWERR_V);
        Some(s)
    }
}

impl<M: IrsMmio, R: CpuRegs> SharedIrqChip for Gicv5Irs<M, R> {
    fn spi_enable(&mut self, intid: u32, enable: bool) {
        let CoreIntid::Spi(n) = CoreIntid::from_core(intid) else {
            return;
        };
        let op = if enable {
            insn::GIC_CDEN
        } else {
            insn::GIC_CDDIS
        };
        self.cpu.gic(op, operand(TYPE_SPI, n));
    }

    fn spi_route(&mut self, intid: u32, mpidr: u64) {
        let CoreIntid::Spi(n) = CoreIntid::from_core(intid) else {
            return;
        };
        let Some(iaffid) = self.iaffid(mpidr) else {
            return;
        };
        // Targeted routing (IRM = 0) at the CPU's IAFFID.
        self.cpu.gic(
            insn::GIC_CDAFF,
            (u64::from(iaffid) << 32) | operand(TYPE_SPI, n),
        );
        self.cpu.gic(insn::GSB_SYS, 0);
    }

    fn spi_set_edge(&mut self, intid: u32, edge: bool) {
        let CoreIntid::Spi(n) = CoreIntid::from_core(intid) else {
            return;
        };
        self.mmio.write32(irs::SPI_SELR, n);
        let mmio = &mut self.mmio;
        let ok = poll(|| mmio.read32(irs::SPI_STATUSR) & irs::SPI_STATUSR_IDLE != 0);
        if !ok || self.mmio.read32(irs::SPI_STATUSR) & irs::SPI_STATUSR_V == 0 {
            return;
        }
        self.mmio
            .write32(irs::SPI_CFGR, if edge { 0 } else { irs::SPI_CFGR_LEVEL });
    }
}

/// The per-CPU half: this CPU's interface and PPIs, and the LPIs that are
/// its IPIs. Only its own CPU holds one.
pub struct Gicv5Cpu<R: CpuRegs> {
    regs: R,
    caps: IrqChipCaps,
    /// This CPU's index (its IPI LPIs are `ipi_base + 16 index ..`).
    index: u32,
    ipi_base: u32,
    /// MPIDR of each CPU by index, to address an IPI.
    cpus: &'static [(u64, u16)],
    /// The physical LPIs that are vPE doorbells, and the last one taken.
    doorbells: core::ops::Range<u32>,
    doorbell: Option<u32>,
    /// The physical LPIs device events are mapped to (`vgic5::IrsLayout`'s
    /// MSI pool): `ack` gives LPI `msi.start + n` as core INTID
    /// `LPI_BASE + n`.
    msi: core::ops::Range<u32>,
}

impl<R: CpuRegs> Gicv5Cpu<R> {
    /// Bring up this CPU's interface: all PPIs disabled, inactive, not
    /// pending, at the default priority; the priority mask open; the CPU
    /// interface on; this CPU's 16 IPI LPIs edge-triggered, targeted here
    /// and enabled (needs the IRS enabled first); the virtual interface
    /// off until a vCPU is loaded.
    pub fn init_this_cpu(
        mut regs: R,
        index: u32,
        ipi_base: u32,
        cpus: &'static [(u64, u16)],
        caps: IrqChipCaps,
    ) -> Self {
        for (en, cp, ca) in [
            (
                reg::ICC_PPI_ENABLER0_EL1,
                reg::ICC_PPI_CPENDR0_EL1,
                reg::ICC_PPI_CACTIVER0_EL1,
            ),
            (
                reg::ICC_PPI_ENABLER1_EL1,
                reg::ICC_PPI_CPENDR1_EL1,
                reg::ICC_PPI_CACTIVER1_EL1,
            ),
        ] {
            regs.write(en, 0);
            regs.write(cp, u64::MAX);
            regs.write(ca, u64::MAX);
        }
        let prio = DEFAULT_PRIORITY * 0x0101_0101_0101_0101;
        for r in ICC_PPI_PRIORITYR {
            regs.write(r, prio);
        }
        regs.write(reg::ICC_PCR_EL1, PCR_ALL);
        regs.write(reg::ICC_CR0_EL1, CR0_EN);
        let iaffid = regs.read(reg::ICC_IAFFIDR_EL1) & 0xffff;
        for sgi in 0..16 {
            let lpi = operand(TYPE_LPI, ipi_lpi(ipi_base, index, sgi));
            regs.gic(insn::GIC_CDPRI, lpi | (DEFAULT_PRIORITY << 35));
            regs.gic(insn::GIC_CDHM, lpi); // HM = 0: edge
            regs.gic(insn::GIC_CDAFF, lpi | (iaffid << 32));
            regs.gic(insn::GIC_CDEN, lpi);
        }
        regs.gic(insn::GSB_SYS, 0);
        regs.write(reg::ICH_VCTLR_EL2, 0);
        regs.write(reg::ICH_CONTEXTR_EL2, 0);
        regs.write(reg::ICH_PPI_DVIR0_EL2, 0);
        regs.write(reg::ICH_PPI_DVIR1_EL2, 0);
        Gicv5Cpu {
            regs,
            caps,
            index,
            ipi_base,
            cpus,
            doorbells: 0..0,
            doorbell: None,
            msi: 0..0,
        }
    }

    /// The PPIs this CPU implements, and whether the GICv3-compatible
    /// virtual interface exists: written all ones into ICH_PPI_ENABLER
    /// with DVI off and read back, then cleared (no vCPU is loaded yet).
    pub fn probe(&mut self, host: &mut HostGicv5) {
        self.regs.write(reg::ICH_PPI_DVIR0_EL2, 0);
        self.regs.write(reg::ICH_PPI_DVIR1_EL2, 0);
        self.regs.write(reg::ICH_PPI_ENABLER0_EL2, u64::MAX);
        self.regs.write(reg::ICH_PPI_ENABLER1_EL2, u64::MAX);
        host.ppis = PpiSet([
            self.regs.read(reg::ICH_PPI_ENABLER0_EL2),
            self.regs.read(reg::ICH_PPI_ENABLER1_EL2),
        ]);
        self.regs.write(reg::ICH_PPI_ENABLER0_EL2, 0);
        self.regs.write(reg::ICH_PPI_ENABLER1_EL2, 0);
        host.gcie_legacy = self.regs.read(reg::ICC_IDR0_EL1) & IDR0_GCIE_LEGACY != 0;
    }

    /// GIC VDPEND with the core's operand (`vgic5::vdpend_operand`: an
    /// emulated device's virtual SPI of a VM made pending or not, PENDING
    /// [63], VM [47:32], TYPE [31:29], ID [23:0]) on this CPU's interface,
    /// at EL2. It names the VM, not a vPE: the IRS delivers the virtual
    /// SPI to whichever vPE the guest targeted it at, resident on any CPU
    /// (or rings that vPE's doorbell), so it may be issued from any CPU.
    pub fn vdpend(&mut self, op: u64) {
        self.regs.gic(insn::GIC_VDPEND, op);
    }

    /// The LPIs that are vPE doorbells (`vgic5::Doorbell`): `ack` ends
    /// them at EL2 and keeps the last for [`Self::take_doorbell`].
    pub fn set_doorbells(&mut self, lpis: core::ops::Range<u32>) {
        self.doorbells = lpis;
    }

    /// The LPIs of the MSI pool (`IrsLayout::msi_base ..`): `ack` gives
    /// them to the core as its GICv3 LPI numbers, for `exit::dispatch_irq`
    /// to route through `LpiRoutes`.
    pub fn set_msi_lpis(&mut self, lpis: core::ops::Range<u32>) {
        self.msi = lpis;
    }

    /// The doorbell LPI the last `ack` took, if any (the platform's root
    /// handler hands its CPU to `exit::doorbell`, which decides for the
    /// vCPU pinned there).
    pub fn take_doorbell(&mut self) -> Option<u32> {
        self.doorbell.take()
    }

    /// The register access, for tests and the platform's diagnostics.
    pub fn regs(&mut self) -> &mut R {
        &mut self.regs
    }

    fn ipi_range(&self) -> core::ops::Range<u32> {
        let base = ipi_lpi(self.ipi_base, self.index, 0);
        base..base + 16
    }

    /// Load a vCPU's virtual interface: the host copies of its DVI PPIs
    /// masked (through `change_percpu_state`, lockless on GICv5), DVI and
    /// HVIR set from `plan` (HVIR model-only: [`UNCONFIRMED`]), its saved
    /// PPI state, VMCR and APR restored, the ICC_PPI_* classes trapped in
    /// ICH_HFGRTR/HFGWTR_EL2 if it has hidden implemented PPIs (the core
    /// emulates them, `vgic5::ppitrap`; [`hfg_traps`]), the GIC
    /// instructions it may execute untrapped (`insns`, the core's
    /// `UntrappedInsns`) in ICH_HFGITR_EL2, the vPE made resident. Only
    /// this CPU's registers and the vCPU's own `ctx`: no lock shared
    /// between CPUs.
    #[allow(clippy::too_many_arguments)]
    pub fn vcpu_load(
        &mut self,
        chip_lock: &CountedLock<()>,
        ctx: &VPpiContext,
        plan: &PpiPlan,
        implemented: PpiSet,
        insns: UntrappedInsns,
        vpe: u16,
        vm: u16,
    ) {
        for n in plan.dvi.iter() {
            change_percpu_state(
                self,
                chip_lock,
                LockPath::VcpuLoad,
                PpiStateChange::Enable(n, false),
            );
        }
        let hidden = implemented.and_not(plan.visible);
        let r = &mut self.regs;
        r.write(reg::ICH_PPI_DVIR0_EL2, plan.dvi.0[0]);
        r.write(reg::ICH_PPI_DVIR1_EL2, plan.dvi.0[1]);
        r.write(reg::ICH_PPI_HVIR0_EL2, hidden.0[0]);
        r.write(reg::ICH_PPI_HVIR1_EL2, hidden.0[1]);
        r.write(reg::ICH_PPI_ENABLER0_EL2, ctx.enabler[0]);
        r.write(reg::ICH_PPI_ENABLER1_EL2, ctx.enabler[1]);
        r.write(reg::ICH_PPI_ACTIVER0_EL2, ctx.activer[0]);
        r.write(reg::ICH_PPI_ACTIVER1_EL2, ctx.activer[1]);
        r.write(reg::ICH_PPI_PENDR0_EL2, ctx.pendr[0]);
        r.write(reg::ICH_PPI_PENDR1_EL2, ctx.pendr[1]);
        for (i, p) in ICH_PPI_PRIORITYR.iter().enumerate() {
            r.write(*p, ctx.priorityr[i]);
        }
        r.write(reg::ICH_VMCR_EL2, ctx.vmcr);
        r.write(reg::ICH_APR_EL2, ctx.apr);
        let (hfgrtr, hfgwtr) = hfg_traps(traps_ppis(plan.visible, implemented));
        r.write(reg::ICH_HFGRTR_EL2, hfgrtr);
        r.write(reg::ICH_HFGWTR_EL2, hfgwtr);
        r.write(reg::ICH_HFGITR_EL2, hfgitr(insns));
        r.write(
            reg::ICH_CONTEXTR_EL2,
            CONTEXTR_V | (u64::from(vpe) << 32) | u64::from(vm),
        );
        r.write(reg::ICH_VCTLR_EL2, VCTLR_EN);
    }

    /// Read the resident vCPU's ICH_PPI_*_EL2 register `r` (a trapped
    /// ICC_PPI_* access the core emulates: `vgic5::ppitrap`).
    pub fn vppi_read(&mut self, r: IchPpiReg) -> u64 {
        self.regs.read(ich_ppi_reg(r))
    }

    /// Write it (as [`Self::vppi_read`]).
    pub fn vppi_write(&mut self, r: IchPpiReg, value: u64) {
        self.regs.write(ich_ppi_reg(r), value)
    }

    /// Load a vCPU with the GICv3 interface on this GICv5 (FEAT_GCIE_LEGACY,
    /// `vgic5::VcpuSwitch::ListRegisters` on a GICv5 host):
    /// ICH_VCTLR_EL2.V3 = 1 (En = 0: the GICv3-compatible interface is
    /// switched on by ICH_HCR_EL2.En, as on a GICv3). Called before the
    /// platform restores the GICv3 state, since ICH_VMCR_EL2's layout
    /// follows V3 (the platform's write is the context synchronisation KVM
    /// makes with an ISB).
    pub fn load_gicv3_compatible(&mut self) {
        self.regs.write(reg::ICH_VCTLR_EL2, VCTLR_V3);
    }

    /// Put that vCPU: ICH_VCTLR_EL2 back to 0 (V3 clear), as after
    /// [`Self::vcpu_put`], so the next vCPU starts from the same state
    /// whichever interface it has.
    pub fn put_gicv3_compatible(&mut self) {
        self.regs.write(reg::ICH_VCTLR_EL2, 0);
    }

    /// Put the vCPU: save its virtual PPI state (the pending bits of DVI
    /// PPIs are the physical ones' alias and stay with the hardware, so
    /// they are not saved), make it non-resident and DVI off. With
    /// `wake_on_timer` the host copies of its DVI PPIs are unmasked, so a
    /// timer that fires while the vCPU is not resident (it is blocked in
    /// WFI) reaches EL2 and wakes the CPU; otherwise they stay masked and
    /// the pending state simply waits for the next load.
    pub fn vcpu_put(
        &mut self,
        chip_lock: &CountedLock<()>,
        ctx: &mut VPpiContext,
        plan: &PpiPlan,
        wake_on_timer: bool,
    ) {
        let r = &mut self.regs;
        ctx.enabler = [
            r.read(reg::ICH_PPI_ENABLER0_EL2),
            r.read(reg::ICH_PPI_ENABLER1_EL2),
        ];
        ctx.activer = [
            r.read(reg::ICH_PPI_ACTIVER0_EL2),
            r.read(reg::ICH_PPI_ACTIVER1_EL2),
        ];
        ctx.pendr = [
            r.read(reg::ICH_PPI_PENDR0_EL2) & !plan.dvi.0[0],
            r.read(reg::ICH_PPI_PENDR1_EL2) & !plan.dvi.0[1],
        ];
        for (i, p) in ICH_PPI_PRIORITYR.iter().enumerate() {
            ctx.priorityr[i] = r.read(*p);
        }
        ctx.vmcr = r.read(reg::ICH_VMCR_EL2);
        ctx.apr = r.read(reg::ICH_APR_EL2);
        r.write(reg::ICH_VCTLR_EL2, 0);
        r.write(reg::ICH_CONTEXTR_EL2, 0);
        r.write(reg::ICH_PPI_DVIR0_EL2, 0);
        r.write(reg::ICH_PPI_DVIR1_EL2, 0);
        if wake_on_timer {
            for n in plan.dvi.iter() {
                change_percpu_state(
                    self,
                    chip_lock,
                    LockPath::VcpuPut,
                    PpiStateChange::Enable(n, true),
                );
            }
        }
    }

    /// A DVI PPI reached EL2 while its vCPU was not resident (the wake-up
    /// of [`Self::vcpu_put`]): mask the host copy again and end it at EL2;
    /// the line stays asserted, so the next load delivers it to the guest.
    pub fn end_dvi_wakeup(&mut self, ppi: u32) {
        self.regs.gic(insn::GIC_CDDIS, operand(TYPE_PPI, ppi));
        self.regs.gic(insn::GIC_CDEOI, 0);
        self.regs.gic(insn::GIC_CDDI, operand(TYPE_PPI, ppi));
    }

    fn ppi_reg_write(&mut self, regs: [u32; 2], ppi: u32) {
        if ppi < 128 {
            self.regs.write(regs[(ppi / 64) as usize], 1 << (ppi % 64));
        }
    }
}

impl<R: CpuRegs> PerCpuIrqChip for Gicv5Cpu<R> {
    fn caps(&self) -> IrqChipCaps {
        self.caps
    }

    fn apply_ppi(&mut self, change: PpiStateChange) {
        match change {
            PpiStateChange::Enable(n, on) if (16..128).contains(&n) => {
                let op = if on { insn::GIC_CDEN } else { insn::GIC_CDDIS };
                self.regs.gic(op, operand(TYPE_PPI, n));
            }
            PpiStateChange::Active(n, on) if (16..128).contains(&n) => {
                let r = if on {
                    [reg::ICC_PPI_SACTIVER0_EL1, reg::ICC_PPI_SACTIVER1_EL1]
                } else {
                    [reg::ICC_PPI_CACTIVER0_EL1, reg::ICC_PPI_CACTIVER1_EL1]
                };
                self.ppi_reg_write(r, n);
            }
            PpiStateChange::Pending(n, on) if (16..128).contains(&n) => {
                let r = if on {
                    [reg::ICC_PPI_SPENDR0_EL1, reg::ICC_PPI_SPENDR1_EL1]
                } else {
                    [reg::ICC_PPI_CPENDR0_EL1, reg::ICC_PPI_CPENDR1_EL1]
                };
                self.ppi_reg_write(r, n);
            }
            // SGIs are LPIs on GICv5; their state is not per-CPU registers.
            _ => {}
        }
    }

    fn ppi_bits(&mut self) -> PpiBits {
        // Core bits 16..31 are PPIs 16..31; bits 0..15 (SGIs) are LPIs.
        let mask = 0xffff_0000u64;
        PpiBits {
            pending: (self.regs.read(reg::ICC_PPI_SPENDR0_EL1) & mask) as u32,
            active: (self.regs.read(reg::ICC_PPI_SACTIVER0_EL1) & mask) as u32,
        }
    }

    fn ack(&mut self) -> u32 {
        let ia = self.regs.cdia();
        if ia & CDIA_VALID == 0 {
            return 1023;
        }
        self.regs.gic(insn::GSB_ACK, 0);
        let id = (ia & 0xff_ffff) as u32;
        let ty = (ia >> 29) & 7;
        let msi = (ty == TYPE_LPI)
            .then(|| msi_pool_core_intid(self.msi.clone(), id))
            .flatten();
        match (ty, msi) {
            // GICv5 PPIs 0..15 are real PPIs, not the core's SGI numbers.
            (TYPE_PPI, _) if (16..32).contains(&id) => id,
            (TYPE_SPI, _) if id < CORE_SPIS => 32 + id,
            (TYPE_LPI, _) if self.ipi_range().contains(&id) => id - self.ipi_range().start,
            (TYPE_LPI, _) if self.doorbells.contains(&id) => {
                self.regs.gic(insn::GIC_CDEOI, 0);
                self.regs.gic(insn::GIC_CDDI, operand(TYPE_LPI, id));
                self.doorbell = Some(id);
                1023
            }
            // A device event. A GICv3 LPI has no active state, and the
            // core's trapped LPI path (`exit::lpi`) never deactivates one:
            // it is deactivated here, so the next event of the same LPI is
            // taken as soon as the priority drops.
            (TYPE_LPI, Some(core)) => {
                self.regs.gic(insn::GIC_CDDI, operand(TYPE_LPI, id));
                core
            }
            // Not something the core numbers (a PPI above 31, an SPI from
            // CORE_SPIS on, a stray LPI): end it here and report none.
            (ty, _) => {
                self.regs.gic(insn::GIC_CDEOI, 0);
                self.regs.gic(insn::GIC_CDDI, operand(ty, id));
                1023
            }
        }
    }

    fn priority_drop(&mut self, _intid: u32) {
        // GIC CDEOI drops the running priority; it takes no INTID.
        self.regs.gic(insn::GIC_CDEOI, 0);
    }

    fn deactivate(&mut self, intid: u32) {
        let op = match CoreIntid::from_core(intid) {
            CoreIntid::Sgi(n) => operand(TYPE_LPI, self.ipi_range().start + n),
            CoreIntid::Ppi(n) => operand(TYPE_PPI, n),
            CoreIntid::Spi(n) => operand(TYPE_SPI, n),
            // Already deactivated in `ack`.
            CoreIntid::Lpi(_) => return,
        };
        self.regs.gic(insn::GIC_CDDI, op);
    }

    fn send_sgi(&mut self, mpidr: u64, intid: u32) {
        let aff = mpidr & 0xff_00ff_ffff;
        let Some(cpu) = self
            .cpus
            .iter()
            .position(|&(m, _)| m & 0xff_00ff_ffff == aff)
        else {
            return;
        };
        let lpi = ipi_lpi(self.ipi_base, cpu as u32, intid & 0xf);
        self.regs
            .gic(insn::GIC_CDPEND, operand(TYPE_LPI, lpi) | (1 << 32));
    }
}

/// The real instructions, for the platform.
#[cfg(target_arch = "aarch64")]
pub mod hw {
    use super::{hw_read, hw_write, insn, CpuRegs, IrsMmio, TableMem};
    use core::arch::asm;

    /// This CPU's GICv5 system registers and instructions.
    pub struct SysRegs;

    macro_rules! gic_sys {
        ($xt:expr, $crm:literal, $op2:literal) => {
            // SAFETY: a GIC system instruction at EL2 on this CPU's
            // interface, with an operand the driver built.
            unsafe {
                asm!(concat!("sys #0, c12, c", stringify!($crm), ", #", stringify!($op2), ", {}"),
                     in(reg) $xt, options(nostack))
            }
        };
    }

    impl CpuRegs for SysRegs {
        fn read(&mut self, reg: u32) -> u64 {
            if !super::hw_emits(reg) {
                return 0;
            }
            hw_read(reg)
        }
        fn write(&mut self, reg: u32, value: u64) {
            if super::hw_emits(reg) {
                hw_write(reg, value)
            }
        }
        fn gic(&mut self, op: u32, xt: u64) {
            match op {
                // GSB takes XZR as its operand.
                // SAFETY: a GIC synchronisation barrier; no operand.
                insn::GSB_SYS => unsafe { asm!("sys #0, c12, c0, #0", options(nostack)) },
                // SAFETY: as GSB SYS.
                insn::GSB_ACK => unsafe { asm!("sys #0, c12, c0, #1", options(nostack)) },
                insn::GIC_CDDIS => gic_sys!(xt, 1, 0),
                insn::GIC_CDEN => gic_sys!(xt, 1, 1),
                insn::GIC_CDPRI => gic_sys!(xt, 1, 2),
                insn::GIC_CDAFF => gic_sys!(xt, 1, 3),
                insn::GIC_CDPEND => {
                    // SAFETY: orders earlier memory writes (a mailbox
                    // post) before the IPI the CDPEND raises.
                    unsafe { asm!("dsb ishst", options(nostack)) };
                    gic_sys!(xt, 1, 4)
                }
                insn::GIC_CDEOI => gic_sys!(xt, 1, 7),
                insn::GIC_CDDI => gic_sys!(xt, 2, 0),
                insn::GIC_CDHM => gic_sys!(xt, 2, 1),
                // SAFETY: GIC VDPEND (`sys #4, c12, c1, #4`, op1 = 4: the
                // EL2 form, UNDEFINED at EL1; this runs at EL2) sets or
                // clears the pending state of one virtual SPI of the VM
                // its operand names, the core's `vgic5::vdpend_operand`
                // for a VM the boot put in the vIRS. It reads or writes
                // no memory and changes no state of this CPU.
                insn::GIC_VDPEND => unsafe {
                    asm!("sys #4, c12, c1, #4, {}", in(reg) xt, options(nostack))
                },
                _ => {}
            }
        }
        fn cdia(&mut self) -> u64 {
            let v: u64;
            // SAFETY: GICR CDIA acknowledges this CPU's highest priority
            // pending interrupt; the root handler is its only caller.
            unsafe { asm!("sysl {}, #0, c12, c3, #0", out(reg) v, options(nostack)) };
            v
        }
    }

    /// Table memory through the EL2 identity map, cleaned to the point of
    /// coherency after each write so a non-coherent IRS reads it.
    pub struct PhysMem;

    impl TableMem for PhysMem {
        fn write64(&mut self, pa: u64, value: u64) {
            // SAFETY: `pa` is in a table the platform allocated for the
            // IRS (identity mapped, normal memory, owned by the
            // hypervisor); the cache clean only affects that line.
            unsafe {
                (pa as *mut u64).write_volatile(value);
                asm!("dc cvac, {}", "dsb sy", in(reg) pa, options(nostack));
            }
        }
    }

    /// An IRS config frame through the EL2 identity map (device memory);
    /// also an ITS's config frame (`gicv5_its::hw::ItsFrame`).
    pub struct IrsFrame(pub usize);

    impl IrsMmio for IrsFrame {
        fn read32(&mut self, offset: usize) -> u32 {
            // SAFETY: the frame the host description named for the IRS
            // (or ITS), device memory; the offsets are its registers.
            unsafe { ((self.0 + offset) as *const u32).read_volatile() }
        }
        fn write32(&mut self, offset: usize, value: u32) {
            // SAFETY: as `read32`.
            unsafe { ((self.0 + offset) as *mut u32).write_volatile(value) }
        }
        fn write64(&mut self, offset: usize, value: u64) {
            // SAFETY: as `read32`; IRS_IST_BASER (ITS_DT_BASER, ITS_DIDR,
            // ITS_SYNCR) is a 64-bit register.
            unsafe { ((self.0 + offset) as *mut u64).write_volatile(value) }
        }
        fn read64(&mut self, offset: usize) -> u64 {
            // SAFETY: as `read32`, a 64-bit register (IRS_VMT_BASER,
            // IRS_SWERR_SYNDROMER0).
            unsafe { ((self.0 + offset) as *const u64).read_volatile() }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
