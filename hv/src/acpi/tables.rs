//! The small fixed-layout tables: GTDT, SPCR, FADT, MCFG.

use alloc::vec::Vec;

use super::madt::gicv5_gsiv;
use super::{AcpiError, AcpiWarning, Table, HEADER_LEN};
use crate::dtb::{Conduit, PsciInfo, TimerPpis, UartInfo};
use crate::vgic5::{core_intid, INTID_TYPE_PPI, INTID_TYPE_SPI};

/// How the tables' GSIVs name interrupts, chosen by the MADT's GIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Gsivs {
    /// GICv3/v4: a GSIV is the INTID.
    Gicv3,
    /// GICv5: the type in [31:29], the ID in [23:0] (`madt::gicv5_gsiv`),
    /// numbered for the core as the DT path numbers a GICv5 specifier
    /// (`vgic5::core_intid`: PPI n is n for 16..31, SPI n is 32 + n).
    Gicv5,
}

impl Gsivs {
    /// The core's INTID for a GICv5 GSIV of type `kind` (PPI or SPI), or
    /// None; on a GICv3 the GSIV itself.
    fn intid(self, gsiv: u32, kind: u32) -> Option<u32> {
        match self {
            Gsivs::Gicv3 => Some(gsiv),
            Gsivs::Gicv5 => match gicv5_gsiv(gsiv) {
                (k, id) if k == kind => core_intid(k, id),
                _ => None,
            },
        }
    }
}

/// GTDT (ACPI 6.5, 5.2.25): the architected timers' GSIVs, which on a
/// GICv3 are their INTIDs and on a GICv5 PPIs in the GSIV encoding. The
/// fields up to the EL2 timer's flags (offset 80) are in every revision
/// since ACPI 5.0.
///
/// On a GICv5 a GSIV of 0 is a timer the firmware does not provide (kept
/// as 0: no PPI, so `vgic5::check_described` names it when Pinfold needs
/// it); any other GSIV that is not a PPI 16..31 is refused naming the
/// field, as the DT path refuses a timer specifier it cannot number.
pub(super) fn parse_gtdt(table: Table<'_>, gsivs: Gsivs) -> Result<TimerPpis, AcpiError> {
    let t = table.bytes;
    // Read the last field first, so a short table is refused as a whole.
    t.u32(76)?;
    let timer = |offset: usize, what: &'static str| match t.u32(offset)? {
        0 => Ok(0),
        gsiv => gsivs.intid(gsiv, INTID_TYPE_PPI).ok_or(t.malformed(what)),
    };
    Ok(TimerPpis {
        sec_phys: timer(48, "Secure EL1 Timer GSIV is not a GICv5 PPI 16..31")?,
        phys: timer(56, "Non-Secure EL1 Timer GSIV is not a GICv5 PPI 16..31")?,
        virt: timer(64, "Virtual EL1 Timer GSIV is not a GICv5 PPI 16..31")?,
        hyp: timer(72, "EL2 Timer GSIV is not a GICv5 PPI 16..31")?,
    })
}

/// SPCR interface types (DBG2 serial port subtypes, Microsoft's "Debug
/// Port Table 2" table 3) the PL011 driver handles: ARM PL011, the SBSA
/// 32-bit-only generic UART (deprecated) and the SBSA generic UART.
const PL011_TYPES: [u8; 3] = [0x03, 0x0d, 0x0e];
/// SPCR interrupt type bit: ARM GIC (the GSIV is an INTID).
const SPCR_IRQ_GIC: u8 = 1 << 3;
/// PL011 register block size (what the DT describes on QEMU virt).
const PL011_SIZE: u64 = 0x1000;

/// SPCR (Microsoft's "Serial Port Console Redirection Table", revision 2):
/// the console UART. A UART we cannot drive is a warning, not an error.
/// Its interrupt is kept when it is an SPI the core numbers (on a GICv5 an
/// SPI GSIV; an IWB wire has no core number); otherwise the console works
/// polled, as on the DT path.
pub(super) fn parse_spcr(
    table: Table<'_>,
    gsivs: Gsivs,
    warnings: &mut Vec<AcpiWarning>,
) -> Result<Option<UartInfo>, AcpiError> {
    let t = table.bytes;
    t.u32(54)?; // the GSIV, the last field we read
    let interface_type = t.u8(36)?;
    if !PL011_TYPES.contains(&interface_type) {
        warnings.push(AcpiWarning::UartUnsupported { interface_type });
        return Ok(None);
    }
    // Generic address structure at 40: space ID, bit width, bit offset,
    // access size, 64-bit address.
    let space_id = t.u8(40)?;
    if space_id != 0 {
        warnings.push(AcpiWarning::UartNotMmio { space_id });
        return Ok(None);
    }
    let base = t.u64(44)?;
    if base == 0 {
        return Err(t.malformed("UART base address is 0"));
    }
    let intid = if t.u8(52)? & SPCR_IRQ_GIC != 0 {
        gsivs
            .intid(t.u32(54)?, INTID_TYPE_SPI)
            .filter(|&intid| intid >= 32)
    } else {
        None
    };
    Ok(Some(UartInfo {
        base,
        size: PL011_SIZE,
        intid,
    }))
}

/// FADT ARM boot architecture flags (ACPI 6.5, table 5.11).
const ARM_PSCI_COMPLIANT: u16 = 1 << 0;
const ARM_PSCI_USE_HVC: u16 = 1 << 1;
/// PSCI_CPU_ON, SMC64 convention (PSCI, ARM DEN 0022, 5.1.4), as the DT
/// path reports for PSCI 0.2 and later (ACPI requires PSCI 0.2 or later).
const PSCI_CPU_ON_64: u32 = 0xC400_0003;

/// FADT: the PSCI conduit. A FADT from before ACPI 5.1 (revision 5, minor
/// revision 1: the first with ARM boot flags, the one Linux requires) or
/// one without PSCI_COMPLIANT says nothing about PSCI: `None`.
pub(super) fn parse_fadt(table: Table<'_>) -> Result<Option<PsciInfo>, AcpiError> {
    let t = table.bytes;
    let (Ok(revision), Ok(minor), Ok(flags)) = (t.u8(8), t.u8(131), t.u16(129)) else {
        return Ok(None);
    };
    if (revision, minor) < (5, 1) {
        return Ok(None);
    }
    if flags & ARM_PSCI_COMPLIANT == 0 {
        return Ok(None);
    }
    Ok(Some(PsciInfo {
        conduit: if flags & ARM_PSCI_USE_HVC != 0 {
            Conduit::Hvc
        } else {
            Conduit::Smc
        },
        cpu_on_fid: PSCI_CPU_ON_64,
    }))
}

/// One MCFG allocation: where segment 0's ECAM window for its buses is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ecam {
    /// (base, size) of the window from the start bus on, as a DT
    /// `pci-host-ecam-generic` `reg` describes it.
    pub window: (u64, u64),
    pub bus_range: (u32, u32),
}

/// MCFG (PCI Firmware Specification 3.3, 4.1.2): segment 0's first ECAM
/// allocation. Its base address is bus 0's, even when the bus range starts
/// higher (as Linux's pci_mcfg reads it).
pub(super) fn parse_mcfg(table: Table<'_>) -> Result<Option<Ecam>, AcpiError> {
    let t = table.bytes;
    let body = t
        .len()
        .checked_sub(HEADER_LEN + 8)
        .ok_or(AcpiError::Truncated {
            table: t.table,
            offset: HEADER_LEN,
        })?;
    if body % 16 != 0 {
        return Err(t.malformed("length is not the header plus 16-byte allocations"));
    }
    for k in 0..body / 16 {
        let e = t.sub(HEADER_LEN + 8 + 16 * k, 16)?;
        if e.u16(8)? != 0 {
            continue;
        }
        let (start, end) = (e.u8(10)?, e.u8(11)?);
        if start > end {
            return Err(t.malformed("bus range ends before it starts"));
        }
        let base = e
            .u64(0)?
            .checked_add(u64::from(start) << 20)
            .ok_or(t.malformed("ECAM window wraps"))?;
        let size = (u64::from(end) - u64::from(start) + 1) << 20;
        base.checked_add(size)
            .ok_or(t.malformed("ECAM window wraps"))?;
        return Ok(Some(Ecam {
            window: (base, size),
            bus_range: (u32::from(start), u32::from(end)),
        }));
    }
    Ok(None)
}
