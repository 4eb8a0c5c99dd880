//! The manager's own RAM figures for `/metrics`: heap counters the app's
//! global allocator updates (a counting wrapper around Hermit's allocator,
//! `manager/app`), and what the per-partition state holds (console
//! histories, the event log).
//!
//! Safe code only: the allocator itself (an `unsafe impl GlobalAlloc`)
//! lives in the app and calls [`HeapCounters::allocated`] and
//! [`HeapCounters::freed`]; relaxed atomics, one CPU (Hermit 0.11 runs the
//! manager on one), so the figures are exact at any moment they are read.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Live and peak heap use, counted by the global allocator.
#[derive(Debug, Default)]
pub struct HeapCounters {
    in_use: AtomicUsize,
    peak: AtomicUsize,
    live: AtomicUsize,
    total: AtomicU64,
}

/// One reading of [`HeapCounters`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HeapUse {
    /// Bytes allocated and not yet freed (as requested, before the
    /// allocator's own rounding and headers).
    pub in_use: usize,
    /// The most `in_use` ever was.
    pub peak: usize,
    /// Allocations not yet freed.
    pub live: usize,
    /// Allocations since the manager started.
    pub total: u64,
}

impl HeapCounters {
    pub const fn new() -> Self {
        Self {
            in_use: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            live: AtomicUsize::new(0),
            total: AtomicU64::new(0),
        }
    }

    /// An allocation of `size` bytes succeeded.
    pub fn allocated(&self, size: usize) {
        let now = self.in_use.fetch_add(size, Ordering::Relaxed) + size;
        self.peak.fetch_max(now, Ordering::Relaxed);
        self.live.fetch_add(1, Ordering::Relaxed);
        self.total.fetch_add(1, Ordering::Relaxed);
    }

    /// An allocation of `size` bytes was freed.
    pub fn freed(&self, size: usize) {
        self.in_use.fetch_sub(size, Ordering::Relaxed);
        self.live.fetch_sub(1, Ordering::Relaxed);
    }

    /// A reallocation from `old` to `new` bytes succeeded (one allocation,
    /// still live).
    pub fn reallocated(&self, old: usize, new: usize) {
        self.freed(old);
        self.allocated(new);
        // A move is not a new allocation.
        self.total.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn read(&self) -> HeapUse {
        HeapUse {
            in_use: self.in_use.load(Ordering::Relaxed),
            peak: self.peak.load(Ordering::Relaxed),
            live: self.live.load(Ordering::Relaxed),
            total: self.total.load(Ordering::Relaxed),
        }
    }
}

/// The manager's memory as `/metrics` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ManagerMemory {
    /// None when the app counts nothing (host tests, another allocator).
    pub heap: Option<HeapUse>,
    /// Bytes the console histories' buffers hold.
    pub history_bytes: usize,
    /// Partitions with a console history.
    pub histories: usize,
    /// Events in the log.
    pub events: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_what_is_live_and_the_peak() {
        let c = HeapCounters::new();
        c.allocated(100);
        c.allocated(50);
        c.freed(100);
        c.reallocated(50, 80);

        assert_eq!(
            c.read(),
            HeapUse {
                in_use: 80,
                peak: 150,
                live: 1,
                total: 2
            }
        );
    }
}
