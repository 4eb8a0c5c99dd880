//! Per-CPU state, split in two (as Jailhouse's `per_cpu` and
//! `public_per_cpu`): [`CpuState`] is touched only by its own CPU and is
//! handed down as `&mut` from the exception entries, so it needs no lock and
//! is not `Sync`; [`PublicCpu`] is what other CPUs may see of and post to a
//! CPU: a few atomics, its counters and its mailbox, on cache lines of its
//! own so that one CPU's counter stores never share a line with another's.

use crate::mailbox::Mailbox;
use crate::vgic::lr::LrManager;
use crate::vgic::redist::VRedist;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use pinfold_vboard::ExitClass;

/// The most CPUs the hypervisor drives. arm64 servers have 80 to 192 CPUs
/// today; per-CPU state is sized from the host description up to this cap,
/// and CPUs beyond it are reported on the console and left offline.
pub const MAX_CPUS: usize = 512;

/// Request bits other CPUs post to a CPU (then kick it with an SGI).
pub const REQ_CPU_ON: u32 = 1 << 0;
pub const REQ_STOP: u32 = 1 << 1;
pub const REQ_START: u32 = 1 << 2;

/// Slots in each CPU's mailbox.
pub const MAILBOX_SLOTS: usize = 32;

/// A vCPU: partition index and vCPU index inside it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VcpuId {
    pub partition: usize,
    pub vcpu: usize,
}

/// Counters of the vCPU running on a CPU, written only by that CPU with
/// plain stores (no read-modify-write atomics: there is one writer), read by
/// the stats line and the management calls, which tolerate a value a few
/// exits old.
#[derive(Default)]
pub struct VcpuCounters {
    exits: [AtomicU64; ExitClass::COUNT],
    injected: AtomicU64,
    dropped: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
}

impl VcpuCounters {
    /// One exit of `class` (owner CPU only).
    pub fn exit(&self, class: ExitClass) {
        bump(&self.exits[class as usize]);
    }
    /// One interrupt injected (owner CPU only).
    pub fn injected(&self) {
        bump(&self.injected);
    }
    /// One interrupt lost because a queue was full (owner CPU only).
    pub fn dropped(&self) {
        bump(&self.dropped);
    }
    pub fn exits_of(&self, class: ExitClass) -> u64 {
        self.exits[class as usize].load(Ordering::Relaxed)
    }
    pub fn exits_total(&self) -> u64 {
        ExitClass::ALL.iter().map(|&c| self.exits_of(c)).sum()
    }
    pub fn injected_count(&self) -> u64 {
        self.injected.load(Ordering::Relaxed)
    }
    pub fn dropped_count(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
    /// Zero (vCPU load: the counters count since the vCPU's last boot).
    pub fn reset(&self) {
        for c in &self.exits {
            c.store(0, Ordering::Relaxed);
        }
        self.injected.store(0, Ordering::Relaxed);
        self.dropped.store(0, Ordering::Relaxed);
    }
}

/// What other CPUs may see of and post to a CPU. Cache-line aligned: the
/// owner's counter stores and other CPUs' posts to neighbouring entries
/// never share a line.
#[repr(align(64))]
pub struct PublicCpu {
    pub mpidr: AtomicU64,
    pub online: AtomicBool,
    /// REQ_* bits.
    requests: AtomicU32,
    pub counters: VcpuCounters,
    pub mailbox: Mailbox<MAILBOX_SLOTS>,
}

impl PublicCpu {
    pub fn new(mpidr: u64) -> Self {
        PublicCpu {
            mpidr: AtomicU64::new(mpidr),
            online: AtomicBool::new(false),
            requests: AtomicU32::new(0),
            counters: VcpuCounters::default(),
            mailbox: Mailbox::new(),
        }
    }

    pub fn post_request(&self, bits: u32) {
        self.requests.fetch_or(bits, Ordering::Release);
    }

    /// Take every posted request (owner only).
    pub fn take_requests(&self) -> u32 {
        if self.requests.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        self.requests.swap(0, Ordering::Acquire)
    }
}

/// The vCPU loaded on a CPU.
pub struct LoadedVcpu {
    pub id: VcpuId,
    /// Its emulated redistributor.
    pub vredist: VRedist,
    /// The PMU it was given on this CPU.
    pub pmu: crate::pmu::PmuView,
}

/// State only this CPU touches.
pub struct CpuState {
    pub index: usize,
    pub mpidr: u64,
    /// List-register allocation of the loaded vCPU.
    pub lrs: LrManager,
    /// The vCPU pinned to this CPU by the plan, if any.
    pub assigned: Option<VcpuId>,
    /// The loaded vCPU (running, or about to run).
    pub loaded: Option<LoadedVcpu>,
}

impl CpuState {
    pub fn new(index: usize, mpidr: u64, assigned: Option<VcpuId>) -> Self {
        CpuState {
            index,
            mpidr,
            lrs: LrManager::new(),
            assigned,
            loaded: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_entries_do_not_share_cache_lines() {
        assert_eq!(core::mem::align_of::<PublicCpu>(), 64);
        assert_eq!(core::mem::size_of::<PublicCpu>() % 64, 0);
    }

    #[test]
    fn requests_are_taken_once() {
        let cpu = PublicCpu::new(0);
        cpu.post_request(REQ_START);
        cpu.post_request(REQ_STOP);

        assert_eq!(cpu.take_requests(), REQ_START | REQ_STOP);
        assert_eq!(cpu.take_requests(), 0);
    }

    #[test]
    fn counters_count_per_class_and_reset() {
        let c = VcpuCounters::default();
        c.exit(ExitClass::Hvc);
        c.exit(ExitClass::Hvc);
        c.exit(ExitClass::Mmio);
        c.injected();

        assert_eq!(c.exits_of(ExitClass::Hvc), 2);
        assert_eq!(c.exits_total(), 3);
        assert_eq!(c.injected_count(), 1);
        c.reset();
        assert_eq!(c.exits_total(), 0);
    }
}
