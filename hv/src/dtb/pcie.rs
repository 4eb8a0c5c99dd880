//! The guest's view of a passed-through PCIe host bridge: the host bridge
//! node regenerated from what the host DTB said, with interrupts pointing at
//! the partition's emulated GIC, and the `msi-map` sending its own
//! functions' requester IDs to its virtual ITS ([`msi_map`]).

use super::guest::{spi_cells, GUEST_GIC_PHANDLE};
use super::host::{PciSpace, PcieInfo};
use crate::vgic5::GicInterface;
use alloc::vec::Vec;

/// Property cells of a `pci-host-ecam-generic` node, ready to be borrowed
/// by an `ExtraNode`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PcieCells {
    /// `reg`: the ECAM window (2 address + 2 size cells).
    pub reg: Vec<u32>,
    pub bus_range: [u32; 2],
    /// `ranges`: child (3) + parent (2) + size (2) cells per window.
    pub ranges: Vec<u32>,
    pub interrupt_map_mask: [u32; 4],
    /// `interrupt-map`: child (3) + pin (1) + GIC phandle (1) + parent unit
    /// address (2, the guest GIC's #address-cells) + GIC specifier (3).
    pub interrupt_map: Vec<u32>,
    /// Every SPI INTID the bridge's INTx lines use (sorted, unique).
    pub spis: Vec<u32>,
}

fn push_u64(v: &mut Vec<u32>, x: u64) {
    v.push((x >> 32) as u32);
    v.push(x as u32);
}

/// A host bridge node's `msi-map` (bindings/pci/pci-msi.txt: `<rid-base
/// msi-controller msi-base length>` entries) for the functions with
/// requester IDs `rids`: each its own DeviceID at the ITS `its_phandle`
/// (the physical ITS sees the same ones), runs of consecutive IDs one
/// entry. Nothing else maps: a requester ID that is not one of the
/// partition's functions has no DeviceID at its ITS.
pub fn msi_map(rids: &[u16], its_phandle: u32) -> Vec<u32> {
    let mut sorted = rids.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut map: Vec<u32> = Vec::new();
    for rid in sorted.into_iter().map(u32::from) {
        match map.rchunks_exact_mut(4).next() {
            Some([base, _, _, len]) if *base + *len == rid => *len += 1,
            _ => map.extend_from_slice(&[rid, its_phandle, rid, 1]),
        }
    }
    map
}

/// Builds the guest node's cells from the host bridge description, for a
/// guest GICv3.
pub fn pcie_cells(info: &PcieInfo) -> PcieCells {
    pcie_cells_for(info, GicInterface::V3)
}

/// As [`pcie_cells`], with the `interrupt-map`'s parent specifiers in the
/// encoding of the guest's interrupt controller (GICv5: type 3 = SPI).
pub fn pcie_cells_for(info: &PcieInfo, gic: GicInterface) -> PcieCells {
    let mut reg = Vec::new();
    push_u64(&mut reg, info.ecam.0);
    push_u64(&mut reg, info.ecam.1);
    let mut ranges = Vec::new();
    for r in &info.ranges {
        let code = match r.space {
            PciSpace::Config => 0,
            PciSpace::Io => 1,
            PciSpace::Mem32 => 2,
            PciSpace::Mem64 => 3,
        };
        ranges.push(code << 24 | (r.prefetchable as u32) << 30);
        push_u64(&mut ranges, r.pci_addr);
        push_u64(&mut ranges, r.cpu_addr);
        push_u64(&mut ranges, r.size);
    }
    let mut interrupt_map = Vec::new();
    let mut spis = Vec::new();
    for m in &info.interrupt_map {
        interrupt_map.extend_from_slice(&m.child_addr);
        interrupt_map.push(m.pin);
        interrupt_map.push(GUEST_GIC_PHANDLE);
        interrupt_map.extend_from_slice(&[0, 0]);
        interrupt_map.extend_from_slice(&spi_cells(m.intid.max(32), m.flags, gic));
        spis.push(m.intid);
    }
    spis.sort_unstable();
    spis.dedup();
    PcieCells {
        reg,
        bus_range: [info.bus_range.0, info.bus_range.1],
        ranges,
        interrupt_map_mask: info.interrupt_map_mask,
        interrupt_map,
        spis,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtb::host::{PciIntxMap, PciRange};
    use alloc::string::String;
    use alloc::vec;

    #[test]
    fn msi_map_gives_each_run_of_consecutive_rids_one_entry() {
        // 00:02.0, 00:02.1 (consecutive), 00:04.0, named out of order.
        let map = msi_map(&[0x20, 0x11, 0x10], 3);

        assert_eq!(map, [0x10, 3, 0x10, 2, 0x20, 3, 0x20, 1]);
        assert!(msi_map(&[], 3).is_empty());
    }

    fn bridge() -> PcieInfo {
        PcieInfo {
            ecam: (0x40_1000_0000, 0x1000_0000),
            bus_range: (0, 0xff),
            ranges: vec![
                PciRange {
                    space: PciSpace::Io,
                    prefetchable: false,
                    pci_addr: 0,
                    cpu_addr: 0x3eff_0000,
                    size: 0x1_0000,
                },
                PciRange {
                    space: PciSpace::Mem64,
                    prefetchable: true,
                    pci_addr: 0x80_0000_0000,
                    cpu_addr: 0x80_0000_0000,
                    size: 0x80_0000_0000,
                },
            ],
            interrupt_map: vec![
                PciIntxMap {
                    child_addr: [0, 0, 0],
                    pin: 1,
                    intid: 35,
                    flags: 4,
                },
                PciIntxMap {
                    child_addr: [0x800, 0, 0],
                    pin: 1,
                    intid: 36,
                    flags: 4,
                },
                PciIntxMap {
                    child_addr: [0x1000, 0, 0],
                    pin: 1,
                    intid: 35,
                    flags: 4,
                },
            ],
            interrupt_map_mask: [0x1800, 0, 0, 7],
            node_path: String::from("/pcie@10000000"),
            msi_map: alloc::vec::Vec::new(),
            iommu_map: alloc::vec::Vec::new(),
        }
    }

    #[test]
    fn ranges_encode_space_prefetch_and_addresses_in_seven_cells() {
        let cells = pcie_cells(&bridge());

        assert_eq!(cells.ranges.len(), 14);
        assert_eq!(
            &cells.ranges[..7],
            &[0x0100_0000, 0, 0, 0, 0x3eff_0000, 0, 0x1_0000]
        );
        assert_eq!(cells.ranges[7], 0x4300_0000);
        assert_eq!(&cells.ranges[8..10], &[0x80, 0]);
    }

    #[test]
    fn interrupt_map_points_at_the_guest_gic_with_spi_numbers() {
        let cells = pcie_cells(&bridge());

        assert_eq!(cells.interrupt_map.len(), 3 * 10);
        assert_eq!(
            &cells.interrupt_map[..10],
            &[0, 0, 0, 1, GUEST_GIC_PHANDLE, 0, 0, 0, 3, 4]
        );
        assert_eq!(cells.spis, vec![35, 36]);
        assert_eq!(cells.reg, vec![0x40, 0x1000_0000, 0, 0x1000_0000]);
    }

    #[test]
    fn a_gicv5_guests_interrupt_map_uses_the_gicv5_spi_type() {
        let cells = pcie_cells_for(&bridge(), GicInterface::V5);
        assert_eq!(
            &cells.interrupt_map[..10],
            &[0, 0, 0, 1, GUEST_GIC_PHANDLE, 0, 0, 3, 3, 4]
        );
    }
}
