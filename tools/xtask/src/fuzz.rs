//! `cargo xtask fuzz [TARGET] [--time S]` and the `fuzz` test case: the
//! cargo-fuzz targets of `fuzz/` (their own workspace, built with the
//! pinned nightly Hermit uses, [`crate::hermit::HERMIT_TOOLCHAIN`]).
//!
//! Every run first replays the committed corpus (`fuzz/corpus/TARGET`,
//! read-only: `-runs=0`), then fuzzes for the given time with new inputs
//! going to `target/fuzz-corpus/TARGET` (so a test run never rewrites the
//! tree; `cargo xtask fuzz` long runs merge what they found back into
//! the committed corpus with `-merge=1`, minimised). A crash fails the run
//! and leaves its input in `fuzz/artifacts/TARGET/`; every crash found is
//! fixed with a host test reproducing it (docs/SECURITY.md, Fuzzing).

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use crate::cmd;
use crate::error::XtaskError;
use crate::Workspace;

/// The targets, in the order they run.
pub const TARGETS: [&str; 13] = [
    "trap_decode",
    "vgic_dist",
    "vgic_redist",
    "pl011",
    "hypercall",
    "host_dtb",
    "acpi",
    "plan_toml",
    "plan_blob",
    "bundle_open",
    "vits",
    "http_request",
    "rest_router",
];

/// Seconds each target fuzzes in `cargo xtask test`.
pub const TEST_SECONDS: u64 = 15;
/// Seconds per target of `cargo xtask fuzz` without `--time`.
pub const DEFAULT_SECONDS: u64 = 300;

/// What one target's run showed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub execs: u64,
    pub execs_per_s: u64,
    pub corpus: u64,
    pub cov: u64,
}

/// Reads libFuzzer's last status line (`#N DONE cov: C ft: F corp: K/..b
/// ... exec/s: E ...`, or the last `#N ...` line).
pub fn parse_stats(stderr: &str) -> Option<Stats> {
    let line = stderr
        .lines()
        .rev()
        .find(|l| l.starts_with('#') && l.contains(" cov: "))?;
    let field = |name: &str| -> Option<u64> {
        let rest = line.split_once(name)?.1.trim_start();
        let number: String = rest.chars().take_while(char::is_ascii_digit).collect();
        number.parse().ok()
    };
    Some(Stats {
        execs: line[1..].split_whitespace().next()?.parse().ok()?,
        execs_per_s: field("exec/s:").unwrap_or(0),
        corpus: field("corp:")?,
        cov: field("cov:")?,
    })
}

fn cargo_fuzz(root: &Path) -> Command {
    let mut c = Command::new("cargo");
    c.current_dir(root.join("fuzz"))
        .arg(format!("+{}", crate::hermit::HERMIT_TOOLCHAIN))
        .arg("fuzz");
    c
}

/// Builds every target once (ASan, release with debug info).
pub fn build(root: &Path) -> Result<(), XtaskError> {
    cmd::run(cargo_fuzz(root).args(["build", "-O"]))
}

/// Replays `target`'s committed corpus, then fuzzes it for `seconds`; with
/// `merge`, what it found is minimised into the committed corpus.
pub fn run_target(
    root: &Path,
    target: &str,
    seconds: u64,
    merge: bool,
) -> Result<(Stats, Stats), String> {
    let committed = root.join("fuzz/corpus").join(target);
    let scratch = root.join("target/fuzz-corpus").join(target);
    for dir in [&committed, &scratch] {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let fuzz = |args: &[String]| -> Result<String, String> {
        let mut c = cargo_fuzz(root);
        c.args(["run", "-O", target]).args(args);
        let out = c
            .output()
            .map_err(|e| format!("cargo fuzz run {target}: {e}"))?;
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if !out.status.success() {
            let tail: Vec<&str> = stderr.lines().rev().take(30).collect();
            return Err(format!(
                "{target}: libFuzzer failed ({}); see fuzz/artifacts/{target}/:\n{}",
                out.status,
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            ));
        }
        Ok(stderr)
    };
    let replay = fuzz(&[
        committed.display().to_string(),
        "--".into(),
        "-runs=0".into(),
    ])?;
    let replayed = parse_stats(&replay).unwrap_or_default();
    let fuzzed = fuzz(&[
        scratch.display().to_string(),
        committed.display().to_string(),
        "--".into(),
        format!("-max_total_time={seconds}"),
        "-print_final_stats=1".into(),
    ])?;
    let stats = parse_stats(&fuzzed).unwrap_or_default();
    if merge {
        fuzz(&[
            committed.display().to_string(),
            scratch.display().to_string(),
            "--".into(),
            "-merge=1".into(),
        ])?;
    }
    Ok((replayed, stats))
}

/// `cargo xtask fuzz [TARGET] [--time S]`: long runs, merged into the
/// committed corpus.
pub fn command(
    ws: &Workspace,
    target: Option<&str>,
    seconds: Option<u64>,
) -> Result<(), XtaskError> {
    let targets: Vec<&str> = match target {
        Some(t) if TARGETS.contains(&t) => vec![t],
        Some(t) => {
            return Err(XtaskError::Usage(format!(
                "unknown fuzz target `{t}`; targets: {}",
                TARGETS.join(", ")
            )))
        }
        None => TARGETS.to_vec(),
    };
    build(&ws.root)?;
    for t in targets {
        let start = Instant::now();
        let (replayed, stats) = run_target(&ws.root, t, seconds.unwrap_or(DEFAULT_SECONDS), true)
            .map_err(XtaskError::Provision)?;
        println!(
            "xtask: fuzz {t}: committed corpus {} inputs replayed; {} execs ({} exec/s), corpus {}, cov {} in {:.0} s; no crash",
            replayed.corpus,
            stats.execs,
            stats.execs_per_s,
            stats.corpus,
            stats.cov,
            start.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// The `fuzz` test case: every target's corpus replayed, then fuzzed
/// [`TEST_SECONDS`] each.
pub fn test_case(ws: &Workspace) -> Result<Vec<String>, String> {
    build(&ws.root).map_err(|e| format!("cargo fuzz build: {e}"))?;
    let mut notes = Vec::new();
    for t in TARGETS {
        let (replayed, stats) = run_target(&ws.root, t, TEST_SECONDS, false)?;
        notes.push(format!(
            "{t}: {} committed inputs replayed, {} execs in {TEST_SECONDS} s ({} exec/s), corpus {}, cov {}",
            replayed.corpus, stats.execs, stats.execs_per_s, stats.corpus, stats.cov
        ));
    }
    Ok(notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn final_status_line_is_read() {
        let stderr = "INFO: seed\n#2\tINITED cov: 10 ft: 11 corp: 1/1b exec/s: 0 rss: 30Mb\n\
                      #123456\tDONE   cov: 812 ft: 2048 corp: 97/4120b lim: 4096 exec/s: 8230 rss: 60Mb\n\
                      Done 123456 runs in 15 second(s)\n";

        assert_eq!(
            parse_stats(stderr),
            Some(Stats {
                execs: 123_456,
                execs_per_s: 8230,
                corpus: 97,
                cov: 812
            })
        );
    }

    #[test]
    fn every_target_has_a_bin_in_the_fuzz_manifest() {
        let manifest = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/Cargo.toml"),
        )
        .unwrap();
        for t in TARGETS {
            assert!(
                manifest.contains(&format!("name = \"{t}\"")),
                "{t} is not a [[bin]] of fuzz/Cargo.toml"
            );
        }
    }
}
