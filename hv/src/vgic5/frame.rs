//! The guest's IRS config frame: what a `gicv5` partition's Linux reads and
//! writes at the `arm,gic-v5-irs` "ns-config" frame its DT names (the
//! guest's GICD address, 64 KiB), emulated here register by register
//! ([`VirsFrame::read`], [`VirsFrame::write`]) under the partition's lock
//! (`Partition::virs_frame`, taken on the GICD trap path as the GICv3
//! distributor's is: any vCPU may select and configure, and SPI_SELR then
//! SPI_CFGR is one operation across two accesses, so no per-CPU design can
//! hold it).
//!
//! The frame describes the partition's VM, not the host's IRS: its vCPUs
//! are its PEs (vCPU n has IAFFID n, as `arm,iaffids` says, which is its
//! vPE ID in the hardware's virtual domain), its SPIs are 0..2^bits of its
//! VM's virtual SPI range ([`vm_spi_id_bits`], what `plan_boot_virs` gives
//! the VM), its LPI ID bits are the VM's virtual LPI IST's
//! (`VM_LPI_ID_BITS`), and it has no virtualisation (IRS_IDR0.VIRT = 0, so
//! the vIRS registers of the host frame are not there).
//!
//! Deliberate choices, each a deviation from a real IRS:
//! - **The guest's IST is accepted, never used.** The VM's virtual LPI IST
//!   is the hypervisor's (made at boot by `plan_boot_virs`, valid before
//!   the guest runs); a GICv5 IST belongs to the IRS once valid, so the
//!   guest never reads its own back and the hardware never needs to see
//!   it. IRS_IST_BASER.VALID = 1 is taken when IRS_IST_CFGR is a linear
//!   table of 4-byte entries (IRS_IDR2 offers no two-level table and no
//!   metadata, so Linux picks exactly that), its LPI ID bits are within
//!   the VM's, and the whole table (4 << ID bits bytes, at least 64) lies
//!   in the partition's RAM; then it reads valid and the guest's memory is
//!   left alone. Anything else stays invalid and is counted
//!   ([`FrameFault::IstRefused`]). The hardware is never pointed at a
//!   guest address, so a guest cannot make the IRS write outside its RAM.
//!   LPIs above the guest's ID bits but within the VM's IST still work
//!   (the hardware checks the VM's, not the guest's, size).
//! - **Only the partition's own SPIs exist.** IRS_SPI_SELR naming any other
//!   SPI reads back IRS_SPI_STATUSR.V = 0, as for an SPI the IRS does not
//!   implement (Linux's `gicv5_irs_wait_for_spi_op` then fails the
//!   operation); IRS_SPI_CFGR is then RAZ/WI. Both are counted
//!   ([`FrameFault::ForeignSpi`]). Its own SPI's trigger mode (TM) is
//!   recorded and handed to the platform ([`FrameAction::SpiTrigger`]) for
//!   the physical SPI, which the hardware delivers as the VM's virtual SPI
//!   of the same ID. The SPIs of the partition's emulated devices
//!   (`pinfold_vboard::GUEST_EMULATED_SPIS` - 32: the PL011's 1, the
//!   watchdog's 60, the PL061's 61, which the hypervisor makes pending with
//!   GIC VDPEND, `vgic5::vdpend_operand`) exist too: selected, they read
//!   V = 1 and their TM is recorded and read back, with no action (they
//!   have no wire; the VM's virtual SPI's handling mode is not set, so a
//!   level line still reaches the guest as its edges).
//! - **Only its vCPUs are PEs.** IRS_PE_SELR naming an IAFFID no vCPU has
//!   reads IRS_PE_STATUSR.V = 0 and is counted ([`FrameFault::ForeignPe`]);
//!   IRS_PE_CR0.DPS is kept per vCPU and has no effect (a vPE's DPS is the
//!   hypervisor's, set at boot).
//! - **Every operation completes at once.** The IDLE bits (CR0, SPI, PE,
//!   IST, SYNC status) always read 1; IRS_SYNCR is counted, no physical
//!   IRS_SYNCR is issued (the guest's CDxx reach the IRS through the
//!   hardware's virtual domain, whose ordering GSB gives the guest).
//! - IRS_CR0.IRSEN and IRS_CR1 are recorded and read back, no effect: the
//!   VM is valid in the IRS from boot.
//! - Any other offset, and a width other than the register's (32 bits;
//!   IRS_IST_BASER 64), reads as zero and ignores writes, counted
//!   ([`FrameFault::Unknown`]). The virtualisation registers
//!   (IRS_IDR3/4, IRS_VMT_*, IRS_VPE_*, IRS_VMAP_*, IRS_SPI_VMR,
//!   IRS_SWERR_*) are among them: IDR0.VIRT = 0 says they are absent.
//!   IRS_MAP_L2_ISTR is too: no two-level IST is offered.
//!
//! Offsets and fields: those Linux's `arm-gic-v5.h` defines (IDR1,
//! IDR2, IDR5..7, CR0, CR1, SYNCR, SYNC_STATUSR, SPI_SELR/CFGR/STATUSR,
//! PE_SELR/STATUSR/CR0, IST_BASER/CFGR/STATUSR, MAP_L2_ISTR, IDR0.VIRT),
//! which `pinfold-gicv5model` (written from the spec) agrees with. Not
//! confirmed from a source: IRS_IIDR at 0x40 and IRS_AIDR at 0x44 (the
//! model's offsets; Linux reads neither), IRS_IDR1.PE_CNT [15:0] holding
//! the PE count minus one (the model's reading), and the AIDR value
//! (0 here: no architecture-revision encoding was found).

use alloc::vec::Vec;
use core::fmt;

/// The frame's registers (offsets in the config frame).
pub mod reg {
    pub const IDR0: u64 = 0x0000;
    pub const IDR1: u64 = 0x0004;
    pub const IDR2: u64 = 0x0008;
    pub const IDR3: u64 = 0x000c;
    pub const IDR4: u64 = 0x0010;
    pub const IDR5: u64 = 0x0014;
    pub const IDR6: u64 = 0x0018;
    pub const IDR7: u64 = 0x001c;
    pub const IIDR: u64 = 0x0040;
    pub const AIDR: u64 = 0x0044;
    pub const CR0: u64 = 0x0080;
    pub const CR1: u64 = 0x0084;
    pub const SYNCR: u64 = 0x00c0;
    pub const SYNC_STATUSR: u64 = 0x00c4;
    pub const SPI_SELR: u64 = 0x0108;
    pub const SPI_CFGR: u64 = 0x0114;
    pub const SPI_STATUSR: u64 = 0x0118;
    pub const PE_SELR: u64 = 0x0140;
    pub const PE_STATUSR: u64 = 0x0144;
    pub const PE_CR0: u64 = 0x0148;
    pub const IST_BASER: u64 = 0x0180;
    pub const IST_CFGR: u64 = 0x0190;
    pub const IST_STATUSR: u64 = 0x0194;
    pub const MAP_L2_ISTR: u64 = 0x01c0;
}

/// CR0, SPI_STATUSR, PE_STATUSR, IST_STATUSR, SYNC_STATUSR: IDLE.
const IDLE: u32 = 1;
/// CR0.IDLE is bit 1 (bit 0 is IRSEN).
const CR0_IDLE: u32 = 1 << 1;
const CR0_IRSEN: u32 = 1;
/// SPI_STATUSR.V, PE_STATUSR.V.
const STATUS_V: u32 = 1 << 1;
/// The IRS_CR1 cacheability/shareability fields [15:0]; the rest RES0.
const CR1_MASK: u32 = 0xffff;
const IST_BASER_VALID: u64 = 1;
/// IRS_IST_BASER.ADDR [55:6].
const IST_BASER_ADDR: u64 = 0x00ff_ffff_ffff_ffc0;
/// IRS_IST_CFGR: LPI_ID_BITS [4:0], L2SZ [6:5], ISTSZ [8:7], STRUCTURE [16].
const IST_CFGR_MASK: u32 = 0x1_01ff;
const IDR1_PRIORITY_5BITS: u32 = 0b100 << 20;
const IDR2_LPI: u32 = 1 << 5;

/// The SPI ID bits of a VM whose partition owns `spis` (core INTIDs, 32 +
/// SPI ID): enough for its highest SPI and for the guest's SPI range
/// (`GUEST_SPI_COUNT`). The boot's vIRS gives the VM this range and the
/// frame reports it.
pub fn vm_spi_id_bits(spis: &[u32]) -> u8 {
    let highest = spis
        .iter()
        .filter_map(|&i| i.checked_sub(32))
        .max()
        .map_or(0, |n| n + 1);
    super::id_bits(highest.max(pinfold_vboard::GUEST_SPI_COUNT))
}

/// The emulated devices' SPIs (core INTIDs), which every partition's frame
/// has beside its own.
const EMULATED_SPIS: [u32; 3] = pinfold_vboard::GUEST_EMULATED_SPIS;

/// What the frame needs to know of its partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameSpec {
    pub vcpus: u16,
    /// The partition's own SPIs (core INTIDs, 32 + SPI ID).
    pub spis: Vec<u32>,
    /// Its RAM as guest physical addresses: (base, size).
    pub ram: (u64, u64),
}

/// A guest access the frame refused; it did nothing (reads gave zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameFault {
    /// IRS_SPI_SELR named an SPI the partition does not own, or IRS_SPI_CFGR
    /// was accessed with no own SPI selected.
    ForeignSpi { spi: u32 },
    /// IRS_PE_SELR named an IAFFID no vCPU has, or IRS_PE_CR0 was written
    /// with none selected.
    ForeignPe { iaffid: u32 },
    /// IRS_IST_BASER.VALID asked for a table the VM cannot take.
    IstRefused { why: IstRefusal },
    /// IRS_IST_CFGR written while the IST is valid.
    IstBusy,
    /// An offset the frame does not have, or an access of the wrong width.
    Unknown { offset: u64, width: u8, write: bool },
}

/// Why the guest's IST was not made valid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IstRefusal {
    /// STRUCTURE = two-level (IRS_IDR2.IST_LEVELS = 0).
    TwoLevel,
    /// ISTSZ other than 4-byte entries (IRS_IDR2.ISTMD = 0).
    EntrySize(u32),
    /// LPI_ID_BITS beyond the VM's IST.
    IdBits(u32),
    /// The table is not wholly in the partition's RAM.
    OutsideRam { addr: u64, bytes: u64 },
}

impl fmt::Display for FrameFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            FrameFault::ForeignSpi { spi } => {
                write!(f, "IRS frame: SPI {spi} is not the partition's: ignored")
            }
            FrameFault::ForeignPe { iaffid } => {
                write!(f, "IRS frame: IAFFID {iaffid} is no vCPU's: ignored")
            }
            FrameFault::IstRefused { why } => write!(f, "IRS frame: IST not made valid: {why}"),
            FrameFault::IstBusy => write!(f, "IRS frame: IST_CFGR written while valid: ignored"),
            FrameFault::Unknown {
                offset,
                width,
                write,
            } => write!(
                f,
                "IRS frame: {}-byte {} at {offset:#x}: no such register (RAZ/WI)",
                width,
                if write { "write" } else { "read" }
            ),
        }
    }
}

impl fmt::Display for IstRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            IstRefusal::TwoLevel => write!(f, "two-level IST (only linear is offered)"),
            IstRefusal::EntrySize(s) => write!(f, "ISTSZ {s} (only 4-byte entries)"),
            IstRefusal::IdBits(b) => {
                write!(f, "{b} LPI ID bits (the VM has {})", super::VM_LPI_ID_BITS)
            }
            IstRefusal::OutsideRam { addr, bytes } => {
                write!(f, "{bytes} bytes at {addr:#x} are not in its RAM")
            }
        }
    }
}

/// What the platform applies for a guest access.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameAction {
    /// The guest set its SPI's trigger mode: the physical SPI (core INTID)
    /// is made level (`level`) or edge (`SpiOp::SetEdge`).
    SpiTrigger { intid: u32, level: bool },
}

/// The result of one access.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FrameOutcome {
    /// The value a read returns (0 for writes).
    pub value: u64,
    pub fault: Option<FrameFault>,
    pub action: Option<FrameAction>,
}

/// One partition's emulated IRS config frame.
#[derive(Debug, Clone)]
pub struct VirsFrame {
    spec: FrameSpec,
    spi_id_bits: u8,
    /// Trigger mode (level) of each own SPI, as `spec.spis`, then of each
    /// emulated device's SPI, as `GUEST_EMULATED_SPIS`.
    spi_level: Vec<bool>,
    /// Per vCPU: IRS_PE_CR0.DPS.
    pe_dps: Vec<bool>,
    cr0_irsen: bool,
    cr1: u32,
    spi_selr: u32,
    /// Index in `spi_level` of the selected SPI, when it is the
    /// partition's own or an emulated device's.
    spi_selected: Option<usize>,
    pe_selr: u32,
    pe_selected: Option<usize>,
    ist_baser: u64,
    ist_cfgr: u32,
    /// IRS_SYNCR writes (no effect beyond this count).
    pub syncs: u64,
}

impl VirsFrame {
    /// The frame at reset: IRS disabled, nothing selected, no IST, every
    /// SPI edge (TM = 0).
    pub fn new(spec: FrameSpec) -> VirsFrame {
        let spi_id_bits = vm_spi_id_bits(&spec.spis);
        VirsFrame {
            spi_level: alloc::vec![false; spec.spis.len() + EMULATED_SPIS.len()],
            pe_dps: alloc::vec![false; usize::from(spec.vcpus)],
            spec,
            spi_id_bits,
            cr0_irsen: false,
            cr1: 0,
            spi_selr: 0,
            spi_selected: None,
            pe_selr: 0,
            pe_selected: None,
            ist_baser: 0,
            ist_cfgr: 0,
            syncs: 0,
        }
    }

    /// Whether the guest made its IST valid (and so may use LPIs).
    pub fn ist_valid(&self) -> bool {
        self.ist_baser & IST_BASER_VALID != 0
    }

    /// IRS_IDR1.IAFFID_BITS + 1: enough to number the vCPUs (at least 1).
    fn iaffid_bits(&self) -> u32 {
        u32::from(super::id_bits(u32::from(self.spec.vcpus))).max(1)
    }

    fn unknown(offset: u64, width: u8, write: bool) -> FrameOutcome {
        FrameOutcome {
            fault: Some(FrameFault::Unknown {
                offset,
                width,
                write,
            }),
            ..FrameOutcome::default()
        }
    }

    /// A guest read of `width` bytes at `offset`.
    pub fn read(&mut self, offset: u64, width: u8) -> FrameOutcome {
        if offset == reg::IST_BASER {
            if width != 8 {
                return Self::unknown(offset, width, false);
            }
            return FrameOutcome {
                value: self.ist_baser,
                ..FrameOutcome::default()
            };
        }
        if width != 4 {
            return Self::unknown(offset, width, false);
        }
        let v: u32 = match offset {
            // VIRT [6] = 0, and nothing else the guest needs.
            reg::IDR0 => 0,
            reg::IDR1 => {
                IDR1_PRIORITY_5BITS
                    | (self.iaffid_bits() - 1) << 16
                    | u32::from(self.spec.vcpus.saturating_sub(1))
            }
            // ID_BITS [4:0], LPI [5]; MIN_LPI_ID_BITS, IST_LEVELS, IST_L2SZ,
            // ISTMD all 0: a linear IST of 4-byte entries.
            reg::IDR2 => u32::from(super::VM_LPI_ID_BITS) | IDR2_LPI,
            reg::IDR5 | reg::IDR6 => 1 << self.spi_id_bits,
            reg::IDR7 => 0,
            reg::IIDR => crate::vgic::IIDR,
            reg::AIDR => 0,
            reg::CR0 => CR0_IDLE | u32::from(self.cr0_irsen),
            reg::CR1 => self.cr1,
            reg::SYNCR => 0,
            reg::SYNC_STATUSR => IDLE,
            reg::SPI_SELR => self.spi_selr,
            reg::SPI_CFGR => match self.spi_selected {
                Some(i) => u32::from(self.spi_level[i]),
                None => {
                    return FrameOutcome {
                        fault: Some(FrameFault::ForeignSpi { spi: self.spi_selr }),
                        ..FrameOutcome::default()
                    }
                }
            },
            reg::SPI_STATUSR => {
                IDLE | if self.spi_selected.is_some() {
                    STATUS_V
                } else {
                    0
                }
            }
            reg::PE_SELR => self.pe_selr,
            reg::PE_STATUSR => {
                IDLE | if self.pe_selected.is_some() {
                    STATUS_V
                } else {
                    0
                }
            }
            reg::PE_CR0 => self.pe_selected.map_or(0, |n| u32::from(self.pe_dps[n])),
            reg::IST_CFGR => self.ist_cfgr,
            reg::IST_STATUSR => IDLE,
            _ => return Self::unknown(offset, width, false),
        };
        FrameOutcome {
            value: u64::from(v),
            ..FrameOutcome::default()
        }
    }

    /// A guest write of `value` (`width` bytes) at `offset`.
    pub fn write(&mut self, offset: u64, width: u8, value: u64) -> FrameOutcome {
        let expected = if offset == reg::IST_BASER { 8 } else { 4 };
        if width != expected {
            return Self::unknown(offset, width, true);
        }
        let v = value as u32;
        let mut out = FrameOutcome::default();
        match offset {
            reg::CR0 => self.cr0_irsen = v & CR0_IRSEN != 0,
            reg::CR1 => self.cr1 = v & CR1_MASK,
            reg::SYNCR => self.syncs += 1,
            reg::SPI_SELR => {
                let id = v & 0xff_ffff;
                self.spi_selr = id;
                self.spi_selected = self
                    .spec
                    .spis
                    .iter()
                    .chain(EMULATED_SPIS.iter())
                    .position(|&i| i == id + 32);
                if self.spi_selected.is_none() {
                    out.fault = Some(FrameFault::ForeignSpi { spi: id });
                }
            }
            reg::SPI_CFGR => match self.spi_selected {
                Some(i) => {
                    let level = v & 1 != 0;
                    self.spi_level[i] = level;
                    // An emulated device's SPI has no physical SPI.
                    out.action = self
                        .spec
                        .spis
                        .get(i)
                        .map(|&intid| FrameAction::SpiTrigger { intid, level });
                }
                None => out.fault = Some(FrameFault::ForeignSpi { spi: self.spi_selr }),
            },
            reg::PE_SELR => {
                let iaffid = v & 0xffff;
                self.pe_selr = iaffid;
                self.pe_selected = (iaffid < u32::from(self.spec.vcpus)).then_some(iaffid as usize);
                if self.pe_selected.is_none() {
                    out.fault = Some(FrameFault::ForeignPe { iaffid });
                }
            }
            reg::PE_CR0 => match self.pe_selected {
                Some(n) => self.pe_dps[n] = v & 1 != 0,
                None => {
                    out.fault = Some(FrameFault::ForeignPe {
                        iaffid: self.pe_selr,
                    })
                }
            },
            reg::IST_CFGR => {
                if self.ist_valid() {
                    out.fault = Some(FrameFault::IstBusy);
                } else {
                    self.ist_cfgr = v & IST_CFGR_MASK;
                }
            }
            reg::IST_BASER => {
                if value & IST_BASER_VALID == 0 {
                    self.ist_baser = value & IST_BASER_ADDR;
                } else {
                    match self.check_ist(value & IST_BASER_ADDR) {
                        Ok(()) => self.ist_baser = value & (IST_BASER_ADDR | IST_BASER_VALID),
                        Err(why) => out.fault = Some(FrameFault::IstRefused { why }),
                    }
                }
            }
            _ => return Self::unknown(offset, width, true),
        }
        out
    }

    /// Whether the IST IRS_IST_CFGR describes, at `addr`, is one the VM
    /// takes (see the module comment).
    fn check_ist(&self, addr: u64) -> Result<(), IstRefusal> {
        let c = self.ist_cfgr;
        if c >> 16 & 1 != 0 {
            return Err(IstRefusal::TwoLevel);
        }
        let istsz = c >> 7 & 3;
        if istsz != 0 {
            return Err(IstRefusal::EntrySize(istsz));
        }
        let bits = c & 0x1f;
        if bits > u32::from(super::VM_LPI_ID_BITS) {
            return Err(IstRefusal::IdBits(bits));
        }
        let bytes = (4u64 << bits).max(64);
        let (base, size) = self.spec.ram;
        let inside = addr >= base
            && addr
                .checked_add(bytes)
                .is_some_and(|end| end <= base + size);
        if !inside {
            return Err(IstRefusal::OutsideRam { addr, bytes });
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "frame_tests.rs"]
mod tests;
