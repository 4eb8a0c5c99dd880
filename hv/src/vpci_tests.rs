use super::*;
use alloc::collections::BTreeMap;
use alloc::string::String;

/// A fake function: plain registers, BARs that keep only their address
/// bits (as hardware does), and the writes that reached it.
struct FakeFn {
    regs: [u8; 4096],
    /// Per BAR register: (size, flags) of the BAR whose low half it is.
    bars: [(u64, u32); 6],
}

#[derive(Default)]
struct Fake {
    functions: BTreeMap<Bdf, FakeFn>,
    writes: Vec<(Bdf, u16, u8, u32)>,
}

const MSI_AT: u16 = 0x40;
const MSIX_AT: u16 = 0x50;
const EXP_AT: u16 = 0x60;

impl FakeFn {
    fn get(&self, offset: u16, width: u8) -> u32 {
        (0..width as usize).fold(0, |v, i| {
            v | u32::from(self.regs[offset as usize + i]) << (8 * i)
        })
    }
    fn put(&mut self, offset: u16, width: u8, value: u32) {
        for i in 0..width as usize {
            self.regs[offset as usize + i] = (value >> (8 * i)) as u8;
        }
    }
}

/// A NIC-like endpoint: BAR0 4 KiB mem32, BAR1 32 B I/O, BAR2/3 a 16 KiB
/// 64-bit prefetchable BAR; MSI, MSI-X and PCIe capabilities; INTA.
fn endpoint(vendor: u16) -> FakeFn {
    let mut f = FakeFn {
        regs: [0; 4096],
        bars: [
            (0x1000, 0),
            (0x20, 1),
            (0x4000, 0xc),
            (0, 0),
            (0, 0),
            (0, 0),
        ],
    };
    f.put(0, 2, u32::from(vendor));
    f.put(2, 2, 0x1041);
    f.put(0x08, 4, 0x0200_0000);
    f.put(0x10, 4, 0);
    f.put(0x14, 4, 1);
    f.put(0x18, 4, 0xc);
    f.put(0x06, 2, 1 << 4);
    f.put(0x34, 1, u32::from(MSI_AT));
    f.put(MSI_AT, 2, 0x05 | u32::from(MSIX_AT) << 8);
    f.put(MSIX_AT, 2, 0x11 | u32::from(EXP_AT) << 8);
    f.put(EXP_AT, 2, 0x10);
    f.put(0x3d, 1, 1);
    f
}

fn bridge_fn() -> FakeFn {
    let mut f = endpoint(0x1b36);
    f.put(0x08, 4, 0x0600_0000);
    f
}

impl Fake {
    fn qemu() -> Fake {
        let mut fake = Fake::default();
        fake.functions.insert(bdf(0, 0), bridge_fn());
        for dev in 1..=3 {
            fake.functions.insert(bdf(dev, 0), endpoint(0x1af4));
        }
        fake
    }
    fn reg(&self, b: Bdf, offset: u16, width: u8) -> u32 {
        self.functions[&b].get(offset, width)
    }
    fn writes_to(&self, b: Bdf) -> usize {
        self.writes.iter().filter(|w| w.0 == b).count()
    }
}

impl ConfigSpace for Fake {
    fn read(&mut self, b: Bdf, offset: u16, width: u8) -> u32 {
        match self.functions.get(&b) {
            Some(f) => f.get(offset, width),
            None => ones(width),
        }
    }
    fn write(&mut self, b: Bdf, offset: u16, width: u8, value: u32) {
        self.writes.push((b, offset, width, value));
        let Some(f) = self.functions.get_mut(&b) else {
            return;
        };
        f.put(offset, width, value);
        // BAR registers keep only the bits the size allows.
        for reg in 0..6u16 {
            let at = 0x10 + 4 * reg;
            let (size, flags) = f.bars[reg as usize];
            let high_half = reg > 0 && f.bars[reg as usize - 1].1 & 6 == 4;
            if size == 0 {
                if !high_half {
                    f.put(at, 4, 0);
                }
                continue;
            }
            let mask = !(size - 1);
            let lo = f.get(at, 4);
            f.put(at, 4, (lo & mask as u32 & !0xf) | flags);
            if flags & 6 == 4 {
                let hi = f.get(at + 4, 4);
                f.put(at + 4, 4, hi & (mask >> 32) as u32);
            }
        }
    }
    fn now(&mut self) -> u64 {
        0
    }
    fn frequency(&self) -> u64 {
        1_000_000
    }
}

fn bdf(dev: u8, func: u8) -> Bdf {
    Bdf { bus: 0, dev, func }
}

/// QEMU virt's host bridge: I/O, 32-bit and 64-bit windows, INTx swizzled
/// over SPIs 35..38.
fn host_bridge() -> PcieInfo {
    let mut interrupt_map = Vec::new();
    for dev in 0..4u32 {
        for pin in 1..=4u32 {
            interrupt_map.push(PciIntxMap {
                child_addr: [dev << 11, 0, 0],
                pin,
                intid: 35 + (dev + pin - 1) % 4,
                flags: 4,
            });
        }
    }
    PcieInfo {
        ecam: (0x40_1000_0000, 0x1000_0000),
        bus_range: (0, 0xff),
        ranges: crate::acpi::board::qemu_virt_pci_ranges(),
        interrupt_map,
        interrupt_map_mask: [0x1800, 0, 0, 7],
        iommu_map: Vec::new(),
        node_path: String::from("/pcie@10000000"),
        msi_map: alloc::vec::Vec::new(),
    }
}

fn host(fake: &mut Fake) -> Vec<HostFunction> {
    enumerate(fake, (0, 0))
}

/// `dev`'s function 0 assigned alone, BARs programmed, its filter.
fn setup(dev: u8) -> (Fake, Assignment, VirtualEcam) {
    let mut fake = Fake::qemu();
    let host = host(&mut fake);
    let a = assign(&[bdf(dev, 0)], &host, &host_bridge(), &[], &[], |_| false).unwrap();
    program(&mut fake, &a);
    let v = VirtualEcam::new(&host_bridge(), &a, &host);
    fake.writes.clear();
    (fake, a, v)
}

fn bar_addr(a: &Assignment, reg: u8) -> u64 {
    a.functions[0]
        .bars
        .iter()
        .find(|(b, _)| b.reg == reg)
        .unwrap()
        .1
}

#[test]
fn enumeration_sizes_every_kind_of_bar_and_puts_the_old_values_back() {
    let mut fake = Fake::qemu();
    fake.functions
        .get_mut(&bdf(1, 0))
        .unwrap()
        .put(0x10, 4, 0x1234_5000);
    let found = host(&mut fake);

    assert_eq!(found.len(), 4);
    assert!(found[0].bridge && found[0].bars.is_empty());
    let nic = &found[1];
    assert_eq!((nic.bdf, nic.vendor, nic.pin), (bdf(1, 0), 0x1af4, 1));
    assert_eq!(
        nic.bars,
        [
            HostBar {
                reg: 0,
                space: BarSpace::Mem32,
                prefetchable: false,
                size: 0x1000
            },
            HostBar {
                reg: 1,
                space: BarSpace::Io,
                prefetchable: false,
                size: 0x20
            },
            HostBar {
                reg: 2,
                space: BarSpace::Mem64,
                prefetchable: true,
                size: 0x4000
            },
        ]
    );
    assert_eq!(fake.reg(bdf(1, 0), 0x10, 4), 0x1234_5000);
}

#[test]
fn functions_1_to_7_are_found_only_behind_a_multi_function_device() {
    let mut fake = Fake::qemu();
    fake.functions.insert(bdf(2, 3), endpoint(0x8086));
    assert!(!host(&mut fake).iter().any(|f| f.bdf == bdf(2, 3)));
    fake.functions
        .get_mut(&bdf(2, 0))
        .unwrap()
        .put(HEADER_TYPE, 1, 0x80);
    assert!(host(&mut fake).iter().any(|f| f.bdf == bdf(2, 3)));
}

#[test]
fn a_missing_a_bridge_and_a_repeated_function_are_refused_naming_the_index() {
    let mut fake = Fake::qemu();
    let host = host(&mut fake);
    let hb = host_bridge();
    let err = |wanted: &[Bdf]| assign(wanted, &host, &hb, &[], &[], |_| false).unwrap_err();

    let e = err(&[bdf(1, 0), bdf(9, 0)]);
    assert_eq!((e.index, e.problem), (1, AssignProblem::Missing));
    assert_eq!(
        alloc::format!("{e}"),
        "pci[1]: 0000:00:09.0: no such function on the host"
    );
    assert_eq!(err(&[bdf(0, 0)]).problem, AssignProblem::Bridge);
    let e = err(&[bdf(2, 0), bdf(2, 0)]);
    assert_eq!((e.index, e.problem), (1, AssignProblem::Repeated));
}

#[test]
fn an_intx_spi_another_partition_owns_is_refused() {
    let mut fake = Fake::qemu();
    let host = host(&mut fake);
    // 00:02.0 INTA swizzles to SPI 35 + (2 + 0) % 4 = 37.
    let e = assign(&[bdf(2, 0)], &host, &host_bridge(), &[], &[], |s| s == 37).unwrap_err();
    assert_eq!(e.problem, AssignProblem::IntxShared { spi: 37 });
    let a = assign(&[bdf(2, 0)], &host, &host_bridge(), &[], &[], |s| s == 36).unwrap();
    assert_eq!(a.spis(), [37]);
}

#[test]
fn bars_are_placed_page_aligned_in_windows_of_their_own_clear_of_taken_ones() {
    let mut fake = Fake::qemu();
    let host = host(&mut fake);
    let hb = host_bridge();
    let a = assign(&[bdf(1, 0)], &host, &hb, &[], &[], |_| false).unwrap();
    let taken = a.cpu_windows();
    let b = assign(&[bdf(2, 0), bdf(3, 0)], &host, &hb, &taken, &[], |_| false).unwrap();

    for w in &b.windows {
        for &(base, size) in &taken {
            assert!(
                w.cpu_addr + w.size <= base || base + size <= w.cpu_addr,
                "{w:?} overlaps {base:#x}+{size:#x}"
            );
        }
    }
    for f in a.functions.iter().chain(&b.functions) {
        for &(bar, addr) in &f.bars {
            assert_eq!(addr % bar.size.max(PAGE), 0, "{bar:?} at {addr:#x}");
        }
    }
    // One window per space, the 64-bit BAR in the 64-bit window.
    assert_eq!(a.windows.len(), 3);
    // A function with memory BARs only still gets an I/O page.
    let mut mem_only = host.clone();
    mem_only[1].bars.retain(|b| b.space != BarSpace::Io);
    let m = assign(&[bdf(1, 0)], &mem_only, &hb, &taken, &[], |_| false).unwrap();
    let io = m.windows.iter().find(|w| w.space == PciSpace::Io).unwrap();
    assert_eq!(io.size, PAGE);
    assert!(bar_addr(&a, 2) >= 0x80_0000_0000);
    assert!(bar_addr(&a, 0) < 0x1_0000_0000);
    // Two functions' I/O BARs each take a page of the partition's window.
    let io = b.windows.iter().find(|w| w.space == PciSpace::Io).unwrap();
    assert_eq!(io.size, 2 * PAGE);
}

#[test]
fn a_full_window_is_no_room() {
    let mut fake = Fake::qemu();
    let host = host(&mut fake);
    let mut hb = host_bridge();
    hb.ranges[0].size = PAGE;
    let a = assign(&[bdf(1, 0)], &host, &hb, &[], &[], |_| false).unwrap();
    let e = assign(&[bdf(2, 0)], &host, &hb, &a.cpu_windows(), &[], |_| false).unwrap_err();
    assert_eq!(
        e.problem,
        AssignProblem::NoRoom {
            space: BarSpace::Io,
            size: PAGE
        }
    );
}

#[test]
fn the_guest_bridge_shows_only_its_windows_and_its_intx_rows() {
    let (_, a, _) = setup(2);
    let g = guest_bridge(&host_bridge(), &a);
    assert_eq!(g.ranges, a.windows);
    assert_eq!(g.interrupt_map.len(), 1);
    assert_eq!(
        (g.interrupt_map[0].child_addr[0], g.interrupt_map[0].intid),
        (2 << 11, 37)
    );
    assert_eq!(g.ecam, host_bridge().ecam);
}

#[test]
fn program_writes_the_placed_addresses() {
    let (fake, a, _) = setup(1);
    assert_eq!(
        u64::from(fake.reg(bdf(1, 0), 0x10, 4) & !0xf),
        bar_addr(&a, 0)
    );
    let hi = u64::from(fake.reg(bdf(1, 0), 0x1c, 4));
    let lo = u64::from(fake.reg(bdf(1, 0), 0x18, 4) & !0xf);
    assert_eq!(hi << 32 | lo, bar_addr(&a, 2));
}

#[test]
fn absent_and_foreign_functions_read_all_ones_and_take_no_writes() {
    let (mut fake, _, mut v) = setup(1);
    for b in [bdf(0, 0), bdf(2, 0), bdf(9, 0)] {
        assert_eq!(v.read(&mut fake, b, 0, 4), u32::MAX);
        assert_eq!(v.read(&mut fake, b, 0, 2), 0xffff);
        assert_eq!(v.read(&mut fake, b, 0x3c, 1), 0xff);
        assert_eq!(
            v.write(&mut fake, b, COMMAND, 2, 0x7),
            WriteOutcome::Refused(Refusal::NotAssigned(b))
        );
    }
    assert!(fake.writes.is_empty());
    assert_eq!(v.refused, 3);
    assert_eq!(v.read(&mut fake, bdf(1, 0), 0, 2), 0x1af4);
}

#[test]
fn a_sizing_probe_is_answered_from_the_shadow_without_touching_the_device() {
    let (mut fake, a, mut v) = setup(1);
    let f = bdf(1, 0);
    assert_eq!(v.write(&mut fake, f, 0x10, 4, u32::MAX), WriteOutcome::Done);
    assert_eq!(v.read(&mut fake, f, 0x10, 4), 0xffff_f000);
    assert_eq!(v.write(&mut fake, f, 0x14, 4, u32::MAX), WriteOutcome::Done);
    assert_eq!(v.read(&mut fake, f, 0x14, 4), 0xffff_ffe1);
    v.write(&mut fake, f, 0x18, 4, u32::MAX);
    v.write(&mut fake, f, 0x1c, 4, u32::MAX);
    assert_eq!(v.read(&mut fake, f, 0x18, 4), 0xffff_c00c);
    assert_eq!(v.read(&mut fake, f, 0x1c, 4), u32::MAX);
    assert!(fake.writes.is_empty(), "{:?}", fake.writes);
    // Putting the old value back ends the probe.
    v.write(&mut fake, f, 0x10, 4, bar_addr(&a, 0) as u32);
    assert_eq!(u64::from(v.read(&mut fake, f, 0x10, 4)), bar_addr(&a, 0));
    // Unimplemented BARs and the expansion ROM read 0, take nothing.
    assert_eq!(v.read(&mut fake, f, 0x20, 4), 0);
    assert_eq!(
        v.write(&mut fake, f, 0x20, 4, u32::MAX),
        WriteOutcome::Ignored
    );
    assert_eq!(
        v.write(&mut fake, f, ROM_BAR, 4, 0x1000_0001),
        WriteOutcome::Ignored
    );
    assert_eq!(v.read(&mut fake, f, ROM_BAR, 4), 0);
}

#[test]
fn a_bar_moves_inside_its_windows_and_is_refused_outside_them() {
    let (mut fake, a, mut v) = setup(1);
    let f = bdf(1, 0);
    let mem32 = a
        .windows
        .iter()
        .find(|w| w.space == PciSpace::Mem32)
        .unwrap();
    // Decoding on (every BAR inside): from now on a move is checked.
    assert_eq!(v.write(&mut fake, f, COMMAND, 2, 0x3), WriteOutcome::Done);
    // Inside: same window, another page (the window is one page: move the
    // I/O BAR within its page instead).
    let io = bar_addr(&a, 1);
    assert_eq!(
        v.write(&mut fake, f, 0x14, 4, (io + 0x20) as u32 | 1),
        WriteOutcome::Done
    );
    assert_eq!(u64::from(fake.reg(f, 0x14, 4) & !3), io + 0x20);
    // Outside: the next page, another partition's RAM, address 0.
    for addr in [mem32.pci_addr + mem32.size, 0x4000_0000, 0] {
        assert_eq!(
            v.write(&mut fake, f, 0x10, 4, addr as u32),
            WriteOutcome::Refused(Refusal::BarOutside {
                bdf: f,
                reg: 0,
                addr
            })
        );
        assert_eq!(u64::from(fake.reg(f, 0x10, 4) & !0xf), bar_addr(&a, 0));
        assert_eq!(
            u64::from(v.read(&mut fake, f, 0x10, 4) & !0xf),
            bar_addr(&a, 0)
        );
    }
}

#[test]
fn a_sub_word_bar_write_is_merged_into_the_shadow_first() {
    let (mut fake, a, mut v) = setup(1);
    let f = bdf(1, 0);
    let base = bar_addr(&a, 0);
    assert_eq!(v.write(&mut fake, f, COMMAND, 2, 0x2), WriteOutcome::Done);
    // Byte 3 of BAR0 to 0x7f: the whole BAR lands far outside.
    let expect = (base & 0x00ff_ffff) | 0x7f00_0000;
    assert_eq!(
        v.write(&mut fake, f, 0x13, 1, 0x7f),
        WriteOutcome::Refused(Refusal::BarOutside {
            bdf: f,
            reg: 0,
            addr: expect
        })
    );
    assert_eq!(u64::from(fake.reg(f, 0x10, 4) & !0xf), base);
}

#[test]
fn a_64_bit_bar_reaches_the_device_only_when_both_halves_are_inside() {
    let (mut fake, a, mut v) = setup(1);
    let f = bdf(1, 0);
    let base = bar_addr(&a, 2);
    // Decoding off (as after quiesce): low half first, as Linux writes it,
    // then the high half making it 0x80_4000_0000, outside the 16 KiB
    // window: only the shadow moves, the device keeps its address.
    assert_eq!(
        v.write(&mut fake, f, 0x18, 4, 0x4000_0000),
        WriteOutcome::Done
    );
    assert_eq!(v.read(&mut fake, f, 0x18, 4), 0x4000_000c);
    assert_eq!(v.write(&mut fake, f, 0x1c, 4, 0x80), WriteOutcome::Done);
    assert_eq!(v.read(&mut fake, f, 0x1c, 4), 0x80);
    assert!(fake.writes.is_empty());
    // Decoding cannot go on with it there.
    assert_eq!(
        v.write(&mut fake, f, COMMAND, 2, 0x2),
        WriteOutcome::Refused(Refusal::DecodeWithBarOutside { bdf: f, reg: 2 })
    );
    assert_eq!(fake.reg(f, COMMAND, 2), 0);
    // Back inside: the device gets it.
    v.write(&mut fake, f, 0x18, 4, base as u32);
    assert_eq!(
        v.write(&mut fake, f, 0x1c, 4, (base >> 32) as u32),
        WriteOutcome::Done
    );
    let hi = u64::from(fake.reg(f, 0x1c, 4));
    assert_eq!(hi << 32 | u64::from(fake.reg(f, 0x18, 4) & !0xf), base);
    assert_eq!(v.write(&mut fake, f, COMMAND, 2, 0x2), WriteOutcome::Done);
}

#[test]
fn decoding_on_rewrites_the_bars_so_a_reset_device_decodes_only_its_own() {
    let (mut fake, a, mut v) = setup(1);
    let f = bdf(1, 0);
    // The device lost its BARs (an FLR, D3hot -> D0).
    for at in [0x10, 0x14, 0x18, 0x1c] {
        fake.functions.get_mut(&f).unwrap().put(at, 4, 0);
    }
    assert_eq!(v.write(&mut fake, f, COMMAND, 2, 0x7), WriteOutcome::Done);
    assert_eq!(u64::from(fake.reg(f, 0x10, 4) & !0xf), bar_addr(&a, 0));
    assert_eq!(u64::from(fake.reg(f, 0x14, 4) & !3), bar_addr(&a, 1));
    assert_eq!(fake.reg(f, COMMAND, 2), 0x7);
    // The COMMAND write is the last one.
    assert_eq!(fake.writes.last().unwrap().1, COMMAND);
}

#[test]
fn command_keeps_only_the_allowed_bits_and_status_is_written_through() {
    let (mut fake, _, mut v) = setup(1);
    let f = bdf(1, 0);
    // Memory write and invalidate, VGA snoop, fast back-to-back, bits 11+.
    assert_eq!(
        v.write(&mut fake, f, COMMAND, 2, 0xffff),
        WriteOutcome::Done
    );
    assert_eq!(fake.reg(f, COMMAND, 2), COMMAND_ALLOWED);
    // A 32-bit write: COMMAND masked, STATUS (write 1 to clear) as given.
    v.write(&mut fake, f, COMMAND, 4, 0xf900_0004);
    assert_eq!(fake.reg(f, COMMAND, 2), 0x4);
    assert!(fake.writes.iter().any(|w| w.1 == 0x07 && w.3 == 0xf9));
    // The upper byte alone keeps the lower one.
    v.write(&mut fake, f, COMMAND + 1, 1, 0x04);
    assert_eq!(fake.reg(f, COMMAND, 2), 0x404);
}

#[test]
fn msi_and_msix_stay_off_without_a_doorbell_and_may_be_cleared() {
    let (mut fake, _, mut v) = setup(1);
    let f = bdf(1, 0);
    let refused = WriteOutcome::Refused(Refusal::MsiWithoutDoorbell(f));
    assert_eq!(v.write(&mut fake, f, MSI_AT + 2, 2, 1), refused);
    assert_eq!(v.write(&mut fake, f, MSIX_AT + 2, 2, 0x8000), refused);
    assert_eq!(v.write(&mut fake, f, MSIX_AT + 3, 1, 0x80), refused);
    // Dword write of the capability header + control with enable.
    assert_eq!(v.write(&mut fake, f, MSIX_AT, 4, 0x8000_0000), refused);
    // The message address is a DMA target.
    assert_eq!(v.write(&mut fake, f, MSI_AT + 4, 4, 0x4000_0000), refused);
    assert!(fake.writes.is_empty());
    // Function mask on, enable off: allowed (Linux's MSI-X probe).
    assert_eq!(
        v.write(&mut fake, f, MSIX_AT + 2, 2, 0x4000),
        WriteOutcome::Done
    );
    assert_eq!(fake.reg(f, MSIX_AT + 2, 2), 0x4000);
    // With a doorbell (the virtual ITS) the enable is written through.
    v.msi_doorbell = Some(0x0808_0040);
    assert_eq!(
        v.write(&mut fake, f, MSIX_AT + 2, 2, 0x8000),
        WriteOutcome::Done
    );
}

#[test]
fn with_a_doorbell_the_msi_address_may_only_be_the_doorbell_or_zero() {
    let (mut fake, _, mut v) = setup(1);
    let f = bdf(1, 0);
    let doorbell = crate::layout::GUEST_ITS_DOORBELL;
    v.msi_doorbell = Some(doorbell);
    // Linux's message: the doorbell, then the data (the EventID).
    assert_eq!(
        v.write(&mut fake, f, MSI_AT + 4, 4, doorbell as u32),
        WriteOutcome::Done
    );
    assert_eq!(fake.reg(f, MSI_AT + 4, 4), doorbell as u32);
    assert_eq!(v.write(&mut fake, f, MSI_AT + 8, 2, 7), WriteOutcome::Done);
    assert_eq!(fake.reg(f, MSI_AT + 8, 2), 7);
    // Anywhere else is a DMA target: refused, nothing written.
    let before = fake.writes.len();
    assert_eq!(
        v.write(&mut fake, f, MSI_AT + 4, 4, 0x4000_0000),
        WriteOutcome::Refused(Refusal::MsiAddress {
            bdf: f,
            addr: 0x4000_0000
        })
    );
    // Byte by byte towards the distributor (0x0800_0040): the dword it
    // makes is checked, not the byte.
    assert_eq!(
        v.write(&mut fake, f, MSI_AT + 6, 1, 0x00),
        WriteOutcome::Refused(Refusal::MsiAddress {
            bdf: f,
            addr: 0x0800_0040
        })
    );
    assert_eq!(fake.writes.len(), before);
    assert_eq!(fake.reg(f, MSI_AT + 4, 4), doorbell as u32);
    // Zero (the message cleared on teardown) is allowed.
    assert_eq!(v.write(&mut fake, f, MSI_AT + 4, 4, 0), WriteOutcome::Done);
    // And then the MSI enable is written through.
    assert_eq!(v.write(&mut fake, f, MSI_AT + 2, 2, 1), WriteOutcome::Done);
}

#[test]
fn writes_outside_the_safe_registers_are_ignored_and_counted() {
    let (mut fake, _, mut v) = setup(1);
    let f = bdf(1, 0);
    for (offset, width) in [
        (0x00u16, 2u8),     // IDs
        (0x08, 4),          // class
        (0x2c, 4),          // subsystem
        (0x34, 1),          // capability pointer
        (MSI_AT, 1),        // capability ID / next
        (EXP_AT + 0x10, 2), // Link Control
        (0x100, 4),         // extended configuration space
        (0xffc, 4),
    ] {
        assert_eq!(
            v.write(&mut fake, f, offset, width, 0),
            WriteOutcome::Ignored
        );
    }
    assert!(fake.writes.is_empty());
    assert_eq!(v.ignored, 8);
    // Device Control, interrupt line, cache line size: written.
    for (offset, width) in [(EXP_AT + 8, 2u8), (0x3c, 1), (0x0c, 1)] {
        assert_eq!(
            v.write(&mut fake, f, offset, width, 0x10),
            WriteOutcome::Done
        );
    }
    // 0x3c as a dword: only the interrupt line byte goes through.
    v.write(&mut fake, f, 0x3c, 4, 0xffff_ff0b);
    assert_eq!(fake.reg(f, 0x3c, 4), 0x0000_010b);
}

#[test]
fn a_hostile_sequence_never_leaves_a_bar_outside_while_decoding() {
    // Random writes over the whole header and capabilities; after each the
    // device's BARs, whenever decoding is on, lie in the partition's
    // windows, and nothing but the function itself was written.
    let (mut fake, a, mut v) = setup(1);
    let f = bdf(1, 0);
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..20_000 {
        let r = next();
        let width = [1u8, 2, 4][(r % 3) as usize];
        let offset = ((r >> 8) % 0x80) as u16 & !(u16::from(width) - 1);
        let value = match (r >> 20) % 4 {
            0 => u32::MAX,
            1 => 0,
            2 => (r >> 32) as u32,
            _ => bar_addr(&a, ((r >> 24) % 3) as u8) as u32 | 0x2,
        };
        let target = if r >> 60 == 0 { bdf(2, 0) } else { f };
        v.write(&mut fake, target, offset, width, value);
        let command = fake.reg(f, COMMAND, 2);
        assert_eq!(command & !COMMAND_ALLOWED, 0);
        assert_eq!(fake.reg(f, MSI_AT + 2, 2) & MSI_ENABLE, 0);
        assert_eq!(fake.reg(f, MSIX_AT + 2, 2) & MSIX_ENABLE, 0);
        if command & 3 != 0 {
            let lo = u64::from(fake.reg(f, 0x18, 4) & !0xf);
            let mem64 = u64::from(fake.reg(f, 0x1c, 4)) << 32 | lo;
            let bars = [
                (
                    HostBar {
                        reg: 0,
                        space: BarSpace::Mem32,
                        prefetchable: false,
                        size: 0x1000,
                    },
                    u64::from(fake.reg(f, 0x10, 4) & !0xf),
                    command & 2 != 0,
                ),
                (
                    HostBar {
                        reg: 1,
                        space: BarSpace::Io,
                        prefetchable: false,
                        size: 0x20,
                    },
                    u64::from(fake.reg(f, 0x14, 4) & !3),
                    command & 1 != 0,
                ),
                (
                    HostBar {
                        reg: 2,
                        space: BarSpace::Mem64,
                        prefetchable: true,
                        size: 0x4000,
                    },
                    mem64,
                    command & 2 != 0,
                ),
            ];
            for (bar, addr, on) in bars {
                assert!(!on || inside(&a.windows, bar, addr), "{bar:?} at {addr:#x}");
            }
        }
    }
    assert_eq!(fake.writes_to(bdf(2, 0)), 0);
    assert!(v.refused > 0 && v.ignored > 0);
}

#[test]
fn the_window_decodes_bus_device_function_and_register() {
    let (_, _, v) = setup(1);
    let base = host_bridge().ecam.0;
    assert_eq!(
        v.decode(base + (1 << 15) + 0x10, 4),
        Some((bdf(1, 0), 0x10))
    );
    assert_eq!(
        v.decode(base + (3 << 20) + (2 << 15) + (5 << 12) + 0x3d, 1),
        Some((
            Bdf {
                bus: 3,
                dev: 2,
                func: 5
            },
            0x3d
        ))
    );
    assert_eq!(v.decode(base + 0x11, 4), None);
    assert_eq!(v.decode(base - 4, 4), None);
    assert_eq!(v.decode(base + host_bridge().ecam.1, 4), None);
}

#[test]
fn reset_functions_quiesces_each_present_function_of_the_list() {
    let (mut fake, _, _) = setup(1);
    fake.functions
        .get_mut(&bdf(1, 0))
        .unwrap()
        .put(COMMAND, 2, 0x7);
    let done = reset_functions(&mut fake, (0, 0), &[bdf(1, 0), bdf(9, 0)]);
    assert_eq!(done.len(), 1);
    assert_eq!((done[0].bdf, done[0].command), (bdf(1, 0), 0x7));
    assert_eq!(fake.reg(bdf(1, 0), COMMAND, 2), 0);
    assert_eq!(fake.writes_to(bdf(2, 0)), 0);
}

#[test]
fn a_decoding_64_bit_bar_refuses_an_outside_high_half_and_hermits_probe_is_taken_while_off() {
    let (mut fake, a, mut v) = setup(1);
    let f = bdf(1, 0);
    let base = bar_addr(&a, 2);
    // Off: Hermit 0.11 writes 0xfffffff0 to the high half to size it.
    assert_eq!(
        v.write(&mut fake, f, 0x1c, 4, 0xffff_fff0),
        WriteOutcome::Done
    );
    assert!(fake.writes.is_empty());
    v.write(&mut fake, f, 0x1c, 4, (base >> 32) as u32);
    assert_eq!(v.write(&mut fake, f, COMMAND, 2, 0x2), WriteOutcome::Done);
    fake.writes.clear();
    // On: the high half completing an address outside is refused and the
    // device keeps decoding where it was.
    assert!(matches!(
        v.write(&mut fake, f, 0x1c, 4, (base >> 32) as u32 + 1),
        WriteOutcome::Refused(Refusal::BarOutside { reg: 3, addr, .. }) if addr >> 32 == (base >> 32) + 1
    ));
    let hi = u64::from(fake.reg(f, 0x1c, 4));
    assert_eq!(hi << 32 | u64::from(fake.reg(f, 0x18, 4) & !0xf), base);
}

/// A VF of the endpoint at 00:01.0 at 00:12.0: two 16 KiB 64-bit BARs
/// fixed at 0x80_0001_0000 and 0x80_0001_c000 (as `sriov::enable` places
/// them), its ID registers 0xffff and BAR registers read-only zero.
fn with_vf(fake: &mut Fake) -> (Vec<HostFunction>, Bdf) {
    let vf = bdf(0x12, 0);
    let mut f = FakeFn {
        regs: [0; 4096],
        bars: [(0, 0); 6],
    };
    f.put(0, 4, u32::MAX);
    f.put(0x08, 4, 0x0200_0001);
    // Enumerated before the PF's VFs are enabled, as at boot.
    let mut host = host(fake);
    fake.functions.insert(vf, f);
    let bar = |reg| HostBar {
        reg,
        space: BarSpace::Mem64,
        prefetchable: true,
        size: 0x4000,
    };
    host.push(HostFunction {
        bdf: vf,
        vendor: 0x8086,
        device: 0x10ca,
        class: 0x02_0000,
        bridge: false,
        pin: 0,
        bars: alloc::vec![bar(0), bar(3)],
        caps: Vec::new(),
        msi_vectors: 3,
        vf: Some(VfOf {
            pf: bdf(1, 0),
            bars: alloc::vec![(0, 0x80_0001_0000), (3, 0x80_0001_c000)],
        }),
    });
    (host, vf)
}

#[test]
fn a_vf_gets_its_fixed_bars_as_windows_and_its_pf_stays_the_hypervisors() {
    let mut fake = Fake::qemu();
    let (host, vf) = with_vf(&mut fake);
    let hb = host_bridge();
    let a = assign(&[vf], &host, &hb, &[], &[], |_| false).unwrap();
    assert_eq!(
        a.functions[0]
            .bars
            .iter()
            .map(|&(b, at)| (b.reg, at))
            .collect::<Vec<_>>(),
        [(0, 0x80_0001_0000), (3, 0x80_0001_c000)]
    );
    for at in [0x80_0001_0000, 0x80_0001_c000] {
        assert!(a
            .windows
            .iter()
            .any(|w| w.pci_addr == at && w.cpu_addr == at && w.size == 0x4000));
    }
    assert_eq!(a.functions[0].spi, None, "a VF has no INTx");
    // The PF, with its VFs enabled, is refused.
    let e = assign(&[bdf(1, 0)], &host, &hb, &[], &[], |_| false).unwrap_err();
    assert_eq!(e.problem, AssignProblem::PfWithVfs);
    // The VF once another partition holds it.
    let e = assign(&[vf], &host, &hb, &a.cpu_windows(), &[], |_| false).unwrap_err();
    assert_eq!(e.problem, AssignProblem::VfHeld);
    // Another function's carved windows keep clear of every VF aperture.
    let reserved = vf_apertures(&host, &hb);
    assert_eq!(
        reserved,
        [(0x80_0001_0000, 0x4000), (0x80_0001_c000, 0x4000)]
    );
    let other = assign(&[bdf(2, 0)], &host, &hb, &[], &reserved, |_| false).unwrap();
    for w in &other.windows {
        for &(r, rs) in &reserved {
            assert!(
                w.cpu_addr + w.size <= r || r + rs <= w.cpu_addr,
                "{w:?} over a VF aperture"
            );
        }
    }
}

#[test]
fn a_vf_shows_its_ids_and_cannot_decode_with_its_bars_moved() {
    let mut fake = Fake::qemu();
    let (host, vf) = with_vf(&mut fake);
    let hb = host_bridge();
    let a = assign(&[vf], &host, &hb, &[], &[], |_| false).unwrap();
    let mut v = VirtualEcam::new(&hb, &a, &host);
    assert_eq!(v.read(&mut fake, vf, 0, 4), 0x10ca_8086);
    assert_eq!(v.read(&mut fake, vf, 2, 2), 0x10ca);
    assert_eq!(v.read(&mut fake, vf, 0x10, 4), 0x0001_000c);
    assert_eq!(v.read(&mut fake, vf, 0x14, 4), 0x80);
    // Sizing is answered from the shadow.
    v.write(&mut fake, vf, 0x10, 4, u32::MAX);
    assert_eq!(v.read(&mut fake, vf, 0x10, 4), 0xffff_c00c);
    // Moved within the shadow (the VF's BAR registers ignore it) ...
    assert_eq!(
        v.write(&mut fake, vf, 0x10, 4, 0x0002_0000),
        WriteOutcome::Done
    );
    // ... it cannot decode there.
    assert_eq!(
        v.write(&mut fake, vf, COMMAND, 2, 0x6),
        WriteOutcome::Refused(Refusal::DecodeWithBarOutside { bdf: vf, reg: 0 })
    );
    // Back where it is: memory and bus master on.
    v.write(&mut fake, vf, 0x10, 4, 0x0001_0000);
    assert_eq!(v.write(&mut fake, vf, COMMAND, 2, 0x6), WriteOutcome::Done);
    assert_eq!(fake.reg(vf, COMMAND, 2), 0x6);
}

/// `msi_vectors` over the function's own capability list.
fn vectors_of(fake: &mut Fake, b: Bdf) -> u32 {
    let caps = capability_spans(fake, b);
    msi_vectors(fake, b, &caps)
}

#[test]
fn a_functions_msi_vectors_are_its_msix_table_or_its_msi_multiple_message_count() {
    let mut fake = Fake::qemu();
    // endpoint(): MSI control 0 (1 vector), MSI-X control 0 (1 entry).
    assert_eq!(vectors_of(&mut fake, bdf(1, 0)), 1);
    // MSI-X Table Size 2 (3 entries: virtio-net's config, rx, tx).
    fake.functions
        .get_mut(&bdf(1, 0))
        .unwrap()
        .put(MSIX_AT + 2, 2, 2);
    assert_eq!(vectors_of(&mut fake, bdf(1, 0)), 3);
    // MSI Multiple Message Capable 5 (32 vectors) beats it.
    fake.functions
        .get_mut(&bdf(1, 0))
        .unwrap()
        .put(MSI_AT + 2, 2, 5 << 1);
    assert_eq!(vectors_of(&mut fake, bdf(1, 0)), 32);
    // The largest MSI-X table: 2048.
    fake.functions
        .get_mut(&bdf(2, 0))
        .unwrap()
        .put(MSIX_AT + 2, 2, 0x7ff);
    assert_eq!(vectors_of(&mut fake, bdf(2, 0)), 2048);
    // No capability list: none.
    fake.functions.get_mut(&bdf(3, 0)).unwrap().put(0x06, 2, 0);
    assert_eq!(vectors_of(&mut fake, bdf(3, 0)), 0);
    // And the scan records it.
    let found = enumerate(&mut fake, (0, 0));
    let f = found.iter().find(|f| f.bdf == bdf(2, 0)).unwrap();
    assert_eq!(f.msi_vectors, 2048);
}
