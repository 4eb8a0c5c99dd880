//! The ACPI parser against the tables edk2 (Debian qemu-efi-aarch64
//! 2022.11) gives Linux on QEMU 7.2 `virt,virtualization=on` (testdata/
//! README.md says how they were captured), and against corrupted and
//! hand-built tables.

use alloc::string::ToString;
use alloc::vec;
use alloc::vec::Vec;

use super::*;
use crate::dtb::{host_resources, parse_host_dtb, Conduit, GicInfo, PsciInfo, TimerPpis, UartInfo};

static APIC: &[u8] = include_bytes!("testdata/APIC.bin");
static APIC_GICV4: &[u8] = include_bytes!("testdata/APIC-gicv4.bin");
static FACP: &[u8] = include_bytes!("testdata/FACP.bin");
static GTDT: &[u8] = include_bytes!("testdata/GTDT.bin");
static MCFG: &[u8] = include_bytes!("testdata/MCFG.bin");
static SPCR: &[u8] = include_bytes!("testdata/SPCR.bin");
static IORT: &[u8] = include_bytes!("testdata/IORT.bin");
static DBG2: &[u8] = include_bytes!("testdata/DBG2.bin");
static PPTT: &[u8] = include_bytes!("testdata/PPTT.bin");
/// QEMU 7.2's DTB for the same machine (-M virt,virtualization=on,
/// gic-version=3 -cpu cortex-a72 -smp 4 -m 2G); its gic-version=4 DTB
/// differs only in the seeds.
static QEMU_VIRT_DTB: &[u8] = include_bytes!("../dtb/testdata/qemu-virt-gicv3.dtb");

/// Where the boot that captured the tables had them (Linux's "ACPI:" boot
/// lines), in XSDT order.
const RSDP_ADDR: u64 = 0xbc43_0018;
const XSDT_ADDR: u64 = 0xbc43_fe98;
const LAYOUT: [(&[u8; 4], u64); 8] = [
    (b"FACP", 0xbc43_fa98),
    (b"APIC", 0xbc43_fc18),
    (b"PPTT", 0xbc43_d898),
    (b"GTDT", 0xbc43_e818),
    (b"MCFG", 0xbc43_e918),
    (b"SPCR", 0xbc43_ff98),
    (b"DBG2", 0xbc43_e418),
    (b"IORT", 0xbc43_e718),
];

/// Physical memory made of separate regions; a read must fit one.
struct Mem {
    regions: Vec<(u64, Vec<u8>)>,
}

impl PhysRead for Mem {
    fn read(&self, addr: u64, len: usize) -> Option<&[u8]> {
        self.regions.iter().find_map(|(base, bytes)| {
            let off = usize::try_from(addr.checked_sub(*base)?).ok()?;
            bytes.get(off..off.checked_add(len)?)
        })
    }
}

/// Sets the checksum byte (offset 9 of an SDT header) so the table sums
/// to 0.
fn fix_checksum(table: &mut [u8]) {
    table[9] = 0;
    let sum = table.iter().fold(0u8, |s, &b| s.wrapping_add(b));
    table[9] = 0u8.wrapping_sub(sum);
}

fn set_len(table: &mut [u8], len: u32) {
    table[4..8].copy_from_slice(&len.to_le_bytes());
}

fn header(signature: &[u8; 4], revision: u8, body_len: usize) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(signature);
    t.extend_from_slice(&((36 + body_len) as u32).to_le_bytes());
    t.push(revision);
    t.push(0);
    t.extend_from_slice(b"BOCHS ");
    t.extend_from_slice(b"BXPC    ");
    t.extend_from_slice(&1u32.to_le_bytes());
    t.extend_from_slice(&[0; 4]);
    t.extend_from_slice(&0x0100_0013u32.to_le_bytes());
    t
}

/// The RSDP as edk2 builds it: revision 2, OEM "BOCHS ", no RSDT.
fn rsdp(xsdt: u64) -> Vec<u8> {
    let mut r = Vec::new();
    r.extend_from_slice(b"RSD PTR ");
    r.push(0);
    r.extend_from_slice(b"BOCHS ");
    r.push(2);
    r.extend_from_slice(&0u32.to_le_bytes());
    r.extend_from_slice(&36u32.to_le_bytes());
    r.extend_from_slice(&xsdt.to_le_bytes());
    r.extend_from_slice(&[0; 4]);
    fix_rsdp(&mut r);
    r
}

fn fix_rsdp(r: &mut [u8]) {
    r[8] = 0;
    r[32] = 0;
    r[8] = 0u8.wrapping_sub(r[..20].iter().fold(0u8, |s, &b| s.wrapping_add(b)));
    r[32] = 0u8.wrapping_sub(r.iter().fold(0u8, |s, &b| s.wrapping_add(b)));
}

fn xsdt(entries: &[u64]) -> Vec<u8> {
    let mut x = header(b"XSDT", 1, 8 * entries.len());
    for e in entries {
        x.extend_from_slice(&e.to_le_bytes());
    }
    fix_checksum(&mut x);
    x
}

/// The captured machine: RSDP, XSDT and tables at their addresses.
#[derive(Clone)]
struct Fixture {
    rsdp: Vec<u8>,
    xsdt: Vec<u8>,
    tables: Vec<(u64, Vec<u8>)>,
}

impl Fixture {
    fn qemu(apic: &[u8]) -> Fixture {
        let blob = |sig: &[u8; 4]| -> &[u8] {
            match sig {
                b"FACP" => FACP,
                b"APIC" => apic,
                b"PPTT" => PPTT,
                b"GTDT" => GTDT,
                b"MCFG" => MCFG,
                b"SPCR" => SPCR,
                b"DBG2" => DBG2,
                _ => IORT,
            }
        };
        Fixture {
            rsdp: rsdp(XSDT_ADDR),
            xsdt: xsdt(&LAYOUT.map(|(_, a)| a)),
            tables: LAYOUT
                .iter()
                .map(|&(sig, addr)| (addr, blob(sig).to_vec()))
                .collect(),
        }
    }

    fn table(&mut self, sig: &[u8; 4]) -> &mut Vec<u8> {
        let addr = LAYOUT.iter().find(|(s, _)| *s == sig).unwrap().1;
        &mut self.tables.iter_mut().find(|(a, _)| *a == addr).unwrap().1
    }

    /// Replaces a table's body (after the 36-byte header), fixing length
    /// and checksum.
    fn set_body(&mut self, sig: &[u8; 4], body: &[u8]) {
        let t = self.table(sig);
        t.truncate(36);
        t.extend_from_slice(body);
        let len = t.len() as u32;
        set_len(t, len);
        fix_checksum(t);
    }

    fn mem(&self) -> Mem {
        let mut regions = vec![
            (RSDP_ADDR, self.rsdp.clone()),
            (XSDT_ADDR, self.xsdt.clone()),
        ];
        regions.extend(self.tables.iter().cloned());
        Mem { regions }
    }

    fn parse(&self) -> Result<AcpiTables, AcpiError> {
        parse_host_acpi(RSDP_ADDR, &self.mem())
    }
}

fn qemu() -> Fixture {
    Fixture::qemu(APIC)
}

fn malformed(table: &[u8; 4], what: &'static str) -> AcpiError {
    AcpiError::Malformed {
        table: Signature(*table),
        what,
    }
}

// --- the captured QEMU tables, exact values ---

#[test]
fn captured_tables_have_valid_lengths_and_checksums() {
    for t in [APIC, APIC_GICV4, FACP, GTDT, MCFG, SPCR, IORT, DBG2, PPTT] {
        assert_eq!(
            u32::from_le_bytes(t[4..8].try_into().unwrap()) as usize,
            t.len()
        );
        assert!(checksum_ok(t));
    }
}

#[test]
fn madt_gives_the_four_cpus_in_order_and_the_gicv3() {
    let host = qemu().parse().unwrap().host;

    assert_eq!(host.cpus, [0, 1, 2, 3]);
    assert_eq!(
        host.gic,
        GicInfo::described(
            (0x800_0000, 0x1_0000),
            vec![(0x80a_0000, 0xf6_0000)],
            None,
            Some(25),
            vec![(0x808_0000, 0x2_0000)],
        )
    );
}

#[test]
fn gicv4_madt_reports_what_the_dt_path_reports_for_gicv4() {
    // QEMU's gic-version=4 DTB has the same GIC node (no
    // redistributor-stride); the driver finds the 4-frame stride from
    // GICR_TYPER.VLPIS, so the ACPI path reports no stride either.
    let v3 = qemu().parse().unwrap().host;
    let v4 = Fixture::qemu(APIC_GICV4).parse().unwrap().host;

    assert_eq!(APIC_GICV4[44 + 20], 4, "the captured GICD says version 4");
    assert_eq!(v4, v3);
}

#[test]
fn gtdt_gives_the_timer_intids() {
    let host = qemu().parse().unwrap().host;

    assert_eq!(
        host.timer,
        Some(TimerPpis {
            sec_phys: 29,
            phys: 30,
            virt: 27,
            hyp: 26
        })
    );
}

#[test]
fn spcr_gives_the_pl011_and_its_spi() {
    let host = qemu().parse().unwrap().host;

    assert_eq!(
        host.uart,
        Some(UartInfo {
            base: 0x900_0000,
            size: 0x1000,
            intid: Some(33)
        })
    );
}

#[test]
fn fadt_gives_psci_over_smc() {
    let host = qemu().parse().unwrap().host;

    assert_eq!(
        host.psci,
        Some(PsciInfo {
            conduit: Conduit::Smc,
            cpu_on_fid: 0xC400_0003
        })
    );
}

#[test]
fn mcfg_gives_the_ecam_and_the_board_fallback_the_rest() {
    let tables = qemu().parse().unwrap();
    let pcie = tables.host.pcie.unwrap();

    assert_eq!(pcie.ecam, (0x40_1000_0000, 0x1000_0000));
    assert_eq!(pcie.bus_range, (0, 0xff));
    assert_eq!(pcie.node_path, "/pcie@10000000");
    assert_eq!(tables.board, Some("QEMU virt"));
    assert_eq!(tables.warnings, []);
}

#[test]
fn iort_keeps_the_its_group_and_the_root_complex_mapping_to_it() {
    let iort = qemu().parse().unwrap().iort.unwrap();

    assert_eq!(
        iort,
        Iort {
            its_groups: vec![IortItsGroup {
                offset: 0x30,
                its_ids: vec![0]
            }],
            smmus: vec![],
            root_complexes: vec![IortRootComplex {
                offset: 0x48,
                cca: 1,
                ats: 0,
                segment: 0,
                memory_address_limit: 64,
                id_mappings: vec![IortIdMapping {
                    input_base: 0,
                    num_ids: 0xffff,
                    output_base: 0,
                    output_ref: 0x30,
                    flags: 0
                }],
            }],
            iwbs: vec![],
            other_nodes: 0,
        }
    );
}

/// Everything the DT path reports for the same machine, but what ACPI does
/// not describe: RAM and its reservations (the UEFI memory map's), the
/// seeds (EFI_RNG_PROTOCOL's) and the root `model`.
fn assert_same_as_dtb(acpi: &HostInfo) {
    let dt = parse_host_dtb(QEMU_VIRT_DTB).unwrap();

    assert_eq!(acpi.cpus, dt.cpus);
    assert_eq!(acpi.gic, dt.gic);
    assert_eq!(acpi.timer, dt.timer);
    assert_eq!(acpi.uart, dt.uart);
    assert_eq!(acpi.psci, dt.psci);
    assert_eq!(acpi.pcie, dt.pcie);
    assert_eq!(acpi.devices.len(), dt.devices.len());
    for (a, d) in acpi.devices.iter().zip(&dt.devices) {
        assert_eq!(a, d);
    }
    // The fields that legitimately differ.
    assert_eq!(acpi.memory, []);
    assert_eq!(acpi.reserved, []);
    assert_eq!(
        (&acpi.rng_seed, acpi.kaslr_seed, &acpi.model),
        (&None, None, &None)
    );
    assert_ne!(dt.memory, []);
    assert!(dt.rng_seed.is_some() && dt.kaslr_seed.is_some() && dt.model.is_some());
    // ...and nothing else.
    let mut filled = acpi.clone();
    filled.memory = dt.memory.clone();
    filled.reserved = dt.reserved.clone();
    filled.rng_seed = dt.rng_seed.clone();
    filled.kaslr_seed = dt.kaslr_seed;
    filled.model = dt.model.clone();
    assert_eq!(filled, dt);
    assert_eq!(host_resources(&filled, &[]), host_resources(&dt, &[]));
}

#[test]
fn acpi_host_description_matches_the_dtb_of_the_same_machine() {
    assert_same_as_dtb(&qemu().parse().unwrap().host);
}

#[test]
fn gicv4_acpi_host_description_matches_the_dtb_of_the_same_machine() {
    assert_same_as_dtb(&Fixture::qemu(APIC_GICV4).parse().unwrap().host);
}

#[test]
fn a_plan_path_finds_its_device_under_acpi() {
    let host = qemu().parse().unwrap().host;

    let gpio = host.device("/pl061@9030000").unwrap();
    assert_eq!(gpio.regs, [(0x903_0000, 0x1000)]);
    assert_eq!(gpio.spis, [39]);
}

// --- the board fallback ---

#[test]
fn an_unknown_board_has_no_pcie_and_no_devices_and_says_why() {
    let mut f = qemu();
    let mcfg = f.table(b"MCFG");
    mcfg[10..16].copy_from_slice(b"ACME  ");
    fix_checksum(mcfg);

    let tables = f.parse().unwrap();

    assert_eq!(tables.host.pcie, None);
    assert_eq!(tables.host.devices, []);
    assert_eq!(tables.board, None);
    assert_eq!(
        tables.warnings,
        [AcpiWarning::UnknownBoard {
            oem_id: *b"ACME  ",
            oem_table_id: *b"BXPC    ",
            ecam: Some(0x40_1000_0000)
        }]
    );
    let line = tables.warnings[0].to_string();
    assert!(
        line.starts_with("ACPI: unknown board (OEM \"ACME  \" \"BXPC    \", ECAM 0x4010000000)")
    );
    assert!(
        line.contains("no PCIe host bridge and no devices"),
        "{line}"
    );
    // The rest of the host description is still there.
    assert_eq!(tables.host.cpus.len(), 4);
    assert!(tables.host.uart.is_some());
}

#[test]
fn qemu_with_another_ecam_address_is_not_taken_for_the_known_layout() {
    let mut f = qemu();
    let mcfg = f.table(b"MCFG");
    mcfg[44..52].copy_from_slice(&0x3f00_0000u64.to_le_bytes());
    mcfg[55] = 0x0f;
    fix_checksum(mcfg);

    let tables = f.parse().unwrap();

    assert_eq!(tables.board, None);
    assert_eq!(tables.host.pcie, None);
    assert!(matches!(
        tables.warnings[..],
        [AcpiWarning::UnknownBoard {
            ecam: Some(0x3f00_0000),
            ..
        }]
    ));
}

#[test]
fn no_mcfg_is_an_unknown_board() {
    let mut f = qemu();
    f.xsdt = xsdt(&[LAYOUT[0].1, LAYOUT[1].1, LAYOUT[3].1, LAYOUT[5].1]);

    let tables = f.parse().unwrap();

    assert_eq!(tables.host.pcie, None);
    assert_eq!(tables.iort, None);
    assert!(matches!(
        tables.warnings[..],
        [AcpiWarning::UnknownBoard { ecam: None, .. }]
    ));
}

#[test]
fn mcfg_window_starts_at_the_start_bus() {
    let mut f = qemu();
    f.set_body(
        b"MCFG",
        &[
            [0u8; 8].as_slice(),
            &0x3000_0000u64.to_le_bytes(),
            &[1, 0, 0x10, 0x1f, 0, 0, 0, 0], // segment 1: skipped
            &0x4000_0000u64.to_le_bytes(),
            &[0, 0, 0x10, 0x1f, 0, 0, 0, 0],
        ]
        .concat(),
    );
    let mem = f.mem();
    let t = read_table(&mem, LAYOUT[4].1, None).unwrap();

    assert_eq!(
        tables::parse_mcfg(t).unwrap(),
        Some(tables::Ecam {
            window: (0x4100_0000, 0x100_0000),
            bus_range: (0x10, 0x1f)
        })
    );
}

// --- RSDP and XSDT ---

#[test]
fn rsdp_is_checked() {
    type Breaker = fn(&mut Vec<u8>);
    let cases: [(Breaker, AcpiError); 6] = [
        (|r| r[0] = b'X', AcpiError::BadRsdp("bad signature")),
        (|r| r[8] ^= 1, AcpiError::BadRsdp("bad checksum")),
        (|r| r[32] ^= 1, AcpiError::BadRsdp("bad extended checksum")),
        (
            |r| {
                r[15] = 0;
                fix_rsdp(r)
            },
            AcpiError::BadRsdp("revision below 2: no XSDT"),
        ),
        (
            |r| {
                r[24..32].fill(0);
                fix_rsdp(r)
            },
            AcpiError::BadRsdp("no XSDT address"),
        ),
        (
            |r| {
                r[20] = 35;
                fix_rsdp(r)
            },
            AcpiError::BadRsdp("bad length"),
        ),
    ];
    for (break_it, error) in cases {
        let mut f = qemu();
        break_it(&mut f.rsdp);
        assert_eq!(f.parse(), Err(error));
    }
}

#[test]
fn rsdp_outside_the_allowed_memory_is_unreadable() {
    let f = qemu();
    assert_eq!(
        parse_host_acpi(0x1000, &f.mem()),
        Err(AcpiError::Unreadable {
            what: "RSDP",
            addr: 0x1000,
            len: 20
        })
    );
    // An RSDP that claims more than there is.
    let mut f = qemu();
    f.rsdp[20] = 40;
    fix_rsdp(&mut f.rsdp);
    f.rsdp.truncate(36);
    assert!(matches!(
        f.parse(),
        Err(AcpiError::Unreadable {
            what: "RSDP",
            len: 40,
            ..
        })
    ));
}

#[test]
fn xsdt_address_naming_another_table_is_a_bad_signature() {
    let mut f = qemu();
    f.rsdp = rsdp(LAYOUT[1].1);

    assert_eq!(
        f.parse(),
        Err(AcpiError::BadSignature {
            addr: LAYOUT[1].1,
            expected: Signature::XSDT,
            found: Signature::MADT
        })
    );
}

#[test]
fn xsdt_listing_itself_the_rsdp_and_empty_slots_changes_nothing() {
    let good = qemu().parse().unwrap();
    let mut f = qemu();
    let mut entries = vec![XSDT_ADDR, 0, RSDP_ADDR];
    entries.extend(LAYOUT.map(|(_, a)| a));
    entries.push(XSDT_ADDR);
    f.xsdt = xsdt(&entries);

    assert_eq!(f.parse(), Ok(good));
}

#[test]
fn a_duplicate_table_is_ignored_in_favour_of_the_first() {
    let good = qemu().parse().unwrap();
    let mut f = qemu();
    let mut other = GTDT.to_vec();
    other[48] = 99;
    fix_checksum(&mut other);
    f.tables.push((0x1_0000, other));
    let mut entries = LAYOUT.map(|(_, a)| a).to_vec();
    entries.push(0x1_0000);
    f.xsdt = xsdt(&entries);

    assert_eq!(f.parse(), Ok(good));
}

#[test]
fn xsdt_entry_outside_the_allowed_memory_is_refused() {
    let mut f = qemu();
    let mut entries = LAYOUT.map(|(_, a)| a).to_vec();
    entries.push(0xdead_0000);
    f.xsdt = xsdt(&entries);

    assert_eq!(
        f.parse(),
        Err(AcpiError::Unreadable {
            what: "table header (XSDT entry)",
            addr: 0xdead_0000,
            len: 36
        })
    );
}

#[test]
fn xsdt_with_a_partial_entry_is_malformed() {
    let mut f = qemu();
    f.xsdt.push(0);
    let len = f.xsdt.len() as u32;
    set_len(&mut f.xsdt, len);
    fix_checksum(&mut f.xsdt);

    assert_eq!(
        f.parse(),
        Err(malformed(
            b"XSDT",
            "length is not the header plus 8-byte entries"
        ))
    );
}

#[test]
fn a_length_beyond_the_allowed_memory_or_the_bound_is_refused() {
    let mut f = qemu();
    set_len(&mut f.xsdt, 0x1000);
    assert_eq!(
        f.parse(),
        Err(AcpiError::TableUnreadable {
            table: Signature::XSDT,
            addr: XSDT_ADDR,
            len: 0x1000
        })
    );
    for len in [0, 35, MAX_TABLE_LEN + 1, u32::MAX] {
        let mut f = qemu();
        set_len(f.table(b"APIC"), len);
        assert_eq!(
            f.parse(),
            Err(AcpiError::BadLength {
                table: Signature::MADT,
                addr: LAYOUT[1].1,
                len
            })
        );
    }
}

#[test]
fn every_table_read_is_refused_by_name_on_a_bad_checksum() {
    for (sig, addr) in LAYOUT {
        let mut f = qemu();
        f.table(sig)[20] ^= 0x40;
        let result = f.parse();
        if [b"PPTT", b"DBG2"].contains(&sig) {
            assert!(result.is_ok(), "{sig:?} is not read, so not checked");
        } else {
            let error = result.unwrap_err();
            assert_eq!(
                error,
                AcpiError::BadChecksum {
                    table: Signature(*sig),
                    addr
                }
            );
            let line = error.to_string();
            assert!(
                line.starts_with(core::str::from_utf8(sig).unwrap()),
                "{line}"
            );
        }
    }
    let mut f = qemu();
    f.xsdt[40] ^= 1;
    assert_eq!(
        f.parse(),
        Err(AcpiError::BadChecksum {
            table: Signature::XSDT,
            addr: XSDT_ADDR
        })
    );
}

#[test]
fn no_madt_is_an_error() {
    let mut f = qemu();
    f.xsdt = xsdt(&[LAYOUT[0].1, LAYOUT[3].1]);
    assert_eq!(f.parse(), Err(AcpiError::MissingTable(Signature::MADT)));
}

#[test]
fn only_the_madt_is_required() {
    let mut f = qemu();
    f.xsdt = xsdt(&[LAYOUT[1].1]);

    let tables = f.parse().unwrap();

    let host = &tables.host;
    assert_eq!((host.timer, host.uart, host.psci), (None, None, None));
    assert_eq!(tables.warnings.len(), 2, "{:?}", tables.warnings);
    assert_eq!(tables.warnings[0], AcpiWarning::NoPsci);
}

// --- MADT ---

fn gicc(flags: u32, mpidr: u64, gicr: u64, maintenance: u32) -> Vec<u8> {
    let mut e = vec![0u8; 80];
    e[0] = 0x0b;
    e[1] = 80;
    e[12..16].copy_from_slice(&flags.to_le_bytes());
    e[56..60].copy_from_slice(&maintenance.to_le_bytes());
    e[60..68].copy_from_slice(&gicr.to_le_bytes());
    e[68..76].copy_from_slice(&mpidr.to_le_bytes());
    e
}

fn gicd(base: u64, version: u8) -> Vec<u8> {
    let mut e = vec![0u8; 24];
    e[0] = 0x0c;
    e[1] = 24;
    e[8..16].copy_from_slice(&base.to_le_bytes());
    e[20] = version;
    e
}

fn madt(entries: &[Vec<u8>]) -> Fixture {
    let mut f = qemu();
    let mut body = vec![0u8; 8];
    for e in entries {
        body.extend_from_slice(e);
    }
    f.set_body(b"APIC", &body);
    f
}

#[test]
fn madt_keeps_enabled_and_online_capable_cpus_in_order_with_their_gicr_bases() {
    let f = madt(&[
        gicc(1, 0x100, 0x1000_0000, 25),
        gicc(0, 0x200, 0x1002_0000, 25), // disabled: not present
        gicc(1 << 3, 0xff_8000_0001, 0x1004_0000, 25), // online capable
        gicd(0x800_0000, 3),
    ]);

    let gic_host = f.parse().unwrap().host;

    // Aff3 kept, the MPIDR's non-affinity bits (bit 31 here) dropped.
    assert_eq!(gic_host.cpus, [0x100, 0xff_0000_0001]);
    assert_eq!(
        gic_host.gic.redist_regions,
        [(0x1000_0000, 0x2_0000), (0x1004_0000, 0x2_0000)]
    );
    assert_eq!(gic_host.gic.its, []);
}

#[test]
fn gicv4_per_cpu_redistributors_are_four_frames() {
    let f = madt(&[gicc(1, 0, 0x1000_0000, 25), gicd(0x800_0000, 4)]);
    assert_eq!(
        f.parse().unwrap().host.gic.redist_regions,
        [(0x1000_0000, 0x4_0000)]
    );
}

#[test]
fn madt_without_redistributors_or_cpus_or_distributor_is_refused() {
    let cases = [
        (
            madt(&[gicc(1, 0, 0, 25), gicd(0x800_0000, 3)]),
            malformed(b"APIC", "no GICR entry and a GICC without a GICR base"),
        ),
        (
            madt(&[gicc(0, 0, 0x1000_0000, 25), gicd(0x800_0000, 3)]),
            malformed(b"APIC", "no enabled GICC entry"),
        ),
        (
            madt(&[gicc(1, 0, 0x1000_0000, 25)]),
            malformed(b"APIC", "no GICD entry"),
        ),
        (
            madt(&[gicc(1, 0, 0x1000_0000, 25), gicd(0, 3), gicd(0, 3)]),
            malformed(b"APIC", "more than one GICD entry"),
        ),
        (
            madt(&[gicc(1, 0, 0x1000_0000, 25), gicd(0, 2)]),
            AcpiError::UnsupportedGic(2),
        ),
    ];
    for (f, error) in cases {
        assert_eq!(f.parse(), Err(error));
    }
}

#[test]
fn madt_gic_version_0_means_ask_the_hardware() {
    let f = madt(&[gicc(1, 0, 0x1000_0000, 0), gicd(0x800_0000, 0)]);
    let gic = f.parse().unwrap().host.gic;
    assert_eq!(gic.version, 3);
    assert_eq!(gic.maintenance_intid, None, "GSIV 0: not given");
}

#[test]
fn madt_entry_lengths_that_would_loop_or_overrun_are_refused() {
    let mut zero = gicd(0x800_0000, 3);
    zero[1] = 0;
    let mut one = gicd(0x800_0000, 3);
    one[1] = 1;
    let mut over = gicd(0x800_0000, 3);
    over[1] = 200;
    let mut short_gicc = gicc(1, 0, 0x1000_0000, 25);
    short_gicc[1] = 40;
    short_gicc.truncate(40);
    let base = gicc(1, 0, 0x1000_0000, 25);
    // An entry type the walker skips, of length 0: without the length
    // check this is the one that loops for ever.
    let skipped_zero = vec![0x7f, 0, 0, 0];
    let cases = [
        (
            skipped_zero,
            malformed(b"APIC", "entry shorter than its own type and length"),
        ),
        (
            zero,
            malformed(b"APIC", "entry shorter than its own type and length"),
        ),
        (
            one,
            malformed(b"APIC", "entry shorter than its own type and length"),
        ),
        (
            over,
            AcpiError::Truncated {
                table: Signature::MADT,
                offset: 44 + 80,
            },
        ),
        (
            short_gicc,
            malformed(b"APIC", "GICC entry shorter than 76 bytes"),
        ),
    ];
    for (entry, error) in cases {
        assert_eq!(madt(&[base.clone(), entry]).parse(), Err(error));
    }
    // A lone type byte at the very end.
    let f = madt(&[base.clone(), gicd(0, 3), vec![0x0b]]);
    assert_eq!(
        f.parse(),
        Err(AcpiError::Truncated {
            table: Signature::MADT,
            offset: 44 + 80 + 24 + 1
        })
    );
}

#[test]
fn early_uart_finds_the_console_when_the_rest_is_refused() {
    let console = Some(crate::dtb::EarlyUart {
        base: 0x900_0000,
        size: 0x1000,
    });
    assert_eq!(early_uart(RSDP_ADDR, &qemu().mem()), console);
    // A broken MADT and an unreadable XSDT entry stop the parse, not this.
    let mut f = qemu();
    f.table(b"APIC")[50] ^= 1;
    let mut entries = vec![0xdead_0000];
    entries.extend(LAYOUT.map(|(_, a)| a));
    f.xsdt = xsdt(&entries);
    assert!(f.parse().is_err());
    assert_eq!(early_uart(RSDP_ADDR, &f.mem()), console);
    // No SPCR, or a bad one: nothing.
    let mut f = qemu();
    f.table(b"SPCR")[50] ^= 1;
    assert_eq!(early_uart(RSDP_ADDR, &f.mem()), None);
    let mut f = qemu();
    f.xsdt = xsdt(&[LAYOUT[1].1]);
    assert_eq!(early_uart(RSDP_ADDR, &f.mem()), None);
}

// --- GTDT, SPCR, FADT ---

#[test]
fn a_short_gtdt_is_refused() {
    let mut f = qemu();
    f.set_body(b"GTDT", &GTDT[36..78]);
    assert_eq!(
        f.parse(),
        Err(AcpiError::Truncated {
            table: Signature::GTDT,
            offset: 76
        })
    );
}

#[test]
fn spcr_uart_we_cannot_drive_is_a_warning_and_no_console() {
    let mut f = qemu();
    f.table(b"SPCR")[36] = 0x00; // 16550
    fix_checksum(f.table(b"SPCR"));
    let tables = f.parse().unwrap();
    assert_eq!(tables.host.uart, None);
    assert_eq!(
        tables.warnings,
        [AcpiWarning::UartUnsupported { interface_type: 0 }]
    );

    let mut f = qemu();
    f.table(b"SPCR")[40] = 1; // system I/O
    fix_checksum(f.table(b"SPCR"));
    let tables = f.parse().unwrap();
    assert_eq!(tables.host.uart, None);
    assert_eq!(tables.warnings, [AcpiWarning::UartNotMmio { space_id: 1 }]);
}

#[test]
fn spcr_sbsa_uart_without_a_gic_interrupt_is_polled() {
    let mut f = qemu();
    let spcr = f.table(b"SPCR");
    spcr[36] = 0x0e;
    spcr[52] = 0;
    fix_checksum(spcr);
    assert_eq!(
        f.parse().unwrap().host.uart,
        Some(UartInfo {
            base: 0x900_0000,
            size: 0x1000,
            intid: None
        })
    );
}

#[test]
fn fadt_hvc_flag_selects_the_hvc_conduit_and_no_psci_flag_warns() {
    let mut f = qemu();
    f.table(b"FACP")[129] = 0b11;
    fix_checksum(f.table(b"FACP"));
    assert_eq!(f.parse().unwrap().host.psci.unwrap().conduit, Conduit::Hvc);

    let mut f = qemu();
    f.table(b"FACP")[129] = 0;
    fix_checksum(f.table(b"FACP"));
    let tables = f.parse().unwrap();
    assert_eq!(tables.host.psci, None);
    assert_eq!(tables.warnings, [AcpiWarning::NoPsci]);
    assert!(tables.warnings[0].to_string().contains("secondary CPUs"));
}

#[test]
fn fadt_before_acpi_5_1_has_no_arm_boot_flags() {
    for (revision, minor, psci) in [(5, 0, false), (5, 1, true), (4, 9, false), (6, 0, true)] {
        let mut f = qemu();
        let fadt = f.table(b"FACP");
        fadt[8] = revision;
        fadt[131] = minor;
        fix_checksum(fadt);
        assert_eq!(
            f.parse().unwrap().host.psci.is_some(),
            psci,
            "{revision}.{minor}"
        );
    }
    // Too short for the flags: no PSCI, not an error.
    let mut f = qemu();
    f.set_body(b"FACP", &FACP[36..130]);
    assert_eq!(f.parse().unwrap().host.psci, None);
}

// --- IORT ---

fn node(kind: u8, revision: u8, data: &[u8], mappings: &[[u32; 5]]) -> Vec<u8> {
    let at = 16 + data.len();
    let len = at + 20 * mappings.len();
    let mut n = vec![kind];
    n.extend_from_slice(&(len as u16).to_le_bytes());
    n.push(revision);
    n.extend_from_slice(&0u32.to_le_bytes());
    n.extend_from_slice(&(mappings.len() as u32).to_le_bytes());
    n.extend_from_slice(&(if mappings.is_empty() { 0 } else { at as u32 }).to_le_bytes());
    n.extend_from_slice(data);
    for m in mappings {
        for w in m {
            n.extend_from_slice(&w.to_le_bytes());
        }
    }
    n
}

fn words(w: &[u32]) -> Vec<u8> {
    w.iter().flat_map(|w| w.to_le_bytes()).collect()
}

fn iort(nodes: &[Vec<u8>]) -> Fixture {
    let mut f = qemu();
    let mut body = words(&[nodes.len() as u32, 48, 0]);
    for n in nodes {
        body.extend_from_slice(n);
    }
    f.set_body(b"IORT", &body);
    f
}

#[test]
fn iort_smmuv3_between_root_complex_and_its() {
    // ITS group at 48 (24 bytes), SMMUv3 at 72 (68 + 20), RC at 160.
    let its = node(0, 1, &words(&[1, 0]), &[]);
    let mut smmu_data = Vec::new();
    smmu_data.extend_from_slice(&0x905_0000u64.to_le_bytes());
    smmu_data.extend_from_slice(&words(&[0b1, 0]));
    smmu_data.extend_from_slice(&0u64.to_le_bytes());
    smmu_data.extend_from_slice(&words(&[0, 106, 107, 108, 109, 0, 0]));
    let smmu = node(4, 4, &smmu_data, &[[0, 0xffff, 0, 48, 0]]);
    assert_eq!(smmu.len(), 88);
    let mut rc_data = words(&[1, 0, 1, 0]);
    rc_data.extend_from_slice(&[48, 0, 0, 0]);
    let rc = node(2, 1, &rc_data, &[[0, 0xffff, 0, 72, 0]]);
    let f = iort(&[its, smmu, rc]);

    let iort = f.parse().unwrap().iort.unwrap();

    assert_eq!(
        iort.smmus,
        [IortSmmuV3 {
            offset: 72,
            base: 0x905_0000,
            flags: 1,
            model: 0,
            event_gsiv: 106,
            pri_gsiv: 107,
            gerr_gsiv: 108,
            sync_gsiv: 109,
            id_mappings: vec![IortIdMapping {
                input_base: 0,
                num_ids: 0xffff,
                output_base: 0,
                output_ref: 48,
                flags: 0
            }],
        }]
    );
    let rc = &iort.root_complexes[0];
    assert_eq!((rc.offset, rc.ats, rc.memory_address_limit), (160, 1, 48));
    assert_eq!(rc.id_mappings[0].output_ref, 72);
    assert_eq!(iort.its_groups[0].its_ids, [0]);
    // The RC's mapping into the SMMU is the bridge's iommu-map.
    assert_eq!(
        iort.pci_iommu_map(0),
        [crate::dtb::PciIommuMap {
            rid_base: 0,
            iommu_base: 0x905_0000,
            sid_base: 0,
            len: 0x1_0000
        }]
    );
    assert!(iort.pci_iommu_map(1).is_empty());
}

/// QEMU 10.0.2's DTB for `virt,iommu=smmuv3` (the DT path's SMMU tests').
static QEMU_10_SMMUV3_DTB: &[u8] = include_bytes!("../dtb/testdata/qemu-10-virt-smmuv3.dtb");

/// The captured tables with the IORT QEMU's `build_iort`
/// (hw/arm/virt-acpi-build.c) makes for `virt,iommu=smmuv3`: the ITS group;
/// a revision 4 SMMUv3 node at 0x905_0000 with COHACC override, model 0
/// and the GSIVs of SPIs 74-77 in QEMU's order (event irq, PRI irq + 1,
/// GERR irq + 3, sync irq + 2), its IDs to the ITS group; a revision 3 root
/// complex (coherent, 64-bit addresses) sending requester IDs 0-0xffff to
/// the SMMU. The captured QEMU 7.2 has no SMMU (and its SMMUv3 has no
/// stage 2), so this IORT is built, not captured.
fn qemu_smmuv3() -> Fixture {
    // ITS group at 48 (24 bytes), SMMUv3 at 72 (68 + 20), RC at 160.
    let its = node(0, 1, &words(&[1, 0]), &[]);
    let mut smmu_data = 0x905_0000u64.to_le_bytes().to_vec();
    smmu_data.extend_from_slice(&words(&[1, 0]));
    smmu_data.extend_from_slice(&0u64.to_le_bytes());
    let irq = 32 + 74;
    smmu_data.extend_from_slice(&words(&[0, irq, irq + 1, irq + 3, irq + 2, 0, 0]));
    let smmu = node(4, 4, &smmu_data, &[[0, 0xffff, 0, 48, 0]]);
    let mut rc_data = words(&[1, 0x0300_0000, 0, 0]);
    rc_data.extend_from_slice(&[64, 0, 0, 0]);
    let rc = node(2, 3, &rc_data, &[[0, 0xffff, 0, 72, 0]]);
    iort(&[its, smmu, rc])
}

/// The host description the ACPI path gives for [`qemu_smmuv3`]'s tables
/// (the SMMU boot decision and the plan check are tested on it elsewhere).
pub(crate) fn qemu_smmuv3_host() -> HostInfo {
    qemu_smmuv3().parse().unwrap().host
}

#[test]
fn an_iort_smmuv3_is_the_host_device_the_dt_path_makes_of_its_node() {
    let acpi = qemu_smmuv3_host();
    let dt = parse_host_dtb(QEMU_10_SMMUV3_DTB).unwrap();

    let smmus: Vec<_> = acpi.smmus_v3().collect();
    assert_eq!(smmus, dt.smmus_v3().collect::<Vec<_>>());
    // That is: its page 0 and page 1, and the SPIs in the DT's order
    // (eventq, priq, cmdq-sync, gerror).
    assert_eq!(smmus[0].path, "/smmuv3@9050000");
    assert_eq!(smmus[0].regs, [(0x905_0000, 0x2_0000)]);
    assert_eq!(smmus[0].spis, [106, 107, 108, 109]);
    // The bridge's iommu-map names that frame, as the DT's does.
    let pcie = acpi.pcie.as_ref().unwrap();
    assert_eq!(pcie.iommu_map, dt.pcie.as_ref().unwrap().iommu_map);
    assert_eq!(
        crate::smmu::smmu_bases(&pcie.iommu_map),
        [smmus[0].regs[0].0]
    );
    // The rest of the host description is the captured machine's.
    let mut rest = acpi.clone();
    rest.devices.retain(|d| d.path != "/smmuv3@9050000");
    rest.pcie.as_mut().unwrap().iommu_map.clear();
    assert_eq!(rest, qemu().parse().unwrap().host);
}

#[test]
fn an_iort_smmuv3_nodes_model_is_carried_into_its_host_device() {
    use crate::dtb::SmmuModel;
    for (model, want) in [
        (0, SmmuModel::Generic),
        (1, SmmuModel::HisiliconHi161x),
        (2, SmmuModel::CaviumCn99xx),
        (3, SmmuModel::Generic),
    ] {
        let mut f = qemu_smmuv3();
        // The SMMUv3 node at 72; its Model at node offset 40.
        let iort = f.table(b"IORT");
        iort[72 + 40..72 + 44].copy_from_slice(&words(&[model]));
        fix_checksum(iort);

        let tables = f.parse().unwrap();

        assert_eq!(tables.iort.unwrap().smmus[0].model, model);
        let smmus: Vec<_> = tables.host.smmus_v3().collect();
        assert_eq!(smmus[0].smmu_model, want, "model {model}");
        // Its whole frame stays the hypervisor's whatever the model.
        assert_eq!(smmus[0].regs, [(0x905_0000, 0x2_0000)]);
    }
    assert!(SmmuModel::CaviumCn99xx.page0_regs_only());
    assert!(!SmmuModel::HisiliconHi161x.page0_regs_only());
}

#[test]
fn an_iort_smmuv3_without_wired_interrupts_or_a_known_board_is_still_described() {
    let mut f = qemu_smmuv3();
    // MSI-signalled SMMU: its four GSIVs (node offsets 44-59) all 0.
    let iort = f.table(b"IORT");
    iort[72 + 44..72 + 60].fill(0);
    fix_checksum(iort);
    let mcfg = f.table(b"MCFG");
    mcfg[10..16].copy_from_slice(b"ACME  ");
    fix_checksum(mcfg);

    let host = f.parse().unwrap().host;

    // No host bridge to program it for, but its frame is still the
    // hypervisor's for the plan check.
    assert_eq!(host.pcie, None);
    let smmus: Vec<_> = host.smmus_v3().collect();
    assert_eq!(smmus.len(), 1);
    assert_eq!(smmus[0].regs, [(0x905_0000, 0x2_0000)]);
    assert_eq!(smmus[0].spis, []);
    assert!(host_resources(&host, &[])
        .hypervisor
        .contains(&(0x905_0000, 0x2_0000)));
}

#[test]
fn iort_structure_errors_are_refused() {
    let its = node(0, 1, &words(&[1, 0]), &[]);
    let mut zero = its.clone();
    zero[1..3].fill(0);
    let mut huge_its_count = its.clone();
    huge_its_count[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
    let dangling = node(2, 1, &words(&[1, 0, 0, 0, 0]), &[[0, 0xffff, 0, 50, 0]]);
    let mut huge_mappings = node(2, 1, &words(&[1, 0, 0, 0, 0]), &[[0, 0xffff, 0, 48, 0]]);
    huge_mappings[8..12].copy_from_slice(&0x1000_0000u32.to_le_bytes());
    let mut mapping_in_header = node(2, 1, &words(&[1, 0, 0, 0, 0]), &[[0, 0xffff, 0, 48, 0]]);
    mapping_in_header[12..16].copy_from_slice(&4u32.to_le_bytes());
    let cases = [
        (
            vec![zero],
            malformed(b"IORT", "node shorter than its header"),
        ),
        (
            vec![huge_its_count],
            AcpiError::Truncated {
                table: Signature::IORT,
                offset: 20,
            },
        ),
        (
            vec![its.clone(), dangling],
            malformed(b"IORT", "ID mapping to an offset where no node starts"),
        ),
        (
            vec![its.clone(), huge_mappings],
            AcpiError::Truncated {
                table: Signature::IORT,
                offset: 36,
            },
        ),
        (
            vec![its.clone(), mapping_in_header],
            malformed(b"IORT", "ID mappings overlap the node header"),
        ),
    ];
    for (nodes, error) in cases {
        assert_eq!(iort(&nodes).parse(), Err(error));
    }
    // A node count far beyond what the table holds.
    let mut f = iort(&[its]);
    f.table(b"IORT")[36..40].copy_from_slice(&u32::MAX.to_le_bytes());
    fix_checksum(f.table(b"IORT"));
    assert_eq!(
        f.parse(),
        Err(AcpiError::Truncated {
            table: Signature::IORT,
            offset: 73
        })
    );
    // The node array inside the header.
    let mut f = iort(&[]);
    f.table(b"IORT")[40] = 36;
    fix_checksum(f.table(b"IORT"));
    assert_eq!(
        f.parse(),
        Err(malformed(b"IORT", "node array overlaps the header"))
    );
}

// --- corrupted and truncated input never panics ---

/// splitmix64: a fixed-seed stream, so a failure reproduces.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

#[test]
fn every_table_truncated_at_every_length_is_refused_without_panic() {
    for (sig, _) in LAYOUT {
        let whole = qemu().table(sig).clone();
        for len in 0..whole.len() {
            // Cut, with the header claiming the cut length and a valid
            // checksum, so the parser itself meets the short table...
            let mut f = qemu();
            let t = f.table(sig);
            t.truncate(len);
            if len >= 8 {
                set_len(t, len as u32);
            }
            if len >= 10 {
                fix_checksum(t);
            }
            let result = f.parse();
            if len < 36 {
                assert!(result.is_err(), "{sig:?} cut at {len}");
            }
            // ...and cut under a header that still claims the whole length
            // (tables the parser does not read need only their header).
            let mut f = qemu();
            f.table(sig).truncate(len);
            let unread = [b"PPTT", b"DBG2"].contains(&sig);
            if !unread || len < 36 {
                assert!(
                    f.parse().is_err(),
                    "{sig:?} cut at {len} under a whole header"
                );
            }
        }
    }
    for len in 0..qemu().xsdt.len() {
        let mut f = qemu();
        f.xsdt.truncate(len);
        assert!(f.parse().is_err());
    }
    for len in 0..36 {
        let mut f = qemu();
        f.rsdp.truncate(len);
        assert!(f.parse().is_err());
    }
}

#[test]
fn short_tables_the_parser_reads_are_refused_at_each_length() {
    // The tables whose every field we read: any cut is an error.
    for sig in [b"GTDT", b"SPCR"] {
        let whole = qemu().table(sig).clone();
        let needed = if sig == b"GTDT" { 80 } else { 58 };
        for len in 36..needed {
            let mut f = qemu();
            f.set_body(sig, &whole[36..len]);
            assert!(
                matches!(f.parse(), Err(AcpiError::Truncated { .. })),
                "{sig:?} cut at {len}"
            );
        }
    }
}

#[test]
fn random_byte_flips_never_panic() {
    let mut rng = Rng(0x5049_4e46_4f4c_4421);
    let base = qemu();
    let mut outcomes = [0usize; 2];
    for _ in 0..30_000 {
        let mut f = base.clone();
        // Which blob: a table, the XSDT or the RSDP.
        let which = rng.below(LAYOUT.len() + 2);
        let keep_checksum_valid = rng.below(4) != 0;
        let blob: &mut Vec<u8> = match which {
            w if w < LAYOUT.len() => &mut f.tables[w].1,
            w if w == LAYOUT.len() => &mut f.xsdt,
            _ => &mut f.rsdp,
        };
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(blob.len());
            blob[at] ^= 1 << rng.below(8);
        }
        if rng.below(8) == 0 {
            let len = rng.below(blob.len());
            blob.truncate(len);
        }
        if keep_checksum_valid && blob.len() >= 36 {
            if which == LAYOUT.len() + 1 {
                fix_rsdp(blob);
            } else {
                fix_checksum(blob);
            }
        }
        outcomes[f.parse().is_ok() as usize] += 1;
    }
    // Both outcomes happen: the flips reach past the checksums.
    assert!(outcomes[0] > 1000 && outcomes[1] > 1000, "{outcomes:?}");
}

#[test]
fn random_madt_and_iort_entries_never_panic() {
    // Random entry streams behind valid headers and checksums: what the
    // entry walkers meet when firmware is wrong but self-consistent.
    let mut rng = Rng(7);
    for round in 0..5_000 {
        let mut body: Vec<u8> = (0..rng.below(300)).map(|_| rng.next() as u8).collect();
        // Bias towards the types the walkers parse.
        let mut k = if round % 2 == 0 { 8 } else { 12 };
        while k + 1 < body.len() {
            body[k] = if round % 2 == 0 {
                [0x0b, 0x0c, 0x0e, 0x0f][rng.below(4)]
            } else {
                [0, 2, 4, 1][rng.below(4)]
            };
            let step = 2 + rng.below(90);
            if round % 2 == 1 && k + 3 < body.len() {
                body[k + 1] = step as u8;
                body[k + 2] = 0;
            } else {
                body[k + 1] = step as u8;
            }
            k += step;
        }
        let mut f = qemu();
        if round % 2 == 0 {
            f.set_body(b"APIC", &body);
        } else {
            if body.len() >= 8 {
                body[0..4].copy_from_slice(&(rng.below(8) as u32).to_le_bytes());
                body[4..8].copy_from_slice(&48u32.to_le_bytes());
            }
            f.set_body(b"IORT", &body);
        }
        let _ = f.parse();
    }
}

#[test]
fn errors_and_warnings_print_as_console_lines() {
    let lines = [
        AcpiError::BadChecksum {
            table: Signature::GTDT,
            addr: 0x1000,
        }
        .to_string(),
        AcpiError::BadSignature {
            addr: 0x2000,
            expected: Signature::XSDT,
            found: Signature([b'A', 0, 0xff, b'Z']),
        }
        .to_string(),
        AcpiError::UnsupportedGic(2).to_string(),
    ];
    assert_eq!(
        lines,
        [
            "GTDT at 0x1000: bad checksum, table refused",
            "table at 0x2000: expected XSDT, found \"A\\x00\\xffZ\"",
            "MADT: GIC version 2 is not supported (GICv3/v4 only)",
        ]
    );
}

// --- SRAT: the NUMA nodes of CPUs and ITSes ---

fn gicc_uid(uid: u32, mpidr: u64) -> Vec<u8> {
    let mut e = gicc(1, mpidr, 0x1000_0000 + (mpidr << 17), 25);
    e[8..12].copy_from_slice(&uid.to_le_bytes());
    e
}

fn its_entry(id: u32, base: u64) -> Vec<u8> {
    let mut e = vec![0u8; 20];
    e[0] = 0x0f;
    e[1] = 20;
    e[4..8].copy_from_slice(&id.to_le_bytes());
    e[8..16].copy_from_slice(&base.to_le_bytes());
    e
}

fn gicc_affinity(domain: u32, uid: u32, enabled: bool) -> Vec<u8> {
    let mut e = vec![0u8; 18];
    e[0] = 3;
    e[1] = 18;
    e[2..6].copy_from_slice(&domain.to_le_bytes());
    e[6..10].copy_from_slice(&uid.to_le_bytes());
    e[10..14].copy_from_slice(&u32::from(enabled).to_le_bytes());
    e
}

fn its_affinity(domain: u32, its_id: u32) -> Vec<u8> {
    let mut e = vec![0u8; 12];
    e[0] = 4;
    e[1] = 12;
    e[2..6].copy_from_slice(&domain.to_le_bytes());
    e[8..12].copy_from_slice(&its_id.to_le_bytes());
    e
}

const SRAT_ADDR: u64 = 0xbc43_c000;

/// Adds an SRAT of `entries` to the fixture's XSDT.
fn with_srat(mut f: Fixture, entries: &[Vec<u8>]) -> Fixture {
    let mut body = vec![0u8; 12];
    body[0] = 1; // table revision (reserved, 1)
    for e in entries {
        body.extend_from_slice(e);
    }
    let mut t = header(b"SRAT", 3, body.len());
    t.extend_from_slice(&body);
    fix_checksum(&mut t);
    f.tables.push((SRAT_ADDR, t));
    let mut addrs: Vec<u64> = LAYOUT.map(|(_, a)| a).to_vec();
    addrs.push(SRAT_ADDR);
    f.xsdt = xsdt(&addrs);
    f
}

/// Two sockets: CPUs with UIDs 10..13 (10, 11 on domain 0; 12, 13 on
/// domain 1), ITS IDs 7 (domain 1) then 3 (domain 0).
fn two_socket_madt() -> Fixture {
    madt(&[
        gicc_uid(10, 0),
        gicc_uid(11, 1),
        gicc_uid(12, 0x100),
        gicc_uid(13, 0x101),
        gicd(0x800_0000, 4),
        its_entry(7, 0x2000_0000),
        its_entry(3, 0x3000_0000),
    ])
}

#[test]
fn srat_gives_each_cpu_and_its_its_node_by_uid_and_its_id() {
    let f = with_srat(
        two_socket_madt(),
        &[
            its_affinity(0, 3),
            gicc_affinity(1, 13, true),
            gicc_affinity(0, 10, true),
            gicc_affinity(0, 11, true),
            gicc_affinity(1, 12, true),
            its_affinity(1, 7),
        ],
    );

    let host = f.parse().unwrap().host;

    assert_eq!(host.numa.cpus, [Some(0), Some(0), Some(1), Some(1)]);
    assert_eq!(host.numa.its, [Some(1), Some(0)]);
    let chosen = crate::vgic::its_choice::choose(&host.numa, 4, &[true, true]);
    assert_eq!(chosen, [Some(1), Some(1), Some(0), Some(0)]);
}

#[test]
fn without_an_srat_or_with_disabled_entries_there_are_no_nodes() {
    assert_eq!(
        two_socket_madt().parse().unwrap().host.numa,
        NumaInfo::default()
    );
    let f = with_srat(two_socket_madt(), &[gicc_affinity(1, 10, false)]);
    assert_eq!(f.parse().unwrap().host.numa, NumaInfo::default());
}

#[test]
fn a_short_srat_entry_is_refused_by_name() {
    let mut short = its_affinity(0, 3);
    short.truncate(10);
    short[1] = 10;
    let f = with_srat(two_socket_madt(), &[short]);
    assert_eq!(
        f.parse().unwrap_err(),
        malformed(b"SRAT", "GIC ITS Affinity entry shorter than 12 bytes")
    );
    let f = with_srat(two_socket_madt(), &[vec![3, 0]]);
    assert_eq!(
        f.parse().unwrap_err(),
        malformed(b"SRAT", "entry shorter than its own type and length")
    );
}

// --- MADT, GICv5 (ACPI 6.7 structures, synthetic) ---

/// An ACPI 6.7 GICC: 88 bytes, IAFFID at 82, IRS ID at 84.
fn gicc_v5(mpidr: u64, iaffid: u16, irs_id: u32, maintenance: u32) -> Vec<u8> {
    let mut e = vec![0u8; 88];
    e[0] = 0x0b;
    e[1] = 88;
    e[12..16].copy_from_slice(&1u32.to_le_bytes());
    e[56..60].copy_from_slice(&maintenance.to_le_bytes());
    e[68..76].copy_from_slice(&mpidr.to_le_bytes());
    e[82..84].copy_from_slice(&iaffid.to_le_bytes());
    e[84..88].copy_from_slice(&irs_id.to_le_bytes());
    e
}

/// A GICv5 IRS entry (type 28, 32 bytes).
fn irs(id: u32, config: u64, version: u8) -> Vec<u8> {
    let mut e = vec![0u8; 32];
    e[0] = 28;
    e[1] = 32;
    e[2] = version;
    e[4..8].copy_from_slice(&id.to_le_bytes());
    e[16..24].copy_from_slice(&config.to_le_bytes());
    e[24..32].copy_from_slice(&(config + 0x1_0000).to_le_bytes());
    e
}

/// A GICv5 ITS Config Frame entry (type 29, 16 bytes).
fn its_config(translator_id: u32, base: u64) -> Vec<u8> {
    let mut e = vec![0u8; 16];
    e[0] = 29;
    e[1] = 16;
    e[4..8].copy_from_slice(&translator_id.to_le_bytes());
    e[8..16].copy_from_slice(&base.to_le_bytes());
    e
}

/// A GICv5 ITS Translate Frame entry (type 30, 24 bytes).
fn its_translate(linked: u32, frame_id: u32, base: u64) -> Vec<u8> {
    let mut e = vec![0u8; 24];
    e[0] = 30;
    e[1] = 24;
    e[4..8].copy_from_slice(&linked.to_le_bytes());
    e[8..12].copy_from_slice(&frame_id.to_le_bytes());
    e[16..24].copy_from_slice(&base.to_le_bytes());
    e
}

/// GSIV of PPI 25 on a GICv5 (type 1 in [31:29]).
const V5_MAINTENANCE: u32 = 1 << 29 | 25;

/// Two CPUs (IAFFIDs swapped, so order matters) on IRS 7, one ITS with two
/// translate frames: the DT fixture's machine (dtb/host/gicv5.rs) in MADT
/// form.
fn gicv5_madt() -> Fixture {
    madt(&[
        gicc_v5(0, 1, 7, V5_MAINTENANCE),
        gicc_v5(0x100, 0, 7, V5_MAINTENANCE),
        irs(7, 0x2f1a_0000, 5),
        its_config(3, 0x2f12_0000),
        its_translate(3, 0, 0x2f13_0000),
        its_translate(3, 1, 0x2f14_0000),
    ])
}

#[test]
fn a_gicv5_madt_gives_the_irs_the_cpus_with_their_iaffids_and_the_its_frames() {
    let f = gicv5_madt();

    let v5 = parse_host_acpi_gicv5(RSDP_ADDR, &f.mem())
        .unwrap()
        .expect("a GICv5");

    assert_eq!(
        v5.info,
        crate::dtb::Gicv5Info {
            irs: vec![crate::dtb::Gicv5Irs {
                config: (0x2f1a_0000, 0x1_0000),
                cpus: vec![(0, 1), (0x100, 0)],
                its: vec![],
            }],
            maintenance_ppi: Some(25),
            its_translate: vec![],
        }
    );
    assert_eq!(
        v5.its,
        [AcpiGicv5Its {
            translator_id: 3,
            config: (0x2f12_0000, 0x1_0000),
            translate_frames: vec![(0, (0x2f13_0000, 0x1_0000)), (1, (0x2f14_0000, 0x1_0000))],
        }]
    );
}

/// GSIV of GICv5 PPI `n` and SPI `n` (type 1 / 3 in [31:29]).
const fn v5_ppi(n: u32) -> u32 {
    1 << 29 | n
}
const fn v5_spi(n: u32) -> u32 {
    3 << 29 | n
}

/// The GICv5 machine with its GTDT's four timers (secure phys, phys,
/// virt, hyp at 48, 56, 64, 72) and its SPCR's interrupt (at 54) as GICv5
/// GSIVs: the DT fixture's `gicv5_host_dtb(&[1, 0], Some(timer), 2)`.
fn gicv5_machine(timer: [u32; 4], uart: u32) -> Fixture {
    let mut f = gicv5_madt();
    let gtdt = f.table(b"GTDT");
    for (offset, gsiv) in [48, 56, 64, 72].into_iter().zip(timer) {
        gtdt[offset..offset + 4].copy_from_slice(&gsiv.to_le_bytes());
    }
    fix_checksum(gtdt);
    let spcr = f.table(b"SPCR");
    spcr[54..58].copy_from_slice(&uart.to_le_bytes());
    fix_checksum(spcr);
    f
}

/// The DT fixture's timer order and PPIs: secure phys, phys, virt, hyp.
const V5_TIMER: [u32; 4] = [29, 30, 27, 26];

#[test]
fn a_gicv5_acpi_host_is_described_as_the_dt_describes_the_same_machine() {
    let f = gicv5_machine(V5_TIMER.map(v5_ppi), v5_spi(1));
    let dt = parse_host_dtb(&crate::dtb::gicv5_host_dtb(&[1, 0], Some(V5_TIMER), 2)).unwrap();

    let acpi = f.parse().unwrap().host;

    assert_eq!(acpi.cpus, dt.cpus);
    assert_eq!(acpi.gic, dt.gic);
    assert_eq!(acpi.timer, dt.timer);
    assert_eq!(acpi.uart, dt.uart);
    // The core's numbers: GICv5 PPI n is n, SPI 1 is 33.
    let t = acpi.timer.unwrap();
    assert_eq!((t.sec_phys, t.phys, t.virt, t.hyp), (29, 30, 27, 26));
    assert_eq!(acpi.uart.unwrap().intid, Some(33));
    assert_eq!(
        crate::gichost::HostGic::of(&acpi.gic),
        crate::gichost::HostGic::V5
    );
    assert_eq!(host_resources(&acpi, &[]).gic, host_resources(&dt, &[]).gic);
}

#[test]
fn a_gicv5_acpi_host_lacking_a_timer_ppi_is_refused_naming_it() {
    // No virtual timer (GSIV 0: not provided).
    let f = gicv5_machine([v5_ppi(29), v5_ppi(30), 0, v5_ppi(26)], v5_spi(1));
    let e = f.parse().unwrap_err();
    assert_eq!(
        e.to_string(),
        "GICv5 host lacks what Pinfold needs: the EL1 virtual timer PPI 27"
    );
    assert!(matches!(e, AcpiError::Gicv5Lacks(_)), "{e:?}");

    // An EL2 timer that is not PPI 26.
    let f = gicv5_machine([v5_ppi(29), v5_ppi(30), v5_ppi(27), v5_ppi(28)], v5_spi(1));
    assert_eq!(
        f.parse().unwrap_err().to_string(),
        "GICv5 host lacks what Pinfold needs: the EL2 physical timer PPI 26"
    );

    // No GTDT at all: refused as the DT path refuses the same machine
    // without a timer node.
    let mut f = gicv5_machine(V5_TIMER.map(v5_ppi), v5_spi(1));
    f.table(b"GTDT")[..4].copy_from_slice(b"XXXX");
    fix_checksum(f.table(b"GTDT"));
    let dt = parse_host_dtb(&crate::dtb::gicv5_host_dtb(&[1, 0], None, 2)).unwrap_err();
    assert_eq!(f.parse().unwrap_err().to_string(), dt.to_string());
}

#[test]
fn a_gicv5_timer_gsiv_that_is_no_ppi_is_refused_naming_the_field() {
    // The virtual timer given as SPI 27, then as GICv3's INTID 27.
    for virt in [v5_spi(27), 27] {
        let f = gicv5_machine([v5_ppi(29), v5_ppi(30), virt, v5_ppi(26)], v5_spi(1));
        assert_eq!(
            f.parse(),
            Err(malformed(
                b"GTDT",
                "Virtual EL1 Timer GSIV is not a GICv5 PPI 16..31"
            )),
            "{virt:#x}"
        );
    }
}

#[test]
fn a_gicv5_uart_interrupt_the_core_cannot_number_leaves_the_console_polled() {
    // An IWB wire (type 7), a PPI, an SPI beyond the core's range.
    for gsiv in [7 << 29 | 3, v5_ppi(20), v5_spi(988)] {
        let host = gicv5_machine(V5_TIMER.map(v5_ppi), gsiv)
            .parse()
            .unwrap()
            .host;
        assert_eq!(
            host.uart.map(|u| (u.base, u.intid)),
            Some((0x900_0000, None)),
            "{gsiv:#x}"
        );
    }
}

#[test]
fn itses_of_a_gicv5_with_several_irses_are_the_gics_under_no_irs() {
    let f = madt(&[
        gicc_v5(0, 0, 7, V5_MAINTENANCE),
        gicc_v5(0x100, 0, 8, V5_MAINTENANCE),
        irs(7, 0x2f1a_0000, 5),
        irs(8, 0x2f1c_0000, 5),
        its_config(3, 0x2f12_0000),
    ]);
    let mut f = f;
    let gtdt = f.table(b"GTDT");
    for (offset, ppi) in [48, 56, 64, 72].into_iter().zip(V5_TIMER) {
        gtdt[offset..offset + 4].copy_from_slice(&v5_ppi(ppi).to_le_bytes());
    }
    fix_checksum(gtdt);

    let gic = f.parse().unwrap().host.gic;

    let v5 = gic.v5.as_ref().unwrap();
    assert!(v5.irs.iter().all(|i| i.its.is_empty()));
    assert_eq!(gic.its, [(0x2f12_0000, 0x1_0000)]);
    assert_eq!(v5.its_translate, [None], "ITS 3 links no translate frame");
    assert_eq!((gic.found.irs_count, gic.found.its_count), (2, 1));
}

#[test]
fn a_gicv3_madt_has_no_gicv5() {
    assert_eq!(parse_host_acpi_gicv5(RSDP_ADDR, &qemu().mem()), Ok(None));
}

#[test]
fn malformed_gicv5_entries_are_refused_naming_the_field() {
    let cpu = || gicc_v5(0, 0, 7, V5_MAINTENANCE);
    let mut short_irs = irs(7, 0x2f1a_0000, 5);
    short_irs[1] = 24;
    short_irs.truncate(24);
    let mut short_cpu = gicc(1, 0x100, 0, 25);
    short_cpu[1] = 80;
    let cases = [
        (
            vec![cpu(), short_irs],
            "GICv5 IRS entry shorter than 32 bytes",
        ),
        (
            vec![cpu(), irs(7, 0x2f1a_0000, 4)],
            "GICv5 IRS entry: GIC Version is not 5",
        ),
        (
            vec![cpu(), irs(7, 0, 5)],
            "GICv5 IRS entry: Config Frame Base Address is 0",
        ),
        (
            vec![cpu(), irs(7, 0x2f1a_0000, 5), irs(7, 0x2f1b_0000, 5)],
            "two GICv5 IRS entries with the same IRS ID",
        ),
        (
            vec![gicc_v5(0, 0, 8, V5_MAINTENANCE), irs(7, 0x2f1a_0000, 5)],
            "GICC entry: IRS ID names no GICv5 IRS entry",
        ),
        (
            vec![cpu(), short_cpu, irs(7, 0x2f1a_0000, 5)],
            "GICC entry of a GICv5 host shorter than 88 bytes (no IAFFID and IRS ID)",
        ),
        (
            vec![irs(7, 0x2f1a_0000, 5)],
            "no enabled GICC entry",
        ),
        (
            vec![cpu(), irs(7, 0x2f1a_0000, 5), its_config(3, 0)],
            "GICv5 ITS Config Frame entry: Physical Base Address is 0",
        ),
        (
            vec![
                cpu(),
                irs(7, 0x2f1a_0000, 5),
                its_config(3, 0x2f12_0000),
                its_config(3, 0x2f15_0000),
            ],
            "two GICv5 ITS Config Frame entries with the same Translator ID",
        ),
        (
            vec![
                cpu(),
                irs(7, 0x2f1a_0000, 5),
                its_config(3, 0x2f12_0000),
                its_translate(4, 0, 0x2f13_0000),
            ],
            "GICv5 ITS Translate Frame entry: Linked Translator ID names no GICv5 ITS Config Frame entry",
        ),
        (
            vec![cpu(), irs(7, 0x2f1a_0000, 5), its_translate(3, 0, 0)],
            "GICv5 ITS Translate Frame entry: Physical Base Address is 0",
        ),
    ];
    for (entries, what) in cases {
        let f = madt(&entries);
        assert_eq!(
            parse_host_acpi_gicv5(RSDP_ADDR, &f.mem()),
            Err(malformed(b"APIC", what)),
            "{what}"
        );
        // The full parse refuses it the same way, not as a GICv5 host.
        assert_eq!(f.parse(), Err(malformed(b"APIC", what)), "{what}");
    }
}

#[test]
fn iort_gicv5_iwb_nodes_are_read_and_a_bad_name_is_refused() {
    // ITS group at 48 (24 bytes), then an IWB mapping to it.
    let its = node(0, 1, &words(&[1, 0]), &[]);
    let iwb_data = |name: &[u8]| {
        let mut d = 0x2f00_0000u64.to_le_bytes().to_vec();
        d.extend_from_slice(&3u16.to_le_bytes());
        d.extend_from_slice(name);
        d
    };
    let iwb = node(7, 0, &iwb_data(b"\\_SB.IWB0\0\0"), &[[0, 31, 0, 48, 0]]);
    let f = iort(&[its.clone(), iwb]);

    let parsed = f.parse().unwrap().iort.unwrap();

    assert_eq!(
        parsed.iwbs,
        [IortIwb {
            offset: 72,
            base: 0x2f00_0000,
            index: 3,
            name: "\\_SB.IWB0".into(),
            id_mappings: vec![IortIdMapping {
                input_base: 0,
                num_ids: 31,
                output_base: 0,
                output_ref: 48,
                flags: 0,
            }],
        }]
    );
    assert_eq!(parsed.other_nodes, 0);

    let unterminated = node(7, 0, &iwb_data(b"\\_SB.IWB0"), &[]);
    assert_eq!(
        iort(&[its, unterminated]).parse(),
        Err(malformed(
            b"IORT",
            "IWB node: device name not NUL-terminated"
        ))
    );
}

#[test]
fn iort_root_complex_mappings_into_two_its_groups_are_the_bridges_msi_map() {
    // ITS groups at 48 (ITS ID 0) and 72 (ITS ID 7), RC at 96: buses 0
    // and 1 to the first as themselves, buses 2-3 to the second from
    // DeviceID 0x1_0000.
    let g0 = node(0, 1, &words(&[1, 0]), &[]);
    let g1 = node(0, 1, &words(&[1, 7]), &[]);
    let mut rc_data = words(&[1, 0, 0, 0]);
    rc_data.extend_from_slice(&[48, 0, 0, 0]);
    let rc = node(
        2,
        1,
        &rc_data,
        &[[0, 0x1ff, 0, 48, 0], [0x200, 0x1ff, 0x1_0000, 72, 0]],
    );
    let iort = iort(&[g0, g1, rc]).parse().unwrap().iort.unwrap();
    let madt_its = [(0, 0x808_0000), (7, 0x80c_0000)];

    let map = iort.pci_msi_map(0, &madt_its).unwrap();

    let entry = |rid_base, its_base, device_base| crate::dtb::PciMsiMap {
        rid_base,
        its_base,
        device_base,
        len: 0x200,
    };
    assert_eq!(
        map,
        [entry(0, 0x808_0000, 0), entry(0x200, 0x80c_0000, 0x1_0000)]
    );
    assert_eq!(iort.pci_msi_map(1, &madt_its), Ok(vec![]));
    // A group naming an ITS the MADT does not have: no MSI there.
    assert_eq!(
        iort.pci_msi_map(0, &madt_its[..1]),
        Ok(vec![entry(0, 0x808_0000, 0)])
    );
}

#[test]
fn iort_msi_map_through_an_smmu_composes_its_stream_ids_into_the_its_group() {
    // ITS groups at 48 (ID 0) and 72 (ID 1), SMMUv3 at 96 sending
    // StreamIDs 0-0xff to group 0 and 0x100-0x1ff to group 1 from
    // DeviceID 0x4000; the RC sends requester IDs 0x80-0x17f to StreamIDs
    // from 0x80.
    let g0 = node(0, 1, &words(&[1, 0]), &[]);
    let g1 = node(0, 1, &words(&[1, 1]), &[]);
    let mut smmu_data = 0x905_0000u64.to_le_bytes().to_vec();
    smmu_data.extend_from_slice(&words(&[0, 0]));
    smmu_data.extend_from_slice(&0u64.to_le_bytes());
    smmu_data.extend_from_slice(&words(&[0, 106, 107, 108, 109, 0, 0]));
    let smmu = node(
        4,
        4,
        &smmu_data,
        &[
            [0, 0xff, 0, 48, 0],
            [0x100, 0xff, 0x4000, 72, 0],
            [0, 0, 0x9, 48, 1],
        ],
    );
    let mut rc_data = words(&[1, 0, 0, 0]);
    rc_data.extend_from_slice(&[48, 0, 0, 0]);
    let rc = node(2, 1, &rc_data, &[[0x80, 0xff, 0x80, 96, 0]]);
    let iort = iort(&[g0, g1, smmu, rc]).parse().unwrap().iort.unwrap();

    let map = iort
        .pci_msi_map(0, &[(0, 0x808_0000), (1, 0x80a_0000)])
        .unwrap();

    let entry = |rid_base, its_base, device_base| crate::dtb::PciMsiMap {
        rid_base,
        its_base,
        device_base,
        len: 0x80,
    };
    assert_eq!(
        map,
        [
            entry(0x80, 0x808_0000, 0x80),
            entry(0x100, 0x80a_0000, 0x4000)
        ]
    );
}

#[test]
fn qemu_acpi_msi_map_is_the_dt_ones() {
    let pcie = qemu().parse().unwrap().host.pcie.unwrap();

    assert_eq!(
        pcie.msi_map,
        [crate::dtb::PciMsiMap {
            rid_base: 0,
            its_base: 0x808_0000,
            device_base: 0,
            len: 0x1_0000
        }]
    );
}
