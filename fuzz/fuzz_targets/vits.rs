//! A partition's virtual ITS under any sequence of register accesses and
//! command queue contents: never panics, never translates a command for a
//! DeviceID the partition does not own or to a vCPU it does not have, keeps
//! its mappings within the limits, and CREADR stays inside the queue.
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use pinfold_hv::vgic::vits::{
    PhysCmd, QueueMemory, Vits, VitsError, VitsLimits, VitsSink, GITS_BASER0, GITS_CBASER,
    GITS_CREADR, GITS_CTLR, GITS_CWRITER, GITS_TYPER,
};

const RAM: u64 = 0x4000_0000;
const RAM_SIZE: u64 = 0x4_0000;
const VCPUS: u16 = 3;

struct Ram(BTreeMap<u64, [u64; 4]>);

impl QueueMemory for Ram {
    fn read_command(&self, ipa: u64) -> Option<[u64; 4]> {
        (ipa >= RAM && ipa.checked_add(32)? <= RAM + RAM_SIZE)
            .then(|| self.0.get(&ipa).copied().unwrap_or([0; 4]))
    }
}

/// Owned: DeviceIDs 0x08 and 0x10.
fn owner(d: u32) -> bool {
    d == 0x08 || d == 0x10
}

struct Check(u64);

impl VitsSink for Check {
    fn apply(&mut self, cmd: PhysCmd) {
        self.0 += 1;
        match cmd {
            PhysCmd::Mapd { device, .. }
            | PhysCmd::Discard { device, .. }
            | PhysCmd::Inv { device, .. }
            | PhysCmd::Int { device, .. }
            | PhysCmd::Clear { device, .. } => assert!(owner(device), "device {device:#x}"),
            PhysCmd::Mapti { device, vcpu, vintid, .. } => {
                assert!(owner(device) && vcpu < VCPUS && vintid >= 8192);
            }
            PhysCmd::Movi { device, vcpu, .. } => assert!(owner(device) && vcpu < VCPUS),
            PhysCmd::InvAll { vcpu } | PhysCmd::Sync { vcpu } => assert!(vcpu < VCPUS),
        }
    }
    fn fault(&mut self, _: VitsError, _: u64) {}
}

const OFFSETS: [u64; 8] = [
    GITS_CTLR,
    GITS_TYPER,
    GITS_CBASER,
    GITS_CWRITER,
    GITS_CREADR,
    GITS_BASER0,
    GITS_BASER0 + 8,
    0x44,
];

fuzz_target!(|data: &[u8]| {
    let mut limits = VitsLimits::for_vcpus(VCPUS);
    limits.max_devices = 2;
    limits.max_mappings = 64;
    let mut its = Vits::new(limits);
    let mut ram = Ram(BTreeMap::new());
    let mut sink = Check(0);
    for op in data.chunks(34) {
        if op.len() < 34 {
            break;
        }
        let word = |i: usize| u64::from_le_bytes(op[2 + 8 * i..10 + 8 * i].try_into().unwrap());
        match op[0] % 3 {
            // A command slot in the partition's RAM (where queues may be).
            0 => {
                let at = RAM + (u64::from(op[1]) << 5);
                ram.0.insert(at, [word(0), word(1), word(2), word(3)]);
            }
            1 => {
                let offset = OFFSETS[usize::from(op[1] & 7)];
                let mut value = word(0);
                if offset == GITS_CBASER && op[1] & 8 != 0 {
                    // Most queues in RAM, so commands run.
                    value = (value & (1 << 63 | 0xF)) | RAM;
                }
                its.write(offset, value, &ram, &owner, &mut sink);
            }
            _ => {
                let _ = its.read(OFFSETS[usize::from(op[1] & 7)]);
            }
        }
        assert!(its.mappings() <= 64 && its.devices() <= 2);
        let size = ((its.read(GITS_CBASER) & 0xFF) + 1) * 4096;
        assert!(its.read(GITS_CREADR) & 0xF_FFE0 < size);
    }
});
