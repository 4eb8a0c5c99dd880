//! The runtime partition plan: what the xtask hands the hypervisor, as a blob
//! with a magic and a revision, appended to the image together with the
//! kernel and initrd images it names.
//!
//! Payload layout (all little endian, every image 4 KiB aligned):
//!
//! ```text
//! offset 0   PayloadHeader { magic "PINFPAYL", revision u32, plan_len u32 }
//! offset 16  plan blob (postcard-encoded `Plan`)
//! ...        images, at `ImageRef::offset` from the payload start
//! ```

use alloc::string::String;
use alloc::vec::Vec;
use serde::{Deserialize, Serialize};

/// Magic at the start of the payload appended to `pinfold.bin`.
pub const PAYLOAD_MAGIC: [u8; 8] = *b"PINFPAYL";
/// Bumped whenever the encoding of `Plan` changes.
pub const PLAN_REVISION: u32 = 8;
/// Size of the fixed payload header that precedes the plan blob.
pub const PAYLOAD_HEADER_LEN: usize = 16;
/// Alignment of every image inside the payload.
pub const IMAGE_ALIGN: u64 = 4096;
/// Longest partition name (it prefixes console lines).
pub const NAME_MAX: usize = 15;

/// The whole machine split into partitions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    pub partitions: Vec<PartitionPlan>,
    /// Images in the payload; partitions refer to them by index so that two
    /// partitions booting the same kernel share one copy.
    pub images: Vec<ImageRef>,
}

/// Where an image sits inside the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRef {
    /// Byte offset from the start of the payload (multiple of `IMAGE_ALIGN`).
    pub offset: u64,
    pub size: u64,
    /// The image's SHA-256 (computed at build time; the bundle's signature
    /// covers it).
    pub sha256: [u8; 32],
}

/// How the kernel image is entered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum KernelFormat {
    /// Linux arm64 `Image`: header honoured (text_offset, image_size).
    LinuxImage,
    /// Raw binary: loaded at RAM base + 0x80000, entered with x0 = DTB.
    Raw,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelPlan {
    /// Index into `Plan::images`.
    pub image: u32,
    pub format: KernelFormat,
}

/// A device passed through to one partition: MMIO mapped 1:1 in stage 2 and
/// its SPIs forwarded HW-linked. What the guest DTB's node for it is made
/// of: `name` (the node name, `name@<first mmio base>`), `compatible`, `reg`
/// from `mmio`, `interrupts` from `spis`, or the host node's properties
/// when `host_node` names one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DevicePlan {
    pub name: String,
    pub mmio: Vec<MmioRange>,
    /// SPI INTIDs (32..1019) owned by the partition.
    pub spis: Vec<u32>,
    /// The guest DT node's `compatible` (a single string), if the plan
    /// gives one.
    pub compatible: Option<String>,
    /// A node of the host DT (absolute path, e.g. `/pl061@9030000`) whose
    /// properties are copied into the guest's node for this device.
    pub host_node: Option<String>,
}

/// A PCI function by segment:bus:device.function, as a plan's `pci` list
/// names it (`"0000:00:02.0"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct PciAddress {
    pub segment: u16,
    pub bus: u8,
    pub device: u8,
    pub function: u8,
}

impl PciAddress {
    /// Parses `SSSS:BB:DD.F` (hex; device 0..=0x1f, function 0..=7); None
    /// for anything else.
    pub fn parse(text: &str) -> Option<PciAddress> {
        let (segment, rest) = text.split_once(':')?;
        let (bus, rest) = rest.split_once(':')?;
        let (device, function) = rest.split_once('.')?;
        let hex = |s: &str, digits: usize| {
            (s.len() == digits && s.bytes().all(|b| b.is_ascii_hexdigit()))
                .then(|| u32::from_str_radix(s, 16).ok())
                .flatten()
        };
        let (segment, bus) = (hex(segment, 4)?, hex(bus, 2)?);
        let (device, function) = (hex(device, 2)?, hex(function, 1)?);
        (device < 32 && function < 8).then_some(PciAddress {
            segment: segment as u16,
            bus: bus as u8,
            device: device as u8,
            function: function as u8,
        })
    }
}

impl core::fmt::Display for PciAddress {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{}",
            self.segment, self.bus, self.device, self.function
        )
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MmioRange {
    pub base: u64,
    pub size: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsolePlan {
    /// Host UART input goes to this partition (at most one partition).
    pub input: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionPlan {
    pub name: String,
    /// vCPU i runs only on physical CPU `cpus[i]` (index in the host DTB's
    /// /cpus order).
    pub cpus: Vec<u32>,
    /// Bytes of RAM, a multiple of 2 MiB; the guest sees it at 0x4000_0000.
    pub ram_size: u64,
    pub kernel: KernelPlan,
    /// Index into `Plan::images`.
    pub initrd: Option<u32>,
    pub bootargs: String,
    pub console: ConsolePlan,
    pub devices: Vec<DevicePlan>,
    /// May issue management hypercalls.
    pub management: bool,
    /// Owns the host's PCIe host bridge; RAM is mapped at IPA == PA.
    pub pci_host_bridge: bool,
    /// PCI functions assigned to it (behind a virtual host bridge of its
    /// own, `hv::vpci`); RAM is then mapped at IPA == PA too.
    pub pci: Vec<PciAddress>,
    /// SHA-256 of the management API's bearer token, if the plan sets one
    /// (the token itself never travels in a plan).
    pub token_sha256: Option<[u8; 32]>,
    /// Booted by the hypervisor at start (otherwise it waits for a start call).
    pub autostart: bool,
    /// The partition sees its CPUs' PMU; when false every PMU register
    /// traps and reads as UNDEFINED.
    pub pmu: bool,
    /// Crash detection, restart policy and graceful shutdown.
    pub lifecycle: LifecyclePlan,
    /// (management partition only) Where the manager keeps the host's
    /// configuration across reboots: an `http://` URL of a directory
    /// (`config.toml` and `images/<sha256>` under it; docs/DEPLOY.md).
    pub config_store: Option<String>,
    /// (management partition only) The REST API speaks HTTPS with the
    /// certificate built into the manager's image (the default); false:
    /// plain HTTP, an opt-in (docs/CONFIG.md, `api_tls`).
    pub api_tls: bool,
    /// The interrupt controller interface the partition asks for (`gic`):
    /// checked against the host's GIC at build time, at boot and at run
    /// time by `pinfold_hv::gichost::interface_for` (docs/CONFIG.md).
    pub gic: GicSetting,
}

/// A partition's `gic`: which virtual interrupt controller it wants. The
/// interface it gets is decided against the host (`vgic5::choose_interface`
/// in the hypervisor): `Auto` is the host's native kind (the GICv3 interface
/// on a GICv3/v4 host), `V3` the GICv3 interface (on a GICv5 host only with
/// FEAT_GCIE_LEGACY), `V5` a native GICv5 one (only on a GICv5 host).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GicSetting {
    #[default]
    Auto,
    V3,
    V5,
}

impl GicSetting {
    pub const ALL: [GicSetting; 3] = [GicSetting::Auto, GicSetting::V3, GicSetting::V5];

    /// As written in a plan and in the API: `"auto"`, `"v3"`, `"v5"`.
    pub const fn name(self) -> &'static str {
        match self {
            GicSetting::Auto => "auto",
            GicSetting::V3 => "v3",
            GicSetting::V5 => "v5",
        }
    }

    pub fn parse(text: &str) -> Option<GicSetting> {
        GicSetting::ALL.into_iter().find(|g| g.name() == text)
    }
}

impl PartitionPlan {
    /// A plain Linux partition: no initrd, bootargs or devices, console
    /// output only, stopped until started, PMU passed, default lifecycle.
    pub fn new(name: String, cpus: Vec<u32>, ram_size: u64, kernel: KernelPlan) -> Self {
        PartitionPlan {
            name,
            cpus,
            ram_size,
            kernel,
            initrd: None,
            bootargs: String::new(),
            console: ConsolePlan { input: false },
            devices: Vec::new(),
            management: false,
            pci_host_bridge: false,
            pci: Vec::new(),
            token_sha256: None,
            autostart: false,
            pmu: true,
            lifecycle: LifecyclePlan::default(),
            config_store: None,
            api_tls: true,
            gic: GicSetting::Auto,
        }
    }
}

/// When a partition that stopped on its own is started again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum RestartMode {
    /// It stays stopped (or crashed).
    #[default]
    Never,
    /// After a crash (watchdog, hung vCPU, fatal fault), up to the limit.
    OnCrash,
    /// After a crash or a guest power-off, up to the limit.
    Always,
}

/// How the hypervisor watches a partition and what it does when it stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LifecyclePlan {
    pub restart: RestartMode,
    /// Restarts the policy may make in a row (0 = no limit).
    pub restart_limit: u32,
    /// Period of the emulated SBSA watchdog, enabled before entry, and of
    /// the hung-vCPU check, in seconds (0 = neither).
    pub watchdog_s: u32,
    /// After the power button, how long the guest has to power off before
    /// it is stopped by force.
    pub shutdown_timeout_s: u32,
}

impl Default for LifecyclePlan {
    fn default() -> Self {
        LifecyclePlan {
            restart: RestartMode::Never,
            restart_limit: 0,
            watchdog_s: 0,
            shutdown_timeout_s: 30,
        }
    }
}

/// Why a payload could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayloadError {
    /// Shorter than its header or than the plan length it declares.
    Truncated,
    /// The magic is not `PINFPAYL`.
    BadMagic,
    /// Built for another revision of the plan format.
    Revision(u32),
    /// The plan blob does not decode.
    Decode,
    /// An image reference points outside the payload.
    ImageOutOfBounds(u32),
}

impl Plan {
    /// Encodes the plan with the payload header in front (no images).
    pub fn encode_header_and_plan(&self) -> Vec<u8> {
        let blob = postcard::to_allocvec(self).unwrap_or_default();
        let mut out = Vec::with_capacity(PAYLOAD_HEADER_LEN + blob.len());
        out.extend_from_slice(&PAYLOAD_MAGIC);
        out.extend_from_slice(&PLAN_REVISION.to_le_bytes());
        out.extend_from_slice(&(blob.len() as u32).to_le_bytes());
        out.extend_from_slice(&blob);
        out
    }

    /// Decodes the plan from a payload and checks that every image lies
    /// inside it.
    pub fn decode(payload: &[u8]) -> Result<Plan, PayloadError> {
        let header = payload
            .get(..PAYLOAD_HEADER_LEN)
            .ok_or(PayloadError::Truncated)?;
        if header[..8] != PAYLOAD_MAGIC {
            return Err(PayloadError::BadMagic);
        }
        let revision = u32::from_le_bytes([header[8], header[9], header[10], header[11]]);
        if revision != PLAN_REVISION {
            return Err(PayloadError::Revision(revision));
        }
        let plan_len =
            u32::from_le_bytes([header[12], header[13], header[14], header[15]]) as usize;
        let blob = payload
            .get(PAYLOAD_HEADER_LEN..PAYLOAD_HEADER_LEN + plan_len)
            .ok_or(PayloadError::Truncated)?;
        let plan: Plan = postcard::from_bytes(blob).map_err(|_| PayloadError::Decode)?;
        for (i, image) in plan.images.iter().enumerate() {
            let end = image.offset.checked_add(image.size);
            if end.is_none_or(|end| end > payload.len() as u64) {
                return Err(PayloadError::ImageOutOfBounds(i as u32));
            }
        }
        Ok(plan)
    }

    /// The bytes of image `index` inside `payload`.
    pub fn image<'p>(&self, payload: &'p [u8], index: u32) -> Option<&'p [u8]> {
        let image = self.images.get(index as usize)?;
        payload.get(image.offset as usize..(image.offset + image.size) as usize)
    }
}
