//! Pinfold's EL2 image: boot and per-CPU bring-up, wiring the hardware
//! (arch, drivers) to the portable core (`pinfold-hv`). Two ways in end in
//! `boot(BootHandoff)`: the arm64 Image entry here (`-kernel`, `booti`)
//! and the UEFI application (`efi`). The core's
//! `System`, built once here, holds every partition and the ownership
//! tables; the platform reads registers, hands decoded exits and interrupts
//! to the core and applies what it returns.
#![no_std]
#![no_main]
// Under this ablation the call-site patching (irq::install_root_handler and
// its arch helpers) is left unused: the vectors load a function pointer.
#![cfg_attr(feature = "ablate-irq-fnptr", allow(dead_code))]

extern crate alloc;

/// The core's `Hw` for this CPU on a cold path: `PlatformHw` on a GICv3
/// host, `hw::V5Hw` over it on a GICv5 host (whose CPU has `hw.v5`).
macro_rules! with_hw {
    ($local:expr, |$hw:ident| $body:expr) => {
        if $local.hw.v5.is_some() {
            let $hw = &mut crate::hw::V5Hw(&mut $local.hw);
            $body
        } else {
            let $hw = &mut $local.hw;
            $body
        }
    };
}

mod ablate;
mod arch;
mod efi;
mod gicv5;
mod heap;
mod hw;
mod irq;
mod its;
mod log;
mod percpu;
mod v41;
mod vcpu;

use aarch64_cpu::registers::{Writeable, HCR_EL2, VBAR_EL2};
use alloc::boxed::Box;
use alloc::vec::Vec;
use pinfold_config::Plan;
use pinfold_drivers::gicv3::{self, GicV3Cpu};
use pinfold_drivers::pl011::Pl011Uart;
use pinfold_hv::boot::{select_payload, PlanSource};
use pinfold_hv::dtb::{early_uart, host_resources, parse_host_dtb, Conduit, HostInfo};
use pinfold_hv::exit::{SpiOp, SGI_MAILBOX};
use pinfold_hv::gichost::HostGic;
use pinfold_hv::irqchip::PpiStateChange;
use pinfold_hv::lockstat::{CountedLock, LockPath, LockStat};
use pinfold_hv::memmap;
use pinfold_hv::percpu::MAX_CPUS;
use pinfold_hv::system::{BootInputs, System};
use pinfold_vboard::{fid, same_cpu, PPI_HYP_TIMER, PPI_MAINTENANCE};
// Linked for its memcpy/memset, which replace compiler_builtins' weak ones.
use pinfold_mem as _;

pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The public key boot bundles must be signed with: the xtask writes it
/// after the marker when it assembles the image (tools/xtask/src/image.rs
/// `enrol_key`). All zeros: no key enrolled, so only the appended payload
/// can boot.
#[used]
#[link_section = ".rodata.bundle_key"]
static BUNDLE_KEY: [u8; 48] =
    *b"PINFOLD-BNDLKEY:\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0\0";

fn bundle_key() -> [u8; 32] {
    // SAFETY: a static; read volatile so the compiler cannot assume the
    // zeros it was compiled with (the xtask rewrites them in the file).
    let slot = unsafe { core::ptr::read_volatile(&BUNDLE_KEY) };
    let mut key = [0u8; 32];
    key.copy_from_slice(&slot[16..]);
    key
}

/// Acquisitions of every lock more than one CPU can take, by path.
pub static LOCKSTAT: LockStat = LockStat::new();

/// The running system, built once by the boot CPU before any other CPU
/// starts.
pub static SYSTEM: spin::Once<System> = spin::Once::new();

pub fn system() -> &'static System {
    match SYSTEM.get() {
        Some(s) => s,
        None => halt(),
    }
}

/// Set up this CPU's GIC redistributor and CPU interface (GICv3), or its
/// GICv5 half.
fn init_cpu_gic(local: &mut percpu::CpuLocal, host: &HostInfo) {
    if host.gic.v5.is_some() {
        gicv5::init_cpu(local);
        return;
    }
    // SAFETY: the regions come from the host description and are mapped as
    // device memory; this CPU initialises its own redistributor once.
    let chip = unsafe {
        GicV3Cpu::init_this_cpu(
            &host.gic.redist_regions,
            host.gic.redist_stride,
            local.state.state.mpidr,
            ablate::GIC_CPU_CAPS,
        )
    };
    let Some(mut chip) = chip else {
        hvlog!(
            "no GIC redistributor for MPIDR {:#x}",
            local.state.state.mpidr
        );
        return;
    };
    use pinfold_hv::irqchip::PerCpuIrqChip;
    chip.apply_ppi(PpiStateChange::Enable(SGI_MAILBOX, true));
    chip.apply_ppi(PpiStateChange::Enable(PPI_MAINTENANCE, true));
    // The EL2 timer wakes the idle loop for a scheduled restart.
    chip.apply_ppi(PpiStateChange::Enable(PPI_HYP_TIMER, true));
    local.hw.chip = Some(chip);
}

/// What a way in hands the common boot (`boot`): the Image path
/// (`pinfold_primary_main`, QEMU `-kernel`, U-Boot `booti`) fills `dtb`
/// alone; the UEFI path (`efi`) fills what firmware told it. The heap is
/// set up before this exists (it holds it).
pub struct BootHandoff {
    /// The host DTB: x0 of the Image entry, or the DT configuration table.
    pub dtb: Option<u64>,
    /// The ACPI 2.0 RSDP from the EFI configuration table, for the ACPI
    /// host description when no DT describes the machine (`host_from_acpi`).
    pub rsdp: Option<u64>,
    /// The boot bundle the boot loader or firmware handed over, (address,
    /// length), 8-byte aligned, in memory nothing else uses. None: the
    /// payload appended to the image.
    pub bundle: Option<(u64, u64)>,
    /// RAM and reserved ranges from the EFI memory map, replacing the DTB's
    /// /memory and adding to its reserved regions. None: the DTB's.
    pub memory: Option<pinfold_hv::efi::EfiMemory>,
    /// CNTPCT_EL0 when the image was entered.
    pub boot_counter: u64,
    /// GetTime's reading before ExitBootServices and CNTPCT_EL0 right
    /// after it. None: not booted from UEFI, or GetTime failed.
    pub efi_time: Option<(pinfold_hv::clock::EfiTime, u64)>,
    /// 32 bytes of EFI_RNG_PROTOCOL read before ExitBootServices.
    pub efi_rng: Option<[u8; 32]>,
}

#[no_mangle]
extern "C" fn pinfold_primary_main(dtb: u64) -> ! {
    let boot_counter = arch::counter();
    let (image_start, payload_start) = arch::image_bounds();
    // SAFETY: the image header's image_size (offset 16) was patched by the
    // xtask to the whole file, payload included, plus the heap.
    let image_size = unsafe { ((image_start + 16) as *const u64).read_volatile() };
    // No console is known before the heap exists (the DTB parse allocates):
    // an image the xtask did not assemble stops here silently.
    let Some(layout) = memmap::image_layout(image_start, payload_start, image_size) else {
        halt()
    };
    // SAFETY: the heap is the tail of the memory the image header claims,
    // which the loader kept free and nothing else in the image uses.
    unsafe { heap::init(layout.heap.0, layout.heap.1) };
    boot(BootHandoff {
        dtb: Some(dtb),
        rsdp: None,
        bundle: None,
        memory: None,
        boot_counter,
        efi_time: None,
        efi_rng: None,
    })
}

/// The boot every way in ends in, with the heap set up: host description,
/// console, MMU, plan, partitions, secondary CPUs.
fn boot(handoff: BootHandoff) -> ! {
    let boot_counter = handoff.boot_counter;
    let (image_start, payload_start) = arch::image_bounds();
    // SAFETY: as in pinfold_primary_main (the UEFI path read it too).
    let image_size = unsafe { ((image_start + 16) as *const u64).read_volatile() };
    let Some(layout) = memmap::image_layout(image_start, payload_start, image_size) else {
        halt()
    };
    // The DTB, when there is one: x0 of the Image entry, or the UEFI
    // configuration table.
    let dtb: Option<(u64, &'static [u8])> = handoff.dtb.map(|dtb| {
        // SAFETY: firmware passed the DTB address; its header holds the
        // total size (big endian at offset 4).
        let size = u32::from_be(unsafe { ((dtb + 4) as *const u32).read_volatile() });
        // SAFETY: the DTB is firmware-provided memory that nothing writes.
        (dtb, unsafe {
            core::slice::from_raw_parts(dtb as *const u8, size as usize)
        })
    });
    // ACPI when firmware published it and no DT describes the machine (QEMU
    // virt under edk2 without acpi=off; a DT GRUB made only for /chosen).
    let acpi_rsdp = handoff
        .rsdp
        .filter(|_| !dtb.is_some_and(|(_, blob)| pinfold_hv::dtb::describes_hardware(blob)));
    let mut host = match (acpi_rsdp, dtb) {
        (Some(rsdp), _) => host_from_acpi(rsdp, &handoff),
        (None, Some((_, blob))) => host_from_dtb(blob),
        // The UEFI path refuses a host with neither before it leaves firmware.
        (None, None) => halt(),
    };
    if let Some(memory) = &handoff.memory {
        // Under UEFI the memory map is the truth about RAM (the DT's
        // /memory may be stale or absent; ACPI has none).
        host.memory = memory.ram.clone();
        host.reserved.extend_from_slice(&memory.reserved);
    }
    // The wall clock, once: GetTime's reading, else the RTC's seconds.
    let wall_clock = pinfold_hv::clock::choose(handoff.efi_time, || {
        pinfold_hv::clock::pl031(&host.devices).map(|base| {
            // SAFETY: RTCDR (offset 0) of the PL031 the host description
            // names; reading it has no side effect, and no partition runs yet.
            let secs = unsafe { (base as *const u32).read_volatile() };
            (secs, arch::counter())
        })
    });
    if let Some(u) = &host.uart {
        // SAFETY: the UART's base comes from the DTB's stdout-path or SPCR.
        log::init(unsafe { Pl011Uart::new(u.base as usize) });
    }
    hvprint!(
        "Pinfold v{} at EL2: {} CPUs, {} MiB RAM, GICv{}",
        VERSION,
        host.cpus.len(),
        host.memory.iter().map(|m| m.1).sum::<u64>() >> 20,
        host.gic.version
    );
    if let Some(memory) = &handoff.memory {
        let from = match (acpi_rsdp, dtb) {
            (Some(rsdp), _) => alloc::format!("host from ACPI (RSDP at {rsdp:#x})"),
            (None, Some((addr, _))) => alloc::format!("host from the DT at {addr:#x}"),
            (None, None) => alloc::string::String::new(),
        };
        hvprint!(
            "booted from UEFI: {from}, RAM from the EFI memory map ({} ranges, {} reserved)",
            memory.ram.len(),
            memory.reserved.len()
        );
    }
    arch::mmu::build(&host.memory);
    arch::mmu::enable();
    VBAR_EL2.set(vectors_address());
    let me = arch::mpidr();
    let Some(index) = host.cpus.iter().position(|&m| same_cpu(m, me)) else {
        hvprint!("the boot CPU (MPIDR {me:#x}) is not in the host description: halting");
        halt()
    };
    if index >= MAX_CPUS {
        hvprint!("the boot CPU is CPU {index}, beyond MAX_CPUS ({MAX_CPUS}): halting");
        halt()
    }

    // Which interrupt-chip driver: decided by the core from the host
    // description. A GICv5 comes up below, once free RAM is known (its
    // IRS needs an IST).
    let host_gic = HostGic::of(&host.gic);
    if host_gic == HostGic::V3 {
        // SAFETY: the distributor frame comes from the host description and is
        // mapped as device memory; this is its only user.
        let dist = unsafe { gicv3::init_distributor(host.gic.dist.0 as usize) };
        hw::DIST.call_once(|| CountedLock::new(Box::new(dist), &LOCKSTAT));
        // What the GIC is and offers, for the host view and the plan's `gic`
        // check (the core decodes the ID registers; `hv::gichost`).
        // SAFETY: the frames come from the host description; everything
        // outside RAM is mapped as device memory (`arch::mmu::build`).
        let ids = unsafe {
            gicv3::ids::read(
                host.gic.dist.0,
                &host.gic.redist_regions,
                host.gic.redist_stride,
                &host.gic.its,
            )
        };
        host.gic.found = pinfold_hv::gichost::GicFound::from_v3_ids(&host.gic, &ids);
        hvlog!("gic: {}", host.gic.found);
    }

    let (payload_start, payload_len) = layout.payload;
    // SAFETY: the payload was loaded with the image and is never written.
    let appended: &'static [u8] =
        unsafe { core::slice::from_raw_parts(payload_start as *const u8, payload_len as usize) };
    // The bundle the UEFI path copied into loader memory, else the initrd a
    // boot loader named in /chosen.
    let handed_range = handoff.bundle.or(host.initrd);
    // SAFETY: the way in put the bundle there (the UEFI path in loader
    // memory it allocated, a boot loader where /chosen says); it is RAM that
    // nothing else uses (it is kept out of free memory).
    let handed: Option<&'static [u8]> = handed_range.map(|(base, size)| unsafe {
        core::slice::from_raw_parts(base as *const u8, size as usize)
    });
    let key = bundle_key();
    let payload = match select_payload(appended, handed, &key) {
        Ok((source, payload)) => {
            // The image's own payload needs no line: it is what the image
            // was built with (and the boot-cost bench row counts every
            // instruction of boot).
            if source == PlanSource::Bundle {
                hvprint!(
                    "boot bundle: {} bytes at {:#x}, signed by key {}",
                    handed.map_or(0, <[u8]>::len),
                    handed.map_or(0, |b| b.as_ptr() as usize),
                    pinfold_config::bundle::Hex(&pinfold_config::bundle::key_id(&key))
                );
            }
            payload
        }
        Err(e) => {
            hvprint!("{e}: halting");
            halt();
        }
    };
    let plan = match Plan::decode(payload) {
        Ok(plan) => plan,
        Err(e) => {
            hvprint!(
                "no usable partition plan ({:?}, {} bytes at {:#x}): halting",
                e,
                payload.len(),
                payload.as_ptr() as usize
            );
            halt();
        }
    };

    let mut used: Vec<(u64, u64)> = Vec::new();
    // The image, its payload and its heap.
    used.push((image_start, image_size));
    if let Some((addr, blob)) = dtb {
        used.push((addr, blob.len() as u64));
    }
    if let Some(handed) = handed_range {
        used.push(handed);
    }
    if let Some(initrd) = host.initrd.filter(|&i| Some(i) != handed_range) {
        used.push(initrd);
    }
    // The same isolation rules the build checked, now against the real
    // host: a plan that would map RAM, the hypervisor, the GIC or another
    // partition's windows is refused before anything is created.
    let resources = host_resources(&host, &used);
    if let Err(e) = pinfold_config::isolation::check_isolation(&plan.partitions, &resources) {
        hvprint!("the partition plan was refused: {e}: halting");
        halt()
    }
    used.extend_from_slice(&host.reserved);
    let mut free = memmap::FreeMemory::new(&host.memory, &used);
    let cpu_count = host.cpus.len().min(MAX_CPUS);
    if !arch::alloc_stacks(&mut free, cpu_count, index) {
        hvprint!("no memory for {cpu_count} CPU stacks: halting");
        halt()
    }
    // Entropy: the DT's rng-seed, EFI_RNG_PROTOCOL's bytes, and RNDR where
    // the CPU has FEAT_RNG (the core decides from ID_AA64ISAR0_EL1 and how
    // many words; a word the generator failed is left out).
    let mut rndr = Vec::new();
    if pinfold_hv::entropy::rndr_implemented(arch::regs::read_id_reg(6, 0)) {
        for _ in 0..pinfold_hv::entropy::RNDR_WORDS * 4 {
            if rndr.len() == pinfold_hv::entropy::RNDR_WORDS {
                break;
            }
            if let Some(word) = arch::rndr() {
                rndr.push(word);
            }
        }
    }
    let rng_seed = host.rng_seed.clone();
    let entropy = pinfold_hv::entropy::EntropyInputs {
        dt_rng_seed: rng_seed.as_deref(),
        efi_rng: handoff.efi_rng.as_ref().map(|b| &b[..]),
        rndr: &rndr,
        counter: boot_counter,
    };
    // Per-function assignment: the functions behind the host bridge are
    // quiesced and enumerated (BARs sized) once, before any is placed, and
    // the SR-IOV VFs the plan names enabled.
    let pci_functions = match &host.pcie {
        Some(bridge) if plan.partitions.iter().any(|p| !p.pci.is_empty()) => {
            let wanted: Vec<pinfold_hv::pci::Bdf> = plan
                .partitions
                .iter()
                .flat_map(|p| &p.pci)
                .map(|a| pinfold_hv::pci::Bdf {
                    bus: a.bus,
                    dev: a.device,
                    func: a.function,
                })
                .collect();
            let found = pinfold_hv::vpci::boot_scan(
                &mut hw::PlatformHw::new(index),
                bridge,
                &wanted,
                &mut |args| hvlog!("{}", args),
            );
            for f in &found {
                hvlog!(
                    "pci {} {:04x}:{:04x} class {:06x}{}{}: {} BARs",
                    f.bdf,
                    f.vendor,
                    f.device,
                    f.class,
                    if f.bridge { " (bridge)" } else { "" },
                    if f.vf.is_some() { " (SR-IOV VF)" } else { "" },
                    f.bars.len()
                );
            }
            found
        }
        _ => Vec::new(),
    };
    // The ITS's tables before any partition takes RAM: which partitions
    // get a virtual ITS depends on whether it came up.
    let its = match host_gic {
        HostGic::V3 => its::init(&host, &mut free, cpu_count),
        HostGic::V5 => {
            // The IRS's IST and VM table, taken the same way.
            match gicv5::init(&mut host, &mut free, cpu_count, index) {
                Ok(()) => {}
                Err(e) => {
                    hvprint!("GICv5: {e}: halting");
                    halt()
                }
            }
            hvlog!("gic: {}", host.gic.found);
            gicv5::init_its(&host, &mut free, cpu_count)
        }
    };
    let sys = System::new(
        BootInputs {
            host,
            plan,
            payload,
            free,
            resources,
            tables: &mut heap::HeapTables,
            locks: &LOCKSTAT,
            boot_counter,
            wall_clock,
            entropy,
            version: VERSION,
            pci_functions,
            its,
        },
        &mut |args| hvlog!("{}", args),
    );
    let sys = SYSTEM.call_once(|| sys);
    // GICv4.1 direct vSGIs, when the core turned them on: every CPU's vPE
    // table, before any CPU's bring-up writes its GICR_VPROPBASER.
    v41::init(sys);
    if host_gic == HostGic::V5 {
        // Every GICv5 partition's VM, before any partition starts.
        if let Err(e) = gicv5::init_virs(sys) {
            hvprint!("GICv5: vIRS: {e}: halting");
            halt()
        }
    }
    percpu::init_all(sys);
    enter_cpu(index);
    // SAFETY: the boot CPU's main line; no exception handler runs yet.
    let local = unsafe { percpu::this_cpu() };
    init_cpu_gic(local, &sys.host);
    its::init_cpu(sys, index, me, &mut local.hw);
    gicv5::its_cpu_online(sys, index);
    v41::init_cpu(sys, index, &mut local.hw);
    ablate::log_ablations();
    #[cfg(not(feature = "ablate-irq-fnptr"))]
    irq::install_root_handler(host_gic);
    #[cfg(feature = "ablate-irq-fnptr")]
    ablate::install_root_handler();
    with_hw!(local, |hw| sys.program_spis(hw));
    // Before any partition starts: streams nobody owns abort from here on
    // (hv `smmu`); the owner's are bound when it starts.
    let vtcr = pinfold_hv::stage2::vtcr_el2(vcpu::pa_range_bits());
    match sys.smmu_init(&mut local.hw, vtcr) {
        Ok(true) => hvlog!("smmu: SMMUv3 programmed: stage-2 stream table, unowned streams abort"),
        Ok(false) => {
            if sys.host.pcie.is_some() {
                hvlog!("smmu: none in front of the PCIe host bridge: device DMA is not translated")
            }
        }
        Err(e) => hvlog!("smmu: not enabled: {e}; device DMA is not translated"),
    }

    // Host UART input, routed to this CPU.
    if let Some(intid) = sys.host.uart.as_ref().and_then(|u| u.intid) {
        use pinfold_hv::exit::Hw;
        local
            .hw
            .spi(LockPath::PhysDist, SpiOp::Route { intid, mpidr: me });
        local.hw.spi(
            LockPath::PhysDist,
            SpiOp::Enable {
                intid,
                enable: true,
            },
        );
        if let Some(u) = log::uart() {
            u.enable_rx_interrupt();
        }
    }

    match sys.host.psci.as_ref().map(|p| p.conduit) {
        Some(Conduit::Smc) => {
            for (i, &mpidr) in sys.host.cpus.iter().enumerate().take(cpu_count) {
                if i == index {
                    continue;
                }
                let r = arch::firmware_smc(
                    u64::from(fid::CPU_ON_64),
                    mpidr,
                    arch::secondary_entry_address(),
                    arch::secondary_context(i),
                );
                if r != 0 {
                    hvlog!("CPU {i} (MPIDR {mpidr:#x}) did not start: PSCI {r}");
                }
            }
        }
        _ => hvlog!("no PSCI SMC conduit: running on the boot CPU only"),
    }

    let partitions = sys.partitions();
    hvprint!("entropy: {}", sys.entropy_sources());
    if partitions.iter().any(|p| p.plan.management) {
        match sys.generated_token() {
            Some(token) => hvprint!("management token: {token}"),
            None if !sys.has_token() => hvprint!(
                "management token: none (no entropy source to make one, none in the plan): \
                 the API refuses every request that needs a credential"
            ),
            None => hvprint!(
                "management token: set by the plan (SHA-256 {}...)",
                pinfold_config::bundle::Hex(&sys.token_digest()[..4])
            ),
        }
    }
    // A plan whose manager keeps the configuration at a store: the other
    // autostart partitions wait until it has applied it (CONFIG_APPLIED),
    // at most HOLD_S, so one deleted before this boot never runs.
    let hold = sys.has_config_store();
    let hold_until = {
        use pinfold_hv::exit::Hw;
        local.hw.now() + pinfold_hv::lifecycle::HOLD_S * local.hw.counter_frequency()
    };
    for p in &partitions {
        if !p.plan.autostart {
            continue;
        }
        if hold && !p.plan.management {
            sys.hold_autostart(p, hold_until);
            with_hw!(local, |hw| sys.kick(hw, index, p.vcpus[0].pcpu));
            hvlog!(
                "partition {}: autostart held until the manager applies its stored configuration (at most {} s)",
                p.name,
                pinfold_hv::lifecycle::HOLD_S
            );
        } else {
            let _ = with_hw!(local, |hw| sys.start_partition(p, hw, index));
        }
    }
    hvprint!("ready: {} partitions", partitions.len());
    drop(partitions);
    arch::reset_stack_and_call(index, vcpu::idle)
}

#[no_mangle]
extern "C" fn pinfold_secondary_main(index: u64) -> ! {
    arch::mmu::enable();
    VBAR_EL2.set(vectors_address());
    let index = index as usize;
    enter_cpu(index);
    let sys = system();
    // SAFETY: this CPU's main line; no exception handler runs yet.
    let local = unsafe { percpu::this_cpu() };
    init_cpu_gic(local, &sys.host);
    its::init_cpu(sys, index, local.state.state.mpidr, &mut local.hw);
    gicv5::its_cpu_online(sys, index);
    v41::init_cpu(sys, index, &mut local.hw);
    sys.cpus[index]
        .online
        .store(true, core::sync::atomic::Ordering::Release);
    hvlog!("online");
    arch::reset_stack_and_call(index, vcpu::idle)
}

/// Every CPU, boot and secondary, once at its start: physical interrupts
/// routed to EL2 while no vCPU is loaded (the idle loop's WFI must see
/// them), and TPIDR_EL2 pointing at its local state.
fn enter_cpu(index: usize) {
    HCR_EL2.write(vcpu::HCR_HOST);
    percpu::enter(index);
}

/// The host description from the DTB; a refused DTB is reported on the
/// console it names, and boot stops.
fn host_from_dtb(blob: &[u8]) -> HostInfo {
    match parse_host_dtb(blob) {
        Ok(h) => h,
        Err(e) => {
            // Say why on whatever console the DTB names, even though the
            // rest of it was refused.
            if let Some(u) = early_uart(blob) {
                // SAFETY: the UART's base comes from the DTB's stdout-path
                // (or the first PL011); firmware left it mapped flat.
                log::init(unsafe { Pl011Uart::new(u.base as usize) });
                hvprint!("Pinfold v{VERSION}: the host DTB was refused: {e}: halting");
            }
            halt()
        }
    }
}

/// Firmware's ACPI tables read in place (identity mapped, the MMU off or
/// ours), only inside the ACPI reclaim and NVS ranges of the EFI memory map.
struct AcpiMemory<'a>(&'a [(u64, u64)]);

impl pinfold_hv::acpi::PhysRead for AcpiMemory<'_> {
    fn read(&self, addr: u64, len: usize) -> Option<&[u8]> {
        let end = addr.checked_add(len as u64)?;
        self.0
            .iter()
            .any(|&(base, size)| addr >= base && end <= base + size)
            // SAFETY: the range lies in firmware's ACPI memory, which the
            // hypervisor never hands out or writes.
            .then(|| unsafe { core::slice::from_raw_parts(addr as *const u8, len) })
    }
}

/// The host description from ACPI (the RSDP from the UEFI configuration
/// table); a refusal is reported on SPCR's console, and boot stops.
fn host_from_acpi(rsdp: u64, handoff: &BootHandoff) -> HostInfo {
    let ranges = handoff.memory.as_ref().map_or(&[][..], |m| &m.acpi[..]);
    let mem = AcpiMemory(ranges);
    match pinfold_hv::acpi::parse_host_acpi(rsdp, &mem) {
        Ok(tables) => {
            if let Some(u) = &tables.host.uart {
                // SAFETY: SPCR's UART, left mapped flat by firmware.
                log::init(unsafe { Pl011Uart::new(u.base as usize) });
            }
            for w in &tables.warnings {
                hvprint!("ACPI: {w}");
            }
            if let Some(board) = tables.board {
                hvprint!("ACPI: what only AML describes comes from the {board} board table");
            }
            tables.host
        }
        Err(e) => {
            if let Some(u) = pinfold_hv::acpi::early_uart(rsdp, &mem) {
                // SAFETY: SPCR's UART, left mapped flat by firmware.
                log::init(unsafe { Pl011Uart::new(u.base as usize) });
                hvprint!("Pinfold v{VERSION}: the ACPI tables were refused: {e}: halting");
            }
            halt()
        }
    }
}

fn vectors_address() -> u64 {
    extern "C" {
        static pinfold_vectors: u8;
    }
    core::ptr::addr_of!(pinfold_vectors) as u64
}

/// A fault in the hypervisor itself: report and stop this CPU.
#[no_mangle]
extern "C" fn pinfold_hv_fault(frame: &pinfold_hv::exit::GuestRegs) {
    hvlog!(
        "HYPERVISOR FAULT: ESR_EL2 {:#x} FAR_EL2 {:#x} ELR_EL2 {:#x} lr {:#x}",
        arch::regs::esr_el2(),
        arch::regs::far_el2(),
        frame.elr,
        frame.x[30]
    );
    halt();
}

pub(crate) fn halt() -> ! {
    loop {
        core::hint::spin_loop();
    }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    hvlog!("PANIC: {}", info);
    halt()
}
