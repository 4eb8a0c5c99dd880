//! GICv5 decisions the core makes and the GICv5 driver
//! (`pinfold_drivers::gicv5`) applies: which host GICv5 is good enough
//! ([`check_host`], naming every missing feature), which PPIs a vCPU gets
//! as direct virtual interrupts and which it may see at all
//! ([`PpiPlan::for_vcpu`]), which virtual interface a partition gets
//! ([`choose_interface`]: GICv5 or, on a host with FEAT_GCIE_LEGACY, the
//! GICv3-compatible one), and the saved virtual PPI state of a vCPU that is
//! not resident ([`VPpiContext`]: plain data, owned by the vCPU, touched
//! only on its own CPU, so load and put take no lock shared between CPUs).
//!
//! The INTID mapping between the core's GICv3-style numbers and GICv5's
//! typed IDs ([`CoreIntid`]) lets `exit::dispatch_irq` and the rest of the
//! core run unchanged on a GICv5: PPIs 16..31 keep their numbers (the timers
//! are 27 and 30, the PMU 23, in both), SGI n to CPU c is the LPI
//! `ipi_base + 16 c + n`, and core INTID 32 + n is SPI n.
//!
//! Everything here is host-tested; the register effects are tested in
//! `pinfold_drivers::gicv5` against the `pinfold-gicv5model` model.

use core::fmt;

/// The architected PPIs a guest may own.
pub const PPI_PMU: u32 = 23;
pub const PPI_CNTV: u32 = 27;
pub const PPI_CNTP: u32 = 30;
/// The EL2 physical timer: the hypervisor's own, never a guest's.
pub const PPI_CNTHP: u32 = 26;

/// A set of PPIs 0..127, bit n of word n / 64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PpiSet(pub [u64; 2]);

impl PpiSet {
    pub const EMPTY: PpiSet = PpiSet([0; 2]);

    pub const fn of(ppis: &[u32]) -> PpiSet {
        let mut w = [0u64; 2];
        let mut i = 0;
        while i < ppis.len() {
            let n = ppis[i];
            w[(n / 64) as usize] |= 1 << (n % 64);
            i += 1;
        }
        PpiSet(w)
    }

    pub const fn contains(self, n: u32) -> bool {
        n < 128 && self.0[(n / 64) as usize] >> (n % 64) & 1 != 0
    }

    pub const fn and_not(self, other: PpiSet) -> PpiSet {
        PpiSet([self.0[0] & !other.0[0], self.0[1] & !other.0[1]])
    }

    pub fn iter(self) -> impl Iterator<Item = u32> {
        (0..128u32).filter(move |&n| self.contains(n))
    }
}

/// What a vCPU's PPIs become on a GICv5 host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PpiPlan {
    /// Direct virtual interrupts (ICH_PPI_DVIR): the physical pending
    /// state is the virtual one while the vCPU is resident, no exit.
    pub dvi: PpiSet,
    /// What the guest may see; every other implemented PPI is hidden
    /// (ICH_PPI_HVIR: RAZ/WI to the guest).
    pub visible: PpiSet,
}

impl PpiPlan {
    /// A vCPU's plan: it sees its EL1 timers (and the PMU's interrupt if
    /// the partition has the PMU); a vCPU pinned to its CPU gets those as
    /// DVI (nobody else's timer state ever lives on that CPU). A vCPU that
    /// shares its CPU keeps them emulated (the hypervisor writes
    /// ICH_PPI_PENDR), since the physical PPI's state belongs to whoever
    /// runs there.
    pub fn for_vcpu(pinned: bool, pmu: bool) -> PpiPlan {
        let visible = if pmu {
            PpiSet::of(&[PPI_CNTV, PPI_CNTP, PPI_PMU])
        } else {
            PpiSet::of(&[PPI_CNTV, PPI_CNTP])
        };
        PpiPlan {
            dvi: if pinned { visible } else { PpiSet::EMPTY },
            visible,
        }
    }
}

/// A vCPU's virtual CPU interface state while it is not resident: what
/// put saves from and load restores into ICH_*_EL2. Plain data in the
/// vCPU's own per-CPU state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VPpiContext {
    pub enabler: [u64; 2],
    pub pendr: [u64; 2],
    pub activer: [u64; 2],
    pub priorityr: [u64; 16],
    pub vmcr: u64,
    pub apr: u64,
}

/// The virtual interrupt controller a partition gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GicInterface {
    /// The emulated GICv3 (list registers); on a GICv5 host this is the
    /// FEAT_GCIE_LEGACY interface (ICH_VCTLR_EL2.V3 = 1).
    V3,
    /// A native virtual GICv5 CPU interface.
    V5,
}

impl GicInterface {
    pub const fn name(self) -> &'static str {
        match self {
            GicInterface::V3 => "gicv3",
            GicInterface::V5 => "gicv5",
        }
    }
}

/// A plan's request for a partition's interrupt controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GicRequest {
    /// The host's native kind (GICv5 on a GICv5 host, else GICv3).
    #[default]
    Auto,
    V3,
    V5,
}

/// What the host's GIC offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HostGicv5 {
    /// An IRS was described (DT "arm,gic-v5-irs" / MADT GICv5 IRS).
    pub irs: bool,
    /// IRS_IDR2.LPI: LPIs (IPIs are LPIs on GICv5).
    pub lpis: bool,
    /// IRS_IDR0.VIRT: virtualisation (vPEs, the ICH_* interface).
    pub virt: bool,
    /// ICC_IDR0_EL1.GCIE_LEGACY: the GICv3-compatible virtual interface.
    pub gcie_legacy: bool,
    /// Implemented PPIs (probed by writing ICH_PPI_ENABLER all ones).
    pub ppis: PpiSet,
}

/// The GICv5 features Pinfold cannot run without, each named: bit i set
/// = the i-th of [`REQUIRED`] is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MissingFeatures(pub u8);

impl MissingFeatures {
    /// The missing features' names, in [`REQUIRED`] order.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        REQUIRED
            .iter()
            .enumerate()
            .filter(move |(i, _)| self.0 >> i & 1 != 0)
            .map(|(_, (name, _))| *name)
    }
}

impl fmt::Display for MissingFeatures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GICv5 host lacks what Pinfold needs: ")?;
        for (i, m) in self.names().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{m}")?;
        }
        Ok(())
    }
}

/// A required feature: its name and whether a host has it.
pub type Required = (&'static str, fn(&HostGicv5) -> bool);

/// What a GICv5 host must have, each with its name.
pub const REQUIRED: [Required; 6] = [
    ("an IRS (arm,gic-v5-irs)", |h| h.irs),
    ("LPIs (IRS_IDR2.LPI, for IPIs)", |h| h.lpis),
    ("virtualisation (IRS_IDR0.VIRT)", |h| h.virt),
    ("the EL1 virtual timer PPI 27", |h| {
        h.ppis.contains(PPI_CNTV)
    }),
    ("the EL1 physical timer PPI 30", |h| {
        h.ppis.contains(PPI_CNTP)
    }),
    ("the EL2 physical timer PPI 26", |h| {
        h.ppis.contains(PPI_CNTHP)
    }),
];

/// Whether the host GICv5 has what Pinfold needs; if not, every missing
/// feature, by name, for the boot message.
pub fn check_host(h: &HostGicv5) -> Result<(), MissingFeatures> {
    let mut missing = 0u8;
    for (i, (_, has)) in REQUIRED.iter().enumerate() {
        if !has(h) {
            missing |= 1 << i;
        }
    }
    if missing == 0 {
        Ok(())
    } else {
        Err(MissingFeatures(missing))
    }
}

/// The interface a partition gets, or why it cannot have what it asked.
pub fn choose_interface(
    request: GicRequest,
    host_v5: Option<&HostGicv5>,
) -> Result<GicInterface, &'static str> {
    match (request, host_v5) {
        (GicRequest::Auto | GicRequest::V3, None) => Ok(GicInterface::V3),
        (GicRequest::V5, None) => Err("gic = \"v5\" needs a GICv5 host; this host has a GICv3"),
        (GicRequest::Auto | GicRequest::V5, Some(_)) => Ok(GicInterface::V5),
        (GicRequest::V3, Some(h)) if h.gcie_legacy => Ok(GicInterface::V3),
        (GicRequest::V3, Some(_)) => Err(
            "gic = \"v3\" on a GICv5 host needs FEAT_GCIE_LEGACY (ICC_IDR0_EL1.GCIE_LEGACY), which this host lacks",
        ),
    }
}

/// A core INTID (GICv3 numbering) in GICv5 terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoreIntid {
    /// SGI n: an LPI on GICv5.
    Sgi(u32),
    Ppi(u32),
    Spi(u32),
}

impl CoreIntid {
    pub const fn from_core(intid: u32) -> CoreIntid {
        match intid {
            0..=15 => CoreIntid::Sgi(intid),
            16..=31 => CoreIntid::Ppi(intid),
            _ => CoreIntid::Spi(intid - 32),
        }
    }
}

/// The LPI that carries SGI `sgi` to CPU `cpu`.
pub const fn ipi_lpi(ipi_base: u32, cpu: u32, sgi: u32) -> u32 {
    ipi_base + cpu * 16 + sgi
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn pinned_vcpu_gets_its_timers_as_dvi_and_sees_nothing_else() {
        let plan = PpiPlan::for_vcpu(true, true);
        assert_eq!(plan.dvi, PpiSet::of(&[23, 27, 30]));
        assert_eq!(plan.visible, plan.dvi);
        assert!(!plan.visible.contains(PPI_CNTHP));
        let shared = PpiPlan::for_vcpu(false, false);
        assert_eq!(shared.dvi, PpiSet::EMPTY);
        assert_eq!(
            shared.visible.iter().collect::<std::vec::Vec<_>>(),
            [27, 30]
        );
    }

    fn good_host() -> HostGicv5 {
        HostGicv5 {
            irs: true,
            lpis: true,
            virt: true,
            gcie_legacy: true,
            ppis: PpiSet([0xffff_ffff, 0]),
        }
    }

    #[test]
    fn a_host_missing_features_is_refused_naming_them() {
        assert_eq!(check_host(&good_host()), Ok(()));
        let no_virt = HostGicv5 {
            virt: false,
            ..good_host()
        };
        let e = check_host(&no_virt).unwrap_err();
        assert_eq!(
            e.to_string(),
            "GICv5 host lacks what Pinfold needs: virtualisation (IRS_IDR0.VIRT)"
        );
        let no_lpi_no_virt = HostGicv5 {
            lpis: false,
            virt: false,
            ..good_host()
        };
        let names: std::vec::Vec<_> = check_host(&no_lpi_no_virt).unwrap_err().names().collect();
        assert_eq!(
            names,
            [
                "LPIs (IRS_IDR2.LPI, for IPIs)",
                "virtualisation (IRS_IDR0.VIRT)"
            ]
        );
    }

    #[test]
    fn interface_choice_per_partition() {
        let h = good_host();
        assert_eq!(
            choose_interface(GicRequest::Auto, None),
            Ok(GicInterface::V3)
        );
        assert!(choose_interface(GicRequest::V5, None).is_err());
        assert_eq!(
            choose_interface(GicRequest::Auto, Some(&h)),
            Ok(GicInterface::V5)
        );
        assert_eq!(
            choose_interface(GicRequest::V3, Some(&h)),
            Ok(GicInterface::V3)
        );
        let no_legacy = HostGicv5 {
            gcie_legacy: false,
            ..h
        };
        assert!(choose_interface(GicRequest::V3, Some(&no_legacy))
            .unwrap_err()
            .contains("FEAT_GCIE_LEGACY"));
    }

    #[test]
    fn core_intids_map_onto_gicv5_types() {
        assert_eq!(CoreIntid::from_core(3), CoreIntid::Sgi(3));
        assert_eq!(CoreIntid::from_core(27), CoreIntid::Ppi(27));
        assert_eq!(CoreIntid::from_core(40), CoreIntid::Spi(8));
        assert_eq!(ipi_lpi(8192, 1, 2), 8192 + 18);
    }
}
