//! The GICv5 ITS seam's decisions, command by command.

use super::*;
use crate::vgic::pits::LPI_BASE;
use alloc::sync::Arc;
use alloc::vec;

/// Records every step; `stuck` makes each fail.
#[derive(Clone, Default)]
struct Rec {
    ops: Arc<spin::Mutex<Vec<Its5Op>>>,
    stuck: bool,
}

impl Its5Hw for Rec {
    fn apply(&mut self, op: &Its5Op) -> bool {
        self.ops.lock().push(*op);
        !self.stuck
    }
    fn alloc_itt(&mut self, _: usize) -> Option<u64> {
        Some(0x7000_0000)
    }
    fn free_itt(&mut self, _: u64, _: usize) {}
}

/// Four CPUs with IAFFIDs 10..13, an ITS of 8 DeviceID and 5 EventID bits.
fn its() -> (V5Its<Rec>, Arc<spin::Mutex<Vec<Its5Op>>>) {
    let rec = Rec::default();
    let ops = rec.ops.clone();
    let layout = IrsLayout::for_cpus(4);
    (
        V5Its::new(rec, typer(8, 5), layout, vec![10, 11, 12, 13]),
        ops,
    )
}

const ITT: u64 = 0x7000_0100;

fn mapd(device: u32, valid: bool) -> ItsCmd {
    ItsCmd::Mapd {
        device,
        itt: ITT,
        event_bits: 2,
        valid,
    }
}

fn mapti(event: u32, n: u32, icid: u16) -> ItsCmd {
    ItsCmd::Mapti {
        device: 5,
        event,
        intid: LPI_BASE + n,
        icid,
    }
}

#[test]
fn a_mapti_targets_the_lpi_at_its_cpu_before_its_itt_entry_is_written() {
    let (mut its, ops) = its();
    let msi_base = IrsLayout::for_cpus(4).msi_base;

    its.send(&mapd(5, true));
    its.send(&mapti(1, 7, 2));

    assert_eq!(
        *ops.lock(),
        [
            Its5Op::Device {
                device: 5,
                itt: Some(ITT),
                event_bits: 2
            },
            Its5Op::Target {
                lpi: msi_base + 7,
                iaffid: Some(12)
            },
            Its5Op::Event {
                device: 5,
                itt: ITT,
                event: 1,
                lpi: Some(msi_base + 7)
            },
        ]
    );
    assert_eq!(its.refusals(), 0);
}

#[test]
fn a_discard_unmaps_the_event_syncs_the_device_then_disables_the_lpi() {
    let (mut its, ops) = its();
    let lpi = IrsLayout::for_cpus(4).msi_base + 7;
    its.send(&mapd(5, true));
    its.send(&mapti(1, 7, 2));
    ops.lock().clear();

    its.send(&ItsCmd::Discard {
        device: 5,
        event: 1,
    });
    its.send(&ItsCmd::Int {
        device: 5,
        event: 1,
    });

    assert_eq!(
        *ops.lock(),
        [
            Its5Op::Event {
                device: 5,
                itt: ITT,
                event: 1,
                lpi: None
            },
            Its5Op::Sync { device: 5 },
            Its5Op::Target { lpi, iaffid: None },
        ]
    );
    assert_eq!(
        its.last_refusal(),
        Some(Its5Refusal::NoSuchEvent {
            device: 5,
            event: 1
        }),
        "a discarded event is gone"
    );
}

#[test]
fn unmapping_a_device_disables_its_remaining_lpis_first() {
    let (mut its, ops) = its();
    let base = IrsLayout::for_cpus(4).msi_base;
    its.send(&mapd(5, true));
    its.send(&mapti(0, 3, 0));
    its.send(&mapti(2, 4, 1));
    ops.lock().clear();

    its.send(&mapd(5, false));

    assert_eq!(
        *ops.lock(),
        [
            Its5Op::Target {
                lpi: base + 3,
                iaffid: None
            },
            Its5Op::Target {
                lpi: base + 4,
                iaffid: None
            },
            Its5Op::Device {
                device: 5,
                itt: None,
                event_bits: 0
            },
        ]
    );
}

#[test]
fn a_movi_retargets_the_lpi_and_int_and_clear_pend_it() {
    let (mut its, ops) = its();
    let lpi = IrsLayout::for_cpus(4).msi_base + 7;
    its.send(&mapd(5, true));
    its.send(&mapti(1, 7, 2));
    ops.lock().clear();

    its.send(&ItsCmd::Movi {
        device: 5,
        event: 1,
        icid: 3,
    });
    its.send(&ItsCmd::Int {
        device: 5,
        event: 1,
    });
    its.send(&ItsCmd::Clear {
        device: 5,
        event: 1,
    });
    its.send(&ItsCmd::Inv {
        device: 5,
        event: 1,
    });
    its.send(&ItsCmd::Sync { rdbase: 3 });

    assert_eq!(
        *ops.lock(),
        [
            Its5Op::Target {
                lpi,
                iaffid: Some(13)
            },
            Its5Op::Pend { lpi, pending: true },
            Its5Op::Pend {
                lpi,
                pending: false
            },
        ]
    );
}

#[test]
fn hostile_or_mistaken_commands_are_refused_by_name_and_send_nothing() {
    let (mut its, ops) = its();
    its.send(&mapd(5, true));
    ops.lock().clear();
    let cases = [
        (
            mapd(256, true),
            Its5Refusal::DeviceOutOfRange {
                device: 256,
                event_bits: 2,
            },
        ),
        (
            ItsCmd::Mapd {
                device: 6,
                itt: ITT,
                event_bits: 6,
                valid: true,
            },
            Its5Refusal::DeviceOutOfRange {
                device: 6,
                event_bits: 6,
            },
        ),
        (
            ItsCmd::Mapti {
                device: 9,
                event: 0,
                intid: LPI_BASE,
                icid: 0,
            },
            Its5Refusal::NoSuchEvent {
                device: 9,
                event: 0,
            },
        ),
        (
            mapti(4, 0, 0),
            Its5Refusal::NoSuchEvent {
                device: 5,
                event: 4,
            },
        ),
        (
            ItsCmd::Mapti {
                device: 5,
                event: 0,
                intid: 40,
                icid: 0,
            },
            Its5Refusal::NotAnMsiLpi { intid: 40 },
        ),
        (
            mapti(0, crate::vgic::pits::LPI_COUNT, 0),
            Its5Refusal::NotAnMsiLpi {
                intid: LPI_BASE + crate::vgic::pits::LPI_COUNT,
            },
        ),
        (mapti(0, 1, 4), Its5Refusal::NoSuchCpu { icid: 4 }),
    ];

    for (n, (cmd, why)) in cases.iter().enumerate() {
        its.send(cmd);
        assert_eq!(its.last_refusal(), Some(*why), "{cmd:?}");
        assert_eq!(its.refusals(), n as u64 + 1);
    }
    its.send_words([0; 4]);

    assert_eq!(its.last_refusal(), Some(Its5Refusal::Gicv4));
    assert!(ops.lock().is_empty(), "{:?}", ops.lock());
}

#[test]
fn an_its_that_does_not_finish_a_step_stops_the_command_and_is_named() {
    let rec = Rec {
        stuck: true,
        ..Rec::default()
    };
    let ops = rec.ops.clone();
    let mut its = V5Its::new(rec, typer(8, 5), IrsLayout::for_cpus(4), vec![10]);

    its.send(&mapd(5, true));
    its.send(&mapti(1, 7, 0));

    assert_eq!(its.last_refusal(), Some(Its5Refusal::Stuck));
    assert_eq!(
        ops.lock().len(),
        2,
        "the MAPTI stopped after its first step"
    );
}
