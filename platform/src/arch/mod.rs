//! aarch64 EL2 arch code: entry and vectors (assembly), system register
//! access, the EL2 stage-1 MMU, cache and TLB maintenance, firmware PSCI
//! calls and guest register frames. Everything that decides lives in
//! `pinfold-hv`; this module only touches the hardware.

pub mod mmu;
pub mod regs;

use core::arch::{asm, global_asm};

global_asm!(include_str!("entry.S"));
global_asm!(include_str!("vectors.S"));

/// Guest general purpose registers saved by the vectors (layout shared with
/// vectors.S: x0-x30, ELR_EL2, SPSR_EL2, pad).
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct GuestFrame {
    pub x: [u64; 31],
    pub elr: u64,
    pub spsr: u64,
    pub _pad: u64,
}

const _: () = assert!(core::mem::size_of::<GuestFrame>() == 272);

impl GuestFrame {
    /// Register `n` as an instruction names it (31 = xzr).
    pub fn reg(&self, n: u8) -> u64 {
        if n >= 31 {
            0
        } else {
            self.x[n as usize]
        }
    }

    pub fn set_reg(&mut self, n: u8, value: u64) {
        if n < 31 {
            self.x[n as usize] = value;
        }
    }
}

extern "C" {
    fn pinfold_enter_guest(frame: *const GuestFrame, stack_top: u64) -> !;
    fn pinfold_reset_stack_and_call(stack_top: u64, f: extern "C" fn() -> !) -> !;
    pub fn pinfold_secondary_entry();
    static __stacks: u8;
    static __image_start: u8;
    static __bss_end: u8;
    static __payload_start: u8;
    pub static pinfold_irq_site_guest: u32;
    pub static pinfold_irq_site_hv: u32;
}

pub const STACK_SIZE: u64 = 0x1_0000;
pub const MAX_CPUS: usize = 8;

/// Top of CPU `cpu`'s EL2 stack.
pub fn stack_top(cpu: usize) -> u64 {
    let base = core::ptr::addr_of!(__stacks) as u64;
    base + STACK_SIZE * (cpu as u64 + 1)
}

/// Enter the guest with `frame` on a fresh stack. Never returns: the next
/// exception from the guest starts on the same empty stack.
pub fn enter_guest(frame: &GuestFrame, cpu: usize) -> ! {
    // SAFETY: pinfold_enter_guest reads every register from the frame before
    // it writes anything, so the frame may live on the stack it abandons.
    unsafe { pinfold_enter_guest(frame, stack_top(cpu)) }
}

/// Drop everything on this CPU's stack and run `f` on it.
pub fn reset_stack_and_call(cpu: usize, f: extern "C" fn() -> !) -> ! {
    // SAFETY: nothing on the stack is referenced after the switch: `f` takes
    // no arguments and never returns.
    unsafe { pinfold_reset_stack_and_call(stack_top(cpu), f) }
}

/// (start, end of BSS, start of payload) of the loaded image.
pub fn image_bounds() -> (u64, u64) {
    (
        core::ptr::addr_of!(__image_start) as u64,
        core::ptr::addr_of!(__payload_start) as u64,
    )
}

pub fn secondary_entry_address() -> u64 {
    pinfold_secondary_entry as *const () as usize as u64
}

/// Clean the data cache to the point of coherency over `[start, start+len)`:
/// guests start with their MMU and caches off and must see what EL2 wrote.
pub fn clean_dcache_range(start: u64, len: u64) {
    let line = dcache_line();
    let mut addr = start & !(line - 1);
    while addr < start + len {
        // SAFETY: DC CVAC on an address mapped at EL2 only writes back data.
        unsafe { asm!("dc cvac, {}", in(reg) addr, options(nostack)) };
        addr += line;
    }
    // SAFETY: barrier only.
    unsafe { asm!("dsb sy", options(nostack)) };
}

/// Invalidate the data cache over a range (before reading memory that was
/// written with caches off).
pub fn invalidate_dcache_range(start: u64, len: u64) {
    let line = dcache_line();
    let mut addr = start & !(line - 1);
    while addr < start + len {
        // SAFETY: DC CIVAC cleans and invalidates; never loses data.
        unsafe { asm!("dc civac, {}", in(reg) addr, options(nostack)) };
        addr += line;
    }
    // SAFETY: barrier only.
    unsafe { asm!("dsb sy", options(nostack)) };
}

fn dcache_line() -> u64 {
    let ctr: u64;
    // SAFETY: CTR_EL0 is a read-only ID register.
    unsafe { asm!("mrs {}, ctr_el0", out(reg) ctr, options(nomem, nostack)) };
    4 << ((ctr >> 16) & 0xf)
}

/// Make freshly written instructions at `[start, start+len)` visible to
/// instruction fetch on every CPU (Arm ARM B2.2.5, concurrent modification).
pub fn sync_icache_range(start: u64, len: u64) {
    let ctr: u64;
    // SAFETY: CTR_EL0 is a read-only ID register.
    unsafe { asm!("mrs {}, ctr_el0", out(reg) ctr, options(nomem, nostack)) };
    let dline = 4 << ((ctr >> 16) & 0xf);
    let iline = 4 << (ctr & 0xf);
    let mut addr = start & !(dline - 1);
    while addr < start + len {
        // SAFETY: clean to the point of unification; no data is lost.
        unsafe { asm!("dc cvau, {}", in(reg) addr, options(nostack)) };
        addr += dline;
    }
    // SAFETY: barrier only.
    unsafe { asm!("dsb ish", options(nostack)) };
    let mut addr = start & !(iline - 1);
    while addr < start + len {
        // SAFETY: instruction cache invalidation by VA has no data effect.
        unsafe { asm!("ic ivau, {}", in(reg) addr, options(nostack)) };
        addr += iline;
    }
    // SAFETY: barriers only.
    unsafe { asm!("dsb ish", "isb", options(nostack)) };
}

/// Invalidate all stage-1 and stage-2 EL1&0 TLB entries of the current VMID
/// (VTTBR_EL2) on all CPUs of the inner shareable domain.
pub fn tlbi_current_vmid() {
    // SAFETY: TLB maintenance only.
    unsafe {
        asm!(
            "dsb ishst",
            "tlbi vmalls12e1is",
            "dsb ish",
            "isb",
            options(nostack)
        )
    };
}

/// Firmware PSCI call through SMC (SMCCC): returns x0.
pub fn firmware_smc(fid: u64, a1: u64, a2: u64, a3: u64) -> i64 {
    let ret: u64;
    // SAFETY: an SMCCC call; the firmware preserves x4-x17 per SMCCC 1.1+
    // and we declare x0-x3 clobbered.
    unsafe {
        asm!("smc #0", inout("x0") fid => ret, inout("x1") a1 => _, inout("x2") a2 => _,
             inout("x3") a3 => _, options(nostack))
    };
    ret as i64
}

/// Wait for an interrupt with IRQs masked, then let a pending one in.
pub fn wait_for_interrupt() {
    // SAFETY: WFI with PSTATE.I set wakes on any pending interrupt; the short
    // unmasked window lets the EL2 IRQ vector handle it.
    unsafe {
        asm!(
            "wfi",
            "msr daifclr, #2",
            "isb",
            "msr daifset, #2",
            options(nostack)
        )
    };
}

/// This CPU's MPIDR_EL1.
pub fn mpidr() -> u64 {
    use aarch64_cpu::registers::{Readable, MPIDR_EL1};
    MPIDR_EL1.get()
}

/// CNTPCT_EL0.
pub fn counter() -> u64 {
    use aarch64_cpu::registers::{Readable, CNTPCT_EL0};
    // SAFETY: ISB so the counter read is not speculated early.
    unsafe { asm!("isb", options(nostack)) };
    CNTPCT_EL0.get()
}

pub fn counter_frequency() -> u32 {
    use aarch64_cpu::registers::{Readable, CNTFRQ_EL0};
    CNTFRQ_EL0.get() as u32
}

/// Patch a runtime-constant call site (5 instruction words) and make the
/// new instructions visible to instruction fetch. Runs once, at boot, on the
/// boot CPU before interrupts are unmasked or other CPUs run.
pub fn patch_call_site(site: *const u32, words: &[u32; 5]) {
    let site = site as *mut u32;
    for (i, w) in words.iter().enumerate() {
        // SAFETY: `site` is one of the two call sites in vectors.S, five
        // words long, in the EL2 image which is mapped writable; no CPU is
        // executing it (IRQs are masked and secondaries not started).
        unsafe { site.add(i).write_volatile(*w) };
    }
    sync_icache_range(site as u64, 20);
}

/// The five words at a call site (for the debug print).
pub fn read_call_site(site: *const u32) -> [u32; 5] {
    let mut out = [0u32; 5];
    for (i, w) in out.iter_mut().enumerate() {
        // SAFETY: reading the image's own text.
        *w = unsafe { site.add(i).read_volatile() };
    }
    out
}
