//! The host's GICv3 ITS, the platform half: found from the host description
//! (`arm,gic-v3-its`), its tables and command queue set up once at boot
//! (`drivers::gicv3_its`) in host RAM taken before any partition is placed,
//! the physical LPI property table and one pending table per CPU, each
//! CPU's GICR_PROPBASER/PENDBASER/EnableLPIs from its own bring-up, and the
//! command queue the core drives (`pinfold_hv::its::ItsQueue`; the core
//! keeps it behind its one `phys_its` lock). A host without an ITS, or one
//! that does not come up, keeps MSI off (no partition gets a virtual ITS).
//! On a GICv4.0 host (every redistributor VLPIS, the ITS Virtual: the
//! driver gives the ITS its vPE table at init) direct vLPIs are turned on
//! (`HostIts::enable_direct`), vPE pending tables come from the EL2 heap,
//! and each CPU's VLPI frame ([`VlpiFrame`]) is handed to its own
//! `PlatformHw` for the core's residency changes (`vgic::v40::Residency`).

use crate::{arch, hvlog};
use alloc::boxed::Box;
use alloc::vec::Vec;
use pinfold_drivers::gicv3::GicV3Redist;
use pinfold_drivers::gicv3_its::{self, GicV3Its, LPI_CONFIG, PEND_TABLE_BYTES, PROP_TABLE_BYTES};
use pinfold_hv::dtb::HostInfo;
use pinfold_hv::its::{HostIts, ItsQueue};
use pinfold_hv::memmap::FreeMemory;
use pinfold_hv::system::System;
use pinfold_hv::vgic::pits::ITT_ALIGN;
use pinfold_hv::vgic::v40::{V40Hw, V4Cmd, VPT_ALIGN};

/// Host RAM for the ITS's flat tables (a 16-bit DeviceID space of 8-byte
/// entries is 512 KiB), the command queue, the property table and the
/// CPUs' pending tables (64 KiB aligned each).
const REGION: u64 = 2 << 20;

/// The physical LPI tables every CPU's redistributor points at.
struct LpiTables {
    prop: usize,
    pend: Vec<usize>,
}

static TABLES: spin::Once<LpiTables> = spin::Once::new();

/// The ITS's queue and the ITT memory (the EL2 heap) for the core.
struct Queue(GicV3Its);

impl Queue {
    /// Says so when the ITS did not read `cmd` (sent after `lost` timeouts)
    /// in time.
    fn check_read(&self, lost: u64, cmd: &dyn core::fmt::Debug) {
        if self.0.timeouts != lost {
            hvlog!("its: the ITS did not read {cmd:?} in time");
        }
    }
}

/// Zeroed EL2 heap memory of `bytes`, `align`-aligned, cleaned to the
/// point of coherency for the GIC: an ITT or a vPE pending table.
fn gic_table(bytes: usize, align: usize) -> Option<u64> {
    let at = crate::heap::alloc_zeroed(bytes, align)?;
    arch::clean_dcache_range(at.0, bytes as u64);
    Some(at.0)
}

impl ItsQueue for Queue {
    fn send(&mut self, cmd: &pinfold_hv::vgic::pits::ItsCmd) {
        let lost = self.0.timeouts;
        self.0.send(cmd);
        self.check_read(lost, cmd);
    }
    fn send_v4(&mut self, cmd: &V4Cmd) {
        let lost = self.0.timeouts;
        self.0.send_words(cmd.encode());
        self.check_read(lost, cmd);
    }
    fn send_words(&mut self, words: [u64; 4]) {
        let lost = self.0.timeouts;
        self.0.send_words(words);
        self.check_read(lost, &words);
    }
    fn alloc_vpt(&mut self, bytes: usize) -> Option<u64> {
        gic_table(bytes, VPT_ALIGN)
    }
    fn free_vpt(&mut self, pa: u64, bytes: usize) {
        crate::heap::free(pinfold_hv::addr::PhysAddr(pa), bytes, VPT_ALIGN);
    }
    fn alloc_itt(&mut self, bytes: usize) -> Option<u64> {
        gic_table(bytes, ITT_ALIGN)
    }
    fn free_itt(&mut self, pa: u64, bytes: usize) {
        crate::heap::free(pinfold_hv::addr::PhysAddr(pa), bytes, ITT_ALIGN);
    }
}

/// Sets up the first ITS of the host description for `cpus` CPUs, its
/// memory taken from `free`; None (said on the log) without one or when
/// it does not come up.
pub fn init(host: &HostInfo, free: &mut FreeMemory, cpus: usize) -> Option<HostIts> {
    let &(base, _) = host.gic.its.first()?;
    let Some(region) = free.take_top(REGION, 0x1_0000) else {
        hvlog!(
            "its: no {} KiB of RAM for its tables: MSI stays off",
            REGION >> 10
        );
        return None;
    };
    // SAFETY: `region` was just taken from free RAM (identity mapped,
    // normal memory at EL2); nothing else uses it.
    unsafe { core::ptr::write_bytes(region as *mut u8, 0, REGION as usize) };
    let end = region + REGION;
    let mut next = region;
    let mut alloc = |bytes: usize, align: usize| {
        let at = next.next_multiple_of(align as u64);
        (at + bytes as u64 <= end).then(|| {
            next = at + bytes as u64;
            at as usize
        })
    };
    // SAFETY: `base` is the ITS control frame the host description names,
    // device memory in the EL2 identity map; this is its only user.
    let mut its = unsafe { GicV3Its::new(base as usize) };
    if let Err(e) = its.init(cpus, &mut alloc) {
        hvlog!("its: the ITS at {base:#x} did not come up ({e:?}): MSI stays off");
        return None;
    }
    let (Some(prop), Some(pend)) = (
        alloc(PROP_TABLE_BYTES, 4096),
        (0..cpus)
            .map(|_| alloc(PEND_TABLE_BYTES, 0x1_0000))
            .collect::<Option<Vec<usize>>>(),
    ) else {
        hvlog!("its: no room for the LPI tables: MSI stays off");
        return None;
    };
    // Every physical LPI enabled at one priority: the guest's own
    // property table decides at injection (`vgic::pits`).
    // SAFETY: `prop` is PROP_TABLE_BYTES of the region above.
    unsafe { core::ptr::write_bytes(prop as *mut u8, LPI_CONFIG, PROP_TABLE_BYTES) };
    arch::clean_dcache_range(region, REGION);
    TABLES.call_once(|| LpiTables { prop, pend });
    let typer = its.typer();
    hvlog!(
        "its: GICv3 ITS at {base:#x}: DeviceID bits {}, EventID bits {}, {} LPIs from {}",
        typer.device_bits,
        typer.id_bits,
        pinfold_hv::vgic::pits::LPI_COUNT,
        pinfold_hv::vgic::pits::LPI_BASE
    );
    let mut host_its = HostIts::new(typer, Box::new(Queue(its)), cpus);
    // The vPE table was given at init (a GICv4 ITS asks for one); direct
    // injection also needs every redistributor's VLPIS.
    if host_its.enable_direct(&host.gic.found) {
        hvlog!(
            "its: GICv4.0: partitions' MSIs are direct vLPIs ({} vPEs, no doorbells)",
            pinfold_hv::vgic::v40::VPE_COUNT
        );
    }
    Some(host_its)
}

/// A CPU's own redistributor VLPI frame (RD_base + 0x2_0000 on a GICv4
/// redistributor with GICR_TYPER.VLPIS): GICR_VPROPBASER at 0x70,
/// GICR_VPENDBASER at 0x78. Only its CPU uses it (`hw::PlatformHw`).
pub struct VlpiFrame {
    base: usize,
}

impl VlpiFrame {
    const VPROPBASER: usize = 0x70;
    const VPENDBASER: usize = 0x78;

    fn reg(&self, offset: usize) -> *mut u64 {
        (self.base + offset) as *mut u64
    }
}

impl V40Hw for VlpiFrame {
    fn write_vpropbaser(&mut self, value: u64) {
        // SAFETY: `base` is this CPU's VLPI frame (`init_cpu` found it from
        // its redistributor's GICR_TYPER.VLPIS), device memory at EL2.
        unsafe { self.reg(Self::VPROPBASER).write_volatile(value) }
    }
    fn read_vpendbaser(&mut self) -> u64 {
        // SAFETY: as in `write_vpropbaser`.
        unsafe { self.reg(Self::VPENDBASER).read_volatile() }
    }
    fn write_vpendbaser(&mut self, value: u64) {
        // SAFETY: as in `write_vpropbaser`.
        unsafe { self.reg(Self::VPENDBASER).write_volatile(value) }
    }
}

/// This CPU's LPIs on (its own redistributor, from its own bring-up) and
/// its collection mapped; nothing without an ITS. With direct vLPIs, its
/// VLPI frame is handed to `hw`.
pub fn init_cpu(sys: &System, index: usize, mpidr: u64, hw: &mut crate::hw::PlatformHw) {
    let Some(t) = TABLES.get() else {
        return;
    };
    let Some(&pend) = t.pend.get(index) else {
        return;
    };
    let gic = &sys.host.gic;
    // SAFETY: the host description's redistributor regions, device memory.
    let Some(rd) = (unsafe { GicV3Redist::find(&gic.redist_regions, gic.redist_stride, mpidr) })
    else {
        return;
    };
    // SAFETY: `rd` is this CPU's own RD_base frame; the tables are the
    // hypervisor's, of the sizes the driver asks for.
    if !unsafe { gicv3_its::enable_redist_lpis(rd, t.prop, pend) } {
        hvlog!("its: LPIs were already on or not shareable here: this CPU takes no MSI");
        return;
    }
    // SAFETY: GICR_TYPER of the same frame.
    let typer = unsafe { ((rd + 8) as *const u64).read_volatile() };
    sys.its_cpu_online(index, (typer >> 8) as u16, rd as u64);
    // GICR_TYPER.VLPIS: RD_base, SGI_base, VLPI_base, reserved.
    if sys.its_direct && typer & (1 << 1) != 0 {
        hw.vlpi = Some(VlpiFrame {
            base: rd + 0x2_0000,
        });
    }
}
