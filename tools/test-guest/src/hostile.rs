//! The hostile-guest suite (bootargs `pinfold-probe=hostile`): every attack
//! a partition can make on the hypervisor and its neighbours from EL1, each
//! a named check that prints `HOSTILE case <name>: pass|FAIL (...)`, then
//! `HOSTILE summary: N passed, M failed; expected hypervisor faults F`.
//!
//! F is what the hypervisor must have counted as this partition's faults
//! (`faults` of GET /api/v1/partitions/{name}) by then: every abort it
//! injected (a synchronous external abort, DFSC/IFSC 0x10, is only ever the
//! hypervisor's answer for an IPA with nothing behind it: stage 1 is off
//! here), plus the refusals it reports without an exception (an enable,
//! pend or activate of a foreign SPI, one per bit; an SGI with targets
//! outside the partition, one per write; CPU_ON of a foreign MPIDR or with
//! an entry point outside RAM; a write to the sibling's redistributor).
//! UNDEFINED instructions are the CPU's own here (EL2/EL3 registers, trace,
//! impdef): expected 0, so a hypervisor that trapped and refused one would
//! show in the count. The boot test (`cargo xtask test --only hostile`)
//! compares F with the API and checks that the Linux neighbour kept
//! printing with its RAM checksum intact; docs/SECURITY.md names each
//! attack and what stops it.
//!
//! It starts when a byte arrives on its console (the boot test sends one
//! through the API once the neighbour is up), or after 900 s.
//!
//! The suite never takes an interrupt except in `interrupt-storm`, so the
//! rest of it is also "a guest that never takes interrupts"; the sibling
//! vCPU it starts parks in `wfe` with everything masked for good.

use core::arch::asm;
use core::fmt::{self, Write};
use core::sync::atomic::{AtomicU64, Ordering};

use pinfold_vboard::fid;
use pinfold_vboard::{
    GICR_STRIDE, GUEST_GICD_BASE, GUEST_GICR_BASE, GUEST_GICR_REGION_SIZE, GUEST_GPIO_BASE,
    GUEST_UART_BASE,
};

use crate::{catching, park_cpu, probe_read, probe_write, ram_base, smccc, Fault};
use crate::{DEVICE_HOLE, FAR_AWAY, VECTOR_CUR_SPX_SYNC};

/// Exception classes (ESR_EL1.EC) the suite tells apart.
const EC_UNKNOWN: u64 = 0x00;
const EC_IABT_LOWER: u64 = 0x20;
const EC_IABT_CUR: u64 = 0x21;
const EC_DABT_LOWER: u64 = 0x24;
const EC_DABT_CUR: u64 = 0x25;
/// DFSC/IFSC: synchronous external abort, not on a table walk.
const FSC_SYNC_EXTERNAL: u64 = 0x10;

const PSCI_SUCCESS: i64 = 0;
const PSCI_NOT_SUPPORTED: i64 = -1;
const PSCI_INVALID_PARAMETERS: i64 = -2;
const PSCI_ALREADY_ON: i64 = -4;
const PSCI_ON_PENDING: i64 = -5;
const PSCI_INVALID_ADDRESS: i64 = -9;

// GICD (IHI0069 12.9).
const GICD_CTLR: u64 = 0x0000;
const GICD_ISENABLER: u64 = 0x0100;
const GICD_ICENABLER: u64 = 0x0180;
const GICD_ISPENDR: u64 = 0x0200;
const GICD_ICPENDR: u64 = 0x0280;
const GICD_ISACTIVER: u64 = 0x0300;
const GICD_ICACTIVER: u64 = 0x0380;
const GICD_IPRIORITYR: u64 = 0x0400;
const GICD_ICFGR: u64 = 0x0C00;
const GICD_IROUTER: u64 = 0x6000;
const GICD_SIZE: u64 = 0x1_0000;
const GICD_CTLR_ON: u32 = (1 << 4) | (1 << 1) | 1;
/// SPIs the partition sees: INTIDs 32..288 (GICD_TYPER.ITLinesNumber 8).
const SPI_WORDS: core::ops::Range<u64> = 1..9;
// GICR (IHI0069 12.10/12.11): RD_base, then SGI_base at +64 KiB.
const GICR_WAKER: u64 = 0x0014;
const SGI_BASE: u64 = 0x1_0000;
const GICR_ISENABLER0: u64 = SGI_BASE + 0x100;
const GICR_ICENABLER0: u64 = SGI_BASE + 0x180;
const GICR_IPRIORITYR: u64 = SGI_BASE + 0x400;
/// An SPI of the management partition's PCIe host bridge (INTA on QEMU
/// virt): its enable is the neighbour's state.
const MGMT_SPI: u32 = 35;
const PPI_VTIMER: u32 = 27;
/// Interrupts the storm takes before it masks the timer.
const STORM_IRQS: u64 = 2000;

/// Device windows of QEMU virt the partition is given nothing at: flash,
/// the host's GICv2 CPU interface / GICV / GICH / ITS frames, RTC, fw_cfg,
/// host GPIO, virtio-mmio,
/// platform bus, the PCIe MMIO, PIO and ECAM windows (the management
/// partition's), the high ECAM and high MMIO windows.
const DEVICE_WINDOWS: [u64; 16] = [
    0x0000_0000,
    0x0400_0000,
    0x0801_0000,
    0x0803_0000,
    0x0804_0000,
    0x0808_0000,
    0x0809_0000,
    0x0901_0000,
    0x0902_0000,
    0x0903_0000,
    0x0a00_0000,
    0x0c00_0000,
    0x1000_0000,
    0x3eff_0000,
    0x3f00_0000,
    0x40_1000_0000,
];

/// A short note, truncated at its size (no allocator here).
struct Note {
    buf: [u8; 200],
    len: usize,
}

impl Note {
    const fn new() -> Self {
        Note {
            buf: [0; 200],
            len: 0,
        }
    }
    fn as_str(&self) -> &str {
        core::str::from_utf8(&self.buf[..self.len]).unwrap_or("?")
    }
}

impl Write for Note {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for &b in s.as_bytes() {
            if self.len < self.buf.len() {
                self.buf[self.len] = b;
                self.len += 1;
            }
        }
        Ok(())
    }
}

/// One named check: fails at the first thing that got through, counts the
/// hypervisor faults it caused.
struct Check {
    failed: bool,
    faults: u64,
    note: Note,
}

impl Check {
    fn fail(&mut self, args: fmt::Arguments) {
        if !self.failed {
            self.failed = true;
            self.note = Note::new();
            let _ = self.note.write_fmt(args);
        }
    }

    fn note(&mut self, args: fmt::Arguments) {
        if !self.failed {
            self.note = Note::new();
            let _ = self.note.write_fmt(args);
        }
    }

    /// Counts `f` when it is the hypervisor's injected abort.
    fn saw(&mut self, f: &Fault) {
        if hv_injected(f) {
            self.faults += 1;
        }
    }

    /// Refusals the hypervisor counts without an exception.
    fn refusals(&mut self, n: u64) {
        self.faults += n;
    }

    fn must_abort_read(&mut self, addr: u64) {
        match probe_read(addr) {
            Ok(v) => self.fail(format_args!("load at {addr:#x} returned {v:#x}")),
            Err(f) => self.saw(&f),
        }
    }

    fn must_abort_write(&mut self, addr: u64, value: u32) {
        match probe_write(addr, value) {
            Ok(()) => self.fail(format_args!("store at {addr:#x} completed")),
            Err(f) => self.saw(&f),
        }
    }

    /// A register or instruction only EL2/EL3 (or an absent feature) has:
    /// the CPU's own UNDEFINED, not a trap the hypervisor answers.
    fn must_undef<T: fmt::LowerHex>(&mut self, what: &str, r: Result<T, Fault>) {
        match r {
            Ok(v) => self.fail(format_args!("{what} answered {v:#x}")),
            Err(f) if f.esr >> 26 & 0x3f == EC_UNKNOWN => {}
            Err(f) => {
                self.saw(&f);
                self.fail(format_args!("{what} raised {f}, not UNDEFINED"));
            }
        }
    }

    /// Something that may trap or not, and is harmless either way; any
    /// abort is counted.
    fn tolerate<T>(&mut self, r: Result<T, Fault>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(f) => {
                self.saw(&f);
                None
            }
        }
    }

    /// An access that must complete (the partition's own device or RAM).
    fn must_work<T>(&mut self, what: fmt::Arguments, r: Result<T, Fault>) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(f) => {
                self.saw(&f);
                self.fail(format_args!("{what} raised {f}"));
                None
            }
        }
    }
}

fn hv_injected(f: &Fault) -> bool {
    let ec = f.esr >> 26 & 0x3f;
    f.kind == VECTOR_CUR_SPX_SYNC
        && matches!(
            ec,
            EC_IABT_LOWER | EC_IABT_CUR | EC_DABT_LOWER | EC_DABT_CUR
        )
        && f.esr & 0x3f == FSC_SYNC_EXTERNAL
}

/// The suite's running totals.
struct Suite {
    passed: u32,
    failed: u32,
    faults: u64,
}

impl Suite {
    fn case(&mut self, name: &str, f: impl FnOnce(&mut Check)) {
        let mut c = Check {
            failed: false,
            faults: 0,
            note: Note::new(),
        };
        f(&mut c);
        self.faults += c.faults;
        if c.failed {
            self.failed += 1;
            println!(
                "HOSTILE case {name}: FAIL ({}; hypervisor faults {})",
                c.note.as_str(),
                c.faults
            );
        } else {
            self.passed += 1;
            let sep = if c.note.len > 0 { "; " } else { "" };
            println!(
                "HOSTILE case {name}: pass (hypervisor faults {}{sep}{})",
                c.faults,
                c.note.as_str()
            );
        }
    }
}

// --- Raw accessors, each one instruction inside `catching` ------------------

fn read_width(addr: u64, width: u8) -> Result<u64, Fault> {
    let (v, f) = catching(|| {
        let v: u64;
        // SAFETY: a load from a device IPA or outside RAM, the probe itself;
        // one instruction (a caught abort resumes after it), no Rust memory.
        unsafe {
            match width {
                1 => {
                    asm!("mov {v}, #0", "ldrb {v:w}, [{a}]", a = in(reg) addr, v = out(reg) v, options(nostack, readonly))
                }
                2 => {
                    asm!("mov {v}, #0", "ldrh {v:w}, [{a}]", a = in(reg) addr, v = out(reg) v, options(nostack, readonly))
                }
                4 => {
                    asm!("mov {v}, #0", "ldr {v:w}, [{a}]", a = in(reg) addr, v = out(reg) v, options(nostack, readonly))
                }
                _ => {
                    asm!("mov {v}, #0", "ldr {v}, [{a}]", a = in(reg) addr, v = out(reg) v, options(nostack, readonly))
                }
            }
        }
        v
    });
    f.map_or(Ok(v), Err)
}

fn write_width(addr: u64, width: u8, value: u64) -> Result<(), Fault> {
    let ((), f) = catching(|| {
        // SAFETY: a store to a device IPA or outside RAM (no Rust object
        // there); one instruction.
        unsafe {
            match width {
                1 => {
                    asm!("strb {v:w}, [{a}]", a = in(reg) addr, v = in(reg) value, options(nostack))
                }
                2 => {
                    asm!("strh {v:w}, [{a}]", a = in(reg) addr, v = in(reg) value, options(nostack))
                }
                4 => {
                    asm!("str {v:w}, [{a}]", a = in(reg) addr, v = in(reg) value, options(nostack))
                }
                _ => asm!("str {v}, [{a}]", a = in(reg) addr, v = in(reg) value, options(nostack)),
            }
        }
    });
    f.map_or(Ok(()), Err)
}

/// The four ISV=0 forms (post-index load, pre-index store, load pair,
/// store pair): the hypervisor cannot emulate them and must say so.
fn isv0_forms(addr: u64) -> [Result<(), Fault>; 4] {
    let run = |form: u8| {
        let ((), f) = catching(|| {
            // SAFETY: writeback and pair forms at a device IPA (or outside
            // RAM); the base register is a scratch copy, and a caught abort
            // skips the one instruction.
            unsafe {
                let mut a = addr;
                match form {
                    0 => {
                        asm!("ldr {v:w}, [{a}], #4", a = inout(reg) a, v = out(reg) _, options(nostack))
                    }
                    1 => {
                        asm!("str {v:w}, [{a}, #0]!", a = inout(reg) a, v = in(reg) 0u64, options(nostack))
                    }
                    2 => {
                        asm!("ldp {v:w}, {u:w}, [{a}]", a = in(reg) a, v = out(reg) _, u = out(reg) _, options(nostack))
                    }
                    _ => {
                        asm!("stp {v:w}, {v:w}, [{a}]", a = in(reg) a, v = in(reg) 0u64, options(nostack))
                    }
                }
                core::hint::black_box(&mut a);
            }
        });
        f.map_or(Ok(()), Err)
    };
    [run(0), run(1), run(2), run(3)]
}

/// Branches to `addr` with a return address in x30; an instruction abort
/// there resumes at x30 (the handler's rule for EC 0x21).
fn exec_at(addr: u64) -> Result<(), Fault> {
    let ((), f) = catching(|| {
        // SAFETY: the target has nothing behind it, so nothing runs there:
        // the prefetch abort returns to the instruction after `blr`. x30 is
        // declared clobbered.
        unsafe { asm!("blr {a}", a = in(reg) addr, out("x30") _, options(nostack)) };
    });
    f.map_or(Ok(()), Err)
}

fn dc(op: u8, addr: u64) -> Result<(), Fault> {
    let ((), f) = catching(|| {
        // SAFETY: cache maintenance by address; changes no data we own.
        unsafe {
            match op {
                0 => asm!("dc civac, {a}", a = in(reg) addr, options(nostack)),
                1 => asm!("dc cvac, {a}", a = in(reg) addr, options(nostack)),
                2 => asm!("dc ivac, {a}", a = in(reg) addr, options(nostack)),
                _ => asm!("dc zva, {a}", a = in(reg) addr, options(nostack)),
            }
        }
    });
    f.map_or(Ok(()), Err)
}

fn hvc(function: u32, a1: u64, a2: u64, a3: u64) -> Result<i64, Fault> {
    smccc(false, function, a1, a2, a3).map(|r| r as i64)
}

fn counter() -> u64 {
    crate::counter().1
}

fn freq() -> u64 {
    match crate::counter().0 {
        0 => 62_500_000,
        f => f,
    }
}

macro_rules! try_mrs {
    ($reg:literal) => {
        probe_mrs!($reg)
    };
}
macro_rules! try_msr {
    ($reg:literal, $v:expr) => {
        probe_msr!($reg, $v).map_or(Ok(0u64), Err)
    };
}

// --- Interrupts: only the storm takes them ------------------------------------

static IRQS: AtomicU64 = AtomicU64::new(0);
static TIMER_IRQS: AtomicU64 = AtomicU64::new(0);

/// The IRQ vector's handler (current EL, SPx): acknowledge, count, end.
/// After `STORM_IRQS` timer interrupts it masks the timer at its source.
pub fn on_irq() {
    let intid: u64;
    // SAFETY: ICC_IAR1_EL1 (the virtual CPU interface) acknowledges.
    unsafe { asm!("mrs {}, S3_0_C12_C12_0", out(reg) intid, options(nomem, nostack)) };
    let intid = intid & 0xff_ffff;
    if intid >= 1020 {
        return;
    }
    IRQS.fetch_add(1, Ordering::Relaxed);
    if intid == u64::from(PPI_VTIMER)
        && TIMER_IRQS.fetch_add(1, Ordering::Relaxed) + 1 >= STORM_IRQS
    {
        // SAFETY: CNTV_CTL_EL0 = ENABLE | IMASK: the timer stops asserting.
        unsafe { asm!("msr cntv_ctl_el0, {}", "isb", in(reg) 3u64, options(nomem, nostack)) };
    }
    // SAFETY: ICC_EOIR1_EL1 (EOImode 0: drop and deactivate).
    unsafe { asm!("msr S3_0_C12_C12_1, {}", "isb", in(reg) intid, options(nomem, nostack)) };
}

fn set_vtimer(ctl: u64, cval: u64) {
    // SAFETY: the EL1 virtual timer is this vCPU's own.
    unsafe {
        asm!("msr cntv_cval_el0, {c}", "msr cntv_ctl_el0, {t}", "isb", c = in(reg) cval, t = in(reg) ctl,
             options(nomem, nostack))
    };
}

fn vtimer_ctl() -> u64 {
    let v: u64;
    // SAFETY: reading CNTV_CTL_EL0 has no side effects.
    unsafe { asm!("mrs {}, cntv_ctl_el0", out(reg) v, options(nomem, nostack)) };
    v
}

/// The partition's own GIC, as Linux sets it up: distributor on, the
/// redistributor awake, system registers on, all priorities unmasked.
fn gic_up(c: &mut Check) {
    let ctlr = GUEST_GICD_BASE + GICD_CTLR;
    c.must_work(format_args!("GICD_CTLR"), probe_write(ctlr, GICD_CTLR_ON));
    let waker = GUEST_GICR_BASE + GICR_WAKER;
    if let Some(w) = c.must_work(format_args!("GICR_WAKER"), probe_read(waker)) {
        c.must_work(format_args!("GICR_WAKER"), probe_write(waker, w & !2));
    }
    let sre = probe_mrs!("S3_0_C12_C12_5").unwrap_or(0);
    for f in [
        probe_msr!("S3_0_C12_C12_5", sre | 1),
        probe_msr!("S3_0_C4_C6_0", 0xff),
        probe_msr!("S3_0_C12_C12_7", 1),
    ]
    .into_iter()
    .flatten()
    {
        c.fail(format_args!("GIC system register setup raised {f}"));
    }
}

// --- The suite -------------------------------------------------------------------

/// How long the suite waits for its go byte before it starts anyway.
const GO_TIMEOUT_S: u64 = 900;

/// Waits for one byte of console input: the boot test sends it once the
/// Linux neighbour is up, so the attacks run while it runs.
fn wait_for_go() {
    const UARTFR_RXFE: u32 = 1 << 4;
    println!("HOSTILE waiting: any console byte starts the suite ({GO_TIMEOUT_S} s at most)");
    let deadline = counter() + GO_TIMEOUT_S * freq();
    while counter() < deadline {
        if probe_read(GUEST_UART_BASE + 0x18).is_ok_and(|fr| fr & UARTFR_RXFE == 0) {
            let _ = probe_read(GUEST_UART_BASE);
            return;
        }
        core::hint::spin_loop();
    }
    println!("HOSTILE waiting: no byte in {GO_TIMEOUT_S} s; starting anyway");
}

/// Runs every case; `ram_end` is the end of this partition's RAM (DTB).
pub fn run(ram_end: u64) {
    wait_for_go();
    println!("HOSTILE start: RAM {:#x}..{ram_end:#x}", ram_base());
    let mut s = Suite {
        passed: 0,
        failed: 0,
        faults: 0,
    };
    let t0 = counter();

    memory(&mut s, ram_end);
    gicd(&mut s);
    gicr(&mut s);
    sgis(&mut s);
    psci(&mut s, ram_end);
    smccc_ranges(&mut s, ram_end);
    sysregs(&mut s);
    storms(&mut s, ram_end);

    let secs = (counter() - t0) / freq();
    println!(
        "HOSTILE summary: {} passed, {} failed; expected hypervisor faults {} ({} s)",
        s.passed, s.failed, s.faults, secs
    );
}

fn memory(s: &mut Suite, ram_end: u64) {
    s.case("mem-below-ram", |c| {
        for a in [ram_base() - 4, ram_base() - 0x1000, ram_base() - (2 << 20)] {
            c.must_abort_read(a);
            c.must_abort_write(a, 0x484f_5354);
        }
    });
    s.case("mem-ram-end", |c| {
        c.must_work(format_args!("last word of RAM"), probe_read(ram_end - 4));
        for a in [
            ram_end,
            ram_end + 0xffc,
            ram_end + (2 << 20) - 4,
            ram_end + (64 << 20),
        ] {
            c.must_abort_read(a);
            c.must_abort_write(a, 0x484f_5354);
        }
    });
    s.case("mem-ipa-limits", |c| {
        // The top of the 40-bit IPA space, just past it, and addresses no
        // IPA size reaches: each must fault, whoever raises it.
        for a in [(1u64 << 40) - 8, 1 << 40, 1 << 44, 1 << 48, u64::MAX - 7] {
            match probe_read(a) {
                Ok(v) => c.fail(format_args!("load at {a:#x} returned {v:#x}")),
                Err(f) => c.saw(&f),
            }
        }
    });
    s.case("mem-other-partitions", |c| {
        // Host RAM is 0x4000_0000.. on QEMU virt: every other partition's
        // RAM and the hypervisor's are somewhere in the first 4 GiB of it.
        let mut a = ram_end;
        let mut n = 0;
        while a < 0x1_4000_0000 {
            c.must_abort_read(a);
            c.must_abort_write(a + 8, 0x484f_5354);
            a += 32 << 20;
            n += 1;
        }
        c.note(format_args!("{n} addresses up to 0x1_4000_0000"));
    });
    s.case("mem-hypervisor-image", |c| {
        // The hypervisor runs at the host's RAM base, which is this
        // partition's RAM base as an IPA (the plans this suite runs in give
        // it no PCI function): what is there must be ours (no arm64 Image
        // header of the hypervisor), and writable.
        let base = ram_base();
        let magic = probe_read(base + 0x38);
        if magic == Ok(0x644d_5241) {
            c.fail(format_args!(
                "the hypervisor's Image header is readable at IPA {base:#x}"
            ));
        }
        let a = ram_base() + 0x1000;
        c.must_work(format_args!("own RAM store"), probe_write(a, 0x5a5a_1234));
        if probe_read(a) != Ok(0x5a5a_1234) {
            c.fail(format_args!("own RAM at {a:#x} did not keep a store"));
        }
        for a in [0x4000_0000 + (1u64 << 31), 0xC000_0000 - 4] {
            c.must_abort_read(a);
        }
    });
    s.case("mem-gic-frames", |c| {
        // The host GIC's frames nobody is given, and redistributor frames
        // past this partition's two vCPUs up to the end of the region.
        for a in [
            0x0801_0000u64,
            0x0803_0000,
            0x0804_0000,
            0x0808_0000,
            0x0809_0000,
        ] {
            c.must_abort_read(a);
            c.must_abort_write(a, 0);
        }
        for a in [
            GUEST_GICR_BASE + 2 * GICR_STRIDE,
            GUEST_GICR_BASE + 2 * GICR_STRIDE + SGI_BASE,
            GUEST_GICR_BASE + 7 * GICR_STRIDE + 0x14,
            GUEST_GICR_BASE + GUEST_GICR_REGION_SIZE - 4,
        ] {
            c.must_abort_read(a);
            c.must_abort_write(a, 0);
        }
    });
    s.case("mem-device-windows", |c| {
        for a in DEVICE_WINDOWS {
            c.must_abort_read(a);
            c.must_abort_write(a + 0x10, 0xffff_ffff);
        }
        c.must_abort_read(DEVICE_HOLE + 0x20_0000);
        c.must_abort_read(0x80_0000_0000);
    });
    s.case("mem-exec-outside", |c| {
        for a in [ram_end, DEVICE_HOLE, 0, GUEST_GICD_BASE, FAR_AWAY] {
            match exec_at(a) {
                Ok(()) => c.fail(format_args!("a branch to {a:#x} came back without a fault")),
                Err(f) => c.saw(&f),
            }
        }
    });
    s.case("mem-isv0-outside", |c| {
        for a in [ram_end, DEVICE_HOLE] {
            for (i, r) in isv0_forms(a).into_iter().enumerate() {
                match r {
                    Ok(()) => c.fail(format_args!("ISV=0 form {i} at {a:#x} completed")),
                    Err(f) => c.saw(&f),
                }
            }
        }
    });
    s.case("mem-cache-maintenance-outside", |c| {
        // DC by VA outside RAM: an abort or nothing (QEMU does none), never
        // an effect on anyone else's memory.
        for a in [ram_end, DEVICE_HOLE, FAR_AWAY] {
            for op in 0..4 {
                c.tolerate(dc(op, a));
            }
        }
    });
}

/// Bits of GICD_IS*R word `n` (of the SPI words) this partition owns, as
/// GICD_ISENABLER reads them back after all ones were written.
/// Every other bit written is a refusal the hypervisor counts.
fn owned_words(c: &mut Check) -> [u32; 9] {
    let mut owned = [0u32; 9];
    for n in SPI_WORDS {
        let a = GUEST_GICD_BASE + GICD_ISENABLER + 4 * n;
        c.must_work(format_args!("GICD_ISENABLER{n}"), probe_write(a, u32::MAX));
        owned[n as usize] = c
            .must_work(format_args!("GICD_ISENABLER{n}"), probe_read(a))
            .unwrap_or(0);
        c.refusals(u64::from(32 - owned[n as usize].count_ones()));
    }
    owned
}

fn gicd(s: &mut Suite) {
    s.case("gicd-read-every-offset", |c| {
        let mut bad = 0;
        for off in (0..GICD_SIZE).step_by(4) {
            if c.tolerate(read_width(GUEST_GICD_BASE + off, 4)).is_none() {
                bad += 1;
            }
        }
        if bad > 0 {
            c.fail(format_args!("{bad} 32-bit reads faulted"));
        }
    });
    s.case("gicd-every-width", |c| {
        // 8/16-bit at every offset of the first 4 KiB (odd ones unaligned:
        // the CPU's own alignment fault), 64-bit at every 8 bytes.
        for off in 0..0x1000u64 {
            c.tolerate(read_width(GUEST_GICD_BASE + off, 1));
            c.tolerate(read_width(GUEST_GICD_BASE + off, 2));
        }
        for off in (0..GICD_SIZE).step_by(8) {
            c.tolerate(read_width(GUEST_GICD_BASE + off, 8));
        }
    });
    s.case("gicd-write-every-offset", |c| {
        for off in (0..GICD_SIZE).step_by(4) {
            c.tolerate(write_width(GUEST_GICD_BASE + off, 4, 0));
        }
        for off in (GICD_IPRIORITYR..0x800).step_by(1) {
            c.tolerate(write_width(GUEST_GICD_BASE + off, 1, 0));
        }
        for off in (0..0x1000u64).step_by(2) {
            c.tolerate(write_width(GUEST_GICD_BASE + off, 2, 0));
        }
        c.must_work(
            format_args!("GICD_CTLR"),
            probe_write(GUEST_GICD_BASE + GICD_CTLR, GICD_CTLR_ON),
        );
    });
    s.case("gicd-foreign-spi-enable", |c| {
        let owned = owned_words(c);
        let owned_n: u32 = owned.iter().map(|w| w.count_ones()).sum();
        // Word 0 (SGI/PPI) and words past the last SPI are RAZ/WI: no
        // refusal there.
        for n in (0..1).chain(9..32u64) {
            c.tolerate(probe_write(
                GUEST_GICD_BASE + GICD_ISENABLER + 4 * n,
                u32::MAX,
            ));
        }
        if owned[(MGMT_SPI / 32) as usize] & 1 << (MGMT_SPI % 32) != 0 {
            c.fail(format_args!(
                "the management partition's SPI {MGMT_SPI} reads as ours"
            ));
        }
        for n in 0..32u64 {
            c.tolerate(probe_write(
                GUEST_GICD_BASE + GICD_ICENABLER + 4 * n,
                u32::MAX,
            ));
        }
        c.note(format_args!("{owned_n} SPIs own (emulated devices)"));
    });
    s.case("gicd-foreign-spi-pend", |c| {
        let owned = owned_words(c);
        for n in SPI_WORDS {
            let foreign = !owned[n as usize];
            c.refusals(u64::from(foreign.count_ones()));
            c.tolerate(probe_write(GUEST_GICD_BASE + GICD_ISPENDR + 4 * n, foreign));
            if let Some(v) = c.tolerate(probe_read(GUEST_GICD_BASE + GICD_ISPENDR + 4 * n)) {
                if v & foreign != 0 {
                    c.fail(format_args!("GICD_ISPENDR{n} reads 0x{v:08x}"));
                }
            }
        }
        for n in 0..32u64 {
            c.tolerate(probe_write(
                GUEST_GICD_BASE + GICD_ICENABLER + 4 * n,
                u32::MAX,
            ));
        }
    });
    s.case("gicd-foreign-spi-activate", |c| {
        let owned = owned_words(c);
        for n in SPI_WORDS {
            let foreign = !owned[n as usize];
            c.refusals(u64::from(foreign.count_ones()));
            c.tolerate(probe_write(
                GUEST_GICD_BASE + GICD_ISACTIVER + 4 * n,
                foreign,
            ));
            if let Some(v) = c.tolerate(probe_read(GUEST_GICD_BASE + GICD_ISACTIVER + 4 * n)) {
                if v & foreign != 0 {
                    c.fail(format_args!("GICD_ISACTIVER{n} reads 0x{v:08x}"));
                }
            }
        }
        for n in 0..32u64 {
            c.tolerate(probe_write(
                GUEST_GICD_BASE + GICD_ICENABLER + 4 * n,
                u32::MAX,
            ));
        }
    });
    s.case("gicd-foreign-spi-clear", |c| {
        // Disable, unpend, deactivate everything: the management
        // partition's NIC must keep working (the boot test asks its API).
        for bank in [GICD_ICENABLER, GICD_ICPENDR, GICD_ICACTIVER] {
            for n in 0..32u64 {
                c.tolerate(probe_write(GUEST_GICD_BASE + bank + 4 * n, u32::MAX));
            }
        }
    });
    s.case("gicd-foreign-spi-route-priority", |c| {
        let spi = u64::from(MGMT_SPI);
        for n in 0..256u64 {
            c.tolerate(write_width(
                GUEST_GICD_BASE + GICD_IPRIORITYR + n * 4,
                4,
                u64::from(u32::MAX),
            ));
            c.tolerate(write_width(
                GUEST_GICD_BASE + GICD_ICFGR + (n % 64) * 4,
                4,
                u64::from(u32::MAX),
            ));
        }
        for n in 32..1020u64 {
            c.tolerate(write_width(
                GUEST_GICD_BASE + GICD_IROUTER + n * 8,
                8,
                u64::MAX,
            ));
        }
        let prio = c.tolerate(read_width(GUEST_GICD_BASE + GICD_IPRIORITYR + spi, 1));
        let route = c.tolerate(read_width(GUEST_GICD_BASE + GICD_IROUTER + spi * 8, 8));
        if prio.is_some_and(|p| p != 0) || route.is_some_and(|r| r != 0) {
            c.fail(format_args!(
                "foreign SPI {spi} reads priority {prio:?}, route {route:?}"
            ));
        }
        c.must_work(
            format_args!("GICD_CTLR"),
            probe_write(GUEST_GICD_BASE + GICD_CTLR, GICD_CTLR_ON),
        );
    });
    s.case("gicd-isv0-forms", |c| {
        for a in [
            GUEST_GICD_BASE + GICD_ISENABLER + 4,
            GUEST_GICR_BASE + GICR_ISENABLER0,
            GUEST_UART_BASE + 0x18,
            GUEST_GPIO_BASE + 0x400,
        ] {
            for (i, r) in isv0_forms(a).into_iter().enumerate() {
                match r {
                    Ok(()) => c.fail(format_args!("ISV=0 form {i} at {a:#x} completed")),
                    Err(f) if hv_injected(&f) => c.saw(&f),
                    Err(f) => c.fail(format_args!("ISV=0 form {i} at {a:#x} raised {f}")),
                }
            }
        }
    });
}

fn gicr(s: &mut Suite) {
    s.case("gicr-own-every-offset", |c| {
        for off in (0..2 * SGI_BASE).step_by(4) {
            c.tolerate(read_width(GUEST_GICR_BASE + off, 4));
        }
        for off in (0..2 * SGI_BASE).step_by(8) {
            c.tolerate(read_width(GUEST_GICR_BASE + off, 8));
        }
        for off in (0..2 * SGI_BASE).step_by(4) {
            c.tolerate(write_width(GUEST_GICR_BASE + off, 4, 0));
        }
        for off in [GICR_ISENABLER0, GICR_ICENABLER0] {
            c.tolerate(write_width(GUEST_GICR_BASE + off, 4, u64::from(u32::MAX)));
        }
        for n in 0..8 {
            c.tolerate(write_width(
                GUEST_GICR_BASE + GICR_IPRIORITYR + 4 * n,
                4,
                u64::from(u32::MAX),
            ));
        }
    });
    s.case("gicr-sibling-writes", |c| {
        // vCPU 1's frames: reads answer (Linux scans GICR_TYPER), every
        // write is refused and counted.
        let sibling = GUEST_GICR_BASE + GICR_STRIDE;
        for off in (0..0x100u64).step_by(4) {
            c.must_work(
                format_args!("sibling GICR read +{off:#x}"),
                probe_read(sibling + off),
            );
        }
        for off in [
            0x0u64,
            GICR_WAKER,
            0x70,
            GICR_ISENABLER0,
            GICR_ICENABLER0,
            GICR_IPRIORITYR,
        ] {
            c.must_work(
                format_args!("sibling GICR write +{off:#x}"),
                probe_write(sibling + off, u32::MAX),
            );
            c.refusals(1);
        }
    });
}

fn sgis(s: &mut Suite) {
    s.case("sgi-foreign-targets", |c| {
        // ICC_SGI1R_EL1: TargetList [15:0], Aff1 [23:16], INTID [27:24],
        // Aff2 [39:32], IRM [40], RS [47:44], Aff3 [55:48].
        let values = [
            1u64 << 24 | 1 << 2,
            1 << 24 | 0xfffc,
            2 << 24 | 1 << 16 | 1,
            3 << 24 | 1 << 32 | 1,
            4 << 24 | 1 << 48 | 1,
            5 << 24 | 1 << 44 | 1,
            6 << 24 | 15 << 44 | 0xffff,
            7 << 24 | 0xff << 16 | 0xff << 32 | 0xff << 48 | 0xffff,
        ];
        for v in values {
            if let Some(f) = probe_msr!("S3_0_C12_C11_5", v) {
                c.fail(format_args!("ICC_SGI1R_EL1 {v:#x} raised {f}"));
            }
            c.refusals(1);
        }
        // Group 0 and the alias: the same checks (the hypervisor had their
        // encodings wrong and answered UNDEF, a fault the count showed).
        for v in [8u64 << 24 | 1 << 3, 9 << 24 | 1 << 16 | 1] {
            for r in [
                probe_msr!("S3_0_C12_C11_7", v),
                probe_msr!("S3_0_C12_C11_6", v),
            ] {
                match r {
                    None => c.refusals(1),
                    Some(f) => c.fail(format_args!("ICC_SGI0R/ASGI1R_EL1 raised {f}")),
                }
            }
        }
        // Broadcast to all but self (the sibling is off): no target
        // outside the partition, not a fault.
        if let Some(f) = probe_msr!("S3_0_C12_C11_5", 10u64 << 24 | 1 << 40) {
            c.fail(format_args!("IRM broadcast raised {f}"));
        }
    });
    s.case("sgi-self-storm-masked", |c| {
        // 16 SGIs 500 times each to ourselves while we never take them:
        // at most one pending instance each, nothing lost or counted.
        for i in 0..8000u64 {
            if let Some(f) = probe_msr!("S3_0_C12_C11_5", (i % 16) << 24 | 1) {
                c.fail(format_args!("SGI to self raised {f}"));
                break;
            }
        }
    });
}

fn psci(s: &mut Suite, ram_end: u64) {
    let park = park_cpu as *const () as usize as u64;
    s.case("psci-foreign-mpidr", |c| {
        for m in [2u64, 3, 0x100, 0x1_0000, 0xff_0000_0000, 0x8000_0002, 0xff] {
            // CPU_ON_32 sees the low half only: 0xff_0000_0000 would be
            // vCPU 0 there.
            let convs: &[u32] = if m >> 32 == 0 {
                &[fid::CPU_ON_64, fid::CPU_ON_32]
            } else {
                &[fid::CPU_ON_64]
            };
            for &f in convs {
                match hvc(f, m, park, 0) {
                    Ok(PSCI_INVALID_PARAMETERS) => c.refusals(1),
                    Ok(r) => c.fail(format_args!("CPU_ON MPIDR {m:#x} -> {r}")),
                    Err(e) => c.fail(format_args!("CPU_ON raised {e}")),
                }
            }
            match hvc(fid::AFFINITY_INFO_64, m, 0, 0) {
                Ok(PSCI_INVALID_PARAMETERS) => {}
                Ok(r) => c.fail(format_args!("AFFINITY_INFO MPIDR {m:#x} -> {r}")),
                Err(e) => c.fail(format_args!("AFFINITY_INFO raised {e}")),
            }
        }
    });
    s.case("psci-bad-entry", |c| {
        for entry in [
            ram_end,
            0,
            DEVICE_HOLE,
            FAR_AWAY,
            u64::MAX - 3,
            ram_base() - 4,
            park + 2,
        ] {
            match hvc(fid::CPU_ON_64, 1, entry, 0) {
                Ok(PSCI_INVALID_ADDRESS) => c.refusals(1),
                Ok(r) => {
                    c.fail(format_args!("CPU_ON vCPU 1 at {entry:#x} -> {r}"));
                    return;
                }
                Err(e) => c.fail(format_args!("CPU_ON raised {e}")),
            }
        }
        match hvc(fid::CPU_ON_64, 1, park, 0) {
            Ok(PSCI_SUCCESS) => {}
            Ok(r) => c.fail(format_args!("CPU_ON vCPU 1 at its park loop -> {r}")),
            Err(e) => c.fail(format_args!("CPU_ON raised {e}")),
        }
    });
    s.case("psci-cpu-on-storm", |c| {
        let (mut already, mut pending, mut foreign) = (0, 0, 0);
        for i in 0..3000u64 {
            let target = [0u64, 1, 5][(i % 3) as usize];
            match hvc(fid::CPU_ON_64, target, park, i) {
                Ok(PSCI_ALREADY_ON) => already += 1,
                Ok(PSCI_ON_PENDING) => pending += 1,
                Ok(PSCI_INVALID_PARAMETERS) if target == 5 => {
                    foreign += 1;
                    c.refusals(1);
                }
                Ok(r) => {
                    c.fail(format_args!("CPU_ON {target} -> {r}"));
                    return;
                }
                Err(e) => return c.fail(format_args!("CPU_ON raised {e}")),
            }
        }
        match hvc(fid::AFFINITY_INFO_64, 1, 0, 0) {
            Ok(0) => {}
            r => c.fail(format_args!("AFFINITY_INFO vCPU 1 -> {r:?}, expected ON")),
        }
        c.note(format_args!(
            "{already} ALREADY_ON, {pending} ON_PENDING, {foreign} refused"
        ));
    });
    s.case("psci-other-calls", |c| {
        let calls: [(u32, u64, u64); 9] = [
            (fid::PSCI_VERSION, 0, 0),
            (fid::CPU_SUSPEND_64, 0, 0),
            (fid::CPU_SUSPEND_64, 1 << 16, ram_end),
            (0x8400_0005, 0, 0), // MIGRATE
            (fid::MIGRATE_INFO_TYPE, 0, 0),
            (0x8400_0007, 0, 0),           // MIGRATE_INFO_UP_CPU
            (0xC400_000E, ram_end, 0),     // SYSTEM_SUSPEND
            (0x8400_0010, 0, 0),           // MEM_PROTECT
            (0xC400_0012, 0xffff_ffff, 0), // SYSTEM_RESET2, vendor reset
        ];
        for (f, a1, a2) in calls {
            if let Err(e) = hvc(f, a1, a2, 0) {
                c.fail(format_args!("{f:#x} raised {e}"));
            }
        }
        for f in 0..0x20u32 {
            match hvc(fid::PSCI_FEATURES, u64::from(0x8400_0000 | f), 0, 0) {
                Ok(_) => {}
                Err(e) => c.fail(format_args!("PSCI_FEATURES raised {e}")),
            }
        }
    });
}

/// Function IDs the sweep must not call: they would stop this vCPU or
/// the partition (CPU_OFF, SYSTEM_OFF, SYSTEM_RESET), or are checked by
/// their own cases (CPU_ON; the Pinfold calls).
fn sweep_skips(f: u32) -> bool {
    let base = f & !(1 << 30);
    matches!(base, 0x8400_0002 | 0x8400_0003 | 0x8400_0008 | 0x8400_0009)
        || f & 0x3f00_0000 == 0x0600_0000
}

fn smccc_ranges(s: &mut Suite, ram_end: u64) {
    // Owning entities 0..63, fast and yielding, 32 and 64 bit, a few
    // function numbers each.
    let each = |conduit_smc: bool, c: &mut Check| {
        let mut n = 0u32;
        for oen in 0..64u32 {
            for conv in [0x8000_0000u32, 0xC000_0000, 0x0000_0000, 0x4000_0000] {
                for func in [0u32, 1, 2, 0x20, 0x7fff, 0x8000, 0xff00, 0xffff] {
                    let f = conv | oen << 24 | func;
                    if !conduit_smc && sweep_skips(f) {
                        continue;
                    }
                    n += 1;
                    match smccc(conduit_smc, f, ram_end, ram_end, 0) {
                        Ok(r) if conduit_smc && r as u32 as i32 != PSCI_NOT_SUPPORTED as i32 => {
                            c.fail(format_args!("SMC {f:#x} answered {r:#x}"));
                        }
                        Ok(_) => {}
                        Err(e) => c.fail(format_args!("{f:#x} raised {e}")),
                    }
                }
            }
        }
        c.note(format_args!("{n} function IDs"));
    };
    s.case("smccc-hvc-every-range", |c| each(false, c));
    s.case("smccc-smc-every-range", |c| each(true, c));
    s.case("mgmt-calls-from-guest", |c| {
        let mut n = 0;
        for base in [fid::PINFOLD_32_BASE, fid::PINFOLD_64_BASE] {
            for func in (0..0x40u32).chain([0x100, 0x7fff, 0xffff]) {
                n += 1;
                for buf in [ram_base() + 0x1000, ram_end - 64, 0] {
                    match hvc(base | func, buf, 4096, 0) {
                        Ok(r) if r == pinfold_abi::AbiError::NotSupported.code() => {}
                        Ok(r) => c.fail(format_args!("{:#x} answered {r}", base | func)),
                        Err(e) => c.fail(format_args!("{:#x} raised {e}", base | func)),
                    }
                }
            }
        }
        c.note(format_args!("{n} management function IDs, NOT_SUPPORTED"));
    });
}

fn sysregs(s: &mut Suite) {
    s.case("sysreg-debug", |c| {
        // The debug registers are this CPU's, which only this partition
        // runs on: usable, and no breakpoint reaches EL2 (MDCR_EL2.TDE is
        // clear, and debug exceptions are masked here).
        let _ = c.tolerate(try_mrs!("mdscr_el1"));
        for r in [
            try_msr!("dbgbvr0_el1", 0x4008_0000),
            try_msr!("dbgbcr0_el1", 0x1e7),
            try_msr!("dbgwvr0_el1", ram_base() + 0x1000),
            try_msr!("dbgwcr0_el1", 0x1ff7),
            try_msr!("mdscr_el1", 1 << 15 | 1 << 13),
            try_msr!("oslar_el1", 0),
            try_msr!("osdlr_el1", 0),
        ] {
            c.tolerate(r);
        }
        let _ = probe_read(ram_base() + 0x1000);
        if hvc(fid::PSCI_VERSION, 0, 0, 0).is_err() {
            c.fail(format_args!("HVC with a watchpoint set raised"));
        }
        for r in [
            try_msr!("mdscr_el1", 0),
            try_msr!("dbgbcr0_el1", 0),
            try_msr!("dbgwcr0_el1", 0),
        ] {
            c.tolerate(r);
        }
    });
    s.case("sysreg-pmu", |c| {
        // PMU registers: the hypervisor's policy (trap and filter on this
        // PMU) answers them; a counter asked to count EL2 reads NSH 0.
        let _ = c.tolerate(try_mrs!("pmcr_el0"));
        // PMUv3 without p1 has no HPMD: NSH must be filtered.
        let filtered = try_mrs!("id_aa64dfr0_el1").is_ok_and(|d| d >> 8 & 0xf == 1);
        c.tolerate(try_msr!("pmselr_el0", 0));
        c.tolerate(try_msr!("pmxevtyper_el0", 1 << 27 | 0x11));
        if let Some(v) = c.tolerate(try_mrs!("pmxevtyper_el0")) {
            if filtered && v & 1 << 27 != 0 {
                c.fail(format_args!("PMXEVTYPER_EL0 kept NSH: {v:#x}"));
            }
        }
        c.tolerate(try_msr!("pmevtyper0_el0", 1 << 27 | 0x11));
        if let Some(v) = c.tolerate(try_mrs!("pmevtyper0_el0")) {
            if filtered && v & 1 << 27 != 0 {
                c.fail(format_args!("PMEVTYPER0_EL0 kept NSH: {v:#x}"));
            }
        }
        c.tolerate(try_msr!("pmevtyper0_el0", 0));
        c.tolerate(try_msr!("pmuserenr_el0", 0xf));
        c.tolerate(try_msr!("pmuserenr_el0", 0));
        c.tolerate(try_msr!("pmintenclr_el1", u64::from(u32::MAX)));
        c.tolerate(try_msr!("pmovsclr_el0", u64::from(u32::MAX)));
        c.tolerate(try_msr!("pmcntenclr_el0", u64::from(u32::MAX)));
    });
    s.case("sysreg-trace-spe-brbe", |c| {
        c.must_undef("TRFCR_EL1", try_mrs!("S3_0_C1_C2_1"));
        c.must_undef("TRCPRGCTLR", try_mrs!("S2_1_C0_C1_0"));
        c.must_undef("TRCIDR0", try_mrs!("S2_1_C0_C8_7"));
        c.must_undef("PMSCR_EL1", try_mrs!("S3_0_C9_C9_0"));
        c.must_undef("PMBLIMITR_EL1", try_mrs!("S3_0_C9_C10_0"));
        c.must_undef("TRBLIMITR_EL1", try_mrs!("S3_0_C9_C11_0"));
        let dfr0 = c.tolerate(try_mrs!("id_aa64dfr0_el1")).unwrap_or(0);
        for (name, shift) in [
            ("TraceVer", 4),
            ("PMSVer", 32),
            ("TraceBuffer", 44),
            ("BRBE", 52),
        ] {
            if dfr0 >> shift & 0xf != 0 {
                c.fail(format_args!("ID_AA64DFR0_EL1.{name} shown: {dfr0:#x}"));
            }
        }
    });
    s.case("sysreg-el2-timers", |c| {
        c.must_undef("CNTHCTL_EL2", try_mrs!("S3_4_C14_C1_0"));
        c.must_undef("CNTVOFF_EL2", try_mrs!("S3_4_C14_C0_3"));
        c.must_undef("CNTHP_CTL_EL2", try_mrs!("S3_4_C14_C2_1"));
        c.must_undef("CNTHP_CVAL_EL2", try_mrs!("S3_4_C14_C2_2"));
        c.must_undef("CNTHP_CTL_EL2 write", try_msr!("S3_4_C14_C2_1", 1));
        c.must_undef("CNTHV_CTL_EL2", try_mrs!("S3_4_C14_C3_1"));
        c.must_undef("CNTPS_CTL_EL1", try_mrs!("S3_7_C14_C2_1"));
        c.must_undef("CNTVOFF_EL2 write", try_msr!("S3_4_C14_C0_3", 1 << 40));
    });
    s.case("sysreg-ich", |c| {
        c.must_undef("ICH_HCR_EL2", try_mrs!("S3_4_C12_C11_0"));
        c.must_undef("ICH_VTR_EL2", try_mrs!("S3_4_C12_C11_1"));
        c.must_undef("ICH_MISR_EL2", try_mrs!("S3_4_C12_C11_2"));
        c.must_undef("ICH_ELRSR_EL2", try_mrs!("S3_4_C12_C11_5"));
        c.must_undef("ICH_VMCR_EL2", try_mrs!("S3_4_C12_C11_7"));
        c.must_undef("ICH_LR0_EL2", try_mrs!("S3_4_C12_C12_0"));
        c.must_undef(
            "ICH_LR0_EL2 write",
            try_msr!("S3_4_C12_C12_0", 1 << 62 | 26),
        );
        c.must_undef("ICH_AP1R0_EL2", try_mrs!("S3_4_C12_C9_0"));
        c.must_undef("ICC_SRE_EL2", try_mrs!("S3_4_C12_C9_5"));
        c.must_undef("ICH_HCR_EL2 write", try_msr!("S3_4_C12_C11_0", 0));
        // The EL1 view cannot turn the system register interface off, and
        // deactivating interrupts we do not hold (the hypervisor's timer,
        // the maintenance interrupt) does nothing.
        c.tolerate(try_msr!("S3_0_C12_C12_5", 0));
        if c.tolerate(try_mrs!("S3_0_C12_C12_5"))
            .is_some_and(|v| v & 1 == 0)
        {
            c.fail(format_args!("ICC_SRE_EL1.SRE reads 0"));
        }
        for intid in [25u64, 26, 27, 33, 1023] {
            c.tolerate(try_msr!("S3_0_C12_C11_1", intid)); // ICC_DIR_EL1
            c.tolerate(try_msr!("S3_0_C12_C12_1", intid)); // ICC_EOIR1_EL1
        }
    });
    s.case("sysreg-el2-el3", |c| {
        c.must_undef("HCR_EL2", try_mrs!("hcr_el2"));
        c.must_undef("HCR_EL2 write", try_msr!("hcr_el2", 0));
        c.must_undef("VTTBR_EL2", try_mrs!("vttbr_el2"));
        c.must_undef("VTCR_EL2", try_mrs!("vtcr_el2"));
        c.must_undef("VBAR_EL2", try_mrs!("vbar_el2"));
        c.must_undef("VBAR_EL2 write", try_msr!("vbar_el2", ram_base()));
        c.must_undef("SCTLR_EL2", try_mrs!("sctlr_el2"));
        c.must_undef("TPIDR_EL2", try_mrs!("tpidr_el2"));
        c.must_undef("ELR_EL2", try_mrs!("elr_el2"));
        c.must_undef("MDCR_EL2", try_mrs!("mdcr_el2"));
        c.must_undef("VMPIDR_EL2", try_mrs!("vmpidr_el2"));
        c.must_undef("SCR_EL3", try_mrs!("scr_el3"));
        c.must_undef("VBAR_EL3", try_mrs!("vbar_el3"));
        let (_, f) = catching(|| {
            // SAFETY: an EL2 address translation at EL1: UNDEFINED.
            unsafe { asm!("at s12e1r, {}", in(reg) ram_base(), options(nostack)) };
        });
        c.must_undef("AT S12E1R", f.map_or(Ok(0u64), Err));
    });
    s.case("sysreg-impdef", |c| {
        // IMPLEMENTATION DEFINED control registers (Cortex-A72's CPUACTLR,
        // CPUECTLR, L2CTLR, L2ECTLR, L2ACTLR): read, and written back
        // unchanged; docs/SECURITY.md says what a board must do about them.
        for r in [
            try_mrs!("S3_1_C15_C2_0"),
            try_mrs!("S3_1_C15_C2_1"),
            try_mrs!("S3_1_C11_C0_2"),
            try_mrs!("S3_1_C11_C0_3"),
            try_mrs!("S3_1_C15_C0_0"),
        ] {
            c.tolerate(r);
        }
        if let Ok(v) = try_mrs!("S3_1_C11_C0_2") {
            c.tolerate(try_msr!("S3_1_C11_C0_2", v));
        }
        c.tolerate(try_msr!("actlr_el1", u64::MAX));
        if c.tolerate(try_mrs!("actlr_el1")).is_some_and(|v| v != 0) {
            c.fail(format_args!("ACTLR_EL1 keeps a write"));
        }
    });
    s.case("sysreg-id-sanitised", |c| {
        let pfr0 = c.tolerate(try_mrs!("id_aa64pfr0_el1")).unwrap_or(0);
        let pfr1 = c.tolerate(try_mrs!("id_aa64pfr1_el1")).unwrap_or(0);
        let mmfr0 = c.tolerate(try_mrs!("id_aa64mmfr0_el1")).unwrap_or(0);
        for (name, v, shift) in [
            ("PFR0.SVE", pfr0, 32),
            ("PFR0.MPAM", pfr0, 40),
            ("PFR0.AMU", pfr0, 44),
            ("PFR1.MTE", pfr1, 8),
            ("PFR1.SME", pfr1, 24),
        ] {
            if v >> shift & 0xf != 0 {
                c.fail(format_args!("ID_AA64{name} shown ({v:#x})"));
            }
        }
        if mmfr0 & 0xf > 2 {
            c.fail(format_args!(
                "ID_AA64MMFR0_EL1.PARange {} above 40 bits",
                mmfr0 & 0xf
            ));
        }
    });
    s.case("set-way-maintenance", |c| {
        // Trapped (HCR_EL2.TSW) and ignored: DC ISW on the real caches
        // would drop other partitions' dirty lines.
        for level in 0..3u64 {
            for set in 0..256u64 {
                for way in 0..4u64 {
                    let v = way << 30 | set << 6 | level << 1;
                    let (_, f) = catching(|| {
                        // SAFETY: set/way maintenance; traps to EL2.
                        unsafe { asm!("dc isw, {v}", "dc csw, {v}", "dc cisw, {v}", v = in(reg) v, options(nostack)) };
                    });
                    if let Some(f) = f {
                        c.saw(&f);
                        return c.fail(format_args!("DC by set/way raised {f}"));
                    }
                }
            }
        }
    });
    s.case("tlbi-broadcast", |c| {
        let marker = ram_base() + 0x2000;
        let _ = probe_write(marker, 0x1234_5678);
        for i in 0..2000u64 {
            let (_, f) = catching(|| {
                // SAFETY: TLB and I-cache invalidation for this VMID (the
                // hardware tags them by VMID); nothing is lost but speed.
                unsafe {
                    asm!("tlbi vmalle1is", "tlbi vae1is, {v}", "tlbi aside1is, {v}",
                         "tlbi vaale1is, {v}", "tlbi vmalle1", "ic ialluis", "ic iallu",
                         "dsb ish", "isb", v = in(reg) i << 12, options(nostack))
                };
            });
            if let Some(f) = f {
                return c.fail(format_args!("EL1 TLBI raised {f}"));
            }
        }
        let el2 = |op: u8| {
            let (_, f) = catching(|| {
                // SAFETY: EL2-only TLB maintenance at EL1: UNDEFINED.
                unsafe {
                    match op {
                        0 => asm!("tlbi alle1is", options(nostack)),
                        1 => asm!("tlbi alle2is", options(nostack)),
                        2 => asm!("tlbi vmalls12e1is", options(nostack)),
                        _ => asm!("tlbi ipas2e1is, {}", in(reg) 0x4000u64, options(nostack)),
                    }
                }
            });
            f.map_or(Ok(0u64), Err)
        };
        c.must_undef("TLBI ALLE1IS", el2(0));
        c.must_undef("TLBI ALLE2IS", el2(1));
        c.must_undef("TLBI VMALLS12E1IS", el2(2));
        c.must_undef("TLBI IPAS2E1IS", el2(3));
        if probe_read(marker) != Ok(0x1234_5678) {
            c.fail(format_args!("own RAM changed across the TLBIs"));
        }
    });
}

/// 2 KiB-aligned room for a vector table written at run time.
#[repr(C, align(2048))]
struct VectorPage([u32; 512]);
static mut VECTORS: VectorPage = VectorPage([0; 512]);

/// `mov x9, #imm` (MOVZ, 64-bit).
const fn movz_x9(imm: u16) -> u32 {
    0xD280_0009 | (imm as u32) << 5
}

fn storms(s: &mut Suite, ram_end: u64) {
    s.case("self-modifying-vectors", |c| {
        // A vector table written in RAM, entered through an abort the
        // hypervisor injects, rewritten, entered again: the injection goes
        // to the VBAR_EL1 and the instructions as they are now.
        let table = core::ptr::addr_of_mut!(VECTORS) as u64;
        let write = |index: usize, word: u32| {
            // SAFETY: VECTORS is ours, aligned, and nothing else uses it;
            // volatile because it is code.
            unsafe { core::ptr::write_volatile((table as *mut u32).add(index), word) };
        };
        for i in 0..512 {
            write(i, 0x1400_0000); // b . (an unexpected vector hangs here)
        }
        // Current EL, SPx, synchronous: offset 0x200.
        let slot = 0x200 / 4;
        let body = [
            movz_x9(0x1111),
            0xD538_402A,
            0x9100_114A,
            0xD518_402A,
            0xD69F_03E0,
        ];
        for (i, w) in body.into_iter().enumerate() {
            write(slot + i, w);
        }
        let mut seen = [0u64; 2];
        for (round, imm) in [0x1111u16, 0x2222].into_iter().enumerate() {
            write(slot, movz_x9(imm));
            let x9: u64;
            // SAFETY: makes the table's new instructions visible to
            // instruction fetch, switches VBAR_EL1 to it for one load that
            // aborts (outside RAM: the hypervisor injects), switches back.
            // The table's handler only sets x9 and returns past the load.
            unsafe {
                asm!(
                    "dc cvau, {t}", "dsb ish", "ic ivau, {t}", "dsb ish", "isb",
                    "mrs {old}, vbar_el1", "msr vbar_el1, {base}", "isb",
                    "mov x9, #0", "ldr {tmp:w}, [{a}]",
                    "msr vbar_el1, {old}", "isb",
                    t = in(reg) table + 0x200, base = in(reg) table, a = in(reg) ram_end,
                    old = out(reg) _, tmp = out(reg) _, out("x9") x9, out("x10") _,
                    options(nostack)
                )
            };
            seen[round] = x9;
            c.refusals(1);
        }
        if seen != [0x1111, 0x2222] {
            c.fail(format_args!(
                "the handlers ran {:#x}, {:#x}",
                seen[0], seen[1]
            ));
        }
    });
    s.case("interrupt-storm", |c| {
        gic_up(c);
        // Priority 0xa0, above the mask (an earlier case left 0xff).
        let prio = GUEST_GICR_BASE + GICR_IPRIORITYR + u64::from(PPI_VTIMER);
        c.must_work(format_args!("GICR_IPRIORITYR"), write_width(prio, 1, 0xa0));
        let isen = GUEST_GICR_BASE + GICR_ISENABLER0;
        c.must_work(
            format_args!("GICR_ISENABLER0"),
            probe_write(isen, 1 << PPI_VTIMER),
        );
        let before = IRQS.load(Ordering::Relaxed);
        set_vtimer(1, 0); // enabled, unmasked, long expired: always asserting
        let deadline = counter() + 20 * freq();
        // SAFETY: IRQs unmasked: the IRQ vector calls `on_irq`.
        unsafe { asm!("msr daifclr, #2", "isb", options(nomem, nostack)) };
        while TIMER_IRQS.load(Ordering::Relaxed) < STORM_IRQS && counter() < deadline {
            core::hint::spin_loop();
        }
        // SAFETY: IRQs masked again.
        unsafe { asm!("msr daifset, #2", "isb", options(nomem, nostack)) };
        set_vtimer(0, 0);
        let timer = TIMER_IRQS.load(Ordering::Relaxed);
        if timer < STORM_IRQS {
            c.fail(format_args!("only {timer} timer interrupts in 20 s"));
        }
        c.note(format_args!(
            "{timer} timer interrupts, {} in all (the masked SGIs included)",
            IRQS.load(Ordering::Relaxed) - before
        ));
    });
    s.case("never-takes-interrupts", |c| {
        // The timer asserts, IRQs stay masked for 2 s: the vCPU must keep
        // running (the interrupt waits in its list register).
        set_vtimer(1, 0);
        let start = counter();
        let end = start + 2 * freq();
        let mut spins = 0u64;
        while counter() < end {
            spins += 1;
        }
        let ctl = vtimer_ctl();
        set_vtimer(0, 0);
        if ctl & 4 == 0 {
            c.fail(format_args!("CNTV_CTL_EL0.ISTATUS was 0 ({ctl:#x})"));
        }
        c.note(format_args!(
            "{spins} polls in 2 s with the timer asserting"
        ));
    });
    s.case("wfi-wfe-storm", |c| {
        // WFI with a masked interrupt pending returns at once (it is a wake-up
        // event); SEVL+WFE too. Neither may stop this CPU.
        set_vtimer(1, 0);
        let start = counter();
        for _ in 0..20_000 {
            // SAFETY: wait instructions; nothing is touched.
            unsafe { asm!("wfi", "sevl", "wfe", options(nomem, nostack)) };
        }
        set_vtimer(0, 0);
        let ms = (counter() - start) * 1000 / freq();
        if ms > 30_000 {
            c.fail(format_args!("20000 WFI/WFE took {ms} ms"));
        }
        c.note(format_args!("20000 WFI + SEVL/WFE in {ms} ms"));
    });
    s.case("hvc-storm", |c| {
        let start = counter();
        for _ in 0..50_000 {
            match hvc(fid::PSCI_VERSION, 0, 0, 0) {
                Ok(0x1_0001) => {}
                r => return c.fail(format_args!("PSCI_VERSION -> {r:?}")),
            }
        }
        let ms = (counter() - start) * 1000 / freq();
        c.note(format_args!("50000 HVCs in {ms} ms"));
    });
    s.case("serror-triggers", |c| {
        // What raises an SError on many boards: a store to a read-only
        // register, stores outside RAM drained by a DSB, an exclusive to
        // device memory. Only this partition may suffer (an SError stops
        // it); here each is refused synchronously or ignored.
        c.tolerate(probe_write(GUEST_GICD_BASE + 0x4, u32::MAX)); // GICD_TYPER
        c.tolerate(probe_write(GUEST_GICD_BASE + 0xFFE8, u32::MAX)); // GICD_PIDR2
        for a in [ram_end, DEVICE_HOLE, 0x0901_0000] {
            c.must_abort_write(a, 0xdead_beef);
        }
        let id = GUEST_UART_BASE + 0xFE0;
        let (_, f) = catching(|| {
            // SAFETY: an exclusive load of the partition's own UART's ID
            // register; one instruction.
            unsafe { asm!("ldxr {v:w}, [{a}]", a = in(reg) id, v = out(reg) _, options(nostack)) };
        });
        if let Some(f) = f {
            c.saw(&f);
        }
        let (_, f) = catching(|| {
            // SAFETY: an exclusive store to the same read-only register.
            unsafe {
                asm!("stxr {s:w}, {v:w}, [{a}]", a = in(reg) id, v = in(reg) 0u64, s = out(reg) _,
                     options(nostack))
            };
        });
        if let Some(f) = f {
            c.saw(&f);
        }
        // SAFETY: barriers, CLREX and ESB (hint #16) only.
        unsafe { asm!("clrex", "dsb sy", "isb", "hint #16", options(nostack)) };
    });
}
