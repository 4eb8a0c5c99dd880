//! hvctl's configuration-as-code commands: `export [-o FILE]` (the host as a plan TOML, `GET /api/v1/config`) and `import FILE [--dry-run] [--if-match ETAG]` (`PUT /api/v1/config`), printing the diff.

use std::io::Write;

use hvctl::http::{self, Endpoint, FullReply};
use pinfold_manager_api::json::ImportResult;

use crate::cli::{Cli, Command};
use crate::{api_error, decode_full, RunError};

/// Runs `export` or `import`.
pub fn run(cli: &Cli, ep: &Endpoint, out: &mut impl Write) -> Result<(), RunError> {
    match &cli.command {
        Command::Export { file } => {
            let reply = checked(http::request_full(
                ep,
                "GET",
                "/api/v1/config",
                None,
                &[],
                None,
            )?)?;
            let etag = reply.header("etag").unwrap_or_default().to_string();
            let text = String::from_utf8(reply.body.clone())
                .map_err(|_| RunError::UnexpectedBody("the configuration is not UTF-8".into()))?;
            match file {
                Some(path) => {
                    std::fs::write(path, &text).map_err(RunError::Output)?;
                    if cli.json {
                        writeln!(
                            out,
                            "{}",
                            serde_json::json!({"file": path, "bytes": text.len(), "etag": etag})
                        )?;
                    } else {
                        writeln!(
                            out,
                            "configuration written to {path} ({} bytes, ETag {etag})",
                            text.len()
                        )?;
                    }
                }
                None if cli.json => {
                    writeln!(out, "{}", serde_json::json!({"etag": etag, "config": text}))?
                }
                None => out.write_all(text.as_bytes())?,
            }
        }
        Command::Import {
            file,
            dry_run,
            if_match,
        } => {
            let text = std::fs::read(file).map_err(|e| RunError::File {
                path: file.clone(),
                why: e.to_string(),
            })?;
            let mut extra = Vec::new();
            if let Some(tag) = if_match {
                extra.push(("If-Match", tag.as_str()));
            }
            let path = if *dry_run {
                "/api/v1/config?dry_run=1"
            } else {
                "/api/v1/config"
            };
            let reply = checked(http::request_typed(
                ep,
                "PUT",
                path,
                cli.token.as_deref(),
                &extra,
                "application/toml",
                &text,
            )?)?;
            let diff: ImportResult = decode_full(&reply)?;
            if cli.json {
                out.write_all(&reply.body)?;
                writeln!(out)?;
            } else {
                out.write_all(diff_text(&diff, reply.header("etag")).as_bytes())?;
            }
        }
        _ => unreachable!("config::run runs export and import only"),
    }
    Ok(())
}

/// The diff as lines: `created: a, b` (only the non-empty lists), and a
/// first line saying whether it was applied.
pub fn diff_text(diff: &ImportResult, etag: Option<&str>) -> String {
    let mut out = String::new();
    out.push_str(if diff.dry_run {
        "dry run: nothing applied\n"
    } else if diff.created.is_empty() && diff.changed.is_empty() && diff.deleted.is_empty() {
        "nothing to change\n"
    } else {
        "applied\n"
    });
    for (what, names) in [
        ("deleted", &diff.deleted),
        ("changed", &diff.changed),
        ("created", &diff.created),
        ("unchanged", &diff.unchanged),
    ] {
        if !names.is_empty() {
            out.push_str(&format!("{what}: {}\n", names.join(", ")));
        }
    }
    if let Some(tag) = etag {
        out.push_str(&format!("ETag: {tag}\n"));
    }
    out
}

fn checked(reply: FullReply) -> Result<FullReply, RunError> {
    if (200..300).contains(&reply.status) {
        Ok(reply)
    } else {
        Err(api_error(reply.status, &reply.body))
    }
}
