//! hvctl: list, inspect, start, stop and restart Pinfold partitions and read their consoles through the manager's REST API.

mod cli;
mod format;
mod runtime;

use std::io::{Read, Write};
use std::process::ExitCode;
use std::time::Duration;

use cli::{Cli, Command, Input, UsageError};
use hvctl::http::{self, Endpoint, HttpError, Reply};
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

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cli = match cli::parse(&args, std::env::var(cli::TOKEN_ENV).ok()) {
        Ok(cli) => cli,
        Err(UsageError(why)) => {
            eprintln!("hvctl: {why}\n\n{}", cli::USAGE);
            return ExitCode::from(2);
        }
    };
    if cli.command == Command::Help {
        println!("{}", cli::USAGE);
        return ExitCode::SUCCESS;
    }
    let mut stdout = std::io::stdout().lock();
    let mut wait = || {
        std::thread::sleep(FOLLOW_INTERVAL);
        true
    };
    match run(&cli, &mut std::io::stdin(), &mut stdout, &mut wait) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if cli.json => {
            let _ = writeln!(stdout, "{}", e.to_json());
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("hvctl: {e}");
            ExitCode::FAILURE
        }
    }
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

impl RunError {
    /// The error as `--json` prints it: the API's `{error, detail, field}`
    /// when it refused, else hvctl's own code.
    fn to_json(&self) -> serde_json::Value {
        match self {
            RunError::Api {
                code,
                detail,
                field,
                ..
            } => serde_json::json!({"error": code, "detail": detail, "field": field}),
            RunError::Input { why, .. } => {
                let mut inner = why.to_json();
                inner["detail"] = serde_json::Value::String(self.to_string());
                inner
            }
            other => {
                let code = match other {
                    RunError::Http(_) => "connection_failed",
                    RunError::UnexpectedBody(_) => "unexpected_reply",
                    RunError::File { .. } | RunError::Stdin(_) => "input_failed",
                    _ => "hvctl_error",
                };
                serde_json::json!({"error": code, "detail": other.to_string(), "field": null})
            }
        }
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
        check(http::request(&ep, "GET", path, None, None)?)
    };
    match &cli.command {
        Command::Help => writeln!(out, "{}", cli::USAGE)?,
        Command::Resources
        | Command::Create { .. }
        | Command::Edit { .. }
        | Command::Delete { .. }
        | Command::Upload { .. }
        | Command::Images
        | Command::Fetch { .. } => {
            runtime::run(cli, &ep, out, &mut std::io::stderr())?;
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
                        eprintln!(
                            "hvctl: {} console bytes were lost before they could be read",
                            chunk.dropped
                        );
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
                               "bootargs":"quiet","autostart":true})
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
            serde_json::json!({"error":"conflict","field":"cpus",
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
}
