//! The guest physical address map every partition sees. It follows QEMU's
//! `virt` machine so that unmodified virt software runs.

/// Guest RAM starts here.
pub const GUEST_RAM_BASE: u64 = 0x4000_0000;
/// Emulated GICv3 distributor (64 KiB).
pub const GUEST_GICD_BASE: u64 = 0x0800_0000;
pub const GUEST_GICD_SIZE: u64 = 0x1_0000;
/// Emulated redistributors, one per vCPU, `GICR_STRIDE` apart.
pub const GUEST_GICR_BASE: u64 = 0x080A_0000;
/// RD_base frame + SGI_base frame (GICv3, 2 x 64 KiB).
pub const GICR_STRIDE: u64 = 0x2_0000;
/// Room for the redistributor region (QEMU virt reserves 0x080A_0000..0x0900_0000).
pub const GUEST_GICR_REGION_SIZE: u64 = 0x00F6_0000;
/// Emulated PL011.
pub const GUEST_UART_BASE: u64 = 0x0900_0000;
pub const GUEST_UART_SIZE: u64 = 0x1000;
/// SPI INTID of the emulated PL011 (SPI 1 as on QEMU virt).
pub const GUEST_UART_INTID: u32 = 33;
/// Offset of a raw kernel from the RAM base (as QEMU loads raw images).
pub const RAW_KERNEL_OFFSET: u64 = 0x8_0000;
/// Number of SPIs the emulated distributor offers (INTIDs 32..32+N).
pub const GUEST_SPI_COUNT: u32 = 256;

/// Timer PPIs (INTIDs): EL1 virtual timer, EL1 physical timer, EL2 physical
/// timer (the hypervisor's own), secure physical timer.
pub const PPI_VTIMER: u32 = 27;
pub const PPI_PTIMER: u32 = 30;
pub const PPI_HYP_TIMER: u32 = 26;
pub const PPI_SEC_PTIMER: u32 = 29;
/// GIC maintenance interrupt (virtual CPU interface).
pub const PPI_MAINTENANCE: u32 = 25;

/// An emulated device frame a guest IPA falls in, with the offset inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmulatedDevice {
    /// The distributor (GICD), offset in its 64 KiB frame.
    Gicd { offset: u64 },
    /// vCPU `vcpu`'s redistributor, offset in its RD_base + SGI_base pair.
    Gicr { vcpu: usize, offset: u64 },
    /// The PL011.
    Uart { offset: u64 },
}

/// Which emulated device `ipa` addresses in a partition with `vcpu_count`
/// vCPUs; None when it is none of them (an access there is refused).
pub fn emulated_device(ipa: u64, vcpu_count: usize) -> Option<EmulatedDevice> {
    let gicr_end = GUEST_GICR_BASE + vcpu_count as u64 * GICR_STRIDE;
    if (GUEST_GICD_BASE..GUEST_GICD_BASE + GUEST_GICD_SIZE).contains(&ipa) {
        Some(EmulatedDevice::Gicd {
            offset: ipa - GUEST_GICD_BASE,
        })
    } else if (GUEST_GICR_BASE..gicr_end).contains(&ipa) {
        let rel = ipa - GUEST_GICR_BASE;
        Some(EmulatedDevice::Gicr {
            vcpu: (rel / GICR_STRIDE) as usize,
            offset: rel % GICR_STRIDE,
        })
    } else if (GUEST_UART_BASE..GUEST_UART_BASE + GUEST_UART_SIZE).contains(&ipa) {
        Some(EmulatedDevice::Uart {
            offset: ipa - GUEST_UART_BASE,
        })
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_vcpus_sgi_frame_decodes_to_its_redistributor() {
        let ipa = GUEST_GICR_BASE + GICR_STRIDE + 0x1_0100;

        assert_eq!(
            emulated_device(ipa, 2),
            Some(EmulatedDevice::Gicr {
                vcpu: 1,
                offset: 0x1_0100
            })
        );
    }

    #[test]
    fn redistributor_frames_beyond_the_partitions_vcpus_are_nothing() {
        let ipa = GUEST_GICR_BASE + 2 * GICR_STRIDE;

        assert_eq!(emulated_device(ipa, 2), None);
        assert_eq!(
            emulated_device(ipa, 3),
            Some(EmulatedDevice::Gicr { vcpu: 2, offset: 0 })
        );
    }

    #[test]
    fn distributor_uart_and_holes_decode() {
        assert_eq!(
            emulated_device(GUEST_GICD_BASE + 0x104, 1),
            Some(EmulatedDevice::Gicd { offset: 0x104 })
        );
        assert_eq!(
            emulated_device(GUEST_UART_BASE + 0x18, 1),
            Some(EmulatedDevice::Uart { offset: 0x18 })
        );
        assert_eq!(emulated_device(GUEST_UART_BASE + GUEST_UART_SIZE, 1), None);
        assert_eq!(emulated_device(GUEST_GICD_BASE + GUEST_GICD_SIZE, 1), None);
        assert_eq!(emulated_device(GUEST_RAM_BASE, 1), None);
    }
}
