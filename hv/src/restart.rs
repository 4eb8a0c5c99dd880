//! The restart policy of the management partition: when it stops on its
//! own (PSCI SYSTEM_OFF or SYSTEM_RESET from the guest, an SError the
//! hypervisor contains), it is started again after a back-off that doubles
//! from [`FIRST_DELAY_S`] up to [`MAX_DELAY_S`] and falls back to the first
//! delay once a run lasted [`STABLE_S`]. Every restart is counted.
//!
//! Pure state, no clock of its own: the caller passes counter values and the
//! counter frequency, so the host tests drive it with a fake clock. The core
//! decides here; the platform's idle loop wakes at [`RestartPolicy::due`]
//! and the core's `exit::idle_work` starts the partition once it is due.
//! This is the one mechanism that per-partition restart policies will
//! generalise.

/// Delay before the first restart, and after a run of [`STABLE_S`].
pub const FIRST_DELAY_S: u64 = 1;
/// The back-off's ceiling.
pub const MAX_DELAY_S: u64 = 60;
/// A run at least this long resets the back-off.
pub const STABLE_S: u64 = 60;

/// What the policy decided when the partition stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Seconds until the restart.
    pub delay_s: u64,
    /// Which restart this will be (1 for the first).
    pub restart: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartPolicy {
    /// The delay the next stop gets, unless the run was stable.
    next_delay_s: u64,
    /// Restarts decided since the hypervisor started.
    restarts: u32,
    /// Counter value at which the pending restart is due.
    due: Option<u64>,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        Self::new()
    }
}

impl RestartPolicy {
    pub const fn new() -> Self {
        RestartPolicy {
            next_delay_s: FIRST_DELAY_S,
            restarts: 0,
            due: None,
        }
    }

    /// The partition stopped at counter `now`, having started at
    /// `started_at` (`freq` ticks per second): schedule its restart.
    pub fn stopped(&mut self, now: u64, started_at: u64, freq: u64) -> Decision {
        let ran_s = now.saturating_sub(started_at) / freq.max(1);
        if ran_s >= STABLE_S {
            self.next_delay_s = FIRST_DELAY_S;
        }
        let delay_s = self.next_delay_s;
        self.next_delay_s = (delay_s * 2).min(MAX_DELAY_S);
        self.restarts = self.restarts.saturating_add(1);
        self.due = Some(now.saturating_add(delay_s.saturating_mul(freq)));
        Decision {
            delay_s,
            restart: self.restarts,
        }
    }

    /// Counter value at which a restart is due, if one is pending.
    pub fn due(&self) -> Option<u64> {
        self.due
    }

    /// True once, when the pending restart is due at `now`.
    pub fn take_due(&mut self, now: u64) -> bool {
        match self.due {
            Some(at) if now >= at => {
                self.due = None;
                true
            }
            _ => false,
        }
    }

    /// Restarts decided so far.
    pub fn restarts(&self) -> u32 {
        self.restarts
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HZ: u64 = 1000;

    /// Stops the partition `ran_s` seconds after it started at `*clock`,
    /// then lets the clock run to the restart; returns the decision.
    fn crash_after(p: &mut RestartPolicy, clock: &mut u64, ran_s: u64) -> Decision {
        let started = *clock;
        *clock += ran_s * HZ;
        let d = p.stopped(*clock, started, HZ);
        assert!(!p.take_due(*clock + d.delay_s * HZ - 1), "due early");
        *clock += d.delay_s * HZ;
        assert!(p.take_due(*clock), "not due on time");
        assert!(!p.take_due(*clock), "due twice");
        d
    }

    #[test]
    fn a_crash_loop_backs_off_doubling_up_to_the_cap_and_is_counted() {
        let mut p = RestartPolicy::new();
        let mut clock = 5 * HZ;

        let delays: alloc::vec::Vec<(u64, u32)> = (0..9)
            .map(|_| {
                let d = crash_after(&mut p, &mut clock, 2);
                (d.delay_s, d.restart)
            })
            .collect();

        assert_eq!(
            delays,
            [
                (1, 1),
                (2, 2),
                (4, 3),
                (8, 4),
                (16, 5),
                (32, 6),
                (60, 7),
                (60, 8),
                (60, 9)
            ]
        );
        assert_eq!(p.restarts(), 9);
    }

    #[test]
    fn a_run_that_stayed_up_resets_the_back_off_but_not_the_count() {
        let mut p = RestartPolicy::new();
        let mut clock = 0;
        for _ in 0..4 {
            crash_after(&mut p, &mut clock, 1);
        }

        let after_stable = crash_after(&mut p, &mut clock, STABLE_S);
        let next = crash_after(&mut p, &mut clock, 1);

        assert_eq!(after_stable.delay_s, FIRST_DELAY_S);
        assert_eq!(next.delay_s, 2 * FIRST_DELAY_S);
        assert_eq!(next.restart, 6);
    }

    #[test]
    fn nothing_is_due_before_a_stop() {
        let mut p = RestartPolicy::new();

        assert_eq!(p.due(), None);
        assert!(!p.take_due(u64::MAX));
        assert_eq!(p.restarts(), 0);
    }

    #[test]
    fn the_due_time_is_the_stop_plus_the_delay_on_the_counter() {
        let mut p = RestartPolicy::new();

        let d = p.stopped(10_000, 9_000, HZ);

        assert_eq!(d.delay_s, 1);
        assert_eq!(p.due(), Some(10_000 + HZ));
    }
}
