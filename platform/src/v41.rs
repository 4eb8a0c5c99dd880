//! GICv4.1 direct vSGIs, the platform half: at boot, each CPU's vPE table
//! as the core decides it (`pinfold_hv::vgic::v41::vpe_table_for`: the
//! ITS's GITS_BASER<n> of type vPE when the ITS shares it with that CPU's
//! redistributor, else one zeroed EL2-heap table per group of
//! redistributors GICR_TYPER.CommonLPIAff says share one); at each CPU's
//! bring-up its GICR_VPROPBASER (4.1 layout) written and its own VLPI
//! frame, with the GITS_SGIR of the ITS the core chose for it
//! (`ItsSet::local_its`: its NUMA node's ITS with vSGIs, else the first
//! with them, seed 004), handed to its `PlatformHw` as the core's `V41Hw`
//! (`pinfold_hv::vsgi`: vPEs, load/put, sends, reconfiguration). Each
//! CPU's redistributor is found once at boot (one walk of the regions per
//! CPU, kept for its bring-up) and each chosen ITS is checked against
//! every redistributor once, not once per CPU.
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
    /// GICR_VPROPBASER of CPU i (0: its redistributor was not found, or
    /// its ITS has no vSGIs: no frame).
    vprop: Vec<u64>,
    /// The GITS_SGIR of CPU i's ITS (`ItsSet::local_its`).
    sgir: Vec<usize>,
    /// CPU i's redistributor RD_base, found once at boot.
    rd: Vec<Option<usize>>,
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

/// One ITS as this plan reads it: its control frame, GITS_TYPER,
/// GITS_MPIDR, its vPE table's GITS_BASER<n>, and whether it offers
/// vSGIs with every redistributor (checked once per ITS).
struct ItsRegs {
    base: usize,
    typer: u64,
    mpidr: u64,
    vpe_baser: Option<u64>,
    direct: bool,
}

fn its_regs(base: usize, rd_typers: &[u64]) -> ItsRegs {
    let typer = read64(base + GITS_TYPER);
    ItsRegs {
        base,
        typer,
        mpidr: read64(base + GITS_MPIDR),
        vpe_baser: (0..8)
            .map(|n| read64(base + GITS_BASER0 + 8 * n))
            .find(|&b| v41::is_vpe_baser(b)),
        direct: SgiDelivery::choose(rd_typers, Some(typer)) == SgiDelivery::Direct,
    }
}

/// Boot, on the boot CPU once every ITS is up (each one's vPE table given
/// by the driver's init) and the core has decided: every CPU's vPE table
/// and GITS_SGIR planned. Each CPU's is its own ITS's, as the core chose
/// it (`ItsSet::local_its`: its NUMA node's ITS with vSGIs, else the first
/// with them): the vPE table that ITS shares with the CPU's redistributor
/// when it does, and that ITS's GITS_SGIR. Nothing unless `sys.vsgi` is on.
pub fn init(sys: &System) {
    let (Some(_), Some(set)) = (sys.vsgi.as_ref(), sys.its.as_ref()) else {
        return;
    };
    let host = &sys.host;
    for &i in set.vsgi_itses() {
        if let Some(&(its, size)) = host.gic.its.get(i) {
            if size < ITS_V41_SIZE {
                hvlog!(
                    "v41: ITS {i} at {its:#x} is described with {size:#x} bytes: its SGI frame is used at +0x2_0000 regardless, as Linux does"
                );
            }
        }
    }
    // One walk of the redistributor regions per CPU, kept for its
    // bring-up; each CPU's GICR_TYPER read once.
    let rds: Vec<Option<usize>> = host.cpus.iter().map(|&m| rd_of(host, m)).collect();
    let rd_typers: Vec<Option<u64>> = rds.iter().map(|rd| rd.map(|rd| read64(rd + 8))).collect();
    let found: Vec<u64> = rd_typers.iter().flatten().copied().collect();
    let mut itses: Vec<(usize, ItsRegs)> = Vec::new();
    let mut groups: Vec<(u32, u64)> = Vec::new();
    let mut vprop = Vec::with_capacity(host.cpus.len());
    let mut sgir = Vec::with_capacity(host.cpus.len());
    for index in 0..host.cpus.len() {
        let chosen = set.local_its(index);
        let Some(&(base, _)) = host.gic.its.get(chosen) else {
            vprop.push(0);
            sgir.push(0);
            continue;
        };
        if !itses.iter().any(|(i, _)| *i == chosen) {
            itses.push((chosen, its_regs(base as usize, &found)));
        }
        let Some((_, its)) = itses.iter().find(|(i, _)| *i == chosen) else {
            vprop.push(0);
            sgir.push(0);
            continue;
        };
        sgir.push(its.base + GITS_SGIR);
        // The core chose this ITS from the GITS_TYPER the driver read;
        // checked again with every redistributor (once per ITS,
        // `its_regs`), so a CPU whose ITS turns out not to do vSGIs gets
        // no frame (no vPE, the mailbox path).
        if !its.direct {
            hvlog!(
                "v41: ITS {chosen} ({:#x}) has no GICv4.1 vSGIs: CPU {index}'s SGIs stay trapped",
                its.base
            );
            vprop.push(0);
            continue;
        }
        let (Some(rd), Some(typer)) = (rds[index], rd_typers[index]) else {
            vprop.push(0);
            continue;
        };
        let value = match v41::vpe_table_for(typer, its.typer, its.mpidr, its.vpe_baser) {
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
        "v41: GICv4.1 direct vSGIs on ITSes {:?}, each CPU through its own ({} group vPE table(s) of their own)",
        set.vsgi_itses(),
        groups.len()
    );
    PLAN.call_once(|| Plan {
        vprop,
        sgir,
        rd: rds,
    });
}

/// This CPU's bring-up, after `its::init_cpu`: its GICR_VPROPBASER and
/// its frame for the core. Nothing without direct vSGIs.
pub fn init_cpu(sys: &System, index: usize, hw: &mut crate::hw::PlatformHw) {
    let (Some(_), Some(plan)) = (sys.vsgi.as_ref(), PLAN.get()) else {
        return;
    };
    let (Some(&value), Some(&sgir)) = (
        plan.vprop.get(index).filter(|&&v| v != 0),
        plan.sgir.get(index),
    ) else {
        return;
    };
    let Some(&Some(rd)) = plan.rd.get(index) else {
        return;
    };
    let vlpi = rd + VLPI_FRAME;
    // No vPE is resident at boot; the table is written with Valid = 0
    // in GICR_VPENDBASER, as the architecture asks.
    write64(vlpi + VPENDBASER, 0);
    write64(vlpi + VPROPBASER, value);
    hw.v41 = Some(V41Frame { vlpi, sgir });
}

/// A CPU's own redistributor VLPI frame and its ITS's GITS_SGIR (the
/// ITS of its NUMA node the core chose, `ItsSet::local_its`). Only its
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
    fn write_sgir(&mut self, value: u64) {
        write64(self.sgir, value)
    }
}
