//! Why a partition-plan TOML was rejected, phrased so the message names the
//! partition and the field to fix.

use std::io;
use std::path::PathBuf;

use crate::fit::FitError;
use crate::schema::Size;

/// A config that cannot become a payload.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file (or an image it names) could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The TOML is malformed or has the wrong shape (unknown field, wrong
    /// type, bad size); `message` is the TOML parser's, which points at the
    /// offending key.
    #[error("{}{message}", origin_prefix(origin))]
    Syntax {
        /// The file, when the text came from one.
        origin: Option<PathBuf>,
        message: String,
    },
    /// The config declares no `[[partition]]`.
    #[error("the config declares no [[partition]]")]
    NoPartitions,
    /// A `[board]` field is unusable.
    #[error("board: {field}: {problem}")]
    Board {
        field: &'static str,
        problem: Problem,
    },
    /// A partition field breaks a rule.
    #[error("partition \"{partition}\": {field}: {problem}")]
    Partition {
        partition: String,
        /// The field as written in TOML, with the device for device fields,
        /// e.g. `cpus` or `device "uart1": spis`.
        field: String,
        problem: Problem,
    },
    /// The encoded plan did not decode back to itself (a bug in the
    /// encoder, never in the config).
    #[error("the encoded plan does not round-trip through Plan::decode: {0}")]
    Encoding(String),
}

fn origin_prefix(origin: &Option<PathBuf>) -> String {
    origin
        .as_ref()
        .map(|path| format!("{}: ", path.display()))
        .unwrap_or_default()
}

impl ConfigError {
    /// The partition the error is about, if any.
    pub fn partition(&self) -> Option<&str> {
        match self {
            ConfigError::Partition { partition, .. } => Some(partition),
            _ => None,
        }
    }

    /// The field the error is about, if any.
    pub fn field(&self) -> Option<&str> {
        match self {
            ConfigError::Partition { field, .. } => Some(field),
            ConfigError::Board { field, .. } => Some(field),
            _ => None,
        }
    }

    /// The rule that was broken, if the error is about a field.
    pub fn problem(&self) -> Option<&Problem> {
        match self {
            ConfigError::Partition { problem, .. } | ConfigError::Board { problem, .. } => {
                Some(problem)
            }
            _ => None,
        }
    }
}

/// The rule a field breaks; shown after `partition "<name>": <field>: `.
#[derive(Debug, thiserror::Error)]
pub enum Problem {
    /// A partition or device name is empty.
    #[error("the name is empty")]
    NameEmpty,
    /// A partition name is longer than `plan::NAME_MAX`.
    #[error("the name has {len} bytes, at most {max} are allowed")]
    NameTooLong { len: usize, max: usize },
    /// A name holds a character outside its alphabet.
    #[error("the name contains {ch:?}; only {allowed} are allowed")]
    NameCharacter { ch: char, allowed: &'static str },
    /// Two partitions (or two devices of one partition) share a name.
    #[error("the name is used twice")]
    NameDuplicate,
    /// The board has no CPUs.
    #[error("the board needs at least one CPU")]
    NoBoardCpus,
    /// The partition lists no CPU.
    #[error("the list is empty; a partition needs at least one CPU")]
    NoCpus,
    /// A CPU index beyond the board's CPUs.
    #[error("CPU {cpu} does not exist (board {board} has {board_cpus} CPUs)")]
    CpuMissing {
        cpu: u32,
        board: String,
        board_cpus: u32,
    },
    /// A CPU appears twice in one partition's list.
    #[error("CPU {cpu} is listed twice")]
    CpuRepeated { cpu: u32 },
    /// A CPU claimed by two partitions.
    #[error("CPU {cpu} is also used by partition \"{other}\"")]
    CpuShared { cpu: u32, other: String },
    /// More vCPUs than the guest's redistributor region holds.
    #[error("{count} vCPUs, but the guest redistributor region holds at most {max}")]
    TooManyVcpus { count: usize, max: u64 },
    /// Memory below the 2 MiB stage-2 block size.
    #[error("{size} is less than the minimum of 2MiB")]
    MemoryTooSmall { size: Size },
    /// Memory not a whole number of 2 MiB stage-2 blocks.
    #[error("{size} is not a multiple of 2MiB")]
    MemoryUnaligned { size: Size },
    /// Partitions plus the hypervisor reserve exceed the board's RAM.
    #[error(
        "{partitions} of partitions plus the hypervisor's reserve ({reserve}) do not fit in the board's {board}"
    )]
    MemoryExhausted {
        /// Partition RAM up to and including this partition.
        partitions: Size,
        reserve: Size,
        board: Size,
    },
    /// The kernel, the initrd and the DTB area do not fit the partition's
    /// RAM as the hypervisor lays them out (`fit::place_images`).
    #[error("{ram} is too small: {fit}")]
    ImagesDoNotFit { ram: Size, fit: FitError },
    /// An image file does not exist.
    #[error("file {} not found", path.display())]
    FileMissing { path: PathBuf },
    /// An image path names something other than a regular file.
    #[error("{} is not a regular file", path.display())]
    NotAFile { path: PathBuf },
    /// An image file is empty.
    #[error("file {} is empty", path.display())]
    FileEmpty { path: PathBuf },
    /// An image file exists but cannot be read.
    #[error("cannot read {}: {source}", path.display())]
    FileUnreadable {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// `kernel_format = "linux"` on a file without the arm64 Image magic.
    #[error("file {} lacks the arm64 Image magic \"ARM\\x64\" at byte 56 (kernel_format = \"linux\")", path.display())]
    NotLinuxImage { path: PathBuf },
    /// Bootargs too long for Linux's command line.
    #[error("{len} bytes, Linux accepts at most {max}")]
    BootargsTooLong { len: usize, max: usize },
    /// Bootargs hold a NUL, which would cut the DT string short.
    #[error("contains a NUL byte")]
    BootargsNul,
    /// A second partition takes the console input.
    #[error("partition \"{other}\" already takes console input; at most one partition may")]
    ConsoleInputTaken { other: String },
    /// A second management partition.
    #[error("partition \"{other}\" is already the management partition; at most one may be")]
    ManagementTaken { other: String },
    /// A token on a partition that is not the management partition.
    #[error("only the management partition has a token")]
    TokenWithoutManagement,
    /// A token that is too short or uses characters outside [A-Za-z0-9._~-].
    #[error("a token must be 16 to 128 characters of [A-Za-z0-9._~-]")]
    BadToken,
    /// Both `token` and `token_sha256` are set.
    #[error("give either token or token_sha256, not both")]
    TokenTwice,
    /// `token_sha256` is not 64 hex digits.
    #[error("token_sha256 must be 64 hex digits (the SHA-256 of the token)")]
    BadTokenDigest,
    /// A second partition asks for the PCIe host bridge.
    #[error("the PCIe host bridge is already passed to partition \"{other}\"")]
    PciHostBridgeTaken { other: String },
    /// An SPI INTID outside 32..=1019.
    #[error("INTID {spi} is not an SPI (SPIs are 32..=1019)")]
    SpiOutOfRange { spi: u32 },
    /// The INTID of an emulated device (PL011, SBSA watchdog).
    #[error(
        "SPI {spi} is an emulated device's interrupt in every partition (PL011 {}, SBSA watchdog {}, PL061 GPIO {})",
        pinfold_vboard::GUEST_UART_INTID,
        pinfold_vboard::GUEST_WDOG_INTID,
        pinfold_vboard::GUEST_GPIO_INTID
    )]
    SpiReserved { spi: u32 },
    /// `restart` or `restart_limit` on the management partition.
    #[error("the management partition always restarts (with back-off); remove this field")]
    ManagementRestart,
    /// `restart_limit` without a policy that restarts.
    #[error("has no effect with restart = \"never\"; set restart = \"on-crash\" or \"always\"")]
    RestartLimitWithoutRestart,
    /// `watchdog_s` out of range.
    #[error("{value} is out of range: 0 (off) or 1..={max} seconds")]
    WatchdogRange { value: u32, max: u32 },
    /// `shutdown_timeout_s` out of range.
    #[error("{value} is out of range: 1..={max} seconds")]
    ShutdownTimeoutRange { value: u32, max: u32 },
    /// An SPI listed twice by one partition.
    #[error("SPI {spi} is listed twice")]
    SpiRepeated { spi: u32 },
    /// An SPI owned by two partitions.
    #[error("SPI {spi} is also used by partition \"{other}\"")]
    SpiShared { spi: u32, other: String },
    /// An MMIO range of size zero.
    #[error("range at {base:#x} has size 0")]
    MmioEmpty { base: u64 },
    /// An MMIO range not on 4 KiB pages.
    #[error("range {base:#x}+{size:#x} is not 4KiB aligned (stage 2 maps whole pages)")]
    MmioUnaligned { base: u64, size: u64 },
    /// An MMIO range that wraps the address space.
    #[error("range {base:#x}+{size:#x} wraps past the end of the address space")]
    MmioWraps { base: u64, size: u64 },
    /// Two devices' MMIO ranges overlap.
    #[error(
        "range {base:#x}+{size:#x} overlaps device \"{other_device}\" of partition \"{other}\""
    )]
    MmioOverlap {
        base: u64,
        size: u64,
        other: String,
        other_device: String,
    },
    /// A device `compatible` that is empty or holds a NUL (which would
    /// split the DT string).
    #[error("must be a non-empty string without NUL bytes")]
    CompatibleBad,
    /// A device `host_node` that is not an absolute DT path.
    #[error("{path:?} is not an absolute device tree path (/node/child, no NUL)")]
    HostNodeBad { path: String },
    /// A pass-through range over something the guest map already holds.
    #[error("range {base:#x}+{size:#x} overlaps the guest's {region} at {region_base:#x}+{region_size:#x}")]
    MmioGuestMap {
        base: u64,
        size: u64,
        region: &'static str,
        region_base: u64,
        region_size: u64,
    },
}
