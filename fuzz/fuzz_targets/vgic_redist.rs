//! The emulated redistributor under any sequence of accesses and SGIs:
//! never panics, only ever asks to program the physical state of the PPIs
//! passed through (the timers, the PMU), and injects only SGIs and PPIs.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pinfold_hv::irqchip::PpiBits;
use pinfold_hv::vgic::redist::{RedistAction, VRedist};

/// The virtual timer, the EL1 physical timer and the PMU interrupt.
const PASSTHROUGH: u32 = 1 << 27 | 1 << 30 | 1 << 23;

fuzz_target!(|data: &[u8]| {
    let Some((&head, ops)) = data.split_first() else {
        return;
    };
    let mut r = VRedist::new(
        usize::from(head & 7),
        0x8000_0000 | u64::from(head & 7),
        head & 8 != 0,
        PASSTHROUGH,
    );
    let mut check = |act: RedistAction| match act {
        RedistAction::Inject(irq) => {
            assert!(irq.intid < 32, "redistributor injected {}", irq.intid)
        }
        RedistAction::Retract(intid) => assert!(intid < 32),
        RedistAction::PhysPpiEnable { intid, .. }
        | RedistAction::PhysPpiPending { intid, .. }
        | RedistAction::PhysPpiActive { intid, .. } => {
            assert!(
                intid < 32 && PASSTHROUGH & 1 << intid != 0,
                "physical PPI {intid}"
            )
        }
        RedistAction::LpisOn { .. } => panic!("EnableLPIs on a redistributor without LPIs"),
    };
    for op in ops.chunks(12) {
        if op.len() < 12 {
            break;
        }
        let offset = u64::from(u32::from_le_bytes([op[1], op[2], op[3] & 0x3, 0]));
        let width = [1u8, 2, 4, 8][usize::from(op[3] >> 6)];
        let value = u64::from_le_bytes(op[4..12].try_into().unwrap());
        match op[0] % 5 {
            0 => {
                let _ = r.read(offset, width);
            }
            1 => {
                let hw = PpiBits {
                    pending: value as u32,
                    active: (value >> 32) as u32,
                };
                let _ = r.read_with_hw(offset, width, hw);
            }
            2 | 3 => r.write(offset, width, value, &mut check),
            _ => {
                if let Some(irq) = r.raise_sgi(u32::from(op[1])) {
                    assert!(irq.intid < 16, "SGI {} raised", irq.intid);
                }
            }
        }
        let _ = r.hw_ppis();
    }
});
