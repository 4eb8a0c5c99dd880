//! The hardware the portable core drives (`pinfold_hv::exit::Hw`), over the
//! real registers: this CPU's list registers and GIC CPU interface and
//! redistributor (the GICv3 driver's per-CPU half), the shared distributor
//! behind its counted lock, ID registers, the counter, the host UART,
//! host memory through the EL2 identity map, and the SMMUv3's registers and
//! the heap memory of its stream table and queues (`SmmuMmio`, `SmmuDma`).
//!
//! On a GICv5 host the same `PlatformHw` holds this CPU's GICv5 half
//! (`v5`), and the GICv5 entry points (irq.rs's GICv5 root handler, vcpu.rs
//! `pinfold_guest_sync_v5` and the cold paths) hand the core [`V5Hw`]
//! instead: the same hardware with the CPU-interface operations (ack,
//! priority drop, deactivate, IPIs, PPI state) on the GICv5. `PlatformHw`'s
//! own GICv3 operations are unchanged, so the GICv3 paths carry no branch
//! for it. The shared half is the GICv3 distributor, [`DIST`], or on a
//! GICv5 host its IRSes, each behind its own lock (`gicv5::IRSES`,
//! reached by `Hw::spi` through `gicv5::spi`).

use crate::{arch, log};
use aarch64_cpu::registers::ICH_HCR_EL2;
use alloc::boxed::Box;
use core::fmt;
use pinfold_drivers::gicv3::{sysreg as gic, GicV3Cpu};
use pinfold_drivers::gicv5::{hw::SysRegs, Gicv5Cpu};
use pinfold_hv::addr::PhysAddr;
use pinfold_hv::exit::{Hw, SpiOp};
use pinfold_hv::irqchip::{IrqChipCaps, PerCpuIrqChip, PpiBits, PpiStateChange, SharedIrqChip};
use pinfold_hv::lockstat::{CountedLock, LockPath};
use pinfold_hv::partition::HostMemory;
use pinfold_hv::trap::SysRegId;

/// The physical GICv3 distributor: one device every CPU may need (a guest
/// enabling or routing its own SPI, a forwarded SPI the guest has masked).
/// It is global state of the machine, so no per-CPU design can hold it; it
/// is never taken on vCPU load/put, timer PPI or local injection paths.
/// A GICv5 host leaves it unset: its IRSes each have their own lock
/// (`gicv5::IRSES`, `gicv5::spi`).
pub static DIST: spin::Once<CountedLock<Box<dyn SharedIrqChip + Send>>> = spin::Once::new();

/// ICH_HCR_EL2.En.
const ICH_HCR_EN: u64 = ICH_HCR_EL2::En::SET.value;
/// ICH_HCR_EL2.UIE.
const ICH_HCR_UIE: u64 = ICH_HCR_EL2::UIE::SET.value;

pub struct PlatformHw {
    index: usize,
    /// This CPU's GIC; None until the CPU has initialised it.
    pub chip: Option<GicV3Cpu>,
    /// This CPU's GICv5 half on a GICv5 host (then `chip` stays None).
    pub v5: Option<Gicv5Cpu<SysRegs>>,
    /// What we last wrote to ICH_HCR_EL2 (no read-modify-write of the
    /// system register on the injection path).
    ich_hcr: u64,
    tables: crate::heap::HeapTables,
    smmu: SmmuMmio,
    dma: SmmuDma,
    /// This CPU's GICv4 VLPI frame, when partitions' MSIs are direct vLPIs
    /// (`its::init_cpu`).
    pub vlpi: Option<crate::its::VlpiFrame>,
    /// This CPU's GICv4.1 VLPI frame and its own ITS's GITS_SGIR, when SGIs are
    /// direct vSGIs (`v41::init_cpu`).
    pub v41: Option<crate::v41::V41Frame>,
}

/// An SMMUv3's register frames (page 0 and 1) through the EL2 identity
/// map, which maps everything outside RAM as device memory.
pub struct SmmuMmio {
    base: u64,
}

impl pinfold_hv::smmu::SmmuRegs for SmmuMmio {
    fn read32(&mut self, offset: u32) -> u32 {
        // SAFETY: `base` is the SMMU frame the host description names
        // (hv `smmu_init` checked it against the arm,smmu-v3 node) and the
        // core's offsets are its registers; device memory at EL2.
        unsafe { ((self.base + u64::from(offset)) as *const u32).read_volatile() }
    }
    fn write32(&mut self, offset: u32, value: u32) {
        // SAFETY: as in `read32`.
        unsafe { ((self.base + u64::from(offset)) as *mut u32).write_volatile(value) }
    }
    fn write64(&mut self, offset: u32, value: u64) {
        // SAFETY: as in `read32`; the 64-bit base registers take one
        // 64-bit access.
        unsafe { ((self.base + u64::from(offset)) as *mut u64).write_volatile(value) }
    }
}

/// The SMMU's tables and queues: hypervisor heap, identity mapped, never
/// freed (they live as long as the SMMU is enabled).
pub struct SmmuDma;

impl pinfold_hv::smmu::DmaMemory for SmmuDma {
    fn alloc_zeroed(&mut self, size: u64, align: u64) -> Option<PhysAddr> {
        let at = crate::heap::alloc_zeroed(size as usize, align as usize)?;
        arch::clean_dcache_range(at.0, size);
        Some(at)
    }
    fn read_u64(&self, at: PhysAddr) -> u64 {
        // SAFETY: `at` is inside memory `alloc_zeroed` gave the core for
        // the SMMU (its tables and queues), 8-byte aligned.
        unsafe { (at.0 as *const u64).read_volatile() }
    }
    fn write_u64(&mut self, at: PhysAddr, value: u64) {
        // SAFETY: as in `read_u64`.
        unsafe { (at.0 as *mut u64).write_volatile(value) }
    }
    fn publish(&mut self, at: PhysAddr, len: u64) {
        // A clean to the point of coherency (a non-coherent SMMU reads
        // memory) and DSB SY before the register write that follows.
        arch::clean_dcache_range(at.0, len);
    }
}

impl PlatformHw {
    pub const fn new(index: usize) -> Self {
        PlatformHw {
            index,
            chip: None,
            v5: None,
            ich_hcr: 0,
            tables: crate::heap::HeapTables,
            smmu: SmmuMmio { base: 0 },
            dma: SmmuDma,
            vlpi: None,
            v41: None,
        }
    }

    /// ICH_HCR_EL2 = En (vCPU load) or 0 (put).
    pub fn set_virtual_cpu_interface(&mut self, enable: bool) {
        self.ich_hcr = if enable { ICH_HCR_EN } else { 0 };
        gic::set_ich_hcr_el2(self.ich_hcr);
    }
}

impl PerCpuIrqChip for PlatformHw {
    fn caps(&self) -> IrqChipCaps {
        self.chip.as_ref().map_or(
            IrqChipCaps {
                percpu_state_lockless: true,
            },
            |c| c.caps(),
        )
    }
    fn apply_ppi(&mut self, change: PpiStateChange) {
        if let Some(c) = self.chip.as_mut() {
            c.apply_ppi(change)
        }
    }
    fn ppi_bits(&mut self) -> PpiBits {
        self.chip
            .as_mut()
            .map_or(PpiBits::default(), |c| c.ppi_bits())
    }
    #[inline(always)]
    fn ack(&mut self) -> u32 {
        gic::ack()
    }
    #[inline(always)]
    fn priority_drop(&mut self, intid: u32) {
        gic::priority_drop(intid)
    }
    #[inline(always)]
    fn deactivate(&mut self, intid: u32) {
        gic::deactivate(intid)
    }
    fn send_sgi(&mut self, mpidr: u64, intid: u32) {
        gic::send_sgi(mpidr, intid)
    }
}

impl HostMemory for PlatformHw {
    fn write(&mut self, pa: PhysAddr, bytes: &[u8]) {
        // SAFETY: the core checked that the span lies inside a partition's
        // RAM (or the caller's own, for management calls), or is a GIC
        // table the platform's `ItsQueue::alloc_vpt` gave it from the EL2
        // heap (the GICv4.1 VCONF copy, `pinfold_hv::its`), all of which
        // the hypervisor owns and maps at EL2 with identity.
        unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), pa.0 as *mut u8, bytes.len()) };
    }
    fn read(&self, pa: PhysAddr, out: &mut [u8]) {
        // SAFETY: as in `write`.
        unsafe { core::ptr::copy_nonoverlapping(pa.0 as *const u8, out.as_mut_ptr(), out.len()) };
    }
    fn clean_for_guest(&mut self, pa: PhysAddr, len: u64) {
        arch::clean_dcache_range(pa.0, len);
    }
    fn sync_instructions(&mut self) {
        arch::invalidate_icache_all();
    }
    fn copy(&mut self, dst: PhysAddr, src: PhysAddr, len: u64) {
        // SAFETY: the core copies a sealed image (hypervisor-owned RAM) into
        // a partition's RAM at an offset it checked; the two never overlap.
        unsafe {
            core::ptr::copy_nonoverlapping(src.0 as *const u8, dst.0 as *mut u8, len as usize)
        };
    }
    fn zero(&mut self, pa: PhysAddr, len: u64) {
        // SAFETY: RAM the core owns and is handing to the free pool.
        unsafe { core::ptr::write_bytes(pa.0 as *mut u8, 0, len as usize) };
        arch::clean_dcache_range(pa.0, len);
    }
}

impl Hw for PlatformHw {
    fn cpu_index(&self) -> usize {
        self.index
    }
    fn tables(&mut self) -> &mut dyn pinfold_hv::stage2::TableMemory {
        &mut self.tables
    }
    #[inline(always)]
    fn lr_count(&self) -> usize {
        gic::lr_count()
    }
    #[inline(always)]
    fn read_lr(&self, n: usize) -> u64 {
        gic::read_lr(n)
    }
    #[inline(always)]
    fn write_lr(&mut self, n: usize, value: u64) {
        gic::write_lr(n, value)
    }
    #[inline(always)]
    fn empty_lr_mask(&self) -> u16 {
        gic::ich_elrsr_el2() as u16
    }
    fn set_underflow_irq(&mut self, enable: bool) {
        let hcr = if enable {
            self.ich_hcr | ICH_HCR_UIE
        } else {
            self.ich_hcr & !ICH_HCR_UIE
        };
        if hcr != self.ich_hcr {
            self.ich_hcr = hcr;
            gic::set_ich_hcr_el2(hcr);
        }
    }
    fn spi(&mut self, path: LockPath, op: SpiOp) {
        let Some(d) = DIST.get() else {
            // A GICv5 host: the IRS whose SPI range holds it.
            crate::gicv5::spi(path, op);
            return;
        };
        let mut d = d.lock(path);
        match op {
            SpiOp::Enable { intid, enable } => d.spi_enable(intid, enable),
            SpiOp::Route { intid, mpidr } => d.spi_route(intid, mpidr),
            SpiOp::SetEdge { intid, edge } => d.spi_set_edge(intid, edge),
        }
    }
    // Inlined into the exit code as before the GICv5 view (`V5Hw`) made
    // a second instantiation of it (see `vgic::sgi::SgiMap::resolve`).
    #[inline(always)]
    fn read_id_reg(&self, reg: SysRegId) -> u64 {
        arch::regs::read_id_reg(reg.crm(), reg.op2())
    }
    #[inline(always)]
    fn pmu_read(&mut self, reg: pinfold_hv::pmu::PmuReg) -> u64 {
        arch::regs::pmu_read(reg)
    }
    fn pmu_write(&mut self, reg: pinfold_hv::pmu::PmuReg, value: u64) {
        arch::regs::pmu_write(reg, value)
    }
    fn vbar_el1(&self) -> u64 {
        arch::regs::vbar_el1()
    }
    fn now(&self) -> u64 {
        arch::counter()
    }
    fn counter_frequency(&self) -> u64 {
        u64::from(arch::counter_frequency())
    }
    fn console_line(&mut self, source: u32, line: &[u8]) {
        log::write_from(source, line);
    }
    fn log(&mut self, args: fmt::Arguments) {
        log::print_fmt(Some(self.index), args);
    }
    fn report(&mut self, args: fmt::Arguments) {
        log::print_fmt(None, args);
    }
    fn set_wakeup(&mut self, at: Option<u64>) {
        use aarch64_cpu::registers::{Writeable, CNTHP_CTL_EL2};
        match at {
            Some(at) => {
                arch::regs::set_cnthp_cval_el2(at);
                CNTHP_CTL_EL2.write(CNTHP_CTL_EL2::ENABLE::SET);
            }
            None => CNTHP_CTL_EL2.set(0),
        }
    }
    fn config_read(&mut self, pa: u64, width: u8) -> u32 {
        // SAFETY: the core asks only for aligned addresses inside the host
        // bridge's ECAM window (pinfold_hv::pci::Ecam), which the EL2
        // identity map covers as device memory.
        unsafe {
            match width {
                1 => u32::from((pa as *const u8).read_volatile()),
                2 => u32::from((pa as *const u16).read_volatile()),
                _ => (pa as *const u32).read_volatile(),
            }
        }
    }
    fn smmu_io(
        &mut self,
        base: u64,
    ) -> Option<(
        &mut dyn pinfold_hv::smmu::SmmuRegs,
        &mut dyn pinfold_hv::smmu::DmaMemory,
    )> {
        self.smmu.base = base;
        Some((&mut self.smmu, &mut self.dma))
    }
    fn vlpi_frame(&mut self) -> Option<&mut dyn pinfold_hv::vgic::v40::V40Hw> {
        self.vlpi
            .as_mut()
            .map(|f| f as &mut dyn pinfold_hv::vgic::v40::V40Hw)
    }
    fn v41(&mut self) -> Option<&mut dyn pinfold_hv::vgic::v41::V41Hw> {
        self.v41
            .as_mut()
            .map(|f| f as &mut dyn pinfold_hv::vgic::v41::V41Hw)
    }
    fn zero_table(&mut self, pa: u64, bytes: usize) {
        // SAFETY: `pa` is a vPE pending table the core got from
        // `its::Queue::alloc_vpt` (EL2 heap, identity mapped), not resident
        // on any redistributor now: nothing else reads or writes it.
        unsafe { core::ptr::write_bytes(pa as *mut u8, 0, bytes) };
        arch::clean_dcache_range(pa, bytes as u64);
    }
    fn config_write(&mut self, pa: u64, width: u8, value: u32) {
        // SAFETY: as in `config_read`.
        unsafe {
            match width {
                1 => (pa as *mut u8).write_volatile(value as u8),
                2 => (pa as *mut u16).write_volatile(value as u16),
                _ => (pa as *mut u32).write_volatile(value),
            }
        }
    }
}

/// A GICv5 host's view of [`PlatformHw`] for the core: the CPU interface
/// (ack, priority drop, deactivate, IPIs as LPIs, PPI state) is the GICv5
/// driver's (`PlatformHw::v5`), everything else is `PlatformHw`'s.
pub struct V5Hw<'a>(pub &'a mut PlatformHw);

impl V5Hw<'_> {
    #[inline(always)]
    fn chip(&mut self) -> &mut Gicv5Cpu<SysRegs> {
        match self.0.v5.as_mut() {
            Some(c) => c,
            // Only made on a CPU whose GICv5 half is up (`gicv5::init_cpu`).
            None => crate::halt(),
        }
    }
}

impl PerCpuIrqChip for V5Hw<'_> {
    fn caps(&self) -> IrqChipCaps {
        self.0.v5.as_ref().map_or(
            IrqChipCaps {
                percpu_state_lockless: true,
            },
            |c| c.caps(),
        )
    }
    fn apply_ppi(&mut self, change: PpiStateChange) {
        self.chip().apply_ppi(change)
    }
    fn ppi_bits(&mut self) -> PpiBits {
        self.chip().ppi_bits()
    }
    #[inline(always)]
    fn ack(&mut self) -> u32 {
        self.chip().ack()
    }
    #[inline(always)]
    fn priority_drop(&mut self, intid: u32) {
        self.chip().priority_drop(intid)
    }
    #[inline(always)]
    fn deactivate(&mut self, intid: u32) {
        self.chip().deactivate(intid)
    }
    fn send_sgi(&mut self, mpidr: u64, intid: u32) {
        self.chip().send_sgi(mpidr, intid)
    }
}

impl HostMemory for V5Hw<'_> {
    fn write(&mut self, pa: PhysAddr, bytes: &[u8]) {
        self.0.write(pa, bytes)
    }
    fn read(&self, pa: PhysAddr, out: &mut [u8]) {
        self.0.read(pa, out)
    }
    fn clean_for_guest(&mut self, pa: PhysAddr, len: u64) {
        self.0.clean_for_guest(pa, len)
    }
    fn sync_instructions(&mut self) {
        self.0.sync_instructions()
    }
    fn copy(&mut self, dst: PhysAddr, src: PhysAddr, len: u64) {
        self.0.copy(dst, src, len)
    }
    fn zero(&mut self, pa: PhysAddr, len: u64) {
        self.0.zero(pa, len)
    }
}

/// Every `Hw` method is `PlatformHw`'s (the list registers are the
/// GICv3-compatible interface's, FEAT_GCIE_LEGACY, which a GICv3-interface
/// partition on a GICv5 host needs: `vgic5::choose_interface`).
impl Hw for V5Hw<'_> {
    fn cpu_index(&self) -> usize {
        self.0.cpu_index()
    }
    fn tables(&mut self) -> &mut dyn pinfold_hv::stage2::TableMemory {
        self.0.tables()
    }
    fn lr_count(&self) -> usize {
        self.0.lr_count()
    }
    fn read_lr(&self, n: usize) -> u64 {
        self.0.read_lr(n)
    }
    fn write_lr(&mut self, n: usize, value: u64) {
        self.0.write_lr(n, value)
    }
    fn empty_lr_mask(&self) -> u16 {
        self.0.empty_lr_mask()
    }
    fn set_underflow_irq(&mut self, enable: bool) {
        self.0.set_underflow_irq(enable)
    }
    fn spi(&mut self, path: LockPath, op: SpiOp) {
        self.0.spi(path, op)
    }
    fn read_id_reg(&self, reg: SysRegId) -> u64 {
        self.0.read_id_reg(reg)
    }
    fn pmu_read(&mut self, reg: pinfold_hv::pmu::PmuReg) -> u64 {
        self.0.pmu_read(reg)
    }
    fn pmu_write(&mut self, reg: pinfold_hv::pmu::PmuReg, value: u64) {
        self.0.pmu_write(reg, value)
    }
    fn vbar_el1(&self) -> u64 {
        self.0.vbar_el1()
    }
    fn now(&self) -> u64 {
        self.0.now()
    }
    fn counter_frequency(&self) -> u64 {
        self.0.counter_frequency()
    }
    fn console_line(&mut self, source: u32, line: &[u8]) {
        self.0.console_line(source, line)
    }
    fn log(&mut self, args: fmt::Arguments) {
        self.0.log(args)
    }
    fn report(&mut self, args: fmt::Arguments) {
        self.0.report(args)
    }
    fn set_wakeup(&mut self, at: Option<u64>) {
        self.0.set_wakeup(at)
    }
    fn config_read(&mut self, pa: u64, width: u8) -> u32 {
        self.0.config_read(pa, width)
    }
    fn config_write(&mut self, pa: u64, width: u8, value: u32) {
        self.0.config_write(pa, width, value)
    }
    fn smmu_io(
        &mut self,
        base: u64,
    ) -> Option<(
        &mut dyn pinfold_hv::smmu::SmmuRegs,
        &mut dyn pinfold_hv::smmu::DmaMemory,
    )> {
        self.0.smmu_io(base)
    }
    fn virs_swerr(&mut self) -> Option<u64> {
        crate::gicv5::take_swerr()
    }
    fn virs_rearm(&mut self, vm: u16, vpe: u16, cpu: usize) {
        crate::gicv5::rearm_doorbell(vm, vpe, cpu)
    }
    fn virs_pend(&mut self, op: u64) {
        // Only for a VM the boot put in the vIRS (a gicv5 partition made at
        // run time has none): a VDPEND naming a VM the IRS does not hold is
        // the hypervisor's own mistake, never issued.
        let vm = (op >> pinfold_hv::vgic5::VDPEND_VM_SHIFT) as u16;
        if crate::gicv5::in_virs(usize::from(vm)) {
            self.chip().vdpend(op)
        }
    }
    fn virs_apply(&mut self, vm: u16, ops: &[pinfold_hv::vgic5::VirsOp]) {
        crate::gicv5::virs_apply(vm, ops)
    }
    fn vppi_read(&mut self, reg: pinfold_hv::vgic5::ppitrap::IchPpiReg) -> u64 {
        self.0.v5.as_mut().map_or(0, |c| c.vppi_read(reg))
    }
    fn vppi_write(&mut self, reg: pinfold_hv::vgic5::ppitrap::IchPpiReg, value: u64) {
        if let Some(c) = self.0.v5.as_mut() {
            c.vppi_write(reg, value)
        }
    }
}
