//! SR-IOV: the virtual functions a physical function can have, read from
//! its SR-IOV extended capability (PCIe Base 6.0, 9.3.3), and enabled at
//! boot for the VFs a plan names, so a VF is assignable like any function.
//!
//! Decided here, host-tested against a fake configuration space
//! (`tests` below; docs/DEVICES.md, "SR-IOV"):
//!
//! - [`find_ext_cap`]: the extended capability list from 0x100 (ID, version,
//!   next pointer), bounded so a looping list ends.
//! - [`probe`]: TotalVFs, InitialVFs, First VF Offset, VF Stride and VF
//!   Device ID, and the six VF BARs sized as BARs are (all-ones written,
//!   the old value put back; the size is one VF's, the VFs' BARs follow
//!   each other). First VF Offset and VF Stride may depend on NumVFs
//!   (9.3.3.9-10), so they are read with NumVFs = TotalVFs, and NumVFs is
//!   put back. VF Enable must be off (the hypervisor probes before any
//!   partition runs; it is refused otherwise: a live VF's BARs must not
//!   move).
//! - [`Sriov::vf`]: VF n's requester ID, PF + First VF Offset + n x VF
//!   Stride (9.3.3.9), as a BDF.
//! - [`vfs_wanted`]: how many VFs a PF needs so that every VF BDF in a list
//!   exists (the highest named VF's index + 1), BDFs a real function holds
//!   not counted.
//! - [`enable`]: System Page Size 4 KiB, NumVFs, each VF BAR register's
//!   aperture (NumVFs x one VF's size, aligned to that size) carved from the
//!   host bridge's windows clear of everything placed so far, VF Enable and
//!   VF Memory Space Enable, then the 100 ms the VFs need before their
//!   configuration space answers (9.3.3.3.1). Each VF becomes a
//!   [`HostFunction`] whose BARs are fixed ([`VfOf`]: a VF's BAR registers
//!   are read-only zero, its apertures are where the PF's VF BARs put
//!   them), its vendor the PF's and its device the VF Device ID (a VF's own
//!   ID registers read 0xffff). A VF BAR smaller than a page is refused
//!   (two VFs would share a stage-2 page).
//!
//! The PF itself stays the hypervisor's once its VFs are enabled
//! (`vpci::assign` refuses it): its driver could clear VF Enable, FLR it or
//! put it in D3hot under another partition's VFs.

use crate::dtb::{PciSpace, PcieInfo};
use crate::pci::{Bdf, ConfigSpace, CLASS_REV};
use crate::vpci::{BarSpace, HostBar, HostFunction, VfOf};
use alloc::vec::Vec;
use core::fmt;

/// The SR-IOV extended capability's ID.
pub const EXT_CAP_SRIOV: u16 = 0x0010;
/// Where extended capabilities start.
const EXT_CAP_START: u16 = 0x100;
/// At most this many extended capabilities are walked (4 KiB / 4 bytes).
const EXT_CAP_MAX: usize = 1024;

// Offsets in the SR-IOV capability.
const CONTROL: u16 = 0x08;
const INITIAL_VFS: u16 = 0x0c;
const TOTAL_VFS: u16 = 0x0e;
const NUM_VFS: u16 = 0x10;
const FIRST_VF_OFFSET: u16 = 0x14;
const VF_STRIDE: u16 = 0x16;
const VF_DEVICE_ID: u16 = 0x1a;
const SUPPORTED_PAGE_SIZES: u16 = 0x1c;
const SYSTEM_PAGE_SIZE: u16 = 0x20;
const VF_BAR0: u16 = 0x24;
/// System Page Size bit 0: 4 KiB (the stage-2 page).
const PAGE_4K: u32 = 1;
const PAGE: u64 = 4096;
/// VFs answer configuration requests this long after VF Enable (9.3.3.3.1).
pub const VF_ENABLE_WAIT_MS: u64 = 100;

/// SR-IOV Control: VF Enable.
pub const CONTROL_VF_ENABLE: u32 = 1 << 0;
/// SR-IOV Control: VF Memory Space Enable.
pub const CONTROL_VF_MSE: u32 = 1 << 3;

/// A physical function's SR-IOV capability as probed at boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sriov {
    /// Offset of the capability in the PF's configuration space.
    pub at: u16,
    pub total_vfs: u16,
    pub initial_vfs: u16,
    /// First VF Offset and VF Stride with NumVFs = TotalVFs.
    pub first_offset: u16,
    pub stride: u16,
    /// The VFs' device ID (their vendor ID is the PF's).
    pub vf_device: u16,
    /// One VF's BARs (register index 0..=5 in the VF BAR array).
    pub vf_bars: Vec<HostBar>,
}

/// Why a PF's SR-IOV capability was not probed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeError {
    /// VF Enable is on: a live VF's BARs must not be sized.
    VfsEnabled,
}

/// The offset of extended capability `id` of `bdf`, if it has one.
pub fn find_ext_cap(cfg: &mut impl ConfigSpace, bdf: Bdf, id: u16) -> Option<u16> {
    let mut at = EXT_CAP_START;
    for _ in 0..EXT_CAP_MAX {
        let header = cfg.read(bdf, at, 4);
        // No extended space (all-ones: not PCIe; 0: an empty list).
        if header == u32::MAX || header == 0 {
            return None;
        }
        if header as u16 == id {
            return Some(at);
        }
        let next = (header >> 20) as u16 & !3;
        if next < EXT_CAP_START {
            return None;
        }
        at = next;
    }
    None
}

/// `bdf`'s SR-IOV capability, VF BARs sized; `Ok(None)` for a function
/// without one (or with TotalVFs 0).
pub fn probe(cfg: &mut impl ConfigSpace, bdf: Bdf) -> Result<Option<Sriov>, ProbeError> {
    let Some(at) = find_ext_cap(cfg, bdf, EXT_CAP_SRIOV) else {
        return Ok(None);
    };
    if cfg.read(bdf, at + CONTROL, 2) & CONTROL_VF_ENABLE != 0 {
        return Err(ProbeError::VfsEnabled);
    }
    let total_vfs = cfg.read(bdf, at + TOTAL_VFS, 2) as u16;
    if total_vfs == 0 {
        return Ok(None);
    }
    let num_vfs = cfg.read(bdf, at + NUM_VFS, 2);
    cfg.write(bdf, at + NUM_VFS, 2, u32::from(total_vfs));
    let first_offset = cfg.read(bdf, at + FIRST_VF_OFFSET, 2) as u16;
    let stride = cfg.read(bdf, at + VF_STRIDE, 2) as u16;
    cfg.write(bdf, at + NUM_VFS, 2, num_vfs);
    let mut vf_bars = Vec::new();
    let mut reg = 0u8;
    while reg < 6 {
        let bar = at + VF_BAR0 + 4 * u16::from(reg);
        let old = cfg.read(bdf, bar, 4);
        cfg.write(bdf, bar, 4, u32::MAX);
        let lo = cfg.read(bdf, bar, 4);
        cfg.write(bdf, bar, 4, old);
        // VF BARs are memory BARs (9.3.3.14); bit 0 is reserved (0).
        let wide = (old >> 1) & 3 == 2 && reg < 5;
        let mut mask = u64::from(lo & !0xf);
        if wide {
            let old_hi = cfg.read(bdf, bar + 4, 4);
            cfg.write(bdf, bar + 4, 4, u32::MAX);
            mask |= u64::from(cfg.read(bdf, bar + 4, 4)) << 32;
            cfg.write(bdf, bar + 4, 4, old_hi);
        } else if mask != 0 {
            mask |= 0xffff_ffff_0000_0000;
        }
        if mask != 0 {
            vf_bars.push(HostBar {
                reg,
                space: if wide {
                    BarSpace::Mem64
                } else {
                    BarSpace::Mem32
                },
                prefetchable: old & 8 != 0,
                size: (!mask).wrapping_add(1),
            });
        }
        reg += if wide { 2 } else { 1 };
    }
    Ok(Some(Sriov {
        at,
        total_vfs,
        initial_vfs: cfg.read(bdf, at + INITIAL_VFS, 2) as u16,
        first_offset,
        stride,
        vf_device: cfg.read(bdf, at + VF_DEVICE_ID, 2) as u16,
        vf_bars,
    }))
}

impl Sriov {
    /// VF `n` (0-based) of physical function `pf`: its requester ID is
    /// the PF's + First VF Offset + n x VF Stride. None past TotalVFs or
    /// past the last bus.
    pub fn vf(&self, pf: Bdf, n: u16) -> Option<Bdf> {
        if n >= self.total_vfs {
            return None;
        }
        let pf_rid = u32::from(pf.rid());
        let rid = pf_rid + u32::from(self.first_offset) + u32::from(n) * u32::from(self.stride);
        (rid <= 0xffff).then_some(Bdf {
            bus: (rid >> 8) as u8,
            dev: ((rid >> 3) & 0x1f) as u8,
            func: (rid & 7) as u8,
        })
    }

    /// Every VF's BDF, in VF order.
    pub fn vfs(&self, pf: Bdf) -> Vec<Bdf> {
        (0..self.total_vfs).filter_map(|n| self.vf(pf, n)).collect()
    }

    /// The bytes one VF BAR register's window needs for all TotalVFs VFs
    /// (the VFs' BARs are laid out one after another).
    pub fn window(&self, reg: u8) -> Option<u64> {
        self.vf_bars
            .iter()
            .find(|b| b.reg == reg)
            .map(|b| b.size * u64::from(self.total_vfs))
    }
}

/// How many VFs of `pf` must be enabled so every VF BDF in `wanted`
/// exists: the highest named VF's index + 1 (0 when none is named).
/// `real` says whether a function already answers at a BDF (a plan naming
/// it means that function, not a VF).
pub fn vfs_wanted(s: &Sriov, pf: Bdf, wanted: &[Bdf], real: impl Fn(Bdf) -> bool) -> u16 {
    (0..s.total_vfs)
        .filter(|&n| s.vf(pf, n).is_some_and(|b| wanted.contains(&b) && !real(b)))
        .map(|n| n + 1)
        .max()
        .unwrap_or(0)
}

/// Why a PF's VFs were not enabled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnableError {
    /// The PF does not support 4 KiB system pages.
    NoSmallPages,
    /// VF BAR register `reg` is smaller than a 4 KiB page.
    BarBelowPage { reg: u8, size: u64 },
    /// No room in the host bridge's windows for VF BAR `reg`'s aperture.
    NoRoom { reg: u8, size: u64 },
    /// With NumVFs set, VF `n` has no BDF (past the last bus).
    NoRid { n: u16 },
    /// VF BAR `reg` read back `read`, not the aperture written.
    BarNotTaken { reg: u8, read: u64 },
}

impl fmt::Display for EnableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            EnableError::NoSmallPages => f.write_str("the PF does not support 4 KiB system pages"),
            EnableError::BarBelowPage { reg, size } => {
                write!(f, "VF BAR{reg} is {size:#x} bytes, less than a 4 KiB page")
            }
            EnableError::NoRoom { reg, size } => write!(
                f,
                "no room for VF BAR{reg}'s {size:#x}-byte aperture in the host bridge's windows"
            ),
            EnableError::NoRid { n } => write!(f, "VF {n} has no requester ID"),
            EnableError::BarNotTaken { reg, read } => {
                write!(
                    f,
                    "VF BAR{reg} read back {read:#x}, not the aperture written"
                )
            }
        }
    }
}

/// Enables `num` VFs of `pf` (VF Enable off, as [`probe`] found it): their
/// BAR apertures carved from `bridge`'s windows clear of `taken` (CPU
/// ranges; each aperture placed is added), NumVFs, VF Enable and VF MSE
/// set, and the wait before VFs answer. Returns each VF as a function.
pub fn enable(
    cfg: &mut impl ConfigSpace,
    pf: &HostFunction,
    s: &Sriov,
    num: u16,
    bridge: &PcieInfo,
    taken: &mut Vec<(u64, u64)>,
) -> Result<Vec<HostFunction>, EnableError> {
    let at = s.at;
    let bdf = pf.bdf;
    if cfg.read(bdf, at + SUPPORTED_PAGE_SIZES, 4) & PAGE_4K == 0 {
        return Err(EnableError::NoSmallPages);
    }
    cfg.write(bdf, at + SYSTEM_PAGE_SIZE, 4, PAGE_4K);
    if let Some(b) = s.vf_bars.iter().find(|b| b.size < PAGE) {
        return Err(EnableError::BarBelowPage {
            reg: b.reg,
            size: b.size,
        });
    }
    let has_mem64 = bridge.ranges.iter().any(|r| r.space == PciSpace::Mem64);
    let mut apertures = Vec::new();
    // A refusal takes back what it placed.
    let mark = taken.len();
    for b in &s.vf_bars {
        let size = b.size * u64::from(num);
        let space = match b.space {
            BarSpace::Mem64 if has_mem64 => PciSpace::Mem64,
            _ => PciSpace::Mem32,
        };
        let window = bridge
            .ranges
            .iter()
            .filter(|r| r.space == space)
            .find_map(|r| crate::vpci::carve(r, size, b.size, taken));
        let Some(window) = window else {
            taken.truncate(mark);
            return Err(EnableError::NoRoom { reg: b.reg, size });
        };
        apertures.push((*b, window));
        taken.push((window.cpu_addr, size));
    }
    cfg.write(bdf, at + NUM_VFS, 2, u32::from(num));
    // First VF Offset and Stride as they are with this NumVFs.
    let s = Sriov {
        first_offset: cfg.read(bdf, at + FIRST_VF_OFFSET, 2) as u16,
        stride: cfg.read(bdf, at + VF_STRIDE, 2) as u16,
        ..s.clone()
    };
    let vfs: Vec<Bdf> = (0..num)
        .map(|n| s.vf(bdf, n).ok_or(EnableError::NoRid { n }))
        .collect::<Result<_, _>>()
        .inspect_err(|_| {
            cfg.write(bdf, at + NUM_VFS, 2, 0);
            taken.truncate(mark);
        })?;
    for &(b, w) in &apertures {
        let reg = at + VF_BAR0 + 4 * u16::from(b.reg);
        cfg.write(bdf, reg, 4, w.pci_addr as u32);
        let mut back = u64::from(cfg.read(bdf, reg, 4) & !0xf);
        if b.space == BarSpace::Mem64 {
            cfg.write(bdf, reg + 4, 4, (w.pci_addr >> 32) as u32);
            back |= u64::from(cfg.read(bdf, reg + 4, 4)) << 32;
        }
        if back != w.pci_addr {
            cfg.write(bdf, at + NUM_VFS, 2, 0);
            taken.truncate(mark);
            return Err(EnableError::BarNotTaken {
                reg: b.reg,
                read: back,
            });
        }
    }
    let control = cfg.read(bdf, at + CONTROL, 2);
    cfg.write(
        bdf,
        at + CONTROL,
        2,
        control | CONTROL_VF_ENABLE | CONTROL_VF_MSE,
    );
    let deadline = cfg.now() + cfg.frequency() / 1000 * VF_ENABLE_WAIT_MS;
    while cfg.now() < deadline {}
    Ok(vfs
        .iter()
        .enumerate()
        .map(|(n, &vf)| {
            let caps = crate::vpci::capability_spans(cfg, vf);
            HostFunction {
                bdf: vf,
                vendor: pf.vendor,
                device: s.vf_device,
                class: cfg.read(vf, CLASS_REV, 4) >> 8,
                bridge: false,
                // VFs have no INTx (9.3.4.1.13).
                pin: 0,
                bars: s.vf_bars.clone(),
                msi_vectors: crate::vpci::msi_vectors(cfg, vf, &caps),
                caps,
                vf: Some(VfOf {
                    pf: bdf,
                    bars: apertures
                        .iter()
                        .map(|&(b, w)| (b.reg, w.pci_addr + b.size * n as u64))
                        .collect(),
                }),
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A PF like QEMU's igb: an SR-IOV capability at 0x160 after an AER
    /// one at 0x100, TotalVFs 8, First VF Offset 0x80, Stride 2, VF
    /// device 0x10ca, VF BAR0 16 KiB 64-bit and VF BAR3 16 KiB 64-bit.
    struct Pf {
        regs: [u8; 4096],
        /// (register, size, flags) of each VF BAR.
        vf_bars: Vec<(u16, u64, u32)>,
        writes: Vec<(u16, u8, u32)>,
    }

    const SRIOV_AT: u16 = 0x160;

    impl Pf {
        fn igb() -> Pf {
            let mut pf = Pf {
                regs: [0; 4096],
                vf_bars: alloc::vec![
                    (SRIOV_AT + VF_BAR0, 0x4000, 0xc),
                    (SRIOV_AT + VF_BAR0 + 12, 0x4000, 0xc),
                ],
                writes: Vec::new(),
            };
            pf.put(0x100, 4, 0x0001 | 2 << 16 | u32::from(SRIOV_AT) << 20);
            pf.put(SRIOV_AT, 4, u32::from(EXT_CAP_SRIOV) | 1 << 16);
            pf.put(SRIOV_AT + INITIAL_VFS, 2, 8);
            pf.put(SRIOV_AT + TOTAL_VFS, 2, 8);
            pf.put(SRIOV_AT + VF_DEVICE_ID, 2, 0x10ca);
            pf.put(SRIOV_AT + VF_BAR0, 4, 0xc);
            pf.put(SRIOV_AT + VF_BAR0 + 12, 4, 0xc);
            // Supported Page Sizes: 4 KiB and up; System Page Size 4 KiB.
            pf.put(SRIOV_AT + SUPPORTED_PAGE_SIZES, 4, 0x553);
            pf.put(SRIOV_AT + SYSTEM_PAGE_SIZE, 4, 1);
            pf
        }
        fn get(&self, offset: u16, width: u8) -> u32 {
            (0..width as usize).fold(0, |v, i| {
                v | u32::from(self.regs[offset as usize + i]) << (8 * i)
            })
        }
        fn put(&mut self, offset: u16, width: u8, value: u32) {
            for i in 0..width as usize {
                self.regs[offset as usize + i] = (value >> (8 * i)) as u8;
            }
        }
    }

    impl ConfigSpace for Pf {
        fn read(&mut self, bdf: Bdf, offset: u16, width: u8) -> u32 {
            if bdf != PF {
                // A VF (RID 0x90 + 2n, n < NumVFs) answers once VF Enable
                // is on: ID registers 0xffff, a network class.
                let rid = u16::from(bdf.dev) << 3 | u16::from(bdf.func);
                let num = self.get(SRIOV_AT + NUM_VFS, 2) as u16;
                let on = self.get(SRIOV_AT + CONTROL, 2) & CONTROL_VF_ENABLE != 0;
                let vf =
                    bdf.bus == 0 && rid >= 0x90 && (rid - 0x90) % 2 == 0 && (rid - 0x90) / 2 < num;
                return match (on && vf, offset) {
                    (false, _) => u32::MAX >> (32 - 8 * u32::from(width)),
                    (true, 0..=3) => u32::MAX >> (32 - 8 * u32::from(width)),
                    (true, CLASS_REV) => 0x0200_0001,
                    (true, _) => 0,
                };
            }
            // First VF Offset and Stride as igb gives them: they are only
            // meaningful with NumVFs set.
            if offset == SRIOV_AT + FIRST_VF_OFFSET || offset == SRIOV_AT + VF_STRIDE {
                if self.get(SRIOV_AT + NUM_VFS, 2) == 0 {
                    return 0;
                }
                return if offset == SRIOV_AT + FIRST_VF_OFFSET {
                    0x80
                } else {
                    2
                };
            }
            self.get(offset, width)
        }
        fn write(&mut self, _: Bdf, offset: u16, width: u8, value: u32) {
            self.writes.push((offset, width, value));
            let vf_bar_regs = SRIOV_AT + VF_BAR0..SRIOV_AT + VF_BAR0 + 24;
            if vf_bar_regs.contains(&offset) {
                // Address bits only; the high half of a 64-bit BAR whole;
                // an unimplemented VF BAR reads 0.
                for (reg, size, flags) in self.vf_bars.clone() {
                    if offset == reg {
                        let value = (value & !(size as u32 - 1) & !0xf) | flags;
                        self.put(offset, width, value);
                    } else if offset == reg + 4 {
                        self.put(offset, width, value);
                    }
                }
                return;
            }
            self.put(offset, width, value);
        }
        fn now(&mut self) -> u64 {
            0
        }
        fn frequency(&self) -> u64 {
            1
        }
    }

    const PF: Bdf = Bdf {
        bus: 0,
        dev: 2,
        func: 0,
    };

    #[test]
    fn the_sriov_capability_is_found_after_another_extended_one() {
        let mut pf = Pf::igb();
        assert_eq!(find_ext_cap(&mut pf, PF, EXT_CAP_SRIOV), Some(SRIOV_AT));
        assert_eq!(find_ext_cap(&mut pf, PF, 0x000b), None);
    }

    #[test]
    fn a_looping_or_absent_extended_capability_list_ends() {
        let mut pf = Pf::igb();
        // AER's next pointer points at itself.
        pf.put(0x100, 4, 0x0001 | 2 << 16 | 0x100 << 20);
        assert_eq!(find_ext_cap(&mut pf, PF, EXT_CAP_SRIOV), None);
        let mut plain = Pf::igb();
        plain.put(0x100, 4, u32::MAX);
        assert_eq!(probe(&mut plain, PF), Ok(None));
    }

    #[test]
    fn probe_reads_the_vf_layout_and_sizes_the_vf_bars_leaving_numvfs_and_the_bars() {
        let mut pf = Pf::igb();
        let s = probe(&mut pf, PF).unwrap().expect("igb has SR-IOV");
        assert_eq!(
            (
                s.at,
                s.total_vfs,
                s.initial_vfs,
                s.first_offset,
                s.stride,
                s.vf_device
            ),
            (SRIOV_AT, 8, 8, 0x80, 2, 0x10ca)
        );
        assert_eq!(
            s.vf_bars,
            [
                HostBar {
                    reg: 0,
                    space: BarSpace::Mem64,
                    prefetchable: true,
                    size: 0x4000
                },
                HostBar {
                    reg: 3,
                    space: BarSpace::Mem64,
                    prefetchable: true,
                    size: 0x4000
                },
            ]
        );
        assert_eq!(s.window(0), Some(8 * 0x4000));
        assert_eq!(s.window(1), None);
        // Everything probed is put back.
        assert_eq!(pf.get(SRIOV_AT + NUM_VFS, 2), 0);
        assert_eq!(pf.get(SRIOV_AT + VF_BAR0, 4), 0xc);
        assert_eq!(pf.get(SRIOV_AT + CONTROL, 2), 0, "VF Enable untouched");
        assert!(pf.writes.iter().all(|w| w.0 != SRIOV_AT + CONTROL));
    }

    #[test]
    fn vfs_follow_first_offset_and_stride() {
        let mut pf = Pf::igb();
        let s = probe(&mut pf, PF).unwrap().unwrap();
        // 00:02.0 is RID 0x10; + 0x80 = 0x90 = 00:12.0; stride 2.
        let vfs = s.vfs(PF);
        assert_eq!(vfs.len(), 8);
        assert_eq!(
            (vfs[0], vfs[1], vfs[7]),
            (
                Bdf {
                    bus: 0,
                    dev: 0x12,
                    func: 0
                },
                Bdf {
                    bus: 0,
                    dev: 0x12,
                    func: 2
                },
                Bdf {
                    bus: 0,
                    dev: 0x13,
                    func: 6
                }
            )
        );
        assert_eq!(s.vf(PF, 8), None, "past TotalVFs");
        let last_bus = Bdf {
            bus: 0xff,
            dev: 0x1f,
            func: 0,
        };
        assert_eq!(s.vf(last_bus, 0), None, "past the last bus");
    }

    #[test]
    fn a_pf_with_its_vfs_enabled_is_not_probed() {
        let mut pf = Pf::igb();
        pf.put(SRIOV_AT + CONTROL, 2, CONTROL_VF_ENABLE | CONTROL_VF_MSE);
        assert_eq!(probe(&mut pf, PF), Err(ProbeError::VfsEnabled));
        assert!(pf.writes.is_empty(), "nothing written to a live PF");
    }

    fn igb_function() -> HostFunction {
        HostFunction {
            bdf: PF,
            vendor: 0x8086,
            device: 0x10c9,
            class: 0x02_0000,
            bridge: false,
            pin: 1,
            bars: Vec::new(),
            caps: Vec::new(),
            msi_vectors: 3,
            vf: None,
        }
    }

    /// QEMU virt's bridge: a 32-bit window at bus/CPU 0x1000_0000 and a
    /// 64-bit one at 0x80_0000_0000.
    fn bridge() -> PcieInfo {
        PcieInfo {
            ecam: (0x40_1000_0000, 0x1000_0000),
            bus_range: (0, 0xff),
            ranges: crate::acpi::board::qemu_virt_pci_ranges(),
            interrupt_map: Vec::new(),
            interrupt_map_mask: [0; 4],
            node_path: alloc::string::String::from("/pcie@10000000"),
            msi_map: alloc::vec::Vec::new(),
            iommu_map: Vec::new(),
        }
    }

    fn vf_bdf(n: u8) -> Bdf {
        Bdf {
            bus: 0,
            dev: 0x12 + n / 4,
            func: (n % 4) * 2,
        }
    }

    #[test]
    fn the_vfs_wanted_are_up_to_the_highest_named_one_and_real_functions_do_not_count() {
        let mut pf = Pf::igb();
        let s = probe(&mut pf, PF).unwrap().unwrap();
        let other = Bdf {
            bus: 0,
            dev: 1,
            func: 0,
        };
        assert_eq!(vfs_wanted(&s, PF, &[other], |_| false), 0);
        assert_eq!(vfs_wanted(&s, PF, &[vf_bdf(0)], |_| false), 1);
        assert_eq!(
            vfs_wanted(&s, PF, &[vf_bdf(2), other, vf_bdf(0)], |_| false),
            3
        );
        // A real function at VF 2's BDF: the plan means it.
        assert_eq!(
            vfs_wanted(&s, PF, &[vf_bdf(2), vf_bdf(0)], |b| b == vf_bdf(2)),
            1
        );
    }

    #[test]
    fn enable_places_the_apertures_clear_of_what_is_taken_and_turns_the_vfs_on() {
        let mut pf = Pf::igb();
        let s = probe(&mut pf, PF).unwrap().unwrap();
        pf.writes.clear();
        // The first 64 KiB of the 64-bit window are someone's.
        let mut taken = alloc::vec![(0x80_0000_0000, 0x1_0000)];
        let vfs = enable(&mut pf, &igb_function(), &s, 3, &bridge(), &mut taken).unwrap();
        assert_eq!(pf.get(SRIOV_AT + NUM_VFS, 2), 3);
        assert_eq!(
            pf.get(SRIOV_AT + CONTROL, 2),
            CONTROL_VF_ENABLE | CONTROL_VF_MSE
        );
        assert_eq!(pf.get(SRIOV_AT + SYSTEM_PAGE_SIZE, 4), 1);
        // VF BAR0's aperture: 3 x 16 KiB after the taken 64 KiB; VF BAR3's
        // after that, 16 KiB aligned.
        let bar0 = u64::from(pf.get(SRIOV_AT + VF_BAR0, 4) & !0xf)
            | u64::from(pf.get(SRIOV_AT + VF_BAR0 + 4, 4)) << 32;
        let bar3 = u64::from(pf.get(SRIOV_AT + VF_BAR0 + 12, 4) & !0xf)
            | u64::from(pf.get(SRIOV_AT + VF_BAR0 + 16, 4)) << 32;
        assert_eq!(bar0, 0x80_0001_0000);
        assert_eq!(bar3, 0x80_0001_c000);
        assert_eq!(
            taken[1..],
            [(0x80_0001_0000, 0xc000), (0x80_0001_c000, 0xc000)]
        );
        // VF Enable is written last, after NumVFs and the VF BARs.
        let control_at = pf
            .writes
            .iter()
            .position(|w| w.0 == SRIOV_AT + CONTROL)
            .unwrap();
        assert_eq!(control_at, pf.writes.len() - 1);
        assert_eq!(vfs.len(), 3);
        let v2 = &vfs[2];
        assert_eq!(
            (v2.bdf, v2.vendor, v2.device, v2.class, v2.pin, v2.bridge),
            (vf_bdf(2), 0x8086, 0x10ca, 0x02_0000, 0, false)
        );
        assert_eq!(
            v2.vf,
            Some(VfOf {
                pf: PF,
                bars: alloc::vec![(0, bar0 + 2 * 0x4000), (3, bar3 + 2 * 0x4000)],
            })
        );
        assert_eq!(v2.bars, s.vf_bars);
        // The VF answers (class code) although its IDs read 0xffff.
        assert!(crate::pci::present(&mut pf, v2.bdf));
        assert!(!crate::pci::present(&mut pf, vf_bdf(3)), "NumVFs is 3");
    }

    #[test]
    fn vf_bars_below_a_page_or_without_room_are_refused_and_nothing_is_enabled() {
        let mut pf = Pf::igb();
        pf.vf_bars[0].1 = 0x800;
        let s = probe(&mut pf, PF).unwrap().unwrap();
        let mut taken = Vec::new();
        assert_eq!(
            enable(&mut pf, &igb_function(), &s, 1, &bridge(), &mut taken),
            Err(EnableError::BarBelowPage {
                reg: 0,
                size: 0x800
            })
        );
        let mut pf = Pf::igb();
        let s = probe(&mut pf, PF).unwrap().unwrap();
        let mut small = bridge();
        small.ranges = alloc::vec![crate::dtb::PciRange {
            space: PciSpace::Mem32,
            prefetchable: false,
            pci_addr: 0x1000_0000,
            cpu_addr: 0x1000_0000,
            size: 0x8000,
        }];
        assert_eq!(
            enable(&mut pf, &igb_function(), &s, 2, &small, &mut taken),
            Err(EnableError::NoRoom {
                reg: 3,
                size: 0x8000
            })
        );
        assert_eq!(pf.get(SRIOV_AT + CONTROL, 2), 0);
        assert_eq!(pf.get(SRIOV_AT + NUM_VFS, 2), 0);
        assert!(taken.is_empty(), "a refused enable holds nothing");
    }
}
