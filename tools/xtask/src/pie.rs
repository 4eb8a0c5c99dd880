//! The probe guest runs wherever its partition's RAM is (IPA 0x4000_0000,
//! or IPA == PA with a PCI function): it is a static PIE linked at 0 whose
//! `_start` applies its R_AARCH64_RELATIVE relocations and nothing else
//! (tools/test-guest/link.ld). This checks the linked ELF: every absolute
//! address the linker wrote into a loaded section must have a RELATIVE
//! entry at that place, and the image may need no other kind of dynamic
//! relocation; otherwise the raw binary would hold an address that is right
//! only at 0.
//!
//! The linker's own relocations are kept in the ELF by `--emit-relocs`
//! (tools/test-guest/build.rs); an absolute relocation against an absolute
//! symbol (a constant such as the Image header's `__image_size`) is not an
//! address and needs nothing. The `*_ABS_LO12_NC` relocations paired with
//! `adrp` are offsets within a 4 KiB page, right at any load address that is
//! 4 KiB aligned (the probe's is RAM base + 0x80000, RAM 2 MiB aligned).

use std::collections::BTreeSet;
use std::path::Path;

use object::{Object, ObjectSection, ObjectSymbol, RelocationFlags, RelocationTarget};

use crate::error::{IoContext, XtaskError};

/// ELF for the Arm 64-bit Architecture, 5.7.
pub const R_AARCH64_RELATIVE: u32 = 1027;
const R_AARCH64_ABS64: u32 = 257;
/// ABS32, ABS16, then MOVW_UABS_G0 .. MOVW_SABS_G2: absolute values no
/// RELATIVE entry (64-bit, in memory) can fix.
const NARROW_ABSOLUTE: [u32; 12] = [258, 259, 263, 264, 265, 266, 267, 268, 269, 270, 271, 272];

/// One relocation the linker applied in a loaded section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// Where (link address).
    pub place: u64,
    pub r_type: u32,
    /// Against an absolute symbol (a constant, not an address).
    pub to_constant: bool,
    /// The section it is in, for the message.
    pub section: String,
}

/// What is wrong with the image: one line per problem, empty when it runs
/// anywhere. `dynamic` are the (place, type) of .rela.dyn.
pub fn problems(applied: &[Applied], dynamic: &[(u64, u32)]) -> Vec<String> {
    let mut out = Vec::new();
    for &(place, r_type) in dynamic {
        if r_type != R_AARCH64_RELATIVE {
            out.push(format!(
                "dynamic relocation type {r_type} at {place:#x}: _start applies R_AARCH64_RELATIVE only"
            ));
        }
    }
    let relative: BTreeSet<u64> = dynamic
        .iter()
        .filter(|&&(_, t)| t == R_AARCH64_RELATIVE)
        .map(|&(p, _)| p)
        .collect();
    for a in applied.iter().filter(|a| !a.to_constant) {
        if a.r_type == R_AARCH64_ABS64 && !relative.contains(&a.place) {
            out.push(format!(
                "absolute address at {:#x} ({}) has no R_AARCH64_RELATIVE entry",
                a.place, a.section
            ));
        } else if NARROW_ABSOLUTE.contains(&a.r_type) {
            out.push(format!(
                "absolute relocation type {} at {:#x} ({}): cannot be relocated at run time",
                a.r_type, a.place, a.section
            ));
        }
    }
    out
}

/// Reads the linked ELF at `elf` and fails, naming each place, unless
/// [`problems`] finds none. Returns the count of RELATIVE entries.
pub fn check(elf: &Path) -> Result<usize, XtaskError> {
    let bytes = std::fs::read(elf).context(|| format!("reading {}", elf.display()))?;
    let bad = |why: String| XtaskError::BadFile {
        path: elf.to_path_buf(),
        why,
    };
    let file = object::File::parse(&*bytes).map_err(|e| bad(format!("not an ELF: {e}")))?;
    let r_type = |flags: RelocationFlags| match flags {
        RelocationFlags::Elf { r_type } => r_type,
        _ => 0,
    };
    let mut applied = Vec::new();
    let mut any_static = false;
    for section in file.sections() {
        let alloc = matches!(section.flags(), object::SectionFlags::Elf { sh_flags }
            if sh_flags & u64::from(object::elf::SHF_ALLOC) != 0);
        for (place, reloc) in section.relocations() {
            any_static = true;
            if !alloc {
                continue;
            }
            let to_constant = match reloc.target() {
                RelocationTarget::Symbol(index) => file
                    .symbol_by_index(index)
                    .map(|s| s.section() == object::SymbolSection::Absolute)
                    .map_err(|e| bad(format!("relocation symbol: {e}")))?,
                RelocationTarget::Absolute => true,
                _ => false,
            };
            applied.push(Applied {
                place,
                r_type: r_type(reloc.flags()),
                to_constant,
                section: section.name().unwrap_or("?").to_string(),
            });
        }
    }
    if !any_static {
        return Err(bad(
            "no static relocations kept: link with --emit-relocs to check it".into(),
        ));
    }
    let dynamic: Vec<(u64, u32)> = file
        .dynamic_relocations()
        .map(|it| it.map(|(place, r)| (place, r_type(r.flags()))).collect())
        .unwrap_or_default();
    let found = problems(&applied, &dynamic);
    if !found.is_empty() {
        return Err(bad(format!(
            "not relocatable (the probe must run at any RAM base): {}",
            found.join("; ")
        )));
    }
    Ok(dynamic.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn abs64(place: u64) -> Applied {
        Applied {
            place,
            r_type: R_AARCH64_ABS64,
            to_constant: false,
            section: ".data".into(),
        }
    }

    #[test]
    fn every_absolute_address_with_its_relative_entry_is_fine() {
        let dynamic = [(0x100, R_AARCH64_RELATIVE), (0x108, R_AARCH64_RELATIVE)];

        assert!(problems(&[abs64(0x100), abs64(0x108)], &dynamic).is_empty());
    }

    #[test]
    fn an_absolute_address_without_an_entry_is_named() {
        let dynamic = [(0x100, R_AARCH64_RELATIVE)];

        let found = problems(&[abs64(0x100), abs64(0x110)], &dynamic);

        assert_eq!(found.len(), 1);
        assert!(found[0].contains("0x110"), "{found:?}");
    }

    #[test]
    fn constants_need_nothing_but_narrow_absolute_addresses_cannot_be_fixed() {
        let constant = Applied {
            to_constant: true,
            section: ".text".into(),
            ..abs64(0x18)
        };
        let movw = Applied {
            r_type: 263,
            section: ".text".into(),
            ..abs64(0x40)
        };

        assert!(problems(&[constant], &[]).is_empty());
        let found = problems(&[movw], &[]);
        assert!(found[0].contains("type 263"), "{found:?}");
    }

    #[test]
    fn a_dynamic_relocation_start_does_not_apply_is_refused() {
        // R_AARCH64_GLOB_DAT: a symbol lookup _start cannot do.
        let found = problems(&[], &[(0x200, 1025)]);

        assert_eq!(found.len(), 1);
        assert!(found[0].contains("type 1025"), "{found:?}");
    }
}
