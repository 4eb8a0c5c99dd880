//! Assembles `pinfold.bin`: the flat EL2 image, padded, with the partition
//! payload appended and the arm64 Image header's image_size patched to cover
//! it and the EL2 heap after it (`pinfold_hv::memmap::image_layout`), so a
//! loader that honours image_size reserves both; the heap is not in the
//! file.

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
    if has_magic {
        let needed = (el2.len() as u64).next_multiple_of(IMAGE_TAIL_ALIGN) + EL2_HEAP_SIZE;
        el2[IMAGE_SIZE_OFFSET..IMAGE_SIZE_OFFSET + 8].copy_from_slice(&needed.to_le_bytes());
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
        assert!(out.warnings.is_empty());
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

        assert_eq!(out.warnings, vec![HeaderWarning::MissingMagic]);
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
            vec![HeaderWarning::ImageSizeBeyondFile {
                claimed: 3 * 4096,
                file: 4096
            }]
        );
    }

    #[test]
    fn is_arm64_image_checks_magic_at_offset_56() {
        let image = el2_with_header(64, 0);

        assert!(is_arm64_image(&image));
        assert!(!is_arm64_image(&image[..59]));
        assert!(!is_arm64_image(&[0u8; 64]));
    }
}
