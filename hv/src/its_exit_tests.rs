//! The virtual ITS through the exit path (`its`): a guest's GITS frame and
//! command queue in its RAM, the commands that reach the (fake) physical
//! ITS, the LPI routes they set, and the delivery of the physical LPI.

use super::*;
use crate::its::{HostIts, ItsQueue};
use crate::vgic::pits::{ItsCmd, ItsTyper, LpiRoute, LPI_BASE};
use crate::vgic::v40::V4Cmd;
use alloc::sync::Arc;

/// GITS_TYPER of QEMU's ITS: Physical, 8-byte ITT entries, 16 ID bits,
/// 16 DeviceID bits, PTA = 0, HCC = 0.
pub(super) const QEMU_TYPER: u64 = 1 | 7 << 4 | 15 << 8 | 15 << 13;

/// The physical ITS's queue, recording every command.
#[derive(Clone, Default)]
pub(super) struct FakeQueue {
    sent: Arc<spin::Mutex<Vec<ItsCmd>>>,
    /// Every command sent through `send_v4`, GICv3 ones included.
    pub(super) sent_v4: Arc<spin::Mutex<Vec<V4Cmd>>>,
    next_itt: u64,
    /// Pending tables handed out and not given back.
    vpts: Arc<spin::Mutex<Vec<u64>>>,
    /// Every command sent through `send_words` (GICv4.1).
    pub(super) words: Arc<spin::Mutex<Vec<[u64; 4]>>>,
    /// The GICv4.1 model those commands also go to (`vsgi_exit_tests`).
    pub(super) model: Option<Arc<spin::Mutex<pinfold_gicmodel::Model>>>,
    /// The model's ITS this queue is.
    model_its: usize,
}

impl FakeQueue {
    /// A queue whose `send_words` commands also go to ITS 0 of `model`.
    pub(super) fn with_model(model: Arc<spin::Mutex<pinfold_gicmodel::Model>>) -> FakeQueue {
        FakeQueue::with_model_its(model, 0)
    }

    /// A queue whose `send_words` commands also go to ITS `its` of `model`.
    pub(super) fn with_model_its(
        model: Arc<spin::Mutex<pinfold_gicmodel::Model>>,
        its: usize,
    ) -> FakeQueue {
        FakeQueue {
            model: Some(model),
            model_its: its,
            ..Default::default()
        }
    }

    /// Pending (and configuration) tables handed out and not given back.
    pub(super) fn vpts_live(&self) -> usize {
        self.vpts.lock().len()
    }
}

impl ItsQueue for FakeQueue {
    fn send(&mut self, cmd: &ItsCmd) {
        self.sent.lock().push(*cmd);
    }
    fn alloc_itt(&mut self, bytes: usize) -> Option<u64> {
        self.next_itt += bytes.next_multiple_of(256) as u64;
        Some(0x7000_0000 + self.next_itt)
    }
    fn free_itt(&mut self, _: u64, _: usize) {}
    fn send_v4(&mut self, cmd: &V4Cmd) {
        self.sent_v4.lock().push(*cmd);
        if let Some(m) = self.model.as_ref() {
            m.lock().enqueue(self.model_its, cmd.encode());
        }
    }
    fn send_words(&mut self, words: [u64; 4]) {
        self.words.lock().push(words);
        if let Some(m) = self.model.as_ref() {
            m.lock().enqueue(self.model_its, words);
        }
    }
    fn alloc_vpt(&mut self, bytes: usize) -> Option<u64> {
        let mut vpts = self.vpts.lock();
        let at = 0x7800_0000 + (vpts.len() * bytes) as u64;
        vpts.push(at);
        Some(at)
    }
    fn free_vpt(&mut self, pa: u64, _: usize) {
        self.vpts.lock().retain(|&v| v != pa);
    }
}

/// alpha's NIC: 00:02.0, DeviceID 0x10.
pub(super) const NIC: u32 = 0x10;
const CMDQ: u64 = 0x30_0000;
pub(super) const PROP: u64 = 0x10_0000;
const PEND: u64 = 0x20_0000;

/// alpha (vCPUs on CPUs 1, 2) assigned 00:02.0 on a host with an ITS and
/// no SMMU; CPUs 1 and 2 have mapped their collections.
fn its_system() -> (&'static System, Arc<spin::Mutex<Vec<ItsCmd>>>) {
    let (sys, sent, _) = its_system_on(|_| {});
    (sys, sent)
}

/// [`its_system`] on the host `tweak` changed, with its table memory.
fn its_system_on(
    tweak: impl FnOnce(&mut HostInfo),
) -> (&'static System, Arc<spin::Mutex<Vec<ItsCmd>>>, FakeTables) {
    let (sys, queue, tables) = its_system_of(tweak, false);
    (sys, queue.sent, tables)
}

/// [`its_system`] on a GICv4.0 host: the ITS reports Virtual and direct
/// vLPIs are on. Returns the fake queue (sharing its records).
pub(super) fn v4_system() -> (&'static System, FakeQueue) {
    let (sys, queue, _) = its_system_of(|_| {}, true);
    assert!(sys.its.as_ref().is_some_and(crate::its::ItsSet::direct));
    (sys, queue)
}

/// The host bridge of [`its_system`]'s host: QEMU virt's windows.
pub(super) fn its_system_host_bridge() -> Option<crate::dtb::PcieInfo> {
    Some(crate::dtb::PcieInfo {
        ecam: (0x40_1000_0000, 0x1000_0000),
        bus_range: (0, 0xff),
        ranges: crate::acpi::board::qemu_virt_pci_ranges(),
        interrupt_map: Vec::new(),
        interrupt_map_mask: [0; 4],
        node_path: "/pcie@10000000".into(),
        msi_map: alloc::vec::Vec::new(),
        iommu_map: Vec::new(),
    })
}

/// What the platform finds on QEMU's gic-version=4: a GICv4.0 offering
/// direct vLPIs.
fn gicv4_0_found() -> crate::gichost::GicFound {
    crate::gichost::GicFound {
        version: 4,
        direct_vlpi: true,
        probed: true,
        ..Default::default()
    }
}

#[test]
fn direct_vlpis_only_on_a_gicv4_0_host_offering_them_with_a_gicv4_its() {
    use crate::gichost::GicFound;
    let its = |typer| HostIts::new(ItsTyper::decode(typer), Box::new(FakeQueue::default()), 4);
    let v4 = QEMU_TYPER | 1 << 1;
    assert!(its(v4).enable_direct(&gicv4_0_found()));
    // A GICv3 ITS on the same host, a host without VLPIS, a GICv4.1.
    assert!(!its(QEMU_TYPER).enable_direct(&gicv4_0_found()));
    let no_vlpis = GicFound {
        direct_vlpi: false,
        ..gicv4_0_found()
    };
    assert!(!its(v4).enable_direct(&no_vlpis));
    let v4_1 = GicFound {
        v4_1: true,
        direct_vsgi: true,
        ..gicv4_0_found()
    };
    let mut on_41 = its(v4);
    assert!(!on_41.enable_direct(&v4_1));
    assert!(!on_41.direct());
}

fn its_system_of(
    tweak: impl FnOnce(&mut HostInfo),
    v4: bool,
) -> (&'static System, FakeQueue, FakeTables) {
    use crate::pci::Bdf;
    let mut h = host(4);
    h.gic.its = vec![(0x0808_0000, 0x2_0000)];
    h.pcie = its_system_host_bridge();
    let queue = FakeQueue::default();
    let records = queue.clone();
    let typer = if v4 { QEMU_TYPER | 1 << 1 } else { QEMU_TYPER };
    let mut its = HostIts::new(ItsTyper::decode(typer), Box::new(queue), 4);
    assert_eq!(
        its.enable_direct(&gicv4_0_found()),
        v4,
        "direct vLPIs only on a GICv4 ITS"
    );
    tweak(&mut h);
    let (sys, tables) = system_and_tables(
        alpha_gets_00_02_0,
        None,
        Default::default(),
        h,
        vec![nic_function(Bdf {
            bus: 0,
            dev: 2,
            func: 0,
        })],
        Some(its),
    );
    for cpu in [1, 2] {
        sys.its_cpu_online(cpu, cpu as u16, 0);
    }
    records.sent.lock().clear();
    records.sent_v4.lock().clear();
    (sys, records, tables)
}

pub(super) fn its_reg(
    sys: &System,
    cpu: &mut Cpu,
    hw: &mut FakeHw,
    offset: u64,
    width: u8,
    value: Option<u64>,
) -> u64 {
    let mut regs = GuestRegs::default();
    regs.x[2] = value.unwrap_or(0);
    let ipa = pinfold_vboard::GUEST_ITS_BASE + offset;
    assert_eq!(
        run(
            sys,
            cpu,
            hw,
            &mut regs,
            mmio(ipa, width, value.is_some(), 2)
        ),
        Next::Resume
    );
    regs.x[2]
}

/// Writes `cmds` into alpha's command queue from slot `first` on.
pub(super) fn queue_commands(hw: &mut FakeHw, p: &Partition, first: u64, cmds: &[[u64; 4]]) {
    for (i, c) in cmds.iter().enumerate() {
        let at = p.host_addr(p.ram_ipa + CMDQ + (first + i as u64) * 32, 32);
        let mut bytes = [0u8; 32];
        for (j, w) in c.iter().enumerate() {
            bytes[8 * j..8 * j + 8].copy_from_slice(&w.to_le_bytes());
        }
        HostMemory::write(hw, at.unwrap(), &bytes);
    }
}

/// vCPU 0 of alpha loaded on CPU 1, its LPI tables at PROP/PEND, the
/// vITS's queue at CMDQ and enabled.
pub(super) fn alpha_with_lpis(
    sys: &'static System,
    hw: &mut FakeHw,
) -> (Cpu<'static>, Arc<Partition>) {
    alpha_with_lpis_at(sys, hw, PROP)
}

/// [`alpha_with_lpis`] with its property table at RAM offset `prop`.
fn alpha_with_lpis_at(
    sys: &'static System,
    hw: &mut FakeHw,
    prop: u64,
) -> (Cpu<'static>, Arc<Partition>) {
    let mut cpu = loaded_cpu(sys, hw, 1);
    let id = sys.assigned(1).unwrap();
    let p = sys.partition(id.partition).unwrap();
    assert_eq!(p.name, "alpha");
    let mut regs = GuestRegs::default();
    for (off, value, width) in [
        (0x70, (p.ram_ipa + prop) | 15, 8),
        (0x78, p.ram_ipa + PEND, 8),
        (0x0, 1, 4),
    ] {
        regs.x[2] = value;
        run(
            sys,
            &mut cpu,
            hw,
            &mut regs,
            mmio(GUEST_GICR_BASE + off, width, true, 2),
        );
    }
    // Size 0: one 4 KiB page.
    let cbaser = 1 << 63 | (p.ram_ipa + CMDQ);
    its_reg(sys, &mut cpu, hw, 0x80, 8, Some(cbaser));
    its_reg(sys, &mut cpu, hw, 0x0, 4, Some(1));
    (cpu, p)
}

/// `p` counted one fault more than `before`, and the log says `needle`.
fn assert_one_fault(p: &Partition, before: u64, hw: &FakeHw, needle: &str) {
    assert_eq!(
        p.faults.load(core::sync::atomic::Ordering::Relaxed),
        before + 1
    );
    assert!(
        hw.log.iter().any(|l| l.contains(needle)),
        "{needle} not in {:?}",
        hw.log
    );
}

/// alpha's guest maps its NIC's event 1 to vLPI 8300 on vCPU 0 (MAPD,
/// MAPC, MAPTI, INV) and writes GITS_CWRITER past them.
pub(super) fn map_nic_event_1(sys: &System, cpu: &mut Cpu, hw: &mut FakeHw, p: &Partition) {
    queue_commands(
        hw,
        p,
        0,
        &[
            mapd(NIC, 4),
            mapc(0, 0),
            mapti(NIC, 1, 8300, 0),
            inv(NIC, 1),
        ],
    );
    its_reg(sys, cpu, hw, 0x88, 8, Some(4 * 32));
}

fn mapd(device: u32, size: u64) -> [u64; 4] {
    [0x08 | u64::from(device) << 32, size, 1 << 63, 0]
}
fn mapc(icid: u64, rdbase: u64) -> [u64; 4] {
    [0x09, 0, 1 << 63 | rdbase << 16 | icid, 0]
}
fn mapti(device: u32, event: u64, vintid: u64, icid: u64) -> [u64; 4] {
    [
        0x0A | u64::from(device) << 32,
        event | vintid << 32,
        icid,
        0,
    ]
}
fn inv(device: u32, event: u64) -> [u64; 4] {
    [0x0C | u64::from(device) << 32, event, 0, 0]
}

#[test]
fn msi_path_is_decided_from_the_manager_the_host_its_and_the_smmu() {
    use crate::its::{msi_path, MsiPath, NoMsi};
    let qemu = Some(0x0808_0000);
    assert_eq!(msi_path(false, qemu, false), Ok(MsiPath::Direct));
    assert_eq!(msi_path(true, qemu, false), Err(NoMsi::Management));
    assert_eq!(msi_path(true, qemu, true), Err(NoMsi::Management));
    assert_eq!(msi_path(false, None, false), Err(NoMsi::NoHostIts));
    assert_eq!(msi_path(false, None, true), Err(NoMsi::NoHostIts));
    // Elsewhere without an SMMU: the device would write the doorbell's
    // address as a physical one, which is not the ITS.
    assert_eq!(
        msi_path(false, Some(0x4_0000_0000), false),
        Err(NoMsi::Misplaced {
            translater: 0x4_0001_0040
        })
    );
    // With one, wherever the ITS is: the doorbell page onto its page.
    for (base, page) in [(0x0808_0000, 0x0809_0000), (0x4_0000_0000, 0x4_0001_0000)] {
        assert_eq!(
            msi_path(false, Some(base), true),
            Ok(MsiPath::Smmu {
                ipa: 0x0809_0000,
                pa: page
            })
        );
    }
}

/// The host of [`its_system`] with its host bridge behind an SMMU and its
/// ITS at `its`.
fn behind_smmu(its: u64) -> impl FnOnce(&mut HostInfo) {
    move |h| {
        h.gic.its = vec![(its, 0x2_0000)];
        h.pcie.as_mut().unwrap().iommu_map = vec![crate::dtb::PciIommuMap {
            rid_base: 0,
            iommu_base: 0x905_0000,
            sid_base: 0,
            len: 0x1_0000,
        }];
        h.devices.push(crate::dtb::HostDevice {
            path: "/smmuv3@9050000".into(),
            compatible: vec!["arm,smmu-v3".into()],
            regs: vec![(0x905_0000, 0x2_0000)],
            spis: vec![106, 107, 108, 109],
            enabled: true,
            smmu_model: Default::default(),
        });
    }
}

#[test]
fn behind_an_smmu_the_doorbell_page_is_in_the_dma_stage2_only() {
    use crate::addr::{Ipa, PhysAddr};
    use crate::stage2::{MemType, Stage2};
    let (sys, _, tables) = its_system_on(behind_smmu(0x4_0000_0000));
    let parts = sys.partitions();
    let alpha = parts.iter().find(|p| p.name == "alpha").unwrap();
    assert!(alpha.has_vits(), "an SMMU no longer keeps MSI off");
    assert_eq!(
        alpha.vpci.as_ref().unwrap().fresh.msi_doorbell,
        Some(pinfold_vboard::GUEST_ITS_DOORBELL)
    );
    assert_ne!(alpha.dma_root, alpha.stage2_root);
    let cpu = Stage2::from_root(alpha.stage2_root);
    let dma = Stage2::from_root(alpha.dma_root);
    let doorbell = Ipa(pinfold_vboard::GUEST_ITS_DOORBELL);
    assert_eq!(
        dma.translate(&tables, doorbell),
        Some((PhysAddr(0x4_0001_0040), MemType::Device)),
        "a device's MSI reaches the host's GITS_TRANSLATER"
    );
    assert_eq!(
        cpu.translate(&tables, doorbell),
        None,
        "a CPU store to the doorbell still traps (reads as zero)"
    );
    // Everything else the same in both: its RAM and its windows.
    for ipa in [alpha.ram_ipa, alpha.ram_ipa + alpha.ram_size - 8] {
        assert_eq!(
            dma.translate(&tables, Ipa(ipa)),
            cpu.translate(&tables, Ipa(ipa))
        );
        assert!(cpu.translate(&tables, Ipa(ipa)).is_some());
    }
    for (base, _) in alpha.vpci.as_ref().unwrap().assignment.cpu_windows() {
        assert_eq!(
            dma.translate(&tables, Ipa(base)),
            cpu.translate(&tables, Ipa(base))
        );
    }
    // The next page up is not the ITS's control frame.
    assert_eq!(dma.translate(&tables, Ipa(0x0809_1000)), None);
    assert_eq!(dma.translate(&tables, Ipa(0x0808_0000)), None);
    // A partition without functions has one tree.
    let beta = parts.iter().find(|p| p.name == "beta").unwrap();
    assert_eq!(beta.dma_root, beta.stage2_root);
    assert_eq!(beta.msi, None);
}

#[test]
fn the_smmu_binds_a_functions_stream_to_the_dma_stage2() {
    use crate::smmu::tests::Dma;
    let (sys, _, _) = its_system_on(behind_smmu(0x0808_0000));
    let mut hw = FakeHw::new();
    hw.smmu = Some(crate::smmu::tests::rig());
    assert!(sys.smmu_init(&mut hw, crate::stage2::vtcr_el2(44)).unwrap());
    let parts = sys.partitions();
    let alpha = parts.iter().find(|p| p.name == "alpha").unwrap();
    let nic = crate::pci::Bdf {
        bus: 0,
        dev: 2,
        func: 0,
    };
    assert_eq!(sys.smmu_bind(&mut hw, alpha, &[nic]).unwrap(), 1);
    let model = smmu_model_with_ram(&hw, alpha);
    assert_eq!(
        model.borrow_mut().dma(0x10, alpha.ram_ipa + 0x1000, false),
        Dma::Done {
            vmid: alpha.vmid,
            root: alpha.dma_root.0
        }
    );
}

#[test]
fn without_an_smmu_an_its_away_from_the_doorbell_gives_no_vits() {
    let (sys, _, _) = its_system_on(|h| h.gic.its = vec![(0x4_0000_0000, 0x2_0000)]);
    let parts = sys.partitions();
    let alpha = parts.iter().find(|p| p.name == "alpha").unwrap();
    assert!(!alpha.has_vits());
    assert_eq!(alpha.vpci.as_ref().unwrap().fresh.msi_doorbell, None);
    assert_eq!(
        alpha.msi,
        Some(Err(crate::its::NoMsi::Misplaced {
            translater: 0x4_0001_0040
        }))
    );
    assert_eq!(alpha.dma_root, alpha.stage2_root);
}

#[test]
fn only_a_linux_partition_with_functions_on_a_host_with_an_its_gets_a_vits() {
    let (sys, _) = its_system();
    let parts = sys.partitions();
    let by = |n: &str| parts.iter().find(|p| p.name == n).unwrap().clone();
    let alpha = by("alpha");
    assert!(alpha.has_vits());
    assert!(alpha.vpci.as_ref().unwrap().fresh.msi_doorbell.is_some());
    assert!(!by("beta").has_vits(), "beta has no functions");
    // Without the platform's ITS the same plan gives nobody one.
    let plain = system_with_functions(
        alpha_gets_00_02_0,
        None,
        Default::default(),
        {
            let mut h = host(4);
            h.pcie = sys.host.pcie.clone();
            h
        },
        vec![nic_function(crate::pci::Bdf {
            bus: 0,
            dev: 2,
            func: 0,
        })],
    );
    let alpha = plain.partitions().into_iter().find(|p| p.name == "alpha");
    assert!(!alpha.unwrap().has_vits());
}

#[test]
fn gicd_typer_reports_lpis_only_to_a_partition_with_a_vits() {
    let (sys, _) = its_system();
    let mut hw = FakeHw::new();
    let mut alpha = loaded_cpu(sys, &mut hw, 1);
    let mut beta = loaded_cpu(sys, &mut hw, 3);
    let mut regs = GuestRegs::default();
    run(
        sys,
        &mut alpha,
        &mut hw,
        &mut regs,
        mmio(GUEST_GICD_BASE + 4, 4, false, 3),
    );
    assert_eq!(regs.x[3] >> 17 & 1, 1, "alpha: LPIS");
    assert_eq!(regs.x[3] >> 19 & 0x1F, 15, "alpha: 16 ID bits");
    run(
        sys,
        &mut beta,
        &mut hw,
        &mut regs,
        mmio(GUEST_GICD_BASE + 4, 4, false, 3),
    );
    assert_eq!(regs.x[3] >> 17 & 1, 0, "beta: no LPIS");
    // alpha's redistributor says PLPIS, beta's does not.
    run(
        sys,
        &mut alpha,
        &mut hw,
        &mut regs,
        mmio(GUEST_GICR_BASE + 8, 8, false, 3),
    );
    assert_eq!(regs.x[3] & 1, 1);
    run(
        sys,
        &mut beta,
        &mut hw,
        &mut regs,
        mmio(GUEST_GICR_BASE + 8, 8, false, 3),
    );
    assert_eq!(regs.x[3] & 1, 0);
}

#[test]
fn a_guest_mapti_maps_a_physical_lpi_on_its_vcpus_cpu_and_its_msi_arrives_as_the_guests_vlpi() {
    let (sys, sent) = its_system();
    let mut hw = FakeHw::new();
    let (mut cpu, p) = alpha_with_lpis(sys, &mut hw);
    // vLPI 8300 enabled at priority 0x60 in the guest's property table.
    let prop = p.host_addr(p.ram_ipa + PROP + (8300 - 8192), 1).unwrap();
    HostMemory::write(&mut hw, prop, &[0x60 | 1]);
    map_nic_event_1(sys, &mut cpu, &mut hw, &p);
    assert_eq!(
        its_reg(sys, &mut cpu, &mut hw, 0x90, 8, None),
        4 * 32,
        "CREADR"
    );
    let sent = sent.lock().clone();
    assert!(
        matches!(
            sent[0],
            ItsCmd::Mapd {
                device: NIC,
                event_bits: 5,
                valid: true,
                ..
            }
        ),
        "{sent:?}"
    );
    let lpi = sent
        .iter()
        .find_map(|c| match *c {
            // vCPU 0 is pinned to CPU 1: collection 1.
            ItsCmd::Mapti {
                device: NIC,
                event: 1,
                intid,
                icid: 1,
            } => Some(intid),
            _ => None,
        })
        .expect("a physical MAPTI on CPU 1's collection");
    assert!(lpi >= LPI_BASE);
    assert_eq!(
        sys.lpi_routes.get(lpi),
        Some(LpiRoute {
            slot: p.index as u16,
            vcpu: 0,
            vintid: 8300
        })
    );
    assert!(sys.locks.count(LockPath::ItsTrap) > 0);
    assert!(sys.locks.count(LockPath::PhysIts) > 0);
    // The device's MSI: the physical LPI taken on CPU 1.
    assert_eq!(cpu.state.public.counters.lpi_count(), 0);
    dispatch_irq(sys, &mut cpu, &mut hw, lpi);
    assert_eq!(hw.injected(), [8300]);
    assert_eq!(cpu.state.public.counters.lpi_count(), 1, "counted at EL2");
    assert_eq!(sys.locks.hot_total(), 0);
}

/// VMAPP of alpha's vCPU `vcpu` (vPE `vpe`), pinned to CPU `vcpu + 1`.
fn vmapp_of(sent: &[V4Cmd], vcpu: u64) -> Option<(u16, u64)> {
    sent.iter().find_map(|c| match *c {
        V4Cmd::Vmapp {
            vpe,
            rdbase,
            vpt,
            vpt_bits: 16,
            valid: true,
        } if rdbase == vcpu + 1 => Some((vpe, vpt)),
        _ => None,
    })
}

#[test]
fn on_gicv4_a_guests_mapti_is_a_vmapti_to_its_vcpus_resident_vpe_and_nothing_reaches_el2() {
    use crate::vgic::v40::{vpendbaser, vpendbaser_valid, NO_DOORBELL};
    let (sys, q) = v4_system();
    let mut hw = FakeHw::new();
    hw.vlpi = Some(Default::default());
    let (mut cpu, p) = alpha_with_lpis(sys, &mut hw);
    // EnableLPIs made both vPEs, VMAPP'd to CPUs 1 and 2, and vCPU 0's
    // resident here with a zeroed table and the guest's property table.
    let sent = q.sent_v4.lock().clone();
    let (vpe0, vpt0) = vmapp_of(&sent, 0).expect("vCPU 0's VMAPP to CPU 1");
    let (vpe1, _) = vmapp_of(&sent, 1).expect("vCPU 1's VMAPP to CPU 2");
    assert_ne!(vpe0, vpe1);
    assert_eq!(hw.tables_zeroed, [(vpt0, 0x1_0000)]);
    let frame = hw.vlpi.as_ref().unwrap();
    let prop_pa = p.host_addr(p.ram_ipa + PROP, 1).unwrap().0;
    assert_eq!(frame.writes.len(), 2, "{:?}", frame.writes);
    assert!(!frame.writes[0].0, "VPROPBASER first");
    assert_eq!(frame.writes[0].1 & 0x000F_FFFF_FFFF_F000, prop_pa);
    assert_eq!(frame.writes[0].1 & 0x1F, 15, "the guest's 16 ID bits");
    assert_eq!(frame.writes[1], (true, vpendbaser(vpt0, true)));

    q.sent_v4.lock().clear();
    map_nic_event_1(sys, &mut cpu, &mut hw, &p);
    let sent = q.sent_v4.lock().clone();
    assert!(
        sent.contains(&V4Cmd::Vmapti {
            device: NIC,
            event: 1,
            vpe: vpe0,
            vintid: 8300,
            doorbell: NO_DOORBELL
        }),
        "{sent:?}"
    );
    assert!(sent.contains(&V4Cmd::Phys(ItsCmd::Inv {
        device: NIC,
        event: 1
    })));
    // No physical LPI, no route, nothing on the GICv3 path.
    assert!(q.sent.lock().is_empty(), "{:?}", q.sent.lock());
    assert_eq!(sys.its.as_ref().unwrap().lpis_in_use(), 0);
    assert_eq!(sys.lpi_routes.get(LPI_BASE), None);
    assert!(
        hw.log.iter().any(|l| l.contains("direct to vPE")),
        "{:?}",
        hw.log
    );

    // Put: the vPE leaves this CPU's redistributor.
    crate::exit::put(sys, &mut cpu, &mut hw);
    let frame = hw.vlpi.as_ref().unwrap();
    let last = frame.writes.last().unwrap();
    assert!(last.0 && !vpendbaser_valid(last.1), "{:?}", frame.writes);
    assert_eq!(sys.locks.hot_total(), 0);

    // A reset unmaps the device and keeps the vPEs mapped.
    q.sent_v4.lock().clear();
    sys.reset_pci(&p, &mut hw, "stop");
    let sent = q.sent_v4.lock().clone();
    assert!(sent.iter().any(|c| matches!(
        c,
        V4Cmd::Phys(ItsCmd::Mapd {
            device: NIC,
            valid: false,
            ..
        })
    )));
    assert!(!sent.iter().any(|c| matches!(c, V4Cmd::Vmapp { .. })));
    // Deletion unmaps them and gives the pending tables back.
    assert_eq!(q.vpts.lock().len(), 2);
    crate::its::release_vpes(sys.its.as_ref(), &p);
    let sent = q.sent_v4.lock().clone();
    for vpe in [vpe0, vpe1] {
        assert!(sent
            .iter()
            .any(|c| matches!(*c, V4Cmd::Vmapp { vpe: v, valid: false, .. } if v == vpe)));
    }
    assert!(q.vpts.lock().is_empty());
}

#[test]
fn on_gicv4_a_property_table_past_the_guests_ram_keeps_its_vpe_off_and_is_its_fault() {
    let (sys, q) = v4_system();
    let mut hw = FakeHw::new();
    hw.vlpi = Some(Default::default());
    let p = sys.partition(sys.assigned(1).unwrap().partition).unwrap();
    // 16 ID bits: 56 KiB of table, from 4 KiB below the end of its RAM.
    let faults = p.faults.load(core::sync::atomic::Ordering::Relaxed);
    let (_cpu, p) = alpha_with_lpis_at(sys, &mut hw, p.ram_size - 0x1000);
    assert_one_fault(&p, faults, &hw, "refused for direct vLPIs");
    assert!(hw.vlpi.as_ref().unwrap().writes.is_empty());
    assert!(hw.tables_zeroed.is_empty());
    assert!(
        q.sent_v4.lock().is_empty(),
        "no vPE made for a refused table"
    );
}

#[test]
fn on_gicv3_enable_lpis_touches_no_vlpi_frame() {
    let (sys, _) = its_system();
    let mut hw = FakeHw::new();
    hw.vlpi = Some(Default::default());
    let _ = alpha_with_lpis(sys, &mut hw);
    assert!(hw.vlpi.as_ref().unwrap().writes.is_empty());
}

#[test]
fn an_inv_injects_a_vlpi_kept_pending_while_the_guest_had_it_disabled() {
    let (sys, sent) = its_system();
    let mut hw = FakeHw::new();
    let (mut cpu, p) = alpha_with_lpis(sys, &mut hw);
    queue_commands(
        &mut hw,
        &p,
        0,
        &[mapd(NIC, 4), mapc(0, 0), mapti(NIC, 2, 8400, 0)],
    );
    its_reg(sys, &mut cpu, &mut hw, 0x88, 8, Some(3 * 32));
    let lpi = sys
        .lpi_routes
        .get(LPI_BASE)
        .map(|_| LPI_BASE)
        .expect("the first LPI of the pool");
    let _ = sent;
    // Disabled (property byte 0): the MSI is kept in the guest's pending
    // table, nothing injected.
    dispatch_irq(sys, &mut cpu, &mut hw, lpi);
    assert!(hw.injected().is_empty());
    // The guest enables it and invalidates: injected now.
    let prop = p.host_addr(p.ram_ipa + PROP + (8400 - 8192), 1).unwrap();
    HostMemory::write(&mut hw, prop, &[0x80 | 1]);
    queue_commands(&mut hw, &p, 3, &[inv(NIC, 2)]);
    its_reg(sys, &mut cpu, &mut hw, 0x88, 8, Some(4 * 32));
    assert_eq!(hw.injected(), [8400]);
}

#[test]
fn a_command_naming_a_device_the_partition_was_not_given_stalls_its_queue_and_is_its_fault() {
    let (sys, sent) = its_system();
    let mut hw = FakeHw::new();
    let (mut cpu, p) = alpha_with_lpis(sys, &mut hw);
    // 00:03.0 is not alpha's.
    queue_commands(&mut hw, &p, 0, &[mapd(0x18, 4)]);
    let before = p.faults.load(core::sync::atomic::Ordering::Relaxed);
    its_reg(sys, &mut cpu, &mut hw, 0x88, 8, Some(32));
    assert_eq!(
        its_reg(sys, &mut cpu, &mut hw, 0x90, 8, None),
        1,
        "Stalled at 0"
    );
    assert!(sent.lock().is_empty(), "nothing reached the physical ITS");
    assert_one_fault(&p, before, &hw, "ForeignDevice(24)");
}

#[test]
fn a_partition_reset_unmaps_its_devices_and_gives_its_lpis_back() {
    let (sys, sent) = its_system();
    let mut hw = FakeHw::new();
    let (mut cpu, p) = alpha_with_lpis(sys, &mut hw);
    queue_commands(
        &mut hw,
        &p,
        0,
        &[mapd(NIC, 4), mapc(0, 0), mapti(NIC, 1, 8300, 0)],
    );
    its_reg(sys, &mut cpu, &mut hw, 0x88, 8, Some(3 * 32));
    assert!(sys.lpi_routes.get(LPI_BASE).is_some());
    assert_eq!(sys.its.as_ref().unwrap().lpis_in_use(), 1);
    sent.lock().clear();
    sys.reset_pci(&p, &mut hw, "stop");
    assert_eq!(sys.lpi_routes.get(LPI_BASE), None, "route cleared");
    assert_eq!(sys.its.as_ref().unwrap().lpis_in_use(), 0);
    assert!(sent.lock().iter().any(|c| matches!(
        c,
        ItsCmd::Mapd {
            device: NIC,
            valid: false,
            ..
        }
    )));
    // The guest's vITS starts afresh: disabled, no queue.
    assert_eq!(
        its_reg(sys, &mut cpu, &mut hw, 0x80, 8, None),
        0,
        "GITS_CBASER"
    );
}

#[test]
fn a_guest_maps_no_more_events_than_its_functions_have_msi_vectors() {
    let (sys, _) = its_system();
    let mut hw = FakeHw::new();
    let (mut cpu, p) = alpha_with_lpis(sys, &mut hw);
    // alpha's NIC has 3 MSI-X vectors: a fourth mapping is refused.
    queue_commands(
        &mut hw,
        &p,
        0,
        &[
            mapd(NIC, 4),
            mapc(0, 0),
            mapti(NIC, 0, 8192, 0),
            mapti(NIC, 1, 8193, 0),
            mapti(NIC, 2, 8194, 0),
            mapti(NIC, 3, 8195, 0),
        ],
    );
    let before = p.faults.load(core::sync::atomic::Ordering::Relaxed);
    its_reg(sys, &mut cpu, &mut hw, 0x88, 8, Some(6 * 32));
    assert_eq!(sys.its.as_ref().unwrap().lpis_in_use(), 3);
    assert_one_fault(&p, before, &hw, "TooManyMappings");
}

#[test]
fn a_partition_whose_functions_need_more_lpis_than_others_left_is_refused_naming_its_pci_entry() {
    use crate::pci::Bdf;
    let mut h = host(4);
    h.gic.its = vec![(0x0808_0000, 0x2_0000)];
    h.pcie = its_system_host_bridge();
    let nic = |dev, vectors| crate::vpci::HostFunction {
        msi_vectors: vectors,
        ..nic_function(Bdf {
            bus: 0,
            dev,
            func: 0,
        })
    };
    let pci = |dev| {
        vec![pinfold_config::plan::PciAddress {
            segment: 0,
            bus: 0,
            device: dev,
            function: 0,
        }]
    };
    let boot = |alpha_vectors: u32, beta_vectors: u32| {
        let its = HostIts::new(
            ItsTyper::decode(QEMU_TYPER),
            Box::new(FakeQueue::default()),
            4,
        );
        let (sys, _) = system_and_tables(
            |plan| {
                plan.partitions[0].pci = pci(2);
                plan.partitions[1].pci = pci(3);
            },
            None,
            Default::default(),
            h.clone(),
            vec![nic(2, alpha_vectors), nic(3, beta_vectors)],
            Some(its),
        );
        sys.partitions()
            .iter()
            .map(|p| p.name.clone())
            .collect::<Vec<_>>()
    };
    // 2048 + 2048 fit in the 8192 LPIs; 5000 + 5000 do not: beta, built
    // second, is not created.
    assert!(boot(2048, 2048).contains(&"beta".into()));
    let names = boot(5000, 5000);
    assert!(names.contains(&"alpha".into()), "{names:?}");
    assert!(!names.contains(&"beta".into()), "{names:?}");
    let e = crate::vpci::AssignError {
        index: 0,
        bdf: Bdf {
            bus: 0,
            dev: 3,
            func: 0,
        },
        problem: crate::vpci::AssignProblem::LpisExhausted {
            vectors: 5000,
            left: 3192,
        },
    };
    assert_eq!(
        e.to_string(),
        "pci[0]: 0000:00:03.0: its MSI vectors bring the partition to 5000, but only 3192 of the host ITS's 8192 LPIs are left"
    );
}

#[test]
fn the_guest_dts_msi_map_sends_only_its_own_functions_rids_to_its_vits() {
    use crate::pci::Bdf;
    let at = |dev| Bdf {
        bus: 0,
        dev,
        func: 0,
    };
    let pci = |device| pinfold_config::plan::PciAddress {
        segment: 0,
        bus: 0,
        device,
        function: 0,
    };
    let mut h = host(4);
    h.gic.its = vec![(0x0808_0000, 0x2_0000)];
    h.pcie = its_system_host_bridge();
    let its = HostIts::new(
        ItsTyper::decode(QEMU_TYPER),
        Box::new(FakeQueue::default()),
        4,
    );
    // alpha has 00:02.0 and 00:04.0, beta 00:03.0 between them.
    let (sys, _) = system_and_tables(
        |plan| {
            plan.partitions[0].pci = vec![pci(2), pci(4)];
            plan.partitions[1].pci = vec![pci(3)];
        },
        None,
        Default::default(),
        h,
        vec![
            nic_function(at(2)),
            nic_function(at(3)),
            nic_function(at(4)),
        ],
        Some(its),
    );
    let alpha = sys
        .partitions()
        .into_iter()
        .find(|p| p.name == "alpha")
        .unwrap();
    assert!(alpha.has_vits());
    alpha.set_state(State::Stopped, 0);
    let mut hw = FakeHw::new();

    sys.start_partition(&alpha, &mut hw, 1).unwrap();

    let dtb = loaded_dtb(&hw, &alpha);
    let fdt = fdt::Fdt::new(&dtb).expect("parses");
    let bridge = fdt
        .all_nodes()
        .find(|n| n.name.starts_with("pcie@"))
        .expect("a host bridge node");
    let its_node = fdt.find_node("/intc/its").or_else(|| {
        fdt.all_nodes()
            .find(|n| n.property("msi-controller").is_some())
    });
    let its_phandle = its_node
        .and_then(|n| n.property("phandle"))
        .map(|p| dt_cells(p.value)[0])
        .expect("the vITS node has a phandle");
    assert_eq!(its_phandle, crate::dtb::GUEST_ITS_PHANDLE);
    // <rid-base msi-controller msi-base length>: 00:02.0 is RID 0x10,
    // 00:04.0 RID 0x20, each its own DeviceID; beta's 0x18 maps nowhere.
    assert_eq!(
        dt_cells(bridge.property("msi-map").expect("msi-map").value),
        [0x10, its_phandle, 0x10, 1, 0x20, its_phandle, 0x20, 1]
    );
}

// --- several physical ITSes --------------------------------------------

/// ITS 0 (node 0) at 0x0a00_0000, ITS 1 (node 1) at QEMU's 0x0808_0000
/// (so its translater is the guest's doorbell: no SMMU needed); CPUs 0-1
/// on node 0, 2-3 on node 1.
const ITS0_BASE: u64 = 0x0a00_0000;
const ITS1_BASE: u64 = 0x0808_0000;
/// The DeviceID ITS 1 sees for alpha's NIC (requester ID 0x10).
const NIC_AT_ITS1: u32 = 0x4000;

/// A two-socket host whose bridge sends requester IDs 0x00-0x0f to ITS 0
/// as themselves and 0x10-0xff to ITS 1 from DeviceID 0x4000 (the
/// per-root-complex shape of an Ampere Altra); `up[i]`: ITS i came up.
/// alpha (CPUs 1, 2) is assigned 00:02.0 (0x10: behind ITS 1); CPUs 1 and
/// 2 have mapped their collections. Returns each ITS's fake queue.
fn two_its_system(v4: bool, up: [bool; 2]) -> (&'static System, [FakeQueue; 2]) {
    use crate::dtb::PciMsiMap;
    use crate::pci::Bdf;
    let mut h = host(4);
    h.gic.its = vec![(ITS0_BASE, 0x2_0000), (ITS1_BASE, 0x2_0000)];
    h.numa = crate::dtb::NumaInfo {
        cpus: vec![Some(0), Some(0), Some(1), Some(1)],
        its: vec![Some(0), Some(1)],
    };
    let mut bridge = its_system_host_bridge().unwrap();
    bridge.msi_map = vec![
        PciMsiMap {
            rid_base: 0,
            its_base: ITS0_BASE,
            device_base: 0,
            len: 0x10,
        },
        PciMsiMap {
            rid_base: 0x10,
            its_base: ITS1_BASE,
            device_base: NIC_AT_ITS1,
            len: 0xf0,
        },
    ];
    h.pcie = Some(bridge);
    let queues = [FakeQueue::default(), FakeQueue::default()];
    let typer = ItsTyper::decode(if v4 { QEMU_TYPER | 1 << 1 } else { QEMU_TYPER });
    let units = queues
        .iter()
        .zip(up)
        .map(|(q, up)| up.then(|| (typer, Box::new(q.clone()) as Box<dyn ItsQueue>)))
        .collect();
    let mut its = HostIts::several(units, 4).unwrap();
    assert_eq!(its.enable_direct(&gicv4_0_found()), v4);
    let (sys, _) = system_and_tables(
        alpha_gets_00_02_0,
        None,
        Default::default(),
        h,
        vec![nic_function(Bdf {
            bus: 0,
            dev: 2,
            func: 0,
        })],
        Some(its),
    );
    for cpu in [1, 2] {
        sys.its_cpu_online(cpu, cpu as u16, 0);
    }
    for q in &queues {
        q.sent.lock().clear();
        q.sent_v4.lock().clear();
    }
    (sys, queues)
}

#[test]
fn a_device_behind_its_1_is_mapped_on_its_1_with_its_device_id_there_and_nothing_on_its_0() {
    let (sys, [q0, q1]) = two_its_system(false, [true, true]);
    let mut hw = FakeHw::new();
    let (mut cpu, p) = alpha_with_lpis(sys, &mut hw);

    map_nic_event_1(sys, &mut cpu, &mut hw, &p);

    let sent = q1.sent.lock().clone();
    assert!(
        sent.iter().any(|c| matches!(
            c,
            ItsCmd::Mapd {
                device: NIC_AT_ITS1,
                valid: true,
                ..
            }
        )),
        "{sent:?}"
    );
    assert!(sent.contains(&ItsCmd::Mapti {
        device: NIC_AT_ITS1,
        event: 1,
        intid: LPI_BASE,
        icid: 1
    }));
    assert!(sent.iter().all(|c| c.device() != Some(NIC)), "{sent:?}");
    assert!(q0.sent.lock().is_empty(), "{:?}", q0.sent.lock());
    // The LPI is the machine's pool's, routed to alpha's vCPU 0.
    assert_eq!(sys.its.as_ref().unwrap().lpis_in_use(), 1);
    assert_eq!(
        sys.lpi_routes.get(LPI_BASE),
        Some(LpiRoute {
            slot: p.index as u16,
            vcpu: 0,
            vintid: 8300
        })
    );
    assert_eq!(p.msi, Some(Ok(crate::its::MsiPath::Direct)));
}

#[test]
fn every_cpu_maps_its_collection_on_every_its() {
    let (sys, [q0, q1]) = two_its_system(false, [true, true]);

    sys.its_cpu_online(3, 3, 0);

    for q in [&q0, &q1] {
        assert_eq!(
            *q.sent.lock(),
            [
                ItsCmd::Mapc {
                    icid: 3,
                    rdbase: 3,
                    valid: true
                },
                ItsCmd::Sync { rdbase: 3 }
            ]
        );
    }
}

#[test]
fn a_reset_unmaps_the_device_on_the_its_it_reaches_only() {
    let (sys, [q0, q1]) = two_its_system(false, [true, true]);
    let mut hw = FakeHw::new();
    let (mut cpu, p) = alpha_with_lpis(sys, &mut hw);
    map_nic_event_1(sys, &mut cpu, &mut hw, &p);
    q1.sent.lock().clear();

    sys.reset_pci(&p, &mut hw, "stop");

    assert!(q1.sent.lock().iter().any(|c| matches!(
        c,
        ItsCmd::Mapd {
            device: NIC_AT_ITS1,
            valid: false,
            ..
        }
    )));
    assert!(q0.sent.lock().iter().all(|c| c.device().is_none()));
    assert_eq!(sys.its.as_ref().unwrap().lpis_in_use(), 0);
    assert_eq!(sys.lpi_routes.get(LPI_BASE), None);
}

#[test]
fn on_two_its_a_foreign_device_id_is_still_refused_with_nothing_sent_anywhere() {
    // 0x18 (00:03.0, beta's side of the bus) reaches ITS 1 too, 1 reaches
    // ITS 0, and 0x4000 is the NIC's own DeviceID at ITS 1, which a guest
    // never names (its DeviceIDs are requester IDs): none is alpha's.
    for foreign in [0x18, 1, NIC_AT_ITS1] {
        let (sys, [q0, q1]) = two_its_system(false, [true, true]);
        let mut hw = FakeHw::new();
        let (mut cpu, p) = alpha_with_lpis(sys, &mut hw);
        queue_commands(
            &mut hw,
            &p,
            0,
            &[mapd(foreign, 4), mapti(foreign, 1, 8300, 0)],
        );
        let before = p.faults.load(core::sync::atomic::Ordering::Relaxed);

        its_reg(sys, &mut cpu, &mut hw, 0x88, 8, Some(2 * 32));

        assert_one_fault(&p, before, &hw, "ForeignDevice");
        assert!(
            q0.sent.lock().is_empty() && q1.sent.lock().is_empty(),
            "{foreign:#x}"
        );
    }
}

#[test]
fn with_its_1_down_a_partition_whose_functions_reach_it_gets_no_vits_and_its_0_still_serves() {
    let (sys, [q0, q1]) = two_its_system(false, [true, false]);
    let alpha = sys.partition(sys.assigned(1).unwrap().partition).unwrap();

    assert_eq!(
        alpha.msi,
        Some(Err(crate::its::NoMsi::NoRoute { rid: NIC }))
    );
    assert!(alpha.vits.is_none());
    // ITS 0 took CPU 3's collection; nothing went to the one down.
    sys.its_cpu_online(3, 3, 0);
    assert_eq!(q0.sent.lock().len(), 2);
    assert!(q1.sent.lock().is_empty());
}

#[test]
fn a_guests_sync_and_invall_go_to_its_own_its_only() {
    let (sys, [q0, q1]) = two_its_system(false, [true, true]);
    let mut hw = FakeHw::new();
    let (mut cpu, p) = alpha_with_lpis(sys, &mut hw);
    map_nic_event_1(sys, &mut cpu, &mut hw, &p);
    q1.sent.lock().clear();

    // SYNC naming vCPU 0's redistributor, INVALL naming collection 0.
    queue_commands(&mut hw, &p, 4, &[[0x05, 0, 0, 0], [0x0D, 0, 0, 0]]);
    its_reg(sys, &mut cpu, &mut hw, 0x88, 8, Some(6 * 32));

    // The SYNC on ITS 1 (the trapped path's INVALL is a re-check of the
    // vLPIs, with nothing to send for them).
    let sent = q1.sent.lock().clone();
    assert!(
        sent.iter().any(|c| matches!(c, ItsCmd::Sync { .. })),
        "{sent:?}"
    );
    // ITS 0 holds none of alpha's devices: nothing goes there.
    assert!(q0.sent.lock().is_empty(), "{:?}", q0.sent.lock());
}

#[test]
fn on_gicv4_0_every_vpe_is_mapped_on_both_itses_and_the_vlpi_on_the_devices_only() {
    let (sys, [q0, q1]) = two_its_system(true, [true, true]);
    let mut hw = FakeHw::new();
    hw.vlpi = Some(Default::default());
    let (mut cpu, p) = alpha_with_lpis(sys, &mut hw);

    map_nic_event_1(sys, &mut cpu, &mut hw, &p);

    let vmapps = |q: &FakeQueue| {
        q.sent_v4
            .lock()
            .iter()
            .filter_map(|c| match *c {
                V4Cmd::Vmapp {
                    vpe,
                    rdbase,
                    valid: true,
                    ..
                } => Some((vpe, rdbase)),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    // alpha's two vCPUs (CPUs 1 and 2), the same vPEs on each ITS.
    let on_0 = vmapps(&q0);
    assert_eq!(on_0.len(), 2, "{:?}", q0.sent_v4.lock());
    assert_eq!(on_0.iter().map(|v| v.1).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(on_0, vmapps(&q1));
    // Each ITS syncs each vPE it mapped before anything else is sent to it.
    for q in [&q0, &q1] {
        let sent = q.sent_v4.lock().clone();
        for (k, c) in sent.iter().enumerate() {
            if let V4Cmd::Vmapp { vpe, .. } = *c {
                assert_eq!(sent.get(k + 1), Some(&V4Cmd::Vsync { vpe }), "{sent:?}");
            }
        }
    }
    let vmapti = |q: &FakeQueue| {
        q.sent_v4
            .lock()
            .iter()
            .filter(|c| matches!(c, V4Cmd::Vmapti { .. } | V4Cmd::Phys(ItsCmd::Mapd { .. })))
            .copied()
            .collect::<Vec<_>>()
    };
    assert!(vmapti(&q0).is_empty(), "{:?}", vmapti(&q0));
    assert!(vmapti(&q1).iter().any(|c| matches!(
        c,
        V4Cmd::Vmapti {
            device: NIC_AT_ITS1,
            event: 1,
            vintid: 8300,
            ..
        }
    )));
    // Deletion unmaps the vPEs on both.
    crate::exit::put(sys, &mut cpu, &mut hw);
    crate::its::release_vpes(sys.its.as_ref(), &p);
    for q in [&q0, &q1] {
        let unmapped = q
            .sent_v4
            .lock()
            .iter()
            .filter(|c| matches!(c, V4Cmd::Vmapp { valid: false, .. }))
            .count();
        assert_eq!(unmapped, 2);
    }
}

#[test]
fn each_cpu_keeps_the_its_of_its_numa_node() {
    let (sys, _) = two_its_system(false, [true, true]);
    let its = sys.its.as_ref().unwrap();

    assert_eq!(
        (0..4).map(|c| its.local_its(c)).collect::<Vec<_>>(),
        [0, 0, 1, 1]
    );

    // With ITS 1 down, node 1's CPUs fall back to ITS 0.
    let (sys, _) = two_its_system(false, [true, false]);
    let its = sys.its.as_ref().unwrap();
    assert_eq!((0..4).map(|c| its.local_its(c)).collect::<Vec<_>>(), [0; 4]);
}

#[test]
fn a_partitions_functions_must_all_reach_one_its_that_came_up() {
    use crate::dtb::PciMsiMap;
    use crate::its::{MsiRouting, NoMsi};
    let typer = Some(ItsTyper::decode(QEMU_TYPER));
    let map = [
        PciMsiMap {
            rid_base: 0,
            its_base: ITS0_BASE,
            device_base: 0,
            len: 0x100,
        },
        PciMsiMap {
            rid_base: 0x100,
            its_base: ITS1_BASE,
            device_base: 0xfff0,
            len: 0x100,
        },
    ];
    let its = [(ITS0_BASE, 0x2_0000), (ITS1_BASE, 0x2_0000)];
    let r = MsiRouting::new(&map, &its, &[typer, typer]);

    assert_eq!(r.partition_its([0x10, 0x20].into_iter()), Ok(ITS0_BASE));
    assert_eq!(r.partition_its([0x100].into_iter()), Ok(ITS1_BASE));
    assert_eq!(
        r.partition_its([0x10, 0x100].into_iter()),
        Err(NoMsi::SeveralIts {
            first: 0,
            second: 1
        })
    );
    // Beyond every entry; past ITS 1's 16 DeviceID bits (0xfff0 + 0x10).
    assert_eq!(
        r.partition_its([0x200].into_iter()),
        Err(NoMsi::NoRoute { rid: 0x200 })
    );
    assert_eq!(
        r.partition_its([0x110].into_iter()),
        Err(NoMsi::NoRoute { rid: 0x110 })
    );
    // ITS 1 down.
    let r = MsiRouting::new(&map, &its, &[typer, None]);
    assert_eq!(
        r.partition_its([0x100].into_iter()),
        Err(NoMsi::NoRoute { rid: 0x100 })
    );
    // No msi-map: every requester ID to the first ITS as itself.
    let r = MsiRouting::new(&[], &its, &[typer, typer]);
    assert_eq!(
        r.route(0x123),
        Some(crate::its::MsiTarget {
            its: 0,
            device: 0x123
        })
    );
}

#[test]
fn a_guests_command_batch_takes_its_devices_its_lock_once_and_the_pool_lock_per_lpi() {
    let (sys, _) = two_its_system(false, [true, true]);
    let mut hw = FakeHw::new();
    let (mut cpu, p) = alpha_with_lpis(sys, &mut hw);
    let before = sys.locks.count(LockPath::PhysIts);

    // MAPD, MAPC, MAPTI, INV of the NIC behind ITS 1: one LPI.
    map_nic_event_1(sys, &mut cpu, &mut hw, &p);

    assert_eq!(sys.locks.count(LockPath::PhysIts) - before, 2);
}

// ---- a GICv5 ITS behind the seam (`its5`) -------------------------------

/// Records every GICv5 ITS step.
#[derive(Clone, Default)]
struct V5Rec {
    ops: Arc<spin::Mutex<Vec<crate::its5::Its5Op>>>,
}

impl crate::its5::Its5Hw for V5Rec {
    fn apply(&mut self, op: &crate::its5::Its5Op) -> bool {
        self.ops.lock().push(*op);
        true
    }
    fn alloc_itt(&mut self, bytes: usize) -> Option<u64> {
        Some(0x7000_0000 + bytes as u64)
    }
    fn free_itt(&mut self, _: u64, _: usize) {}
}

/// CPU n's IAFFID in [`v5_its_system`].
const fn iaffid(cpu: u16) -> u16 {
    0x100 + cpu
}

/// [`its_system`] with its ITS a GICv5 one behind `its5::V5Its` (16
/// DeviceID and 11 EventID bits, the four CPUs' IAFFIDs 0x100..): alpha's
/// vITS commands reach it as `Its5Op`s.
fn v5_its_system() -> (
    &'static System,
    Arc<spin::Mutex<Vec<crate::its5::Its5Op>>>,
    crate::vgic5::IrsLayout,
) {
    v5_its_system_with(crate::vgic5::IrsLayout::for_cpus(4))
}

/// [`v5_its_system`] with the IRS layout `layout`, whose MSI pool the
/// ITS's LPI pool is limited to (as the platform's `gicv5::init_its`).
fn v5_its_system_with(
    layout: crate::vgic5::IrsLayout,
) -> (
    &'static System,
    Arc<spin::Mutex<Vec<crate::its5::Its5Op>>>,
    crate::vgic5::IrsLayout,
) {
    use crate::pci::Bdf;
    let mut h = host(4);
    h.gic.its = vec![(0x0808_0000, 0x2_0000)];
    h.pcie = its_system_host_bridge();
    let rec = V5Rec::default();
    let ops = rec.ops.clone();
    let typer = crate::its5::typer(16, 11);
    let queue = crate::its5::V5Its::new(rec, typer, layout, (0..4).map(iaffid).collect());
    let its = HostIts::new(typer, Box::new(queue), 4).with_lpis(layout.msi_lpis);
    let (sys, _) = system_and_tables(
        alpha_gets_00_02_0,
        None,
        Default::default(),
        h,
        vec![nic_function(Bdf {
            bus: 0,
            dev: 2,
            func: 0,
        })],
        Some(its),
    );
    for cpu in [1, 2] {
        sys.its_cpu_online(cpu, cpu as u16, 0);
    }
    assert!(ops.lock().is_empty(), "no collections on a GICv5 ITS");
    (sys, ops, layout)
}

#[test]
fn on_a_gicv5_its_a_guests_mapti_targets_its_vcpus_cpu_and_the_lpi_is_injected_as_its_vlpi() {
    use crate::its5::Its5Op;
    let (sys, ops, layout) = v5_its_system();
    let mut hw = FakeHw::new();
    let (mut cpu, p) = alpha_with_lpis(sys, &mut hw);
    let prop = p.host_addr(p.ram_ipa + PROP + (8300 - 8192), 1).unwrap();
    HostMemory::write(&mut hw, prop, &[0x60 | 1]);

    map_nic_event_1(sys, &mut cpu, &mut hw, &p);

    let ops = ops.lock().clone();
    assert!(
        matches!(
            ops[0],
            Its5Op::Device {
                device: NIC,
                itt: Some(_),
                event_bits: 5
            }
        ),
        "{ops:?}"
    );
    // vCPU 0 is pinned to CPU 1: the LPI targeted there, then mapped.
    let Its5Op::Target {
        lpi,
        iaffid: Some(at),
    } = ops[1]
    else {
        panic!("{ops:?}")
    };
    assert_eq!(at, iaffid(1));
    assert!(matches!(
        ops[2],
        Its5Op::Event { device: NIC, event: 1, lpi: Some(l), .. } if l == lpi
    ));
    let core = layout.msi_core_intid(lpi).expect("an MSI pool LPI");
    assert_eq!(
        sys.lpi_routes.get(core),
        Some(LpiRoute {
            slot: p.index as u16,
            vcpu: 0,
            vintid: 8300
        })
    );
    // The device's MSI: the driver's ack gives the pool LPI as `core`.
    dispatch_irq(sys, &mut cpu, &mut hw, core);
    assert_eq!(hw.injected(), [8300]);
    assert_eq!(sys.locks.hot_total(), 0);
}

#[test]
fn on_a_gicv5_its_the_lpi_pool_is_what_the_irs_has_room_for() {
    use crate::its5::Its5Op;
    // An IST just one LPI past the 4 CPUs' IPIs and doorbells (68 of them).
    let mut layout = crate::vgic5::IrsLayout::for_cpus(4);
    layout.msi_lpis = 1;
    let (sys, ops, _) = v5_its_system_with(layout);
    let mut hw = FakeHw::new();
    let (mut cpu, p) = alpha_with_lpis(sys, &mut hw);
    map_nic_event_1(sys, &mut cpu, &mut hw, &p);
    queue_commands(&mut hw, &p, 4, &[mapti(NIC, 2, 8301, 0)]);
    its_reg(sys, &mut cpu, &mut hw, 0x88, 8, Some(5 * 32));

    let events: Vec<u32> = ops
        .lock()
        .iter()
        .filter_map(|op| match *op {
            Its5Op::Event {
                event,
                lpi: Some(_),
                ..
            } => Some(event),
            _ => None,
        })
        .collect();
    assert_eq!(events, [1], "event 2 got no LPI beyond the IST's room");
    assert_eq!(sys.its.as_ref().unwrap().lpis_in_use(), 1);
}

#[test]
fn on_a_gicv5_its_a_foreign_deviceid_reaches_nothing_and_is_the_guests_fault() {
    let (sys, ops, _) = v5_its_system();
    let mut hw = FakeHw::new();
    let (mut cpu, p) = alpha_with_lpis(sys, &mut hw);
    queue_commands(&mut hw, &p, 0, &[mapd(0x18, 4), mapti(0x18, 0, 8300, 0)]);
    let before = p.faults.load(core::sync::atomic::Ordering::Relaxed);

    its_reg(sys, &mut cpu, &mut hw, 0x88, 8, Some(2 * 32));

    assert!(ops.lock().is_empty(), "{:?}", ops.lock());
    assert_one_fault(&p, before, &hw, "ForeignDevice(24)");
}

#[test]
fn a_gicv5_its_translate_frame_is_the_msi_address_which_the_doorbell_page_cannot_reach() {
    use crate::its::{msi_path_to, MsiRouting, NoMsi};
    let its = [(0x2f12_0000, 0x1_0000), (0x2f22_0000, 0x1_0000)];
    let live = [Some(crate::its5::typer(16, 11)); 2];
    let v3 = MsiRouting::new(&[], &its, &live);
    let v5 = MsiRouting::new(&[], &its, &live)
        .with_translate_frames(&[Some((0x2f13_0000, 0x1_0000)), None]);

    assert_eq!(
        v3.translater(0x2f12_0000),
        Some(0x2f13_0040),
        "GITS_TRANSLATER"
    );
    assert_eq!(
        v5.translater(0x2f12_0000),
        Some(0x2f13_0000),
        "the frame's base"
    );
    assert_eq!(v5.translater(0x2f22_0000), None, "no translate frame");
    assert_eq!(
        msi_path_to(false, Some(v5.translater(0x2f12_0000)), true),
        Err(NoMsi::TranslaterOffset {
            translater: 0x2f13_0000
        })
    );
    assert_eq!(
        msi_path_to(false, Some(v5.translater(0x2f12_0000)), false),
        Err(NoMsi::Misplaced {
            translater: 0x2f13_0000
        })
    );
    assert_eq!(
        msi_path_to(false, Some(v5.translater(0x2f22_0000)), true),
        Err(NoMsi::NoTranslateFrame)
    );
    assert!(msi_path_to(false, Some(v3.translater(0x2f12_0000)), true).is_ok());
}
