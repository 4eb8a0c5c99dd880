//! ICH_LR<n>_EL2 encoding and the per-vCPU list-register allocator with its overflow queue.
//!
//! A vCPU sees virtual interrupts through a handful of list registers (QEMU
//! implements four). When more are pending than there are registers, the
//! extra ones wait in a fixed-size software queue, and the underflow
//! maintenance interrupt (ICH_HCR_EL2.UIE) calls us back when the registers
//! drain so we can refill them, highest priority first.
//!
//! The manager keeps a shadow of what it put in each register. It reads the
//! hardware register back only for the state the guest changes behind our
//! back (Pending -> Active -> Invalid), and trusts ICH_ELRSR_EL2 for which
//! registers are free. That makes one assumption explicit: nothing but this
//! manager writes the vCPU's list registers.
//!
//! The hot paths decide without scanning the queue or reading registers
//! back: each shadow is also kept as the one-word Pending value written
//! (`shadow_key`), the common injection (nothing queued, a free or finished
//! register) is decided from those words and ICH_ELRSR_EL2, and a forwarded
//! PPI that fires again goes back into the register it used last
//! ([`LrManager::reinject_hw`]).

use core::fmt;

/// Architectural maximum number of list registers (ICH_VTR_EL2.ListRegs is a
/// 4-bit "count minus one" field, GICv3 spec 12.4.10).
pub const MAX_LR_COUNT: usize = 16;

/// Capacity of the software overflow queue of one vCPU. A guest has at most
/// a few dozen interrupt sources; when the queue is full, injection fails
/// with [`InjectError::QueueFull`] rather than allocating on the hot path.
pub const QUEUE_CAPACITY: usize = 64;

/// First INTID that is not an SGI, PPI or SPI (1020..1023 are special).
const INTID_LIMIT: u32 = 1020;
/// vLPIs a partition's vITS may map (8192..2^16, `redist::LPI_ID_BITS`).
const VLPI_RANGE: core::ops::Range<u32> = 8192..1 << super::redist::LPI_ID_BITS;

/// An INTID a list register may carry as a vINTID.
#[inline(always)]
fn valid_vintid(intid: u32) -> bool {
    intid < INTID_LIMIT || VLPI_RANGE.contains(&intid)
}

/// vINTID, ICH_LR<n>_EL2[31:0].
const LR_VINTID_MASK: u64 = 0xFFFF_FFFF;
/// pINTID, ICH_LR<n>_EL2[44:32], meaningful only when HW == 1.
const LR_PINTID_SHIFT: u32 = 32;
const LR_PINTID_MASK: u64 = 0x1FFF;
/// EOI, ICH_LR<n>_EL2[41] when HW == 0: request a maintenance interrupt when
/// the guest deactivates the interrupt (GICv3 spec 12.4.6).
const LR_EOI: u64 = 1 << 41;
/// Priority, ICH_LR<n>_EL2[55:48].
const LR_PRIORITY_SHIFT: u32 = 48;
/// Group, ICH_LR<n>_EL2[60]; Linux runs everything in Group 1.
const LR_GROUP1: u64 = 1 << 60;
/// HW, ICH_LR<n>_EL2[61]: the guest's deactivation also deactivates pINTID.
const LR_HW: u64 = 1 << 61;
/// State, ICH_LR<n>_EL2[63:62].
const LR_STATE_SHIFT: u32 = 62;

/// A virtual interrupt to present to a vCPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VirtIrq {
    /// The INTID the guest acknowledges (vINTID).
    pub intid: u32,
    /// Priority as the guest programmed it (lower value = more urgent).
    pub priority: u8,
    /// The physical INTID this interrupt is linked to (HW = 1): the guest's
    /// deactivation deactivates it in the physical GIC without an exit.
    pub hw_intid: Option<u32>,
    /// Ask for a maintenance interrupt when the guest deactivates it (only
    /// for software interrupts, HW = 0): lets an emulated level-triggered
    /// line be sampled again.
    pub eoi_maintenance: bool,
}

impl VirtIrq {
    /// A software (not HW-linked) interrupt without EOI maintenance.
    pub const fn soft(intid: u32, priority: u8) -> Self {
        VirtIrq {
            intid,
            priority,
            hw_intid: None,
            eoi_maintenance: false,
        }
    }

    /// A HW-linked interrupt with vINTID == pINTID (pass-through PPIs/SPIs).
    pub const fn hw_linked(intid: u32, priority: u8) -> Self {
        VirtIrq {
            intid,
            priority,
            hw_intid: Some(intid),
            eoi_maintenance: false,
        }
    }

    const fn placeholder() -> Self {
        VirtIrq::soft(0, 0xFF)
    }
}

/// ICH_LR<n>_EL2.State.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LrState {
    Invalid,
    Pending,
    Active,
    PendingActive,
}

/// Encode one ICH_LR<n>_EL2 value (GICv3 spec 12.4.6). Group is always 1.
/// The EOI bit is only encoded for HW = 0: with HW = 1, bit 41 belongs to
/// pINTID.
pub fn encode_lr(irq: &VirtIrq, state: LrState) -> u64 {
    let mut value = u64::from(irq.intid) & LR_VINTID_MASK;
    value |= u64::from(irq.priority) << LR_PRIORITY_SHIFT;
    value |= LR_GROUP1;
    match irq.hw_intid {
        Some(pintid) => value |= LR_HW | (u64::from(pintid) & LR_PINTID_MASK) << LR_PINTID_SHIFT,
        None if irq.eoi_maintenance => value |= LR_EOI,
        None => {}
    }
    let state_bits: u64 = match state {
        LrState::Invalid => 0b00,
        LrState::Pending => 0b01,
        LrState::Active => 0b10,
        LrState::PendingActive => 0b11,
    };
    value | state_bits << LR_STATE_SHIFT
}

/// Decode an ICH_LR<n>_EL2 value. The Group bit is not reported: the
/// emulation only ever writes Group 1.
pub fn decode_lr(value: u64) -> (VirtIrq, LrState) {
    let hw = value & LR_HW != 0;
    let irq = VirtIrq {
        intid: (value & LR_VINTID_MASK) as u32,
        priority: (value >> LR_PRIORITY_SHIFT) as u8,
        hw_intid: hw.then_some(((value >> LR_PINTID_SHIFT) & LR_PINTID_MASK) as u32),
        eoi_maintenance: !hw && value & LR_EOI != 0,
    };
    (irq, state_of(value))
}

fn state_of(value: u64) -> LrState {
    match value >> LR_STATE_SHIFT {
        0b00 => LrState::Invalid,
        0b01 => LrState::Pending,
        0b10 => LrState::Active,
        _ => LrState::PendingActive,
    }
}

/// The list registers of the current vCPU. Arch code implements this over
/// ICH_LR<n>_EL2, ICH_ELRSR_EL2 and ICH_HCR_EL2; tests over a fake.
pub trait ListRegisters {
    /// Number of implemented list registers (ICH_VTR_EL2.ListRegs + 1).
    fn lr_count(&self) -> usize;
    /// Read ICH_LR<n>_EL2.
    fn read_lr(&self, n: usize) -> u64;
    /// Write ICH_LR<n>_EL2.
    fn write_lr(&mut self, n: usize, value: u64);
    /// ICH_ELRSR_EL2: bit n set when LR n holds no interrupt, that is State is
    /// Invalid and (HW == 1 or EOI == 0). An Invalid register whose EOI bit is
    /// still set is *not* empty: its maintenance is still owed.
    fn empty_lr_mask(&self) -> u16;
    /// Set or clear ICH_HCR_EL2.UIE (maintenance interrupt when at most one
    /// list register holds a valid interrupt). Called after every operation
    /// that may change the queue, so an implementation should cache
    /// ICH_HCR_EL2 rather than read-modify-write the system register.
    fn set_underflow_irq(&mut self, enable: bool);
}

/// Why an interrupt could not be injected.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InjectError {
    /// All list registers are busy and the overflow queue is full; the interrupt was not injected.
    QueueFull,
    /// The vINTID is not an SGI, PPI or SPI (INTID 1020 and above).
    InvalidIntid(u32),
    /// A HW-linked interrupt must name a physical PPI or SPI (INTID 16..1019).
    InvalidHwIntid(u32),
}

impl fmt::Display for InjectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InjectError::QueueFull => {
                f.write_str("all list registers are busy and the overflow queue is full")
            }
            InjectError::InvalidIntid(intid) => {
                write!(f, "vINTID {intid} is not an SGI, PPI or SPI")
            }
            InjectError::InvalidHwIntid(intid) => {
                write!(f, "pINTID {intid} cannot be HW-linked (not a PPI or SPI)")
            }
        }
    }
}

/// List-register allocation for one vCPU. Owned by that vCPU and touched
/// only on its own physical CPU; never allocates.
pub struct LrManager {
    /// What the manager last wrote to each list register, None if free.
    shadow: [Option<VirtIrq>; MAX_LR_COUNT],
    /// `shadow` as the Pending list-register value (0: free), kept by
    /// `set_shadow`, so that a hot path compares one word.
    shadow_key: [u64; MAX_LR_COUNT],
    /// Overflow queue in arrival order (FIFO among equal priorities).
    queue: [VirtIrq; QUEUE_CAPACITY],
    queue_len: usize,
    /// Per private INTID (0..31): the register it was last placed in, so
    /// that the next physical firing of a forwarded PPI goes straight back
    /// there (see [`LrManager::reinject_hw`]). A hint only: checked against
    /// `shadow_key` before use.
    last: [u8; 32],
    /// Implemented list registers, read once (0: not yet).
    count: u8,
}

impl Default for LrManager {
    fn default() -> Self {
        Self::new()
    }
}

impl LrManager {
    pub const fn new() -> Self {
        LrManager {
            shadow: [None; MAX_LR_COUNT],
            queue: [VirtIrq::placeholder(); QUEUE_CAPACITY],
            queue_len: 0,
            shadow_key: [0; MAX_LR_COUNT],
            last: [u8::MAX; 32],
            count: 0,
        }
    }

    /// The number of list registers, read from the hardware once.
    #[inline(always)]
    fn cached_count(&mut self, lrs: &impl ListRegisters) -> usize {
        if self.count == 0 {
            self.count = self.lr_count(lrs) as u8;
        }
        self.count as usize
    }

    /// Record what register `n` now holds (its Pending value `key`, 0 when
    /// free), and where a private interrupt went.
    #[inline(always)]
    fn record(&mut self, n: usize, irq: Option<VirtIrq>, key: u64) {
        self.shadow[n] = irq;
        self.shadow_key[n] = key;
        if let Some(irq) = irq {
            if irq.intid < 32 {
                self.last[irq.intid as usize] = n as u8;
            }
        }
    }

    fn set_shadow(&mut self, n: usize, irq: Option<VirtIrq>) {
        let key = irq.map_or(0, |irq| encode_lr(&irq, LrState::Pending));
        self.record(n, irq, key);
    }

    /// Inject a HW-linked private interrupt whose physical instance just
    /// fired (a forwarded timer or PMU PPI). The physical GIC signals it
    /// again only after the guest deactivated the previous instance through
    /// its list register, so that register is now empty. When nothing is
    /// queued and the register last used for `irq` is empty and still holds
    /// this same interrupt (same priority: one word compared), it is written
    /// there again: one ICH_ELRSR read and one list-register write, no scan.
    /// Anything else takes [`LrManager::inject`].
    #[inline(always)]
    pub fn reinject_hw(
        &mut self,
        lrs: &mut impl ListRegisters,
        irq: VirtIrq,
    ) -> Result<(), InjectError> {
        let slot = (irq.intid & 31) as usize;
        let n = self.last[slot] as usize;
        let value = encode_lr(&irq, LrState::Pending);
        if self.queue_len == 0
            && irq.intid < 32
            && n < MAX_LR_COUNT
            && self.shadow_key[n] == value
            && lrs.empty_lr_mask() & bit(n) != 0
        {
            lrs.write_lr(n, value);
            return Ok(());
        }
        // Scalars, not the struct: nothing of it is spilled on the fast path.
        let hw = irq.hw_intid.map_or(u32::MAX, |h| h);
        self.reinject_placing(lrs, irq.intid, irq.priority, hw, irq.eoi_maintenance)
    }

    #[inline(never)]
    fn reinject_placing(
        &mut self,
        lrs: &mut impl ListRegisters,
        intid: u32,
        priority: u8,
        hw: u32,
        eoi_maintenance: bool,
    ) -> Result<(), InjectError> {
        let irq = VirtIrq {
            intid,
            priority,
            hw_intid: (hw != u32::MAX).then_some(hw),
            eoi_maintenance,
        };
        // `record` keeps `last` pointing at wherever it goes.
        self.inject(lrs, irq)
    }

    /// Number of interrupts waiting for a free list register.
    pub fn queued(&self) -> usize {
        self.queue_len
    }

    /// Make `irq` pending for this vCPU.
    ///
    /// - Already pending in a list register or queued: nothing to do.
    /// - Active in a list register: a software interrupt becomes
    ///   Pending+Active; a HW-linked one is left alone, because the physical
    ///   GIC keeps its pending state and signals it again after the guest's
    ///   deactivation (KVM makes the same choice: a HW-linked list register
    ///   never holds Pending+Active).
    /// - A free list register: used.
    /// - All busy: if `irq` is more urgent (numerically lower priority) than
    ///   the least urgent register that is only Pending, that one is moved to
    ///   the queue and `irq` takes its place; otherwise `irq` is queued.
    ///
    /// ICH_HCR_EL2.UIE is on exactly while the queue is non-empty.
    #[inline(always)]
    pub fn inject(
        &mut self,
        lrs: &mut impl ListRegisters,
        irq: VirtIrq,
    ) -> Result<(), InjectError> {
        // The common case, decided from the shadow keys alone: nothing
        // queued, and either no register holds this vINTID (take the lowest
        // empty one) or the one that does has been completed and is empty
        // (reuse it). Same outcome as the general path below, without its
        // scans; UIE stays off because the queue stays empty.
        if self.queue_len == 0 && valid_vintid(irq.intid) && irq.hw_intid.is_none() {
            let count = self.cached_count(lrs);
            let empty = lrs.empty_lr_mask();
            let held = (0..count).find(|&n| {
                let key = self.shadow_key[n];
                key != 0 && key & LR_VINTID_MASK == u64::from(irq.intid)
            });
            let usable = empty & count_mask(count);
            let target = match held {
                None if usable != 0 => Some(usable.trailing_zeros() as usize),
                Some(n) if usable & bit(n) != 0 => Some(n),
                _ => None,
            };
            if let Some(n) = target {
                self.place(lrs, n, irq);
                return Ok(());
            }
        }
        self.inject_general(lrs, irq)
    }

    /// [`LrManager::inject`] for everything but the common case: validity,
    /// instances already held, the queue, eviction.
    #[inline(never)]
    fn inject_general(
        &mut self,
        lrs: &mut impl ListRegisters,
        irq: VirtIrq,
    ) -> Result<(), InjectError> {
        if !valid_vintid(irq.intid) {
            return Err(InjectError::InvalidIntid(irq.intid));
        }
        if let Some(pintid) = irq.hw_intid {
            if !(16..INTID_LIMIT).contains(&pintid) {
                return Err(InjectError::InvalidHwIntid(pintid));
            }
        }
        let count = self.lr_count(lrs);
        let mut empty = lrs.empty_lr_mask();

        if let Some(n) = self.lr_holding(count, irq.intid) {
            let (current, state) = decode_lr(lrs.read_lr(n));
            match state {
                LrState::Pending | LrState::PendingActive => return Ok(()),
                LrState::Active => {
                    if current.hw_intid.is_none() {
                        let shadowed = self.shadow[n].unwrap_or(current);
                        lrs.write_lr(n, encode_lr(&shadowed, LrState::PendingActive));
                    }
                    return Ok(());
                }
                LrState::Invalid if empty & bit(n) == 0 => {
                    // Deactivated, EOI maintenance not yet collected. Reuse
                    // the register in place rather than put the same vINTID in
                    // a second one; the pending report of the old instance is
                    // folded into the new one, whose EOI will report in turn.
                    let mut merged = irq;
                    if merged.hw_intid.is_none() {
                        merged.eoi_maintenance = true;
                    }
                    self.place(lrs, n, merged);
                    return Ok(());
                }
                LrState::Invalid => {
                    // Done and nothing owed: free, fall through.
                    self.set_shadow(n, None);
                }
            }
        }
        if self.queue_position(irq.intid).is_some() {
            return Ok(());
        }

        if let Some(n) = self.free_lr(count, empty) {
            self.place(lrs, n, irq);
            empty &= !bit(n);
            self.refill(lrs, count, empty);
        } else {
            match self.eviction_victim(lrs, count) {
                Some((n, victim)) if irq.priority < victim.priority => {
                    self.push(victim)?;
                    self.place(lrs, n, irq);
                }
                _ => self.push(irq)?,
            }
        }
        self.update_underflow(lrs);
        Ok(())
    }

    /// Maintenance: collect list registers the guest has finished with
    /// (reporting the vINTIDs that asked for EOI maintenance through
    /// `eoied`), refill free registers from the queue in priority order, and
    /// update ICH_HCR_EL2.UIE. Safe to call at any time, e.g. on every exit.
    pub fn maintenance(&mut self, lrs: &mut impl ListRegisters, eoied: &mut impl FnMut(u32)) {
        let count = self.lr_count(lrs);
        let mut empty = lrs.empty_lr_mask();
        for n in 0..count {
            let Some(held) = self.shadow[n] else { continue };
            if empty & bit(n) != 0 {
                self.set_shadow(n, None);
                continue;
            }
            if state_of(lrs.read_lr(n)) == LrState::Invalid {
                // Invalid but not empty: EOI == 1 (GICv3 spec 12.4.7). Clear
                // the register, or its ICH_EISR_EL2 bit keeps the maintenance
                // interrupt asserted.
                if held.eoi_maintenance {
                    eoied(held.intid);
                }
                lrs.write_lr(n, 0);
                self.set_shadow(n, None);
                empty |= bit(n);
            }
        }
        self.refill(lrs, count, empty);
        self.update_underflow(lrs);
    }

    /// Withdraw a pending instance of `intid` (an emulated level line was
    /// lowered, or the guest cleared the pending state): Pending becomes
    /// free, Pending+Active becomes Active, a queued instance is dropped.
    /// An Active instance is left for the guest to complete. HW-linked
    /// instances are never withdrawn: the physical interrupt is active at
    /// the physical GIC and only the guest's deactivation through the list
    /// register ends that.
    pub fn retract(&mut self, lrs: &mut impl ListRegisters, intid: u32) {
        let count = self.lr_count(lrs);
        let mut empty = lrs.empty_lr_mask();
        if let Some(n) = self.lr_holding(count, intid) {
            let (current, state) = decode_lr(lrs.read_lr(n));
            if current.hw_intid.is_none() {
                match state {
                    LrState::Pending => {
                        lrs.write_lr(n, 0);
                        self.set_shadow(n, None);
                        empty |= bit(n);
                    }
                    LrState::PendingActive => {
                        let shadowed = self.shadow[n].unwrap_or(current);
                        lrs.write_lr(n, encode_lr(&shadowed, LrState::Active));
                    }
                    LrState::Active | LrState::Invalid => {}
                }
            }
        }
        if let Some(i) = self.queue_position(intid) {
            if self.queue[i].hw_intid.is_none() {
                self.remove(i);
            }
        }
        self.refill(lrs, count, empty);
        self.update_underflow(lrs);
    }

    /// Pending and active state of the SGIs and PPIs (INTID < 32) this
    /// manager holds, in list registers or queued (queued counts as pending).
    pub fn private_bits(&self, lrs: &impl ListRegisters) -> crate::irqchip::PpiBits {
        let mut bits = crate::irqchip::PpiBits::default();
        let count = self.lr_count(lrs);
        let empty = lrs.empty_lr_mask();
        for n in 0..count {
            let Some(held) = self.shadow[n] else { continue };
            if held.intid >= 32 || empty & bit(n) != 0 {
                continue;
            }
            match state_of(lrs.read_lr(n)) {
                LrState::Pending => bits.pending |= 1 << held.intid,
                LrState::Active => bits.active |= 1 << held.intid,
                LrState::PendingActive => {
                    bits.pending |= 1 << held.intid;
                    bits.active |= 1 << held.intid;
                }
                LrState::Invalid => {}
            }
        }
        for irq in &self.queue[..self.queue_len] {
            if irq.intid < 32 {
                bits.pending |= 1 << irq.intid;
            }
        }
        bits
    }

    /// Empty every list register and the queue (vCPU reset or teardown).
    /// HW-linked interrupts are dropped too; use
    /// [`LrManager::clear_reporting_hw`] when their physical interrupts must
    /// then be deactivated.
    pub fn clear(&mut self, lrs: &mut impl ListRegisters) {
        self.clear_reporting_hw(lrs, &mut |_| {});
    }

    /// [`LrManager::clear`], reporting the pINTID of every HW-linked interrupt
    /// dropped while Pending or Active: the physical interrupt stays active at
    /// the physical GIC until someone deactivates it.
    pub fn clear_reporting_hw(
        &mut self,
        lrs: &mut impl ListRegisters,
        hw_dropped: &mut impl FnMut(u32),
    ) {
        let count = self.lr_count(lrs);
        for n in 0..count {
            let (current, state) = decode_lr(lrs.read_lr(n));
            if let (Some(pintid), true) = (current.hw_intid, state != LrState::Invalid) {
                hw_dropped(pintid);
            }
            lrs.write_lr(n, 0);
            self.set_shadow(n, None);
        }
        for irq in &self.queue[..self.queue_len] {
            if let Some(pintid) = irq.hw_intid {
                hw_dropped(pintid);
            }
        }
        self.queue_len = 0;
        lrs.set_underflow_irq(false);
    }

    fn lr_count(&self, lrs: &impl ListRegisters) -> usize {
        lrs.lr_count().min(MAX_LR_COUNT)
    }

    fn lr_holding(&self, count: usize, intid: u32) -> Option<usize> {
        (0..count).find(|&n| matches!(self.shadow[n], Some(held) if held.intid == intid))
    }

    fn free_lr(&self, count: usize, empty: u16) -> Option<usize> {
        (0..count).find(|&n| self.shadow[n].is_none() || empty & bit(n) != 0)
    }

    /// The least urgent list register that is only Pending (ties: the
    /// highest-numbered), as (register, interrupt).
    fn eviction_victim(&self, lrs: &impl ListRegisters, count: usize) -> Option<(usize, VirtIrq)> {
        let mut victim: Option<(usize, VirtIrq)> = None;
        for n in 0..count {
            let Some(held) = self.shadow[n] else { continue };
            if state_of(lrs.read_lr(n)) != LrState::Pending {
                continue;
            }
            if victim.is_none_or(|(_, v)| held.priority >= v.priority) {
                victim = Some((n, held));
            }
        }
        victim
    }

    #[inline(always)]
    fn place(&mut self, lrs: &mut impl ListRegisters, n: usize, irq: VirtIrq) {
        let value = encode_lr(&irq, LrState::Pending);
        lrs.write_lr(n, value);
        self.record(n, Some(irq), value);
    }

    /// Move queued interrupts into free list registers, most urgent first.
    fn refill(&mut self, lrs: &mut impl ListRegisters, count: usize, mut empty: u16) {
        while self.queue_len > 0 {
            let Some(n) = self.free_lr(count, empty) else {
                return;
            };
            let Some(i) = self.most_urgent_queued() else {
                return;
            };
            let irq = self.remove(i);
            self.place(lrs, n, irq);
            empty &= !bit(n);
        }
    }

    /// Index of the queued interrupt with the lowest priority value; the
    /// earliest queued wins a tie.
    fn most_urgent_queued(&self) -> Option<usize> {
        let mut best: Option<usize> = None;
        for (i, irq) in self.queue[..self.queue_len].iter().enumerate() {
            if best.is_none_or(|b| irq.priority < self.queue[b].priority) {
                best = Some(i);
            }
        }
        best
    }

    fn queue_position(&self, intid: u32) -> Option<usize> {
        self.queue[..self.queue_len]
            .iter()
            .position(|q| q.intid == intid)
    }

    fn push(&mut self, irq: VirtIrq) -> Result<(), InjectError> {
        let slot = self
            .queue
            .get_mut(self.queue_len)
            .ok_or(InjectError::QueueFull)?;
        *slot = irq;
        self.queue_len += 1;
        Ok(())
    }

    fn remove(&mut self, i: usize) -> VirtIrq {
        let irq = self.queue[i];
        self.queue.copy_within(i + 1..self.queue_len, i);
        self.queue_len -= 1;
        irq
    }

    fn update_underflow(&self, lrs: &mut impl ListRegisters) {
        lrs.set_underflow_irq(self.queue_len > 0);
    }
}

const fn bit(n: usize) -> u16 {
    1 << n
}

/// The ICH_ELRSR bits of `count` implemented registers.
const fn count_mask(count: usize) -> u16 {
    if count >= 16 {
        u16::MAX
    } else {
        (1 << count) - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    /// One fake list register, stored decoded (not in the ICH_LR layout), so
    /// the manager cannot lean on its own encoding being read back verbatim.
    #[derive(Clone, Copy, Default, Debug)]
    struct FakeSlot {
        pending: bool,
        active: bool,
        vintid: u32,
        pintid: u32,
        hw: bool,
        eoi: bool,
        priority: u8,
        group1: bool,
    }

    /// Four list registers, as QEMU implements, with ICH_ELRSR_EL2 derived
    /// from their state the way the architecture defines it.
    struct FakeLrs {
        slots: [FakeSlot; 4],
        uie: bool,
        physically_deactivated: Vec<u32>,
        /// List-register writes and reads so far.
        writes: usize,
        reads: core::cell::Cell<usize>,
    }

    impl FakeLrs {
        fn new() -> Self {
            FakeLrs {
                slots: [FakeSlot::default(); 4],
                uie: false,
                physically_deactivated: Vec::new(),
                writes: 0,
                reads: core::cell::Cell::new(0),
            }
        }

        fn slot_of(&self, vintid: u32) -> Option<usize> {
            self.slots
                .iter()
                .position(|s| (s.pending || s.active) && s.vintid == vintid)
        }

        /// The guest reads ICC_IAR1_EL1 and gets `vintid`.
        fn ack(&mut self, vintid: u32) {
            let n = self.slot_of(vintid).expect("acked interrupt is in an LR");
            assert!(self.slots[n].pending, "acked interrupt is pending");
            self.slots[n].pending = false;
            self.slots[n].active = true;
        }

        /// The guest deactivates `vintid` (ICC_EOIR1_EL1 with EOImode 0).
        fn deactivate(&mut self, vintid: u32) {
            let n = self
                .slots
                .iter()
                .position(|s| s.active && s.vintid == vintid)
                .expect("active");
            self.slots[n].active = false;
            if self.slots[n].hw {
                self.physically_deactivated.push(self.slots[n].pintid);
            }
        }

        fn complete(&mut self, vintid: u32) {
            self.ack(vintid);
            self.deactivate(vintid);
        }

        fn valid_intids(&self) -> Vec<u32> {
            let mut v: Vec<u32> = self
                .slots
                .iter()
                .filter(|s| s.pending || s.active)
                .map(|s| s.vintid)
                .collect();
            v.sort();
            v
        }

        fn pending_intids(&self) -> Vec<u32> {
            let mut v: Vec<u32> = self
                .slots
                .iter()
                .filter(|s| s.pending)
                .map(|s| s.vintid)
                .collect();
            v.sort();
            v
        }
    }

    impl ListRegisters for FakeLrs {
        fn lr_count(&self) -> usize {
            self.slots.len()
        }

        fn read_lr(&self, n: usize) -> u64 {
            self.reads.set(self.reads.get() + 1);
            let s = &self.slots[n];
            let mut v = u64::from(s.vintid);
            if s.hw {
                v |= 1 << 61 | u64::from(s.pintid) << 32;
            } else if s.eoi {
                v |= 1 << 41;
            }
            v |= u64::from(s.priority) << 48;
            if s.group1 {
                v |= 1 << 60;
            }
            if s.pending {
                v |= 1 << 62;
            }
            if s.active {
                v |= 1 << 63;
            }
            v
        }

        fn write_lr(&mut self, n: usize, v: u64) {
            self.writes += 1;
            let hw = v >> 61 & 1 == 1;
            self.slots[n] = FakeSlot {
                pending: v >> 62 & 1 == 1,
                active: v >> 63 & 1 == 1,
                vintid: v as u32,
                pintid: if hw { (v >> 32) as u32 & 0x1FFF } else { 0 },
                hw,
                eoi: !hw && v >> 41 & 1 == 1,
                priority: (v >> 48) as u8,
                group1: v >> 60 & 1 == 1,
            };
        }

        fn empty_lr_mask(&self) -> u16 {
            let mut mask = 0;
            for (n, s) in self.slots.iter().enumerate() {
                if !s.pending && !s.active && (s.hw || !s.eoi) {
                    mask |= 1 << n;
                }
            }
            mask
        }

        fn set_underflow_irq(&mut self, enable: bool) {
            self.uie = enable;
        }
    }

    fn irq(intid: u32, priority: u8) -> VirtIrq {
        VirtIrq::soft(intid, priority)
    }

    fn no_eoi() -> impl FnMut(u32) {
        |intid| panic!("unexpected EOI report for {intid}")
    }

    #[test]
    fn encode_lr_of_vtimer_links_vintid_27_to_pintid_27() {
        let timer = VirtIrq::hw_linked(27, 0xA0);

        let value = encode_lr(&timer, LrState::Pending);

        let expected = 27 | 27 << 32 | 0xA0 << 48 | 1 << 60 | 1 << 61 | 1 << 62;
        assert_eq!(value, expected);
    }

    #[test]
    fn encode_lr_sets_eoi_bit_41_only_for_software_interrupts() {
        let soft = VirtIrq {
            eoi_maintenance: true,
            ..irq(33, 0x80)
        };

        let value = encode_lr(&soft, LrState::Active);

        assert_eq!(value, 33 | 1 << 41 | 0x80 << 48 | 1 << 60 | 2 << 62);
    }

    #[test]
    fn decode_lr_round_trips_every_state_and_kind() {
        let kinds = [
            irq(3, 0x10),
            VirtIrq {
                eoi_maintenance: true,
                ..irq(33, 0xA0)
            },
            VirtIrq::hw_linked(30, 0xF8),
            VirtIrq {
                hw_intid: Some(600),
                ..irq(40, 0)
            },
        ];
        let states = [
            LrState::Invalid,
            LrState::Pending,
            LrState::Active,
            LrState::PendingActive,
        ];
        for k in kinds {
            for s in states {
                assert_eq!(decode_lr(encode_lr(&k, s)), (k, s));
            }
        }
    }

    #[test]
    fn inject_into_free_lr_writes_pending_group1() {
        let mut lrs = FakeLrs::new();
        let mut m = LrManager::new();

        m.inject(&mut lrs, irq(33, 0xA0)).unwrap();

        let s = lrs.slots[lrs.slot_of(33).unwrap()];
        assert!(s.pending && !s.active && s.group1 && !s.hw);
        assert_eq!(s.priority, 0xA0);
        assert!(!lrs.uie);
    }

    #[test]
    fn inject_of_already_pending_interrupt_is_a_no_op() {
        let mut lrs = FakeLrs::new();
        let mut m = LrManager::new();
        m.inject(&mut lrs, irq(5, 0xA0)).unwrap();

        m.inject(&mut lrs, irq(5, 0xA0)).unwrap();

        assert_eq!(lrs.valid_intids(), [5]);
        assert_eq!(m.queued(), 0);
    }

    #[test]
    fn inject_of_already_queued_interrupt_is_a_no_op() {
        let mut lrs = FakeLrs::new();
        let mut m = LrManager::new();
        for i in 0..5 {
            m.inject(&mut lrs, irq(40 + i, 0xA0)).unwrap();
        }

        m.inject(&mut lrs, irq(44, 0xA0)).unwrap();

        assert_eq!(m.queued(), 1);
    }

    #[test]
    fn inject_of_active_software_interrupt_makes_it_pending_active() {
        let mut lrs = FakeLrs::new();
        let mut m = LrManager::new();
        m.inject(&mut lrs, irq(1, 0xA0)).unwrap();
        lrs.ack(1);

        m.inject(&mut lrs, irq(1, 0xA0)).unwrap();

        let s = lrs.slots[lrs.slot_of(1).unwrap()];
        assert!(s.pending && s.active);
        assert_eq!(lrs.valid_intids(), [1]);
    }

    #[test]
    fn inject_of_active_hw_interrupt_leaves_it_active() {
        let mut lrs = FakeLrs::new();
        let mut m = LrManager::new();
        m.inject(&mut lrs, VirtIrq::hw_linked(27, 0xA0)).unwrap();
        lrs.ack(27);

        m.inject(&mut lrs, VirtIrq::hw_linked(27, 0xA0)).unwrap();

        let s = lrs.slots[lrs.slot_of(27).unwrap()];
        assert!(!s.pending && s.active);
        assert_eq!(m.queued(), 0);
    }

    #[test]
    fn hw_linked_timer_deactivation_deactivates_pintid() {
        let mut lrs = FakeLrs::new();
        let mut m = LrManager::new();
        m.inject(&mut lrs, VirtIrq::hw_linked(27, 0xA0)).unwrap();

        lrs.complete(27);

        assert_eq!(lrs.physically_deactivated, [27]);
    }

    #[test]
    fn lr_overflow_when_five_pending_uses_underflow_maintenance() {
        let mut lrs = FakeLrs::new();
        let mut m = LrManager::new();
        for i in 0..5 {
            m.inject(&mut lrs, irq(40 + i, 0xA0)).unwrap();
        }
        assert_eq!((m.queued(), lrs.uie), (1, true));
        for i in 0..4 {
            lrs.complete(40 + i);
        }

        m.maintenance(&mut lrs, &mut no_eoi());

        assert_eq!(lrs.valid_intids(), [44]);
        assert_eq!((m.queued(), lrs.uie), (0, false));
    }

    #[test]
    fn more_urgent_interrupt_evicts_least_urgent_pending_lr() {
        let mut lrs = FakeLrs::new();
        let mut m = LrManager::new();
        for (intid, prio) in [(40, 0x80), (41, 0xC0), (42, 0x90), (43, 0xA0)] {
            m.inject(&mut lrs, irq(intid, prio)).unwrap();
        }

        m.inject(&mut lrs, irq(50, 0x20)).unwrap();

        assert_eq!(lrs.valid_intids(), [40, 42, 43, 50]);
        assert_eq!((m.queued(), lrs.uie), (1, true));
    }

    #[test]
    fn less_urgent_interrupt_is_queued_without_eviction() {
        let mut lrs = FakeLrs::new();
        let mut m = LrManager::new();
        for i in 0..4 {
            m.inject(&mut lrs, irq(40 + i, 0x80)).unwrap();
        }

        m.inject(&mut lrs, irq(50, 0x80)).unwrap();

        assert_eq!(lrs.valid_intids(), [40, 41, 42, 43]);
        assert_eq!(m.queued(), 1);
    }

    #[test]
    fn eviction_never_takes_an_active_lr() {
        let mut lrs = FakeLrs::new();
        let mut m = LrManager::new();
        for i in 0..4 {
            m.inject(&mut lrs, irq(40 + i, 0xF0)).unwrap();
            lrs.ack(40 + i);
        }

        m.inject(&mut lrs, irq(50, 0x00)).unwrap();

        assert_eq!(lrs.valid_intids(), [40, 41, 42, 43]);
        assert_eq!(m.queued(), 1);
    }

    #[test]
    fn refill_takes_queued_interrupts_in_priority_order_fifo_on_ties() {
        let mut lrs = FakeLrs::new();
        let mut m = LrManager::new();
        for i in 0..4 {
            m.inject(&mut lrs, irq(40 + i, 0x00)).unwrap();
        }
        for (intid, prio) in [(60, 0xC0), (61, 0x40), (62, 0x80), (63, 0x40)] {
            m.inject(&mut lrs, irq(intid, prio)).unwrap();
        }
        lrs.complete(40);
        lrs.complete(41);

        m.maintenance(&mut lrs, &mut no_eoi());

        assert_eq!(lrs.pending_intids(), [42, 43, 61, 63]);
        lrs.complete(42);
        m.maintenance(&mut lrs, &mut no_eoi());
        assert_eq!(lrs.pending_intids(), [43, 61, 62, 63]);
        assert_eq!(m.queued(), 1);
    }

    #[test]
    fn maintenance_reports_eoi_and_frees_the_lr() {
        let mut lrs = FakeLrs::new();
        let mut m = LrManager::new();
        m.inject(
            &mut lrs,
            VirtIrq {
                eoi_maintenance: true,
                ..irq(33, 0xA0)
            },
        )
        .unwrap();
        lrs.complete(33);
        assert_eq!(lrs.empty_lr_mask() & 1, 0, "EOI still owed");
        let mut reported = Vec::new();

        m.maintenance(&mut lrs, &mut |i| reported.push(i));

        assert_eq!(reported, [33]);
        assert_eq!(lrs.empty_lr_mask(), 0b1111);
    }

    #[test]
    fn maintenance_without_eoi_request_reports_nothing() {
        let mut lrs = FakeLrs::new();
        let mut m = LrManager::new();
        m.inject(&mut lrs, irq(3, 0xA0)).unwrap();
        lrs.complete(3);
        let mut reported = Vec::new();

        m.maintenance(&mut lrs, &mut |i| reported.push(i));

        assert!(reported.is_empty());
    }

    #[test]
    fn reinject_before_eoi_collected_reuses_the_same_lr() {
        let mut lrs = FakeLrs::new();
        let mut m = LrManager::new();
        m.inject(
            &mut lrs,
            VirtIrq {
                eoi_maintenance: true,
                ..irq(33, 0xA0)
            },
        )
        .unwrap();
        lrs.complete(33);

        m.inject(
            &mut lrs,
            VirtIrq {
                eoi_maintenance: true,
                ..irq(33, 0xA0)
            },
        )
        .unwrap();

        assert_eq!(lrs.slots.iter().filter(|s| s.vintid == 33).count(), 1);
        assert_eq!(lrs.pending_intids(), [33]);
    }

    #[test]
    fn retract_frees_pending_lr_and_refills_from_queue() {
        let mut lrs = FakeLrs::new();
        let mut m = LrManager::new();
        for i in 0..5 {
            m.inject(&mut lrs, irq(40 + i, 0xA0)).unwrap();
        }

        m.retract(&mut lrs, 41);

        assert_eq!(lrs.valid_intids(), [40, 42, 43, 44]);
        assert_eq!((m.queued(), lrs.uie), (0, false));
    }

    #[test]
    fn retract_leaves_an_active_interrupt_alone() {
        let mut lrs = FakeLrs::new();
        let mut m = LrManager::new();
        m.inject(&mut lrs, irq(33, 0xA0)).unwrap();
        lrs.ack(33);

        m.retract(&mut lrs, 33);

        assert!(lrs.slots[lrs.slot_of(33).unwrap()].active);
    }

    #[test]
    fn retract_of_pending_active_keeps_it_active() {
        let mut lrs = FakeLrs::new();
        let mut m = LrManager::new();
        m.inject(&mut lrs, irq(33, 0xA0)).unwrap();
        lrs.ack(33);
        m.inject(&mut lrs, irq(33, 0xA0)).unwrap();

        m.retract(&mut lrs, 33);

        let s = lrs.slots[lrs.slot_of(33).unwrap()];
        assert!(s.active && !s.pending);
    }

    #[test]
    fn retract_drops_a_queued_instance() {
        let mut lrs = FakeLrs::new();
        let mut m = LrManager::new();
        for i in 0..5 {
            m.inject(&mut lrs, irq(40 + i, 0xA0)).unwrap();
        }

        m.retract(&mut lrs, 44);

        assert_eq!((m.queued(), lrs.uie), (0, false));
    }

    #[test]
    fn retract_never_drops_a_hw_linked_interrupt() {
        let mut lrs = FakeLrs::new();
        let mut m = LrManager::new();
        m.inject(&mut lrs, VirtIrq::hw_linked(30, 0xA0)).unwrap();

        m.retract(&mut lrs, 30);

        assert_eq!(lrs.pending_intids(), [30]);
    }

    #[test]
    fn clear_empties_lrs_and_queue_and_reports_hw_links() {
        let mut lrs = FakeLrs::new();
        let mut m = LrManager::new();
        m.inject(&mut lrs, VirtIrq::hw_linked(27, 0x00)).unwrap();
        for i in 0..4 {
            m.inject(&mut lrs, irq(40 + i, 0xA0)).unwrap();
        }
        let mut dropped = Vec::new();

        m.clear_reporting_hw(&mut lrs, &mut |p| dropped.push(p));

        assert_eq!(dropped, [27]);
        assert!(lrs.valid_intids().is_empty());
        assert_eq!((m.queued(), lrs.uie), (0, false));
    }

    #[test]
    fn inject_fails_when_queue_is_full() {
        let mut lrs = FakeLrs::new();
        let mut m = LrManager::new();
        let total = 4 + QUEUE_CAPACITY as u32;
        for i in 0..total {
            m.inject(&mut lrs, irq(32 + i, 0xA0)).unwrap();
        }

        let result = m.inject(&mut lrs, irq(32 + total, 0xA0));

        assert_eq!(result, Err(InjectError::QueueFull));
        assert_eq!(m.queued(), QUEUE_CAPACITY);
    }

    #[test]
    fn inject_rejects_special_intids_and_hw_linked_sgis() {
        let mut lrs = FakeLrs::new();
        let mut m = LrManager::new();

        let special = m.inject(&mut lrs, irq(1023, 0));
        let hw_sgi = m.inject(
            &mut lrs,
            VirtIrq {
                hw_intid: Some(1),
                ..irq(1, 0)
            },
        );

        assert_eq!(special, Err(InjectError::InvalidIntid(1023)));
        assert_eq!(hw_sgi, Err(InjectError::InvalidHwIntid(1)));
        assert!(lrs.valid_intids().is_empty());
    }

    #[test]
    fn a_refired_hw_ppi_goes_back_into_its_register_with_one_write() {
        let mut lrs = FakeLrs::new();
        let mut m = LrManager::new();
        let timer = VirtIrq::hw_linked(27, 0xa0);
        m.reinject_hw(&mut lrs, timer).unwrap();
        let first = lrs.read_lr(0);
        assert_eq!(decode_lr(first), (timer, LrState::Pending));
        // The guest takes and deactivates it: the register empties.
        lrs.complete(27);
        lrs.writes = 0;
        lrs.reads.set(0);

        m.reinject_hw(&mut lrs, timer).unwrap();

        assert_eq!(
            (lrs.writes, lrs.reads.get()),
            (1, 0),
            "one list-register write, no scan"
        );
        assert_eq!(lrs.read_lr(0), first);
    }

    #[test]
    fn a_refired_hw_ppi_whose_register_was_reused_takes_the_general_path() {
        let mut lrs = FakeLrs::new();
        let mut m = LrManager::new();
        let timer = VirtIrq::hw_linked(27, 0xa0);
        m.reinject_hw(&mut lrs, timer).unwrap();
        lrs.complete(27);
        // Register 0 now goes to someone else.
        m.inject(&mut lrs, irq(1, 0x80)).unwrap();
        assert_eq!(decode_lr(lrs.read_lr(0)).0.intid, 1);

        m.reinject_hw(&mut lrs, timer).unwrap();

        assert_eq!(lrs.valid_intids(), [1, 27], "the SGI is kept");
        assert_eq!(decode_lr(lrs.read_lr(1)), (timer, LrState::Pending));
    }

    #[test]
    fn a_refired_hw_ppi_with_a_new_priority_is_written_with_it() {
        let mut lrs = FakeLrs::new();
        let mut m = LrManager::new();
        m.reinject_hw(&mut lrs, VirtIrq::hw_linked(27, 0xa0))
            .unwrap();
        lrs.complete(27);

        let urgent = VirtIrq::hw_linked(27, 0x20);
        m.reinject_hw(&mut lrs, urgent).unwrap();

        assert_eq!(decode_lr(lrs.read_lr(0)), (urgent, LrState::Pending));
    }

    #[test]
    fn a_refired_hw_ppi_whose_register_is_still_busy_is_not_duplicated() {
        let mut lrs = FakeLrs::new();
        let mut m = LrManager::new();
        let timer = VirtIrq::hw_linked(27, 0xa0);
        m.reinject_hw(&mut lrs, timer).unwrap();
        // Still pending (not taken): the fast path must not write it again
        // elsewhere, nor treat the register as free.
        m.reinject_hw(&mut lrs, timer).unwrap();

        assert_eq!(lrs.valid_intids(), [27]);
    }
}
