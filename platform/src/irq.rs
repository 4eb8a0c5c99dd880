//! Interrupts at EL2, the platform half: the root handler the vectors reach
//! through a call site patched at boot (runtime constant), which
//! acknowledges each interrupt and hands it to the core
//! (`pinfold_hv::exit::dispatch_irq`), and host UART input for the monitor.
//! Two drivers' handlers are built in and boot patches the call sites to
//! the host's (`gichost::HostGic`): the GICv3's ([`pinfold_gic_root_irq`],
//! unchanged) or the GICv5's ([`pinfold_gicv5_root_irq`]: GICR CDIA
//! through the driver's `ack`, which already gives the core's GICv3-style
//! numbers, `vgic5::CoreIntid`; GIC CDEOI; GIC CDDI; IPIs are LPIs the
//! driver reports as SGIs 0..15). On a GICv5 host the synchronous guest
//! entry's call site is patched too (`vcpu::pinfold_guest_sync_v5`).

use crate::arch;
use crate::hvlog;
use crate::hw::V5Hw;
use crate::percpu::{this_cpu, CpuLocal};
use pinfold_hv::exit::{self, Hw, Monitor};
use pinfold_hv::gichost::HostGic;
use pinfold_hv::irqchip::PerCpuIrqChip;
use pinfold_hv::percpu::CpuState;
use pinfold_hv::rtconst;
use pinfold_hv::system::System;
use pinfold_vboard::fid;

/// The GIC driver's root IRQ handler, in two entry points, one per call
/// site: [`pinfold_gic_root_irq`] for an interrupt taken while the
/// hypervisor idles, [`pinfold_gic_root_irq_guest`] for one taken from a
/// guest, which then also applies what requests say (a stop parks the vCPU).
/// Each acknowledges and dispatches one interrupt. EOImode = 1:
/// priority drop here, deactivation explicit, except for HW-linked
/// interrupts, which the guest deactivates.
#[no_mangle]
pub extern "C" fn pinfold_gic_root_irq() {
    // SAFETY: an exception entry (IRQ), interrupts masked.
    let local = unsafe { this_cpu() };
    root_loop(local);
}

#[no_mangle]
pub extern "C" fn pinfold_gic_root_irq_guest() {
    // SAFETY: an exception entry (IRQ from the guest), interrupts masked.
    let local = unsafe { this_cpu() };
    root_loop(local);
    crate::vcpu::after_guest_irq(local);
}

/// One interrupt per exception: if another is pending, the CPU takes the
/// IRQ exception again as soon as this one returns (physical interrupts
/// stay routed to EL2), so the hardware does the looping and the common
/// case, a single timer or mailbox interrupt, reads ICC_IAR1_EL1 once and
/// carries no loop state.
#[inline(always)]
fn root_loop(local: &mut CpuLocal) {
    let intid = local.hw.ack();
    // 1020..1023: special (spurious); LPIs (8192 and up) are taken.
    if (1020..pinfold_hv::vgic::pits::LPI_BASE).contains(&intid) {
        return;
    }
    local.hw.priority_drop(intid);
    // SGIs and PPIs (the timers, the mailbox kick) are never the UART.
    if intid >= 32 && intid == local.uart_intid {
        host_input(local.sys, &mut local.state.state, &mut local.hw);
        local.hw.deactivate(intid);
        return;
    }
    exit::dispatch_irq(local.sys, &mut local.state, &mut local.hw, intid);
}

/// The GICv5 driver's root IRQ handler, idle and guest entry points as
/// for the GICv3. EOImode is GICv5's only one: CDEOI drops the priority,
/// CDDI deactivates; HW-linked (DVI) PPIs never reach it while their vCPU
/// is resident.
#[no_mangle]
pub extern "C" fn pinfold_gicv5_root_irq() {
    // SAFETY: an exception entry (IRQ), interrupts masked.
    let local = unsafe { this_cpu() };
    root_loop_v5(local);
}

#[no_mangle]
pub extern "C" fn pinfold_gicv5_root_irq_guest() {
    // SAFETY: an exception entry (IRQ from the guest), interrupts masked.
    let local = unsafe { this_cpu() };
    root_loop_v5(local);
    crate::vcpu::after_guest_irq(local);
}

/// One interrupt per exception, as [`root_loop`]. The driver's `ack`
/// answers 1023 for what the core has no number for, and for a vPE
/// doorbell, which it has already ended and kept (`take_doorbell`): the
/// core decides what it means for the vCPU pinned to that doorbell's CPU
/// (`exit::doorbell`: re-armed when its vCPU is to be entered, left while
/// it is off).
#[inline(always)]
fn root_loop_v5(local: &mut CpuLocal) {
    let mut hw = V5Hw(&mut local.hw);
    let intid = hw.ack();
    if intid >= 1020 {
        let lpi = hw.0.v5.as_mut().and_then(|c| c.take_doorbell());
        if let Some(cpu) = lpi.and_then(crate::gicv5::doorbell_cpu) {
            exit::doorbell(local.sys, &local.state, &mut hw, cpu);
        }
        return;
    }
    hw.priority_drop(intid);
    if intid >= 32 && intid == local.uart_intid {
        host_input(local.sys, &mut local.state.state, &mut hw);
        hw.deactivate(intid);
        return;
    }
    exit::dispatch_irq(local.sys, &mut local.state, &mut hw, intid);
}

/// Host UART receive interrupt: every byte to the core's monitor. Out of
/// line: the root handler's loop stays small for the timer and mailbox.
/// Either GIC's root handler hands it its own view of the hardware.
#[inline(never)]
fn host_input(sys: &System, state: &mut CpuState, hw: &mut impl Hw) {
    let Some(uart) = crate::log::uart() else {
        return;
    };
    while let Some(byte) = uart.getc() {
        if exit::host_input(sys, state, hw, byte) == Monitor::PowerOff {
            arch::firmware_smc(u64::from(fid::SYSTEM_OFF), 0, 0, 0);
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

/// Patch both IRQ call sites to call the host GIC driver's root handler
/// (and, on a GICv5 host, the synchronous guest entry's call to its GICv5
/// entry), and print what the sites now decode to.
pub fn install_root_handler(gic: HostGic) {
    let veneer = arch::irq_veneer_address();
    let (guest, hv) = match gic {
        HostGic::V3 => (
            pinfold_gic_root_irq_guest as *const () as usize as u64,
            pinfold_gic_root_irq as *const () as usize as u64,
        ),
        HostGic::V5 => (
            pinfold_gicv5_root_irq_guest as *const () as usize as u64,
            pinfold_gicv5_root_irq as *const () as usize as u64,
        ),
    };
    let mut sites = alloc::vec![
        (
            "guest",
            core::ptr::addr_of!(arch::pinfold_irq_site_guest),
            guest,
        ),
        ("hv", core::ptr::addr_of!(arch::pinfold_irq_site_hv), hv),
    ];
    if gic == HostGic::V5 {
        sites.push((
            "sync",
            core::ptr::addr_of!(arch::pinfold_sync_site_guest),
            crate::vcpu::pinfold_guest_sync_v5 as *const () as usize as u64,
        ));
    }
    for (name, site, target) in sites {
        // The sync site shares no veneer with the IRQ sites: its target is
        // in the image, always in BL range.
        if name == "sync" {
            match rtconst::call_site(site as u64, target, veneer) {
                Some(patch) if patch.veneer.is_none() => arch::patch_call_site(site, &patch),
                _ => {
                    hvlog!("sync call site: {target:#x} out of BL range; halting");
                    loop {
                        core::hint::spin_loop();
                    }
                }
            }
            let (word, _) = arch::read_call_site(site);
            hvlog!(
                "sync call site @{:#x}: {word:08x} -> {target:#x}",
                site as u64
            );
            continue;
        }
        let Some(patch) = rtconst::call_site(site as u64, target, veneer) else {
            hvlog!("irq call site {name}: root handler {target:#x} unreachable; halting");
            loop {
                core::hint::spin_loop();
            }
        };
        arch::patch_call_site(site, &patch);
        let (word, veneer_words) = arch::read_call_site(site);
        let decoded = rtconst::decode_call_site(site as u64, word, veneer, &veneer_words);
        hvlog!(
            "irq call site {name} @{:#x}: {word:08x}{} -> {:#x} (root handler {:#x}{})",
            site as u64,
            if patch.veneer.is_some() {
                " via veneer"
            } else {
                ""
            },
            decoded.unwrap_or(0),
            target,
            if decoded == Some(target) {
                ", ok"
            } else {
                ", MISMATCH"
            }
        );
    }
}
