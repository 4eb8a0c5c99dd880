//! Boot-test harness: runs QEMU with its console piped, records every line
//! with a timestamp into a log file, and lets a test wait for a line with a
//! deadline and type into the console. QEMU is always killed on drop.

use std::fs::File;
use std::io::{BufWriter, Read, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::cmd::describe;
use crate::error::{IoContext, XtaskError};

/// One line of QEMU's console output.
#[derive(Debug, Clone)]
pub struct Line {
    /// Position in the whole output; lets a test ask for lines after another.
    pub index: usize,
    /// Time since QEMU was started.
    pub at: Duration,
    pub text: String,
}

/// Why a wait ended without the line it waited for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WaitError {
    /// The deadline passed.
    Timeout { what: String },
    /// QEMU closed its output (exited) first.
    Exited { what: String },
}

impl std::fmt::Display for WaitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Timeout { what } => write!(f, "timed out waiting for {what}"),
            Self::Exited { what } => write!(f, "QEMU exited while waiting for {what}"),
        }
    }
}

#[derive(Debug, Default)]
struct Output {
    lines: Vec<Line>,
    /// QEMU's stdout reached end of file.
    closed: bool,
}

type Shared = Arc<(Mutex<Output>, Condvar)>;

/// A running QEMU under test.
pub struct QemuRun {
    child: Child,
    stdin: Option<ChildStdin>,
    output: Shared,
    readers: Vec<JoinHandle<()>>,
    started: Instant,
}

impl QemuRun {
    /// Starts `cmd` with piped stdio, logging its output to `log_path`.
    pub fn spawn(mut cmd: Command, log_path: &Path) -> Result<Self, XtaskError> {
        if let Some(dir) = log_path.parent() {
            std::fs::create_dir_all(dir).context(|| format!("creating {}", dir.display()))?;
        }
        let mut log =
            File::create(log_path).context(|| format!("creating {}", log_path.display()))?;
        let program = describe(&cmd);
        writeln!(log, "# {program}").context(|| format!("writing {}", log_path.display()))?;
        let log = Arc::new(Mutex::new(BufWriter::new(log)));
        let started = Instant::now();
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| XtaskError::Spawn { program, source })?;
        let output: Shared = Arc::new((Mutex::new(Output::default()), Condvar::new()));
        let mut readers = Vec::new();
        if let Some(stdout) = child.stdout.take() {
            let (output, log) = (Arc::clone(&output), Arc::clone(&log));
            readers.push(std::thread::spawn(move || {
                record(stdout, "", started, &output, &log, true)
            }));
        }
        if let Some(stderr) = child.stderr.take() {
            let (output, log) = (Arc::clone(&output), Arc::clone(&log));
            readers.push(std::thread::spawn(move || {
                record(stderr, "qemu stderr: ", started, &output, &log, false)
            }));
        }
        let stdin = child.stdin.take();
        Ok(Self {
            child,
            stdin,
            output,
            readers,
            started,
        })
    }

    /// Waits until a line with index >= `from` satisfies `matches`, or the
    /// deadline passes. `what` describes the line for the failure message.
    pub fn wait_for(
        &self,
        what: &str,
        from: usize,
        deadline: Instant,
        matches: impl Fn(&str) -> bool,
    ) -> Result<Line, WaitError> {
        let (lock, changed) = &*self.output;
        let mut output = lock_output(lock);
        let mut next = from;
        loop {
            if let Some(line) = output
                .lines
                .iter()
                .skip(next)
                .find(|line| matches(&line.text))
            {
                return Ok(line.clone());
            }
            next = next.max(output.lines.len());
            if output.closed {
                return Err(WaitError::Exited {
                    what: what.to_string(),
                });
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(WaitError::Timeout {
                    what: what.to_string(),
                });
            }
            output = match changed.wait_timeout(output, deadline - now) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }

    /// When QEMU was started: the zero of every [`Line::at`].
    pub fn started(&self) -> Instant {
        self.started
    }

    /// A copy of every line recorded so far.
    pub fn lines(&self) -> Vec<Line> {
        lock_output(&self.output.0).lines.clone()
    }

    /// Types `bytes` into QEMU's console.
    pub fn send(&mut self, bytes: &[u8]) -> Result<(), XtaskError> {
        let Some(stdin) = self.stdin.as_mut() else {
            return Err(XtaskError::Provision("QEMU's stdin is closed".into()));
        };
        stdin
            .write_all(bytes)
            .and_then(|()| stdin.flush())
            .context(|| "writing to QEMU's stdin".into())
    }
}

impl Drop for QemuRun {
    fn drop(&mut self) {
        // Nothing useful can be done if QEMU already exited or cannot be
        // signalled, so errors are ignored: the point is to never leak it.
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.stdin = None;
        for reader in self.readers.drain(..) {
            let _ = reader.join();
        }
    }
}

fn lock_output(lock: &Mutex<Output>) -> MutexGuard<'_, Output> {
    // A reader thread that panicked leaves valid lines behind; keep going.
    lock.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Splits `source` into lines, timestamps them, appends them to the shared
/// output and the log, and marks the output closed at end of file if `main`.
fn record(
    mut source: impl Read,
    prefix: &str,
    started: Instant,
    output: &Shared,
    log: &Mutex<BufWriter<File>>,
    main: bool,
) {
    let mut pending: Vec<u8> = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let count = match source.read(&mut buf) {
            Ok(0) | Err(_) => 0,
            Ok(count) => count,
        };
        if count == 0 {
            if !pending.is_empty() {
                push_line(&pending, prefix, started, output, log);
            }
            break;
        }
        pending.extend_from_slice(&buf[..count]);
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            push_line(&line, prefix, started, output, log);
        }
    }
    if main {
        let (lock, changed) = &**output;
        lock_output(lock).closed = true;
        changed.notify_all();
    }
}

fn push_line(
    raw: &[u8],
    prefix: &str,
    started: Instant,
    output: &Shared,
    log: &Mutex<BufWriter<File>>,
) {
    let at = started.elapsed();
    let text = clean_line(raw);
    let text = format!("{prefix}{text}");
    {
        let mut log = log.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        // A full disk must not stop the test from seeing the line.
        let _ = writeln!(log, "[{:9.3}] {text}", at.as_secs_f64());
        let _ = log.flush();
    }
    let (lock, changed) = &**output;
    let mut output = lock_output(lock);
    let index = output.lines.len();
    output.lines.push(Line { index, at, text });
    changed.notify_all();
}

/// Turns raw console bytes into a line of text: no line ending, no carriage
/// returns, and invalid UTF-8 replaced.
pub fn clean_line(raw: &[u8]) -> String {
    String::from_utf8_lossy(raw)
        .replace('\r', "")
        .trim_end_matches('\n')
        .to_string()
}

/// The unsigned number that follows `key` in `line` (e.g. `timer_irqs=`).
pub fn number_after(line: &str, key: &str) -> Option<u64> {
    let start = line.find(key)? + key.len();
    let digits: String = line[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// The last `count` lines of the log at `path` (for failure reports).
pub fn log_tail(path: &Path, count: usize) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(count)..]
        .iter()
        .map(|line| line.to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn sh(script: &str) -> Command {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script]);
        cmd
    }

    fn log_in_temp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("xtask-harness-{}-{name}.log", std::process::id()))
    }

    #[test]
    fn number_after_reads_digits_following_the_key() {
        let line = "[alpha] PINFOLD-GUEST-UP name=alpha cpus=1 timer_irqs=523";

        assert_eq!(number_after(line, "timer_irqs="), Some(523));
        assert_eq!(number_after(line, "cpus="), Some(1));
        assert_eq!(number_after(line, "missing="), None);
    }

    #[test]
    fn clean_line_drops_carriage_returns() {
        assert_eq!(clean_line(b"hello\r\r\n"), "hello");
    }

    #[test]
    fn wait_for_finds_a_line_printed_later() {
        let log = log_in_temp("later");
        let run = QemuRun::spawn(sh("echo one; sleep 0.2; echo two marker"), &log).expect("spawn");

        let line = run.wait_for("marker", 0, Instant::now() + Duration::from_secs(10), |l| {
            l.contains("marker")
        });

        assert_eq!(line.map(|l| l.text), Ok("two marker".to_string()));
    }

    #[test]
    fn wait_for_reports_exit_when_output_closes_without_match() {
        let log = log_in_temp("exit");
        let run = QemuRun::spawn(sh("echo nothing here"), &log).expect("spawn");

        let result = run.wait_for("marker", 0, Instant::now() + Duration::from_secs(10), |l| {
            l.contains("marker")
        });

        assert_eq!(
            result.map(|l| l.text),
            Err(WaitError::Exited {
                what: "marker".into()
            })
        );
    }

    #[test]
    fn wait_for_times_out_at_the_deadline() {
        let log = log_in_temp("timeout");
        let run = QemuRun::spawn(sh("exec sleep 30"), &log).expect("spawn");
        let started = Instant::now();

        let result = run.wait_for(
            "marker",
            0,
            Instant::now() + Duration::from_millis(200),
            |_| true,
        );

        assert!(matches!(result, Err(WaitError::Timeout { .. })));
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn wait_for_skips_lines_before_from() {
        let log = log_in_temp("from");
        let run = QemuRun::spawn(sh("echo tick 1; echo tick 2"), &log).expect("spawn");
        let first = run
            .wait_for("tick", 0, Instant::now() + Duration::from_secs(10), |l| {
                l.contains("tick")
            })
            .expect("first tick");

        let second = run.wait_for(
            "tick",
            first.index + 1,
            Instant::now() + Duration::from_secs(10),
            |l| l.contains("tick"),
        );

        assert_eq!(second.map(|l| l.text), Ok("tick 2".to_string()));
    }

    #[test]
    fn send_reaches_the_child_stdin_and_output_is_logged() {
        let log = log_in_temp("send");
        let mut run = QemuRun::spawn(sh("read x; echo got $x"), &log).expect("spawn");

        run.send(b"ping\n").expect("send");
        let line = run.wait_for("echo", 0, Instant::now() + Duration::from_secs(10), |l| {
            l.starts_with("got")
        });

        assert_eq!(line.map(|l| l.text), Ok("got ping".to_string()));
        drop(run);
        assert!(log_tail(&log, 1)[0].ends_with("] got ping"));
        let _ = std::fs::remove_file(log);
    }
}
