//! Pinfold's EL2 image: boot, per-CPU bring-up, and the wiring between the
//! hardware (arch, drivers) and the portable core (`pinfold-hv`).
#![no_std]
#![no_main]

extern crate alloc;

mod arch;
mod console;
mod heap;
mod irq;
mod log;
mod manage;
mod partition;
mod percpu;
mod vcpu;

use alloc::vec::Vec;
use core::sync::atomic::Ordering;
use percpu::VcpuId;
use pinfold_config::{Plan, PAYLOAD_HEADER_LEN};
use pinfold_drivers::gicv3::{sysreg as gic, GicV3Dist, GicV3Redist};
use pinfold_drivers::pl011::Pl011Uart;
use pinfold_hv::dtb::{parse_host_dtb, Conduit, HostInfo};
use pinfold_hv::layout::PPI_MAINTENANCE;
use pinfold_hv::lockstat::LockStat;

pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Cross-CPU lock acquisitions on the hot paths (must stay 0).
pub static LOCKSTAT: LockStat = LockStat::new();

static HOST: spin::Once<HostInfo> = spin::Once::new();
/// The physical distributor is one device shared by all CPUs; it is only
/// reprogrammed at boot and when a guest (re)configures a pass-through SPI,
/// never on the load/put, timer or local injection paths.
static GICD: spin::Once<spin::Mutex<GicV3Dist>> = spin::Once::new();
static ASSIGN: spin::Once<[Option<VcpuId>; arch::MAX_CPUS]> = spin::Once::new();

pub fn gicd(f: impl FnOnce(&mut GicV3Dist)) {
    if let Some(d) = GICD.get() {
        f(&mut d.lock());
    }
}

static BOOT_COUNTER: core::sync::atomic::AtomicU64 = core::sync::atomic::AtomicU64::new(0);

/// The host description (set once at boot, before any CPU runs a vCPU).
pub fn host() -> &'static HostInfo {
    match HOST.get() {
        Some(h) => h,
        None => halt(),
    }
}

/// CNTPCT_EL0 when the hypervisor started.
pub fn boot_counter() -> u64 {
    BOOT_COUNTER.load(Ordering::Relaxed)
}

pub fn host_uart_intid() -> Option<u32> {
    HOST.get()
        .and_then(|h| h.uart.as_ref())
        .and_then(|u| u.intid)
}

/// The vCPU pinned to CPU `cpu`, per the plan.
pub fn assigned_vcpu(cpu: usize) -> Option<VcpuId> {
    ASSIGN.get().and_then(|a| a.get(cpu).copied().flatten())
}

/// Set up this CPU's GIC redistributor and CPU interface.
fn init_cpu_gic(cpu: &mut percpu::CpuLocal, host: &HostInfo) {
    // SAFETY: the regions come from the host DTB and are mapped as device
    // memory by the EL2 identity map.
    let base =
        unsafe { GicV3Redist::find(&host.gic.redist_regions, host.gic.redist_stride, cpu.mpidr) };
    let Some(base) = base else {
        hvlog!("no GIC redistributor for MPIDR {:#x}", cpu.mpidr);
        return;
    };
    // SAFETY: `base` is this CPU's own redistributor and only this CPU
    // will ever use it.
    let mut redist = unsafe { GicV3Redist::new(base) };
    redist.init();
    gic::init_cpu_interface();
    redist.set_enable(irq::SGI_MAILBOX, true);
    redist.set_enable(PPI_MAINTENANCE, true);
    cpu.redist = Some(redist);
}

#[no_mangle]
extern "C" fn pinfold_primary_main(dtb: u64) -> ! {
    BOOT_COUNTER.store(arch::counter(), Ordering::Relaxed);
    heap::init();
    // SAFETY: firmware passed the DTB address in x0; its header holds the
    // total size (big endian at offset 4).
    let dtb_size = u32::from_be(unsafe { ((dtb + 4) as *const u32).read_volatile() }) as u64;
    // SAFETY: the DTB is firmware-provided memory that nothing writes.
    let blob = unsafe { core::slice::from_raw_parts(dtb as *const u8, dtb_size as usize) };
    let host = match parse_host_dtb(blob) {
        Ok(h) => h,
        Err(_) => halt(),
    };
    if let Some(u) = &host.uart {
        // SAFETY: the UART's base comes from the DTB's stdout-path.
        log::init(unsafe { Pl011Uart::new(u.base as usize) });
    }
    hvprint!(
        "Pinfold v{} at EL2: {} CPUs, {} MiB RAM, GICv{}",
        VERSION,
        host.cpus.len(),
        host.memory.iter().map(|m| m.1).sum::<u64>() >> 20,
        host.gic.version
    );
    arch::mmu::build(&host.memory);
    arch::mmu::enable();
    arch::regs::set_vbar_el2(vectors_address());
    let me = arch::mpidr();
    let index = host
        .cpus
        .iter()
        .position(|&m| m & 0xff_00ff_ffff == me & 0xff_00ff_ffff)
        .unwrap_or(0);
    percpu::init_this_cpu(index, me);
    if let Some(seed) = &host.rng_seed {
        partition::add_entropy(seed);
    }

    // SAFETY: the distributor frame comes from the DTB and is mapped as
    // device memory; this is its only user.
    let mut dist = unsafe { GicV3Dist::new(host.gic.dist.0 as usize) };
    dist.init();
    GICD.call_once(|| spin::Mutex::new(dist));
    init_cpu_gic(percpu::this_cpu(), &host);
    irq::install_root_handler();

    let (image_start, payload_start) = arch::image_bounds();
    // SAFETY: the image header's image_size (offset 16) was patched by the
    // xtask to the whole file, payload included.
    let image_size = unsafe { ((image_start + 16) as *const u64).read_volatile() };
    let payload_len = (image_start + image_size).saturating_sub(payload_start);
    // SAFETY: the payload was loaded with the image and is never written.
    let payload: &'static [u8] =
        unsafe { core::slice::from_raw_parts(payload_start as *const u8, payload_len as usize) };
    let plan = match Plan::decode(payload) {
        Ok(plan) => plan,
        Err(e) => {
            hvprint!(
                "no usable partition plan in the image ({:?}, {} bytes at {:#x}): halting",
                e,
                payload_len,
                payload_start
            );
            halt();
        }
    };
    let _ = PAYLOAD_HEADER_LEN;

    let mut used: Vec<(u64, u64)> = Vec::new();
    used.push((image_start, image_size.max(payload_start - image_start)));
    used.push((dtb, dtb_size));
    used.extend_from_slice(&host.reserved);
    let mut free = pinfold_hv::memmap::FreeMemory::new(&host.memory, &used);

    let mut assign = [None; arch::MAX_CPUS];
    for (pi, pp) in plan.partitions.iter().enumerate() {
        for (vi, &c) in pp.cpus.iter().enumerate() {
            if let Some(slot) = assign.get_mut(c as usize) {
                *slot = Some(VcpuId {
                    partition: pi,
                    vcpu: vi,
                });
            }
        }
    }
    ASSIGN.call_once(|| assign);
    partition::create_all(plan, payload, &host, &mut free);

    // Host UART input, routed to this CPU.
    if let Some(intid) = host.uart.as_ref().and_then(|u| u.intid) {
        gicd(|d| {
            d.route(intid, me);
            d.enable(intid, true);
        });
        if let Some(u) = log::uart() {
            u.enable_rx_interrupt();
        }
    }

    let host = HOST.call_once(|| host);
    match host.psci.as_ref().map(|p| p.conduit) {
        Some(Conduit::Smc) => {
            for (i, &mpidr) in host.cpus.iter().enumerate().take(arch::MAX_CPUS) {
                if i == index {
                    continue;
                }
                let r = arch::firmware_smc(
                    0xc400_0003,
                    mpidr,
                    arch::secondary_entry_address(),
                    i as u64,
                );
                if r != 0 {
                    hvlog!("CPU {i} (MPIDR {mpidr:#x}) did not start: PSCI {r}");
                }
            }
        }
        _ => hvlog!("no PSCI SMC conduit: running on the boot CPU only"),
    }

    if partition::all().iter().any(|p| p.plan.management) {
        hvprint!("management token: {}", partition::management_token());
    }
    for p in partition::all() {
        if p.plan.autostart {
            vcpu::start_partition(p);
        }
    }
    hvprint!("ready: {} partitions", partition::all().len());
    let _ = Ordering::Relaxed;
    arch::reset_stack_and_call(index, vcpu::idle)
}

#[no_mangle]
extern "C" fn pinfold_secondary_main(index: u64) -> ! {
    arch::mmu::enable();
    arch::regs::set_vbar_el2(vectors_address());
    let index = index as usize;
    percpu::init_this_cpu(index, arch::mpidr());
    if let Some(host) = HOST.get() {
        init_cpu_gic(percpu::this_cpu(), host);
    }
    hvlog!("online");
    arch::reset_stack_and_call(index, vcpu::idle)
}

fn vectors_address() -> u64 {
    extern "C" {
        static pinfold_vectors: u8;
    }
    core::ptr::addr_of!(pinfold_vectors) as u64
}

/// A fault in the hypervisor itself: report and stop this CPU.
#[no_mangle]
extern "C" fn pinfold_hv_fault(frame: &arch::GuestFrame) {
    hvlog!(
        "HYPERVISOR FAULT: ESR_EL2 {:#x} FAR_EL2 {:#x} ELR_EL2 {:#x} lr {:#x}",
        arch::regs::esr_el2(),
        arch::regs::far_el2(),
        frame.elr,
        frame.x[30]
    );
    halt();
}

fn halt() -> ! {
    loop {
        core::hint::spin_loop();
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    hvlog!("PANIC: {}", info);
    halt()
}
