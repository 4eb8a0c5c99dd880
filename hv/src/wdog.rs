//! The emulated SBSA Generic Watchdog every partition with a `watchdog_s`
//! sees (Arm DEN0029, "Generic Watchdog", architecture revision 1, whose
//! WOR is 48 bits: at a 1 GHz counter a 32-bit one would hold 4 s): a
//! control frame (WCS, WOR, WCV, W_IIDR) and a refresh frame (WRR,
//! W_IIDR) at the virtual board's `GUEST_WDOG_*` addresses, WS0 on SPI
//! `GUEST_WDOG_INTID`.
//!
//! Semantics (DEN0029 "Watchdog operation"): an explicit refresh (a write
//! of WRR, WOR or WCS) sets WCV = counter + WOR and clears WS0 and WS1.
//! While enabled, the first time the counter reaches WCV sets WS0 and
//! re-arms WCV = WCV + WOR (the timeout refresh); reaching it again with
//! WS0 set sets WS1, the "reset the system" signal.
//!
//! Which signal is a crash: WS1. Linux's sbsa_gwdt in its default
//! `action=0` ignores WS0 (it requests no interrupt) and programs WOR to
//! half its timeout, so WS1 comes `timeout` after its last refresh; with
//! `action=1` it panics on WS0 (its panic message reaches the console) and
//! WS1 follows one WOR later. The driver keeps a watchdog it finds enabled
//! fed from the kernel when no userspace opener exists (WDOG_HW_RUNNING),
//! so the hypervisor enables it before entry: WOR = `watchdog_s` but at
//! least 15 s, i.e. a first WS1 no sooner than 30 s after entry
//! (`lifecycle::BOOT_GRACE_S`: a kernel booting on a loaded host is no
//! crash) until the driver writes its own WOR from the DT's `timeout-sec`
//! (= `watchdog_s`).
//!
//! Pure state, no clock: accesses and [`SbsaWatchdog::poll`] take the
//! counter value. The guest's accesses come from any of its vCPUs (under
//! the partition's lifecycle lock); the hypervisor polls it on the
//! partition's vCPU 0's CPU from the EL2 timer (`lifecycle`).

/// Control frame register offsets.
pub const WCS: u64 = 0x000;
pub const WOR: u64 = 0x008;
/// WOR bits [47:32] (revision 1).
pub const WOR_HI: u64 = 0x00c;
pub const WCV_LO: u64 = 0x010;
pub const WCV_HI: u64 = 0x014;
/// Refresh frame: the refresh register.
pub const WRR: u64 = 0x000;
/// Both frames: the interface identification register.
pub const W_IIDR: u64 = 0xfcc;

/// WCS bits.
pub const WCS_EN: u32 = 1 << 0;
pub const WCS_WS0: u32 = 1 << 1;
pub const WCS_WS1: u32 = 1 << 2;

/// W_IIDR: architecture revision 1 ([19:16]), so WOR is 48 bits (Linux's
/// sbsa_gwdt then writes it as two 32-bit halves, low first); no
/// implementer, product or revision claimed.
pub const IIDR: u32 = 1 << 16;

/// WOR's width in revision 1.
const WOR_MASK: u64 = (1 << 48) - 1;

/// Which frame an access is to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame {
    Control,
    Refresh,
}

/// What a poll found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Nothing new.
    None,
    /// WS0 was raised now (the interrupt line goes up).
    Ws0,
    /// WS1 was raised now: the partition is to be reset (crashed).
    Ws1,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SbsaWatchdog {
    enabled: bool,
    ws0: bool,
    ws1: bool,
    /// Watchdog offset (counter ticks), 48 bits.
    wor: u64,
    /// Compare value (counter ticks).
    wcv: u64,
}

impl SbsaWatchdog {
    /// Reset state: disabled, WOR and WCV zero.
    pub const fn new() -> Self {
        SbsaWatchdog {
            enabled: false,
            ws0: false,
            ws1: false,
            wor: 0,
            wcv: 0,
        }
    }

    /// The hypervisor enables it before entry with offset `wor` ticks
    /// (saturated to 48 bits).
    pub fn arm(&mut self, now: u64, wor: u64) {
        *self = Self::new();
        self.wor = wor.min(WOR_MASK);
        self.enabled = true;
        self.refresh(now);
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// WCS as the guest reads it.
    pub fn wcs(&self) -> u32 {
        let bit = |on: bool, b: u32| if on { b } else { 0 };
        bit(self.enabled, WCS_EN) | bit(self.ws0, WCS_WS0) | bit(self.ws1, WCS_WS1)
    }

    /// The WS0 interrupt line (level, while enabled).
    pub fn irq_level(&self) -> bool {
        self.enabled && self.ws0
    }

    /// The counter value at which the next signal is due, if enabled and
    /// WS1 not yet raised.
    pub fn deadline(&self) -> Option<u64> {
        (self.enabled && !self.ws1).then_some(self.wcv)
    }

    fn refresh(&mut self, now: u64) {
        self.ws0 = false;
        self.ws1 = false;
        self.wcv = now.saturating_add(self.wor);
    }

    /// A guest read of `offset` in `frame` (32-bit registers; WCV also as
    /// one 64-bit read). Unknown offsets read as zero.
    pub fn read(&self, frame: Frame, offset: u64, width: u8) -> u64 {
        match (frame, offset) {
            (_, W_IIDR) => u64::from(IIDR),
            (Frame::Control, WCS) => u64::from(self.wcs()),
            (Frame::Control, WOR) if width == 8 => self.wor,
            (Frame::Control, WOR) => self.wor & 0xffff_ffff,
            (Frame::Control, WOR_HI) => self.wor >> 32,
            (Frame::Control, WCV_LO) if width == 8 => self.wcv,
            (Frame::Control, WCV_LO) => self.wcv & 0xffff_ffff,
            (Frame::Control, WCV_HI) => self.wcv >> 32,
            _ => 0,
        }
    }

    /// A guest write at counter value `now`. Unknown offsets and read-only
    /// registers ignore it.
    pub fn write(&mut self, frame: Frame, offset: u64, width: u8, value: u64, now: u64) {
        match (frame, offset) {
            (Frame::Refresh, WRR) => self.refresh(now),
            (Frame::Control, WCS) => {
                self.enabled = value as u32 & WCS_EN != 0;
                self.refresh(now);
            }
            (Frame::Control, WOR) if width == 8 => {
                self.wor = value & WOR_MASK;
                self.refresh(now);
            }
            (Frame::Control, WOR) => {
                self.wor = self.wor & !0xffff_ffff | value & 0xffff_ffff;
                self.refresh(now);
            }
            (Frame::Control, WOR_HI) => {
                self.wor = (self.wor & 0xffff_ffff | (value & 0xffff) << 32) & WOR_MASK;
                self.refresh(now);
            }
            (Frame::Control, WCV_LO) if width == 8 => self.wcv = value,
            (Frame::Control, WCV_LO) => {
                self.wcv = self.wcv & !0xffff_ffff | value & 0xffff_ffff;
            }
            (Frame::Control, WCV_HI) => {
                self.wcv = self.wcv & 0xffff_ffff | (value & 0xffff_ffff) << 32;
            }
            _ => {}
        }
    }

    /// Let the counter reach `now`: raise WS0 (with the timeout refresh)
    /// and then WS1 as the hardware would have by then. Reports the most
    /// serious signal raised by this poll.
    pub fn poll(&mut self, now: u64) -> Signal {
        if !self.enabled || self.ws1 {
            return Signal::None;
        }
        let mut signal = Signal::None;
        if !self.ws0 && now >= self.wcv {
            self.ws0 = true;
            self.wcv = self.wcv.saturating_add(self.wor);
            signal = Signal::Ws0;
        }
        if self.ws0 && now >= self.wcv {
            self.ws1 = true;
            return Signal::Ws1;
        }
        signal
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HZ: u64 = 1000;

    /// A watchdog as Linux's sbsa_gwdt leaves it after probe (action=0):
    /// WOR = timeout / 2, enabled.
    fn linux_armed(now: u64, timeout_s: u64) -> SbsaWatchdog {
        let mut w = SbsaWatchdog::new();
        w.write(Frame::Control, WOR, 4, HZ / 2 * timeout_s, now);
        w.write(Frame::Control, WCS, 4, u64::from(WCS_EN), now);
        w
    }

    #[test]
    fn reset_state_reads_disabled_with_zero_registers_and_revision_1() {
        let w = SbsaWatchdog::new();

        assert_eq!(w.read(Frame::Control, WCS, 4), 0);
        assert_eq!(w.read(Frame::Control, WOR, 4), 0);
        assert_eq!(w.read(Frame::Control, WCV_LO, 8), 0);
        assert_eq!(w.read(Frame::Refresh, W_IIDR, 4) >> 16 & 0xf, 1);
        assert_eq!(w.read(Frame::Control, W_IIDR, 4) >> 16 & 0xf, 1);
        assert_eq!(w.read(Frame::Refresh, WRR, 4), 0);
    }

    #[test]
    fn a_watchdog_the_hypervisor_armed_reads_enabled_to_the_driver() {
        let mut w = SbsaWatchdog::new();

        w.arm(100, 5 * HZ);

        assert_eq!(w.read(Frame::Control, WCS, 4), u64::from(WCS_EN));
        assert_eq!(w.read(Frame::Control, WOR, 4), 5 * HZ);
        assert_eq!(w.read(Frame::Control, WCV_LO, 4), 100 + 5 * HZ);
        assert_eq!(w.read(Frame::Control, WCV_HI, 4), 0);
    }

    #[test]
    fn without_refresh_ws0_then_ws1_one_offset_apart() {
        let mut w = linux_armed(0, 10);

        assert_eq!(w.poll(5 * HZ - 1), Signal::None);
        assert_eq!(w.poll(5 * HZ), Signal::Ws0);
        assert!(w.irq_level());
        assert_eq!(w.read(Frame::Control, WCS, 4), u64::from(WCS_EN | WCS_WS0));
        assert_eq!(w.poll(10 * HZ - 1), Signal::None);
        assert_eq!(w.poll(10 * HZ), Signal::Ws1);
        assert_eq!(w.poll(20 * HZ), Signal::None, "WS1 reported once");
        assert_eq!(w.deadline(), None);
    }

    #[test]
    fn refreshes_through_the_refresh_frame_keep_it_quiet() {
        let mut w = linux_armed(0, 10);

        for t in (1..100).map(|i| i * 4 * HZ) {
            assert_eq!(w.poll(t), Signal::None, "at {t}");
            w.write(Frame::Refresh, WRR, 4, 0, t);
        }
        assert_eq!(w.read(Frame::Control, WCS, 4), u64::from(WCS_EN));
    }

    #[test]
    fn a_refresh_after_ws0_clears_it_and_the_line() {
        let mut w = linux_armed(0, 10);
        assert_eq!(w.poll(6 * HZ), Signal::Ws0);

        w.write(Frame::Refresh, WRR, 4, 0, 6 * HZ);

        assert!(!w.irq_level());
        assert_eq!(w.read(Frame::Control, WCS, 4), u64::from(WCS_EN));
        assert_eq!(w.deadline(), Some(11 * HZ));
    }

    #[test]
    fn a_guest_that_stops_refreshing_is_reset_a_timeout_after_its_last_refresh() {
        let mut w = linux_armed(0, 6);
        let mut t = 0;
        while t < 30 * HZ {
            w.write(Frame::Refresh, WRR, 4, 0, t);
            t += 2 * HZ;
            assert_eq!(w.poll(t), Signal::None);
        }
        let last = t - 2 * HZ;

        // Polled every half second from here on, as the hypervisor does.
        let fired = (1..100)
            .map(|i| last + i * HZ / 2)
            .find(|&t| w.poll(t) == Signal::Ws1);

        assert_eq!(fired, Some(last + 6 * HZ));
    }

    #[test]
    fn a_late_poll_raises_both_signals_at_once() {
        let mut w = linux_armed(0, 2);

        assert_eq!(w.poll(60 * HZ), Signal::Ws1);
    }

    #[test]
    fn disabling_stops_it_and_writing_wor_refreshes() {
        let mut w = linux_armed(0, 2);
        w.write(Frame::Control, WCS, 4, 0, HZ / 2);
        assert_eq!(w.poll(100 * HZ), Signal::None);
        assert_eq!(w.deadline(), None);

        w.write(Frame::Control, WCS, 4, u64::from(WCS_EN), 100 * HZ);
        w.write(Frame::Control, WOR, 4, 4 * HZ, 101 * HZ);

        assert_eq!(w.deadline(), Some(105 * HZ));
    }

    #[test]
    fn wor_is_48_bits_written_low_half_first_as_linux_does() {
        let mut w = SbsaWatchdog::new();
        let wor: u64 = 30 * 1_000_000_000; // 30 s at 1 GHz: beyond 32 bits

        w.write(Frame::Control, WOR, 4, wor & 0xffff_ffff, 0);
        w.write(Frame::Control, WOR_HI, 4, wor >> 32, 0);

        assert_eq!(w.read(Frame::Control, WOR, 8), wor);
        assert_eq!(w.read(Frame::Control, WOR_HI, 4), wor >> 32);
        w.write(Frame::Control, WOR_HI, 4, 0xffff_ffff, 0);
        assert_eq!(
            w.read(Frame::Control, WOR_HI, 4),
            0xffff,
            "bits above 47 are RES0"
        );
    }

    #[test]
    fn wcv_halves_and_64_bit_access() {
        let mut w = SbsaWatchdog::new();

        w.write(Frame::Control, WCV_LO, 4, 0x1234_5678, 0);
        w.write(Frame::Control, WCV_HI, 4, 0x9, 0);

        assert_eq!(w.read(Frame::Control, WCV_LO, 8), 0x9_1234_5678);
        w.write(Frame::Control, WCV_LO, 8, 0xabc, 0);
        assert_eq!(w.read(Frame::Control, WCV_HI, 4), 0);
        assert_eq!(w.read(Frame::Control, WCV_LO, 4), 0xabc);
    }

    #[test]
    fn the_refresh_frame_has_no_control_registers() {
        let mut w = SbsaWatchdog::new();

        w.write(Frame::Refresh, WCS + 4, 4, 1, 0);
        w.write(Frame::Refresh, WOR, 4, 99, 0);

        assert!(!w.enabled());
        assert_eq!(w.read(Frame::Control, WOR, 4), 0);
    }
}
