//! The UEFI way in. Firmware starts the image as a PE/COFF EFI application
//! (entry.S `pinfold_efi_entry`: relocate, clear BSS, then
//! `pinfold_efi_main`), with its MMU and caches on at EL2. Here, on the EFI
//! console: check the exception level, set up the EL2 heap (the image's
//! zero-filled tail), find the DTB and the ACPI RSDP in the configuration
//! tables, find the boot bundle (LoadFile2 initrd, the DT's /chosen initrd,
//! else a file beside the image over TFTP or HTTP) and copy it into loader
//! memory, read 32 bytes of EFI_RNG_PROTOCOL if firmware has it (boot
//! entropy), ExitBootServices, turn the memory map into RAM and reserved
//! ranges, leave firmware's MMU (`pinfold_efi_leave_firmware`) and continue
//! in the common boot with a `BootHandoff`. What is decided (memory types,
//! bundle names, DT or ACPI) is `pinfold_hv::efi`, host-tested.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::ffi::c_void;
use core::fmt::Write;
use core::net::{IpAddr, Ipv4Addr};
use core::ptr;

use pinfold_hv::efi::{self as decide, HostSource, MemoryDescriptor};
use pinfold_hv::memmap;
use uefi::boot::{self, AllocateType, MemoryType, OpenProtocolAttributes, OpenProtocolParams};
use uefi::mem::memory_map::MemoryMap;
use uefi::proto::device_path::{DevicePath, LoadedImageDevicePath};
use uefi::proto::loaded_image::LoadedImage;
use uefi::proto::media::load_file::LoadFile2;
use uefi::proto::network::http::{Http, HttpBinding};
use uefi::proto::network::ip4config2::Ip4Config2;
use uefi::proto::network::pxe::BaseCode;
use uefi::proto::ProtocolPointer;
use uefi::table::cfg::ConfigTableEntry;
use uefi::{guid, CStr8, Guid, Handle, Status};
use uefi_raw::protocol::network::http::{
    HttpAccessPoint, HttpConfigData, HttpHeader, HttpMessage, HttpMethod, HttpRequestData,
    HttpResponseData, HttpStatusCode, HttpToken, HttpV4AccessPoint, HttpVersion,
};
use uefi_raw::Boolean;

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
        HostSource::Acpi => efi_println!(
            "Pinfold: host described by ACPI (RSDP at {:#x}){}",
            rsdp.unwrap_or(0),
            dtb.map_or(String::new(), |d| alloc::format!(
                "; the DT at {d:#x} only for /chosen"
            ))
        ),
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
    // The wall clock, while runtime services still answer at their boot
    // addresses (the counter read with it).
    let efi_time = uefi::runtime::get_time().ok().map(|t| {
        let time = pinfold_hv::clock::EfiTime {
            year: t.year(),
            month: t.month(),
            day: t.day(),
            hour: t.hour(),
            minute: t.minute(),
            second: t.second(),
            nanosecond: t.nanosecond(),
            time_zone: t
                .time_zone()
                .unwrap_or(pinfold_hv::clock::EFI_UNSPECIFIED_TIMEZONE),
        };
        (time, arch::counter())
    });
    // Integer fields only: the uefi crate's Display of a Time formats the
    // zone with f32, which would pull float formatting into the image.
    match &efi_time {
        Some((t, _)) => efi_println!(
            "Pinfold: GetTime: {:04}-{:02}-{:02} {:02}:{:02}:{:02} (zone {})",
            t.year,
            t.month,
            t.day,
            t.hour,
            t.minute,
            t.second,
            t.time_zone
        ),
        None => efi_println!("Pinfold: GetTime failed; the clock will be the RTC's, if any"),
    }
    // Entropy while boot services last: EFI_RNG_PROTOCOL (edk2 offers it
    // when the machine has a virtio-rng device).
    let efi_rng = efi_rng();
    match &efi_rng {
        Some(b) => efi_println!("Pinfold: EFI_RNG_PROTOCOL: {} bytes", b.len()),
        None => efi_println!("Pinfold: no EFI_RNG_PROTOCOL"),
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
    let memory = decide::memory_from_efi(&descriptors);
    // ACPI tables stay where firmware put them; whoever reads them next runs
    // with the MMU off and must see memory, not firmware's cache.
    for &(base, len) in &memory.acpi {
        arch::clean_dcache_range(base, len);
    }
    let handoff = Box::new(BootHandoff {
        dtb,
        rsdp,
        bundle: bundle.map(|b| (b.addr, b.len)),
        memory: Some(memory),
        boot_counter,
        efi_time,
        efi_rng,
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

/// 32 bytes of EFI_RNG_PROTOCOL's default algorithm, if firmware has it.
fn efi_rng() -> Option<[u8; 32]> {
    let handle = boot::get_handle_for_protocol::<uefi::proto::rng::Rng>().ok()?;
    let mut rng = boot::open_protocol_exclusive::<uefi::proto::rng::Rng>(handle).ok()?;
    let mut bytes = [0u8; 32];
    rng.get_rng(None, &mut bytes).ok()?;
    Some(bytes)
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
    // HTTP boot configured its own child with the address its DHCP got;
    // ours uses the NIC's default address, which needs the IPv4 config
    // to be up (DHCP: the same server that answered HTTP boot's).
    let mut remaining = path;
    let ip4 = boot::locate_device_path::<Ip4Config2>(&mut remaining).ok()?;
    if let Err(e) = Ip4Config2::new(ip4).and_then(|mut c| c.ifup()) {
        efi_println!("Pinfold: no IPv4 address for HTTP: {:?}", e.status());
        return None;
    }
    let mut remaining = path;
    let nic = boot::locate_device_path::<HttpBinding>(&mut remaining).ok()?;
    for url in decide::bundle_candidates(&uri, mac.as_ref()) {
        match http_get(nic, &url) {
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

/// GET `url` into fresh loader pages through EFI_HTTP_PROTOCOL, on a child
/// of its own; None on a status other than 200. (Not the uefi crate's
/// HttpHelper: its wait loop reads the token's status through a `&mut`
/// the firmware writes behind, which the optimiser may keep in a register,
/// and the first response never completed in a release build. Here every
/// field firmware writes is read volatile.)
fn http_get(nic: Handle, url: &str) -> Result<Option<(u64, u64)>, Status> {
    let mut binding = open_get::<HttpBinding>(nic).ok_or(Status::UNSUPPORTED)?;
    let child = binding.create_child().map_err(|e| e.status())?;
    let result = match open_get::<Http>(child) {
        Some(mut http) => http_get_on(&mut http, url),
        None => Err(Status::UNSUPPORTED),
    };
    let _ = binding.destroy_child(child);
    result
}

fn http_get_on(http: &mut Http, url: &str) -> Result<Option<(u64, u64)>, Status> {
    let mut v4 = HttpV4AccessPoint {
        use_default_addr: Boolean::TRUE,
        ..Default::default()
    };
    let config = HttpConfigData {
        http_version: HttpVersion::HTTP_VERSION_11,
        time_out_millisec: 10_000,
        local_addr_is_ipv6: Boolean::FALSE,
        access_point: HttpAccessPoint { ipv4_node: &mut v4 },
    };
    http.configure(&config).map_err(|e| e.status())?;

    let url16: Vec<u16> = url.encode_utf16().chain(core::iter::once(0)).collect();
    let mut host = String::from(url.split('/').nth(2).ok_or(Status::INVALID_PARAMETER)?);
    host.push('\0');
    let request = HttpRequestData {
        method: HttpMethod::GET,
        url: url16.as_ptr(),
    };
    let mut headers = [HttpHeader {
        field_name: c"Host".as_ptr().cast(),
        field_value: host.as_ptr(),
    }];
    let mut message = HttpMessage::default();
    message.data.request = &request;
    message.header_count = headers.len();
    message.header = headers.as_mut_ptr();
    exchange(http, &mut message, Http::request)?;

    // The status line and headers first, no body buffer.
    let mut response = HttpResponseData {
        status_code: HttpStatusCode::STATUS_UNSUPPORTED,
    };
    let mut message = HttpMessage::default();
    message.data.response = &mut response;
    exchange(http, &mut message, Http::response)?;
    // SAFETY: firmware filled `response` and the header array (pool
    // memory, ours to free) before completing the token.
    let (status, length) = unsafe {
        let status = ptr::read_volatile(&response.status_code);
        let count = ptr::read_volatile(&message.header_count);
        let array = ptr::read_volatile(&message.header);
        (status, take_content_length(array, count))
    };
    if status != HttpStatusCode::STATUS_200_OK {
        return Ok(None);
    }
    let len = length.ok_or(Status::PROTOCOL_ERROR)?;
    let addr = loader_pages(len).ok_or(Status::OUT_OF_RESOURCES)?;
    let mut have = 0u64;
    let mut reported = 0;
    while have < len {
        let mut message = HttpMessage {
            body_length: (len - have) as usize,
            body: (addr + have) as *mut c_void,
            ..Default::default()
        };
        exchange(http, &mut message, Http::response)?;
        // SAFETY: firmware wrote how much of the buffer it filled.
        let got = unsafe { ptr::read_volatile(&message.body_length) } as u64;
        if got == 0 {
            return Err(Status::END_OF_FILE);
        }
        have += got.min(len - have);
        if have >> 23 != reported {
            reported = have >> 23;
            efi_println!("Pinfold: {url}: {} of {} MiB", have >> 20, len >> 20);
        }
    }
    Ok(Some((addr, len)))
}

/// Submits a token for `message` with `submit` (request or response) and
/// polls until firmware completes it; its status as the result.
fn exchange(
    http: &mut Http,
    message: &mut HttpMessage,
    submit: fn(&mut Http, &mut HttpToken) -> uefi::Result<()>,
) -> Result<(), Status> {
    let mut token = HttpToken {
        status: Status::NOT_READY,
        message,
        ..Default::default()
    };
    let token: *mut HttpToken = &mut token;
    // SAFETY: the token lives until it completed (or the cancel below);
    // it is read only through `token`, volatile, from here on.
    submit(http, unsafe { &mut *token }).map_err(|e| e.status())?;
    let deadline = arch::counter() + 30 * u64::from(arch::counter_frequency());
    loop {
        // SAFETY: as above; firmware writes the status when it completes.
        let status = unsafe { ptr::read_volatile(&(*token).status) };
        if status != Status::NOT_READY {
            return if status == Status::SUCCESS {
                Ok(())
            } else {
                Err(status)
            };
        }
        if arch::counter() > deadline {
            // SAFETY: as above.
            let _ = http.cancel(unsafe { &mut *token });
            return Err(Status::TIMEOUT);
        }
        let _ = http.poll();
    }
}

/// The Content-Length among `count` headers at `array`, freeing the
/// headers (UEFI 29.6.2.5: the caller frees the array and its strings).
///
/// # Safety
///
/// `array` and `count` are what firmware returned in a response message.
unsafe fn take_content_length(array: *mut HttpHeader, count: usize) -> Option<u64> {
    let array = ptr::NonNull::new(array)?;
    let mut length = None;
    for i in 0..count {
        // SAFETY: firmware wrote `count` entries of NUL-terminated strings.
        let header = unsafe { &*array.as_ptr().add(i) };
        let text = |p: *const u8| {
            // SAFETY: as above.
            unsafe { core::ffi::CStr::from_ptr(p.cast()) }.to_str().ok()
        };
        if text(header.field_name).is_some_and(|n| n.eq_ignore_ascii_case("content-length")) {
            length = text(header.field_value).and_then(|v| v.trim().parse().ok());
        }
        for field in [header.field_name, header.field_value] {
            if let Some(p) = ptr::NonNull::new(field.cast_mut()) {
                // SAFETY: pool memory firmware allocated for us.
                let _ = unsafe { boot::free_pool(p) };
            }
        }
    }
    // SAFETY: as above.
    let _ = unsafe { boot::free_pool(array.cast()) };
    length
}
