//! Ablations: cargo features of the EL2 image that swap one mechanism of the
//! hot paths for the conventional one it replaces, so that `cargo xtask
//! bench` can show what the design buys (docs/PERFORMANCE.md, Ablations).
//! They change the mechanism only; nothing here knows it is measured.
//!
//! - `ablate-irq-fnptr`: the vectors reach the root IRQ handler through a
//!   function pointer loaded from data (`adrp; ldr; blr`, as Linux's
//!   `handle_arch_irq`) instead of the call site patched at boot
//!   (`irq::install_root_handler`, `hv::rtconst`).
//! - `ablate-chip-lock`: the GICv3 per-CPU chip is built without the
//!   `percpu_state_lockless` capability, so `hv::irqchip::change_percpu_state`
//!   takes the chip-wide lock (`System::chip_lock`, counted per `LockPath`)
//!   on vCPU load and put and on every timer PPI state change.

use pinfold_drivers::gicv3::GICV3_CAPS;
use pinfold_hv::irqchip::IrqChipCaps;

/// What this CPU's GICv3 chip declares: the driver's capabilities, or,
/// under `ablate-chip-lock`, the same without lockless per-CPU state.
#[cfg(not(feature = "ablate-chip-lock"))]
pub const GIC_CPU_CAPS: IrqChipCaps = GICV3_CAPS;
#[cfg(feature = "ablate-chip-lock")]
pub const GIC_CPU_CAPS: IrqChipCaps = {
    let mut caps = GICV3_CAPS;
    caps.percpu_state_lockless = false;
    caps
};

/// The ablations built into this image, for the boot log.
pub fn log_ablations() {
    #[cfg(feature = "ablate-chip-lock")]
    crate::hvlog!(
        "ablation ablate-chip-lock: the GICv3 per-CPU chip declares no lockless per-CPU state; \
         timer PPI state on vCPU load/put and guest GICR writes takes the chip-wide lock"
    );
    #[cfg(feature = "ablate-irq-fnptr")]
    crate::hvlog!(
        "ablation ablate-irq-fnptr: the IRQ vectors load the root handler from a function pointer"
    );
}

/// Under `ablate-irq-fnptr`: each IRQ call site loads its handler from its
/// pointer (`pinfold_irq_handler_ptr_{guest,hv}`, vectors.S), which holds
/// the default handler until this stores the GIC driver's root handler
/// entry for that site. Secondary CPUs start later (PSCI CPU_ON orders the
/// stores before them) and this CPU unmasks IRQs later still.
#[cfg(feature = "ablate-irq-fnptr")]
pub fn install_root_handler() {
    use core::sync::atomic::{AtomicU64, Ordering};
    extern "C" {
        static pinfold_irq_handler_ptr_guest: AtomicU64;
        static pinfold_irq_handler_ptr_hv: AtomicU64;
    }
    // SAFETY: 8-byte aligned words in the image's .data (vectors.S); the
    // vectors only load them.
    let sites = unsafe {
        [
            (
                "guest",
                &pinfold_irq_handler_ptr_guest,
                crate::irq::pinfold_gic_root_irq_guest as *const () as usize as u64,
            ),
            (
                "hv",
                &pinfold_irq_handler_ptr_hv,
                crate::irq::pinfold_gic_root_irq as *const () as usize as u64,
            ),
        ]
    };
    for (name, ptr, target) in sites {
        ptr.store(target, Ordering::Release);
        let stored = ptr.load(Ordering::Relaxed);
        crate::hvlog!(
            "irq call site {name}: function pointer @{:#x} = {stored:#x} (root handler \
             {target:#x}{})",
            ptr as *const AtomicU64 as u64,
            if stored == target {
                ", ok"
            } else {
                ", MISMATCH"
            }
        );
    }
}
