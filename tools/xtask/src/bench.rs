//! `cargo xtask bench`: exit round-trip cost (deterministic, under
//! `-icount`), wall-clock boot time of the default plan, and image size;
//! prints a table and writes `target/pinfold/bench.json`.
//!
//! Performance is measured here and never asserted as a time limit in a
//! test: every number is printed next to the method that produced it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::build::{llvm_tool, Builder, Built, DEFAULT_CONFIG};
use crate::cmd;
use crate::error::{IoContext, XtaskError};
use crate::harness::{number_after, Line, QemuRun};
use crate::provision::BARE_TARGET;
use crate::qemu::{qemu_command, Extra};
use crate::Workspace;

/// The plan the exit benchmark boots: the probe guest alone on CPU 1.
pub const BENCH_CONFIG: &str = "vm-configs/qemu-virt/bench.toml";

/// Exit benchmark boots; under `-icount` they must print identical numbers.
const EXIT_RUNS: usize = 2;
/// Default-plan boots timed; the median is reported.
const BOOT_RUNS: usize = 3;

/// `-icount` exponent: each instruction advances QEMU's virtual clock by
/// 2^shift ns. 0 makes one instruction exactly one nanosecond.
const ICOUNT_SHIFT: u32 = 0;
/// `sleep=off`: when every vCPU idles, virtual time jumps to the next timer
/// instead of following the host clock, so host load cannot leak in.
const ICOUNT_ARG: &str = "shift=0,sleep=off";
/// icount runs all vCPUs round-robin on one host thread; QEMU refuses
/// `thread=multi` together with `-icount`.
const ICOUNT_ACCEL: &str = "tcg,thread=single";

/// Generous: a probe boot takes well under a second and a default-plan boot
/// a few seconds, but the host is shared and may be busy.
const EXIT_DEADLINE: Duration = Duration::from_secs(120);
const BOOT_DEADLINE: Duration = Duration::from_secs(240);

const BENCH_MARKER: &str = "[probe] PROBE bench:";
const RUN_INIT: &str = "Run /init as init process";
/// Partitions of the default plan whose boot is timed.
const BOOT_PARTITIONS: [&str; 2] = ["alpha", "beta"];

/// What the probe's `PROBE bench:` line reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitSample {
    /// Round trips per measured loop.
    pub iterations: u64,
    /// Counter ticks for `iterations` HVC PSCI_VERSION calls.
    pub hvc_psci_version_ticks: u64,
    /// Counter ticks for `iterations` reads of the emulated GICD_TYPER.
    pub gicd_read_ticks: u64,
    /// CNTFRQ_EL0 as the guest read it, in Hz.
    pub cntfrq: u64,
}

impl ExitSample {
    /// Parses `... PROBE bench: iterations=N hvc_psci_version_ticks=T
    /// gicd_read_ticks=T cntfrq=F`; `None` if a field is missing.
    pub fn parse(line: &str) -> Option<Self> {
        if !line.contains("PROBE bench:") {
            return None;
        }
        Some(Self {
            iterations: number_after(line, "iterations=")?,
            hvc_psci_version_ticks: number_after(line, "hvc_psci_version_ticks=")?,
            gicd_read_ticks: number_after(line, "gicd_read_ticks=")?,
            cntfrq: number_after(line, "cntfrq=")?,
        })
    }

    /// The HVC round trip's cost.
    pub fn hvc(&self) -> Option<PerTrip> {
        PerTrip::new(self.hvc_psci_version_ticks, self.iterations, self.cntfrq)
    }

    /// The trapped GICD_TYPER read's cost.
    pub fn gicd_read(&self) -> Option<PerTrip> {
        PerTrip::new(self.gicd_read_ticks, self.iterations, self.cntfrq)
    }
}

/// The cost of one round trip.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PerTrip {
    pub ticks: f64,
    /// Instructions QEMU executed (guest EL1 and hypervisor EL2 alike).
    pub instructions: f64,
}

impl PerTrip {
    /// With `-icount shift=0` a tick of a `cntfrq` Hz counter lasts
    /// 1e9 / cntfrq ns of virtual time, i.e. that many instructions. `None`
    /// when the counts cannot be divided (no iterations, counter at 0 Hz).
    pub fn new(total_ticks: u64, iterations: u64, cntfrq: u64) -> Option<Self> {
        if iterations == 0 || cntfrq == 0 {
            return None;
        }
        let ticks = total_ticks as f64 / iterations as f64;
        Some(Self {
            ticks,
            instructions: ticks * instructions_per_tick(cntfrq),
        })
    }
}

/// Instructions per counter tick under `-icount shift=ICOUNT_SHIFT`.
pub fn instructions_per_tick(cntfrq: u64) -> f64 {
    let ns_per_instruction = f64::from(1u32 << ICOUNT_SHIFT);
    1e9 / cntfrq as f64 / ns_per_instruction
}

/// One timed boot of the default plan.
#[derive(Debug, Clone, PartialEq)]
pub struct BootSample {
    /// Per partition of `BOOT_PARTITIONS`: wall-clock seconds from QEMU's
    /// start to its `PINFOLD-GUEST-UP` line.
    pub up_s: Vec<f64>,
    /// Per partition: the guest kernel's printk timestamp of `Run /init`,
    /// `None` if the log did not have it.
    pub run_init_guest_s: Vec<Option<f64>>,
}

/// The printk timestamp (seconds) of `partition`'s `Run /init as init
/// process` line, as in `[alpha] [    2.186079] Run /init as init process`.
pub fn run_init_seconds(lines: &[Line], partition: &str) -> Option<f64> {
    let prefix = format!("[{partition}] ");
    lines.iter().find_map(|line| {
        let rest = line.text.strip_prefix(&prefix)?;
        if !rest.contains(RUN_INIT) {
            return None;
        }
        printk_seconds(rest)
    })
}

/// The leading `[  seconds.micros]` of a kernel log line.
fn printk_seconds(line: &str) -> Option<f64> {
    let inside = line.trim_start().strip_prefix('[')?;
    let (stamp, _) = inside.split_once(']')?;
    stamp.trim().parse().ok()
}

/// The median of `values`, `None` when empty. An even count averages the
/// two middle values.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    match sorted.len() {
        0 => None,
        n if n % 2 == 1 => sorted.get(mid).copied(),
        _ => Some((sorted[mid - 1] + sorted[mid]) / 2.0),
    }
}

/// Section sizes of the EL2 ELF, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImageSize {
    /// `.text*` and `.head` (the arm64 Image header, which holds the first
    /// branch).
    pub text: u64,
    pub rodata: u64,
    /// `.data*` and `.got*`.
    pub data: u64,
    /// Other loaded sections: the dynamic relocations the image applies to
    /// itself at boot and their symbol tables.
    pub other: u64,
    pub bss: u64,
}

impl ImageSize {
    /// Bytes that must be loaded: everything but BSS and non-loaded sections.
    pub fn loadable(&self) -> u64 {
        self.text + self.rodata + self.data + self.other
    }
}

/// Sections that are in the ELF file but never loaded.
const NOT_LOADED: [&str; 6] = [
    ".debug",
    ".comment",
    ".symtab",
    ".strtab",
    ".shstrtab",
    ".note.GNU-stack",
];

/// Parses `llvm-size -A` output (`section size addr` rows, then `Total`).
pub fn parse_llvm_size(text: &str) -> Result<ImageSize, String> {
    let mut size = ImageSize::default();
    let mut rows = 0;
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let (Some(name), Some(bytes)) = (fields.next(), fields.next()) else {
            continue;
        };
        if !name.starts_with('.') {
            // The file name, the header and `Total`.
            continue;
        }
        let bytes: u64 = bytes
            .parse()
            .map_err(|_| format!("section {name} has size `{bytes}`, not a number"))?;
        rows += 1;
        let bucket = if NOT_LOADED.iter().any(|p| name.starts_with(p)) {
            continue;
        } else if [".bss", ".sbss", ".tbss"]
            .iter()
            .any(|p| name.starts_with(p))
        {
            &mut size.bss
        } else if name.starts_with(".text") || name == ".head" {
            &mut size.text
        } else if name.starts_with(".rodata") {
            &mut size.rodata
        } else if name.starts_with(".data") || name.starts_with(".got") {
            &mut size.data
        } else {
            &mut size.other
        };
        *bucket += bytes;
    }
    if rows == 0 {
        return Err("no `.section size addr` rows".into());
    }
    Ok(size)
}

/// A JSON value, enough for the report (no dependency for one file).
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Int(u64),
    /// Written with three decimals; a non-finite value becomes `null`.
    Float(f64),
    Str(String),
    Array(Vec<Json>),
    Object(Vec<(&'static str, Json)>),
}

impl Json {
    pub fn render(&self, out: &mut String, indent: usize) {
        let pad = |n: usize| "  ".repeat(n);
        match self {
            Self::Null => out.push_str("null"),
            Self::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Self::Int(n) => out.push_str(&n.to_string()),
            Self::Float(x) if x.is_finite() => out.push_str(&format!("{x:.3}")),
            Self::Float(_) => out.push_str("null"),
            Self::Str(s) => push_json_string(out, s),
            Self::Array(items) if items.is_empty() => out.push_str("[]"),
            Self::Array(items) => {
                out.push_str("[\n");
                for (i, item) in items.iter().enumerate() {
                    out.push_str(&pad(indent + 1));
                    item.render(out, indent + 1);
                    out.push_str(if i + 1 < items.len() { ",\n" } else { "\n" });
                }
                out.push_str(&pad(indent));
                out.push(']');
            }
            Self::Object(fields) if fields.is_empty() => out.push_str("{}"),
            Self::Object(fields) => {
                out.push_str("{\n");
                for (i, (key, value)) in fields.iter().enumerate() {
                    out.push_str(&pad(indent + 1));
                    push_json_string(out, key);
                    out.push_str(": ");
                    value.render(out, indent + 1);
                    out.push_str(if i + 1 < fields.len() { ",\n" } else { "\n" });
                }
                out.push_str(&pad(indent));
                out.push('}');
            }
        }
    }
}

fn push_json_string(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Picks one loop's total ticks out of a sample.
type TicksOf = fn(&ExitSample) -> u64;

/// Everything one `cargo xtask bench` measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub exit_method: String,
    pub exits: Vec<ExitSample>,
    pub boot_method: String,
    pub boots: Vec<BootSample>,
    pub size_method: String,
    pub image: ImageSize,
    /// The flat EL2 image (BSS included as zeros).
    pub el2_bin_bytes: u64,
    /// The final image: EL2 image plus the default plan's payload.
    pub pinfold_bin_bytes: u64,
}

impl Report {
    /// Whether every exit run printed the same numbers as the first.
    pub fn exits_identical(&self) -> bool {
        self.exits.windows(2).all(|pair| pair[0] == pair[1])
    }

    fn up_column(&self, partition: usize) -> Vec<f64> {
        self.boots
            .iter()
            .filter_map(|b| b.up_s.get(partition).copied())
            .collect()
    }

    fn run_init_column(&self, partition: usize) -> Vec<f64> {
        self.boots
            .iter()
            .filter_map(|b| b.run_init_guest_s.get(partition).copied().flatten())
            .collect()
    }

    pub fn to_json(&self) -> String {
        let opt = |x: Option<f64>| x.map_or(Json::Null, Json::Float);
        let trip = |t: Option<PerTrip>| match t {
            Some(t) => Json::Object(vec![
                ("ticks_per_round_trip", Json::Float(t.ticks)),
                ("instructions_per_round_trip", Json::Float(t.instructions)),
            ]),
            None => Json::Null,
        };
        let exit_runs = self
            .exits
            .iter()
            .map(|s| {
                Json::Object(vec![
                    ("iterations", Json::Int(s.iterations)),
                    ("cntfrq_hz", Json::Int(s.cntfrq)),
                    (
                        "hvc_psci_version_ticks",
                        Json::Int(s.hvc_psci_version_ticks),
                    ),
                    ("gicd_read_ticks", Json::Int(s.gicd_read_ticks)),
                    ("hvc_psci_version", trip(s.hvc())),
                    ("gicd_typer_read", trip(s.gicd_read())),
                ])
            })
            .collect();
        let per_partition = |column: &dyn Fn(usize) -> Vec<Option<f64>>| {
            Json::Object(
                BOOT_PARTITIONS
                    .iter()
                    .enumerate()
                    .map(|(i, name)| (*name, Json::Array(column(i).into_iter().map(opt).collect())))
                    .collect(),
            )
        };
        let up = |i: usize| {
            self.boots
                .iter()
                .map(|b| b.up_s.get(i).copied())
                .collect::<Vec<_>>()
        };
        let init = |i: usize| {
            self.boots
                .iter()
                .map(|b| b.run_init_guest_s.get(i).copied().flatten())
                .collect::<Vec<_>>()
        };
        let medians = |column: &dyn Fn(usize) -> Vec<f64>| {
            Json::Object(
                BOOT_PARTITIONS
                    .iter()
                    .enumerate()
                    .map(|(i, name)| (*name, opt(median(&column(i)))))
                    .collect(),
            )
        };
        let report = Json::Object(vec![
            (
                "exit_round_trip",
                Json::Object(vec![
                    ("method", Json::Str(self.exit_method.clone())),
                    ("runs", Json::Array(exit_runs)),
                    ("runs_identical", Json::Bool(self.exits_identical())),
                ]),
            ),
            (
                "boot_default",
                Json::Object(vec![
                    ("method", Json::Str(self.boot_method.clone())),
                    ("wall_clock_up_s", per_partition(&up)),
                    ("wall_clock_up_median_s", medians(&|i| self.up_column(i))),
                    ("guest_run_init_s", per_partition(&init)),
                    (
                        "guest_run_init_median_s",
                        medians(&|i| self.run_init_column(i)),
                    ),
                ]),
            ),
            (
                "image_size",
                Json::Object(vec![
                    ("method", Json::Str(self.size_method.clone())),
                    ("text_bytes", Json::Int(self.image.text)),
                    ("rodata_bytes", Json::Int(self.image.rodata)),
                    ("data_bytes", Json::Int(self.image.data)),
                    ("other_loadable_bytes", Json::Int(self.image.other)),
                    ("loadable_bytes", Json::Int(self.image.loadable())),
                    ("bss_bytes", Json::Int(self.image.bss)),
                    ("pinfold_el2_bin_bytes", Json::Int(self.el2_bin_bytes)),
                    ("pinfold_bin_bytes", Json::Int(self.pinfold_bin_bytes)),
                ]),
            ),
        ]);
        let mut out = String::new();
        report.render(&mut out, 0);
        out.push('\n');
        out
    }

    /// The human-readable table.
    pub fn table(&self) -> String {
        let mut t = String::new();
        let secs = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |x| format!("{x:.3}"));
        // `write!` to a String cannot fail.
        let _ = writeln!(t, "== Exit round trip (deterministic) ==");
        let _ = writeln!(t, "method: {}", self.exit_method);
        let _ = writeln!(
            t,
            "{:<28} {:>4} {:>12} {:>12} {:>18}",
            "exit", "run", "total ticks", "ticks/trip", "instructions/trip"
        );
        let loops: [(&str, TicksOf); 2] = [
            ("HVC PSCI_VERSION", |s| s.hvc_psci_version_ticks),
            ("GICD_TYPER read (MMIO trap)", |s| s.gicd_read_ticks),
        ];
        for (name, total_of) in loops {
            for (run, sample) in self.exits.iter().enumerate() {
                let total = total_of(sample);
                let (ticks, instructions) = PerTrip::new(total, sample.iterations, sample.cntfrq)
                    .map_or(("-".into(), "-".into()), |p| {
                        (format!("{:.3}", p.ticks), format!("{:.1}", p.instructions))
                    });
                let _ = writeln!(
                    t,
                    "{:<28} {:>4} {:>12} {:>12} {:>18}",
                    name,
                    run + 1,
                    total,
                    ticks,
                    instructions
                );
            }
        }
        let verdict = if self.exits_identical() {
            "identical (as expected under -icount)"
        } else {
            "DIFFER: the measurement is not deterministic, investigate before trusting it"
        };
        let _ = writeln!(t, "runs: {verdict}");

        let _ = writeln!(t, "\n== Boot of the default plan (WALL CLOCK, noisy) ==");
        let _ = writeln!(t, "method: {}", self.boot_method);
        let mut header = format!("{:<8}", "run");
        for name in BOOT_PARTITIONS {
            let _ = write!(
                header,
                " {:>16} {:>20}",
                format!("{name} UP wall s"),
                format!("{name} /init guest s")
            );
        }
        let _ = writeln!(t, "{header}");
        for (run, boot) in self.boots.iter().enumerate() {
            let mut row = format!("{:<8}", run + 1);
            for i in 0..BOOT_PARTITIONS.len() {
                let _ = write!(
                    row,
                    " {:>16} {:>20}",
                    secs(boot.up_s.get(i).copied()),
                    secs(boot.run_init_guest_s.get(i).copied().flatten())
                );
            }
            let _ = writeln!(t, "{row}");
        }
        let mut row = format!("{:<8}", "median");
        for i in 0..BOOT_PARTITIONS.len() {
            let _ = write!(
                row,
                " {:>16} {:>20}",
                secs(median(&self.up_column(i))),
                secs(median(&self.run_init_column(i)))
            );
        }
        let _ = writeln!(t, "{row}");

        let _ = writeln!(t, "\n== Image size ==");
        let _ = writeln!(t, "method: {}", self.size_method);
        let image = &self.image;
        for (name, bytes) in [
            ("text (.head + .text)", image.text),
            ("rodata", image.rodata),
            ("data", image.data),
            ("other loaded (.rela.dyn, .dyn*)", image.other),
            ("loadable total", image.loadable()),
            ("bss", image.bss),
            ("pinfold-el2.bin (flat, BSS as zeros)", self.el2_bin_bytes),
            (
                "pinfold.bin (EL2 + default payload)",
                self.pinfold_bin_bytes,
            ),
        ] {
            let _ = writeln!(
                t,
                "{name:<38} {bytes:>12} bytes {:>10.1} KiB",
                bytes as f64 / 1024.0
            );
        }
        t
    }
}

/// Runs every benchmark, prints the table and writes the JSON report.
pub fn run(ws: &Workspace) -> Result<(), XtaskError> {
    let mut builder = Builder::new(ws);
    let default = builder.build(Path::new(DEFAULT_CONFIG), "pinfold.bin")?;
    let bench = builder.build(Path::new(BENCH_CONFIG), "bench.bin")?;
    let logs = ws.root.join("target/pinfold/bench-logs");

    let (image, size_method) = image_size(ws)?;
    let el2_bin = ws.root.join("target/pinfold/pinfold-el2.bin");
    let el2_bin_bytes = file_len(&el2_bin)?;
    let pinfold_bin_bytes = file_len(&default.image)?;

    let mut exits = Vec::new();
    for run in 1..=EXIT_RUNS {
        let sample = exit_run(&bench, &logs.join(format!("exits-{run}.log")))?;
        println!("xtask: bench: exit run {run}/{EXIT_RUNS}: {sample:?}");
        exits.push(sample);
    }
    let cntfrq = exits.first().map_or(0, |s| s.cntfrq);
    let exit_method = format!(
        "{} back-to-back round trips per loop in the bare-metal probe (partition `probe` on CPU 1, \
         {BENCH_CONFIG}), timed with the virtual counter; QEMU TCG `-accel {ICOUNT_ACCEL} \
         -icount {ICOUNT_ARG}`, so 1 instruction = 1 ns of virtual time and one tick at \
         CNTFRQ={cntfrq} Hz = {:.0} instructions, counted over every vCPU (EL1 guest and EL2 \
         hypervisor alike; the CPUs without a partition idle in WFI), loop overhead and the \
         counter reads included",
        exits.first().map_or(0, |s| s.iterations),
        if cntfrq == 0 { f64::NAN } else { instructions_per_tick(cntfrq) },
    );

    let mut boots = Vec::new();
    for run in 1..=BOOT_RUNS {
        let sample = boot_run(&default, &logs.join(format!("boot-{run}.log")))?;
        println!(
            "xtask: bench: boot run {run}/{BOOT_RUNS}: UP at {:?} s wall, /init at {:?} s guest",
            sample.up_s, sample.run_init_guest_s
        );
        boots.push(sample);
    }
    let boot_method = format!(
        "wall clock from spawning QEMU to each `[<name>] PINFOLD-GUEST-UP` line, {BOOT_RUNS} \
         boots of {DEFAULT_CONFIG} under QEMU TCG (`-accel tcg,thread=multi`, {} vCPUs on {} \
         host CPUs) on a shared, noisy machine: compare only runs on the same host. `/init guest \
         s` is the guest kernel's own printk timestamp of `{RUN_INIT}` (guest time)",
        default.board.cpus,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );

    let report = Report {
        exit_method,
        exits,
        boot_method,
        boots,
        size_method,
        image,
        el2_bin_bytes,
        pinfold_bin_bytes,
    };
    println!("\n{}", report.table());
    let json_path = ws.root.join("target/pinfold/bench.json");
    std::fs::write(&json_path, report.to_json())
        .context(|| format!("writing {}", json_path.display()))?;
    println!("xtask: bench: wrote {}", ws.relative(&json_path));
    Ok(())
}

fn file_len(path: &Path) -> Result<u64, XtaskError> {
    std::fs::metadata(path)
        .map(|m| m.len())
        .context(|| format!("reading the size of {}", path.display()))
}

/// `llvm-size -A` on the EL2 ELF; also returns the method line.
fn image_size(ws: &Workspace) -> Result<(ImageSize, String), XtaskError> {
    let elf: PathBuf = ws
        .root
        .join("target")
        .join(BARE_TARGET)
        .join("release/pinfold");
    let llvm_size = llvm_tool("llvm-size")?;
    let text = cmd::stdout_of(std::process::Command::new(&llvm_size).arg("-A").arg(&elf))?;
    let size = parse_llvm_size(&text).map_err(|why| XtaskError::BadFile {
        path: elf.clone(),
        why: format!("llvm-size -A: {why}"),
    })?;
    let method = format!(
        "`llvm-size -A {}` (sections summed by name; .debug*, .comment, symbol tables not \
         loaded); file sizes of target/pinfold/pinfold-el2.bin and pinfold.bin",
        ws.relative(&elf)
    );
    Ok((size, method))
}

/// Boots the probe plan under `-icount` and reads its bench line.
fn exit_run(bench: &Built, log: &Path) -> Result<ExitSample, XtaskError> {
    let extra = Extra {
        args: vec!["-icount".into(), ICOUNT_ARG.into()],
        accel: Some(ICOUNT_ACCEL.into()),
        ..Extra::default()
    };
    let qemu = QemuRun::spawn(qemu_command(&bench.board, &bench.image, &extra), log)?;
    let deadline = Instant::now() + EXIT_DEADLINE;
    let line = qemu
        .wait_for(&format!("`{BENCH_MARKER}`"), 0, deadline, |l| {
            l.contains(BENCH_MARKER)
        })
        .map_err(|err| bad_log(log, err.to_string()))?;
    ExitSample::parse(&line.text)
        .ok_or_else(|| bad_log(log, format!("cannot parse the bench line `{}`", line.text)))
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

    const BENCH_LINE: &str = "[probe] PROBE bench: iterations=1000 \
        hvc_psci_version_ticks=63804 gicd_read_ticks=90001 cntfrq=62500000";

    fn line(index: usize, text: &str) -> Line {
        Line {
            index,
            at: Duration::ZERO,
            text: text.into(),
        }
    }

    #[test]
    fn bench_line_parses_every_field() {
        let sample = ExitSample::parse(BENCH_LINE);

        assert_eq!(
            sample,
            Some(ExitSample {
                iterations: 1000,
                hvc_psci_version_ticks: 63804,
                gicd_read_ticks: 90001,
                cntfrq: 62_500_000,
            })
        );
    }

    #[test]
    fn bench_line_missing_a_field_is_refused() {
        let line = "[probe] PROBE bench: iterations=1000 hvc_psci_version_ticks=63804 cntfrq=1";

        assert_eq!(ExitSample::parse(line), None);
    }

    #[test]
    fn other_probe_lines_are_not_bench_lines() {
        assert_eq!(ExitSample::parse("[probe] PROBE alive iterations=3"), None);
    }

    #[test]
    fn tick_of_62_5_mhz_counter_is_16_instructions_at_shift_0() {
        assert_eq!(instructions_per_tick(62_500_000), 16.0);
    }

    #[test]
    fn per_trip_divides_by_iterations_and_scales_to_instructions() {
        let trip = PerTrip::new(63804, 1000, 62_500_000);

        assert_eq!(
            trip,
            Some(PerTrip {
                ticks: 63.804,
                instructions: 63.804 * 16.0,
            })
        );
    }

    #[test]
    fn per_trip_with_zero_frequency_is_none() {
        assert_eq!(PerTrip::new(63804, 1000, 0), None);
        assert_eq!(PerTrip::new(63804, 0, 62_500_000), None);
    }

    #[test]
    fn run_init_timestamp_is_read_from_the_named_partition() {
        let lines = [
            line(0, "[beta] [    2.430392] Run /init as init process"),
            line(1, "[alpha] [    2.186079] Run /init as init process"),
        ];

        assert_eq!(run_init_seconds(&lines, "alpha"), Some(2.186079));
        assert_eq!(run_init_seconds(&lines, "beta"), Some(2.430392));
    }

    #[test]
    fn run_init_without_printk_timestamp_is_none() {
        let lines = [line(0, "[alpha] Run /init as init process")];

        assert_eq!(run_init_seconds(&lines, "alpha"), None);
    }

    #[test]
    fn run_init_of_another_partition_whose_name_extends_is_ignored() {
        let lines = [line(
            0,
            "[alphabet] [    1.000000] Run /init as init process",
        )];

        assert_eq!(run_init_seconds(&lines, "alpha"), None);
    }

    #[test]
    fn median_of_odd_count_is_the_middle_value() {
        assert_eq!(median(&[5.0, 1.0, 3.0]), Some(3.0));
    }

    #[test]
    fn median_of_even_count_averages_the_middle_pair() {
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
    }

    #[test]
    fn median_of_nothing_is_none() {
        assert_eq!(median(&[]), None);
    }

    const LLVM_SIZE: &str = "\
target/aarch64-unknown-none-softfloat/release/pinfold  :
section               size     addr
.head                   64        0
.text               119872     2048
.rodata               7856   122880
.rela.dyn             4440   130736
.dynsym                 24   135176
.dynamic               208   135256
.data                15456   139264
.bss               4734976   155648
.debug_info         785809        0
.comment                19        0
Total              7245327
";

    #[test]
    fn llvm_size_sections_are_bucketed_by_name() {
        let size = parse_llvm_size(LLVM_SIZE);

        assert_eq!(
            size,
            Ok(ImageSize {
                text: 64 + 119_872,
                rodata: 7856,
                data: 15_456,
                other: 4440 + 24 + 208,
                bss: 4_734_976,
            })
        );
    }

    #[test]
    fn loadable_excludes_bss_and_debug_sections() {
        let size = parse_llvm_size(LLVM_SIZE).unwrap_or_default();

        assert_eq!(
            size.loadable(),
            64 + 119_872 + 7856 + 15_456 + 4440 + 24 + 208
        );
    }

    #[test]
    fn llvm_size_without_sections_is_an_error() {
        assert!(parse_llvm_size("llvm-size: error: no such file").is_err());
    }

    #[test]
    fn llvm_size_with_non_numeric_size_is_an_error() {
        assert!(parse_llvm_size(".text  lots  0").is_err());
    }

    #[test]
    fn json_strings_escape_quotes_backslashes_and_control_characters() {
        let mut out = String::new();

        Json::Str("a \"b\" \\ c\n\t".into()).render(&mut out, 0);

        assert_eq!(out, r#""a \"b\" \\ c\n\u0009""#);
    }

    #[test]
    fn json_non_finite_float_is_null() {
        let mut out = String::new();

        Json::Array(vec![Json::Float(f64::NAN), Json::Float(1.5)]).render(&mut out, 0);

        assert_eq!(out, "[\n  null,\n  1.500\n]");
    }

    fn report(exits: Vec<ExitSample>) -> Report {
        Report {
            exit_method: "m".into(),
            exits,
            boot_method: "b".into(),
            boots: vec![BootSample {
                up_s: vec![4.0, 5.0],
                run_init_guest_s: vec![Some(2.0), None],
            }],
            size_method: "s".into(),
            image: ImageSize::default(),
            el2_bin_bytes: 1,
            pinfold_bin_bytes: 2,
        }
    }

    #[test]
    fn differing_exit_runs_are_flagged_in_table_and_json() {
        let first = ExitSample::parse(BENCH_LINE).unwrap_or(ExitSample {
            iterations: 0,
            hvc_psci_version_ticks: 0,
            gicd_read_ticks: 0,
            cntfrq: 0,
        });
        let second = ExitSample {
            gicd_read_ticks: first.gicd_read_ticks + 1,
            ..first
        };

        let report = report(vec![first, second]);

        assert!(!report.exits_identical());
        assert!(report.table().contains("DIFFER"));
        assert!(report.to_json().contains("\"runs_identical\": false"));
    }

    #[test]
    fn json_reports_per_trip_instructions_and_boot_medians() {
        let sample = ExitSample::parse(BENCH_LINE)
            .map(|s| vec![s, s])
            .unwrap_or_default();

        let json = report(sample).to_json();

        let compact: String = json.split_whitespace().collect();
        assert!(
            compact.contains("\"instructions_per_round_trip\":1020.864"),
            "{json}"
        );
        assert!(compact.contains("\"runs_identical\":true"), "{json}");
        assert!(
            compact.contains("\"guest_run_init_s\":{\"alpha\":[2.000],\"beta\":[null]}"),
            "{json}"
        );
        assert!(
            compact.contains("\"wall_clock_up_median_s\":{\"alpha\":4.000,\"beta\":5.000}"),
            "{json}"
        );
        assert!(compact.contains("\"pinfold_bin_bytes\":2"), "{json}");
    }
}
