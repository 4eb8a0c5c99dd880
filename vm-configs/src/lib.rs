//! Partition plans for Pinfold: the TOML schema and its validation (feature
//! `std`, used by the xtask before boot), the runtime plan blob the
//! hypervisor decodes at boot, and the checks shared by the build, the
//! hypervisor and the manager (`no_std`): the per-partition rules
//! (`rules::check_partition`, one plan entry against the partitions
//! already there, at build time and for partitions created at run time),
//! where the images go in a partition's RAM (`fit`) and whether
//! pass-through MMIO keeps partitions apart on a host (`isolation`).
#![cfg_attr(not(feature = "std"), no_std)]
#![forbid(unsafe_code)]

extern crate alloc;

pub mod bundle;
pub mod fit;
pub mod isolation;
pub mod plan;
pub mod rules;

#[cfg(feature = "std")]
mod error;
#[cfg(feature = "std")]
mod payload;
#[cfg(feature = "std")]
mod schema;
#[cfg(feature = "std")]
mod validate;

#[cfg(test)]
mod rules_tests;
#[cfg(all(test, feature = "std"))]
mod tests;

pub use plan::*;

pub use rules::{
    check_partition, HostLimits, Problem, Rejection, Size, LINUX_COMMAND_LINE_SIZE, RAM_GRANULE,
    SPI_FIRST, SPI_LAST,
};

#[cfg(feature = "std")]
pub use error::ConfigError;
#[cfg(feature = "std")]
pub use schema::{
    load, parse, Board, Config, DeviceConfig, ImageFormat, MmioConfig, PartitionConfig, SizeError,
};
#[cfg(feature = "std")]
pub use validate::{hypervisor_reserve, HYPERVISOR_RESERVE_BASE};
