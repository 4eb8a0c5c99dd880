//! Pinfold's task runner: `cargo xtask build | run | test | bench` (see README.md).

mod api_checks;
mod bench;
mod build;
mod cmd;
mod config_checks;
mod cpio;
mod deploy_checks;
mod dma_checks;
mod error;
mod event_checks;
mod fuzz;
mod harness;
mod hermit;
mod hostfwd;
mod hostile_checks;
mod hostile_plans;
mod http;
mod image;
mod load_checks;
mod mgmtx_checks;
mod net_checks;
mod pie;
mod provision;
mod pxe;
mod qemu;
mod redfish_checks;
mod runtime_checks;
mod signing;
mod store;
mod suite;
mod tls;
mod tls_checks;
mod uefi;

use std::path::{Path, PathBuf};
use std::process::{Child, ExitCode};
use std::time::{Duration, Instant};

use build::{Builder, DEFAULT_CONFIG};
use error::XtaskError;
use qemu::{qemu_command, Extra};

pub const USAGE: &str = "\
usage: cargo xtask <command>

  build [--config FILE]                  build target/pinfold/pinfold.bin
  run [--config FILE] [--timeout SECS]   build, then boot it under QEMU
  test [--host] [--only NAME]            host unit tests, then QEMU boot tests
  pxe --out DIR [--config FILE] [--host MAC=FILE ...]
                                         a TFTP/HTTP tree: the generic image,
                                         signed bundles (FILE as default, one
                                         per --host), pxelinux.cfg, boot.scr,
                                         grub.cfg; prints each host's token once
  fuzz [TARGET] [--time SECS]            cargo-fuzz targets (fuzz/): replay the
                                         committed corpus, fuzz SECS (300) each,
                                         merge what was found into the corpus
  bench                                  issue 7's paths bare vs Pinfold under
                                         -icount, boot time, image size; writes
                                         target/pinfold/bench.{json,svg}

FILE defaults to vm-configs/qemu-virt/default.toml.";

/// The workspace this xtask belongs to.
#[derive(Debug)]
pub struct Workspace {
    pub root: PathBuf,
}

impl Workspace {
    fn locate() -> Self {
        // tools/xtask -> the workspace root.
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
        let root = manifest
            .ancestors()
            .nth(2)
            .unwrap_or(manifest)
            .to_path_buf();
        Self { root }
    }

    /// A user-given path: as given if it exists from the current directory,
    /// else relative to the workspace root.
    pub fn resolve(&self, path: &Path) -> PathBuf {
        if path.is_absolute() || path.exists() {
            path.to_path_buf()
        } else {
            self.root.join(path)
        }
    }

    /// `path` relative to the root when it is inside it, for messages.
    pub fn relative(&self, path: &Path) -> String {
        path.strip_prefix(&self.root)
            .unwrap_or(path)
            .display()
            .to_string()
    }
}

/// A parsed command line.
#[derive(Debug, PartialEq, Eq)]
enum Task {
    Build {
        config: PathBuf,
    },
    Run {
        config: PathBuf,
        timeout: Option<Duration>,
    },
    Test {
        host_only: bool,
        only: Option<String>,
    },
    Bench,
    Fuzz {
        target: Option<String>,
        seconds: Option<u64>,
    },
    Pxe(pxe::Options),
    Help,
}

fn parse_args(args: &[String]) -> Result<Task, XtaskError> {
    let Some((command, rest)) = args.split_first() else {
        return Ok(Task::Help);
    };
    let mut config = PathBuf::from(DEFAULT_CONFIG);
    let mut timeout = None;
    let mut host_only = false;
    let mut only = None;
    let mut out = None;
    let mut hosts = Vec::new();
    let mut seconds = None;
    let mut target = None;
    let mut rest = rest.iter();
    let usage = |msg: String| XtaskError::Usage(msg);
    while let Some(arg) = rest.next() {
        let mut value = || {
            rest.next()
                .cloned()
                .ok_or_else(|| usage(format!("{arg} needs a value")))
        };
        match (command.as_str(), arg.as_str()) {
            ("build" | "run" | "pxe", "--config") => config = PathBuf::from(value()?),
            ("pxe", "--out") => out = Some(PathBuf::from(value()?)),
            ("pxe", "--host") => {
                let text = value()?;
                let (mac, plan) = text
                    .split_once('=')
                    .and_then(|(mac, plan)| Some((pxe::Mac::parse(mac)?, plan)))
                    .filter(|(_, plan)| !plan.is_empty())
                    .ok_or_else(|| {
                        usage(format!(
                            "--host takes MAC=PLAN (52:54:00:12:34:56=plan.toml), not `{text}`"
                        ))
                    })?;
                hosts.push((mac, PathBuf::from(plan)));
            }
            ("run", "--timeout") => {
                let text = value()?;
                let seconds: u64 = text
                    .parse()
                    .map_err(|_| usage(format!("--timeout takes whole seconds, not `{text}`")))?;
                timeout = Some(Duration::from_secs(seconds));
            }
            ("fuzz", "--time") => {
                let text = value()?;
                seconds = Some(
                    text.parse()
                        .map_err(|_| usage(format!("--time takes whole seconds, not `{text}`")))?,
                );
            }
            ("fuzz", name) if !name.starts_with('-') && target.is_none() => {
                target = Some(name.to_string())
            }
            ("test", "--host") => host_only = true,
            ("test", "--only") => only = Some(value()?),
            (_, "-h" | "--help") => return Ok(Task::Help),
            _ => {
                return Err(usage(format!(
                    "unexpected argument `{arg}` for `{command}`"
                )))
            }
        }
    }
    match command.as_str() {
        "build" => Ok(Task::Build { config }),
        "run" => Ok(Task::Run { config, timeout }),
        "test" => Ok(Task::Test { host_only, only }),
        "bench" => Ok(Task::Bench),
        "fuzz" => Ok(Task::Fuzz { target, seconds }),
        "pxe" => Ok(Task::Pxe(pxe::Options {
            out: out.ok_or_else(|| usage("pxe needs --out DIR".into()))?,
            default: config,
            hosts,
        })),
        "help" | "-h" | "--help" => Ok(Task::Help),
        other => Err(usage(format!("unknown command `{other}`"))),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let ws = Workspace::locate();
    let result = parse_args(&args).and_then(|task| execute(&ws, task));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // The suite already printed its verdicts and the closing count.
        Err(XtaskError::TestsFailed { .. }) => ExitCode::FAILURE,
        Err(err) => {
            eprintln!("xtask: error: {err}");
            ExitCode::FAILURE
        }
    }
}

fn execute(ws: &Workspace, task: Task) -> Result<(), XtaskError> {
    match task {
        Task::Help => {
            println!("{USAGE}");
            Ok(())
        }
        Task::Build { config } => Builder::new(ws).build(&config, "pinfold.bin").map(|_| ()),
        Task::Run { config, timeout } => run(ws, &config, timeout),
        Task::Test { host_only, only } => suite::run(ws, &suite::Options { host_only, only }),
        Task::Bench => bench::run(ws),
        Task::Fuzz { target, seconds } => fuzz::command(ws, target.as_deref(), seconds),
        Task::Pxe(options) => pxe::write_tree(ws, &mut Builder::new(ws), &options).map(|_| ()),
    }
}

/// Builds and boots the image with the console on this terminal.
fn run(ws: &Workspace, config: &Path, timeout: Option<Duration>) -> Result<(), XtaskError> {
    let config_path = ws.resolve(config);
    let mut plan = pinfold_config::load(&config_path)?;
    // The configuration store: target/pinfold/store/ over HTTP, named in
    // the management partition (unless the plan names one), so the
    // manager's configuration persists between runs.
    let store_dir = ws.root.join("target/pinfold/store");
    let store_port = store::store_port(qemu::manager_port());
    let _store = match store::name_in_plan(&mut plan, store_port) {
        Some(url) => {
            let s = store::Store::serve(&store_dir, store_port).map_err(|e| {
                XtaskError::Provision(format!(
                    "cannot serve the configuration store on 127.0.0.1:{store_port}: {e}"
                ))
            })?;
            eprintln!(
                "xtask: configuration store {url} = {} on 127.0.0.1:{}",
                ws.relative(&s.dir),
                s.port
            );
            Some(s)
        }
        None => None,
    };
    let built = Builder::new(ws).build_loaded(&plan, &config_path, "pinfold.bin", &[])?;
    let extra = Extra::default();
    // qemu_command puts each at its address (Board::partition_nics).
    for nic in qemu::partition_nics(&plan, qemu::manager_port()) {
        eprintln!(
            "xtask: partition {}'s NIC 00:{:02x}.{}: port 80 at 127.0.0.1:{}",
            nic.partition, nic.device, nic.function, nic.host_port
        );
    }
    let mut qemu = qemu_command(&built.board, &built.image, &extra);
    eprintln!(
        "xtask: booting under QEMU ({} CPUs, {} MiB). Console keys: Ctrl-A s = hypervisor stats, \
         Ctrl-] x = quit QEMU, Ctrl-] c = QEMU monitor; Ctrl-C goes to the guest.",
        built.board.cpus,
        built.board.memory >> 20
    );
    if built.board.nic {
        eprintln!(
            "xtask: web UI and REST API: https://127.0.0.1:{}/ (its self-signed certificate: \
             target/pinfold/tls/cert.pem, SHA-256 fingerprint {}; hvctl --cacert or \
             --fingerprint pins it; every call needs the token the hypervisor prints as \
             `pinfold: management token: ...`)",
            qemu::manager_port(),
            std::fs::read(crate::http::cert_path())
                .map(|der| hvctl::tls::Pin::of_der(&der).to_string())
                .unwrap_or_else(|_| "unknown".into())
        );
    }
    let program = cmd::describe(&qemu);
    let mut child = qemu.spawn().map_err(|source| XtaskError::Spawn {
        program: program.clone(),
        source,
    })?;
    let status = match timeout {
        None => child.wait().map_err(|source| XtaskError::Spawn {
            program: program.clone(),
            source,
        })?,
        Some(limit) => {
            if wait_until(&mut child, Instant::now() + limit)?.is_none() {
                eprintln!(
                    "\nxtask: --timeout {} s reached, stopping QEMU",
                    limit.as_secs()
                );
                stop(&mut child);
                return Ok(());
            }
            child.wait().map_err(|source| XtaskError::Spawn {
                program: program.clone(),
                source,
            })?
        }
    };
    if status.success() {
        Ok(())
    } else {
        Err(XtaskError::Command {
            program,
            status: status.to_string(),
        })
    }
}

/// Polls `child` until it exits (`Some`) or the deadline passes (`None`).
fn wait_until(child: &mut Child, deadline: Instant) -> Result<Option<()>, XtaskError> {
    loop {
        let exited = child.try_wait().map_err(|source| XtaskError::Spawn {
            program: "qemu-system-aarch64".into(),
            source,
        })?;
        if exited.is_some() {
            return Ok(Some(()));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Stops QEMU with SIGTERM first, so it restores the terminal it put into raw
/// mode, and SIGKILL if it does not go within five seconds.
fn stop(child: &mut Child) {
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    if let Ok(None) = wait_until(child, Instant::now() + Duration::from_secs(5)) {
        let _ = child.kill();
    }
    let _ = child.wait();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(text: &str) -> Vec<String> {
        text.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn build_defaults_to_the_default_config() {
        assert_eq!(
            parse_args(&args("build")).ok(),
            Some(Task::Build {
                config: PathBuf::from(DEFAULT_CONFIG)
            })
        );
    }

    #[test]
    fn run_takes_config_and_timeout() {
        let task = parse_args(&args("run --config a.toml --timeout 30")).ok();

        assert_eq!(
            task,
            Some(Task::Run {
                config: PathBuf::from("a.toml"),
                timeout: Some(Duration::from_secs(30))
            })
        );
    }

    #[test]
    fn test_takes_host_and_only() {
        let task = parse_args(&args("test --host --only isolation")).ok();

        assert_eq!(
            task,
            Some(Task::Test {
                host_only: true,
                only: Some("isolation".into())
            })
        );
    }

    #[test]
    fn bench_takes_no_options() {
        assert_eq!(parse_args(&args("bench")).ok(), Some(Task::Bench));
        assert!(matches!(
            parse_args(&args("bench --config a.toml")),
            Err(XtaskError::Usage(_))
        ));
    }

    #[test]
    fn pxe_takes_out_config_and_hosts() {
        let task = parse_args(&args(
            "pxe --out /srv/t --config a.toml --host 52:54:00:12:34:56=b.toml",
        ))
        .ok();

        assert_eq!(
            task,
            Some(Task::Pxe(pxe::Options {
                out: PathBuf::from("/srv/t"),
                default: PathBuf::from("a.toml"),
                hosts: vec![(
                    pxe::Mac([0x52, 0x54, 0, 0x12, 0x34, 0x56]),
                    PathBuf::from("b.toml")
                )],
            }))
        );
    }

    #[test]
    fn pxe_needs_out_and_well_formed_hosts() {
        for bad in [
            "pxe",
            "pxe --out d --host 52:54:00=b.toml",
            "pxe --out d --host 52:54:00:12:34:56=",
        ] {
            assert!(
                matches!(parse_args(&args(bad)), Err(XtaskError::Usage(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn option_of_another_command_is_refused() {
        assert!(matches!(
            parse_args(&args("build --timeout 3")),
            Err(XtaskError::Usage(_))
        ));
    }

    #[test]
    fn missing_option_value_is_refused() {
        assert!(matches!(
            parse_args(&args("run --config")),
            Err(XtaskError::Usage(_))
        ));
    }

    #[test]
    fn non_numeric_timeout_is_refused() {
        assert!(matches!(
            parse_args(&args("run --timeout soon")),
            Err(XtaskError::Usage(_))
        ));
    }

    #[test]
    fn workspace_root_holds_the_workspace_manifest() {
        let ws = Workspace::locate();

        assert!(ws.root.join("tools/xtask/Cargo.toml").exists());
    }
}
