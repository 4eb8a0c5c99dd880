//! The physical GICv5 ITS's config frame: the device table (linear, in
//! hypervisor RAM), each device's ITT (linear, in hypervisor RAM), and the
//! invalidate and sync registers through which the ITS is told what
//! changed. A GICv5 ITS has no command queue: software writes the tables
//! and names the device (ITS_DIDR) or event (ITS_EIDR) it changed in
//! ITS_INV_DEVICER / ITS_INV_EVENTR, then waits for ITS_STATUSR.IDLE; a
//! device's MSI goes to the separate translate frame (its DeviceID from
//! the interconnect, the EventID its data) and becomes the LPI its ITT
//! entry names, in the IRS that holds the LPI IST.
//!
//! Registers, fields and the order of operations are those of Linux's
//! `irq-gic-v5-its.c` and `arm-gic-v5.h` (IHI 0101 itself was not read):
//! ITS_CR0.ITSEN cleared and waited idle before the tables are given,
//! ITS_CR1 cacheable (write-back, inner shareable, read-allocate),
//! ITS_DT_CFGR (linear, DEVICEID_BITS) then ITS_DT_BASER, ITSEN set and
//! waited idle; a device's entry written (EVENT_ID_BITS, linear ITT, ITT
//! address, VALID) then invalidated with its EventID bits; an event's ITT
//! entry (LPI_ID, VALID) written then invalidated; ITS_SYNCR per device.
//! Table writes go through [`TableMem`] (the platform cleans each to the
//! point of coherency). Two-level tables are not used: the hypervisor
//! sizes the device table to the DeviceIDs it routes.
//!
//! What it is told to do comes from the core (`pinfold_hv::its5`: the
//! partition's accepted vITS commands as [`Its5Op`]s); this module only
//! encodes. Host-tested against `pinfold_gicv5model::its`.

use crate::gicv5::{poll, route_lpi, CpuRegs, TableMem};
use pinfold_hv::its5::Its5Op;

/// An ITS config frame, 32- and 64-bit accesses.
pub trait ItsMmio {
    fn read32(&mut self, offset: usize) -> u32;
    fn write32(&mut self, offset: usize, value: u32);
    fn write64(&mut self, offset: usize, value: u64);
}

/// Config frame offsets and fields.
pub mod reg {
    pub const IDR1: usize = 0x04;
    pub const IDR2: usize = 0x08;
    pub const CR0: usize = 0x80;
    pub const CR1: usize = 0x84;
    pub const DT_BASER: usize = 0xc0;
    pub const DT_CFGR: usize = 0xd0;
    pub const DIDR: usize = 0x100;
    pub const EIDR: usize = 0x108;
    pub const INV_EVENTR: usize = 0x10c;
    pub const INV_DEVICER: usize = 0x110;
    pub const STATUSR: usize = 0x120;
    pub const SYNCR: usize = 0x140;
    pub const SYNC_STATUSR: usize = 0x148;

    /// ITS_IDR1.DEVICEID_BITS [5:0], ITS_IDR2.EVENTID_BITS [4:0].
    pub const IDR1_DEVICEID_BITS: u32 = 0x3f;
    pub const IDR2_EVENTID_BITS: u32 = 0x1f;
    pub const CR0_ITSEN: u32 = 1;
    pub const CR0_IDLE: u32 = 1 << 1;
    /// ITS_CR1: DT_RA [6], ITT_RA [7], IC [5:4] = OC [3:2] = write-back
    /// (0b01), SH [1:0] = inner shareable (0b11).
    pub const CR1_CACHEABLE: u32 = (1 << 7) | (1 << 6) | (1 << 4) | (1 << 2) | 0b11;
    pub const STATUSR_IDLE: u32 = 1;
    pub const INV_I: u32 = 1 << 31;
    pub const INV_DEVICER_EVENTID_BITS_SHIFT: u32 = 1;
    pub const SYNCR_SYNC: u64 = 1 << 63;
    pub const ADDR_MASK: u64 = 0x00ff_ffff_ffff_fff8;

    /// Device table entry: VALID [0], ITT address [55:3] (unshifted),
    /// ITT STRUCTURE [58] (0: linear), EVENT_ID_BITS [63:59].
    pub const DTE_VALID: u64 = 1;
    pub const DTE_EVENT_ID_BITS_SHIFT: u32 = 59;
    /// ITT entry: LPI_ID [23:0], VALID [31].
    pub const ITTE_VALID: u64 = 1 << 31;
    pub const ITTE_LPI_ID: u64 = 0xff_ffff;
}

/// Bytes of a device table entry and of an ITT entry.
pub const ENTRY_BYTES: u64 = 8;

/// Why the ITS could not be brought up or an operation did not finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItsError {
    /// An IDLE bit never came up.
    Timeout(&'static str),
    /// A DeviceID beyond the device table, or EventID bits beyond
    /// ITS_IDR2's (the core checked; a wrong table size would be a bug).
    OutOfRange { device: u32, event_bits: u8 },
}

/// One ITS's config frame and its device table.
pub struct Gicv5Its<M: ItsMmio> {
    mmio: M,
    dt: u64,
    device_bits: u8,
    event_bits: u8,
}

impl<M: ItsMmio> Gicv5Its<M> {
    /// The ITS's DeviceID and EventID bits (ITS_IDR1, ITS_IDR2), read
    /// before it is brought up: the device table the platform allocates
    /// is sized from them ([`Gicv5Its::table_bytes`]).
    pub fn id_bits(mmio: &mut M) -> (u8, u8) {
        let d = mmio.read32(reg::IDR1) & reg::IDR1_DEVICEID_BITS;
        let e = mmio.read32(reg::IDR2) & reg::IDR2_EVENTID_BITS;
        (d as u8, e as u8)
    }

    /// Bytes of a linear device table of `device_bits`.
    pub const fn table_bytes(device_bits: u8) -> u64 {
        ENTRY_BYTES << device_bits
    }

    /// Bring the ITS up over the zeroed linear device table at `dt`
    /// ([`Gicv5Its::table_bytes`] of `device_bits`, no more than ITS_IDR1
    /// offers): disabled first if firmware left it on, then the table
    /// given and the ITS enabled.
    pub fn init(mut mmio: M, dt: u64, device_bits: u8) -> Result<Self, ItsError> {
        let (have, event_bits) = Self::id_bits(&mut mmio);
        if device_bits > have {
            return Err(ItsError::OutOfRange {
                device: 1 << device_bits.min(31),
                event_bits,
            });
        }
        let mut its = Gicv5Its {
            mmio,
            dt,
            device_bits,
            event_bits,
        };
        if its.mmio.read32(reg::CR0) & reg::CR0_ITSEN != 0 {
            its.mmio.write32(reg::CR0, 0);
            its.wait(reg::CR0, reg::CR0_IDLE, "ITS_CR0.IDLE")?;
        }
        its.mmio.write32(reg::CR1, reg::CR1_CACHEABLE);
        // Linear (STRUCTURE [16] = 0), L2SZ unused.
        its.mmio.write32(reg::DT_CFGR, u32::from(device_bits));
        its.mmio.write64(reg::DT_BASER, dt & reg::ADDR_MASK);
        its.mmio.write32(reg::CR0, reg::CR0_ITSEN);
        its.wait(reg::CR0, reg::CR0_IDLE, "ITS_CR0.IDLE")?;
        Ok(its)
    }

    pub fn device_bits(&self) -> u8 {
        self.device_bits
    }

    /// ITS_IDR2.EVENTID_BITS.
    pub fn event_bits(&self) -> u8 {
        self.event_bits
    }

    fn wait(&mut self, offset: usize, bit: u32, what: &'static str) -> Result<(), ItsError> {
        let mmio = &mut self.mmio;
        if poll(|| mmio.read32(offset) & bit != 0) {
            Ok(())
        } else {
            Err(ItsError::Timeout(what))
        }
    }

    fn check(&self, device: u32, event_bits: u8) -> Result<(), ItsError> {
        if u64::from(device) >> self.device_bits != 0 || event_bits > self.event_bits {
            return Err(ItsError::OutOfRange { device, event_bits });
        }
        Ok(())
    }

    /// Device `device`'s table entry: its linear ITT at `itt` (zeroed,
    /// 8 bytes an event) of `event_bits`, or (None) invalid; then the ITS
    /// told (ITS_DIDR, ITS_INV_DEVICER with the EventID bits) and waited.
    pub fn set_device(
        &mut self,
        mem: &mut impl TableMem,
        device: u32,
        itt: Option<(u64, u8)>,
    ) -> Result<(), ItsError> {
        let bits = itt.map_or(0, |(_, b)| b);
        self.check(device, bits)?;
        let dte = itt.map_or(0, |(pa, bits)| {
            reg::DTE_VALID
                | (pa & reg::ADDR_MASK)
                | (u64::from(bits) << reg::DTE_EVENT_ID_BITS_SHIFT)
        });
        mem.write64(self.dt + ENTRY_BYTES * u64::from(device), dte);
        self.mmio.write64(reg::DIDR, u64::from(device));
        self.mmio.write32(
            reg::INV_DEVICER,
            reg::INV_I | (u32::from(bits) << reg::INV_DEVICER_EVENTID_BITS_SHIFT),
        );
        self.wait(reg::STATUSR, reg::STATUSR_IDLE, "ITS_STATUSR.IDLE")
    }

    /// Event `event` of `device` (whose ITT is at `itt`) to physical LPI
    /// `lpi`, or (None) unmapped; then the ITS told (ITS_DIDR, ITS_EIDR,
    /// ITS_INV_EVENTR) and waited.
    pub fn set_event(
        &mut self,
        mem: &mut impl TableMem,
        device: u32,
        itt: u64,
        event: u32,
        lpi: Option<u32>,
    ) -> Result<(), ItsError> {
        self.check(device, 0)?;
        let itte = lpi.map_or(0, |l| reg::ITTE_VALID | (u64::from(l) & reg::ITTE_LPI_ID));
        mem.write64(itt + ENTRY_BYTES * u64::from(event), itte);
        self.mmio.write64(reg::DIDR, u64::from(device));
        self.mmio.write32(reg::EIDR, event & 0xffff);
        self.mmio.write32(reg::INV_EVENTR, reg::INV_I);
        self.wait(reg::STATUSR, reg::STATUSR_IDLE, "ITS_STATUSR.IDLE")
    }

    /// ITS_SYNCR for `device`: every event of it the ITS took before is
    /// in the IRS once ITS_SYNC_STATUSR.IDLE is back.
    pub fn sync(&mut self, device: u32) -> Result<(), ItsError> {
        self.mmio
            .write64(reg::SYNCR, reg::SYNCR_SYNC | u64::from(device));
        self.wait(
            reg::SYNC_STATUSR,
            reg::STATUSR_IDLE,
            "ITS_SYNC_STATUSR.IDLE",
        )
    }

    /// One step the core decided (`pinfold_hv::its5`), applied: table
    /// entries through `mem` and this frame, an LPI's target through the
    /// GIC instructions of the CPU running this (`regs`).
    pub fn apply(
        &mut self,
        mem: &mut impl TableMem,
        regs: &mut impl CpuRegs,
        op: &Its5Op,
    ) -> Result<(), ItsError> {
        match *op {
            Its5Op::Device {
                device,
                itt,
                event_bits,
            } => self.set_device(mem, device, itt.map(|pa| (pa, event_bits))),
            Its5Op::Event {
                device,
                itt,
                event,
                lpi,
            } => self.set_event(mem, device, itt, event, lpi),
            Its5Op::Target { lpi, iaffid } => {
                route_lpi(regs, lpi, iaffid);
                Ok(())
            }
            Its5Op::Pend { lpi, pending } => {
                crate::gicv5::pend_lpi(regs, lpi, pending);
                Ok(())
            }
            Its5Op::Sync { device } => self.sync(device),
        }
    }
}

/// The config frame through the EL2 identity map, for the platform: the
/// IRS's frame type (`gicv5::hw::IrsFrame`, the same volatile accesses to
/// a frame the host description names), as an ITS frame.
#[cfg(target_arch = "aarch64")]
pub mod hw {
    use super::ItsMmio;
    pub use crate::gicv5::hw::IrsFrame as ItsFrame;
    use crate::gicv5::IrsMmio;

    impl ItsMmio for ItsFrame {
        fn read32(&mut self, offset: usize) -> u32 {
            IrsMmio::read32(self, offset)
        }
        fn write32(&mut self, offset: usize, value: u32) {
            IrsMmio::write32(self, offset, value)
        }
        fn write64(&mut self, offset: usize, value: u64) {
            IrsMmio::write64(self, offset, value)
        }
    }
}

#[cfg(test)]
mod tests;
