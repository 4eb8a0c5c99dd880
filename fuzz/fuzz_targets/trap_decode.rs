//! Trap decoding: any ESR/FAR/HPFAR a CPU could report decodes to an
//! `Exit` without panicking; a decoded exit re-encodes to a syndrome that
//! decodes to the same exit; MMIO value helpers and exception injection
//! take any access and any guest state; PSCI/SMCCC decoding and the in-line
//! query answer any registers.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pinfold_hv::{psci, trap};

fn u64_at(data: &[u8], i: usize) -> u64 {
    let mut b = [0u8; 8];
    for (k, slot) in b.iter_mut().enumerate() {
        *slot = data.get(i * 8 + k).copied().unwrap_or(0);
    }
    u64::from_le_bytes(b)
}

fuzz_target!(|data: &[u8]| {
    let (esr, far, hpfar, reg) = (
        u64_at(data, 0),
        u64_at(data, 1),
        u64_at(data, 2),
        u64_at(data, 3),
    );
    let exit = trap::decode(esr, far, hpfar);
    let (e2, f2, h2) = trap::encode(&exit);
    assert_eq!(trap::decode(e2, f2, h2), exit, "re-encoded {exit:?}");
    if let trap::Exit::DataAbort {
        access: Some(a), ..
    } = &exit
    {
        let _ = trap::mmio_load_value(a, reg);
        let _ = trap::mmio_store_value(a, reg);
    }
    for kind in [
        trap::InjectKind::DataAbort,
        trap::InjectKind::InstrAbort,
        trap::InjectKind::Undefined,
    ] {
        let _ = trap::inject(kind, reg, far, hpfar);
    }
    let (x0, x1, x2, x3) = (
        u64_at(data, 4),
        u64_at(data, 5),
        u64_at(data, 6),
        u64_at(data, 7),
    );
    let _ = psci::decode(x0, x1, x2, x3);
    let _ = psci::query(x0, x1);
});
