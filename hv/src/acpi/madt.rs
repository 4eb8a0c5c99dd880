//! MADT (ACPI 6.5, 5.2.12): the CPUs (GICC entries, with their ACPI
//! Processor UIDs) and the GIC (GICD, GICR, ITS entries, with their GIC ITS
//! IDs).
//!
//! A GICv5 host (ACPI 6.7's GICv5 structures, as ACPICA's actbl2.h and
//! Linux's irq-gic-v5 ACPI probe read them; docs/GICV5.md says which
//! layouts are confirmed) has one IRS entry (type 28) per IRS instead of a
//! GICD, ITS Config Frame entries (29) and ITS Translate Frame entries (30,
//! each linked to an ITS by its translator ID), and GICC entries 88 bytes
//! long that end with the CPU's IAFFID and the ID of its IRS. [`parse_gicv5`]
//! reads those into the DT path's `Gicv5Info`; [`parse`] describes such a
//! host as the DT path does (`GicInfo::gicv5`), and the tables' GSIVs are
//! then read in the GICv5 encoding ([`gicv5_gsiv`]: the GTDT's timers and
//! the SPCR's interrupt, `tables::Gsivs`). An IWB is not a MADT entry (it
//! is an IORT node, type 7).

use alloc::vec::Vec;

use super::{AcpiError, Bytes, Table, HEADER_LEN};
use crate::dtb::{GicInfo, Gicv5Info, Gicv5Irs};
use crate::vgic5::INTID_TYPE_PPI;

/// Interrupt controller structure types (ACPI 6.5, table 5.21).
const GICC: u8 = 0x0b;
const GICD: u8 = 0x0c;
const GICR: u8 = 0x0e;
const GIC_ITS: u8 = 0x0f;
/// GICv5 structures (ACPI 6.7; ACPICA `ACPI_MADT_TYPE_GICV5_*`).
const GICV5_IRS: u8 = 28;
const GICV5_ITS: u8 = 29;
const GICV5_ITS_TRANSLATE: u8 = 30;

/// ACPI 6.7's GICC: IAFFID (u16) at 82 and IRS ID (u32) at 84.
const GICC_V5_LEN: usize = 88;
const IRS_LEN: usize = 32;
const GICV5_ITS_LEN: usize = 16;
const GICV5_TRANSLATE_LEN: usize = 24;
/// An IRS config frame and an ITS's frames are 64 KiB (Linux's
/// ACPI_GICV5_IRS_MEM_SIZE).
const GICV5_FRAME_SIZE: u64 = 0x1_0000;
/// GICv5 GSIVs carry the interrupt type in [31:29] (1 = PPI, 3 = SPI, 7 =
/// an IWB wire) and the ID in [23:0] (Linux's GICV5_GSI_IC_TYPE /
/// GICV5_HWIRQ_ID; edk2's GICV5_INTERRUPT_TYPE_MASK / _ID_MASK and its FVP
/// GICv5 platform's GTDT and SPCR values, e.g. the EL2 timer
/// `GICV5_INTERRUPT_TYPE_PPI | 0x1a`).
const GSIV_TYPE_SHIFT: u32 = 29;
const GSIV_ID_MASK: u32 = 0xff_ffff;

/// A GICv5 GSIV's (type, ID). Bits [28:24] are ignored, as Linux does.
pub(super) const fn gicv5_gsiv(gsiv: u32) -> (u32, u32) {
    (gsiv >> GSIV_TYPE_SHIFT, gsiv & GSIV_ID_MASK)
}

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

    if has_irs(t)? {
        let v5 = parse_gicv5(table)?.ok_or(t.malformed("no GICv5 IRS entry"))?;
        return gicv5_host(t, v5);
    }

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
        gic: GicInfo::described(
            (dist, GICD_SIZE),
            redist_regions,
            None,
            maintenance.filter(|&gsiv| gsiv != 0),
            its,
        ),
        its_ids,
    })
}

/// A GICv5 host's CPUs and GIC as the DT path describes the same machine:
/// the CPUs in GICC order (each has an IAFFID: `parse_gicv5` refused a
/// GICC without one), `GicInfo::gicv5` with the IRSes and the maintenance
/// PPI. The MADT does not say which IRS an ITS belongs to: with one IRS
/// every ITS config frame is its (as the DT nests them); with several they
/// are the GIC's ITSes (`GicInfo::its`: counted and kept from partitions)
/// under no IRS. No GIC ITS IDs are kept (`its_ids` empty: the SRAT's ITS
/// affinity is not read for GICv5 ITSes).
fn gicv5_host(t: Bytes<'_>, v5: AcpiGicv5) -> Result<Madt, AcpiError> {
    let mut cpus = Vec::new();
    let mut uids = Vec::new();
    walk(t, |kind, e| {
        if kind == GICC && e.u32(12)? & (GICC_ENABLED | GICC_ONLINE_CAPABLE) != 0 {
            cpus.push(e.u64(68)? & MPIDR_AFFINITY);
            uids.push(e.u32(8)?);
        }
        Ok(())
    })?;
    let mut info = v5.info;
    let its: Vec<(u64, u64)> = v5.its.iter().map(|i| i.config).collect();
    // Each ITS's first linked translate frame: the one Linux's
    // `iort_its_translate_pa` gives a device of that ITS group.
    info.its_translate = v5
        .its
        .iter()
        .map(|i| i.translate_frames.first().map(|&(_, frame)| frame))
        .collect();
    let gic = match info.irs.as_mut_slice() {
        [only] => {
            only.its = its;
            GicInfo::gicv5(info)
        }
        _ => {
            let mut gic = GicInfo::gicv5(info);
            gic.its.extend(its);
            gic.found = crate::gichost::GicFound::from_description(&gic);
            gic
        }
    };
    Ok(Madt {
        cpus,
        uids,
        gic,
        its_ids: Vec::new(),
    })
}

/// Whether the table has a GICv5 IRS entry (walking it as `parse` does).
fn has_irs(t: Bytes<'_>) -> Result<bool, AcpiError> {
    let mut found = false;
    walk(t, |kind, _| {
        found |= kind == GICV5_IRS;
        Ok(())
    })?;
    Ok(found)
}

/// Every entry after the header, its type and its bytes; an entry shorter
/// than its type and length bytes, or running past the table, is refused.
fn walk<'a>(
    t: Bytes<'a>,
    mut each: impl FnMut(u8, Bytes<'a>) -> Result<(), AcpiError>,
) -> Result<(), AcpiError> {
    if t.len() < ENTRIES {
        return Err(AcpiError::Truncated {
            table: t.table,
            offset: HEADER_LEN,
        });
    }
    let mut offset = ENTRIES;
    while offset < t.len() {
        let kind = t.u8(offset)?;
        let len = usize::from(t.u8(offset + 1)?);
        if len < 2 {
            return Err(t.malformed("entry shorter than its own type and length"));
        }
        each(kind, t.sub(offset, len)?)?;
        offset += len;
    }
    Ok(())
}

/// One GICv5 ITS as the MADT describes it: its config frame and the
/// translate frames linked to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcpiGicv5Its {
    pub translator_id: u32,
    /// (base, size) of the ITS config frame.
    pub config: (u64, u64),
    /// (translate frame ID, (base, size)) of each linked translate frame.
    pub translate_frames: Vec<(u32, (u64, u64))>,
}

/// A GICv5 host from the MADT. `info.irs[i].its` stays empty: the MADT
/// does not say which IRS an ITS belongs to; the ITSes are in `its`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcpiGicv5 {
    pub info: Gicv5Info,
    pub its: Vec<AcpiGicv5Its>,
}

/// The MADT's GICv5 structures, or None when it has no IRS entry (a
/// GICv3/v4 host). Every malformed entry is refused naming the field.
pub(super) fn parse_gicv5(table: Table<'_>) -> Result<Option<AcpiGicv5>, AcpiError> {
    let t = table.bytes;
    // (IRS ID, config frame base)
    let mut irses: Vec<(u32, u64)> = Vec::new();
    let mut its: Vec<AcpiGicv5Its> = Vec::new();
    // (linked translator ID, frame ID, base)
    let mut frames: Vec<(u32, u32, u64)> = Vec::new();
    // (MPIDR, IAFFID, IRS ID) of the enabled GICCs that are long enough.
    let mut cpus: Vec<(u64, u16, u32)> = Vec::new();
    let mut short_gicc = false;
    let mut maintenance = None;
    walk(t, |kind, e| {
        match kind {
            GICV5_IRS => {
                need(e, IRS_LEN, "GICv5 IRS entry shorter than 32 bytes")?;
                if e.u8(2)? != 5 {
                    return Err(e.malformed("GICv5 IRS entry: GIC Version is not 5"));
                }
                let id = e.u32(4)?;
                let config = e.u64(16)?;
                if config == 0 {
                    return Err(e.malformed("GICv5 IRS entry: Config Frame Base Address is 0"));
                }
                if irses.iter().any(|&(i, _)| i == id) {
                    return Err(e.malformed("two GICv5 IRS entries with the same IRS ID"));
                }
                irses.push((id, config));
            }
            GICV5_ITS => {
                need(
                    e,
                    GICV5_ITS_LEN,
                    "GICv5 ITS Config Frame entry shorter than 16 bytes",
                )?;
                let id = e.u32(4)?;
                let base = e.u64(8)?;
                if base == 0 {
                    return Err(
                        e.malformed("GICv5 ITS Config Frame entry: Physical Base Address is 0")
                    );
                }
                if its.iter().any(|i| i.translator_id == id) {
                    return Err(e.malformed(
                        "two GICv5 ITS Config Frame entries with the same Translator ID",
                    ));
                }
                its.push(AcpiGicv5Its {
                    translator_id: id,
                    config: (base, GICV5_FRAME_SIZE),
                    translate_frames: Vec::new(),
                });
            }
            GICV5_ITS_TRANSLATE => {
                need(
                    e,
                    GICV5_TRANSLATE_LEN,
                    "GICv5 ITS Translate Frame entry shorter than 24 bytes",
                )?;
                let base = e.u64(16)?;
                if base == 0 {
                    return Err(
                        e.malformed("GICv5 ITS Translate Frame entry: Physical Base Address is 0")
                    );
                }
                frames.push((e.u32(4)?, e.u32(8)?, base));
            }
            GICC => {
                need(e, GICC_MIN_LEN, "GICC entry shorter than 76 bytes")?;
                let flags = e.u32(12)?;
                if flags & (GICC_ENABLED | GICC_ONLINE_CAPABLE) == 0 {
                    return Ok(());
                }
                if maintenance.is_none() {
                    maintenance = Some(e.u32(56)?);
                }
                if e.len() < GICC_V5_LEN {
                    short_gicc = true;
                } else {
                    cpus.push((e.u64(68)? & MPIDR_AFFINITY, e.u16(82)?, e.u32(84)?));
                }
            }
            _ => {}
        }
        Ok(())
    })?;
    if irses.is_empty() {
        return Ok(None);
    }
    if short_gicc {
        return Err(
            t.malformed("GICC entry of a GICv5 host shorter than 88 bytes (no IAFFID and IRS ID)")
        );
    }
    if cpus.is_empty() {
        return Err(t.malformed("no enabled GICC entry"));
    }
    if cpus.iter().any(|c| !irses.iter().any(|&(id, _)| id == c.2)) {
        return Err(t.malformed("GICC entry: IRS ID names no GICv5 IRS entry"));
    }
    for (linked, frame, base) in frames {
        let owner = its
            .iter_mut()
            .find(|i| i.translator_id == linked)
            .ok_or(t.malformed(
                "GICv5 ITS Translate Frame entry: Linked Translator ID names no GICv5 ITS Config Frame entry",
            ))?;
        owner
            .translate_frames
            .push((frame, (base, GICV5_FRAME_SIZE)));
    }
    let irs = irses
        .iter()
        .map(|&(id, config)| Gicv5Irs {
            config: (config, GICV5_FRAME_SIZE),
            cpus: cpus
                .iter()
                .filter(|c| c.2 == id)
                .map(|c| (c.0, c.1))
                .collect(),
            its: Vec::new(),
        })
        .collect();
    let maintenance_ppi = maintenance
        .map(gicv5_gsiv)
        .filter(|&(kind, _)| kind == INTID_TYPE_PPI)
        .map(|(_, id)| id);
    Ok(Some(AcpiGicv5 {
        info: Gicv5Info {
            irs,
            maintenance_ppi,
            // Filled beside `GicInfo::its` (`gicv5_host`).
            its_translate: Vec::new(),
        },
        its,
    }))
}

fn need(entry: Bytes<'_>, len: usize, what: &'static str) -> Result<(), AcpiError> {
    if entry.len() < len {
        Err(entry.malformed(what))
    } else {
        Ok(())
    }
}
