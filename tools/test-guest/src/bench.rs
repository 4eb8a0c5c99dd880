//! The bench loops of `cargo xtask bench` (docs/PERFORMANCE.md), the same
//! code bare under QEMU at EL1 and in a Pinfold partition. Every figure is
//! read from the virtual counter (CNTVCT_EL0), never the PMU: under QEMU's
//! `-icount shift=0` one tick of the 62.5 MHz counter is exactly 16
//! instructions (counted over every CPU), so the numbers repeat exactly.
//!
//! The timed loops are assembly, so their instruction counts do not depend
//! on the compiler:
//!
//! - `bench_hvc_loop`: `mov w0, #PSCI_VERSION; hvc #0; subs; b.ne` (4
//!   instructions at EL1 per call plus whoever answers the HVC).
//! - `bench_mmio_read_loop`: `ldr w10, [GICD_TYPER]; subs; b.ne` (3 plus the
//!   emulation; bare it is QEMU's own GICD, no trap).
//! - `bench_vtimer_trial`: CNTV_CVAL_EL0 = now + ahead, timer on, IRQs
//!   unmasked, spin on `cbz x10, .`. PPI 27's vector slot branches into a
//!   sled of `d` nops (d = 0..15), then `isb; mrs x10, cntvct_el0` (the
//!   handler stamp), acknowledges, masks the timer, EOIs and returns; the
//!   loop falls through to `isb; mrs x13, cntvct_el0` (the back stamp). The
//!   timer fires on the tick boundary CVAL, and a read L instructions later
//!   shows floor((L + d) / 16) ticks past it; summed over d = 0..15 that is
//!   exactly L (Hermite's identity), so the mean of ticks x 16 over whole
//!   rounds of the dither is the instruction count, not rounded to a tick.
//! - `bench_sgi_loop` on vCPU 0 and `bench_sgi_responder` on vCPU 1 (brought
//!   up with PSCI CPU_ON): vCPU 0 sends SGI 3 to vCPU 1 and waits in WFI
//!   with IRQs masked, then unmasks to take the answer; vCPU 1 sleeps in WFI
//!   and its handler answers each SGI 3 with an SGI 3 to vCPU 0. Both sides
//!   wait in WFI, so under icount (all CPUs round-robin on one host thread,
//!   a CPU in WFI executes nothing) the ticks count only the instructions
//!   of the round trip itself on both CPUs.
//!
//! - `bench_loadput_loop` (after the SGI round trips, which end with vCPU 1
//!   switched off by SGI 4): vCPU 0 starts vCPU 1 with PSCI CPU_ON and
//!   waits in WFI with IRQs masked; vCPU 1's entry (`bench_loadput_entry`)
//!   sends SGI 3 to vCPU 0 and calls PSCI CPU_OFF; vCPU 0 wakes, takes the
//!   SGI from ICC_IAR1_EL1 and starts vCPU 1 again. In a partition that is
//!   one vCPU load and one put per round trip, plus the two cross-CPU
//!   requests; a CPU_ON refused because vCPU 1 is not off yet is retried
//!   and counted (`retries=`).
//!
//! - the MSI bench ([`crate::msi`], last): QEMU's edu raising MSIs
//!   through the ITS the DTB names, from the raise write to the handler.
//!
//! The scaling mode (bootargs `pinfold-bench=scale`, vm-configs/qemu-virt/
//! bench-scale.toml, run under multi-threaded TCG without icount) is
//! [`scale`]: exits per second per vCPU, with one and with two vCPUs
//! trapping at once, for a fixed stretch of the guest counter.
//!
//! Output: one `PROBE bench <row>: key=value ...` line per row, or `PROBE
//! bench <row>: skipped (why)`, then `PROBE bench end`.

use core::arch::{asm, global_asm};
use core::sync::atomic::{AtomicU64, Ordering};

use pinfold_vboard::fid::{AFFINITY_INFO_64, CPU_OFF, CPU_ON_64, PSCI_VERSION};
use pinfold_vboard::{GICR_STRIDE, GUEST_GICD_BASE, GUEST_GICR_BASE, PPI_VTIMER};

/// The SGI the round trip uses (the isolation probe uses 1 and 2).
const BENCH_SGI: u32 = 3;
/// Calls / reads per timed HVC and MMIO loop.
const LOOP_ITERATIONS: u64 = 1000;
/// Values of the nop dither: one counter tick's worth of instructions at
/// 62.5 MHz under `-icount shift=0`.
const DITHER: u64 = 16;
/// Whole dither rounds of timer interrupts.
const VTIMER_ROUNDS: u64 = 4;
/// How far ahead of now CVAL is set: enough for the setup instructions.
const VTIMER_AHEAD_TICKS: u64 = 32;
/// Untimed round trips first (the responder reaches its WFI), then timed.
const SGI_WARMUP: u64 = 16;
const SGI_ITERATIONS: u64 = 1000;
/// The SGI that switches the SGI responder (vCPU 1) off with PSCI CPU_OFF.
const OFF_SGI: u32 = 4;
/// CPU_ON -> CPU_OFF round trips of vCPU 1: untimed, then timed.
const LOADPUT_WARMUP: u64 = 4;
const LOADPUT_ITERATIONS: u64 = 200;
/// AFFINITY_INFO polls (each followed by a WFE) for vCPU 1 to be off.
const OFF_WAIT: u32 = 100_000;
/// WFE rounds to wait for vCPU 1 to come up (each yields to other CPUs).
const SECONDARY_WAIT: u32 = 1_000_000;

// GICv3 (IHI0069) registers the bench programs.
const GICD_CTLR: u64 = 0x0000;
const GICD_TYPER: u64 = 0x0004;
const GICD_CTLR_RWP: u32 = 1 << 31;
/// ARE (affinity routing), EnableGrp1, EnableGrp0 in the single-security
/// view QEMU and Pinfold both give EL1.
const GICD_CTLR_ARE: u32 = 1 << 4;
const GICD_CTLR_ENABLES: u32 = (1 << 1) | (1 << 0);
const GICR_WAKER: u64 = 0x0014;
const GICR_WAKER_PROCESSOR_SLEEP: u32 = 1 << 1;
const GICR_WAKER_CHILDREN_ASLEEP: u32 = 1 << 2;
/// The SGI/PPI frame follows RD_base.
const GICR_SGI_FRAME: u64 = 0x1_0000;
const GICR_IGROUPR0: u64 = 0x0080;
const GICR_ISENABLER0: u64 = 0x0100;
const GICR_ICENABLER0: u64 = 0x0180;
const GICR_IPRIORITYR0: u64 = 0x0400;
// The same offsets as the `str` immediates of bench_scale_gicr.
const GICR_SGI_FRAME_ISENABLER0: u64 = GICR_ISENABLER0;
const GICR_SGI_FRAME_ICENABLER0: u64 = GICR_ICENABLER0;
const BENCH_PRIORITY: u32 = 0x80;
const POLL_LIMIT: u32 = 10_000;

/// ICC_SGI1R_EL1: INTID [27:24], TargetList [15:0] over Aff0 (Aff1-3 = 0).
const fn sgi1r(intid: u32, aff0: u64) -> u64 {
    (intid as u64) << 24 | 1 << aff0
}

/// How PSCI is reached, from the DTB's /psci `method`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Conduit {
    Hvc,
    Smc,
    /// No (known) method: no PSCI calls are made.
    None,
}

impl Conduit {
    pub fn name(self) -> &'static str {
        match self {
            Conduit::Hvc => "hvc",
            Conduit::Smc => "smc",
            Conduit::None => "none",
        }
    }
}

/// What the bench knows about where it runs.
pub struct Env {
    /// Booted by QEMU directly at EL1 (no hypervisor).
    pub bare: bool,
    pub conduit: Conduit,
    /// CNTVCT_EL0 at the image's second instruction (after the header's
    /// branch).
    pub entry_cntvct: u64,
    /// Where the MSI bench's ITS, ECAM and redistributor are, or why the
    /// DTB does not say.
    pub msi: Result<crate::msi::Target, &'static str>,
    /// Bootargs `pinfold-bench=msi`: the MSI bench alone (the other loops
    /// print `skipped`). The bench's bare GICv4.0 reference: QEMU enters
    /// that board at EL2, and only this guest's boot CPU drops to EL1.
    pub msi_only: bool,
}

global_asm!(
    r#"
.section .text.bench, "ax"

// u64 bench_hvc_loop(u64 iterations): ticks of `iterations` HVC
// PSCI_VERSION calls. SMCCC 1.0 lets the callee clobber x0-x17, so the
// loop state lives in x19/x20.
.global bench_hvc_loop
bench_hvc_loop:
    stp     x19, x20, [sp, #-16]!
    mov     x19, x0
    isb
    mrs     x20, cntvct_el0
1:  mov     w0, #{psci_version}
    hvc     #0
    subs    x19, x19, #1
    b.ne    1b
    isb
    mrs     x0, cntvct_el0
    sub     x0, x0, x20
    ldp     x19, x20, [sp], #16
    ret

// u64 bench_mmio_read_loop(u64 addr, u64 iterations): ticks of
// `iterations` 32-bit loads from addr.
.global bench_mmio_read_loop
bench_mmio_read_loop:
    isb
    mrs     x9, cntvct_el0
1:  ldr     w10, [x0]
    subs    x1, x1, #1
    b.ne    1b
    isb
    mrs     x0, cntvct_el0
    sub     x0, x0, x9
    ret

// void bench_vtimer_trial(u64 entry, u64 ahead, u64 out[4]): one timer
// interrupt; out = CVAL, handler stamp, back stamp, INTID acknowledged.
// x9 = where the IRQ vector branches (into the nop sled); x10 is set
// by the handler (its stamp, never 0); x11 = INTID.
.global bench_vtimer_trial
bench_vtimer_trial:
    mov     x9, x0
    mov     x10, #0
    isb
    mrs     x12, cntvct_el0
    add     x12, x12, x1
    msr     cntv_cval_el0, x12
    mov     x13, #1
    msr     cntv_ctl_el0, x13
    isb
    msr     daifclr, #2
1:  cbz     x10, 1b
    isb
    mrs     x13, cntvct_el0
    msr     daifset, #2
    stp     x12, x10, [x2]
    stp     x13, x11, [x2, #16]
    ret

bench_vtimer_sled:
    .rept 15
    nop
    .endr
.global bench_vtimer_handler
bench_vtimer_handler:
    isb
    mrs     x10, cntvct_el0
    mrs     x11, S3_0_C12_C12_0     // ICC_IAR1_EL1
    msr     cntv_ctl_el0, xzr       // timer off: its level drops
    msr     S3_0_C12_C12_1, x11     // ICC_EOIR1_EL1
    eret

// u64 bench_sgi_loop(u64 iterations, u64 sgi1r): ticks of `iterations`
// round trips. x3 counts answers (the IRQ handler increments it).
.global bench_sgi_loop
bench_sgi_loop:
    mov     x3, #0
    mov     x4, x0
    msr     daifset, #2
    isb
    mrs     x9, cntvct_el0
1:  add     x5, x3, #1
    msr     S3_0_C12_C11_5, x1      // ICC_SGI1R_EL1
2:  wfi                             // wakes on the pending answer
    msr     daifclr, #2             // take it
    msr     daifset, #2
    cmp     x3, x5
    b.lo    2b
    subs    x4, x4, #1
    b.ne    1b
    isb
    mrs     x0, cntvct_el0
    sub     x0, x0, x9
    ret

// noreturn bench_sgi_responder(u64 sgi1r): vCPU 1 sleeps, its handler
// answers each bench SGI with `sgi1r` (kept in x12).
.global bench_sgi_responder
bench_sgi_responder:
    mov     x12, x0
    msr     daifclr, #2
1:  wfi
    b       1b

// PSCI CPU_ON entry of vCPU 1: its own stack, the main vectors, Rust.
.global bench_secondary_entry
bench_secondary_entry:
    msr     daifset, #0xf
    adrp    x1, bench_secondary_stack_top
    add     x1, x1, :lo12:bench_secondary_stack_top
    mov     sp, x1
    adrp    x1, exception_vectors
    add     x1, x1, :lo12:exception_vectors
    msr     vbar_el1, x1
    isb
    bl      {secondary_main}
3:  wfe
    b       3b

// Vector tables for the benches: every entry but "IRQ, current EL with
// SP_ELx" (offset 0x280) forwards to the same entry of exception_vectors.
.macro FWD n
    .balign 0x80
    b       exception_vectors + \n * 0x80
.endm
.macro FWD_BEFORE_IRQ
    FWD 0
    FWD 1
    FWD 2
    FWD 3
    FWD 4
.endm
.macro FWD_AFTER_IRQ
    FWD 6
    FWD 7
    FWD 8
    FWD 9
    FWD 10
    FWD 11
    FWD 12
    FWD 13
    FWD 14
    FWD 15
.endm

.balign 2048
.global bench_vtimer_vectors
bench_vtimer_vectors:
    FWD_BEFORE_IRQ
    .balign 0x80
    br      x9                      // into the dither sled
    FWD_AFTER_IRQ

// vCPU 0 in the SGI round trip: count the answer.
.balign 2048
.global bench_sgi0_vectors
bench_sgi0_vectors:
    FWD_BEFORE_IRQ
    .balign 0x80
    mrs     x11, S3_0_C12_C12_0     // ICC_IAR1_EL1
    msr     S3_0_C12_C12_1, x11     // ICC_EOIR1_EL1
    add     x3, x3, #1
    eret
    FWD_AFTER_IRQ

// vCPU 1 in the SGI round trip: answer the bench SGI, first thing.
.balign 2048
.global bench_sgi1_vectors
bench_sgi1_vectors:
    FWD_BEFORE_IRQ
    .balign 0x80
    mrs     x11, S3_0_C12_C12_0     // ICC_IAR1_EL1
    cmp     x11, #{sgi}
    b.ne    4f
    msr     S3_0_C12_C11_5, x12     // ICC_SGI1R_EL1: the answer
    msr     S3_0_C12_C12_1, x11     // ICC_EOIR1_EL1
    eret
4:  msr     S3_0_C12_C12_1, x11     // ICC_EOIR1_EL1
    cmp     x11, #{off_sgi}
    b.eq    bench_cpu_off           // the bench is done with this vCPU
    eret
    FWD_AFTER_IRQ

// u64 bench_loadput_loop(u64 iterations, u64 entry, u64 sgi1r, u64 *retries):
// ticks of `iterations` round trips: PSCI CPU_ON of vCPU 1 (MPIDR 1) at
// `entry` with context `sgi1r` (vCPU 1's answer to vCPU 0), then WFI with
// IRQs masked until the answer is pending, acknowledged from ICC_IAR1_EL1.
// A CPU_ON refused with ALREADY_ON or ON_PENDING (vCPU 1 not off yet) is
// retried and counted; any other refusal ends the loop, returning
// u64::MAX. SMCCC lets the callee clobber x0-x17: the loop state lives in
// x19-x24.
.global bench_loadput_loop
bench_loadput_loop:
    stp     x19, x20, [sp, #-48]!
    stp     x21, x22, [sp, #16]
    stp     x23, x24, [sp, #32]
    mov     x19, x0
    mov     x20, x1
    mov     x21, x2
    mov     x22, x3
    mov     x23, #0
    msr     daifset, #2
    isb
    mrs     x24, cntvct_el0
1:  ldr     x0, ={cpu_on}
    mov     x1, #1
    mov     x2, x20
    mov     x3, x21
    hvc     #0
    cbnz    x0, 3f
2:  wfi
    mrs     x0, S3_0_C12_C12_0      // ICC_IAR1_EL1
    cmp     x0, #1020
    b.hs    2b                      // nothing pending: a spurious wake
    msr     S3_0_C12_C12_1, x0      // ICC_EOIR1_EL1
    subs    x19, x19, #1
    b.ne    1b
    isb
    mrs     x0, cntvct_el0
    sub     x0, x0, x24
6:  str     x23, [x22]
    ldp     x23, x24, [sp, #32]
    ldp     x21, x22, [sp, #16]
    ldp     x19, x20, [sp], #48
    ret
3:  cmn     x0, #{already_on}
    b.eq    4f
    cmn     x0, #{on_pending}
    b.ne    5f
4:  add     x23, x23, #1
    b       1b
5:  mov     x0, #-1
    b       6b

// vCPU 1's PSCI CPU_ON entry in the load/put loop (x0 = context = the SGI
// to vCPU 0): answer, then switch off. Nothing else: the round trip is the
// hypervisor's load and put.
.global bench_loadput_entry
bench_loadput_entry:
    msr     S3_0_C12_C11_5, x0      // ICC_SGI1R_EL1
bench_cpu_off:
    ldr     x0, ={cpu_off}
    hvc     #0
5:  wfe                             // CPU_OFF does not return on success
    b       5b

// u64 bench_scale_gicr(u64 sgi_frame, u64 end): until CNTVCT_EL0 >= end,
// enable and disable PPI 27 (the virtual timer) in the redistributor SGI
// frame at `sgi_frame`: GICR_ISENABLER0 then GICR_ICENABLER0, each a
// trapped write whose enable change the hypervisor applies to its own
// redistributor (hv::irqchip::change_percpu_state). Returns the writes.
.global bench_scale_gicr
bench_scale_gicr:
    mov     x3, #0
    mov     w4, #(1 << {vtimer})
1:  str     w4, [x0, #{isenabler0}]
    str     w4, [x0, #{icenabler0}]
    add     x3, x3, #2
    mrs     x5, cntvct_el0
    cmp     x5, x1
    b.lo    1b
    mov     x0, x3
    ret

// u64 bench_scale_hvc(u64 end): HVC PSCI_VERSION, two per iteration, until
// CNTVCT_EL0 >= end; returns the calls. State in x19/x20 (SMCCC clobbers
// x0-x17).
.global bench_scale_hvc
bench_scale_hvc:
    stp     x19, x20, [sp, #-16]!
    mov     x19, x0
    mov     x20, #0
1:  mov     w0, #{psci_version}
    hvc     #0
    mov     w0, #{psci_version}
    hvc     #0
    add     x20, x20, #2
    mrs     x1, cntvct_el0
    cmp     x1, x19
    b.lo    1b
    mov     x0, x20
    ldp     x19, x20, [sp], #16
    ret

// PSCI CPU_ON entry of vCPU 1 in the scaling mode: x0 = its job; the
// secondary stack (no other bench runs in this mode), the main vectors,
// Rust.
.global bench_scale_entry
bench_scale_entry:
    msr     daifset, #0xf
    adrp    x1, bench_secondary_stack_top
    add     x1, x1, :lo12:bench_secondary_stack_top
    mov     sp, x1
    adrp    x1, exception_vectors
    add     x1, x1, :lo12:exception_vectors
    msr     vbar_el1, x1
    isb
    bl      {scale_secondary}
6:  wfe
    b       6b

.section .bss.bench_secondary_stack, "aw", %nobits
.balign 16
bench_secondary_stack:
    .space  16384
bench_secondary_stack_top:
"#,
    psci_version = const PSCI_VERSION,
    sgi = const BENCH_SGI,
    off_sgi = const OFF_SGI,
    cpu_on = const CPU_ON_64,
    already_on = const 4,
    on_pending = const 5,
    cpu_off = const CPU_OFF,
    secondary_main = sym secondary_main,
    scale_secondary = sym scale_secondary,
    vtimer = const PPI_VTIMER,
    isenabler0 = const GICR_SGI_FRAME_ISENABLER0,
    icenabler0 = const GICR_SGI_FRAME_ICENABLER0,
);

extern "C" {
    fn bench_hvc_loop(iterations: u64) -> u64;
    fn bench_mmio_read_loop(addr: u64, iterations: u64) -> u64;
    fn bench_vtimer_trial(entry: u64, ahead: u64, out: *mut [u64; 4]);
    fn bench_sgi_loop(iterations: u64, sgi1r: u64) -> u64;
    fn bench_sgi_responder(sgi1r: u64) -> !;
    fn bench_loadput_loop(iterations: u64, entry: u64, sgi1r: u64, retries: *mut u64) -> u64;
    fn bench_loadput_entry();
    fn bench_scale_gicr(sgi_frame: u64, end: u64) -> u64;
    fn bench_scale_hvc(end: u64) -> u64;
    fn bench_scale_entry();
    // Code addresses only, never called from Rust.
    fn bench_vtimer_handler();
    fn bench_secondary_entry();
    fn bench_vtimer_vectors();
    fn bench_sgi0_vectors();
    fn bench_sgi1_vectors();
}

pub(crate) fn addr_of_code(f: unsafe extern "C" fn()) -> u64 {
    f as usize as u64
}

/// Set by vCPU 1 once it can answer SGIs.
static SECONDARY_READY: AtomicU64 = AtomicU64::new(0);

/// Runs every bench and prints its line.
pub fn run(env: &Env) {
    let (cntfrq, _) = crate::counter();
    println!(
        "PROBE bench env: mode={} psci={} cntfrq={cntfrq} mpidr=0x{:x}",
        if env.bare { "bare" } else { "partition" },
        env.conduit.name(),
        mpidr()
    );
    boot_stamp(env);
    gic_dist_init();
    gic_cpu_init(0, &[]);
    if env.msi_only {
        for row in ["hvc", "gicd", "vtimer", "sgi", "loadput"] {
            println!(
                "PROBE bench {row}: skipped (bootargs {}: the MSI bench only)",
                crate::MSI_BOOTARG
            );
        }
    } else {
        hvc(env);
        gicd();
        vtimer();
        let secondary_up = sgi(env);
        loadput(env, secondary_up);
    }
    match &env.msi {
        Ok(target) => crate::msi::run(Some(target), ""),
        Err(why) => crate::msi::run(None, why),
    }
    println!("PROBE bench end");
}

/// `PROBE bench boot:`: the counter at entry and CNTVOFF (CNTPCT - CNTVCT),
/// so the xtask can turn the stamp into time since QEMU's reset.
fn boot_stamp(env: &Env) {
    match counter_offset() {
        Ok(offset) => println!(
            "PROBE bench boot: entry_cntvct={} cntvoff={offset}",
            env.entry_cntvct
        ),
        Err(why) => println!(
            "PROBE bench boot: entry_cntvct={} cntvoff=unknown ({why})",
            env.entry_cntvct
        ),
    }
}

/// CNTPCT_EL0 - CNTVCT_EL0, from a physical read between two virtual reads
/// that agree.
fn counter_offset() -> Result<u64, &'static str> {
    for _ in 0..8 {
        let ((v1, p, v2), fault) = crate::catching(|| {
            let (v1, p, v2): (u64, u64, u64);
            // SAFETY: counter reads; a trapped CNTPCT_EL0 read is caught by
            // the exception handler, which skips it.
            unsafe {
                asm!("isb", "mrs {v1}, cntvct_el0", "mrs {p}, cntpct_el0", "mrs {v2}, cntvct_el0",
                     v1 = out(reg) v1, p = out(reg) p, v2 = out(reg) v2, options(nomem, nostack))
            };
            (v1, p, v2)
        });
        if fault.is_some() {
            return Err("CNTPCT_EL0 not readable at EL1");
        }
        if v1 == v2 {
            return Ok(p.wrapping_sub(v1));
        }
    }
    Err("the counter moved between every pair of reads: not under icount?")
}

fn hvc(env: &Env) {
    if env.conduit != Conduit::Hvc {
        return println!(
            "PROBE bench hvc: skipped (PSCI conduit is {}, not hvc)",
            env.conduit.name()
        );
    }
    match crate::smccc(false, PSCI_VERSION, 0, 0, 0) {
        Ok(v) if v as u32 as i32 > 0 => {}
        Ok(v) => {
            return println!(
                "PROBE bench hvc: skipped (PSCI_VERSION -> {})",
                v as u32 as i32
            )
        }
        Err(f) => return println!("PROBE bench hvc: skipped (HVC raised {f})"),
    }
    // SAFETY: PSCI_VERSION over HVC was just answered; the loop clobbers
    // only caller-saved registers and restores x19/x20.
    let ticks = unsafe { bench_hvc_loop(LOOP_ITERATIONS) };
    println!("PROBE bench hvc: iterations={LOOP_ITERATIONS} ticks={ticks} loop_insns=4");
}

fn gicd() {
    // SAFETY: GICD_TYPER is a read-only register of the GIC distributor
    // (QEMU's, or the partition's emulated one); the load changes nothing.
    let ticks = unsafe { bench_mmio_read_loop(GUEST_GICD_BASE + GICD_TYPER, LOOP_ITERATIONS) };
    println!("PROBE bench gicd: iterations={LOOP_ITERATIONS} ticks={ticks} loop_insns=3");
}

fn vtimer() {
    gic_enable(0, PPI_VTIMER, true);
    set_vbar(addr_of_code(bench_vtimer_vectors));
    let handler = addr_of_code(bench_vtimer_handler);
    let (mut handler_ticks, mut back_ticks, mut trials, mut bad) = (0u64, 0u64, 0u64, 0u64);
    let mut first_bad = [0u64; 4];
    for _ in 0..VTIMER_ROUNDS {
        for d in 0..DITHER {
            let mut out = [0u64; 4];
            // SAFETY: the trial programs this CPU's virtual timer and takes
            // its interrupt through bench_vtimer_vectors (installed above),
            // whose handler clobbers only x9-x13 (caller-saved) and returns
            // to the trial; `handler - 4 * d` lies inside the nop sled.
            unsafe { bench_vtimer_trial(handler - 4 * d, VTIMER_AHEAD_TICKS, &mut out) };
            let [cval, at_handler, back, intid] = out;
            // Under icount the stamps are a few hundred instructions past
            // CVAL; without it (a test boot) they are host time, long, and
            // meaningless, but still ordered.
            let ok = intid & 0xff_ffff == u64::from(PPI_VTIMER)
                && at_handler >= cval
                && back >= at_handler;
            if ok {
                handler_ticks += at_handler - cval;
                back_ticks += back - cval;
                trials += 1;
            } else {
                if bad == 0 {
                    first_bad = out;
                }
                bad += 1;
            }
        }
    }
    set_vbar(addr_of_code(crate::exception_vectors));
    gic_enable(0, PPI_VTIMER, false);
    if bad == 0 {
        println!(
            "PROBE bench vtimer: trials={trials} dither={DITHER} ahead={VTIMER_AHEAD_TICKS} \
             handler_ticks={handler_ticks} back_ticks={back_ticks}"
        );
    } else {
        let [cval, at_handler, back, intid] = first_bad;
        println!(
            "PROBE bench vtimer: skipped ({bad} bad trials; first: CVAL={cval} handler={at_handler} \
             back={back} INTID={intid})"
        );
    }
}

/// The SGI round trips; returns whether vCPU 1 was started (and answers
/// SGIs).
fn sgi(env: &Env) -> bool {
    if env.conduit == Conduit::None {
        println!("PROBE bench sgi: skipped (no PSCI conduit to start vCPU 1)");
        return false;
    }
    let entry = addr_of_code(bench_secondary_entry);
    match crate::smccc(env.conduit == Conduit::Smc, CPU_ON_64, 1, entry, 0) {
        Ok(0) => {}
        Ok(r) => {
            println!(
                "PROBE bench sgi: skipped (CPU_ON MPIDR 1 -> {}: one vCPU)",
                r as i64
            );
            return false;
        }
        Err(f) => {
            println!("PROBE bench sgi: skipped (CPU_ON raised {f})");
            return false;
        }
    }
    let ready = (0..SECONDARY_WAIT).any(|_| {
        if SECONDARY_READY.load(Ordering::Acquire) != 0 {
            return true;
        }
        // SAFETY: `wfe` only waits (under QEMU it yields to the other CPUs).
        unsafe { asm!("wfe", options(nomem, nostack)) };
        false
    });
    if !ready {
        println!("PROBE bench sgi: skipped (vCPU 1 did not come up)");
        return true;
    }
    gic_enable(0, BENCH_SGI, true);
    set_vbar(addr_of_code(bench_sgi0_vectors));
    let to_vcpu1 = sgi1r(BENCH_SGI, 1);
    // SAFETY: vCPU 1 answers every bench SGI (it is up, SECONDARY_READY);
    // the answer is taken through bench_sgi0_vectors, whose handler
    // clobbers only x3 and x11 (caller-saved) and counts in x3.
    let ticks = unsafe {
        bench_sgi_loop(SGI_WARMUP, to_vcpu1);
        bench_sgi_loop(SGI_ITERATIONS, to_vcpu1)
    };
    set_vbar(addr_of_code(crate::exception_vectors));
    gic_enable(0, BENCH_SGI, false);
    println!(
        "PROBE bench sgi: iterations={SGI_ITERATIONS} ticks={ticks} method=wfi-both sgi={BENCH_SGI}"
    );
    true
}

/// `PROBE bench loadput:` CPU_ON -> CPU_OFF round trips of vCPU 1 (one
/// load and one put each in a partition), after switching off the SGI
/// responder if `secondary_up`.
fn loadput(env: &Env, secondary_up: bool) {
    if env.conduit != Conduit::Hvc {
        return println!(
            "PROBE bench loadput: skipped (PSCI conduit is {}, not hvc)",
            env.conduit.name()
        );
    }
    if secondary_up {
        // SAFETY: ICC_SGI1R_EL1 (SGI 4 to vCPU 1, whose handler calls
        // CPU_OFF); it changes no memory.
        unsafe {
            asm!("msr S3_0_C12_C11_5, {}", "isb", in(reg) sgi1r(OFF_SGI, 1), options(nostack))
        };
    }
    let mut state = None;
    for _ in 0..OFF_WAIT {
        state = crate::smccc(false, AFFINITY_INFO_64, 1, 0, 0).ok();
        match state {
            Some(AFFINITY_OFF) => break,
            Some(AFFINITY_ON | AFFINITY_ON_PENDING) => {}
            // No vCPU 1 (one vCPU) or no AFFINITY_INFO: nothing to wait for.
            _ => break,
        }
        // SAFETY: `wfe` only waits (under QEMU it yields to the other CPUs).
        unsafe { asm!("wfe", options(nomem, nostack)) };
    }
    match state {
        Some(AFFINITY_OFF) => {}
        Some(AFFINITY_ON | AFFINITY_ON_PENDING) => {
            return println!("PROBE bench loadput: skipped (vCPU 1 did not switch off)")
        }
        Some(r) => {
            return println!(
                "PROBE bench loadput: skipped (AFFINITY_INFO MPIDR 1 -> {}: one vCPU)",
                r as i64
            )
        }
        None => return println!("PROBE bench loadput: skipped (AFFINITY_INFO raised a fault)"),
    }
    gic_enable(0, BENCH_SGI, true);
    let entry = addr_of_code(bench_loadput_entry);
    let answer = sgi1r(BENCH_SGI, 0);
    let (mut warm_retries, mut retries) = (0u64, 0u64);
    // SAFETY: vCPU 1 is off; its entry only sends SGI 3 to vCPU 0 and
    // calls CPU_OFF. The loop keeps IRQs masked and clobbers only what
    // SMCCC allows; x19-x24 are restored.
    let ticks = unsafe {
        bench_loadput_loop(LOADPUT_WARMUP, entry, answer, &mut warm_retries);
        bench_loadput_loop(LOADPUT_ITERATIONS, entry, answer, &mut retries)
    };
    gic_enable(0, BENCH_SGI, false);
    if ticks == u64::MAX {
        return println!("PROBE bench loadput: skipped (CPU_ON of vCPU 1 refused)");
    }
    println!(
        "PROBE bench loadput: iterations={LOADPUT_ITERATIONS} warmup={LOADPUT_WARMUP} \
         ticks={ticks} retries={retries} warmup_retries={warm_retries} method=cpu_on-sgi-cpu_off"
    );
}

// AFFINITY_INFO results (PSCI DEN0022 5.1.7).
const AFFINITY_ON: u64 = 0;
const AFFINITY_OFF: u64 = 1;
const AFFINITY_ON_PENDING: u64 = 2;

/// vCPU 1's Rust entry (from bench_secondary_entry): its redistributor and
/// CPU interface, then it answers SGIs forever.
extern "C" fn secondary_main() -> ! {
    let index = mpidr() & 0xff;
    gic_cpu_init(index, &[BENCH_SGI, OFF_SGI]);
    set_vbar(addr_of_code(bench_sgi1_vectors));
    SECONDARY_READY.store(1, Ordering::Release);
    // SAFETY: the vectors that answer are installed; the responder never
    // returns and uses only registers of its own.
    unsafe { bench_sgi_responder(sgi1r(BENCH_SGI, 0)) }
}

fn mpidr() -> u64 {
    let v: u64;
    // SAFETY: reading MPIDR_EL1 has no side effects.
    unsafe { asm!("mrs {}, mpidr_el1", out(reg) v, options(nomem, nostack)) };
    v
}

pub(crate) fn set_vbar(table: u64) {
    // SAFETY: `table` is one of this image's 2 KiB-aligned vector tables,
    // each of which handles every exception kind.
    unsafe { asm!("msr vbar_el1, {}", "isb", in(reg) table, options(nostack)) };
}

// --- GIC set-up (the same calls bare and in a partition) ---------------------

fn gic_in_range(addr: u64) -> bool {
    let gicr_end = GUEST_GICR_BASE + 2 * GICR_STRIDE;
    (GUEST_GICD_BASE..GUEST_GICD_BASE + 0x1_0000).contains(&addr)
        || (GUEST_GICR_BASE..gicr_end).contains(&addr)
}

fn gic_read32(addr: u64) -> u32 {
    debug_assert!(gic_in_range(addr) && addr.is_multiple_of(4));
    // SAFETY: an aligned register of the GIC distributor or of vCPU 0/1's
    // redistributor (QEMU's or the partition's emulated one); with the MMU
    // off it is Device memory aliasing no Rust object.
    unsafe { core::ptr::read_volatile(addr as *const u32) }
}

fn gic_write32(addr: u64, value: u32) {
    debug_assert!(gic_in_range(addr) && addr.is_multiple_of(4));
    // SAFETY: as for `gic_read32`.
    unsafe { core::ptr::write_volatile(addr as *mut u32, value) };
}

fn wait_clear(addr: u64, mask: u32) {
    for _ in 0..POLL_LIMIT {
        if gic_read32(addr) & mask == 0 {
            return;
        }
    }
}

/// The distributor, as Linux's gic_dist_init: disabled, affinity routing
/// on, then the groups enabled (bare, QEMU's GIC needs it for SGIs and PPIs
/// to be forwarded at all).
fn gic_dist_init() {
    let ctlr = GUEST_GICD_BASE + GICD_CTLR;
    gic_write32(ctlr, 0);
    wait_clear(ctlr, GICD_CTLR_RWP);
    gic_write32(ctlr, GICD_CTLR_ARE);
    wait_clear(ctlr, GICD_CTLR_RWP);
    gic_write32(ctlr, GICD_CTLR_ARE | GICD_CTLR_ENABLES);
    wait_clear(ctlr, GICD_CTLR_RWP);
}

fn sgi_frame(index: u64) -> u64 {
    GUEST_GICR_BASE + index * GICR_STRIDE + GICR_SGI_FRAME
}

/// vCPU `index`'s redistributor (woken, everything Group 1, `enable`
/// enabled at BENCH_PRIORITY) and this CPU's interface (system registers,
/// all priorities unmasked, Group 1 on).
fn gic_cpu_init(index: u64, enable: &[u32]) {
    let rd = GUEST_GICR_BASE + index * GICR_STRIDE;
    let waker = gic_read32(rd + GICR_WAKER);
    gic_write32(rd + GICR_WAKER, waker & !GICR_WAKER_PROCESSOR_SLEEP);
    wait_clear(rd + GICR_WAKER, GICR_WAKER_CHILDREN_ASLEEP);
    gic_write32(sgi_frame(index) + GICR_IGROUPR0, u32::MAX);
    for &intid in enable {
        gic_enable(index, intid, true);
    }
    // SAFETY: GIC CPU interface system registers at EL1 (ICC_SRE_EL1.SRE,
    // ICC_PMR_EL1, ICC_IGRPEN1_EL1); they change no memory, and every IRQ
    // stays masked in PSTATE until a bench unmasks it.
    unsafe {
        asm!(
            "mrs {t}, S3_0_C12_C12_5",
            "orr {t}, {t}, #1",
            "msr S3_0_C12_C12_5, {t}",
            "isb",
            "mov {t}, #0xff",
            "msr S3_0_C4_C6_0, {t}",
            "mov {t}, #1",
            "msr S3_0_C12_C12_7, {t}",
            "isb",
            t = out(reg) _,
            options(nostack)
        )
    };
}

/// Enables (priority BENCH_PRIORITY) or disables SGI/PPI `intid` in vCPU
/// `index`'s redistributor.
fn gic_enable(index: u64, intid: u32, on: bool) {
    let frame = sgi_frame(index);
    if on {
        let reg = frame + GICR_IPRIORITYR0 + u64::from(intid / 4 * 4);
        let shift = 8 * (intid % 4);
        let old = gic_read32(reg);
        gic_write32(reg, old & !(0xff << shift) | BENCH_PRIORITY << shift);
        gic_write32(frame + GICR_ISENABLER0, 1 << intid);
    } else {
        gic_write32(frame + GICR_ICENABLER0, 1 << intid);
    }
}

// --- Scaling mode (bootargs `pinfold-bench=scale`) ---------------------------

/// Rounds of every (exit, N) measurement, interleaved.
const SCALE_ROUNDS: u64 = 3;
/// Each measurement's stretch of the guest counter: 1/5 s.
const SCALE_WINDOW_DIVISOR: u64 = 5;
/// How long before the window opens its start is set: enough for vCPU 1 to
/// be started and reach its loop on a busy host (1/10 s). A vCPU that still
/// arrives late reports by how much (`late1=`), and the xtask counts its
/// rate over the part of the window it ran.
const SCALE_LEAD_DIVISOR: u64 = 10;

/// The exits the scaling loops make.
#[derive(Clone, Copy, PartialEq, Eq)]
#[repr(u64)]
enum ScaleExit {
    /// Trapped GICR_ISENABLER0/ICENABLER0 writes of PPI 27: each changes
    /// the timer PPI's enable state on the vCPU's own CPU.
    Gicr = 0,
    /// HVC PSCI_VERSION: a trap that changes no interrupt state (control).
    Hvc = 1,
}

impl ScaleExit {
    fn name(self) -> &'static str {
        match self {
            ScaleExit::Gicr => "gicr",
            ScaleExit::Hvc => "hvc",
        }
    }
}

/// What vCPU 1 runs in a two-vCPU measurement (shared with vCPU 0; every
/// field is read or written with plain loads and stores, ordered by the
/// `done` flag).
#[repr(C)]
struct ScaleJob {
    exit: AtomicU64,
    start: AtomicU64,
    end: AtomicU64,
    count: AtomicU64,
    /// CNTVCT_EL0 when vCPU 1 reached the window's start.
    reached: AtomicU64,
    done: AtomicU64,
}

static SCALE_JOB: ScaleJob = ScaleJob {
    exit: AtomicU64::new(0),
    start: AtomicU64::new(0),
    end: AtomicU64::new(0),
    count: AtomicU64::new(0),
    reached: AtomicU64::new(0),
    done: AtomicU64::new(0),
};

fn cntvct() -> u64 {
    let v: u64;
    // SAFETY: reads the virtual counter; no side effects.
    unsafe { asm!("isb", "mrs {}, cntvct_el0", out(reg) v, options(nomem, nostack)) };
    v
}

/// Waits for the window's start, then makes `exit` exits until its end;
/// returns (exits, counter when the start was seen).
fn scale_window(exit: ScaleExit, vcpu: u64, start: u64, end: u64) -> (u64, u64) {
    let reached = loop {
        let now = cntvct();
        if now >= start {
            break now;
        }
        core::hint::spin_loop();
    };
    // SAFETY: the loops write only this vCPU's own redistributor SGI frame
    // (PPI 27, whose timer stays off) or make HVC PSCI_VERSION calls; they
    // clobber only caller-saved registers and restore x19/x20.
    let count = unsafe {
        match exit {
            ScaleExit::Gicr => bench_scale_gicr(sgi_frame(vcpu), end),
            ScaleExit::Hvc => bench_scale_hvc(end),
        }
    };
    (count, reached)
}

/// The scaling mode: for each round, each exit, N = 1 (vCPU 0 alone, vCPU 1
/// off) and N = 2 (vCPU 1 started with PSCI CPU_ON for the window and
/// switched off after), one `PROBE scale <exit>: n=.. round=.. ticks=..
/// vcpu0=.. [vcpu1=.. late1=..]` line; counts are exits, `ticks` the
/// window in counter ticks (CNTFRQ in the env line). Under multi-threaded
/// TCG without icount the counter follows the host's clock: wall clock.
/// The hang mode (bootargs `pinfold.hang`): the virtual timer's interrupt
/// enabled in the GIC, the timer armed to fire at once, then a spin with
/// IRQs masked in PSTATE: the timer interrupt stays pending and
/// unacknowledged, as in a guest kernel spinning with interrupts off (the
/// hypervisor's hung-vCPU check, docs/ARCHITECTURE.md).
pub fn hang() -> ! {
    gic_dist_init();
    gic_cpu_init(0, &[PPI_VTIMER]);
    // SAFETY: masks IRQs (they stay masked: nothing is taken from here
    // on) and programs this CPU's own virtual timer.
    unsafe {
        asm!(
            "msr daifset, #2",
            "isb",
            "mrs {t}, cntvct_el0",
            "msr cntv_cval_el0, {t}",
            "mov {t}, #1",
            "msr cntv_ctl_el0, {t}",
            "isb",
            t = out(reg) _,
            options(nostack)
        )
    };
    println!("PROBE hang: interrupts masked, virtual timer armed; spinning");
    loop {
        core::hint::spin_loop();
    }
}

pub fn scale(env: &Env) {
    let (cntfrq, _) = crate::counter();
    let cntfrq = if cntfrq == 0 { 62_500_000 } else { cntfrq };
    let window = cntfrq / SCALE_WINDOW_DIVISOR;
    let lead = cntfrq / SCALE_LEAD_DIVISOR;
    println!(
        "PROBE scale env: cntfrq={cntfrq} window_ticks={window} rounds={SCALE_ROUNDS} \
         psci={}",
        env.conduit.name()
    );
    if env.conduit != Conduit::Hvc {
        println!("PROBE scale end: skipped (PSCI conduit is not hvc)");
        return;
    }
    silence_vtimer();
    let entry = addr_of_code(bench_scale_entry);
    let job = &SCALE_JOB as *const ScaleJob as u64;
    for round in 0..SCALE_ROUNDS {
        for exit in [ScaleExit::Gicr, ScaleExit::Hvc] {
            let start = cntvct() + lead;
            let (c0, _) = scale_window(exit, 0, start, start + window);
            println!(
                "PROBE scale {}: n=1 round={round} ticks={window} vcpu0={c0}",
                exit.name()
            );

            SCALE_JOB.exit.store(exit as u64, Ordering::Relaxed);
            let start = cntvct() + lead;
            SCALE_JOB.start.store(start, Ordering::Relaxed);
            SCALE_JOB.end.store(start + window, Ordering::Relaxed);
            SCALE_JOB.done.store(0, Ordering::Release);
            match crate::smccc(false, CPU_ON_64, 1, entry, job) {
                Ok(0) => {}
                Ok(r) => {
                    println!(
                        "PROBE scale end: skipped (CPU_ON MPIDR 1 -> {}: one vCPU)",
                        r as i64
                    );
                    return;
                }
                Err(f) => {
                    println!("PROBE scale end: skipped (CPU_ON raised {f})");
                    return;
                }
            }
            let (c0, _) = scale_window(exit, 0, start, start + window);
            while SCALE_JOB.done.load(Ordering::Acquire) == 0 {
                core::hint::spin_loop();
            }
            let c1 = SCALE_JOB.count.load(Ordering::Relaxed);
            let late = SCALE_JOB
                .reached
                .load(Ordering::Relaxed)
                .saturating_sub(start);
            // vCPU 1 switches itself off; wait until it is, for the next N = 1.
            while crate::smccc(false, AFFINITY_INFO_64, 1, 0, 0).ok() != Some(AFFINITY_OFF) {
                core::hint::spin_loop();
            }
            println!(
                "PROBE scale {}: n=2 round={round} ticks={window} vcpu0={c0} vcpu1={c1} \
                 late1={late}",
                exit.name()
            );
        }
    }
    println!("PROBE scale end");
}

/// The virtual timer off, so that enabling PPI 27 never makes it pending.
fn silence_vtimer() {
    // SAFETY: CNTV_CTL_EL0 = 0 (timer disabled); no memory is touched.
    unsafe { asm!("msr cntv_ctl_el0, xzr", "isb", options(nomem, nostack)) };
}

/// vCPU 1's Rust entry in the scaling mode (from bench_scale_entry): run
/// the job's window, report, switch off.
extern "C" fn scale_secondary(job: *const ScaleJob) -> ! {
    // SAFETY: vCPU 0 passed SCALE_JOB's address as the CPU_ON context.
    let job = unsafe { &*job };
    silence_vtimer();
    let exit = if job.exit.load(Ordering::Relaxed) == ScaleExit::Hvc as u64 {
        ScaleExit::Hvc
    } else {
        ScaleExit::Gicr
    };
    let (start, end) = (
        job.start.load(Ordering::Relaxed),
        job.end.load(Ordering::Relaxed),
    );
    let (count, reached) = scale_window(exit, 1, start, end);
    job.count.store(count, Ordering::Relaxed);
    job.reached.store(reached, Ordering::Relaxed);
    job.done.store(1, Ordering::Release);
    let _ = crate::smccc(false, CPU_OFF, 0, 0, 0);
    loop {
        // SAFETY: CPU_OFF does not return on success; `wfe` only waits.
        unsafe { asm!("wfe", options(nomem, nostack)) };
    }
}
