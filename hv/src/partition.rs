//! Partitions: what one is at run time (RAM, stage-2 root, emulated
//! distributor and console, the per-vCPU state other CPUs may read, its
//! lifecycle state and fault accounting), how one is planned from its plan
//! entry and the host description (RAM placement, stage-2 maps, SPI
//! ownership), and how its images and guest DTB are (re)loaded. The platform
//! supplies memory through [`HostMemory`] and table memory through
//! `stage2::TableMemory`; everything that decides is here.

use crate::addr::{Ipa, PhysAddr};
use crate::console::{ConsoleRing, LinePrefixer, Pl011};
use crate::dtb::{build_guest_dtb, ExtraNode, GuestDtbSpec, HostInfo, PcieCells, PropValue};
use crate::dtb::{GuestDevice, GuestSpi};
use crate::events::EventLog;
use crate::images::View;
use crate::lifecycle::Lifecycle;
use crate::lockstat::{CountedLock, LockStat};
use crate::memmap::FreeMemory;
use crate::psci::VcpuPower;
use crate::ratelimit::{FaultKind, FaultLog, Verdict};
use crate::stage2::{MemType, Stage2, Stage2Error, TableMemory};
use crate::vgic::dist::VDist;
use crate::vgic::sgi::SgiMap;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};
use pinfold_abi::{ManagerStatus, PciFunction};
use pinfold_config::fit::{place_images, FitError, ImagePlacement, IMAGE_HEADER_LEN};
use pinfold_config::PartitionPlan;
use pinfold_vboard::{vcpu_mpidr, DTB_AREA, GUEST_EMULATED_SPIS, GUEST_RAM_BASE, RAM_ALIGN};

/// The guest DTB's phandle of the PL061 (above what a pass-through node
/// copied from a host DT plausibly claims).
pub const GUEST_GPIO_PHANDLE: u32 = 0xfffe_0001;
/// Linux's KEY_POWER (include/uapi/linux/input-event-codes.h).
pub const KEY_POWER: u32 = 116;
/// The guest DTB's node names of the PL061 and the SBSA watchdog (unit
/// address = `GUEST_GPIO_BASE`, `GUEST_WDOG_CONTROL_BASE`; written out so
/// that a start formats nothing).
pub const GPIO_NODE: &str = "pl061@90d0000";
pub const WDOG_NODE: &str = "watchdog@90b0000";

/// Size of each partition's console ring.
pub const CONSOLE_RING: usize = 64 * 1024;

/// Host memory as the core reaches it: the hypervisor's map of RAM.
pub trait HostMemory {
    /// Copy `bytes` to host physical address `pa` (caller checked bounds).
    fn write(&mut self, pa: PhysAddr, bytes: &[u8]);
    /// Copy from host physical address `pa` (caller checked bounds).
    fn read(&self, pa: PhysAddr, out: &mut [u8]);
    /// Clean `[pa, pa + len)` to the point of coherency (the guest starts
    /// with its MMU and caches off).
    fn clean_for_guest(&mut self, pa: PhysAddr, len: u64);
    /// Invalidate the instruction caches, once after every image of a
    /// load is in place (the guest's first fetches must not hit lines of a
    /// previous boot).
    fn sync_instructions(&mut self);
    /// Copy `len` bytes from host address `src` to `dst` (both checked by
    /// the caller, not overlapping). The platform overrides this with one
    /// copy; the default goes through a bounce buffer.
    fn copy(&mut self, dst: PhysAddr, src: PhysAddr, len: u64) {
        let mut buf = [0u8; 4096];
        let mut at = 0;
        while at < len {
            let n = (len - at).min(buf.len() as u64) as usize;
            self.read(PhysAddr(src.0 + at), &mut buf[..n]);
            self.write(PhysAddr(dst.0 + at), &buf[..n]);
            at += n as u64;
        }
    }
    /// Zero `len` bytes at host address `pa` and clean them to the point
    /// of coherency (scrubbing RAM before it changes owner).
    fn zero(&mut self, pa: PhysAddr, len: u64) {
        let zeros = [0u8; 4096];
        let mut at = 0;
        while at < len {
            let n = (len - at).min(zeros.len() as u64) as usize;
            self.write(PhysAddr(pa.0 + at), &zeros[..n]);
            at += n as u64;
        }
        self.clean_for_guest(pa, len);
    }
}

pub use crate::lifecycle::State;

/// What other CPUs may read of a vCPU.
pub struct VcpuShared {
    /// Host CPU index this vCPU is pinned to.
    pub pcpu: usize,
    /// MPIDR the guest sees (VMPIDR_EL2).
    pub mpidr: u64,
    pub power: VcpuPower,
    /// Entry point and context id of a pending PSCI CPU_ON.
    pub entry: AtomicU64,
    pub context: AtomicU64,
}

/// A pass-through MMIO device as the guest DTB describes it: compatible
/// from the plan, or copied from the host DT node the plan names.
pub struct DeviceNode {
    pub name: String,
    pub compatible: Vec<String>,
    pub reg: Vec<(u64, u64)>,
    pub spis: Vec<GuestSpi>,
}

/// The emulated console of a partition.
pub struct Console {
    pub pl011: Pl011,
    pub prefix: LinePrefixer,
    pub ring: ConsoleRing,
    /// The PL011 interrupt level last given to the distributor.
    pub line: bool,
}

pub struct Partition {
    pub index: usize,
    pub name: String,
    pub plan: PartitionPlan,
    /// The interrupt controller interface it got (its plan's `gic` on this
    /// host, `gichost::interface_for`).
    pub gic: crate::vgic5::GicInterface,
    /// Host physical base of its RAM.
    pub ram: PhysAddr,
    /// Where the guest sees its RAM: GUEST_RAM_BASE, or the host address
    /// itself for a partition owning DMA-capable devices (no IOMMU yet).
    pub ram_ipa: u64,
    pub ram_size: u64,
    /// Cells of the guest's PCIe host bridge node, if any: the whole host
    /// bridge passed through, or its virtual one (`vpci`).
    pub pcie: Option<PcieCells>,
    /// Its assigned PCI functions and their virtual ECAM (`pci` in the
    /// plan).
    pub vpci: Option<crate::vpci::PartitionPci>,
    pub vmid: u16,
    pub stage2_root: PhysAddr,
    /// The stage 2 its functions' DMA is translated with (the SMMU stream
    /// table entries' S2TTB): `stage2_root` itself, or, when its MSIs go
    /// through the SMMU ([`crate::its::MsiPath::Smmu`]), a second table
    /// tree with the same mappings plus the ITS doorbell page, which no
    /// CPU of the partition can reach.
    pub dma_root: PhysAddr,
    /// How its functions' MSIs reach the host ITS, or why they cannot
    /// (`its::msi_path_to`); `None` without assigned functions.
    pub msi: Option<Result<crate::its::MsiPath, crate::its::NoMsi>>,
    pub vcpus: Vec<VcpuShared>,
    pub vcpu_mpidrs: Vec<u64>,
    /// SGI routing precomputed from `vcpu_mpidrs` for the trap path.
    pub sgi: SgiMap,
    /// Its vCPUs' GICv4.1 vPEs, when its SGIs are direct vSGIs (`vsgi`).
    pub vsgi: Option<crate::vsgi::PartitionVsgi>,
    /// Physical SPIs this partition owns (devices and the PCIe bridge).
    pub spis: Vec<u32>,
    /// Its pass-through MMIO devices, for the guest DTB.
    pub devices: Vec<DeviceNode>,
    /// The emulated distributor, shared by the partition's vCPUs only: a
    /// GICD register is partition-wide state that any of its vCPUs may
    /// change, so no per-CPU design can hold it; no lock is shared between
    /// partitions.
    pub dist: CountedLock<VDist>,
    /// The console, shared by the partition's vCPUs and the CPUs that feed it
    /// input (host UART, management): one device, one FIFO.
    pub console: CountedLock<Console>,
    /// Lifecycle: state and its time, last crash, restart policy,
    /// watchdog (`lifecycle`).
    pub life: Lifecycle,
    pub entry_ipa: AtomicU64,
    pub dtb_ipa: AtomicU64,
    pub started_at: AtomicU64,
    pub boot_count: AtomicU64,
    /// Guest faults contained (exact; only their log lines are limited).
    pub faults: AtomicU64,
    pub fault_log: FaultLog,
    /// The manager's last MGMT_REPORT (status, sentence); reset to
    /// `Starting` at every start.
    pub report: CountedLock<(ManagerStatus, String)>,
    /// The PCI functions found behind its host bridge at its last start.
    pub pci_found: CountedLock<Vec<PciFunction>>,
    /// Its virtual ITS (`its`), when its functions may use MSI/MSI-X
    /// (`its::msi_path_to`): the guest's GITS frame under this lock.
    pub vits: Option<CountedLock<crate::its::PartitionVits>>,
    /// With the GICv5 interface: its guest's IRS config frame, at the GICD
    /// address (`vgic5::frame`). A lock because any vCPU may select an SPI
    /// or PE and configure it in a second access, so no per-CPU design can
    /// hold it; taken only on that frame's traps (`LockPath::GicdTrap`).
    pub virs_frame: Option<CountedLock<crate::vgic5::frame::VirsFrame>>,
    /// Physical LPIs its vITS may take (the MSI vectors of its functions on
    /// the trapped path; 0 with direct vLPIs or without a vITS): counted
    /// against the pool when the next partition is built (`pci_held`).
    pub lpis_reserved: u32,
    /// The system's event log, for the faults its vCPUs record
    /// ([`fault_event`](Self::fault_event)); set by whoever adds the
    /// partition to a `System` (`System::new`).
    pub events: Option<Arc<EventLog>>,
}

/// Why a partition could not be set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetupError {
    /// Its CPU list names a CPU the host does not have.
    NoSuchCpu(u32),
    /// No free host RAM of that size.
    NoRam(u64),
    /// Stage-2 table construction failed.
    Stage2(Stage2Error),
    /// Its `pci` list cannot be assigned.
    Pci(crate::vpci::AssignError),
    /// The plan passes the PCIe host bridge but the host has none.
    NoPciHostBridge,
    /// Its `gic` is not an interface this host can give (the reason of
    /// `vgic5::choose_interface`).
    Gic(&'static str),
}

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetupError::NoSuchCpu(c) => write!(f, "cpus: CPU {c} does not exist on this host"),
            SetupError::NoRam(size) => write!(f, "memory: no free block of {} MiB", size >> 20),
            SetupError::Stage2(e) => write!(f, "stage 2: {e}"),
            SetupError::Pci(e) => write!(f, "{e}"),
            SetupError::NoPciHostBridge => {
                write!(f, "pci_host_bridge: the host has no PCIe host bridge")
            }
            SetupError::Gic(reason) => write!(f, "gic: {reason}"),
        }
    }
}

/// Why a partition's images could not be loaded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadError {
    KernelMissing,
    InitrdMissing,
    /// Kernel, initrd and DTB area do not fit (the build checks the same).
    Fit(FitError),
    DtbFailed,
    DtbTooLarge,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LoadError::KernelMissing => "kernel image missing from the payload",
            LoadError::InitrdMissing => "initrd image missing from the payload",
            LoadError::Fit(e) => return write!(f, "{e}"),
            LoadError::DtbFailed => "guest DTB generation failed",
            LoadError::DtbTooLarge => "guest DTB larger than its 2 MiB area",
        })
    }
}

/// The events `pp`'s vITS may map: the MSI vectors of its functions
/// (`HostFunction::msi_vectors`), refused naming the `pci` entry that
/// takes the partition past the physical LPIs other partitions left,
/// unless its MSIs are `direct` vLPIs (GICv4.0 or GICv4.1: no physical
/// LPI is taken for them).
fn lpi_budget(
    pp: &PartitionPlan,
    a: &crate::vpci::Assignment,
    pci_host: &crate::vpci::PciHost,
    direct: bool,
) -> Result<u32, SetupError> {
    let left = crate::vgic::pits::LPI_COUNT.saturating_sub(pci_host.lpis_held);
    let mut vectors = 0u32;
    for placed in &a.functions {
        let f = pci_host.functions.iter().find(|f| f.bdf == placed.bdf);
        vectors = vectors.saturating_add(f.map_or(0, |f| f.msi_vectors));
        if vectors > left && !direct {
            let index = pp
                .pci
                .iter()
                .position(|p| {
                    (p.bus, p.device, p.function)
                        == (placed.bdf.bus, placed.bdf.dev, placed.bdf.func)
                })
                .unwrap_or(0);
            return Err(SetupError::Pci(crate::vpci::AssignError {
                index,
                bdf: placed.bdf,
                problem: crate::vpci::AssignProblem::LpisExhausted { vectors, left },
            }));
        }
    }
    Ok(vectors)
}

/// What partitions already there hold that a new one's functions must
/// keep clear of: their BAR windows (CPU ranges), SPIs and the physical
/// LPIs reserved for their functions' MSI vectors.
pub fn pci_held<'a>(
    functions: &'a [crate::vpci::HostFunction],
    existing: impl Iterator<Item = &'a Partition>,
) -> crate::vpci::PciHost<'a> {
    let mut held = crate::vpci::PciHost {
        functions,
        ..Default::default()
    };
    for p in existing {
        if let Some(v) = &p.vpci {
            held.taken.extend(v.assignment.cpu_windows());
        }
        held.spis.extend_from_slice(&p.spis);
        held.lpis_held = held.lpis_held.saturating_add(p.lpis_reserved);
    }
    held
}

impl Partition {
    /// How its functions' MSIs reach it, for the log (None without
    /// functions): the path, or why it stays on INTx.
    pub fn msi_line(&self) -> Option<alloc::string::String> {
        Some(match self.msi.as_ref()? {
            Ok(path) => alloc::format!("partition {}: {path}", self.name),
            Err(why) => alloc::format!("partition {}: {why}", self.name),
        })
    }

    /// The partition has a virtual ITS: its assigned functions may use
    /// MSI/MSI-X towards the doorbell its ECAM filter names.
    pub fn has_vits(&self) -> bool {
        self.vits.is_some()
    }

    /// Plan partition `index` from its plan entry: RAM from the top of
    /// `free`, stage-2 tables holding only that RAM and its pass-through
    /// MMIO, the vCPUs pinned to the plan's CPUs, its distributor with the
    /// emulated UART's line and its own SPIs.
    pub fn build(
        index: usize,
        pp: &PartitionPlan,
        host: &HostInfo,
        free: &mut FreeMemory,
        tables: &mut (impl TableMemory + ?Sized),
        stat: &'static LockStat,
        pci_host: &crate::vpci::PciHost,
    ) -> Result<Partition, SetupError> {
        for &c in &pp.cpus {
            if c as usize >= host.cpus.len() || c as usize >= crate::percpu::MAX_CPUS {
                return Err(SetupError::NoSuchCpu(c));
            }
        }
        // The build checked the same against the board's description; a
        // bundle made for another host is refused here.
        let gic =
            crate::gichost::interface_for(pp, &host.gic.found).map_err(|r| match r.problem {
                pinfold_config::rules::Problem::GicUnavailable { reason } => {
                    SetupError::Gic(reason)
                }
                _ => SetupError::Gic("not available on this host"),
            })?;
        // Functions first: a refusal takes no RAM.
        let assignment = if pp.pci.is_empty() {
            None
        } else {
            let bridge = host.pcie.as_ref().ok_or(SetupError::NoPciHostBridge)?;
            let bdfs: Vec<crate::pci::Bdf> = pp
                .pci
                .iter()
                .map(|a| crate::pci::Bdf {
                    bus: a.bus,
                    dev: a.device,
                    func: a.function,
                })
                .collect();
            let a = crate::vpci::assign(
                &bdfs,
                pci_host.functions,
                bridge,
                &pci_host.taken,
                &crate::vpci::vf_apertures(pci_host.functions, bridge),
                |spi| pci_host.spis.contains(&spi),
            )
            .map_err(SetupError::Pci)?;
            Some((bridge, a))
        };
        let ram = free
            .take_top(pp.ram_size, RAM_ALIGN)
            .ok_or(SetupError::NoRam(pp.ram_size))?;
        let ram_ipa = if pp.pci_host_bridge || assignment.is_some() {
            ram
        } else {
            GUEST_RAM_BASE
        };
        let mut tables = tables;
        let mut s2 = Stage2::new(&mut tables).map_err(SetupError::Stage2)?;
        // Every mapping, so that a DMA stage 2 can repeat them.
        let mut mapped: Vec<(u64, u64, u64, MemType)> = Vec::new();
        let mut map = |s2: &mut Stage2, ipa: u64, pa: u64, size: u64, ty: MemType| {
            mapped.push((ipa, pa, size, ty));
            s2.map(&mut tables, Ipa(ipa), PhysAddr(pa), size, ty)
                .map_err(SetupError::Stage2)
        };
        map(&mut s2, ram_ipa, ram, pp.ram_size, MemType::Normal)?;
        let mut spis = Vec::new();
        let mut pcie = None;
        if pp.pci_host_bridge {
            let info = host.pcie.as_ref().ok_or(SetupError::NoPciHostBridge)?;
            let cells = crate::dtb::pcie_cells_for(info, gic);
            map(
                &mut s2,
                info.ecam.0,
                info.ecam.0,
                info.ecam.1,
                MemType::Device,
            )?;
            for r in &info.ranges {
                map(&mut s2, r.cpu_addr, r.cpu_addr, r.size, MemType::Device)?;
            }
            spis.extend_from_slice(&cells.spis);
            pcie = Some(cells);
        }
        // Assigned functions: their windows mapped, the ECAM not (every
        // access traps to the filter), their INTx SPIs owned.
        let mut vpci = None;
        let mut vits = None;
        let mut msi = None;
        let mut lpis_reserved = 0;
        if let Some((bridge, a)) = assignment {
            for (base, size) in a.cpu_windows() {
                map(&mut s2, base, base, size, MemType::Device)?;
            }
            spis.extend(a.spis());
            pcie = Some(crate::dtb::pcie_cells_for(
                &crate::vpci::guest_bridge(bridge, &a),
                gic,
            ));
            let mut fresh = crate::vpci::VirtualEcam::new(bridge, &a, pci_host.functions);
            let smmu = !bridge.iommu_map.is_empty();
            // The one ITS its functions' MSIs reach (`MsiRouting`).
            let its_index = match (pp.management, pci_host.its) {
                (true, _) => Err(crate::its::NoMsi::Management),
                (false, None) => Err(crate::its::NoMsi::NoHostIts),
                (false, Some(set)) => set
                    .routing
                    .partition_its_index(a.functions.iter().map(|f| u32::from(f.bdf.rid())))
                    .map(|i| (set, i)),
            };
            let path = its_index.and_then(|(set, i)| {
                let r = &set.routing;
                let base = r.base(i).ok_or(crate::its::NoMsi::NoHostIts)?;
                crate::its::msi_path_to(false, Some(r.translater(base)), smmu)
            });
            if let (Ok(_), Ok((set, its))) = (path, its_index) {
                // GICv4.1: direct vLPIs on the vSGI path's vPEs when its
                // functions' ITS has them mapped (`v41::choose_vlpis`).
                let vlpi = set.direct();
                let v41 = !vlpi && pci_host.vsgi && {
                    let pcpus: Vec<usize> = pp.cpus.iter().map(|&c| c as usize).collect();
                    let has_vpes =
                        crate::vsgi::PartitionVsgi::for_partition(true, gic, &pcpus).is_some();
                    crate::vgic::v41::choose_vlpis(true, has_vpes, its, set.vsgi_itses()).is_ok()
                };
                let vectors = lpi_budget(pp, &a, pci_host, vlpi || v41)?;
                fresh.msi_doorbell = Some(crate::layout::GUEST_ITS_DOORBELL);
                let delivery = if vlpi || v41 {
                    crate::vgic::v40::LpiDelivery::Direct
                } else {
                    // Physical LPIs are taken for its events: reserved.
                    lpis_reserved = vectors;
                    crate::vgic::v40::LpiDelivery::Trapped
                };
                let fresh_vits = crate::its::PartitionVits::new(
                    index as u16,
                    pp.cpus.len() as u16,
                    set.typer,
                    delivery,
                    vectors,
                    its,
                );
                vits = Some(CountedLock::new(
                    if v41 {
                        fresh_vits.on_vsgi_vpes()
                    } else {
                        fresh_vits
                    },
                    stat,
                ));
            }
            msi = Some(path);
            vpci = Some(crate::vpci::PartitionPci {
                assignment: a,
                ecam: CountedLock::new(fresh.clone(), stat),
                fresh,
            });
        }
        let mut devices = Vec::new();
        for dev in &pp.devices {
            for r in &dev.mmio {
                map(&mut s2, r.base, r.base, r.size, MemType::Device)?;
            }
            spis.extend_from_slice(&dev.spis);
            let host_node = dev.host_node.as_deref().and_then(|p| host.device(p));
            let compatible = match (&dev.compatible, host_node) {
                (Some(c), _) => alloc::vec![c.clone()],
                (None, Some(h)) => h.compatible.clone(),
                (None, None) => Vec::new(),
            };
            // Without a compatible the guest could bind nothing to it: the
            // window is still mapped, but no node is made up.
            if !compatible.is_empty() {
                devices.push(DeviceNode {
                    name: alloc::format!(
                        "{}@{:x}",
                        dev.name,
                        dev.mmio.first().map_or(0, |r| r.base)
                    ),
                    compatible,
                    reg: dev.mmio.iter().map(|r| (r.base, r.size)).collect(),
                    spis: dev.spis.iter().map(|&i| GuestSpi::level(i)).collect(),
                });
            }
        }
        // The DMA stage 2: what the CPU's maps, and the doorbell page.
        let dma_root = match msi {
            Some(Ok(crate::its::MsiPath::Smmu { ipa, pa })) => {
                let mut dma = Stage2::new(&mut tables).map_err(SetupError::Stage2)?;
                let doorbell = (ipa, pa, 0x1000, MemType::Device);
                for &(ipa, pa, size, ty) in mapped.iter().chain([&doorbell]) {
                    dma.map(&mut tables, Ipa(ipa), PhysAddr(pa), size, ty)
                        .map_err(SetupError::Stage2)?;
                }
                dma.root()
            }
            _ => s2.root(),
        };
        let vcpu_mpidrs: Vec<u64> = (0..pp.cpus.len()).map(vcpu_mpidr).collect();
        let vcpus: Vec<VcpuShared> = pp
            .cpus
            .iter()
            .zip(&vcpu_mpidrs)
            .map(|(&c, &m)| VcpuShared {
                pcpu: c as usize,
                mpidr: m,
                power: VcpuPower::new_off(),
                entry: AtomicU64::new(0),
                context: AtomicU64::new(0),
            })
            .collect();
        let pcpus: Vec<usize> = vcpus.iter().map(|v| v.pcpu).collect();
        let vsgi = crate::vsgi::PartitionVsgi::for_partition(pci_host.vsgi, gic, &pcpus);
        let dist = VDist::new(&vcpu_mpidrs, &GUEST_EMULATED_SPIS, &spis);
        // GICv4.1 direct vSGIs are offered, not imposed: the guest opts in.
        let dist = if vsgi.is_some() {
            dist.with_nassgicap()
        } else {
            dist
        };
        let virs_frame = (gic == crate::vgic5::GicInterface::V5).then(|| {
            CountedLock::new(
                crate::vgic5::frame::VirsFrame::new(crate::vgic5::frame::FrameSpec {
                    vcpus: pp.cpus.len() as u16,
                    spis: spis.clone(),
                    ram: (ram_ipa, pp.ram_size),
                }),
                stat,
            )
        });
        Ok(Partition {
            index,
            name: pp.name.clone(),
            plan: pp.clone(),
            gic,
            ram: PhysAddr(ram),
            ram_ipa,
            ram_size: pp.ram_size,
            pcie,
            vpci,
            vmid: index as u16 + 1,
            stage2_root: s2.root(),
            dma_root,
            msi,
            vcpus,
            sgi: SgiMap::new(&vcpu_mpidrs),
            vsgi,
            vcpu_mpidrs,
            spis,
            devices,
            dist: CountedLock::new(dist, stat),
            virs_frame,
            console: CountedLock::new(
                Console {
                    pl011: Pl011::new(),
                    line: false,
                    prefix: LinePrefixer::new(&pp.name),
                    ring: ConsoleRing::new(CONSOLE_RING),
                },
                stat,
            ),
            life: Lifecycle::new(pp, stat),
            entry_ipa: AtomicU64::new(0),
            dtb_ipa: AtomicU64::new(0),
            started_at: AtomicU64::new(0),
            boot_count: AtomicU64::new(0),
            faults: AtomicU64::new(0),
            fault_log: FaultLog::new(),
            report: CountedLock::new((ManagerStatus::Starting, String::new()), stat),
            pci_found: CountedLock::new(Vec::new(), stat),
            vits,
            lpis_reserved,
            events: None,
        })
    }

    /// Where it is: `N vCPUs on CPUs [..], M MiB RAM at PA 0x.., VMID V`
    /// (the log line of a partition built at boot, created or changed).
    pub fn placement(&self) -> impl fmt::Display + '_ {
        struct Placement<'p>(&'p Partition);
        impl fmt::Display for Placement<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let p = self.0;
                write!(
                    f,
                    "{} vCPUs on CPUs {:?}, {} MiB RAM at PA {:#x}, VMID {}",
                    p.vcpus.len(),
                    p.plan.cpus,
                    p.ram_size >> 20,
                    p.ram.0,
                    p.vmid
                )
            }
        }
        Placement(self)
    }

    pub fn state(&self) -> State {
        self.life.state()
    }

    /// Change state at counter value `now` (its time is kept).
    pub fn set_state(&self, s: State, now: u64) {
        self.life.set(s, now);
    }

    /// The vCPU whose MPIDR affinity is `mpidr`.
    pub fn vcpu_by_mpidr(&self, mpidr: u64) -> Option<usize> {
        self.vcpus
            .iter()
            .position(|s| pinfold_vboard::same_cpu(s.mpidr, mpidr))
    }

    /// Whether every vCPU is off.
    pub fn all_off(&self) -> bool {
        self.vcpus
            .iter()
            .all(|s| s.power.state() == crate::psci::PowerState::Off)
    }

    /// Host address of a guest IPA inside this partition's RAM, if it is
    /// inside (with `len` bytes after it).
    pub fn host_addr(&self, ipa: u64, len: u64) -> Option<PhysAddr> {
        let off = ipa.checked_sub(self.ram_ipa)?;
        if off.checked_add(len)? > self.ram_size {
            return None;
        }
        Some(PhysAddr(self.ram.0 + off))
    }

    /// Count a guest fault and decide whether its message is printed
    /// (rate-limited per kind; see `ratelimit`).
    pub fn fault(&self, kind: FaultKind, now: u64, frequency: u64) -> Verdict {
        self.faults.fetch_add(1, Ordering::Relaxed);
        self.fault_log.check(kind, now, frequency)
    }

    /// Record a fault event (one whose log line the rate limit let
    /// through) in the event log, on the ring of the CPU it happened on.
    pub fn fault_event(&self, hw: &impl crate::exit::Hw, args: fmt::Arguments) {
        if let Some(log) = &self.events {
            log.record(
                hw.cpu_index(),
                hw.now(),
                pinfold_abi::EventKind::Fault,
                Some((self.index as u32, &self.name)),
                args,
            );
        }
    }

    /// (Re)load the kernel, initrd and a fresh guest DTB into the
    /// partition's RAM; records the entry point and DTB address.
    pub fn load(
        &self,
        kernel: View,
        initrd: Option<View>,
        mem: &mut impl HostMemory,
        seed: impl FnMut(u64) -> u64,
    ) -> Result<(), LoadError> {
        let mut head = [0u8; IMAGE_HEADER_LEN];
        let head_len = kernel.head(mem, &mut head);
        let place = place_images(
            &head[..head_len],
            kernel.len(),
            self.plan.kernel.format,
            initrd.map(|i| i.len()),
            self.ram_size,
        )
        .map_err(LoadError::Fit)?;
        let base = self.ram_ipa;
        self.copy_in(mem, place.kernel_offset, kernel);
        if let (Some(image), Some((start, _))) = (initrd, place.initrd) {
            self.copy_in(mem, start, image);
        }
        let dtb = self.guest_dtb(base, place, seed)?;
        if dtb.len() as u64 > DTB_AREA {
            return Err(LoadError::DtbTooLarge);
        }
        let dtb: &[u8] = &dtb;
        // The DTB is built on the heap, which lives as long as this call.
        let pa = PhysAddr(self.ram.0 + place.dtb_offset);
        mem.write(pa, dtb);
        mem.clean_for_guest(pa, dtb.len() as u64);
        mem.sync_instructions();
        self.entry_ipa
            .store(base + place.kernel_offset, Ordering::Relaxed);
        self.dtb_ipa
            .store(base + place.dtb_offset, Ordering::Relaxed);
        Ok(())
    }

    fn copy_in(&self, mem: &mut impl HostMemory, offset: u64, image: View) {
        let pa = PhysAddr(self.ram.0 + offset);
        image.copy_to(mem, pa);
        mem.clean_for_guest(pa, image.len());
    }

    fn guest_dtb(
        &self,
        base: u64,
        place: ImagePlacement,
        mut seed: impl FnMut(u64) -> u64,
    ) -> Result<Vec<u8>, LoadError> {
        let s = seed(self.index as u64);
        let mut rng = [0u8; 32];
        for (i, chunk) in rng.chunks_mut(8).enumerate() {
            chunk.copy_from_slice(&crate::system::splitmix(s ^ i as u64).to_le_bytes());
        }
        let pcie_node;
        let mut pcie_props;
        let pcie_name;
        let its = self.has_vits();
        // Its functions' requester IDs only, each its own DeviceID at the
        // virtual ITS (the physical ITS sees the same ones).
        let rids: Vec<u16> = self
            .vpci
            .as_ref()
            .map_or_else(Vec::new, |v| v.bdfs().iter().map(|b| b.rid()).collect());
        let msi_map = crate::dtb::msi_map(&rids, crate::dtb::GUEST_ITS_PHANDLE);
        let extra: &[ExtraNode] = match &self.pcie {
            Some(c) => {
                pcie_props = alloc::vec![
                    ("compatible", PropValue::String("pci-host-ecam-generic")),
                    ("device_type", PropValue::String("pci")),
                    ("reg", PropValue::Cells(&c.reg)),
                    ("bus-range", PropValue::Cells(&c.bus_range)),
                    ("#address-cells", PropValue::U32(3)),
                    ("#size-cells", PropValue::U32(2)),
                    ("#interrupt-cells", PropValue::U32(1)),
                    ("ranges", PropValue::Cells(&c.ranges)),
                    (
                        "interrupt-map-mask",
                        PropValue::Cells(&c.interrupt_map_mask),
                    ),
                    ("interrupt-map", PropValue::Cells(&c.interrupt_map)),
                    ("dma-coherent", PropValue::Empty),
                ];
                if its {
                    pcie_props.push(("msi-map", PropValue::Cells(&msi_map)));
                }
                pcie_name = alloc::format!("pcie@{:x}", (c.reg[0] as u64) << 32 | c.reg[1] as u64);
                pcie_node = [ExtraNode {
                    name: &pcie_name,
                    props: &pcie_props,
                    children: &[],
                }];
                &pcie_node
            }
            None => &[],
        };
        // The emulated SBSA watchdog (lifecycle hook): both frames, WS0,
        // and the driver's timeout = the plan's period.
        let wdog_reg = [
            (pinfold_vboard::GUEST_WDOG_CONTROL_BASE >> 32) as u32,
            pinfold_vboard::GUEST_WDOG_CONTROL_BASE as u32,
            0,
            pinfold_vboard::GUEST_WDOG_FRAME_SIZE as u32,
            (pinfold_vboard::GUEST_WDOG_REFRESH_BASE >> 32) as u32,
            pinfold_vboard::GUEST_WDOG_REFRESH_BASE as u32,
            0,
            pinfold_vboard::GUEST_WDOG_FRAME_SIZE as u32,
        ];
        let wdog_irq = crate::dtb::spi_cells(pinfold_vboard::GUEST_WDOG_INTID, 4, self.gic);
        let wdog_props = [
            ("compatible", PropValue::String("arm,sbsa-gwdt")),
            ("reg", PropValue::Cells(&wdog_reg)),
            ("interrupts", PropValue::Cells(&wdog_irq)),
            (
                "timeout-sec",
                PropValue::U32(self.plan.lifecycle.watchdog_s),
            ),
        ];
        // The PL061 and its power button (as QEMU virt wires them).
        let gpio_reg = [
            0,
            pinfold_vboard::GUEST_GPIO_BASE as u32,
            0,
            pinfold_vboard::GUEST_GPIO_SIZE as u32,
        ];
        let gpio_irq = crate::dtb::spi_cells(pinfold_vboard::GUEST_GPIO_INTID, 4, self.gic);
        let gpio_props = [
            (
                "compatible",
                PropValue::Strings(&["arm,pl061", "arm,primecell"]),
            ),
            ("reg", PropValue::Cells(&gpio_reg)),
            ("interrupts", PropValue::Cells(&gpio_irq)),
            ("gpio-controller", PropValue::Empty),
            ("#gpio-cells", PropValue::U32(2)),
            ("clocks", PropValue::U32(crate::dtb::GUEST_APB_PCLK_PHANDLE)),
            ("clock-names", PropValue::String("apb_pclk")),
            ("phandle", PropValue::U32(GUEST_GPIO_PHANDLE)),
        ];
        let key_gpios = [GUEST_GPIO_PHANDLE, crate::gpio::POWER_LINE, 0];
        let key_props = [
            ("label", PropValue::String("GPIO Key Poweroff")),
            ("linux,code", PropValue::U32(KEY_POWER)),
            ("gpios", PropValue::Cells(&key_gpios)),
        ];
        let key_node = [ExtraNode {
            name: "poweroff",
            props: &key_props,
            children: &[],
        }];
        let keys_props = [("compatible", PropValue::String("gpio-keys"))];
        let mut extra_nodes: Vec<ExtraNode> = extra.to_vec();
        extra_nodes.push(ExtraNode {
            name: GPIO_NODE,
            props: &gpio_props,
            children: &[],
        });
        extra_nodes.push(ExtraNode {
            name: "gpio-keys",
            props: &keys_props,
            children: &key_node,
        });
        if self.plan.lifecycle.watchdog_s != 0 {
            extra_nodes.push(ExtraNode {
                name: WDOG_NODE,
                props: &wdog_props,
                children: &[],
            });
        }
        let extra = &extra_nodes[..];
        let compat: Vec<Vec<&str>> = self
            .devices
            .iter()
            .map(|d| d.compatible.iter().map(String::as_str).collect())
            .collect();
        let devices: Vec<GuestDevice> = self
            .devices
            .iter()
            .zip(&compat)
            .map(|(d, c)| GuestDevice {
                name: &d.name,
                compatible: c,
                reg: &d.reg,
                spis: &d.spis,
                props: &[],
            })
            .collect();
        let spec = GuestDtbSpec {
            partition: &self.name,
            ram_base: base,
            ram_size: self.ram_size,
            vcpu_count: self.vcpus.len(),
            bootargs: &self.plan.bootargs,
            initrd: place.initrd.map(|(s, e)| (base + s, base + e)),
            rng_seed: Some(rng),
            kaslr_seed: Some(crate::system::splitmix(s ^ 0xabcd)),
            extra,
            pmu: self.plan.pmu,
            its,
            pci_probe_only: self.vpci.as_ref().is_some_and(|v| v.assignment.has_vf()),
            devices: &devices,
            // The interface `build` chose from the plan's `gic`
            // (`gichost::interface_for`): GICv3 on a GICv3 host.
            gic: self.gic,
        };
        build_guest_dtb(&spec).map_err(|_| LoadError::DtbFailed)
    }
}
