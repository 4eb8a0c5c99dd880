//! The boot check of configuration as code (`config`): the default plan with a configuration store (the xtask's, over `target/pinfold/test-config-store/`), driven through `hvctl --json`. Boot 1: export; a changed plan (alpha deleted, gamma created on alpha's CPU from an uploaded small image, beta's bootargs changed while stopped) is previewed with a dry run, refused with a stale If-Match (412), refused when invalid (a CPU twice, a name twice: 4xx naming the field, nothing changed), then imported; the manager writes it (and gamma's image) to the store. QEMU is stopped and booted again over the same store: the configuration read back equals what was exported after the change, gamma boots (its console marker), alpha is gone.
//!
//! Notes: export and import times, QEMU start to the configuration
//! restored. alpha must not print a line after the reboot: the hypervisor
//! holds the boot plan's autostart partitions until the manager has
//! applied the stored configuration (CONFIG_APPLIED).

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::api_checks::{self, Outcome, Stack};
use crate::build::{Builder, DEFAULT_CONFIG};
use crate::harness::QemuRun;
use crate::qemu::{qemu_command, Extra};
use crate::runtime_checks::Hvctl;
use crate::store;
use crate::Workspace;

const PROBE: &str = "target/guest/test-guest.bin";
const GAMMA_MARKER: &str = "[gamma] PROBE scrub: ";
const LIMIT: Duration = Duration::from_secs(240);

fn boot(
    ws: &Workspace,
    builder: &mut Builder<'_>,
    plan: &pinfold_config::Config,
    log: &Path,
) -> Result<Stack, String> {
    let built = builder
        .build_loaded(plan, &ws.root.join(DEFAULT_CONFIG), "test-config.bin", &[])
        .map_err(|e| format!("build failed: {e}"))?;
    api_checks::port_is_free()?;
    let cmd = qemu_command(&built.board, &built.image, &Extra::default());
    let qemu = QemuRun::spawn(cmd, log).map_err(|e| e.to_string())?;
    Ok(Stack::new(qemu))
}

fn hvctl(ws: &Workspace, stack: &mut Stack) -> Result<Hvctl, String> {
    stack.first_answer()?;
    let token = stack.token(Instant::now() + LIMIT)?;
    Ok(Hvctl {
        bin: api_checks::build_hvctl(ws)?,
        url: format!("https://127.0.0.1:{}", crate::qemu::manager_port()),
        token,
        root: ws.root.clone(),
    })
}

/// The plan TOML with partition `name`'s section removed.
fn without(text: &str, name: &str) -> String {
    text.split("\n[[partition]]\n")
        .filter(|s| !s.starts_with(&format!("name = \"{name}\"")))
        .collect::<Vec<_>>()
        .join("\n[[partition]]\n")
}

/// The partitions of a plan TOML, each section as text, sorted by name
/// (an order-independent comparison: indices differ after a reboot).
fn sections(text: &str) -> Vec<String> {
    let mut v: Vec<String> = text
        .split("[[partition]]")
        .skip(1)
        .map(|s| s.trim().to_string())
        .collect();
    v.sort();
    v
}

pub fn config(ws: &Workspace, builder: &mut Builder<'_>, log: &Path, log2: &Path) -> Outcome {
    if !ws.root.join(PROBE).is_file() {
        return Err(format!("{PROBE} is missing (built with the default plan)"));
    }
    let store_dir = ws.root.join("target/pinfold/test-config-store");
    let _ = std::fs::remove_dir_all(&store_dir);
    let port = store::store_port(crate::qemu::manager_port());
    let server = store::Store::serve(&store_dir, port)
        .map_err(|e| format!("configuration store on 127.0.0.1:{port}: {e}"))?;
    let mut plan =
        pinfold_config::load(&ws.root.join(DEFAULT_CONFIG)).map_err(|e| e.to_string())?;
    let url = store::name_in_plan(&mut plan, server.port).ok_or("no management partition")?;
    let mut notes = vec![format!("store {url}")];
    let files = std::env::temp_dir().join(format!("pinfold-config-{}", std::process::id()));
    std::fs::create_dir_all(&files).map_err(|e| e.to_string())?;
    let file = |name: &str| files.join(name).display().to_string();

    // ---- boot 1 ---------------------------------------------------------
    let mut stack = boot(ws, builder, &plan, log)?;
    let hv = hvctl(ws, &mut stack)?;
    let t = Instant::now();
    let exported = hv.json(&["export"])?;
    notes.push(format!("export: {} ms", t.elapsed().as_millis()));
    let before = exported["config"]
        .as_str()
        .ok_or("export: no config")?
        .to_string();
    let etag = exported["etag"]
        .as_str()
        .ok_or("export: no etag")?
        .to_string();
    let image = hv.json(&["upload", PROBE, "--kind", "kernel", "--name", "probe"])?;
    let sha = image["sha256"]
        .as_str()
        .ok_or("upload: no sha256")?
        .to_string();
    for name in ["alpha", "beta"] {
        hv.json(&["stop", name])?;
        hv.wait_state(name, "stopped")?;
    }
    let (stopped, etag_stopped) = {
        let e = hv.json(&["export"])?;
        (
            e["config"].as_str().unwrap_or_default().to_string(),
            e["etag"].as_str().unwrap_or_default().to_string(),
        )
    };
    if stopped != before || etag_stopped != etag {
        return Err("stopping partitions changed the exported configuration".into());
    }
    let gamma = format!(
        "\n[[partition]]\nname = \"gamma\"\ncpus = [1]\nmemory = \"64MiB\"\nkernel = \"image:{sha}\"\n\
         kernel_format = \"raw\"\nbootargs = \"pinfold-probe=scrub\"\nautostart = true\n"
    );
    let changed = format!(
        "{}{gamma}",
        without(&before, "alpha").replacen(
            "bootargs = \"console=ttyAMA0 earlycon=pl011,0x09000000\"\nconsole_input = true",
            "bootargs = \"console=ttyAMA0 earlycon=pl011,0x09000000 pinfold.changed=1\"\nconsole_input = true",
            1
        )
    );
    if !changed.contains("pinfold.changed=1") {
        return Err(format!(
            "beta's bootargs not found in the export:\n{before}"
        ));
    }
    std::fs::write(file("changed.toml"), &changed).map_err(|e| e.to_string())?;
    let dry = hv.json(&["import", &file("changed.toml"), "--dry-run"])?;
    let want = serde_json::json!({"created": ["gamma"], "changed": ["beta"], "deleted": ["alpha"],
        "unchanged": ["mgmt"], "dry_run": true});
    if dry != want {
        return Err(format!("dry run: {dry}, not {want}"));
    }
    // A stale If-Match.
    let (code, _, detail) =
        hv.refused(&["import", &file("changed.toml"), "--if-match", "\"0000\""])?;
    if code != "precondition_failed" {
        return Err(format!("stale If-Match: {code}: {detail}"));
    }
    // Invalid: gamma on beta's CPU 2; a name twice.
    for (what, text, field) in [
        (
            "a CPU twice",
            changed.replacen(
                "cpus = [1]\nmemory = \"64MiB\"",
                "cpus = [2]\nmemory = \"64MiB\"",
                1,
            ),
            "cpus",
        ),
        (
            "a name twice",
            changed.replacen("name = \"gamma\"", "name = \"beta\"", 1),
            "name",
        ),
    ] {
        std::fs::write(file("bad.toml"), &text).map_err(|e| e.to_string())?;
        let (code, got, detail) = hv.refused(&["import", &file("bad.toml")])?;
        if got.as_deref() != Some(field) || !(code == "conflict" || code == "bad_request") {
            return Err(format!("{what}: {code} field {got:?}: {detail}"));
        }
        notes.push(format!("{what}: {code} ({field}): {detail}"));
    }
    let unchanged = hv.json(&["export"])?;
    if unchanged["etag"].as_str() != Some(etag.as_str()) {
        return Err("a refused import changed the configuration".into());
    }
    let cursor = stack.qemu.lines().len();
    let t = Instant::now();
    let applied = hv.json(&["import", &file("changed.toml"), "--if-match", &etag])?;
    notes.push(format!(
        "import (delete, change, create): {} ms",
        t.elapsed().as_millis()
    ));
    if applied["created"] != want["created"] || applied["deleted"] != want["deleted"] {
        return Err(format!("import: {applied}"));
    }
    stack
        .qemu
        .wait_for("gamma's marker", cursor, Instant::now() + LIMIT, |l| {
            l.starts_with(GAMMA_MARKER)
        })
        .map_err(|e| e.to_string())?;
    let after = hv.json(&["export"])?["config"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    // The store has it (written within a few seconds), and gamma's image.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let stored = std::fs::read_to_string(store_dir.join("hosts/qemu-virt/config.toml"))
            .unwrap_or_default();
        if stored == after {
            break;
        }
        if Instant::now() > deadline {
            let status = crate::http::send(
                hv.url.trim_start_matches("https://"),
                &crate::http::Request {
                    token: Some(&hv.token),
                    ..crate::http::Request::get("/api/v1/config/store")
                },
                Duration::from_secs(5),
            )
            .map(|r| r.body)
            .unwrap_or_default();
            return Err(format!("the store did not get the configuration: {status}"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    if !store_dir
        .join(format!("hosts/qemu-virt/images/{sha}"))
        .is_file()
    {
        return Err("gamma's image is not in the store".into());
    }
    drop(stack);

    // ---- boot 2, the same store -------------------------------------------
    let mut stack = boot(ws, builder, &plan, log2)?;
    let started = stack.qemu.started();
    let hv = hvctl(ws, &mut stack)?;
    let deadline = Instant::now() + LIMIT;
    let restored_at = loop {
        let now = hv.json(&["export"])?;
        let text = now["config"].as_str().unwrap_or_default();
        if sections(text) == sections(&after) {
            break started.elapsed();
        }
        if Instant::now() > deadline {
            return Err(format!(
                "after the reboot the configuration is not the exported one:\n{text}\nwanted:\n{after}"
            ));
        }
        std::thread::sleep(Duration::from_millis(250));
    };
    notes.push(format!(
        "QEMU start to the configuration restored: {:.1} s",
        restored_at.as_secs_f64()
    ));
    stack
        .qemu
        .wait_for(
            "gamma's marker after the reboot",
            0,
            Instant::now() + LIMIT,
            |l| l.starts_with(GAMMA_MARKER),
        )
        .map_err(|e| e.to_string())?;
    let parts = hv.json(&["list"])?;
    let names: Vec<&str> = parts["partitions"]
        .as_array()
        .map(|a| a.iter().filter_map(|p| p["name"].as_str()).collect())
        .unwrap_or_default();
    if names.contains(&"alpha") {
        return Err(format!("alpha exists after the reboot: {names:?}"));
    }
    let alpha_lines = stack
        .qemu
        .lines()
        .iter()
        .filter(|l| l.text.starts_with("[alpha]"))
        .count();
    if alpha_lines != 0 {
        return Err(format!(
            "alpha ran after the reboot ({alpha_lines} console lines) before the restore deleted it"
        ));
    }
    notes.push("alpha: gone after the reboot and never ran (no console line)".into());
    let status: Value = serde_json::from_str(
        &crate::http::send(
            hv.url.trim_start_matches("https://"),
            &crate::http::Request {
                token: Some(&hv.token),
                ..crate::http::Request::get("/api/v1/config/store")
            },
            Duration::from_secs(5),
        )
        .map_err(|e| e.to_string())?
        .body,
    )
    .map_err(|e| e.to_string())?;
    notes.push(format!(
        "restore: {}",
        status["restored"].as_str().unwrap_or("(none)")
    ));
    let _ = std::fs::remove_dir_all(&files);
    Ok(notes)
}
