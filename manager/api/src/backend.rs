//! What the REST layer asks of the hypervisor (`Backend`), and the real implementation that turns each question into one management hypercall (`HvcBackend`).
//!
//! Calls whose buffer carries a request (PARTITION_CREATE, _CONFIGURE,
//! IMAGE_SEAL) fail with [`HvError::Rejected`] when the hypervisor refuses
//! their content: the [`Rejection`] it wrote over the buffer, decoded.

use pinfold_abi::{
    decode_reply, encode_reply_vec, AbiError, AbiVersion, CallError, Event, GuestBuffer, HostInfo,
    ImageInfo, ImageKind, PartitionDetail, PartitionPlan, PartitionSummary, Rejection, Request,
    Resources, Return,
};

/// Why a call with a request in its buffer failed: a plain call error, or
/// the hypervisor's account of the rule the content broke.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HvError {
    Call(CallError),
    Rejected(Rejection),
}

impl From<CallError> for HvError {
    fn from(err: CallError) -> Self {
        HvError::Call(err)
    }
}

impl From<AbiError> for HvError {
    fn from(err: AbiError) -> Self {
        HvError::Call(CallError::Refused(err))
    }
}

const UNSUPPORTED: CallError = CallError::Refused(AbiError::NotSupported);

/// Outcome of a console read: as [`Return::ConsoleRead`], `len` bytes from
/// position `offset + dropped`, and where to read next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsoleRead {
    pub len: usize,
    pub next: u64,
    pub dropped: u64,
}

/// The hypervisor's management operations, with the hypercall ABI's types
/// and errors. Unknown indices fail with `Refused(NotFound)`, refused
/// transitions with `Refused(Conflict)`.
pub trait Backend {
    fn abi_version(&mut self) -> Result<AbiVersion, CallError>;
    fn host_info(&mut self) -> Result<HostInfo, CallError>;
    fn partitions(&mut self) -> Result<Vec<PartitionSummary>, CallError>;
    fn detail(&mut self, index: u32) -> Result<PartitionDetail, CallError>;
    fn start(&mut self, index: u32) -> Result<(), CallError>;
    fn stop(&mut self, index: u32) -> Result<(), CallError>;
    fn restart(&mut self, index: u32) -> Result<(), CallError>;
    /// (ABI 3.0) Presses the partition's power button (graceful shutdown).
    fn shutdown(&mut self, index: u32) -> Result<(), CallError> {
        let _ = index;
        Err(CallError::Refused(pinfold_abi::AbiError::NotSupported))
    }
    /// Fills `out` from console position `offset` on.
    fn console_read(
        &mut self,
        index: u32,
        offset: u64,
        out: &mut [u8],
    ) -> Result<ConsoleRead, CallError>;
    /// Sends `bytes` to the partition's console input; how many were taken.
    fn console_write(&mut self, index: u32, bytes: &[u8]) -> Result<usize, CallError>;
    /// Waits `d` before the next try at console input the partition had no
    /// room for. Tests replace it (with a no-op, or a guest reading).
    fn pause(&mut self, d: std::time::Duration) {
        std::thread::sleep(d);
    }
    /// (ABI 2.2) Milliseconds since the Unix epoch, from the hypervisor's
    /// clock (Hermit has none of its own on aarch64).
    fn wall_clock_ms(&mut self) -> Result<u64, CallError>;
    /// (ABI 3.3) The host's GIC as found and each partition's interrupt
    /// controller interface (GIC_INFO). The default: the call is missing.
    fn gic_info(&mut self) -> Result<pinfold_abi::GicReport, CallError> {
        Err(UNSUPPORTED)
    }

    // (ABI 3.0) Run-time partitions and images. The defaults refuse
    // (NOT_SUPPORTED) so a fake needs only what its tests use.

    /// IMAGE_CREATE: a new, empty image of `size` bytes; its id.
    fn image_create(&mut self, _kind: ImageKind, _size: u64) -> Result<u32, CallError> {
        Err(UNSUPPORTED)
    }
    /// IMAGE_WRITE: `bytes` (at most [`pinfold_abi::MAX_BUFFER_LEN`] go
    /// in one call) at `offset` of unsealed image `id`; how many were taken.
    fn image_write(&mut self, _id: u32, _offset: u64, _bytes: &[u8]) -> Result<usize, CallError> {
        Err(UNSUPPORTED)
    }
    /// (ABI 3.1) CONFIG_APPLIED: the stored configuration is applied; the
    /// autostart partitions the hypervisor held at boot start.
    fn config_applied(&mut self) -> Result<(), CallError> {
        Err(UNSUPPORTED)
    }
    /// (ABI 3.1) IMAGE_READ: bytes of sealed image `id` from `offset` into
    /// `out` (at most [`pinfold_abi::MAX_BUFFER_LEN`] per call); how many
    /// (0 at its end).
    fn image_read(&mut self, _id: u32, _offset: u64, _out: &mut [u8]) -> Result<usize, CallError> {
        Err(UNSUPPORTED)
    }
    /// IMAGE_SEAL: the image is complete; its SHA-256 must be `sha256`.
    fn image_seal(&mut self, _id: u32, _sha256: Option<[u8; 32]>) -> Result<(), HvError> {
        Err(UNSUPPORTED.into())
    }
    /// IMAGE_DELETE.
    fn image_delete(&mut self, _id: u32) -> Result<(), CallError> {
        Err(UNSUPPORTED)
    }
    /// LIST_IMAGES.
    fn images(&mut self) -> Result<Vec<ImageInfo>, CallError> {
        Err(UNSUPPORTED)
    }
    /// PARTITION_CREATE: a new stopped partition; its index.
    fn create(&mut self, _plan: &PartitionPlan) -> Result<u32, HvError> {
        Err(UNSUPPORTED.into())
    }
    /// PARTITION_CONFIGURE: a stopped partition's new plan entry.
    fn configure(&mut self, _index: u32, _plan: &PartitionPlan) -> Result<(), HvError> {
        Err(UNSUPPORTED.into())
    }
    /// PARTITION_DESTROY.
    fn destroy(&mut self, _index: u32) -> Result<(), CallError> {
        Err(UNSUPPORTED)
    }
    /// RESOURCES.
    fn resources(&mut self) -> Result<Resources, CallError> {
        Err(UNSUPPORTED)
    }
    /// (ABI 3.0) The hypervisor's events from sequence number `seq` on, as
    /// many as one reply holds: the events, the next sequence number and
    /// how many were lost (EVENTS_READ). The default: the call is missing.
    fn events(&mut self, seq: u64) -> Result<(Vec<Event>, u64, u64), CallError> {
        let _ = seq;
        Err(CallError::Refused(pinfold_abi::AbiError::NotSupported))
    }
}

/// The instruction and the memory behind [`HvcBackend`]; on Hermit, an
/// `asm!("hvc #0")` and a static buffer.
pub trait Hypercall {
    /// Issues `HVC #0` with X0..X5 = `regs` and returns X0..X3. The
    /// hypervisor may write [`buffer`](Self::buffer) during the call.
    fn hvc(&mut self, regs: [u64; 6]) -> [u64; 4];
    /// The IPA of the buffer (its guest physical address, not a VA).
    fn buffer_ipa(&self) -> u64;
    /// The buffer replies are written to and console input is read from;
    /// [`pinfold_abi::MAX_BUFFER_LEN`] bytes is enough for any reply.
    fn buffer(&mut self) -> &mut [u8];
}

/// [`Backend`] over management hypercalls.
pub struct HvcBackend<H: Hypercall> {
    hc: H,
}

impl<H: Hypercall> HvcBackend<H> {
    pub fn new(hc: H) -> Self {
        HvcBackend { hc }
    }

    /// The hypercall interface (tests look at the machine behind it).
    pub fn hc_mut(&mut self) -> &mut H {
        &mut self.hc
    }

    /// The whole buffer, as the ABI describes it.
    fn whole_buffer(&mut self) -> GuestBuffer {
        GuestBuffer {
            ipa: self.hc.buffer_ipa(),
            len: self.hc.buffer().len() as u64,
        }
    }

    fn call(&mut self, request: Request) -> Result<Return, CallError> {
        let x = self.hc.hvc(request.encode());
        request.decode_return(&x)
    }

    /// Runs a call that writes a payload into the buffer and decodes it.
    fn payload<T: serde::de::DeserializeOwned>(
        &mut self,
        request: Request,
    ) -> Result<T, CallError> {
        match self.call(request)? {
            Return::Written(n) => {
                let bytes = self
                    .hc
                    .buffer()
                    .get(..n as usize)
                    .ok_or(CallError::MalformedReply)?;
                decode_reply(bytes)
            }
            _ => Err(CallError::MalformedReply),
        }
    }

    fn done(&mut self, request: Request) -> Result<(), CallError> {
        match self.call(request)? {
            Return::Done => Ok(()),
            _ => Err(CallError::MalformedReply),
        }
    }

    /// Puts `bytes` at the start of the buffer; the buffer naming them.
    fn load(&mut self, bytes: &[u8]) -> Result<GuestBuffer, CallError> {
        let shared = self.hc.buffer();
        let dst = shared
            .get_mut(..bytes.len())
            .ok_or(CallError::Refused(AbiError::InvalidParameters))?;
        dst.copy_from_slice(bytes);
        Ok(GuestBuffer {
            ipa: self.hc.buffer_ipa(),
            len: bytes.len() as u64,
        })
    }

    /// Runs a call whose buffer holds a request; a REJECTED reply becomes
    /// the Rejection the hypervisor wrote over the buffer.
    fn with_request(&mut self, request: Request) -> Result<Return, HvError> {
        match self.call(request) {
            Err(CallError::Rejected { len }) => {
                let bytes = self
                    .hc
                    .buffer()
                    .get(..len as usize)
                    .ok_or(CallError::MalformedReply)?;
                Err(HvError::Rejected(decode_reply(bytes)?))
            }
            other => Ok(other?),
        }
    }
}

impl<H: Hypercall> Backend for HvcBackend<H> {
    fn abi_version(&mut self) -> Result<AbiVersion, CallError> {
        match self.call(Request::AbiVersion)? {
            Return::Version(v) => Ok(v),
            _ => Err(CallError::MalformedReply),
        }
    }

    fn host_info(&mut self) -> Result<HostInfo, CallError> {
        let buf = self.whole_buffer();
        self.payload(Request::HostInfo { buf })
    }

    fn partitions(&mut self) -> Result<Vec<PartitionSummary>, CallError> {
        let buf = self.whole_buffer();
        self.payload(Request::ListPartitions { buf })
    }

    fn detail(&mut self, index: u32) -> Result<PartitionDetail, CallError> {
        let buf = self.whole_buffer();
        self.payload(Request::PartitionInfo { index, buf })
    }

    fn start(&mut self, index: u32) -> Result<(), CallError> {
        self.done(Request::PartitionStart { index })
    }

    fn stop(&mut self, index: u32) -> Result<(), CallError> {
        self.done(Request::PartitionStop { index })
    }

    fn restart(&mut self, index: u32) -> Result<(), CallError> {
        self.done(Request::PartitionRestart { index })
    }

    fn shutdown(&mut self, index: u32) -> Result<(), CallError> {
        self.done(Request::PartitionShutdown { index })
    }

    fn console_read(
        &mut self,
        index: u32,
        offset: u64,
        out: &mut [u8],
    ) -> Result<ConsoleRead, CallError> {
        let mut buf = self.whole_buffer();
        buf.len = buf.len.min(out.len() as u64);
        match self.call(Request::ConsoleRead { index, offset, buf })? {
            Return::ConsoleRead { len, next, dropped } => {
                // decode_return checked len <= buf.len <= out.len().
                let len = len as usize;
                let src = self
                    .hc
                    .buffer()
                    .get(..len)
                    .ok_or(CallError::MalformedReply)?;
                out[..len].copy_from_slice(src);
                Ok(ConsoleRead { len, next, dropped })
            }
            _ => Err(CallError::MalformedReply),
        }
    }

    fn console_write(&mut self, index: u32, bytes: &[u8]) -> Result<usize, CallError> {
        let shared = self.hc.buffer();
        let len = bytes.len().min(shared.len());
        shared[..len].copy_from_slice(&bytes[..len]);
        let buf = GuestBuffer {
            ipa: self.hc.buffer_ipa(),
            len: len as u64,
        };
        match self.call(Request::ConsoleWrite { index, buf })? {
            Return::Accepted(n) => Ok(n as usize),
            _ => Err(CallError::MalformedReply),
        }
    }

    fn events(&mut self, seq: u64) -> Result<(Vec<Event>, u64, u64), CallError> {
        let buf = self.whole_buffer();
        match self.call(Request::EventsRead { seq, buf })? {
            Return::ConsoleRead { len, next, dropped } => {
                let bytes = self
                    .hc
                    .buffer()
                    .get(..len as usize)
                    .ok_or(CallError::MalformedReply)?;
                Ok((decode_reply(bytes)?, next, dropped))
            }
            _ => Err(CallError::MalformedReply),
        }
    }

    fn wall_clock_ms(&mut self) -> Result<u64, CallError> {
        match self.call(Request::WallClock)? {
            Return::WallClock { unix_ms } => Ok(unix_ms),
            _ => Err(CallError::MalformedReply),
        }
    }

    fn image_create(&mut self, kind: ImageKind, size: u64) -> Result<u32, CallError> {
        match self.call(Request::ImageCreate { kind, size })? {
            Return::Created(id) => Ok(id),
            _ => Err(CallError::MalformedReply),
        }
    }

    /// One IMAGE_WRITE of at most the buffer's length.
    fn image_write(&mut self, id: u32, offset: u64, bytes: &[u8]) -> Result<usize, CallError> {
        let len = bytes.len().min(self.hc.buffer().len());
        let buf = self.load(&bytes[..len])?;
        match self.call(Request::ImageWrite { id, offset, buf })? {
            Return::Accepted(n) => Ok(n as usize),
            _ => Err(CallError::MalformedReply),
        }
    }

    fn config_applied(&mut self) -> Result<(), CallError> {
        self.done(Request::ConfigApplied)
    }

    fn image_read(&mut self, id: u32, offset: u64, out: &mut [u8]) -> Result<usize, CallError> {
        let mut buf = self.whole_buffer();
        buf.len = buf.len.min(out.len() as u64);
        match self.call(Request::ImageRead { id, offset, buf })? {
            Return::Accepted(n) => {
                // decode_return checked n <= buf.len <= out.len().
                let n = n as usize;
                let src = self.hc.buffer().get(..n).ok_or(CallError::MalformedReply)?;
                out[..n].copy_from_slice(src);
                Ok(n)
            }
            _ => Err(CallError::MalformedReply),
        }
    }

    fn image_seal(&mut self, id: u32, sha256: Option<[u8; 32]>) -> Result<(), HvError> {
        // The digest first, the whole buffer named: room for a Rejection.
        let buf = match sha256 {
            Some(d) => {
                self.load(&d)?;
                self.whole_buffer()
            }
            None => self.load(&[])?,
        };
        match self.with_request(Request::ImageSeal { id, buf })? {
            Return::Done => Ok(()),
            _ => Err(CallError::MalformedReply.into()),
        }
    }

    fn image_delete(&mut self, id: u32) -> Result<(), CallError> {
        self.done(Request::ImageDelete { id })
    }

    fn images(&mut self) -> Result<Vec<ImageInfo>, CallError> {
        let buf = self.whole_buffer();
        self.payload(Request::ListImages { buf })
    }

    fn create(&mut self, plan: &PartitionPlan) -> Result<u32, HvError> {
        match self.with_plan(plan, |buf| Request::PartitionCreate { buf })? {
            Return::Created(index) => Ok(index),
            _ => Err(CallError::MalformedReply.into()),
        }
    }

    fn configure(&mut self, index: u32, plan: &PartitionPlan) -> Result<(), HvError> {
        match self.with_plan(plan, |buf| Request::PartitionConfigure { index, buf })? {
            Return::Done => Ok(()),
            _ => Err(CallError::MalformedReply.into()),
        }
    }

    fn destroy(&mut self, index: u32) -> Result<(), CallError> {
        self.done(Request::PartitionDestroy { index })
    }

    fn resources(&mut self) -> Result<Resources, CallError> {
        let buf = self.whole_buffer();
        self.payload(Request::Resources { buf })
    }

    fn gic_info(&mut self) -> Result<pinfold_abi::GicReport, CallError> {
        let buf = self.whole_buffer();
        self.payload(Request::GicInfo { buf })
    }
}

impl<H: Hypercall> HvcBackend<H> {
    /// A call with the postcard plan at the start of the whole shared
    /// buffer: the hypervisor decodes the plan from its start and writes a
    /// Rejection over the buffer, so the rest is room for any sentence.
    fn with_plan(
        &mut self,
        plan: &PartitionPlan,
        request: impl Fn(GuestBuffer) -> Request,
    ) -> Result<Return, HvError> {
        let bytes = encode_reply_vec(plan);
        self.load(&bytes)?;
        let shared = self.hc.buffer();
        shared[bytes.len()..].fill(0);
        let whole = self.whole_buffer();
        self.with_request(request(whole))
    }
}
