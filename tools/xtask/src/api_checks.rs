//! Boot checks of the management stack: the default plan running under QEMU,
//! driven through the manager's REST API, `hvctl` and the web UI's browser
//! test, all against one boot.

use std::fs;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::cmd;
use crate::harness::{number_after, Line, QemuRun};
use crate::http::{self, Reply, Request};
use crate::provision::Provisioner;
use crate::qemu::manager_port;
use crate::Workspace;

/// A check's verdict: `Ok` with notes to print, or `Err` with why it failed.
pub type Outcome = Result<Vec<String>, String>;

/// How long one HTTP request may take before it counts as failed.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// From QEMU's start to the manager's first answer, at most.
const FIRST_ANSWER_LIMIT: Duration = Duration::from_secs(240);
/// How often the manager is asked while it is not answering yet.
const POLL: Duration = Duration::from_millis(100);
/// The marker the test guest's init prints once its shell is about to run.
pub(crate) const UP_MARKER: &str = "PINFOLD-GUEST-UP name=";
/// The hypervisor's console line that carries the bearer token.
const TOKEN_LINE: &str = "pinfold: management token: ";
/// The whole browser test, at most (it has its own 120 s limit inside).
const BROWSER_LIMIT: Duration = Duration::from_secs(240);

pub(crate) fn authority() -> String {
    format!("127.0.0.1:{}", manager_port())
}

/// The default plan booted under QEMU, shared by every check here.
pub struct Stack {
    pub qemu: QemuRun,
    first_answer: FirstAnswer,
    token: Option<String>,
}

impl Stack {
    /// Wraps a QEMU just spawned with the default plan and starts timing
    /// the manager's first answer. Call [`port_is_free`] before spawning.
    pub fn new(qemu: QemuRun) -> Self {
        let first_answer = FirstAnswer::start(qemu.started());
        Self {
            qemu,
            first_answer,
            token: None,
        }
    }

    /// [`Stack::new`] for a boot whose token the test already knows (a
    /// boot bundle's, which the hypervisor never sees or prints).
    pub fn with_token(qemu: QemuRun, token: String) -> Self {
        let mut stack = Self::new(qemu);
        use_token(&token);
        stack.token = Some(token);
        stack
    }

    /// Time from QEMU's start to the manager's first 200 to
    /// `GET /api/v1/host` (open to anyone); waits for it if it has not
    /// come yet. The token is known by then too (every read needs it).
    pub fn first_answer(&mut self) -> Result<Duration, String> {
        self.token(Instant::now() + FIRST_ANSWER_LIMIT)?;
        self.first_answer.wait()
    }

    /// The bearer token the hypervisor printed at boot.
    pub fn token(&mut self, deadline: Instant) -> Result<String, String> {
        if let Some(token) = &self.token {
            return Ok(token.clone());
        }
        let line = self
            .qemu
            .wait_for(&format!("`{TOKEN_LINE}`"), 0, deadline, |line| {
                line.contains(TOKEN_LINE)
            })
            .map_err(|err| err.to_string())?;
        let token =
            parse_token(&line.text).ok_or_else(|| format!("no hex token in `{}`", line.text))?;
        use_token(&token);
        self.token = Some(token.clone());
        Ok(token)
    }

    fn expect(&self, needle: &str, from: usize, deadline: Instant) -> Result<Line, String> {
        self.qemu
            .wait_for(&format!("`{needle}`"), from, deadline, |line| {
                line.contains(needle)
            })
            .map_err(|err| err.to_string())
    }

    /// Waits until both Linux partitions printed their first UP marker.
    pub(crate) fn guests_up(&self, deadline: Instant) -> Result<(), String> {
        for name in ["alpha", "beta"] {
            self.expect(&format!("[{name}] {UP_MARKER}{name} "), 0, deadline)?;
        }
        Ok(())
    }
}

/// Fails when something already answers on the manager's port: the checks
/// would then talk to it instead of the QEMU they boot.
pub fn port_is_free() -> Result<(), String> {
    let addr = SocketAddr::from(([127, 0, 0, 1], manager_port()));
    match TcpStream::connect_timeout(&addr, Duration::from_millis(300)) {
        Ok(_) => Err(format!(
            "127.0.0.1:{} already accepts connections before QEMU started \
             (another QEMU or server holds the port)",
            manager_port()
        )),
        Err(_) => Ok(()),
    }
}

/// Reads need a credential: every later GET of the checks (theirs and
/// hvctl's client), and every hvctl or browser test they start
/// (`$PINFOLD_TOKEN`), carries `token`.
fn use_token(token: &str) {
    hvctl::http::set_default_token(Some(token.to_string()));
    *READ_TOKEN.lock().unwrap_or_else(|p| p.into_inner()) = Some(token.to_string());
    std::env::set_var("PINFOLD_TOKEN", token);
}

static READ_TOKEN: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// `Authorization: Bearer <token>\r\n` for a hand-written request, once
/// the token is known (empty before).
pub fn auth_header() -> String {
    READ_TOKEN
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"))
}

/// The hex token in the hypervisor's `management token:` line.
pub fn parse_token(line: &str) -> Option<String> {
    let start = line.find(TOKEN_LINE)? + TOKEN_LINE.len();
    let token = line[start..].split_whitespace().next()?;
    (!token.is_empty() && token.chars().all(|c| c.is_ascii_hexdigit())).then(|| token.to_string())
}

/// A thread that polls the manager from QEMU's start on, so the first
/// answer is timed however long other checks wait for console lines.
struct FirstAnswer {
    thread: Option<JoinHandle<Result<Duration, String>>>,
    result: Option<Result<Duration, String>>,
    stop: Arc<AtomicBool>,
}

impl FirstAnswer {
    fn start(started: Instant) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let deadline = started + FIRST_ANSWER_LIMIT;
            let mut last = String::from("no attempt");
            while Instant::now() < deadline && !stopped.load(Ordering::Relaxed) {
                match http::send(
                    &authority(),
                    &Request::get("/api/v1/host"),
                    Duration::from_secs(2),
                ) {
                    Ok(reply) if reply.status == 200 => return Ok(started.elapsed()),
                    Ok(reply) => last = format!("status {}", reply.status),
                    Err(err) => last = err.to_string(),
                }
                std::thread::sleep(POLL);
            }
            Err(format!(
                "the manager did not answer GET /api/v1/host with 200 within {} s of \
                 QEMU's start (last attempt: {last})",
                FIRST_ANSWER_LIMIT.as_secs()
            ))
        });
        Self {
            thread: Some(thread),
            result: None,
            stop,
        }
    }

    fn wait(&mut self) -> Result<Duration, String> {
        if let Some(thread) = self.thread.take() {
            let result = thread
                .join()
                .unwrap_or_else(|_| Err("the first-answer poller panicked".into()));
            self.result = Some(result);
        }
        self.result
            .clone()
            .unwrap_or_else(|| Err("the first-answer poller did not run".into()))
    }
}

impl Drop for FirstAnswer {
    fn drop(&mut self) {
        // QEMU is going away: a poller still waiting must not outlive it.
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Sends `request` to the manager.
fn call(request: &Request<'_>) -> Result<Reply, String> {
    http::send(&authority(), request, REQUEST_TIMEOUT)
        .map_err(|err| format!("{} {}: {err}", request.method, request.path))
}

/// Sends `request` and reads a JSON body, failing unless the status is `want`.
pub(crate) fn call_json(request: &Request<'_>, want: u16) -> Result<Value, String> {
    let reply = call(request)?;
    if reply.status != want {
        return Err(format!(
            "{} {} answered {} (expected {want}): {}",
            request.method,
            request.path,
            reply.status,
            reply.body.trim()
        ));
    }
    serde_json::from_str(&reply.body).map_err(|err| {
        format!(
            "{} {} answered {want} but not JSON ({err}): {}",
            request.method,
            request.path,
            reply.body.trim()
        )
    })
}

/// Checks an error reply: the status, and the body
/// `{"error": code, "detail": <non-empty sentence>}`.
pub fn check_error(reply: &Reply, status: u16, code: &str) -> Result<(), String> {
    if reply.status != status {
        return Err(format!(
            "status {} (expected {status}); body {}",
            reply.status,
            reply.body.trim()
        ));
    }
    let body: Value = serde_json::from_str(&reply.body)
        .map_err(|err| format!("{status} body is not JSON ({err}): {}", reply.body.trim()))?;
    if body.get("error").and_then(Value::as_str) != Some(code) {
        return Err(format!("{status} body's `error` is not \"{code}\": {body}"));
    }
    match body.get("detail").and_then(Value::as_str) {
        Some(detail) if !detail.trim().is_empty() => Ok(()),
        _ => Err(format!("{status} body has no non-empty `detail`: {body}")),
    }
}

/// `GET /api/v1/partitions`'s body (200 or an error).
pub fn list_partitions() -> Result<Value, String> {
    call_json(&Request::get("/api/v1/partitions"), 200)
}

/// Checks that the partition list holds `name`, running, on exactly `cpus`.
pub fn check_listed(list: &Value, name: &str, cpus: &[u64]) -> Result<(), String> {
    let partitions = list
        .get("partitions")
        .and_then(Value::as_array)
        .ok_or_else(|| format!("no `partitions` array in {list}"))?;
    let entry = partitions
        .iter()
        .find(|p| p.get("name").and_then(Value::as_str) == Some(name))
        .ok_or_else(|| format!("`{name}` is not listed in {list}"))?;
    let state = entry.get("state").and_then(Value::as_str);
    if state != Some("running") {
        return Err(format!("`{name}` is {state:?}, not running: {entry}"));
    }
    let listed: Option<Vec<u64>> = entry
        .get("cpus")
        .and_then(Value::as_array)
        .map(|cpus| cpus.iter().filter_map(Value::as_u64).collect());
    if listed.as_deref() != Some(cpus) {
        return Err(format!(
            "`{name}` has CPUs {listed:?}, expected {cpus:?}: {entry}"
        ));
    }
    Ok(())
}

/// The counters of one partition that the restart check compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub running: bool,
    pub uptime_ms: u64,
    pub boot_count: u64,
    /// Sum over the vCPUs of `injected`.
    pub injected: u64,
    /// Sum over the vCPUs of `exits.irq`.
    pub irq_exits: u64,
}

/// Reads a [`Sample`] out of `GET /api/v1/partitions/{name}`'s body.
pub fn sample_of(detail: &Value) -> Result<Sample, String> {
    let number = |key: &str| {
        detail
            .get(key)
            .and_then(Value::as_u64)
            .ok_or_else(|| format!("no `{key}` number in {detail}"))
    };
    let vcpus = detail
        .get("vcpus")
        .and_then(Value::as_array)
        .filter(|vcpus| !vcpus.is_empty())
        .ok_or_else(|| format!("no `vcpus` in {detail}"))?;
    let mut injected = 0;
    let mut irq_exits = 0;
    for vcpu in vcpus {
        injected += vcpu
            .get("injected")
            .and_then(Value::as_u64)
            .ok_or_else(|| format!("a vCPU without `injected`: {vcpu}"))?;
        irq_exits += vcpu
            .pointer("/exits/irq")
            .and_then(Value::as_u64)
            .ok_or_else(|| format!("a vCPU without `exits.irq`: {vcpu}"))?;
    }
    Ok(Sample {
        running: detail.get("state").and_then(Value::as_str) == Some("running"),
        uptime_ms: number("uptime_ms")?,
        boot_count: number("boot_count")?,
        injected,
        irq_exits,
    })
}

pub(crate) fn sample(name: &str) -> Result<Sample, String> {
    sample_of(&call_json(
        &Request::get(&format!("/api/v1/partitions/{name}")),
        200,
    )?)
}

/// One console read: the data and the cursor to continue at.
fn console_read(name: &str, offset: u64) -> Result<(String, u64), String> {
    let body = call_json(
        &Request::get(&format!(
            "/api/v1/partitions/{name}/console?offset={offset}"
        )),
        200,
    )?;
    let next = body
        .get("next")
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("console reply without `next`: {body}"))?;
    let data = body
        .get("data")
        .and_then(Value::as_str)
        .ok_or_else(|| format!("console reply without `data`: {body}"))?;
    Ok((data.to_string(), next))
}

/// The cursor at the current end of `name`'s console.
pub(crate) fn console_end(name: &str) -> Result<u64, String> {
    let mut offset = 0;
    loop {
        let (data, next) = console_read(name, offset)?;
        if data.is_empty() {
            return Ok(next);
        }
        offset = next;
    }
}

/// The first complete line of `text` that contains `needle`.
pub fn complete_line_with<'t>(text: &'t str, needle: &str) -> Option<&'t str> {
    let at = text.find(needle)?;
    let start = text[..at].rfind('\n').map_or(0, |i| i + 1);
    let end = at + text[at..].find('\n')?;
    Some(text[start..end].trim_end_matches('\r'))
}

/// Follows `name`'s console from `offset` (always continuing at `next`)
/// until a whole line with `needle` arrives.
pub(crate) fn follow_console_until(
    name: &str,
    mut offset: u64,
    needle: &str,
    deadline: Instant,
) -> Result<String, String> {
    let mut seen = String::new();
    loop {
        let (data, next) = console_read(name, offset)?;
        seen.push_str(&data);
        if let Some(line) = complete_line_with(&seen, needle) {
            return Ok(line.to_string());
        }
        offset = next;
        if Instant::now() >= deadline {
            let tail: String = seen
                .chars()
                .rev()
                .take(300)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            return Err(format!(
                "no `{needle}` line in {name}'s console (read {} bytes, cursor now {offset}); it ends: {tail:?}",
                seen.len()
            ));
        }
        if data.is_empty() {
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

/// Check 1: `GET /api/v1/partitions` lists alpha and beta running on their
/// CPUs; notes how long after QEMU's start the manager first answered. The
/// manager's clock (the hypervisor's, from the RTC or GetTime) is right:
/// see [`check_clock`].
pub fn api_list(stack: &mut Stack) -> Outcome {
    let first = stack.first_answer()?;
    let list = call_json(&Request::get("/api/v1/partitions"), 200)?;
    check_listed(&list, "alpha", &[1])?;
    check_listed(&list, "beta", &[2, 3])?;
    let clock = check_clock()?;
    let host = call_json(&Request::get("/api/v1/host"), 200)?;
    let gic = check_gic(&host, &list)?;
    Ok(vec![
        format!(
            "first answer from the manager {:.1} s after QEMU start; alpha on [1], beta on [2, 3], both running",
            first.as_secs_f64()
        ),
        clock,
        gic,
    ])
}

/// The GIC the hypervisor found on QEMU `virt,gic-version=3` (its ID
/// registers, GIC_INFO): a GICv3 with one ITS and LPIs, no direct vLPI or
/// vSGI injection, read at boot; every partition got the GICv3 interface
/// and asked for `auto` (the default plan sets no `gic`).
pub fn check_gic(host: &Value, list: &Value) -> Result<String, String> {
    let gic = &host["gic"];
    let want = serde_json::json!({
        "version": 3, "revision": "v3", "its_count": 1, "lpis": true,
        "direct_vlpi": false, "direct_vsgi": false, "probed": true,
        "irs_count": null, "gcie_legacy": null
    });
    if *gic != want {
        return Err(format!("/api/v1/host gic is {gic}, want {want}"));
    }
    if host["gic_version"] != 3 {
        return Err(format!(
            "/api/v1/host gic_version is {}",
            host["gic_version"]
        ));
    }
    let parts = list["partitions"]
        .as_array()
        .ok_or_else(|| format!("no partitions in {list}"))?;
    for p in parts {
        let (name, interface, asked) = (&p["name"], &p["gic_interface"], &p["config"]["gic"]);
        if interface != "gicv3" || asked != "auto" {
            return Err(format!(
                "partition {name}: gic_interface {interface}, config.gic {asked} (want \"gicv3\", \"auto\")"
            ));
        }
    }
    Ok(format!(
        "GIC found: GICv3 (v3), 1 ITS, LPIs, no direct vLPI/vSGI; {} partitions on the gicv3 interface",
        parts.len()
    ))
}

/// How far the manager's clock may be from the host's.
const CLOCK_SLACK_SECS: i64 = 60;

/// `GET /api/v1/host` over a raw connection (the xtask's client drops
/// headers): its `Date` header (IMF-fixdate) and its `time` (RFC 3339)
/// are both within [`CLOCK_SLACK_SECS`] of the host's clock (QEMU's PL031
/// and edk2 follow it).
pub fn check_clock() -> Result<String, String> {
    use std::io::{Read, Write};
    let mut conn = crate::http::connect_raw(&authority(), REQUEST_TIMEOUT)?;
    conn.set_read_timeout(Some(REQUEST_TIMEOUT))
        .and_then(|()| conn.set_write_timeout(Some(REQUEST_TIMEOUT)))
        .map_err(|e| format!("timeouts: {e}"))?;
    write!(
        conn,
        "GET /api/v1/host HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        authority()
    )
    .map_err(|e| format!("GET /api/v1/host: {e}"))?;
    let mut raw = Vec::new();
    // tiny_http closes after `Connection: close`; a timeout after the whole
    // reply arrived is fine too.
    let _ = conn.read_to_end(&mut raw);
    let host_now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|e| format!("host clock: {e}"))?
        .as_secs() as i64;
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("GET /api/v1/host: no complete reply: {text:?}"))?;
    let date = head
        .lines()
        .find_map(|l| {
            l.split_once(':')
                .filter(|(k, _)| k.trim().eq_ignore_ascii_case("date"))
        })
        .map(|(_, v)| v.trim().to_string())
        .ok_or_else(|| format!("GET /api/v1/host: no Date header in {head:?}"))?;
    let date_secs = parse_imf_fixdate(&date)
        .ok_or_else(|| format!("the Date header {date:?} is not an IMF-fixdate"))?;
    // The body may be chunked; the JSON object is between the outer braces.
    let json = body
        .find('{')
        .zip(body.rfind('}'))
        .map(|(a, b)| &body[a..=b])
        .ok_or_else(|| format!("GET /api/v1/host: no JSON body: {body:?}"))?;
    let host: Value = serde_json::from_str(json).map_err(|e| format!("/api/v1/host: {e}"))?;
    let time = host["time"]
        .as_str()
        .ok_or_else(|| format!("/api/v1/host has no time: {json}"))?;
    let time_secs = parse_rfc3339_utc(time)
        .ok_or_else(|| format!("/api/v1/host time {time:?} is not RFC 3339 UTC"))?;
    for (what, secs) in [
        ("the Date header", date_secs),
        ("/api/v1/host time", time_secs),
    ] {
        if (secs - host_now).abs() > CLOCK_SLACK_SECS {
            return Err(format!(
                "{what} is {} s off the host's clock (Date: {date}, time: {time}, host: {host_now})",
                secs - host_now
            ));
        }
    }
    Ok(format!(
        "Date: {date} ({:+} s from the host's clock), time {time}",
        date_secs - host_now
    ))
}

/// Unix seconds of a day and a time of day.
fn unix_secs(year: i64, month: u32, day: u32, h: i64, m: i64, s: i64) -> Option<i64> {
    let valid = (1..=12).contains(&month)
        && day >= 1
        && day <= pinfold_hv::clock::days_in_month(year as u32, month)
        && (0..24).contains(&h)
        && (0..60).contains(&m)
        && (0..60).contains(&s);
    valid.then(|| {
        pinfold_hv::clock::days_from_civil(year, month, day) * 86_400 + h * 3600 + m * 60 + s
    })
}

/// `HH:MM:SS`.
fn hms(t: &str) -> Option<(i64, i64, i64)> {
    let mut it = t
        .split(':')
        .map(|f| (f.len() == 2).then(|| f.parse::<i64>().ok()).flatten());
    let r = (it.next()??, it.next()??, it.next()??);
    it.next().is_none().then_some(r)
}

/// Unix seconds of an RFC 7231 IMF-fixdate, `Tue, 01 Dec 2026 13:45:00 GMT`.
pub fn parse_imf_fixdate(s: &str) -> Option<i64> {
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let f: Vec<&str> = s.split(' ').collect();
    let [wd, day, mon, year, time, "GMT"] = f[..] else {
        return None;
    };
    let month = MONTHS.iter().position(|m| *m == mon)? as u32 + 1;
    if day.len() != 2 || year.len() != 4 || wd.len() != 4 || !wd.ends_with(',') {
        return None;
    }
    let (h, m, sec) = hms(time)?;
    let secs = unix_secs(year.parse().ok()?, month, day.parse().ok()?, h, m, sec)?;
    // The weekday must be the date's (1970-01-01 was a Thursday).
    const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    (WEEKDAYS[(secs.div_euclid(86_400) % 7) as usize] == &wd[..3]).then_some(secs)
}

/// Unix seconds of `2026-12-01T13:45:00Z`.
pub fn parse_rfc3339_utc(s: &str) -> Option<i64> {
    let (date, time) = s.strip_suffix('Z')?.split_once('T')?;
    let mut d = date.split('-');
    let (y, m, day) = (d.next()?, d.next()?, d.next()?);
    if d.next().is_some() || y.len() != 4 || m.len() != 2 || day.len() != 2 {
        return None;
    }
    let (h, min, sec) = hms(time)?;
    unix_secs(
        y.parse().ok()?,
        m.parse().ok()?,
        day.parse().ok()?,
        h,
        min,
        sec,
    )
}

/// The line the hypervisor prints when the management partition's restart
/// policy takes over (`hv::system::System::schedule_restart`).
const MGMT_STOPPED: &str = "pinfold: mgmt stopped (";

/// Kills the manager through its own console (`poweroff`, typed on the
/// host console after the monitor's Ctrl-A m; the API refuses it) and waits until the hypervisor has
/// restarted it and the API answers again; returns the restart line, the
/// time to the first answer after it, and the quiesce line of the restart.
fn kill_manager(stack: &mut Stack, token: &str) -> Result<(Line, Duration, String), String> {
    let deadline = Instant::now() + Duration::from_secs(240);
    let from = stack.qemu.lines().len();
    // The API refuses input to the management partition (403): the
    // monitor's Ctrl-A m hands one line of the host console to it.
    let refused = http::send(
        &authority(),
        &Request::post(
            "/api/v1/partitions/mgmt/console",
            Some(token),
            Some(r#"{"data":"poweroff\n"}"#),
        ),
        REQUEST_TIMEOUT,
    )
    .map_err(|e| format!("POST mgmt console: {e}"))?;
    check_error(&refused, 403, "forbidden")
        .map_err(|why| format!("console input to mgmt through the API: {why}"))?;
    stack
        .qemu
        .send(b"\x01mpoweroff\r")
        .map_err(|err| err.to_string())?;
    let stopped = stack.expect(MGMT_STOPPED, from, deadline)?;
    let restarting = stack.expect("partition mgmt: restarting", stopped.index, deadline)?;
    // Its NIC (00:01.0, assigned per function) is reset as the manager
    // stops (hv::system::System::reset_pci, "(stop)"), before its RAM or
    // the function is used again; the reset on the restart's start then
    // finds it idle.
    let quiesced = stack
        .expect("partition mgmt (stop): pci 00:01.0 ", from, deadline)?
        .text;
    stack.expect(
        "[mgmt] pinfold-manager: listening",
        restarting.index,
        deadline,
    )?;
    loop {
        match http::send(
            &authority(),
            &Request::get("/api/v1/partitions"),
            Duration::from_secs(2),
        ) {
            Ok(reply) if reply.status == 200 => break,
            _ if Instant::now() >= deadline => {
                return Err("the API did not answer again after the manager's restart".into())
            }
            _ => std::thread::sleep(POLL),
        }
    }
    let back = stack.qemu.started().elapsed().saturating_sub(stopped.at);
    Ok((stopped, back, quiesced))
}

/// Readers of the API while the manager is killed: each asks for the
/// partition list in a loop until told to stop; (answered, failed).
fn readers_during(stop: &Arc<AtomicBool>) -> Vec<JoinHandle<(u64, u64)>> {
    (0..8)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let (mut ok, mut failed) = (0, 0);
                while !stop.load(Ordering::Relaxed) {
                    match http::send(
                        &authority(),
                        &Request::get("/api/v1/partitions"),
                        Duration::from_secs(5),
                    ) {
                        Ok(reply) if reply.status == 200 => ok += 1,
                        _ => {
                            failed += 1;
                            std::thread::sleep(POLL);
                        }
                    }
                }
                (ok, failed)
            })
        })
        .collect()
}

/// The management partition dies under load (8 clients reading the API
/// meanwhile; its manager powers off, as a crashed Hermit does through
/// its panic handler) and the hypervisor restarts it: the restart line
/// with the back-off and the count, the NIC reset on the way (the previous
/// run left it DRIVER_OK), the API answering again with the manager's boot
/// count up by one, alpha and beta running on without a restart; a second
/// death waits twice as long.
pub fn mgmt_restart(stack: &mut Stack) -> Outcome {
    let deadline = Instant::now() + Duration::from_secs(240);
    let token = stack.token(deadline)?;
    stack.first_answer()?;
    let before = sample("mgmt")?;
    // beta may still be booting from an earlier case's restart.
    let (alpha_before, beta_before) = loop {
        let (a, b) = (sample("alpha")?, sample("beta")?);
        if a.running && b.running {
            break (a, b);
        }
        if Instant::now() >= deadline {
            return Err(format!("alpha and beta should be running: {a:?} {b:?}"));
        }
        std::thread::sleep(Duration::from_secs(1));
    };

    let stop = Arc::new(AtomicBool::new(false));
    let readers = readers_during(&stop);
    std::thread::sleep(Duration::from_secs(2));
    let killed = kill_manager(stack, &token);
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    let (mut answered, mut failed) = (0, 0);
    for r in readers {
        let (ok, bad) = r.join().map_err(|_| "a reader panicked".to_string())?;
        answered += ok;
        failed += bad;
    }
    let (first, back1, quiesced) = killed?;
    let (alpha_after, beta_after) = (sample("alpha")?, sample("beta")?);
    for (name, was, is) in [
        ("alpha", &alpha_before, &alpha_after),
        ("beta", &beta_before, &beta_after),
    ] {
        if !is.running || is.boot_count != was.boot_count || is.uptime_ms <= was.uptime_ms {
            return Err(format!(
                "{name} was disturbed by the manager's death: {was:?} -> {is:?}"
            ));
        }
    }
    if !first
        .text
        .ends_with("(powered off by the guest): restarting in 1 s (restart #1)")
    {
        return Err(format!("unexpected restart line `{}`", first.text));
    }
    // The previous run left the device live: a non-zero status, reset.
    if !quiesced.contains(", virtio reset (status 0x") || quiesced.contains("(status 0x00 ") {
        return Err(format!(
            "the NIC the previous run left live was not reset before the restart: `{quiesced}`"
        ));
    }
    let after = sample("mgmt")?;
    if !after.running || after.boot_count != before.boot_count + 1 {
        return Err(format!(
            "after its restart mgmt should be running with boot_count {}: {after:?}",
            before.boot_count + 1
        ));
    }
    let (second, back2, _) = kill_manager(stack, &token)?;
    if !second.text.ends_with("restarting in 2 s (restart #2)") {
        return Err(format!(
            "the second restart did not back off to 2 s: `{}`",
            second.text
        ));
    }
    Ok(vec![
        format!(
            "`{}`; API back {:.1} s after it",
            first.text,
            back1.as_secs_f64()
        ),
        format!(
            "under load: 8 readers got {answered} answers around the death ({failed} attempts failed while it was down); alpha and beta ran on (boot_count {} and {}, uptime growing)",
            alpha_after.boot_count, beta_after.boot_count
        ),
        format!("reset on the way: `{quiesced}`"),
        format!(
            "`{}`; API back {:.1} s after it",
            second.text,
            back2.as_secs_f64()
        ),
        format!(
            "boot_count {} -> {}",
            before.boot_count,
            after.boot_count + 1
        ),
    ])
}

/// Check 2: restarting beta with the token boots it again (its console
/// shows a new UP marker, boot_count + 1) while alpha keeps running
/// undisturbed: uptime and timer interrupt counts keep growing.
pub fn api_restart(stack: &mut Stack) -> Outcome {
    let deadline = Instant::now() + Duration::from_secs(240);
    stack.guests_up(deadline)?;
    let token = stack.token(deadline)?;
    stack.first_answer()?;

    let alpha_before = sample("alpha")?;
    let beta_before = sample("beta")?;
    let sampled = Instant::now();
    let cursor = console_end("beta")?;
    let reply = call_json(
        &Request::post("/api/v1/partitions/beta/restart", Some(&token), None),
        202,
    )?;
    if reply.get("name").and_then(Value::as_str) != Some("beta") {
        return Err(format!(
            "the restart's 202 body does not name beta: {reply}"
        ));
    }
    let restarted = Instant::now();
    let marker = format!("{UP_MARKER}beta cpus=2 ");
    let up = follow_console_until(
        "beta",
        cursor,
        &marker,
        restarted + Duration::from_secs(180),
    )?;
    let up_after = restarted.elapsed();
    match number_after(&up, "timer_irqs=") {
        Some(count) if count > 0 => {}
        _ => {
            return Err(format!(
                "beta's new UP line shows no timer interrupts: `{up}`"
            ))
        }
    }

    let beta_after = sample("beta")?;
    let alpha_after = sample("alpha")?;
    let wall_ms = sampled.elapsed().as_millis() as u64;
    if !beta_after.running || beta_after.boot_count != beta_before.boot_count + 1 {
        return Err(format!(
            "after the restart beta should be running with boot_count {}: {beta_after:?}",
            beta_before.boot_count + 1
        ));
    }
    if !alpha_after.running || alpha_after.boot_count != alpha_before.boot_count {
        return Err(format!(
            "alpha was disturbed by beta's restart: before {alpha_before:?}, after {alpha_after:?}"
        ));
    }
    // Uptime follows the counter, which under TCG follows the host clock; a
    // restart of alpha would have reset it, so half the wall time is a
    // generous lower bound that still catches one.
    if alpha_after.uptime_ms < alpha_before.uptime_ms + wall_ms / 2 {
        return Err(format!(
            "alpha's uptime went from {} ms to {} ms over {wall_ms} ms of wall time",
            alpha_before.uptime_ms, alpha_after.uptime_ms
        ));
    }
    if alpha_after.injected <= alpha_before.injected
        || alpha_after.irq_exits <= alpha_before.irq_exits
    {
        return Err(format!(
            "alpha's interrupt counters did not rise across beta's restart: injected {} -> {}, irq exits {} -> {}",
            alpha_before.injected, alpha_after.injected, alpha_before.irq_exits, alpha_after.irq_exits
        ));
    }
    Ok(vec![
        format!(
            "restart of beta: 202, new `{UP_MARKER}beta` on its console {:.1} s later, boot_count {} -> {}",
            up_after.as_secs_f64(),
            beta_before.boot_count,
            beta_after.boot_count
        ),
        format!(
            "alpha meanwhile: uptime {} -> {} ms, injected {} -> {}, irq exits {} -> {}",
            alpha_before.uptime_ms,
            alpha_after.uptime_ms,
            alpha_before.injected,
            alpha_after.injected,
            alpha_before.irq_exits,
            alpha_after.irq_exits
        ),
    ])
}

/// The manager answers, and takes `stack`'s token and refuses another
/// (a call that changes nothing: a restart of a partition that does not
/// exist is 404 once authorised, 401 before). Returns the time from QEMU's
/// start to the first answer.
pub fn token_accepted(stack: &mut Stack) -> Result<Duration, String> {
    let deadline = Instant::now() + Duration::from_secs(240);
    let token = stack.token(deadline)?;
    let first = stack.first_answer()?;
    let with = call(&Request::post(
        "/api/v1/partitions/nosuch/restart",
        Some(&token),
        None,
    ))?;
    check_error(&with, 404, "not_found").map_err(|why| format!("with the token: {why}"))?;
    let wrong = format!("{token}x");
    let without = call(&Request::post(
        "/api/v1/partitions/nosuch/restart",
        Some(&wrong),
        None,
    ))?;
    check_error(&without, 401, "unauthorized")
        .map_err(|why| format!("with a wrong token: {why}"))?;
    Ok(first)
}

/// Check 3: refused requests get the right status and JSON error body and
/// change nothing; the hypervisor and manager keep working afterwards.
pub fn api_errors(stack: &mut Stack) -> Outcome {
    let deadline = Instant::now() + Duration::from_secs(240);
    let token = stack.token(deadline)?;
    stack.first_answer()?;
    let beta_before = sample("beta")?;

    let cases: [(&str, Request<'_>, u16, &str); 4] = [
        (
            "restart without a token",
            Request::post("/api/v1/partitions/beta/restart", None, None),
            401,
            "unauthorized",
        ),
        (
            "restart with a wrong token",
            Request::post("/api/v1/partitions/beta/restart", Some("0000"), None),
            401,
            "unauthorized",
        ),
        (
            "restart of an unknown partition",
            Request::post("/api/v1/partitions/nosuch/restart", Some(&token), None),
            404,
            "not_found",
        ),
        (
            "console input that is not JSON",
            Request::post(
                "/api/v1/partitions/beta/console",
                Some(&token),
                Some("{not json"),
            ),
            400,
            "bad_request",
        ),
    ];
    for (what, request, status, code) in &cases {
        let reply = call(request)?;
        check_error(&reply, *status, code).map_err(|why| format!("{what}: {why}"))?;
    }

    let list = call_json(&Request::get("/api/v1/partitions"), 200)
        .map_err(|why| format!("after the refused requests: {why}"))?;
    check_listed(&list, "beta", &[2, 3])?;
    let beta_after = sample("beta")?;
    if beta_after.boot_count != beta_before.boot_count {
        return Err(format!(
            "a refused restart restarted beta: boot_count {} -> {}",
            beta_before.boot_count, beta_after.boot_count
        ));
    }
    let from = stack.qemu.lines().len();
    // Ctrl-A s: the hypervisor monitor prints its statistics.
    stack.qemu.send(b"\x01s").map_err(|err| err.to_string())?;
    let stats = stack.expect(
        "pinfold: stats hot_path_cross_cpu_locks=",
        from,
        Instant::now() + Duration::from_secs(30),
    )?;
    Ok(vec![
        "401 unauthorized (no token, wrong token), 404 not_found, 400 bad_request, each with error and detail"
            .into(),
        format!("afterwards GET still 200, beta not restarted, monitor: `{}`", stats.text),
    ])
}

/// Idle connections held open while the parallel clients run: clients that
/// connect and never send a request must not take the server's workers.
/// tiny_http keeps a thread per open connection; with std's 1 MiB default
/// stacks 64 of them exhausted the manager's memory and Hermit panicked.
const IDLE_CONNECTIONS: usize = 64;
/// Clients asking at the same time, and how many requests each sends.
const PARALLEL_CLIENTS: usize = 8;
const REQUESTS_PER_CLIENT: usize = 5;

/// Many clients at once do not wedge the manager: with idle connections
/// held open, parallel clients each get every answer, and afterwards the
/// API still answers.
pub fn api_concurrency(stack: &mut Stack) -> Outcome {
    stack.first_answer()?;
    let addr = authority();
    // Opened from 8 threads: each connect through QEMU's port forwarding
    // takes a noticeable fraction of a second.
    let openers: Vec<_> = (0..8)
        .map(|_| {
            let addr = addr.clone();
            std::thread::spawn(move || {
                (0..IDLE_CONNECTIONS / 8)
                    .map(|_| std::net::TcpStream::connect(&addr))
                    .collect::<Result<Vec<_>, _>>()
            })
        })
        .collect();
    let mut idle = Vec::new();
    for opener in openers {
        let streams = opener
            .join()
            .map_err(|_| "an opener thread panicked".to_string())?
            .map_err(|err| format!("opening idle connections: {err}"))?;
        idle.extend(streams);
    }
    let started = std::time::Instant::now();
    let clients: Vec<_> = (0..PARALLEL_CLIENTS)
        .map(|_| {
            std::thread::spawn(|| -> Result<usize, String> {
                let mut ok = 0;
                for _ in 0..REQUESTS_PER_CLIENT {
                    call_json(&Request::get("/api/v1/partitions"), 200)?;
                    ok += 1;
                }
                Ok(ok)
            })
        })
        .collect();
    let mut answered = 0;
    for client in clients {
        answered += client
            .join()
            .map_err(|_| "a client thread panicked".to_string())??;
    }
    let elapsed = started.elapsed();
    drop(idle);
    let after = call_json(&Request::get("/api/v1/host"), 200)?;
    if after.get("cpu_count").and_then(Value::as_u64) != Some(4) {
        return Err(format!("GET /api/v1/host after the load: {after}"));
    }
    Ok(vec![format!(
        "{answered} of {} requests from {PARALLEL_CLIENTS} parallel clients answered in {:.1} s \
         with {IDLE_CONNECTIONS} idle connections held open; the API answers afterwards",
        PARALLEL_CLIENTS * REQUESTS_PER_CLIENT,
        elapsed.as_secs_f64()
    )])
}

/// The rows of `hvctl list`'s table whose first column is `name` and that
/// say `running`.
pub fn hvctl_row<'t>(table: &'t str, name: &str) -> Option<&'t str> {
    table.lines().find(|line| {
        let mut words = line.split_whitespace();
        words.next() == Some(name) && words.any(|word| word == "running")
    })
}

/// The 4 KiB the paste check sends: 64 distinct lines of 63 characters
/// and a newline (a Linux tty line holds at most 4095 bytes, so one line
/// would not do), so loss or reordering changes the checksum.
pub fn paste_text() -> String {
    (0..64)
        .map(|i| {
            let fill: String = (0..60)
                .map(|j| char::from(b'a' + ((i * 7 + j) % 26) as u8))
                .collect();
            format!("{i:02}-{fill}\n")
        })
        .collect()
}

/// Lower-case hex SHA-256, as `sha256sum` prints it.
fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    crate::signing::hex(&sha2::Sha256::digest(bytes))
}

/// POSTs `data` to beta's console input; the reply's (accepted, remaining).
fn post_beta_input(token: &str, data: &str) -> Result<(u64, u64), String> {
    let body = serde_json::json!({ "data": data }).to_string();
    let reply = call_json(
        &Request::post("/api/v1/partitions/beta/console", Some(token), Some(&body)),
        202,
    )?;
    let field = |key: &str| {
        reply
            .get(key)
            .and_then(Value::as_u64)
            .ok_or_else(|| format!("console POST reply without `{key}`: {reply}"))
    };
    Ok((field("accepted")?, field("remaining")?))
}

/// Check: a 4 KiB paste into beta's console (one POST) arrives whole and
/// in order. beta's shell writes it to a file with a here-document and
/// prints its SHA-256, which must be the host's. The markers are computed
/// by the shell (`$((...))`), so the echo of the typed command never
/// matches them.
pub fn console_paste(ws: &Workspace, stack: &mut Stack) -> Outcome {
    let deadline = Instant::now() + Duration::from_secs(240);
    stack.guests_up(deadline)?;
    let token = stack.token(deadline)?;
    stack.first_answer()?;

    // beta's shell is reading its console once it answers.
    let cursor = console_end("beta")?;
    post_beta_input(&token, "echo PASTE-READY-$((40+2))\n")?;
    follow_console_until(
        "beta",
        cursor,
        "PASTE-READY-42",
        Instant::now() + Duration::from_secs(60),
    )?;

    let text = paste_text();
    let want = sha256_hex(text.as_bytes());
    let cursor = console_end("beta")?;
    let (accepted, remaining) = post_beta_input(&token, "cat > /tmp/paste <<'EOF'\n")?;
    if remaining != 0 {
        return Err(format!("the here-document's first line was not all taken: accepted {accepted}, remaining {remaining}"));
    }
    // As a client must: send from `accepted` on until all is taken (one
    // POST when beta keeps up with the manager's 2 s wait).
    let started = Instant::now();
    let mut sent = 0;
    let mut posts = Vec::new();
    while sent < text.len() {
        let (accepted, remaining) = post_beta_input(&token, &text[sent..])?;
        posts.push(accepted);
        if accepted as usize + remaining as usize != text.len() - sent {
            return Err(format!(
                "console POST of {} bytes answered accepted {accepted} + remaining {remaining}",
                text.len() - sent
            ));
        }
        if accepted == 0 || started.elapsed() > Duration::from_secs(60) {
            return Err(format!(
                "beta stopped taking the paste after {sent} of {} bytes (POSTs took {posts:?})",
                text.len()
            ));
        }
        sent += accepted as usize;
    }
    let took = started.elapsed();
    // The emulated PL011 holds 32 bytes: more in one POST shows the manager
    // kept writing while beta read (one CONSOLE_WRITE took 32 at most).
    if posts[0] <= 32 {
        return Err(format!(
            "the first POST of the paste took only {} bytes (POSTs took {posts:?}): the manager does not keep writing while the partition reads",
            posts[0]
        ));
    }
    post_beta_input(
        &token,
        "EOF\necho PASTE-SUM-$((40+2)) $(wc -c < /tmp/paste) $(sha256sum < /tmp/paste)\n",
    )?;
    check_paste_sum(cursor, "PASTE-SUM-42", &want)?;
    let mut notes = vec![format!(
        "4096-byte paste into beta's console: {} POST(s) taking {posts:?} bytes in {:.2} s; beta's file is 4096 bytes, SHA-256 {}... as sent",
        posts.len(),
        took.as_secs_f64(),
        &want[..16]
    )];

    // The same through `hvctl console beta --input -`: stdin of more than
    // 4 KiB, so hvctl splits it into POSTs and sends each from `accepted`.
    let hvctl = build_hvctl(ws)?;
    let cursor = console_end("beta")?;
    post_beta_input(&token, "cat > /tmp/paste2 <<'EOF'\n")?;
    let stdin = format!(
        "{text}EOF\necho PASTE2-SUM-$((40+2)) $(wc -c < /tmp/paste2) $(sha256sum < /tmp/paste2)\n"
    );
    let url = crate::http::base_url(&authority());
    let mut child = Command::new(&hvctl)
        .args([
            "--url", &url, "--token", &token, "console", "beta", "--input", "-",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|err| format!("running {}: {err}", hvctl.display()))?;
    {
        use std::io::Write;
        let mut pipe = child.stdin.take().ok_or("hvctl has no stdin pipe")?;
        pipe.write_all(stdin.as_bytes())
            .map_err(|err| format!("writing hvctl's stdin: {err}"))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|err| format!("waiting for hvctl: {err}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "hvctl console beta --input - exited with {}: {}{}",
            out.status,
            stdout.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    check_paste_sum(cursor, "PASTE2-SUM-42", &want)?;
    notes.push(format!(
        "hvctl console beta --input - with {} bytes on stdin: `{}`; beta's second file matches too",
        stdin.len(),
        stdout.trim()
    ));
    Ok(notes)
}

/// Waits for beta's `MARKER <bytes> <sha256> -` line and checks it shows
/// 4096 bytes with SHA-256 `want`.
fn check_paste_sum(cursor: u64, marker: &str, want: &str) -> Result<(), String> {
    let line = follow_console_until(
        "beta",
        cursor,
        &format!("{marker} "),
        Instant::now() + Duration::from_secs(60),
    )?;
    let words: Vec<&str> = line
        .split_whitespace()
        .skip_while(|w| *w != marker)
        .collect();
    if words.get(1).copied() != Some("4096") || words.get(2).copied() != Some(want) {
        return Err(format!(
            "beta received the paste changed: it printed `{line}`; the host sent 4096 bytes with SHA-256 {want}"
        ));
    }
    Ok(())
}

/// Builds hvctl; its path.
pub fn build_hvctl(ws: &Workspace) -> Result<std::path::PathBuf, String> {
    cmd::run(
        cmd::cargo()
            .current_dir(&ws.root)
            .args(["build", "-q", "-p", "hvctl"]),
    )
    .map_err(|err| err.to_string())?;
    Ok(ws.root.join("target/debug/hvctl"))
}

/// Check 4: `hvctl list` against the real manager prints alpha and beta.
pub fn hvctl_list(ws: &Workspace, stack: &mut Stack) -> Outcome {
    cmd::run(
        cmd::cargo()
            .current_dir(&ws.root)
            .args(["build", "-q", "-p", "hvctl"]),
    )
    .map_err(|err| err.to_string())?;
    let hvctl = ws.root.join("target/debug/hvctl");
    stack.first_answer()?;
    let url = crate::http::base_url(&authority());
    let out = Command::new(&hvctl)
        .args(["--url", &url, "list"])
        .stdin(Stdio::null())
        .output()
        .map_err(|err| format!("running {}: {err}", hvctl.display()))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "hvctl list exited with {}: {}{}",
            out.status,
            stdout.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let mut notes = Vec::new();
    for name in ["alpha", "beta"] {
        let row = hvctl_row(&stdout, name)
            .ok_or_else(|| format!("hvctl list shows no running `{name}` row:\n{stdout}"))?;
        notes.push(format!("hvctl list: `{}`", row.trim_end()));
    }
    Ok(notes)
}

/// The counts in the browser test's closing `N passed, M failed` line.
pub fn browser_summary(output: &str) -> Option<(u64, u64)> {
    let last = output
        .lines()
        .rev()
        .find(|line| line.contains(" passed, "))?;
    let passed = last.split(" passed").next()?.trim().parse().ok()?;
    let failed = number_after(last, "passed, ")?;
    Some((passed, failed))
}

/// Check 5: the contract machinery's own tests (web-ui/tests/contract.test.mjs,
/// against the mock), then the REST contract against the real manager
/// (web-ui/tests/contract.mjs with the token: every GET endpoint's answer
/// checked against manager/api/openapi.json),
/// then the web UI's browser test (web-ui/tests/ui.test.mjs) in Chromium
/// against it; it leaves `ui.png` behind.
pub fn web_ui(ws: &Workspace, stack: &mut Stack) -> Outcome {
    Provisioner::new()
        .browser()
        .map_err(|err| err.to_string())?;
    let ui = ws.root.join("web-ui");
    if crate::hermit::web_ui_modules_stale(&ui) {
        cmd::run(
            Command::new("npm")
                .current_dir(&ui)
                .args(["ci", "--no-audit", "--no-fund"]),
        )
        .map_err(|err| err.to_string())?;
    }
    let out_dir = ws.root.join("target/pinfold/test-output");
    let screenshot = out_dir.join("ui.png");
    // A screenshot from an earlier run must not pass for this one.
    let _ = fs::remove_file(&screenshot);
    let deadline = Instant::now() + Duration::from_secs(240);
    stack.guests_up(deadline)?;
    let token = stack.token(deadline)?;
    stack.first_answer()?;

    // The contract machinery itself first (the mock keeps the contract, a
    // broken answer is caught, the generator refuses what it cannot type).
    let machinery_log = ws
        .root
        .join("target/pinfold/test-logs/web-ui-contract-tests.log");
    let machinery = run_logged(
        Command::new("node")
            .current_dir(&ui)
            .args(["--test", "tests/contract.test.mjs"]),
        &machinery_log,
        BROWSER_LIMIT,
    )?;
    if !machinery.status_ok || !machinery.text.contains("# fail 0") {
        return Err(format!(
            "the contract machinery's own tests (node --test tests/contract.test.mjs) fail ({}): see {}",
            machinery.status,
            ws.relative(&machinery_log)
        ));
    }

    // With the token: every read answers 200 and its body is checked (without
    // one, each would be a documented 401 and nothing of the bodies).
    let contract_log = ws.root.join("target/pinfold/test-logs/web-ui-contract.log");
    let contract = run_logged(
        Command::new("node")
            .current_dir(&ui)
            .arg("tests/contract.mjs")
            .arg(crate::http::base_url(&authority()))
            .env("PINFOLD_TOKEN", &token),
        &contract_log,
        BROWSER_LIMIT,
    )?;
    contract.verdict(
        "the manager's answers break the REST contract",
        ws,
        &contract_log,
    )?;

    let log = ws.root.join("target/pinfold/test-logs/web-ui.log");
    let output = run_logged(
        Command::new("node")
            .current_dir(&ui)
            .arg("tests/ui.test.mjs")
            .env("PINFOLD_URL", crate::http::base_url(&authority()))
            .env("PINFOLD_TOKEN", &token)
            .env("PINFOLD_TEST_OUT", &out_dir),
        &log,
        BROWSER_LIMIT,
    )?;
    let passed = output.verdict("the browser test failed", ws, &log)?;
    let size = fs::metadata(&screenshot).map(|m| m.len()).unwrap_or(0);
    if size == 0 {
        return Err(format!(
            "the browser test passed but left no {}",
            ws.relative(&screenshot)
        ));
    }
    let contract_line = contract
        .text
        .lines()
        .rev()
        .find(|line| line.contains(" passed, "))
        .unwrap_or_default()
        .to_string();
    Ok(vec![
        contract_line,
        format!(
            "browser test: {} checks passed; screenshot {} ({} KiB)",
            passed,
            ws.relative(&screenshot),
            size / 1024
        ),
    ])
}

/// The live UI flow's whole run, at most (its own limit inside is 900 s):
/// a 27 MB upload at ~1 MB/s and two Linux boots under TCG.
const BROWSER_LIVE_LIMIT: Duration = Duration::from_secs(960);

/// The web UI's create/upload/edit/delete flow in Chromium against the
/// real manager (web-ui/tests/ui-live.test.mjs): alpha deleted in the UI,
/// kernel and initrd uploaded through the create form with the progress
/// bar seen moving, the `cpus` field error for CPU 2, gamma created on
/// CPU 1, booted (its boot marker in the console view), edited, booted
/// again, deleted; alpha created again as it was. Screenshots of failed
/// steps go to target/pinfold/test-output.
pub fn web_ui_live(ws: &Workspace, stack: &mut Stack) -> Outcome {
    Provisioner::new()
        .browser()
        .map_err(|err| err.to_string())?;
    let ui = ws.root.join("web-ui");
    if crate::hermit::web_ui_modules_stale(&ui) {
        cmd::run(
            Command::new("npm")
                .current_dir(&ui)
                .args(["ci", "--no-audit", "--no-fund"]),
        )
        .map_err(|err| err.to_string())?;
    }
    let (kernel, initrd) = (
        ws.root.join(crate::runtime_checks::KERNEL),
        ws.root.join(crate::runtime_checks::INITRD),
    );
    for file in [&kernel, &initrd] {
        if !file.is_file() {
            return Err(format!(
                "{} is missing (built with the default plan)",
                ws.relative(file)
            ));
        }
    }
    let out_dir = ws.root.join("target/pinfold/test-output");
    let deadline = Instant::now() + Duration::from_secs(240);
    stack.guests_up(deadline)?;
    let token = stack.token(deadline)?;
    stack.first_answer()?;
    let log = ws.root.join("target/pinfold/test-logs/web-ui-live.log");
    let output = run_logged(
        Command::new("node")
            .current_dir(&ui)
            .arg("tests/ui-live.test.mjs")
            .env("PINFOLD_URL", crate::http::base_url(&authority()))
            .env("PINFOLD_TOKEN", &token)
            .env("PINFOLD_KERNEL", &kernel)
            .env("PINFOLD_INITRD", &initrd)
            .env("PINFOLD_TEST_OUT", &out_dir),
        &log,
        BROWSER_LIVE_LIMIT,
    )?;
    let passed = output.verdict("the live UI flow failed", ws, &log)?;
    let mut notes = vec![format!("live UI flow: {} checks passed", passed)];
    notes.extend(
        output
            .text
            .lines()
            .filter_map(|line| line.strip_prefix("# "))
            .map(str::to_string),
    );
    Ok(notes)
}

/// What a program run by [`run_logged`] printed and how it ended.
struct Finished {
    text: String,
    status: String,
    status_ok: bool,
}

impl Finished {
    /// The passed count when the node test runner exited 0 and its closing
    /// `N passed, M failed` line has N > 0 and M = 0; else `what`, the exit
    /// status, the summary, where the log is and every `FAIL` line.
    fn verdict(&self, what: &str, ws: &Workspace, log: &Path) -> Result<u64, String> {
        let summary = browser_summary(&self.text);
        match (self.status_ok, summary) {
            (true, Some((passed, 0))) if passed > 0 => Ok(passed),
            _ => {
                let failures: Vec<&str> = self
                    .text
                    .lines()
                    .filter(|line| line.starts_with("FAIL"))
                    .collect();
                Err(format!(
                    "{what} ({}; summary {summary:?}; whole output in {}): {}",
                    self.status,
                    ws.relative(log),
                    failures.join(" | ")
                ))
            }
        }
    }
}

/// Runs `cmd` with stdout and stderr into `log`, killing it after `limit`.
fn run_logged(cmd: &mut Command, log: &Path, limit: Duration) -> Result<Finished, String> {
    if let Some(dir) = log.parent() {
        fs::create_dir_all(dir).map_err(|err| format!("creating {}: {err}", dir.display()))?;
    }
    let file = fs::File::create(log).map_err(|err| format!("creating {}: {err}", log.display()))?;
    let err_file = file
        .try_clone()
        .map_err(|err| format!("opening {}: {err}", log.display()))?;
    let program = cmd::describe(cmd);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(file)
        .stderr(err_file)
        .spawn()
        .map_err(|err| format!("starting {program}: {err}"))?;
    let deadline = Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{program} ran longer than {} s", limit.as_secs()));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(200)),
            Err(err) => return Err(format!("waiting for {program}: {err}")),
        }
    };
    let text = fs::read_to_string(log).unwrap_or_default();
    Ok(Finished {
        text,
        status: status.to_string(),
        status_ok: status.success(),
    })
}

/// `GET /api/v1/partitions/{name}`'s body.
fn partition_json(name: &str) -> Result<Value, String> {
    call_json(&Request::get(&format!("/api/v1/partitions/{name}")), 200)
}

fn state_of(p: &Value) -> &str {
    p.get("state").and_then(Value::as_str).unwrap_or("?")
}

fn crash_reason(p: &Value) -> &str {
    p.pointer("/last_crash/reason")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Polls `name` until `done` holds for its JSON (or the deadline).
fn poll_partition(
    name: &str,
    deadline: Instant,
    what: &str,
    done: impl Fn(&Value) -> bool,
) -> Result<Value, String> {
    loop {
        let p = partition_json(name)?;
        if done(&p) {
            return Ok(p);
        }
        if Instant::now() >= deadline {
            return Err(format!("{name} never became {what}: {p}"));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Seconds between two console lines (QEMU's start is the origin of both;
/// under TCG the guest's counter follows the host clock, so this is QEMU
/// time as the guests see it).
fn secs_between(from: &Line, to: &Line) -> f64 {
    to.at.saturating_sub(from.at).as_secs_f64()
}

/// The lifecycle test on one boot of vm-configs/qemu-virt/test-lifecycle.toml:
/// a vCPU hung with interrupts masked (beta) is `crashed` "vCPU 0 hung"
/// within its watchdog_s and stays down (`never`); a Linux that panics
/// (alpha, `echo c > /proc/sysrq-trigger` through the REST console input)
/// is `crashed` within its watchdog_s and, `on-crash`, runs again with
/// boot_count + 1 and restarts 1; the power button (gamma, Debian's generic
/// kernel with gpio-keys) is `shutting_down`, the guest's own shutdown
/// messages reach its console and its SYSTEM_OFF ends in `stopped` (not
/// by force). Every state has an RFC 3339 `state_since`.
pub fn lifecycle(stack: &mut Stack) -> Outcome {
    let deadline = Instant::now() + Duration::from_secs(300);
    let token = stack.token(deadline)?;
    stack.first_answer()?;
    let mut notes = Vec::new();

    // beta: the hung vCPU.
    let hang = stack.expect("[beta] PROBE hang:", 0, deadline)?;
    let hung = stack.expect("partition beta: crashed: vCPU 0 hung", hang.index, deadline)?;
    let beta = partition_json("beta")?;
    if state_of(&beta) != "crashed" || !crash_reason(&beta).starts_with("vCPU 0 hung") {
        return Err(format!("beta should be crashed, vCPU 0 hung: {beta}"));
    }
    let since = beta
        .get("state_since")
        .and_then(Value::as_str)
        .unwrap_or("");
    if parse_rfc3339_utc(since).is_none() {
        return Err(format!("beta's state_since is not RFC 3339: {beta}"));
    }
    let hang_s = secs_between(&hang, &hung);
    if hang_s > 3.0 + 1.5 {
        return Err(format!(
            "beta hung at {:.1} s, crashed only {hang_s:.1} s later (watchdog_s = 3)",
            hang.at.as_secs_f64()
        ));
    }
    std::thread::sleep(Duration::from_secs(3));
    let beta = partition_json("beta")?;
    if state_of(&beta) != "crashed" || beta.get("restarts").and_then(Value::as_u64) != Some(0) {
        return Err(format!(
            "beta (restart = never) did not stay crashed: {beta}"
        ));
    }
    notes.push(format!(
        "beta (IRQs masked, timer pending): crashed \"{}\" {hang_s:.1} s after it hung; stays crashed",
        crash_reason(&beta)
    ));

    // alpha: a kernel panic, caught by its watchdog, restarted on-crash.
    let wd = stack.expect("[alpha] PINFOLD-GUEST-WATCHDOG name=alpha", 0, deadline)?;
    if !wd.text.contains("Initialized") {
        return Err(format!(
            "sbsa_gwdt did not take alpha's watchdog: `{}`",
            wd.text
        ));
    }
    stack.expect("[alpha] PINFOLD-GUEST-ALIVE name=alpha n=2", 0, deadline)?;
    let before = partition_json("alpha")?;
    let boots = before
        .get("boot_count")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let from = stack.qemu.lines().len();
    let body = serde_json::json!({ "data": "echo c > /proc/sysrq-trigger\n" }).to_string();
    call_json(
        &Request::post(
            "/api/v1/partitions/alpha/console",
            Some(&token),
            Some(&body),
        ),
        202,
    )?;
    let panic = stack.expect("sysrq: Trigger a crash", from, deadline)?;
    let crashed = stack.expect("partition alpha: crashed: ", from, deadline)?;
    let crash_s = secs_between(&panic, &crashed);
    if crash_s > 4.0 + 1.5 {
        return Err(format!(
            "alpha panicked at {:.1} s, crashed only {crash_s:.1} s later (watchdog_s = 4): `{}`",
            panic.at.as_secs_f64(),
            crashed.text
        ));
    }
    let again = poll_partition("alpha", deadline, "running again", |p| {
        state_of(p) == "running" && p.get("boot_count").and_then(Value::as_u64) == Some(boots + 1)
    })?;
    if again.get("restarts").and_then(Value::as_u64) != Some(1) {
        return Err(format!("alpha's restart is not counted: {again}"));
    }
    let reason = crash_reason(&again).to_string();
    if reason != "watchdog" && !reason.starts_with("vCPU 0 hung") {
        return Err(format!("alpha's last_crash: {again}"));
    }
    let up = stack.expect(
        "[alpha] PINFOLD-GUEST-UP name=alpha",
        crashed.index,
        deadline,
    )?;
    notes.push(format!(
        "alpha (kernel panic via console input): crashed \"{reason}\" {crash_s:.1} s after the panic; \
         on-crash: up again {:.1} s after the crash, boot_count {boots} -> {}, restarts 1",
        secs_between(&crashed, &up),
        boots + 1
    ));

    // gamma: the power button, on Debian's generic kernel with gpio-keys.
    let gamma_up = stack.expect("[gamma] PINFOLD-GUEST-UP name=gamma", 0, deadline)?;
    let alpha_up = stack.expect("[alpha] PINFOLD-GUEST-UP name=alpha", 0, deadline)?;
    notes.push(format!(
        "first boot to the UP line: alpha (cloud kernel) {:.1} s, gamma (generic kernel) {:.1} s after QEMU start",
        alpha_up.at.as_secs_f64(),
        gamma_up.at.as_secs_f64()
    ));
    stack.expect("[gamma] PINFOLD-GUEST-ALIVE name=gamma n=1", 0, deadline)?;
    let from = stack.qemu.lines().len();
    let reply = call_json(
        &Request::post("/api/v1/partitions/gamma/shutdown", Some(&token), None),
        202,
    )?;
    if state_of(&reply) != "shutting_down" {
        return Err(format!("the shutdown's 202 body: {reply}"));
    }
    let pressed = stack.expect("partition gamma: power button pressed", from, deadline)?;
    let going = stack.expect("[gamma] The system is going down NOW!", from, deadline)?;
    stack.expect("reboot: Power down", going.index, deadline)?;
    let off = stack.expect(
        "partition gamma: powered off by the guest",
        going.index,
        deadline,
    )?;
    let gamma = poll_partition("gamma", deadline, "stopped", |p| state_of(p) == "stopped")?;
    if stack
        .qemu
        .lines()
        .iter()
        .skip(from)
        .any(|l| l.text.contains("partition gamma: shutdown timeout"))
    {
        return Err(format!(
            "gamma was stopped by force, not by itself: {gamma}"
        ));
    }
    notes.push(format!(
        "gamma (generic kernel, gpio-keys): power button -> \"The system is going down NOW!\" {:.1} s, \
         \"reboot: Power down\" and stopped {:.1} s after the press",
        secs_between(&pressed, &going),
        secs_between(&pressed, &off)
    ));
    Ok(notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIST: &str = r#"{"partitions":[
        {"name":"mgmt","state":"running","cpus":[0],"uptime_ms":1,"boot_count":1,"management":true},
        {"name":"alpha","state":"running","cpus":[1],"uptime_ms":1,"boot_count":1,"management":false},
        {"name":"beta","state":"stopped","cpus":[2,3],"uptime_ms":0,"boot_count":1,"management":false}]}"#;

    fn list() -> Value {
        serde_json::from_str(LIST).expect("json")
    }

    #[test]
    fn imf_fixdate_parses_and_checks_every_field() {
        assert_eq!(
            parse_imf_fixdate("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(784_111_777)
        );
        assert_eq!(
            parse_imf_fixdate("Tue, 01 Dec 2026 13:45:00 GMT"),
            Some(1_796_132_700)
        );
        for bad in [
            "Thu, 01 Jan 1970 00:00:00 UTC",
            "Mon, 06 Nov 1994 08:49:37 GMT",
            "Sun, 6 Nov 1994 08:49:37 GMT",
            "Sun, 06 Nov 1994 08:49 GMT",
            "Sun, 31 Nov 1994 08:49:37 GMT",
            "Sunday, 06-Nov-94 08:49:37 GMT",
            "",
        ] {
            assert_eq!(parse_imf_fixdate(bad), None, "{bad}");
        }
    }

    #[test]
    fn rfc3339_utc_parses() {
        assert_eq!(
            parse_rfc3339_utc("2026-12-01T13:45:00Z"),
            Some(1_796_132_700)
        );
        assert_eq!(parse_rfc3339_utc("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339_utc("2026-12-01T13:45:00+01:00"), None);
        assert_eq!(parse_rfc3339_utc("2026-02-29T00:00:00Z"), None);
    }

    #[test]
    fn listed_partition_with_its_cpus_passes() {
        assert_eq!(check_listed(&list(), "alpha", &[1]), Ok(()));
    }

    #[test]
    fn listed_partition_on_other_cpus_fails() {
        assert!(check_listed(&list(), "alpha", &[2]).is_err());
    }

    #[test]
    fn stopped_or_missing_partition_fails() {
        assert!(check_listed(&list(), "beta", &[2, 3]).is_err());
        assert!(check_listed(&list(), "gamma", &[4]).is_err());
    }

    #[test]
    fn error_reply_needs_status_code_and_detail() {
        let reply = |status, body: &str| Reply {
            status,
            body: body.into(),
        };
        let good = r#"{"error":"unauthorized","detail":"no token"}"#;

        assert_eq!(check_error(&reply(401, good), 401, "unauthorized"), Ok(()));
        assert!(check_error(&reply(403, good), 401, "unauthorized").is_err());
        assert!(check_error(&reply(401, good), 401, "not_found").is_err());
        assert!(check_error(
            &reply(401, r#"{"error":"unauthorized"}"#),
            401,
            "unauthorized"
        )
        .is_err());
        assert!(check_error(&reply(401, "unauthorized"), 401, "unauthorized").is_err());
    }

    #[test]
    fn sample_sums_the_vcpus_counters() {
        let detail: Value = serde_json::from_str(
            r#"{"state":"running","uptime_ms":900,"boot_count":2,"vcpus":[
                {"exits":{"irq":10},"injected":7},{"exits":{"irq":5},"injected":3}]}"#,
        )
        .expect("json");

        assert_eq!(
            sample_of(&detail),
            Ok(Sample {
                running: true,
                uptime_ms: 900,
                boot_count: 2,
                injected: 10,
                irq_exits: 15
            })
        );
    }

    #[test]
    fn sample_without_vcpus_is_an_error() {
        let detail: Value =
            serde_json::from_str(r#"{"state":"running","uptime_ms":1,"boot_count":1,"vcpus":[]}"#)
                .expect("json");

        assert!(sample_of(&detail).is_err());
    }

    #[test]
    fn complete_line_waits_for_the_line_end() {
        let text = "boot\r\nPINFOLD-GUEST-UP name=beta cpus=2 timer_irqs=5\r\n# ";

        assert_eq!(
            complete_line_with(text, "PINFOLD-GUEST-UP name=beta"),
            Some("PINFOLD-GUEST-UP name=beta cpus=2 timer_irqs=5")
        );
        assert_eq!(
            complete_line_with(
                "x\nPINFOLD-GUEST-UP name=beta cpus=2 tim",
                "PINFOLD-GUEST-UP"
            ),
            None
        );
    }

    #[test]
    fn token_is_the_hex_word_after_the_label() {
        assert_eq!(
            parse_token("pinfold: management token: 62553d0b9dfd30fb"),
            Some("62553d0b9dfd30fb".into())
        );
        assert_eq!(parse_token("pinfold: management token: <none>"), None);
        assert_eq!(parse_token("pinfold: ready"), None);
    }

    #[test]
    fn hvctl_row_needs_the_name_first_and_running() {
        let table =
            "NAME   STATE    CPUS\nalpha  running  1\nbeta   stopped  2,3\nmgmt   running  0\n";

        assert_eq!(hvctl_row(table, "alpha"), Some("alpha  running  1"));
        assert_eq!(hvctl_row(table, "beta"), None);
        assert_eq!(hvctl_row(table, "running"), None);
    }

    #[test]
    fn browser_summary_reads_the_last_count_line() {
        let output = "ok   - a (3 ms)\nFAIL - b: no\n8 passed, 1 failed\n";

        assert_eq!(browser_summary(output), Some((8, 1)));
        assert_eq!(browser_summary("crashed\n"), None);
    }

    #[test]
    fn browser_summary_reads_the_contract_checks_line_with_skips() {
        let output = "ok   - GET /api/v1/host\nskip - GET /api/v1/resources: 404\n12 passed, 0 failed, 9 skipped\n";

        assert_eq!(browser_summary(output), Some((12, 0)));
    }
}
