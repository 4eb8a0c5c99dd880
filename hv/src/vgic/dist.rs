//! The emulated GICv3 distributor (GICD) of one partition: SPI state, ownership and routing.
//!
//! One per partition, shared by its vCPUs; the caller holds the partition's
//! lock around every call (no lock is ever shared between partitions).
//! The distributor decides and reports what must happen through
//! [`DistAction`]s: inject into or retract from a vCPU, or mirror a guest's
//! change to a pass-through SPI into the physical distributor.
//!
//! The guest sees GICD_CTLR.ARE = 1 and DS = 1 (one security state, as KVM
//! presents it), so the SGI/PPI parts of the banked registers are RAZ/WI
//! (they live in each redistributor) and everything is Group 1.
//!
//! A partition with GICv4.1 direct vSGIs (`crate::vsgi`) has a distributor
//! [`VDist::with_nassgicap`]: GICD_TYPER2.nASSGIcap [8] reads 1 and
//! GICD_CTLR.nASSGIreq [8] is writable, changed only by a write that does
//! not leave EnableGrp1 set when it was set (KVM's rule); the caller makes
//! the switch. Elsewhere GICD_TYPER2 reads 0 and nASSGIreq is RAZ/WI.
//!
//! Accesses: 32-bit to every register, also 8-bit to GICD_IPRIORITYR<n>,
//! also 64-bit to GICD_IROUTER<n> (GICv3 spec 12.1.3). An access that is
//! not naturally aligned or of another width reads as zero and is ignored on
//! write; so are reserved offsets and registers of features not offered
//! (LPIs, message-based SPIs, extended SPIs, GICv2 compatibility).
//!
//! The pending and active state of a pass-through SPI lives in the physical
//! distributor and reads as 0 here (the caller may overlay the physical
//! state); a guest's GICD_ICFGR setting of one is stored for read-back only,
//! its physical trigger mode is the hypervisor's.
//!
//! SPIs a partition does not own read as disabled, inactive, not pending,
//! priority 0. An attempt to enable, pend or activate one is ignored and
//! reported as [`DistAction::Refused`] (the partition's fault, not ours).
//! Configuration writes to them (priority, trigger, routing) are ignored
//! silently, since Linux's gic_dist_init() writes defaults across the whole
//! SPI range it sees in GICD_TYPER.

use alloc::vec::Vec;

use super::lr::VirtIrq;
use super::sgi::vcpu_index;
use super::{aligned, id_register, read_bytes, IIDR, MPIDR_AFFINITY_MASK, PRIORITY_MASK};
use crate::layout::GUEST_SPI_COUNT;

const GICD_CTLR: u64 = 0x0000;
const GICD_TYPER: u64 = 0x0004;
const GICD_IIDR: u64 = 0x0008;
const GICD_TYPER2: u64 = 0x000C;
const GICD_IGROUPR: u64 = 0x0080;
const GICD_ISENABLER: u64 = 0x0100;
const GICD_ICENABLER: u64 = 0x0180;
const GICD_ISPENDR: u64 = 0x0200;
const GICD_ICPENDR: u64 = 0x0280;
const GICD_ISACTIVER: u64 = 0x0300;
const GICD_ICACTIVER: u64 = 0x0380;
const GICD_IPRIORITYR: u64 = 0x0400;
const GICD_IPRIORITYR_END: u64 = 0x0800;
const GICD_ICFGR: u64 = 0x0C00;
const GICD_ICFGR_END: u64 = 0x0D00;
const GICD_IROUTER: u64 = 0x6000;
const GICD_IROUTER_END: u64 = 0x8000;
/// One bank of 32 one-bit-per-INTID registers (GICD_ISENABLER<n> etc.).
const BITMAP_BANK: u64 = 0x80;

/// GICD_CTLR with DS = 1 (GICv3 spec 12.9.4): EnableGrp0 [0], EnableGrp1 [1],
/// ARE [4], DS [6]; RWP [31] always reads 0 since every write takes effect
/// before the trap returns.
const CTLR_ENABLE_GRP0: u32 = 1 << 0;
const CTLR_ENABLE_GRP1: u32 = 1 << 1;
const CTLR_ARE: u32 = 1 << 4;
const CTLR_DS: u32 = 1 << 6;
/// GICD_CTLR.nASSGIreq [8] (GICv4.1): the guest accepts SGIs without an
/// active state. Writable only in a distributor that offers
/// GICD_TYPER2.nASSGIcap [8], and only by a write that does not leave
/// EnableGrp1 set when it was set (KVM's rule, `vgic_mmio_write_v3_misc`:
/// a distributor that stays enabled keeps it).
pub const CTLR_NASSGIREQ: u32 = 1 << 8;
/// GICD_TYPER2.nASSGIcap [8]: SGIs may be delivered without an active
/// state once the guest sets GICD_CTLR.nASSGIreq.
pub const TYPER2_NASSGICAP: u32 = 1 << 8;

/// First SPI and one past the last SPI the partition sees.
const SPI_FIRST: u32 = 32;
const SPI_END: u32 = SPI_FIRST + GUEST_SPI_COUNT;

/// GICD_TYPER (GICv3 spec 12.9.38): ITLinesNumber [4:0] = lines / 32 - 1;
/// IDbits [23:19] = 9 (10 INTID bits: no LPIs, so nothing above 1023);
/// A3V [24] (Aff3 routable), RSS [26] (SGI1R range selector honoured);
/// LPIS, MBIS, ESPI, DVIS, SecurityExtn all 0.
const TYPER: u32 = (SPI_END.div_ceil(32) - 1) | 9 << 19 | 1 << 24 | 1 << 26;

/// GICD_IROUTER<n>.Interrupt_Routing_Mode [31]: "any PE".
const IROUTER_IRM: u64 = 1 << 31;

/// Who owns an SPI of the partition's INTID space.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpiOwner {
    /// Not this partition's: RAZ, writes refused.
    None,
    /// A line of a device the hypervisor emulates (e.g. the PL011).
    Emulated,
    /// A physical SPI owned by this partition, forwarded HW-linked (vINTID == pINTID).
    Passthrough,
}

/// What the caller must do after a distributor access or event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DistAction {
    /// Make `irq` pending on vCPU `vcpu` (LrManager::inject on that vCPU's CPU).
    Inject { vcpu: usize, irq: VirtIrq },
    /// Withdraw a pending, not yet acknowledged instance from vCPU `vcpu`.
    Retract { vcpu: usize, intid: u32 },
    /// Enable or disable the physical SPI.
    PhysSpiEnable { intid: u32, enable: bool },
    /// Route the physical SPI to the physical CPU that runs vCPU `vcpu`.
    PhysSpiRoute { intid: u32, vcpu: usize },
    /// Set or clear the physical SPI's pending state.
    PhysSpiPending { intid: u32, pending: bool },
    /// Set or clear the physical SPI's active state.
    PhysSpiActive { intid: u32, active: bool },
    /// The guest tried to change an SPI it does not own; nothing was done.
    Refused { intid: u32, what: &'static str },
}

#[derive(Clone, Copy, Debug)]
struct Spi {
    owner: SpiOwner,
    enabled: bool,
    /// Emulated only: the device's line level.
    level: bool,
    /// Emulated only: set pending by GICD_ISPENDR while it could not be
    /// delivered; injected once it can be.
    latch: bool,
    /// Emulated only: what GICD_IS/ICACTIVER wrote. The true active state
    /// of an injected interrupt is in the target vCPU's list registers.
    active: bool,
    priority: u8,
    /// GICD_ICFGR Int_config[1]: edge-triggered. Stored for read-back; an
    /// emulated line is level-sensitive by nature, and a pass-through SPI's
    /// physical trigger mode is the hypervisor's (from the host DT).
    edge: bool,
    /// GICD_IROUTER<n>, affinity fields and IRM only.
    route: u64,
}

impl Spi {
    const UNOWNED: Spi = Spi {
        owner: SpiOwner::None,
        enabled: false,
        level: false,
        latch: false,
        active: false,
        priority: 0,
        edge: false,
        route: 0,
    };
}

/// The value of a distributor register that no guest action changes (the
/// type and identification registers), or None for a register whose value
/// is state. Readable without the distributor's lock: the guest's discovery
/// reads (Linux reads GICD_TYPER and the PIDRs at boot and on every CPU
/// bring-up) never serialise its vCPUs.
#[inline]
pub const fn constant_register(offset: u64, width: u8) -> Option<u64> {
    if width != 4 || !aligned(offset, width) {
        return None;
    }
    match offset {
        GICD_TYPER => Some(TYPER as u64),
        GICD_IIDR => Some(IIDR as u64),
        GICD_TYPER2 => Some(0),
        _ => match id_register(offset) {
            Some(v) => Some(v as u64),
            None => None,
        },
    }
}

/// GICD_TYPER of a partition with a virtual ITS: LPIS [17] = 1 and
/// IDbits = 15 (16 INTID bits, its vITS's and redistributors' LPI range).
const TYPER_LPIS: u32 = (TYPER & !(0x1F << 19)) | 15 << 19 | 1 << 17;

/// A constant register's value as a partition sees it: GICD_TYPER reports
/// LPIs when it has a virtual ITS (`lpis`), GICD_TYPER2 nASSGIcap when it
/// has GICv4.1 direct vSGIs (`nassgicap`, `Partition::vsgi`); the others
/// are the same for every partition.
#[inline]
pub const fn partition_constant(offset: u64, value: u64, lpis: bool, nassgicap: bool) -> u64 {
    match offset {
        GICD_TYPER if lpis => TYPER_LPIS as u64,
        GICD_TYPER2 if nassgicap => TYPER2_NASSGICAP as u64,
        _ => value,
    }
}

/// The emulated distributor of one partition.
pub struct VDist {
    vcpu_mpidrs: Vec<u64>,
    enable_grp0: bool,
    enable_grp1: bool,
    /// GICD_TYPER2.nASSGIcap offered (the partition has direct vSGIs).
    nassgicap: bool,
    /// GICD_CTLR.nASSGIreq as the guest set it (never without nassgicap).
    nassgireq: bool,
    spis: [Spi; GUEST_SPI_COUNT as usize],
}

impl VDist {
    /// A distributor for a partition whose vCPU i has MPIDR `vcpu_mpidrs[i]`.
    /// SPIs are INTIDs 32..32+GUEST_SPI_COUNT; INTIDs outside that range are
    /// skipped and an INTID in both lists is pass-through (the partition
    /// configuration is validated against both before boot). The caller
    /// keeps the pass-through SPIs physically disabled until the guest
    /// enables them, and initially routes them to vCPU
    /// [`VDist::target_vcpu`].
    pub fn new(vcpu_mpidrs: &[u64], emulated_spis: &[u32], passthrough_spis: &[u32]) -> Self {
        let mut dist = VDist {
            vcpu_mpidrs: vcpu_mpidrs.to_vec(),
            enable_grp0: false,
            enable_grp1: false,
            nassgicap: false,
            nassgireq: false,
            spis: [Spi::UNOWNED; GUEST_SPI_COUNT as usize],
        };
        let owners = [
            (emulated_spis, SpiOwner::Emulated),
            (passthrough_spis, SpiOwner::Passthrough),
        ];
        for (intids, owner) in owners {
            for &intid in intids {
                if let Some(spi) = dist.spi_mut(intid) {
                    spi.owner = owner;
                }
            }
        }
        dist
    }

    /// The distributor of a partition with GICv4.1 direct vSGIs: its
    /// GICD_TYPER2 offers nASSGIcap and its GICD_CTLR.nASSGIreq is
    /// writable (RAZ/WI otherwise).
    pub fn with_nassgicap(mut self) -> Self {
        self.nassgicap = true;
        self
    }

    /// GICD_CTLR.EnableGrp1: the guest has switched on the distributor.
    pub fn enabled(&self) -> bool {
        self.enable_grp1
    }

    /// GICD_CTLR.nASSGIreq: the guest asked for SGIs without active state.
    pub fn nassgireq(&self) -> bool {
        self.nassgireq
    }

    /// nASSGIreq back to its reset value, 0 (the partition starts again).
    pub fn reset_nassgireq(&mut self) {
        self.nassgireq = false;
    }

    /// The vCPU an SPI is routed to. Interrupt_Routing_Mode = 1 ("any") and
    /// an affinity naming no vCPU of the partition both mean vCPU 0: a
    /// physical SPI must land on some CPU of the partition, and a guest that
    /// names a CPU it does not have gets its interrupt rather than losing it.
    pub fn target_vcpu(&self, intid: u32) -> usize {
        match self.spi(intid) {
            Some(spi) if spi.route & IROUTER_IRM == 0 => {
                vcpu_index(&self.vcpu_mpidrs, spi.route).unwrap_or(0)
            }
            _ => 0,
        }
    }

    /// A physical pass-through SPI arrived at EL2. Returns the vCPU and the
    /// HW-linked interrupt (with the guest's priority) to inject, or None if
    /// the guest has it disabled or does not own it.
    pub fn passthrough_fired(&self, intid: u32) -> Option<(usize, VirtIrq)> {
        let spi = self.spi(intid)?;
        if spi.owner != SpiOwner::Passthrough || !self.deliverable(spi) {
            return None;
        }
        Some((
            self.target_vcpu(intid),
            VirtIrq::hw_linked(intid, spi.priority),
        ))
    }

    /// The line of an emulated level-sensitive SPI changed. A rising line is
    /// injected into the target vCPU if enabled; a falling one is retracted
    /// there (the list registers keep it if the guest already took it).
    pub fn set_emulated_level(
        &mut self,
        intid: u32,
        level: bool,
        out: &mut impl FnMut(DistAction),
    ) {
        let Some(spi) = self.emulated_mut(intid) else {
            return;
        };
        let was = spi.level;
        spi.level = level;
        if was == level {
            return;
        }
        if level {
            self.deliver(intid, out);
        } else if self.spi(intid).is_some_and(|s| self.deliverable(s)) {
            out(DistAction::Retract {
                vcpu: self.target_vcpu(intid),
                intid,
            });
        }
    }

    /// The guest deactivated an emulated SPI (the EOI maintenance that
    /// LrManager::maintenance reports): a line that is still high is
    /// injected again, as a level-sensitive interrupt would be.
    pub fn on_eoi(&mut self, intid: u32, out: &mut impl FnMut(DistAction)) {
        match self.spi(intid) {
            Some(spi) if spi.owner == SpiOwner::Emulated && spi.level && self.deliverable(spi) => {
                self.inject(intid, out);
            }
            _ => {}
        }
    }

    pub fn read(&self, offset: u64, width: u8) -> u64 {
        if !aligned(offset, width) {
            return 0;
        }
        if let Some(v) = constant_register(offset, width) {
            return partition_constant(offset, v, false, self.nassgicap);
        }
        match offset {
            GICD_IPRIORITYR..GICD_IPRIORITYR_END => match width {
                1 | 4 => read_bytes(&self.priority_bytes(offset, width), 0, width),
                _ => 0,
            },
            GICD_IROUTER..GICD_IROUTER_END => self.read_irouter(offset, width),
            _ if width != 4 => 0,
            GICD_CTLR => u64::from(self.ctlr()),
            GICD_IGROUPR..GICD_ISENABLER => self.read_bitmap(offset - GICD_IGROUPR, |_| true),
            GICD_ISENABLER..GICD_ISPENDR => self.read_bitmap(offset % BITMAP_BANK, |s| {
                s.owner != SpiOwner::None && s.enabled
            }),
            GICD_ISPENDR..GICD_ISACTIVER => self.read_bitmap(offset % BITMAP_BANK, |s| {
                s.owner == SpiOwner::Emulated && (s.level || s.latch)
            }),
            GICD_ISACTIVER..GICD_IPRIORITYR => self.read_bitmap(offset % BITMAP_BANK, |s| {
                s.owner == SpiOwner::Emulated && s.active
            }),
            GICD_ICFGR..GICD_ICFGR_END => self.read_icfgr(offset - GICD_ICFGR),
            _ => 0,
        }
    }

    pub fn write(&mut self, offset: u64, width: u8, value: u64, out: &mut impl FnMut(DistAction)) {
        if !aligned(offset, width) {
            return;
        }
        match offset {
            GICD_IPRIORITYR..GICD_IPRIORITYR_END => {
                if matches!(width, 1 | 4) {
                    self.write_priority(offset - GICD_IPRIORITYR, width, value);
                }
            }
            GICD_IROUTER..GICD_IROUTER_END => self.write_irouter(offset, width, value, out),
            _ if width != 4 => {}
            GICD_CTLR => self.write_ctlr(value as u32, out),
            GICD_ISENABLER..GICD_ICENABLER => {
                self.for_each_spi(offset - GICD_ISENABLER, value, |d, i| {
                    d.set_enable(i, true, out)
                })
            }
            GICD_ICENABLER..GICD_ISPENDR => {
                self.for_each_spi(offset - GICD_ICENABLER, value, |d, i| {
                    d.set_enable(i, false, out)
                })
            }
            GICD_ISPENDR..GICD_ICPENDR => {
                self.for_each_spi(offset - GICD_ISPENDR, value, |d, i| d.set_pending(i, out))
            }
            GICD_ICPENDR..GICD_ISACTIVER => {
                self.for_each_spi(offset - GICD_ICPENDR, value, |d, i| d.clear_pending(i, out))
            }
            GICD_ISACTIVER..GICD_ICACTIVER => {
                self.for_each_spi(offset - GICD_ISACTIVER, value, |d, i| {
                    d.write_active(i, true, out)
                })
            }
            GICD_ICACTIVER..GICD_IPRIORITYR => {
                self.for_each_spi(offset - GICD_ICACTIVER, value, |d, i| {
                    d.write_active(i, false, out)
                })
            }
            GICD_ICFGR..GICD_ICFGR_END => self.write_icfgr(offset - GICD_ICFGR, value as u32),
            // GICD_IGROUPR (RAO/WI: all Group 1), GICD_IGRPMODR, GICD_NSACR,
            // GICD_SGIR (ARE = 1), the read-only and reserved registers.
            _ => {}
        }
    }

    fn ctlr(&self) -> u32 {
        let mut value = CTLR_ARE | CTLR_DS;
        if self.enable_grp0 {
            value |= CTLR_ENABLE_GRP0;
        }
        if self.enable_grp1 {
            value |= CTLR_ENABLE_GRP1;
        }
        if self.nassgireq {
            value |= CTLR_NASSGIREQ;
        }
        value
    }

    fn write_ctlr(&mut self, value: u32, out: &mut impl FnMut(DistAction)) {
        // EnableGrp0 is kept for read-back; nothing is in Group 0.
        self.enable_grp0 = value & CTLR_ENABLE_GRP0 != 0;
        let grp1 = value & CTLR_ENABLE_GRP1 != 0;
        // nASSGIreq changes only while the distributor is, or becomes,
        // disabled (Linux's gic_dist_init writes 0, then the enables with
        // it): an enabled distributor's SGIs never change kind under it.
        if self.nassgicap && !(self.enable_grp1 && grp1) {
            self.nassgireq = value & CTLR_NASSGIREQ != 0;
        }
        if grp1 == self.enable_grp1 {
            return;
        }
        self.enable_grp1 = grp1;
        for intid in SPI_FIRST..SPI_END {
            let Some(spi) = self.spi(intid).copied() else {
                continue;
            };
            if !spi.enabled {
                continue;
            }
            match spi.owner {
                SpiOwner::Passthrough => out(DistAction::PhysSpiEnable {
                    intid,
                    enable: grp1,
                }),
                SpiOwner::Emulated if grp1 => self.deliver(intid, out),
                SpiOwner::Emulated if spi.level => out(DistAction::Retract {
                    vcpu: self.target_vcpu(intid),
                    intid,
                }),
                _ => {}
            }
        }
    }

    fn spi(&self, intid: u32) -> Option<&Spi> {
        let index = intid.checked_sub(SPI_FIRST)?;
        self.spis.get(index as usize)
    }

    fn spi_mut(&mut self, intid: u32) -> Option<&mut Spi> {
        let index = intid.checked_sub(SPI_FIRST)?;
        self.spis.get_mut(index as usize)
    }

    fn owned_mut(&mut self, intid: u32) -> Option<&mut Spi> {
        self.spi_mut(intid).filter(|s| s.owner != SpiOwner::None)
    }

    fn emulated_mut(&mut self, intid: u32) -> Option<&mut Spi> {
        self.spi_mut(intid)
            .filter(|s| s.owner == SpiOwner::Emulated)
    }

    fn deliverable(&self, spi: &Spi) -> bool {
        spi.enabled && self.enable_grp1
    }

    fn inject(&self, intid: u32, out: &mut impl FnMut(DistAction)) {
        let priority = self.spi(intid).map_or(0, |s| s.priority);
        let irq = VirtIrq {
            intid,
            priority,
            hw_intid: None,
            eoi_maintenance: true,
        };
        out(DistAction::Inject {
            vcpu: self.target_vcpu(intid),
            irq,
        });
    }

    /// An emulated SPI just became deliverable, or was raised while
    /// deliverable: inject it if its line is high or a pending write is
    /// waiting. Every injection asks for EOI maintenance so that a line
    /// still high at deactivation is injected again ([`VDist::on_eoi`]).
    fn deliver(&mut self, intid: u32, out: &mut impl FnMut(DistAction)) {
        let Some(spi) = self.spi(intid).copied() else {
            return;
        };
        if !self.deliverable(&spi) || !(spi.level || spi.latch) {
            return;
        }
        if let Some(s) = self.spi_mut(intid) {
            s.latch = false;
        }
        self.inject(intid, out);
    }

    /// Call `f` for every SPI whose bit is set in a write to word
    /// `bank_offset / 4` of a bitmap register bank. The SGI/PPI word and
    /// words past the last SPI are RAZ/WI and never reach `f`.
    fn for_each_spi(&mut self, bank_offset: u64, value: u64, mut f: impl FnMut(&mut Self, u32)) {
        let first = (bank_offset / 4 * 32) as u32;
        for i in (0..32).filter(|i| value & (1 << i) != 0) {
            let intid = first + i;
            if (SPI_FIRST..SPI_END).contains(&intid) {
                f(self, intid);
            }
        }
    }

    fn read_bitmap(&self, bank_offset: u64, f: impl Fn(&Spi) -> bool) -> u64 {
        let first = (bank_offset / 4 * 32) as u32;
        let mut value = 0u64;
        for i in 0..32 {
            if self.spi(first + i).is_some_and(&f) {
                value |= 1 << i;
            }
        }
        value
    }

    fn set_enable(&mut self, intid: u32, enable: bool, out: &mut impl FnMut(DistAction)) {
        let grp1 = self.enable_grp1;
        let Some(spi) = self.owned_mut(intid) else {
            if enable {
                out(DistAction::Refused {
                    intid,
                    what: "enable",
                });
            }
            return;
        };
        if spi.enabled == enable {
            return;
        }
        spi.enabled = enable;
        let spi = *spi;
        match spi.owner {
            SpiOwner::Passthrough if grp1 => out(DistAction::PhysSpiEnable { intid, enable }),
            SpiOwner::Emulated if enable => self.deliver(intid, out),
            // Disabling withdraws a pending instance of a high line; it is
            // injected again on enable, so nothing is lost. An edge instance
            // already in a list register stays there, as on hardware where
            // the interrupt was forwarded before the disable.
            SpiOwner::Emulated if grp1 && spi.level => out(DistAction::Retract {
                vcpu: self.target_vcpu(intid),
                intid,
            }),
            _ => {}
        }
    }

    fn set_pending(&mut self, intid: u32, out: &mut impl FnMut(DistAction)) {
        let Some(spi) = self.owned_mut(intid) else {
            out(DistAction::Refused {
                intid,
                what: "set-pending",
            });
            return;
        };
        match spi.owner {
            SpiOwner::Passthrough => out(DistAction::PhysSpiPending {
                intid,
                pending: true,
            }),
            _ => {
                spi.latch = true;
                self.deliver(intid, out);
            }
        }
    }

    fn clear_pending(&mut self, intid: u32, out: &mut impl FnMut(DistAction)) {
        let Some(spi) = self.owned_mut(intid) else {
            return;
        };
        match spi.owner {
            SpiOwner::Passthrough => out(DistAction::PhysSpiPending {
                intid,
                pending: false,
            }),
            _ => {
                spi.latch = false;
                // A high line keeps a level-sensitive interrupt pending.
                if !spi.level {
                    out(DistAction::Retract {
                        vcpu: self.target_vcpu(intid),
                        intid,
                    });
                }
            }
        }
    }

    fn write_active(&mut self, intid: u32, active: bool, out: &mut impl FnMut(DistAction)) {
        let Some(spi) = self.owned_mut(intid) else {
            if active {
                out(DistAction::Refused {
                    intid,
                    what: "set-active",
                });
            }
            return;
        };
        match spi.owner {
            SpiOwner::Passthrough => out(DistAction::PhysSpiActive { intid, active }),
            _ => spi.active = active,
        }
    }

    /// The priority bytes covered by an access at `offset` (SGI/PPI and
    /// unowned INTIDs read 0).
    fn priority_bytes(&self, offset: u64, width: u8) -> [u8; 4] {
        let first = (offset - GICD_IPRIORITYR) as u32;
        let mut bytes = [0u8; 4];
        for (i, byte) in bytes.iter_mut().take(usize::from(width)).enumerate() {
            if let Some(spi) = self
                .spi(first + i as u32)
                .filter(|s| s.owner != SpiOwner::None)
            {
                *byte = spi.priority;
            }
        }
        bytes
    }

    fn write_priority(&mut self, bank_offset: u64, width: u8, value: u64) {
        for i in 0..u32::from(width) {
            if let Some(spi) = self.owned_mut(bank_offset as u32 + i) {
                spi.priority = (value >> (8 * i)) as u8 & PRIORITY_MASK;
            }
        }
    }

    /// GICD_ICFGR<n>: 16 INTIDs per word, Int_config[1] (edge) at bit 2i+1.
    fn read_icfgr(&self, bank_offset: u64) -> u64 {
        let first = (bank_offset / 4 * 16) as u32;
        let mut value = 0u64;
        for i in 0..16 {
            match self.spi(first + i) {
                Some(spi) if spi.owner != SpiOwner::None && spi.edge => value |= 1 << (2 * i + 1),
                _ => {}
            }
        }
        value
    }

    fn write_icfgr(&mut self, bank_offset: u64, value: u32) {
        let first = (bank_offset / 4 * 16) as u32;
        for i in 0..16 {
            if let Some(spi) = self.owned_mut(first + i) {
                spi.edge = value & (1 << (2 * i + 1)) != 0;
            }
        }
    }

    fn read_irouter(&self, offset: u64, width: u8) -> u64 {
        let intid = ((offset - GICD_IROUTER) / 8) as u32;
        let route = match self.spi(intid) {
            Some(spi) if spi.owner != SpiOwner::None => spi.route,
            _ => return 0,
        };
        match (width, offset % 8) {
            (8, 0) => route,
            (4, 0) => route & 0xFFFF_FFFF,
            (4, 4) => route >> 32,
            _ => 0,
        }
    }

    fn write_irouter(
        &mut self,
        offset: u64,
        width: u8,
        value: u64,
        out: &mut impl FnMut(DistAction),
    ) {
        let intid = ((offset - GICD_IROUTER) / 8) as u32;
        let old_target = self.target_vcpu(intid);
        let Some(spi) = self.owned_mut(intid) else {
            return;
        };
        let route = match (width, offset % 8) {
            (8, 0) => value,
            (4, 0) => spi.route & !0xFFFF_FFFF | value & 0xFFFF_FFFF,
            (4, 4) => spi.route & 0xFFFF_FFFF | value << 32,
            _ => return,
        };
        spi.route = route & (MPIDR_AFFINITY_MASK | IROUTER_IRM);
        let spi = *spi;
        let target = self.target_vcpu(intid);
        match spi.owner {
            SpiOwner::Passthrough => out(DistAction::PhysSpiRoute {
                intid,
                vcpu: target,
            }),
            SpiOwner::Emulated if target != old_target && spi.level && self.deliverable(&spi) => {
                // Linux masks an SPI around GICD_IROUTER writes, so this is
                // rare; move a pending instance to the new target.
                out(DistAction::Retract {
                    vcpu: old_target,
                    intid,
                });
                self.inject(intid, out);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::GUEST_UART_INTID;

    const UART: u32 = GUEST_UART_INTID;
    const NIC: u32 = 40;
    const FOREIGN: u32 = 50;
    const MPIDRS: [u64; 2] = [0x8000_0000, 0x8000_0001];

    fn dist() -> VDist {
        VDist::new(&MPIDRS, &[UART], &[NIC])
    }

    fn write(d: &mut VDist, offset: u64, width: u8, value: u64) -> Vec<DistAction> {
        let mut actions = Vec::new();
        d.write(offset, width, value, &mut |a| actions.push(a));
        actions
    }

    /// Offset and value of a one-bit-per-INTID register access for `intid`.
    fn bit_of(bank: u64, intid: u32) -> (u64, u64) {
        (bank + u64::from(intid / 32) * 4, 1 << (intid % 32))
    }

    fn set(d: &mut VDist, bank: u64, intid: u32) -> Vec<DistAction> {
        let (offset, value) = bit_of(bank, intid);
        write(d, offset, 4, value)
    }

    fn enabled_dist() -> VDist {
        let mut d = dist();
        write(&mut d, GICD_CTLR, 4, 0x13);
        d
    }

    fn uart_irq(priority: u8) -> VirtIrq {
        VirtIrq {
            intid: UART,
            priority,
            hw_intid: None,
            eoi_maintenance: true,
        }
    }

    /// gic_dist_init() and gic_dist_config() of Linux, as a guest runs them.
    fn linux_dist_init(d: &mut VDist) -> Vec<DistAction> {
        let lines = (d.read(GICD_TYPER, 4) as u32 & 0x1F) + 1;
        let mut a = write(d, GICD_CTLR, 4, 0);
        for i in 1..lines {
            a.extend(write(d, GICD_IGROUPR + 4 * u64::from(i), 4, 0xFFFF_FFFF));
        }
        for i in 2..2 * lines {
            a.extend(write(d, GICD_ICFGR + 4 * u64::from(i), 4, 0));
        }
        for i in 8..8 * lines {
            a.extend(write(d, GICD_IPRIORITYR + 4 * u64::from(i), 4, 0xA0A0_A0A0));
        }
        for i in 1..lines {
            a.extend(write(d, GICD_ICACTIVER + 4 * u64::from(i), 4, 0xFFFF_FFFF));
            a.extend(write(d, GICD_ICENABLER + 4 * u64::from(i), 4, 0xFFFF_FFFF));
        }
        a.extend(write(d, GICD_CTLR, 4, 0x13));
        for intid in 32..32 * lines {
            a.extend(write(
                d,
                GICD_IROUTER + 8 * u64::from(intid),
                8,
                MPIDRS[0] & 0xFF_00FF_FFFF,
            ));
        }
        a
    }

    #[test]
    fn typer_of_a_partition_with_a_vits_reports_lpis_and_sixteen_id_bits() {
        let typer = partition_constant(GICD_TYPER, TYPER as u64, true, false);
        assert_eq!(typer & (1 << 17), 1 << 17, "LPIS");
        assert_eq!((typer >> 19) & 0x1F, 15, "IDbits");
        assert_eq!(typer & 0x1F, TYPER as u64 & 0x1F, "ITLinesNumber unchanged");
        assert_eq!(
            partition_constant(GICD_TYPER, TYPER as u64, false, true),
            TYPER as u64
        );
        assert_eq!(partition_constant(GICD_IIDR, 7, true, true), 7);
    }

    #[test]
    fn typer2_offers_nassgicap_only_to_a_partition_with_direct_vsgis() {
        assert_eq!(partition_constant(GICD_TYPER2, 0, false, true), 1 << 8);
        assert_eq!(partition_constant(GICD_TYPER2, 0, true, false), 0);
        assert_eq!(dist().with_nassgicap().read(GICD_TYPER2, 4), 1 << 8);
        assert_eq!(dist().read(GICD_TYPER2, 4), 0);
    }

    #[test]
    fn nassgireq_is_raz_wi_without_nassgicap() {
        let mut d = dist();
        write(&mut d, GICD_CTLR, 4, 0x112);
        assert_eq!(d.read(GICD_CTLR, 4), 0x52);
        assert!(!d.nassgireq());
    }

    #[test]
    fn nassgireq_changes_only_while_the_distributor_is_or_becomes_disabled() {
        let mut d = dist().with_nassgicap();
        write(&mut d, GICD_CTLR, 4, 0x112); // Linux's gic_dist_init, from disabled
        assert_eq!(d.read(GICD_CTLR, 4), 0x152);
        write(&mut d, GICD_CTLR, 4, 0x12); // stays enabled: kept
        assert!(d.nassgireq());
        write(&mut d, GICD_CTLR, 4, 0); // disabled by the write: taken
        assert_eq!(d.read(GICD_CTLR, 4), 0x50);
        write(&mut d, GICD_CTLR, 4, 0x12);
        write(&mut d, GICD_CTLR, 4, 0x112); // stays enabled: not taken
        assert!(!d.nassgireq());
    }

    #[test]
    fn typer_reports_288_lines_ten_id_bits_and_no_lpis() {
        let typer = dist().read(GICD_TYPER, 4);

        assert_eq!(typer & 0x1F, 8, "ITLinesNumber");
        assert_eq!((typer >> 19) & 0x1F, 9, "IDbits");
        assert_eq!(typer & (1 << 17 | 1 << 16 | 1 << 8), 0, "LPIS, MBIS, ESPI");
    }

    #[test]
    fn pidr2_reports_gicv3_and_typer2_is_zero() {
        let d = dist();

        assert_eq!(d.read(0xFFE8, 4), 0x3B);
        assert_eq!(d.read(GICD_TYPER2, 4), 0);
        assert_eq!(d.read(GICD_IIDR, 4), u64::from(IIDR));
    }

    #[test]
    fn ctlr_keeps_are_and_ds_and_stores_group_enables() {
        let mut d = dist();
        let before = d.read(GICD_CTLR, 4);

        write(&mut d, GICD_CTLR, 4, 0x13);

        assert_eq!(before, 0x50);
        assert_eq!(d.read(GICD_CTLR, 4), 0x53);
        assert!(d.enabled());
    }

    #[test]
    fn linux_dist_init_touches_foreign_spis_without_refusals() {
        let mut d = dist();

        let actions = linux_dist_init(&mut d);

        assert_eq!(
            actions,
            [
                DistAction::PhysSpiActive {
                    intid: NIC,
                    active: false
                },
                DistAction::PhysSpiRoute {
                    intid: NIC,
                    vcpu: 0
                },
            ]
        );
        assert_eq!(d.read(GICD_ISENABLER + 4, 4), 0);
        assert_eq!(d.read(GICD_IPRIORITYR + u64::from(UART), 1), 0xA0);
    }

    #[test]
    fn enabling_a_foreign_spi_is_refused_and_reads_disabled() {
        let mut d = enabled_dist();

        let actions = set(&mut d, GICD_ISENABLER, FOREIGN);

        assert_eq!(
            actions,
            [DistAction::Refused {
                intid: FOREIGN,
                what: "enable"
            }]
        );
        assert_eq!(d.read(bit_of(GICD_ISENABLER, FOREIGN).0, 4), 0);
    }

    #[test]
    fn pending_or_active_on_foreign_spi_is_refused() {
        let mut d = enabled_dist();

        let mut actions = set(&mut d, GICD_ISPENDR, FOREIGN);
        actions.extend(set(&mut d, GICD_ISACTIVER, FOREIGN));

        assert_eq!(
            actions,
            [
                DistAction::Refused {
                    intid: FOREIGN,
                    what: "set-pending"
                },
                DistAction::Refused {
                    intid: FOREIGN,
                    what: "set-active"
                },
            ]
        );
    }

    #[test]
    fn enabling_a_passthrough_spi_enables_it_physically() {
        let mut d = enabled_dist();

        let on = set(&mut d, GICD_ISENABLER, NIC);
        let off = set(&mut d, GICD_ICENABLER, NIC);

        assert_eq!(
            on,
            [DistAction::PhysSpiEnable {
                intid: NIC,
                enable: true
            }]
        );
        assert_eq!(
            off,
            [DistAction::PhysSpiEnable {
                intid: NIC,
                enable: false
            }]
        );
    }

    #[test]
    fn disabling_group1_disables_enabled_passthrough_spis() {
        let mut d = enabled_dist();
        set(&mut d, GICD_ISENABLER, NIC);

        let actions = write(&mut d, GICD_CTLR, 4, 0);

        assert_eq!(
            actions,
            [DistAction::PhysSpiEnable {
                intid: NIC,
                enable: false
            }]
        );
        assert_eq!(d.passthrough_fired(NIC), None);
    }

    #[test]
    fn passthrough_fired_gives_hw_linked_irq_with_guest_priority() {
        let mut d = enabled_dist();
        write(&mut d, GICD_IPRIORITYR + u64::from(NIC), 1, 0x60);
        write(&mut d, GICD_IROUTER + 8 * u64::from(NIC), 8, 0x1);
        set(&mut d, GICD_ISENABLER, NIC);

        let fired = d.passthrough_fired(NIC);

        assert_eq!(fired, Some((1, VirtIrq::hw_linked(NIC, 0x60))));
    }

    #[test]
    fn passthrough_fired_is_none_while_disabled() {
        let d = enabled_dist();

        assert_eq!(d.passthrough_fired(NIC), None);
        assert_eq!(d.passthrough_fired(UART), None);
    }

    #[test]
    fn uart_line_high_injects_into_target_vcpu_once_enabled() {
        let mut d = enabled_dist();
        write(&mut d, GICD_IPRIORITYR + u64::from(UART), 1, 0xA0);
        let mut early = Vec::new();
        d.set_emulated_level(UART, true, &mut |a| early.push(a));

        let actions = set(&mut d, GICD_ISENABLER, UART);

        assert!(early.is_empty());
        assert_eq!(
            actions,
            [DistAction::Inject {
                vcpu: 0,
                irq: uart_irq(0xA0)
            }]
        );
    }

    #[test]
    fn uart_line_falling_retracts() {
        let mut d = enabled_dist();
        set(&mut d, GICD_ISENABLER, UART);
        d.set_emulated_level(UART, true, &mut |_| {});
        let mut actions = Vec::new();

        d.set_emulated_level(UART, false, &mut |a| actions.push(a));

        assert_eq!(
            actions,
            [DistAction::Retract {
                vcpu: 0,
                intid: UART
            }]
        );
        assert_eq!(d.read(bit_of(GICD_ISPENDR, UART).0, 4), 0);
    }

    #[test]
    fn eoi_reinjects_only_while_line_is_high() {
        let mut d = enabled_dist();
        set(&mut d, GICD_ISENABLER, UART);
        d.set_emulated_level(UART, true, &mut |_| {});
        let mut high = Vec::new();
        let mut low = Vec::new();

        d.on_eoi(UART, &mut |a| high.push(a));
        d.set_emulated_level(UART, false, &mut |_| {});
        d.on_eoi(UART, &mut |a| low.push(a));

        assert_eq!(
            high,
            [DistAction::Inject {
                vcpu: 0,
                irq: uart_irq(0)
            }]
        );
        assert!(low.is_empty());
    }

    #[test]
    fn group1_disabled_holds_the_line_until_enabled() {
        let mut d = dist();
        set(&mut d, GICD_ISENABLER, UART);
        let mut held = Vec::new();
        d.set_emulated_level(UART, true, &mut |a| held.push(a));

        let actions = write(&mut d, GICD_CTLR, 4, 0x12);

        assert!(held.is_empty());
        assert_eq!(
            actions,
            [DistAction::Inject {
                vcpu: 0,
                irq: uart_irq(0)
            }]
        );
    }

    #[test]
    fn ispendr_on_disabled_emulated_spi_waits_for_enable() {
        let mut d = enabled_dist();

        let early = set(&mut d, GICD_ISPENDR, UART);
        let pending = d.read(bit_of(GICD_ISPENDR, UART).0, 4);
        let actions = set(&mut d, GICD_ISENABLER, UART);
        let again = d.read(bit_of(GICD_ISPENDR, UART).0, 4);

        assert!(early.is_empty());
        assert_eq!(pending, bit_of(GICD_ISPENDR, UART).1);
        assert_eq!(
            actions,
            [DistAction::Inject {
                vcpu: 0,
                irq: uart_irq(0)
            }]
        );
        assert_eq!(again, 0);
    }

    #[test]
    fn priority_word_write_keeps_owned_bytes_only() {
        let mut d = dist();

        // INTIDs 32..35: only 33 (the UART) is owned.
        write(&mut d, GICD_IPRIORITYR + 32, 4, 0x1122_33FF);

        assert_eq!(d.read(GICD_IPRIORITYR + 32, 4), 0x0000_3000);
        assert_eq!(d.read(GICD_IPRIORITYR + u64::from(UART), 1), 0x30);
    }

    #[test]
    fn priority_byte_write_reads_back_in_the_word() {
        let mut d = dist();

        write(&mut d, GICD_IPRIORITYR + u64::from(NIC), 1, 0x47);

        assert_eq!(d.read(GICD_IPRIORITYR + u64::from(NIC), 4), 0x40);
    }

    #[test]
    fn icfgr_reads_back_for_owned_spis_and_zero_for_others() {
        let mut d = dist();
        // ICFGR2 covers INTIDs 32..47: set edge for all of them.
        write(&mut d, GICD_ICFGR + 8, 4, 0xAAAA_AAAA);

        let value = d.read(GICD_ICFGR + 8, 4);

        assert_eq!(
            value,
            1 << (2 * (UART - 32) + 1) | 1 << (2 * (NIC - 32) + 1)
        );
    }

    #[test]
    fn irouter_routes_to_the_vcpu_with_that_affinity() {
        let mut d = dist();

        let actions = write(&mut d, GICD_IROUTER + 8 * u64::from(NIC), 8, 0x1);

        assert_eq!(
            actions,
            [DistAction::PhysSpiRoute {
                intid: NIC,
                vcpu: 1
            }]
        );
        assert_eq!(d.target_vcpu(NIC), 1);
        assert_eq!(d.read(GICD_IROUTER + 8 * u64::from(NIC), 8), 0x1);
    }

    #[test]
    fn irouter_32_bit_halves_compose_the_route() {
        let mpidrs = [0x0, 0x1_0000_0203];
        let mut d = VDist::new(&mpidrs, &[UART], &[]);
        let reg = GICD_IROUTER + 8 * u64::from(UART);

        write(&mut d, reg, 4, 0x0203);
        write(&mut d, reg + 4, 4, 0x1);

        assert_eq!(d.target_vcpu(UART), 1);
        assert_eq!((d.read(reg, 4), d.read(reg + 4, 4)), (0x0203, 0x1));
    }

    #[test]
    fn irouter_any_pe_mode_routes_to_vcpu_0() {
        let mut d = dist();
        write(&mut d, GICD_IROUTER + 8 * u64::from(UART), 8, 0x1);

        write(
            &mut d,
            GICD_IROUTER + 8 * u64::from(UART),
            8,
            IROUTER_IRM | 0x1,
        );

        assert_eq!(d.target_vcpu(UART), 0);
    }

    #[test]
    fn rerouting_a_high_line_moves_it_to_the_new_vcpu() {
        let mut d = enabled_dist();
        set(&mut d, GICD_ISENABLER, UART);
        d.set_emulated_level(UART, true, &mut |_| {});

        let actions = write(&mut d, GICD_IROUTER + 8 * u64::from(UART), 8, 0x1);

        assert_eq!(
            actions,
            [
                DistAction::Retract {
                    vcpu: 0,
                    intid: UART
                },
                DistAction::Inject {
                    vcpu: 1,
                    irq: uart_irq(0)
                },
            ]
        );
    }

    #[test]
    fn sgi_ppi_banks_and_reserved_offsets_are_raz_wi() {
        let mut d = enabled_dist();

        let actions = write(&mut d, GICD_ISENABLER, 4, 0xFFFF_FFFF);

        assert!(actions.is_empty());
        assert_eq!(d.read(GICD_ISENABLER, 4), 0);
        assert_eq!(d.read(GICD_IGROUPR, 4), 0);
        assert_eq!(d.read(GICD_IPRIORITYR + 27, 1), 0);
        assert_eq!(d.read(GICD_IROUTER + 8 * 27, 8), 0);
        assert_eq!(d.read(0x0010, 4), 0, "GICD_STATUSR");
        assert_eq!(d.read(0x5000, 4), 0, "reserved");
    }

    #[test]
    fn igroupr_reads_one_for_every_spi_and_ignores_writes() {
        let mut d = dist();

        write(&mut d, GICD_IGROUPR + 4, 4, 0);

        assert_eq!(d.read(GICD_IGROUPR + 4, 4), 0xFFFF_FFFF);
        assert_eq!(d.read(GICD_IGROUPR + 4 * 9, 4), 0, "past the last SPI");
    }

    #[test]
    fn misaligned_or_wrong_width_access_is_raz_wi() {
        let mut d = enabled_dist();

        let mut actions = write(&mut d, GICD_ISENABLER + 5, 1, 0xFF);
        actions.extend(write(&mut d, GICD_ISENABLER + 4, 8, u64::MAX));
        actions.extend(write(&mut d, GICD_IPRIORITYR + 34, 2, 0xFFFF));

        assert!(actions.is_empty());
        assert_eq!(d.read(GICD_CTLR + 1, 1), 0);
        assert_eq!(d.read(GICD_TYPER, 8), 0);
        assert_eq!(d.read(GICD_IPRIORITYR + u64::from(UART) + 1, 2), 0);
    }
}
