//! SMMUv3 stage-2 DMA isolation (Arm IHI 0070, SMMU architecture version
//! 3): what the hypervisor programs so a device can reach only its
//! partition's RAM, decided here and host-tested against a fake SMMU
//! register and queue model (`smmu/tests.rs`); the platform only performs
//! the register accesses ([`SmmuRegs`]) and owns the memory the SMMU reads
//! ([`DmaMemory`]).
//!
//! - **Features** ([`Features::decode`]): SMMU_IDR0/1/5 into stage 1/2
//!   support, stream table formats, VMID width, StreamID bits, queue sizes,
//!   output address size and granules. An SMMU without stage 2 or the 4 KiB
//!   granule is refused, naming the register field.
//! - **Stream table entries** ([`ste`]): an owned stream gets Config =
//!   stage-2 translate with S2VMID = its partition's VMID and S2TTB = its
//!   DMA stage-2 root (`Partition::dma_root`: the CPU's tables, or their
//!   copy that also maps the ITS doorbell page, `its::msi_path_to`), and the S2T0SZ/S2SL0/S2IR0/S2OR0/S2SH0/S2TG/S2PS fields
//!   taken from the CPU's VTCR_EL2 (`stage2::vtcr_el2`; the STE's word 2
//!   bits [50:32] have VTCR's layout), PS capped at the SMMU's OAS; S2AA64
//!   set, S2R set (faults are recorded in the event queue, not silent).
//!   Every other stream aborts: Config = abort, and a stream beyond the
//!   table or on a bus without a level-2 table reads as an invalid STE.
//! - **Stream table** ([`StreamTable`]): two levels, SPLIT = 8 (one 16 KiB
//!   level-2 table of 256 STEs per PCI bus), so a 16-bit StreamID space
//!   costs a 2 KiB-per-256-bus level 1 plus a level 2 only for the buses
//!   that have owned streams (a linear table for QEMU's 16 StreamID bits
//!   would be the whole 4 MiB EL2 heap).
//! - **Commands** ([`CommandQueue`]): CMD_CFGI_STE after every STE change,
//!   CMD_TLBI_S12_VMALL when a partition's stage 2 changes or it goes
//!   away, CMD_SYNC (completion signalled by CMDQ_CONS passing it) after
//!   each batch; a full queue is waited for a bounded number of polls, then
//!   an error; a command error (CMDQ_CONS.ERR) is reported by name.
//! - **Reassignment** ([`Smmu::bind`]): a stream that changes owner is
//!   first made to abort (STE word 0 written, CFGI_STE, SYNC), the old
//!   VMID's TLB entries invalidated, then the new entry written words 1-7
//!   first and word 0 last, CFGI_STE, SYNC: the SMMU never sees a torn
//!   entry, and no DMA of the old owner's device uses the new owner's
//!   tables or the other way round.
//! - **Events** ([`Event::decode`], [`EventQueue::drain`]): records into
//!   "partition P's fault at IPA X, stream S" through the ownership query;
//!   an overflowed queue is acknowledged and reported (events were lost).
//! - **Models** ([`SmmuModel`], from the IORT node's Model or the DT's
//!   quirk properties): a Cavium CN99xx has no register page 1, so the
//!   event queue's PROD and CONS are at their page-1 offsets less 64 KiB
//!   (`EventQueue::prod_reg`, [`page1`]); page 1 is never touched on one.
//!   A HiSilicon Hi161x must not be sent CMD_PREFETCH_CONFIG; no model is
//!   sent one ([`Command`] has none: prefetching is an optimisation).
//! - **Who owns stream X** ([`FunctionOwners`]): a query over the ownership
//!   model, from the host bridge's `iommu-map` (StreamID -> requester ID)
//!   and the partitions' PCI ownership (today: the partition that owns the
//!   host bridge owns every requester ID on it; per-function assignment
//!   replaces the one implementation, `system::System`).

use crate::addr::PhysAddr;
pub use crate::dtb::SmmuModel;
use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::fmt;

mod host;
#[cfg(test)]
pub(crate) mod tests;

pub use host::{smmu_bases, SmmuState, SmmuUnit};

// Register offsets (IHI 0070, 6.2 and 6.3). Page 1 aliases live 64 KiB up.
pub const IDR0: u32 = 0x00;
pub const IDR1: u32 = 0x04;
pub const IDR5: u32 = 0x14;
pub const CR0: u32 = 0x20;
pub const CR0ACK: u32 = 0x24;
pub const CR1: u32 = 0x28;
pub const CR2: u32 = 0x2c;
pub const GBPA: u32 = 0x44;
pub const IRQ_CTRL: u32 = 0x50;
pub const IRQ_CTRLACK: u32 = 0x54;
pub const GERROR: u32 = 0x60;
pub const GERRORN: u32 = 0x64;
pub const STRTAB_BASE: u32 = 0x80;
pub const STRTAB_BASE_CFG: u32 = 0x88;
pub const CMDQ_BASE: u32 = 0x90;
pub const CMDQ_PROD: u32 = 0x98;
pub const CMDQ_CONS: u32 = 0x9c;
pub const EVENTQ_BASE: u32 = 0xa0;
pub const EVENTQ_PROD: u32 = 0x1_00a8;
pub const EVENTQ_CONS: u32 = 0x1_00ac;
/// Register page 1's offset from page 0.
pub const PAGE1: u32 = 0x1_0000;

/// Where page-1 register `offset` is on an SMMU of `model`: 64 KiB lower
/// when it has page 0 only.
pub fn page1(offset: u32, model: SmmuModel) -> u32 {
    if model.page0_regs_only() {
        offset - PAGE1
    } else {
        offset
    }
}

pub const CR0_SMMUEN: u32 = 1 << 0;
pub const CR0_EVTQEN: u32 = 1 << 2;
pub const CR0_CMDQEN: u32 = 1 << 3;
pub const GBPA_ABORT: u32 = 1 << 20;
pub const GBPA_UPDATE: u32 = 1 << 31;
pub const GERROR_CMDQ_ERR: u32 = 1 << 0;
/// CR1: queues and tables inner/outer write-back, inner shareable.
const CR1_WB_ISH: u32 = 0b01 | 0b01 << 2 | 0b11 << 4 | 0b01 << 6 | 0b01 << 8 | 0b11 << 10;
/// CR2: RECINVSID (record C_BAD_STREAMID), PTM (no broadcast TLB
/// maintenance is relied on).
const CR2_RECINVSID_PTM: u32 = 1 << 1 | 1 << 2;
/// STRTAB_BASE_CFG.FMT = 2-level.
const STRTAB_FMT_2LVL: u32 = 1 << 16;
/// Read/write-allocate hint bit of the base registers.
const BASE_RA: u64 = 1 << 62;
const ADDR_MASK_51_6: u64 = ((1 << 52) - 1) & !0x3f;
const ADDR_MASK_51_5: u64 = ((1 << 52) - 1) & !0x1f;

/// StreamIDs per level-2 table: one PCI bus (SPLIT).
pub const SPLIT: u32 = 8;
/// Bytes of one STE.
pub const STE_BYTES: u64 = 64;
/// Bytes of one command and one event record.
pub const CMD_BYTES: u64 = 16;
pub const EVENT_BYTES: u64 = 32;
/// Entries of the queues we make (at most what IDR1 allows).
pub const CMDQ_LOG2: u8 = 8;
pub const EVTQ_LOG2: u8 = 7;
/// Register polls before a wait is given up (CR0ACK, GBPA, a full command
/// queue, CMD_SYNC). QEMU completes each at once; hardware in microseconds.
pub const POLLS: u32 = 1_000_000;

/// The SMMU's registers, as the platform accesses them (MMIO).
pub trait SmmuRegs {
    fn read32(&mut self, offset: u32) -> u32;
    fn write32(&mut self, offset: u32, value: u32);
    fn write64(&mut self, offset: u32, value: u64);
}

/// Memory the SMMU reads and writes: the stream table and the queues.
pub trait DmaMemory {
    /// Zeroed, `align`-aligned, physically contiguous memory.
    fn alloc_zeroed(&mut self, size: u64, align: u64) -> Option<PhysAddr>;
    fn read_u64(&self, at: PhysAddr) -> u64;
    fn write_u64(&mut self, at: PhysAddr, value: u64);
    /// Makes the writes to `[at, at + len)` visible to the SMMU (a clean to
    /// the point of coherency unless the SMMU is coherent; a barrier).
    fn publish(&mut self, at: PhysAddr, len: u64);
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmmuError {
    /// IDR0.S2P = 0: no stage-2 translation (QEMU 7.2's model).
    NoStage2,
    /// IDR5.GRAN4K = 0: the stage-2 tables use 4 KiB granules.
    No4kGranule,
    /// IDR0.ST_LEVEL says no 2-level stream table.
    NoTwoLevelTable,
    /// IDR1.TABLES_PRESET or QUEUES_PRESET: fixed bases we cannot place.
    Preset,
    /// A register never acknowledged: which one.
    Timeout(&'static str),
    /// The command queue stayed full for POLLS polls.
    CommandQueueFull,
    /// CMDQ_CONS.ERR after a command: the code, and the opcode at CONS.
    Command { code: u8, opcode: u8 },
    /// No memory for the stream table or a queue.
    NoMemory,
    /// A StreamID at or beyond 2^IDR1.SIDSIZE.
    StreamIdTooLarge(u32),
}

impl fmt::Display for SmmuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SmmuError::NoStage2 => write!(f, "SMMU_IDR0.S2P is 0: no stage-2 translation"),
            SmmuError::No4kGranule => write!(f, "SMMU_IDR5.GRAN4K is 0: no 4 KiB granule"),
            SmmuError::NoTwoLevelTable => {
                write!(f, "SMMU_IDR0.ST_LEVEL is 0: no 2-level stream table")
            }
            SmmuError::Preset => {
                write!(
                    f,
                    "SMMU_IDR1.TABLES_PRESET/QUEUES_PRESET: fixed table or queue bases"
                )
            }
            SmmuError::Timeout(reg) => write!(f, "{reg} was not acknowledged"),
            SmmuError::CommandQueueFull => write!(f, "the command queue stayed full"),
            SmmuError::Command { code, opcode } => write!(
                f,
                "CMDQ_CONS.ERR = {code} ({}) at command {opcode:#04x}",
                match code {
                    1 => "CERROR_ILL",
                    2 => "CERROR_ABT",
                    3 => "CERROR_ATC_INV_SYNC",
                    _ => "reserved",
                }
            ),
            SmmuError::NoMemory => write!(f, "no memory for the stream table or a queue"),
            SmmuError::StreamIdTooLarge(sid) => {
                write!(f, "StreamID {sid:#x} is beyond SMMU_IDR1.SIDSIZE")
            }
        }
    }
}

fn field(v: u32, lo: u32, bits: u32) -> u32 {
    (v >> lo) & ((1 << bits) - 1)
}

/// What SMMU_IDR0, IDR1 and IDR5 say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Features {
    pub stage1: bool,
    pub stage2: bool,
    pub two_level_table: bool,
    pub vmid16: bool,
    pub coherent: bool,
    /// Bits of StreamID (IDR1.SIDSIZE).
    pub sid_bits: u8,
    /// log2 of the largest command and event queues.
    pub cmdq_log2: u8,
    pub evtq_log2: u8,
    /// Output address size in bits (IDR5.OAS).
    pub oas_bits: u8,
    /// VTCR.PS encoding of `oas_bits`.
    pub oas_ps: u8,
    pub gran4k: bool,
    pub tables_preset: bool,
    pub queues_preset: bool,
}

impl Features {
    pub fn decode(idr0: u32, idr1: u32, idr5: u32) -> Features {
        let oas_ps = field(idr5, 0, 3) as u8;
        Features {
            stage2: idr0 & 1 != 0,
            stage1: idr0 & 2 != 0,
            coherent: idr0 & (1 << 4) != 0,
            vmid16: idr0 & (1 << 18) != 0,
            two_level_table: field(idr0, 27, 2) == 1,
            sid_bits: field(idr1, 0, 6) as u8,
            evtq_log2: field(idr1, 16, 5) as u8,
            cmdq_log2: field(idr1, 21, 5) as u8,
            queues_preset: idr1 & (1 << 29) != 0,
            tables_preset: idr1 & (1 << 30) != 0,
            oas_bits: match oas_ps {
                0 => 32,
                1 => 36,
                2 => 40,
                3 => 42,
                4 => 44,
                5 => 48,
                _ => 52,
            },
            oas_ps,
            gran4k: idr5 & (1 << 4) != 0,
        }
    }

    /// Whether this SMMU can do what Pinfold needs, naming the field that
    /// says no.
    pub fn check(&self) -> Result<(), SmmuError> {
        if !self.stage2 {
            return Err(SmmuError::NoStage2);
        }
        if !self.gran4k {
            return Err(SmmuError::No4kGranule);
        }
        if !self.two_level_table {
            return Err(SmmuError::NoTwoLevelTable);
        }
        if self.tables_preset || self.queues_preset {
            return Err(SmmuError::Preset);
        }
        Ok(())
    }
}

/// The stage 2 a stream translates through: its partition's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Binding {
    /// Partition index (the ABI index).
    pub partition: usize,
    pub vmid: u16,
    pub stage2_root: PhysAddr,
}

/// STE.Config values (IHI 0070, 5.2).
const CONFIG_ABORT: u64 = 0b000;
const CONFIG_S2_TRANSLATE: u64 = 0b110;
const STE_V: u64 = 1;
/// Word 1: SHCFG = use incoming shareability.
const STE1_SHCFG_INCOMING: u64 = 0b01 << 44;
/// Word 2 bits.
const STE2_S2AA64: u64 = 1 << 51;
const STE2_S2R: u64 = 1 << 58;
/// Word 2 bits [50:32] have VTCR_EL2[18:0]'s layout: T0SZ, SL0, IRGN0,
/// ORGN0, SH0, TG0, PS.
const VTCR_S2_FIELDS: u64 = (1 << 19) - 1;
const VTCR_PS_SHIFT: u32 = 16;

/// The STE words for `binding` (None: abort). `vtcr` is the CPU's
/// VTCR_EL2 for the same tables; its PS is capped at the SMMU's OAS.
pub fn ste(binding: Option<Binding>, vtcr: u64, features: &Features) -> [u64; 8] {
    let mut w = [0u64; 8];
    match binding {
        None => w[0] = STE_V | CONFIG_ABORT << 1,
        Some(b) => {
            let ps = ((vtcr >> VTCR_PS_SHIFT) & 0b111).min(u64::from(features.oas_ps));
            let s2 = (vtcr & VTCR_S2_FIELDS & !(0b111 << VTCR_PS_SHIFT)) | ps << VTCR_PS_SHIFT;
            w[0] = STE_V | CONFIG_S2_TRANSLATE << 1;
            w[1] = STE1_SHCFG_INCOMING;
            w[2] = u64::from(b.vmid) | s2 << 32 | STE2_S2AA64 | STE2_S2R;
            w[3] = b.stage2_root.0 & ((1 << 52) - 1) & !0xf;
        }
    }
    w
}

/// What an STE says, read back (for the fake and the tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SteConfig {
    Invalid,
    Abort,
    Stage2 {
        vmid: u16,
        root: u64,
        t0sz: u8,
        sl0: u8,
        ps: u8,
    },
    Other(u8),
}

pub fn decode_ste(w: &[u64; 8]) -> SteConfig {
    if w[0] & STE_V == 0 {
        return SteConfig::Invalid;
    }
    match (w[0] >> 1) & 0b111 {
        CONFIG_ABORT => SteConfig::Abort,
        CONFIG_S2_TRANSLATE => SteConfig::Stage2 {
            vmid: w[2] as u16,
            root: w[3] & ((1 << 52) - 1) & !0xf,
            t0sz: ((w[2] >> 32) & 0x3f) as u8,
            sl0: ((w[2] >> 38) & 0b11) as u8,
            ps: ((w[2] >> 48) & 0b111) as u8,
        },
        c => SteConfig::Other(c as u8),
    }
}

// Commands (IHI 0070, 4.3-4.7): opcode in word 0 bits [7:0].
pub const CMD_CFGI_STE: u8 = 0x03;
pub const CMD_CFGI_ALL: u8 = 0x04;
pub const CMD_TLBI_EL2_ALL: u8 = 0x20;
pub const CMD_TLBI_S12_VMALL: u8 = 0x28;
pub const CMD_TLBI_NSNH_ALL: u8 = 0x30;
pub const CMD_SYNC: u8 = 0x46;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    CfgiSte(u32),
    CfgiAll,
    TlbiS12Vmall(u16),
    TlbiNsnhAll,
    TlbiEl2All,
    Sync,
}

impl Command {
    pub fn encode(self) -> [u64; 2] {
        match self {
            // Leaf = 1: only the STE itself changed, not a level-1 pointer.
            Command::CfgiSte(sid) => [u64::from(CMD_CFGI_STE) | u64::from(sid) << 32, 1],
            // Range = 31: every StreamID.
            Command::CfgiAll => [u64::from(CMD_CFGI_ALL), 31],
            Command::TlbiS12Vmall(vmid) => {
                [u64::from(CMD_TLBI_S12_VMALL) | u64::from(vmid) << 32, 0]
            }
            Command::TlbiNsnhAll => [u64::from(CMD_TLBI_NSNH_ALL), 0],
            Command::TlbiEl2All => [u64::from(CMD_TLBI_EL2_ALL), 0],
            // CS = 0 (no interrupt, no event): completion is CONS passing it.
            Command::Sync => [u64::from(CMD_SYNC), 0],
        }
    }

    pub fn decode(w: [u64; 2]) -> Option<Command> {
        Some(match w[0] as u8 {
            CMD_CFGI_STE => Command::CfgiSte((w[0] >> 32) as u32),
            CMD_CFGI_ALL => Command::CfgiAll,
            CMD_TLBI_S12_VMALL => Command::TlbiS12Vmall((w[0] >> 32) as u16),
            CMD_TLBI_NSNH_ALL => Command::TlbiNsnhAll,
            CMD_TLBI_EL2_ALL => Command::TlbiEl2All,
            CMD_SYNC => Command::Sync,
            _ => return None,
        })
    }
}

/// A queue index with its wrap bit (bit `log2`), as PROD and CONS hold it.
fn q_full(prod: u32, cons: u32, log2: u8) -> bool {
    let mask = (1u32 << log2) - 1;
    prod & mask == cons & mask && (prod >> log2) & 1 != (cons >> log2) & 1
}

fn q_inc(i: u32, log2: u8) -> u32 {
    (i + 1) & ((2u32 << log2) - 1)
}

/// Whether index `cons` has gone past `target` (both with wrap bits).
fn q_passed(cons: u32, target: u32, log2: u8) -> bool {
    // Distance from target to cons, modulo twice the size; a consumer is
    // never more than one queue's length ahead of what we produced.
    let span = 2u32 << log2;
    let d = cons.wrapping_sub(target) & (span - 1);
    d != 0 && d <= 1 << log2
}

const CMDQ_CONS_ERR_SHIFT: u32 = 24;

/// The command queue: we produce, the SMMU consumes.
#[derive(Debug)]
pub struct CommandQueue {
    pub base: PhysAddr,
    pub log2: u8,
    prod: u32,
}

impl CommandQueue {
    pub fn new(mem: &mut (impl DmaMemory + ?Sized), log2: u8) -> Result<Self, SmmuError> {
        let bytes = CMD_BYTES << log2;
        let base = mem
            .alloc_zeroed(bytes, bytes.max(32))
            .ok_or(SmmuError::NoMemory)?;
        Ok(CommandQueue {
            base,
            log2,
            prod: 0,
        })
    }

    pub fn base_register(&self) -> u64 {
        BASE_RA | (self.base.0 & ADDR_MASK_51_5) | u64::from(self.log2)
    }

    fn index_mask(&self) -> u32 {
        (2u32 << self.log2) - 1
    }

    fn check_error(
        &self,
        regs: &mut (impl SmmuRegs + ?Sized),
        mem: &(impl DmaMemory + ?Sized),
    ) -> Result<u32, SmmuError> {
        let cons = regs.read32(CMDQ_CONS);
        let code = ((cons >> CMDQ_CONS_ERR_SHIFT) & 0x7f) as u8;
        if code != 0
            || regs.read32(GERROR) & GERROR_CMDQ_ERR != regs.read32(GERRORN) & GERROR_CMDQ_ERR
        {
            let slot = cons & ((1 << self.log2) - 1);
            let opcode = mem.read_u64(self.base.add(u64::from(slot) * CMD_BYTES)) as u8;
            return Err(SmmuError::Command { code, opcode });
        }
        Ok(cons & self.index_mask())
    }

    /// Writes `cmds` into the queue and publishes PROD after each batch
    /// that fits, waiting (bounded) while the queue is full.
    pub fn submit(
        &mut self,
        regs: &mut (impl SmmuRegs + ?Sized),
        mem: &mut (impl DmaMemory + ?Sized),
        cmds: &[Command],
    ) -> Result<(), SmmuError> {
        let mut written = 0usize;
        while written < cmds.len() {
            let mut cons = self.check_error(regs, mem)?;
            let mut polls = 0;
            while q_full(self.prod, cons, self.log2) {
                // What is written so far must be visible before waiting.
                regs.write32(CMDQ_PROD, self.prod);
                polls += 1;
                if polls > POLLS {
                    return Err(SmmuError::CommandQueueFull);
                }
                cons = self.check_error(regs, mem)?;
            }
            while written < cmds.len() && !q_full(self.prod, cons, self.log2) {
                let slot = self.prod & ((1 << self.log2) - 1);
                let at = self.base.add(u64::from(slot) * CMD_BYTES);
                let w = cmds[written].encode();
                mem.write_u64(at, w[0]);
                mem.write_u64(at.add(8), w[1]);
                mem.publish(at, CMD_BYTES);
                self.prod = q_inc(self.prod, self.log2);
                written += 1;
            }
            regs.write32(CMDQ_PROD, self.prod);
        }
        Ok(())
    }

    /// `cmds` then CMD_SYNC, waiting until the SMMU consumed the sync (so
    /// every command before it has taken effect).
    pub fn submit_and_sync(
        &mut self,
        regs: &mut (impl SmmuRegs + ?Sized),
        mem: &mut (impl DmaMemory + ?Sized),
        cmds: &[Command],
    ) -> Result<(), SmmuError> {
        self.submit(regs, mem, cmds)?;
        let sync_at = self.prod;
        self.submit(regs, mem, &[Command::Sync])?;
        for _ in 0..POLLS {
            let cons = self.check_error(regs, mem)?;
            if q_passed(cons, sync_at, self.log2) {
                return Ok(());
            }
        }
        Err(SmmuError::Timeout("CMDQ_CONS (CMD_SYNC)"))
    }
}

// Event records (IHI 0070, 7.3): ID in word 0 bits [7:0], StreamID in
// bits [63:32].
pub const F_UUT: u8 = 0x01;
pub const C_BAD_STREAMID: u8 = 0x02;
pub const F_STE_FETCH: u8 = 0x03;
pub const C_BAD_STE: u8 = 0x04;
pub const F_STREAM_DISABLED: u8 = 0x06;
pub const F_TRANSL_FORBIDDEN: u8 = 0x07;
pub const F_WALK_EABT: u8 = 0x0b;
pub const F_TRANSLATION: u8 = 0x10;
pub const F_ADDR_SIZE: u8 = 0x11;
pub const F_ACCESS: u8 = 0x12;
pub const F_PERMISSION: u8 = 0x13;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// No translation for the IPA (outside the partition's stage 2).
    Translation,
    Permission,
    AddrSize,
    Access,
    WalkExternalAbort,
    /// A StreamID beyond the stream table.
    BadStreamId,
    /// An invalid STE (a stream nobody owns, on a bus with no table).
    BadSte,
    StreamDisabled,
    TranslationForbidden,
    Other(u8),
}

impl EventKind {
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Translation => "F_TRANSLATION",
            EventKind::Permission => "F_PERMISSION",
            EventKind::AddrSize => "F_ADDR_SIZE",
            EventKind::Access => "F_ACCESS",
            EventKind::WalkExternalAbort => "F_WALK_EABT",
            EventKind::BadStreamId => "C_BAD_STREAMID",
            EventKind::BadSte => "C_BAD_STE",
            EventKind::StreamDisabled => "F_STREAM_DISABLED",
            EventKind::TranslationForbidden => "F_TRANSL_FORBIDDEN",
            EventKind::Other(_) => "event",
        }
    }
}

/// One event record, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    pub id: u8,
    pub kind: EventKind,
    pub sid: u32,
    /// The transaction's input address: for a stream with stage 1
    /// bypassed, the IPA the device used (translation, address size,
    /// access and permission faults; 0 for the others).
    pub addr: u64,
    /// The access was a read (RnW).
    pub read: bool,
    /// The fault was at stage 2.
    pub stage2: bool,
}

impl Event {
    pub fn decode(w: [u64; 4]) -> Event {
        let id = w[0] as u8;
        let kind = match id {
            F_TRANSLATION => EventKind::Translation,
            F_PERMISSION => EventKind::Permission,
            F_ADDR_SIZE => EventKind::AddrSize,
            F_ACCESS => EventKind::Access,
            F_WALK_EABT => EventKind::WalkExternalAbort,
            C_BAD_STREAMID => EventKind::BadStreamId,
            C_BAD_STE => EventKind::BadSte,
            F_STREAM_DISABLED => EventKind::StreamDisabled,
            F_TRANSL_FORBIDDEN => EventKind::TranslationForbidden,
            other => EventKind::Other(other),
        };
        let has_addr = matches!(
            kind,
            EventKind::Translation
                | EventKind::Permission
                | EventKind::AddrSize
                | EventKind::Access
        );
        Event {
            id,
            kind,
            sid: (w[0] >> 32) as u32,
            addr: if has_addr { w[2] } else { 0 },
            read: has_addr && w[1] & (1 << 35) != 0,
            stage2: has_addr && w[1] & (1 << 39) != 0,
        }
    }

    /// Encodes a record (the fake SMMU's side, and tests).
    pub fn encode(id: u8, sid: u32, addr: u64, read: bool) -> [u64; 4] {
        [
            u64::from(id) | u64::from(sid) << 32,
            u64::from(read) << 35 | 1 << 39,
            addr,
            addr & ((1 << 52) - 1) & !0xfff,
        ]
    }
}

const EVTQ_OVFLG: u32 = 1 << 31;

/// The event queue: the SMMU produces, we consume.
#[derive(Debug)]
pub struct EventQueue {
    pub base: PhysAddr,
    pub log2: u8,
    cons: u32,
    /// EVENTQ_PROD's and EVENTQ_CONS's offsets on this SMMU ([`page1`]).
    pub prod_reg: u32,
    pub cons_reg: u32,
}

/// What one drain found.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drained {
    pub events: u32,
    /// PROD.OVFLG differed from our acknowledgement: records were lost
    /// since the last drain.
    pub overflowed: bool,
}

impl EventQueue {
    pub fn new(
        mem: &mut (impl DmaMemory + ?Sized),
        log2: u8,
        model: SmmuModel,
    ) -> Result<Self, SmmuError> {
        let bytes = EVENT_BYTES << log2;
        let base = mem
            .alloc_zeroed(bytes, bytes.max(32))
            .ok_or(SmmuError::NoMemory)?;
        Ok(EventQueue {
            base,
            log2,
            cons: 0,
            prod_reg: page1(EVENTQ_PROD, model),
            cons_reg: page1(EVENTQ_CONS, model),
        })
    }

    pub fn base_register(&self) -> u64 {
        BASE_RA | (self.base.0 & ADDR_MASK_51_5) | u64::from(self.log2)
    }

    /// Reads every record the SMMU has produced, at most one queue's
    /// worth per call, and gives each to `each`.
    pub fn drain(
        &mut self,
        regs: &mut (impl SmmuRegs + ?Sized),
        mem: &(impl DmaMemory + ?Sized),
        mut each: impl FnMut(Event),
    ) -> Drained {
        let mask = (2u32 << self.log2) - 1;
        let prod_reg = regs.read32(self.prod_reg);
        let prod = prod_reg & mask;
        let mut out = Drained::default();
        let mut n = 0u32;
        while self.cons & mask != prod && n < 1 << self.log2 {
            let slot = self.cons & ((1 << self.log2) - 1);
            let at = self.base.add(u64::from(slot) * EVENT_BYTES);
            let w = [
                mem.read_u64(at),
                mem.read_u64(at.add(8)),
                mem.read_u64(at.add(16)),
                mem.read_u64(at.add(24)),
            ];
            each(Event::decode(w));
            // The increment keeps OVACKFLG (bit 31).
            self.cons = (self.cons & !mask) | q_inc(self.cons & mask, self.log2);
            n += 1;
        }
        out.events = n;
        // Overflow: OVFLG toggles; acknowledging is copying it to CONS.
        let ack = self.cons & EVTQ_OVFLG;
        if prod_reg & EVTQ_OVFLG != ack {
            out.overflowed = true;
            self.cons = (self.cons & mask) | (prod_reg & EVTQ_OVFLG);
        }
        regs.write32(self.cons_reg, self.cons);
        out
    }
}

/// The two-level stream table.
#[derive(Debug)]
pub struct StreamTable {
    pub l1: PhysAddr,
    /// Level-1 descriptors (2^(sid_bits - SPLIT)).
    pub l1_entries: u32,
    sid_bits: u8,
    l2: BTreeMap<u32, PhysAddr>,
}

/// Level-1 descriptor: L2Ptr[51:6], Span[4:0] = SPLIT + 1.
fn l1_desc(l2: PhysAddr) -> u64 {
    (l2.0 & ADDR_MASK_51_6) | u64::from(SPLIT + 1)
}

impl StreamTable {
    pub fn new(mem: &mut (impl DmaMemory + ?Sized), sid_bits: u8) -> Result<Self, SmmuError> {
        let sid_bits = sid_bits.max(SPLIT as u8);
        let l1_entries = 1u32 << (u32::from(sid_bits) - SPLIT);
        let bytes = u64::from(l1_entries) * 8;
        let l1 = mem
            .alloc_zeroed(bytes, bytes.max(64))
            .ok_or(SmmuError::NoMemory)?;
        mem.publish(l1, bytes);
        Ok(StreamTable {
            l1,
            l1_entries,
            sid_bits,
            l2: BTreeMap::new(),
        })
    }

    pub fn base_register(&self) -> u64 {
        BASE_RA | (self.l1.0 & ADDR_MASK_51_6)
    }

    pub fn base_cfg(&self) -> u32 {
        STRTAB_FMT_2LVL | SPLIT << 6 | u32::from(self.sid_bits)
    }

    /// Where `sid`'s STE is, if its level-2 table exists.
    pub fn ste_addr(&self, sid: u32) -> Option<PhysAddr> {
        let l2 = self.l2.get(&(sid >> SPLIT))?;
        Some(l2.add(u64::from(sid & ((1 << SPLIT) - 1)) * STE_BYTES))
    }

    /// `sid`'s STE, making its level-2 table (every entry abort) if it has
    /// none. The new level-1 descriptor is published, ready for
    /// CMD_CFGI_STE (which also re-reads level 1).
    fn ste_addr_or_make(
        &mut self,
        mem: &mut (impl DmaMemory + ?Sized),
        sid: u32,
        abort: &[u64; 8],
    ) -> Result<PhysAddr, SmmuError> {
        if sid >> self.sid_bits != 0 {
            return Err(SmmuError::StreamIdTooLarge(sid));
        }
        let span = sid >> SPLIT;
        if !self.l2.contains_key(&span) {
            let bytes = STE_BYTES << SPLIT;
            let l2 = mem.alloc_zeroed(bytes, bytes).ok_or(SmmuError::NoMemory)?;
            for i in 0..(1u64 << SPLIT) {
                for (k, w) in abort.iter().enumerate() {
                    mem.write_u64(l2.add(i * STE_BYTES + 8 * k as u64), *w);
                }
            }
            mem.publish(l2, bytes);
            let at = self.l1.add(u64::from(span) * 8);
            mem.write_u64(at, l1_desc(l2));
            mem.publish(at, 8);
            self.l2.insert(span, l2);
        }
        Ok(self.ste_addr(sid).unwrap_or(self.l1))
    }

    pub fn read(&self, mem: &(impl DmaMemory + ?Sized), sid: u32) -> Option<[u64; 8]> {
        let at = self.ste_addr(sid)?;
        let mut w = [0u64; 8];
        for (k, x) in w.iter_mut().enumerate() {
            *x = mem.read_u64(at.add(8 * k as u64));
        }
        Some(w)
    }
}

/// Who owns a PCI requester ID: the query over the ownership model the
/// SMMU's entries follow.
pub trait FunctionOwners {
    /// The stage 2 DMA from requester ID `rid` (bus << 8 | devfn) on the
    /// host bridge goes through, or None (the stream aborts).
    fn owner(&self, rid: u16) -> Option<Binding>;
}

/// One `iommu-map` entry (or an IORT ID mapping): `len` requester IDs
/// from `rid_base` are StreamIDs from `sid_base` at the SMMU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdMap {
    pub rid_base: u32,
    pub sid_base: u32,
    pub len: u32,
}

/// The StreamID of requester ID `rid`, if a map covers it.
pub fn rid_to_sid(maps: &[IdMap], rid: u32) -> Option<u32> {
    maps.iter()
        .find(|m| rid >= m.rid_base && rid - m.rid_base < m.len)
        .map(|m| m.sid_base + (rid - m.rid_base))
}

/// The requester ID behind StreamID `sid`, if a map produces it.
pub fn sid_to_rid(maps: &[IdMap], sid: u32) -> Option<u32> {
    maps.iter()
        .find(|m| sid >= m.sid_base && sid - m.sid_base < m.len)
        .map(|m| m.rid_base + (sid - m.sid_base))
}

/// A fault the event queue reported, attributed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DmaFault {
    pub event: Event,
    /// The partition that owns the stream (its fault), or None.
    pub partition: Option<usize>,
}

/// Counters of the SMMU's work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SmmuStats {
    pub events: u64,
    pub overflows: u64,
    pub ste_writes: u64,
    pub tlb_invalidations: u64,
}

/// One SMMU, programmed: the stream table, the queues, and the binding of
/// every stream whose entry is not the default abort.
#[derive(Debug)]
pub struct Smmu {
    pub model: SmmuModel,
    pub features: Features,
    pub cmdq: CommandQueue,
    pub evtq: EventQueue,
    pub table: StreamTable,
    vtcr: u64,
    bound: BTreeMap<u32, Binding>,
    pub stats: SmmuStats,
}

fn wait_ack(
    regs: &mut (impl SmmuRegs + ?Sized),
    reg: u32,
    want: impl Fn(u32) -> bool,
    name: &'static str,
) -> Result<(), SmmuError> {
    for _ in 0..POLLS {
        if want(regs.read32(reg)) {
            return Ok(());
        }
    }
    Err(SmmuError::Timeout(name))
}

fn set_cr0(regs: &mut (impl SmmuRegs + ?Sized), value: u32) -> Result<(), SmmuError> {
    regs.write32(CR0, value);
    wait_ack(regs, CR0ACK, |v| v & 0xf == value & 0xf, "SMMU_CR0ACK")
}

impl Smmu {
    /// Programs the SMMU from reset (or whatever firmware left): every
    /// unknown stream aborts from the first write (GBPA.ABORT, then
    /// SMMUEN with an all-abort table), queues and tables placed, caches
    /// invalidated. `vtcr` is the CPU's VTCR_EL2 for the stage-2 tables;
    /// `model` places the page-1 registers.
    pub fn init(
        regs: &mut (impl SmmuRegs + ?Sized),
        mem: &mut (impl DmaMemory + ?Sized),
        vtcr: u64,
        model: SmmuModel,
    ) -> Result<Smmu, SmmuError> {
        let features = Features::decode(regs.read32(IDR0), regs.read32(IDR1), regs.read32(IDR5));
        features.check()?;
        // Incoming transactions abort while the SMMU is disabled.
        regs.write32(GBPA, GBPA_UPDATE | GBPA_ABORT);
        wait_ack(regs, GBPA, |v| v & GBPA_UPDATE == 0, "SMMU_GBPA.UPDATE")?;
        set_cr0(regs, 0)?;
        let cmdq = CommandQueue::new(mem, CMDQ_LOG2.min(features.cmdq_log2))?;
        let evtq = EventQueue::new(mem, EVTQ_LOG2.min(features.evtq_log2), model)?;
        let table = StreamTable::new(mem, features.sid_bits)?;
        regs.write32(CR1, CR1_WB_ISH);
        regs.write32(CR2, CR2_RECINVSID_PTM);
        regs.write64(STRTAB_BASE, table.base_register());
        regs.write32(STRTAB_BASE_CFG, table.base_cfg());
        regs.write64(CMDQ_BASE, cmdq.base_register());
        regs.write32(CMDQ_PROD, 0);
        regs.write32(CMDQ_CONS, 0);
        regs.write64(EVENTQ_BASE, evtq.base_register());
        regs.write32(evtq.prod_reg, 0);
        regs.write32(evtq.cons_reg, 0);
        // Polled: no SMMU interrupt is enabled.
        regs.write32(IRQ_CTRL, 0);
        wait_ack(regs, IRQ_CTRLACK, |v| v == 0, "SMMU_IRQ_CTRLACK")?;
        let mut smmu = Smmu {
            model,
            features,
            cmdq,
            evtq,
            table,
            vtcr,
            bound: BTreeMap::new(),
            stats: SmmuStats::default(),
        };
        set_cr0(regs, CR0_CMDQEN)?;
        smmu.cmdq
            .submit_and_sync(regs, mem, &[Command::CfgiAll, Command::TlbiNsnhAll])?;
        set_cr0(regs, CR0_CMDQEN | CR0_EVTQEN)?;
        set_cr0(regs, CR0_CMDQEN | CR0_EVTQEN | CR0_SMMUEN)?;
        Ok(smmu)
    }

    /// The binding of `sid`, if it translates.
    pub fn binding(&self, sid: u32) -> Option<Binding> {
        self.bound.get(&sid).copied()
    }

    /// How many streams translate.
    pub fn bound_count(&self) -> usize {
        self.bound.len()
    }

    /// Every stream bound to `partition`.
    pub fn streams_of(&self, partition: usize) -> Vec<u32> {
        self.bound
            .iter()
            .filter(|(_, b)| b.partition == partition)
            .map(|(&s, _)| s)
            .collect()
    }

    fn write_ste(
        &mut self,
        mem: &mut (impl DmaMemory + ?Sized),
        sid: u32,
        words: &[u64; 8],
        word0_last: bool,
    ) -> Result<PhysAddr, SmmuError> {
        let abort = ste(None, self.vtcr, &self.features);
        let at = self.table.ste_addr_or_make(mem, sid, &abort)?;
        if word0_last {
            for (k, w) in words.iter().enumerate().skip(1) {
                mem.write_u64(at.add(8 * k as u64), *w);
            }
            mem.publish(at, STE_BYTES);
        }
        mem.write_u64(at, words[0]);
        mem.publish(at, STE_BYTES);
        self.stats.ste_writes += 1;
        Ok(at)
    }

    /// Makes `sid` translate through `binding`'s stage 2, or abort (None).
    /// A stream that changes owner aborts in between (see the module
    /// docs); the old owner's VMID is invalidated.
    pub fn bind(
        &mut self,
        regs: &mut (impl SmmuRegs + ?Sized),
        mem: &mut (impl DmaMemory + ?Sized),
        sid: u32,
        binding: Option<Binding>,
    ) -> Result<(), SmmuError> {
        let old = self.bound.get(&sid).copied();
        if old == binding && self.table.ste_addr(sid).is_some() {
            return Ok(());
        }
        if let Some(old) = old {
            // Stop the old translation before anything else changes.
            let abort = ste(None, self.vtcr, &self.features);
            self.write_ste(mem, sid, &abort, false)?;
            self.bound.remove(&sid);
            self.cmdq.submit_and_sync(
                regs,
                mem,
                &[Command::CfgiSte(sid), Command::TlbiS12Vmall(old.vmid)],
            )?;
            self.stats.tlb_invalidations += 1;
        }
        let words = ste(binding, self.vtcr, &self.features);
        self.write_ste(mem, sid, &words, true)?;
        self.cmdq
            .submit_and_sync(regs, mem, &[Command::CfgiSte(sid)])?;
        if let Some(b) = binding {
            self.bound.insert(sid, b);
        }
        Ok(())
    }

    /// Binds every StreamID of `rids` (through `maps`) as `owners` says.
    pub fn bind_functions(
        &mut self,
        regs: &mut (impl SmmuRegs + ?Sized),
        mem: &mut (impl DmaMemory + ?Sized),
        maps: &[IdMap],
        rids: impl IntoIterator<Item = u16>,
        owners: &impl FunctionOwners,
    ) -> Result<u32, SmmuError> {
        let mut n = 0;
        for rid in rids {
            if let Some(sid) = rid_to_sid(maps, u32::from(rid)) {
                self.bind(regs, mem, sid, owners.owner(rid))?;
                n += 1;
            }
        }
        Ok(n)
    }

    /// A partition's stage 2 changed (unmapped or remapped): the SMMU's
    /// cached walks of its VMID go.
    pub fn invalidate_vmid(
        &mut self,
        regs: &mut (impl SmmuRegs + ?Sized),
        mem: &mut (impl DmaMemory + ?Sized),
        vmid: u16,
    ) -> Result<(), SmmuError> {
        self.stats.tlb_invalidations += 1;
        self.cmdq
            .submit_and_sync(regs, mem, &[Command::TlbiS12Vmall(vmid)])
    }

    /// A partition is deleted, restarted or changed: every stream bound to
    /// it aborts and its VMID's entries are invalidated before its RAM or
    /// tables are reused. Returns the streams it had.
    pub fn release_partition(
        &mut self,
        regs: &mut (impl SmmuRegs + ?Sized),
        mem: &mut (impl DmaMemory + ?Sized),
        partition: usize,
    ) -> Result<Vec<u32>, SmmuError> {
        let streams = self.streams_of(partition);
        let abort = ste(None, self.vtcr, &self.features);
        let mut cmds = Vec::new();
        let mut vmids = Vec::new();
        for &sid in &streams {
            self.write_ste(mem, sid, &abort, false)?;
            if let Some(b) = self.bound.remove(&sid) {
                if !vmids.contains(&b.vmid) {
                    vmids.push(b.vmid);
                }
            }
            cmds.push(Command::CfgiSte(sid));
        }
        for v in vmids {
            cmds.push(Command::TlbiS12Vmall(v));
            self.stats.tlb_invalidations += 1;
        }
        if !cmds.is_empty() {
            self.cmdq.submit_and_sync(regs, mem, &cmds)?;
        }
        Ok(streams)
    }

    /// Drains the event queue, attributing each record to the partition
    /// the stream is bound to.
    pub fn poll_events(
        &mut self,
        regs: &mut (impl SmmuRegs + ?Sized),
        mem: &(impl DmaMemory + ?Sized),
        mut each: impl FnMut(DmaFault),
    ) -> Drained {
        let bound = &self.bound;
        let d = self.evtq.drain(regs, mem, |event| {
            each(DmaFault {
                event,
                partition: bound.get(&event.sid).map(|b| b.partition),
            })
        });
        self.stats.events += u64::from(d.events);
        self.stats.overflows += u64::from(d.overflowed);
        d
    }
}
