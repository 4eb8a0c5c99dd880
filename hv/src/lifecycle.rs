//! A partition's life cycle: its state with the time of the last change
//! (stopped, starting, running, shutting down, stopping, crashed), its last
//! crash, its restart policy (`restart`), its emulated SBSA watchdog
//! (`wdog`) and the per-CPU checks that find a crashed or hung guest.
//!
//! One field of `Partition` ([`Lifecycle`]) holds all of it: the state and
//! its time as atomics (read by anyone, lock-free), a pending restart's due
//! time as an atomic (the idle loop's check), and the rest under the
//! partition's own lock (`LockPath::Management`: guest watchdog accesses,
//! the EL2 timer's checks and management calls; never shared between
//! partitions, never on a hot path).
//!
//! Time: every CPU that runs a vCPU of a partition with a `watchdog_s` (or
//! a pending graceful shutdown) arms its EL2 timer (CNTHP, PPI 26, the idle
//! loop's wake-up too) every [`CHECK_PERIOD_DIV`]th of a second while the
//! partition is up ([`System::wakeup_on`]); when it fires, [`on_timer`]
//! checks on this CPU only:
//! - the loaded vCPU: a HW-linked timer PPI (virtual or EL1 physical) still
//!   pending, not active, in a list register: if it stays so for
//!   `watchdog_s`, the vCPU is hung (interrupts masked, spinning) and the
//!   partition crashes ("vCPU N hung"); this also catches one hung vCPU of a
//!   partition whose other vCPUs still feed the watchdog;
//! - on the partition's vCPU 0's CPU: the watchdog (WS1 -> crashed,
//!   "watchdog"; WS0 raises its SPI) and the graceful shutdown's deadline
//!   (-> stopped by force).
//!
//! Nothing here runs on the vtimer path: the timer PPI handler is unchanged;
//! the list registers are read only from the EL2 timer's interrupt.

use crate::exit::{Hw, Lrs};
use crate::gpio::{Pl061, POWER_LINE};
use crate::lockstat::{CountedLock, LockPath, LockStat};
use crate::partition::Partition;
use crate::percpu::{CpuState, REQ_STOP};
use crate::restart::{Cause, RestartPolicy, Verdict};
use crate::system::System;
use crate::wdog::{Frame, SbsaWatchdog, Signal};
use alloc::string::String;
use core::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use pinfold_abi::{EventKind, PartitionState};
use pinfold_config::PartitionPlan;
use pinfold_vboard::{GUEST_GPIO_INTID, GUEST_WDOG_INTID, PPI_PTIMER, PPI_VTIMER};

/// The checks run every 1/CHECK_PERIOD_DIV s on a CPU that needs them.
pub const CHECK_PERIOD_DIV: u64 = 2;
/// Until the guest's driver writes its own offset, the watchdog's first
/// WS1 comes at least this long after entry (twice the offset the
/// hypervisor arms it with): a kernel booting on a loaded host is not a
/// crash.
pub const BOOT_GRACE_S: u64 = 30;

/// Lifecycle state of a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum State {
    Stopped = 0,
    Running = 1,
    Stopping = 2,
    /// Images loaded, its boot vCPU not yet in the guest.
    Starting = 3,
    /// The power button was pressed; stopped by force at the deadline.
    ShuttingDown = 4,
    /// Watchdog, hung vCPU or fatal fault; stopped.
    Crashed = 5,
}

impl State {
    fn from_u8(v: u8) -> State {
        match v {
            1 => State::Running,
            2 => State::Stopping,
            3 => State::Starting,
            4 => State::ShuttingDown,
            5 => State::Crashed,
            _ => State::Stopped,
        }
    }

    /// The ABI's name for it.
    pub fn abi(self) -> PartitionState {
        match self {
            State::Stopped => PartitionState::Stopped,
            State::Running => PartitionState::Running,
            State::Stopping => PartitionState::Stopping,
            State::Starting => PartitionState::Starting,
            State::ShuttingDown => PartitionState::ShuttingDown,
            State::Crashed => PartitionState::Crashed,
        }
    }

    /// Its vCPUs may run (started, not yet stopped).
    pub fn is_up(self) -> bool {
        matches!(self, State::Starting | State::Running | State::ShuttingDown)
    }
}

/// A crash: counter value and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Crash {
    pub at: u64,
    pub reason: String,
}

/// What is under the partition's lifecycle lock.
pub struct LifeInner {
    pub policy: RestartPolicy,
    pub last_crash: Option<Crash>,
    pub wdog: SbsaWatchdog,
    /// Counter value at which a graceful shutdown becomes a hard stop.
    pub shutdown_due: Option<u64>,
    /// The WS0 level last given to the distributor.
    pub wdog_line: bool,
    /// The PL061 whose line 3 is the power button.
    pub gpio: Pl061,
    /// Its interrupt level last given to the distributor.
    pub gpio_line: bool,
    /// The button is held down (released at the next check).
    pub button_down: bool,
}

impl LifeInner {
    /// The GPIO's interrupt level if it changed since last given.
    fn gpio_change(&mut self) -> Option<bool> {
        let level = self.gpio.irq_level();
        (level != self.gpio_line).then(|| {
            self.gpio_line = level;
            level
        })
    }
}

/// One partition's lifecycle state (the one field of `Partition`).
pub struct Lifecycle {
    state: AtomicU8,
    /// Counter value of the last state change.
    since: AtomicU64,
    /// Counter value at which a restart is due (0 = none), mirrored from
    /// the policy for the idle loop's lock-free check.
    restart_due: AtomicU64,
    /// `watchdog_s` of its plan (0 = no watchdog, no hang check).
    pub watchdog_s: u32,
    pub inner: CountedLock<LifeInner>,
}

impl Lifecycle {
    pub fn new(plan: &PartitionPlan, stat: &'static LockStat) -> Self {
        Lifecycle {
            state: AtomicU8::new(State::Stopped as u8),
            since: AtomicU64::new(0),
            restart_due: AtomicU64::new(0),
            watchdog_s: plan.lifecycle.watchdog_s,
            inner: CountedLock::new(
                LifeInner {
                    policy: RestartPolicy::from_plan(&plan.lifecycle, plan.management),
                    last_crash: None,
                    wdog: SbsaWatchdog::new(),
                    shutdown_due: None,
                    wdog_line: false,
                    gpio: Pl061::new(),
                    gpio_line: false,
                    button_down: false,
                },
                stat,
            ),
        }
    }

    pub fn state(&self) -> State {
        State::from_u8(self.state.load(Ordering::Acquire))
    }

    /// Change state at counter value `now` (a change to the same state
    /// keeps its time).
    pub fn set(&self, s: State, now: u64) {
        if self.state.swap(s as u8, Ordering::AcqRel) != s as u8 {
            self.since.store(now, Ordering::Release);
        }
    }

    /// Counter value of the last state change (0: none since boot).
    pub fn since(&self) -> u64 {
        self.since.load(Ordering::Acquire)
    }

    /// A pending restart's due time.
    pub fn restart_due(&self) -> Option<u64> {
        match self.restart_due.load(Ordering::Acquire) {
            0 => None,
            at => Some(at),
        }
    }

    fn mirror_due(&self, inner: &LifeInner) {
        let due = inner.policy.due().map_or(0, |at| at.max(1));
        self.restart_due.store(due, Ordering::Release);
    }

    /// What a changed partition (`runtime`) keeps of the lifecycle of the
    /// one it replaces, which is stopped or crashed: the state and its
    /// time, the restart count and the last crash. No restart stays
    /// pending (a change is an operator's act); the policy, watchdog and
    /// GPIO are this one's, from reset.
    pub fn carry_over(&self, old: &Lifecycle) {
        self.state
            .store(old.state.load(Ordering::Acquire), Ordering::Release);
        self.since.store(old.since(), Ordering::Release);
        let (restarts, crash) = {
            let o = old.inner.lock(LockPath::Management);
            (o.policy.restarts(), o.last_crash.clone())
        };
        let mut inner = self.inner.lock(LockPath::Management);
        inner.policy.carry_restarts(restarts);
        inner.last_crash = crash;
        self.mirror_due(&inner);
    }

    /// Restarts its policy made since the hypervisor started.
    pub fn restarts(&self) -> u32 {
        self.inner.lock(LockPath::Management).policy.restarts()
    }
}

/// A per-CPU record of how long the loaded vCPU's timer interrupt has
/// stayed pending (in `CpuState`, own CPU only).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HangWatch {
    pending_since: Option<u64>,
}

impl HangWatch {
    /// One sample at `now`: is a timer interrupt pending and
    /// unacknowledged? True when it has been for `limit` ticks.
    pub fn observe(&mut self, stuck: bool, now: u64, limit: u64) -> bool {
        if !stuck {
            self.pending_since = None;
            return false;
        }
        let since = *self.pending_since.get_or_insert(now);
        now.saturating_sub(since) >= limit
    }

    pub fn reset(&mut self) {
        self.pending_since = None;
    }
}

/// The timer PPIs whose pending-and-unacknowledged state means a hang.
const TIMER_PPIS: u32 = (1 << PPI_VTIMER) | (1 << PPI_PTIMER);

/// Seconds the boot plan's autostart partitions wait for the manager to
/// apply the stored configuration (a plan whose management partition
/// names a `config_store`) before they start anyway.
pub const HOLD_S: u64 = 60;

impl System {
    /// Whether the plan's management partition keeps the configuration at
    /// a store: then the other autostart partitions wait for the manager.
    pub fn has_config_store(&self) -> bool {
        self.partitions()
            .iter()
            .any(|p| p.plan.management && p.plan.config_store.is_some())
    }

    /// Boot: `p`'s autostart held until counter value `at`, when the idle
    /// loop of its vCPU 0's CPU starts it (as a due restart) unless the
    /// manager released it first ([`System::release_held`]). The caller
    /// kicks that CPU so it arms its wake-up.
    pub fn hold_autostart(&self, p: &Partition, at: u64) {
        let mut inner = p.life.inner.lock(LockPath::Management);
        inner.policy.hold(at);
        p.life.mirror_due(&inner);
        self.held.store(true, Ordering::Release);
    }

    /// CONFIG_APPLIED: the held partitions that still exist, are stopped,
    /// never ran and say `autostart` start now (a changed one too: its
    /// hold went with its old entry); how many. Once: later calls start
    /// nothing.
    pub fn release_held(&self, hw: &mut impl Hw, me: usize) -> u32 {
        if !self.held.swap(false, Ordering::AcqRel) {
            return 0;
        }
        let mut started = 0;
        for p in self.partitions() {
            if p.plan.management
                || !p.plan.autostart
                || p.state() != State::Stopped
                || p.boot_count.load(Ordering::Acquire) != 0
            {
                continue;
            }
            self.operator_lifecycle(&p);
            if self.start_partition(&p, hw, me).is_ok() {
                started += 1;
            }
        }
        started
    }

    /// `p` crashed (`reason`): recorded, every vCPU stopped (this CPU's
    /// too, through its own request bits: the interrupt or trap it is in
    /// parks it on the way out), state crashed, then its restart policy.
    pub fn crash_partition(&self, p: &Partition, hw: &mut impl Hw, me: usize, reason: &str) {
        if !p.state().is_up() {
            return;
        }
        let now = hw.now();
        hw.log(format_args!("partition {}: crashed: {reason}", p.name));
        p.life.inner.lock(LockPath::Management).last_crash = Some(Crash {
            at: now,
            reason: String::from(reason),
        });
        p.set_state(State::Stopping, now);
        for s in &p.vcpus {
            if s.pcpu == me {
                self.cpus[me].post_request(REQ_STOP);
            } else {
                self.request(hw, me, s.pcpu, REQ_STOP);
            }
        }
        self.reset_pci(p, hw, "crash");
        p.set_state(State::Crashed, now);
        self.event(
            hw,
            EventKind::State,
            Some(p),
            format_args!("crashed ({reason})"),
        );
        self.after_stop(p, hw, me, Cause::Crash, reason);
    }

    /// `p` stopped on its own (`why`): its restart policy decides, and a
    /// restart is carried out by the idle loop of its vCPU 0's CPU
    /// (`exit::idle_work`), which is kicked to arm its wake-up.
    pub fn after_stop(&self, p: &Partition, hw: &mut impl Hw, me: usize, cause: Cause, why: &str) {
        let now = hw.now();
        let mut inner = p.life.inner.lock(LockPath::Management);
        let verdict = inner.policy.stopped(
            cause,
            now,
            p.started_at.load(Ordering::Relaxed),
            hw.counter_frequency(),
        );
        p.life.mirror_due(&inner);
        drop(inner);
        match verdict {
            Verdict::Restart(d) => {
                hw.report(format_args!(
                    "{} stopped ({why}): restarting in {} s (restart #{})",
                    p.name, d.delay_s, d.restart
                ));
                self.event(
                    hw,
                    EventKind::Restart,
                    Some(p),
                    format_args!(
                        "restart policy: restarting in {} s (restart #{})",
                        d.delay_s, d.restart
                    ),
                );
                self.kick(hw, me, p.vcpus[0].pcpu);
            }
            Verdict::LimitReached(n) => {
                hw.report(format_args!(
                    "{} stopped ({why}): not restarted, {n} restarts in a row (restart_limit)",
                    p.name
                ));
                self.event(
                    hw,
                    EventKind::Restart,
                    Some(p),
                    format_args!(
                        "restart policy: not restarted, {n} restarts in a row (restart_limit)"
                    ),
                );
            }
            Verdict::Stay => {}
        }
    }

    /// An operator's start or stop: no pending restart, the policy's
    /// count in a row starts over.
    pub fn operator_lifecycle(&self, p: &Partition) {
        let mut inner = p.life.inner.lock(LockPath::Management);
        inner.policy.operator();
        p.life.mirror_due(&inner);
    }

    /// Take `p`'s pending restart if it is due at `now`.
    pub fn take_restart_due(&self, p: &Partition, now: u64) -> bool {
        match p.life.restart_due() {
            Some(at) if now >= at => {}
            _ => return false,
        }
        let mut inner = p.life.inner.lock(LockPath::Management);
        let due = inner.policy.take_due(now);
        p.life.mirror_due(&inner);
        due
    }

    /// The counter value at which a restart of the partition whose vCPU 0
    /// runs on CPU `cpu` is due (a cold path: the idle loop and the EL2
    /// timer; it looks the partition up in its slot).
    pub fn restart_due_on(&self, cpu: usize) -> Option<u64> {
        let p = self.partition_on(cpu)?;
        if p.vcpus[0].pcpu != cpu {
            return None;
        }
        p.life.restart_due()
    }

    /// When CPU `cpu`'s EL2 timer must fire next: a due restart, or the
    /// next check while the partition assigned to it is up with a watchdog
    /// or a pending shutdown (cold: the idle loop and the EL2 timer).
    pub fn wakeup_on(&self, cpu: &CpuState, now: u64, freq: u64) -> Option<u64> {
        let p = self.partition_on(cpu.index)?;
        let restart = (p.vcpus[0].pcpu == cpu.index)
            .then(|| p.life.restart_due())
            .flatten();
        let check = (p.state().is_up() && needs_checks(&p))
            .then(|| now.saturating_add((freq / CHECK_PERIOD_DIV).max(1)));
        match (restart, check) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Start `p`'s lifecycle for a new boot at counter `now`: the
    /// watchdog enabled with an offset of `watchdog_s`, at least half of
    /// [`BOOT_GRACE_S`] (WS1 comes two offsets later unless the guest's
    /// driver takes over), no shutdown pending.
    pub fn lifecycle_boot(&self, p: &Partition, now: u64, freq: u64) {
        let mut inner = p.life.inner.lock(LockPath::Management);
        inner.shutdown_due = None;
        inner.wdog = SbsaWatchdog::new();
        inner.wdog_line = false;
        inner.gpio = Pl061::new();
        inner.gpio_line = false;
        inner.button_down = false;
        if p.life.watchdog_s != 0 {
            let first_s = u64::from(p.life.watchdog_s).max(BOOT_GRACE_S / 2);
            inner.wdog.arm(now, first_s.saturating_mul(freq));
        }
    }

    /// Press `p`'s power button (its PL061's line 3 goes high, and back
    /// low at the next check): shutting down, stopped by force after its
    /// `shutdown_timeout_s` (checked on its vCPU 0's CPU). `cpu` is the
    /// calling CPU (the GPIO's interrupt is delivered from it).
    pub fn press_power_button(&self, p: &Partition, hw: &mut impl Hw, cpu: &mut CpuState) {
        let me = cpu.index;
        let now = hw.now();
        let timeout = u64::from(p.plan.lifecycle.shutdown_timeout_s);
        let line = {
            let mut inner = p.life.inner.lock(LockPath::Management);
            inner.shutdown_due =
                Some(now.saturating_add(timeout.saturating_mul(hw.counter_frequency())));
            inner.gpio.set_input(POWER_LINE, true);
            inner.button_down = true;
            inner.gpio_change()
        };
        if let Some(level) = line {
            crate::exit::emulated_line(self, cpu, hw, p, GUEST_GPIO_INTID, level);
        }
        p.set_state(State::ShuttingDown, now);
        hw.log(format_args!(
            "partition {}: power button pressed (hard stop in {timeout} s)",
            p.name
        ));
        self.event(
            hw,
            EventKind::State,
            Some(p),
            format_args!("shutting down: power button pressed (stopped by force in {timeout} s)"),
        );
        // Its vCPU 0's CPU arms its checks when kicked.
        self.kick(hw, me, p.vcpus[0].pcpu);
    }
}

fn needs_checks(p: &Partition) -> bool {
    p.life.watchdog_s != 0 || p.state() == State::ShuttingDown
}

/// A guest access to its watchdog's `frame` at `offset` (any vCPU).
#[allow(clippy::too_many_arguments)]
pub fn wdog_access(
    p: &Partition,
    hw: &mut impl Hw,
    frame: Frame,
    offset: u64,
    width: u8,
    write: bool,
    value: u64,
) -> (u64, Option<bool>) {
    let now = hw.now();
    let mut inner = p.life.inner.lock(LockPath::Management);
    let result = if write {
        inner.wdog.write(frame, offset, width, value, now);
        0
    } else {
        inner.wdog.read(frame, offset, width)
    };
    let level = inner.wdog.irq_level();
    let changed = (level != inner.wdog_line).then(|| {
        inner.wdog_line = level;
        level
    });
    (result, changed)
}

/// A guest access to its PL061 (any vCPU); the interrupt level if it
/// changed.
pub fn gpio_access(p: &Partition, offset: u64, write: bool, value: u64) -> (u64, Option<bool>) {
    let mut inner = p.life.inner.lock(LockPath::Management);
    let result = if write {
        inner.gpio.write(offset, value as u32);
        0
    } else {
        u64::from(inner.gpio.read(offset))
    };
    (result, inner.gpio_change())
}

/// What a check found on this CPU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    Nothing,
    /// An emulated device's interrupt line changed: (INTID, level).
    Line(u32, bool),
    Crash(String),
    ShutdownTimeout,
}

/// The EL2 timer fired on this CPU (in a guest or idle): the checks of the
/// module comment, then the timer armed again.
pub fn on_timer(sys: &System, cpu: &mut CpuState, hw: &mut impl Hw) {
    let now = hw.now();
    let freq = hw.counter_frequency();
    // Cold (every 1/CHECK_PERIOD_DIV s at most): the partition pinned to
    // this CPU is looked up in its slot.
    if let (Some(id), Some(p)) = (sys.assigned(cpu.index), sys.partition_on(cpu.index)) {
        if p.index == id.partition && p.state().is_up() {
            let finding = check(sys, cpu, hw, &p, id.vcpu, now, freq);
            match finding {
                Finding::Nothing => {}
                Finding::Line(intid, level) => {
                    crate::exit::emulated_line(sys, cpu, hw, &p, intid, level)
                }
                Finding::Crash(reason) => sys.crash_partition(&p, hw, cpu.index, &reason),
                Finding::ShutdownTimeout => {
                    hw.log(format_args!(
                        "partition {}: shutdown timeout: stopped by force",
                        p.name
                    ));
                    sys.stop_partition_for(
                        &p,
                        hw,
                        cpu.index,
                        "stopped by force (shutdown timeout)",
                    );
                    sys.cpus[cpu.index].post_request(REQ_STOP);
                }
            }
        }
    }
    // A restart already due is the idle loop's to take (this interrupt
    // ends its WFI): arming the timer for the past would take this
    // interrupt again at once, for ever, and the idle loop would never run.
    hw.set_wakeup(sys.wakeup_on(cpu, now, freq).filter(|&at| at > now));
}

/// The checks for vCPU `v` of `p`, on its own CPU.
#[allow(clippy::too_many_arguments)]
pub fn check(
    _sys: &System,
    cpu: &mut CpuState,
    hw: &mut impl Hw,
    p: &Partition,
    v: usize,
    now: u64,
    freq: u64,
) -> Finding {
    let limit = u64::from(p.life.watchdog_s).saturating_mul(freq);
    if p.life.watchdog_s != 0 && cpu.loaded.as_ref().is_some_and(|l| l.id.vcpu == v) {
        let bits = cpu.lrs.private_bits(&Lrs(hw));
        let stuck = bits.pending & !bits.active & TIMER_PPIS != 0;
        if cpu.hang.observe(stuck, now, limit) {
            cpu.hang.reset();
            return Finding::Crash(alloc::format!(
                "vCPU {v} hung (timer interrupt pending for {} s)",
                p.life.watchdog_s
            ));
        }
    } else {
        cpu.hang.reset();
    }
    if v != 0 {
        return Finding::Nothing;
    }
    let mut inner = p.life.inner.lock(LockPath::Management);
    if inner.shutdown_due.is_some_and(|due| now >= due) {
        inner.shutdown_due = None;
        return Finding::ShutdownTimeout;
    }
    if inner.button_down {
        inner.button_down = false;
        inner.gpio.set_input(POWER_LINE, false);
        if let Some(level) = inner.gpio_change() {
            return Finding::Line(GUEST_GPIO_INTID, level);
        }
    }
    match inner.wdog.poll(now) {
        Signal::Ws1 => Finding::Crash(String::from("watchdog")),
        Signal::Ws0 | Signal::None => {
            let level = inner.wdog.irq_level();
            if level != inner.wdog_line {
                inner.wdog_line = level;
                Finding::Line(GUEST_WDOG_INTID, level)
            } else {
                Finding::Nothing
            }
        }
    }
}

/// The emulated SPI of the watchdog, for the distributor's list.
pub const WDOG_INTID: u32 = GUEST_WDOG_INTID;
