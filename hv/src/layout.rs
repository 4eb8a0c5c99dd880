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
