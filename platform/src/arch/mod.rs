//! aarch64 EL2 arch code: entry and vectors (assembly), system register
//! access, the EL2 stage-1 MMU, cache and TLB maintenance, firmware PSCI
//! calls and guest register frames. Everything that decides lives in
//! `pinfold-hv`; this module only touches the hardware.

pub mod mmu;
pub mod regs;

use alloc::vec::Vec;
use core::arch::{asm, global_asm};

global_asm!(include_str!("entry.S"));
// The IRQ call sites: patched once at boot (runtime constant), or, with the
// `ablate-irq-fnptr` feature of `cargo xtask bench`, a load of a function
// pointer and `blr` (vectors.S, IRQ_CALL).
#[cfg(not(feature = "ablate-irq-fnptr"))]
global_asm!(".equ PINFOLD_IRQ_FNPTR, 0", include_str!("vectors.S"));
#[cfg(feature = "ablate-irq-fnptr")]
global_asm!(".equ PINFOLD_IRQ_FNPTR, 1", include_str!("vectors.S"));

/// Guest general purpose registers saved by the vectors: the core's
/// `GuestRegs` (layout shared with vectors.S: x0-x30, ELR_EL2, SPSR_EL2, pad).
pub use pinfold_hv::exit::GuestRegs as GuestFrame;

extern "C" {
    fn pinfold_enter_guest(frame: *const GuestFrame, stack_top: u64) -> !;
    fn pinfold_reset_stack_and_call(stack_top: u64, f: extern "C" fn() -> !) -> !;
    pub fn pinfold_secondary_entry();
    static __boot_stack: u8;
    static __image_start: u8;
    static __bss_end: u8;
    static __payload_start: u8;
    pub static pinfold_irq_site_guest: u32;
    pub static pinfold_irq_site_hv: u32;
    /// The synchronous guest entry's call (`bl pinfold_guest_sync`).
    pub static pinfold_sync_site_guest: u32;
    pub static pinfold_irq_veneer: u32;
}

pub const STACK_SIZE: u64 = 0x1_0000;

/// Where a secondary CPU finds its stack and index (x0 of its PSCI CPU_ON;
/// read by `pinfold_secondary_entry` in entry.S).
#[repr(C)]
struct SecondaryBoot {
    stack_top: u64,
    index: u64,
}

/// Top of each CPU's EL2 stack, and each secondary's boot record. The boot
/// CPU keeps the stack in the image (`__boot_stack`); the others get stacks
/// from host RAM sized to the CPU count, so the image does not grow with
/// the largest server.
static STACKS: spin::Once<(Vec<u64>, Vec<SecondaryBoot>)> = spin::Once::new();

/// Take stacks for `cpu_count` CPUs from `free` (the boot CPU `boot` keeps
/// its own). False if there is not enough memory.
pub fn alloc_stacks(
    free: &mut pinfold_hv::memmap::FreeMemory,
    cpu_count: usize,
    boot: usize,
) -> bool {
    let Some(base) = free.take_top(STACK_SIZE * cpu_count as u64, 4096) else {
        return false;
    };
    let boot_top = core::ptr::addr_of!(__boot_stack) as u64 + STACK_SIZE;
    let tops: Vec<u64> = (0..cpu_count)
        .map(|i| {
            if i == boot {
                boot_top
            } else {
                base + STACK_SIZE * (i as u64 + 1)
            }
        })
        .collect();
    let records = tops
        .iter()
        .enumerate()
        .map(|(i, &stack_top)| SecondaryBoot {
            stack_top,
            index: i as u64,
        })
        .collect();
    STACKS.call_once(|| (tops, records));
    true
}

/// Top of CPU `cpu`'s EL2 stack.
pub fn stack_top(cpu: usize) -> u64 {
    STACKS
        .get()
        .and_then(|(tops, _)| tops.get(cpu).copied())
        .unwrap_or(core::ptr::addr_of!(__boot_stack) as u64 + STACK_SIZE)
}

/// The context id CPU `cpu` is started with: its boot record's address.
pub fn secondary_context(cpu: usize) -> u64 {
    STACKS.get().and_then(|(_, r)| r.get(cpu)).map_or(0, |r| {
        let addr = r as *const SecondaryBoot as u64;
        clean_dcache_range(addr, core::mem::size_of::<SecondaryBoot>() as u64);
        addr
    })
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

/// Invalidate every instruction cache of the inner shareable domain (a
/// guest image was (re)loaded; the guest starts with its MMU off).
pub fn invalidate_icache_all() {
    // SAFETY: cache maintenance only.
    unsafe { asm!("dsb ish", "ic ialluis", "dsb ish", "isb", options(nostack)) };
}

/// The virtual CPU interface's reset state for a freshly loaded vCPU:
/// ICH_VMCR_EL2 and the active priority registers zero.
pub fn set_vgic_reset_state() {
    use pinfold_drivers::gicv3::sysreg as gic;
    gic::set_ich_vmcr_el2(0);
    gic::set_ich_ap0r0_el2(0);
    gic::set_ich_ap1r0_el2(0);
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

/// The exception level this code runs at (CurrentEL.EL).
pub fn current_el() -> u64 {
    use aarch64_cpu::registers::{CurrentEL, Readable};
    CurrentEL.read(CurrentEL::EL)
}

/// This CPU's MPIDR_EL1.
pub fn mpidr() -> u64 {
    use aarch64_cpu::registers::{Readable, MPIDR_EL1};
    MPIDR_EL1.get()
}

/// One RNDR read (FEAT_RNG): None when the generator reports failure
/// (NZCV.Z set). Only call it where `pinfold_hv::entropy::rndr_implemented`
/// said the CPU has it: RNDR is UNDEFINED otherwise.
pub fn rndr() -> Option<u64> {
    let value: u64;
    let ok: u64;
    // SAFETY: reads RNDR (S3_3_C2_C4_0) and the flags it sets; no memory.
    unsafe {
        asm!(
            "mrs {v}, S3_3_C2_C4_0",
            "cset {ok}, ne",
            v = out(reg) value,
            ok = out(reg) ok,
            options(nomem, nostack)
        )
    };
    (ok != 0).then_some(value)
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

/// Patch a runtime-constant call site (one instruction word, and the
/// veneer's five when the target is far) and make the new instructions
/// visible to instruction fetch. Runs once, at boot, on the boot CPU before
/// interrupts are unmasked or other CPUs run.
pub fn patch_call_site(site: *const u32, patch: &pinfold_hv::rtconst::CallSitePatch) {
    if let Some(words) = &patch.veneer {
        let veneer = core::ptr::addr_of!(pinfold_irq_veneer) as *mut u32;
        for (i, w) in words.iter().enumerate() {
            // SAFETY: the veneer in vectors.S is five words long, in the EL2
            // image which is mapped writable; no CPU executes it (IRQs are
            // masked and secondaries not started).
            unsafe { veneer.add(i).write_volatile(*w) };
        }
        sync_icache_range(veneer as u64, 20);
    }
    // SAFETY: `site` is one of the call sites in vectors.S, one word, in the
    // writable image; no CPU is executing it (as above).
    unsafe { (site as *mut u32).write_volatile(patch.site) };
    sync_icache_range(site as u64, 4);
}

/// The word at a call site and the veneer's words (for the boot check).
pub fn read_call_site(site: *const u32) -> (u32, [u32; pinfold_hv::rtconst::VENEER_WORDS]) {
    let veneer = core::ptr::addr_of!(pinfold_irq_veneer);
    let mut words = [0u32; pinfold_hv::rtconst::VENEER_WORDS];
    for (i, w) in words.iter_mut().enumerate() {
        // SAFETY: reading the image's own text.
        *w = unsafe { veneer.add(i).read_volatile() };
    }
    // SAFETY: as above.
    (unsafe { site.read_volatile() }, words)
}

/// Where the call sites' veneer is.
pub fn irq_veneer_address() -> u64 {
    core::ptr::addr_of!(pinfold_irq_veneer) as u64
}
