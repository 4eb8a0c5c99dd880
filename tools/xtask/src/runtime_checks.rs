//! The boot check of run-time partitions (`runtime`), on the shared boot of
//! the default plan and driven through `hvctl --json` (so the CLI is
//! checked with the API): alpha is stopped and deleted (the answer comes
//! before its RAM is zeroed: the RAM shows as `scrubbing` until it is free);
//! a probe partition on its CPU gets RAM alpha's Linux had used and reads
//! every word of it as zero (the hypervisor scrubbed it); then a Linux partition is created from
//! a kernel and initrd uploaded through the API, boots, is changed while
//! stopped (bootargs and memory) and boots again with them, and is deleted,
//! leaving the CPU free; it is given alpha's NIC (`pci`, free once alpha is
//! deleted), and a create naming beta's NIC is refused (409 `pci[0]`).
//! Last, alpha is created again from its own exported settings, its NIC
//! included, so that the shared boot ends as it began.
//!
//! Notes: DELETE's answer time and when the freed RAM was free, the upload
//! throughput, the time from the create request to the new partition's
//! first console line.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::api_checks::{self, Outcome, Stack};
use crate::Workspace;

/// A Linux boot to its UP marker, at most (QEMU TCG, one vCPU).
const BOOT_LIMIT: Duration = Duration::from_secs(120);
/// The probe's RAM scan, at most.
const SCRUB_LIMIT: Duration = Duration::from_secs(60);
const UP_MARKER: &str = "PINFOLD-GUEST-UP name=";
pub(crate) const KERNEL: &str = "target/guest/linux/Image";
pub(crate) const INITRD: &str = "target/guest/initramfs.cpio.gz";
const PROBE: &str = "target/guest/test-guest.bin";

pub(crate) struct Hvctl {
    pub(crate) bin: PathBuf,
    pub(crate) url: String,
    pub(crate) token: String,
    pub(crate) root: PathBuf,
}

impl Hvctl {
    /// `hvctl --json ARGS`'s output.
    fn output(&self, args: &[&str]) -> Result<std::process::Output, String> {
        Command::new(&self.bin)
            .current_dir(&self.root)
            .args(["--url", &self.url, "--token", &self.token, "--json"])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|err| format!("running hvctl: {err}"))
    }

    /// `hvctl --json ARGS`, parsed; Err with its output unless it exits 0.
    pub(crate) fn json(&self, args: &[&str]) -> Result<Value, String> {
        let out = self.output(args)?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(format!(
                "hvctl {} exited with {}: {}{}",
                args.join(" "),
                out.status,
                stdout.trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        if stdout.trim().is_empty() {
            return Ok(Value::Null);
        }
        serde_json::from_str(stdout.trim())
            .map_err(|err| format!("hvctl {} printed no JSON ({err}): {stdout}", args.join(" ")))
    }

    /// `hvctl --json ARGS` that must fail: its `{error, detail, field}`.
    pub(crate) fn refused(
        &self,
        args: &[&str],
    ) -> Result<(String, Option<String>, String), String> {
        let out = self.output(args)?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if out.status.success() {
            return Err(format!("hvctl {} was accepted: {stdout}", args.join(" ")));
        }
        let v: Value = serde_json::from_str(stdout.trim()).map_err(|e| {
            format!(
                "hvctl {} printed no JSON error ({e}): {stdout}",
                args.join(" ")
            )
        })?;
        Ok((
            v["error"].as_str().unwrap_or_default().to_string(),
            v["field"].as_str().map(str::to_string),
            v["detail"].as_str().unwrap_or_default().to_string(),
        ))
    }

    /// `DELETE /api/v1/images/{id}` (hvctl has no command for it).
    fn delete_image(&self, id: &str) -> Result<(), String> {
        let path = format!("/api/v1/images/{id}");
        let request = crate::http::Request {
            method: "DELETE",
            path: &path,
            token: Some(&self.token),
            body: None,
        };
        let reply = crate::http::send(
            self.url.trim_start_matches("https://"),
            &request,
            Duration::from_secs(10),
        )
        .map_err(|e| format!("DELETE {path}: {e}"))?;
        if reply.status != 204 {
            return Err(format!(
                "DELETE {path} answered {}: {}",
                reply.status, reply.body
            ));
        }
        Ok(())
    }

    fn state(&self, name: &str) -> Result<String, String> {
        let p = self.json(&["show", name])?;
        p.get("state")
            .and_then(Value::as_str)
            .map(str::to_string)
            .ok_or_else(|| format!("hvctl show {name}: no state in {p}"))
    }

    /// Waits until `name` is in `state` (10 s at most).
    pub(crate) fn wait_state(&self, name: &str, state: &str) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let now = self.state(name)?;
            if now == state {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!("{name} is {now}, not {state}, after 10 s"));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// The owner's name of every CPU and the RAM ranges of `GET /resources`.
fn resources(hv: &Hvctl) -> Result<Value, String> {
    hv.json(&["resources"])
}

fn ram_of(resources: &Value, partition: &str) -> Option<(u64, u64)> {
    resources["memory"]["ranges"]
        .as_array()?
        .iter()
        .find(|r| r["partition"].as_str() == Some(partition))
        .and_then(|r| Some((r["base"].as_u64()?, r["size"].as_u64()?)))
}

fn cpu_owner(resources: &Value, cpu: u64) -> Option<String> {
    resources["cpus"]
        .as_array()?
        .iter()
        .find(|c| c["cpu"].as_u64() == Some(cpu))
        .and_then(|c| c["partition"].as_str().map(str::to_string))
}

/// The `scrubbing` RAM ranges of `GET /resources`: (base, bytes left).
fn scrubbing(resources: &Value) -> Vec<(u64, u64)> {
    resources["memory"]["ranges"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["owner"] == "scrubbing")
        .map(|r| {
            (
                r["base"].as_u64().unwrap_or(0),
                r["left_bytes"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// Polls `GET /resources` until no RAM is `scrubbing`; when that was.
fn wait_scrubbed(hv: &Hvctl, deadline: Instant) -> Result<Instant, String> {
    loop {
        let r = resources(hv)?;
        if scrubbing(&r).is_empty() {
            return Ok(Instant::now());
        }
        if Instant::now() > deadline {
            return Err(format!("freed RAM still scrubbing: {r}"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The scrub probe's line: how many nonzero words it found.
pub fn scrub_count(line: &str) -> Option<u64> {
    let rest = line.split("PROBE scrub: ").nth(1)?;
    rest.split_whitespace().next()?.parse().ok()
}

pub fn runtime(ws: &Workspace, stack: &mut Stack) -> Outcome {
    let bin = api_checks::build_hvctl(ws)?;
    stack.first_answer()?;
    let token = stack.token(Instant::now() + Duration::from_secs(60))?;
    let hv = Hvctl {
        bin,
        url: format!("https://127.0.0.1:{}", crate::qemu::manager_port()),
        token,
        root: ws.root.clone(),
    };
    for file in [KERNEL, INITRD, PROBE] {
        if !Path::new(&ws.root.join(file)).is_file() {
            return Err(format!("{file} is missing (built with the default plan)"));
        }
    }
    let mut notes = Vec::new();
    let alpha = hv.json(&["show", "alpha"])?;
    let alpha_config = alpha["config"].clone();
    // The default plan gives alpha its NIC (00:02.0): gamma borrows it.
    let alpha_pci = strings(&alpha_config["pci"]);

    // The probe's image first: image blocks come from the free pool too,
    // and alpha's block must be the highest free one when the probe's RAM
    // is taken.
    let probe = hv.json(&["upload", PROBE, "--kind", "kernel", "--name", "probe"])?;
    let probe_id = probe["id"]
        .as_str()
        .ok_or("upload printed no id")?
        .to_string();

    // 1. alpha down and deleted: its CPU and RAM are free.
    let before = resources(&hv)?;
    let alpha_ram = ram_of(&before, "alpha").ok_or("resources show no RAM of alpha")?;
    hv.json(&["stop", "alpha"])?;
    hv.wait_state("alpha", "stopped")?;
    let asked = Instant::now();
    hv.json(&["delete", "alpha"])?;
    let answered = asked.elapsed();
    let after = resources(&hv)?;
    if cpu_owner(&after, 1).is_some() || ram_of(&after, "alpha").is_some() {
        return Err(format!(
            "alpha deleted, but resources still show it: {after}"
        ));
    }
    // Its RAM is scrubbed after the answer: "scrubbing" until wholly
    // zeroed, never free before (the probe below checks the zeroes).
    let left: Vec<(u64, u64)> = scrubbing(&after)
        .into_iter()
        .filter(|&(base, _)| base == alpha_ram.0)
        .collect();
    let scrubbed = wait_scrubbed(&hv, asked + SCRUB_LIMIT)?;
    notes.push(format!(
        "DELETE alpha answered in {} ms ({} of its {} MiB still to zero then); free after {:.1} s",
        answered.as_millis(),
        left.first()
            .map_or("none".into(), |&(_, l)| format!("{} MiB", l >> 20)),
        alpha_ram.1 >> 20,
        scrubbed.duration_since(asked).as_secs_f64()
    ));

    // 2. The probe on alpha's CPU and RAM: every word zero.
    let mib = (alpha_ram.1 >> 20).to_string();
    let cursor = stack.qemu.lines().len();
    hv.json(&[
        "create",
        "probe",
        "--cpus",
        "1",
        "--memory",
        &mib,
        "--kernel",
        &probe_id,
        "--kernel-format",
        "raw",
        "--bootargs",
        "pinfold-probe=scrub",
        "--autostart",
    ])?;
    let placed = resources(&hv)?;
    let probe_ram = ram_of(&placed, "probe").ok_or("resources show no RAM of probe")?;
    let overlap =
        probe_ram.0 < alpha_ram.0 + alpha_ram.1 && alpha_ram.0 < probe_ram.0 + probe_ram.1;
    if !overlap {
        return Err(format!(
            "probe got RAM {probe_ram:x?}, not overlapping alpha's former {alpha_ram:x?}: the scrub check would prove nothing"
        ));
    }
    let line = stack
        .qemu
        .wait_for(
            "the scrub probe",
            cursor,
            Instant::now() + SCRUB_LIMIT,
            |l| l.contains("PROBE scrub: "),
        )
        .map_err(|e| e.to_string())?;
    match scrub_count(&line.text) {
        Some(0) => notes.push(format!(
            "probe on CPU 1 got alpha's RAM (PA {:#x}, {} MiB) and read it all as zero",
            probe_ram.0,
            probe_ram.1 >> 20
        )),
        _ => return Err(format!("RAM not scrubbed: `{}`", line.text)),
    }
    hv.json(&["stop", "probe"])?;
    hv.wait_state("probe", "stopped")?;
    hv.json(&["delete", "probe"])?;
    hv.delete_image(&probe_id)?;
    wait_scrubbed(&hv, Instant::now() + SCRUB_LIMIT)?;

    // 3. A Linux partition from uploaded images.
    let size = std::fs::metadata(ws.root.join(KERNEL))
        .map_err(|e| e.to_string())?
        .len();
    let started = Instant::now();
    let kernel = hv.json(&["upload", KERNEL, "--kind", "kernel", "--name", "Image"])?;
    let upload = started.elapsed();
    notes.push(format!(
        "uploaded the {:.1} MB kernel in {:.1} s ({:.2} MB/s)",
        size as f64 / 1e6,
        upload.as_secs_f64(),
        size as f64 / 1e6 / upload.as_secs_f64()
    ));
    let kernel_id = kernel["id"]
        .as_str()
        .ok_or("upload printed no id")?
        .to_string();
    let initrd = hv.json(&["upload", INITRD, "--kind", "initrd", "--name", "initramfs"])?;
    let initrd_id = initrd["id"]
        .as_str()
        .ok_or("upload printed no id")?
        .to_string();
    let bootargs = "console=ttyAMA0 earlycon=pl011,0x09000000";
    notes.push(invalid_requests(&hv, &ws.root, &kernel_id, &initrd_id)?);
    let cursor = stack.qemu.lines().len();
    let asked = Instant::now();
    // gamma takes the NIC alpha had (free since alpha's delete).
    hv.json(&[
        "create",
        "gamma",
        "--cpus",
        "1",
        "--memory",
        "256M",
        "--kernel",
        &kernel_id,
        "--initrd",
        &initrd_id,
        "--bootargs",
        bootargs,
        "--pci",
        &alpha_pci.join(","),
        "--autostart",
    ])?;
    let gamma = hv.json(&["show", "gamma"])?;
    if strings(&gamma["config"]["pci"]) != alpha_pci {
        return Err(format!(
            "gamma does not show alpha's functions {alpha_pci:?}: {}",
            gamma["config"]
        ));
    }
    let first = stack
        .qemu
        .wait_for(
            "gamma's first console line",
            cursor,
            Instant::now() + BOOT_LIMIT,
            |l| l.starts_with("[gamma]"),
        )
        .map_err(|e| e.to_string())?;
    let asked_at = asked.duration_since(stack.qemu.started());
    notes.push(format!(
        "create request to gamma's first console line: {:.2} s",
        first.at.saturating_sub(asked_at).as_secs_f64()
    ));
    stack
        .qemu
        .wait_for(
            "gamma's UP marker",
            cursor,
            Instant::now() + BOOT_LIMIT,
            |l| l.contains(&format!("[gamma] {UP_MARKER}gamma")),
        )
        .map_err(|e| e.to_string())?;
    if let Some(nic) = alpha_pci.first() {
        // The hypervisor resets the function before gamma starts with it.
        let short = nic.trim_start_matches("0000:");
        let reset = stack
            .qemu
            .lines()
            .iter()
            .skip(cursor)
            .find(|l| l.text.contains(&format!("partition gamma: pci {short} ")))
            .map(|l| l.text.clone());
        notes.push(match reset {
            Some(line) => format!("gamma got alpha's NIC {nic}: `{line}`"),
            None => format!("gamma got alpha's NIC {nic} (config shows it)"),
        });
    }

    // 4. Changed while stopped: bootargs and memory; it boots with them.
    hv.json(&["stop", "gamma"])?;
    hv.wait_state("gamma", "stopped")?;
    let changed = format!("{bootargs} pinfold.changed=1");
    hv.json(&["edit", "gamma", "--memory", "384M", "--bootargs", &changed])?;
    let shown = hv.json(&["show", "gamma"])?;
    if shown["config"]["memory_mib"].as_u64() != Some(384)
        || shown["config"]["bootargs"].as_str() != Some(changed.as_str())
    {
        return Err(format!("edit not shown: {shown}"));
    }
    let cursor = stack.qemu.lines().len();
    hv.json(&["start", "gamma"])?;
    let mem = stack
        .qemu
        .wait_for(
            "gamma's memory line",
            cursor,
            Instant::now() + BOOT_LIMIT,
            |l| l.starts_with("[gamma]") && l.contains("Memory: "),
        )
        .map_err(|e| e.to_string())?;
    if !mem.text.contains("/393216K") {
        return Err(format!("gamma did not boot with 384 MiB: `{}`", mem.text));
    }
    let cmdline = stack
        .qemu
        .wait_for(
            "gamma's command line",
            cursor,
            Instant::now() + BOOT_LIMIT,
            |l| l.contains("[gamma] PINFOLD-GUEST-CMDLINE name=gamma"),
        )
        .map_err(|e| e.to_string())?;
    if !cmdline.text.ends_with(&changed) {
        return Err(format!(
            "gamma did not boot with the changed bootargs: `{}`",
            cmdline.text
        ));
    }
    notes.push("gamma booted again with 384 MiB and the changed bootargs".into());

    // 5. Deleted: CPU 1 is free again; alpha comes back as it was.
    hv.json(&["stop", "gamma"])?;
    hv.wait_state("gamma", "stopped")?;
    hv.json(&["delete", "gamma"])?;
    if cpu_owner(&resources(&hv)?, 1).is_some() {
        return Err("gamma deleted but CPU 1 is still owned".into());
    }
    wait_scrubbed(&hv, Instant::now() + SCRUB_LIMIT)?;
    let cpus = join(&alpha_config["cpus"]);
    let memory = format!("{}M", alpha_config["memory_mib"].as_u64().unwrap_or(256));
    let kernel = alpha_config["kernel"].as_str().unwrap_or("0").to_string();
    let initrd = alpha_config["initrd"].as_str().unwrap_or("1").to_string();
    let args = alpha_config["bootargs"]
        .as_str()
        .unwrap_or(bootargs)
        .to_string();
    hv.json(&[
        "create",
        "alpha",
        "--cpus",
        &cpus,
        "--memory",
        &memory,
        "--kernel",
        &kernel,
        "--initrd",
        &initrd,
        "--bootargs",
        &args,
        "--pci",
        &alpha_pci.join(","),
        "--autostart",
    ])?;
    hv.wait_state("alpha", "running")?;
    let shown = hv.json(&["show", "alpha"])?;
    if strings(&shown["config"]["pci"]) != alpha_pci {
        return Err(format!(
            "alpha came back without its functions {alpha_pci:?}: {}",
            shown["config"]
        ));
    }
    notes.push(format!(
        "alpha created again from its exported settings (PCI {alpha_pci:?} back from gamma), running"
    ));
    Ok(notes)
}

/// The strings of a JSON array (empty for anything else).
fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Each bad request is a 4xx naming the field, and leaves the partitions,
/// the CPUs and the images as they were.
fn invalid_requests(hv: &Hvctl, root: &Path, kernel: &str, initrd: &str) -> Result<String, String> {
    let before_parts = hv.json(&["list"])?;
    let before_images = hv.json(&["images"])?;
    let before_held = resources(hv)?["images_bytes"].as_u64();
    let create = |name: &str, cpus: &str, memory: &str, kernel: &str, format: &str| {
        hv.refused(&[
            "create",
            name,
            "--cpus",
            cpus,
            "--memory",
            memory,
            "--kernel",
            kernel,
            "--initrd",
            initrd,
            "--kernel-format",
            format,
        ])
    };
    // A one-vCPU partition naming `pci`, refused for its PCI list alone.
    let create_pci = |pci: &str| {
        hv.refused(&[
            "create", "bad", "--cpus", "1", "--memory", "256M", "--kernel", kernel, "--pci", pci,
        ])
    };
    let mut seen = Vec::new();
    let mut expect =
        |what: &str, got: (String, Option<String>, String), error: &str, field: &str| {
            if got.0 != error || got.1.as_deref() != Some(field) {
                return Err(format!(
                    "{what}: expected {error} on field {field}, got {} on {:?}: {}",
                    got.0, got.1, got.2
                ));
            }
            seen.push(format!("{what} -> {error} `{field}`"));
            Ok(())
        };
    let clash = create("bad", "1,2", "256M", kernel, "linux")?;
    if clash.2 != "partition \"bad\": cpus: CPU 2 is also used by partition \"beta\"" {
        return Err(format!(
            "the CPU clash is not the build's sentence: {:?}",
            clash.2
        ));
    }
    expect("a CPU beta owns", clash, "conflict", "cpus")?;
    expect(
        "64 GiB of RAM",
        create("bad", "1", "64G", kernel, "linux")?,
        "conflict",
        "memory",
    )?;
    expect(
        "a name taken",
        create("beta", "1", "256M", kernel, "linux")?,
        "conflict",
        "name",
    )?;
    expect(
        "beta's NIC 0000:00:03.0",
        create_pci("0000:00:03.0")?,
        "conflict",
        "pci[0]",
    )?;
    expect(
        "a PCI function that is not SSSS:BB:DD.F",
        create_pci("0000:00:02.0,00:05")?,
        "bad_request",
        "pci[1]",
    )?;
    expect(
        "an initrd as kernel",
        create("bad", "1", "256M", initrd, "linux")?,
        "bad_request",
        "kernel",
    )?;
    let junk = std::env::temp_dir().join(format!("pinfold-not-an-image-{}", std::process::id()));
    std::fs::write(&junk, vec![0x5a; 64 * 1024]).map_err(|e| e.to_string())?;
    let junk = junk.to_string_lossy().to_string();
    let not_image = hv.json(&["upload", &junk, "--kind", "kernel", "--name", "junk"])?;
    let junk_id = not_image["id"]
        .as_str()
        .ok_or("upload printed no id")?
        .to_string();
    expect(
        "a kernel that is not an arm64 Image",
        create("bad", "1", "256M", &junk_id, "linux")?,
        "bad_request",
        "kernel",
    )?;
    hv.delete_image(&junk_id)?;
    let zeros = "0".repeat(64);
    expect(
        "a wrong sha256",
        hv.refused(&["upload", &junk, "--kind", "kernel", "--sha256", &zeros])?,
        "bad_request",
        "sha256",
    )?;
    let _ = std::fs::remove_file(&junk);
    cut_short_upload(&hv.url, &hv.token)?;
    seen.push("an upload cut short -> refused, nothing kept".into());
    let _ = root;
    let shape = |v: &Value| -> Vec<(String, String, String)> {
        v["partitions"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|p| {
                        (
                            p["name"].to_string(),
                            p["state"].to_string(),
                            p["cpus"].to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let after_parts = hv.json(&["list"])?;
    if shape(&after_parts) != shape(&before_parts) {
        return Err(format!(
            "a refused request changed the partitions: {:?} -> {:?}",
            shape(&before_parts),
            shape(&after_parts)
        ));
    }
    // The manager lists a refused upload as `failed` (with its error); the
    // hypervisor holds nothing of it.
    let images = hv.json(&["images"])?;
    let live = |v: &Value| {
        v["images"].as_array().map_or(0, |a| {
            a.iter()
                .filter(|i| i["state"].as_str() != Some("failed"))
                .count()
        })
    };
    if live(&images) != live(&before_images) {
        return Err(format!("refused uploads left images behind: {images}"));
    }
    let held = resources(hv)?["images_bytes"].as_u64();
    if held != before_held {
        return Err(format!(
            "the hypervisor's images grew from {before_held:?} to {held:?} bytes"
        ));
    }
    Ok(format!("refused, nothing left behind: {}", seen.join("; ")))
}

/// A POST /api/v1/images whose body ends 1000 bytes into the 100,000 its
/// Content-Length promised: the manager must not keep the image.
fn cut_short_upload(url: &str, token: &str) -> Result<(), String> {
    use std::io::{Read, Write};
    let authority = url.trim_start_matches("https://");
    let mut tcp = crate::http::connect_raw(authority, Duration::from_secs(30))?;
    tcp.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    let head = format!(
        "POST /api/v1/images?kind=kernel&name=short HTTP/1.1\r\nHost: {authority}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/octet-stream\r\nContent-Length: 100000\r\nConnection: close\r\n\r\n"
    );
    tcp.write_all(head.as_bytes()).map_err(|e| e.to_string())?;
    tcp.write_all(&[0u8; 1000]).map_err(|e| e.to_string())?;
    tcp.shutdown(std::net::Shutdown::Write)
        .map_err(|e| e.to_string())?;
    let mut reply = String::new();
    let _ = tcp.read_to_string(&mut reply);
    if reply.starts_with("HTTP/1.1 2") {
        return Err(format!("a cut-short upload was accepted: {reply}"));
    }
    Ok(())
}

fn join(cpus: &Value) -> String {
    cpus.as_array()
        .map(|a| {
            a.iter()
                .filter_map(Value::as_u64)
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_else(|| "1".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scrub_count_is_read_from_the_probe_line() {
        let line = "[probe] PROBE scrub: 0 nonzero words outside the image and DTB in 0x40000000..0x50000000 (first at 0x0)";
        assert_eq!(scrub_count(line), Some(0));
        assert_eq!(
            scrub_count("[probe] PROBE scrub: 17 nonzero words"),
            Some(17)
        );
        assert_eq!(scrub_count("[probe] PROBE start"), None);
    }
}
