//! Consoles: each partition's emulated PL011 feeds its ring and the host
//! UART (lines prefixed `[name] `); host UART input goes to the partition
//! marked for input, except the monitor escape Ctrl-A.

use crate::irq::Post;
use crate::log;
use crate::partition::{self, Partition};
use crate::percpu::{CpuLocal, PUBLIC};
use crate::{hvprint, LOCKSTAT};
use core::sync::atomic::{AtomicBool, Ordering};
use pinfold_hv::layout::GUEST_UART_INTID;

/// A guest access to its PL011. The console lock is the partition's own.
pub fn guest_access(
    cpu: &mut CpuLocal,
    p: &Partition,
    off: u64,
    width: u8,
    write: bool,
    value: u64,
) -> u64 {
    let mut posts = Post::new();
    let result;
    {
        let mut con = p.console.lock();
        let con = &mut *con;
        if write {
            let crate::partition::Console {
                pl011,
                prefix,
                ring,
            } = con;
            let source = p.index as u32 + 1;
            pl011.write(off, width, value, &mut |byte| {
                ring.push(&[byte]);
                prefix.feed(byte, &mut |line| log::write_from(source, line));
            });
            if prefix.ends_with_prompt() {
                prefix.flush(&mut |line| log::write_from(source, line));
            }
            result = 0;
        } else {
            result = con.pl011.read(off, width);
        }
        let level = con.pl011.irq_level();
        let mut dist = p.dist.lock();
        dist.set_emulated_level(GUEST_UART_INTID, level, &mut |act| {
            posts.dist_action(p, act)
        });
    }
    posts.deliver(cpu, p);
    result
}

static ESCAPE: AtomicBool = AtomicBool::new(false);
const CTRL_A: u8 = 0x01;

/// Host UART receive interrupt.
pub fn host_input(cpu: &mut CpuLocal) {
    let Some(uart) = log::uart() else { return };
    while let Some(byte) = uart.getc() {
        if ESCAPE.swap(false, Ordering::Relaxed) {
            match byte {
                b's' => stats(),
                b'x' => {
                    hvprint!("monitor: powering off");
                    crate::arch::firmware_smc(0x8400_0008, 0, 0, 0);
                }
                CTRL_A => to_guest(cpu, byte),
                _ => hvprint!(
                    "monitor: Ctrl-A s = stats, Ctrl-A x = power off, Ctrl-A Ctrl-A = send Ctrl-A"
                ),
            }
            continue;
        }
        if byte == CTRL_A {
            ESCAPE.store(true, Ordering::Relaxed);
            continue;
        }
        to_guest(cpu, byte);
    }
}

fn to_guest(cpu: &mut CpuLocal, byte: u8) {
    if let Some(p) = partition::all().iter().find(|p| p.plan.console.input) {
        input(cpu, p, &[byte]);
    }
}

/// Queue console input for `p`; returns how many bytes fitted in its RX FIFO.
pub fn input(cpu: &mut CpuLocal, p: &Partition, bytes: &[u8]) -> usize {
    let mut posts = Post::new();
    let accepted;
    {
        let mut con = p.console.lock();
        accepted = bytes.iter().take_while(|&&b| con.pl011.push_rx(b)).count();
        let level = con.pl011.irq_level();
        p.dist
            .lock()
            .set_emulated_level(GUEST_UART_INTID, level, &mut |act| {
                posts.dist_action(p, act)
            });
    }
    posts.deliver(cpu, p);
    accepted
}

/// The monitor's stats line (read by the tests).
pub fn stats() {
    let mut exits = 0;
    let mut injected = 0;
    for p in PUBLIC.iter() {
        exits += p.exits.load(Ordering::Relaxed);
        injected += p.injected.load(Ordering::Relaxed);
    }
    hvprint!(
        "stats hot_path_cross_cpu_locks={} exits={} injected={} heap_free={}",
        LOCKSTAT.total(),
        exits,
        injected,
        crate::heap::free_bytes()
    );
    for p in partition::all() {
        hvprint!(
            "stats partition={} state={} boots={} faults={}",
            p.name,
            p.state.load(Ordering::Relaxed),
            p.boot_count.load(Ordering::Relaxed),
            p.faults.load(Ordering::Relaxed)
        );
    }
}
