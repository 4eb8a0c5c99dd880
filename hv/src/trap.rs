//! Decodes an EL2 synchronous exception taken from a guest (ESR_EL2, FAR_EL2,
//! HPFAR_EL2) into a typed exit, and computes exceptions injected back into it.
//!
//! Field positions follow the Arm ARM (DDI 0487), D17.2.37 "ESR_EL2" and the
//! ISS encodings for each exception class. Nothing here touches a register:
//! the arch code reads ESR_EL2/FAR_EL2/HPFAR_EL2, calls [`decode`], and for an
//! injection writes the values [`inject`] returns.

use crate::addr::Ipa;

/// Exception classes (ESR_EL2.EC) that Pinfold handles.
pub mod ec {
    pub const WFX: u8 = 0x01;
    pub const FP_ACCESS: u8 = 0x07;
    pub const HVC64: u8 = 0x16;
    pub const SMC64: u8 = 0x17;
    pub const SYSREG: u8 = 0x18;
    pub const IABT_LOWER: u8 = 0x20;
    pub const IABT_CURRENT: u8 = 0x21;
    pub const DABT_LOWER: u8 = 0x24;
    pub const DABT_CURRENT: u8 = 0x25;
    pub const UNKNOWN: u8 = 0x00;
}

const ESR_EC_SHIFT: u32 = 26;
const ESR_IL: u64 = 1 << 25;
const ESR_ISS_MASK: u64 = (1 << 25) - 1;

// Data abort ISS (Arm ARM D17.2.37, "ISS encoding for an exception from a
// Data Abort").
const DABT_ISV: u64 = 1 << 24;
const DABT_SAS_SHIFT: u32 = 22;
const DABT_SSE: u64 = 1 << 21;
const DABT_SRT_SHIFT: u32 = 16;
const DABT_SF: u64 = 1 << 15;
const DABT_S1PTW: u64 = 1 << 7;
const DABT_WNR: u64 = 1 << 6;
const ABT_FSC_MASK: u64 = 0x3F;

/// HPFAR_EL2.FIPA, bits [43:4], holds IPA[51:12] of the faulting access.
/// Bit 63 (NS, with FEAT_RME) and the RES0 bits above FIPA are not address.
const HPFAR_FIPA_MASK: u64 = 0x0000_0FFF_FFFF_FFF0;

/// Fault status code "synchronous External abort, not on translation table
/// walk" (Arm ARM D17.2.40 ESR_EL1, DFSC/IFSC 0b010000).
pub const FSC_SYNC_EXTERNAL_ABORT: u8 = 0x10;

/// Why the guest left: one variant per exception class we act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Stage-2 data abort (EC 0x24). `access` is Some only when ISV=1, i.e.
    /// when the hardware describes the access; with ISV=0 the instruction
    /// must be decoded or the access refused, never guessed.
    DataAbort {
        ipa: Ipa,
        far: u64,
        access: Option<MmioAccess>,
        /// ESR_EL2.ISS.WnR: the access was a write (also set for cache
        /// maintenance instructions, Arm ARM D17.2.37).
        write: bool,
        /// The fault happened on the guest's own stage-1 table walk.
        s1ptw: bool,
        dfsc: u8,
    },
    /// Stage-2 instruction abort (EC 0x20).
    InstrAbort { ipa: Ipa, far: u64, ifsc: u8 },
    /// HVC from AArch64 (EC 0x16). ELR_EL2 already points past the HVC.
    Hvc { imm: u16 },
    /// SMC trapped by HCR_EL2.TSC (EC 0x17). Unlike HVC, ELR_EL2 points AT
    /// the SMC: the handler must advance it by 4 before returning.
    Smc { imm: u16 },
    /// MSR/MRS/system instruction trapped (EC 0x18).
    SysReg(SysRegAccess),
    /// WFI or WFE trapped by HCR_EL2.TWI/TWE (EC 0x01).
    Wfx { wfe: bool },
    /// FP/SIMD access trapped by CPTR_EL2 (EC 0x07), for lazy FP switching.
    FpAccess,
    /// Anything else: the raw class and syndrome, for the partition's log.
    Unknown { ec: u8, iss: u32 },
}

/// A load or store the hardware described in ESR_EL2.ISS (ISV=1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MmioAccess {
    /// Access size in bytes: 1, 2, 4 or 8 (from SAS).
    pub width: u8,
    pub write: bool,
    /// Transfer register (SRT): 0..=30 name X0..X30, 31 names XZR/WZR.
    pub reg: u8,
    /// SSE: a load sign-extends the loaded value.
    pub sign_extend: bool,
    /// SF: the register is 64 bits wide (X), else 32 (W).
    pub sixty_four: bool,
}

impl MmioAccess {
    /// The general-purpose register a load writes, or None for XZR, whose
    /// result must be discarded (index 31 is not a register file slot).
    pub const fn target_reg(&self) -> Option<u8> {
        if self.reg < 31 {
            Some(self.reg)
        } else {
            None
        }
    }
}

/// A trapped MSR/MRS (EC 0x18).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SysRegAccess {
    pub reg: SysRegId,
    /// Rt: 0..=30 X0..X30, 31 XZR.
    pub rt: u8,
    /// Direction bit: true for MRS (a read), false for MSR.
    pub read: bool,
}

/// A system register encoding: the (op0, op1, CRn, CRm, op2) tuple of
/// MSR/MRS, as in the Arm ARM's register descriptions, packed into one word
/// (op0 [17:16], op1 [14:12], CRn [11:8], CRm [7:4], op2 [2:0]) so that the
/// trap path compares a register with one instruction.
#[derive(Copy, Clone, PartialEq, Eq, Hash)]
pub struct SysRegId(u32);

impl core::fmt::Debug for SysRegId {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "S{}_{}_C{}_C{}_{}",
            self.op0(),
            self.op1(),
            self.crn(),
            self.crm(),
            self.op2()
        )
    }
}

impl SysRegId {
    pub const fn new(op0: u8, op1: u8, crn: u8, crm: u8, op2: u8) -> Self {
        SysRegId(
            (op0 as u32 & 3) << 16
                | (op1 as u32 & 7) << 12
                | (crn as u32 & 0xF) << 8
                | (crm as u32 & 0xF) << 4
                | (op2 as u32 & 7),
        )
    }

    pub const fn op0(self) -> u8 {
        (self.0 >> 16) as u8 & 3
    }
    pub const fn op1(self) -> u8 {
        (self.0 >> 12) as u8 & 7
    }
    pub const fn crn(self) -> u8 {
        (self.0 >> 8) as u8 & 0xF
    }
    pub const fn crm(self) -> u8 {
        (self.0 >> 4) as u8 & 0xF
    }
    pub const fn op2(self) -> u8 {
        self.0 as u8 & 7
    }

    pub const ICC_SGI1R_EL1: SysRegId = SysRegId::new(3, 0, 12, 11, 5);
    /// S3_0_C12_C11_6 and S3_0_C12_C11_7 (GICv3 spec 12.2.1, 12.2.23):
    /// op1 is 0 like SGI1R's (these were op1 1 and 2, so a guest's Group 0
    /// or alias SGI was an unknown register: UNDEF and a fault; found by
    /// the hostile-guest suite's fault count).
    pub const ICC_ASGI1R_EL1: SysRegId = SysRegId::new(3, 0, 12, 11, 6);
    pub const ICC_SGI0R_EL1: SysRegId = SysRegId::new(3, 0, 12, 11, 7);
    pub const ACTLR_EL1: SysRegId = SysRegId::new(3, 0, 1, 0, 1);

    /// The ID register space HCR_EL2.TID3 traps (Arm ARM D13.1.3 "Trapping
    /// of ID register accesses"): op0=3, op1=0, CRn=0, CRm=1..=7.
    pub const fn is_id_group3(&self) -> bool {
        self.op0() == 3 && self.op1() == 0 && self.crn() == 0 && self.crm() >= 1 && self.crm() <= 7
    }

    /// DC ISW / DC CSW / DC CISW, the set/way operations HCR_EL2.TSW traps:
    /// a guest cannot clean caches by set/way safely on a shared machine,
    /// so the hypervisor turns them into something meaningful.
    pub const fn is_dc_set_way(&self) -> bool {
        self.op0() == 1
            && self.op1() == 0
            && self.crn() == 7
            && (self.crm() == 6 || self.crm() == 10 || self.crm() == 14)
            && self.op2() == 2
    }
}

/// Decodes one synchronous exception from a lower EL.
///
/// `far` is FAR_EL2 and `hpfar` HPFAR_EL2, both only meaningful for aborts;
/// pass whatever the registers hold for other classes.
/// ESR_EL2.EC.
pub const fn exception_class(esr: u64) -> u8 {
    ((esr >> ESR_EC_SHIFT) & 0x3F) as u8
}

/// The IPA and access of a data abort with a valid syndrome (ISV = 1), or
/// None: what the trap path needs to route an MMIO access, decoded without
/// building an [`Exit`].
pub fn mmio_access(esr: u64, far: u64, hpfar: u64) -> Option<(Ipa, MmioAccess)> {
    let iss = esr & ESR_ISS_MASK;
    if exception_class(esr) != ec::DABT_LOWER || iss & DABT_ISV == 0 {
        return None;
    }
    Some((
        fault_ipa(far, hpfar),
        MmioAccess {
            width: 1 << ((iss >> DABT_SAS_SHIFT) & 0b11),
            write: iss & DABT_WNR != 0,
            reg: ((iss >> DABT_SRT_SHIFT) & 0x1F) as u8,
            sign_extend: iss & DABT_SSE != 0,
            sixty_four: iss & DABT_SF != 0,
        },
    ))
}

/// A syndrome for `exit` as the hardware would report it (ESR_EL2,
/// FAR_EL2, HPFAR_EL2): the inverse of [`decode`] for the exits it
/// produces, so host tests can drive the trap path from syndromes.
pub fn encode(exit: &Exit) -> (u64, u64, u64) {
    let esr = |ec: u8, iss: u64| u64::from(ec) << ESR_EC_SHIFT | ESR_IL | iss;
    let abort_addr = |ipa: Ipa, far: u64| (far & !0xFFF | ipa.0 & 0xFFF, (ipa.0 >> 12) << 4);
    match *exit {
        Exit::DataAbort {
            ipa,
            far,
            access,
            write,
            s1ptw,
            dfsc,
        } => {
            let mut iss = u64::from(dfsc) & ABT_FSC_MASK;
            if write {
                iss |= DABT_WNR;
            }
            if s1ptw {
                iss |= DABT_S1PTW;
            }
            if let Some(a) = access {
                iss |= DABT_ISV
                    | u64::from(a.width.trailing_zeros()) << DABT_SAS_SHIFT
                    | u64::from(a.reg) << DABT_SRT_SHIFT;
                if a.sign_extend {
                    iss |= DABT_SSE;
                }
                if a.sixty_four {
                    iss |= DABT_SF;
                }
            }
            let (far, hpfar) = abort_addr(ipa, far);
            (esr(ec::DABT_LOWER, iss), far, hpfar)
        }
        Exit::InstrAbort { ipa, far, ifsc } => {
            let (far, hpfar) = abort_addr(ipa, far);
            (
                esr(ec::IABT_LOWER, u64::from(ifsc) & ABT_FSC_MASK),
                far,
                hpfar,
            )
        }
        Exit::Hvc { imm } => (esr(ec::HVC64, u64::from(imm)), 0, 0),
        Exit::Smc { imm } => (esr(ec::SMC64, u64::from(imm)), 0, 0),
        Exit::SysReg(a) => {
            let r = a.reg;
            let iss = u64::from(r.op0()) << 20
                | u64::from(r.op2()) << 17
                | u64::from(r.op1()) << 14
                | u64::from(r.crn()) << 10
                | u64::from(a.rt) << 5
                | u64::from(r.crm()) << 1
                | u64::from(a.read);
            (esr(ec::SYSREG, iss), 0, 0)
        }
        Exit::Wfx { wfe } => (esr(ec::WFX, u64::from(wfe)), 0, 0),
        Exit::FpAccess => (esr(ec::FP_ACCESS, 0), 0, 0),
        Exit::Unknown { ec, iss } => (esr(ec, u64::from(iss)), 0, 0),
    }
}

pub fn decode(esr: u64, far: u64, hpfar: u64) -> Exit {
    let ec = ((esr >> ESR_EC_SHIFT) & 0x3F) as u8;
    let iss = esr & ESR_ISS_MASK;
    match ec {
        ec::DABT_LOWER => decode_data_abort(iss, far, hpfar),
        ec::IABT_LOWER => Exit::InstrAbort {
            ipa: fault_ipa(far, hpfar),
            far,
            ifsc: (iss & ABT_FSC_MASK) as u8,
        },
        ec::HVC64 => Exit::Hvc { imm: iss as u16 },
        ec::SMC64 => Exit::Smc { imm: iss as u16 },
        ec::SYSREG => Exit::SysReg(decode_sysreg(iss)),
        // ISS.TI[1:0]: bit 0 distinguishes WFE (and WFET) from WFI (WFIT).
        ec::WFX => Exit::Wfx { wfe: iss & 1 == 1 },
        ec::FP_ACCESS => Exit::FpAccess,
        _ => Exit::Unknown {
            ec,
            iss: iss as u32,
        },
    }
}

/// The faulting IPA: HPFAR_EL2 gives the page, FAR_EL2 the offset in it
/// (Arm ARM D17.2.60 HPFAR_EL2).
fn fault_ipa(far: u64, hpfar: u64) -> Ipa {
    Ipa(((hpfar & HPFAR_FIPA_MASK) << 8) | (far & 0xFFF))
}

fn decode_data_abort(iss: u64, far: u64, hpfar: u64) -> Exit {
    let write = iss & DABT_WNR != 0;
    let access = if iss & DABT_ISV != 0 {
        Some(MmioAccess {
            width: 1 << ((iss >> DABT_SAS_SHIFT) & 0b11),
            write,
            reg: ((iss >> DABT_SRT_SHIFT) & 0x1F) as u8,
            sign_extend: iss & DABT_SSE != 0,
            sixty_four: iss & DABT_SF != 0,
        })
    } else {
        None
    };
    Exit::DataAbort {
        ipa: fault_ipa(far, hpfar),
        far,
        access,
        write,
        s1ptw: iss & DABT_S1PTW != 0,
        dfsc: (iss & ABT_FSC_MASK) as u8,
    }
}

/// ISS for EC 0x18 (Arm ARM D17.2.37, "ISS encoding for an exception from
/// MSR, MRS, or System instruction execution in AArch64 state").
/// The register access of a trapped MSR/MRS (EC 0x18).
pub fn sysreg_access(esr: u64) -> SysRegAccess {
    decode_sysreg(esr & ESR_ISS_MASK)
}

fn decode_sysreg(iss: u64) -> SysRegAccess {
    let bits = |shift: u32, width: u32| ((iss >> shift) & ((1 << width) - 1)) as u8;
    SysRegAccess {
        reg: SysRegId::new(
            bits(20, 2),
            bits(14, 3),
            bits(10, 4),
            bits(1, 4),
            bits(17, 3),
        ),
        rt: bits(5, 5),
        read: iss & 1 == 1,
    }
}

/// The value a trapped load writes to its register, from the `raw` bytes the
/// device returned: truncated to the access width, then sign-extended to 32
/// or 64 bits when SSE is set. A 32-bit (W) destination has its upper half
/// cleared, as any write to a W register does.
pub fn mmio_load_value(access: &MmioAccess, raw: u64) -> u64 {
    let bits = u32::from(access.width) * 8;
    let value = truncate(raw, bits);
    let value = if access.sign_extend && bits < 64 {
        let shift = 64 - bits;
        (((value << shift) as i64) >> shift) as u64
    } else {
        value
    };
    if access.sixty_four {
        value
    } else {
        value & 0xFFFF_FFFF
    }
}

/// The bytes a trapped store writes to the device: the register's value
/// truncated to the access width. A store from XZR (reg 31) writes zero
/// whatever `reg_value` holds, since index 31 may alias SP in a register file.
pub fn mmio_store_value(access: &MmioAccess, reg_value: u64) -> u64 {
    if access.reg == 31 {
        return 0;
    }
    truncate(reg_value, u32::from(access.width) * 8)
}

fn truncate(value: u64, bits: u32) -> u64 {
    if bits >= 64 {
        value
    } else {
        value & ((1 << bits) - 1)
    }
}

/// Which exception to make the guest take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InjectKind {
    /// Synchronous external abort on a data access (e.g. MMIO nobody owns).
    DataAbort,
    /// Synchronous external abort on an instruction fetch.
    InstrAbort,
    /// Undefined instruction (e.g. a trapped register we refuse to emulate).
    Undefined,
}

/// The register values that deliver an exception to the guest's EL1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Injection {
    pub esr_el1: u64,
    /// The new guest PC: the vector entry in VBAR_EL1.
    pub elr_el2: u64,
    /// The new guest PSTATE, as SPSR_EL2 for the ERET.
    pub spsr_el2: u64,
    /// FAR_EL1 for aborts; None leaves FAR_EL1 alone (UNKNOWN for Undefined).
    pub far_el1: Option<u64>,
}

// SPSR.M[4:0] values (Arm ARM C5.2.19 SPSR_EL2).
const SPSR_M_MASK: u64 = 0x1F;
const SPSR_M_AARCH32: u64 = 0x10;
const SPSR_M_EL_MASK: u64 = 0b1100;
const SPSR_M_EL1T: u64 = 0b0_0100;
const SPSR_M_EL1H: u64 = 0b0_0101;

/// EL1h with D, A, I and F masked, as exception entry to EL1 leaves PSTATE.
const PSTATE_EL1H_DAIF_MASKED: u64 = 0x3C5;

/// Vector offsets from VBAR_EL1 (Arm ARM D1.3.1, table "Vector offsets from
/// vector table base address"), synchronous entry of each group.
const VECTOR_CURRENT_SP0: u64 = 0x000;
const VECTOR_CURRENT_SPX: u64 = 0x200;
const VECTOR_LOWER_AARCH64: u64 = 0x400;
const VECTOR_LOWER_AARCH32: u64 = 0x600;

/// VBAR_EL1 bits [10:0] are RES0: the table is 2 KiB aligned.
const VBAR_ADDR_MASK: u64 = !0x7FF;

/// Computes the state for taking `kind` to the guest's EL1, given the guest
/// PSTATE at the trap (`guest_spsr`, i.e. SPSR_EL2), its VBAR_EL1 and the
/// faulting address.
///
/// The caller also sets ELR_EL1 = old ELR_EL2 and SPSR_EL1 = old SPSR_EL2.
/// Limitation: PSTATE.PAN/SSBS/ALLINT on entry depend on SCTLR_EL1 bits we
/// are not given, so they come out clear; Linux guests do not rely on the
/// hardware setting them on a synchronous external abort.
pub fn inject(kind: InjectKind, guest_spsr: u64, guest_vbar_el1: u64, far: u64) -> Injection {
    let m = guest_spsr & SPSR_M_MASK;
    let (vector, same_el) = if m & SPSR_M_AARCH32 != 0 {
        (VECTOR_LOWER_AARCH32, false)
    } else if m == SPSR_M_EL1H {
        (VECTOR_CURRENT_SPX, true)
    } else if m == SPSR_M_EL1T {
        (VECTOR_CURRENT_SP0, true)
    } else if m & SPSR_M_EL_MASK == 0 {
        (VECTOR_LOWER_AARCH64, false)
    } else {
        // EL2/EL3 in SPSR_EL2 cannot come from a guest; treat it as EL1h so
        // the guest at least lands in its own current-EL handler.
        (VECTOR_CURRENT_SPX, true)
    };
    let (ec, iss, far_el1) = match kind {
        InjectKind::DataAbort => (
            if same_el {
                ec::DABT_CURRENT
            } else {
                ec::DABT_LOWER
            },
            u64::from(FSC_SYNC_EXTERNAL_ABORT),
            Some(far),
        ),
        InjectKind::InstrAbort => (
            if same_el {
                ec::IABT_CURRENT
            } else {
                ec::IABT_LOWER
            },
            u64::from(FSC_SYNC_EXTERNAL_ABORT),
            Some(far),
        ),
        InjectKind::Undefined => (ec::UNKNOWN, 0, None),
    };
    Injection {
        esr_el1: (u64::from(ec) << ESR_EC_SHIFT) | ESR_IL | iss,
        elr_el2: (guest_vbar_el1 & VBAR_ADDR_MASK) + vector,
        spsr_el2: PSTATE_EL1H_DAIF_MASKED,
        far_el1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_is_the_inverse_of_decode() {
        let access = |width, write, reg, sign_extend, sixty_four| MmioAccess {
            width,
            write,
            reg,
            sign_extend,
            sixty_four,
        };
        let exits = [
            Exit::DataAbort {
                ipa: Ipa(0x0800_0004),
                far: 0x0800_0004,
                access: Some(access(4, false, 3, false, false)),
                write: false,
                s1ptw: false,
                dfsc: 0x04,
            },
            Exit::DataAbort {
                ipa: Ipa(0x1_2345_6ff8),
                far: 0xffff_0000_0000_0ff8,
                access: Some(access(8, true, 30, false, true)),
                write: true,
                s1ptw: false,
                dfsc: 0x07,
            },
            Exit::DataAbort {
                ipa: Ipa(0x9000_0001),
                far: 0x9000_0001,
                access: Some(access(1, false, 0, true, false)),
                write: false,
                s1ptw: true,
                dfsc: 0x05,
            },
            Exit::DataAbort {
                ipa: Ipa(0x4000_0000),
                far: 0x4000_0000,
                access: None,
                write: true,
                s1ptw: false,
                dfsc: 0x06,
            },
            Exit::InstrAbort {
                ipa: Ipa(0x8000_1234),
                far: 0x8000_1234,
                ifsc: 0x0f,
            },
            Exit::Hvc { imm: 0 },
            Exit::Hvc { imm: 0xbeef },
            Exit::Smc { imm: 1 },
            Exit::SysReg(SysRegAccess {
                reg: SysRegId::ICC_SGI1R_EL1,
                rt: 7,
                read: false,
            }),
            Exit::SysReg(SysRegAccess {
                reg: SysRegId::new(3, 0, 0, 5, 0),
                rt: 30,
                read: true,
            }),
            Exit::Wfx { wfe: true },
            Exit::Wfx { wfe: false },
            Exit::FpAccess,
            Exit::Unknown { ec: 0x3c, iss: 0x1 },
        ];
        for exit in exits {
            let (esr, far, hpfar) = encode(&exit);
            assert_eq!(decode(esr, far, hpfar), exit, "ESR {esr:#x}");
        }
    }

    #[test]
    fn mmio_access_reads_a_data_abort_without_building_an_exit() {
        let exit = Exit::DataAbort {
            ipa: Ipa(0x0800_0004),
            far: 0x0800_0004,
            access: Some(MmioAccess {
                width: 4,
                write: false,
                reg: 3,
                sign_extend: false,
                sixty_four: false,
            }),
            write: false,
            s1ptw: false,
            dfsc: 0x04,
        };
        let (esr, far, hpfar) = encode(&exit);
        let Exit::DataAbort {
            ipa,
            access: Some(a),
            ..
        } = exit
        else {
            unreachable!()
        };

        assert_eq!(mmio_access(esr, far, hpfar), Some((ipa, a)));
        let (hvc, _, _) = encode(&Exit::Hvc { imm: 0 });
        assert_eq!(mmio_access(hvc, far, hpfar), None);
    }

    fn esr(ec: u8, iss: u64) -> u64 {
        (u64::from(ec) << 26) | ESR_IL | iss
    }

    /// ISS of a data abort with ISV=1.
    fn dabt_iss(sas: u64, sse: bool, srt: u64, sf: bool, wnr: bool, dfsc: u64) -> u64 {
        DABT_ISV
            | (sas << 22)
            | (u64::from(sse) << 21)
            | (srt << 16)
            | (u64::from(sf) << 15)
            | (u64::from(wnr) << 6)
            | dfsc
    }

    #[test]
    fn data_abort_ipa_combines_hpfar_page_with_far_offset() {
        // HPFAR_EL2.FIPA holds IPA[51:12] at bits [43:4]; FAR is the guest VA.
        let hpfar = 0x0901_0000 >> 8;
        let far = 0xFFFF_8000_1234_5ABC;

        let exit = decode(
            esr(0x24, dabt_iss(2, false, 3, false, false, 0x07)),
            far,
            hpfar,
        );

        let Exit::DataAbort { ipa, far: f, .. } = exit else {
            panic!("{exit:?}")
        };
        assert_eq!(ipa, Ipa(0x0901_0ABC));
        assert_eq!(f, far);
    }

    #[test]
    fn data_abort_ipa_ignores_hpfar_ns_bit() {
        let hpfar = (1u64 << 63) | (0x4000_0000 >> 8);

        let exit = decode(esr(0x24, 0x07), 0x10, hpfar);

        let Exit::DataAbort { ipa, .. } = exit else {
            panic!("{exit:?}")
        };
        assert_eq!(ipa, Ipa(0x4000_0010));
    }

    #[test]
    fn data_abort_with_isv_describes_a_32_bit_store_of_w5() {
        let iss = dabt_iss(2, false, 5, false, true, 0x06);

        let exit = decode(esr(0x24, iss), 0, 0);

        let Exit::DataAbort {
            access,
            write,
            s1ptw,
            dfsc,
            ..
        } = exit
        else {
            panic!("{exit:?}")
        };
        assert_eq!(
            access,
            Some(MmioAccess {
                width: 4,
                write: true,
                reg: 5,
                sign_extend: false,
                sixty_four: false
            })
        );
        assert!(write);
        assert!(!s1ptw);
        assert_eq!(dfsc, 0x06);
    }

    #[test]
    fn data_abort_with_isv_describes_a_sign_extending_halfword_load_into_x30() {
        let iss = dabt_iss(1, true, 30, true, false, 0x07);

        let exit = decode(esr(0x24, iss), 0, 0);

        let Exit::DataAbort { access, write, .. } = exit else {
            panic!("{exit:?}")
        };
        assert_eq!(
            access,
            Some(MmioAccess {
                width: 2,
                write: false,
                reg: 30,
                sign_extend: true,
                sixty_four: true
            })
        );
        assert!(!write);
    }

    #[test]
    fn data_abort_without_isv_has_no_access_but_keeps_direction() {
        // ISV=0 (e.g. LDP or a post-indexed store): SAS/SRT bits are garbage.
        let iss = (0b11 << 22) | (7 << 16) | DABT_WNR | DABT_S1PTW | 0x0B;

        let exit = decode(esr(0x24, iss), 0, 0);

        let Exit::DataAbort {
            access,
            write,
            s1ptw,
            dfsc,
            ..
        } = exit
        else {
            panic!("{exit:?}")
        };
        assert_eq!(access, None);
        assert!(write);
        assert!(s1ptw);
        assert_eq!(dfsc, 0x0B);
    }

    #[test]
    fn instruction_abort_reports_ipa_and_ifsc() {
        let exit = decode(esr(0x20, 0x0F), 0x4008_0004, 0x4008_0000 >> 8);

        assert_eq!(
            exit,
            Exit::InstrAbort {
                ipa: Ipa(0x4008_0004),
                far: 0x4008_0004,
                ifsc: 0x0F
            }
        );
    }

    #[test]
    fn hvc_and_smc_carry_their_immediates() {
        assert_eq!(decode(esr(0x16, 0xBEEF), 0, 0), Exit::Hvc { imm: 0xBEEF });
        assert_eq!(decode(esr(0x17, 0x0001), 0, 0), Exit::Smc { imm: 1 });
    }

    #[test]
    fn msr_to_icc_sgi1r_decodes_register_and_rt() {
        // MSR ICC_SGI1R_EL1, X2: Op0=3 Op2=5 Op1=0 CRn=12 Rt=2 CRm=11 Dir=0.
        let iss = (3 << 20) | (5 << 17) | (12 << 10) | (2 << 5) | (11 << 1);

        let exit = decode(esr(0x18, iss), 0, 0);

        assert_eq!(
            exit,
            Exit::SysReg(SysRegAccess {
                reg: SysRegId::ICC_SGI1R_EL1,
                rt: 2,
                read: false
            })
        );
    }

    #[test]
    fn mrs_of_id_aa64mmfr0_is_a_read_in_the_tid3_group() {
        // MRS X7, ID_AA64MMFR0_EL1 (3,0,0,7,0).
        let iss = (3 << 20) | (7 << 5) | (7 << 1) | 1;

        let Exit::SysReg(access) = decode(esr(0x18, iss), 0, 0) else {
            panic!()
        };

        assert_eq!(access.reg, SysRegId::new(3, 0, 0, 7, 0));
        assert_eq!(access.rt, 7);
        assert!(access.read);
        assert!(access.reg.is_id_group3());
    }

    #[test]
    fn op1_is_decoded_from_its_own_field() {
        // CSSELR_EL1 is S3_2_C0_C0_0: a swapped field would read as another
        // register.
        let iss = (3 << 20) | (2 << 14) | 1;

        let Exit::SysReg(access) = decode(esr(0x18, iss), 0, 0) else {
            panic!()
        };

        assert_eq!(access.reg, SysRegId::new(3, 2, 0, 0, 0));
    }

    #[test]
    fn the_sgi_registers_are_the_gic_specs_encodings() {
        // GICv3 spec 12.2: S3_0_C12_C11_5, _6 and _7, ISS Op0 [21:20],
        // Op2 [19:17], Op1 [16:14], CRn [13:10], CRm [4:1].
        let sgi = |op2: u64| (3 << 20) | (op2 << 17) | (12 << 10) | (11 << 1);
        for (op2, reg) in [
            (5, SysRegId::ICC_SGI1R_EL1),
            (6, SysRegId::ICC_ASGI1R_EL1),
            (7, SysRegId::ICC_SGI0R_EL1),
        ] {
            let Exit::SysReg(access) = decode(esr(0x18, sgi(op2)), 0, 0) else {
                panic!()
            };
            assert_eq!(access.reg, reg, "op2 {op2}");
        }
    }

    #[test]
    fn id_group3_excludes_midr_and_crm_8() {
        assert!(!SysRegId::new(3, 0, 0, 0, 0).is_id_group3()); // MIDR_EL1
        assert!(!SysRegId::new(3, 0, 0, 8, 0).is_id_group3());
        assert!(!SysRegId::new(3, 1, 0, 4, 0).is_id_group3());
        assert!(SysRegId::new(3, 0, 0, 1, 0).is_id_group3()); // ID_PFR0_EL1
    }

    #[test]
    fn dc_set_way_matches_isw_csw_cisw_only() {
        assert!(SysRegId::new(1, 0, 7, 6, 2).is_dc_set_way()); // DC ISW
        assert!(SysRegId::new(1, 0, 7, 10, 2).is_dc_set_way()); // DC CSW
        assert!(SysRegId::new(1, 0, 7, 14, 2).is_dc_set_way()); // DC CISW
        assert!(!SysRegId::new(1, 0, 7, 6, 1).is_dc_set_way()); // DC IVAC
        assert!(!SysRegId::new(1, 3, 7, 14, 1).is_dc_set_way()); // DC CIVAC
    }

    #[test]
    fn wfi_and_wfe_are_told_apart() {
        assert_eq!(decode(esr(0x01, 0), 0, 0), Exit::Wfx { wfe: false });
        assert_eq!(decode(esr(0x01, 1), 0, 0), Exit::Wfx { wfe: true });
    }

    #[test]
    fn fp_access_is_recognised() {
        assert_eq!(decode(esr(0x07, 0x1E0_0000), 0, 0), Exit::FpAccess);
    }

    #[test]
    fn unhandled_class_keeps_ec_and_iss() {
        let exit = decode(esr(0x3C, 0x12345), 0, 0); // BRK

        assert_eq!(
            exit,
            Exit::Unknown {
                ec: 0x3C,
                iss: 0x12345
            }
        );
    }

    #[test]
    fn data_abort_from_current_el_is_not_a_guest_mmio_exit() {
        let exit = decode(esr(0x25, DABT_ISV), 0, 0);

        assert!(matches!(exit, Exit::Unknown { ec: 0x25, .. }));
    }

    fn load(width: u8, sign_extend: bool, sixty_four: bool) -> MmioAccess {
        MmioAccess {
            width,
            write: false,
            reg: 0,
            sign_extend,
            sixty_four,
        }
    }

    #[test]
    fn zero_extending_byte_load_drops_bytes_above_the_width() {
        assert_eq!(
            mmio_load_value(&load(1, false, false), 0xDEAD_BEEF_0000_1280),
            0x80
        );
    }

    #[test]
    fn ldrsb_into_w_register_sign_extends_to_32_bits_only() {
        assert_eq!(mmio_load_value(&load(1, true, false), 0x80), 0xFFFF_FF80);
    }

    #[test]
    fn ldrsh_into_x_register_sign_extends_to_64_bits() {
        assert_eq!(
            mmio_load_value(&load(2, true, true), 0x8001),
            0xFFFF_FFFF_FFFF_8001
        );
    }

    #[test]
    fn ldrsw_of_positive_value_stays_positive() {
        assert_eq!(
            mmio_load_value(&load(4, true, true), 0xF_7FFF_FFFF),
            0x7FFF_FFFF
        );
    }

    #[test]
    fn doubleword_load_is_unchanged() {
        assert_eq!(
            mmio_load_value(&load(8, false, true), u64::MAX - 1),
            u64::MAX - 1
        );
    }

    #[test]
    fn halfword_store_truncates_register_value() {
        let access = MmioAccess {
            width: 2,
            write: true,
            reg: 4,
            sign_extend: false,
            sixty_four: false,
        };

        assert_eq!(mmio_store_value(&access, 0x1234_5678), 0x5678);
    }

    #[test]
    fn store_from_xzr_writes_zero() {
        let access = MmioAccess {
            width: 8,
            write: true,
            reg: 31,
            sign_extend: false,
            sixty_four: true,
        };

        assert_eq!(mmio_store_value(&access, 0xFFFF_0000_0000_1000), 0);
        assert_eq!(access.target_reg(), None);
    }

    const VBAR: u64 = 0xFFFF_8000_1001_0800;
    const SPSR_EL1H: u64 = 0x3C5;
    const SPSR_EL1T: u64 = 0x3C4;
    const SPSR_EL0T: u64 = 0x000;

    #[test]
    fn data_abort_from_el1h_goes_to_current_spx_vector_with_ec_0x25() {
        let inj = inject(
            InjectKind::DataAbort,
            SPSR_EL1H,
            VBAR,
            0xFFFF_0000_0900_1000,
        );

        assert_eq!(inj.elr_el2, VBAR + 0x200);
        assert_eq!(inj.esr_el1, (0x25 << 26) | (1 << 25) | 0x10);
        assert_eq!(inj.far_el1, Some(0xFFFF_0000_0900_1000));
        assert_eq!(inj.spsr_el2, 0x3C5);
    }

    #[test]
    fn data_abort_from_el1t_goes_to_current_sp0_vector() {
        let inj = inject(InjectKind::DataAbort, SPSR_EL1T, VBAR, 0);

        assert_eq!(inj.elr_el2, VBAR);
        assert_eq!(inj.esr_el1 >> 26, 0x25);
    }

    #[test]
    fn data_abort_from_el0_goes_to_lower_el_vector_with_ec_0x24() {
        let inj = inject(InjectKind::DataAbort, SPSR_EL0T, VBAR, 0x1000);

        assert_eq!(inj.elr_el2, VBAR + 0x400);
        assert_eq!(inj.esr_el1, (0x24 << 26) | (1 << 25) | 0x10);
        assert_eq!(inj.spsr_el2, 0x3C5);
    }

    #[test]
    fn instruction_abort_uses_ec_0x21_from_el1_and_0x20_from_el0() {
        let from_el1 = inject(InjectKind::InstrAbort, SPSR_EL1H, VBAR, 0x4000);
        let from_el0 = inject(InjectKind::InstrAbort, SPSR_EL0T, VBAR, 0x4000);

        assert_eq!(from_el1.esr_el1, (0x21 << 26) | (1 << 25) | 0x10);
        assert_eq!(from_el0.esr_el1, (0x20 << 26) | (1 << 25) | 0x10);
        assert_eq!(from_el0.far_el1, Some(0x4000));
    }

    #[test]
    fn undefined_has_ec_zero_with_il_and_no_far() {
        let inj = inject(InjectKind::Undefined, SPSR_EL1H, VBAR, 0x1234);

        assert_eq!(inj.esr_el1, 1 << 25);
        assert_eq!(inj.far_el1, None);
        assert_eq!(inj.elr_el2, VBAR + 0x200);
    }

    #[test]
    fn injection_ignores_res0_low_bits_of_vbar() {
        let inj = inject(InjectKind::Undefined, SPSR_EL0T, 0x4000_0000 | 0x7FF, 0);

        assert_eq!(inj.elr_el2, 0x4000_0400);
    }

    #[test]
    fn injection_masks_daif_even_if_guest_had_them_clear() {
        let inj = inject(InjectKind::DataAbort, 0x005, VBAR, 0);

        assert_eq!(inj.spsr_el2 & 0x3C0, 0x3C0);
        assert_eq!(inj.spsr_el2 & 0x1F, 0b00101);
    }
}
