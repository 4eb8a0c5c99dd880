//! The TOML schema of a partition plan (docs/CONFIG.md) and its parsing,
//! including sizes such as `"256MiB"` (the `Size` type and its display are
//! the `no_std` rules').
//!
//! Every struct denies unknown fields: a typo such as `cpu = [1]` is an
//! error, never a silently ignored line.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

use crate::error::ConfigError;
pub use crate::plan::PciAddress;
pub use crate::rules::Size;

/// `pci = ["0000:00:02.0", ...]`: each entry segment:bus:device.function.
fn pci_list<'de, D: Deserializer<'de>>(de: D) -> Result<Vec<PciAddress>, D::Error> {
    let texts = Vec::<String>::deserialize(de)?;
    texts
        .iter()
        .enumerate()
        .map(|(i, text)| {
            PciAddress::parse(text).ok_or_else(|| {
                de::Error::custom(format!(
                    "pci[{i}]: {text:?} is not a PCI function \
                     (segment:bus:device.function in hex, e.g. \"0000:00:02.0\")"
                ))
            })
        })
        .collect()
}

/// A whole config file: the board and the partitions carved out of it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub board: Board,
    /// In file order; this is also the order of `Plan::partitions`.
    #[serde(default, rename = "partition")]
    pub partitions: Vec<PartitionConfig>,
}

/// The machine the plan is for.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Board {
    /// e.g. `qemu-virt`.
    pub name: String,
    /// Physical CPUs, numbered 0..cpus in the host DTB's /cpus order.
    pub cpus: u32,
    /// Physical RAM; the xtask passes it to QEMU as `-m`.
    pub memory: Size,
}

/// One `[[partition]]`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionConfig {
    /// `[a-z0-9_-]`, 1..=`plan::NAME_MAX` bytes; prefixes its console lines.
    pub name: String,
    /// vCPU i runs only on physical CPU `cpus[i]`.
    pub cpus: Vec<u32>,
    /// Guest RAM, a multiple of 2 MiB.
    pub memory: Size,
    /// Kernel image; relative paths resolve against the workspace root.
    pub kernel: PathBuf,
    #[serde(default)]
    pub initrd: Option<PathBuf>,
    #[serde(default)]
    pub bootargs: String,
    #[serde(default)]
    pub kernel_format: ImageFormat,
    /// Host UART input goes to this partition.
    #[serde(default)]
    pub console_input: bool,
    /// Booted by the hypervisor at start.
    #[serde(default = "default_autostart")]
    pub autostart: bool,
    /// May issue management hypercalls.
    #[serde(default)]
    pub management: bool,
    /// Pass the host's PCIe host bridge (ECAM, MMIO windows, INTx SPIs, as
    /// the host DTB describes them) to this partition. Its RAM is then
    /// mapped at IPA == PA, since devices DMA to physical addresses and
    /// there is no IOMMU in the path.
    #[serde(default)]
    pub pci_host_bridge: bool,
    /// PCI functions assigned to this partition, `"SSSS:BB:DD.F"` each.
    #[serde(default, deserialize_with = "pci_list")]
    pub pci: Vec<PciAddress>,
    /// The REST API's bearer token (management partition only). Only its
    /// SHA-256 goes into the plan blob. Without `token` or `token_sha256`
    /// the hypervisor generates one at boot and prints it.
    #[serde(default)]
    pub token: Option<String>,
    /// The SHA-256 of the bearer token, 64 hex digits: the plan then never
    /// holds the token itself (`cargo xtask pxe` writes this).
    #[serde(default)]
    pub token_sha256: Option<String>,
    /// (management partition only) The configuration store: an `http://`
    /// URL of a directory where the manager keeps `config.toml` and the
    /// images it names, and reads them back at start (docs/DEPLOY.md).
    #[serde(default)]
    pub config_store: Option<String>,
    /// (management partition only) HTTPS for the REST API (default true);
    /// false serves plain HTTP, for a management network that is already
    /// protected (docs/CONFIG.md).
    #[serde(default = "default_api_tls")]
    pub api_tls: bool,
    /// The partition gets its CPUs' PMU; false hides it (every PMU
    /// register access traps and is UNDEFINED to the guest).
    #[serde(default = "default_pmu")]
    pub pmu: bool,
    /// The interrupt controller interface: `"auto"` (default: the host's
    /// native kind), `"v3"` or `"v5"`; checked against the host's GIC
    /// (docs/CONFIG.md).
    #[serde(default)]
    pub gic: crate::plan::GicSetting,
    /// When it is started again after it stopped on its own: `"never"`
    /// (default), `"on-crash"` (watchdog, hung vCPU, fatal fault) or
    /// `"always"` (a guest power-off too). The management partition always
    /// restarts and takes neither this nor `restart_limit`.
    #[serde(default)]
    pub restart: Option<RestartSetting>,
    /// Restarts in a row the policy may make (0 = no limit); a run of a
    /// minute ends the row.
    #[serde(default)]
    pub restart_limit: Option<u32>,
    /// Period in seconds of the emulated SBSA watchdog (enabled before
    /// entry; the guest's sbsa_gwdt keeps it fed) and of the hung-vCPU
    /// check; 0 (default) = neither.
    #[serde(default)]
    pub watchdog_s: u32,
    /// After the power button (graceful shutdown), seconds until the
    /// partition is stopped by force.
    #[serde(default = "default_shutdown_timeout_s")]
    pub shutdown_timeout_s: u32,
    /// Pass-through devices.
    #[serde(default, rename = "device")]
    pub devices: Vec<DeviceConfig>,
}

/// `restart = "..."` as written in the config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RestartSetting {
    Never,
    OnCrash,
    Always,
}

fn default_shutdown_timeout_s() -> u32 {
    30
}

fn default_autostart() -> bool {
    true
}

fn default_pmu() -> bool {
    true
}

fn default_api_tls() -> bool {
    true
}

/// How the kernel file is to be entered, as written in the config.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ImageFormat {
    /// Linux arm64 `Image` if the file has its magic, raw otherwise.
    #[default]
    Auto,
    /// Linux arm64 `Image`; the file must carry the magic.
    Linux,
    /// Raw binary loaded at RAM base + 0x80000.
    Raw,
}

/// One `[[partition.device]]`: MMIO mapped 1:1 and SPIs forwarded.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeviceConfig {
    pub name: String,
    #[serde(default)]
    pub mmio: Vec<MmioConfig>,
    #[serde(default)]
    pub spis: Vec<u32>,
    /// The guest DT node's `compatible`.
    #[serde(default)]
    pub compatible: Option<String>,
    /// A host DT node (absolute path) whose properties are copied into the
    /// guest's node.
    #[serde(default)]
    pub host_node: Option<String>,
}

/// A physical MMIO window, mapped at the same guest physical address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MmioConfig {
    pub base: u64,
    pub size: Size,
}

/// Why a size string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// No digits before the unit.
    #[error("size {0:?} does not start with a number")]
    NoNumber(String),
    /// A unit we do not know; decimal units (MB, GB) are refused because
    /// they are ambiguous.
    #[error("size {text:?} has unknown unit {unit:?}; use K/KiB, M/MiB, G/GiB or T/TiB")]
    UnknownUnit { text: String, unit: String },
    /// The value does not fit in 64 bits.
    #[error("size {0:?} does not fit in 64 bits")]
    Overflow(String),
}

impl std::str::FromStr for Size {
    type Err = SizeError;

    fn from_str(text: &str) -> Result<Size, SizeError> {
        let trimmed = text.trim();
        let digits_end = trimmed
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(trimmed.len());
        let (digits, unit) = trimmed.split_at(digits_end);
        if digits.is_empty() {
            return Err(SizeError::NoNumber(text.to_owned()));
        }
        let number: u64 = digits
            .parse()
            .map_err(|_| SizeError::Overflow(text.to_owned()))?;
        let multiplier = match unit.trim_start() {
            "" | "B" => 1,
            "K" | "KiB" => Size::KIB,
            "M" | "MiB" => Size::MIB,
            "G" | "GiB" => Size::GIB,
            "T" | "TiB" => Size::TIB,
            other => {
                return Err(SizeError::UnknownUnit {
                    text: text.to_owned(),
                    unit: other.to_owned(),
                })
            }
        };
        number
            .checked_mul(multiplier)
            .map(Size)
            .ok_or_else(|| SizeError::Overflow(text.to_owned()))
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Size, D::Error> {
        deserializer.deserialize_any(SizeVisitor)
    }
}

struct SizeVisitor;

impl Visitor<'_> for SizeVisitor {
    type Value = Size;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a byte count or a string such as \"256MiB\"")
    }

    fn visit_u64<E: de::Error>(self, value: u64) -> Result<Size, E> {
        Ok(Size(value))
    }

    fn visit_i64<E: de::Error>(self, value: i64) -> Result<Size, E> {
        u64::try_from(value)
            .map(Size)
            .map_err(|_| E::custom(format!("size {value} is negative")))
    }

    fn visit_str<E: de::Error>(self, value: &str) -> Result<Size, E> {
        value.parse().map_err(E::custom)
    }
}

/// Parses a config from TOML text; shape errors (unknown or missing fields,
/// wrong types, bad sizes) name the offending key.
pub fn parse(text: &str) -> Result<Config, ConfigError> {
    toml::from_str(text).map_err(|error| ConfigError::Syntax {
        origin: None,
        message: error.to_string(),
    })
}

/// Reads and parses a config file (it is not validated).
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    toml::from_str(&text).map_err(|error| ConfigError::Syntax {
        origin: Some(path.to_owned()),
        message: error.to_string(),
    })
}
