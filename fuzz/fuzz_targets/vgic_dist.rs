//! The emulated distributor under any sequence of guest accesses and device
//! line changes: never panics, never reports an SPI it does not own as
//! enabled, pending or active, never asks to program a physical SPI that is
//! not passed through, never injects into a vCPU that does not exist.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pinfold_hv::vgic::dist::{DistAction, VDist};

const EMULATED: [u32; 3] = [33, 92, 93];

fuzz_target!(|data: &[u8]| {
    let Some((&head, ops)) = data.split_first() else {
        return;
    };
    let vcpus = usize::from(head % 4) + 1;
    let mpidrs: Vec<u64> = (0..vcpus as u64).map(|i| 0x8000_0000 | i).collect();
    // Two pass-through SPIs chosen by the input (never an emulated one).
    let pass: Vec<u32> = [u32::from(head >> 2) % 64 + 34, 200]
        .into_iter()
        .filter(|s| !EMULATED.contains(s))
        .collect();
    let owned = |intid: u32| EMULATED.contains(&intid) || pass.contains(&intid);
    let mut dist = VDist::new(&mpidrs, &EMULATED, &pass);
    let mut check = |act: DistAction| match act {
        DistAction::Inject { vcpu, irq } => {
            assert!(vcpu < vcpus, "inject into vCPU {vcpu} of {vcpus}");
            assert!(owned(irq.intid), "injected unowned SPI {}", irq.intid);
        }
        DistAction::Retract { vcpu, .. } => assert!(vcpu < vcpus),
        DistAction::PhysSpiEnable { intid, .. }
        | DistAction::PhysSpiRoute { intid, .. }
        | DistAction::PhysSpiPending { intid, .. }
        | DistAction::PhysSpiActive { intid, .. } => {
            assert!(
                pass.contains(&intid),
                "physical SPI {intid} is not passed through"
            )
        }
        DistAction::Refused { intid, .. } => assert!(!owned(intid), "refused own SPI {intid}"),
    };
    for op in ops.chunks(12) {
        if op.len() < 12 {
            break;
        }
        let offset = u64::from(u16::from_le_bytes([op[1], op[2]]));
        let width = [1u8, 2, 4, 8][usize::from(op[3] & 3)];
        let value = u64::from_le_bytes(op[4..12].try_into().unwrap());
        match op[0] % 4 {
            0 => {
                let _ = dist.read(offset, width);
            }
            1 | 2 => dist.write(offset, width, value, &mut check),
            _ => {
                let intid = EMULATED[usize::from(op[1]) % EMULATED.len()];
                dist.set_emulated_level(intid, op[2] & 1 == 1, &mut check);
            }
        }
    }
    // No unowned SPI reads enabled, pending or active.
    for bank in [0x100u64, 0x200, 0x300] {
        for word in 1..9u64 {
            let v = dist.read(bank + 4 * word, 4) as u32;
            for bit in 0..32 {
                let intid = word as u32 * 32 + bit;
                if v & 1 << bit != 0 {
                    assert!(owned(intid), "unowned SPI {intid} set in bank {bank:#x}");
                }
            }
        }
    }
});
