//! Running external programs with errors that name the program.

use std::process::{Command, Output, Stdio};

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
