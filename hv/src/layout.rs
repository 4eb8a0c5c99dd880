//! Which emulated device frame of the virtual board (`pinfold_vboard`, the
//! one description of the guest's address map) a guest IPA falls in.

pub use pinfold_vboard::{
    GICR_STRIDE, GUEST_GICD_BASE, GUEST_GICD_SIZE, GUEST_GICR_BASE, GUEST_GICR_REGION_SIZE,
    GUEST_ITS_BASE, GUEST_ITS_DOORBELL, GUEST_ITS_SIZE, GUEST_RAM_BASE, GUEST_SPI_COUNT,
    GUEST_UART_BASE, GUEST_UART_INTID, GUEST_UART_SIZE, PPI_HYP_TIMER, PPI_MAINTENANCE, PPI_PMU,
    PPI_PTIMER, PPI_SEC_PTIMER, PPI_VTIMER, RAW_KERNEL_OFFSET,
};

/// An emulated device frame a guest IPA falls in, with the offset inside it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmulatedDevice {
    /// The distributor (GICD), offset in its 64 KiB frame.
    Gicd { offset: u64 },
    /// vCPU `vcpu`'s redistributor, offset in its RD_base + SGI_base pair.
    Gicr { vcpu: usize, offset: u64 },
    /// The PL011.
    Uart { offset: u64 },
    /// The PL061 GPIO with the power button (`gpio`).
    Gpio { offset: u64 },
    /// The SBSA watchdog's control or refresh frame (`wdog`).
    Wdog {
        frame: crate::wdog::Frame,
        offset: u64,
    },
}

/// Which emulated device `ipa` addresses in a partition with `vcpu_count`
/// vCPUs; None when it is none of them (an access there is refused).
#[inline(always)]
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
        wdog_frame(ipa)
    }
}

/// The watchdog frames and the GPIO (lifecycle hook), out of the common
/// path's way.
fn wdog_frame(ipa: u64) -> Option<EmulatedDevice> {
    use crate::wdog::Frame;
    use pinfold_vboard::{
        GUEST_GPIO_BASE, GUEST_GPIO_SIZE, GUEST_WDOG_CONTROL_BASE, GUEST_WDOG_FRAME_SIZE,
        GUEST_WDOG_REFRESH_BASE,
    };
    if (GUEST_GPIO_BASE..GUEST_GPIO_BASE + GUEST_GPIO_SIZE).contains(&ipa) {
        return Some(EmulatedDevice::Gpio {
            offset: ipa - GUEST_GPIO_BASE,
        });
    }
    [
        (Frame::Control, GUEST_WDOG_CONTROL_BASE),
        (Frame::Refresh, GUEST_WDOG_REFRESH_BASE),
    ]
    .into_iter()
    .find(|&(_, base)| (base..base + GUEST_WDOG_FRAME_SIZE).contains(&ipa))
    .map(|(frame, base)| EmulatedDevice::Wdog {
        frame,
        offset: ipa - base,
    })
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
