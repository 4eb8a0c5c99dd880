//! AArch64 EL1 mechanics of the loader: entry code, exception vectors, MMU switch-on, cache maintenance and the jump into Hermit.

use core::arch::{asm, global_asm};

/// SCTLR_EL1 bits that are RES1 in Armv8.0 (EOS, TSCXT, EIS, SPAN, nTLSMD,
/// LSMAOE: Arm ARM D19.2.118); writing 1 keeps their legacy behaviour on
/// later cores where they became controls.
const SCTLR_RES1: u64 = (1 << 29) | (1 << 28) | (1 << 23) | (1 << 22) | (1 << 20) | (1 << 11);
const SCTLR_M: u64 = 1 << 0;
const SCTLR_C: u64 = 1 << 2;
const SCTLR_I: u64 = 1 << 12;

/// MAIR_EL1 as Hermit 0.11's page-table flags index it (its AttrIndx values
/// are hard-coded): 0 Device-nGnRnE, 1 Device-nGnRE, 2 Device-GRE,
/// 3 Normal non-cacheable, 4 Normal write-back read/write-allocate.
const MAIR: u64 = mair_attr(0, 0x00)
    | mair_attr(1, 0x04)
    | mair_attr(2, 0x0c)
    | mair_attr(3, 0x44)
    | mair_attr(4, 0xff);

/// MAIR_EL1.Attr<index> = `attr`.
const fn mair_attr(index: u64, attr: u64) -> u64 {
    attr << (index * 8)
}

// TCR_EL1 (Arm ARM D19.2.139): 48-bit VA through TTBR0 only, 4 KiB granule
// (TG0 = 0b00, so no bits), table walks inner-shareable write-back.
const TCR_T0SZ_48BIT: u64 = 16;
const TCR_IRGN0_WBWA: u64 = 1 << 8;
const TCR_ORGN0_WBWA: u64 = 1 << 10;
const TCR_SH0_INNER: u64 = 3 << 12;
const TCR_T1SZ_48BIT: u64 = 16 << 16;
/// EPD1: Hermit never uses the upper VA range, so TTBR1 walks fault.
const TCR_EPD1: u64 = 1 << 23;
/// TG1 = 0b10: 4 KiB granule (the encoding differs from TG0's).
const TCR_TG1_4K: u64 = 2 << 30;
const TCR_IPS_SHIFT: u64 = 32;
/// IPS = 0b101, 48 bits: larger needs TCR_EL1.DS, which Hermit 0.11 does not
/// handle (it panics on FEAT_LPA2 anyway).
const IPS_48BIT: u64 = 0b101;

/// ELF64 relocation type: write load base + addend (AAELF64).
const R_AARCH64_RELATIVE: u32 = 1027;

/// CPACR_EL1.FPEN = 0b11: the std application uses FP/SIMD at EL1.
const CPACR_FPEN: u64 = 3 << 20;

global_asm!(
    r#"
.section .text.boot, "ax"
.global _start
_start:
    // arm64 Image header (Documentation/arch/arm64/booting.rst).
    b       1f                  // code0: over the header
    .word   0                   // code1
    .quad   0x80000             // text_offset: RAM base + 0x80000
    .quad   __image_size        // image_size, including .bss and stack
    .quad   0x2                 // flags: little-endian, 4K pages, near RAM base
    .quad   0, 0, 0             // res2..res4
    .word   0x644d5241          // magic "ARM\x64"
    .word   0                   // res5 (no PE header)
1:
    msr     daifset, #0xf
    mov     x19, x0             // the DTB, per the boot protocol
    ldr     x1, ={sctlr}        // MMU and caches off, whatever came before
    msr     sctlr_el1, x1
    isb

    // Apply our own R_AARCH64_RELATIVE relocations: linked at 0, loaded at
    // RAM base + 0x80000. __link_base is an absolute symbol (link.ld), so
    // these immediates need no relocation themselves.
    adrp    x20, _start         // the image's first byte, where it runs
    add     x20, x20, :lo12:_start
    movz    x21, #:abs_g3:__link_base
    movk    x21, #:abs_g2_nc:__link_base
    movk    x21, #:abs_g1_nc:__link_base
    movk    x21, #:abs_g0_nc:__link_base
    sub     x21, x20, x21       // load address - link address
    adrp    x2, __rela_start
    add     x2, x2, :lo12:__rela_start
    adrp    x3, __rela_end
    add     x3, x3, :lo12:__rela_end
    mov     x7, x2
6:
    cmp     x2, x3
    b.hs    7f
    ldr     x4, [x2], #8        // r_offset (a link-time address)
    ldr     x5, [x2], #8        // r_info
    ldr     x6, [x2], #8        // r_addend
    cmp     w5, #{r_relative}
    b.ne    6b                  // a static PIE has no other kind
    add     x6, x6, x21
    str     x6, [x4, x21]
    b       6b
7:
    // Those stores went around the cache (MMU off); the image was only
    // cleaned to the PoC, so clean stale copies of the relocated words may
    // still be cached: drop them before the MMU and caches come on.
    dsb     sy
8:
    cmp     x7, x3
    b.hs    9f
    ldr     x4, [x7], #24       // r_offset
    add     x4, x4, x21
    dc      ivac, x4
    b       8b
9:
    dsb     sy

    // .bss and the stack are written with the MMU off, i.e. uncached, and
    // read through the cache once it is on: drop any stale lines first so
    // they cannot shadow those writes (the boot protocol only promises the
    // loaded image itself is clean to the PoC).
    adrp    x0, __bss_start
    add     x0, x0, :lo12:__bss_start
    adrp    x1, __image_end
    add     x1, x1, :lo12:__image_end
    mrs     x2, ctr_el0
    ubfx    x2, x2, #16, #4     // DminLine: log2(words per line)
    mov     x3, #4
    lsl     x3, x3, x2
    sub     x4, x3, #1
    bic     x0, x0, x4
2:
    dc      ivac, x0
    add     x0, x0, x3
    cmp     x0, x1
    b.lo    2b
    dsb     sy

    adrp    x1, __stack_top
    add     x1, x1, :lo12:__stack_top
    mov     sp, x1
    adrp    x1, __bss_start
    add     x1, x1, :lo12:__bss_start
    adrp    x2, __bss_end
    add     x2, x2, :lo12:__bss_end
3:
    cmp     x1, x2
    b.hs    4f
    str     xzr, [x1], #8
    b       3b
4:
    adrp    x1, loader_vectors
    add     x1, x1, :lo12:loader_vectors
    msr     vbar_el1, x1
    isb
    mov     x0, x19
    bl      {main}
5:
    wfe
    b       5b

// Any exception in the loader is fatal: report which, with ESR/ELR/FAR.
.macro LOADER_VENTRY kind
    .balign 0x80
    mov     x0, #\kind
    b       loader_exception_common
.endm

.section .text.vectors, "ax"
.balign 2048
loader_vectors:
    LOADER_VENTRY 0
    LOADER_VENTRY 1
    LOADER_VENTRY 2
    LOADER_VENTRY 3
    LOADER_VENTRY 4
    LOADER_VENTRY 5
    LOADER_VENTRY 6
    LOADER_VENTRY 7
    LOADER_VENTRY 8
    LOADER_VENTRY 9
    LOADER_VENTRY 10
    LOADER_VENTRY 11
    LOADER_VENTRY 12
    LOADER_VENTRY 13
    LOADER_VENTRY 14
    LOADER_VENTRY 15
loader_exception_common:
    mrs     x1, esr_el1
    mrs     x2, elr_el1
    mrs     x3, far_el1
    bl      {trap}
6:
    wfe
    b       6b
"#,
    sctlr = const SCTLR_RES1,
    r_relative = const R_AARCH64_RELATIVE,
    main = sym crate::loader_main,
    trap = sym crate::loader_exception,
);

/// The exception level the loader runs at (CurrentEL.EL).
pub fn current_el() -> u64 {
    let el: u64;
    // SAFETY: reading CurrentEL has no side effects.
    unsafe { asm!("mrs {}, CurrentEL", out(reg) el, options(nomem, nostack, preserves_flags)) };
    (el >> 2) & 3
}

/// ID_AA64MMFR0_EL1.PARange, capped at 48 bits, as a TCR_EL1.IPS value.
fn ips() -> u64 {
    let mmfr0: u64;
    // SAFETY: reading an ID register has no side effects.
    unsafe {
        asm!("mrs {}, id_aa64mmfr0_el1", out(reg) mmfr0, options(nomem, nostack, preserves_flags))
    };
    (mmfr0 & 0xf).min(IPS_48BIT)
}

/// The smallest data cache line in bytes (CTR_EL0.DminLine is log2 words).
fn dcache_line() -> u64 {
    let ctr: u64;
    // SAFETY: reading CTR_EL0 has no side effects.
    unsafe { asm!("mrs {}, ctr_el0", out(reg) ctr, options(nomem, nostack, preserves_flags)) };
    4 << ((ctr >> 16) & 0xf)
}

/// Discards the data cache lines covering `[start, end)`, so memory written
/// with the MMU off is not hidden later by stale cached copies. Under a
/// hypervisor with stage 2 on, DC IVAC at EL1 acts as DC CIVAC, which is
/// just as right here since nothing of ours is dirty in the cache yet.
///
/// # Safety
/// Any data of `[start, end)` that only lives in the cache is lost: the
/// range must hold nothing that was written through a cacheable mapping.
pub unsafe fn invalidate_dcache(start: u64, end: u64) {
    let line = dcache_line();
    let mut addr = start & !(line - 1);
    while addr < end {
        // SAFETY: the caller owns the range; DC IVAC changes no architectural
        // state beyond the cache contents the caller gave up.
        unsafe { asm!("dc ivac, {}", in(reg) addr, options(nostack, preserves_flags)) };
        addr += line;
    }
    // SAFETY: a barrier has no memory-safety preconditions.
    unsafe { asm!("dsb sy", options(nostack, preserves_flags)) };
}

/// Makes instructions written through the data cache in `[start, end)`
/// visible to instruction fetch: clean to the PoU, then invalidate the
/// I-cache (Arm ARM B2.4.4, "Concurrent modification and execution").
pub fn sync_icache(start: u64, end: u64) {
    let line = dcache_line();
    let mut addr = start & !(line - 1);
    while addr < end {
        // SAFETY: DC CVAU only writes back; the range is mapped (identity).
        unsafe { asm!("dc cvau, {}", in(reg) addr, options(nostack, preserves_flags)) };
        addr += line;
    }
    // SAFETY: barriers and I-cache invalidation lose no data.
    unsafe {
        asm!(
            "dsb ish",
            "ic iallu",
            "dsb ish",
            "isb",
            options(nostack, preserves_flags)
        )
    };
}

/// Turns on the EL1&0 stage-1 MMU and the caches with `l0` as TTBR0_EL1.
///
/// # Safety
/// `l0` must be a complete translation table tree that identity-maps the
/// loader's code, data, stack and everything it touches afterwards, with
/// attributes indexing [`MAIR`].
pub unsafe fn enable_mmu(l0: u64) {
    let tcr = TCR_T0SZ_48BIT
        | TCR_IRGN0_WBWA
        | TCR_ORGN0_WBWA
        | TCR_SH0_INNER
        | TCR_T1SZ_48BIT
        | TCR_EPD1
        | TCR_TG1_4K
        | (ips() << TCR_IPS_SHIFT);
    let sctlr = SCTLR_RES1 | SCTLR_M | SCTLR_C | SCTLR_I;
    // SAFETY: the caller guarantees the tables identity-map all we use, so
    // execution continues at the next instruction with the MMU on.
    unsafe {
        asm!(
            "msr mair_el1, {mair}",
            "msr tcr_el1, {tcr}",
            "msr ttbr0_el1, {l0}",
            "msr ttbr1_el1, xzr",
            "isb",
            "tlbi vmalle1",
            "dsb nsh",
            "isb",
            "msr sctlr_el1, {sctlr}",
            "isb",
            mair = in(reg) MAIR,
            tcr = in(reg) tcr,
            l0 = in(reg) l0,
            sctlr = in(reg) sctlr,
            options(nostack, preserves_flags),
        );
    }
}

/// Enters Hermit the way its `_start` expects: x0 = &RawBootInfo,
/// x1 = CPU number 0, sp = the base of its boot stack (Hermit adds the
/// stack size itself), FP/SIMD enabled, interrupts still masked.
///
/// # Safety
/// `entry` must be the loaded kernel's entry point, `boot_info` a valid
/// RawBootInfo and `stack` the base of a free 32 KiB region, all mapped.
pub unsafe fn enter_kernel(entry: u64, boot_info: u64, stack: u64) -> ! {
    // SAFETY: per the caller's guarantees; nothing of the loader is used
    // after the branch.
    unsafe {
        asm!(
            "msr cpacr_el1, {cpacr}",
            "msr tpidr_el0, xzr",
            "msr tpidr_el1, xzr",
            "isb",
            "mov sp, {stack}",
            "br {entry}",
            cpacr = in(reg) CPACR_FPEN,
            stack = in(reg) stack,
            entry = in(reg) entry,
            in("x0") boot_info,
            in("x1") 0u64,
            options(noreturn),
        )
    }
}

/// Stops this CPU for good (interrupts are masked, so WFE only wakes on
/// events and loops back).
pub fn halt() -> ! {
    loop {
        // SAFETY: WFE has no memory effects.
        unsafe { asm!("wfe", options(nomem, nostack, preserves_flags)) };
    }
}
