//! Assembles `pinfold.bin`: the flat EL2 image, padded, with the partition
//! payload appended and the arm64 Image header's image_size patched to cover
//! it and the EL2 heap after it (`pinfold_hv::memmap::image_layout`), so a
//! loader that honours image_size reserves both; the heap is not in the
//! file. The same file is a PE/COFF EFI application (platform entry.S): its
//! length-dependent PE fields are patched here too, so an EFI loader loads
//! the whole file (payload included) as the .data section and zero-fills
//! the heap after it.

use pinfold_hv::memmap::{EL2_HEAP_SIZE, IMAGE_TAIL_ALIGN};

/// Alignment of the payload after the EL2 image (and of the heap after it).
pub const PAYLOAD_ALIGN: usize = IMAGE_TAIL_ALIGN as usize;
/// Byte offset of `image_size` (u64 LE) in the arm64 Image header
/// (Documentation/arch/arm64/booting.rst).
pub const IMAGE_SIZE_OFFSET: usize = 16;
/// Byte offset of the header magic.
pub const MAGIC_OFFSET: usize = 56;
/// The arm64 Image header magic, "ARM\x64".
pub const ARM64_MAGIC: [u8; 4] = *b"ARM\x64";

/// Offset of the DOS header's `e_lfanew`, the PE header's offset (also the
/// last word of the arm64 Image header).
pub const PE_POINTER_OFFSET: usize = 0x3c;
/// PE section and file alignment the image is built with (entry.S).
pub const PE_ALIGN: usize = 0x1000;

/// Where the length-dependent fields of the image's PE header are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PeFields {
    /// Optional header: SizeOfInitializedData, SizeOfImage, CheckSum.
    size_of_initialized_data: usize,
    size_of_image: usize,
    checksum: usize,
    /// The `.data` section header's VirtualSize and SizeOfRawData, and its
    /// VirtualAddress (= file offset) as written.
    data_virtual_size: usize,
    data_raw_size: usize,
    data_rva: u64,
}

/// Finds the PE header the way a loader does ("MZ", e_lfanew, "PE\0\0",
/// a PE32+ optional header) and the `.data` section's header in it. None
/// for a file without one (an image before the PE header existed).
fn pe_fields(bytes: &[u8]) -> Option<PeFields> {
    if bytes.get(..2)? != b"MZ" {
        return None;
    }
    let pe = u32::from_le_bytes(
        bytes
            .get(PE_POINTER_OFFSET..PE_POINTER_OFFSET + 4)?
            .try_into()
            .ok()?,
    ) as usize;
    if bytes.get(pe..pe + 4)? != b"PE\0\0" {
        return None;
    }
    let u16_at = |at: usize| -> Option<u16> {
        Some(u16::from_le_bytes(bytes.get(at..at + 2)?.try_into().ok()?))
    };
    let sections = u16_at(pe + 6)? as usize;
    let optional = pe + 24;
    let optional_size = u16_at(pe + 20)? as usize;
    if u16_at(optional)? != 0x20b {
        return None;
    }
    let table = optional + optional_size;
    (0..sections).find_map(|i| {
        let header = table + i * 40;
        (bytes.get(header..header + 8)? == b".data\0\0\0").then_some(())?;
        Some(PeFields {
            size_of_initialized_data: optional + 8,
            size_of_image: optional + 56,
            checksum: optional + 64,
            data_virtual_size: header + 8,
            data_raw_size: header + 16,
            data_rva: u64::from(u32::from_le_bytes(
                bytes.get(header + 12..header + 16)?.try_into().ok()?,
            )),
        })
    })
}

fn write_u32(bytes: &mut [u8], at: usize, value: u32) {
    bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
}

/// What `assemble` noticed about the EL2 image that is worth a warning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeaderWarning {
    /// No arm64 Image header: image_size was left alone, and QEMU will not
    /// treat the file as an Image (no DTB in x0).
    MissingMagic,
    /// The header claimed more memory than the flat image holds, so the
    /// payload now sits inside what the image thought was its own (e.g. a
    /// NOLOAD region): the hypervisor would overwrite its payload.
    ImageSizeBeyondFile { claimed: u64, file: u64 },
    /// The image has no PE header with a `.data` section: UEFI cannot
    /// start it (it still boots through the Image header).
    MissingPeHeader,
    /// The image is too large for the PE header's 32-bit sizes.
    TooLargeForPe { bytes: u64 },
}

/// The finished image and where its payload starts.
#[derive(Debug)]
pub struct Assembled {
    pub bytes: Vec<u8>,
    pub payload_offset: usize,
    pub warnings: Vec<HeaderWarning>,
}

/// Pads `el2` to `PAYLOAD_ALIGN`, appends `payload`, and writes the memory
/// the image needs (the file rounded up to `PAYLOAD_ALIGN`, then the heap)
/// into the Image header's image_size when the header is present.
pub fn assemble(mut el2: Vec<u8>, payload: &[u8]) -> Assembled {
    let mut warnings = Vec::new();
    let flat_len = el2.len() as u64;
    let has_magic = el2.get(MAGIC_OFFSET..MAGIC_OFFSET + 4) == Some(&ARM64_MAGIC[..]);
    if has_magic {
        let claimed = read_u64(&el2, IMAGE_SIZE_OFFSET);
        if claimed > flat_len.next_multiple_of(PAYLOAD_ALIGN as u64) {
            warnings.push(HeaderWarning::ImageSizeBeyondFile {
                claimed,
                file: flat_len,
            });
        }
    } else {
        warnings.push(HeaderWarning::MissingMagic);
    }
    el2.resize(el2.len().next_multiple_of(PAYLOAD_ALIGN), 0);
    let payload_offset = el2.len();
    el2.extend_from_slice(payload);
    let pe = pe_fields(&el2);
    if pe.is_some() {
        // Whole PE file-alignment units: .data's raw data ends at the file's
        // end, and a loader reads all of it.
        el2.resize(el2.len().next_multiple_of(PE_ALIGN), 0);
    } else {
        warnings.push(HeaderWarning::MissingPeHeader);
    }
    let needed = (el2.len() as u64).next_multiple_of(IMAGE_TAIL_ALIGN) + EL2_HEAP_SIZE;
    if has_magic {
        el2[IMAGE_SIZE_OFFSET..IMAGE_SIZE_OFFSET + 8].copy_from_slice(&needed.to_le_bytes());
    }
    if let Some(pe) = pe {
        let file = el2.len() as u64;
        match (
            u32::try_from(needed),
            u32::try_from(needed - pe.data_rva),
            u32::try_from(file - pe.data_rva),
        ) {
            (Ok(size_of_image), Ok(data_virtual), Ok(data_raw)) => {
                write_u32(&mut el2, pe.size_of_image, size_of_image);
                write_u32(&mut el2, pe.size_of_initialized_data, data_virtual);
                write_u32(&mut el2, pe.data_virtual_size, data_virtual);
                write_u32(&mut el2, pe.data_raw_size, data_raw);
                write_u32(&mut el2, pe.checksum, 0);
            }
            _ => warnings.push(HeaderWarning::TooLargeForPe { bytes: needed }),
        }
    }
    Assembled {
        bytes: el2,
        payload_offset,
        warnings,
    }
}

fn read_u64(bytes: &[u8], at: usize) -> u64 {
    let mut field = [0u8; 8];
    field.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(field)
}

/// The marker before the 32-byte bundle key slot in the EL2 image
/// (platform/src/main.rs `BUNDLE_KEY`).
pub const KEY_MARKER: &[u8; 16] = b"PINFOLD-BNDLKEY:";

/// Writes the bundle signing public key into the image's key slot. The
/// marker must occur exactly once, so a stray copy cannot be patched
/// instead of the slot the hypervisor reads.
pub fn enrol_key(image: &mut [u8], key: &[u8; 32]) -> Result<(), String> {
    let mut at = image
        .windows(KEY_MARKER.len())
        .enumerate()
        .filter(|(_, w)| w == KEY_MARKER)
        .map(|(i, _)| i);
    let slot = match (at.next(), at.next()) {
        (Some(i), None) => i + KEY_MARKER.len(),
        (None, _) => return Err("no bundle key slot (PINFOLD-BNDLKEY:) in the image".into()),
        (Some(_), Some(_)) => return Err("two bundle key slots in the image".into()),
    };
    let field = image
        .get_mut(slot..slot + key.len())
        .ok_or("the bundle key slot is cut short by the end of the image")?;
    field.copy_from_slice(key);
    Ok(())
}

/// Whether `bytes` start with an arm64 Image header.
pub fn is_arm64_image(bytes: &[u8]) -> bool {
    bytes.get(MAGIC_OFFSET..MAGIC_OFFSET + 4) == Some(&ARM64_MAGIC[..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn el2_with_header(len: usize, image_size: u64) -> Vec<u8> {
        let mut image = vec![0xAAu8; len];
        image[IMAGE_SIZE_OFFSET..IMAGE_SIZE_OFFSET + 8].copy_from_slice(&image_size.to_le_bytes());
        image[MAGIC_OFFSET..MAGIC_OFFSET + 4].copy_from_slice(&ARM64_MAGIC);
        image
    }

    #[test]
    fn the_key_goes_into_the_one_slot_after_the_marker() {
        let mut image = vec![0u8; 256];
        image[100..116].copy_from_slice(KEY_MARKER);

        enrol_key(&mut image, &[0xab; 32]).unwrap();

        assert_eq!(&image[116..148], &[0xab; 32]);
        assert!(image[..100].iter().chain(&image[148..]).all(|&b| b == 0));
    }

    #[test]
    fn no_slot_or_two_slots_are_refused() {
        let mut none = vec![0u8; 256];
        let mut two = vec![0u8; 256];
        two[10..26].copy_from_slice(KEY_MARKER);
        two[100..116].copy_from_slice(KEY_MARKER);
        let mut short = vec![0u8; 40];
        short[20..36].copy_from_slice(KEY_MARKER);

        assert!(enrol_key(&mut none, &[1; 32]).is_err());
        assert!(enrol_key(&mut two, &[1; 32]).is_err());
        assert!(enrol_key(&mut short, &[1; 32]).is_err());
    }

    #[test]
    fn payload_starts_at_next_4k_boundary() {
        let el2 = el2_with_header(5000, 5000);

        let out = assemble(el2, b"PINFPAYL");

        assert_eq!(out.payload_offset, 8192);
        assert_eq!(&out.bytes[8192..], b"PINFPAYL");
        assert!(out.bytes[5000..8192].iter().all(|b| *b == 0));
    }

    #[test]
    fn image_size_is_patched_to_the_aligned_file_plus_the_heap() {
        let el2 = el2_with_header(4096, 4096);

        let out = assemble(el2, &[1u8; 100]);

        assert_eq!(
            read_u64(&out.bytes, IMAGE_SIZE_OFFSET),
            8192 + EL2_HEAP_SIZE
        );
        assert_eq!(out.bytes.len(), 4196);
        assert_eq!(out.warnings, [HeaderWarning::MissingPeHeader]);
    }

    #[test]
    fn the_hypervisor_finds_payload_and_heap_where_assemble_put_them() {
        let el2 = el2_with_header(5000, 5000);
        let load = 0x4020_0000;

        let out = assemble(el2, &[3u8; 100]);

        let image_size = read_u64(&out.bytes, IMAGE_SIZE_OFFSET);
        let payload_start = load + out.payload_offset as u64;
        let layout =
            pinfold_hv::memmap::image_layout(load, payload_start, image_size).expect("layout");
        assert_eq!(layout.payload.0, payload_start);
        assert!(layout.payload.1 >= 100);
        assert!(layout.heap.0 >= load + out.bytes.len() as u64);
        assert_eq!(layout.heap.1, EL2_HEAP_SIZE);
    }

    #[test]
    fn image_without_magic_is_left_unpatched_with_a_warning() {
        let el2 = vec![0x11u8; 100];

        let out = assemble(el2, &[2u8; 10]);

        assert_eq!(
            out.warnings,
            vec![HeaderWarning::MissingMagic, HeaderWarning::MissingPeHeader]
        );
        assert_eq!(
            read_u64(&out.bytes, IMAGE_SIZE_OFFSET),
            0x1111_1111_1111_1111
        );
        assert_eq!(out.bytes.len(), 4106);
    }

    #[test]
    fn header_claiming_memory_past_the_file_is_reported() {
        let el2 = el2_with_header(4096, 3 * 4096);

        let out = assemble(el2, &[]);

        assert_eq!(
            out.warnings,
            vec![
                HeaderWarning::ImageSizeBeyondFile {
                    claimed: 3 * 4096,
                    file: 4096
                },
                HeaderWarning::MissingPeHeader
            ]
        );
    }

    #[test]
    fn is_arm64_image_checks_magic_at_offset_56() {
        let image = el2_with_header(64, 0);

        assert!(is_arm64_image(&image));
        assert!(!is_arm64_image(&image[..59]));
        assert!(!is_arm64_image(&[0u8; 64]));
    }

    /// RVA of `.data` in the synthetic images below.
    const DATA_RVA: u32 = 0x3000;

    /// An image laid out as entry.S writes it: Image header with "MZ" and
    /// the PE pointer, PE32+ header, .text at 0x1000 and .data at
    /// `DATA_RVA`, the length-dependent fields zero.
    fn el2_with_pe_header(len: usize) -> Vec<u8> {
        let mut image = el2_with_header(len, 0);
        image[..0x200].fill(0);
        image[IMAGE_SIZE_OFFSET..IMAGE_SIZE_OFFSET + 8].fill(0);
        image[MAGIC_OFFSET..MAGIC_OFFSET + 4].copy_from_slice(&ARM64_MAGIC);
        image[..4].copy_from_slice(&0xfa40_5a4du32.to_le_bytes());
        write_u32(&mut image, PE_POINTER_OFFSET, 0x40);
        let pe = 0x40;
        image[pe..pe + 4].copy_from_slice(b"PE\0\0");
        image[pe + 4..pe + 6].copy_from_slice(&0xaa64u16.to_le_bytes());
        image[pe + 6..pe + 8].copy_from_slice(&2u16.to_le_bytes());
        let optional = pe + 24;
        let optional_size = 112 + 6 * 8;
        image[pe + 20..pe + 22].copy_from_slice(&(optional_size as u16).to_le_bytes());
        image[pe + 22..pe + 24].copy_from_slice(&0x0206u16.to_le_bytes());
        image[optional..optional + 2].copy_from_slice(&0x20bu16.to_le_bytes());
        write_u32(&mut image, optional + 4, DATA_RVA - 0x1000);
        write_u32(&mut image, optional + 16, 0x1000);
        write_u32(&mut image, optional + 20, 0x1000);
        write_u32(&mut image, optional + 32, 0x1000);
        write_u32(&mut image, optional + 36, 0x1000);
        write_u32(&mut image, optional + 60, 0x1000);
        image[optional + 68..optional + 70].copy_from_slice(&10u16.to_le_bytes());
        write_u32(&mut image, optional + 108, 6);
        let table = optional + optional_size;
        for (i, (name, rva, size, flags)) in [
            (b".text\0\0\0", 0x1000, DATA_RVA - 0x1000, 0x6000_0020u32),
            (b".data\0\0\0", DATA_RVA, 0, 0xc000_0040),
        ]
        .into_iter()
        .enumerate()
        {
            let h = table + i * 40;
            image[h..h + 8].copy_from_slice(name);
            write_u32(&mut image, h + 8, size);
            write_u32(&mut image, h + 12, rva);
            write_u32(&mut image, h + 16, size);
            write_u32(&mut image, h + 20, rva);
            write_u32(&mut image, h + 36, flags);
        }
        image
    }

    fn u32_at(bytes: &[u8], at: usize) -> u32 {
        u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
    }

    /// What an EFI loader reads, through `object`'s PE reader (an
    /// independent parser): the headers, where `.data` is loaded and how
    /// much of it comes from the file.
    struct Pe {
        size_of_image: u32,
        size_of_initialized_data: u32,
        size_of_headers: u32,
        entry: u32,
        characteristics: u16,
        /// (name, RVA, VirtualSize, file offset, SizeOfRawData, flags).
        sections: Vec<(String, u32, u32, u32, u32, u32)>,
    }

    impl Pe {
        fn section(&self, name: &str) -> (u32, u32, u32, u32, u32) {
            let s = self
                .sections
                .iter()
                .find(|s| s.0.trim_end_matches('\0') == name)
                .unwrap_or_else(|| panic!("no {name} section"));
            (s.1, s.2, s.3, s.4, s.5)
        }
    }

    fn check_pe(bytes: &[u8]) -> Pe {
        use object::pe::{
            IMAGE_FILE_MACHINE_ARM64, IMAGE_NT_OPTIONAL_HDR64_MAGIC,
            IMAGE_SUBSYSTEM_EFI_APPLICATION,
        };
        use object::read::pe::{ImageNtHeaders, ImageOptionalHeader};
        use object::LittleEndian as LE;
        let dos = object::pe::ImageDosHeader::parse(bytes).expect("DOS header");
        let mut offset = dos.nt_headers_offset().into();
        let (nt, _dirs) =
            object::pe::ImageNtHeaders64::parse(bytes, &mut offset).expect("PE32+ headers");
        let file = nt.file_header();
        let optional = nt.optional_header();
        assert_eq!(file.machine.get(LE), IMAGE_FILE_MACHINE_ARM64);
        assert_eq!(optional.magic(), IMAGE_NT_OPTIONAL_HDR64_MAGIC);
        assert_eq!(optional.subsystem(), IMAGE_SUBSYSTEM_EFI_APPLICATION);
        assert_eq!(optional.check_sum(), 0);
        assert_eq!(optional.image_base(), 0);
        assert_eq!(optional.section_alignment(), PE_ALIGN as u32);
        assert_eq!(optional.file_alignment(), PE_ALIGN as u32);
        let table = nt.sections(bytes, offset).expect("section table");
        let pe = Pe {
            size_of_image: optional.size_of_image(),
            size_of_initialized_data: optional.size_of_initialized_data(),
            size_of_headers: optional.size_of_headers(),
            entry: optional.address_of_entry_point(),
            characteristics: file.characteristics.get(LE),
            sections: table
                .iter()
                .map(|s| {
                    (
                        String::from_utf8_lossy(s.raw_name()).into_owned(),
                        s.virtual_address.get(LE),
                        s.virtual_size.get(LE),
                        s.pointer_to_raw_data.get(LE),
                        s.size_of_raw_data.get(LE),
                        s.characteristics.get(LE),
                    )
                })
                .collect(),
        };
        let image_size = read_u64(bytes, IMAGE_SIZE_OFFSET);
        assert_eq!(
            u64::from(pe.size_of_image),
            image_size,
            "SizeOfImage is the Image header's image_size"
        );
        let (rva, virtual_size, raw_at, raw_size, _) = pe.section(".data");
        assert_eq!(
            u64::from(rva) + u64::from(virtual_size),
            image_size,
            ".data covers BSS, payload and heap up to image_size"
        );
        assert_eq!(
            raw_at as usize + raw_size as usize,
            bytes.len(),
            ".data's raw data is the rest of the file"
        );
        assert_eq!(bytes.len() % PE_ALIGN, 0);
        for s in &pe.sections {
            assert_eq!(s.1, s.3, "{}: RVA = file offset", s.0);
            assert_eq!(s.1 as usize % PE_ALIGN, 0, "{}: aligned", s.0);
        }
        assert!(
            u64::from(virtual_size - raw_size) >= EL2_HEAP_SIZE,
            "the heap is zero-filled by the loader, not in the file"
        );
        pe
    }

    #[test]
    fn pe_fields_are_patched_to_the_file_and_image_size() {
        let el2 = el2_with_pe_header(0x4800);

        let out = assemble(el2, &[7u8; 5000]);

        assert!(out.warnings.is_empty(), "{:?}", out.warnings);
        assert_eq!(out.payload_offset, 0x5000);
        assert_eq!(out.bytes.len(), 0x7000);
        let pe = check_pe(&out.bytes);
        assert_eq!(u64::from(pe.size_of_image), 0x7000 + EL2_HEAP_SIZE);
        assert_eq!(
            u64::from(pe.size_of_initialized_data),
            0x7000 + EL2_HEAP_SIZE - u64::from(DATA_RVA)
        );
        assert_eq!(&out.bytes[0x5000..0x5000 + 5000], &[7u8; 5000][..]);
    }

    #[test]
    fn the_generic_image_without_payload_is_still_a_whole_pe_file() {
        let out = assemble(el2_with_pe_header(0x4010), &[]);

        assert_eq!(out.bytes.len(), 0x5000);
        check_pe(&out.bytes);
    }

    #[test]
    fn a_text_section_field_is_left_as_linked() {
        let el2 = el2_with_pe_header(0x4000);
        let text_size_before = u32_at(&el2, 0x40 + 24 + 160 + 8);

        let out = assemble(el2, &[1u8; 10]);

        assert_eq!(u32_at(&out.bytes, 0x40 + 24 + 160 + 8), text_size_before);
        assert_eq!(u32_at(&out.bytes, 0x40 + 24 + 160 + 16), text_size_before);
    }

    /// The real EL2 image's header, as entry.S and the linker script make
    /// it (skipped until `cargo xtask build` has built it once).
    #[test]
    fn the_built_image_is_an_arm64_efi_application_and_an_arm64_image() {
        let flat = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../target/pinfold/pinfold-el2.bin");
        let Ok(el2) = std::fs::read(&flat) else {
            eprintln!("{} not built yet; skipped", flat.display());
            return;
        };
        // An image built before the last change to the entry assembly says
        // nothing about the header that assembly makes now.
        let entry = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../platform/src/arch/entry.S");
        let modified = |p: &std::path::Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        if modified(&flat) < modified(&entry) {
            eprintln!("{} is older than entry.S; skipped", flat.display());
            return;
        }

        let out = assemble(el2, &[0x5au8; 3000]);

        assert!(out.warnings.is_empty(), "{:?}", out.warnings);
        assert!(is_arm64_image(&out.bytes));
        assert_eq!(&out.bytes[..2], b"MZ");
        // code1 branches (to primary_entry): what booti and -kernel run
        // after the no-op in code0.
        assert_eq!(u32_at(&out.bytes, 4) >> 26, 0b000101, "code1 is a B");
        let pe = check_pe(&out.bytes);
        assert_eq!(pe.size_of_headers, 0x1000);
        let (text_rva, text_size, _, _, text_flags) = pe.section(".text");
        assert!(
            (text_rva..text_rva + text_size).contains(&pe.entry),
            "the entry point {:#x} is in .text",
            pe.entry
        );
        assert_eq!(text_flags & 0x2000_0000, 0x2000_0000, "executable");
        assert_eq!(pe.characteristics & 1, 0, "relocations not stripped");
    }
}
