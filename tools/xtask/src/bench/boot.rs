//! The wall-clock section: the default plan booted under multi-threaded TCG
//! (no icount), timed from spawning QEMU to each partition's UP marker.
//! Noisy by nature and labelled as such; the deterministic boot figure is
//! the table's boot-stamp row.

use std::fmt::Write as _;

use serde_json::{json, Value};

use super::linux::printk_seconds;
use super::Section;
use crate::harness::Line;

/// Partitions of the default plan whose boot is timed.
pub const BOOT_PARTITIONS: [&str; 2] = ["alpha", "beta"];
const RUN_INIT: &str = super::linux::RUN_INIT;

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

/// The section as the report shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct BootSection {
    pub method: String,
    pub boots: Vec<BootSample>,
}

impl BootSection {
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
}

impl Section for BootSection {
    fn key(&self) -> &'static str {
        "boot_default"
    }

    fn text(&self) -> String {
        let mut t = String::new();
        let secs = |x: Option<f64>| x.map_or_else(|| "-".to_string(), |x| format!("{x:.3}"));
        let _ = writeln!(t, "== Boot of the default plan (WALL CLOCK, noisy) ==");
        let _ = writeln!(t, "method: {}", self.method);
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
        t
    }

    fn json(&self) -> Value {
        let per_partition = |column: &dyn Fn(&BootSample, usize) -> Option<f64>| {
            BOOT_PARTITIONS
                .iter()
                .enumerate()
                .map(|(i, name)| {
                    let runs: Vec<Option<f64>> = self.boots.iter().map(|b| column(b, i)).collect();
                    (name.to_string(), json!(runs))
                })
                .collect::<serde_json::Map<_, _>>()
        };
        let medians = |column: &dyn Fn(usize) -> Vec<f64>| {
            BOOT_PARTITIONS
                .iter()
                .enumerate()
                .map(|(i, name)| (name.to_string(), json!(median(&column(i)))))
                .collect::<serde_json::Map<_, _>>()
        };
        json!({
            "method": self.method,
            "wall_clock_up_s": per_partition(&|b, i| b.up_s.get(i).copied()),
            "wall_clock_up_median_s": medians(&|i| self.up_column(i)),
            "guest_run_init_s": per_partition(&|b, i| b.run_init_guest_s.get(i).copied().flatten()),
            "guest_run_init_median_s": medians(&|i| self.run_init_column(i)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn line(index: usize, text: &str) -> Line {
        Line {
            index,
            at: Duration::ZERO,
            text: text.into(),
        }
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

    #[test]
    fn json_has_per_run_values_and_medians_per_partition() {
        let section = BootSection {
            method: "b".into(),
            boots: vec![
                BootSample {
                    up_s: vec![4.0, 5.0],
                    run_init_guest_s: vec![Some(2.0), None],
                },
                BootSample {
                    up_s: vec![6.0, 7.0],
                    run_init_guest_s: vec![Some(3.0), None],
                },
            ],
        };

        let json = section.json();

        assert_eq!(json["guest_run_init_s"]["alpha"], json!([2.0, 3.0]));
        assert_eq!(json["guest_run_init_s"]["beta"], json!([null, null]));
        assert_eq!(json["wall_clock_up_median_s"]["beta"], json!(6.0));
        assert_eq!(json["guest_run_init_median_s"]["beta"], Value::Null);
        assert!(section.text().contains("median"));
    }
}
