//! This CPU's state as the platform keeps it: the core's `CpuState` (only
//! its own CPU touches it) and the hardware handle the core drives
//! (`hw::PlatformHw`: this CPU's GIC redistributor and CPU interface, list
//! registers, cached ICH_HCR_EL2). One entry per CPU the hypervisor drives,
//! sized from the host description, reached through TPIDR_EL2 by
//! [`this_cpu`], which only the exception entries and the per-CPU main
//! loops call. What other CPUs may see of a CPU is the core's `PublicCpu`
//! in the `System`.

use crate::arch;
use crate::hw::PlatformHw;
use aarch64_cpu::registers::{Writeable, TPIDR_EL2};
use alloc::vec::Vec;
use core::cell::UnsafeCell;
use pinfold_hv::percpu::Cpu;
use pinfold_hv::system::System;

pub struct CpuLocal {
    /// The system, cached so that no exit goes through the `Once`.
    pub sys: &'static System,
    /// The host UART's INTID (u32::MAX: none), cached for the root handler.
    pub uart_intid: u32,
    pub state: Cpu<'static>,
    pub hw: PlatformHw,
    /// A loaded vCPU of a GICv5-interface partition: its PPI plan and its
    /// saved virtual PPI state (`gicv5::vcpu_load`/`vcpu_put`). The vCPU
    /// is pinned here, so this CPU's slot is its own.
    pub v5_vcpu: Option<(pinfold_hv::vgic5::PpiPlan, pinfold_hv::vgic5::VPpiContext)>,
}

/// A CPU's slot. Only that CPU ever forms a reference into it.
struct Slot(UnsafeCell<CpuLocal>);

// SAFETY: each slot is accessed only by its own CPU (through TPIDR_EL2,
// which points at it), never concurrently; see `this_cpu`.
unsafe impl Sync for Slot {}

static LOCALS: spin::Once<Vec<Slot>> = spin::Once::new();

/// Create every CPU's local state (boot CPU, before any other CPU runs).
pub fn init_all(sys: &'static System) {
    LOCALS.call_once(|| {
        (0..sys.cpus.len())
            .map(|i| {
                Slot(UnsafeCell::new(CpuLocal {
                    sys,
                    uart_intid: sys
                        .host
                        .uart
                        .as_ref()
                        .and_then(|u| u.intid)
                        .unwrap_or(u32::MAX),
                    state: Cpu::new(sys, i),
                    hw: PlatformHw::new(i),
                    v5_vcpu: None,
                }))
            })
            .collect()
    });
}

/// Point TPIDR_EL2 at CPU `index`'s slot (each CPU, once, at its start).
pub fn enter(index: usize) {
    if let Some(slot) = LOCALS.get().and_then(|l| l.get(index)) {
        TPIDR_EL2.set(slot.0.get() as u64);
    }
}

/// This CPU's local state.
///
/// # Safety
/// Call only from an exception entry (guest sync, SError, IRQ) or a per-CPU
/// main loop (boot, secondary start, idle), and drop the reference before
/// anything that may take an exception on this CPU with interrupts unmasked:
/// handlers run with interrupts masked and never nest, so at most one
/// `&mut CpuLocal` is live per CPU. TPIDR_EL2 must have been set by
/// [`enter`].
pub unsafe fn this_cpu() -> &'static mut CpuLocal {
    let ptr = arch::regs::tpidr_el2() as *mut CpuLocal;
    // SAFETY: TPIDR_EL2 points at this CPU's slot, which lives forever;
    // exclusivity as the caller promised.
    unsafe { &mut *ptr }
}

/// This CPU's index, if per-CPU state is set up (for log lines).
pub fn current_index() -> Option<usize> {
    let ptr = arch::regs::tpidr_el2() as *const CpuLocal;
    if ptr.is_null() {
        None
    } else {
        // SAFETY: as in `this_cpu`; only a plain field is read, and nobody
        // writes it after creation.
        Some(unsafe { (*ptr).state.state.index })
    }
}
