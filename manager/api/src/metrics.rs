//! `/metrics`: partition and vCPU counters, and the manager's own memory, in the Prometheus text exposition format 0.0.4.

use std::fmt::Write;

use pinfold_abi::PartitionDetail;

use crate::json::State;
use crate::memory::ManagerMemory;

/// The Content-Type Prometheus expects for format 0.0.4.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Renders every metric for `details` (one entry per partition), then the
/// manager's own memory.
pub fn render(details: &[PartitionDetail], memory: &ManagerMemory) -> String {
    let mut out = String::new();
    family(
        &mut out,
        "pinfold_partition_state",
        "gauge",
        "Partition state: 0 stopped, 1 running, 2 stopping.",
    );
    for d in details {
        let state = State::from(d.summary.state).metric();
        sample(
            &mut out,
            "pinfold_partition_state",
            &[("partition", &d.summary.name)],
            &state.to_string(),
        );
    }
    family(
        &mut out,
        "pinfold_partition_uptime_seconds",
        "gauge",
        "Seconds since the partition's current boot (0 when stopped).",
    );
    for d in details {
        let uptime = seconds(d.summary.uptime_ns);
        sample(
            &mut out,
            "pinfold_partition_uptime_seconds",
            &[("partition", &d.summary.name)],
            &uptime,
        );
    }
    family(
        &mut out,
        "pinfold_partition_boots_total",
        "counter",
        "Boots of the partition since the hypervisor started.",
    );
    for d in details {
        let boots = d.summary.boot_count.to_string();
        sample(
            &mut out,
            "pinfold_partition_boots_total",
            &[("partition", &d.summary.name)],
            &boots,
        );
    }
    family(
        &mut out,
        "pinfold_partition_faults_total",
        "counter",
        "Guest faults contained by the hypervisor.",
    );
    for d in details {
        let faults = d.faults.to_string();
        sample(
            &mut out,
            "pinfold_partition_faults_total",
            &[("partition", &d.summary.name)],
            &faults,
        );
    }
    family(
        &mut out,
        "pinfold_vcpu_exits_total",
        "counter",
        "vCPU exits to the hypervisor, by class.",
    );
    for d in details {
        for v in &d.vcpus {
            let vcpu = v.vcpu.to_string();
            for (class, count) in v.exits.by_class() {
                let labels = [
                    ("partition", d.summary.name.as_str()),
                    ("vcpu", &vcpu),
                    ("class", class),
                ];
                sample(
                    &mut out,
                    "pinfold_vcpu_exits_total",
                    &labels,
                    &count.to_string(),
                );
            }
        }
    }
    family(
        &mut out,
        "pinfold_vcpu_injected_total",
        "counter",
        "Virtual interrupts injected into the vCPU.",
    );
    for d in details {
        for v in &d.vcpus {
            let vcpu = v.vcpu.to_string();
            let labels = [("partition", d.summary.name.as_str()), ("vcpu", &vcpu)];
            sample(
                &mut out,
                "pinfold_vcpu_injected_total",
                &labels,
                &v.injected.to_string(),
            );
        }
    }
    render_memory(&mut out, memory);
    out
}

/// The manager's heap (when its allocator counts) and what its
/// per-partition state holds.
fn render_memory(out: &mut String, m: &ManagerMemory) {
    let mut gauge = |name: &str, help: &str, value: String| {
        family(out, name, "gauge", help);
        sample(out, name, &[], &value);
    };
    if let Some(heap) = m.heap {
        gauge(
            "pinfold_manager_heap_bytes",
            "Bytes the manager has allocated and not freed (its global allocator's count).",
            heap.in_use.to_string(),
        );
        gauge(
            "pinfold_manager_heap_peak_bytes",
            "The most bytes the manager has had allocated at once since it started.",
            heap.peak.to_string(),
        );
        gauge(
            "pinfold_manager_heap_allocations",
            "Allocations of the manager not yet freed.",
            heap.live.to_string(),
        );
    }
    gauge(
        "pinfold_manager_console_history_bytes",
        "Bytes of RAM the per-partition console histories hold (at most 1 MiB each).",
        m.history_bytes.to_string(),
    );
    gauge(
        "pinfold_manager_console_histories",
        "Partitions whose console history the manager keeps.",
        m.histories.to_string(),
    );
    gauge(
        "pinfold_manager_events",
        "Events the manager's log keeps.",
        m.events.to_string(),
    );
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    // Writing to a String cannot fail.
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn sample(out: &mut String, name: &str, labels: &[(&str, &str)], value: &str) {
    out.push_str(name);
    if labels.is_empty() {
        out.push(' ');
        out.push_str(value);
        out.push('\n');
        return;
    }
    out.push('{');
    for (i, (key, val)) in labels.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(key);
        out.push_str("=\"");
        escape_label(out, val);
        out.push('"');
    }
    out.push_str("} ");
    out.push_str(value);
    out.push('\n');
}

/// Label values escape backslash, double quote and line feed (format 0.0.4).
fn escape_label(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Nanoseconds as decimal seconds, exact and always with a fraction
/// ("5.0", "0.000001"), without going through a float.
pub fn seconds(ns: u64) -> String {
    let whole = ns / 1_000_000_000;
    let frac = format!("{:09}", ns % 1_000_000_000);
    let frac = frac.trim_end_matches('0');
    if frac.is_empty() {
        format!("{whole}.0")
    } else {
        format!("{whole}.{frac}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_seconds_keep_one_decimal() {
        assert_eq!(seconds(5_000_000_000), "5.0");
    }

    #[test]
    fn fractional_seconds_are_exact_and_trimmed() {
        assert_eq!(seconds(1_250_000_000), "1.25");
        assert_eq!(seconds(1_000), "0.000001");
    }

    #[test]
    fn label_values_escape_quote_backslash_and_newline() {
        let mut out = String::new();

        escape_label(&mut out, "a\"b\\c\nd");

        assert_eq!(out, "a\\\"b\\\\c\\nd");
    }
}
