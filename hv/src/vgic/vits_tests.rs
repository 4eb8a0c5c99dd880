//! The virtual ITS's command translation, with hostile command sequences.

use super::*;
use alloc::collections::BTreeMap;
use alloc::vec::Vec;

/// The partition's RAM: 1 MiB at 0x4000_0000; commands by address.
#[derive(Default)]
struct Ram {
    cmds: BTreeMap<u64, [u64; 4]>,
}

const RAM: u64 = 0x4000_0000;
const RAM_SIZE: u64 = 0x10_0000;
const QUEUE: u64 = RAM + 0x1_0000;

impl QueueMemory for Ram {
    fn read_command(&self, ipa: u64) -> Option<[u64; 4]> {
        (ipa >= RAM && ipa + 32 <= RAM + RAM_SIZE)
            .then(|| self.cmds.get(&ipa).copied().unwrap_or([0; 4]))
    }
}

#[derive(Default)]
struct Sink {
    cmds: Vec<PhysCmd>,
    faults: Vec<(VitsError, u64)>,
}

impl VitsSink for Sink {
    fn apply(&mut self, cmd: PhysCmd) {
        self.cmds.push(cmd);
    }
    fn fault(&mut self, error: VitsError, offset: u64) {
        self.faults.push((error, offset));
    }
}

/// The partition owns the functions 00:01.0 and 00:02.0 (DeviceIDs 0x08, 0x10).
fn owner(d: u32) -> bool {
    d == 0x08 || d == 0x10
}

/// A guest driving its vITS: queue of `pages` at QUEUE, enabled.
struct Guest {
    its: Vits,
    ram: Ram,
    sink: Sink,
    base: u64,
    next: u64,
    pages: u64,
}

impl Guest {
    fn new(pages: u64) -> Guest {
        let mut g = Guest {
            its: Vits::new(VitsLimits::for_vcpus(2)),
            ram: Ram::default(),
            sink: Sink::default(),
            base: QUEUE,
            next: 0,
            pages,
        };
        g.write(GITS_CBASER, CBASER_VALID | QUEUE | (pages - 1));
        g.write(GITS_CTLR, CTLR_ENABLED);
        g
    }

    fn write(&mut self, offset: u64, value: u64) {
        self.its
            .write(offset, value, &self.ram, &owner, &mut self.sink);
    }

    /// Puts commands in the queue (wrapping) and advances CWRITER once.
    fn submit(&mut self, cmds: &[[u64; 4]]) {
        let size = self.pages * 4096;
        for c in cmds {
            self.ram.cmds.insert(self.base + self.next, *c);
            self.next = (self.next + 32) % size;
        }
        self.write(GITS_CWRITER, self.next);
    }

    fn creadr(&self) -> u64 {
        self.its.read(GITS_CREADR)
    }
}

fn mapd(device: u32, size: u8, itt: u64, valid: bool) -> [u64; 4] {
    [
        u64::from(MAPD) | u64::from(device) << 32,
        u64::from(size),
        (itt & 0xF_FFFF_FFFF_FF00) | u64::from(valid) << 63,
        0,
    ]
}

fn mapc(icid: u16, rd: u64) -> [u64; 4] {
    [u64::from(MAPC), 0, 1 << 63 | rd << 16 | u64::from(icid), 0]
}

fn mapti(device: u32, event: u32, intid: u32, icid: u16) -> [u64; 4] {
    [
        u64::from(MAPTI) | u64::from(device) << 32,
        u64::from(event) | u64::from(intid) << 32,
        u64::from(icid),
        0,
    ]
}

fn dev_event(op: u8, device: u32, event: u32) -> [u64; 4] {
    [
        u64::from(op) | u64::from(device) << 32,
        u64::from(event),
        0,
        0,
    ]
}

fn sync(rd: u64) -> [u64; 4] {
    [u64::from(SYNC), 0, rd << 16, 0]
}

/// What Linux's ITS driver does first: a collection per CPU, a device, its
/// events, then INV and SYNC.
fn linux_bring_up(g: &mut Guest) {
    g.submit(&[mapc(0, 0), sync(0), mapc(1, 1), sync(1)]);
    g.submit(&[mapd(0x08, 4, RAM + 0x2_0000, true), sync(0)]);
    g.submit(&[
        mapti(0x08, 0, 8192, 0),
        mapti(0x08, 1, 8193, 1),
        dev_event(INV, 0x08, 1),
        sync(1),
    ]);
}

#[test]
fn typer_reports_what_the_translator_checks() {
    let its = Vits::new(VitsLimits::for_vcpus(4));
    let t = its.typer();
    assert_eq!(t & 1, 1, "Physical");
    assert_eq!(t >> 4 & 0xF, 7, "ITT_entry_size 8 bytes");
    assert_eq!(t >> 8 & 0x1F, 15, "ID_bits");
    assert_eq!(t >> 13 & 0x1F, 15, "Devbits");
    assert_eq!(t >> 24 & 0xFF, 4, "HCC");
    assert_eq!(t >> 19 & 1, 0, "PTA = 0");
}

#[test]
fn a_linux_bring_up_is_translated_in_order() {
    let mut g = Guest::new(1);
    linux_bring_up(&mut g);

    assert_eq!(g.sink.faults, []);
    assert_eq!(
        g.sink.cmds,
        [
            PhysCmd::Sync { vcpu: 0 },
            PhysCmd::Sync { vcpu: 1 },
            PhysCmd::Mapd {
                device: 8,
                event_bits: 5,
                valid: true
            },
            PhysCmd::Sync { vcpu: 0 },
            PhysCmd::Mapti {
                device: 8,
                event: 0,
                vintid: 8192,
                vcpu: 0
            },
            PhysCmd::Mapti {
                device: 8,
                event: 1,
                vintid: 8193,
                vcpu: 1
            },
            PhysCmd::Inv {
                device: 8,
                event: 1
            },
            PhysCmd::Sync { vcpu: 1 },
        ]
    );
    assert_eq!(g.creadr(), g.its.read(GITS_CWRITER));
    assert_ne!(g.its.read(GITS_CTLR) & CTLR_QUIESCENT, 0);
    assert_eq!(g.its.mappings(), 2);
}

#[test]
fn movi_int_clear_invall_discard_follow_the_mappings() {
    let mut g = Guest::new(1);
    linux_bring_up(&mut g);
    g.sink.cmds.clear();

    g.submit(&[
        [u64::from(MOVI) | 8 << 32, 0, 1, 0],
        dev_event(INT, 8, 0),
        dev_event(CLEAR, 8, 0),
        [u64::from(INVALL), 0, 1, 0],
        dev_event(DISCARD, 8, 0),
    ]);

    assert_eq!(g.sink.faults, []);
    assert_eq!(
        g.sink.cmds,
        [
            PhysCmd::Movi {
                device: 8,
                event: 0,
                vcpu: 1
            },
            PhysCmd::Int {
                device: 8,
                event: 0
            },
            PhysCmd::Clear {
                device: 8,
                event: 0
            },
            PhysCmd::InvAll { vcpu: 1 },
            PhysCmd::Discard {
                device: 8,
                event: 0
            },
        ]
    );
    assert_eq!(g.its.mappings(), 1);
    // The discarded event is gone: INT on it is an error now.
    g.submit(&[dev_event(INT, 8, 0)]);
    assert_eq!(
        g.sink.faults,
        [(
            VitsError::EventNotMapped {
                device: 8,
                event: 0
            },
            32 * 15
        )]
    );
}

#[test]
fn a_foreign_device_id_is_refused_the_queue_stalls_and_retry_meets_it_again() {
    let mut g = Guest::new(1);
    g.submit(&[mapc(0, 0)]);
    // 00:03.0 belongs to another partition.
    g.submit(&[mapd(0x18, 4, RAM, true), sync(0)]);

    assert_eq!(g.sink.faults, [(VitsError::ForeignDevice(0x18), 32)]);
    assert_eq!(g.sink.cmds, []);
    assert_eq!(g.creadr(), 32 | STALLED);
    assert_ne!(
        g.its.read(GITS_CTLR) & CTLR_QUIESCENT,
        0,
        "a stalled ITS is quiescent"
    );

    let cwriter = g.its.read(GITS_CWRITER);
    g.write(GITS_CWRITER, cwriter | RETRY);
    assert_eq!(g.sink.faults.len(), 2);
    assert_eq!(g.creadr(), 32 | STALLED);

    // Starting over with a new queue recovers.
    g.write(GITS_CTLR, 0);
    g.write(GITS_CBASER, CBASER_VALID | (QUEUE + 0x1000));
    g.write(GITS_CTLR, CTLR_ENABLED);
    assert_eq!(g.creadr(), 0);
    g.base = QUEUE + 0x1000;
    g.next = 0;
    g.submit(&[sync(0)]);
    assert_eq!(g.sink.cmds, [PhysCmd::Sync { vcpu: 0 }]);
}

#[test]
fn every_command_naming_a_foreign_device_is_refused() {
    for cmd in [
        mapd(0x18, 1, RAM, false),
        mapti(0x18, 0, 8192, 0),
        [u64::from(MAPI) | 0x18 << 32, 0, 0, 0],
        [u64::from(MOVI) | 0x18 << 32, 0, 0, 0],
        dev_event(INT, 0x18, 0),
        dev_event(CLEAR, 0x18, 0),
        dev_event(INV, 0x18, 0),
        dev_event(DISCARD, 0x18, 0),
    ] {
        let mut g = Guest::new(1);
        g.submit(&[mapc(0, 0), cmd]);
        assert_eq!(
            g.sink.faults,
            [(VitsError::ForeignDevice(0x18), 32)],
            "{cmd:x?}"
        );
        assert_eq!(g.sink.cmds, []);
    }
}

#[test]
fn out_of_range_ids_are_command_errors() {
    let cases: [([u64; 4], VitsError); 9] = [
        (
            mapd(0x1_0008, 4, RAM, true),
            VitsError::DeviceOutOfRange(0x1_0008),
        ),
        (mapd(0x08, 16, RAM, true), VitsError::IttSizeOutOfRange(16)),
        (mapd(0x08, 31, RAM, true), VitsError::IttSizeOutOfRange(31)),
        (
            mapti(0x08, 32, 8192, 0),
            VitsError::EventOutOfRange {
                device: 8,
                event: 32,
            },
        ),
        (mapti(0x08, 0, 8191, 0), VitsError::IntidOutOfRange(8191)),
        (
            mapti(0x08, 0, 1 << 16, 0),
            VitsError::IntidOutOfRange(1 << 16),
        ),
        (mapti(0x08, 0, 8192, 2), VitsError::CollectionOutOfRange(2)),
        (mapc(0, 2), VitsError::TargetOutOfRange(2)),
        (
            sync(0x7_FFFF_FFFF),
            VitsError::TargetOutOfRange(0x7_FFFF_FFFF),
        ),
    ];
    for (cmd, error) in cases {
        let mut g = Guest::new(1);
        g.submit(&[mapc(0, 0), mapd(0x08, 4, RAM, true)]);
        g.sink.cmds.clear();
        g.submit(&[cmd]);
        assert_eq!(g.sink.faults, [(error, 64)], "{cmd:x?}");
        assert_eq!(g.sink.cmds, []);
    }
}

#[test]
fn unmapped_devices_collections_and_unknown_commands_are_errors() {
    let mut g = Guest::new(1);
    g.submit(&[mapti(0x10, 0, 8192, 0)]);
    assert_eq!(
        g.sink.faults.last(),
        Some(&(VitsError::DeviceNotMapped(0x10), 0))
    );

    let mut g = Guest::new(1);
    g.submit(&[mapd(0x10, 4, RAM, true), mapti(0x10, 0, 8192, 1)]);
    assert_eq!(g.sink.faults, [(VitsError::CollectionNotMapped(1), 32)]);

    for (op, error) in [
        (0x00, VitsError::UnknownCommand(0)),
        (0x29, VitsError::UnknownCommand(0x29)), // VMAPP: a guest's ITS is GICv3
        (MOVALL, VitsError::Unsupported(MOVALL)),
    ] {
        let mut g = Guest::new(1);
        g.submit(&[[u64::from(op), 0, 0, 0]]);
        assert_eq!(g.sink.faults, [(error, 0)]);
    }
}

#[test]
fn the_queue_wraps_around_and_creadr_follows() {
    let mut g = Guest::new(1); // 128 commands
    g.submit(&[mapc(0, 0)]);
    for _ in 0..10 {
        let batch: Vec<_> = (0..50).map(|_| sync(0)).collect();
        g.submit(&batch);
        assert_eq!(g.creadr(), g.its.read(GITS_CWRITER));
    }
    assert_eq!(g.sink.faults, []);
    assert_eq!(g.sink.cmds.len(), 500);
    assert_eq!(g.creadr(), (501 * 32) % 4096);
}

#[test]
fn a_full_queue_is_processed_once_per_write_and_cwriter_beyond_the_end_is_refused() {
    let mut g = Guest::new(1);
    g.submit(&[mapc(0, 0)]);
    // The queue full of SYNCs, CWRITER one behind CREADR: 127 commands.
    for k in 0..128 {
        g.ram.cmds.insert(QUEUE + 32 * k, sync(0));
    }
    g.write(GITS_CWRITER, 0);
    assert_eq!(g.sink.cmds.len(), 127);
    assert_eq!(g.creadr(), 0);

    g.write(GITS_CWRITER, 4096);
    g.write(GITS_CWRITER, 0xF_FFE0);
    assert_eq!(
        g.sink.faults,
        [
            (VitsError::WriterBeyondQueue(4096), 4096),
            (VitsError::WriterBeyondQueue(0xF_FFE0), 0xF_FFE0)
        ]
    );
    assert_eq!(g.its.read(GITS_CWRITER), 0);
}

#[test]
fn huge_counts_stay_bounded() {
    let mut g = Guest::new(16);
    g.submit(&[
        mapc(0, 0),
        mapd(0x08, 15, RAM, true),
        mapd(0x10, 15, RAM, true),
    ]);
    // 5,000 MAPTIs: the partition keeps at most 4,096 mappings.
    let mut refused = 0;
    for e in 0..5000u32 {
        g.submit(&[mapti(0x08 + 8 * (e & 1), e, 8192 + e, 0)]);
        if g.its.stalled() {
            refused += 1;
            // The guest gives up on it and starts a fresh queue.
            g.write(GITS_CTLR, 0);
            g.write(GITS_CBASER, CBASER_VALID | QUEUE | 15);
            g.write(GITS_CTLR, CTLR_ENABLED);
            g.next = 0;
        }
    }
    assert_eq!(g.its.mappings(), 4096);
    assert_eq!(refused, 5000 - 4096);
    assert!(g
        .sink
        .faults
        .iter()
        .all(|f| f.0 == VitsError::TooManyMappings));
    // Remapping a device drops its events, and frees them.
    g.submit(&[mapd(0x08, 15, RAM, true)]);
    assert_eq!(g.its.mappings(), 2048);
    g.submit(&[mapd(0x10, 0, RAM, false)]);
    assert_eq!(g.its.mappings(), 0);
    assert_eq!(g.its.devices(), 1);
}

#[test]
fn overlapping_tables_and_a_queue_outside_ram_harm_nothing_but_the_guest() {
    let mut g = Guest::new(1);
    // Both devices' ITTs at the same address, overlapping the queue itself:
    // the translator never touches guest table memory, so each keeps its own.
    g.submit(&[
        mapc(0, 0),
        mapd(0x08, 1, QUEUE, true),
        mapd(0x10, 1, QUEUE, true),
    ]);
    g.submit(&[mapti(0x08, 0, 8192, 0), mapti(0x10, 0, 8200, 0)]);
    assert_eq!(g.sink.faults, []);
    assert_eq!(g.its.mappings(), 2);

    // A queue whose last page is beyond the partition's RAM.
    let mut g = Guest::new(1);
    g.write(GITS_CTLR, 0);
    g.write(GITS_CBASER, CBASER_VALID | (RAM + RAM_SIZE - 0x1000) | 1);
    g.write(GITS_CTLR, CTLR_ENABLED);
    g.base = RAM + RAM_SIZE - 0x1000;
    g.pages = 2;
    for k in 0..128 {
        g.ram.cmds.insert(g.base + 32 * k, sync(0));
    }
    g.write(GITS_CWRITER, 0x1000 + 32);
    assert_eq!(g.sink.cmds.len(), 128);
    assert_eq!(
        g.sink.faults,
        [(VitsError::QueueOutsideRam(RAM + RAM_SIZE), 0x1000)]
    );
    assert!(g.its.stalled());
}

#[test]
fn cbaser_is_kept_only_while_disabled_and_reserved_writes_are_ignored() {
    let mut g = Guest::new(1);
    let before = g.its.read(GITS_CBASER);
    g.write(GITS_CBASER, CBASER_VALID | 0x7000_0000);
    assert_eq!(g.its.read(GITS_CBASER), before);
    g.write(GITS_TYPER, 0);
    g.write(GITS_CREADR, 0x40);
    assert_eq!(g.its.read(GITS_TYPER), g.its.typer());
    assert_eq!(g.creadr(), 0);
    // GITS_BASER0's type and entry size are read-only.
    g.write(GITS_BASER0, 0);
    assert_eq!(g.its.read(GITS_BASER0) & BASER_RO, BASER_DEVICES);
}
