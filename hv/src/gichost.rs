//! The host's GIC as found, and the interrupt controller interface each
//! partition gets on it.
//!
//! [`GicFound`] is what the API's host view shows (`HOST_INFO`'s `gic`,
//! ABI 3.3): the version (3, 4, 5), GICv4.1 or not, the ITS count, LPIs,
//! and whether the hardware can inject vLPIs and vSGIs directly. It starts
//! from the host description ([`GicFound::from_description`]: all the build
//! knows) and, at boot, the platform reads the GICv3 ID registers
//! ([`GicV3Ids`]: GICD_PIDR2, GICD_TYPER, every GICR_TYPER, every
//! GITS_TYPER) and this module decodes them ([`GicFound::from_v3_ids`]);
//! on a GICv5 the platform's `gicv5::init` makes it from what the IRS's
//! IDR registers and the boot CPU's ICC_IDR0_EL1 and PPI probe told the
//! driver ([`GicFound::from_v5`]: the IRS count, LPIs, GCIE_LEGACY; GIC_INFO
//! carries those, `manage::gic_info`). What else `vgic5::check_host` probes
//! (IRS_IDR0.VIRT, the timer PPIs) is not reported: a GICv5 without it
//! does not boot. These are what the hardware offers; whether Pinfold uses direct
//! injection is a separate matter (docs/GICV5.md, docs/DEVICES.md).
//!
//! [`interface_for`] is the plan's `gic` field through
//! `vgic5::choose_interface` against the host, as a plan `Rejection` naming
//! the field (`partition "alpha": gic: ...`): the same check runs at build
//! time (the xtask, against the board's DT), at boot (`Partition::build`)
//! and for partitions created or changed at run time (`runtime`).

use alloc::string::String;
use alloc::vec::Vec;

use crate::dtb::GicInfo;
use crate::vgic::v40::LpiDelivery;
use crate::vgic::v41::SgiDelivery;
use crate::vgic5::{choose_interface, GicInterface, GicRequest, HostGicv5, PpiSet};
use pinfold_config::rules::{Problem, Rejection};
use pinfold_config::{GicSetting, PartitionPlan};

// GICD_PIDR2 (GICD + 0xFFE8) ArchRev [7:4] (IHI 0069, 12.9.25).
const PIDR2_ARCHREV_SHIFT: u32 = 4;
// GICD_TYPER (GICD + 0x0004) LPIS [17].
const GICD_TYPER_LPIS: u32 = 1 << 17;
// GICR_TYPER (RD_base + 0x0008): PLPIS [0], VLPIS [1], RVPEID [7].
const GICR_TYPER_PLPIS: u64 = 1 << 0;
const GICR_TYPER_VLPIS: u64 = 1 << 1;
const GICR_TYPER_RVPEID: u64 = 1 << 7;
// GITS_TYPER (ITS_base + 0x0008): Virtual [1] (decided in `v40`).
#[cfg(test)]
const GITS_TYPER_VIRTUAL: u64 = 1 << 1;

/// The GICv3/v4 ID registers the platform reads once at boot (it decodes
/// nothing itself).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GicV3Ids {
    pub gicd_pidr2: u32,
    pub gicd_typer: u32,
    /// Every redistributor's GICR_TYPER, in frame order.
    pub gicr_typers: Vec<u64>,
    /// Every described ITS's GITS_TYPER, in `GicInfo::its` order.
    pub gits_typers: Vec<u64>,
}

/// What the host's GIC is and offers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GicFound {
    /// 3, 4 or 5.
    pub version: u8,
    /// GICv4.1 (every redistributor's GICR_TYPER.RVPEID); false on v4.0.
    pub v4_1: bool,
    /// ITSes described (GICv3/v4: "arm,gic-v3-its" / MADT GIC ITS; GICv5:
    /// the IRSes' ITS config frames).
    pub its_count: u32,
    /// GICD_TYPER.LPIS and the redistributors' GICR_TYPER.PLPIS (GICv5:
    /// IRS_IDR2.LPI).
    pub lpis: bool,
    /// Direct vLPI injection: GICv4, every GICR_TYPER.VLPIS and an ITS with
    /// GITS_TYPER.Virtual.
    pub direct_vlpi: bool,
    /// Direct vSGI injection: GICv4.1 as `vgic::v41::SgiDelivery::choose`
    /// decides it (every redistributor VLPIS+RVPEID+VSGI, an ITS with
    /// Virtual+VMAPP+VSGI).
    pub direct_vsgi: bool,
    /// The ID registers were read (at boot); false when only the
    /// description was seen (the build's check).
    pub probed: bool,
    /// GICv5 hosts: IRSes described.
    pub irs_count: u32,
    /// GICv5 hosts: what the host offers for `vgic5::choose_interface`.
    pub v5: Option<HostGicv5>,
}

impl GicFound {
    /// What the description alone says (no register read). A GICv5's
    /// IRSes are counted and it is known to have one; what only its
    /// registers tell (LPIs, VIRT, GCIE_LEGACY, the PPIs) stays unknown
    /// (false) until [`GicFound::from_v5`].
    pub fn from_description(gic: &GicInfo) -> GicFound {
        let irs_count = gic.v5.as_ref().map_or(0, |v5| v5.irs.len() as u32);
        GicFound {
            version: gic.version,
            its_count: gic.its.len() as u32,
            irs_count,
            v5: gic
                .v5
                .as_ref()
                .map(|v5| HostGicv5::described(!v5.irs.is_empty(), PpiSet::EMPTY)),
            ..GicFound::default()
        }
    }

    /// A GICv5 as the platform found it at boot: the IRS's IDR registers
    /// and the boot CPU's ICC_IDR0_EL1 and PPI probe (`host`, filled by
    /// the driver's `Gicv5Irs::init` and `Gicv5Cpu::probe`).
    pub fn from_v5(gic: &GicInfo, host: &HostGicv5) -> GicFound {
        GicFound {
            version: 5,
            v4_1: false,
            its_count: gic.its.len() as u32,
            lpis: host.lpis,
            direct_vlpi: false,
            direct_vsgi: false,
            probed: true,
            irs_count: gic.v5.as_ref().map_or(0, |v5| v5.irs.len() as u32),
            v5: Some(*host),
        }
    }

    /// The description refined by the ID registers of a GICv3/v4.
    pub fn from_v3_ids(gic: &GicInfo, ids: &GicV3Ids) -> GicFound {
        let version = match (ids.gicd_pidr2 >> PIDR2_ARCHREV_SHIFT) & 0xF {
            rev @ (3 | 4) => rev as u8,
            // Not an architected GICv3/v4 revision: keep what the
            // description says.
            _ => gic.version,
        };
        let all_rd = |bits: u64| {
            !ids.gicr_typers.is_empty() && ids.gicr_typers.iter().all(|t| t & bits == bits)
        };
        let v4 = version == 4;
        let direct_vsgi = v4
            && ids
                .gits_typers
                .iter()
                .any(|&t| SgiDelivery::choose(&ids.gicr_typers, Some(t)) == SgiDelivery::Direct);
        GicFound {
            version,
            v4_1: v4 && all_rd(GICR_TYPER_VLPIS | GICR_TYPER_RVPEID),
            its_count: gic.its.len() as u32,
            lpis: ids.gicd_typer & GICD_TYPER_LPIS != 0 && all_rd(GICR_TYPER_PLPIS),
            direct_vlpi: v4
                && ids.gits_typers.iter().any(|&t| {
                    LpiDelivery::choose(&ids.gicr_typers, Some(t), true) == LpiDelivery::Direct
                }),
            direct_vsgi,
            probed: true,
            irs_count: 0,
            v5: None,
        }
    }

    /// "v3", "v4.0", "v4.1", "v5": the revision as the host view spells it.
    pub fn revision(&self) -> &'static str {
        match (self.version, self.v4_1) {
            (5, _) => "v5",
            (4, true) => "v4.1",
            (4, false) => "v4.0",
            _ => "v3",
        }
    }
}

impl core::fmt::Display for GicFound {
    /// `GICv3 (v3), 1 ITS, LPIs, direct vLPI no, direct vSGI no`.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let yes = |b: bool| if b { "yes" } else { "no" };
        write!(
            f,
            "GICv{} ({}), {} ITS, LPIs {}, direct vLPI {}, direct vSGI {}",
            self.version,
            self.revision(),
            self.its_count,
            yes(self.lpis),
            yes(self.direct_vlpi),
            yes(self.direct_vsgi)
        )?;
        if let Some(v5) = &self.v5 {
            write!(
                f,
                ", {} IRS, GCIE_LEGACY {}",
                self.irs_count,
                yes(v5.gcie_legacy)
            )?;
        }
        if !self.probed {
            f.write_str(" (from the description only)")?;
        }
        Ok(())
    }
}

/// Which interrupt-chip driver the platform brings up and which root IRQ
/// handler its call sites are patched to: decided once, from the host
/// description, before the platform touches the GIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostGic {
    /// GICv3/v4: distributor, redistributors, ICC_* (`drivers::gicv3`).
    V3,
    /// GICv5: the IRS, ICC_* of GICv5, GIC CDxx (`drivers::gicv5`).
    V5,
}

impl HostGic {
    pub fn of(gic: &GicInfo) -> HostGic {
        if gic.v5.is_some() {
            HostGic::V5
        } else {
            HostGic::V3
        }
    }
}

/// The plan's `gic` as `vgic5`'s request.
pub const fn request(setting: GicSetting) -> GicRequest {
    match setting {
        GicSetting::Auto => GicRequest::Auto,
        GicSetting::V3 => GicRequest::V3,
        GicSetting::V5 => GicRequest::V5,
    }
}

/// The interface partition `plan` gets on this host, or the rule it breaks
/// (field `gic`, `vgic5::choose_interface`'s reason).
pub fn interface_for(plan: &PartitionPlan, gic: &GicFound) -> Result<GicInterface, Rejection> {
    choose_interface(request(plan.gic), gic.v5.as_ref()).map_err(|reason| Rejection {
        partition: String::from(plan.name.as_str()),
        field: String::from("gic"),
        problem: Problem::GicUnavailable { reason },
    })
}

/// Every partition's interface, in plan order; the first refusal stops it.
pub fn check_plan(
    partitions: &[PartitionPlan],
    gic: &GicFound,
) -> Result<Vec<GicInterface>, Rejection> {
    partitions.iter().map(|p| interface_for(p, gic)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec;

    fn gic(its: usize) -> GicInfo {
        GicInfo {
            version: 3,
            dist: (0x0800_0000, 0x1_0000),
            redist_regions: vec![(0x080a_0000, 0xf6_0000)],
            redist_stride: None,
            maintenance_intid: Some(25),
            its: vec![(0x0808_0000, 0x2_0000); its],
            found: GicFound::default(),
            v5: None,
        }
    }

    /// QEMU virt `gic-version=3` with its ITS: ArchRev 3, LPIs, nothing
    /// virtual.
    fn qemu_v3() -> GicV3Ids {
        GicV3Ids {
            gicd_pidr2: 0x3b,
            gicd_typer: 0x0378_ff04 | GICD_TYPER_LPIS,
            gicr_typers: vec![0x0000_0000_0000_0001, 0x0000_0001_0000_0101],
            gits_typers: vec![0x0000_0000_000f_ff01 | 1 << 19],
        }
    }

    #[test]
    fn a_gicv3_with_an_its_reports_lpis_and_no_direct_injection() {
        let found = GicFound::from_v3_ids(&gic(1), &qemu_v3());
        assert_eq!(found.version, 3);
        assert_eq!(found.revision(), "v3");
        assert_eq!(found.its_count, 1);
        assert!(found.lpis);
        assert!(!found.direct_vlpi && !found.direct_vsgi && !found.v4_1);
        assert!(found.probed);
        assert_eq!(
            found.to_string(),
            "GICv3 (v3), 1 ITS, LPIs yes, direct vLPI no, direct vSGI no"
        );
    }

    #[test]
    fn a_gicv4_0_reports_direct_vlpis_but_no_vsgis() {
        let mut ids = qemu_v3();
        ids.gicd_pidr2 = 0x4b;
        for t in &mut ids.gicr_typers {
            *t |= GICR_TYPER_VLPIS;
        }
        ids.gits_typers[0] |= GITS_TYPER_VIRTUAL;
        let found = GicFound::from_v3_ids(&gic(1), &ids);
        assert_eq!(found.revision(), "v4.0");
        assert!(found.direct_vlpi);
        assert!(!found.direct_vsgi);
        // One redistributor without VLPIS: no direct vLPIs on this host.
        ids.gicr_typers[1] &= !GICR_TYPER_VLPIS;
        assert!(!GicFound::from_v3_ids(&gic(1), &ids).direct_vlpi);
    }

    #[test]
    fn a_gicv4_1_with_vsgi_its_reports_direct_vsgis() {
        let mut ids = qemu_v3();
        ids.gicd_pidr2 = 0x4b;
        for t in &mut ids.gicr_typers {
            *t |= GICR_TYPER_VLPIS | GICR_TYPER_RVPEID | 1 << 26;
        }
        // The second ITS has VSGI (Virtual, VSGI [39], VMAPP [40]).
        ids.gits_typers.push(GITS_TYPER_VIRTUAL | 1 << 39 | 1 << 40);
        let found = GicFound::from_v3_ids(&gic(2), &ids);
        assert_eq!(found.revision(), "v4.1");
        assert!(found.direct_vlpi && found.direct_vsgi);
        assert_eq!(found.its_count, 2);
        // The same registers read on a GICv3 (ArchRev 3): nothing virtual.
        ids.gicd_pidr2 = 0x3b;
        let v3 = GicFound::from_v3_ids(&gic(2), &ids);
        assert!(!v3.direct_vlpi && !v3.direct_vsgi && !v3.v4_1);
    }

    #[test]
    fn a_gicv3_without_lpis_says_so() {
        let mut ids = qemu_v3();
        ids.gicd_typer &= !GICD_TYPER_LPIS;
        assert!(!GicFound::from_v3_ids(&gic(0), &ids).lpis);
    }

    fn plan(gic: GicSetting) -> PartitionPlan {
        let mut p = PartitionPlan::new(
            "alpha".into(),
            vec![1],
            64 << 20,
            pinfold_config::KernelPlan {
                image: 0,
                format: pinfold_config::KernelFormat::LinuxImage,
            },
        );
        p.gic = gic;
        p
    }

    #[test]
    fn v5_on_a_gicv3_host_is_refused_naming_the_field() {
        let host = GicFound::from_v3_ids(&gic(1), &qemu_v3());
        let e = interface_for(&plan(GicSetting::V5), &host).unwrap_err();
        assert_eq!(e.field, "gic");
        assert_eq!(
            e.to_string(),
            "partition \"alpha\": gic: gic = \"v5\" needs a GICv5 host; this host has a GICv3"
        );
        assert!(!e.conflict());
    }

    #[test]
    fn auto_and_v3_get_the_gicv3_interface_on_a_gicv3_host() {
        let host = GicFound::from_description(&gic(1));
        let plans = [plan(GicSetting::Auto), plan(GicSetting::V3)];
        assert_eq!(
            check_plan(&plans, &host),
            Ok(vec![GicInterface::V3, GicInterface::V3])
        );
    }

    #[test]
    fn a_gicv3_description_picks_the_gicv3_driver() {
        assert_eq!(HostGic::of(&gic(1)), HostGic::V3);
        assert_eq!(GicFound::from_description(&gic(1)).v5, None);
    }

    #[test]
    fn a_gicv5_found_at_boot_shows_its_irs_count_lpis_and_gcie_legacy() {
        let info = crate::dtb::Gicv5Info {
            irs: vec![
                crate::dtb::Gicv5Irs {
                    config: (0x2f1a_0000, 0x1_0000),
                    cpus: vec![(0, 0)],
                    its: vec![(0x2f12_0000, 0x1_0000)],
                },
                crate::dtb::Gicv5Irs {
                    config: (0x2f1b_0000, 0x1_0000),
                    cpus: vec![(0x100, 1)],
                    its: vec![],
                },
            ],
            maintenance_ppi: Some(25),
            its_translate: vec![None],
        };
        let gic = GicInfo::gicv5(info);
        assert_eq!(HostGic::of(&gic), HostGic::V5);
        let host = HostGicv5 {
            irs: true,
            lpis: true,
            virt: true,
            gcie_legacy: true,
            ppis: PpiSet([0xffff_ffff, 0]),
        };
        let found = GicFound::from_v5(&gic, &host);
        assert_eq!(found.revision(), "v5");
        assert_eq!((found.irs_count, found.its_count), (2, 1));
        assert!(found.lpis && found.probed);
        assert_eq!(found.v5, Some(host));
        assert_eq!(
            found.to_string(),
            "GICv5 (v5), 1 ITS, LPIs yes, direct vLPI no, direct vSGI no, 2 IRS, GCIE_LEGACY yes"
        );
    }

    #[test]
    fn on_a_gicv5_host_v3_needs_gcie_legacy() {
        let mut host = GicFound {
            version: 5,
            irs_count: 1,
            v5: Some(HostGicv5 {
                irs: true,
                lpis: true,
                virt: true,
                gcie_legacy: false,
                ppis: PpiSet([u64::MAX, 0]),
            }),
            ..GicFound::default()
        };
        assert_eq!(
            interface_for(&plan(GicSetting::Auto), &host),
            Ok(GicInterface::V5)
        );
        let e = interface_for(&plan(GicSetting::V3), &host).unwrap_err();
        assert!(e.to_string().contains("FEAT_GCIE_LEGACY"), "{e}");
        if let Some(v5) = host.v5.as_mut() {
            v5.gcie_legacy = true;
        }
        assert_eq!(
            interface_for(&plan(GicSetting::V3), &host),
            Ok(GicInterface::V3)
        );
        assert_eq!(host.revision(), "v5");
    }
}
