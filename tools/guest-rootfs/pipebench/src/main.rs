//! `pipebench`: the message-passing workload of the test guest's Linux, in
//! the shape of `perf bench sched pipe` (tools/perf/bench/sched-pipe.c):
//! two processes, two pipes, the parent writes a 4-byte word into the first
//! and reads it back from the second, the child reads the first and writes
//! the second. One *operation* is one such round trip, as in perf's
//! "usecs/op": two writes, two reads, and (on one CPU) two context switches.
//!
//! ```text
//! pipebench LOOPS [WARMUP]
//! ```
//!
//! It runs WARMUP untimed round trips (fork's copy-on-write faults, first
//! touches), then LOOPS timed ones, between two reads of the virtual counter
//! (CNTVCT_EL0, which Linux lets EL0 read) and two of CLOCK_MONOTONIC. With
//! two or more CPUs the parent is pinned to CPU 0 and the child to CPU 1, so
//! every hand-over crosses CPUs (a wake-up IPI); on one CPU they share it.
//! It prints, for `cargo xtask bench` (tools/xtask/src/bench/workload.rs):
//!
//! ```text
//! PINFOLD-WORKLOAD pipe: loops=.. warmup=.. cpus=.. placement=.. cntfrq=..
//!   cntvct_start=.. cntvct_end=.. mono_start_ns=.. mono_end_ns=..
//!   idle_start=.. idle_end=.. timer_irqs=.. ipis=..     (one line)
//! PINFOLD-WORKLOAD end status=0
//! ```
//!
//! `idle_*` are the idle + iowait jiffies of /proc/stat's `cpu` line (all
//! CPUs), so a reader can tell whether a CPU slept in the window.
//!
//! No libc: raw system calls, our own number printing, no `core::fmt`. The
//! target's config links a static PIE, which Linux loads anywhere; `_start`
//! applies its own R_AARCH64_RELATIVE relocations before any Rust runs.

#![no_std]
#![no_main]

use core::arch::{asm, global_asm};
use core::panic::PanicInfo;

// Entry from the kernel: sp -> argc, argv[], NULL, envp[], NULL, auxv.
// Relocates the image by its load address (the static PIE is linked at 0,
// so the address of its ELF header is the load bias): for each DT_RELA
// entry of type R_AARCH64_RELATIVE, *(bias + offset) = bias + addend. Any
// other relocation type exits with status 127. Then main(sp).
global_asm!(
    r#"
    .section .text._start, "ax"
    .global _start
    .type _start, %function
_start:
    mov     x20, sp
    adrp    x9, __ehdr_start
    add     x9, x9, :lo12:__ehdr_start
    adrp    x10, _DYNAMIC
    add     x10, x10, :lo12:_DYNAMIC
    mov     x11, #0
    mov     x12, #0
1:  ldp     x13, x14, [x10], #16
    cbz     x13, 3f
    cmp     x13, #7
    b.ne    2f
    add     x11, x9, x14
2:  cmp     x13, #8
    csel    x12, x14, x12, eq
    b       1b
3:  cbz     x11, 5f
    add     x12, x11, x12
4:  cmp     x11, x12
    b.hs    5f
    ldp     x13, x14, [x11]
    ldr     x15, [x11, #16]
    add     x11, x11, #24
    and     x14, x14, #0xffffffff
    mov     x16, #1027
    cmp     x14, x16
    b.ne    6f
    add     x15, x15, x9
    str     x15, [x9, x13]
    b       4b
5:  mov     x0, x20
    bl      pipebench_main
6:  mov     x0, #127
    mov     x8, #94
    svc     #0
    b       6b
    .size _start, . - _start
"#
);

const SYS_OPENAT: usize = 56;
const SYS_CLOSE: usize = 57;
const SYS_PIPE2: usize = 59;
const SYS_READ: usize = 63;
const SYS_WRITE: usize = 64;
const SYS_EXIT_GROUP: usize = 94;
const SYS_SCHED_SETAFFINITY: usize = 122;
const SYS_SCHED_GETAFFINITY: usize = 123;
const SYS_CLOCK_GETTIME: usize = 113;
const SYS_CLONE: usize = 220;
const SYS_WAIT4: usize = 260;

const AT_FDCWD: isize = -100;
const CLOCK_MONOTONIC: usize = 1;
const SIGCHLD: usize = 17;
const STDOUT: usize = 1;

/// `placement=` words, indexed by whether the processes are spread. A table
/// of string slices holds absolute addresses, so this static also makes the
/// linker emit R_AARCH64_RELATIVE relocations: every run exercises
/// `_start`'s relocation loop (a wrong bias would print garbage or fault).
static PLACEMENTS: [&str; 2] = ["shared", "cpu0,cpu1"];

/// Default counts when the command line gives none.
const DEFAULT_LOOPS: u64 = 10_000;
const DEFAULT_WARMUP: u64 = 100;

/// # Safety
/// `n` and the arguments must form a system call that is sound here.
unsafe fn syscall(n: usize, a: [usize; 5]) -> isize {
    let ret: isize;
    // SAFETY: the caller vouches for the call; `svc #0` clobbers only x0.
    unsafe {
        asm!(
            "svc #0",
            in("x8") n,
            inlateout("x0") a[0] => ret,
            in("x1") a[1],
            in("x2") a[2],
            in("x3") a[3],
            in("x4") a[4],
            options(nostack),
        );
    }
    ret
}

fn exit(status: usize) -> ! {
    loop {
        // SAFETY: exit_group takes a status and does not return.
        unsafe { syscall(SYS_EXIT_GROUP, [status, 0, 0, 0, 0]) };
    }
}

fn write_all(fd: usize, mut bytes: &[u8]) -> bool {
    while !bytes.is_empty() {
        // SAFETY: the buffer is valid for its length.
        let n = unsafe { syscall(SYS_WRITE, [fd, bytes.as_ptr() as usize, bytes.len(), 0, 0]) };
        if n <= 0 {
            return false;
        }
        bytes = bytes.get(n as usize..).unwrap_or_default();
    }
    true
}

fn read(fd: usize, buf: &mut [u8]) -> isize {
    // SAFETY: the buffer is valid and writable for its length.
    unsafe { syscall(SYS_READ, [fd, buf.as_mut_ptr() as usize, buf.len(), 0, 0]) }
}

fn close(fd: usize) {
    // SAFETY: closing a descriptor of ours.
    unsafe { syscall(SYS_CLOSE, [fd, 0, 0, 0, 0]) };
}

/// The virtual counter, after an ISB so earlier instructions are done.
fn cntvct() -> u64 {
    let v: u64;
    // SAFETY: Linux sets CNTKCTL_EL1.EL0VCTEN; reading has no side effect.
    unsafe { asm!("isb", "mrs {}, cntvct_el0", out(reg) v, options(nomem, nostack)) };
    v
}

fn cntfrq() -> u64 {
    let v: u64;
    // SAFETY: CNTFRQ_EL0 is readable at EL0; no side effect.
    unsafe { asm!("mrs {}, cntfrq_el0", out(reg) v, options(nomem, nostack)) };
    v
}

fn monotonic_ns() -> u64 {
    let mut ts = [0u64; 2];
    // SAFETY: `ts` is a valid struct timespec (two 64-bit words).
    let r = unsafe {
        syscall(
            SYS_CLOCK_GETTIME,
            [CLOCK_MONOTONIC, ts.as_mut_ptr() as usize, 0, 0, 0],
        )
    };
    if r != 0 {
        return 0;
    }
    ts[0].wrapping_mul(1_000_000_000).wrapping_add(ts[1])
}

/// A line being built in a fixed buffer (no allocator, no `core::fmt`).
struct Line {
    buf: [u8; 512],
    len: usize,
}

impl Line {
    fn new() -> Self {
        Self {
            buf: [0; 512],
            len: 0,
        }
    }

    fn text(&mut self, s: &str) -> &mut Self {
        for &b in s.as_bytes() {
            if let Some(slot) = self.buf.get_mut(self.len) {
                *slot = b;
                self.len += 1;
            }
        }
        self
    }

    fn num(&mut self, mut n: u64) -> &mut Self {
        let mut digits = [0u8; 20];
        let mut i = digits.len();
        loop {
            i -= 1;
            digits[i] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        for &d in digits.get(i..).unwrap_or_default() {
            if let Some(slot) = self.buf.get_mut(self.len) {
                *slot = d;
                self.len += 1;
            }
        }
        self
    }

    fn field(&mut self, key: &str, n: u64) -> &mut Self {
        self.text(" ").text(key).text("=").num(n)
    }

    fn print(&mut self) {
        self.text("\n");
        write_all(STDOUT, self.buf.get(..self.len).unwrap_or_default());
        self.len = 0;
    }
}

fn fail(what: &str) -> ! {
    Line::new()
        .text("PINFOLD-WORKLOAD error: ")
        .text(what)
        .print();
    exit(1)
}

/// A decimal argument; `None` when absent, failure when not a number.
///
/// # Safety
/// `arg` is null or a NUL-terminated string.
unsafe fn parse_arg(arg: *const u8) -> Option<u64> {
    if arg.is_null() {
        return None;
    }
    let mut n: u64 = 0;
    let mut p = arg;
    loop {
        // SAFETY: within the NUL-terminated string.
        let c = unsafe { *p };
        match c {
            0 => return Some(n),
            b'0'..=b'9' => {
                n = n
                    .checked_mul(10)
                    .and_then(|n| n.checked_add(u64::from(c - b'0')))
                    .unwrap_or_else(|| fail("argument overflows"));
            }
            _ => fail("usage: pipebench LOOPS [WARMUP]"),
        }
        // SAFETY: not past the NUL just read.
        p = unsafe { p.add(1) };
    }
}

/// idle + iowait jiffies of /proc/stat's aggregate `cpu` line, 0 when
/// unreadable.
fn idle_jiffies() -> u64 {
    let mut buf = [0u8; 256];
    let len = read_file(b"/proc/stat\0", &mut buf);
    // "cpu  user nice system idle iowait irq ..."
    let text = buf.get(..len).unwrap_or_default();
    let line = text.split(|&b| b == b'\n').next().unwrap_or_default();
    let mut fields = line.split(|&b| b == b' ').filter(|f| !f.is_empty());
    if fields.next() != Some(b"cpu") {
        return 0;
    }
    let idle = fields.nth(3).and_then(decimal).unwrap_or(0);
    let iowait = fields.next().and_then(decimal).unwrap_or(0);
    idle + iowait
}

/// Reads a whole (small) file into `buf`; the bytes read, 0 when unreadable.
fn read_file(path: &[u8], buf: &mut [u8]) -> usize {
    // SAFETY: `path` is NUL-terminated (the callers' literals); read-only open.
    let fd = unsafe {
        syscall(
            SYS_OPENAT,
            [AT_FDCWD as usize, path.as_ptr() as usize, 0, 0, 0],
        )
    };
    if fd < 0 {
        return 0;
    }
    let mut len = 0;
    while let Some(rest) = buf.get_mut(len..).filter(|rest| !rest.is_empty()) {
        let n = read(fd as usize, rest);
        if n <= 0 {
            break;
        }
        len += n as usize;
    }
    close(fd as usize);
    len
}

/// A decimal number, `None` when `word` is not one.
fn decimal(word: &[u8]) -> Option<u64> {
    if word.is_empty() {
        return None;
    }
    word.iter().try_fold(0u64, |n, &c| {
        c.is_ascii_digit()
            .then(|| n.wrapping_mul(10).wrapping_add(u64::from(c - b'0')))
    })
}

/// Interrupts taken so far, summed over CPUs, from /proc/interrupts: the
/// arch timer's lines and the IPI lines (`IPI0:` rescheduling, `IPI1:`
/// function call, ...). (0, 0) when unreadable.
fn interrupt_counts() -> (u64, u64) {
    let mut buf = [0u8; 8192];
    let len = read_file(b"/proc/interrupts\0", &mut buf);
    let (mut timer, mut ipi) = (0, 0);
    for line in buf.get(..len).unwrap_or_default().split(|&b| b == b'\n') {
        let mut words = line.split(|&b| b == b' ').filter(|w| !w.is_empty());
        let Some(label) = words.next() else { continue };
        // Per-CPU counts follow the label up to the first non-number.
        let sum: u64 = words.clone().map_while(decimal).sum();
        let is_timer = line.windows(10).any(|w| w == b"arch_timer");
        if label.starts_with(b"IPI") {
            ipi += sum;
        } else if is_timer {
            timer += sum;
        }
    }
    (timer, ipi)
}

/// Pins the calling process to `cpu`.
fn pin(cpu: usize) {
    let mask: u64 = 1 << cpu;
    // SAFETY: an 8-byte CPU mask of the calling process (pid 0).
    let r = unsafe {
        syscall(
            SYS_SCHED_SETAFFINITY,
            [0, 8, &mask as *const u64 as usize, 0, 0],
        )
    };
    if r != 0 {
        fail("sched_setaffinity");
    }
}

/// The CPUs this process may run on, as a mask of the first 64.
fn allowed_cpus() -> u64 {
    let mut mask = [0u64; 16];
    // SAFETY: a 128-byte buffer for the kernel's CPU mask.
    let r = unsafe {
        syscall(
            SYS_SCHED_GETAFFINITY,
            [0, 128, mask.as_mut_ptr() as usize, 0, 0],
        )
    };
    if r <= 0 {
        1
    } else {
        mask[0]
    }
}

fn pipe() -> [usize; 2] {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` holds the two descriptors pipe2 writes.
    let r = unsafe { syscall(SYS_PIPE2, [fds.as_mut_ptr() as usize, 0, 0, 0, 0]) };
    if r != 0 {
        fail("pipe2");
    }
    [fds[0] as usize, fds[1] as usize]
}

fn send(fd: usize, word: u32) {
    let bytes = word.to_ne_bytes();
    // SAFETY: 4 valid bytes.
    let n = unsafe { syscall(SYS_WRITE, [fd, bytes.as_ptr() as usize, 4, 0, 0]) };
    if n != 4 {
        fail("write");
    }
}

fn receive(fd: usize) -> u32 {
    let mut bytes = [0u8; 4];
    if read(fd, &mut bytes) != 4 {
        fail("read");
    }
    u32::from_ne_bytes(bytes)
}

/// # Safety
/// `sp` is the initial stack pointer the kernel gave the process.
#[no_mangle]
unsafe extern "C" fn pipebench_main(sp: *const usize) -> ! {
    // SAFETY: the kernel's initial stack: argc, then argc argv pointers.
    let (argc, argv) = unsafe { (*sp, sp.add(1) as *const *const u8) };
    // SAFETY: argv has argc entries, each a NUL-terminated string.
    let arg = |i: usize| unsafe { (i < argc).then(|| parse_arg(*argv.add(i))).flatten() };
    let loops = arg(1).unwrap_or(DEFAULT_LOOPS);
    let warmup = arg(2).unwrap_or(DEFAULT_WARMUP);
    let total = loops + warmup;

    let allowed = allowed_cpus();
    let cpus = u64::from(allowed.count_ones());
    let spread = allowed & 0b11 == 0b11;

    let [to_child_r, to_child_w] = pipe();
    let [to_parent_r, to_parent_w] = pipe();
    // fork(): clone with only the exit signal.
    // SAFETY: no threads, no locks held; the child only uses its own stack.
    let pid = unsafe { syscall(SYS_CLONE, [SIGCHLD, 0, 0, 0, 0]) };
    if pid < 0 {
        fail("clone");
    }
    if pid == 0 {
        if spread {
            pin(1);
        }
        close(to_child_w);
        close(to_parent_r);
        for _ in 0..total {
            let word = receive(to_child_r);
            send(to_parent_w, word);
        }
        exit(0);
    }
    if spread {
        pin(0);
    }
    close(to_child_r);
    close(to_parent_w);
    let round = |i: u64| {
        send(to_child_w, i as u32);
        if receive(to_parent_r) != i as u32 {
            fail("the child answered a different word");
        }
    };
    for i in 0..warmup {
        round(i);
    }
    let (timer_start, ipi_start) = interrupt_counts();
    let idle_start = idle_jiffies();
    let mono_start = monotonic_ns();
    let start = cntvct();
    for i in warmup..total {
        round(i);
    }
    let end = cntvct();
    let mono_end = monotonic_ns();
    let idle_end = idle_jiffies();
    let (timer_end, ipi_end) = interrupt_counts();

    let mut status: i32 = -1;
    // SAFETY: `status` receives the child's wait status.
    let r = unsafe {
        syscall(
            SYS_WAIT4,
            [pid as usize, &mut status as *mut i32 as usize, 0, 0, 0],
        )
    };
    if r != pid {
        fail("wait4");
    }
    let mut line = Line::new();
    line.text("PINFOLD-WORKLOAD pipe:")
        .field("loops", loops)
        .field("warmup", warmup)
        .field("cpus", cpus)
        .text(" placement=")
        .text(PLACEMENTS[usize::from(spread)])
        .field("cntfrq", cntfrq())
        .field("cntvct_start", start)
        .field("cntvct_end", end)
        .field("mono_start_ns", mono_start)
        .field("mono_end_ns", mono_end)
        .field("idle_start", idle_start)
        .field("idle_end", idle_end)
        .field("timer_irqs", timer_end.wrapping_sub(timer_start))
        .field("ipis", ipi_end.wrapping_sub(ipi_start))
        .print();
    // perf bench sched pipe's own summary, from CLOCK_MONOTONIC.
    let ns = mono_end.saturating_sub(mono_start);
    line.text("# Executed ")
        .num(loops)
        .text(" pipe operations between two processes: ")
        .num(ns / 1000)
        .text(" usecs total, ")
        .num(ns / loops.max(1))
        .text(" nsecs/op")
        .print();
    line.text("PINFOLD-WORKLOAD end")
        .field("status", status as u32 as u64)
        .print();
    exit(0)
}

#[panic_handler]
fn panic(_: &PanicInfo) -> ! {
    exit(101)
}
