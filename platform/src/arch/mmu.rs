//! The EL2 stage-1 MMU: an identity map with 1 GiB blocks (39-bit VA, one
//! level-1 table). RAM is normal write-back memory, everything else is
//! Device-nGnRE and execute-never. EL2 only ever runs Pinfold's own code, so
//! one map shared by all CPUs is enough.

use super::regs::{self, Fields, Writeable};
use aarch64_cpu::registers::{MAIR_EL2, SCTLR_EL2, TCR_EL2, TTBR0_EL2};
use core::arch::asm;

#[repr(C, align(4096))]
struct Table([u64; 512]);

static mut EL2_L1: Table = Table([0; 512]);

const ATTR_DEVICE: u64 = 0 << 2;
const ATTR_NORMAL: u64 = 1 << 2;
const BLOCK: u64 = 0b01;
const AF: u64 = 1 << 10;
const SH_INNER: u64 = 3 << 8;
const XN: u64 = 1 << 54;
const GIB: u64 = 1 << 30;

/// Build the identity map: `ram` lists (base, size) of RAM.
pub fn build(ram: &[(u64, u64)]) {
    // SAFETY: runs once on the boot CPU before the MMU is on and before any
    // other CPU starts; nothing else references the table yet.
    let table = unsafe { &mut *core::ptr::addr_of_mut!(EL2_L1) };
    // Device first, then the blocks any RAM range touches made normal: one
    // pass over the 512 entries and one per range (checking every range
    // for every entry cost about 12,000 instructions of the boot).
    for (i, entry) in table.0.iter_mut().enumerate() {
        *entry = (i as u64 * GIB) | BLOCK | AF | ATTR_DEVICE | XN;
    }
    for &(b, s) in ram {
        if s == 0 {
            continue;
        }
        let first = (b / GIB) as usize;
        let last = (b.saturating_add(s - 1) / GIB) as usize;
        for i in first..=last.min(table.0.len() - 1) {
            table.0[i] = (i as u64 * GIB) | BLOCK | AF | SH_INNER | ATTR_NORMAL;
        }
    }
    let start = table as *const Table as u64;
    // The table was written with the MMU (and so the data cache) off: drop
    // any stale cached lines so the walker sees memory.
    super::invalidate_dcache_range(start, 4096);
}

/// MAIR_EL2: index 0 Device-nGnRE, index 1 normal write-back
/// non-transient, read/write-allocate (inner and outer).
const MAIR: Fields<MAIR_EL2::Register> = regs::fields(&[
    MAIR_EL2::Attr0_Device::nonGathering_nonReordering_EarlyWriteAck,
    MAIR_EL2::Attr1_Normal_Outer::WriteBack_NonTransient_ReadWriteAlloc,
    MAIR_EL2::Attr1_Normal_Inner::WriteBack_NonTransient_ReadWriteAlloc,
]);

/// TCR_EL2 (E2H = 0): 39-bit VA (T0SZ = 25, the walk starts at level 1),
/// 4 KiB granule, inner shareable write-back write-allocate walks, 40-bit
/// PA; bits 23 and 31 RES1, which aarch64-cpu 11 does not define.
const TCR: Fields<TCR_EL2::Register> = regs::fields(&[
    TCR_EL2::T0SZ.val(25),
    TCR_EL2::IRGN0::WriteBack_ReadAlloc_WriteAlloc_Cacheable,
    TCR_EL2::ORGN0::WriteBack_ReadAlloc_WriteAlloc_Cacheable,
    TCR_EL2::SH0::Inner,
    TCR_EL2::TG0::KiB_4,
    TCR_EL2::PS::Bits_40,
    regs::local_field(23, 1, 1),
    regs::local_field(31, 1, 1),
]);

/// SCTLR_EL2 (E2H = 0): MMU, data and instruction caches and SP alignment
/// checks on, other alignment checks off, exception entry and return
/// context synchronising; the other RES1 bits of this layout (4, 5, 16,
/// 18, 23, 28, 29), which aarch64-cpu 11 does not define.
const SCTLR: Fields<SCTLR_EL2::Register> = regs::fields(&[
    SCTLR_EL2::M::Enable,
    SCTLR_EL2::C::Cacheable,
    SCTLR_EL2::SA::Enable,
    SCTLR_EL2::I::Cacheable,
    SCTLR_EL2::EOS::IsSynch,
    SCTLR_EL2::EIS::IsSynch,
    regs::local_field(4, 2, 0b11),
    regs::local_field(16, 1, 1),
    regs::local_field(18, 1, 1),
    regs::local_field(23, 1, 1),
    regs::local_field(28, 2, 0b11),
]);

// The values these registers had when they were written as raw numbers
// (before the typed fields): a field change must change these on purpose.
const _: () = assert!(MAIR.value == 0xff04);
const _: () = assert!(TCR.value == 0x8082_3519);
const _: () = assert!(SCTLR.value == 0x30c5_183d);

/// Turn on the MMU and caches on this CPU with the shared identity map.
pub fn enable() {
    MAIR_EL2.write(MAIR);
    TCR_EL2.write(TCR);
    TTBR0_EL2.set(core::ptr::addr_of!(EL2_L1) as u64);
    // SAFETY: barriers and TLB maintenance only. They also order memory:
    // no load or store moves across them, so nothing but the SCTLR_EL2
    // write sits between them and the MMU-on barriers below.
    unsafe { asm!("dsb sy", "tlbi alle2", "dsb sy", "isb", options(nostack)) };
    // The identity map covers all code and data, so execution continues at
    // the same addresses once the MMU is on.
    SCTLR_EL2.write(SCTLR);
    // SAFETY: context synchronisation and instruction cache maintenance.
    unsafe { asm!("isb", "ic iallu", "dsb nsh", "isb", options(nostack)) };
}
