//! Boot check `redfish` (shared default boot): fleet tools from PyPI, unchanged, against the manager's Redfish service: DMTF's validator, OpenStack's sushy, Ansible's community.general Redfish modules, and the bad inputs.
//!
//! The clients live in a venv, target/redfish-venv, made once (pinned
//! versions, [`PINS`]; installed again only when the pins change); their
//! scripts are `redfish_clients.py` (sushy, then the bad inputs, each step
//! compared with the REST API) and `redfish_playbook.yml` (Ansible), both
//! beside this file. The validator needs DMTF's CSDL schemas (DSP8010),
//! which it downloads from the DMTF site unless told `--skipschema`; that
//! site is not reachable here and no PyPI package ships them, but the
//! crates.io crate `nv-redfish-schema` does (DSP8010 2025.x, `redfish-csdl/
//! csdl`): [`schemas`] has cargo fetch it, checks its pinned SHA-256 and
//! unpacks that folder into target/redfish-schemas ([`SCHEMAS_ENV`] names
//! another folder of DSP8010 CSDL instead). The validator always runs.
//!
//! Then the EventService stream is opened from before Ansible's resets
//! (`Last-Event-ID`) and must deliver beta's ResourcePoweredOff and
//! ResourcePoweredOn as well-formed Redfish Events within 20 s. Last,
//! sushy boots beta over HTTP ([`http_boot`]: the `UefiHttp` override to a
//! boot manifest served on the QEMU host, then ForceRestart), and beta's
//! own plan is put back.
//!
//! beta ends as it began: running, on its own kernel, initrd and bootargs
//! (force-restarted by sushy, powered off and on by Ansible, booted over
//! HTTP, started again), with its boot count 5 higher.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::api_checks::{authority, Outcome, Stack};
use crate::http::{self, Request};
use crate::Workspace;

/// The clients, from PyPI, pinned (Python 3.11 on Debian bookworm).
pub const PINS: [&str; 3] = [
    "redfish-service-validator==3.1.8",
    "sushy==5.14.0",
    "ansible==12.3.0",
];
/// A folder of DSP8010 CSDL to validate against instead of the crate's.
pub const SCHEMAS_ENV: &str = "PINFOLD_REDFISH_SCHEMAS";
/// The crates.io crate that ships DMTF's CSDL (DSP8010), as a dependency
/// line, its file stem and the SHA-256 of its `.crate` (the crates.io
/// index's `cksum`).
const SCHEMA_CRATE: (&str, &str, &str) = (
    "nv-redfish-schema = \"=0.10.1\"",
    "nv-redfish-schema-0.10.1",
    "1bdee22eb005df9021012e5014584c282b50b6d80c3aa49aca5480760920b05d",
);
const CLIENTS_PY: &str = include_str!("redfish_clients.py");
const PLAYBOOK: &str = include_str!("redfish_playbook.yml");
/// Longest any one client may run.
const RUN_LIMIT: Duration = Duration::from_secs(600);

/// The DSP8010 CSDL folder the validator reads: [`SCHEMAS_ENV`]'s, or
/// target/redfish-schemas/csdl unpacked from [`SCHEMA_CRATE`] (fetched
/// once; a stamp names the crate it came from).
fn schemas(root: &Path) -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os(SCHEMAS_ENV).map(PathBuf::from) {
        return if dir.join("ComputerSystem_v1.xml").exists() {
            Ok(dir)
        } else {
            Err(format!(
                "{SCHEMAS_ENV}={}: no ComputerSystem_v1.xml there",
                dir.display()
            ))
        };
    }
    let (dependency, stem, sha256) = SCHEMA_CRATE;
    let base = root.join("target/redfish-schemas");
    let csdl = base.join("csdl");
    let stamp = base.join(".from");
    if std::fs::read_to_string(&stamp).ok().as_deref() == Some(sha256)
        && csdl.join("ComputerSystem_v1.xml").exists()
    {
        return Ok(csdl);
    }
    let _ = std::fs::remove_dir_all(&base);
    std::fs::create_dir_all(&base).map_err(|e| format!("{}: {e}", base.display()))?;
    let archive = base.join(format!("{stem}.crate"));
    crate::cmd::registry_crate(&base.join("fetch"), dependency, stem, sha256, &archive)?;
    let inner = format!("{stem}/redfish-csdl/csdl");
    let out = Command::new("tar")
        .arg("-xzf")
        .arg(&archive)
        .arg("-C")
        .arg(&base)
        .args(["--strip-components=2", &inner])
        .output()
        .map_err(|e| format!("tar: {e}"))?;
    if !out.status.success() || !csdl.join("ComputerSystem_v1.xml").exists() {
        return Err(format!(
            "unpacking {inner} from {}: {}",
            archive.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    std::fs::write(&stamp, sha256).map_err(|e| format!("{}: {e}", stamp.display()))?;
    Ok(csdl)
}

/// The venv with [`PINS`], made when missing or pinned otherwise; the
/// seconds the install took when it was made now.
fn venv(root: &Path) -> Result<(PathBuf, Option<f64>), String> {
    let venv = root.join("target/redfish-venv");
    let pinned = venv.join(".pinned");
    let want = PINS.join("\n");
    if venv.join("bin/rf_service_validator").exists()
        && venv.join("bin/ansible-playbook").exists()
        && std::fs::read_to_string(&pinned).ok().as_deref() == Some(want.as_str())
    {
        return Ok((venv, None));
    }
    let start = Instant::now();
    let run = |c: &mut Command| -> Result<(), String> {
        let out = c.output().map_err(|e| format!("{c:?}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "{c:?}: {}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(())
    };
    run(Command::new("python3").arg("-m").arg("venv").arg(&venv)).map_err(|e| {
        format!(
            "making target/redfish-venv (needs python3-venv: apt-get install python3-venv): {e}"
        )
    })?;
    run(Command::new(venv.join("bin/pip"))
        .args(["install", "--quiet"])
        .args(PINS))?;
    std::fs::write(&pinned, &want).map_err(|e| e.to_string())?;
    Ok((venv, Some(start.elapsed().as_secs_f64())))
}

/// Runs `c` to its end (at most [`RUN_LIMIT`]), its output into `out`:
/// whether it succeeded, the output, and the seconds it took.
fn run_logged(mut c: Command, out: &Path) -> Result<(bool, String, f64), String> {
    let start = Instant::now();
    let file = std::fs::File::create(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let err = file.try_clone().map_err(|e| e.to_string())?;
    let mut child = c
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(err)
        .spawn()
        .map_err(|e| format!("{c:?}: {e}"))?;
    let Some(status) = crate::cmd::wait_within(&mut child, RUN_LIMIT)? else {
        return Err(format!(
            "{c:?} did not finish within {} s (log: {})",
            RUN_LIMIT.as_secs(),
            out.display()
        ));
    };
    let text = std::fs::read_to_string(out).unwrap_or_default();
    Ok((status.success(), text, start.elapsed().as_secs_f64()))
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The validator's summary table: PASS, WARN, FAIL, NOT TESTED counts.
pub fn validator_counts(output: &str) -> Option<[u64; 4]> {
    let lines: Vec<&str> = output.lines().collect();
    let header = lines.iter().position(|l| l.contains("NOT TESTED"))?;
    let values = lines.get(header + 2)?;
    // Strip colour escapes, then the four numbers between the bars.
    let mut clean = String::new();
    let mut in_escape = false;
    for c in values.chars() {
        match (in_escape, c) {
            (false, '\u{1b}') => in_escape = true,
            (true, 'm') => in_escape = false,
            (true, _) => {}
            (false, c) => clean.push(c),
        }
    }
    let numbers: Vec<u64> = clean
        .split('|')
        .filter_map(|cell| cell.trim().parse().ok())
        .collect();
    numbers.try_into().ok()
}

/// The `WARN` and `FAIL` findings of the validator's debug log (under
/// `dir`, one per property), without their time stamps, deduplicated.
fn findings(dir: &Path) -> (Vec<String>, Vec<String>) {
    let mut warns = Vec::new();
    let mut fails = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "log") {
                for line in std::fs::read_to_string(&p).unwrap_or_default().lines() {
                    if let Some((_, what)) = line.split_once(" - WARN - ") {
                        warns.push(what.to_string());
                    } else if let Some((_, what)) = line.split_once(" - FAIL - ") {
                        fails.push(what.to_string());
                    }
                }
            }
        }
    }
    warns.sort();
    warns.dedup();
    fails.sort();
    fails.dedup();
    (warns, fails)
}

fn beta_rest(token: &str) -> Result<(String, u64), String> {
    let reply = http::send(
        &authority(),
        &Request {
            token: Some(token),
            ..Request::get("/api/v1/partitions/beta")
        },
        Duration::from_secs(30),
    )
    .map_err(|e| e.to_string())?;
    if reply.status != 200 {
        return Err(format!("GET beta answered {}", reply.status));
    }
    let v: serde_json::Value = serde_json::from_str(&reply.body).map_err(|e| e.to_string())?;
    Ok((
        v["state"].as_str().unwrap_or("").to_string(),
        v["boot_count"].as_u64().unwrap_or(0),
    ))
}

/// Tier 2 (shared boot): the validator (no errors, warnings listed),
/// sushy (systems, power states, beta ForceOff/On/ForceRestart, each
/// matched by the REST API's state and boot count), the bad inputs (each
/// a Redfish error, nothing changed), Ansible (inventory, PowerForceOff,
/// PowerOn of beta), the event stream, the HTTP boot; beta running on its
/// own plan again at the end, 5 boots on.
pub fn redfish(ws: &Workspace, stack: &mut Stack, log: &Path) -> Outcome {
    let token = stack.token(Instant::now() + Duration::from_secs(240))?;
    stack.first_answer()?;
    stack.guests_up(Instant::now() + Duration::from_secs(240))?;
    let mut notes = Vec::new();
    let (venv, installed) = venv(&ws.root)?;
    notes.push(match installed {
        Some(secs) => format!(
            "target/redfish-venv installed in {secs:.0} s ({})",
            PINS.join(", ")
        ),
        None => format!("target/redfish-venv cached ({})", PINS.join(", ")),
    });
    let dir = log.with_file_name("redfish");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let base = format!("https://{}", authority());
    let (_, boots_before) = beta_rest(&token)?;

    // 1. DMTF's validator, over sessions, every resource from the root.
    let schemas = schemas(&ws.root)?;
    let mut c = Command::new(venv.join("bin/rf_service_validator"));
    c.arg("--ip")
        .arg(&base)
        .args([
            "--user",
            "boot",
            "--password",
            &token,
            "--authtype",
            "Session",
        ])
        .arg("--logdir")
        .arg(dir.join("validator"))
        .arg("--schema_directory")
        .arg(&schemas)
        .arg("--skipschema")
        .current_dir(&dir);
    let (_, out, secs) = run_logged(c, &dir.join("validator.log"))?;
    let counts = validator_counts(&out)
        .ok_or_else(|| format!("no summary from the validator:\n{}", tail(&out, 30)))?;
    let (warns, fails) = findings(&dir.join("validator"));
    let [pass, warn, fail, skip] = counts;
    if fail > 0 {
        return Err(format!(
            "the validator found {fail} errors ({pass} passed, {warn} warnings):\n{}\n(logs: {})",
            fails.join("\n"),
            dir.display()
        ));
    }
    if pass == 0 {
        return Err(format!(
            "the validator passed nothing ({warn} warnings, {skip} not tested; logs: {})",
            dir.display()
        ));
    }
    notes.push(format!(
        "validator (schemas from {}): {pass} pass, {warn} warn, 0 fail, {skip} not tested, \
         {secs:.0} s",
        schemas.display()
    ));
    for w in warns.iter().take(20) {
        notes.push(format!("  warning: {w}"));
    }

    // 2. sushy and the bad inputs.
    let script = dir.join("redfish_clients.py");
    std::fs::write(&script, CLIENTS_PY).map_err(|e| e.to_string())?;
    let mut c = Command::new(venv.join("bin/python"));
    c.arg(&script).args([&base, "boot", &token]);
    let (ok, out, secs) = run_logged(c, &dir.join("clients.log"))?;
    if !ok {
        return Err(format!("sushy / bad inputs:\n{}", tail(&out, 25)));
    }
    for line in out.lines().filter(|l| l.starts_with("ok ")) {
        notes.push(format!("  {}", &line[3..]));
    }
    notes.push(format!("sushy and bad inputs: {secs:.0} s"));
    let (state, boots) = beta_rest(&token)?;
    if state != "running" || boots != boots_before + 2 {
        return Err(format!(
            "after sushy beta is {state} with boot_count {boots}; want running {}",
            boots_before + 2
        ));
    }

    // EthernetInterfaces from the assigned NICs, and the REST host PCI list.
    notes.push(nics_check(&token)?);

    // 3. Ansible (the event log's end first: step 4 reads from there).
    let cursor = event_end(&token)?;
    let playbook = dir.join("redfish_playbook.yml");
    std::fs::write(&playbook, PLAYBOOK).map_err(|e| e.to_string())?;
    let mut c = Command::new(venv.join("bin/ansible-playbook"));
    c.arg("-i")
        .arg("localhost,")
        .arg(&playbook)
        .env("RF_BASEURI", authority())
        .env("RF_USER", "boot")
        .env("RF_PASSWORD", &token)
        .env("ANSIBLE_NOCOLOR", "1")
        .env("ANSIBLE_LOCALHOST_WARNING", "false")
        .env("ANSIBLE_INVENTORY_UNPARSED_WARNING", "false")
        .env("ANSIBLE_HOME", dir.join("ansible"));
    let (ok, out, secs) = run_logged(c, &dir.join("ansible.log"))?;
    if !ok {
        return Err(format!("ansible-playbook:\n{}", tail(&out, 30)));
    }
    let recap = out
        .lines()
        .find(|l| l.starts_with("localhost") && l.contains("ok="))
        .unwrap_or("")
        .split_whitespace()
        .skip(2)
        .collect::<Vec<_>>()
        .join(" ");
    notes.push(format!(
        "ansible: redfish_info GetSystemInventory, redfish_command PowerForceOff + PowerOn on \
         beta: {recap} ({secs:.0} s)"
    ));
    let (state, boots) = beta_rest(&token)?;
    if state != "running" || boots != boots_before + 3 {
        return Err(format!(
            "after Ansible beta is {state} with boot_count {boots}; want running {}",
            boots_before + 3
        ));
    }
    notes.push(format!(
        "REST: beta running, boot_count {boots_before} -> {boots}"
    ));

    // 4. The EventService stream: Ansible's resets as Redfish Events.
    notes.push(sse_after(&token, cursor)?);

    // 5. HTTP boot: sushy sets beta's UefiHttp override to a boot manifest
    // on the host and force-restarts it; the manager fetches the manifest's
    // kernel, initrd and bootargs and boots them. beta's plan is put back.
    notes.extend(http_boot(ws, stack, &venv, &dir, &base, &token)?);
    Ok(notes)
}

/// One REST call with the token; the reply's status and body.
fn rest(
    token: &str,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> Result<(u16, String), String> {
    let reply = http::send(
        &authority(),
        &Request {
            method,
            path,
            token: Some(token),
            body,
        },
        Duration::from_secs(30),
    )
    .map_err(|e| format!("{method} {path}: {e}"))?;
    Ok((reply.status, reply.body))
}

/// Step 5: beta booted over HTTP through Redfish (sushy, as Ironic's
/// redfish-https boot drives a BMC), from a boot manifest served on the
/// QEMU host that names the default plan's kernel and initrd and beta's
/// bootargs plus a marker; the guest's `PINFOLD-GUEST-CMDLINE` line must
/// carry the marker. Then beta's own kernel, initrd and bootargs are put
/// back and the fetched images deleted, so the cases after this one see
/// the default plan.
fn http_boot(
    ws: &Workspace,
    stack: &mut Stack,
    venv: &Path,
    dir: &Path,
    base: &str,
    token: &str,
) -> Outcome {
    const MARKER: &str = "pinfold.httpboot=redfish";
    let mut notes = Vec::new();
    let (status, body) = rest(token, "GET", "/api/v1/partitions/beta", None)?;
    if status != 200 {
        return Err(format!("GET beta answered {status}: {body}"));
    }
    let before: serde_json::Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
    let config = before["config"].clone();
    let bootargs = config["bootargs"].as_str().unwrap_or("").to_string();
    let served = dir.join("httpboot");
    std::fs::create_dir_all(&served).map_err(|e| e.to_string())?;
    let mut digests = Vec::new();
    for (from, to) in [
        ("target/guest/linux/Image", "Image"),
        ("target/guest/initramfs-net.cpio.gz", "initrd.cpio.gz"),
    ] {
        let bytes = std::fs::read(ws.root.join(from)).map_err(|e| format!("{from}: {e}"))?;
        digests.push(crate::store::etag_of(&bytes).trim_matches('"').to_string());
        std::fs::write(served.join(to), bytes).map_err(|e| e.to_string())?;
    }
    let manifest = serde_json::json!({
        "kernel": "Image",
        "initrd": "initrd.cpio.gz",
        "bootargs": format!("{bootargs} {MARKER}"),
        "kernel_sha256": digests[0],
        "initrd_sha256": digests[1],
    });
    std::fs::write(served.join("boot.json"), manifest.to_string()).map_err(|e| e.to_string())?;
    let server = crate::store::Store::serve(&served, 0).map_err(|e| e.to_string())?;
    let url = format!("http://10.0.2.2:{}/boot.json", server.port);
    let from = stack.qemu.lines().len();
    let script = dir.join("redfish_clients.py");
    let mut c = Command::new(venv.join("bin/python"));
    c.arg(&script).args([base, "boot", token, "httpboot", &url]);
    let (ok, out, secs) = run_logged(c, &dir.join("httpboot.log"))?;
    if !ok {
        return Err(format!("HTTP boot through sushy:\n{}", tail(&out, 25)));
    }
    for line in out.lines().filter(|l| l.starts_with("ok ")) {
        notes.push(format!("  {}", &line[3..]));
    }
    let line = stack
        .qemu
        .wait_for(
            "beta's command line with the manifest's marker",
            from,
            Instant::now() + Duration::from_secs(120),
            |l| l.contains("[beta] PINFOLD-GUEST-CMDLINE") && l.contains(MARKER),
        )
        .map_err(|e| e.to_string())?;
    notes.push(format!(
        "HTTP boot from {url} ({secs:.0} s): `{}`",
        line.text.trim()
    ));
    let summary: serde_json::Value = out
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("summary "))
        .and_then(|j| serde_json::from_str(j).ok())
        .ok_or("no summary from the HTTP boot")?;
    let (_, body) = rest(token, "GET", "/api/v1/partitions/beta", None)?;
    let after: serde_json::Value = serde_json::from_str(&body).map_err(|e| e.to_string())?;
    if after["config"]["kernel"] != summary["kernel"]
        || after["config"]["initrd"] != summary["initrd"]
        || after["config"]["bootargs"] != manifest["bootargs"]
    {
        return Err(format!(
            "REST config after the HTTP boot: {}; the boot said {summary}",
            after["config"]
        ));
    }
    // beta's own plan back, and the fetched images gone.
    let deadline = Instant::now() + Duration::from_secs(60);
    rest(token, "POST", "/api/v1/partitions/beta/stop", Some("{}"))?;
    while beta_rest(token)?.0 != "stopped" {
        if Instant::now() > deadline {
            return Err("beta did not stop after the HTTP boot".into());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let restore = serde_json::json!({
        "kernel": config["kernel"],
        "initrd": config["initrd"],
        "bootargs": config["bootargs"],
    });
    let (status, body) = rest(
        token,
        "PATCH",
        "/api/v1/partitions/beta",
        Some(&restore.to_string()),
    )?;
    if status != 200 {
        return Err(format!("restoring beta's plan answered {status}: {body}"));
    }
    for id in [&summary["kernel"], &summary["initrd"]] {
        let path = format!("/api/v1/images/{}", id.as_str().unwrap_or("-"));
        let (status, body) = rest(token, "DELETE", &path, None)?;
        if status != 204 {
            return Err(format!("DELETE {path} answered {status}: {body}"));
        }
    }
    let (status, body) = rest(token, "POST", "/api/v1/partitions/beta/start", Some("{}"))?;
    if status != 202 {
        return Err(format!("starting beta again answered {status}: {body}"));
    }
    while beta_rest(token)?.0 != "running" {
        if Instant::now() > deadline {
            return Err("beta did not run again after its plan was put back".into());
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    notes.push("beta's kernel, initrd and bootargs put back, the fetched images deleted".into());
    Ok(notes)
}

fn get_json(token: &str, path: &str) -> Result<serde_json::Value, String> {
    let reply = http::send(
        &authority(),
        &Request {
            token: Some(token),
            ..Request::get(path)
        },
        Duration::from_secs(30),
    )
    .map_err(|e| format!("GET {path}: {e}"))?;
    if reply.status != 200 {
        return Err(format!(
            "GET {path} answered {}: {}",
            reply.status, reply.body
        ));
    }
    serde_json::from_str(&reply.body).map_err(|e| format!("GET {path}: {e}"))
}

/// beta's EthernetInterfaces is its one NIC, 0000:00:03.0 (a
/// virtio-net-pci: class 020000), and `GET /api/v1/host/pci` names the
/// three NICs of the default plan with their owners.
fn nics_check(token: &str) -> Result<String, String> {
    let base = "/redfish/v1/Systems/beta/EthernetInterfaces";
    let nics = get_json(token, base)?;
    let want = serde_json::json!([{"@odata.id": format!("{base}/0000:00:03.0")}]);
    if nics["Members"] != want {
        return Err(format!("beta's EthernetInterfaces: {nics}, want {want}"));
    }
    let nic = get_json(token, &format!("{base}/0000:00:03.0"))?;
    if nic["Id"] != "0000:00:03.0"
        || nic["InterfaceEnabled"] != true
        || nic["Oem"]["Pinfold"]["PciAddress"] != "0000:00:03.0"
        || !nic["Oem"]["Pinfold"]["Class"]
            .as_str()
            .is_some_and(|c| c.starts_with("02"))
    {
        return Err(format!("beta's NIC 0000:00:03.0: {nic}"));
    }
    let pci = get_json(token, "/api/v1/host/pci")?;
    let functions = pci["functions"].as_array().cloned().unwrap_or_default();
    let owned: Vec<String> = functions
        .iter()
        .filter(|f| f["class"].as_str().is_some_and(|c| c.starts_with("02")))
        .map(|f| {
            format!(
                "{} {}",
                f["bdf"].as_str().unwrap_or("?"),
                f["owner"].as_str().unwrap_or("-")
            )
        })
        .collect();
    for want in [
        "0000:00:01.0 mgmt",
        "0000:00:02.0 alpha",
        "0000:00:03.0 beta",
    ] {
        if !owned.iter().any(|o| o == want) {
            return Err(format!("GET /api/v1/host/pci lacks {want}: {pci}"));
        }
    }
    Ok(format!(
        "EthernetInterfaces: beta's one member 0000:00:03.0 ({}); /api/v1/host/pci: {} functions, NICs {}",
        nic["Oem"]["Pinfold"]["VendorDevice"].as_str().unwrap_or("?"),
        functions.len(),
        owned.join(", ")
    ))
}

/// One past the event log's last sequence number (`next` of a read
/// from beyond the end).
fn event_end(token: &str) -> Result<u64, String> {
    let reply = http::send(
        &authority(),
        &Request {
            token: Some(token),
            ..Request::get("/api/v1/events?since=999999999999")
        },
        Duration::from_secs(30),
    )
    .map_err(|e| e.to_string())?;
    let v: serde_json::Value = serde_json::from_str(&reply.body).map_err(|e| e.to_string())?;
    v["next"]
        .as_u64()
        .ok_or_else(|| format!("GET /api/v1/events: no next in {}", reply.body))
}

/// Why one EventService frame (`id:`, the `data:` JSON) is not a
/// well-formed Redfish Event, if it is not.
pub fn event_shape(id: u64, e: &serde_json::Value) -> Result<(), String> {
    let rec = &e["Events"][0];
    let want = id.to_string();
    let checks = [
        (
            e["@odata.type"]
                .as_str()
                .is_some_and(|t| t.starts_with("#Event.v1_")),
            "@odata.type",
        ),
        (e["Id"] == want.as_str(), "Id = the id: line"),
        (e["Context"].is_string(), "Context"),
        (rec["EventId"] == want.as_str(), "EventId = the id: line"),
        (rec["EventType"].is_string(), "EventType"),
        (
            rec["EventTimestamp"]
                .as_str()
                .is_some_and(|t| t.len() >= 20 && t.as_bytes()[10] == b'T'),
            "EventTimestamp (ISO 8601)",
        ),
        (
            matches!(
                rec["Severity"].as_str(),
                Some("OK" | "Warning" | "Critical")
            ),
            "Severity",
        ),
        (rec["Message"].is_string(), "Message"),
        (
            rec["MessageId"]
                .as_str()
                .is_some_and(|m| m.split('.').count() == 5),
            "MessageId",
        ),
        (
            rec["OriginOfCondition"]["@odata.id"]
                .as_str()
                .is_some_and(|o| o.starts_with("/redfish/v1/")),
            "OriginOfCondition",
        ),
    ];
    match checks.iter().find(|(ok, _)| !ok) {
        Some((_, what)) => Err(format!("event {id}: bad {what}: {e}")),
        None => Ok(()),
    }
}

/// Opens the live EventService stream from `cursor` (as `Last-Event-ID`)
/// and reads, within 20 s, beta's ResourcePoweredOff and then
/// ResourcePoweredOn (Ansible's PowerForceOff and PowerOn), every frame
/// checked by [`event_shape`].
fn sse_after(token: &str, cursor: u64) -> Result<String, String> {
    use std::io::{BufRead, BufReader, Write};
    const WANT: [&str; 2] = [
        "ResourceEvent.1.4.2.ResourcePoweredOff",
        "ResourceEvent.1.4.2.ResourcePoweredOn",
    ];
    let start = Instant::now();
    let mut conn = http::connect_raw(&authority(), Duration::from_secs(30))?;
    conn.set_read_timeout(Some(Duration::from_secs(1)))
        .map_err(|e| e.to_string())?;
    write!(
        conn,
        "GET /redfish/v1/EventService/SSE HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\n\
         X-Auth-Token: {token}\r\nLast-Event-ID: {}\r\n\r\n",
        authority(),
        cursor.saturating_sub(1)
    )
    .map_err(|e| format!("GET the SSE URI: {e}"))?;
    let mut reader = BufReader::new(conn);
    let (mut line, mut id, mut head, mut seen, mut frames) = (String::new(), None, true, 0, 0);
    while start.elapsed() < Duration::from_secs(20) {
        if line.ends_with('\n') {
            line.clear();
        }
        match reader.read_line(&mut line) {
            Ok(0) => return Err("the EventService stream ended".into()),
            Ok(_) if !line.ends_with('\n') => continue,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                continue
            }
            Err(e) => return Err(format!("reading the EventService stream: {e}")),
        }
        if head {
            if line.starts_with("HTTP/1.1 ") && !line.starts_with("HTTP/1.1 200") {
                return Err(format!("the EventService stream answered {}", line.trim()));
            }
            head = line != "\r\n";
            continue;
        }
        if let Some(v) = line.strip_prefix("id: ") {
            id = v.trim().parse::<u64>().ok();
        } else if let Some(data) = line.strip_prefix("data: ") {
            let n = id.take().ok_or("a data: line without an id: line")?;
            if n < cursor {
                return Err(format!("event {n} is before Last-Event-ID {}", cursor - 1));
            }
            let e: serde_json::Value =
                serde_json::from_str(data.trim()).map_err(|e| e.to_string())?;
            event_shape(n, &e)?;
            frames += 1;
            let rec = &e["Events"][0];
            if rec["OriginOfCondition"]["@odata.id"] == "/redfish/v1/Systems/beta"
                && rec["MessageId"] == WANT[seen]
            {
                seen += 1;
                if seen == WANT.len() {
                    return Ok(format!(
                        "EventService SSE from Last-Event-ID {}: {frames} Redfish Events, beta \
                         ResourcePoweredOff then ResourcePoweredOn, in {:.1} s",
                        cursor - 1,
                        start.elapsed().as_secs_f64()
                    ));
                }
            }
        }
    }
    Err(format!(
        "EventService stream: {frames} events in 20 s, not beta's {}",
        WANT[seen..].join(" and ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validator_counts_read_the_summary_table() {
        let out = "x\n+----+\n|      PASS     |     WARN     |     FAIL     |  NOT TESTED  |\n\
                   +----+\n| \u{1b}[32m 812 \u{1b}[0m | \u{1b}[33m 3 \u{1b}[0m | 0 | 12 |\n+---+\n";
        assert_eq!(validator_counts(out), Some([812, 3, 0, 12]));
        assert_eq!(validator_counts("no table"), None);
    }

    #[test]
    fn event_shape_wants_every_field_of_a_redfish_event() {
        let mut e = serde_json::json!({
            "@odata.type": "#Event.v1_3_0.Event", "Id": "7000", "Name": "Pinfold event",
            "Context": "pinfold-sse",
            "Events": [{"EventId": "7000", "EventType": "StatusChange",
                        "EventTimestamp": "2026-12-02T02:10:00Z", "Severity": "OK",
                        "Message": "The resource 'beta' has powered on.",
                        "MessageId": "ResourceEvent.1.4.2.ResourcePoweredOn",
                        "OriginOfCondition": {"@odata.id": "/redfish/v1/Systems/beta"}}]
        });
        assert_eq!(event_shape(7000, &e), Ok(()));
        assert!(event_shape(7001, &e).unwrap_err().contains("Id"));
        e["Events"][0]
            .as_object_mut()
            .unwrap()
            .remove("EventTimestamp");
        assert!(event_shape(7000, &e)
            .unwrap_err()
            .contains("EventTimestamp"));
    }
}
