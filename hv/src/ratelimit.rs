//! Rate limiting of a partition's fault messages, so that a guest cannot
//! flood the hypervisor log (a Linux GIC init touching every foreign SPI
//! would otherwise print hundreds of lines per pass). Per partition and per
//! kind of fault, at most [`BURST`] lines are printed in each window of
//! [`WINDOW_SECONDS`]; the rest are counted, and the first line of a later
//! window says how many were suppressed. The fault counters themselves are
//! exact: only the log is limited. Lock-free (the partition's vCPUs report
//! concurrently); a race at a window edge may print one line more or less,
//! never lose the suppressed count.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Lines per kind per window.
pub const BURST: u32 = 5;
/// Window length in seconds of counter time.
pub const WINDOW_SECONDS: u64 = 10;

/// The kinds of guest fault a partition's log is limited by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum FaultKind {
    /// Access to an IPA with nothing behind it.
    UnmappedIpa = 0,
    /// A data abort the hardware did not describe (ISV = 0).
    Undecodable = 1,
    /// Instruction fetch from an IPA with no RAM.
    InstrAbort = 2,
    /// A system register or trap we do not emulate.
    UnknownSysReg = 3,
    /// An SGI or CPU_ON naming a CPU outside the partition.
    ForeignCpu = 4,
    /// A distributor access to an SPI the partition does not own.
    ForeignSpi = 5,
    /// A write to another vCPU's redistributor.
    ForeignRedist = 6,
    /// Interrupts lost (list-register queue or a mailbox full).
    Dropped = 7,
    /// SError, unexpected trap classes.
    Other = 8,
    /// A PSCI CPU_ON whose entry point is not in the partition's RAM.
    BadEntry = 9,
    /// A device's DMA the SMMU stopped (outside the partition's stage 2).
    Dma = 10,
    /// A PCI configuration write the virtual ECAM refused (`vpci`).
    PciConfig = 11,
    /// A virtual ITS command or register write refused (`its`).
    Its = 12,
    /// A guest access to its IRS config frame refused (`vgic5::frame`), or
    /// an IRS software error its VM caused (`vgic5::VirsFault`).
    Virs = 13,
}

impl FaultKind {
    pub const COUNT: usize = 14;
}

#[derive(Default)]
struct Slot {
    window: AtomicU64,
    printed: AtomicU32,
    suppressed: AtomicU64,
}

/// What to do with one fault message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Print it; `suppressed` lines of this kind were dropped before it.
    Print { suppressed: u64 },
    /// Drop it (counted).
    Suppress,
}

/// One partition's limiter.
pub struct FaultLog {
    slots: [Slot; FaultKind::COUNT],
}

impl Default for FaultLog {
    fn default() -> Self {
        Self::new()
    }
}

impl FaultLog {
    pub fn new() -> Self {
        FaultLog {
            slots: core::array::from_fn(|_| Slot::default()),
        }
    }

    /// Decide about one message of `kind` at counter value `now`, with the
    /// counter running at `frequency` Hz.
    pub fn check(&self, kind: FaultKind, now: u64, frequency: u64) -> Verdict {
        let slot = &self.slots[kind as usize];
        let window = now / (frequency.max(1) * WINDOW_SECONDS);
        // Window 0 is also the initial value: store window + 1.
        let tag = window + 1;
        if slot.window.swap(tag, Ordering::Relaxed) != tag {
            slot.printed.store(0, Ordering::Relaxed);
        }
        if slot.printed.fetch_add(1, Ordering::Relaxed) < BURST {
            Verdict::Print {
                suppressed: slot.suppressed.swap(0, Ordering::Relaxed),
            }
        } else {
            slot.suppressed.fetch_add(1, Ordering::Relaxed);
            Verdict::Suppress
        }
    }

    /// Messages of `kind` suppressed and not yet reported.
    pub fn suppressed(&self, kind: FaultKind) -> u64 {
        self.slots[kind as usize].suppressed.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HZ: u64 = 1000;

    #[test]
    fn a_burst_is_printed_then_the_rest_suppressed() {
        let log = FaultLog::new();

        let verdicts: std::vec::Vec<Verdict> = (0..255)
            .map(|_| log.check(FaultKind::ForeignSpi, 5, HZ))
            .collect();

        let printed = verdicts
            .iter()
            .filter(|v| matches!(v, Verdict::Print { .. }))
            .count();
        assert_eq!(printed, BURST as usize);
        assert_eq!(log.suppressed(FaultKind::ForeignSpi), 255 - BURST as u64);
    }

    #[test]
    fn the_next_window_reports_how_many_were_suppressed() {
        let log = FaultLog::new();
        for _ in 0..BURST + 7 {
            log.check(FaultKind::UnmappedIpa, 0, HZ);
        }

        let next = log.check(FaultKind::UnmappedIpa, WINDOW_SECONDS * HZ, HZ);

        assert_eq!(next, Verdict::Print { suppressed: 7 });
        assert_eq!(log.suppressed(FaultKind::UnmappedIpa), 0);
    }

    #[test]
    fn kinds_are_limited_separately() {
        let log = FaultLog::new();
        for _ in 0..BURST {
            log.check(FaultKind::ForeignSpi, 0, HZ);
        }

        assert_eq!(log.check(FaultKind::ForeignSpi, 0, HZ), Verdict::Suppress);
        assert_eq!(
            log.check(FaultKind::ForeignCpu, 0, HZ),
            Verdict::Print { suppressed: 0 }
        );
    }
}
