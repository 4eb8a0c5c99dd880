//! A model of one GICv5 ITS: its config frame (the ID registers, ITS_CR0,
//! the device table's base and configuration, the invalidate and sync
//! registers) and its translate frame (a device's MSI write: DeviceID
//! from the interconnect, EventID the data), over the device table and
//! the ITTs in the [`Model`]'s physical memory, delivering the LPI an
//! event translates to to the model's IRS.
//!
//! Written from the register and table layouts that Linux's
//! `include/linux/irqchip/arm-gic-v5.h` gives (IHI 0101 itself was not
//! available; no other implementation was read), apart from the driver:
//! - ITS_IDR1 0x04: DEVICEID_BITS [5:0], DT_LEVELS [6], ITT_LEVELS [7],
//!   L2SZ [10:8]; ITS_IDR2 0x08: EVENTID_BITS [4:0];
//! - ITS_CR0 0x80: ITSEN [0], IDLE [1] (read-only); ITS_CR1 0x84 (cache
//!   attributes, kept, not modelled);
//! - ITS_DT_BASER 0xc0 (64-bit, ADDR [55:3]); ITS_DT_CFGR 0xd0:
//!   DEVICEID_BITS [5:0], L2SZ [7:6], STRUCTURE [16] (0 linear);
//! - ITS_DIDR 0x100 (64-bit, DEVICEID [31:0]); ITS_EIDR 0x108 (EVENTID
//!   [15:0]); ITS_INV_EVENTR 0x10c (I [31], ITT_L2SZ [2:1], L1 [0]);
//!   ITS_INV_DEVICER 0x110 (I [31], EVENTID_BITS [5:1], L1 [0]);
//!   ITS_STATUSR 0x120 (IDLE [0]); ITS_SYNCR 0x140 (64-bit: SYNC [63],
//!   SYNCALL [32], DEVICEID [31:0]); ITS_SYNC_STATUSR 0x148 (IDLE [0]);
//! - a level-2 device table entry (8 bytes): VALID [0], ITT_L2SZ [2:1],
//!   ITT address [55:3] (unshifted), DSWE [57], ITT STRUCTURE [58],
//!   EVENT_ID_BITS [63:59]; an ITT entry (8 bytes): LPI_ID [23:0], DAC
//!   [29:28], VIRTUAL [30], VALID [31], VM_ID [47:32].
//!
//! What the model decides where the sources are silent, strictly, so that
//! software relying on more fails here:
//! - the ITS reads an entry only when told to: a device's table entry
//!   when ITS_INV_DEVICER names it (ITS_DIDR), an event's ITT entry when
//!   ITS_INV_EVENTR names it (ITS_DIDR, ITS_EIDR); a translation uses only
//!   what was read so (an entry written and never invalidated is not seen,
//!   and one cleared but not invalidated still translates). Invalidating a
//!   device forgets its events;
//! - every operation completes at once (ITS_STATUSR.IDLE and
//!   ITS_SYNC_STATUSR.IDLE read 1; syncs are counted, [`Its::syncs`]);
//! - the device table's base and configuration may change only while
//!   ITSEN = 0; an invalidate with I = 0, with ITSEN = 0, naming a
//!   DeviceID beyond ITS_DT_CFGR.DEVICEID_BITS, or (ITS_INV_DEVICER)
//!   whose EVENTID_BITS differ from the entry's is [`ItsMisuse`];
//! - only linear tables: a two-level device table or ITT, or L1 = 1, is
//!   [`ItsMisuse::TwoLevel`] (the model's IDR1 offers neither);
//! - an ITT entry with VIRTUAL = 1 (a VM's virtual LPI) is not modelled:
//!   the event is dropped as [`Translation::Virtual`].
//!
//! Not modelled: two-level tables, virtual LPIs (DAC, VM_ID), SYNCALL's
//! scope, the realm/secure frames, the IWB, error reporting.

use crate::Model;
use std::collections::BTreeMap;
use std::vec::Vec;

/// Config frame offsets and fields.
pub mod reg {
    pub const IDR1: u64 = 0x04;
    pub const IDR2: u64 = 0x08;
    pub const CR0: u64 = 0x80;
    pub const CR1: u64 = 0x84;
    pub const DT_BASER: u64 = 0xc0;
    pub const DT_CFGR: u64 = 0xd0;
    pub const DIDR: u64 = 0x100;
    pub const EIDR: u64 = 0x108;
    pub const INV_EVENTR: u64 = 0x10c;
    pub const INV_DEVICER: u64 = 0x110;
    pub const STATUSR: u64 = 0x120;
    pub const SYNCR: u64 = 0x140;
    pub const SYNC_STATUSR: u64 = 0x148;

    pub const CR0_ITSEN: u64 = 1;
    pub const CR0_IDLE: u64 = 1 << 1;
    pub const INV_I: u64 = 1 << 31;
    pub const INV_L1: u64 = 1;
    pub const DT_CFGR_STRUCTURE: u64 = 1 << 16;
    pub const SYNCR_SYNC: u64 = 1 << 63;
    pub const ADDR_MASK: u64 = ((1 << 56) - 1) & !7;

    pub const DTE_VALID: u64 = 1;
    pub const DTE_ITT_STRUCTURE: u64 = 1 << 58;
    pub const DTE_EVENT_ID_BITS_SHIFT: u32 = 59;
    pub const ITTE_VALID: u64 = 1 << 31;
    pub const ITTE_VIRTUAL: u64 = 1 << 30;
    pub const ITTE_LPI_ID: u64 = 0xff_ffff;
}

/// What software did wrong on the ITS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ItsMisuse {
    UnknownOffset(u64),
    /// ITS_DT_BASER or ITS_DT_CFGR written while ITSEN = 1.
    TableChangedWhileEnabled(u64),
    /// ITS_DT_CFGR.DEVICEID_BITS beyond ITS_IDR1's.
    TooManyDeviceIdBits(u8),
    /// An invalidate written with I = 0, or while ITSEN = 0.
    Invalidate(u64),
    /// An invalidate naming a DeviceID beyond the device table.
    NoSuchDevice(u32),
    /// ITS_INV_DEVICER.EVENTID_BITS differs from the entry's, or the entry
    /// has more EventID bits than ITS_IDR2 offers.
    EventIdBits {
        device: u32,
        said: u8,
        entry: u8,
    },
    /// ITS_INV_EVENTR naming an event of a device the ITS holds no valid
    /// entry for, or beyond its EventID bits.
    NoSuchEvent {
        device: u32,
        event: u32,
    },
    /// A two-level table or L1 = 1: not offered by this ITS.
    TwoLevel,
}

/// What became of one MSI write to the translate frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Translation {
    /// LPI `0` made pending in the IRS.
    Lpi(u32),
    /// ITSEN = 0.
    Disabled,
    /// No valid device table entry (as the ITS last read it).
    NoDevice,
    /// The EventID is beyond the device's, or its ITT entry (as last read)
    /// is not valid.
    NoEvent,
    /// The ITT entry names a virtual LPI (not modelled).
    Virtual,
    /// The IRS does not hold the LPI (outside its IST).
    NotInIst(u32),
}

/// The ITS's configuration.
#[derive(Debug, Clone, Copy)]
pub struct ItsConfig {
    pub device_id_bits: u8,
    pub event_id_bits: u8,
}

impl Default for ItsConfig {
    fn default() -> ItsConfig {
        ItsConfig {
            device_id_bits: 16,
            event_id_bits: 11,
        }
    }
}

/// One ITS.
pub struct Its {
    cfg: ItsConfig,
    cr0: u64,
    cr1: u64,
    dt_baser: u64,
    dt_cfgr: u64,
    didr: u64,
    eidr: u64,
    /// The device table entries the ITS has read (ITS_INV_DEVICER).
    dtes: BTreeMap<u32, u64>,
    /// The ITT entries it has read (ITS_INV_EVENTR).
    ittes: BTreeMap<(u32, u32), u64>,
    syncs: Vec<u64>,
    misuse: Vec<ItsMisuse>,
    invalidates: u64,
}

impl Its {
    pub fn new(cfg: ItsConfig) -> Its {
        Its {
            cfg,
            cr0: 0,
            cr1: 0,
            dt_baser: 0,
            dt_cfgr: 0,
            didr: 0,
            eidr: 0,
            dtes: BTreeMap::new(),
            ittes: BTreeMap::new(),
            syncs: Vec::new(),
            misuse: Vec::new(),
            invalidates: 0,
        }
    }

    pub fn misuse(&self) -> &[ItsMisuse] {
        &self.misuse
    }

    pub fn enabled(&self) -> bool {
        self.cr0 & reg::CR0_ITSEN != 0
    }

    /// Every ITS_SYNCR value written.
    pub fn syncs(&self) -> &[u64] {
        &self.syncs
    }

    /// Invalidates (device or event) the ITS carried out.
    pub fn invalidates(&self) -> u64 {
        self.invalidates
    }

    fn bad(&mut self, m: ItsMisuse) {
        self.misuse.push(m);
    }

    fn device_bits(&self) -> u32 {
        (self.dt_cfgr & 0x3f) as u32
    }

    /// A read of the config frame.
    pub fn read(&mut self, offset: u64) -> u64 {
        match offset {
            // Linear tables only: DT_LEVELS = ITT_LEVELS = 0, no L2SZ.
            reg::IDR1 => u64::from(self.cfg.device_id_bits),
            reg::IDR2 => u64::from(self.cfg.event_id_bits),
            reg::CR0 => self.cr0 | reg::CR0_IDLE,
            reg::CR1 => self.cr1,
            reg::DT_BASER => self.dt_baser,
            reg::DT_CFGR => self.dt_cfgr,
            reg::DIDR => self.didr,
            reg::EIDR => self.eidr,
            reg::STATUSR | reg::SYNC_STATUSR => 1,
            _ => {
                self.bad(ItsMisuse::UnknownOffset(offset));
                0
            }
        }
    }

    /// A write of the config frame; the invalidates read `model`'s memory.
    pub fn write(&mut self, model: &Model, offset: u64, value: u64) {
        match offset {
            reg::CR0 => self.cr0 = value & reg::CR0_ITSEN,
            reg::CR1 => self.cr1 = value,
            reg::DT_BASER | reg::DT_CFGR if self.enabled() => {
                self.bad(ItsMisuse::TableChangedWhileEnabled(offset))
            }
            reg::DT_BASER => self.dt_baser = value & reg::ADDR_MASK,
            reg::DT_CFGR => {
                let bits = (value & 0x3f) as u8;
                if bits > self.cfg.device_id_bits {
                    self.bad(ItsMisuse::TooManyDeviceIdBits(bits));
                }
                if value & reg::DT_CFGR_STRUCTURE != 0 {
                    self.bad(ItsMisuse::TwoLevel);
                }
                self.dt_cfgr = value;
            }
            reg::DIDR => self.didr = value & 0xffff_ffff,
            reg::EIDR => self.eidr = value & 0xffff,
            reg::INV_DEVICER => self.inv_device(model, value),
            reg::INV_EVENTR => self.inv_event(model, value),
            reg::SYNCR => self.syncs.push(value),
            _ => self.bad(ItsMisuse::UnknownOffset(offset)),
        }
    }

    /// The DeviceID in ITS_DIDR, if the invalidate `value` may go ahead.
    fn inv_target(&mut self, offset: u64, value: u64) -> Option<u32> {
        if value & reg::INV_I == 0 || !self.enabled() {
            self.bad(ItsMisuse::Invalidate(offset));
            return None;
        }
        if value & reg::INV_L1 != 0 {
            self.bad(ItsMisuse::TwoLevel);
            return None;
        }
        let device = self.didr as u32;
        if u64::from(device) >> self.device_bits() != 0 {
            self.bad(ItsMisuse::NoSuchDevice(device));
            return None;
        }
        Some(device)
    }

    fn inv_device(&mut self, model: &Model, value: u64) {
        let Some(device) = self.inv_target(reg::INV_DEVICER, value) else {
            return;
        };
        let dte = model.mem_read64(self.dt_baser + 8 * u64::from(device));
        self.invalidates += 1;
        self.ittes.retain(|&(d, _), _| d != device);
        if dte & reg::DTE_VALID == 0 {
            self.dtes.remove(&device);
            return;
        }
        let entry = (dte >> reg::DTE_EVENT_ID_BITS_SHIFT) as u8;
        let said = ((value >> 1) & 0x1f) as u8;
        if said != entry || entry > self.cfg.event_id_bits {
            self.bad(ItsMisuse::EventIdBits {
                device,
                said,
                entry,
            });
        }
        if dte & reg::DTE_ITT_STRUCTURE != 0 {
            self.bad(ItsMisuse::TwoLevel);
            return;
        }
        self.dtes.insert(device, dte);
    }

    fn inv_event(&mut self, model: &Model, value: u64) {
        let Some(device) = self.inv_target(reg::INV_EVENTR, value) else {
            return;
        };
        let event = self.eidr as u32;
        let Some(&dte) = self.dtes.get(&device) else {
            self.bad(ItsMisuse::NoSuchEvent { device, event });
            return;
        };
        if event >> (dte >> reg::DTE_EVENT_ID_BITS_SHIFT) != 0 {
            self.bad(ItsMisuse::NoSuchEvent { device, event });
            return;
        }
        let itt = dte & reg::ADDR_MASK;
        self.invalidates += 1;
        let itte = model.mem_read64(itt + 8 * u64::from(event));
        self.ittes.insert((device, event), itte);
    }

    /// Device `device` writes `event` to the translate frame: the event is
    /// translated with the entries the ITS has read and its LPI made
    /// pending in `model`'s IRS.
    pub fn translate(&mut self, model: &mut Model, device: u32, event: u32) -> Translation {
        if !self.enabled() {
            return Translation::Disabled;
        }
        let Some(&dte) = self.dtes.get(&device) else {
            return Translation::NoDevice;
        };
        if event >> (dte >> reg::DTE_EVENT_ID_BITS_SHIFT) != 0 {
            return Translation::NoEvent;
        }
        let Some(&itte) = self.ittes.get(&(device, event)) else {
            return Translation::NoEvent;
        };
        if itte & reg::ITTE_VALID == 0 {
            return Translation::NoEvent;
        }
        if itte & reg::ITTE_VIRTUAL != 0 {
            return Translation::Virtual;
        }
        let lpi = (itte & reg::ITTE_LPI_ID) as u32;
        if model.its_lpi(lpi) {
            Translation::Lpi(lpi)
        } else {
            Translation::NotInIst(lpi)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    const DT: u64 = 0x9000_0000;
    const ITT: u64 = 0x9001_0000;

    /// An IRS with a 14-bit IST and an ITS of 8 DeviceID bits, enabled
    /// over a linear device table at `DT`.
    fn its() -> (Model, Its) {
        let mut m = Model::new(Config::default());
        m.irs_write(crate::irs::IST_CFGR, 14);
        m.irs_write(crate::irs::IST_BASER, 0x8000_0000 | 1);
        m.irs_write(crate::irs::CR0, 1);
        let mut its = Its::new(ItsConfig::default());
        its.write(&m, reg::DT_CFGR, 8);
        its.write(&m, reg::DT_BASER, DT);
        its.write(&m, reg::CR0, reg::CR0_ITSEN);
        (m, its)
    }

    /// Device 5 with 2 EventID bits and event 1 -> LPI 300 written to
    /// memory, nothing invalidated.
    fn tables(m: &mut Model) {
        m.mem_write64(DT + 8 * 5, reg::DTE_VALID | ITT | (2 << 59));
        m.mem_write64(ITT + 8, reg::ITTE_VALID | 300);
    }

    fn invalidate(m: &Model, its: &mut Its) {
        its.write(m, reg::DIDR, 5);
        its.write(m, reg::INV_DEVICER, reg::INV_I | (2 << 1));
        its.write(m, reg::EIDR, 1);
        its.write(m, reg::INV_EVENTR, reg::INV_I);
    }

    #[test]
    fn an_event_translates_only_once_its_device_and_event_are_invalidated() {
        let (mut m, mut its) = its();
        tables(&mut m);

        let before = its.translate(&mut m, 5, 1);
        invalidate(&m, &mut its);
        let after = its.translate(&mut m, 5, 1);

        assert_eq!(
            (before, after),
            (Translation::NoDevice, Translation::Lpi(300))
        );
        assert!(m.lpi(300).unwrap().pending_now());
        assert_eq!(its.misuse(), &[]);
    }

    #[test]
    fn a_cleared_itt_entry_still_translates_until_its_event_is_invalidated() {
        let (mut m, mut its) = its();
        tables(&mut m);
        invalidate(&m, &mut its);

        m.mem_write64(ITT + 8, 0);
        let stale = its.translate(&mut m, 5, 1);
        its.write(&m, reg::INV_EVENTR, reg::INV_I);
        let fresh = its.translate(&mut m, 5, 1);

        assert_eq!(
            (stale, fresh),
            (Translation::Lpi(300), Translation::NoEvent)
        );
    }

    #[test]
    fn an_event_beyond_the_devices_bits_or_another_device_does_not_translate() {
        let (mut m, mut its) = its();
        tables(&mut m);
        invalidate(&m, &mut its);

        assert_eq!(its.translate(&mut m, 5, 4), Translation::NoEvent);
        assert_eq!(its.translate(&mut m, 6, 1), Translation::NoDevice);
    }

    #[test]
    fn the_device_table_is_fixed_while_enabled_and_invalidates_need_i_and_itsen() {
        let (m, mut its) = its();

        its.write(&m, reg::DT_BASER, DT + 0x1000);
        its.write(&m, reg::DIDR, 5);
        its.write(&m, reg::INV_DEVICER, 2 << 1);
        its.write(&m, reg::DIDR, 256);
        its.write(&m, reg::INV_DEVICER, reg::INV_I);

        assert_eq!(
            its.misuse(),
            &[
                ItsMisuse::TableChangedWhileEnabled(reg::DT_BASER),
                ItsMisuse::Invalidate(reg::INV_DEVICER),
                ItsMisuse::NoSuchDevice(256),
            ]
        );
        assert_eq!(its.read(reg::DT_BASER), DT);
    }

    #[test]
    fn an_lpi_outside_the_ist_is_not_made_pending() {
        let (mut m, mut its) = its();
        m.mem_write64(DT + 8 * 5, reg::DTE_VALID | ITT | (2 << 59));
        m.mem_write64(ITT + 8, reg::ITTE_VALID | 20_000);
        invalidate(&m, &mut its);

        assert_eq!(its.translate(&mut m, 5, 1), Translation::NotInIst(20_000));
        assert_eq!(m.lpi(20_000), None);
    }
}
