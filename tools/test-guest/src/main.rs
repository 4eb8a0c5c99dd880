//! Bare-metal EL1 probe guest: tries to reach outside its partition and prints one `PROBE <test>: refused|ESCAPED (...)` line per attempt; with bootargs `pinfold-probe=hostile` it runs the hostile-guest suite instead (module `hostile`: every attack a named check, `HOSTILE summary: N passed, M failed; expected hypervisor faults F`).
//!
//! Loaded as a raw image at RAM base + 0x80000 and entered at its first byte
//! at EL1h, MMU off, DAIF masked, x0 = DTB IPA. The RAM is wherever the DTB's
//! /memory says (IPA 0x4000_0000 bare and in most partitions; IPA == PA in a
//! partition with a PCI function): the image is a static PIE linked at 0
//! that relocates itself in `_start`, and takes its RAM from the DTB.
//! Entered at EL2 (bare QEMU with `virtualization=on`), `_start` leaves EL2
//! idle and goes on at EL1. The first
//! 64 bytes are an arm64 Linux Image header whose first word branches over
//! it, so the image boots both as a raw blob entered at offset 0 and through
//! Image loaders (QEMU `-kernel`, U-Boot `booti`), which then pass the DTB.
//!
//! With the MMU off every data access is Device-nGnRnE, so everything here
//! is aligned (the target has +strict-align) and nothing uses exclusives.
//!
//! The PMU probe checks that a shown PMU's cycle counter counts and that the
//! hypervisor's EL2 time is not in it (or that a hidden PMU UNDEFs).
//! Addresses and function IDs are the virtual board's (`pinfold-vboard`).
//!
//! A probe that may fault runs inside [`catching`]: the synchronous
//! exception handler records ESR_EL1/FAR_EL1 and resumes at ELR_EL1 + 4,
//! skipping exactly the one probing instruction. An exception outside a
//! probe is a bug in this guest (or an unexpected injection) and stops it.
//!
//! The same binary is the workload of `cargo xtask bench` (module `bench`),
//! in a partition and booted bare by QEMU at EL1. It tells the two apart by
//! its DTB: a Pinfold partition's names the partition in
//! /chosen/pinfold,partition, QEMU's has no such property. Bare, it runs
//! only the bench loops (the isolation probes would test QEMU, not a
//! hypervisor).
#![no_std]
#![no_main]

use core::arch::{asm, global_asm};
use core::fmt::{self, Write};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Formatted output to the PL011 (see [`Uart`]); errors cannot happen.
macro_rules! print {
    ($($arg:tt)*) => {{
        let _ = core::fmt::Write::write_fmt(&mut $crate::Uart, format_args!($($arg)*));
    }};
}
macro_rules! println {
    ($($arg:tt)*) => {{
        print!($($arg)*);
        print!("\n");
    }};
}

// --- The partition's view (the virtual board, pinfold-vboard) ---------------

// GUEST_GICR_BASE is vCPU0's redistributor (RD_base; SGI_base follows at
// +64 KiB).
use pinfold_vboard::fid::{CPU_ON_64 as PSCI_CPU_ON_64, PSCI_VERSION};
use pinfold_vboard::{
    GUEST_GICD_BASE, GUEST_GICR_BASE, GUEST_UART_BASE, GUEST_UART_INTID, GUEST_UART_SIZE,
    RAW_KERNEL_OFFSET,
};
/// The bootargs word that selects the scaling mode (bench::scale).
const SCALE_BOOTARG: &str = "pinfold-bench=scale";
/// The bootargs word that runs the MSI bench alone (bench::Env::msi_only).
const MSI_BOOTARG: &str = "pinfold-bench=msi";
/// The bootargs word that selects the scrub check ([`scrub_check`]).
const SCRUB_BOOTARG: &str = "pinfold-probe=scrub";
/// The bootargs word that selects the hostile-guest suite (`hostile`).
const HOSTILE_BOOTARG: &str = "pinfold-probe=hostile";
/// The bootargs word that selects the hang mode (bench::hang).
const HANG_BOOTARG: &str = "pinfold.hang";
/// Used only when the DTB has no usable /memory node (the RAM is then
/// assumed to start RAW_KERNEL_OFFSET below this image).
const RAM_SIZE_ASSUMED: u64 = 256 << 20;

/// This guest's RAM base, from the DTB's /memory (set once by `rust_main`
/// before anything reads it).
static RAM_BASE: AtomicU64 = AtomicU64::new(0);

/// This guest's RAM base (IPA).
fn ram_base() -> u64 {
    RAM_BASE.load(Ordering::Relaxed)
}

/// Where this image runs (its first byte), whatever it was linked at.
fn image_start() -> u64 {
    extern "C" {
        static __image_start: u8;
    }
    // A linker symbol: only its address is taken (PC-relative).
    core::ptr::addr_of!(__image_start) as u64
}
/// An IPA inside the device window that the partition is given nothing at.
const DEVICE_HOLE: u64 = 0x0A00_0000;
/// Far above any plausible small partition's RAM.
const FAR_AWAY: u64 = 0xC000_0000;

// PL011 (DDI0183).
const UARTDR: u64 = 0x000;
const UARTFR: u64 = 0x018;
const UARTFR_TXFF: u32 = 1 << 5;

// GICv3 (IHI0069).
const GICD_CTLR: u64 = 0x0000;
const GICD_TYPER: u64 = 0x0004;
const GICD_ISENABLER: u64 = 0x0100;
const GICD_ICENABLER: u64 = 0x0180;
const GICD_CTLR_RWP: u32 = 1 << 31;
const GICD_CTLR_ARE_NS: u32 = 1 << 4;
const GICD_CTLR_ENABLE_G1A: u32 = 1 << 1;
const GICD_CTLR_ENABLE_G1: u32 = 1 << 0;
const GICR_WAKER: u64 = 0x0014;
const GICR_WAKER_PROCESSOR_SLEEP: u32 = 1 << 1;
const GICR_WAKER_CHILDREN_ASLEEP: u32 = 1 << 2;
/// An SPI this partition does not own.
const FOREIGN_SPI: u32 = 48;
/// The emulated UART's SPI: the partition's own, used as a control.
const OWN_SPI: u32 = GUEST_UART_INTID;
/// Bounded polls: every GIC access may be a trap to the hypervisor.
const POLL_LIMIT: u32 = 10_000;

// PSCI (DEN0022) and SMCCC (DEN0028) return codes.
const PSCI_NOT_SUPPORTED: i64 = -1;
const PSCI_INVALID_PARAMETERS: i64 = -2;
const PSCI_ALREADY_ON: i64 = -4;
const PSCI_ON_PENDING: i64 = -5;
/// Aff0 = 2: not a vCPU of a one-vCPU partition.
const FOREIGN_MPIDR: u64 = 2;

// ESR_EL1 (Arm ARM D19.2.37).
const EC_UNKNOWN: u64 = 0x00;
const EC_DABT_CUR: u64 = 0x25;
const DFSC_SYNC_EXTERNAL: u64 = 0x10;

// --- Boot and exception vectors ---------------------------------------------

global_asm!(
    r#"
.section .text.boot, "ax"
.global _start
_start:
    // arm64 Image header (Documentation/arch/arm64/booting.rst).
    b       2f                  // code0: over the header
    .word   0                   // code1
    .quad   0x80000             // text_offset: RAM base + 0x80000
    .quad   __image_size        // image_size, including .bss and stack
    .quad   0x2                 // flags: little-endian, 4K pages, near RAM base
    .quad   0, 0, 0             // res2..res4
    .word   0x644d5241          // magic "ARM\x64"
    .word   0                   // res5 (no PE header)
2:
    // The boot stamp: the first instruction after the header's branch
    // reads the virtual counter (`PROBE bench boot:` prints it later).
    mrs     x20, cntvct_el0
    msr     daifset, #0xf
    mov     x19, x0
    // Entered at EL2 (bare QEMU `virtualization=on`, which `gic-version=4`
    // requires: the bench's GICv4.0 reference run): leave EL2 idle, nothing
    // trapped or routed to it, and continue at EL1h with DAIF masked.
    mrs     x1, CurrentEL
    cmp     x1, #(2 << 2)
    b.ne    8f
    mov     x1, #(1 << 31)          // HCR_EL2: RW only (EL1 is AArch64)
    msr     hcr_el2, x1
    mov     x1, #0x3                // CNTHCTL_EL2: EL1PCTEN | EL1PCEN
    msr     cnthctl_el2, x1
    msr     cntvoff_el2, xzr
    mrs     x1, S3_4_C12_C9_5       // ICC_SRE_EL2
    mov     x2, #0x9                // SRE | Enable: EL1 uses ICC_* registers
    orr     x1, x1, x2
    msr     S3_4_C12_C9_5, x1
    isb
    mov     x1, #0x3c5              // SPSR_EL2: D, A, I, F masked; EL1h
    msr     spsr_el2, x1
    adr     x1, 8f
    msr     elr_el2, x1
    eret
8:
    // Self-relocation: linked at 0, so where _start runs is the load
    // offset. Each R_AARCH64_RELATIVE entry (offset, info, addend) becomes
    // *(base + offset) = base + addend; idempotent (the addend alone gives
    // the value). The xtask refuses an image with any other type.
    adr     x15, _start
    adrp    x9, __rela_start
    add     x9, x9, :lo12:__rela_start
    adrp    x10, __rela_end
    add     x10, x10, :lo12:__rela_end
6:
    cmp     x9, x10
    b.hs    7f
    ldp     x11, x12, [x9], #16
    ldr     x13, [x9], #8
    cmp     w12, #{r_aarch64_relative}
    b.ne    6b
    add     x13, x13, x15
    str     x13, [x15, x11]
    b       6b
7:
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
    adrp    x1, exception_vectors
    add     x1, x1, :lo12:exception_vectors
    msr     vbar_el1, x1
    isb
    mov     x0, x19
    mov     x1, x20
    bl      {main}
5:
    wfe
    b       5b

// Where a (wrongly) started foreign CPU would land: park it.
.global park_cpu
park_cpu:
    wfe
    b       park_cpu

// VBAR_EL1 table: 16 entries of 0x80 bytes; each passes its index in x0.
.macro VENTRY kind
    .balign 0x80
    sub     sp, sp, #192
    stp     x0, x1, [sp, #0]
    mov     x0, #\kind
    b       exception_common
.endm

.section .text.vectors, "ax"
.balign 2048
.global exception_vectors
exception_vectors:
    VENTRY 0
    VENTRY 1
    VENTRY 2
    VENTRY 3
    VENTRY 4
    VENTRY 5
    VENTRY 6
    VENTRY 7
    VENTRY 8
    VENTRY 9
    VENTRY 10
    VENTRY 11
    VENTRY 12
    VENTRY 13
    VENTRY 14
    VENTRY 15

// Saves the caller-saved registers plus ELR/SPSR as an ExceptionFrame,
// calls the Rust handler with (kind, &mut frame) and returns to frame.elr.
exception_common:
    stp     x2, x3, [sp, #16]
    stp     x4, x5, [sp, #32]
    stp     x6, x7, [sp, #48]
    stp     x8, x9, [sp, #64]
    stp     x10, x11, [sp, #80]
    stp     x12, x13, [sp, #96]
    stp     x14, x15, [sp, #112]
    stp     x16, x17, [sp, #128]
    stp     x18, x29, [sp, #144]
    mrs     x2, elr_el1
    mrs     x3, spsr_el1
    stp     x30, x2, [sp, #160]
    str     x3, [sp, #176]
    mov     x1, sp
    bl      {handler}
    ldr     x3, [sp, #176]
    ldp     x30, x2, [sp, #160]
    msr     elr_el1, x2
    msr     spsr_el1, x3
    ldp     x18, x29, [sp, #144]
    ldp     x16, x17, [sp, #128]
    ldp     x14, x15, [sp, #112]
    ldp     x12, x13, [sp, #96]
    ldp     x10, x11, [sp, #80]
    ldp     x8, x9, [sp, #64]
    ldp     x6, x7, [sp, #48]
    ldp     x4, x5, [sp, #32]
    ldp     x2, x3, [sp, #16]
    ldp     x0, x1, [sp, #0]
    add     sp, sp, #192
    eret
"#,
    main = sym rust_main,
    handler = sym handle_exception,
    r_aarch64_relative = const R_AARCH64_RELATIVE,
);

/// The only dynamic relocation type of a static PIE (ELF for the Arm 64-bit
/// Architecture, 5.7.11): `_start` applies these and nothing else.
const R_AARCH64_RELATIVE: u32 = 1027;

extern "C" {
    /// A `wfe` loop (in the boot assembly above); never called from Rust.
    fn park_cpu();
    /// The VBAR_EL1 table (above); its address only.
    fn exception_vectors();
}

/// Registers saved by `exception_common`, in its layout.
#[repr(C)]
struct ExceptionFrame {
    x: [u64; 19],
    x29: u64,
    x30: u64,
    elr: u64,
    spsr: u64,
    _pad: u64,
}

/// Vector table entries: index / 4 is the source, index % 4 the type.
const VECTOR_CUR_SPX_SYNC: u64 = 4;
const VECTOR_CUR_SPX_IRQ: u64 = 5;
const VECTOR_CUR_SPX_SERROR: u64 = 7;
/// ESR_EL1.EC of an instruction abort taken at EL1.
const EC_IABT_CUR: u64 = 0x21;

static EXPECT_FAULT: AtomicBool = AtomicBool::new(false);
static FAULT_COUNT: AtomicU64 = AtomicU64::new(0);
static FAULT_KIND: AtomicU64 = AtomicU64::new(0);
static FAULT_ESR: AtomicU64 = AtomicU64::new(0);
static FAULT_FAR: AtomicU64 = AtomicU64::new(0);

extern "C" fn handle_exception(kind: u64, frame: &mut ExceptionFrame) {
    let esr = read_esr_el1();
    let far = read_far_el1();
    let expected = EXPECT_FAULT.load(Ordering::Relaxed);
    if kind == VECTOR_CUR_SPX_IRQ {
        // Only the hostile suite's interrupt storm unmasks IRQs.
        return hostile::on_irq();
    }
    if expected && (kind == VECTOR_CUR_SPX_SYNC || kind == VECTOR_CUR_SPX_SERROR) {
        FAULT_KIND.store(kind, Ordering::Relaxed);
        FAULT_ESR.store(esr, Ordering::Relaxed);
        FAULT_FAR.store(far, Ordering::Relaxed);
        FAULT_COUNT.store(FAULT_COUNT.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        if kind == VECTOR_CUR_SPX_SYNC && esr >> 26 & 0x3f == EC_IABT_CUR {
            // A probe branched (`blr`) to where nothing is: return to it.
            frame.elr = frame.x30;
        } else if kind == VECTOR_CUR_SPX_SYNC {
            // ELR_EL1 is the probing instruction itself (an abort or an
            // UNDEFINED instruction): skip it. An SError is asynchronous and
            // returns to where it was taken.
            frame.elr += 4;
        }
        return;
    }
    println!(
        "PROBE fatal: unexpected exception vector={} ESR=0x{:x} ELR=0x{:x} FAR=0x{:x} SPSR=0x{:x}",
        kind, esr, frame.elr, far, frame.spsr
    );
    halt();
}

fn read_esr_el1() -> u64 {
    let v: u64;
    // SAFETY: reading ESR_EL1 at EL1 has no side effects.
    unsafe { asm!("mrs {}, esr_el1", out(reg) v, options(nomem, nostack)) };
    v
}

fn read_far_el1() -> u64 {
    let v: u64;
    // SAFETY: reading FAR_EL1 at EL1 has no side effects.
    unsafe { asm!("mrs {}, far_el1", out(reg) v, options(nomem, nostack)) };
    v
}

fn halt() -> ! {
    loop {
        // SAFETY: `wfe` only waits for an event.
        unsafe { asm!("wfe", options(nomem, nostack)) };
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    println!("PROBE fatal: panic: {}", info);
    halt();
}

// --- Output ------------------------------------------------------------------

/// The PL011 polled for room: always safe to use, never faults on a sane
/// partition (a fault here is reported as fatal by the handler).
struct Uart;

impl Uart {
    fn putc(byte: u8) {
        while mmio_read32(GUEST_UART_BASE + UARTFR) & UARTFR_TXFF != 0 {
            core::hint::spin_loop();
        }
        mmio_write32(GUEST_UART_BASE + UARTDR, u32::from(byte));
    }
}

impl Write for Uart {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for b in s.bytes() {
            if b == b'\n' {
                Uart::putc(b'\r');
            }
            Uart::putc(b);
        }
        Ok(())
    }
}

/// A 32-bit load from the UART frame (the only unguarded device access).
fn mmio_read32(addr: u64) -> u32 {
    debug_assert!((GUEST_UART_BASE..GUEST_UART_BASE + GUEST_UART_SIZE).contains(&addr));
    // SAFETY: `addr` is an aligned register of the partition's own PL011;
    // with the MMU off it is Device memory that aliases no Rust object.
    unsafe { core::ptr::read_volatile(addr as *const u32) }
}

/// A 32-bit store to the UART frame.
fn mmio_write32(addr: u64, value: u32) {
    debug_assert!((GUEST_UART_BASE..GUEST_UART_BASE + GUEST_UART_SIZE).contains(&addr));
    // SAFETY: as for `mmio_read32`.
    unsafe { core::ptr::write_volatile(addr as *mut u32, value) };
}

// --- Guarded probes ------------------------------------------------------------

/// An exception taken while a probe ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Fault {
    kind: u64,
    esr: u64,
    far: u64,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ec = self.esr >> 26 & 0x3f;
        if self.kind == VECTOR_CUR_SPX_SERROR {
            return write!(f, "SError ESR=0x{:x}", self.esr);
        }
        match ec {
            EC_DABT_CUR => {
                let dfsc = self.esr & 0x3f;
                let what = if dfsc == DFSC_SYNC_EXTERNAL {
                    "sync external abort"
                } else {
                    "data abort"
                };
                write!(
                    f,
                    "{what} EC=0x{ec:02x} DFSC=0x{dfsc:02x} FAR=0x{:x}",
                    self.far
                )
            }
            EC_UNKNOWN => write!(f, "UNDEFINED instruction EC=0x00"),
            _ => write!(f, "exception EC=0x{ec:02x} ESR=0x{:x}", self.esr),
        }
    }
}

/// Runs `f` with faults expected and SError unmasked; returns its result and
/// the last fault it took, if any.
fn catching<T>(f: impl FnOnce() -> T) -> (T, Option<Fault>) {
    let before = FAULT_COUNT.load(Ordering::Relaxed);
    EXPECT_FAULT.store(true, Ordering::Relaxed);
    // SAFETY: unmasking SError only lets an abort the hypervisor injects as
    // SError reach the handler, which is armed (EXPECT_FAULT) to record it.
    unsafe { asm!("msr daifclr, #4", "isb", options(nomem, nostack)) };
    let result = f();
    // SAFETY: barriers let a pending SError from the probe arrive before
    // SError is masked again; no memory is touched.
    unsafe { asm!("dsb sy", "isb", "msr daifset, #4", "isb", options(nostack)) };
    EXPECT_FAULT.store(false, Ordering::Relaxed);
    let fault = (FAULT_COUNT.load(Ordering::Relaxed) != before).then(|| Fault {
        kind: FAULT_KIND.load(Ordering::Relaxed),
        esr: FAULT_ESR.load(Ordering::Relaxed),
        far: FAULT_FAR.load(Ordering::Relaxed),
    });
    (result, fault)
}

/// A 32-bit load from any IPA, aborts caught.
fn probe_read(addr: u64) -> Result<u32, Fault> {
    let (value, fault) = catching(|| {
        let v: u32;
        // SAFETY: the load may target memory outside the partition; that is
        // the probe. It is one instruction, so a caught abort resumes right
        // after it, and it writes no Rust-visible memory.
        unsafe {
            asm!("mov {v:w}, #0", "ldr {v:w}, [{a}]", a = in(reg) addr, v = out(reg) v,
                 options(nostack, readonly))
        };
        v
    });
    fault.map_or(Ok(value), Err)
}

/// A 32-bit store to any IPA, aborts caught.
fn probe_write(addr: u64, value: u32) -> Result<(), Fault> {
    let ((), fault) = catching(|| {
        // SAFETY: the store targets IPAs that hold no Rust object (device
        // frames, or addresses outside this guest's RAM); one instruction,
        // so a caught abort resumes right after it.
        unsafe { asm!("str {v:w}, [{a}]", a = in(reg) addr, v = in(reg) value, options(nostack)) };
    });
    fault.map_or(Ok(()), Err)
}

/// An SMCCC call through `hvc #0` or `smc #0`; returns x0.
fn smccc(use_smc: bool, function: u32, a1: u64, a2: u64, a3: u64) -> Result<u64, Fault> {
    let (x0, fault) = catching(|| {
        let mut x0 = u64::from(function);
        // SAFETY: an SMCCC call; the callee may clobber x0-x17 (declared),
        // touches no guest memory we own, and an UNDEFINED conduit is caught
        // by the handler, which skips the one instruction.
        unsafe {
            if use_smc {
                asm!("smc #0", inout("x0") x0, inout("x1") a1 => _, inout("x2") a2 => _,
                     inout("x3") a3 => _, inout("x4") 0u64 => _, inout("x5") 0u64 => _, out("x6") _, out("x7") _,
                     out("x8") _, out("x9") _, out("x10") _, out("x11") _, out("x12") _,
                     out("x13") _, out("x14") _, out("x15") _, out("x16") _, out("x17") _,
                     options(nostack))
            } else {
                asm!("hvc #0", inout("x0") x0, inout("x1") a1 => _, inout("x2") a2 => _,
                     inout("x3") a3 => _, inout("x4") 0u64 => _, inout("x5") 0u64 => _, out("x6") _, out("x7") _,
                     out("x8") _, out("x9") _, out("x10") _, out("x11") _, out("x12") _,
                     out("x13") _, out("x14") _, out("x15") _, out("x16") _, out("x17") _,
                     options(nostack))
            }
        }
        x0
    });
    fault.map_or(Ok(x0), Err)
}

/// Writes a system register (GIC CPU interface, PMU), UNDEFINED caught.
macro_rules! probe_msr {
    ($reg:literal, $value:expr) => {{
        let v: u64 = $value;
        catching(|| {
            // SAFETY: a GIC CPU interface or PMU register write at EL1; it
            // changes no memory, and a trap or UNDEFINED is caught by the
            // handler.
            unsafe { asm!(concat!("msr ", $reg, ", {}"), "isb", in(reg) v, options(nostack)) };
        })
        .1
    }};
}

/// Reads a system register (GIC CPU interface, PMU, ID), UNDEFINED caught.
macro_rules! probe_mrs {
    ($reg:literal) => {{
        let (v, fault) = catching(|| {
            let v: u64;
            // SAFETY: a system register read at EL1; no memory is touched,
            // and a trap or UNDEFINED is caught by the handler.
            unsafe { asm!(concat!("mrs {}, ", $reg), out(reg) v, options(nostack)) };
            v
        });
        fault.map_or(Ok(v), Err)
    }};
}

// GICv3 CPU interface registers are written by encoding (the assembler may
// not know their names for this target): ICC_SRE_EL1 = S3_0_C12_C12_5,
// ICC_PMR_EL1 = S3_0_C4_C6_0, ICC_IGRPEN1_EL1 = S3_0_C12_C12_7,
// ICC_SGI1R_EL1 = S3_0_C12_C11_5, ICC_HPPIR1_EL1 = S3_0_C12_C12_2.

// --- The probes ------------------------------------------------------------------

/// One probed address's outcome, for a report line.
struct Attempt {
    addr: u64,
    outcome: Result<u32, Fault>,
}

/// Prints `PROBE <test>: refused (...)` when every attempt faulted, else
/// `ESCAPED (...)` listing what got through.
fn report_accesses(test: &str, verb: &str, attempts: &[Attempt]) {
    let escaped = attempts.iter().any(|a| a.outcome.is_ok());
    print!(
        "PROBE {test}: {} (",
        if escaped { "ESCAPED" } else { "refused" }
    );
    for (i, a) in attempts.iter().enumerate() {
        if i > 0 {
            print!("; ");
        }
        match a.outcome {
            Ok(v) if verb == "load" => print!("0x{:x}: load returned 0x{v:08x}", a.addr),
            Ok(_) => print!("0x{:x}: store completed", a.addr),
            Err(f) => print!("0x{:x}: {f}", a.addr),
        }
    }
    println!(")");
}

/// Whether the RAM this partition was given held nothing of a previous
/// owner: every 8-byte word outside this image and the DTB the hypervisor
/// wrote must be zero. One line: `PROBE scrub: N nonzero words ...`.
fn scrub_check(dtb: u64, dtb_size: u64, ram_end: u64) {
    extern "C" {
        static __image_start: u8;
        static __image_end: u8;
    }
    // Linker symbols: only their addresses are taken.
    let (image_start, image_end) = (
        core::ptr::addr_of!(__image_start) as u64,
        core::ptr::addr_of!(__image_end) as u64,
    );
    let skip = |a: u64| (image_start..image_end).contains(&a) || (dtb..dtb + dtb_size).contains(&a);
    let (mut nonzero, mut first) = (0u64, None);
    let ram_base = ram_base();
    let mut addr = ram_base;
    while addr < ram_end {
        if !skip(addr) {
            // SAFETY: inside this partition's RAM (the DTB's /memory), 8-byte
            // aligned, aliased by nothing in Rust.
            let word = unsafe { core::ptr::read_volatile(addr as *const u64) };
            if word != 0 {
                nonzero += 1;
                first.get_or_insert(addr);
            }
        }
        addr += 8;
    }
    println!(
        "PROBE scrub: {nonzero} nonzero words outside the image and DTB in 0x{ram_base:x}..0x{ram_end:x} (first at 0x{:x})",
        first.unwrap_or(0)
    );
}

fn probe_read_outside_ram(ram_end: u64) {
    let attempts = [ram_end, DEVICE_HOLE].map(|addr| Attempt {
        addr,
        outcome: probe_read(addr),
    });
    report_accesses("read-outside-ram", "load", &attempts);
}

fn probe_write_outside_ram(ram_end: u64) {
    const PATTERN: u32 = 0x5052_4f42; // "PROB"
    let attempts = [ram_end, DEVICE_HOLE, FAR_AWAY].map(|addr| Attempt {
        addr,
        outcome: probe_write(addr, PATTERN).map(|()| 0),
    });
    report_accesses("write-outside-ram", "store", &attempts);
}

/// Polls `addr` until `(value & mask) == 0`; false on timeout or fault.
fn wait_clear(addr: u64, mask: u32) -> bool {
    (0..POLL_LIMIT).any(|_| matches!(probe_read(addr), Ok(v) if v & mask == 0))
}

fn probe_enable_foreign_spi() {
    const TEST: &str = "enable-foreign-spi";
    // As Linux's gic_dist_init: disable, wait for RWP, enable with ARE.
    let ctlr = GUEST_GICD_BASE + GICD_CTLR;
    let setup = probe_write(ctlr, 0)
        .and_then(|()| {
            probe_write(
                ctlr,
                GICD_CTLR_ARE_NS | GICD_CTLR_ENABLE_G1A | GICD_CTLR_ENABLE_G1,
            )
        })
        .and_then(|()| probe_read(GUEST_GICD_BASE + GICD_TYPER));
    let typer = match setup {
        Ok(t) => t,
        Err(f) => return println!("PROBE {TEST}: refused (GIC distributor setup faulted: {f})"),
    };
    let rwp_ok = wait_clear(ctlr, GICD_CTLR_RWP);

    let reg = 4 * u64::from(FOREIGN_SPI / 32);
    let isenabler = GUEST_GICD_BASE + GICD_ISENABLER + reg;
    let foreign = 1u32 << (FOREIGN_SPI % 32);
    let own = 1u32 << (OWN_SPI % 32);
    let readback = probe_write(isenabler, own)
        .and_then(|()| probe_write(isenabler, foreign))
        .and_then(|()| probe_read(isenabler));
    let _ = probe_write(GUEST_GICD_BASE + GICD_ICENABLER + reg, foreign | own);

    let lines = 32 * ((typer & 0x1f) + 1);
    let rwp = if rwp_ok {
        ""
    } else {
        ", GICD_CTLR.RWP never cleared"
    };
    match readback {
        Err(f) => println!("PROBE {TEST}: refused (GICD_ISENABLER access faulted: {f})"),
        Ok(v) if v & foreign != 0 => println!(
            "PROBE {TEST}: ESCAPED (SPI {FOREIGN_SPI} reads enabled: GICD_ISENABLER{}=0x{v:08x}, \
             GICD_TYPER lines={lines}{rwp})",
            FOREIGN_SPI / 32
        ),
        Ok(v) => {
            println!(
            "PROBE {TEST}: refused (SPI {FOREIGN_SPI} stays disabled: GICD_ISENABLER{}=0x{v:08x}; \
             own SPI {OWN_SPI} {}{rwp})",
            FOREIGN_SPI / 32,
            if v & own != 0 { "enabled as a control" } else { "did not enable either (!)" }
        )
        }
    }
}

fn probe_sgi_outside_partition() {
    const TEST: &str = "sgi-outside-partition";
    // Wake our redistributor (GICR_WAKER handshake, as Linux does).
    let waker = GUEST_GICR_BASE + GICR_WAKER;
    let woke = probe_read(waker)
        .and_then(|w| probe_write(waker, w & !GICR_WAKER_PROCESSOR_SLEEP))
        .map(|()| wait_clear(waker, GICR_WAKER_CHILDREN_ASLEEP));
    let woke_note = match woke {
        Ok(true) => "",
        Ok(false) => "; GICR_WAKER.ChildrenAsleep stuck",
        Err(_) => "; GICR_WAKER faulted",
    };

    let sre = probe_mrs!("S3_0_C12_C12_5").unwrap_or(0);
    let setup = [
        probe_msr!("S3_0_C12_C12_5", sre | 1), // ICC_SRE_EL1.SRE
        probe_msr!("S3_0_C4_C6_0", 0xff),      // ICC_PMR_EL1: unmask all priorities
        probe_msr!("S3_0_C12_C12_7", 1),       // ICC_IGRPEN1_EL1.Enable
    ]
    .into_iter()
    .flatten()
    .next();
    if let Some(f) = setup {
        return println!(
            "PROBE {TEST}: refused (GIC system register setup faulted: {f}{woke_note})"
        );
    }

    // ICC_SGI1R_EL1: INTID [27:24], TargetList [15:0], IRM [40].
    let to_aff0_5 = (1u64 << 24) | (1 << 5);
    let to_all_but_self = (2u64 << 24) | (1 << 40);
    let sent = [
        probe_msr!("S3_0_C12_C11_5", to_aff0_5),
        probe_msr!("S3_0_C12_C11_5", to_all_but_self),
    ]
    .into_iter()
    .flatten()
    .next();
    if let Some(f) = sent {
        return println!("PROBE {TEST}: refused (ICC_SGI1R_EL1 write faulted: {f}{woke_note})");
    }
    // Neither SGI may come back to this vCPU either: 1023 = nothing pending.
    let hppir = probe_mrs!("S3_0_C12_C12_2").map_or(u64::MAX, |v| v & 0xff_ffff);
    println!(
        "PROBE {TEST}: sent (the hypervisor must drop it; self ICC_HPPIR1_EL1={hppir}{woke_note})"
    );
}

fn probe_psci_cpu_on_foreign() {
    const TEST: &str = "psci-cpu-on-foreign";
    let entry = park_cpu as *const () as usize as u64;
    match smccc(false, PSCI_CPU_ON_64, FOREIGN_MPIDR, entry, 0).map(|r| r as i64) {
        Ok(PSCI_INVALID_PARAMETERS) => {
            println!("PROBE {TEST}: refused (CPU_ON MPIDR {FOREIGN_MPIDR} -> INVALID_PARAMETERS)")
        }
        Ok(r @ (0 | PSCI_ALREADY_ON | PSCI_ON_PENDING)) => println!(
            "PROBE {TEST}: ESCAPED (CPU_ON MPIDR {FOREIGN_MPIDR} -> {r}: the call reached a CPU \
             outside the partition)"
        ),
        Ok(r) => println!(
            "PROBE {TEST}: refused (CPU_ON MPIDR {FOREIGN_MPIDR} -> {r}, expected INVALID_PARAMETERS)"
        ),
        Err(f) => println!("PROBE {TEST}: refused (HVC raised {f}, expected INVALID_PARAMETERS)"),
    }
}

fn probe_smc() {
    const TEST: &str = "smc";
    // PSCI_VERSION is an SMC32 call: the result is in w0.
    match smccc(true, PSCI_VERSION, 0, 0, 0).map(|r| i64::from(r as u32 as i32)) {
        Ok(PSCI_NOT_SUPPORTED) => {
            println!("PROBE {TEST}: refused (SMC PSCI_VERSION -> NOT_SUPPORTED)")
        }
        Ok(r) => println!(
            "PROBE {TEST}: ESCAPED (SMC PSCI_VERSION -> 0x{:x}: something behind SMC answered)",
            r as u32
        ),
        Err(f) => println!("PROBE {TEST}: refused (SMC raised {f}, expected NOT_SUPPORTED)"),
    }
}

/// Management hypercalls: only the management partition may make them, and
/// even it may only name buffers inside its own RAM.
fn probe_management_calls(ram_end: u64) {
    use pinfold_abi::{fid, AbiError};
    let version = smccc(false, fid::ABI_VERSION, 0, 0, 0).map(|r| r as i64);
    match version {
        Ok(0) => println!("PROBE mgmt-call: allowed (this partition is the management partition)"),
        Ok(r) if r == AbiError::NotSupported.code() => {
            println!("PROBE mgmt-call: refused (ABI_VERSION -> NOT_SUPPORTED)")
        }
        Ok(r) => println!("PROBE mgmt-call: refused (ABI_VERSION -> {r})"),
        Err(f) => println!("PROBE mgmt-call: refused (HVC raised {f})"),
    }
    // A buffer that starts inside RAM and runs past its end.
    let buf = ram_end - 64;
    let list = smccc(false, fid::LIST_PARTITIONS, buf, 4096, 0).map(|r| r as i64);
    match list {
        Ok(r) if r == AbiError::BadAddress.code() => {
            println!("PROBE mgmt-bad-buffer: refused (LIST_PARTITIONS past RAM end -> BAD_ADDRESS)")
        }
        Ok(r) if r == AbiError::NotSupported.code() => {
            println!("PROBE mgmt-bad-buffer: refused (LIST_PARTITIONS -> NOT_SUPPORTED)")
        }
        Ok(r) if r >= 0 => {
            println!("PROBE mgmt-bad-buffer: ESCAPED (LIST_PARTITIONS wrote past RAM end -> {r})")
        }
        Ok(r) => println!("PROBE mgmt-bad-buffer: refused (LIST_PARTITIONS -> {r})"),
        Err(f) => println!("PROBE mgmt-bad-buffer: refused (HVC raised {f})"),
    }
}

// PMU (Arm ARM D19.5): PMCR_EL0.E enables, .C resets the cycle counter;
// PMCNTENSET_EL0 bit 31 enables the cycle counter; PMCCFILTR_EL0.NSH (bit
// 27) asks it to count at EL2 as well.
const PMCR_E: u64 = 1 << 0;
const PMCR_C: u64 = 1 << 2;
const PMCNTEN_CYCLES: u64 = 1 << 31;
const PMCCFILTR_NSH: u64 = 1 << 27;
/// Calls (and loop iterations) per EL2-time measurement.
const PMU_CALLS: usize = 100;
/// Each measurement is repeated, the two filters interleaved so both see
/// the same host, and the smallest of each taken, so a host preemption
/// (QEMU on a shared machine) does not look like EL2 time.
const PMU_TRIALS: usize = 7;
/// Rounds of PMU_TRIALS that must all look counted before the probe
/// reports an escape.
const PMU_ROUNDS: usize = 3;

fn read_pmccntr() -> u64 {
    let v: u64;
    // SAFETY: reading the cycle counter has no side effects; the caller
    // has checked it is accessible (an UNDEF would be fatal here).
    unsafe { asm!("isb", "mrs {}, pmccntr_el0", "isb", out(reg) v, options(nomem, nostack)) };
    v
}

/// Cycles of `PMU_CALLS` HVC PSCI_VERSION calls (`hvc` true) or of the same
/// EL1 instructions with a `nop` instead of each `hvc`.
fn hvc_cycles(hvc: bool) -> u64 {
    {
        let start = read_pmccntr();
        for _ in 0..PMU_CALLS {
            // SAFETY: PSCI_VERSION over HVC clobbers at most x0-x17
            // (declared) and touches no memory; the nop variant nothing.
            unsafe {
                if hvc {
                    asm!("hvc #0", inout("x0") u64::from(PSCI_VERSION) => _, out("x1") _,
                         out("x2") _, out("x3") _, out("x4") _, out("x5") _, out("x6") _,
                         out("x7") _, out("x8") _, out("x9") _, out("x10") _, out("x11") _,
                         out("x12") _, out("x13") _, out("x14") _, out("x15") _, out("x16") _,
                         out("x17") _, options(nostack))
                } else {
                    asm!("nop", inout("x0") u64::from(PSCI_VERSION) => _, out("x1") _,
                         out("x2") _, out("x3") _, out("x4") _, out("x5") _, out("x6") _,
                         out("x7") _, out("x8") _, out("x9") _, out("x10") _, out("x11") _,
                         out("x12") _, out("x13") _, out("x14") _, out("x15") _, out("x16") _,
                         out("x17") _, options(nostack))
                }
            }
        }
        read_pmccntr().wrapping_sub(start)
    }
}

/// The PMU as the partition sees it. `pmu-cycles`: with a PMU shown, the
/// cycle counter can be enabled and counts a busy loop. `pmu-el2-time`: the
/// hypervisor's time is not in it: 100 HVCs cost about the same with
/// PMCCFILTR_EL0.NSH=1 (the guest asks to count EL2) as with NSH=0 (it asks
/// not to, so this is the EL1-only cost on any implementation); counted EL2
/// time would add the whole exit path per call. `pmu-hidden`: with
/// PMUVer 0 the PMU registers must be UNDEFINED.
fn probe_pmu() {
    let dfr0 = probe_mrs!("id_aa64dfr0_el1").unwrap_or(0);
    let pmuver = dfr0 >> 8 & 0xf;
    let shown = pmuver != 0 && pmuver != 0xf;
    let enable = probe_msr!("pmcr_el0", PMCR_E | PMCR_C)
        .or_else(|| probe_msr!("pmccfiltr_el0", PMCCFILTR_NSH))
        .or_else(|| probe_msr!("pmcntenset_el0", PMCNTEN_CYCLES))
        .or_else(|| probe_mrs!("pmccntr_el0").err());
    match (shown, enable) {
        (false, Some(f)) => {
            return println!("PROBE pmu-hidden: refused (PMUVer={pmuver}, PMU registers raise {f})")
        }
        (true, Some(f)) => {
            return println!("PROBE pmu-cycles: FAILED (PMUVer={pmuver} but enabling the cycle counter raised {f})")
        }
        (false, None) => println!(
            "PROBE pmu-hidden: ESCAPED (PMUVer={pmuver} but the PMU registers answer; measuring anyway)"
        ),
        (true, None) => {}
    }
    let n = probe_mrs!("pmcr_el0").map_or(0, |v| v >> 11 & 0x1f);

    let start = read_pmccntr();
    for i in 0..10_000u64 {
        core::hint::black_box(i);
    }
    let busy = read_pmccntr().wrapping_sub(start);
    if busy == 0 {
        println!("PROBE pmu-cycles: FAILED (PMUVer={pmuver}, PMCCNTR_EL0 did not move over a 10000-iteration loop)");
    } else {
        println!("PROBE pmu-cycles: counts (PMUVer={pmuver}, PMCR_EL0.N={n}, 10000-iteration loop = {busy} cycles)");
    }

    // Warm up (first executions pay for translation under QEMU), then
    // measure with EL2 counting asked for, and without, interleaved.
    let _ = hvc_cycles(true);
    let _ = hvc_cycles(false);
    // Counted EL2 time adds the whole exit path to each call, far more than
    // the guest's side of an HVC (on hardware; under QEMU TCG, whose cycle
    // counter is host time, the EL1 side includes QEMU's exception
    // machinery and EL2 adds about 1.7x on top); noise between the
    // interleaved minima stays well below half. A round that looks counted
    // is measured again: only counting seen in every one of PMU_ROUNDS
    // rounds is an escape (a loaded host preempting QEMU through all seven
    // trials of one filter is noise; counted EL2 time is there every time).
    for round in 1..=PMU_ROUNDS {
        let (mut asked, mut el1_only, mut nop_loop) = (u64::MAX, u64::MAX, u64::MAX);
        let mut filter = u64::MAX;
        for _ in 0..PMU_TRIALS {
            let _ = probe_msr!("pmccfiltr_el0", PMCCFILTR_NSH);
            filter = probe_mrs!("pmccfiltr_el0").unwrap_or(u64::MAX);
            asked = asked.min(hvc_cycles(true));
            let _ = probe_msr!("pmccfiltr_el0", 0);
            el1_only = el1_only.min(hvc_cycles(true));
            nop_loop = nop_loop.min(hvc_cycles(false));
        }
        let detail = format_args!(
            "{PMU_CALLS} HVC PSCI_VERSION: {asked} cycles with NSH=1 asked, {el1_only} with NSH=0; \
             same EL1 instructions with nop: {nop_loop}; PMCCFILTR_EL0 read 0x{filter:x} after NSH=1; \
             round {round} of at most {PMU_ROUNDS}"
        );
        if 2 * asked <= 3 * el1_only + PMU_CALLS as u64 {
            println!("PROBE pmu-el2-time: refused (EL2 time not counted: {detail})");
            break;
        }
        if round == PMU_ROUNDS {
            println!("PROBE pmu-el2-time: ESCAPED (EL2 time is counted: {detail})");
        }
    }
    let _ = probe_msr!("pmcntenclr_el0", PMCNTEN_CYCLES);
}

/// The probe never allocates; the ABI crate it takes its constants from has
/// heap-using payload types, which need an allocator to link. Any allocation
/// fails (returns null), which would end in the panic handler.
struct NoAlloc;

// SAFETY: returning null is always a valid (failed) allocation; dealloc is
// never reached because nothing was ever allocated.
unsafe impl core::alloc::GlobalAlloc for NoAlloc {
    unsafe fn alloc(&self, _layout: core::alloc::Layout) -> *mut u8 {
        core::ptr::null_mut()
    }
    unsafe fn dealloc(&self, _ptr: *mut u8, _layout: core::alloc::Layout) {}
}

#[global_allocator]
static ALLOCATOR: NoAlloc = NoAlloc;

mod bench;
mod hostile;
mod msi;

/// The MSI bench's addresses from the DTB (QEMU's or the partition's, the
/// same node names): the ECAM (`/pcie` reg), its first 32-bit memory range
/// and msi-map, the ITS (`/intc/its` reg) and the first redistributor (the
/// second `reg` entry of `/intc`). Root and GIC: #address-cells =
/// #size-cells = 2; the bridge: 3 address cells.
fn msi_target(fdt: &Fdt) -> Result<msi::Target, &'static str> {
    let two = |(off, len): (u32, u32), index: u32| -> Option<u64> {
        (len >= 16 * (index + 1)).then_some(())?;
        fdt.cells(off + 16 * index, 2)
    };
    let reg = fdt.prop(&[b"pcie"], b"reg").ok_or("no /pcie host bridge")?;
    let ecam = two(reg, 0).ok_or("/pcie reg unreadable")?;
    let its = fdt
        .prop(&[b"intc", b"its"], b"reg")
        .ok_or("no ITS under /intc")?;
    let its = two(its, 0).ok_or("ITS reg unreadable")?;
    let gic = fdt.prop(&[b"intc"], b"reg").ok_or("no /intc reg")?;
    let redist = two(gic, 1).ok_or("/intc reg has no redistributor")?;
    let (ranges, len) = fdt.prop(&[b"pcie"], b"ranges").ok_or("no /pcie ranges")?;
    let mem32 = (0..len / 28)
        .map(|i| ranges + 28 * i)
        .find(|&e| fdt.be32(e).is_some_and(|space| space >> 24 & 3 == 2))
        .and_then(|e| {
            Some((
                fdt.cells(e + 4, 2)?,
                fdt.cells(e + 12, 2)?,
                fdt.cells(e + 20, 2)?,
            ))
        })
        .ok_or("no 32-bit memory range in /pcie ranges")?;
    let msi_map = match fdt.prop(&[b"pcie"], b"msi-map") {
        Some((off, len)) if len >= 16 => Some((
            fdt.be32(off).ok_or("msi-map unreadable")?,
            fdt.be32(off + 8).ok_or("msi-map unreadable")?,
            fdt.be32(off + 12).ok_or("msi-map unreadable")?,
        )),
        _ => None,
    };
    Ok(msi::Target {
        ecam,
        its,
        redist,
        mem32,
        msi_map,
    })
}

// --- DTB: just enough to find /memory, the mode and the PSCI conduit ------------------------------------------

const FDT_MAGIC: u32 = 0xd00d_feed;
const FDT_BEGIN_NODE: u32 = 1;
const FDT_END_NODE: u32 = 2;
const FDT_PROP: u32 = 3;
const FDT_NOP: u32 = 4;
const FDT_END: u32 = 9;
/// Refuse to walk anything bigger: a sane guest DTB is far smaller.
const FDT_MAX_SIZE: u32 = 2 << 20;

/// A flattened device tree whose every byte was checked to be readable.
struct Fdt {
    base: u64,
    size: u32,
}

impl Fdt {
    /// Validates the header at `base` with guarded loads.
    fn at(base: u64) -> Option<Fdt> {
        // Where RAM is comes from this very DTB: any non-null aligned
        // address is tried (every load here is guarded).
        if base == 0 || !base.is_multiple_of(8) {
            return None;
        }
        let magic = u32::from_be(probe_read(base).ok()?);
        let size = u32::from_be(probe_read(base + 4).ok()?);
        if magic != FDT_MAGIC || !(40..=FDT_MAX_SIZE).contains(&size) {
            return None;
        }
        // The last word too: then the whole blob is in readable RAM.
        probe_read(base + u64::from(size & !3) - 4).ok()?;
        Some(Fdt { base, size })
    }

    fn byte(&self, off: u32) -> Option<u8> {
        if off >= self.size {
            return None;
        }
        // SAFETY: `off` is inside the blob, which `Fdt::at` checked is
        // readable guest RAM; nothing in Rust aliases it.
        Some(unsafe { core::ptr::read_volatile((self.base + u64::from(off)) as *const u8) })
    }

    fn be32(&self, off: u32) -> Option<u32> {
        if !off.is_multiple_of(4) || off.checked_add(4)? > self.size {
            return None;
        }
        // SAFETY: aligned and inside the checked blob, as for `byte`.
        let raw = unsafe { core::ptr::read_volatile((self.base + u64::from(off)) as *const u32) };
        Some(u32::from_be(raw))
    }

    /// Whether the NUL-terminated string at `off` equals `s` (or, with
    /// `unit_ok`, is `s@...`).
    fn name_is(&self, off: u32, s: &[u8], unit_ok: bool) -> bool {
        let same = (0..s.len() as u32).all(|i| self.byte(off + i) == Some(s[i as usize]));
        let next = self.byte(off + s.len() as u32);
        same && (next == Some(0) || (unit_ok && next == Some(b'@')))
    }

    fn cells(&self, off: u32, count: u32) -> Option<u64> {
        match count {
            1 => self.be32(off).map(u64::from),
            2 => Some(u64::from(self.be32(off)?) << 32 | u64::from(self.be32(off + 4)?)),
            _ => None,
        }
    }

    /// The value (offset, length) of property `name` of the node at `path`
    /// (node names from the root, each matching `name` or `name@unit`).
    fn prop(&self, path: &[&[u8]], name: &[u8]) -> Option<(u32, u32)> {
        // off_dt_struct and off_dt_strings.
        let (mut p, strings) = (self.be32(8)?, self.be32(12)?);
        // depth counts the root as 1; `matched` path components match the
        // chain of nodes we are in (the current node is on the path when
        // matched == depth - 1).
        let (mut depth, mut matched) = (0usize, 0usize);
        loop {
            let token = self.be32(p)?;
            p += 4;
            match token {
                FDT_BEGIN_NODE => {
                    depth += 1;
                    if depth >= 2
                        && matched == depth - 2
                        && path
                            .get(depth - 2)
                            .is_some_and(|want| self.name_is(p, want, true))
                    {
                        matched = depth - 1;
                    }
                    let mut len = 0;
                    while self.byte(p + len)? != 0 {
                        len += 1;
                    }
                    p = (p + len + 1 + 3) & !3;
                }
                FDT_END_NODE => {
                    if matched + 1 >= depth {
                        matched = depth.saturating_sub(2);
                    }
                    depth = depth.checked_sub(1)?;
                }
                FDT_PROP => {
                    let len = self.be32(p)?;
                    let prop_name = strings.checked_add(self.be32(p + 4)?)?;
                    let value = p + 8;
                    if depth >= 1
                        && matched == depth - 1
                        && matched == path.len()
                        && self.name_is(prop_name, name, false)
                    {
                        return Some((value, len));
                    }
                    p = (value.checked_add(len)? + 3) & !3;
                }
                FDT_NOP => {}
                _ => return None,
            }
        }
    }

    /// Whether /chosen/bootargs has the word `word`.
    fn bootargs_have(&self, word: &str) -> bool {
        let Some(args) = self.prop(&[b"chosen"], b"bootargs") else {
            return false;
        };
        let mut buf = [0u8; 256];
        let n = self.string_into(args, &mut buf);
        core::str::from_utf8(&buf[..n])
            .is_ok_and(|args| args.split_ascii_whitespace().any(|w| w == word))
    }

    /// Whether the string property at (`off`, `len`) is `s` (NUL-terminated).
    fn string_is(&self, (off, len): (u32, u32), s: &[u8]) -> bool {
        len as usize == s.len() + 1 && self.name_is(off, s, false)
    }

    /// Copies a string property into `buf` (truncated, NUL dropped); returns
    /// the copied length.
    fn string_into(&self, (off, len): (u32, u32), buf: &mut [u8]) -> usize {
        let mut n = 0;
        while n < buf.len() && (n as u32) < len {
            match self.byte(off + n as u32) {
                Some(0) | None => break,
                Some(b) => buf[n] = b,
            }
            n += 1;
        }
        n
    }

    /// The first (base, size) of the top-level /memory node.
    fn memory(&self) -> Option<(u64, u64)> {
        let mut p = self.be32(8)?; // off_dt_struct
        let strings = self.be32(12)?; // off_dt_strings
        let (mut address_cells, mut size_cells) = (2, 1);
        let mut depth = 0u32;
        let mut in_memory = false;
        loop {
            let token = self.be32(p)?;
            p += 4;
            match token {
                FDT_BEGIN_NODE => {
                    depth += 1;
                    in_memory = depth == 2 && self.name_is(p, b"memory", true);
                    let mut len = 0;
                    while self.byte(p + len)? != 0 {
                        len += 1;
                    }
                    p = (p + len + 1 + 3) & !3;
                }
                FDT_END_NODE => {
                    depth = depth.checked_sub(1)?;
                    in_memory = false;
                }
                FDT_PROP => {
                    let len = self.be32(p)?;
                    let name = strings.checked_add(self.be32(p + 4)?)?;
                    let value = p + 8;
                    if depth == 1 && self.name_is(name, b"#address-cells", false) {
                        address_cells = self.be32(value)?;
                    } else if depth == 1 && self.name_is(name, b"#size-cells", false) {
                        size_cells = self.be32(value)?;
                    } else if in_memory && self.name_is(name, b"reg", false) {
                        let base = self.cells(value, address_cells)?;
                        let size = self.cells(value + 4 * address_cells, size_cells)?;
                        return Some((base, size));
                    }
                    p = (value.checked_add(len)? + 3) & !3;
                }
                FDT_NOP => {}
                FDT_END => return None,
                _ => return None,
            }
        }
    }
}

// --- Main ----------------------------------------------------------------------

fn current_el() -> u64 {
    let v: u64;
    // SAFETY: reading CurrentEL has no side effects.
    unsafe { asm!("mrs {}, CurrentEL", out(reg) v, options(nomem, nostack)) };
    v >> 2 & 3
}

fn counter() -> (u64, u64) {
    let (freq, count): (u64, u64);
    // SAFETY: reading the generic timer's frequency and virtual count at EL1
    // has no side effects.
    unsafe {
        asm!("mrs {}, cntfrq_el0", "isb", "mrs {}, cntvct_el0", out(reg) freq, out(reg) count,
             options(nomem, nostack))
    };
    (freq, count)
}

/// Where the probe runs, told apart by the DTB it was given: a Pinfold
/// partition's DTB names the partition in /chosen/pinfold,partition; the
/// DTB QEMU generates for `-kernel` at EL1 (bare) has no such property.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Partition,
    Bare,
    /// No readable DTB: treated as a partition (the probes run).
    Unknown,
}

/// Reads the mode and the PSCI conduit (/psci `method`) from the DTB.
fn detect(fdt: Option<&Fdt>) -> (Mode, bench::Conduit) {
    let Some(fdt) = fdt else {
        println!("PROBE mode: unknown (no readable DTB); running as a partition");
        return (Mode::Unknown, bench::Conduit::Hvc);
    };
    let conduit = match fdt.prop(&[b"psci"], b"method") {
        Some(m) if fdt.string_is(m, b"smc") => bench::Conduit::Smc,
        Some(m) if fdt.string_is(m, b"hvc") => bench::Conduit::Hvc,
        _ => bench::Conduit::None,
    };
    match fdt.prop(&[b"chosen"], b"pinfold,partition") {
        Some(name) => {
            let mut buf = [0u8; 32];
            let n = fdt.string_into(name, &mut buf);
            let name = core::str::from_utf8(&buf[..n]).unwrap_or("?");
            println!(
                "PROBE mode: partition (DTB /chosen/pinfold,partition = \"{name}\"), PSCI over {}",
                conduit.name()
            );
            (Mode::Partition, conduit)
        }
        None => {
            println!(
                "PROBE mode: bare (DTB has no /chosen/pinfold,partition), PSCI over {}; \
                 bench loops only",
                conduit.name()
            );
            (Mode::Bare, conduit)
        }
    }
}

extern "C" fn rust_main(dtb: u64, entry_cntvct: u64) -> ! {
    let el = current_el();
    if el != 1 {
        println!("PROBE fatal: entered at EL{el}, expected EL1");
        halt();
    }
    let fdt = Fdt::at(dtb);
    let image = image_start();
    let (ram_base, ram_end, source) = match fdt.as_ref().and_then(|f| f.memory()) {
        Some((base, size)) if size > 0 && (base..base + size).contains(&image) => {
            (base, base + size, "DTB /memory")
        }
        _ => {
            let base = image - RAW_KERNEL_OFFSET;
            (
                base,
                base + RAM_SIZE_ASSUMED,
                "assumed: no usable DTB /memory",
            )
        }
    };
    RAM_BASE.store(ram_base, Ordering::Relaxed);
    println!("PROBE start: EL1, dtb=0x{dtb:x}, RAM 0x{ram_base:x}..0x{ram_end:x} ({source})");
    if image != ram_base + RAW_KERNEL_OFFSET {
        println!("PROBE note: running at 0x{image:x}, not RAM base + 0x{RAW_KERNEL_OFFSET:x}");
    }
    let (mode, conduit) = detect(fdt.as_ref());
    let env = bench::Env {
        bare: mode == Mode::Bare,
        conduit,
        entry_cntvct,
        msi: fdt.as_ref().map_or(Err("no readable DTB"), msi_target),
        msi_only: fdt.as_ref().is_some_and(|f| f.bootargs_have(MSI_BOOTARG)),
    };
    if let Some(f) = fdt.as_ref().filter(|f| f.bootargs_have(SCRUB_BOOTARG)) {
        scrub_check(f.base, u64::from(f.size), ram_end);
        halt();
    }
    let hostile = fdt
        .as_ref()
        .is_some_and(|f| f.bootargs_have(HOSTILE_BOOTARG));
    if hostile {
        hostile::run(ram_end);
    }
    if fdt.as_ref().is_some_and(|f| f.bootargs_have(HANG_BOOTARG)) {
        bench::hang();
    }
    if fdt.as_ref().is_some_and(|f| f.bootargs_have(SCALE_BOOTARG)) {
        println!("PROBE mode: scaling (bootargs `{SCALE_BOOTARG}`): no probes, no bench loops");
        bench::scale(&env);
        halt();
    }

    if mode != Mode::Bare && !hostile {
        probe_read_outside_ram(ram_end);
        probe_write_outside_ram(ram_end);
        probe_enable_foreign_spi();
        probe_sgi_outside_partition();
        probe_psci_cpu_on_foreign();
        probe_smc();
        probe_management_calls(ram_end);
        probe_pmu();
        println!("PROBE done");
    }
    if !hostile {
        bench::run(&env);
    }

    let (mut freq, start) = counter();
    if freq == 0 {
        freq = 62_500_000;
        println!("PROBE note: CNTFRQ_EL0 is 0, assuming 62.5 MHz");
    }
    let mut n = 0u64;
    let mut next = start;
    loop {
        next += freq;
        while counter().1 < next {
            core::hint::spin_loop();
        }
        n += 1;
        println!("PROBE alive {n}");
    }
}
