//! Human-readable tables for hvctl's output.

use std::time::Duration;

use pinfold_manager_api::json::{Image, PartitionDetailJson, PartitionList, ResourcesJson};

/// Left-aligned columns, two spaces apart, no trailing spaces.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, (cell, w)) in row.iter().zip(&widths).enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            line.push_str(cell);
            line.extend(std::iter::repeat_n(' ', w - cell.chars().count()));
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Bytes in the largest binary unit that divides them evenly-ish ("256 MiB").
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if value.fract() == 0.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Milliseconds as "1d02h03m", "2h03m04s", "3m04s" or "4.5s"; "-" for 0.
pub fn uptime(ms: u64) -> String {
    if ms == 0 {
        return "-".into();
    }
    let s = ms / 1000;
    let (d, h, m, sec) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    if d > 0 {
        format!("{d}d{h:02}h{m:02}m")
    } else if h > 0 {
        format!("{h}h{m:02}m{sec:02}s")
    } else if m > 0 {
        format!("{m}m{sec:02}s")
    } else {
        format!("{}.{}s", sec, ms % 1000 / 100)
    }
}

fn cpus(list: &[u32]) -> String {
    list.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// `hvctl list`.
pub fn partition_list(list: &PartitionList) -> String {
    let rows: Vec<Vec<String>> = list
        .partitions
        .iter()
        .map(|p| {
            vec![
                p.name.clone(),
                p.state.as_str().to_string(),
                cpus(&p.cpus),
                bytes(p.ram_bytes),
                uptime(p.uptime_ms),
                p.boot_count.to_string(),
                if p.management { "yes" } else { "" }.to_string(),
            ]
        })
        .collect();
    table(
        &["NAME", "STATE", "CPUS", "RAM", "UPTIME", "BOOTS", "MGMT"],
        &rows,
    )
}

/// `hvctl show NAME`.
pub fn partition_detail(d: &PartitionDetailJson) -> String {
    let p = &d.summary;
    let mut out = String::new();
    for (key, value) in [
        ("name", p.name.clone()),
        (
            "state",
            match &p.state_since {
                Some(t) => format!("{} since {t}", p.state.as_str()),
                None => p.state.as_str().to_string(),
            },
        ),
        ("cpus", cpus(&p.cpus)),
        ("ram", bytes(p.ram_bytes)),
        ("uptime", uptime(p.uptime_ms)),
        ("boots", p.boot_count.to_string()),
        ("restarts", p.restarts.to_string()),
        (
            "last crash",
            match &p.last_crash {
                Some(c) => format!(
                    "{} ({})",
                    c.reason,
                    c.time.as_deref().unwrap_or("time unknown")
                ),
                None => "-".to_string(),
            },
        ),
        ("faults", d.faults.to_string()),
        (
            "management",
            if p.management { "yes" } else { "no" }.to_string(),
        ),
    ] {
        out.push_str(&format!("{:<12}{value}\n", format!("{key}:")));
    }
    out.push('\n');
    let rows: Vec<Vec<String>> = d
        .vcpus
        .iter()
        .map(|v| {
            let mut row = vec![
                v.vcpu.to_string(),
                v.cpu.to_string(),
                v.state.as_str().to_string(),
            ];
            row.extend(v.exits.by_class().iter().map(|(_, n)| n.to_string()));
            row.push(v.injected.to_string());
            row
        })
        .collect();
    out.push_str(&table(
        &[
            "VCPU", "CPU", "STATE", "MMIO", "SYSREG", "HVC", "IRQ", "ABORT", "OTHER", "INJECTED",
        ],
        &rows,
    ));
    out
}

/// An upload's progress: `NAME: SENT/TOTAL bytes (P%), R MB/s` (MB =
/// 10^6 bytes; the rate over the whole upload so far).
pub fn progress_line(name: &str, sent: u64, total: u64, elapsed: Duration) -> String {
    let percent = (sent * 100).checked_div(total).unwrap_or(100);
    let secs = elapsed.as_secs_f64();
    let rate = if secs > 0.0 {
        format!("{:.1} MB/s", sent as f64 / secs / 1e6)
    } else {
        "- MB/s".to_string()
    };
    format!("{name}: {sent}/{total} bytes ({percent}%), {rate}")
}

fn or_dash(s: &Option<String>) -> String {
    s.clone().unwrap_or_else(|| "-".into())
}

/// `hvctl resources`.
pub fn resources(r: &ResourcesJson) -> String {
    let cpus: Vec<Vec<String>> = r
        .cpus
        .iter()
        .map(|c| vec![c.cpu.to_string(), or_dash(&c.partition)])
        .collect();
    let mut out = table(&["CPU", "PARTITION"], &cpus);
    out.push_str(&format!(
        "\nRAM: {} total, {} free (largest block {}), images {}\n",
        bytes(r.memory.total_bytes),
        bytes(r.memory.free_bytes),
        bytes(r.memory.largest_free_bytes),
        bytes(r.images_bytes)
    ));
    let ranges: Vec<Vec<String>> = r
        .memory
        .ranges
        .iter()
        .map(|m| {
            vec![
                format!("{:#x}", m.base),
                bytes(m.size),
                match (&m.partition, m.left_bytes) {
                    (Some(p), _) => p.clone(),
                    (None, Some(left)) => format!("scrubbing ({} left)", bytes(left)),
                    (None, None) => format!("{:?}", m.owner).to_lowercase(),
                },
            ]
        })
        .collect();
    out.push_str(&table(&["BASE", "SIZE", "OWNER"], &ranges));
    if !r.devices.is_empty() {
        out.push('\n');
        let devices: Vec<Vec<String>> = r
            .devices
            .iter()
            .map(|d| {
                vec![
                    d.name.clone(),
                    format!("{:#x}", d.base),
                    bytes(d.size),
                    d.partition
                        .clone()
                        .unwrap_or_else(|| format!("{:?}", d.owner).to_lowercase()),
                ]
            })
            .collect();
        out.push_str(&table(&["DEVICE", "BASE", "SIZE", "OWNER"], &devices));
    }
    out
}

/// `hvctl images`.
pub fn images(list: &[Image]) -> String {
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|i| {
            let state = match i.state {
                pinfold_manager_api::json::ImageState::Uploading => {
                    format!("uploading {}/{}", i.received, i.size)
                }
                pinfold_manager_api::json::ImageState::Ready => "ready".into(),
                pinfold_manager_api::json::ImageState::Failed => {
                    format!("failed: {}", i.error.clone().unwrap_or_default())
                }
            };
            vec![
                i.id.clone(),
                i.name.clone(),
                i.kind.as_str().to_string(),
                bytes(i.size),
                state,
                if i.used_by.is_empty() {
                    "-".into()
                } else {
                    i.used_by.join(",")
                },
                if i.boot { "yes" } else { "" }.to_string(),
            ]
        })
        .collect();
    table(
        &["ID", "NAME", "KIND", "SIZE", "STATE", "USED BY", "BOOT"],
        &rows,
    )
}

/// One event as `hvctl events` prints it: time (or `-`), sequence number,
/// kind, partition (or `-`), message.
pub fn event_line(e: &pinfold_manager_api::events::ApiEvent) -> String {
    format!(
        "{}  {}  {}  {}  {}\n",
        e.time.as_deref().unwrap_or("-"),
        e.seq,
        e.kind,
        e.partition.as_deref().unwrap_or("-"),
        e.message
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use pinfold_manager_api::json::{Exits, Partition, State, Vcpu, VcpuState};

    fn alpha() -> Partition {
        Partition {
            name: "alpha".into(),
            state: State::Running,
            cpus: vec![1, 2],
            ram_bytes: 256 << 20,
            uptime_ms: 3_723_000,
            boot_count: 2,
            management: false,
            config: None,
            state_since: None,
            restarts: 0,
            last_crash: None,
            gic_interface: Some("gicv3".into()),
        }
    }

    #[test]
    fn table_pads_columns_to_the_widest_cell_and_trims_line_ends() {
        let out = table(
            &["A", "BB"],
            &[vec!["long".into(), "x".into()], vec!["s".into(), "".into()]],
        );

        assert_eq!(out, "A     BB\nlong  x\ns\n");
    }

    #[test]
    fn bytes_use_binary_units() {
        assert_eq!(bytes(268_435_456), "256 MiB");
        assert_eq!(bytes(2_147_483_648), "2 GiB");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(12), "12 B");
    }

    #[test]
    fn uptime_picks_the_largest_units() {
        assert_eq!(uptime(0), "-");
        assert_eq!(uptime(4_500), "4.5s");
        assert_eq!(uptime(184_000), "3m04s");
        assert_eq!(uptime(3_723_000), "1h02m03s");
        assert_eq!(uptime(93_780_000), "1d02h03m");
    }

    #[test]
    fn partition_list_is_a_table_with_a_mgmt_marker() {
        let mgmt = Partition {
            name: "mgmt".into(),
            cpus: vec![0],
            uptime_ms: 0,
            management: true,
            ..alpha()
        };
        let list = PartitionList {
            partitions: vec![mgmt, alpha()],
        };

        let out = partition_list(&list);

        assert_eq!(
            out,
            "NAME   STATE    CPUS  RAM      UPTIME    BOOTS  MGMT\n\
             mgmt   running  0     256 MiB  -         2      yes\n\
             alpha  running  1,2   256 MiB  1h02m03s  2\n"
        );
    }

    #[test]
    fn partition_detail_lists_fields_then_vcpu_table() {
        let detail = PartitionDetailJson {
            summary: alpha(),
            faults: 1,
            vcpus: vec![Vcpu {
                vcpu: 0,
                cpu: 1,
                state: VcpuState::OnPending,
                exits: Exits {
                    mmio: 10,
                    sysreg: 3,
                    hvc: 2,
                    irq: 500,
                    abort: 0,
                    other: 0,
                },
                injected: 480,
            }],
        };

        let out = partition_detail(&detail);

        assert!(
            out.starts_with("name:       alpha\nstate:      running\ncpus:       1,2\n"),
            "{out}"
        );
        assert!(out.contains("faults:     1\n"));
        assert!(
            out.ends_with(
                "VCPU  CPU  STATE       MMIO  SYSREG  HVC  IRQ  ABORT  OTHER  INJECTED\n\
             0     1    on_pending  10    3       2    500  0      0      480\n"
            ),
            "{out}"
        );
    }

    #[test]
    fn progress_line_shows_bytes_of_total_percent_and_rate() {
        assert_eq!(
            progress_line("vmlinuz", 15_000_000, 30_000_000, Duration::from_secs(2)),
            "vmlinuz: 15000000/30000000 bytes (50%), 7.5 MB/s"
        );
        assert_eq!(
            progress_line("x", 0, 10, Duration::ZERO),
            "x: 0/10 bytes (0%), - MB/s"
        );
        assert_eq!(
            progress_line("empty", 0, 0, Duration::from_millis(1)),
            "empty: 0/0 bytes (100%), 0.0 MB/s"
        );
    }
}
