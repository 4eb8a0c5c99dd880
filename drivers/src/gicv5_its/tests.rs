//! The GICv5 ITS driver against `pinfold_gicv5model::its`: the core's
//! decisions (`pinfold_hv::its5::V5Its::decide`) applied by the driver on
//! a model ITS whose events reach the model IRS of the `gicv5` rig, and a
//! device's MSI written to the translate frame.

extern crate std;

use super::*;
use crate::gicv5::tests::{pe, rig, ModelMem, ModelPe, Rig, Shared, CPUS};
use pinfold_gicv5model::its::{reg as mreg, Its, ItsConfig, ItsMisuse, Translation};
use pinfold_hv::irqchip::PerCpuIrqChip;
use pinfold_hv::its5::{typer, Its5Hw, V5Its};
use pinfold_hv::vgic::pits::{ItsCmd, LPI_BASE};
use pinfold_hv::vgic5::IrsLayout;
use std::cell::RefCell;
use std::rc::Rc;

/// The model ITS's config frame.
struct Frame {
    its: Rc<RefCell<Its>>,
    m: Shared,
}

impl ItsMmio for Frame {
    fn read32(&mut self, offset: usize) -> u32 {
        self.its.borrow_mut().read(offset as u64) as u32
    }
    fn write32(&mut self, offset: usize, value: u32) {
        let m = self.m.borrow();
        self.its
            .borrow_mut()
            .write(&m, offset as u64, u64::from(value));
    }
    fn write64(&mut self, offset: usize, value: u64) {
        let m = self.m.borrow();
        self.its.borrow_mut().write(&m, offset as u64, value);
    }
}

/// Never applied: the tests apply the core's steps through the driver.
struct Decisions;

impl Its5Hw for Decisions {
    fn apply(&mut self, _: &Its5Op) -> bool {
        unreachable!()
    }
    fn alloc_itt(&mut self, _: usize) -> Option<u64> {
        None
    }
    fn free_itt(&mut self, _: u64, _: usize) {}
}

const DT: u64 = 0x9000_0000;
const ITT: u64 = 0x9100_0000;
const MSI_BASE: u32 = 300;
/// The NIC's DeviceID.
const NIC: u32 = 0x10;

struct ItsRig {
    r: Rig,
    its: Rc<RefCell<Its>>,
    drv: Gicv5Its<Frame>,
    core: V5Its<Decisions>,
    mem: ModelMem,
    regs: ModelPe,
}

/// The two-CPU `gicv5` rig with an ITS of 8 DeviceID bits brought up, its
/// CPUs taking the MSI pool from `MSI_BASE`.
fn its_rig() -> ItsRig {
    its_rig_with(|_| {})
}

fn its_rig_with(before: impl FnOnce(&mut Its)) -> ItsRig {
    let mut r = rig();
    let mut its = Its::new(ItsConfig::default());
    before(&mut its);
    let its = Rc::new(RefCell::new(its));
    let layout = IrsLayout {
        msi_base: MSI_BASE,
        ..IrsLayout::for_cpus(2)
    };
    for c in &mut r.cpus {
        c.set_msi_lpis(MSI_BASE..MSI_BASE + layout.msi_lpis);
    }
    let frame = Frame {
        its: its.clone(),
        m: r.m.clone(),
    };
    let drv = Gicv5Its::init(frame, DT, 8).expect("ITS up");
    let core = V5Its::new(
        Decisions,
        typer(drv.device_bits(), drv.event_bits()),
        layout,
        CPUS.iter().map(|c| c.1).collect(),
    );
    let mem = ModelMem(r.m.clone());
    let (regs, _) = pe(&r.m, 0);
    ItsRig {
        r,
        its,
        drv,
        core,
        mem,
        regs,
    }
}

impl ItsRig {
    /// What the core decides for `cmd`, applied by the driver.
    fn send(&mut self, cmd: ItsCmd) {
        let ops = self.core.decide(&cmd).expect("accepted");
        for op in &ops {
            self.drv
                .apply(&mut self.mem, &mut self.regs, op)
                .expect("applied");
        }
    }
    /// The NIC (2 EventID bits) with event `event` to pool LPI `n` at CPU
    /// `cpu`'s collection.
    fn map_nic(&mut self, event: u32, n: u32, cpu: u16) {
        self.send(ItsCmd::Mapd {
            device: NIC,
            itt: ITT,
            event_bits: 2,
            valid: true,
        });
        self.send(ItsCmd::Mapti {
            device: NIC,
            event,
            intid: LPI_BASE + n,
            icid: cpu,
        });
    }
    fn msi(&mut self, device: u32, event: u32) -> Translation {
        let mut m = self.r.m.borrow_mut();
        self.its.borrow_mut().translate(&mut m, device, event)
    }
    fn no_misuse(&self) {
        self.r.no_misuse();
        assert_eq!(self.its.borrow().misuse(), &[] as &[ItsMisuse]);
    }
}

#[test]
fn the_its_comes_up_with_a_linear_device_table_and_is_enabled() {
    let t = its_rig();

    let mut its = t.its.borrow_mut();
    assert!(its.enabled());
    assert_eq!(its.read(mreg::DT_BASER), DT);
    assert_eq!(its.read(mreg::DT_CFGR), 8, "linear, 8 DeviceID bits");
    assert_eq!((t.drv.device_bits(), t.drv.event_bits()), (8, 11));
    drop(its);
    t.no_misuse();
}

#[test]
fn an_its_firmware_left_enabled_is_disabled_before_its_table_is_given() {
    let t = its_rig_with(|its| {
        let m = pinfold_gicv5model::Model::new(pinfold_gicv5model::Config::default());
        its.write(&m, mreg::CR0, mreg::CR0_ITSEN);
    });

    assert_eq!(t.its.borrow_mut().read(mreg::DT_BASER), DT);
    t.no_misuse();
}

#[test]
fn a_devices_event_reaches_the_lpi_of_its_owners_vcpu_cpu() {
    let mut t = its_rig();
    t.map_nic(1, 7, 1);

    let translated = t.msi(NIC, 1);
    let acked = t.r.cpus[1].ack();

    assert_eq!(translated, Translation::Lpi(MSI_BASE + 7));
    assert_eq!(acked, LPI_BASE + 7, "the core's number for pool LPI 7");
    assert!(!t.r.m.borrow().irq_signalled(0), "only CPU 1 is signalled");
    t.no_misuse();
}

#[test]
fn each_table_change_is_invalidated_and_waited_for() {
    let mut t = its_rig();

    t.map_nic(1, 7, 1);
    let after_map = t.its.borrow().invalidates();
    t.send(ItsCmd::Discard {
        device: NIC,
        event: 1,
    });

    assert_eq!(after_map, 2, "the device, then its event");
    assert_eq!(t.its.borrow().invalidates(), 3, "the discarded event");
    let syncs = t.its.borrow().syncs().to_vec();
    assert_eq!(syncs, [mreg::SYNCR_SYNC | u64::from(NIC)]);
    assert_eq!(t.msi(NIC, 1), Translation::NoEvent);
    assert_eq!(t.r.cpus[1].ack(), 1023);
    t.no_misuse();
}

#[test]
fn a_foreign_deviceids_write_translates_to_nothing() {
    let mut t = its_rig();
    t.map_nic(1, 7, 1);

    let foreign = t.msi(0x18, 1);
    let beyond = t.msi(NIC, 4);

    assert_eq!(
        (foreign, beyond),
        (Translation::NoDevice, Translation::NoEvent)
    );
    assert_eq!(t.r.cpus[1].ack(), 1023);
    assert_eq!(t.r.cpus[0].ack(), 1023);
    t.no_misuse();
}

#[test]
fn a_movi_moves_the_next_event_to_the_other_cpu() {
    let mut t = its_rig();
    t.map_nic(1, 7, 1);

    t.send(ItsCmd::Movi {
        device: NIC,
        event: 1,
        icid: 0,
    });
    t.msi(NIC, 1);

    assert_eq!(t.r.cpus[1].ack(), 1023);
    assert_eq!(t.r.cpus[0].ack(), LPI_BASE + 7);
    t.no_misuse();
}

#[test]
fn a_device_beyond_the_table_is_refused_by_the_driver_too() {
    let mut t = its_rig();

    let r = t.drv.set_device(&mut t.mem, 256, Some((ITT, 2)));

    assert_eq!(
        r,
        Err(ItsError::OutOfRange {
            device: 256,
            event_bits: 2
        })
    );
    t.no_misuse();
}
