//! GICv4.1 direct vSGIs, the platform half: at boot, each CPU's vPE table
//! as the core decides it (`pinfold_hv::vgic::v41::vpe_table_for`: the
//! ITS's GITS_BASER<n> of type vPE when the ITS shares it with that CPU's
//! redistributor, else one zeroed EL2-heap table per group of
//! redistributors GICR_TYPER.CommonLPIAff says share one); at each CPU's
//! bring-up its GICR_VPROPBASER (4.1 layout) written and its own VLPI
//! frame, with ITS 0's GITS_SGIR, handed to its `PlatformHw` as the core's
//! `V41Hw` (`pinfold_hv::vsgi`: vPEs, load/put, sends, reconfiguration).
//!
//! Selected only when the core turned direct vSGIs on (`System::vsgi`:
//! GICR_TYPER and GITS_TYPER say GICv4.1 with vSGIs); a GICv3 or GICv4.0
//! host never reaches past the first check, and nothing else changes for
//! it. No emulator has GICv4.1 vSGIs (QEMU does GICv4.0 at most): this file
//! is untested on hardware; the core's side is host-tested against the
//! register-level model.

use crate::{arch, hvlog};
use alloc::vec::Vec;
use pinfold_drivers::gicv3::GicV3Redist;
use pinfold_hv::dtb::HostInfo;
use pinfold_hv::system::System;
use pinfold_hv::vgic::v41::{self, SgiDelivery, V41Hw, VpeTable};

/// GITS_TYPER, GITS_MPIDR (GICv4.1) and GITS_BASER<n> in the ITS control
/// frame; GITS_SGIR in the ITS's third 64 KiB frame (ITS_base + 0x2_0000,
/// as Linux's `sgir_base`).
const GITS_TYPER: usize = 0x0008;
const GITS_MPIDR: usize = 0x0018;
const GITS_BASER0: usize = 0x0100;
const GITS_SGIR: usize = 0x2_0020;
/// The ITS frames a GICv4.1 ITS with vSGIs has: control, translation, SGI.
const ITS_V41_SIZE: u64 = 0x3_0000;
/// GICR_VPROPBASER and GICR_VPENDBASER in the VLPI frame (RD_base +
/// 0x2_0000).
const VLPI_FRAME: usize = 0x2_0000;
const VPROPBASER: usize = 0x70;
const VPENDBASER: usize = 0x78;

/// What the boot decided for every CPU.
struct Plan {
    /// GICR_VPROPBASER of CPU i (0: its redistributor was not found).
    vprop: Vec<u64>,
    /// ITS 0's GITS_SGIR.
    sgir: usize,
}

static PLAN: spin::Once<Plan> = spin::Once::new();

fn read64(at: usize) -> u64 {
    // SAFETY: every caller passes a register of an ITS or redistributor
    // frame the host description names, device memory at EL2.
    unsafe { (at as *const u64).read_volatile() }
}

fn write64(at: usize, value: u64) {
    // SAFETY: as read64.
    unsafe { (at as *mut u64).write_volatile(value) }
}

/// The redistributor RD_base of the CPU with `mpidr`.
fn rd_of(host: &HostInfo, mpidr: u64) -> Option<usize> {
    let gic = &host.gic;
    // SAFETY: the host description's redistributor regions, device memory.
    unsafe { GicV3Redist::find(&gic.redist_regions, gic.redist_stride, mpidr) }
}

/// Boot, on the boot CPU once the ITS is up (its vPE table given by the
/// driver's init) and the core has decided: every CPU's vPE table planned.
/// Nothing unless `sys.vsgi` is on.
pub fn init(sys: &System) {
    if sys.vsgi.is_none() {
        return;
    }
    let host = &sys.host;
    let Some(&(its, its_size)) = host.gic.its.first() else {
        return;
    };
    if its_size < ITS_V41_SIZE {
        hvlog!(
            "v41: the ITS at {its:#x} is described with {its_size:#x} bytes: its SGI frame is used at +0x2_0000 regardless, as Linux does"
        );
    }
    let its = its as usize;
    let gits_typer = read64(its + GITS_TYPER);
    // The core chose vSGIs if any ITS offers them; only ITS 0 is driven
    // (`vsgi::its_for_cpu`). If it does not, no CPU gets a frame: the
    // core then maps no vPE and every SGI keeps the mailbox path.
    let rd_typers: Vec<u64> = host
        .cpus
        .iter()
        .filter_map(|&mpidr| rd_of(host, mpidr))
        .map(|rd| read64(rd + 8))
        .collect();
    if SgiDelivery::choose(&rd_typers, Some(gits_typer)) != SgiDelivery::Direct {
        hvlog!("v41: ITS 0 ({its:#x}) has no GICv4.1 vSGIs: SGIs stay trapped");
        return;
    }
    let gits_mpidr = read64(its + GITS_MPIDR);
    let vpe_baser = (0..8)
        .map(|n| read64(its + GITS_BASER0 + 8 * n))
        .find(|&b| v41::is_vpe_baser(b));
    let mut groups: Vec<(u32, u64)> = Vec::new();
    let mut vprop = Vec::with_capacity(host.cpus.len());
    for &mpidr in &host.cpus {
        let Some(rd) = rd_of(host, mpidr) else {
            vprop.push(0);
            continue;
        };
        let typer = read64(rd + 8);
        let value = match v41::vpe_table_for(typer, gits_typer, gits_mpidr, vpe_baser) {
            VpeTable::Its(value) => value,
            VpeTable::Group(aff) => match groups.iter().find(|g| g.0 == aff) {
                Some(&(_, value)) => value,
                None => {
                    let pages = v41::own_vpe_table_pages(read64(rd + VLPI_FRAME + VPROPBASER));
                    let Some(at) = crate::heap::alloc_zeroed(pages * 4096, 4096) else {
                        hvlog!("v41: no memory for a vPE table: this CPU's vPEs stay off");
                        vprop.push(0);
                        continue;
                    };
                    arch::clean_dcache_range(at.0, (pages * 4096) as u64);
                    let value = v41::vpropbaser_own(at.0, pages);
                    groups.push((aff, value));
                    value
                }
            },
        };
        vprop.push(value);
    }
    hvlog!(
        "v41: GICv4.1 direct vSGIs: vPE table {} ({} group table(s) of their own)",
        if vpe_baser.is_some() {
            "from the ITS"
        } else {
            "not in the ITS"
        },
        groups.len()
    );
    PLAN.call_once(|| Plan {
        vprop,
        sgir: its + GITS_SGIR,
    });
}

/// This CPU's bring-up, after `its::init_cpu`: its GICR_VPROPBASER and
/// its frame for the core. Nothing without direct vSGIs.
pub fn init_cpu(sys: &System, index: usize, mpidr: u64, hw: &mut crate::hw::PlatformHw) {
    let (Some(_), Some(plan)) = (sys.vsgi.as_ref(), PLAN.get()) else {
        return;
    };
    let Some(&value) = plan.vprop.get(index).filter(|&&v| v != 0) else {
        return;
    };
    let Some(rd) = rd_of(&sys.host, mpidr) else {
        return;
    };
    let vlpi = rd + VLPI_FRAME;
    // No vPE is resident at boot; the table is written with Valid = 0
    // in GICR_VPENDBASER, as the architecture asks.
    write64(vlpi + VPENDBASER, 0);
    write64(vlpi + VPROPBASER, value);
    hw.v41 = Some(V41Frame {
        vlpi,
        sgir: plan.sgir,
    });
}

/// A CPU's own redistributor VLPI frame and ITS 0's GITS_SGIR. Only its
/// CPU uses it (`hw::PlatformHw`); GITS_SGIR takes one 64-bit write from
/// any CPU at once with no lock (each write is one whole vSGI).
pub struct V41Frame {
    vlpi: usize,
    sgir: usize,
}

impl V41Hw for V41Frame {
    fn lockless(&self) -> bool {
        true
    }
    fn read_vpendbaser(&mut self) -> u64 {
        read64(self.vlpi + VPENDBASER)
    }
    fn write_vpendbaser(&mut self, value: u64) {
        write64(self.vlpi + VPENDBASER, value)
    }
    fn write_sgir(&mut self, its: usize, value: u64) {
        // Only ITS 0 is driven (`vsgi::its_for_cpu`).
        if its == 0 {
            write64(self.sgir, value)
        }
    }
}
