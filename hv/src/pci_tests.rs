use super::*;
use alloc::collections::BTreeMap;
use alloc::string::ToString;
use alloc::vec;

/// Counter ticks per millisecond of the fake clock (1 MHz).
const TICKS_PER_MS: u64 = 1000;

/// What a fake function does beyond plain registers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Plain,
    /// A virtio function with the common-config and PCI_CFG capabilities.
    Virtio {
        status: u8,
        /// device_status keeps reading non-zero this many reads after the
        /// reset write (a slow device).
        slow_reads: u32,
        /// It never resets (a broken device).
        stuck: bool,
    },
    /// A PCIe function advertising FLR; `flr_at` once initiated.
    Flr {
        flr_at: Option<u64>,
    },
    /// A function with the PM capability at [`PM_AT`]; when it last
    /// changed power state. D3hot -> D0 with No_Soft_Reset clear resets it.
    Pm {
        changed_at: Option<u64>,
    },
    /// A PCI-to-PCI bridge: when Secondary Bus Reset was last set and
    /// cleared. While it is set and [`SBR_WAIT_MS`] after, the functions
    /// on its secondary bus do not answer.
    Bridge {
        set_at: Option<u64>,
        cleared_at: Option<u64>,
    },
}

/// Where [`pm_function`]'s PM capability is.
const PM_AT: u16 = CAP_AT as u16;

struct Function {
    regs: [u8; 4096],
    kind: Kind,
}

#[derive(Default)]
struct Fake {
    functions: BTreeMap<Bdf, Function>,
    clock: u64,
    /// (function, offset, width, value) of every write, in order.
    writes: Vec<(Bdf, u16, u8, u32)>,
    /// The fake clock at each of `writes`.
    written_at: Vec<u64>,
    /// Accesses to a function within 100 ms of its FLR.
    early: u32,
}

const CAP_AT: u8 = 0x40;

/// A capability for [`Function::caps`]: ID, length, (offset, width, value)
/// writes into its body.
type Cap<'a> = (u8, u8, &'a [(u16, u8, u32)]);

impl Function {
    fn new(vendor: u16, device: u16, class: u32, kind: Kind) -> Function {
        let mut f = Function {
            regs: [0; 4096],
            kind,
        };
        f.put(0, 2, u32::from(vendor));
        f.put(2, 2, u32::from(device));
        f.put(CLASS_REV, 4, class << 8);
        f
    }

    fn put(&mut self, offset: u16, width: u8, value: u32) {
        for i in 0..width as usize {
            self.regs[offset as usize + i] = (value >> (8 * i)) as u8;
        }
    }

    fn get(&self, offset: u16, width: u8) -> u32 {
        (0..width as usize).fold(0, |v, i| {
            v | u32::from(self.regs[offset as usize + i]) << (8 * i)
        })
    }

    /// Appends capabilities (id, length, body writes) as a linked list.
    fn caps(mut self, caps: &[Cap<'_>]) -> Function {
        let status = self.get(STATUS, 2) | STATUS_CAP_LIST;
        self.put(STATUS, 2, status);
        self.put(CAP_PTR, 1, u32::from(CAP_AT));
        let mut at = u16::from(CAP_AT);
        for (i, &(id, len, body)) in caps.iter().enumerate() {
            let next = if i + 1 == caps.len() {
                0
            } else {
                at + u16::from(len)
            };
            self.put(at, 1, u32::from(id));
            self.put(at + 1, 1, u32::from(next));
            for &(off, width, value) in body {
                self.put(at + off, width, value);
            }
            at += u16::from(len);
        }
        self
    }
}

/// A virtio-net function as QEMU's transitional virtio-net-pci presents
/// it: MSI-X, then the virtio vendor capabilities (common config in BAR 4
/// at 0, the PCI_CFG window).
fn virtio_net(status: u8, msix_on: bool) -> Function {
    Function::new(
        0x1af4,
        0x1000,
        0x020000,
        Kind::Virtio {
            status,
            slow_reads: 0,
            stuck: false,
        },
    )
    .caps(&[
        (
            CAP_MSIX as u8,
            12,
            &[(2, 2, if msix_on { MSIX_ENABLE | 2 } else { 2 })],
        ),
        (
            CAP_VENDOR as u8,
            16,
            &[(2, 1, 16), (3, 1, VIRTIO_PCI_CAP_COMMON_CFG), (4, 1, 4)],
        ),
        (
            CAP_VENDOR as u8,
            20,
            &[(2, 1, 20), (3, 1, VIRTIO_PCI_CAP_PCI_CFG)],
        ),
    ])
}

/// The common-config capability's offset in [`virtio_net`].
const COMMON_AT: u16 = CAP_AT as u16 + 12;
/// The PCI_CFG window's offset in [`virtio_net`].
const WINDOW_AT: u16 = COMMON_AT + 16;

/// A NIC without FLR whose only reset is through its PM capability.
fn pm_function(no_soft_reset: bool) -> Function {
    let pmcsr = if no_soft_reset {
        PMCSR_NO_SOFT_RESET
    } else {
        0
    };
    let mut f = Function::new(0x8086, 0x100e, 0x020000, Kind::Pm { changed_at: None }).caps(&[(
        CAP_PM as u8,
        8,
        &[(2, 2, 0x0003), (PM_CSR, 2, pmcsr)],
    )]);
    f.put(COMMAND, 2, 0x0007);
    f
}

/// A root port (type 1 header) with secondary and subordinate bus `bus`.
fn root_port(bus: u8) -> Function {
    let mut b = Function::new(
        0x1b36,
        0x000c,
        0x060400,
        Kind::Bridge {
            set_at: None,
            cleared_at: None,
        },
    );
    b.put(HEADER_TYPE, 1, 1);
    b.put(0x19, 1, u32::from(bus));
    b.put(0x1a, 1, u32::from(bus));
    b
}

/// A scope in which every function is the resetting owner's.
fn alone(first: u8, last: u8) -> ResetScope<'static> {
    ResetScope::new((first, last), &|_| false)
}

fn flr_function(command: u16) -> Function {
    let mut f = Function::new(0x8086, 0x10d3, 0x020000, Kind::Flr { flr_at: None }).caps(&[
        (CAP_MSI as u8, 24, &[(2, 2, MSI_ENABLE)]),
        (CAP_EXP as u8, 60, &[(4, 4, DEVCAP_FLR)]),
    ]);
    f.put(COMMAND, 2, u32::from(command));
    f
}

const NIC: Bdf = Bdf {
    bus: 0,
    dev: 1,
    func: 0,
};

impl Fake {
    fn with(functions: Vec<(Bdf, Function)>) -> Fake {
        Fake {
            functions: functions.into_iter().collect(),
            ..Fake::default()
        }
    }

    fn status(&self, bdf: Bdf) -> u8 {
        match self.functions[&bdf].kind {
            Kind::Virtio { status, .. } => status,
            _ => panic!("not virtio"),
        }
    }

    fn command(&self, bdf: Bdf) -> u32 {
        self.functions[&bdf].get(COMMAND, 2)
    }

    /// Whether the PCI_CFG window of `f` points at device_status.
    fn window_on_status(f: &Function) -> bool {
        let bar = f.get(WINDOW_AT + VIRTIO_CAP_BAR, 1);
        let offset = f.get(WINDOW_AT + VIRTIO_CAP_OFFSET, 4);
        bar == f.get(COMMON_AT + VIRTIO_CAP_BAR, 1)
            && offset == f.get(COMMON_AT + VIRTIO_CAP_OFFSET, 4) + VIRTIO_DEVICE_STATUS
    }

    /// Whether `bdf` must not be accessed now: within 100 ms of its FLR,
    /// 10 ms of a power-state change, or while the bus it is on is held
    /// in reset or within 100 ms after.
    fn in_reset_wait(&self, bdf: Bdf) -> bool {
        let Some(f) = self.functions.get(&bdf) else {
            return false;
        };
        let within = |t: u64, ms: u64| self.clock < t + ms * TICKS_PER_MS;
        let own = match f.kind {
            Kind::Flr { flr_at: Some(t) } => within(t, FLR_WAIT_MS),
            Kind::Pm {
                changed_at: Some(t),
            } => within(t, PM_WAIT_MS),
            _ => false,
        };
        own || self.functions.values().any(|b| match b.kind {
            Kind::Bridge { set_at, cleared_at } if b.get(0x19, 1) == u32::from(bdf.bus) => {
                let held = set_at.is_some_and(|s| cleared_at.is_none_or(|c| c < s));
                held || cleared_at.is_some_and(|c| within(c, SBR_WAIT_MS))
            }
            _ => false,
        })
    }
}

impl ConfigSpace for Fake {
    fn read(&mut self, bdf: Bdf, offset: u16, width: u8) -> u32 {
        assert_eq!(offset % u16::from(width), 0, "unaligned read");
        let early = self.in_reset_wait(bdf);
        let Some(f) = self.functions.get_mut(&bdf) else {
            return u32::MAX >> (32 - 8 * u32::from(width));
        };
        if early {
            // The PCIe base specification: no configuration request for
            // 100 ms after Initiate FLR. Not ready: reads give all ones.
            self.early += 1;
            return u32::MAX >> (32 - 8 * u32::from(width));
        }
        let on_status = Fake::window_on_status(f);
        if let Kind::Virtio {
            status, slow_reads, ..
        } = &mut f.kind
        {
            if offset == WINDOW_AT + VIRTIO_CFG_DATA && on_status {
                if *status == 0 && *slow_reads > 0 {
                    // Reset requested, not finished yet.
                    *slow_reads -= 1;
                    return 0x0f;
                }
                return u32::from(*status);
            }
        }
        f.get(offset, width)
    }

    fn write(&mut self, bdf: Bdf, offset: u16, width: u8, value: u32) {
        assert_eq!(offset % u16::from(width), 0, "unaligned write");
        self.writes.push((bdf, offset, width, value));
        self.written_at.push(self.clock);
        if self.in_reset_wait(bdf) {
            self.early += 1;
        }
        let clock = self.clock;
        if offset == BRIDGE_CONTROL {
            let on = value & BRIDGE_CTL_BUS_RESET != 0;
            let mut reset_bus = None;
            if let Some(b) = self.functions.get_mut(&bdf) {
                let secondary = b.get(0x19, 1) as u8;
                if let Kind::Bridge { set_at, cleared_at } = &mut b.kind {
                    if on {
                        *set_at = Some(clock);
                        reset_bus = Some(secondary);
                    } else if set_at.is_some() {
                        *cleared_at = Some(clock);
                    }
                }
            }
            // Everything on the secondary bus goes to its reset state.
            for (b, f) in self.functions.iter_mut() {
                if Some(b.bus) == reset_bus {
                    f.put(COMMAND, 2, 0);
                }
            }
        }
        let Some(f) = self.functions.get_mut(&bdf) else {
            return;
        };
        let on_status = Fake::window_on_status(f);
        let from = f.get(PM_AT + PM_CSR, 2);
        match &mut f.kind {
            Kind::Virtio { status, stuck, .. }
                if offset == WINDOW_AT + VIRTIO_CFG_DATA && on_status =>
            {
                if value == 0 && !*stuck {
                    *status = 0;
                }
                return;
            }
            Kind::Pm { changed_at } if offset == PM_AT + PM_CSR => {
                let to = value & PMCSR_STATE;
                *changed_at = Some(clock);
                if from & PMCSR_STATE == PMCSR_D3HOT && to == 0 && from & PMCSR_NO_SOFT_RESET == 0 {
                    // D3hot -> D0 without No_Soft_Reset: the reset state.
                    f.put(COMMAND, 2, 0);
                }
                f.put(
                    PM_AT + PM_CSR,
                    2,
                    (from & PMCSR_NO_SOFT_RESET) | (value & !PMCSR_NO_SOFT_RESET),
                );
                return;
            }
            Kind::Flr { flr_at } if offset == 0x40 + 24 + EXP_DEVCTL && value & DEVCTL_FLR != 0 => {
                *flr_at = Some(clock);
                // The reset state: decoding, bus mastering and MSI off.
                f.put(COMMAND, 2, 0);
                f.put(0x40 + 2, 2, 0);
                return;
            }
            _ => {}
        }
        f.put(offset, width, value);
    }

    fn now(&mut self) -> u64 {
        self.clock += 1;
        self.clock
    }

    fn frequency(&self) -> u64 {
        TICKS_PER_MS * 1000
    }
}

#[test]
fn a_virtio_nic_firmware_left_running_is_stopped_then_reset() {
    let mut nic = virtio_net(0x0f, false);
    nic.put(COMMAND, 2, 0x0007);
    let mut fake = Fake::with(vec![(NIC, nic)]);

    let done = quiesce_all(&mut fake, (0, 0), &|_| false);

    assert_eq!(done.len(), 1);
    let q = &done[0];
    assert_eq!((q.vendor, q.device, q.command), (0x1af4, 0x1000, 0x0007));
    assert_eq!(
        q.reset,
        ResetDone::Virtio {
            status: 0x0f,
            done: true
        }
    );
    assert!(q.is_reset());
    assert_eq!(fake.status(NIC), 0);
    assert_eq!(fake.command(NIC), 0);
    // Bus mastering went off before the device was told anything.
    let first = fake.writes[0];
    assert_eq!((first.1, first.3), (COMMAND, 0));
    let reset_write = fake
        .writes
        .iter()
        .position(|w| w.1 == WINDOW_AT + VIRTIO_CFG_DATA)
        .expect("a device_status write");
    assert!(reset_write > 0);
    assert_eq!(fake.writes[reset_write].3, 0);
}

#[test]
fn msix_left_enabled_by_firmware_is_disabled_so_intx_works() {
    let mut fake = Fake::with(vec![(NIC, virtio_net(0x0f, true))]);

    let done = quiesce_all(&mut fake, (0, 0), &|_| false);

    assert!(done[0].msix_was_on);
    assert_eq!(
        fake.functions[&NIC].get(CAP_AT as u16 + 2, 2) & MSIX_ENABLE,
        0
    );
}

#[test]
fn intx_disable_left_by_firmware_is_cleared() {
    let mut nic = virtio_net(0, false);
    nic.put(COMMAND, 2, 0x0406);
    let mut fake = Fake::with(vec![(NIC, nic)]);

    quiesce_all(&mut fake, (0, 0), &|_| false);

    assert_eq!(fake.command(NIC), 0);
}

#[test]
fn a_slow_virtio_reset_is_waited_for_until_it_reads_zero() {
    let mut nic = virtio_net(0x0f, false);
    nic.kind = Kind::Virtio {
        status: 0x0f,
        slow_reads: 50,
        stuck: false,
    };
    let mut fake = Fake::with(vec![(NIC, nic)]);

    let done = quiesce_all(&mut fake, (0, 0), &|_| false);

    assert_eq!(
        done[0].reset,
        ResetDone::Virtio {
            status: 0x0f,
            done: true
        }
    );
}

#[test]
fn a_virtio_device_that_never_resets_is_reported_not_hung_on() {
    let mut nic = virtio_net(0x0f, false);
    nic.kind = Kind::Virtio {
        status: 0x0f,
        slow_reads: 0,
        stuck: true,
    };
    let mut fake = Fake::with(vec![(NIC, nic)]);

    let done = quiesce_all(&mut fake, (0, 0), &|_| false);

    assert_eq!(
        done[0].reset,
        ResetDone::Virtio {
            status: 0x0f,
            done: false
        }
    );
    assert!(!done[0].is_reset());
    // Gave up after the 100 ms bound, not much later.
    assert!(done[0].ticks <= (VIRTIO_RESET_MS + 5) * TICKS_PER_MS);
    assert!(done[0].to_string().contains("did NOT read back 0"));
}

#[test]
fn flr_is_preferred_and_the_function_is_left_alone_for_100_ms() {
    let bdf = Bdf {
        bus: 0,
        dev: 2,
        func: 0,
    };
    let mut fake = Fake::with(vec![(bdf, flr_function(0x0006))]);

    let done = quiesce_all(&mut fake, (0, 0), &|_| false);

    let q = &done[0];
    assert_eq!(q.reset, ResetDone::Flr { ready: true });
    assert!(q.msi_was_on);
    assert_eq!(fake.early, 0, "accessed during the FLR wait");
    assert!(q.ticks >= FLR_WAIT_MS * TICKS_PER_MS, "{} ticks", q.ticks);
    assert_eq!(fake.command(bdf), 0);
    assert!(q.to_string().contains("function level reset"));
}

#[test]
fn an_sriov_vf_whose_ids_read_ffff_is_present_and_ready_after_its_flr() {
    let vf = Bdf {
        bus: 0,
        dev: 0x13,
        func: 0,
    };
    // A VF's Vendor and Device ID read 0xffff (PCIe 9.3.4.1.1-2).
    let mut f = flr_function(0x0006);
    f.put(VENDOR_ID, 4, u32::MAX);
    let mut fake = Fake::with(vec![(vf, f)]);
    assert!(present(&mut fake, vf));

    let done = quiesce_function(&mut fake, vf, &alone(0, 0));

    assert_eq!(done.reset, ResetDone::Flr { ready: true });
    assert_eq!(fake.command(vf), 0);
}

#[test]
fn a_nic_without_any_reset_method_still_loses_bus_mastering() {
    let e1000 = Bdf {
        bus: 0,
        dev: 1,
        func: 0,
    };
    let mut f = Function::new(0x8086, 0x100e, 0x020000, Kind::Plain);
    f.put(COMMAND, 2, 0x0107);
    let mut fake = Fake::with(vec![(e1000, f)]);

    let done = quiesce_all(&mut fake, (0, 0), &|_| false);

    assert_eq!(done[0].reset, ResetDone::NoMethod(NoReset::NoBridge));
    assert_eq!(fake.command(e1000), 0);
    assert!(done[0].to_string().contains("no reset method"));
}

#[test]
fn bridges_are_left_alone_and_absent_functions_skipped() {
    let host_bridge = Bdf {
        bus: 0,
        dev: 0,
        func: 0,
    };
    let mut hb = Function::new(0x1b36, 0x0008, 0x060000, Kind::Plain);
    hb.put(COMMAND, 2, 0x0006);
    let mut fake = Fake::with(vec![(host_bridge, hb), (NIC, virtio_net(0, false))]);

    let done = quiesce_all(&mut fake, (0, 3), &|_| false);

    assert_eq!(
        done.iter().map(|q| q.bdf).collect::<Vec<_>>(),
        vec![host_bridge, NIC]
    );
    assert_eq!(done[0].reset, ResetDone::Bridge);
    assert_eq!(fake.command(host_bridge), 0x0006);
    assert!(fake.writes.iter().all(|w| w.0 != host_bridge));
}

#[test]
fn functions_1_to_7_are_scanned_only_when_function_0_is_multi_function() {
    let f = |func| Bdf {
        bus: 1,
        dev: 3,
        func,
    };
    let plain = |multi: bool| {
        let mut x = Function::new(0x8086, 0x1234, 0x020000, Kind::Plain);
        if multi {
            x.put(HEADER_TYPE, 1, HEADER_MULTI_FUNCTION);
        }
        x
    };
    let mut single = Fake::with(vec![(f(0), plain(false)), (f(5), plain(false))]);
    let mut multi = Fake::with(vec![(f(0), plain(true)), (f(5), plain(false))]);

    // Bus 1 is this host bridge's first bus.
    assert_eq!(quiesce_all(&mut single, (1, 1), &|_| false).len(), 1);
    assert_eq!(quiesce_all(&mut multi, (1, 1), &|_| false).len(), 2);
}

#[test]
fn only_the_buses_bridges_lead_to_are_scanned() {
    let at = |bus, dev| Bdf { bus, dev, func: 0 };
    let nic = || Function::new(0x8086, 0x1234, 0x020000, Kind::Plain);
    // A root port (type 1) at 00:01.0 with secondary bus 4; another
    // bridge firmware gave no bus numbers at 00:02.0; a function on bus 9
    // no bridge leads to (real hardware would not answer there).
    let bridge = |secondary: u32| {
        let mut b = Function::new(0x1b36, 0x000c, 0x060400, Kind::Plain);
        b.put(HEADER_TYPE, 1, 1);
        b.put(0x19, 1, secondary);
        b
    };
    let mut fake = Fake::with(vec![
        (at(0, 1), bridge(4)),
        (at(0, 2), bridge(0)),
        (at(4, 0), nic()),
        (at(9, 0), nic()),
    ]);
    assert_eq!(
        functions(&mut fake, (0, 255)),
        [at(0, 1), at(0, 2), at(4, 0)]
    );
    let done: Vec<Bdf> = quiesce_all(&mut fake, (0, 255), &|_| false)
        .iter()
        .map(|q| q.bdf)
        .collect();
    assert_eq!(done, [at(0, 1), at(0, 2), at(4, 0)]);
    // Bus 4 beyond the host bridge's bus range is not followed.
    assert_eq!(functions(&mut fake, (0, 3)), [at(0, 1), at(0, 2)]);
}

#[test]
fn a_looping_capability_list_ends() {
    let mut f = Function::new(0x8086, 0x1234, 0x020000, Kind::Plain);
    f.put(STATUS, 2, STATUS_CAP_LIST);
    f.put(CAP_PTR, 1, 0x40);
    f.put(0x40, 2, 0x4000 | CAP_MSI);
    let mut fake = Fake::with(vec![(NIC, f)]);

    let done = quiesce_all(&mut fake, (0, 0), &|_| false);

    assert_eq!(done.len(), 1);
}

#[test]
fn ecam_offsets_follow_bus_device_function() {
    let bdf = Bdf {
        bus: 3,
        dev: 0x1f,
        func: 7,
    };

    assert_eq!(bdf.ecam_offset(0), 0x3_0000 << 4 | 0x1f << 15 | 7 << 12);
    assert_eq!(bdf.ecam_offset(2), 1 << 20 | 0x1f << 15 | 7 << 12);
    assert_eq!(bdf.to_string(), "03:1f.7");
}

#[test]
fn without_flr_a_pm_reset_goes_d3hot_then_d0_each_waited_for() {
    let mut fake = Fake::with(vec![(NIC, pm_function(false))]);

    let done = quiesce_all(&mut fake, (0, 0), &|_| false);

    let q = &done[0];
    assert_eq!(q.reset, ResetDone::PowerManagement { ready: true });
    assert!(q.is_reset());
    let pm: Vec<(u32, u64)> = fake
        .writes
        .iter()
        .zip(&fake.written_at)
        .filter(|(w, _)| w.0 == NIC && w.1 == PM_AT + PM_CSR)
        .map(|(w, &t)| (w.3 & PMCSR_STATE, t))
        .collect();
    assert_eq!(
        pm.iter().map(|p| p.0).collect::<Vec<_>>(),
        [PMCSR_D3HOT, 0],
        "D3hot, then D0"
    );
    assert!(pm[1].1 - pm[0].1 >= PM_WAIT_MS * TICKS_PER_MS);
    assert_eq!(fake.early, 0, "accessed within 10 ms of a state change");
    assert_eq!(fake.command(NIC), 0);
    assert!(q.to_string().contains("power-management reset"), "{q}");
}

#[test]
fn no_soft_reset_set_skips_the_pm_reset() {
    let mut fake = Fake::with(vec![(NIC, pm_function(true))]);

    let done = quiesce_all(&mut fake, (0, 0), &|_| false);

    assert_eq!(done[0].reset, ResetDone::NoMethod(NoReset::NoBridge));
    assert!(
        fake.writes.iter().all(|w| w.1 != PM_AT + PM_CSR),
        "PMCSR untouched"
    );
}

/// 00:01.0 a root port to bus 1, where 01:00.0 is a NIC without FLR or
/// PM (and 01:00.1 another function when `sibling`).
fn behind_a_root_port(sibling: bool) -> Fake {
    let at = |bus, func| Bdf {
        bus,
        dev: if bus == 0 { 1 } else { 0 },
        func,
    };
    let mut nic = Function::new(0x8086, 0x100e, 0x020000, Kind::Plain);
    nic.put(COMMAND, 2, 0x0006);
    let mut functions = vec![(at(0, 0), root_port(1))];
    if sibling {
        nic.put(HEADER_TYPE, 1, HEADER_MULTI_FUNCTION);
        functions.push((
            at(1, 1),
            Function::new(0x8086, 0x100e, 0x020000, Kind::Plain),
        ));
    }
    functions.push((at(1, 0), nic));
    Fake::with(functions)
}

const PORT: Bdf = Bdf {
    bus: 0,
    dev: 1,
    func: 0,
};
const BEHIND: Bdf = Bdf {
    bus: 1,
    dev: 0,
    func: 0,
};

#[test]
fn alone_behind_a_bridge_a_function_gets_a_secondary_bus_reset() {
    let mut fake = behind_a_root_port(false);

    let q = quiesce_function(&mut fake, BEHIND, &alone(0, 255));

    assert_eq!(
        q.reset,
        ResetDone::SecondaryBus {
            bridge: PORT,
            ready: true
        }
    );
    let ctl: Vec<(u32, u64)> = fake
        .writes
        .iter()
        .zip(&fake.written_at)
        .filter(|(w, _)| w.0 == PORT && w.1 == BRIDGE_CONTROL)
        .map(|(w, &t)| (w.3 & BRIDGE_CTL_BUS_RESET, t))
        .collect();
    assert_eq!(
        ctl.iter().map(|c| c.0).collect::<Vec<_>>(),
        [BRIDGE_CTL_BUS_RESET, 0],
        "set, then cleared"
    );
    assert!(ctl[1].1 - ctl[0].1 >= TICKS_PER_MS, "held at least 1 ms");
    assert_eq!(fake.early, 0, "accessed during or just after the reset");
    assert_eq!(fake.command(BEHIND), 0);
    assert!(
        q.to_string().contains("secondary bus reset by 00:01.0"),
        "{q}"
    );
}

#[test]
fn a_secondary_bus_reset_is_refused_when_another_owner_shares_the_bus() {
    let mut fake = behind_a_root_port(true);
    let sibling = Bdf { func: 1, ..BEHIND };
    let theirs = move |b: Bdf| b == sibling;
    let scope = ResetScope::new((0, 255), &theirs);

    let q = quiesce_function(&mut fake, BEHIND, &scope);

    assert_eq!(
        q.reset,
        ResetDone::NoMethod(NoReset::Foreign {
            bridge: PORT,
            other: sibling
        })
    );
    assert!(fake.writes.iter().all(|w| w.0 != PORT), "bridge untouched");
    assert!(q.to_string().contains("another owner's"), "{q}");
}

#[test]
fn a_secondary_bus_reset_is_refused_when_the_function_is_not_alone_on_its_bus() {
    let mut fake = behind_a_root_port(true);

    let q = quiesce_function(&mut fake, BEHIND, &alone(0, 255));

    assert_eq!(
        q.reset,
        ResetDone::NoMethod(NoReset::NotAlone {
            bridge: PORT,
            other: Bdf { func: 1, ..BEHIND }
        })
    );
    assert!(fake.writes.iter().all(|w| w.0 != PORT), "bridge untouched");
}

#[test]
fn a_partitions_reset_counts_every_function_outside_its_list_as_another_owners() {
    // The partition was given 01:00.0 only; 01:00.1 is nobody's or
    // someone else's: no bus reset.
    let mut fake = behind_a_root_port(true);

    let done = crate::vpci::reset_functions(&mut fake, (0, 255), &[BEHIND]);

    assert_eq!(
        done[0].reset,
        ResetDone::NoMethod(NoReset::Foreign {
            bridge: PORT,
            other: Bdf { func: 1, ..BEHIND }
        })
    );
    assert!(fake.writes.iter().all(|w| w.0 != PORT), "bridge untouched");
}
