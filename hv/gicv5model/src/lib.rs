//! A register-level model of a GICv5 (Arm IHI 0101) as far as Pinfold uses
//! one: the CPU interface of each PE (the ICC_* system registers and the GIC
//! CDxx / GICR CDIA system instructions), the PE's PPIs (which live in
//! system registers in GICv5, not in a redistributor), the IRS (its config
//! frame, SPIs set up through IRS_SPI_SELR/IRS_SPI_CFGR and the GIC CDxx
//! instructions, the LPI interrupt state table), IPIs as edge LPIs targeted
//! at a PE, and the EL2 virtualisation registers (ICH_VCTLR_EL2,
//! ICH_CONTEXTR_EL2, ICH_VMCR_EL2, ICH_APR_EL2, ICH_HFGRTR/HFGWTR/HFGITR_EL2,
//! ICH_PPI_DVIR/HVIR/ENABLER/PENDR/ACTIVER/PRIORITYR*_EL2).
//!
//! It is the reference `pinfold_drivers::gicv5` is host-tested against,
//! because no emulator here runs EL2 on a GICv5 (QEMU 11.1's experimental
//! `gic-version=x-5` has no ICH_* registers; Debian bookworm has 7.2).
//! It is written apart from the driver, from the specification's register
//! and instruction descriptions: its own encodings table ([`Reg::enc`],
//! [`Insn`]), its own decoding ([`Reg::decode`]: the driver's accesses reach
//! the model as raw `op0:op1:CRn:CRm:op2` encodings, so a wrong encoding in
//! the driver is an [`Misuse::UnknownRegister`], not a silent pass), and it
//! records what software must not do ([`Misuse`]) instead of trusting the
//! driver, in the manner of a fake architecture layer.
//!
//! What it models, per PE:
//! - which exception level may touch what: ICC_* and GIC CDxx/GICR CDIA at
//!   EL1 and EL2, ICH_* at EL2 only (an EL1 access is UNDEFINED:
//!   [`Misuse::WrongEl`]);
//! - the *current interrupt domain*: at EL2 the physical one; at EL1 with
//!   HCR_EL2.IMO = 1 (the model's [`Model::enter_guest`]) the virtual one, so
//!   a guest's ICC_PPI_* and CDxx reach the virtual state (the ICV view) that
//!   EL2 sees as ICH_PPI_*_EL2; a vPE is *resident* when ICH_CONTEXTR_EL2.V
//!   = 1 and ICH_VCTLR_EL2.En = 1, and without one the guest's virtual
//!   commands do nothing;
//! - 128 PPIs ([`Config::impl_ppis`] say which exist; others RAZ/WI):
//!   enable, pending (a latch written by S/CPENDR and CDPEND, plus the
//!   input line for level PPIs, ICC_PPI_HMR = 1), active, a 5-bit priority;
//! - acknowledge (GICR CDIA: the highest priority pending, enabled,
//!   inactive interrupt above the running priority and below ICC_PCR_EL1,
//!   made active, its priority pushed into ICC_APR_EL1; bit 32 = valid),
//!   priority drop (GIC CDEOI: the highest active priority leaves APR) and
//!   deactivate (GIC CDDI: active cleared);
//! - direct virtual injection: for a PPI with ICH_PPI_DVIR set the virtual
//!   pending state is the physical one (an alias: writes to ICH_PPI_PENDR
//!   are ignored for it), DVI is effective only while a vPE is resident, a
//!   guest's deactivate of it also clears the physical active state, and
//!   the model counts physical interrupts signalled to EL2
//!   ([`Model::el2_irqs`]) so a test can show that a DVI'd timer reaches
//!   the guest with none. Arm recommends the physical copy be disabled
//!   while injected; a DVI'd PPI left enabled in the physical domain is
//!   [`Misuse::DviPhysicalEnabled`] when it would be signalled;
//! - ICH_PPI_HVIR hides a virtual PPI: the guest's accesses to it are
//!   RAZ/WI (and counted in [`Model::hidden_writes`]);
//! - ICH_HFGRTR/HFGWTR_EL2: a guest access to a register class whose trap
//!   bit is 0 traps to EL2 ([`Access::Trapped`]);
//! - ICH_HFGITR_EL2 (S3_4_C12_C9_7; GICCDEN [0], GICCDDIS [1], GICCDPRI
//!   [2], GICCDAFF [3], GICCDPEND [4], GICCDRCFG [5], GICCDHM [6],
//!   GICCDEOI [7], GICCDDI [8], GICRCDIA [9], GICRCDNMIA [10], [63:11]
//!   RES0; bit = 1: the instruction does not trap, the polarity of the
//!   read/write registers; from Linux's arch/arm64/tools/sysreg and
//!   FreeBSD's GICv5 register header, which agree, and Linux's booting
//!   rules asking EL2 to set them all to 1 for an EL1 kernel): a guest's
//!   GIC CDxx or GICR CDIA whose bit is 0 traps to EL2
//!   ([`Access::Trapped`]) and has no effect. GSB SYS/ACK have no bit and
//!   never trap. Reset 0 (the register's reset value is not one software
//!   may rely on; 0 makes a hypervisor that never writes it visible).
//!
//! The IRS (shared by all its PEs): IRS_IDR0..2, IRS_IDR5..7 (SPI ranges), IRS_PE_SELR/
//! STATUSR/CR0, IRS_CR0 (IRSEN, IDLE),
//! IRS_CR1, IRS_SYNCR/IRS_SYNC_STATUSR, IRS_SPI_SELR/CFGR/STATUSR,
//! IRS_IST_BASER/CFGR/STATUSR over a linear IST of 4-byte entries; SPIs and
//! LPIs get enable, pending, active, priority, handling mode and a target
//! IAFFID through GIC CDEN/CDDIS/CDPEND/CDPRI/CDAFF/CDHM; an LPI's state is
//! valid only inside the IST the IRS was given (else
//! [`Misuse::LpiOutsideIst`]); an IRS write while IRSEN = 0 to the SPI or
//! IST registers works, a CDxx to an SPI or LPI while IRSEN = 0 is
//! [`Misuse::IrsDisabled`].
//!
//! One model is one IRS with the PEs it serves. A host with several IRSes
//! is several models, each with its own SPI range ([`Config::spi_base`],
//! [`Config::spis`]: IRS_IDR7.SPI_BASE, IRS_IDR6.SPI_IRS_RANGE, and
//! IRS_IDR5.SPI_RANGE the system's, [`Config::system_spis`], as Linux's
//! `gicv5_irs_init` reads them; an SPI outside the range reads
//! IRS_SPI_STATUSR.V = 0 and a CDxx naming it is
//! [`Misuse::NoSuchInterrupt`]) and its own PEs ([`Config::first_iaffid`]:
//! IRS_PE_SELR of another IAFFID reads IRS_PE_STATUSR.V = 0, as Linux's
//! `gicv5_irs_register_cpu` expects, and IRS_PE_CR0 after it is
//! [`Misuse::NoSuchPe`]; IRS_PE_CR0.DPS kept per PE, [`Model::pe_dps`]).
//! The models do not talk to each other: a CDxx is the model's of the PE
//! that issues it, not forwarded to the IRS that owns the interrupt.
//!
//! The vIRS: a linear VM table (IRS_VMT_BASER/CFGR) of 32-byte entries in
//! the model's own physical memory ([`Model::mem_write64`]), each naming a
//! VM descriptor, a vPE table and the VM's virtual LPI and SPI ISTs;
//! IRS_VMAP_VMR / IRS_VMAP_VISTR / IRS_VMAP_VPER make a VM, its ISTs and
//! its vPEs valid from those entries (an entry without its addresses, a VM
//! ID beyond the table, a vPE beyond the VM's VPE_ID_BITS are misuse);
//! IRS_VPE_SELR selects a vPE for IRS_VPE_DBR (its doorbell LPI, DBV) and
//! IRS_VPE_CR0; IRS_SPI_VMR assigns the selected physical SPI to a VM, whose
//! virtual SPI of the same ID its wire then drives. A guest's GIC CDxx to an
//! SPI or LPI reaches the VM in ICH_CONTEXTR_EL2.VM only; a command naming
//! a vPE or an ID its VM lacks does nothing and leaves an IRS_SWERR record
//! ([`Model::swerrs`]). A VM's virtual interrupts are delivered to the PE
//! where their target vPE is resident (the virtual HPPI, GICR CDIA in the
//! guest); for a vPE resident nowhere the doorbell rings once (DBV clears)
//! when one becomes deliverable.
//! From EL2, GIC VDPEND (the CD* encoding with op1 = 4; operand PENDING
//! [63], VM [47:32], TYPE [31:29], ID [23:0] from FreeBSD's gicv5reg.h)
//! sets or clears the pending latch of a valid VM's virtual SPI or LPI,
//! the one a guest's own CDPEND writes, which is then delivered as above;
//! at EL1, to a VM not valid or beyond the VM's virtual IST it is misuse
//! and does nothing ([`Model::sys`]).
//!
//! The ITS ([`its::Its`], one model per ITS): its config frame over a
//! linear device table and ITTs in the model's memory, the invalidate
//! and sync registers, and a device's MSI write translated to an LPI made
//! pending here ([`Model::its_lpi`]); its module says what it decides.
//!
//! Not modelled: the IWB, interrupt routing modes other than
//! targeted (IRM = 1, 1-of-N), NMIs (GICR CDNMIA), the logical/secure/realm
//! domains, the two-level VM table and ISTs, the vIRS's own use of the VM
//! and vPE descriptors (their contents), DBPM and ICH_CONTEXTR_EL2.DB,
//! IRS_SAVE_VMR, wake-up and power
//! management, and timing (every effect is immediate; the real IRS needs a
//! GSB SYS / IRS_SYNCR for some and the model does not check those).
//!
//! Where the sources available here did not give a register's encoding or
//! field layout, the model says so at the definition (`UNCONFIRMED`), and
//! docs/GICV5.md lists them.

use std::collections::BTreeMap;
use std::vec::Vec;

pub mod its;

/// Exception level of an access.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum El {
    El1,
    El2,
}

/// A system register or instruction encoding, `op0:op1:CRn:CRm:op2`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Enc {
    pub op0: u8,
    pub op1: u8,
    pub crn: u8,
    pub crm: u8,
    pub op2: u8,
}

const fn e(op0: u8, op1: u8, crn: u8, crm: u8, op2: u8) -> Enc {
    Enc {
        op0,
        op1,
        crn,
        crm,
        op2,
    }
}

/// ICH_VMCR_EL2 in the GCIE layout: EN [0] (the guest's ICC_CR0_EL1.EN),
/// VPMR [31:27] (its ICC_PCR_EL1.PRIORITY).
pub const VMCR_EN: u64 = 1;
pub const VMCR_VPMR_SHIFT: u32 = 27;
pub const VMCR_VPMR_MASK: u64 = 0x1f << VMCR_VPMR_SHIFT;

/// The registers the model implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reg {
    IccCr0,
    IccPcr,
    IccApr,
    IccHppir,
    IccIaffidr,
    IccIdr0,
    /// ICC_PPI_HMR<n>_EL1, n = 0, 1 (read-only).
    IccPpiHmr(u8),
    IccPpiEnabler(u8),
    IccPpiCpendr(u8),
    IccPpiSpendr(u8),
    IccPpiCactiver(u8),
    IccPpiSactiver(u8),
    /// ICC_PPI_PRIORITYR<n>_EL1, n = 0..15, eight 5-bit priorities each.
    IccPpiPriorityr(u8),
    IchVctlr,
    IchContextr,
    IchVmcr,
    IchApr,
    IchHfgrtr,
    IchHfgwtr,
    IchHfgitr,
    IchPpiDvir(u8),
    IchPpiHvir(u8),
    IchPpiEnabler(u8),
    IchPpiPendr(u8),
    IchPpiActiver(u8),
    IchPpiPriorityr(u8),
}

impl Reg {
    /// The register's encoding, from the specification's register tables.
    pub const fn enc(self) -> Enc {
        match self {
            Reg::IccCr0 => e(3, 1, 12, 0, 1),
            Reg::IccPcr => e(3, 1, 12, 0, 2),
            Reg::IccApr => e(3, 1, 12, 0, 0),
            Reg::IccHppir => e(3, 0, 12, 10, 3),
            Reg::IccIaffidr => e(3, 0, 12, 10, 5),
            Reg::IccIdr0 => e(3, 0, 12, 10, 2),
            Reg::IccPpiHmr(n) => e(3, 0, 12, 10, n),
            Reg::IccPpiEnabler(n) => e(3, 0, 12, 10, 6 + n),
            Reg::IccPpiCactiver(n) => e(3, 0, 12, 13, n),
            Reg::IccPpiSactiver(n) => e(3, 0, 12, 13, 2 + n),
            Reg::IccPpiCpendr(n) => e(3, 0, 12, 13, 4 + n),
            Reg::IccPpiSpendr(n) => e(3, 0, 12, 13, 6 + n),
            Reg::IccPpiPriorityr(n) => e(3, 0, 12, 14 + n / 8, n % 8),
            Reg::IchApr => e(3, 4, 12, 8, 4),
            Reg::IchHfgrtr => e(3, 4, 12, 9, 4),
            Reg::IchHfgwtr => e(3, 4, 12, 9, 6),
            Reg::IchHfgitr => e(3, 4, 12, 9, 7),
            Reg::IchPpiDvir(n) => e(3, 4, 12, 10, n),
            Reg::IchPpiEnabler(n) => e(3, 4, 12, 10, 2 + n),
            Reg::IchPpiPendr(n) => e(3, 4, 12, 10, 4 + n),
            Reg::IchPpiActiver(n) => e(3, 4, 12, 10, 6 + n),
            // UNCONFIRMED: the sources available here name ICH_PPI_HVIR<n>
            // but not its encoding; the model places it in the free
            // ICH_* slot CRm = 11, op2 = 2/3 pending IHI 0101.
            Reg::IchPpiHvir(n) => e(3, 4, 12, 11, 2 + n),
            Reg::IchVctlr => e(3, 4, 12, 11, 4),
            Reg::IchContextr => e(3, 4, 12, 11, 6),
            Reg::IchVmcr => e(3, 4, 12, 11, 7),
            Reg::IchPpiPriorityr(n) => e(3, 4, 12, 14 + n / 8, n % 8),
        }
    }

    const ALL_FIXED: [Reg; 12] = [
        Reg::IccCr0,
        Reg::IccPcr,
        Reg::IccApr,
        Reg::IccHppir,
        Reg::IccIaffidr,
        Reg::IccIdr0,
        Reg::IchVctlr,
        Reg::IchContextr,
        Reg::IchVmcr,
        Reg::IchApr,
        Reg::IchHfgrtr,
        Reg::IchHfgwtr,
    ];

    /// Every register the model knows, for decoding.
    pub fn all() -> Vec<Reg> {
        let mut v: Vec<Reg> = Reg::ALL_FIXED.to_vec();
        v.push(Reg::IchHfgitr);
        for n in 0..2 {
            v.extend([
                Reg::IccPpiHmr(n),
                Reg::IccPpiEnabler(n),
                Reg::IccPpiCpendr(n),
                Reg::IccPpiSpendr(n),
                Reg::IccPpiCactiver(n),
                Reg::IccPpiSactiver(n),
                Reg::IchPpiDvir(n),
                Reg::IchPpiHvir(n),
                Reg::IchPpiEnabler(n),
                Reg::IchPpiPendr(n),
                Reg::IchPpiActiver(n),
            ]);
        }
        for n in 0..16 {
            v.push(Reg::IccPpiPriorityr(n));
            v.push(Reg::IchPpiPriorityr(n));
        }
        v
    }

    /// The register with encoding `enc`, if the model has one.
    pub fn decode(enc: Enc) -> Option<Reg> {
        Reg::all().into_iter().find(|r| r.enc() == enc)
    }

    /// The lowest exception level that may access it.
    pub const fn min_el(self) -> El {
        match self {
            Reg::IchVctlr
            | Reg::IchContextr
            | Reg::IchVmcr
            | Reg::IchApr
            | Reg::IchHfgrtr
            | Reg::IchHfgwtr
            | Reg::IchHfgitr
            | Reg::IchPpiDvir(_)
            | Reg::IchPpiHvir(_)
            | Reg::IchPpiEnabler(_)
            | Reg::IchPpiPendr(_)
            | Reg::IchPpiActiver(_)
            | Reg::IchPpiPriorityr(_) => El::El2,
            _ => El::El1,
        }
    }

    /// Read-only registers: a write is [`Misuse::WriteToReadOnly`].
    pub const fn read_only(self) -> bool {
        matches!(
            self,
            Reg::IccHppir | Reg::IccIaffidr | Reg::IccIdr0 | Reg::IccPpiHmr(_)
        )
    }

    /// The bits that are not RES0 in this model's reading.
    pub const fn writable_mask(self) -> u64 {
        match self {
            // EN [0]; LINK [2] and LINK_IDLE [3] read-only; IPPT [36:32],
            // PID [38].
            Reg::IccCr0 => 1 | (0x1f << 32) | (1 << 38),
            // PRIORITY [4:0].
            Reg::IccPcr => 0x1f,
            // P0..P31: one bit per priority level.
            Reg::IccApr | Reg::IchApr => 0xffff_ffff,
            // En [0], V3 [1].
            Reg::IchVctlr => 0b11,
            // V [63], F [62], IRICHPPIDIS [61], DB [60], DBPM [59:55],
            // VPE [47:32], VM [15:0].
            Reg::IchContextr => (0x1ff << 55) | (0xffff << 32) | 0xffff,
            // GCIE layout (Linux arch/arm64/tools/sysreg, FEAT_GCIE prefix
            // of ICH_VMCR_EL2): EN [0], VPMR [31:27].
            Reg::IchVmcr => VMCR_EN | VMCR_VPMR_MASK,
            // One bit per ICC register class (`Hfg`), the rest RES0.
            Reg::IchHfgrtr => 0x1f_00ff,
            Reg::IchHfgwtr => 0x1e_0065,
            // GICCDEN [0], GICCDDIS [1], ... up to [9] in this model.
            // GICCDEN [0] .. GICRCDNMIA [10].
            Reg::IchHfgitr => 0x7ff,
            // Eight 5-bit fields at [4:0], [12:8], ... [60:56].
            Reg::IccPpiPriorityr(_) | Reg::IchPpiPriorityr(_) => 0x1f1f_1f1f_1f1f_1f1f,
            _ => u64::MAX,
        }
    }
}

/// The GIC system instructions with an operand (`SYS`, Xt in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Insn {
    /// GSB SYS (Xt = XZR).
    GsbSys,
    /// GSB ACK.
    GsbAck,
    Cddis,
    Cden,
    Cdpri,
    Cdaff,
    Cdpend,
    Cdrcfg,
    Cdeoi,
    Cddi,
    Cdhm,
    /// GIC VDPEND (EL2 only): set or clear the pending state of a VM's
    /// virtual SPI or LPI ([`Model::sys`]).
    Vdpend,
}

impl Insn {
    pub const fn enc(self) -> Enc {
        match self {
            Insn::GsbSys => e(1, 0, 12, 0, 0),
            Insn::GsbAck => e(1, 0, 12, 0, 1),
            Insn::Cddis => e(1, 0, 12, 1, 0),
            Insn::Cden => e(1, 0, 12, 1, 1),
            Insn::Cdpri => e(1, 0, 12, 1, 2),
            Insn::Cdaff => e(1, 0, 12, 1, 3),
            Insn::Cdpend => e(1, 0, 12, 1, 4),
            Insn::Cdrcfg => e(1, 0, 12, 1, 5),
            Insn::Cdeoi => e(1, 0, 12, 1, 7),
            Insn::Cddi => e(1, 0, 12, 2, 0),
            Insn::Cdhm => e(1, 0, 12, 2, 1),
            // The CD* encoding with op1 = 4: binutils' GCIE test (`gic
            // vdpend`) and FreeBSD's gicv5reg.h (GIC_VDPEND_op1 4, CRn 12,
            // CRm 1, op2 4) agree.
            Insn::Vdpend => e(1, 4, 12, 1, 4),
        }
    }

    pub fn decode(enc: Enc) -> Option<Insn> {
        [
            Insn::GsbSys,
            Insn::GsbAck,
            Insn::Cddis,
            Insn::Cden,
            Insn::Cdpri,
            Insn::Cdaff,
            Insn::Cdpend,
            Insn::Cdrcfg,
            Insn::Cdeoi,
            Insn::Cddi,
            Insn::Cdhm,
            Insn::Vdpend,
        ]
        .into_iter()
        .find(|i| i.enc() == enc)
    }
}

/// GICR CDIA (`SYSL`, Xt out).
pub const GICR_CDIA: Enc = e(1, 0, 12, 3, 0);

/// The interrupt types of a GICv5 INTID ([31:29]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum IntType {
    Ppi = 1,
    Lpi = 2,
    Spi = 3,
}

/// An interrupt: type and ID ([23:0]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct IntId {
    pub ty: IntType,
    pub id: u32,
}

impl IntId {
    pub const fn ppi(id: u32) -> IntId {
        IntId {
            ty: IntType::Ppi,
            id,
        }
    }
    pub const fn spi(id: u32) -> IntId {
        IntId {
            ty: IntType::Spi,
            id,
        }
    }
    pub const fn lpi(id: u32) -> IntId {
        IntId {
            ty: IntType::Lpi,
            id,
        }
    }
    /// The operand/result layout: TYPE [31:29], ID [23:0].
    pub const fn raw(self) -> u64 {
        ((self.ty as u64) << 29) | (self.id as u64 & 0xff_ffff)
    }
    pub fn from_raw(v: u64) -> Option<IntId> {
        let id = (v & 0xff_ffff) as u32;
        let ty = match (v >> 29) & 7 {
            1 => IntType::Ppi,
            2 => IntType::Lpi,
            3 => IntType::Spi,
            _ => return None,
        };
        Some(IntId { ty, id })
    }
}

/// Something software did that the architecture does not allow (or makes
/// UNPREDICTABLE / RES0-violating), recorded instead of panicking so a
/// test can assert there was none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Misuse {
    UnknownRegister(Enc),
    UnknownInstruction(Enc),
    WrongEl {
        reg: Reg,
        el: El,
    },
    Res0Written {
        reg: Reg,
        bits: u64,
    },
    WriteToReadOnly(Reg),
    /// An instruction operand with a RES0 bit set or an invalid TYPE.
    BadOperand {
        insn: Insn,
        value: u64,
    },
    /// An SPI/LPI ID beyond what the IRS has (IRS_IDR / the IST).
    NoSuchInterrupt(IntId),
    LpiOutsideIst(u32),
    IrsDisabled(Insn),
    /// A DVI'd PPI would be signalled in the physical domain because it is
    /// still enabled there (Arm: disable the physical copy while injected).
    DviPhysicalEnabled(u32),
    /// An IRS MMIO access to an offset the model has no register at.
    IrsUnknownOffset(u64),
    /// A target IAFFID no PE has.
    NoSuchPe(u16),
    /// A vIRS operation while IRS_VMT_BASER is not valid, or to a VM ID
    /// beyond IRS_VMT_CFGR.VM_ID_BITS.
    NoVmTable(u64),
    /// A VM/vPE/virtual IST operation naming a VM that is not valid.
    NoSuchVm(u16),
    /// A vPE ID beyond its VM's VPE_ID_BITS, or not valid where it must be.
    NoSuchVpe {
        vm: u16,
        vpe: u16,
    },
    /// A table entry in memory without the addresses it must have.
    BadTableEntry {
        addr: u64,
        word: u64,
    },
    /// A doorbell LPI outside the physical IST.
    BadDoorbell(u64),
    /// An EL2-only instruction (GIC VDPEND) issued at EL1: UNDEFINED.
    El2InsnAtEl1(Insn),
    /// GIC VDPEND naming a virtual SPI/LPI beyond the VM's virtual IST
    /// (an SPI outside the VM's virtual SPI range).
    NoSuchVirtualInterrupt {
        vm: u16,
        id: IntId,
    },
}

/// Result of a register access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Value(u64),
    /// The access trapped to EL2 (an ICH_HFGxTR bit was 0, or a guest's
    /// instruction is trapped by ICH_HFGITR).
    Trapped,
    /// UNDEFINED (misuse recorded).
    Undefined,
}

/// Model parameters.
#[derive(Debug, Clone)]
pub struct Config {
    pub pes: usize,
    /// Which PPIs are implemented (bit n of word n/64).
    pub impl_ppis: [u64; 2],
    /// Which of the implemented PPIs are level-sensitive (ICC_PPI_HMR).
    pub level_ppis: [u64; 2],
    /// This IRS's SPIs: IDs `spi_base .. spi_base + spis` (IRS_IDR7.
    /// SPI_BASE, IRS_IDR6.SPI_IRS_RANGE). A host with several IRSes gives
    /// each its own range; an SPI outside it is not this IRS's: selecting
    /// it reads IRS_SPI_STATUSR.V = 0 and a GIC CDxx naming it is
    /// [`Misuse::NoSuchInterrupt`] here.
    pub spis: u32,
    pub spi_base: u32,
    /// IRS_IDR5.SPI_RANGE, the SPIs of the whole system (every IRS's);
    /// `None`: this IRS's own end, `spi_base + spis`.
    pub system_spis: Option<u32>,
    /// The IAFFID of PE 0; PE n has `first_iaffid + n` (a second IRS's
    /// model serves other CPUs). IRS_PE_SELR accepts only these.
    pub first_iaffid: u16,
    /// IRS_IDR2.ID_BITS: the largest LPI ID width the IRS supports.
    pub lpi_id_bits: u8,
    /// FEAT_GCIE_LEGACY: the GICv3-compatible virtual interface exists
    /// (ICH_VCTLR_EL2.V3 is writable).
    pub gcie_legacy: bool,
    /// PRI_BITS - 1 in ICC_IDR0_EL1 (5 priority bits: 4).
    pub pri_bits_minus1: u8,
    /// IRS_IDR3.VM_ID_BITS / IRS_IDR4.VPE_ID_BITS: how many VMs and vPEs
    /// per VM the vIRS supports.
    pub vm_id_bits: u8,
    pub vpe_id_bits: u8,
}

/// The architected PPIs Pinfold cares about.
pub const PPI_PMU: u32 = 23;
pub const PPI_CNTHP: u32 = 26;
pub const PPI_CNTV: u32 = 27;
pub const PPI_CNTP: u32 = 30;

impl Config {
    /// One past this IRS's last SPI ID.
    pub fn spi_end(&self) -> u32 {
        self.spi_base + self.spis
    }

    /// Whether SPI ID `id` is this IRS's.
    pub fn has_spi(&self, id: u32) -> bool {
        (self.spi_base..self.spi_end()).contains(&id)
    }
}

impl Default for Config {
    fn default() -> Self {
        // PPIs 0..=31 implemented (the architected ones live there), the
        // timers and PMU level-sensitive.
        let level = (1 << PPI_PMU) | (1 << PPI_CNTHP) | (1 << PPI_CNTV) | (1 << PPI_CNTP);
        Config {
            pes: 2,
            impl_ppis: [0xffff_ffff, 0],
            level_ppis: [level, 0],
            spis: 64,
            spi_base: 0,
            system_spis: None,
            first_iaffid: 0,
            lpi_id_bits: 16,
            gcie_legacy: true,
            pri_bits_minus1: 4,
            vm_id_bits: 4,
            vpe_id_bits: 4,
        }
    }
}

/// The state of one interrupt (PPI, SPI or LPI), physical or virtual.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IntState {
    pub enabled: bool,
    /// The edge/software pending latch.
    pub latch: bool,
    /// The input line (level interrupts).
    pub line: bool,
    pub level: bool,
    pub active: bool,
    pub priority: u8,
    /// Target PE (SPIs, LPIs).
    pub iaffid: u16,
}

impl IntState {
    fn pending(&self) -> bool {
        self.latch || (self.level && self.line)
    }
    /// Pending: the latch, or the line of a level interrupt.
    pub fn pending_now(&self) -> bool {
        self.pending()
    }
}

/// ICH_HFGITR_EL2's bit for a GIC system instruction (None: GSB, which
/// no bit traps).
pub const fn hfgitr_bit(insn: Insn) -> Option<u32> {
    Some(match insn {
        Insn::Cden => 0,
        Insn::Cddis => 1,
        Insn::Cdpri => 2,
        Insn::Cdaff => 3,
        Insn::Cdpend => 4,
        Insn::Cdrcfg => 5,
        Insn::Cdhm => 6,
        Insn::Cdeoi => 7,
        Insn::Cddi => 8,
        // GSB has no bit; GIC VDPEND is EL2's, never a guest's.
        Insn::GsbSys | Insn::GsbAck | Insn::Vdpend => return None,
    })
}

/// ICH_HFGITR_EL2.GICRCDIA: GICR CDIA does not trap.
pub const HFGITR_GICRCDIA: u64 = 1 << 9;

/// ICH_HFGRTR/HFGWTR_EL2 bit per ICC register class, as Linux's
/// arch/arm64/tools/sysreg has both registers (GICv5 host series, "arm64/
/// sysreg: Add ICH_HFGRTR_EL2" / "ICH_HFGWTR_EL2"): ICC_APR [0], ICC_IDRn
/// [1], ICC_CR0 [2], ICC_HAPR [3], ICC_HPPIR [4], ICC_PCR [5], ICC_ICSR
/// [6], ICC_IAFFIDR [7], ICC_PPI_HMRn [16], ICC_PPI_ENABLERn [17],
/// ICC_PPI_PENDRn [18] (S and C), ICC_PPI_PRIORITYRn [19],
/// ICC_PPI_ACTIVERn [20] (S and C); HFGWTR has only the writable ones
/// (APR, CR0, PCR, ICSR and the four PPI classes but HMRn), its other
/// bits RES0. (This model had HPPIR at 3 and PCR at 7 and no IDRn or
/// IAFFIDR class before reading that source.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hfg {
    Apr = 0,
    Idr = 1,
    Cr0 = 2,
    Hppir = 4,
    Pcr = 5,
    Iaffidr = 7,
    PpiHmr = 16,
    PpiEnabler = 17,
    PpiPendr = 18,
    PpiPriorityr = 19,
    PpiActiver = 20,
}

fn hfg_class(reg: Reg) -> Option<Hfg> {
    Some(match reg {
        Reg::IccApr => Hfg::Apr,
        Reg::IccCr0 => Hfg::Cr0,
        Reg::IccHppir => Hfg::Hppir,
        Reg::IccPcr => Hfg::Pcr,
        Reg::IccIdr0 => Hfg::Idr,
        Reg::IccIaffidr => Hfg::Iaffidr,
        Reg::IccPpiHmr(_) => Hfg::PpiHmr,
        Reg::IccPpiEnabler(_) => Hfg::PpiEnabler,
        Reg::IccPpiCpendr(_) | Reg::IccPpiSpendr(_) => Hfg::PpiPendr,
        Reg::IccPpiPriorityr(_) => Hfg::PpiPriorityr,
        Reg::IccPpiCactiver(_) | Reg::IccPpiSactiver(_) => Hfg::PpiActiver,
        _ => return None,
    })
}

/// The virtual interface of one PE as EL2 programs it.
#[derive(Debug, Clone)]
struct Virt {
    vctlr: u64,
    contextr: u64,
    vmcr: u64,
    apr: u64,
    hfgrtr: u64,
    hfgwtr: u64,
    hfgitr: u64,
    dvir: [u64; 2],
    hvir: [u64; 2],
    ppi: [IntState; 128],
}

impl Virt {
    fn resident(&self) -> bool {
        self.vctlr & 1 != 0 && self.contextr >> 63 != 0
    }
}

#[derive(Debug, Clone)]
struct Pe {
    iaffid: u16,
    cr0: u64,
    pcr: u64,
    apr: u64,
    ppi: [IntState; 128],
    /// Executing a guest at EL1 with HCR_EL2.IMO = 1.
    in_guest: bool,
    virt: Virt,
    el2_irqs: u64,
    virqs_acked: u64,
}

/// IRS config frame offsets (this model's reading of IHI 0101's IRS
/// register map).
pub mod irs {
    pub const IDR0: u64 = 0x0000;
    pub const IDR1: u64 = 0x0004;
    pub const IDR2: u64 = 0x0008;
    /// IDR7: SPI_BASE; IDR6: SPI_IRS_RANGE; IDR5: SPI_RANGE.
    pub const IDR5: u64 = 0x0014;
    pub const IDR6: u64 = 0x0018;
    pub const IDR7: u64 = 0x001c;
    pub const IIDR: u64 = 0x0040;
    pub const AIDR: u64 = 0x0044;
    pub const CR0: u64 = 0x0080;
    pub const CR1: u64 = 0x0084;
    pub const SYNCR: u64 = 0x00c0;
    pub const SYNC_STATUSR: u64 = 0x00c4;
    pub const SPI_SELR: u64 = 0x0108;
    pub const SPI_CFGR: u64 = 0x0114;
    pub const SPI_STATUSR: u64 = 0x0118;
    pub const IST_BASER: u64 = 0x0180;
    pub const IST_CFGR: u64 = 0x0190;
    pub const IST_STATUSR: u64 = 0x0194;

    // The virtualisation registers (the vIRS). Offsets and fields as
    // Linux's KVM vGICv5 series, QEMU's GICv5 IRS model and FreeBSD's
    // GICv5 header agree on them (docs/GICV5.md), except VMT_STATUSR:
    // 0x214 in FreeBSD's header (next to VMT_CFGR, as IST_STATUSR is next
    // to IST_CFGR), 0x124 in QEMU's; the model uses 0x214.
    /// VM_ID_BITS [9:5].
    pub const IDR3: u64 = 0x000c;
    /// VPE_ID_BITS [9:6].
    pub const IDR4: u64 = 0x0010;
    /// VM_ID [15:0], VIRT [63]: the SPI IRS_SPI_SELR selects is a virtual
    /// SPI of that VM.
    pub const SPI_VMR: u64 = 0x0100;
    /// VALID [0], ADDR [55:3].
    pub const VMT_BASER: u64 = 0x0200;
    /// VM_ID_BITS [4:0], STRUCTURE [16] (1 = two-level; not modelled).
    pub const VMT_CFGR: u64 = 0x0210;
    /// IDLE [0].
    pub const VMT_STATUSR: u64 = 0x0214;
    /// VM_ID [15:0], VPE_ID [47:32], S [63].
    pub const VPE_SELR: u64 = 0x0240;
    /// INTID [23:0] (a physical LPI), DBPM [36:32], REQ_DB [62], DBV [63].
    pub const VPE_DBR: u64 = 0x0248;
    /// DPS [0].
    pub const VPE_CR0: u64 = 0x0258;
    /// IDLE [0], V [1].
    pub const VPE_STATUSR: u64 = 0x025c;
    /// VM_ID [15:0], U [62] (unmap), M [63].
    pub const VMAP_VMR: u64 = 0x02c8;
    /// TYPE [31:29] (2 = LPI, 3 = SPI), VM_ID [47:32], U [62], M [63].
    pub const VMAP_VISTR: u64 = 0x02d0;
    /// VPE_ID [15:0], VM_ID [47:32], M [63].
    pub const VMAP_VPER: u64 = 0x02e0;
    /// V [0] (write 1 to clear the oldest record), EC [23:16].
    pub const SWERR_STATUSR: u64 = 0x03c0;
    /// VM_ID [15:0], ID [55:32], TYPE [62:60], VIRTUAL [63].
    pub const SWERR_SYNDROMER0: u64 = 0x03c8;

    pub const SPI_VMR_VIRT: u64 = 1 << 63;
    pub const VMT_BASER_VALID: u64 = 1;
    pub const VMT_STATUSR_IDLE: u32 = 1;
    pub const VPE_SELR_S: u64 = 1 << 63;
    pub const VPE_STATUSR_IDLE: u32 = 1;
    pub const VPE_STATUSR_V: u32 = 1 << 1;
    pub const VPE_DBR_DBV: u64 = 1 << 63;
    pub const VMAP_M: u64 = 1 << 63;
    pub const VMAP_U: u64 = 1 << 62;
    pub const SWERR_V: u64 = 1;
    /// The software error codes the model reports (its own numbering:
    /// the sources read give the field, not the codes).
    pub const EC_NO_VPE: u64 = 0x10;
    pub const EC_OUT_OF_RANGE: u64 = 0x11;

    /// A VM table entry is 32 bytes: word 0 VALID [0] and the VM
    /// descriptor address [55:3]; word 1 the vPE table address [55:3] and
    /// VPE_ID_BITS [63:59]; word 2 the LPI IST and word 3 the SPI IST, each
    /// VALID [0], ADDR [55:6], ID_BITS [63:59].
    pub const VMTE_SIZE: u64 = 32;
    /// A vPE table entry: VALID [0], vPE descriptor address [55:5].
    pub const VPETE_SIZE: u64 = 8;
    pub const ADDR_MASK_3: u64 = 0x00ff_ffff_ffff_fff8;
    pub const ADDR_MASK_5: u64 = 0x00ff_ffff_ffff_ffe0;
    pub const ADDR_MASK_6: u64 = 0x00ff_ffff_ffff_ffc0;
    pub const ID_BITS_SHIFT: u32 = 59;

    /// IRS_CR0.IRSEN.
    pub const CR0_IRSEN: u32 = 1;
    /// IRS_CR0.IDLE (read-only).
    pub const CR0_IDLE: u32 = 1 << 1;
    /// IRS_SPI_STATUSR.IDLE / .V.
    pub const SPI_STATUSR_IDLE: u32 = 1;
    pub const SPI_STATUSR_V: u32 = 1 << 1;
    /// IRS_IST_BASER.VALID.
    pub const IST_BASER_VALID: u64 = 1;
    /// IRS_IST_STATUSR.IDLE.
    pub const IST_STATUSR_IDLE: u32 = 1;
    /// IRS_IDR0.VIRT: the IRS supports virtualisation.
    pub const IDR0_VIRT: u32 = 1 << 6;

    /// IAFFID [15:0]: the PE IRS_PE_CR0 configures (Linux's
    /// `gicv5_irs_register_cpu`; the same offsets as the guest frame's in
    /// `pinfold_hv::vgic5::frame`).
    pub const PE_SELR: u64 = 0x0140;
    /// IDLE [0], V [1] (the IAFFID names a PE this IRS serves).
    pub const PE_STATUSR: u64 = 0x0144;
    /// DPS [0].
    pub const PE_CR0: u64 = 0x0148;
    pub const PE_STATUSR_IDLE: u32 = 1;
    pub const PE_STATUSR_V: u32 = 1 << 1;
    pub const PE_CR0_DPS: u64 = 1;
}

#[derive(Debug, Clone)]
struct Irs {
    cr0: u32,
    cr1: u32,
    spi_selr: u32,
    spi_selr_valid: bool,
    ist_baser: u64,
    ist_cfgr: u32,
    spis: Vec<IntState>,
    /// LPI state, keyed by ID; valid only below the IST size.
    lpis: BTreeMap<u32, IntState>,
    syncs: u64,
    // ---- the vIRS ----
    /// The VM each physical SPI is assigned to (IRS_SPI_VMR).
    spi_vm: Vec<Option<u16>>,
    /// IRS_PE_SELR's IAFFID, valid when it names a PE of this IRS.
    pe_selr: u16,
    pe_selr_valid: bool,
    /// IRS_PE_CR0.DPS of each PE software set up, by IAFFID.
    pe_dps: BTreeMap<u16, bool>,
    vmt_baser: u64,
    vmt_cfgr: u32,
    vpe_selr: u64,
    /// The VMs made valid with IRS_VMAP_VMR.
    vms: BTreeMap<u16, Vm>,
    /// Software error records not yet cleared (IRS_SWERR_*).
    swerr: Vec<Swerr>,
}

/// A virtual interrupt software error: a guest's command named a vPE, a
/// virtual SPI or LPI its VM does not have. It has no effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Swerr {
    pub vm: u16,
    pub id: IntId,
    pub ec: u64,
}

/// A VM the IRS knows: its vPEs (made valid with IRS_VMAP_VPER), its
/// virtual ISTs (IRS_VMAP_VISTR) and the state of its virtual SPIs and
/// LPIs. A virtual interrupt's `iaffid` is the vPE ID it targets.
#[derive(Debug, Clone, Default)]
struct Vm {
    vpet: u64,
    vpe_id_bits: u8,
    vpes: BTreeMap<u16, Vpe>,
    spi_bits: Option<u8>,
    lpi_bits: Option<u8>,
    vspis: BTreeMap<u32, IntState>,
    vlpis: BTreeMap<u32, IntState>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Vpe {
    /// IRS_VPE_DBR as last written (DBV cleared when it rang).
    dbr: u64,
    cr0: u32,
}

/// The model.
pub struct Model {
    cfg: Config,
    pes: Vec<Pe>,
    irs: Irs,
    misuse: Vec<Misuse>,
    hidden_writes: u64,
    /// Physical memory the IRS reads its VM and vPE tables from, by
    /// 8-byte word.
    mem: BTreeMap<u64, u64>,
    doorbells: u64,
}

fn ppi_default() -> [IntState; 128] {
    [IntState::default(); 128]
}

impl Model {
    pub fn new(cfg: Config) -> Model {
        let mut ppi = ppi_default();
        for (n, s) in ppi.iter_mut().enumerate() {
            s.level = cfg.level_ppis[n / 64] >> (n % 64) & 1 != 0;
        }
        let pes = (0..cfg.pes)
            .map(|i| Pe {
                iaffid: cfg.first_iaffid + i as u16,
                cr0: 0,
                // Reset: PCR = 0 masks everything (priority must be below).
                pcr: 0,
                apr: 0,
                ppi,
                in_guest: false,
                virt: Virt {
                    vctlr: 0,
                    contextr: 0,
                    vmcr: 0,
                    apr: 0,
                    hfgrtr: 0,
                    hfgwtr: 0,
                    hfgitr: 0,
                    dvir: [0; 2],
                    hvir: [0; 2],
                    ppi,
                },
                el2_irqs: 0,
                virqs_acked: 0,
            })
            .collect();
        let irs = Irs {
            cr0: 0,
            cr1: 0,
            spi_selr: 0,
            spi_selr_valid: false,
            ist_baser: 0,
            ist_cfgr: 0,
            spis: vec![IntState::default(); cfg.spi_end() as usize],
            lpis: BTreeMap::new(),
            syncs: 0,
            spi_vm: vec![None; cfg.spi_end() as usize],
            pe_selr: 0,
            pe_selr_valid: false,
            pe_dps: BTreeMap::new(),
            vmt_baser: 0,
            vmt_cfgr: 0,
            vpe_selr: 0,
            vms: BTreeMap::new(),
            swerr: Vec::new(),
        };
        Model {
            cfg,
            pes,
            irs,
            misuse: Vec::new(),
            hidden_writes: 0,
            mem: BTreeMap::new(),
            doorbells: 0,
        }
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Everything software did wrong so far.
    pub fn misuse(&self) -> &[Misuse] {
        &self.misuse
    }

    pub fn take_misuse(&mut self) -> Vec<Misuse> {
        std::mem::take(&mut self.misuse)
    }

    fn bad(&mut self, m: Misuse) {
        self.misuse.push(m);
    }

    fn ppi_implemented(&self, n: usize) -> bool {
        n < 128 && self.cfg.impl_ppis[n / 64] >> (n % 64) & 1 != 0
    }

    // ---- the outside world -------------------------------------------

    /// Drive PPI `n`'s input line on PE `pe` (a timer condition, the PMU
    /// overflow). Then evaluate what the PE would be signalled.
    pub fn set_ppi_line(&mut self, pe: usize, n: u32, level: bool) {
        let n = n as usize;
        if !self.ppi_implemented(n) {
            return;
        }
        let s = &mut self.pes[pe].ppi[n];
        if s.level {
            s.line = level;
        } else if level && !s.line {
            s.line = true;
            s.latch = true;
        } else {
            s.line = level;
        }
        self.signal(pe);
    }

    /// Drive SPI `id`'s wire (level) or pulse it (edge).
    pub fn set_spi_line(&mut self, id: u32, level: bool) {
        if let Some(&Some(vm)) = self.irs.spi_vm.get(id as usize) {
            // Assigned to a VM: the wire drives that VM's virtual SPI of
            // the same ID, and only it.
            let Some(s) = self.vint_mut(vm, IntType::Spi, id) else {
                self.swerr(vm, IntId::spi(id), irs::EC_OUT_OF_RANGE);
                return;
            };
            if s.level {
                s.line = level;
            } else if level {
                s.latch = true;
            }
            let vpe = s.iaffid;
            self.vint_changed(vm, vpe);
            return;
        }
        let Some(s) = self.irs.spis.get_mut(id as usize) else {
            return;
        };
        if s.level {
            s.line = level;
        } else if level {
            s.latch = true;
        }
        let target = s.iaffid;
        if let Some(pe) = self.pe_of(target) {
            self.signal(pe);
        }
    }

    /// The PE enters its guest (EL1, HCR_EL2.IMO = 1: the current domain is
    /// the virtual one).
    pub fn enter_guest(&mut self, pe: usize) {
        self.pes[pe].in_guest = true;
        self.signal(pe);
    }

    /// The PE is back at EL2.
    pub fn exit_guest(&mut self, pe: usize) {
        self.pes[pe].in_guest = false;
    }

    /// Physical interrupts signalled to EL2 on `pe` (each time the
    /// physical HPPI became deliverable while it ran the guest or EL2).
    pub fn el2_irqs(&self, pe: usize) -> u64 {
        self.pes[pe].el2_irqs
    }

    /// Virtual interrupts the guest on `pe` acknowledged.
    pub fn virqs_acked(&self, pe: usize) -> u64 {
        self.pes[pe].virqs_acked
    }

    /// Guest writes that hit a hidden PPI (WI).
    pub fn hidden_writes(&self) -> u64 {
        self.hidden_writes
    }

    /// Whether the PE's guest would see a virtual IRQ now.
    pub fn virq_signalled(&self, pe: usize) -> bool {
        self.pes[pe].in_guest && self.virt_hppi(pe).is_some()
    }

    /// Whether the PE would take a physical IRQ to EL2 now.
    pub fn irq_signalled(&self, pe: usize) -> bool {
        self.phys_hppi(pe).is_some()
    }

    /// Test access to a PE's physical PPI state.
    pub fn ppi(&self, pe: usize, n: u32) -> IntState {
        self.pes[pe].ppi[n as usize]
    }

    /// Test access to a PE's virtual PPI state as the hardware sees it
    /// (pending includes DVI's alias of the physical pending state).
    pub fn vppi_pending(&self, pe: usize, n: u32) -> bool {
        self.virt_pending(pe, n as usize)
    }

    pub fn spi(&self, id: u32) -> IntState {
        self.irs.spis[id as usize]
    }

    pub fn lpi(&self, id: u32) -> Option<IntState> {
        self.irs.lpis.get(&id).copied()
    }

    pub fn irs_syncs(&self) -> u64 {
        self.irs.syncs
    }

    /// Write a word of physical memory (software building the VM and vPE
    /// tables the IRS reads).
    pub fn mem_write64(&mut self, pa: u64, value: u64) {
        self.mem.insert(pa & !7, value);
    }

    pub fn mem_read64(&self, pa: u64) -> u64 {
        self.mem.get(&(pa & !7)).copied().unwrap_or(0)
    }

    /// Doorbells the vIRS rang (a virtual interrupt became pending for a
    /// vPE no PE had resident, with IRS_VPE_DBR.DBV set).
    pub fn doorbells(&self) -> u64 {
        self.doorbells
    }

    /// A VM's virtual SPI or LPI, if the VM and its virtual IST exist.
    pub fn vint(&self, vm: u16, id: IntId) -> Option<IntState> {
        let v = self.irs.vms.get(&vm)?;
        let (bits, map) = match id.ty {
            IntType::Spi => (v.spi_bits?, &v.vspis),
            IntType::Lpi => (v.lpi_bits?, &v.vlpis),
            IntType::Ppi => return None,
        };
        if u64::from(id.id) >= 1u64 << bits {
            return None;
        }
        Some(map.get(&id.id).copied().unwrap_or_default())
    }

    /// Whether the vIRS holds VM `vm` valid, and its vPE `vpe`.
    pub fn vpe_valid(&self, vm: u16, vpe: u16) -> bool {
        self.irs
            .vms
            .get(&vm)
            .is_some_and(|v| v.vpes.contains_key(&vpe))
    }

    /// IRS_PE_CR0.DPS of the PE with IAFFID `iaffid` as software set it
    /// (false for one never set up, or not this IRS's).
    pub fn pe_dps(&self, iaffid: u16) -> bool {
        self.irs.pe_dps.get(&iaffid).copied().unwrap_or(false)
    }

    /// The software error records not yet cleared.
    pub fn swerrs(&self) -> &[Swerr] {
        &self.irs.swerr
    }

    fn swerr(&mut self, vm: u16, id: IntId, ec: u64) {
        self.irs.swerr.push(Swerr { vm, id, ec });
    }

    fn vint_mut(&mut self, vm: u16, ty: IntType, id: u32) -> Option<&mut IntState> {
        let v = self.irs.vms.get_mut(&vm)?;
        let (bits, map) = match ty {
            IntType::Spi => (v.spi_bits?, &mut v.vspis),
            IntType::Lpi => (v.lpi_bits?, &mut v.vlpis),
            IntType::Ppi => return None,
        };
        if u64::from(id) >= 1u64 << bits {
            return None;
        }
        Some(map.entry(id).or_default())
    }

    /// The PE on which vPE `vpe` of VM `vm` is resident, if any.
    fn resident_pe(&self, vm: u16, vpe: u16) -> Option<usize> {
        self.pes.iter().position(|p| {
            p.virt.resident()
                && (p.virt.contextr & 0xffff) as u16 == vm
                && (p.virt.contextr >> 32 & 0xffff) as u16 == vpe
        })
    }

    /// A virtual interrupt of `vm` targeted at `vpe` changed: signal the PE
    /// it is resident on, or ring its doorbell if one of its interrupts is
    /// now deliverable (enabled, pending, inactive) and DBV is set. The
    /// doorbell is one-shot: DBV clears when it rings (the hypervisor
    /// re-arms it when it puts the vPE again). DBPM is not modelled (every
    /// priority rings it, as with DBPM = 0).
    fn vint_changed(&mut self, vm: u16, vpe: u16) {
        if let Some(pe) = self.resident_pe(vm, vpe) {
            self.signal(pe);
            return;
        }
        let Some(v) = self.irs.vms.get(&vm) else {
            return;
        };
        let Some(&vp) = v.vpes.get(&vpe) else {
            return;
        };
        let deliverable = v
            .vspis
            .values()
            .chain(v.vlpis.values())
            .any(|s| s.iaffid == vpe && s.enabled && s.pending() && !s.active);
        if !deliverable || vp.dbr & irs::VPE_DBR_DBV == 0 {
            return;
        }
        let db = (vp.dbr & 0xff_ffff) as u32;
        if !self.lpi_in_ist(db) {
            self.bad(Misuse::BadDoorbell(vp.dbr));
            return;
        }
        if let Some(p) = self.irs.vms.get_mut(&vm).and_then(|v| v.vpes.get_mut(&vpe)) {
            p.dbr &= !irs::VPE_DBR_DBV;
        }
        self.doorbells += 1;
        let s = self.irs.lpis.entry(db).or_default();
        s.latch = true;
        let target = s.iaffid;
        if let Some(pe) = self.pe_of(target) {
            self.signal(pe);
        }
    }

    /// An ITS delivers LPI `id` (an event it translated): pending in the
    /// IST and signalled at its target PE. False, and nothing changed,
    /// when the IRS holds no IST for it (IRSEN = 0 or outside the IST).
    pub fn its_lpi(&mut self, id: u32) -> bool {
        if self.irs.cr0 & irs::CR0_IRSEN == 0 || !self.lpi_in_ist(id) {
            return false;
        }
        let s = self.irs.lpis.entry(id).or_default();
        s.latch = true;
        let target = s.iaffid;
        if let Some(pe) = self.pe_of(target) {
            self.signal(pe);
        }
        true
    }

    fn pe_of(&self, iaffid: u16) -> Option<usize> {
        self.pes.iter().position(|p| p.iaffid == iaffid)
    }

    fn signal(&mut self, pe: usize) {
        if self.phys_hppi(pe).is_some() {
            self.pes[pe].el2_irqs += 1;
        }
        // A DVI'd PPI whose physical copy is still enabled would reach the
        // physical domain too.
        let v = self.pes[pe].virt.clone();
        if v.resident() {
            for n in 0..128 {
                let dvi = v.dvir[n / 64] >> (n % 64) & 1 != 0;
                let s = self.pes[pe].ppi[n];
                if dvi && s.enabled && s.pending() && !s.active {
                    self.bad(Misuse::DviPhysicalEnabled(n as u32));
                }
            }
        }
    }

    // ---- highest priority pending --------------------------------------

    fn running_priority(apr: u64) -> u8 {
        if apr == 0 {
            0x20 // idle: below every priority
        } else {
            apr.trailing_zeros() as u8
        }
    }

    /// The physical HPPI of `pe`: an enabled, pending, inactive interrupt
    /// of strictly higher priority (lower value) than both ICC_PCR_EL1 and
    /// the running priority, with ICC_CR0_EL1.EN set. PPIs, then SPIs and
    /// LPIs targeted at the PE; ties to the lower type, then ID.
    fn phys_hppi(&self, pe: usize) -> Option<(IntId, u8)> {
        let p = &self.pes[pe];
        if p.cr0 & 1 == 0 {
            return None;
        }
        let limit = (p.pcr as u8).min(Self::running_priority(p.apr));
        let mut best: Option<(IntId, u8)> = None;
        let mut consider = |id: IntId, s: &IntState| {
            if s.enabled
                && s.pending()
                && !s.active
                && s.priority < limit
                && best.is_none_or(|(_, bp)| s.priority < bp)
            {
                best = Some((id, s.priority));
            }
        };
        let v = &p.virt;
        for n in 0..128 {
            // Effective DVI: the physical pending state goes to the vPE and
            // is not a physical candidate.
            let dvi = v.resident() && v.dvir[n / 64] >> (n % 64) & 1 != 0;
            if !dvi {
                consider(IntId::ppi(n as u32), &p.ppi[n]);
            }
        }
        if self.irs.cr0 & irs::CR0_IRSEN != 0 {
            for (i, s) in self.irs.spis.iter().enumerate() {
                if s.iaffid == p.iaffid && self.irs.spi_vm[i].is_none() {
                    consider(IntId::spi(i as u32), s);
                }
            }
            for (&i, s) in &self.irs.lpis {
                if s.iaffid == p.iaffid {
                    consider(IntId::lpi(i), s);
                }
            }
        }
        best
    }

    fn virt_pending(&self, pe: usize, n: usize) -> bool {
        let p = &self.pes[pe];
        let v = &p.virt;
        if v.dvir[n / 64] >> (n % 64) & 1 != 0 && v.resident() {
            p.ppi[n].pending()
        } else {
            v.ppi[n].pending()
        }
    }

    fn virt_hppi(&self, pe: usize) -> Option<(IntId, u8)> {
        let p = &self.pes[pe];
        let v = &p.virt;
        if !v.resident() || v.vmcr & 1 == 0 {
            return None;
        }
        let vpmr = ((v.vmcr & VMCR_VPMR_MASK) >> VMCR_VPMR_SHIFT) as u8;
        let limit = vpmr.min(Self::running_priority(v.apr));
        let mut best: Option<(IntId, u8)> = None;
        for n in 0..128 {
            if v.hvir[n / 64] >> (n % 64) & 1 != 0 {
                continue;
            }
            let s = &v.ppi[n];
            if s.enabled
                && self.virt_pending(pe, n)
                && !s.active
                && s.priority < limit
                && best.is_none_or(|(_, bp)| s.priority < bp)
            {
                best = Some((IntId::ppi(n as u32), s.priority));
            }
        }
        // The resident vPE's virtual SPIs and LPIs (the vIRS), only while
        // the IRS is enabled.
        if self.irs.cr0 & irs::CR0_IRSEN == 0 {
            return best;
        }
        let vm = (v.contextr & 0xffff) as u16;
        let vpe = (v.contextr >> 32 & 0xffff) as u16;
        if let Some(vmst) = self.irs.vms.get(&vm) {
            let spis = vmst.vspis.iter().map(|(&i, s)| (IntId::spi(i), s));
            let lpis = vmst.vlpis.iter().map(|(&i, s)| (IntId::lpi(i), s));
            for (id, s) in spis.chain(lpis) {
                if s.iaffid == vpe
                    && s.enabled
                    && s.pending()
                    && !s.active
                    && s.priority < limit
                    && best.is_none_or(|(_, bp)| s.priority < bp)
                {
                    best = Some((id, s.priority));
                }
            }
        }
        best
    }

    // ---- register access ------------------------------------------------

    /// `mrs` of the register with encoding `enc` on `pe` at `el`.
    pub fn read(&mut self, pe: usize, el: El, enc: Enc) -> Access {
        let Some(reg) = Reg::decode(enc) else {
            self.bad(Misuse::UnknownRegister(enc));
            return Access::Undefined;
        };
        if el < reg.min_el() {
            self.bad(Misuse::WrongEl { reg, el });
            return Access::Undefined;
        }
        let guest = el == El::El1 && self.pes[pe].in_guest;
        if guest {
            if let Some(c) = hfg_class(reg) {
                if self.pes[pe].virt.hfgrtr >> (c as u32) & 1 == 0 {
                    return Access::Trapped;
                }
            }
            return Access::Value(self.read_virtual(pe, reg));
        }
        Access::Value(self.read_phys(pe, reg))
    }

    /// `msr` of the register with encoding `enc` on `pe` at `el`.
    pub fn write(&mut self, pe: usize, el: El, enc: Enc, value: u64) -> Access {
        let Some(reg) = Reg::decode(enc) else {
            self.bad(Misuse::UnknownRegister(enc));
            return Access::Undefined;
        };
        if el < reg.min_el() {
            self.bad(Misuse::WrongEl { reg, el });
            return Access::Undefined;
        }
        if reg.read_only() {
            self.bad(Misuse::WriteToReadOnly(reg));
            return Access::Undefined;
        }
        let guest = el == El::El1 && self.pes[pe].in_guest;
        // A trapped write never reaches the register: its value is EL2's
        // to judge, not a misuse of the model.
        if guest {
            if let Some(c) = hfg_class(reg) {
                if self.pes[pe].virt.hfgwtr >> (c as u32) & 1 == 0 {
                    return Access::Trapped;
                }
            }
        }
        let res0 = value & !reg.writable_mask();
        if res0 != 0 {
            self.bad(Misuse::Res0Written { reg, bits: res0 });
        }
        let value = value & reg.writable_mask();
        if guest {
            self.write_virtual(pe, reg, value);
        } else {
            self.write_phys(pe, reg, value);
        }
        self.signal(pe);
        Access::Value(0)
    }

    fn bits_of(states: &[IntState; 128], w: u8, f: impl Fn(&IntState) -> bool, mask: u64) -> u64 {
        let mut v = 0;
        for b in 0..64 {
            if f(&states[w as usize * 64 + b]) {
                v |= 1 << b;
            }
        }
        v & mask
    }

    fn prio_word(states: &[IntState; 128], n: u8) -> u64 {
        (0..8).fold(0, |acc, i| {
            acc | (u64::from(states[n as usize * 8 + i].priority) << (i * 8))
        })
    }

    fn read_phys(&mut self, pe: usize, reg: Reg) -> u64 {
        let hppi = self.phys_hppi(pe);
        let p = &self.pes[pe];
        let imp = |w: u8| self.cfg.impl_ppis[w as usize];
        match reg {
            Reg::IccCr0 => p.cr0,
            Reg::IccPcr => p.pcr,
            Reg::IccApr => p.apr,
            Reg::IccHppir => hppi.map_or(0, |(id, _)| (1 << 32) | id.raw()),
            Reg::IccIaffidr => u64::from(p.iaffid),
            // PRI_BITS [14:12] (PRI_BITS - 1), GCIE_LEGACY [8].
            Reg::IccIdr0 => {
                (u64::from(self.cfg.pri_bits_minus1) << 12) | (u64::from(self.cfg.gcie_legacy) << 8)
            }
            Reg::IccPpiHmr(w) => Self::bits_of(&p.ppi, w, |s| s.level, imp(w)),
            Reg::IccPpiEnabler(w) => Self::bits_of(&p.ppi, w, |s| s.enabled, imp(w)),
            Reg::IccPpiCpendr(w) | Reg::IccPpiSpendr(w) => {
                Self::bits_of(&p.ppi, w, |s| s.pending(), imp(w))
            }
            Reg::IccPpiCactiver(w) | Reg::IccPpiSactiver(w) => {
                Self::bits_of(&p.ppi, w, |s| s.active, imp(w))
            }
            Reg::IccPpiPriorityr(n) => Self::prio_word(&p.ppi, n),
            Reg::IchVctlr => p.virt.vctlr,
            Reg::IchContextr => p.virt.contextr,
            Reg::IchVmcr => p.virt.vmcr,
            Reg::IchApr => p.virt.apr,
            Reg::IchHfgrtr => p.virt.hfgrtr,
            Reg::IchHfgwtr => p.virt.hfgwtr,
            Reg::IchHfgitr => p.virt.hfgitr,
            Reg::IchPpiDvir(w) => p.virt.dvir[w as usize] & imp(w),
            Reg::IchPpiHvir(w) => p.virt.hvir[w as usize] & imp(w),
            Reg::IchPpiEnabler(w) => Self::bits_of(&p.virt.ppi, w, |s| s.enabled, imp(w)),
            Reg::IchPpiPendr(w) => {
                // The virtual pending state as the hypervisor sees it: for
                // DVI'd PPIs the physical one while resident.
                let mut v = 0;
                for b in 0..64 {
                    if self.virt_pending(pe, w as usize * 64 + b) {
                        v |= 1 << b;
                    }
                }
                v & imp(w)
            }
            Reg::IchPpiActiver(w) => Self::bits_of(&p.virt.ppi, w, |s| s.active, imp(w)),
            Reg::IchPpiPriorityr(n) => Self::prio_word(&p.virt.ppi, n),
        }
    }

    fn set_bits(
        states: &mut [IntState; 128],
        w: u8,
        value: u64,
        mask: u64,
        f: impl Fn(&mut IntState, bool),
    ) {
        for b in 0..64 {
            if mask >> b & 1 != 0 {
                f(&mut states[w as usize * 64 + b], value >> b & 1 != 0);
            }
        }
    }

    fn set_prio_word(states: &mut [IntState; 128], n: u8, value: u64) {
        for i in 0..8 {
            states[n as usize * 8 + i].priority = (value >> (i * 8)) as u8 & 0x1f;
        }
    }

    fn write_phys(&mut self, pe: usize, reg: Reg, value: u64) {
        let imp = self.cfg.impl_ppis;
        let legacy = self.cfg.gcie_legacy;
        let p = &mut self.pes[pe];
        match reg {
            Reg::IccCr0 => p.cr0 = value,
            Reg::IccPcr => p.pcr = value,
            Reg::IccApr => p.apr = value,
            Reg::IccPpiEnabler(w) => {
                Self::set_bits(&mut p.ppi, w, value, imp[w as usize], |s, b| s.enabled = b)
            }
            Reg::IccPpiSpendr(w) => {
                Self::set_bits(&mut p.ppi, w, value, value & imp[w as usize], |s, _| {
                    s.latch = true
                })
            }
            Reg::IccPpiCpendr(w) => {
                Self::set_bits(&mut p.ppi, w, value, value & imp[w as usize], |s, _| {
                    s.latch = false
                })
            }
            Reg::IccPpiSactiver(w) => {
                Self::set_bits(&mut p.ppi, w, value, value & imp[w as usize], |s, _| {
                    s.active = true
                })
            }
            Reg::IccPpiCactiver(w) => {
                Self::set_bits(&mut p.ppi, w, value, value & imp[w as usize], |s, _| {
                    s.active = false
                })
            }
            Reg::IccPpiPriorityr(n) => Self::set_prio_word(&mut p.ppi, n, value),
            Reg::IchVctlr => {
                // V3 is RES0 without FEAT_GCIE_LEGACY.
                let v = if legacy { value } else { value & 1 };
                if v != value {
                    self.misuse.push(Misuse::Res0Written {
                        reg,
                        bits: value & 2,
                    });
                }
                p.virt.vctlr = v;
            }
            Reg::IchContextr => p.virt.contextr = value,
            Reg::IchVmcr => p.virt.vmcr = value,
            Reg::IchApr => p.virt.apr = value,
            Reg::IchHfgrtr => p.virt.hfgrtr = value,
            Reg::IchHfgwtr => p.virt.hfgwtr = value,
            Reg::IchHfgitr => p.virt.hfgitr = value,
            Reg::IchPpiDvir(w) => p.virt.dvir[w as usize] = value & imp[w as usize],
            Reg::IchPpiHvir(w) => p.virt.hvir[w as usize] = value & imp[w as usize],
            Reg::IchPpiEnabler(w) => {
                Self::set_bits(&mut p.virt.ppi, w, value, imp[w as usize], |s, b| {
                    s.enabled = b
                })
            }
            Reg::IchPpiPendr(w) => {
                // Writes to a DVI'd PPI's bit are ignored (the pending
                // state is the physical one's alias).
                let mask = imp[w as usize] & !p.virt.dvir[w as usize];
                Self::set_bits(&mut p.virt.ppi, w, value, mask, |s, b| s.latch = b)
            }
            Reg::IchPpiActiver(w) => {
                Self::set_bits(&mut p.virt.ppi, w, value, imp[w as usize], |s, b| {
                    s.active = b
                })
            }
            Reg::IchPpiPriorityr(n) => Self::set_prio_word(&mut p.virt.ppi, n, value),
            Reg::IccHppir | Reg::IccIaffidr | Reg::IccIdr0 | Reg::IccPpiHmr(_) => {}
        }
    }

    fn visible(&self, pe: usize, w: u8) -> u64 {
        self.cfg.impl_ppis[w as usize] & !self.pes[pe].virt.hvir[w as usize]
    }

    /// A guest's (EL1, virtual domain) read: the ICV view. Hidden PPIs RAZ.
    fn read_virtual(&mut self, pe: usize, reg: Reg) -> u64 {
        let hppi = self.virt_hppi(pe);
        let v = &self.pes[pe].virt;
        match reg {
            Reg::IccCr0 => v.vmcr & VMCR_EN,
            Reg::IccPcr => (v.vmcr & VMCR_VPMR_MASK) >> VMCR_VPMR_SHIFT,
            Reg::IccApr => v.apr,
            Reg::IccHppir => hppi.map_or(0, |(id, _)| (1 << 32) | id.raw()),
            Reg::IccIaffidr => (v.contextr >> 32) & 0xffff,
            Reg::IccIdr0 => u64::from(self.cfg.pri_bits_minus1) << 12,
            Reg::IccPpiHmr(w) => Self::bits_of(&v.ppi, w, |s| s.level, self.visible(pe, w)),
            Reg::IccPpiEnabler(w) => Self::bits_of(&v.ppi, w, |s| s.enabled, self.visible(pe, w)),
            Reg::IccPpiCpendr(w) | Reg::IccPpiSpendr(w) => {
                let mut x = 0;
                for b in 0..64 {
                    if self.virt_pending(pe, w as usize * 64 + b) {
                        x |= 1 << b;
                    }
                }
                x & self.visible(pe, w)
            }
            Reg::IccPpiCactiver(w) | Reg::IccPpiSactiver(w) => {
                Self::bits_of(&v.ppi, w, |s| s.active, self.visible(pe, w))
            }
            Reg::IccPpiPriorityr(n) => {
                let mut x = Self::prio_word(&v.ppi, n);
                for i in 0..8 {
                    let ppi = n as usize * 8 + i;
                    if self.visible(pe, (ppi / 64) as u8) >> (ppi % 64) & 1 == 0 {
                        x &= !(0xff << (i * 8));
                    }
                }
                x
            }
            _ => 0,
        }
    }

    /// A guest's write: the virtual state; hidden PPIs WI.
    fn write_virtual(&mut self, pe: usize, reg: Reg, value: u64) {
        let word = |reg: Reg| match reg {
            Reg::IccPpiEnabler(w)
            | Reg::IccPpiSpendr(w)
            | Reg::IccPpiCpendr(w)
            | Reg::IccPpiSactiver(w)
            | Reg::IccPpiCactiver(w) => Some(w),
            _ => None,
        };
        if let Some(w) = word(reg) {
            let hidden = value & self.pes[pe].virt.hvir[w as usize];
            if hidden != 0 {
                self.hidden_writes += 1;
            }
        }
        let dvir = self.pes[pe].virt.dvir;
        let resident = self.pes[pe].virt.resident();
        let vis = [self.visible(pe, 0), self.visible(pe, 1)];
        let v = &mut self.pes[pe].virt;
        match reg {
            Reg::IccCr0 => v.vmcr = (v.vmcr & !VMCR_EN) | (value & VMCR_EN),
            Reg::IccPcr => {
                v.vmcr = (v.vmcr & !VMCR_VPMR_MASK) | ((value & 0x1f) << VMCR_VPMR_SHIFT)
            }
            Reg::IccApr => v.apr = value,
            Reg::IccPpiEnabler(w) => {
                let m = vis[w as usize];
                Self::set_bits(&mut v.ppi, w, value, m, |s, b| s.enabled = b)
            }
            Reg::IccPpiSpendr(w) | Reg::IccPpiCpendr(w) => {
                let set = matches!(reg, Reg::IccPpiSpendr(_));
                let m = value & vis[w as usize] & !(if resident { dvir[w as usize] } else { 0 });
                Self::set_bits(&mut v.ppi, w, value, m, |s, _| s.latch = set)
            }
            Reg::IccPpiSactiver(w) | Reg::IccPpiCactiver(w) => {
                let set = matches!(reg, Reg::IccPpiSactiver(_));
                let m = value & vis[w as usize];
                Self::set_bits(&mut v.ppi, w, value, m, |s, _| s.active = set)
            }
            Reg::IccPpiPriorityr(n) => {
                for i in 0..8 {
                    let ppi = n as usize * 8 + i;
                    if vis[ppi / 64] >> (ppi % 64) & 1 != 0 {
                        v.ppi[ppi].priority = (value >> (i * 8)) as u8 & 0x1f;
                    }
                }
            }
            _ => {}
        }
    }

    // ---- instructions ---------------------------------------------------

    /// `sys` GIC CDxx / GSB with operand `xt` on `pe` at `el`.
    pub fn sys(&mut self, pe: usize, el: El, enc: Enc, xt: u64) -> Access {
        let Some(insn) = Insn::decode(enc) else {
            self.bad(Misuse::UnknownInstruction(enc));
            return Access::Undefined;
        };
        if insn == Insn::Vdpend {
            return self.vdpend(el, xt);
        }
        let guest = el == El::El1 && self.pes[pe].in_guest;
        if guest {
            if let Some(bit) = hfgitr_bit(insn) {
                if self.pes[pe].virt.hfgitr >> bit & 1 == 0 {
                    return Access::Trapped;
                }
            }
        }
        match insn {
            Insn::GsbSys | Insn::GsbAck => {
                if insn == Insn::GsbSys {
                    self.irs.syncs += 1;
                }
                return Access::Value(0);
            }
            Insn::Cdeoi => {
                if guest {
                    let v = &mut self.pes[pe].virt;
                    v.apr &= v.apr.wrapping_sub(1);
                } else {
                    let p = &mut self.pes[pe];
                    p.apr &= p.apr.wrapping_sub(1);
                }
                self.signal(pe);
                return Access::Value(0);
            }
            _ => {}
        }
        let Some(id) = IntId::from_raw(xt) else {
            self.bad(Misuse::BadOperand { insn, value: xt });
            return Access::Undefined;
        };
        let res0 = match insn {
            // PRIORITY [39:35], TYPE, ID.
            Insn::Cdpri => !(0x1f << 35 | 0xe0ff_ffff),
            // IAFFID [47:32], IRM [28], TYPE, ID.
            Insn::Cdaff => !(0xffff << 32 | 1 << 28 | 0xe0ff_ffff),
            // PENDING [32].
            Insn::Cdpend => !(1 << 32 | 0xe0ff_ffff),
            // HM [32].
            Insn::Cdhm => !(1 << 32 | 0xe0ff_ffff),
            _ => !0xe0ff_ffffu64,
        };
        if xt & res0 != 0 {
            self.bad(Misuse::BadOperand { insn, value: xt });
        }
        if guest {
            if id.ty != IntType::Ppi {
                self.virt_cd(pe, insn, id, xt);
                return Access::Value(0);
            }
            let n = id.id as usize;
            if n >= 128 || !self.ppi_implemented(n) {
                return Access::Value(0);
            }
            if self.pes[pe].virt.hvir[n / 64] >> (n % 64) & 1 != 0 {
                self.hidden_writes += 1;
                return Access::Value(0);
            }
            let dvi = self.pes[pe].virt.dvir[n / 64] >> (n % 64) & 1 != 0;
            let v = &mut self.pes[pe].virt;
            match insn {
                Insn::Cden => v.ppi[n].enabled = true,
                Insn::Cddis => v.ppi[n].enabled = false,
                Insn::Cdpri => v.ppi[n].priority = (xt >> 35) as u8 & 0x1f,
                Insn::Cdpend if !dvi => v.ppi[n].latch = xt >> 32 & 1 != 0,
                Insn::Cddi => {
                    v.ppi[n].active = false;
                    if dvi {
                        // A DVI'd PPI's deactivate clears the physical
                        // active state too.
                        self.pes[pe].ppi[n].active = false;
                    }
                }
                _ => {}
            }
            self.signal(pe);
            return Access::Value(0);
        }
        match id.ty {
            IntType::Ppi => {
                let n = id.id as usize;
                if !self.ppi_implemented(n) {
                    self.bad(Misuse::NoSuchInterrupt(id));
                    return Access::Value(0);
                }
                let s = &mut self.pes[pe].ppi[n];
                match insn {
                    Insn::Cden => s.enabled = true,
                    Insn::Cddis => s.enabled = false,
                    Insn::Cdpri => s.priority = (xt >> 35) as u8 & 0x1f,
                    Insn::Cdpend => s.latch = xt >> 32 & 1 != 0,
                    Insn::Cddi => s.active = false,
                    // A PPI's handling mode is fixed (ICC_PPI_HMR); its
                    // affinity is its PE.
                    Insn::Cdhm | Insn::Cdaff => {
                        self.misuse.push(Misuse::BadOperand { insn, value: xt })
                    }
                    _ => {}
                }
            }
            IntType::Spi | IntType::Lpi => {
                if self.irs.cr0 & irs::CR0_IRSEN == 0 {
                    self.bad(Misuse::IrsDisabled(insn));
                    return Access::Value(0);
                }
                let ist_ok = id.ty == IntType::Spi || self.lpi_in_ist(id.id);
                if !ist_ok {
                    self.bad(Misuse::LpiOutsideIst(id.id));
                    return Access::Value(0);
                }
                if id.ty == IntType::Spi && !self.cfg.has_spi(id.id) {
                    self.bad(Misuse::NoSuchInterrupt(id));
                    return Access::Value(0);
                }
                if insn == Insn::Cdaff {
                    let iaffid = (xt >> 32) as u16;
                    if self.pe_of(iaffid).is_none() {
                        self.bad(Misuse::NoSuchPe(iaffid));
                        return Access::Value(0);
                    }
                }
                let s = if id.ty == IntType::Spi {
                    &mut self.irs.spis[id.id as usize]
                } else {
                    self.irs.lpis.entry(id.id).or_default()
                };
                match insn {
                    Insn::Cden => s.enabled = true,
                    Insn::Cddis => s.enabled = false,
                    Insn::Cdpri => s.priority = (xt >> 35) as u8 & 0x1f,
                    Insn::Cdpend => s.latch = xt >> 32 & 1 != 0,
                    Insn::Cddi => s.active = false,
                    Insn::Cdhm => s.level = xt >> 32 & 1 != 0,
                    Insn::Cdaff => s.iaffid = (xt >> 32) as u16,
                    _ => {}
                }
                let target = s.iaffid;
                if let Some(t) = self.pe_of(target) {
                    self.signal(t);
                }
            }
        }
        Access::Value(0)
    }

    /// GIC VDPEND from EL2: set (PENDING = 1) or clear the pending state
    /// of virtual SPI/LPI ID of VM `VM`, whichever PE issues it and
    /// whichever vPE is resident there. Operand: PENDING [63], VM [47:32],
    /// TYPE [31:29] (2 = LPI, 3 = SPI; FreeBSD's gicv5reg.h names only
    /// those two for VDPEND, so a PPI is a bad operand), ID [23:0], other
    /// bits RES0 (FreeBSD's gicv5reg.h, the only source giving the fields;
    /// KVM's GICv5 IRS series uses the instruction, naming a VM and an
    /// INTID and no vPE, to re-pend a restored VM's interrupts).
    ///
    /// The model's reading: it is the hypervisor's CDPEND into that VM's
    /// virtual domain, so it writes the same pending latch a guest's own
    /// CDPEND of that ID writes (`virt_cd`), and the interrupt is then
    /// delivered as any virtual SPI/LPI: to the PE where its target vPE is
    /// resident (the guest's GICR CDIA takes it at its priority once it is
    /// enabled), or the target vPE's doorbell. Misuse (no effect): issued
    /// at EL1 ([`Misuse::El2InsnAtEl1`], UNDEFINED), IRSEN = 0, a VM the
    /// vIRS does not hold valid ([`Misuse::NoSuchVm`]), an ID beyond the
    /// VM's virtual IST ([`Misuse::NoSuchVirtualInterrupt`]).
    fn vdpend(&mut self, el: El, xt: u64) -> Access {
        let insn = Insn::Vdpend;
        if el != El::El2 {
            self.bad(Misuse::El2InsnAtEl1(insn));
            return Access::Undefined;
        }
        let id = match IntId::from_raw(xt) {
            Some(id) if id.ty != IntType::Ppi => id,
            _ => {
                self.bad(Misuse::BadOperand { insn, value: xt });
                return Access::Value(0);
            }
        };
        const FIELDS: u64 = 1 << 63 | 0xffff << 32 | 0xe0ff_ffff;
        if xt & !FIELDS != 0 {
            self.bad(Misuse::BadOperand { insn, value: xt });
        }
        if self.irs.cr0 & irs::CR0_IRSEN == 0 {
            self.bad(Misuse::IrsDisabled(insn));
            return Access::Value(0);
        }
        let vm = (xt >> 32) as u16;
        if !self.irs.vms.contains_key(&vm) {
            self.bad(Misuse::NoSuchVm(vm));
            return Access::Value(0);
        }
        let Some(s) = self.vint_mut(vm, id.ty, id.id) else {
            self.bad(Misuse::NoSuchVirtualInterrupt { vm, id });
            return Access::Value(0);
        };
        s.latch = xt >> 63 != 0;
        let vpe = s.iaffid;
        self.vint_changed(vm, vpe);
        Access::Value(0)
    }

    /// A guest's GIC CDxx to a virtual SPI or LPI: it reaches the VM in
    /// ICH_CONTEXTR_EL2.VM and nothing else (a guest cannot name another
    /// VM). With no resident vPE it does nothing; an ID beyond the VM's
    /// virtual IST, or an affinity to a vPE the VM does not have, is a
    /// software error record ([`Model::swerrs`]) and has no effect.
    fn virt_cd(&mut self, pe: usize, insn: Insn, id: IntId, xt: u64) {
        let v = &self.pes[pe].virt;
        if !v.resident() || self.irs.cr0 & irs::CR0_IRSEN == 0 {
            return;
        }
        let vm = (v.contextr & 0xffff) as u16;
        let new_vpe = (xt >> 32) as u16;
        if insn == Insn::Cdaff && !self.vpe_valid(vm, new_vpe) {
            self.swerr(vm, id, irs::EC_NO_VPE);
            return;
        }
        let Some(s) = self.vint_mut(vm, id.ty, id.id) else {
            self.swerr(vm, id, irs::EC_OUT_OF_RANGE);
            return;
        };
        let old_vpe = s.iaffid;
        match insn {
            Insn::Cden => s.enabled = true,
            Insn::Cddis => s.enabled = false,
            Insn::Cdpri => s.priority = (xt >> 35) as u8 & 0x1f,
            Insn::Cdpend => s.latch = xt >> 32 & 1 != 0,
            Insn::Cddi => s.active = false,
            Insn::Cdhm => s.level = xt >> 32 & 1 != 0,
            Insn::Cdaff => s.iaffid = new_vpe,
            _ => {}
        }
        let target = s.iaffid;
        self.vint_changed(vm, target);
        if old_vpe != target {
            self.vint_changed(vm, old_vpe);
        }
    }

    /// `sysl` GICR CDIA on `pe` at `el`: acknowledge.
    pub fn sysl(&mut self, pe: usize, el: El, enc: Enc) -> Access {
        if enc != GICR_CDIA {
            self.bad(Misuse::UnknownInstruction(enc));
            return Access::Undefined;
        }
        let guest = el == El::El1 && self.pes[pe].in_guest;
        if guest && self.pes[pe].virt.hfgitr & HFGITR_GICRCDIA == 0 {
            return Access::Trapped;
        }
        if guest {
            let Some((id, prio)) = self.virt_hppi(pe) else {
                return Access::Value(0);
            };
            if id.ty != IntType::Ppi {
                let vm = (self.pes[pe].virt.contextr & 0xffff) as u16;
                if let Some(s) = self.vint_mut(vm, id.ty, id.id) {
                    s.active = true;
                    s.latch = false;
                }
                let p = &mut self.pes[pe];
                p.virt.apr |= 1 << prio;
                p.virqs_acked += 1;
                return Access::Value((1 << 32) | id.raw());
            }
            let n = id.id as usize;
            let dvi = self.pes[pe].virt.dvir[n / 64] >> (n % 64) & 1 != 0;
            let p = &mut self.pes[pe];
            p.virt.ppi[n].active = true;
            p.virt.ppi[n].latch = false;
            p.virt.apr |= 1 << prio;
            if dvi {
                // The physical PPI is activated with its virtual alias.
                p.ppi[n].active = true;
                p.ppi[n].latch = false;
            }
            p.virqs_acked += 1;
            return Access::Value((1 << 32) | id.raw());
        }
        let Some((id, prio)) = self.phys_hppi(pe) else {
            return Access::Value(0);
        };
        let s = match id.ty {
            IntType::Ppi => &mut self.pes[pe].ppi[id.id as usize],
            IntType::Spi => &mut self.irs.spis[id.id as usize],
            IntType::Lpi => self.irs.lpis.get_mut(&id.id).expect("hppi"),
        };
        s.active = true;
        s.latch = false;
        self.pes[pe].apr |= 1 << prio;
        Access::Value((1 << 32) | id.raw())
    }

    // ---- the IRS config frame --------------------------------------------

    fn lpi_in_ist(&self, id: u32) -> bool {
        if self.irs.ist_baser & irs::IST_BASER_VALID == 0 {
            return false;
        }
        let bits = self.irs.ist_cfgr & 0x1f;
        u64::from(id) < 1u64 << bits
    }

    /// A 32-bit (or 64-bit for IST_BASER) read of the IRS config frame.
    pub fn irs_read(&mut self, offset: u64) -> u64 {
        let spi_v = self.irs.spi_selr_valid;
        match offset {
            // INT_DOM [? ] = non-secure; VIRT; PA_RANGE.
            irs::IDR0 => u64::from(irs::IDR0_VIRT),
            // PE_CNT - 1 [15:0].
            irs::IDR1 => (self.cfg.pes as u64).saturating_sub(1),
            // ID_BITS [4:0], LPI [5], MIN_LPI_ID_BITS [9:6] = 0 here.
            irs::IDR2 => u64::from(self.cfg.lpi_id_bits) | (1 << 5),
            irs::IDR5 => u64::from(self.cfg.system_spis.unwrap_or(self.cfg.spi_end())),
            irs::IDR6 => u64::from(self.cfg.spis),
            irs::IDR7 => u64::from(self.cfg.spi_base),
            irs::PE_SELR => u64::from(self.irs.pe_selr),
            irs::PE_STATUSR => u64::from(
                irs::PE_STATUSR_IDLE
                    | if self.irs.pe_selr_valid {
                        irs::PE_STATUSR_V
                    } else {
                        0
                    },
            ),
            irs::PE_CR0 => u64::from(self.pe_dps(self.irs.pe_selr)),
            irs::IIDR => 0x0050_043b,
            irs::AIDR => 0x0000_0050,
            irs::CR0 => u64::from(self.irs.cr0 | irs::CR0_IDLE),
            irs::CR1 => u64::from(self.irs.cr1),
            irs::SYNC_STATUSR => 1,
            irs::SPI_SELR => u64::from(self.irs.spi_selr),
            irs::SPI_CFGR => {
                if !spi_v {
                    return 0;
                }
                let s = self.irs.spis[self.irs.spi_selr as usize];
                u64::from(s.level)
            }
            irs::SPI_STATUSR => {
                u64::from(irs::SPI_STATUSR_IDLE | if spi_v { irs::SPI_STATUSR_V } else { 0 })
            }
            irs::IST_BASER => self.irs.ist_baser,
            irs::IST_CFGR => u64::from(self.irs.ist_cfgr),
            irs::IST_STATUSR => u64::from(irs::IST_STATUSR_IDLE),
            irs::IDR3 => u64::from(self.cfg.vm_id_bits) << 5,
            irs::IDR4 => u64::from(self.cfg.vpe_id_bits) << 6,
            irs::SPI_VMR => match self.irs.spi_vm.get(self.irs.spi_selr as usize) {
                Some(&Some(vm)) if spi_v => irs::SPI_VMR_VIRT | u64::from(vm),
                _ => 0,
            },
            irs::VMT_BASER => self.irs.vmt_baser,
            irs::VMT_CFGR => u64::from(self.irs.vmt_cfgr),
            irs::VMT_STATUSR => u64::from(irs::VMT_STATUSR_IDLE),
            irs::VPE_SELR => self.irs.vpe_selr,
            irs::VPE_DBR => self.selected_vpe().map_or(0, |v| v.dbr),
            irs::VPE_CR0 => self.selected_vpe().map_or(0, |v| u64::from(v.cr0)),
            irs::VPE_STATUSR => {
                let v = if self.selected_vpe().is_some() {
                    irs::VPE_STATUSR_V
                } else {
                    0
                };
                u64::from(irs::VPE_STATUSR_IDLE | v)
            }
            irs::SWERR_STATUSR => u64::from(!self.irs.swerr.is_empty()),
            irs::SWERR_SYNDROMER0 => self.irs.swerr.first().map_or(0, |e| {
                (1 << 63) | ((e.id.ty as u64) << 60) | (u64::from(e.id.id) << 32) | u64::from(e.vm)
            }),
            _ => {
                self.bad(Misuse::IrsUnknownOffset(offset));
                0
            }
        }
    }

    pub fn irs_write(&mut self, offset: u64, value: u64) {
        match offset {
            irs::CR0 => {
                if value & !u64::from(irs::CR0_IRSEN) != 0 {
                    self.bad(Misuse::IrsUnknownOffset(offset));
                }
                self.irs.cr0 = value as u32 & irs::CR0_IRSEN;
            }
            irs::CR1 => self.irs.cr1 = value as u32,
            irs::PE_SELR => {
                let iaffid = (value & 0xffff) as u16;
                self.irs.pe_selr = iaffid;
                self.irs.pe_selr_valid = self.pe_of(iaffid).is_some();
            }
            irs::PE_CR0 => {
                if !self.irs.pe_selr_valid {
                    self.bad(Misuse::NoSuchPe(self.irs.pe_selr));
                    return;
                }
                let dps = value & irs::PE_CR0_DPS != 0;
                self.irs.pe_dps.insert(self.irs.pe_selr, dps);
            }
            irs::SYNCR => self.irs.syncs += 1,
            irs::SPI_SELR => {
                let id = value as u32 & 0xff_ffff;
                self.irs.spi_selr = id;
                self.irs.spi_selr_valid = self.cfg.has_spi(id);
            }
            irs::SPI_CFGR => {
                if self.irs.spi_selr_valid {
                    let i = self.irs.spi_selr as usize;
                    self.irs.spis[i].level = value & 1 != 0;
                }
            }
            irs::IST_BASER => {
                // Changing the IST while it is valid is not allowed.
                if self.irs.ist_baser & irs::IST_BASER_VALID != 0 && value & 1 != 0 {
                    self.bad(Misuse::IrsUnknownOffset(offset));
                }
                self.irs.ist_baser = value;
            }
            irs::IST_CFGR => {
                let bits = (value & 0x1f) as u8;
                if bits > self.cfg.lpi_id_bits {
                    self.bad(Misuse::Res0Written {
                        reg: Reg::IccIdr0,
                        bits: value,
                    });
                }
                self.irs.ist_cfgr = value as u32;
            }
            irs::SPI_VMR => {
                if !self.irs.spi_selr_valid {
                    self.bad(Misuse::NoSuchInterrupt(IntId::spi(self.irs.spi_selr)));
                    return;
                }
                let vm = (value & 0xffff) as u16;
                let assign = if value & irs::SPI_VMR_VIRT != 0 {
                    if !self.irs.vms.contains_key(&vm) {
                        self.bad(Misuse::NoSuchVm(vm));
                        return;
                    }
                    Some(vm)
                } else {
                    None
                };
                self.irs.spi_vm[self.irs.spi_selr as usize] = assign;
            }
            irs::VMT_BASER => {
                if self.irs.vmt_baser & irs::VMT_BASER_VALID != 0 && value & 1 != 0 {
                    self.bad(Misuse::IrsUnknownOffset(offset));
                }
                self.irs.vmt_baser = value;
            }
            irs::VMT_CFGR => {
                if (value & 0x1f) as u8 > self.cfg.vm_id_bits || value & (1 << 16) != 0 {
                    // More VM ID bits than IRS_IDR3 offers, or the
                    // two-level structure the model does not have.
                    self.bad(Misuse::NoVmTable(value));
                }
                self.irs.vmt_cfgr = value as u32;
            }
            irs::VPE_SELR => self.irs.vpe_selr = value,
            irs::VPE_DBR => {
                let (vm, vpe) = self.selected();
                let Some(v) = self.irs.vms.get_mut(&vm).and_then(|m| m.vpes.get_mut(&vpe)) else {
                    self.bad(Misuse::NoSuchVpe { vm, vpe });
                    return;
                };
                v.dbr = value;
                // Something already deliverable rings the new doorbell.
                self.vint_changed(vm, vpe);
            }
            irs::VPE_CR0 => {
                let (vm, vpe) = self.selected();
                match self.irs.vms.get_mut(&vm).and_then(|m| m.vpes.get_mut(&vpe)) {
                    Some(v) => v.cr0 = value as u32,
                    None => self.bad(Misuse::NoSuchVpe { vm, vpe }),
                }
            }
            irs::VMAP_VMR => self.vmap_vm(value),
            irs::VMAP_VISTR => self.vmap_vist(value),
            irs::VMAP_VPER => self.vmap_vpe(value),
            irs::SWERR_STATUSR => {
                if value & irs::SWERR_V != 0 && !self.irs.swerr.is_empty() {
                    self.irs.swerr.remove(0);
                }
            }
            _ => self.bad(Misuse::IrsUnknownOffset(offset)),
        }
    }

    // ---- the vIRS's table operations ---------------------------------------

    fn selected(&self) -> (u16, u16) {
        let v = self.irs.vpe_selr;
        ((v & 0xffff) as u16, (v >> 32 & 0xffff) as u16)
    }

    fn selected_vpe(&self) -> Option<&Vpe> {
        if self.irs.vpe_selr & irs::VPE_SELR_S == 0 {
            return None;
        }
        let (vm, vpe) = self.selected();
        self.irs.vms.get(&vm)?.vpes.get(&vpe)
    }

    /// The address of VM `vm`'s VM table entry, if the VM table is valid
    /// and covers it.
    fn vmte(&mut self, vm: u16) -> Option<u64> {
        let bits = self.irs.vmt_cfgr & 0x1f;
        if self.irs.vmt_baser & irs::VMT_BASER_VALID == 0 || u32::from(vm) >= 1 << bits {
            self.bad(Misuse::NoVmTable(u64::from(vm)));
            return None;
        }
        Some((self.irs.vmt_baser & irs::ADDR_MASK_3) + u64::from(vm) * irs::VMTE_SIZE)
    }

    /// IRS_VMAP_VMR: make VM `vm` valid from its VM table entry (which
    /// must name a VM descriptor and a vPE table), or invalid (U = 1).
    fn vmap_vm(&mut self, value: u64) {
        if value & irs::VMAP_M == 0 {
            return;
        }
        let vm = (value & 0xffff) as u16;
        let Some(addr) = self.vmte(vm) else {
            return;
        };
        let w0 = self.mem_read64(addr);
        if value & irs::VMAP_U != 0 {
            self.irs.vms.remove(&vm);
            for a in self.irs.spi_vm.iter_mut() {
                if *a == Some(vm) {
                    *a = None;
                }
            }
            self.mem_write64(addr, w0 & !1);
            return;
        }
        let w1 = self.mem_read64(addr + 8);
        let vpe_id_bits = (w1 >> irs::ID_BITS_SHIFT) as u8;
        if w0 & irs::ADDR_MASK_3 == 0
            || w1 & irs::ADDR_MASK_3 == 0
            || vpe_id_bits > self.cfg.vpe_id_bits
        {
            self.bad(Misuse::BadTableEntry { addr, word: w0 });
            return;
        }
        self.irs.vms.insert(
            vm,
            Vm {
                vpet: w1 & irs::ADDR_MASK_3,
                vpe_id_bits,
                ..Vm::default()
            },
        );
        self.mem_write64(addr, w0 | 1);
    }

    /// IRS_VMAP_VISTR: make a valid VM's virtual LPI (TYPE 2) or SPI
    /// (TYPE 3) IST valid from word 2 / 3 of its VM table entry.
    fn vmap_vist(&mut self, value: u64) {
        if value & irs::VMAP_M == 0 {
            return;
        }
        let vm = (value >> 32 & 0xffff) as u16;
        let ty = value >> 29 & 7;
        if !self.irs.vms.contains_key(&vm) {
            self.bad(Misuse::NoSuchVm(vm));
            return;
        }
        let Some(addr) = self.vmte(vm) else {
            return;
        };
        let word = match ty {
            2 => addr + 16,
            3 => addr + 24,
            _ => {
                self.bad(Misuse::BadTableEntry { addr, word: value });
                return;
            }
        };
        let w = self.mem_read64(word);
        let bits = (w >> irs::ID_BITS_SHIFT) as u8;
        let unmap = value & irs::VMAP_U != 0;
        if !unmap && (w & irs::ADDR_MASK_6 == 0 || bits == 0 || bits > 24) {
            self.bad(Misuse::BadTableEntry {
                addr: word,
                word: w,
            });
            return;
        }
        let v = self.irs.vms.get_mut(&vm).expect("checked");
        let set = if unmap { None } else { Some(bits) };
        if ty == 2 {
            v.lpi_bits = set;
            v.vlpis.clear();
        } else {
            v.spi_bits = set;
            v.vspis.clear();
        }
        self.mem_write64(word, if unmap { w & !1 } else { w | 1 });
    }

    /// IRS_VMAP_VPER: make vPE `vpe` of a valid VM valid from its vPE
    /// table entry (which must name a vPE descriptor).
    fn vmap_vpe(&mut self, value: u64) {
        if value & irs::VMAP_M == 0 {
            return;
        }
        let vpe = (value & 0xffff) as u16;
        let vm = (value >> 32 & 0xffff) as u16;
        let Some(v) = self.irs.vms.get(&vm) else {
            self.bad(Misuse::NoSuchVm(vm));
            return;
        };
        if u32::from(vpe) >= 1 << v.vpe_id_bits {
            self.bad(Misuse::NoSuchVpe { vm, vpe });
            return;
        }
        let addr = v.vpet + u64::from(vpe) * irs::VPETE_SIZE;
        let w = self.mem_read64(addr);
        if w & irs::ADDR_MASK_5 == 0 {
            self.bad(Misuse::BadTableEntry { addr, word: w });
            return;
        }
        self.irs
            .vms
            .get_mut(&vm)
            .expect("checked")
            .vpes
            .insert(vpe, Vpe::default());
        self.mem_write64(addr, w | 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model() -> Model {
        Model::new(Config::default())
    }

    fn wr(m: &mut Model, pe: usize, r: Reg, v: u64) {
        assert_eq!(m.write(pe, El::El2, r.enc(), v), Access::Value(0));
    }

    fn rd(m: &mut Model, pe: usize, el: El, r: Reg) -> u64 {
        match m.read(pe, el, r.enc()) {
            Access::Value(v) => v,
            a => panic!("{r:?}: {a:?}"),
        }
    }

    #[test]
    fn encodings_are_unique_and_decode_back() {
        let all = Reg::all();
        for (i, a) in all.iter().enumerate() {
            assert_eq!(Reg::decode(a.enc()), Some(*a));
            for b in &all[i + 1..] {
                assert_ne!(a.enc(), b.enc(), "{a:?} {b:?}");
            }
        }
    }

    #[test]
    fn ich_registers_are_undefined_at_el1() {
        let mut m = model();
        assert_eq!(
            m.read(0, El::El1, Reg::IchPpiDvir(0).enc()),
            Access::Undefined
        );
        assert_eq!(
            m.misuse(),
            [Misuse::WrongEl {
                reg: Reg::IchPpiDvir(0),
                el: El::El1
            }]
        );
    }

    #[test]
    fn reset_values_mask_everything() {
        let mut m = model();
        assert_eq!(rd(&mut m, 0, El::El2, Reg::IccCr0), 0);
        assert_eq!(rd(&mut m, 0, El::El2, Reg::IccPcr), 0);
        assert_eq!(rd(&mut m, 0, El::El2, Reg::IccPpiEnabler(0)), 0);
        assert_eq!(rd(&mut m, 1, El::El2, Reg::IccIaffidr), 1);
        let hmr = rd(&mut m, 0, El::El2, Reg::IccPpiHmr(0));
        assert_eq!(hmr >> PPI_CNTV & 1, 1);
        // PPIs 64.. are not implemented: RAZ/WI.
        wr(&mut m, 0, Reg::IccPpiEnabler(1), u64::MAX);
        assert_eq!(rd(&mut m, 0, El::El2, Reg::IccPpiEnabler(1)), 0);
    }

    #[test]
    fn res0_bits_are_reported() {
        let mut m = model();
        wr(&mut m, 0, Reg::IccPcr, 0x3f);
        assert_eq!(
            m.take_misuse(),
            [Misuse::Res0Written {
                reg: Reg::IccPcr,
                bits: 0x20
            }]
        );
        assert_eq!(rd(&mut m, 0, El::El2, Reg::IccPcr), 0x1f);
    }

    #[test]
    fn ppi_ack_eoi_deactivate() {
        let mut m = model();
        wr(&mut m, 0, Reg::IccCr0, 1);
        wr(&mut m, 0, Reg::IccPcr, 0x1f);
        let x = IntId::ppi(PPI_CNTP).raw();
        m.sys(0, El::El2, Insn::Cdpri.enc(), x | (4 << 35));
        m.sys(0, El::El2, Insn::Cden.enc(), x);
        m.set_ppi_line(0, PPI_CNTP, true);
        assert!(m.irq_signalled(0));
        assert_eq!(m.sysl(0, El::El2, GICR_CDIA), Access::Value(1 << 32 | x));
        assert!(m.ppi(0, PPI_CNTP).active);
        assert_eq!(rd(&mut m, 0, El::El2, Reg::IccApr), 1 << 4);
        m.sys(0, El::El2, Insn::Cdeoi.enc(), 0);
        assert_eq!(rd(&mut m, 0, El::El2, Reg::IccApr), 0);
        // Still active until deactivated: no second acknowledge.
        assert_eq!(m.sysl(0, El::El2, GICR_CDIA), Access::Value(0));
        m.sys(0, El::El2, Insn::Cddi.enc(), x);
        assert!(!m.ppi(0, PPI_CNTP).active);
        assert!(m.misuse().is_empty());
    }

    #[test]
    fn dvi_aliases_pending_only_while_resident_and_ignores_pendr_writes() {
        let mut m = model();
        wr(&mut m, 0, Reg::IchPpiDvir(0), 1 << PPI_CNTV);
        m.set_ppi_line(0, PPI_CNTV, true);
        // Not resident: the virtual state is the hypervisor's.
        assert!(!m.vppi_pending(0, PPI_CNTV));
        wr(&mut m, 0, Reg::IchContextr, 1 << 63);
        wr(&mut m, 0, Reg::IchVctlr, 1);
        assert!(m.vppi_pending(0, PPI_CNTV));
        wr(&mut m, 0, Reg::IchPpiPendr(0), 0);
        assert!(m.vppi_pending(0, PPI_CNTV));
    }

    #[test]
    fn hidden_ppi_reads_as_zero_and_ignores_guest_writes() {
        let mut m = model();
        wr(&mut m, 0, Reg::IchHfgrtr, 0x1f_00ff);
        wr(&mut m, 0, Reg::IchHfgwtr, 0x1e_0065);
        wr(&mut m, 0, Reg::IchPpiHvir(0), 1 << PPI_CNTHP);
        wr(&mut m, 0, Reg::IchContextr, 1 << 63);
        wr(&mut m, 0, Reg::IchVctlr, 1);
        m.enter_guest(0);
        let en = Reg::IccPpiEnabler(0).enc();
        assert_eq!(m.write(0, El::El1, en, 1 << PPI_CNTHP), Access::Value(0));
        assert_eq!(m.read(0, El::El1, en), Access::Value(0));
        assert_eq!(m.hidden_writes(), 1);
        // A register class with its trap bit clear traps.
        m.exit_guest(0);
        wr(&mut m, 0, Reg::IchHfgrtr, 0);
        m.enter_guest(0);
        assert_eq!(m.read(0, El::El1, en), Access::Trapped);
    }

    #[test]
    fn each_hfgrtr_and_hfgwtr_bit_traps_its_own_register_class_only() {
        // (class bit, a register of the class, writable), from Linux's
        // ICH_HFGRTR_EL2 / ICH_HFGWTR_EL2 field lists.
        let classes = [
            (0, Reg::IccApr, true),
            (1, Reg::IccIdr0, false),
            (2, Reg::IccCr0, true),
            (4, Reg::IccHppir, false),
            (5, Reg::IccPcr, true),
            (7, Reg::IccIaffidr, false),
            (16, Reg::IccPpiHmr(0), false),
            (17, Reg::IccPpiEnabler(1), true),
            (18, Reg::IccPpiSpendr(0), true),
            (18, Reg::IccPpiCpendr(1), true),
            (19, Reg::IccPpiPriorityr(15), true),
            (20, Reg::IccPpiSactiver(0), true),
            (20, Reg::IccPpiCactiver(1), true),
        ];
        for &(bit, reg, writable) in &classes {
            let mut m = model();
            wr(&mut m, 0, Reg::IchHfgrtr, 0x1f_00ff & !(1 << bit));
            wr(&mut m, 0, Reg::IchHfgwtr, 0x1e_0065 & !(1 << bit));
            wr(&mut m, 0, Reg::IchContextr, 1 << 63);
            wr(&mut m, 0, Reg::IchVctlr, 1);
            m.enter_guest(0);
            assert_eq!(m.read(0, El::El1, reg.enc()), Access::Trapped, "{reg:?}");
            if writable {
                assert_eq!(
                    m.write(0, El::El1, reg.enc(), 0),
                    Access::Trapped,
                    "{reg:?}"
                );
            }
            for &(other, r, w) in &classes {
                if other != bit {
                    assert!(
                        matches!(m.read(0, El::El1, r.enc()), Access::Value(_)),
                        "{r:?}"
                    );
                    if w {
                        assert_eq!(m.write(0, El::El1, r.enc(), 0), Access::Value(0), "{r:?}");
                    }
                }
            }
            assert!(m.misuse().is_empty(), "{:?}", m.misuse());
        }
    }

    #[test]
    fn a_guest_gic_instruction_whose_hfgitr_bit_is_clear_traps_and_does_nothing() {
        let mut m = model();
        wr(&mut m, 0, Reg::IchContextr, 1 << 63);
        wr(&mut m, 0, Reg::IchVctlr, 1);
        // Everything but GIC CDEN (bit 0) and GICR CDIA (bit 9) allowed.
        wr(&mut m, 0, Reg::IchHfgitr, 0x7ff & !(1 | HFGITR_GICRCDIA));
        m.enter_guest(0);
        let cntv = IntId::ppi(PPI_CNTV).raw();
        assert_eq!(m.sys(0, El::El1, Insn::Cden.enc(), cntv), Access::Trapped);
        assert!(!m.pes[0].virt.ppi[PPI_CNTV as usize].enabled);
        assert_eq!(m.sysl(0, El::El1, GICR_CDIA), Access::Trapped);
        assert_eq!(m.sys(0, El::El1, Insn::Cddis.enc(), cntv), Access::Value(0));
        assert_eq!(m.sys(0, El::El1, Insn::GsbSys.enc(), 0), Access::Value(0));
        // EL2's own instructions never trap.
        m.exit_guest(0);
        assert_eq!(m.sys(0, El::El2, Insn::Cden.enc(), cntv), Access::Value(0));
        // GICRCDNMIA [10] is the last field; [63:11] are RES0.
        wr(&mut m, 0, Reg::IchHfgitr, 0x7ff);
        assert_eq!(m.take_misuse(), []);
        wr(&mut m, 0, Reg::IchHfgitr, 1 << 11);
        assert_eq!(
            m.take_misuse(),
            [Misuse::Res0Written {
                reg: Reg::IchHfgitr,
                bits: 1 << 11
            }]
        );
    }

    #[test]
    fn spi_routed_through_the_irs_to_its_target() {
        let mut m = model();
        for pe in 0..2 {
            wr(&mut m, pe, Reg::IccCr0, 1);
            wr(&mut m, pe, Reg::IccPcr, 0x1f);
        }
        let x = IntId::spi(5).raw();
        m.sys(0, El::El2, Insn::Cden.enc(), x);
        assert_eq!(m.take_misuse(), [Misuse::IrsDisabled(Insn::Cden)]);
        m.irs_write(irs::CR0, 1);
        m.sys(0, El::El2, Insn::Cdaff.enc(), x | (1 << 32));
        m.sys(0, El::El2, Insn::Cden.enc(), x);
        m.set_spi_line(5, true);
        assert!(!m.irq_signalled(0));
        assert!(m.irq_signalled(1));
        m.sys(0, El::El2, Insn::Cdaff.enc(), x | (7 << 32));
        assert_eq!(m.take_misuse(), [Misuse::NoSuchPe(7)]);
    }

    #[test]
    fn an_irs_with_an_spi_range_has_only_its_own_spis() {
        // The second IRS of a system of 96 SPIs: SPIs 32..64.
        let mut m = Model::new(Config {
            spis: 32,
            spi_base: 32,
            system_spis: Some(96),
            ..Config::default()
        });
        m.irs_write(irs::CR0, 1);
        let (idr5, idr6, idr7) = (
            m.irs_read(irs::IDR5),
            m.irs_read(irs::IDR6),
            m.irs_read(irs::IDR7),
        );
        let selected = |m: &mut Model, id: u64| {
            m.irs_write(irs::SPI_SELR, id);
            m.irs_read(irs::SPI_STATUSR) & u64::from(irs::SPI_STATUSR_V) != 0
        };

        let valid = [5, 31, 32, 63, 64].map(|id| selected(&mut m, id));
        m.sys(0, El::El2, Insn::Cden.enc(), IntId::spi(5).raw());
        m.sys(0, El::El2, Insn::Cden.enc(), IntId::spi(40).raw());

        assert_eq!((idr5, idr6, idr7), (96, 32, 32));
        assert_eq!(valid, [false, false, true, true, false]);
        assert_eq!(m.take_misuse(), [Misuse::NoSuchInterrupt(IntId::spi(5))]);
        assert!(m.spi(40).enabled);
    }

    #[test]
    fn irs_pe_selr_takes_only_the_pes_the_irs_serves() {
        // An IRS serving the PEs with IAFFIDs 2 and 3.
        let mut m = Model::new(Config {
            first_iaffid: 2,
            ..Config::default()
        });
        let select = |m: &mut Model, iaffid: u64| {
            m.irs_write(irs::PE_SELR, iaffid);
            m.irs_read(irs::PE_STATUSR) & u64::from(irs::PE_STATUSR_V) != 0
        };

        let foreign = select(&mut m, 0);
        m.irs_write(irs::PE_CR0, irs::PE_CR0_DPS);
        let own = select(&mut m, 3);
        m.irs_write(irs::PE_CR0, irs::PE_CR0_DPS);

        assert!(!foreign && own);
        assert_eq!(m.take_misuse(), [Misuse::NoSuchPe(0)]);
        assert!(m.pe_dps(3) && !m.pe_dps(0) && !m.pe_dps(2));
        assert_eq!(m.irs_read(irs::PE_CR0), 1);
    }

    #[test]
    fn lpi_needs_the_ist() {
        let mut m = model();
        m.irs_write(irs::CR0, 1);
        let x = IntId::lpi(3).raw();
        m.sys(0, El::El2, Insn::Cden.enc(), x);
        assert_eq!(m.take_misuse(), [Misuse::LpiOutsideIst(3)]);
        m.irs_write(irs::IST_CFGR, 4);
        m.irs_write(irs::IST_BASER, 0x8000_0000 | 1);
        m.sys(0, El::El2, Insn::Cden.enc(), x);
        assert!(m.misuse().is_empty());
        m.sys(0, El::El2, Insn::Cden.enc(), IntId::lpi(16).raw());
        assert_eq!(m.take_misuse(), [Misuse::LpiOutsideIst(16)]);
    }

    #[test]
    fn legacy_bit_is_res0_without_gcie_legacy() {
        let mut m = Model::new(Config {
            gcie_legacy: false,
            ..Config::default()
        });
        wr(&mut m, 0, Reg::IchVctlr, 0b11);
        assert_eq!(rd(&mut m, 0, El::El2, Reg::IchVctlr), 1);
        assert_eq!(m.misuse().len(), 1);
    }

    /// The vIRS's own rules, written from the register descriptions: a VM
    /// is made valid only from a VM table entry with its addresses, only
    /// inside the VM table; a vPE only inside its VM's VPE_ID_BITS and from
    /// a vPE table entry; an SPI only assigned to a valid VM; the doorbell
    /// rings once.
    #[test]
    fn virs_tables_are_checked_and_the_doorbell_is_one_shot() {
        let mut m = model();
        m.irs_write(irs::CR0, 1);
        m.irs_write(irs::IST_CFGR, 14);
        m.irs_write(irs::IST_BASER, 0x8000_0000 | 1);
        // No VM table yet.
        m.irs_write(irs::VMAP_VMR, irs::VMAP_M | 2);
        assert_eq!(m.take_misuse(), [Misuse::NoVmTable(2)]);
        m.irs_write(irs::VMT_CFGR, 2);
        m.irs_write(irs::VMT_BASER, 0x9000_0000 | 1);
        // Beyond the 2-bit table; then an entry with no addresses.
        m.irs_write(irs::VMAP_VMR, irs::VMAP_M | 4);
        assert_eq!(m.take_misuse(), [Misuse::NoVmTable(4)]);
        m.irs_write(irs::VMAP_VMR, irs::VMAP_M | 1);
        assert!(matches!(
            m.take_misuse()[..],
            [Misuse::BadTableEntry { .. }]
        ));
        // A good entry: VMD, vPE table with 1 vPE ID bit, an SPI IST of 6.
        let e = 0x9000_0000 + 32;
        m.mem_write64(e, 0xa000_0000);
        m.mem_write64(e + 8, 0xa000_1000 | (1 << irs::ID_BITS_SHIFT));
        m.mem_write64(e + 24, 0xa000_4000 | (6 << irs::ID_BITS_SHIFT));
        m.irs_write(irs::VMAP_VMR, irs::VMAP_M | 1);
        m.irs_write(irs::VMAP_VISTR, irs::VMAP_M | (1 << 32) | (3 << 29));
        assert!(m.misuse().is_empty());
        assert_eq!(m.mem_read64(e) & 1, 1, "the IRS marks the entry valid");
        // vPE 2 is beyond 1 bit; vPE 1 has no descriptor yet.
        m.irs_write(irs::VMAP_VPER, irs::VMAP_M | (1 << 32) | 2);
        m.irs_write(irs::VMAP_VPER, irs::VMAP_M | (1 << 32) | 1);
        let mis = m.take_misuse();
        assert_eq!(mis[0], Misuse::NoSuchVpe { vm: 1, vpe: 2 });
        assert!(matches!(mis[1], Misuse::BadTableEntry { .. }));
        m.mem_write64(0xa000_1000 + 8, 0xa000_2020);
        m.irs_write(irs::VMAP_VPER, irs::VMAP_M | (1 << 32) | 1);
        assert!(m.vpe_valid(1, 1));
        // An SPI goes only to a valid VM.
        m.irs_write(irs::SPI_SELR, 9);
        m.irs_write(irs::SPI_VMR, irs::SPI_VMR_VIRT | 3);
        assert_eq!(m.take_misuse(), [Misuse::NoSuchVm(3)]);
        m.irs_write(irs::SPI_VMR, irs::SPI_VMR_VIRT | 1);
        assert_eq!(m.irs_read(irs::SPI_VMR), irs::SPI_VMR_VIRT | 1);
        // Doorbell LPI 100 at PE 1; vSPI 9 enabled at vPE 1, not resident.
        let db = IntId::lpi(100).raw();
        m.sys(0, El::El2, Insn::Cdaff.enc(), db | (1 << 32));
        m.sys(0, El::El2, Insn::Cden.enc(), db);
        m.irs_write(irs::VPE_SELR, irs::VPE_SELR_S | (1 << 32) | 1);
        m.irs_write(irs::VPE_DBR, irs::VPE_DBR_DBV | 100);
        {
            let s = m.vint_mut(1, IntType::Spi, 9).unwrap();
            s.enabled = true;
            s.iaffid = 1;
        }
        wr(&mut m, 1, Reg::IccCr0, 1);
        wr(&mut m, 1, Reg::IccPcr, 0x1f);
        m.set_spi_line(9, true);
        assert_eq!(m.doorbells(), 1);
        assert!(m.irq_signalled(1));
        assert_eq!(m.irs_read(irs::VPE_DBR) & irs::VPE_DBR_DBV, 0);
        // The physical SPI itself is not a physical interrupt any more.
        assert!(!m.spi(9).pending_now());
        // Rings once: another edge of the wire does not ring again.
        m.set_spi_line(9, false);
        m.set_spi_line(9, true);
        assert_eq!(m.doorbells(), 1);
        assert!(m.misuse().is_empty(), "{:?}", m.misuse());
    }

    /// VM 1 valid with vPE 0 and an SPI IST of 6 ID bits, its vPE 0
    /// resident on PE 0 (the guest entered), which enabled its virtual
    /// SPI 1 at priority 8 targeted at itself.
    fn vm1_resident_with_vspi1() -> Model {
        let mut m = model();
        m.irs_write(irs::CR0, 1);
        m.irs_write(irs::IST_CFGR, 14);
        m.irs_write(irs::IST_BASER, 0x8000_0000 | 1);
        m.irs_write(irs::VMT_CFGR, 2);
        m.irs_write(irs::VMT_BASER, 0x9000_0000 | 1);
        let e = 0x9000_0000 + 32;
        m.mem_write64(e, 0xa000_0000);
        m.mem_write64(e + 8, 0xa000_1000 | (1 << irs::ID_BITS_SHIFT));
        m.mem_write64(e + 24, 0xa000_4000 | (6 << irs::ID_BITS_SHIFT));
        m.mem_write64(0xa000_1000, 0xa000_2000);
        m.irs_write(irs::VMAP_VMR, irs::VMAP_M | 1);
        m.irs_write(irs::VMAP_VISTR, irs::VMAP_M | (1 << 32) | (3 << 29));
        m.irs_write(irs::VMAP_VPER, irs::VMAP_M | (1 << 32));
        assert!(m.vpe_valid(1, 0));
        wr(&mut m, 0, Reg::IchHfgitr, 0x7ff);
        wr(&mut m, 0, Reg::IchVmcr, VMCR_EN | VMCR_VPMR_MASK);
        wr(&mut m, 0, Reg::IchContextr, 1 << 63 | 1);
        wr(&mut m, 0, Reg::IchVctlr, 1);
        m.enter_guest(0);
        let v = IntId::spi(1).raw();
        for (i, x) in [
            (Insn::Cdpri, v | 8 << 35),
            (Insn::Cdaff, v),
            (Insn::Cden, v),
        ] {
            assert_eq!(m.sys(0, El::El1, i.enc(), x), Access::Value(0));
        }
        assert!(m.misuse().is_empty(), "{:?}", m.misuse());
        m
    }

    /// GIC VDPEND from EL2 pends (and clears) the VM's virtual SPI as the
    /// guest sees it: its GICR CDIA on the resident vPE then takes it.
    #[test]
    fn vdpend_pends_a_vms_virtual_spi_for_its_resident_vpe() {
        let mut m = vm1_resident_with_vspi1();
        let v = IntId::spi(1).raw();
        let el2 = m.el2_irqs(0);
        assert!(!m.virq_signalled(0));
        let vdpend = Insn::Vdpend.enc();
        // Set then cleared: nothing to take.
        assert_eq!(
            m.sys(0, El::El2, vdpend, 1 << 63 | 1 << 32 | v),
            Access::Value(0)
        );
        assert!(m.virq_signalled(0));
        assert_eq!(m.sys(0, El::El2, vdpend, 1 << 32 | v), Access::Value(0));
        assert!(!m.virq_signalled(0));
        // Set: the guest acknowledges virtual SPI 1, no physical interrupt.
        m.sys(0, El::El2, vdpend, 1 << 63 | 1 << 32 | v);
        assert_eq!(m.sysl(0, El::El1, GICR_CDIA), Access::Value(1 << 32 | v));
        assert!(!m.vint(1, IntId::spi(1)).unwrap().pending_now());
        assert_eq!(m.el2_irqs(0), el2);
        assert!(m.misuse().is_empty(), "{:?}", m.misuse());
    }

    #[test]
    fn vdpend_misuse_is_recorded_and_does_nothing() {
        let mut m = vm1_resident_with_vspi1();
        let vdpend = Insn::Vdpend.enc();
        let spi1 = IntId::spi(1).raw();
        // From EL1 (the guest): UNDEFINED.
        assert_eq!(
            m.sys(0, El::El1, vdpend, 1 << 63 | 1 << 32 | spi1),
            Access::Undefined
        );
        assert_eq!(m.take_misuse(), [Misuse::El2InsnAtEl1(Insn::Vdpend)]);
        // A VM the vIRS does not hold.
        m.sys(0, El::El2, vdpend, 1 << 63 | 2 << 32 | spi1);
        assert_eq!(m.take_misuse(), [Misuse::NoSuchVm(2)]);
        // SPI 64: beyond the VM's 6-bit virtual SPI range.
        m.sys(0, El::El2, vdpend, 1 << 63 | 1 << 32 | IntId::spi(64).raw());
        assert_eq!(
            m.take_misuse(),
            [Misuse::NoSuchVirtualInterrupt {
                vm: 1,
                id: IntId::spi(64)
            }]
        );
        // A PPI is not a VDPEND type.
        let ppi = 1 << 63 | 1 << 32 | IntId::ppi(27).raw();
        m.sys(0, El::El2, vdpend, ppi);
        assert_eq!(
            m.take_misuse(),
            [Misuse::BadOperand {
                insn: Insn::Vdpend,
                value: ppi
            }]
        );
        assert!(!m.virq_signalled(0));
        assert!(!m.vint(1, IntId::spi(1)).unwrap().pending_now());
    }
}
