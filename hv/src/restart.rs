//! Restart policies: what happens when a partition stops on its own.
//!
//! Every partition has one, from its plan (`LifecyclePlan`: `never`,
//! `on-crash` or `always`, with a limit of restarts in a row); the
//! management partition's is fixed: always, no limit. A crash (its
//! watchdog ran out, a vCPU hung, a fatal fault) is restarted by
//! `on-crash` and `always`, a guest power-off (PSCI SYSTEM_OFF) by
//! `always` only; a guest's SYSTEM_RESET is a reboot, not a stop, and is
//! not the policy's business. A power-off after a graceful shutdown the
//! operator asked for is never restarted (the caller does not ask).
//!
//! Restarts back off: the delay doubles from [`FIRST_DELAY_S`] up to
//! [`MAX_DELAY_S`] and falls back to the first delay once a run lasted
//! [`STABLE_S`]; a stable run (or a start by the operator) also ends the
//! "in a row" count the limit applies to. Every restart is counted.
//!
//! Pure state, no clock of its own: the caller passes counter values and the
//! counter frequency, so the host tests drive it with a fake clock. The core
//! decides here; the idle loop of the partition's vCPU 0's CPU wakes at
//! [`RestartPolicy::due`] and the core's `exit::idle_work` starts the
//! partition once it is due.

use pinfold_config::{LifecyclePlan, RestartMode};

/// Delay before the first restart, and after a run of [`STABLE_S`].
pub const FIRST_DELAY_S: u64 = 1;
/// The back-off's ceiling.
pub const MAX_DELAY_S: u64 = 60;
/// A run at least this long resets the back-off and the count in a row.
pub const STABLE_S: u64 = 60;

/// Why a partition stopped on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The guest powered off (PSCI SYSTEM_OFF), or reset when it is the
    /// management partition.
    PowerOff,
    /// Watchdog, hung vCPU, fatal fault.
    Crash,
}

/// What the policy decided when the partition stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Seconds until the restart.
    pub delay_s: u64,
    /// Which restart this will be (1 for the first).
    pub restart: u32,
}

/// The policy's answer to a stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Restart(Decision),
    /// It stays down: its mode does not restart after this cause.
    Stay,
    /// It stays down: `.0` restarts in a row were made already.
    LimitReached(u32),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartPolicy {
    mode: RestartMode,
    /// Restarts in a row allowed (0 = no limit).
    limit: u32,
    /// The delay the next stop gets, unless the run was stable.
    next_delay_s: u64,
    /// Restarts decided since the hypervisor started.
    restarts: u32,
    /// Restarts decided since the last stable run or operator start.
    in_a_row: u32,
    /// Counter value at which the pending restart is due.
    due: Option<u64>,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        Self::new()
    }
}

impl RestartPolicy {
    /// The management partition's policy: always, no limit.
    pub const fn new() -> Self {
        RestartPolicy {
            mode: RestartMode::Always,
            limit: 0,
            next_delay_s: FIRST_DELAY_S,
            restarts: 0,
            in_a_row: 0,
            due: None,
        }
    }

    /// The policy a partition's plan asks for (the management partition's
    /// is [`RestartPolicy::new`] whatever its plan says).
    pub fn from_plan(plan: &LifecyclePlan, management: bool) -> Self {
        if management {
            return Self::new();
        }
        RestartPolicy {
            mode: plan.restart,
            limit: plan.restart_limit,
            ..Self::new()
        }
    }

    pub fn mode(&self) -> RestartMode {
        self.mode
    }

    /// The partition stopped (`cause`) at counter `now`, having started at
    /// `started_at` (`freq` ticks per second): schedule its restart, or not.
    pub fn stopped(&mut self, cause: Cause, now: u64, started_at: u64, freq: u64) -> Verdict {
        let ran_s = now.saturating_sub(started_at) / freq.max(1);
        if ran_s >= STABLE_S {
            self.next_delay_s = FIRST_DELAY_S;
            self.in_a_row = 0;
        }
        let wanted = match (self.mode, cause) {
            (RestartMode::Never, _) => false,
            (RestartMode::OnCrash, Cause::Crash) => true,
            (RestartMode::OnCrash, Cause::PowerOff) => false,
            (RestartMode::Always, _) => true,
        };
        if !wanted {
            return Verdict::Stay;
        }
        if self.limit != 0 && self.in_a_row >= self.limit {
            return Verdict::LimitReached(self.in_a_row);
        }
        let delay_s = self.next_delay_s;
        self.next_delay_s = (delay_s * 2).min(MAX_DELAY_S);
        self.restarts = self.restarts.saturating_add(1);
        self.in_a_row = self.in_a_row.saturating_add(1);
        self.due = Some(now.saturating_add(delay_s.saturating_mul(freq)));
        Verdict::Restart(Decision {
            delay_s,
            restart: self.restarts,
        })
    }

    /// The operator started (or stopped) it: no pending restart, and the
    /// count in a row and the back-off start over.
    pub fn operator(&mut self) {
        self.due = None;
        self.in_a_row = 0;
        self.next_delay_s = FIRST_DELAY_S;
    }

    /// A first start held back until counter value `at` (the boot plan's
    /// autostart while the manager restores a stored configuration).
    pub fn hold(&mut self, at: u64) {
        self.due = Some(at);
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

    /// Count on from `restarts` made by the policy of the partition this
    /// one replaces (a change at run time keeps the count).
    pub fn carry_restarts(&mut self, restarts: u32) {
        self.restarts = restarts;
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
        let Verdict::Restart(d) = p.stopped(Cause::Crash, *clock, started, HZ) else {
            panic!("not restarted");
        };
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

        let Verdict::Restart(d) = p.stopped(Cause::Crash, 10_000, 9_000, HZ) else {
            panic!("not restarted");
        };

        assert_eq!(d.delay_s, 1);
        assert_eq!(p.due(), Some(10_000 + HZ));
    }

    fn plan(restart: RestartMode, restart_limit: u32) -> LifecyclePlan {
        LifecyclePlan {
            restart,
            restart_limit,
            ..LifecyclePlan::default()
        }
    }

    #[test]
    fn never_stays_down_after_a_crash_and_a_power_off() {
        let mut p = RestartPolicy::from_plan(&plan(RestartMode::Never, 0), false);

        assert_eq!(p.stopped(Cause::Crash, 10 * HZ, 0, HZ), Verdict::Stay);
        assert_eq!(p.stopped(Cause::PowerOff, 20 * HZ, 0, HZ), Verdict::Stay);
        assert_eq!(p.due(), None);
        assert_eq!(p.restarts(), 0);
    }

    #[test]
    fn on_crash_restarts_a_crash_but_not_a_power_off() {
        let mut p = RestartPolicy::from_plan(&plan(RestartMode::OnCrash, 0), false);

        assert_eq!(p.stopped(Cause::PowerOff, 10 * HZ, 0, HZ), Verdict::Stay);
        assert_eq!(
            p.stopped(Cause::Crash, 10 * HZ, 0, HZ),
            Verdict::Restart(Decision {
                delay_s: 1,
                restart: 1
            })
        );
        assert_eq!(p.due(), Some(11 * HZ));
    }

    #[test]
    fn always_restarts_a_power_off_too() {
        let mut p = RestartPolicy::from_plan(&plan(RestartMode::Always, 0), false);

        assert!(matches!(
            p.stopped(Cause::PowerOff, 10 * HZ, 0, HZ),
            Verdict::Restart(_)
        ));
    }

    #[test]
    fn the_limit_counts_restarts_in_a_row_and_a_stable_run_ends_the_row() {
        let mut p = RestartPolicy::from_plan(&plan(RestartMode::OnCrash, 3), false);
        let mut clock = 0;
        for _ in 0..3 {
            crash_after(&mut p, &mut clock, 1);
        }

        assert_eq!(
            p.stopped(Cause::Crash, clock + HZ, clock, HZ),
            Verdict::LimitReached(3)
        );
        assert_eq!(p.due(), None);
        // Started by hand, it stays up a minute, then crashes: allowed again.
        p.operator();
        assert!(matches!(
            p.stopped(Cause::Crash, clock + STABLE_S * HZ, clock, HZ),
            Verdict::Restart(Decision { restart: 4, .. })
        ));
    }

    #[test]
    fn an_operator_start_clears_a_pending_restart() {
        let mut p = RestartPolicy::from_plan(&plan(RestartMode::Always, 0), false);
        p.stopped(Cause::Crash, 10 * HZ, 0, HZ);

        p.operator();

        assert_eq!(p.due(), None);
        assert!(!p.take_due(u64::MAX));
    }

    #[test]
    fn the_management_partition_always_restarts_whatever_its_plan_says() {
        let mut p = RestartPolicy::from_plan(&plan(RestartMode::Never, 1), true);

        for i in 0..5 {
            assert!(matches!(
                p.stopped(
                    Cause::PowerOff,
                    (i + 1) * 100 * HZ,
                    i * 100 * HZ + 99 * HZ,
                    HZ
                ),
                Verdict::Restart(_)
            ));
        }
    }
}
