//! GICv4.0 direct vLPIs: the decision, the command encodings, the
//! translation of a (hostile) guest's vITS commands, and residency.

use super::*;
use crate::vgic::vits::{
    QueueMemory, Vits, VitsError, VitsLimits, VitsSink, GITS_CBASER, GITS_CTLR, GITS_CWRITER,
};
use alloc::vec;

/// QEMU's GITS_TYPER: Physical, Virtual, 8-byte ITT entries, 16 ID bits,
/// 16 DeviceID bits.
const TYPER: u64 = 1 | 1 << 1 | 7 << 4 | 15 << 8 | 15 << 13;
const RAM: RamRange = RamRange {
    ipa: 0x4000_0000,
    pa: 0x8_4000_0000,
    size: 0x100_0000,
};
/// alpha's NIC (00:02.0).
const NIC: u32 = 0x10;

/// The physical ITS queue; vCPU i is pinned to CPU i + 1, RDbase = CPU.
#[derive(Default)]
struct Env {
    sent: Vec<V4Cmd>,
    next_itt: u64,
}

impl ItsPlacement for Env {
    fn cpu_of(&self, vcpu: u16) -> Option<u16> {
        (vcpu < 2).then_some(vcpu + 1)
    }
    fn rdbase(&self, cpu: u16) -> u64 {
        u64::from(cpu)
    }
    fn alloc_itt(&mut self, bytes: usize) -> Option<u64> {
        self.next_itt += bytes as u64;
        Some(0x7000_0000 + self.next_itt)
    }
    fn free_itt(&mut self, _: u64, _: usize) {}
}

impl V4Env for Env {
    fn send(&mut self, cmd: V4Cmd) {
        self.sent.push(cmd);
    }
}

fn vpes() -> Vec<Vpe> {
    vec![
        Vpe {
            id: 3,
            vpt: 0x9000_0000,
        },
        Vpe {
            id: 4,
            vpt: 0x9001_0000,
        },
    ]
}

/// A partition whose guest set PROPBASER IDbits = 13 (14 bits: 8192 LPIs).
fn partition() -> PartitionVlpis {
    let mut p = PartitionVlpis::new(ItsTyper::decode(TYPER), vpes(), 16);
    let prop = vpropbaser((RAM.ipa + 0x10_0000) | 13, &[RAM], 16).unwrap();
    p.set_property_table(0, prop);
    p.set_property_table(1, prop);
    p
}

/// alpha's NIC mapped with 4 events (MAPD).
fn map_nic(p: &mut PartitionVlpis, env: &mut Env) {
    p.apply(
        PhysCmd::Mapd {
            device: NIC,
            event_bits: 2,
            valid: true,
        },
        env,
    )
    .unwrap();
}

fn mapped(env: &mut Env) -> PartitionVlpis {
    let mut p = partition();
    map_nic(&mut p, env);
    env.sent.clear();
    p
}

#[test]
fn direct_only_when_every_redistributor_has_vlpis_and_the_its_is_virtual() {
    assert_eq!(
        LpiDelivery::choose(&[2, 2], Some(TYPER), true),
        LpiDelivery::Direct
    );
    assert_eq!(
        LpiDelivery::choose(&[2, 0], Some(TYPER), true),
        LpiDelivery::Trapped
    );
    assert_eq!(
        LpiDelivery::choose(&[2, 2], Some(TYPER & !2), true),
        LpiDelivery::Trapped
    );
    assert_eq!(
        LpiDelivery::choose(&[2, 2], Some(TYPER), false),
        LpiDelivery::Trapped
    );
    assert_eq!(
        LpiDelivery::choose(&[], Some(TYPER), true),
        LpiDelivery::Trapped
    );
}

#[test]
fn vpe_ids_are_unique_until_freed_and_bounded() {
    let mut ids = VpeIds::new(65);
    let all: Vec<u16> = (0..65).map(|_| ids.alloc().unwrap()).collect();
    assert_eq!(all, (0..65).collect::<Vec<_>>());
    assert_eq!(ids.alloc(), None);
    ids.free(64);
    assert_eq!(ids.alloc(), Some(64));
}

#[test]
fn pending_tables_are_64k_multiples() {
    assert_eq!(vpt_bytes(16), 0x1_0000);
    assert_eq!(vpt_bytes(20), 0x2_0000);
}

#[test]
fn property_table_is_the_guests_translated_to_pa() {
    let p = vpropbaser((RAM.ipa + 0x10_0000) | 13, &[RAM], 16).unwrap();
    assert_eq!(p.id_bits, 14);
    assert_eq!(p.value & 0x000F_FFFF_FFFF_F000, RAM.pa + 0x10_0000);
    assert_eq!(p.value & 0x1F, 13);
}

#[test]
fn property_table_reaching_past_ram_is_refused() {
    // 2^16 - 8192 bytes starting 4 KiB before RAM's end.
    let ipa = RAM.ipa + RAM.size - 0x1000;
    assert_eq!(
        vpropbaser(ipa | 15, &[RAM], 16),
        Err(PropError::OutsideRam {
            ipa,
            bytes: 0x1_0000 - 8192
        })
    );
    assert_eq!(
        vpropbaser(0x1000 | 15, &[RAM], 16).map(|_| ()),
        Err(PropError::OutsideRam {
            ipa: 0x1000,
            bytes: 0xE000
        })
    );
    assert_eq!(
        vpropbaser(RAM.ipa | 12, &[RAM], 16),
        Err(PropError::TooFewIdBits(13))
    );
}

#[test]
fn property_table_id_bits_are_capped_at_the_vits() {
    let p = vpropbaser(RAM.ipa | 31, &[RAM], 16).unwrap();
    assert_eq!(p.id_bits, 16);
}

// Encodings, field by field from the GICv4.0 command tables.

#[test]
fn vmapp_encodes_vpe_rdbase_valid_vpt_and_size() {
    let c = V4Cmd::Vmapp {
        vpe: 0x1234,
        rdbase: 5,
        vpt: 0x8_1234_0000,
        vpt_bits: 16,
        valid: true,
    }
    .encode();
    assert_eq!(
        c,
        [0x29, 0x1234 << 32, 1 << 63 | 5 << 16, 0x8_1234_0000 | 15]
    );
}

#[test]
fn vmapti_encodes_device_event_vpe_vintid_and_no_doorbell() {
    let c = V4Cmd::Vmapti {
        device: 0x10,
        event: 7,
        vpe: 3,
        vintid: 8200,
        doorbell: NO_DOORBELL,
    }
    .encode();
    assert_eq!(c, [0x2A | 0x10 << 32, 7 | 3 << 32, 8200 | 1023 << 32, 0]);
}

#[test]
fn vmovi_vsync_vinvall_encodings() {
    let m = V4Cmd::Vmovi {
        device: 0x10,
        event: 1,
        vpe: 4,
        doorbell: None,
    };
    assert_eq!(m.encode(), [0x21 | 0x10 << 32, 1 | 4 << 32, 1023 << 32, 0]);
    let d = V4Cmd::Vmovi {
        device: 0x10,
        event: 1,
        vpe: 4,
        doorbell: Some(9000),
    };
    assert_eq!(d.encode()[2], 1 | 9000 << 32);
    assert_eq!(V4Cmd::Vsync { vpe: 4 }.encode(), [0x25, 4 << 32, 0, 0]);
    assert_eq!(V4Cmd::Vinvall { vpe: 4 }.encode(), [0x2D, 4 << 32, 0, 0]);
}

#[test]
fn vpendbaser_holds_the_table_and_valid() {
    assert_eq!(
        vpendbaser(0x9001_0000, true),
        1 << 63 | 0x9001_0000 | 7 << 7 | 1 << 10
    );
    assert!(!vpendbaser_valid(vpendbaser(0x9001_0000, false)));
}

// Translation.

#[test]
fn vpes_are_mapped_to_their_vcpus_cpus() {
    let mut env = Env::default();
    partition().map_vpes(&mut env).unwrap();
    assert_eq!(
        env.sent,
        vec![
            V4Cmd::Vmapp {
                vpe: 3,
                rdbase: 1,
                vpt: 0x9000_0000,
                vpt_bits: 16,
                valid: true
            },
            V4Cmd::Vsync { vpe: 3 },
            V4Cmd::Vmapp {
                vpe: 4,
                rdbase: 2,
                vpt: 0x9001_0000,
                vpt_bits: 16,
                valid: true
            },
            V4Cmd::Vsync { vpe: 4 },
        ]
    );
}

#[test]
fn mapti_becomes_vmapti_to_the_vcpus_vpe_with_inv_and_vsync() {
    let mut env = Env::default();
    let mut p = mapped(&mut env);
    p.apply(
        PhysCmd::Mapti {
            device: NIC,
            event: 1,
            vintid: 8200,
            vcpu: 1,
        },
        &mut env,
    )
    .unwrap();
    assert_eq!(
        env.sent,
        vec![
            V4Cmd::Vmapti {
                device: NIC,
                event: 1,
                vpe: 4,
                vintid: 8200,
                doorbell: NO_DOORBELL
            },
            V4Cmd::Phys(ItsCmd::Inv {
                device: NIC,
                event: 1
            }),
            V4Cmd::Vsync { vpe: 4 },
        ]
    );
    assert_eq!(p.route_of(NIC, 1), Some((1, 8200)));
}

#[test]
fn movi_discard_inv_invall_sync_translate_to_v4() {
    let mut env = Env::default();
    let mut p = mapped(&mut env);
    p.apply(
        PhysCmd::Mapti {
            device: NIC,
            event: 0,
            vintid: 8192,
            vcpu: 0,
        },
        &mut env,
    )
    .unwrap();
    env.sent.clear();
    p.apply(
        PhysCmd::Movi {
            device: NIC,
            event: 0,
            vcpu: 1,
        },
        &mut env,
    )
    .unwrap();
    p.apply(
        PhysCmd::Inv {
            device: NIC,
            event: 0,
        },
        &mut env,
    )
    .unwrap();
    p.apply(PhysCmd::InvAll { vcpu: 1 }, &mut env).unwrap();
    p.apply(PhysCmd::Sync { vcpu: 0 }, &mut env).unwrap();
    p.apply(
        PhysCmd::Discard {
            device: NIC,
            event: 0,
        },
        &mut env,
    )
    .unwrap();
    assert_eq!(
        env.sent,
        vec![
            V4Cmd::Vmovi {
                device: NIC,
                event: 0,
                vpe: 4,
                doorbell: None
            },
            V4Cmd::Vsync { vpe: 4 },
            V4Cmd::Phys(ItsCmd::Inv {
                device: NIC,
                event: 0
            }),
            V4Cmd::Vsync { vpe: 4 },
            V4Cmd::Vinvall { vpe: 4 },
            V4Cmd::Vsync { vpe: 4 },
            V4Cmd::Vsync { vpe: 3 },
            V4Cmd::Phys(ItsCmd::Discard {
                device: NIC,
                event: 0
            }),
            V4Cmd::Vsync { vpe: 4 },
        ]
    );
    assert_eq!(p.route_of(NIC, 0), None);
}

#[test]
fn vintid_beyond_the_guests_property_table_is_refused_and_sends_nothing() {
    let mut env = Env::default();
    let mut p = mapped(&mut env);
    // The guest's table covers 14 bits: 16384 is past its end.
    let r = p.apply(
        PhysCmd::Mapti {
            device: NIC,
            event: 1,
            vintid: 16384,
            vcpu: 0,
        },
        &mut env,
    );
    assert_eq!(r, Err(V4Error::VintidOutOfRange(16384)));
    let r = p.apply(
        PhysCmd::Mapti {
            device: NIC,
            event: 1,
            vintid: 8191,
            vcpu: 0,
        },
        &mut env,
    );
    assert_eq!(r, Err(V4Error::VintidOutOfRange(8191)));
    assert!(env.sent.is_empty());
}

#[test]
fn event_beyond_the_devices_mapd_size_is_refused() {
    let mut env = Env::default();
    let mut p = mapped(&mut env);
    let r = p.apply(
        PhysCmd::Mapti {
            device: NIC,
            event: 4,
            vintid: 8192,
            vcpu: 0,
        },
        &mut env,
    );
    assert_eq!(
        r,
        Err(V4Error::EventOutOfRange {
            device: NIC,
            event: 4
        })
    );
    assert!(env.sent.is_empty());
}

#[test]
fn mapti_on_an_unmapped_device_or_without_property_table_is_refused() {
    let mut env = Env::default();
    let mut p = mapped(&mut env);
    let r = p.apply(
        PhysCmd::Mapti {
            device: 0x08,
            event: 0,
            vintid: 8192,
            vcpu: 0,
        },
        &mut env,
    );
    assert_eq!(r, Err(V4Error::DeviceNotMapped(0x08)));
    let mut q = PartitionVlpis::new(ItsTyper::decode(TYPER), vpes(), 16);
    map_nic(&mut q, &mut env);
    env.sent.clear();
    let r = q.apply(
        PhysCmd::Mapti {
            device: NIC,
            event: 0,
            vintid: 8192,
            vcpu: 0,
        },
        &mut env,
    );
    assert_eq!(r, Err(V4Error::NoPropertyTable));
    assert!(env.sent.is_empty());
}

#[test]
fn release_unmaps_devices_and_vpes() {
    let mut env = Env::default();
    let mut p = mapped(&mut env);
    p.release(&mut env);
    assert_eq!(
        env.sent[0],
        V4Cmd::Phys(ItsCmd::Mapd {
            device: NIC,
            itt: 0,
            event_bits: 1,
            valid: false
        })
    );
    assert!(env.sent.contains(&V4Cmd::Vmapp {
        vpe: 4,
        rdbase: 2,
        vpt: 0x9001_0000,
        vpt_bits: 16,
        valid: false
    }));
}

#[test]
fn reset_unmaps_devices_keeps_vpes_and_forgets_the_property_tables() {
    let mut env = Env::default();
    let mut p = mapped(&mut env);
    p.release_devices(&mut env);
    assert!(env.sent.contains(&V4Cmd::Phys(ItsCmd::Mapd {
        device: NIC,
        itt: 0,
        event_bits: 1,
        valid: false
    })));
    assert!(
        !env.sent.iter().any(|c| matches!(c, V4Cmd::Vmapp { .. })),
        "a reset left the vPEs mapped: {:?}",
        env.sent
    );
    // The next boot gives its tables again before any MAPTI.
    map_nic(&mut p, &mut env);
    let mapti = PhysCmd::Mapti {
        device: NIC,
        event: 0,
        vintid: 8192,
        vcpu: 1,
    };
    assert_eq!(p.apply(mapti, &mut env), Err(V4Error::NoPropertyTable));
}

#[test]
fn a_mapti_is_bounded_by_its_target_vcpus_own_property_table() {
    let mut env = Env::default();
    let mut p = PartitionVlpis::new(ItsTyper::decode(TYPER), vpes(), 16);
    // vCPU 0's table covers 16 bits, vCPU 1's only 14 (8192 vLPIs).
    p.set_property_table(
        0,
        vpropbaser((RAM.ipa + 0x10_0000) | 15, &[RAM], 16).unwrap(),
    );
    p.set_property_table(
        1,
        vpropbaser((RAM.ipa + 0x20_0000) | 13, &[RAM], 16).unwrap(),
    );
    map_nic(&mut p, &mut env);
    let mapti = |vcpu| PhysCmd::Mapti {
        device: NIC,
        event: 0,
        vintid: 20000,
        vcpu,
    };
    assert_eq!(
        p.apply(mapti(1), &mut env),
        Err(V4Error::VintidOutOfRange(20000))
    );
    assert_eq!(p.apply(mapti(0), &mut env), Ok(()));
}

// The whole chain: a hostile guest's queue through the vITS into the v4
// translation.

struct Ram(BTreeMap<u64, [u64; 4]>);

impl QueueMemory for Ram {
    fn read_command(&self, ipa: u64) -> Option<[u64; 4]> {
        (ipa >= RAM.ipa && ipa + 32 <= RAM.ipa + RAM.size)
            .then(|| self.0.get(&ipa).copied().unwrap_or([0; 4]))
    }
}

struct Chain {
    p: PartitionVlpis,
    env: Env,
    faults: Vec<VitsError>,
}

impl VitsSink for Chain {
    fn apply(&mut self, cmd: PhysCmd) {
        self.p.apply(cmd, &mut self.env).unwrap();
    }
    fn fault(&mut self, error: VitsError, _: u64) {
        self.faults.push(error);
    }
}

fn run_guest(cmds: &[ItsCmd]) -> Chain {
    const Q: u64 = RAM.ipa + 0x20_0000;
    let mut ram = Ram(BTreeMap::new());
    for (i, c) in cmds.iter().enumerate() {
        ram.0.insert(Q + 32 * i as u64, c.encode());
    }
    let owner = |d: u32| d == NIC;
    let mut its = Vits::new(VitsLimits::for_vcpus(2));
    let mut chain = Chain {
        p: partition(),
        env: Env::default(),
        faults: Vec::new(),
    };
    its.write(GITS_CBASER, 1 << 63 | Q, &ram, &owner, &mut chain);
    its.write(GITS_CTLR, 1, &ram, &owner, &mut chain);
    its.write(
        GITS_CWRITER,
        32 * cmds.len() as u64,
        &ram,
        &owner,
        &mut chain,
    );
    chain
}

#[test]
fn guest_msi_setup_reaches_the_its_as_vmapti() {
    let c = run_guest(&[
        ItsCmd::Mapd {
            device: NIC,
            itt: 0x4010_0000,
            event_bits: 2,
            valid: true,
        },
        ItsCmd::Mapc {
            icid: 1,
            rdbase: 1,
            valid: true,
        },
        ItsCmd::Mapti {
            device: NIC,
            event: 0,
            intid: 8195,
            icid: 1,
        },
    ]);
    assert!(c.faults.is_empty(), "{:?}", c.faults);
    assert!(c.env.sent.contains(&V4Cmd::Vmapti {
        device: NIC,
        event: 0,
        vpe: 4,
        vintid: 8195,
        doorbell: NO_DOORBELL
    }));
}

#[test]
fn foreign_device_id_never_reaches_the_physical_its() {
    let c = run_guest(&[
        ItsCmd::Mapd {
            device: 0x08,
            itt: 0x4010_0000,
            event_bits: 2,
            valid: true,
        },
        ItsCmd::Mapc {
            icid: 0,
            rdbase: 0,
            valid: true,
        },
        ItsCmd::Mapti {
            device: 0x08,
            event: 0,
            intid: 8192,
            icid: 0,
        },
    ]);
    assert_eq!(c.faults, vec![VitsError::ForeignDevice(0x08)]);
    assert!(c.env.sent.is_empty());
}

// Residency.

#[derive(Default)]
struct Redist {
    writes: Vec<(&'static str, u64)>,
    dirty_reads: u32,
}

impl V40Hw for Redist {
    fn write_vpropbaser(&mut self, value: u64) {
        self.writes.push(("VPROPBASER", value));
    }
    fn read_vpendbaser(&mut self) -> u64 {
        if self.dirty_reads > 0 {
            self.dirty_reads -= 1;
            1 << 60
        } else {
            1 << 61
        }
    }
    fn write_vpendbaser(&mut self, value: u64) {
        self.writes.push(("VPENDBASER", value));
    }
}

#[test]
fn load_writes_vpropbaser_before_a_valid_vpendbaser() {
    let mut hw = Redist::default();
    let prop = vpropbaser(RAM.ipa | 13, &[RAM], 16).unwrap();
    let mut r = Residency::new();
    r.load(&mut hw, prop, 0x9000_0000).unwrap();
    assert_eq!(
        hw.writes,
        vec![
            ("VPROPBASER", prop.value),
            ("VPENDBASER", vpendbaser(0x9000_0000, true))
        ]
    );
    assert_eq!(
        r.load(&mut hw, prop, 0x9000_0000),
        Err(ResidencyError::AlreadyResident)
    );
}

#[test]
fn put_clears_valid_waits_for_dirty_and_reports_pending_last() {
    let mut hw = Redist {
        dirty_reads: 3,
        ..Redist::default()
    };
    let prop = vpropbaser(RAM.ipa | 13, &[RAM], 16).unwrap();
    let mut r = Residency::new();
    r.load(&mut hw, prop, 0x9000_0000).unwrap();
    assert_eq!(r.put(&mut hw), Ok(true));
    assert_eq!(
        hw.writes.last(),
        Some(&("VPENDBASER", vpendbaser(0x9000_0000, false)))
    );
    assert_eq!(hw.dirty_reads, 0);
    assert_eq!(r.resident(), None);
}

#[test]
fn put_gives_up_when_dirty_never_clears() {
    let mut hw = Redist {
        dirty_reads: u32::MAX,
        ..Redist::default()
    };
    let prop = vpropbaser(RAM.ipa | 13, &[RAM], 16).unwrap();
    let mut r = Residency::new();
    r.load(&mut hw, prop, 0x9000_0000).unwrap();
    assert_eq!(r.put(&mut hw), Err(ResidencyError::DirtyStuck));
}
