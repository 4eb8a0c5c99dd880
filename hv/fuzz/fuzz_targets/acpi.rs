//! `hv::acpi` over arbitrary tables. The input is a flag byte and then
//! tables, each a little-endian u16 length and that many bytes; the
//! harness builds an RSDP and an XSDT listing them, places every blob at
//! its own made-up address, and (unless flag bit 0 is set) fixes each
//! table's checksum, so the fuzzer gets past the checksums into the
//! parsers. Flag bit 1 adds an XSDT entry pointing at the XSDT itself,
//! bit 2 one pointing outside memory.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pinfold_hv::acpi::{early_uart, parse_host_acpi, PhysRead};

struct Mem(Vec<(u64, Vec<u8>)>);

impl PhysRead for Mem {
    fn read(&self, addr: u64, len: usize) -> Option<&[u8]> {
        self.0.iter().find_map(|(base, bytes)| {
            let off = usize::try_from(addr.checked_sub(*base)?).ok()?;
            bytes.get(off..off.checked_add(len)?)
        })
    }
}

const RSDP: u64 = 0x1000;
const XSDT: u64 = 0x2000;

fn sum(bytes: &[u8]) -> u8 {
    bytes.iter().fold(0u8, |s, &b| s.wrapping_add(b))
}

fn fix(table: &mut [u8]) {
    if table.len() > 9 {
        table[9] = 0;
        table[9] = 0u8.wrapping_sub(sum(table));
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&flags, mut rest)) = data.split_first() else {
        return;
    };
    let mut regions = Vec::new();
    let mut entries = Vec::new();
    while rest.len() >= 2 && entries.len() < 16 {
        let len = usize::from(u16::from_le_bytes([rest[0], rest[1]])).min(rest.len() - 2);
        let mut table = rest[2..2 + len].to_vec();
        rest = &rest[2 + len..];
        if flags & 1 == 0 {
            fix(&mut table);
        }
        let addr = 0x10_0000 * (entries.len() as u64 + 1);
        entries.push(addr);
        regions.push((addr, table));
    }
    if flags & 2 != 0 {
        entries.push(XSDT);
    }
    if flags & 4 != 0 {
        entries.push(0xdead_0000);
    }
    let mut xsdt = Vec::new();
    xsdt.extend_from_slice(b"XSDT");
    xsdt.extend_from_slice(&((36 + 8 * entries.len()) as u32).to_le_bytes());
    xsdt.extend_from_slice(&[1, 0]);
    xsdt.extend_from_slice(b"BOCHS BXPC    ");
    xsdt.extend_from_slice(&[0; 12]);
    for e in &entries {
        xsdt.extend_from_slice(&e.to_le_bytes());
    }
    fix(&mut xsdt);
    let mut rsdp = Vec::new();
    rsdp.extend_from_slice(b"RSD PTR \0BOCHS \x02");
    rsdp.extend_from_slice(&[0; 4]);
    rsdp.extend_from_slice(&36u32.to_le_bytes());
    rsdp.extend_from_slice(&XSDT.to_le_bytes());
    rsdp.extend_from_slice(&[0; 4]);
    rsdp[8] = 0u8.wrapping_sub(sum(&rsdp[..20]));
    rsdp[32] = 0u8.wrapping_sub(sum(&rsdp));
    regions.push((RSDP, rsdp));
    regions.push((XSDT, xsdt));
    let mem = Mem(regions);
    let _ = parse_host_acpi(RSDP, &mem);
    let _ = early_uart(RSDP, &mem);
});
