//! The hypervisor's lock statistics as its monitor prints them (Ctrl-A s,
//! hv/src/system.rs `System::stats`):
//!
//! ```text
//! pinfold: stats hot_path_cross_cpu_locks=0 exits=9313 injected=83 dropped=0 shared_locks: gicd_trap=12 log_line=40
//! ```
//!
//! `hot_path_cross_cpu_locks` sums the hot paths (vCPU load and put, timer
//! PPI state, local injection); `shared_locks:` lists every path
//! (hv::lockstat::LockPath names) that took a lock shared between CPUs,
//! with its count.

use std::collections::BTreeMap;

use serde_json::{json, Value};

/// What starts the stats line's figures, wherever it sits in the line.
pub const STATS_MARKER: &str = "stats hot_path_cross_cpu_locks=";
/// The hot paths of hv::lockstat::LockPath::HOT, by name.
pub const HOT_PATHS: [&str; 4] = ["vcpu_load", "vcpu_put", "timer_ppi", "local_inject"];

/// One stats line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LockStats {
    /// `hot_path_cross_cpu_locks=`.
    pub hot: u64,
    /// `exits=` (every CPU's), if printed.
    pub exits: Option<u64>,
    /// Acquisitions per path (`shared_locks:`); a path not printed took none.
    pub paths: BTreeMap<String, u64>,
}

impl LockStats {
    /// The figures of a stats line; `None` for any other line, and for a
    /// stats line with a figure that is not a number (a garbled line must
    /// not read as zero locks).
    pub fn parse(line: &str) -> Option<Self> {
        let rest = &line[line.find(STATS_MARKER)? + "stats ".len()..];
        let (head, shared) = match rest.split_once("shared_locks:") {
            Some((head, shared)) => (head, shared),
            None => (rest, ""),
        };
        let mut stats = LockStats::default();
        let mut hot = None;
        for word in head.split_whitespace() {
            let (key, value) = word.split_once('=')?;
            let value: u64 = value.parse().ok()?;
            match key {
                "hot_path_cross_cpu_locks" => hot = Some(value),
                "exits" => stats.exits = Some(value),
                _ => {}
            }
        }
        stats.hot = hot?;
        for word in shared.split_whitespace() {
            let (path, value) = word.split_once('=')?;
            stats.paths.insert(path.to_string(), value.parse().ok()?);
        }
        Some(stats)
    }

    /// Acquisitions on `path` (0 when the line did not list it).
    pub fn path(&self, path: &str) -> u64 {
        self.paths.get(path).copied().unwrap_or(0)
    }

    /// Acquisitions on every path.
    pub fn total(&self) -> u64 {
        self.paths.values().sum()
    }

    /// Whether the per-path counts of the hot paths add up to the hot
    /// total the hypervisor printed.
    pub fn consistent(&self) -> bool {
        HOT_PATHS.iter().map(|p| self.path(p)).sum::<u64>() == self.hot
    }

    pub fn json(&self) -> Value {
        json!({
            "hot_path_cross_cpu_locks": self.hot,
            "exits": self.exits,
            "total": self.total(),
            "paths": self.paths,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEFAULT: &str = "[   12.345] pinfold: stats hot_path_cross_cpu_locks=0 exits=9313 \
                           injected=83 dropped=0 shared_locks: gicd_trap=12 log_line=40";
    const ABLATED: &str = "pinfold: stats hot_path_cross_cpu_locks=2468 exits=1 injected=0 \
                           dropped=0 shared_locks: vcpu_load=1236 vcpu_put=1230 timer_ppi=2 \
                           console_trap=7";

    #[test]
    fn the_hot_total_exits_and_every_path_are_read() {
        let stats = LockStats::parse(DEFAULT).expect("a stats line");

        assert_eq!(stats.hot, 0);
        assert_eq!(stats.exits, Some(9313));
        assert_eq!(stats.path("gicd_trap"), 12);
        assert_eq!(stats.path("vcpu_load"), 0);
        assert_eq!(stats.total(), 52);
        assert!(stats.consistent());
    }

    #[test]
    fn hot_path_counts_add_up_to_the_hot_total() {
        let stats = LockStats::parse(ABLATED).expect("a stats line");

        assert_eq!(stats.hot, 2468);
        assert_eq!(
            (stats.path("vcpu_load"), stats.path("vcpu_put")),
            (1236, 1230)
        );
        assert!(stats.consistent());
        let wrong = LockStats::parse(&ABLATED.replace("timer_ppi=2", "timer_ppi=3"));
        assert!(!wrong.expect("a stats line").consistent());
    }

    #[test]
    fn a_line_without_shared_locks_has_no_paths() {
        let stats = LockStats::parse("pinfold: stats hot_path_cross_cpu_locks=0 exits=5");

        assert_eq!(stats.map(|s| s.total()), Some(0));
    }

    #[test]
    fn other_lines_and_garbled_figures_are_not_stats() {
        assert_eq!(
            LockStats::parse("pinfold: stats partition=probe state=2"),
            None
        );
        assert_eq!(
            LockStats::parse("pinfold: stats hot_path_cross_cpu_locks=x exits=5"),
            None
        );
        assert_eq!(
            LockStats::parse(&DEFAULT.replace("log_line=40", "log_line=4o")),
            None
        );
        assert_eq!(
            LockStats::parse(&DEFAULT.replace("gicd_trap=12", "gicd_trap")),
            None
        );
    }
}
