//! The ablations of `cargo xtask bench`: cargo features of the EL2 image
//! (platform/src/ablate.rs) that swap one hot-path mechanism for the
//! conventional one it replaces.

/// One ablation: a cargo feature of the `pinfold` package that swaps a
/// mechanism of the hot paths for the conventional one it replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ablation {
    pub feature: &'static str,
    /// What the feature swaps, as printed.
    pub what: &'static str,
}

/// The ablations, in the order the report prints them.
pub const ABLATIONS: [Ablation; 2] = [
    Ablation {
        feature: "ablate-irq-fnptr",
        what: "the IRQ vectors load the root handler from a function pointer in data (`adrp; \
               ldr; blr`, as Linux's handle_arch_irq) instead of the one-instruction call site \
               patched at boot (hv::rtconst)",
    },
    Ablation {
        feature: "ablate-chip-lock",
        what: "the GICv3 per-CPU chip declares no lockless per-CPU state (IrqChipCaps { \
               percpu_state_lockless: false }), so timer PPI state changes on vCPU load/put and \
               guest GICR writes take the chip-wide lock (System::chip_lock)",
    },
];
