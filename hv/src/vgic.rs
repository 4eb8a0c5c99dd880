//! The emulated GICv3 each partition sees: distributor, redistributors, list registers, SGI routing;
//! on GICv4.1 hosts the direct vSGI path (`v41`) and the ITS each CPU uses
//! (`its_choice`); a partition's virtual ITS command translation (`vits`);
//! on GICv4.0 hosts the direct vLPI decisions (`v40`: core only so far).
//!
//! Who touches what (and therefore which lock): the distributor ([`dist::VDist`]) is
//! one per partition, shared by its vCPUs under a per-partition lock; a
//! redistributor ([`redist::VRedist`]) and a list-register manager
//! ([`lr::LrManager`]) belong to one vCPU and are touched only by that vCPU's
//! own physical CPU, with no lock. The caller decodes MMIO traps and system
//! register traps; these modules decide, and say what must happen next through
//! small action enums instead of touching hardware themselves.

pub mod dist;
pub mod its_choice;
pub mod lr;
pub mod pits;
pub mod redist;
pub mod sgi;
pub mod v40;
pub mod v41;
pub mod vits;

/// Priority bits kept in GICD_IPRIORITYR / GICR_IPRIORITYR (the upper five).
/// The virtual CPU interface implements at least five priority bits
/// (ICH_VTR_EL2.PRIbits >= 4, GICv3 spec 12.4.10), QEMU exactly five; bits
/// below those would be ignored by the list registers, so reading them back
/// as zero tells the guest the truth.
pub(crate) const PRIORITY_MASK: u8 = 0xF8;

/// GICD_IIDR and GICR_IIDR: ProductID 0x50 ('P'), Variant 0, Revision 0,
/// Implementer 0x43B (the JEP106 code of Arm, as KVM also reports). Chosen to
/// match none of the IIDR-keyed errata workarounds of Linux's GICv3 driver
/// (gic_quirks[]); note that IIDR = 0 would match its HiSilicon HIP07 entry.
pub(crate) const IIDR: u32 = 0x5000_043B;

/// The MPIDR_EL1 affinity fields (Aff3 [39:32], Aff2 [23:16], Aff1 [15:8],
/// Aff0 [7:0]). GICD_IROUTER<n> uses the same layout.
pub(crate) const MPIDR_AFFINITY_MASK: u64 = 0xFF_00FF_FFFF;

/// Aff3.Aff2.Aff1.Aff0 packed into 32 bits, as GICR_TYPER.Affinity_Value
/// reports it (GICv3 spec 12.11.34).
pub(crate) const fn packed_affinity(mpidr: u64) -> u32 {
    (((mpidr >> 32) & 0xFF) << 24 | (mpidr & 0xFF_FFFF)) as u32
}

/// The CoreSight-style identification registers at 0xFFD0..0xFFFC of both the
/// GICD and GICR frames. Only GICD_PIDR2/GICR_PIDR2.ArchRev is architected
/// (3 = GICv3; Linux refuses a frame whose ArchRev is not 3 or 4); the rest
/// names JEP106 Arm (designer 0x3B) and a part number of our own (0x050).
pub(crate) const fn id_register(offset: u64) -> Option<u32> {
    Some(match offset {
        0xFFD0 => 0x04,          // PIDR4: JEP106 continuation code 4 (Arm), 4 KiB count
        0xFFD4..=0xFFDC => 0x00, // PIDR5..PIDR7: reserved, zero
        0xFFE0 => 0x50,          // PIDR0: part number [7:0]
        0xFFE4 => 0xB0,          // PIDR1: JEP106 id [3:0] = 0xB, part number [11:8] = 0
        0xFFE8 => 0x3B,          // PIDR2: ArchRev 3, JEDEC used, JEP106 id [6:4] = 3
        0xFFEC => 0x00,          // PIDR3
        0xFFF0 => 0x0D,          // CIDR0..CIDR3: the component preamble
        0xFFF4 => 0xF0,
        0xFFF8 => 0x05,
        0xFFFC => 0xB1,
        _ => return None,
    })
}

/// Whether an access of `width` bytes at `offset` is naturally aligned and of
/// a width the bus can carry. Anything else is read as zero and ignored
/// on write by both frames: a guest cannot make the emulation misbehave by
/// splitting or straddling registers, and real GICs leave such accesses
/// UNPREDICTABLE or CONSTRAINED UNPREDICTABLE (GICv3 spec 12.1.3).
pub(crate) const fn aligned(offset: u64, width: u8) -> bool {
    matches!(width, 1 | 2 | 4 | 8) && offset.is_multiple_of(width as u64)
}

/// Read `width` bytes (1, 2 or 4; the caller checked alignment) at byte
/// `index` of a byte-per-interrupt array such as a priority bank.
pub(crate) fn read_bytes(bytes: &[u8], index: usize, width: u8) -> u64 {
    let mut value = 0u64;
    for i in 0..usize::from(width) {
        let byte = bytes.get(index + i).copied().unwrap_or(0);
        value |= u64::from(byte) << (8 * i);
    }
    value
}
