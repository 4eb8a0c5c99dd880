//! The arch generic timer's counter as an `embedded_time` clock, so time
//! spans in the hypervisor carry their units.

use embedded_time::{clock, fraction::Fraction, Instant};

/// CNTPCT_EL0 at the frequency in CNTFRQ_EL0.
pub struct ArchCounter {
    frequency: u32,
    read: fn() -> u64,
}

impl ArchCounter {
    /// `read` returns the counter (an arch function reading CNTPCT_EL0, or a
    /// fake in tests).
    pub const fn new(frequency: u32, read: fn() -> u64) -> Self {
        ArchCounter { frequency, read }
    }

    pub fn frequency(&self) -> u32 {
        self.frequency
    }

    /// Ticks converted to microseconds.
    pub fn ticks_to_us(&self, ticks: u64) -> u64 {
        if self.frequency == 0 {
            return 0;
        }
        (ticks as u128 * 1_000_000 / self.frequency as u128) as u64
    }
}

impl clock::Clock for ArchCounter {
    type T = u64;
    // The scaling factor is a run-time value (CNTFRQ_EL0); embedded-time wants
    // a const, so the clock ticks in nanoseconds and `try_now` converts.
    const SCALING_FACTOR: Fraction = Fraction::new(1, 1_000_000_000);

    fn try_now(&self) -> Result<Instant<Self>, clock::Error> {
        if self.frequency == 0 {
            return Err(clock::Error::Unspecified);
        }
        let ticks = (self.read)() as u128;
        Ok(Instant::new(
            (ticks * 1_000_000_000 / self.frequency as u128) as u64,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use embedded_time::{duration::Milliseconds, Clock};

    fn fake_counter() -> u64 {
        62_500_000 * 3
    }

    #[test]
    fn clock_converts_ticks_at_62_5_mhz_to_three_seconds() {
        let clock = ArchCounter::new(62_500_000, fake_counter);
        let now = clock.try_now().expect("clock runs");
        let since: Milliseconds<u64> = now.duration_since_epoch().try_into().expect("fits");
        assert_eq!(since, Milliseconds(3000u64));
        assert_eq!(clock.ticks_to_us(62_500), 1000);
    }
}
