//! The MSI bench (`PROBE bench msi:`): a minimal GICv3 ITS + LPI client at
//! EL1 that makes QEMU's `edu` PCI device raise MSIs and times each one
//! from the device's raise write to the first instructions of the guest's
//! IRQ handler. The same code runs bare (QEMU's own ITS and ECAM) and in a
//! partition (the partition's virtual ITS and virtual ECAM): every address
//! comes from the DTB it was given ([`Target`], read in main.rs).
//!
//! Set-up, in the order the architecture asks (IHI0069 5.1, 6.2):
//! the edu found by scanning bus 0 of the ECAM (vendor 0x1234, device
//! 0x11e8), its BAR0 given an address from the bridge's first 32-bit
//! memory range when it has none (bare: no firmware placed it), memory
//! decode and bus mastering on (QEMU drops an MSI of a function that is
//! not bus master), its MSI capability pointed at GITS_TRANSLATER with
//! data = the EventID; the redistributor's GICR_PROPBASER (LPIs
//! 8192..16383, [`LPI_PROP`]) and GICR_PENDBASER (PTZ), then EnableLPIs;
//! the ITS's device and collection tables (GITS_BASER<n> of those types,
//! one 4 KiB page each; a virtual ITS that has none is fine), its command
//! queue (GITS_CBASER, one page), GITS_CTLR.Enabled, then MAPD (the
//! DeviceID the bridge's msi-map gives the edu's requester ID, 1 event
//! bit), MAPC (ICID 0 -> this CPU's redistributor, by processor number:
//! GITS_TYPER.PTA = 0 on QEMU and Pinfold), MAPTI (event 0 -> LPI 8192,
//! collection 0), INV, SYNC; each batch waits for GITS_CREADR to reach
//! GITS_CWRITER (bounded).
//!
//! The timed trial (`bench_msi_trial`, assembly): a sled of d nops (d =
//! 0..15), `isb; mrs x12, cntvct_el0` (the start stamp), IRQs unmasked,
//! `str` to the edu's interrupt-raise register 0x60, spin on `cbz x10`.
//! The IRQ vector (`bench_msi_vectors`, offset 0x280) reads CNTVCT_EL0 as
//! its 2nd instruction (`isb; mrs x10`), then acknowledges (ICC_IAR1_EL1),
//! EOIs (ICC_EOIR1_EL1), writes the edu's interrupt-ack register 0x64 and
//! returns. Since the dither shifts the start and the stamp together, the
//! ticks of one round of 16 trials sum to exactly the instruction count
//! L of one MSI (Hermite's identity: sum over d of floor((p+d+L)/16) -
//! floor((p+d)/16) = L), so each round is exact, not rounded to a tick:
//! the line gives the smallest and the median round and the sum over all.

use core::arch::global_asm;

/// What the DTB says the MSI bench needs (main.rs `msi_target`).
pub struct Target {
    /// The host bridge's ECAM (bus 0 at its start).
    pub ecam: u64,
    /// The ITS control frame (GITS_TRANSLATER at + 0x1_0040).
    pub its: u64,
    /// This CPU's redistributor (RD_base): the first of the GIC's.
    pub redist: u64,
    /// The first 32-bit memory range of the bridge: (PCI address, CPU
    /// address, size).
    pub mem32: (u64, u64, u64),
    /// The bridge's msi-map entry: (rid-base, msi-base, length); None when
    /// it has none (DeviceID = requester ID).
    pub msi_map: Option<(u32, u32, u32)>,
}

const EDU_VENDOR_DEVICE: u32 = 0x11e8_1234;
const EDU_BAR0_SIZE: u64 = 1 << 20;
/// edu BAR0 registers (QEMU docs/specs/edu.txt).
const EDU_IRQ_RAISE: u64 = 0x60;
const EDU_IRQ_ACK: u64 = 0x64;

const PCI_COMMAND: u64 = 0x04;
const PCI_COMMAND_MEMORY: u32 = 1 << 1;
const PCI_COMMAND_MASTER: u32 = 1 << 2;
const PCI_STATUS_CAP_LIST: u32 = 1 << (16 + 4);
const PCI_BAR0: u64 = 0x10;
const PCI_CAP_PTR: u64 = 0x34;
const PCI_CAP_ID_MSI: u32 = 0x05;
const MSI_CTRL_ENABLE: u32 = 1 << 16;
const MSI_CTRL_64BIT: u32 = 1 << 23;
/// Multiple Message Enable [22:20] of the dword at the capability: 1 vector.
const MSI_CTRL_MME: u32 = 7 << 20;

const GITS_CTLR: u64 = 0x0000;
const GITS_CTLR_ENABLED: u32 = 1;
const GITS_TYPER: u64 = 0x0008;
const GITS_CBASER: u64 = 0x0080;
const GITS_CWRITER: u64 = 0x0088;
const GITS_CREADR: u64 = 0x0090;
const GITS_BASER0: u64 = 0x0100;
const GITS_TRANSLATER: u64 = 0x1_0040;
const BASER_VALID: u64 = 1 << 63;
const BASER_TYPE_DEVICES: u64 = 1;
const BASER_TYPE_COLLECTIONS: u64 = 4;
/// Type [58:56] and Entry_Size [52:48] are read-only; Page_Size [9:8] = 0
/// (4 KiB), Size [7:0] = 0 (one page), flat.
const BASER_RO_MASK: u64 = 7 << 56 | 0x1f << 48;

const GICR_CTLR: u64 = 0x0000;
const GICR_CTLR_ENABLE_LPIS: u32 = 1;
const GICR_TYPER: u64 = 0x0008;
const GICR_PROPBASER: u64 = 0x0070;
const GICR_PENDBASER: u64 = 0x0078;
const PENDBASER_PTZ: u64 = 1 << 62;
/// PROPBASER.IDbits = 13: INTIDs below 2^14, a property table of 8 KiB.
const PROP_IDBITS: u64 = 13;

/// The LPI the edu's event 0 is mapped to, and its property byte:
/// priority 0xA0, bit 1 RES1, Enable.
const LPI: u32 = 8192;
const LPI_PROP: u8 = 0xa0 | 1 << 1 | 1;
const EVENT: u32 = 0;
const ICID: u64 = 0;

const CMD_SYNC: u64 = 0x05;
const CMD_MAPD: u64 = 0x08;
const CMD_MAPC: u64 = 0x09;
const CMD_MAPTI: u64 = 0x0a;
const CMD_INV: u64 = 0x0c;
const QUEUE_BYTES: u64 = 4096;

const DITHER: u64 = 16;
const WARMUP: u64 = 4;
const ROUNDS: usize = 8;
/// Spins (each a `cbz`) for an MSI to arrive before a trial gives up.
const TRIAL_SPIN: u64 = 1 << 22;
const POLL_LIMIT: u32 = 100_000;

/// The guest memory the GIC reads: the LPI pending and property tables,
/// the ITS device and collection tables, its command queue and the edu's
/// ITT. In .bss (zeroed at boot, as a pending table must be); with the MMU
/// off the guest physical address is the symbol's.
#[repr(C, align(65536))]
struct Tables {
    pending: [u8; 65536],
    prop: [u8; 16384],
    devices: [u8; 4096],
    collections: [u8; 4096],
    queue: [u8; 4096],
    itt: [u8; 4096],
}

static mut TABLES: Tables = Tables {
    pending: [0; 65536],
    prop: [0; 16384],
    devices: [0; 4096],
    collections: [0; 4096],
    queue: [0; 4096],
    itt: [0; 4096],
};

fn tables() -> *mut Tables {
    core::ptr::addr_of_mut!(TABLES)
}

global_asm!(
    r#"
.section .text.bench, "ax"

// void bench_msi_trial(u64 raise, u64 sled, u64 ack, u64 out[3]): one MSI;
// out = start stamp, handler stamp (0: none came), INTID acknowledged.
// x9 = raise register, x15 = ack register (the handler writes it), x10 set
// by the handler, x11 = INTID, x14 = the spin budget.
.global bench_msi_trial
bench_msi_trial:
    mov     x9, x0
    mov     x15, x2
    mov     x10, #0
    mov     x11, #0
    mov     w13, #1
    ldr     x14, ={spin}
    br      x1
bench_msi_sled:
    .rept 15
    nop
    .endr
.global bench_msi_start
bench_msi_start:
    isb
    mrs     x12, cntvct_el0
    msr     daifclr, #2
    str     w13, [x9]               // edu interrupt raise: the MSI
1:  cbnz    x10, 2f
    subs    x14, x14, #1
    b.ne    1b
2:  msr     daifset, #2
    stp     x12, x10, [x3]
    str     x11, [x3, #16]
    ret

// The MSI bench's vectors: IRQ (current EL, SP_ELx) stamps first, then
// acknowledges, EOIs and acks the edu; every other entry branches to the
// same entry of exception_vectors.
.macro MSI_FWD n
    .balign 0x80
    b       exception_vectors + \n * 0x80
.endm
.balign 2048
.global bench_msi_vectors
bench_msi_vectors:
    MSI_FWD 0
    MSI_FWD 1
    MSI_FWD 2
    MSI_FWD 3
    MSI_FWD 4
    .balign 0x80
    isb
    mrs     x10, cntvct_el0
    mrs     x11, S3_0_C12_C12_0     // ICC_IAR1_EL1
    msr     S3_0_C12_C12_1, x11     // ICC_EOIR1_EL1
    mov     w13, #1
    str     w13, [x15]              // edu interrupt ack
    eret
    MSI_FWD 6
    MSI_FWD 7
    MSI_FWD 8
    MSI_FWD 9
    MSI_FWD 10
    MSI_FWD 11
    MSI_FWD 12
    MSI_FWD 13
    MSI_FWD 14
    MSI_FWD 15
"#,
    spin = const TRIAL_SPIN,
);

extern "C" {
    fn bench_msi_trial(raise: u64, sled: u64, ack: u64, out: *mut [u64; 3]);
    // Code addresses only.
    fn bench_msi_start();
    fn bench_msi_vectors();
}

fn read32(addr: u64) -> u32 {
    // SAFETY: `addr` is an aligned register of the ECAM, the ITS, the
    // redistributor or the edu's BAR0, all named by the DTB (or placed by
    // this guest); with the MMU off it is Device memory no Rust object
    // aliases.
    unsafe { core::ptr::read_volatile(addr as *const u32) }
}

fn write32(addr: u64, value: u32) {
    // SAFETY: as for `read32`.
    unsafe { core::ptr::write_volatile(addr as *mut u32, value) };
}

fn read64(addr: u64) -> u64 {
    // SAFETY: as for `read32` (a 64-bit GIC register, 8-byte aligned).
    unsafe { core::ptr::read_volatile(addr as *const u64) }
}

fn write64(addr: u64, value: u64) {
    // SAFETY: as for `read64`.
    unsafe { core::ptr::write_volatile(addr as *mut u64, value) };
}

/// The configuration space of bus 0 device `dev`, function 0.
fn config(ecam: u64, dev: u64) -> u64 {
    ecam + (dev << 15)
}

/// Runs the bench and prints its line (or why it was skipped).
pub fn run(target: Option<&Target>, why_not: &str) {
    let Some(t) = target else {
        return println!("PROBE bench msi: skipped ({why_not})");
    };
    match setup(t) {
        Ok(edu) => measure(&edu),
        Err(why) => println!("PROBE bench msi: skipped ({why})"),
    }
}

/// The edu, set up: its BAR0 address, requester ID and DeviceID.
struct Edu {
    bar0: u64,
    rid: u32,
    device_id: u32,
}

fn setup(t: &Target) -> Result<Edu, &'static str> {
    let dev = (0..32u64)
        .find(|&d| read32(config(t.ecam, d)) == EDU_VENDOR_DEVICE)
        .ok_or("no edu (1234:11e8) on bus 0")?;
    let cfg = config(t.ecam, dev);
    let rid = (dev << 3) as u32;
    let device_id = match t.msi_map {
        Some((base, msi_base, len)) if (base..base.saturating_add(len)).contains(&rid) => {
            msi_base + (rid - base)
        }
        Some(_) => return Err("the edu's requester ID is outside the bridge's msi-map"),
        None => rid,
    };

    // BAR0: keep an address already there (the hypervisor placed it), else
    // the start of the first 32-bit window (bare: nobody placed it).
    let (pci_base, cpu_base, size) = t.mem32;
    let mut bus = u64::from(read32(cfg + PCI_BAR0) & !0xf);
    if bus == 0 {
        if size < EDU_BAR0_SIZE {
            return Err("no 32-bit memory window for the edu's BAR0");
        }
        bus = pci_base;
        write32(cfg + PCI_BAR0, bus as u32);
    }
    if !(pci_base..pci_base + size).contains(&bus) {
        return Err("the edu's BAR0 is outside the bridge's 32-bit window");
    }
    let bar0 = bus - pci_base + cpu_base;

    // The MSI capability.
    if read32(cfg + PCI_COMMAND) & PCI_STATUS_CAP_LIST == 0 {
        return Err("the edu has no capability list");
    }
    let mut cap = u64::from(read32(cfg + PCI_CAP_PTR) & 0xfc);
    let mut hops = 0;
    while cap != 0 && read32(cfg + cap) & 0xff != PCI_CAP_ID_MSI {
        cap = u64::from(read32(cfg + cap) >> 8 & 0xfc);
        hops += 1;
        if hops > 48 {
            return Err("the edu's capability list loops");
        }
    }
    if cap == 0 {
        return Err("the edu has no MSI capability");
    }
    let doorbell = t.its + GITS_TRANSLATER;
    let ctrl = read32(cfg + cap);
    write32(cfg + cap + 4, doorbell as u32);
    let data = if ctrl & MSI_CTRL_64BIT != 0 {
        write32(cfg + cap + 8, (doorbell >> 32) as u32);
        cfg + cap + 0xc
    } else {
        cfg + cap + 8
    };
    write32(data, EVENT);
    write32(cfg + cap, (ctrl & !MSI_CTRL_MME) | MSI_CTRL_ENABLE);
    let command = read32(cfg + PCI_COMMAND) & 0xffff;
    write32(
        cfg + PCI_COMMAND,
        command | PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER,
    );
    if read32(cfg + cap) & MSI_CTRL_ENABLE == 0 {
        return Err("the edu's MSI enable did not stick");
    }

    lpis_on(t)?;
    its_on(t, device_id)?;
    Ok(Edu {
        bar0,
        rid,
        device_id,
    })
}

/// GICR_PROPBASER, GICR_PENDBASER and EnableLPIs on this CPU's
/// redistributor, with LPI 8192 enabled in the property table.
fn lpis_on(t: &Target) -> Result<(), &'static str> {
    let tables = tables();
    // SAFETY: TABLES is this guest's own memory, touched by nobody else
    // before the redistributor is told where it is (below).
    let (prop, pending) = unsafe {
        let prop = core::ptr::addr_of_mut!((*tables).prop) as u64;
        let pending = core::ptr::addr_of_mut!((*tables).pending) as u64;
        core::ptr::write_volatile(prop as *mut u8, LPI_PROP);
        (prop, pending)
    };
    if read32(t.redist + GICR_CTLR) & GICR_CTLR_ENABLE_LPIS != 0 {
        return Err("LPIs already enabled on the redistributor");
    }
    write64(t.redist + GICR_PROPBASER, prop | PROP_IDBITS);
    write64(t.redist + GICR_PENDBASER, pending | PENDBASER_PTZ);
    write32(t.redist + GICR_CTLR, GICR_CTLR_ENABLE_LPIS);
    if read32(t.redist + GICR_CTLR) & GICR_CTLR_ENABLE_LPIS == 0 {
        return Err("GICR_CTLR.EnableLPIs did not stick (no LPI support?)");
    }
    Ok(())
}

/// The ITS's tables and command queue, then MAPD, MAPC, MAPTI, INV, SYNC.
fn its_on(t: &Target, device_id: u32) -> Result<(), &'static str> {
    let tables = tables();
    // SAFETY: addresses of fields of this guest's own TABLES.
    let (devices, collections, queue, itt) = unsafe {
        (
            core::ptr::addr_of_mut!((*tables).devices) as u64,
            core::ptr::addr_of_mut!((*tables).collections) as u64,
            core::ptr::addr_of_mut!((*tables).queue) as u64,
            core::ptr::addr_of_mut!((*tables).itt) as u64,
        )
    };
    for n in 0..8 {
        let reg = t.its + GITS_BASER0 + 8 * n;
        let baser = read64(reg);
        let table = match baser >> 56 & 7 {
            BASER_TYPE_DEVICES => devices,
            BASER_TYPE_COLLECTIONS => collections,
            _ => continue,
        };
        write64(reg, BASER_VALID | (baser & BASER_RO_MASK) | table);
    }
    write64(t.its + GITS_CBASER, BASER_VALID | queue);
    write64(t.its + GITS_CWRITER, 0);
    let ctlr = read32(t.its + GITS_CTLR);
    write32(t.its + GITS_CTLR, ctlr | GITS_CTLR_ENABLED);

    // PTA = 0 on both QEMU and Pinfold: RDbase is the processor number.
    if read64(t.its + GITS_TYPER) & 1 << 19 != 0 {
        return Err("GITS_TYPER.PTA = 1 (RDbase as an address) is not handled");
    }
    let processor = read64(t.redist + GICR_TYPER) >> 8 & 0xffff;
    let rdbase = processor << 16;
    let dev = u64::from(device_id) << 32;
    let commands: [[u64; 4]; 5] = [
        // MAPD: 1 EventID bit (Size = bits - 1 = 0), ITT, Valid.
        [CMD_MAPD | dev, 0, 1 << 63 | itt, 0],
        [CMD_MAPC, 0, 1 << 63 | rdbase | ICID, 0],
        [
            CMD_MAPTI | dev,
            u64::from(EVENT) | u64::from(LPI) << 32,
            ICID,
            0,
        ],
        [CMD_INV | dev, u64::from(EVENT), 0, 0],
        [CMD_SYNC, 0, rdbase, 0],
    ];
    for (i, cmd) in commands.iter().enumerate() {
        for (j, &word) in cmd.iter().enumerate() {
            // SAFETY: inside TABLES.queue (5 commands of 32 bytes < 4 KiB).
            unsafe {
                core::ptr::write_volatile((queue + 32 * i as u64 + 8 * j as u64) as *mut u64, word)
            };
        }
    }
    let end = 32 * commands.len() as u64;
    debug_assert!(end < QUEUE_BYTES);
    write64(t.its + GITS_CWRITER, end);
    for _ in 0..POLL_LIMIT {
        let creadr = read64(t.its + GITS_CREADR);
        if creadr & 1 != 0 {
            return Err("the ITS stalled on a command (GITS_CREADR.Stalled)");
        }
        if creadr & 0xf_ffe0 == end {
            return Ok(());
        }
    }
    Err("the ITS did not process its commands (GITS_CREADR)")
}

fn measure(edu: &Edu) {
    crate::bench::set_vbar(crate::bench::addr_of_code(bench_msi_vectors));
    let start = crate::bench::addr_of_code(bench_msi_start);
    let (raise, ack) = (edu.bar0 + EDU_IRQ_RAISE, edu.bar0 + EDU_IRQ_ACK);
    let trial = |d: u64| {
        let mut out = [0u64; 3];
        // SAFETY: the trial writes only the edu's raise register and takes
        // the MSI through bench_msi_vectors (installed above), whose handler
        // clobbers only x10, x11, x13 (caller-saved) and writes the edu's
        // ack register; `start - 4 * d` lies inside the nop sled.
        unsafe { bench_msi_trial(raise, start - 4 * d, ack, &mut out) };
        out
    };
    let mut failure = None;
    for _ in 0..WARMUP {
        let [_, at, intid] = trial(0);
        if at == 0 || intid & 0xff_ffff != u64::from(LPI) {
            failure = Some((at, intid));
        }
    }
    let mut rounds = [0u64; ROUNDS];
    if failure.is_none() {
        'rounds: for round in rounds.iter_mut() {
            for d in 0..DITHER {
                let [t0, at, intid] = trial(d);
                if at == 0 || intid & 0xff_ffff != u64::from(LPI) || at < t0 {
                    failure = Some((at, intid));
                    break 'rounds;
                }
                *round += at - t0;
            }
        }
    }
    crate::bench::set_vbar(crate::bench::addr_of_code(crate::exception_vectors));
    if let Some((at, intid)) = failure {
        return println!(
            "PROBE bench msi: skipped (MSI not taken: handler stamp {at}, INTID {intid}; edu \
             RID 0x{:x} DeviceID 0x{:x} LPI {LPI})",
            edu.rid, edu.device_id
        );
    }
    let sum: u64 = rounds.iter().sum();
    rounds.sort_unstable();
    println!(
        "PROBE bench msi: rounds={ROUNDS} dither={DITHER} warmup={WARMUP} min_round_ticks={} \
         median_round_ticks={} sum_ticks={sum} lpi={LPI} device_id=0x{:x} rid=0x{:x}",
        rounds[0],
        rounds[ROUNDS / 2],
        edu.device_id,
        edu.rid
    );
}
