//! Hardware drivers for Pinfold at EL2: the physical GICv3 (and its ITS
//! with the redistributors' LPIs, `gicv3_its`) and GICv5, the host PL011
//! UART and the arch timer. Register access lives here and in platform/arch;
//! deciding what to do with it lives in `pinfold-hv`.
#![no_std]

pub mod gicv3;
pub mod gicv3_its;
pub mod gicv5;
pub mod gicv5_its;
pub mod pl011;
pub mod timer;
