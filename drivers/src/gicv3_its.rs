//! The physical GICv3 ITS (Arm IHI 0069, chapter 5 and 12.19) and the
//! redistributors' physical LPIs, as the hypervisor drives them. What the
//! tables and commands are is decided in `pinfold_hv::vgic::pits` (host
//! tested): the flat device and collection tables sized from GITS_TYPER and
//! GITS_BASER<n>, the command encoding, the LPI pool. This file only
//! touches the registers: it points the GITS_BASER<n> tables and the
//! GITS_CBASER command queue at zeroed hypervisor memory (identity mapped
//! at EL2, the caller's allocator), queues commands at GITS_CWRITER and
//! waits for GITS_CREADR, and programs a redistributor's GICR_PROPBASER /
//! GICR_PENDBASER / GICR_CTLR.EnableLPIs.
//!
//! Each ITS's command queue is shared by every CPU: the core keeps each
//! ITS's object behind its own lock, taken only on the slow path (a
//! guest's vITS command, a partition starting or going), never when an
//! LPI is delivered. A GICv4.1 ITS whose earlier sibling (same SVPET
//! affinity) already has a vPE table is given that table's GITS_BASER
//! value instead of one of its own (`GicV3Its::init`'s `shared_vpe`).
//!
//! Memory attributes: Inner Shareable, Normal Inner/Outer write-back (the
//! EL2 heap's attributes). An ITS that reads back Non-shareable would need
//! cache maintenance on every table and command write; this driver then
//! refuses the ITS ([`ItsInitError::NotCoherent`]) instead.

use core::sync::atomic::{fence, Ordering};
use pinfold_hv::vgic::pits::{
    baser_value, cbaser_value, Baser, BaserType, ItsCmd, ItsTyper, LPI_BASE, PAGE_SIZES,
};

const GITS_CTLR: usize = 0x0000;
const GITS_TYPER: usize = 0x0008;
/// GICv4.1 (GITS_TYPER.VMAPP [40]): the ITS's affinity, Affinity [31:8].
const GITS_MPIDR: usize = 0x0018;
const GITS_TYPER_VMAPP: u64 = 1 << 40;
const GITS_CBASER: usize = 0x0080;
const GITS_CWRITER: usize = 0x0088;
const GITS_CREADR: usize = 0x0090;
const GITS_BASER0: usize = 0x0100;
const CTLR_ENABLED: u32 = 1 << 0;
const CTLR_QUIESCENT: u32 = 1 << 31;
/// Shareability [11:10] of GITS_BASER/CBASER and GICR_PROPBASER/PENDBASER.
const SHAREABILITY: u64 = 3 << 10;
/// Command queue: 16 pages of 4 KiB = 2048 commands.
const CMDQ_PAGES: usize = 16;
const CMDQ_BYTES: usize = CMDQ_PAGES * 4096;
/// Polls of GITS_CREADR before a command counts as lost.
const SPIN_LIMIT: u32 = 10_000_000;

/// Physical LPI INTID bits the hypervisor uses: 8192 LPIs (8192..16383),
/// an 8 KiB property table and 2 KiB pending tables.
pub const LPI_ID_BITS: u8 = 14;
/// Bytes of the LPI property table (one byte per LPI).
pub const PROP_TABLE_BYTES: usize = (1 << LPI_ID_BITS) - LPI_BASE as usize;
/// Bytes of one redistributor's pending table (one bit per INTID,
/// including the 8192 below the LPIs), 64 KiB aligned.
pub const PEND_TABLE_BYTES: usize = (1 << LPI_ID_BITS) / 8;
/// The property byte of every mapped LPI: priority 0xA0, enabled.
pub const LPI_CONFIG: u8 = 0xA0 | 1;

/// Why the ITS could not be set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ItsInitError {
    /// No memory for a table or the command queue.
    NoMemory,
    /// A table type needs more than a flat table of 256 pages can hold.
    TableTooLarge(usize),
    /// The ITS keeps a table Non-shareable (see the module comment).
    NotCoherent,
}

/// The physical ITS.
pub struct GicV3Its {
    base: usize,
    /// GITS_TYPER as read (the fields `typer` leaves out: SVPET, VMAPP).
    typer_raw: u64,
    typer: ItsTyper,
    cmdq: usize,
    cwriter: usize,
    /// Commands whose completion was not seen within the spin limit.
    pub timeouts: u64,
}

// SAFETY: the ITS's registers and queue are MMIO and hypervisor memory;
// the platform serialises all use of this object behind one lock.
unsafe impl Send for GicV3Its {}

fn read64(at: usize) -> u64 {
    // SAFETY: every caller passes an offset inside the ITS control frame
    // (or the queue) that `GicV3Its::new`'s caller vouched for.
    unsafe { (at as *const u64).read_volatile() }
}

fn write64(at: usize, value: u64) {
    // SAFETY: as read64.
    unsafe { (at as *mut u64).write_volatile(value) }
}

/// GITS_CTLR is a 32-bit register: a 64-bit access to it is not one the
/// architecture defines (QEMU's ITS refuses it and ignores the write).
fn read_ctlr(base: usize) -> u32 {
    // SAFETY: as read64; GITS_CTLR at offset 0 of the control frame.
    unsafe { ((base + GITS_CTLR) as *const u32).read_volatile() }
}

fn write_ctlr(base: usize, value: u32) {
    // SAFETY: as read_ctlr.
    unsafe { ((base + GITS_CTLR) as *mut u32).write_volatile(value) }
}

impl GicV3Its {
    /// # Safety
    /// `base` must be the ITS's 64 KiB control frame, mapped as device
    /// memory and used through nothing else.
    pub unsafe fn new(base: usize) -> Self {
        let typer_raw = read64(base + GITS_TYPER);
        GicV3Its {
            base,
            typer_raw,
            typer: ItsTyper::decode(typer_raw),
            cmdq: 0,
            cwriter: 0,
            timeouts: 0,
        }
    }

    pub fn typer(&self) -> ItsTyper {
        self.typer
    }

    /// GITS_TYPER as read.
    pub fn typer_raw(&self) -> u64 {
        self.typer_raw
    }

    /// GITS_MPIDR on a GICv4.1 ITS (GITS_TYPER.VMAPP); 0 on an older one,
    /// where the offset is reserved and not read.
    pub fn mpidr(&self) -> u64 {
        if self.typer_raw & GITS_TYPER_VMAPP != 0 {
            read64(self.base + GITS_MPIDR) & 0xFFFF_FFFF
        } else {
            0
        }
    }

    /// The GITS_BASER<n> of type vPE as it is now (after [`Self::init`]:
    /// the table it was given), if the ITS has one.
    pub fn vpe_baser(&self) -> Option<u64> {
        (0..8)
            .map(|n| read64(self.base + GITS_BASER0 + 8 * n))
            .find(|&b| Baser::decode(b).kind == BaserType::Vpes)
    }

    /// Disables the ITS, gives every table type it asks for a flat table
    /// from `alloc(bytes, align)` (zeroed memory, its physical address),
    /// sets up the command queue and enables it. `cpus`: collections
    /// needed. `shared_vpe`: the vPE table's GITS_BASER<n> value of an
    /// earlier sibling ITS (`pinfold_hv::vgic::v41::sibling_its`), written
    /// as it is instead of allocating a table (Linux's `its_alloc_tables`
    /// does the same); if the ITS does not keep it (Valid, address,
    /// Page_Size read back otherwise) the table is allocated as usual.
    pub fn init(
        &mut self,
        cpus: usize,
        alloc: &mut impl FnMut(usize, usize) -> Option<usize>,
        shared_vpe: Option<u64>,
    ) -> Result<(), ItsInitError> {
        let b = self.base;
        write_ctlr(b, read_ctlr(b) & !CTLR_ENABLED);
        for _ in 0..SPIN_LIMIT {
            if read_ctlr(b) & CTLR_QUIESCENT != 0 {
                break;
            }
        }
        for n in 0..8 {
            let at = b + GITS_BASER0 + 8 * n;
            let read = read64(at);
            let baser = Baser::decode(read);
            let Some(entries) = baser.entries(&self.typer, cpus) else {
                continue;
            };
            if entries == 0 {
                continue;
            }
            if let Some(shared) = shared_vpe.filter(|_| baser.kind == BaserType::Vpes) {
                write64(at, shared);
                let kept = 1 << 63 | 0x0000_FFFF_FFFF_F000 | 3 << 8;
                if read64(at) & kept == shared & kept {
                    continue;
                }
            }
            let mut done = false;
            for (code, page) in PAGE_SIZES {
                let Some(pages) = baser.pages(entries, page) else {
                    continue;
                };
                let pa = alloc(pages * page, page).ok_or(ItsInitError::NoMemory)?;
                let Some(value) = baser_value(read, pa as u64, code, pages) else {
                    continue; // above 2^48: only 64 KiB pages can name it
                };
                write64(at, value);
                let back = read64(at);
                if (back >> 8) & 3 != code {
                    continue; // this page size is not supported
                }
                if back & SHAREABILITY == 0 {
                    return Err(ItsInitError::NotCoherent);
                }
                done = true;
                break;
            }
            if !done {
                return Err(ItsInitError::TableTooLarge(n));
            }
        }
        let q = alloc(CMDQ_BYTES, 0x1_0000).ok_or(ItsInitError::NoMemory)?;
        write64(b + GITS_CBASER, cbaser_value(q as u64, CMDQ_PAGES));
        if read64(b + GITS_CBASER) & SHAREABILITY == 0 {
            return Err(ItsInitError::NotCoherent);
        }
        write64(b + GITS_CWRITER, 0);
        self.cmdq = q;
        self.cwriter = 0;
        write_ctlr(b, read_ctlr(b) | CTLR_ENABLED);
        Ok(())
    }

    /// Queues one command and waits until the ITS has read it.
    pub fn send(&mut self, cmd: &ItsCmd) {
        self.send_words(cmd.encode());
    }

    /// Queues one encoded command (a GICv4 one: `hv::vgic::v40::V4Cmd`)
    /// and waits until the ITS has read it.
    pub fn send_words(&mut self, words: [u64; 4]) {
        let slot = self.cmdq + self.cwriter;
        for (i, w) in words.iter().enumerate() {
            write64(slot + 8 * i, *w);
        }
        // The command's bytes before the CWRITER write that publishes them.
        fence(Ordering::SeqCst);
        self.cwriter = (self.cwriter + 32) % CMDQ_BYTES;
        write64(self.base + GITS_CWRITER, self.cwriter as u64);
        for _ in 0..SPIN_LIMIT {
            if read64(self.base + GITS_CREADR) as usize & 0xF_FFE0 == self.cwriter {
                return;
            }
            core::hint::spin_loop();
        }
        self.timeouts += 1;
    }
}

/// Points a redistributor at the LPI property table (`prop`, shared by
/// all CPUs) and its own pending table (`pend`, 64 KiB aligned, zeroed)
/// and sets EnableLPIs. False when LPIs were already on (tables fixed by
/// firmware or an earlier kernel: left alone) or the redistributor keeps
/// the tables Non-shareable.
///
/// # Safety
/// `rd_base` must be this CPU's redistributor RD_base frame, mapped as
/// device memory; `prop` and `pend` hypervisor memory of the sizes above
/// that nothing else uses.
pub unsafe fn enable_redist_lpis(rd_base: usize, prop: usize, pend: usize) -> bool {
    const GICR_CTLR: usize = 0x0000;
    const GICR_PROPBASER: usize = 0x0070;
    const GICR_PENDBASER: usize = 0x0078;
    // SAFETY: GICR_CTLR of the frame the caller vouched for.
    let ctlr = unsafe { ((rd_base + GICR_CTLR) as *const u32).read_volatile() };
    if ctlr & 1 != 0 {
        return false;
    }
    // IDbits = 13 (14 bits), InnerCache RaWaWb (7 << 7), Inner Shareable.
    let propbaser =
        (prop as u64 & 0x000F_FFFF_FFFF_F000) | 1 << 10 | 7 << 7 | u64::from(LPI_ID_BITS - 1);
    write64(rd_base + GICR_PROPBASER, propbaser);
    if read64(rd_base + GICR_PROPBASER) & SHAREABILITY == 0 {
        return false;
    }
    // PTZ: the table is zeroed.
    let pendbaser = (pend as u64 & 0x000F_FFFF_FFFF_0000) | 1 << 62 | 1 << 10 | 7 << 7;
    write64(rd_base + GICR_PENDBASER, pendbaser);
    fence(Ordering::SeqCst);
    // SAFETY: as above.
    unsafe { ((rd_base + GICR_CTLR) as *mut u32).write_volatile(ctlr | 1) };
    true
}
