//! Stage-1 translation tables in the shape Hermit 0.11's paging code takes over: 4 KiB granule, 48-bit VA in TTBR0, recursive L0[511].
//!
//! Hermit never walks tables by physical address: it reaches every table
//! through the self-map at L0[511] (its L0 is at VA 0xffff_ffff_f000). So
//! each table descriptor here is also, seen one level down through that
//! slot, the page descriptor of the next table, and must carry page
//! attributes too (Normal write-back, inner shareable, AF), exactly like
//! the ones Hermit writes itself. At stage 1 those bits are ignored in a
//! real table descriptor (Arm ARM, VMSAv8-64 table descriptor format), so they cost nothing.

use core::ptr;

/// The translation granule and page size.
pub const PAGE_SIZE: u64 = 4096;
const ENTRIES: u64 = 512;
/// Output address bits [47:12] of a descriptor.
const ADDRESS_MASK: u64 = 0x0000_ffff_ffff_f000;

const VALID: u64 = 1 << 0;
/// Table descriptor at levels 0-2, page descriptor at level 3.
const TABLE_OR_PAGE: u64 = 1 << 1;
/// AttrIndx 1 of our MAIR_EL1: Device-nGnRE.
const ATTR_DEVICE_NGNRE: u64 = 1 << 2;
/// AttrIndx 4 of our MAIR_EL1: Normal write-back (Hermit's `NORMAL`).
const ATTR_NORMAL: u64 = 4 << 2;
const SH_INNER: u64 = 3 << 8;
/// Access flag: set, so no access-flag faults (Hermit never handles them).
const AF: u64 = 1 << 10;
const PXN: u64 = 1 << 53;
const UXN: u64 = 1 << 54;
/// A software bit Hermit uses to mark the self-map (its `SELF` flag).
const SELF_MAP: u64 = 1 << 55;

/// What Hermit puts in its own table descriptors (`NORMAL |
/// TABLE_OR_4KIB_PAGE` plus the PRESENT, INNER_SHAREABLE and ACCESSED it
/// always adds): valid as a table descriptor and, through the recursive
/// slot, as a page descriptor.
const TABLE: u64 = VALID | TABLE_OR_PAGE | ATTR_NORMAL | SH_INNER | AF;

/// RAM: Normal write-back, executable at EL1 (the kernel image is in it).
pub const MEMORY: u64 = ATTR_NORMAL | SH_INNER | AF;
/// MMIO: Device-nGnRE, never executable.
pub const DEVICE: u64 = ATTR_DEVICE_NGNRE | AF | PXN | UXN;

/// The recursive L0 slot Hermit relies on.
const RECURSIVE_SLOT: u64 = 511;

/// Why a mapping could not be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PagingError {
    /// The region reserved for tables is used up.
    OutOfTables,
    /// The address is not page aligned or beyond 48 bits.
    BadAddress(u64),
}

/// Upper bound of the table pages needed to map `span` bytes of one
/// contiguous range with 4 KiB pages, plus one more page mapping elsewhere
/// (the UART): one L3 per 2 MiB, one L2 per 1 GiB, each rounded up and
/// allowed one extra for a misaligned start, and the L0/L1 tables.
pub const fn table_pages_for(span: u64) -> u64 {
    let l3 = span / (2 << 20) + 2;
    let l2 = span / (1 << 30) + 2;
    let l1 = 2;
    let l0 = 1;
    // The extra page: up to one L1, L2 and L3 of its own.
    l3 + l2 + l1 + l0 + 3
}

/// A table tree under construction in a bump-allocated region of RAM.
pub struct Tables {
    root: u64,
    next: u64,
    end: u64,
}

impl Tables {
    /// Starts a tree whose tables are taken from `[start, end)`.
    ///
    /// # Safety
    /// `[start, end)` must be free RAM the loader may write, reachable at
    /// its physical address (MMU off or identity-mapped), page aligned.
    pub unsafe fn new(start: u64, end: u64) -> Result<Self, PagingError> {
        if !start.is_multiple_of(PAGE_SIZE) || !end.is_multiple_of(PAGE_SIZE) {
            return Err(PagingError::BadAddress(start));
        }
        let mut tables = Self {
            root: 0,
            next: start,
            end,
        };
        tables.root = tables.allocate()?;
        Ok(tables)
    }

    /// The L0 table, for TTBR0_EL1.
    pub fn root(&self) -> u64 {
        self.root
    }

    /// The end of the tables handed out so far.
    pub fn used_end(&self) -> u64 {
        self.next
    }

    fn allocate(&mut self) -> Result<u64, PagingError> {
        if self.next + PAGE_SIZE > self.end {
            return Err(PagingError::OutOfTables);
        }
        let table = self.next;
        self.next += PAGE_SIZE;
        for index in 0..ENTRIES {
            // SAFETY: `table` is a page of the region `new` was given.
            unsafe { ptr::write_volatile((table + index * 8) as *mut u64, 0) };
        }
        Ok(table)
    }

    /// Maps `[va, va + len)` to `[pa, pa + len)` with 4 KiB pages and the
    /// given attributes ([`MEMORY`] or [`DEVICE`]).
    pub fn map(&mut self, va: u64, pa: u64, len: u64, attributes: u64) -> Result<(), PagingError> {
        for address in [va, pa, len] {
            if !address.is_multiple_of(PAGE_SIZE) {
                return Err(PagingError::BadAddress(address));
            }
        }
        let mut offset = 0;
        while offset < len {
            self.map_page(va + offset, pa + offset, attributes)?;
            offset += PAGE_SIZE;
        }
        Ok(())
    }

    fn map_page(&mut self, va: u64, pa: u64, attributes: u64) -> Result<(), PagingError> {
        if va >> 48 != 0 || va >> 39 == RECURSIVE_SLOT || pa & !ADDRESS_MASK != 0 {
            return Err(PagingError::BadAddress(va));
        }
        let mut table = self.root;
        for shift in [39, 30, 21] {
            let slot = table + ((va >> shift) & (ENTRIES - 1)) * 8;
            // SAFETY: `table` is one of ours, so `slot` is inside it.
            let entry = unsafe { ptr::read_volatile(slot as *const u64) };
            table = if entry & VALID == 0 {
                let next = self.allocate()?;
                // SAFETY: as above.
                unsafe { ptr::write_volatile(slot as *mut u64, next | TABLE) };
                next
            } else {
                entry & ADDRESS_MASK
            };
        }
        let slot = table + ((va >> 12) & (ENTRIES - 1)) * 8;
        // SAFETY: `table` is one of our L3 tables.
        unsafe { ptr::write_volatile(slot as *mut u64, pa | attributes | VALID | TABLE_OR_PAGE) };
        Ok(())
    }

    /// Points L0[511] at L0 itself, which is how Hermit reaches its tables.
    pub fn map_recursive(&mut self) {
        let slot = self.root + RECURSIVE_SLOT * 8;
        // SAFETY: the root is our L0 table.
        unsafe { ptr::write_volatile(slot as *mut u64, self.root | TABLE | SELF_MAP) };
    }
}
