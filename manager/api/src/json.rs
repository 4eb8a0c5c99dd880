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
    /// RFC 3339 UTC time of the last state change; null without a clock.
    #[serde(default)]
    pub state_since: Option<String>,
    /// Restarts its restart policy made since the hypervisor started.
    #[serde(default)]
    pub restarts: u32,
    /// Its last crash, if it crashed since the hypervisor started.
    #[serde(default)]
    pub last_crash: Option<LastCrash>,
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
            state_since: p.state_since_ms.map(crate::time::rfc3339),
            restarts: p.restarts,
            last_crash: p.last_crash.as_ref().map(|c| LastCrash {
                time: c.unix_ms.map(crate::time::rfc3339),
                reason: c.reason.clone(),
            }),
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
        PartitionDetailJson {
            summary: (&d.summary).into(),
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
