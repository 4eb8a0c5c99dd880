//! Boot checks of the management API under attack, on the shared default
//! boot: the failed-token throttle per client address (`throttle`) and
//! schemathesis against the live OpenAPI document (`schemathesis`).
//!
//! Every request goes through the xtask's HTTP client (`crate::http`) and
//! schemathesis gets the manager's base URL from [`base_url`], the one
//! place that names the scheme (HTTPS; schemathesis runs with
//! `--tls-verify false` over loopback, the pin is the `tls` case's).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::api_checks::{authority, check_error, Outcome, Stack};
use crate::cmd;
use crate::error::XtaskError;
use crate::http::{self, Request};
use crate::Workspace;

/// Schemathesis from PyPI, pinned; installed into its own venv under
/// target/ (Debian's Python refuses system-wide pip installs).
const SCHEMATHESIS: &str = "schemathesis==4.32.5";
/// Examples per operation and phase.
const MAX_EXAMPLES: u32 = 5;
/// A whole schemathesis run's limit (each of the three), after which it is
/// killed and the case fails: a hang.
const RUN_LIMIT: Duration = Duration::from_secs(300);
/// What the manager's client address is under QEMU's user network.
const HOST_PEER: &str = "10.0.2.2";

/// The manager's base URL (scheme and authority).
pub fn base_url() -> String {
    format!("https://{}", authority())
}

fn send(request: &Request<'_>) -> Result<http::Reply, String> {
    http::send(&authority(), request, Duration::from_secs(30))
        .map_err(|e| format!("{} {}: {e}", request.method, request.path))
}

/// Tier 2 (shared boot): 10 wrong tokens from the host (10.0.2.2 under
/// QEMU's user network) make the next request 429, even with the right
/// token, naming that address; once its window ended the right token is
/// answered again. (A second address cannot be shown from the host: every
/// host client is 10.0.2.2; the host tests show the other address
/// answered.)
pub fn throttle(stack: &mut Stack) -> Outcome {
    let token = stack.token(Instant::now() + Duration::from_secs(240))?;
    stack.first_answer()?;
    let limit = 10;
    let mut refused = 0;
    for _ in 0..limit {
        let reply = send(&Request {
            token: Some("guess-0000"),
            ..Request::get("/api/v1/partitions")
        })?;
        check_error(&reply, 401, "unauthorized")?;
        refused += 1;
    }
    let start = Instant::now();
    let right = send(&Request {
        token: Some(&token),
        ..Request::get("/api/v1/partitions")
    })?;
    check_error(&right, 429, "too_many_requests")
        .map_err(|why| format!("after {limit} wrong tokens, the right one: {why}"))?;
    if !right.body.contains(&format!("from {HOST_PEER}")) {
        return Err(format!(
            "the 429 does not name the client's address {HOST_PEER}: {}",
            right.body.trim()
        ));
    }
    // Open routes stay open.
    let host = send(&Request::get("/api/v1/host"))?;
    if host.status != 200 {
        return Err(format!(
            "GET /api/v1/host answered {} while throttled",
            host.status
        ));
    }
    // The window is 10 s; wait it out, then the right token works.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let reply = send(&Request {
            token: Some(&token),
            ..Request::get("/api/v1/partitions")
        })?;
        match reply.status {
            200 => break,
            429 if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(500)),
            s => return Err(format!("after the window, the right token answered {s}")),
        }
    }
    Ok(vec![format!(
        "{refused} wrong tokens from {HOST_PEER}: 401 each, then the right one 429 naming \
         {HOST_PEER}, GET /api/v1/host still 200, the right one 200 again {:.1} s later",
        start.elapsed().as_secs_f64()
    )])
}

/// `schemathesis`, installed once into `target/schemathesis-venv`
/// (`python3 -m venv`; without python3-venv the case says so).
fn schemathesis_bin(root: &Path) -> Result<PathBuf, XtaskError> {
    let venv = root.join("target/schemathesis-venv");
    let tool = venv.join("bin/schemathesis");
    let pinned = venv.join(".pinned");
    if tool.exists() && std::fs::read_to_string(&pinned).ok().as_deref() == Some(SCHEMATHESIS) {
        return Ok(tool);
    }
    cmd::run(Command::new("python3").arg("-m").arg("venv").arg(&venv))?;
    cmd::run(
        Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet"])
            .arg(SCHEMATHESIS),
    )?;
    let _ = std::fs::write(&pinned, SCHEMATHESIS);
    Ok(tool)
}

/// One schemathesis run: its exit status and the tail of its output.
struct Run {
    ok: bool,
    summary: String,
    secs: f64,
}

fn run_schemathesis(
    tool: &Path,
    log: &Path,
    label: &str,
    token: Option<&str>,
    extra: &[&str],
) -> Result<Run, String> {
    let mut c = Command::new(tool);
    c.arg("run")
        .arg(format!("{}/api/v1/openapi.json", base_url()))
        .args(["--url", &base_url()])
        .args([
            "--checks",
            "not_a_server_error,status_code_conformance,content_type_conformance,\
             response_headers_conformance,response_schema_conformance",
        ])
        .args(["--phases", "examples,coverage,fuzzing"])
        .args(["--max-examples", &MAX_EXAMPLES.to_string()])
        .args(["--request-timeout", "20"])
        .args(["--workers", "1"])
        .args(["--seed", "1"])
        // It must never send a made-up Authorization: 10 wrong tokens from
        // the host hold back the next cases for 10 s.
        .args(["--generation-with-security-parameters", "false"])
        // The stream never ends; its own checks are events-console's.
        .args(["--exclude-path", "/api/v1/events/stream"])
        // Its one PUT (`/api/v1/config`) takes `application/toml`, a body
        // schemathesis cannot generate; the `config` case covers it.
        .args(["--exclude-method", "PUT"])
        // Loopback to the manager's self-signed certificate: the TLS
        // handshake and the pin are the `tls` case's.
        .args(["--tls-verify", "false"])
        .args(["--no-color", "--warnings", "off"])
        .args(extra)
        .stdin(Stdio::null());
    if let Some(t) = token {
        c.args(["-H", &format!("Authorization: Bearer {t}")]);
    }
    let out_path = log.with_file_name(format!("schemathesis-{label}.log"));
    let out =
        std::fs::File::create(&out_path).map_err(|e| format!("{}: {e}", out_path.display()))?;
    let err = out.try_clone().map_err(|e| e.to_string())?;
    c.stdout(out).stderr(err);
    let start = Instant::now();
    let mut child = c.spawn().map_err(|e| format!("schemathesis: {e}"))?;
    let Some(status) = crate::cmd::wait_within(&mut child, RUN_LIMIT)? else {
        return Err(format!(
            "schemathesis ({label}) did not finish within {} s: a hang? {}",
            RUN_LIMIT.as_secs(),
            out_path.display()
        ));
    };
    let text = std::fs::read_to_string(&out_path).unwrap_or_default();
    let tail: Vec<&str> = text.lines().rev().take(40).collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    Ok(Run {
        ok: status.success(),
        summary: text
            .lines()
            .rev()
            .find(|l| l.contains("passed") || l.contains("failed") || l.contains("error"))
            .unwrap_or("")
            .trim()
            .to_string()
            + if status.success() {
                String::new()
            } else {
                format!("\n{}\n(whole log: {})", tail.join("\n"), out_path.display())
            }
            .as_str(),
        secs: start.elapsed().as_secs_f64(),
    })
}

/// Tier 2 (shared boot, after the cases that need a pristine state):
/// schemathesis against the live API's OpenAPI document, three bounded
/// runs (examples, coverage and fuzzing phases, 5 examples, seed 1, no
/// stateful phase): without a credential over every operation (all must
/// be refused, nothing changes), then as a viewer and as an operator over
/// the GET operations only (an operator run over mutations would stop and
/// delete partitions the next cases need). Asserts no 5xx, responses
/// conforming to the document (status codes, content types, headers,
/// schemas), and no hang (each run at most [`RUN_LIMIT`]).
pub fn schemathesis(ws: &Workspace, stack: &mut Stack, log: &Path) -> Outcome {
    let token = stack.token(Instant::now() + Duration::from_secs(240))?;
    stack.first_answer()?;
    let tool = schemathesis_bin(&ws.root).map_err(|e| {
        format!("installing {SCHEMATHESIS} (needs python3-venv: apt-get install python3-venv): {e}")
    })?;
    let viewer = http::send(
        &authority(),
        &Request::post(
            "/api/v1/auth/credentials",
            Some(&token),
            Some(r#"{"role":"viewer","name":"schemathesis"}"#),
        ),
        Duration::from_secs(30),
    )
    .map_err(|e| e.to_string())?;
    if viewer.status != 201 {
        return Err(format!(
            "making a viewer answered {}: {}",
            viewer.status, viewer.body
        ));
    }
    let value: serde_json::Value = serde_json::from_str(&viewer.body).map_err(|e| e.to_string())?;
    let viewer_token = value["token"].as_str().ok_or("no token")?.to_string();
    let viewer_id = value["id"].as_str().ok_or("no id")?.to_string();

    let runs = [
        ("anonymous", None, vec![]),
        (
            "viewer",
            Some(viewer_token.as_str()),
            vec!["--include-method", "GET"],
        ),
        (
            "operator",
            Some(token.as_str()),
            vec!["--include-method", "GET"],
        ),
    ];
    let mut notes = Vec::new();
    let mut failed = Vec::new();
    for (label, t, extra) in &runs {
        let run = run_schemathesis(&tool, log, label, *t, extra)?;
        notes.push(format!(
            "{label}: {} ({:.0} s)",
            run.summary.lines().next().unwrap_or(""),
            run.secs
        ));
        if !run.ok {
            failed.push(format!("{label}: {}", run.summary));
        }
    }
    // The viewer goes again; the list is as it was.
    let _ = http::send(
        &authority(),
        &Request {
            method: "DELETE",
            path: &format!("/api/v1/auth/credentials/{viewer_id}"),
            token: Some(&token),
            body: None,
        },
        Duration::from_secs(30),
    );
    if !failed.is_empty() {
        return Err(failed.join("\n"));
    }
    Ok(notes)
}
