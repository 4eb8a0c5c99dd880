//! Per-partition console: an emulated PL011 UART the guest drives, a byte ring that keeps its output, and a line prefixer for the host console.
//!
//! # The emulated PL011 (ARM PrimeCell UART, DDI0183)
//!
//! The model is what Linux's `amba-pl011` driver needs, not a cycle model:
//!
//! - The transmitter is infinitely fast. A write to UARTDR leaves at once,
//!   so UARTFR.TXFF and UARTFR.BUSY are never set and UARTFR.TXFE always is.
//! - Interrupt raw status is a *level* re-evaluated on every access, not a
//!   latch: RXRIS and RTRIS are set while the RX FIFO holds data, TXRIS is
//!   always set (the TX FIFO is always at or below any trigger level, DDI0183
//!   3.4.3 "UARTTXINTR"). Writing UARTICR therefore cannot lower any of them
//!   while their condition holds; nothing else in this model latches.
//!
//! Why an always-asserted TXRIS does not make the TX interrupt storm: Linux
//! (drivers/tty/serial/amba-pl011.c) sets UARTIMSC.TXIM only while it still
//! has characters queued. `pl011_start_tx_pio` first fills the FIFO until
//! UARTFR.TXFF, which with this model drains the whole queue, so TXIM usually
//! never gets set at all; if it does (a queue refilled from interrupt context),
//! every TX interrupt sends up to fifosize/2 characters and `pl011_tx_chars`
//! clears TXIM once the queue is empty. Each interrupt makes progress and the
//! line drops when the queue does. The `linux_*` tests below replay that
//! sequence.
//!
//! Deliberate differences from the silicon, each for a reason:
//! - TX goes out whatever UARTCR.UARTEN/TXE say (as in QEMU 7.2): earlycon
//!   and bare-metal guests write UARTDR without programming UARTCR.
//! - The RX FIFO is 32 bytes deep even with UARTLCR_H.FEN clear: no driver
//!   relies on the 1-byte holding register, and a deeper FIFO loses less
//!   host input before the driver has opened the port.
//! - No receive errors, breaks or modem lines: UARTRSR and the UARTDR error
//!   bits read as zero, modem status bits in UARTFR and UARTRIS are zero.
//! - UARTCR.LBE (loopback) is honoured: a transmitted byte goes to the RX
//!   FIFO, as pre-4.4 Linux used it at start-up to provoke the TX interrupt.

use alloc::vec::Vec;

// ---------------------------------------------------------------------------
// Console ring
// ---------------------------------------------------------------------------

/// The bytes a partition wrote to its console, kept for the management API.
///
/// Positions are monotonic byte counts since the hypervisor started (a
/// partition restart keeps its ring and its positions), so a
/// reader that keeps the `next` of its last read never sees a byte twice and
/// learns exactly how much it missed.
///
/// The buffer is allocated whole when the ring is made but filled as bytes
/// arrive, not cleared first (a partition's 64 KiB ring cleared at boot
/// was 25k instructions): until it is full, byte `n` sits at slot `n`;
/// pushing never allocates.
#[derive(Debug)]
pub struct ConsoleRing {
    /// The bytes kept; its length grows to `capacity`, then stays.
    buf: Vec<u8>,
    /// A power of two, reserved in `buf` from the start.
    capacity: usize,
    /// Total bytes ever pushed; the next byte lands at `write_pos & mask`.
    write_pos: u64,
}

impl Clone for ConsoleRing {
    fn clone(&self) -> Self {
        let mut buf = Vec::with_capacity(self.capacity);
        buf.extend_from_slice(&self.buf);
        ConsoleRing {
            buf,
            capacity: self.capacity,
            write_pos: self.write_pos,
        }
    }
}

/// Outcome of [`ConsoleRing::read`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingRead {
    /// Bytes copied into the caller's buffer.
    pub len: usize,
    /// Position to pass to the next read.
    pub next: u64,
    /// Bytes between the requested position and the oldest byte still kept,
    /// overwritten before this read.
    pub dropped: u64,
}

impl ConsoleRing {
    /// A ring holding the last `capacity` bytes; `capacity` is rounded up to
    /// a power of two (at least 1) so positions map to slots with a mask.
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity.max(1).next_power_of_two();
        ConsoleRing {
            buf: Vec::with_capacity(capacity),
            capacity,
            write_pos: 0,
        }
    }

    /// How many of the most recent bytes the ring keeps.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Appends `bytes`, overwriting the oldest ones when full.
    pub fn push(&mut self, mut bytes: &[u8]) {
        let cap = self.capacity;
        if self.buf.len() < cap {
            // Not full yet: position n is slot n, so the bytes go at the
            // end (within the reserved capacity: no allocation).
            let fill = bytes.len().min(cap - self.buf.len());
            self.buf.extend_from_slice(&bytes[..fill]);
            self.write_pos += fill as u64;
            bytes = &bytes[fill..];
            if bytes.is_empty() {
                return;
            }
        }
        // Only the last `cap` bytes of a long push survive it.
        let skip = bytes.len().saturating_sub(cap);
        let kept = &bytes[skip..];
        let start = self.slot(self.write_pos.wrapping_add(skip as u64));
        let first = kept.len().min(cap - start);
        self.buf[start..start + first].copy_from_slice(&kept[..first]);
        self.buf[..kept.len() - first].copy_from_slice(&kept[first..]);
        self.write_pos = self.write_pos.wrapping_add(bytes.len() as u64);
    }

    /// The last byte pushed, if any (whether a line is open).
    pub fn last_byte(&self) -> Option<u8> {
        if self.write_pos == 0 {
            return None;
        }
        self.buf.get(self.slot(self.write_pos - 1)).copied()
    }

    /// Position of the next byte to be pushed (= total bytes pushed so far).
    pub fn write_pos(&self) -> u64 {
        self.write_pos
    }

    /// Copies bytes from position `from` on into `out`.
    ///
    /// If the ring has already overwritten `from`, the read starts at the
    /// oldest byte still kept and `dropped` says how many were lost. A
    /// position beyond [`write_pos`](Self::write_pos) (a reader holding a
    /// cursor from an earlier boot) reads nothing and resynchronises `next`
    /// to the current write position rather than waiting for it.
    pub fn read(&self, from: u64, out: &mut [u8]) -> RingRead {
        let oldest = self.write_pos.saturating_sub(self.buf.len() as u64);
        if from > self.write_pos {
            return RingRead {
                len: 0,
                next: self.write_pos,
                dropped: 0,
            };
        }
        let start = from.max(oldest);
        let dropped = start - from;
        let available = (self.write_pos - start) as usize;
        let len = available.min(out.len());
        let slot = self.slot(start);
        let first = len.min(self.buf.len() - slot);
        out[..first].copy_from_slice(&self.buf[slot..slot + first]);
        out[first..len].copy_from_slice(&self.buf[..len - first]);
        RingRead {
            len,
            next: start + len as u64,
            dropped,
        }
    }

    fn slot(&self, pos: u64) -> usize {
        (pos & (self.capacity as u64 - 1)) as usize
    }
}

// ---------------------------------------------------------------------------
// PL011 registers (DDI0183 3.2, Table 3-1)
// ---------------------------------------------------------------------------

/// Data register: write transmits, read pops the RX FIFO.
pub const UARTDR: u64 = 0x000;
/// Receive status (read) / error clear (write).
pub const UARTRSR_ECR: u64 = 0x004;
/// Flag register.
pub const UARTFR: u64 = 0x018;
/// IrDA low-power counter.
pub const UARTILPR: u64 = 0x020;
/// Integer baud rate divisor.
pub const UARTIBRD: u64 = 0x024;
/// Fractional baud rate divisor.
pub const UARTFBRD: u64 = 0x028;
/// Line control.
pub const UARTLCR_H: u64 = 0x02C;
/// Control.
pub const UARTCR: u64 = 0x030;
/// Interrupt FIFO level select.
pub const UARTIFLS: u64 = 0x034;
/// Interrupt mask set/clear.
pub const UARTIMSC: u64 = 0x038;
/// Raw interrupt status.
pub const UARTRIS: u64 = 0x03C;
/// Masked interrupt status.
pub const UARTMIS: u64 = 0x040;
/// Interrupt clear (write-only).
pub const UARTICR: u64 = 0x044;
/// DMA control.
pub const UARTDMACR: u64 = 0x048;
/// First of UARTPeriphID0..3; UARTPCellID0..3 follow at 0xFF0.
pub const UARTPERIPHID0: u64 = 0xFE0;
/// First of UARTPCellID0..3.
pub const UARTPCELLID0: u64 = 0xFF0;
/// Size of the PL011's MMIO frame.
pub const PL011_FRAME_SIZE: u64 = 0x1000;

/// UARTFR bits.
pub mod fr {
    /// UART busy transmitting.
    pub const BUSY: u32 = 1 << 3;
    /// Receive FIFO empty.
    pub const RXFE: u32 = 1 << 4;
    /// Transmit FIFO full.
    pub const TXFF: u32 = 1 << 5;
    /// Receive FIFO full.
    pub const RXFF: u32 = 1 << 6;
    /// Transmit FIFO empty.
    pub const TXFE: u32 = 1 << 7;
}

/// Interrupt bits, shared by UARTIMSC, UARTRIS, UARTMIS and UARTICR.
pub mod int {
    /// Receive (FIFO at trigger level).
    pub const RX: u32 = 1 << 4;
    /// Transmit (FIFO at or below trigger level).
    pub const TX: u32 = 1 << 5;
    /// Receive timeout (data waiting in the FIFO).
    pub const RT: u32 = 1 << 6;
    /// All eleven defined interrupt bits (modem, RX, TX, RT, errors).
    pub const ALL: u32 = 0x7FF;
}

/// UARTCR bits.
pub mod cr {
    /// UART enable.
    pub const UARTEN: u32 = 1 << 0;
    /// Loopback enable: TX feeds RX.
    pub const LBE: u32 = 1 << 7;
    /// Transmit enable.
    pub const TXE: u32 = 1 << 8;
    /// Receive enable.
    pub const RXE: u32 = 1 << 9;
}

/// UARTLCR_H bits.
pub mod lcr_h {
    /// FIFO enable.
    pub const FEN: u32 = 1 << 4;
    /// 8-bit words.
    pub const WLEN_8: u32 = 3 << 5;
}

/// Depth of the RX FIFO (DDI0183: 32 entries).
pub const RX_FIFO_DEPTH: usize = 32;

/// UARTPeriphID0..3: part number 0x011, designer 0x41 (Arm), revision 1
/// (r1p5). Linux's AMBA bus matches 0x00041011 before binding `amba-pl011`,
/// and picks a 16-byte FIFO for revisions below 3.
const PERIPH_ID: [u32; 4] = [0x11, 0x10, 0x14, 0x00];
/// UARTPCellID0..3: the PrimeCell preamble 0xB105F00D.
const PCELL_ID: [u32; 4] = [0x0D, 0xF0, 0x05, 0xB1];

// Reset values (DDI0183 Table 3-1).
const CR_RESET: u32 = cr::TXE | cr::RXE;
const IFLS_RESET: u32 = 0x12;

// Writable bits of the storage registers.
const ILPR_MASK: u32 = 0xFF;
const IBRD_MASK: u32 = 0xFFFF;
const FBRD_MASK: u32 = 0x3F;
const LCR_H_MASK: u32 = 0xFF;
/// UARTCR bits 3..6 are reserved.
const CR_MASK: u32 = 0xFF87;
const IFLS_MASK: u32 = 0x3F;
const DMACR_MASK: u32 = 0x7;

/// An emulated PL011 as one partition sees it.
#[derive(Debug, Clone)]
pub struct Pl011 {
    rx: [u8; RX_FIFO_DEPTH],
    rx_head: usize,
    rx_count: usize,
    ilpr: u32,
    ibrd: u32,
    fbrd: u32,
    lcr_h: u32,
    cr: u32,
    ifls: u32,
    imsc: u32,
    dmacr: u32,
}

impl Default for Pl011 {
    fn default() -> Self {
        Self::new()
    }
}

impl Pl011 {
    /// A PL011 in its reset state: RX FIFO empty, interrupts masked.
    pub fn new() -> Self {
        Pl011 {
            rx: [0; RX_FIFO_DEPTH],
            rx_head: 0,
            rx_count: 0,
            ilpr: 0,
            ibrd: 0,
            fbrd: 0,
            lcr_h: 0,
            cr: CR_RESET,
            ifls: IFLS_RESET,
            imsc: 0,
            dmacr: 0,
        }
    }

    /// A guest load of `width` bytes (1, 2 or 4) at `offset` into the frame.
    ///
    /// Misaligned, out-of-frame or 8-byte accesses read as zero (the PL011
    /// is an APB peripheral with 32-bit registers). A narrower access reads
    /// its byte lanes of the 32-bit register; Linux's `amba-pl011` uses
    /// 16-bit accesses, earlycon 8- and 32-bit ones. Only an access covering
    /// byte 0 of UARTDR pops the RX FIFO.
    pub fn read(&mut self, offset: u64, width: u8) -> u64 {
        let Some((reg, shift)) = decode(offset, width) else {
            return 0;
        };
        let value = match reg {
            UARTDR if shift == 0 => u32::from(self.pop_rx()),
            UARTDR | UARTRSR_ECR => 0,
            UARTFR => self.flags(),
            UARTILPR => self.ilpr,
            UARTIBRD => self.ibrd,
            UARTFBRD => self.fbrd,
            UARTLCR_H => self.lcr_h,
            UARTCR => self.cr,
            UARTIFLS => self.ifls,
            UARTIMSC => self.imsc,
            UARTRIS => self.raw_status(),
            UARTMIS => self.raw_status() & self.imsc,
            UARTDMACR => self.dmacr,
            r if (UARTPERIPHID0..UARTPCELLID0).contains(&r) => {
                PERIPH_ID[((r - UARTPERIPHID0) / 4) as usize]
            }
            r if (UARTPCELLID0..PL011_FRAME_SIZE).contains(&r) => {
                PCELL_ID[((r - UARTPCELLID0) / 4) as usize]
            }
            // UARTICR is write-only; the rest of the frame is reserved.
            _ => 0,
        };
        u64::from(value >> shift) & width_mask(width)
    }

    /// A guest store of `width` bytes at `offset`; a byte written to UARTDR
    /// is handed to `tx` (or looped back to RX when UARTCR.LBE is set).
    ///
    /// Accesses [`read`](Self::read) would reject are ignored; a narrow store
    /// to a storage register replaces only its byte lanes.
    pub fn write(&mut self, offset: u64, width: u8, value: u64, tx: &mut impl FnMut(u8)) {
        let Some((reg, shift)) = decode(offset, width) else {
            return;
        };
        // Truncation is intended: the mask keeps at most 32 bits.
        let bits = ((value & width_mask(width)) as u32) << shift;
        let lanes = (width_mask(width) as u32) << shift;
        let merge = |old: u32, mask: u32| ((old & !lanes) | bits) & mask;
        match reg {
            UARTDR if shift == 0 => self.transmit(bits as u8, tx),
            UARTILPR => self.ilpr = merge(self.ilpr, ILPR_MASK),
            UARTIBRD => self.ibrd = merge(self.ibrd, IBRD_MASK),
            UARTFBRD => self.fbrd = merge(self.fbrd, FBRD_MASK),
            UARTLCR_H => self.lcr_h = merge(self.lcr_h, LCR_H_MASK),
            UARTCR => self.cr = merge(self.cr, CR_MASK),
            UARTIFLS => self.ifls = merge(self.ifls, IFLS_MASK),
            UARTIMSC => self.imsc = merge(self.imsc, int::ALL),
            UARTDMACR => self.dmacr = merge(self.dmacr, DMACR_MASK),
            // UARTICR clears latched interrupts and UARTECR latched errors;
            // this model latches neither (module docs), so both are no-ops.
            // UARTFR, UARTRIS, UARTMIS and the ID registers are read-only.
            _ => {}
        }
    }

    /// Queues a byte of host input; `false` (byte not taken) when the RX FIFO
    /// is full, so the caller keeps it and retries after the guest reads.
    pub fn push_rx(&mut self, byte: u8) -> bool {
        if self.rx_count == RX_FIFO_DEPTH {
            return false;
        }
        self.rx[(self.rx_head + self.rx_count) % RX_FIFO_DEPTH] = byte;
        self.rx_count += 1;
        true
    }

    /// Free entries in the RX FIFO.
    pub fn rx_room(&self) -> usize {
        RX_FIFO_DEPTH - self.rx_count
    }

    /// Level of the UART's interrupt line (UARTINTR): any unmasked raw
    /// interrupt. The caller reflects changes onto the partition's vSPI.
    pub fn irq_level(&self) -> bool {
        self.raw_status() & self.imsc != 0
    }

    fn transmit(&mut self, byte: u8, tx: &mut impl FnMut(u8)) {
        if self.cr & cr::LBE != 0 {
            // Loopback: a full FIFO drops the byte, as the silicon's overrun
            // would (the overrun flag itself is not modelled).
            self.push_rx(byte);
        } else {
            tx(byte);
        }
    }

    fn pop_rx(&mut self) -> u8 {
        if self.rx_count == 0 {
            return 0;
        }
        let byte = self.rx[self.rx_head];
        self.rx_head = (self.rx_head + 1) % RX_FIFO_DEPTH;
        self.rx_count -= 1;
        byte
    }

    fn flags(&self) -> u32 {
        let mut flags = fr::TXFE;
        if self.rx_count == 0 {
            flags |= fr::RXFE;
        }
        if self.rx_count == RX_FIFO_DEPTH {
            flags |= fr::RXFF;
        }
        flags
    }

    fn raw_status(&self) -> u32 {
        let mut ris = int::TX;
        if self.rx_count > 0 {
            ris |= int::RX | int::RT;
        }
        ris
    }
}

/// Splits a guest access into (32-bit register offset, bit shift of its
/// lanes), or `None` for an access the PL011 does not decode.
fn decode(offset: u64, width: u8) -> Option<(u64, u32)> {
    let aligned = matches!(width, 1 | 2 | 4) && offset.is_multiple_of(u64::from(width));
    if !aligned || offset >= PL011_FRAME_SIZE {
        return None;
    }
    Some((offset & !3, ((offset & 3) * 8) as u32))
}

fn width_mask(width: u8) -> u64 {
    match width {
        1 => 0xFF,
        2 => 0xFFFF,
        _ => 0xFFFF_FFFF,
    }
}

// ---------------------------------------------------------------------------
// Host console line prefixer
// ---------------------------------------------------------------------------

/// Longest line body buffered before it is wrapped onto a new host line.
pub const LINE_MAX: usize = 240;

/// Turns a partition's byte stream into host console lines that each start
/// with `[name] `.
///
/// Whole lines are handed to `out` in one call, so a caller that holds the
/// host console lock per call never interleaves two partitions mid-line.
/// Line ends are normalised to `\r\n` (the host console is a serial
/// terminal); a lone `\r` (progress meters) ends the host line with `\r` and
/// the overwrite starts with the prefix again, which renders correctly. A
/// body longer than [`LINE_MAX`] is wrapped rather than held.
#[derive(Debug, Clone)]
pub struct LinePrefixer {
    /// The prefix, then the pending body, then room for a terminator: one
    /// contiguous slice per emitted line.
    line: Vec<u8>,
    prefix_len: usize,
    /// A `\r` was seen; whether it ends the line depends on the next byte.
    pending_cr: bool,
    /// [`flush`](Self::flush) emitted part of this line already, so the rest
    /// continues it without a prefix.
    mid_line: bool,
}

impl LinePrefixer {
    /// A prefixer labelling lines `[name] `.
    pub fn new(name: &str) -> Self {
        let mut line = Vec::with_capacity(name.len() + 3 + LINE_MAX + 2);
        line.push(b'[');
        line.extend_from_slice(name.as_bytes());
        line.extend_from_slice(b"] ");
        let prefix_len = line.len();
        LinePrefixer {
            line,
            prefix_len,
            pending_cr: false,
            mid_line: false,
        }
    }

    /// Takes one byte of the partition's output; emits through `out` when a
    /// line is complete.
    pub fn feed(&mut self, byte: u8, out: &mut impl FnMut(&[u8])) {
        if self.pending_cr {
            match byte {
                b'\r' => return,
                b'\n' => {
                    self.pending_cr = false;
                    self.end_line(b"\r\n", out);
                    return;
                }
                _ => {
                    self.pending_cr = false;
                    self.end_line(b"\r", out);
                }
            }
        }
        match byte {
            b'\n' => self.end_line(b"\r\n", out),
            b'\r' => self.pending_cr = true,
            _ => {
                self.line.push(byte);
                if self.line.len() - self.prefix_len == LINE_MAX {
                    self.end_line(b"\r\n", out);
                }
            }
        }
    }

    /// Emits a pending partial line without ending it, for a caller that saw
    /// the partition go quiet (a shell prompt has no newline). Later bytes of
    /// the same line follow without a prefix.
    pub fn flush(&mut self, out: &mut impl FnMut(&[u8])) {
        if self.pending_cr {
            self.pending_cr = false;
            self.end_line(b"\r", out);
            return;
        }
        if self.line.len() == self.prefix_len {
            return;
        }
        out(&self.line[self.emit_start()..]);
        self.line.truncate(self.prefix_len);
        self.mid_line = true;
    }

    /// Whether the pending partial line looks like an interactive prompt
    /// ("# " or "$ ", the shells' prompts; "> " and ": " end too much log
    /// text to count), which no newline will ever follow until the
    /// user types: the caller flushes it so the prompt is seen. Without a
    /// timer on the console path this is the cheapest reliable signal.
    pub fn ends_with_prompt(&self) -> bool {
        let body = &self.line[self.prefix_len..];
        !self.pending_cr
            && body.len() >= 2
            && body[body.len() - 1] == b' '
            && matches!(body[body.len() - 2], b'#' | b'$')
    }

    fn end_line(&mut self, terminator: &[u8], out: &mut impl FnMut(&[u8])) {
        let empty = self.line.len() == self.prefix_len;
        // A bare `\r` on an empty line moves nothing; don't print a prefix for it.
        if !(empty && terminator == b"\r" && !self.mid_line) {
            self.line.extend_from_slice(terminator);
            out(&self.line[self.emit_start()..]);
        }
        self.line.truncate(self.prefix_len);
        self.mid_line = false;
    }

    fn emit_start(&self) -> usize {
        if self.mid_line {
            self.prefix_len
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec::Vec;

    // --- ConsoleRing -----------------------------------------------------

    #[test]
    fn shell_prompt_is_recognised_but_text_mid_line_is_not() {
        let mut p = LinePrefixer::new("alpha");
        let mut sink = |_: &[u8]| {};
        for &b in b"/ # " {
            p.feed(b, &mut sink);
        }
        assert!(p.ends_with_prompt());
        p.feed(b'l', &mut sink);
        assert!(!p.ends_with_prompt());
        let mut q = LinePrefixer::new("beta");
        for &b in b"x -> " {
            q.feed(b, &mut sink);
        }
        assert!(!q.ends_with_prompt());
    }

    fn read_all(ring: &ConsoleRing, from: u64) -> (Vec<u8>, RingRead) {
        let mut out = [0u8; 64];
        let r = ring.read(from, &mut out);
        (out[..r.len].to_vec(), r)
    }

    #[test]
    fn empty_ring_has_its_rounded_capacity_and_reads_nothing() {
        let ring = ConsoleRing::new(12);

        let (bytes, r) = read_all(&ring, 0);

        assert_eq!(ring.capacity(), 16);
        assert!(bytes.is_empty());
        assert_eq!(r.next, 0);
    }

    #[test]
    fn push_that_fills_the_ring_and_wraps_keeps_positions() {
        let mut ring = ConsoleRing::new(8);
        ring.push(b"abcde");
        ring.push(b"fghijk");

        let (bytes, r) = read_all(&ring, 0);

        assert_eq!(bytes, b"defghijk");
        assert_eq!(r.dropped, 3);
        assert_eq!(ring.write_pos(), 11);
    }

    #[test]
    fn clone_of_a_partly_filled_ring_reads_and_pushes_the_same() {
        let mut ring = ConsoleRing::new(8);
        ring.push(b"abc");
        let mut copy = ring.clone();

        ring.push(b"defghij");
        copy.push(b"defghij");

        assert_eq!(read_all(&copy, 0), read_all(&ring, 0));
    }

    #[test]
    fn ring_read_returns_pushed_bytes_and_next_position() {
        let mut ring = ConsoleRing::new(16);
        ring.push(b"hello");

        let (bytes, r) = read_all(&ring, 0);

        assert_eq!(bytes, b"hello");
        assert_eq!(
            r,
            RingRead {
                len: 5,
                next: 5,
                dropped: 0
            }
        );
    }

    #[test]
    fn ring_keeps_everything_while_it_fits_exactly() {
        let mut ring = ConsoleRing::new(8);
        ring.push(b"abc");
        ring.push(b"defgh");

        let (bytes, r) = read_all(&ring, 0);

        assert_eq!(bytes, b"abcdefgh");
        assert_eq!(r.dropped, 0);
    }

    #[test]
    fn ring_read_from_overwritten_position_reports_dropped_and_starts_at_oldest() {
        let mut ring = ConsoleRing::new(8);
        ring.push(b"0123456789AB");

        let (bytes, r) = read_all(&ring, 1);

        assert_eq!(bytes, b"456789AB");
        assert_eq!(
            r,
            RingRead {
                len: 8,
                next: 12,
                dropped: 3
            }
        );
    }

    #[test]
    fn ring_read_across_wrap_is_in_order() {
        let mut ring = ConsoleRing::new(8);
        ring.push(b"012345");
        ring.push(b"6789");

        let (bytes, _) = read_all(&ring, 6);

        assert_eq!(bytes, b"6789");
    }

    #[test]
    fn ring_push_longer_than_capacity_keeps_its_tail() {
        let mut ring = ConsoleRing::new(4);
        ring.push(b"xy");
        ring.push(b"abcdefghij");

        let (bytes, r) = read_all(&ring, 0);

        assert_eq!(bytes, b"ghij");
        assert_eq!((r.dropped, ring.write_pos()), (8, 12));
    }

    #[test]
    fn ring_read_is_limited_by_out_buffer_and_resumes_at_next() {
        let mut ring = ConsoleRing::new(16);
        ring.push(b"abcdef");
        let mut out = [0u8; 4];

        let first = ring.read(0, &mut out);
        let second = ring.read(first.next, &mut out);

        assert_eq!((first.len, first.next), (4, 4));
        assert_eq!(&out[..second.len], b"ef");
    }

    #[test]
    fn ring_read_from_future_position_resyncs_to_write_pos() {
        let mut ring = ConsoleRing::new(16);
        ring.push(b"abc");

        let (bytes, r) = read_all(&ring, 100);

        assert!(bytes.is_empty());
        assert_eq!(
            r,
            RingRead {
                len: 0,
                next: 3,
                dropped: 0
            }
        );
    }

    #[test]
    fn ring_capacity_rounds_up_to_power_of_two() {
        assert_eq!(ConsoleRing::new(100).capacity(), 128);
        assert_eq!(ConsoleRing::new(0).capacity(), 1);
    }

    // --- PL011 -----------------------------------------------------------

    /// Discards transmitted bytes.
    fn discard(_byte: u8) {}

    fn write(uart: &mut Pl011, offset: u64, value: u64) -> Vec<u8> {
        let mut sent = Vec::new();
        uart.write(offset, 2, value, &mut |b| sent.push(b));
        sent
    }

    /// Linux's AMBA bus reads the IDs with 32-bit loads before binding.
    fn amba_id(uart: &mut Pl011, base: u64) -> u32 {
        (0..4).fold(0, |id, i| {
            id | ((uart.read(base + 4 * i, 4) as u32 & 0xFF) << (8 * i))
        })
    }

    /// pl011_startup + pl011_set_termios as Linux performs them (16-bit).
    fn linux_startup(uart: &mut Pl011) {
        // pl011_hwinit: clear error/RX interrupts, read IMSC, enable RX ints.
        write(uart, UARTICR, 0x7C0 | u64::from(int::RT | int::RX));
        let _ = uart.read(UARTIMSC, 2);
        write(uart, UARTIMSC, u64::from(int::RT | int::RX));
        write(uart, UARTIFLS, 0x12);
        let cr_now = uart.read(UARTCR, 2) & 0x0C00;
        write(
            uart,
            UARTCR,
            cr_now | u64::from(cr::UARTEN | cr::RXE | cr::TXE),
        );
        // pl011_enable_interrupts: drain RX, then IMSC = RTIM | RXIM.
        write(uart, UARTICR, u64::from(int::RT | int::RX));
        while uart.read(UARTFR, 2) as u32 & fr::RXFE == 0 {
            let _ = uart.read(UARTDR, 2);
        }
        write(uart, UARTIMSC, u64::from(int::RT | int::RX));
        // set_termios: 115200 8N1 with FIFOs from a 24 MHz clock.
        write(uart, UARTFBRD, 2);
        write(uart, UARTIBRD, 13);
        write(uart, UARTLCR_H, u64::from(lcr_h::WLEN_8 | lcr_h::FEN));
    }

    #[test]
    fn amba_probe_reads_primecell_and_peripheral_ids() {
        let mut uart = Pl011::new();

        let cid = amba_id(&mut uart, UARTPCELLID0);
        let pid = amba_id(&mut uart, UARTPERIPHID0);

        assert_eq!(cid, 0xB105_F00D);
        // Linux's amba_pl011 id table: (pid & 0x000FFFFF) == 0x00041011.
        assert_eq!(pid & 0x000F_FFFF, 0x0004_1011);
    }

    #[test]
    fn reset_state_has_empty_fifos_and_masked_interrupts() {
        let mut uart = Pl011::new();

        let flags = uart.read(UARTFR, 4) as u32;

        assert_eq!(flags, fr::TXFE | fr::RXFE);
        assert_eq!(uart.read(UARTCR, 4) as u32, cr::TXE | cr::RXE);
        assert_eq!(uart.read(UARTIFLS, 4), 0x12);
        assert!(!uart.irq_level());
    }

    #[test]
    fn linux_startup_leaves_rx_interrupts_enabled_and_line_low() {
        let mut uart = Pl011::new();

        linux_startup(&mut uart);

        assert_eq!(uart.read(UARTIMSC, 2) as u32, int::RT | int::RX);
        assert_eq!(uart.read(UARTLCR_H, 2) as u32, lcr_h::WLEN_8 | lcr_h::FEN);
        assert_eq!((uart.read(UARTIBRD, 2), uart.read(UARTFBRD, 2)), (13, 2));
        assert!(!uart.irq_level());
    }

    #[test]
    fn linux_startup_drains_input_that_arrived_before_the_port_opened() {
        let mut uart = Pl011::new();
        uart.push_rx(b'x');

        linux_startup(&mut uart);

        assert_eq!(uart.read(UARTFR, 2) as u32 & fr::RXFE, fr::RXFE);
        assert!(!uart.irq_level());
    }

    #[test]
    fn data_register_write_transmits_byte() {
        let mut uart = Pl011::new();

        let sent = write(&mut uart, UARTDR, u64::from(b'A'));

        assert_eq!(sent, b"A");
    }

    #[test]
    fn transmitter_never_reports_full_or_busy() {
        let mut uart = Pl011::new();
        for _ in 0..1000 {
            uart.write(UARTDR, 1, u64::from(b'.'), &mut discard);
        }

        let flags = uart.read(UARTFR, 4) as u32;

        assert_eq!(flags & (fr::TXFF | fr::BUSY), 0);
        assert_eq!(flags & fr::TXFE, fr::TXFE);
    }

    #[test]
    fn earlycon_byte_and_word_accesses_transmit_without_uart_enabled() {
        let mut uart = Pl011::new();
        let mut sent = Vec::new();

        uart.write(UARTDR, 1, u64::from(b'e'), &mut |b| sent.push(b));
        uart.write(UARTDR, 4, u64::from(b'w'), &mut |b| sent.push(b));

        assert_eq!(sent, b"ew");
    }

    #[test]
    fn tx_interrupt_raw_status_stays_set_after_icr() {
        let mut uart = Pl011::new();

        write(&mut uart, UARTICR, u64::from(int::TX));

        assert_eq!(uart.read(UARTRIS, 2) as u32 & int::TX, int::TX);
    }

    #[test]
    fn linux_tx_from_start_tx_never_enables_txim_so_line_stays_low() {
        // pl011_start_tx_pio: write while !TXFF; the whole queue drains, so
        // pl011_tx_chars returns false and TXIM is never set.
        let mut uart = Pl011::new();
        linux_startup(&mut uart);
        let queue = b"login: ";
        let mut sent = Vec::new();
        let mut pending = &queue[..];

        while !pending.is_empty() && uart.read(UARTFR, 2) as u32 & fr::TXFF == 0 {
            uart.write(UARTDR, 2, u64::from(pending[0]), &mut |b| sent.push(b));
            pending = &pending[1..];
        }

        assert_eq!(sent, queue);
        assert_eq!(uart.read(UARTIMSC, 2) as u32 & int::TX, 0);
        assert!(!uart.irq_level());
    }

    #[test]
    fn linux_tx_interrupt_drains_queue_then_line_drops() {
        // A queue refilled while TXIM was set: each pass of pl011_int sends
        // fifosize/2 = 8 bytes; pl011_stop_tx clears TXIM when empty.
        let mut uart = Pl011::new();
        linux_startup(&mut uart);
        write(&mut uart, UARTIMSC, u64::from(int::RT | int::RX | int::TX));
        let mut queue: Vec<u8> = (0..20).collect();
        let mut sent = Vec::new();
        let mut passes = 0;

        while uart.irq_level() {
            passes += 1;
            assert!(passes <= 3, "TX interrupt storm");
            let status = uart.read(UARTRIS, 2) as u32 & uart.read(UARTIMSC, 2) as u32;
            assert_eq!(status, int::TX);
            let n = queue.len().min(8);
            for b in queue.drain(..n) {
                uart.write(UARTDR, 2, u64::from(b), &mut |b| sent.push(b));
            }
            if queue.is_empty() {
                write(&mut uart, UARTIMSC, u64::from(int::RT | int::RX));
            }
        }

        assert_eq!(sent, (0..20).collect::<Vec<u8>>());
        assert_eq!(passes, 3);
    }

    #[test]
    fn rx_byte_raises_line_when_rx_interrupts_enabled() {
        let mut uart = Pl011::new();
        linux_startup(&mut uart);

        let accepted = uart.push_rx(b'q');

        assert!(accepted);
        assert!(uart.irq_level());
        assert_eq!(uart.read(UARTMIS, 2) as u32, int::RX | int::RT);
    }

    #[test]
    fn rx_byte_with_rx_interrupts_masked_keeps_line_low() {
        let mut uart = Pl011::new();

        uart.push_rx(b'q');

        assert!(!uart.irq_level());
        assert_eq!(uart.read(UARTRIS, 2) as u32 & int::RX, int::RX);
    }

    #[test]
    fn linux_rx_interrupt_reads_bytes_in_order_and_line_drops_when_drained() {
        let mut uart = Pl011::new();
        linux_startup(&mut uart);
        for &b in b"ls\r" {
            uart.push_rx(b);
        }
        let mut got = Vec::new();

        // pl011_int: ICR for non-RX/TX bits, then pl011_fifo_to_tty.
        write(&mut uart, UARTICR, 0);
        while uart.read(UARTFR, 2) as u32 & fr::RXFE == 0 {
            got.push(uart.read(UARTDR, 2) as u8);
        }

        assert_eq!(got, b"ls\r");
        assert!(!uart.irq_level());
    }

    #[test]
    fn icr_does_not_lower_rx_level_while_data_waits() {
        let mut uart = Pl011::new();
        linux_startup(&mut uart);
        uart.push_rx(b'z');

        write(&mut uart, UARTICR, u64::from(int::ALL));

        assert!(uart.irq_level());
    }

    #[test]
    fn rx_fifo_refuses_33rd_byte_and_reports_full() {
        let mut uart = Pl011::new();
        for i in 0..RX_FIFO_DEPTH {
            assert!(uart.push_rx(i as u8));
        }

        let accepted = uart.push_rx(0xFF);

        assert!(!accepted);
        assert_eq!(uart.read(UARTFR, 4) as u32 & fr::RXFF, fr::RXFF);
        assert_eq!(uart.rx_room(), 0);
    }

    #[test]
    fn rx_fifo_wraps_and_keeps_order() {
        let mut uart = Pl011::new();
        for i in 0..RX_FIFO_DEPTH {
            uart.push_rx(i as u8);
        }
        for _ in 0..10 {
            let _ = uart.read(UARTDR, 4);
        }
        for i in 0..10 {
            uart.push_rx(100 + i);
        }

        let got: Vec<u8> = (0..RX_FIFO_DEPTH)
            .map(|_| uart.read(UARTDR, 4) as u8)
            .collect();

        let expected: Vec<u8> = (10..32).chain(100..110).collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn loopback_sends_tx_to_rx_not_the_line() {
        let mut uart = Pl011::new();
        write(&mut uart, UARTCR, u64::from(cr::UARTEN | cr::TXE | cr::LBE));

        let sent = write(&mut uart, UARTDR, 0x5A);

        assert!(sent.is_empty());
        assert_eq!(uart.read(UARTDR, 2), 0x5A);
    }

    #[test]
    fn unmasking_pending_rx_raises_line_and_masking_lowers_it() {
        let mut uart = Pl011::new();
        uart.push_rx(b'a');

        write(&mut uart, UARTIMSC, u64::from(int::RX));
        let raised = uart.irq_level();
        write(&mut uart, UARTIMSC, 0);

        assert!(raised);
        assert!(!uart.irq_level());
    }

    #[test]
    fn byte_access_reads_its_lane_of_the_register() {
        let mut uart = Pl011::new();

        let high = uart.read(UARTCR + 1, 1);

        assert_eq!(high as u32, (cr::TXE | cr::RXE) >> 8);
    }

    #[test]
    fn narrow_write_replaces_only_its_lanes() {
        let mut uart = Pl011::new();

        uart.write(UARTCR, 1, u64::from(cr::UARTEN), &mut discard);

        assert_eq!(uart.read(UARTCR, 4) as u32, cr::UARTEN | cr::TXE | cr::RXE);
    }

    #[test]
    fn reading_upper_half_of_data_register_does_not_pop_rx() {
        let mut uart = Pl011::new();
        uart.push_rx(b'k');

        let errors = uart.read(UARTDR + 2, 2);

        assert_eq!(errors, 0);
        assert_eq!(uart.read(UARTDR, 4), u64::from(b'k'));
    }

    #[test]
    fn misaligned_or_wide_accesses_are_ignored() {
        let mut uart = Pl011::new();
        uart.push_rx(b'k');

        uart.write(UARTIMSC + 1, 2, 0xFFFF, &mut discard);
        let wide = uart.read(UARTDR, 8);
        let outside = uart.read(PL011_FRAME_SIZE, 4);

        assert_eq!(uart.read(UARTIMSC, 4), 0);
        assert_eq!((wide, outside), (0, 0));
        assert_eq!(uart.read(UARTDR, 4), u64::from(b'k'));
    }

    #[test]
    fn read_only_registers_ignore_writes() {
        let mut uart = Pl011::new();

        uart.write(UARTFR, 4, 0, &mut discard);
        uart.write(UARTPERIPHID0, 4, 0, &mut discard);

        assert_eq!(uart.read(UARTFR, 4) as u32, fr::TXFE | fr::RXFE);
        assert_eq!(uart.read(UARTPERIPHID0, 4), 0x11);
    }

    #[test]
    fn byte_write_to_upper_lane_of_data_register_transmits_nothing() {
        let mut uart = Pl011::new();
        let mut sent = Vec::new();

        uart.write(UARTDR + 1, 1, u64::from(b'X'), &mut |b| sent.push(b));

        assert!(sent.is_empty());
    }

    #[test]
    fn icr_reads_as_zero() {
        let mut uart = Pl011::new();

        assert_eq!(uart.read(UARTICR, 4), 0);
    }

    // --- LinePrefixer ----------------------------------------------------

    fn feed_all(p: &mut LinePrefixer, bytes: &[u8]) -> Vec<Vec<u8>> {
        let mut lines = Vec::new();
        for &b in bytes {
            p.feed(b, &mut |s: &[u8]| lines.push(s.to_vec()));
        }
        lines
    }

    #[test]
    fn prefixer_emits_each_crlf_line_once_with_prefix() {
        let mut p = LinePrefixer::new("web");

        let lines = feed_all(&mut p, b"one\r\ntwo\r\n");

        assert_eq!(
            lines,
            [b"[web] one\r\n".to_vec(), b"[web] two\r\n".to_vec()]
        );
    }

    #[test]
    fn prefixer_normalises_bare_newline_to_crlf() {
        let mut p = LinePrefixer::new("g");

        let lines = feed_all(&mut p, b"x\n");

        assert_eq!(lines, [b"[g] x\r\n".to_vec()]);
    }

    #[test]
    fn prefixer_treats_cr_cr_lf_as_one_line_end() {
        let mut p = LinePrefixer::new("g");

        let lines = feed_all(&mut p, b"x\r\r\n");

        assert_eq!(lines, [b"[g] x\r\n".to_vec()]);
    }

    #[test]
    fn prefixer_holds_partial_line_until_newline() {
        let mut p = LinePrefixer::new("g");

        let lines = feed_all(&mut p, b"no newline yet");

        assert!(lines.is_empty());
    }

    #[test]
    fn prefixer_lone_cr_rewrites_line_with_prefix_again() {
        let mut p = LinePrefixer::new("g");

        let lines = feed_all(&mut p, b"10%\r20%\n");

        assert_eq!(lines, [b"[g] 10%\r".to_vec(), b"[g] 20%\r\n".to_vec()]);
    }

    #[test]
    fn prefixer_wraps_line_longer_than_buffer() {
        let mut p = LinePrefixer::new("g");
        let long = [b'a'; LINE_MAX + 3];

        let lines = feed_all(&mut p, &long);
        let rest = feed_all(&mut p, b"\n");

        assert_eq!(lines.len(), 1);
        assert_eq!(lines[0].len(), 4 + LINE_MAX + 2);
        assert!(lines[0].ends_with(b"a\r\n"));
        assert_eq!(rest, [b"[g] aaa\r\n".to_vec()]);
    }

    #[test]
    fn prefixer_flush_emits_prompt_and_continuation_has_no_prefix() {
        let mut p = LinePrefixer::new("g");
        feed_all(&mut p, b"$ ");
        let mut flushed = Vec::new();

        p.flush(&mut |s: &[u8]| flushed.push(s.to_vec()));
        let rest = feed_all(&mut p, b"ls\r\nnext\n");

        assert_eq!(flushed, [b"[g] $ ".to_vec()]);
        assert_eq!(rest, [b"ls\r\n".to_vec(), b"[g] next\r\n".to_vec()]);
    }

    #[test]
    fn prefixer_flush_with_nothing_pending_emits_nothing() {
        let mut p = LinePrefixer::new("g");
        feed_all(&mut p, b"done\n");
        let mut calls = 0;

        p.flush(&mut |_: &[u8]| calls += 1);

        assert_eq!(calls, 0);
    }

    #[test]
    fn prefixer_empty_line_still_gets_prefix() {
        let mut p = LinePrefixer::new("g");

        let lines = feed_all(&mut p, b"\r\n");

        assert_eq!(lines, [b"[g] \r\n".to_vec()]);
    }
}
