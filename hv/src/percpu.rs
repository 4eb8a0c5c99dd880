//! Per-CPU state, split in two (as Jailhouse's `per_cpu` and
//! `public_per_cpu`): [`CpuState`] is touched only by its own CPU and is
//! handed down as `&mut` from the exception entries, so it needs no lock and
//! is not `Sync`; [`PublicCpu`] is what other CPUs may see of and post to a
//! CPU: a few atomics, its counters and its mailbox. Its cache lines split
//! by writer: what other CPUs post (requests, the mailbox) is on lines the
//! owner only reads and empties, and the counters the owner stores on every
//! exit are on a line of their own that no other CPU writes, so an exit
//! never bounces a line another CPU is writing.
//!
//! `CpuState` caches what the hot paths would otherwise look up on every
//! exit: this CPU's `PublicCpu`, the loaded vCPU's partition, and a mirror
//! of which pass-through PPIs its guest enabled at which priority
//! ([`HwPpis`], for the timer path).

use crate::mailbox::Mailbox;
use crate::partition::Partition;
use crate::system::System;
use crate::vgic::lr::{LrManager, VirtIrq};
use crate::vgic::redist::VRedist;
use alloc::sync::Arc;
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
    /// Physical LPIs taken at EL2 for this vCPU (the trapped MSI path; a
    /// direct vLPI never reaches EL2, so it stays 0 on GICv4.0).
    lpis: AtomicU64,
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
    /// One physical LPI taken at EL2 for the loaded vCPU (owner CPU only).
    pub fn lpi(&self) {
        bump(&self.lpis);
    }
    pub fn lpi_count(&self) -> u64 {
        self.lpis.load(Ordering::Relaxed)
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
        self.lpis.store(0, Ordering::Relaxed);
    }
}

/// `T` on cache lines of its own.
#[repr(align(64))]
#[derive(Default)]
pub struct OwnLines<T>(pub T);

impl<T> core::ops::Deref for OwnLines<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// What other CPUs may see of and post to a CPU, laid out by writer (see
/// the module comment).
#[repr(C, align(64))]
pub struct PublicCpu {
    /// Written by other CPUs (posts), emptied by the owner: the doorbell
    /// and slots of the mailbox and the request bits share these lines,
    /// together with what a poster reads to kick the owner.
    pub mailbox: Mailbox<MAILBOX_SLOTS>,
    /// REQ_* bits.
    requests: AtomicU32,
    pub online: AtomicBool,
    pub mpidr: AtomicU64,
    /// Written by the owner only (plain stores), read by the statistics.
    pub counters: OwnLines<VcpuCounters>,
}

impl PublicCpu {
    pub fn new(mpidr: u64) -> Self {
        PublicCpu {
            mailbox: Mailbox::new(),
            requests: AtomicU32::new(0),
            online: AtomicBool::new(false),
            mpidr: AtomicU64::new(mpidr),
            counters: OwnLines::default(),
        }
    }

    pub fn post_request(&self, bits: u32) {
        self.requests.fetch_or(bits, Ordering::Release);
    }

    /// Take every posted request (owner only). Nothing posted costs one
    /// load.
    pub fn take_requests(&self) -> u32 {
        if self.requests.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        self.requests.swap(0, Ordering::Acquire)
    }
}

/// The vCPU loaded on a CPU (its partition is [`Cpu::resident`]).
pub struct LoadedVcpu {
    pub id: VcpuId,
    /// Its emulated redistributor.
    pub vredist: VRedist,
    /// The PMU it was given on this CPU.
    pub pmu: crate::pmu::PmuView,
}

/// A CPU's own state and, beside it, the partition of the vCPU loaded on
/// it. They are apart so that an exit can borrow the partition while it
/// changes the state: the hot paths take `(&Partition, &mut CpuState)` from
/// here with no lock and no reference count change (the `Arc` is cloned
/// once, at vCPU load, and dropped at put).
pub struct Cpu<'s> {
    pub resident: Option<Arc<Partition>>,
    pub state: CpuState<'s>,
}

impl<'s> Cpu<'s> {
    /// CPU `index` of `sys`, nothing loaded.
    pub fn new(sys: &'s System, index: usize) -> Self {
        Cpu {
            resident: None,
            state: CpuState::new(sys, index),
        }
    }

    /// The loaded vCPU's partition and vCPU index, and the state.
    #[inline(always)]
    pub fn split(&mut self) -> (Option<(&Partition, usize)>, &mut CpuState<'s>) {
        let Cpu { resident, state } = self;
        // `resident` is Some exactly while `state.loaded` is (load and put
        // set both), so one test says both.
        let vcpu = state.vcpu;
        (resident.as_deref().map(|p| (p, vcpu)), state)
    }
}

/// State only this CPU touches.
pub struct CpuState<'s> {
    pub index: usize,
    pub mpidr: u64,
    /// This CPU's entry of `System::cpus`.
    pub public: &'s PublicCpu,
    /// List-register allocation of the loaded vCPU.
    pub lrs: LrManager,
    /// The loaded vCPU (running, or about to run).
    pub loaded: Option<LoadedVcpu>,
    /// Its index in its partition (`loaded.id.vcpu`, kept beside it for
    /// the exit entry, which reads it with the partition).
    pub vcpu: usize,
    /// The loaded vCPU's forwarded PPIs as its redistributor says (none
    /// when nothing is loaded), mirrored here so that the timer path reads
    /// two fields of this struct and nothing else.
    pub hw_ppis: HwPpis,
    /// How long the loaded vCPU's timer interrupt has stayed pending
    /// (`lifecycle`'s hang check; own CPU only).
    pub hang: crate::lifecycle::HangWatch,
    /// The vPE resident on this CPU's redistributor (GICv4.0 direct
    /// vLPIs, `vgic::v40`); only this CPU changes it.
    pub vlpi: crate::vgic::v40::Residency,
    /// The vPE resident on this CPU for direct vSGIs (GICv4.1, `vsgi`);
    /// only this CPU changes it.
    pub vsgi: crate::vsgi::VsgiCpu,
}

/// Which pass-through PPIs the loaded vCPU has enabled, and their
/// priorities (`VRedist::hw_ppis`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HwPpis {
    pub enabled: u32,
    pub priority: [u8; 32],
}

impl HwPpis {
    /// The HW-linked interrupt to inject now that PPI `intid` fired, with
    /// the guest's priority, if the guest enabled it; None for an INTID
    /// that is not one of its enabled pass-through PPIs. One bit test
    /// covers the range too: an INTID of 32 or more has no bit here.
    #[inline(always)]
    pub fn fired(&self, intid: u32) -> Option<VirtIrq> {
        let private = intid & 31;
        (intid == private && self.enabled & (1 << private) != 0)
            .then(|| VirtIrq::hw_linked(intid, self.priority[private as usize]))
    }
}

impl<'s> CpuState<'s> {
    /// The state of CPU `index` of `sys` (which must have it).
    pub fn new(sys: &'s System, index: usize) -> Self {
        let public = &sys.cpus[index];
        CpuState {
            index,
            mpidr: public.mpidr.load(Ordering::Relaxed),
            public,
            lrs: LrManager::new(),
            loaded: None,
            vcpu: 0,
            hw_ppis: HwPpis::default(),
            hang: crate::lifecycle::HangWatch::default(),
            vlpi: crate::vgic::v40::Residency::new(),
            vsgi: crate::vsgi::VsgiCpu::default(),
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
    fn owner_counters_do_not_share_a_line_with_what_others_write() {
        let cpu = PublicCpu::new(0);
        let base = &cpu as *const PublicCpu as usize;
        let counters = &*cpu.counters as *const VcpuCounters as usize - base;
        let posted_end = core::mem::offset_of!(PublicCpu, mpidr) + 8;
        assert_eq!(counters % 64, 0);
        assert!(
            counters >= posted_end,
            "counters at {counters}, posts end at {posted_end}"
        );
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
