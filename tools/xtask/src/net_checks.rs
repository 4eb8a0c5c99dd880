//! The `net-partitions` boot case, on the shared boot of the default plan:
//! per-function PCIe assignment (`hv::vpci`) on QEMU's one host bridge.
//! The default plan gives the manager 00:01.0, alpha 00:02.0 and beta
//! 00:03.0, each a virtio-net-pci on a QEMU user network of its own
//! (`qemu::Board::partition_nics`); port 80 of alpha and beta is forwarded
//! from 127.0.0.1:(manager port + 10 + device) (`qemu::partition_nics`).
//!
//! What it shows: the management API answers on its own NIC; in alpha and
//! beta Linux binds virtio-net to its function (MSI-X through its virtual
//! ITS on a host with an ITS, else INTx; the `msi` case below), gets an
//! address by DHCP from its user network (busybox `udhcpc`, typed into its
//! console through the API), and a busybox
//! `httpd` started there answers through its forward with a page naming
//! the partition; neither saw the other's function.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::api_checks::{authority, follow_console_until, Outcome, Stack, UP_MARKER};
use crate::build::DEFAULT_CONFIG;
use crate::http::{self, Request};
use crate::qemu::{manager_port, partition_nics};
const TIMEOUT: Duration = Duration::from_secs(420);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// What is typed into a partition's shell: a udhcpc script that sets the
/// address it is offered and says so, then the lease, then a page naming
/// the partition served by busybox httpd on port 80. The markers are
/// typed with a quote inside (`PINFOLD-NET"-"BOUND`, `P''CI`) so that the shell's
/// echo of the command line is not taken for its output.
fn commands(name: &str) -> String {
    [
        "printf '#!/bin/sh\\n[ \"$1\" = bound ] || exit 0\\nip addr add $ip/$mask dev $interface\\n[ -n \"$router\" ] && ip route add default via $router\\necho PINFOLD-NET\"-\"BOUND ip=$ip\\n' > /tmp/dhcp.sh".to_string(),
        "chmod +x /tmp/dhcp.sh; ip link set eth0 up".to_string(),
        "udhcpc -i eth0 -n -q -t 10 -s /tmp/dhcp.sh || echo PINFOLD-NET\"-\"NO-LEASE".to_string(),
        format!("mkdir -p /www; echo PINFOLD-HTTP-{name} > /www/index.html"),
        "httpd -p 80 -h /www && echo PINFOLD-NET\"-\"HTTPD".to_string(),
        "grep -c . /proc/bus/pci/devices | sed 's/^/PINFOLD-NET-P''CI count=/'".to_string(),
    ]
    .join("\n")
        + "\n"
}

fn json_string(text: &str) -> String {
    serde_json::Value::String(text.to_string()).to_string()
}

pub fn net_partitions(stack: &mut Stack) -> Outcome {
    let plan = pinfold_config::load(Path::new(DEFAULT_CONFIG)).map_err(|e| e.to_string())?;
    let nics = partition_nics(&plan, manager_port());
    if nics.len() < 2 {
        return Err(format!(
            "{DEFAULT_CONFIG} gives {} partition NICs, not alpha's and beta's",
            nics.len()
        ));
    }
    let deadline = Instant::now() + TIMEOUT;
    let first = stack.first_answer()?;
    let token = stack.token(deadline)?;
    let mut notes = vec![format!(
        "management API answered on its own NIC (00:01.0) {:.1} s after QEMU started",
        first.as_secs_f64()
    )];
    for name in ["alpha", "beta"] {
        stack
            .qemu
            .wait_for(&format!("{name} up"), 0, deadline, |line| {
                line.contains(&format!("[{name}] {UP_MARKER}{name} "))
            })
            .map_err(|err| err.to_string())?;
    }
    for nic in &nics {
        let name = nic.partition.as_str();
        let (bound, pci) = bring_up(name, &token, deadline)?;
        if !pci.ends_with("count=1") {
            return Err(format!("{name} sees other functions: `{pci}`"));
        }
        fetch_page(name, nic.host_port)?;
        notes.push(format!(
            "{name}: 00:{:02x}.{} alone on its bus, {}, httpd reached through 127.0.0.1:{}",
            nic.device,
            nic.function,
            bound.trim(),
            nic.host_port
        ));
    }
    // The API still answers after both guests' traffic.
    let list = http::send(
        &authority(),
        &Request::get("/api/v1/partitions"),
        REQUEST_TIMEOUT,
    )
    .map_err(|e| format!("the management API after the guests' traffic: {e}"))?;
    if list.status != 200 {
        return Err(format!("GET /api/v1/partitions: {}", list.status));
    }
    let refused = stack
        .qemu
        .lines()
        .iter()
        .filter(|l| l.text.contains("refused") && l.text.contains("PCI "))
        .count();
    notes.push(format!("{refused} PCI configuration writes refused"));
    Ok(notes)
}

/// Types `text` into partition `name`'s console through the API; returns
/// the console cursor from before, for `follow_console_until`.
fn type_into(name: &str, token: &str, text: &str) -> Result<u64, String> {
    let cursor = crate::api_checks::console_end(name)?;
    let body = format!("{{\"data\":{}}}", json_string(text));
    let path = format!("/api/v1/partitions/{name}/console");
    let reply = http::send(
        &authority(),
        &Request::post(&path, Some(token), Some(&body)),
        REQUEST_TIMEOUT,
    )
    .map_err(|e| format!("{path}: {e}"))?;
    // 202: taken into the console's input (docs/API.md).
    if !matches!(reply.status, 200 | 202) {
        return Err(format!("{path}: {} {}", reply.status, reply.body));
    }
    Ok(cursor)
}

/// Types [`commands`] into partition `name`'s console (through the API)
/// and waits for its DHCP lease and httpd: the `PINFOLD-NET-BOUND` and
/// `PINFOLD-NET-PCI count=` lines.
fn bring_up(name: &str, token: &str, deadline: Instant) -> Result<(String, String), String> {
    let cursor = type_into(name, token, &commands(name))?;
    let bound = follow_console_until(name, cursor, "PINFOLD-NET-BOUND ip=", deadline)
        .map_err(|e| format!("{name} got no DHCP lease: {e}"))?;
    follow_console_until(name, cursor, "PINFOLD-NET-HTTPD", deadline)?;
    let pci = follow_console_until(name, cursor, "PINFOLD-NET-PCI count=", deadline)?;
    Ok((bound, pci))
}

/// One page from partition `name`'s httpd through its forward, which
/// must be the page naming it. The guest's busybox httpd speaks plain
/// HTTP (only the management API is HTTPS).
fn fetch_page(name: &str, host_port: u16) -> Result<(), String> {
    let page = http::send_over(
        false,
        &format!("127.0.0.1:{host_port}"),
        &Request::get("/"),
        REQUEST_TIMEOUT,
    )
    .map_err(|e| format!("{name}'s httpd through 127.0.0.1:{host_port}: {e}"))?;
    let want = format!("PINFOLD-HTTP-{name}");
    if page.status != 200 || !page.body.contains(&want) {
        return Err(format!(
            "{name}'s httpd through 127.0.0.1:{host_port}: {} {:?}, not {want}",
            page.status, page.body
        ));
    }
    Ok(())
}

/// Page fetches [`msi_rises`] makes between its two samples.
const FETCHES: usize = 20;

/// Partition `name`'s NIC is on MSI-X through its virtual ITS: its
/// `/proc/interrupts` has ITS-MSI lines, and their counts rise over
/// [`FETCHES`] page fetches through its forward at `host_port`. Brings its
/// NIC up first ([`bring_up`]) unless its httpd already answers (after
/// `net-partitions` on the shared boot). Returns (lines, before, after).
pub fn msi_rises(
    name: &str,
    host_port: u16,
    token: &str,
    deadline: Instant,
) -> Result<(u64, u64, u64), String> {
    if fetch_page(name, host_port).is_err() {
        bring_up(name, token, deadline)?;
    }
    let (lines, before) = msi_sample(name, token, deadline)?;
    if lines == 0 {
        return Err(format!(
            "{name}'s /proc/interrupts has no ITS-MSI line: its NIC is not on MSI-X"
        ));
    }
    for i in 0..FETCHES {
        fetch_page(name, host_port).map_err(|e| format!("fetch {i}: {e}"))?;
    }
    let (_, after) = msi_sample(name, token, deadline)?;
    if after <= before {
        return Err(format!(
            "{name}'s ITS-MSI count did not rise over {FETCHES} page fetches: {before} -> {after}"
        ));
    }
    Ok((lines, before, after))
}

/// What is typed into a partition's shell to count its MSIs: every
/// `/proc/interrupts` line of the ITS's MSI domain, the per-CPU counts
/// summed (the fields that are numbers, up to the chip name). The marker
/// is typed with a quote inside so that the echo is not taken for it.
const MSI_COUNT: &str = "grep ITS-MSI /proc/interrupts > /tmp/msi; s=0; n=0; \
while read -r irq rest; do n=$((n+1)); for w in $rest; do case $w in *[!0-9]*) break;; \
*) s=$((s+w));; esac; done; done < /tmp/msi; echo PINFOLD-M''SI lines=$n count=$s\n";

/// `lines=N count=M` of a PINFOLD-MSI line.
fn msi_numbers(line: &str) -> Option<(u64, u64)> {
    let field = |key: &str| {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .and_then(|v| v.parse().ok())
    };
    Some((field("lines=")?, field("count=")?))
}

fn msi_sample(name: &str, token: &str, deadline: Instant) -> Result<(u64, u64), String> {
    let cursor = type_into(name, token, MSI_COUNT)?;
    let line = follow_console_until(name, cursor, "PINFOLD-MSI lines=", deadline)?;
    msi_numbers(&line).ok_or_else(|| format!("{name}: unreadable `{line}`"))
}

/// The `msi` boot case, on the shared boot after `net-partitions` (whose
/// DHCP lease and httpd it uses; run alone it brings alpha's NIC up): alpha's virtio-net uses MSI-X
/// through its virtual ITS (`hv::its`): `/proc/interrupts` has ITS-MSI
/// lines, and their counts rise while traffic flows through its NIC
/// (pages fetched through its port forward).
pub fn msi(stack: &mut Stack) -> Outcome {
    msi_checked(stack, false)
}

/// [`msi`], and how alpha's MSIs reached it: `direct` (GICv4.0) asks that
/// no physical LPI was taken at EL2 for it (`lpis=0` on its stats line),
/// otherwise (GICv3, the trapped path) that they were.
pub fn msi_checked(stack: &mut Stack, direct: bool) -> Outcome {
    let plan = pinfold_config::load(Path::new(DEFAULT_CONFIG)).map_err(|e| e.to_string())?;
    let nics = partition_nics(&plan, manager_port());
    let nic = nics
        .iter()
        .find(|n| n.partition == "alpha")
        .ok_or_else(|| format!("{DEFAULT_CONFIG} gives alpha no NIC"))?;
    let deadline = Instant::now() + TIMEOUT;
    let token = stack.token(deadline)?;
    stack
        .qemu
        .wait_for("alpha up", 0, deadline, |line| {
            line.contains(&format!("[alpha] {UP_MARKER}alpha "))
        })
        .map_err(|err| err.to_string())?;
    let (lines, before, after) = msi_rises("alpha", nic.host_port, &token, deadline)?;
    let from = stack.qemu.lines().len();
    stack.qemu.send(b"\x01s").map_err(|err| err.to_string())?;
    let stats = stack
        .qemu
        .wait_for("alpha's stats line", from, deadline, |l| {
            l.contains("pinfold: stats partition=alpha ")
        })
        .map_err(|err| err.to_string())?;
    let lpis = crate::harness::number_after(&stats.text, "lpis=")
        .ok_or_else(|| format!("no lpis= on `{}`", stats.text))?;
    match (direct, lpis) {
        (true, 0) | (false, 1..) => {}
        _ => {
            return Err(format!(
                "{} MSIs of alpha's were taken at EL2 as physical LPIs ({}): `{}`",
                if direct { "direct" } else { "trapped" },
                if direct {
                    "none expected"
                } else {
                    "some expected"
                },
                stats.text
            ))
        }
    }
    let its_lines = stack
        .qemu
        .lines()
        .iter()
        .filter(|l| l.text.contains("ITS command") && l.text.contains("[alpha]"))
        .count();
    Ok(vec![
        format!("alpha: {lines} ITS-MSI lines in /proc/interrupts"),
        format!("alpha: ITS-MSI interrupts {before} -> {after} over {FETCHES} page fetches"),
        format!(
            "alpha: {lpis} physical LPIs taken at EL2 for it ({})",
            if direct {
                "direct vLPIs: none"
            } else {
                "the trapped GICv3 path"
            }
        ),
        format!("{its_lines} vITS command faults logged for alpha"),
    ])
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_msi_line_gives_its_line_count_and_interrupt_count() {
        assert_eq!(
            super::msi_numbers("PINFOLD-MSI lines=3 count=41"),
            Some((3, 41))
        );
        assert_eq!(super::msi_numbers("PINFOLD-MSI lines= count=4"), None);
    }
}
