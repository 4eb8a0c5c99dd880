//! SRAT (ACPI 6.5, 5.2.16): the proximity domain of each CPU (GICC
//! Affinity Structure, type 3, by ACPI Processor UID) and of each ITS (GIC
//! ITS Affinity Structure, type 4, by GIC ITS ID), which the vSGI path uses
//! to give every CPU the ITS of its own NUMA node. Memory affinity and the
//! other structures are skipped.

use alloc::vec::Vec;

use super::{AcpiError, Table, HEADER_LEN};
use crate::dtb::NumaInfo;

/// Static resource affinity structure types (ACPI 6.5, 5.2.16).
const GICC_AFFINITY: u8 = 3;
const GIC_ITS_AFFINITY: u8 = 4;
const GICC_AFFINITY_LEN: usize = 18;
const GIC_ITS_AFFINITY_LEN: usize = 12;
/// GICC Affinity flags bit 0: Enabled.
const ENABLED: u32 = 1 << 0;

/// The structures start after the header, 4 bytes of "table revision"
/// (reserved, 1) and 8 reserved bytes.
const ENTRIES: usize = HEADER_LEN + 12;

/// The affinity the SRAT gives.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Srat {
    /// (ACPI Processor UID, proximity domain) of enabled GICC entries.
    pub gicc: Vec<(u32, u32)>,
    /// (GIC ITS ID, proximity domain).
    pub its: Vec<(u32, u32)>,
}

pub(super) fn parse(table: Table<'_>) -> Result<Srat, AcpiError> {
    let t = table.bytes;
    if t.len() < ENTRIES {
        return Err(AcpiError::Truncated {
            table: t.table,
            offset: HEADER_LEN,
        });
    }
    let mut srat = Srat::default();
    let mut offset = ENTRIES;
    while offset < t.len() {
        let kind = t.u8(offset)?;
        let len = usize::from(t.u8(offset + 1)?);
        if len < 2 {
            return Err(t.malformed("entry shorter than its own type and length"));
        }
        let e = t.sub(offset, len)?;
        match kind {
            GICC_AFFINITY => {
                if len < GICC_AFFINITY_LEN {
                    return Err(e.malformed("GICC Affinity entry shorter than 18 bytes"));
                }
                if e.u32(10)? & ENABLED != 0 {
                    srat.gicc.push((e.u32(6)?, e.u32(2)?));
                }
            }
            GIC_ITS_AFFINITY => {
                if len < GIC_ITS_AFFINITY_LEN {
                    return Err(e.malformed("GIC ITS Affinity entry shorter than 12 bytes"));
                }
                srat.its.push((e.u32(8)?, e.u32(2)?));
            }
            _ => {} // memory, generic initiator, other architectures' CPUs
        }
        offset += len;
    }
    Ok(srat)
}

impl Srat {
    /// The nodes of the MADT's CPUs (by `uids`) and ITSes (by `its_ids`).
    pub fn numa(&self, uids: &[u32], its_ids: &[u32]) -> NumaInfo {
        let find = |list: &[(u32, u32)], id: u32| list.iter().find(|e| e.0 == id).map(|e| e.1);
        let cpus: Vec<_> = uids.iter().map(|&u| find(&self.gicc, u)).collect();
        let its: Vec<_> = its_ids.iter().map(|&i| find(&self.its, i)).collect();
        if cpus.iter().chain(&its).all(Option::is_none) {
            return NumaInfo::default();
        }
        NumaInfo { cpus, its }
    }
}
