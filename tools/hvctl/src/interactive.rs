//! `hvctl console NAME` on a terminal: the terminal in raw mode (through
//! `stty`, so no terminal crate is needed), the partition's output printed
//! as it comes (following the console's `next` offsets), every typed key
//! sent to its input in order (a sender thread, each POST continuing at
//! the reply's `accepted`), and an escape key to leave: Ctrl-] then `q`
//! (as telnet's Ctrl-]). Ctrl-] twice sends one Ctrl-]; Ctrl-] then any
//! other key sends that key.

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

/// Ctrl-]: the escape key.
pub const ESCAPE: u8 = 0x1d;
/// What follows the escape key to quit.
pub const QUIT: u8 = b'q';
/// How often the console is read while nothing arrives.
pub const POLL: Duration = Duration::from_millis(150);

/// What a typed byte means.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    /// Send these bytes to the partition.
    Send(Vec<u8>),
    /// Leave.
    Quit,
    /// Nothing yet (the escape key, waiting for the next).
    Wait,
}

/// The escape key's state machine.
#[derive(Debug, Default)]
pub struct Escape {
    armed: bool,
}

impl Escape {
    pub fn feed(&mut self, byte: u8) -> Key {
        if std::mem::take(&mut self.armed) {
            return match byte {
                QUIT | b'Q' => Key::Quit,
                _ => Key::Send(vec![byte]),
            };
        }
        if byte == ESCAPE {
            self.armed = true;
            Key::Wait
        } else {
            Key::Send(vec![byte])
        }
    }
}

/// The terminal's settings before raw mode, restored when dropped.
pub struct RawTerminal {
    saved: Option<String>,
}

fn stty(args: &[&str]) -> Option<String> {
    let tty = std::fs::File::open("/dev/tty").ok()?;
    let out = Command::new("stty")
        .args(args)
        .stdin(Stdio::from(tty))
        .stderr(Stdio::null())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

impl RawTerminal {
    /// Raw mode, no echo (`stty raw -echo`); the old settings are kept.
    pub fn enter() -> RawTerminal {
        let saved = stty(&["-g"]);
        if saved.is_some() {
            let _ = stty(&["raw", "-echo"]);
        }
        RawTerminal { saved }
    }
}

impl Drop for RawTerminal {
    fn drop(&mut self) {
        if let Some(s) = &self.saved {
            let _ = stty(&[s.as_str()]);
        }
    }
}

/// Reads stdin byte by byte into `keys` until the escape says quit (then
/// sets `quit`) or stdin ends.
pub fn read_keys(mut stdin: impl Read, keys: mpsc::Sender<Vec<u8>>, quit: Arc<AtomicBool>) {
    let mut esc = Escape::default();
    let mut buf = [0u8; 256];
    loop {
        let n = match stdin.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut send = Vec::new();
        for &b in &buf[..n] {
            match esc.feed(b) {
                Key::Send(bytes) => send.extend(bytes),
                Key::Wait => {}
                Key::Quit => {
                    if !send.is_empty() {
                        let _ = keys.send(std::mem::take(&mut send));
                    }
                    quit.store(true, Ordering::Release);
                    return;
                }
            }
        }
        if !send.is_empty() && keys.send(send).is_err() {
            break;
        }
    }
    quit.store(true, Ordering::Release);
}

/// Writes `bytes` to the terminal and flushes.
pub fn show(out: &mut impl Write, bytes: &[u8]) -> std::io::Result<()> {
    out.write_all(bytes)?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ctrl_bracket_then_q_quits_and_other_keys_pass() {
        let mut e = Escape::default();
        assert_eq!(e.feed(b'a'), Key::Send(vec![b'a']));
        assert_eq!(e.feed(ESCAPE), Key::Wait);
        assert_eq!(e.feed(ESCAPE), Key::Send(vec![ESCAPE]), "twice: one sent");
        assert_eq!(e.feed(b'q'), Key::Send(vec![b'q']), "q alone is a key");
        assert_eq!(e.feed(ESCAPE), Key::Wait);
        assert_eq!(e.feed(b'x'), Key::Send(vec![b'x']));
        assert_eq!(e.feed(ESCAPE), Key::Wait);
        assert_eq!(e.feed(b'q'), Key::Quit);
    }

    #[test]
    fn keys_before_the_escape_are_sent_then_reading_stops() {
        let (tx, rx) = mpsc::channel();
        let quit = Arc::new(AtomicBool::new(false));
        let input: &[u8] = b"ls\r\x1dqmore";

        read_keys(input, tx, quit.clone());

        assert_eq!(rx.iter().collect::<Vec<_>>(), [b"ls\r".to_vec()]);
        assert!(quit.load(Ordering::Acquire));
    }
}
