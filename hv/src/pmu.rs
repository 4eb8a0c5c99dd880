//! The PMU policy: what MDCR_EL2 a vCPU is loaded with, which PMU version its
//! ID registers show, and what a trapped PMU register access does.
//!
//! A vCPU is pinned to its CPU and owns it, so it owns that CPU's PMU: the
//! counters are the guest's, they are not context switched, and the
//! platform reads and writes the real registers. What the core decides is
//! only how EL2 time is kept out of the guest's counts and what a partition
//! whose plan says `pmu = false` sees.
//!
//! **EL2 is hidden from the guest's counters.** A partition's counters must
//! count its own execution, not the hypervisor's: EL2 time on its CPU (exits,
//! other partitions' mailbox posts and interrupts handled there) would both
//! inflate its profiles and give it a clock on the hypervisor's work. By
//! PMUVer (ID_AA64DFR0_EL1 bits 11:8, Arm ARM D19.2.54):
//!
//! - PMUv3p5 and later: MDCR_EL2.HPMD stops the event counters and
//!   MDCR_EL2.HCCD the cycle counter at EL2. Nothing traps.
//! - PMUv3p1 to PMUv3p4: HPMD stops the event counters at EL2, but the
//!   cycle counter obeys it only when PMCR_EL0.DP is 1 (D11.5.3, "prohibited
//!   regions"). MDCR_EL2.TPMCR traps PMCR_EL0 (rare: perf touches it when a
//!   session starts and stops) and [`on_trap`] forces DP on guest writes.
//!   Deviation: the guest reads DP back as 1 whatever it wrote.
//! - PMUv3 without p1 (PMUVer 1: Cortex-A53/A57/A72, and QEMU's cortex-a72):
//!   there is no HPMD. **Pinfold traps and filters**: MDCR_EL2.TPM traps
//!   every PMU register access, and writes to PMEVTYPER<n>_EL0,
//!   PMXEVTYPER_EL0 and PMCCFILTR_EL0 get NSH (bit 27, "count in EL2")
//!   cleared, so no counter counts EL2. It costs one trap per PMU register
//!   access, which perf makes when it programs, starts, stops and reads
//!   counters and in its overflow handler, not on paths a guest runs
//!   without perf; accepting EL2 counting instead would cost nothing but
//!   break the isolation promise above, and the trap cost is paid only by
//!   partitions that profile. The guest reads NSH back as 0, as on a CPU
//!   without EL2 (where NSH is RES0).
//! - An IMPLEMENTATION DEFINED PMU (PMUVer 0b1111) or none: hidden.
//!
//! **A hidden PMU** (`pmu = false`, or no usable PMU): ID_AA64DFR0_EL1 shows
//! PMUVer 0, MDCR_EL2.TPM and TPMCR trap every PMU register, and every
//! trapped access is answered with UNDEF, as on a CPU without a PMU.
//!
//! Shown, the version is capped at PMUv3p5, the newest whose EL2 controls
//! this module uses; later versions' EL1 features would work on an owned
//! PMU but have not been reviewed. HPMN is PMCR_EL0.N (all counters are the
//! guest's; HPMN = 0 is CONSTRAINED UNPREDICTABLE without FEAT_HPMN0, so it
//! stays N even when hidden) and HPME is 0 (EL2 has no counters of its own).
//!
//! The PMU overflow interrupt, PPI 23 (`PPI_PMU`), is the CPU's own PPI and
//! is forwarded HW-linked like the timer PPIs (the platform's job). Because
//! the PMU is not context switched, its state survives a partition reboot:
//! the platform applies [`reset_writes`] before a vCPU (re)starts.
//!
//! The platform applies what this module returns: [`PmuAction::Read`] and
//! [`PmuAction::Write`] name the real register to read into Xt or write,
//! [`PmuAction::Undef`] asks for an undefined-instruction exception.

use crate::trap::SysRegId;

/// The plan's choice for a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PmuPolicy {
    /// The vCPU owns its CPU's PMU (the default).
    Owned,
    /// `pmu = false`: the guest sees no PMU.
    Hidden,
}

/// PMUVer values (ID_AA64DFR0_EL1[11:8]).
pub const PMUVER_NONE: u8 = 0b0000;
pub const PMUVER_V3: u8 = 0b0001;
pub const PMUVER_V3P1: u8 = 0b0100;
pub const PMUVER_V3P5: u8 = 0b0110;
pub const PMUVER_IMP_DEF: u8 = 0b1111;
/// The newest version a guest is shown.
pub const PMUVER_MAX_SHOWN: u8 = PMUVER_V3P5;

const DFR0_PMUVER_SHIFT: u32 = 8;

// MDCR_EL2 fields (Arm ARM D19.2.79).
pub const MDCR_EL2_HPMN_MASK: u64 = 0x1f;
pub const MDCR_EL2_TPMCR: u64 = 1 << 5;
pub const MDCR_EL2_TPM: u64 = 1 << 6;
pub const MDCR_EL2_HPME: u64 = 1 << 7;
pub const MDCR_EL2_HPMD: u64 = 1 << 17;
pub const MDCR_EL2_HCCD: u64 = 1 << 23;

// PMCR_EL0 (D19.5.7): the fields a PMUv3 guest may write. N, IDCODE and IMP
// are read-only; X (bit 4, export to an external event bus) is kept clear:
// the bus is outside the partition.
pub const PMCR_E: u64 = 1 << 0;
pub const PMCR_P: u64 = 1 << 1;
pub const PMCR_C: u64 = 1 << 2;
pub const PMCR_D: u64 = 1 << 3;
pub const PMCR_DP: u64 = 1 << 5;
pub const PMCR_LC: u64 = 1 << 6;
const PMCR_WRITABLE: u64 = PMCR_E | PMCR_P | PMCR_C | PMCR_D | PMCR_DP | PMCR_LC;
/// PMCR_EL0.N, the number of event counters.
pub const PMCR_N_SHIFT: u32 = 11;
pub const PMCR_N_MASK: u64 = 0x1f;

/// PMEVTYPER<n>_EL0 / PMCCFILTR_EL0.NSH: count in (non-secure) EL2.
pub const PMEVTYPER_NSH: u64 = 1 << 27;
/// The cycle counter's bit in PMCNTENSET/CLR, PMINTENSET/CLR, PMOVSSET/CLR.
pub const CYCLE_COUNTER_BIT: u64 = 1 << 31;

/// A PMU register an EL1/EL0 access to which MDCR_EL2.TPM traps (Arm ARM
/// D13.3.13), named as in the Arm ARM.
#[allow(non_camel_case_types)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PmuReg {
    PMCR_EL0,
    PMCNTENSET_EL0,
    PMCNTENCLR_EL0,
    PMOVSCLR_EL0,
    PMSWINC_EL0,
    PMSELR_EL0,
    PMCEID0_EL0,
    PMCEID1_EL0,
    PMCCNTR_EL0,
    PMXEVTYPER_EL0,
    PMXEVCNTR_EL0,
    PMUSERENR_EL0,
    PMINTENSET_EL1,
    PMINTENCLR_EL1,
    PMOVSSET_EL0,
    PMCCFILTR_EL0,
    /// PMEVCNTR<n>_EL0, n in 0..=30.
    PMEVCNTR_EL0(u8),
    /// PMEVTYPER<n>_EL0, n in 0..=30.
    PMEVTYPER_EL0(u8),
}

impl PmuReg {
    /// The MSR/MRS encoding (Arm ARM D19.5); the inverse of [`classify`].
    pub const fn id(self) -> SysRegId {
        match self {
            PmuReg::PMCR_EL0 => SysRegId::new(3, 3, 9, 12, 0),
            PmuReg::PMCNTENSET_EL0 => SysRegId::new(3, 3, 9, 12, 1),
            PmuReg::PMCNTENCLR_EL0 => SysRegId::new(3, 3, 9, 12, 2),
            PmuReg::PMOVSCLR_EL0 => SysRegId::new(3, 3, 9, 12, 3),
            PmuReg::PMSWINC_EL0 => SysRegId::new(3, 3, 9, 12, 4),
            PmuReg::PMSELR_EL0 => SysRegId::new(3, 3, 9, 12, 5),
            PmuReg::PMCEID0_EL0 => SysRegId::new(3, 3, 9, 12, 6),
            PmuReg::PMCEID1_EL0 => SysRegId::new(3, 3, 9, 12, 7),
            PmuReg::PMCCNTR_EL0 => SysRegId::new(3, 3, 9, 13, 0),
            PmuReg::PMXEVTYPER_EL0 => SysRegId::new(3, 3, 9, 13, 1),
            PmuReg::PMXEVCNTR_EL0 => SysRegId::new(3, 3, 9, 13, 2),
            PmuReg::PMUSERENR_EL0 => SysRegId::new(3, 3, 9, 14, 0),
            PmuReg::PMINTENSET_EL1 => SysRegId::new(3, 0, 9, 14, 1),
            PmuReg::PMINTENCLR_EL1 => SysRegId::new(3, 0, 9, 14, 2),
            PmuReg::PMOVSSET_EL0 => SysRegId::new(3, 3, 9, 14, 3),
            PmuReg::PMCCFILTR_EL0 => SysRegId::new(3, 3, 14, 15, 7),
            // CRm = 0b10:n[4:3], op2 = n[2:0].
            PmuReg::PMEVCNTR_EL0(n) => SysRegId::new(3, 3, 14, 0b1000 | (n >> 3), n & 7),
            // CRm = 0b11:n[4:3], op2 = n[2:0].
            PmuReg::PMEVTYPER_EL0(n) => SysRegId::new(3, 3, 14, 0b1100 | (n >> 3), n & 7),
        }
    }

    /// Read-only registers: a write is UNDEFINED.
    const fn read_only(self) -> bool {
        matches!(self, PmuReg::PMCEID0_EL0 | PmuReg::PMCEID1_EL0)
    }

    /// Write-only registers: a read is UNDEFINED.
    const fn write_only(self) -> bool {
        matches!(self, PmuReg::PMSWINC_EL0)
    }

    /// The event counter this register is one of, if it is per counter.
    const fn counter(self) -> Option<u8> {
        match self {
            PmuReg::PMEVCNTR_EL0(n) | PmuReg::PMEVTYPER_EL0(n) => Some(n),
            _ => None,
        }
    }
}

/// The trapped PMU register `reg` names, or `None` if it is not one.
#[inline(always)]
pub fn classify(reg: SysRegId) -> Option<PmuReg> {
    if reg.op0() != 3 {
        return None;
    }
    let r = match (reg.op1(), reg.crn(), reg.crm(), reg.op2()) {
        (3, 9, 12, 0) => PmuReg::PMCR_EL0,
        (3, 9, 12, 1) => PmuReg::PMCNTENSET_EL0,
        (3, 9, 12, 2) => PmuReg::PMCNTENCLR_EL0,
        (3, 9, 12, 3) => PmuReg::PMOVSCLR_EL0,
        (3, 9, 12, 4) => PmuReg::PMSWINC_EL0,
        (3, 9, 12, 5) => PmuReg::PMSELR_EL0,
        (3, 9, 12, 6) => PmuReg::PMCEID0_EL0,
        (3, 9, 12, 7) => PmuReg::PMCEID1_EL0,
        (3, 9, 13, 0) => PmuReg::PMCCNTR_EL0,
        (3, 9, 13, 1) => PmuReg::PMXEVTYPER_EL0,
        (3, 9, 13, 2) => PmuReg::PMXEVCNTR_EL0,
        (3, 9, 14, 0) => PmuReg::PMUSERENR_EL0,
        (0, 9, 14, 1) => PmuReg::PMINTENSET_EL1,
        (0, 9, 14, 2) => PmuReg::PMINTENCLR_EL1,
        (3, 9, 14, 3) => PmuReg::PMOVSSET_EL0,
        (3, 14, 15, 7) => PmuReg::PMCCFILTR_EL0,
        (3, 14, crm @ 8..=11, op2) => PmuReg::PMEVCNTR_EL0(((crm & 3) << 3) | op2),
        (3, 14, crm @ 12..=15, op2) => PmuReg::PMEVTYPER_EL0(((crm & 3) << 3) | op2),
        _ => return None,
    };
    Some(r)
}

/// How EL2 is kept out of the guest's counts on this CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum El2Hiding {
    /// PMUv3p5+: MDCR_EL2.HPMD and HCCD.
    HpmdHccd,
    /// PMUv3p1..p4: HPMD, and PMCR_EL0 trapped (TPMCR) to force DP.
    HpmdForcedDp,
    /// PMUv3: every PMU register trapped (TPM), NSH cleared on writes.
    TrapFilterNsh,
}

/// The PMU a vCPU gets on one CPU: decided at vCPU load from the plan's
/// policy, the CPU's ID_AA64DFR0_EL1 and its PMCR_EL0.N.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PmuView {
    /// No PMU: PMUVer 0, every PMU register traps to UNDEF.
    Hidden { counters: u8 },
    /// The guest owns the PMU, EL2 hidden as `hiding` says.
    Owned {
        pmuver: u8,
        counters: u8,
        hiding: El2Hiding,
    },
}

impl PmuView {
    pub fn new(policy: PmuPolicy, id_aa64dfr0: u64, pmcr_n: u8) -> Self {
        let counters = pmcr_n & PMCR_N_MASK as u8;
        let real = ((id_aa64dfr0 >> DFR0_PMUVER_SHIFT) & 0xf) as u8;
        if policy == PmuPolicy::Hidden || real == PMUVER_NONE || real == PMUVER_IMP_DEF {
            return PmuView::Hidden { counters };
        }
        let hiding = if real >= PMUVER_V3P5 {
            El2Hiding::HpmdHccd
        } else if real >= PMUVER_V3P1 {
            El2Hiding::HpmdForcedDp
        } else {
            El2Hiding::TrapFilterNsh
        };
        PmuView::Owned {
            pmuver: real.min(PMUVER_MAX_SHOWN),
            counters,
            hiding,
        }
    }

    /// The PMUVer the guest's ID_AA64DFR0_EL1 shows.
    pub fn pmuver(&self) -> u8 {
        match *self {
            PmuView::Hidden { .. } => PMUVER_NONE,
            PmuView::Owned { pmuver, .. } => pmuver,
        }
    }

    /// The MDCR_EL2 value to write on vCPU load. Only the PMU fields are
    /// set; the others (debug, SPE, trace) are 0 here.
    pub fn mdcr_el2(&self) -> u64 {
        match *self {
            PmuView::Hidden { counters } => u64::from(counters) | MDCR_EL2_TPM | MDCR_EL2_TPMCR,
            PmuView::Owned {
                counters, hiding, ..
            } => {
                let hpmn = u64::from(counters);
                match hiding {
                    El2Hiding::HpmdHccd => hpmn | MDCR_EL2_HPMD | MDCR_EL2_HCCD,
                    El2Hiding::HpmdForcedDp => hpmn | MDCR_EL2_HPMD | MDCR_EL2_TPMCR,
                    El2Hiding::TrapFilterNsh => hpmn | MDCR_EL2_TPM,
                }
            }
        }
    }
}

/// The MDCR_EL2 value to write when loading a vCPU with `policy` on a CPU
/// whose ID_AA64DFR0_EL1 and PMCR_EL0.N are given.
pub fn mdcr_el2(policy: PmuPolicy, id_aa64dfr0: u64, pmcr_n: u8) -> u64 {
    PmuView::new(policy, id_aa64dfr0, pmcr_n).mdcr_el2()
}

/// A trapped access, as the exit handler decoded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PmuAccess {
    /// MRS into Xt.
    Read,
    /// MSR of this value.
    Write(u64),
}

/// What the platform does for a trapped PMU access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PmuAction {
    /// Read the real register into the access's Xt, then step past the MRS.
    Read(PmuReg),
    /// Write this value to the real register, then step past the MSR.
    Write(PmuReg, u64),
    /// Inject an undefined-instruction exception (the register does not
    /// exist for this guest, or this access to it is UNDEFINED).
    Undef,
}

/// The value really written for a guest write of `value` to `reg`, or
/// `None` when the write is UNDEFINED for this guest.
pub fn on_write(view: &PmuView, reg: PmuReg, value: u64) -> Option<u64> {
    match on_trap(view, reg, PmuAccess::Write(value)) {
        PmuAction::Write(_, v) => Some(v),
        PmuAction::Read(_) | PmuAction::Undef => None,
    }
}

/// Decides a trapped access to `reg`.
#[inline(always)]
pub fn on_trap(view: &PmuView, reg: PmuReg, access: PmuAccess) -> PmuAction {
    let (counters, hiding) = match *view {
        PmuView::Hidden { .. } => return PmuAction::Undef,
        PmuView::Owned {
            counters, hiding, ..
        } => (counters, hiding),
    };
    // A counter beyond PMCR_EL0.N does not exist (CONSTRAINED
    // UNPREDICTABLE in the Arm ARM; UNDEF is one of its permitted choices).
    if reg.counter().is_some_and(|n| n >= counters) {
        return PmuAction::Undef;
    }
    let value = match access {
        PmuAccess::Read if reg.write_only() => return PmuAction::Undef,
        PmuAccess::Read => return PmuAction::Read(reg),
        PmuAccess::Write(_) if reg.read_only() => return PmuAction::Undef,
        PmuAccess::Write(value) => value,
    };
    let value = match reg {
        PmuReg::PMCR_EL0 => {
            let forced = if hiding == El2Hiding::HpmdForcedDp {
                PMCR_DP
            } else {
                0
            };
            (value & PMCR_WRITABLE) | forced
        }
        PmuReg::PMEVTYPER_EL0(_) | PmuReg::PMXEVTYPER_EL0 | PmuReg::PMCCFILTR_EL0
            if hiding == El2Hiding::TrapFilterNsh =>
        {
            value & !PMEVTYPER_NSH
        }
        _ => value,
    };
    PmuAction::Write(reg, value)
}

/// The writes that put an owned PMU back to its reset state before a vCPU
/// (re)starts, so nothing of a previous boot (enabled counters, pending
/// overflows, EL0 access) carries over: counters disabled and reset,
/// interrupts and overflow flags cleared, EL0 access off, filters at their
/// reset value with EL2 not counted.
pub fn reset_writes(view: &PmuView) -> [(PmuReg, u64); 7] {
    let all = match *view {
        PmuView::Hidden { counters } | PmuView::Owned { counters, .. } => {
            CYCLE_COUNTER_BIT | ((1u64 << counters) - 1)
        }
    };
    [
        (PmuReg::PMCNTENCLR_EL0, all),
        (PmuReg::PMINTENCLR_EL1, all),
        (PmuReg::PMOVSCLR_EL0, all),
        (PmuReg::PMUSERENR_EL0, 0),
        (PmuReg::PMCCFILTR_EL0, 0),
        (PmuReg::PMSELR_EL0, 0),
        (PmuReg::PMCR_EL0, PMCR_P | PMCR_C),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ID_AA64DFR0_EL1 with only PMUVer set.
    fn dfr0(pmuver: u8) -> u64 {
        u64::from(pmuver) << 8
    }

    /// QEMU's cortex-a72: PMUv3, 6 counters (its ID_AA64DFR0_EL1 is
    /// 0x1030_5106).
    const A72_DFR0: u64 = 0x1030_5106;

    #[test]
    fn qemu_cortex_a72_dfr0_is_pmuv3_without_p1() {
        let view = PmuView::new(PmuPolicy::Owned, A72_DFR0, 6);

        assert_eq!(
            view,
            PmuView::Owned {
                pmuver: PMUVER_V3,
                counters: 6,
                hiding: El2Hiding::TrapFilterNsh
            }
        );
    }

    #[test]
    fn owned_pmuv3_traps_every_pmu_register_with_all_counters_to_el1() {
        let mdcr = mdcr_el2(PmuPolicy::Owned, dfr0(PMUVER_V3), 6);

        assert_eq!(mdcr, 6 | MDCR_EL2_TPM);
    }

    #[test]
    fn owned_pmuv3p1_sets_hpmd_and_traps_only_pmcr() {
        let mdcr = mdcr_el2(PmuPolicy::Owned, dfr0(PMUVER_V3P1), 4);

        assert_eq!(mdcr, 4 | MDCR_EL2_HPMD | MDCR_EL2_TPMCR);
    }

    #[test]
    fn owned_pmuv3p5_sets_hpmd_and_hccd_and_traps_nothing() {
        let mdcr = mdcr_el2(PmuPolicy::Owned, dfr0(PMUVER_V3P5), 20);

        assert_eq!(mdcr, 20 | MDCR_EL2_HPMD | MDCR_EL2_HCCD);
        assert_eq!(mdcr & (MDCR_EL2_TPM | MDCR_EL2_TPMCR | MDCR_EL2_HPME), 0);
    }

    #[test]
    fn hidden_traps_every_pmu_register_and_keeps_hpmn_at_n() {
        let mdcr = mdcr_el2(PmuPolicy::Hidden, dfr0(PMUVER_V3P5), 6);

        assert_eq!(mdcr, 6 | MDCR_EL2_TPM | MDCR_EL2_TPMCR);
    }

    #[test]
    fn imp_def_pmu_is_hidden_even_when_owned() {
        let view = PmuView::new(PmuPolicy::Owned, dfr0(PMUVER_IMP_DEF), 6);

        assert_eq!(view, PmuView::Hidden { counters: 6 });
        assert_eq!(view.pmuver(), 0);
    }

    #[test]
    fn shown_pmuver_is_capped_at_v3p5() {
        let view = PmuView::new(PmuPolicy::Owned, dfr0(0b1000), 6); // PMUv3p8

        assert_eq!(view.pmuver(), PMUVER_V3P5);
    }

    #[test]
    fn hidden_pmu_shows_pmuver_zero() {
        assert_eq!(
            PmuView::new(PmuPolicy::Hidden, A72_DFR0, 6).pmuver(),
            PMUVER_NONE
        );
    }

    #[test]
    fn classify_names_every_register_and_round_trips_its_encoding() {
        let mut regs = std::vec![
            PmuReg::PMCR_EL0,
            PmuReg::PMCNTENSET_EL0,
            PmuReg::PMCNTENCLR_EL0,
            PmuReg::PMOVSCLR_EL0,
            PmuReg::PMSWINC_EL0,
            PmuReg::PMSELR_EL0,
            PmuReg::PMCEID0_EL0,
            PmuReg::PMCEID1_EL0,
            PmuReg::PMCCNTR_EL0,
            PmuReg::PMXEVTYPER_EL0,
            PmuReg::PMXEVCNTR_EL0,
            PmuReg::PMUSERENR_EL0,
            PmuReg::PMINTENSET_EL1,
            PmuReg::PMINTENCLR_EL1,
            PmuReg::PMOVSSET_EL0,
            PmuReg::PMCCFILTR_EL0,
        ];
        regs.extend((0..31).map(PmuReg::PMEVCNTR_EL0));
        regs.extend((0..31).map(PmuReg::PMEVTYPER_EL0));

        for reg in regs {
            assert_eq!(classify(reg.id()), Some(reg), "{reg:?}");
        }
    }

    #[test]
    fn classify_uses_the_arm_arm_encodings() {
        // Spot checks against the Arm ARM's tables (D19.5).
        assert_eq!(
            classify(SysRegId::new(3, 3, 9, 12, 0)),
            Some(PmuReg::PMCR_EL0)
        );
        assert_eq!(
            classify(SysRegId::new(3, 3, 9, 13, 0)),
            Some(PmuReg::PMCCNTR_EL0)
        );
        assert_eq!(
            classify(SysRegId::new(3, 0, 9, 14, 1)),
            Some(PmuReg::PMINTENSET_EL1)
        );
        // PMEVCNTR13_EL0: CRm 0b1001, op2 0b101.
        assert_eq!(
            classify(SysRegId::new(3, 3, 14, 9, 5)),
            Some(PmuReg::PMEVCNTR_EL0(13))
        );
        // PMEVTYPER30_EL0: CRm 0b1111, op2 0b110; op2 7 there is PMCCFILTR.
        assert_eq!(
            classify(SysRegId::new(3, 3, 14, 15, 6)),
            Some(PmuReg::PMEVTYPER_EL0(30))
        );
        assert_eq!(
            classify(SysRegId::new(3, 3, 14, 15, 7)),
            Some(PmuReg::PMCCFILTR_EL0)
        );
    }

    #[test]
    fn classify_leaves_non_pmu_registers_alone() {
        for reg in [
            SysRegId::new(3, 0, 0, 5, 0),  // ID_AA64DFR0_EL1
            SysRegId::new(3, 3, 14, 0, 1), // CNTPCT_EL0
            SysRegId::new(3, 3, 14, 2, 1), // CNTP_CTL_EL0
            SysRegId::new(3, 0, 9, 14, 6), // PMMIR_EL1 (PMUv3p4, never trapped here)
            SysRegId::new(3, 0, 9, 9, 0),  // PMSCR_EL1 (SPE)
            SysRegId::ICC_SGI1R_EL1,
        ] {
            assert_eq!(classify(reg), None, "{reg:?}");
        }
    }

    fn a72() -> PmuView {
        PmuView::new(PmuPolicy::Owned, A72_DFR0, 6)
    }

    #[test]
    fn pmuv3_evtyper_write_has_nsh_cleared() {
        let value = (1 << 27) | (1 << 30) | 0x11; // NSH, U, CPU_CYCLES

        let written = on_write(&a72(), PmuReg::PMEVTYPER_EL0(2), value);

        assert_eq!(written, Some((1 << 30) | 0x11));
    }

    #[test]
    fn pmuv3_ccfilter_and_xevtyper_writes_have_nsh_cleared() {
        assert_eq!(on_write(&a72(), PmuReg::PMCCFILTR_EL0, 1 << 27), Some(0));
        assert_eq!(
            on_write(&a72(), PmuReg::PMXEVTYPER_EL0, (1 << 27) | 8),
            Some(8)
        );
    }

    #[test]
    fn pmuv3p5_has_no_trapped_filter_to_change() {
        // Nothing traps on p5, but if asked the value is kept: HPMD/HCCD
        // already stop EL2 counting whatever NSH says.
        let view = PmuView::new(PmuPolicy::Owned, dfr0(PMUVER_V3P5), 6);

        assert_eq!(
            on_write(&view, PmuReg::PMCCFILTR_EL0, 1 << 27),
            Some(1 << 27)
        );
    }

    #[test]
    fn pmcr_write_keeps_read_only_fields_and_export_out() {
        // N = 31, IMP, IDCODE and X written by the guest; E and C kept.
        let value = (0x41 << 24) | (0x03 << 16) | (31 << 11) | (1 << 4) | PMCR_C | PMCR_E;

        let written = on_write(&a72(), PmuReg::PMCR_EL0, value);

        assert_eq!(written, Some(PMCR_C | PMCR_E));
    }

    #[test]
    fn pmuv3p1_pmcr_write_forces_dp() {
        let view = PmuView::new(PmuPolicy::Owned, dfr0(PMUVER_V3P1), 6);

        assert_eq!(
            on_write(&view, PmuReg::PMCR_EL0, PMCR_E),
            Some(PMCR_E | PMCR_DP)
        );
    }

    #[test]
    fn owned_reads_come_from_the_real_register() {
        assert_eq!(
            on_trap(&a72(), PmuReg::PMCCNTR_EL0, PmuAccess::Read),
            PmuAction::Read(PmuReg::PMCCNTR_EL0)
        );
        assert_eq!(
            on_trap(&a72(), PmuReg::PMEVCNTR_EL0(5), PmuAccess::Read),
            PmuAction::Read(PmuReg::PMEVCNTR_EL0(5))
        );
    }

    #[test]
    fn counter_beyond_n_is_undef() {
        assert_eq!(
            on_trap(&a72(), PmuReg::PMEVCNTR_EL0(6), PmuAccess::Read),
            PmuAction::Undef
        );
        assert_eq!(on_write(&a72(), PmuReg::PMEVTYPER_EL0(30), 0), None);
    }

    #[test]
    fn read_only_written_and_write_only_read_are_undef() {
        assert_eq!(on_write(&a72(), PmuReg::PMCEID0_EL0, 1), None);
        assert_eq!(
            on_trap(&a72(), PmuReg::PMSWINC_EL0, PmuAccess::Read),
            PmuAction::Undef
        );
        assert_eq!(
            on_trap(&a72(), PmuReg::PMSWINC_EL0, PmuAccess::Write(1)),
            PmuAction::Write(PmuReg::PMSWINC_EL0, 1)
        );
    }

    #[test]
    fn hidden_pmu_answers_every_access_with_undef() {
        let view = PmuView::new(PmuPolicy::Hidden, A72_DFR0, 6);

        for reg in [
            PmuReg::PMCR_EL0,
            PmuReg::PMCCNTR_EL0,
            PmuReg::PMEVCNTR_EL0(0),
        ] {
            assert_eq!(on_trap(&view, reg, PmuAccess::Read), PmuAction::Undef);
            assert_eq!(on_trap(&view, reg, PmuAccess::Write(0)), PmuAction::Undef);
        }
    }

    #[test]
    fn reset_disables_and_clears_every_counter_and_the_cycle_counter() {
        let writes = reset_writes(&a72());

        let all = (1 << 31) | 0b11_1111;
        assert!(writes.contains(&(PmuReg::PMCNTENCLR_EL0, all)));
        assert!(writes.contains(&(PmuReg::PMINTENCLR_EL1, all)));
        assert!(writes.contains(&(PmuReg::PMOVSCLR_EL0, all)));
        assert!(writes.contains(&(PmuReg::PMUSERENR_EL0, 0)));
        assert_eq!(writes.last(), Some(&(PmuReg::PMCR_EL0, PMCR_P | PMCR_C)));
    }
}
