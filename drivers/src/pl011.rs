//! The host's PL011 UART (ARM DDI 0183): polled output for the hypervisor's
//! own console, interrupt-driven input routed to one partition.

use core::ptr::NonNull;

const DR: usize = 0x00;
const FR: usize = 0x18;
const IMSC: usize = 0x38;
const ICR: usize = 0x44;
const CR: usize = 0x30;
const CR_UARTEN_TXE_RXE: u32 = (1 << 0) | (1 << 8) | (1 << 9);
const FR_TXFF: u32 = 1 << 5;
const FR_RXFE: u32 = 1 << 4;
const INT_RX: u32 = 1 << 4;
const INT_RT: u32 = 1 << 6;

/// The host UART. Output polls TXFF, so it needs no interrupt.
pub struct Pl011Uart {
    base: NonNull<u32>,
}

// SAFETY: the UART registers are plain MMIO; every access is a single
// volatile load or store and callers serialise whole lines under a lock.
unsafe impl Send for Pl011Uart {}
// SAFETY: as above; concurrent register access is harmless (worst case
// interleaved bytes), never memory-unsafe.
unsafe impl Sync for Pl011Uart {}

impl Pl011Uart {
    /// # Safety
    /// `base` must be the address of a PL011's register block, mapped as
    /// device memory, and not used by anything else as memory.
    pub const unsafe fn new(base: usize) -> Self {
        Pl011Uart {
            // SAFETY: callers pass a non-zero MMIO base; a zero base is a
            // board bug that faults on first use rather than corrupting
            // memory.
            base: unsafe { NonNull::new_unchecked(base as *mut u32) },
        }
    }

    fn read(&self, offset: usize) -> u32 {
        // SAFETY: `offset` is one of the register offsets above, inside the
        // 4 KiB register block promised by `new`.
        unsafe { self.base.byte_add(offset).read_volatile() }
    }

    fn write(&self, offset: usize, value: u32) {
        // SAFETY: as in `read`.
        unsafe { self.base.byte_add(offset).write_volatile(value) }
    }

    pub fn putc(&self, byte: u8) {
        while self.read(FR) & FR_TXFF != 0 {
            core::hint::spin_loop();
        }
        self.write(DR, byte as u32);
    }

    pub fn write_bytes(&self, bytes: &[u8]) {
        for &b in bytes {
            if b == b'\n' {
                self.putc(b'\r');
            }
            self.putc(b);
        }
    }

    /// A received byte, if any.
    pub fn getc(&self) -> Option<u8> {
        if self.read(FR) & FR_RXFE != 0 {
            None
        } else {
            Some(self.read(DR) as u8)
        }
    }

    /// Raise the UART's SPI on received data (and receive timeout).
    pub fn enable_rx_interrupt(&self) {
        // Firmware may have left the receiver off (QEMU resets CR to TXE|RXE
        // without UARTEN; real firmware varies).
        self.write(CR, self.read(CR) | CR_UARTEN_TXE_RXE);
        self.write(ICR, 0x7ff);
        self.write(IMSC, INT_RX | INT_RT);
    }
}
