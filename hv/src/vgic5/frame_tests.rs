//! The guest's IRS config frame against what Linux's GICv5 IRS driver
//! (drivers/irqchip/irq-gic-v5-irs.c, 6.17+) does with it.

use super::*;
use crate::vgic5::VM_LPI_ID_BITS;

const RAM: (u64, u64) = (0x4000_0000, 0x1000_0000);

/// Two vCPUs owning SPIs 5 and 40 (core INTIDs 37 and 72).
fn frame() -> VirsFrame {
    VirsFrame::new(FrameSpec {
        vcpus: 2,
        spis: alloc::vec![37, 72],
        ram: RAM,
    })
}

fn r32(f: &mut VirsFrame, offset: u64) -> u32 {
    let out = f.read(offset, 4);
    assert_eq!(out.fault, None, "read {offset:#x}");
    out.value as u32
}

fn w32(f: &mut VirsFrame, offset: u64, v: u32) -> FrameOutcome {
    f.write(offset, 4, u64::from(v))
}

/// Linux's polls: the bit it waits for must read 1 (its timeout is 10 ms).
fn poll(f: &mut VirsFrame, offset: u64, mask: u32) -> u32 {
    let v = r32(f, offset);
    assert_ne!(v & mask, 0, "poll of {offset:#x} would time out");
    v
}

/// What Linux's probe, IST set-up, CPU registration and one SPI's
/// set_type do, in its order; returns the LPI ID bits it chose and the
/// SPI range it found.
fn linux_probe(
    f: &mut VirsFrame,
    iaffids: &[u32],
    ist_pa: u64,
) -> (u32, (u32, u32), Vec<FrameOutcome>) {
    let mut outs = Vec::new();
    // gicv5_irs_init_bases: CR1 (cacheable attributes), CR0.IRSEN, wait idle.
    outs.push(w32(f, reg::CR1, 0x3ff3 | 0x10 | 0x4));
    outs.push(w32(f, reg::CR0, 1));
    poll(f, reg::CR0, 1 << 1);
    // IAFFID bits, checked against the DT's arm,iaffids.
    let iaffid_bits = (r32(f, reg::IDR1) >> 16 & 0xf) + 1;
    for &i in iaffids {
        assert_eq!(i & !((1 << iaffid_bits) - 1), 0, "IAFFID {i} too wide");
    }
    assert_ne!(r32(f, reg::IDR2) & (1 << 5), 0, "no LPIs");
    let spi_min = r32(f, reg::IDR7) & 0xff_ffff;
    let spi_range = r32(f, reg::IDR6) & 0x1ff_ffff;
    let _virt = r32(f, reg::IDR0) >> 6 & 1;
    let _prio = r32(f, reg::IDR1) >> 20 & 7;
    let _global = r32(f, reg::IDR5) & 0x1ff_ffff;
    // gicv5_irs_init_ist.
    let baser = f.read(reg::IST_BASER, 8);
    assert_eq!(baser.value & 1, 0, "IST already valid");
    let idr2 = r32(f, reg::IDR2);
    let two_levels = idr2 >> 10 & 1 != 0;
    let id_bits = idr2 & 0x1f;
    let min_bits = idr2 >> 6 & 0xf;
    assert!(!two_levels);
    let lpi_id_bits = 12u32.max(min_bits).min(id_bits);
    assert_eq!(idr2 >> 14 & 1, 0, "ISTMD");
    // Linear, ISTSZ 4 bytes, L2SZ 4K.
    outs.push(w32(f, reg::IST_CFGR, lpi_id_bits));
    outs.push(f.write(reg::IST_BASER, 8, (ist_pa & 0x00ff_ffff_ffff_ffc0) | 1));
    poll(f, reg::IST_STATUSR, 1);
    // gicv5_irs_register_cpu for each CPU.
    for &i in iaffids {
        outs.push(w32(f, reg::PE_SELR, i));
        let st = poll(f, reg::PE_STATUSR, 1);
        assert_ne!(st & 2, 0, "IAFFID {i} invalid");
        outs.push(w32(f, reg::PE_CR0, 1));
        poll(f, reg::PE_STATUSR, 1);
    }
    (lpi_id_bits, (spi_min, spi_range), outs)
}

/// gicv5_spi_irq_set_type: select, wait V, TM, wait V.
fn set_type(f: &mut VirsFrame, spi: u32, level: bool) -> Result<FrameOutcome, FrameOutcome> {
    let sel = w32(f, reg::SPI_SELR, spi);
    if r32(f, reg::SPI_STATUSR) & 2 == 0 {
        return Err(sel);
    }
    let out = w32(f, reg::SPI_CFGR, u32::from(level));
    assert_ne!(r32(f, reg::SPI_STATUSR) & 3, 0);
    Ok(out)
}

#[test]
fn linux_probe_brings_up_the_irs_with_the_vms_lpis_spis_and_vcpus() {
    let mut f = frame();

    let (lpi_bits, (spi_min, spi_range), outs) = linux_probe(&mut f, &[0, 1], RAM.0 + 0x10_0000);

    assert!(
        outs.iter().all(|o| o.fault.is_none() && o.action.is_none()),
        "{outs:?}"
    );
    assert_eq!(lpi_bits, 12);
    assert!(lpi_bits <= u32::from(VM_LPI_ID_BITS));
    assert_eq!((spi_min, spi_range), (0, 256));
    assert!(f.ist_valid());
    assert_eq!(r32(&mut f, reg::CR0), 0b11);
    assert_eq!(r32(&mut f, reg::IST_CFGR), 12);
    w32(&mut f, reg::PE_SELR, 1);
    assert_eq!(r32(&mut f, reg::PE_CR0), 1);
}

#[test]
fn linux_setting_its_own_spis_trigger_is_recorded_and_handed_to_the_platform() {
    let mut f = frame();

    let out = set_type(&mut f, 40, true).expect("own SPI");

    assert_eq!(out.fault, None);
    assert_eq!(
        out.action,
        Some(FrameAction::SpiTrigger {
            intid: 72,
            level: true
        })
    );
    assert_eq!(r32(&mut f, reg::SPI_CFGR), 1);
    w32(&mut f, reg::SPI_SELR, 5);
    assert_eq!(r32(&mut f, reg::SPI_CFGR), 0, "SPI 5 still edge");
}

#[test]
fn a_foreign_spi_reads_not_valid_and_its_cfgr_does_nothing_counted() {
    let mut f = frame();
    set_type(&mut f, 5, true).expect("own SPI");

    let sel = set_type(&mut f, 6, true).expect_err("SPI 6 is not the partition's");
    let cfgr = w32(&mut f, reg::SPI_CFGR, 1);
    let read = f.read(reg::SPI_CFGR, 4);

    assert_eq!(sel.fault, Some(FrameFault::ForeignSpi { spi: 6 }));
    assert_eq!(cfgr.fault, Some(FrameFault::ForeignSpi { spi: 6 }));
    assert_eq!(cfgr.action, None);
    assert_eq!(
        (read.value, read.fault),
        (0, Some(FrameFault::ForeignSpi { spi: 6 }))
    );
    assert_eq!(r32(&mut f, reg::SPI_STATUSR), 1, "IDLE, not V");
    w32(&mut f, reg::SPI_SELR, 5);
    assert_eq!(r32(&mut f, reg::SPI_CFGR), 1, "the own SPI kept its mode");
}

/// The emulated PL011's, watchdog's and PL061's SPIs (1, 60, 61, made
/// pending with GIC VDPEND) are valid to Linux's set_type, their mode read
/// back, with nothing for the platform (no physical SPI).
#[test]
fn the_emulated_devices_spis_exist_and_their_trigger_is_only_recorded() {
    let mut f = frame();

    for spi in [1, 60, 61] {
        let out = set_type(&mut f, spi, true).expect("an emulated device's SPI");
        assert_eq!((out.fault, out.action), (None, None), "SPI {spi}");
        assert_eq!(r32(&mut f, reg::SPI_CFGR), 1);
    }
    w32(&mut f, reg::SPI_SELR, 5);
    assert_eq!(r32(&mut f, reg::SPI_CFGR), 0, "the own SPI 5 untouched");
    let out = set_type(&mut f, 2, true).expect_err("SPI 2 is nobody's");
    assert_eq!(out.fault, Some(FrameFault::ForeignSpi { spi: 2 }));
}

#[test]
fn a_foreign_pe_reads_not_valid_and_its_cr0_does_nothing_counted() {
    let mut f = frame();

    let sel = w32(&mut f, reg::PE_SELR, 2);
    let status = r32(&mut f, reg::PE_STATUSR);
    let cr0 = w32(&mut f, reg::PE_CR0, 1);

    assert_eq!(sel.fault, Some(FrameFault::ForeignPe { iaffid: 2 }));
    assert_eq!(status, 1, "IDLE, not V: Linux's register_cpu fails");
    assert_eq!(cr0.fault, Some(FrameFault::ForeignPe { iaffid: 2 }));
    for n in 0..2 {
        w32(&mut f, reg::PE_SELR, n);
        assert_eq!(r32(&mut f, reg::PE_CR0), 0, "vCPU {n}'s DPS untouched");
    }
}

#[test]
fn every_register_reads_its_reset_value() {
    let mut f = frame();
    let expected: [(u64, u32); 22] = [
        (reg::IDR0, 0),
        // PRIORITY_BITS 5, IAFFID_BITS 1 (encoded 0), PE_CNT - 1 = 1.
        (reg::IDR1, (0b100 << 20) | 1),
        (reg::IDR2, u32::from(VM_LPI_ID_BITS) | (1 << 5)),
        (reg::IDR5, 256),
        (reg::IDR6, 256),
        (reg::IDR7, 0),
        (reg::IIDR, crate::vgic::IIDR),
        (reg::AIDR, 0),
        (reg::CR0, 0b10),
        (reg::CR1, 0),
        (reg::SYNCR, 0),
        (reg::SYNC_STATUSR, 1),
        (reg::SPI_SELR, 0),
        (reg::SPI_CFGR, 0),
        (reg::SPI_STATUSR, 1),
        (reg::PE_SELR, 0),
        (reg::PE_STATUSR, 1),
        (reg::PE_CR0, 0),
        (reg::IST_CFGR, 0),
        (reg::IST_STATUSR, 1),
        (reg::IDR3, 0),
        (reg::IDR4, 0),
    ];

    let got: Vec<(u64, u32)> = expected
        .iter()
        .map(|&(o, _)| (o, f.read(o, 4).value as u32))
        .collect();

    assert_eq!(got, expected);
    assert_eq!(f.read(reg::IST_BASER, 8).value, 0);
    // Nothing selected at reset: SPI_CFGR is the only one that complains.
    assert_eq!(
        f.read(reg::SPI_CFGR, 4).fault,
        Some(FrameFault::ForeignSpi { spi: 0 })
    );
    assert_eq!(
        f.read(reg::IDR3, 4).fault.map(|_| ()),
        Some(()),
        "no vIRS registers"
    );
}

#[test]
fn a_vm_with_spis_beyond_the_guest_range_reports_the_vms_range() {
    let f = VirsFrame::new(FrameSpec {
        vcpus: 5,
        spis: alloc::vec![32 + 300],
        ram: RAM,
    });
    let mut f = f;

    assert_eq!(r32(&mut f, reg::IDR6), 512);
    // 5 vCPUs: IAFFIDs 0..4 need 3 bits.
    assert_eq!(r32(&mut f, reg::IDR1), (0b100 << 20) | (2 << 16) | 4);
}

#[test]
fn an_ist_outside_the_partitions_ram_is_not_made_valid_counted() {
    let mut f = frame();
    w32(&mut f, reg::IST_CFGR, 12);

    // 16 KiB ending 4 KiB past the RAM's end.
    let at = RAM.0 + RAM.1 - 0x3000;
    let out = f.write(reg::IST_BASER, 8, at | 1);

    assert_eq!(
        out.fault,
        Some(FrameFault::IstRefused {
            why: IstRefusal::OutsideRam {
                addr: at,
                bytes: 0x4000
            }
        })
    );
    assert!(!f.ist_valid());
    let below = f.write(reg::IST_BASER, 8, (RAM.0 - 0x4000) | 1);
    assert!(below.fault.is_some() && !f.ist_valid());
    let fits = f.write(reg::IST_BASER, 8, (RAM.0 + RAM.1 - 0x4000) | 1);
    assert_eq!(fits.fault, None);
    assert!(f.ist_valid());
}

#[test]
fn an_ist_the_vm_cannot_take_is_refused_naming_why() {
    let cases = [
        ((1 << 16) | 12, IstRefusal::TwoLevel),
        ((1 << 7) | 12, IstRefusal::EntrySize(1)),
        (
            u32::from(VM_LPI_ID_BITS) + 1,
            IstRefusal::IdBits(u32::from(VM_LPI_ID_BITS) + 1),
        ),
    ];
    for (cfgr, why) in cases {
        let mut f = frame();
        w32(&mut f, reg::IST_CFGR, cfgr);

        let out = f.write(reg::IST_BASER, 8, RAM.0 | 1);

        assert_eq!(out.fault, Some(FrameFault::IstRefused { why }), "{cfgr:#x}");
        assert!(!f.ist_valid());
    }
}

#[test]
fn ist_cfgr_written_while_the_ist_is_valid_is_ignored_counted() {
    let mut f = frame();
    w32(&mut f, reg::IST_CFGR, 12);
    f.write(reg::IST_BASER, 8, RAM.0 | 1);

    let out = w32(&mut f, reg::IST_CFGR, 14);

    assert_eq!(out.fault, Some(FrameFault::IstBusy));
    assert_eq!(r32(&mut f, reg::IST_CFGR), 12);
}

#[test]
fn unknown_offsets_and_wrong_widths_are_raz_wi_counted() {
    let mut f = frame();
    let cases = [
        (reg::MAP_L2_ISTR, 4),
        (0x0100, 8), // IRS_SPI_VMR: no virtualisation offered
        (0x0200, 8), // IRS_VMT_BASER
        (0x3c0, 4),  // IRS_SWERR_STATUSR
        (reg::CR0, 8),
        (reg::IST_BASER, 4),
        (0xfffc, 4),
    ];
    for (offset, width) in cases {
        let w = f.write(offset, width, u64::MAX);
        let r = f.read(offset, width);

        assert_eq!(
            w.fault,
            Some(FrameFault::Unknown {
                offset,
                width,
                write: true
            })
        );
        assert_eq!((r.value, r.fault.is_some()), (0, true), "{offset:#x}");
    }
    assert_eq!(
        r32(&mut f, reg::CR0),
        0b10,
        "the 8-byte CR0 write did nothing"
    );
    assert!(!f.ist_valid());
}
