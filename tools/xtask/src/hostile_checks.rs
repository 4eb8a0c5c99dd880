//! The `hostile` boot case (vm-configs/qemu-virt/test-hostile.toml): the
//! test guest's hostile suite (tools/test-guest/src/hostile.rs) runs in
//! partition `hostile` while Linux `steady` prints a heartbeat with the
//! checksum of 16 MiB of its RAM, and the real manager serves the API. The
//! suite waits for a byte on its console, sent through the API once steady
//! printed its checksum and a first heartbeat.
//!
//! Passes when: the suite printed its summary with at least
//! [`MIN_CASES`] cases and none failed; the API reports `hostile` with
//! exactly the faults the suite expects, still running; `steady` kept
//! printing after the suite (two heartbeats, each `ram=ok`, none ever
//! `ram=CHANGED`) with 0 faults; the management partition still answers
//! (its NIC's SPIs were among those the suite tried to disable); the
//! hypervisor never panicked.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::api_checks::{self, Outcome, Stack};
use crate::harness::Line;
use crate::http::Request;

/// The suite's closing line.
const SUMMARY: &str = "[hostile] HOSTILE summary: ";
/// One line per case.
const CASE: &str = "[hostile] HOSTILE case ";
/// The issue asks for at least 30 attack cases.
pub const MIN_CASES: u32 = 30;
/// The neighbour's heartbeat.
const STEADY_ALIVE: &str = "[steady] PINFOLD-GUEST-ALIVE name=steady";

/// What the summary line says.
#[derive(Debug, PartialEq, Eq)]
pub struct Summary {
    pub passed: u32,
    pub failed: u32,
    pub faults: u64,
}

/// Parses `HOSTILE summary: N passed, M failed; expected hypervisor faults F`.
pub fn parse_summary(line: &str) -> Option<Summary> {
    let (_, rest) = line.split_once("HOSTILE summary: ")?;
    let (passed, rest) = rest.split_once(" passed, ")?;
    let (failed, rest) = rest.split_once(" failed; expected hypervisor faults ")?;
    let faults = rest.split_whitespace().next()?;
    Some(Summary {
        passed: passed.trim().parse().ok()?,
        failed: failed.trim().parse().ok()?,
        faults: faults.parse().ok()?,
    })
}

/// The failed cases' lines.
fn failed_cases(lines: &[Line]) -> Vec<&str> {
    lines
        .iter()
        .filter(|l| l.text.contains(CASE) && l.text.contains(": FAIL ("))
        .map(|l| l.text.as_str())
        .collect()
}

fn get(name: &str) -> Result<Value, String> {
    api_checks::call_json(&Request::get(&format!("/api/v1/partitions/{name}")), 200)
}

fn faults(p: &Value) -> Option<u64> {
    p.get("faults").and_then(Value::as_u64)
}

fn expect(stack: &Stack, needle: &str, from: usize, deadline: Instant) -> Result<Line, String> {
    stack
        .qemu
        .wait_for(&format!("`{needle}`"), from, deadline, |l| {
            l.contains(needle)
        })
        .map_err(|err| err.to_string())
}

/// The boot case.
pub fn hostile(stack: &mut Stack) -> Outcome {
    let deadline = Instant::now() + Duration::from_secs(900);
    let ramcheck = expect(
        stack,
        "[steady] PINFOLD-GUEST-RAMCHECK name=steady",
        0,
        deadline,
    )?;
    let before = expect(stack, STEADY_ALIVE, ramcheck.index, deadline)?;
    expect(stack, "[hostile] HOSTILE waiting", 0, deadline)?;
    // The neighbour is up and printing: start the suite.
    let token = stack.token(deadline)?;
    stack.first_answer()?;
    let body = serde_json::json!({ "data": "go" }).to_string();
    api_checks::call_json(
        &Request::post(
            "/api/v1/partitions/hostile/console",
            Some(&token),
            Some(&body),
        ),
        202,
    )?;
    let line = expect(stack, SUMMARY, 0, deadline)?;
    let summary =
        parse_summary(&line.text).ok_or_else(|| format!("unreadable summary `{}`", line.text))?;
    let lines = stack.qemu.lines();
    let cases = lines[..=line.index]
        .iter()
        .filter(|l| l.text.contains(CASE))
        .count() as u32;
    let failed = failed_cases(&lines[..=line.index]);
    if !failed.is_empty() || summary.failed > 0 {
        return Err(format!(
            "{} of the hostile suite's cases failed:\n  {}",
            summary.failed,
            failed.join("\n  ")
        ));
    }
    if summary.passed < MIN_CASES || cases != summary.passed {
        return Err(format!(
            "the suite ran {} cases ({cases} case lines), at least {MIN_CASES} wanted",
            summary.passed
        ));
    }
    let p = get("hostile")?;
    let counted = faults(&p).ok_or_else(|| format!("no faults in {p}"))?;
    if counted != summary.faults {
        return Err(format!(
            "the API counts {counted} faults for hostile, the suite expected {}",
            summary.faults
        ));
    }
    let state = p.get("state").and_then(Value::as_str).unwrap_or("?");
    if state != "running" {
        return Err(format!(
            "hostile is `{state}` after its suite, not running: {p}"
        ));
    }
    // The neighbour: two heartbeats after the suite, its RAM intact.
    let first = expect(stack, STEADY_ALIVE, line.index + 1, deadline)?;
    let second = expect(stack, STEADY_ALIVE, first.index + 1, deadline)?;
    for beat in [&first, &second] {
        if !beat.text.contains(" ram=ok") {
            return Err(format!("steady's RAM check: `{}`", beat.text));
        }
    }
    let lines = stack.qemu.lines();
    if let Some(bad) = lines
        .iter()
        .find(|l| l.text.contains(STEADY_ALIVE) && l.text.contains("ram=CHANGED"))
    {
        return Err(format!("steady's RAM changed: `{}`", bad.text));
    }
    if let Some(panic) = lines.iter().find(|l| l.text.contains("pinfold: PANIC")) {
        return Err(format!("the hypervisor panicked: `{}`", panic.text));
    }
    let steady = get("steady")?;
    if faults(&steady) != Some(0) {
        return Err(format!("steady has faults: {steady}"));
    }
    let alive = expect(stack, "[hostile] PROBE alive", line.index, deadline)?;
    let mgmt = get("mgmt")?;
    Ok(vec![
        format!(
            "{} cases passed, 0 failed in {:.1} s (summary at {:.1} s): `{}`",
            summary.passed,
            line.at.saturating_sub(stack_case_start(&lines)).as_secs_f64(),
            line.at.as_secs_f64(),
            line.text.trim()
        ),
        format!("API: hostile faults={counted} (= the suite's), state running; steady faults=0"),
        format!(
            "steady: `{}`; ALIVE at {:.1} s before the suite, {:.1} s and {:.1} s after it with ram=ok",
            ramcheck.text.trim(),
            before.at.as_secs_f64(),
            (first.at.saturating_sub(line.at)).as_secs_f64(),
            (second.at.saturating_sub(line.at)).as_secs_f64()
        ),
        format!(
            "hostile alive after its suite at {:.1} s; mgmt {}",
            alive.at.as_secs_f64(),
            mgmt.get("state").and_then(Value::as_str).unwrap_or("?")
        ),
    ])
}

/// When the suite started (its `HOSTILE start` line), for the duration.
fn stack_case_start(lines: &[Line]) -> Duration {
    lines
        .iter()
        .find(|l| l.text.contains("[hostile] HOSTILE start"))
        .map_or(Duration::ZERO, |l| l.at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_is_parsed() {
        let line =
            "[hostile] HOSTILE summary: 46 passed, 0 failed; expected hypervisor faults 1234 (7 s)";

        assert_eq!(
            parse_summary(line),
            Some(Summary {
                passed: 46,
                failed: 0,
                faults: 1234
            })
        );
        assert_eq!(parse_summary("[hostile] HOSTILE summary: x passed"), None);
    }

    #[test]
    fn failed_cases_are_listed() {
        let line = |text: &str| Line {
            index: 0,
            at: Duration::ZERO,
            text: text.into(),
        };
        let lines = [
            line("[hostile] HOSTILE case mem-ram-end: pass (hypervisor faults 8)"),
            line("[hostile] HOSTILE case smc: FAIL (SMC answered; hypervisor faults 0)"),
        ];

        assert_eq!(failed_cases(&lines).len(), 1);
    }
}
