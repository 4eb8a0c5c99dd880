//! SR-IOV: the virtual functions a physical function can have, read from
//! its SR-IOV extended capability (PCIe Base 6.0, 9.3.3), so that a plan
//! can name a VF's BDF once the hypervisor enables it.
//!
//! Decided here, host-tested against a fake configuration space
//! (`tests` below); enumeration only so far (docs/DEVICES.md, "SR-IOV"):
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

use crate::pci::{Bdf, ConfigSpace};
use crate::vpci::{BarSpace, HostBar};
use alloc::vec::Vec;

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
const VF_BAR0: u16 = 0x24;

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
        let pf_rid = u32::from(pf.bus) << 8 | u32::from(pf.dev) << 3 | u32::from(pf.func);
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
        fn read(&mut self, _: Bdf, offset: u16, width: u8) -> u32 {
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
}
