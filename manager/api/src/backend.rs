//! What the REST layer asks of the hypervisor (`Backend`), and the real implementation that turns each question into one management hypercall (`HvcBackend`).

use pinfold_abi::{
    decode_reply, AbiVersion, CallError, Event, GuestBuffer, HostInfo, PartitionDetail,
    PartitionSummary, Request, Return,
};

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

    /// The hypercall instruction and buffer behind it.
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
}
