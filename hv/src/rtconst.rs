//! Instruction encoders for the runtime-constant root IRQ handler call site,
//! which boot code patches once so the IRQ path calls the GIC driver without
//! loading a function pointer.
//!
//! A call site is one instruction, assembled as `bl default_handler`, so an
//! IRQ taken before patching reaches a safe handler, never a bogus address,
//! and a patched site executes exactly one instruction: `bl handler`. A
//! target out of BL's +-128 MiB reach (never the case for a driver linked
//! into the image, but the encoder does not assume it) goes through a
//! veneer, as a linker would place one: the site becomes `bl veneer` and the
//! veneer `movz/movk x16 ...; br x16`, a tail branch that returns to the
//! site's successor. Boot code writes the words with IRQs masked on every
//! CPU, followed by the usual `DC CVAU; DSB ISH; IC IVAU; DSB ISH; ISB`
//! sequence. Encodings follow the Arm ARM C6.2 (BL, BR, MOVZ, MOVK; 64-bit
//! forms).

/// Instructions in a veneer: four moves and the branch.
pub const VENEER_WORDS: usize = 5;

/// `NOP` (HINT #0).
pub const NOP: u32 = 0xd503_201f;

/// The scratch register of the absolute form. X16 (IP0) is the
/// intra-procedure-call register the AAPCS64 lets veneers clobber.
pub const SCRATCH_REG: u8 = 16;

const BL_OPCODE: u32 = 0x9400_0000;
const BL_OPCODE_MASK: u32 = 0xFC00_0000;
const BL_IMM26_MASK: u32 = 0x03FF_FFFF;
/// BL reaches +-128 MiB: a signed 26-bit word offset.
const BL_RANGE: i64 = 1 << 27;

const MOVZ_X: u32 = 0xd280_0000;
const MOVK_X: u32 = 0xf280_0000;
const BLR: u32 = 0xd63f_0000;
const BR: u32 = 0xd61f_0000;

/// `BL target` placed at `site`, or None when the target is out of the
/// +-128 MiB range or either address is not 4-byte aligned.
pub fn encode_bl(site: u64, target: u64) -> Option<u32> {
    if !site.is_multiple_of(4) || !target.is_multiple_of(4) {
        return None;
    }
    let offset = target.wrapping_sub(site) as i64;
    if !(-BL_RANGE..BL_RANGE).contains(&offset) {
        return None;
    }
    Some(BL_OPCODE | (((offset >> 2) as u32) & BL_IMM26_MASK))
}

/// `MOVZ Xreg, #imm16, LSL #shift`. `shift` is 0, 16, 32 or 48; other values
/// are a caller bug and are reduced to those (bits [5:4] of `shift`).
pub fn encode_movz(reg: u8, imm16: u16, shift: u8) -> u32 {
    encode_move_wide(MOVZ_X, reg, imm16, shift)
}

/// `MOVK Xreg, #imm16, LSL #shift`; `shift` as for [`encode_movz`].
pub fn encode_movk(reg: u8, imm16: u16, shift: u8) -> u32 {
    encode_move_wide(MOVK_X, reg, imm16, shift)
}

fn encode_move_wide(opcode: u32, reg: u8, imm16: u16, shift: u8) -> u32 {
    debug_assert!(
        shift.is_multiple_of(16) && shift < 64,
        "move-wide shift {shift}"
    );
    let hw = u32::from((shift >> 4) & 0b11);
    opcode | (hw << 21) | (u32::from(imm16) << 5) | u32::from(reg & 0x1F)
}

/// `BLR Xreg`.
pub fn encode_blr(reg: u8) -> u32 {
    BLR | (u32::from(reg & 0x1F) << 5)
}

/// `BR Xreg`.
pub fn encode_br(reg: u8) -> u32 {
    BR | (u32::from(reg & 0x1F) << 5)
}

/// What boot code writes: the site's one word and, for a far target, the
/// veneer's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallSitePatch {
    pub site: u32,
    pub veneer: Option<[u32; VENEER_WORDS]>,
}

/// The patch that makes the call site at `site` call `target`: `bl target`
/// when in range, else `bl veneer` with the veneer at `veneer` branching to
/// `target`. None if neither the target nor the veneer is reachable (or an
/// address is misaligned).
pub fn call_site(site: u64, target: u64, veneer: u64) -> Option<CallSitePatch> {
    if let Some(bl) = encode_bl(site, target) {
        return Some(CallSitePatch {
            site: bl,
            veneer: None,
        });
    }
    Some(CallSitePatch {
        site: encode_bl(site, veneer)?,
        veneer: Some(veneer_words(target)),
    })
}

/// `movz x16, #t[15:0]; movk x16, #t[31:16], lsl 16; movk ... lsl 32;
/// movk ... lsl 48; br x16`, independent of where it is placed. All four
/// moves are always emitted so the form is fixed-length and decodable.
pub fn veneer_words(target: u64) -> [u32; VENEER_WORDS] {
    let part = |shift: u8| (target >> shift) as u16;
    [
        encode_movz(SCRATCH_REG, part(0), 0),
        encode_movk(SCRATCH_REG, part(16), 16),
        encode_movk(SCRATCH_REG, part(32), 32),
        encode_movk(SCRATCH_REG, part(48), 48),
        encode_br(SCRATCH_REG),
    ]
}

/// Where a `bl` at `site` goes, or None if `word` is not a BL.
pub fn decode_bl(site: u64, word: u32) -> Option<u64> {
    if word & BL_OPCODE_MASK != BL_OPCODE {
        return None;
    }
    // Sign-extend imm26 from bit 25, then scale by 4.
    let imm26 = (word & BL_IMM26_MASK) as i32;
    let offset = i64::from((imm26 << 6) >> 6) * 4;
    Some(site.wrapping_add(offset as u64))
}

/// The target a veneer branches to, or None if `words` is not one.
pub fn decode_veneer(words: &[u32; VENEER_WORDS]) -> Option<u64> {
    let mut target = 0u64;
    for (i, &word) in words[..4].iter().enumerate() {
        let opcode = if i == 0 { MOVZ_X } else { MOVK_X };
        let hw = i as u32;
        let fixed = opcode | (hw << 21) | u32::from(SCRATCH_REG);
        let imm_mask = 0xFFFF << 5;
        if word & !imm_mask != fixed {
            return None;
        }
        target |= u64::from((word & imm_mask) >> 5) << (16 * i);
    }
    (words[4] == encode_br(SCRATCH_REG)).then_some(target)
}

/// The handler a patched site ends up calling: the BL's target, or the
/// veneer's when the BL goes to the veneer. Lets boot code verify a patch.
pub fn decode_call_site(
    site: u64,
    word: u32,
    veneer: u64,
    veneer_words: &[u32; VENEER_WORDS],
) -> Option<u64> {
    let to = decode_bl(site, word)?;
    if to == veneer {
        decode_veneer(veneer_words)
    } else {
        Some(to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bl_forward_by_eight_bytes_matches_reference_encoding() {
        // `bl .+8` assembles to 0x94000002.
        assert_eq!(encode_bl(0x4008_1000, 0x4008_1008), Some(0x9400_0002));
    }

    #[test]
    fn bl_backward_by_four_bytes_matches_reference_encoding() {
        // `bl .-4` assembles to 0x97ffffff.
        assert_eq!(encode_bl(0x4008_1000, 0x4008_0FFC), Some(0x97FF_FFFF));
    }

    #[test]
    fn bl_reaches_exactly_the_ends_of_its_range() {
        let site = 0x1_0000_0000;

        assert_eq!(encode_bl(site, site + (128 << 20) - 4), Some(0x95FF_FFFF));
        assert_eq!(encode_bl(site, site - (128 << 20)), Some(0x9600_0000));
    }

    #[test]
    fn bl_refuses_targets_one_word_out_of_range() {
        let site = 0x1_0000_0000;

        assert_eq!(encode_bl(site, site + (128 << 20)), None);
        assert_eq!(encode_bl(site, site - (128 << 20) - 4), None);
    }

    #[test]
    fn bl_refuses_misaligned_addresses() {
        assert_eq!(encode_bl(0x1000, 0x2002), None);
        assert_eq!(encode_bl(0x1001, 0x2000), None);
    }

    #[test]
    fn move_wide_encodings_match_reference_words() {
        assert_eq!(encode_movz(16, 0x1234, 0), 0xd282_4690); // movz x16, #0x1234
        assert_eq!(encode_movk(16, 0xabcd, 16), 0xf2b5_79b0); // movk x16, #0xabcd, lsl 16
        assert_eq!(encode_movk(16, 0xffff, 48), 0xf2ff_fff0); // movk x16, #0xffff, lsl 48
        assert_eq!(encode_movz(0, 0, 32), 0xd2c0_0000); // movz x0, #0, lsl 32
    }

    #[test]
    fn blr_encodings_match_reference_words() {
        assert_eq!(encode_blr(16), 0xd63f_0200);
        assert_eq!(encode_blr(0), 0xd63f_0000);
        assert_eq!(encode_blr(30), 0xd63f_03c0);
    }

    #[test]
    fn br_encodings_match_reference_words() {
        assert_eq!(encode_br(16), 0xd61f_0200);
        assert_eq!(encode_br(0), 0xd61f_0000);
    }

    const VENEER: u64 = 0x4000_2000;

    #[test]
    fn near_target_is_one_bl_and_no_veneer() {
        let patch = call_site(0x4000_0800, 0x4001_0000, VENEER).unwrap();

        assert_eq!(patch.site, 0x9400_3E00);
        assert_eq!(patch.veneer, None);
    }

    #[test]
    fn far_target_goes_through_the_veneer() {
        let site = 0x4000_0000;
        let target = 0xFFFF_8000_1234_5678;

        let patch = call_site(site, target, VENEER).unwrap();

        assert_eq!(Some(patch.site), encode_bl(site, VENEER));
        assert_eq!(
            patch.veneer,
            Some([
                0xd28a_cf10,
                0xf2a2_4690,
                0xf2d0_0010,
                0xf2ff_fff0,
                0xd61f_0200
            ])
        );
    }

    #[test]
    fn veneer_emits_all_four_moves_even_for_zero_halves() {
        assert_eq!(
            veneer_words(0x0000_0000_4000_0000),
            [
                0xd280_0010,
                0xf2a8_0010,
                0xf2c0_0010,
                0xf2e0_0010,
                0xd61f_0200
            ]
        );
    }

    #[test]
    fn unreachable_veneer_is_refused() {
        assert_eq!(call_site(0, 0xFFFF_8000_0000_0000, 0x4000_0000_0000), None);
    }

    #[test]
    fn near_site_round_trips_forward_and_backward() {
        let site = 0x4010_0000;
        for target in [
            site + 4,
            site - 4,
            site + (128 << 20) - 4,
            site - (128 << 20),
        ] {
            let patch = call_site(site, target, VENEER).unwrap();

            assert_eq!(
                decode_call_site(site, patch.site, VENEER, &[0; VENEER_WORDS]),
                Some(target),
                "target {target:#x}"
            );
        }
    }

    #[test]
    fn far_site_round_trips_any_target() {
        let site = 0x4000_0000;
        for target in [
            0xFFFF_FFFF_FFFF_FFFC,
            0x8000_0000_0000_0000,
            0x1234_5678_9ABC_DEF0,
        ] {
            let patch = call_site(site, target, VENEER).unwrap();
            let veneer = patch.veneer.expect("far target needs the veneer");

            assert_eq!(
                decode_call_site(site, patch.site, VENEER, &veneer),
                Some(target)
            );
        }
    }

    #[test]
    fn decoding_a_bl_depends_on_the_site_it_sits_at() {
        let patch = call_site(0x1000, 0x2000, VENEER).unwrap();

        assert_eq!(decode_bl(0x3000, patch.site), Some(0x4000));
    }

    #[test]
    fn a_site_that_is_not_a_bl_is_not_ours() {
        assert_eq!(
            decode_call_site(0, NOP, VENEER, &veneer_words(0x1234)),
            None
        );
    }

    #[test]
    fn veneer_in_another_register_is_not_ours() {
        let mut words = veneer_words(0x1234_5678);
        words[4] = encode_br(17);

        assert_eq!(decode_veneer(&words), None);
    }

    #[test]
    fn veneer_with_moves_out_of_order_is_not_ours() {
        let mut words = veneer_words(0x1234_5678_9ABC_DEF0);
        words.swap(1, 2);

        assert_eq!(decode_veneer(&words), None);
    }

    #[test]
    fn a_veneer_ending_in_blr_is_not_ours() {
        let mut words = veneer_words(0x1234_5678);
        words[4] = encode_blr(16);

        assert_eq!(decode_veneer(&words), None);
    }
}
