//! Polled PL011 output for the loader's own messages (PrimeCell UART PL011 TRM, DDI0183).

use core::fmt;
use core::ptr;
use core::sync::atomic::{AtomicU64, Ordering};

/// UARTDR: writing the low byte transmits it.
const UARTDR: u64 = 0x000;
/// UARTFR, the flag register.
const UARTFR: u64 = 0x018;
/// UARTFR.TXFF: the transmit FIFO is full.
const UARTFR_TXFF: u32 = 1 << 5;
/// Give up on a full FIFO after this many polls rather than hang the boot
/// (an emulated UART that never drains must not stop Hermit from starting).
const POLL_LIMIT: u32 = 100_000;

/// Where the PL011 is mapped right now: its physical address while the MMU
/// is off, its virtual one after. 0 = no UART known yet (output dropped).
/// Only plain loads and stores touch it: with the MMU off memory is Device
/// and exclusives are not guaranteed to work.
static BASE: AtomicU64 = AtomicU64::new(0);

/// Directs output to the PL011 at `base` (0 disables output).
pub fn set_base(base: u64) {
    BASE.store(base, Ordering::Relaxed);
}

/// A `fmt::Write` sink for the loader's messages; `\n` becomes `\r\n`.
pub struct Console;

impl Console {
    fn put(base: u64, byte: u8) {
        for _ in 0..POLL_LIMIT {
            // SAFETY: `base` is the PL011 the DTB names, mapped as Device
            // memory (or the MMU is off); UARTFR is a read-only register.
            let flags = unsafe { ptr::read_volatile((base + UARTFR) as *const u32) };
            if flags & UARTFR_TXFF == 0 {
                break;
            }
        }
        // SAFETY: as above; UARTDR accepts a 32-bit write of the character.
        unsafe { ptr::write_volatile((base + UARTDR) as *mut u32, u32::from(byte)) };
    }
}

impl fmt::Write for Console {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        let base = BASE.load(Ordering::Relaxed);
        if base == 0 {
            return Ok(());
        }
        for byte in text.bytes() {
            if byte == b'\n' {
                Self::put(base, b'\r');
            }
            Self::put(base, byte);
        }
        Ok(())
    }
}

/// Prints one line to the loader console, prefixed with the loader's name.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use core::fmt::Write as _;
        let _ = write!($crate::console::Console, "pinfold-manager-loader: ");
        let _ = writeln!($crate::console::Console, $($arg)*);
    }};
}
