//! The emulated GICv3 redistributor of one vCPU: its RD_base and SGI_base frames, SGIs and PPIs.
//!
//! Owned by its vCPU and touched only on that vCPU's physical CPU, so it
//! needs no lock. Pass-through PPIs (the EL1 timers) are that physical CPU's
//! own PPIs: the guest's enable, pending and active writes for them are
//! handed back as [`RedistAction`]s for the caller to apply to *this CPU's*
//! physical redistributor, again without any lock shared between CPUs.
//! Their priority stays virtual: it only ever reaches the list register.
//!
//! GICD_CTLR.EnableGrp1 is not consulted for SGIs and PPIs: that would need
//! the partition's distributor lock on this lock-free path, and Linux enables
//! the distributor before it configures any SGI or PPI and never disables it.
//! A caller that wants the architectural gate can check `VDist::enabled`.
//!
//! LPIs (a partition with a virtual ITS, [`VRedist::with_lpis`]):
//! GICR_TYPER.PLPIS = 1, GICR_CTLR.EnableLPIs, GICR_PROPBASER and
//! GICR_PENDBASER (writable while EnableLPIs = 0, as the architecture asks).
//! The guest's LPI property table and pending table are its own RAM and
//! are used as the architecture describes them: a vLPI that arrives
//! ([`VRedist::lpi_arrived`]) is injected with the priority of its
//! property byte when that byte's Enable bit is set, else its bit in the
//! guest's pending table is set; the guest's INV/INVALL (its vITS hands
//! them over) re-read the property byte and inject what was kept pending
//! ([`VRedist::lpi_recheck`]). Each arrival reads one byte (and may write
//! one): bounded by the IDbits the guest programmed, at most
//! [`LPI_ID_BITS`], and by the partition's RAM.
//!
//! Offsets are relative to this vCPU's 128 KiB (RD_base at 0, SGI_base at
//! 0x1_0000). Accesses that are not naturally aligned, or not of a width the
//! register supports (32-bit everywhere; also 8-bit for GICR_IPRIORITYR<n>,
//! 64-bit for GICR_TYPER and the LPI base registers), read as zero and are
//! ignored on write.

use super::lr::VirtIrq;
use super::{aligned, id_register, packed_affinity, read_bytes, IIDR, PRIORITY_MASK};
use crate::addr::Ipa;
use crate::hypercall::GuestMemory;

/// Where the SGI_base frame starts within a vCPU's redistributor.
pub const SGI_BASE: u64 = 0x1_0000;
/// Size of both frames together (GICv3 without VLPIs).
pub const REDIST_SIZE: u64 = 0x2_0000;

// RD_base registers (GICv3 spec 12.10).
const GICR_CTLR: u64 = 0x0000;
const GICR_IIDR: u64 = 0x0004;
const GICR_TYPER: u64 = 0x0008;
const GICR_TYPER_HIGH: u64 = 0x000C;
const GICR_STATUSR: u64 = 0x0010;
const GICR_WAKER: u64 = 0x0014;
const GICR_PROPBASER: u64 = 0x0070;
const GICR_PENDBASER: u64 = 0x0078;

// SGI_base registers, offsets within that frame.
const GICR_IGROUPR0: u64 = 0x0080;
const GICR_ISENABLER0: u64 = 0x0100;
const GICR_ICENABLER0: u64 = 0x0180;
const GICR_ISPENDR0: u64 = 0x0200;
const GICR_ICPENDR0: u64 = 0x0280;
const GICR_ISACTIVER0: u64 = 0x0300;
const GICR_ICACTIVER0: u64 = 0x0380;
const GICR_IPRIORITYR0: u64 = 0x0400;
const GICR_IPRIORITYR_END: u64 = GICR_IPRIORITYR0 + 32;
const GICR_ICFGR0: u64 = 0x0C00;
const GICR_ICFGR1: u64 = 0x0C04;

/// GICR_WAKER.ProcessorSleep and .ChildrenAsleep (GICv3 spec 12.11.41).
const WAKER_PROCESSOR_SLEEP: u32 = 1 << 1;
const WAKER_CHILDREN_ASLEEP: u32 = 1 << 2;
/// GICR_TYPER.Last (bit 4): Linux stops walking the redistributor region here.
const TYPER_LAST: u64 = 1 << 4;
/// SGIs are always edge-triggered: Int_config[1] set in every field of ICFGR0.
const ICFGR0_SGIS_EDGE: u32 = 0xAAAA_AAAA;
/// The writable bit of each 2-bit ICFGR field (Int_config[1]; bit 0 is RES0).
const ICFGR_CONFIG_BITS: u32 = 0xAAAA_AAAA;
/// INTIDs 16..31 (PPIs) as a bitmask of GICR_ISENABLER0.
const PPI_BITS: u32 = 0xFFFF_0000;

/// INTID bits of the LPIs a guest may use (its vITS's GITS_TYPER.ID_bits).
pub const LPI_ID_BITS: u8 = 16;
const LPI_BASE: u32 = 8192;
/// GICR_TYPER.PLPIS (bit 0).
const TYPER_PLPIS: u64 = 1 << 0;
/// GICR_CTLR.EnableLPIs (bit 0).
const CTLR_ENABLE_LPIS: u64 = 1 << 0;
/// GICR_PROPBASER fields kept: OuterCache [58:56], Physical_Address
/// [51:12], Shareability [11:10], InnerCache [9:7], IDbits [4:0].
const PROPBASER_KEPT: u64 = 7 << 56 | 0x000F_FFFF_FFFF_F000 | 3 << 10 | 7 << 7 | 0x1F;
/// GICR_PENDBASER fields kept: OuterCache, Physical_Address [51:16],
/// Shareability, InnerCache (PTZ [62] reads as zero).
const PENDBASER_KEPT: u64 = 7 << 56 | 0x000F_FFFF_FFFF_0000 | 3 << 10 | 7 << 7;

/// What became of a vLPI that arrived for this vCPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LpiDelivery {
    /// Inject it now.
    Inject(VirtIrq),
    /// Disabled in the guest's property table: its pending bit is set in
    /// the guest's pending table, injected when an INV finds it enabled.
    Pended,
    /// Not deliverable: LPIs off in GICR_CTLR, the vINTID beyond the
    /// guest's IDbits, or its tables not in its RAM. Counted by the caller.
    Dropped,
}

/// What the caller must do after a redistributor access.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RedistAction {
    /// Make this interrupt pending for this vCPU (LrManager::inject).
    Inject(VirtIrq),
    /// Withdraw a pending, not yet acknowledged instance (LrManager::retract).
    Retract(u32),
    /// Enable or disable a pass-through PPI in this CPU's physical redistributor.
    PhysPpiEnable { intid: u32, enable: bool },
    /// Set or clear the pending state of a pass-through PPI on this CPU.
    PhysPpiPending { intid: u32, pending: bool },
    /// Set or clear the active state of a pass-through PPI on this CPU.
    PhysPpiActive { intid: u32, active: bool },
    /// The guest set EnableLPIs (once per boot of the vCPU) with this
    /// GICR_PROPBASER: with direct vLPIs the caller makes the vCPU's vPE
    /// resident on this CPU (`its::lpis_on`).
    LpisOn { propbaser: u64 },
}

/// The redistributor of one vCPU.
#[derive(Clone, Debug)]
pub struct VRedist {
    vcpu_index: usize,
    mpidr: u64,
    last: bool,
    /// Bit n set: INTID n is a pass-through PPI of this physical CPU.
    passthrough: u32,
    /// GICR_ISENABLER0 as the guest sees it.
    enabled: u32,
    /// SGIs and emulated PPIs made pending while disabled; injected when enabled.
    pending: u32,
    /// Active state the guest wrote for software interrupts. The true active
    /// state of an injected interrupt lives in the list registers; this only
    /// makes GICR_ISACTIVER0 read back what was written.
    active: u32,
    priority: [u8; 32],
    /// GICR_ICFGR1 (PPI trigger modes), writable bits only.
    icfgr1: u32,
    processor_sleep: bool,
    /// This partition has a virtual ITS: GICR_TYPER.PLPIS = 1.
    lpis: bool,
    enable_lpis: bool,
    propbaser: u64,
    pendbaser: u64,
}

impl VRedist {
    /// `passthrough_ppis` is a bitmask indexed by INTID (bit 27 = the
    /// virtual timer); bits of SGIs (0..15) are ignored. The caller must
    /// keep those physical PPIs disabled until the guest enables them.
    pub fn new(vcpu_index: usize, mpidr: u64, last: bool, passthrough_ppis: u32) -> Self {
        VRedist {
            vcpu_index,
            mpidr,
            last,
            passthrough: passthrough_ppis & PPI_BITS,
            enabled: 0,
            pending: 0,
            active: 0,
            priority: [0; 32],
            icfgr1: 0,
            processor_sleep: true,
            lpis: false,
            enable_lpis: false,
            propbaser: 0,
            pendbaser: 0,
        }
    }

    /// The guest's configuration of its 16 SGIs as a GICv4.1 VSGI command
    /// carries it (`vgic::v41::reconfigure`): enable, priority, and group
    /// 1 always (GICR_IGROUPR0 is RAO/WI here).
    pub fn sgi_configs(&self) -> crate::vgic::v41::SgiCfgs {
        core::array::from_fn(|n| crate::vgic::v41::SgiCfg {
            enabled: self.enabled & (1 << n) != 0,
            priority: self.priority[n],
            group1: true,
        })
    }

    /// The same redistributor reporting LPIs (the partition has a vITS).
    pub fn with_lpis(mut self) -> Self {
        self.lpis = true;
        self
    }

    /// GICR_CTLR.EnableLPIs.
    pub fn lpis_enabled(&self) -> bool {
        self.enable_lpis
    }

    /// The pass-through PPIs, as given to [`VRedist::new`] (SGI bits cleared).
    pub fn passthrough_ppis(&self) -> u32 {
        self.passthrough
    }

    /// Back to the reset state (the vCPU is reset). Pass-through PPIs become
    /// virtually disabled; the caller disables them physically as well.
    pub fn reset(&mut self) {
        let lpis = self.lpis;
        *self = VRedist::new(self.vcpu_index, self.mpidr, self.last, self.passthrough);
        self.lpis = lpis;
    }

    /// GICR_TYPER (GICv3 spec 12.11.34): Affinity_Value [63:32],
    /// Processor_Number [23:8], Last [4]; PPInum = 0 (16 PPIs), PLPIS [0]
    /// when the partition has a vITS, no VLPIs, so Linux steps two 64 KiB
    /// frames to the next redistributor.
    fn typer(&self) -> u64 {
        let processor_number = (self.vcpu_index as u64 & 0xFFFF) << 8;
        let last = if self.last { TYPER_LAST } else { 0 };
        let plpis = if self.lpis { TYPER_PLPIS } else { 0 };
        u64::from(packed_affinity(self.mpidr)) << 32 | processor_number | last | plpis
    }

    fn waker(&self) -> u32 {
        // ChildrenAsleep follows ProcessorSleep at once: there is no real
        // interface to quiesce, and Linux polls ChildrenAsleep after writing
        // ProcessorSleep in both directions (gic_enable_redist()).
        if self.processor_sleep {
            WAKER_PROCESSOR_SLEEP | WAKER_CHILDREN_ASLEEP
        } else {
            0
        }
    }

    pub fn read(&self, offset: u64, width: u8) -> u64 {
        if !aligned(offset, width) || offset >= REDIST_SIZE {
            return 0;
        }
        if offset >= SGI_BASE {
            return self.read_sgi_frame(offset - SGI_BASE, width);
        }
        match (offset, width) {
            // RWP = 0: writes take effect at once.
            (GICR_CTLR, 4) => u64::from(self.enable_lpis) * CTLR_ENABLE_LPIS,
            (GICR_IIDR, 4) => u64::from(IIDR),
            (GICR_TYPER, 8) => self.typer(),
            (GICR_TYPER, 4) => self.typer() & 0xFFFF_FFFF,
            (GICR_TYPER_HIGH, 4) => self.typer() >> 32,
            (GICR_WAKER, 4) => u64::from(self.waker()),
            (GICR_STATUSR, 4) => 0,
            (GICR_PROPBASER, 8) => self.propbaser,
            (GICR_PROPBASER, 4) => self.propbaser & 0xFFFF_FFFF,
            (GICR_PENDBASER, 8) => self.pendbaser,
            (GICR_PENDBASER, 4) => self.pendbaser & 0xFFFF_FFFF,
            (0x74 | 0x7C, 4) => self.read(offset - 4, 8) >> 32,
            (_, 4) => id_register(offset).map_or(0, u64::from),
            _ => 0,
        }
    }

    /// [`VRedist::read`], with the pending and active bits of the
    /// pass-through PPIs taken from `hw`: what the physical redistributor and
    /// the list registers hold for them (the emulated state knows nothing of
    /// a timer that fired). Without this a guest polling GICR_ISPENDR0 for
    /// its timer interrupt would never see it pending.
    pub fn read_with_hw(&self, offset: u64, width: u8, hw: crate::irqchip::PpiBits) -> u64 {
        let value = self.read(offset, width);
        if width != 4 {
            return value;
        }
        let overlay = match offset.checked_sub(SGI_BASE) {
            Some(GICR_ISPENDR0 | GICR_ICPENDR0) => hw.pending,
            Some(GICR_ISACTIVER0 | GICR_ICACTIVER0) => hw.active,
            _ => 0,
        };
        value | u64::from(overlay & self.passthrough)
    }

    fn read_sgi_frame(&self, offset: u64, width: u8) -> u64 {
        if (GICR_IPRIORITYR0..GICR_IPRIORITYR_END).contains(&offset) {
            return match width {
                1 | 4 => read_bytes(&self.priority, (offset - GICR_IPRIORITYR0) as usize, width),
                _ => 0,
            };
        }
        if width != 4 {
            return 0;
        }
        let value = match offset {
            GICR_IGROUPR0 => u32::MAX, // everything Group 1 (RAO/WI)
            GICR_ISENABLER0 | GICR_ICENABLER0 => self.enabled,
            // Pass-through PPIs: their pending and active state is in the
            // physical redistributor, which the caller may overlay.
            GICR_ISPENDR0 | GICR_ICPENDR0 => self.pending & !self.passthrough,
            GICR_ISACTIVER0 | GICR_ICACTIVER0 => self.active & !self.passthrough,
            GICR_ICFGR0 => ICFGR0_SGIS_EDGE,
            GICR_ICFGR1 => self.icfgr1,
            _ => 0, // IGRPMODR0, NSACR and reserved: RAZ/WI
        };
        u64::from(value)
    }

    pub fn write(
        &mut self,
        offset: u64,
        width: u8,
        value: u64,
        out: &mut impl FnMut(RedistAction),
    ) {
        if !aligned(offset, width) || offset >= REDIST_SIZE {
            return;
        }
        if offset >= SGI_BASE {
            self.write_sgi_frame(offset - SGI_BASE, width, value, out);
            return;
        }
        match (offset, width) {
            (GICR_WAKER, 4) => self.processor_sleep = value as u32 & WAKER_PROCESSOR_SLEEP != 0,
            // EnableLPIs: only with LPIs; once set it stays set (clearing
            // it is IMPLEMENTATION DEFINED; this one does not allow it).
            (GICR_CTLR, 4) if self.lpis && !self.enable_lpis && value & CTLR_ENABLE_LPIS != 0 => {
                self.enable_lpis = true;
                out(RedistAction::LpisOn {
                    propbaser: self.propbaser,
                });
            }
            // The tables' registers while LPIs are off (UNPREDICTABLE
            // after: ignored); 32-bit halves as Linux never uses, too.
            (GICR_PROPBASER | GICR_PENDBASER | 0x74 | 0x7C, 4 | 8)
                if self.lpis && !self.enable_lpis =>
            {
                let (reg, value) = match (offset, width) {
                    (0x74 | 0x7C, _) => {
                        let reg = offset - 4;
                        (reg, self.read(reg, 8) & 0xFFFF_FFFF | value << 32)
                    }
                    (_, 4) => (
                        offset,
                        self.read(offset, 8) & !0xFFFF_FFFF | value & 0xFFFF_FFFF,
                    ),
                    _ => (offset, value),
                };
                if reg == GICR_PROPBASER {
                    self.propbaser = value & PROPBASER_KEPT;
                } else {
                    self.pendbaser = value & PENDBASER_KEPT;
                }
            }
            // GICR_STATUSR and the read-only ones ignore writes.
            _ => {}
        }
    }

    /// The guest's LPI INTID bits: PROPBASER.IDbits + 1, at most
    /// [`LPI_ID_BITS`].
    fn lpi_id_bits(&self) -> u8 {
        ((self.propbaser & 0x1F) as u8 + 1).min(LPI_ID_BITS)
    }

    /// The guest addresses of `vintid`'s property byte and pending-table
    /// byte, or None when it is no LPI the guest configured.
    fn lpi_bytes(&self, vintid: u32) -> Option<(u64, u64, u8)> {
        if !self.enable_lpis || vintid < LPI_BASE || vintid >> self.lpi_id_bits() != 0 {
            return None;
        }
        let prop = (self.propbaser & 0x000F_FFFF_FFFF_F000) + u64::from(vintid - LPI_BASE);
        let pend = (self.pendbaser & 0x000F_FFFF_FFFF_0000) + u64::from(vintid / 8);
        Some((prop, pend, 1 << (vintid % 8)))
    }

    fn read_byte(mem: &impl GuestMemory, ipa: u64) -> Option<u8> {
        let mut b = [0];
        mem.read(Ipa(ipa), &mut b).ok().map(|()| b[0])
    }

    /// A vLPI arrived for this vCPU (its physical LPI was taken, or a
    /// guest INT): inject it, keep it pending in the guest's pending
    /// table, or drop it (module comment). `mem` is the partition's RAM.
    pub fn lpi_arrived(&self, vintid: u32, mem: &mut impl GuestMemory) -> LpiDelivery {
        let Some((prop, pend, bit)) = self.lpi_bytes(vintid) else {
            return LpiDelivery::Dropped;
        };
        let Some(config) = Self::read_byte(mem, prop) else {
            return LpiDelivery::Dropped;
        };
        if config & 1 != 0 {
            return LpiDelivery::Inject(VirtIrq::soft(vintid, config & 0xFC & PRIORITY_MASK));
        }
        match Self::read_byte(mem, pend) {
            Some(b) if mem.write(Ipa(pend), &[b | bit]).is_ok() => LpiDelivery::Pended,
            _ => LpiDelivery::Dropped,
        }
    }

    /// The guest invalidated `vintid`'s configuration (INV, or INVALL for
    /// each of its vCPU's mapped vINTIDs): if it is now enabled and was
    /// kept pending, its pending bit is cleared and it is to be injected.
    pub fn lpi_recheck(&self, vintid: u32, mem: &mut impl GuestMemory) -> Option<VirtIrq> {
        let (prop, pend, bit) = self.lpi_bytes(vintid)?;
        let config = Self::read_byte(mem, prop)?;
        let pending = Self::read_byte(mem, pend)?;
        if config & 1 == 0 || pending & bit == 0 {
            return None;
        }
        mem.write(Ipa(pend), &[pending & !bit]).ok()?;
        Some(VirtIrq::soft(vintid, config & 0xFC & PRIORITY_MASK))
    }

    fn write_sgi_frame(
        &mut self,
        offset: u64,
        width: u8,
        value: u64,
        out: &mut impl FnMut(RedistAction),
    ) {
        if (GICR_IPRIORITYR0..GICR_IPRIORITYR_END).contains(&offset) {
            if matches!(width, 1 | 4) {
                let first = (offset - GICR_IPRIORITYR0) as usize;
                for i in 0..usize::from(width) {
                    self.priority[first + i] = (value >> (8 * i)) as u8 & PRIORITY_MASK;
                }
            }
            return;
        }
        if width != 4 {
            return;
        }
        let bits = value as u32;
        match offset {
            GICR_ISENABLER0 => self.set_enable(bits, true, out),
            GICR_ICENABLER0 => self.set_enable(bits, false, out),
            GICR_ISPENDR0 => self.set_pending(bits, out),
            GICR_ICPENDR0 => self.clear_pending(bits, out),
            GICR_ISACTIVER0 => self.write_active(bits, true, out),
            GICR_ICACTIVER0 => self.write_active(bits, false, out),
            GICR_ICFGR1 => self.icfgr1 = bits & ICFGR_CONFIG_BITS,
            _ => {} // IGROUPR0 (RAO/WI), ICFGR0 (SGIs are edge), IGRPMODR0, NSACR, reserved
        }
    }

    fn set_enable(&mut self, bits: u32, enable: bool, out: &mut impl FnMut(RedistAction)) {
        let changed = if enable {
            bits & !self.enabled
        } else {
            bits & self.enabled
        };
        if enable {
            self.enabled |= bits;
        } else {
            self.enabled &= !bits;
        }
        for intid in set_bits(changed) {
            if self.passthrough & bit(intid) != 0 {
                out(RedistAction::PhysPpiEnable { intid, enable });
            } else if enable && self.pending & bit(intid) != 0 {
                self.pending &= !bit(intid);
                out(RedistAction::Inject(self.soft_irq(intid)));
            }
        }
    }

    fn set_pending(&mut self, bits: u32, out: &mut impl FnMut(RedistAction)) {
        for intid in set_bits(bits) {
            if self.passthrough & bit(intid) != 0 {
                out(RedistAction::PhysPpiPending {
                    intid,
                    pending: true,
                });
            } else if self.enabled & bit(intid) != 0 {
                out(RedistAction::Inject(self.soft_irq(intid)));
            } else {
                self.pending |= bit(intid);
            }
        }
    }

    fn clear_pending(&mut self, bits: u32, out: &mut impl FnMut(RedistAction)) {
        for intid in set_bits(bits) {
            if self.passthrough & bit(intid) != 0 {
                out(RedistAction::PhysPpiPending {
                    intid,
                    pending: false,
                });
            } else {
                self.pending &= !bit(intid);
                out(RedistAction::Retract(intid));
            }
        }
    }

    fn write_active(&mut self, bits: u32, active: bool, out: &mut impl FnMut(RedistAction)) {
        for intid in set_bits(bits & self.passthrough) {
            out(RedistAction::PhysPpiActive { intid, active });
        }
        let soft = bits & !self.passthrough;
        if active {
            self.active |= soft;
        } else {
            self.active &= !soft;
        }
    }

    fn soft_irq(&self, intid: u32) -> VirtIrq {
        VirtIrq::soft(intid, self.priority[intid as usize])
    }

    /// An SGI from a vCPU of this partition. Returns the interrupt to inject
    /// now if the guest enabled it; otherwise remembers it as pending until
    /// GICR_ISENABLER0 enables it. Several SGIs of the same INTID collapse
    /// into one, as GICv3 with affinity routing does.
    pub fn raise_sgi(&mut self, intid: u32) -> Option<VirtIrq> {
        if intid >= 16 {
            return None;
        }
        if self.enabled & bit(intid) != 0 {
            Some(self.soft_irq(intid))
        } else {
            self.pending |= bit(intid);
            None
        }
    }

    /// A pass-through PPI fired on this physical CPU: the HW-linked virtual
    /// interrupt to inject, with the guest's priority, if the guest enabled it.
    /// The pass-through PPIs the guest has enabled and all priorities, for
    /// the per-CPU mirror the timer path reads (`CpuState::hw_ppis`).
    pub fn hw_ppis(&self) -> crate::percpu::HwPpis {
        crate::percpu::HwPpis {
            enabled: self.passthrough & self.enabled,
            priority: self.priority,
        }
    }
}

const fn bit(intid: u32) -> u32 {
    1 << intid
}

/// The INTIDs whose bits are set in a 32-bit SGI/PPI bank.
fn set_bits(bits: u32) -> impl Iterator<Item = u32> {
    crate::bits::ones(u64::from(bits))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::{PPI_PTIMER, PPI_VTIMER};
    use std::vec::Vec;

    const TIMERS: u32 = 1 << PPI_VTIMER | 1 << PPI_PTIMER;

    fn redist() -> VRedist {
        VRedist::new(2, 0x0000_0001_0002_0304 | 1 << 31, true, TIMERS)
    }

    fn write(r: &mut VRedist, offset: u64, width: u8, value: u64) -> Vec<RedistAction> {
        let mut actions = Vec::new();
        r.write(offset, width, value, &mut |a| actions.push(a));
        actions
    }

    fn sgi(offset: u64) -> u64 {
        SGI_BASE + offset
    }

    #[test]
    fn typer_reports_affinity_processor_number_and_last() {
        let r = redist();

        let typer = r.read(GICR_TYPER, 8);

        assert_eq!(typer, 0x0102_0304 << 32 | 2 << 8 | 1 << 4);
    }

    #[test]
    fn typer_halves_match_the_64_bit_register() {
        let r = VRedist::new(5, 0x0100, false, 0);

        let (low, high) = (r.read(GICR_TYPER, 4), r.read(GICR_TYPER_HIGH, 4));

        assert_eq!((low, high), (5 << 8, 0x0000_0100));
    }

    #[test]
    fn pidr2_reports_gicv3() {
        assert_eq!(redist().read(0xFFE8, 4) & 0xF0, 0x30);
    }

    #[test]
    fn waker_handshake_wakes_when_processor_sleep_cleared() {
        let mut r = redist();
        let before = r.read(GICR_WAKER, 4) as u32;

        write(
            &mut r,
            GICR_WAKER,
            4,
            u64::from(before & !WAKER_PROCESSOR_SLEEP),
        );

        assert_eq!(before & WAKER_CHILDREN_ASLEEP, WAKER_CHILDREN_ASLEEP);
        assert_eq!(r.read(GICR_WAKER, 4) as u32 & WAKER_CHILDREN_ASLEEP, 0);
    }

    #[test]
    fn linux_cpu_init_enables_sgis_and_resets_timer_state() {
        let mut r = redist();
        let mut actions = Vec::new();
        // gic_cpu_init(): IGROUPR0, then gic_cpu_config(): ICACTIVER0,
        // ICENABLER0, IPRIORITYR0..7, ISENABLER0 for the SGIs.
        actions.extend(write(&mut r, sgi(GICR_IGROUPR0), 4, 0xFFFF_FFFF));
        actions.extend(write(&mut r, sgi(GICR_ICACTIVER0), 4, 0xFFFF_FFFF));
        actions.extend(write(&mut r, sgi(GICR_ICENABLER0), 4, 0xFFFF_0000));
        for i in 0..8 {
            actions.extend(write(&mut r, sgi(GICR_IPRIORITYR0 + 4 * i), 4, 0xA0A0_A0A0));
        }
        actions.extend(write(&mut r, sgi(GICR_ISENABLER0), 4, 0x0000_FFFF));

        assert_eq!(
            actions,
            [
                RedistAction::PhysPpiActive {
                    intid: 27,
                    active: false
                },
                RedistAction::PhysPpiActive {
                    intid: 30,
                    active: false
                },
            ]
        );
        assert_eq!(r.read(sgi(GICR_ISENABLER0), 4), 0xFFFF);
        assert_eq!(r.read(sgi(GICR_IGROUPR0), 4), 0xFFFF_FFFF);
        assert_eq!(r.read(sgi(GICR_IPRIORITYR0 + 0x1C), 4), 0xA0A0_A0A0);
    }

    #[test]
    fn enabling_a_passthrough_ppi_enables_it_physically_once() {
        let mut r = redist();

        let first = write(&mut r, sgi(GICR_ISENABLER0), 4, 1 << PPI_VTIMER);
        let again = write(&mut r, sgi(GICR_ISENABLER0), 4, 1 << PPI_VTIMER);
        let off = write(&mut r, sgi(GICR_ICENABLER0), 4, 1 << PPI_VTIMER);

        assert_eq!(
            first,
            [RedistAction::PhysPpiEnable {
                intid: 27,
                enable: true
            }]
        );
        assert!(again.is_empty());
        assert_eq!(
            off,
            [RedistAction::PhysPpiEnable {
                intid: 27,
                enable: false
            }]
        );
    }

    #[test]
    fn hw_ppis_link_the_timer_with_the_guests_priority() {
        let mut r = redist();
        write(&mut r, sgi(GICR_IPRIORITYR0 + 27), 1, 0x48);
        write(&mut r, sgi(GICR_ISENABLER0), 4, 1 << PPI_VTIMER);

        let irq = r.hw_ppis().fired(PPI_VTIMER);

        assert_eq!(irq, Some(VirtIrq::hw_linked(27, 0x48)));
    }

    #[test]
    fn hw_ppis_fire_nothing_disabled_not_passthrough_or_out_of_range() {
        let mut r = redist();
        write(&mut r, sgi(GICR_ISENABLER0), 4, 1 << 23);

        assert_eq!(r.hw_ppis().fired(PPI_VTIMER), None);
        assert_eq!(r.hw_ppis().fired(23), None);
        write(&mut r, sgi(GICR_ISENABLER0), 4, 1 << PPI_VTIMER);
        assert_eq!(r.hw_ppis().fired(32 + PPI_VTIMER), None);
    }

    #[test]
    fn raise_sgi_injects_at_once_when_enabled() {
        let mut r = redist();
        write(&mut r, sgi(GICR_IPRIORITYR0), 4, 0x0000_0080);
        write(&mut r, sgi(GICR_ISENABLER0), 4, 1);

        assert_eq!(r.raise_sgi(0), Some(VirtIrq::soft(0, 0x80)));
    }

    #[test]
    fn raise_sgi_while_disabled_is_injected_on_enable() {
        let mut r = redist();

        let now = r.raise_sgi(3);
        let pending = r.read(sgi(GICR_ISPENDR0), 4);
        let actions = write(&mut r, sgi(GICR_ISENABLER0), 4, 1 << 3);

        assert_eq!(now, None);
        assert_eq!(pending, 1 << 3);
        assert_eq!(actions, [RedistAction::Inject(VirtIrq::soft(3, 0))]);
        assert_eq!(r.read(sgi(GICR_ISPENDR0), 4), 0);
    }

    #[test]
    fn icpendr_retracts_a_software_interrupt() {
        let mut r = redist();
        r.raise_sgi(4);

        let actions = write(&mut r, sgi(GICR_ICPENDR0), 4, 1 << 4);

        assert_eq!(actions, [RedistAction::Retract(4)]);
        assert_eq!(r.read(sgi(GICR_ISPENDR0), 4), 0);
    }

    #[test]
    fn pending_and_active_writes_to_passthrough_ppis_go_to_hardware() {
        let mut r = redist();

        let mut actions = write(&mut r, sgi(GICR_ISPENDR0), 4, 1 << PPI_PTIMER);
        actions.extend(write(&mut r, sgi(GICR_ISACTIVER0), 4, 1 << PPI_PTIMER));

        assert_eq!(
            actions,
            [
                RedistAction::PhysPpiPending {
                    intid: 30,
                    pending: true
                },
                RedistAction::PhysPpiActive {
                    intid: 30,
                    active: true
                },
            ]
        );
    }

    #[test]
    fn icfgr0_is_read_only_edge_and_icfgr1_keeps_config_bits() {
        let mut r = redist();

        write(&mut r, sgi(GICR_ICFGR0), 4, 0);
        write(&mut r, sgi(GICR_ICFGR1), 4, 0xFFFF_FFFF);

        assert_eq!(r.read(sgi(GICR_ICFGR0), 4), 0xAAAA_AAAA);
        assert_eq!(r.read(sgi(GICR_ICFGR1), 4), 0xAAAA_AAAA);
    }

    #[test]
    fn priority_bytes_keep_the_upper_five_bits() {
        let mut r = redist();

        write(&mut r, sgi(GICR_IPRIORITYR0 + 5), 1, 0xA7);

        assert_eq!(r.read(sgi(GICR_IPRIORITYR0 + 5), 1), 0xA0);
        assert_eq!(r.read(sgi(GICR_IPRIORITYR0 + 4), 4), 0x0000_A000);
    }

    #[test]
    fn misaligned_or_wrong_width_access_is_raz_wi() {
        let mut r = redist();

        let actions = write(&mut r, sgi(GICR_ISENABLER0 + 1), 1, 0xFF);
        write(&mut r, sgi(GICR_ISENABLER0), 2, 0xFFFF);

        assert!(actions.is_empty());
        assert_eq!(r.read(sgi(GICR_ISENABLER0), 4), 0);
        assert_eq!(r.read(GICR_TYPER + 2, 2), 0);
    }

    #[test]
    fn reset_disables_everything_and_puts_the_redistributor_to_sleep() {
        let mut r = redist();
        write(&mut r, sgi(GICR_ISENABLER0), 4, 0xFFFF_FFFF);
        write(&mut r, GICR_WAKER, 4, 0);
        r.raise_sgi(1);

        r.reset();

        assert_eq!(r.read(sgi(GICR_ISENABLER0), 4), 0);
        assert_eq!(r.read(sgi(GICR_ISPENDR0), 4), 0);
        assert_eq!(r.read(GICR_WAKER, 4), 0b110);
        assert_eq!(r.passthrough_ppis(), TIMERS);
    }

    /// A partition's RAM: 1 MiB at 0x4000_0000.
    struct Ram(Vec<u8>);
    const RAM: u64 = 0x4000_0000;
    impl GuestMemory for Ram {
        fn ram_range(&self) -> crate::addr::IpaRange {
            crate::addr::IpaRange {
                base: Ipa(RAM),
                size: self.0.len() as u64,
            }
        }
        fn write(
            &mut self,
            ipa: Ipa,
            bytes: &[u8],
        ) -> Result<(), crate::hypercall::GuestMemoryFault> {
            let at = ipa
                .0
                .checked_sub(RAM)
                .ok_or(crate::hypercall::GuestMemoryFault)? as usize;
            let dst = self
                .0
                .get_mut(at..at + bytes.len())
                .ok_or(crate::hypercall::GuestMemoryFault)?;
            dst.copy_from_slice(bytes);
            Ok(())
        }
        fn read(&self, ipa: Ipa, out: &mut [u8]) -> Result<(), crate::hypercall::GuestMemoryFault> {
            let at = ipa
                .0
                .checked_sub(RAM)
                .ok_or(crate::hypercall::GuestMemoryFault)? as usize;
            out.copy_from_slice(
                self.0
                    .get(at..at + out.len())
                    .ok_or(crate::hypercall::GuestMemoryFault)?,
            );
            Ok(())
        }
    }

    const PROP: u64 = RAM + 0x1_0000;
    const PEND: u64 = RAM + 0x3_0000;

    /// A redistributor with LPIs, set up as Linux does: 16 ID bits.
    fn lpi_redist() -> VRedist {
        let mut r = redist().with_lpis();
        let mut out = |_| panic!("no action");
        r.write(GICR_PROPBASER, 8, PROP | 1 << 10 | 15, &mut out);
        r.write(GICR_PENDBASER, 8, PEND | 1 << 62, &mut out);
        let mut acts = Vec::new();
        r.write(GICR_CTLR, 4, 1, &mut |a| acts.push(a));
        assert_eq!(
            acts,
            [RedistAction::LpisOn {
                propbaser: PROP | 1 << 10 | 15
            }]
        );
        r
    }

    #[test]
    fn enable_lpis_is_announced_once_and_only_with_a_vits() {
        let mut r = lpi_redist();
        let mut acts = Vec::new();
        r.write(GICR_CTLR, 4, 1, &mut |a| acts.push(a));
        assert!(acts.is_empty(), "announced twice: {acts:?}");
        let mut plain = redist();
        plain.write(GICR_CTLR, 4, 1, &mut |a| acts.push(a));
        assert!(acts.is_empty(), "announced without LPIs: {acts:?}");
    }

    #[test]
    fn lpis_are_reported_and_their_registers_kept_only_with_a_vits() {
        let mut plain = redist();
        assert_eq!(plain.read(GICR_TYPER, 8) & 1, 0);
        plain.write(GICR_PROPBASER, 8, PROP | 15, &mut |_| {});
        plain.write(GICR_CTLR, 4, 1, &mut |_| {});
        assert_eq!(plain.read(GICR_PROPBASER, 8), 0);
        assert_eq!(plain.read(GICR_CTLR, 4), 0);

        let r = lpi_redist();
        assert_eq!(r.read(GICR_TYPER, 8) & 1, 1);
        assert_eq!(r.read(GICR_CTLR, 4), 1);
        assert_eq!(r.read(GICR_PROPBASER, 8), PROP | 1 << 10 | 15);
        // PTZ reads as zero.
        assert_eq!(r.read(GICR_PENDBASER, 8), PEND);
        assert_eq!(r.read(GICR_PENDBASER + 4, 4), PEND >> 32);
        // After EnableLPIs the tables cannot move, and LPIs stay on.
        let mut r = r;
        r.write(GICR_PROPBASER, 8, RAM, &mut |_| {});
        r.write(GICR_CTLR, 4, 0, &mut |_| {});
        assert_eq!(r.read(GICR_PROPBASER, 8), PROP | 1 << 10 | 15);
        assert!(r.lpis_enabled());
        // A reset keeps LPI support, clears the rest.
        r.reset();
        assert_eq!(r.read(GICR_TYPER, 8) & 1, 1);
        assert_eq!(r.read(GICR_CTLR, 4), 0);
    }

    #[test]
    fn an_enabled_vlpi_is_injected_with_the_guests_priority() {
        let r = lpi_redist();
        let mut ram = Ram(std::vec![0; 0x10_0000]);
        ram.0[0x1_0000 + 300] = 0xA0 | 1;
        assert_eq!(
            r.lpi_arrived(8192 + 300, &mut ram),
            LpiDelivery::Inject(VirtIrq::soft(8192 + 300, 0xA0))
        );
    }

    #[test]
    fn a_disabled_vlpi_waits_in_the_guests_pending_table_until_inv() {
        let r = lpi_redist();
        let mut ram = Ram(std::vec![0; 0x10_0000]);
        let vintid = 8192 + 13;
        assert_eq!(r.lpi_arrived(vintid, &mut ram), LpiDelivery::Pended);
        let byte = 0x3_0000 + (vintid / 8) as usize;
        assert_eq!(ram.0[byte], 1 << (vintid % 8));
        // Still disabled: INV finds nothing to do.
        assert_eq!(r.lpi_recheck(vintid, &mut ram), None);
        ram.0[0x1_0000 + 13] = 0x80 | 1;
        assert_eq!(
            r.lpi_recheck(vintid, &mut ram),
            Some(VirtIrq::soft(vintid, 0x80))
        );
        assert_eq!(ram.0[byte], 0);
        // Once: it was taken from the pending table.
        assert_eq!(r.lpi_recheck(vintid, &mut ram), None);
    }

    #[test]
    fn vlpis_out_of_range_or_with_lpis_off_are_dropped() {
        let mut ram = Ram(std::vec![0; 0x10_0000]);
        // EnableLPIs not yet set.
        let mut r = redist().with_lpis();
        r.write(GICR_PROPBASER, 8, PROP | 15, &mut |_| {});
        assert_eq!(r.lpi_arrived(8192, &mut ram), LpiDelivery::Dropped);
        // Beyond the IDbits the guest programmed (14 bits: below 16384).
        let mut r = redist().with_lpis();
        r.write(GICR_PROPBASER, 8, PROP | 13, &mut |_| {});
        r.write(GICR_PENDBASER, 8, PEND, &mut |_| {});
        r.write(GICR_CTLR, 4, 1, &mut |_| {});
        ram.0[0x1_0000..0x2_0000].fill(1);
        assert!(matches!(
            r.lpi_arrived(16383, &mut ram),
            LpiDelivery::Inject(_)
        ));
        assert_eq!(r.lpi_arrived(16384, &mut ram), LpiDelivery::Dropped);
        assert_eq!(r.lpi_arrived(8191, &mut ram), LpiDelivery::Dropped);
        // A property table outside the partition's RAM.
        let mut r = redist().with_lpis();
        r.write(GICR_PROPBASER, 8, 0x8000_0000 | 15, &mut |_| {});
        r.write(GICR_CTLR, 4, 1, &mut |_| {});
        assert_eq!(r.lpi_arrived(8192, &mut ram), LpiDelivery::Dropped);
        assert_eq!(r.lpi_recheck(8192, &mut ram), None);
    }
}
