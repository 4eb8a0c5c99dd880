//! The probe guest's bench lines (tools/test-guest/src/bench.rs) and the
//! per-row figures computed from them.
//!
//! The guest prints `PROBE bench <row>: key=value ...` (or `PROBE bench
//! <row>: skipped (why)`) per loop and `PROBE bench end` last; in a
//! partition each line carries the hypervisor's `[<name>] ` prefix. A
//! hosted run also has the hypervisor's own lines: the ablations built into
//! its image (`pinfold: ablation <feature>: ...`, platform/src/ablate.rs)
//! and, when the bench asked for it, the monitor's stats line.

use std::collections::BTreeMap;

use super::lockstats::LockStats;
use super::ICOUNT_SHIFT;

/// How the hypervisor's own console lines start.
const HV_PREFIX: &str = "pinfold: ";

/// The marker of a bench line, wherever it sits in the console line.
pub const LINE_MARKER: &str = "PROBE bench ";
/// The guest's last bench line.
pub const END_MARKER: &str = "PROBE bench end";
/// The monitor's per-partition stats line (hv `System::report_stats`),
/// after the lock statistics: its `lpis=` counts the physical LPIs taken at
/// EL2 for the partition's vCPUs (0 when its MSIs are direct vLPIs).
pub const PARTITION_STATS: &str = "stats partition=";
/// The hypervisor's line for a guest MAPTI turned into a VMAPTI (hv::its).
const DIRECT_VLPI: &str = "(GICv4.0, no exit)";

/// What one bench line said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// `key=value` fields, in any order; words without `=` are ignored.
    Values(BTreeMap<String, String>),
    /// `skipped (why)`: the loop could not run here.
    Skipped(String),
}

/// Every bench line of one probe boot, by row name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeRun {
    pub rows: BTreeMap<String, Entry>,
    /// The hypervisor's lock statistics (the last stats line), if asked.
    pub locks: Option<LockStats>,
    /// The ablation features the hypervisor said its image has.
    pub ablations: Vec<String>,
    /// Physical LPIs taken at EL2 for the partitions' vCPUs (the sum of
    /// the stats lines' `lpis=`), if asked.
    pub lpis: Option<u64>,
    /// Whether the hypervisor mapped a guest MSI as a direct vLPI.
    pub direct_vlpi: bool,
}

impl ProbeRun {
    /// Collects the bench lines among `lines` (other lines are ignored; a
    /// row printed twice keeps the last).
    pub fn parse<'a>(lines: impl IntoIterator<Item = &'a str>) -> Self {
        let mut run = Self::default();
        for line in lines {
            if let Some((row, entry)) = parse_line(line) {
                run.rows.insert(row, entry);
            } else if let Some(stats) = LockStats::parse(line) {
                run.locks = Some(stats);
            } else if let Some(feature) = ablation_feature(line) {
                run.ablations.push(feature.to_string());
            } else if let Some(lpis) = partition_lpis(line) {
                run.lpis = Some(run.lpis.unwrap_or(0) + lpis);
            } else if line.starts_with(HV_PREFIX) && line.contains(DIRECT_VLPI) {
                run.direct_vlpi = true;
            }
        }
        run
    }

    fn field(&self, row: &str, key: &str) -> Option<&str> {
        match self.rows.get(row)? {
            Entry::Values(fields) => fields.get(key).map(String::as_str),
            Entry::Skipped(_) => None,
        }
    }

    /// A numeric field of a row.
    pub fn number(&self, row: &str, key: &str) -> Option<u64> {
        self.field(row, key)?.parse().ok()
    }

    /// The reason a row was skipped, if it was.
    pub fn skipped(&self, row: &str) -> Option<&str> {
        match self.rows.get(row)? {
            Entry::Skipped(why) => Some(why),
            Entry::Values(_) => None,
        }
    }

    /// `bare` or `partition`, as the guest decided from its DTB.
    pub fn mode(&self) -> Option<&str> {
        self.field("env", "mode")
    }

    /// Instructions per counter tick (CNTFRQ_EL0 as the guest read it).
    pub fn instructions_per_tick(&self) -> Option<f64> {
        self.number("env", "cntfrq")
            .filter(|&f| f != 0)
            .map(instructions_per_tick)
    }

    /// `ticks / iterations` of a loop row, in instructions per iteration.
    pub fn per_iteration(&self, row: &str) -> Option<f64> {
        let iterations = self.number(row, "iterations").filter(|&n| n != 0)?;
        let ticks = self.number(row, "ticks")?;
        Some(ticks as f64 / iterations as f64 * self.instructions_per_tick()?)
    }

    /// Mean of a vtimer stamp (`handler_ticks` or `back_ticks`, summed over
    /// `trials` interrupts) past CVAL, in instructions. The guest's nop
    /// dither spans one tick over whole rounds, so this is exact, not
    /// rounded to a tick, whenever `dither` equals instructions per tick.
    pub fn vtimer(&self, key: &str) -> Option<f64> {
        let trials = self.number("vtimer", "trials").filter(|&n| n != 0)?;
        let ticks = self.number("vtimer", key)?;
        Some(ticks as f64 / trials as f64 * self.instructions_per_tick()?)
    }

    /// Whether the vtimer dither covers exactly one tick (the vtimer rows
    /// are then exact to the instruction).
    pub fn vtimer_dither_exact(&self) -> bool {
        let dither = self.number("vtimer", "dither").map(|d| d as f64);
        dither.is_some() && dither == self.instructions_per_tick()
    }

    /// A round of the MSI row (`min_round_ticks` or `median_round_ticks`:
    /// the ticks of `dither` MSIs, one per nop dither value) in
    /// instructions per MSI: exact when the dither spans one tick.
    pub fn msi_round(&self, key: &str) -> Option<f64> {
        let dither = self.number("msi", "dither").filter(|&n| n != 0)?;
        let ticks = self.number("msi", key)?;
        Some(ticks as f64 / dither as f64 * self.instructions_per_tick()?)
    }

    /// The counter at the guest's first instructions as time since QEMU's
    /// reset: CNTVCT + CNTVOFF (the guest measured CNTPCT - CNTVCT), in
    /// instructions. `None` when the guest could not read CNTVOFF.
    pub fn boot_stamp(&self) -> Option<f64> {
        let virtual_ticks = self.number("boot", "entry_cntvct")?;
        let offset = self.number("boot", "cntvoff")?;
        Some(virtual_ticks.wrapping_add(offset) as f64 * self.instructions_per_tick()?)
    }

    /// Why the boot stamp is missing although the guest stamped its entry
    /// (CNTVOFF could not be read): what the guest's own counter showed.
    pub fn boot_stamp_missing(&self) -> Option<String> {
        if self.boot_stamp().is_some() {
            return None;
        }
        let entry = self.number("boot", "entry_cntvct")? as f64 * self.instructions_per_tick()?;
        Some(format!(
            "CNTVOFF unknown (CNTPCT_EL0 unreadable?): the guest's virtual counter read {entry:.0} \
             instructions at entry, which counts from the reset only if CNTVOFF is 0"
        ))
    }
}

/// The feature a hypervisor `ablation <feature>: ...` line names, after
/// the CPU tag hvlog puts first (`pinfold: cpu0: ablation ...`). Guest
/// lines carry their partition's `[<name>] ` prefix and never match.
pub fn ablation_feature(line: &str) -> Option<&str> {
    let rest = line.strip_prefix(HV_PREFIX)?;
    let rest = match rest.split_once(": ") {
        Some((tag, tail)) if tag.starts_with("cpu") && !tag.contains(' ') => tail,
        _ => rest,
    };
    let feature = rest.strip_prefix("ablation ")?.split_once(':')?.0;
    (!feature.is_empty() && !feature.contains(char::is_whitespace)).then_some(feature)
}

/// `(row, entry)` of a bench line, `None` for any other line and for the
/// end marker.
/// The `lpis=` of a hypervisor's per-partition stats line (a guest's
/// console line, prefixed `[name] `, is never one).
fn partition_lpis(line: &str) -> Option<u64> {
    let rest = line.strip_prefix(HV_PREFIX)?;
    let rest = &rest[rest.find(PARTITION_STATS)?..];
    rest.split_whitespace()
        .find_map(|w| w.strip_prefix("lpis="))?
        .parse()
        .ok()
}

fn parse_line(line: &str) -> Option<(String, Entry)> {
    let rest = &line[line.find(LINE_MARKER)? + LINE_MARKER.len()..];
    let (row, fields) = rest.split_once(':')?;
    let row = row.trim();
    if row.is_empty() || row.contains(char::is_whitespace) {
        return None;
    }
    let fields = fields.trim();
    if let Some(why) = fields.strip_prefix("skipped") {
        let why = why.trim();
        let why = why
            .strip_prefix('(')
            .and_then(|w| w.strip_suffix(')'))
            .unwrap_or(why);
        return Some((row.to_string(), Entry::Skipped(why.to_string())));
    }
    let values = fields
        .split_whitespace()
        .filter_map(|word| word.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Some((row.to_string(), Entry::Values(values)))
}

/// Instructions per tick of a `cntfrq` Hz counter under `-icount
/// shift=ICOUNT_SHIFT`: one tick lasts 1e9 / cntfrq ns of virtual time and
/// each instruction 2^shift ns.
pub fn instructions_per_tick(cntfrq: u64) -> f64 {
    let ns_per_instruction = f64::from(1u32 << ICOUNT_SHIFT);
    1e9 / cntfrq as f64 / ns_per_instruction
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A partition run as the probe prints it (hypervisor prefix included).
    pub const PARTITION: &str = "\
[probe] PROBE done
[probe] PROBE bench env: mode=partition psci=hvc cntfrq=62500000 mpidr=0x80000000
[probe] PROBE bench boot: entry_cntvct=187087 cntvoff=0
[probe] PROBE bench hvc: iterations=1000 ticks=10500 loop_insns=4
[probe] PROBE bench gicd: iterations=1000 ticks=18875 loop_insns=3
[probe] PROBE bench vtimer: trials=64 dither=16 ahead=32 handler_ticks=1644 back_ticks=1672
[probe] PROBE bench sgi: iterations=1000 ticks=195375 method=wfi-both sgi=3
[probe] PROBE bench end";

    fn run(text: &str) -> ProbeRun {
        ProbeRun::parse(text.lines())
    }

    #[test]
    fn every_row_and_field_is_read_with_or_without_a_prefix() {
        let hosted = run(PARTITION);
        let bare = run("PROBE bench gicd: iterations=1000 ticks=187 loop_insns=3");

        assert_eq!(hosted.mode(), Some("partition"));
        assert_eq!(
            hosted.rows.keys().collect::<Vec<_>>(),
            ["boot", "env", "gicd", "hvc", "sgi", "vtimer"]
        );
        assert_eq!(hosted.number("sgi", "ticks"), Some(195_375));
        assert_eq!(hosted.field("sgi", "method"), Some("wfi-both"));
        assert_eq!(bare.number("gicd", "ticks"), Some(187));
    }

    #[test]
    fn a_skipped_row_keeps_its_reason_and_has_no_values() {
        let run = run("[probe] PROBE bench sgi: skipped (CPU_ON MPIDR 1 -> -2: one vCPU)");

        assert_eq!(run.skipped("sgi"), Some("CPU_ON MPIDR 1 -> -2: one vCPU"));
        assert_eq!(run.number("sgi", "ticks"), None);
        assert_eq!(run.per_iteration("sgi"), None);
    }

    #[test]
    fn other_lines_and_the_end_marker_are_not_rows() {
        let run = run("[probe] PROBE alive 3\nPROBE bench end\nPROBE benchmark: x=1\n");

        assert!(run.rows.is_empty(), "{run:?}");
    }

    #[test]
    fn the_hypervisor_stats_line_and_ablation_lines_are_kept() {
        let run = run("pinfold: cpu0: ablation ablate-chip-lock: no lockless state\n\
                       pinfold: ablation ablate-irq-fnptr: pointer\n\
                       [probe] pinfold: ablation fake: a guest line is not the hypervisor's\n\
                       [probe] PROBE bench end\n\
                       pinfold: stats hot_path_cross_cpu_locks=12 exits=3 shared_locks: vcpu_load=12");

        assert_eq!(run.ablations, ["ablate-chip-lock", "ablate-irq-fnptr"]);
        let locks = run.locks.expect("the stats line");
        assert_eq!((locks.hot, locks.path("vcpu_load")), (12, 12));
        assert!(run.rows.is_empty());
    }

    #[test]
    fn the_partition_stats_lpis_and_the_direct_mapping_line_are_kept() {
        let run = run(
            "pinfold: cpu1: vITS: DeviceID 0x10 event 0 -> vLPI 8192 on vCPU 0: \
                       direct to vPE 0 (GICv4.0, no exit)\n\
                       [probe] stats partition=fake lpis=99 (GICv4.0, no exit)\n\
                       pinfold: stats partition=probe state=2 boots=1 faults=0 lpis=144",
        );

        assert_eq!(run.lpis, Some(144));
        assert!(run.direct_vlpi);
        let guest_only = super::ProbeRun::parse([
            "[probe] pinfold: stats partition=p lpis=0 (GICv4.0, no exit)",
        ]);
        assert_eq!((guest_only.lpis, guest_only.direct_vlpi), (None, false));
    }

    #[test]
    fn a_run_without_stats_or_ablations_has_none() {
        let run = run(PARTITION);

        assert_eq!(run.locks, None);
        assert!(run.ablations.is_empty());
    }

    #[test]
    fn tick_of_62_5_mhz_counter_is_16_instructions_at_shift_0() {
        assert_eq!(instructions_per_tick(62_500_000), 16.0);
    }

    #[test]
    fn loop_rows_are_ticks_per_iteration_times_16() {
        let run = run(PARTITION);

        assert_eq!(run.per_iteration("hvc"), Some(168.0));
        assert_eq!(run.per_iteration("gicd"), Some(302.0));
        assert_eq!(run.per_iteration("sgi"), Some(3126.0));
    }

    #[test]
    fn vtimer_rows_are_mean_ticks_past_cval_times_16() {
        let run = run(PARTITION);

        assert_eq!(run.vtimer("handler_ticks"), Some(411.0));
        assert_eq!(run.vtimer("back_ticks"), Some(418.0));
        assert!(run.vtimer_dither_exact());
    }

    #[test]
    fn a_dither_shorter_than_a_tick_is_not_exact() {
        let run = run("PROBE bench env: cntfrq=62500000\nPROBE bench vtimer: trials=8 dither=8 handler_ticks=1 back_ticks=2");

        assert!(!run.vtimer_dither_exact());
        assert_eq!(run.vtimer("handler_ticks"), Some(2.0));
    }

    #[test]
    fn an_msi_round_is_its_ticks_over_the_dither_times_16() {
        let run = run(
            "PROBE bench env: cntfrq=62500000\n[probe] PROBE bench msi: rounds=8 dither=16 \
                       warmup=4 min_round_ticks=100 median_round_ticks=104 sum_ticks=820",
        );

        assert_eq!(run.msi_round("min_round_ticks"), Some(100.0));
        assert_eq!(run.msi_round("median_round_ticks"), Some(104.0));
    }

    #[test]
    fn boot_stamp_adds_the_counter_offset() {
        let plain = run(PARTITION);
        let offset =
            run("PROBE bench env: cntfrq=62500000\nPROBE bench boot: entry_cntvct=10 cntvoff=90");
        let unknown = run("PROBE bench env: cntfrq=62500000\nPROBE bench boot: entry_cntvct=10 cntvoff=unknown (trapped)");

        assert_eq!(plain.boot_stamp(), Some(187_087.0 * 16.0));
        assert_eq!(offset.boot_stamp(), Some(1600.0));
        assert_eq!(unknown.boot_stamp(), None);
        assert_eq!(plain.boot_stamp_missing(), None);
        let why = unknown.boot_stamp_missing().unwrap_or_default();
        assert!(why.contains("read 160 instructions at entry"), "{why}");
    }

    #[test]
    fn no_counter_frequency_means_no_figures() {
        let run =
            run("PROBE bench env: mode=bare cntfrq=0\nPROBE bench hvc: iterations=10 ticks=5");

        assert_eq!(run.per_iteration("hvc"), None);
    }
}
