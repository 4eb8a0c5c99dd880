//! The workload section: a message-passing benchmark operators know, run in
//! a Linux partition and bare, in instructions per operation under
//! `-icount`.
//!
//! The workload is `/bin/pipebench` of the test initramfs
//! (tools/guest-rootfs/pipebench), the shape of `perf bench sched pipe`: two
//! processes ping-pong a 4-byte word over two pipes; one operation is one
//! round trip (two writes, two reads, two hand-overs). /init runs it when
//! the command line says `pinfold.workload=pipe:N`, which only the plans
//! below do. It reads the virtual counter around the timed loops, so under
//! `-icount shift=0` the counter delta x 16 is every instruction executed in
//! that window on every CPU: guest user and kernel, and the hypervisor's
//! EL2 code in the partition runs.
//!
//! Two setups: one vCPU (both processes share it: no IPI, the hypervisor
//! sees only the guest's timer tick) and two vCPUs on two CPUs (parent
//! pinned to CPU 0, child to CPU 1: every hand-over wakes the other CPU
//! with an IPI, which in a partition traps to EL2 on the sender and is
//! injected on the receiver, whose WFI traps too). Each boots the same
//! kernel, initramfs and bootargs as the only partition of its plan and bare
//! (QEMU `-kernel` at EL1, `-smp` the vCPU count, the partition's RAM size,
//! a DTB of the partition's shape from the hypervisor's own generator), as
//! the Linux row does.

use std::fmt::Write as _;
use std::path::Path;

use serde_json::{json, Value};

use pinfold_hv::dtb::{build_guest_dtb, GuestDtbSpec};

use super::linux::LinuxGuest;
use super::table::Repeat;
use super::{bad_log, icount, run_until, Runs, Section, ICOUNT_RUNS, LINUX_DEADLINE};
use crate::build::Builder;
use crate::error::{IoContext, XtaskError};
use crate::harness::Line;
use crate::qemu::{bare_command, qemu_command, Board};
use crate::Workspace;

/// The workload's result line (after any partition prefix).
pub const RESULT_MARKER: &str = "PINFOLD-WORKLOAD pipe:";
/// The workload's (or /init's, on failure) last line.
pub const END_MARKER: &str = "PINFOLD-WORKLOAD end";
/// Seeds for the bare DTB, as the Linux row's (QEMU `-seed` rewrites them).
const BARE_KASLR_SEED: u64 = 0x5049_4e46_4f4c_4442;
const BARE_RNG_SEED: [u8; 32] = [0x42; 32];

/// One configuration of the workload: a plan and what the guest must see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Setup {
    /// JSON key.
    pub id: &'static str,
    pub label: &'static str,
    /// The plan (one Linux partition) whose bootargs ask for the workload.
    pub plan: &'static str,
    /// Output image name under target/pinfold.
    pub image: &'static str,
    pub vcpus: u32,
    /// The guest's `placement=` on this many CPUs.
    pub placement: &'static str,
}

/// The setups, in report order.
pub const SETUPS: [Setup; 2] = [
    Setup {
        id: "pipe_1vcpu",
        label: "1 vCPU (both processes on it)",
        plan: "vm-configs/qemu-virt/bench-pipe-1cpu.toml",
        image: "bench-pipe-1cpu.bin",
        vcpus: 1,
        placement: "shared",
    },
    Setup {
        id: "pipe_2vcpu",
        label: "2 vCPUs (one process pinned each)",
        plan: "vm-configs/qemu-virt/bench-pipe-2cpu.toml",
        image: "bench-pipe-2cpu.bin",
        vcpus: 2,
        placement: "cpu0,cpu1",
    },
];

/// What one boot's workload printed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WorkloadRun {
    pub loops: u64,
    pub warmup: u64,
    pub cpus: u64,
    pub placement: String,
    pub cntfrq: u64,
    pub cntvct_start: u64,
    pub cntvct_end: u64,
    pub mono_start_ns: u64,
    pub mono_end_ns: u64,
    /// idle + iowait jiffies of /proc/stat (all CPUs) around the window.
    pub idle_start: u64,
    pub idle_end: u64,
    /// Arch timer interrupts and IPIs over the window, all CPUs.
    pub timer_irqs: u64,
    pub ipis: u64,
    /// The end line's `status=` (the child's wait status, 0 when clean).
    pub status: String,
}

impl WorkloadRun {
    /// Reads the workload's lines among `lines`: those of `partition`
    /// (prefixed `[name] `), or every line of a bare run when `None`.
    /// `Err` names what is missing or malformed.
    pub fn parse<'a>(
        lines: impl IntoIterator<Item = &'a str>,
        partition: Option<&str>,
    ) -> Result<Self, String> {
        let prefix = partition.map(|name| format!("[{name}] "));
        let mut result = None;
        let mut status = None;
        for line in lines {
            let text = match &prefix {
                Some(prefix) => match line.strip_prefix(prefix.as_str()) {
                    Some(rest) => rest,
                    None => continue,
                },
                None => line,
            };
            if let Some(rest) = text.trim_start().strip_prefix(RESULT_MARKER) {
                result = Some(rest.to_string());
            } else if let Some(rest) = text.trim_start().strip_prefix(END_MARKER) {
                status = Some(field(rest, "status").unwrap_or("?").to_string());
            }
        }
        let result = result.ok_or_else(|| format!("no `{RESULT_MARKER}` line"))?;
        let number = |key: &str| -> Result<u64, String> {
            let value = field(&result, key).ok_or_else(|| format!("no {key}= field"))?;
            value
                .parse()
                .map_err(|_| format!("{key}={value} is not a number"))
        };
        let run = Self {
            loops: number("loops")?,
            warmup: number("warmup")?,
            cpus: number("cpus")?,
            placement: field(&result, "placement")
                .ok_or("no placement= field")?
                .to_string(),
            cntfrq: number("cntfrq")?,
            cntvct_start: number("cntvct_start")?,
            cntvct_end: number("cntvct_end")?,
            mono_start_ns: number("mono_start_ns")?,
            mono_end_ns: number("mono_end_ns")?,
            idle_start: number("idle_start")?,
            idle_end: number("idle_end")?,
            timer_irqs: number("timer_irqs")?,
            ipis: number("ipis")?,
            status: status.ok_or_else(|| format!("no `{END_MARKER}` line"))?,
        };
        if run.loops == 0 || run.cntfrq == 0 || run.cntvct_end < run.cntvct_start {
            return Err(format!("implausible result: {run:?}"));
        }
        Ok(run)
    }

    /// Counter ticks of the timed loops.
    pub fn ticks(&self) -> u64 {
        self.cntvct_end - self.cntvct_start
    }

    /// Every instruction of the window on every CPU (virtual ns under
    /// `-icount shift=0`).
    pub fn instructions(&self) -> f64 {
        self.ticks() as f64 / self.cntfrq as f64 * super::instructions_per_second()
    }

    /// Instructions per round trip.
    pub fn per_op(&self) -> f64 {
        self.instructions() / self.loops as f64
    }

    /// CLOCK_MONOTONIC ns per round trip (what perf's usecs/op measures).
    pub fn mono_ns_per_op(&self) -> f64 {
        self.mono_end_ns.saturating_sub(self.mono_start_ns) as f64 / self.loops as f64
    }

    /// Jiffies (USER_HZ, 10 ms) some CPU was idle during the window, summed.
    pub fn idle_jiffies(&self) -> u64 {
        self.idle_end.saturating_sub(self.idle_start)
    }

    /// Why this run does not count, if it does not.
    pub fn problem(&self, setup: &Setup) -> Option<String> {
        if self.status != "0" {
            return Some(format!("the workload ended with status={}", self.status));
        }
        if self.cpus != u64::from(setup.vcpus) || self.placement != setup.placement {
            return Some(format!(
                "the guest saw cpus={} placement={}, expected cpus={} placement={}",
                self.cpus, self.placement, setup.vcpus, setup.placement
            ));
        }
        None
    }
}

/// `x` with `decimals` decimals and its integer part grouped by thousands
/// (`14,735.8`).
pub fn fixed(x: f64, decimals: usize) -> String {
    let text = format!("{:.*}", decimals, x.abs());
    let (int, frac) = text.split_once('.').unwrap_or((&text, ""));
    let mut grouped = String::new();
    for (i, digit) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(digit);
    }
    let sign = if x < 0.0 && text.chars().any(|c| c.is_ascii_digit() && c != '0') {
        "-"
    } else {
        ""
    };
    if frac.is_empty() {
        format!("{sign}{grouped}")
    } else {
        format!("{sign}{grouped}.{frac}")
    }
}

/// The value of `key=` among the space-separated words of `text`.
fn field<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.split_whitespace()
        .find_map(|word| word.strip_prefix(key)?.strip_prefix('='))
}

/// One setup's runs.
#[derive(Debug, Clone, PartialEq)]
pub struct SetupResult {
    pub setup: Setup,
    pub runs: Runs<WorkloadRun>,
}

impl SetupResult {
    pub fn bare(&self) -> Option<f64> {
        self.runs.bare.first().map(WorkloadRun::per_op)
    }

    pub fn pinfold(&self) -> Option<f64> {
        self.runs.pinfold.first().map(WorkloadRun::per_op)
    }

    pub fn ratio(&self) -> Option<f64> {
        Some(self.pinfold()? / self.bare()?)
    }

    /// Whether the runs of each column printed exactly the same line (every
    /// counter, not only the figure).
    pub fn repeat(&self) -> Repeat {
        let same =
            |runs: &[WorkloadRun]| (runs.len() >= 2).then(|| runs.windows(2).all(|w| w[0] == w[1]));
        Repeat {
            bare: same(&self.runs.bare),
            pinfold: same(&self.runs.pinfold),
        }
    }
}

/// The section as the report shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadSection {
    pub method: String,
    pub results: Vec<SetupResult>,
    /// Wall-clock seconds the section took (builds and boots).
    pub wall_s: f64,
}

impl Section for WorkloadSection {
    fn key(&self) -> &'static str {
        "workload_pipe"
    }

    fn text(&self) -> String {
        let mut t = String::new();
        let per_op = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |x| fixed(x, 1));
        let pair = |runs: &Runs<WorkloadRun>, f: fn(&WorkloadRun) -> u64| {
            let first =
                |runs: &[WorkloadRun]| runs.first().map_or("-".into(), |r| f(r).to_string());
            format!("{}/{}", first(&runs.bare), first(&runs.pinfold))
        };
        let _ = writeln!(
            t,
            "== Workload: sched-pipe-style round trips in Linux, bare vs Pinfold partition \
             (deterministic, -icount) =="
        );
        let _ = writeln!(t, "method: {}", self.method);
        let _ = writeln!(
            t,
            "{:<34} {:>10} {:>10} {:>8} {:>7} {:>11} {:>10} {:>12} {:>8} {:>6}",
            "instructions per round trip",
            "bare",
            "Pinfold",
            "diff",
            "ratio",
            "window diff",
            "timer b/P",
            "IPIs b/P",
            "idle b/P",
            "runs"
        );
        for result in &self.results {
            let diff = |f: fn(&WorkloadRun) -> f64, decimals: usize| match (
                result.runs.bare.first(),
                result.runs.pinfold.first(),
            ) {
                (Some(b), Some(p)) => {
                    let d = f(p) - f(b);
                    format!(
                        "{}{}",
                        if d < 0.0 { "-" } else { "+" },
                        fixed(d.abs(), decimals)
                    )
                }
                _ => "-".into(),
            };
            let repeat = result.repeat();
            let _ = writeln!(
                t,
                "{:<34} {:>10} {:>10} {:>8} {:>7} {:>11} {:>10} {:>12} {:>8} {:>6}",
                result.setup.label,
                per_op(result.bare()),
                per_op(result.pinfold()),
                diff(WorkloadRun::per_op, 1),
                result
                    .ratio()
                    .map_or_else(|| "-".into(), |r| format!("{r:.4}")),
                diff(WorkloadRun::instructions, 0),
                pair(&result.runs, |r| r.timer_irqs),
                pair(&result.runs, |r| r.ipis),
                pair(&result.runs, WorkloadRun::idle_jiffies),
                if repeat.differs() {
                    "DIFFER"
                } else if repeat.bare == Some(true) && repeat.pinfold == Some(true) {
                    "same"
                } else {
                    "once"
                },
            );
        }
        let _ = writeln!(
            t,
            "(window diff: Pinfold - bare over the whole timed window, in instructions; timer, \
             IPIs: interrupts over the window, all CPUs; idle: idle jiffies, all CPUs; b/P = \
             bare/Pinfold, first run)"
        );
        if self.results.iter().any(|r| r.repeat().differs()) {
            let _ = writeln!(
                t,
                "runs: DIFFER: a figure changed between two identical runs; investigate before \
                 trusting it"
            );
        } else {
            let _ = writeln!(
                t,
                "runs: every figure identical in both runs of each column (as expected under \
                 -icount)"
            );
        }
        let _ = writeln!(
            t,
            "section wall clock: {:.1} s (its two plans built, {} boots)",
            self.wall_s,
            self.results
                .iter()
                .map(|r| r.runs.bare.len() + r.runs.pinfold.len())
                .sum::<usize>()
        );
        t
    }

    fn json(&self) -> Value {
        let run_json = |r: &WorkloadRun| {
            json!({
                "loops": r.loops,
                "warmup": r.warmup,
                "cpus": r.cpus,
                "placement": r.placement,
                "cntfrq": r.cntfrq,
                "cntvct_start": r.cntvct_start,
                "cntvct_end": r.cntvct_end,
                "ticks": r.ticks(),
                "instructions_per_op": r.per_op(),
                "mono_start_ns": r.mono_start_ns,
                "mono_end_ns": r.mono_end_ns,
                "mono_ns_per_op": r.mono_ns_per_op(),
                "idle_jiffies": r.idle_jiffies(),
                "timer_irqs": r.timer_irqs,
                "ipis": r.ipis,
                "window_instructions": r.instructions(),
                "status": r.status,
            })
        };
        let setups: Vec<Value> = self
            .results
            .iter()
            .map(|result| {
                let repeat = result.repeat();
                json!({
                    "id": result.setup.id,
                    "label": result.setup.label,
                    "plan": result.setup.plan,
                    "vcpus": result.setup.vcpus,
                    "bare_instructions_per_op": result.bare(),
                    "pinfold_instructions_per_op": result.pinfold(),
                    "difference_per_op": result.pinfold().zip(result.bare()).map(|(p, b)| p - b),
                    "ratio": result.ratio(),
                    "identical_runs": { "bare": repeat.bare, "pinfold": repeat.pinfold },
                    "runs": {
                        "bare": result.runs.bare.iter().map(run_json).collect::<Vec<_>>(),
                        "pinfold": result.runs.pinfold.iter().map(run_json).collect::<Vec<_>>(),
                    },
                })
            })
            .collect();
        json!({
            "method": self.method,
            "runs_identical": !self.results.iter().any(|r| r.repeat().differs()),
            "setups": setups,
            "wall_clock_s": self.wall_s,
        })
    }
}

/// The bare kernel's DTB: the partition's shape with `vcpus` CPUs.
fn bare_dtb(guest: &LinuxGuest, vcpus: u32) -> Result<Vec<u8>, String> {
    build_guest_dtb(&GuestDtbSpec {
        partition: &guest.name,
        ram_base: pinfold_hv::layout::GUEST_RAM_BASE,
        ram_size: guest.memory,
        vcpu_count: vcpus as usize,
        bootargs: &guest.bootargs,
        initrd: None,
        rng_seed: Some(BARE_RNG_SEED),
        kaslr_seed: Some(BARE_KASLR_SEED),
        pmu: guest.pmu,
        its: false,
        pci_probe_only: false,
        devices: &[],
        extra: &[],
        gic: pinfold_hv::vgic5::GicInterface::V3,
    })
    .map_err(|e| format!("the bare DTB: {e:?}"))
}

/// Boots one workload run and parses it.
fn boot(
    cmd: std::process::Command,
    log: &Path,
    partition: Option<&str>,
    setup: &Setup,
) -> Result<WorkloadRun, XtaskError> {
    let prefix = partition.map_or_else(String::new, |name| format!("[{name}] "));
    let lines: Vec<Line> = run_until(
        cmd,
        log,
        &format!("`{prefix}{END_MARKER}`"),
        LINUX_DEADLINE,
        |l| l.starts_with(&prefix) && l.contains(END_MARKER),
    )?;
    let run = WorkloadRun::parse(lines.iter().map(|l| l.text.as_str()), partition)
        .map_err(|why| bad_log(log, why))?;
    match run.problem(setup) {
        Some(why) => Err(bad_log(log, why)),
        None => Ok(run),
    }
}

/// Builds each setup's plan and boots it as a partition and bare,
/// `ICOUNT_RUNS` times each.
pub fn run(
    ws: &Workspace,
    builder: &mut Builder<'_>,
    logs: &Path,
) -> Result<WorkloadSection, XtaskError> {
    let started = std::time::Instant::now();
    let mut results = Vec::new();
    for setup in SETUPS {
        let built = builder.build(Path::new(setup.plan), setup.image)?;
        let config = pinfold_config::load(&ws.root.join(setup.plan))?;
        let partition = config
            .partitions
            .first()
            .ok_or_else(|| XtaskError::Provision(format!("{} has no partition", setup.plan)))?;
        let guest = LinuxGuest::from_plan(partition, &ws.root);
        let dtb = ws
            .root
            .join(format!("target/pinfold/{}-bare.dtb", setup.id));
        let blob = bare_dtb(&guest, setup.vcpus).map_err(XtaskError::Provision)?;
        std::fs::write(&dtb, blob).context(|| format!("writing {}", dtb.display()))?;
        let bare_board = Board {
            cpus: setup.vcpus,
            memory: guest.memory,
            nic: false,
            partition_nics: crate::qemu::NicSlots::NONE,
        };
        let mut runs = Runs::default();
        for n in 1..=ICOUNT_RUNS {
            // The Pinfold and the bare boot of a run go side by side, one
            // QEMU per host CPU: under -icount with sleep=off the guest's
            // time is its instruction count, whatever the host is doing, so
            // running them together changes no figure (the two runs of a
            // column are compared to show it) and halves the wall time.
            let pinfold_log = logs.join(format!("{}-pinfold-{n}.log", setup.id));
            let bare_log = logs.join(format!("{}-bare-{n}.log", setup.id));
            let (pinfold, bare) = std::thread::scope(|scope| {
                let pinfold = scope.spawn(|| {
                    boot(
                        qemu_command(&built.board, &built.image, &icount(Vec::new())),
                        &pinfold_log,
                        Some(&guest.name),
                        &setup,
                    )
                });
                let bare = boot(
                    bare_command(&bare_board, &guest.kernel, &icount(guest.bare_args(&dtb))),
                    &bare_log,
                    None,
                    &setup,
                );
                let pinfold = pinfold.join().unwrap_or_else(|_| {
                    Err(XtaskError::Provision(format!(
                        "the thread booting {} panicked",
                        pinfold_log.display()
                    )))
                });
                (pinfold, bare)
            });
            for (column, sample, runs) in [
                ("Pinfold", pinfold?, &mut runs.pinfold),
                ("bare", bare?, &mut runs.bare),
            ] {
                println!(
                    "xtask: bench: {}, {column}, run {n}/{ICOUNT_RUNS}: {:.1} instructions/op",
                    setup.id,
                    sample.per_op()
                );
                runs.push(sample);
            }
        }
        results.push(SetupResult { setup, runs });
    }
    Ok(WorkloadSection {
        method: method(&results),
        results,
        wall_s: started.elapsed().as_secs_f64(),
    })
}

/// The section's method, with the counts the runs used.
fn method(results: &[SetupResult]) -> String {
    let first = results.iter().find_map(|r| r.runs.pinfold.first());
    let (loops, warmup) = first.map_or((0, 0), |r| (r.loops, r.warmup));
    format!(
        "/bin/pipebench of the test initramfs (tools/guest-rootfs/pipebench, no libc), run by \
         /init for `pinfold.workload=pipe:N` on the command line: `perf bench sched pipe`'s \
         shape, two processes (fork) ping-ponging a 4-byte word over two pipes; one operation = \
         one round trip (parent write + read, child read + write). {warmup} untimed round trips, \
         then {loops} between two CNTVCT_EL0 reads (EL0, after an ISB); instructions/op = ticks \
         x 16 / {loops} (1 instruction = 1 virtual ns, 62.5 MHz counter), over every CPU: guest \
         user and kernel, and in a partition the hypervisor's EL2 code. 1 vCPU: both processes \
         share it, so there are no IPIs. 2 vCPUs: parent pinned to CPU 0, child to CPU 1 \
         (sched_setaffinity), so every hand-over wakes the other CPU with an SGI; a CPU waiting \
         in WFI executes nothing, so its idle time (`idle j`, /proc/stat idle+iowait jiffies \
         over the window, bare/Pinfold) is not in the figure unless every CPU idled at once \
         (sleep=off then skips time). Pinfold: the only partition of each setup's plan \
         ({}); bare: the same kernel, initramfs and bootargs by QEMU `-kernel` at EL1, `-smp` = \
         vCPUs, `-m` = the partition's RAM, a DTB of the partition's shape from the hypervisor's \
         own generator. Ratio = Pinfold / bare",
        results
            .iter()
            .map(|r| r.setup.plan)
            .collect::<Vec<_>>()
            .join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const PARTITION_LOG: &str = "\
[linux] [    0.793950] Run /init as init process
[linux] PINFOLD-WORKLOAD start name=linux cpus=1 kind=pipe loops=10000
[linuxish] PINFOLD-WORKLOAD pipe: loops=1 warmup=0 cpus=1 placement=shared cntfrq=1 cntvct_start=0 cntvct_end=1 mono_start_ns=0 mono_end_ns=1 idle_start=0 idle_end=0
[linux] PINFOLD-WORKLOAD pipe: loops=10000 warmup=100 cpus=1 placement=shared cntfrq=62500000 cntvct_start=57805657 cntvct_end=67015549 mono_start_ns=817983312 mono_end_ns=965342208 idle_start=0 idle_end=0 timer_irqs=37 ipis=0
[linux] # Executed 10000 pipe operations between two processes: 147358 usecs total, 14735 nsecs/op
[linux] PINFOLD-WORKLOAD end status=0";

    const BARE_LOG: &str = "\
PINFOLD-WORKLOAD start name=linux cpus=2 kind=pipe loops=10000
PINFOLD-WORKLOAD pipe: loops=10000 warmup=100 cpus=2 placement=cpu0,cpu1 cntfrq=62500000 cntvct_start=100 cntvct_end=12600 mono_start_ns=1000 mono_end_ns=201000 idle_start=23 idle_end=45 timer_irqs=40 ipis=20000
PINFOLD-WORKLOAD end status=0";

    fn parse(text: &str, partition: Option<&str>) -> Result<WorkloadRun, String> {
        WorkloadRun::parse(text.lines(), partition)
    }

    #[test]
    fn partition_result_is_read_under_its_own_prefix_only() {
        let run = parse(PARTITION_LOG, Some("linux")).unwrap();

        assert_eq!(run.loops, 10_000);
        assert_eq!(run.warmup, 100);
        assert_eq!(run.placement, "shared");
        assert_eq!(run.ticks(), 67_015_549 - 57_805_657);
        assert_eq!(run.status, "0");
        assert_eq!(run.idle_jiffies(), 0);
    }

    #[test]
    fn instructions_per_op_are_ticks_times_sixteen_over_loops() {
        let run = parse(PARTITION_LOG, Some("linux")).unwrap();

        // 9_209_892 ticks x 16 instructions / 10_000 round trips.
        assert!(
            (run.per_op() - 14_735.827_2).abs() < 1e-6,
            "{}",
            run.per_op()
        );
        assert!((run.mono_ns_per_op() - 14_735.889_6).abs() < 1e-6);
    }

    #[test]
    fn bare_lines_have_no_prefix_and_report_idle_jiffies() {
        let run = parse(BARE_LOG, None).unwrap();

        assert_eq!(run.cpus, 2);
        assert_eq!(run.placement, "cpu0,cpu1");
        assert_eq!(run.per_op(), 20.0);
        assert_eq!(run.idle_jiffies(), 22);
        assert_eq!(run.problem(&SETUPS[1]), None);
    }

    #[test]
    fn a_missing_end_line_or_field_is_an_error_naming_it() {
        let no_end = BARE_LOG.replace("PINFOLD-WORKLOAD end status=0", "");
        assert_eq!(
            parse(&no_end, None),
            Err("no `PINFOLD-WORKLOAD end` line".into())
        );
        let no_field = BARE_LOG.replace(" cntfrq=62500000", "");
        assert_eq!(parse(&no_field, None), Err("no cntfrq= field".into()));
        let bad = BARE_LOG.replace("loops=10000 warmup", "loops=ten warmup");
        assert_eq!(parse(&bad, None), Err("loops=ten is not a number".into()));
        assert_eq!(
            parse(BARE_LOG, Some("linux")),
            Err("no `PINFOLD-WORKLOAD pipe:` line".into())
        );
    }

    #[test]
    fn a_failed_workload_or_wrong_placement_does_not_count() {
        let failed = parse(
            &BARE_LOG.replace("end status=0", "end status=failed rc=1"),
            None,
        )
        .unwrap();
        assert_eq!(
            failed.problem(&SETUPS[1]).as_deref(),
            Some("the workload ended with status=failed")
        );
        let run = parse(BARE_LOG, None).unwrap();
        assert!(run.problem(&SETUPS[0]).is_some());
    }

    fn section(pinfold_end: u64) -> WorkloadSection {
        let bare = parse(BARE_LOG, None).unwrap();
        let mut pinfold = bare.clone();
        pinfold.cntvct_end = pinfold_end;
        let mut second = pinfold.clone();
        second.cntvct_end = 13_100;
        WorkloadSection {
            method: "m".into(),
            wall_s: 1.0,
            results: vec![SetupResult {
                setup: SETUPS[1],
                runs: Runs {
                    bare: vec![bare.clone(), bare],
                    pinfold: vec![pinfold, second],
                },
            }],
        }
    }

    #[test]
    fn section_prints_bare_pinfold_ratio_and_writes_them_to_json() {
        let section = section(13_100);

        let text = section.text();
        let json = section.json();

        assert!(text.contains("2 vCPUs"), "{text}");
        assert!(text.contains("1.0400"), "{text}");
        assert!(text.contains("every figure identical"), "{text}");
        let setup = &json["setups"][0];
        assert_eq!(setup["bare_instructions_per_op"], json!(20.0));
        assert_eq!(setup["pinfold_instructions_per_op"], json!(20.8));
        assert_eq!(setup["runs"]["pinfold"][1]["ticks"], json!(13_000));
        assert_eq!(json["runs_identical"], json!(true));
    }

    #[test]
    fn a_run_that_differs_is_flagged() {
        let section = section(13_101);

        assert!(section.text().contains("DIFFER"));
        assert_eq!(section.json()["runs_identical"], json!(false));
        assert_eq!(
            section.json()["setups"][0]["identical_runs"]["pinfold"],
            json!(false)
        );
    }

    #[test]
    fn fixed_groups_thousands_and_keeps_decimals() {
        assert_eq!(fixed(14_735.827_2, 1), "14,735.8");
        assert_eq!(fixed(977.0, 0), "977");
        assert_eq!(fixed(1_234_567.0, 0), "1,234,567");
        assert_eq!(fixed(-0.04, 1), "0.0");
        assert_eq!(fixed(-12.5, 1), "-12.5");
    }

    #[test]
    fn each_setup_plan_is_one_linux_partition_asking_for_the_workload() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        for setup in SETUPS {
            let config = pinfold_config::load(&root.join(setup.plan)).unwrap();

            assert_eq!(config.partitions.len(), 1, "{}", setup.plan);
            let partition = &config.partitions[0];
            assert_eq!(partition.cpus.len(), setup.vcpus as usize, "{}", setup.plan);
            assert_eq!(config.board.cpus, setup.vcpus, "{}", setup.plan);
            assert!(
                partition
                    .bootargs
                    .split_whitespace()
                    .any(|arg| arg.starts_with("pinfold.workload=pipe")),
                "{}: {}",
                setup.plan,
                partition.bootargs
            );
        }
    }

    #[test]
    fn the_default_plan_does_not_run_the_workload() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let config = pinfold_config::load(&root.join(crate::build::DEFAULT_CONFIG)).unwrap();

        assert!(config
            .partitions
            .iter()
            .all(|p| !p.bootargs.contains("pinfold.workload")));
    }

    #[test]
    fn field_needs_the_whole_key() {
        assert_eq!(field("cntvct_start=5 start=7", "start"), Some("7"));
        assert_eq!(field("a=1", "b"), None);
    }
}
