//! Whole exits driven through a fake of the hardware: the fake keeps list
//! registers as decoded state (deriving ICH_ELRSR), records PPI changes,
//! SGIs sent, distributor operations and log lines, holds host memory in a
//! vector and PCI configuration space in a map, and traces configuration
//! writes, RAM writes and RAM zeroing in the order they happen, so that
//! nothing here leans on a register encoding.

use super::*;
use crate::dtb::{GicInfo, HostInfo};
use crate::irqchip::IrqChipCaps;
use crate::memmap::FreeMemory;
use crate::percpu::Cpu;
use crate::ratelimit::BURST;
use crate::stage2::TableMemory;
use crate::system::{BootInputs, System};
use crate::trap::SysRegAccess;
use crate::vgic::lr::{decode_lr, encode_lr, LrState};
use alloc::boxed::Box;
use alloc::string::{String, ToString};
use alloc::vec;
use alloc::vec::Vec;
use pinfold_config::{ConsolePlan, KernelFormat, KernelPlan, PartitionPlan, Plan};
use pinfold_vboard::{fid, vcpu_mpidr, GUEST_GICD_BASE, GUEST_GICR_BASE, GUEST_UART_BASE};

const RAM_BASE: u64 = 0x4000_0000;
const LR_COUNT: usize = 4;

struct FakeHw {
    lrs: [Option<(VirtIrq, LrState)>; LR_COUNT],
    underflow: bool,
    caps: IrqChipCaps,
    ppi_enabled: u32,
    phys: PpiBits,
    ppi_changes: Vec<PpiStateChange>,
    sgis: Vec<(u64, u32)>,
    spi_ops: Vec<SpiOp>,
    /// IRS software error syndromes `virs_swerr` hands out, oldest first.
    swerrs: Vec<u64>,
    /// `virs_rearm` calls: (VM, vPE, doorbell CPU).
    rearmed: Vec<(u16, u16, usize)>,
    /// `virs_pend` calls: GIC VDPEND operands.
    pended: Vec<u64>,
    /// `virs_apply` calls: (VM, steps).
    virs_applied: Vec<(u16, Vec<crate::vgic5::VirsOp>)>,
    deactivated: Vec<u32>,
    log: Vec<String>,
    lines: Vec<Vec<u8>>,
    now: u64,
    mem: Vec<u8>,
    pmu: Vec<(crate::pmu::PmuReg, u64)>,
    icache_syncs: u32,
    /// The CPU this fake runs on (`Hw::cpu_index`).
    cpu: usize,
    tables: FakeTables,
    /// Every `zero` (scrub) call.
    zeroed: Vec<(u64, u64)>,
    /// The EL2 timer's deadline as last set.
    wakeup: Option<u64>,
    /// Sparse host RAM (4 KiB pages by PA, absent = zero) instead of the
    /// wrapping `mem`: for tests that must tell two ranges apart.
    pages: Option<alloc::collections::BTreeMap<u64, Vec<u8>>>,
    /// A fake SMMUv3 (`smmu::tests`), for the tests that program one.
    smmu: Option<crate::smmu::tests::Rig>,
    /// A second fake SMMUv3, at [`SECOND_SMMU`] (the two-SMMU tests).
    smmu2: Option<crate::smmu::tests::Rig>,
    /// This CPU's GICv4 VLPI frame, when the test gives it one.
    vlpi: Option<FakeVlpiFrame>,
    /// This CPU's GICv4.1 frame over the model (`vsgi_exit_tests`).
    v41: Option<vsgi_exit::FakeV41>,
    /// The GICv4.1 model that sees every RAM write too (the VCONF copy
    /// the GIC reads, `vsgi_exit_tests`).
    model_mem: Option<alloc::sync::Arc<spin::Mutex<pinfold_gicmodel::Model>>>,
    /// Every `zero_table` call.
    tables_zeroed: Vec<(u64, usize)>,
    /// PCI configuration space by ECAM address, 32-bit words (absent:
    /// nothing answers, all-ones).
    config: alloc::collections::BTreeMap<u64, u32>,
    /// Configuration writes, RAM writes and RAM zeroing, in the order they
    /// happened (what must come before what).
    trace: Vec<Traced>,
    /// The resident GICv5 vCPU's ICH_PPI_*_EL2 state (`Hw::vppi_read`).
    vppi: alloc::collections::BTreeMap<crate::vgic5::ppitrap::IchPpiReg, u64>,
}

/// One entry of [`FakeHw::trace`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Traced {
    ConfigWrite { pa: u64, width: u8, value: u32 },
    RamWrite { pa: u64, len: u64 },
    Zero { pa: u64, len: u64 },
}

/// A redistributor's VLPI frame: every write in order; Dirty clears at once.
#[derive(Default)]
struct FakeVlpiFrame {
    /// (true = GICR_VPENDBASER, false = GICR_VPROPBASER, value).
    writes: Vec<(bool, u64)>,
    vpendbaser: u64,
}

impl crate::vgic::v40::V40Hw for FakeVlpiFrame {
    fn write_vpropbaser(&mut self, value: u64) {
        self.writes.push((false, value));
    }
    fn read_vpendbaser(&mut self) -> u64 {
        self.vpendbaser
    }
    fn write_vpendbaser(&mut self, value: u64) {
        self.writes.push((true, value));
        self.vpendbaser = value;
    }
}

impl FakeHw {
    fn new() -> Self {
        FakeHw {
            lrs: [None; LR_COUNT],
            underflow: false,
            caps: IrqChipCaps {
                percpu_state_lockless: true,
            },
            ppi_enabled: 0,
            phys: PpiBits::default(),
            ppi_changes: Vec::new(),
            sgis: Vec::new(),
            spi_ops: Vec::new(),
            swerrs: Vec::new(),
            rearmed: Vec::new(),
            pended: Vec::new(),
            virs_applied: Vec::new(),
            deactivated: Vec::new(),
            log: Vec::new(),
            lines: Vec::new(),
            now: 1,
            mem: vec![0; 4 << 20],
            pmu: Vec::new(),
            tables: FakeTables {
                next: 0x2000_0000,
                tables: Vec::new(),
            },
            icache_syncs: 0,
            cpu: 0,
            zeroed: Vec::new(),
            wakeup: None,
            pages: None,
            smmu: None,
            smmu2: None,
            vlpi: None,
            v41: None,
            model_mem: None,
            tables_zeroed: Vec::new(),
            config: alloc::collections::BTreeMap::new(),
            trace: Vec::new(),
            vppi: Default::default(),
        }
    }

    /// Puts a function at ECAM address `ecam`: its IDs, class code,
    /// COMMAND and one capability, MSI at 0x40 with MSI Enable set (as its
    /// owner's driver left them: only a reset clears MSI Enable).
    fn put_function(&mut self, ecam: u64, vendor: u16, device: u16, class: u32, command: u16) {
        self.config
            .insert(ecam, u32::from(vendor) | u32::from(device) << 16);
        // STATUS: Capabilities List.
        self.config.insert(ecam + 4, u32::from(command) | 1 << 20);
        self.config.insert(ecam + 8, class << 8);
        self.config.insert(ecam + 0xc, 0);
        self.config.insert(ecam + 0x34, 0x40);
        self.config.insert(ecam + 0x40, 0x05 | 1 << 16);
    }

    /// A fake whose RAM is sparse: every PA its own byte.
    pub(super) fn sparse() -> Self {
        FakeHw {
            pages: Some(alloc::collections::BTreeMap::new()),
            ..FakeHw::new()
        }
    }

    /// The non-zero bytes the sparse RAM holds in `[base, base + len)`.
    fn nonzero_in(&self, base: u64, len: u64) -> usize {
        let pages = self.pages.as_ref().expect("a sparse fake");
        pages
            .range(base & !0xfff..base + len)
            .map(|(&at, page)| {
                page.iter()
                    .enumerate()
                    .filter(|&(i, &b)| b != 0 && (base..base + len).contains(&(at + i as u64)))
                    .count()
            })
            .sum()
    }

    fn on_cpu(cpu: usize) -> Self {
        FakeHw {
            cpu,
            ..FakeHw::new()
        }
    }

    fn injected(&self) -> Vec<u32> {
        self.lrs
            .iter()
            .flatten()
            .filter(|(_, s)| *s != LrState::Invalid)
            .map(|(i, _)| i.intid)
            .collect()
    }

    fn log_has(&self, needle: &str) -> bool {
        self.log.iter().any(|l| l.contains(needle))
    }
}

impl PerCpuIrqChip for FakeHw {
    fn caps(&self) -> IrqChipCaps {
        self.caps
    }
    fn apply_ppi(&mut self, change: PpiStateChange) {
        if let PpiStateChange::Enable(i, on) = change {
            if on {
                self.ppi_enabled |= 1 << i;
            } else {
                self.ppi_enabled &= !(1 << i);
            }
        }
        self.ppi_changes.push(change);
    }
    fn ppi_bits(&mut self) -> PpiBits {
        self.phys
    }
    fn ack(&mut self) -> u32 {
        1023
    }
    fn priority_drop(&mut self, _: u32) {}
    fn deactivate(&mut self, intid: u32) {
        self.deactivated.push(intid);
    }
    fn send_sgi(&mut self, mpidr: u64, intid: u32) {
        self.sgis.push((mpidr, intid));
    }
}

/// Host RAM at PA 0x4000_0000.. in the fake (the partition's RAM starts at
/// the top of the host's, so offsets are taken from the end).
const HOST_RAM: (u64, u64) = (0x4000_0000, 4 << 30);

impl HostMemory for FakeHw {
    fn write(&mut self, pa: PhysAddr, bytes: &[u8]) {
        self.trace.push(Traced::RamWrite {
            pa: pa.0,
            len: bytes.len() as u64,
        });
        if let Some(m) = &self.model_mem {
            let mut m = m.lock();
            for (i, &b) in bytes.iter().enumerate() {
                m.mem_write_byte(pa.0 + i as u64, b);
            }
        }
        if let Some(pages) = &mut self.pages {
            for (i, &b) in bytes.iter().enumerate() {
                let at = pa.0 + i as u64;
                pages.entry(at & !0xfff).or_insert_with(|| vec![0; 4096])[(at & 0xfff) as usize] =
                    b;
            }
            return;
        }
        let off = (pa.0 % self.mem.len() as u64) as usize;
        let end = (off + bytes.len()).min(self.mem.len());
        self.mem[off..end].copy_from_slice(&bytes[..end - off]);
    }
    fn read(&self, pa: PhysAddr, out: &mut [u8]) {
        if let Some(pages) = &self.pages {
            for (i, b) in out.iter_mut().enumerate() {
                let at = pa.0 + i as u64;
                *b = pages
                    .get(&(at & !0xfff))
                    .map_or(0, |p| p[(at & 0xfff) as usize]);
            }
            return;
        }
        let off = (pa.0 % self.mem.len() as u64) as usize;
        for (i, b) in out.iter_mut().enumerate() {
            *b = self.mem.get(off + i).copied().unwrap_or(0);
        }
    }
    fn clean_for_guest(&mut self, _: PhysAddr, _: u64) {}
    fn sync_instructions(&mut self) {
        self.icache_syncs += 1;
    }
    fn zero(&mut self, pa: PhysAddr, len: u64) {
        self.zeroed.push((pa.0, len));
        self.trace.push(Traced::Zero { pa: pa.0, len });
        if let Some(pages) = &mut self.pages {
            let end = pa.0 + len;
            for (&at, page) in pages.range_mut(pa.0 & !0xfff..end) {
                for (i, b) in page.iter_mut().enumerate() {
                    if (pa.0..end).contains(&(at + i as u64)) {
                        *b = 0;
                    }
                }
            }
            return;
        }
        let n = len.min(self.mem.len() as u64) as usize;
        let zeros = vec![0u8; n];
        self.write(pa, &zeros);
    }
}

impl Hw for FakeHw {
    fn cpu_index(&self) -> usize {
        self.cpu
    }
    fn tables(&mut self) -> &mut dyn TableMemory {
        &mut self.tables
    }
    fn lr_count(&self) -> usize {
        LR_COUNT
    }
    fn read_lr(&self, n: usize) -> u64 {
        self.lrs[n].map_or(0, |(irq, state)| encode_lr(&irq, state))
    }
    fn write_lr(&mut self, n: usize, value: u64) {
        let (irq, state) = decode_lr(value);
        self.lrs[n] = if value == 0 { None } else { Some((irq, state)) };
    }
    fn empty_lr_mask(&self) -> u16 {
        let mut m = 0;
        for (n, lr) in self.lrs.iter().enumerate() {
            let empty = match lr {
                None => true,
                Some((irq, LrState::Invalid)) => irq.hw_intid.is_some() || !irq.eoi_maintenance,
                Some(_) => false,
            };
            if empty {
                m |= 1 << n;
            }
        }
        m
    }
    fn set_underflow_irq(&mut self, enable: bool) {
        self.underflow = enable;
    }
    fn spi(&mut self, _: LockPath, op: SpiOp) {
        self.spi_ops.push(op);
    }
    fn read_id_reg(&self, _: SysRegId) -> u64 {
        0x1111_1111_1111_1111
    }
    fn vppi_read(&mut self, reg: crate::vgic5::ppitrap::IchPpiReg) -> u64 {
        self.vppi.get(&reg).copied().unwrap_or(0)
    }
    fn vppi_write(&mut self, reg: crate::vgic5::ppitrap::IchPpiReg, value: u64) {
        self.vppi.insert(reg, value);
    }
    fn pmu_read(&mut self, reg: crate::pmu::PmuReg) -> u64 {
        match reg {
            crate::pmu::PmuReg::PMCR_EL0 => 6 << 11,
            _ => self
                .pmu
                .iter()
                .rev()
                .find(|w| w.0 == reg)
                .map_or(0, |w| w.1),
        }
    }
    fn pmu_write(&mut self, reg: crate::pmu::PmuReg, value: u64) {
        self.pmu.push((reg, value));
    }
    fn vbar_el1(&self) -> u64 {
        0x4008_0000
    }
    fn now(&self) -> u64 {
        self.now
    }
    fn counter_frequency(&self) -> u64 {
        1000
    }
    fn console_line(&mut self, _: u32, line: &[u8]) {
        self.lines.push(line.to_vec());
    }
    fn log(&mut self, args: fmt::Arguments) {
        self.log.push(args.to_string());
    }
    fn report(&mut self, args: fmt::Arguments) {
        self.log.push(alloc::format!("report: {args}"));
    }
    fn set_wakeup(&mut self, at: Option<u64>) {
        self.wakeup = at;
    }
    fn smmu_io(
        &mut self,
        base: u64,
    ) -> Option<(
        &mut dyn crate::smmu::SmmuRegs,
        &mut dyn crate::smmu::DmaMemory,
    )> {
        let rig = match base {
            0x905_0000 => self.smmu.as_mut()?,
            SECOND_SMMU => self.smmu2.as_mut()?,
            other => panic!("{other:#x} is not an SMMU the host bridge's iommu-map names"),
        };
        Some((&mut rig.regs, &mut rig.mem))
    }
    fn vlpi_frame(&mut self) -> Option<&mut dyn crate::vgic::v40::V40Hw> {
        self.vlpi
            .as_mut()
            .map(|f| f as &mut dyn crate::vgic::v40::V40Hw)
    }
    fn v41(&mut self) -> Option<&mut dyn crate::vgic::v41::V41Hw> {
        self.v41
            .as_mut()
            .map(|f| f as &mut dyn crate::vgic::v41::V41Hw)
    }
    fn zero_table(&mut self, pa: u64, bytes: usize) {
        self.tables_zeroed.push((pa, bytes));
    }
    fn virs_swerr(&mut self) -> Option<u64> {
        (!self.swerrs.is_empty()).then(|| self.swerrs.remove(0))
    }
    fn virs_rearm(&mut self, vm: u16, vpe: u16, cpu: usize) {
        self.rearmed.push((vm, vpe, cpu));
    }
    fn virs_pend(&mut self, op: u64) {
        self.pended.push(op);
    }
    fn virs_apply(&mut self, vm: u16, ops: &[crate::vgic5::VirsOp]) {
        self.virs_applied.push((vm, ops.to_vec()));
    }
    fn config_read(&mut self, pa: u64, width: u8) -> u32 {
        let word = self.config.get(&(pa & !3)).copied().unwrap_or(u32::MAX);
        let shift = 8 * (pa & 3) as u32;
        (word >> shift) & (u32::MAX >> (32 - 8 * u32::from(width)))
    }
    fn config_write(&mut self, pa: u64, width: u8, value: u32) {
        self.trace.push(Traced::ConfigWrite { pa, width, value });
        let Some(word) = self.config.get_mut(&(pa & !3)) else {
            return;
        };
        let shift = 8 * (pa & 3) as u32;
        let mask = (u32::MAX >> (32 - 8 * u32::from(width))) << shift;
        *word = (*word & !mask) | ((value << shift) & mask);
    }
}

struct FakeTables {
    next: u64,
    tables: Vec<(u64, [u64; 1024])>,
}

impl FakeTables {
    fn live(&self) -> usize {
        self.tables.len()
    }
}

impl TableMemory for FakeTables {
    fn alloc_table(&mut self) -> Option<PhysAddr> {
        self.next += 0x2000;
        self.tables.push((self.next, [0; 1024]));
        Some(PhysAddr(self.next))
    }
    fn alloc_root(&mut self) -> Option<PhysAddr> {
        self.alloc_table()
    }
    fn read(&self, table: PhysAddr, index: usize) -> u64 {
        self.tables
            .iter()
            .find(|t| t.0 == table.0)
            .map_or(0, |t| t.1[index])
    }
    fn write(&mut self, table: PhysAddr, index: usize, value: u64) {
        if let Some(t) = self.tables.iter_mut().find(|t| t.0 == table.0) {
            t.1[index] = value;
        }
    }
    fn free_table(&mut self, table: PhysAddr) {
        self.tables.retain(|t| t.0 != table.0);
    }
    fn free_root(&mut self, root: PhysAddr) {
        self.tables.retain(|t| t.0 != root.0);
    }
}

fn partition_plan(name: &str, cpus: &[u32], management: bool) -> PartitionPlan {
    PartitionPlan {
        name: name.into(),
        cpus: cpus.to_vec(),
        ram_size: 64 << 20,
        kernel: KernelPlan {
            image: 0,
            format: KernelFormat::Raw,
        },
        initrd: None,
        bootargs: "console=ttyAMA0".into(),
        console: ConsolePlan { input: false },
        devices: Vec::new(),
        management,
        pci_host_bridge: false,
        pci: Vec::new(),
        token_sha256: Some(pinfold_config::bundle::token_digest(b"secret")),
        autostart: true,
        pmu: true,
        lifecycle: Default::default(),
        config_store: None,
        api_tls: true,
        gic: pinfold_config::GicSetting::Auto,
    }
}

fn host(cpus: usize) -> HostInfo {
    HostInfo {
        memory: vec![HOST_RAM],
        reserved: Vec::new(),
        cpus: (0..cpus as u64).map(|i| 0x100 + i).collect(),
        gic: GicInfo::described(
            (0x0800_0000, 0x1_0000),
            vec![(0x080A_0000, 0xF6_0000)],
            None,
            Some(25),
            Vec::new(),
        ),
        timer: None,
        uart: None,
        psci: None,
        pcie: None,
        rng_seed: None,
        kaslr_seed: None,
        initrd: None,
        model: None,
        devices: Vec::new(),
        numa: Default::default(),
    }
}

/// alpha: vCPUs 0, 1 on CPUs 1, 2; beta: vCPU 0 on CPU 3; mgmt on CPU 0.
fn system() -> &'static System {
    system_with(|_| {})
}

fn system_with(change: impl FnOnce(&mut Plan)) -> &'static System {
    system_clocked(change, None)
}

fn system_clocked(
    change: impl FnOnce(&mut Plan),
    wall_clock: Option<crate::clock::WallClock>,
) -> &'static System {
    system_on(change, wall_clock, Default::default())
}

/// The standard system on a host whose isolation view is `resources`.
fn system_on(
    change: impl FnOnce(&mut Plan),
    wall_clock: Option<crate::clock::WallClock>,
    resources: pinfold_config::isolation::HostResources,
) -> &'static System {
    system_on_host(change, wall_clock, resources, host(4))
}

/// [`system_on`] on `host`.
fn system_on_host(
    change: impl FnOnce(&mut Plan),
    wall_clock: Option<crate::clock::WallClock>,
    resources: pinfold_config::isolation::HostResources,
    host: HostInfo,
) -> &'static System {
    system_with_functions(change, wall_clock, resources, host, Vec::new())
}

/// [`system_on_host`] with `pci_functions` found behind its host bridge.
fn system_with_functions(
    change: impl FnOnce(&mut Plan),
    wall_clock: Option<crate::clock::WallClock>,
    resources: pinfold_config::isolation::HostResources,
    host: HostInfo,
    pci_functions: Vec<crate::vpci::HostFunction>,
) -> &'static System {
    system_and_tables(change, wall_clock, resources, host, pci_functions, None).0
}

/// [`system_with_functions`] with the physical ITS the platform set up,
/// and the memory its stage-2 tables are in.
fn system_and_tables(
    change: impl FnOnce(&mut Plan),
    wall_clock: Option<crate::clock::WallClock>,
    resources: pinfold_config::isolation::HostResources,
    host: HostInfo,
    pci_functions: Vec<crate::vpci::HostFunction>,
    its: Option<crate::its::HostIts>,
) -> (&'static System, FakeTables) {
    let mut plan = Plan {
        partitions: vec![
            partition_plan("alpha", &[1, 2], false),
            partition_plan("beta", &[3], false),
            partition_plan("mgmt", &[0], true),
        ],
        images: vec![pinfold_config::ImageRef {
            offset: 0,
            size: 16,
            sha256: [0; 32],
        }],
    };
    change(&mut plan);
    let payload: &'static [u8] = Box::leak(vec![0xAA; 16].into_boxed_slice());
    let locks = Box::leak(Box::new(crate::lockstat::LockStat::new()));
    let free = FreeMemory::new(&[HOST_RAM], &[]);
    let mut tables = FakeTables {
        next: 0x1000_0000,
        tables: Vec::new(),
    };
    let sys = System::new(
        BootInputs {
            host,
            plan,
            payload,
            free,
            resources,
            tables: &mut tables,
            locks,
            boot_counter: 1,
            wall_clock,
            entropy: crate::entropy::EntropyInputs {
                dt_rng_seed: Some(&[0x5e; 32]),
                ..Default::default()
            },
            version: "test",
            pci_functions,
            its,
        },
        &mut |_| {},
    );
    let sys: &'static System = Box::leak(Box::new(sys));
    for p in sys.partitions() {
        p.set_state(State::Running, 0);
    }
    (sys, tables)
}

#[path = "runtime_tests.rs"]
mod runtime;

#[path = "its_exit_tests.rs"]
mod its_exit;

#[path = "vsgi_exit_tests.rs"]
mod vsgi_exit;

/// The fake SMMU's model, told `p`'s RAM (its walks fault outside it).
fn smmu_model_with_ram(
    hw: &FakeHw,
    p: &Partition,
) -> alloc::rc::Rc<core::cell::RefCell<crate::smmu::tests::Model>> {
    let model = hw.smmu.as_ref().unwrap().model.clone();
    model
        .borrow_mut()
        .ram
        .insert(p.vmid, (p.ram_ipa, p.ram_size));
    model
}

/// The host with a PCIe host bridge behind an SMMUv3 (as QEMU 10's
/// `virt,iommu=smmuv3`), mgmt owning the bridge.
fn smmu_system() -> (&'static System, FakeHw) {
    smmu_system_with(mgmt_owns_the_bridge, Vec::new())
}

/// A system on `host` whose bridge the management partition owns, no
/// functions found behind it.
fn mgmt_bridge_system(host: HostInfo) -> &'static System {
    system_with_functions(
        mgmt_owns_the_bridge,
        None,
        Default::default(),
        host,
        Vec::new(),
    )
}

fn mgmt_owns_the_bridge(plan: &mut Plan) {
    for p in &mut plan.partitions {
        p.pci_host_bridge = p.management;
    }
}

/// The plan's partition 0 (alpha) given the PCI function 00:02.0.
pub(super) fn alpha_gets_00_02_0(plan: &mut Plan) {
    plan.partitions[0].pci = alloc::vec![pinfold_config::plan::PciAddress {
        segment: 0,
        bus: 0,
        device: 2,
        function: 0,
    }];
}

/// [`smmu_system`] with the plan changed by `change` and `functions`
/// found behind the bridge (one 32-bit memory window for their BARs).
fn smmu_system_with(
    change: impl FnOnce(&mut Plan),
    functions: Vec<crate::vpci::HostFunction>,
) -> (&'static System, FakeHw) {
    smmu_system_of(change, functions, crate::dtb::SmmuModel::Generic)
}

/// [`smmu_system_with`], the host describing its SMMU as `model` (the
/// fake SMMU a generic one: a test makes it match).
fn smmu_system_of(
    change: impl FnOnce(&mut Plan),
    functions: Vec<crate::vpci::HostFunction>,
    model: crate::dtb::SmmuModel,
) -> (&'static System, FakeHw) {
    use crate::dtb::{HostDevice, PciIommuMap, PcieInfo};
    let mut h = host(4);
    h.pcie = Some(PcieInfo {
        ecam: (0x40_1000_0000, 0x1000_0000),
        bus_range: (0, 0xff),
        ranges: crate::acpi::board::qemu_virt_pci_ranges(),
        interrupt_map: Vec::new(),
        interrupt_map_mask: [0; 4],
        node_path: "/pcie@10000000".into(),
        msi_map: alloc::vec::Vec::new(),
        iommu_map: vec![PciIommuMap {
            rid_base: 0,
            iommu_base: 0x905_0000,
            sid_base: 0,
            len: 0x1_0000,
        }],
    });
    h.devices.push(HostDevice {
        path: "/smmuv3@9050000".into(),
        compatible: vec!["arm,smmu-v3".into()],
        regs: vec![(0x905_0000, 0x2_0000)],
        spis: vec![106, 107, 108, 109],
        enabled: true,
        smmu_model: model,
    });
    let sys = system_with_functions(change, None, Default::default(), h, functions);
    let mut hw = FakeHw::new();
    hw.smmu = Some(crate::smmu::tests::rig());
    (sys, hw)
}

#[test]
fn an_smmu_the_host_describes_as_a_cavium_cn99xx_is_driven_through_page_0_only() {
    let (sys, mut hw) = smmu_system_of(|_| {}, Vec::new(), crate::dtb::SmmuModel::CaviumCn99xx);
    let model = hw.smmu.as_ref().unwrap().model.clone();
    model.borrow_mut().page0_only = true;

    assert!(sys.smmu_init(&mut hw, crate::stage2::vtcr_el2(44)).unwrap());
    // A stream nobody owns faults: the record is read and acknowledged.
    model.borrow_mut().dma(0x0008, 0x4000_0000, false);
    let events = sys.smmu_poll(&mut hw);

    assert_eq!(events, 1);
    assert_eq!(model.borrow().page1_touched, 0);
    assert!(hw.log_has("C_BAD_STE from stream 0x8"), "{:?}", hw.log);
}

#[test]
fn a_pci_partitions_function_dmas_through_its_own_stage2_not_the_bridge_owners() {
    use crate::pci::Bdf;
    use crate::smmu::tests::Dma;
    use crate::vpci::{BarSpace, HostBar, HostFunction};
    let nic = Bdf {
        bus: 0,
        dev: 2,
        func: 0,
    };
    let (sys, mut hw) = smmu_system_with(
        alpha_gets_00_02_0,
        alloc::vec![HostFunction {
            bdf: nic,
            vendor: 0x1af4,
            device: 0x1041,
            class: 0x02_0000,
            bridge: false,
            pin: 0,
            bars: alloc::vec![HostBar {
                reg: 1,
                space: BarSpace::Mem32,
                prefetchable: false,
                size: 0x1000,
            }],
            caps: Vec::new(),
            msi_vectors: 3,
            vf: None,
        }],
    );
    assert!(sys.smmu_init(&mut hw, crate::stage2::vtcr_el2(44)).unwrap());
    let parts = sys.partitions();
    let alpha = parts.iter().find(|p| p.name == "alpha").unwrap();
    assert!(alpha.vpci.is_some(), "alpha got its function");
    assert_eq!(sys.smmu_bind(&mut hw, alpha, &[nic]).unwrap(), 1);
    // 00:02.0 is stream 0x10: alpha's VMID and root, nobody else's.
    let model = smmu_model_with_ram(&hw, alpha);
    assert_eq!(
        model.borrow_mut().dma(0x10, alpha.ram_ipa + 0x1000, false),
        Dma::Done {
            vmid: alpha.vmid,
            root: alpha.stage2_root.0
        }
    );
    // Another partition cannot bind alpha's function to its own tables.
    let beta = parts.iter().find(|p| p.name == "beta").unwrap();
    let _ = sys.smmu_bind(&mut hw, beta, &[nic]);
    assert_eq!(
        model.borrow_mut().dma(0x10, alpha.ram_ipa + 0x1000, false),
        Dma::Done {
            vmid: alpha.vmid,
            root: alpha.stage2_root.0
        }
    );
}

#[test]
fn the_bridge_owners_functions_dma_through_its_stage2_and_nobody_elses() {
    use crate::pci::Bdf;
    use crate::smmu::tests::Dma;
    let (sys, mut hw) = smmu_system();
    assert!(sys.smmu_init(&mut hw, crate::stage2::vtcr_el2(44)).unwrap());
    let mgmt = sys
        .partitions()
        .into_iter()
        .find(|p| p.plan.management)
        .unwrap();
    let nic = Bdf {
        bus: 0,
        dev: 1,
        func: 0,
    };
    assert_eq!(sys.smmu_bind(&mut hw, &mgmt, &[nic]).unwrap(), 1);
    let model = smmu_model_with_ram(&hw, &mgmt);
    // 00:01.0 is stream 8: it translates with mgmt's VMID and root.
    assert_eq!(
        model.borrow_mut().dma(8, mgmt.ram_ipa + 0x1000, false),
        Dma::Done {
            vmid: mgmt.vmid,
            root: mgmt.stage2_root.0
        }
    );
    // 00:02.0 was not found behind the bridge: it aborts.
    assert_eq!(
        model.borrow_mut().dma(0x10, mgmt.ram_ipa, false),
        Dma::Aborted
    );
    // A DMA outside mgmt's RAM is stopped and counted as mgmt's fault.
    let before = mgmt.faults.load(core::sync::atomic::Ordering::Relaxed);
    let foreign = mgmt.ram_ipa + mgmt.ram_size + 0x2000;
    assert_eq!(model.borrow_mut().dma(8, foreign, false), Dma::Aborted);
    assert_eq!(sys.smmu_poll(&mut hw), 1);
    assert_eq!(
        mgmt.faults.load(core::sync::atomic::Ordering::Relaxed),
        before + 1
    );
    let line = hw
        .log
        .iter()
        .find(|l| l.contains("DMA fault"))
        .expect("a fault line");
    assert!(
        line.contains("partition mgmt: DMA fault: F_TRANSLATION stream 0x8 (00:01.0) write at IPA"),
        "{line}"
    );
    assert!(line.contains(&alloc::format!("{foreign:#x}")), "{line}");
    assert_eq!(sys.smmu_stats(), Some((1, 0, 1)));
    // Released (deleted or changed): the stream aborts again.
    sys.smmu_release(&mut hw, mgmt.index);
    assert_eq!(
        model.borrow_mut().dma(8, mgmt.ram_ipa + 0x1000, false),
        Dma::Aborted
    );
    assert_eq!(sys.smmu_stats(), Some((1, 0, 0)));
}

/// The frame of the second SMMU of the two-SMMU tests.
const SECOND_SMMU: u64 = 0x90a_0000;

/// A virtio-net function at `bdf` with one 4 KiB 32-bit BAR.
pub(super) fn nic_function(bdf: crate::pci::Bdf) -> crate::vpci::HostFunction {
    use crate::vpci::{BarSpace, HostBar, HostFunction};
    HostFunction {
        bdf,
        vendor: 0x1af4,
        device: 0x1041,
        class: 0x02_0000,
        bridge: false,
        pin: 0,
        bars: alloc::vec![HostBar {
            reg: 1,
            space: BarSpace::Mem32,
            prefetchable: false,
            size: 0x1000,
        }],
        caps: Vec::new(),
        msi_vectors: 3,
        vf: None,
    }
}

#[test]
fn with_two_smmus_each_functions_stream_goes_to_the_smmu_its_requester_id_maps_to() {
    use crate::dtb::{HostDevice, PciIommuMap, PcieInfo};
    use crate::pci::Bdf;
    use crate::smmu::tests::Dma;
    let bdf = |dev| Bdf {
        bus: 0,
        dev,
        func: 0,
    };
    let address = |device| pinfold_config::plan::PciAddress {
        segment: 0,
        bus: 0,
        device,
        function: 0,
    };
    let mut h = host(4);
    // Requester IDs 0-0xf (00:00.0-00:01.7) go to the SMMU at 0x905_0000
    // as streams 0-0xf; the rest of the bus range to SECOND_SMMU, stream
    // 0x100 + (RID - 0x10).
    h.pcie = Some(PcieInfo {
        ecam: (0x40_1000_0000, 0x1000_0000),
        bus_range: (0, 0xff),
        ranges: crate::acpi::board::qemu_virt_pci_ranges(),
        interrupt_map: Vec::new(),
        interrupt_map_mask: [0; 4],
        node_path: "/pcie@10000000".into(),
        msi_map: alloc::vec::Vec::new(),
        iommu_map: vec![
            PciIommuMap {
                rid_base: 0,
                iommu_base: 0x905_0000,
                sid_base: 0,
                len: 0x10,
            },
            PciIommuMap {
                rid_base: 0x10,
                iommu_base: SECOND_SMMU,
                sid_base: 0x100,
                len: 0xfff0,
            },
        ],
    });
    for (path, base) in [
        ("/smmuv3@9050000", 0x905_0000),
        ("/smmuv3@90a0000", SECOND_SMMU),
    ] {
        h.devices.push(HostDevice {
            path: path.into(),
            compatible: vec!["arm,smmu-v3".into()],
            regs: vec![(base, 0x2_0000)],
            spis: vec![],
            enabled: true,
            smmu_model: Default::default(),
        });
    }
    let sys = system_with_functions(
        |plan| {
            plan.partitions[0].pci = alloc::vec![address(2)];
            plan.partitions[1].pci = alloc::vec![address(1)];
        },
        None,
        Default::default(),
        h,
        alloc::vec![nic_function(bdf(1)), nic_function(bdf(2))],
    );
    let mut hw = FakeHw::new();
    hw.smmu = Some(crate::smmu::tests::rig());
    hw.smmu2 = Some(crate::smmu::tests::rig());

    assert!(sys.smmu_init(&mut hw, crate::stage2::vtcr_el2(44)).unwrap());
    assert_eq!(sys.smmu_frames(), [0x905_0000, SECOND_SMMU]);
    let first = hw.smmu.as_ref().unwrap().model.clone();
    let second = hw.smmu2.as_ref().unwrap().model.clone();
    assert_ne!(first.borrow().cr0ack, 0, "the first SMMU is enabled");
    assert_ne!(second.borrow().cr0ack, 0, "the second SMMU is enabled");
    let parts = sys.partitions();
    let alpha = parts.iter().find(|p| p.name == "alpha").unwrap();
    let beta = parts.iter().find(|p| p.name == "beta").unwrap();
    for p in [alpha, beta] {
        for m in [&first, &second] {
            m.borrow_mut().ram.insert(p.vmid, (p.ram_ipa, p.ram_size));
        }
    }

    // alpha's 00:02.0 (RID 0x10) is stream 0x100 of the second SMMU only.
    assert_eq!(sys.smmu_bind(&mut hw, alpha, &[bdf(2)]).unwrap(), 1);
    let alpha_done = Dma::Done {
        vmid: alpha.vmid,
        root: alpha.stage2_root.0,
    };
    assert_eq!(
        second
            .borrow_mut()
            .dma(0x100, alpha.ram_ipa + 0x1000, false),
        alpha_done
    );
    assert_eq!(
        first.borrow_mut().dma(0x10, alpha.ram_ipa + 0x1000, false),
        Dma::Aborted,
        "not bound on the first SMMU"
    );
    // beta's 00:01.0 (RID 8) is stream 8 of the first SMMU only.
    assert_eq!(sys.smmu_bind(&mut hw, beta, &[bdf(1)]).unwrap(), 1);
    assert_eq!(
        first.borrow_mut().dma(8, beta.ram_ipa + 0x1000, false),
        Dma::Done {
            vmid: beta.vmid,
            root: beta.stage2_root.0
        }
    );
    assert_eq!(
        second.borrow_mut().dma(8, beta.ram_ipa, false),
        Dma::Aborted
    );

    // The two probes of unbound streams above were aborted and recorded
    // (one event on each SMMU), no partition's fault.
    assert_eq!(sys.smmu_poll(&mut hw), 2);
    assert_eq!(alpha.faults.load(core::sync::atomic::Ordering::Relaxed), 0);
    // alpha's device aims at beta's RAM: stopped by the second SMMU and
    // counted as alpha's fault.
    let before = alpha.faults.load(core::sync::atomic::Ordering::Relaxed);
    assert_eq!(
        second.borrow_mut().dma(0x100, beta.ram_ipa + 0x1000, true),
        Dma::Aborted
    );
    assert_eq!(sys.smmu_poll(&mut hw), 1);
    assert_eq!(
        alpha.faults.load(core::sync::atomic::Ordering::Relaxed),
        before + 1
    );
    assert!(hw.log_has("partition alpha: DMA fault: F_TRANSLATION stream 0x100 (00:02.0) read"));
    assert_eq!(
        sys.smmu_stats(),
        Some((3, 0, 2)),
        "events and streams summed"
    );

    // Deleting alpha releases its stream on the second SMMU; beta keeps its.
    sys.smmu_release(&mut hw, alpha.index);
    assert_eq!(
        second
            .borrow_mut()
            .dma(0x100, alpha.ram_ipa + 0x1000, false),
        Dma::Aborted
    );
    assert!(matches!(
        first.borrow_mut().dma(8, beta.ram_ipa, false),
        Dma::Done { .. }
    ));
    assert_eq!(sys.smmu_stats(), Some((3, 0, 1)));
}

#[test]
fn an_iommu_map_naming_an_smmu_the_host_lacks_programs_the_others_and_says_so() {
    use crate::dtb::PciIommuMap;
    let (sys, mut hw) = smmu_system_with(mgmt_owns_the_bridge, Vec::new());
    // The same host with a second map entry into a frame no node describes.
    let mut host = sys.host.clone();
    host.pcie.as_mut().unwrap().iommu_map.push(PciIommuMap {
        rid_base: 0x100,
        iommu_base: SECOND_SMMU,
        sid_base: 0,
        len: 0x100,
    });
    let sys = mgmt_bridge_system(host);
    assert!(sys.smmu_init(&mut hw, crate::stage2::vtcr_el2(44)).unwrap());
    assert_eq!(sys.smmu_frames(), [0x905_0000]);
    assert!(hw.log_has("names 0x90a0000, which is not an arm,smmu-v3 of the host"));
}

#[test]
fn an_acpi_hosts_iort_smmu_is_programmed_as_a_dt_hosts_is() {
    // The host description QEMU's ACPI tables give for virt,iommu=smmuv3
    // (acpi tests: the IORT's SMMUv3 node and root complex mapping), with
    // RAM as the UEFI entry fills it from the memory map.
    let mut host = crate::acpi::tests::qemu_smmuv3_host();
    host.memory = vec![HOST_RAM];
    let sys = mgmt_bridge_system(host);
    let mut hw = FakeHw::new();
    hw.smmu = Some(crate::smmu::tests::rig());

    assert!(
        sys.smmu_init(&mut hw, crate::stage2::vtcr_el2(44)).unwrap(),
        "{:?}",
        hw.log
    );
    assert_eq!(sys.smmu_frames(), [0x905_0000]);
    assert!(!hw.log_has("not an arm,smmu-v3"), "{:?}", hw.log);
    assert_ne!(hw.smmu.as_ref().unwrap().model.borrow().cr0ack, 0);
}

#[test]
fn without_an_smmu_in_the_host_description_nothing_is_programmed() {
    let sys = system();
    let mut hw = FakeHw::new();
    hw.smmu = Some(crate::smmu::tests::rig());
    assert!(!sys.smmu_init(&mut hw, crate::stage2::vtcr_el2(44)).unwrap());
    assert_eq!(sys.smmu_poll(&mut hw), 0);
    assert_eq!(sys.smmu_stats(), None);
    assert_eq!(hw.smmu.as_ref().unwrap().model.borrow().cr0ack, 0);
}

#[test]
fn a_stage1_only_smmu_is_not_enabled_and_says_why() {
    let (sys, mut hw) = smmu_system();
    hw.smmu.as_ref().unwrap().model.borrow_mut().idr[0] = 2 | 1 << 27;
    let err = sys
        .smmu_init(&mut hw, crate::stage2::vtcr_el2(44))
        .unwrap_err();
    assert_eq!(err, crate::smmu::SmmuError::NoStage2);
    assert_eq!(sys.smmu_stats(), None);
}

#[test]
fn the_plans_token_digest_is_kept_and_no_token_is_made() {
    let sys = system();

    assert_eq!(
        sys.token_digest(),
        &pinfold_config::bundle::token_digest(b"secret")
    );
    assert_eq!(sys.generated_token(), None);
}

#[test]
fn without_a_digest_a_token_is_made_and_only_its_digest_kept_for_the_manager() {
    let sys = system_with(|plan| {
        for p in &mut plan.partitions {
            p.token_sha256 = None;
        }
    });

    let token = sys.generated_token().expect("a token was made");
    assert_eq!(token.len(), 32);
    assert_eq!(
        sys.token_digest(),
        &pinfold_config::bundle::token_digest(token.as_bytes())
    );
}

#[test]
fn without_a_management_partition_no_token_is_made() {
    let sys = system_with(|plan| {
        for p in &mut plan.partitions {
            p.token_sha256 = None;
            p.management = false;
        }
    });

    assert_eq!(sys.generated_token(), None);
    assert_eq!(sys.token_digest(), &[0; 32]);
}

#[test]
fn cpus_beyond_max_cpus_are_reported_and_left_out() {
    use crate::percpu::MAX_CPUS;
    let plan = Plan {
        partitions: vec![partition_plan("alpha", &[1], false)],
        images: vec![pinfold_config::ImageRef {
            offset: 0,
            size: 16,
            sha256: [0; 32],
        }],
    };
    let payload: &'static [u8] = Box::leak(vec![0xAA; 16].into_boxed_slice());
    let locks = Box::leak(Box::new(crate::lockstat::LockStat::new()));
    let free = FreeMemory::new(&[HOST_RAM], &[]);
    let mut tables = FakeTables {
        next: 0x1000_0000,
        tables: Vec::new(),
    };
    let mut log = Vec::new();
    let sys = System::new(
        BootInputs {
            host: host(MAX_CPUS + 3),
            plan,
            payload,
            free,
            resources: Default::default(),
            tables: &mut tables,
            locks,
            boot_counter: 1,
            wall_clock: None,
            entropy: crate::entropy::EntropyInputs {
                dt_rng_seed: Some(&[0x5e; 32]),
                ..Default::default()
            },
            version: "test",
            pci_functions: Vec::new(),
            its: None,
        },
        &mut |args| log.push(std::format!("{args}")),
    );

    assert_eq!(sys.cpus.len(), MAX_CPUS);
    assert!(
        log.iter().any(|l| l.contains(&std::format!(
            "{} CPUs in the host description; driving the first {MAX_CPUS}",
            MAX_CPUS + 3
        ))),
        "{log:?}"
    );
}

/// CPU `index`'s state with its assigned vCPU loaded.
fn loaded_cpu<'s>(sys: &'s System, hw: &mut FakeHw, index: usize) -> Cpu<'s> {
    let mut cpu = Cpu::new(sys, index);
    let id = sys.assigned(index).unwrap();
    let boot = Boot {
        partition: sys.partition(id.partition).unwrap(),
        id,
        entry: 0,
        x0: 0,
    };
    load(sys, &mut cpu, hw, &boot);
    cpu
}

fn mmio(ipa: u64, width: u8, write: bool, reg: u8) -> Exit {
    Exit::DataAbort {
        ipa: Ipa(ipa),
        far: ipa,
        access: Some(MmioAccess {
            width,
            write,
            reg,
            sign_extend: false,
            sixty_four: width == 8,
        }),
        write,
        s1ptw: false,
        dfsc: 0x04,
    }
}

fn run(sys: &System, cpu: &mut Cpu, hw: &mut FakeHw, regs: &mut GuestRegs, exit: Exit) -> Next {
    // Through the platform's entry: the syndrome the hardware would report,
    // so every whole-exit test also covers decoding and the in-line paths.
    handle_sync(sys, cpu, hw, regs, trap::encode(&exit))
}

fn hvc(sys: &System, cpu: &mut Cpu, hw: &mut FakeHw, x: [u64; 4]) -> (Next, u64) {
    let mut regs = GuestRegs::default();
    regs.x[..4].copy_from_slice(&x);
    let next = run(sys, cpu, hw, &mut regs, Exit::Hvc { imm: 0 });
    (next, regs.x[0])
}

// --- GICD -------------------------------------------------------------------

#[test]
fn gicd_typer_read_lands_in_the_target_register_and_advances_pc() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 1);
    let mut regs = GuestRegs {
        elr: 0x1000,
        ..GuestRegs::default()
    };

    let next = run(
        sys,
        &mut cpu,
        &mut hw,
        &mut regs,
        mmio(GUEST_GICD_BASE + 4, 4, false, 3),
    );

    assert_eq!(next, Next::Resume);
    assert_eq!(regs.elr, 0x1004);
    assert_eq!(regs.x[3] & 0x1f, 8, "ITLinesNumber: INTIDs up to 287");
    assert_eq!(sys.cpus[1].counters.exits_of(ExitClass::Mmio), 1);
}

#[test]
fn gicd_ispendr_write_over_foreign_spis_is_refused_per_spi_and_log_limited() {
    // One 32-bit GICD_ISPENDR write names up to 32 SPIs: more than the old
    // 16-slot action buffer held. Actions are applied as they come now.
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 1);
    let p = &sys.partition(0).unwrap();
    // Make SPIs 32..63 emulated-enabled... only the UART line (33) is owned;
    // write enable + pending for all 32, count what arrives.
    let mut regs = GuestRegs::default();
    regs.x[1] = 1 << 4 | 1 << 1; // GICD_CTLR: ARE, EnableGrp1A
    run(
        sys,
        &mut cpu,
        &mut hw,
        &mut regs,
        mmio(GUEST_GICD_BASE, 4, true, 1),
    );
    regs.x[1] = u32::MAX as u64;
    run(
        sys,
        &mut cpu,
        &mut hw,
        &mut regs,
        mmio(GUEST_GICD_BASE + 0x104, 4, true, 1),
    );
    run(
        sys,
        &mut cpu,
        &mut hw,
        &mut regs,
        mmio(GUEST_GICD_BASE + 0x204, 4, true, 1),
    );

    // The UART line is the only one alpha owns; the 31 others are refused
    // and counted as faults, and only BURST of them printed.
    let refused = p.faults.load(Ordering::Relaxed);
    assert!(refused >= 31, "refusals counted exactly: {refused}");
    let printed = hw.log.iter().filter(|l| l.contains("does not own")).count();
    assert!(printed <= BURST as usize + 1, "log limited, got {printed}");
    assert!(hw.log_has("suppressed") || printed <= BURST as usize);
}

#[test]
fn foreign_spi_refusals_are_rate_limited_but_counted_exactly() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 3);
    let p = &sys.partition(1).unwrap();
    let mut regs = GuestRegs::default();
    regs.x[1] = u32::MAX as u64;

    // GICD_ISENABLER1..7: 224 SPIs, all foreign but the emulated UART's
    // watchdog's and GPIO's.
    for n in 1..8 {
        run(
            sys,
            &mut cpu,
            &mut hw,
            &mut regs,
            mmio(GUEST_GICD_BASE + 0x100 + 4 * n, 4, true, 1),
        );
    }

    assert_eq!(p.faults.load(Ordering::Relaxed), 221);
    let printed = hw.log.iter().filter(|l| l.contains("does not own")).count();
    assert_eq!(printed, BURST as usize);
    hw.now += 10 * 1000;
    regs.x[1] = 1 << 16;
    run(
        sys,
        &mut cpu,
        &mut hw,
        &mut regs,
        mmio(GUEST_GICD_BASE + 0x104, 4, true, 1),
    );
    assert!(hw
        .log
        .last()
        .unwrap()
        .contains("216 more of this kind suppressed"));
}

/// The guest turns its distributor on (ARE, EnableGrp1A), routes the
/// UART's SPI 33 to `vcpu` (GICD_IROUTER33) and enables it (GICD_ISENABLER1).
fn uart_spi_routed_to(
    sys: &'static System,
    cpu: &mut Cpu<'_>,
    hw: &mut FakeHw,
    regs: &mut GuestRegs,
    vcpu: usize,
) {
    for (value, access) in [
        (1 << 4 | 1 << 1, mmio(GUEST_GICD_BASE, 4, true, 1)),
        (
            vcpu_mpidr(vcpu) & 0xff,
            mmio(GUEST_GICD_BASE + 0x6100 + 8, 8, true, 1),
        ),
        (1 << 1, mmio(GUEST_GICD_BASE + 0x104, 4, true, 1)),
    ] {
        regs.x[1] = value;
        run(sys, cpu, hw, regs, access);
    }
}

#[test]
fn uart_interrupt_raised_on_one_vcpu_is_posted_to_the_routed_vcpu() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 1);
    let mut regs = GuestRegs::default();
    // Enable the distributor, route SPI 33 to vCPU 1 (Aff0 = 1), enable it.
    uart_spi_routed_to(sys, &mut cpu, &mut hw, &mut regs, 1);
    // Enable the PL011 TX interrupt: TX FIFO empty raises the line.
    regs.x[1] = 0x301;
    run(
        sys,
        &mut cpu,
        &mut hw,
        &mut regs,
        mmio(GUEST_UART_BASE + 0x30, 4, true, 1),
    );
    regs.x[1] = 1 << 5;
    run(
        sys,
        &mut cpu,
        &mut hw,
        &mut regs,
        mmio(GUEST_UART_BASE + 0x38, 4, true, 1),
    );

    let mut posted = Vec::new();
    sys.cpus[2].mailbox.drain(|op| posted.push(op));
    assert!(
        posted
            .iter()
            .any(|op| matches!(op, MailboxOp::Inject(i) if i.intid == 33)),
        "{posted:?}"
    );
    assert!(hw
        .sgis
        .contains(&(sys.cpus[2].mpidr.load(Ordering::Relaxed), SGI_MAILBOX)));
    assert!(hw.injected().is_empty(), "not injected on the wrong vCPU");
}

// --- GICR -------------------------------------------------------------------

#[test]
fn enabling_the_virtual_timer_ppi_enables_it_on_this_cpus_redistributor_without_a_lock() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 1);
    let mut regs = GuestRegs::default();
    regs.x[2] = 1 << PPI_VTIMER;

    run(
        sys,
        &mut cpu,
        &mut hw,
        &mut regs,
        mmio(GUEST_GICR_BASE + 0x1_0100, 4, true, 2),
    );

    assert_ne!(hw.ppi_enabled & (1 << PPI_VTIMER), 0);
    assert_eq!(sys.locks.hot_total(), 0);
}

#[test]
fn the_timer_path_follows_the_guests_enable_and_forgets_it_on_put() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 1);
    let mut regs = GuestRegs::default();
    // Disabled by the guest: a firing is silenced, nothing injected.
    dispatch_irq(sys, &mut cpu, &mut hw, PPI_VTIMER);
    assert!(hw.injected().is_empty());
    // GICR_ISENABLER0 with the virtual timer, priority 0x40 (IPRIORITYR6).
    regs.x[2] = 1 << PPI_VTIMER;
    run(
        sys,
        &mut cpu,
        &mut hw,
        &mut regs,
        mmio(GUEST_GICR_BASE + 0x1_0100, 4, true, 2),
    );
    regs.x[2] = 0x40 << 24;
    run(
        sys,
        &mut cpu,
        &mut hw,
        &mut regs,
        mmio(GUEST_GICR_BASE + 0x1_0418, 4, true, 2),
    );

    dispatch_irq(sys, &mut cpu, &mut hw, PPI_VTIMER);
    assert_eq!(hw.injected(), [PPI_VTIMER]);
    let lr = (0..4).map(|n| hw.read_lr(n)).find(|&v| v != 0).unwrap();
    assert_eq!(decode_lr(lr).0.priority, 0x40, "the guest's priority");

    put(sys, &mut cpu, &mut hw);
    let silenced = hw.deactivated.len();
    dispatch_irq(sys, &mut cpu, &mut hw, PPI_VTIMER);
    assert_eq!(hw.deactivated.len(), silenced + 1, "no vCPU: silenced");
}

#[test]
fn a_physical_lpi_reaches_the_vcpu_its_route_names_as_its_guests_vlpi() {
    use crate::vgic::pits::{LpiRoute, LPI_BASE};
    let mut host = host(4);
    host.gic.its = vec![(0x0808_0000, 0x2_0000)];
    let its = crate::its::HostIts::new(
        crate::vgic::pits::ItsTyper::decode(its_exit::QEMU_TYPER),
        Box::new(its_exit::FakeQueue::default()),
        4,
    );
    let (sys, _) = system_and_tables(
        |_| {},
        None,
        Default::default(),
        host,
        Vec::new(),
        Some(its),
    );
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 1);
    let id = sys.assigned(1).unwrap();
    let p = sys.partition(id.partition).unwrap();
    // The guest's LPI tables (its redistributor with LPIs, as a partition
    // with a vITS gets it): property table in its RAM, vLPI 8300 enabled
    // at priority 0x60.
    let l = cpu.state.loaded.as_mut().unwrap();
    l.vredist = l.vredist.clone().with_lpis();
    let prop = p.ram_ipa + 0x10_0000;
    let pend = p.ram_ipa + 0x20_0000;
    let mut regs = GuestRegs::default();
    for (off, value) in [(0x70, prop | 15), (0x78, pend), (0x0, 1)] {
        regs.x[2] = value;
        let width = if off == 0 { 4 } else { 8 };
        run(
            sys,
            &mut cpu,
            &mut hw,
            &mut regs,
            mmio(
                GUEST_GICR_BASE + id.vcpu as u64 * 0x2_0000 + off,
                width,
                true,
                2,
            ),
        );
    }
    let l = cpu.state.loaded.as_ref().unwrap();
    assert!(l.vredist.lpis_enabled(), "EnableLPIs written");
    assert_eq!(l.vredist.read(0x70, 8), prop | 15);
    let prop_pa = p.host_addr(prop + (8300 - 8192), 1).unwrap();
    HostMemory::write(&mut hw, prop_pa, &[0x60 | 1]);
    let lpi = LPI_BASE + 5;
    let route = |vcpu| {
        Some(LpiRoute {
            slot: p.index as u16,
            vcpu,
            vintid: 8300,
        })
    };
    // Routed to another vCPU of the partition: not injected here.
    sys.lpi_routes.set(lpi, route(id.vcpu as u16 + 1));
    dispatch_irq(sys, &mut cpu, &mut hw, lpi);
    assert!(hw.injected().is_empty());
    sys.lpi_routes.set(lpi, route(id.vcpu as u16));
    dispatch_irq(sys, &mut cpu, &mut hw, lpi);
    assert_eq!(hw.injected(), [8300]);
    let lr = (0..4).map(|n| hw.read_lr(n)).find(|&v| v != 0).unwrap();
    assert_eq!(decode_lr(lr).0.priority, 0x60, "the guest's priority");
    // LPIs have no active state: nothing deactivated, no lock taken.
    assert!(!hw.deactivated.contains(&lpi));
    assert_eq!(sys.locks.hot_total(), 0);
}

#[test]
fn a_chip_without_the_lockless_capability_is_counted_on_load_and_timer_paths() {
    let sys = system();
    let mut hw = FakeHw::new();
    hw.caps.percpu_state_lockless = false;
    let mut cpu = loaded_cpu(sys, &mut hw, 1);
    assert_eq!(sys.locks.count(LockPath::VcpuLoad), 6);
    let mut regs = GuestRegs::default();
    regs.x[2] = 1 << PPI_VTIMER;

    run(
        sys,
        &mut cpu,
        &mut hw,
        &mut regs,
        mmio(GUEST_GICR_BASE + 0x1_0100, 4, true, 2),
    );

    assert_eq!(sys.locks.count(LockPath::TimerPpiState), 1);
    put(sys, &mut cpu, &mut hw);
    assert_eq!(sys.locks.count(LockPath::VcpuPut), 6);
}

#[test]
fn gicr_ispendr0_shows_the_forwarded_timer_pending_in_a_list_register() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 1);
    let mut regs = GuestRegs::default();
    regs.x[2] = 1 << PPI_VTIMER;
    run(
        sys,
        &mut cpu,
        &mut hw,
        &mut regs,
        mmio(GUEST_GICR_BASE + 0x1_0100, 4, true, 2),
    );

    dispatch_irq(sys, &mut cpu, &mut hw, PPI_VTIMER);
    run(
        sys,
        &mut cpu,
        &mut hw,
        &mut regs,
        mmio(GUEST_GICR_BASE + 0x1_0200, 4, false, 4),
    );

    assert_eq!(hw.injected(), [PPI_VTIMER]);
    assert_ne!(
        regs.x[4] & (1 << PPI_VTIMER),
        0,
        "ISPENDR0 shows the timer pending"
    );
    run(
        sys,
        &mut cpu,
        &mut hw,
        &mut regs,
        mmio(GUEST_GICR_BASE + 0x1_0300, 4, false, 4),
    );
    assert_eq!(regs.x[4] & (1 << PPI_VTIMER), 0, "not active yet");
}

#[test]
fn gicr_isactiver0_shows_the_physical_state_of_a_passthrough_ppi() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 1);
    hw.phys = PpiBits {
        pending: 1 << PPI_PTIMER,
        active: 1 << PPI_VTIMER | 1 << 5,
    };
    let mut regs = GuestRegs::default();

    run(
        sys,
        &mut cpu,
        &mut hw,
        &mut regs,
        mmio(GUEST_GICR_BASE + 0x1_0300, 4, false, 4),
    );
    let active = regs.x[4];
    run(
        sys,
        &mut cpu,
        &mut hw,
        &mut regs,
        mmio(GUEST_GICR_BASE + 0x1_0280, 4, false, 4),
    );

    assert_eq!(
        active,
        1 << PPI_VTIMER,
        "only pass-through bits come from hardware"
    );
    assert_eq!(regs.x[4], 1 << PPI_PTIMER);
}

#[test]
fn write_to_a_sibling_redistributor_is_a_fault_and_changes_nothing() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 1);
    let mut regs = GuestRegs::default();
    regs.x[2] = 1 << PPI_VTIMER;

    run(
        sys,
        &mut cpu,
        &mut hw,
        &mut regs,
        mmio(GUEST_GICR_BASE + 0x2_0000 + 0x1_0100, 4, true, 2),
    );

    assert_eq!(hw.ppi_enabled, 0);
    assert_eq!(sys.partition(0).unwrap().faults.load(Ordering::Relaxed), 1);
    assert!(hw.log_has("redistributor"));
}

#[test]
fn a_timer_ppi_nobody_enabled_is_silenced_and_deactivated() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 1);

    dispatch_irq(sys, &mut cpu, &mut hw, PPI_VTIMER);

    assert!(hw.injected().is_empty());
    assert_eq!(hw.deactivated, [PPI_VTIMER]);
    assert_eq!(
        hw.ppi_changes.last(),
        Some(&PpiStateChange::Enable(PPI_VTIMER, false))
    );
}

// --- PL011 ------------------------------------------------------------------

#[test]
fn pl011_output_reaches_the_ring_and_whole_lines_the_host() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 3);
    let mut regs = GuestRegs::default();
    for &b in b"hi\n" {
        regs.x[0] = b as u64;
        run(
            sys,
            &mut cpu,
            &mut hw,
            &mut regs,
            mmio(GUEST_UART_BASE, 4, true, 0),
        );
    }

    assert_eq!(hw.lines.len(), 1);
    assert_eq!(
        hw.lines[0],
        b"[beta] hi\r\n",
        "{:?}",
        String::from_utf8_lossy(&hw.lines[0])
    );
    let mut out = [0u8; 8];
    let read = sys
        .partition(1)
        .unwrap()
        .console
        .lock(LockPath::Management)
        .ring
        .read(0, &mut out);
    assert_eq!(&out[..read.len], b"hi\n");
}

#[test]
fn guest_console_output_takes_the_distributor_lock_only_when_the_line_changes() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 3);
    let mut regs = GuestRegs::default();
    let before = sys.locks.count(LockPath::ConsoleTrap);
    for &b in b"hello\n" {
        regs.x[0] = b as u64;
        run(
            sys,
            &mut cpu,
            &mut hw,
            &mut regs,
            mmio(GUEST_UART_BASE, 4, true, 0),
        );
    }

    // One console lock per character; the line stayed low (no interrupt
    // unmasked), so the partition's distributor was never locked for it.
    assert_eq!(sys.locks.count(LockPath::ConsoleTrap) - before, 6);
}

#[test]
fn console_input_beyond_the_fifo_reports_how_much_was_taken() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 0);

    let taken = console_input(
        sys,
        &mut cpu.state,
        &mut hw,
        &sys.partition(1).unwrap(),
        &[b'x'; 100],
    );

    assert!(taken > 0 && taken < 100, "{taken}");
}

// --- unmapped, ISV=0, sysregs -----------------------------------------------

#[test]
fn access_to_an_unmapped_ipa_injects_a_data_abort() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 3);
    let mut regs = GuestRegs {
        elr: 0x4000_1000,
        spsr: 0x3c5,
        ..GuestRegs::default()
    };

    let next = run(
        sys,
        &mut cpu,
        &mut hw,
        &mut regs,
        mmio(0x0A00_0000, 4, false, 1),
    );

    let Next::Inject(el1) = next else {
        panic!("{next:?}")
    };
    assert_eq!(el1.elr, 0x4000_1000);
    assert_eq!(el1.far, Some(0x0A00_0000));
    assert_eq!(el1.esr >> 26, 0x25);
    assert_eq!(regs.elr, 0x4008_0200, "current EL, SPx synchronous vector");
    assert_eq!(sys.partition(1).unwrap().faults.load(Ordering::Relaxed), 1);
    assert_eq!(sys.cpus[3].counters.exits_of(ExitClass::Abort), 1);
}

#[test]
fn an_undescribed_abort_isv0_is_refused_not_guessed() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 3);
    let mut regs = GuestRegs::default();
    let exit = Exit::DataAbort {
        ipa: Ipa(GUEST_GICD_BASE),
        far: GUEST_GICD_BASE,
        access: None,
        write: true,
        s1ptw: false,
        dfsc: 4,
    };

    let next = run(sys, &mut cpu, &mut hw, &mut regs, exit);

    assert!(matches!(next, Next::Inject(_)));
    assert!(hw.log_has("ISV=0"));
}

#[test]
fn an_unknown_system_register_injects_undefined() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 3);
    let mut regs = GuestRegs::default();
    let exit = Exit::SysReg(SysRegAccess {
        reg: SysRegId::new(3, 4, 1, 1, 0),
        rt: 0,
        read: true,
    });

    let next = run(sys, &mut cpu, &mut hw, &mut regs, exit);

    let Next::Inject(el1) = next else {
        panic!("{next:?}")
    };
    assert_eq!(el1.esr >> 26, 0);
    assert_eq!(sys.partition(1).unwrap().faults.load(Ordering::Relaxed), 1);
}

#[test]
fn id_registers_are_sanitised() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 3);
    let mut regs = GuestRegs::default();
    let exit = Exit::SysReg(SysRegAccess {
        reg: crate::sysreg::ID_AA64DFR0_EL1,
        rt: 7,
        read: true,
    });

    assert_eq!(run(sys, &mut cpu, &mut hw, &mut regs, exit), Next::Resume);

    assert_eq!(
        regs.x[7],
        id_reg_view(
            crate::sysreg::ID_AA64DFR0_EL1,
            0x1111_1111_1111_1111,
            PmuPolicy::Owned
        )
    );
}

// --- SGIs -------------------------------------------------------------------

fn sgi_to(sys: &System, cpu: &mut Cpu, hw: &mut FakeHw, value: u64) {
    let mut regs = GuestRegs::default();
    regs.x[5] = value;
    let exit = Exit::SysReg(SysRegAccess {
        reg: SysRegId::ICC_SGI1R_EL1,
        rt: 5,
        read: false,
    });
    assert_eq!(run(sys, cpu, hw, &mut regs, exit), Next::Resume);
}

#[test]
fn sgi_to_a_sibling_vcpu_goes_through_its_cpus_mailbox() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 1);

    sgi_to(sys, &mut cpu, &mut hw, 3 << 24 | 0b10); // SGI 3, TargetList Aff0 = 1

    let mut got = Vec::new();
    sys.cpus[2].mailbox.drain(|op| got.push(op));
    assert_eq!(got, [MailboxOp::Sgi(3)]);
    assert_eq!(hw.sgis, [(0x102, SGI_MAILBOX)]);
}

#[test]
fn sgi_outside_the_partition_is_dropped_and_reported() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 3);

    sgi_to(sys, &mut cpu, &mut hw, 1 << 24 | 1 << 5); // Aff0 = 5: nobody

    assert!(hw.sgis.is_empty());
    for c in &sys.cpus {
        c.mailbox.drain(|op| panic!("posted {op:?}"));
    }
    assert_eq!(sys.partition(1).unwrap().faults.load(Ordering::Relaxed), 1);
}

#[test]
fn group0_and_alias_sgi_registers_are_resolved_like_sgi1r() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 1);
    // ICC_SGI0R_EL1 = S3_0_C12_C11_7, ICC_ASGI1R_EL1 = S3_0_C12_C11_6, as
    // the CPU reports them in ESR_EL2 (through the real decoder).
    for op2 in [7u8, 6] {
        let (esr, far, hpfar) = crate::trap::encode(&Exit::SysReg(SysRegAccess {
            reg: SysRegId::new(3, 0, 12, 11, op2),
            rt: 5,
            read: false,
        }));
        let exit = crate::trap::decode(esr, far, hpfar);
        let mut regs = GuestRegs::default();
        regs.x[5] = 3 << 24 | 0b10; // SGI 3 to vCPU 1
        assert_eq!(run(sys, &mut cpu, &mut hw, &mut regs, exit), Next::Resume);
        let mut regs = GuestRegs::default();
        regs.x[5] = 1 << 24 | 1 << 5; // Aff0 = 5: nobody
        assert_eq!(run(sys, &mut cpu, &mut hw, &mut regs, exit), Next::Resume);
    }

    let mut got = Vec::new();
    sys.cpus[2].mailbox.drain(|op| got.push(op));
    assert_eq!(got, [MailboxOp::Sgi(3)]);
    // The two SGIs to nobody, and no UNDEF.
    assert_eq!(sys.partition(0).unwrap().faults.load(Ordering::Relaxed), 2);
}

#[test]
fn sgi_to_self_is_injected_once_the_guest_enabled_it() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 3);
    let mut regs = GuestRegs::default();
    regs.x[2] = 1 << 2;
    run(
        sys,
        &mut cpu,
        &mut hw,
        &mut regs,
        mmio(GUEST_GICR_BASE + 0x1_0100, 4, true, 2),
    );

    sgi_to(sys, &mut cpu, &mut hw, 2 << 24 | 1);

    assert_eq!(hw.injected(), [2]);
}

#[test]
fn a_full_mailbox_loses_an_spi_injection_counted_and_reported() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 1);
    while sys.cpus[2].mailbox.post(MailboxOp::Retract(40)) {}
    let mut regs = GuestRegs::default();
    let mut write = |regs: &mut GuestRegs, offset: u64, width: u8, value: u64| {
        regs.x[1] = value;
        let exit = mmio(GUEST_GICD_BASE + offset, width, true, 1);
        run(sys, &mut cpu, &mut hw, regs, exit)
    };
    // The emulated UART line (SPI 33) enabled, routed to vCPU 1 (on CPU 2),
    // then made pending: its injection needs a slot of CPU 2's mailbox.
    write(&mut regs, 0, 4, 1 << 4 | 1 << 1);
    // Affinity only: bit 31 of an MPIDR is RES1, of GICD_IROUTER it is IRM.
    write(
        &mut regs,
        0x6000 + 8 * 33,
        8,
        vcpu_mpidr(1) & 0xff_00ff_ffff,
    );
    write(&mut regs, 0x104, 4, 1 << 1);
    write(&mut regs, 0x204, 4, 1 << 1);

    assert!(hw.log_has("full"));
    assert_eq!(sys.partition(0).unwrap().faults.load(Ordering::Relaxed), 1);
}

#[test]
fn an_sgi_reaches_a_sibling_whose_mailbox_slots_are_all_full() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 1);
    while sys.cpus[2].mailbox.post(MailboxOp::Retract(40)) {}

    sgi_to(sys, &mut cpu, &mut hw, 3 << 24 | 0b10);

    let mut got = Vec::new();
    sys.cpus[2].mailbox.drain(|op| got.push(op));
    assert!(got.contains(&MailboxOp::Sgi(3)), "{got:?}");
    assert_eq!(sys.partition(0).unwrap().faults.load(Ordering::Relaxed), 0);
}

// --- PSCI -------------------------------------------------------------------

#[test]
fn psci_version_and_features() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 3);

    assert_eq!(
        hvc(sys, &mut cpu, &mut hw, [fid::PSCI_VERSION as u64, 0, 0, 0]).1,
        0x1_0001
    );
    assert_eq!(
        hvc(sys, &mut cpu, &mut hw, [fid::SMCCC_VERSION as u64, 0, 0, 0]).1,
        0x1_0001
    );
    assert_eq!(
        hvc(
            sys,
            &mut cpu,
            &mut hw,
            [fid::PSCI_FEATURES as u64, fid::CPU_ON_64 as u64, 0, 0]
        )
        .1,
        0
    );
    assert_eq!(
        hvc(
            sys,
            &mut cpu,
            &mut hw,
            [fid::MIGRATE_INFO_TYPE as u64, 0, 0, 0]
        )
        .1 as i64,
        psci::MIGRATE_INFO_TYPE_NOT_REQUIRED
    );
    assert_eq!(
        hvc(sys, &mut cpu, &mut hw, [0x8400_00ff, 0, 0, 0]).1 as i64,
        psci::NOT_SUPPORTED
    );
}

#[test]
fn cpu_on_posts_to_the_siblings_cpu_and_a_second_call_races_to_on_pending() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 1);
    let on = [fid::CPU_ON_64 as u64, vcpu_mpidr(1), 0x4000_2000, 77];

    let first = hvc(sys, &mut cpu, &mut hw, on).1 as i64;
    let second = hvc(sys, &mut cpu, &mut hw, on).1 as i64;

    assert_eq!(first, psci::SUCCESS);
    assert_eq!(second, psci::ON_PENDING);
    assert_eq!(
        hvc(
            sys,
            &mut cpu,
            &mut hw,
            [fid::AFFINITY_INFO_64 as u64, vcpu_mpidr(1), 0, 0]
        )
        .1 as i64,
        psci::AFFINITY_INFO_ON_PENDING
    );
    // The sibling's CPU, idle, boots it with the context id in x0.
    let mut sibling = Cpu::new(sys, 2);
    let boot = idle_work(sys, &mut sibling, &mut hw).unwrap();
    assert_eq!(boot.entry, 0x4000_2000);
    assert_eq!(boot.x0, 77);
    load(sys, &mut sibling, &mut hw, &boot);
    assert_eq!(
        hvc(
            sys,
            &mut cpu,
            &mut hw,
            [fid::CPU_ON_64 as u64, vcpu_mpidr(1), 0, 0]
        )
        .1 as i64,
        psci::ALREADY_ON
    );
}

#[test]
fn cpu_on_for_a_foreign_mpidr_is_refused() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 3);

    let r = hvc(
        sys,
        &mut cpu,
        &mut hw,
        [fid::CPU_ON_64 as u64, 2, 0x4000_0000, 0],
    )
    .1 as i64;

    assert_eq!(r, psci::INVALID_PARAMETERS);
    assert!(hw.sgis.is_empty());
    assert_eq!(sys.partition(1).unwrap().faults.load(Ordering::Relaxed), 1);
}

#[test]
fn cpu_on_with_an_entry_point_outside_the_partitions_ram_is_refused() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 1);
    let p = sys.partition(0).unwrap();
    let end = p.ram_ipa + p.ram_size;

    for entry in [
        0,
        end,
        end + 0x1000,
        p.ram_ipa - 4,
        p.ram_ipa + 2,
        u64::MAX - 3,
    ] {
        let on = [fid::CPU_ON_64 as u64, vcpu_mpidr(1), entry, 0];
        assert_eq!(
            hvc(sys, &mut cpu, &mut hw, on).1 as i64,
            psci::INVALID_ADDRESS,
            "entry {entry:#x}"
        );
    }

    assert_eq!(p.faults.load(Ordering::Relaxed), 6);
    // Nothing was claimed: the sibling is still off and starts when asked
    // properly.
    let on = [fid::CPU_ON_64 as u64, vcpu_mpidr(1), end - 4, 0];
    assert_eq!(hvc(sys, &mut cpu, &mut hw, on).1 as i64, psci::SUCCESS);
}

#[test]
fn cpu_off_parks_system_off_stops_the_partition_and_its_siblings() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 1);

    assert_eq!(
        hvc(sys, &mut cpu, &mut hw, [fid::CPU_OFF as u64, 0, 0, 0]).0,
        Next::Park
    );
    let (next, _) = hvc(sys, &mut cpu, &mut hw, [fid::SYSTEM_OFF as u64, 0, 0, 0]);

    assert_eq!(next, Next::Stopped);
    assert_eq!(sys.partition(0).unwrap().state(), State::Stopped);
    assert_eq!(
        hw.sgis,
        [(0x102, SGI_MAILBOX)],
        "the sibling's CPU is told to stop"
    );
}

#[test]
fn system_reset_stops_then_finish_restart_reloads_and_boots_vcpu0() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 3);
    let p = &sys.partition(1).unwrap();

    let (next, _) = hvc(sys, &mut cpu, &mut hw, [fid::SYSTEM_RESET as u64, 0, 0, 0]);
    assert_eq!(next, Next::Restart(1));
    put(sys, &mut cpu, &mut hw);
    sys.finish_restart(p, &mut hw, 3);

    assert_eq!(p.state(), State::Starting, "until its vCPU 0 enters");
    assert_eq!(p.boot_count.load(Ordering::Relaxed), 1);
    assert_eq!(hw.icache_syncs, 1, "one instruction-cache sync per load");
    let boot = idle_work(sys, &mut cpu, &mut hw).unwrap();
    assert_eq!(p.state(), State::Running);
    assert_eq!(
        boot.id,
        VcpuId {
            partition: 1,
            vcpu: 0
        }
    );
    assert_eq!(boot.entry, RAM_BASE + 0x8_0000);
}

#[test]
fn a_manager_that_powers_off_is_restarted_by_its_cpus_idle_loop_once_the_back_off_passed() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 0);
    let mgmt = &sys.partition(2).unwrap();
    let boots = mgmt.boot_count.load(Ordering::Relaxed);

    let (next, _) = hvc(sys, &mut cpu, &mut hw, [fid::SYSTEM_OFF as u64, 0, 0, 0]);
    put(sys, &mut cpu, &mut hw);

    assert_eq!(next, Next::Stopped);
    assert_eq!(mgmt.state(), State::Stopped);
    assert!(
        hw.log.iter().any(|l| l
            == "report: mgmt stopped (powered off by the guest): restarting in 1 s (restart #1)"),
        "{:?}",
        hw.log
    );
    // The fake counter runs at 1 kHz: due 1000 ticks after the stop.
    assert_eq!(idle_deadline(sys, &cpu), Some(hw.now + 1000));
    hw.now += 999;
    assert!(
        idle_work(sys, &mut cpu, &mut hw).is_none(),
        "restarted early"
    );
    assert_eq!(mgmt.state(), State::Stopped);
    hw.now += 1;
    let boot = idle_work(sys, &mut cpu, &mut hw).expect("boots vCPU 0");

    assert_eq!(boot.id.partition, 2);
    assert_eq!(mgmt.state(), State::Running);
    assert_eq!(mgmt.boot_count.load(Ordering::Relaxed), boots + 1);
    assert_eq!(idle_deadline(sys, &cpu), None);
    assert_eq!(mgmt.life.restarts(), 1);
}

#[test]
fn a_manager_reset_goes_through_the_back_off_and_an_ordinary_partitions_does_not() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 0);

    let (next, _) = hvc(sys, &mut cpu, &mut hw, [fid::SYSTEM_RESET as u64, 0, 0, 0]);

    assert_eq!(next, Next::Stopped);
    assert!(idle_deadline(sys, &cpu).is_some());
    let mut hw2 = FakeHw::new();
    let mut other = loaded_cpu(sys, &mut hw2, 3);
    let (next, _) = hvc(sys, &mut other, &mut hw2, [fid::SYSTEM_OFF as u64, 0, 0, 0]);
    assert_eq!(next, Next::Stopped);
    assert_eq!(idle_deadline(sys, &other), None, "beta is not restarted");
    assert!(hw2.log.iter().all(|l| !l.contains("restarting in")));
}

#[test]
fn the_stats_line_shows_the_managers_report_and_restart_count() {
    let sys = system();
    let mut hw = FakeHw::new();
    *sys.partition(2).unwrap().report.lock(LockPath::Management) =
        (pinfold_abi::ManagerStatus::NoNetworkDevice, String::new());

    sys.stats(&mut hw);

    assert!(
        hw.log
            .iter()
            .any(|l| l.starts_with("report: stats partition=mgmt ")
                && l.ends_with(" manager=no-network-device restarts=0")),
        "{:?}",
        hw.log
    );
}

#[test]
fn smc_answers_not_supported_and_steps_over_it() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 3);
    let mut regs = GuestRegs {
        elr: 0x100,
        ..GuestRegs::default()
    };

    run(sys, &mut cpu, &mut hw, &mut regs, Exit::Smc { imm: 0 });

    assert_eq!(regs.x[0] as i64, psci::NOT_SUPPORTED);
    assert_eq!(regs.elr, 0x104);
}

#[test]
fn management_calls_from_an_ordinary_partition_are_not_supported() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 3);

    let r = hvc(
        sys,
        &mut cpu,
        &mut hw,
        [fid::PINFOLD_64_BASE as u64, 0, 0, 0],
    )
    .1 as i64;

    assert_eq!(r, psci::NOT_SUPPORTED);
}

#[test]
fn the_management_partition_restarts_another_partition() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 0);
    let restart = u64::from(pinfold_abi::fid::PARTITION_RESTART);

    let (_, r) = hvc(sys, &mut cpu, &mut hw, [restart, 1, 0, 0]);

    assert_eq!(r, 0);
    assert_eq!(
        sys.partition(1).unwrap().boot_count.load(Ordering::Relaxed),
        1
    );
    assert!(hw.sgis.contains(&(0x103, SGI_MAILBOX)));
}

// --- events and boot markers -----------------------------------------------

fn events_of(sys: &System) -> Vec<(u64, pinfold_abi::EventKind, Option<String>, String)> {
    sys.events
        .read(0, 64 * 1024, |_| None)
        .events
        .into_iter()
        .map(|e| (e.seq, e.kind, e.partition.map(|p| p.1), e.message))
        .collect()
}

fn ring_text(p: &crate::partition::Partition) -> String {
    let con = p.console.lock(LockPath::Management);
    let mut out = vec![0u8; con.ring.capacity()];
    let r = con.ring.read(0, &mut out);
    String::from_utf8_lossy(&out[..r.len]).into_owned()
}

#[test]
fn a_restart_by_the_manager_is_two_state_events_and_a_boot_marker_per_boot() {
    use pinfold_abi::EventKind;
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 0);
    let restart = u64::from(pinfold_abi::fid::PARTITION_RESTART);
    // beta printed half a line before the restart.
    sys.partition(1)
        .unwrap()
        .console
        .lock(LockPath::Management)
        .ring
        .push(b"login: ");

    hvc(sys, &mut cpu, &mut hw, [restart, 1, 0, 0]);
    hw.now += 3000;
    hvc(sys, &mut cpu, &mut hw, [restart, 1, 0, 0]);

    let beta: Vec<(EventKind, String)> = events_of(sys)
        .into_iter()
        .filter(|e| e.2.as_deref() == Some("beta"))
        .map(|e| (e.1, e.3))
        .collect();
    assert_eq!(
        beta,
        [
            (
                EventKind::State,
                "stopped by the manager (restart)".to_string()
            ),
            (EventKind::State, "running (boot 1)".to_string()),
            (
                EventKind::State,
                "stopped by the manager (restart)".to_string()
            ),
            (EventKind::State, "running (boot 2)".to_string()),
        ]
    );
    // The fake counter runs at 1 kHz from 1; no wall clock: seconds since boot.
    assert_eq!(
        ring_text(&sys.partition(1).unwrap()),
        "login: \r\n=== pinfold: beta boot 1 at +0s ===\r\n=== pinfold: beta boot 2 at +3s ===\r\n"
    );
}

#[test]
fn the_boot_marker_carries_the_wall_clock_time_when_there_is_one() {
    let sys = system_clocked(
        |_| {},
        Some(crate::clock::WallClock {
            unix_ms: 1_796_132_700_000,
            counter: 1,
            source: crate::clock::ClockSource::Pl031,
        }),
    );
    let mut hw = FakeHw::new();
    hw.now = 1 + 61_000;

    sys.start_partition(&sys.partition(1).unwrap(), &mut hw, 0)
        .unwrap();

    assert_eq!(
        ring_text(&sys.partition(1).unwrap()),
        "=== pinfold: beta boot 1 at 2026-12-01T13:46:01Z ===\r\n"
    );
}

#[test]
fn a_guests_fault_storm_is_a_few_events_and_leaves_the_other_partitions_events() {
    use pinfold_abi::EventKind;
    let sys = system();
    let mut mgmt_hw = FakeHw::on_cpu(0);
    let mut mgmt = loaded_cpu(sys, &mut mgmt_hw, 0);
    let restart = u64::from(pinfold_abi::fid::PARTITION_RESTART);
    hvc(sys, &mut mgmt, &mut mgmt_hw, [restart, 0, 0, 0]);
    // beta (CPU 3) touches 221 foreign SPIs (the 224 of the 7 words but its
    // own emulated PL011, watchdog and GPIO lines), again and again.
    let mut hw = FakeHw::on_cpu(3);
    let mut cpu = loaded_cpu(sys, &mut hw, 3);
    let mut regs = GuestRegs::default();
    regs.x[1] = u32::MAX as u64;
    for round in 0..50 {
        hw.now = 1 + round * 1000;
        for n in 1..8 {
            let ipa = GUEST_GICD_BASE + 0x100 + 4 * n;
            run(sys, &mut cpu, &mut hw, &mut regs, mmio(ipa, 4, true, 1));
        }
    }

    let events = events_of(sys);
    let faults = events.iter().filter(|e| e.1 == EventKind::Fault).count();
    assert_eq!(
        sys.partition(1).unwrap().faults.load(Ordering::Relaxed),
        50 * 221
    );
    // 5 windows of 10 s, BURST lines (and events) in each.
    assert_eq!(faults, 5 * BURST as usize, "{events:?}");
    assert!(events
        .iter()
        .any(|e| e.1 == EventKind::Fault && e.3.contains("more of this kind suppressed")));
    let alpha: Vec<&str> = events
        .iter()
        .filter(|e| e.2.as_deref() == Some("alpha"))
        .map(|e| e.3.as_str())
        .collect();
    assert_eq!(
        alpha,
        ["stopped by the manager (restart)", "running (boot 1)"]
    );
}

// --- load/put, requests -----------------------------------------------------

#[test]
fn put_deactivates_passthrough_spis_left_in_the_list_registers() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 3);
    apply_op(
        &mut cpu.state,
        &mut hw,
        &sys.partition(1).unwrap(),
        MailboxOp::Inject(VirtIrq::hw_linked(40, 0xa0)),
    );

    put(sys, &mut cpu, &mut hw);

    assert_eq!(hw.deactivated, [40]);
    assert!(cpu.state.loaded.is_none());
    assert!(cpu.resident.is_none());
    assert_eq!(
        sys.partition(1).unwrap().vcpus[0].power.state(),
        PowerState::Off
    );
}

#[test]
fn a_stop_request_parks_the_vcpu_after_an_interrupt() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 3);
    sys.cpus[3].post_request(REQ_STOP);

    assert_eq!(after_guest_irq(&mut cpu), Next::Park);
    assert_eq!(after_guest_irq(&mut cpu), Next::Resume);
    assert_eq!(sys.cpus[3].counters.exits_of(ExitClass::Irq), 2);
}

#[test]
fn overflowing_the_list_register_queue_is_counted() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 3);

    for intid in 32..32 + 100 {
        apply_op(
            &mut cpu.state,
            &mut hw,
            &sys.partition(1).unwrap(),
            MailboxOp::Inject(VirtIrq::soft(intid, 0xa0)),
        );
    }

    let dropped = sys.cpus[3].counters.dropped_count();
    assert_eq!(
        dropped,
        100 - LR_COUNT as u64 - crate::vgic::lr::QUEUE_CAPACITY as u64
    );
    assert!(hw.log_has("lost"));
}

#[test]
fn the_monitor_prints_stats_with_the_hot_path_lock_count() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 0);

    host_input(sys, &mut cpu.state, &mut hw, 0x01);
    host_input(sys, &mut cpu.state, &mut hw, b's');

    assert!(hw.log_has("report: stats hot_path_cross_cpu_locks=0"));
    assert_eq!(
        host_input(sys, &mut cpu.state, &mut hw, 0x01),
        Monitor::Nothing
    );
    assert_eq!(
        host_input(sys, &mut cpu.state, &mut hw, b'x'),
        Monitor::PowerOff
    );
}

#[test]
fn ctrl_a_m_sends_one_line_to_the_management_partition_only() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 0);
    let mgmt = sys
        .partitions()
        .into_iter()
        .find(|p| p.plan.management)
        .expect("a management partition");

    host_input(sys, &mut cpu.state, &mut hw, 0x01);
    host_input(sys, &mut cpu.state, &mut hw, b'm');
    for &b in b"ok\r" {
        host_input(sys, &mut cpu.state, &mut hw, b);
    }
    host_input(sys, &mut cpu.state, &mut hw, b'z');

    assert!(hw.log_has("the next line goes to the management partition"));
    // "ok\r" queued for the manager; the `z` after Enter went elsewhere.
    let con = mgmt.console.lock(LockPath::Management);
    assert_eq!(
        crate::console::Pl011::new().rx_room() - con.pl011.rx_room(),
        3
    );
}

// --- PMU ----------------------------------------------------------------------

fn pmu_access(reg: crate::pmu::PmuReg, read: bool) -> Exit {
    Exit::SysReg(SysRegAccess {
        reg: reg.id(),
        rt: 9,
        read,
    })
}

#[test]
fn load_writes_mdcr_with_all_counters_and_el2_hidden_by_trapping_on_pmuv3() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = Cpu::new(sys, 3);

    let id = sys.assigned(3).unwrap();
    let boot = Boot {
        partition: sys.partition(id.partition).unwrap(),
        id,
        entry: 0,
        x0: 0,
    };
    let ctx = load(sys, &mut cpu, &mut hw, &boot);

    // The fake's ID_AA64DFR0 says PMUVer 1 (PMUv3): trap (TPM), HPMN = N.
    assert_eq!(ctx.mdcr_el2 & 0x1f, 6);
    assert_ne!(ctx.mdcr_el2 & crate::pmu::MDCR_EL2_TPM, 0);
    assert!(hw
        .pmu
        .iter()
        .any(|w| w.0 == crate::pmu::PmuReg::PMCNTENCLR_EL0));
}

#[test]
fn a_guest_write_asking_to_count_el2_cycles_has_nsh_cleared() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 3);
    let mut regs = GuestRegs::default();
    regs.x[9] = crate::pmu::PMEVTYPER_NSH | 0x11;

    let next = run(
        sys,
        &mut cpu,
        &mut hw,
        &mut regs,
        pmu_access(crate::pmu::PmuReg::PMCCFILTR_EL0, false),
    );

    assert_eq!(next, Next::Resume);
    assert_eq!(
        hw.pmu.last(),
        Some(&(crate::pmu::PmuReg::PMCCFILTR_EL0, 0x11))
    );
}

#[test]
fn the_pmu_overflow_ppi_is_forwarded_like_the_timers() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 3);
    let mut regs = GuestRegs::default();
    regs.x[2] = 1 << PPI_PMU;
    run(
        sys,
        &mut cpu,
        &mut hw,
        &mut regs,
        mmio(GUEST_GICR_BASE + 0x1_0100, 4, true, 2),
    );

    dispatch_irq(sys, &mut cpu, &mut hw, PPI_PMU);

    assert_ne!(hw.ppi_enabled & (1 << PPI_PMU), 0);
    assert_eq!(hw.injected(), [PPI_PMU]);
}

#[test]
fn a_hidden_pmu_undefs_every_register_and_shows_pmuver_zero() {
    let sys = system_with(|plan| plan.partitions[1].pmu = false);
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 3);
    let mut regs = GuestRegs::default();

    let next = run(
        sys,
        &mut cpu,
        &mut hw,
        &mut regs,
        pmu_access(crate::pmu::PmuReg::PMCCNTR_EL0, true),
    );
    let dfr0 = Exit::SysReg(SysRegAccess {
        reg: crate::sysreg::ID_AA64DFR0_EL1,
        rt: 7,
        read: true,
    });
    run(sys, &mut cpu, &mut hw, &mut regs, dfr0);

    assert!(matches!(next, Next::Inject(_)));
    assert_eq!((regs.x[7] >> 8) & 0xf, 0);
}

// --- lifecycle: watchdog, hung vCPUs, restart policies, shutdown -----------

use crate::wdog;
use pinfold_config::RestartMode;
use pinfold_vboard::{GICR_STRIDE, GUEST_WDOG_CONTROL_BASE, GUEST_WDOG_REFRESH_BASE};

/// The fake counter runs at 1 kHz: the checks come every 500 ticks.
const HALF_S: u64 = 500;

/// beta (CPU 3) with a watchdog of `watchdog_s` and policy `restart`,
/// started and its vCPU 0 entered.
fn watched_beta(watchdog_s: u32, restart: RestartMode) -> (&'static System, FakeHw, Cpu<'static>) {
    let sys = system_with(|plan| {
        plan.partitions[1].lifecycle.watchdog_s = watchdog_s;
        plan.partitions[1].lifecycle.restart = restart;
    });
    let mut hw = FakeHw::new();
    let p = sys.partition(1).unwrap();
    p.set_state(State::Stopped, 0);
    sys.start_partition(&p, &mut hw, 3).unwrap();
    assert_eq!(p.state(), State::Starting);
    let mut cpu = Cpu::new(sys, 3);
    let boot = idle_work(sys, &mut cpu, &mut hw).expect("vCPU 0 boots");
    load(sys, &mut cpu, &mut hw, &boot);
    (sys, hw, cpu)
}

/// The EL2 timer fires on this CPU `n` times, half a second apart; the
/// first tick at which the partition was no longer up, if any.
fn ticks(sys: &System, cpu: &mut Cpu, hw: &mut FakeHw, p: usize, n: u64) -> Option<u64> {
    for i in 1..=n {
        hw.now += HALF_S;
        dispatch_irq(sys, cpu, hw, PPI_HYP_TIMER);
        if !sys.partition(p).unwrap().state().is_up() {
            return Some(i);
        }
    }
    None
}

fn wdog_write(sys: &System, cpu: &mut Cpu, hw: &mut FakeHw, ipa: u64, value: u64) {
    let mut regs = GuestRegs::default();
    regs.x[5] = value;
    assert_eq!(
        run(sys, cpu, hw, &mut regs, mmio(ipa, 4, true, 5)),
        Next::Resume
    );
}

fn wdog_read(sys: &System, cpu: &mut Cpu, hw: &mut FakeHw, ipa: u64) -> u64 {
    let mut regs = GuestRegs::default();
    run(sys, cpu, hw, &mut regs, mmio(ipa, 4, false, 5));
    regs.x[5]
}

/// What Linux's sbsa_gwdt does at probe (action=0): WOR = timeout / 2.
fn linux_driver_probe(sys: &System, cpu: &mut Cpu, hw: &mut FakeHw, timeout_s: u64) {
    let wcs = wdog_read(sys, cpu, hw, GUEST_WDOG_CONTROL_BASE + wdog::WCS);
    assert_eq!(wcs & u64::from(wdog::WCS_EN), 1, "found running");
    wdog_write(
        sys,
        cpu,
        hw,
        GUEST_WDOG_CONTROL_BASE + wdog::WOR,
        1000 / 2 * timeout_s,
    );
}

#[test]
fn a_watched_partition_arms_the_el2_timer_at_entry_and_is_running() {
    let (sys, hw, _cpu) = watched_beta(2, RestartMode::Never);

    assert_eq!(sys.partition(1).unwrap().state(), State::Running);
    assert_eq!(hw.wakeup, Some(hw.now + HALF_S));
}

#[test]
fn a_guest_that_feeds_its_watchdog_keeps_running() {
    let (sys, mut hw, mut cpu) = watched_beta(2, RestartMode::Never);
    linux_driver_probe(sys, &mut cpu, &mut hw, 2);

    for _ in 0..40 {
        assert_eq!(ticks(sys, &mut cpu, &mut hw, 1, 1), None);
        wdog_write(
            sys,
            &mut cpu,
            &mut hw,
            GUEST_WDOG_REFRESH_BASE + wdog::WRR,
            0,
        );
    }

    assert_eq!(sys.partition(1).unwrap().state(), State::Running);
    assert_eq!(hw.wakeup, Some(hw.now + HALF_S), "checks go on");
}

#[test]
fn a_guest_that_stops_feeding_its_watchdog_crashes_within_the_period_and_on_crash_restarts_it() {
    let (sys, mut hw, mut cpu) = watched_beta(2, RestartMode::OnCrash);
    let p = &sys.partition(1).unwrap();
    linux_driver_probe(sys, &mut cpu, &mut hw, 2);
    for _ in 0..4 {
        ticks(sys, &mut cpu, &mut hw, 1, 1);
        wdog_write(
            sys,
            &mut cpu,
            &mut hw,
            GUEST_WDOG_REFRESH_BASE + wdog::WRR,
            0,
        );
    }

    // It panics: no refresh any more. 2 s = 4 ticks.
    let at = ticks(sys, &mut cpu, &mut hw, 1, 10);

    assert_eq!(at, Some(4), "crashed within its watchdog period");
    assert_eq!(p.state(), State::Crashed);
    let inner = p.life.inner.lock(LockPath::Management);
    assert_eq!(inner.last_crash.as_ref().unwrap().reason, "watchdog");
    drop(inner);
    assert!(hw.log_has("partition beta: crashed: watchdog"));
    assert_eq!(after_guest_irq(&mut cpu), Next::Park, "its own vCPU parks");
    put(sys, &mut cpu, &mut hw);
    // Restarted by its CPU's idle loop after the first back-off (1 s).
    assert!(idle_work(sys, &mut cpu, &mut hw).is_none());
    hw.now += 1000;
    let boot = idle_work(sys, &mut cpu, &mut hw).expect("restarted");
    assert_eq!(boot.id.partition, 1);
    assert_eq!(p.state(), State::Running);
    assert_eq!(p.boot_count.load(Ordering::Relaxed), 2);
    assert_eq!(p.life.restarts(), 1);
    assert_eq!(
        p.life
            .inner
            .lock(LockPath::Management)
            .wdog
            .read(wdog::Frame::Control, wdog::WCS, 4),
        u64::from(wdog::WCS_EN),
        "enabled again, WS1 cleared, for the new boot"
    );
}

#[test]
fn before_the_driver_takes_over_the_first_period_is_the_boot_grace() {
    let (sys, mut hw, mut cpu) = watched_beta(3, RestartMode::Never);

    let at = ticks(sys, &mut cpu, &mut hw, 1, 100);

    assert_eq!(at, Some(60), "WS1 at 30 s (BOOT_GRACE_S), not 2 x 3 s");
    assert_eq!(sys.partition(1).unwrap().state(), State::Crashed);
    assert_eq!(idle_deadline(sys, &cpu), None, "never: not restarted");
}

/// Enable the virtual timer PPI of the vCPU loaded on `cpu` and fire it:
/// a HW-linked pending interrupt in a list register.
fn timer_fires(sys: &System, cpu: &mut Cpu, hw: &mut FakeHw, gicr: u64) {
    let mut regs = GuestRegs::default();
    regs.x[2] = 1 << PPI_VTIMER;
    run(sys, cpu, hw, &mut regs, mmio(gicr + 0x1_0100, 4, true, 2));
    dispatch_irq(sys, cpu, hw, PPI_VTIMER);
    assert_eq!(hw.injected(), [PPI_VTIMER]);
}

/// The guest acknowledges the timer (the list register goes active, then
/// its deactivation empties it).
fn guest_takes_the_timer(hw: &mut FakeHw) {
    for lr in hw.lrs.iter_mut() {
        *lr = None;
    }
}

#[test]
fn a_vcpu_with_interrupts_masked_is_hung_once_its_timer_stayed_pending_for_watchdog_s() {
    // alpha: vCPU 1 on CPU 2 hangs; vCPU 0 (CPU 1) would still feed the
    // watchdog.
    let sys = system_with(|plan| plan.partitions[0].lifecycle.watchdog_s = 2);
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 2);
    timer_fires(sys, &mut cpu, &mut hw, GUEST_GICR_BASE + GICR_STRIDE);

    let at = ticks(sys, &mut cpu, &mut hw, 0, 10);

    // Seen pending at the first tick, hung 2 s later.
    assert_eq!(at, Some(5));
    assert_eq!(sys.partition(0).unwrap().state(), State::Crashed);
    let alpha = sys.partition(0).unwrap();
    let inner = alpha.life.inner.lock(LockPath::Management);
    assert!(
        inner
            .last_crash
            .as_ref()
            .unwrap()
            .reason
            .starts_with("vCPU 1 hung"),
        "{:?}",
        inner.last_crash
    );
    drop(inner);
    assert!(
        hw.sgis.iter().any(|&(m, i)| m == 0x101 && i == SGI_MAILBOX),
        "vCPU 0's CPU is told to stop"
    );
    assert_eq!(after_guest_irq(&mut cpu), Next::Park);
}

#[test]
fn a_timer_the_guest_takes_between_checks_is_no_hang() {
    let sys = system_with(|plan| plan.partitions[0].lifecycle.watchdog_s = 2);
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 2);

    for _ in 0..20 {
        timer_fires(sys, &mut cpu, &mut hw, GUEST_GICR_BASE + GICR_STRIDE);
        assert_eq!(ticks(sys, &mut cpu, &mut hw, 0, 1), None);
        guest_takes_the_timer(&mut hw);
        assert_eq!(ticks(sys, &mut cpu, &mut hw, 0, 1), None);
    }

    assert_eq!(sys.partition(0).unwrap().state(), State::Running);
}

#[test]
fn without_watchdog_s_nothing_is_checked() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 2);
    timer_fires(sys, &mut cpu, &mut hw, GUEST_GICR_BASE + GICR_STRIDE);

    assert_eq!(ticks(sys, &mut cpu, &mut hw, 0, 100), None);
    assert_eq!(hw.wakeup, None, "the EL2 timer is not armed again");
}

#[test]
fn the_power_button_then_the_timeout_stops_it_by_force() {
    let sys = system_with(|plan| plan.partitions[1].lifecycle.shutdown_timeout_s = 3);
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 3);
    let p = &sys.partition(1).unwrap();

    sys.press_power_button(p, &mut hw, &mut CpuState::new(sys, 0));
    assert_eq!(p.state(), State::ShuttingDown);
    assert!(hw.sgis.iter().any(|&(m, i)| m == 0x103 && i == SGI_MAILBOX));
    hw.wakeup = sys.wakeup_on(&cpu.state, hw.now, 1000);
    assert_eq!(hw.wakeup, Some(hw.now + HALF_S), "vCPU 0's CPU checks");

    let at = ticks(sys, &mut cpu, &mut hw, 1, 10);

    assert_eq!(at, Some(6));
    assert_eq!(p.state(), State::Stopped);
    assert!(hw.log_has("shutdown timeout: stopped by force"));
    assert_eq!(after_guest_irq(&mut cpu), Next::Park);
}

#[test]
fn a_power_off_after_the_power_button_is_stopped_even_with_always() {
    let sys = system_with(|plan| plan.partitions[1].lifecycle.restart = RestartMode::Always);
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 3);
    let p = &sys.partition(1).unwrap();
    sys.press_power_button(p, &mut hw, &mut CpuState::new(sys, 0));

    let (next, _) = hvc(sys, &mut cpu, &mut hw, [fid::SYSTEM_OFF as u64, 0, 0, 0]);

    assert_eq!(next, Next::Stopped);
    assert_eq!(p.state(), State::Stopped);
    assert_eq!(idle_deadline(sys, &cpu), None, "not restarted");
}

#[test]
fn always_restarts_a_guest_power_off() {
    let sys = system_with(|plan| plan.partitions[1].lifecycle.restart = RestartMode::Always);
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 3);

    hvc(sys, &mut cpu, &mut hw, [fid::SYSTEM_OFF as u64, 0, 0, 0]);

    assert_eq!(idle_deadline(sys, &cpu), Some(hw.now + 1000));
    assert!(hw.log_has("beta stopped (powered off by the guest): restarting in 1 s"));
}

#[test]
fn an_serror_is_a_crash_with_its_reason() {
    let sys = system_with(|plan| plan.partitions[1].lifecycle.restart = RestartMode::OnCrash);
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 3);
    let p = &sys.partition(1).unwrap();

    assert_eq!(
        handle_serror(sys, &mut cpu, &mut hw, 0xbe00_0000),
        Next::Stopped
    );

    assert_eq!(p.state(), State::Crashed);
    let reason = p
        .life
        .inner
        .lock(LockPath::Management)
        .last_crash
        .clone()
        .unwrap()
        .reason;
    assert!(reason.starts_with("fatal fault: SError"), "{reason}");
    assert!(idle_deadline(sys, &cpu).is_some(), "on-crash restarts it");
}

#[test]
fn every_state_change_keeps_its_time() {
    let sys = system();
    let mut hw = FakeHw::new();
    let p = &sys.partition(1).unwrap();
    hw.now = 5000;
    sys.stop_partition(p, &mut hw, 0);
    assert_eq!((p.state(), p.life.since()), (State::Stopped, 5000));
    hw.now = 7000;

    sys.start_partition(p, &mut hw, 0).unwrap();

    assert_eq!((p.state(), p.life.since()), (State::Starting, 7000));
    p.set_state(State::Starting, 8000);
    assert_eq!(p.life.since(), 7000, "no change, no new time");
}

/// The guest DTB `p` was last loaded with, from the fake's memory.
fn loaded_dtb(hw: &FakeHw, p: &Partition) -> Vec<u8> {
    let pa = p.host_addr(p.dtb_ipa.load(Ordering::Relaxed), 64).unwrap();
    let mut header = [0u8; 8];
    HostMemory::read(hw, pa, &mut header);
    let len = u32::from_be_bytes(header[4..8].try_into().unwrap()) as usize;
    let mut dtb = vec![0u8; len];
    HostMemory::read(hw, pa, &mut dtb);
    dtb
}

fn dt_cells(value: &[u8]) -> Vec<u32> {
    value
        .chunks(4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn a_watched_partitions_dtb_has_the_sbsa_watchdog_and_every_one_a_power_button() {
    let (sys, hw, _cpu) = watched_beta(5, RestartMode::Never);
    let dtb = loaded_dtb(&hw, &sys.partition(1).unwrap());
    let fdt = fdt::Fdt::new(&dtb).expect("parses");

    let wd = fdt.find_node("/watchdog@90b0000").expect("watchdog node");
    assert_eq!(wd.compatible().unwrap().first(), "arm,sbsa-gwdt");
    assert_eq!(
        dt_cells(wd.property("reg").unwrap().value),
        [0, 0x090b_0000, 0, 0x1000, 0, 0x090c_0000, 0, 0x1000],
        "control frame, then refresh frame"
    );
    assert_eq!(
        dt_cells(wd.property("interrupts").unwrap().value),
        [0, 60, 4]
    );
    assert_eq!(dt_cells(wd.property("timeout-sec").unwrap().value), [5]);
    assert_eq!(
        (crate::partition::GPIO_NODE, crate::partition::WDOG_NODE),
        (
            alloc::format!("pl061@{:x}", pinfold_vboard::GUEST_GPIO_BASE).as_str(),
            alloc::format!("watchdog@{:x}", GUEST_WDOG_CONTROL_BASE).as_str()
        ),
        "unit addresses"
    );
    let gpio = fdt.find_node("/pl061@90d0000").expect("PL061 node");
    assert!(gpio.compatible().unwrap().all().any(|c| c == "arm,pl061"));
    assert!(gpio.property("gpio-controller").is_some());
    let key = fdt.find_node("/gpio-keys/poweroff").expect("power key");
    assert_eq!(dt_cells(key.property("linux,code").unwrap().value), [116]);
    assert_eq!(
        dt_cells(key.property("gpios").unwrap().value),
        [crate::partition::GUEST_GPIO_PHANDLE, 3, 0]
    );
    // Without watchdog_s: no watchdog node, still the button.
    let mut hw2 = FakeHw::new();
    let plain = system();
    let alpha = &plain.partition(0).unwrap();
    plain.start_partition(alpha, &mut hw2, 1).unwrap();
    let dtb = loaded_dtb(&hw2, alpha);
    let fdt = fdt::Fdt::new(&dtb).expect("parses");
    assert!(fdt.find_node("/watchdog@90b0000").is_none());
    assert!(fdt.find_node("/gpio-keys/poweroff").is_some());
}

#[test]
fn the_power_button_is_line_3_of_the_pl061_pressed_then_released_at_the_next_check() {
    let sys = system();
    let mut hw = FakeHw::new();
    let mut cpu = loaded_cpu(sys, &mut hw, 3);
    let p = &sys.partition(1).unwrap();
    let data = pinfold_vboard::GUEST_GPIO_BASE + (1 << 3 << 2);
    // gpio-keys: both edges, enabled.
    wdog_write(
        sys,
        &mut cpu,
        &mut hw,
        pinfold_vboard::GUEST_GPIO_BASE + 0x408,
        1 << 3,
    );
    wdog_write(
        sys,
        &mut cpu,
        &mut hw,
        pinfold_vboard::GUEST_GPIO_BASE + 0x410,
        1 << 3,
    );
    assert_eq!(wdog_read(sys, &mut cpu, &mut hw, data), 0);

    sys.press_power_button(p, &mut hw, &mut CpuState::new(sys, 0));

    assert_eq!(wdog_read(sys, &mut cpu, &mut hw, data), 1 << 3, "key down");
    assert_eq!(
        wdog_read(
            sys,
            &mut cpu,
            &mut hw,
            pinfold_vboard::GUEST_GPIO_BASE + 0x418
        ),
        1 << 3,
        "its interrupt raised"
    );
    ticks(sys, &mut cpu, &mut hw, 1, 1);
    assert_eq!(wdog_read(sys, &mut cpu, &mut hw, data), 0, "released");
}

#[test]
fn a_due_restart_does_not_rearm_the_el2_timer_in_the_past() {
    let (sys, mut hw, mut cpu) = watched_beta(2, RestartMode::OnCrash);
    let p = &sys.partition(1).unwrap();
    sys.crash_partition(p, &mut hw, 3, "test");
    put(sys, &mut cpu, &mut hw);
    hw.now += 1000;

    // The timer fires in the idle loop once the restart is due.
    dispatch_irq(sys, &mut cpu, &mut hw, PPI_HYP_TIMER);

    assert_eq!(
        hw.wakeup, None,
        "re-armed at or before now: an interrupt storm"
    );
    assert!(
        idle_work(sys, &mut cpu, &mut hw).is_some(),
        "the idle loop restarts it"
    );
    assert_eq!(hw.wakeup, Some(hw.now + HALF_S), "then the checks again");
}

#[test]
fn partition_info_lists_every_partitions_own_pci_functions() {
    use crate::hypercall::Manage;
    let sys = system();
    let mut hw = FakeHw::new();
    let nic = pinfold_abi::PciFunction {
        bus: 0,
        device: 3,
        function: 0,
        vendor_id: 0x1af4,
        device_id: 0x1041,
        class: 0x02_00_00,
    };
    *sys.partition(1)
        .unwrap()
        .pci_found
        .lock(crate::lockstat::LockPath::Management) = alloc::vec![nic];
    // The manager (mgmt, on CPU 0) reads beta's (index 1) and alpha's.
    let mut cpu = CpuState::new(sys, 0);
    let cell = core::cell::RefCell::new(&mut hw);
    let mgr = crate::manage::Manager {
        sys,
        cpu: &mut cpu,
        hw: &cell,
    };
    assert_eq!(mgr.detail(1).expect("beta").pci, [nic]);
    assert_eq!(mgr.detail(0).expect("alpha").pci, []);
    // PCI_FUNCTIONS still gives the caller only its own (mgmt has none).
    assert_eq!(mgr.pci_functions(), []);
}

#[test]
fn gic_info_reports_the_gic_found_and_each_partitions_interface() {
    use crate::hypercall::Manage;
    let mut host = host(4);
    host.gic.found = crate::gichost::GicFound::from_v3_ids(
        &host.gic,
        &crate::gichost::GicV3Ids {
            gicd_pidr2: 0x4b,
            gicd_typer: 1 << 17,
            gicr_typers: alloc::vec![0b11; 4],
            gits_typers: alloc::vec![0b10],
        },
    );
    let sys = system_on_host(|_| {}, None, Default::default(), host);
    let mut hw = FakeHw::new();
    let mut cpu = CpuState::new(sys, 0);
    let cell = core::cell::RefCell::new(&mut hw);
    let mgr = crate::manage::Manager {
        sys,
        cpu: &mut cpu,
        hw: &cell,
    };

    let report = mgr.gic_info().expect("offered");

    assert_eq!(report.host.version, 4);
    assert!(report.host.direct_vlpi && report.host.lpis && report.host.probed);
    assert!(!report.host.v4_1 && !report.host.direct_vsgi);
    assert_eq!(
        report
            .partitions
            .iter()
            .map(|p| (p.index, p.interface))
            .collect::<Vec<_>>(),
        [0, 1, 2].map(|i| (i, pinfold_abi::GicInterface::Gicv3))
    );
    assert_eq!(mgr.host_info().gic_version, 4);
}

// ---- a GICv5 host: the partition's interface reaches its guest --------------

/// [`host`] with a GICv5 (one IRS serving every CPU) as the platform finds
/// it at boot: LPIs, virtualisation, the timer PPIs, and FEAT_GCIE_LEGACY
/// as `gcie_legacy` says.
fn gicv5_host(cpus: usize, gcie_legacy: bool) -> HostInfo {
    let info = crate::dtb::Gicv5Info {
        irs: vec![crate::dtb::Gicv5Irs {
            config: (0x2f1a_0000, 0x1_0000),
            cpus: (0..cpus as u64).map(|i| (0x100 + i, i as u16)).collect(),
            its: vec![],
        }],
        maintenance_ppi: Some(25),
        its_translate: vec![],
    };
    let mut gic = GicInfo::gicv5(info);
    let found = crate::vgic5::HostGicv5 {
        irs: true,
        lpis: true,
        virt: true,
        gcie_legacy,
        ppis: crate::vgic5::PpiSet([0xffff_ffff, 0]),
    };
    gic.found = crate::gichost::GicFound::from_v5(&gic, &found);
    HostInfo { gic, ..host(cpus) }
}

/// The standard system on a GICv5 host; `change` may set each plan's `gic`.
fn gicv5_system(gcie_legacy: bool, change: impl FnOnce(&mut Plan)) -> &'static System {
    system_on_host(change, None, Default::default(), gicv5_host(4, gcie_legacy))
}

/// Start partition `index` and load its boot vCPU on CPU `cpu`.
fn started(sys: &'static System, index: usize, cpu: usize) -> (FakeHw, Cpu<'static>) {
    let mut hw = FakeHw::new();
    let p = sys.partition(index).unwrap();
    p.set_state(State::Stopped, 0);
    sys.start_partition(&p, &mut hw, cpu).unwrap();
    let mut c = Cpu::new(sys, cpu);
    let boot = idle_work(sys, &mut c, &mut hw).expect("vCPU 0 boots");
    load(sys, &mut c, &mut hw, &boot);
    (hw, c)
}

#[test]
fn a_gicv5_partition_gets_the_gicv5_guest_dt_and_a_legacy_one_the_gicv3_dt() {
    let sys = gicv5_system(true, |plan| {
        plan.partitions[0].gic = pinfold_config::GicSetting::V3;
    });
    assert_eq!(
        sys.partition(0).unwrap().gic,
        crate::vgic5::GicInterface::V3
    );
    assert_eq!(
        sys.partition(1).unwrap().gic,
        crate::vgic5::GicInterface::V5
    );

    let (hw, _cpu) = started(sys, 1, 3);
    let dtb = loaded_dtb(&hw, &sys.partition(1).unwrap());
    let fdt = fdt::Fdt::new(&dtb).expect("parses");
    let intc = fdt.find_node("/intc").expect("interrupt controller");
    assert_eq!(intc.compatible().unwrap().first(), "arm,gic-v5");
    let timer = fdt.find_node("/timer").expect("timer");
    assert_eq!(
        dt_cells(timer.property("interrupts").unwrap().value),
        [1, 29, 4, 1, 30, 4, 1, 27, 4, 1, 26, 4],
        "GICv5 PPI specifiers"
    );
    let gpio = fdt.find_compatible(&["arm,pl061"]).expect("PL061");
    assert_eq!(
        dt_cells(gpio.property("interrupts").unwrap().value),
        [3, pinfold_vboard::GUEST_GPIO_INTID - 32, 4],
        "the generated nodes' SPIs in the GICv5 encoding too"
    );

    let (hw, _cpu) = started(sys, 0, 1);
    let dtb = loaded_dtb(&hw, &sys.partition(0).unwrap());
    let fdt = fdt::Fdt::new(&dtb).expect("parses");
    let intc = fdt.find_node("/intc").expect("interrupt controller");
    assert_eq!(intc.compatible().unwrap().first(), "arm,gic-v3");
}

#[test]
fn a_gicv5_partitions_timer_ppis_are_not_mirrored_or_forwarded_a_legacy_ones_are() {
    // alpha (CPU 1) has the GICv5 interface: DVI timers; beta (CPU 3) the
    // GICv3-compatible one: list registers.
    let sys = gicv5_system(true, |plan| {
        plan.partitions[1].gic = pinfold_config::GicSetting::V3;
    });
    let enable_and_fire = |cpu_index: usize| {
        let mut hw = FakeHw::new();
        let mut cpu = loaded_cpu(sys, &mut hw, cpu_index);
        let mut regs = GuestRegs::default();
        regs.x[2] = 1 << PPI_VTIMER;
        run(
            sys,
            &mut cpu,
            &mut hw,
            &mut regs,
            mmio(GUEST_GICR_BASE + 0x1_0100, 4, true, 2),
        );
        let enabled = hw.ppi_enabled & (1 << PPI_VTIMER) != 0;
        dispatch_irq(sys, &mut cpu, &mut hw, PPI_VTIMER);
        (enabled, hw.injected(), hw.deactivated.clone())
    };

    let (enabled, injected, deactivated) = enable_and_fire(1);
    assert!(!enabled, "the DVI timer's host copy stays masked");
    assert!(injected.is_empty(), "no list register for a DVI timer");
    assert_eq!(deactivated, [PPI_VTIMER], "a firing at EL2 is only ended");

    let (enabled, injected, _) = enable_and_fire(3);
    assert!(enabled);
    assert_eq!(injected, [PPI_VTIMER]);
}

#[test]
fn the_boot_virs_takes_every_gicv5_partition_by_its_index_and_tables_from_free_ram() {
    // alpha (0, CPUs 1 and 2) and mgmt (2, CPU 0) are GICv5; beta (1) has
    // the GICv3-compatible interface and no VM.
    let sys = gicv5_system(true, |plan| {
        plan.partitions[1].gic = pinfold_config::GicSetting::V3;
    });
    let layout = crate::vgic5::IrsLayout::for_cpus(4);
    let caps = crate::vgic5::VirsCaps {
        vm_id_bits: layout.vm_id_bits,
        vpe_id_bits: 4,
        spis: 64,
    };

    let boot = sys
        .plan_virs(&sys.virs_members(), &layout, &caps)
        .expect("planned");

    assert_eq!(boot.vms, [0, 2]);
    let doorbells: Vec<(u16, u16, u32)> = boot
        .ops
        .iter()
        .filter_map(|o| match o {
            crate::vgic5::VirsOp::ArmDoorbell { vm, vpe, db } => Some((*vm, *vpe, db.lpi)),
            _ => None,
        })
        .collect();
    let db = layout.doorbell_base;
    assert_eq!(doorbells, [(0, 0, db + 1), (0, 1, db + 2), (2, 0, db)]);
    for p in sys.partitions() {
        for &(base, bytes) in &boot.memory {
            let ram = (p.ram.0, p.ram.0 + p.ram_size);
            assert!(
                base + bytes <= ram.0 || base >= ram.1,
                "tables in {}'s RAM",
                p.name
            );
        }
    }
}

#[test]
fn the_boot_virs_on_two_irses_puts_each_vpe_and_doorbell_on_the_irs_of_its_cpu() {
    // alpha (0) has vCPUs on CPUs 1 and 2, mgmt (2) on CPU 0; IRS 0 serves
    // CPUs 0 and 1, IRS 1 CPUs 2 and 3.
    use crate::vgic5::irses::{vpe_cpu, IrsRoutes, IrsServes};
    use crate::vgic5::VirsOp;
    let sys = gicv5_system(true, |plan| {
        plan.partitions[1].gic = pinfold_config::GicSetting::V3;
    });
    let layout = crate::vgic5::IrsLayout::for_cpus(4);
    let caps = crate::vgic5::VirsCaps {
        vm_id_bits: layout.vm_id_bits,
        vpe_id_bits: 4,
        spis: 64,
    };
    let routes = IrsRoutes {
        irses: vec![
            IrsServes {
                cpus: vec![0, 1],
                spis: 0..32,
            },
            IrsServes {
                cpus: vec![2, 3],
                spis: 32..64,
            },
        ],
    };
    let members = sys.virs_members();
    let boot = sys.plan_virs(&members, &layout, &caps).expect("planned");

    let split = routes
        .split_virs(&boot.ops, |vm, vpe| vpe_cpu(&members, vm, vpe))
        .expect("every step has an IRS");

    let vpes = |irs: usize| -> Vec<(u16, u16, u32)> {
        split[irs]
            .iter()
            .filter_map(|o| match o {
                VirsOp::ArmDoorbell { vm, vpe, db } => Some((*vm, *vpe, db.lpi)),
                _ => None,
            })
            .collect()
    };
    let db = layout.doorbell_base;
    assert_eq!(vpes(0), [(0, 0, db + 1), (2, 0, db)]);
    assert_eq!(vpes(1), [(0, 1, db + 2)]);
    let mapped = |irs: usize| {
        split[irs]
            .iter()
            .filter(|o| matches!(o, VirsOp::MapVm { .. }))
            .count()
    };
    assert_eq!((mapped(0), mapped(1)), (2, 2), "both VMs on both IRSes");
}

#[test]
fn an_spi_no_irs_has_is_refused_at_boot_naming_the_partition_and_field() {
    // beta (1, gicv3: its SPIs are on an IRS too) owns SPI 40; the IRSes
    // have SPIs 0..32 and 32..40, then 0..32 and 32..64.
    let sys = gicv5_system(true, |plan| {
        plan.partitions[1].gic = pinfold_config::GicSetting::V3;
        plan.partitions[1].devices.push(pinfold_config::DevicePlan {
            name: "dev".into(),
            mmio: vec![pinfold_config::MmioRange {
                base: 0x904_0000,
                size: 0x1000,
            }],
            spis: vec![32 + 40],
            compatible: None,
            host_node: None,
        });
    });
    let routes = |second: core::ops::Range<u32>| crate::vgic5::irses::IrsRoutes {
        irses: vec![
            crate::vgic5::irses::IrsServes {
                cpus: vec![0, 1],
                spis: 0..32,
            },
            crate::vgic5::irses::IrsServes {
                cpus: vec![2, 3],
                spis: second,
            },
        ],
    };

    let short = sys.check_irs_spis(&routes(32..40)).unwrap_err();
    let covered = sys.check_irs_spis(&routes(32..64));

    assert_eq!(
        short.to_string(),
        "partition \"beta\": devices: SPI 40 is in no IRS's SPI range (the IRSes have [0..32, 32..40])"
    );
    assert_eq!(covered, Ok(()));
}

/// The host view of a GICv5 as the platform finds it at boot
/// (`GicFound::from_v5` over the description and the probed registers),
/// through GIC_INFO: version 5, its IRSes and GCIE_LEGACY; a partition
/// with `gic = "auto"` gets the GICv5 interface, one with `gic = "v3"`
/// the GICv3-compatible one.
#[test]
fn gic_info_on_a_gicv5_host_reports_its_irses_gcie_legacy_and_each_interface() {
    use crate::hypercall::Manage;
    let mut host = host(4);
    let irs = |config: u64, cpus: core::ops::Range<u64>| crate::dtb::Gicv5Irs {
        config: (config, 0x1_0000),
        cpus: cpus.map(|c| (0x100 + c, c as u16)).collect(),
        its: Vec::new(),
    };
    host.gic = GicInfo::gicv5(crate::dtb::Gicv5Info {
        irs: alloc::vec![irs(0x2f1a_0000, 0..2), irs(0x2f1c_0000, 2..4)],
        maintenance_ppi: Some(25),
        its_translate: Vec::new(),
    });
    let probed = crate::vgic5::HostGicv5 {
        irs: true,
        lpis: true,
        virt: true,
        gcie_legacy: true,
        ppis: crate::vgic5::PpiSet::of(&[23, 25, 26, 27, 30]),
    };
    host.gic.found = crate::gichost::GicFound::from_v5(&host.gic, &probed);
    let sys = system_on_host(
        |plan| plan.partitions[1].gic = pinfold_config::GicSetting::V3,
        None,
        Default::default(),
        host,
    );
    let mut hw = FakeHw::new();
    let mut cpu = CpuState::new(sys, 0);
    let cell = core::cell::RefCell::new(&mut hw);
    let mgr = crate::manage::Manager {
        sys,
        cpu: &mut cpu,
        hw: &cell,
    };

    let report = mgr.gic_info().expect("offered");

    assert_eq!(
        report.host,
        pinfold_abi::GicHost {
            version: 5,
            lpis: true,
            probed: true,
            irs_count: 2,
            gcie_legacy: true,
            ..Default::default()
        }
    );
    use pinfold_abi::GicInterface::{Gicv3, Gicv5};
    assert_eq!(
        report
            .partitions
            .iter()
            .map(|p| (p.index, p.interface))
            .collect::<Vec<_>>(),
        [(0, Gicv5), (1, Gicv3), (2, Gicv5)]
    );
    assert_eq!(mgr.host_info().gic_version, 5);
}

#[test]
fn a_gicv5_guests_gicd_frame_is_its_irs_frame_refusals_counted_trigger_applied() {
    // beta (CPU 3) is GICv5 and owns SPI 40 (core INTID 72) through a device.
    let sys = gicv5_system(true, |plan| {
        plan.partitions[1].devices.push(pinfold_config::DevicePlan {
            name: "dev".into(),
            mmio: vec![pinfold_config::MmioRange {
                base: 0x904_0000,
                size: 0x1000,
            }],
            spis: vec![72],
            compatible: None,
            host_node: None,
        });
    });
    let beta = sys.partition(1).unwrap();
    let (mut hw, mut cpu) = started(sys, 1, 3);
    let mut regs = GuestRegs::default();
    let faults = || beta.faults.load(core::sync::atomic::Ordering::Relaxed);
    let mut access = |hw: &mut FakeHw, regs: &mut GuestRegs, offset: u64, write: bool| {
        run(
            sys,
            &mut cpu,
            hw,
            regs,
            mmio(GUEST_GICD_BASE + offset, 4, write, 2),
        );
    };

    // IRS_IDR2 (GICD_IIDR's offset in a GICv3 distributor): LPIs, the VM's
    // LPI ID bits.
    access(&mut hw, &mut regs, 0x8, false);
    let idr2 = regs.x[2];
    // IRS_SPI_SELR of SPI 41, not beta's: counted, SPI_STATUSR.V = 0.
    regs.x[2] = 41;
    access(&mut hw, &mut regs, 0x108, true);
    let after_foreign = faults();
    access(&mut hw, &mut regs, 0x118, false);
    let foreign_status = regs.x[2];
    // Its own SPI 40 made level.
    regs.x[2] = 40;
    access(&mut hw, &mut regs, 0x108, true);
    regs.x[2] = 1;
    access(&mut hw, &mut regs, 0x114, true);

    assert_eq!(idr2, u64::from(crate::vgic5::VM_LPI_ID_BITS) | 1 << 5);
    assert_eq!(after_foreign, 1);
    assert_eq!(foreign_status, 1, "IDLE, not V");
    assert_eq!(faults(), 1, "its own SPI is no fault");
    assert_eq!(
        hw.spi_ops,
        [SpiOp::SetEdge {
            intid: 72,
            edge: false
        }]
    );
}

/// An IRS_SWERR_SYNDROMER0 value: a virtual (VIRTUAL = 1) record of VM
/// `vm` naming LPI (type 2) `id`.
fn swerr(vm: u16, id: u32) -> u64 {
    (1 << 63) | (2 << 60) | (u64::from(id) << 32) | u64::from(vm)
}

#[test]
fn irs_software_errors_are_counted_against_the_partition_whose_vm_caused_them() {
    // alpha (0) and mgmt (2) are GICv5, beta (1) the GICv3-compatible one.
    let sys = gicv5_system(true, |plan| {
        plan.partitions[1].gic = pinfold_config::GicSetting::V3;
    });
    let faults = |i: usize| {
        sys.partition(i)
            .unwrap()
            .faults
            .load(core::sync::atomic::Ordering::Relaxed)
    };
    let before = [faults(0), faults(1), faults(2)];
    let mut hw = FakeHw::new();
    // alpha's twice, beta's VM (it has none), a physical-domain record, a VM
    // no partition has.
    hw.swerrs = vec![swerr(0, 5), swerr(0, 9), swerr(1, 5), 5 << 32, swerr(7, 1)];

    let drained = sys.virs_poll(&mut hw);

    assert_eq!(drained, 5);
    assert_eq!(
        [
            faults(0) - before[0],
            faults(1) - before[1],
            faults(2) - before[2]
        ],
        [2, 0, 0]
    );
    assert!(
        hw.log_has("virtual LPI 5 its VM does not have"),
        "{:?}",
        hw.log
    );
    assert_eq!(
        hw.log
            .iter()
            .filter(|l| l.contains("not from a guest's VM"))
            .count(),
        3
    );
}

#[test]
fn irs_software_errors_are_drained_a_bounded_number_at_a_time() {
    let sys = gicv5_system(true, |_| {});
    let mut hw = FakeHw::new();
    hw.swerrs = vec![swerr(0, 1); 40];

    let first = sys.virs_poll(&mut hw);
    let second = sys.virs_poll(&mut hw);

    assert_eq!((first, second), (crate::vgic5::SWERR_DRAIN_MAX, 8));
}

#[test]
fn a_management_call_drains_the_irs_software_errors_first() {
    let sys = gicv5_system(true, |_| {});
    let alpha = sys.partition(0).unwrap();
    let before = alpha.faults.load(core::sync::atomic::Ordering::Relaxed);
    let (mut hw, mut cpu) = started(sys, 2, 0);
    hw.swerrs = vec![swerr(0, 3)];

    hvc(
        sys,
        &mut cpu,
        &mut hw,
        [fid::PINFOLD_64_BASE as u64, 0, 0, 0],
    );

    assert!(hw.swerrs.is_empty());
    assert_eq!(
        alpha.faults.load(core::sync::atomic::Ordering::Relaxed),
        before + 1
    );
}

#[test]
fn a_doorbell_wakes_only_a_powered_vcpu_that_is_not_resident_and_rearms_it() {
    use crate::vgic5::DoorbellAction;
    // alpha: vCPU 0 on CPU 1, vCPU 1 on CPU 2; beta: vCPU 0 on CPU 3.
    let sys = gicv5_system(true, |_| {});
    let (mut hw, cpu1) = started(sys, 0, 1);
    let idle2 = Cpu::new(sys, 2);

    // alpha's vCPU 0 is resident on CPU 1: the doorbell raced its load.
    let resident = doorbell(sys, &cpu1, &mut hw, 1);
    // alpha's vCPU 1 is off (no CPU_ON yet): not woken.
    let off = doorbell(sys, &idle2, &mut hw, 2);
    // beta is not running.
    let down = doorbell(sys, &idle2, &mut hw, 3);
    let rearmed_before = hw.rearmed.len();
    // CPU_ON of alpha's vCPU 1 accepted, its CPU not yet in the guest.
    let alpha = sys.partition(0).unwrap();
    assert!(alpha.vcpus[1].power.try_claim_on().is_ok());
    let on = doorbell(sys, &idle2, &mut hw, 2);

    assert_eq!(resident, DoorbellAction::Resident);
    assert_eq!(off, DoorbellAction::Parked { vm: 0, vpe: 1 });
    assert_eq!(down, DoorbellAction::Parked { vm: 1, vpe: 0 });
    assert_eq!(rearmed_before, 0);
    assert_eq!(on, DoorbellAction::Wake { vm: 0, vpe: 1 });
    assert_eq!(hw.rearmed, [(0, 1, 2)]);
}

#[test]
fn a_doorbell_of_a_cpu_with_no_gicv5_vcpu_is_logged_as_the_hypervisors() {
    let sys = gicv5_system(true, |plan| {
        plan.partitions[1].gic = pinfold_config::GicSetting::V3;
    });
    let mut hw = FakeHw::new();
    let cpu = Cpu::new(sys, 3);

    let action = doorbell(sys, &cpu, &mut hw, 3);

    assert_eq!(action, crate::vgic5::DoorbellAction::Unowned);
    assert!(hw.rearmed.is_empty());
    assert!(hw.log_has("runs no gicv5 vCPU"), "{:?}", hw.log);
}

/// The guest's PL011 TX interrupt on (IMSC.TXIM with the TX FIFO empty:
/// the line rises) or off (it falls).
fn uart_txim(sys: &'static System, cpu: &mut Cpu<'static>, hw: &mut FakeHw, on: bool) {
    let mut regs = GuestRegs::default();
    regs.x[1] = 0x301;
    run(
        sys,
        cpu,
        hw,
        &mut regs,
        mmio(GUEST_UART_BASE + 0x30, 4, true, 1),
    );
    regs.x[1] = if on { 1 << 5 } else { 0 };
    run(
        sys,
        cpu,
        hw,
        &mut regs,
        mmio(GUEST_UART_BASE + 0x38, 4, true, 1),
    );
}

#[test]
fn a_gicv5_partitions_uart_interrupt_is_a_vdpend_of_its_own_vm_and_no_list_register() {
    // alpha (index 0) keeps the GICv3 interface; beta (index 1, VM 1) is
    // gicv5, its vCPU 0 on CPU 3.
    let sys = gicv5_system(true, |plan| {
        plan.partitions[0].gic = pinfold_config::GicSetting::V3;
    });
    let (mut hw, mut cpu) = started(sys, 1, 3);

    uart_txim(sys, &mut cpu, &mut hw, true);
    // VM 1's virtual SPI 1 (the UART's INTID 33) pending; VM [47:32] = 1.
    assert_eq!(hw.pended, [1 << 63 | 1 << 32 | 3 << 29 | 1]);
    uart_txim(sys, &mut cpu, &mut hw, false);
    assert_eq!(hw.pended[1], 1 << 32 | 3 << 29 | 1, "lowered: not pending");
    assert_eq!(hw.pended.len(), 2);
    assert!(hw.injected().is_empty(), "no list register");
    let mut posted = Vec::new();
    for c in &sys.cpus {
        c.mailbox.drain(|op| posted.push(op));
    }
    assert!(posted.is_empty(), "no mailbox: {posted:?}");
}

#[test]
fn a_gicv3_partition_on_a_gicv5_host_keeps_its_distributor_path_for_the_uart() {
    let sys = gicv5_system(true, |plan| {
        plan.partitions[0].gic = pinfold_config::GicSetting::V3;
    });
    let (mut hw, mut cpu) = started(sys, 0, 1);
    let mut regs = GuestRegs::default();
    uart_spi_routed_to(sys, &mut cpu, &mut hw, &mut regs, 0);

    uart_txim(sys, &mut cpu, &mut hw, true);
    assert!(hw.injected().contains(&33), "{:?}", hw.injected());
    assert!(hw.pended.is_empty(), "no VDPEND for a gicv3 partition");
}

#[test]
fn a_gicv5_guests_trapped_icc_ppi_accesses_hide_what_its_plan_does_not_give_it() {
    use crate::vgic5::ppitrap::IchPpiReg;
    use crate::vgic5::{PPI_CNTHP, PPI_CNTV};
    // alpha (CPU 1) has the GICv5 interface; beta (CPU 3) the GICv3 one.
    let sys = gicv5_system(true, |plan| {
        plan.partitions[1].gic = pinfold_config::GicSetting::V3;
    });
    let (mut hw, mut c) = started(sys, 0, 1);
    let enabler0 = SysRegId::new(3, 0, 12, 10, 6);
    let access = |read| {
        Exit::SysReg(SysRegAccess {
            reg: enabler0,
            rt: 4,
            read,
        })
    };
    // The hypervisor's EL2 timer PPI is enabled in the vCPU's state.
    hw.vppi
        .insert(IchPpiReg::Enabler(0), 1 << PPI_CNTHP | 1 << PPI_CNTV);
    let mut regs = GuestRegs::default();
    assert_eq!(
        run(sys, &mut c, &mut hw, &mut regs, access(true)),
        Next::Resume
    );
    assert_eq!(regs.x[4], 1 << PPI_CNTV, "the hidden PPI reads as 0");
    assert_eq!(regs.elr, 4);
    // Disabling every PPI disables the visible one only; enabling the
    // hidden one does nothing.
    regs.x[4] = 0;
    assert_eq!(
        run(sys, &mut c, &mut hw, &mut regs, access(false)),
        Next::Resume
    );
    assert_eq!(hw.vppi[&IchPpiReg::Enabler(0)], 1 << PPI_CNTHP);
    hw.vppi.insert(IchPpiReg::Enabler(0), 0);
    regs.x[4] = 1 << PPI_CNTHP | 1 << PPI_CNTV;
    assert_eq!(
        run(sys, &mut c, &mut hw, &mut regs, access(false)),
        Next::Resume
    );
    assert_eq!(hw.vppi[&IchPpiReg::Enabler(0)], 1 << PPI_CNTV);
    assert_eq!(sys.partition(0).unwrap().faults.load(Ordering::Relaxed), 0);

    // The GICv3 partition has no such register: undefined, as before.
    let (mut hw, mut c) = started(sys, 1, 3);
    let next = run(
        sys,
        &mut c,
        &mut hw,
        &mut GuestRegs::default(),
        access(true),
    );
    assert!(matches!(next, Next::Inject(_)), "{next:?}");
    assert!(hw.vppi.is_empty());
}
