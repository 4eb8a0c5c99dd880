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

/// The SHA-256 of a file, as lowercase hex (Debian's `sha256sum`).
pub fn sha256_file(path: &std::path::Path) -> Result<String, String> {
    let out = stdout_of(Command::new("sha256sum").arg(path)).map_err(|e| e.to_string())?;
    out.split_whitespace()
        .next()
        .map(str::to_owned)
        .ok_or_else(|| format!("sha256sum printed nothing for {}", path.display()))
}

/// Has cargo download one crate from crates.io through the ordinary
/// registry client (a throwaway manifest in `scratch` that depends on
/// `dependency`, then `cargo fetch`), checks the `.crate` file against
/// `sha256` (the `cksum` of the crates.io index) and copies it to `to`.
/// `name_version` is the file's stem, e.g. `hermit-kernel-0.11.0`.
pub fn registry_crate(
    scratch: &std::path::Path,
    dependency: &str,
    name_version: &str,
    sha256: &str,
    to: &std::path::Path,
) -> Result<(), String> {
    use std::path::PathBuf;
    let at = |e: std::io::Error| format!("{}: {e}", scratch.display());
    std::fs::create_dir_all(scratch.join("src")).map_err(at)?;
    let manifest = format!(
        "[package]\nname = \"pinfold-fetch\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n[dependencies]\n{dependency}\n\n[workspace]\n"
    );
    std::fs::write(scratch.join("Cargo.toml"), manifest).map_err(at)?;
    std::fs::write(scratch.join("src/lib.rs"), "").map_err(at)?;
    run(cargo()
        .current_dir(scratch)
        .args(["fetch", "--manifest-path"])
        .arg(scratch.join("Cargo.toml")))
    .map_err(|e| e.to_string())?;
    let home = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .ok_or("neither CARGO_HOME nor HOME is set")?;
    let cache = home.join("registry/cache");
    let file = format!("{name_version}.crate");
    let fetched = std::fs::read_dir(&cache)
        .map_err(|e| format!("{}: {e}", cache.display()))?
        .flatten()
        .map(|index| index.path().join(&file))
        .find(|path| path.is_file())
        .ok_or_else(|| format!("cargo fetch left no {file} under {}", cache.display()))?;
    let digest = sha256_file(&fetched)?;
    if digest != sha256 {
        return Err(format!(
            "{}: SHA-256 {digest}, expected {sha256}",
            fetched.display()
        ));
    }
    std::fs::copy(&fetched, to).map_err(|e| format!("{}: {e}", to.display()))?;
    Ok(())
}
