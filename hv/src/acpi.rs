//! The host description from ACPI: what UEFI firmware that hands over no
//! DTB tells the hypervisor, read into the same `dtb::HostInfo` the DTB path
//! produces, so nothing after the parse knows which one the machine had.
//!
//! `parse_host_acpi` starts at the RSDP (revision 2: the XSDT; both of its
//! checksums verified), reads the XSDT's entries, and parses MADT (CPUs,
//! GIC distributor, redistributors, ITSes, the maintenance interrupt; or a
//! GICv5's IRSes, ITSes and the CPUs' IAFFIDs), GTDT
//! (timer INTIDs), SPCR (console UART), FADT (PSCI conduit), MCFG (ECAM)
//! and IORT (kept in `Iort`; its SMMUv3 nodes become `arm,smmu-v3` host
//! devices and its root complex's mappings into them the host bridge's
//! `iommu_map`, its mappings that end in an ITS group the bridge's
//! `msi_map`, as the DT describes them), and
//! the SRAT's GICC and GIC ITS affinity (the CPUs' and ITSes' NUMA nodes,
//! `srat`; each CPU's ITS is chosen by them).
//! On a GICv5 host the GTDT's and SPCR's GSIVs are read in the GICv5
//! encoding (type in [31:29]) into the core's numbers, as the DT path reads
//! the same machine's specifiers, and the host is refused when the tables
//! lack what the core needs (`vgic5::check_described`, the DT path's
//! check: `AcpiError::Gicv5Lacks` naming each missing timer PPI).
//! Every table it reads is fetched through `PhysRead` (the caller decides
//! which physical memory the parser may see), has its length bounded and
//! its checksum verified, and a table that fails either is refused by name.
//! What ACPI keeps only in AML (PCIe windows, INTx routing, the platform
//! devices) comes from a per-board fallback (`board`, docs/BOARDS.md):
//! we do not interpret AML. `early_uart` finds the console from the SPCR
//! alone, so the platform can print why the full parse refused the tables.
//!
//! **Memory safety and robustness rules of this module** (it reads what
//! firmware wrote, possibly with the MMU off, where an unaligned access
//! faults):
//! - every multi-byte field is read from a byte slice by copying it into an
//!   array and `from_le_bytes` (`Bytes`); there are no raw pointers and no
//!   casts of bytes to structs, so no load is ever wider or less aligned
//!   than a byte load the compiler chooses to make;
//! - no panics: every offset is checked (`get`), arithmetic on values read
//!   from a table is checked or done in `u64` from `u32`s;
//! - every loop advances by at least one entry's minimum size through a
//!   buffer of known length (an entry length of 0 is an error, not a loop);
//!   no table is followed from another but the XSDT from the RSDP and the
//!   tables from the XSDT (an XSDT listing itself is only an entry with a
//!   signature nobody asks for), and the XSDT's entries are walked once per
//!   table looked up;
//! - nothing is allocated from a count a table declares before that count
//!   has been checked against the table's length.
//!
//! **Why not the `acpi` crate (5.2)**: its tables are reached through
//! `AcpiHandler::map_physical_region`, an `unsafe fn` returning a
//! `PhysicalMapping<T>` that dereferences a pointer to a packed struct;
//! this crate is `#![forbid(unsafe_code)]` and is tested and fuzzed over
//! plain byte slices, and the platform code it would need (a handler that
//! hands out typed pointers into firmware memory) is exactly what we want
//! to keep out of EL2. Its `platform_info` panics (`unimplemented!`) on the
//! GIC entries every arm64 MADT has, and it has no GTDT or IORT parser, so
//! we would use it only for the RSDP/XSDT walk, which is about 80 lines
//! here. The `aml` crate is not used either (see `board`).

use alloc::vec::Vec;
use core::fmt;

use crate::dtb::{EarlyUart, HostInfo, NumaInfo};

pub(crate) mod board;
mod iort;
mod madt;
mod srat;
mod tables;
#[cfg(test)]
pub(crate) mod tests;

pub use board::KNOWN_BOARDS;
pub use iort::{Iort, IortIdMapping, IortItsGroup, IortIwb, IortRootComplex, IortSmmuV3};
pub use madt::{AcpiGicv5, AcpiGicv5Its};

/// Physical memory the parser may read.
///
/// The platform implements it over identity-mapped memory, allowing only
/// the ranges it trusts to hold firmware tables (UEFI's ACPI reclaim and
/// NVS regions); tests implement it over captured blobs.
pub trait PhysRead {
    /// The `len` bytes at physical address `addr`, or `None` when any of
    /// them lies outside what the caller allows (a slice of another length
    /// is treated the same). The parser asks only for a table's header and
    /// then for the length the header gives, bounded by `MAX_TABLE_LEN`.
    fn read(&self, addr: u64, len: usize) -> Option<&[u8]>;
}

/// The largest table the parser reads whole (a MADT for 512 CPUs is about
/// 42 KiB; the DSDT, which can be larger, is never read). It also bounds
/// what a table can make the parser allocate (the CPU list, IORT nodes).
pub const MAX_TABLE_LEN: u32 = 256 << 10;

/// Everything the ACPI tables told us.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcpiTables {
    /// The host description. ACPI does not describe RAM: `memory` and
    /// `reserved` are empty, and the UEFI entry fills them from the UEFI
    /// memory map. `rng_seed`, `kaslr_seed` and `model` are `None` (no such
    /// ACPI tables; UEFI has EFI_RNG_PROTOCOL).
    pub host: HostInfo,
    /// The IORT, when there is one.
    pub iort: Option<Iort>,
    /// The board fallback that supplied the PCIe windows, INTx routing and
    /// the device list (`KNOWN_BOARDS`), if the tables matched one.
    pub board: Option<&'static str>,
    /// Things the platform should print but that do not stop boot.
    pub warnings: Vec<AcpiWarning>,
}

/// A table signature, as in the SDT header (`APIC`, `FACP`...).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Signature(pub [u8; 4]);

impl Signature {
    pub const XSDT: Signature = Signature(*b"XSDT");
    pub const MADT: Signature = Signature(*b"APIC");
    pub const FADT: Signature = Signature(*b"FACP");
    pub const GTDT: Signature = Signature(*b"GTDT");
    pub const SPCR: Signature = Signature(*b"SPCR");
    pub const MCFG: Signature = Signature(*b"MCFG");
    pub const IORT: Signature = Signature(*b"IORT");
    pub const SRAT: Signature = Signature(*b"SRAT");
}

/// Printable ASCII as is, anything else as `\xNN`.
fn write_ascii(f: &mut fmt::Formatter<'_>, bytes: &[u8]) -> fmt::Result {
    for &b in bytes {
        if (0x20..0x7f).contains(&b) {
            write!(f, "{}", b as char)?;
        } else {
            write!(f, "\\x{b:02x}")?;
        }
    }
    Ok(())
}

impl fmt::Display for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_ascii(f, &self.0)
    }
}

impl fmt::Debug for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Signature(\"{self}\")")
    }
}

/// Why the ACPI tables were refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcpiError {
    /// The RSDP is not a revision 2 RSDP with valid checksums.
    BadRsdp(&'static str),
    /// `what` at `addr..addr + len` is outside the memory the caller allows.
    Unreadable {
        what: &'static str,
        addr: u64,
        len: u64,
    },
    /// A table's header was readable, the length it gives is not.
    TableUnreadable {
        table: Signature,
        addr: u64,
        len: u32,
    },
    /// The table at `addr` was expected to be `expected`.
    BadSignature {
        addr: u64,
        expected: Signature,
        found: Signature,
    },
    /// A table's length is shorter than its header or above `MAX_TABLE_LEN`.
    BadLength {
        table: Signature,
        addr: u64,
        len: u32,
    },
    /// A table's bytes do not sum to 0.
    BadChecksum { table: Signature, addr: u64 },
    /// A field or entry at `offset` runs past the table's end.
    Truncated { table: Signature, offset: usize },
    /// A table's contents make no sense.
    Malformed {
        table: Signature,
        what: &'static str,
    },
    /// A table the hypervisor cannot run without is not in the XSDT.
    MissingTable(Signature),
    /// The MADT's GIC distributor declares a GIC version we do not drive.
    UnsupportedGic(u8),
    /// The MADT describes a GICv5 that lacks what the core needs, as far
    /// as the tables tell (`vgic5::check_described`: an IRS, the GTDT's
    /// timer PPIs 26, 27 and 30): the DT path's `DtbError::Gicv5Lacks`.
    Gicv5Lacks(crate::vgic5::MissingFeatures),
}

impl fmt::Display for AcpiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AcpiError::BadRsdp(why) => write!(f, "RSDP: {why}"),
            AcpiError::Unreadable { what, addr, len } => write!(
                f,
                "{what} at {addr:#x} ({len} bytes) is outside the memory firmware tables may use"
            ),
            AcpiError::TableUnreadable { table, addr, len } => write!(
                f,
                "{table} at {addr:#x}: its length ({len} bytes) reaches outside the memory \
                 firmware tables may use"
            ),
            AcpiError::BadSignature {
                addr,
                expected,
                found,
            } => write!(
                f,
                "table at {addr:#x}: expected {expected}, found \"{found}\""
            ),
            AcpiError::BadLength { table, addr, len } => {
                write!(f, "{table} at {addr:#x}: bad length {len}")
            }
            AcpiError::BadChecksum { table, addr } => {
                write!(f, "{table} at {addr:#x}: bad checksum, table refused")
            }
            AcpiError::Truncated { table, offset } => {
                write!(
                    f,
                    "{table}: truncated (field at offset {offset} past the end)"
                )
            }
            AcpiError::Malformed { table, what } => write!(f, "{table}: {what}"),
            AcpiError::MissingTable(table) => write!(f, "no {table} table"),
            AcpiError::UnsupportedGic(v) => {
                write!(f, "MADT: GIC version {v} is not supported (GICv3/v4 only)")
            }
            AcpiError::Gicv5Lacks(missing) => write!(f, "{missing}"),
        }
    }
}

/// Something the tables did not tell us, worth a console line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcpiWarning {
    /// No board fallback matches: no PCIe host bridge and no devices.
    UnknownBoard {
        oem_id: [u8; 6],
        oem_table_id: [u8; 8],
        ecam: Option<u64>,
    },
    /// The SPCR names a UART that is not a PL011 / SBSA UART.
    UartUnsupported { interface_type: u8 },
    /// The SPCR's UART is not in system memory space.
    UartNotMmio { space_id: u8 },
    /// No FADT, or one that does not say PSCI: no secondary CPUs.
    NoPsci,
}

impl fmt::Display for AcpiWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AcpiWarning::UnknownBoard {
                oem_id,
                oem_table_id,
                ecam,
            } => {
                write!(f, "ACPI: unknown board (OEM \"")?;
                write_ascii(f, oem_id)?;
                write!(f, "\" \"")?;
                write_ascii(f, oem_table_id)?;
                write!(f, "\"")?;
                if let Some(ecam) = ecam {
                    write!(f, ", ECAM {ecam:#x}")?;
                }
                write!(
                    f,
                    "): PCIe windows and devices live in AML, which Pinfold does not read; \
                     no PCIe host bridge and no devices for partitions (docs/BOARDS.md)"
                )
            }
            AcpiWarning::UartUnsupported { interface_type } => write!(
                f,
                "ACPI: SPCR UART interface type {interface_type:#x} is not a PL011/SBSA UART: no console"
            ),
            AcpiWarning::UartNotMmio { space_id } => write!(
                f,
                "ACPI: SPCR UART is in address space {space_id}, not memory: no console"
            ),
            AcpiWarning::NoPsci => write!(
                f,
                "ACPI: the FADT does not declare PSCI: secondary CPUs cannot be started"
            ),
        }
    }
}

/// Reads the host description from the ACPI tables the RSDP at `rsdp`
/// leads to.
pub fn parse_host_acpi(rsdp: u64, mem: &dyn PhysRead) -> Result<AcpiTables, AcpiError> {
    let xsdt = read_rsdp(rsdp, mem)?;
    let index = TableIndex::read(xsdt, mem)?;
    let mut warnings = Vec::new();

    let madt = index
        .get(Signature::MADT, mem)?
        .ok_or(AcpiError::MissingTable(Signature::MADT))?;
    let madt::Madt {
        cpus,
        uids,
        gic,
        its_ids,
    } = madt::parse(madt)?;
    let numa = match index.get(Signature::SRAT, mem)? {
        Some(t) => srat::parse(t)?.numa(&uids, &its_ids),
        None => NumaInfo::default(),
    };
    // A GICv5's GSIVs carry their interrupt type: numbered for the core as
    // the DT path numbers the same machine's specifiers.
    let gsivs = match gic.v5 {
        Some(_) => tables::Gsivs::Gicv5,
        None => tables::Gsivs::Gicv3,
    };
    let timer = match index.get(Signature::GTDT, mem)? {
        Some(t) => Some(tables::parse_gtdt(t, gsivs)?),
        None => None,
    };
    if let Some(v5) = &gic.v5 {
        crate::vgic5::check_described(&crate::dtb::gicv5_described(v5, timer.as_ref()))
            .map_err(AcpiError::Gicv5Lacks)?;
    }
    let uart = match index.get(Signature::SPCR, mem)? {
        Some(t) => tables::parse_spcr(t, gsivs, &mut warnings)?,
        None => None,
    };
    let psci = match index.get(Signature::FADT, mem)? {
        Some(t) => tables::parse_fadt(t)?,
        None => None,
    };
    if psci.is_none() {
        warnings.push(AcpiWarning::NoPsci);
    }
    let mcfg = match index.get(Signature::MCFG, mem)? {
        Some(t) => Some((t.oem(), tables::parse_mcfg(t)?)),
        None => None,
    };
    let iort = match index.get(Signature::IORT, mem)? {
        Some(t) => Some(iort::parse(t)?),
        None => None,
    };

    let mut host = HostInfo {
        memory: Vec::new(),
        reserved: Vec::new(),
        cpus,
        gic,
        timer,
        uart,
        psci,
        pcie: None,
        rng_seed: None,
        kaslr_seed: None,
        // ACPI names no initrd: a boot bundle comes from the EFI entry
        // (LoadFile2, a DT configuration table's /chosen, or a download).
        initrd: None,
        model: None,
        devices: Vec::new(),
        numa,
    };
    let board = board::apply(&mut host, mcfg, &mut warnings);
    if let Some(iort) = &iort {
        if let Some(pcie) = host.pcie.as_mut() {
            pcie.iommu_map = iort.pci_iommu_map(0);
            let its: Vec<(u32, u64)> = its_ids
                .iter()
                .copied()
                .zip(host.gic.its.iter().map(|&(base, _)| base))
                .collect();
            pcie.msi_map = iort.pci_msi_map(0, &its)?;
        }
        // On any board: the IORT is a table, not AML. Without a host
        // bridge nothing programs them, but their frames stay the
        // hypervisor's (`dtb::host_resources`).
        host.devices
            .extend(iort.smmus.iter().map(IortSmmuV3::host_device));
    }
    Ok(AcpiTables {
        host,
        iort,
        board,
        warnings,
    })
}

/// The host's GICv5 from the MADT (IRS, ITS config and translate frames,
/// the CPUs' IAFFIDs), or None when the MADT describes a GICv3/v4: the DT
/// path's `parse_host_gicv5`.
pub fn parse_host_acpi_gicv5(
    rsdp: u64,
    mem: &dyn PhysRead,
) -> Result<Option<AcpiGicv5>, AcpiError> {
    let xsdt = read_rsdp(rsdp, mem)?;
    let index = TableIndex::read(xsdt, mem)?;
    let madt = index
        .get(Signature::MADT, mem)?
        .ok_or(AcpiError::MissingTable(Signature::MADT))?;
    madt::parse_gicv5(madt)
}

/// The console UART from the SPCR alone, for reporting why
/// `parse_host_acpi` refused the tables (the DT path's `early_uart`). Needs
/// a valid RSDP, XSDT and SPCR; XSDT entries that cannot be read are
/// skipped here.
pub fn early_uart(rsdp: u64, mem: &dyn PhysRead) -> Option<EarlyUart> {
    let xsdt = read_table(mem, read_rsdp(rsdp, mem).ok()?, Some(Signature::XSDT)).ok()?;
    let index = TableIndex { xsdt };
    let spcr = index.entries().find_map(|addr| {
        let head = mem.read(addr, HEADER_LEN)?;
        (head.get(..4) == Some(Signature::SPCR.0.as_slice()))
            .then(|| read_table(mem, addr, Some(Signature::SPCR)).ok())
            .flatten()
    })?;
    // Only the UART's address is used: its GSIV is read as a GICv3's.
    let uart = tables::parse_spcr(spcr, tables::Gsivs::Gicv3, &mut Vec::new()).ok()??;
    Some(EarlyUart {
        base: uart.base,
        size: uart.size,
    })
}

/// Little-endian fields of a table, read byte-wise (see the module comment).
#[derive(Clone, Copy)]
struct Bytes<'a> {
    table: Signature,
    data: &'a [u8],
}

impl<'a> Bytes<'a> {
    fn len(self) -> usize {
        self.data.len()
    }

    fn array<const N: usize>(self, offset: usize) -> Result<[u8; N], AcpiError> {
        self.data
            .get(offset..)
            .and_then(|tail| tail.get(..N))
            .and_then(|s| <[u8; N]>::try_from(s).ok())
            .ok_or(AcpiError::Truncated {
                table: self.table,
                offset,
            })
    }

    fn u8(self, offset: usize) -> Result<u8, AcpiError> {
        Ok(self.array::<1>(offset)?[0])
    }

    fn u16(self, offset: usize) -> Result<u16, AcpiError> {
        self.array(offset).map(u16::from_le_bytes)
    }

    fn u32(self, offset: usize) -> Result<u32, AcpiError> {
        self.array(offset).map(u32::from_le_bytes)
    }

    fn u64(self, offset: usize) -> Result<u64, AcpiError> {
        self.array(offset).map(u64::from_le_bytes)
    }

    /// `len` bytes from `offset`, as their own `Bytes` (offsets relative).
    fn sub(self, offset: usize, len: usize) -> Result<Bytes<'a>, AcpiError> {
        let data = self
            .data
            .get(offset..)
            .and_then(|tail| tail.get(..len))
            .ok_or(AcpiError::Truncated {
                table: self.table,
                offset,
            })?;
        Ok(Bytes {
            table: self.table,
            data,
        })
    }

    fn malformed(self, what: &'static str) -> AcpiError {
        AcpiError::Malformed {
            table: self.table,
            what,
        }
    }
}

/// A whole table, its length and checksum verified.
#[derive(Clone, Copy)]
struct Table<'a> {
    bytes: Bytes<'a>,
}

/// The OEM ID and OEM table ID of a table's header.
type Oem = ([u8; 6], [u8; 8]);

impl Table<'_> {
    fn oem(self) -> Oem {
        let id = self.bytes.array::<6>(10).unwrap_or_default();
        let table_id = self.bytes.array::<8>(16).unwrap_or_default();
        (id, table_id)
    }
}

/// System description table header (ACPI 6.5, 5.2.6).
const HEADER_LEN: usize = 36;

fn checksum_ok(bytes: &[u8]) -> bool {
    bytes.iter().fold(0u8, |sum, &b| sum.wrapping_add(b)) == 0
}

fn read<'m>(
    mem: &'m dyn PhysRead,
    what: &'static str,
    addr: u64,
    len: usize,
) -> Result<&'m [u8], AcpiError> {
    mem.read(addr, len)
        .filter(|bytes| bytes.len() == len)
        .ok_or(AcpiError::Unreadable {
            what,
            addr,
            len: len as u64,
        })
}

/// RSDP (ACPI 6.5, 5.2.5.3): the XSDT's address.
fn read_rsdp(addr: u64, mem: &dyn PhysRead) -> Result<u64, AcpiError> {
    const V1_LEN: usize = 20;
    const V2_LEN: usize = 36;
    let v1 = read(mem, "RSDP", addr, V1_LEN)?;
    if v1.get(..8) != Some(b"RSD PTR ".as_slice()) {
        return Err(AcpiError::BadRsdp("bad signature"));
    }
    if !checksum_ok(v1) {
        return Err(AcpiError::BadRsdp("bad checksum"));
    }
    if v1.get(15).copied().unwrap_or(0) < 2 {
        return Err(AcpiError::BadRsdp("revision below 2: no XSDT"));
    }
    let head = read(mem, "RSDP", addr, V2_LEN)?;
    let bytes = Bytes {
        table: Signature(*b"RSDP"),
        data: head,
    };
    let len = bytes.u32(20)?;
    if !(V2_LEN as u32..=1024).contains(&len) {
        return Err(AcpiError::BadRsdp("bad length"));
    }
    if !checksum_ok(read(mem, "RSDP", addr, len as usize)?) {
        return Err(AcpiError::BadRsdp("bad extended checksum"));
    }
    match bytes.u64(24)? {
        0 => Err(AcpiError::BadRsdp("no XSDT address")),
        xsdt => Ok(xsdt),
    }
}

/// Reads the whole table at `addr`: its header, then its length (bounded),
/// then verifies the checksum. `expected` is checked when given.
fn read_table(
    mem: &dyn PhysRead,
    addr: u64,
    expected: Option<Signature>,
) -> Result<Table<'_>, AcpiError> {
    let head = read(mem, "table header", addr, HEADER_LEN)?;
    let bytes = Bytes {
        table: Signature(*b"????"),
        data: head,
    };
    let signature = Signature(bytes.array(0)?);
    if let Some(expected) = expected {
        if signature != expected {
            return Err(AcpiError::BadSignature {
                addr,
                expected,
                found: signature,
            });
        }
    }
    let len = bytes.u32(4)?;
    if !(HEADER_LEN as u32..=MAX_TABLE_LEN).contains(&len) {
        return Err(AcpiError::BadLength {
            table: signature,
            addr,
            len,
        });
    }
    let data = mem
        .read(addr, len as usize)
        .filter(|d| d.len() == len as usize)
        .ok_or(AcpiError::TableUnreadable {
            table: signature,
            addr,
            len,
        })?;
    if !checksum_ok(data) {
        return Err(AcpiError::BadChecksum {
            table: signature,
            addr,
        });
    }
    Ok(Table {
        bytes: Bytes {
            table: signature,
            data,
        },
    })
}

/// The XSDT, verified, and every entry's header checked readable once.
/// Lookups walk its entries again (a handful of header reads) rather than
/// keeping a list: nothing is allocated from the XSDT's length.
struct TableIndex<'m> {
    xsdt: Table<'m>,
}

impl<'m> TableIndex<'m> {
    fn read(xsdt: u64, mem: &'m dyn PhysRead) -> Result<TableIndex<'m>, AcpiError> {
        let xsdt = read_table(mem, xsdt, Some(Signature::XSDT))?;
        let index = TableIndex { xsdt };
        if !index.body().len().is_multiple_of(8) {
            return Err(xsdt
                .bytes
                .malformed("length is not the header plus 8-byte entries"));
        }
        for addr in index.entries() {
            read(mem, "table header (XSDT entry)", addr, HEADER_LEN)?;
        }
        Ok(index)
    }

    fn body(&self) -> &'m [u8] {
        self.xsdt.bytes.data.get(HEADER_LEN..).unwrap_or_default()
    }

    /// The entries' addresses; empty slots (0) skipped, as Linux does.
    fn entries(&self) -> impl Iterator<Item = u64> + 'm {
        self.body()
            .chunks_exact(8)
            .map(|e| {
                let mut addr = [0u8; 8];
                addr.copy_from_slice(e);
                u64::from_le_bytes(addr)
            })
            .filter(|&addr| addr != 0)
    }

    /// The first table with this signature (a later duplicate is ignored),
    /// read whole and verified.
    fn get(
        &self,
        signature: Signature,
        mem: &'m dyn PhysRead,
    ) -> Result<Option<Table<'m>>, AcpiError> {
        for addr in self.entries() {
            let head = read(mem, "table header (XSDT entry)", addr, HEADER_LEN)?;
            if head.get(..4) == Some(signature.0.as_slice()) {
                return read_table(mem, addr, Some(signature)).map(Some);
            }
        }
        Ok(None)
    }
}
