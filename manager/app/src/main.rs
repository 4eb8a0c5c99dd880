//! Pinfold's management partition: the REST API and the web UI, served by
//! our HTTP server (`server`: an event loop over non-blocking sockets and a
//! worker pool, on manager/http) on the Hermit unikernel. Everything it knows it asks the
//! hypervisor through management hypercalls (HVC); it never touches another
//! partition's memory.
//!
//! Every request goes through `pinfold_manager_api::serve`, which takes the
//! router's lock per request, or per 64 KiB chunk of an image upload (so
//! the upload's progress can be read meanwhile), and runs image fetches in
//! threads of their own.
//!
//! It tells the hypervisor how it is (MGMT_REPORT: serving, or no network
//! device it can drive, or another failure), and whatever happens to the
//! API it keeps its console: a few line commands read from its UART
//! (`help`, `status`, `poweroff`, `panic`). Without a supported NIC it
//! lists the PCI functions it has (PCI_FUNCTIONS) and stays up for that
//! console instead of exiting.
//!
//! A follower thread reads every partition's console into its history and
//! the hypervisor's events into the log once a second; each event stream
//! (`GET /api/v1/events/stream`) gets a thread of its own, at most
//! `events::MAX_STREAMS` (docs/MANAGER.md, "Threads, events and console
//! history", "The HTTP server"). With a `config_store` in its plan entry a
//! store thread restores the stored configuration once, sends
//! CONFIG_APPLIED, then writes every change back about once a second
//! (`pinfold_manager_api::store`, docs/DEPLOY.md, "Configuration store").
//!
//! Its global allocator counts what it holds (Hermit's allocator behind a
//! counting wrapper): `/metrics` shows the heap in use and its peak
//! (docs/MANAGER.md, "Memory").

mod server;
mod tls;

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Write;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use pinfold_abi::{
    decode_reply, GuestBuffer, ManagerStatus, PciFunction, Request as AbiRequest, Return,
    MAX_BUFFER_LEN, MAX_REPORT_LEN,
};
use pinfold_manager_api::memory::HeapCounters;
use pinfold_manager_api::store;
use pinfold_manager_api::{HvcBackend, Hypercall, Router, StaticFile};
use server::WORKER_STACK_BYTES;

mod selftest;

/// Where the server listens (all interfaces: the address comes from DHCP).
const LISTEN: &str = "0.0.0.0:8080";
/// How often the follower thread reads every partition's console into its
/// history.
const FOLLOW_EVERY: Duration = Duration::from_secs(1);

pub(crate) type SharedRouter = Arc<Mutex<Router<HvcBackend<Hvc>>>>;

/// What the manager's heap holds, for `/metrics`.
static HEAP: HeapCounters = HeapCounters::new();

/// Hermit's allocator (std's `System`), counted in [`HEAP`].
struct Counting;

// SAFETY: every call goes to `System` unchanged; the wrapper only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            HEAP.allocated(layout.size());
        }
        ptr
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if !ptr.is_null() {
            HEAP.allocated(layout.size());
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) };
        HEAP.freed(layout.size());
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let new = unsafe { System.realloc(ptr, layout, new_size) };
        if !new.is_null() {
            HEAP.reallocated(layout.size(), new_size);
        }
        new
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The web UI, embedded at build time (web-ui/dist).
static WEB_UI: &[StaticFile] = include!(concat!(env!("OUT_DIR"), "/web_ui.rs"));

/// The buffer the hypervisor writes replies into. It lives in the image,
/// which the loader maps at its physical address (VA == IPA), so its
/// address is also its IPA.
#[repr(C, align(4096))]
struct HvcBuffer([u8; MAX_BUFFER_LEN as usize]);

static mut HVC_BUFFER: HvcBuffer = HvcBuffer([0; MAX_BUFFER_LEN as usize]);

/// HVC to Pinfold. Only one exists (it owns `HVC_BUFFER`).
struct Hvc {
    buf: &'static mut [u8],
}

impl Hvc {
    /// # Safety
    /// Call once: the returned value owns the static buffer.
    unsafe fn take() -> Hvc {
        // SAFETY: the caller calls this once, so this is the only reference.
        let buf = unsafe { &mut (*std::ptr::addr_of_mut!(HVC_BUFFER)).0 };
        Hvc { buf }
    }
}

/// One HVC to Pinfold with X0..X5 = `regs`; X0..X3 back.
fn hvc_call(regs: [u64; 6]) -> [u64; 4] {
    let (mut x0, mut x1, mut x2, mut x3) = (regs[0], regs[1], regs[2], regs[3]);
    // SAFETY: an SMCCC 1.1 call to the hypervisor: it reads x0-x5,
    // writes x0-x3 and the buffer the call names (ours), and preserves the
    // rest except x4-x17 which SMCCC allows it to clobber.
    unsafe {
        std::arch::asm!(
            "hvc #0",
            inout("x0") x0, inout("x1") x1, inout("x2") x2, inout("x3") x3,
            inout("x4") regs[4] => _, inout("x5") regs[5] => _,
            out("x6") _, out("x7") _, out("x8") _, out("x9") _, out("x10") _,
            out("x11") _, out("x12") _, out("x13") _, out("x14") _, out("x15") _,
            out("x16") _, out("x17") _,
            options(nostack)
        );
    }
    [x0, x1, x2, x3]
}

impl Hypercall for Hvc {
    fn hvc(&mut self, regs: [u64; 6]) -> [u64; 4] {
        hvc_call(regs)
    }

    fn buffer_ipa(&self) -> u64 {
        self.buf.as_ptr() as u64
    }

    fn buffer(&mut self) -> &mut [u8] {
        self.buf
    }
}

/// The buffer of the calls made outside the router (MGMT_REPORT,
/// PCI_FUNCTIONS). Like `HVC_BUFFER` it is in the image, so its address is
/// its IPA.
#[repr(C, align(4096))]
struct SideBuffer([u8; 4096]);

static SIDE_BUFFER: Mutex<SideBuffer> = Mutex::new(SideBuffer([0; 4096]));

/// What the manager last told the hypervisor, for the console's `status`.
static STATE: Mutex<(ManagerStatus, String)> = Mutex::new((ManagerStatus::Starting, String::new()));

/// Tells the hypervisor (MGMT_REPORT) and remembers it for `status`.
fn report(status: ManagerStatus, detail: &str) {
    let mut cut = detail.len().min(MAX_REPORT_LEN as usize);
    while !detail.is_char_boundary(cut) {
        cut -= 1;
    }
    let detail = &detail[..cut];
    if let Ok(mut state) = STATE.lock() {
        *state = (status, detail.to_string());
    }
    let Ok(mut side) = SIDE_BUFFER.lock() else {
        return;
    };
    side.0[..detail.len()].copy_from_slice(detail.as_bytes());
    let request = AbiRequest::MgmtReport {
        status,
        buf: GuestBuffer {
            ipa: side.0.as_ptr() as u64,
            len: detail.len().max(1) as u64,
        },
    };
    if let Err(err) = request.decode_return(&hvc_call(request.encode())) {
        // A hypervisor older than ABI 2.1 does not know the call.
        eprintln!("pinfold-manager: MGMT_REPORT refused: {err}");
    }
}

/// The PCI functions behind our host bridge, as the hypervisor found them.
fn pci_functions() -> Result<Vec<PciFunction>, String> {
    let mut side = SIDE_BUFFER
        .lock()
        .map_err(|_| "buffer poisoned".to_string())?;
    let request = AbiRequest::PciFunctions {
        // The hypervisor writes through this address during the call.
        buf: GuestBuffer {
            ipa: side.0.as_mut_ptr() as u64,
            len: side.0.len() as u64,
        },
    };
    match request.decode_return(&hvc_call(request.encode())) {
        Ok(Return::Written(n)) => {
            decode_reply(&side.0[..n as usize]).map_err(|err| format!("PCI_FUNCTIONS: {err}"))
        }
        Ok(other) => Err(format!("PCI_FUNCTIONS: unexpected reply {other:?}")),
        Err(err) => Err(format!("PCI_FUNCTIONS: {err}")),
    }
}

/// The network devices Hermit 0.11 drives: virtio-net (transitional and
/// modern, the first through our kernel patch) and the RTL8139.
const SUPPORTED_NICS: [(u16, u16); 3] = [(0x1af4, 0x1000), (0x1af4, 0x1041), (0x10ec, 0x8139)];

/// Why the API could not start: no NIC we drive (with every function
/// found), or something else.
fn diagnose(listen_error: &str) -> (ManagerStatus, String) {
    match pci_functions() {
        Ok(found)
            if !found
                .iter()
                .any(|f| SUPPORTED_NICS.contains(&(f.vendor_id, f.device_id))) =>
        {
            let list: Vec<String> = found
                .iter()
                .map(|f| format!("{:04x}:{:04x}", f.vendor_id, f.device_id))
                .collect();
            (
                ManagerStatus::NoNetworkDevice,
                format!(
                    "no supported network device (found {})",
                    if list.is_empty() {
                        "no PCI function".to_string()
                    } else {
                        list.join(" ")
                    }
                ),
            )
        }
        Ok(_) => (
            ManagerStatus::Failed,
            format!("cannot listen on {LISTEN}: {listen_error}"),
        ),
        Err(err) => (
            ManagerStatus::Failed,
            format!("cannot listen on {LISTEN}: {listen_error} ({err})"),
        ),
    }
}

/// Where our loader maps the PL011 (manager/loader's `UART_VA`; the UART's
/// offset in its page is 0 on QEMU virt).
const UART_VA: usize = 0x1000;
const UARTDR: usize = 0x000;
const UARTFR: usize = 0x018;
const UARTFR_RXFE: u32 = 1 << 4;

/// One byte of console input, if the UART has one. Hermit 0.11 on aarch64
/// has no console input, so the manager reads its (emulated) PL011 itself.
fn uart_getc() -> Option<u8> {
    // SAFETY: UART_VA is the PL011 our loader mapped as device memory and
    // Hermit keeps mapped (it writes its output there); reading FR has no
    // side effect and reading DR pops one received byte, which only this
    // thread does.
    unsafe {
        let fr = ((UART_VA + UARTFR) as *const u32).read_volatile();
        if fr & UARTFR_RXFE != 0 {
            return None;
        }
        Some(((UART_VA + UARTDR) as *const u32).read_volatile() as u8)
    }
}

/// The console: line commands on the UART, polled every 50 ms.
fn console_loop() -> ! {
    let mut line = Vec::new();
    loop {
        while let Some(byte) = uart_getc() {
            match byte {
                b'\r' | b'\n' => {
                    let text = String::from_utf8_lossy(&line).trim().to_string();
                    line.clear();
                    if !text.is_empty() {
                        console_command(&text);
                    }
                }
                _ if line.len() < 128 => line.push(byte),
                _ => {}
            }
        }
        thread::sleep(Duration::from_millis(50));
    }
}

fn console_command(command: &str) {
    match command {
        "help" => println!(
            "pinfold-manager: commands: help, status, poweroff (the hypervisor restarts the manager), panic (likewise)"
        ),
        "status" => {
            let (status, detail) = STATE
                .lock()
                .map(|s| s.clone())
                .unwrap_or((ManagerStatus::Failed, "state poisoned".into()));
            println!("pinfold-manager: status: {}: {detail}", status.name());
        }
        "poweroff" => {
            println!("pinfold-manager: powering off on request");
            let _ = std::io::stdout().flush();
            std::process::exit(0);
        }
        "panic" => panic!("pinfold-manager: panic requested on the console"),
        other => println!("pinfold-manager: unknown command `{other}` (try help)"),
    }
}

/// Ask the hypervisor for the SHA-256 of the REST API's bearer token (the
/// token itself never reaches the manager).
fn token_digest(hvc: &mut Hvc) -> Result<[u8; 32], String> {
    let request = AbiRequest::MgmtTokenDigest {
        buf: GuestBuffer {
            ipa: hvc.buffer_ipa(),
            len: 32,
        },
    };
    let ret = hvc.hvc(request.encode());
    match request.decode_return(&ret) {
        Ok(Return::Written(32)) => {
            let mut digest = [0u8; 32];
            digest.copy_from_slice(&hvc.buffer()[..32]);
            Ok(digest)
        }
        Ok(other) => Err(format!("unexpected reply {other:?}")),
        Err(err) => Err(format!("MGMT_TOKEN_DIGEST refused: {err:?}")),
    }
}

/// 32 bytes of the hypervisor's ENTROPY call (ABI 3.1), the seed of the
/// DRBG new credentials come from; the reason when there are none.
fn entropy_seed(hvc: &mut Hvc) -> Result<[u8; 32], String> {
    let request = AbiRequest::Entropy {
        buf: GuestBuffer {
            ipa: hvc.buffer_ipa(),
            len: 32,
        },
    };
    let ret = hvc.hvc(request.encode());
    match request.decode_return(&ret) {
        Ok(Return::Written(32)) => {
            let mut seed = [0u8; 32];
            seed.copy_from_slice(&hvc.buffer()[..32]);
            hvc.buffer()[..32].fill(0);
            Ok(seed)
        }
        Ok(other) => Err(format!("unexpected reply {other:?}")),
        Err(pinfold_abi::CallError::Refused(pinfold_abi::AbiError::NotFound)) => Err(
            "the hypervisor found no entropy source at boot: no credential will be generated"
                .to_string(),
        ),
        Err(err) => Err(format!("ENTROPY refused: {err:?}")),
    }
}

/// The follower: every partition's console into its history, and the
/// hypervisor's events into the log, about once a second (so neither is
/// lost while nobody asks).
fn follow_loop(router: &SharedRouter) -> ! {
    loop {
        if let Ok(mut r) = router.lock() {
            r.follow_consoles();
            r.poll_events();
        }
        thread::sleep(FOLLOW_EVERY);
    }
}

/// Redfish HTTP boots (`pinfold_manager_api::httpboot`): each partition
/// a Reset left waiting for its images is fetched and started, about once
/// a second; the fetch holds the router's lock one chunk at a time.
fn http_boot_loop(router: &SharedRouter) -> ! {
    loop {
        pinfold_manager_api::httpboot::run(router);
        thread::sleep(FOLLOW_EVERY);
    }
}

/// The configuration store (the management partition's `config_store`):
/// the stored configuration applied once and the stored credentials
/// restored, then every change of either written about once a second
/// (`pinfold_manager_api::store`).
fn store_loop(router: &SharedRouter) -> ! {
    let sentence = store::restore(router, &mut store::TcpStore);
    println!("pinfold-manager: {sentence}");
    let sentence = store::restore_credentials(router, &mut store::TcpStore);
    println!("pinfold-manager: {sentence}");
    let mut last = None;
    loop {
        thread::sleep(FOLLOW_EVERY);
        let outcome = store::sync_once(router, &mut store::TcpStore);
        if outcome != store::Synced::Nothing && last.as_ref() != Some(&outcome) {
            println!("pinfold-manager: configuration store: {outcome:?}");
        }
        last = Some(outcome);
    }
}

fn main() -> ExitCode {
    // Before anything else runs threads of ours: FP/SIMD registers must
    // survive Hermit's task switches (our kernel patch).
    match selftest::simd_threads() {
        Ok(what) => {
            println!("pinfold-manager: self-test FP/SIMD across task switches: ok ({what})")
        }
        Err(why) => {
            println!("pinfold-manager: self-test FP/SIMD across task switches: FAILED ({why})")
        }
    }
    // SAFETY: the only call.
    let mut hvc = unsafe { Hvc::take() };
    // No digest (no plan token and no entropy to make one): the API
    // refuses everything that needs a credential, and says why.
    let digest = match token_digest(&mut hvc) {
        Ok(d) => Some(d),
        Err(err) => {
            println!(
                "pinfold-manager: no boot credential ({err}): every request that needs one is refused"
            );
            None
        }
    };
    let seed = entropy_seed(&mut hvc);
    let mut api = Router::new(HvcBackend::new(hvc), digest, WEB_UI);
    match seed {
        Ok(seed) => api.seed_credentials(seed),
        Err(why) => println!("pinfold-manager: {why}"),
    }
    if let Some(names) = option_env!("PINFOLD_MANAGER_HOSTNAMES") {
        api.hosts.names = names
            .split(',')
            .map(|n| n.trim().to_ascii_lowercase())
            .filter(|n| !n.is_empty())
            .collect();
    }
    api.heap = Some(&HEAP);
    let router = Arc::new(Mutex::new(api));
    let console = thread::Builder::new()
        .stack_size(WORKER_STACK_BYTES)
        .spawn(|| console_loop());
    if let Err(err) = console {
        eprintln!("pinfold-manager: cannot start the console: {err}");
    }
    let listener = match std::net::TcpListener::bind(LISTEN) {
        Ok(listener) => listener,
        Err(err) => {
            // Not an exit: the partition stays up for its console, and the
            // hypervisor shows why there is no API.
            let (status, why) = diagnose(&err.to_string());
            println!(
                "pinfold-manager: {why}; the REST API is off, the console stays up (type help)"
            );
            report(status, &why);
            loop {
                thread::park();
            }
        }
    };
    // The plan's `api_tls = false` is the only way to plain HTTP.
    let want_tls = router.lock().map_or(true, |mut r| r.api_tls());
    let embedded = if want_tls { tls::EMBEDDED } else { None };
    if want_tls && tls::EMBEDDED.is_none() {
        println!("pinfold-manager: TLS: this image carries no certificate (built without one); the REST API is off");
        report(ManagerStatus::Failed, "TLS: no certificate in the image");
        loop {
            thread::park();
        }
    }
    let tls = match embedded {
        Some((cert, key)) => match tls::config(cert, key) {
            Ok(config) => {
                println!(
                    "pinfold-manager: TLS certificate SHA-256 fingerprint {}",
                    tls::fingerprint(cert)
                );
                Some(config)
            }
            Err(why) => {
                // Never plain HTTP in place of HTTPS: without its
                // certificate the API stays off.
                println!("pinfold-manager: TLS: {why}; the REST API is off");
                report(ManagerStatus::Failed, &format!("TLS: {why}"));
                loop {
                    thread::park();
                }
            }
        },
        None => None,
    };
    let scheme = if tls.is_some() {
        "https"
    } else {
        "http, plain: the plan's api_tls = false"
    };
    println!(
        "pinfold-manager: listening on {LISTEN} ({scheme}; {} web UI files)",
        WEB_UI.len()
    );
    report(ManagerStatus::Serving, &format!("listening on {LISTEN}"));
    let follower = router.clone();
    if let Err(err) = thread::Builder::new()
        .stack_size(WORKER_STACK_BYTES)
        .spawn(move || follow_loop(&follower))
    {
        eprintln!("pinfold-manager: cannot start the console follower: {err}");
    }
    let booter = router.clone();
    if let Err(err) = thread::Builder::new()
        .stack_size(pinfold_manager_api::fetch::FETCH_STACK_BYTES)
        .spawn(move || http_boot_loop(&booter))
    {
        eprintln!("pinfold-manager: cannot start the Redfish HTTP boot thread: {err}");
    }
    let store_url = router.lock().ok().and_then(|mut r| r.init_store());
    if let Some(url) = store_url {
        println!("pinfold-manager: configuration store {url}");
        let keeper = router.clone();
        if let Err(err) = thread::Builder::new()
            .stack_size(WORKER_STACK_BYTES)
            .spawn(move || store_loop(&keeper))
        {
            eprintln!("pinfold-manager: cannot start the configuration store: {err}");
        }
    }
    server::run(listener, router, tls)
}
