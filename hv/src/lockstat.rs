//! Accounting of every lock more than one CPU can take. Each such lock is a
//! [`CountedLock`]; taking it names the path it is taken on, and
//! [`LockStat`] counts acquisitions per path. The hot paths (vCPU load and
//! put, timer PPI state changes, injection on the vCPU's own CPU) must never
//! take one: the boot test reads [`LockStat::hot_total`] from the monitor's
//! stats line and asserts 0, and the host tests show the count moving when a
//! path does take a shared lock.
//!
//! Counting costs one relaxed atomic add on a path that has already decided
//! to take a lock shared between CPUs, so it stays on in every build: that
//! path pays for a shared cache line anyway, and the number is worth having
//! in the field.

use core::sync::atomic::{AtomicU64, Ordering};

/// Where a lock shared between CPUs was taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum LockPath {
    // The hot paths: must stay at 0.
    VcpuLoad = 0,
    VcpuPut = 1,
    TimerPpiState = 2,
    LocalInject = 3,
    // Paths where a per-partition or chip-wide lock is the design (each
    // lock's comment says why no per-CPU design works).
    /// A guest access to its emulated distributor (the partition's lock).
    GicdTrap = 4,
    /// A guest access to its PL011 (the partition's console lock).
    ConsoleTrap = 5,
    /// Host UART input or management console I/O.
    ConsoleIo = 6,
    /// A physical SPI forwarded to its partition.
    SpiForward = 7,
    /// EOI maintenance re-evaluating an emulated level interrupt.
    Maintenance = 8,
    /// The physical distributor (SPI enable/route).
    PhysDist = 9,
    /// A log or console line on the host UART.
    LogLine = 10,
    /// Management calls and partition lifecycle.
    Management = 11,
    /// A CPU's event ring (`events`): its own CPU recording, or the
    /// management partition's EVENTS_READ.
    Event = 12,
    /// A guest access to its virtual ECAM (`vpci`: the partition's lock;
    /// BAR shadows are per function, any of its vCPUs may write them).
    PciConfigTrap = 13,
    /// A guest access to its virtual ITS (`its`: the partition's lock; any
    /// of its vCPUs may program its one command queue).
    ItsTrap = 14,
    /// A physical ITS's command queue (`its::ItsSet`: one lock per ITS)
    /// and the machine-wide LPI pool and vPE IDs: a guest's accepted ITS
    /// command, a partition's reset, a CPU mapping its collection.
    PhysIts = 15,
}

impl LockPath {
    pub const COUNT: usize = 16;
    /// The paths that must never take a lock shared between CPUs.
    pub const HOT: [LockPath; 4] = [
        LockPath::VcpuLoad,
        LockPath::VcpuPut,
        LockPath::TimerPpiState,
        LockPath::LocalInject,
    ];
    pub const ALL: [LockPath; LockPath::COUNT] = [
        LockPath::VcpuLoad,
        LockPath::VcpuPut,
        LockPath::TimerPpiState,
        LockPath::LocalInject,
        LockPath::GicdTrap,
        LockPath::ConsoleTrap,
        LockPath::ConsoleIo,
        LockPath::SpiForward,
        LockPath::Maintenance,
        LockPath::PhysDist,
        LockPath::LogLine,
        LockPath::Management,
        LockPath::Event,
        LockPath::PciConfigTrap,
        LockPath::ItsTrap,
        LockPath::PhysIts,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            LockPath::VcpuLoad => "vcpu_load",
            LockPath::VcpuPut => "vcpu_put",
            LockPath::TimerPpiState => "timer_ppi",
            LockPath::LocalInject => "local_inject",
            LockPath::GicdTrap => "gicd_trap",
            LockPath::ConsoleTrap => "console_trap",
            LockPath::ConsoleIo => "console_io",
            LockPath::SpiForward => "spi_forward",
            LockPath::Maintenance => "maintenance",
            LockPath::PhysDist => "phys_dist",
            LockPath::LogLine => "log_line",
            LockPath::Management => "management",
            LockPath::Event => "event",
            LockPath::PciConfigTrap => "pci_config_trap",
            LockPath::ItsTrap => "its_trap",
            LockPath::PhysIts => "phys_its",
        }
    }
}

/// Per-path counters of acquisitions of locks shared between CPUs.
pub struct LockStat {
    counts: [AtomicU64; LockPath::COUNT],
}

impl LockStat {
    pub const fn new() -> Self {
        LockStat {
            counts: [const { AtomicU64::new(0) }; LockPath::COUNT],
        }
    }

    /// Record that `path` took a lock shared between CPUs.
    pub fn record(&self, path: LockPath) {
        self.counts[path as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn count(&self, path: LockPath) -> u64 {
        self.counts[path as usize].load(Ordering::Relaxed)
    }

    /// Acquisitions on the hot paths (vCPU load/put, timer PPI state, local
    /// injection): 0 in a correct build.
    pub fn hot_total(&self) -> u64 {
        LockPath::HOT.iter().map(|&p| self.count(p)).sum()
    }

    /// Acquisitions on every path.
    pub fn total(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Ordering::Relaxed)).sum()
    }
}

impl Default for LockStat {
    fn default() -> Self {
        Self::new()
    }
}

/// A spin lock that more than one CPU can take, counted per path in a
/// [`LockStat`]. Every lock shared between CPUs in the hypervisor is one of
/// these; a lock only its own CPU takes needs none (it is a `&mut`).
pub struct CountedLock<T> {
    inner: spin::Mutex<T>,
    stat: &'static LockStat,
}

impl<T> CountedLock<T> {
    pub const fn new(value: T, stat: &'static LockStat) -> Self {
        CountedLock {
            inner: spin::Mutex::new(value),
            stat,
        }
    }

    /// Take the lock on `path` (counted).
    pub fn lock(&self, path: LockPath) -> spin::MutexGuard<'_, T> {
        self.stat.record(path);
        self.inner.lock()
    }

    /// Take the lock on `path` if no one holds it (counted when taken).
    pub fn try_lock(&self, path: LockPath) -> Option<spin::MutexGuard<'_, T>> {
        let guard = self.inner.try_lock()?;
        self.stat.record(path);
        Some(guard)
    }

    /// The statistics this lock counts into.
    pub fn stat(&self) -> &'static LockStat {
        self.stat
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::boxed::Box;

    fn stat() -> &'static LockStat {
        Box::leak(Box::new(LockStat::new()))
    }

    #[test]
    fn taking_a_counted_lock_counts_its_path_only() {
        let stat = stat();
        let lock = CountedLock::new(5u32, stat);

        *lock.lock(LockPath::GicdTrap) += 1;
        *lock.lock(LockPath::GicdTrap) += 1;

        assert_eq!(*lock.lock(LockPath::ConsoleIo), 7);
        assert_eq!(stat.count(LockPath::GicdTrap), 2);
        assert_eq!(stat.count(LockPath::ConsoleIo), 1);
        assert_eq!(stat.hot_total(), 0);
        assert_eq!(stat.total(), 3);
    }

    #[test]
    fn a_lock_taken_on_a_hot_path_shows_in_hot_total() {
        let stat = stat();
        let lock = CountedLock::new((), stat);

        drop(lock.lock(LockPath::TimerPpiState));

        assert_eq!(stat.hot_total(), 1);
    }

    #[test]
    fn path_names_are_distinct() {
        for (i, a) in LockPath::ALL.iter().enumerate() {
            assert_eq!(*a as usize, i);
            for b in &LockPath::ALL[i + 1..] {
                assert_ne!(a.name(), b.name());
            }
        }
    }
}
