//! A host GICv5 as the devicetree describes it (the binding Linux 6.17+
//! uses, bindings/interrupt-controller/arm,gic-v5.yaml): an "arm,gic-v5"
//! node (`#interrupt-cells` = 3: type, ID, flags; type 1 = PPI, 3 = SPI)
//! with one "arm,gic-v5-irs" child per IRS, whose first `reg` window is its
//! config frame, whose `cpus` names the CPUs it serves and whose
//! `arm,iaffids` (16-bit cells) gives each of them its interrupt affinity
//! ID, and whose "arm,gic-v5-its" children are its ITSes: each one's
//! config frame its first `reg` window, its translate frame (where devices
//! write their MSIs) the window a child (the binding's `msi-controller`)
//! names `reg-names = "ns-translate"`, as Linux's
//! `its_translate_frame_address` finds it.
//!
//! `parse_host_dtb` recognises a GICv5 host through this module: the host
//! description then carries it (`GicInfo::v5`, version 5), every interrupt
//! specifier is read in the GICv5 form into the core's numbers, and the
//! host is refused when its description lacks what the core needs
//! (`vgic5::check_described`: `DtbError::Gicv5Lacks` naming each missing
//! feature) or a CPU has no IAFFID. The platform then picks the GICv5
//! driver (`gichost::HostGic`; docs/GICV5.md).

use super::{DtbError, Known, Tree};
use alloc::vec::Vec;

/// One IRS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gicv5Irs {
    /// The config frame (base, size): the first `reg` window.
    pub config: (u64, u64),
    /// MPIDR of each CPU this IRS serves (from `cpus`), with its IAFFID.
    pub cpus: Vec<(u64, u16)>,
    /// (base, size) of each enabled ITS child's first frame.
    pub its: Vec<(u64, u64)>,
}

/// A host GICv5.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gicv5Info {
    pub irs: Vec<Gicv5Irs>,
    /// The virtual interface maintenance PPI (the node's `interrupts`).
    pub maintenance_ppi: Option<u32>,
    /// Each ITS's translate frame (base, size), in `GicInfo::its` order
    /// (the IRSes' ITSes in turn, then the ACPI ITSes under no IRS); None
    /// for an ITS that names none (its devices get no MSI).
    pub its_translate: Vec<Option<(u64, u64)>>,
}

impl Gicv5Info {
    /// Every CPU's (MPIDR, IAFFID), over all IRSes.
    pub fn cpus(&self) -> impl Iterator<Item = (u64, u16)> + '_ {
        self.irs.iter().flat_map(|i| i.cpus.iter().copied())
    }
}

/// The translate frame of ITS node `its`: the `reg` window named
/// "ns-translate" of the first enabled child that names one.
fn translate_frame(tree: &Tree, its: usize) -> Option<(u64, u64)> {
    tree.children(its)
        .filter(|&c| tree.enabled(c))
        .find_map(|c| {
            let names = tree.strings_prop(c, "reg-names");
            let at = names.iter().position(|n| n == "ns-translate")?;
            tree.reg(c).ok()?.get(at).copied()
        })
}

pub(super) fn parse(tree: &Tree, gic: usize) -> Result<Gicv5Info, DtbError> {
    let mut irs = Vec::new();
    let mut its_translate = Vec::new();
    for i in tree
        .children(gic)
        .filter(|&i| tree.is_compatible(i, &["arm,gic-v5-irs"]) && tree.enabled(i))
    {
        let config = *tree.reg(i)?.first().ok_or_else(|| tree.bad(i, "reg"))?;
        let phandles = tree
            .cells_prop(i, "cpus")?
            .ok_or_else(|| tree.missing(i, "cpus"))?;
        let iaffids = tree
            .prop(i, "arm,iaffids")
            .ok_or_else(|| tree.missing(i, "arm,iaffids"))?;
        if iaffids.len() != 2 * phandles.len() {
            return Err(tree.bad(i, "arm,iaffids"));
        }
        let mut cpus = Vec::with_capacity(phandles.len());
        for n in 0..phandles.len() {
            let cpu = tree
                .by_phandle(phandles.get(n))
                .ok_or_else(|| tree.bad(i, "cpus"))?;
            let reg = tree
                .cells_prop(cpu, Known::Reg)?
                .ok_or_else(|| tree.missing(cpu, "reg"))?;
            let cells = reg.len().min(2);
            if cells == 0 {
                return Err(tree.bad(cpu, "reg"));
            }
            let iaffid = u16::from_be_bytes([iaffids[2 * n], iaffids[2 * n + 1]]);
            cpus.push((reg.read(0, cells), iaffid));
        }
        let mut its = Vec::new();
        for c in tree
            .children(i)
            .filter(|&c| tree.is_compatible(c, &["arm,gic-v5-its"]) && tree.enabled(c))
        {
            let Some(frame) = tree.reg(c).ok().and_then(|r| r.first().copied()) else {
                continue;
            };
            its.push(frame);
            its_translate.push(translate_frame(tree, c));
        }
        irs.push(Gicv5Irs { config, cpus, its });
    }
    if irs.is_empty() {
        return Err(DtbError::MissingNode("arm,gic-v5-irs"));
    }
    let maintenance_ppi = match tree.cells_prop(gic, Known::Interrupts)? {
        Some(c) if c.len() >= 3 && c.get(0) == 1 => Some(c.get(1)),
        Some(_) => return Err(tree.bad(gic, "interrupts")),
        None => None,
    };
    Ok(Gicv5Info {
        irs,
        maintenance_ppi,
        its_translate,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::super::parse_host_dtb;
    use super::*;
    use crate::dtb::FdtWriter;
    use alloc::string::ToString;

    fn node(w: &mut FdtWriter, name: &str, body: impl FnOnce(&mut FdtWriter)) {
        let t = w.begin_node(name).unwrap();
        body(w);
        w.end_node(t).unwrap();
    }

    /// A two-CPU GICv5 host in the Linux 6.17 binding's shape (the
    /// binding's example with the IAFFIDs swapped, so order matters).
    pub(crate) fn gicv5_dtb(iaffids: &[u16]) -> Vec<u8> {
        gicv5_host_dtb(iaffids, None, 2)
    }

    /// The same host with `cpus` CPUs in /cpus (the IRS still serves the
    /// first two), a PL011 on SPI 1 and, with `timer`, an
    /// "arm,armv8-timer" whose four GICv5 PPI specifiers are `timer`.
    pub(crate) fn gicv5_host_dtb(iaffids: &[u16], timer: Option<[u32; 4]>, cpus: u32) -> Vec<u8> {
        gicv5_host_dtb_with(iaffids, timer, cpus, None)
    }

    /// [`gicv5_host_dtb`] with, when `msi_map` is given, an ECAM host
    /// bridge whose `msi-map` is it (the ITS's translate frame child has
    /// phandle 0x20).
    fn gicv5_host_dtb_with(
        iaffids: &[u16],
        timer: Option<[u32; 4]>,
        cpus: u32,
        msi_map: Option<&[u32]>,
    ) -> Vec<u8> {
        let mut w = FdtWriter::new();
        node(&mut w, "", |w| {
            w.prop_u32("#address-cells", 2).unwrap();
            w.prop_u32("#size-cells", 2).unwrap();
            w.prop_u32("interrupt-parent", 1).unwrap();
            node(w, "memory@80000000", |w| {
                w.prop_string("device_type", "memory").unwrap();
                w.prop_cells("reg", &[0, 0x8000_0000, 0, 0x4000_0000])
                    .unwrap();
            });
            node(w, "cpus", |w| {
                w.prop_u32("#address-cells", 1).unwrap();
                w.prop_u32("#size-cells", 0).unwrap();
                for (n, mpidr) in [0u32, 0x100, 0x200]
                    .into_iter()
                    .take(cpus as usize)
                    .enumerate()
                {
                    node(w, &alloc::format!("cpu@{mpidr:x}"), |w| {
                        w.prop_string("device_type", "cpu").unwrap();
                        w.prop_u32("reg", mpidr).unwrap();
                        w.prop_u32("phandle", 10 + n as u32).unwrap();
                    });
                }
            });
            node(w, "interrupt-controller", |w| {
                w.prop_string("compatible", "arm,gic-v5").unwrap();
                w.prop_u32("#interrupt-cells", 3).unwrap();
                w.prop_u32("#address-cells", 2).unwrap();
                w.prop_u32("#size-cells", 2).unwrap();
                w.prop_null("ranges").unwrap();
                w.prop_null("interrupt-controller").unwrap();
                w.prop_cells("interrupts", &[1, 25, 4]).unwrap();
                w.prop_u32("phandle", 1).unwrap();
                node(w, "irs@2f1a0000", |w| {
                    w.prop_string("compatible", "arm,gic-v5-irs").unwrap();
                    w.prop_u32("#address-cells", 2).unwrap();
                    w.prop_u32("#size-cells", 2).unwrap();
                    w.prop_null("ranges").unwrap();
                    w.prop_cells("reg", &[0, 0x2f1a_0000, 0, 0x1_0000]).unwrap();
                    w.prop_string("reg-names", "ns-config").unwrap();
                    w.prop_cells("cpus", &[10, 11]).unwrap();
                    let bytes: Vec<u8> = iaffids.iter().flat_map(|i| i.to_be_bytes()).collect();
                    w.prop("arm,iaffids", &bytes).unwrap();
                    node(w, "its@2f120000", |w| {
                        w.prop_string("compatible", "arm,gic-v5-its").unwrap();
                        w.prop_cells("reg", &[0, 0x2f12_0000, 0, 0x1_0000]).unwrap();
                        w.prop_string("reg-names", "ns-config").unwrap();
                        w.prop_u32("#address-cells", 2).unwrap();
                        w.prop_u32("#size-cells", 2).unwrap();
                        w.prop_null("ranges").unwrap();
                        node(w, "msi-controller@2f130000", |w| {
                            w.prop_cells("reg", &[0, 0x2f13_0000, 0, 0x1_0000]).unwrap();
                            w.prop_string("reg-names", "ns-translate").unwrap();
                            w.prop_u32("#msi-cells", 1).unwrap();
                            w.prop_null("msi-controller").unwrap();
                            w.prop_u32("phandle", 0x20).unwrap();
                        });
                    });
                });
            });
            if let Some(ppis) = timer {
                node(w, "timer", |w| {
                    w.prop_string("compatible", "arm,armv8-timer").unwrap();
                    let cells: Vec<u32> = ppis.iter().flat_map(|&p| [1, p, 4]).collect();
                    w.prop_cells("interrupts", &cells).unwrap();
                });
            }
            node(w, "pl011@9000000", |w| {
                w.prop_string("compatible", "arm,pl011").unwrap();
                w.prop_cells("reg", &[0, 0x0900_0000, 0, 0x1000]).unwrap();
                w.prop_cells("interrupts", &[3, 1, 4]).unwrap();
            });
            if let Some(map) = msi_map {
                node(w, "pcie@10000000", |w| {
                    w.prop_string("compatible", "pci-host-ecam-generic")
                        .unwrap();
                    w.prop_string("device_type", "pci").unwrap();
                    w.prop_u32("#address-cells", 3).unwrap();
                    w.prop_u32("#size-cells", 2).unwrap();
                    w.prop_cells("reg", &[0x40, 0x1000_0000, 0, 0x1000_0000])
                        .unwrap();
                    w.prop_cells("msi-map", map).unwrap();
                });
            }
        });
        w.finish().unwrap()
    }

    /// The binding's timer order: secure phys, phys, virt, hyp.
    const TIMER: [u32; 4] = [29, 30, 27, 26];

    #[test]
    fn a_bridges_msi_map_naming_a_gicv5_translate_frame_routes_to_its_its() {
        let dtb = gicv5_host_dtb_with(&[0, 1], Some(TIMER), 2, Some(&[0, 0x20, 0, 0x100]));

        let host = parse_host_dtb(&dtb).unwrap();

        let map = &host.pcie.unwrap().msi_map;
        assert_eq!(map.len(), 1);
        assert_eq!(map[0].its_base, 0x2f12_0000, "the ITS's config frame");
        assert_eq!(host.gic.its, [(0x2f12_0000, 0x1_0000)]);
    }

    #[test]
    fn an_its_translate_frame_is_read_beside_its_config_frame_and_kept_from_guests() {
        let host = parse_host_dtb(&gicv5_host_dtb(&[0, 1], Some(TIMER), 2)).unwrap();

        let v5 = host.gic.v5.as_ref().unwrap();
        assert_eq!(host.gic.its, [(0x2f12_0000, 0x1_0000)], "the config frame");
        assert_eq!(v5.its_translate, [Some((0x2f13_0000, 0x1_0000))]);
        let res = crate::dtb::host_resources(&host, &[]);
        assert!(res.gic.contains(&(0x2f13_0000, 0x1_0000)), "{:x?}", res.gic);
    }

    #[test]
    fn gicv5_host_dt_is_parsed_into_irs_cpus_and_iaffids() {
        let blob = gicv5_dtb(&[1, 0]);
        let tree = Tree::index(&blob).unwrap();
        let gic = tree.primary_gic_any().unwrap();
        let info = parse(&tree, gic).unwrap();
        assert_eq!(
            info,
            Gicv5Info {
                irs: alloc::vec![Gicv5Irs {
                    config: (0x2f1a_0000, 0x1_0000),
                    cpus: alloc::vec![(0, 1), (0x100, 0)],
                    its: alloc::vec![(0x2f12_0000, 0x1_0000)],
                }],
                maintenance_ppi: Some(25),
                its_translate: alloc::vec![Some((0x2f13_0000, 0x1_0000))],
            }
        );
    }

    #[test]
    fn a_gicv5_host_is_described_with_its_irs_and_gicv5_interrupt_numbers() {
        let host = parse_host_dtb(&gicv5_host_dtb(&[0, 1], Some(TIMER), 2)).unwrap();
        assert_eq!(host.gic.version, 5);
        let v5 = host.gic.v5.as_ref().expect("the GICv5");
        assert_eq!(v5.irs[0].config, (0x2f1a_0000, 0x1_0000));
        assert_eq!(v5.cpus().collect::<Vec<_>>(), [(0, 0), (0x100, 1)]);
        assert_eq!(host.gic.its, [(0x2f12_0000, 0x1_0000)]);
        assert_eq!(host.gic.maintenance_intid, Some(25));
        // GICv5 PPI n is core INTID n (not 16 + n as for a GICv3 PPI).
        let t = host.timer.unwrap();
        assert_eq!((t.sec_phys, t.phys, t.virt, t.hyp), (29, 30, 27, 26));
        // GICv5 SPI 1 is core INTID 33.
        assert_eq!(host.uart.unwrap().intid, Some(33));
        assert_eq!(
            crate::gichost::HostGic::of(&host.gic),
            crate::gichost::HostGic::V5
        );
        // The host view from the description alone: version 5, one IRS,
        // what only registers tell still unknown.
        let found = &host.gic.found;
        assert_eq!(
            (found.version, found.irs_count, found.probed),
            (5, 1, false)
        );
        assert!(found.v5.is_some_and(|h| h.irs && !h.virt));
        // The IRS config frame is the GIC's: no plan may map it.
        let r = super::super::host_resources(&host, &[]);
        assert!(r.gic.contains(&(0x2f1a_0000, 0x1_0000)), "{:?}", r.gic);
        assert!(!r.gic.contains(&(0, 0)));
    }

    #[test]
    fn a_gicv5_host_without_the_timer_ppis_is_refused_naming_them() {
        let e = parse_host_dtb(&gicv5_host_dtb(&[0, 1], None, 2)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "GICv5 host lacks what Pinfold needs: the EL1 virtual timer PPI 27, \
             the EL1 physical timer PPI 30, the EL2 physical timer PPI 26"
        );
        // A timer node whose hyp timer is not PPI 26.
        let e = parse_host_dtb(&gicv5_host_dtb(&[0, 1], Some([29, 30, 27, 28]), 2)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "GICv5 host lacks what Pinfold needs: the EL2 physical timer PPI 26"
        );
    }

    #[test]
    fn a_gicv5_host_cpu_no_irs_serves_is_refused() {
        let e = parse_host_dtb(&gicv5_host_dtb(&[0, 1], Some(TIMER), 3)).unwrap_err();
        assert_eq!(e, DtbError::Gicv5CpuWithoutIaffid { mpidr: 0x200 });
    }

    #[test]
    fn iaffids_must_match_the_cpus() {
        let blob = gicv5_dtb(&[0]);
        let tree = Tree::index(&blob).unwrap();
        let gic = tree.primary_gic_any().unwrap();
        assert_eq!(
            parse(&tree, gic),
            Err(DtbError::BadProperty {
                node: "/interrupt-controller/irs@2f1a0000".into(),
                prop: "arm,iaffids"
            })
        );
    }
}
