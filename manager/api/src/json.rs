//! The REST API's JSON bodies, one type per shape in the contract (shared with hvctl), and their conversion from the hypercall ABI's types.

use pinfold_abi::{
    HostInfo, PartitionDetail, PartitionState, PartitionSummary, VcpuInfo, VcpuPower,
};
use serde::{Deserialize, Serialize};

/// `GET /api/v1/host`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Host {
    pub version: String,
    /// "major.minor" of the hypercall ABI the hypervisor offers.
    pub abi_version: String,
    pub gic_version: u8,
    pub cpu_count: u32,
    pub ram_bytes: u64,
    pub uptime_ms: u64,
    /// The hypervisor's wall clock now, RFC 3339 UTC
    /// (`2026-12-01T13:45:00Z`); null when it has none.
    #[serde(default)]
    pub time: Option<String>,
    pub cpus: Vec<Cpu>,
    /// (ABI 3.3) The GIC as the hypervisor found it; null from a
    /// hypervisor without GIC_INFO.
    #[serde(default)]
    pub gic: Option<GicHost>,
}

/// The host's GIC in `GET /api/v1/host`: what the hardware offers (its ID
/// registers, read at boot), not whether Pinfold uses each feature.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GicHost {
    /// 3, 4 or 5.
    pub version: u8,
    /// "v3", "v4.0", "v4.1" or "v5".
    pub revision: String,
    pub its_count: u32,
    pub lpis: bool,
    pub direct_vlpi: bool,
    pub direct_vsgi: bool,
    /// false: from the host description only (the ID registers were not
    /// read).
    pub probed: bool,
    /// GICv5 only (null otherwise): IRSes.
    pub irs_count: Option<u32>,
    /// GICv5 only (null otherwise): FEAT_GCIE_LEGACY.
    pub gcie_legacy: Option<bool>,
}

impl From<&pinfold_abi::GicHost> for GicHost {
    fn from(g: &pinfold_abi::GicHost) -> GicHost {
        let v5 = g.version == 5;
        GicHost {
            version: g.version,
            revision: String::from(match (g.version, g.v4_1) {
                (5, _) => "v5",
                (4, true) => "v4.1",
                (4, false) => "v4.0",
                _ => "v3",
            }),
            its_count: g.its_count,
            lpis: g.lpis,
            direct_vlpi: g.direct_vlpi,
            direct_vsgi: g.direct_vsgi,
            probed: g.probed,
            irs_count: v5.then_some(g.irs_count),
            gcie_legacy: v5.then_some(g.gcie_legacy),
        }
    }
}

/// One physical CPU and the partition that owns it (`None` = nobody).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cpu {
    pub cpu: u32,
    pub partition: Option<String>,
}

/// `GET /api/v1/partitions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionList {
    pub partitions: Vec<Partition>,
}

/// A partition's life-cycle state as the API spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum State {
    Stopped,
    Running,
    Stopping,
    Starting,
    ShuttingDown,
    Crashed,
}

impl State {
    /// The API spelling, also used in tables.
    pub const fn as_str(self) -> &'static str {
        match self {
            State::Stopped => "stopped",
            State::Running => "running",
            State::Stopping => "stopping",
            State::Starting => "starting",
            State::ShuttingDown => "shutting_down",
            State::Crashed => "crashed",
        }
    }

    /// The value of the `pinfold_partition_state` metric.
    pub const fn metric(self) -> u8 {
        match self {
            State::Stopped => 0,
            State::Running => 1,
            State::Stopping => 2,
            State::Starting => 3,
            State::ShuttingDown => 4,
            State::Crashed => 5,
        }
    }
}

/// One partition in a list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Partition {
    pub name: String,
    pub state: State,
    pub cpus: Vec<u32>,
    pub ram_bytes: u64,
    pub uptime_ms: u64,
    pub boot_count: u32,
    pub management: bool,
    /// Its configuration (from the plan entry the hypervisor holds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<Config>,
    /// RFC 3339 UTC time of the last state change; null without a clock.
    #[serde(default)]
    pub state_since: Option<String>,
    /// Restarts its restart policy made since the hypervisor started.
    #[serde(default)]
    pub restarts: u32,
    /// Its last crash, if it crashed since the hypervisor started.
    #[serde(default)]
    pub last_crash: Option<LastCrash>,
    /// (ABI 3.3) The interrupt controller interface it got ("gicv3",
    /// "gicv5"); null from a hypervisor without GIC_INFO.
    #[serde(default)]
    pub gic_interface: Option<String>,
}

/// Why and when a partition last crashed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LastCrash {
    /// RFC 3339 UTC; null without a clock.
    pub time: Option<String>,
    /// `watchdog`, `vCPU N hung (...)`, `fatal fault: ...`.
    pub reason: String,
}

/// `GET /api/v1/partitions/{name}`: the summary plus faults and vCPUs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionDetailJson {
    #[serde(flatten)]
    pub summary: Partition,
    pub faults: u64,
    pub vcpus: Vec<Vcpu>,
}

/// A vCPU's PSCI power state as the API spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VcpuState {
    On,
    Off,
    OnPending,
}

impl VcpuState {
    pub const fn as_str(self) -> &'static str {
        match self {
            VcpuState::On => "on",
            VcpuState::Off => "off",
            VcpuState::OnPending => "on_pending",
        }
    }
}

/// One vCPU of a partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Vcpu {
    pub vcpu: u32,
    pub cpu: u32,
    pub state: VcpuState,
    pub exits: Exits,
    pub injected: u64,
}

/// Exits by class: the ABI's counters, which already serialise to the
/// REST shape (`{"mmio": .., "sysreg": .., ...}`).
pub use pinfold_abi::ExitCounts as Exits;

/// `POST .../start|stop|restart` (202).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransitionResult {
    pub name: String,
    pub state: State,
}

/// `GET .../console`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsoleChunk {
    /// The offset that was asked for.
    pub offset: u64,
    /// The offset to ask for next.
    pub next: u64,
    /// Bytes lost to the ring before `offset` could be read; `data` starts
    /// at `offset + dropped`.
    pub dropped: u64,
    pub data: String,
}

/// `POST .../console` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsoleInput {
    pub data: String,
}

/// `POST .../console` reply (202).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accepted {
    /// Bytes of `data` the partition took: always a prefix.
    pub accepted: u64,
    /// Bytes of `data` it did not take within the wait (0 when all were);
    /// the client sends them again, from byte `accepted` on. (Absent from
    /// managers before it was added: read as 0.)
    #[serde(default)]
    pub remaining: u64,
}

/// Every 4xx/5xx body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// Short code: bad_request, unauthorized, not_found, ...
    pub error: String,
    pub detail: String,
}

const NS_PER_MS: u64 = 1_000_000;

impl From<PartitionState> for State {
    fn from(state: PartitionState) -> Self {
        match state {
            PartitionState::Stopped => State::Stopped,
            PartitionState::Running => State::Running,
            PartitionState::Stopping => State::Stopping,
            PartitionState::Starting => State::Starting,
            PartitionState::ShuttingDown => State::ShuttingDown,
            PartitionState::Crashed => State::Crashed,
        }
    }
}

impl From<VcpuPower> for VcpuState {
    fn from(power: VcpuPower) -> Self {
        match power {
            VcpuPower::On => VcpuState::On,
            VcpuPower::Off => VcpuState::Off,
            VcpuPower::OnPending => VcpuState::OnPending,
        }
    }
}

impl From<&PartitionSummary> for Partition {
    fn from(p: &PartitionSummary) -> Self {
        Partition {
            name: p.name.clone(),
            state: p.state.into(),
            cpus: p.cpus.clone(),
            ram_bytes: p.ram_bytes,
            uptime_ms: p.uptime_ns / NS_PER_MS,
            boot_count: p.boot_count,
            management: p.management,
            config: None,
            state_since: p.state_since_ms.map(crate::time::rfc3339),
            restarts: p.restarts,
            last_crash: p.last_crash.as_ref().map(|c| LastCrash {
                time: c.unix_ms.map(crate::time::rfc3339),
                reason: c.reason.clone(),
            }),
            gic_interface: None,
        }
    }
}

impl From<&VcpuInfo> for Vcpu {
    fn from(v: &VcpuInfo) -> Self {
        Vcpu {
            vcpu: v.vcpu,
            cpu: v.cpu,
            state: v.power.into(),
            exits: v.exits,
            injected: v.injected,
        }
    }
}

impl From<&PartitionDetail> for PartitionDetailJson {
    fn from(d: &PartitionDetail) -> Self {
        let mut summary = Partition::from(&d.summary);
        summary.config = Some(Config::from_plan(&d.plan));
        PartitionDetailJson {
            summary,
            faults: d.faults,
            vcpus: d.vcpus.iter().map(Vcpu::from).collect(),
        }
    }
}

impl Host {
    /// Builds the host body; CPU owners are partition indices in the ABI
    /// and names here (an index with no partition reads as unowned).
    pub fn new(
        info: &HostInfo,
        abi_version: pinfold_abi::AbiVersion,
        partitions: &[PartitionSummary],
    ) -> Host {
        let name_of = |index: u32| {
            partitions
                .iter()
                .find(|p| p.index == index)
                .map(|p| p.name.clone())
        };
        Host {
            version: info.version.clone(),
            abi_version: abi_version.to_string(),
            gic_version: info.gic_version,
            cpu_count: info.cpu_count,
            ram_bytes: info.ram_bytes,
            uptime_ms: info.uptime_ns / NS_PER_MS,
            time: None,
            gic: None,
            cpus: info
                .cpus
                .iter()
                .map(|c| Cpu {
                    cpu: c.cpu,
                    partition: c.partition.and_then(name_of),
                })
                .collect(),
        }
    }
}

// ---------------------------------------------------------------------------
// Run-time partitions, resources and images (ABI 3.0)
// ---------------------------------------------------------------------------

/// A field-level error: `{"error", "detail", "field"}` (the plan field as
/// the build-time TOML check names it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FieldErrorBody {
    pub error: String,
    pub detail: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

/// How the kernel is entered, as the API spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum KernelFormat {
    /// A Linux arm64 `Image` (header honoured).
    #[default]
    Linux,
    /// A raw binary loaded at RAM base + 0x80000.
    Raw,
}

/// The restart policy, as the API spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Restart {
    #[default]
    Never,
    OnCrash,
    Always,
}

/// A pass-through MMIO window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mmio {
    pub base: u64,
    pub size: u64,
}

/// A pass-through device of a partition's config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Device {
    pub name: String,
    #[serde(default)]
    pub mmio: Vec<Mmio>,
    #[serde(default)]
    pub spis: Vec<u32>,
    #[serde(default)]
    pub compatible: Option<String>,
    #[serde(default)]
    pub host_node: Option<String>,
}

/// A partition's configuration (`config` in the partition JSON; the
/// fields of a create or change request).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    pub cpus: Vec<u32>,
    pub memory_mib: u64,
    /// Image id (decimal, as in `GET /api/v1/images`).
    pub kernel: Option<String>,
    pub kernel_format: KernelFormat,
    pub initrd: Option<String>,
    pub bootargs: String,
    pub autostart: bool,
    pub restart: Restart,
    pub restart_limit: u32,
    /// 0 = no watchdog.
    pub watchdog_s: u32,
    pub shutdown_timeout_s: u32,
    pub devices: Vec<Device>,
    /// PCI functions assigned to it (`"0000:00:02.0"`), as the plan's `pci`.
    #[serde(default)]
    pub pci: Vec<String>,
    /// The interrupt controller interface asked for: "auto", "v3", "v5"
    /// (the plan's `gic`).
    #[serde(default = "gic_auto")]
    pub gic: String,
}

fn gic_auto() -> String {
    String::from("auto")
}

/// `GET /api/v1/resources`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourcesJson {
    pub cpus: Vec<Cpu>,
    pub memory: Memory,
    pub images_bytes: u64,
    pub devices: Vec<DeviceUse>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Memory {
    pub total_bytes: u64,
    pub free_bytes: u64,
    pub largest_free_bytes: u64,
    pub ranges: Vec<RamRangeJson>,
}

/// Who holds a range of host RAM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Owner {
    Free,
    Hypervisor,
    Images,
    Partition,
    /// Freed RAM being zeroed before it is free again.
    Scrubbing,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RamRangeJson {
    pub base: u64,
    pub size: u64,
    pub owner: Owner,
    /// The partition's name when `owner` is `partition`.
    pub partition: Option<String>,
    /// Bytes still to zero when `owner` is `scrubbing` (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub left_bytes: Option<u64>,
}

/// Who holds a host device region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceHolder {
    /// Assignable and nobody's.
    Free,
    /// Kept by the hypervisor (GIC, its console UART, a host bridge no
    /// partition owns): never assignable.
    Hypervisor,
    Partition,
}

/// A host device region and who holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceUse {
    /// The host description's node path.
    pub name: String,
    pub base: u64,
    pub size: u64,
    pub owner: DeviceHolder,
    /// The partition's name when `owner` is `partition`.
    pub partition: Option<String>,
}

/// What an image is for, as the API spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageKind {
    Kernel,
    Initrd,
    Dtb,
}

impl ImageKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            ImageKind::Kernel => "kernel",
            ImageKind::Initrd => "initrd",
            ImageKind::Dtb => "dtb",
        }
    }

    pub fn parse(s: &str) -> Option<ImageKind> {
        Some(match s {
            "kernel" => ImageKind::Kernel,
            "initrd" => ImageKind::Initrd,
            "dtb" => ImageKind::Dtb,
            _ => return None,
        })
    }
}

impl From<pinfold_abi::ImageKind> for ImageKind {
    fn from(kind: pinfold_abi::ImageKind) -> Self {
        match kind {
            pinfold_abi::ImageKind::Kernel => ImageKind::Kernel,
            pinfold_abi::ImageKind::Initrd => ImageKind::Initrd,
            pinfold_abi::ImageKind::Dtb => ImageKind::Dtb,
        }
    }
}

impl From<ImageKind> for pinfold_abi::ImageKind {
    fn from(kind: ImageKind) -> Self {
        match kind {
            ImageKind::Kernel => pinfold_abi::ImageKind::Kernel,
            ImageKind::Initrd => pinfold_abi::ImageKind::Initrd,
            ImageKind::Dtb => pinfold_abi::ImageKind::Dtb,
        }
    }
}

/// An image's progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageState {
    Uploading,
    Ready,
    Failed,
}

/// One image (`GET /api/v1/images/{id}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Image {
    /// The hypervisor's image id, decimal.
    pub id: String,
    pub name: String,
    pub kind: ImageKind,
    pub size: u64,
    /// Bytes received so far.
    pub received: u64,
    pub state: ImageState,
    pub error: Option<String>,
    pub sha256: Option<String>,
    pub used_by: Vec<String>,
    /// It came with the boot bundle.
    pub boot: bool,
}

/// `GET /api/v1/images`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageList {
    pub images: Vec<Image>,
}

/// `POST /api/v1/images/fetch` body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FetchRequest {
    pub url: String,
    pub kind: String,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub sha256: Option<String>,
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// 64 hex digits (either case) as 32 bytes.
pub fn parse_sha256(text: &str) -> Option<[u8; 32]> {
    let text = text.trim();
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

impl Config {
    /// The config a plan entry describes (image indices as decimal ids).
    pub fn from_plan(plan: &pinfold_abi::PartitionPlan) -> Config {
        use pinfold_config::RestartMode;
        Config {
            cpus: plan.cpus.clone(),
            memory_mib: plan.ram_size >> 20,
            kernel: Some(plan.kernel.image.to_string()),
            kernel_format: match plan.kernel.format {
                pinfold_config::KernelFormat::LinuxImage => KernelFormat::Linux,
                pinfold_config::KernelFormat::Raw => KernelFormat::Raw,
            },
            initrd: plan.initrd.map(|i| i.to_string()),
            bootargs: plan.bootargs.clone(),
            autostart: plan.autostart,
            restart: match plan.lifecycle.restart {
                RestartMode::Never => Restart::Never,
                RestartMode::OnCrash => Restart::OnCrash,
                RestartMode::Always => Restart::Always,
            },
            restart_limit: plan.lifecycle.restart_limit,
            watchdog_s: plan.lifecycle.watchdog_s,
            shutdown_timeout_s: plan.lifecycle.shutdown_timeout_s,
            devices: plan
                .devices
                .iter()
                .map(|d| Device {
                    name: d.name.clone(),
                    mmio: d
                        .mmio
                        .iter()
                        .map(|m| Mmio {
                            base: m.base,
                            size: m.size,
                        })
                        .collect(),
                    spis: d.spis.clone(),
                    compatible: d.compatible.clone(),
                    host_node: d.host_node.clone(),
                })
                .collect(),
            pci: plan.pci.iter().map(ToString::to_string).collect(),
            gic: String::from(plan.gic.name()),
        }
    }
}

/// `GET /api/v1/auth/whoami`: the credential the request came with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Whoami {
    pub id: String,
    pub role: &'static str,
}

/// A credential as listed (never its token or digest).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CredentialInfo {
    pub id: String,
    pub name: String,
    pub role: &'static str,
    /// When it was made or last rotated (RFC 3339 UTC); null for the boot
    /// credential or without a clock.
    pub since: Option<String>,
}

impl From<&crate::auth::Credential> for CredentialInfo {
    fn from(c: &crate::auth::Credential) -> Self {
        CredentialInfo {
            id: c.id.clone(),
            name: c.name.clone(),
            role: c.role.name(),
            since: c.since_ms.map(crate::time::rfc3339),
        }
    }
}

/// A credential just made or rotated, with its token (shown this once).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NewCredential {
    #[serde(flatten)]
    pub info: CredentialInfo,
    pub token: String,
}

impl NewCredential {
    pub fn new(c: &crate::auth::Credential, token: String) -> Self {
        NewCredential {
            info: c.into(),
            token,
        }
    }
}

/// `POST /api/v1/auth/credentials`: `{"role": "viewer"|"operator",
/// "name"?: str}` (a name of at most 64 printable characters).
pub fn parse_credential_request(
    body: &[u8],
) -> Result<(crate::auth::Role, String), crate::ApiError> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Body {
        role: String,
        #[serde(default)]
        name: String,
    }
    let b: Body = serde_json::from_slice(body)
        .map_err(|e| crate::ApiError::bad_request(format!("body: {e}")).with_field("body"))?;
    let role = crate::auth::Role::parse(&b.role).ok_or_else(|| {
        crate::ApiError::bad_request(format!(
            "role: must be viewer or operator, not {:?}",
            b.role
        ))
        .with_field("role")
    })?;
    if b.name.chars().count() > crate::auth::MAX_NAME_LEN || b.name.chars().any(char::is_control) {
        return Err(crate::ApiError::bad_request(format!(
            "name: at most {} characters, none a control character",
            crate::auth::MAX_NAME_LEN
        ))
        .with_field("name"));
    }
    Ok((role, b.name))
}

/// `PUT /api/v1/config`'s answer: what the import did (or, with
/// `dry_run`, would do), by partition name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImportResult {
    pub created: Vec<String>,
    pub changed: Vec<String>,
    pub deleted: Vec<String>,
    pub unchanged: Vec<String>,
    pub dry_run: bool,
}

impl ImportResult {
    pub fn new(diff: crate::config::Diff, dry_run: bool) -> Self {
        ImportResult {
            created: diff.created,
            changed: diff.changed,
            deleted: diff.deleted,
            unchanged: diff.unchanged,
            dry_run,
        }
    }
}

/// `GET /api/v1/host/pci`: the host PCI functions the partitions own
/// (PARTITION_INFO's `pci`, ABI 3.2), by BDF.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostPci {
    pub functions: Vec<PciFunction>,
}

/// One host PCI function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PciFunction {
    /// `0000:BB:DD.F` (segment 0: the one host bridge).
    pub bdf: String,
    /// `vvvv:dddd`, hex.
    pub vendor_device: String,
    /// Base class, subclass, programming interface: six hex digits.
    pub class: String,
    /// The partition that owns it; null for none.
    pub owner: Option<String>,
}

impl PciFunction {
    pub fn new(f: &pinfold_abi::PciFunction, owner: Option<&str>) -> Self {
        PciFunction {
            bdf: pci_bdf(f),
            vendor_device: format!("{:04x}:{:04x}", f.vendor_id, f.device_id),
            class: format!("{:06x}", f.class & 0x00ff_ffff),
            owner: owner.map(str::to_string),
        }
    }
}

/// A function's address as `0000:BB:DD.F`.
pub fn pci_bdf(f: &pinfold_abi::PciFunction) -> String {
    format!("0000:{:02x}:{:02x}.{}", f.bus, f.device, f.function)
}
