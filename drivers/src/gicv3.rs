//! The physical GICv3 (Arm IHI 0069): the distributor (one, shared: the
//! platform keeps it behind a lock and touches it only at boot and on the
//! slow guest-configuration path), one redistributor per CPU (owned by that
//! CPU, so its SGI/PPI state changes take no lock at all), and the CPU
//! interface system registers, ICC_* for the hypervisor's own interrupts and
//! ICH_* for the guest's virtual CPU interface.
//!
//! Register blocks come from the `arm-gic` crate, and so does the CPU
//! interface where its `GicCpuInterface` has the operation; active and
//! pending state are added here, and `sysreg` takes what arm-gic lacks
//! (ICC_DIR_EL1, EOImode, SGIs with a range selector, the ICH_* registers)
//! from arm-sysregs and aarch64-cpu.

use arm_gic::gicv3::registers::{Gicd, GicrSgi};
use arm_gic::gicv3::{GicDistributor, GicRedistributor};
use arm_gic::{IntId, Trigger};
use core::ptr::NonNull;
use pinfold_hv::irqchip::{IrqChipCaps, PerCpuIrqChip, PpiBits, PpiStateChange, SharedIrqChip};
use safe_mmio::{field, UniqueMmioPointer};

/// GICv3 declares lockless per-CPU state: each CPU writes only its own
/// redistributor's SGI_base frame.
pub const GICV3_CAPS: IrqChipCaps = IrqChipCaps {
    percpu_state_lockless: true,
};

fn to_intid(n: u32) -> IntId {
    match n {
        0..=15 => IntId::sgi(n),
        16..=31 => IntId::ppi(n - 16),
        _ => IntId::spi(n - 32),
    }
}

/// The distributor.
pub struct GicV3Dist {
    dist: GicDistributor<'static>,
}

// SAFETY: the distributor's registers are MMIO; the platform serialises all
// use of this object behind one lock.
unsafe impl Send for GicV3Dist {}

impl GicV3Dist {
    /// # Safety
    /// `base` must be the GICD register frame, mapped as device memory and
    /// used through nothing else.
    pub unsafe fn new(base: usize) -> Self {
        // SAFETY: guaranteed by the caller.
        let regs = unsafe { UniqueMmioPointer::new(NonNull::new_unchecked(base as *mut Gicd)) };
        GicV3Dist {
            dist: GicDistributor::new(regs),
        }
    }

    /// All SPIs group 1, disabled, level, priority 0x80; affinity routing
    /// and group 1 on.
    pub fn init(&mut self) {
        self.dist.enable_all_interrupts(false);
        self.dist.configure_default_settings();
        self.dist.enable_affinity_routing_non_secure(true);
        self.dist.enable_group1_non_secure(true);
        self.dist.wait_for_pending_write();
    }

    pub fn enable(&mut self, spi: u32, enable: bool) {
        let _ = self.dist.enable_interrupt(to_intid(spi), enable);
    }

    pub fn route(&mut self, spi: u32, mpidr: u64) {
        let _ = self
            .dist
            .set_routing(to_intid(spi), Some(mpidr & 0xff_00ff_ffff));
    }

    pub fn set_priority(&mut self, spi: u32, priority: u8) {
        let _ = self.dist.set_interrupt_priority(to_intid(spi), priority);
    }

    pub fn set_edge(&mut self, spi: u32, edge: bool) {
        let trigger = if edge { Trigger::Edge } else { Trigger::Level };
        let _ = self.dist.set_trigger(to_intid(spi), trigger);
    }
}

/// This CPU's redistributor. Not `Sync`: only its own CPU touches it.
pub struct GicV3Redist {
    regs: UniqueMmioPointer<'static, GicrSgi>,
}

// SAFETY: created on and then used only by the CPU it belongs to; `Send` lets
// the boot CPU hand it over before that CPU starts.
unsafe impl Send for GicV3Redist {}

impl GicV3Redist {
    /// Walks the redistributor regions for the frame whose GICR_TYPER
    /// affinity matches `mpidr`.
    ///
    /// # Safety
    /// The regions must be the GIC's redistributor regions, mapped as device
    /// memory.
    /// `stride` is the DT's `redistributor-stride`; without it each frame's
    /// GICR_TYPER.VLPIS says: GICv4 redistributors with virtual LPIs have
    /// two more 64 KiB frames (VLPI_base, reserved), 4 in all.
    pub unsafe fn find(regions: &[(u64, u64)], stride: Option<u64>, mpidr: u64) -> Option<usize> {
        let want = (mpidr & 0xff_ffff) | ((mpidr >> 8) & 0xff00_0000);
        for &(base, size) in regions {
            let mut frame = base;
            while frame + 0x2_0000 <= base + size {
                // SAFETY: GICR_TYPER is at offset 8 of every RD_base frame
                // inside the region the caller vouched for.
                let typer = unsafe { ((frame + 8) as *const u64).read_volatile() };
                if (typer >> 32) == want {
                    return Some(frame as usize);
                }
                if typer & (1 << 4) != 0 {
                    break;
                }
                frame += rd_step(stride, typer);
            }
        }
        None
    }

    /// # Safety
    /// `base` must be this CPU's redistributor (RD_base followed by SGI_base),
    /// used through nothing else.
    pub unsafe fn new(base: usize) -> Self {
        // SAFETY: guaranteed by the caller.
        let regs = unsafe { UniqueMmioPointer::new(NonNull::new_unchecked(base as *mut GicrSgi)) };
        GicV3Redist { regs }
    }

    /// Wake the redistributor; SGIs/PPIs group 1, disabled, priority 0x80.
    pub fn init(&mut self) {
        let mut r = GicRedistributor::new(self.regs.reborrow());
        let _ = r.mark_core_awake();
        r.configure_default_settings();
        r.wait_for_pending_write();
    }

    fn sgi_bit_write(&mut self, which: SgiReg, intid: u32) {
        if intid >= 32 {
            return;
        }
        let bit = 1u32 << intid;
        let mut sgi = field!(self.regs, sgi);
        match which {
            SgiReg::SetEnable => field!(sgi, isenabler).get(0).map(|mut r| r.write(bit)),
            SgiReg::ClearEnable => field!(sgi, icenabler).get(0).map(|mut r| r.write(bit)),
            SgiReg::SetPending => field!(sgi, ispendr).get(0).map(|mut r| r.write(bit)),
            SgiReg::ClearPending => field!(sgi, icpendr).get(0).map(|mut r| r.write(bit)),
            SgiReg::SetActive => field!(sgi, isactiver).get(0).map(|mut r| r.write(bit)),
            SgiReg::ClearActive => field!(sgi, icactiver).get(0).map(|mut r| r.write(bit)),
        };
    }

    pub fn set_enable(&mut self, intid: u32, enable: bool) {
        self.sgi_bit_write(
            if enable {
                SgiReg::SetEnable
            } else {
                SgiReg::ClearEnable
            },
            intid,
        );
    }

    pub fn set_pending(&mut self, intid: u32, pending: bool) {
        self.sgi_bit_write(
            if pending {
                SgiReg::SetPending
            } else {
                SgiReg::ClearPending
            },
            intid,
        );
    }

    /// GICR_ISACTIVER0 / GICR_ICACTIVER0: the state a HW-linked timer PPI
    /// keeps while the guest owns it.
    pub fn set_active(&mut self, intid: u32, active: bool) {
        self.sgi_bit_write(
            if active {
                SgiReg::SetActive
            } else {
                SgiReg::ClearActive
            },
            intid,
        );
    }

    /// GICR_ISPENDR0 and GICR_ISACTIVER0: pending and active SGIs/PPIs.
    pub fn ppi_bits(&mut self) -> PpiBits {
        let mut sgi = field!(self.regs, sgi);
        let pending = field!(sgi, ispendr).get(0).map(|r| r.read()).unwrap_or(0);
        let active = field!(sgi, isactiver).get(0).map(|r| r.read()).unwrap_or(0);
        PpiBits { pending, active }
    }

    pub fn set_priority(&mut self, intid: u32, priority: u8) {
        let mut r = GicRedistributor::new(self.regs.reborrow());
        let _ = r.set_interrupt_priority(to_intid(intid), priority);
    }
}

enum SgiReg {
    SetEnable,
    ClearEnable,
    SetPending,
    ClearPending,
    SetActive,
    ClearActive,
}

/// From one redistributor's RD_base to the next: the host's
/// `redistributor-stride` (the DT parser refuses 0), else two 64 KiB
/// frames, four when GICR_TYPER.VLPIS says the VLPI frames follow.
pub fn rd_step(stride: Option<u64>, typer: u64) -> u64 {
    stride
        .filter(|&s| s != 0)
        .unwrap_or(if typer & (1 << 1) != 0 {
            0x4_0000
        } else {
            0x2_0000
        })
}

pub mod ids;
#[cfg(target_arch = "aarch64")]
pub mod sysreg;

impl SharedIrqChip for GicV3Dist {
    fn spi_enable(&mut self, intid: u32, enable: bool) {
        self.enable(intid, enable)
    }
    fn spi_route(&mut self, intid: u32, mpidr: u64) {
        self.route(intid, mpidr)
    }
    fn spi_set_edge(&mut self, intid: u32, edge: bool) {
        self.set_edge(intid, edge)
    }
}

/// Bring up the distributor at `base` and hand it over as the shared half
/// of the interrupt chip.
///
/// # Safety
/// `base` must be the GICv3 distributor frame from the host description,
/// mapped as device memory, and this must be its only user.
pub unsafe fn init_distributor(base: usize) -> impl SharedIrqChip + Send {
    // SAFETY: as the caller promised.
    let mut dist = unsafe { GicV3Dist::new(base) };
    dist.init();
    dist
}

/// The per-CPU half of the GICv3 chip: this CPU's redistributor and its
/// CPU interface system registers. GICv3 keeps SGI/PPI state in each CPU's
/// own redistributor frame, so the owning CPU changes it without any lock
/// shared between CPUs: the chip declares `percpu_state_lockless`.
pub struct GicV3Cpu {
    redist: GicV3Redist,
    caps: IrqChipCaps,
}

impl GicV3Cpu {
    /// Find and initialise the redistributor of the CPU with affinity
    /// `mpidr`, and its CPU interface. `caps` is normally [`GICV3_CAPS`];
    /// the benchmark's lock ablation passes a chip without the capability.
    ///
    /// # Safety
    /// The regions must be the host's redistributor regions, mapped as
    /// device memory; only the CPU with affinity `mpidr` may call this, once.
    #[cfg(target_arch = "aarch64")]
    pub unsafe fn init_this_cpu(
        regions: &[(u64, u64)],
        stride: Option<u64>,
        mpidr: u64,
        caps: IrqChipCaps,
    ) -> Option<GicV3Cpu> {
        // SAFETY: as the caller promised.
        let base = unsafe { GicV3Redist::find(regions, stride, mpidr) }?;
        // SAFETY: `base` is this CPU's own redistributor.
        let mut redist = unsafe { GicV3Redist::new(base) };
        redist.init();
        sysreg::init_cpu_interface();
        Some(GicV3Cpu { redist, caps })
    }
}

impl PerCpuIrqChip for GicV3Cpu {
    fn caps(&self) -> IrqChipCaps {
        self.caps
    }
    fn apply_ppi(&mut self, change: PpiStateChange) {
        match change {
            PpiStateChange::Enable(i, on) => self.redist.set_enable(i, on),
            PpiStateChange::Active(i, on) => self.redist.set_active(i, on),
            PpiStateChange::Pending(i, on) => self.redist.set_pending(i, on),
        }
    }
    fn ppi_bits(&mut self) -> PpiBits {
        self.redist.ppi_bits()
    }
    #[cfg(target_arch = "aarch64")]
    fn ack(&mut self) -> u32 {
        sysreg::ack()
    }
    #[cfg(target_arch = "aarch64")]
    fn priority_drop(&mut self, intid: u32) {
        sysreg::priority_drop(intid)
    }
    #[cfg(target_arch = "aarch64")]
    fn deactivate(&mut self, intid: u32) {
        sysreg::deactivate(intid)
    }
    #[cfg(target_arch = "aarch64")]
    fn send_sgi(&mut self, mpidr: u64, intid: u32) {
        sysreg::send_sgi(mpidr, intid)
    }
    #[cfg(not(target_arch = "aarch64"))]
    fn ack(&mut self) -> u32 {
        1023
    }
    #[cfg(not(target_arch = "aarch64"))]
    fn priority_drop(&mut self, _: u32) {}
    #[cfg(not(target_arch = "aarch64"))]
    fn deactivate(&mut self, _: u32) {}
    #[cfg(not(target_arch = "aarch64"))]
    fn send_sgi(&mut self, _: u64, _: u32) {}
}

#[cfg(test)]
mod tests {
    use super::rd_step;

    #[test]
    fn a_redistributor_steps_by_the_stride_else_by_its_frames() {
        assert_eq!(rd_step(Some(0x8_0000), 0), 0x8_0000);
        assert_eq!(rd_step(None, 0), 0x2_0000, "RD_base + SGI_base");
        assert_eq!(rd_step(None, 1 << 1), 0x4_0000, "VLPIS: + VLPI frames");
        assert_eq!(rd_step(Some(0), 1 << 1), 0x4_0000, "0 never steps");
    }
}
