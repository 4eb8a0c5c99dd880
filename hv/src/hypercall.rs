//! The management hypercall dispatcher: checks who is calling and where its buffers are, then answers a `pinfold_abi::Request` from the hypervisor's state.
//!
//! The arch code hands over the caller's X0..X5 and writes back X0..X3;
//! everything between is here and host-tested. The rules, in the order they
//! are applied:
//!
//! 1. Only the management partition may call; anyone else gets
//!    NOT_SUPPORTED for every function ID, so an ordinary guest cannot even
//!    learn which calls exist.
//! 2. The registers decode ([`Request::decode`]): unknown calls are
//!    NOT_SUPPORTED, bad arguments (non-zero MBZ registers, an index wider
//!    than 32 bits, a buffer over [`MAX_BUFFER_LEN`]) INVALID_PARAMETERS.
//!    The cap means the hypervisor never allocates more than 64 KiB on a
//!    guest's behalf.
//! 3. A buffer must lie wholly inside the caller's own RAM
//!    ([`IpaRange::contains_span`], which also rejects a span that wraps
//!    past 2^64), else BAD_ADDRESS. A copy that still faults (a hole in the
//!    mapping) is BAD_ADDRESS too.
//! 4. The operation. No partition, the management one included, may be
//!    started, stopped or restarted through this ABI if it is the
//!    management partition: stopping the caller would take the API down
//!    with it. That is CONFLICT, checked here so that no [`Manage`]
//!    implementation can forget it.
//!
//! A misbehaving caller only ever gets an error status back: nothing here
//! panics or logs on its behalf.

use alloc::vec;
use alloc::vec::Vec;

use pinfold_abi::{
    encode_buffer_too_small, encode_error, encode_rejected, encode_reply_vec, GuestBuffer,
    ABI_VERSION,
};
pub use pinfold_abi::{
    AbiError, Event, GicReport, HostInfo, ImageInfo, ImageKind, ManagerStatus, PartitionDetail,
    PartitionPlan, PartitionSummary, PciFunction, Rejection, Request, Resources, Return,
    MAX_BUFFER_LEN,
};

use crate::addr::{Ipa, IpaRange};
use crate::console::RingRead;

/// A copy to or from guest memory failed (the IPA is not backed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuestMemoryFault;

/// The calling partition's RAM, as the hypervisor reaches it.
pub trait GuestMemory {
    /// The caller's RAM; every buffer must lie inside it.
    fn ram_range(&self) -> IpaRange;
    /// Copies `bytes` to guest memory at `ipa`.
    fn write(&mut self, ipa: Ipa, bytes: &[u8]) -> Result<(), GuestMemoryFault>;
    /// Fills `out` from guest memory at `ipa`.
    fn read(&self, ipa: Ipa, out: &mut [u8]) -> Result<(), GuestMemoryFault>;
}

/// What the hypervisor offers the management partition. Indices are the
/// `PartitionSummary::index` values, not positions in any list.
pub trait Manage {
    fn host_info(&self) -> HostInfo;
    fn partitions(&self) -> Vec<PartitionSummary>;
    fn detail(&self, index: u32) -> Option<PartitionDetail>;
    /// NotFound for an unknown index, Conflict unless stopped.
    fn start(&mut self, index: u32) -> Result<(), AbiError>;
    /// NotFound for an unknown index, Conflict unless running.
    fn stop(&mut self, index: u32) -> Result<(), AbiError>;
    /// NotFound for an unknown index, Conflict unless running.
    fn restart(&mut self, index: u32) -> Result<(), AbiError>;
    /// Console output from position `offset` (see `ConsoleRing::read`);
    /// `None` for an unknown index.
    fn console_read(&self, index: u32, offset: u64, out: &mut [u8]) -> Option<RingRead>;
    /// Queues `bytes` as console input, returning how many fitted; `None`
    /// for an unknown index.
    fn console_write(&mut self, index: u32, bytes: &[u8]) -> Option<usize>;
    /// SHA-256 of the REST API's bearer token.
    fn token_digest(&self) -> [u8; 32];
    /// (2.1) The manager's state and a sentence about it (UTF-8, at most
    /// `MAX_REPORT_LEN` bytes; invalid UTF-8 is replaced).
    fn report(&mut self, status: ManagerStatus, detail: &[u8]);
    /// (2.1) The functions behind the caller's host bridge.
    fn pci_functions(&self) -> Vec<PciFunction>;
    /// (2.2) Milliseconds since the Unix epoch now; None when the host had
    /// no clock at boot.
    fn wall_clock_ms(&self) -> Option<u64>;

    // (3.0) Run-time partitions, images, resources, events, shutdown. The
    // defaults refuse (NOT_SUPPORTED) so that a fake needs only what its
    // tests use.

    /// A new empty image; its id.
    fn image_create(&mut self, _kind: ImageKind, _size: u64) -> Result<u32, AbiError> {
        Err(AbiError::NotSupported)
    }
    /// Copy `bytes` to `offset` of unsealed image `id`; how many were taken.
    fn image_write(&mut self, _id: u32, _offset: u64, _bytes: &[u8]) -> Result<usize, AbiError> {
        Err(AbiError::NotSupported)
    }
    /// (3.1) The manager applied its stored configuration: start the held
    /// autostart partitions.
    fn config_applied(&mut self) -> Result<(), AbiError> {
        Err(AbiError::NotSupported)
    }
    /// (3.1) Copy bytes of sealed image `id` from `offset` into `out`; how
    /// many.
    fn image_read(&mut self, _id: u32, _offset: u64, _out: &mut [u8]) -> Result<usize, AbiError> {
        Err(AbiError::NotSupported)
    }
    /// Seal image `id`, comparing its SHA-256 with `digest` if given.
    fn image_seal(&mut self, _id: u32, _digest: Option<[u8; 32]>) -> Result<(), Refusal> {
        Err(AbiError::NotSupported.into())
    }
    fn image_delete(&mut self, _id: u32) -> Result<(), AbiError> {
        Err(AbiError::NotSupported)
    }
    fn images(&self) -> Vec<ImageInfo> {
        Vec::new()
    }
    /// A new stopped partition from `plan`; its index.
    fn create(&mut self, _plan: PartitionPlan) -> Result<u32, Refusal> {
        Err(AbiError::NotSupported.into())
    }
    /// Replace stopped partition `index`'s plan entry.
    fn configure(&mut self, _index: u32, _plan: PartitionPlan) -> Result<(), Refusal> {
        Err(AbiError::NotSupported.into())
    }
    /// Remove stopped partition `index`, scrubbing its RAM.
    fn destroy(&mut self, _index: u32) -> Result<(), AbiError> {
        Err(AbiError::NotSupported)
    }
    fn resources(&self) -> Option<Resources> {
        None
    }
    /// Events from `seq` on, as many as fit `max_bytes` encoded: the events,
    /// the next sequence number and how many before them were lost.
    fn events(&self, _seq: u64, _max_bytes: usize) -> Option<(Vec<Event>, u64, u64)> {
        None
    }
    /// Press partition `index`'s power button.
    fn shutdown(&mut self, _index: u32) -> Result<(), AbiError> {
        Err(AbiError::NotSupported)
    }
    /// (3.1) Fill `out` with random bytes from the hypervisor's DRBG;
    /// NotFound when it found no entropy source at boot.
    fn entropy(&mut self, _out: &mut [u8]) -> Result<(), AbiError> {
        Err(AbiError::NotSupported)
    }
    /// (3.3) The host's GIC and each partition's interface; None: not
    /// offered (NOT_SUPPORTED).
    fn gic_info(&self) -> Option<GicReport> {
        None
    }
}

/// Why a call whose buffer holds a request was refused: a plain status, or
/// the content broke a rule ([`Rejection`], written back to the buffer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    Status(AbiError),
    Rejected(Rejection),
}

impl From<AbiError> for Refusal {
    fn from(err: AbiError) -> Self {
        Refusal::Status(err)
    }
}

/// Handles one management hypercall: `regs` is the caller's X0..X5, the
/// result its X0..X3.
pub fn dispatch(
    caller_is_management: bool,
    regs: &[u64; 6],
    mem: &mut impl GuestMemory,
    hv: &mut impl Manage,
) -> [u64; 4] {
    if !caller_is_management {
        return encode_error(AbiError::NotSupported);
    }
    match handle(regs, mem, hv) {
        Ok(ret) => ret.encode(),
        Err(Failure::Refused(err)) => encode_error(err),
        Err(Failure::TooSmall { required }) => encode_buffer_too_small(required),
        Err(Failure::Rejected { len }) => encode_rejected(len),
    }
}

/// How a call failed, before it is put in registers.
enum Failure {
    Refused(AbiError),
    TooSmall {
        required: u64,
    },
    /// A Rejection of `len` bytes was written to the call's buffer.
    Rejected {
        len: u64,
    },
}

/// A Refusal put in registers: a Rejection goes into the call's buffer
/// (truncated rejections are not possible: the sentence is cut to fit).
fn refuse(mem: &mut impl GuestMemory, buf: GuestBuffer, refusal: Refusal) -> Failure {
    match refusal {
        Refusal::Status(err) => Failure::Refused(err),
        Refusal::Rejected(mut rejection) => {
            let mut bytes = encode_reply_vec(&rejection);
            while bytes.len() as u64 > buf.len && !rejection.message.is_empty() {
                let cut = rejection
                    .message
                    .len()
                    .saturating_sub((bytes.len() as u64 - buf.len) as usize);
                let mut at = cut.min(rejection.message.len());
                while !rejection.message.is_char_boundary(at) {
                    at -= 1;
                }
                rejection.message.truncate(at);
                bytes = encode_reply_vec(&rejection);
            }
            if bytes.len() as u64 > buf.len {
                return Failure::Refused(AbiError::InvalidParameters);
            }
            match copy_out(mem, buf.ipa, &bytes) {
                Ok(()) => Failure::Rejected {
                    len: bytes.len() as u64,
                },
                Err(err) => Failure::Refused(err),
            }
        }
    }
}

/// Reads a postcard plan entry from the caller's buffer.
fn read_plan(mem: &mut impl GuestMemory, buf: GuestBuffer) -> Result<PartitionPlan, Failure> {
    let mut bytes = vec![0u8; buf.len as usize];
    mem.read(Ipa(buf.ipa), &mut bytes)
        .map_err(|GuestMemoryFault| AbiError::BadAddress)?;
    pinfold_abi::decode_prefix::<PartitionPlan>(&bytes)
        .map_err(|_| AbiError::InvalidParameters.into())
}

impl From<AbiError> for Failure {
    fn from(err: AbiError) -> Self {
        Failure::Refused(err)
    }
}

fn handle(
    regs: &[u64; 6],
    mem: &mut impl GuestMemory,
    hv: &mut impl Manage,
) -> Result<Return, Failure> {
    let request = Request::decode(regs)?;
    if let Some(buf) = request.buffer() {
        if !mem.ram_range().contains_span(Ipa(buf.ipa), buf.len) {
            return Err(AbiError::BadAddress.into());
        }
    }
    match request {
        Request::AbiVersion => Ok(Return::Version(ABI_VERSION)),
        Request::WallClock => hv
            .wall_clock_ms()
            .map(|unix_ms| Return::WallClock { unix_ms })
            .ok_or(AbiError::NotFound.into()),
        Request::HostInfo { buf } => write_reply(mem, buf, &encode_reply_vec(&hv.host_info())),
        Request::ListPartitions { buf } => {
            write_reply(mem, buf, &encode_reply_vec(&hv.partitions()))
        }
        Request::MgmtTokenDigest { buf } => {
            let digest = hv.token_digest();
            // All zeros: no plan digest and no entropy to make a token with.
            if digest == [0; 32] {
                return Err(AbiError::NotFound.into());
            }
            write_reply(mem, buf, &digest)
        }
        Request::Entropy { buf } => {
            // At most MAX_ENTROPY_LEN bytes: Request::decode checked.
            let mut bytes = vec![0u8; buf.len as usize];
            hv.entropy(&mut bytes)?;
            write_reply(mem, buf, &bytes)
        }
        Request::PciFunctions { buf } => {
            write_reply(mem, buf, &encode_reply_vec(&hv.pci_functions()))
        }
        Request::GicInfo { buf } => {
            let report = hv.gic_info().ok_or(AbiError::NotSupported)?;
            write_reply(mem, buf, &encode_reply_vec(&report))
        }
        Request::MgmtReport { status, buf } => {
            // `buf.len` is at most MAX_REPORT_LEN: Request::decode checked.
            let mut detail = vec![0u8; buf.len as usize];
            mem.read(Ipa(buf.ipa), &mut detail)
                .map_err(|GuestMemoryFault| AbiError::BadAddress)?;
            hv.report(status, &detail);
            Ok(Return::Done)
        }
        Request::PartitionInfo { index, buf } => {
            let detail = hv.detail(index).ok_or(AbiError::NotFound)?;
            write_reply(mem, buf, &encode_reply_vec(&detail))
        }
        Request::PartitionStart { index } => {
            refuse_management(hv, index)?;
            hv.start(index)
                .map(|()| Return::Done)
                .map_err(Failure::from)
        }
        Request::PartitionStop { index } => {
            refuse_management(hv, index)?;
            hv.stop(index).map(|()| Return::Done).map_err(Failure::from)
        }
        Request::PartitionRestart { index } => {
            refuse_management(hv, index)?;
            hv.restart(index)
                .map(|()| Return::Done)
                .map_err(Failure::from)
        }
        Request::ConsoleRead { index, offset, buf } => {
            // `buf.len` is at most MAX_BUFFER_LEN: Request::decode checked.
            let mut scratch = vec![0u8; buf.len as usize];
            let read = hv
                .console_read(index, offset, &mut scratch)
                .ok_or(AbiError::NotFound)?;
            let len = read.len.min(scratch.len());
            copy_out(mem, buf.ipa, &scratch[..len])?;
            Ok(Return::ConsoleRead {
                len: len as u64,
                next: read.next,
                dropped: read.dropped,
            })
        }
        Request::ConsoleWrite { index, buf } => {
            let mut bytes = vec![0u8; buf.len as usize];
            mem.read(Ipa(buf.ipa), &mut bytes)
                .map_err(|GuestMemoryFault| AbiError::BadAddress)?;
            let accepted = hv.console_write(index, &bytes).ok_or(AbiError::NotFound)?;
            Ok(Return::Accepted(accepted.min(bytes.len()) as u64))
        }
        Request::ImageCreate { kind, size } => hv
            .image_create(kind, size)
            .map(Return::Created)
            .map_err(Failure::from),
        Request::ImageWrite { id, offset, buf } => {
            let mut bytes = vec![0u8; buf.len as usize];
            mem.read(Ipa(buf.ipa), &mut bytes)
                .map_err(|GuestMemoryFault| AbiError::BadAddress)?;
            let taken = hv.image_write(id, offset, &bytes)?;
            Ok(Return::Accepted(taken.min(bytes.len()) as u64))
        }
        Request::ConfigApplied => hv
            .config_applied()
            .map(|()| Return::Done)
            .map_err(Failure::from),
        Request::ImageRead { id, offset, buf } => {
            // `buf.len` is at most MAX_BUFFER_LEN: Request::decode checked.
            let mut scratch = vec![0u8; buf.len as usize];
            let n = hv.image_read(id, offset, &mut scratch)?.min(scratch.len());
            copy_out(mem, buf.ipa, &scratch[..n])?;
            Ok(Return::Accepted(n as u64))
        }
        Request::ImageSeal { id, buf } => {
            // The digest first; the rest of the buffer is room for a
            // Rejection's whole sentence.
            let digest = match buf.len {
                0 => None,
                32.. => {
                    let mut d = [0u8; 32];
                    mem.read(Ipa(buf.ipa), &mut d)
                        .map_err(|GuestMemoryFault| AbiError::BadAddress)?;
                    Some(d)
                }
                _ => return Err(AbiError::InvalidParameters.into()),
            };
            hv.image_seal(id, digest)
                .map(|()| Return::Done)
                .map_err(|r| refuse(mem, buf, r))
        }
        Request::ImageDelete { id } => hv
            .image_delete(id)
            .map(|()| Return::Done)
            .map_err(Failure::from),
        Request::ListImages { buf } => write_reply(mem, buf, &encode_reply_vec(&hv.images())),
        Request::PartitionCreate { buf } => {
            let plan = read_plan(mem, buf)?;
            hv.create(plan)
                .map(Return::Created)
                .map_err(|r| refuse(mem, buf, r))
        }
        Request::PartitionConfigure { index, buf } => {
            refuse_management(hv, index)?;
            let plan = read_plan(mem, buf)?;
            hv.configure(index, plan)
                .map(|()| Return::Done)
                .map_err(|r| refuse(mem, buf, r))
        }
        Request::PartitionDestroy { index } => {
            refuse_management(hv, index)?;
            hv.destroy(index)
                .map(|()| Return::Done)
                .map_err(Failure::from)
        }
        Request::Resources { buf } => {
            let resources = hv.resources().ok_or(AbiError::NotSupported)?;
            write_reply(mem, buf, &encode_reply_vec(&resources))
        }
        Request::EventsRead { seq, buf } => {
            let (events, next, dropped) = hv
                .events(seq, buf.len as usize)
                .ok_or(AbiError::NotSupported)?;
            let bytes = encode_reply_vec(&events);
            if bytes.len() as u64 > buf.len {
                return Err(Failure::TooSmall {
                    required: bytes.len() as u64,
                });
            }
            copy_out(mem, buf.ipa, &bytes)?;
            Ok(Return::ConsoleRead {
                len: bytes.len() as u64,
                next,
                dropped,
            })
        }
        Request::PartitionShutdown { index } => {
            refuse_management(hv, index)?;
            hv.shutdown(index)
                .map(|()| Return::Done)
                .map_err(Failure::from)
        }
    }
}

/// CONFLICT when `index` is the management partition (see module docs).
fn refuse_management(hv: &impl Manage, index: u32) -> Result<(), AbiError> {
    let is_management = hv
        .partitions()
        .iter()
        .any(|p| p.index == index && p.management);
    if is_management {
        Err(AbiError::Conflict)
    } else {
        Ok(())
    }
}

/// Copies an encoded payload into the caller's buffer, or says how large
/// the buffer must be.
fn write_reply(
    mem: &mut impl GuestMemory,
    buf: GuestBuffer,
    payload: &[u8],
) -> Result<Return, Failure> {
    let required = payload.len() as u64;
    if required > buf.len {
        return Err(Failure::TooSmall { required });
    }
    copy_out(mem, buf.ipa, payload)?;
    Ok(Return::Written(required))
}

fn copy_out(mem: &mut impl GuestMemory, ipa: u64, bytes: &[u8]) -> Result<(), AbiError> {
    mem.write(Ipa(ipa), bytes)
        .map_err(|GuestMemoryFault| AbiError::BadAddress)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::{String, ToString};
    use pinfold_abi::{
        decode_reply, fid, CallError, CpuOwner, ExitCounts, PartitionState, VcpuInfo, VcpuPower,
    };

    const RAM_BASE: u64 = 0x8000_0000;
    const RAM_SIZE: u64 = 0x2_0000;
    /// A page inside RAM that the tests use as the reply buffer.
    const BUF_IPA: u64 = RAM_BASE + 0x1000;

    /// The caller's RAM. Its `hole` is an IPA range inside `ram_range` that
    /// is not backed, to model a copy that faults after the range check.
    struct FakeRam {
        bytes: Vec<u8>,
        hole: Option<(u64, u64)>,
        writes: usize,
    }

    impl FakeRam {
        fn new() -> Self {
            FakeRam {
                bytes: vec![0xEE; RAM_SIZE as usize],
                hole: None,
                writes: 0,
            }
        }

        fn span(&self, ipa: Ipa, len: usize) -> Result<core::ops::Range<usize>, GuestMemoryFault> {
            let start = ipa.0.checked_sub(RAM_BASE).ok_or(GuestMemoryFault)? as usize;
            let end = start.checked_add(len).ok_or(GuestMemoryFault)?;
            if end > self.bytes.len() {
                return Err(GuestMemoryFault);
            }
            if let Some((lo, hi)) = self.hole {
                if ipa.0 < hi && ipa.0 + len as u64 > lo {
                    return Err(GuestMemoryFault);
                }
            }
            Ok(start..end)
        }

        fn at(&self, ipa: u64, len: u64) -> &[u8] {
            let start = (ipa - RAM_BASE) as usize;
            &self.bytes[start..start + len as usize]
        }

        fn put(&mut self, ipa: u64, bytes: &[u8]) {
            let start = (ipa - RAM_BASE) as usize;
            self.bytes[start..start + bytes.len()].copy_from_slice(bytes);
        }
    }

    impl GuestMemory for FakeRam {
        fn ram_range(&self) -> IpaRange {
            IpaRange::new(RAM_BASE, RAM_SIZE)
        }

        fn write(&mut self, ipa: Ipa, bytes: &[u8]) -> Result<(), GuestMemoryFault> {
            let range = self.span(ipa, bytes.len())?;
            self.bytes[range].copy_from_slice(bytes);
            self.writes += 1;
            Ok(())
        }

        fn read(&self, ipa: Ipa, out: &mut [u8]) -> Result<(), GuestMemoryFault> {
            let range = self.span(ipa, out.len())?;
            out.copy_from_slice(&self.bytes[range]);
            Ok(())
        }
    }

    /// Partition indices are deliberately not 0, 1, 2 so that a dispatcher
    /// mixing up index and list position fails.
    const MGMT: u32 = 7;
    const ALPHA: u32 = 3;
    const BETA: u32 = 12;
    const MISSING: u32 = 4;

    struct FakeHv {
        partitions: Vec<PartitionSummary>,
        /// Console output of ALPHA, with its positions starting at 1000 so
        /// offsets and slice indices differ.
        console: Vec<u8>,
        console_base: u64,
        input: Vec<u8>,
        input_room: usize,
        calls: Vec<String>,
        clock_ms: Option<u64>,
        entropy_source: bool,
        gic: Option<GicReport>,
    }

    impl FakeHv {
        fn new() -> Self {
            let p = |index, name: &str, state, management| PartitionSummary {
                index,
                name: name.to_string(),
                state,
                cpus: vec![index],
                ram_bytes: 64 << 20,
                uptime_ns: 1_000_000,
                boot_count: 1,
                management,
                state_since_ms: None,
                restarts: 0,
                last_crash: None,
            };
            FakeHv {
                partitions: vec![
                    p(MGMT, "mgmt", PartitionState::Running, true),
                    p(ALPHA, "alpha", PartitionState::Running, false),
                    p(BETA, "beta", PartitionState::Stopped, false),
                ],
                console: b"hello, world\n".to_vec(),
                console_base: 1000,
                input: Vec::new(),
                input_room: 4,
                calls: Vec::new(),
                clock_ms: Some(1_796_132_700_250),
                entropy_source: true,
                gic: None,
            }
        }

        fn find(&mut self, index: u32) -> Result<&mut PartitionSummary, AbiError> {
            self.partitions
                .iter_mut()
                .find(|p| p.index == index)
                .ok_or(AbiError::NotFound)
        }

        fn transition(
            &mut self,
            name: &str,
            index: u32,
            from: PartitionState,
            to: PartitionState,
        ) -> Result<(), AbiError> {
            self.calls.push(name.to_string());
            let p = self.find(index)?;
            if p.state != from {
                return Err(AbiError::Conflict);
            }
            p.state = to;
            Ok(())
        }
    }

    impl Manage for FakeHv {
        fn host_info(&self) -> HostInfo {
            HostInfo {
                version: "0.1.0".to_string(),
                gic_version: 3,
                cpu_count: 4,
                ram_bytes: 2 << 30,
                uptime_ns: 42,
                cpus: vec![
                    CpuOwner {
                        cpu: 0,
                        partition: Some(MGMT),
                    },
                    CpuOwner {
                        cpu: 1,
                        partition: None,
                    },
                ],
            }
        }

        fn partitions(&self) -> Vec<PartitionSummary> {
            self.partitions.clone()
        }

        fn detail(&self, index: u32) -> Option<PartitionDetail> {
            let summary = self.partitions.iter().find(|p| p.index == index)?.clone();
            Some(PartitionDetail {
                summary,
                faults: 2,
                vcpus: vec![VcpuInfo {
                    vcpu: 0,
                    cpu: index,
                    power: VcpuPower::On,
                    exits: ExitCounts {
                        mmio: 9,
                        ..ExitCounts::default()
                    },
                    injected: 5,
                }],
                plan: pinfold_config::PartitionPlan::new(
                    "p".to_string(),
                    vec![index],
                    64 << 20,
                    pinfold_config::KernelPlan {
                        image: 0,
                        format: pinfold_config::KernelFormat::Raw,
                    },
                ),
                pci: Vec::new(),
            })
        }

        fn start(&mut self, index: u32) -> Result<(), AbiError> {
            self.transition(
                "start",
                index,
                PartitionState::Stopped,
                PartitionState::Running,
            )
        }

        fn stop(&mut self, index: u32) -> Result<(), AbiError> {
            self.transition(
                "stop",
                index,
                PartitionState::Running,
                PartitionState::Stopping,
            )
        }

        fn restart(&mut self, index: u32) -> Result<(), AbiError> {
            self.transition(
                "restart",
                index,
                PartitionState::Running,
                PartitionState::Running,
            )
        }

        fn console_read(&self, index: u32, offset: u64, out: &mut [u8]) -> Option<RingRead> {
            if index != ALPHA {
                return None;
            }
            let end = self.console_base + self.console.len() as u64;
            let start = offset.clamp(self.console_base, end);
            let from = (start - self.console_base) as usize;
            let len = (self.console.len() - from).min(out.len());
            out[..len].copy_from_slice(&self.console[from..from + len]);
            Some(RingRead {
                len,
                next: start + len as u64,
                dropped: start.saturating_sub(offset),
            })
        }

        fn console_write(&mut self, index: u32, bytes: &[u8]) -> Option<usize> {
            if index != ALPHA {
                return None;
            }
            let n = bytes.len().min(self.input_room);
            self.input.extend_from_slice(&bytes[..n]);
            Some(n)
        }

        fn token_digest(&self) -> [u8; 32] {
            [0x5a; 32]
        }

        fn report(&mut self, status: ManagerStatus, detail: &[u8]) {
            self.calls.push(alloc::format!(
                "report {} {}",
                status.name(),
                String::from_utf8_lossy(detail)
            ));
        }

        fn pci_functions(&self) -> Vec<PciFunction> {
            vec![PciFunction {
                bus: 0,
                device: 1,
                function: 0,
                vendor_id: 0x8086,
                device_id: 0x100e,
                class: 0x020000,
            }]
        }

        fn wall_clock_ms(&self) -> Option<u64> {
            self.clock_ms
        }

        fn entropy(&mut self, out: &mut [u8]) -> Result<(), AbiError> {
            if !self.entropy_source {
                return Err(AbiError::NotFound);
            }
            out.fill(0xa5);
            Ok(())
        }

        fn gic_info(&self) -> Option<GicReport> {
            self.gic.clone()
        }
    }

    fn call(request: Request, mem: &mut FakeRam, hv: &mut FakeHv) -> Result<Return, CallError> {
        let x = dispatch(true, &request.encode(), mem, hv);
        request.decode_return(&x)
    }

    fn buf(ipa: u64, len: u64) -> GuestBuffer {
        GuestBuffer { ipa, len }
    }

    fn every_request() -> Vec<Request> {
        let b = buf(BUF_IPA, 4096);
        vec![
            Request::AbiVersion,
            Request::MgmtTokenDigest { buf: b },
            Request::HostInfo { buf: b },
            Request::ListPartitions { buf: b },
            Request::PartitionInfo {
                index: ALPHA,
                buf: b,
            },
            Request::PartitionStart { index: BETA },
            Request::PartitionStop { index: ALPHA },
            Request::PartitionRestart { index: ALPHA },
            Request::ConsoleRead {
                index: ALPHA,
                offset: 0,
                buf: b,
            },
            Request::ConsoleWrite {
                index: ALPHA,
                buf: b,
            },
            Request::MgmtReport {
                status: ManagerStatus::NoNetworkDevice,
                buf: buf(BUF_IPA, 16),
            },
            Request::PciFunctions { buf: b },
            Request::WallClock,
        ]
    }

    #[test]
    fn non_management_caller_gets_not_supported_for_every_call() {
        for request in every_request() {
            let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());

            let x = dispatch(false, &request.encode(), &mut mem, &mut hv);

            assert_eq!(x, encode_error(AbiError::NotSupported), "{request:?}");
            assert_eq!(mem.writes, 0);
            assert!(hv.calls.is_empty() && hv.input.is_empty());
        }
    }

    #[test]
    fn non_management_caller_gets_not_supported_even_for_malformed_registers() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());
        let regs = [fid::PARTITION_STOP as u64, 1 << 40, 9, 9, 9, 9];

        let x = dispatch(false, &regs, &mut mem, &mut hv);

        assert_eq!(x, encode_error(AbiError::NotSupported));
    }

    #[test]
    fn abi_version_is_3_1() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());

        let x = dispatch(true, &Request::AbiVersion.encode(), &mut mem, &mut hv);

        assert_eq!(x, [0, 0x0003_0003, 0, 0]);
    }

    #[test]
    fn entropy_fills_the_whole_buffer_and_nothing_past_it() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());
        mem.put(BUF_IPA + 32, &[0xee; 4]);

        let got = call(
            Request::Entropy {
                buf: buf(BUF_IPA, 32),
            },
            &mut mem,
            &mut hv,
        );

        assert_eq!(got, Ok(Return::Written(32)));
        assert_eq!(mem.at(BUF_IPA, 32), [0xa5; 32]);
        assert_eq!(mem.at(BUF_IPA + 32, 4), [0xee; 4]);
    }

    #[test]
    fn entropy_without_a_source_is_not_found_and_writes_nothing() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());
        hv.entropy_source = false;
        mem.put(BUF_IPA, &[1; 32]);

        let got = call(
            Request::Entropy {
                buf: buf(BUF_IPA, 32),
            },
            &mut mem,
            &mut hv,
        );

        assert_eq!(got, Err(CallError::Refused(AbiError::NotFound)));
        assert_eq!(mem.at(BUF_IPA, 32), [1; 32]);
    }

    #[test]
    fn entropy_from_a_guest_is_not_supported() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());
        let request = Request::Entropy {
            buf: buf(BUF_IPA, 32),
        };

        let x = dispatch(false, &request.encode(), &mut mem, &mut hv);

        assert_eq!(x, encode_error(AbiError::NotSupported));
        assert_eq!(mem.at(BUF_IPA, 32), [0xEE; 32]);
    }

    #[test]
    fn mgmt_report_hands_the_status_and_the_callers_sentence_to_the_hypervisor() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());
        mem.put(BUF_IPA, b"no NIC here");

        let ret = call(
            Request::MgmtReport {
                status: ManagerStatus::NoNetworkDevice,
                buf: buf(BUF_IPA, 11),
            },
            &mut mem,
            &mut hv,
        );

        assert_eq!(ret, Ok(Return::Done));
        assert_eq!(hv.calls, ["report no-network-device no NIC here"]);
    }

    #[test]
    fn mgmt_report_with_a_buffer_outside_the_callers_ram_is_refused_unheard() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());

        let ret = call(
            Request::MgmtReport {
                status: ManagerStatus::Serving,
                buf: buf(RAM_BASE + RAM_SIZE - 4, 16),
            },
            &mut mem,
            &mut hv,
        );

        assert_eq!(ret, Err(CallError::Refused(AbiError::BadAddress)));
        assert!(hv.calls.is_empty());
    }

    #[test]
    fn wall_clock_returns_ms_in_x1_without_touching_memory() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());

        let x = dispatch(true, &Request::WallClock.encode(), &mut mem, &mut hv);

        assert_eq!(x, [0, 1_796_132_700_250, 0, 0]);
        assert_eq!(mem.writes, 0);
    }

    #[test]
    fn wall_clock_without_a_clock_is_not_found() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());
        hv.clock_ms = None;

        assert_eq!(
            call(Request::WallClock, &mut mem, &mut hv),
            Err(CallError::Refused(AbiError::NotFound))
        );
    }

    #[test]
    fn gic_info_is_written_as_postcard_and_not_supported_without_one() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());
        let request = Request::GicInfo {
            buf: buf(BUF_IPA, 4096),
        };

        assert_eq!(
            call(request, &mut mem, &mut hv),
            Err(CallError::Refused(AbiError::NotSupported))
        );
        hv.gic = Some(GicReport {
            host: pinfold_abi::GicHost {
                version: 3,
                its_count: 1,
                lpis: true,
                probed: true,
                ..Default::default()
            },
            partitions: vec![pinfold_abi::PartitionGic {
                index: MGMT,
                interface: pinfold_abi::GicInterface::Gicv3,
            }],
        });
        let ret = call(request, &mut mem, &mut hv);

        let Ok(Return::Written(n)) = ret else {
            panic!("{ret:?}")
        };
        let report: GicReport = pinfold_abi::decode_reply(mem.at(BUF_IPA, n)).expect("decodes");
        assert_eq!(Some(report), hv.gic);
    }

    #[test]
    fn pci_functions_are_written_as_postcard() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());

        let ret = call(
            Request::PciFunctions {
                buf: buf(BUF_IPA, 4096),
            },
            &mut mem,
            &mut hv,
        );

        let Ok(Return::Written(n)) = ret else {
            panic!("{ret:?}")
        };
        let found: Vec<PciFunction> =
            pinfold_abi::decode_reply(mem.at(BUF_IPA, n)).expect("decodes");
        assert_eq!(found, hv.pci_functions());
    }

    #[test]
    fn unknown_call_from_management_is_not_supported() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());
        let regs = [(fid::BASE | 0x55) as u64, 0, 0, 0, 0, 0];

        assert_eq!(
            dispatch(true, &regs, &mut mem, &mut hv),
            encode_error(AbiError::NotSupported)
        );
    }

    #[test]
    fn nonzero_mbz_register_is_invalid_parameters() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());
        let regs = [fid::ABI_VERSION as u64, 0, 0, 0, 0, 1];

        assert_eq!(
            dispatch(true, &regs, &mut mem, &mut hv),
            encode_error(AbiError::InvalidParameters)
        );
    }

    #[test]
    fn host_info_is_written_to_the_callers_buffer() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());

        let ret = call(
            Request::HostInfo {
                buf: buf(BUF_IPA, 4096),
            },
            &mut mem,
            &mut hv,
        );

        let Ok(Return::Written(n)) = ret else {
            panic!("{ret:?}")
        };
        let info: HostInfo = decode_reply(mem.at(BUF_IPA, n)).expect("decodes");
        assert_eq!(info, hv.host_info());
    }

    #[test]
    fn list_partitions_returns_every_partition_with_its_index() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());

        let ret = call(
            Request::ListPartitions {
                buf: buf(BUF_IPA, 4096),
            },
            &mut mem,
            &mut hv,
        );

        let Ok(Return::Written(n)) = ret else {
            panic!("{ret:?}")
        };
        let list: Vec<PartitionSummary> = decode_reply(mem.at(BUF_IPA, n)).expect("decodes");
        let indices: Vec<u32> = list.iter().map(|p| p.index).collect();
        assert_eq!(indices, vec![MGMT, ALPHA, BETA]);
    }

    #[test]
    fn partition_info_is_for_the_requested_index() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());

        let ret = call(
            Request::PartitionInfo {
                index: BETA,
                buf: buf(BUF_IPA, 4096),
            },
            &mut mem,
            &mut hv,
        );

        let Ok(Return::Written(n)) = ret else {
            panic!("{ret:?}")
        };
        let detail: PartitionDetail = decode_reply(mem.at(BUF_IPA, n)).expect("decodes");
        assert_eq!(detail.summary.name, "beta");
    }

    #[test]
    fn partition_info_of_unknown_index_is_not_found() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());

        let ret = call(
            Request::PartitionInfo {
                index: MISSING,
                buf: buf(BUF_IPA, 4096),
            },
            &mut mem,
            &mut hv,
        );

        assert_eq!(ret, Err(CallError::Refused(AbiError::NotFound)));
    }

    #[test]
    fn buffer_too_small_says_how_much_is_needed_and_writes_nothing() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());
        let needed = encode_reply_vec(&hv.partitions()).len() as u64;

        let ret = call(
            Request::ListPartitions {
                buf: buf(BUF_IPA, needed - 1),
            },
            &mut mem,
            &mut hv,
        );

        assert_eq!(ret, Err(CallError::BufferTooSmall { required: needed }));
        assert_eq!(mem.writes, 0);
    }

    #[test]
    fn buffer_of_exactly_the_needed_size_is_enough() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());
        let needed = encode_reply_vec(&hv.partitions()).len() as u64;

        let ret = call(
            Request::ListPartitions {
                buf: buf(BUF_IPA, needed),
            },
            &mut mem,
            &mut hv,
        );

        assert_eq!(ret, Ok(Return::Written(needed)));
    }

    #[test]
    fn reply_does_not_touch_guest_memory_past_its_length() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());

        let ret = call(
            Request::HostInfo {
                buf: buf(BUF_IPA, 4096),
            },
            &mut mem,
            &mut hv,
        );

        let Ok(Return::Written(n)) = ret else {
            panic!("{ret:?}")
        };
        assert!(mem.at(BUF_IPA + n, 4096 - n).iter().all(|&b| b == 0xEE));
    }

    #[test]
    fn buffer_starting_below_ram_is_bad_address() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());

        let ret = call(
            Request::HostInfo {
                buf: buf(RAM_BASE - 1, 16),
            },
            &mut mem,
            &mut hv,
        );

        assert_eq!(ret, Err(CallError::Refused(AbiError::BadAddress)));
    }

    #[test]
    fn buffer_ending_one_byte_past_ram_is_bad_address() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());
        let end = RAM_BASE + RAM_SIZE;

        let ret = call(
            Request::HostInfo {
                buf: buf(end - 4096, 4097),
            },
            &mut mem,
            &mut hv,
        );

        assert_eq!(ret, Err(CallError::Refused(AbiError::BadAddress)));
        assert_eq!(mem.writes, 0);
    }

    #[test]
    fn buffer_ending_exactly_at_ram_end_is_accepted() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());
        let end = RAM_BASE + RAM_SIZE;

        let ret = call(
            Request::HostInfo {
                buf: buf(end - 4096, 4096),
            },
            &mut mem,
            &mut hv,
        );

        assert!(matches!(ret, Ok(Return::Written(_))), "{ret:?}");
    }

    #[test]
    fn buffer_wholly_after_ram_is_bad_address() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());

        let ret = call(
            Request::ConsoleRead {
                index: ALPHA,
                offset: 0,
                buf: buf(RAM_BASE + RAM_SIZE, 1),
            },
            &mut mem,
            &mut hv,
        );

        assert_eq!(ret, Err(CallError::Refused(AbiError::BadAddress)));
    }

    #[test]
    fn buffer_whose_end_wraps_past_2_pow_64_is_bad_address() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());

        let ret = call(
            Request::ListPartitions {
                buf: buf(u64::MAX - 0x10, 0x1000),
            },
            &mut mem,
            &mut hv,
        );

        assert_eq!(ret, Err(CallError::Refused(AbiError::BadAddress)));
    }

    #[test]
    fn buffer_longer_than_the_cap_is_invalid_parameters() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());

        let ret = call(
            Request::ConsoleWrite {
                index: ALPHA,
                buf: buf(RAM_BASE, MAX_BUFFER_LEN + 1),
            },
            &mut mem,
            &mut hv,
        );

        assert_eq!(ret, Err(CallError::Refused(AbiError::InvalidParameters)));
        assert!(hv.input.is_empty());
    }

    #[test]
    fn copy_fault_inside_ram_range_is_bad_address() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());
        mem.hole = Some((BUF_IPA, BUF_IPA + 0x1000));

        let ret = call(
            Request::HostInfo {
                buf: buf(BUF_IPA, 4096),
            },
            &mut mem,
            &mut hv,
        );

        assert_eq!(ret, Err(CallError::Refused(AbiError::BadAddress)));
    }

    #[test]
    fn start_of_stopped_partition_succeeds() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());

        let ret = call(Request::PartitionStart { index: BETA }, &mut mem, &mut hv);

        assert_eq!(ret, Ok(Return::Done));
        assert_eq!(hv.find(BETA).map(|p| p.state), Ok(PartitionState::Running));
    }

    #[test]
    fn start_of_running_partition_is_conflict() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());

        let ret = call(Request::PartitionStart { index: ALPHA }, &mut mem, &mut hv);

        assert_eq!(ret, Err(CallError::Refused(AbiError::Conflict)));
    }

    #[test]
    fn stop_of_unknown_partition_is_not_found() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());

        let ret = call(Request::PartitionStop { index: MISSING }, &mut mem, &mut hv);

        assert_eq!(ret, Err(CallError::Refused(AbiError::NotFound)));
    }

    #[test]
    fn management_partition_cannot_be_stopped_started_or_restarted() {
        for request in [
            Request::PartitionStop { index: MGMT },
            Request::PartitionRestart { index: MGMT },
            Request::PartitionStart { index: MGMT },
        ] {
            let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());

            let ret = call(request, &mut mem, &mut hv);

            assert_eq!(
                ret,
                Err(CallError::Refused(AbiError::Conflict)),
                "{request:?}"
            );
            assert!(hv.calls.is_empty(), "Manage must not be asked");
        }
    }

    #[test]
    fn console_read_copies_bytes_and_reports_next_and_dropped() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());

        let ret = call(
            Request::ConsoleRead {
                index: ALPHA,
                offset: 990,
                buf: buf(BUF_IPA, 5),
            },
            &mut mem,
            &mut hv,
        );

        assert_eq!(
            ret,
            Ok(Return::ConsoleRead {
                len: 5,
                next: 1005,
                dropped: 10
            })
        );
        assert_eq!(mem.at(BUF_IPA, 5), b"hello");
    }

    #[test]
    fn console_read_with_zero_length_reports_position_only() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());

        let ret = call(
            Request::ConsoleRead {
                index: ALPHA,
                offset: 1003,
                buf: buf(BUF_IPA, 0),
            },
            &mut mem,
            &mut hv,
        );

        assert_eq!(
            ret,
            Ok(Return::ConsoleRead {
                len: 0,
                next: 1003,
                dropped: 0
            })
        );
    }

    #[test]
    fn console_read_of_unknown_partition_is_not_found() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());

        let ret = call(
            Request::ConsoleRead {
                index: MISSING,
                offset: 0,
                buf: buf(BUF_IPA, 16),
            },
            &mut mem,
            &mut hv,
        );

        assert_eq!(ret, Err(CallError::Refused(AbiError::NotFound)));
    }

    #[test]
    fn mgmt_token_digest_is_written_to_the_callers_buffer() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());

        let ret = call(
            Request::MgmtTokenDigest {
                buf: buf(BUF_IPA, 64),
            },
            &mut mem,
            &mut hv,
        );

        assert_eq!(ret, Ok(Return::Written(32)));
        assert_eq!(mem.at(BUF_IPA, 32), &[0x5a; 32]);
    }

    #[test]
    fn mgmt_token_is_refused_to_other_partitions() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());

        let request = Request::MgmtTokenDigest {
            buf: buf(BUF_IPA, 64),
        };

        let x = dispatch(false, &request.encode(), &mut mem, &mut hv);

        assert_eq!(x[0] as i64, AbiError::NotSupported.code());
        assert_eq!(mem.writes, 0);
    }

    #[test]
    fn console_write_passes_guest_bytes_and_returns_accepted_count() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());
        mem.put(BUF_IPA, b"ls -l\n");

        let ret = call(
            Request::ConsoleWrite {
                index: ALPHA,
                buf: buf(BUF_IPA, 6),
            },
            &mut mem,
            &mut hv,
        );

        // The fake's input queue has room for four bytes.
        assert_eq!(ret, Ok(Return::Accepted(4)));
        assert_eq!(hv.input, b"ls -");
    }

    #[test]
    fn console_write_from_outside_ram_is_bad_address_and_sends_nothing() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());

        let ret = call(
            Request::ConsoleWrite {
                index: ALPHA,
                buf: buf(RAM_BASE - 2, 4),
            },
            &mut mem,
            &mut hv,
        );

        assert_eq!(ret, Err(CallError::Refused(AbiError::BadAddress)));
        assert!(hv.input.is_empty());
    }

    #[test]
    fn console_write_to_unknown_partition_is_not_found() {
        let (mut mem, mut hv) = (FakeRam::new(), FakeHv::new());

        let ret = call(
            Request::ConsoleWrite {
                index: MISSING,
                buf: buf(BUF_IPA, 1),
            },
            &mut mem,
            &mut hv,
        );

        assert_eq!(ret, Err(CallError::Refused(AbiError::NotFound)));
    }
}
