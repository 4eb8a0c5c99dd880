//! The GICv5 driver against the register-level model `pinfold-gicv5model`:
//! every register access and GIC instruction the driver makes goes to the
//! model by its raw encoding, the model decides what it does (and records
//! misuse), and the tests check the architectural effect.

extern crate std;

use super::*;
use pinfold_gicv5model::{Access, Config, El, Enc, IntId, Misuse, Model, GICR_CDIA as MODEL_CDIA};
use pinfold_hv::lockstat::LockStat;
use pinfold_hv::trap::SysRegId;
use pinfold_hv::vgic::pits::LPI_BASE;
use pinfold_hv::vgic5::ppitrap::{emulate, PpiEmulation};
use pinfold_hv::vgic5::{
    attribute_swerr, check_host, plan_virs, Doorbell, GicInsn, PpiPlan, SwerrOwner, UntrappedInsns,
    VirsFault, VmSpec, VmTables, PPI_CNTHP, PPI_CNTP, PPI_CNTV, PPI_PMU,
};
use std::boxed::Box;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::vec::Vec;

fn enc(v: u32) -> Enc {
    let (op0, op1, crn, crm, op2) = fields(v);
    Enc {
        op0,
        op1,
        crn,
        crm,
        op2,
    }
}

pub(crate) type Shared = Rc<RefCell<Model>>;

/// One PE's system registers and instructions, at EL2, in the model.
pub(crate) struct ModelPe {
    m: Shared,
    pe: usize,
    /// System register accesses and GIC instructions issued.
    ops: Rc<Cell<u64>>,
}

impl CpuRegs for ModelPe {
    fn read(&mut self, reg: u32) -> u64 {
        self.ops.set(self.ops.get() + 1);
        match self.m.borrow_mut().read(self.pe, El::El2, enc(reg)) {
            Access::Value(v) => v,
            a => panic!("mrs {reg:#x}: {a:?}"),
        }
    }
    fn write(&mut self, reg: u32, value: u64) {
        self.ops.set(self.ops.get() + 1);
        let a = self.m.borrow_mut().write(self.pe, El::El2, enc(reg), value);
        assert_eq!(a, Access::Value(0), "msr {reg:#x}");
    }
    fn gic(&mut self, op: u32, xt: u64) {
        self.ops.set(self.ops.get() + 1);
        let a = self.m.borrow_mut().sys(self.pe, El::El2, enc(op), xt);
        assert_eq!(a, Access::Value(0), "sys {op:#x}");
    }
    fn cdia(&mut self) -> u64 {
        self.ops.set(self.ops.get() + 1);
        match self
            .m
            .borrow_mut()
            .sysl(self.pe, El::El2, enc(insn::GICR_CDIA))
        {
            Access::Value(v) => v,
            a => panic!("cdia: {a:?}"),
        }
    }
}

struct ModelIrs(Shared);

impl IrsMmio for ModelIrs {
    fn read32(&mut self, offset: usize) -> u32 {
        self.0.borrow_mut().irs_read(offset as u64) as u32
    }
    fn write32(&mut self, offset: usize, value: u32) {
        self.0
            .borrow_mut()
            .irs_write(offset as u64, u64::from(value))
    }
    fn write64(&mut self, offset: usize, value: u64) {
        self.0.borrow_mut().irs_write(offset as u64, value)
    }
    fn read64(&mut self, offset: usize) -> u64 {
        self.0.borrow_mut().irs_read(offset as u64)
    }
}

pub(crate) struct ModelMem(pub(crate) Shared);

impl TableMem for ModelMem {
    fn write64(&mut self, pa: u64, value: u64) {
        self.0.borrow_mut().mem_write64(pa, value)
    }
}

/// MPIDR and IAFFID of the two CPUs.
pub(crate) static CPUS: [(u64, u16); 2] = [(0x8000_0000, 0), (0x8000_0001, 1)];
const IPI_BASE: u32 = 8192;
/// A guest whose VM is in the vIRS: no GIC instruction traps.
const ALL_INSNS: UntrappedInsns = UntrappedInsns::for_vcpu(true);

pub(crate) struct Rig {
    pub(crate) m: Shared,
    irs: Gicv5Irs<ModelIrs, ModelPe>,
    pub(crate) cpus: Vec<Gicv5Cpu<ModelPe>>,
    ops: Vec<Rc<Cell<u64>>>,
    stat: &'static LockStat,
    lock: CountedLock<()>,
}

pub(crate) fn pe(m: &Shared, pe: usize) -> (ModelPe, Rc<Cell<u64>>) {
    let ops = Rc::new(Cell::new(0));
    (
        ModelPe {
            m: m.clone(),
            pe,
            ops: ops.clone(),
        },
        ops,
    )
}

fn rig_with(caps: IrqChipCaps) -> Rig {
    let m: Shared = Rc::new(RefCell::new(Model::new(Config::default())));
    let (irs_cpu, _) = pe(&m, 0);
    let mut irs = Gicv5Irs::init(ModelIrs(m.clone()), irs_cpu, &CPUS, Some((0x8000_0000, 14)))
        .expect("IRS init");
    let mut cpus = Vec::new();
    let mut ops = Vec::new();
    for i in 0..2 {
        let (regs, o) = pe(&m, i);
        let mut cpu = Gicv5Cpu::init_this_cpu(regs, i as u32, IPI_BASE, &CPUS, caps);
        cpu.probe(&mut irs.host);
        cpus.push(cpu);
        ops.push(o);
    }
    let stat: &'static LockStat = Box::leak(Box::new(LockStat::new()));
    Rig {
        m,
        irs,
        cpus,
        ops,
        stat,
        lock: CountedLock::new((), stat),
    }
}

pub(crate) fn rig() -> Rig {
    rig_with(GICV5_CAPS)
}

impl Rig {
    pub(crate) fn no_misuse(&self) {
        assert_eq!(self.m.borrow().misuse(), &[] as &[Misuse]);
    }
    fn guest_cdia(&self, pe: usize) -> u64 {
        match self.m.borrow_mut().sysl(pe, El::El1, MODEL_CDIA) {
            Access::Value(v) => v,
            a => panic!("{a:?}"),
        }
    }
    fn guest_sys(&self, pe: usize, op: u32, xt: u64) {
        assert_eq!(
            self.m.borrow_mut().sys(pe, El::El1, enc(op), xt),
            Access::Value(0)
        );
    }
    fn guest_read(&self, pe: usize, reg: u32) -> Access {
        self.m.borrow_mut().read(pe, El::El1, enc(reg))
    }
    fn guest_write(&self, pe: usize, reg: u32, v: u64) -> Access {
        self.m.borrow_mut().write(pe, El::El1, enc(reg), v)
    }
    /// A guest's ICC_PPI_* access (`write`: Some for MSR) as it goes on
    /// hardware: if it traps, EL2 does what `exit::sysreg` does for a
    /// `gicv5` partition (the core's `ppitrap::emulate` with the plan's
    /// visible PPIs, on this driver's `vppi_read`/`vppi_write`). Returns
    /// what the guest sees and whether it trapped.
    fn guest_ppi(
        &mut self,
        pe: usize,
        reg: u32,
        write: Option<u64>,
        visible: PpiSet,
    ) -> (u64, bool) {
        let access = match write {
            None => self.guest_read(pe, reg),
            Some(v) => self.guest_write(pe, reg, v),
        };
        match access {
            Access::Value(v) => (v, false),
            Access::Trapped => {
                let (op0, op1, crn, crm, op2) = fields(reg);
                let id = SysRegId::new(op0, op1, crn, crm, op2);
                let e = emulate(id, write, visible).expect("an ICC_PPI_* register");
                let cpu = &mut self.cpus[pe];
                let old = cpu.vppi_read(e.state());
                let seen = match e {
                    PpiEmulation::Read { mask, .. } => old & mask,
                    PpiEmulation::Write { state, .. } => {
                        cpu.vppi_write(state, e.apply(old));
                        0
                    }
                };
                (seen, true)
            }
            a => panic!("{a:?}"),
        }
    }
}

#[test]
fn every_driver_encoding_is_a_register_the_model_knows() {
    for &r in reg::ALL {
        assert!(
            pinfold_gicv5model::Reg::decode(enc(r)).is_some(),
            "{r:#x} {:?}",
            fields(r)
        );
    }
    for op in [
        insn::GSB_SYS,
        insn::GSB_ACK,
        insn::GIC_CDDIS,
        insn::GIC_CDEN,
        insn::GIC_CDPRI,
        insn::GIC_CDAFF,
        insn::GIC_CDPEND,
        insn::GIC_CDEOI,
        insn::GIC_CDDI,
        insn::GIC_CDHM,
    ] {
        assert!(
            pinfold_gicv5model::Insn::decode(enc(op)).is_some(),
            "{op:#x}"
        );
    }
    assert_eq!(enc(insn::GICR_CDIA), MODEL_CDIA);
}

#[test]
fn init_brings_up_irs_and_both_cpus_with_no_misuse() {
    let r = rig();
    r.no_misuse();
    assert_eq!(check_host(&r.irs.host), Ok(()));
    assert_eq!(r.irs.host.ppis, PpiSet([0xffff_ffff, 0]));
    assert!(r.irs.host.gcie_legacy);
    assert!(r.irs.host.ppis.contains(PPI_CNTV));
    let mut m = r.m.borrow_mut();
    for p in 0..2 {
        assert_eq!(
            m.read(p, El::El2, enc(reg::ICC_CR0_EL1)),
            Access::Value(CR0_EN)
        );
        assert_eq!(
            m.read(p, El::El2, enc(reg::ICC_PCR_EL1)),
            Access::Value(PCR_ALL)
        );
        // Each CPU's 16 IPI LPIs are enabled and targeted at it.
        for sgi in 0..16 {
            let l = m.lpi(ipi_lpi(IPI_BASE, p as u32, sgi)).expect("ipi lpi");
            assert!(l.enabled && !l.level);
            assert_eq!(l.iaffid, p as u16);
        }
    }
}

#[test]
fn an_irs_without_enough_lpi_bits_is_refused() {
    let m: Shared = Rc::new(RefCell::new(Model::new(Config {
        lpi_id_bits: 10,
        ..Config::default()
    })));
    let (regs, _) = pe(&m, 0);
    let e = Gicv5Irs::init(ModelIrs(m.clone()), regs, &CPUS, Some((0x8000_0000, 14))).err();
    assert_eq!(e, Some(IrsError::TooFewLpiBits { need: 14, have: 10 }));
}

#[test]
fn host_ppi_acknowledge_priority_drop_deactivate() {
    let mut r = rig();
    let (lock, stat) = (&r.lock, r.stat);
    change_percpu_state(
        &mut r.cpus[0],
        lock,
        LockPath::TimerPpiState,
        PpiStateChange::Enable(PPI_CNTHP, true),
    );
    r.m.borrow_mut().set_ppi_line(0, PPI_CNTHP, true);
    assert!(r.m.borrow().irq_signalled(0));
    assert!(!r.m.borrow().irq_signalled(1));
    assert_eq!(r.cpus[0].ack(), PPI_CNTHP);
    assert!(r.m.borrow().ppi(0, PPI_CNTHP).active);
    // Active: not acknowledged again, even with the line still high.
    assert_eq!(r.cpus[0].ack(), 1023);
    r.cpus[0].priority_drop(PPI_CNTHP);
    r.m.borrow_mut().set_ppi_line(0, PPI_CNTHP, false);
    r.cpus[0].deactivate(PPI_CNTHP);
    assert!(!r.m.borrow().ppi(0, PPI_CNTHP).active);
    assert_eq!(r.cpus[0].ack(), 1023);
    assert_eq!(stat.total(), 0);
    r.no_misuse();
}

#[test]
fn ppi_enable_pending_active_are_per_cpu() {
    let mut r = rig();
    r.cpus[0].apply_ppi(PpiStateChange::Pending(28, true));
    r.cpus[0].apply_ppi(PpiStateChange::Active(29, true));
    r.cpus[1].apply_ppi(PpiStateChange::Enable(30, true));
    assert_eq!(
        r.cpus[0].ppi_bits(),
        PpiBits {
            pending: 1 << 28,
            active: 1 << 29
        }
    );
    assert_eq!(r.cpus[1].ppi_bits(), PpiBits::default());
    assert!(r.m.borrow().ppi(1, 30).enabled);
    assert!(!r.m.borrow().ppi(0, 30).enabled);
    r.cpus[0].apply_ppi(PpiStateChange::Pending(28, false));
    r.cpus[0].apply_ppi(PpiStateChange::Active(29, false));
    assert_eq!(r.cpus[0].ppi_bits(), PpiBits::default());
    r.no_misuse();
}

#[test]
fn spi_routed_through_the_irs_and_rerouted() {
    let mut r = rig();
    let spi = 32 + 5;
    r.irs.spi_set_edge(spi, false);
    r.irs.spi_route(spi, CPUS[1].0);
    r.irs.spi_enable(spi, true);
    assert!(r.m.borrow().spi(5).level);
    r.m.borrow_mut().set_spi_line(5, true);
    assert!(!r.m.borrow().irq_signalled(0));
    assert!(r.m.borrow().irq_signalled(1));
    assert_eq!(r.cpus[1].ack(), spi);
    r.cpus[1].priority_drop(spi);
    r.cpus[1].deactivate(spi);
    // Affinity change: the still-asserted level SPI now goes to CPU 0.
    r.irs.spi_route(spi, CPUS[0].0);
    assert!(r.m.borrow().irq_signalled(0));
    assert_eq!(r.cpus[0].ack(), spi);
    assert_eq!(r.irs.spi_count(), 64);
    r.no_misuse();
}

#[test]
fn a_guests_irs_frame_trigger_mode_reaches_its_physical_spi_on_the_irs() {
    use pinfold_hv::vgic5::frame::{reg, FrameAction, FrameSpec, VirsFrame};
    let mut r = rig();
    let mut frame = VirsFrame::new(FrameSpec {
        vcpus: 1,
        spis: std::vec![32 + 5, 32 + 6],
        ram: (0x4000_0000, 0x100_0000),
    });
    r.irs.spi_set_edge(32 + 6, true);
    // What the exit path does with the frame's action (`SpiOp::SetEdge`).
    let mut apply = |irs: &mut Gicv5Irs<_, _>, offset, v| {
        if let Some(FrameAction::SpiTrigger { intid, level }) = frame.write(offset, 4, v).action {
            irs.spi_set_edge(intid, !level);
        }
    };

    apply(&mut r.irs, reg::SPI_SELR, 6);
    apply(&mut r.irs, reg::SPI_CFGR, 1);
    apply(&mut r.irs, reg::SPI_SELR, 7);
    apply(&mut r.irs, reg::SPI_CFGR, 1);

    assert!(r.m.borrow().spi(6).level, "the guest's level SPI 6");
    assert!(!r.m.borrow().spi(7).level, "SPI 7 is not the partition's");
    assert!(!r.m.borrow().spi(5).level);
    r.no_misuse();
}

#[test]
fn an_spi_beyond_the_cores_numbers_is_ended_at_el2_and_reported_as_none() {
    // The core numbers SPI n as 32 + n below 1020 (GICv3's range, its SPI
    // tables' size); a GICv5 may have far more SPIs. One it cannot number
    // must not come back as 1020..1023 (1023 is "none") or above, and must
    // not stay active.
    let m: Shared = Rc::new(RefCell::new(Model::new(Config {
        spis: 1024,
        ..Config::default()
    })));
    let (irs_cpu, _) = pe(&m, 0);
    let mut irs = Gicv5Irs::init(ModelIrs(m.clone()), irs_cpu, &CPUS, Some((0x8000_0000, 14)))
        .expect("IRS init");
    let (regs, _) = pe(&m, 0);
    let mut cpu = Gicv5Cpu::init_this_cpu(regs, 0, IPI_BASE, &CPUS, GICV5_CAPS);
    for n in [987, 1000] {
        irs.spi_set_edge(32 + n, false);
        irs.spi_route(32 + n, CPUS[0].0);
        irs.spi_enable(32 + n, true);
    }
    m.borrow_mut().set_spi_line(1000, true);
    assert_eq!(cpu.ack(), 1023);
    assert!(!m.borrow().spi(1000).active);
    // SPI 987, the last the core numbers, is INTID 1019.
    m.borrow_mut().set_spi_line(1000, false);
    m.borrow_mut().set_spi_line(987, true);
    assert_eq!(cpu.ack(), 1019);
    assert_eq!(m.borrow().misuse(), &[] as &[Misuse]);
}

#[test]
fn ipi_is_an_lpi_from_one_cpu_to_the_other() {
    let mut r = rig();
    r.cpus[0].send_sgi(CPUS[1].0, 3);
    assert!(r.m.borrow().irq_signalled(1));
    assert!(!r.m.borrow().irq_signalled(0));
    assert_eq!(r.cpus[1].ack(), 3);
    r.cpus[1].priority_drop(3);
    r.cpus[1].deactivate(3);
    assert_eq!(r.cpus[1].ack(), 1023);
    // And back.
    r.cpus[1].send_sgi(CPUS[0].0, 15);
    assert_eq!(r.cpus[0].ack(), 15);
    r.no_misuse();
}

#[test]
fn an_msi_pool_lpi_is_acked_as_the_cores_lpi_and_deactivated_at_once() {
    let mut r = rig();
    r.cpus[1].set_msi_lpis(200..300);
    route_lpi(r.cpus[0].regs(), 205, Some(CPUS[1].1));
    let pend = |r: &mut Rig| {
        let op = operand(TYPE_LPI, 205) | (1 << 32);
        r.cpus[0].regs().gic(insn::GIC_CDPEND, op);
    };

    pend(&mut r);
    let first = r.cpus[1].ack();
    r.cpus[1].priority_drop(first);
    pend(&mut r);
    let second = r.cpus[1].ack();

    assert_eq!((first, second), (LPI_BASE + 5, LPI_BASE + 5));
    assert!(!r.m.borrow().irq_signalled(0), "targeted at CPU 1 only");
    r.no_misuse();
}

#[test]
fn a_routed_off_msi_lpi_is_not_taken() {
    let mut r = rig();
    r.cpus[1].set_msi_lpis(200..300);
    route_lpi(r.cpus[0].regs(), 205, Some(CPUS[1].1));
    route_lpi(r.cpus[0].regs(), 205, None);

    let op = operand(TYPE_LPI, 205) | (1 << 32);
    r.cpus[0].regs().gic(insn::GIC_CDPEND, op);

    assert_eq!(r.cpus[1].ack(), 1023);
    r.no_misuse();
}

fn guest_ready_ctx() -> VPpiContext {
    let mut ctx = VPpiContext::default();
    // The guest has enabled its timers and PMU at priority 8, its
    // interface on, priority mask open (VMCR EN [0], VPMR [31:27]).
    ctx.enabler[0] = (1 << PPI_CNTV) | (1 << PPI_CNTP) | (1 << PPI_PMU);
    for n in [PPI_CNTV, PPI_CNTP, PPI_PMU] {
        ctx.priorityr[(n / 8) as usize] |= 8 << ((n % 8) * 8);
    }
    ctx.vmcr = VMCR_EN | (0x1f << VMCR_VPMR_SHIFT);
    ctx
}

#[test]
fn vcpu_load_and_put_save_and_restore_ppi_state_with_no_shared_lock() {
    let mut r = rig();
    let plan = PpiPlan::for_vcpu(true, true);
    let imp = r.irs.host.ppis;
    let ctx = guest_ready_ctx();
    let before = r.ops[0].get();
    r.cpus[0].vcpu_load(&r.lock, &ctx, &plan, imp, ALL_INSNS, 1, 7);
    let load_ops = r.ops[0].get() - before;
    // The guest changes its state: CNTP priority, a software-pending
    // non-DVI... none visible; it disables its PMU interrupt.
    r.m.borrow_mut().enter_guest(0);
    let on = (1 << PPI_CNTV) | (1 << PPI_CNTP);
    let (_, trapped) = r.guest_ppi(0, reg::ICC_PPI_ENABLER0_EL1, Some(on), plan.visible);
    assert!(trapped, "the model implements PPIs this vCPU does not see");
    r.m.borrow_mut().exit_guest(0);
    let mut saved = VPpiContext::default();
    let before = r.ops[0].get();
    r.cpus[0].vcpu_put(&r.lock, &mut saved, &plan, false);
    let put_ops = r.ops[0].get() - before;
    let mut want = ctx;
    want.enabler[0] &= !(1 << PPI_PMU);
    assert_eq!(saved, want);
    // Load again: the state is back.
    r.cpus[0].vcpu_load(&r.lock, &saved, &plan, imp, ALL_INSNS, 1, 7);
    assert_eq!(
        r.m.borrow_mut()
            .read(0, El::El2, enc(reg::ICH_PPI_ENABLER0_EL2)),
        Access::Value(want.enabler[0])
    );
    assert_eq!(r.stat.total(), 0, "vCPU load/put took a shared lock");
    assert_eq!(r.stat.hot_total(), 0);
    // The numbers docs/PERFORMANCE.md quotes (system register accesses and
    // GIC instructions; each is one instruction).
    assert_eq!((load_ops, put_ops), (36, 28));
    r.no_misuse();
}

fn vctlr(r: &Rig, pe: usize) -> u64 {
    match r.m.borrow_mut().read(pe, El::El2, enc(reg::ICH_VCTLR_EL2)) {
        Access::Value(v) => v,
        a => panic!("{a:?}"),
    }
}

#[test]
fn a_gicv3_compatible_vcpu_has_ich_vctlr_v3_and_a_gicv5_one_after_it_does_not() {
    // The host has FEAT_GCIE_LEGACY (the model's default), as
    // `vgic5::choose_interface` requires for a `gicv3` partition.
    let mut r = rig();
    let plan = PpiPlan::for_vcpu(true, true);
    let imp = r.irs.host.ppis;

    r.cpus[0].load_gicv3_compatible();
    assert_eq!(vctlr(&r, 0), VCTLR_V3, "V3 set, En left to ICH_HCR_EL2");
    r.cpus[0].put_gicv3_compatible();
    assert_eq!(vctlr(&r, 0), 0);
    r.cpus[0].vcpu_load(&r.lock, &guest_ready_ctx(), &plan, imp, ALL_INSNS, 1, 7);

    assert_eq!(vctlr(&r, 0), VCTLR_EN, "a GICv5 vCPU: V3 = 0");
    r.no_misuse();
}

#[test]
fn the_gicv3_compatible_interface_without_gcie_legacy_is_misuse() {
    // What `choose_interface` refuses: V3 is RES0 without GCIE_LEGACY.
    let m: Shared = Rc::new(RefCell::new(Model::new(Config {
        gcie_legacy: false,
        ..Config::default()
    })));
    let (regs, _) = pe(&m, 0);
    let mut cpu = Gicv5Cpu::init_this_cpu(regs, 0, IPI_BASE, &CPUS, GICV5_CAPS);
    let mut host = HostGicv5::default();
    cpu.probe(&mut host);
    assert!(!host.gcie_legacy);
    // (The bring-up's IPI set-up without an IRS is not what this is about.)
    m.borrow_mut().take_misuse();
    cpu.load_gicv3_compatible();
    let misuse = m.borrow_mut().take_misuse();
    assert!(
        matches!(misuse[..], [Misuse::Res0Written { bits: 2, .. }]),
        "{misuse:?}"
    );
}

#[test]
fn a_guest_without_a_vm_traps_its_cdxx_but_acknowledges_untrapped() {
    let mut r = rig();
    let plan = PpiPlan::for_vcpu(true, true);
    let imp = r.irs.host.ppis;
    let insns = UntrappedInsns::for_vcpu(false);
    r.cpus[0].vcpu_load(&r.lock, &guest_ready_ctx(), &plan, imp, insns, 1, 7);
    r.m.borrow_mut().enter_guest(0);
    let cntv = operand(TYPE_PPI, PPI_CNTV);

    let cden = r.m.borrow_mut().sys(0, El::El1, enc(insn::GIC_CDEN), cntv);
    let cdia = r.m.borrow_mut().sysl(0, El::El1, MODEL_CDIA);
    let cdeoi = r.m.borrow_mut().sys(0, El::El1, enc(insn::GIC_CDEOI), 0);

    assert_eq!(cden, Access::Trapped);
    assert_eq!(cdia, Access::Value(0), "nothing pending, but not trapped");
    assert_eq!(cdeoi, Access::Value(0));
    r.no_misuse();
}

/// The driver's ICH_HFGITR_EL2 bit of each instruction against the
/// model's own table, through the instruction's encoding.
#[test]
fn hfgitr_bits_match_the_models() {
    use pinfold_gicv5model::{hfgitr_bit as model_bit, Insn};
    for (i, e) in [
        (GicInsn::Cden, insn::GIC_CDEN),
        (GicInsn::Cddis, insn::GIC_CDDIS),
        (GicInsn::Cdpri, insn::GIC_CDPRI),
        (GicInsn::Cdaff, insn::GIC_CDAFF),
        (GicInsn::Cdpend, insn::GIC_CDPEND),
        (GicInsn::Cdeoi, insn::GIC_CDEOI),
        (GicInsn::Cddi, insn::GIC_CDDI),
        (GicInsn::Cdhm, insn::GIC_CDHM),
    ] {
        let m = Insn::decode(enc(e)).expect("the model knows it");
        assert_eq!(model_bit(m), Some(hfgitr_bit(i)), "{i:?}");
    }
    assert_eq!(
        1 << hfgitr_bit(GicInsn::Cdia),
        pinfold_gicv5model::HFGITR_GICRCDIA
    );
    assert_eq!(hfgitr(UntrappedInsns::for_vcpu(true)), 0x7ff);
}

#[test]
fn a_chip_without_the_lockless_capability_shows_in_the_count() {
    let no_caps = IrqChipCaps {
        percpu_state_lockless: false,
    };
    let mut r = rig_with(no_caps);
    let plan = PpiPlan::for_vcpu(true, true);
    let imp = r.irs.host.ppis;
    r.cpus[0].vcpu_load(&r.lock, &guest_ready_ctx(), &plan, imp, ALL_INSNS, 1, 7);
    assert_eq!(r.stat.count(LockPath::VcpuLoad), 3);
    assert_eq!(r.stat.hot_total(), 3);
}

#[test]
fn dvi_timer_reaches_a_resident_vcpu_with_no_exit() {
    let mut r = rig();
    let plan = PpiPlan::for_vcpu(true, true);
    let imp = r.irs.host.ppis;
    // The host had the vtimer's physical copy enabled; load masks it.
    r.cpus[0].apply_ppi(PpiStateChange::Enable(PPI_CNTV, true));
    r.cpus[0].vcpu_load(&r.lock, &guest_ready_ctx(), &plan, imp, ALL_INSNS, 1, 7);
    assert!(!r.m.borrow().ppi(0, PPI_CNTV).enabled);
    r.m.borrow_mut().enter_guest(0);
    let exits = r.m.borrow().el2_irqs(0);
    let ops = r.ops[0].get();
    r.m.borrow_mut().set_ppi_line(0, PPI_CNTV, true);
    assert!(r.m.borrow().virq_signalled(0));
    assert_eq!(r.m.borrow().el2_irqs(0), exits, "the timer exited to EL2");
    // The guest's handler: acknowledge, drop, deactivate, in the virtual
    // domain.
    let ia = r.guest_cdia(0);
    assert_eq!(ia, CDIA_VALID | IntId::ppi(PPI_CNTV).raw());
    r.m.borrow_mut().set_ppi_line(0, PPI_CNTV, false); // CVAL moved on
    r.guest_sys(0, insn::GIC_CDEOI, 0);
    r.guest_sys(0, insn::GIC_CDDI, operand(TYPE_PPI, PPI_CNTV));
    assert!(
        !r.m.borrow().ppi(0, PPI_CNTV).active,
        "physical active kept"
    );
    assert!(!r.m.borrow().virq_signalled(0));
    // Nothing ran at EL2 for it.
    assert_eq!(r.ops[0].get(), ops);
    assert_eq!(r.m.borrow().el2_irqs(0), exits);
    assert_eq!(r.m.borrow().virqs_acked(0), 1);
    r.no_misuse();
}

#[test]
fn a_dvi_ppi_left_enabled_in_the_physical_domain_is_misuse() {
    // The model catches the driver forgetting to mask the host copy: this
    // is what `vcpu_load` prevents.
    let mut r = rig();
    let plan = PpiPlan::for_vcpu(true, false);
    let imp = r.irs.host.ppis;
    r.cpus[0].vcpu_load(&r.lock, &guest_ready_ctx(), &plan, imp, ALL_INSNS, 1, 7);
    r.cpus[0].apply_ppi(PpiStateChange::Enable(PPI_CNTV, true));
    r.m.borrow_mut().set_ppi_line(0, PPI_CNTV, true);
    assert!(r
        .m
        .borrow()
        .misuse()
        .contains(&Misuse::DviPhysicalEnabled(PPI_CNTV)));
}

#[test]
fn dvi_timer_of_a_non_resident_vcpu_is_kept_and_delivered_on_load() {
    let mut r = rig();
    let plan = PpiPlan::for_vcpu(true, false);
    let imp = r.irs.host.ppis;
    let mut ctx = guest_ready_ctx();
    r.cpus[0].vcpu_load(&r.lock, &ctx, &plan, imp, ALL_INSNS, 1, 7);
    r.cpus[0].vcpu_put(&r.lock, &mut ctx, &plan, false);
    // Fires while the vCPU is out: no host interrupt (copy masked), not
    // visible to anyone, but pending in the physical PPI.
    r.m.borrow_mut().set_ppi_line(0, PPI_CNTP, true);
    assert!(!r.m.borrow().irq_signalled(0));
    assert!(r.m.borrow().ppi(0, PPI_CNTP).pending_now());
    // Load: the pending state is the vCPU's again, delivered at once.
    r.cpus[0].vcpu_load(&r.lock, &ctx, &plan, imp, ALL_INSNS, 1, 7);
    r.m.borrow_mut().enter_guest(0);
    assert!(r.m.borrow().virq_signalled(0));
    assert_eq!(r.guest_cdia(0), CDIA_VALID | IntId::ppi(PPI_CNTP).raw());
    assert_eq!(r.stat.total(), 0);
    r.no_misuse();
}

#[test]
fn dvi_timer_wakes_a_blocked_vcpu_through_the_host_copy() {
    let mut r = rig();
    let plan = PpiPlan::for_vcpu(true, false);
    let imp = r.irs.host.ppis;
    let mut ctx = guest_ready_ctx();
    r.cpus[0].vcpu_load(&r.lock, &ctx, &plan, imp, ALL_INSNS, 1, 7);
    r.cpus[0].vcpu_put(&r.lock, &mut ctx, &plan, true);
    r.m.borrow_mut().set_ppi_line(0, PPI_CNTV, true);
    assert!(r.m.borrow().irq_signalled(0), "no wake-up");
    assert_eq!(r.cpus[0].ack(), PPI_CNTV);
    r.cpus[0].end_dvi_wakeup(PPI_CNTV);
    assert!(!r.m.borrow().irq_signalled(0));
    r.cpus[0].vcpu_load(&r.lock, &ctx, &plan, imp, ALL_INSNS, 1, 7);
    r.m.borrow_mut().enter_guest(0);
    assert_eq!(r.guest_cdia(0), CDIA_VALID | IntId::ppi(PPI_CNTV).raw());
    assert_eq!(r.stat.total(), 0);
    r.no_misuse();
}

/// HVIR's encoding is UNCONFIRMED and the hardware accessors drop it
/// (`hw_emits`): clear it in the model as hardware never has it set, so
/// only the traps hide.
fn as_on_hardware(r: &Rig, pe: usize) {
    for hvir in [reg::ICH_PPI_HVIR0_EL2, reg::ICH_PPI_HVIR1_EL2] {
        assert!(!hw_emits(hvir));
        let mut m = r.m.borrow_mut();
        assert_eq!(m.write(pe, El::El2, enc(hvir), 0), Access::Value(0));
    }
}

#[test]
fn hvir_hides_ppis_and_a_guest_write_to_a_hidden_ppi_does_nothing() {
    let mut r = rig();
    let plan = PpiPlan::for_vcpu(true, false);
    let vis = plan.visible;
    let imp = r.irs.host.ppis;
    r.cpus[0].vcpu_load(&r.lock, &guest_ready_ctx(), &plan, imp, ALL_INSNS, 1, 7);
    as_on_hardware(&r, 0);
    r.m.borrow_mut().enter_guest(0);
    // The guest reads only its timers (the PMU's enable bit from the
    // context is hidden: this partition has no PMU); the read traps.
    assert_eq!(
        r.guest_ppi(0, reg::ICC_PPI_ENABLER0_EL1, None, vis),
        ((1 << PPI_CNTV) | (1 << PPI_CNTP), true)
    );
    // The hypervisor's EL2 timer PPI (26), enabled in the vCPU's state,
    // reads as 0; the guest enabling it leaves it as it was, and disabling
    // everything disables only its own.
    let el2_enabler =
        |r: &Rig| match r
            .m
            .borrow_mut()
            .read(0, El::El2, enc(reg::ICH_PPI_ENABLER0_EL2))
        {
            Access::Value(v) => v,
            a => panic!("{a:?}"),
        };
    let on = el2_enabler(&r) | 1 << PPI_CNTHP;
    r.cpus[0].vppi_write(IchPpiReg::Enabler(0), on);
    assert_eq!(
        r.guest_ppi(0, reg::ICC_PPI_ENABLER0_EL1, None, vis).0 >> PPI_CNTHP & 1,
        0
    );
    r.guest_ppi(0, reg::ICC_PPI_ENABLER0_EL1, Some(0), vis);
    // (The context's PMU enable is hidden too, and kept.)
    assert_eq!(el2_enabler(&r), (1 << PPI_CNTHP) | (1 << PPI_PMU));
    r.cpus[0].vppi_write(IchPpiReg::Enabler(0), 0);
    let hidden = (1 << PPI_CNTHP) | (1 << PPI_PMU);
    r.guest_ppi(
        0,
        reg::ICC_PPI_ENABLER0_EL1,
        Some(hidden | 1 << PPI_CNTV),
        vis,
    );
    assert_eq!(
        el2_enabler(&r),
        1 << PPI_CNTV,
        "a hidden PPI stays disabled"
    );
    // A set-pending write to hidden PPIs: nothing pending, physical
    // CNTHP untouched; a visible (non-DVI: CNTV is DVI here, so its
    // pending state is the physical line's) pending bit unaffected.
    assert_eq!(
        r.guest_ppi(0, reg::ICC_PPI_SPENDR0_EL1, Some(hidden), vis),
        (0, true)
    );
    assert_eq!(
        r.guest_ppi(0, reg::ICC_PPI_SPENDR0_EL1, None, vis),
        (0, true)
    );
    // A visible DVI timer's pending state reads through the trap as the
    // physical line's; CNTHP's firing stays hidden.
    r.m.borrow_mut().set_ppi_line(0, PPI_CNTV, true);
    r.m.borrow_mut().set_ppi_line(0, PPI_CNTHP, true);
    assert_eq!(
        r.guest_ppi(0, reg::ICC_PPI_SPENDR0_EL1, None, vis),
        (1 << PPI_CNTV, true)
    );
    r.m.borrow_mut().set_ppi_line(0, PPI_CNTV, false);
    r.m.borrow_mut().set_ppi_line(0, PPI_CNTHP, false);
    // Priorities: the hidden PPIs' byte lanes RAZ and WI.
    let (prio, _) = r.guest_ppi(0, reg::ICC_PPI_PRIORITYR3_EL1, None, vis);
    assert_eq!(prio >> ((PPI_CNTHP % 8) * 8) & 0xff, 0);
    assert_eq!(prio >> ((PPI_CNTV % 8) * 8) & 0xff, 8);
    r.guest_ppi(0, reg::ICC_PPI_PRIORITYR3_EL1, Some(u64::MAX), vis);
    r.m.borrow_mut().exit_guest(0);
    let mut ctx = VPpiContext::default();
    r.cpus[0].vcpu_put(&r.lock, &mut ctx, &plan, false);
    assert_eq!(ctx.priorityr[3] >> ((PPI_CNTHP % 8) * 8) & 0xff, 0);
    assert_eq!(ctx.priorityr[3] >> ((PPI_CNTV % 8) * 8) & 0xff, 0x1f);
    assert_eq!(ctx.pendr[0] & hidden, 0);
    assert!(!r.m.borrow().ppi(0, PPI_CNTHP).enabled);
    assert!(!r.m.borrow().ppi(0, PPI_CNTHP).pending_now());
    assert_eq!(
        r.m.borrow().hidden_writes(),
        0,
        "no HVIR: the traps hid them"
    );
    // EL2's registers stay UNDEFINED to the guest.
    r.cpus[0].vcpu_load(&r.lock, &ctx, &plan, imp, ALL_INSNS, 1, 7);
    r.m.borrow_mut().enter_guest(0);
    assert_eq!(r.guest_read(0, reg::ICH_PPI_DVIR0_EL2), Access::Undefined);
    let misuse = r.m.borrow_mut().take_misuse();
    assert_eq!(misuse.len(), 1, "{misuse:?}");
    r.no_misuse();
}

#[test]
fn a_vcpu_with_nothing_hidden_sets_no_ppi_traps_and_its_accesses_do_not_trap() {
    let mut r = rig();
    let plan = PpiPlan::for_vcpu(true, true);
    // A CPU that implements only what this vCPU sees.
    let imp = PpiSet::of(&[PPI_CNTV, PPI_CNTP, PPI_PMU]);
    r.cpus[0].vcpu_load(&r.lock, &guest_ready_ctx(), &plan, imp, ALL_INSNS, 1, 7);
    let el2 = |r: &Rig, reg: u32| match r.m.borrow_mut().read(0, El::El2, enc(reg)) {
        Access::Value(v) => v,
        a => panic!("{a:?}"),
    };
    assert_eq!(el2(&r, reg::ICH_HFGRTR_EL2), HFGRTR_NO_TRAPS);
    assert_eq!(el2(&r, reg::ICH_HFGWTR_EL2), HFGWTR_NO_TRAPS);
    r.m.borrow_mut().enter_guest(0);
    let (v, trapped) = r.guest_ppi(0, reg::ICC_PPI_ENABLER0_EL1, None, plan.visible);
    assert!(!trapped);
    assert_eq!(v, (1 << PPI_CNTV) | (1 << PPI_CNTP) | (1 << PPI_PMU));
    let (_, trapped) = r.guest_ppi(
        0,
        reg::ICC_PPI_ENABLER0_EL1,
        Some(1 << PPI_CNTV),
        plan.visible,
    );
    assert!(!trapped);
    assert_eq!(el2(&r, reg::ICH_PPI_ENABLER0_EL2), 1 << PPI_CNTV);
    r.m.borrow_mut().exit_guest(0);
    // The model's own set (it implements CNTHP, hidden): all four PPI
    // classes trap, HMRn and the rest do not.
    r.cpus[0].vcpu_load(
        &r.lock,
        &guest_ready_ctx(),
        &plan,
        r.irs.host.ppis,
        ALL_INSNS,
        1,
        7,
    );
    assert_eq!(
        el2(&r, reg::ICH_HFGRTR_EL2),
        HFGRTR_NO_TRAPS & !HFG_PPI_TRAPS
    );
    assert_eq!(
        el2(&r, reg::ICH_HFGWTR_EL2),
        HFGWTR_NO_TRAPS & !HFG_PPI_TRAPS
    );
    r.m.borrow_mut().enter_guest(0);
    for reg in [
        reg::ICC_PPI_ENABLER1_EL1,
        reg::ICC_PPI_CPENDR0_EL1,
        reg::ICC_PPI_SACTIVER1_EL1,
        reg::ICC_PPI_PRIORITYR9_EL1,
    ] {
        assert_eq!(r.guest_read(0, reg), Access::Trapped);
    }
    assert!(matches!(
        r.guest_read(0, reg::ICC_IAFFIDR_EL1),
        Access::Value(_)
    ));
    r.no_misuse();
}

#[test]
fn a_ppi_below_16_is_ended_at_el2_not_reported_as_an_sgi() {
    let mut r = rig();
    r.cpus[0].regs().gic(insn::GIC_CDEN, operand(TYPE_PPI, 5));
    r.m.borrow_mut().set_ppi_line(0, 5, true);
    assert_eq!(r.cpus[0].ack(), 1023);
    assert!(!r.m.borrow().ppi(0, 5).active);
    assert_eq!(
        r.m.borrow_mut().read(0, El::El2, enc(reg::ICC_APR_EL1)),
        Access::Value(0)
    );
    r.no_misuse();
}

// ---- the vIRS: virtual SPIs and IPIs (the core's plan, applied here) -----

const VMT: u64 = 0x9000_0000;
static DB_ALPHA: [Doorbell; 2] = [
    Doorbell {
        lpi: 9000,
        mpidr: 0x8000_0000,
    },
    Doorbell {
        lpi: 9001,
        mpidr: 0x8000_0001,
    },
];
static DB_BETA: [Doorbell; 1] = [Doorbell {
    lpi: 9002,
    mpidr: 0x8000_0001,
}];
/// alpha owns SPI 5, beta SPI 6.
static SPIS_ALPHA: [u32; 1] = [32 + 5];
static SPIS_BETA: [u32; 1] = [32 + 6];

fn vm_tables(base: u64) -> VmTables {
    VmTables {
        vmd: base,
        vpet: base + 0x1000,
        vpeds: base + 0x2000,
        lpi_ist: base + 0x4000,
        spi_ist: base + 0x8000,
    }
}

/// alpha (VM 0, two vCPUs pinned to CPUs 0 and 1) and beta (VM 1, one
/// vCPU), planned by the core and applied by the driver.
fn vms() -> [VmSpec<'static>; 2] {
    [
        VmSpec {
            vm: 0,
            partition: "alpha",
            vcpus: 2,
            spis: &SPIS_ALPHA,
            lpi_id_bits: 8,
            spi_id_bits: 6,
            doorbells: &DB_ALPHA,
            tables: vm_tables(0xa000_0000),
        },
        VmSpec {
            vm: 1,
            partition: "beta",
            vcpus: 1,
            spis: &SPIS_BETA,
            lpi_id_bits: 8,
            spi_id_bits: 6,
            doorbells: &DB_BETA,
            tables: vm_tables(0xb000_0000),
        },
    ]
}

fn virs_rig() -> Rig {
    let mut r = rig();
    let caps = r.irs.init_virs(VMT, 4).expect("vIRS init");
    let ops = plan_virs(&caps, &vms()).expect("plan");
    r.irs
        .apply_virs(&mut ModelMem(r.m.clone()), &ops)
        .expect("apply");
    for c in &mut r.cpus {
        c.set_doorbells(9000..9003);
    }
    r.no_misuse();
    r
}

const VSPI5: u64 = (TYPE_SPI << 29) | 5;
const VLPI3: u64 = (TYPE_LPI << 29) | 3;

/// Load vCPU `vpe` of VM `vm` on `pe` with its interface on, and enter it.
fn load_guest(r: &mut Rig, pe: usize, vm: u16, vpe: u16) {
    let plan = PpiPlan::for_vcpu(true, false);
    let imp = r.irs.host.ppis;
    r.cpus[pe].vcpu_load(&r.lock, &guest_ready_ctx(), &plan, imp, ALL_INSNS, vpe, vm);
    r.m.borrow_mut().enter_guest(pe);
}

/// The guest on `pe` sets up a virtual interrupt at priority 8 targeted
/// at its vPE `to`, enabled, with its own GIC CDxx (no exit: nothing of
/// it traps).
fn guest_route(r: &Rig, pe: usize, int: u64, to: u16) {
    r.guest_sys(pe, insn::GIC_CDPRI, int | (8 << 35));
    r.guest_sys(pe, insn::GIC_CDAFF, int | (u64::from(to) << 32));
    r.guest_sys(pe, insn::GIC_CDEN, int);
}

#[test]
fn a_virtual_spi_reaches_a_resident_vpe_with_no_exit() {
    let mut r = virs_rig();
    load_guest(&mut r, 0, 0, 0);
    guest_route(&r, 0, VSPI5, 0);
    let el2 = r.m.borrow().el2_irqs(0);
    r.m.borrow_mut().set_spi_line(5, true);
    assert!(r.m.borrow().virq_signalled(0));
    assert_eq!(
        r.m.borrow().el2_irqs(0),
        el2,
        "no physical interrupt, no exit"
    );
    assert_eq!(r.guest_cdia(0), CDIA_VALID | VSPI5);
    r.guest_sys(0, insn::GIC_CDEOI, 0);
    r.m.borrow_mut().set_spi_line(5, false);
    r.guest_sys(0, insn::GIC_CDDI, VSPI5);
    assert!(!r.m.borrow().virq_signalled(0));
    r.no_misuse();
}

/// The emulated PL011's interrupt of a `gicv5` partition: the core's
/// VDPEND operand for alpha (VM 0), issued by the driver at EL2 on CPU 1
/// where beta (VM 1) is resident, reaches only alpha's vCPU 0 resident on
/// CPU 0: its guest's CDIA takes virtual SPI 1, with no physical interrupt
/// and no list register (the model has none: a write would be misuse).
#[test]
fn an_emulated_uarts_vdpend_reaches_its_own_vms_resident_vcpu_only() {
    use pinfold_hv::layout::GUEST_UART_INTID;
    use pinfold_hv::vgic5::vdpend_operand;
    const VSPI1: u64 = (TYPE_SPI << 29) | 1;
    let mut r = virs_rig();
    load_guest(&mut r, 0, 0, 0);
    guest_route(&r, 0, VSPI1, 0);
    load_guest(&mut r, 1, 1, 0);
    guest_route(&r, 1, VSPI1, 0);
    let el2 = [r.m.borrow().el2_irqs(0), r.m.borrow().el2_irqs(1)];
    r.m.borrow_mut().exit_guest(1);

    r.cpus[1].vdpend(vdpend_operand(0, GUEST_UART_INTID, true).unwrap());
    r.m.borrow_mut().enter_guest(1);

    assert!(r.m.borrow().virq_signalled(0), "alpha's vCPU 0");
    assert!(!r.m.borrow().virq_signalled(1), "not beta's");
    assert!(!r.m.borrow().vint(1, IntId::spi(1)).unwrap().pending_now());
    assert_eq!(r.guest_cdia(0), CDIA_VALID | VSPI1);
    assert_eq!(
        [r.m.borrow().el2_irqs(0), r.m.borrow().el2_irqs(1)],
        el2,
        "no physical interrupt"
    );
    r.guest_sys(0, insn::GIC_CDEOI, 0);
    r.guest_sys(0, insn::GIC_CDDI, VSPI1);
    // The line falls: the pending state is cleared, nothing more to take.
    r.m.borrow_mut().exit_guest(1);
    r.cpus[1].vdpend(vdpend_operand(0, GUEST_UART_INTID, true).unwrap());
    r.cpus[1].vdpend(vdpend_operand(0, GUEST_UART_INTID, false).unwrap());
    assert!(!r.m.borrow().virq_signalled(0));
    r.no_misuse();
}

#[test]
fn a_virtual_spi_for_a_non_resident_vpe_rings_its_doorbell_and_waits_for_the_load() {
    let mut r = virs_rig();
    // alpha's vCPU 0 routes SPI 5 to vCPU 1, which is not resident.
    load_guest(&mut r, 0, 0, 0);
    guest_route(&r, 0, VSPI5, 1);
    r.m.borrow_mut().set_spi_line(5, true);
    assert!(!r.m.borrow().virq_signalled(0), "not vCPU 0's");
    assert_eq!(r.m.borrow().doorbells(), 1);
    // The doorbell is a physical LPI at CPU 1, where vCPU 1 is pinned.
    assert!(r.m.borrow().irq_signalled(1));
    assert_eq!(r.cpus[1].ack(), 1023);
    let db = r.cpus[1].take_doorbell().expect("doorbell");
    // ... the one the plan armed for alpha's (VM 0's) vCPU 1.
    assert_eq!(vms()[0].doorbells[1].lpi, db);
    // Loading vCPU 1 delivers what was kept.
    load_guest(&mut r, 1, 0, 1);
    assert!(r.m.borrow().virq_signalled(1));
    assert_eq!(r.guest_cdia(1), CDIA_VALID | VSPI5);
    r.no_misuse();
}

#[test]
fn an_ipi_between_two_vcpus_of_a_partition_is_a_virtual_lpi_with_no_exit() {
    let mut r = virs_rig();
    load_guest(&mut r, 0, 0, 0);
    load_guest(&mut r, 1, 0, 1);
    guest_route(&r, 0, VLPI3, 1);
    let el2 = [r.m.borrow().el2_irqs(0), r.m.borrow().el2_irqs(1)];
    r.guest_sys(0, insn::GIC_CDPEND, VLPI3 | (1 << 32));
    assert!(r.m.borrow().virq_signalled(1));
    assert!(!r.m.borrow().virq_signalled(0));
    assert_eq!(
        [r.m.borrow().el2_irqs(0), r.m.borrow().el2_irqs(1)],
        el2,
        "neither side exits"
    );
    assert_eq!(r.guest_cdia(1), CDIA_VALID | VLPI3);
    r.no_misuse();
}

#[test]
fn a_hostile_guest_cannot_raise_another_partitions_interrupts_and_is_counted() {
    let mut r = virs_rig();
    // alpha's vCPU 0 on CPU 0 has its LPI 3 and SPI 5 enabled, idle.
    load_guest(&mut r, 0, 0, 0);
    guest_route(&r, 0, VLPI3, 0);
    guest_route(&r, 0, VSPI5, 0);
    // beta on CPU 1 tries to raise them: the same numbers reach only
    // beta's own VM (ICH_CONTEXTR_EL2.VM = 1 is what the hypervisor loaded).
    load_guest(&mut r, 1, 1, 0);
    r.guest_sys(1, insn::GIC_CDPEND, VLPI3 | (1 << 32));
    r.guest_sys(1, insn::GIC_CDPEND, VSPI5 | (1 << 32));
    // ... and names a vPE and an SPI its VM does not have.
    r.guest_sys(1, insn::GIC_CDAFF, VLPI3 | (1 << 32));
    r.guest_sys(1, insn::GIC_CDPEND, (TYPE_SPI << 29) | 100 | (1 << 32));
    {
        let m = r.m.borrow();
        assert!(!m.vint(0, IntId::lpi(3)).unwrap().latch);
        assert!(!m.vint(0, IntId::spi(5)).unwrap().latch);
        assert!(!m.virq_signalled(0), "alpha saw nothing");
    }
    // The two refusals are beta's faults.
    let v = vms();
    let mut who = Vec::new();
    while let Some(s) = r.irs.take_swerr() {
        assert!(VirsFault::from_syndrome(s).is_some(), "a guest's record");
        match attribute_swerr(s, |i| i < v.len()) {
            SwerrOwner::Partition { index, .. } => who.push(v[index].partition),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(who, ["beta", "beta"]);
    r.no_misuse();
}

#[test]
fn a_doorbell_rings_once_until_the_put_rearms_it() {
    let mut r = virs_rig();
    load_guest(&mut r, 0, 0, 0);
    guest_route(&r, 0, VSPI5, 1);
    // First interrupt for the non-resident vCPU 1: the doorbell rings.
    r.m.borrow_mut().set_spi_line(5, true);
    assert_eq!(r.cpus[1].ack(), 1023);
    assert_eq!(r.cpus[1].take_doorbell(), Some(9001));
    // vCPU 1 runs, takes and ends it, and is put again.
    load_guest(&mut r, 1, 0, 1);
    assert_eq!(r.guest_cdia(1), CDIA_VALID | VSPI5);
    r.guest_sys(1, insn::GIC_CDEOI, 0);
    r.m.borrow_mut().set_spi_line(5, false);
    r.guest_sys(1, insn::GIC_CDDI, VSPI5);
    r.m.borrow_mut().exit_guest(1);
    let mut ctx = guest_ready_ctx();
    r.cpus[1].vcpu_put(&r.lock, &mut ctx, &PpiPlan::for_vcpu(true, false), false);
    // The next interrupt finds the doorbell spent: nothing reaches CPU 1 ...
    r.m.borrow_mut().set_spi_line(5, true);
    assert_eq!(r.m.borrow().doorbells(), 1);
    assert!(!r.m.borrow().irq_signalled(1));
    // ... until the put re-arms it, which rings for what is already pending.
    r.irs.rearm_doorbell(0, 1, 9001).expect("rearm");
    assert_eq!(r.m.borrow().doorbells(), 2);
    assert_eq!(r.cpus[1].ack(), 1023);
    assert_eq!(r.cpus[1].take_doorbell(), Some(9001));
    r.no_misuse();
}

/// The ICH_* encodings the driver uses, each against its line in Linux's
/// arch/arm64/tools/sysreg (KVM GICv5 series v4, patch 04/36, and the
/// ICH_VCTLR_EL2 patch): `Sysreg NAME op0 op1 CRn CRm op2`.
#[test]
fn encodings_match_linux_sysreg() {
    type Fields = (u8, u8, u8, u8, u8);
    let table: &[(u32, Fields)] = &[
        (reg::ICH_APR_EL2, (3, 4, 12, 8, 4)),
        (reg::ICH_HFGRTR_EL2, (3, 4, 12, 9, 4)),
        (reg::ICH_HFGWTR_EL2, (3, 4, 12, 9, 6)),
        (reg::ICH_HFGITR_EL2, (3, 4, 12, 9, 7)),
        (reg::ICH_PPI_DVIR0_EL2, (3, 4, 12, 10, 0)),
        (reg::ICH_PPI_DVIR1_EL2, (3, 4, 12, 10, 1)),
        (reg::ICH_PPI_ENABLER0_EL2, (3, 4, 12, 10, 2)),
        (reg::ICH_PPI_ENABLER1_EL2, (3, 4, 12, 10, 3)),
        (reg::ICH_PPI_PENDR0_EL2, (3, 4, 12, 10, 4)),
        (reg::ICH_PPI_PENDR1_EL2, (3, 4, 12, 10, 5)),
        (reg::ICH_PPI_ACTIVER0_EL2, (3, 4, 12, 10, 6)),
        (reg::ICH_PPI_ACTIVER1_EL2, (3, 4, 12, 10, 7)),
        (reg::ICH_VCTLR_EL2, (3, 4, 12, 11, 4)),
        (reg::ICH_CONTEXTR_EL2, (3, 4, 12, 11, 6)),
        (reg::ICH_VMCR_EL2, (3, 4, 12, 11, 7)),
        (reg::ICH_PPI_PRIORITYR0_EL2, (3, 4, 12, 14, 0)),
        (reg::ICH_PPI_PRIORITYR7_EL2, (3, 4, 12, 14, 7)),
        (reg::ICH_PPI_PRIORITYR8_EL2, (3, 4, 12, 15, 0)),
        (reg::ICH_PPI_PRIORITYR15_EL2, (3, 4, 12, 15, 7)),
    ];
    for (e, want) in table {
        assert_eq!(fields(*e), *want, "{:#x}", e);
        // The model decodes the same encoding as the same register: a
        // driver/model disagreement shows as an Undefined access here.
        assert_ne!(
            Model::new(Config::default()).read(0, El::El2, enc(*e)),
            Access::Undefined,
            "{:?}",
            want
        );
    }
    for (i, p) in ICH_PPI_PRIORITYR.iter().enumerate() {
        assert_eq!(fields(*p), (3, 4, 12, 14 + i as u8 / 8, i as u8 % 8));
    }
}

/// Each GIC instruction as the 32-bit `sys` word binutils' GCIE
/// assembler test (`gas/testsuite/gas/aarch64`, `-march=armv8-a+gcie`)
/// disassembles, with Rt = x0 (GSB with Rt = xzr): a second, independent
/// reading beside Linux's `arch_gicv5.h` and FreeBSD's header, and one the
/// model (which decodes our own packing) cannot give. GICR CDIA is left
/// out: that test lists it as `d508c300` (SYS, L = 0), while Linux issues
/// it as a read (`read_sysreg_s`, SYSL, `d528c300`) as `hw` does.
#[test]
fn insn_words_match_binutils_gcie_test() {
    let sys = |enc: u32, rt: u32| 0xd500_0000 | enc | rt;
    let table: &[(u32, u32, u32)] = &[
        (insn::GIC_CDAFF, 0, 0xd508_c160),
        (insn::GIC_CDDI, 0, 0xd508_c200),
        (insn::GIC_CDDIS, 0, 0xd508_c100),
        (insn::GIC_CDEN, 0, 0xd508_c120),
        (insn::GIC_CDEOI, 0, 0xd508_c1e0),
        (insn::GIC_CDHM, 0, 0xd508_c220),
        (insn::GIC_CDPEND, 0, 0xd508_c180),
        (insn::GIC_CDPRI, 0, 0xd508_c140),
        (insn::GIC_VDAFF, 0, 0xd50c_c160),
        (insn::GIC_VDDI, 0, 0xd50c_c200),
        (insn::GIC_VDDIS, 0, 0xd50c_c100),
        (insn::GIC_VDEN, 0, 0xd50c_c120),
        (insn::GIC_VDHM, 0, 0xd50c_c220),
        (insn::GIC_VDPEND, 0, 0xd50c_c180),
        (insn::GIC_VDPRI, 0, 0xd50c_c140),
        (insn::GIC_VDRCFG, 0, 0xd50c_c1a0),
        (insn::GSB_SYS, 31, 0xd508_c01f),
        (insn::GSB_ACK, 31, 0xd508_c03f),
    ];
    for &(e, rt, word) in table {
        assert_eq!(sys(e, rt), word, "{:?}", fields(e));
    }
    // GICR CDIA as Linux's SYSL word (L = 1, bit 21).
    assert_eq!(sys(insn::GICR_CDIA, 0) | 1 << 21, 0xd528_c300);
}

/// The guessed ICH_PPI_HVIR encodings (GICv3's ICH_MISR/EISR_EL2) are
/// never executed on hardware; every sourced one is.
#[test]
fn hw_never_emits_unconfirmed_encodings() {
    assert!(!hw_emits(reg::ICH_PPI_HVIR0_EL2));
    assert!(!hw_emits(reg::ICH_PPI_HVIR1_EL2));
    for e in reg::ALL {
        if *e != reg::ICH_PPI_HVIR0_EL2 && *e != reg::ICH_PPI_HVIR1_EL2 {
            assert!(hw_emits(*e), "{:#x}", e);
        }
    }
}

/// The sequence the platform applies at boot (`platform/src/gicv5.rs`
/// `init_virs`): the VM table, the core's `plan_boot_virs` for the GICv5
/// partitions, its ops. Partitions 0 and 3 are GICv5 (1 and 2 are not), so
/// their VMs are 0 and 3; partition 3 owns SPI 6.
#[test]
fn the_boot_virs_sequence_makes_each_partitions_index_its_vm_on_the_irs() {
    use pinfold_hv::vgic5::{plan_boot_virs, IrsLayout, VirsMember};
    let mut r = rig();
    let layout = IrsLayout::for_cpus(4);
    let caps = r.irs.init_virs(VMT, layout.vm_id_bits).expect("vIRS");
    let members = [
        VirsMember {
            index: 0,
            name: "mgmt".into(),
            cpus: std::vec![(0, CPUS[0].0)],
            spis: std::vec![],
        },
        VirsMember {
            index: 3,
            name: "alpha".into(),
            cpus: std::vec![(1, CPUS[1].0)],
            spis: std::vec![(32 + 6, "devices")],
        },
    ];
    let mut next = 0xc000_0000u64;
    let boot = plan_boot_virs(&members, &layout, &caps, &mut |bytes, align| {
        let at = next.next_multiple_of(align);
        next = at + bytes;
        Some(at)
    })
    .expect("planned");

    r.irs
        .apply_virs(&mut ModelMem(r.m.clone()), &boot.ops)
        .expect("applied");

    assert!(r.m.borrow().vpe_valid(0, 0) && r.m.borrow().vpe_valid(3, 0));
    assert!(
        !r.m.borrow().vpe_valid(1, 0),
        "no VM for a partition without GICv5"
    );
    // alpha's SPI 6 reaches its vCPU, resident on CPU 1 as vPE 0 of VM 3.
    load_guest(&mut r, 1, 3, 0);
    let vspi6 = (TYPE_SPI << 29) | 6;
    guest_route(&r, 1, vspi6, 0);
    r.m.borrow_mut().set_spi_line(6, true);
    assert_eq!(r.guest_cdia(1), CDIA_VALID | vspi6);
    // Its doorbell is CPU 1's.
    assert!(boot.ops.contains(&VirsOp::ArmDoorbell {
        vm: 3,
        vpe: 0,
        db: Doorbell {
            lpi: layout.doorbell_base + 1,
            mpidr: CPUS[1].0
        }
    }));
    r.no_misuse();
}

#[test]
fn a_released_vm_no_longer_holds_its_spi_which_reaches_the_host_again() {
    use pinfold_hv::vgic5::{plan_boot_virs, release_virs, IrsLayout, VirsMember};
    let mut r = rig();
    let layout = IrsLayout::for_cpus(4);
    let caps = r.irs.init_virs(VMT, layout.vm_id_bits).expect("vIRS");
    let members = [VirsMember {
        index: 3,
        name: "alpha".into(),
        cpus: std::vec![(1, CPUS[1].0)],
        spis: std::vec![(32 + 6, "devices")],
    }];
    let mut next = 0xc000_0000u64;
    let boot = plan_boot_virs(&members, &layout, &caps, &mut |bytes, align| {
        let at = next.next_multiple_of(align);
        next = at + bytes;
        Some(at)
    })
    .expect("planned");
    r.irs
        .apply_virs(&mut ModelMem(r.m.clone()), &boot.ops)
        .expect("applied");
    assert!(r.m.borrow().vpe_valid(3, 0));

    r.irs
        .apply_virs(&mut ModelMem(r.m.clone()), &release_virs(3, &[32 + 6]))
        .expect("released");

    assert!(!r.m.borrow().vpe_valid(3, 0), "VM 3 unmapped");
    // Its VM table entry (32 bytes each) is no longer VALID.
    assert_eq!(r.m.borrow().mem_read64(VMT + 3 * 32) & 1, 0);
    // A gicv3 partition given SPI 6 now: routed to its CPU 0, physical.
    let spi = 32 + 6;
    r.irs.spi_set_edge(spi, false);
    r.irs.spi_route(spi, CPUS[0].0);
    r.irs.spi_enable(spi, true);
    r.m.borrow_mut().set_spi_line(6, true);
    assert!(r.m.borrow().irq_signalled(0));
    assert_eq!(r.cpus[0].ack(), spi);
    r.no_misuse();
}

// ---- several IRSes ------------------------------------------------------

/// Four CPUs on two sockets: CPUs 0 and 1 (IAFFIDs 0, 1) on IRS 0, CPUs 2
/// and 3 (IAFFIDs 2, 3) on IRS 1.
static CPUS4: [(u64, u16); 4] = [
    (0x8000_0000, 0),
    (0x8000_0001, 1),
    (0x8001_0000, 2),
    (0x8001_0001, 3),
];

/// A GIC instruction the boot CPU issued for an LPI: (instruction, Xt).
type LpiCmds = Rc<RefCell<Vec<(u32, u64)>>>;

/// The boot CPU's GIC instructions as the hardware routes them: one
/// naming an SPI to the IRS whose range holds it, GSB to every IRS. One
/// naming an LPI is recorded: the LPI space is the system's and the
/// models do not talk to each other (docs/GICV5.md).
struct Fabric {
    irses: [Shared; 2],
    lpis: LpiCmds,
}

impl CpuRegs for Fabric {
    fn read(&mut self, reg: u32) -> u64 {
        panic!("the IRS read system register {reg:#x}")
    }
    fn write(&mut self, reg: u32, _value: u64) {
        panic!("the IRS wrote system register {reg:#x}")
    }
    fn gic(&mut self, op: u32, xt: u64) {
        if op == insn::GSB_SYS || op == insn::GSB_ACK {
            for m in &self.irses {
                assert_eq!(
                    m.borrow_mut().sys(0, El::El2, enc(op), xt),
                    Access::Value(0)
                );
            }
            return;
        }
        let id = (xt & 0xff_ffff) as u32;
        match (xt >> 29) & 7 {
            TYPE_SPI => {
                let m = self
                    .irses
                    .iter()
                    .find(|m| m.borrow().config().has_spi(id))
                    .expect("an SPI some IRS has");
                assert_eq!(
                    m.borrow_mut().sys(0, El::El2, enc(op), xt),
                    Access::Value(0)
                );
            }
            _ => self.lpis.borrow_mut().push((op, xt)),
        }
    }
    fn cdia(&mut self) -> u64 {
        panic!("the IRS acknowledged")
    }
}

struct TwoIrses {
    models: [Shared; 2],
    irses: Vec<Gicv5Irs<ModelIrs, Fabric>>,
    lpis: LpiCmds,
    routes: pinfold_hv::vgic5::irses::IrsRoutes,
}

impl TwoIrses {
    fn no_misuse(&self) {
        for m in &self.models {
            assert_eq!(m.borrow().misuse(), &[] as &[Misuse]);
        }
    }
    /// IRS `irs`'s IRS_SPI_VMR for SPI `spi` (selected first).
    fn spi_vmr(&self, irs: usize, spi: u32) -> u64 {
        let mut m = self.models[irs].borrow_mut();
        m.irs_write(irs::SPI_SELR as u64, u64::from(spi));
        m.irs_read(irs::SPI_VMR as u64)
    }
}

/// Two IRSes of a system of 64 SPIs: IRS 0 with SPIs 0..32, the LPI IST
/// and CPUs 0 and 1; IRS 1 with SPIs 32..64 and CPUs 2 and 3. Each
/// brought up as the platform does (only IRS 0 given the IST), the
/// core's routes made from their SPI ranges.
fn two_irses() -> TwoIrses {
    use pinfold_hv::vgic5::irses::{IrsRoutes, IrsServes};
    let model = |spi_base, first_iaffid| -> Shared {
        Rc::new(RefCell::new(Model::new(Config {
            spis: 32,
            spi_base,
            system_spis: Some(64),
            first_iaffid,
            ..Config::default()
        })))
    };
    let models = [model(0, 0), model(32, 2)];
    let lpis: LpiCmds = Rc::default();
    let mut irses = Vec::new();
    for (i, m) in models.iter().enumerate() {
        let fabric = Fabric {
            irses: models.clone(),
            lpis: lpis.clone(),
        };
        let ist = (i == IrsRoutes::IST_OWNER).then_some((0x8000_0000, 14));
        irses.push(Gicv5Irs::init(ModelIrs(m.clone()), fabric, &CPUS4, ist).expect("IRS init"));
    }
    let routes = IrsRoutes {
        irses: std::vec![
            IrsServes {
                cpus: std::vec![0, 1],
                spis: irses[0].spi_range(),
            },
            IrsServes {
                cpus: std::vec![2, 3],
                spis: irses[1].spi_range(),
            },
        ],
    };
    TwoIrses {
        models,
        irses,
        lpis,
        routes,
    }
}

#[test]
fn two_irses_come_up_each_with_its_spi_range_and_only_the_first_holds_the_ist() {
    let t = two_irses();

    let ist = t
        .models
        .each_ref()
        .map(|m| m.borrow_mut().irs_read(irs::IST_BASER as u64) & irs::IST_BASER_VALID);
    let irsen = t
        .models
        .each_ref()
        .map(|m| m.borrow_mut().irs_read(irs::CR0 as u64) as u32 & irs::CR0_IRSEN);

    assert_eq!(ist, [1, 0], "the LPI IST on IRS 0 only");
    assert_eq!(irsen, [1, 1]);
    assert_eq!(t.routes.irses[0].spis, 0..32);
    assert_eq!(t.routes.irses[1].spis, 32..64);
    t.no_misuse();
}

#[test]
fn each_cpus_pe_is_set_up_on_the_irs_that_serves_it() {
    let mut t = two_irses();

    for (cpu, &(_, iaffid)) in CPUS4.iter().enumerate() {
        let irs = t.routes.of_cpu(cpu).expect("served");
        t.irses[irs].register_pe(iaffid).expect("its IRS's PE");
    }

    let dps = |irs: usize| {
        (0..4)
            .map(|i| t.models[irs].borrow().pe_dps(i))
            .collect::<Vec<_>>()
    };
    assert_eq!(dps(0), [true, true, false, false]);
    assert_eq!(dps(1), [false, false, true, true]);
    assert_eq!(t.irses[0].register_pe(2), Err(IrsError::PeNotValid(2)));
    t.no_misuse();
}

#[test]
fn an_spis_trigger_and_route_reach_the_irs_whose_range_holds_it_and_never_the_other() {
    let mut t = two_irses();
    // SPI 40 (IRS 1) level, at CPU 2; SPI 5 (IRS 0) level, at CPU 1.

    for (intid, mpidr) in [(32 + 40, CPUS4[2].0), (32 + 5, CPUS4[1].0)] {
        let irs = t.routes.of_intid(intid).expect("an IRS has it");
        t.irses[irs].spi_set_edge(intid, false);
        t.irses[irs].spi_route(intid, mpidr);
        t.irses[irs].spi_enable(intid, true);
    }

    let s40 = t.models[1].borrow().spi(40);
    let s5 = t.models[0].borrow().spi(5);
    assert!(s40.level && s40.enabled && s40.iaffid == 2, "{s40:?}");
    assert!(s5.level && s5.enabled && s5.iaffid == 1, "{s5:?}");
    let selected = t
        .models
        .each_ref()
        .map(|m| m.borrow_mut().irs_read(irs::SPI_SELR as u64));
    assert_eq!(selected, [5, 40], "IRS 0 never selected SPI 40");
    t.no_misuse();
}

/// alpha (VM 0): vCPU 0 on CPU 1 (IRS 0), vCPU 1 on CPU 2 (IRS 1); SPIs
/// 5 (IRS 0) and 40 (IRS 1), planned by the core, split by its routes,
/// each IRS given its own VM table and its share.
fn alpha_on_two_irses(t: &mut TwoIrses) -> &'static [u32] {
    static DB: [Doorbell; 2] = [
        Doorbell {
            lpi: 9001,
            mpidr: 0x8000_0001,
        },
        Doorbell {
            lpi: 9002,
            mpidr: 0x8001_0000,
        },
    ];
    static SPIS: [u32; 2] = [32 + 5, 32 + 40];
    let spec = VmSpec {
        vm: 0,
        partition: "alpha",
        vcpus: 2,
        spis: &SPIS,
        lpi_id_bits: 8,
        spi_id_bits: 6,
        doorbells: &DB,
        tables: vm_tables(0xa000_0000),
    };
    let mut caps = Vec::new();
    for (irs, vmt) in t.irses.iter_mut().zip([VMT, VMT + 0x1000]) {
        caps.push(irs.init_virs(vmt, 4).expect("vIRS init"));
    }
    let ops = plan_virs(&caps[0], &[spec]).expect("plan");
    let split = t
        .routes
        .split_virs(&ops, alpha_cpu_of)
        .expect("every step has an IRS");
    for (i, ops) in split.iter().enumerate() {
        t.irses[i]
            .apply_virs(&mut ModelMem(t.models[i].clone()), ops)
            .expect("apply");
    }
    &SPIS
}

fn alpha_cpu_of(_vm: u16, vpe: u16) -> Option<usize> {
    [1, 2].get(usize::from(vpe)).copied()
}

#[test]
fn the_virs_on_two_irses_puts_each_vpe_on_its_cpus_irs_and_each_spi_on_its_own() {
    let mut t = two_irses();

    let spis = alpha_on_two_irses(&mut t);

    let vpes = |irs: usize| [0, 1].map(|v| t.models[irs].borrow().vpe_valid(0, v));
    assert_eq!(vpes(0), [true, false]);
    assert_eq!(vpes(1), [false, true]);
    assert_eq!(t.spi_vmr(0, 5), irs::SPI_VMR_VIRT);
    assert_eq!(t.spi_vmr(1, 40), irs::SPI_VMR_VIRT);
    let cdaff: Vec<u64> = t
        .lpis
        .borrow()
        .iter()
        .filter(|&&(op, _)| op == insn::GIC_CDAFF)
        .map(|&(_, xt)| xt)
        .collect();
    assert_eq!(
        cdaff,
        [
            operand(TYPE_LPI, 9001) | (1 << 32),
            operand(TYPE_LPI, 9002) | (2 << 32)
        ],
        "each doorbell at its vCPU's CPU"
    );
    t.no_misuse();

    // The destroy: each SPI released on its IRS, the VM unmapped on both.
    let release = pinfold_hv::vgic5::release_virs(0, spis);
    let split = t.routes.split_virs(&release, alpha_cpu_of).expect("routed");
    for (i, ops) in split.iter().enumerate() {
        t.irses[i]
            .apply_virs(&mut ModelMem(t.models[i].clone()), ops)
            .expect("release");
    }
    assert_eq!((t.spi_vmr(0, 5), t.spi_vmr(1, 40)), (0, 0));
    assert_eq!((vpes(0), vpes(1)), ([false; 2], [false; 2]));
    t.no_misuse();
}

#[test]
fn software_errors_are_taken_from_the_irs_that_recorded_them() {
    let mut t = two_irses();
    alpha_on_two_irses(&mut t);
    // alpha's vCPU 1, resident on CPU 2 (IRS 1's PE 0), names vPE 5,
    // which VM 0 does not have.
    {
        let mut m = t.models[1].borrow_mut();
        for (r, v) in [
            (reg::ICH_HFGITR_EL2, 0x7ff),
            (reg::ICH_VCTLR_EL2, VCTLR_EN),
            (reg::ICH_CONTEXTR_EL2, CONTEXTR_V | (1 << 32)),
        ] {
            assert_eq!(m.write(0, El::El2, enc(r), v), Access::Value(0));
        }
        m.enter_guest(0);
        m.sys(0, El::El1, enc(insn::GIC_CDAFF), VLPI3 | (5 << 32));
    }

    let taken: Vec<_> = t.irses.iter_mut().map(|i| i.take_swerr()).collect();

    assert_eq!(taken[0], None);
    let fault = taken[1].and_then(VirsFault::from_syndrome);
    assert_eq!(fault.map(|f| f.vm), Some(0), "{taken:x?}");
}
