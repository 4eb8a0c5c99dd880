//! The hypervisor's console: whole lines to the host UART, tagged with the
//! CPU that printed them. Guest console lines go through here too, already
//! prefixed with `[partition] `.

use core::fmt::{self, Write};
use core::sync::atomic::{AtomicU32, Ordering};
use pinfold_drivers::pl011::Pl011Uart;
use pinfold_hv::lockstat::{CountedLock, LockPath};

static HOST_UART: spin::Once<Pl011Uart> = spin::Once::new();
/// One physical UART is shared by every CPU, and a line must reach it
/// whole: this lock serialises lines (a per-CPU buffer would still need one
/// writer at a time on the one device). It is never taken on the vCPU
/// load/put, timer or local injection paths, only when a line is printed;
/// counted as `LockPath::LogLine`.
static LINE_LOCK: CountedLock<()> = CountedLock::new((), &crate::LOCKSTAT);

pub fn init(uart: Pl011Uart) {
    HOST_UART.call_once(|| uart);
}

pub fn uart() -> Option<&'static Pl011Uart> {
    HOST_UART.get()
}

/// Who wrote the last bytes if they did not end a line (a flushed prompt):
/// 0 nobody, else a source id.
static PARTIAL_FROM: AtomicU32 = AtomicU32::new(0);
/// Source id of the hypervisor's own lines.
pub const SOURCE_HV: u32 = u32::MAX;

/// Write one already formatted line (it should end in '\n').
pub fn write_line(bytes: &[u8]) {
    write_from(SOURCE_HV, bytes);
}

/// Write bytes from `source` (a partition's index + 1, or SOURCE_HV). If
/// another source left a partial line (a prompt), end it first so two
/// sources never share a line.
pub fn write_from(source: u32, bytes: &[u8]) {
    if let Some(uart) = HOST_UART.get() {
        let _guard = LINE_LOCK.lock(LockPath::LogLine);
        let partial = PARTIAL_FROM.load(Ordering::Relaxed);
        if partial != 0 && partial != source {
            uart.write_bytes(b"\n");
        }
        uart.write_bytes(bytes);
        let ended = bytes.last().is_none_or(|&b| b == b'\n');
        PARTIAL_FROM.store(if ended { 0 } else { source }, Ordering::Relaxed);
    }
}

/// Bytes of a formatted line, its newline included; what does not fit is
/// cut (the stats line with every shared lock named is about 400).
const LINE_BYTES: usize = 512;

/// A fixed buffer for formatting a line without allocating. Its last byte
/// is kept for the newline ([`LineBuf::end_line`]), so a cut line still
/// ends and the next line is not glued to it.
pub struct LineBuf {
    buf: [u8; LINE_BYTES],
    len: usize,
}

impl LineBuf {
    pub const fn new() -> Self {
        LineBuf {
            buf: [0; LINE_BYTES],
            len: 0,
        }
    }
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
    /// Ends the line with '\n' in the byte `write_str` never fills.
    pub fn end_line(&mut self) {
        self.buf[self.len] = b'\n';
        self.len += 1;
    }
}

impl Write for LineBuf {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for &b in s.as_bytes() {
            if self.len < self.buf.len() - 1 {
                self.buf[self.len] = b;
                self.len += 1;
            }
        }
        Ok(())
    }
}

pub fn print_fmt(cpu: Option<usize>, args: fmt::Arguments) {
    let mut line = LineBuf::new();
    let _ = match cpu {
        Some(cpu) => write!(line, "pinfold: cpu{cpu}: "),
        None => write!(line, "pinfold: "),
    };
    let _ = line.write_fmt(args);
    line.end_line();
    write_line(line.as_bytes());
}

/// `hvlog!("...")`: a CPU-tagged hypervisor log line.
#[macro_export]
macro_rules! hvlog {
    ($($arg:tt)*) => {
        $crate::log::print_fmt($crate::percpu::current_index(), format_args!($($arg)*))
    };
}

/// `hvprint!("...")`: an untagged `pinfold: ` line (machine-read lines such
/// as the stats line).
#[macro_export]
macro_rules! hvprint {
    ($($arg:tt)*) => {
        $crate::log::print_fmt(None, format_args!($($arg)*))
    };
}
