//! The GICv3/v4 ID registers the core decodes into the host view
//! (`pinfold_hv::gichost::GicFound::from_v3_ids`): GICD_PIDR2 and
//! GICD_TYPER, every redistributor's GICR_TYPER (the frames walked as
//! `GicV3Redist::find` walks them) and each ITS's GITS_TYPER. Read once at
//! boot; reading them has no side effect.

use pinfold_hv::gichost::GicV3Ids;

const GICD_TYPER: u64 = 0x0004;
const GICD_PIDR2: u64 = 0xFFE8;
const GICR_TYPER: u64 = 0x0008;
const GITS_TYPER: u64 = 0x0008;
/// GICR_TYPER.VLPIS [1]: the frame has VLPI_base and a reserved frame too.
/// GICR_TYPER.Last [4].
const GICR_TYPER_LAST: u64 = 1 << 4;

/// # Safety
/// `dist`, every redistributor region and every ITS frame must be the
/// host description's, mapped as device memory.
pub unsafe fn read(
    dist: u64,
    redist_regions: &[(u64, u64)],
    redist_stride: Option<u64>,
    its: &[(u64, u64)],
) -> GicV3Ids {
    // SAFETY: offsets inside the distributor frame the caller vouched for.
    let gicd_pidr2 = unsafe { ((dist + GICD_PIDR2) as *const u32).read_volatile() };
    // SAFETY: as above.
    let gicd_typer = unsafe { ((dist + GICD_TYPER) as *const u32).read_volatile() };
    let mut ids = GicV3Ids {
        gicd_pidr2,
        gicd_typer,
        ..GicV3Ids::default()
    };
    for &(base, size) in redist_regions {
        let mut frame = base;
        while frame + 0x2_0000 <= base + size {
            // SAFETY: GICR_TYPER of an RD_base frame inside a region the
            // caller vouched for.
            let typer = unsafe { ((frame + GICR_TYPER) as *const u64).read_volatile() };
            ids.gicr_typers.push(typer);
            if typer & GICR_TYPER_LAST != 0 {
                break;
            }
            frame += super::rd_step(redist_stride, typer);
        }
    }
    for &(base, _) in its {
        // SAFETY: GITS_TYPER of an ITS frame the caller vouched for.
        let typer = unsafe { ((base + GITS_TYPER) as *const u64).read_volatile() };
        ids.gits_typers.push(typer);
    }
    ids
}
