//! The GICv4.1 vSGI path against the register-level model (`pinfold-gicmodel`).

use super::*;
use crate::lockstat::LockStat;
use crate::vgic::sgi::SgiMap;
use pinfold_gicmodel::{reg, CmdError, Config, Event, Model};
use std::boxed::Box;
use std::vec::Vec;

/// One CPU's view of the model: its own redistributor and the ITSes.
struct Cpu<'a> {
    m: &'a mut Model,
    cpu: usize,
    lockless: bool,
    /// The ITS whose GITS_SGIR this CPU writes.
    its: usize,
}

impl V41Hw for Cpu<'_> {
    fn lockless(&self) -> bool {
        self.lockless
    }
    fn read_vpendbaser(&mut self) -> u64 {
        self.m.vlpi_read(self.cpu, reg::GICR_VPENDBASER)
    }
    fn write_vpendbaser(&mut self, value: u64) {
        self.m.vlpi_write(self.cpu, reg::GICR_VPENDBASER, value)
    }
    fn write_sgir(&mut self, value: u64) {
        self.m.its_sgi_write(self.its, reg::GITS_SGIR, value)
    }
}

fn on(m: &mut Model, cpu: usize) -> Cpu<'_> {
    Cpu {
        m,
        cpu,
        lockless: true,
        its: 0,
    }
}

fn lock() -> (CountedLock<()>, &'static LockStat) {
    let stat: &'static LockStat = Box::leak(Box::new(LockStat::new()));
    (CountedLock::new((), stat), stat)
}

/// A partition of 4 vCPUs (affinities 0.0.0.i) on CPUs 0..3 with vPE IDs
/// 10..13, its SGIs configured enabled, group 1, through the model's queue.
fn host(cfg: Config) -> (Model, DirectSgi, SgiMap, Vec<u64>) {
    let its_count = cfg.its_count;
    let mut m = bare(cfg);
    let vpes: Vec<u16> = (10..14).collect();
    for (cpu, &vpe) in vpes.iter().enumerate() {
        for its in 0..its_count {
            m.enqueue(its, cmd::vmapp(&vmapp(vpe, cpu as u32, its == 0)));
        }
        for intid in 0..16 {
            m.enqueue(0, cmd::vsgi(vpe, intid, true, 0xA0, true));
        }
        m.enqueue(0, cmd::vsync(vpe));
    }
    assert!(m.take_events().is_empty());
    let mpidrs: Vec<u64> = (0..4).map(|i| 0x8000_0000 | i).collect();
    let map = SgiMap::new(&mpidrs);
    (m, DirectSgi::new(vpes), map, mpidrs)
}

/// vPE `vpe` to redistributor `rd`: its own pending table, the VM's
/// configuration table, no doorbell; `alloc` on the first ITS.
fn vmapp(vpe: u16, rd: u32, alloc: bool) -> cmd::Vmapp {
    cmd::Vmapp {
        vpe,
        rd,
        vpt: 0xA000_0000 + (u64::from(vpe) << 16),
        vpt_bits: 16,
        vconf: 0xB000_0000,
        alloc,
        doorbell: None,
    }
}

/// ICC_SGI1R_EL1 for SGI `intid` to the Aff0 list `targets`.
fn sgi1r(intid: u64, targets: u64) -> u64 {
    intid << 24 | targets
}

#[test]
fn a_v4_1_host_gets_direct_sgis_and_a_v4_0_or_v3_host_keeps_the_trapped_path() {
    let mut v41 = Model::new(Config::default());
    let mut v40 = Model::new(Config {
        v4_1: false,
        ..Config::default()
    });
    let typers = |m: &mut Model| {
        (0..4)
            .map(|c| m.gicr_read(c, reg::GICR_TYPER))
            .collect::<Vec<_>>()
    };

    let rd41 = typers(&mut v41);
    let rd40 = typers(&mut v40);
    let its41 = v41.its_read(0, reg::GITS_TYPER);
    let its40 = v40.its_read(0, reg::GITS_TYPER);

    assert_eq!(SgiDelivery::choose(&rd41, Some(its41)), SgiDelivery::Direct);
    assert_eq!(
        SgiDelivery::choose(&rd40, Some(its40)),
        SgiDelivery::Trapped
    );
    // A GICv4.1 ITS in front of one redistributor without vSGIs: trapped.
    let mut mixed = rd41.clone();
    mixed[3] = rd40[3];
    assert_eq!(
        SgiDelivery::choose(&mixed, Some(its41)),
        SgiDelivery::Trapped
    );
    assert_eq!(
        SgiDelivery::choose(&rd41, Some(its40)),
        SgiDelivery::Trapped
    );
    // No ITS at all (GICv3 without one): trapped.
    assert_eq!(SgiDelivery::choose(&rd41, None), SgiDelivery::Trapped);
    assert_eq!(SgiDelivery::choose(&[], Some(its41)), SgiDelivery::Trapped);
}

#[test]
fn an_sgi_to_a_resident_vpe_is_delivered_without_a_receiver_exit() {
    let (mut m, direct, map, mpidrs) = host(Config::default());
    let (chip_lock, stat) = lock();
    let mut rx = Residency::new();
    rx.load(&mut on(&mut m, 1), &chip_lock, 11, false, true)
        .unwrap();

    // vCPU 0 sends SGI 5 to vCPU 1.
    let res = direct.send(&mut on(&mut m, 0), &map, &mpidrs, sgi1r(5, 0b10), 0);

    assert_eq!(res.vcpus, 0b10);
    assert_eq!(
        m.events(),
        [Event::Delivered {
            cpu: 1,
            vpe: 11,
            intid: 5
        }]
    );
    assert_eq!(m.receiver_exits(), 0);
    assert_eq!(
        m.rd_accesses(1),
        1 + 1 + 3,
        "VPROPBASER, VPENDBASER, Dirty polls; nothing on send"
    );
    assert!(m.misuse().is_empty(), "{:?}", m.misuse());
    assert_eq!(stat.total(), 0);
}

#[test]
fn an_sgi_to_a_non_resident_vpe_is_kept_pending_and_seen_on_load() {
    let (mut m, direct, map, mpidrs) = host(Config::default());
    let (chip_lock, _) = lock();

    direct.send(&mut on(&mut m, 0), &map, &mpidrs, sgi1r(2, 0b100), 0);
    direct.send(&mut on(&mut m, 0), &map, &mpidrs, sgi1r(7, 0b100), 0);
    assert!(m.events().is_empty());
    assert_eq!(m.pending(12), 1 << 2 | 1 << 7);

    let mut rx = Residency::new();
    rx.load(&mut on(&mut m, 2), &chip_lock, 12, false, true)
        .unwrap();

    // Load returned only after Dirty cleared: both are in the vCPU interface.
    assert_eq!(
        m.take_events(),
        [
            Event::Delivered {
                cpu: 2,
                vpe: 12,
                intid: 2
            },
            Event::Delivered {
                cpu: 2,
                vpe: 12,
                intid: 7
            }
        ]
    );
    assert_eq!(m.pending(12), 0);
    assert!(m.misuse().is_empty(), "{:?}", m.misuse());
}

#[test]
fn put_reports_pending_last_and_a_later_load_delivers() {
    let (mut m, direct, map, mpidrs) = host(Config::default());
    let (chip_lock, _) = lock();
    let mut rx = Residency::new();
    rx.load(&mut on(&mut m, 3), &chip_lock, 13, false, true)
        .unwrap();
    assert!(!rx.put(&mut on(&mut m, 3), &chip_lock).unwrap());
    assert_eq!(m.resident(3), None);

    direct.send(&mut on(&mut m, 0), &map, &mpidrs, sgi1r(1, 0b1000), 0);
    assert_eq!(
        rx.load(&mut on(&mut m, 3), &chip_lock, 13, false, true),
        Ok(())
    );
    assert_eq!(
        m.take_events(),
        [Event::Delivered {
            cpu: 3,
            vpe: 13,
            intid: 1
        }]
    );
    assert!(m.misuse().is_empty(), "{:?}", m.misuse());
}

#[test]
fn load_without_put_is_refused_and_a_dirty_that_never_clears_is_an_error() {
    let (mut m, ..) = host(Config::default());
    let (chip_lock, _) = lock();
    let mut rx = Residency::new();
    rx.load(&mut on(&mut m, 0), &chip_lock, 10, false, true)
        .unwrap();
    assert_eq!(
        rx.load(&mut on(&mut m, 0), &chip_lock, 10, false, true),
        Err(ResidencyError::AlreadyResident(10))
    );

    let (mut stuck, ..) = host(Config {
        dirty_reads: DIRTY_POLLS + 5,
        ..Config::default()
    });
    let mut rx = Residency::new();
    assert_eq!(
        rx.load(&mut on(&mut stuck, 0), &chip_lock, 10, false, true),
        Err(ResidencyError::DirtyStuck)
    );
}

#[test]
fn targets_outside_the_partition_are_refused_and_never_written() {
    let (mut m, direct, map, mpidrs) = host(Config::default());
    // Aff0 4..7 and another cluster: no vCPUs of this partition (vPE IDs
    // beyond this partition's exist on the host: 14.. would be others').
    let res = direct.send(&mut on(&mut m, 0), &map, &mpidrs, sgi1r(3, 0xF0), 0);
    let res2 = direct.send(&mut on(&mut m, 0), &map, &mpidrs, 3 << 24 | 1 << 16 | 1, 0);

    assert_eq!((res.vcpus, res.outside), (0, 4));
    assert_eq!((res2.vcpus, res2.outside), (0, 1));
    assert_eq!(m.sgir_writes(0), 0);
    // A mixed list reaches only the partition's own.
    let res = direct.send(&mut on(&mut m, 0), &map, &mpidrs, sgi1r(3, 0x12), 0);
    assert_eq!((res.vcpus, res.outside), (0b10, 1));
    assert_eq!(m.sgir_writes(0), 1);
}

#[test]
fn a_hostile_sgi_storm_is_bounded() {
    let (mut m, direct, map, mpidrs) = host(Config::default());
    let (chip_lock, stat) = lock();
    let mut rx = Residency::new();
    rx.load(&mut on(&mut m, 1), &chip_lock, 11, false, true)
        .unwrap();
    m.take_events();

    // 100,000 broadcasts (IRM = 1) and 100,000 all-foreign lists.
    let mut outside = 0u64;
    for i in 0..100_000u64 {
        let r = direct.send(
            &mut on(&mut m, 0),
            &map,
            &mpidrs,
            1 << 40 | (i % 16) << 24,
            0,
        );
        assert_eq!(r.vcpus, 0b1110);
        let r = direct.send(&mut on(&mut m, 0), &map, &mpidrs, 0xFFF0 | 1 << 24, 0);
        outside += u64::from(r.outside);
    }

    // One GITS_SGIR write per own target per trap: 3 per broadcast, none
    // for the foreign lists (whose targets are counted as faults).
    assert_eq!(m.sgir_writes(0), 300_000);
    assert_eq!(outside, 12 * 100_000);
    // The non-resident receivers hold at most one pending bit per SGI;
    // nothing queues, nothing is an exit.
    assert_eq!(m.pending(12), 0xFFFF);
    assert_eq!(m.pending(13), 0xFFFF);
    assert_eq!(m.pending(10), 0, "the sender is not its own target");
    assert_eq!(m.receiver_exits(), 0);
    assert_eq!(
        m.events().len(),
        100_000,
        "the resident vCPU took every one"
    );
    assert_eq!(stat.total(), 0);
    assert!(m.misuse().is_empty(), "{:?}", m.misuse());
}

#[test]
fn load_and_put_take_no_shared_lock_on_a_lockless_chip_and_are_counted_on_one_without() {
    for lockless in [true, false] {
        let (mut m, ..) = host(Config::default());
        let (chip_lock, stat) = lock();
        let mut rx = Residency::new();
        for _ in 0..1000 {
            let mut hw = Cpu {
                m: &mut m,
                cpu: 2,
                lockless,
                its: 0,
            };
            rx.load(&mut hw, &chip_lock, 12, false, true).unwrap();
            rx.put(&mut hw, &chip_lock).unwrap();
        }
        if lockless {
            assert_eq!(stat.hot_total(), 0);
            assert_eq!(stat.total(), 0);
        } else {
            assert_eq!(stat.count(LockPath::VcpuLoad), 1000);
            assert_eq!(stat.count(LockPath::VcpuPut), 1000);
        }
        assert!(m.misuse().is_empty(), "{:?}", m.misuse());
    }
}

#[test]
fn the_driver_s_commands_are_what_the_model_reads() {
    let (mut m, ..) = host(Config {
        its_count: 2,
        ..Config::default()
    });
    // VSGI: disabled, priority 0x50, group 0.
    m.enqueue(0, cmd::vsgi(10, 9, false, 0x50, false));
    let c = m.sgi_config(10, 9).unwrap();
    assert_eq!((c.enabled, c.priority, c.group1), (false, 5, false));
    // VMOVP with GITS_TYPER.VMOVP: one command moves it for every ITS.
    m.enqueue(0, cmd::vmovp(10, 3));
    assert_eq!(m.target(10), Some(3));
    m.enqueue(0, cmd::vinvall(10));
    m.enqueue(0, cmd::invdb(10));
    // VMAPP V = 0 on both ITSes unmaps; a VSYNC for it is then an error.
    assert_eq!(m.vpe_tables(10), Some((0xA00A_0000, 0xB000_0000)));
    m.enqueue(0, cmd::vunmapp(10, false));
    m.enqueue(1, cmd::vunmapp(10, true));
    assert!(!m.mapped(0, 10) && !m.mapped(1, 10));
    m.enqueue(0, cmd::vsync(10));
    assert_eq!(
        m.events(),
        [Event::CommandError {
            its: 0,
            offset: 32 * (4 * 18 + 5),
            error: CmdError::VpeNotMapped(10)
        }]
    );
    assert!(m.misuse().is_empty(), "{:?}", m.misuse());
}

#[test]
fn sgir_carries_only_the_vpe_and_intid() {
    assert_eq!(sgir(0xBEEF, 0x1F), 0xBEEF_0000_000F);
    let mut m = Model::new(Config::default());
    m.its_sgi_write(0, reg::GITS_SGIR, sgir(3, 0xFF));
    assert!(m.misuse().is_empty());
}

/// A vCPU's redistributor after the guest wrote `writes` (offset in the
/// SGI frame, value; 4 bytes each).
fn guest_redist(writes: &[(u64, u64)]) -> crate::vgic::redist::VRedist {
    let mut r = crate::vgic::redist::VRedist::new(0, 0x8000_0000, true, 0);
    for &(offset, value) in writes {
        r.write(0x1_0000 + offset, 4, value, &mut |_| {});
    }
    r
}

const ISENABLER0: u64 = 0x100;
const ICENABLER0: u64 = 0x180;
const IPRIORITYR0: u64 = 0x400;

/// A model whose ITSes are up and whose redistributors have a vPE
/// configuration table, with nothing mapped.
fn bare(cfg: Config) -> Model {
    let its_count = cfg.its_count;
    let mut m = Model::new(cfg);
    for its in 0..its_count {
        m.its_write(
            its,
            reg::GITS_CBASER,
            reg::CBASER_VALID | (0x8000_0000 + 0x10_0000 * its as u64),
        );
        m.its_write(its, reg::GITS_CTLR, reg::CTLR_ENABLED);
    }
    for cpu in 0..4 {
        m.vlpi_write(cpu, reg::GICR_VPROPBASER, reg::VPROP_VALID | 0x9000_0000);
    }
    m
}

#[test]
fn map_vpe_maps_on_every_its_allocs_once_and_gives_the_guest_s_sgi_configuration() {
    let mut m = bare(Config {
        its_count: 3,
        ..Config::default()
    });
    // SGIs 0..7 enabled, SGI 1 at priority 0x90.
    let r = guest_redist(&[(ISENABLER0, 0xFF), (IPRIORITYR0, 0x90 << 8)]);

    let cmds = map_vpe(
        &vmapp(5, 2, true),
        &[(0, 2), (1, 2), (2, 2)],
        0,
        &r.sgi_configs(),
    );
    for &(its, c) in &cmds {
        m.enqueue(its, c);
    }

    assert!(m.take_events().is_empty(), "no error, no misuse");
    assert!((0..3).all(|its| m.mapped(its, 5)));
    assert_eq!(m.target(5), Some(2));
    let allocs: Vec<usize> = cmds
        .iter()
        .filter(|(_, c)| c[0] & 0xFF == cmd::VMAPP && c[0] >> 8 & 1 == 1)
        .map(|&(its, _)| its)
        .collect();
    assert_eq!(allocs, [0], "Alloc on the first ITS only");
    let c1 = m.sgi_config(5, 1).unwrap();
    assert_eq!((c1.enabled, c1.priority, c1.group1), (true, 9, true));
    assert!(!m.sgi_config(5, 8).unwrap().enabled);
}

#[test]
fn an_sgi_the_guest_enables_later_is_held_pending_then_delivered() {
    let mut m = bare(Config::default());
    let before = guest_redist(&[]);
    for (its, c) in map_vpe(&vmapp(10, 0, true), &[(0, 0)], 0, &before.sgi_configs()) {
        m.enqueue(its, c);
    }
    let (chip_lock, _) = lock();
    let mut rx = Residency::new();
    let (g0, g1) = group_enables(0b10);
    rx.load(&mut on(&mut m, 0), &chip_lock, 10, g0, g1).unwrap();

    let direct = DirectSgi::new(alloc::vec![10]);
    let mpidrs = alloc::vec![0x8000_0000u64];
    let map = SgiMap::new(&mpidrs);
    direct.send(&mut on(&mut m, 0), &map, &mpidrs, sgi1r(3, 0b1), 0);
    assert!(m.events().is_empty(), "SGI 3 is disabled: held");
    assert_eq!(m.pending(10), 1 << 3);

    // A PPI-only change sends nothing; enabling SGI 3 sends VSGI + VSYNC.
    let ppi = guest_redist(&[(ISENABLER0, 1 << 27)]);
    assert!(reconfigure(10, &before.sgi_configs(), &ppi.sgi_configs()).is_empty());
    let after = guest_redist(&[(ISENABLER0, 1 << 3)]);
    let cmds = reconfigure(10, &before.sgi_configs(), &after.sgi_configs());
    assert_eq!(cmds.len(), 2);
    for c in cmds {
        m.enqueue(0, c);
    }
    assert_eq!(
        m.take_events(),
        [Event::Delivered {
            cpu: 0,
            vpe: 10,
            intid: 3
        }]
    );
    // Disabling it again holds the next one.
    let off = guest_redist(&[(ISENABLER0, 1 << 3), (ICENABLER0, 1 << 3)]);
    for c in reconfigure(10, &after.sgi_configs(), &off.sgi_configs()) {
        m.enqueue(0, c);
    }
    direct.send(&mut on(&mut m, 0), &map, &mpidrs, sgi1r(3, 0b1), 0);
    assert!(m.take_events().is_empty());
}

#[test]
fn a_distributor_with_group_1_off_holds_vsgis_and_unmap_leaves_every_its() {
    let mut m = bare(Config {
        its_count: 2,
        ..Config::default()
    });
    let r = guest_redist(&[(ISENABLER0, 0xFFFF)]);
    for (its, c) in map_vpe(&vmapp(4, 1, true), &[(0, 1), (1, 1)], 0, &r.sgi_configs()) {
        m.enqueue(its, c);
    }
    let (chip_lock, _) = lock();
    let mut rx = Residency::new();
    let (g0, g1) = group_enables(0);
    assert_eq!((g0, g1), (false, false));
    rx.load(&mut on(&mut m, 1), &chip_lock, 4, g0, g1).unwrap();
    m.its_sgi_write(1, reg::GITS_SGIR, sgir(4, 6));
    assert!(m.events().is_empty(), "group 1 off in GICD_CTLR: held");
    assert_eq!(m.pending(4), 1 << 6);
    rx.put(&mut on(&mut m, 1), &chip_lock).unwrap();

    let cmds = unmap_vpe(4, &[0, 1]);
    assert_eq!(cmds.iter().filter(|(_, c)| c[0] >> 8 & 1 == 1).count(), 1);
    assert_eq!(
        cmds.last().map(|&(its, c)| (its, c[0] >> 8 & 1)),
        Some((0, 1)),
        "the first ITS, whose VMAPP had Alloc, unmaps last with Alloc"
    );
    for (its, c) in cmds {
        m.enqueue(its, c);
    }
    assert!(!m.mapped(0, 4) && !m.mapped(1, 4));
    assert!(m.take_events().is_empty(), "no error, no misuse");
}

/// Records GITS_SGIR writes.
#[derive(Default)]
struct Writes(Vec<u64>);

impl V41Hw for Writes {
    fn lockless(&self) -> bool {
        true
    }
    fn read_vpendbaser(&mut self) -> u64 {
        0
    }
    fn write_vpendbaser(&mut self, _: u64) {}
    fn write_sgir(&mut self, value: u64) {
        self.0.push(value);
    }
}

#[test]
fn the_single_target_fast_path_sends_what_the_general_path_sends() {
    let dense: Vec<u64> = (0..6).map(|i| 0x8000_0000 | i).collect();
    let clusters: Vec<u64> = [0, 1, 0x100, 0x101].map(|a| 0x8000_0000 | a).to_vec();
    let mut values = Vec::new();
    for intid in [0u64, 5, 15] {
        for list in [1u64, 2, 0x20, 0x40, 0x8000, 0b101, 0xFFFF, 0] {
            for extra in [0u64, 1 << 16, 1 << 32, 1 << 40, 1 << 44, 1 << 48, 1 << 60] {
                values.push(intid << 24 | list | extra);
            }
        }
    }
    let mut fast_taken = 0;
    for mpidrs in [&dense, &clusters] {
        let map = SgiMap::new(mpidrs);
        let direct = DirectSgi::new((0..mpidrs.len() as u16).map(|i| 40 + i).collect());
        for &value in &values {
            for me in 0..mpidrs.len() {
                let (mut a, mut b) = (Writes::default(), Writes::default());
                let ra = direct.send(&mut a, &map, mpidrs, value, me);
                let rb = direct.send_general(&mut b, &map, mpidrs, value, me);
                assert_eq!((ra, &a.0), (rb, &b.0), "value {value:#x} from vCPU {me}");
                if map.dense() && a.0.len() == 1 && value & !(0xFFFF | 0xF << 24) == 0 {
                    fast_taken += 1;
                }
            }
        }
    }
    assert!(fast_taken > 0);
}

/// GICR_TYPER of a redistributor at affinity `aff` (Aff3.Aff2.Aff1.Aff0)
/// sharing its vPE table at CommonLPIAff `level`, with VLPIS/RVPEID/VSGI.
fn gicr_typer(aff: u32, level: u64) -> u64 {
    u64::from(aff) << 32 | level << 24 | 1 << 26 | 1 << 7 | 1 << 1
}

/// GITS_BASER2 of type vPE: Valid, Inner WB (7), Inner Shareable, 64 KiB
/// pages, 2 pages, at 0x8_1234_0000 with PA[51:48] = 0x3.
const VPE_BASER_64K: u64 =
    1 << 63 | 7 << 59 | BASER_TYPE_VPE << 56 | 0x0008_1234_0000 | 0x3 << 12 | 1 << 10 | 2 << 8 | 1;

#[test]
fn a_redistributor_shares_the_its_vpe_table_only_within_the_its_common_affinity() {
    // SVPET = 1 (shared at Aff3), GITS_MPIDR Aff3 = 1.
    let gits_typer = GITS_TYPER_VIRTUAL | GITS_TYPER_VMAPP | GITS_TYPER_VSGI | 1 << 41;
    let gits_mpidr = 0x0100_0000;
    let same = gicr_typer(0x0102_0304, 1);
    let other = gicr_typer(0x0202_0304, 1);

    let mine = vpe_table_for(same, gits_typer, gits_mpidr, Some(VPE_BASER_64K));
    let theirs = vpe_table_for(other, gits_typer, gits_mpidr, Some(VPE_BASER_64K));

    let VpeTable::Its(v) = mine else {
        panic!("{mine:?}")
    };
    assert_eq!(v >> 63, 1, "Valid");
    assert_eq!(v >> 53 & 3, 2, "64 KiB pages");
    assert_eq!(
        v & 0x000F_FFFF_FFFF_F000,
        0x0003_0008_1234_0000,
        "PA[51:48] moved"
    );
    assert_eq!(v >> 10 & 3, 1, "Inner Shareable");
    assert_eq!(v >> 7 & 7, 7, "inner cacheability");
    assert_eq!(v & 0x7F, 1, "Size: pages - 1");
    assert_eq!(v >> 55 & 1, 0, "flat");
    assert_eq!(theirs, VpeTable::Group(0x0200_0000));
    // An ITS that shares with nobody (SVPET = 0), or has no valid table.
    let private = gits_typer & !(3 << 41);
    assert_eq!(
        vpe_table_for(same, private, gits_mpidr, Some(VPE_BASER_64K)),
        VpeTable::Group(0x0100_0000)
    );
    // SVPET = 0 even where the affinities agree (all at level 0).
    assert_eq!(
        vpe_table_for(gicr_typer(0x0102_0304, 0), private, 0, Some(VPE_BASER_64K)),
        VpeTable::Group(0)
    );
    assert_eq!(
        vpe_table_for(
            same,
            gits_typer,
            gits_mpidr,
            Some(VPE_BASER_64K & !(1 << 63))
        ),
        VpeTable::Group(0x0100_0000)
    );
}

#[test]
fn svpet_is_read_where_the_model_s_its_reports_it_and_pta_is_not_taken_for_it() {
    // The model's GICv4.1 ITS reports SVPET = 1 (GITS_TYPER [42:41]) and
    // its redistributors share one table (CommonLPIAff 0): every CPU uses
    // the ITS's table, as Linux's inherit_vpe_l1_table_from_its does.
    let cfg = Config {
        v4_1: true,
        ..Config::default()
    };
    let cpus = cfg.cpus;
    let mut m = Model::new(cfg);
    let gits_typer = m.its_read(0, reg::GITS_TYPER);
    for cpu in 0..cpus {
        let gicr_typer = m.gicr_read(cpu, reg::GICR_TYPER);
        assert!(
            matches!(
                vpe_table_for(gicr_typer, gits_typer, 0, Some(VPE_BASER_64K)),
                VpeTable::Its(_)
            ),
            "cpu {cpu} shares the ITS's vPE table"
        );
    }
    // GITS_TYPER.PTA (bit 19) is not SVPET: an ITS with PTA = 1 and
    // SVPET = 0 shares its table with nobody.
    let pta_only = GITS_TYPER_VIRTUAL | GITS_TYPER_VMAPP | GITS_TYPER_VSGI | 1 << 19;
    assert_eq!(
        vpe_table_for(gicr_typer(0, 0), pta_only, 0, Some(VPE_BASER_64K)),
        VpeTable::Group(0)
    );
}

#[test]
fn common_lpi_aff_groups_redistributors_by_the_levels_above_it() {
    let at = |level| common_aff(gicr_typer(0x0102_0304, level));
    assert_eq!(at(0), 0, "every redistributor shares one table");
    assert_eq!(at(1), 0x0100_0000);
    assert_eq!(at(2), 0x0102_0000);
    assert_eq!(at(3), 0x0102_0300);
}

#[test]
fn a_groups_own_vpe_table_covers_every_vpe_id_at_the_redistributors_entry_size() {
    // Entry_Size 3: 4 doublewords, 32 bytes; 1024 vPEs = 8 pages.
    let pages = own_vpe_table_pages(3 << 59);
    assert_eq!(pages, 8);
    let v = vpropbaser_own(0x4_0000_0000, pages);
    assert_eq!(v >> 63, 1);
    assert_eq!(v >> 52 & 1, 1, "Z: zeroed");
    assert_eq!(v & 0x000F_FFFF_FFFF_F000, 0x4_0000_0000);
    assert_eq!(v & 0x7F, 7);
    assert_eq!(v >> 53 & 3, 0, "4 KiB pages");
    assert!(is_vpe_baser(VPE_BASER_64K));
    assert!(!is_vpe_baser(VPE_BASER_64K & !(7 << 56) | 1 << 56));
}

#[test]
fn a_gicv4_1_partition_gets_direct_vlpis_only_with_a_vits_vpes_and_an_its_they_are_mapped_on() {
    let itses = [0, 2];

    assert_eq!(choose_vlpis(true, true, 2, &itses), Ok(()));
    assert_eq!(choose_vlpis(false, true, 0, &itses), Err(VlpisOff::NoVits));
    assert_eq!(choose_vlpis(true, false, 0, &itses), Err(VlpisOff::NoVpes));
    assert_eq!(
        choose_vlpis(true, true, 1, &itses),
        Err(VlpisOff::ItsWithoutVpes { its: 1 })
    );
}

#[test]
fn a_vconf_byte_is_copied_only_for_a_vintid_inside_both_tables() {
    assert_eq!(vconf_offset(8192, 14, 16), Some(0));
    assert_eq!(vconf_offset(8300, 16, 16), Some(108));
    // The guest's 14-bit table ends at 16383; the copy's 16 bits do not
    // widen it, nor the guest's 20 bits the copy.
    assert_eq!(vconf_offset(16384, 14, 16), None);
    assert_eq!(vconf_offset(1 << 16, 20, 16), None);
    assert_eq!(vconf_offset(8191, 16, 16), None, "not an LPI");
}

/// GITS_MPIDR of an ITS at `aff3.aff2.aff1` (Affinity [31:8]).
fn gits_mpidr(aff3: u8, aff2: u8, aff1: u8) -> u64 {
    u64::from(aff3) << 24 | u64::from(aff2) << 16 | u64::from(aff1) << 8
}

#[test]
fn a_later_its_of_the_same_svpet_affinity_takes_the_earlier_one_s_vpe_table() {
    // The model's GICv4.1 ITS reports SVPET = 1 (tables shared at Aff3).
    let gits_typer = Model::new(Config {
        v4_1: true,
        ..Config::default()
    })
    .its_read(0, reg::GITS_TYPER);
    let first = ItsVpeView {
        typer: gits_typer,
        mpidr: gits_mpidr(0, 0, 0),
        vpe_baser: Some(VPE_BASER_64K),
    };
    // Two ITSes on one node (Aff3 0; SVPET 1 ignores Aff2 and Aff1): the
    // second is the first's sibling and takes its table.
    assert_eq!(
        sibling_its(gits_typer, gits_mpidr(0, 1, 2), &[first]),
        Some(0)
    );
    // Two nodes (Aff3 0 and 1): each its own.
    assert_eq!(sibling_its(gits_typer, gits_mpidr(1, 0, 0), &[first]), None);
    // SVPET = 2 looks at Aff3.Aff2 too.
    let svpet2 = gits_typer & !(3 << 41) | 2 << 41;
    let first2 = ItsVpeView {
        typer: svpet2,
        ..first
    };
    assert_eq!(sibling_its(svpet2, gits_mpidr(0, 1, 0), &[first2]), None);
    assert_eq!(sibling_its(svpet2, gits_mpidr(0, 0, 7), &[first2]), Some(0));
    // A different SVPET is not a sibling, nor is SVPET = 0 (PTA alone,
    // bit 19, is not SVPET), nor a GICv4.0 ITS (no VMAPP), nor an earlier
    // ITS whose vPE table is not valid or not a vPE table.
    assert_eq!(sibling_its(svpet2, gits_mpidr(0, 0, 0), &[first]), None);
    let no_svpet = gits_typer & !(3 << 41) | 1 << 19;
    assert_eq!(sibling_its(no_svpet, 0, &[first]), None);
    assert_eq!(
        sibling_its(
            gits_typer,
            0,
            &[ItsVpeView {
                typer: no_svpet,
                ..first
            }]
        ),
        None
    );
    let v40 = gits_typer & !GITS_TYPER_VMAPP;
    assert_eq!(sibling_its(v40, 0, &[first]), None);
    for baser in [
        None,
        Some(VPE_BASER_64K & !(1 << 63)),
        Some(VPE_BASER_64K & !(7 << 56) | 1 << 56),
    ] {
        let earlier = ItsVpeView {
            vpe_baser: baser,
            ..first
        };
        assert_eq!(sibling_its(gits_typer, 0, &[earlier]), None, "{baser:?}");
    }
    // The first sibling in order is taken.
    let other_node = ItsVpeView {
        mpidr: gits_mpidr(1, 0, 0),
        ..first
    };
    assert_eq!(
        sibling_its(gits_typer, gits_mpidr(1, 0, 0), &[first, other_node, first]),
        Some(1)
    );
}
