//! The scaling section: exits per second per vCPU with one and with two
//! vCPUs trapping at once, on two CPUs, under multi-threaded TCG (no
//! icount: wall clock, noisy), for the default image and the chip-lock
//! ablation. The probe guest's scaling mode (tools/test-guest bench.rs
//! `scale`, bootargs `pinfold-bench=scale`) prints per measurement:
//!
//! ```text
//! [scale] PROBE scale env: cntfrq=62500000 window_ticks=12500000 rounds=3 psci=hvc
//! [scale] PROBE scale gicr: n=1 round=0 ticks=12500000 vcpu0=94810
//! [scale] PROBE scale gicr: n=2 round=0 ticks=12500000 vcpu0=37530 vcpu1=33680 late1=2
//! [scale] PROBE scale end
//! ```

use std::fmt::Write as _;

use serde_json::{json, Value};

use super::boot::median;
use super::lockstats::LockStats;
use super::table::group;
use super::Section;

/// The marker of a scaling line, wherever it sits in the console line.
pub const SCALE_MARKER: &str = "PROBE scale ";
/// The guest's last scaling line (`PROBE scale end` or `... end: skipped`).
pub const SCALE_END: &str = "PROBE scale end";

/// The exits the guest measures, in the order the report prints them.
pub const EXITS: [(&str, &str); 2] = [
    (
        "gicr",
        "GICR_ISENABLER0/ICENABLER0 writes of PPI 27 (timer PPI enable state)",
    ),
    ("hvc", "HVC PSCI_VERSION (control: no interrupt state)"),
];

/// One measurement: `n` vCPUs making `exit` exits for `ticks` counter
/// ticks, each vCPU's count (and how late it reached the window).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScaleSample {
    pub exit: String,
    pub n: usize,
    pub round: u64,
    pub ticks: u64,
    pub counts: Vec<u64>,
    /// Per vCPU: ticks after the window's start it began (0 for vCPU 0,
    /// which sets the start).
    pub late: Vec<u64>,
}

impl ScaleSample {
    /// One scaling line's measurement; `None` for other lines and for a
    /// line missing a field or with one that is not a number.
    pub fn parse(line: &str) -> Option<Self> {
        let rest = &line[line.find(SCALE_MARKER)? + SCALE_MARKER.len()..];
        let (exit, fields) = rest.split_once(':')?;
        if exit == "env" || exit.starts_with("end") || exit.contains(char::is_whitespace) {
            return None;
        }
        let field = |key: &str| -> Option<u64> {
            fields
                .split_whitespace()
                .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))?
                .parse()
                .ok()
        };
        let n = usize::try_from(field("n")?).ok().filter(|&n| n >= 1)?;
        let mut counts = Vec::new();
        let mut late = Vec::new();
        for vcpu in 0..n {
            counts.push(field(&format!("vcpu{vcpu}"))?);
            late.push(if vcpu == 0 {
                0
            } else {
                field(&format!("late{vcpu}"))?
            });
        }
        Some(ScaleSample {
            exit: exit.to_string(),
            n,
            round: field("round")?,
            ticks: field("ticks").filter(|&t| t != 0)?,
            counts,
            late,
        })
    }

    /// Exits per second of each vCPU over the part of the window it ran.
    pub fn rates(&self, cntfrq: u64) -> Vec<f64> {
        self.counts
            .iter()
            .zip(&self.late)
            .map(|(&count, &late)| {
                let ran = self.ticks.saturating_sub(late);
                if ran == 0 || cntfrq == 0 {
                    0.0
                } else {
                    count as f64 * cntfrq as f64 / ran as f64
                }
            })
            .collect()
    }

    /// The vCPUs' rates summed: the partition's exits per second.
    pub fn total(&self, cntfrq: u64) -> f64 {
        self.rates(cntfrq).iter().sum()
    }

    /// The mean of the vCPUs' rates: exits per second per vCPU.
    pub fn per_vcpu(&self, cntfrq: u64) -> f64 {
        let rates = self.rates(cntfrq);
        rates.iter().sum::<f64>() / rates.len().max(1) as f64
    }
}

/// Every scaling line of one boot.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScaleRun {
    pub cntfrq: Option<u64>,
    /// The env line's `window_ticks=` and `rounds=`.
    pub window_ticks: Option<u64>,
    pub rounds: Option<u64>,
    pub samples: Vec<ScaleSample>,
    /// Scaling lines that did not parse (a sample must not vanish unseen).
    pub malformed: usize,
    /// `PROBE scale end: skipped (why)`.
    pub skipped: Option<String>,
    /// The hypervisor's lock statistics after the last measurement.
    pub locks: Option<LockStats>,
}

impl ScaleRun {
    pub fn parse<'a>(lines: impl IntoIterator<Item = &'a str>) -> Self {
        let mut run = Self::default();
        for line in lines {
            let Some(at) = line.find(SCALE_MARKER) else {
                if let Some(stats) = LockStats::parse(line) {
                    run.locks = Some(stats);
                }
                continue;
            };
            let rest = &line[at + SCALE_MARKER.len()..];
            if let Some(env) = rest.strip_prefix("env:") {
                let number = |key: &str| {
                    env.split_whitespace()
                        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
                        .and_then(|v| v.parse().ok())
                };
                run.cntfrq = number("cntfrq");
                run.window_ticks = number("window_ticks");
                run.rounds = number("rounds");
            } else if let Some(end) = rest.strip_prefix("end") {
                if let Some(why) = end.trim().strip_prefix(": skipped") {
                    let why = why.trim();
                    let why = why
                        .strip_prefix('(')
                        .and_then(|w| w.strip_suffix(')'))
                        .unwrap_or(why);
                    run.skipped = Some(why.to_string());
                }
            } else if let Some(sample) = ScaleSample::parse(line) {
                run.samples.push(sample);
            } else {
                run.malformed += 1;
            }
        }
        run
    }

    /// Every exit of `exit` the guest counted, over all measurements.
    pub fn exits(&self, exit: &str) -> u64 {
        self.samples
            .iter()
            .filter(|s| s.exit == exit)
            .flat_map(|s| &s.counts)
            .sum()
    }
}

/// The boots of one image.
#[derive(Debug, Clone, PartialEq)]
pub struct ScaleImage {
    /// `default`, or the ablation feature.
    pub label: String,
    pub runs: Vec<ScaleRun>,
}

/// One cell of the table: an exit, an image, N.
#[derive(Debug, Clone, PartialEq)]
pub struct Cell {
    /// Median over every sample of exits per second per vCPU.
    pub median: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub samples: usize,
}

impl ScaleImage {
    /// Exits per second per vCPU of every sample of `exit` with `n` vCPUs.
    pub fn per_vcpu(&self, exit: &str, n: usize) -> Vec<f64> {
        self.rates(exit, n, ScaleSample::per_vcpu)
    }

    /// `rate` of every sample of `exit` with `n` vCPUs, each with its run's
    /// counter frequency.
    fn rates(&self, exit: &str, n: usize, rate: fn(&ScaleSample, u64) -> f64) -> Vec<f64> {
        self.runs
            .iter()
            .flat_map(|run| {
                let cntfrq = run.cntfrq.unwrap_or(0);
                run.samples
                    .iter()
                    .filter(move |s| s.exit == exit && s.n == n)
                    .map(move |s| rate(s, cntfrq))
            })
            .collect()
    }

    /// The median over every sample of `exit` with `n` vCPUs of all vCPUs'
    /// exits per second together.
    pub fn total(&self, exit: &str, n: usize) -> Option<f64> {
        let totals = self.rates(exit, n, ScaleSample::total);
        median(&totals)
    }

    pub fn cell(&self, exit: &str, n: usize) -> Cell {
        let values = self.per_vcpu(exit, n);
        Cell {
            median: median(&values),
            min: values.iter().copied().reduce(f64::min),
            max: values.iter().copied().reduce(f64::max),
            samples: values.len(),
        }
    }

    /// N = 2 over N = 1 (1.0 = flat scaling).
    pub fn scaling(&self, exit: &str) -> Option<f64> {
        let one = self.cell(exit, 1).median.filter(|&v| v > 0.0)?;
        Some(self.cell(exit, 2).median? / one)
    }
}

/// The section.
#[derive(Debug, Clone, PartialEq)]
pub struct ScaleSection {
    pub method: String,
    /// /proc/loadavg when the section started (the host is shared).
    pub host_load: Option<String>,
    pub images: Vec<ScaleImage>,
    /// The section's own wall time (builds included).
    pub wall_clock_s: f64,
}

fn rate(value: Option<f64>) -> String {
    value.map_or_else(|| "-".into(), |v| group(v.round()))
}

impl Section for ScaleSection {
    fn key(&self) -> &'static str {
        "scaling"
    }

    fn text(&self) -> String {
        let mut t = String::from(
            "== Scaling: exits per second per vCPU, N = 1 and 2 vCPUs on 2 CPUs (WALL CLOCK, \
             multi-threaded TCG on a shared 2-core host: noisy) ==\n",
        );
        let _ = writeln!(t, "method: {}", self.method);
        if let Some(load) = &self.host_load {
            let _ = writeln!(t, "host load average at the start (1, 5, 15 min): {load}");
        }
        let _ = writeln!(
            t,
            "{:<70} {:<18} {:>10} {:>10} {:>9} {:>12} {:>8} {:>21}",
            "exit",
            "image",
            "N=1 /s",
            "N=2 /s",
            "N=2/N=1",
            "N=2 total/s",
            "samples",
            "N=2 min..max"
        );
        for (exit, label) in EXITS {
            for (i, image) in self.images.iter().enumerate() {
                let (one, two) = (image.cell(exit, 1), image.cell(exit, 2));
                let _ = writeln!(
                    t,
                    "{:<70} {:<18} {:>10} {:>10} {:>9} {:>12} {:>8} {:>21}",
                    if i == 0 { label } else { "" },
                    image.label,
                    rate(one.median),
                    rate(two.median),
                    image
                        .scaling(exit)
                        .map_or_else(|| "-".into(), |r| format!("{r:.2}")),
                    rate(image.total(exit, 2)),
                    format!("{}+{}", one.samples, two.samples),
                    format!("{}..{}", rate(two.min), rate(two.max)),
                );
            }
        }
        let _ = writeln!(
            t,
            "(/s = exits per second per vCPU, medians; N=2/N=1 = 1.00 is flat scaling; N=2 \
             total/s = both vCPUs together: about N=1's figure means the host gave QEMU one \
             core's worth, whatever the hypervisor does)"
        );
        for image in &self.images {
            let runs: Vec<String> = image
                .runs
                .iter()
                .map(|run| match &run.locks {
                    Some(l) => format!(
                        "timer_ppi={} for {} gicr exits, hot={}",
                        l.path("timer_ppi"),
                        run.exits("gicr"),
                        l.hot
                    ),
                    None => "no stats line".into(),
                })
                .collect();
            let _ = writeln!(
                t,
                "shared-lock acquisitions, {} (per boot, Ctrl-A s after the last window): {}",
                image.label,
                runs.join("; ")
            );
        }
        let _ = writeln!(t, "section wall clock: {:.1} s", self.wall_clock_s);
        for image in &self.images {
            for run in &image.runs {
                if let Some(why) = &run.skipped {
                    let _ = writeln!(t, "note: {}: the guest skipped: {why}", image.label);
                }
                if run.malformed != 0 {
                    let _ = writeln!(
                        t,
                        "note: {}: {} scaling lines did not parse",
                        image.label, run.malformed
                    );
                }
            }
        }
        t
    }

    fn json(&self) -> Value {
        let images: Vec<Value> = self
            .images
            .iter()
            .map(|image| {
                let cells: Vec<Value> = EXITS
                    .iter()
                    .flat_map(|&(exit, _)| {
                        [1, 2].map(|n| {
                            let cell = image.cell(exit, n);
                            json!({
                                "exit": exit,
                                "vcpus": n,
                                "exits_per_second_per_vcpu_median": cell.median,
                                "exits_per_second_total_median": image.total(exit, n),
                                "min": cell.min,
                                "max": cell.max,
                                "samples": cell.samples,
                            })
                        })
                    })
                    .collect();
                let runs: Vec<Value> = image
                    .runs
                    .iter()
                    .map(|run| {
                        json!({
                            "cntfrq": run.cntfrq,
                            "skipped": run.skipped,
                            "malformed_lines": run.malformed,
                            "gicr_exits": run.exits("gicr"),
                            "hypervisor_locks": run.locks.as_ref().map(LockStats::json),
                            "samples": run.samples.iter().map(|s| json!({
                                "exit": s.exit,
                                "vcpus": s.n,
                                "round": s.round,
                                "ticks": s.ticks,
                                "counts": s.counts,
                                "late_ticks": s.late,
                            })).collect::<Vec<_>>(),
                        })
                    })
                    .collect();
                let scaling: serde_json::Map<String, Value> = EXITS
                    .iter()
                    .map(|&(exit, _)| (exit.to_string(), json!(image.scaling(exit))))
                    .collect();
                json!({
                    "image": image.label,
                    "cells": cells,
                    "n2_over_n1": scaling,
                    "runs": runs,
                })
            })
            .collect();
        json!({
            "method": self.method,
            "wall_clock": true,
            "host_load": self.host_load,
            "images": images,
            "wall_clock_s": self.wall_clock_s,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = "\
[scale] PROBE mode: scaling (bootargs `pinfold-bench=scale`): no probes, no bench loops
[scale] PROBE scale env: cntfrq=62500000 window_ticks=12500000 rounds=2 psci=hvc
[scale] PROBE scale gicr: n=1 round=0 ticks=12500000 vcpu0=100000
[scale] PROBE scale gicr: n=2 round=0 ticks=12500000 vcpu0=40000 vcpu1=30000 late1=3125000
[scale] PROBE scale hvc: n=1 round=0 ticks=12500000 vcpu0=150000
[scale] PROBE scale hvc: n=2 round=0 ticks=12500000 vcpu0=90000 vcpu1=90000 late1=0
[scale] PROBE scale gicr: n=1 round=1 ticks=12500000 vcpu0=80000
[scale] PROBE scale gicr: n=2 round=1 ticks=12500000 vcpu0=50000 vcpu1=50000 late1=0
[scale] PROBE scale end
pinfold: stats hot_path_cross_cpu_locks=260000 exits=1 injected=0 dropped=0 shared_locks: timer_ppi=260000";

    fn image(label: &str, text: &str) -> ScaleImage {
        ScaleImage {
            label: label.into(),
            runs: vec![ScaleRun::parse(text.lines())],
        }
    }

    #[test]
    fn every_measurement_is_read_with_each_vcpus_count() {
        let run = ScaleRun::parse(RUN.lines());

        assert_eq!(run.cntfrq, Some(62_500_000));
        assert_eq!((run.window_ticks, run.rounds), (Some(12_500_000), Some(2)));
        assert_eq!(run.samples.len(), 6);
        assert_eq!(run.malformed, 0);
        assert_eq!(run.skipped, None);
        assert_eq!(run.exits("gicr"), 350_000);
        assert_eq!(run.locks.map(|l| l.path("timer_ppi")), Some(260_000));
        let two = &run.samples[1];
        assert_eq!((two.exit.as_str(), two.n, two.round), ("gicr", 2, 0));
        assert_eq!(two.counts, [40_000, 30_000]);
        assert_eq!(two.late, [0, 3_125_000]);
    }

    #[test]
    fn a_late_vcpu_is_rated_over_the_part_of_the_window_it_ran() {
        let run = ScaleRun::parse(RUN.lines());

        // 0.2 s window; vCPU 1 came 0.05 s late and ran 0.15 s.
        let rates = run.samples[1].rates(62_500_000);

        assert_eq!(rates, [200_000.0, 200_000.0]);
        assert_eq!(run.samples[1].per_vcpu(62_500_000), 200_000.0);
    }

    #[test]
    fn cells_are_medians_over_rounds_and_scaling_is_n2_over_n1() {
        let image = image("default", RUN);

        let one = image.cell("gicr", 1);
        assert_eq!(one.median, Some(450_000.0));
        assert_eq!(
            (one.min, one.max, one.samples),
            (Some(400_000.0), Some(500_000.0), 2)
        );
        assert_eq!(image.cell("gicr", 2).median, Some(225_000.0));
        assert_eq!(image.scaling("gicr"), Some(0.5));
        assert_eq!(image.scaling("hvc"), Some(0.6));
        assert_eq!(image.total("gicr", 2), Some(450_000.0));
        assert_eq!(image.total("hvc", 1), Some(750_000.0));
    }

    #[test]
    fn malformed_and_skipped_lines_are_kept_as_such() {
        let run = ScaleRun::parse(
            "PROBE scale gicr: n=2 round=0 ticks=5 vcpu0=1\n\
             PROBE scale gicr: n=1 round=0 ticks=5 vcpu0=x1\n\
             PROBE scale gicr: n=1 round=0 ticks=0 vcpu0=1\n\
             PROBE scale end: skipped (CPU_ON MPIDR 1 -> -2: one vCPU)"
                .lines(),
        );

        assert!(run.samples.is_empty());
        assert_eq!(run.malformed, 3);
        assert_eq!(
            run.skipped.as_deref(),
            Some("CPU_ON MPIDR 1 -> -2: one vCPU")
        );
        let section = ScaleSection {
            method: "m".into(),
            host_load: None,
            images: vec![ScaleImage {
                label: "default".into(),
                runs: vec![run],
            }],
            wall_clock_s: 1.0,
        };
        let text = section.text();
        assert!(text.contains("3 scaling lines did not parse"), "{text}");
        assert!(text.contains("the guest skipped"), "{text}");
    }

    #[test]
    fn text_and_json_are_labelled_wall_clock_per_image() {
        let section = ScaleSection {
            method: "m".into(),
            host_load: Some("1.00 2.00 3.00".into()),
            images: vec![image("default", RUN), image("ablate-chip-lock", RUN)],
            wall_clock_s: 1.0,
        };

        let text = section.text();
        let json = section.json();

        assert!(text.contains("WALL CLOCK"));
        assert!(text.contains("450,000"), "{text}");
        assert!(
            text.contains("ablate-chip-lock (per boot, Ctrl-A s after the last window): timer_ppi=260000 for 350000 gicr exits"),
            "{text}"
        );
        assert_eq!(json["wall_clock"], json!(true));
        assert_eq!(json["images"][1]["image"], json!("ablate-chip-lock"));
        assert_eq!(json["images"][0]["n2_over_n1"]["gicr"], json!(0.5));
        assert_eq!(
            json["images"][0]["cells"][1]["exits_per_second_per_vcpu_median"],
            json!(225_000.0)
        );
        assert_eq!(
            json["images"][0]["runs"][0]["samples"][1]["late_ticks"][1],
            json!(3_125_000)
        );
    }
}
