//! hvctl's command line: global options and one command, parsed without a dependency.

/// Where the API is when `--url` is not given.
pub const DEFAULT_URL: &str = "https://127.0.0.1:8080";
/// Environment variable read for the token when `--token` is not given.
pub const TOKEN_ENV: &str = "PINFOLD_TOKEN";

pub const USAGE: &str = "\
usage: hvctl [--url URL] [--token TOKEN] [--fingerprint SHA256 | --cacert FILE] [--json] COMMAND

commands:
  list                      partitions and their state
  show NAME                 one partition with its vCPUs
  start NAME                start a stopped partition
  stop NAME                 stop a running partition
  restart NAME              restart a running partition
  shutdown NAME             press its power button (graceful; stopped by
                            force after its shutdown_timeout_s)
  console NAME              interactive when stdin is a terminal: output as
                            it comes, typed keys to the partition's input;
                            escape: Ctrl-] then q (Ctrl-] twice sends one
                            Ctrl-]). Otherwise prints what is there.
  console NAME --follow     print the console and keep printing
  console NAME --input TEXT send TEXT to the console's input (- : stdin)
  resources                 CPUs, RAM ranges and devices: free or whose
  create NAME --cpus 1,2 --memory 256M --kernel ID|FILE [--initrd ID|FILE]
         [--bootargs TEXT] [--kernel-format linux|raw] [--autostart]
         [--restart never|on-crash|always] [--restart-limit N]
         [--watchdog SECONDS] [--shutdown-timeout SECONDS]
         [--pci 0000:00:02.0,...]
                            create a partition (a FILE is uploaded first;
                            --pci: its PCI functions, empty for none)
  edit NAME [the options of create] [--no-autostart] [--rename NEW]
                            change a stopped partition (If-Match its ETag)
  delete NAME               delete a stopped partition
  upload FILE --kind kernel|initrd|dtb [--name N] [--sha256 HEX]
                            upload an image, with a progress line on stderr
  images                    the images the hypervisor holds
  image-delete ID           delete an image no partition uses
  fetch URL --kind K [--name N] [--sha256 HEX]
                            have the manager download an image (http://)

  export [-o FILE]          the whole host as a plan TOML (to FILE with -o)
  import FILE [--dry-run] [--if-match ETAG]
                            apply a plan TOML as a diff (deletes, changes,
                            creates); --dry-run shows the diff only

  console NAME --history [-o FILE]
                            the whole retained history, across restarts
                            (to FILE with -o)
  whoami                    the id and role of the token given
  credentials               the credentials the manager accepts (operator)
  credentials create viewer|operator [NAME]
                            make one; its token is printed this once
  credentials rotate ID     a new token for ID (the old one stops working)
  credentials revoke ID     remove ID (not the last operator credential)
  events [--follow] [--since SEQ]
                            the event log (--follow: keep printing new ones;
                            with --json one JSON event per line)

options:
  --url URL      API base URL (default https://127.0.0.1:8080; http:// only
                 where the plan says api_tls = false)
  --fingerprint SHA256
                 the manager's certificate's SHA-256 (as its console prints
                 it; default: $PINFOLD_FINGERPRINT): https:// accepts that
                 certificate and no other
  --cacert FILE  pin the certificate in FILE (PEM or DER, e.g.
                 target/pinfold/tls/cert.pem; default: $PINFOLD_CACERT)
  --token TOKEN  bearer token, sent with every request: a viewer's for
                 reads, an operator's for changes (default: $PINFOLD_TOKEN)
  --json         print the API's JSON instead of tables; errors too, as
                 {\"error\", \"detail\", \"field\"} on stdout (exit 1)

An image argument of digits only is an image id; anything else is a file
(write ./3 for a file named 3). --memory takes M/MiB, G/GiB or K/KiB; a bare
number is MiB. Output into a closed pipe (hvctl ... | head -1) ends hvctl
quietly.";

/// A life-cycle command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Start,
    Stop,
    Restart,
    Shutdown,
}

impl Op {
    pub const fn as_str(self) -> &'static str {
        match self {
            Op::Start => "start",
            Op::Stop => "stop",
            Op::Restart => "restart",
            Op::Shutdown => "shutdown",
        }
    }
}

/// What to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    List,
    Show {
        name: String,
    },
    Change {
        op: Op,
        name: String,
    },
    Console {
        name: String,
        follow: bool,
    },
    /// The interactive console (stdin a terminal, no other console flag).
    Interactive {
        name: String,
    },
    /// The console history, to stdout or a file.
    History {
        name: String,
        file: Option<String>,
    },
    /// The event log.
    Events {
        follow: bool,
        since: u64,
    },
    /// Send input to a console, all of it, in order.
    ConsoleInput {
        name: String,
        input: Input,
    },
    /// `resources`.
    Resources,
    /// `create NAME ...`.
    Create {
        name: String,
        spec: PartitionSpec,
    },
    /// `edit NAME ...`.
    Edit {
        name: String,
        spec: PartitionSpec,
    },
    Delete {
        name: String,
    },
    Upload {
        file: String,
        image: ImageSpec,
    },
    Images,
    /// `image-delete ID`.
    ImageDelete {
        id: String,
    },
    Fetch {
        url: String,
        image: ImageSpec,
    },
    /// `whoami`: the credential's id and role.
    Whoami,
    /// `credentials [create ROLE [NAME] | rotate ID | revoke ID]`.
    Credentials {
        action: CredentialAction,
    },
    /// `export [-o FILE]`.
    Export {
        file: Option<String>,
    },
    /// `import FILE [--dry-run] [--if-match ETAG]`.
    Import {
        file: String,
        dry_run: bool,
        if_match: Option<String>,
    },
    Help,
}

/// What `credentials` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialAction {
    List,
    Create { role: String, name: String },
    Rotate { id: String },
    Revoke { id: String },
}

/// A kernel or initrd given to create/edit: an image id or a file to
/// upload first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageArg {
    Id(String),
    File(String),
}

impl ImageArg {
    fn parse(text: &str) -> ImageArg {
        if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
            ImageArg::Id(text.to_string())
        } else {
            ImageArg::File(text.to_string())
        }
    }
}

/// The config options of create and edit (absent: not given).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PartitionSpec {
    pub cpus: Option<Vec<u32>>,
    pub memory_mib: Option<u64>,
    pub kernel: Option<ImageArg>,
    pub initrd: Option<ImageArg>,
    pub kernel_format: Option<String>,
    pub bootargs: Option<String>,
    pub autostart: Option<bool>,
    pub restart: Option<String>,
    pub restart_limit: Option<u32>,
    pub watchdog_s: Option<u32>,
    pub shutdown_timeout_s: Option<u32>,
    /// PCI functions `SSSS:BB:DD.F` as given (the manager checks them);
    /// `--pci ""` is the empty list.
    pub pci: Option<Vec<String>>,
    /// edit only: the new name.
    pub rename: Option<String>,
}

impl PartitionSpec {
    fn is_empty(&self) -> bool {
        *self == PartitionSpec::default()
    }
}

/// What upload and fetch say about the image.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ImageSpec {
    pub kind: String,
    pub name: Option<String>,
    pub sha256: Option<String>,
}

/// `--memory`: M/MiB, G/GiB, K/KiB (binary), a bare number in MiB; whole
/// MiB only.
pub fn parse_memory(text: &str) -> Result<u64, UsageError> {
    let bad = || {
        UsageError(format!(
            "--memory {text:?}: give e.g. 256M, 1G or 512 (MiB)"
        ))
    };
    let t = text.trim();
    let end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let number: u64 = t[..end].parse().map_err(|_| bad())?;
    let kib = match t[end..].trim() {
        "" | "M" | "MiB" | "m" => number.checked_mul(1024),
        "G" | "GiB" | "g" => number.checked_mul(1024 * 1024),
        "K" | "KiB" | "k" => Some(number),
        _ => None,
    }
    .ok_or_else(bad)?;
    if kib % 1024 != 0 {
        return Err(UsageError(format!(
            "--memory {text:?} is not a whole number of MiB"
        )));
    }
    Ok(kib / 1024)
}

fn parse_cpus(text: &str) -> Result<Vec<u32>, UsageError> {
    text.split(',')
        .map(|c| {
            c.trim()
                .parse::<u32>()
                .map_err(|_| UsageError(format!("--cpus {text:?}: give CPU numbers, e.g. 1,2")))
        })
        .collect()
}

fn parse_number(flag: &str, text: &str) -> Result<u32, UsageError> {
    text.parse()
        .map_err(|_| UsageError(format!("{flag} {text:?} is not a non-negative integer")))
}

/// Where console input comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    Text(String),
    /// `--input -`
    Stdin,
}

/// The whole command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cli {
    pub url: String,
    pub token: Option<String>,
    pub json: bool,
    pub command: Command,
}

/// Takes `--fingerprint` / `--cacert` (anywhere on the line) out of
/// `args`; the pin they name, else `$PINFOLD_FINGERPRINT` (`env_fp`), else
/// the certificate in `$PINFOLD_CACERT` (`env_ca`), else none.
pub fn take_pin(
    args: &mut Vec<String>,
    env_fp: Option<String>,
    env_ca: Option<String>,
) -> Result<Option<hvctl::tls::Pin>, UsageError> {
    let (mut fp, mut ca) = (None, None);
    let mut i = 0;
    while i < args.len() {
        let (flag, inline) = match args[i].split_once('=') {
            Some((f, v)) => (f.to_string(), Some(v.to_string())),
            None => (args[i].clone(), None),
        };
        if flag != "--fingerprint" && flag != "--cacert" {
            i += 1;
            continue;
        }
        args.remove(i);
        let value = match inline {
            Some(v) => v,
            None if i < args.len() => args.remove(i),
            None => return Err(UsageError(format!("{flag} needs a value"))),
        };
        if flag == "--fingerprint" {
            fp = Some(value);
        } else {
            ca = Some(value);
        }
    }
    if fp.is_some() && ca.is_some() {
        return Err(UsageError("--fingerprint and --cacert: give one".into()));
    }
    let (fp, ca) = if fp.is_none() && ca.is_none() {
        (
            env_fp.filter(|v| !v.is_empty()),
            env_ca.filter(|v| !v.is_empty()),
        )
    } else {
        (fp, ca)
    };
    if let Some(fp) = fp {
        return hvctl::tls::Pin::parse(&fp)
            .map(Some)
            .map_err(|why| UsageError(format!("--fingerprint: {why}")));
    }
    if let Some(file) = ca {
        let bytes =
            std::fs::read(&file).map_err(|e| UsageError(format!("--cacert {file}: {e}")))?;
        return hvctl::tls::Pin::of_certificate(&bytes)
            .map(Some)
            .map_err(|why| UsageError(format!("--cacert {file}: {why}")));
    }
    Ok(None)
}

/// A command line that does not parse; the message says why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

/// Parses the arguments after the program name. Options may come before
/// or after the command; `env_token` is `$PINFOLD_TOKEN`.
#[cfg(test)]
pub fn parse(args: &[String], env_token: Option<String>) -> Result<Cli, UsageError> {
    parse_with(args, env_token, false)
}

/// [`parse`], knowing whether stdin is a terminal (`console NAME` is then
/// interactive).
pub fn parse_with(
    args: &[String],
    env_token: Option<String>,
    tty: bool,
) -> Result<Cli, UsageError> {
    let mut history = false;
    let mut file = None;
    let mut since = None;
    let mut url = None;
    let mut token = None;
    let mut json = false;
    let mut follow = false;
    let mut input = None;
    let mut spec = PartitionSpec::default();
    let mut image = ImageSpec::default();
    let mut kind = None;
    let mut dry_run = false;
    let mut if_match = None;
    let mut words: Vec<&str> = Vec::new();
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |flag: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| UsageError(format!("{flag} needs a value")))
        };
        match arg.as_str() {
            "--url" => url = Some(value("--url")?),
            "--token" => token = Some(value("--token")?),
            "--json" => json = true,
            "--follow" | "-f" => follow = true,
            "--history" => history = true,
            "-o" | "--output" => file = Some(value("-o")?),
            "--since" => {
                let v = value("--since")?;
                since = Some(v.parse::<u64>().map_err(|_| {
                    UsageError(format!("--since needs a sequence number, not {v:?}"))
                })?);
            }
            "--input" => {
                input = Some(match value("--input")?.as_str() {
                    "-" => Input::Stdin,
                    text => Input::Text(text.to_string()),
                })
            }
            s if s.starts_with("--input=") => {
                input = Some(match &s["--input=".len()..] {
                    "-" => Input::Stdin,
                    text => Input::Text(text.to_string()),
                })
            }
            "--cpus" => spec.cpus = Some(parse_cpus(&value("--cpus")?)?),
            "--memory" => spec.memory_mib = Some(parse_memory(&value("--memory")?)?),
            "--kernel" => spec.kernel = Some(ImageArg::parse(&value("--kernel")?)),
            "--initrd" => spec.initrd = Some(ImageArg::parse(&value("--initrd")?)),
            "--kernel-format" => spec.kernel_format = Some(value("--kernel-format")?),
            "--bootargs" => spec.bootargs = Some(value("--bootargs")?),
            "--autostart" => spec.autostart = Some(true),
            "--no-autostart" => spec.autostart = Some(false),
            "--restart" => spec.restart = Some(value("--restart")?),
            "--restart-limit" => {
                spec.restart_limit =
                    Some(parse_number("--restart-limit", &value("--restart-limit")?)?)
            }
            "--watchdog" => {
                spec.watchdog_s = Some(parse_number("--watchdog", &value("--watchdog")?)?)
            }
            "--shutdown-timeout" => {
                spec.shutdown_timeout_s = Some(parse_number(
                    "--shutdown-timeout",
                    &value("--shutdown-timeout")?,
                )?)
            }
            "--pci" => {
                spec.pci = Some(
                    value("--pci")?
                        .split(',')
                        .map(str::trim)
                        .filter(|f| !f.is_empty())
                        .map(String::from)
                        .collect(),
                )
            }
            "--rename" => spec.rename = Some(value("--rename")?),
            "--dry-run" => dry_run = true,
            "--if-match" => if_match = Some(value("--if-match")?),
            "--kind" => kind = Some(value("--kind")?),
            "--name" => image.name = Some(value("--name")?),
            "--sha256" => image.sha256 = Some(value("--sha256")?),
            "-h" | "--help" => words.insert(0, "help"),
            s if s.starts_with("--url=") => url = Some(s["--url=".len()..].to_string()),
            s if s.starts_with("--token=") => token = Some(s["--token=".len()..].to_string()),
            s if s.starts_with('-') && s.len() > 1 => {
                return Err(UsageError(format!("unknown option {s}")))
            }
            s => words.push(s),
        }
    }
    let name = |words: &[&str], cmd: &str| match words {
        [_, name] => Ok(name.to_string()),
        [_] => Err(UsageError(format!("{cmd} needs a partition NAME"))),
        _ => Err(UsageError(format!("{cmd} takes one NAME"))),
    };
    let command = match words.first().copied() {
        Some("help") => Command::Help,
        Some("list") if words.len() == 1 => Command::List,
        Some("list") => return Err(UsageError("list takes no arguments".into())),
        Some("show") => Command::Show {
            name: name(&words, "show")?,
        },
        Some("start") => Command::Change {
            op: Op::Start,
            name: name(&words, "start")?,
        },
        Some("stop") => Command::Change {
            op: Op::Stop,
            name: name(&words, "stop")?,
        },
        Some("restart") => Command::Change {
            op: Op::Restart,
            name: name(&words, "restart")?,
        },
        Some("shutdown") => Command::Change {
            op: Op::Shutdown,
            name: name(&words, "shutdown")?,
        },
        Some("console") => match input.take() {
            Some(_) if follow || history => {
                return Err(UsageError(
                    "console takes one of --follow, --input, --history".into(),
                ))
            }
            Some(input) => Command::ConsoleInput {
                name: name(&words, "console")?,
                input,
            },
            None if history && follow => {
                return Err(UsageError(
                    "console takes one of --follow, --input, --history".into(),
                ))
            }
            None if history => Command::History {
                name: name(&words, "console")?,
                file: file.take(),
            },
            None if tty && !follow => Command::Interactive {
                name: name(&words, "console")?,
            },
            None => Command::Console {
                name: name(&words, "console")?,
                follow,
            },
        },
        Some("whoami") if words.len() == 1 => Command::Whoami,
        Some("credentials") => Command::Credentials {
            action: match words[1..] {
                [] => CredentialAction::List,
                ["create", role] | ["create", role, ""] => CredentialAction::Create {
                    role: role.to_string(),
                    name: String::new(),
                },
                ["create", role, name] => CredentialAction::Create {
                    role: role.to_string(),
                    name: name.to_string(),
                },
                ["rotate", id] => CredentialAction::Rotate { id: id.to_string() },
                ["revoke", id] => CredentialAction::Revoke { id: id.to_string() },
                _ => {
                    return Err(UsageError(
                        "credentials takes nothing, create ROLE [NAME], rotate ID or revoke ID"
                            .into(),
                    ))
                }
            },
        },
        Some("export") if words.len() == 1 => Command::Export { file: file.take() },
        Some("export") => return Err(UsageError("export takes no arguments but -o FILE".into())),
        Some("import") => match words[..] {
            [_, path] => Command::Import {
                file: path.to_string(),
                dry_run,
                if_match: if_match.take(),
            },
            _ => return Err(UsageError("import takes one FILE".into())),
        },
        Some("resources") if words.len() == 1 => Command::Resources,
        Some("images") if words.len() == 1 => Command::Images,
        Some(cmd @ ("resources" | "images")) => {
            return Err(UsageError(format!("{cmd} takes no arguments")))
        }
        Some("create") => {
            let name = name(&words, "create")?;
            for (missing, flag) in [
                (spec.cpus.is_none(), "--cpus"),
                (spec.memory_mib.is_none(), "--memory"),
                (spec.kernel.is_none(), "--kernel"),
            ] {
                if missing {
                    return Err(UsageError(format!("create needs {flag}")));
                }
            }
            if spec.rename.is_some() {
                return Err(UsageError("--rename only applies to edit".into()));
            }
            Command::Create {
                name,
                spec: std::mem::take(&mut spec),
            }
        }
        Some("edit") => {
            let name = name(&words, "edit")?;
            if spec.is_empty() {
                return Err(UsageError("edit needs something to change".into()));
            }
            Command::Edit {
                name,
                spec: std::mem::take(&mut spec),
            }
        }
        Some("delete") => Command::Delete {
            name: name(&words, "delete")?,
        },
        Some("image-delete") => match words.as_slice() {
            [_, id] if !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) => {
                Command::ImageDelete { id: id.to_string() }
            }
            [_, id] => {
                return Err(UsageError(format!(
                    "image-delete takes an image id, not {id:?}"
                )))
            }
            _ => return Err(UsageError("image-delete takes one image ID".into())),
        },
        Some(cmd @ ("upload" | "fetch")) => {
            let what = if cmd == "upload" { "FILE" } else { "URL" };
            let arg = match words.as_slice() {
                [_, arg] => arg.to_string(),
                [_] => return Err(UsageError(format!("{cmd} needs a {what}"))),
                _ => return Err(UsageError(format!("{cmd} takes one {what}"))),
            };
            image.kind = kind
                .take()
                .ok_or_else(|| UsageError(format!("{cmd} needs --kind kernel|initrd|dtb")))?;
            let image = std::mem::take(&mut image);
            if cmd == "upload" {
                Command::Upload { file: arg, image }
            } else {
                Command::Fetch { url: arg, image }
            }
        }
        Some("events") if words.len() == 1 => Command::Events {
            follow,
            since: since.take().unwrap_or(0),
        },
        Some("events") => return Err(UsageError("events takes no NAME".into())),
        Some(other) => return Err(UsageError(format!("unknown command {other:?}"))),
        None => return Err(UsageError("no command given".into())),
    };
    if !spec.is_empty() {
        return Err(UsageError(
            "partition options (--cpus, --memory, ...) only apply to create and edit".into(),
        ));
    }
    if kind.is_some() || image != ImageSpec::default() {
        return Err(UsageError(
            "--kind, --name and --sha256 only apply to upload and fetch".into(),
        ));
    }
    if follow && !matches!(command, Command::Console { .. } | Command::Events { .. }) {
        return Err(UsageError(
            "--follow only applies to console and events".into(),
        ));
    }
    if history && !matches!(command, Command::History { .. }) {
        return Err(UsageError("--history only applies to console".into()));
    }
    if file.is_some() {
        return Err(UsageError("-o only applies to console --history".into()));
    }
    if since.is_some() {
        return Err(UsageError("--since only applies to events".into()));
    }
    if input.is_some() {
        return Err(UsageError("--input only applies to console".into()));
    }
    Ok(Cli {
        url: url.unwrap_or_else(|| DEFAULT_URL.to_string()),
        token: token.or(env_token).filter(|t| !t.is_empty()),
        json,
        command,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn pin_options_are_taken_out_of_the_line_and_beat_the_environment() {
        let fp = "ab".repeat(32);
        let mut a = args(&format!("list --fingerprint {fp} --json"));
        let pin = take_pin(&mut a, Some("cd".repeat(32)), None).expect("parses");
        assert_eq!(pin, hvctl::tls::Pin::parse(&fp).ok());
        assert_eq!(a, args("list --json"));
        let mut a = args("list");
        let pin = take_pin(&mut a, Some("cd".repeat(32)), None).expect("parses");
        assert_eq!(pin, hvctl::tls::Pin::parse(&"cd".repeat(32)).ok());
        let mut a = args("list --fingerprint=xyz");
        let err = take_pin(&mut a, None, None).expect_err("bad pin");
        assert!(err.0.contains("--fingerprint"), "{err:?}");
        let mut a = args("list --cacert /nonexistent/cert.pem");
        let err = take_pin(&mut a, None, None).expect_err("no file");
        assert!(err.0.contains("/nonexistent/cert.pem"), "{err:?}");
        let mut a = args("list --cacert");
        assert!(take_pin(&mut a, None, None).is_err());
        assert_eq!(take_pin(&mut args("list"), None, None), Ok(None));
    }

    #[test]
    fn list_uses_default_url_and_no_token() {
        let cli = parse(&args("list"), None).expect("parses");

        assert_eq!(
            cli,
            Cli {
                url: DEFAULT_URL.into(),
                token: None,
                json: false,
                command: Command::List
            }
        );
    }

    #[test]
    fn options_may_follow_the_command() {
        let cli = parse(
            &args("stop beta --json --url http://10.0.0.2:80 --token t"),
            None,
        )
        .expect("parses");

        assert_eq!(cli.url, "http://10.0.0.2:80");
        assert_eq!(cli.token.as_deref(), Some("t"));
        assert!(cli.json);
        assert_eq!(
            cli.command,
            Command::Change {
                op: Op::Stop,
                name: "beta".into()
            }
        );
    }

    #[test]
    fn console_input_takes_text_or_stdin() {
        let text = parse(
            &[
                "console".into(),
                "beta".into(),
                "--input".into(),
                "ls -l\n".into(),
            ],
            None,
        )
        .expect("parses");
        let stdin = parse(&args("console beta --input -"), None).expect("parses");

        assert_eq!(
            text.command,
            Command::ConsoleInput {
                name: "beta".into(),
                input: Input::Text("ls -l\n".into())
            }
        );
        assert_eq!(
            stdin.command,
            Command::ConsoleInput {
                name: "beta".into(),
                input: Input::Stdin
            }
        );
    }

    #[test]
    fn console_input_with_follow_or_elsewhere_is_a_usage_error() {
        assert!(parse(&args("console beta --input x --follow"), None).is_err());
        assert!(parse(&args("list --input x"), None).is_err());
        assert!(parse(&args("console beta --input"), None).is_err());
    }

    #[test]
    fn equals_form_of_options_is_accepted() {
        let cli = parse(&args("--url=http://h:1 --token=abc list"), None).expect("parses");

        assert_eq!(
            (cli.url.as_str(), cli.token.as_deref()),
            ("http://h:1", Some("abc"))
        );
    }

    #[test]
    fn token_comes_from_environment_when_not_given() {
        let cli = parse(&args("start alpha"), Some("from-env".into())).expect("parses");

        assert_eq!(cli.token.as_deref(), Some("from-env"));
    }

    #[test]
    fn token_option_beats_environment() {
        let cli =
            parse(&args("--token flag start alpha"), Some("from-env".into())).expect("parses");

        assert_eq!(cli.token.as_deref(), Some("flag"));
    }

    #[test]
    fn console_follow_is_parsed() {
        let cli = parse(&args("console alpha --follow"), None).expect("parses");

        assert_eq!(
            cli.command,
            Command::Console {
                name: "alpha".into(),
                follow: true
            }
        );
    }

    #[test]
    fn console_on_a_terminal_is_interactive_unless_told_otherwise() {
        let tty = |s: &str| parse_with(&args(s), None, true).map(|c| c.command);
        assert_eq!(
            tty("console beta"),
            Ok(Command::Interactive {
                name: "beta".into()
            })
        );
        assert_eq!(
            tty("console beta --follow"),
            Ok(Command::Console {
                name: "beta".into(),
                follow: true
            })
        );
        assert_eq!(
            parse(&args("console beta"), None).map(|c| c.command),
            Ok(Command::Console {
                name: "beta".into(),
                follow: false
            })
        );
    }

    #[test]
    fn history_and_events_are_parsed() {
        assert_eq!(
            parse(&args("console beta --history -o b.log"), None).map(|c| c.command),
            Ok(Command::History {
                name: "beta".into(),
                file: Some("b.log".into())
            })
        );
        assert_eq!(
            parse(&args("--json events --follow --since 4000"), None).map(|c| c.command),
            Ok(Command::Events {
                follow: true,
                since: 4000
            })
        );
        assert!(parse(&args("console beta --history --follow"), None).is_err());
        assert!(parse(&args("list -o x"), None).is_err());
        assert!(parse(&args("events --since x"), None).is_err());
        assert!(parse(&args("events beta"), None).is_err());
    }

    #[test]
    fn follow_on_another_command_is_an_error() {
        assert!(parse(&args("list --follow"), None).is_err());
    }

    #[test]
    fn missing_name_is_an_error() {
        assert_eq!(
            parse(&args("show"), None),
            Err(UsageError("show needs a partition NAME".into()))
        );
    }

    #[test]
    fn shutdown_names_one_partition() {
        assert_eq!(
            parse(&args("shutdown alpha"), None),
            Ok(Cli {
                command: Command::Change {
                    op: Op::Shutdown,
                    name: "alpha".into(),
                },
                ..parse(&args("list"), None).unwrap()
            })
        );
        assert!(parse(&args("shutdown"), None).is_err());
    }

    #[test]
    fn extra_words_are_an_error() {
        assert!(parse(&args("restart alpha beta"), None).is_err());
        assert!(parse(&args("list alpha"), None).is_err());
    }

    #[test]
    fn unknown_command_and_option_are_errors() {
        assert!(parse(&args("destroy alpha"), None).is_err());
        assert!(parse(&args("--verbose list"), None).is_err());
    }

    #[test]
    fn option_without_value_is_an_error() {
        assert_eq!(
            parse(&args("list --url"), None),
            Err(UsageError("--url needs a value".into()))
        );
    }

    #[test]
    fn create_takes_the_config_options_and_tells_ids_from_files() {
        let cli = parse(
            &[
                "create",
                "gamma",
                "--cpus",
                "1,3",
                "--memory",
                "256M",
                "--kernel",
                "7",
                "--initrd",
                "initrd.img",
                "--bootargs",
                "console=ttyAMA0 quiet",
                "--autostart",
                "--restart",
                "on-crash",
                "--watchdog",
                "5",
                "--pci",
                "0000:00:02.0,0000:00:03.0",
            ]
            .map(String::from),
            None,
        )
        .expect("parses");

        assert_eq!(
            cli.command,
            Command::Create {
                name: "gamma".into(),
                spec: PartitionSpec {
                    cpus: Some(vec![1, 3]),
                    memory_mib: Some(256),
                    kernel: Some(ImageArg::Id("7".into())),
                    initrd: Some(ImageArg::File("initrd.img".into())),
                    bootargs: Some("console=ttyAMA0 quiet".into()),
                    autostart: Some(true),
                    restart: Some("on-crash".into()),
                    watchdog_s: Some(5),
                    pci: Some(vec!["0000:00:02.0".into(), "0000:00:03.0".into()]),
                    ..PartitionSpec::default()
                }
            }
        );
    }

    #[test]
    fn create_without_cpus_memory_or_kernel_is_a_usage_error() {
        assert_eq!(
            parse(&args("create g --memory 64M --kernel 1"), None),
            Err(UsageError("create needs --cpus".into()))
        );
        assert!(parse(&args("create g --cpus 1 --kernel 1"), None).is_err());
        assert!(parse(&args("create g --cpus 1 --memory 64"), None).is_err());
        assert!(parse(&args("create --cpus 1 --memory 64 --kernel 1"), None).is_err());
    }

    #[test]
    fn memory_takes_binary_units_and_bare_mib() {
        assert_eq!(parse_memory("256M"), Ok(256));
        assert_eq!(parse_memory("256MiB"), Ok(256));
        assert_eq!(parse_memory("2G"), Ok(2048));
        assert_eq!(parse_memory("512"), Ok(512));
        assert_eq!(parse_memory("4096K"), Ok(4));
        assert!(parse_memory("1000K").is_err(), "not whole MiB");
        assert!(parse_memory("256MB").is_err(), "decimal unit");
        assert!(parse_memory("lots").is_err());
    }

    #[test]
    fn edit_needs_a_change_and_takes_rename() {
        assert!(parse(&args("edit beta"), None).is_err());
        let cli = parse(
            &args("edit beta --memory 1G --rename delta --no-autostart"),
            None,
        )
        .expect("parses");
        assert_eq!(
            cli.command,
            Command::Edit {
                name: "beta".into(),
                spec: PartitionSpec {
                    memory_mib: Some(1024),
                    rename: Some("delta".into()),
                    autostart: Some(false),
                    ..PartitionSpec::default()
                }
            }
        );
    }

    #[test]
    fn upload_and_fetch_need_a_kind() {
        assert_eq!(
            parse(&args("upload vmlinuz --kind kernel --name k1"), None).map(|c| c.command),
            Ok(Command::Upload {
                file: "vmlinuz".into(),
                image: ImageSpec {
                    kind: "kernel".into(),
                    name: Some("k1".into()),
                    sha256: None
                }
            })
        );
        assert!(parse(&args("upload vmlinuz"), None).is_err());
        assert!(parse(&args("fetch http://h/k --kind initrd"), None).is_ok());
        assert!(parse(&args("fetch --kind initrd"), None).is_err());
    }

    #[test]
    fn image_delete_takes_one_numeric_id() {
        assert_eq!(
            parse(&args("image-delete 4"), None).map(|c| c.command),
            Ok(Command::ImageDelete { id: "4".into() })
        );
        assert!(parse(&args("image-delete vmlinuz"), None).is_err());
        assert!(parse(&args("image-delete"), None).is_err());
    }

    #[test]
    fn options_of_one_command_on_another_are_usage_errors() {
        assert!(parse(&args("list --cpus 1"), None).is_err());
        assert!(parse(&args("delete beta --memory 64"), None).is_err());
        assert!(parse(&args("images --kind kernel"), None).is_err());
        assert!(parse(
            &args("create g --cpus 1 --memory 64 --kernel 1 --rename h"),
            None
        )
        .is_err());
        assert!(parse(&args("resources x"), None).is_err());
    }

    #[test]
    fn no_command_is_an_error_and_help_is_a_command() {
        assert!(parse(&[], None).is_err());
        assert_eq!(
            parse(&args("--help"), None).map(|c| c.command),
            Ok(Command::Help)
        );
    }
}
