//! hvctl: list, inspect, start, stop and restart Pinfold partitions, use their consoles (interactive, history), read the event log and export/import the host's configuration through the manager's REST API.
//!
//! Output into a closed pipe (`hvctl events | head -1`) ends hvctl quietly
//! with status 0: Rust ignores SIGPIPE, so a write fails with EPIPE, and
//! that error is caught where every command's output goes (`main`), not
//! left to `println!`'s panic. With `--json` an error is a JSON object on
//! stdout (`{"error", "detail"}`, plus `status` for an API refusal).

mod cli;
mod config;
mod format;
mod interactive;
mod runtime;

use std::io::{IsTerminal, Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use cli::{Cli, Command, Input, UsageError};
use hvctl::http::{self, Endpoint, HttpError, Reply};
use pinfold_manager_api::events::EventList;
use pinfold_manager_api::json::{
    Accepted, ConsoleChunk, FieldErrorBody, PartitionDetailJson, PartitionList, TransitionResult,
};
use pinfold_manager_api::CONSOLE_WRITE_MAX;

/// How often `console --follow` asks for more.
const FOLLOW_INTERVAL: Duration = Duration::from_millis(500);

/// Why a command failed.
#[derive(Debug)]
enum RunError {
    /// No HTTP exchange happened.
    Http(HttpError),
    /// The API refused: status, error code, its sentence and the field at
    /// fault (for field-level errors).
    Api {
        status: u16,
        code: String,
        detail: String,
        field: Option<String>,
    },
    /// A local file could not be read.
    File { path: String, why: String },
    /// The API answered 2xx with a body that is not the documented JSON.
    UnexpectedBody(String),
    /// Writing our own output failed (e.g. a closed pipe).
    Output(std::io::Error),
    /// Console input stopped before all of it was taken.
    Input {
        name: String,
        taken: usize,
        total: usize,
        why: Box<RunError>,
    },
    /// `--input -` read something that is not UTF-8 (or could not read).
    Stdin(String),
    /// The partition took none of a POST within the manager's wait.
    InputFull,
}

impl std::fmt::Display for RunError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RunError::Http(e) => write!(f, "{e}"),
            RunError::Api {
                status,
                code,
                detail,
                field: None,
            } => write!(f, "{status} {code}: {detail}"),
            RunError::Api {
                status,
                code,
                detail,
                field: Some(field),
            } => write!(f, "{status} {code} ({field}): {detail}"),
            RunError::File { path, why } => write!(f, "{path}: {why}"),
            RunError::UnexpectedBody(why) => write!(f, "unexpected reply from the API: {why}"),
            RunError::Output(e) => write!(f, "writing output: {e}"),
            RunError::Input {
                name,
                taken,
                total,
                why,
            } => write!(f, "{name} took {taken} of {total} bytes: {why}"),
            RunError::Stdin(why) => write!(f, "reading stdin: {why}"),
            RunError::InputFull => write!(
                f,
                "its console input stayed full (is the partition running and reading its console?)"
            ),
        }
    }
}

impl From<HttpError> for RunError {
    fn from(e: HttpError) -> Self {
        RunError::Http(e)
    }
}

impl From<std::io::Error> for RunError {
    fn from(e: std::io::Error) -> Self {
        RunError::Output(e)
    }
}

impl RunError {
    /// The `error` code of the `--json` error object.
    fn code(&self) -> &str {
        match self {
            RunError::Http(_) => "connection_failed",
            RunError::Api { code, .. } => code,
            RunError::UnexpectedBody(_) => "unexpected_reply",
            RunError::Output(_) => "output_failed",
            RunError::Input { .. } => "input_incomplete",
            RunError::File { .. } => "input_failed",
            RunError::Stdin(_) => "stdin_failed",
            RunError::InputFull => "input_full",
        }
    }

    /// The `--json` error object: `{error, detail, field}` (the API's own
    /// when it refused, with its status), plus how much console input was
    /// taken when it stopped part-way.
    fn to_json(&self) -> serde_json::Value {
        let mut v =
            serde_json::json!({ "error": self.code(), "detail": self.to_string(), "field": null });
        match self {
            RunError::Api {
                status,
                detail,
                field,
                ..
            } => {
                v["status"] = (*status).into();
                v["detail"] = detail.clone().into();
                v["field"] = field.clone().into();
            }
            RunError::Input { taken, total, .. } => {
                v["accepted"] = (*taken).into();
                v["remaining"] = (total - taken).into();
            }
            _ => {}
        }
        v
    }

    /// Output into a closed pipe: not an error worth a word.
    fn is_broken_pipe(&self) -> bool {
        matches!(self, RunError::Output(e) if e.kind() == std::io::ErrorKind::BrokenPipe)
    }
}

/// A line on stderr; a closed stderr is no reason to panic.
fn note(args: std::fmt::Arguments) {
    let _ = writeln!(std::io::stderr(), "{args}");
}

fn main() -> ExitCode {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let tty = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
    let pin = cli::take_pin(
        &mut args,
        std::env::var(hvctl::tls::FINGERPRINT_ENV).ok(),
        std::env::var(hvctl::tls::CACERT_ENV).ok(),
    );
    let cli = match pin.and_then(|pin| {
        hvctl::tls::set_pin(pin);
        cli::parse_with(&args, std::env::var(cli::TOKEN_ENV).ok(), tty)
    }) {
        Ok(cli) => cli,
        Err(UsageError(why)) => {
            if args.iter().any(|a| a == "--json") {
                let e = serde_json::json!({ "error": "usage", "detail": why });
                let _ = writeln!(std::io::stdout(), "{e}");
            } else {
                note(format_args!("hvctl: {why}\n\n{}", cli::USAGE));
            }
            return ExitCode::from(2);
        }
    };
    // Reads need a credential too: every GET carries the token.
    http::set_default_token(cli.token.clone());
    let mut stdout = std::io::stdout().lock();
    let result = match &cli.command {
        Command::Help => writeln!(stdout, "{}", cli::USAGE).map_err(RunError::Output),
        Command::Interactive { name } => interactive_console(&cli, name),
        _ => {
            let mut wait = || {
                std::thread::sleep(FOLLOW_INTERVAL);
                true
            };
            run(&cli, &mut std::io::stdin(), &mut stdout, &mut wait)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is_broken_pipe() => ExitCode::SUCCESS,
        Err(e) => {
            if cli.json {
                let _ = writeln!(stdout, "{}", e.to_json());
            } else {
                note(format_args!("hvctl: {e}"));
            }
            ExitCode::FAILURE
        }
    }
}

/// `console NAME` on a terminal (module `interactive`). Returns when the
/// escape key is typed (Ctrl-] q) or stdin ends; fails when input is
/// refused (no token, say).
fn interactive_console(cli: &Cli, name: &str) -> Result<(), RunError> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, Arc};
    let ep = Endpoint::parse(&cli.url)?;
    let base = format!("/api/v1/partitions/{}/console", encode_segment(name));
    // Start at the end of what is there (a cursor beyond the end reads
    // nothing and answers the end): the partition's next output on. The
    // largest offset the manager takes is i64::MAX.
    let first: ConsoleChunk = decode(&check(http::request(
        &ep,
        "GET",
        &format!("{base}?offset={}", i64::MAX),
        None,
        None,
    )?)?)?;
    let mut offset = first.next;
    note(format_args!(
        "hvctl: connected to {name}'s console; escape: Ctrl-] then q"
    ));
    let raw = interactive::RawTerminal::enter();
    let quit = Arc::new(AtomicBool::new(false));
    let (keys_tx, keys_rx) = mpsc::channel::<Vec<u8>>();
    {
        let quit = quit.clone();
        std::thread::spawn(move || interactive::read_keys(std::io::stdin(), keys_tx, quit));
    }
    // One sender, so input goes in the order typed.
    let (err_tx, err_rx) = mpsc::channel::<RunError>();
    let sender = {
        let (ep, token, name) = (ep.clone(), cli.token.clone(), name.to_string());
        std::thread::spawn(move || {
            while let Ok(mut bytes) = keys_rx.recv() {
                while let Ok(more) = keys_rx.try_recv() {
                    bytes.extend(more);
                }
                let text = String::from_utf8_lossy(&bytes).into_owned();
                if let Err(e) = send_input(&ep, token.as_deref(), &name, &text) {
                    let _ = err_tx.send(e);
                    return;
                }
            }
        })
    };
    let mut out = std::io::stdout().lock();
    let result = loop {
        if let Ok(e) = err_rx.try_recv() {
            break Err(e);
        }
        let chunk: ConsoleChunk =
            match http::request(&ep, "GET", &format!("{base}?offset={offset}"), None, None)
                .map_err(RunError::from)
                .and_then(check)
                .and_then(|r| decode(&r))
            {
                Ok(c) => c,
                Err(e) => break Err(e),
            };
        if let Err(e) = interactive::show(&mut out, chunk.data.as_bytes()) {
            break Err(RunError::Output(e));
        }
        offset = chunk.next;
        if quit.load(Ordering::Acquire) {
            break Ok(());
        }
        if chunk.data.is_empty() {
            std::thread::sleep(interactive::POLL);
        }
    };
    // Input typed before the escape still goes, then the terminal is back.
    if result.is_ok() {
        let _ = sender.join();
        if let Ok(e) = err_rx.try_recv() {
            drop(raw);
            return Err(e);
        }
    }
    drop(raw);
    note(format_args!(""));
    result
}

/// Percent-encodes a partition name for a path segment.
fn encode_segment(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The reply, or the API's error as a [`RunError`].
fn check(reply: Reply) -> Result<Reply, RunError> {
    if (200..300).contains(&reply.status) {
        return Ok(reply);
    }
    Err(api_error(reply.status, &reply.body))
}

/// The API's error body as a [`RunError`].
fn api_error(status: u16, body: &[u8]) -> RunError {
    match serde_json::from_slice::<FieldErrorBody>(body) {
        Ok(e) => RunError::Api {
            status,
            code: e.error,
            detail: e.detail,
            field: e.field,
        },
        Err(_) => RunError::Api {
            status,
            code: "http_error".into(),
            detail: String::from_utf8_lossy(body).trim().to_string(),
            field: None,
        },
    }
}

fn decode_full<T: serde::de::DeserializeOwned>(reply: &http::FullReply) -> Result<T, RunError> {
    serde_json::from_slice(&reply.body).map_err(|e| RunError::UnexpectedBody(e.to_string()))
}

fn decode<T: serde::de::DeserializeOwned>(reply: &Reply) -> Result<T, RunError> {
    serde_json::from_slice(&reply.body).map_err(|e| RunError::UnexpectedBody(e.to_string()))
}

/// Pieces of `data` of at most `max` bytes, each ending at a character
/// boundary.
fn pieces(data: &str, max: usize) -> impl Iterator<Item = &str> {
    let mut rest = data;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut end = rest.len().min(max);
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let (piece, tail) = rest.split_at(end);
        rest = tail;
        Some(piece)
    })
}

/// Sends all of `data` to `name`'s console input, in order: POSTs of at
/// most [`CONSOLE_WRITE_MAX`] bytes, each from where the last reply's
/// `accepted` stopped, until everything is taken. Fails when a POST fails
/// or takes nothing (the partition left its input queue full for the
/// manager's whole wait). Returns the bytes sent.
fn send_input(
    ep: &Endpoint,
    token: Option<&str>,
    name: &str,
    data: &str,
) -> Result<usize, RunError> {
    let path = format!("/api/v1/partitions/{}/console", encode_segment(name));
    let mut sent = 0;
    let fail = |sent, why| RunError::Input {
        name: name.to_string(),
        taken: sent,
        total: data.len(),
        why: Box::new(why),
    };
    while sent < data.len() {
        let piece = pieces(&data[sent..], CONSOLE_WRITE_MAX)
            .next()
            .unwrap_or_default();
        let body = serde_json::json!({ "data": piece }).to_string();
        let reply = http::request(ep, "POST", &path, token, Some(body.as_bytes()))
            .map_err(|e| fail(sent, RunError::Http(e)))
            .and_then(|r| check(r).map_err(|e| fail(sent, e)))?;
        let accepted: Accepted = decode(&reply).map_err(|e| fail(sent, e))?;
        let taken = (accepted.accepted as usize).min(piece.len());
        if taken == 0 {
            return Err(fail(sent, RunError::InputFull));
        }
        sent += taken;
        // The partition stopped in the middle of a character (docs/API.md):
        // the rest of it cannot go as JSON text, resume at the next one.
        while !data.is_char_boundary(sent) {
            sent += 1;
        }
    }
    Ok(sent)
}

/// Runs one command, writing to `out` (`--input -` reads `stdin`). `wait`
/// paces `console --follow` and returns false to stop following.
fn run(
    cli: &Cli,
    stdin: &mut dyn Read,
    out: &mut impl Write,
    wait: &mut dyn FnMut() -> bool,
) -> Result<(), RunError> {
    let ep = Endpoint::parse(&cli.url)?;
    let get = |path: &str| -> Result<Reply, RunError> {
        check(http::request(&ep, "GET", path, cli.token.as_deref(), None)?)
    };
    match &cli.command {
        Command::Help => writeln!(out, "{}", cli::USAGE)?,
        Command::Whoami => {
            let reply = get("/api/v1/auth/whoami")?;
            if cli.json {
                writeln!(out, "{}", String::from_utf8_lossy(&reply.body).trim_end())?;
            } else {
                let v: serde_json::Value = decode(&reply)?;
                writeln!(
                    out,
                    "{} ({})",
                    v["id"].as_str().unwrap_or("?"),
                    v["role"].as_str().unwrap_or("?")
                )?;
            }
        }
        Command::Credentials { action } => {
            let token = cli.token.as_deref();
            let reply = match action {
                cli::CredentialAction::List => get("/api/v1/auth/credentials")?,
                cli::CredentialAction::Create { role, name } => {
                    let body = serde_json::json!({"role": role, "name": name}).to_string();
                    check(http::request(
                        &ep,
                        "POST",
                        "/api/v1/auth/credentials",
                        token,
                        Some(body.as_bytes()),
                    )?)?
                }
                cli::CredentialAction::Rotate { id } => check(http::request(
                    &ep,
                    "POST",
                    &format!("/api/v1/auth/credentials/{}/rotate", encode_segment(id)),
                    token,
                    Some(b""),
                )?)?,
                cli::CredentialAction::Revoke { id } => check(http::request(
                    &ep,
                    "DELETE",
                    &format!("/api/v1/auth/credentials/{}", encode_segment(id)),
                    token,
                    None,
                )?)?,
            };
            if cli.json {
                writeln!(out, "{}", String::from_utf8_lossy(&reply.body).trim_end())?;
            } else {
                let v: serde_json::Value = decode(&reply)?;
                let line = |c: &serde_json::Value| {
                    format!(
                        "{}  {}  {}  {}",
                        c["id"].as_str().unwrap_or("?"),
                        c["role"].as_str().unwrap_or("?"),
                        c["name"].as_str().unwrap_or(""),
                        c["since"].as_str().unwrap_or("-")
                    )
                };
                match (action, v.as_array()) {
                    (cli::CredentialAction::List, Some(list)) => {
                        writeln!(out, "ID  ROLE  NAME  SINCE")?;
                        for c in list {
                            writeln!(out, "{}", line(c))?;
                        }
                    }
                    (cli::CredentialAction::Revoke { id }, _) => writeln!(out, "{id}: revoked")?,
                    _ => writeln!(
                        out,
                        "{}\ntoken: {} (shown this once)",
                        line(&v),
                        v["token"].as_str().unwrap_or("?")
                    )?,
                }
            }
        }
        Command::Resources
        | Command::Create { .. }
        | Command::Edit { .. }
        | Command::Delete { .. }
        | Command::Upload { .. }
        | Command::Images
        | Command::ImageDelete { .. }
        | Command::Fetch { .. } => {
            runtime::run(cli, &ep, out, &mut std::io::stderr())?;
        }
        Command::Export { .. } | Command::Import { .. } => config::run(cli, &ep, out)?,
        Command::Interactive { name } => {
            return Err(RunError::UnexpectedBody(format!(
                "console {name}: the interactive console needs a terminal"
            )))
        }
        Command::History { name, file } => {
            let reply = get(&format!(
                "/api/v1/partitions/{}/console/history",
                encode_segment(name)
            ))?;
            match file {
                None => out.write_all(&reply.body)?,
                Some(path) => {
                    std::fs::write(path, &reply.body).map_err(RunError::Output)?;
                    if cli.json {
                        writeln!(
                            out,
                            "{}",
                            serde_json::json!({ "file": path, "bytes": reply.body.len() })
                        )?;
                    } else {
                        writeln!(
                            out,
                            "{name}: {} bytes of console history written to {path}",
                            reply.body.len()
                        )?;
                    }
                }
            }
        }
        Command::Events { follow, since } => {
            let mut since = *since;
            loop {
                let reply = get(&format!("/api/v1/events?since={since}"))?;
                let list: EventList = decode(&reply)?;
                if cli.json && !*follow {
                    out.write_all(&reply.body)?;
                    writeln!(out)?;
                } else {
                    for e in &list.events {
                        if cli.json {
                            writeln!(out, "{}", serde_json::to_string(e).unwrap_or_default())?;
                        } else {
                            out.write_all(format::event_line(e).as_bytes())?;
                        }
                    }
                }
                out.flush()?;
                since = list.next;
                if !*follow || !wait() {
                    break;
                }
            }
        }
        Command::List => {
            let reply = get("/api/v1/partitions")?;
            let list: PartitionList = decode(&reply)?;
            if cli.json {
                out.write_all(&reply.body)?;
                writeln!(out)?;
            } else {
                out.write_all(format::partition_list(&list).as_bytes())?;
            }
        }
        Command::Show { name } => {
            let reply = get(&format!("/api/v1/partitions/{}", encode_segment(name)))?;
            let detail: PartitionDetailJson = decode(&reply)?;
            if cli.json {
                out.write_all(&reply.body)?;
                writeln!(out)?;
            } else {
                out.write_all(format::partition_detail(&detail).as_bytes())?;
            }
        }
        Command::Change { op, name } => {
            let path = format!(
                "/api/v1/partitions/{}/{}",
                encode_segment(name),
                op.as_str()
            );
            let reply = check(
                http::request(&ep, "POST", &path, cli.token.as_deref(), Some(b""))
                    .map_err(RunError::Http)?,
            )?;
            let result: TransitionResult = decode(&reply)?;
            if cli.json {
                out.write_all(&reply.body)?;
                writeln!(out)?;
            } else {
                writeln!(out, "{}: {}", result.name, result.state.as_str())?;
            }
        }
        Command::ConsoleInput { name, input } => {
            let data = match input {
                Input::Text(text) => text.clone(),
                Input::Stdin => {
                    let mut bytes = Vec::new();
                    stdin
                        .read_to_end(&mut bytes)
                        .map_err(|e| RunError::Stdin(e.to_string()))?;
                    String::from_utf8(bytes).map_err(|e| {
                        RunError::Stdin(format!(
                            "not UTF-8 (the API takes text): {}",
                            e.utf8_error()
                        ))
                    })?
                }
            };
            let sent = send_input(&ep, cli.token.as_deref(), name, &data)?;
            if cli.json {
                writeln!(
                    out,
                    "{}",
                    serde_json::json!({ "accepted": sent, "remaining": 0 })
                )?;
            } else {
                writeln!(out, "{name}: {sent} bytes sent")?;
            }
        }
        Command::Console { name, follow } => {
            let base = format!("/api/v1/partitions/{}/console", encode_segment(name));
            let mut offset = 0u64;
            loop {
                let reply = get(&format!("{base}?offset={offset}"))?;
                let chunk: ConsoleChunk = decode(&reply)?;
                if cli.json {
                    out.write_all(&reply.body)?;
                    writeln!(out)?;
                } else {
                    if chunk.dropped > 0 {
                        note(format_args!(
                            "hvctl: {} console bytes were lost before they could be read",
                            chunk.dropped
                        ));
                    }
                    out.write_all(chunk.data.as_bytes())?;
                }
                out.flush()?;
                let advanced = chunk.next != offset;
                offset = chunk.next;
                // Without --follow, drain what is there and stop.
                if (!advanced || chunk.data.is_empty()) && (!*follow || !wait()) {
                    break;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufRead, BufReader, Read};
    use std::net::TcpListener;
    use std::sync::mpsc;
    use std::thread;

    /// One request as the fake server saw it.
    #[derive(Debug)]
    struct Seen {
        request_line: String,
        headers: Vec<String>,
        body: Vec<u8>,
    }

    /// Serves the given (status, body) replies, one per connection, and
    /// reports each request it saw.
    fn fake_server(replies: Vec<(u16, &'static str)>) -> (String, mpsc::Receiver<Seen>) {
        fake_server_with_headers(replies.into_iter().map(|(s, b)| (s, "", b)).collect())
    }

    /// As [`fake_server`], each reply with extra header lines (`K: V\r\n`).
    fn fake_server_with_headers(
        replies: Vec<(u16, &'static str, &'static str)>,
    ) -> (String, mpsc::Receiver<Seen>) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            for (status, extra, body) in replies {
                let (stream, _) = listener.accept().expect("accept");
                let mut reader = BufReader::new(stream);
                let mut request_line = String::new();
                reader.read_line(&mut request_line).expect("request line");
                let mut headers = Vec::new();
                let mut length = 0;
                loop {
                    let mut line = String::new();
                    reader.read_line(&mut line).expect("header");
                    let line = line.trim_end().to_string();
                    if line.is_empty() {
                        break;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().expect("length");
                    }
                    headers.push(line);
                }
                let mut body_in = vec![0; length];
                reader.read_exact(&mut body_in).expect("body");
                let mut stream = reader.into_inner();
                let reply = format!(
                    "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                stream.write_all(reply.as_bytes()).expect("reply");
                let _ = tx.send(Seen {
                    request_line: request_line.trim_end().into(),
                    headers,
                    body: body_in,
                });
            }
        });
        (url, rx)
    }

    fn cli(url: &str, command: Command) -> Cli {
        Cli {
            url: url.into(),
            token: Some("tok".into()),
            json: false,
            command,
        }
    }

    fn run_to_string(cli: &Cli) -> (Result<(), RunError>, String) {
        let mut out = Vec::new();
        let result = run(cli, &mut std::io::empty(), &mut out, &mut || false);
        (result, String::from_utf8(out).expect("UTF-8"))
    }

    const LIST: &str = r#"{"partitions":[{"name":"alpha","state":"running","cpus":[1],"ram_bytes":268435456,"uptime_ms":5000,"boot_count":1,"management":false}]}"#;

    #[test]
    fn list_fetches_partitions_and_prints_a_table() {
        let (url, seen) = fake_server(vec![(200, LIST)]);

        let (result, out) = run_to_string(&cli(&url, Command::List));

        assert!(result.is_ok(), "{result:?}");
        assert_eq!(
            seen.recv().expect("request").request_line,
            "GET /api/v1/partitions HTTP/1.1"
        );
        assert_eq!(out, "NAME   STATE    CPUS  RAM      UPTIME  BOOTS  MGMT\nalpha  running  1     256 MiB  5.0s    1\n");
    }

    #[test]
    fn json_flag_prints_the_api_body_unchanged() {
        let (url, _seen) = fake_server(vec![(200, LIST)]);
        let mut c = cli(&url, Command::List);
        c.json = true;

        let (_, out) = run_to_string(&c);

        assert_eq!(out, format!("{LIST}\n"));
    }

    #[test]
    fn start_posts_with_bearer_token_and_prints_new_state() {
        let (url, seen) = fake_server(vec![(202, r#"{"name":"beta","state":"running"}"#)]);
        let c = cli(
            &url,
            Command::Change {
                op: cli::Op::Start,
                name: "beta".into(),
            },
        );

        let (result, out) = run_to_string(&c);

        let req = seen.recv().expect("request");
        assert!(result.is_ok(), "{result:?}");
        assert_eq!(
            req.request_line,
            "POST /api/v1/partitions/beta/start HTTP/1.1"
        );
        assert!(
            req.headers.iter().any(|h| h == "Authorization: Bearer tok"),
            "{:?}",
            req.headers
        );
        assert!(req.body.is_empty());
        assert_eq!(out, "beta: running\n");
    }

    fn input(text: &str) -> Command {
        Command::ConsoleInput {
            name: "beta".into(),
            input: Input::Text(text.into()),
        }
    }

    fn sent_data(seen: &Seen) -> String {
        let body: serde_json::Value = serde_json::from_slice(&seen.body).expect("JSON body");
        body["data"].as_str().expect("data").to_string()
    }

    #[test]
    fn console_input_sends_the_rest_after_a_partial_accept() {
        let (url, seen) = fake_server(vec![
            (202, r#"{"accepted":3,"remaining":3}"#),
            (202, r#"{"accepted":1,"remaining":2}"#),
            (202, r#"{"accepted":2,"remaining":0}"#),
        ]);

        let (result, out) = run_to_string(&cli(&url, input("hello\n")));

        assert!(result.is_ok(), "{result:?}");
        let first = seen.recv().expect("request");
        assert_eq!(
            first.request_line,
            "POST /api/v1/partitions/beta/console HTTP/1.1"
        );
        assert!(first
            .headers
            .iter()
            .any(|h| h == "Authorization: Bearer tok"));
        let rest: Vec<String> = seen.iter().take(2).map(|s| sent_data(&s)).collect();
        assert_eq!(
            (sent_data(&first), rest),
            ("hello\n".into(), vec!["lo\n".into(), "o\n".into()])
        );
        assert_eq!(out, "beta: 6 bytes sent\n");
    }

    #[test]
    fn console_input_from_stdin_goes_in_4_kib_pieces_cut_at_characters() {
        // 3-byte characters: 4096 is not a boundary, 4095 is.
        let text = "\u{20ac}".repeat(2000);
        let (url, seen) = fake_server(vec![
            (202, r#"{"accepted":4095,"remaining":0}"#),
            (202, r#"{"accepted":1905,"remaining":0}"#),
        ]);
        let c = Cli {
            command: Command::ConsoleInput {
                name: "beta".into(),
                input: Input::Stdin,
            },
            ..cli(&url, Command::List)
        };
        let mut out = Vec::new();

        let result = run(&c, &mut text.as_bytes(), &mut out, &mut || false);

        assert!(result.is_ok(), "{result:?}");
        let got: String = seen.iter().take(2).map(|s| sent_data(&s)).collect();
        assert_eq!(got, text);
        assert_eq!(out, b"beta: 6000 bytes sent\n");
    }

    #[test]
    fn console_input_the_partition_does_not_take_fails_saying_how_much_went() {
        let (url, _seen) = fake_server(vec![
            (202, r#"{"accepted":2,"remaining":4}"#),
            (202, r#"{"accepted":0,"remaining":4}"#),
        ]);

        let (result, _) = run_to_string(&cli(&url, input("hello\n")));

        let err = result.expect_err("refused");
        assert!(
            matches!(
                err,
                RunError::Input {
                    taken: 2,
                    total: 6,
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .starts_with("beta took 2 of 6 bytes: its console input stayed full"),
            "{err}"
        );
    }

    #[test]
    fn console_input_refused_by_the_api_fails_with_its_error() {
        let (url, _seen) = fake_server(vec![(
            401,
            r#"{"error":"unauthorized","detail":"wrong token"}"#,
        )]);

        let (result, _) = run_to_string(&cli(&url, input("x")));

        assert_eq!(
            result.expect_err("refused").to_string(),
            "beta took 0 of 1 bytes: 401 unauthorized: wrong token"
        );
    }

    #[test]
    fn console_input_from_stdin_that_is_not_utf8_is_refused_before_sending() {
        let c = Cli {
            command: Command::ConsoleInput {
                name: "beta".into(),
                input: Input::Stdin,
            },
            ..cli("http://127.0.0.1:1", Command::List)
        };

        let result = run(&c, &mut &b"\xff\xfe"[..], &mut Vec::new(), &mut || false);

        assert!(matches!(result, Err(RunError::Stdin(_))), "{result:?}");
    }

    #[test]
    fn api_error_is_reported_with_status_code_and_detail() {
        let (url, _seen) = fake_server(vec![(
            409,
            r#"{"error":"conflict","detail":"cannot stop mgmt: it is the management partition"}"#,
        )]);
        let c = cli(
            &url,
            Command::Change {
                op: cli::Op::Stop,
                name: "mgmt".into(),
            },
        );

        let (result, _) = run_to_string(&c);

        let err = result.expect_err("409");
        assert_eq!(
            err.to_string(),
            "409 conflict: cannot stop mgmt: it is the management partition"
        );
    }

    #[test]
    fn show_percent_encodes_the_name() {
        let (url, seen) = fake_server(vec![(
            404,
            r#"{"error":"not_found","detail":"no partition"}"#,
        )]);

        let _ = run_to_string(&cli(
            &url,
            Command::Show {
                name: "a b/c".into(),
            },
        ));

        assert_eq!(
            seen.recv().expect("request").request_line,
            "GET /api/v1/partitions/a%20b%2Fc HTTP/1.1"
        );
    }

    #[test]
    fn console_reads_from_each_next_until_nothing_is_left() {
        let (url, seen) = fake_server(vec![
            (200, r#"{"offset":0,"next":7,"dropped":0,"data":"login: "}"#),
            (200, r#"{"offset":7,"next":12,"dropped":0,"data":"root\n"}"#),
            (200, r#"{"offset":12,"next":12,"dropped":0,"data":""}"#),
        ]);
        let c = cli(
            &url,
            Command::Console {
                name: "alpha".into(),
                follow: false,
            },
        );

        let (result, out) = run_to_string(&c);

        assert!(result.is_ok(), "{result:?}");
        assert_eq!(out, "login: root\n");
        let lines: Vec<String> = seen.iter().take(3).map(|s| s.request_line).collect();
        assert_eq!(
            lines,
            vec![
                "GET /api/v1/partitions/alpha/console?offset=0 HTTP/1.1",
                "GET /api/v1/partitions/alpha/console?offset=7 HTTP/1.1",
                "GET /api/v1/partitions/alpha/console?offset=12 HTTP/1.1",
            ]
        );
    }

    #[test]
    fn console_follow_keeps_polling_until_told_to_stop() {
        let (url, seen) = fake_server(vec![
            (200, r#"{"offset":0,"next":0,"dropped":0,"data":""}"#),
            (200, r#"{"offset":0,"next":2,"dropped":0,"data":"$ "}"#),
            (200, r#"{"offset":2,"next":2,"dropped":0,"data":""}"#),
        ]);
        let c = cli(
            &url,
            Command::Console {
                name: "alpha".into(),
                follow: true,
            },
        );
        let mut waits = 0;
        let mut out = Vec::new();

        let result = run(&c, &mut std::io::empty(), &mut out, &mut || {
            waits += 1;
            waits < 2
        });

        assert!(result.is_ok(), "{result:?}");
        assert_eq!(out, b"$ ");
        assert_eq!(seen.iter().take(3).count(), 3);
    }

    #[test]
    fn refused_connection_is_an_http_error() {
        // Bind then drop a listener: its port is now (very likely) closed.
        let port = TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("addr")
            .port();

        let (result, _) = run_to_string(&cli(&format!("http://127.0.0.1:{port}"), Command::List));

        assert!(
            matches!(result, Err(RunError::Http(HttpError::Io(_)))),
            "{result:?}"
        );
    }

    #[test]
    fn success_status_with_wrong_body_is_unexpected() {
        let (url, _seen) = fake_server(vec![(200, r#"{"nope":1}"#)]);

        let (result, _) = run_to_string(&cli(&url, Command::List));

        assert!(
            matches!(result, Err(RunError::UnexpectedBody(_))),
            "{result:?}"
        );
    }

    #[test]
    fn segment_encoding_keeps_unreserved_characters() {
        assert_eq!(encode_segment("web-1.prod_x~"), "web-1.prod_x~");
        assert_eq!(encode_segment("é"), "%C3%A9");
    }

    const IMAGE: &str = r#"{"id":"4","name":"vmlinuz","kind":"kernel","size":6,"received":6,"state":"ready","error":null,"sha256":null,"used_by":[],"boot":false}"#;
    const DETAIL: &str = r#"{"name":"gamma","state":"stopped","cpus":[3],"ram_bytes":268435456,"uptime_ms":0,"boot_count":0,"management":false,"faults":0,"vcpus":[]}"#;

    #[test]
    fn create_with_a_kernel_file_uploads_it_first_and_names_its_id() {
        let dir = std::env::temp_dir().join(format!("hvctl-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let file = dir.join("vmlinuz");
        std::fs::write(&file, b"kernel").expect("write");
        let (url, seen) = fake_server(vec![(201, IMAGE), (201, DETAIL)]);
        let c = cli(
            &url,
            Command::Create {
                name: "gamma".into(),
                spec: cli::PartitionSpec {
                    cpus: Some(vec![3]),
                    memory_mib: Some(256),
                    kernel: Some(cli::ImageArg::File(file.display().to_string())),
                    bootargs: Some("quiet".into()),
                    autostart: Some(true),
                    pci: Some(vec!["0000:00:03.0".into()]),
                    ..Default::default()
                },
            },
        );
        let mut out = Vec::new();
        let mut err = Vec::new();

        let ep = Endpoint::parse(&url).expect("url");
        let result = runtime::run(&c, &ep, &mut out, &mut err);

        assert!(result.is_ok(), "{result:?}");
        let upload = seen.recv().expect("upload");
        assert_eq!(
            upload.request_line,
            "POST /api/v1/images?kind=kernel&name=vmlinuz HTTP/1.1"
        );
        assert!(upload
            .headers
            .iter()
            .any(|h| h == "Content-Type: application/octet-stream"));
        assert_eq!(upload.body, b"kernel");
        let create = seen.recv().expect("create");
        assert_eq!(create.request_line, "POST /api/v1/partitions HTTP/1.1");
        let body: serde_json::Value = serde_json::from_slice(&create.body).expect("JSON");
        assert_eq!(
            body,
            serde_json::json!({"name":"gamma","cpus":[3],"memory_mib":256,"kernel":"4",
                               "bootargs":"quiet","autostart":true,"pci":["0000:00:03.0"]})
        );
        assert_eq!(
            String::from_utf8(out).expect("UTF-8"),
            "gamma: created (stopped)\n"
        );
        let progress = String::from_utf8(err).expect("UTF-8");
        assert!(
            progress.contains("\rvmlinuz: 6/6 bytes (100%)"),
            "{progress:?}"
        );
    }

    #[test]
    fn edit_sends_the_etag_it_read_as_if_match() {
        let (url, seen) = fake_server_with_headers(vec![
            (200, "ETag: \"abc123\"\r\n", DETAIL),
            (200, "", DETAIL),
        ]);
        let c = cli(
            &url,
            Command::Edit {
                name: "gamma".into(),
                spec: cli::PartitionSpec {
                    memory_mib: Some(512),
                    ..Default::default()
                },
            },
        );

        let (result, out) = run_to_string(&c);

        assert!(result.is_ok(), "{result:?}");
        assert_eq!(
            seen.recv().expect("get").request_line,
            "GET /api/v1/partitions/gamma HTTP/1.1"
        );
        let patch = seen.recv().expect("patch");
        assert_eq!(
            patch.request_line,
            "PATCH /api/v1/partitions/gamma HTTP/1.1"
        );
        assert!(
            patch.headers.iter().any(|h| h == "If-Match: \"abc123\""),
            "{:?}",
            patch.headers
        );
        assert_eq!(patch.body, br#"{"memory_mib":512}"#);
        assert_eq!(out, "gamma: changed\n");
    }

    #[test]
    fn field_error_is_reported_with_its_field_and_as_json() {
        let (url, _seen) = fake_server(vec![(
            409,
            r#"{"error":"conflict","detail":"partition \"gamma\": cpus: CPU 1 is also used by partition \"alpha\"","field":"cpus"}"#,
        )]);
        let c = cli(
            &url,
            Command::Delete {
                name: "gamma".into(),
            },
        );

        let (result, _) = run_to_string(&c);

        let err = result.expect_err("409");
        assert_eq!(
            err.to_string(),
            r#"409 conflict (cpus): partition "gamma": cpus: CPU 1 is also used by partition "alpha""#
        );
        assert_eq!(
            err.to_json(),
            serde_json::json!({"error":"conflict","field":"cpus","status":409,
                "detail":"partition \"gamma\": cpus: CPU 1 is also used by partition \"alpha\""})
        );
    }

    #[test]
    fn connection_error_as_json_has_error_detail_and_null_field() {
        let port = TcpListener::bind("127.0.0.1:0")
            .expect("bind")
            .local_addr()
            .expect("addr")
            .port();

        let (result, _) = run_to_string(&cli(&format!("http://127.0.0.1:{port}"), Command::Images));

        let json = result.expect_err("refused").to_json();
        assert_eq!(json["error"], "connection_failed");
        assert_eq!(json["field"], serde_json::Value::Null);
        assert!(json["detail"].as_str().is_some_and(|d| !d.is_empty()));
    }

    #[test]
    fn delete_and_images_print_their_answers() {
        let (url, seen) = fake_server(vec![
            (204, ""),
            (
                200,
                r#"{"images":[{"id":"4","name":"vmlinuz","kind":"kernel","size":1048576,"received":524288,"state":"uploading","error":null,"sha256":null,"used_by":[],"boot":false}]}"#,
            ),
        ]);

        let (deleted, out1) = run_to_string(&cli(
            &url,
            Command::Delete {
                name: "gamma".into(),
            },
        ));
        let (listed, out2) = run_to_string(&cli(&url, Command::Images));

        assert!(deleted.is_ok() && listed.is_ok());
        assert_eq!(
            seen.recv().expect("delete").request_line,
            "DELETE /api/v1/partitions/gamma HTTP/1.1"
        );
        assert_eq!(out1, "gamma: deleted\n");
        assert_eq!(
            out2,
            "ID  NAME     KIND    SIZE   STATE                     USED BY  BOOT\n4   vmlinuz  kernel  1 MiB  uploading 524288/1048576  -\n"
        );
    }

    const EVENTS: &str = r#"{"events":[{"seq":1000,"time":"2026-12-01T13:45:00Z","kind":"state","partition":"beta","message":"stopped by the manager"},{"seq":1001,"time":null,"kind":"login_refused","partition":null,"message":"POST /x: wrong token"}],"next":1002}"#;

    #[test]
    fn events_print_one_line_each_and_follow_continues_at_next() {
        let (url, seen) = fake_server(vec![(200, EVENTS), (200, r#"{"events":[],"next":1002}"#)]);
        let c = cli(
            &url,
            Command::Events {
                follow: true,
                since: 0,
            },
        );
        let mut out = Vec::new();
        let mut rounds = 0;
        let result = run(&c, &mut std::io::empty(), &mut out, &mut || {
            rounds += 1;
            rounds < 2
        });

        assert!(result.is_ok(), "{result:?}");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "2026-12-01T13:45:00Z  1000  state  beta  stopped by the manager\n-  1001  login_refused  -  POST /x: wrong token\n"
        );
        assert_eq!(
            seen.recv().unwrap().request_line,
            "GET /api/v1/events?since=0 HTTP/1.1"
        );
        assert_eq!(
            seen.recv().unwrap().request_line,
            "GET /api/v1/events?since=1002 HTTP/1.1"
        );
    }

    #[test]
    fn events_follow_with_json_prints_json_lines() {
        let (url, _seen) = fake_server(vec![(200, EVENTS)]);
        let mut c = cli(
            &url,
            Command::Events {
                follow: true,
                since: 0,
            },
        );
        c.json = true;
        let mut out = Vec::new();
        run(&c, &mut std::io::empty(), &mut out, &mut || false).unwrap();
        let lines: Vec<serde_json::Value> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[1]["kind"], "login_refused");
    }

    #[test]
    fn history_goes_to_the_file_named() {
        let (url, seen) = fake_server(vec![(200, "=== pinfold: beta boot 1 at +3s ===\r\n")]);
        let path = std::env::temp_dir().join(format!("hvctl-history-{}.log", std::process::id()));
        let c = cli(
            &url,
            Command::History {
                name: "beta".into(),
                file: Some(path.display().to_string()),
            },
        );

        let (result, out) = run_to_string(&c);

        assert!(result.is_ok(), "{result:?}");
        assert_eq!(
            seen.recv().unwrap().request_line,
            "GET /api/v1/partitions/beta/console/history HTTP/1.1"
        );
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            "=== pinfold: beta boot 1 at +3s ===\r\n"
        );
        assert!(
            out.starts_with("beta: 37 bytes of console history written to "),
            "{out}"
        );
        let _ = std::fs::remove_file(path);
    }

    /// A stdout whose reader has gone.
    struct ClosedPipe;

    impl Write for ClosedPipe {
        fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Err(std::io::ErrorKind::BrokenPipe.into())
        }
    }

    #[test]
    fn output_into_a_closed_pipe_is_a_quiet_end_not_a_panic() {
        let (url, _seen) = fake_server(vec![(200, LIST)]);
        let result = run(
            &cli(&url, Command::List),
            &mut std::io::empty(),
            &mut ClosedPipe,
            &mut || false,
        );
        assert!(result.unwrap_err().is_broken_pipe());
    }

    #[test]
    fn image_delete_sends_delete_with_the_token() {
        let (url, seen) = fake_server(vec![(204, "")]);

        let (result, out) = run_to_string(&cli(&url, Command::ImageDelete { id: "4".into() }));

        assert!(result.is_ok(), "{result:?}");
        let req = seen.recv().expect("request");
        assert_eq!(req.request_line, "DELETE /api/v1/images/4 HTTP/1.1");
        assert!(req.headers.iter().any(|h| h == "Authorization: Bearer tok"));
        assert_eq!(out, "image 4: deleted\n");
    }

    const DIFF: &str = r#"{"created":["gamma"],"changed":["beta"],"deleted":["alpha"],"unchanged":["mgmt"],"dry_run":true}"#;

    #[test]
    fn export_prints_the_toml_or_writes_it_to_a_file() {
        let (url, seen) = fake_server_with_headers(vec![
            (200, "ETag: \"abc\"\r\n", "[board]\nname = \"this-host\"\n"),
            (200, "ETag: \"abc\"\r\n", "[board]\nname = \"this-host\"\n"),
        ]);
        let (result, out) = run_to_string(&cli(&url, Command::Export { file: None }));
        assert!(result.is_ok(), "{result:?}");
        assert_eq!(out, "[board]\nname = \"this-host\"\n");
        assert_eq!(
            seen.recv().expect("get").request_line,
            "GET /api/v1/config HTTP/1.1"
        );
        let path = std::env::temp_dir().join(format!("hvctl-export-{}.toml", std::process::id()));
        let mut c = cli(
            &url,
            Command::Export {
                file: Some(path.display().to_string()),
            },
        );
        c.json = true;
        let (result, out) = run_to_string(&c);
        assert!(result.is_ok(), "{result:?}");
        let written = std::fs::read_to_string(&path).expect("file");
        let _ = std::fs::remove_file(&path);
        assert_eq!(written, "[board]\nname = \"this-host\"\n");
        let json: serde_json::Value = serde_json::from_str(&out).expect("JSON");
        assert_eq!(json["etag"], "\"abc\"");
        assert_eq!(json["bytes"], 27);
    }

    #[test]
    fn import_puts_the_toml_with_if_match_and_dry_run_and_prints_the_diff() {
        let (url, seen) = fake_server_with_headers(vec![(200, "ETag: \"new\"\r\n", DIFF)]);
        let path = std::env::temp_dir().join(format!("hvctl-import-{}.toml", std::process::id()));
        std::fs::write(&path, "[board]\n").expect("write");
        let (result, out) = run_to_string(&cli(
            &url,
            Command::Import {
                file: path.display().to_string(),
                dry_run: true,
                if_match: Some("\"old\"".into()),
            },
        ));
        let _ = std::fs::remove_file(&path);
        assert!(result.is_ok(), "{result:?}");
        let req = seen.recv().expect("put");
        assert_eq!(req.request_line, "PUT /api/v1/config?dry_run=1 HTTP/1.1");
        assert!(
            req.headers.iter().any(|h| h == "If-Match: \"old\""),
            "{:?}",
            req.headers
        );
        assert!(req.headers.iter().any(|h| h == "Authorization: Bearer tok"));
        assert!(
            req.headers
                .iter()
                .any(|h| h == "Content-Type: application/toml"),
            "{:?}",
            req.headers
        );
        assert_eq!(req.body, b"[board]\n");
        assert_eq!(
            out,
            "dry run: nothing applied\ndeleted: alpha\nchanged: beta\ncreated: gamma\nunchanged: mgmt\nETag: \"new\"\n"
        );
    }

    #[test]
    fn import_refused_is_the_apis_error_and_a_missing_file_is_input_failed() {
        let body = r#"{"error":"conflict","detail":"partition \"gamma\": cpus: CPU 2 is also used by partition \"beta\"","field":"cpus"}"#;
        let (url, _seen) = fake_server(vec![(409, body)]);
        let path =
            std::env::temp_dir().join(format!("hvctl-import-bad-{}.toml", std::process::id()));
        std::fs::write(&path, "x").expect("write");
        let (result, _) = run_to_string(&cli(
            &url,
            Command::Import {
                file: path.display().to_string(),
                dry_run: false,
                if_match: None,
            },
        ));
        let _ = std::fs::remove_file(&path);
        let err = result.expect_err("409");
        assert_eq!(err.to_json()["field"], "cpus");
        assert_eq!(err.to_json()["status"], 409);
        let (result, _) = run_to_string(&cli(
            &url,
            Command::Import {
                file: "/nonexistent/x.toml".into(),
                dry_run: false,
                if_match: None,
            },
        ));
        assert_eq!(
            result.expect_err("no file").to_json()["error"],
            "input_failed"
        );
    }

    #[test]
    fn export_and_import_parse() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            cli::parse(&args(&["export", "-o", "c.toml"]), None)
                .unwrap()
                .command,
            Command::Export {
                file: Some("c.toml".into())
            }
        );
        assert_eq!(
            cli::parse(
                &args(&["import", "c.toml", "--dry-run", "--if-match", "\"e\""]),
                None
            )
            .unwrap()
            .command,
            Command::Import {
                file: "c.toml".into(),
                dry_run: true,
                if_match: Some("\"e\"".into())
            }
        );
        assert!(cli::parse(&args(&["import"]), None).is_err());
        assert!(cli::parse(&args(&["export", "x"]), None).is_err());
    }
}
