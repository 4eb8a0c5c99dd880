//! GICv4.1 direct vSGIs: the decisions of the hypervisor's side, host-tested
//! against the register-level model `pinfold-gicmodel` (no emulator here has
//! GICv4.1 vSGIs).
//!
//! - [`SgiDelivery::choose`]: direct vSGIs only when every redistributor's
//!   GICR_TYPER reports VLPIS, RVPEID and VSGI and the chosen ITS's
//!   GITS_TYPER reports Virtual, VMAPP and VSGI; a GICv4.0 (or GICv3) host
//!   keeps the trapped path (`vgic::sgi` and the mailbox doorbells).
//! - [`Residency`]: one CPU's vPE residency, owned by that CPU (a `&mut` in
//!   its per-CPU state): vCPU load writes GICR_VPENDBASER with Valid, the
//!   vPE ID (RVPEID layout, [15:0]) and the group enables, and waits for
//!   Dirty to clear (bounded); vCPU put writes Valid = 0, waits for Dirty
//!   and reads PendingLast. Only the CPU's own redistributor is touched, so
//!   no lock shared between CPUs is taken when the chip declares
//!   [`V41Hw::lockless`]; a chip that does not is counted on
//!   `LockPath::VcpuLoad`/`VcpuPut` like every other per-CPU change
//!   (`irqchip::change_percpu_state`).
//! - [`DirectSgi::send`]: the sender's path. The guest's ICC_SGI1R_EL1 write
//!   still traps to EL2 (HCR_EL2.IMO = 1 traps EL1 writes of ICC_SGI1R_EL1
//!   on GICv3 and GICv4.x alike; GICv4.1 adds no guest-writable SGI
//!   register, KVM traps it too), is resolved against the partition's own
//!   vCPUs with the same precomputed [`SgiMap`], and each target becomes one
//!   GITS_SGIR write (vPE ID [47:32], vINTID [3:0]) to the ITS chosen for
//!   the sending CPU (`vgic::its_choice`), whose GITS_SGIR is the CPU's
//!   `V41Hw` frame's own. The IPI Linux sends most (one
//!   sibling named by Aff0 alone) is a mask test, a load of the target's
//!   precomputed GITS_SGIR word and the store (23 instructions compiled;
//!   docs/PERFORMANCE.md). The receiver takes no exit: a
//!   resident vPE gets the vSGI in its virtual CPU interface; a
//!   non-resident one keeps it pending and sees it when loaded. Targets
//!   outside the partition are never written (counted as today).
//! - [`cmd`]: the ITS commands the slow paths issue (VMAPP when a vCPU's
//!   vPE is created, with its pending table, the VM's configuration table
//!   and Alloc on the first ITS, VSGI + VSYNC when the guest changes an SGI's enable,
//!   priority or group, VMOVP, VINVALL, INVDB), encoded here from the
//!   command tables independently of the model's decoder.
//!
//! - The slow paths' decisions: [`map_vpe`] (a vCPU's vPE VMAPP'd on every
//!   ITS, Alloc once, then the guest's SGI configuration as VSGIs),
//!   [`reconfigure`] (a guest write that changed an SGI's enable, priority
//!   or group becomes VSGI + VSYNC; one that did not sends nothing),
//!   [`unmap_vpe`] (V = 0 on every ITS, Alloc on the last) and
//!   [`group_enables`] (GICR_VPENDBASER's group enables follow the guest's
//!   GICD_CTLR, as KVM does).
//!
//! - [`choose_vlpis`], [`vconf_offset`]: direct vLPIs on a GICv4.1 host
//!   (applied by `partition` and `its`): the vSGI path's vPEs, a VCONF
//!   copy of the guest's property table, no doorbells.
//!
//! - [`vpe_table_for`]: which vPE table a CPU's GICR_VPROPBASER (4.1
//!   layout) names: the ITS's GITS_BASER<n> of type vPE where the ITS shares
//!   it (GITS_TYPER.SVPET, GITS_MPIDR against GICR_TYPER.CommonLPIAff), else
//!   one table per CommonLPIAff group. [`sibling_its`]: which earlier ITS
//!   (same SVPET != 0, same GITS_MPIDR affinity at that level, both
//!   GICv4.1) a later ITS shares its GITS_BASER vPE table with, as Linux's
//!   `find_sibling_its` (applied by the platform's `its.rs` through the
//!   driver's init).
//!
//! Wired by `crate::vsgi` (vPEs per partition, load/put, the exit path's
//! send, reconfiguration, group enables) and applied by the platform's
//! `v41.rs` (the vPE tables, each CPU's MMIO `V41Hw` over its own VLPI frame
//! and the GITS_SGIR of the CPU's own ITS, `its::ItsSet::local_its`), only
//! when the host chose [`SgiDelivery::Direct`].
//! Untested on GICv4.1 hardware.

use super::sgi::{SgiMap, SgiResolution};
use crate::bits::ones;
use crate::lockstat::{CountedLock, LockPath};

// GICR_TYPER (RD_base + 0x0008).
const GICR_TYPER_VLPIS: u64 = 1 << 1;
const GICR_TYPER_RVPEID: u64 = 1 << 7;
const GICR_TYPER_VSGI: u64 = 1 << 26;
// GITS_TYPER (ITS_base + 0x0008).
const GITS_TYPER_VIRTUAL: u64 = 1 << 1;
const GITS_TYPER_VSGI: u64 = 1 << 39;
const GITS_TYPER_VMAPP: u64 = 1 << 40;
// GICR_VPENDBASER (VLPI_base + 0x0078), GICv4.1 layout.
const VPENDBASER_VALID: u64 = 1 << 63;
const VPENDBASER_PENDING_LAST: u64 = 1 << 61;
const VPENDBASER_DIRTY: u64 = 1 << 60;
const VPENDBASER_VGRP0EN: u64 = 1 << 59;
const VPENDBASER_VGRP1EN: u64 = 1 << 58;
const VPENDBASER_VPEID_MASK: u64 = 0xFFFF;

/// How SGIs between a partition's vCPUs are delivered on this host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SgiDelivery {
    /// Trapped emulation: the mailbox doorbell and an exit on the receiver.
    Trapped,
    /// GICv4.1: GITS_SGIR to the target's vPE, no exit on the receiver.
    Direct,
}

impl SgiDelivery {
    /// From every redistributor's GICR_TYPER and the GITS_TYPER of the ITS
    /// the vSGIs would go through.
    pub fn choose(gicr_typers: &[u64], gits_typer: Option<u64>) -> SgiDelivery {
        let rd = GICR_TYPER_VLPIS | GICR_TYPER_RVPEID | GICR_TYPER_VSGI;
        let its = GITS_TYPER_VIRTUAL | GITS_TYPER_VMAPP | GITS_TYPER_VSGI;
        let all_rd = !gicr_typers.is_empty() && gicr_typers.iter().all(|t| t & rd == rd);
        match gits_typer {
            Some(t) if all_rd && t & its == its => SgiDelivery::Direct,
            _ => SgiDelivery::Trapped,
        }
    }
}

/// The GICv4.1 registers the vSGI path touches. The platform implements it
/// over the calling CPU's own redistributor and the ITS frames; the tests
/// over the model.
pub trait V41Hw {
    /// Whether this CPU's redistributor may be changed without a lock
    /// shared between CPUs (true on every GIC: the frame is the CPU's own).
    fn lockless(&self) -> bool;
    /// This CPU's GICR_VPENDBASER.
    fn read_vpendbaser(&mut self) -> u64;
    fn write_vpendbaser(&mut self, value: u64);
    /// This CPU's GITS_SGIR: that of the ITS the core chose for it
    /// (`its::ItsSet::local_its`, its NUMA node's ITS with vSGIs), fixed
    /// at boot, so the send path names no ITS.
    fn write_sgir(&mut self, value: u64);
}

/// Why a residency change did not complete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResidencyError {
    /// GICR_VPENDBASER.Dirty stayed set for the whole poll budget.
    DirtyStuck,
    /// A vPE was already resident (load without put).
    AlreadyResident(u16),
}

/// Reads of GICR_VPENDBASER before a Dirty that will not clear is an error
/// (a redistributor parses a pending table in microseconds).
pub const DIRTY_POLLS: u32 = 1 << 16;

/// One CPU's vPE residency. Owned by its CPU.
#[derive(Clone, Debug, Default)]
pub struct Residency {
    resident: Option<u16>,
}

impl Residency {
    pub const fn new() -> Self {
        Residency { resident: None }
    }

    /// The vPE resident on this CPU.
    pub fn resident(&self) -> Option<u16> {
        self.resident
    }

    /// vCPU load: make `vpe` resident with its group enables (the guest's
    /// ICC_IGRPEN0/1 as last seen), then wait for Dirty to clear so the
    /// vPE's pending vSGIs are in its virtual CPU interface before entry.
    pub fn load(
        &mut self,
        hw: &mut (impl V41Hw + ?Sized),
        chip_lock: &CountedLock<()>,
        vpe: u16,
        grp0: bool,
        grp1: bool,
    ) -> Result<(), ResidencyError> {
        if let Some(r) = self.resident {
            return Err(ResidencyError::AlreadyResident(r));
        }
        let mut value = VPENDBASER_VALID | u64::from(vpe);
        if grp0 {
            value |= VPENDBASER_VGRP0EN;
        }
        if grp1 {
            value |= VPENDBASER_VGRP1EN;
        }
        let _guard = (!hw.lockless()).then(|| chip_lock.lock(LockPath::VcpuLoad));
        hw.write_vpendbaser(value);
        self.resident = Some(vpe);
        wait_clean(hw).map(|_| ())
    }

    /// vCPU put: make the resident vPE non-resident. Returns PendingLast
    /// (the vPE left with interrupts pending: a parked vCPU has a reason to
    /// be woken).
    pub fn put(
        &mut self,
        hw: &mut (impl V41Hw + ?Sized),
        chip_lock: &CountedLock<()>,
    ) -> Result<bool, ResidencyError> {
        let Some(vpe) = self.resident.take() else {
            return Ok(false);
        };
        let _guard = (!hw.lockless()).then(|| chip_lock.lock(LockPath::VcpuPut));
        hw.write_vpendbaser(u64::from(vpe) & VPENDBASER_VPEID_MASK);
        let last = wait_clean(hw)?;
        Ok(last & VPENDBASER_PENDING_LAST != 0)
    }
}

fn wait_clean(hw: &mut (impl V41Hw + ?Sized)) -> Result<u64, ResidencyError> {
    for _ in 0..DIRTY_POLLS {
        let v = hw.read_vpendbaser();
        if v & VPENDBASER_DIRTY == 0 {
            return Ok(v);
        }
        core::hint::spin_loop();
    }
    Err(ResidencyError::DirtyStuck)
}

/// A partition's direct vSGI routing: each vCPU's GITS_SGIR word (its vPE
/// ID in [47:32]; the vINTID is or'ed in on send).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirectSgi {
    words: alloc::vec::Vec<u64>,
}

/// ICC_SGI1R_EL1 bits other than TargetList [15:0] and INTID [27:24]:
/// Aff1, Aff2, IRM, RS, Aff3. All zero on the IPI Linux sends most (one
/// sibling of a dense partition, `SgiMap::dense`).
const SGI1R_NOT_LIST_OR_INTID: u64 = !(0xFFFF | 0xF << 24);

impl DirectSgi {
    /// `vpes[i]` is vCPU i's vPE ID (allocated host-wide, never shared
    /// between partitions).
    pub fn new(vpes: alloc::vec::Vec<u16>) -> Self {
        DirectSgi {
            words: vpes.into_iter().map(|v| sgir(v, 0)).collect(),
        }
    }

    pub fn vpe(&self, vcpu: usize) -> Option<u16> {
        self.words.get(vcpu).map(|w| (w >> 32) as u16)
    }

    /// The sender's path: an ICC_SGI1R_EL1 `value` written by vCPU
    /// `self_index`, resolved with the partition's `map` over its
    /// `vcpu_mpidrs`, sent as one GITS_SGIR write per target vCPU to this
    /// CPU's ITS (`hw`'s GITS_SGIR). Targets outside the partition are not sent; the resolution
    /// is returned so the caller reports `outside` as today.
    ///
    /// One target named by Aff0 alone in a dense partition (vCPU i has
    /// affinity 0.0.0.i), the IPI Linux sends, is a mask test, a table
    /// load and the store; everything else goes through
    /// [`DirectSgi::send_general`] (the same result, host-tested side by
    /// side).
    #[inline(always)]
    pub fn send(
        &self,
        hw: &mut (impl V41Hw + ?Sized),
        map: &SgiMap,
        vcpu_mpidrs: &[u64],
        value: u64,
        self_index: usize,
    ) -> SgiResolution {
        let list = value & 0xFFFF;
        if value & SGI1R_NOT_LIST_OR_INTID == 0 && list.is_power_of_two() && map.dense() {
            let t = list.trailing_zeros() as usize;
            if let Some(&word) = self.words.get(t) {
                hw.write_sgir(word | (value >> 24 & 0xF));
                return SgiResolution {
                    vcpus: list,
                    outside: 0,
                };
            }
        }
        self.send_general(hw, map, vcpu_mpidrs, value, self_index)
    }

    /// [`DirectSgi::send`] for any ICC_SGI1R_EL1 value.
    #[inline(never)]
    pub fn send_general(
        &self,
        hw: &mut (impl V41Hw + ?Sized),
        map: &SgiMap,
        vcpu_mpidrs: &[u64],
        value: u64,
        self_index: usize,
    ) -> SgiResolution {
        let (intid, res) = map.resolve(vcpu_mpidrs, value, self_index);
        for t in ones(res.vcpus) {
            if let Some(&word) = self.words.get(t as usize) {
                hw.write_sgir(word | u64::from(intid & 0xF));
            }
        }
        res
    }
}

/// GITS_SGIR: vPEID [47:32], vINTID [3:0], everything else RES0.
pub const fn sgir(vpe: u16, intid: u8) -> u64 {
    (vpe as u64) << 32 | (intid & 0xF) as u64
}

// GICR_TYPER.CommonLPIAff [25:24] and Affinity [63:32]; GITS_TYPER.SVPET
// [42:41] (bit 19 below it is PTA); GITS_BASER<n> fields the redistributors' copy takes.
const GICR_TYPER_COMMON_LPI_AFF_SHIFT: u32 = 24;
const GITS_TYPER_SVPET_SHIFT: u32 = 41;
const BASER_VALID: u64 = 1 << 63;
const BASER_INDIRECT: u64 = 1 << 62;
const BASER_TYPE_SHIFT: u32 = 56;
/// GITS_BASER<n>.Type of the vPE table.
pub const BASER_TYPE_VPE: u64 = 2;
// GICR_VPROPBASER, GICv4.1 layout (Arm IHI 0069H, 12.11.37).
const VPROP41_VALID: u64 = 1 << 63;
const VPROP41_INDIRECT: u64 = 1 << 55;
const VPROP41_PAGE_SIZE_SHIFT: u32 = 53;
const VPROP41_Z: u64 = 1 << 52;
const VPROP41_ADDR: u64 = 0x000F_FFFF_FFFF_F000;
const VPROP41_ENTRY_SIZE_SHIFT: u32 = 59;
/// Inner Shareable [11:10], Inner write-back read/write-allocate [9:7]:
/// the EL2 heap's attributes.
const VPROP41_ATTRS: u64 = 1 << 10 | 7 << 7;

/// Where a CPU's redistributor gets the GICv4.1 vPE table its
/// GICR_VPROPBASER names (the table is shared: an ITS's VMAPP with Alloc
/// and the redistributor's residency changes read the same entries).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VpeTable {
    /// The ITS's (GITS_BASER<n> of type vPE): the ITS shares it with the
    /// redistributors of its affinity (GITS_TYPER.SVPET, GITS_MPIDR), as
    /// this one; the value to write to GICR_VPROPBASER.
    Its(u64),
    /// Not the ITS's: one table for each group of redistributors that
    /// GICR_TYPER.CommonLPIAff says share one, named by their common
    /// affinity (every CPU of the group points at the same table).
    Group(u32),
}

/// The affinity a redistributor shares its vPE table at: GICR_TYPER's
/// Affinity with the levels below CommonLPIAff cleared (CommonLPIAff 0:
/// every redistributor shares one table; 3: those of one Aff3.Aff2.Aff1).
pub fn common_aff(gicr_typer: u64) -> u32 {
    let aff = (gicr_typer >> 32) as u32;
    let level = (gicr_typer >> GICR_TYPER_COMMON_LPI_AFF_SHIFT & 3) as u32;
    aff & !u32::MAX.checked_shr(level * 8).unwrap_or(0)
}

/// The vPE table CPU with `gicr_typer` uses: the ITS's when the ITS shares
/// it (SVPET != 0, its table valid) with the redistributors of this one's
/// common affinity (GITS_MPIDR read as a GICR_TYPER Affinity with SVPET
/// as CommonLPIAff, as Linux's `inherit_vpe_l1_table_from_its` does), else
/// the group's own.
pub fn vpe_table_for(
    gicr_typer: u64,
    gits_typer: u64,
    gits_mpidr: u64,
    vpe_baser: Option<u64>,
) -> VpeTable {
    let svpet = gits_typer >> GITS_TYPER_SVPET_SHIFT & 3;
    let its_aff =
        common_aff(svpet << GICR_TYPER_COMMON_LPI_AFF_SHIFT | (gits_mpidr & 0xFFFF_FF00) << 32);
    let mine = common_aff(gicr_typer);
    match vpe_baser {
        Some(b) if svpet != 0 && b & BASER_VALID != 0 && its_aff == mine => {
            VpeTable::Its(vpropbaser_from_its(b))
        }
        _ => VpeTable::Group(mine),
    }
}

/// What [`sibling_its`] reads of an ITS set up before this one: its
/// GITS_TYPER, GITS_MPIDR and its vPE table's GITS_BASER<n> as it was
/// left (None: it has none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ItsVpeView {
    pub typer: u64,
    pub mpidr: u64,
    pub vpe_baser: Option<u64>,
}

/// The SVPET and the affinity at which a GICv4.1 ITS (GITS_TYPER.VMAPP)
/// shares its vPE table: GITS_MPIDR's Affinity read as a GICR_TYPER's
/// with SVPET as CommonLPIAff (Linux's `compute_its_aff`). None when
/// SVPET is 0 (it shares with nobody) or the ITS is not GICv4.1.
fn its_share_aff(gits_typer: u64, gits_mpidr: u64) -> Option<(u64, u32)> {
    let svpet = gits_typer >> GITS_TYPER_SVPET_SHIFT & 3;
    (gits_typer & GITS_TYPER_VMAPP != 0 && svpet != 0).then(|| {
        let as_gicr = svpet << GICR_TYPER_COMMON_LPI_AFF_SHIFT | (gits_mpidr & 0xFFFF_FF00) << 32;
        (svpet, common_aff(as_gicr))
    })
}

/// Which ITS of `earlier` (those set up before this one, in order) is the
/// sibling of the ITS with `gits_typer` and `gits_mpidr`: the first that
/// is GICv4.1 with the same SVPET != 0, the same GITS_MPIDR affinity at
/// that level, and a valid vPE table. That ITS's vPE GITS_BASER<n> value
/// is then this one's too (one table for both, as Linux's
/// `find_sibling_its` gives it in `its_alloc_tables`): a vPE mapped with
/// Alloc on either is in the table the redistributors of that affinity
/// name. None: this ITS gets a table of its own.
pub fn sibling_its(gits_typer: u64, gits_mpidr: u64, earlier: &[ItsVpeView]) -> Option<usize> {
    let mine = its_share_aff(gits_typer, gits_mpidr)?;
    earlier.iter().position(|e| {
        its_share_aff(e.typer, e.mpidr) == Some(mine)
            && e.vpe_baser
                .is_some_and(|b| b & BASER_VALID != 0 && is_vpe_baser(b))
    })
}

/// Whether GITS_BASER<n> value `baser` is the vPE table's.
pub fn is_vpe_baser(baser: u64) -> bool {
    baser >> BASER_TYPE_SHIFT & 7 == BASER_TYPE_VPE
}

/// GICR_VPROPBASER (4.1) naming the ITS's vPE table `baser`: Valid, its
/// Indirect, Page_Size, address (a 64 KiB page's PA[51:48] is in
/// GITS_BASER [15:12]), shareability and inner cacheability, Size = its
/// pages - 1. Entry_Size is the redistributor's (read-only).
pub fn vpropbaser_from_its(baser: u64) -> u64 {
    let page_size = baser >> 8 & 3;
    let addr = if page_size == 2 {
        baser & 0x0000_FFFF_FFFF_0000 | (baser >> 12 & 0xF) << 48
    } else {
        baser & 0x0000_FFFF_FFFF_F000
    };
    let mut v = VPROP41_VALID
        | page_size << VPROP41_PAGE_SIZE_SHIFT
        | addr & VPROP41_ADDR
        | baser & (3 << 10)
        | (baser >> 59 & 7) << 7
        | baser & 0x7F;
    if baser & BASER_INDIRECT != 0 {
        v |= VPROP41_INDIRECT;
    }
    v
}

/// 4 KiB pages of a group's own flat vPE table for every vPE ID the
/// hypervisor hands out, from the redistributor's GICR_VPROPBASER as read
/// (Entry_Size [61:59]: (n + 1) doublewords).
pub fn own_vpe_table_pages(vpropbaser_read: u64) -> usize {
    let esz = ((vpropbaser_read >> VPROP41_ENTRY_SIZE_SHIFT & 7) as usize + 1) * 8;
    (usize::from(super::v40::VPE_COUNT) * esz).div_ceil(4096)
}

/// GICR_VPROPBASER (4.1) naming a group's own zeroed flat table at `pa`
/// of `pages` 4 KiB pages (Z: the redistributor need not read it to know
/// it holds no vPE).
pub fn vpropbaser_own(pa: u64, pages: usize) -> u64 {
    VPROP41_VALID | VPROP41_Z | pa & VPROP41_ADDR | VPROP41_ATTRS | (pages.clamp(1, 128) as u64 - 1)
}

/// One SGI's configuration as the VSGI command carries it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SgiCfg {
    pub enabled: bool,
    /// The guest's priority byte (the command keeps its top four bits).
    pub priority: u8,
    pub group1: bool,
}

/// A vCPU's 16 SGIs (`VRedist::sgi_configs`).
pub type SgiCfgs = [SgiCfg; 16];

/// The commands that give a vCPU's vPE direct vSGIs, as (ITS index,
/// command): VMAPP on each ITS of `rds` (every ITS that offers vSGIs,
/// lowest first, with the vPE's RDbase there: a GITS_SGIR write is only
/// taken by an ITS the vPE is mapped on, and each CPU writes its own,
/// `its::ItsSet::local_its`), Alloc on the first only (the GIC sets up the
/// vPE table entry once; Linux's `its_send_vmapp` Allocs on the first
/// mapping of a vPE, whichever ITS that is); then the guest's current
/// configuration of its 16 SGIs as VSGIs and a VSYNC, all on `cfg_its`
/// alone: the configuration lives with the vPE, not in an ITS, so one ITS
/// the vPE is mapped on suffices (Linux's `its_configure_sgi` sends VSGI to
/// the one ITS `find_4_1_its` returns). Nothing when `rds` is empty.
pub fn map_vpe(
    m: &cmd::Vmapp,
    rds: &[(usize, u32)],
    cfg_its: usize,
    cfg: &SgiCfgs,
) -> alloc::vec::Vec<(usize, [u64; 4])> {
    let mut out = alloc::vec::Vec::with_capacity(rds.len() + 17);
    if rds.is_empty() {
        return out;
    }
    for (n, &(its, rd)) in rds.iter().enumerate() {
        out.push((
            its,
            cmd::vmapp(&cmd::Vmapp {
                alloc: m.alloc && n == 0,
                rd,
                ..*m
            }),
        ));
    }
    for (n, c) in cfg.iter().enumerate() {
        out.push((
            cfg_its,
            cmd::vsgi(m.vpe, n as u8, c.enabled, c.priority, c.group1),
        ));
    }
    out.push((cfg_its, cmd::vsync(m.vpe)));
    out
}

/// The guest changed its redistributor's SGI configuration (enable,
/// priority, group) from `old` to `new`: one VSGI per SGI that differs,
/// then a VSYNC, so the GIC delivers (or holds) by the guest's rules;
/// nothing when no SGI changed (most GICR writes touch PPIs only).
pub fn reconfigure(vpe: u16, old: &SgiCfgs, new: &SgiCfgs) -> alloc::vec::Vec<[u64; 4]> {
    let mut out: alloc::vec::Vec<[u64; 4]> = (0..16u8)
        .filter(|&n| {
            let (a, b) = (old[usize::from(n)], new[usize::from(n)]);
            a.enabled != b.enabled || a.group1 != b.group1 || a.priority >> 4 != b.priority >> 4
        })
        .map(|n| {
            let c = new[usize::from(n)];
            cmd::vsgi(vpe, n, c.enabled, c.priority, c.group1)
        })
        .collect();
    if !out.is_empty() {
        out.push(cmd::vsync(vpe));
    }
    out
}

/// The commands that take a vPE off every ITS of `itses` ([`map_vpe`]'s
/// ITSes, lowest first): VMAPP V = 0 on each in the reverse order, so the
/// first, whose VMAPP had Alloc, is last and carries Alloc (the GIC then
/// forgets the vPE; its tables may be freed).
pub fn unmap_vpe(vpe: u16, itses: &[usize]) -> alloc::vec::Vec<(usize, [u64; 4])> {
    itses
        .iter()
        .rev()
        .enumerate()
        .map(|(n, &its)| (its, cmd::vunmapp(vpe, n + 1 == itses.len())))
        .collect()
}

/// Why a partition's MSIs stay on the trapped path (`pits`) on a GICv4.1
/// host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VlpisOff {
    /// It has no virtual ITS (no function with MSIs).
    NoVits,
    /// Its vCPUs have no vPEs (`vsgi::PartitionVsgi`: not the GICv3
    /// interface, or a CPU beyond the vPE IDs, or no vSGIs on the host).
    NoVpes,
    /// The ITS its functions reach (`its::MsiRouting::partition_its`) does
    /// not offer vSGIs, so the vPEs are not mapped on it and a VMAPTI there
    /// would name an unmapped vPE.
    ItsWithoutVpes { its: usize },
}

/// The core's decision for a partition on a GICv4.1 host: its MSIs become
/// direct vLPIs on the vSGI path's vPEs (one per vCPU, mapped on every ITS
/// with vSGIs at its first load, `ItsSet::vsgi_itses`) when it has a
/// virtual ITS, its vCPUs have those vPEs, the ITS its functions reach is
/// one they are mapped on (applied by `partition` and `its`). One vPE
/// serves both
/// (a GICv4.1 vPE has one VPT, one VCONF and one residency); its VPT covers
/// the vITS's vINTIDs and its VCONF is the partition's copy of the guest's
/// property table, because VMAPP (at the first load) comes before the
/// guest names its table (EnableLPIs) and VCONF_Addr cannot change while
/// the vPE is mapped (KVM keeps its own vprop table for the same reason).
/// Doorbells: none, as on GICv4.0 (pinned vCPUs are resident while their
/// partition runs): VMAPP's Default_Doorbell and VMAPTI's Dbell_pINTID are
/// 1023, VMOVI's D is 0 (GICv4.1 has no per-vLPI doorbell).
pub fn choose_vlpis(
    has_vits: bool,
    has_vpes: bool,
    its: usize,
    vsgi_itses: &[usize],
) -> Result<(), VlpisOff> {
    if !has_vits {
        return Err(VlpisOff::NoVits);
    }
    if !has_vpes {
        return Err(VlpisOff::NoVpes);
    }
    if !vsgi_itses.contains(&its) {
        return Err(VlpisOff::ItsWithoutVpes { its });
    }
    Ok(())
}

/// The byte of vINTID `vintid` in the guest's property table and in the
/// partition's VCONF copy (the same offset, vINTID - 8192), when the vINTID
/// is inside both: below 2^`guest_bits` (one more than the guest's
/// GICR_PROPBASER IDbits, as `v40::vpropbaser` accepted it within its RAM)
/// and
/// 2^`vconf_bits` (the bits the copy and the VPT cover). None otherwise:
/// the MAPTI is refused, so the GIC never reads past either table.
pub fn vconf_offset(vintid: u32, guest_bits: u8, vconf_bits: u8) -> Option<u64> {
    let limit = 1u64 << guest_bits.min(vconf_bits).min(32);
    (vintid >= super::pits::LPI_BASE && u64::from(vintid) < limit)
        .then(|| u64::from(vintid - super::pits::LPI_BASE))
}

/// GICR_VPENDBASER's vGrp0En and vGrp1En for a partition whose virtual
/// distributor's GICD_CTLR is `gicd_ctlr` (EnableGrp0 [0], EnableGrp1 [1]
/// in the non-secure single-security view Pinfold's guests get): a vSGI
/// of a group the guest's distributor has off stays pending, as on GICv3.
pub fn group_enables(gicd_ctlr: u32) -> (bool, bool) {
    (gicd_ctlr & 1 != 0, gicd_ctlr & 2 != 0)
}

/// ITS commands of the vPE and vSGI paths (four doublewords each).
pub mod cmd {
    pub const VMOVP: u64 = 0x22;
    pub const VSGI: u64 = 0x23;
    pub const VSYNC: u64 = 0x25;
    pub const VMAPP: u64 = 0x29;
    pub const VINVALL: u64 = 0x2D;
    pub const INVDB: u64 = 0x2E;

    /// vPEID in DW1 [47:32].
    const fn vpe_dw1(vpe: u16) -> u64 {
        (vpe as u64) << 32
    }

    /// RDbase in DW2 [51:16] (GITS_TYPER.PTA = 0: the Processor_Number).
    const fn rdbase(rd: u32) -> u64 {
        (rd as u64 & super::super::pits::RDBASE_MASK) << 16
    }

    /// VCONF_Addr (DW0) and VPT_addr (DW3): bits [51:16], 64 KiB aligned.
    const ADDR: u64 = 0x000F_FFFF_FFFF_0000;
    /// Default_Doorbell "none" (an INTID no LPI has).
    pub const NO_DOORBELL: u32 = 1023;

    /// What a GICv4.1 VMAPP with V = 1 gives the ITS for one vPE.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Vmapp {
        pub vpe: u16,
        /// The target redistributor's Processor_Number (PTA = 0).
        pub rd: u32,
        /// The vPE's virtual LPI pending table (64 KiB aligned) and the
        /// number of vINTID bits it covers (at least 14).
        pub vpt: u64,
        pub vpt_bits: u8,
        /// The VM's virtual LPI configuration (property) table.
        pub vconf: u64,
        /// The first VMAPP of this vPE on any ITS: the GIC sets up its
        /// vPE table entry (Alloc); the tables are fresh and zeroed (PTZ).
        pub alloc: bool,
        /// The LPI raised while the vPE is resident nowhere, or None.
        pub doorbell: Option<u32>,
    }

    /// VMAPP (GICv4.1 layout), mapping: DW0 Alloc [8], PTZ [9],
    /// VCONF_Addr [51:16]; DW1 Default_Doorbell [31:0], vPEID [47:32];
    /// DW2 V [63], RDbase [51:16]; DW3 VPT_size [4:0] (ID bits - 1),
    /// VPT_addr [51:16]. (Linux's `its_build_vmapp_cmd` agrees.)
    pub const fn vmapp(m: &Vmapp) -> [u64; 4] {
        let db = match m.doorbell {
            Some(lpi) => lpi,
            None => NO_DOORBELL,
        };
        [
            VMAPP | (m.alloc as u64) << 8 | (m.alloc as u64) << 9 | m.vconf & ADDR,
            db as u64 | vpe_dw1(m.vpe),
            1 << 63 | rdbase(m.rd),
            m.vpt & ADDR | (m.vpt_bits.saturating_sub(1) & 0x1F) as u64,
        ]
    }

    /// VMAPP with V = 0: `vpe` unmapped from this ITS; `alloc` on the
    /// last ITS it was mapped on (the GIC forgets its vPE table entry).
    /// Every other field is RES0.
    pub const fn vunmapp(vpe: u16, alloc: bool) -> [u64; 4] {
        [VMAPP | (alloc as u64) << 8, vpe_dw1(vpe), 0, 0]
    }

    /// VSGI: SGI `intid` of `vpe` enabled or not, priority (its top four
    /// bits, DW0 [23:20]), group 1 or 0 (DW0 [10]); Enable DW0 [8],
    /// Clear DW0 [9], vINTID DW0 [35:32].
    pub const fn vsgi(vpe: u16, intid: u8, enable: bool, priority: u8, group1: bool) -> [u64; 4] {
        let dw0 = VSGI
            | (enable as u64) << 8
            | (group1 as u64) << 10
            | ((priority >> 4) as u64) << 20
            | ((intid & 0xF) as u64) << 32;
        [dw0, vpe_dw1(vpe), 0, 0]
    }

    pub const fn vsync(vpe: u16) -> [u64; 4] {
        [VSYNC, vpe_dw1(vpe), 0, 0]
    }

    pub const fn vinvall(vpe: u16) -> [u64; 4] {
        [VINVALL, vpe_dw1(vpe), 0, 0]
    }

    pub const fn invdb(vpe: u16) -> [u64; 4] {
        [INVDB, vpe_dw1(vpe), 0, 0]
    }

    /// VMOVP with GITS_TYPER.VMOVP = 1 (one command moves the vPE on every
    /// ITS: SeqNum and ITSList zero).
    pub const fn vmovp(vpe: u16, rd: u32) -> [u64; 4] {
        [VMOVP, vpe_dw1(vpe), rdbase(rd), 0]
    }
}

#[cfg(test)]
#[path = "v41_tests.rs"]
mod tests;
