//! Interrupts at EL2: the root handler that the vectors reach through a
//! call site patched at boot (runtime constant), the per-CPU mailbox other
//! CPUs post virtual interrupts and requests to, and local injection into
//! the list registers (own CPU only, no lock).

use crate::arch;
use crate::hvlog;
use crate::partition::{self, Partition};
use crate::percpu::{this_cpu, CpuLocal, PUBLIC};
use core::sync::atomic::Ordering;
use pinfold_drivers::gicv3::sysreg as gic;
use pinfold_hv::layout::*;
use pinfold_hv::mailbox::{Mailbox, MailboxOp};
use pinfold_hv::rtconst;
use pinfold_hv::vgic::dist::DistAction;
use pinfold_hv::vgic::lr::{ListRegisters, VirtIrq};

/// The SGI other CPUs send after posting to this CPU's mailbox.
pub const SGI_MAILBOX: u32 = 8;

/// The real list registers of this CPU.
pub struct HwLrs;

impl ListRegisters for HwLrs {
    fn lr_count(&self) -> usize {
        gic::lr_count()
    }
    fn read_lr(&self, n: usize) -> u64 {
        gic::read_lr(n)
    }
    fn write_lr(&mut self, n: usize, value: u64) {
        gic::write_lr(n, value)
    }
    fn empty_lr_mask(&self) -> u16 {
        gic::ich_elrsr_el2() as u16
    }
    fn set_underflow_irq(&mut self, enable: bool) {
        let hcr = gic::ich_hcr_el2();
        gic::set_ich_hcr_el2(if enable { hcr | 2 } else { hcr & !2 });
    }
}

/// Inject into the vCPU running on this CPU. Own list registers only: no
/// lock shared between CPUs.
pub fn inject_local(cpu: &mut CpuLocal, irq: VirtIrq) {
    if !cpu.loaded {
        return;
    }
    PUBLIC[cpu.index].injected.fetch_add(1, Ordering::Relaxed);
    if cpu.lrs.inject(&mut HwLrs, irq).is_err() {
        if let Some(p) = cpu.vcpu.and_then(|id| partition::get(id.partition)) {
            hvlog!(
                "partition {}: interrupt {} dropped (queue full)",
                p.name,
                irq.intid
            );
        }
    }
}

const MAILBOX_SLOTS: usize = 32;

/// Each CPU's mailbox (lock-free multi-producer slots, see hv::mailbox).
static MAILBOX: [Mailbox<MAILBOX_SLOTS>; arch::MAX_CPUS] =
    [const { Mailbox::new() }; arch::MAX_CPUS];

/// Post an operation to CPU `pcpu`'s vCPU and kick it with an SGI.
pub fn post_remote(pcpu: usize, op: MailboxOp) {
    let Some(mailbox) = MAILBOX.get(pcpu) else {
        return;
    };
    let mut posted = false;
    for _ in 0..1000 {
        if mailbox.post(op) {
            posted = true;
            break;
        }
        core::hint::spin_loop();
    }
    if !posted {
        hvlog!("mailbox of CPU {pcpu} full: operation dropped");
    }
    kick(pcpu);
}

/// Post request bits (REQ_*) to CPU `pcpu` and kick it.
pub fn post_request(pcpu: usize, bits: u32) {
    PUBLIC[pcpu].post_request(bits);
    kick(pcpu);
}

fn kick(pcpu: usize) {
    if crate::percpu::current_index() == Some(pcpu) {
        // Our own CPU: the request is seen on the way out of this trap or
        // by the idle loop; an SGI to self would do the same, slower.
        return;
    }
    gic::send_sgi(PUBLIC[pcpu].mpidr.load(Ordering::Relaxed), SGI_MAILBOX);
}

/// Empty this CPU's mailbox (vCPU load after a stop).
pub fn drain_posts(cpu: usize) {
    MAILBOX[cpu].clear();
}

fn handle_mailbox(cpu: &mut CpuLocal) {
    let index = cpu.index;
    MAILBOX[index].drain(|op| match op {
        MailboxOp::Inject(irq) => inject_local(cpu, irq),
        MailboxOp::Retract(intid) => cpu.lrs.retract(&mut HwLrs, intid),
        MailboxOp::Sgi(intid) => {
            if let Some(irq) = cpu.vredist.as_mut().and_then(|r| r.raise_sgi(intid)) {
                inject_local(cpu, irq);
            }
        }
    });
}

/// Distributor actions collected under the partition's distributor lock and
/// delivered after it is released.
pub struct Post {
    ops: [Option<(usize, MailboxOp)>; 16],
    count: usize,
}

impl Post {
    pub fn new() -> Self {
        Post {
            ops: [None; 16],
            count: 0,
        }
    }

    fn push(&mut self, vcpu: usize, op: MailboxOp) {
        if self.count < self.ops.len() {
            self.ops[self.count] = Some((vcpu, op));
            self.count += 1;
        }
    }

    pub fn dist_action(&mut self, p: &Partition, act: DistAction) {
        match act {
            DistAction::Inject { vcpu, irq } => self.push(vcpu, MailboxOp::Inject(irq)),
            DistAction::Retract { vcpu, intid } => self.push(vcpu, MailboxOp::Retract(intid)),
            DistAction::PhysSpiEnable { intid, enable } => crate::gicd(|d| d.enable(intid, enable)),
            DistAction::PhysSpiRoute { intid, vcpu } => {
                if let Some(s) = p.vcpus.get(vcpu) {
                    let mpidr = PUBLIC[s.pcpu].mpidr.load(Ordering::Relaxed);
                    crate::gicd(|d| d.route(intid, mpidr));
                }
            }
            DistAction::PhysSpiPending { .. } | DistAction::PhysSpiActive { .. } => {
                // Pending/active of a pass-through SPI stay with the
                // hardware; the guest's view is the list register's.
            }
            DistAction::Refused { intid, what } => {
                p.faults.fetch_add(1, Ordering::Relaxed);
                hvlog!(
                    "partition {}: {} SPI {} it does not own: ignored",
                    p.name,
                    what,
                    intid
                );
            }
        }
    }

    /// Deliver: locally into our list registers, otherwise through the
    /// target CPU's mailbox.
    pub fn deliver(self, cpu: &mut CpuLocal, p: &Partition) {
        for (vcpu, op) in self.ops.iter().take(self.count).flatten() {
            let Some(s) = p.vcpus.get(*vcpu) else {
                continue;
            };
            if s.pcpu == cpu.index && cpu.vcpu.map(|id| id.partition) == Some(p.index) {
                match *op {
                    MailboxOp::Inject(irq) => inject_local(cpu, irq),
                    MailboxOp::Retract(intid) => cpu.lrs.retract(&mut HwLrs, intid),
                    MailboxOp::Sgi(_) => {}
                }
            } else {
                post_remote(s.pcpu, *op);
            }
        }
    }
}

/// The GIC driver's root IRQ handler. The vectors reach it through the
/// patched call sites; it acknowledges and dispatches until nothing is
/// pending. EOImode = 1: priority drop here, deactivation explicit, except
/// for HW-linked interrupts, which the guest deactivates.
#[no_mangle]
pub extern "C" fn pinfold_gic_root_irq() {
    let cpu = this_cpu();
    loop {
        let intid = gic::ack();
        if intid >= 1020 {
            break;
        }
        gic::priority_drop(intid);
        match intid {
            SGI_MAILBOX => {
                gic::deactivate(intid);
                handle_mailbox(cpu);
            }
            PPI_MAINTENANCE => {
                gic::deactivate(intid);
                maintenance(cpu);
            }
            PPI_VTIMER | PPI_PTIMER => timer_ppi(cpu, intid),
            _ if Some(intid) == crate::host_uart_intid() => {
                crate::console::host_input(cpu);
                gic::deactivate(intid);
            }
            _ if partition::spi_owner(intid).is_some() => passthrough_spi(cpu, intid),
            _ => {
                gic::deactivate(intid);
                hvlog!("unexpected interrupt {intid}");
            }
        }
    }
}

fn maintenance(cpu: &mut CpuLocal) {
    let mut eoied = [0u32; 8];
    let mut n = 0;
    cpu.lrs.maintenance(&mut HwLrs, &mut |intid| {
        if n < eoied.len() {
            eoied[n] = intid;
            n += 1;
        }
    });
    if n == 0 {
        return;
    }
    let Some(p) = cpu.vcpu.and_then(|id| partition::get(id.partition)) else {
        return;
    };
    let mut posts = Post::new();
    {
        let mut dist = p.dist.lock();
        for &intid in &eoied[..n] {
            dist.on_eoi(intid, &mut |act| posts.dist_action(p, act));
        }
    }
    posts.deliver(cpu, p);
}

/// A timer PPI of this CPU fired: forward it HW-linked to the vCPU, which
/// deactivates the physical interrupt when it deactivates the virtual one.
fn timer_ppi(cpu: &mut CpuLocal, intid: u32) {
    let irq = if cpu.loaded {
        cpu.vredist.as_ref().and_then(|r| r.hw_ppi_fired(intid))
    } else {
        None
    };
    match irq {
        Some(irq) => inject_local(cpu, irq),
        None => {
            // No vCPU wants it: silence it on our own redistributor.
            if let Some(r) = cpu.redist.as_mut() {
                r.set_enable(intid, false);
            }
            gic::deactivate(intid);
        }
    }
}

/// A physical SPI owned by a partition: forward it HW-linked (vINTID ==
/// pINTID) so the guest's deactivation reaches the device's line.
fn passthrough_spi(cpu: &mut CpuLocal, intid: u32) {
    let Some(p) = partition::spi_owner(intid) else {
        return;
    };
    let target = p.dist.lock().passthrough_fired(intid);
    match target {
        Some((vcpu, irq)) => match p.vcpus.get(vcpu) {
            Some(s) if s.pcpu == cpu.index && cpu.loaded => inject_local(cpu, irq),
            Some(s) => post_remote(s.pcpu, MailboxOp::Inject(irq)),
            None => gic::deactivate(intid),
        },
        None => {
            // The guest has it disabled (or the partition is down): mask it
            // and let the line be re-sampled when the guest enables it.
            crate::gicd(|d| d.enable(intid, false));
            gic::deactivate(intid);
        }
    }
}

/// Until the boot CPU patches the call sites, the vectors call this.
#[no_mangle]
extern "C" fn pinfold_default_irq_handler() {
    hvlog!("interrupt before the root IRQ handler was installed: halting this CPU");
    loop {
        core::hint::spin_loop();
    }
}

/// Patch both IRQ call sites to call the GIC driver's root handler, and
/// print what the sites now decode to.
pub fn install_root_handler() {
    let target = pinfold_gic_root_irq as *const () as usize as u64;
    let sites = [
        ("guest", core::ptr::addr_of!(arch::pinfold_irq_site_guest)),
        ("hv", core::ptr::addr_of!(arch::pinfold_irq_site_hv)),
    ];
    for (name, site) in sites {
        let words = rtconst::call_site(site as u64, target);
        arch::patch_call_site(site, &words);
        let now = arch::read_call_site(site);
        let decoded = rtconst::decode_call_site(site as u64, &now);
        hvlog!(
            "irq call site {name} @{:#x}: {:08x} {:08x} {:08x} {:08x} {:08x} -> {:#x} (root handler {:#x}{})",
            site as u64,
            now[0],
            now[1],
            now[2],
            now[3],
            now[4],
            decoded.unwrap_or(0),
            target,
            if decoded == Some(target) { ", ok" } else { ", MISMATCH" }
        );
    }
}
