//! EL1 loader of the management partition: sets up the boot state Hermit 0.11 expects and enters the Hermit application embedded in it.
//!
//! Hermit's own loader is not on crates.io, so this one speaks the same
//! protocol (hermit-entry 0.10.3, Hermit's `arch/aarch64` boot code):
//!
//! - entered as an arm64 Image at RAM base + 0x80000, EL1, MMU off, x0 = DTB;
//!   RAM may be anywhere (a static PIE, it relocates itself first);
//! - RAM from the DTB's /memory, the PL011 from /chosen/stdout-path (or the
//!   first `arm,pl011` node);
//! - memory right above this image, in order: Hermit's 32 KiB boot stack,
//!   a copy of the DTB, the RawBootInfo page, the translation tables, then
//!   the application (a static PIE) at the next 2 MiB boundary. Hermit
//!   treats all RAM below the end of its image as taken, so everything the
//!   kernel keeps using (DTB, boot info, tables, stack) must sit below it;
//!   copying the DTB there frees the firmware's choice of where to put it;
//! - MAIR/TCR/SCTLR as Hermit indexes them, TTBR0 tables identity-mapping
//!   RAM from the loader's 2 MiB-aligned base (normally the RAM base) up
//!   to the 2 MiB-aligned end of the kernel with 4 KiB
//!   pages, the PL011 at VA 0x1000, L0[511] pointing at L0. RAM above the
//!   kernel stays unmapped: Hermit hands it out itself, at the virtual
//!   addresses it chooses, and stale identity entries there would make it
//!   rewrite live mappings;
//! - enter Hermit's `_start` with x0 = &RawBootInfo, x1 = 0 and sp = the
//!   BASE of the boot stack.
#![no_std]
#![no_main]

mod arch;
mod console;
mod paging;

use core::fmt;
use core::mem::MaybeUninit;
use core::ops::Range;
use core::ptr;

use fdt::Fdt;
use hermit_entry::boot_info::{
    BootInfo, DeviceTreeAddress, HardwareInfo, PlatformInfo, RawBootInfo, SerialPortBase,
};
use hermit_entry::elf::{KernelObject, ParseKernelError};

use paging::{PagingError, Tables, PAGE_SIZE};

/// Hermit's boot stack size (its `KERNEL_STACK_SIZE`): it adds this to the
/// sp it is given.
const BOOT_STACK_SIZE: u64 = 0x8000;
/// Hermit maps its image with 2 MiB granularity in its own accounting.
const KERNEL_ALIGN: u64 = 2 << 20;
/// Where Hermit expects the PL011 (its `serial_port_base`): a fixed,
/// page-aligned VA in the first 2 MiB, far below anything it allocates.
const UART_VA: u64 = 0x1000;

/// The Hermit application ELF, page aligned (hermit-entry reads its headers
/// in place, which needs at least 8-byte alignment).
#[repr(C, align(4096))]
struct PageAligned<T: ?Sized>(T);

static APPLICATION: &PageAligned<[u8]> =
    &PageAligned(*include_bytes!(env!("PINFOLD_APP_ELF_PATH")));

extern "C" {
    static __image_start: u8;
    static __image_end: u8;
}

/// Why the loader could not start Hermit.
#[derive(Debug)]
enum LoadError {
    /// Not entered at EL1 (the value is CurrentEL.EL).
    WrongExceptionLevel(u64),
    /// The loader was built without an application to embed.
    NoApplication,
    /// x0 did not point at a flattened device tree.
    BadDeviceTree(fdt::FdtError),
    /// No /memory region of the DTB contains this loader.
    NoMemory,
    /// The DTB names no PL011 (Hermit 0.11 writes its console to one).
    NoUart,
    /// The embedded application is not a Hermit ELF hermit-entry accepts.
    BadApplication(ParseKernelError),
    /// The application wants a fixed address; only static PIEs are placed.
    NotRelocatable,
    /// RAM ends before the kernel does.
    OutOfMemory { needed_end: u64, ram_end: u64 },
    /// The translation tables could not be built.
    Paging(PagingError),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::WrongExceptionLevel(el) => write!(f, "entered at EL{el}, not EL1"),
            Self::NoApplication => write!(
                f,
                "no application embedded (PINFOLD_MANAGER_APP_ELF unset at build time)"
            ),
            Self::BadDeviceTree(err) => write!(f, "x0 is not a device tree: {err:?}"),
            Self::NoMemory => write!(f, "no /memory region of the DTB holds the loader"),
            Self::NoUart => write!(f, "the DTB names no PL011 UART"),
            Self::BadApplication(err) => write!(f, "embedded application: {err}"),
            Self::NotRelocatable => write!(f, "embedded application is not a static PIE"),
            Self::OutOfMemory {
                needed_end,
                ram_end,
            } => {
                write!(
                    f,
                    "RAM ends at {ram_end:#x}, the kernel needs up to {needed_end:#x}"
                )
            }
            Self::Paging(err) => write!(f, "building page tables: {err:?}"),
        }
    }
}

impl From<PagingError> for LoadError {
    fn from(err: PagingError) -> Self {
        Self::Paging(err)
    }
}

/// Where everything goes in RAM (all physical = virtual addresses).
#[derive(Debug)]
struct Plan {
    /// Base of Hermit's boot stack.
    stack: u64,
    /// The DTB copy Hermit is given.
    dtb: u64,
    /// The page holding RawBootInfo.
    boot_info: u64,
    /// The region translation tables are taken from.
    tables: Range<u64>,
    /// Where the application is loaded.
    kernel: u64,
    /// End of the identity map: the 2 MiB-aligned end of the kernel.
    mapped_end: u64,
}

const fn align_up(value: u64, align: u64) -> u64 {
    (value + align - 1) & !(align - 1)
}

impl Plan {
    /// Lays out the regions above `image_end`; the table region is sized
    /// for the identity map it must hold, which depends on where the kernel
    /// lands, which depends on the table region: iterate to a fixed point.
    fn new(
        image_end: u64,
        dtb_len: u64,
        kernel_len: u64,
        ram: &Range<u64>,
    ) -> Result<Self, LoadError> {
        let stack = align_up(image_end, PAGE_SIZE);
        let dtb = stack + BOOT_STACK_SIZE;
        let boot_info = dtb + align_up(dtb_len, PAGE_SIZE);
        let tables_start = boot_info + PAGE_SIZE;
        let mut tables_len = 0;
        for _ in 0..8 {
            let kernel = align_up(tables_start + tables_len, KERNEL_ALIGN);
            let mapped_end = align_up(kernel + kernel_len, KERNEL_ALIGN);
            let needed = paging::table_pages_for(mapped_end - ram.start) * PAGE_SIZE;
            if needed <= tables_len {
                if mapped_end > ram.end {
                    return Err(LoadError::OutOfMemory {
                        needed_end: mapped_end,
                        ram_end: ram.end,
                    });
                }
                return Ok(Self {
                    stack,
                    dtb,
                    boot_info,
                    tables: tables_start..tables_start + tables_len,
                    kernel,
                    mapped_end,
                });
            }
            tables_len = needed;
        }
        Err(LoadError::Paging(PagingError::OutOfTables))
    }
}

/// The RAM region (from /memory) that holds `address`.
fn ram_containing(fdt: &Fdt<'_>, address: u64) -> Option<Range<u64>> {
    fdt.all_nodes()
        .filter(|node| node.name == "memory" || node.name.starts_with("memory@"))
        .filter_map(|node| node.reg())
        .flatten()
        .filter_map(|region| {
            let start = region.starting_address as u64;
            Some(start..start + region.size? as u64)
        })
        .find(|range| range.contains(&address))
}

/// The console PL011: /chosen/stdout-path if it names one, else the first
/// `arm,pl011` node.
fn uart(fdt: &Fdt<'_>) -> Option<u64> {
    let is_pl011 = |node: &fdt::node::FdtNode<'_, '_>| {
        node.compatible()
            .is_some_and(|compatible| compatible.all().any(|c| c == "arm,pl011"))
    };
    let node = fdt
        .find_node("/chosen")
        .and_then(|chosen| chosen.property("stdout-path"))
        .and_then(|path| path.as_str())
        // stdout-path may carry options after a ':' ("serial0:115200n8").
        .and_then(|path| fdt.find_node(path.split(':').next().unwrap_or(path)))
        .filter(is_pl011)
        .or_else(|| fdt.find_compatible(&["arm,pl011"]))?;
    let region = node.reg()?.next()?;
    Some(region.starting_address as u64)
}

/// Called by `_start` with the MMU off, on the loader stack, x0 = the DTB.
extern "C" fn loader_main(dtb: u64) -> ! {
    match boot(dtb) {
        Ok(never) => match never {},
        Err(err) => {
            say!("cannot start Hermit: {err}");
            arch::halt()
        }
    }
}

/// Any exception taken while the loader runs (vector `kind`, 0..15).
extern "C" fn loader_exception(kind: u64, esr: u64, elr: u64, far: u64) -> ! {
    say!("exception {kind}: ESR_EL1 {esr:#x} ELR_EL1 {elr:#x} FAR_EL1 {far:#x}");
    arch::halt()
}

fn boot(dtb_address: u64) -> Result<core::convert::Infallible, LoadError> {
    let el = arch::current_el();
    if el != 1 {
        return Err(LoadError::WrongExceptionLevel(el));
    }
    // SAFETY: the boot protocol passes the DTB's address in x0; the fdt
    // crate checks the magic before it trusts the header's size.
    let fdt =
        unsafe { Fdt::from_ptr(dtb_address as *const u8) }.map_err(LoadError::BadDeviceTree)?;
    let uart = uart(&fdt).ok_or(LoadError::NoUart)?;
    console::set_base(uart);

    // Linker-script symbols: only their addresses mean anything.
    let image_start = ptr::addr_of!(__image_start) as u64;
    let image_end = ptr::addr_of!(__image_end) as u64;
    let ram = ram_containing(&fdt, image_start).ok_or(LoadError::NoMemory)?;
    // Hermit counts all RAM between the start of the range it is given and
    // the end of its image as taken, *and* subtracts it again from what
    // lies above (mm::init), so RAM far below the loader would make it
    // panic "Not enough memory". Below the loader there is nothing Hermit
    // needs: give it RAM from the loader's 2 MiB-aligned base on.
    let ram = ram.start.max(image_start & !(KERNEL_ALIGN - 1))..ram.end;
    let dtb_len = fdt.total_size() as u64;
    say!(
        "loaded at {image_start:#x}; RAM {:#x}..{:#x}, DTB at {dtb_address:#x} ({dtb_len} bytes), PL011 at {uart:#x}",
        ram.start,
        ram.end
    );

    if APPLICATION.0.is_empty() {
        return Err(LoadError::NoApplication);
    }
    let object = KernelObject::parse(&APPLICATION.0).map_err(LoadError::BadApplication)?;
    if object.start_addr().is_some() {
        return Err(LoadError::NotRelocatable);
    }
    let kernel_len = object.mem_size() as u64;
    let plan = Plan::new(image_end, dtb_len, kernel_len, &ram)?;

    // The DTB copy and the tables are written with the MMU off (uncached):
    // drop stale cache lines first (see `invalidate_dcache`). The firmware
    // may have put the DTB anywhere, even where the copy goes: copy with
    // memmove semantics, and before anything else is written.
    // SAFETY: the plan's regions are free RAM above the loader image.
    unsafe {
        arch::invalidate_dcache(plan.dtb, plan.tables.end);
        ptr::copy(
            dtb_address as *const u8,
            plan.dtb as *mut u8,
            dtb_len as usize,
        );
    }

    // SAFETY: the table region is free RAM, page aligned, MMU off.
    let mut tables = unsafe { Tables::new(plan.tables.start, plan.tables.end) }?;
    tables.map(
        ram.start,
        ram.start,
        plan.mapped_end - ram.start,
        paging::MEMORY,
    )?;
    tables.map(UART_VA, uart & !(PAGE_SIZE - 1), PAGE_SIZE, paging::DEVICE)?;
    tables.map_recursive();
    // SAFETY: the tables identity-map all RAM up to the kernel's end, which
    // holds this loader, its stack and everything it touches from now on.
    unsafe { arch::enable_mmu(tables.root()) };
    console::set_base(UART_VA + (uart & (PAGE_SIZE - 1)));
    say!(
        "MMU on: tables {:#x}..{:#x}, identity map {:#x}..{:#x}",
        plan.tables.start,
        tables.used_end(),
        ram.start,
        plan.mapped_end
    );

    // SAFETY: [kernel, kernel + len) is free, identity-mapped RAM below
    // `mapped_end`; hermit-entry writes every byte of it.
    let memory = unsafe {
        core::slice::from_raw_parts_mut(plan.kernel as *mut MaybeUninit<u8>, kernel_len as usize)
    };
    let loaded = object.load_kernel(memory, plan.kernel);
    arch::sync_icache(plan.kernel, plan.kernel + kernel_len);

    let boot_info = BootInfo {
        hardware_info: HardwareInfo {
            phys_addr_range: ram.clone(),
            serial_port_base: SerialPortBase::new(UART_VA + (uart & (PAGE_SIZE - 1))),
            device_tree: DeviceTreeAddress::new(plan.dtb),
        },
        load_info: loaded.load_info,
        platform_info: PlatformInfo::LinuxBoot,
    };
    // SAFETY: the boot-info page is ours, mapped and large enough.
    unsafe {
        ptr::write(
            plan.boot_info as *mut RawBootInfo,
            RawBootInfo::from(boot_info),
        )
    };
    say!(
        "Hermit application at {:#x}..{:#x}, entry {:#x}, boot stack {:#x}",
        plan.kernel,
        plan.kernel + kernel_len,
        loaded.entry_point,
        plan.stack
    );
    // SAFETY: the kernel is loaded and its I-cache view synchronised, the
    // boot info written, the stack region free; all identity-mapped.
    unsafe { arch::enter_kernel(loaded.entry_point, plan.boot_info, plan.stack) }
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    say!("panic: {info}");
    arch::halt()
}
