//! GICv5 decisions the core makes and the GICv5 driver
//! (`pinfold_drivers::gicv5`) applies: which host GICv5 is good enough
//! ([`check_host`], naming every missing feature), which PPIs a vCPU gets
//! as direct virtual interrupts and which it may see at all
//! ([`PpiPlan::for_vcpu`]; the hidden ones hidden by trapping the guest's
//! ICC_PPI_* accesses, [`ppitrap`]), which virtual interface a partition gets
//! ([`choose_interface`]: GICv5 or, on a host with FEAT_GCIE_LEGACY, the
//! GICv3-compatible one), whether the core's GICv3 timer mirroring runs
//! for it ([`mirrored_ppis`]: not for a GICv5 partition, whose timers are
//! DVI), which GIC instructions its guest executes without a trap
//! ([`UntrappedInsns`], ICH_HFGITR_EL2: all of them once its VM is in the
//! vIRS, else only those naming no interrupt), and the saved virtual PPI state of a vCPU that is
//! not resident ([`VPpiContext`]: plain data, owned by the vCPU, touched
//! only on its own CPU, so load and put take no lock shared between CPUs).
//!
//! Beyond PPIs, the vIRS ([`plan_virs`]): every GICv5 partition is a VM of
//! the IRS (partition i = VM i, its vCPU n = vPE n), its own SPIs are
//! assigned to its VM as virtual SPIs (refused, naming them, when two
//! partitions claim one or it is out of range), its guest's IPIs are
//! virtual LPIs it routes and raises itself with no exit, each vCPU has a
//! doorbell LPI at its CPU for interrupts that arrive while it is not
//! resident (the vCPU pinned on the CPU that takes it). At boot [`plan_boot_virs`] makes that
//! plan for the GICv5 partitions (`System::plan_virs`), with each VM's
//! tables in free RAM, and names the partition and plan field when it
//! refuses one. The plan is a list of [`VirsOp`]s the
//! driver applies. A guest's GIC commands reach only the VM the hypervisor
//! loads into ICH_CONTEXTR_EL2.VM; one naming a vPE or an ID its VM lacks
//! does nothing and leaves an IRS software error, counted against the
//! guest's partition ([`VirsFault`], [`attribute_swerr`]:
//! drained a bounded number at a time by `System::virs_poll`). A doorbell
//! is decided by [`on_doorbell`] (re-armed for a vCPU about to be entered,
//! left for one that is off). A destroyed partition's SPIs go back to
//! the physical domain and its VM is unmapped ([`release_virs`]). The
//! guest's own IRS config frame is emulated by [`frame`]. The interrupts of
//! the devices the hypervisor emulates for it (PL011, watchdog, PL061) are
//! virtual SPIs of its VM with the IDs its guest DT gives them, made
//! pending or not with GIC VDPEND ([`vdpend_operand`], issued by
//! `exit::signal_line` through `Hw::virs_pend`), never list registers.
//!
//! The INTID mapping between the core's GICv3-style numbers and GICv5's
//! typed IDs ([`CoreIntid`]) lets `exit::dispatch_irq` and the rest of the
//! core run unchanged on a GICv5: PPIs 16..31 keep their numbers (the timers
//! are 27 and 30, the PMU 23, in both), SGI n to CPU c is the LPI
//! `ipi_base + 16 c + n`, and core INTID 32 + n is SPI n.
//!
//! Everything here is host-tested; the register effects are tested in
//! `pinfold_drivers::gicv5` against the `pinfold-gicv5model` model.

pub mod frame;
pub mod irses;
pub mod ppitrap;

use crate::vgic::pits::{LPI_BASE, LPI_COUNT};
use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

/// The architected PPIs a guest may own.
pub const PPI_PMU: u32 = 23;
pub const PPI_CNTV: u32 = 27;
pub const PPI_CNTP: u32 = 30;
/// The EL2 physical timer: the hypervisor's own, never a guest's.
pub const PPI_CNTHP: u32 = 26;

/// A set of PPIs 0..127, bit n of word n / 64.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PpiSet(pub [u64; 2]);

impl PpiSet {
    pub const EMPTY: PpiSet = PpiSet([0; 2]);

    pub const fn of(ppis: &[u32]) -> PpiSet {
        let mut w = [0u64; 2];
        let mut i = 0;
        while i < ppis.len() {
            let n = ppis[i];
            w[(n / 64) as usize] |= 1 << (n % 64);
            i += 1;
        }
        PpiSet(w)
    }

    pub const fn contains(self, n: u32) -> bool {
        n < 128 && self.0[(n / 64) as usize] >> (n % 64) & 1 != 0
    }

    pub const fn and_not(self, other: PpiSet) -> PpiSet {
        PpiSet([self.0[0] & !other.0[0], self.0[1] & !other.0[1]])
    }

    pub fn iter(self) -> impl Iterator<Item = u32> {
        (0..128u32).filter(move |&n| self.contains(n))
    }
}

/// What a vCPU's PPIs become on a GICv5 host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PpiPlan {
    /// Direct virtual interrupts (ICH_PPI_DVIR): the physical pending
    /// state is the virtual one while the vCPU is resident, no exit.
    pub dvi: PpiSet,
    /// What the guest may see; every other implemented PPI is hidden
    /// (RAZ/WI to the guest: its ICC_PPI_* accesses trapped and emulated,
    /// [`ppitrap`]; ICH_PPI_HVIR on the model only).
    pub visible: PpiSet,
}

impl PpiPlan {
    /// A vCPU's plan: it sees its EL1 timers (and the PMU's interrupt if
    /// the partition has the PMU); a vCPU pinned to its CPU gets those as
    /// DVI (nobody else's timer state ever lives on that CPU). A vCPU that
    /// shares its CPU keeps them emulated (the hypervisor writes
    /// ICH_PPI_PENDR), since the physical PPI's state belongs to whoever
    /// runs there.
    pub fn for_vcpu(pinned: bool, pmu: bool) -> PpiPlan {
        let visible = if pmu {
            PpiSet::of(&[PPI_CNTV, PPI_CNTP, PPI_PMU])
        } else {
            PpiSet::of(&[PPI_CNTV, PPI_CNTP])
        };
        PpiPlan {
            dvi: if pinned { visible } else { PpiSet::EMPTY },
            visible,
        }
    }
}

/// A vCPU's virtual CPU interface state while it is not resident: what
/// put saves from and load restores into ICH_*_EL2. Plain data in the
/// vCPU's own per-CPU state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VPpiContext {
    pub enabler: [u64; 2],
    pub pendr: [u64; 2],
    pub activer: [u64; 2],
    pub priorityr: [u64; 16],
    pub vmcr: u64,
    pub apr: u64,
}

/// A GIC system instruction a guest executes in its own (virtual)
/// interrupt domain (IHI 0101): the CDxx commands naming an interrupt, the
/// priority drop, and the two acknowledges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GicInsn {
    /// GICR CDIA: acknowledge.
    Cdia,
    /// GICR CDNMIA: acknowledge an NMI.
    Cdnmia,
    /// GIC CDEOI: priority drop.
    Cdeoi,
    Cden,
    Cddis,
    Cdpri,
    Cdaff,
    Cdpend,
    Cdrcfg,
    Cdhm,
    Cddi,
}

impl GicInsn {
    pub const ALL: [GicInsn; 11] = [
        GicInsn::Cdia,
        GicInsn::Cdnmia,
        GicInsn::Cdeoi,
        GicInsn::Cden,
        GicInsn::Cddis,
        GicInsn::Cdpri,
        GicInsn::Cdaff,
        GicInsn::Cdpend,
        GicInsn::Cdrcfg,
        GicInsn::Cdhm,
        GicInsn::Cddi,
    ];

    /// Whether the instruction names an interrupt (and so, for an SPI or
    /// LPI, is a command to the IRS); the others act on the vCPU's own
    /// virtual CPU interface only.
    pub const fn names_an_interrupt(self) -> bool {
        !matches!(self, GicInsn::Cdia | GicInsn::Cdnmia | GicInsn::Cdeoi)
    }
}

/// The GIC system instructions a GICv5 guest executes without a trap (the
/// driver writes them as ICH_HFGITR_EL2 on load; a trapped one reaches the
/// core as an unknown system register access: counted against the
/// partition, UNDEFINED injected).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UntrappedInsns(u16);

impl UntrappedInsns {
    pub const NONE: UntrappedInsns = UntrappedInsns(0);

    pub const fn contains(self, insn: GicInsn) -> bool {
        self.0 >> insn as u32 & 1 != 0
    }

    const fn with(self, insn: GicInsn) -> UntrappedInsns {
        UntrappedInsns(self.0 | 1 << insn as u32)
    }

    /// What a vCPU of a GICv5 partition may execute untrapped. With its
    /// VM in the vIRS (`virs`, `plan_virs`) everything: a CDxx naming a
    /// PPI reaches its own virtual PPIs (the hidden ones RAZ/WI, HVIR),
    /// one naming an SPI or LPI reaches only the VM in ICH_CONTEXTR_EL2.VM
    /// (its own; a vPE or ID it lacks is an IRS software error counted
    /// against it, `attribute_swerr`), and the acknowledges and priority drop
    /// act on its own virtual CPU interface: a trap would buy no isolation
    /// and cost an exit per interrupt. Without a VM (a partition the boot
    /// did not plan into the vIRS) only what names no interrupt: its
    /// CDxx would be commands to the shared IRS for a VM that is not
    /// valid, each leaving a software error record in the one register
    /// every partition's errors share.
    pub const fn for_vcpu(virs: bool) -> UntrappedInsns {
        let mut set = UntrappedInsns::NONE;
        let mut i = 0;
        while i < GicInsn::ALL.len() {
            let insn = GicInsn::ALL[i];
            if virs || !insn.names_an_interrupt() {
                set = set.with(insn);
            }
            i += 1;
        }
        set
    }
}

/// What vCPU load and put do with a vCPU's virtual interrupt interface,
/// decided from the partition's interface (`Partition::gic`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VcpuSwitch {
    /// The GICv3 virtual interface (list registers, ICH_HCR_EL2.En). On a
    /// GICv5 host that is FEAT_GCIE_LEGACY's GICv3-compatible interface:
    /// the platform has the driver set ICH_VCTLR_EL2.V3 for the vCPU
    /// before its GICv3 state is restored (ICH_VMCR_EL2's layout follows
    /// V3) and clear it on put, both whenever the CPU has a GICv5 half; on
    /// a GICv3 host it has none and there is no ICH_VCTLR_EL2 to write.
    ListRegisters,
    /// The native GICv5 virtual interface: the driver's `vcpu_load` /
    /// `vcpu_put` with this plan (the vCPU is pinned: its timers and, with
    /// the PMU, PMUIRQ as DVI), as vPE `vpe` of VM `vm` (partition i = VM
    /// i, vCPU n = vPE n, as `plan_virs` numbers them), executing `insns`
    /// untrapped.
    Gicv5 {
        plan: PpiPlan,
        vm: u16,
        vpe: u16,
        insns: UntrappedInsns,
    },
}

impl VcpuSwitch {
    /// The switch of vCPU `vcpu` of partition `partition`, whose interface
    /// is `iface`; `virs`: the partition's VM is in the vIRS. A GICv5
    /// vCPU's ICH_VCTLR_EL2 is En only (V3 = 0: the driver's `vcpu_load`).
    pub fn for_vcpu(
        iface: GicInterface,
        pmu: bool,
        virs: bool,
        partition: usize,
        vcpu: usize,
    ) -> VcpuSwitch {
        match iface {
            GicInterface::V3 => VcpuSwitch::ListRegisters,
            GicInterface::V5 => VcpuSwitch::Gicv5 {
                plan: PpiPlan::for_vcpu(true, pmu),
                vm: partition as u16,
                vpe: vcpu as u16,
                insns: UntrappedInsns::for_vcpu(virs),
            },
        }
    }
}

/// Which of a vCPU's pass-through PPIs (`owned`: a bitmask by INTID, its
/// EL1 timers and, with the PMU, PMUIRQ) the core's GICv3 emulation
/// mirrors onto the physical PPI: the emulated redistributor's enable,
/// pending and active of those PPIs written to this CPU's own PPI state,
/// and a firing forwarded HW-linked through a list register
/// (`exit::timer_ppi`). With the GICv3 interface (also a GICv5 host's
/// GICv3-compatible one) all of them. With the GICv5 interface none: its
/// timers are DVI (`PpiPlan::for_vcpu`), the physical pending state *is*
/// the guest's while it is resident and the host copy stays masked, so a
/// mirror would unmask that copy (a second, host-side delivery of the same
/// timer) and a forward would inject it twice; a firing that still
/// reaches EL2 (the vCPU not resident) is only ended there.
pub const fn mirrored_ppis(iface: GicInterface, owned: u32) -> u32 {
    match iface {
        GicInterface::V3 => owned,
        GicInterface::V5 => 0,
    }
}

/// The virtual interrupt controller a partition gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GicInterface {
    /// The emulated GICv3 (list registers); on a GICv5 host this is the
    /// FEAT_GCIE_LEGACY interface (ICH_VCTLR_EL2.V3 = 1).
    V3,
    /// A native virtual GICv5 CPU interface.
    V5,
}

impl GicInterface {
    pub const fn name(self) -> &'static str {
        match self {
            GicInterface::V3 => "gicv3",
            GicInterface::V5 => "gicv5",
        }
    }
}

/// A plan's request for a partition's interrupt controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GicRequest {
    /// The host's native kind (GICv5 on a GICv5 host, else GICv3).
    #[default]
    Auto,
    V3,
    V5,
}

/// What the host's GIC offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HostGicv5 {
    /// An IRS was described (DT "arm,gic-v5-irs" / MADT GICv5 IRS).
    pub irs: bool,
    /// IRS_IDR2.LPI: LPIs (IPIs are LPIs on GICv5).
    pub lpis: bool,
    /// IRS_IDR0.VIRT: virtualisation (vPEs, the ICH_* interface).
    pub virt: bool,
    /// ICC_IDR0_EL1.GCIE_LEGACY: the GICv3-compatible virtual interface.
    pub gcie_legacy: bool,
    /// Implemented PPIs (probed by writing ICH_PPI_ENABLER all ones).
    pub ppis: PpiSet,
}

/// The GICv5 features Pinfold cannot run without, each named: bit i set
/// = the i-th of [`REQUIRED`] is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MissingFeatures(pub u8);

impl MissingFeatures {
    /// The missing features' names, in [`REQUIRED`] order.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        REQUIRED
            .iter()
            .enumerate()
            .filter(move |(i, _)| self.0 >> i & 1 != 0)
            .map(|(_, (name, _, _))| *name)
    }
}

impl fmt::Display for MissingFeatures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "GICv5 host lacks what Pinfold needs: ")?;
        for (i, m) in self.names().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{m}")?;
        }
        Ok(())
    }
}

/// Where the boot learns whether a host has a feature: from the host
/// description (DT / ACPI) before anything is touched, or only from the
/// hardware (IRS_IDR*, ICC_IDR0_EL1, the PPI probe) once the IRS is mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Known {
    Described,
    Probed,
}

/// A required feature: its name, where it is known from, and whether a
/// host has it.
pub type Required = (&'static str, Known, fn(&HostGicv5) -> bool);

/// What a GICv5 host must have, each with its name.
pub const REQUIRED: [Required; 6] = [
    ("an IRS (arm,gic-v5-irs)", Known::Described, |h| h.irs),
    ("LPIs (IRS_IDR2.LPI, for IPIs)", Known::Probed, |h| h.lpis),
    ("virtualisation (IRS_IDR0.VIRT)", Known::Probed, |h| h.virt),
    ("the EL1 virtual timer PPI 27", Known::Described, |h| {
        h.ppis.contains(PPI_CNTV)
    }),
    ("the EL1 physical timer PPI 30", Known::Described, |h| {
        h.ppis.contains(PPI_CNTP)
    }),
    ("the EL2 physical timer PPI 26", Known::Described, |h| {
        h.ppis.contains(PPI_CNTHP)
    }),
];

fn missing(h: &HostGicv5, only_described: bool) -> Result<(), MissingFeatures> {
    let mut missing = 0u8;
    for (i, (_, known, has)) in REQUIRED.iter().enumerate() {
        if (!only_described || *known == Known::Described) && !has(h) {
            missing |= 1 << i;
        }
    }
    if missing == 0 {
        Ok(())
    } else {
        Err(MissingFeatures(missing))
    }
}

/// Whether the host GICv5 has what Pinfold needs; if not, every missing
/// feature, by name, for the boot message. The platform calls it once the
/// IRS registers are read and the PPIs probed.
pub fn check_host(h: &HostGicv5) -> Result<(), MissingFeatures> {
    missing(h, false)
}

/// The same check over what the host description alone can tell (the
/// IRS, the timer PPIs the timer node names): the host description
/// parsers refuse a GICv5 host failing it, before the platform touches
/// the GIC. What only the registers tell is checked by [`check_host`].
pub fn check_described(h: &HostGicv5) -> Result<(), MissingFeatures> {
    missing(h, true)
}

impl HostGicv5 {
    /// What the host description says: an IRS or not, and the PPIs it
    /// names (the timer node's); LPIs, virtualisation, GCIE_LEGACY and the
    /// implemented PPIs are unknown (false, empty) until the platform reads
    /// the hardware.
    pub fn described(irs: bool, ppis: PpiSet) -> HostGicv5 {
        HostGicv5 {
            irs,
            ppis,
            ..HostGicv5::default()
        }
    }
}

/// The interface a partition gets, or why it cannot have what it asked.
pub fn choose_interface(
    request: GicRequest,
    host_v5: Option<&HostGicv5>,
) -> Result<GicInterface, &'static str> {
    match (request, host_v5) {
        (GicRequest::Auto | GicRequest::V3, None) => Ok(GicInterface::V3),
        (GicRequest::V5, None) => Err("gic = \"v5\" needs a GICv5 host; this host has a GICv3"),
        (GicRequest::Auto | GicRequest::V5, Some(_)) => Ok(GicInterface::V5),
        (GicRequest::V3, Some(h)) if h.gcie_legacy => Ok(GicInterface::V3),
        (GicRequest::V3, Some(_)) => Err(
            "gic = \"v3\" on a GICv5 host needs FEAT_GCIE_LEGACY (ICC_IDR0_EL1.GCIE_LEGACY), which this host lacks",
        ),
    }
}

/// The GICv5 SPIs the core has numbers for: SPI n is core INTID 32 + n
/// below 1020, GICv3's SPI range (the core's SPI tables are that size).
/// A GICv5 SPI at or beyond this is not the core's: the host DT parser
/// refuses it in a specifier and the driver's `ack` ends it at EL2.
pub const CORE_SPIS: u32 = 988;

/// A core INTID (GICv3 numbering) in GICv5 terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoreIntid {
    /// SGI n: an LPI on GICv5.
    Sgi(u32),
    Ppi(u32),
    Spi(u32),
    /// A device event's LPI: core INTID `pits::LPI_BASE + n` (the GICv3
    /// LPI the core's `LpiPool` hands out and `LpiRoutes` routes) is the
    /// MSI pool's LPI n, the physical LPI `IrsLayout::msi_base + n`
    /// ([`IrsLayout::msi_lpi`]).
    Lpi(u32),
}

impl CoreIntid {
    pub const fn from_core(intid: u32) -> CoreIntid {
        match intid {
            0..=15 => CoreIntid::Sgi(intid),
            16..=31 => CoreIntid::Ppi(intid),
            LPI_BASE.. => CoreIntid::Lpi(intid - LPI_BASE),
            _ => CoreIntid::Spi(intid - 32),
        }
    }
}

/// GICv5 interrupt types, as the host DT binding's first specifier cell
/// and an ACPI GSIV's bits [31:29] give them (IHI 0101's INTID.Type: the
/// same values GIC CDxx operands carry).
pub const INTID_TYPE_PPI: u32 = 1;
pub const INTID_TYPE_SPI: u32 = 3;

/// A GICv5 interrupt (its type and ID) as the core's GICv3-style INTID,
/// or None when the core has no number for it: PPIs 16..31 keep their
/// numbers (the timers, the PMU and the maintenance PPI are architected
/// there), SPI n is 32 + n below [`CORE_SPIS`]. Other PPIs, SPIs, LPIs
/// and other types (an ACPI GSIV's IWB wires, type 7) have none. The
/// host DT parser and the ACPI parser both number interrupts with it.
pub const fn core_intid(kind: u32, id: u32) -> Option<u32> {
    match (kind, id) {
        (INTID_TYPE_PPI, 16..=31) => Some(id),
        (INTID_TYPE_SPI, n) if n < CORE_SPIS => Some(32 + n),
        _ => None,
    }
}

/// GIC VDPEND's operand fields (FreeBSD's `gicv5reg.h`, the only source
/// giving them; binutils and FreeBSD agree on the encoding, the CD* one
/// with op1 = 4): PENDING [63], VM [47:32], TYPE [31:29] (LPI 2, SPI 3),
/// ID [23:0].
pub const VDPEND_PENDING: u64 = 1 << 63;
pub const VDPEND_VM_SHIFT: u32 = 32;

/// The GIC VDPEND operand that makes the interrupt line `intid` (a core
/// INTID) of one of a `gicv5` partition's emulated devices pending
/// (`level` high) or not pending in its VM `vm`, or None when `intid` is
/// not an emulated device's.
///
/// The emulated devices keep the INTIDs the guest DT gives them on every
/// interface (`pinfold_vboard::GUEST_EMULATED_SPIS`: the PL011's 33, the
/// watchdog's 92, the PL061's 93, written `<3 (INTID - 32) 4>` in a
/// GICv5 guest DT), so in the VM they are virtual SPIs 1, 60 and 61: inside
/// the VM's virtual SPI range (`frame::vm_spi_id_bits` covers
/// `GUEST_SPI_COUNT`), and never one of the partition's physical SPIs
/// assigned to the VM (a plan may not pass those INTIDs through,
/// vm-configs' rules), so a VDPEND never touches a wire's interrupt. Only
/// these are accepted: the VDPEND names the partition's own VM and one of
/// its emulated SPIs, nothing else.
///
/// A level line is given as its edges: high sets the pending latch, low
/// clears it (as GICv3's distributor is given `set_emulated_level`); the
/// guest's acknowledge clears the latch, so a line still high after it is
/// pending again only at its next rising edge (the VM's virtual SPI has no
/// line to hold, and EL2 sees no end of interrupt).
pub fn vdpend_operand(vm: u16, intid: u32, level: bool) -> Option<u64> {
    if !pinfold_vboard::GUEST_EMULATED_SPIS.contains(&intid) {
        return None;
    }
    let CoreIntid::Spi(id) = CoreIntid::from_core(intid) else {
        return None;
    };
    let pending = if level { VDPEND_PENDING } else { 0 };
    Some(
        pending
            | u64::from(vm) << VDPEND_VM_SHIFT
            | u64::from(INTID_TYPE_SPI) << 29
            | u64::from(id & 0xff_ffff),
    )
}

/// The LPI that carries SGI `sgi` to CPU `cpu`.
pub const fn ipi_lpi(ipi_base: u32, cpu: u32, sgi: u32) -> u32 {
    ipi_base + cpu * 16 + sgi
}

// ---- the IRS's physical LPIs and tables ---------------------------------------

/// The fewest LPI ID bits the hypervisor gives the IST (16384 LPIs, a
/// 64 KiB linear IST): room beyond the IPIs and doorbells a small host
/// needs, and the IST stays one 64 KiB-aligned block.
pub const MIN_LPI_ID_BITS: u32 = 14;
/// The widest LPI ID GICv5 has (IRS_IDR2.ID_BITS up to 24).
pub const MAX_LPI_ID_BITS: u32 = 24;

/// The physical LPIs of a GICv5 host and the IRS tables that hold them,
/// decided from the CPU count before partitions are placed (the platform
/// takes `region` bytes of host RAM aligned to `align`, like the GICv3
/// ITS's tables): each CPU's 16 IPIs (the core's SGIs, `ipi_lpi`), then
/// one doorbell per CPU (every vCPU is pinned to its own CPU, so there are
/// never more vCPUs than CPUs), then the pool of LPIs device events
/// (MSIs through the GICv5 ITS) are mapped to, `pits::LPI_COUNT` of them
/// as the GICv3 ITS's pool (core INTIDs `LPI_BASE ..`, [`CoreIntid::Lpi`]),
/// in a linear IST of 4 bytes an LPI at the start of the region; the vIRS's VM table (32 bytes a VM, a VM ID for
/// each possible partition: never more partitions than CPUs) after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IrsLayout {
    pub ipi_base: u32,
    /// Doorbell LPIs: `doorbell_base ..  doorbell_base + doorbells`.
    pub doorbell_base: u32,
    pub doorbells: u32,
    /// Device-event LPIs: `msi_base .. msi_base + msi_lpis`.
    pub msi_base: u32,
    pub msi_lpis: u32,
    pub lpi_id_bits: u32,
    pub ist_bytes: u64,
    pub vm_id_bits: u8,
    /// Offset of the VM table in the region.
    pub vmt_offset: u64,
    pub vmt_bytes: u64,
    pub region: u64,
    pub align: u64,
}

impl IrsLayout {
    /// The layout for `cpus` CPUs on an IRS with every LPI ID bit
    /// (`MAX_LPI_ID_BITS`): the whole MSI pool.
    pub fn for_cpus(cpus: usize) -> IrsLayout {
        IrsLayout::for_cpus_within(cpus, MAX_LPI_ID_BITS)
    }

    /// The layout for `cpus` CPUs on an IRS whose IRS_IDR2.ID_BITS is
    /// `have_bits`: the IPIs and doorbells first, then as much of the MSI
    /// pool (at most `LPI_COUNT`) as fits below 2^`have_bits`, so a host
    /// whose IST is just big enough for the IPIs and doorbells still boots
    /// (with fewer, or no, device-event LPIs) instead of being refused for
    /// the pool. When even the IPIs and doorbells do not fit, the layout
    /// asks for more bits than the IRS has and the driver refuses it
    /// (`IrsError::TooFewLpiBits`), naming both.
    pub fn for_cpus_within(cpus: usize, have_bits: u32) -> IrsLayout {
        let cpus = cpus.max(1) as u32;
        let ipi_base = 0;
        let doorbell_base = ipi_base + 16 * cpus;
        let msi_base = doorbell_base + cpus;
        let room = 1u64
            .checked_shl(have_bits.min(MAX_LPI_ID_BITS))
            .unwrap_or(0)
            .saturating_sub(u64::from(msi_base));
        let msi_lpis = (LPI_COUNT as u64).min(room) as u32;
        let lpis = msi_base + msi_lpis;
        let lpi_id_bits = u32::from(id_bits(lpis)).max(MIN_LPI_ID_BITS);
        let ist_bytes = 4u64 << lpi_id_bits;
        let vm_id_bits = id_bits(cpus);
        let vmt_bytes = 32u64 << vm_id_bits;
        let vmt_offset = ist_bytes;
        IrsLayout {
            ipi_base,
            doorbell_base,
            doorbells: cpus,
            msi_base,
            msi_lpis,
            lpi_id_bits,
            ist_bytes,
            vm_id_bits,
            vmt_offset,
            vmt_bytes,
            region: (vmt_offset + vmt_bytes).next_multiple_of(0x1_0000),
            align: ist_bytes,
        }
    }

    /// The doorbell LPIs, for `Gicv5Cpu::set_doorbells`.
    pub fn doorbell_lpis(&self) -> core::ops::Range<u32> {
        self.doorbell_base..self.doorbell_base + self.doorbells
    }

    /// The physical LPI of core INTID `intid` when it is one of the MSI
    /// pool's ([`CoreIntid::Lpi`]), for the driver's CDxx and the ITT.
    pub fn msi_lpi(&self, intid: u32) -> Option<u32> {
        match CoreIntid::from_core(intid) {
            CoreIntid::Lpi(n) if n < self.msi_lpis => Some(self.msi_base + n),
            _ => None,
        }
    }

    /// The core INTID of physical LPI `lpi` when it is one of the MSI
    /// pool's: what the driver's acknowledge gives the exit path, which
    /// routes it as a GICv3 LPI (`LpiRoutes`).
    pub fn msi_core_intid(&self, lpi: u32) -> Option<u32> {
        msi_pool_core_intid(self.msi_base..self.msi_base + self.msi_lpis, lpi)
    }

    /// CPU `cpu`'s doorbell LPI (the vCPU pinned there is woken by it), if
    /// the layout has one for it.
    pub fn doorbell_lpi(&self, cpu: usize) -> Option<u32> {
        let lpi = self.doorbell_base.checked_add(u32::try_from(cpu).ok()?)?;
        self.doorbell_lpis().contains(&lpi).then_some(lpi)
    }
}

/// The core INTID of physical LPI `lpi` in the MSI pool `pool`
/// (`IrsLayout::msi_core_intid`, and the driver's acknowledge, which keeps
/// only the pool's range): LPI `pool.start + n` is core INTID
/// `LPI_BASE + n`.
pub fn msi_pool_core_intid(pool: core::ops::Range<u32>, lpi: u32) -> Option<u32> {
    pool.contains(&lpi).then(|| LPI_BASE + (lpi - pool.start))
}

// ---- the vIRS: virtual SPIs and IPIs ----------------------------------------

/// Where one GICv5 partition's vIRS tables live (physical addresses the
/// platform allocated, zeroed): the VM descriptor, the vPE table (8 bytes a
/// vPE), the vPE descriptors (32 bytes each, consecutive), and the virtual
/// LPI and SPI ISTs (4 bytes an interrupt, linear).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VmTables {
    pub vmd: u64,
    pub vpet: u64,
    pub vpeds: u64,
    pub lpi_ist: u64,
    pub spi_ist: u64,
}

/// A partition whose interface is GICv5, as the vIRS sees it.
#[derive(Debug, Clone, Copy)]
pub struct VmSpec<'a> {
    /// Its VM ID: the partition's index (what the vCPU load puts in
    /// ICH_CONTEXTR_EL2.VM, `VcpuSwitch::Gicv5`).
    pub vm: u16,
    pub partition: &'a str,
    pub vcpus: u16,
    /// The partition's own SPIs (core INTIDs, 32 + SPI ID), from its plan:
    /// each becomes a virtual SPI of its VM with the same SPI ID.
    pub spis: &'a [u32],
    /// Virtual LPI ID bits (the guest's IPIs and MSIs are virtual LPIs).
    pub lpi_id_bits: u8,
    /// Virtual SPI ID bits: the VM's SPI IDs are 0..2^bits.
    pub spi_id_bits: u8,
    /// Each vCPU's doorbell, by vCPU index.
    pub doorbells: &'a [Doorbell],
    pub tables: VmTables,
}

/// A vCPU's doorbell: the physical LPI the vIRS makes pending when an
/// interrupt arrives for the vCPU while it is not resident, targeted at
/// the CPU the vCPU is pinned to (MPIDR).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Doorbell {
    pub lpi: u32,
    pub mpidr: u64,
}

/// One step of vIRS programming, decided here and applied by the driver
/// (`pinfold_drivers::gicv5::Gicv5Irs::apply_virs`), which knows the
/// register offsets and table encodings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VirsOp {
    /// Fill VM `vm`'s VM table entry (not yet valid).
    WriteVmte {
        vm: u16,
        tables: VmTables,
        vpe_id_bits: u8,
        lpi_id_bits: u8,
        spi_id_bits: u8,
    },
    /// Fill vPE `vpe`'s entry of the vPE table at `vpet` with its
    /// descriptor address.
    WriteVpete {
        vm: u16,
        vpe: u16,
        vpet: u64,
        vped: u64,
    },
    /// IRS_VMAP_VMR: the VM becomes valid.
    MapVm { vm: u16 },
    /// IRS_VMAP_VISTR: its virtual LPI (`spi` false) or SPI IST is valid.
    MapVist { vm: u16, spi: bool },
    /// IRS_VMAP_VPER: the vPE becomes valid.
    MapVpe { vm: u16, vpe: u16 },
    /// IRS_VPE_SELR + IRS_VPE_CR0.DPS (targeted routing only) +
    /// IRS_VPE_DBR: the vPE's doorbell is `db`, armed.
    ArmDoorbell { vm: u16, vpe: u16, db: Doorbell },
    /// IRS_SPI_SELR + IRS_SPI_VMR: physical SPI `spi` is the VM's virtual
    /// SPI `spi`.
    AssignSpi { spi: u32, vm: u16 },
    /// IRS_SPI_SELR + IRS_SPI_VMR with VIRT = 0: physical SPI `spi` is no
    /// VM's any more, a physical SPI again.
    ReleaseSpi { spi: u32 },
    /// IRS_VMAP_VMR with U: VM `vm` (its vPEs and virtual ISTs with it) is
    /// no longer valid.
    UnmapVm { vm: u16 },
}

/// The steps that take a destroyed partition's VM out of the vIRS
/// ([`release_virs`]): each of its own SPIs (core INTIDs) is first given
/// back to the physical domain, so a partition later given one (a `gicv3`
/// one: a `gicv5` partition is boot-plan only) receives it, then the VM is
/// unmapped, so nothing more is delivered to it and its vPEs' doorbells
/// cannot ring. Its tables' memory stays reserved (taken at boot, outside
/// any partition's RAM, and the IRS may cache what it read of them).
pub fn release_virs(vm: u16, spis: &[u32]) -> Vec<VirsOp> {
    spis.iter()
        .filter_map(|&i| i.checked_sub(32))
        .map(|spi| VirsOp::ReleaseSpi { spi })
        .chain(core::iter::once(VirsOp::UnmapVm { vm }))
        .collect()
}

/// Why the vIRS plan was refused; every variant names what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VirsError {
    /// A VM ID (partition index) beyond IRS_VMT_CFGR.VM_ID_BITS, or given
    /// twice.
    BadVm {
        partition: String,
        vm: u16,
        max: usize,
    },
    TooManyVcpus {
        partition: String,
        vcpus: u16,
        max: u32,
    },
    /// An SPI the plan gives to two partitions.
    SpiTwice {
        spi: u32,
        first: String,
        second: String,
    },
    /// Not an SPI (core INTID below 32), beyond the host's SPIs, or beyond
    /// the VM's virtual SPI range.
    BadSpi { partition: String, intid: u32 },
    /// A vCPU without a doorbell LPI.
    NoDoorbell { partition: String, vcpu: u16 },
    /// Two vCPUs given the same doorbell LPI (a doorbell must name one).
    DoorbellTwice { lpi: u32 },
}

impl fmt::Display for VirsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            VirsError::BadVm { partition, vm, max } => write!(
                f,
                "partition {partition}: VM ID {vm} is taken or beyond the IRS's {max}"
            ),
            VirsError::TooManyVcpus {
                partition,
                vcpus,
                max,
            } => write!(
                f,
                "partition {partition}: {vcpus} vCPUs, the IRS has vPE IDs for {max}"
            ),
            VirsError::SpiTwice { spi, first, second } => {
                write!(f, "SPI {spi} is given to both {first} and {second}")
            }
            VirsError::BadSpi { partition, intid } => {
                write!(
                    f,
                    "partition {partition}: interrupt {intid} is not an SPI it can have"
                )
            }
            VirsError::NoDoorbell { partition, vcpu } => {
                write!(f, "partition {partition}: vCPU {vcpu} has no doorbell LPI")
            }
            VirsError::DoorbellTwice { lpi } => {
                write!(f, "doorbell LPI {lpi} is given to two vCPUs")
            }
        }
    }
}

/// What the host IRS offers the vIRS (IRS_IDR3.VM_ID_BITS,
/// IRS_IDR4.VPE_ID_BITS, IRS_IDR5 SPI count).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VirsCaps {
    pub vm_id_bits: u8,
    pub vpe_id_bits: u8,
    pub spis: u32,
}

/// The smallest ID width that covers `n` IDs (at least 1 bit).
const fn id_bits(n: u32) -> u8 {
    let mut b = 1;
    while (1u64 << b) < n as u64 {
        b += 1;
    }
    b
}

/// Plan the vIRS for every GICv5 partition: partition i is VM i; its vPE
/// n is vCPU n (the guest reads it as its ICC_IAFFIDR_EL1 and targets it
/// with GIC CDAFF); its own SPIs are assigned to it and no other; each
/// vCPU's doorbell armed so an interrupt for a vCPU that is not resident
/// wakes it. The VM ID the hypervisor puts in ICH_CONTEXTR_EL2.VM on
/// load is what confines a guest's GIC CDxx to its own VM: a guest cannot
/// name another VM at all.
pub fn plan_virs(caps: &VirsCaps, vms: &[VmSpec]) -> Result<Vec<VirsOp>, VirsError> {
    let max_vms = 1usize << caps.vm_id_bits;
    let mut owner: BTreeMap<u32, &str> = BTreeMap::new();
    let mut doorbells: BTreeMap<u32, ()> = BTreeMap::new();
    let mut ids: BTreeMap<u16, ()> = BTreeMap::new();
    let mut ops = Vec::new();
    for spec in vms {
        let vm = spec.vm;
        if usize::from(vm) >= max_vms || ids.insert(vm, ()).is_some() {
            return Err(VirsError::BadVm {
                partition: spec.partition.into(),
                vm,
                max: max_vms,
            });
        }
        let max_vpes = 1u32 << caps.vpe_id_bits;
        if spec.vcpus == 0 || u32::from(spec.vcpus) > max_vpes {
            return Err(VirsError::TooManyVcpus {
                partition: spec.partition.into(),
                vcpus: spec.vcpus,
                max: max_vpes,
            });
        }
        for &intid in spec.spis {
            let bad = || VirsError::BadSpi {
                partition: spec.partition.into(),
                intid,
            };
            let CoreIntid::Spi(n) = CoreIntid::from_core(intid) else {
                return Err(bad());
            };
            if n >= caps.spis || u64::from(n) >= 1u64 << spec.spi_id_bits {
                return Err(bad());
            }
            if let Some(first) = owner.insert(n, spec.partition) {
                return Err(VirsError::SpiTwice {
                    spi: n,
                    first: first.into(),
                    second: spec.partition.into(),
                });
            }
        }
        ops.push(VirsOp::WriteVmte {
            vm,
            tables: spec.tables,
            vpe_id_bits: id_bits(u32::from(spec.vcpus)),
            lpi_id_bits: spec.lpi_id_bits,
            spi_id_bits: spec.spi_id_bits,
        });
        for vpe in 0..spec.vcpus {
            ops.push(VirsOp::WriteVpete {
                vm,
                vpe,
                vpet: spec.tables.vpet,
                vped: spec.tables.vpeds + u64::from(vpe) * 32,
            });
        }
        ops.push(VirsOp::MapVm { vm });
        ops.push(VirsOp::MapVist { vm, spi: false });
        ops.push(VirsOp::MapVist { vm, spi: true });
        for vpe in 0..spec.vcpus {
            ops.push(VirsOp::MapVpe { vm, vpe });
            let Some(&db) = spec.doorbells.get(vpe as usize) else {
                return Err(VirsError::NoDoorbell {
                    partition: spec.partition.into(),
                    vcpu: vpe,
                });
            };
            if doorbells.insert(db.lpi, ()).is_some() {
                return Err(VirsError::DoorbellTwice { lpi: db.lpi });
            }
            ops.push(VirsOp::ArmDoorbell { vm, vpe, db });
        }
        for &intid in spec.spis {
            ops.push(VirsOp::AssignSpi {
                spi: intid - 32,
                vm,
            });
        }
    }
    Ok(ops)
}

// ---- the vIRS at boot ------------------------------------------------------

/// The virtual LPI ID bits each GICv5 partition's VM gets (its guest's
/// IPIs and MSIs): as many as the host's own smallest IST.
pub const VM_LPI_ID_BITS: u8 = MIN_LPI_ID_BITS as u8;

/// How many bytes the boot gives a VM descriptor. Its real size is the
/// IRS's (IRS_IDR3.VMD_SZ), which neither the driver nor the model reads
/// yet; a 4 KiB page is more than any the sources show.
pub const VMD_BYTES: u64 = 0x1000;

/// A GICv5 partition as the boot's vIRS plan takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VirsMember {
    /// Its index, which is its VM ID.
    pub index: usize,
    pub name: String,
    /// Each vCPU's CPU, by vCPU: the core's CPU index (its doorbell LPI,
    /// `IrsLayout::doorbell_lpis`) and MPIDR (where the doorbell goes).
    pub cpus: Vec<(usize, u64)>,
    /// Its own SPIs (core INTIDs), each with the plan field it comes from
    /// (`devices`, `pci_host_bridge`, `pci`).
    pub spis: Vec<(u32, &'static str)>,
}

/// What the platform applies at boot, in order: zero `memory` (the VMs'
/// tables, taken from free RAM), then the IRS is given `ops`
/// (`Gicv5Irs::apply_virs`) after its VM table (`init_virs`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VirsBoot {
    /// (physical address, bytes) of each VM's tables.
    pub memory: Vec<(u64, u64)>,
    /// The partitions (indices) whose VM is in the vIRS: their guests run
    /// with `UntrappedInsns::for_vcpu(true)`.
    pub vms: Vec<usize>,
    pub ops: Vec<VirsOp>,
}

/// A partition the vIRS cannot take, as a plan refusal: the partition,
/// the plan field and why (`partition "alpha": devices: SPI 8 is ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VirsRefusal {
    pub partition: String,
    pub field: &'static str,
    pub reason: String,
}

impl fmt::Display for VirsRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "partition \"{}\": {}: {}",
            self.partition, self.field, self.reason
        )
    }
}

/// The VM ID bits the boot gives the IRS's VM table (IRS_VMT_CFGR) for
/// `members`: enough for the highest partition index among them (the VM
/// table the platform allocated, `IrsLayout::vm_id_bits`, covers every
/// partition index and so any of these); `None` without a GICv5
/// partition, when the vIRS is not set up at all (a host whose IRS has
/// fewer VM ID bits than its CPU count needs still boots its `gicv3`
/// partitions).
pub fn vm_id_bits_for(members: &[VirsMember]) -> Option<u8> {
    let highest = members.iter().map(|m| m.index).max()?;
    Some(id_bits(u32::try_from(highest + 1).unwrap_or(u32::MAX)))
}

/// Where one VM's tables sit in its block of `bytes` (offsets from its
/// base): the VM descriptor, the vPE table (8 bytes for each of
/// 2^VPE_ID_BITS vPEs), the vPE descriptors (32 bytes a vCPU), the
/// virtual LPI and SPI ISTs (4 bytes an interrupt), each 64-byte aligned
/// (the ISTs' address fields start at bit 6).
fn vm_block(vcpus: u16, spi_id_bits: u8) -> ([u64; 5], u64) {
    let up = |v: u64| v.next_multiple_of(64);
    let vpet = VMD_BYTES;
    let vpeds = vpet + up(8 << id_bits(u32::from(vcpus)));
    let lpi_ist = vpeds + up(32 * u64::from(vcpus));
    let spi_ist = lpi_ist + up(4 << VM_LPI_ID_BITS);
    let end = spi_ist + up(4 << spi_id_bits);
    (
        [0, vpet, vpeds, lpi_ist, spi_ist],
        end.next_multiple_of(0x1000),
    )
}

/// The boot's vIRS for the GICv5 partitions `members`: each one's VM is
/// its index, its vCPU n is vPE n with the doorbell LPI of the CPU it is
/// pinned to (`layout`), its own SPIs are its VM's virtual SPIs (the VM's
/// SPI range covers the guest's, `GUEST_SPI_COUNT`, and every SPI it
/// owns), and its tables are taken with `take(bytes, align)` (a 4 KiB
/// aligned block each). Then [`plan_virs`]. A refusal names the
/// partition and the plan field: `gic` (no VM ID or no memory for it),
/// `cpus` (more vCPUs than vPE IDs, a CPU without a doorbell), or the
/// field its SPI comes from.
pub fn plan_boot_virs(
    members: &[VirsMember],
    layout: &IrsLayout,
    caps: &VirsCaps,
    take: &mut dyn FnMut(u64, u64) -> Option<u64>,
) -> Result<VirsBoot, VirsRefusal> {
    let refuse = |m: &VirsMember, field: &'static str, reason: String| VirsRefusal {
        partition: m.name.clone(),
        field,
        reason,
    };
    let mut memory = Vec::new();
    /// What a `VmSpec` borrows, owned here.
    struct Owned {
        vm: u16,
        spis: Vec<u32>,
        doorbells: Vec<Doorbell>,
        tables: VmTables,
        spi_id_bits: u8,
    }
    let mut owned: Vec<Owned> = Vec::new();
    for m in members {
        let vm = u16::try_from(m.index)
            .map_err(|_| refuse(m, "gic", alloc::format!("no VM ID for index {}", m.index)))?;
        let vcpus = u16::try_from(m.cpus.len())
            .map_err(|_| refuse(m, "cpus", "too many vCPUs for a VM".into()))?;
        let mut doorbells = Vec::new();
        for &(cpu, mpidr) in &m.cpus {
            let Some(lpi) = layout.doorbell_lpi(cpu) else {
                return Err(refuse(
                    m,
                    "cpus",
                    alloc::format!("CPU {cpu} has no doorbell LPI"),
                ));
            };
            doorbells.push(Doorbell { lpi, mpidr });
        }
        let spis: Vec<u32> = m.spis.iter().map(|&(i, _)| i).collect();
        let spi_id_bits = frame::vm_spi_id_bits(&spis);
        let (at, bytes) = vm_block(vcpus, spi_id_bits);
        let Some(base) = take(bytes, 0x1000) else {
            return Err(refuse(
                m,
                "gic",
                alloc::format!("no {} KiB of RAM for its vIRS tables", bytes >> 10),
            ));
        };
        memory.push((base, bytes));
        let tables = VmTables {
            vmd: base + at[0],
            vpet: base + at[1],
            vpeds: base + at[2],
            lpi_ist: base + at[3],
            spi_ist: base + at[4],
        };
        owned.push(Owned {
            vm,
            spis,
            doorbells,
            tables,
            spi_id_bits,
        });
    }
    let specs: Vec<VmSpec> = members
        .iter()
        .zip(&owned)
        .map(|(m, o)| VmSpec {
            vm: o.vm,
            partition: &m.name,
            vcpus: m.cpus.len() as u16,
            spis: &o.spis,
            lpi_id_bits: VM_LPI_ID_BITS,
            spi_id_bits: o.spi_id_bits,
            doorbells: &o.doorbells,
            tables: o.tables,
        })
        .collect();
    let ops = plan_virs(caps, &specs).map_err(|e| {
        let by_name = |name: &str| members.iter().find(|m| m.name == name);
        let spi_field = |name: &str, intid: u32| {
            by_name(name)
                .and_then(|m| m.spis.iter().find(|&&(i, _)| i == intid))
                .map_or("devices", |&(_, field)| field)
        };
        let (partition, field) = match &e {
            VirsError::BadVm { partition, .. } => (partition.clone(), "gic"),
            VirsError::TooManyVcpus { partition, .. } | VirsError::NoDoorbell { partition, .. } => {
                (partition.clone(), "cpus")
            }
            VirsError::SpiTwice { spi, second, .. } => {
                (second.clone(), spi_field(second, spi + 32))
            }
            VirsError::BadSpi { partition, intid } => {
                (partition.clone(), spi_field(partition, *intid))
            }
            VirsError::DoorbellTwice { lpi } => (
                members
                    .iter()
                    .rev()
                    .find(|m| {
                        m.cpus
                            .iter()
                            .any(|&(c, _)| layout.doorbell_lpi(c) == Some(*lpi))
                    })
                    .map_or_else(String::new, |m| m.name.clone()),
                "cpus",
            ),
        };
        VirsRefusal {
            partition,
            field,
            reason: alloc::format!("{e}"),
        }
    })?;
    Ok(VirsBoot {
        memory,
        vms: members.iter().map(|m| m.index).collect(),
        ops,
    })
}

/// The vCPU a doorbell taken on a CPU belongs to, as the core sees it
/// when the doorbell arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DoorbellVcpu {
    /// Its VM (the partition index) and vPE (the vCPU index).
    pub vm: u16,
    pub vpe: u16,
    /// It is loaded, so resident, on the CPU that took the doorbell.
    pub loaded_here: bool,
    /// Its PSCI power state.
    pub power: crate::psci::PowerState,
    /// Its partition is running (not stopped, crashed or restarting).
    pub up: bool,
}

/// What a vPE doorbell means for the vCPU it belongs to ([`on_doorbell`]).
///
/// With pinned vCPUs and HCR_EL2.TWI clear (a guest's WFI sleeps at EL1 on
/// its own CPU and a virtual interrupt of the resident vPE wakes it there,
/// as for GICv4.0 direct vLPIs, `vgic::v40`), a vPE is non-resident only
/// between a CPU_ON and the load that follows it, and while its vCPU is
/// off or its partition is down. So there is no WFI-trapped vCPU to
/// resume: the GICv3 and GICv4.0 paths never idle a running vCPU at EL2
/// either, and "waking" is the idle loop's entry on the CPU the doorbell
/// interrupted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DoorbellAction {
    /// Its vCPU is resident here: the IRS delivers to it directly; the
    /// doorbell raced the load. Nothing to do.
    Resident,
    /// Its vCPU is powered on and not yet loaded (a CPU_ON on its way):
    /// the doorbell's interrupt woke this CPU from its idle WFI, the idle
    /// loop enters the vCPU (the interrupt waiting in its VM is delivered
    /// at the load) and its doorbell is re-armed
    /// (`Gicv5Irs::rearm_doorbell`) for the next time it is not resident.
    Wake { vm: u16, vpe: u16 },
    /// Its vCPU is off (PSCI CPU_OFF ends only with CPU_ON) or its
    /// partition is down: not woken, the interrupt stays pending in its VM
    /// for its next residency, and the doorbell is not re-armed, so a
    /// parked vCPU's interrupts do not keep interrupting its CPU.
    Parked { vm: u16, vpe: u16 },
    /// No GICv5 vCPU in the vIRS is pinned to the CPU whose doorbell this
    /// is: the hypervisor's own mistake, logged.
    Unowned,
}

/// Decide what a doorbell taken for `owner` (`None`: no vCPU of a
/// partition in the vIRS is pinned to its CPU) means.
pub const fn on_doorbell(owner: Option<DoorbellVcpu>) -> DoorbellAction {
    use crate::psci::PowerState;
    let Some(v) = owner else {
        return DoorbellAction::Unowned;
    };
    if v.loaded_here {
        return DoorbellAction::Resident;
    }
    match v.power {
        PowerState::On | PowerState::OnPending if v.up => DoorbellAction::Wake {
            vm: v.vm,
            vpe: v.vpe,
        },
        _ => DoorbellAction::Parked {
            vm: v.vm,
            vpe: v.vpe,
        },
    }
}

/// At most this many IRS software error records are drained at one
/// bounded point ([`attribute_swerr`], `System::virs_poll`); the rest
/// wait for the next.
pub const SWERR_DRAIN_MAX: u32 = 32;

/// Whose an IRS software error record is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SwerrOwner {
    /// A guest command of partition `index` (its VM) named something its
    /// VM lacks: that partition's fault.
    Partition { index: usize, fault: VirsFault },
    /// A record about the physical domain, or about a VM no running
    /// `gicv5` partition has: the hypervisor's own, logged.
    Hypervisor { syndrome: u64 },
}

/// Attribute a syndrome (IRS_SWERR_SYNDROMER0) to the partition whose VM
/// caused it: VM ID = partition index, when `gicv5_partition(index)` (a
/// partition with the GICv5 interface is at that index).
pub fn attribute_swerr(syndrome: u64, gicv5_partition: impl Fn(usize) -> bool) -> SwerrOwner {
    match VirsFault::from_syndrome(syndrome) {
        Some(fault) if gicv5_partition(usize::from(fault.vm)) => SwerrOwner::Partition {
            index: usize::from(fault.vm),
            fault,
        },
        _ => SwerrOwner::Hypervisor { syndrome },
    }
}

impl fmt::Display for VirsFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.ty {
            2 => "LPI",
            3 => "SPI",
            _ => "interrupt",
        };
        write!(
            f,
            "IRS software error: a GIC command named virtual {what} {} its VM does not have: ignored",
            self.id
        )
    }
}

/// An IRS software error record (IRS_SWERR_SYNDROMER0: VM_ID [15:0], ID
/// [55:32], TYPE [62:60], VIRTUAL [63]): a guest's command named a vPE,
/// virtual SPI or virtual LPI its VM does not have. The IRS did nothing;
/// the core counts it as that partition's fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VirsFault {
    pub vm: u16,
    /// The INTID TYPE (2 = LPI, 3 = SPI) and ID the guest named.
    pub ty: u8,
    pub id: u32,
}

impl VirsFault {
    /// Decode a syndrome; `None` for a record about the physical domain
    /// (VIRTUAL = 0), which is the hypervisor's own error, not a guest's.
    pub const fn from_syndrome(s: u64) -> Option<VirsFault> {
        if s >> 63 == 0 {
            return None;
        }
        Some(VirsFault {
            vm: (s & 0xffff) as u16,
            ty: (s >> 60 & 7) as u8,
            id: (s >> 32 & 0xff_ffff) as u32,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_released_vm_gives_back_each_of_its_spis_then_is_unmapped() {
        let ops = release_virs(3, &[32 + 6, 33, 32 + 900]);

        assert_eq!(
            ops,
            [
                VirsOp::ReleaseSpi { spi: 6 },
                VirsOp::ReleaseSpi { spi: 1 },
                VirsOp::ReleaseSpi { spi: 900 },
                VirsOp::UnmapVm { vm: 3 },
            ]
        );
    }
    use std::string::ToString;

    #[test]
    fn pinned_vcpu_gets_its_timers_as_dvi_and_sees_nothing_else() {
        let plan = PpiPlan::for_vcpu(true, true);
        assert_eq!(plan.dvi, PpiSet::of(&[23, 27, 30]));
        assert_eq!(plan.visible, plan.dvi);
        assert!(!plan.visible.contains(PPI_CNTHP));
        let shared = PpiPlan::for_vcpu(false, false);
        assert_eq!(shared.dvi, PpiSet::EMPTY);
        assert_eq!(
            shared.visible.iter().collect::<std::vec::Vec<_>>(),
            [27, 30]
        );
    }

    fn good_host() -> HostGicv5 {
        HostGicv5 {
            irs: true,
            lpis: true,
            virt: true,
            gcie_legacy: true,
            ppis: PpiSet([0xffff_ffff, 0]),
        }
    }

    #[test]
    fn a_host_missing_features_is_refused_naming_them() {
        assert_eq!(check_host(&good_host()), Ok(()));
        let no_virt = HostGicv5 {
            virt: false,
            ..good_host()
        };
        let e = check_host(&no_virt).unwrap_err();
        assert_eq!(
            e.to_string(),
            "GICv5 host lacks what Pinfold needs: virtualisation (IRS_IDR0.VIRT)"
        );
        let no_lpi_no_virt = HostGicv5 {
            lpis: false,
            virt: false,
            ..good_host()
        };
        let names: std::vec::Vec<_> = check_host(&no_lpi_no_virt).unwrap_err().names().collect();
        assert_eq!(
            names,
            [
                "LPIs (IRS_IDR2.LPI, for IPIs)",
                "virtualisation (IRS_IDR0.VIRT)"
            ]
        );
    }

    #[test]
    fn the_description_check_names_only_what_a_description_can_tell() {
        // A DT names the IRS and the timer PPIs; LPIs and VIRT are only in
        // the IRS's registers, so a described host is not refused for them.
        let timers = PpiSet::of(&[26, 27, 29, 30]);
        let h = HostGicv5::described(true, timers);
        assert!(!h.lpis && !h.virt);
        assert_eq!(check_described(&h), Ok(()));
        // ... but the full check, once the registers are read, still is.
        assert_eq!(
            check_host(&h)
                .unwrap_err()
                .names()
                .collect::<std::vec::Vec<_>>(),
            [
                "LPIs (IRS_IDR2.LPI, for IPIs)",
                "virtualisation (IRS_IDR0.VIRT)"
            ]
        );
        let e = check_described(&HostGicv5::described(false, PpiSet::of(&[27, 30])));
        assert_eq!(
            e.unwrap_err().to_string(),
            "GICv5 host lacks what Pinfold needs: an IRS (arm,gic-v5-irs), \
             the EL2 physical timer PPI 26"
        );
    }

    #[test]
    fn a_gicv5_partitions_vcpu_is_loaded_with_its_timers_as_dvi() {
        assert_eq!(
            VcpuSwitch::for_vcpu(GicInterface::V3, true, false, 1, 0),
            VcpuSwitch::ListRegisters
        );
        let VcpuSwitch::Gicv5 { plan, vm, vpe, .. } =
            VcpuSwitch::for_vcpu(GicInterface::V5, true, true, 2, 1)
        else {
            panic!("a GICv5 partition is loaded through the GICv5 interface");
        };
        assert_eq!((vm, vpe), (2, 1));
        assert_eq!(plan.dvi, PpiSet::of(&[PPI_PMU, PPI_CNTV, PPI_CNTP]));
        let VcpuSwitch::Gicv5 { plan, .. } =
            VcpuSwitch::for_vcpu(GicInterface::V5, false, true, 0, 0)
        else {
            panic!();
        };
        assert_eq!(plan.dvi, PpiSet::of(&[PPI_CNTV, PPI_CNTP]));
        assert!(!plan.visible.contains(PPI_PMU));
    }

    #[test]
    fn a_guest_with_a_vm_in_the_virs_executes_every_gic_instruction_untrapped() {
        let with = UntrappedInsns::for_vcpu(true);
        for insn in GicInsn::ALL {
            assert!(with.contains(insn), "{insn:?}");
        }
        let VcpuSwitch::Gicv5 { insns, .. } =
            VcpuSwitch::for_vcpu(GicInterface::V5, true, true, 0, 0)
        else {
            panic!();
        };
        assert_eq!(insns, with);
    }

    #[test]
    fn a_guest_without_a_vm_traps_every_instruction_that_names_an_interrupt() {
        let without = UntrappedInsns::for_vcpu(false);
        let untrapped: std::vec::Vec<_> = GicInsn::ALL
            .into_iter()
            .filter(|&i| without.contains(i))
            .collect();
        assert_eq!(
            untrapped,
            [GicInsn::Cdia, GicInsn::Cdnmia, GicInsn::Cdeoi],
            "only what acts on its own CPU interface"
        );
    }

    #[test]
    fn only_the_gicv3_interface_mirrors_the_timer_ppis() {
        let owned = 1 << PPI_CNTV | 1 << PPI_CNTP | 1 << PPI_PMU;
        assert_eq!(mirrored_ppis(GicInterface::V3, owned), owned);
        assert_eq!(mirrored_ppis(GicInterface::V5, owned), 0);
    }

    #[test]
    fn interface_choice_per_partition() {
        let h = good_host();
        assert_eq!(
            choose_interface(GicRequest::Auto, None),
            Ok(GicInterface::V3)
        );
        assert!(choose_interface(GicRequest::V5, None).is_err());
        assert_eq!(
            choose_interface(GicRequest::Auto, Some(&h)),
            Ok(GicInterface::V5)
        );
        assert_eq!(
            choose_interface(GicRequest::V3, Some(&h)),
            Ok(GicInterface::V3)
        );
        let no_legacy = HostGicv5 {
            gcie_legacy: false,
            ..h
        };
        assert!(choose_interface(GicRequest::V3, Some(&no_legacy))
            .unwrap_err()
            .contains("FEAT_GCIE_LEGACY"));
    }

    #[test]
    fn core_intids_map_onto_gicv5_types() {
        assert_eq!(CoreIntid::from_core(3), CoreIntid::Sgi(3));
        assert_eq!(CoreIntid::from_core(27), CoreIntid::Ppi(27));
        assert_eq!(CoreIntid::from_core(40), CoreIntid::Spi(8));
        assert_eq!(CoreIntid::from_core(LPI_BASE + 5), CoreIntid::Lpi(5));
        assert_eq!(ipi_lpi(8192, 1, 2), 8192 + 18);
    }

    #[test]
    fn the_msi_pool_shrinks_to_the_ist_the_irs_has_instead_of_asking_for_more_bits() {
        // 512 CPUs: 8192 IPIs + 512 doorbells, so the whole pool would need
        // 15 ID bits; an IRS with 14 gets the 7680 that fit.
        let wide = IrsLayout::for_cpus(512);
        assert_eq!((wide.msi_lpis, wide.lpi_id_bits), (LPI_COUNT, 15));
        let l = IrsLayout::for_cpus_within(512, 14);
        assert_eq!((l.msi_base, l.msi_lpis, l.lpi_id_bits), (8704, 7680, 14));
        assert_eq!(l.ist_bytes, 4 << 14);
        assert_eq!(l.msi_lpi(LPI_BASE + 7679), Some(16383));
        assert_eq!(l.msi_lpi(LPI_BASE + 7680), None, "beyond what fits");
        // A small host keeps the whole pool within the minimum IST.
        assert_eq!(IrsLayout::for_cpus_within(4, 14).msi_lpis, LPI_COUNT);
        // No room at all: no pool, and the IPIs and doorbells still ask
        // for what they need (the driver refuses that, naming both).
        let none = IrsLayout::for_cpus_within(1024, 14);
        assert_eq!((none.msi_lpis, none.lpi_id_bits), (0, 15));
    }

    #[test]
    fn the_msi_pool_follows_the_doorbells_and_its_lpis_are_the_cores_gicv3_lpis() {
        let l = IrsLayout::for_cpus(4);

        assert_eq!((l.msi_base, l.msi_lpis), (68, LPI_COUNT));
        assert!(u64::from(l.msi_base + l.msi_lpis) <= 1 << l.lpi_id_bits);
        assert_eq!(l.msi_lpi(LPI_BASE), Some(68));
        assert_eq!(
            l.msi_lpi(LPI_BASE + LPI_COUNT - 1),
            Some(68 + LPI_COUNT - 1)
        );
        assert_eq!(l.msi_lpi(LPI_BASE + LPI_COUNT), None, "beyond the pool");
        assert_eq!(l.msi_lpi(40), None, "an SPI");
        assert_eq!(l.msi_core_intid(68 + 7), Some(LPI_BASE + 7));
        assert_eq!(l.msi_core_intid(67), None, "CPU 3's doorbell");
        assert_eq!(l.msi_core_intid(68 + LPI_COUNT), None);
    }

    #[test]
    fn the_ist_holds_every_cpus_ipis_and_doorbells_and_the_vm_table_follows() {
        let l = IrsLayout::for_cpus(4);
        assert_eq!((l.ipi_base, l.doorbell_base, l.doorbells), (0, 64, 4));
        assert_eq!(ipi_lpi(l.ipi_base, 3, 15), 63);
        assert_eq!(l.doorbell_lpis(), 64..68);
        assert_eq!((l.lpi_id_bits, l.ist_bytes), (14, 64 << 10));
        assert_eq!(
            (l.vm_id_bits, l.vmt_offset, l.vmt_bytes),
            (2, 64 << 10, 128)
        );
        assert_eq!((l.region, l.align), (128 << 10, 64 << 10));
        // 2048 CPUs: 32768 IPIs + 2048 doorbells + 8192 MSI LPIs need
        // 16 bits.
        let big = IrsLayout::for_cpus(2048);
        assert_eq!(big.lpi_id_bits, 16);
        assert!(u64::from(big.msi_base + big.msi_lpis) <= 1 << big.lpi_id_bits);
        assert_eq!(big.ist_bytes, 256 << 10);
        assert_eq!(big.vmt_bytes, 32 << 11);
        assert!(big.vmt_offset + big.vmt_bytes <= big.region);
        assert_eq!(big.region, 320 << 10);
    }

    const CAPS: VirsCaps = VirsCaps {
        vm_id_bits: 4,
        vpe_id_bits: 4,
        spis: 64,
    };

    const fn db(lpi: u32) -> Doorbell {
        Doorbell { lpi, mpidr: 0 }
    }

    fn tables(base: u64) -> VmTables {
        VmTables {
            vmd: base,
            vpet: base + 0x1000,
            vpeds: base + 0x2000,
            lpi_ist: base + 0x3000,
            spi_ist: base + 0x4000,
        }
    }

    fn vm<'a>(name: &'a str, vcpus: u16, spis: &'a [u32], dbs: &'a [Doorbell]) -> VmSpec<'a> {
        VmSpec {
            vm: if name == "alpha" { 0 } else { 1 },
            partition: name,
            vcpus,
            spis,
            lpi_id_bits: 8,
            spi_id_bits: 6,
            doorbells: dbs,
            tables: tables(0x9000_0000),
        }
    }

    #[test]
    fn virs_plan_gives_each_partition_its_vm_vpes_and_own_spis() {
        let (a, b) = ([db(100)], [db(101), db(102)]);
        let vms = [vm("alpha", 1, &[40], &a), vm("beta", 2, &[41, 42], &b)];
        let ops = plan_virs(&CAPS, &vms).unwrap();
        let assigned: std::vec::Vec<_> = ops
            .iter()
            .filter_map(|o| match o {
                VirsOp::AssignSpi { spi, vm } => Some((*spi, *vm)),
                _ => None,
            })
            .collect();
        assert_eq!(assigned, [(8, 0), (9, 1), (10, 1)]);
        assert!(ops.contains(&VirsOp::MapVpe { vm: 1, vpe: 1 }));
        assert!(!ops.contains(&VirsOp::MapVpe { vm: 0, vpe: 1 }));
        assert!(ops.contains(&VirsOp::ArmDoorbell {
            vm: 1,
            vpe: 1,
            db: db(102)
        }));
        // The VM must be valid before its vPEs, and its vPEs before their
        // doorbells.
        let at = |op: VirsOp| ops.iter().position(|o| *o == op).unwrap();
        assert!(at(VirsOp::MapVm { vm: 1 }) < at(VirsOp::MapVpe { vm: 1, vpe: 0 }));
        assert!(
            at(VirsOp::MapVpe { vm: 1, vpe: 1 })
                < at(VirsOp::ArmDoorbell {
                    vm: 1,
                    vpe: 1,
                    db: db(102)
                })
        );
    }

    #[test]
    fn virs_plan_refuses_shared_foreign_and_out_of_range_spis_naming_them() {
        let (d1, d2) = ([db(1)], [db(2)]);
        let e = plan_virs(
            &CAPS,
            &[vm("alpha", 1, &[40], &d1), vm("beta", 1, &[40], &d2)],
        );
        assert_eq!(
            e.unwrap_err().to_string(),
            "SPI 8 is given to both alpha and beta"
        );
        // A PPI is nobody's SPI; SPIs 64 and 70 are beyond the host's 64
        // (and the VM's 6-bit range).
        for bad in [27, 32 + 64, 32 + 70] {
            let e = plan_virs(&CAPS, &[vm("alpha", 1, &[bad], &d1)]).unwrap_err();
            assert_eq!(
                e,
                VirsError::BadSpi {
                    partition: "alpha".into(),
                    intid: bad
                }
            );
        }
        let e = plan_virs(&CAPS, &[vm("alpha", 17, &[], &d1)]).unwrap_err();
        assert!(e.to_string().contains("17 vCPUs"));
        let e = plan_virs(&CAPS, &[vm("alpha", 2, &[], &d1)]).unwrap_err();
        assert_eq!(e.to_string(), "partition alpha: vCPU 1 has no doorbell LPI");
        let e = plan_virs(&CAPS, &[vm("alpha", 1, &[], &d1), vm("beta", 1, &[], &d1)]);
        assert_eq!(e.unwrap_err(), VirsError::DoorbellTwice { lpi: 1 });
    }

    #[test]
    fn an_emulated_devices_line_is_a_vdpend_of_its_own_vm_and_virtual_spi() {
        use pinfold_vboard::{GUEST_GPIO_INTID, GUEST_UART_INTID, GUEST_WDOG_INTID};
        // VM 3's UART (SPI 1) raised: PENDING, VM [47:32], SPI type, ID 1.
        assert_eq!(
            vdpend_operand(3, GUEST_UART_INTID, true),
            Some(1 << 63 | 3 << 32 | 3 << 29 | 1)
        );
        // Lowered: the same without PENDING.
        assert_eq!(
            vdpend_operand(3, GUEST_UART_INTID, false),
            Some(3 << 32 | 3 << 29 | 1)
        );
        assert_eq!(
            vdpend_operand(0xffff, GUEST_WDOG_INTID, true),
            Some(1 << 63 | 0xffff << 32 | 3 << 29 | 60)
        );
        assert_eq!(
            vdpend_operand(0, GUEST_GPIO_INTID, true),
            Some(1 << 63 | 3 << 29 | 61)
        );
        // Every emulated SPI is inside the VM's virtual SPI range.
        let bits = frame::vm_spi_id_bits(&[]);
        for i in pinfold_vboard::GUEST_EMULATED_SPIS {
            assert!(i - 32 < 1 << bits, "INTID {i}");
        }
        // Nothing else: a pass-through SPI, a PPI, an SGI, an LPI.
        for other in [34, 40, 27, 3, LPI_BASE] {
            assert_eq!(vdpend_operand(0, other, true), None, "{other}");
        }
    }

    fn member(index: usize, name: &str, cpus: &[usize], spis: &[u32]) -> VirsMember {
        VirsMember {
            index,
            name: name.into(),
            cpus: cpus.iter().map(|&c| (c, 0x100 + c as u64)).collect(),
            spis: spis.iter().map(|&i| (i, "devices")).collect(),
        }
    }

    /// A bump allocator over a fake free range, recording what it gave.
    fn taker(next: &mut u64) -> impl FnMut(u64, u64) -> Option<u64> + '_ {
        move |bytes, align| {
            let at = next.next_multiple_of(align);
            *next = at + bytes;
            Some(at)
        }
    }

    #[test]
    fn the_boot_virs_makes_each_gicv5_partitions_index_its_vm_with_its_cpus_doorbells() {
        // Partition 1 is not a GICv5 one: VMs 0 and 2, not 0 and 1.
        let members = [
            member(0, "mgmt", &[0], &[]),
            member(2, "alpha", &[1, 2], &[40]),
        ];
        let layout = IrsLayout::for_cpus(4);
        let mut next = 0x8000_0000;

        let boot = plan_boot_virs(&members, &layout, &CAPS, &mut taker(&mut next)).unwrap();

        assert_eq!(boot.vms, [0, 2]);
        assert!(boot.ops.contains(&VirsOp::MapVm { vm: 2 }));
        assert!(!boot.ops.contains(&VirsOp::MapVm { vm: 1 }));
        assert!(boot.ops.contains(&VirsOp::MapVpe { vm: 2, vpe: 1 }));
        assert!(boot.ops.contains(&VirsOp::ArmDoorbell {
            vm: 2,
            vpe: 1,
            db: Doorbell {
                lpi: layout.doorbell_base + 2,
                mpidr: 0x102
            }
        }));
        assert!(boot.ops.contains(&VirsOp::AssignSpi { spi: 8, vm: 2 }));
        // Each VM's tables inside its own block, blocks disjoint.
        assert_eq!(boot.memory.len(), 2);
        let (b0, n0) = boot.memory[0];
        let (b1, _) = boot.memory[1];
        assert!(b0 + n0 <= b1);
        let vmte = boot.ops.iter().find_map(|o| match o {
            VirsOp::WriteVmte {
                vm: 2,
                tables,
                spi_id_bits,
                lpi_id_bits,
                ..
            } => Some((*tables, *spi_id_bits, *lpi_id_bits)),
            _ => None,
        });
        let (t, spi_bits, lpi_bits) = vmte.expect("VM 2's entry");
        assert_eq!(
            (spi_bits, lpi_bits),
            (8, VM_LPI_ID_BITS),
            "the guest's 256 SPIs"
        );
        assert!(t.vmd >= b1 && t.spi_ist + (4 << spi_bits) <= next);
        assert_eq!(t.lpi_ist % 64, 0);
    }

    #[test]
    fn the_vm_table_covers_the_highest_gicv5_partition_and_none_without_one() {
        assert_eq!(vm_id_bits_for(&[]), None);
        assert_eq!(vm_id_bits_for(&[member(0, "a", &[0], &[])]), Some(1));
        assert_eq!(vm_id_bits_for(&[member(1, "a", &[0], &[])]), Some(1));
        assert_eq!(
            vm_id_bits_for(&[member(0, "a", &[0], &[]), member(2, "b", &[1], &[])]),
            Some(2)
        );
        assert_eq!(vm_id_bits_for(&[member(16, "a", &[0], &[])]), Some(5));
    }

    #[test]
    fn the_boot_virs_refuses_naming_the_partition_and_field() {
        let layout = IrsLayout::for_cpus(4);
        let mut next = 0;
        // Two partitions with SPI 40: the second is refused for its device.
        let e = plan_boot_virs(
            &[
                member(0, "alpha", &[1], &[40]),
                member(1, "beta", &[2], &[40]),
            ],
            &layout,
            &CAPS,
            &mut taker(&mut next),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "partition \"beta\": devices: SPI 8 is given to both alpha and beta"
        );
        // VM ID 16 is beyond the IRS's 4 bits.
        let e = plan_boot_virs(
            &[member(16, "far", &[1], &[])],
            &layout,
            &CAPS,
            &mut taker(&mut next),
        )
        .unwrap_err();
        assert_eq!((e.partition.as_str(), e.field), ("far", "gic"));
        // A CPU the layout has no doorbell for.
        let e = plan_boot_virs(
            &[member(0, "big", &[7], &[])],
            &layout,
            &CAPS,
            &mut taker(&mut next),
        )
        .unwrap_err();
        assert_eq!((e.partition.as_str(), e.field), ("big", "cpus"));
        // No RAM for its tables.
        let e = plan_boot_virs(
            &[member(0, "alpha", &[1], &[])],
            &layout,
            &CAPS,
            &mut |_, _| None,
        )
        .unwrap_err();
        assert_eq!(e.field, "gic");
        assert!(e.reason.contains("vIRS tables"), "{e}");
    }

    #[test]
    fn a_virtual_command_error_is_counted_against_its_partition() {
        // Partitions 0 and 1 are GICv5 ones (VM = partition index).
        let gicv5 = |i: usize| i < 2;
        // VIRTUAL, TYPE = LPI, ID 5, VM 1.
        let s = (1 << 63) | (2 << 60) | (5 << 32) | 1;
        let f = VirsFault::from_syndrome(s).unwrap();
        assert_eq!(
            f,
            VirsFault {
                vm: 1,
                ty: 2,
                id: 5
            }
        );
        assert_eq!(
            attribute_swerr(s, gicv5),
            SwerrOwner::Partition { index: 1, fault: f }
        );
        // A physical-domain record is not a guest's.
        assert_eq!(VirsFault::from_syndrome(s & !(1 << 63)), None);
        // A VM no GICv5 partition has is the hypervisor's own.
        let s9 = (1 << 63) | (2 << 60) | 9;
        assert_eq!(
            attribute_swerr(s9, gicv5),
            SwerrOwner::Hypervisor { syndrome: s9 }
        );
    }
}
