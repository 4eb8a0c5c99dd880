//! Stage-2 translation tables (guest IPA -> host PA): 4 KiB granule, 40-bit
//! IPA space, walks starting at level 1.
//!
//! Layout (Arm ARM D8.2, "Translation table walk", stage 2 with 4 KiB
//! granule): with VTCR_EL2.T0SZ=24 and SL0=1 the level-1 lookup resolves
//! IPA[39:30], i.e. 1024 entries. One 4 KiB table holds only 512, so the
//! architecture *concatenates* two level-1 tables into an 8 KiB root that
//! must be 8 KiB aligned. With a single 4 KiB root the walker would index
//! whatever page follows it for any IPA with bit 39 set, so the root is
//! allocated separately ([`TableMemory::alloc_root`]).
//!
//! This module only writes descriptors; it never issues barriers or TLB
//! maintenance. Mapping into invalid entries needs only `DSB ISHST` before
//! the guest runs; after [`Stage2::unmap`] the caller must invalidate the
//! VMID's TLB entries (`TLBI VMALLS12E1IS; DSB ISH`) before reusing the
//! memory that was mapped.

use crate::addr::{Ipa, PhysAddr};
use alloc::vec::Vec;

/// Bits of IPA the tables translate (VTCR_EL2.T0SZ = 64 - 40).
pub const IPA_BITS: u32 = 40;
/// One past the highest IPA a guest can use.
pub const IPA_LIMIT: u64 = 1 << IPA_BITS;
/// Entries in the concatenated level-1 root (IPA[39:30]).
pub const ROOT_ENTRIES: usize = 1024;
/// Entries in every other table.
pub const TABLE_ENTRIES: usize = 512;
/// Bytes in one translation table (the granule).
pub const PAGE_SIZE: u64 = 0x1000;
/// Bytes (and alignment) of the concatenated root.
pub const ROOT_SIZE: u64 = 2 * PAGE_SIZE;

const BLOCK_1G: u64 = 1 << 30;
const BLOCK_2M: u64 = 1 << 21;

/// Output addresses are at most 48 bits (we do not use FEAT_LPA/LPA2
/// descriptor formats), held in descriptor bits [47:12].
const OA_LIMIT: u64 = 1 << 48;
const DESC_ADDR_MASK: u64 = 0x0000_FFFF_FFFF_F000;

// Stage-2 descriptor bits (Arm ARM D8.3, "Translation table descriptor
// formats"; D8.6.5 "Stage 2 memory type and Cacheability attributes" with
// HCR_EL2.FWB=0).
const DESC_VALID: u64 = 1 << 0;
/// At levels 1-2: 1 = table, 0 = block. At level 3 it must be 1 (page).
const DESC_TABLE_OR_PAGE: u64 = 1 << 1;
const MEMATTR_SHIFT: u32 = 2;
const MEMATTR_MASK: u64 = 0b1111 << MEMATTR_SHIFT;
/// Outer and inner Write-Back Cacheable.
const MEMATTR_NORMAL_WB: u64 = 0b1111 << MEMATTR_SHIFT;
/// Device-nGnRE: what Linux uses for MMIO; stage 2 combines to the stricter.
const MEMATTR_DEVICE_NGNRE: u64 = 0b0001 << MEMATTR_SHIFT;
/// S2AP = 0b11: read and write.
const S2AP_RW: u64 = 0b11 << 6;
/// Inner Shareable; ignored for Device memory, which is always Outer
/// Shareable, so it is left 0 there.
const SH_INNER: u64 = 0b11 << 8;
/// Access flag set up front: we do not use hardware AF management
/// (VTCR_EL2.HA=0), so a clear AF would fault on first access.
const AF: u64 = 1 << 10;
/// XN[1:0] = 0b10: not executable at EL1 or EL0. Guests never execute MMIO.
const XN_EL1_EL0: u64 = 0b10 << 53;

/// Memory type of a mapping, as the guest's accesses are combined at stage 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemType {
    /// Guest RAM: Normal Write-Back, Inner Shareable, executable.
    Normal,
    /// Pass-through MMIO: Device-nGnRE, execute-never.
    Device,
}

/// Where translation tables live. The arch implementation reads and writes
/// real memory; host tests use a fake.
pub trait TableMemory {
    /// A zeroed, 4 KiB aligned 4 KiB page for a level-2 or level-3 table.
    fn alloc_table(&mut self) -> Option<PhysAddr>;
    /// A zeroed, 8 KiB aligned, physically contiguous 8 KiB region for the
    /// concatenated level-1 root (two tables, see the module docs).
    fn alloc_root(&mut self) -> Option<PhysAddr>;
    /// Reads entry `index` (8 bytes each) of the table at `table`. For the
    /// root, `index` runs up to 1023 and crosses into its second page.
    fn read(&self, table: PhysAddr, index: usize) -> u64;
    /// Writes entry `index` of the table at `table` (a single 64-bit store,
    /// so the table walker never sees a torn descriptor).
    fn write(&mut self, table: PhysAddr, index: usize, value: u64);
    /// Give back a page from `alloc_table` (a destroyed partition's
    /// tables). The default keeps it.
    fn free_table(&mut self, _table: PhysAddr) {}
    /// Give back a root from `alloc_root`. The default keeps it.
    fn free_root(&mut self, _root: PhysAddr) {}
}

/// A borrowed table memory is one too (so that `&mut dyn TableMemory`
/// can be handed to what takes `&mut impl TableMemory`).
impl<T: TableMemory + ?Sized> TableMemory for &mut T {
    fn alloc_table(&mut self) -> Option<PhysAddr> {
        (**self).alloc_table()
    }
    fn alloc_root(&mut self) -> Option<PhysAddr> {
        (**self).alloc_root()
    }
    fn read(&self, table: PhysAddr, index: usize) -> u64 {
        (**self).read(table, index)
    }
    fn write(&mut self, table: PhysAddr, index: usize, value: u64) {
        (**self).write(table, index, value)
    }
    fn free_table(&mut self, table: PhysAddr) {
        (**self).free_table(table)
    }
    fn free_root(&mut self, root: PhysAddr) {
        (**self).free_root(root)
    }
}

/// Why a stage-2 operation failed. A failed `map` leaves the tables as they
/// were (apart from empty tables it allocated).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage2Error {
    /// No memory left for a translation table.
    OutOfTables,
    /// An address or the size is not a multiple of 4 KiB, or the size is 0.
    Misaligned,
    /// Part of the range is already mapped (first mapped IPA given); mappings
    /// are never silently replaced.
    AlreadyMapped { ipa: Ipa },
    /// The range goes beyond the 40-bit IPA space or the 48-bit PA space.
    OutOfRange,
    /// Unmapping part of a block mapping would need the block split, which
    /// requires break-before-make with TLB maintenance; unmap whole blocks.
    PartialBlock { ipa: Ipa },
}

impl core::fmt::Display for Stage2Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Stage2Error::OutOfTables => write!(f, "no memory left for a stage-2 table"),
            Stage2Error::Misaligned => write!(f, "stage-2 range not 4 KiB aligned or empty"),
            Stage2Error::AlreadyMapped { ipa } => write!(f, "IPA {:#x} is already mapped", ipa.0),
            Stage2Error::OutOfRange => write!(f, "stage-2 range outside the IPA or PA space"),
            Stage2Error::PartialBlock { ipa } => {
                write!(
                    f,
                    "unmapping at IPA {:#x} would split a block mapping",
                    ipa.0
                )
            }
        }
    }
}

/// One guest's stage-2 tables, identified by their root.
#[derive(Debug)]
pub struct Stage2 {
    root: PhysAddr,
}

/// Levels of the walk and the span of one entry at each.
const LEVELS: [(u8, u64); 3] = [(1, BLOCK_1G), (2, BLOCK_2M), (3, PAGE_SIZE)];

fn index_at(level: u8, ipa: u64) -> usize {
    match level {
        // 10 bits at level 1 (concatenated root), 9 bits below.
        1 => ((ipa >> 30) & 0x3FF) as usize,
        2 => ((ipa >> 21) & 0x1FF) as usize,
        _ => ((ipa >> 12) & 0x1FF) as usize,
    }
}

fn is_valid(desc: u64) -> bool {
    desc & DESC_VALID != 0
}

fn is_table(level: u8, desc: u64) -> bool {
    level < 3 && is_valid(desc) && desc & DESC_TABLE_OR_PAGE != 0
}

fn desc_addr(desc: u64) -> PhysAddr {
    PhysAddr(desc & DESC_ADDR_MASK)
}

fn table_desc(table: PhysAddr) -> u64 {
    (table.0 & DESC_ADDR_MASK) | DESC_TABLE_OR_PAGE | DESC_VALID
}

fn leaf_desc(level: u8, pa: PhysAddr, ty: MemType) -> u64 {
    let kind = if level == 3 {
        DESC_TABLE_OR_PAGE | DESC_VALID
    } else {
        DESC_VALID
    };
    let attrs = match ty {
        MemType::Normal => MEMATTR_NORMAL_WB | SH_INNER,
        MemType::Device => MEMATTR_DEVICE_NGNRE | XN_EL1_EL0,
    };
    (pa.0 & DESC_ADDR_MASK) | kind | attrs | S2AP_RW | AF
}

fn check_range(ipa: Ipa, size: u64) -> Result<u64, Stage2Error> {
    if size == 0 || !ipa.is_aligned(PAGE_SIZE) || !size.is_multiple_of(PAGE_SIZE) {
        return Err(Stage2Error::Misaligned);
    }
    match ipa.0.checked_add(size) {
        Some(end) if end <= IPA_LIMIT => Ok(end),
        _ => Err(Stage2Error::OutOfRange),
    }
}

impl Stage2 {
    /// Empty tables: every IPA faults until mapped.
    pub fn new(mem: &mut impl TableMemory) -> Result<Self, Stage2Error> {
        let root = mem.alloc_root().ok_or(Stage2Error::OutOfTables)?;
        Ok(Stage2 { root })
    }

    /// The root's address, for [`vttbr_el2`].
    pub fn root(&self) -> PhysAddr {
        self.root
    }

    /// The tables whose root is `root` (built by [`Stage2::new`]).
    pub fn from_root(root: PhysAddr) -> Self {
        Stage2 { root }
    }

    /// Gives every table back to `mem` (root through `free_root`, the
    /// others through `free_table`). No CPU may run on them any more, and
    /// the VMID's TLB entries must be invalidated before the VMID is used
    /// again (every vCPU load does: `tlbi vmalls12e1is`).
    pub fn release(self, mem: &mut (impl TableMemory + ?Sized)) {
        let root = self.root;
        let mut pages = Vec::new();
        free_children(&*mem, root, 1, ROOT_ENTRIES, &mut |p| pages.push(p));
        for p in pages {
            mem.free_table(p);
        }
        mem.free_root(root);
    }

    /// Maps `[ipa, ipa + size)` to `[pa, pa + size)`. Uses 1 GiB and 2 MiB
    /// blocks wherever both addresses are aligned to the block, the rest of
    /// the range covers it and no table is already there; 4 KiB pages
    /// otherwise. Refuses if any page in the range is already mapped.
    pub fn map(
        &mut self,
        mem: &mut impl TableMemory,
        ipa: Ipa,
        pa: PhysAddr,
        size: u64,
        ty: MemType,
    ) -> Result<(), Stage2Error> {
        let end = check_range(ipa, size)?;
        if !pa.is_aligned(PAGE_SIZE) {
            return Err(Stage2Error::Misaligned);
        }
        match pa.0.checked_add(size) {
            Some(pa_end) if pa_end <= OA_LIMIT => {}
            _ => return Err(Stage2Error::OutOfRange),
        }
        // Check the whole range first so a refused map changes nothing.
        if let Some(mapped) = self.first_mapped(mem, ipa.0, end) {
            return Err(Stage2Error::AlreadyMapped { ipa: Ipa(mapped) });
        }
        let mut cursor = ipa.0;
        while cursor < end {
            let offset = cursor - ipa.0;
            match self.map_one(mem, cursor, pa.add(offset), end - cursor, ty) {
                Ok(step) => cursor += step,
                Err(e) => {
                    // Only OutOfTables can happen after the check above; undo
                    // what was mapped so the caller sees all or nothing.
                    if cursor > ipa.0 {
                        let _ = self.unmap(mem, ipa, cursor - ipa.0);
                    }
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Maps the largest block or page that fits at `ipa`; returns its size.
    fn map_one(
        &mut self,
        mem: &mut impl TableMemory,
        ipa: u64,
        pa: PhysAddr,
        remaining: u64,
        ty: MemType,
    ) -> Result<u64, Stage2Error> {
        let mut table = self.root;
        for (level, span) in LEVELS {
            let index = index_at(level, ipa);
            let desc = mem.read(table, index);
            let fits = ipa.is_multiple_of(span) && pa.0.is_multiple_of(span) && remaining >= span;
            if !is_valid(desc) && (fits || level == 3) {
                mem.write(table, index, leaf_desc(level, pa, ty));
                return Ok(span);
            }
            table = if is_table(level, desc) {
                desc_addr(desc)
            } else if !is_valid(desc) {
                let next = mem.alloc_table().ok_or(Stage2Error::OutOfTables)?;
                mem.write(table, index, table_desc(next));
                next
            } else {
                return Err(Stage2Error::AlreadyMapped { ipa: Ipa(ipa) });
            };
        }
        // Level 3 always returns above.
        Err(Stage2Error::AlreadyMapped { ipa: Ipa(ipa) })
    }

    /// The lowest mapped IPA in `[start, end)`, if any.
    fn first_mapped(&self, mem: &impl TableMemory, start: u64, end: u64) -> Option<u64> {
        let mut cursor = start;
        while cursor < end {
            match self.walk(mem, cursor) {
                Walk::Leaf { .. } => return Some(cursor),
                // Skip the whole hole this entry leaves unmapped.
                Walk::Hole { span } => cursor = (cursor & !(span - 1)) + span,
            }
        }
        None
    }

    fn walk(&self, mem: &impl TableMemory, ipa: u64) -> Walk {
        let mut table = self.root;
        for (level, span) in LEVELS {
            let index = index_at(level, ipa);
            let desc = mem.read(table, index);
            if !is_valid(desc) {
                return Walk::Hole { span };
            }
            if !is_table(level, desc) {
                return Walk::Leaf {
                    table,
                    index,
                    level,
                    span,
                    desc,
                };
            }
            table = desc_addr(desc);
        }
        // Level 3 entries are never tables; unreachable in practice.
        Walk::Hole { span: PAGE_SIZE }
    }

    /// Removes every mapping in `[ipa, ipa + size)`; unmapped parts are
    /// skipped. A block must be unmapped whole. Tables are kept (freed by
    /// [`Stage2::destroy`]). The caller must then invalidate the TLBs.
    pub fn unmap(
        &mut self,
        mem: &mut impl TableMemory,
        ipa: Ipa,
        size: u64,
    ) -> Result<(), Stage2Error> {
        let end = check_range(ipa, size)?;
        // Refuse before changing anything if a block sticks out of the range.
        let mut cursor = ipa.0;
        while cursor < end {
            cursor = match self.walk(mem, cursor) {
                Walk::Hole { span } => (cursor & !(span - 1)) + span,
                Walk::Leaf { span, .. } => {
                    if !cursor.is_multiple_of(span) || end - cursor < span {
                        return Err(Stage2Error::PartialBlock { ipa: Ipa(cursor) });
                    }
                    cursor + span
                }
            };
        }
        let mut cursor = ipa.0;
        while cursor < end {
            cursor = match self.walk(mem, cursor) {
                Walk::Hole { span } => (cursor & !(span - 1)) + span,
                Walk::Leaf {
                    table, index, span, ..
                } => {
                    mem.write(table, index, 0);
                    cursor + span
                }
            };
        }
        Ok(())
    }

    /// Where `ipa` goes, or None if the guest has nothing there (an access
    /// would take a stage-2 translation fault).
    pub fn translate(&self, mem: &impl TableMemory, ipa: Ipa) -> Option<(PhysAddr, MemType)> {
        if ipa.0 >= IPA_LIMIT {
            return None;
        }
        match self.walk(mem, ipa.0) {
            Walk::Hole { .. } => None,
            Walk::Leaf {
                level, span, desc, ..
            } => {
                if level == 3 && desc & DESC_TABLE_OR_PAGE == 0 {
                    return None; // reserved encoding: faults in hardware
                }
                let ty = if desc & MEMATTR_MASK == MEMATTR_NORMAL_WB {
                    MemType::Normal
                } else {
                    MemType::Device
                };
                Some((desc_addr(desc).add(ipa.0 & (span - 1)), ty))
            }
        }
    }

    /// Frees the tables: `free` receives every 4 KiB table page once,
    /// including both pages of the root. The VMID's TLB entries must have
    /// been invalidated before the pages are reused.
    pub fn destroy(self, mem: &mut impl TableMemory, mut free: impl FnMut(PhysAddr)) {
        free_children(mem, self.root, 1, ROOT_ENTRIES, &mut free);
        free(self.root);
        free(self.root.add(PAGE_SIZE));
    }
}

fn free_children(
    mem: &(impl TableMemory + ?Sized),
    table: PhysAddr,
    level: u8,
    entries: usize,
    free: &mut impl FnMut(PhysAddr),
) {
    for index in 0..entries {
        let desc = mem.read(table, index);
        if is_table(level, desc) {
            let child = desc_addr(desc);
            free_children(mem, child, level + 1, TABLE_ENTRIES, free);
            free(child);
        }
    }
}

/// What a walk found for one IPA.
enum Walk {
    /// Nothing mapped in the naturally aligned `span` bytes around the IPA.
    Hole { span: u64 },
    /// A block or page descriptor at `table[index]`.
    Leaf {
        table: PhysAddr,
        index: usize,
        level: u8,
        span: u64,
        desc: u64,
    },
}

// VTCR_EL2 fields (Arm ARM D17.2.191).
const VTCR_T0SZ: u64 = 64 - IPA_BITS as u64;
const VTCR_SL0_LEVEL1: u64 = 0b01 << 6;
const VTCR_IRGN0_WBWA: u64 = 0b01 << 8;
const VTCR_ORGN0_WBWA: u64 = 0b01 << 10;
const VTCR_SH0_INNER: u64 = 0b11 << 12;
const VTCR_TG0_4K: u64 = 0b00 << 14;
const VTCR_PS_SHIFT: u32 = 16;
const VTCR_RES1: u64 = 1 << 31;

/// VTCR_EL2 for these tables on a CPU with `pa_range_bits` of physical
/// address space (from ID_AA64MMFR0_EL1.PARange). PS is the largest
/// encoding not above the CPU's range, capped at 48 bits because our
/// descriptors do not use the 52-bit formats. VS=0: 8-bit VMIDs.
///
/// The CPU must implement at least 40 bits of PA, as our IPA space is 40
/// bits (true for every server core and QEMU's cortex-a72/neoverse-n1).
pub fn vtcr_el2(pa_range_bits: u8) -> u64 {
    let ps: u64 = match pa_range_bits {
        0..=35 => 0b000,
        36..=39 => 0b001,
        40..=41 => 0b010,
        42..=43 => 0b011,
        44..=47 => 0b100,
        _ => 0b101,
    };
    VTCR_T0SZ
        | VTCR_SL0_LEVEL1
        | VTCR_IRGN0_WBWA
        | VTCR_ORGN0_WBWA
        | VTCR_SH0_INNER
        | VTCR_TG0_4K
        | (ps << VTCR_PS_SHIFT)
        | VTCR_RES1
}

/// VTTBR_EL2: the root (8 KiB aligned, in BADDR) and the VMID in [63:48].
/// With VTCR_EL2.VS=0 only 8-bit VMIDs are valid: bits [63:56] are RES0, so
/// the VMID allocator must stay below 256.
pub fn vttbr_el2(vmid: u16, root: PhysAddr) -> u64 {
    (u64::from(vmid) << 48) | (root.0 & DESC_ADDR_MASK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::vec::Vec;

    /// Tables at addresses that cannot be RAM on any board we run on (bit 47
    /// set), so a descriptor that loses high address bits is caught. It
    /// checks every access lands in an allocated page.
    struct FakeTables {
        pages: HashMap<u64, [u64; TABLE_ENTRIES]>,
        next: u64,
        allocs_left: usize,
    }

    const FAKE_BASE: u64 = 0xBAD0_0000_0000;

    impl FakeTables {
        fn new() -> Self {
            Self::with_budget(usize::MAX)
        }
        fn with_budget(allocs_left: usize) -> Self {
            FakeTables {
                pages: HashMap::new(),
                next: FAKE_BASE,
                allocs_left,
            }
        }
        fn take_page(&mut self) -> PhysAddr {
            let addr = self.next;
            self.next += PAGE_SIZE;
            self.pages.insert(addr, [0; TABLE_ENTRIES]);
            PhysAddr(addr)
        }
        fn slot(table: PhysAddr, index: usize) -> (u64, usize) {
            let addr = table.0 + 8 * index as u64;
            (addr & !(PAGE_SIZE - 1), ((addr % PAGE_SIZE) / 8) as usize)
        }
        fn table_page_count(&self) -> usize {
            self.pages.len()
        }
    }

    impl TableMemory for FakeTables {
        fn alloc_table(&mut self) -> Option<PhysAddr> {
            self.allocs_left = self.allocs_left.checked_sub(1)?;
            Some(self.take_page())
        }
        fn alloc_root(&mut self) -> Option<PhysAddr> {
            self.allocs_left = self.allocs_left.checked_sub(1)?;
            // Misalign the bump pointer on purpose before aligning to 8 KiB.
            self.next = (self.next + PAGE_SIZE + ROOT_SIZE - 1) & !(ROOT_SIZE - 1);
            let root = self.take_page();
            self.take_page();
            Some(root)
        }
        fn read(&self, table: PhysAddr, index: usize) -> u64 {
            let (page, i) = Self::slot(table, index);
            self.pages.get(&page).expect("read outside any table")[i]
        }
        fn write(&mut self, table: PhysAddr, index: usize, value: u64) {
            let (page, i) = Self::slot(table, index);
            self.pages.get_mut(&page).expect("write outside any table")[i] = value;
        }
    }

    const GIB: u64 = 1 << 30;
    const MIB: u64 = 1 << 20;

    fn setup() -> (FakeTables, Stage2) {
        let mut mem = FakeTables::new();
        let s2 = Stage2::new(&mut mem).expect("root");
        (mem, s2)
    }

    /// The descriptor that maps `ipa`, with its level.
    fn leaf(mem: &FakeTables, s2: &Stage2, ipa: u64) -> (u8, u64) {
        match s2.walk(mem, ipa) {
            Walk::Leaf { level, desc, .. } => (level, desc),
            Walk::Hole { .. } => panic!("{ipa:#x} not mapped"),
        }
    }

    #[test]
    fn root_is_8k_aligned_concatenated_pair() {
        let (mem, s2) = setup();

        assert!(s2.root().is_aligned(ROOT_SIZE));
        assert_eq!(mem.table_page_count(), 2);
    }

    #[test]
    fn aligned_gib_of_ram_uses_one_level1_block() {
        let (mut mem, mut s2) = setup();

        s2.map(
            &mut mem,
            Ipa(GIB),
            PhysAddr(0x80_0000_0000),
            GIB,
            MemType::Normal,
        )
        .unwrap();

        let (level, _) = leaf(&mem, &s2, GIB + 0x1234_5000);
        assert_eq!(level, 1);
        assert_eq!(mem.table_page_count(), 2, "no tables below the root");
    }

    #[test]
    fn two_mib_aligned_range_uses_level2_blocks() {
        let (mut mem, mut s2) = setup();

        s2.map(
            &mut mem,
            Ipa(0x4000_0000),
            PhysAddr(0x8020_0000),
            4 * MIB,
            MemType::Normal,
        )
        .unwrap();

        assert_eq!(leaf(&mem, &s2, 0x4000_0000).0, 2);
        assert_eq!(leaf(&mem, &s2, 0x403F_F000).0, 2);
        assert_eq!(mem.table_page_count(), 3);
    }

    #[test]
    fn block_needs_pa_alignment_too() {
        let (mut mem, mut s2) = setup();

        s2.map(
            &mut mem,
            Ipa(0x4000_0000),
            PhysAddr(0x8000_1000),
            2 * MIB,
            MemType::Normal,
        )
        .unwrap();

        assert_eq!(leaf(&mem, &s2, 0x4000_0000).0, 3);
        assert_eq!(mem.table_page_count(), 4);
    }

    #[test]
    fn unaligned_head_and_tail_use_pages_around_blocks() {
        let (mut mem, mut s2) = setup();
        let ipa = 0x4000_0000 - 0x1000;

        s2.map(
            &mut mem,
            Ipa(ipa),
            PhysAddr(0x8000_0000 - 0x1000),
            4 * MIB + 0x2000,
            MemType::Normal,
        )
        .unwrap();

        assert_eq!(leaf(&mem, &s2, ipa).0, 3);
        assert_eq!(leaf(&mem, &s2, 0x4000_0000).0, 2);
        assert_eq!(leaf(&mem, &s2, 0x4020_0000).0, 2);
        assert_eq!(leaf(&mem, &s2, 0x4040_0000).0, 3);
        assert_eq!(s2.translate(&mem, Ipa(0x4040_1000)), None);
    }

    #[test]
    fn normal_block_descriptor_has_exact_bits() {
        let (mut mem, mut s2) = setup();

        s2.map(
            &mut mem,
            Ipa(0x4000_0000),
            PhysAddr(0x8_4020_0000),
            2 * MIB,
            MemType::Normal,
        )
        .unwrap();

        // Block (0b01), MemAttr 0b1111, S2AP 0b11, SH 0b11, AF, executable.
        assert_eq!(leaf(&mem, &s2, 0x4000_0000).1, 0x8_4020_0000 | 0x7FD);
    }

    #[test]
    fn device_page_descriptor_has_exact_bits() {
        let (mut mem, mut s2) = setup();

        s2.map(
            &mut mem,
            Ipa(0x0900_0000),
            PhysAddr(0x0900_0000),
            0x1000,
            MemType::Device,
        )
        .unwrap();

        // Page (0b11), MemAttr 0b0001 (nGnRE), S2AP 0b11, SH 0, AF, XN 0b10.
        assert_eq!(
            leaf(&mem, &s2, 0x0900_0000).1,
            (0b10 << 53) | 0x0900_0000 | 0x4C7
        );
    }

    #[test]
    fn table_descriptors_keep_high_table_address_bits() {
        let (mut mem, mut s2) = setup();

        s2.map(
            &mut mem,
            Ipa(0x1000),
            PhysAddr(0x1000),
            0x1000,
            MemType::Normal,
        )
        .unwrap();

        let l1 = mem.read(s2.root(), 0);
        assert_eq!(l1 & 0b11, 0b11);
        assert_eq!(l1 & !0xFFF, s2.root().0 + ROOT_SIZE);
        assert!(l1 & (1 << 47) != 0);
    }

    #[test]
    fn translate_round_trips_every_granularity() {
        let (mut mem, mut s2) = setup();
        s2.map(&mut mem, Ipa(GIB), PhysAddr(4 * GIB), GIB, MemType::Normal)
            .unwrap();
        s2.map(
            &mut mem,
            Ipa(3 * GIB),
            PhysAddr(0x1_0060_0000),
            2 * MIB,
            MemType::Normal,
        )
        .unwrap();
        s2.map(
            &mut mem,
            Ipa(0x0800_0000),
            PhysAddr(0x2_0800_0000),
            0x1000,
            MemType::Device,
        )
        .unwrap();

        assert_eq!(
            s2.translate(&mem, Ipa(GIB + 0x3456_7ABC)),
            Some((PhysAddr(4 * GIB + 0x3456_7ABC), MemType::Normal))
        );
        assert_eq!(
            s2.translate(&mem, Ipa(3 * GIB + 0x1F_FFFF)),
            Some((PhysAddr(0x1_007F_FFFF), MemType::Normal))
        );
        assert_eq!(
            s2.translate(&mem, Ipa(0x0800_0FF8)),
            Some((PhysAddr(0x2_0800_0FF8), MemType::Device))
        );
    }

    #[test]
    fn ipa_with_bit_39_set_uses_second_root_page() {
        let (mut mem, mut s2) = setup();
        let high = 0xC0_0000_0000; // 768 GiB: root index 768

        s2.map(&mut mem, Ipa(high), PhysAddr(GIB), GIB, MemType::Normal)
            .unwrap();

        assert_eq!(
            mem.read(PhysAddr(s2.root().0 + PAGE_SIZE), 256) & !0xFFF,
            GIB
        );
        assert_eq!(
            s2.translate(&mem, Ipa(high + 8)),
            Some((PhysAddr(GIB + 8), MemType::Normal))
        );
        assert_eq!(s2.translate(&mem, Ipa(high - GIB)), None);
    }

    #[test]
    fn ipa_outside_guest_ram_translates_to_none() {
        let (mut mem, mut s2) = setup();
        s2.map(
            &mut mem,
            Ipa(0x4000_0000),
            PhysAddr(0x4000_0000),
            0x1000_0000,
            MemType::Normal,
        )
        .unwrap();

        assert_eq!(s2.translate(&mem, Ipa(0x3FFF_FFFF)), None);
        assert_eq!(s2.translate(&mem, Ipa(0x5000_0000)), None);
        assert_eq!(s2.translate(&mem, Ipa(IPA_LIMIT)), None);
    }

    #[test]
    fn mapping_over_an_existing_page_is_refused_and_changes_nothing() {
        let (mut mem, mut s2) = setup();
        s2.map(
            &mut mem,
            Ipa(0x4010_0000),
            PhysAddr(0x9000_0000),
            0x1000,
            MemType::Normal,
        )
        .unwrap();

        let err = s2.map(
            &mut mem,
            Ipa(0x4000_0000),
            PhysAddr(0x4000_0000),
            2 * MIB,
            MemType::Normal,
        );

        assert_eq!(
            err,
            Err(Stage2Error::AlreadyMapped {
                ipa: Ipa(0x4010_0000)
            })
        );
        assert_eq!(s2.translate(&mem, Ipa(0x4000_0000)), None);
        assert_eq!(
            s2.translate(&mem, Ipa(0x4010_0000)),
            Some((PhysAddr(0x9000_0000), MemType::Normal))
        );
    }

    #[test]
    fn mapping_a_page_inside_an_existing_block_is_refused() {
        let (mut mem, mut s2) = setup();
        s2.map(&mut mem, Ipa(GIB), PhysAddr(GIB), GIB, MemType::Normal)
            .unwrap();

        let err = s2.map(
            &mut mem,
            Ipa(GIB + 0x5000),
            PhysAddr(0x1000),
            0x1000,
            MemType::Device,
        );

        assert_eq!(
            err,
            Err(Stage2Error::AlreadyMapped {
                ipa: Ipa(GIB + 0x5000)
            })
        );
    }

    #[test]
    fn misaligned_or_empty_ranges_are_refused() {
        let (mut mem, mut s2) = setup();

        assert_eq!(
            s2.map(&mut mem, Ipa(0x800), PhysAddr(0), 0x1000, MemType::Normal),
            Err(Stage2Error::Misaligned)
        );
        assert_eq!(
            s2.map(&mut mem, Ipa(0), PhysAddr(0x10), 0x1000, MemType::Normal),
            Err(Stage2Error::Misaligned)
        );
        assert_eq!(
            s2.map(&mut mem, Ipa(0), PhysAddr(0), 0x1800, MemType::Normal),
            Err(Stage2Error::Misaligned)
        );
        assert_eq!(
            s2.map(&mut mem, Ipa(0), PhysAddr(0), 0, MemType::Normal),
            Err(Stage2Error::Misaligned)
        );
    }

    #[test]
    fn range_past_40_bit_ipa_space_is_refused() {
        let (mut mem, mut s2) = setup();

        let err = s2.map(
            &mut mem,
            Ipa(IPA_LIMIT - 0x1000),
            PhysAddr(0),
            0x2000,
            MemType::Normal,
        );

        assert_eq!(err, Err(Stage2Error::OutOfRange));
    }

    #[test]
    fn running_out_of_tables_undoes_the_partial_map() {
        // Root + one level-2 table: the 2 MiB block maps, the page after it
        // needs a level-3 table that is not there.
        let mut mem = FakeTables::with_budget(2);
        let mut s2 = Stage2::new(&mut mem).unwrap();

        let err = s2.map(
            &mut mem,
            Ipa(0x4000_0000),
            PhysAddr(0x4000_0000),
            2 * MIB + 0x1000,
            MemType::Normal,
        );

        assert_eq!(err, Err(Stage2Error::OutOfTables));
        assert_eq!(s2.translate(&mem, Ipa(0x4000_0000)), None);
    }

    #[test]
    fn unmap_removes_pages_and_leaves_neighbours() {
        let (mut mem, mut s2) = setup();
        s2.map(
            &mut mem,
            Ipa(0x1000),
            PhysAddr(0x1000),
            0x3000,
            MemType::Normal,
        )
        .unwrap();

        s2.unmap(&mut mem, Ipa(0x2000), 0x1000).unwrap();

        assert_eq!(s2.translate(&mem, Ipa(0x2000)), None);
        assert!(s2.translate(&mem, Ipa(0x1000)).is_some());
        assert!(s2.translate(&mem, Ipa(0x3000)).is_some());
    }

    #[test]
    fn unmap_then_remap_succeeds() {
        let (mut mem, mut s2) = setup();
        s2.map(&mut mem, Ipa(GIB), PhysAddr(GIB), GIB, MemType::Normal)
            .unwrap();

        s2.unmap(&mut mem, Ipa(GIB), GIB).unwrap();
        let remap = s2.map(&mut mem, Ipa(GIB), PhysAddr(2 * GIB), GIB, MemType::Device);

        assert_eq!(remap, Ok(()));
        assert_eq!(
            s2.translate(&mem, Ipa(GIB)),
            Some((PhysAddr(2 * GIB), MemType::Device))
        );
    }

    #[test]
    fn unmapping_part_of_a_block_is_refused_without_changes() {
        let (mut mem, mut s2) = setup();
        s2.map(
            &mut mem,
            Ipa(0x4000_0000),
            PhysAddr(0x4000_0000),
            2 * MIB,
            MemType::Normal,
        )
        .unwrap();

        let err = s2.unmap(&mut mem, Ipa(0x4000_0000), 0x1000);

        assert_eq!(
            err,
            Err(Stage2Error::PartialBlock {
                ipa: Ipa(0x4000_0000)
            })
        );
        assert!(s2.translate(&mem, Ipa(0x4000_0000)).is_some());
    }

    #[test]
    fn destroy_hands_back_every_table_page_once() {
        let (mut mem, mut s2) = setup();
        s2.map(
            &mut mem,
            Ipa(0x1000),
            PhysAddr(0x1000),
            0x1000,
            MemType::Normal,
        )
        .unwrap();
        s2.map(
            &mut mem,
            Ipa(0xC0_4000_0000),
            PhysAddr(0x1000),
            0x1000,
            MemType::Normal,
        )
        .unwrap();
        s2.map(&mut mem, Ipa(GIB), PhysAddr(GIB), GIB, MemType::Normal)
            .unwrap();
        let mut allocated: Vec<u64> = mem.pages.keys().copied().collect();
        allocated.sort_unstable();

        let mut freed = Vec::new();
        s2.destroy(&mut mem, |page| freed.push(page.0));
        freed.sort_unstable();

        assert_eq!(allocated.len(), 6);
        assert_eq!(freed, allocated);
    }

    #[test]
    fn vtcr_for_44_bit_pa_has_expected_value() {
        // T0SZ=24, SL0=1, IRGN0=ORGN0=WBWA, SH0=inner, TG0=4K, PS=0b100, RES1.
        assert_eq!(vtcr_el2(44), 0x8004_3558);
    }

    #[test]
    fn vtcr_ps_is_capped_at_48_bits() {
        assert_eq!((vtcr_el2(52) >> 16) & 0b111, 0b101);
        assert_eq!((vtcr_el2(40) >> 16) & 0b111, 0b010);
    }

    #[test]
    fn vttbr_puts_vmid_in_top_bits_and_root_in_baddr() {
        assert_eq!(vttbr_el2(5, PhysAddr(0x4321_2000)), (5 << 48) | 0x4321_2000);
    }
}
