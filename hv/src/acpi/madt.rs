//! MADT (ACPI 6.5, 5.2.12): the CPUs (GICC entries, with their ACPI
//! Processor UIDs) and the GIC (GICD, GICR, ITS entries, with their GIC ITS
//! IDs).

use alloc::vec::Vec;

use super::{AcpiError, Bytes, Table, HEADER_LEN};
use crate::dtb::GicInfo;

/// Interrupt controller structure types (ACPI 6.5, table 5.21).
const GICC: u8 = 0x0b;
const GICD: u8 = 0x0c;
const GICR: u8 = 0x0e;
const GIC_ITS: u8 = 0x0f;

/// GICC flags: Enabled, Online Capable (ACPI 6.5, table 5.37).
const GICC_ENABLED: u32 = 1 << 0;
const GICC_ONLINE_CAPABLE: u32 = 1 << 3;

/// ACPI 5.1's GICC length; later revisions append fields we do not read.
const GICC_MIN_LEN: usize = 76;
const GICD_MIN_LEN: usize = 24;
const GICR_MIN_LEN: usize = 16;
const ITS_MIN_LEN: usize = 16;

/// MPIDR affinity fields (Aff3 at 39:32, Aff2..Aff0 at 23:0), as the DT's
/// cpu `reg` and Linux's MPIDR_HWID_BITMASK keep them.
const MPIDR_AFFINITY: u64 = 0xff_00ff_ffff;

/// The distributor frame is 64 KiB (GICv3 architecture, 12.1.1).
const GICD_SIZE: u64 = 0x1_0000;
/// One redistributor: RD_base + SGI_base, plus VLPI_base and a reserved
/// frame on GICv4 (GICv3 architecture, 12.10).
const GICR_V3_SIZE: u64 = 0x2_0000;
const GICR_V4_SIZE: u64 = 0x4_0000;
/// An ITS's control and translation frames (the DT path's QEMU `reg` size).
const ITS_SIZE: u64 = 0x2_0000;

/// MADT entries start after the header, the local interrupt controller
/// address and the flags.
const ENTRIES: usize = HEADER_LEN + 8;

/// What the MADT says.
pub(super) struct Madt {
    /// The enabled (or online-capable) CPUs' MPIDRs in MADT order.
    pub cpus: Vec<u64>,
    /// Their ACPI Processor UIDs (the SRAT's GICC affinity names CPUs by it).
    pub uids: Vec<u32>,
    pub gic: GicInfo,
    /// The GIC ITS ID of each of `gic.its` (the SRAT's and IORT's name).
    pub its_ids: Vec<u32>,
}

/// The CPUs and the GIC.
pub(super) fn parse(table: Table<'_>) -> Result<Madt, AcpiError> {
    let t = table.bytes;
    if t.len() < ENTRIES {
        return Err(AcpiError::Truncated {
            table: t.table,
            offset: HEADER_LEN,
        });
    }
    let mut cpus = Vec::new();
    let mut uids = Vec::new();
    let mut its_ids = Vec::new();
    let mut gicc_redists = Vec::new();
    let mut gicc_without_redist = false;
    let mut maintenance = None;
    let mut dist = None;
    let mut redist_regions = Vec::new();
    let mut its = Vec::new();

    let mut offset = ENTRIES;
    while offset < t.len() {
        let kind = t.u8(offset)?;
        let len = usize::from(t.u8(offset + 1)?);
        if len < 2 {
            return Err(t.malformed("entry shorter than its own type and length"));
        }
        let e = t.sub(offset, len)?;
        match kind {
            GICC => {
                need(e, GICC_MIN_LEN, "GICC entry shorter than 76 bytes")?;
                let flags = e.u32(12)?;
                if flags & (GICC_ENABLED | GICC_ONLINE_CAPABLE) != 0 {
                    cpus.push(e.u64(68)? & MPIDR_AFFINITY);
                    uids.push(e.u32(8)?);
                    if maintenance.is_none() {
                        maintenance = Some(e.u32(56)?);
                    }
                    match e.u64(60)? {
                        0 => gicc_without_redist = true,
                        base => gicc_redists.push(base),
                    }
                }
            }
            GICD => {
                need(e, GICD_MIN_LEN, "GICD entry shorter than 24 bytes")?;
                if dist.is_some() {
                    return Err(t.malformed("more than one GICD entry"));
                }
                dist = Some((e.u64(8)?, e.u8(20)?));
            }
            GICR => {
                need(e, GICR_MIN_LEN, "GICR entry shorter than 16 bytes")?;
                redist_regions.push((e.u64(4)?, u64::from(e.u32(12)?)));
            }
            GIC_ITS => {
                need(e, ITS_MIN_LEN, "GIC ITS entry shorter than 16 bytes")?;
                its.push((e.u64(8)?, ITS_SIZE));
                its_ids.push(e.u32(4)?);
            }
            _ => {} // GICv2m MSI frames, other architectures' entries
        }
        offset += len;
    }

    let (dist, version) = dist.ok_or(t.malformed("no GICD entry"))?;
    // 0 = "determine from the hardware": the driver checks GICD_PIDR2.
    // GICv4 is a GICv3 to the DT binding and to our driver (its
    // redistributors' extra frames are found from GICR_TYPER.VLPIS).
    let gicr_size = match version {
        0 | 3 => GICR_V3_SIZE,
        4 => GICR_V4_SIZE,
        v => return Err(AcpiError::UnsupportedGic(v)),
    };
    if cpus.is_empty() {
        return Err(t.malformed("no enabled GICC entry"));
    }
    if redist_regions.is_empty() {
        // Without GICR entries every CPU's GICC names its redistributor.
        if gicc_without_redist {
            return Err(t.malformed("no GICR entry and a GICC without a GICR base"));
        }
        redist_regions = gicc_redists.into_iter().map(|b| (b, gicr_size)).collect();
    }
    Ok(Madt {
        cpus,
        uids,
        gic: GicInfo {
            version: 3,
            dist: (dist, GICD_SIZE),
            redist_regions,
            redist_stride: None,
            maintenance_intid: maintenance.filter(|&gsiv| gsiv != 0),
            its,
        },
        its_ids,
    })
}

fn need(entry: Bytes<'_>, len: usize, what: &'static str) -> Result<(), AcpiError> {
    if entry.len() < len {
        Err(entry.malformed(what))
    } else {
        Ok(())
    }
}
