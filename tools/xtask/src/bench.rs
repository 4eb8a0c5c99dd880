//! `cargo xtask bench`: every path of issue 7 measured bare and as a Pinfold
//! partition in one run (docs/PERFORMANCE.md), then the wall-clock boot of
//! the default plan and the image size; prints a table, writes
//! `target/pinfold/bench.json` and `target/pinfold/bench.svg`.
//!
//! The deterministic part runs under QEMU TCG with `-icount
//! shift=0,sleep=off` (one instruction is one nanosecond of virtual time,
//! so the guest's virtual counter counts instructions over all CPUs):
//!
//! - the probe guest (tools/test-guest) in the partition of `bench.toml`
//!   and the same binary booted bare by QEMU at EL1 (`qemu::bare_command`),
//!   each twice: its `PROBE bench <row>:` lines give the exit, interrupt,
//!   SGI, boot-stamp and MSI rows (`probe`; the partition owns QEMU's edu);
//! - the same two on `gic-version=4`, once each: the MSI row with GICv4.0
//!   direct vLPIs (`msi_to_handler_direct`, `direct_runs`);
//! - the default plan's Linux kernel and initramfs as the only partition of
//!   `bench-linux.toml` and bare, each twice: printk time of `Run /init`
//!   (`linux`);
//! - the same kernel and initramfs running the sched-pipe-style workload
//!   (`/bin/pipebench`) with one and with two vCPUs, as a partition of
//!   `bench-pipe-{1,2}cpu.toml` and bare, each twice: instructions per
//!   round trip (`workload`);
//! - the bench image built again with each ablation feature of the EL2
//!   image (`ablation::ABLATIONS`), the same probe twice each, compared row
//!   by row with the default image, with the hypervisor's shared-lock
//!   counts (its monitor's stats line, Ctrl-A s, `lockstats`).
//!
//! Every figure is printed with its method, and a column that changed
//! between the two runs is flagged. Performance is measured here and never
//! asserted as a time limit in a test.
//!
//! To add a row read from the probe: print `PROBE bench <name>: k=v ...` in
//! the guest and add a `ProbeRow` to `PROBE_ROWS`. To add a section (an
//! ablation, a scaling run, a workload): implement `Section` and push it in
//! `run`.

mod ablation;
mod boot;
mod linux;
mod lockstats;
mod probe;
mod scale;
mod size;
mod svg;
mod table;
mod workload;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};

use crate::build::{llvm_tool, Builder, Built, DEFAULT_CONFIG};
use crate::cmd;
use crate::error::{IoContext, XtaskError};
use crate::harness::{Line, QemuRun};
use crate::provision::BARE_TARGET;
use crate::qemu::{bare_command, qemu_command, Board, Extra};
use crate::Workspace;

pub use ablation::ABLATIONS;
use ablation::{AblationSection, Variant};
use boot::{run_init_seconds, BootSample, BootSection, BOOT_PARTITIONS};
use linux::{LinuxGuest, LinuxRun, RUN_INIT};
use lockstats::{LockStats, STATS_MARKER};
use probe::{ProbeRun, END_MARKER};
use scale::{ScaleImage, ScaleRun, ScaleSection, SCALE_END};
use size::{parse_llvm_size, SizeSection};
use table::{Goal, Repeat, Row};

/// The plan of the probe rows: the probe guest alone, two vCPUs on CPUs 1-2.
pub const BENCH_CONFIG: &str = "vm-configs/qemu-virt/bench.toml";
/// The plan of the Linux row: one Linux partition on a one-CPU board.
pub const BENCH_LINUX_CONFIG: &str = "vm-configs/qemu-virt/bench-linux.toml";
/// The plan of the scaling section: the probe guest in its scaling mode,
/// two vCPUs on a two-CPU board.
pub const BENCH_SCALE_CONFIG: &str = "vm-configs/qemu-virt/bench-scale.toml";
/// The ablation the scaling section compares with the default image.
const SCALE_ABLATION: &str = "ablate-chip-lock";
/// Boots per image in the scaling section, interleaved between the images
/// (each boot measures every exit and N `rounds` times).
const SCALE_BOOTS: usize = 2;
const SCALE_DEADLINE: Duration = Duration::from_secs(120);
/// The MSI row's device (bench.toml assigns 00:02.0 to the probe): QEMU's
/// edu, on every boot of the bench plan and on the bare runs.
const PROBE_DEVICE: &str = "edu,addr=0x2";
/// The probe's bootargs word for the MSI bench alone (tools/test-guest
/// `MSI_BOOTARG`), given to the bare GICv4.0 reference with `-append`.
const MSI_ONLY_BOOTARG: &str = "pinfold-bench=msi";
/// The probe guest's flat image, booted bare by QEMU.
const TEST_GUEST: &str = "target/guest/test-guest.bin";

/// Deterministic runs per column; they must print identical numbers.
const ICOUNT_RUNS: usize = 2;
/// Default-plan boots timed; the median is reported.
const BOOT_RUNS: usize = 3;

/// `-icount` exponent: each instruction advances QEMU's virtual clock by
/// 2^shift ns. 0 makes one instruction exactly one nanosecond.
pub const ICOUNT_SHIFT: u32 = 0;
/// `sleep=off`: when every vCPU idles, virtual time jumps to the next timer
/// instead of following the host clock, so host load cannot leak in.
const ICOUNT_ARG: &str = "shift=0,sleep=off";
/// QEMU's guest random numbers from a fixed seed: the DTB's rng-seed and
/// kaslr-seed (which QEMU also rewrites in a `-dtb` at every reset) repeat,
/// so the hypervisor's boot and the kernels' KASLR offsets repeat.
const QEMU_SEED: &str = "1";
/// icount runs all vCPUs round-robin on one host thread; QEMU refuses
/// `thread=multi` together with `-icount`.
const ICOUNT_ACCEL: &str = "tcg,thread=single";

/// Generous: a probe run takes about a second and a Linux run a few, but
/// the host is shared and may be busy.
const PROBE_DEADLINE: Duration = Duration::from_secs(120);
const LINUX_DEADLINE: Duration = Duration::from_secs(240);
const BOOT_DEADLINE: Duration = Duration::from_secs(240);

/// The probe's fatal line (an unexpected exception or panic).
const PROBE_FATAL: &str = "PROBE fatal";

/// A block of the report after the comparison table: printed, and written
/// as one member of bench.json.
pub trait Section {
    /// The JSON member name.
    fn key(&self) -> &'static str;
    /// The printed block, its title line included.
    fn text(&self) -> String;
    fn json(&self) -> Value;
}

/// Runs of one kind, per column.
#[derive(Debug, Clone, PartialEq)]
pub struct Runs<T> {
    pub bare: Vec<T>,
    pub pinfold: Vec<T>,
}

impl<T> Default for Runs<T> {
    fn default() -> Self {
        Self {
            bare: Vec::new(),
            pinfold: Vec::new(),
        }
    }
}

impl<T> Runs<T> {
    /// Each column's figure per run.
    fn figures(&self, figure: impl Fn(&T) -> Option<f64>) -> (Vec<Option<f64>>, Vec<Option<f64>>) {
        (
            self.bare.iter().map(&figure).collect(),
            self.pinfold.iter().map(&figure).collect(),
        )
    }

    /// A row whose columns are the first run's `figure`, flagged when a
    /// later run differs.
    fn row(&self, spec: RowSpec, method: String, figure: impl Fn(&T) -> Option<f64>) -> Row {
        let (bare, pinfold) = self.figures(figure);
        Row {
            id: spec.id,
            label: spec.label,
            short: spec.short,
            bare: bare.first().copied().flatten(),
            pinfold: pinfold.first().copied().flatten(),
            goal: Some(spec.goal),
            method,
            repeat: Repeat::of(&bare, &pinfold),
            note: None,
        }
    }
}

/// What names a row and what it must reach.
#[derive(Debug, Clone, Copy)]
struct RowSpec {
    id: &'static str,
    label: &'static str,
    /// The plot's label.
    short: &'static str,
    goal: Goal,
}

/// A row read from the probe's bench lines.
struct ProbeRow {
    spec: RowSpec,
    /// The guest's row name (for "skipped" notes).
    source: &'static str,
    figure: fn(&ProbeRun) -> Option<f64>,
    method: &'static str,
}

/// Issue 7's probe rows, in its order; goals are the issue's.
const PROBE_ROWS: [ProbeRow; 7] = [
    ProbeRow {
        spec: RowSpec {
            id: "gicd_typer_read",
            label: "emulated GICD_TYPER read",
            short: "emulated GICD_TYPER read",
            goal: Goal::AtMost(120.0),
        },
        source: "gicd",
        figure: |r| r.per_iteration("gicd"),
        method: "1000 back-to-back `ldr w10, [GICD_TYPER]; subs; b.ne` (the 3 EL1 instructions \
                 included); bare, the load reads QEMU's GICD without a trap",
    },
    ProbeRow {
        spec: RowSpec {
            id: "hvc_psci_version",
            label: "HVC PSCI_VERSION",
            short: "HVC PSCI_VERSION",
            goal: Goal::AtMost(100.0),
        },
        source: "hvc",
        figure: |r| r.per_iteration("hvc"),
        method: "1000 back-to-back `mov w0, #PSCI_VERSION; hvc #0; subs; b.ne` (the 4 EL1 \
                 instructions included); bare, QEMU's own PSCI emulation answers the HVC \
                 (conduit from its DTB's /psci), which executes no guest instructions",
    },
    ProbeRow {
        spec: RowSpec {
            id: "vtimer_to_handler",
            label: "vtimer IRQ: CVAL reached -> guest handler",
            short: "vtimer: CVAL reached -> guest handler",
            goal: Goal::AtMost(100.0),
        },
        source: "vtimer",
        figure: |r| r.vtimer("handler_ticks"),
        method: "64 virtual-timer interrupts (PPI 27 enabled in the guest's GICR, priority 0x80, \
                 Group 1) taken by a CPU spinning with IRQs unmasked: from the counter reaching \
                 CVAL to the handler's CNTVCT read, its 3rd instruction (vector `br`, `isb`, \
                 `mrs`); a 0-15 nop dither before the read makes the mean exact, not rounded to \
                 a 16-instruction tick",
    },
    ProbeRow {
        spec: RowSpec {
            id: "vtimer_back",
            label: "vtimer IRQ: CVAL -> back in interrupted code",
            short: "vtimer: CVAL -> back in interrupted code",
            goal: Goal::AtMost(150.0),
        },
        source: "vtimer",
        figure: |r| r.vtimer("back_ticks"),
        method: "the same interrupts, to the CNTVCT read 2 instructions after the handler's ERET \
                 lands in the interrupted loop; the handler acknowledges (ICC_IAR1_EL1), turns \
                 the timer off (CNTV_CTL_EL0), EOIs (ICC_EOIR1_EL1) and returns: 7 instructions \
                 after its stamp",
    },
    ProbeRow {
        spec: RowSpec {
            id: "sgi_round_trip",
            label: "SGI round trip vCPU0 -> vCPU1 -> vCPU0",
            short: "SGI round trip vCPU0 -> vCPU1 -> vCPU0",
            goal: Goal::AtMost(700.0),
        },
        source: "sgi",
        figure: |r| r.per_iteration("sgi"),
        method: "1000 round trips (after 16 untimed) between two vCPUs on two CPUs (CPUs 1 and 2; \
                 bare, QEMU CPUs 0 and 1, the second started with QEMU's PSCI CPU_ON): vCPU 0 \
                 writes ICC_SGI1R_EL1 (SGI 3) and waits in WFI with IRQs masked, then unmasks to \
                 take the answer; vCPU 1 sleeps in WFI and its handler answers with an SGI 3 \
                 first thing. WFI on both sides: a waiting CPU executes nothing under icount, so \
                 the figure is every instruction of the round trip on both CPUs",
    },
    ProbeRow {
        spec: RowSpec {
            id: "reset_to_guest",
            label: "QEMU reset -> first guest instruction",
            short: "QEMU reset -> first guest instruction",
            goal: Goal::AtMost(400_000.0),
        },
        source: "boot",
        figure: ProbeRun::boot_stamp,
        method: "CNTVCT_EL0 read by the probe's 2nd instruction (after the Image header's branch) \
                 plus CNTVOFF (CNTPCT - CNTVCT, read by the guest later): virtual time since \
                 QEMU's reset, i.e. instructions over all 4 CPUs (the raw probe partition of \
                 bench.toml; vCPU 1 waits for CPU_ON, so only vCPU 0 enters here); bare, QEMU's \
                 own boot stub",
    },
    ProbeRow {
        spec: RowSpec {
            id: "msi_to_handler",
            label: "device MSI (edu raise write) -> guest handler",
            short: "MSI: device write -> guest handler",
            goal: Goal::AtMost(1000.0),
        },
        source: "msi",
        figure: |r| r.msi_round("min_round_ticks"),
        method: "QEMU's edu (00:02.0, assigned to the probe) raising its MSI 128 times (after 4 \
                 untimed), LPI 8192 mapped by the guest's own MAPD/MAPC/MAPTI on the ITS (bare: \
                 QEMU's; Pinfold: the partition's virtual ITS, translated onto the physical ITS, \
                 the physical LPI taken at EL2 and injected as the vLPI through a list register; \
                 GICv3 host, no direct injection): from the CNTVCT read before the `str` to edu \
                 register 0x60 to the IRQ handler's CNTVCT read, its 2nd instruction; a 0-15 nop \
                 dither before the first read makes each round of 16 MSIs exact; the figure is \
                 the smallest of 8 rounds (median in bench.json)",
    },
];

/// The MSI row once more on a GICv4.0 (`gic-version=4`, both columns):
/// read from the [`DIRECT_RUNS`] boots, not the table's other runs.
const DIRECT_ROW: ProbeRow = ProbeRow {
    spec: RowSpec {
        id: "msi_to_handler_direct",
        label: "device MSI -> guest handler, GICv4.0 direct vLPI (gic-version=4)",
        short: "MSI -> guest handler, GICv4.0 direct vLPI",
        goal: Goal::AtMost(1000.0),
    },
    source: "msi",
    figure: |r| r.msi_round("min_round_ticks"),
    method: "the same probe, edu and measurement as msi_to_handler, on `-M \
             virt,virtualization=on,gic-version=4` (QEMU's GICv4.0; bare: the same board, which \
             QEMU enters at EL2: the probe leaves EL2 idle and drops to EL1, and with bootargs \
             `pinfold-bench=msi` runs the MSI bench alone on QEMU's ITS): the hypervisor turns the partition's MAPTI into VMAPTI to the \
             vCPU's vPE, so the edu's write reaches the resident vPE's virtual CPU interface \
             as a vLPI with no exit to EL2 (the hosted run's stats line must say lpis=0: no \
             physical LPI taken at EL2 for the probe); one boot per column",
};

/// Boots per column of [`DIRECT_ROW`]: one extra hosted and one extra bare
/// boot (the figure is deterministic under icount; the other rows' two
/// runs show it).
const DIRECT_RUNS: usize = 1;

/// Everything one `cargo xtask bench` measured.
pub struct Report {
    /// `qemu-system-aarch64 --version`'s first line, and the binary's path.
    pub qemu: (String, String),
    pub method: String,
    pub rows: Vec<Row>,
    pub probe: Runs<ProbeRun>,
    /// The probe on `gic-version=4` (the direct-vLPI MSI row).
    pub direct: Runs<ProbeRun>,
    pub linux: Runs<LinuxRun>,
    pub sections: Vec<Box<dyn Section>>,
    pub wall_clock_s: f64,
}

impl Report {
    /// Whether any row changed between its runs.
    pub fn any_difference(&self) -> bool {
        self.rows.iter().any(|r| r.repeat.differs())
    }

    /// The human-readable report.
    pub fn text(&self) -> String {
        let mut t = String::new();
        t.push_str(&format!("QEMU: {} ({})\n", self.qemu.0, self.qemu.1));
        t.push_str(
            "\n== Paths of issue 7: bare EL1 vs Pinfold partition (deterministic, -icount) ==\n",
        );
        t.push_str(&format!("method: {}\n", self.method));
        t.push_str(&table::render(&self.rows));
        t.push_str(if self.any_difference() {
            "runs: DIFFER: a figure changed between two identical runs; investigate before trusting it\n"
        } else {
            "runs: every figure identical in both runs of each column (as expected under -icount)\n"
        });
        for section in &self.sections {
            t.push('\n');
            t.push_str(&section.text());
        }
        t.push_str(&format!(
            "\nbench wall clock: {:.1} s (builds included)\n",
            self.wall_clock_s
        ));
        t
    }

    pub fn json(&self) -> Value {
        let mut report = Map::new();
        report.insert(
            "qemu".into(),
            json!({ "version": self.qemu.0, "binary": self.qemu.1 }),
        );
        report.insert("method".into(), json!(self.method));
        report.insert(
            "rows".into(),
            Value::Array(self.rows.iter().map(Row::json).collect()),
        );
        report.insert("runs_identical".into(), json!(!self.any_difference()));
        let probe_runs = |runs: &[ProbeRun]| Value::Array(runs.iter().map(probe_json).collect());
        let linux_runs = |runs: &[LinuxRun]| {
            json!(runs
                .iter()
                .map(|r| json!({ "run_init_s": r.run_init_s, "first_line_s": r.first_line_s }))
                .collect::<Vec<_>>())
        };
        report.insert(
            "runs".into(),
            json!({
                "probe": { "bare": probe_runs(&self.probe.bare), "pinfold": probe_runs(&self.probe.pinfold) },
                "probe_gicv4": { "bare": probe_runs(&self.direct.bare), "pinfold": probe_runs(&self.direct.pinfold) },
                "linux": { "bare": linux_runs(&self.linux.bare), "pinfold": linux_runs(&self.linux.pinfold) },
            }),
        );
        for section in &self.sections {
            report.insert(section.key().into(), section.json());
        }
        report.insert("bench_wall_clock_s".into(), json!(self.wall_clock_s));
        Value::Object(report)
    }
}

/// A probe run as JSON: each row's fields (numbers where they parse), or
/// `{"skipped": why}`.
fn probe_json(run: &ProbeRun) -> Value {
    let mut rows: Map<String, Value> = run
        .rows
        .iter()
        .map(|(row, entry)| {
            let value = match entry {
                probe::Entry::Skipped(why) => json!({ "skipped": why }),
                probe::Entry::Values(fields) => Value::Object(
                    fields
                        .iter()
                        .map(|(k, v)| {
                            let v = v.parse::<u64>().map_or_else(|_| json!(v), |n| json!(n));
                            (k.clone(), v)
                        })
                        .collect(),
                ),
            };
            (row.clone(), value)
        })
        .collect();
    if let Some(locks) = &run.locks {
        rows.insert("hypervisor_locks".into(), locks.json());
    }
    if let Some(lpis) = run.lpis {
        rows.insert("hypervisor_lpis".into(), json!(lpis));
        rows.insert("hypervisor_direct_vlpi".into(), json!(run.direct_vlpi));
    }
    if !run.ablations.is_empty() {
        rows.insert("hypervisor_ablations".into(), json!(run.ablations));
    }
    Value::Object(rows)
}

/// The table's rows from the probe runs (GICv3, and `direct` on GICv4.0
/// for [`DIRECT_ROW`]) and the Linux runs.
pub fn rows(probe: &Runs<ProbeRun>, direct: &Runs<ProbeRun>, linux: &Runs<LinuxRun>) -> Vec<Row> {
    let mut rows: Vec<Row> = PROBE_ROWS
        .iter()
        .map(|spec| (spec, probe))
        .chain([(&DIRECT_ROW, direct)])
        .map(|(spec, probe)| {
            let mut row = probe.row(spec.spec, spec.method.to_string(), spec.figure);
            let why = |runs: &[ProbeRun], column: &str| {
                let run = runs.first()?;
                let why = match spec.source {
                    "boot" => run.boot_stamp_missing(),
                    source => run.skipped(source).map(str::to_string),
                };
                why.map(|why| format!("{column}: {why}"))
            };
            let notes: Vec<String> = [why(&probe.bare, "bare"), why(&probe.pinfold, "Pinfold")]
                .into_iter()
                .flatten()
                .collect();
            let mut notes = notes;
            if spec.source == "msi" {
                notes.extend(msi_path_note(
                    spec.spec.id == DIRECT_ROW.spec.id,
                    &probe.pinfold,
                ));
            }
            if !notes.is_empty() {
                row.note = Some(notes.join("; "));
            }
            if spec.source == "vtimer" && !probe.pinfold.iter().all(ProbeRun::vtimer_dither_exact) {
                row.note = Some("the dither does not span one tick: mean rounded to ticks".into());
            }
            row
        })
        .collect();
    rows.push(linux_row(linux));
    rows
}

/// What the hosted MSI runs say about the path their MSIs took, when it is
/// not the one the row claims: on GICv3 physical LPIs at EL2 (`lpis` > 0 on
/// the stats line), with direct vLPIs none and the hypervisor's `direct to
/// vPE` mapping line.
fn msi_path_note(direct: bool, hosted: &[ProbeRun]) -> Option<String> {
    let run = hosted
        .first()
        .filter(|r| r.skipped("msi").is_none() && r.rows.contains_key("msi"))?;
    match (direct, run.lpis, run.direct_vlpi) {
        (true, Some(0), true) | (false, Some(1..), false) => None,
        (_, lpis, vlpi) => Some(format!(
            "Pinfold: not the {} path (stats lpis={}, direct vLPI mapping {})",
            if direct { "direct" } else { "trapped" },
            lpis.map_or_else(|| "?".into(), |n| n.to_string()),
            if vlpi { "logged" } else { "not logged" }
        )),
    }
}

/// Instructions per second of virtual time under `-icount shift=ICOUNT_SHIFT`.
fn instructions_per_second() -> f64 {
    1e9 / f64::from(1u32 << ICOUNT_SHIFT)
}

fn linux_row(linux: &Runs<LinuxRun>) -> Row {
    let spec = RowSpec {
        id: "linux_run_init",
        label: "Linux partition: instructions to `Run /init`, vs the same kernel bare",
        short: "Linux: instructions to `Run /init`",
        goal: Goal::RatioAtMost(1.01),
    };
    let method = format!(
        "printk time of `{RUN_INIT}` x 1e9 (virtual ns = instructions, plus any idle time \
         sleep=off skipped): the default plan's kernel + initramfs, same bootargs, 256 MiB, one \
         CPU; Pinfold: the only partition of {BENCH_LINUX_CONFIG}; bare: QEMU -kernel at EL1 with a \
         DTB of the partition's shape from the hypervisor's own generator; both get a KASLR \
         seed, repeated by QEMU `-seed {QEMU_SEED}`. printk time starts when the arch \
         timer becomes sched_clock (time_init), the same kernel point in both runs and blind to \
         CNTVOFF, so nothing is subtracted; it leaves out kernel entry -> time_init, and the \
         hypervisor's boot before entry (that is the reset row). Ratio = Pinfold / bare"
    );
    let mut row = linux.row(spec, method, |r| {
        r.run_init_s.map(|s| s * instructions_per_second())
    });
    let started_late = linux
        .bare
        .iter()
        .chain(&linux.pinfold)
        .any(|r| r.first_line_s.is_some_and(|s| s > 0.0));
    if started_late {
        row.note = Some(
            "a kernel's first printk stamp is not 0: its printk clock includes time before the \
             kernel (compare with care)"
                .into(),
        );
    }
    row
}

/// Runs every benchmark, prints the report and writes bench.json and
/// bench.svg.
pub fn run(ws: &Workspace) -> Result<(), XtaskError> {
    let started = Instant::now();
    let mut builder = Builder::new(ws);
    let default = builder.build(Path::new(DEFAULT_CONFIG), "pinfold.bin")?;
    let bench = builder.build(Path::new(BENCH_CONFIG), "bench.bin")?;
    let bench_linux = builder.build(Path::new(BENCH_LINUX_CONFIG), "bench-linux.bin")?;
    let out = ws.root.join("target/pinfold");
    let logs = out.join("bench-logs");
    let qemu = qemu_version()?;
    println!("xtask: bench: QEMU {} ({})", qemu.0, qemu.1);

    let mut probe = Runs::default();
    for run in 1..=ICOUNT_RUNS {
        let sample = probe_run(
            qemu_command(&probe_board(&bench.board), &bench.image, &probe_icount()),
            &logs.join(format!("probe-pinfold-{run}.log")),
            "partition",
        )?;
        println!(
            "xtask: bench: probe, Pinfold, run {run}/{ICOUNT_RUNS}: {} rows",
            sample.rows.len()
        );
        probe.pinfold.push(sample);
        let guest = ws.root.join(TEST_GUEST);
        let sample = probe_run(
            bare_command(&probe_board(&bench.board), &guest, &probe_icount()),
            &logs.join(format!("probe-bare-{run}.log")),
            "bare",
        )?;
        println!(
            "xtask: bench: probe, bare, run {run}/{ICOUNT_RUNS}: {} rows",
            sample.rows.len()
        );
        probe.bare.push(sample);
    }

    let direct = direct_runs(ws, &bench, &logs)?;
    let linux = linux_runs(ws, &bench_linux, &logs)?;
    let workload = workload::run(ws, &mut builder, &logs)?;
    let cntfrq = probe
        .pinfold
        .first()
        .and_then(|r| r.number("env", "cntfrq"))
        .unwrap_or(0);
    let method = format!(
        "QEMU TCG `-accel {ICOUNT_ACCEL} -icount {ICOUNT_ARG} -seed {QEMU_SEED}`, same QEMU binary, board \
         (`-M virt,gic-version=3`, `-cpu cortex-a72`) and flags bare and hosted (bare: no \
         `virtualization=on`, QEMU `-kernel` enters the image at EL1); 1 instruction = 1 ns of \
         virtual time, read with the virtual counter (CNTFRQ={cntfrq} Hz: 1 tick = {} \
         instructions), never the PMU; figures count every instruction QEMU executed on every \
         CPU (guest EL1 and hypervisor EL2), CPUs in WFI execute none. The probe: \
         {TEST_GUEST} in the partition of {BENCH_CONFIG} and the same binary bare; it tells the \
         two apart by /chosen/pinfold,partition in its DTB and, bare, runs only the bench loops. \
         {ICOUNT_RUNS} runs per column; the row {} alone is measured on `gic-version=4` instead \
         (bare and hosted), {DIRECT_RUNS} run per column",
        if cntfrq == 0 {
            "?".to_string()
        } else {
            probe::instructions_per_tick(cntfrq).to_string()
        },
        DIRECT_ROW.spec.id
    );
    let rows = rows(&probe, &direct, &linux);

    let mut boots = Vec::new();
    for run in 1..=BOOT_RUNS {
        let sample = boot_run(&default, &logs.join(format!("boot-{run}.log")))?;
        println!(
            "xtask: bench: boot run {run}/{BOOT_RUNS}: UP at {:?} s wall, /init at {:?} s guest",
            sample.up_s, sample.run_init_guest_s
        );
        boots.push(sample);
    }
    let boot = BootSection {
        method: format!(
            "wall clock from spawning QEMU to each `[<name>] PINFOLD-GUEST-UP` line, {BOOT_RUNS} \
             boots of {DEFAULT_CONFIG} under QEMU TCG (`-accel tcg,thread=multi`, {} vCPUs on {} \
             host CPUs) on a shared, noisy machine: compare only runs on the same host. `/init \
             guest s` is the guest kernel's own printk timestamp of `{RUN_INIT}` (guest time, \
             not icount)",
            default.board.cpus,
            std::thread::available_parallelism().map_or(0, |n| n.get()),
        ),
        boots,
    };
    let size = size_section(ws, &default)?;
    // After the size section: each ablation build overwrites the EL2 ELF.
    let ablations = ablation_section(&mut builder, &logs, &probe.pinfold)?;
    let scaling = scale_section(&mut builder, &logs)?;

    let report = Report {
        qemu,
        method,
        rows,
        probe,
        direct,
        linux,
        sections: vec![
            Box::new(workload),
            Box::new(boot),
            Box::new(size),
            Box::new(ablations),
            Box::new(scaling),
        ],
        wall_clock_s: started.elapsed().as_secs_f64(),
    };
    println!("\n{}", report.text());
    let json_path = out.join("bench.json");
    let json = serde_json::to_string_pretty(&report.json())
        .map_err(|e| XtaskError::Provision(format!("bench.json: {e}")))?;
    std::fs::write(&json_path, json + "\n")
        .context(|| format!("writing {}", json_path.display()))?;
    let svg_path = out.join("bench.svg");
    let title = format!("Pinfold vs bare EL1, {}", report.qemu.0);
    std::fs::write(&svg_path, svg::chart(&report.rows, &title))
        .context(|| format!("writing {}", svg_path.display()))?;
    println!(
        "xtask: bench: wrote {} and {}",
        ws.relative(&json_path),
        ws.relative(&svg_path)
    );
    Ok(())
}

/// The bench plan's board with the edu at 00:02.0 instead of the partition
/// NIC `qemu_command` would put at a non-manager partition's function.
fn probe_board(board: &Board) -> Board {
    Board {
        partition_nics: crate::qemu::NicSlots::NONE,
        ..*board
    }
}

/// The probe on `gic-version=4`, hosted and bare, [`DIRECT_RUNS`] times
/// each: the MSI row with direct vLPIs ([`DIRECT_ROW`]).
fn direct_runs(ws: &Workspace, bench: &Built, logs: &Path) -> Result<Runs<ProbeRun>, XtaskError> {
    let gicv4 = Extra {
        gicv4: true,
        ..probe_icount()
    };
    let mut runs = Runs::default();
    for run in 1..=DIRECT_RUNS {
        let sample = probe_run(
            qemu_command(&probe_board(&bench.board), &bench.image, &gicv4),
            &logs.join(format!("probe-gicv4-pinfold-{run}.log")),
            "partition",
        )?;
        println!(
            "xtask: bench: probe, Pinfold on gic-version=4, run {run}/{DIRECT_RUNS}: msi {:?}, lpis {:?}",
            sample.msi_round("min_round_ticks"),
            sample.lpis
        );
        runs.pinfold.push(sample);
        // QEMU enters this board at EL2 (bare_command); the probe drops to
        // EL1 on its boot CPU only, so it runs the MSI bench alone.
        let mut bare = gicv4.clone();
        bare.args
            .extend(["-append".to_string(), MSI_ONLY_BOOTARG.to_string()]);
        let sample = probe_run(
            bare_command(&probe_board(&bench.board), &ws.root.join(TEST_GUEST), &bare),
            &logs.join(format!("probe-gicv4-bare-{run}.log")),
            "bare",
        )?;
        println!(
            "xtask: bench: probe, bare on gic-version=4, run {run}/{DIRECT_RUNS}: msi {:?}",
            sample.msi_round("min_round_ticks")
        );
        runs.bare.push(sample);
    }
    Ok(runs)
}

/// [`icount`] with the MSI row's edu ([`PROBE_DEVICE`]).
fn probe_icount() -> Extra {
    icount(vec!["-device".into(), PROBE_DEVICE.into()])
}

/// `-icount` and single-threaded TCG, then `args`.
fn icount(args: Vec<String>) -> Extra {
    let mut all = vec![
        "-icount".to_string(),
        ICOUNT_ARG.to_string(),
        "-seed".to_string(),
        QEMU_SEED.to_string(),
    ];
    all.extend(args);
    Extra {
        args: all,
        accel: Some(ICOUNT_ACCEL.into()),
        ..Extra::default()
    }
}

/// The first line of `qemu-system-aarch64 --version` and where the binary
/// is on PATH.
fn qemu_version() -> Result<(String, String), XtaskError> {
    let text = cmd::stdout_of(Command::new("qemu-system-aarch64").arg("--version"))?;
    let version = text.lines().next().unwrap_or_default().trim().to_string();
    let binary = std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join("qemu-system-aarch64"))
                .find(|candidate| candidate.is_file())
        })
        .map_or_else(|| "qemu-system-aarch64".into(), |p| p.display().to_string());
    Ok((version, binary))
}

/// Boots `cmd` until a line satisfies `done` (or the probe reports a fatal
/// error); returns every line so far.
fn run_until(
    cmd: Command,
    log: &Path,
    what: &str,
    deadline: Duration,
    done: impl Fn(&str) -> bool,
) -> Result<Vec<Line>, XtaskError> {
    let qemu = QemuRun::spawn(cmd, log)?;
    wait_line(&qemu, log, what, 0, Instant::now() + deadline, done)?;
    Ok(qemu.lines())
}

/// Waits for a line from index `from` on that satisfies `done`, failing on
/// the probe's fatal line.
fn wait_line(
    qemu: &QemuRun,
    log: &Path,
    what: &str,
    from: usize,
    deadline: Instant,
    done: impl Fn(&str) -> bool,
) -> Result<Line, XtaskError> {
    let line = qemu
        .wait_for(what, from, deadline, |l| done(l) || l.contains(PROBE_FATAL))
        .map_err(|err| bad_log(log, err.to_string()))?;
    if line.text.contains(PROBE_FATAL) {
        return Err(bad_log(log, format!("the probe failed: `{}`", line.text)));
    }
    Ok(line)
}

/// One probe boot, to its `PROBE bench end`; the probe must have seen
/// itself in `mode` (`bare` or `partition`). In a partition the bench then
/// types Ctrl-A s and reads the hypervisor's lock statistics.
fn probe_run(cmd: Command, log: &Path, mode: &str) -> Result<ProbeRun, XtaskError> {
    let mut qemu = QemuRun::spawn(cmd, log)?;
    let deadline = Instant::now() + PROBE_DEADLINE;
    wait_line(&qemu, log, &format!("`{END_MARKER}`"), 0, deadline, |l| {
        l.contains(END_MARKER)
    })?;
    if mode == "partition" {
        hypervisor_stats(&mut qemu, log, deadline)?;
    }
    let lines = qemu.lines();
    let run = ProbeRun::parse(lines.iter().map(|l| l.text.as_str()));
    match run.mode() {
        Some(seen) if seen == mode => Ok(run),
        seen => Err(bad_log(
            log,
            format!("the probe ran as {seen:?} (`PROBE bench env: mode=`), expected {mode}"),
        )),
    }
}

/// Types Ctrl-A s and waits for the hypervisor's stats line.
fn hypervisor_stats(qemu: &mut QemuRun, log: &Path, deadline: Instant) -> Result<(), XtaskError> {
    let from = qemu.lines().len();
    // Ctrl-A s: the hypervisor monitor prints its statistics.
    qemu.send(b"\x01s")?;
    let line = wait_line(
        qemu,
        log,
        &format!("`{STATS_MARKER}` after Ctrl-A s"),
        from,
        deadline,
        |l| LockStats::parse(l).is_some(),
    )?;
    if !line.text.starts_with("pinfold: ") {
        return Err(bad_log(
            log,
            format!("the stats line is not the hypervisor's: `{}`", line.text),
        ));
    }
    // The partitions' lines follow it (their `lpis=`: the MSI path).
    wait_line(
        qemu,
        log,
        &format!("`{}` after Ctrl-A s", probe::PARTITION_STATS),
        line.index,
        deadline,
        |l| l.contains(probe::PARTITION_STATS),
    )?;
    Ok(())
}

/// The bench image built again with each ablation feature, probed
/// ICOUNT_RUNS times like the default image (whose runs are `default`).
fn ablation_section(
    builder: &mut Builder,
    logs: &Path,
    default: &[ProbeRun],
) -> Result<AblationSection, XtaskError> {
    let started = Instant::now();
    if let Some(run) = default.iter().find(|r| !r.ablations.is_empty()) {
        return Err(XtaskError::Provision(format!(
            "the default bench image reports ablations {:?}",
            run.ablations
        )));
    }
    let mut ablated = Vec::new();
    for ablation in ABLATIONS {
        let image = builder.build_with_features(
            Path::new(BENCH_CONFIG),
            &format!("bench+{}.bin", ablation.feature),
            &[ablation.feature],
        )?;
        let mut runs = Vec::new();
        for run in 1..=ICOUNT_RUNS {
            let log = logs.join(format!("probe-{}-{run}.log", ablation.feature));
            let sample = probe_run(
                qemu_command(&probe_board(&image.board), &image.image, &probe_icount()),
                &log,
                "partition",
            )?;
            if sample.ablations != [ablation.feature] {
                return Err(bad_log(
                    &log,
                    format!(
                        "the hypervisor reports ablations {:?}, expected [{:?}]",
                        sample.ablations, ablation.feature
                    ),
                ));
            }
            println!(
                "xtask: bench: probe, {}, run {run}/{ICOUNT_RUNS}: {} rows, locks {:?}",
                ablation.feature,
                sample.rows.len(),
                sample.locks.as_ref().map(|l| l.hot)
            );
            runs.push(sample);
        }
        ablated.push(Variant {
            ablation: Some(ablation),
            runs,
        });
    }
    Ok(AblationSection {
        method: format!(
            "{BENCH_CONFIG} built once more per ablation with `cargo build -p pinfold --features \
             <feature>` (platform/src/ablate.rs; the hypervisor's boot log names the feature and \
             the bench checks it), then the same probe under the same flags \
             (`-accel {ICOUNT_ACCEL} -icount {ICOUNT_ARG} -seed {QEMU_SEED}`), {ICOUNT_RUNS} runs \
             per image; default = the table's Pinfold runs. Figures as in the table. vCPU load + \
             put: vCPU 0 starts vCPU 1 with PSCI CPU_ON and waits in WFI (IRQs masked); vCPU 1's \
             entry sends SGI 3 to vCPU 0 and calls PSCI CPU_OFF; vCPU 0 takes the SGI from \
             ICC_IAR1_EL1 and starts it again: one load and one put of vCPU 1 per round trip, \
             with the CPU_ON request, the SGI and both traps; 200 timed round trips after 4. \
             Locks: after `PROBE bench end` the bench types Ctrl-A s and reads the hypervisor's \
             stats line (acquisitions of locks shared between CPUs per hv::lockstat::LockPath, \
             over the whole run: boot, isolation probes and every bench loop); hot = vCPU \
             load/put, timer PPI state, local injection. Uncontended here: icount runs one CPU \
             at a time"
        ),
        default: Variant {
            ablation: None,
            runs: default.to_vec(),
        },
        ablated,
        wall_clock_s: started.elapsed().as_secs_f64(),
    })
}

/// The scaling plan built as the default image and with the chip-lock
/// ablation, each booted SCALE_BOOTS times under multi-threaded TCG,
/// alternating.
fn scale_section(builder: &mut Builder, logs: &Path) -> Result<ScaleSection, XtaskError> {
    let started = Instant::now();
    let host_load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "));
    let images = [
        (
            "default",
            builder.build(Path::new(BENCH_SCALE_CONFIG), "bench-scale.bin")?,
            Vec::new(),
        ),
        (
            SCALE_ABLATION,
            builder.build_with_features(
                Path::new(BENCH_SCALE_CONFIG),
                &format!("bench-scale+{SCALE_ABLATION}.bin"),
                &[SCALE_ABLATION],
            )?,
            vec![SCALE_ABLATION.to_string()],
        ),
    ];
    let mut results: Vec<ScaleImage> = images
        .iter()
        .map(|(label, _, _)| ScaleImage {
            label: label.to_string(),
            runs: Vec::new(),
        })
        .collect();
    let cpus = images[0].1.board.cpus;
    for boot in 1..=SCALE_BOOTS {
        for ((label, image, ablations), result) in images.iter().zip(&mut results) {
            let log = logs.join(format!("scale-{label}-{boot}.log"));
            let mut qemu = QemuRun::spawn(
                qemu_command(&image.board, &image.image, &Extra::default()),
                &log,
            )?;
            let deadline = Instant::now() + SCALE_DEADLINE;
            wait_line(&qemu, &log, &format!("`{SCALE_END}`"), 0, deadline, |l| {
                l.contains(SCALE_END)
            })?;
            hypervisor_stats(&mut qemu, &log, deadline)?;
            let lines = qemu.lines();
            drop(qemu);
            let reported: Vec<String> = lines
                .iter()
                .filter_map(|l| probe::ablation_feature(&l.text).map(str::to_string))
                .collect();
            if &reported != ablations {
                return Err(bad_log(
                    &log,
                    format!(
                        "the hypervisor reports ablations {reported:?}, expected {ablations:?}"
                    ),
                ));
            }
            let run = ScaleRun::parse(lines.iter().map(|l| l.text.as_str()));
            println!(
                "xtask: bench: scaling, {label}, boot {boot}/{SCALE_BOOTS}: {} samples",
                run.samples.len()
            );
            result.runs.push(run);
        }
    }
    let first = results[0].runs.first().cloned().unwrap_or_default();
    let window_s = match (first.window_ticks, first.cntfrq) {
        (Some(ticks), Some(f)) if f != 0 => format!("{:.2} s", ticks as f64 / f as f64),
        _ => "?".into(),
    };
    let rounds = first.rounds.map_or_else(|| "?".into(), |r| r.to_string());
    Ok(ScaleSection {
        method: format!(
            "{BENCH_SCALE_CONFIG} (the probe guest in its scaling mode, vCPUs 0 and 1 on CPUs 0 \
             and 1 of a {cpus}-CPU board) under QEMU `-accel {}` without icount, so the guest \
             counter follows the host clock: WALL CLOCK, on a shared {}-core host (other work \
             runs beside it), noisy. Built as the default image and with `{SCALE_ABLATION}` \
             (chip-wide lock on timer PPI state changes), {SCALE_BOOTS} boots each, alternating. \
             Per boot, {rounds} rounds of: each exit for a {window_s} window of the guest counter with N = 1 \
             (vCPU 0 alone, vCPU 1 off) and N = 2 (vCPU 1 started with PSCI CPU_ON for the window \
             and off after; both loops start at the same counter value; a vCPU that arrives late \
             is rated over the part it ran). Figures: exits per second per vCPU (each vCPU's \
             count / its seconds, averaged over the N vCPUs), median over all rounds of all boots. \
             `gicr` alternately writes PPI 27's bit to the vCPU's own GICR_ISENABLER0 and \
             GICR_ICENABLER0: each write traps and changes the timer PPI's enable state on the \
             physical redistributor of the vCPU's own CPU through \
             hv::irqchip::change_percpu_state (lockless by default; the chip-wide lock under \
             the ablation). `hvc` (HVC PSCI_VERSION) touches no interrupt state: the control. \
             Under TCG the emulated GIC's registers are QEMU devices and system registers that \
             QEMU serialises under its global lock (BQL), so both images also serialise there; \
             the difference between the images is Pinfold's lock",
            crate::qemu::DEFAULT_ACCEL,
            std::thread::available_parallelism().map_or(0, |n| n.get()),
        ),
        host_load,
        images: results,
        wall_clock_s: started.elapsed().as_secs_f64(),
    })
}

/// The Linux row's boots: the bench-linux plan's partition, and the same
/// kernel bare.
fn linux_runs(ws: &Workspace, built: &Built, logs: &Path) -> Result<Runs<LinuxRun>, XtaskError> {
    let config_path = ws.root.join(BENCH_LINUX_CONFIG);
    let config = pinfold_config::load(&config_path)?;
    let partition = config
        .partitions
        .first()
        .ok_or_else(|| XtaskError::Provision(format!("{BENCH_LINUX_CONFIG} has no partition")))?;
    let guest = LinuxGuest::from_plan(partition, &ws.root);
    let dtb = ws.root.join("target/pinfold/bench-linux-bare.dtb");
    let blob = guest.bare_dtb().map_err(XtaskError::Provision)?;
    std::fs::write(&dtb, blob).context(|| format!("writing {}", dtb.display()))?;
    let bare_board = Board {
        cpus: 1,
        memory: guest.memory,
        nic: false,
        partition_nics: crate::qemu::NicSlots::NONE,
    };
    let prefix = format!("[{}] ", guest.name);
    let mut runs = Runs::default();
    for run in 1..=ICOUNT_RUNS {
        let log = logs.join(format!("linux-pinfold-{run}.log"));
        let lines = run_until(
            qemu_command(&built.board, &built.image, &icount(Vec::new())),
            &log,
            &format!("`{prefix}... {RUN_INIT}`"),
            LINUX_DEADLINE,
            |l| l.starts_with(&prefix) && l.contains(RUN_INIT),
        )?;
        let sample = LinuxRun::parse(&lines, Some(&guest.name));
        println!("xtask: bench: Linux, Pinfold, run {run}/{ICOUNT_RUNS}: {sample:?}");
        runs.pinfold.push(sample);

        let log = logs.join(format!("linux-bare-{run}.log"));
        let lines = run_until(
            bare_command(&bare_board, &guest.kernel, &icount(guest.bare_args(&dtb))),
            &log,
            &format!("`{RUN_INIT}`"),
            LINUX_DEADLINE,
            |l| l.contains(RUN_INIT),
        )?;
        let sample = LinuxRun::parse(&lines, None);
        println!("xtask: bench: Linux, bare, run {run}/{ICOUNT_RUNS}: {sample:?}");
        runs.bare.push(sample);
    }
    Ok(runs)
}

/// Boots the default plan and times each partition's UP marker.
fn boot_run(default: &Built, log: &Path) -> Result<BootSample, XtaskError> {
    let qemu = QemuRun::spawn(
        qemu_command(&default.board, &default.image, &Extra::default()),
        log,
    )?;
    let deadline = Instant::now() + BOOT_DEADLINE;
    let mut up_s = Vec::new();
    for name in BOOT_PARTITIONS {
        let marker = format!("[{name}] PINFOLD-GUEST-UP");
        let line = qemu
            .wait_for(&format!("`{marker}`"), 0, deadline, |l| l.contains(&marker))
            .map_err(|err| bad_log(log, err.to_string()))?;
        up_s.push(line.at.as_secs_f64());
    }
    let lines = qemu.lines();
    let run_init_guest_s = BOOT_PARTITIONS
        .iter()
        .map(|name| run_init_seconds(&lines, name))
        .collect();
    Ok(BootSample {
        up_s,
        run_init_guest_s,
    })
}

/// `llvm-size -A` on the EL2 ELF and the flat images' sizes.
fn size_section(ws: &Workspace, default: &Built) -> Result<SizeSection, XtaskError> {
    let elf: PathBuf = ws
        .root
        .join("target")
        .join(BARE_TARGET)
        .join("release/pinfold");
    let llvm_size = llvm_tool("llvm-size")?;
    let text = cmd::stdout_of(Command::new(&llvm_size).arg("-A").arg(&elf))?;
    let image = parse_llvm_size(&text).map_err(|why| XtaskError::BadFile {
        path: elf.clone(),
        why: format!("llvm-size -A: {why}"),
    })?;
    let el2_bin = ws.root.join("target/pinfold/pinfold-el2.bin");
    Ok(SizeSection {
        method: format!(
            "`llvm-size -A {}` (sections summed by name; .debug*, .comment, symbol tables not \
             loaded); file sizes of target/pinfold/pinfold-el2.bin and pinfold.bin",
            ws.relative(&elf)
        ),
        image,
        el2_bin_bytes: file_len(&el2_bin)?,
        pinfold_bin_bytes: file_len(&default.image)?,
    })
}

fn file_len(path: &Path) -> Result<u64, XtaskError> {
    std::fs::metadata(path)
        .map(|m| m.len())
        .context(|| format!("reading the size of {}", path.display()))
}

/// A failed wait, pointing at the log that shows why.
fn bad_log(log: &Path, why: String) -> XtaskError {
    XtaskError::BadFile {
        path: log.to_path_buf(),
        why,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The same partition run the probe parser's tests read.
    use probe::tests::PARTITION;

    const BARE: &str = "\
PROBE bench env: mode=bare psci=hvc cntfrq=62500000 mpidr=0x80000000
PROBE bench boot: entry_cntvct=0 cntvoff=0
PROBE bench hvc: iterations=1000 ticks=250 loop_insns=4
PROBE bench gicd: iterations=1000 ticks=187 loop_insns=3
PROBE bench vtimer: trials=64 dither=16 ahead=32 handler_ticks=12 back_ticks=40
PROBE bench sgi: iterations=1000 ticks=1313 method=wfi-both sgi=3
PROBE bench end";

    fn parse_probe(text: &str) -> ProbeRun {
        ProbeRun::parse(text.lines())
    }

    fn linux(run_init_s: f64) -> LinuxRun {
        LinuxRun {
            run_init_s: Some(run_init_s),
            first_line_s: Some(0.0),
        }
    }

    const MSI: &str = "PROBE bench msi: rounds=8 dither=16 warmup=4 min_round_ticks=2 \
                       median_round_ticks=4 sum_ticks=32 lpi=8192";

    /// The gic-version=4 runs: one per column, the MSI row measured.
    fn direct() -> Runs<ProbeRun> {
        let hosted = format!(
            "{PARTITION}\n[probe] {}\npinfold: cpu1: vITS: DeviceID 0x10 event 0 -> vLPI 8192 on \
             vCPU 0: direct to vPE 0 (GICv4.0, no exit)\npinfold: stats partition=probe state=2 \
             boots=1 faults=0 lpis=0",
            MSI.replace("min_round_ticks=2", "min_round_ticks=1000")
        );
        Runs {
            bare: vec![parse_probe(&format!("{BARE}\n{MSI}"))],
            pinfold: vec![parse_probe(&hosted)],
        }
    }

    fn rows(probe: &Runs<ProbeRun>, linux: &Runs<LinuxRun>) -> Vec<Row> {
        super::rows(probe, &direct(), linux)
    }

    fn runs() -> (Runs<ProbeRun>, Runs<LinuxRun>) {
        (
            Runs {
                bare: vec![parse_probe(BARE), parse_probe(BARE)],
                pinfold: vec![parse_probe(PARTITION), parse_probe(PARTITION)],
            },
            Runs {
                bare: vec![linux(0.8); 2],
                pinfold: vec![linux(0.808); 2],
            },
        )
    }

    fn row<'a>(rows: &'a [Row], id: &str) -> &'a Row {
        rows.iter()
            .find(|r| r.id == id)
            .unwrap_or_else(|| panic!("no row {id}"))
    }

    #[test]
    fn every_issue_row_is_present_in_order() {
        let (probe, linux) = runs();

        let ids: Vec<&str> = rows(&probe, &linux).iter().map(|r| r.id).collect();

        assert_eq!(
            ids,
            [
                "gicd_typer_read",
                "hvc_psci_version",
                "vtimer_to_handler",
                "vtimer_back",
                "sgi_round_trip",
                "reset_to_guest",
                "msi_to_handler",
                "msi_to_handler_direct",
                "linux_run_init"
            ]
        );
    }

    #[test]
    fn the_direct_row_comes_from_the_gicv4_runs_once_per_column() {
        let (probe, linux) = runs();

        let rows = rows(&probe, &linux);

        let direct = row(&rows, "msi_to_handler_direct");
        assert_eq!((direct.bare, direct.pinfold), (Some(2.0), Some(1000.0)));
        assert_eq!(direct.repeat, Repeat::default());
        assert_eq!(direct.note, None);
        // The GICv3 runs have no msi line: that row is empty, not the
        // direct figure.
        assert_eq!(row(&rows, "msi_to_handler").pinfold, None);
    }

    #[test]
    fn an_msi_row_whose_hosted_run_took_the_other_path_says_so() {
        let (probe, linux) = runs();
        let mut trapped = direct();
        trapped.pinfold[0].lpis = Some(144);
        trapped.pinfold[0].direct_vlpi = false;

        let direct_row = super::rows(&probe, &trapped, &linux);
        let mut gicv3 = probe.clone();
        for run in &mut gicv3.pinfold {
            *run = parse_probe(&format!(
                "{PARTITION}\n[probe] {MSI}\npinfold: stats partition=probe lpis=0"
            ));
        }
        let trapped_row = super::rows(&gicv3, &direct(), &linux);

        let note = row(&direct_row, "msi_to_handler_direct").note.clone();
        assert!(note.is_some_and(|n| n.contains("not the direct path") && n.contains("lpis=144")));
        let note = row(&trapped_row, "msi_to_handler").note.clone();
        assert!(note.is_some_and(|n| n.contains("not the trapped path") && n.contains("lpis=0")));
    }

    #[test]
    fn rows_take_bare_and_pinfold_from_their_runs() {
        let (probe, linux) = runs();

        let rows = rows(&probe, &linux);

        let gicd = row(&rows, "gicd_typer_read");
        assert_eq!((gicd.bare, gicd.pinfold), (Some(2.992), Some(302.0)));
        let timer = row(&rows, "vtimer_to_handler");
        assert_eq!((timer.bare, timer.pinfold), (Some(3.0), Some(411.0)));
        let back = row(&rows, "vtimer_back");
        assert_eq!((back.bare, back.pinfold), (Some(10.0), Some(418.0)));
        let sgi = row(&rows, "sgi_round_trip");
        assert_eq!(sgi.pinfold, Some(3126.0));
        let boot = row(&rows, "reset_to_guest");
        assert_eq!((boot.bare, boot.pinfold), (Some(0.0), Some(2_993_392.0)));
        assert!(rows.iter().all(|r| !r.repeat.differs()));
    }

    #[test]
    fn linux_row_is_printk_time_in_instructions_with_its_ratio_goal() {
        let (probe, linux) = runs();

        let rows = rows(&probe, &linux);

        let row = row(&rows, "linux_run_init");
        assert_eq!(row.bare, Some(0.8e9));
        assert_eq!(row.pinfold, Some(0.808e9));
        assert!((row.ratio().unwrap_or_default() - 1.01).abs() < 1e-9);
        assert_eq!(row.goal, Some(Goal::RatioAtMost(1.01)));
        assert_eq!(row.note, None);
    }

    #[test]
    fn a_kernel_whose_printk_clock_did_not_start_at_zero_is_noted() {
        let (probe, mut linux) = runs();
        linux.pinfold[0].first_line_s = Some(0.003);

        let rows = rows(&probe, &linux);

        assert!(row(&rows, "linux_run_init").note.is_some());
    }

    #[test]
    fn a_row_skipped_bare_is_empty_there_with_the_reason_noted() {
        let (mut probe, linux) = runs();
        let skipped = parse_probe(&BARE.replace(
            "PROBE bench hvc: iterations=1000 ticks=250 loop_insns=4",
            "PROBE bench hvc: skipped (PSCI conduit is smc, not hvc)",
        ));
        probe.bare = vec![skipped.clone(), skipped];

        let rows = rows(&probe, &linux);

        let hvc = row(&rows, "hvc_psci_version");
        assert_eq!(hvc.bare, None);
        assert_eq!(hvc.pinfold, Some(168.0));
        assert_eq!(
            hvc.note.as_deref(),
            Some("bare: PSCI conduit is smc, not hvc")
        );
    }

    #[test]
    fn an_unknown_counter_offset_leaves_the_reset_row_empty_with_a_note() {
        let (mut probe, linux) = runs();
        let unknown = parse_probe(&PARTITION.replace("cntvoff=0", "cntvoff=unknown (trapped)"));
        probe.pinfold = vec![unknown.clone(), unknown];

        let rows = rows(&probe, &linux);

        let boot = row(&rows, "reset_to_guest");
        assert_eq!(boot.pinfold, None);
        let note = boot.note.as_deref().unwrap_or_default();
        assert!(note.starts_with("Pinfold: CNTVOFF unknown"), "{note}");
    }

    #[test]
    fn a_figure_that_changed_between_runs_is_flagged_in_table_and_json() {
        let (mut probe, linux) = runs();
        probe.pinfold[1] = parse_probe(&PARTITION.replace("ticks=195375", "ticks=195376"));
        let rows = rows(&probe, &linux);
        let report = Report {
            qemu: (
                "QEMU emulator version 7.2.22".into(),
                "/usr/bin/qemu".into(),
            ),
            method: "m".into(),
            rows,
            probe,
            direct: direct(),
            linux,
            sections: Vec::new(),
            wall_clock_s: 1.0,
        };

        assert!(row(&report.rows, "sgi_round_trip").repeat.differs());
        assert!(!row(&report.rows, "gicd_typer_read").repeat.differs());
        assert!(report.text().contains("runs: DIFFER"));
        let json = report.json();
        assert_eq!(json["runs_identical"], json!(false));
        assert_eq!(json["rows"][4]["identical_runs"]["pinfold"], json!(false));
    }

    #[test]
    fn json_has_qemu_rows_raw_runs_and_sections() {
        let (probe, linux) = runs();
        let section = SizeSection {
            method: "s".into(),
            image: Default::default(),
            el2_bin_bytes: 1,
            pinfold_bin_bytes: 2,
        };
        let report = Report {
            qemu: (
                "QEMU emulator version 7.2.22".into(),
                "/usr/bin/qemu".into(),
            ),
            method: "m".into(),
            rows: rows(&probe, &linux),
            probe,
            direct: direct(),
            linux,
            sections: vec![Box::new(section)],
            wall_clock_s: 1.0,
        };

        let json = report.json();

        assert_eq!(
            json["qemu"]["version"],
            json!("QEMU emulator version 7.2.22")
        );
        assert_eq!(json["rows"][2]["pinfold_instructions"], json!(411.0));
        assert_eq!(
            json["runs"]["probe"]["bare"][0]["sgi"]["method"],
            json!("wfi-both")
        );
        assert_eq!(
            json["runs"]["probe"]["pinfold"][1]["hvc"]["ticks"],
            json!(10500)
        );
        assert_eq!(json["image_size"]["pinfold_bin_bytes"], json!(2));
        assert_eq!(json["runs_identical"], json!(true));
        assert!(report.text().contains("QEMU: QEMU emulator version 7.2.22"));
    }
}
