//! The virtual board every partition sees, described once: the guest
//! physical address map (it follows QEMU's `virt` machine so that unmodified
//! virt software runs), the MPIDR scheme of vCPUs, the interrupt IDs the
//! board wires, the PSCI/SMCCC function IDs and the exit classes counted per
//! vCPU. The hypervisor core, the plan validation, the platform and the
//! bare-metal test guest all name these constants from here.
#![no_std]
#![forbid(unsafe_code)]

/// Guest RAM starts here.
pub const GUEST_RAM_BASE: u64 = 0x4000_0000;
/// Emulated GICv3 distributor (64 KiB).
pub const GUEST_GICD_BASE: u64 = 0x0800_0000;
pub const GUEST_GICD_SIZE: u64 = 0x1_0000;
/// A partition's virtual ITS (partitions with MSI-capable functions):
/// the GITS control frame (64 KiB, trapped and emulated) at the IPA of
/// the physical ITS's on QEMU virt, and the GITS_TRANSLATER page after it,
/// never mapped for the CPU: a device's MSI to it is a bus write that
/// reaches the physical ITS at the same address.
pub const GUEST_ITS_BASE: u64 = 0x0808_0000;
pub const GUEST_ITS_SIZE: u64 = 0x2_0000;
/// The doorbell MSI messages carry (GITS_TRANSLATER).
pub const GUEST_ITS_DOORBELL: u64 = GUEST_ITS_BASE + 0x1_0000 + 0x40;
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
/// Emulated SBSA Generic Watchdog (partitions with a `watchdog_s`): control
/// and refresh frames, 4 KiB each, in a hole of QEMU virt's map (its own
/// devices end at 0x090a_ffff), and its WS0 interrupt.
pub const GUEST_WDOG_CONTROL_BASE: u64 = 0x090b_0000;
pub const GUEST_WDOG_REFRESH_BASE: u64 = 0x090c_0000;
pub const GUEST_WDOG_FRAME_SIZE: u64 = 0x1000;
/// SPI 60 (no QEMU virt device uses it).
pub const GUEST_WDOG_INTID: u32 = 92;
/// Emulated PL061 GPIO (every partition: its line 3 is the power button of
/// a `gpio-keys` node), in the same hole, and its interrupt (SPI 61).
pub const GUEST_GPIO_BASE: u64 = 0x090d_0000;
pub const GUEST_GPIO_SIZE: u64 = 0x1000;
pub const GUEST_GPIO_INTID: u32 = 93;
/// The SPIs every partition's emulated devices use: a plan may not pass
/// these through.
pub const GUEST_EMULATED_SPIS: [u32; 3] = [GUEST_UART_INTID, GUEST_WDOG_INTID, GUEST_GPIO_INTID];
/// Offset of a raw kernel from the RAM base (as QEMU loads raw images).
pub const RAW_KERNEL_OFFSET: u64 = 0x8_0000;
/// Offset of a Linux Image whose header gives no image_size (pre-3.17).
pub const LEGACY_IMAGE_OFFSET: u64 = 0x8_0000;
/// Number of SPIs the emulated distributor offers (INTIDs 32..32+N).
pub const GUEST_SPI_COUNT: u32 = 256;
/// The guest DTB sits in the last `DTB_AREA` bytes of the partition's RAM;
/// kernel and initrd must end below it.
pub const DTB_AREA: u64 = 2 << 20;
/// Partition RAM is placed and mapped in blocks of this size.
pub const RAM_ALIGN: u64 = 2 << 20;

/// Timer PPIs (INTIDs): EL1 virtual timer, EL1 physical timer, EL2 physical
/// timer (the hypervisor's own), secure physical timer.
pub const PPI_VTIMER: u32 = 27;
pub const PPI_PTIMER: u32 = 30;
pub const PPI_HYP_TIMER: u32 = 26;
pub const PPI_SEC_PTIMER: u32 = 29;
/// GIC maintenance interrupt (virtual CPU interface).
pub const PPI_MAINTENANCE: u32 = 25;
/// The PMU overflow interrupt (PMUIRQ, the SBSA's recommended PPI 23).
pub const PPI_PMU: u32 = 23;

/// MPIDR bits that name a CPU: Aff3 [39:32], Aff2 [23:16], Aff1 [15:8],
/// Aff0 [7:0] (Arm ARM D19.2.101). Bit 31 is RES1, bit 30 U, bit 24 MT.
pub const MPIDR_AFFINITY_MASK: u64 = 0xff_00ff_ffff;
/// MPIDR bit 31, RES1.
pub const MPIDR_RES1: u64 = 1 << 31;

/// The MPIDR vCPU `index` of a partition sees (VMPIDR_EL2): Aff0 = index,
/// in one cluster, as the guest DTB's /cpus `reg` says.
pub const fn vcpu_mpidr(index: usize) -> u64 {
    MPIDR_RES1 | (index as u64 & 0xff)
}

/// Whether two MPIDRs name the same CPU (affinity fields only).
pub const fn same_cpu(a: u64, b: u64) -> bool {
    a & MPIDR_AFFINITY_MASK == b & MPIDR_AFFINITY_MASK
}

/// SMCCC function IDs (W0) of PSCI (Arm DEN0022, 1.1), SMCCC itself (Arm
/// DEN0028, 1.1+) and Pinfold's own calls.
pub mod fid {
    pub const PSCI_VERSION: u32 = 0x8400_0000;
    pub const CPU_SUSPEND_32: u32 = 0x8400_0001;
    pub const CPU_SUSPEND_64: u32 = 0xC400_0001;
    pub const CPU_OFF: u32 = 0x8400_0002;
    pub const CPU_ON_32: u32 = 0x8400_0003;
    pub const CPU_ON_64: u32 = 0xC400_0003;
    pub const AFFINITY_INFO_32: u32 = 0x8400_0004;
    pub const AFFINITY_INFO_64: u32 = 0xC400_0004;
    pub const MIGRATE_INFO_TYPE: u32 = 0x8400_0006;
    pub const SYSTEM_OFF: u32 = 0x8400_0008;
    pub const SYSTEM_RESET: u32 = 0x8400_0009;
    pub const PSCI_FEATURES: u32 = 0x8400_000A;

    pub const SMCCC_VERSION: u32 = 0x8000_0000;
    pub const SMCCC_ARCH_FEATURES: u32 = 0x8000_0001;
    pub const SMCCC_ARCH_SOC_ID: u32 = 0x8000_0002;
    pub const SMCCC_ARCH_WORKAROUND_1: u32 = 0x8000_8000;
    pub const SMCCC_ARCH_WORKAROUND_2: u32 = 0x8000_7FFF;
    pub const SMCCC_ARCH_WORKAROUND_3: u32 = 0x8000_3FFF;

    /// Pinfold's calls: fast calls to OEN 6, "Vendor Specific Hypervisor
    /// Service" (DEN0028 table 6-2), function numbers 0x0000..=0xFFFF.
    pub const PINFOLD_32_BASE: u32 = 0x8600_0000;
    pub const PINFOLD_64_BASE: u32 = 0xC600_0000;
}

/// Why a vCPU left the guest, as counted per vCPU and reported by the
/// management API (in this order).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum ExitClass {
    /// Stage-2 data aborts on emulated MMIO.
    Mmio = 0,
    /// Trapped system register accesses.
    SysReg = 1,
    /// HVCs and SMCs (PSCI, SMCCC, the management ABI).
    Hvc = 2,
    /// Physical interrupts taken while the vCPU ran.
    Irq = 3,
    /// Aborts the guest caused that were not MMIO (reported as faults).
    Abort = 4,
    /// Everything else (WFI/WFE, unknown traps).
    Other = 5,
}

impl ExitClass {
    pub const COUNT: usize = 6;
    pub const ALL: [ExitClass; ExitClass::COUNT] = [
        ExitClass::Mmio,
        ExitClass::SysReg,
        ExitClass::Hvc,
        ExitClass::Irq,
        ExitClass::Abort,
        ExitClass::Other,
    ];

    /// The name the REST API and the metrics use.
    pub const fn name(self) -> &'static str {
        match self {
            ExitClass::Mmio => "mmio",
            ExitClass::SysReg => "sysreg",
            ExitClass::Hvc => "hvc",
            ExitClass::Irq => "irq",
            ExitClass::Abort => "abort",
            ExitClass::Other => "other",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vcpu_mpidrs_are_aff0_with_res1_set() {
        assert_eq!(vcpu_mpidr(0), 0x8000_0000);
        assert_eq!(vcpu_mpidr(3), 0x8000_0003);
    }

    #[test]
    fn same_cpu_ignores_res1_mt_and_u_bits() {
        assert!(same_cpu(0x8000_0001, 0x4100_0001));
        assert!(!same_cpu(0x8000_0001, 0x8000_0101));
        assert!(!same_cpu(0x1_0000_0000, 0));
    }

    #[test]
    fn exit_class_indices_follow_all() {
        for (i, c) in ExitClass::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
        }
    }
}
