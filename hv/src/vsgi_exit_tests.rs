//! GICv4.1 direct vSGIs through the exit path (`vsgi`): vCPU load and put,
//! the guest's ICC_SGI1R_EL1 trap, its SGI configuration and GICD_CTLR
//! writes and a restart, against the register-level model
//! (`pinfold-gicmodel`), which both the CPUs' frames and the physical
//! ITS's command queue drive.

use super::its_exit::{FakeQueue, QEMU_TYPER};
use super::*;
use crate::its::HostIts;
use crate::vgic::pits::ItsTyper;
use alloc::sync::Arc;
use pinfold_gicmodel::{reg, Config, Event, Model};

type SharedModel = Arc<spin::Mutex<Model>>;

/// One CPU's GICv4.1 frame over the model: its own redistributor and the
/// ITS's GITS_SGIR.
pub(super) struct FakeV41 {
    m: SharedModel,
    cpu: usize,
    /// The ITS whose GITS_SGIR this CPU's frame has: the core's
    /// `ItsSet::local_its`, as the platform's `v41::init` gives it.
    its: usize,
}

impl crate::vgic::v41::V41Hw for FakeV41 {
    fn lockless(&self) -> bool {
        true
    }
    fn read_vpendbaser(&mut self) -> u64 {
        self.m.lock().vlpi_read(self.cpu, reg::GICR_VPENDBASER)
    }
    fn write_vpendbaser(&mut self, value: u64) {
        self.m
            .lock()
            .vlpi_write(self.cpu, reg::GICR_VPENDBASER, value)
    }
    fn write_sgir(&mut self, value: u64) {
        self.m.lock().its_sgi_write(self.its, reg::GITS_SGIR, value)
    }
}

/// GITS_TYPER of a GICv4.1 ITS with vSGIs: Virtual [1], VSGI [39], VMAPP
/// [40].
const V41_TYPER: u64 = QEMU_TYPER | 1 << 1 | 1 << 39 | 1 << 40;

/// What the platform finds on a GICv4.1 with vSGIs.
fn gicv4_1_found() -> crate::gichost::GicFound {
    crate::gichost::GicFound {
        version: 4,
        v4_1: true,
        direct_vlpi: true,
        direct_vsgi: true,
        probed: true,
        ..Default::default()
    }
}

/// The standard system (alpha: vCPUs 0, 1 on CPUs 1, 2; beta on CPU 3;
/// mgmt on CPU 0) on a GICv4.1 host whose ITS (a GICv4 one, with a vPE
/// table) and redistributors are the model's; every CPU online.
fn v41_system() -> (&'static System, SharedModel, FakeQueue) {
    let mut m = Model::new(Config::default());
    m.its_write(0, reg::GITS_CBASER, reg::CBASER_VALID | 0x8000_0000);
    m.its_write(0, reg::GITS_CTLR, reg::CTLR_ENABLED);
    for cpu in 0..4 {
        m.vlpi_write(cpu, reg::GICR_VPROPBASER, reg::VPROP_VALID | 0x9000_0000);
    }
    let model: SharedModel = Arc::new(spin::Mutex::new(m));
    let queue = FakeQueue::with_model(model.clone());
    let records = queue.clone();
    let mut h = host(4);
    h.gic.its = vec![(0x0808_0000, 0x3_0000)];
    h.gic.found = gicv4_1_found();
    let mut its = HostIts::new(ItsTyper::decode(V41_TYPER), Box::new(queue), 4);
    assert!(
        !its.enable_direct(&gicv4_1_found()),
        "no GICv4.0 vLPIs here"
    );
    let (sys, _) = system_and_tables(|_| {}, None, Default::default(), h, Vec::new(), Some(its));
    for cpu in 0..4 {
        sys.its_cpu_online(cpu, cpu as u16, 0);
    }
    (sys, model, records)
}

/// A fake for CPU `cpu` with its GICv4.1 frame: its own redistributor
/// and the GITS_SGIR of the ITS the core chose for it, as the platform's
/// `v41::init` gives it.
fn hw_on(sys: &System, m: &SharedModel, cpu: usize) -> FakeHw {
    let mut hw = FakeHw::new();
    hw.cpu = cpu;
    hw.v41 = Some(FakeV41 {
        m: m.clone(),
        cpu,
        its: sys.its.as_ref().map_or(0, |s| s.local_its(cpu)),
    });
    hw
}

/// A guest write of `value` at `offset` of vCPU `vcpu`'s redistributor.
fn gicr_write(sys: &System, cpu: &mut Cpu, hw: &mut FakeHw, vcpu: u64, offset: u64, value: u64) {
    let mut regs = GuestRegs::default();
    regs.x[2] = value;
    let ipa = GUEST_GICR_BASE + vcpu * pinfold_vboard::GICR_STRIDE + offset;
    assert_eq!(
        run(sys, cpu, hw, &mut regs, mmio(ipa, 4, true, 2)),
        Next::Resume
    );
}

fn gicd_ctlr(sys: &System, cpu: &mut Cpu, hw: &mut FakeHw, value: u64) {
    let mut regs = GuestRegs::default();
    regs.x[1] = value;
    assert_eq!(
        run(sys, cpu, hw, &mut regs, mmio(GUEST_GICD_BASE, 4, true, 1)),
        Next::Resume
    );
}

const ISENABLER0: u64 = 0x1_0100;
const VPENDBASER_GRP1: u64 = 1 << 58;

fn gicd_read(sys: &System, cpu: &mut Cpu, hw: &mut FakeHw, offset: u64) -> u64 {
    let mut regs = GuestRegs::default();
    assert_eq!(
        run(
            sys,
            cpu,
            hw,
            &mut regs,
            mmio(GUEST_GICD_BASE + offset, 4, false, 1)
        ),
        Next::Resume
    );
    regs.x[1]
}

const GICD_TYPER2: u64 = 0xC;
/// GICD_CTLR as Linux's gic_dist_init writes it on a distributor that
/// offers nASSGIcap: EnableGrp1 and nASSGIreq.
const CTLR_GRP1_NASSGIREQ: u64 = 1 << 8 | 2;

/// alpha's vCPUs loaded on CPUs 1 and 2, the guest's group 1 on with
/// nASSGIreq (direct vSGIs, as Linux asks for them) and all its SGIs
/// enabled on vCPU 1 (the receiver), every kick drained.
fn alpha_running(
    sys: &'static System,
    m: &SharedModel,
) -> ((Cpu<'static>, FakeHw), (Cpu<'static>, FakeHw)) {
    alpha_running_with(sys, m, CTLR_GRP1_NASSGIREQ)
}

/// [`alpha_running`] with GICD_CTLR written `ctlr`.
fn alpha_running_with(
    sys: &'static System,
    m: &SharedModel,
    ctlr: u64,
) -> ((Cpu<'static>, FakeHw), (Cpu<'static>, FakeHw)) {
    let mut hw1 = hw_on(sys, m, 1);
    let mut hw2 = hw_on(sys, m, 2);
    let mut c1 = loaded_cpu(sys, &mut hw1, 1);
    let mut c2 = loaded_cpu(sys, &mut hw2, 2);
    gicd_ctlr(sys, &mut c1, &mut hw1, ctlr);
    dispatch_irq(sys, &mut c2, &mut hw2, SGI_MAILBOX);
    gicr_write(sys, &mut c2, &mut hw2, 1, ISENABLER0, 0xFFFF);
    m.lock().take_events();
    ((c1, hw1), (c2, hw2))
}

#[test]
fn on_a_gicv4_1_host_gicv3_partitions_get_vpes_named_by_their_cpus() {
    let (sys, _, _) = v41_system();
    assert!(sys.vsgi.is_some());
    let vpes = |name: &str| {
        let p = sys
            .partitions()
            .into_iter()
            .find(|p| p.name == name)
            .unwrap();
        let v = p.vsgi.as_ref().expect("direct vSGIs");
        (0..p.vcpus.len())
            .map(|n| v.direct.vpe(n))
            .collect::<Vec<_>>()
    };
    assert_eq!(vpes("alpha"), [Some(1), Some(2)]);
    assert_eq!(vpes("beta"), [Some(3)]);
    // Nothing is mapped before a vCPU loads.
    assert!(!sys.partitions()[0].vsgi.as_ref().unwrap().mapped());
}

#[test]
fn on_a_gicv3_or_gicv4_0_host_nothing_changes_and_sgis_keep_the_mailbox() {
    let (v40, _) = super::its_exit::v4_system();
    let v3 = system();
    for sys in [v40, v3] {
        assert!(sys.vsgi.is_none());
        assert!(sys.partitions().iter().all(|p| p.vsgi.is_none()));
        // Even a CPU with a GICv4.1 frame sends through the mailbox.
        let m: SharedModel = Arc::new(spin::Mutex::new(Model::new(Config::default())));
        let mut hw = hw_on(sys, &m, 1);
        let mut cpu = loaded_cpu(sys, &mut hw, 1);
        sgi_to(sys, &mut cpu, &mut hw, 3 << 24 | 0b10);
        assert_eq!(hw.sgis, [(0x102, SGI_MAILBOX)]);
        assert_eq!(m.lock().sgir_writes(0), 0);
        assert_eq!(m.lock().resident(1), None);
    }
}

#[test]
fn a_vcpu_load_maps_its_vpe_and_makes_it_resident_with_the_guests_group_enables() {
    let (sys, m, queue) = v41_system();
    let mut hw = hw_on(sys, &m, 1);

    let cpu = loaded_cpu(sys, &mut hw, 1);

    let mut model = m.lock();
    assert!(model.mapped(0, 1));
    assert_eq!(model.target(1), Some(1));
    assert_eq!(model.resident(1), Some(1));
    // GICD_CTLR is 0 out of reset: both groups off.
    assert_eq!(model.vlpi_read(1, reg::GICR_VPENDBASER) & (3 << 58), 0);
    // Its own pending table and the VM's configuration table.
    let (vpt, vconf) = model.vpe_tables(1).unwrap();
    assert_ne!(vpt, vconf);
    assert!(model.misuse().is_empty(), "{:?}", model.misuse());
    assert!(model.take_events().is_empty());
    assert_eq!(
        queue.words.lock().len(),
        1 + 16 + 1,
        "VMAPP, 16 VSGI, VSYNC"
    );
    assert_eq!(cpu.state.vsgi.residency.resident(), Some(1));
    assert!(hw.log.is_empty(), "{:?}", hw.log);
}

#[test]
fn a_restart_unmaps_the_vpes_frees_their_tables_and_the_next_load_maps_afresh() {
    let (sys, m, queue) = v41_system();
    let ((mut c1, mut hw1), (mut c2, mut hw2)) = alpha_running(sys, &m);
    put(sys, &mut c1, &mut hw1);
    put(sys, &mut c2, &mut hw2);
    let p = sys.partition(sys.assigned(1).unwrap().partition).unwrap();
    assert_eq!(queue.vpts_live(), 3, "VCONF and two VPTs");

    crate::vsgi::restart(sys, &p);

    assert!(!m.lock().mapped(0, 1) && !m.lock().mapped(0, 2));
    assert_eq!(queue.vpts_live(), 0);
    assert!(!p.vsgi.as_ref().unwrap().mapped());
    assert!(!p.dist.lock(LockPath::Management).nassgireq(), "reset");
    assert!(!p.vsgi.as_ref().unwrap().direct());
    let _c1 = loaded_cpu(sys, &mut hw1, 1);
    assert!(m.lock().mapped(0, 1));
    assert_eq!(m.lock().resident(1), Some(1));
    assert!(m.lock().misuse().is_empty(), "{:?}", m.lock().misuse());
    assert!(m.lock().take_events().is_empty(), "no command error");
}

#[test]
fn a_guests_sgi_enable_write_sends_vsgi_and_vsync_and_a_ppi_only_write_sends_nothing() {
    let (sys, m, queue) = v41_system();
    let mut hw = hw_on(sys, &m, 1);
    let mut cpu = loaded_cpu(sys, &mut hw, 1);
    let before = queue.words.lock().len();

    gicr_write(sys, &mut cpu, &mut hw, 0, ISENABLER0, 1 << 27); // a PPI
    assert_eq!(queue.words.lock().len(), before);

    gicr_write(sys, &mut cpu, &mut hw, 0, ISENABLER0, 1 << 3);
    let words = queue.words.lock();
    assert_eq!(words.len(), before + 2);
    assert_eq!(words[before][0] & 0xFF, crate::vgic::v41::cmd::VSGI);
    assert_eq!(words[before + 1][0] & 0xFF, crate::vgic::v41::cmd::VSYNC);
    drop(words);
    assert!(m.lock().sgi_config(1, 3).unwrap().enabled);
    assert!(!m.lock().sgi_config(1, 4).unwrap().enabled);
}

#[test]
fn a_gicd_ctlr_group_change_reloads_every_vcpus_vpe_on_its_own_cpu() {
    let (sys, m, _) = v41_system();
    let mut hw1 = hw_on(sys, &m, 1);
    let mut hw2 = hw_on(sys, &m, 2);
    let mut c1 = loaded_cpu(sys, &mut hw1, 1);
    let mut c2 = loaded_cpu(sys, &mut hw2, 2);
    let grp1 = |cpu| m.lock().vlpi_read(cpu, reg::GICR_VPENDBASER) & VPENDBASER_GRP1 != 0;
    assert!(!grp1(1) && !grp1(2));

    gicd_ctlr(sys, &mut c1, &mut hw1, 2);

    // Here at once; CPU 2 kicked, and re-loaded at its mailbox drain.
    assert!(grp1(1));
    assert!(!grp1(2));
    assert_eq!(hw1.sgis, [(0x102, SGI_MAILBOX)]);
    dispatch_irq(sys, &mut c2, &mut hw2, SGI_MAILBOX);
    assert!(grp1(2));
    assert_eq!(m.lock().resident(2), Some(2));
    // Writing the same enables again re-loads nothing.
    hw1.sgis.clear();
    gicd_ctlr(sys, &mut c1, &mut hw1, 2);
    assert!(hw1.sgis.is_empty());
    assert!(m.lock().misuse().is_empty(), "{:?}", m.lock().misuse());
}

#[test]
fn an_sgi_trapped_from_a_vcpu_reaches_its_resident_sibling_with_no_exit_and_no_mailbox() {
    let (sys, m, _) = v41_system();
    let ((mut c1, mut hw1), _) = alpha_running(sys, &m);
    hw1.sgis.clear();

    sgi_to(sys, &mut c1, &mut hw1, 5 << 24 | 0b10); // SGI 5 to vCPU 1

    let model = m.lock();
    assert_eq!(
        model.events(),
        [Event::Delivered {
            cpu: 2,
            vpe: 2,
            intid: 5
        }]
    );
    assert_eq!(model.receiver_exits(), 0);
    assert!(hw1.sgis.is_empty(), "no mailbox doorbell");
    let mut posted = 0;
    sys.cpus[2].mailbox.drain(|_| posted += 1);
    assert_eq!(posted, 0);
}

#[test]
fn an_sgi_to_a_vcpu_that_was_put_is_kept_pending_and_seen_at_its_next_load() {
    let (sys, m, _) = v41_system();
    let ((mut c1, mut hw1), (mut c2, mut hw2)) = alpha_running(sys, &m);
    put(sys, &mut c2, &mut hw2);
    assert_eq!(m.lock().resident(2), None);

    sgi_to(sys, &mut c1, &mut hw1, 7 << 24 | 0b10);
    assert!(m.lock().events().is_empty());
    assert_eq!(m.lock().pending(2), 1 << 7);

    // CPU_ON: the vCPU loads again. Its redistributor starts from reset,
    // so the guest enables its SGIs again before it takes one; the vSGI
    // waited meanwhile.
    let mut c2 = loaded_cpu(sys, &mut hw2, 2);
    assert_eq!(m.lock().resident(2), Some(2));
    gicr_write(sys, &mut c2, &mut hw2, 1, ISENABLER0, 1 << 7);
    assert_eq!(
        m.lock().take_events(),
        [Event::Delivered {
            cpu: 2,
            vpe: 2,
            intid: 7
        }]
    );
    assert!(m.lock().misuse().is_empty(), "{:?}", m.lock().misuse());
}

#[test]
fn a_cpu_the_platform_gave_no_frame_maps_no_vpe_and_keeps_the_mailbox() {
    let (sys, m, queue) = v41_system();
    let mut hw = FakeHw::new();
    hw.cpu = 1;

    let mut cpu = loaded_cpu(sys, &mut hw, 1);
    sgi_to(sys, &mut cpu, &mut hw, 3 << 24 | 0b10);

    assert!(queue.words.lock().is_empty(), "nothing sent to the ITS");
    assert!(!m.lock().mapped(0, 1));
    assert_eq!(hw.sgis, [(0x102, SGI_MAILBOX)]);
    assert!(
        hw.log.iter().any(|l| l.contains("no GICv4.1 VLPI frame")),
        "{:?}",
        hw.log
    );
}

#[test]
fn deleting_a_stopped_partition_unmaps_its_vpes_and_frees_their_tables() {
    let (sys, m, queue) = v41_system();
    let ((mut c1, mut hw1), (mut c2, mut hw2)) = alpha_running(sys, &m);
    put(sys, &mut c1, &mut hw1);
    put(sys, &mut c2, &mut hw2);
    let index = sys.assigned(1).unwrap().partition;
    sys.partition(index).unwrap().set_state(State::Stopped, 0);
    assert_eq!(queue.vpts_live(), 3);

    sys.destroy_partition(index, &mut hw1).unwrap();

    assert!(!m.lock().mapped(0, 1) && !m.lock().mapped(0, 2));
    assert_eq!(queue.vpts_live(), 0, "VCONF and both VPTs freed");
    assert!(m.lock().take_events().is_empty(), "no command error");
    assert!(m.lock().misuse().is_empty(), "{:?}", m.lock().misuse());
}

#[test]
fn nassgicap_is_offered_on_a_gicv4_1_host_and_nassgireq_reads_back() {
    let (sys, m, _) = v41_system();
    let mut hw = hw_on(sys, &m, 1);
    let mut cpu = loaded_cpu(sys, &mut hw, 1);

    assert_eq!(gicd_read(sys, &mut cpu, &mut hw, GICD_TYPER2), 1 << 8);
    gicd_ctlr(sys, &mut cpu, &mut hw, CTLR_GRP1_NASSGIREQ);
    assert_eq!(gicd_read(sys, &mut cpu, &mut hw, 0), 0x152);
}

#[test]
fn on_a_gicv3_or_gicv4_0_host_typer2_is_zero_and_nassgireq_is_raz_wi() {
    let (v40, _) = super::its_exit::v4_system();
    for sys in [v40, system()] {
        let mut hw = FakeHw::new();
        hw.cpu = 1;
        let mut cpu = loaded_cpu(sys, &mut hw, 1);

        assert_eq!(gicd_read(sys, &mut cpu, &mut hw, GICD_TYPER2), 0);
        gicd_ctlr(sys, &mut cpu, &mut hw, CTLR_GRP1_NASSGIREQ);
        assert_eq!(gicd_read(sys, &mut cpu, &mut hw, 0), 0x52);
    }
}

#[test]
fn before_the_guest_sets_nassgireq_an_sgi_takes_the_trapped_path() {
    let (sys, m, _) = v41_system();
    let ((mut c1, mut hw1), _) = alpha_running_with(sys, &m, 2);
    hw1.sgis.clear();

    sgi_to(sys, &mut c1, &mut hw1, 5 << 24 | 0b10);

    assert_eq!(hw1.sgis, [(0x102, SGI_MAILBOX)], "the mailbox doorbell");
    assert_eq!(m.lock().sgir_writes(0), 0);
    let mut posted = 0;
    sys.cpus[2].mailbox.drain(|_| posted += 1);
    assert_eq!(posted, 1);
}

#[test]
fn an_sgi_pending_in_the_list_registers_moves_to_the_vpe_when_the_guest_sets_nassgireq() {
    let (sys, m, _) = v41_system();
    let ((mut c1, mut hw1), (mut c2, mut hw2)) = alpha_running_with(sys, &m, 2);
    // Disabled first, as gic_dist_init does, so nothing is delivered
    // before the switch; SGI 5 trapped and pending in vCPU 1's LRs.
    gicd_ctlr(sys, &mut c1, &mut hw1, 0);
    sgi_to(sys, &mut c1, &mut hw1, 5 << 24 | 0b10);
    dispatch_irq(sys, &mut c2, &mut hw2, SGI_MAILBOX);
    let lrs = |c: &Cpu, hw: &mut FakeHw| c.state.lrs.private_bits(&Lrs(hw)).pending;
    assert_eq!(lrs(&c2, &mut hw2), 1 << 5);
    m.lock().take_events();

    gicd_ctlr(sys, &mut c1, &mut hw1, CTLR_GRP1_NASSGIREQ);
    dispatch_irq(sys, &mut c2, &mut hw2, SGI_MAILBOX); // the kick

    assert_eq!(lrs(&c2, &mut hw2), 0, "out of the list registers");
    assert_eq!(
        m.lock().take_events(),
        [Event::Delivered {
            cpu: 2,
            vpe: 2,
            intid: 5
        }]
    );
    assert!(m.lock().misuse().is_empty(), "{:?}", m.lock().misuse());
}

#[test]
fn a_vsgi_pending_on_the_vpe_survives_nassgireq_turned_off_and_new_sgis_are_trapped() {
    let (sys, m, _) = v41_system();
    let ((mut c1, mut hw1), (mut c2, mut hw2)) = alpha_running(sys, &m);
    put(sys, &mut c2, &mut hw2);
    sgi_to(sys, &mut c1, &mut hw1, 7 << 24 | 0b10);
    assert_eq!(m.lock().pending(2), 1 << 7);

    // gic_dist_init of a guest that does not ask for nASSGIreq.
    gicd_ctlr(sys, &mut c1, &mut hw1, 0);
    gicd_ctlr(sys, &mut c1, &mut hw1, 2);
    assert_eq!(gicd_read(sys, &mut c1, &mut hw1, 0) & 1 << 8, 0);
    let mut c2 = loaded_cpu(sys, &mut hw2, 2);
    gicr_write(sys, &mut c2, &mut hw2, 1, ISENABLER0, 1 << 7);

    assert_eq!(
        m.lock().take_events(),
        [Event::Delivered {
            cpu: 2,
            vpe: 2,
            intid: 7
        }]
    );
    hw1.sgis.clear();
    sgi_to(sys, &mut c1, &mut hw1, 3 << 24 | 0b10);
    assert_eq!(hw1.sgis, [(0x102, SGI_MAILBOX)], "trapped again");
    assert!(m.lock().misuse().is_empty(), "{:?}", m.lock().misuse());
}

/// The standard system on a GICv4.1 host of two ITSes and two NUMA nodes:
/// CPUs 0 and 1 in node 1, CPUs 2 and 3 in node 0, ITS 0 in node 0, ITS 1
/// in node 1 (so alpha's vCPU 0, on CPU 1, sends from node 1 and its vCPU
/// 1, on CPU 2, from node 0). `vsgi[i]`: ITS i's GITS_TYPER offers vSGIs
/// (else it is a GICv4.0 one). The model's two ITSes share its
/// redistributors' vPE state; every CPU online.
fn two_its_v41_system(vsgi: [bool; 2]) -> (&'static System, SharedModel, [FakeQueue; 2]) {
    let mut m = Model::new(Config {
        its_count: 2,
        ..Config::default()
    });
    for its in 0..2 {
        m.its_write(
            its,
            reg::GITS_CBASER,
            reg::CBASER_VALID | (0x8000_0000 + 0x10_0000 * its as u64),
        );
        m.its_write(its, reg::GITS_CTLR, reg::CTLR_ENABLED);
    }
    for cpu in 0..4 {
        m.vlpi_write(cpu, reg::GICR_VPROPBASER, reg::VPROP_VALID | 0x9000_0000);
    }
    let model: SharedModel = Arc::new(spin::Mutex::new(m));
    let queues = [0, 1].map(|i| FakeQueue::with_model_its(model.clone(), i));
    let mut h = host(4);
    h.gic.its = vec![(0x0808_0000, 0x3_0000), (0x0810_0000, 0x3_0000)];
    h.numa = crate::dtb::NumaInfo {
        cpus: vec![Some(1), Some(1), Some(0), Some(0)],
        its: vec![Some(0), Some(1)],
    };
    h.gic.found = gicv4_1_found();
    let units = queues
        .iter()
        .zip(vsgi)
        .map(|(q, v)| {
            let typer = if v { V41_TYPER } else { QEMU_TYPER | 1 << 1 };
            Some((
                ItsTyper::decode(typer),
                Box::new(q.clone()) as Box<dyn crate::its::ItsQueue>,
            ))
        })
        .collect();
    let its = HostIts::several(units, 4).unwrap();
    let (sys, _) = system_and_tables(|_| {}, None, Default::default(), h, Vec::new(), Some(its));
    for cpu in 0..4 {
        sys.its_cpu_online(cpu, cpu as u16, 0);
    }
    (sys, model, queues)
}

/// Whether `c` is a VMAPP (DW0 [7:0] 0x29) with V = 1 and with Alloc.
fn vmapp_alloc(c: &[u64; 4]) -> Option<bool> {
    (c[0] & 0xFF == 0x29 && c[2] >> 63 == 1).then_some(c[0] >> 8 & 1 == 1)
}

#[test]
fn an_sgi_from_a_cpu_in_node_1_is_written_to_its_1_and_reaches_the_resident_vpe() {
    let (sys, m, _) = two_its_v41_system([true, true]);
    let ((mut c1, mut hw1), (mut c2, mut hw2)) = alpha_running(sys, &m);
    gicr_write(sys, &mut c1, &mut hw1, 0, ISENABLER0, 0xFFFF);
    m.lock().take_events();

    sgi_to(sys, &mut c1, &mut hw1, 5 << 24 | 0b10); // CPU 1 (node 1) to vCPU 1

    {
        let model = m.lock();
        assert_eq!((model.sgir_writes(1), model.sgir_writes(0)), (1, 0));
        assert_eq!(
            model.events(),
            [Event::Delivered {
                cpu: 2,
                vpe: 2,
                intid: 5
            }]
        );
        assert_eq!(model.receiver_exits(), 0);
    }
    // And back from CPU 2 (node 0), through ITS 0.
    sgi_to(sys, &mut c2, &mut hw2, 6 << 24 | 0b1);
    let model = m.lock();
    assert_eq!((model.sgir_writes(1), model.sgir_writes(0)), (1, 1));
    assert_eq!(
        model.events().last(),
        Some(&Event::Delivered {
            cpu: 1,
            vpe: 1,
            intid: 6
        })
    );
    assert!(model.misuse().is_empty(), "{:?}", model.misuse());
}

#[test]
fn every_vpe_is_vmapped_on_both_itses_alloc_on_the_first_and_configured_through_its_cpus_its() {
    let (sys, m, [q0, q1]) = two_its_v41_system([true, true]);

    let _running = alpha_running(sys, &m);

    let model = m.lock();
    for vpe in [1, 2] {
        assert!(model.mapped(0, vpe) && model.mapped(1, vpe), "vPE {vpe}");
    }
    let allocs = |q: &FakeQueue| {
        q.words
            .lock()
            .iter()
            .filter_map(vmapp_alloc)
            .collect::<Vec<_>>()
    };
    assert_eq!(allocs(&q0), [true, true], "Alloc on ITS 0, the first");
    assert_eq!(allocs(&q1), [false, false]);
    // vCPU 0 (CPU 1, node 1) took its reset SGI configuration through ITS
    // 1, vCPU 1 (CPU 2, node 0) its own and the guest's enables through
    // ITS 0.
    let vsgis = |q: &FakeQueue, vpe: u64| {
        q.words
            .lock()
            .iter()
            .filter(|c| c[0] & 0xFF == 0x23 && c[1] >> 32 == vpe)
            .count()
    };
    assert_eq!((vsgis(&q1, 1), vsgis(&q0, 1)), (16, 0));
    assert_eq!((vsgis(&q0, 2), vsgis(&q1, 2)), (16 + 16, 0));
    assert!(model
        .events()
        .iter()
        .all(|e| !matches!(e, Event::CommandError { .. })));
    assert!(model.misuse().is_empty(), "{:?}", model.misuse());
}

#[test]
fn a_restart_unmaps_the_vpes_on_both_itses_the_first_last_with_alloc() {
    let (sys, m, [q0, q1]) = two_its_v41_system([true, true]);
    let ((mut c1, mut hw1), (mut c2, mut hw2)) = alpha_running(sys, &m);
    put(sys, &mut c1, &mut hw1);
    put(sys, &mut c2, &mut hw2);
    for q in [&q0, &q1] {
        q.words.lock().clear();
    }
    let p = sys.partitions()[0].clone();

    crate::vsgi::restart(sys, &p);

    let model = m.lock();
    for vpe in [1, 2] {
        assert!(!model.mapped(0, vpe) && !model.mapped(1, vpe), "vPE {vpe}");
    }
    let unmaps = |q: &FakeQueue| {
        q.words
            .lock()
            .iter()
            .filter(|c| c[0] & 0xFF == 0x29 && c[2] >> 63 == 0)
            .map(|c| c[0] >> 8 & 1 == 1)
            .collect::<Vec<_>>()
    };
    assert_eq!(unmaps(&q0), [true, true], "Alloc with ITS 0's");
    assert_eq!(unmaps(&q1), [false, false]);
    assert_eq!(q0.vpts_live() + q1.vpts_live(), 0, "tables freed");
    assert!(model.misuse().is_empty(), "{:?}", model.misuse());
}

#[test]
fn a_cpu_whose_node_has_no_vsgi_its_sends_through_the_first_its_with_vsgis() {
    let (sys, m, [_, q1]) = two_its_v41_system([true, false]);
    let set = sys.its.as_ref().unwrap();
    assert_eq!(set.vsgi_itses(), [0]);
    assert_eq!((0..4).map(|c| set.local_its(c)).collect::<Vec<_>>(), [0; 4]);
    let ((mut c1, mut hw1), _) = alpha_running(sys, &m);

    sgi_to(sys, &mut c1, &mut hw1, 5 << 24 | 0b10); // from CPU 1, node 1

    let model = m.lock();
    assert_eq!((model.sgir_writes(0), model.sgir_writes(1)), (1, 0));
    assert_eq!(
        model.events(),
        [Event::Delivered {
            cpu: 2,
            vpe: 2,
            intid: 5
        }]
    );
    assert!(q1.words.lock().is_empty(), "nothing to the GICv4.0 ITS");
    assert!(!model.mapped(1, 1) && !model.mapped(1, 2));
}

/// alpha with the NIC (00:02.0, DeviceID 0x10) on a GICv4.1 host whose one
/// ITS offers vSGIs: its MSIs are direct vLPIs on its vSGI path's vPEs.
/// The queue's commands, GICv4.0-encoded ones included, go to the model.
fn v41_nic_system() -> (&'static System, SharedModel, FakeQueue) {
    v41_nic_system_with(|_| {})
}

/// [`v41_nic_system`] with the NIC changed by `nic`.
fn v41_nic_system_with(
    nic: impl FnOnce(&mut crate::vpci::HostFunction),
) -> (&'static System, SharedModel, FakeQueue) {
    use super::its_exit::{its_system_host_bridge, NIC};
    let mut m = Model::new(Config::default());
    m.its_write(0, reg::GITS_CBASER, reg::CBASER_VALID | 0x8000_0000);
    m.its_write(0, reg::GITS_CTLR, reg::CTLR_ENABLED);
    for cpu in 0..4 {
        m.vlpi_write(cpu, reg::GICR_VPROPBASER, reg::VPROP_VALID | 0x9000_0000);
    }
    let model: SharedModel = Arc::new(spin::Mutex::new(m));
    let queue = FakeQueue::with_model(model.clone());
    let records = queue.clone();
    let mut h = host(4);
    h.gic.its = vec![(0x0808_0000, 0x3_0000)];
    h.pcie = its_system_host_bridge();
    h.gic.found = gicv4_1_found();
    let its = HostIts::new(ItsTyper::decode(V41_TYPER), Box::new(queue), 4);
    let (sys, _) = system_and_tables(
        alpha_gets_00_02_0,
        None,
        Default::default(),
        h,
        {
            let mut f = nic_function(crate::pci::Bdf {
                bus: 0,
                dev: 2,
                func: 0,
            });
            nic(&mut f);
            vec![f]
        },
        Some(its),
    );
    for cpu in 0..4 {
        sys.its_cpu_online(cpu, cpu as u16, 0);
    }
    assert_eq!(NIC, 0x10);
    (sys, model, records)
}

/// CPU 1's fake for [`v41_nic_system`]: sparse RAM whose writes the model
/// also sees (the VCONF copy), its GICv4.1 frame.
fn nic_hw(sys: &System, m: &SharedModel) -> FakeHw {
    let mut hw = FakeHw::sparse();
    hw.cpu = 1;
    hw.v41 = hw_on(sys, m, 1).v41.take();
    hw.model_mem = Some(m.clone());
    hw
}

/// The guest's property byte of vINTID `vintid` in alpha's table.
fn guest_prop(hw: &mut FakeHw, p: &Partition, vintid: u64, byte: u8) {
    use super::its_exit::PROP;
    let at = p.host_addr(p.ram_ipa + PROP + vintid - 8192, 1).unwrap();
    crate::partition::HostMemory::write(hw, at, &[byte]);
}

const VLPI_8300_ON_VPE_1: Event = Event::VlpiDelivered {
    cpu: 1,
    vpe: 1,
    vintid: 8300,
};

#[test]
fn a_device_msi_to_a_vmapti_d_event_reaches_the_resident_vpe_with_no_exit() {
    use super::its_exit::{alpha_with_lpis, map_nic_event_1, NIC};
    let (sys, m, queue) = v41_nic_system();
    let mut hw = nic_hw(sys, &m);
    let (mut cpu, p) = alpha_with_lpis(sys, &mut hw);
    assert!(p.vits.as_ref().unwrap().lock(LockPath::Management).v41());
    guest_prop(&mut hw, &p, 8300, 0xA0 | 1);

    map_nic_event_1(sys, &mut cpu, &mut hw, &p);
    m.lock().take_events();
    m.lock().translate(0, NIC, 1);

    let model = m.lock();
    assert_eq!(model.vlpi_route(0, NIC, 1), Some((1, 8300)));
    assert_eq!(model.events(), [VLPI_8300_ON_VPE_1]);
    assert_eq!(model.receiver_exits(), 0);
    assert!(model.misuse().is_empty(), "{:?}", model.misuse());
    assert!(
        !queue
            .sent_v4
            .lock()
            .iter()
            .any(|c| matches!(c, crate::vgic::v40::V4Cmd::Vmapp { .. })),
        "no GICv4.0 VMAPP: the vPE is the vSGI path's"
    );
    assert_eq!(p.faults.load(Ordering::Relaxed), 0, "{:?}", hw.log);
}

#[test]
fn a_vlpi_for_a_vcpu_that_was_put_is_kept_pending_and_seen_at_its_next_load() {
    use super::its_exit::{alpha_with_lpis, map_nic_event_1, NIC};
    let (sys, m, _) = v41_nic_system();
    let mut hw = nic_hw(sys, &m);
    let (mut cpu, p) = alpha_with_lpis(sys, &mut hw);
    guest_prop(&mut hw, &p, 8300, 1);
    map_nic_event_1(sys, &mut cpu, &mut hw, &p);
    put(sys, &mut cpu, &mut hw);
    m.lock().take_events();

    m.lock().translate(0, NIC, 1);
    assert!(m.lock().take_events().is_empty());
    assert_eq!(m.lock().vlpis_pending(1), [8300]);
    let _cpu = loaded_cpu(sys, &mut hw, 1);

    assert_eq!(m.lock().take_events(), [VLPI_8300_ON_VPE_1]);
}

#[test]
fn the_vconf_copy_follows_the_guests_table_at_each_inv() {
    use super::its_exit::{alpha_with_lpis, map_nic_event_1, NIC};
    let (sys, m, _) = v41_nic_system();
    let mut hw = nic_hw(sys, &m);
    let (mut cpu, p) = alpha_with_lpis(sys, &mut hw);
    map_nic_event_1(sys, &mut cpu, &mut hw, &p); // the byte is 0: disabled
    m.lock().take_events();
    m.lock().translate(0, NIC, 1);
    assert!(m.lock().take_events().is_empty(), "disabled: held");

    // The guest enables it and INVs (one more command in its queue).
    guest_prop(&mut hw, &p, 8300, 1);
    queue_commands_at(
        sys,
        &mut cpu,
        &mut hw,
        &p,
        4,
        &[[0x0C | u64::from(NIC) << 32, 1, 0, 0]],
    );

    assert_eq!(m.lock().take_events(), [VLPI_8300_ON_VPE_1]);
}

/// The guest's `cmds` at slot `first` of alpha's queue, then GITS_CWRITER
/// past them.
fn queue_commands_at(
    sys: &System,
    cpu: &mut Cpu,
    hw: &mut FakeHw,
    p: &Partition,
    first: u64,
    cmds: &[[u64; 4]],
) {
    super::its_exit::queue_commands(hw, p, first, cmds);
    super::its_exit::its_reg(
        sys,
        cpu,
        hw,
        0x88,
        8,
        Some((first + cmds.len() as u64) * 32),
    );
}

#[test]
fn a_mapti_to_a_vcpu_that_has_not_run_is_refused_and_nothing_is_sent() {
    use super::its_exit::{alpha_with_lpis, map_nic_event_1, NIC};
    let (sys, m, queue) = v41_nic_system();
    let mut hw = nic_hw(sys, &m);
    let (mut cpu, p) = alpha_with_lpis(sys, &mut hw);
    map_nic_event_1(sys, &mut cpu, &mut hw, &p);
    queue.sent_v4.lock().clear();
    let before = p.faults.load(Ordering::Relaxed);

    // MAPC ICID 1 to vCPU 1 (on CPU 2, never loaded), MAPTI event 2 there.
    queue_commands_at(
        sys,
        &mut cpu,
        &mut hw,
        &p,
        4,
        &[
            [0x09, 0, 1 << 63 | 1 << 16 | 1, 0],
            [0x0A | u64::from(NIC) << 32, 2 | 8301 << 32, 1, 0],
        ],
    );

    assert_eq!(p.faults.load(Ordering::Relaxed), before + 1);
    assert!(
        hw.log.iter().any(|l| l.contains("not mapped yet")),
        "{:?}",
        hw.log
    );
    assert!(queue.sent_v4.lock().is_empty());
    let model = m.lock();
    assert_eq!(model.vlpi_route(0, NIC, 2), None);
    assert!(model
        .events()
        .iter()
        .all(|e| !matches!(e, Event::CommandError { .. })));
}

#[test]
fn a_partition_with_direct_vlpis_is_not_held_to_the_physical_lpi_pool() {
    // More MSI vectors than the host ITS has LPIs: refused on the trapped
    // path, but direct vLPIs take none.
    let (sys, _, _) = v41_nic_system_with(|f| f.msi_vectors = 9000);

    let alpha = sys.partitions().into_iter().find(|p| p.name == "alpha");

    let alpha = alpha.expect("alpha created");
    assert!(alpha
        .vits
        .as_ref()
        .unwrap()
        .lock(LockPath::Management)
        .v41());
    assert_eq!(alpha.lpis_reserved, 0);
}

/// alpha with the NIC (requester ID 0x10) routed by the bridge's `msi-map`
/// to ITS 1 of two, on a GICv4.1 host; `vsgi[i]`: ITS i offers vSGIs.
fn nic_behind_its_1(vsgi: [bool; 2]) -> &'static System {
    use crate::dtb::PciMsiMap;
    let (its0, its1) = (0x0a00_0000, 0x0808_0000);
    let mut h = host(4);
    h.gic.its = vec![(its0, 0x3_0000), (its1, 0x3_0000)];
    h.gic.found = gicv4_1_found();
    let mut bridge = super::its_exit::its_system_host_bridge().unwrap();
    bridge.msi_map = vec![
        PciMsiMap {
            rid_base: 0,
            its_base: its0,
            device_base: 0,
            len: 0x10,
        },
        PciMsiMap {
            rid_base: 0x10,
            its_base: its1,
            device_base: 0x10,
            len: 0xf0,
        },
    ];
    h.pcie = Some(bridge);
    let units = vsgi
        .map(|v| {
            let typer = if v { V41_TYPER } else { QEMU_TYPER | 1 << 1 };
            Some((
                ItsTyper::decode(typer),
                Box::new(FakeQueue::default()) as Box<dyn crate::its::ItsQueue>,
            ))
        })
        .into_iter()
        .collect();
    let its = HostIts::several(units, 4).unwrap();
    let (sys, _) = system_and_tables(
        alpha_gets_00_02_0,
        None,
        Default::default(),
        h,
        vec![nic_function(crate::pci::Bdf {
            bus: 0,
            dev: 2,
            func: 0,
        })],
        Some(its),
    );
    sys
}

#[test]
fn direct_vlpis_only_when_the_functions_its_has_the_vpes_mapped() {
    let v41 = |sys: &System| {
        let alpha = sys
            .partitions()
            .into_iter()
            .find(|p| p.name == "alpha")
            .unwrap();
        let v = alpha
            .vits
            .as_ref()
            .expect("a vITS")
            .lock(LockPath::Management);
        (v.v41(), v.delivery)
    };
    use crate::vgic::v40::LpiDelivery;

    // ITS 1 offers vSGIs too: direct on the vSGI path's vPEs.
    assert_eq!(
        v41(nic_behind_its_1([true, true])),
        (true, LpiDelivery::Direct)
    );
    // ITS 1 is a GICv4.0 one: no vPE is mapped there, so trapped.
    assert_eq!(
        v41(nic_behind_its_1([true, false])),
        (false, LpiDelivery::Trapped)
    );
}
