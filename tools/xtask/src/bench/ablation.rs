//! The ablation section: the bench image built again with each ablation
//! feature of the EL2 image (platform/src/ablate.rs), the same probe run
//! under the same flags, and each one's rows against the default image's,
//! with the hypervisor's shared-lock counts read from its monitor's stats
//! line at the end of each run.

use std::fmt::Write as _;

use serde_json::{json, Value};

use super::lockstats::LockStats;
use super::probe::ProbeRun;
use super::table::group;
use super::Section;

/// One ablation: a cargo feature of the `pinfold` package that swaps a
/// mechanism of the hot paths for the conventional one it replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ablation {
    pub feature: &'static str,
    /// What the feature swaps, as printed.
    pub what: &'static str,
}

/// The ablations, in the order the report prints them.
pub const ABLATIONS: [Ablation; 2] = [
    Ablation {
        feature: "ablate-irq-fnptr",
        what: "the IRQ vectors load the root handler from a function pointer in data (`adrp; \
               ldr; blr`, as Linux's handle_arch_irq) instead of the one-instruction call site \
               patched at boot (hv::rtconst)",
    },
    Ablation {
        feature: "ablate-chip-lock",
        what: "the GICv3 per-CPU chip declares no lockless per-CPU state (IrqChipCaps { \
               percpu_state_lockless: false }), so timer PPI state changes on vCPU load/put and \
               guest GICR writes take the chip-wide lock (System::chip_lock)",
    },
];

/// A figure the ablation section compares, read from a probe run.
struct Compared {
    id: &'static str,
    label: &'static str,
    figure: fn(&ProbeRun) -> Option<f64>,
}

/// The rows each ablation is compared on: the IRQ paths (vtimer, SGI), the
/// HVC as a control that neither ablation touches, and vCPU load + put.
const COMPARED: [Compared; 5] = [
    Compared {
        id: "hvc_psci_version",
        label: "HVC PSCI_VERSION (control: no IRQ, no load/put)",
        figure: |r| r.per_iteration("hvc"),
    },
    Compared {
        id: "vtimer_to_handler",
        label: "vtimer IRQ: CVAL reached -> guest handler",
        figure: |r| r.vtimer("handler_ticks"),
    },
    Compared {
        id: "vtimer_back",
        label: "vtimer IRQ: CVAL -> back in interrupted code",
        figure: |r| r.vtimer("back_ticks"),
    },
    Compared {
        id: "sgi_round_trip",
        label: "SGI round trip vCPU0 -> vCPU1 -> vCPU0",
        figure: |r| r.per_iteration("sgi"),
    },
    Compared {
        id: "vcpu_load_put",
        label: "vCPU load + put: CPU_ON -> SGI back -> CPU_OFF",
        figure: |r| r.per_iteration("loadput"),
    },
];

/// The hot lock paths the section prints one by one.
const LOCK_PATHS: [&str; 3] = ["vcpu_load", "vcpu_put", "timer_ppi"];

/// The probe runs of one image.
#[derive(Debug, Clone, PartialEq)]
pub struct Variant {
    /// `None`: the default image.
    pub ablation: Option<Ablation>,
    pub runs: Vec<ProbeRun>,
}

impl Variant {
    /// The first run's figure, and whether every run agreed.
    fn figure(&self, compared: &Compared) -> (Option<f64>, bool) {
        let figures: Vec<Option<f64>> = self.runs.iter().map(compared.figure).collect();
        let same = figures.windows(2).all(|w| w[0] == w[1]);
        (figures.first().copied().flatten(), same)
    }

    /// The first run's lock statistics, and whether every run agreed.
    fn locks(&self) -> (Option<&LockStats>, bool) {
        let same = self.runs.windows(2).all(|w| w[0].locks == w[1].locks);
        (self.runs.first().and_then(|r| r.locks.as_ref()), same)
    }

    /// Round trips of the load/put loop (warm-up included): each is one
    /// load and one put of vCPU 1.
    fn loadput_rounds(&self) -> Option<u64> {
        let run = self.runs.first()?;
        Some(run.number("loadput", "iterations")? + run.number("loadput", "warmup").unwrap_or(0))
    }

    /// Refused CPU_ONs the load/put loop retried (they add HVCs).
    fn loadput_retries(&self) -> u64 {
        self.runs
            .iter()
            .filter_map(|r| r.number("loadput", "retries"))
            .sum()
    }
}

/// One compared figure, default vs ablated.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    pub id: &'static str,
    pub label: &'static str,
    pub default: Option<f64>,
    pub ablated: Option<f64>,
    /// Every run of both images agreed.
    pub identical_runs: bool,
}

impl Comparison {
    pub fn difference(&self) -> Option<f64> {
        Some(self.ablated? - self.default?)
    }
}

/// Everything the section measured.
#[derive(Debug, Clone, PartialEq)]
pub struct AblationSection {
    pub method: String,
    pub default: Variant,
    pub ablated: Vec<Variant>,
    /// The section's own wall time (builds included).
    pub wall_clock_s: f64,
}

impl AblationSection {
    /// Each compared row of `variant` against the default image.
    pub fn comparisons(&self, variant: &Variant) -> Vec<Comparison> {
        COMPARED
            .iter()
            .map(|c| {
                let (default, default_same) = self.default.figure(c);
                let (ablated, ablated_same) = variant.figure(c);
                Comparison {
                    id: c.id,
                    label: c.label,
                    default,
                    ablated,
                    identical_runs: default_same && ablated_same,
                }
            })
            .collect()
    }

    /// Instructions per shared-lock acquisition on the load/put path: the
    /// round trip's growth over the hot-path acquisitions each round trip
    /// added. `None` when the ablation added none.
    pub fn per_lock(&self, variant: &Variant) -> Option<f64> {
        let rounds = variant.loadput_rounds().filter(|&n| n != 0)?;
        let (default, _) = self.default.locks();
        let (ablated, _) = variant.locks();
        let added = |l: Option<&LockStats>| l.map(|l| l.path("vcpu_load") + l.path("vcpu_put"));
        let added = added(ablated)?.checked_sub(added(default)?)?;
        // Boot and the SGI bench load and put too (fewer times than the
        // loop has round trips): the whole round trips' worth is the loop's.
        let per_round = added / rounds;
        if per_round == 0 {
            return None;
        }
        let loadput = COMPARED.iter().find(|c| c.id == "vcpu_load_put")?;
        let growth = variant.figure(loadput).0? - self.default.figure(loadput).0?;
        Some(growth / per_round as f64)
    }

    /// Hot-path acquisitions per load/put round trip the ablation added.
    pub fn locks_per_round(&self, variant: &Variant) -> Option<u64> {
        let rounds = variant.loadput_rounds().filter(|&n| n != 0)?;
        let count = |v: &Variant| {
            v.locks()
                .0
                .map(|l| l.path("vcpu_load") + l.path("vcpu_put"))
        };
        Some(count(variant)?.saturating_sub(count(&self.default)?) / rounds)
    }
}

/// A figure as the table prints it (to 0.1, thousands grouped).
fn number(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_string(), group)
}

fn signed(value: Option<f64>) -> String {
    match value {
        Some(v) if v >= 0.0 => format!("+{}", group(v)),
        v => number(v),
    }
}

fn locks_text(locks: Option<&LockStats>) -> String {
    match locks {
        None => "no stats line".to_string(),
        Some(l) => {
            let paths: Vec<String> = LOCK_PATHS
                .iter()
                .map(|p| format!("{p}={}", l.path(p)))
                .collect();
            format!("hot={} ({}) all={}", l.hot, paths.join(" "), l.total())
        }
    }
}

impl Section for AblationSection {
    fn key(&self) -> &'static str {
        "ablations"
    }

    fn text(&self) -> String {
        let mut t = String::from(
            "== Ablations: each seed idea swapped for the mechanism it replaces (deterministic, \
             -icount; instructions) ==\n",
        );
        let _ = writeln!(t, "method: {}", self.method);
        for variant in &self.ablated {
            let Some(ablation) = variant.ablation else {
                continue;
            };
            let _ = writeln!(t, "\n{}: {}", ablation.feature, ablation.what);
            let _ = writeln!(
                t,
                "  {:<50} {:>10} {:>10} {:>11}",
                "path", "default", "ablated", "difference"
            );
            let mut all_same = true;
            for c in self.comparisons(variant) {
                all_same &= c.identical_runs;
                let _ = writeln!(
                    t,
                    "  {:<50} {:>10} {:>10} {:>11}",
                    c.label,
                    number(c.default),
                    number(c.ablated),
                    signed(c.difference())
                );
            }
            let (default_locks, default_same) = self.default.locks();
            let (ablated_locks, ablated_same) = variant.locks();
            all_same &= default_same && ablated_same;
            let _ = writeln!(
                t,
                "  shared-lock acquisitions over the whole probe run (Ctrl-A s at its end):\n    \
                 default {}\n    ablated {}",
                locks_text(default_locks),
                locks_text(ablated_locks)
            );
            if let Some(n) = self.locks_per_round(variant).filter(|&n| n != 0) {
                let _ = writeln!(
                    t,
                    "    = {n} chip-wide lock acquisitions per load/put round trip{}",
                    self.per_lock(variant).map_or_else(String::new, |i| format!(
                        ", {i:.1} instructions each (uncontended)"
                    ))
                );
            }
            if variant.loadput_retries() != 0 || self.default.loadput_retries() != 0 {
                let _ = writeln!(
                    t,
                    "  note: the load/put loop retried a refused CPU_ON (vCPU 1 not off yet): \
                     its figure includes those HVCs"
                );
            }
            if ablated_locks.is_some_and(|l| !l.consistent()) {
                let _ = writeln!(
                    t,
                    "  note: the per-path hot counts do not add up to hot_path_cross_cpu_locks"
                );
            }
            let _ = writeln!(
                t,
                "  runs: {}",
                if all_same {
                    "every figure identical in every run of both images"
                } else {
                    "DIFFER: a figure changed between identical runs"
                }
            );
        }
        let _ = writeln!(
            t,
            "\nsection wall clock: {:.1} s (builds included)",
            self.wall_clock_s
        );
        t
    }

    fn json(&self) -> Value {
        let variants: Vec<Value> = self
            .ablated
            .iter()
            .map(|variant| {
                let rows: Vec<Value> = self
                    .comparisons(variant)
                    .iter()
                    .map(|c| {
                        json!({
                            "id": c.id,
                            "path": c.label,
                            "default_instructions": c.default,
                            "ablated_instructions": c.ablated,
                            "difference_instructions": c.difference(),
                            "identical_runs": c.identical_runs,
                        })
                    })
                    .collect();
                json!({
                    "feature": variant.ablation.map(|a| a.feature),
                    "what": variant.ablation.map(|a| a.what),
                    "rows": rows,
                    "locks": {
                        "default": self.default.locks().0.map(LockStats::json),
                        "ablated": variant.locks().0.map(LockStats::json),
                        "hot_locks_per_loadput_round_trip": self.locks_per_round(variant),
                        "instructions_per_lock": self.per_lock(variant),
                    },
                    "loadput_retries": variant.loadput_retries(),
                })
            })
            .collect();
        json!({
            "method": self.method,
            "ablations": variants,
            "wall_clock_s": self.wall_clock_s,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = "\
pinfold: cpu0: irq call site guest @0x1: ok
[probe] PROBE bench env: mode=partition psci=hvc cntfrq=62500000 mpidr=0x80000000
[probe] PROBE bench hvc: iterations=1000 ticks=7875 loop_insns=4
[probe] PROBE bench vtimer: trials=64 dither=16 ahead=32 handler_ticks=521 back_ticks=549
[probe] PROBE bench sgi: iterations=1000 ticks=60312 method=wfi-both sgi=3
[probe] PROBE bench loadput: iterations=200 warmup=4 ticks=52150 retries=0 method=cpu_on-sgi-cpu_off
[probe] PROBE bench end
pinfold: stats hot_path_cross_cpu_locks=0 exits=9000 injected=1 dropped=0 shared_locks: log_line=40";

    fn variant(ablation: Option<Ablation>, text: &str) -> Variant {
        let run = ProbeRun::parse(text.lines());
        Variant {
            ablation,
            runs: vec![run.clone(), run],
        }
    }

    /// The chip-lock ablation: 12 more acquisitions per round trip (6 on
    /// load, 6 on put) over 204 round trips, plus boot's and the SGI
    /// bench's 2 loads and 1 put; each timed round trip 12 x 10 = 120
    /// instructions longer (1500 ticks over 200).
    fn chip_lock() -> Variant {
        variant(
            Some(ABLATIONS[1]),
            &RUN.replace("ticks=52150", "ticks=53650").replace(
                "hot_path_cross_cpu_locks=0 exits=9000 injected=1 dropped=0 shared_locks:",
                "hot_path_cross_cpu_locks=2468 exits=9000 injected=1 dropped=0 shared_locks: \
                 vcpu_load=1236 vcpu_put=1230 timer_ppi=2",
            ),
        )
    }

    fn section(ablated: Vec<Variant>) -> AblationSection {
        AblationSection {
            method: "m".into(),
            default: variant(None, RUN),
            ablated,
            wall_clock_s: 1.0,
        }
    }

    #[test]
    fn each_row_is_default_against_ablated_with_the_difference() {
        let fnptr = variant(
            Some(ABLATIONS[0]),
            &RUN.replace("handler_ticks=521", "handler_ticks=529")
                .replace("ticks=60312", "ticks=60562"),
        );
        let section = section(vec![fnptr.clone()]);

        let rows = section.comparisons(&fnptr);

        let row = |id: &str| rows.iter().find(|r| r.id == id).expect(id);
        assert_eq!(row("hvc_psci_version").difference(), Some(0.0));
        assert_eq!(row("vtimer_to_handler").difference(), Some(2.0));
        assert_eq!(row("sgi_round_trip").difference(), Some(4.0));
        assert_eq!(row("vcpu_load_put").default, Some(4172.0));
        assert!(rows.iter().all(|r| r.identical_runs));
    }

    #[test]
    fn lock_acquisitions_per_round_trip_and_their_cost() {
        let chip = chip_lock();
        let section = section(vec![chip.clone()]);

        assert_eq!(section.locks_per_round(&chip), Some(12));
        let per_lock = section.per_lock(&chip).expect("a cost per lock");
        assert!((per_lock - 10.0).abs() < 1e-9, "{per_lock}");
        let text = section.text();
        assert!(
            text.contains("hot=2468 (vcpu_load=1236 vcpu_put=1230 timer_ppi=2)"),
            "{text}"
        );
        assert!(text.contains("= 12 chip-wide lock acquisitions per load/put round trip"));
        assert!(text.contains("every figure identical"));
    }

    #[test]
    fn an_ablation_that_adds_no_lock_has_no_cost_per_lock() {
        let section = section(vec![variant(Some(ABLATIONS[0]), RUN)]);

        assert_eq!(section.locks_per_round(&section.ablated[0]), Some(0));
        assert_eq!(section.per_lock(&section.ablated[0]), None);
    }

    #[test]
    fn runs_that_differ_are_flagged() {
        let mut chip = chip_lock();
        chip.runs[1] = ProbeRun::parse(RUN.replace("ticks=7875", "ticks=7876").lines());
        let section = section(vec![chip.clone()]);

        let rows = section.comparisons(&chip);

        assert!(!rows[0].identical_runs);
        assert!(section.text().contains("DIFFER"));
    }

    #[test]
    fn json_names_each_feature_with_its_rows_and_locks() {
        let section = section(vec![chip_lock()]);

        let json = section.json();

        let chip = &json["ablations"][0];
        assert_eq!(chip["feature"], json!("ablate-chip-lock"));
        assert_eq!(chip["rows"][4]["difference_instructions"], json!(120.0));
        assert_eq!(chip["locks"]["ablated"]["paths"]["vcpu_put"], json!(1230));
        assert_eq!(
            chip["locks"]["default"]["hot_path_cross_cpu_locks"],
            json!(0)
        );
        assert_eq!(chip["locks"]["hot_locks_per_loadput_round_trip"], json!(12));
    }
}
