//! Pinfold's portable hypervisor core. Nothing here names a board or the
//! aarch64 instruction set: arch code decodes hardware state into the types
//! here, and this crate decides what happens. Everything runs under
//! `cargo test` on the build host.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;
#[cfg(test)]
extern crate std;

pub mod acpi;
pub mod addr;
pub mod bits;
pub mod boot;
pub mod clock;
pub mod console;
pub mod dtb;
pub mod efi;
pub mod entropy;
pub mod events;
pub mod exit;
pub mod gichost;
pub mod gpio;
pub mod hypercall;
pub mod images;
pub mod irqchip;
pub mod its;
pub mod its5;
pub mod layout;
pub mod lifecycle;
pub mod lockstat;
pub mod mailbox;
pub mod manage;
pub mod memmap;
pub mod partition;
pub mod pci;
pub mod percpu;
pub mod pmu;
pub mod psci;
pub mod ratelimit;
pub mod restart;
pub mod rtconst;
pub mod runtime;
pub mod scrub;
pub mod smmu;
pub mod sriov;
pub mod stage2;
pub mod sysreg;
pub mod system;
pub mod trap;
pub mod vgic;
pub mod vgic5;
pub mod vpci;
pub mod vsgi;
pub mod wdog;
