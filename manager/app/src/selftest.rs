//! The start-up self-test of Hermit's FP/SIMD context switch. Two
//! threads hand the CPU to each other (`thread::yield_now`, a switch each
//! time) from inside inline assembly that holds its own values in D8-D15
//! and its own rounding mode in FPCR across the call: the procedure call
//! standard says a callee preserves both, so whatever switches tasks
//! inside the call must too. A third part keeps the full V0-V31 live in a
//! long loop while a ticker thread sleeps 1 ms at a time (switches on the
//! timer interrupt, where Hermit 0.11 preempts). Each thread checks what
//! only its own values can give. Without our kernel patch (FPCR, FPSR and
//! Q0-Q31 saved on every switch, `tools/xtask/src/hermit.rs`) the threads
//! see each other's values.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Instant;

/// Loop iterations per thread (about 50 instructions each): long enough
/// under TCG for many switches, short enough for the boot.
const ROUNDS: u64 = 2_000_000;

/// Runs the loop with every lane of V0..V31 starting at `seed + i` (V_i)
/// and adding 1 per round to V0..V15 and 3 to V16..V30 (V31 holds the 3):
/// returns the 32 registers' first lanes.
fn simd_work(seed: u32, rounds: u64) -> [u32; 32] {
    let mut out = [0u32; 32];
    let p = out.as_mut_ptr();
    // SAFETY: touches only V0-V31 (declared clobbered), the counter and
    // `out` (32 u32s, written with 32 4-byte stores).
    unsafe {
        std::arch::asm!(
            "mov w9, {seed:w}",
            "dup v0.4s, w9", "add w9, w9, #1", "dup v1.4s, w9", "add w9, w9, #1",
            "dup v2.4s, w9", "add w9, w9, #1", "dup v3.4s, w9", "add w9, w9, #1",
            "dup v4.4s, w9", "add w9, w9, #1", "dup v5.4s, w9", "add w9, w9, #1",
            "dup v6.4s, w9", "add w9, w9, #1", "dup v7.4s, w9", "add w9, w9, #1",
            "dup v8.4s, w9", "add w9, w9, #1", "dup v9.4s, w9", "add w9, w9, #1",
            "dup v10.4s, w9", "add w9, w9, #1", "dup v11.4s, w9", "add w9, w9, #1",
            "dup v12.4s, w9", "add w9, w9, #1", "dup v13.4s, w9", "add w9, w9, #1",
            "dup v14.4s, w9", "add w9, w9, #1", "dup v15.4s, w9", "add w9, w9, #1",
            "dup v16.4s, w9", "add w9, w9, #1", "dup v17.4s, w9", "add w9, w9, #1",
            "dup v18.4s, w9", "add w9, w9, #1", "dup v19.4s, w9", "add w9, w9, #1",
            "dup v20.4s, w9", "add w9, w9, #1", "dup v21.4s, w9", "add w9, w9, #1",
            "dup v22.4s, w9", "add w9, w9, #1", "dup v23.4s, w9", "add w9, w9, #1",
            "dup v24.4s, w9", "add w9, w9, #1", "dup v25.4s, w9", "add w9, w9, #1",
            "dup v26.4s, w9", "add w9, w9, #1", "dup v27.4s, w9", "add w9, w9, #1",
            "dup v28.4s, w9", "add w9, w9, #1", "dup v29.4s, w9", "add w9, w9, #1",
            "dup v30.4s, w9",
            "2:",
            "mvni v31.4s, #0", // v31 = all ones = -1 per lane...
            "neg v31.4s, v31.4s", // ... negated: 1
            "add v0.4s, v0.4s, v31.4s", "add v1.4s, v1.4s, v31.4s",
            "add v2.4s, v2.4s, v31.4s", "add v3.4s, v3.4s, v31.4s",
            "add v4.4s, v4.4s, v31.4s", "add v5.4s, v5.4s, v31.4s",
            "add v6.4s, v6.4s, v31.4s", "add v7.4s, v7.4s, v31.4s",
            "add v8.4s, v8.4s, v31.4s", "add v9.4s, v9.4s, v31.4s",
            "add v10.4s, v10.4s, v31.4s", "add v11.4s, v11.4s, v31.4s",
            "add v12.4s, v12.4s, v31.4s", "add v13.4s, v13.4s, v31.4s",
            "add v14.4s, v14.4s, v31.4s", "add v15.4s, v15.4s, v31.4s",
            "movi v31.4s, #3",
            "add v16.4s, v16.4s, v31.4s", "add v17.4s, v17.4s, v31.4s",
            "add v18.4s, v18.4s, v31.4s", "add v19.4s, v19.4s, v31.4s",
            "add v20.4s, v20.4s, v31.4s", "add v21.4s, v21.4s, v31.4s",
            "add v22.4s, v22.4s, v31.4s", "add v23.4s, v23.4s, v31.4s",
            "add v24.4s, v24.4s, v31.4s", "add v25.4s, v25.4s, v31.4s",
            "add v26.4s, v26.4s, v31.4s", "add v27.4s, v27.4s, v31.4s",
            "add v28.4s, v28.4s, v31.4s", "add v29.4s, v29.4s, v31.4s",
            "add v30.4s, v30.4s, v31.4s",
            "subs {n}, {n}, #1",
            "b.ne 2b",
            "str s0, [{p}, #0]", "str s1, [{p}, #4]", "str s2, [{p}, #8]", "str s3, [{p}, #12]",
            "str s4, [{p}, #16]", "str s5, [{p}, #20]", "str s6, [{p}, #24]", "str s7, [{p}, #28]",
            "str s8, [{p}, #32]", "str s9, [{p}, #36]", "str s10, [{p}, #40]", "str s11, [{p}, #44]",
            "str s12, [{p}, #48]", "str s13, [{p}, #52]", "str s14, [{p}, #56]", "str s15, [{p}, #60]",
            "str s16, [{p}, #64]", "str s17, [{p}, #68]", "str s18, [{p}, #72]", "str s19, [{p}, #76]",
            "str s20, [{p}, #80]", "str s21, [{p}, #84]", "str s22, [{p}, #88]", "str s23, [{p}, #92]",
            "str s24, [{p}, #96]", "str s25, [{p}, #100]", "str s26, [{p}, #104]", "str s27, [{p}, #108]",
            "str s28, [{p}, #112]", "str s29, [{p}, #116]", "str s30, [{p}, #120]", "str s31, [{p}, #124]",
            seed = in(reg) seed,
            n = inout(reg) rounds => _,
            p = in(reg) p,
            out("x9") _,
            out("v0") _, out("v1") _, out("v2") _, out("v3") _, out("v4") _, out("v5") _,
            out("v6") _, out("v7") _, out("v8") _, out("v9") _, out("v10") _, out("v11") _,
            out("v12") _, out("v13") _, out("v14") _, out("v15") _, out("v16") _, out("v17") _,
            out("v18") _, out("v19") _, out("v20") _, out("v21") _, out("v22") _, out("v23") _,
            out("v24") _, out("v25") _, out("v26") _, out("v27") _, out("v28") _, out("v29") _,
            out("v30") _, out("v31") _,
            options(nostack)
        );
    }
    out
}

/// Yields from inside [`yield_keeping`]'s assembly.
extern "C" fn yield_now_c() {
    thread::yield_now();
}

/// One round: D8-D15 = `base + i`, FPCR = `fpcr`, a yield (a task switch),
/// then what D8-D15 and FPCR are afterwards (FPCR back to 0).
fn yield_keeping(base: u64, fpcr: u64) -> [u64; 9] {
    let mut out = [0u64; 9];
    let f: extern "C" fn() = yield_now_c;
    // SAFETY: x20/x21 are callee-saved, so they survive the call; the
    // call itself follows the C ABI (clobber_abi); `out` takes 9 u64s.
    unsafe {
        std::arch::asm!(
            "mov x21, {base}",
            "fmov d8, x21", "add x21, x21, #1", "fmov d9, x21", "add x21, x21, #1",
            "fmov d10, x21", "add x21, x21, #1", "fmov d11, x21", "add x21, x21, #1",
            "fmov d12, x21", "add x21, x21, #1", "fmov d13, x21", "add x21, x21, #1",
            "fmov d14, x21", "add x21, x21, #1", "fmov d15, x21",
            "msr fpcr, {fpcr}",
            "blr {f}",
            "str d8, [x20, #0]", "str d9, [x20, #8]", "str d10, [x20, #16]", "str d11, [x20, #24]",
            "str d12, [x20, #32]", "str d13, [x20, #40]", "str d14, [x20, #48]", "str d15, [x20, #56]",
            "mrs x21, fpcr",
            "str x21, [x20, #64]",
            "msr fpcr, xzr",
            base = in(reg) base,
            fpcr = in(reg) fpcr,
            f = in(reg) f,
            in("x20") out.as_mut_ptr(),
            out("x21") _,
            out("v8") _, out("v9") _, out("v10") _, out("v11") _,
            out("v12") _, out("v13") _, out("v14") _, out("v15") _,
            clobber_abi("C"),
        );
    }
    out
}

/// Switches (yields) per thread in the callee-saved test.
const YIELDS: u64 = 2_000;

/// The callee-saved half: Err names the thread, round and register.
fn yielding_threads() -> Result<(), String> {
    let workers: Vec<_> = [(1u64, 0x0040_0000u64), (2, 0x0080_0000)]
        .into_iter()
        .map(|(id, fpcr)| {
            thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || {
                    for round in 0..YIELDS {
                        let base = (id << 48) | (round << 8);
                        let got = yield_keeping(base, fpcr);
                        for (i, &v) in got[..8].iter().enumerate() {
                            if v != base + i as u64 {
                                return Err(format!(
                                    "thread {id} round {round}: D{} = {v:#x} after a switch, expected {:#x}",
                                    8 + i,
                                    base + i as u64
                                ));
                            }
                        }
                        if got[8] != fpcr {
                            return Err(format!(
                                "thread {id} round {round}: FPCR = {:#x} after a switch, expected {fpcr:#x}",
                                got[8]
                            ));
                        }
                    }
                    Ok(())
                })
        })
        .collect();
    let mut first = Ok(());
    for w in workers {
        let r = w
            .map_err(|e| format!("cannot start a worker: {e}"))?
            .join()
            .map_err(|_| "a worker panicked".to_string())?;
        if first.is_ok() {
            first = r;
        }
    }
    first
}

/// What [`simd_work`] must give.
fn expected(seed: u32, rounds: u64) -> [u32; 32] {
    let mut e = [0u32; 32];
    for (i, v) in e.iter_mut().enumerate() {
        let step = if i < 16 { 1 } else { 3 };
        *v = seed
            .wrapping_add(i as u32)
            .wrapping_add((rounds as u32).wrapping_mul(step));
    }
    e[31] = 3;
    e
}

/// Runs the test: Ok(sentence) or Err(sentence naming the thread and
/// register that was wrong).
pub fn simd_threads() -> Result<String, String> {
    let start = Instant::now();
    let yielded = yielding_threads();
    let stop = Arc::new(AtomicBool::new(false));
    let ticks = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let ticker = {
        let (stop, ticks) = (stop.clone(), ticks.clone());
        thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    thread::sleep(std::time::Duration::from_millis(1));
                    ticks.fetch_add(1, Ordering::Relaxed);
                }
            })
            .map_err(|e| format!("cannot start the ticker: {e}"))?
    };
    let seeds = [0x1000_0000u32, 0x7000_0000];
    let workers: Vec<_> = seeds
        .iter()
        .map(|&seed| {
            thread::Builder::new()
                .stack_size(64 * 1024)
                .spawn(move || (seed, simd_work(seed, ROUNDS)))
        })
        .collect();
    let mut failure = None;
    for w in workers {
        let (seed, got) = w
            .map_err(|e| format!("cannot start a worker: {e}"))?
            .join()
            .map_err(|_| "a worker panicked".to_string())?;
        let want = expected(seed, ROUNDS);
        if let Some(i) = (0..32).find(|&i| got[i] != want[i]) {
            failure.get_or_insert(format!(
                "thread with seed {seed:#x}: V{i} = {:#x}, expected {:#x}",
                got[i], want[i]
            ));
        }
    }
    stop.store(true, Ordering::Relaxed);
    let _ = ticker.join();
    let what = format!(
        "2 threads x {YIELDS} switches keeping D8-D15 and FPCR, 2 threads x {ROUNDS} rounds over \
         V0-V31 with {} ticks, {} ms",
        ticks.load(Ordering::Relaxed),
        start.elapsed().as_millis()
    );
    match (yielded, failure) {
        (Ok(()), None) => Ok(what),
        (Err(f), _) | (Ok(()), Some(f)) => Err(format!("{what}: {f}")),
    }
}
