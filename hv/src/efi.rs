//! What the UEFI boot path decides, kept here so the host tests can drive
//! it: the EFI memory map turned into the host's RAM and reserved ranges
//! (`memory_from_efi`), the bundle files tried beside the image's own boot
//! file (`bundle_candidates`), and the DT the boot uses for the host
//! (`host_source`). The platform's `efi` module does the firmware calls and
//! hands the results to the common boot; nothing here touches firmware.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

/// EFI memory types (UEFI 2.10, 7.2 `EFI_MEMORY_TYPE`).
pub mod memory_type {
    pub const RESERVED: u32 = 0;
    pub const LOADER_CODE: u32 = 1;
    pub const LOADER_DATA: u32 = 2;
    pub const BOOT_SERVICES_CODE: u32 = 3;
    pub const BOOT_SERVICES_DATA: u32 = 4;
    pub const RUNTIME_SERVICES_CODE: u32 = 5;
    pub const RUNTIME_SERVICES_DATA: u32 = 6;
    pub const CONVENTIONAL: u32 = 7;
    pub const UNUSABLE: u32 = 8;
    pub const ACPI_RECLAIM: u32 = 9;
    pub const ACPI_NVS: u32 = 10;
    pub const MMIO: u32 = 11;
    pub const MMIO_PORT_SPACE: u32 = 12;
    pub const PAL_CODE: u32 = 13;
    pub const PERSISTENT: u32 = 14;
    pub const UNACCEPTED: u32 = 15;
}

/// The `EFI_MEMORY_WB` attribute: the range can be mapped write-back
/// cacheable, i.e. it is memory and not a device.
pub const ATTRIBUTE_WB: u64 = 0x8;
/// EFI pages are 4 KiB whatever the CPU's granule.
pub const EFI_PAGE_SIZE: u64 = 4096;

/// One entry of the memory map GetMemoryMap returns (the fields the
/// hypervisor reads of `EFI_MEMORY_DESCRIPTOR`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryDescriptor {
    pub ty: u32,
    pub phys_start: u64,
    pub pages: u64,
    pub attribute: u64,
}

/// The host's memory as the EFI memory map describes it after
/// ExitBootServices, in the terms of `dtb::HostInfo`: `ram` is every range
/// of memory (what the DTB's /memory would list, so the EL2 map makes it
/// normal memory), `reserved` the parts of it the hypervisor must never
/// hand out (what /reserved-memory would list), plus MMIO ranges firmware
/// declared.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EfiMemory {
    pub ram: Vec<(u64, u64)>,
    pub reserved: Vec<(u64, u64)>,
    /// The ACPI reclaim and NVS ranges (also in `reserved`): where firmware
    /// keeps the ACPI tables, the only memory an ACPI table reader should
    /// trust (and what the UEFI path cleans to the point of coherency).
    pub acpi: Vec<(u64, u64)>,
}

/// What a memory type means once boot services are gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Free for the hypervisor: conventional memory, boot-services code and
    /// data, and loader code and data (the image, its heap and the bundle
    /// are loader memory: the boot adds them to its used ranges, as it does
    /// for the image under booti).
    Usable,
    /// Memory that stays someone else's: runtime services, ACPI tables and
    /// NVS, firmware-reserved, unusable, PAL code, persistent memory (it
    /// holds data across boots) and unaccepted memory.
    Kept,
    /// Not memory: MMIO firmware declared for runtime services.
    Device,
}

fn kind(ty: u32) -> Kind {
    use memory_type::*;
    match ty {
        LOADER_CODE | LOADER_DATA | BOOT_SERVICES_CODE | BOOT_SERVICES_DATA | CONVENTIONAL => {
            Kind::Usable
        }
        MMIO | MMIO_PORT_SPACE => Kind::Device,
        // RESERVED, RUNTIME_SERVICES_*, UNUSABLE, ACPI_*, PAL_CODE,
        // PERSISTENT, UNACCEPTED and any type this code does not know
        // (OEM and OS ranges above 0x7000_0000): keep away from it.
        _ => Kind::Kept,
    }
}

/// Converts the memory map firmware returned at ExitBootServices.
/// Usable ranges are RAM; kept ranges are RAM when they are write-back
/// capable memory (so the EL2 map covers them as memory) and are always
/// reserved; MMIO ranges are reserved only. Adjacent or overlapping ranges
/// of the same list are merged; empty descriptors are ignored.
pub fn memory_from_efi(map: &[MemoryDescriptor]) -> EfiMemory {
    let mut ram = Vec::new();
    let mut reserved = Vec::new();
    let mut acpi = Vec::new();
    for d in map {
        let Some(size) = d.pages.checked_mul(EFI_PAGE_SIZE) else {
            continue;
        };
        if size == 0 || d.phys_start.checked_add(size).is_none() {
            continue;
        }
        let range = (d.phys_start, size);
        if matches!(d.ty, memory_type::ACPI_RECLAIM | memory_type::ACPI_NVS) {
            acpi.push(range);
        }
        match kind(d.ty) {
            Kind::Usable => ram.push(range),
            Kind::Kept => {
                if d.attribute & ATTRIBUTE_WB != 0 {
                    ram.push(range);
                }
                reserved.push(range);
            }
            Kind::Device => reserved.push(range),
        }
    }
    EfiMemory {
        ram: merged(ram),
        reserved: merged(reserved),
        acpi: merged(acpi),
    }
}

/// `ranges` sorted by base, with touching or overlapping ranges joined.
fn merged(mut ranges: Vec<(u64, u64)>) -> Vec<(u64, u64)> {
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (base, size) in ranges {
        let end = base + size;
        match out.last_mut() {
            Some((b, s)) if base <= *b + *s => *s = (*b + *s).max(end) - *b,
            _ => out.push((base, size)),
        }
    }
    out
}

/// The directory part of a boot file name or URI, with its trailing `/`
/// (empty when the name has none): `pxe/pinfold.efi` -> `pxe/`,
/// `http://10.0.2.2:8000/t/pinfold.efi` -> `http://10.0.2.2:8000/t/`.
pub fn boot_dir(boot_file: &str) -> &str {
    match boot_file.rfind('/') {
        Some(i) => &boot_file[..=i],
        None => "",
    }
}

/// The PXE-style name of a MAC address: `01-` (the ARP hardware type of
/// Ethernet) then the bytes in lower-case hex, dash separated, as
/// pxelinux.cfg names per-host files.
pub fn mac_name(mac: &[u8; 6]) -> String {
    let mut name = String::from("01");
    for byte in mac {
        name.push_str(&format!("-{byte:02x}"));
    }
    name
}

/// The bundle files to try, in order, for an image whose own boot file (a
/// TFTP file name or an HTTP URI) is `boot_file`: the per-host bundle
/// `bundles/01-<mac>.bundle` when the MAC is known, then
/// `bundles/default.bundle`, both in the boot file's directory.
pub fn bundle_candidates(boot_file: &str, mac: Option<&[u8; 6]>) -> Vec<String> {
    let dir = boot_dir(boot_file);
    let mut names = Vec::new();
    if let Some(mac) = mac {
        names.push(format!("{dir}bundles/{}.bundle", mac_name(mac)));
    }
    names.push(format!("{dir}bundles/default.bundle"));
    names
}

/// Where the host description comes from under UEFI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostSource {
    /// The DT configuration table describes the machine.
    Dt,
    /// ACPI describes the machine; a DT, if any, only carries /chosen (the
    /// DT Debian's GRUB 2.06 makes for the initrd even on ACPI machines).
    Acpi,
    /// Neither.
    None,
}

/// Picks the host description: a DT that describes CPUs and memory wins
/// (QEMU `virt` with `acpi=off`, U-Boot's EFI); otherwise ACPI when firmware
/// published an RSDP; a DT without /cpus or /memory alone describes nothing.
pub fn host_source(dt_describes_hardware: bool, rsdp: bool) -> HostSource {
    match (dt_describes_hardware, rsdp) {
        (true, _) => HostSource::Dt,
        (false, true) => HostSource::Acpi,
        (false, false) => HostSource::None,
    }
}

#[cfg(test)]
mod tests {
    use super::memory_type::*;
    use super::*;
    use alloc::vec;

    const MIB: u64 = 1 << 20;

    fn desc(ty: u32, phys_start: u64, bytes: u64, attribute: u64) -> MemoryDescriptor {
        MemoryDescriptor {
            ty,
            phys_start,
            pages: bytes / EFI_PAGE_SIZE,
            attribute,
        }
    }

    /// The shape of edk2's map on QEMU virt after ExitBootServices: RAM at
    /// 1 GiB cut into many typed pieces, the flash and the UART as MMIO.
    fn qemu_like_map() -> Vec<MemoryDescriptor> {
        let wb = ATTRIBUTE_WB | 0xf;
        vec![
            desc(MMIO, 0x0400_0000, 64 * MIB, 1),
            desc(MMIO, 0x0900_0000, 4096, 1),
            desc(CONVENTIONAL, 0x4000_0000, 512 * MIB, wb),
            desc(LOADER_CODE, 0x6000_0000, 8 * MIB, wb),
            desc(LOADER_DATA, 0x6080_0000, 2 * MIB, wb),
            desc(BOOT_SERVICES_DATA, 0x60a0_0000, 6 * MIB, wb),
            desc(RUNTIME_SERVICES_DATA, 0x6100_0000, 2 * MIB, wb | (1 << 63)),
            desc(ACPI_RECLAIM, 0x6120_0000, MIB, wb),
            desc(BOOT_SERVICES_CODE, 0x6130_0000, MIB, wb),
            desc(RUNTIME_SERVICES_CODE, 0x6140_0000, MIB, wb | (1 << 63)),
            desc(CONVENTIONAL, 0x6150_0000, 0x8000_0000 - 0x2150_0000, wb),
        ]
    }

    #[test]
    fn boot_services_loader_and_conventional_memory_are_ram_runtime_and_acpi_are_reserved() {
        let memory = memory_from_efi(&qemu_like_map());

        assert_eq!(memory.ram, [(0x4000_0000, 2 << 30)]);
        assert_eq!(
            memory.reserved,
            [
                (0x0400_0000, 64 * MIB),
                (0x0900_0000, 4096),
                (0x6100_0000, 3 * MIB),
                (0x6140_0000, MIB),
            ]
        );
        assert_eq!(memory.acpi, [(0x6120_0000, MIB)]);
    }

    #[test]
    fn free_memory_after_the_conversion_excludes_firmware_runtime_ranges() {
        let memory = memory_from_efi(&qemu_like_map());

        let free = crate::memmap::FreeMemory::new(&memory.ram, &memory.reserved);

        let mut ranges = free.ranges().to_vec();
        ranges.sort_unstable();
        assert_eq!(
            ranges,
            [
                (0x4000_0000, 0x6100_0000 - 0x4000_0000),
                (0x6130_0000, MIB),
                (0x6150_0000, 0xc000_0000 - 0x6150_0000)
            ]
        );
    }

    #[test]
    fn kept_memory_without_write_back_is_reserved_but_not_ram() {
        let map = [
            desc(CONVENTIONAL, 0x8000_0000, 4 * MIB, ATTRIBUTE_WB),
            desc(RESERVED, 0x1000_0000, MIB, 0x1),
        ];

        let memory = memory_from_efi(&map);

        assert_eq!(memory.ram, [(0x8000_0000, 4 * MIB)]);
        assert_eq!(memory.reserved, [(0x1000_0000, MIB)]);
    }

    #[test]
    fn unknown_persistent_and_unaccepted_types_are_never_handed_out() {
        let wb = ATTRIBUTE_WB;
        let map = [
            desc(PERSISTENT, 0x1_0000_0000, MIB, wb),
            desc(UNACCEPTED, 0x1_0010_0000, MIB, wb),
            desc(0x8000_0001, 0x1_0020_0000, MIB, wb),
            desc(ACPI_NVS, 0x1_0030_0000, MIB, wb),
            desc(UNUSABLE, 0x1_0040_0000, MIB, wb),
            desc(PAL_CODE, 0x1_0050_0000, MIB, wb),
        ];

        let memory = memory_from_efi(&map);

        assert_eq!(memory.reserved, [(0x1_0000_0000, 6 * MIB)]);
        assert_eq!(memory.acpi, [(0x1_0030_0000, MIB)]);
        let free = crate::memmap::FreeMemory::new(&memory.ram, &memory.reserved);
        assert!(free.ranges().is_empty(), "{:?}", free.ranges());
    }

    #[test]
    fn empty_and_wrapping_descriptors_are_ignored() {
        let map = [
            desc(CONVENTIONAL, 0x4000_0000, 0, ATTRIBUTE_WB),
            MemoryDescriptor {
                ty: CONVENTIONAL,
                phys_start: u64::MAX - 4095,
                pages: 2,
                attribute: ATTRIBUTE_WB,
            },
            MemoryDescriptor {
                ty: CONVENTIONAL,
                phys_start: 0,
                pages: u64::MAX,
                attribute: ATTRIBUTE_WB,
            },
        ];

        assert_eq!(memory_from_efi(&map), EfiMemory::default());
    }

    #[test]
    fn unsorted_overlapping_ranges_are_merged() {
        let map = [
            desc(CONVENTIONAL, 0x5000_0000, 2 * MIB, ATTRIBUTE_WB),
            desc(CONVENTIONAL, 0x4000_0000, 0x1000_0000, ATTRIBUTE_WB),
            desc(LOADER_DATA, 0x5010_0000, 4 * MIB, ATTRIBUTE_WB),
            desc(CONVENTIONAL, 0x9000_0000, MIB, ATTRIBUTE_WB),
        ];

        let memory = memory_from_efi(&map);

        assert_eq!(memory.ram, [(0x4000_0000, 0x1050_0000), (0x9000_0000, MIB)]);
    }

    #[test]
    fn bundle_names_are_per_mac_then_default_beside_the_boot_file() {
        let mac = [0x52, 0x54, 0x00, 0x12, 0x34, 0xAB];

        assert_eq!(
            bundle_candidates("pinfold.efi", Some(&mac)),
            [
                "bundles/01-52-54-00-12-34-ab.bundle",
                "bundles/default.bundle"
            ]
        );
        assert_eq!(
            bundle_candidates("/srv/pxe/pinfold.efi", None),
            ["/srv/pxe/bundles/default.bundle"]
        );
        assert_eq!(
            bundle_candidates("http://10.0.2.2:8000/tree/pinfold.efi", Some(&mac)),
            [
                "http://10.0.2.2:8000/tree/bundles/01-52-54-00-12-34-ab.bundle",
                "http://10.0.2.2:8000/tree/bundles/default.bundle"
            ]
        );
    }

    #[test]
    fn mac_names_are_lower_case_dash_separated_after_the_ethernet_type() {
        assert_eq!(
            mac_name(&[0xDE, 0xAD, 0xBE, 0xEF, 0x00, 0x01]),
            "01-de-ad-be-ef-00-01"
        );
    }

    #[test]
    fn a_dt_describing_the_machine_wins_else_acpi_else_nothing() {
        assert_eq!(host_source(true, true), HostSource::Dt);
        assert_eq!(host_source(true, false), HostSource::Dt);
        assert_eq!(host_source(false, true), HostSource::Acpi);
        assert_eq!(host_source(false, false), HostSource::None);
    }
}
