//! Partitions at run time: their RAM, stage-2 tables, emulated GIC
//! distributor and console, and the per-vCPU state other CPUs may read.
//! Built once at boot from the plan; (re)loading images and generating the
//! guest DTB happen here too.

use crate::arch;
use crate::hvlog;
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use pinfold_config::{KernelFormat, PartitionPlan, Plan};
use pinfold_hv::addr::{Ipa, PhysAddr};
use pinfold_hv::console::{ConsoleRing, LinePrefixer, Pl011};
use pinfold_hv::dtb::{build_guest_dtb, ExtraNode, GuestDtbSpec, PropValue};
use pinfold_hv::layout::*;
use pinfold_hv::psci::VcpuPower;
use pinfold_hv::stage2::{MemType, Stage2, TableMemory};
use pinfold_hv::vgic::dist::VDist;

/// Size of each partition's console ring.
const CONSOLE_RING: usize = 64 * 1024;
/// The guest DTB sits in the last 2 MiB of the partition's RAM.
const DTB_AREA: u64 = 2 << 20;

pub const STATE_STOPPED: u8 = 0;
pub const STATE_RUNNING: u8 = 1;
pub const STATE_STOPPING: u8 = 2;

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

/// The emulated console of a partition. Its lock is shared only by the
/// partition's own vCPUs (and the CPU taking host UART input).
pub struct Console {
    pub pl011: Pl011,
    pub prefix: LinePrefixer,
    pub ring: ConsoleRing,
}

pub struct Partition {
    pub index: usize,
    pub name: String,
    pub plan: PartitionPlan,
    pub ram: PhysAddr,
    /// Where the guest sees its RAM: GUEST_RAM_BASE, or the host address
    /// itself for a partition owning DMA-capable devices (no IOMMU).
    pub ram_ipa: u64,
    pub ram_size: u64,
    /// Cells of the passed-through PCIe host bridge node, if any.
    pub pcie: Option<pinfold_hv::dtb::PcieCells>,
    pub vmid: u16,
    pub stage2_root: PhysAddr,
    pub vcpus: Vec<VcpuShared>,
    pub vcpu_mpidrs: Vec<u64>,
    /// The emulated distributor is per partition and shared by its vCPUs;
    /// no lock is shared between partitions.
    pub dist: spin::Mutex<VDist>,
    pub console: spin::Mutex<Console>,
    pub state: AtomicU8,
    pub entry_ipa: AtomicU64,
    pub dtb_ipa: AtomicU64,
    pub started_at: AtomicU64,
    pub boot_count: AtomicU64,
    pub faults: AtomicU64,
}

static PARTITIONS: spin::Once<Vec<Partition>> = spin::Once::new();
static PLAN: spin::Once<(Plan, &'static [u8])> = spin::Once::new();
/// Owner of each physical SPI (partition index + 1; 0 = the hypervisor or
/// nobody). Written at boot only.
static SPI_OWNER: [AtomicU8; 1024] = [const { AtomicU8::new(0) }; 1024];

/// The partition that owns physical SPI `intid`.
pub fn spi_owner(intid: u32) -> Option<&'static Partition> {
    let owner = SPI_OWNER.get(intid as usize)?.load(Ordering::Relaxed);
    if owner == 0 {
        None
    } else {
        get(owner as usize - 1)
    }
}

static SEED: AtomicU64 = AtomicU64::new(0x9e37_79b9_7f4a_7c15);

pub fn all() -> &'static [Partition] {
    PARTITIONS.get().map(|v| v.as_slice()).unwrap_or(&[])
}

pub fn get(index: usize) -> Option<&'static Partition> {
    all().get(index)
}

/// Stage-2 tables in hypervisor heap memory (identity mapped at EL2, so a
/// table's address is its physical address).
pub struct HeapTables;

impl TableMemory for HeapTables {
    fn alloc_table(&mut self) -> Option<PhysAddr> {
        alloc_zeroed(4096, 4096)
    }
    fn alloc_root(&mut self) -> Option<PhysAddr> {
        alloc_zeroed(8192, 8192)
    }
    fn read(&self, table: PhysAddr, index: usize) -> u64 {
        // SAFETY: `table` came from alloc_table/alloc_root and index is
        // within it (Stage2 only indexes its own tables).
        unsafe { (table.0 as *const u64).add(index).read_volatile() }
    }
    fn write(&mut self, table: PhysAddr, index: usize, value: u64) {
        // SAFETY: as in `read`; one 64-bit store, so no torn descriptor.
        unsafe { (table.0 as *mut u64).add(index).write_volatile(value) }
    }
}

fn alloc_zeroed(size: usize, align: usize) -> Option<PhysAddr> {
    let layout = core::alloc::Layout::from_size_align(size, align).ok()?;
    // SAFETY: non-zero size layout.
    let ptr = unsafe { alloc::alloc::alloc_zeroed(layout) };
    if ptr.is_null() {
        None
    } else {
        Some(PhysAddr(ptr as u64))
    }
}

/// Why a partition could not be set up.
#[derive(Debug, Clone, Copy)]
pub enum SetupError {
    /// Its CPU list names a CPU the host does not have.
    NoSuchCpu(u32),
    /// No free host RAM of that size.
    NoRam(u64),
    /// Stage-2 table construction failed.
    Stage2(pinfold_hv::stage2::Stage2Error),
    /// The plan passes the PCIe host bridge but the host DTB has none.
    NoPciHostBridge,
}

impl core::fmt::Display for SetupError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SetupError::NoSuchCpu(c) => write!(f, "cpus: CPU {c} does not exist on this host"),
            SetupError::NoRam(size) => write!(f, "memory: no free block of {} MiB", size >> 20),
            SetupError::Stage2(e) => write!(f, "stage 2: {e}"),
            SetupError::NoPciHostBridge => {
                write!(f, "pci_host_bridge: the host DTB has no PCIe host bridge")
            }
        }
    }
}

/// Build every partition of the plan. Partitions that cannot be set up are
/// reported and left out; the others still boot.
pub fn create_all(
    plan: Plan,
    payload: &'static [u8],
    host: &pinfold_hv::dtb::HostInfo,
    mem: &mut pinfold_hv::memmap::FreeMemory,
) {
    let mut out = Vec::new();
    for (index, pp) in plan.partitions.iter().enumerate() {
        match create(index, pp, host, mem) {
            Ok(p) => out.push(p),
            Err(e) => hvlog!("partition {}: not created: {}", pp.name, e),
        }
    }
    // Pass-through SPIs start disabled, routed to the partition's first
    // vCPU's CPU; the guest's distributor writes enable and re-route them.
    for p in &out {
        for dev_spi in p.passthrough_spis() {
            if let Some(slot) = SPI_OWNER.get(dev_spi as usize) {
                slot.store(p.index as u8 + 1, Ordering::Relaxed);
            }
            let mpidr = host.cpus.get(p.vcpus[0].pcpu).copied().unwrap_or(0);
            crate::gicd(|d| {
                d.enable(dev_spi, false);
                d.set_edge(dev_spi, false);
                d.route(dev_spi, mpidr);
            });
        }
    }
    PARTITIONS.call_once(|| out);
    PLAN.call_once(|| (plan, payload));
}

fn create(
    index: usize,
    pp: &PartitionPlan,
    host: &pinfold_hv::dtb::HostInfo,
    mem: &mut pinfold_hv::memmap::FreeMemory,
) -> Result<Partition, SetupError> {
    for &c in &pp.cpus {
        if c as usize >= host.cpus.len() || c as usize >= arch::MAX_CPUS {
            return Err(SetupError::NoSuchCpu(c));
        }
    }
    let ram = mem
        .take_top(pp.ram_size, 2 << 20)
        .ok_or(SetupError::NoRam(pp.ram_size))?;
    let ram_ipa = if pp.pci_host_bridge {
        ram
    } else {
        GUEST_RAM_BASE
    };
    let mut tables = HeapTables;
    let mut s2 = Stage2::new(&mut tables).map_err(SetupError::Stage2)?;
    s2.map(
        &mut tables,
        Ipa(ram_ipa),
        PhysAddr(ram),
        pp.ram_size,
        MemType::Normal,
    )
    .map_err(SetupError::Stage2)?;
    let mut passthrough = Vec::new();
    let mut pcie = None;
    if pp.pci_host_bridge {
        let info = host.pcie.as_ref().ok_or(SetupError::NoPciHostBridge)?;
        let cells = pinfold_hv::dtb::pcie_cells(info);
        s2.map(
            &mut tables,
            Ipa(info.ecam.0),
            PhysAddr(info.ecam.0),
            info.ecam.1,
            MemType::Device,
        )
        .map_err(SetupError::Stage2)?;
        for r in &info.ranges {
            s2.map(
                &mut tables,
                Ipa(r.cpu_addr),
                PhysAddr(r.cpu_addr),
                r.size,
                MemType::Device,
            )
            .map_err(SetupError::Stage2)?;
        }
        passthrough.extend_from_slice(&cells.spis);
        pcie = Some(cells);
    }
    for dev in &pp.devices {
        for r in &dev.mmio {
            s2.map(
                &mut tables,
                Ipa(r.base),
                PhysAddr(r.base),
                r.size,
                MemType::Device,
            )
            .map_err(SetupError::Stage2)?;
        }
        passthrough.extend_from_slice(&dev.spis);
    }
    let vcpu_mpidrs: Vec<u64> = (0..pp.cpus.len() as u64).map(|i| 0x8000_0000 | i).collect();
    let vcpus = pp
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
    let dist = VDist::new(&vcpu_mpidrs, &[GUEST_UART_INTID], &passthrough);
    hvlog!(
        "partition {}: {} vCPUs on CPUs {:?}, {} MiB RAM at PA {:#x}, VMID {}",
        pp.name,
        pp.cpus.len(),
        pp.cpus,
        pp.ram_size >> 20,
        ram,
        index + 1
    );
    Ok(Partition {
        index,
        name: pp.name.clone(),
        plan: pp.clone(),
        ram: PhysAddr(ram),
        ram_ipa,
        ram_size: pp.ram_size,
        pcie,
        vmid: index as u16 + 1,
        stage2_root: s2.root(),
        vcpus,
        vcpu_mpidrs,
        dist: spin::Mutex::new(dist),
        console: spin::Mutex::new(Console {
            pl011: Pl011::new(),
            prefix: LinePrefixer::new(&pp.name),
            ring: ConsoleRing::new(CONSOLE_RING),
        }),
        state: AtomicU8::new(STATE_STOPPED),
        entry_ipa: AtomicU64::new(0),
        dtb_ipa: AtomicU64::new(0),
        started_at: AtomicU64::new(0),
        boot_count: AtomicU64::new(0),
        faults: AtomicU64::new(0),
    })
}

impl Partition {
    /// Physical SPIs this partition owns (devices and the PCIe bridge).
    pub fn passthrough_spis(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .plan
            .devices
            .iter()
            .flat_map(|d| d.spis.iter().copied())
            .collect();
        if let Some(c) = &self.pcie {
            v.extend_from_slice(&c.spis);
        }
        v
    }

    /// Host address of a guest IPA inside this partition's RAM.
    fn host_addr(&self, ipa: u64) -> u64 {
        self.ram.0 + (ipa - self.ram_ipa)
    }

    fn copy_in(&self, ipa: u64, bytes: &[u8]) {
        let dst = self.host_addr(ipa) as *mut u8;
        // SAFETY: callers check that [ipa, ipa + len) lies inside this
        // partition's RAM, which the hypervisor owns and maps at EL2.
        unsafe { core::ptr::copy_nonoverlapping(bytes.as_ptr(), dst, bytes.len()) };
        arch::clean_dcache_range(dst as u64, bytes.len() as u64);
    }

    /// (Re)load the kernel, initrd and a fresh DTB; records the entry point.
    pub fn load(&self) -> Result<(), &'static str> {
        let (plan, payload) = PLAN.get().ok_or("no plan")?;
        let base = self.ram_ipa;
        let ram_end = base + self.ram_size;
        let kernel = plan
            .image(payload, self.plan.kernel.image)
            .ok_or("kernel image missing")?;
        let (load_ipa, footprint) = match self.plan.kernel.format {
            KernelFormat::LinuxImage => {
                let text_offset = le64(kernel, 8);
                let image_size = le64(kernel, 16);
                let (off, size) = if image_size == 0 {
                    (0x8_0000, kernel.len() as u64)
                } else {
                    (text_offset, image_size.max(kernel.len() as u64))
                };
                (base + off, size)
            }
            KernelFormat::Raw => (base + RAW_KERNEL_OFFSET, kernel.len() as u64),
        };
        let dtb_ipa = ram_end - DTB_AREA;
        if load_ipa + footprint > dtb_ipa {
            return Err("kernel does not fit in RAM");
        }
        self.copy_in(load_ipa, kernel);

        let mut initrd_range = None;
        if let Some(index) = self.plan.initrd {
            let initrd = plan.image(payload, index).ok_or("initrd image missing")?;
            let start = (dtb_ipa - initrd.len() as u64) & !0xfff;
            if start < load_ipa + footprint {
                return Err("initrd does not fit in RAM");
            }
            self.copy_in(start, initrd);
            initrd_range = Some((start, start + initrd.len() as u64));
        }

        let seed = next_seed(self.index as u64);
        let mut rng = [0u8; 32];
        for (i, chunk) in rng.chunks_mut(8).enumerate() {
            chunk.copy_from_slice(&splitmix(seed ^ i as u64).to_le_bytes());
        }
        let pcie_node;
        let pcie_props;
        let pcie_name;
        let extra: &[ExtraNode] = match &self.pcie {
            Some(c) => {
                pcie_props = [
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
        let spec = GuestDtbSpec {
            partition: &self.name,
            ram_base: base,
            ram_size: self.ram_size,
            vcpu_count: self.vcpus.len(),
            bootargs: &self.plan.bootargs,
            initrd: initrd_range,
            rng_seed: Some(rng),
            kaslr_seed: Some(splitmix(seed ^ 0xabcd)),
            pmu: false,
            devices: &[],
            extra,
        };
        let dtb = build_guest_dtb(&spec).map_err(|_| "guest DTB generation failed")?;
        if dtb.len() as u64 > DTB_AREA {
            return Err("guest DTB too large");
        }
        self.copy_in(dtb_ipa, &dtb);
        arch::sync_icache_range(self.ram.0, 0);
        self.entry_ipa.store(load_ipa, Ordering::Relaxed);
        self.dtb_ipa.store(dtb_ipa, Ordering::Relaxed);
        Ok(())
    }
}

fn le64(b: &[u8], off: usize) -> u64 {
    let mut v = [0u8; 8];
    if let Some(s) = b.get(off..off + 8) {
        v.copy_from_slice(s);
    }
    u64::from_le_bytes(v)
}

/// Mix the host's seed into the per-partition seeds.
pub fn add_entropy(bytes: &[u8]) {
    let mut acc = SEED.load(Ordering::Relaxed);
    for chunk in bytes.chunks(8) {
        let mut v = [0u8; 8];
        v[..chunk.len()].copy_from_slice(chunk);
        acc = splitmix(acc ^ u64::from_le_bytes(v));
    }
    SEED.store(acc, Ordering::Relaxed);
}

static TOKEN: spin::Once<String> = spin::Once::new();

/// The management API's bearer token: the plan's, or one made from the
/// boot entropy (host rng-seed, counter) and printed on the console.
pub fn management_token() -> &'static str {
    TOKEN.call_once(|| {
        if let Some(t) = all().iter().find_map(|p| p.plan.token.clone()) {
            return t;
        }
        let mut t = String::new();
        for i in 0..2 {
            let v = next_seed(0x7073_7400 + i);
            for b in v.to_be_bytes() {
                let _ = core::fmt::Write::write_fmt(&mut t, format_args!("{b:02x}"));
            }
        }
        t
    })
}

fn next_seed(salt: u64) -> u64 {
    let s = SEED.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
    splitmix(s ^ salt ^ arch::counter())
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
