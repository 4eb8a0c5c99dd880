//! The EL2 stage-1 MMU: an identity map with 1 GiB blocks (39-bit VA, one
//! level-1 table). RAM is normal write-back memory, everything else is
//! Device-nGnRE and execute-never. EL2 only ever runs Pinfold's own code, so
//! one map shared by all CPUs is enough.

use core::arch::asm;

#[repr(C, align(4096))]
struct Table([u64; 512]);

static mut EL2_L1: Table = Table([0; 512]);

const MAIR_DEVICE_NGNRE: u64 = 0x04;
const MAIR_NORMAL_WB: u64 = 0xff;
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
    for (i, entry) in table.0.iter_mut().enumerate() {
        let base = i as u64 * GIB;
        let is_ram = ram.iter().any(|&(b, s)| base < b + s && b < base + GIB);
        *entry = if is_ram {
            base | BLOCK | AF | SH_INNER | ATTR_NORMAL
        } else {
            base | BLOCK | AF | ATTR_DEVICE | XN
        };
    }
    let start = table as *const Table as u64;
    // The table was written with the MMU (and so the data cache) off: drop
    // any stale cached lines so the walker sees memory.
    super::invalidate_dcache_range(start, 4096);
}

/// Turn on the MMU and caches on this CPU with the shared identity map.
pub fn enable() {
    let ttbr = core::ptr::addr_of!(EL2_L1) as u64;
    let mair = MAIR_DEVICE_NGNRE | (MAIR_NORMAL_WB << 8);
    // TCR_EL2: T0SZ = 25 (39-bit VA, start at level 1), IRGN0/ORGN0 = WB WA,
    // SH0 = inner shareable, TG0 = 4 KiB (0), PS = 40 bits, RES1 bits 23 and
    // 31. A u64: as an i32, `1 << 31` sign-extended into bits [63:32], which
    // are RES0 or, with later features, controls (DS, bit 32, changes the
    // descriptor format with FEAT_LPA2).
    let tcr: u64 = 25 | (1 << 8) | (1 << 10) | (3 << 12) | (2 << 16) | (1 << 23) | (1 << 31);
    // SCTLR_EL2: RES1 bits, M, C, SA, I; alignment checks off.
    let sctlr: u64 = 0x30c5_0830 | (1 << 0) | (1 << 2) | (1 << 3) | (1 << 12);
    // SAFETY: the identity map covers all code and data, so execution
    // continues at the same addresses once the MMU is on.
    unsafe {
        asm!(
            "msr mair_el2, {mair}",
            "msr tcr_el2, {tcr}",
            "msr ttbr0_el2, {ttbr}",
            "dsb sy",
            "tlbi alle2",
            "dsb sy",
            "isb",
            "msr sctlr_el2, {sctlr}",
            "isb",
            "ic iallu",
            "dsb nsh",
            "isb",
            mair = in(reg) mair,
            tcr = in(reg) tcr,
            ttbr = in(reg) ttbr,
            sctlr = in(reg) sctlr,
            options(nostack)
        );
    }
}
