//! A fake SMMUv3: registers, the 2-level stream table walk with an STE
//! cache that only CMD_CFGI_* refreshes, a TLB that only CMD_TLBI_*
//! empties, the command queue consumed on PROD writes (or stalled), and an
//! event queue that overflows like the architecture's (PROD.OVFLG toggles,
//! the record is lost). DMA is a call naming a stream and an IPA.

use super::*;
use crate::stage2::vtcr_el2;
use alloc::rc::Rc;
use alloc::vec;
use core::cell::RefCell;
use std::collections::HashMap;

type Mem = Rc<RefCell<HashMap<u64, u64>>>;

pub(crate) struct FakeMem {
    mem: Mem,
    next: u64,
    published: u64,
    fail_alloc: bool,
}

impl DmaMemory for FakeMem {
    fn alloc_zeroed(&mut self, size: u64, align: u64) -> Option<PhysAddr> {
        if self.fail_alloc {
            return None;
        }
        let at = self.next.next_multiple_of(align);
        self.next = at + size;
        Some(PhysAddr(at))
    }
    fn read_u64(&self, at: PhysAddr) -> u64 {
        assert_eq!(at.0 % 8, 0);
        *self.mem.borrow().get(&at.0).unwrap_or(&0)
    }
    fn write_u64(&mut self, at: PhysAddr, value: u64) {
        self.mem.borrow_mut().insert(at.0, value);
    }
    fn publish(&mut self, _at: PhysAddr, _len: u64) {
        self.published += 1;
    }
}

/// What a DMA did.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Dma {
    /// Translated through this VMID's stage 2 (rooted at `root`).
    Done {
        vmid: u16,
        root: u64,
    },
    Aborted,
}

pub(crate) struct Model {
    mem: Mem,
    pub(crate) idr: [u32; 3],
    cr0: u32,
    pub(crate) cr0ack: u32,
    gbpa: u32,
    irq_ctrl: u32,
    cr2: u32,
    strtab_base: u64,
    strtab_cfg: u32,
    cmdq_base: u64,
    cmdq_prod: u32,
    cmdq_cons: u32,
    evtq_base: u64,
    evtq_prod: u32,
    evtq_cons: u32,
    gerror: u32,
    /// PROD writes left to ignore (a busy SMMU); u32::MAX: never consume.
    stall: u32,
    commands: Vec<Command>,
    ste_cache: HashMap<u32, [u64; 8]>,
    /// (vmid, ipa page)
    tlb: Vec<(u16, u64)>,
    /// RAM each VMID's stage 2 maps: [base, base + size).
    pub(crate) ram: HashMap<u16, (u64, u64)>,
    /// A Cavium CN99xx: no page 1, its registers at the same offsets in
    /// page 0 (where a generic SMMU has nothing).
    pub(crate) page0_only: bool,
    /// Accesses beyond page 0 of a page-0-only SMMU (another device's
    /// registers on real hardware).
    pub(crate) page1_touched: u32,
    /// The opcode of every command consumed, known or not.
    pub(crate) opcodes: Vec<u8>,
}

pub(crate) struct Regs(Rc<RefCell<Model>>);

impl Model {
    fn new(mem: Mem) -> Self {
        Model {
            mem,
            // QEMU 10's arm-smmuv3,stage=2: S2P, COHACC, TTF AArch64,
            // ST_LEVEL 2-level, VMID16; SIDSIZE 16, EVENTQS/CMDQS 19;
            // OAS 44 bits, GRAN4K and GRAN64K.
            idr: [
                1 | 1 << 4 | 0b10 << 2 | 1 << 18 | 1 << 27,
                16 | 19 << 16 | 19 << 21,
                4 | 1 << 4 | 1 << 6,
            ],
            cr0: 0,
            cr0ack: 0,
            gbpa: 0,
            irq_ctrl: 0,
            cr2: 0,
            strtab_base: 0,
            strtab_cfg: 0,
            cmdq_base: 0,
            cmdq_prod: 0,
            cmdq_cons: 0,
            evtq_base: 0,
            evtq_prod: 0,
            evtq_cons: 0,
            gerror: 0,
            stall: 0,
            commands: Vec::new(),
            ste_cache: HashMap::new(),
            tlb: Vec::new(),
            ram: HashMap::new(),
            page0_only: false,
            page1_touched: 0,
            opcodes: Vec::new(),
        }
    }

    /// The architectural offset an access at `offset` reaches: on a
    /// page-0-only SMMU page 1's registers are 64 KiB lower and nothing is
    /// beyond page 0.
    fn register(&mut self, offset: u32) -> Option<u32> {
        if !self.page0_only {
            return Some(offset);
        }
        if offset >= PAGE1 {
            self.page1_touched += 1;
            return None;
        }
        Some(match offset {
            o if o == EVENTQ_PROD - PAGE1 => EVENTQ_PROD,
            o if o == EVENTQ_CONS - PAGE1 => EVENTQ_CONS,
            o => o,
        })
    }

    fn rd(&self, at: u64) -> u64 {
        *self.mem.borrow().get(&at).unwrap_or(&0)
    }

    fn cmdq_log2(&self) -> u32 {
        (self.cmdq_base & 0x1f) as u32
    }

    fn consume(&mut self) {
        if self.cr0 & CR0_CMDQEN == 0 {
            return;
        }
        if self.stall > 0 {
            if self.stall != u32::MAX {
                self.stall -= 1;
            }
            return;
        }
        let log2 = self.cmdq_log2();
        let mask = (2u32 << log2) - 1;
        while self.cmdq_cons & mask != self.cmdq_prod & mask && self.cmdq_cons >> 24 == 0 {
            let slot = u64::from(self.cmdq_cons & ((1 << log2) - 1));
            let at = (self.cmdq_base & ADDR_MASK_51_5) + slot * CMD_BYTES;
            let w = [self.rd(at), self.rd(at + 8)];
            self.opcodes.push(w[0] as u8);
            match Command::decode(w) {
                Some(c) => {
                    self.commands.push(c);
                    match c {
                        Command::CfgiSte(sid) => {
                            self.ste_cache.remove(&sid);
                        }
                        Command::CfgiAll => self.ste_cache.clear(),
                        Command::TlbiS12Vmall(v) => self.tlb.retain(|t| t.0 != v),
                        Command::TlbiNsnhAll | Command::TlbiEl2All => self.tlb.clear(),
                        Command::Sync => {}
                    }
                    self.cmdq_cons = (self.cmdq_cons & !mask) | ((self.cmdq_cons + 1) & mask);
                }
                None => {
                    // CERROR_ILL: consumption stops at the bad command.
                    self.cmdq_cons |= 1 << 24;
                    self.gerror ^= GERROR_CMDQ_ERR;
                }
            }
        }
    }

    fn fetch_ste(&self, sid: u32) -> Option<[u64; 8]> {
        let span_bits = self.strtab_cfg & 0x3f;
        if sid >> span_bits != 0 {
            return None;
        }
        let split = (self.strtab_cfg >> 6) & 0x1f;
        assert_eq!(self.strtab_cfg >> 16 & 3, 1, "2-level format");
        let l1 = self.rd((self.strtab_base & ADDR_MASK_51_6) + u64::from(sid >> split) * 8);
        let mut w = [0u64; 8];
        if l1 & 0x1f == 0 {
            return Some(w); // span 0: invalid STEs
        }
        let at = (l1 & ADDR_MASK_51_6) + u64::from(sid & ((1 << split) - 1)) * STE_BYTES;
        for (k, x) in w.iter_mut().enumerate() {
            *x = self.rd(at + 8 * k as u64);
        }
        Some(w)
    }

    fn record(&mut self, w: [u64; 4]) {
        let log2 = (self.evtq_base & 0x1f) as u32;
        let mask = (2u32 << log2) - 1;
        let (p, c) = (self.evtq_prod & mask, self.evtq_cons & mask);
        let full = p & ((1 << log2) - 1) == c & ((1 << log2) - 1) && p != c;
        if full {
            self.evtq_prod ^= 1 << 31;
            if self.evtq_prod >> 31 == self.evtq_cons >> 31 {
                // already flagged: keep it set until acknowledged
                self.evtq_prod ^= 1 << 31;
            }
            return;
        }
        let slot = u64::from(p & ((1 << log2) - 1));
        let at = (self.evtq_base & ADDR_MASK_51_5) + slot * EVENT_BYTES;
        for (k, x) in w.iter().enumerate() {
            self.mem.borrow_mut().insert(at + 8 * k as u64, *x);
        }
        self.evtq_prod = (self.evtq_prod & !mask) | ((p + 1) & mask);
    }

    /// A device on stream `sid` writes (or reads) IPA `ipa`.
    pub(crate) fn dma(&mut self, sid: u32, ipa: u64, read: bool) -> Dma {
        if self.cr0ack & CR0_SMMUEN == 0 {
            return if self.gbpa & GBPA_ABORT != 0 {
                Dma::Aborted
            } else {
                Dma::Done { vmid: 0, root: 0 }
            };
        }
        let ste = match self.ste_cache.get(&sid) {
            Some(s) => *s,
            None => match self.fetch_ste(sid) {
                None => {
                    if self.cr2 & 2 != 0 {
                        self.record(Event::encode(C_BAD_STREAMID, sid, 0, read));
                    }
                    return Dma::Aborted;
                }
                Some(s) => {
                    self.ste_cache.insert(sid, s);
                    s
                }
            },
        };
        match decode_ste(&ste) {
            SteConfig::Invalid => {
                self.record(Event::encode(C_BAD_STE, sid, 0, read));
                Dma::Aborted
            }
            SteConfig::Abort | SteConfig::Other(_) => Dma::Aborted,
            SteConfig::Stage2 { vmid, root, .. } => {
                if self.tlb.contains(&(vmid, ipa >> 12)) {
                    return Dma::Done { vmid, root };
                }
                let (base, size) = self.ram.get(&vmid).copied().unwrap_or((0, 0));
                if ipa < base || ipa >= base + size {
                    self.record(Event::encode(F_TRANSLATION, sid, ipa, read));
                    return Dma::Aborted;
                }
                self.tlb.push((vmid, ipa >> 12));
                Dma::Done { vmid, root }
            }
        }
    }
}

impl SmmuRegs for Regs {
    fn read32(&mut self, offset: u32) -> u32 {
        let mut m = self.0.borrow_mut();
        let Some(offset) = m.register(offset) else {
            return 0;
        };
        match offset {
            IDR0 => m.idr[0],
            IDR1 => m.idr[1],
            IDR5 => m.idr[2],
            CR0 => m.cr0,
            CR0ACK => m.cr0ack,
            GBPA => m.gbpa,
            IRQ_CTRLACK => m.irq_ctrl,
            GERROR => m.gerror,
            GERRORN => 0,
            CMDQ_PROD => m.cmdq_prod,
            CMDQ_CONS => m.cmdq_cons,
            EVENTQ_PROD => m.evtq_prod,
            EVENTQ_CONS => m.evtq_cons,
            _ => 0,
        }
    }
    fn write32(&mut self, offset: u32, value: u32) {
        let mut m = self.0.borrow_mut();
        let Some(offset) = m.register(offset) else {
            return;
        };
        match offset {
            CR0 => {
                m.cr0 = value;
                m.cr0ack = value;
            }
            CR2 => m.cr2 = value,
            GBPA => m.gbpa = value & !GBPA_UPDATE,
            IRQ_CTRL => m.irq_ctrl = value,
            STRTAB_BASE_CFG => m.strtab_cfg = value,
            CMDQ_PROD => {
                m.cmdq_prod = value;
                m.consume();
            }
            CMDQ_CONS => m.cmdq_cons = value,
            EVENTQ_PROD => m.evtq_prod = value,
            EVENTQ_CONS => m.evtq_cons = value,
            _ => {}
        }
    }
    fn write64(&mut self, offset: u32, value: u64) {
        let mut m = self.0.borrow_mut();
        match offset {
            STRTAB_BASE => m.strtab_base = value,
            CMDQ_BASE => m.cmdq_base = value,
            EVENTQ_BASE => m.evtq_base = value,
            _ => {}
        }
    }
}

pub(crate) struct Rig {
    pub(crate) model: Rc<RefCell<Model>>,
    pub(crate) regs: Regs,
    pub(crate) mem: FakeMem,
}

pub(crate) fn rig() -> Rig {
    let mem: Mem = Rc::new(RefCell::new(HashMap::new()));
    let model = Rc::new(RefCell::new(Model::new(mem.clone())));
    Rig {
        regs: Regs(model.clone()),
        model,
        mem: FakeMem {
            mem,
            next: 0x4000_0000,
            published: 0,
            fail_alloc: false,
        },
    }
}

const VTCR: u64 = 0x8004_3558; // vtcr_el2(44)

fn up(r: &mut Rig) -> Smmu {
    assert_eq!(vtcr_el2(44), VTCR);
    Smmu::init(&mut r.regs, &mut r.mem, VTCR, SmmuModel::Generic).unwrap()
}

const A: Binding = Binding {
    partition: 0,
    vmid: 1,
    stage2_root: PhysAddr(0x4800_0000),
};
const B: Binding = Binding {
    partition: 2,
    vmid: 3,
    stage2_root: PhysAddr(0x4900_2000),
};

fn with_ram(r: &Rig) {
    let mut m = r.model.borrow_mut();
    m.ram.insert(1, (0x4000_0000, 0x1000_0000));
    m.ram.insert(3, (0x8000_0000, 0x1000_0000));
}

#[test]
fn features_decode_qemu_stage2_model() {
    let r = rig();
    let m = r.model.borrow();
    let f = Features::decode(m.idr[0], m.idr[1], m.idr[2]);
    assert!(f.stage2 && !f.stage1 && f.two_level_table && f.vmid16 && f.coherent && f.gran4k);
    assert_eq!(
        (f.sid_bits, f.cmdq_log2, f.evtq_log2, f.oas_bits),
        (16, 19, 19, 44)
    );
    assert_eq!(f.check(), Ok(()));
}

#[test]
fn a_stage1_only_smmu_is_refused_naming_s2p() {
    // QEMU 7.2's model: S1P only.
    let mut r = rig();
    r.model.borrow_mut().idr[0] = 2 | 1 << 27;
    let e = Smmu::init(&mut r.regs, &mut r.mem, VTCR, SmmuModel::Generic).unwrap_err();
    assert_eq!(e, SmmuError::NoStage2);
    assert!(alloc::format!("{e}").contains("SMMU_IDR0.S2P"));
    // Nothing was enabled.
    assert_eq!(r.model.borrow().cr0ack, 0);
}

#[test]
fn no_4k_granule_or_linear_only_table_is_refused() {
    let mut r = rig();
    r.model.borrow_mut().idr[2] = 4 | 1 << 6;
    assert_eq!(
        Smmu::init(&mut r.regs, &mut r.mem, VTCR, SmmuModel::Generic).unwrap_err(),
        SmmuError::No4kGranule
    );
    let mut r = rig();
    r.model.borrow_mut().idr[0] &= !(3 << 27);
    assert_eq!(
        Smmu::init(&mut r.regs, &mut r.mem, VTCR, SmmuModel::Generic).unwrap_err(),
        SmmuError::NoTwoLevelTable
    );
}

#[test]
fn init_aborts_unknown_streams_and_enables() {
    let mut r = rig();
    let smmu = up(&mut r);
    let m = r.model.borrow();
    assert_eq!(m.gbpa & GBPA_ABORT, GBPA_ABORT);
    assert_eq!(m.cr0ack, CR0_SMMUEN | CR0_CMDQEN | CR0_EVTQEN);
    assert_eq!(m.strtab_cfg, 1 << 16 | 8 << 6 | 16);
    assert_eq!(m.strtab_base & ADDR_MASK_51_6, smmu.table.l1.0);
    assert_eq!(smmu.table.l1_entries, 256);
    assert_eq!(m.cmdq_base & 0x1f, u64::from(CMDQ_LOG2));
    assert_eq!(
        m.commands,
        [Command::CfgiAll, Command::TlbiNsnhAll, Command::Sync]
    );
    drop(m);
    // Every stream aborts before anything is bound, and says so.
    let mut m = r.model.borrow_mut();
    assert_eq!(m.dma(0x0008, 0x4000_0000, false), Dma::Aborted);
    assert_eq!(m.evtq_prod, 1);
}

#[test]
fn an_owned_stream_translates_through_its_partitions_stage2() {
    let mut r = rig();
    let mut smmu = up(&mut r);
    with_ram(&r);
    smmu.bind(&mut r.regs, &mut r.mem, 0x08, Some(A)).unwrap();
    let ste_words = smmu.table.read(&r.mem, 0x08).unwrap();
    assert_eq!(
        decode_ste(&ste_words),
        SteConfig::Stage2 {
            vmid: 1,
            root: 0x4800_0000,
            t0sz: 24,
            sl0: 1,
            ps: 4
        }
    );
    // The S2 fields are VTCR's: IRGN0/ORGN0 WBWA, SH0 inner, TG 4K.
    assert_eq!((ste_words[2] >> 32) & 0x7ffff, VTCR & 0x7ffff);
    assert_ne!(ste_words[2] & STE2_S2AA64, 0);
    assert_ne!(ste_words[2] & STE2_S2R, 0);
    assert_eq!(
        r.model.borrow_mut().dma(0x08, 0x4123_4000, false),
        Dma::Done {
            vmid: 1,
            root: 0x4800_0000
        }
    );
    assert_eq!(smmu.binding(0x08), Some(A));
}

#[test]
fn ps_is_capped_at_the_smmus_output_size() {
    let f = Features::decode(1 | 1 << 27, 16, 2 | 1 << 4); // OAS 40 bits
    let w = ste(Some(A), vtcr_el2(48), &f);
    assert_eq!((w[2] >> 48) & 7, 2);
}

#[test]
fn an_unowned_stream_aborts_next_to_an_owned_one() {
    let mut r = rig();
    let mut smmu = up(&mut r);
    with_ram(&r);
    smmu.bind(&mut r.regs, &mut r.mem, 0x08, Some(A)).unwrap();
    let before = r.model.borrow().evtq_prod;
    // Same bus (same level-2 table), nobody's: abort, no event.
    assert_eq!(
        r.model.borrow_mut().dma(0x10, 0x4000_0000, false),
        Dma::Aborted
    );
    assert_eq!(
        decode_ste(&smmu.table.read(&r.mem, 0x10).unwrap()),
        SteConfig::Abort
    );
    // Another bus (no level-2 table): invalid STE, C_BAD_STE.
    assert_eq!(
        r.model.borrow_mut().dma(0x300, 0x4000_0000, false),
        Dma::Aborted
    );
    let mut seen = vec![];
    smmu.poll_events(&mut r.regs, &r.mem, |f| seen.push(f));
    assert_eq!(r.model.borrow().evtq_prod, before + 1);
    assert_eq!(seen.last().unwrap().event.kind, EventKind::BadSte);
    assert_eq!(seen.last().unwrap().partition, None);
}

#[test]
fn dma_outside_the_partitions_ram_is_its_fault_at_that_ipa() {
    let mut r = rig();
    let mut smmu = up(&mut r);
    with_ram(&r);
    smmu.poll_events(&mut r.regs, &r.mem, |_| {});
    smmu.bind(&mut r.regs, &mut r.mem, 0x08, Some(A)).unwrap();
    smmu.bind(&mut r.regs, &mut r.mem, 0x10, Some(B)).unwrap();
    // A's device aims at B's RAM.
    assert_eq!(
        r.model.borrow_mut().dma(0x08, 0x8000_1000, false),
        Dma::Aborted
    );
    let mut seen = vec![];
    let d = smmu.poll_events(&mut r.regs, &r.mem, |f| seen.push(f));
    assert_eq!(
        d,
        Drained {
            events: 1,
            overflowed: false
        }
    );
    assert_eq!(
        seen,
        [DmaFault {
            event: Event {
                id: F_TRANSLATION,
                kind: EventKind::Translation,
                sid: 0x08,
                addr: 0x8000_1000,
                read: false,
                stage2: true
            },
            partition: Some(0),
        }]
    );
    // Drained: the consumer index was written back.
    assert_eq!(r.model.borrow().evtq_cons, r.model.borrow().evtq_prod);
}

#[test]
fn reassignment_aborts_invalidates_and_then_translates_for_the_new_owner() {
    let mut r = rig();
    let mut smmu = up(&mut r);
    with_ram(&r);
    smmu.bind(&mut r.regs, &mut r.mem, 0x08, Some(A)).unwrap();
    assert!(matches!(
        r.model.borrow_mut().dma(0x08, 0x4000_0000, false),
        Dma::Done { vmid: 1, .. }
    ));
    r.model.borrow_mut().commands.clear();
    smmu.bind(&mut r.regs, &mut r.mem, 0x08, Some(B)).unwrap();
    assert_eq!(
        r.model.borrow().commands,
        [
            Command::CfgiSte(8),
            Command::TlbiS12Vmall(1),
            Command::Sync,
            Command::CfgiSte(8),
            Command::Sync
        ]
    );
    let mut m = r.model.borrow_mut();
    // The old owner's walk is gone, the new one's stage 2 is used.
    assert!(!m.tlb.iter().any(|t| t.0 == 1));
    assert_eq!(
        m.dma(0x08, 0x8000_0000, false),
        Dma::Done {
            vmid: 3,
            root: 0x4900_2000
        }
    );
    assert_eq!(m.dma(0x08, 0x4000_0000, false), Dma::Aborted);
    drop(m);
    assert_eq!(smmu.streams_of(0), Vec::<u32>::new());
    assert_eq!(smmu.streams_of(2), [8]);
}

#[test]
fn binding_again_to_the_same_owner_sends_nothing() {
    let mut r = rig();
    let mut smmu = up(&mut r);
    smmu.bind(&mut r.regs, &mut r.mem, 0x08, Some(A)).unwrap();
    r.model.borrow_mut().commands.clear();
    smmu.bind(&mut r.regs, &mut r.mem, 0x08, Some(A)).unwrap();
    assert!(r.model.borrow().commands.is_empty());
}

#[test]
fn releasing_a_partition_aborts_its_streams_and_invalidates_its_vmid() {
    let mut r = rig();
    let mut smmu = up(&mut r);
    with_ram(&r);
    for sid in [0x08, 0x10, 0x108] {
        smmu.bind(&mut r.regs, &mut r.mem, sid, Some(A)).unwrap();
    }
    smmu.bind(&mut r.regs, &mut r.mem, 0x18, Some(B)).unwrap();
    r.model.borrow_mut().dma(0x08, 0x4000_0000, true);
    r.model.borrow_mut().commands.clear();
    assert_eq!(
        smmu.release_partition(&mut r.regs, &mut r.mem, 0).unwrap(),
        [0x08, 0x10, 0x108]
    );
    let mut m = r.model.borrow_mut();
    assert_eq!(
        m.commands,
        [
            Command::CfgiSte(0x08),
            Command::CfgiSte(0x10),
            Command::CfgiSte(0x108),
            Command::TlbiS12Vmall(1),
            Command::Sync
        ]
    );
    for sid in [0x08, 0x10, 0x108] {
        assert_eq!(m.dma(sid, 0x4000_0000, false), Dma::Aborted);
    }
    assert!(matches!(
        m.dma(0x18, 0x8000_0000, false),
        Dma::Done { vmid: 3, .. }
    ));
}

#[test]
fn forgetting_cfgi_would_leave_the_old_entry_in_use() {
    // The model's STE cache is what makes the reassignment test able to
    // fail: without CMD_CFGI_STE the old translation stays.
    let mut r = rig();
    let mut smmu = up(&mut r);
    with_ram(&r);
    smmu.bind(&mut r.regs, &mut r.mem, 0x08, Some(A)).unwrap();
    r.model.borrow_mut().dma(0x08, 0x4000_0000, false);
    let at = smmu.table.ste_addr(0x08).unwrap();
    r.mem.write_u64(at, ste(None, VTCR, &smmu.features)[0]);
    assert!(matches!(
        r.model.borrow_mut().dma(0x08, 0x4000_0000, false),
        Dma::Done { .. }
    ));
}

#[test]
fn invalidate_vmid_sends_tlbi_and_sync() {
    let mut r = rig();
    let mut smmu = up(&mut r);
    r.model.borrow_mut().commands.clear();
    smmu.invalidate_vmid(&mut r.regs, &mut r.mem, 5).unwrap();
    assert_eq!(
        r.model.borrow().commands,
        [Command::TlbiS12Vmall(5), Command::Sync]
    );
}

#[test]
fn a_full_command_queue_is_waited_for_then_wraps() {
    let mut r = rig();
    let mut smmu = up(&mut r);
    // The SMMU ignores a few PROD writes: the queue fills, the driver
    // polls, and the commands all go through in order across the wrap.
    r.model.borrow_mut().stall = 3;
    r.model.borrow_mut().commands.clear();
    let cmds: Vec<Command> = (0..600).map(Command::CfgiSte).collect();
    smmu.cmdq
        .submit_and_sync(&mut r.regs, &mut r.mem, &cmds)
        .unwrap();
    let m = r.model.borrow();
    assert_eq!(m.commands.len(), 601);
    assert_eq!(m.commands[..600], cmds[..]);
    assert_eq!(m.commands[600], Command::Sync);
}

#[test]
fn a_command_queue_that_stays_full_is_an_error() {
    let mut r = rig();
    let mut smmu = up(&mut r);
    r.model.borrow_mut().stall = u32::MAX;
    let cmds: Vec<Command> = (0..300).map(Command::CfgiSte).collect();
    assert_eq!(
        smmu.cmdq
            .submit(&mut r.regs, &mut r.mem, &cmds)
            .unwrap_err(),
        SmmuError::CommandQueueFull
    );
}

#[test]
fn a_sync_that_never_completes_times_out() {
    let mut r = rig();
    let mut smmu = up(&mut r);
    r.model.borrow_mut().stall = u32::MAX;
    assert_eq!(
        smmu.invalidate_vmid(&mut r.regs, &mut r.mem, 1)
            .unwrap_err(),
        SmmuError::Timeout("CMDQ_CONS (CMD_SYNC)")
    );
}

#[test]
fn a_command_error_is_reported_with_its_opcode() {
    let mut r = rig();
    let mut smmu = up(&mut r);
    // An opcode the model does not know, written by hand at PROD.
    let prod = r.model.borrow().cmdq_prod;
    let at = smmu.cmdq.base.add(u64::from(prod & 0xff) * CMD_BYTES);
    r.mem.write_u64(at, 0x7f);
    r.regs.write32(CMDQ_PROD, prod + 1);
    let e = smmu
        .invalidate_vmid(&mut r.regs, &mut r.mem, 1)
        .unwrap_err();
    assert_eq!(
        e,
        SmmuError::Command {
            code: 1,
            opcode: 0x7f
        }
    );
    assert!(alloc::format!("{e}").contains("CERROR_ILL"));
}

#[test]
fn event_queue_overflow_is_reported_and_acknowledged() {
    let mut r = rig();
    let mut smmu = up(&mut r);
    with_ram(&r);
    smmu.bind(&mut r.regs, &mut r.mem, 0x08, Some(A)).unwrap();
    let size = 1u32 << EVTQ_LOG2;
    for i in 0..size + 5 {
        r.model
            .borrow_mut()
            .dma(0x08, 0x9000_0000 + u64::from(i) * 0x1000, false);
    }
    let mut n = 0u32;
    let d = smmu.poll_events(&mut r.regs, &r.mem, |f| {
        assert_eq!(f.partition, Some(0));
        assert_eq!(f.event.addr, 0x9000_0000 + u64::from(n) * 0x1000);
        n += 1;
    });
    assert_eq!(
        d,
        Drained {
            events: size,
            overflowed: true
        }
    );
    assert_eq!(smmu.stats.overflows, 1);
    // Acknowledged: the next fault is an ordinary one.
    r.model.borrow_mut().dma(0x08, 0x9000_0000, false);
    let d = smmu.poll_events(&mut r.regs, &r.mem, |_| {});
    assert_eq!(
        d,
        Drained {
            events: 1,
            overflowed: false
        }
    );
    assert_eq!(smmu.stats.events, u64::from(size) + 1);
}

#[test]
fn an_empty_event_queue_drains_nothing() {
    let mut r = rig();
    let mut smmu = up(&mut r);
    assert_eq!(
        smmu.poll_events(&mut r.regs, &r.mem, |_| panic!()),
        Drained::default()
    );
}

#[test]
fn event_records_decode_kind_stream_address_and_direction() {
    let e = Event::decode(Event::encode(F_PERMISSION, 0x1234, 0x4000_0010, true));
    assert_eq!(
        (e.kind, e.sid, e.addr, e.read, e.stage2),
        (EventKind::Permission, 0x1234, 0x4000_0010, true, true)
    );
    let e = Event::decode(Event::encode(C_BAD_STREAMID, 0x1_0000, 0xdead, false));
    assert_eq!(
        (e.kind, e.sid, e.addr),
        (EventKind::BadStreamId, 0x1_0000, 0)
    );
    assert_eq!(Event::decode([0x99, 0, 0, 0]).kind, EventKind::Other(0x99));
    assert_eq!(EventKind::Translation.name(), "F_TRANSLATION");
}

#[test]
fn a_stream_beyond_sidsize_is_refused() {
    let mut r = rig();
    let mut smmu = up(&mut r);
    assert_eq!(
        smmu.bind(&mut r.regs, &mut r.mem, 0x1_0000, Some(A))
            .unwrap_err(),
        SmmuError::StreamIdTooLarge(0x1_0000)
    );
}

#[test]
fn no_memory_is_an_error() {
    let mut r = rig();
    r.mem.fail_alloc = true;
    assert_eq!(
        Smmu::init(&mut r.regs, &mut r.mem, VTCR, SmmuModel::Generic).unwrap_err(),
        SmmuError::NoMemory
    );
}

#[test]
fn requester_ids_map_to_stream_ids_and_back() {
    let maps = [IdMap {
        rid_base: 0,
        sid_base: 0,
        len: 0x1_0000,
    }];
    assert_eq!(rid_to_sid(&maps, 0x0108), Some(0x0108));
    let maps = [
        IdMap {
            rid_base: 0x100,
            sid_base: 0x2000,
            len: 0x100,
        },
        IdMap {
            rid_base: 0,
            sid_base: 0x1000,
            len: 0x100,
        },
    ];
    assert_eq!(rid_to_sid(&maps, 0x0108), Some(0x2008));
    assert_eq!(rid_to_sid(&maps, 0x0008), Some(0x1008));
    assert_eq!(rid_to_sid(&maps, 0x0208), None);
    assert_eq!(sid_to_rid(&maps, 0x2008), Some(0x0108));
    assert_eq!(sid_to_rid(&maps, 0x3000), None);
}

struct BridgeOwner(Option<Binding>, (u8, u8));

impl FunctionOwners for BridgeOwner {
    fn owner(&self, rid: u16) -> Option<Binding> {
        let bus = (rid >> 8) as u8;
        if bus >= self.1 .0 && bus <= self.1 .1 {
            self.0
        } else {
            None
        }
    }
}

#[test]
fn bind_functions_follows_the_ownership_query() {
    let mut r = rig();
    let mut smmu = up(&mut r);
    with_ram(&r);
    let maps = [IdMap {
        rid_base: 0,
        sid_base: 0,
        len: 0x1_0000,
    }];
    let owners = BridgeOwner(Some(A), (0, 0));
    let n = smmu
        .bind_functions(
            &mut r.regs,
            &mut r.mem,
            &maps,
            [0x0008, 0x0010, 0x0108],
            &owners,
        )
        .unwrap();
    assert_eq!(n, 3);
    assert_eq!(smmu.streams_of(0), [0x08, 0x10]);
    // Bus 1 is not the owner's: its stream aborts.
    assert_eq!(
        decode_ste(&smmu.table.read(&r.mem, 0x108).unwrap()),
        SteConfig::Abort
    );
    assert_eq!(
        r.model.borrow_mut().dma(0x108, 0x4000_0000, false),
        Dma::Aborted
    );
}

#[test]
fn queue_index_arithmetic_handles_the_wrap_bit() {
    assert!(q_full(0b1_000, 0b0_000, 3));
    assert!(!q_full(0b0_000, 0b0_000, 3));
    assert_eq!(q_inc(0b0_111, 3), 0b1_000);
    assert_eq!(q_inc(0b1_111, 3), 0);
    assert!(q_passed(0b1_001, 0b1_000, 3));
    assert!(q_passed(0b0_000, 0b1_111, 3));
    assert!(!q_passed(0b1_000, 0b1_000, 3));
    assert!(!q_passed(0b0_111, 0b1_000, 3));
}

#[test]
fn a_cavium_cn99xx_has_its_event_queue_registers_in_page_0_and_page_1_is_never_touched() {
    let mut r = rig();
    r.model.borrow_mut().page0_only = true;
    let mut smmu = Smmu::init(&mut r.regs, &mut r.mem, VTCR, SmmuModel::CaviumCn99xx).unwrap();
    // A stream nobody owns faults: one event record.
    assert_eq!(
        r.model.borrow_mut().dma(0x0008, 0x4000_0000, false),
        Dma::Aborted
    );

    let mut faults = Vec::new();
    let drained = smmu.poll_events(&mut r.regs, &r.mem, |f| faults.push(f));

    assert_eq!((smmu.evtq.prod_reg, smmu.evtq.cons_reg), (0xa8, 0xac));
    assert_eq!(drained.events, 1);
    assert_eq!(faults[0].event.kind, EventKind::BadSte);
    let m = r.model.borrow();
    assert_eq!(m.evtq_cons & 0xff, 1, "CONS written back in page 0");
    assert_eq!(m.page1_touched, 0);
    // A generic SMMU keeps them in page 1.
    assert_eq!(page1(EVENTQ_PROD, SmmuModel::Generic), 0x1_00a8);
    assert_eq!(page1(EVENTQ_CONS, SmmuModel::HisiliconHi161x), 0x1_00ac);
}

#[test]
fn a_hisilicon_hi161x_is_never_sent_cmd_prefetch_config() {
    /// CMD_PREFETCH_CONFIG's opcode (IHI 0070, 4.2.1).
    const CMD_PREFETCH_CONFIG: u8 = 0x01;
    let mut r = rig();
    let mut smmu = Smmu::init(&mut r.regs, &mut r.mem, VTCR, SmmuModel::HisiliconHi161x).unwrap();
    with_ram(&r);

    smmu.bind(&mut r.regs, &mut r.mem, 0x08, Some(A)).unwrap();
    smmu.bind(&mut r.regs, &mut r.mem, 0x08, Some(B)).unwrap();
    smmu.release_partition(&mut r.regs, &mut r.mem, B.partition)
        .unwrap();

    let m = r.model.borrow();
    assert!(m.opcodes.len() > 5, "{:?}", m.opcodes);
    assert!(!m.opcodes.contains(&CMD_PREFETCH_CONFIG), "{:?}", m.opcodes);
}
