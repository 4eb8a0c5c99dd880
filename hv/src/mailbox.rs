//! The per-CPU mailbox other CPUs post virtual-interrupt work to before they
//! send the owning CPU an SGI. Lock-free, and drained in O(pending): one
//! doorbell word says what is there. A sibling vCPU's SGI is a bit of the
//! doorbell (an SGI is a pending state, as on a GIC: two posts of one SGI
//! before the owner looks are one interrupt); any other operation is one
//! atomic word in a slot, which a producer claims with compare-and-swap
//! (0 = empty) and then announces with the slot's doorbell bit. The owner
//! takes the doorbell with one swap and empties only the slots it names, so
//! no CPU ever waits for another and an idle mailbox costs one load.

use crate::bits::ones;
use crate::vgic::lr::VirtIrq;
use core::sync::atomic::{AtomicU64, Ordering};

/// What one CPU asks of another CPU's vCPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MailboxOp {
    /// Inject this interrupt (an emulated or pass-through SPI).
    Inject(VirtIrq),
    /// Take back a pending, not yet active instance (a level line dropped).
    Retract(u32),
    /// An SGI from a sibling vCPU: the receiver applies its own
    /// redistributor's enable and priority.
    Sgi(u32),
    /// The guest invalidated this vLPI's configuration (ITS INV/INVALL):
    /// the receiver re-checks it on its redistributor (`lpi_recheck`).
    LpiRecheck(u32),
}

const OP_INJECT: u64 = 1;
const OP_RETRACT: u64 = 2;
const OP_SGI: u64 = 3;
const OP_LPI_RECHECK: u64 = 4;
const INTID_MASK: u64 = 0x1fff;
const HW_VALID: u64 = 1 << 48;
const EOI_MAINTENANCE: u64 = 1 << 49;

impl MailboxOp {
    /// One non-zero word: op in bits 7:0, vINTID 20:8, priority 31:24,
    /// pINTID 44:32 with its valid bit 48, EOI maintenance bit 49.
    pub fn encode(self) -> u64 {
        match self {
            MailboxOp::Inject(irq) => {
                OP_INJECT
                    | (irq.intid as u64 & INTID_MASK) << 8
                    | (irq.priority as u64) << 24
                    | irq
                        .hw_intid
                        .map_or(0, |h| ((h as u64 & INTID_MASK) << 32) | HW_VALID)
                    | if irq.eoi_maintenance {
                        EOI_MAINTENANCE
                    } else {
                        0
                    }
            }
            MailboxOp::Retract(intid) => OP_RETRACT | (intid as u64 & INTID_MASK) << 8,
            MailboxOp::Sgi(intid) => OP_SGI | (intid as u64 & INTID_MASK) << 8,
            // vLPIs go beyond INTID_MASK: the whole 32 bits.
            MailboxOp::LpiRecheck(vintid) => OP_LPI_RECHECK | (vintid as u64) << 8,
        }
    }

    /// The operation a word encodes; None for an empty or foreign word.
    pub fn decode(v: u64) -> Option<MailboxOp> {
        let intid = ((v >> 8) & INTID_MASK) as u32;
        match v & 0xff {
            OP_INJECT => Some(MailboxOp::Inject(VirtIrq {
                intid,
                priority: (v >> 24) as u8,
                hw_intid: (v & HW_VALID != 0).then_some(((v >> 32) & INTID_MASK) as u32),
                eoi_maintenance: v & EOI_MAINTENANCE != 0,
            })),
            OP_RETRACT => Some(MailboxOp::Retract(intid)),
            OP_SGI => Some(MailboxOp::Sgi(intid)),
            OP_LPI_RECHECK => Some(MailboxOp::LpiRecheck((v >> 8) as u32)),
            _ => None,
        }
    }
}

/// Doorbell bits 0..15: SGI INTIDs posted by sibling vCPUs.
const DOORBELL_SGIS: u64 = 0xffff;
/// Doorbell bit of slot `i`.
const fn slot_bit(i: usize) -> u64 {
    1 << (32 + i)
}

/// What a take of the doorbell found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Doorbell(u64);

impl Doorbell {
    /// `f` for the INTID of each SGI posted, lowest first.
    #[inline(always)]
    pub fn for_each_sgi(self, mut f: impl FnMut(u32)) {
        // The 32-bit form of `bits::ones`: on the mailbox kick's path it is
        // two instructions shorter per SGI than the iterator.
        let mut sgis = (self.0 & DOORBELL_SGIS) as u32;
        while sgis != 0 {
            f(sgis.trailing_zeros());
            sgis &= sgis - 1;
        }
    }
    /// Whether any slot was announced.
    pub const fn has_slots(self) -> bool {
        self.0 >> 32 != 0
    }
}

/// One CPU's mailbox of `N` slots (at most 32: one doorbell bit each).
pub struct Mailbox<const N: usize> {
    /// SGI bits 0..15, slot bits 32..32+N.
    doorbell: AtomicU64,
    slots: [AtomicU64; N],
}

impl<const N: usize> Mailbox<N> {
    const FITS: () = assert!(N <= 32, "one doorbell bit per slot");

    pub const fn new() -> Self {
        let () = Self::FITS;
        Mailbox {
            doorbell: AtomicU64::new(0),
            slots: [const { AtomicU64::new(0) }; N],
        }
    }

    /// Make SGI `intid` (0..15) pending for the owner. Never fails: a
    /// pending SGI posted again stays one pending SGI.
    pub fn post_sgi(&self, intid: u32) {
        self.doorbell
            .fetch_or(1 << (intid & 0xf), Ordering::Release);
    }

    /// Post `op`: an SGI as a doorbell bit, anything else in a free slot;
    /// false when every slot is full (the caller may retry: the owner
    /// empties slots as it runs).
    pub fn post(&self, op: MailboxOp) -> bool {
        if let MailboxOp::Sgi(intid) = op {
            self.post_sgi(intid);
            return true;
        }
        let v = op.encode();
        for (i, s) in self.slots.iter().enumerate() {
            if s.compare_exchange(0, v, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                // The owner may take the doorbell between the claim and
                // this; then the slot waits for the next drain, which the
                // kick the caller sends after posting guarantees.
                self.doorbell.fetch_or(slot_bit(i), Ordering::Release);
                return true;
            }
        }
        false
    }

    /// Hand everything posted to `f` (owner only): SGIs in INTID order, then
    /// the announced slots in slot order.
    pub fn drain(&self, mut f: impl FnMut(MailboxOp)) {
        let bell = self.take();
        bell.for_each_sgi(|intid| f(MailboxOp::Sgi(intid)));
        self.drain_slots(bell, f);
    }

    /// Take the doorbell (owner only): what was posted since the last take.
    /// The SGIs are in it; the slots it names are emptied by
    /// [`Mailbox::drain_slots`].
    #[inline(always)]
    pub fn take(&self) -> Doorbell {
        if self.doorbell.load(Ordering::Relaxed) == 0 {
            return Doorbell(0);
        }
        Doorbell(self.doorbell.swap(0, Ordering::Acquire))
    }

    /// Empty the slots `bell` names, handing each operation to `f`.
    pub fn drain_slots(&self, bell: Doorbell, mut f: impl FnMut(MailboxOp)) {
        for i in ones(bell.0 >> 32) {
            if let Some(slot) = self.slots.get(i as usize) {
                if let Some(op) = MailboxOp::decode(slot.swap(0, Ordering::AcqRel)) {
                    f(op);
                }
            }
        }
    }

    /// Forget everything posted (a vCPU being loaded afresh).
    pub fn clear(&self) {
        self.doorbell.store(0, Ordering::Relaxed);
        for slot in &self.slots {
            slot.store(0, Ordering::Relaxed);
        }
    }
}

impl<const N: usize> Default for Mailbox<N> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::vec::Vec;

    fn hw_timer() -> VirtIrq {
        VirtIrq {
            intid: 27,
            priority: 0xa0,
            hw_intid: Some(27),
            eoi_maintenance: false,
        }
    }

    #[test]
    fn every_op_round_trips_through_one_word() {
        let ops = [
            MailboxOp::Inject(hw_timer()),
            MailboxOp::Inject(VirtIrq {
                intid: 1019,
                priority: 0,
                hw_intid: None,
                eoi_maintenance: true,
            }),
            MailboxOp::Retract(33),
            MailboxOp::Sgi(15),
            // A vLPI beyond the 13 bits the other ops keep.
            MailboxOp::LpiRecheck(65535),
        ];

        for op in ops {
            let word = op.encode();
            assert_ne!(word, 0, "{op:?} must not look empty");
            assert_eq!(MailboxOp::decode(word), Some(op));
        }
    }

    #[test]
    fn empty_and_unknown_words_decode_to_nothing() {
        assert_eq!(MailboxOp::decode(0), None);
        assert_eq!(MailboxOp::decode(0xff), None);
    }

    #[test]
    fn full_mailbox_refuses_the_next_post_until_drained() {
        let mb: Mailbox<2> = Mailbox::new();
        assert!(mb.post(MailboxOp::Retract(40)));
        assert!(mb.post(MailboxOp::Retract(41)));

        assert!(!mb.post(MailboxOp::Retract(42)));

        let mut got = Vec::new();
        mb.drain(|op| got.push(op));
        assert_eq!(got, [MailboxOp::Retract(40), MailboxOp::Retract(41)]);
        assert!(mb.post(MailboxOp::Retract(42)));
    }

    #[test]
    fn sgis_never_fill_the_mailbox_and_coalesce_like_pending_state() {
        let mb: Mailbox<1> = Mailbox::new();
        assert!(mb.post(MailboxOp::Retract(40)));
        for _ in 0..3 {
            assert!(mb.post(MailboxOp::Sgi(5)), "an SGI needs no slot");
        }
        mb.post_sgi(1);

        let mut got = Vec::new();
        mb.drain(|op| got.push(op));
        assert_eq!(
            got,
            [MailboxOp::Sgi(1), MailboxOp::Sgi(5), MailboxOp::Retract(40)]
        );
    }

    #[test]
    fn drain_visits_only_announced_slots() {
        let mb: Mailbox<32> = Mailbox::new();
        assert!(mb.post(MailboxOp::Retract(40)));
        assert!(mb.post(MailboxOp::Retract(41)));
        let mut got = Vec::new();
        mb.drain(|op| got.push(op));
        assert_eq!(got.len(), 2);
        // A word in a slot whose doorbell bit is not set (a post still
        // between claim and announce) waits for the next drain.
        mb.slots[7].store(MailboxOp::Retract(43).encode(), Ordering::Relaxed);
        mb.drain(|op| got.push(op));
        assert_eq!(got.len(), 2);
        mb.doorbell.fetch_or(slot_bit(7), Ordering::Relaxed);
        mb.drain(|op| got.push(op));
        assert_eq!(got[2], MailboxOp::Retract(43));
    }

    #[test]
    fn clear_forgets_sgis_and_slots() {
        let mb: Mailbox<4> = Mailbox::new();
        mb.post_sgi(3);
        assert!(mb.post(MailboxOp::Retract(40)));
        mb.clear();
        let mut got = Vec::new();
        mb.drain(|op| got.push(op));
        assert!(got.is_empty());
        assert!(mb.post(MailboxOp::Retract(40)));
    }

    #[test]
    fn concurrent_producers_lose_nothing_while_the_owner_drains() {
        const PRODUCERS: u32 = 4;
        const EACH: u32 = 500;
        let mb: Arc<Mailbox<8>> = Arc::new(Mailbox::new());
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let mb = mb.clone();
                std::thread::spawn(move || {
                    for i in 0..EACH {
                        let op = MailboxOp::Retract(p * EACH + i);
                        while !mb.post(op) {
                            std::thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        let mut seen = std::vec![false; (PRODUCERS * EACH) as usize];
        let mut count = 0;
        while count < PRODUCERS * EACH {
            mb.drain(|op| {
                if let MailboxOp::Retract(i) = op {
                    assert!(!seen[i as usize], "operation {i} delivered twice");
                    seen[i as usize] = true;
                    count += 1;
                }
            });
        }
        for p in producers {
            p.join().expect("producer");
        }
        assert!(seen.iter().all(|&s| s));
    }
}
