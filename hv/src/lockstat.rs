//! Counts acquisitions of locks shared between CPUs on the paths that must
//! not take any: vCPU load/put, timer PPI state changes and interrupt
//! injection on the vCPU's own CPU. In a correct build the count stays 0;
//! the counter exists so a test can prove it (the monitor's stats line and
//! the host tests read it).
//!
//! Counting costs one relaxed atomic add on a path that has already decided
//! to take a cross-CPU lock, so it stays on in every build: the slow path is
//! slow anyway and the number is worth having in the field.

use core::sync::atomic::{AtomicU64, Ordering};

/// Which hot path took a cross-CPU lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HotPath {
    VcpuLoad,
    VcpuPut,
    TimerPpiState,
    LocalInject,
}

/// Per-path counters of cross-CPU lock acquisitions.
pub struct LockStat {
    counts: [AtomicU64; 4],
}

impl LockStat {
    pub const fn new() -> Self {
        LockStat {
            counts: [const { AtomicU64::new(0) }; 4],
        }
    }

    /// Record that `path` took a lock shared between CPUs.
    pub fn cross_cpu_lock(&self, path: HotPath) {
        self.counts[path as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn count(&self, path: HotPath) -> u64 {
        self.counts[path as usize].load(Ordering::Relaxed)
    }

    /// Sum over all hot paths.
    pub fn total(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }
}

impl Default for LockStat {
    fn default() -> Self {
        Self::new()
    }
}

/// What an interrupt chip driver promises about its per-CPU interrupt state
/// (the seed's IRQCHIP_PERCPU_STATE_LOCKLESS, as an explicit opt-in).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IrqChipCaps {
    /// SGI/PPI state may be changed by the owning CPU without any lock
    /// shared between CPUs.
    pub percpu_state_lockless: bool,
}

/// A per-CPU interrupt state change (enable, active, pending) of an SGI/PPI
/// on the calling CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PpiStateChange {
    Enable(u32, bool),
    Active(u32, bool),
    Pending(u32, bool),
}

/// Applies a per-CPU interrupt state change the way the chip allows: straight
/// to the CPU's own state when the chip declares the lockless capability,
/// otherwise under the chip-wide lock (`slow`), counted against `path`.
pub fn change_percpu_state<L, S>(
    caps: IrqChipCaps,
    stat: &LockStat,
    path: HotPath,
    change: PpiStateChange,
    lockless: L,
    slow: S,
) where
    L: FnOnce(PpiStateChange),
    S: FnOnce(PpiStateChange),
{
    if caps.percpu_state_lockless {
        lockless(change);
    } else {
        stat.cross_cpu_lock(path);
        slow(change);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::cell::Cell;

    #[test]
    fn lockless_chip_changes_timer_ppi_without_counting_a_lock() {
        let stat = LockStat::new();
        let applied = Cell::new(None);
        let caps = IrqChipCaps {
            percpu_state_lockless: true,
        };

        change_percpu_state(
            caps,
            &stat,
            HotPath::TimerPpiState,
            PpiStateChange::Active(27, true),
            |c| applied.set(Some(c)),
            |_| panic!("slow path taken"),
        );

        assert_eq!(applied.get(), Some(PpiStateChange::Active(27, true)));
        assert_eq!(stat.total(), 0);
    }

    #[test]
    fn chip_without_capability_takes_slow_path_and_is_counted() {
        let stat = LockStat::new();
        let slow_taken = Cell::new(false);
        let caps = IrqChipCaps {
            percpu_state_lockless: false,
        };

        change_percpu_state(
            caps,
            &stat,
            HotPath::VcpuLoad,
            PpiStateChange::Enable(27, true),
            |_| panic!("lockless path taken without the capability"),
            |_| slow_taken.set(true),
        );

        assert!(slow_taken.get());
        assert_eq!(stat.count(HotPath::VcpuLoad), 1);
        assert_eq!(stat.total(), 1);
    }
}
