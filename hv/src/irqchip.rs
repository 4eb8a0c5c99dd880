//! The interrupt chip as the core sees it, one trait for every GIC
//! generation: the per-CPU half (this CPU's SGI/PPI state and CPU interface)
//! and the shared half (SPIs at the distributor). A driver declares in
//! [`IrqChipCaps`] whether its per-CPU state may be changed without a lock
//! shared between CPUs (the seed's IRQCHIP_PERCPU_STATE_LOCKLESS, an
//! explicit opt-in, never an assumption); [`change_percpu_state`] is the one
//! place that decides between that lockless path and the chip-wide lock.
//! `pinfold_drivers::gicv3` implements both halves; so does
//! `pinfold_drivers::gicv5` for GICv5 (PPIs in per-CPU system registers:
//! lockless too), host-tested against `pinfold-gicv5model` (docs/GICV5.md).

use crate::lockstat::{CountedLock, LockPath};

/// What an interrupt chip driver promises.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IrqChipCaps {
    /// SGI/PPI state may be changed by the owning CPU without any lock
    /// shared between CPUs (GICv3: each CPU's own redistributor frame;
    /// GICv5: per-CPU system registers).
    pub percpu_state_lockless: bool,
}

/// A per-CPU interrupt state change (enable, active, pending) of an SGI or
/// PPI on the calling CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PpiStateChange {
    Enable(u32, bool),
    Active(u32, bool),
    Pending(u32, bool),
}

/// Pending and active state of the SGIs and PPIs of one CPU, bit n = INTID n.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PpiBits {
    pub pending: u32,
    pub active: u32,
}

/// The per-CPU half of an interrupt chip: this CPU's SGIs and PPIs and its
/// CPU interface. Only its own CPU holds one (a `&mut`), so nothing here
/// needs a lock unless the chip says otherwise in [`IrqChipCaps`].
pub trait PerCpuIrqChip {
    fn caps(&self) -> IrqChipCaps;
    /// Apply a state change to one of this CPU's SGIs/PPIs.
    fn apply_ppi(&mut self, change: PpiStateChange);
    /// The physical pending and active state of this CPU's SGIs/PPIs
    /// (`&mut`: an MMIO read of the CPU's own registers).
    fn ppi_bits(&mut self) -> PpiBits;
    /// Acknowledge the highest priority pending interrupt (1020..1023: none).
    fn ack(&mut self) -> u32;
    /// Priority drop (EOImode = 1).
    fn priority_drop(&mut self, intid: u32);
    /// Deactivate (EOImode = 1).
    fn deactivate(&mut self, intid: u32);
    /// Send SGI `intid` to the CPU with affinity `mpidr`.
    fn send_sgi(&mut self, mpidr: u64, intid: u32);
}

/// The shared half: SPIs at the distributor. Every CPU may reach it, so the
/// platform keeps it behind a [`CountedLock`].
pub trait SharedIrqChip {
    fn spi_enable(&mut self, intid: u32, enable: bool);
    /// Route the SPI to the CPU with affinity `mpidr`.
    fn spi_route(&mut self, intid: u32, mpidr: u64);
    /// Level (false) or edge (true) triggered.
    fn spi_set_edge(&mut self, intid: u32, edge: bool);
}

/// Applies a per-CPU interrupt state change the way the chip allows:
/// straight to the CPU's own state when the chip declares the lockless
/// capability, otherwise under `chip_lock` (the chip-wide lock a driver
/// without the capability needs), counted against `path`.
pub fn change_percpu_state(
    chip: &mut impl PerCpuIrqChip,
    chip_lock: &CountedLock<()>,
    path: LockPath,
    change: PpiStateChange,
) {
    if chip.caps().percpu_state_lockless {
        chip.apply_ppi(change);
    } else {
        let _guard = chip_lock.lock(path);
        chip.apply_ppi(change);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lockstat::LockStat;
    use std::boxed::Box;
    use std::vec::Vec;

    struct Chip {
        caps: IrqChipCaps,
        applied: Vec<PpiStateChange>,
    }

    impl PerCpuIrqChip for Chip {
        fn caps(&self) -> IrqChipCaps {
            self.caps
        }
        fn apply_ppi(&mut self, change: PpiStateChange) {
            self.applied.push(change);
        }
        fn ppi_bits(&mut self) -> PpiBits {
            PpiBits::default()
        }
        fn ack(&mut self) -> u32 {
            1023
        }
        fn priority_drop(&mut self, _: u32) {}
        fn deactivate(&mut self, _: u32) {}
        fn send_sgi(&mut self, _: u64, _: u32) {}
    }

    fn chip(lockless: bool) -> (Chip, CountedLock<()>, &'static LockStat) {
        let stat: &'static LockStat = Box::leak(Box::new(LockStat::new()));
        let chip = Chip {
            caps: IrqChipCaps {
                percpu_state_lockless: lockless,
            },
            applied: Vec::new(),
        };
        (chip, CountedLock::new((), stat), stat)
    }

    #[test]
    fn lockless_chip_changes_timer_ppi_without_counting_a_lock() {
        let (mut chip, lock, stat) = chip(true);

        change_percpu_state(
            &mut chip,
            &lock,
            LockPath::TimerPpiState,
            PpiStateChange::Active(27, true),
        );

        assert_eq!(chip.applied, [PpiStateChange::Active(27, true)]);
        assert_eq!(stat.total(), 0);
    }

    #[test]
    fn chip_without_capability_takes_the_chip_lock_and_is_counted() {
        let (mut chip, lock, stat) = chip(false);

        change_percpu_state(
            &mut chip,
            &lock,
            LockPath::VcpuLoad,
            PpiStateChange::Enable(27, true),
        );

        assert_eq!(chip.applied, [PpiStateChange::Enable(27, true)]);
        assert_eq!(stat.count(LockPath::VcpuLoad), 1);
        assert_eq!(stat.hot_total(), 1);
    }
}
