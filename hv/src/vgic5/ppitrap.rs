//! Hiding PPIs from a `gicv5` guest by trapping its ICC_PPI_* accesses
//! (the way KVM's vGICv5 PPI support does it), decided here and applied
//! by the platform.
//!
//! GICv5's own hiding register, ICH_PPI_HVIR<n>_EL2, has no confirmed
//! encoding (docs/GICV5.md, "ICH_PPI_HVIR"), so the hardware accessors
//! never write it. Instead, when a vCPU has an implemented PPI its plan
//! does not make visible ([`traps_ppis`]), its load clears the ICC_PPI_*
//! class bits of ICH_HFGRTR_EL2/ICH_HFGWTR_EL2 (the driver's
//! `hfg_ppi_traps`), so the guest's reads and writes of ICC_PPI_ENABLERn,
//! S/CPENDRn, S/CACTIVERn and PRIORITYRn trap to EL2 (EC 0x18). The core's
//! system register path (`exit::sysreg`, `gicv5` partitions only) gives
//! the access to [`emulate`], which names the ICH_PPI_*_EL2 register that
//! holds the vCPU's virtual state of those PPIs ([`IchPpiReg`]) and what
//! to do with it ([`PpiEmulation`]): a read returns the state with hidden
//! PPIs' bits (PRIORITYRn: their byte lanes) zero, a write changes only
//! visible PPIs (hidden ones keep their state: WI), the set/clear
//! registers setting or clearing only visible bits.
//!
//! ICC_PPI_HMRn_EL1 (read-only handling mode) is left untrapped: its bits
//! are fixed by the implementation and no EL2 register holds a virtual
//! copy to emulate it from, so a guest can still read a hidden PPI's
//! handling mode (and nothing else of it). Any other register is not
//! handled here ([`emulate`] returns None: the undefined path).
//!
//! No hardware access here; host-tested. The register effects, with the
//! trap bits, are tested in `pinfold_drivers::gicv5` against the
//! `pinfold-gicv5model` model.

use super::PpiSet;
use crate::trap::SysRegId;

/// A guest's ICC_PPI_* register (IHI 0101; encodings as Linux's
/// arch/arm64/tools/sysreg and the driver's `reg` module:
/// ICC_PPI_ENABLER<n>_EL1 S3_0_C12_C10_{6,7}, ICC_PPI_CACTIVER<n>
/// S3_0_C12_C13_{0,1}, ICC_PPI_SACTIVER<n> _{2,3}, ICC_PPI_CPENDR<n>
/// _{4,5}, ICC_PPI_SPENDR<n> _{6,7}, ICC_PPI_PRIORITYR<n> S3_0_C12_C14_n
/// for n < 8 and S3_0_C12_C15_{n-8}). `w`: the word (PPIs 64 w..64 w +
/// 63); PRIORITYR's `n`: PPIs 8 n..8 n + 7.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IccPpiReg {
    Enabler(u8),
    Cactiver(u8),
    Sactiver(u8),
    Cpendr(u8),
    Spendr(u8),
    Priorityr(u8),
}

impl IccPpiReg {
    /// The ICC_PPI_* register `reg` names, if any.
    pub const fn decode(reg: SysRegId) -> Option<IccPpiReg> {
        if reg.op0() != 3 || reg.op1() != 0 || reg.crn() != 12 {
            return None;
        }
        let op2 = reg.op2();
        Some(match reg.crm() {
            10 if op2 >= 6 => IccPpiReg::Enabler(op2 - 6),
            13 => match op2 {
                0 | 1 => IccPpiReg::Cactiver(op2),
                2 | 3 => IccPpiReg::Sactiver(op2 - 2),
                4 | 5 => IccPpiReg::Cpendr(op2 - 4),
                _ => IccPpiReg::Spendr(op2 - 6),
            },
            14 => IccPpiReg::Priorityr(op2),
            15 => IccPpiReg::Priorityr(8 + op2),
            _ => return None,
        })
    }
}

/// The EL2 register holding a vCPU's virtual state of some PPIs
/// (ICH_PPI_ENABLER<w>_EL2, ICH_PPI_PENDR<w>_EL2, ICH_PPI_ACTIVER<w>_EL2,
/// ICH_PPI_PRIORITYR<n>_EL2); the driver knows the encodings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IchPpiReg {
    Enabler(u8),
    Pendr(u8),
    Activer(u8),
    Priorityr(u8),
}

/// What EL2 does for one trapped ICC_PPI_* access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PpiEmulation {
    /// The guest reads `state & mask` (hidden PPIs' bits zero).
    Read { state: IchPpiReg, mask: u64 },
    /// `state` becomes `(old & !clear) | set`; `set` and `clear` hold
    /// only visible PPIs' bits, so a hidden PPI keeps its state.
    Write {
        state: IchPpiReg,
        set: u64,
        clear: u64,
    },
}

impl PpiEmulation {
    /// The new state of a [`PpiEmulation::Write`] over `old` (a read
    /// leaves it as it is).
    pub const fn apply(self, old: u64) -> u64 {
        match self {
            PpiEmulation::Read { .. } => old,
            PpiEmulation::Write { set, clear, .. } => (old & !clear) | set,
        }
    }

    /// The register the access reads or changes.
    pub const fn state(self) -> IchPpiReg {
        match self {
            PpiEmulation::Read { state, .. } | PpiEmulation::Write { state, .. } => state,
        }
    }
}

/// Whether a vCPU whose plan makes `visible` visible, on a CPU that
/// implements `implemented`, has anything to hide: only then does its load
/// trap the ICC_PPI_* classes (a vCPU with nothing hidden pays nothing).
pub const fn traps_ppis(visible: PpiSet, implemented: PpiSet) -> bool {
    let hidden = implemented.and_not(visible);
    hidden.0[0] | hidden.0[1] != 0
}

/// The PRIORITYRn mask of PPIs 8 n..8 n + 7: a visible PPI's priority
/// field ([4:0] of its byte lane; [7:5] are RES0) kept, a hidden one's
/// lane zero.
const fn priority_mask(visible: PpiSet, n: u8) -> u64 {
    let mut m = 0;
    let mut i = 0;
    while i < 8 {
        if visible.contains(n as u32 * 8 + i) {
            m |= 0x1f << (i * 8);
        }
        i += 1;
    }
    m
}

/// The emulation of a trapped guest access to `reg` (`write`: Some(value)
/// for an MSR, None for an MRS) on a vCPU that may see `visible`; None if
/// `reg` is not an ICC_PPI_* register this module handles.
pub const fn emulate(reg: SysRegId, write: Option<u64>, visible: PpiSet) -> Option<PpiEmulation> {
    let Some(icc) = IccPpiReg::decode(reg) else {
        return None;
    };
    let (state, mask) = match icc {
        IccPpiReg::Enabler(w) => (IchPpiReg::Enabler(w), visible.0[w as usize]),
        IccPpiReg::Cpendr(w) | IccPpiReg::Spendr(w) => (IchPpiReg::Pendr(w), visible.0[w as usize]),
        IccPpiReg::Cactiver(w) | IccPpiReg::Sactiver(w) => {
            (IchPpiReg::Activer(w), visible.0[w as usize])
        }
        IccPpiReg::Priorityr(n) => (IchPpiReg::Priorityr(n), priority_mask(visible, n)),
    };
    let Some(value) = write else {
        return Some(PpiEmulation::Read { state, mask });
    };
    let v = value & mask;
    let (set, clear) = match icc {
        // Plain registers: every visible bit (lane) takes the value's.
        IccPpiReg::Enabler(_) | IccPpiReg::Priorityr(_) => (v, mask & !v),
        IccPpiReg::Spendr(_) | IccPpiReg::Sactiver(_) => (v, 0),
        IccPpiReg::Cpendr(_) | IccPpiReg::Cactiver(_) => (0, v),
    };
    Some(PpiEmulation::Write { state, set, clear })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vgic5::{PpiPlan, PPI_CNTHP, PPI_CNTP, PPI_CNTV, PPI_PMU};

    const ENABLER0: SysRegId = SysRegId::new(3, 0, 12, 10, 6);
    const ENABLER1: SysRegId = SysRegId::new(3, 0, 12, 10, 7);
    const CPENDR0: SysRegId = SysRegId::new(3, 0, 12, 13, 4);
    const SPENDR0: SysRegId = SysRegId::new(3, 0, 12, 13, 6);
    const CACTIVER0: SysRegId = SysRegId::new(3, 0, 12, 13, 0);
    const SACTIVER1: SysRegId = SysRegId::new(3, 0, 12, 13, 3);
    /// PPIs 24..31 (CNTHP 26, CNTV 27, CNTP 30).
    const PRIORITYR3: SysRegId = SysRegId::new(3, 0, 12, 14, 3);
    const PRIORITYR15: SysRegId = SysRegId::new(3, 0, 12, 15, 7);

    fn visible() -> PpiSet {
        PpiPlan::for_vcpu(true, false).visible
    }

    #[test]
    fn every_icc_ppi_register_decodes_and_nothing_else() {
        assert_eq!(IccPpiReg::decode(ENABLER0), Some(IccPpiReg::Enabler(0)));
        assert_eq!(IccPpiReg::decode(ENABLER1), Some(IccPpiReg::Enabler(1)));
        for op2 in 0..8 {
            let r = IccPpiReg::decode(SysRegId::new(3, 0, 12, 13, op2)).unwrap();
            let w = op2 % 2;
            let want = [
                IccPpiReg::Cactiver(w),
                IccPpiReg::Sactiver(w),
                IccPpiReg::Cpendr(w),
                IccPpiReg::Spendr(w),
            ][op2 as usize / 2];
            assert_eq!(r, want);
            assert_eq!(
                IccPpiReg::decode(SysRegId::new(3, 0, 12, 14, op2)),
                Some(IccPpiReg::Priorityr(op2))
            );
            assert_eq!(
                IccPpiReg::decode(SysRegId::new(3, 0, 12, 15, op2)),
                Some(IccPpiReg::Priorityr(8 + op2))
            );
        }
        // ICC_IDR0 (C10_2), ICC_PPI_HMR0 (C10_0), ICC_SGI1R (GICv3,
        // C11_5), an EL2 register (op1 4) and ICC_CR0 (op1 1) are not.
        for r in [
            SysRegId::new(3, 0, 12, 10, 2),
            SysRegId::new(3, 0, 12, 10, 0),
            SysRegId::ICC_SGI1R_EL1,
            SysRegId::new(3, 4, 12, 10, 6),
            SysRegId::new(3, 1, 12, 0, 1),
        ] {
            assert_eq!(IccPpiReg::decode(r), None, "{r:?}");
            assert_eq!(emulate(r, None, visible()), None);
        }
    }

    #[test]
    fn a_read_of_enabler_shows_a_hidden_enabled_ppi_as_zero() {
        let e = emulate(ENABLER0, None, visible()).unwrap();
        assert_eq!(e.state(), IchPpiReg::Enabler(0));
        let PpiEmulation::Read { mask, .. } = e else {
            panic!("{e:?}")
        };
        let state = 1 << PPI_CNTHP | 1 << PPI_CNTV;
        assert_eq!(state & mask, 1 << PPI_CNTV);
        // Word 1 holds no visible PPI at all.
        let e = emulate(ENABLER1, None, visible()).unwrap();
        assert_eq!(
            e,
            PpiEmulation::Read {
                state: IchPpiReg::Enabler(1),
                mask: 0
            }
        );
    }

    #[test]
    fn a_write_enabling_a_hidden_ppi_leaves_it_and_a_visible_one_works() {
        let e = emulate(ENABLER0, Some(1 << PPI_CNTHP | 1 << PPI_CNTP), visible()).unwrap();
        assert_eq!(e.state(), IchPpiReg::Enabler(0));
        assert_eq!(e.apply(0), 1 << PPI_CNTP);
        // Disabling everything leaves a hidden PPI the hypervisor enabled.
        let e = emulate(ENABLER0, Some(0), visible()).unwrap();
        assert_eq!(e.apply(1 << PPI_CNTHP | 1 << PPI_CNTV), 1 << PPI_CNTHP);
    }

    #[test]
    fn set_and_clear_registers_touch_only_visible_bits() {
        let all = u64::MAX;
        let e = emulate(SPENDR0, Some(all), visible()).unwrap();
        assert_eq!(e.state(), IchPpiReg::Pendr(0));
        assert_eq!(e.apply(0), 1 << PPI_CNTV | 1 << PPI_CNTP);
        let e = emulate(CPENDR0, Some(all), visible()).unwrap();
        assert_eq!(e.state(), IchPpiReg::Pendr(0));
        assert_eq!(e.apply(all), all & !(1 << PPI_CNTV | 1 << PPI_CNTP));
        // A set register's zero bits clear nothing.
        let e = emulate(SPENDR0, Some(0), visible()).unwrap();
        assert_eq!(e.apply(1 << PPI_CNTV), 1 << PPI_CNTV);
        let e = emulate(CACTIVER0, Some(1 << PPI_CNTHP), visible()).unwrap();
        assert_eq!(e.state(), IchPpiReg::Activer(0));
        assert_eq!(e.apply(1 << PPI_CNTHP), 1 << PPI_CNTHP);
        let e = emulate(SACTIVER1, Some(all), visible()).unwrap();
        assert_eq!(e.state(), IchPpiReg::Activer(1));
        assert_eq!(e.apply(0), 0);
    }

    #[test]
    fn priority_byte_lanes_of_hidden_ppis_raz_and_wi() {
        let lane = |ppi: u32| 8 * (ppi % 8);
        let e = emulate(PRIORITYR3, None, visible()).unwrap();
        let PpiEmulation::Read { state, mask } = e else {
            panic!("{e:?}")
        };
        assert_eq!(state, IchPpiReg::Priorityr(3));
        assert_eq!(mask, 0x1f << lane(PPI_CNTV) | 0x1f << lane(PPI_CNTP));
        let old = 0x1010_1010_1010_1010;
        let e = emulate(PRIORITYR3, Some(0x0303_0303_0303_0303), visible()).unwrap();
        let new = e.apply(old);
        assert_eq!(new >> lane(PPI_CNTV) & 0xff, 3);
        assert_eq!(new >> lane(PPI_CNTP) & 0xff, 3);
        assert_eq!(new >> lane(PPI_CNTHP) & 0xff, 0x10);
        let e = emulate(PRIORITYR15, Some(u64::MAX), visible()).unwrap();
        assert_eq!(e.state(), IchPpiReg::Priorityr(15));
        assert_eq!(e.apply(0), 0);
    }

    #[test]
    fn only_a_vcpu_with_a_hidden_implemented_ppi_traps() {
        let v = PpiPlan::for_vcpu(true, true).visible;
        assert!(!traps_ppis(v, PpiSet::of(&[PPI_CNTV, PPI_CNTP, PPI_PMU])));
        assert!(!traps_ppis(v, PpiSet::of(&[PPI_CNTV])));
        assert!(!traps_ppis(v, PpiSet::EMPTY));
        assert!(traps_ppis(v, PpiSet::of(&[PPI_CNTV, PPI_CNTHP])));
        assert!(traps_ppis(visible(), PpiSet::of(&[PPI_PMU])));
        assert!(traps_ppis(v, PpiSet::of(&[100])));
    }
}
