//! The host's GICv3 ITSes, the platform half: found from the host
//! description (every enabled `arm,gic-v3-its`, DT or MADT order), set up
//! once at boot in host RAM taken before any partition is placed: the
//! physical LPI property table and one pending table per CPU (one set for
//! the machine: LPIs are the redistributors'), then each ITS's own tables
//! and command queue (`drivers::gicv3_its`); each CPU's
//! GICR_PROPBASER/PENDBASER/EnableLPIs from its own bring-up, and each
//! ITS's command queue for the core (`pinfold_hv::its::ItsQueue`; the
//! core keeps each behind its own `phys_its` lock and routes each
//! device's commands to the ITS the host bridge's `msi-map`/IORT names).
//! An ITS that does not come up is said on the log and left out: the
//! devices whose MSIs it takes get none, the other ITSes keep working. A
//! host without an ITS, or with none that came up, keeps MSI off (no
//! partition gets a virtual ITS). On a GICv4.1 host an ITS whose earlier
//! sibling (same GITS_TYPER.SVPET != 0 and GITS_MPIDR affinity at that
//! level, `pinfold_hv::vgic::v41::sibling_its`) already has a vPE table is
//! given that table (its GITS_BASER value), not one of its own, as Linux's
//! `find_sibling_its`. On a GICv4.0 host (every redistributor
//! VLPIS, every ITS Virtual: the driver gives each its vPE table at init)
//! direct vLPIs are turned on (`HostIts::enable_direct`), vPE pending
//! tables come from the EL2 heap, and each CPU's VLPI frame
//! ([`VlpiFrame`]) is handed to its own `PlatformHw` for the core's
//! residency changes (`vgic::v40::Residency`).

use crate::{arch, hvlog};
use alloc::boxed::Box;
use alloc::vec::Vec;
use pinfold_drivers::gicv3::GicV3Redist;
use pinfold_drivers::gicv3_its::{self, GicV3Its, LPI_CONFIG, PEND_TABLE_BYTES, PROP_TABLE_BYTES};
use pinfold_hv::dtb::HostInfo;
use pinfold_hv::its::{HostIts, ItsQueue, ItsSet};
use pinfold_hv::memmap::FreeMemory;
use pinfold_hv::system::System;
use pinfold_hv::vgic::pits::{ItsTyper, ITT_ALIGN};
use pinfold_hv::vgic::v40::{V40Hw, V4Cmd, VPT_ALIGN};
use pinfold_hv::vgic::v41::{self, ItsVpeView};

/// Host RAM for one ITS's flat tables (a 16-bit DeviceID space of 8-byte
/// entries is 512 KiB; the collection and, on a GICv4 ITS, vPE tables) and
/// its command queue, 64 KiB aligned each.
const REGION: u64 = 2 << 20;

/// Host RAM for a table an interrupt controller reads: `bytes`,
/// `align`-aligned, taken from the top of `free` before partitions are
/// placed, zeroed and cleaned to the point of coherency; None when there
/// is none. (This file's ITS tables, and the GICv5 IST, VM tables and ITS
/// device tables, `gicv5`.)
pub(crate) fn take_table(free: &mut FreeMemory, bytes: u64, align: u64) -> Option<u64> {
    let region = free.take_top(bytes, align)?;
    // SAFETY: `region` was just taken from free RAM (identity mapped,
    // normal memory at EL2); nothing else uses it.
    unsafe { core::ptr::write_bytes(region as *mut u8, 0, bytes as usize) };
    arch::clean_dcache_range(region, bytes);
    Some(region)
}

/// [`take_table`], 64 KiB aligned; None said on the log, naming `what`.
fn take_zeroed(free: &mut FreeMemory, bytes: u64, what: &str) -> Option<u64> {
    let region = take_table(free, bytes, 0x1_0000);
    if region.is_none() {
        hvlog!("its: no {} KiB of RAM for {what}", bytes >> 10);
    }
    region
}

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

/// Sets up every ITS of the host description for `cpus` CPUs, their
/// memory taken from `free`: the LPI property table and one pending table
/// per CPU (shared by every ITS: an LPI is the redistributor's), then each
/// ITS's tables and command queue. An ITS that does not come up is said
/// on the log and left out (the core routes nothing to it: the devices
/// whose MSIs it would take get none); None without any that came up.
pub fn init(host: &HostInfo, free: &mut FreeMemory, cpus: usize) -> Option<HostIts> {
    if host.gic.its.is_empty() {
        return None;
    }
    let pend_stride = PEND_TABLE_BYTES.next_multiple_of(0x1_0000);
    let lpi_bytes = (PROP_TABLE_BYTES.next_multiple_of(0x1_0000) + cpus * pend_stride) as u64;
    let lpi_region = take_zeroed(free, lpi_bytes, "the LPI tables: MSI stays off")?;
    let prop = lpi_region as usize;
    let pend: Vec<usize> = (0..cpus)
        .map(|c| prop + PROP_TABLE_BYTES.next_multiple_of(0x1_0000) + c * pend_stride)
        .collect();
    // Every physical LPI enabled at one priority: the guest's own
    // property table decides at injection (`vgic::pits`).
    // SAFETY: `prop` is PROP_TABLE_BYTES of the region above.
    unsafe { core::ptr::write_bytes(prop as *mut u8, LPI_CONFIG, PROP_TABLE_BYTES) };
    arch::clean_dcache_range(lpi_region, lpi_bytes);
    // The ITSes that came up (index, what a later sibling's decision
    // reads of them).
    let mut earlier: Vec<(usize, ItsVpeView)> = Vec::new();
    let mut units = Vec::with_capacity(host.gic.its.len());
    for (i, &(base, _)) in host.gic.its.iter().enumerate() {
        units.push(init_one(i, base, free, cpus, &mut earlier));
    }
    let Some(mut host_its) = HostIts::several(units, cpus) else {
        // The tables stay taken: nothing points at them, they are small.
        hvlog!("its: no ITS came up: MSI stays off");
        return None;
    };
    TABLES.call_once(|| LpiTables { prop, pend });
    // The vPE tables were given at init (a GICv4 ITS asks for one); direct
    // injection also needs every redistributor's VLPIS and every ITS that
    // came up to be a GICv4 one.
    if host_its.enable_direct(&host.gic.found) {
        hvlog!(
            "its: GICv4.0: partitions' MSIs are direct vLPIs ({} vPEs, no doorbells)",
            pinfold_hv::vgic::v40::VPE_COUNT
        );
    }
    Some(host_its)
}

/// ITS `index` of the host description, at `base`: its tables and command
/// queue in [`REGION`] of host RAM, initialised and enabled; None (said
/// on the log) when it does not come up.
fn init_one(
    index: usize,
    base: u64,
    free: &mut FreeMemory,
    cpus: usize,
    earlier: &mut Vec<(usize, ItsVpeView)>,
) -> Option<(ItsTyper, Box<dyn ItsQueue>)> {
    let region = take_zeroed(free, REGION, "an ITS's tables: its devices get no MSI")?;
    let end = region + REGION;
    let mut next = region;
    let mut alloc = |bytes: usize, align: usize| {
        let at = next.next_multiple_of(align as u64);
        (at + bytes as u64 <= end).then(|| {
            next = at + bytes as u64;
            at as usize
        })
    };
    // SAFETY: `base` is an ITS control frame the host description names,
    // device memory in the EL2 identity map; this is its only user.
    let mut its = unsafe { GicV3Its::new(base as usize) };
    // A GICv4.1 sibling of an earlier ITS (same SVPET affinity) takes
    // that ITS's vPE table, as Linux's `find_sibling_its`.
    let (gits_typer, gits_mpidr) = (its.typer_raw(), its.mpidr());
    let views: Vec<ItsVpeView> = earlier.iter().map(|e| e.1).collect();
    let sibling = v41::sibling_its(gits_typer, gits_mpidr, &views).and_then(|s| earlier.get(s));
    let shared = sibling.and_then(|s| s.1.vpe_baser);
    if let Err(e) = its.init(cpus, &mut alloc, shared) {
        // Its memory stays taken: the ITS may already point at it.
        hvlog!("its: ITS {index} at {base:#x} did not come up ({e:?}): its devices get no MSI");
        return None;
    }
    let vpe_baser = its.vpe_baser();
    if let Some(&(s, _)) = sibling {
        if vpe_baser == shared {
            hvlog!("its: ITS {index} shares the vPE table of its sibling ITS {s}");
        } else {
            hvlog!("its: ITS {index} did not keep ITS {s}'s vPE table: it has its own");
        }
    }
    earlier.push((
        index,
        ItsVpeView {
            typer: gits_typer,
            mpidr: gits_mpidr,
            vpe_baser,
        },
    ));
    arch::clean_dcache_range(region, REGION);
    let typer = its.typer();
    hvlog!(
        "its: ITS {index}: GICv3 ITS at {base:#x}: DeviceID bits {}, EventID bits {}, {} LPIs from {}",
        typer.device_bits,
        typer.id_bits,
        pinfold_hv::vgic::pits::LPI_COUNT,
        pinfold_hv::vgic::pits::LPI_BASE
    );
    Some((typer, Box::new(Queue(its))))
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
    // GICR_TYPER.VLPIS: RD_base, SGI_base, VLPI_base, reserved. Only
    // when partitions' MSIs are direct vLPIs (GICv4.0, `ItsSet::direct`).
    let direct = sys.its.as_ref().is_some_and(ItsSet::direct);
    if direct && typer & (1 << 1) != 0 {
        hw.vlpi = Some(VlpiFrame {
            base: rd + 0x2_0000,
        });
    }
}
