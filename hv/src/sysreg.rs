//! What a guest sees when it reads an ID register trapped by HCR_EL2.TID3:
//! the real value with the features we do not give guests hidden, and the
//! PMU shown or hidden as the partition's PMU policy (`crate::pmu`) says.
//!
//! A guest that sees a feature uses it; if EL2 has not enabled or context
//! switched that feature, the guest takes UNDEFs or corrupts state shared
//! with other partitions. Hiding is the conservative default: a field is
//! passed through only when the guest can use the feature safely as is.
//! Field positions: Arm ARM D17.2 (ID_AA64PFR0_EL1 etc.).

use crate::pmu::{PmuPolicy, PmuView};
use crate::trap::SysRegId;

pub const ID_AA64PFR0_EL1: SysRegId = SysRegId::new(3, 0, 0, 4, 0);
pub const ID_AA64PFR1_EL1: SysRegId = SysRegId::new(3, 0, 0, 4, 1);
pub const ID_AA64ZFR0_EL1: SysRegId = SysRegId::new(3, 0, 0, 4, 4);
pub const ID_AA64SMFR0_EL1: SysRegId = SysRegId::new(3, 0, 0, 4, 5);
pub const ID_AA64DFR0_EL1: SysRegId = SysRegId::new(3, 0, 0, 5, 0);
pub const ID_AA64MMFR0_EL1: SysRegId = SysRegId::new(3, 0, 0, 7, 0);
pub const ID_AA64MMFR2_EL1: SysRegId = SysRegId::new(3, 0, 0, 7, 2);

// ID_AA64PFR0_EL1 fields (bit offsets of 4-bit fields).
const PFR0_GIC: u32 = 24;
const PFR0_SVE: u32 = 32;
const PFR0_MPAM: u32 = 40;
const PFR0_AMU: u32 = 44;
/// GIC = 0b0001: GICv3/v4 system register interface. Guests get a virtual
/// GICv3 CPU interface whatever the host has (e.g. GICv4.1's 0b0011).
const PFR0_GIC_V3_SYSREGS: u64 = 0b0001;

// ID_AA64PFR1_EL1 fields.
const PFR1_MTE: u32 = 8;
const PFR1_MPAM_FRAC: u32 = 16;
const PFR1_SME: u32 = 24;

// ID_AA64DFR0_EL1 fields.
const DFR0_TRACEVER: u32 = 4;
const DFR0_PMUVER: u32 = 8;
const DFR0_PMSVER: u32 = 32;
const DFR0_TRACEBUFFER: u32 = 44;
const DFR0_BRBE: u32 = 52;

// ID_AA64MMFR0_EL1 fields.
const MMFR0_PARANGE: u32 = 0;
const MMFR0_TGRAN16: u32 = 20;
const MMFR0_TGRAN4: u32 = 28;
const MMFR0_ECV: u32 = 60;
/// PARange 0b0010 = 40 bits: the size of our stage-2 IPA space.
const PARANGE_40_BITS: u64 = 0b0010;
/// TGran4 0b0001: 4 KiB granule with 52-bit addresses (FEAT_LPA2).
const TGRAN4_LPA2: u64 = 0b0001;
const TGRAN4_SUPPORTED: u64 = 0b0000;
/// TGran16 0b0010: 16 KiB granule with 52-bit addresses (FEAT_LPA2).
const TGRAN16_LPA2: u64 = 0b0010;
const TGRAN16_SUPPORTED: u64 = 0b0001;

fn field(value: u64, shift: u32) -> u64 {
    (value >> shift) & 0xF
}

fn with_field(value: u64, shift: u32, field: u64) -> u64 {
    (value & !(0xF << shift)) | ((field & 0xF) << shift)
}

/// The value the guest reads from `reg`, given the hardware's `real` value
/// and the partition's PMU policy. Registers outside the TID3 group read as
/// zero: this is only ever asked about trapped ID reads, and RAZ is the
/// safe answer to anything else.
pub fn id_reg_view(reg: SysRegId, real: u64, pmu: PmuPolicy) -> u64 {
    if !reg.is_id_group3() {
        return 0;
    }
    match reg {
        ID_AA64PFR0_EL1 => sanitise_pfr0(real),
        ID_AA64PFR1_EL1 => sanitise_pfr1(real),
        // SVE and SME are hidden, so their feature registers must read as
        // zero (they are RES0 on a CPU without the feature).
        ID_AA64ZFR0_EL1 | ID_AA64SMFR0_EL1 => 0,
        ID_AA64DFR0_EL1 => sanitise_dfr0(real, pmu),
        ID_AA64MMFR0_EL1 => sanitise_mmfr0(real),
        // ID_AA64MMFR2_EL1 and all others pass through unchanged.
        _ => real,
    }
}

fn sanitise_pfr0(real: u64) -> u64 {
    let mut v = real;
    // SVE: its Z/P registers and ZCR_EL1 are not context switched, and
    // CPTR_EL2 traps them, so a guest using SVE would UNDEF.
    v = with_field(v, PFR0_SVE, 0);
    // AMU: the activity monitors count for the physical CPU and their
    // EL2 controls (AMCNTENSET, offsets) are not virtualised.
    v = with_field(v, PFR0_AMU, 0);
    // MPAM: partition IDs steer shared cache/bandwidth; letting a guest pick
    // them would let it take resources from other partitions.
    v = with_field(v, PFR0_MPAM, 0);
    // RAS: kept; guests handle their own RAS error records and SErrors.
    // GIC: guests always get the GICv3 system register interface.
    with_field(v, PFR0_GIC, PFR0_GIC_V3_SYSREGS)
}

fn sanitise_pfr1(real: u64) -> u64 {
    let mut v = real;
    // SME: streaming mode state (ZA, SVCR, SMCR_EL1) is not context switched.
    v = with_field(v, PFR1_SME, 0);
    // MTE: tag storage for guest RAM is not provisioned and HCR_EL2.ATA is
    // clear, so tag accesses would fault.
    v = with_field(v, PFR1_MTE, 0);
    // MPAM_frac: the minor version of MPAM, which is hidden above.
    with_field(v, PFR1_MPAM_FRAC, 0)
}

fn sanitise_dfr0(real: u64, pmu: PmuPolicy) -> u64 {
    let mut v = real;
    // PMUVer: an owned PMU shows its version (capped at what crate::pmu
    // handles); a hidden one 0b0000, "not implemented", so Linux does not
    // probe PMU registers (which would UNDEF).
    let shown = PmuView::new(pmu, real, 0).pmuver();
    v = with_field(v, DFR0_PMUVER, u64::from(shown));
    // TraceVer and TraceBuffer (TRBE): trace units see all of the physical
    // CPU's execution, including other partitions' and ours.
    v = with_field(v, DFR0_TRACEVER, 0);
    v = with_field(v, DFR0_TRACEBUFFER, 0);
    // PMSVer (SPE): profiling writes samples to memory by physical CPU
    // and is not virtualised.
    v = with_field(v, DFR0_PMSVER, 0);
    // BRBE: branch records are not context switched.
    // DebugVer, BRPs, WRPs, CTX_CMPs: kept; guests own their breakpoints.
    with_field(v, DFR0_BRBE, 0)
}

fn sanitise_mmfr0(real: u64) -> u64 {
    let mut v = real;
    // PARange: the guest's physical address space is our 40-bit IPA space;
    // advertising more would invite it to place things stage 2 cannot map.
    // A host with less keeps its smaller value (encodings are monotonic).
    let parange = field(v, MMFR0_PARANGE).min(PARANGE_40_BITS);
    v = with_field(v, MMFR0_PARANGE, parange);
    // TGran4/TGran16 LPA2 (52-bit) variants: with a 40-bit PA range 52-bit
    // tables are pointless, and some guests (Hermit 0.11) panic on LPA2.
    // The plain granule stays supported.
    if field(v, MMFR0_TGRAN4) == TGRAN4_LPA2 {
        v = with_field(v, MMFR0_TGRAN4, TGRAN4_SUPPORTED);
    }
    if field(v, MMFR0_TGRAN16) == TGRAN16_LPA2 {
        v = with_field(v, MMFR0_TGRAN16, TGRAN16_SUPPORTED);
    }
    // ECV: we do not set up CNTHCTL_EL2.ECV/CNTPOFF_EL2, so the guest keeps
    // the plain counter and timer view.
    with_field(v, MMFR0_ECV, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id_reg_view_hidden(reg: SysRegId, real: u64) -> u64 {
        id_reg_view(reg, real, PmuPolicy::Hidden)
    }

    /// A register value whose every field reads 0b0101, so a cleared field
    /// or a changed neighbour shows.
    const FIVES: u64 = 0x5555_5555_5555_5555;

    fn field_of(value: u64, shift: u32) -> u64 {
        (value >> shift) & 0xF
    }

    /// Asserts that only the fields at `shifts` differ between two values.
    fn only_fields_changed(before: u64, after: u64, shifts: &[u32]) {
        let mask = shifts.iter().fold(0u64, |m, s| m | (0xF << s));
        assert_eq!(before & !mask, after & !mask, "untouched fields changed");
    }

    #[test]
    fn pfr0_hides_sve_amu_mpam_and_reports_gicv3_sysregs() {
        let v = id_reg_view_hidden(ID_AA64PFR0_EL1, FIVES);

        assert_eq!(field_of(v, 32), 0, "SVE");
        assert_eq!(field_of(v, 44), 0, "AMU");
        assert_eq!(field_of(v, 40), 0, "MPAM");
        assert_eq!(field_of(v, 24), 1, "GIC");
        only_fields_changed(FIVES, v, &[24, 32, 40, 44]);
    }

    #[test]
    fn pfr0_keeps_ras() {
        let real = 0x0000_0000_2000_0000 | (0b0011 << 24); // RAS v1p1, GICv4.1

        let v = id_reg_view_hidden(ID_AA64PFR0_EL1, real);

        assert_eq!(field_of(v, 28), 0b0010);
        assert_eq!(field_of(v, 24), 0b0001);
    }

    #[test]
    fn pfr1_hides_sme_mte_and_mpam_frac() {
        let v = id_reg_view_hidden(ID_AA64PFR1_EL1, FIVES);

        assert_eq!(field_of(v, 24), 0, "SME");
        assert_eq!(field_of(v, 8), 0, "MTE");
        assert_eq!(field_of(v, 16), 0, "MPAM_frac");
        only_fields_changed(FIVES, v, &[8, 16, 24]);
    }

    #[test]
    fn dfr0_hides_pmu_trace_spe_trbe_brbe_and_keeps_debug() {
        let v = id_reg_view_hidden(ID_AA64DFR0_EL1, FIVES);

        for (shift, name) in [
            (8, "PMUVer"),
            (4, "TraceVer"),
            (32, "PMSVer"),
            (44, "TraceBuffer"),
            (52, "BRBE"),
        ] {
            assert_eq!(field_of(v, shift), 0, "{name}");
        }
        assert_eq!(field_of(v, 0), 5, "DebugVer");
        assert_eq!(field_of(v, 12), 5, "BRPs");
        only_fields_changed(FIVES, v, &[4, 8, 32, 44, 52]);
    }

    #[test]
    fn dfr0_with_an_owned_pmu_shows_pmuver_and_still_hides_the_rest() {
        let v = id_reg_view(ID_AA64DFR0_EL1, FIVES, PmuPolicy::Owned);

        assert_eq!(field_of(v, 8), 5, "PMUVer (v3p4)");
        for (shift, name) in [
            (4, "TraceVer"),
            (32, "PMSVer"),
            (44, "TraceBuffer"),
            (52, "BRBE"),
        ] {
            assert_eq!(field_of(v, shift), 0, "{name}");
        }
        only_fields_changed(FIVES, v, &[4, 32, 44, 52]);
    }

    #[test]
    fn dfr0_of_qemu_cortex_a72_shows_pmuv3() {
        let v = id_reg_view(ID_AA64DFR0_EL1, 0x1030_5106, PmuPolicy::Owned);

        assert_eq!(field_of(v, 8), 1);
    }

    #[test]
    fn dfr0_caps_a_newer_pmu_at_v3p5() {
        let v = id_reg_view(ID_AA64DFR0_EL1, 0b1001 << 8, PmuPolicy::Owned);

        assert_eq!(field_of(v, 8), 0b0110);
    }

    #[test]
    fn dfr0_hides_an_imp_def_pmu_even_when_owned() {
        let v = id_reg_view(ID_AA64DFR0_EL1, 0xF << 8, PmuPolicy::Owned);

        assert_eq!(field_of(v, 8), 0);
    }

    #[test]
    fn hidden_policy_hides_the_pmu() {
        assert_eq!(
            field_of(id_reg_view(ID_AA64DFR0_EL1, FIVES, PmuPolicy::Hidden), 8),
            0
        );
    }

    #[test]
    fn mmfr0_clamps_48_bit_parange_to_40_bits() {
        let v = id_reg_view_hidden(ID_AA64MMFR0_EL1, 0b0101);

        assert_eq!(field_of(v, 0), 0b0010);
    }

    #[test]
    fn mmfr0_keeps_a_parange_smaller_than_40_bits() {
        let v = id_reg_view_hidden(ID_AA64MMFR0_EL1, 0b0001);

        assert_eq!(field_of(v, 0), 0b0001);
    }

    #[test]
    fn mmfr0_hides_lpa2_granules_and_ecv() {
        // QEMU -cpu max style: TGran4=1 (LPA2), TGran16=2 (LPA2), ECV=2.
        let real = (2u64 << 60) | (1 << 28) | (2 << 20) | 0b0110;

        let v = id_reg_view_hidden(ID_AA64MMFR0_EL1, real);

        assert_eq!(field_of(v, 28), 0, "TGran4 without LPA2");
        assert_eq!(field_of(v, 20), 1, "TGran16 without LPA2");
        assert_eq!(field_of(v, 60), 0, "ECV");
    }

    #[test]
    fn mmfr0_leaves_unsupported_4k_granule_unsupported() {
        let v = id_reg_view_hidden(ID_AA64MMFR0_EL1, 0xF << 28);

        assert_eq!(field_of(v, 28), 0xF);
    }

    #[test]
    fn mmfr0_other_fields_pass_through() {
        let v = id_reg_view_hidden(ID_AA64MMFR0_EL1, FIVES);

        only_fields_changed(FIVES, v, &[0, 60]);
        assert_eq!(field_of(v, 28), 5);
    }

    #[test]
    fn sve_and_sme_feature_registers_read_as_zero() {
        assert_eq!(id_reg_view_hidden(ID_AA64ZFR0_EL1, FIVES), 0);
        assert_eq!(id_reg_view_hidden(ID_AA64SMFR0_EL1, FIVES), 0);
    }

    #[test]
    fn mmfr2_and_unnamed_id_registers_pass_through() {
        assert_eq!(id_reg_view_hidden(ID_AA64MMFR2_EL1, FIVES), FIVES);
        assert_eq!(
            id_reg_view_hidden(SysRegId::new(3, 0, 0, 6, 0), FIVES),
            FIVES
        ); // ID_AA64ISAR0_EL1
        assert_eq!(
            id_reg_view_hidden(SysRegId::new(3, 0, 0, 1, 0), FIVES),
            FIVES
        );
        // ID_PFR0_EL1
    }

    #[test]
    fn registers_outside_group3_read_as_zero() {
        assert_eq!(id_reg_view_hidden(SysRegId::new(3, 0, 0, 0, 0), FIVES), 0); // MIDR_EL1
        assert_eq!(id_reg_view_hidden(SysRegId::ACTLR_EL1, FIVES), 0);
    }
}
