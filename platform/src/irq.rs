//! Interrupts at EL2, the platform half: the root handler the vectors reach
//! through a call site patched at boot (runtime constant), which
//! acknowledges each interrupt and hands it to the core
//! (`pinfold_hv::exit::dispatch_irq`), and host UART input for the monitor.

use crate::arch;
use crate::hvlog;
use crate::percpu::{this_cpu, CpuLocal};
use pinfold_hv::exit::{self, Monitor};
use pinfold_hv::irqchip::PerCpuIrqChip;
use pinfold_hv::rtconst;
use pinfold_vboard::fid;

/// The GIC driver's root IRQ handler. The vectors reach it through the
/// patched call sites; it acknowledges and dispatches until nothing is
/// pending. EOImode = 1: priority drop here, deactivation explicit, except
/// for HW-linked interrupts, which the guest deactivates.
#[no_mangle]
pub extern "C" fn pinfold_gic_root_irq() {
    // SAFETY: an exception entry (IRQ), interrupts masked.
    let local = unsafe { this_cpu() };
    let Some(sys) = crate::SYSTEM.get() else {
        return;
    };
    let uart = sys.host.uart.as_ref().and_then(|u| u.intid);
    loop {
        let intid = local.hw.ack();
        if intid >= 1020 {
            break;
        }
        local.hw.priority_drop(intid);
        if Some(intid) == uart {
            host_input(local);
            local.hw.deactivate(intid);
            continue;
        }
        exit::dispatch_irq(sys, &mut local.state, &mut local.hw, intid);
    }
}

/// Host UART receive interrupt: every byte to the core's monitor.
fn host_input(local: &mut CpuLocal) {
    let Some(uart) = crate::log::uart() else {
        return;
    };
    let sys = crate::system();
    while let Some(byte) = uart.getc() {
        if exit::host_input(sys, &mut local.state, &mut local.hw, byte) == Monitor::PowerOff {
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
