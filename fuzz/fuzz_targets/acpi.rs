//! The ACPI reader: the input is physical memory at `BASE` with the RSDP at
//! its start. With the first byte odd, the checksums of the RSDP, the XSDT
//! and every table it lists are fixed first, so the fuzzer reaches the
//! table parsers instead of stopping at a checksum. Never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pinfold_hv::acpi::{early_uart, parse_host_acpi, parse_host_acpi_gicv5, PhysRead};

const BASE: u64 = 0x1000_0000;

struct Mem<'a>(&'a [u8]);

impl PhysRead for Mem<'_> {
    fn read(&self, addr: u64, len: usize) -> Option<&[u8]> {
        let off = usize::try_from(addr.checked_sub(BASE)?).ok()?;
        self.0.get(off..off.checked_add(len)?)
    }
}

fn sum(bytes: &[u8]) -> u8 {
    bytes.iter().fold(0u8, |s, &b| s.wrapping_add(b))
}

fn u32_at(m: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(m.get(off..off + 4)?.try_into().ok()?))
}

fn u64_at(m: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_le_bytes(m.get(off..off + 8)?.try_into().ok()?))
}

/// Sets the checksum byte (offset 9) of the SDT at `off`.
fn fix_table(m: &mut [u8], off: usize) -> Option<usize> {
    let len = u32_at(m, off + 4)? as usize;
    let table = m.get_mut(off..off.checked_add(len)?)?;
    if len < 36 {
        return None;
    }
    table[9] = 0;
    table[9] = 0u8.wrapping_sub(sum(table));
    Some(len)
}

fn fix(m: &mut [u8]) -> Option<()> {
    if m.len() < 36 {
        return None;
    }
    m[8] = 0;
    m[8] = 0u8.wrapping_sub(sum(&m[..20]));
    m[32] = 0;
    m[32] = 0u8.wrapping_sub(sum(&m[..36]));
    let xsdt = usize::try_from(u64_at(m, 24)?.checked_sub(BASE)?).ok()?;
    let len = u32_at(m, xsdt + 4)? as usize;
    // Bounded by the input, not by the (fuzzed) XSDT length.
    for i in 0..(len.saturating_sub(36) / 8).min(m.len() / 8) {
        if let Some(addr) = u64_at(m, xsdt + 36 + 8 * i) {
            if let Some(off) = addr.checked_sub(BASE).and_then(|a| usize::try_from(a).ok()) {
                let _ = fix_table(m, off);
            }
        }
    }
    fix_table(m, xsdt)?;
    // The RSDP's extended checksum covers the XSDT address: redo it.
    m[32] = 0;
    m[32] = 0u8.wrapping_sub(sum(&m[..36]));
    Some(())
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut mem = rest.to_vec();
    if mode & 1 == 1 {
        let _ = fix(&mut mem);
    }
    let m = Mem(&mem);
    let _ = parse_host_acpi(BASE, &m);
    let _ = parse_host_acpi_gicv5(BASE, &m);
    let _ = early_uart(BASE, &m);
});
