//! Running external programs with errors that name the program.

use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use crate::error::XtaskError;

/// The program name and arguments of `cmd`, for messages.
pub fn describe(cmd: &Command) -> String {
    let mut text = cmd.get_program().to_string_lossy().into_owned();
    for arg in cmd.get_args() {
        text.push(' ');
        text.push_str(&arg.to_string_lossy());
    }
    text
}

/// Runs `cmd` with inherited stdio and fails unless it exits 0.
pub fn run(cmd: &mut Command) -> Result<(), XtaskError> {
    let program = describe(cmd);
    let status = cmd.status().map_err(|source| XtaskError::Spawn {
        program: program.clone(),
        source,
    })?;
    if status.success() {
        Ok(())
    } else {
        Err(XtaskError::Command {
            program,
            status: status.to_string(),
        })
    }
}

/// Runs `cmd`, captures its stdout, and fails unless it exits 0 (stderr is
/// passed through so the user sees why).
pub fn stdout_of(cmd: &mut Command) -> Result<String, XtaskError> {
    let program = describe(cmd);
    let Output { status, stdout, .. } = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|source| XtaskError::Spawn {
            program: program.clone(),
            source,
        })?;
    if status.success() {
        Ok(String::from_utf8_lossy(&stdout).into_owned())
    } else {
        Err(XtaskError::Command {
            program,
            status: status.to_string(),
        })
    }
}

/// The `cargo` that started us (so nested builds use the same toolchain).
pub fn cargo() -> Command {
    Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
}

/// Waits for `child` at most `limit` (polling every 200 ms): its status,
/// or None when the limit passed, the child then killed and reaped.
pub fn wait_within(child: &mut Child, limit: Duration) -> Result<Option<ExitStatus>, String> {
    let start = Instant::now();
    loop {
        if let Some(s) = child.try_wait().map_err(|e| e.to_string())? {
            return Ok(Some(s));
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
