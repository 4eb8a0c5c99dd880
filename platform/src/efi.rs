//! The UEFI way in. Firmware starts the image as a PE/COFF EFI application
//! (entry.S `pinfold_efi_entry`: relocate, clear BSS, then
//! `pinfold_efi_main`), with its MMU and caches on at EL2. Here, on the EFI
//! console: check the exception level, set up the EL2 heap (the image's
//! zero-filled tail), find the DTB and the ACPI RSDP in the configuration
//! tables, find the boot bundle (LoadFile2 initrd, the DT's /chosen initrd,
//! else a file beside the image over TFTP or HTTP) and copy it into loader
//! memory, ExitBootServices, turn the memory map into RAM and reserved
//! ranges, leave firmware's MMU (`pinfold_efi_leave_firmware`) and continue
//! in the common boot with a `BootHandoff`. What is decided (memory types,
//! bundle names, DT or ACPI) is `pinfold_hv::efi`, host-tested.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::ffi::c_void;
use core::fmt::Write;
use core::net::{IpAddr, Ipv4Addr};

use pinfold_hv::efi::{self as decide, HostSource, MemoryDescriptor};
use pinfold_hv::memmap;
use uefi::boot::{self, AllocateType, MemoryType, OpenProtocolAttributes, OpenProtocolParams};
use uefi::mem::memory_map::MemoryMap;
use uefi::proto::device_path::{DevicePath, LoadedImageDevicePath};
use uefi::proto::loaded_image::LoadedImage;
use uefi::proto::media::load_file::LoadFile2;
use uefi::proto::network::http::{HttpBinding, HttpHelper};
use uefi::proto::network::pxe::BaseCode;
use uefi::proto::ProtocolPointer;
use uefi::table::cfg::ConfigTableEntry;
use uefi::{guid, CStr8, Guid, Handle, Status};

use crate::{arch, BootHandoff, VERSION};

/// The configuration table of a flattened device tree (UEFI spec, "Devicetree
/// Tables": EFI_DTB_TABLE_GUID).
const DTB_GUID: Guid = guid!("b1b621d5-f19c-41a5-830b-d9152c69aae0");

/// The vendor media device path under which boot loaders (U-Boot bootefi,
/// GRUB 2.12, systemd-boot) offer the initrd through LoadFile2: Linux's
/// LINUX_EFI_INITRD_MEDIA_GUID, then the end node.
const INITRD_MEDIA_PATH: [u8; 24] = {
    let g = guid!("5568e427-68fc-4f3d-ac74-ca555231cc68").to_bytes();
    [
        4, 3, 20, 0, // media, vendor, length 20
        g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7], g[8], g[9], g[10], g[11], g[12], g[13],
        g[14], g[15], 0x7f, 0xff, 4, 0, // end of the entire path
    ]
};

/// Device path node types of the messaging nodes read here (UEFI 10.3.4).
const DP_MESSAGING: u8 = 3;
const DP_MAC: u8 = 11;
const DP_URI: u8 = 24;

extern "C" {
    /// `handoff` is a leaked `Box<BootHandoff>`, passed through to
    /// `pinfold_efi_resume`.
    fn pinfold_efi_leave_firmware(handoff: *mut c_void, start: u64, len: u64) -> !;
}

/// A line on the EFI console (ConOut).
macro_rules! efi_println {
    ($($arg:tt)*) => {
        crate::efi::con_out(format_args!($($arg)*))
    };
}

pub(crate) fn con_out(args: core::fmt::Arguments<'_>) {
    uefi::system::with_stdout(|out| {
        let _ = out.write_fmt(args);
        let _ = out.write_str("\r\n");
    });
}

/// Called by `pinfold_efi_entry` with the image handle and system table.
/// Returns an EFI status to firmware only when it cannot boot; otherwise it
/// leaves firmware for good.
#[no_mangle]
extern "C" fn pinfold_efi_main(image: *mut c_void, system_table: *const c_void) -> usize {
    let boot_counter = arch::counter();
    // SAFETY: firmware passes its image handle and system table to the entry
    // point (UEFI 4.1); they stay valid until ExitBootServices.
    unsafe {
        let Some(image) = Handle::from_ptr(image) else {
            return Status::INVALID_PARAMETER.0;
        };
        boot::set_image_handle(image);
        uefi::table::set_system_table(system_table.cast());
    }
    match run(boot_counter) {
        Ok(never) => match never {},
        Err(status) => status.0,
    }
}

enum Never {}

fn run(boot_counter: u64) -> Result<Never, Status> {
    let el = arch::current_el();
    if el != 2 {
        efi_println!("Pinfold needs EL2; firmware entered at EL{el}");
        return Err(Status::UNSUPPORTED);
    }
    let (image_start, payload_start) = arch::image_bounds();
    // SAFETY: the loader copied the headers to the image's base; image_size
    // (offset 16) is the memory the PE header's SizeOfImage also claims.
    let image_size = unsafe { ((image_start + 16) as *const u64).read_volatile() };
    let Some(layout) = memmap::image_layout(image_start, payload_start, image_size) else {
        efi_println!("Pinfold: this image was not assembled by the xtask (no heap after it)");
        return Err(Status::LOAD_ERROR);
    };
    // SAFETY: the heap is the zero-filled tail of the PE image's .data, ours
    // alone; the common boot keeps using it (it does not initialise it again).
    unsafe { crate::heap::init(layout.heap.0, layout.heap.1) };
    efi_println!("Pinfold v{VERSION}: UEFI application at EL2, image at {image_start:#x}");

    let (dtb, rsdp) = uefi::system::with_config_table(|tables| {
        let find = |guid: Guid| {
            tables
                .iter()
                .find(|t| t.guid == guid)
                .map(|t| t.address as u64)
        };
        (find(DTB_GUID), find(ConfigTableEntry::ACPI2_GUID))
    });
    let dtb_blob = dtb.map(|addr| {
        // SAFETY: firmware installed a DTB there; its header holds the total
        // size (big endian at offset 4), and nothing writes it.
        let size = u32::from_be(unsafe { ((addr + 4) as *const u32).read_unaligned() });
        // SAFETY: as above.
        unsafe { core::slice::from_raw_parts(addr as *const u8, size as usize) }
    });
    let describes = dtb_blob.is_some_and(pinfold_hv::dtb::describes_hardware);
    match decide::host_source(describes, rsdp.is_some()) {
        HostSource::Dt => efi_println!(
            "Pinfold: host described by the DT configuration table at {:#x}{}",
            dtb.unwrap_or(0),
            rsdp.map_or(String::new(), |r| alloc::format!(
                " (ACPI RSDP at {r:#x} too)"
            ))
        ),
        HostSource::Acpi => {
            // The ACPI parser (pinfold_hv::acpi) is not wired in yet: the
            // RSDP is found and kept in the handoff for it.
            efi_println!(
                "Pinfold: only ACPI describes this host (RSDP at {:#x}); this build reads the \
                 host from a DT only: boot with a DT (QEMU -M virt,acpi=off)",
                rsdp.unwrap_or(0)
            );
            return Err(Status::UNSUPPORTED);
        }
        HostSource::None => {
            efi_println!("Pinfold: firmware published neither a DT nor an ACPI 2.0 table");
            return Err(Status::NOT_FOUND);
        }
    }

    let bundle = find_bundle(dtb_blob);
    match &bundle {
        Some(b) => efi_println!(
            "Pinfold: boot bundle from {}: {} ({} bytes) at {:#x}",
            b.source,
            b.name,
            b.len,
            b.addr
        ),
        None => efi_println!("Pinfold: no boot bundle handed over or found; using the image's own"),
    }
    if let Some(b) = &bundle {
        arch::clean_dcache_range(b.addr, b.len);
    }
    if let Some(blob) = dtb_blob {
        arch::clean_dcache_range(blob.as_ptr() as u64, blob.len() as u64);
    }
    efi_println!("Pinfold: exiting boot services");

    // SAFETY: no protocol is open any more (every ScopedProtocol above was
    // dropped) and nothing keeps a pool allocation; from here on only our
    // own heap and the memory the map says is ours are used.
    let map = unsafe { boot::exit_boot_services(None) };
    let descriptors: Vec<MemoryDescriptor> = map
        .entries()
        .map(|d| MemoryDescriptor {
            ty: d.ty.0,
            phys_start: d.phys_start,
            pages: d.page_count,
            attribute: d.att.bits(),
        })
        .collect();
    // ACPI tables stay where firmware put them; whoever reads them next runs
    // with the MMU off and must see memory, not firmware's cache.
    for d in &descriptors {
        if matches!(
            d.ty,
            decide::memory_type::ACPI_RECLAIM | decide::memory_type::ACPI_NVS
        ) {
            arch::clean_dcache_range(d.phys_start, d.pages * decide::EFI_PAGE_SIZE);
        }
    }
    let handoff = Box::new(BootHandoff {
        dtb,
        rsdp,
        bundle: bundle.map(|b| (b.addr, b.len)),
        memory: Some(decide::memory_from_efi(&descriptors)),
        boot_counter,
    });
    drop(descriptors);
    drop(map);
    // SAFETY: boot services are gone; the handoff is in our heap, inside the
    // image range the trampoline cleans before the MMU goes off.
    unsafe { pinfold_efi_leave_firmware(Box::into_raw(handoff).cast(), image_start, image_size) }
}

/// After the trampoline: on the boot stack, MMU and caches off.
#[no_mangle]
extern "C" fn pinfold_efi_resume(handoff: *mut c_void) -> ! {
    // SAFETY: `run` leaked this box for us; nothing else refers to it.
    let handoff = unsafe { Box::from_raw(handoff.cast::<BootHandoff>()) };
    crate::boot(*handoff)
}

/// A bundle copied into loader memory.
struct Bundle {
    source: &'static str,
    name: String,
    addr: u64,
    len: u64,
}

/// Where the bundle comes from, in order: LoadFile2 initrd, the DT's
/// /chosen initrd, a file beside the image (TFTP, then HTTP).
fn find_bundle(dtb: Option<&[u8]>) -> Option<Bundle> {
    if let Some(b) = load_file2_initrd() {
        return Some(b);
    }
    if let Some(b) = dtb.and_then(chosen_initrd) {
        return Some(b);
    }
    let (device, path) = boot_device()?;
    if let Some(b) = fetch_tftp(device) {
        return Some(b);
    }
    fetch_http(&path)
}

/// `len` bytes of loader data, page aligned (so 8-byte aligned).
fn loader_pages(len: u64) -> Option<u64> {
    let pages = len.div_ceil(decide::EFI_PAGE_SIZE).max(1) as usize;
    boot::allocate_pages(AllocateType::AnyPages, MemoryType::LOADER_DATA, pages)
        .ok()
        .map(|p| p.as_ptr() as u64)
}

fn copied(source: &'static str, name: String, data: &[u8]) -> Option<Bundle> {
    let addr = loader_pages(data.len() as u64)?;
    // SAFETY: fresh loader pages of at least data.len() bytes.
    unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), addr as *mut u8, data.len()) };
    Some(Bundle {
        source,
        name,
        addr,
        len: data.len() as u64,
    })
}

fn load_file2_initrd() -> Option<Bundle> {
    let path: &DevicePath = <&DevicePath>::try_from(&INITRD_MEDIA_PATH[..]).ok()?;
    let mut remaining = path;
    let handle = boot::locate_device_path::<LoadFile2>(&mut remaining).ok()?;
    let mut lf2 = boot::open_protocol_exclusive::<LoadFile2>(handle).ok()?;
    // The loader's allocation is pool memory: copy it into pages of ours.
    let data = lf2.load_file(path).ok()?;
    copied("LoadFile2 initrd", String::from("(initrd)"), &data)
}

fn chosen_initrd(dtb: &[u8]) -> Option<Bundle> {
    let (start, len) = pinfold_hv::dtb::chosen_initrd(dtb).ok()??;
    // SAFETY: the boot loader loaded the initrd there and named it in the
    // DT it installed; it is loader memory nobody writes now.
    let data = unsafe { core::slice::from_raw_parts(start as *const u8, len as usize) };
    copied(
        "the DT's /chosen initrd",
        alloc::format!("{start:#x}+{len:#x}"),
        data,
    )
}

/// The loaded image's device handle and its full device path (device +
/// file: for HTTP boot it ends in the URI node).
fn boot_device() -> Option<(Handle, Box<DevicePath>)> {
    let image = boot::image_handle();
    let device = {
        let loaded = open_get::<LoadedImage>(image)?;
        loaded.device()?
    };
    let path = open_get::<LoadedImageDevicePath>(image)?;
    Some((device, path.to_boxed()))
}

/// Opens `P` on `handle` without taking it from its driver.
fn open_get<P: ProtocolPointer + ?Sized>(handle: Handle) -> Option<boot::ScopedProtocol<P>> {
    // SAFETY: GetProtocol does not take the protocol from its driver; the
    // scoped protocol is dropped before ExitBootServices.
    unsafe {
        boot::open_protocol::<P>(
            OpenProtocolParams {
                handle,
                agent: boot::image_handle(),
                controller: None,
            },
            OpenProtocolAttributes::GetProtocol,
        )
    }
    .ok()
}

fn cstr(bytes: &[u8]) -> &str {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    core::str::from_utf8(&bytes[..end]).unwrap_or("")
}

/// The bundle over TFTP from the server that PXE-booted the image, named
/// after the boot file the DHCP answer gave.
fn fetch_tftp(device: Handle) -> Option<Bundle> {
    let mut pxe = open_get::<BaseCode>(device)?;
    let mode = pxe.mode();
    if !mode.dhcp_ack_received() {
        return None;
    }
    let ack: &uefi::proto::network::pxe::DhcpV4Packet = mode.dhcp_ack().as_ref();
    let server = IpAddr::V4(Ipv4Addr::from(ack.bootp_si_addr));
    let boot_file = String::from(cstr(&ack.bootp_boot_file));
    let mac = (ack.bootp_hw_addr_len == 6).then(|| {
        let mut mac = [0u8; 6];
        mac.copy_from_slice(&ack.bootp_hw_addr[..6]);
        mac
    });
    for name in decide::bundle_candidates(&boot_file, mac.as_ref()) {
        let mut z = Vec::from(name.as_bytes());
        z.push(0);
        let Ok(file) = CStr8::from_bytes_with_nul(&z) else {
            continue;
        };
        let Ok(size) = pxe.tftp_get_file_size(&server, file) else {
            efi_println!("Pinfold: tftp://{server}/{name}: not found");
            continue;
        };
        let addr = loader_pages(size)?;
        // SAFETY: fresh loader pages of at least `size` bytes.
        let buf = unsafe { core::slice::from_raw_parts_mut(addr as *mut u8, size as usize) };
        match pxe.tftp_read_file(&server, file, Some(buf)) {
            Ok(len) => {
                return Some(Bundle {
                    source: "TFTP",
                    name: alloc::format!("tftp://{server}/{name}"),
                    addr,
                    len,
                })
            }
            Err(e) => efi_println!("Pinfold: tftp://{server}/{name}: {:?}", e.status()),
        }
    }
    None
}

/// The bundle over HTTP from beside the image's own URI (HTTP boot: the
/// loaded image's device path ends in a URI node; no initrd is handed over
/// on this path).
fn fetch_http(path: &DevicePath) -> Option<Bundle> {
    let mut uri = None;
    let mut mac = None;
    for node in path.node_iter() {
        if node.device_type().0 != DP_MESSAGING {
            continue;
        }
        match node.sub_type().0 {
            DP_URI => uri = core::str::from_utf8(node.data()).ok().map(String::from),
            DP_MAC if node.data().len() >= 6 => {
                let mut m = [0u8; 6];
                m.copy_from_slice(&node.data()[..6]);
                mac = Some(m);
            }
            _ => {}
        }
    }
    let uri = uri?;
    let uri = String::from(uri.trim_end_matches('\0'));
    let mut remaining = path;
    let nic = boot::locate_device_path::<HttpBinding>(&mut remaining).ok()?;
    let mut http = HttpHelper::new(nic).ok()?;
    http.configure().ok()?;
    for url in decide::bundle_candidates(&uri, mac.as_ref()) {
        match http_get(&mut http, &url) {
            Ok(Some((addr, len))) => {
                return Some(Bundle {
                    source: "HTTP",
                    name: url,
                    addr,
                    len,
                })
            }
            Ok(None) => efi_println!("Pinfold: {url}: not found"),
            Err(status) => efi_println!("Pinfold: {url}: {status:?}"),
        }
    }
    None
}

/// GET `url` into fresh loader pages; None on a status other than 200.
fn http_get(http: &mut HttpHelper, url: &str) -> Result<Option<(u64, u64)>, Status> {
    use uefi_raw::protocol::network::http::HttpStatusCode;
    http.request_get(url).map_err(|e| e.status())?;
    let first = http.response_first(true).map_err(|e| e.status())?;
    if first.status != HttpStatusCode::STATUS_200_OK {
        // The rest of an error body is left unread; the next request on
        // this connection may then fail, and so does the fallback.
        return Ok(None);
    }
    let len = first
        .headers
        .iter()
        .find(|(name, _)| name == "content-length")
        .and_then(|(_, value)| value.trim().parse::<u64>().ok())
        .ok_or(Status::PROTOCOL_ERROR)?;
    let addr = loader_pages(len).ok_or(Status::OUT_OF_RESOURCES)?;
    // SAFETY: fresh loader pages of at least `len` bytes.
    let buf = unsafe { core::slice::from_raw_parts_mut(addr as *mut u8, len as usize) };
    let mut have = first.body.len().min(buf.len());
    buf[..have].copy_from_slice(&first.body[..have]);
    while (have as u64) < len {
        let mut chunk = Vec::new();
        let got = http.response_more(&mut chunk).map_err(|e| e.status())?;
        if got.is_empty() {
            return Err(Status::END_OF_FILE);
        }
        let n = got.len().min(buf.len() - have);
        buf[have..have + n].copy_from_slice(&got[..n]);
        have += n;
    }
    Ok(Some((addr, len)))
}
