//! Per-CPU state, split in two: `CpuLocal` is touched only by its own CPU
//! (reached through TPIDR_EL2, never shared, so it needs no lock), and
//! `PublicCpu` is a small set of atomics plus a mailbox that other CPUs post
//! to before they send this CPU an SGI.

use crate::arch::{self, MAX_CPUS};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use pinfold_drivers::gicv3::GicV3Redist;
use pinfold_hv::vgic::lr::LrManager;
use pinfold_hv::vgic::redist::VRedist;

/// Mailbox request bits.
pub const REQ_CPU_ON: u32 = 1 << 0;
pub const REQ_STOP: u32 = 1 << 1;
pub const REQ_START: u32 = 1 << 2;

/// What other CPUs may see of and post to a CPU.
pub struct PublicCpu {
    pub online: AtomicBool,
    pub mpidr: AtomicU64,
    /// REQ_* bits.
    pub requests: AtomicU32,
    /// Exits and injections of the vCPU on this CPU since it was loaded
    /// (written only by this CPU; read by the stats line and management).
    pub exits: AtomicU64,
    pub exit_class: [AtomicU64; EXIT_CLASSES],
    pub injected: AtomicU64,
}

/// Exit classes counted per vCPU.
pub const EXIT_CLASSES: usize = 6;
pub const EXIT_MMIO: usize = 0;
pub const EXIT_SYSREG: usize = 1;
pub const EXIT_HVC: usize = 2;
pub const EXIT_IRQ: usize = 3;
pub const EXIT_ABORT: usize = 4;
pub const EXIT_OTHER: usize = 5;

impl PublicCpu {
    const fn new() -> Self {
        PublicCpu {
            online: AtomicBool::new(false),
            mpidr: AtomicU64::new(0),
            requests: AtomicU32::new(0),
            exits: AtomicU64::new(0),
            exit_class: [const { AtomicU64::new(0) }; EXIT_CLASSES],
            injected: AtomicU64::new(0),
        }
    }

    pub fn post_request(&self, bits: u32) {
        self.requests.fetch_or(bits, Ordering::Release);
    }

    /// Count one exit of `class` (own CPU only: a plain relaxed add).
    pub fn count_exit(&self, class: usize) {
        self.exits.fetch_add(1, Ordering::Relaxed);
        if let Some(c) = self.exit_class.get(class) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Zero the counters (vCPU load).
    pub fn reset_counters(&self) {
        self.exits.store(0, Ordering::Relaxed);
        self.injected.store(0, Ordering::Relaxed);
        for c in &self.exit_class {
            c.store(0, Ordering::Relaxed);
        }
    }

    pub fn take_requests(&self) -> u32 {
        self.requests.swap(0, Ordering::Acquire)
    }
}

pub static PUBLIC: [PublicCpu; MAX_CPUS] = [const { PublicCpu::new() }; MAX_CPUS];

/// The vCPU a CPU runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VcpuId {
    pub partition: usize,
    pub vcpu: usize,
}

/// State only this CPU touches.
pub struct CpuLocal {
    pub index: usize,
    pub mpidr: u64,
    pub redist: Option<GicV3Redist>,
    pub lrs: LrManager,
    /// The vCPU pinned to this CPU, if any.
    pub vcpu: Option<VcpuId>,
    /// Its emulated redistributor.
    pub vredist: Option<VRedist>,
    /// The vCPU is loaded (running or about to run).
    pub loaded: bool,
}

static mut LOCALS: [Option<CpuLocal>; MAX_CPUS] = [const { None }; MAX_CPUS];

/// Install CPU `index`'s local state and point TPIDR_EL2 at it.
pub fn init_this_cpu(index: usize, mpidr: u64) {
    // SAFETY: each CPU initialises only its own slot, once, before it takes
    // any exception; no other reference to the slot exists.
    let slot = unsafe { &mut (*core::ptr::addr_of_mut!(LOCALS))[index] };
    *slot = Some(CpuLocal {
        index,
        mpidr,
        redist: None,
        lrs: LrManager::new(),
        vcpu: None,
        vredist: None,
        loaded: false,
    });
    if let Some(local) = slot.as_mut() {
        arch::regs::set_tpidr_el2(local as *mut CpuLocal as u64);
    }
    arch::regs::set_hcr_el2(crate::vcpu::HCR_HOST);
    PUBLIC[index].mpidr.store(mpidr, Ordering::Relaxed);
    PUBLIC[index].online.store(true, Ordering::Release);
}

/// This CPU's local state.
///
/// Handlers run with interrupts masked and never nest, and the idle loop
/// touches only `PublicCpu`, so at most one `&mut CpuLocal` is live per CPU.
pub fn this_cpu() -> &'static mut CpuLocal {
    let ptr = arch::regs::tpidr_el2() as *mut CpuLocal;
    // SAFETY: TPIDR_EL2 was set by `init_this_cpu` to this CPU's slot, which
    // lives forever; exclusivity as argued above.
    unsafe { &mut *ptr }
}

/// This CPU's index, if per-CPU state is set up (for log lines).
pub fn current_index() -> Option<usize> {
    let ptr = arch::regs::tpidr_el2() as *const CpuLocal;
    if ptr.is_null() {
        None
    } else {
        // SAFETY: as in `this_cpu`; only a plain field is read.
        Some(unsafe { (*ptr).index })
    }
}
