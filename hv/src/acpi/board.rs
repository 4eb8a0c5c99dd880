//! What ACPI firmware describes only in AML (the DSDT's `_CRS`, `_PRT` and
//! device objects): the PCIe host bridge's windows and INTx routing, and
//! the platform devices a plan's `[[partition.device]]` names by DT path.
//! Pinfold does not interpret AML (an interpreter is a large attack surface
//! to run at EL2 for a handful of constants), so a board the tables
//! identify gets those constants from here, exactly as the DT path reports
//! them for the same machine; any other board gets no PCIe host bridge and
//! no devices, and a warning. docs/BOARDS.md says how to add a board.

use alloc::string::{String, ToString};
use alloc::vec::Vec;

use super::tables::Ecam;
use super::{AcpiWarning, Oem};
use crate::dtb::{HostDevice, HostInfo, PciIntxMap, PciRange, PciSpace, PcieInfo};

/// The boards the fallback knows, by the name `AcpiTables::board` reports.
pub const KNOWN_BOARDS: [&str; 1] = [QEMU_VIRT];

const QEMU_VIRT: &str = "QEMU virt";

/// Fills `pcie` and `devices` from a known board's constants, or warns.
pub(super) fn apply(
    host: &mut HostInfo,
    mcfg: Option<(Oem, Option<Ecam>)>,
    warnings: &mut Vec<AcpiWarning>,
) -> Option<&'static str> {
    let ecam = mcfg.and_then(|(_, e)| e);
    if let Some((oem, Some(ecam))) = mcfg {
        if is_qemu_virt(oem, ecam) {
            qemu_virt(host, ecam);
            return Some(QEMU_VIRT);
        }
    }
    let (oem_id, oem_table_id) = mcfg.map(|(oem, _)| oem).unwrap_or_default();
    warnings.push(AcpiWarning::UnknownBoard {
        oem_id,
        oem_table_id,
        ecam: ecam.map(|e| e.window.0),
    });
    None
}

/// QEMU's ACPI tables (hw/arm/virt-acpi-build.c) carry OEM ID "BOCHS " and
/// OEM table ID "BXPC    " on every table; its `virt` machine with the
/// high memory layout (the default; any RAM size below 255 GiB) puts a
/// 256-bus ECAM at 0x40_1000_0000. Other layouts (`highmem=off`, RAM above
/// 255 GiB, where the high windows move) are not recognised.
fn is_qemu_virt((oem_id, oem_table_id): Oem, ecam: Ecam) -> bool {
    &oem_id == b"BOCHS "
        && &oem_table_id == b"BXPC    "
        && ecam.window == (0x40_1000_0000, 0x1000_0000)
        && ecam.bus_range == (0, 0xff)
}

/// QEMU 7.2 `virt` (hw/arm/virt.c `base_memmap`, `extended_memmap`,
/// `create_pcie`, and the DT nodes it makes), as `parse_host_dtb` reads the
/// machine's DTB; checked against it field by field in the tests.
fn qemu_virt(host: &mut HostInfo, ecam: Ecam) {
    // INTx: 4 SPIs from 3 (INTIDs 35..38), swizzled by device number.
    const PCIE_IRQ: u32 = 32 + 3;
    let interrupt_map = (0..4u32)
        .flat_map(|dev| {
            (1..=4u32).map(move |pin| PciIntxMap {
                child_addr: [dev << 11, 0, 0],
                pin,
                intid: PCIE_IRQ + (dev + pin - 1) % 4,
                flags: 4, // level, active high
            })
        })
        .collect();
    host.pcie = Some(PcieInfo {
        ecam: ecam.window,
        bus_range: ecam.bus_range,
        ranges: qemu_virt_pci_ranges(),
        interrupt_map,
        interrupt_map_mask: [0x1800, 0, 0, 7],
        node_path: "/pcie@10000000".to_string(),
        msi_map: alloc::vec::Vec::new(),
        // Filled from the IORT, when there is one (`parse_host_acpi`,
        // which also adds its SMMUv3s to `devices`).
        iommu_map: alloc::vec::Vec::new(),
    });

    let device =
        |path: String, compatible: &[&str], regs: Vec<(u64, u64)>, spis: Vec<u32>| HostDevice {
            path,
            compatible: compatible.iter().map(|c| c.to_string()).collect(),
            regs,
            spis,
            enabled: true,
            smmu_model: Default::default(),
        };
    let primecell = |name: &str, base: u64, spi: u32| {
        device(
            alloc::format!("/{name}@{base:x}"),
            &[&alloc::format!("arm,{name}"), "arm,primecell"],
            alloc::vec![(base, 0x1000)],
            alloc::vec![32 + spi],
        )
    };
    // In the order of the DTB's nodes (QEMU creates them last to first).
    let mut devices = alloc::vec![device(
        "/fw-cfg@9020000".to_string(),
        &["qemu,fw-cfg-mmio"],
        alloc::vec![(0x902_0000, 0x18)],
        Vec::new(),
    )];
    devices.extend((0..32u64).map(|k| {
        let base = 0xa00_0000 + 0x200 * k;
        device(
            alloc::format!("/virtio_mmio@{base:x}"),
            &["virtio,mmio"],
            alloc::vec![(base, 0x200)],
            alloc::vec![32 + 16 + k as u32],
        )
    }));
    devices.push(primecell("pl061", 0x903_0000, 7));
    devices.push(device(
        "/pcie@10000000".to_string(),
        &["pci-host-ecam-generic"],
        alloc::vec![ecam.window],
        Vec::new(),
    ));
    devices.push(primecell("pl031", 0x901_0000, 2));
    devices.push(primecell("pl011", 0x900_0000, 1));
    // The GIC as the MADT describes it, under the DT's names. A GICv5's
    // nodes are not described here (no captured QEMU GICv5 DTB to name
    // them after); its IRS and ITS frames are still the hypervisor's
    // (`dtb::host_resources` takes them from `host.gic`).
    let gic = &host.gic;
    if gic.v5.is_none() {
        let mut gic_regs = alloc::vec![gic.dist];
        gic_regs.extend_from_slice(&gic.redist_regions);
        devices.push(device(
            alloc::format!("/intc@{:x}", gic.dist.0),
            &["arm,gic-v3"],
            gic_regs,
            Vec::new(),
        ));
        for &(base, size) in &gic.its {
            devices.push(device(
                alloc::format!("/intc@{:x}/its@{base:x}", gic.dist.0),
                &["arm,gic-v3-its"],
                alloc::vec![(base, size)],
                Vec::new(),
            ));
        }
    }
    devices.push(device(
        "/flash@0".to_string(),
        &["cfi-flash"],
        alloc::vec![(0, 0x400_0000), (0x400_0000, 0x400_0000)],
        Vec::new(),
    ));
    host.devices = devices;
}

/// QEMU virt's PCIe windows (MCFG names only the ECAM): I/O at
/// 0x3eff_0000, 32-bit memory at 0x1000_0000, 64-bit memory at 512 GiB,
/// each at the same address on the bus and for the CPU. Host tests that
/// model a QEMU virt bridge use it too.
pub(crate) fn qemu_virt_pci_ranges() -> Vec<PciRange> {
    alloc::vec![
        PciRange {
            space: PciSpace::Io,
            prefetchable: false,
            pci_addr: 0,
            cpu_addr: 0x3eff_0000,
            size: 0x1_0000,
        },
        PciRange {
            space: PciSpace::Mem32,
            prefetchable: false,
            pci_addr: 0x1000_0000,
            cpu_addr: 0x1000_0000,
            size: 0x2eff_0000,
        },
        PciRange {
            space: PciSpace::Mem64,
            prefetchable: false,
            pci_addr: 0x80_0000_0000,
            cpu_addr: 0x80_0000_0000,
            size: 0x80_0000_0000,
        },
    ]
}
