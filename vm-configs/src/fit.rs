//! Where a partition's kernel, initrd and DTB go in its RAM, decided once:
//! the build-time validation and the hypervisor's image loader both call
//! [`place_images`], so the build accepts exactly the plans that boot.
//!
//! The layout, as offsets from the partition's RAM base (which is 2 MiB
//! aligned):
//!
//! ```text
//! 0                     kernel_offset        kernel_end   initrd     dtb_offset   ram_size
//! |  (free)             | kernel (+bss)      |   (free)   | initrd   | DTB area    |
//! ```
//!
//! - A Linux Image (Linux `Documentation/arch/arm64/booting.rst`) is placed
//!   at `text_offset` when its header's `image_size` is non-zero, and its
//!   footprint is `max(image_size, file length)` (image_size includes the
//!   bss). With `image_size == 0` (kernels before 3.17) it goes at
//!   `LEGACY_IMAGE_OFFSET` and takes its file length.
//! - A raw kernel goes at `RAW_KERNEL_OFFSET` and takes its file length.
//! - The DTB area is the last `DTB_AREA` bytes of RAM.
//! - The initrd ends at the DTB area, its start aligned down to 4 KiB.
//!
//! A kernel that ends exactly where the DTB area (or the initrd) starts
//! fits; one byte more does not.

use core::fmt;

use pinfold_vboard::{DTB_AREA, LEGACY_IMAGE_OFFSET, RAW_KERNEL_OFFSET};

use crate::plan::KernelFormat;

/// Bytes of the arm64 Image header [`place_images`] reads.
pub const IMAGE_HEADER_LEN: usize = 64;
/// The initrd's start is aligned down to this.
pub const INITRD_ALIGN: u64 = 0x1000;

/// Where the images go, as byte offsets from the partition's RAM base.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImagePlacement {
    /// Where the kernel's first byte is copied and where it is entered.
    pub kernel_offset: u64,
    /// Bytes the kernel occupies from `kernel_offset` (bss included for a
    /// Linux Image).
    pub kernel_footprint: u64,
    /// `(start, end)` of the initrd's bytes, if there is one.
    pub initrd: Option<(u64, u64)>,
    /// Start of the DTB area (`ram_size - DTB_AREA`).
    pub dtb_offset: u64,
}

impl ImagePlacement {
    /// One past the kernel's last byte.
    pub fn kernel_end(&self) -> u64 {
        self.kernel_offset + self.kernel_footprint
    }
}

/// Why the images do not fit the partition's RAM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FitError {
    /// A Linux Image shorter than its 64-byte header.
    HeaderTruncated { len: usize },
    /// The RAM cannot even hold the DTB area.
    RamBelowDtbArea { ram_size: u64 },
    /// The kernel runs into the DTB area.
    KernelOverlapsDtb {
        kernel_offset: u64,
        kernel_footprint: u64,
        dtb_offset: u64,
    },
    /// The initrd, placed below the DTB area, runs into the kernel.
    InitrdOverlapsKernel {
        initrd_len: u64,
        kernel_end: u64,
        dtb_offset: u64,
    },
}

impl fmt::Display for FitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            FitError::HeaderTruncated { len } => write!(
                f,
                "the kernel has {len} bytes, less than the {IMAGE_HEADER_LEN}-byte arm64 Image header"
            ),
            FitError::RamBelowDtbArea { ram_size } => write!(
                f,
                "{ram_size:#x} bytes of RAM cannot hold the {DTB_AREA:#x}-byte DTB area"
            ),
            FitError::KernelOverlapsDtb {
                kernel_offset,
                kernel_footprint,
                dtb_offset,
            } => write!(
                f,
                "the kernel at RAM+{kernel_offset:#x} needs {kernel_footprint:#x} bytes and ends at \
                 RAM+{:#x}, past the DTB area at RAM+{dtb_offset:#x}",
                kernel_offset.saturating_add(kernel_footprint)
            ),
            FitError::InitrdOverlapsKernel {
                initrd_len,
                kernel_end,
                dtb_offset,
            } => write!(
                f,
                "the initrd ({initrd_len:#x} bytes) does not fit between the kernel's end at \
                 RAM+{kernel_end:#x} and the DTB area at RAM+{dtb_offset:#x}"
            ),
        }
    }
}

impl core::error::Error for FitError {}

fn le64(header: &[u8], at: usize) -> u64 {
    header
        .get(at..at + 8)
        .and_then(|bytes| bytes.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

/// Places a kernel of `kernel_len` bytes (whose first bytes are
/// `kernel_header`; at least [`IMAGE_HEADER_LEN`] of them for a Linux Image)
/// and an optional initrd of `initrd_len` bytes in `ram_size` bytes of RAM.
pub fn place_images(
    kernel_header: &[u8],
    kernel_len: u64,
    format: KernelFormat,
    initrd_len: Option<u64>,
    ram_size: u64,
) -> Result<ImagePlacement, FitError> {
    let (kernel_offset, kernel_footprint) = match format {
        KernelFormat::Raw => (RAW_KERNEL_OFFSET, kernel_len),
        KernelFormat::LinuxImage => {
            if kernel_header.len() < IMAGE_HEADER_LEN {
                return Err(FitError::HeaderTruncated {
                    len: kernel_header.len(),
                });
            }
            let text_offset = le64(kernel_header, 8);
            let image_size = le64(kernel_header, 16);
            if image_size == 0 {
                (LEGACY_IMAGE_OFFSET, kernel_len)
            } else {
                (text_offset, image_size.max(kernel_len))
            }
        }
    };
    let dtb_offset = ram_size
        .checked_sub(DTB_AREA)
        .ok_or(FitError::RamBelowDtbArea { ram_size })?;
    let kernel_end = kernel_offset
        .checked_add(kernel_footprint)
        .filter(|&end| end <= dtb_offset)
        .ok_or(FitError::KernelOverlapsDtb {
            kernel_offset,
            kernel_footprint,
            dtb_offset,
        })?;
    let initrd = match initrd_len {
        None => None,
        Some(len) => {
            let start = dtb_offset
                .checked_sub(len)
                .map(|start| start & !(INITRD_ALIGN - 1))
                .filter(|&start| start >= kernel_end)
                .ok_or(FitError::InitrdOverlapsKernel {
                    initrd_len: len,
                    kernel_end,
                    dtb_offset,
                })?;
            Some((start, start + len))
        }
    };
    Ok(ImagePlacement {
        kernel_offset,
        kernel_footprint,
        initrd,
        dtb_offset,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// An arm64 Image header with `text_offset` and `image_size`.
    fn header(text_offset: u64, image_size: u64) -> [u8; IMAGE_HEADER_LEN] {
        let mut h = [0u8; IMAGE_HEADER_LEN];
        h[8..16].copy_from_slice(&text_offset.to_le_bytes());
        h[16..24].copy_from_slice(&image_size.to_le_bytes());
        h[56..60].copy_from_slice(b"ARM\x64");
        h
    }

    #[test]
    fn linux_image_goes_at_text_offset_with_image_size_footprint() {
        let placed = place_images(
            &header(0, 20 * MIB),
            10 * MIB,
            KernelFormat::LinuxImage,
            None,
            64 * MIB,
        )
        .unwrap();

        assert_eq!(placed.kernel_offset, 0);
        assert_eq!(placed.kernel_footprint, 20 * MIB);
        assert_eq!(placed.dtb_offset, 62 * MIB);
        assert_eq!(placed.initrd, None);
    }

    #[test]
    fn linux_image_longer_than_its_image_size_takes_its_file_length() {
        let placed = place_images(
            &header(0x8_0000, MIB),
            3 * MIB,
            KernelFormat::LinuxImage,
            None,
            64 * MIB,
        )
        .unwrap();

        assert_eq!(placed.kernel_offset, 0x8_0000);
        assert_eq!(placed.kernel_footprint, 3 * MIB);
    }

    #[test]
    fn legacy_image_without_image_size_goes_at_0x80000_with_its_file_length() {
        let placed = place_images(
            &header(0x1234, 0),
            5 * MIB,
            KernelFormat::LinuxImage,
            None,
            64 * MIB,
        )
        .unwrap();

        assert_eq!(placed.kernel_offset, LEGACY_IMAGE_OFFSET);
        assert_eq!(placed.kernel_footprint, 5 * MIB);
    }

    #[test]
    fn raw_kernel_goes_at_raw_offset_ignoring_any_header() {
        let placed = place_images(
            &header(0, 40 * MIB),
            4096,
            KernelFormat::Raw,
            None,
            64 * MIB,
        )
        .unwrap();

        assert_eq!(placed.kernel_offset, RAW_KERNEL_OFFSET);
        assert_eq!(placed.kernel_footprint, 4096);
    }

    #[test]
    fn kernel_ending_exactly_at_the_dtb_area_fits() {
        let placed = place_images(
            &header(0, 62 * MIB),
            1,
            KernelFormat::LinuxImage,
            None,
            64 * MIB,
        )
        .unwrap();

        assert_eq!(placed.kernel_end(), placed.dtb_offset);
    }

    #[test]
    fn kernel_one_byte_into_the_dtb_area_does_not_fit() {
        let error = place_images(
            &header(0, 62 * MIB + 1),
            1,
            KernelFormat::LinuxImage,
            None,
            64 * MIB,
        )
        .unwrap_err();

        assert_eq!(
            error,
            FitError::KernelOverlapsDtb {
                kernel_offset: 0,
                kernel_footprint: 62 * MIB + 1,
                dtb_offset: 62 * MIB
            }
        );
    }

    #[test]
    fn initrd_ends_at_the_dtb_area_with_its_start_page_aligned_down() {
        let placed = place_images(
            &header(0, MIB),
            MIB,
            KernelFormat::LinuxImage,
            Some(100),
            64 * MIB,
        )
        .unwrap();

        assert_eq!(
            placed.initrd,
            Some((62 * MIB - 4096, 62 * MIB - 4096 + 100))
        );
    }

    #[test]
    fn initrd_filling_the_gap_exactly_fits() {
        let placed = place_images(
            &header(0, MIB),
            MIB,
            KernelFormat::LinuxImage,
            Some(61 * MIB),
            64 * MIB,
        )
        .unwrap();

        assert_eq!(placed.initrd, Some((MIB, 62 * MIB)));
    }

    #[test]
    fn initrd_that_does_not_fit_beside_the_kernel_is_refused() {
        let error = place_images(
            &header(0, MIB),
            MIB,
            KernelFormat::LinuxImage,
            Some(61 * MIB + 1),
            64 * MIB,
        )
        .unwrap_err();

        assert_eq!(
            error,
            FitError::InitrdOverlapsKernel {
                initrd_len: 61 * MIB + 1,
                kernel_end: MIB,
                dtb_offset: 62 * MIB
            }
        );
    }

    #[test]
    fn initrd_larger_than_the_ram_is_refused_without_overflow() {
        let error = place_images(&[], 1, KernelFormat::Raw, Some(u64::MAX), 64 * MIB).unwrap_err();

        assert!(matches!(error, FitError::InitrdOverlapsKernel { .. }));
    }

    #[test]
    fn ram_smaller_than_the_dtb_area_is_refused() {
        let error = place_images(&[], 1, KernelFormat::Raw, None, MIB).unwrap_err();

        assert_eq!(error, FitError::RamBelowDtbArea { ram_size: MIB });
    }

    #[test]
    fn huge_text_offset_is_refused_without_overflow() {
        let error = place_images(
            &header(u64::MAX, 2),
            1,
            KernelFormat::LinuxImage,
            None,
            64 * MIB,
        )
        .unwrap_err();

        assert!(matches!(error, FitError::KernelOverlapsDtb { .. }));
    }

    #[test]
    fn linux_image_shorter_than_its_header_is_refused() {
        let error =
            place_images(&[0; 60], 60, KernelFormat::LinuxImage, None, 64 * MIB).unwrap_err();

        assert_eq!(error, FitError::HeaderTruncated { len: 60 });
    }
}
