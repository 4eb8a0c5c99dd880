//! Which IRS of a GICv5 host with several (one per socket, or more) each
//! operation goes to, decided here and applied by the platform
//! (`platform/src/gicv5.rs`) through one `drivers::gicv5::Gicv5Irs` per
//! IRS.
//!
//! Each IRS serves a set of CPUs (DT `arm,gic-v5-irs` `cpus` +
//! `arm,iaffids`, ACPI GICC IRS ID) and its own range of SPI IDs
//! (IRS_IDR7.SPI_BASE, IRS_IDR6.SPI_IRS_RANGE; IRS_IDR5.SPI_RANGE is the
//! system's total): [`IrsRoutes`]. What follows from it, as Linux's GICv5
//! IRS driver (`irq-gic-v5-irs.c`) does it:
//! - every IRS is enabled (IRS_CR0.IRSEN), each CPU's PE is set up on the
//!   IRS that serves it ([`IrsRoutes::of_cpu`]);
//! - the LPI space is global: only one IRS, the first described
//!   ([`IrsRoutes::IST_OWNER`]), is given the LPI IST (IRS_IST_BASER);
//!   Linux's `gicv5_irs_enable` does exactly that and no more, so the
//!   other IRSes' IRS_IST_BASER stay invalid;
//! - an SPI's IRS_SPI_SELR/CFGR (trigger) and its GIC CDAFF (route) go to
//!   the IRS whose range holds it ([`IrsRoutes::of_spi`]); one no IRS has
//!   is refused at boot naming the partition and plan field
//!   ([`IrsRoutes::check_spis`]);
//! - the vIRS ([`IrsRoutes::split_virs`]): each vPE (its table entry,
//!   IRS_VMAP_VPER, doorbell) on the IRS serving the CPU its vCPU is
//!   pinned to, each assigned or released SPI on its IRS, and the VM
//!   itself (its VM table entry, IRS_VMAP_VMR/VISTR, the unmap) on every
//!   IRS, each of which has its own VM table: the VM is valid wherever one
//!   of its vPEs or SPIs may be. That every IRS's VM table entry may point
//!   at the same VM descriptor and virtual ISTs is this reading, not a
//!   confirmed fact (docs/GICV5.md, "Still open"); software errors are
//!   drained from every IRS (`System::virs_poll`).
//!
//! Locks: the platform keeps each IRS behind its own counted lock
//! (`lockstat::CountedLock`), not one for all. Every IRS operation is a
//! select-then-act pair on that IRS's own frame (IRS_SPI_SELR then
//! IRS_SPI_CFGR/VMR, IRS_VPE_SELR then IRS_VPE_DBR, IRS_PE_SELR then
//! IRS_PE_CR0), which must not interleave with another on the same
//! frame, and nothing an operation does touches another IRS's frame; so
//! commands to different IRSes (a trigger change on socket 0, a doorbell
//! re-armed on socket 1) need not contend, as Linux's per-IRS
//! `spi_config_lock` has it.

use super::{CoreIntid, VirsMember, VirsOp, VirsRefusal};
use alloc::vec::Vec;
use core::ops::Range;
use pinfold_vboard::same_cpu;

/// One IRS as the core routes to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IrsServes {
    /// The CPUs it serves (the core's CPU indices).
    pub cpus: Vec<usize>,
    /// Its SPI IDs: IRS_IDR7.SPI_BASE .. + IRS_IDR6.SPI_IRS_RANGE.
    pub spis: Range<u32>,
}

/// Every IRS of the host, in description order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IrsRoutes {
    pub irses: Vec<IrsServes>,
}

/// An SPI of a partition's plan, as [`IrsRoutes::check_spis`] takes it:
/// (partition, core INTID, the plan field it comes from).
pub type PlanSpi<'a> = (&'a str, u32, &'static str);

impl IrsRoutes {
    /// The IRS given the LPI IST: the first described, as Linux's
    /// `gicv5_irs_enable` (the LPI ID space is one for the whole system).
    pub const IST_OWNER: usize = 0;

    /// The routes of the host description's IRSes (`irses`, each with its
    /// CPUs by MPIDR), the core's CPUs being `cpus` (MPIDRs, by index), and
    /// each IRS's SPI range as its registers gave it (`spis`, by IRS; an
    /// IRS without one has none).
    pub fn from_description(
        irses: &[crate::dtb::Gicv5Irs],
        cpus: &[u64],
        spis: &[Range<u32>],
    ) -> IrsRoutes {
        let irses = irses
            .iter()
            .enumerate()
            .map(|(n, irs)| IrsServes {
                cpus: cpus
                    .iter()
                    .enumerate()
                    .filter(|&(_, &m)| irs.cpus.iter().any(|&(c, _)| same_cpu(c, m)))
                    .map(|(i, _)| i)
                    .collect(),
                spis: spis.get(n).cloned().unwrap_or(0..0),
            })
            .collect();
        IrsRoutes { irses }
    }

    /// The IRS serving CPU `cpu` (its PE, its doorbell's vPE).
    pub fn of_cpu(&self, cpu: usize) -> Option<usize> {
        self.irses.iter().position(|i| i.cpus.contains(&cpu))
    }

    /// The IRS whose SPI range holds SPI ID `spi`.
    pub fn of_spi(&self, spi: u32) -> Option<usize> {
        self.irses.iter().position(|i| i.spis.contains(&spi))
    }

    /// The IRS of core INTID `intid`, when it is an SPI one has.
    pub fn of_intid(&self, intid: u32) -> Option<usize> {
        match CoreIntid::from_core(intid) {
            CoreIntid::Spi(n) => self.of_spi(n),
            _ => None,
        }
    }

    /// Every partition's SPIs (`spis`) in some IRS's range; the first one
    /// none has is refused naming its partition and plan field.
    pub fn check_spis(&self, spis: &[PlanSpi]) -> Result<(), VirsRefusal> {
        for &(partition, intid, field) in spis {
            if self.of_intid(intid).is_none() {
                let ranges: Vec<_> = self.irses.iter().map(|i| i.spis.clone()).collect();
                return Err(VirsRefusal {
                    partition: partition.into(),
                    field,
                    reason: alloc::format!(
                        "SPI {} is in no IRS's SPI range (the IRSes have {ranges:?})",
                        intid.saturating_sub(32)
                    ),
                });
            }
        }
        Ok(())
    }

    /// The vIRS steps `ops` split by IRS (index = IRS): a vPE's steps to
    /// the IRS serving its vCPU's CPU (`cpu_of(vm, vpe)`), an SPI's to the
    /// IRS whose range holds it, a VM's own steps to every IRS. `Err` is
    /// the first step no IRS can take (a vPE of a CPU no IRS serves, an
    /// SPI in no range): nothing is applied then.
    pub fn split_virs(
        &self,
        ops: &[VirsOp],
        cpu_of: impl Fn(u16, u16) -> Option<usize>,
    ) -> Result<Vec<Vec<VirsOp>>, VirsOp> {
        let mut out = alloc::vec![Vec::new(); self.irses.len()];
        for &op in ops {
            let one = match op {
                VirsOp::WriteVmte { .. }
                | VirsOp::MapVm { .. }
                | VirsOp::MapVist { .. }
                | VirsOp::UnmapVm { .. } => None,
                VirsOp::WriteVpete { vm, vpe, .. }
                | VirsOp::MapVpe { vm, vpe }
                | VirsOp::ArmDoorbell { vm, vpe, .. } => {
                    Some(cpu_of(vm, vpe).and_then(|c| self.of_cpu(c)).ok_or(op)?)
                }
                VirsOp::AssignSpi { spi, .. } | VirsOp::ReleaseSpi { spi } => {
                    Some(self.of_spi(spi).ok_or(op)?)
                }
            };
            match one {
                Some(i) => out[i].push(op),
                None => out.iter_mut().for_each(|o| o.push(op)),
            }
        }
        Ok(out)
    }
}

/// An IRS that did not come up at boot, as the refusal that stops boot
/// names it: its config frame, why, and what it would have served (its
/// CPUs by MPIDR, its SPI range), since none of those has another IRS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IrsDown {
    pub frame: u64,
    pub why: alloc::string::String,
    pub cpus: Vec<u64>,
    pub spis: Range<u32>,
}

impl IrsDown {
    /// The described IRS `irs` with SPI range `spis` (read from its
    /// IRS_IDR7/IDR6 before it was enabled) failed for `why`.
    pub fn new(irs: &crate::dtb::Gicv5Irs, spis: Range<u32>, why: impl core::fmt::Display) -> Self {
        IrsDown {
            frame: irs.config.0,
            why: alloc::format!("{why}"),
            cpus: irs.cpus.iter().map(|&(m, _)| m).collect(),
            spis,
        }
    }
}

impl core::fmt::Display for IrsDown {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "the IRS at {:#x} did not come up ({}); it would have served the CPUs with MPIDR",
            self.frame, self.why
        )?;
        for (n, m) in self.cpus.iter().enumerate() {
            write!(f, "{}{m:#x}", if n == 0 { " " } else { ", " })?;
        }
        write!(f, " and SPIs {:?}", self.spis)
    }
}

/// The CPU vPE `vpe` of VM `vm` is pinned to, among the boot's vIRS
/// `members` (VM = partition index, vPE = vCPU): what
/// [`IrsRoutes::split_virs`] asks to put a vPE on its CPU's IRS.
pub fn vpe_cpu(members: &[VirsMember], vm: u16, vpe: u16) -> Option<usize> {
    members
        .iter()
        .find(|m| m.index == usize::from(vm))
        .and_then(|m| m.cpus.get(usize::from(vpe)))
        .map(|&(cpu, _)| cpu)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vgic5::{Doorbell, VmTables};

    /// Socket 0: CPUs 0 and 1, SPIs 0..32; socket 1: CPUs 2 and 3, SPIs
    /// 32..96.
    fn two_sockets() -> IrsRoutes {
        IrsRoutes {
            irses: alloc::vec![
                IrsServes {
                    cpus: alloc::vec![0, 1],
                    spis: 0..32,
                },
                IrsServes {
                    cpus: alloc::vec![2, 3],
                    spis: 32..96,
                },
            ],
        }
    }

    #[test]
    fn the_description_gives_each_irs_the_core_indices_of_its_cpus() {
        let irs = |cpus: &[u64]| crate::dtb::Gicv5Irs {
            config: (0, 0x1_0000),
            cpus: cpus.iter().map(|&m| (m, m as u16)).collect(),
            its: Vec::new(),
        };
        // The core's CPU order is not the IRSes': socket 1's CPU first.
        let cpus = [0x1_0000, 0x0, 0x1, 0x1_0001];

        let r = IrsRoutes::from_description(
            &[irs(&[0x0, 0x1]), irs(&[0x1_0000, 0x1_0001])],
            &cpus,
            &[0..32, 32..96],
        );

        assert_eq!(r.irses[0].cpus, [1, 2]);
        assert_eq!(r.irses[1].cpus, [0, 3]);
        assert_eq!(r.irses[1].spis, 32..96);
    }

    #[test]
    fn an_irs_that_does_not_come_up_is_named_with_the_cpus_and_spis_it_would_serve() {
        let irs = crate::dtb::Gicv5Irs {
            config: (0x2f1c_0000, 0x1_0000),
            cpus: alloc::vec![(0x1_0000, 2), (0x1_0001, 3)],
            its: Vec::new(),
        };

        let down = IrsDown::new(&irs, 32..96, "Timeout(\"IRS_CR0.IDLE\")");

        assert_eq!(
            alloc::string::ToString::to_string(&down),
            "the IRS at 0x2f1c0000 did not come up (Timeout(\"IRS_CR0.IDLE\")); \
             it would have served the CPUs with MPIDR 0x10000, 0x10001 and SPIs 32..96"
        );
    }

    #[test]
    fn each_cpu_is_served_by_the_irs_that_lists_it() {
        let r = two_sockets();

        let irs: Vec<_> = (0..5).map(|c| r.of_cpu(c)).collect();

        assert_eq!(irs, [Some(0), Some(0), Some(1), Some(1), None]);
    }

    #[test]
    fn an_spi_goes_to_the_irs_whose_range_holds_it_and_no_other() {
        let r = two_sockets();

        let by_id = [0, 31, 32, 95, 96].map(|s| r.of_spi(s));
        let by_intid = [32 + 5, 32 + 40, 16, 3].map(|i| r.of_intid(i));

        assert_eq!(by_id, [Some(0), Some(0), Some(1), Some(1), None]);
        assert_eq!(by_intid, [Some(0), Some(1), None, None]);
    }

    #[test]
    fn an_spi_no_irs_has_is_refused_naming_the_partition_and_field() {
        let r = two_sockets();

        let ok = r.check_spis(&[("alpha", 32 + 3, "devices"), ("beta", 32 + 90, "pci")]);
        let e = r
            .check_spis(&[("alpha", 32 + 3, "devices"), ("beta", 32 + 96, "pci")])
            .unwrap_err();

        assert_eq!(ok, Ok(()));
        assert_eq!(
            alloc::string::ToString::to_string(&e),
            "partition \"beta\": pci: SPI 96 is in no IRS's SPI range (the IRSes have [0..32, 32..96])"
        );
    }

    fn tables() -> VmTables {
        VmTables {
            vmd: 0x1000,
            vpet: 0x2000,
            vpeds: 0x3000,
            lpi_ist: 0x4000,
            spi_ist: 0x8000,
        }
    }

    #[test]
    fn a_vms_vpes_go_to_their_cpus_irs_its_spis_to_theirs_and_the_vm_to_every_irs() {
        let r = two_sockets();
        let db = |lpi| Doorbell { lpi, mpidr: 0 };
        let ops = [
            VirsOp::MapVm { vm: 1 },
            VirsOp::MapVpe { vm: 1, vpe: 0 },
            VirsOp::ArmDoorbell {
                vm: 1,
                vpe: 0,
                db: db(64),
            },
            VirsOp::WriteVpete {
                vm: 1,
                vpe: 1,
                vpet: 0x2000,
                vped: 0x3020,
            },
            VirsOp::ArmDoorbell {
                vm: 1,
                vpe: 1,
                db: db(66),
            },
            VirsOp::AssignSpi { spi: 5, vm: 1 },
            VirsOp::AssignSpi { spi: 40, vm: 1 },
        ];
        // vCPU 0 on CPU 1 (socket 0), vCPU 1 on CPU 2 (socket 1).
        let cpu_of = |_vm, vpe| [1, 2].get(usize::from(vpe)).copied();

        let split = r.split_virs(&ops, cpu_of).unwrap();

        assert_eq!(
            split[0],
            [ops[0], ops[1], ops[2], VirsOp::AssignSpi { spi: 5, vm: 1 }]
        );
        assert_eq!(
            split[1],
            [ops[0], ops[3], ops[4], VirsOp::AssignSpi { spi: 40, vm: 1 }]
        );
    }

    #[test]
    fn a_release_gives_each_spi_back_on_its_irs_and_unmaps_the_vm_on_every_irs() {
        let r = two_sockets();
        let ops = crate::vgic5::release_virs(1, &[32 + 5, 32 + 40]);

        let split = r.split_virs(&ops, |_, _| None).unwrap();

        assert_eq!(
            split,
            [
                alloc::vec![VirsOp::ReleaseSpi { spi: 5 }, VirsOp::UnmapVm { vm: 1 }],
                alloc::vec![VirsOp::ReleaseSpi { spi: 40 }, VirsOp::UnmapVm { vm: 1 }],
            ]
        );
    }

    #[test]
    fn a_vpe_of_a_cpu_no_irs_serves_or_an_spi_in_no_range_is_refused_whole() {
        let r = two_sockets();
        let vpe = VirsOp::MapVpe { vm: 0, vpe: 0 };
        let spi = VirsOp::AssignSpi { spi: 100, vm: 0 };
        let vmte = VirsOp::WriteVmte {
            vm: 0,
            tables: tables(),
            vpe_id_bits: 1,
            lpi_id_bits: 14,
            spi_id_bits: 8,
        };

        assert_eq!(r.split_virs(&[vmte, vpe], |_, _| Some(7)), Err(vpe));
        assert_eq!(r.split_virs(&[vmte, spi], |_, _| Some(0)), Err(spi));
    }
}
