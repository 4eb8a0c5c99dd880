//! The physical ITS side: command encoding against the spec's layouts, the
//! tables' sizes, LPI allocation and routes, and a guest's vITS commands
//! carried through to physical commands.

use super::*;
use crate::vgic::vits::{
    DeviceOwner, QueueMemory, Vits, VitsError, VitsLimits, VitsSink, GITS_CBASER, GITS_CTLR,
    GITS_CWRITER,
};
use alloc::collections::BTreeMap;
use alloc::vec::Vec;

/// vCPU 0 on CPU 2, vCPU 1 on CPU 3; ITTs bump-allocated from 0x9000_0000
/// up to `itt_limit` bytes; `lpis` physical LPIs.
struct Env {
    pool: LpiPool,
    routes: LpiRoutes,
    sent: Vec<ItsCmd>,
    itt_next: u64,
    itt_used: usize,
    itt_limit: usize,
}

impl Env {
    fn new(lpis: u32) -> Env {
        Env {
            pool: LpiPool::new(lpis),
            routes: LpiRoutes::new(lpis),
            sent: Vec::new(),
            itt_next: 0x9000_0000,
            itt_used: 0,
            itt_limit: 1 << 20,
        }
    }
}

impl ItsPlacement for Env {
    fn cpu_of(&self, vcpu: u16) -> Option<u16> {
        (vcpu < 2).then_some(vcpu + 2)
    }
    fn rdbase(&self, cpu: u16) -> u64 {
        u64::from(cpu)
    }
    fn alloc_itt(&mut self, bytes: usize) -> Option<u64> {
        if self.itt_used + bytes > self.itt_limit {
            return None;
        }
        let pa = self.itt_next;
        assert_eq!(pa % ITT_ALIGN as u64, 0);
        self.itt_next += bytes as u64;
        self.itt_used += bytes;
        Some(pa)
    }
    fn free_itt(&mut self, _pa: u64, bytes: usize) {
        self.itt_used -= bytes;
    }
}

impl PitsEnv for Env {
    fn alloc_lpi(&mut self) -> Option<u32> {
        self.pool.alloc()
    }
    fn free_lpi(&mut self, lpi: u32) {
        self.pool.free(lpi)
    }
    fn route(&mut self, lpi: u32, route: Option<LpiRoute>) {
        self.routes.set(lpi, route)
    }
    fn send(&mut self, cmd: ItsCmd) {
        self.sent.push(cmd)
    }
}

/// QEMU virt's ITS: ITT entries of 8 bytes, 16 ID bits, 16 DeviceID
/// bits, PTA = 0, no collections in the ITS.
const QEMU_TYPER: u64 = 1 | 7 << 4 | 15 << 8 | 15 << 13;

fn its(slot: u16) -> PartitionIts {
    PartitionIts::new(slot, ItsTyper::decode(QEMU_TYPER))
}

fn mapd(device: u32, event_bits: u8) -> PhysCmd {
    PhysCmd::Mapd {
        device,
        event_bits,
        valid: true,
    }
}

fn mapti(device: u32, event: u32, vintid: u32, vcpu: u16) -> PhysCmd {
    PhysCmd::Mapti {
        device,
        event,
        vintid,
        vcpu,
    }
}

/// RDbase is DW2 [51:16] wherever a command names a redistributor (MAPC,
/// SYNC, VMAPP; Linux's `its_encode_target` masks [51:16], QEMU's VMAPP_2
/// and VMOVP_2 RDBASE are 36 bits from 16): with GITS_TYPER.PTA = 1 a
/// redistributor at or above 2^51 keeps PA bit 51. The encoders had
/// [50:16] and dropped it.
#[test]
fn rdbase_is_dw2_bits_51_to_16() {
    let typer = ItsTyper::decode(QEMU_TYPER | 1 << 19);
    let pa = 1u64 << 51 | 0x3_0000;
    let rd = typer.rdbase(0, pa);
    let mapc = ItsCmd::Mapc {
        icid: 0,
        rdbase: rd,
        valid: true,
    };
    assert_eq!(mapc.encode()[2], 1 << 63 | pa);
    assert_eq!(ItsCmd::Sync { rdbase: rd }.encode()[2], pa);
    let vmapp = crate::vgic::v40::V4Cmd::Vmapp {
        vpe: 1,
        rdbase: rd,
        vpt: 0,
        vpt_bits: 16,
        valid: true,
    };
    assert_eq!(vmapp.encode()[2], 1 << 63 | pa);
}

#[test]
fn commands_encode_as_the_spec_lays_them_out() {
    let c = ItsCmd::Mapd {
        device: 0x10,
        itt: 0x4_1234_5600,
        event_bits: 3,
        valid: true,
    };
    assert_eq!(c.encode(), [0x10_0000_0008, 2, 1 << 63 | 0x4_1234_5600, 0]);
    let c = ItsCmd::Mapc {
        icid: 3,
        rdbase: 3,
        valid: true,
    };
    assert_eq!(c.encode(), [0x09, 0, 1 << 63 | 3 << 16 | 3, 0]);
    let c = ItsCmd::Mapti {
        device: 0x18,
        event: 2,
        intid: 8200,
        icid: 1,
    };
    assert_eq!(c.encode(), [0x18_0000_000A, 8200 << 32 | 2, 1, 0]);
    assert_eq!(
        ItsCmd::Movi {
            device: 8,
            event: 1,
            icid: 5
        }
        .encode(),
        [0x8_0000_0001, 1, 5, 0]
    );
    assert_eq!(ItsCmd::Sync { rdbase: 2 }.encode(), [0x05, 0, 2 << 16, 0]);
    assert_eq!(ItsCmd::Invall { icid: 4 }.encode(), [0x0D, 0, 4, 0]);
    for (c, op) in [
        (
            ItsCmd::Discard {
                device: 1,
                event: 2,
            },
            0x0F,
        ),
        (
            ItsCmd::Inv {
                device: 1,
                event: 2,
            },
            0x0C,
        ),
        (
            ItsCmd::Int {
                device: 1,
                event: 2,
            },
            0x03,
        ),
        (
            ItsCmd::Clear {
                device: 1,
                event: 2,
            },
            0x04,
        ),
    ] {
        assert_eq!(c.encode(), [0x1_0000_0000 | op, 2, 0, 0]);
    }
}

#[test]
fn typer_and_tables_are_sized_from_what_the_its_reports() {
    let t = ItsTyper::decode(QEMU_TYPER);
    assert_eq!(
        t,
        ItsTyper {
            itt_entry_bytes: 8,
            id_bits: 16,
            device_bits: 16,
            pta: false,
            hcc: 0,
            virt: false,
            vsgi: false
        }
    );
    assert_eq!(t.rdbase(3, 0x080a_0000), 3);
    // vSGIs: Virtual [1], VSGI [39] and VMAPP [40] together.
    let v41 = QEMU_TYPER | 1 << 1 | 1 << 39 | 1 << 40;
    assert!(ItsTyper::decode(v41).vsgi);
    for missing in [1 << 1, 1 << 39, 1 << 40] {
        assert!(!ItsTyper::decode(v41 & !missing).vsgi, "{missing:#x}");
    }
    let pta = ItsTyper::decode(QEMU_TYPER | 1 << 19);
    assert_eq!(pta.rdbase(3, 0x080e_0000), 0x80e);
    // 2 events of 8 bytes still take one aligned 256-byte ITT.
    assert_eq!(t.itt_bytes(1), 256);
    assert_eq!(t.itt_bytes(11), 16384);

    // QEMU's GITS_BASER0: devices, 8-byte entries; BASER1 collections.
    let dev = Baser::decode(1 << 56 | 7 << 48);
    assert_eq!(dev.kind, BaserType::Devices);
    assert_eq!(dev.entry_bytes, 8);
    let entries = dev.entries(&t, 4).unwrap();
    assert_eq!(entries, 65536);
    assert_eq!(dev.pages(entries, 0x1_0000), Some(8));
    assert_eq!(dev.pages(entries, 0x1000), Some(128));
    // 20 Devbits flat in 4 KiB pages is beyond a flat table.
    assert_eq!(dev.pages(1 << 20, 0x1000), None);
    let coll = Baser::decode(4 << 56 | 7 << 48);
    assert_eq!(coll.entries(&t, 4), Some(4));
    assert_eq!(coll.pages(4, 0x1_0000), Some(1));
    // A vPE table only on a GICv4 ITS (GITS_TYPER.Virtual), one entry per
    // vPE ID the hypervisor hands out.
    assert_eq!(Baser::decode(2 << 56).entries(&t, 4), None);
    let v4 = ItsTyper::decode(QEMU_TYPER | 1 << 1);
    assert!(v4.virt && !t.virt);
    let vpes = Baser::decode(2 << 56 | 15 << 48);
    assert_eq!(vpes.kind, BaserType::Vpes);
    assert_eq!(vpes.entries(&v4, 4), Some(1024));
    assert_eq!(vpes.pages(1024, 0x1_0000), Some(1));

    let v = baser_value(1 << 56 | 7 << 48, 0x4800_0000, 2, 8).unwrap();
    assert_eq!(v >> 63, 1);
    assert_eq!(v & 0xFF, 7);
    assert_eq!((v >> 8) & 3, 2);
    assert_eq!(v & 0x0000_FFFF_FFFF_F000, 0x4800_0000);
    assert_eq!(Baser::decode(v), dev);
    // Above 2^48: PA[51:48] in [15:12] with 64 KiB pages (Linux's
    // GITS_BASER_PHYS_52_to_48), no encoding with 4 or 16 KiB pages.
    let high = baser_value(1 << 56 | 7 << 48, 0x000A_0012_3456_0000, 2, 8).unwrap();
    assert_eq!(high & 0x0000_FFFF_FFFF_0000, 0x0012_3456_0000);
    assert_eq!(high >> 12 & 0xF, 0xA, "PA[51:48]");
    assert_eq!(baser_value(0, 0x000A_0012_3456_0000, 0, 8), None);
    assert_eq!(baser_value(0, 0x000A_0012_3456_0000, 1, 8), None);
    assert_eq!(baser_value(0, 1 << 52, 2, 8), None);
    let c = cbaser_value(0x4810_0000, 16);
    assert_eq!(c & 0xFF, 15);
    assert_eq!(c & 0x000F_FFFF_FFFF_F000, 0x4810_0000);
}

#[test]
fn a_mapped_event_gets_a_physical_lpi_on_its_vcpus_cpu_and_a_route() {
    let mut env = Env::new(64);
    let mut p = its(1);
    p.apply(mapd(0x10, 2), &mut env).unwrap();
    p.apply(mapti(0x10, 1, 8300, 1), &mut env).unwrap();
    let lpi = p.lpi_of(0x10, 1).unwrap();
    assert_eq!(lpi, LPI_BASE);
    assert_eq!(
        env.sent,
        [
            ItsCmd::Mapd {
                device: 0x10,
                itt: 0x9000_0000,
                event_bits: 2,
                valid: true
            },
            ItsCmd::Sync { rdbase: 0 },
            ItsCmd::Mapti {
                device: 0x10,
                event: 1,
                intid: lpi,
                icid: 3
            },
            ItsCmd::Inv {
                device: 0x10,
                event: 1
            },
            ItsCmd::Sync { rdbase: 3 },
        ]
    );
    assert_eq!(
        env.routes.get(lpi),
        Some(LpiRoute {
            slot: 1,
            vcpu: 1,
            vintid: 8300
        })
    );
    // An LPI nobody mapped, or outside the pool, has no route.
    assert_eq!(env.routes.get(lpi + 1), None);
    assert_eq!(env.routes.get(100), None);
    assert_eq!(env.routes.get(LPI_BASE + 64), None);
}

#[test]
fn an_lpi_is_delivered_only_to_the_vcpu_its_route_names() {
    let routes = LpiRoutes::new(4);
    routes.set(
        LPI_BASE + 1,
        Some(LpiRoute {
            slot: 2,
            vcpu: 1,
            vintid: 8300,
        }),
    );
    assert_eq!(routes.deliver(LPI_BASE + 1, Some((2, 1))), Some(8300));
    // Another vCPU of the partition, another partition, an idle CPU.
    assert_eq!(routes.deliver(LPI_BASE + 1, Some((2, 0))), None);
    assert_eq!(routes.deliver(LPI_BASE + 1, Some((3, 1))), None);
    assert_eq!(routes.deliver(LPI_BASE + 1, None), None);
    // No route, or no LPI of the pool.
    assert_eq!(routes.deliver(LPI_BASE, Some((2, 1))), None);
    assert_eq!(routes.deliver(LPI_BASE + 4, Some((2, 1))), None);
    routes.set(LPI_BASE + 1, None);
    assert_eq!(routes.deliver(LPI_BASE + 1, Some((2, 1))), None);
}

#[test]
fn movi_moves_the_collection_and_the_route_keeps_the_vintid() {
    let mut env = Env::new(64);
    let mut p = its(0);
    p.apply(mapd(8, 1), &mut env).unwrap();
    p.apply(mapti(8, 0, 8192, 0), &mut env).unwrap();
    env.sent.clear();
    p.apply(
        PhysCmd::Movi {
            device: 8,
            event: 0,
            vcpu: 1,
        },
        &mut env,
    )
    .unwrap();
    let lpi = p.lpi_of(8, 0).unwrap();
    assert_eq!(
        env.sent,
        [
            ItsCmd::Movi {
                device: 8,
                event: 0,
                icid: 3
            },
            ItsCmd::Sync { rdbase: 3 }
        ]
    );
    assert_eq!(env.routes.get(lpi).unwrap().vcpu, 1);
    assert_eq!(env.routes.get(lpi).unwrap().vintid, 8192);
}

#[test]
fn remapping_an_event_reuses_its_lpi_and_discards_the_old_translation() {
    let mut env = Env::new(64);
    let mut p = its(0);
    p.apply(mapd(8, 1), &mut env).unwrap();
    p.apply(mapti(8, 0, 8192, 0), &mut env).unwrap();
    env.sent.clear();
    p.apply(mapti(8, 0, 8500, 1), &mut env).unwrap();
    assert_eq!(env.pool.in_use(), 1);
    assert_eq!(
        env.sent[0],
        ItsCmd::Discard {
            device: 8,
            event: 0
        }
    );
    assert_eq!(env.routes.get(LPI_BASE).unwrap().vintid, 8500);
}

#[test]
fn discard_unmap_and_release_give_every_lpi_and_itt_back() {
    let mut env = Env::new(64);
    let mut p = its(0);
    p.apply(mapd(8, 2), &mut env).unwrap();
    for e in 0..4 {
        p.apply(mapti(8, e, 8192 + e, 0), &mut env).unwrap();
    }
    p.apply(mapd(0x10, 1), &mut env).unwrap();
    p.apply(mapti(0x10, 0, 9000, 1), &mut env).unwrap();
    assert_eq!(env.pool.in_use(), 5);
    assert_eq!(p.lpis(), 5);

    let lpi = p.lpi_of(8, 3).unwrap();
    p.apply(
        PhysCmd::Discard {
            device: 8,
            event: 3,
        },
        &mut env,
    )
    .unwrap();
    assert_eq!(env.pool.in_use(), 4);
    assert_eq!(env.routes.get(lpi), None);
    assert!(env.sent.contains(&ItsCmd::Discard {
        device: 8,
        event: 3
    }));

    // MAPD V=0 drops the device's events with it.
    p.apply(
        PhysCmd::Mapd {
            device: 8,
            event_bits: 0,
            valid: false,
        },
        &mut env,
    )
    .unwrap();
    assert_eq!(env.pool.in_use(), 1);
    assert_eq!(p.lpi_of(8, 0), None);

    // Remapping a device with events drops them too.
    p.apply(mapd(0x10, 3), &mut env).unwrap();
    assert_eq!(env.pool.in_use(), 0);
    p.apply(mapti(0x10, 0, 9000, 1), &mut env).unwrap();

    p.release(&mut env);
    assert_eq!(env.pool.in_use(), 0);
    assert_eq!(env.itt_used, 0);
    assert_eq!(p.lpis(), 0);
    for n in 0..64 {
        assert_eq!(env.routes.get(LPI_BASE + n), None);
    }
}

#[test]
fn limits_refuse_before_anything_is_sent() {
    let mut env = Env::new(2);
    let mut p = its(0);
    // More events than an MSI-X table can have.
    assert_eq!(
        p.apply(mapd(8, MAX_EVENT_BITS + 1), &mut env),
        Err(PitsError::TooManyEvents {
            device: 8,
            event_bits: 12
        })
    );
    // A DeviceID beyond the physical Devbits.
    assert_eq!(
        p.apply(mapd(1 << 16, 1), &mut env),
        Err(PitsError::DeviceOutOfRange(1 << 16))
    );
    env.itt_limit = 0;
    assert_eq!(
        p.apply(mapd(8, 1), &mut env),
        Err(PitsError::NoIttMemory(8))
    );
    assert!(env.sent.is_empty());

    env.itt_limit = 1 << 20;
    p.apply(mapd(8, 3), &mut env).unwrap();
    p.apply(mapti(8, 0, 8192, 0), &mut env).unwrap();
    p.apply(mapti(8, 1, 8193, 0), &mut env).unwrap();
    env.sent.clear();
    // The pool is empty.
    assert_eq!(
        p.apply(mapti(8, 2, 8194, 0), &mut env),
        Err(PitsError::NoLpi)
    );
    // A vCPU the partition lacks.
    assert_eq!(
        p.apply(mapti(8, 0, 8192, 7), &mut env),
        Err(PitsError::NoSuchVcpu(7))
    );
    assert!(env.sent.is_empty());
    assert_eq!(p.lpi_of(8, 2), None);
}

#[test]
fn two_partitions_never_share_an_lpi() {
    let mut env = Env::new(64);
    let mut a = its(1);
    let mut b = its(2);
    a.apply(mapd(8, 1), &mut env).unwrap();
    b.apply(mapd(0x10, 1), &mut env).unwrap();
    a.apply(mapti(8, 0, 8192, 0), &mut env).unwrap();
    b.apply(mapti(0x10, 0, 8192, 0), &mut env).unwrap();
    let (la, lb) = (a.lpi_of(8, 0).unwrap(), b.lpi_of(0x10, 0).unwrap());
    assert_ne!(la, lb);
    assert_eq!(env.routes.get(la).unwrap().slot, 1);
    assert_eq!(env.routes.get(lb).unwrap().slot, 2);
    // One partition going leaves the other's route alone.
    a.release(&mut env);
    assert_eq!(env.routes.get(la), None);
    assert_eq!(env.routes.get(lb).unwrap().slot, 2);
}

#[test]
fn int_and_clear_go_physical_inv_stays_virtual() {
    let mut env = Env::new(8);
    let mut p = its(0);
    p.apply(mapd(8, 1), &mut env).unwrap();
    p.apply(mapti(8, 0, 8192, 0), &mut env).unwrap();
    env.sent.clear();
    p.apply(
        PhysCmd::Int {
            device: 8,
            event: 0,
        },
        &mut env,
    )
    .unwrap();
    p.apply(
        PhysCmd::Clear {
            device: 8,
            event: 0,
        },
        &mut env,
    )
    .unwrap();
    p.apply(
        PhysCmd::Inv {
            device: 8,
            event: 0,
        },
        &mut env,
    )
    .unwrap();
    p.apply(PhysCmd::InvAll { vcpu: 0 }, &mut env).unwrap();
    p.apply(PhysCmd::Sync { vcpu: 1 }, &mut env).unwrap();
    assert_eq!(
        env.sent,
        [
            ItsCmd::Int {
                device: 8,
                event: 0
            },
            ItsCmd::Clear {
                device: 8,
                event: 0
            },
            ItsCmd::Sync { rdbase: 3 }
        ]
    );
}

#[test]
fn lpi_pool_hands_out_each_lpi_once_and_takes_foreign_ones_quietly() {
    let mut pool = LpiPool::new(70);
    let all: Vec<u32> = (0..70).map(|_| pool.alloc().unwrap()).collect();
    assert_eq!(all[0], LPI_BASE);
    assert_eq!(all[69], LPI_BASE + 69);
    assert_eq!(pool.alloc(), None);
    pool.free(LPI_BASE + 65);
    pool.free(5); // not an LPI
    pool.free(LPI_BASE + 70); // not ours
    assert_eq!(pool.in_use(), 69);
    assert_eq!(pool.alloc(), Some(LPI_BASE + 65));
}

// A guest's queue through its vITS into the physical side.

struct Ram(BTreeMap<u64, [u64; 4]>);
impl QueueMemory for Ram {
    fn read_command(&self, ipa: u64) -> Option<[u64; 4]> {
        Some(self.0.get(&ipa).copied().unwrap_or([0; 4]))
    }
}

struct Both<'a> {
    its: &'a mut PartitionIts,
    env: &'a mut Env,
    vfaults: Vec<VitsError>,
    pfaults: Vec<PitsError>,
}
impl VitsSink for Both<'_> {
    fn apply(&mut self, cmd: PhysCmd) {
        if let Err(e) = self.its.apply(cmd, self.env) {
            self.pfaults.push(e);
        }
    }
    fn fault(&mut self, error: VitsError, _offset: u64) {
        self.vfaults.push(error);
    }
}

#[test]
fn a_guests_commands_reach_the_physical_its_and_foreign_devices_do_not() {
    const Q: u64 = 0x4001_0000;
    let owner = |d: u32| d == 0x10;
    let mut ram = Ram(BTreeMap::new());
    let cmds = [
        [0x09, 0, 1 << 63 | 1 << 16 | 1, 0], // MAPC ICID 1 -> vCPU 1
        [0x10_0000_0008, 1, 1 << 63 | 0x4100_0000, 0], // MAPD 0x10, 2 events
        [0x10_0000_000A, 8300 << 32, 1, 0],  // MAPTI ev 0 -> 8300, ICID 1
        [0x08_0000_0008, 1, 1 << 63, 0],     // MAPD of a foreign DeviceID
    ];
    for (i, c) in cmds.iter().enumerate() {
        ram.0.insert(Q + 32 * i as u64, *c);
    }
    let mut v = Vits::new(VitsLimits::for_vcpus(2));
    let mut env = Env::new(16);
    let mut p = its(3);
    let mut sink = Both {
        its: &mut p,
        env: &mut env,
        vfaults: Vec::new(),
        pfaults: Vec::new(),
    };
    v.write(GITS_CBASER, 1 << 63 | Q, &ram, &owner, &mut sink);
    v.write(GITS_CTLR, 1, &ram, &owner, &mut sink);
    v.write(GITS_CWRITER, 4 * 32, &ram, &owner, &mut sink);
    assert_eq!(sink.vfaults, [VitsError::ForeignDevice(8)]);
    assert!(sink.pfaults.is_empty());
    let lpi = p.lpi_of(0x10, 0).unwrap();
    assert_eq!(
        env.routes.get(lpi),
        Some(LpiRoute {
            slot: 3,
            vcpu: 1,
            vintid: 8300
        })
    );
    assert!(env.sent.contains(&ItsCmd::Mapti {
        device: 0x10,
        event: 0,
        intid: lpi,
        icid: 3
    }));
    assert!(!env
        .sent
        .iter()
        .any(|c| matches!(c, ItsCmd::Mapd { device: 8, .. })));
    let _ = DeviceOwner::owns(&owner, 0x10);
}
