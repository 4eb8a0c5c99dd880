//! Pinfold's management hypercall ABI: function IDs, register layouts, status codes and reply payloads shared by the hypervisor and the manager.
//!
//! # Calling convention
//!
//! Every call is an SMCCC fast call issued with `HVC #0` from the management
//! partition at EL1 (Arm DEN0028, SMC Calling Convention 1.1+). The function
//! ID is `0xC600_0000 | n`: bit 31 = fast call, bit 30 = SMC64/HVC64,
//! bits [29:24] = OEN 6, "Vendor Specific Hypervisor Service Calls"
//! (DEN0028 table 6-2). As in the PSCI decoder, the function ID is W0: the
//! upper half of X0 is ignored. Bit 16 is SMCCC 1.3's SVE live-state hint,
//! which a callee must ignore; the other bits of [23:16] must be zero.
//!
//! On entry X0 is the function ID and X1..X5 the arguments; on return X0 is
//! the status (0 or a negative [`AbiError`] code) and X1..X3 the results.
//! Argument registers a call does not use must be zero (so a later minor
//! version can give them a meaning), else INVALID_PARAMETERS. SMCCC 1.1
//! makes X0..X17 available to HVC, so using X4 is within the convention.
//!
//! | n | call              | X1      | X2      | X3      | X4  | results                     |
//! |---|-------------------|---------|---------|---------|-----|-----------------------------|
//! | 0 | ABI_VERSION       |         |         |         |     | X1 = major << 16 \| minor   |
//! | 1 | HOST_INFO         | buf IPA | buf len |         |     | X1 = bytes written          |
//! | 2 | LIST_PARTITIONS   | buf IPA | buf len |         |     | X1 = bytes written          |
//! | 3 | PARTITION_INFO    | index   | buf IPA | buf len |     | X1 = bytes written          |
//! | 4 | PARTITION_START   | index   |         |         |     |                             |
//! | 5 | PARTITION_STOP    | index   |         |         |     |                             |
//! | 6 | PARTITION_RESTART | index   |         |         |     |                             |
//! | 7 | CONSOLE_READ      | index   | offset  | buf IPA | len | X1 = bytes, X2 = next, X3 = dropped |
//! | 8 | CONSOLE_WRITE     | index   | buf IPA | buf len |     | X1 = bytes accepted         |
//! | 9 | MGMT_TOKEN_DIGEST | buf IPA | buf len |         |     | X1 = 32 (SHA-256 written)   |
//! | 10 | MGMT_REPORT      | status  | buf IPA | buf len |     | (2.1) the manager's state and a UTF-8 detail |
//! | 11 | PCI_FUNCTIONS    | buf IPA | buf len |         |     | (2.1) X1 = bytes written    |
//! | 12 | WALL_CLOCK       |         |         |         |     | (2.2) X1 = Unix time in ms  |
//! | 13 | IMAGE_CREATE     | kind    | size    |         |     | (3.0) X1 = image id         |
//! | 14 | IMAGE_WRITE      | id      | offset  | buf IPA | len | (3.0) X1 = bytes taken      |
//! | 15 | IMAGE_SEAL       | id      | buf IPA | buf len |     | (3.0) buffer: expected SHA-256 first (32 bytes or more) or empty |
//! | 16 | IMAGE_DELETE     | id      |         |         |     | (3.0)                       |
//! | 17 | LIST_IMAGES      | buf IPA | buf len |         |     | (3.0) X1 = bytes written    |
//! | 18 | PARTITION_CREATE | buf IPA | buf len |         |     | (3.0) buffer: a plan entry first; X1 = index |
//! | 19 | PARTITION_CONFIGURE | index | buf IPA | buf len |   | (3.0) buffer: its new plan entry |
//! | 20 | PARTITION_DESTROY | index  |         |         |     | (3.0)                       |
//! | 21 | RESOURCES        | buf IPA | buf len |         |     | (3.0) X1 = bytes written    |
//! | 22 | EVENTS_READ      | seq     | buf IPA | buf len |     | (3.0) X1 = bytes, X2 = next seq, X3 = dropped |
//! | 23 | PARTITION_SHUTDOWN | index |         |         |     | (3.0) graceful: power button, then a hard stop |
//! | 24 | IMAGE_READ       | id      | offset  | buf IPA | len | (3.1) X1 = bytes copied (0 at the end); sealed images only |
//! | 25 | CONFIG_APPLIED   |         |         |         |     | (3.1) the stored configuration is applied: held autostart partitions start |
//! | 26 | ENTROPY          | buf IPA | buf len |         |     | (3.1) X1 = bytes written (at most 256) |
//! | 27 | GIC_INFO         | buf IPA | buf len |         |     | (3.3) X1 = bytes written ([`GicReport`]) |
//!
//! Buffers are IPAs in the caller's own RAM and at most [`MAX_BUFFER_LEN`]
//! bytes. HOST_INFO, LIST_PARTITIONS and PARTITION_INFO write a postcard
//! encoding of [`HostInfo`], `Vec<`[`PartitionSummary`]`>` and
//! [`PartitionDetail`]; when it does not fit they fail with BUFFER_TOO_SMALL
//! and X1 = the length needed, so the caller can retry once.
//!
//! A call whose buffer holds a request (PARTITION_CREATE, _CONFIGURE,
//! IMAGE_SEAL) and whose content the hypervisor refuses fails with REJECTED
//! and overwrites that buffer with a postcard [`Rejection`] (X1 = its
//! length): the field and the sentence the build-time plan check gives for
//! the same mistake (`pinfold_config::rules`). The request sits at the
//! buffer's start and may be followed by anything: a caller names a buffer
//! larger than its request to leave room for the whole sentence.
//!
//! Plan entries travel as postcard [`PartitionPlan`]s of the config crate's
//! `PLAN_REVISION`; their image indices name images of LIST_IMAGES (the boot
//! bundle's images come first, then those IMAGE_CREATE made).
//!
//! # Versioning
//!
//! A minor version may only add calls or give meaning to registers that
//! were MBZ. postcard is not self-describing: any change to a payload type
//! (a field, a variant, their order) is a major version change.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;
#[cfg(test)]
extern crate std;

use alloc::string::String;
use alloc::vec::Vec;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub use pinfold_config::PartitionPlan;

// ---------------------------------------------------------------------------
// Versions and function IDs
// ---------------------------------------------------------------------------

/// An ABI version as ABI_VERSION returns it in X1 (`major << 16 | minor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AbiVersion {
    pub major: u16,
    pub minor: u16,
}

/// The version this crate implements.
pub const ABI_VERSION: AbiVersion = AbiVersion { major: 3, minor: 3 };

impl AbiVersion {
    /// The X1 encoding.
    pub const fn to_reg(self) -> u64 {
        (self.major as u64) << 16 | self.minor as u64
    }

    /// Decodes X1; bits above 31 are reserved and must be zero.
    pub const fn from_reg(x1: u64) -> Option<AbiVersion> {
        if x1 >> 32 != 0 {
            return None;
        }
        Some(AbiVersion {
            major: (x1 >> 16) as u16,
            minor: x1 as u16,
        })
    }

    /// Whether a client built for `self` can use a hypervisor offering
    /// `offered`: same major, and the hypervisor has every call the client
    /// knows.
    pub const fn is_served_by(self, offered: AbiVersion) -> bool {
        self.major == offered.major && offered.minor >= self.minor
    }
}

impl core::fmt::Display for AbiVersion {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// Function IDs (W0) of the calls; `0xC600_0000 | n`.
pub mod fid {
    /// Fast call, SMC64, OEN 6 (Vendor Specific Hypervisor Service).
    pub const BASE: u32 = 0xC600_0000;
    pub const ABI_VERSION: u32 = BASE;
    pub const HOST_INFO: u32 = BASE | 1;
    pub const LIST_PARTITIONS: u32 = BASE | 2;
    pub const PARTITION_INFO: u32 = BASE | 3;
    pub const PARTITION_START: u32 = BASE | 4;
    pub const PARTITION_STOP: u32 = BASE | 5;
    pub const PARTITION_RESTART: u32 = BASE | 6;
    pub const CONSOLE_READ: u32 = BASE | 7;
    pub const CONSOLE_WRITE: u32 = BASE | 8;
    /// The SHA-256 of the bearer token the manager's REST API requires for
    /// mutating calls (from the plan or boot bundle, which carry only the
    /// digest, or of the token generated at boot and printed once on the
    /// hypervisor console): 32 bytes. The token itself never reaches the
    /// manager. (ABI 2.0: in 1.x this call returned the token.)
    pub const MGMT_TOKEN_DIGEST: u32 = BASE | 9;
    /// (2.1) The manager says what state it is in ([`super::ManagerStatus`]
    /// in X1) with a UTF-8 sentence in the buffer (at most
    /// [`super::MAX_REPORT_LEN`] bytes), for the hypervisor's console and
    /// stats line.
    pub const MGMT_REPORT: u32 = BASE | 10;
    /// (2.1) The PCI functions behind the caller's host bridge as the
    /// hypervisor found them when it last quiesced the bridge
    /// (`Vec<`[`super::PciFunction`]`>`).
    pub const PCI_FUNCTIONS: u32 = BASE | 11;
    /// (2.2) The time now: milliseconds since the Unix epoch (UTC), from
    /// the clock the hypervisor read once at boot (UEFI GetTime or the
    /// PL031 RTC) plus the counter ticks since. NOT_FOUND when the host
    /// had no clock to read.
    pub const WALL_CLOCK: u32 = BASE | 12;
    /// (3.0) Run-time partitions and their images.
    pub const IMAGE_CREATE: u32 = BASE | 13;
    pub const IMAGE_WRITE: u32 = BASE | 14;
    pub const IMAGE_SEAL: u32 = BASE | 15;
    pub const IMAGE_DELETE: u32 = BASE | 16;
    pub const LIST_IMAGES: u32 = BASE | 17;
    pub const PARTITION_CREATE: u32 = BASE | 18;
    pub const PARTITION_CONFIGURE: u32 = BASE | 19;
    pub const PARTITION_DESTROY: u32 = BASE | 20;
    pub const RESOURCES: u32 = BASE | 21;
    /// (3.0) The hypervisor's event log.
    pub const EVENTS_READ: u32 = BASE | 22;
    /// (3.0) Graceful shutdown.
    pub const PARTITION_SHUTDOWN: u32 = BASE | 23;
    /// (3.1) A sealed image's bytes, for the manager's configuration store.
    pub const IMAGE_READ: u32 = BASE | 24;
    /// (3.1) The manager applied its stored configuration.
    pub const CONFIG_APPLIED: u32 = BASE | 25;
    /// (3.1) Random bytes from the hypervisor's DRBG (seeded at boot from
    /// the host's entropy sources), filling the buffer (at most
    /// [`super::MAX_ENTROPY_LEN`] bytes). NOT_FOUND when the hypervisor
    /// found no entropy source at boot.
    pub const ENTROPY: u32 = BASE | 26;
    /// (3.3) The host's GIC as found and each partition's interrupt
    /// controller interface ([`super::GicReport`]).
    pub const GIC_INFO: u32 = BASE | 27;
}

/// Longest ENTROPY buffer (bytes); a longer one is INVALID_PARAMETERS.
pub const MAX_ENTROPY_LEN: u64 = 256;

/// Longest MGMT_REPORT detail the hypervisor keeps.
pub const MAX_REPORT_LEN: u64 = 256;

/// The management partition's own account of itself (MGMT_REPORT's X1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ManagerStatus {
    /// Nothing reported since the partition (re)started.
    Starting,
    /// The REST API is listening.
    Serving,
    /// No network device the manager can drive: it stays up for its
    /// console, without the API.
    NoNetworkDevice,
    /// Something else keeps the API down (the detail says what).
    Failed,
}

impl ManagerStatus {
    pub const ALL: [ManagerStatus; 4] = [
        ManagerStatus::Starting,
        ManagerStatus::Serving,
        ManagerStatus::NoNetworkDevice,
        ManagerStatus::Failed,
    ];

    pub const fn code(self) -> u64 {
        match self {
            ManagerStatus::Starting => 0,
            ManagerStatus::Serving => 1,
            ManagerStatus::NoNetworkDevice => 2,
            ManagerStatus::Failed => 3,
        }
    }

    pub const fn from_code(code: u64) -> Option<ManagerStatus> {
        Some(match code {
            0 => ManagerStatus::Starting,
            1 => ManagerStatus::Serving,
            2 => ManagerStatus::NoNetworkDevice,
            3 => ManagerStatus::Failed,
            _ => return None,
        })
    }

    /// The word the stats line and the logs use.
    pub const fn name(self) -> &'static str {
        match self {
            ManagerStatus::Starting => "starting",
            ManagerStatus::Serving => "serving",
            ManagerStatus::NoNetworkDevice => "no-network-device",
            ManagerStatus::Failed => "failed",
        }
    }
}

/// One PCI function behind a host bridge (PCI_FUNCTIONS).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PciFunction {
    pub bus: u8,
    pub device: u8,
    pub function: u8,
    pub vendor_id: u16,
    pub device_id: u16,
    /// Base class, subclass, programming interface.
    pub class: u32,
}

/// SMCCC 1.3 SVE live-state hint (DEN0028 2.10): ignored by the callee.
const FID_SVE_HINT: u32 = 1 << 16;

/// Largest buffer any call accepts, so that the hypervisor never allocates
/// or copies more than this on a guest's say-so.
pub const MAX_BUFFER_LEN: u64 = 64 * 1024;

// ---------------------------------------------------------------------------
// Status codes
// ---------------------------------------------------------------------------

/// Why the hypervisor refused a call; X0 carries [`AbiError::code`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AbiError {
    /// The call does not exist, or the caller is not the management partition.
    NotSupported,
    /// An argument is out of range or a register that must be zero is not.
    InvalidParameters,
    /// The operation is not permitted.
    Denied,
    /// A buffer does not lie wholly inside the caller's own RAM.
    BadAddress,
    /// No partition has that index.
    NotFound,
    /// The partition's state does not allow that transition.
    Conflict,
    /// The reply does not fit the caller's buffer (X1 = bytes needed).
    BufferTooSmall,
    /// (3.0) The request's content breaks a rule; X1 = length of the
    /// [`Rejection`] written over the call's buffer.
    Rejected,
    /// (3.0) Not enough free RAM (or another finite resource) for it.
    NoResources,
}

impl AbiError {
    /// Every code, for tests and for callers that list them.
    pub const ALL: [AbiError; 9] = [
        AbiError::NotSupported,
        AbiError::InvalidParameters,
        AbiError::Denied,
        AbiError::BadAddress,
        AbiError::NotFound,
        AbiError::Conflict,
        AbiError::BufferTooSmall,
        AbiError::Rejected,
        AbiError::NoResources,
    ];

    /// The signed value in X0. -1..-3 match PSCI/SMCCC; -9 is PSCI's
    /// INVALID_ADDRESS; -10.. are ours.
    pub const fn code(self) -> i64 {
        match self {
            AbiError::NotSupported => -1,
            AbiError::InvalidParameters => -2,
            AbiError::Denied => -3,
            AbiError::BadAddress => -9,
            AbiError::NotFound => -10,
            AbiError::Conflict => -11,
            AbiError::BufferTooSmall => -12,
            AbiError::Rejected => -13,
            AbiError::NoResources => -14,
        }
    }

    /// The inverse of [`code`](Self::code).
    pub const fn from_code(code: i64) -> Option<AbiError> {
        Some(match code {
            -1 => AbiError::NotSupported,
            -2 => AbiError::InvalidParameters,
            -3 => AbiError::Denied,
            -9 => AbiError::BadAddress,
            -10 => AbiError::NotFound,
            -11 => AbiError::Conflict,
            -12 => AbiError::BufferTooSmall,
            -13 => AbiError::Rejected,
            -14 => AbiError::NoResources,
            _ => return None,
        })
    }

    /// The name the ABI tables use.
    pub const fn name(self) -> &'static str {
        match self {
            AbiError::NotSupported => "NOT_SUPPORTED",
            AbiError::InvalidParameters => "INVALID_PARAMETERS",
            AbiError::Denied => "DENIED",
            AbiError::BadAddress => "BAD_ADDRESS",
            AbiError::NotFound => "NOT_FOUND",
            AbiError::Conflict => "CONFLICT",
            AbiError::BufferTooSmall => "BUFFER_TOO_SMALL",
            AbiError::Rejected => "REJECTED",
            AbiError::NoResources => "NO_RESOURCES",
        }
    }
}

impl core::fmt::Display for AbiError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a call failed, as its caller sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallError {
    /// The hypervisor refused the call with this status.
    Refused(AbiError),
    /// The reply needs a buffer of at least `required` bytes.
    BufferTooSmall { required: u64 },
    /// (3.0) The content was refused: a [`Rejection`] of `len` bytes is in
    /// the call's buffer.
    Rejected { len: u64 },
    /// X0 held a status this ABI version does not define.
    UnknownStatus(u64),
    /// The results contradict the request (more bytes than the buffer) or
    /// the payload does not decode.
    MalformedReply,
}

impl From<AbiError> for CallError {
    fn from(err: AbiError) -> Self {
        CallError::Refused(err)
    }
}

impl core::fmt::Display for CallError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            CallError::Refused(err) => write!(f, "hypervisor refused the call: {err}"),
            CallError::BufferTooSmall { required } => {
                write!(f, "reply needs a {required}-byte buffer")
            }
            CallError::Rejected { .. } => f.write_str("hypervisor rejected the request"),
            CallError::UnknownStatus(x0) => write!(f, "unknown hypercall status {:#x}", x0),
            CallError::MalformedReply => f.write_str("malformed hypercall reply"),
        }
    }
}

// ---------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------

/// A buffer in the caller's RAM. `len` is at most [`MAX_BUFFER_LEN`] once
/// decoded; whether it lies in the caller's RAM is the hypervisor's check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuestBuffer {
    pub ipa: u64,
    pub len: u64,
}

/// One management call, decoded from X0..X5.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    AbiVersion,
    HostInfo {
        buf: GuestBuffer,
    },
    ListPartitions {
        buf: GuestBuffer,
    },
    PartitionInfo {
        index: u32,
        buf: GuestBuffer,
    },
    PartitionStart {
        index: u32,
    },
    PartitionStop {
        index: u32,
    },
    PartitionRestart {
        index: u32,
    },
    /// Console bytes from position `offset` on (see [`Return::ConsoleRead`]).
    ConsoleRead {
        index: u32,
        offset: u64,
        buf: GuestBuffer,
    },
    /// Bytes for the partition's console input.
    ConsoleWrite {
        index: u32,
        buf: GuestBuffer,
    },
    /// The REST API's bearer token.
    MgmtTokenDigest {
        buf: GuestBuffer,
    },
    /// (2.1) The manager's state; the buffer holds a UTF-8 detail of at
    /// most [`MAX_REPORT_LEN`] bytes.
    MgmtReport {
        status: ManagerStatus,
        buf: GuestBuffer,
    },
    /// (2.1) The functions behind the caller's host bridge.
    PciFunctions {
        buf: GuestBuffer,
    },
    /// (2.2) The time now ([`Return::WallClock`]).
    WallClock,
    /// (3.0) A new, empty image of `size` bytes in the hypervisor's RAM
    /// ([`Return::Created`] = its id).
    ImageCreate {
        kind: ImageKind,
        size: u64,
    },
    /// (3.0) The buffer's bytes at `offset` of an unsealed image.
    ImageWrite {
        id: u32,
        offset: u64,
        buf: GuestBuffer,
    },
    /// (3.0) Finish an image: all of it written, its SHA-256 equal to the
    /// 32 bytes in the buffer (an empty buffer: no digest to compare), a
    /// kernel image an arm64 Image or raw. A refused image is discarded.
    ImageSeal {
        id: u32,
        buf: GuestBuffer,
    },
    ImageDelete {
        id: u32,
    },
    ListImages {
        buf: GuestBuffer,
    },
    /// (3.0) A new partition from the plan entry in the buffer
    /// ([`Return::Created`] = its index), stopped.
    PartitionCreate {
        buf: GuestBuffer,
    },
    /// (3.0) Replace a stopped partition's plan entry.
    PartitionConfigure {
        index: u32,
        buf: GuestBuffer,
    },
    /// (3.0) Remove a stopped partition; its RAM is scrubbed.
    PartitionDestroy {
        index: u32,
    },
    Resources {
        buf: GuestBuffer,
    },
    /// (3.0) Events from sequence number `seq` on ([`Return::ConsoleRead`]
    /// layout: bytes, next sequence number, events dropped).
    EventsRead {
        seq: u64,
        buf: GuestBuffer,
    },
    /// (3.0) Press the partition's power button; stopped for good after its
    /// shutdown timeout.
    PartitionShutdown {
        index: u32,
    },
    /// (3.1) Copy bytes of a sealed image from `offset` on into the buffer
    /// ([`Return::Accepted`] = bytes copied: the buffer's length, or fewer
    /// at the image's end, 0 past it).
    ImageRead {
        id: u32,
        offset: u64,
        buf: GuestBuffer,
    },
    /// (3.1) The manager has applied the configuration it keeps at its
    /// store: the autostart partitions the hypervisor held at boot start
    /// now (they would at the hold's timeout anyway).
    ConfigApplied,
    /// (3.1) Fill the buffer with random bytes.
    Entropy {
        buf: GuestBuffer,
    },
    /// (3.3) The host's GIC and each partition's interface.
    GicInfo {
        buf: GuestBuffer,
    },
}

impl Request {
    /// Decodes X0..X5 of an HVC. Only calls in this ABI decode; anything
    /// else (including the SMC32 forms of ours) is NOT_SUPPORTED.
    pub fn decode(regs: &[u64; 6]) -> Result<Request, AbiError> {
        let fid = (regs[0] as u32) & !FID_SVE_HINT;
        let args = &regs[1..];
        // How many argument registers the call uses; the rest are MBZ.
        let used = match fid {
            fid::ABI_VERSION | fid::WALL_CLOCK | fid::CONFIG_APPLIED => 0,
            fid::PARTITION_START
            | fid::PARTITION_STOP
            | fid::PARTITION_RESTART
            | fid::IMAGE_DELETE
            | fid::PARTITION_DESTROY
            | fid::PARTITION_SHUTDOWN => 1,
            fid::HOST_INFO
            | fid::LIST_PARTITIONS
            | fid::MGMT_TOKEN_DIGEST
            | fid::PCI_FUNCTIONS
            | fid::IMAGE_CREATE
            | fid::LIST_IMAGES
            | fid::PARTITION_CREATE
            | fid::RESOURCES
            | fid::ENTROPY
            | fid::GIC_INFO => 2,
            fid::PARTITION_INFO
            | fid::CONSOLE_WRITE
            | fid::MGMT_REPORT
            | fid::IMAGE_SEAL
            | fid::PARTITION_CONFIGURE
            | fid::EVENTS_READ => 3,
            fid::CONSOLE_READ | fid::IMAGE_WRITE | fid::IMAGE_READ => 4,
            _ => return Err(AbiError::NotSupported),
        };
        if args[used..].iter().any(|&x| x != 0) {
            return Err(AbiError::InvalidParameters);
        }
        let index = || u32::try_from(args[0]).map_err(|_| AbiError::InvalidParameters);
        let buf = |ipa: u64, len: u64| {
            if len > MAX_BUFFER_LEN {
                Err(AbiError::InvalidParameters)
            } else {
                Ok(GuestBuffer { ipa, len })
            }
        };
        Ok(match fid {
            fid::ABI_VERSION => Request::AbiVersion,
            fid::WALL_CLOCK => Request::WallClock,
            fid::HOST_INFO => Request::HostInfo {
                buf: buf(args[0], args[1])?,
            },
            fid::LIST_PARTITIONS => Request::ListPartitions {
                buf: buf(args[0], args[1])?,
            },
            fid::MGMT_TOKEN_DIGEST => Request::MgmtTokenDigest {
                buf: buf(args[0], args[1])?,
            },
            fid::PCI_FUNCTIONS => Request::PciFunctions {
                buf: buf(args[0], args[1])?,
            },
            fid::MGMT_REPORT => Request::MgmtReport {
                status: ManagerStatus::from_code(args[0]).ok_or(AbiError::InvalidParameters)?,
                buf: if args[2] > MAX_REPORT_LEN {
                    return Err(AbiError::InvalidParameters);
                } else {
                    buf(args[1], args[2])?
                },
            },
            fid::PARTITION_INFO => Request::PartitionInfo {
                index: index()?,
                buf: buf(args[1], args[2])?,
            },
            fid::PARTITION_START => Request::PartitionStart { index: index()? },
            fid::PARTITION_STOP => Request::PartitionStop { index: index()? },
            fid::PARTITION_RESTART => Request::PartitionRestart { index: index()? },
            fid::CONSOLE_READ => Request::ConsoleRead {
                index: index()?,
                offset: args[1],
                buf: buf(args[2], args[3])?,
            },
            fid::IMAGE_CREATE => Request::ImageCreate {
                kind: ImageKind::from_code(args[0]).ok_or(AbiError::InvalidParameters)?,
                size: args[1],
            },
            fid::IMAGE_WRITE => Request::ImageWrite {
                id: index()?,
                offset: args[1],
                buf: buf(args[2], args[3])?,
            },
            fid::IMAGE_SEAL => Request::ImageSeal {
                id: index()?,
                buf: buf(args[1], args[2])?,
            },
            fid::IMAGE_DELETE => Request::ImageDelete { id: index()? },
            fid::LIST_IMAGES => Request::ListImages {
                buf: buf(args[0], args[1])?,
            },
            fid::PARTITION_CREATE => Request::PartitionCreate {
                buf: buf(args[0], args[1])?,
            },
            fid::PARTITION_CONFIGURE => Request::PartitionConfigure {
                index: index()?,
                buf: buf(args[1], args[2])?,
            },
            fid::PARTITION_DESTROY => Request::PartitionDestroy { index: index()? },
            fid::RESOURCES => Request::Resources {
                buf: buf(args[0], args[1])?,
            },
            fid::EVENTS_READ => Request::EventsRead {
                seq: args[0],
                buf: buf(args[1], args[2])?,
            },
            fid::PARTITION_SHUTDOWN => Request::PartitionShutdown { index: index()? },
            fid::CONFIG_APPLIED => Request::ConfigApplied,
            fid::IMAGE_READ => Request::ImageRead {
                id: index()?,
                offset: args[1],
                buf: buf(args[2], args[3])?,
            },
            fid::GIC_INFO => Request::GicInfo {
                buf: buf(args[0], args[1])?,
            },
            fid::ENTROPY => Request::Entropy {
                buf: if args[1] > MAX_ENTROPY_LEN {
                    return Err(AbiError::InvalidParameters);
                } else {
                    buf(args[0], args[1])?
                },
            },
            // Only CONSOLE_WRITE is left: `used` rejected everything else.
            _ => Request::ConsoleWrite {
                index: index()?,
                buf: buf(args[1], args[2])?,
            },
        })
    }

    /// X0..X5 for this call, unused registers zero.
    pub fn encode(&self) -> [u64; 6] {
        let i = |index: u32| u64::from(index);
        match *self {
            Request::AbiVersion => [fid::ABI_VERSION as u64, 0, 0, 0, 0, 0],
            Request::WallClock => [fid::WALL_CLOCK as u64, 0, 0, 0, 0, 0],
            Request::HostInfo { buf } => [fid::HOST_INFO as u64, buf.ipa, buf.len, 0, 0, 0],
            Request::ListPartitions { buf } => {
                [fid::LIST_PARTITIONS as u64, buf.ipa, buf.len, 0, 0, 0]
            }
            Request::MgmtTokenDigest { buf } => {
                [fid::MGMT_TOKEN_DIGEST as u64, buf.ipa, buf.len, 0, 0, 0]
            }
            Request::PciFunctions { buf } => [fid::PCI_FUNCTIONS as u64, buf.ipa, buf.len, 0, 0, 0],
            Request::MgmtReport { status, buf } => [
                fid::MGMT_REPORT as u64,
                status.code(),
                buf.ipa,
                buf.len,
                0,
                0,
            ],
            Request::PartitionInfo { index, buf } => {
                [fid::PARTITION_INFO as u64, i(index), buf.ipa, buf.len, 0, 0]
            }
            Request::PartitionStart { index } => {
                [fid::PARTITION_START as u64, i(index), 0, 0, 0, 0]
            }
            Request::PartitionStop { index } => [fid::PARTITION_STOP as u64, i(index), 0, 0, 0, 0],
            Request::PartitionRestart { index } => {
                [fid::PARTITION_RESTART as u64, i(index), 0, 0, 0, 0]
            }
            Request::ConsoleRead { index, offset, buf } => [
                fid::CONSOLE_READ as u64,
                i(index),
                offset,
                buf.ipa,
                buf.len,
                0,
            ],
            Request::ConsoleWrite { index, buf } => {
                [fid::CONSOLE_WRITE as u64, i(index), buf.ipa, buf.len, 0, 0]
            }
            Request::ImageCreate { kind, size } => {
                [fid::IMAGE_CREATE as u64, kind.code(), size, 0, 0, 0]
            }
            Request::ImageWrite { id, offset, buf } => {
                [fid::IMAGE_WRITE as u64, i(id), offset, buf.ipa, buf.len, 0]
            }
            Request::ImageSeal { id, buf } => {
                [fid::IMAGE_SEAL as u64, i(id), buf.ipa, buf.len, 0, 0]
            }
            Request::ImageDelete { id } => [fid::IMAGE_DELETE as u64, i(id), 0, 0, 0, 0],
            Request::ListImages { buf } => [fid::LIST_IMAGES as u64, buf.ipa, buf.len, 0, 0, 0],
            Request::PartitionCreate { buf } => {
                [fid::PARTITION_CREATE as u64, buf.ipa, buf.len, 0, 0, 0]
            }
            Request::PartitionConfigure { index, buf } => [
                fid::PARTITION_CONFIGURE as u64,
                i(index),
                buf.ipa,
                buf.len,
                0,
                0,
            ],
            Request::PartitionDestroy { index } => {
                [fid::PARTITION_DESTROY as u64, i(index), 0, 0, 0, 0]
            }
            Request::Resources { buf } => [fid::RESOURCES as u64, buf.ipa, buf.len, 0, 0, 0],
            Request::EventsRead { seq, buf } => {
                [fid::EVENTS_READ as u64, seq, buf.ipa, buf.len, 0, 0]
            }
            Request::PartitionShutdown { index } => {
                [fid::PARTITION_SHUTDOWN as u64, i(index), 0, 0, 0, 0]
            }
            Request::ImageRead { id, offset, buf } => {
                [fid::IMAGE_READ as u64, i(id), offset, buf.ipa, buf.len, 0]
            }
            Request::ConfigApplied => [fid::CONFIG_APPLIED as u64, 0, 0, 0, 0, 0],
            Request::Entropy { buf } => [fid::ENTROPY as u64, buf.ipa, buf.len, 0, 0, 0],
            Request::GicInfo { buf } => [fid::GIC_INFO as u64, buf.ipa, buf.len, 0, 0, 0],
        }
    }

    /// The buffer this call names, if any.
    pub fn buffer(&self) -> Option<GuestBuffer> {
        match *self {
            Request::HostInfo { buf }
            | Request::ListPartitions { buf }
            | Request::MgmtTokenDigest { buf }
            | Request::PciFunctions { buf }
            | Request::MgmtReport { buf, .. }
            | Request::PartitionInfo { buf, .. }
            | Request::ConsoleRead { buf, .. }
            | Request::ConsoleWrite { buf, .. }
            | Request::ImageWrite { buf, .. }
            | Request::ImageRead { buf, .. }
            | Request::ImageSeal { buf, .. }
            | Request::ListImages { buf }
            | Request::PartitionCreate { buf }
            | Request::PartitionConfigure { buf, .. }
            | Request::Resources { buf }
            | Request::Entropy { buf }
            | Request::GicInfo { buf }
            | Request::EventsRead { buf, .. } => Some(buf),
            Request::AbiVersion
            | Request::WallClock
            | Request::ConfigApplied
            | Request::PartitionStart { .. }
            | Request::PartitionStop { .. }
            | Request::PartitionRestart { .. }
            | Request::ImageCreate { .. }
            | Request::ImageDelete { .. }
            | Request::PartitionDestroy { .. }
            | Request::PartitionShutdown { .. } => None,
        }
    }

    /// Decodes the X0..X3 this call returned, checking the results against
    /// the request (a byte count larger than the buffer is malformed).
    pub fn decode_return(&self, x: &[u64; 4]) -> Result<Return, CallError> {
        let status = x[0] as i64;
        if status != 0 {
            return Err(match AbiError::from_code(status) {
                Some(AbiError::BufferTooSmall) => CallError::BufferTooSmall { required: x[1] },
                Some(AbiError::Rejected) => match self.buffer() {
                    Some(buf) if x[1] <= buf.len => CallError::Rejected { len: x[1] },
                    _ => CallError::MalformedReply,
                },
                Some(err) => CallError::Refused(err),
                None => CallError::UnknownStatus(x[0]),
            });
        }
        let within = |n: u64| match self.buffer() {
            Some(buf) if n <= buf.len => Ok(n),
            _ => Err(CallError::MalformedReply),
        };
        Ok(match self {
            Request::AbiVersion => {
                Return::Version(AbiVersion::from_reg(x[1]).ok_or(CallError::MalformedReply)?)
            }
            Request::HostInfo { .. }
            | Request::ListPartitions { .. }
            | Request::PartitionInfo { .. }
            | Request::PciFunctions { .. }
            | Request::ListImages { .. }
            | Request::Resources { .. }
            | Request::Entropy { .. }
            | Request::GicInfo { .. }
            | Request::MgmtTokenDigest { .. } => Return::Written(within(x[1])?),
            Request::MgmtReport { .. }
            | Request::PartitionStart { .. }
            | Request::PartitionStop { .. }
            | Request::PartitionRestart { .. }
            | Request::ImageSeal { .. }
            | Request::ImageDelete { .. }
            | Request::PartitionConfigure { .. }
            | Request::PartitionDestroy { .. }
            | Request::PartitionShutdown { .. }
            | Request::ConfigApplied => Return::Done,
            Request::ImageCreate { .. } | Request::PartitionCreate { .. } => {
                Return::Created(u32::try_from(x[1]).map_err(|_| CallError::MalformedReply)?)
            }
            Request::ImageWrite { .. } | Request::ImageRead { .. } => {
                Return::Accepted(within(x[1])?)
            }
            Request::EventsRead { .. } => Return::ConsoleRead {
                len: within(x[1])?,
                next: x[2],
                dropped: x[3],
            },
            Request::ConsoleRead { .. } => Return::ConsoleRead {
                len: within(x[1])?,
                next: x[2],
                dropped: x[3],
            },
            Request::ConsoleWrite { .. } => Return::Accepted(within(x[1])?),
            Request::WallClock => Return::WallClock { unix_ms: x[1] },
        })
    }
}

// ---------------------------------------------------------------------------
// Returns
// ---------------------------------------------------------------------------

/// The results of a successful call (X0 = 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Return {
    /// ABI_VERSION.
    Version(AbiVersion),
    /// HOST_INFO, LIST_PARTITIONS, PARTITION_INFO: payload bytes written.
    Written(u64),
    /// PARTITION_START, _STOP, _RESTART.
    Done,
    /// CONSOLE_READ. Positions count bytes since the hypervisor started
    /// (they survive restarts of the partition); the bytes read start at
    /// `offset + dropped` and `next = offset + dropped + len`. An offset
    /// beyond the newest byte reads nothing and `next` is the current end.
    ConsoleRead { len: u64, next: u64, dropped: u64 },
    /// CONSOLE_WRITE: bytes taken (the rest did not fit the input queue).
    Accepted(u64),
    /// (2.2) WALL_CLOCK: milliseconds since 1970-01-01T00:00:00Z.
    WallClock { unix_ms: u64 },
    /// (3.0) IMAGE_CREATE's id, PARTITION_CREATE's index.
    Created(u32),
}

impl Return {
    /// X0..X3 for this result.
    pub fn encode(&self) -> [u64; 4] {
        match *self {
            Return::Version(v) => [0, v.to_reg(), 0, 0],
            Return::Written(n) | Return::Accepted(n) => [0, n, 0, 0],
            Return::WallClock { unix_ms } => [0, unix_ms, 0, 0],
            Return::Created(n) => [0, u64::from(n), 0, 0],
            Return::Done => [0; 4],
            Return::ConsoleRead { len, next, dropped } => [0, len, next, dropped],
        }
    }
}

/// X0..X3 for a refused call. For BUFFER_TOO_SMALL use
/// [`encode_buffer_too_small`], which also says how much is needed.
pub fn encode_error(err: AbiError) -> [u64; 4] {
    [err.code() as u64, 0, 0, 0]
}

/// X0..X3 for REJECTED: X1 = length of the [`Rejection`] written.
pub fn encode_rejected(len: u64) -> [u64; 4] {
    [AbiError::Rejected.code() as u64, len, 0, 0]
}

/// X0..X3 for BUFFER_TOO_SMALL: X1 = bytes the reply needs.
pub fn encode_buffer_too_small(required: u64) -> [u64; 4] {
    [AbiError::BufferTooSmall.code() as u64, required, 0, 0]
}

// ---------------------------------------------------------------------------
// Reply payloads
// ---------------------------------------------------------------------------

/// Who runs on one physical CPU.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuOwner {
    pub cpu: u32,
    /// Index of the owning partition, `None` for a CPU nobody owns.
    pub partition: Option<u32>,
}

/// HOST_INFO's payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostInfo {
    /// The hypervisor's version, e.g. "0.1.0".
    pub version: String,
    /// 3 or 5.
    pub gic_version: u8,
    pub cpu_count: u32,
    pub ram_bytes: u64,
    pub uptime_ns: u64,
    /// One entry per physical CPU, in CPU order.
    pub cpus: Vec<CpuOwner>,
}

/// A partition's life-cycle state. Wire order is frozen (postcard encodes
/// the variant index).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PartitionState {
    Stopped,
    Running,
    /// Stop requested, vCPUs not yet all off.
    Stopping,
    /// (3.0) Images being loaded, or its boot vCPU not yet in the guest.
    Starting,
    /// (3.0) The power button was pressed; the guest is shutting down
    /// (stopped by force when its shutdown timeout runs out).
    ShuttingDown,
    /// (3.0) Its watchdog ran out, a vCPU hung, or it faulted fatally;
    /// stopped. Its restart policy may start it again.
    Crashed,
}

/// A life-cycle operation on a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transition {
    Start,
    Stop,
    Restart,
    /// (3.0) Graceful shutdown.
    Shutdown,
    /// (3.0) Change or destroy.
    Configure,
}

impl PartitionState {
    /// Whether `op` is allowed from this state: start needs a stopped
    /// partition, stop and restart a running one. The one rule the
    /// hypervisor and the manager both apply (a refused one is CONFLICT).
    pub const fn allows(self, op: Transition) -> bool {
        use PartitionState as S;
        matches!(
            (self, op),
            (S::Stopped | S::Crashed, Transition::Start)
                | (
                    S::Running | S::Starting | S::ShuttingDown,
                    Transition::Stop | Transition::Restart
                )
                | (S::Running, Transition::Shutdown)
                | (S::Stopped | S::Crashed, Transition::Configure)
        )
    }

    /// The name the REST API and the UI use.
    pub const fn name(self) -> &'static str {
        match self {
            PartitionState::Stopped => "stopped",
            PartitionState::Running => "running",
            PartitionState::Stopping => "stopping",
            PartitionState::Starting => "starting",
            PartitionState::ShuttingDown => "shutting_down",
            PartitionState::Crashed => "crashed",
        }
    }
}

/// One partition, as LIST_PARTITIONS returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionSummary {
    /// The index the other calls take.
    pub index: u32,
    pub name: String,
    pub state: PartitionState,
    /// Physical CPUs, in vCPU order.
    pub cpus: Vec<u32>,
    pub ram_bytes: u64,
    /// Since the current boot; 0 when stopped.
    pub uptime_ns: u64,
    /// Boots since the hypervisor started.
    pub boot_count: u32,
    /// Whether this is the management partition (which cannot be stopped).
    pub management: bool,
    /// (3.0) Unix ms of the last state change (None without a clock).
    pub state_since_ms: Option<u64>,
    /// (3.0) Restarts its restart policy made since the hypervisor started.
    pub restarts: u32,
    /// (3.0) Why it last crashed, if it did.
    pub last_crash: Option<CrashInfo>,
}

/// (3.0) A crash: when (Unix ms, None without a clock) and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrashInfo {
    pub unix_ms: Option<u64>,
    pub reason: String,
}

/// A vCPU's PSCI power state (DEN0022 AFFINITY_INFO's three answers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum VcpuPower {
    Off,
    On,
    /// CPU_ON accepted, the vCPU has not entered the guest yet.
    OnPending,
}

/// Exits by class since the partition booted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ExitCounts {
    /// Stage-2 data aborts on emulated MMIO.
    pub mmio: u64,
    /// Trapped system register accesses.
    pub sysreg: u64,
    /// HVCs (PSCI, SMCCC, this ABI).
    pub hvc: u64,
    /// Physical interrupts taken while the vCPU ran.
    pub irq: u64,
    /// Aborts the guest caused that were not MMIO (reported as faults).
    pub abort: u64,
    /// Everything else (WFI/WFE, ...).
    pub other: u64,
}

impl ExitCounts {
    /// Class names and counts, in the order the REST API and the metrics
    /// list them.
    pub fn by_class(&self) -> [(&'static str, u64); 6] {
        [
            ("mmio", self.mmio),
            ("sysreg", self.sysreg),
            ("hvc", self.hvc),
            ("irq", self.irq),
            ("abort", self.abort),
            ("other", self.other),
        ]
    }
}

/// One vCPU of a partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VcpuInfo {
    pub vcpu: u32,
    /// The physical CPU it is pinned to.
    pub cpu: u32,
    pub power: VcpuPower,
    pub exits: ExitCounts,
    /// Virtual interrupts injected.
    pub injected: u64,
}

/// PARTITION_INFO's payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionDetail {
    pub summary: PartitionSummary,
    /// Guest faults contained since the hypervisor started.
    pub faults: u64,
    pub vcpus: Vec<VcpuInfo>,
    /// (3.0) Its plan entry as the hypervisor holds it (image indices name
    /// LIST_IMAGES entries).
    pub plan: PartitionPlan,
    /// (3.2) The host PCI functions it owns, as its last start or stop
    /// found them (PCI_FUNCTIONS gives a partition its own; this lets the
    /// manager see every partition's, e.g. which are NICs).
    pub pci: Vec<PciFunction>,
}

/// (3.3) GIC_INFO's reply: the host's GIC and the interface each
/// partition got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GicReport {
    pub host: GicHost,
    /// One entry per partition, by index (LIST_PARTITIONS order).
    pub partitions: Vec<PartitionGic>,
}

/// (3.3) The host's GIC: its version and what the hardware offers (read
/// from its ID registers at boot), not whether Pinfold uses each feature.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct GicHost {
    /// 3, 4 or 5.
    pub version: u8,
    /// GICv4.1 (every GICR_TYPER.RVPEID); false on v4.0 and v3.
    pub v4_1: bool,
    /// ITSes described (GICv5: ITS config frames).
    pub its_count: u32,
    /// Physical LPIs (GICD_TYPER.LPIS and every GICR_TYPER.PLPIS).
    pub lpis: bool,
    /// Direct vLPI injection: GICv4, every GICR_TYPER.VLPIS, an ITS with
    /// GITS_TYPER.Virtual.
    pub direct_vlpi: bool,
    /// Direct vSGI injection: GICv4.1 VSGI on every redistributor and an
    /// ITS.
    pub direct_vsgi: bool,
    /// The ID registers were read at boot; false: the description only.
    pub probed: bool,
    /// GICv5: IRSes described (0 on GICv3/v4).
    pub irs_count: u32,
    /// GICv5: FEAT_GCIE_LEGACY (the GICv3-compatible virtual interface).
    pub gcie_legacy: bool,
}

/// (3.3) One partition's interrupt controller interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct PartitionGic {
    pub index: u32,
    pub interface: GicInterface,
}

/// (3.3) The virtual interrupt controller interface a partition got. Wire
/// order is frozen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum GicInterface {
    /// The emulated GICv3 (on a GICv5 host: FEAT_GCIE_LEGACY).
    Gicv3,
    /// A native virtual GICv5.
    Gicv5,
}

impl GicInterface {
    /// "gicv3" or "gicv5", as the REST API spells it.
    pub const fn name(self) -> &'static str {
        match self {
            GicInterface::Gicv3 => "gicv3",
            GicInterface::Gicv5 => "gicv5",
        }
    }
}

/// (3.0) What an image is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ImageKind {
    Kernel,
    Initrd,
    Dtb,
}

impl ImageKind {
    pub const ALL: [ImageKind; 3] = [ImageKind::Kernel, ImageKind::Initrd, ImageKind::Dtb];

    /// The value in IMAGE_CREATE's X1.
    pub const fn code(self) -> u64 {
        match self {
            ImageKind::Kernel => 0,
            ImageKind::Initrd => 1,
            ImageKind::Dtb => 2,
        }
    }

    pub const fn from_code(code: u64) -> Option<ImageKind> {
        Some(match code {
            0 => ImageKind::Kernel,
            1 => ImageKind::Initrd,
            2 => ImageKind::Dtb,
            _ => return None,
        })
    }

    pub const fn name(self) -> &'static str {
        match self {
            ImageKind::Kernel => "kernel",
            ImageKind::Initrd => "initrd",
            ImageKind::Dtb => "dtb",
        }
    }
}

/// (3.0) One image the hypervisor holds (LIST_IMAGES).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageInfo {
    pub id: u32,
    pub kind: ImageKind,
    pub size: u64,
    /// Bytes written so far (IMAGE_WRITE's highest end).
    pub written: u64,
    /// Sealed images are complete and immutable; only they can be booted.
    pub sealed: bool,
    /// Its SHA-256 once sealed.
    pub sha256: Option<[u8; 32]>,
    /// Indices of the partitions whose plan names it.
    pub used_by: Vec<u32>,
    /// It came with the boot bundle (and cannot be deleted).
    pub boot: bool,
}

/// (3.0) Why a request's content was refused (REJECTED).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejection {
    /// The field as the plan TOML names it (`cpus`, `memory`,
    /// `device "uart1": spis`, `sha256`, ...).
    pub field: String,
    /// The whole sentence, as the build-time check prints it.
    pub message: String,
    /// It clashes with what another partition owns (the REST API's 409),
    /// rather than being invalid on its own (400).
    pub conflict: bool,
}

/// (3.0) Who holds a range of host RAM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RamOwner {
    Free,
    Hypervisor,
    /// Images the hypervisor holds.
    Images,
    Partition(u32),
    /// Freed RAM being zeroed before it is free again; `left` bytes of the
    /// range are still to zero. Appended last: the older variants keep
    /// their encoding.
    Scrubbing {
        left: u64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RamRange {
    pub base: u64,
    pub size: u64,
    pub owner: RamOwner,
}

/// (3.0) A device region of the host and who has it passed through.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceOwner {
    /// The host description's node path.
    pub node: String,
    pub base: u64,
    pub size: u64,
    /// The partition that has it passed through (its devices, or the PCIe
    /// host bridge of the partition whose plan sets `pci_host_bridge`).
    pub partition: Option<u32>,
    /// The hypervisor keeps it (the GIC, its console UART, its own ranges,
    /// a PCIe host bridge no partition owns): never assignable. A device
    /// with neither owner is free to pass through.
    pub hypervisor: bool,
}

/// (3.0) RESOURCES' payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    pub cpus: Vec<CpuOwner>,
    /// Host RAM in address order.
    pub ram: Vec<RamRange>,
    /// The largest free block a new partition's RAM could take.
    pub largest_free: u64,
    pub images_bytes: u64,
    pub devices: Vec<DeviceOwner>,
}

/// (3.0) What an event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventKind {
    /// A partition changed state.
    State,
    /// A guest fault was contained.
    Fault,
    /// A restart policy restarted a partition.
    Restart,
    /// A partition was created, changed or destroyed.
    Config,
    /// An image was created, sealed, refused or deleted.
    Image,
}

impl EventKind {
    pub const fn name(self) -> &'static str {
        match self {
            EventKind::State => "state",
            EventKind::Fault => "fault",
            EventKind::Restart => "restart",
            EventKind::Config => "config",
            EventKind::Image => "image",
        }
    }
}

/// (3.0) One entry of the hypervisor's event log (EVENTS_READ returns a
/// postcard `Vec<Event>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    pub seq: u64,
    /// Unix ms (None without a clock).
    pub unix_ms: Option<u64>,
    pub kind: EventKind,
    /// The partition's index and name at the time, if it is about one.
    pub partition: Option<(u32, String)>,
    pub message: String,
}

/// (year, month 1..=12, day 1..=31) of a day count since 1970-01-01 (H.
/// Hinnant's `civil_from_days`): how both sides spell this ABI's Unix
/// times (event times, state times) as dates.
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// Bytes `value` takes encoded.
pub fn reply_len<T: Serialize + ?Sized>(value: &T) -> usize {
    // The Size flavour cannot fail, and none of the payload types has a
    // serializer that errors; 0 would only make the later copy fail cleanly.
    postcard::serialize_with_flavor(value, postcard::ser_flavors::Size::default()).unwrap_or(0)
}

/// Encodes `value` into `out`, returning the bytes used; BufferTooSmall when
/// it does not fit ([`reply_len`] says how much is needed).
pub fn encode_reply<T: Serialize + ?Sized>(value: &T, out: &mut [u8]) -> Result<usize, AbiError> {
    postcard::to_slice(value, out)
        .map(|used| used.len())
        .map_err(|_| AbiError::BufferTooSmall)
}

/// Encodes `value` into a new vector.
pub fn encode_reply_vec<T: Serialize + ?Sized>(value: &T) -> Vec<u8> {
    // Infallible for our payload types (alloc flavour, no failing serializer).
    postcard::to_allocvec(value).unwrap_or_default()
}

/// Decodes a request at the start of `bytes` (what follows it is room for
/// a reply: PARTITION_CREATE's plan entry before space for a Rejection).
pub fn decode_prefix<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CallError> {
    postcard::take_from_bytes::<T>(bytes)
        .map(|(value, _)| value)
        .map_err(|_| CallError::MalformedReply)
}

/// Decodes a payload of exactly `bytes` (trailing bytes are malformed: the
/// length came from X1 and must match).
pub fn decode_reply<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CallError> {
    match postcard::take_from_bytes::<T>(bytes) {
        Ok((value, [])) => Ok(value),
        _ => Err(CallError::MalformedReply),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec;

    const BUF: GuestBuffer = GuestBuffer {
        ipa: 0x4010_0000,
        len: 4096,
    };

    fn regs(x0: u32, args: [u64; 5]) -> [u64; 6] {
        [x0 as u64, args[0], args[1], args[2], args[3], args[4]]
    }

    fn every_request() -> Vec<Request> {
        vec![
            Request::AbiVersion,
            Request::HostInfo { buf: BUF },
            Request::ListPartitions { buf: BUF },
            Request::PartitionInfo { index: 2, buf: BUF },
            Request::PartitionStart { index: 1 },
            Request::PartitionStop { index: 3 },
            Request::PartitionRestart { index: u32::MAX },
            Request::ConsoleRead {
                index: 1,
                offset: 0xFFFF_FFFF_0000,
                buf: BUF,
            },
            Request::ConsoleWrite { index: 1, buf: BUF },
            Request::MgmtReport {
                status: ManagerStatus::NoNetworkDevice,
                buf: GuestBuffer {
                    ipa: BUF.ipa,
                    len: 40,
                },
            },
            Request::PciFunctions { buf: BUF },
            Request::WallClock,
            Request::ImageCreate {
                kind: ImageKind::Initrd,
                size: 30 << 20,
            },
            Request::ImageWrite {
                id: 3,
                offset: 1 << 20,
                buf: BUF,
            },
            Request::ImageSeal { id: 3, buf: BUF },
            Request::ImageDelete { id: 3 },
            Request::ListImages { buf: BUF },
            Request::PartitionCreate { buf: BUF },
            Request::PartitionConfigure { index: 2, buf: BUF },
            Request::PartitionDestroy { index: 2 },
            Request::Resources { buf: BUF },
            Request::EventsRead { seq: 77, buf: BUF },
            Request::ImageRead {
                id: 3,
                offset: 4096,
                buf: BUF,
            },
            Request::ConfigApplied,
            Request::PartitionShutdown { index: 2 },
            Request::Entropy {
                buf: GuestBuffer {
                    ipa: BUF.ipa,
                    len: 32,
                },
            },
            Request::GicInfo { buf: BUF },
        ]
    }

    fn sample_plan() -> PartitionPlan {
        PartitionPlan {
            name: "alpha".to_string(),
            cpus: vec![1, 2],
            ram_size: 256 << 20,
            kernel: pinfold_config::KernelPlan {
                image: 1,
                format: pinfold_config::KernelFormat::LinuxImage,
            },
            initrd: Some(2),
            bootargs: "console=ttyAMA0".to_string(),
            console: pinfold_config::ConsolePlan { input: false },
            devices: vec![],
            management: false,
            pci_host_bridge: false,
            pci: Vec::new(),
            token_sha256: None,
            autostart: true,
            pmu: true,
            lifecycle: Default::default(),
            config_store: None,
            api_tls: true,
            gic: pinfold_config::GicSetting::Auto,
        }
    }

    fn sample_detail() -> PartitionDetail {
        PartitionDetail {
            summary: PartitionSummary {
                index: 1,
                name: "alpha".to_string(),
                state: PartitionState::Stopping,
                cpus: vec![1, 2],
                ram_bytes: 256 << 20,
                uptime_ns: 5_000_000_000,
                boot_count: 2,
                management: false,
                state_since_ms: Some(1_796_000_000_000),
                restarts: 1,
                last_crash: Some(CrashInfo {
                    unix_ms: None,
                    reason: "watchdog".to_string(),
                }),
            },
            faults: 3,
            vcpus: vec![VcpuInfo {
                vcpu: 0,
                cpu: 1,
                power: VcpuPower::OnPending,
                exits: ExitCounts {
                    mmio: 10,
                    sysreg: 3,
                    hvc: 2,
                    irq: 500,
                    abort: 1,
                    other: 7,
                },
                injected: 480,
            }],
            plan: sample_plan(),
            pci: vec![PciFunction {
                bus: 0,
                device: 3,
                function: 0,
                vendor_id: 0x1af4,
                device_id: 0x1041,
                class: 0x02_00_00,
            }],
        }
    }

    #[test]
    fn gic_info_is_call_27_with_a_buffer_and_its_report_round_trips() {
        assert_eq!(fid::GIC_INFO, 0xC600_001B);
        assert_eq!(
            Request::decode(&regs(fid::GIC_INFO, [BUF.ipa, BUF.len, 0, 0, 0])),
            Ok(Request::GicInfo { buf: BUF })
        );
        assert_eq!(
            Request::decode(&regs(fid::GIC_INFO, [BUF.ipa, BUF.len, 1, 0, 0])),
            Err(AbiError::InvalidParameters)
        );
        let report = GicReport {
            host: GicHost {
                version: 4,
                v4_1: true,
                its_count: 2,
                lpis: true,
                direct_vlpi: true,
                direct_vsgi: true,
                probed: true,
                irs_count: 0,
                gcie_legacy: false,
            },
            partitions: vec![
                PartitionGic {
                    index: 0,
                    interface: GicInterface::Gicv3,
                },
                PartitionGic {
                    index: 3,
                    interface: GicInterface::Gicv5,
                },
            ],
        };
        let bytes = encode_reply_vec(&report);
        assert_eq!(decode_reply::<GicReport>(&bytes), Ok(report));
        assert_eq!(GicInterface::Gicv5.name(), "gicv5");
    }

    #[test]
    fn abi_version_register_is_major_shifted_16_or_minor() {
        assert_eq!(AbiVersion { major: 1, minor: 2 }.to_reg(), 0x0001_0002);
        assert_eq!(ABI_VERSION.to_reg(), 0x0003_0003);
    }

    #[test]
    fn abi_version_with_reserved_upper_bits_does_not_decode() {
        assert_eq!(AbiVersion::from_reg(1 << 32 | 0x0001_0000), None);
    }

    #[test]
    fn client_is_served_by_same_major_and_newer_minor_only() {
        let client = AbiVersion { major: 1, minor: 1 };

        assert!(client.is_served_by(AbiVersion { major: 1, minor: 1 }));
        assert!(client.is_served_by(AbiVersion { major: 1, minor: 4 }));
        assert!(!client.is_served_by(AbiVersion { major: 1, minor: 0 }));
        assert!(!client.is_served_by(AbiVersion { major: 2, minor: 1 }));
    }

    #[test]
    fn function_ids_are_fast_smc64_oen6() {
        for id in [fid::ABI_VERSION, fid::HOST_INFO, fid::CONSOLE_WRITE] {
            assert_eq!(id >> 31, 1, "fast call");
            assert_eq!(id >> 30 & 1, 1, "SMC64");
            assert_eq!(id >> 24 & 0x3F, 6, "OEN");
        }
    }

    #[test]
    fn every_request_round_trips_through_registers() {
        for request in every_request() {
            assert_eq!(Request::decode(&request.encode()), Ok(request));
        }
    }

    #[test]
    fn console_read_uses_x4_for_length() {
        let request = Request::ConsoleRead {
            index: 1,
            offset: 7,
            buf: GuestBuffer {
                ipa: 0x4000_0000,
                len: 512,
            },
        };

        assert_eq!(
            request.encode(),
            [fid::CONSOLE_READ as u64, 1, 7, 0x4000_0000, 512, 0]
        );
    }

    #[test]
    fn upper_half_of_x0_is_ignored() {
        let regs = [
            0xDEAD_BEEF_0000_0000 | fid::ABI_VERSION as u64,
            0,
            0,
            0,
            0,
            0,
        ];

        assert_eq!(Request::decode(&regs), Ok(Request::AbiVersion));
    }

    #[test]
    fn sve_hint_bit_16_is_ignored() {
        let regs = regs(fid::PARTITION_START | 1 << 16, [4, 0, 0, 0, 0]);

        assert_eq!(
            Request::decode(&regs),
            Ok(Request::PartitionStart { index: 4 })
        );
    }

    #[test]
    fn wall_clock_takes_no_argument_and_returns_ms_in_x1() {
        assert_eq!(fid::WALL_CLOCK, 0xC600_000C);
        assert_eq!(
            Request::decode(&regs(fid::WALL_CLOCK, [0; 5])),
            Ok(Request::WallClock)
        );
        for i in 0..5 {
            let mut args = [0; 5];
            args[i] = 1;
            assert_eq!(
                Request::decode(&regs(fid::WALL_CLOCK, args)),
                Err(AbiError::InvalidParameters),
                "X{}",
                i + 1
            );
        }
        let ret = Return::WallClock {
            unix_ms: 1_796_132_700_250,
        };
        assert_eq!(ret.encode(), [0, 1_796_132_700_250, 0, 0]);
        assert_eq!(Request::WallClock.decode_return(&ret.encode()), Ok(ret));
        assert_eq!(
            Request::WallClock.decode_return(&encode_error(AbiError::NotFound)),
            Err(CallError::Refused(AbiError::NotFound))
        );
    }

    #[test]
    fn entropy_is_call_24_with_a_buffer_of_at_most_256_bytes() {
        assert_eq!(fid::ENTROPY, 0xC600_001A);
        assert_eq!(
            Request::decode(&regs(fid::ENTROPY, [BUF.ipa, MAX_ENTROPY_LEN, 0, 0, 0])),
            Ok(Request::Entropy {
                buf: GuestBuffer {
                    ipa: BUF.ipa,
                    len: MAX_ENTROPY_LEN
                }
            })
        );
        assert_eq!(
            Request::decode(&regs(fid::ENTROPY, [BUF.ipa, MAX_ENTROPY_LEN + 1, 0, 0, 0])),
            Err(AbiError::InvalidParameters)
        );
        assert_eq!(
            Request::decode(&regs(fid::ENTROPY, [BUF.ipa, 32, 1, 0, 0])),
            Err(AbiError::InvalidParameters)
        );
        let request = Request::Entropy {
            buf: GuestBuffer {
                ipa: BUF.ipa,
                len: 32,
            },
        };
        assert_eq!(
            request.decode_return(&[0, 32, 0, 0]),
            Ok(Return::Written(32))
        );
        assert_eq!(
            request.decode_return(&[0, 33, 0, 0]),
            Err(CallError::MalformedReply)
        );
        assert_eq!(
            request.decode_return(&encode_error(AbiError::NotFound)),
            Err(CallError::Refused(AbiError::NotFound))
        );
    }

    #[test]
    fn mgmt_report_refuses_an_unknown_status_and_an_overlong_detail() {
        assert_eq!(
            Request::decode(&regs(fid::MGMT_REPORT, [4, BUF.ipa, 8, 0, 0])),
            Err(AbiError::InvalidParameters)
        );
        assert_eq!(
            Request::decode(&regs(
                fid::MGMT_REPORT,
                [2, BUF.ipa, MAX_REPORT_LEN + 1, 0, 0]
            )),
            Err(AbiError::InvalidParameters)
        );
        assert_eq!(
            Request::decode(&regs(fid::MGMT_REPORT, [2, BUF.ipa, 8, 0, 0])),
            Ok(Request::MgmtReport {
                status: ManagerStatus::NoNetworkDevice,
                buf: GuestBuffer {
                    ipa: BUF.ipa,
                    len: 8
                }
            })
        );
    }

    #[test]
    fn manager_status_codes_round_trip() {
        for status in ManagerStatus::ALL {
            assert_eq!(ManagerStatus::from_code(status.code()), Some(status));
        }
        assert_eq!(ManagerStatus::from_code(4), None);
    }

    #[test]
    fn unknown_function_number_is_not_supported() {
        assert_eq!(
            Request::decode(&regs(fid::BASE | 28, [0; 5])),
            Err(AbiError::NotSupported)
        );
    }

    #[test]
    fn smc32_form_of_our_call_is_not_supported() {
        let smc32 = fid::ABI_VERSION & !(1 << 30);

        assert_eq!(
            Request::decode(&regs(smc32, [0; 5])),
            Err(AbiError::NotSupported)
        );
    }

    #[test]
    fn smccc_vendor_uid_query_is_not_supported() {
        // Linux probes 0x8600_FF01 (and might the SMC64 form) for KVM.
        assert_eq!(
            Request::decode(&regs(fid::BASE | 0xFF01, [0; 5])),
            Err(AbiError::NotSupported)
        );
    }

    #[test]
    fn other_oen_is_not_supported() {
        // OEN 5, standard hypervisor service.
        assert_eq!(
            Request::decode(&regs(0xC500_0000, [0; 5])),
            Err(AbiError::NotSupported)
        );
    }

    #[test]
    fn nonzero_unused_register_is_invalid_parameters() {
        for request in every_request() {
            let mut regs = request.encode();
            // The highest register no call uses is always X5.
            regs[5] = 1;

            assert_eq!(
                Request::decode(&regs),
                Err(AbiError::InvalidParameters),
                "{request:?}"
            );
        }
    }

    #[test]
    fn register_just_past_the_used_ones_must_be_zero() {
        let regs = regs(fid::PARTITION_START, [1, 0x4000_0000, 0, 0, 0]);

        assert_eq!(Request::decode(&regs), Err(AbiError::InvalidParameters));
    }

    #[test]
    fn index_wider_than_32_bits_is_invalid_parameters() {
        let regs = regs(fid::PARTITION_STOP, [1 << 32, 0, 0, 0, 0]);

        assert_eq!(Request::decode(&regs), Err(AbiError::InvalidParameters));
    }

    #[test]
    fn buffer_over_the_cap_is_invalid_parameters() {
        let at_cap = regs(fid::HOST_INFO, [0x4000_0000, MAX_BUFFER_LEN, 0, 0, 0]);
        let over = regs(fid::HOST_INFO, [0x4000_0000, MAX_BUFFER_LEN + 1, 0, 0, 0]);

        assert!(Request::decode(&at_cap).is_ok());
        assert_eq!(Request::decode(&over), Err(AbiError::InvalidParameters));
    }

    #[test]
    fn console_read_length_over_the_cap_is_invalid_parameters() {
        let regs = regs(fid::CONSOLE_READ, [1, 0, 0x4000_0000, u64::MAX, 0]);

        assert_eq!(Request::decode(&regs), Err(AbiError::InvalidParameters));
    }

    #[test]
    fn error_codes_round_trip_and_are_negative() {
        for err in AbiError::ALL {
            assert!(err.code() < 0);
            assert_eq!(AbiError::from_code(err.code()), Some(err));
        }
        assert_eq!(AbiError::from_code(0), None);
        assert_eq!(AbiError::from_code(-4), None);
    }

    #[test]
    fn error_codes_are_the_documented_values() {
        let codes: Vec<i64> = AbiError::ALL.iter().map(|e| e.code()).collect();

        assert_eq!(codes, vec![-1, -2, -3, -9, -10, -11, -12, -13, -14]);
    }

    #[test]
    fn returns_round_trip_through_registers() {
        let cases = [
            (Request::AbiVersion, Return::Version(ABI_VERSION)),
            (Request::HostInfo { buf: BUF }, Return::Written(100)),
            (Request::PartitionStop { index: 1 }, Return::Done),
            (
                Request::ConsoleRead {
                    index: 1,
                    offset: 5,
                    buf: BUF,
                },
                Return::ConsoleRead {
                    len: 10,
                    next: 20,
                    dropped: 5,
                },
            ),
            (
                Request::ConsoleWrite { index: 1, buf: BUF },
                Return::Accepted(3),
            ),
        ];

        for (request, ret) in cases {
            assert_eq!(request.decode_return(&ret.encode()), Ok(ret));
        }
    }

    #[test]
    fn refused_status_decodes_to_its_error() {
        let x = encode_error(AbiError::Conflict);

        assert_eq!(
            Request::PartitionStart { index: 0 }.decode_return(&x),
            Err(CallError::Refused(AbiError::Conflict))
        );
    }

    #[test]
    fn buffer_too_small_carries_the_required_length() {
        let x = encode_buffer_too_small(9000);

        assert_eq!(
            Request::ListPartitions { buf: BUF }.decode_return(&x),
            Err(CallError::BufferTooSmall { required: 9000 })
        );
    }

    #[test]
    fn undefined_status_is_unknown() {
        let x = [(-77i64) as u64, 0, 0, 0];

        assert_eq!(
            Request::AbiVersion.decode_return(&x),
            Err(CallError::UnknownStatus((-77i64) as u64))
        );
    }

    #[test]
    fn written_count_larger_than_buffer_is_malformed() {
        let x = Return::Written(BUF.len + 1).encode();

        assert_eq!(
            Request::HostInfo { buf: BUF }.decode_return(&x),
            Err(CallError::MalformedReply)
        );
    }

    #[test]
    fn only_stopped_partition_may_start_and_only_running_may_stop_or_restart() {
        use PartitionState::*;
        use Transition::*;
        let allowed: Vec<(PartitionState, Transition)> = [Stopped, Running, Stopping]
            .into_iter()
            .flat_map(|s| [Start, Stop, Restart].into_iter().map(move |t| (s, t)))
            .filter(|&(s, t)| s.allows(t))
            .collect();

        assert_eq!(
            allowed,
            vec![(Stopped, Start), (Running, Stop), (Running, Restart)]
        );
    }

    #[test]
    fn payload_round_trips() {
        let detail = sample_detail();
        let mut out = [0u8; 256];

        let used = encode_reply(&detail, &mut out).expect("fits");

        assert_eq!(used, reply_len(&detail));
        assert_eq!(decode_reply::<PartitionDetail>(&out[..used]), Ok(detail));
    }

    #[test]
    fn host_info_round_trips_with_unowned_cpu() {
        let info = HostInfo {
            version: "0.1.0".to_string(),
            gic_version: 3,
            cpu_count: 2,
            ram_bytes: 2 << 30,
            uptime_ns: 12,
            cpus: vec![
                CpuOwner {
                    cpu: 0,
                    partition: Some(0),
                },
                CpuOwner {
                    cpu: 1,
                    partition: None,
                },
            ],
        };

        let bytes = encode_reply_vec(&info);

        assert_eq!(decode_reply::<HostInfo>(&bytes), Ok(info));
    }

    #[test]
    fn payload_that_does_not_fit_is_buffer_too_small() {
        let detail = sample_detail();
        let mut out = vec![0u8; reply_len(&detail) - 1];

        assert_eq!(
            encode_reply(&detail, &mut out),
            Err(AbiError::BufferTooSmall)
        );
    }

    #[test]
    fn truncated_payload_is_malformed() {
        let bytes = encode_reply_vec(&sample_detail());

        assert_eq!(
            decode_reply::<PartitionDetail>(&bytes[..bytes.len() - 1]),
            Err(CallError::MalformedReply)
        );
    }

    #[test]
    fn payload_with_trailing_bytes_is_malformed() {
        let mut bytes = encode_reply_vec(&sample_detail());
        bytes.push(0);

        assert_eq!(
            decode_reply::<PartitionDetail>(&bytes),
            Err(CallError::MalformedReply)
        );
    }

    #[test]
    fn rejected_carries_the_rejection_length_within_the_buffer() {
        let request = Request::PartitionCreate { buf: BUF };

        assert_eq!(
            request.decode_return(&encode_rejected(90)),
            Err(CallError::Rejected { len: 90 })
        );
        assert_eq!(
            request.decode_return(&encode_rejected(BUF.len + 1)),
            Err(CallError::MalformedReply)
        );
    }

    #[test]
    fn create_returns_the_new_index_and_image_kinds_round_trip() {
        let request = Request::PartitionCreate { buf: BUF };
        assert_eq!(
            request.decode_return(&Return::Created(4).encode()),
            Ok(Return::Created(4))
        );
        for kind in ImageKind::ALL {
            assert_eq!(ImageKind::from_code(kind.code()), Some(kind));
        }
        assert_eq!(
            Request::decode(&regs(fid::IMAGE_CREATE, [3, 4096, 0, 0, 0])),
            Err(AbiError::InvalidParameters)
        );
    }

    #[test]
    fn crashed_and_stopped_may_start_or_be_configured_running_may_shut_down() {
        use PartitionState as S;
        assert!(S::Crashed.allows(Transition::Start));
        assert!(S::Crashed.allows(Transition::Configure));
        assert!(!S::Running.allows(Transition::Configure));
        assert!(S::Running.allows(Transition::Shutdown));
        assert!(!S::Stopped.allows(Transition::Shutdown));
        assert!(S::ShuttingDown.allows(Transition::Stop));
    }

    #[test]
    fn unknown_enum_variant_is_malformed() {
        // PartitionState has six variants; index 6 is not one of them.
        assert_eq!(
            decode_reply::<PartitionState>(&[6]),
            Err(CallError::MalformedReply)
        );
    }
}
