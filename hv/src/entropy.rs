//! Boot entropy: what the hypervisor gathered at boot (the DT's
//! /chosen/rng-seed, EFI_RNG_PROTOCOL bytes read before ExitBootServices,
//! RNDR words where the CPU has FEAT_RNG), mixed with SHA-256 into the seed
//! of a ChaCha20 DRBG (`rand_chacha`), which answers the management
//! partition's ENTROPY call and makes the management token. The guests' DT
//! seeds (rng-seed, kaslr-seed) start from a SHA-256 of that seed under a
//! label of their own ([`Entropy::guest_seed`]), not from DRBG output.
//!
//! The core decides and the platform reads: [`rndr_implemented`] says from
//! ID_AA64ISAR0_EL1 whether the platform may execute RNDR at all, and
//! [`RNDR_WORDS`] how many words it reads. The counter value at boot is
//! mixed in too but is not a source: with no real source [`Entropy::fill`]
//! refuses ([`NoEntropy`]), and the hypervisor makes no token, so nothing
//! guessable is ever handed out as a secret.

use core::fmt;

use rand_chacha::rand_core::{RngCore, SeedableRng};
use rand_chacha::ChaCha20Rng;
use sha2::{Digest, Sha256};

/// How many 64-bit RNDR words the platform reads at boot (256 bits).
pub const RNDR_WORDS: usize = 4;

/// Fewer bytes than this from a source do not count as a source (a seed
/// of a few bytes is not a secret); they are still mixed in.
pub const MIN_SOURCE_BYTES: usize = 16;

/// ID_AA64ISAR0_EL1.RNDR (bits 63:60) says FEAT_RNG: RNDR and RNDRRS exist.
pub fn rndr_implemented(id_aa64isar0_el1: u64) -> bool {
    (id_aa64isar0_el1 >> 60) & 0xf >= 1
}

/// What the platform read at boot.
#[derive(Debug, Clone, Copy, Default)]
pub struct EntropyInputs<'a> {
    /// /chosen/rng-seed of the host DT.
    pub dt_rng_seed: Option<&'a [u8]>,
    /// EFI_RNG_PROTOCOL's default algorithm, before ExitBootServices.
    pub efi_rng: Option<&'a [u8]>,
    /// RNDR words that succeeded (NZCV.Z clear).
    pub rndr: &'a [u64],
    /// The counter at entry: mixed in, never a source.
    pub counter: u64,
}

/// Bytes each source gave (0: none or too few to count).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sources {
    pub dt_rng_seed: usize,
    pub efi_rng: usize,
    pub rndr: usize,
}

impl Sources {
    /// At least one real source.
    pub fn any(&self) -> bool {
        self.dt_rng_seed + self.efi_rng + self.rndr > 0
    }
}

impl fmt::Display for Sources {
    /// `rng-seed 32 bytes, EFI_RNG_PROTOCOL 32 bytes, RNDR 32 bytes`, or
    /// the sentence saying there is none.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.any() {
            return f.write_str(
                "none (no /chosen/rng-seed, no EFI_RNG_PROTOCOL, no RNDR): \
                 no credential is generated",
            );
        }
        let mut first = true;
        for (name, n) in [
            ("rng-seed", self.dt_rng_seed),
            ("EFI_RNG_PROTOCOL", self.efi_rng),
            ("RNDR", self.rndr),
        ] {
            if n > 0 {
                if !first {
                    f.write_str(", ")?;
                }
                write!(f, "{name} {n} bytes")?;
                first = false;
            }
        }
        Ok(())
    }
}

/// Refused: the hypervisor found no entropy source at boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoEntropy;

/// The DRBG, seeded once at boot.
pub struct Entropy {
    rng: Option<ChaCha20Rng>,
    sources: Sources,
    /// SHA-256 of a label and the DRBG's seed, first 8 bytes: the guests'
    /// DT seeds start from it (None without a source).
    guest_seed: Option<u64>,
}

impl Entropy {
    /// Mix every input into one seed: SHA-256 over a label and each
    /// source's tag, length and bytes, then the counter.
    pub fn gather(inputs: &EntropyInputs<'_>) -> Entropy {
        let mut h = Sha256::new();
        h.update(b"pinfold entropy v1");
        let counted = |n: usize| if n >= MIN_SOURCE_BYTES { n } else { 0 };
        let mut sources = Sources::default();
        if let Some(seed) = inputs.dt_rng_seed {
            mix(&mut h, b'd', seed);
            sources.dt_rng_seed = counted(seed.len());
        }
        if let Some(bytes) = inputs.efi_rng {
            mix(&mut h, b'e', bytes);
            sources.efi_rng = counted(bytes.len());
        }
        for w in inputs.rndr {
            mix(&mut h, b'r', &w.to_le_bytes());
        }
        sources.rndr = counted(inputs.rndr.len() * 8);
        mix(&mut h, b'c', &inputs.counter.to_le_bytes());
        let seed: [u8; 32] = h.finalize().into();
        let guest_seed = sources.any().then(|| {
            let mut g = Sha256::new();
            g.update(b"pinfold guest seeds v1");
            g.update(seed);
            let d: [u8; 32] = g.finalize().into();
            u64::from_le_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]])
        });
        Entropy {
            rng: sources.any().then(|| ChaCha20Rng::from_seed(seed)),
            sources,
            guest_seed,
        }
    }

    /// What was gathered.
    pub fn sources(&self) -> Sources {
        self.sources
    }

    /// Fill `out` from the DRBG; refused without a source.
    pub fn fill(&mut self, out: &mut [u8]) -> Result<(), NoEntropy> {
        let rng = self.rng.as_mut().ok_or(NoEntropy)?;
        rng.fill_bytes(out);
        Ok(())
    }

    /// 64 bits for the guests' DT seeds: a one-way function of the DRBG's
    /// seed (one SHA-256 block), not DRBG output, so the boot needs no
    /// ChaCha20 blocks (four, about 8,300 instructions) before the first
    /// guest runs; the DRBG's first block is made when the token or the
    /// ENTROPY call first asks. The counter alone when there is no source
    /// (a guest's KASLR is not a credential).
    pub fn guest_seed(&self, fallback: u64) -> u64 {
        self.guest_seed.unwrap_or(fallback)
    }
}

fn mix(h: &mut Sha256, tag: u8, bytes: &[u8]) {
    h.update([tag]);
    h.update((bytes.len() as u32).to_le_bytes());
    h.update(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    fn out(inputs: &EntropyInputs<'_>) -> Result<[u8; 32], NoEntropy> {
        let mut e = Entropy::gather(inputs);
        let mut b = [0u8; 32];
        e.fill(&mut b).map(|()| b)
    }

    #[test]
    fn guest_seed_is_not_drbg_output_and_depends_on_every_input() {
        let seed = [7u8; 32];
        let inputs = EntropyInputs {
            dt_rng_seed: Some(&seed),
            counter: 1,
            ..Default::default()
        };
        let e = Entropy::gather(&inputs);
        let g = e.guest_seed(0);
        let first = out(&inputs).unwrap();
        assert_ne!(
            g.to_le_bytes(),
            first[..8],
            "guest seeds are not the DRBG's output"
        );
        assert_eq!(
            Entropy::gather(&inputs).guest_seed(0),
            g,
            "a function of the inputs"
        );
        let other = EntropyInputs {
            counter: 2,
            ..inputs
        };
        assert_ne!(Entropy::gather(&other).guest_seed(0), g);
        let none = EntropyInputs {
            counter: 1,
            ..Default::default()
        };
        assert_eq!(
            Entropy::gather(&none).guest_seed(99),
            99,
            "no source: the fallback"
        );
    }

    #[test]
    fn rndr_field_is_bits_63_to_60() {
        assert!(!rndr_implemented(0));
        assert!(!rndr_implemented(0x0fff_ffff_ffff_ffff));
        assert!(rndr_implemented(1 << 60));
        assert!(rndr_implemented(0x2 << 60));
    }

    #[test]
    fn no_source_refuses_even_with_a_counter() {
        let inputs = EntropyInputs {
            counter: 123_456,
            ..Default::default()
        };
        assert_eq!(out(&inputs), Err(NoEntropy));
        assert!(!Entropy::gather(&inputs).sources().any());
        assert!(Entropy::gather(&inputs)
            .sources()
            .to_string()
            .starts_with("none"));
    }

    #[test]
    fn a_few_bytes_are_mixed_but_not_a_source() {
        let seed = [7u8; 8];
        let inputs = EntropyInputs {
            dt_rng_seed: Some(&seed),
            rndr: &[1],
            ..Default::default()
        };
        assert_eq!(out(&inputs), Err(NoEntropy));
    }

    #[test]
    fn each_source_alone_is_enough_and_is_named() {
        let bytes = [9u8; 32];
        let words = [1u64, 2, 3, 4];
        for (inputs, name) in [
            (
                EntropyInputs {
                    dt_rng_seed: Some(&bytes),
                    ..Default::default()
                },
                "rng-seed 32 bytes",
            ),
            (
                EntropyInputs {
                    efi_rng: Some(&bytes),
                    ..Default::default()
                },
                "EFI_RNG_PROTOCOL 32 bytes",
            ),
            (
                EntropyInputs {
                    rndr: &words,
                    ..Default::default()
                },
                "RNDR 32 bytes",
            ),
        ] {
            assert!(out(&inputs).is_ok());
            assert_eq!(Entropy::gather(&inputs).sources().to_string(), name);
        }
    }

    #[test]
    fn every_input_changes_the_output() {
        let a = [1u8; 32];
        let b = [2u8; 32];
        let base = EntropyInputs {
            dt_rng_seed: Some(&a),
            efi_rng: Some(&a),
            rndr: &[5, 6, 7, 8],
            counter: 10,
        };
        let o = out(&base).unwrap();
        let variants = [
            EntropyInputs {
                dt_rng_seed: Some(&b),
                ..base
            },
            EntropyInputs {
                efi_rng: Some(&b),
                ..base
            },
            EntropyInputs {
                rndr: &[5, 6, 7, 9],
                ..base
            },
            EntropyInputs {
                counter: 11,
                ..base
            },
            // The same bytes under another source's tag.
            EntropyInputs {
                dt_rng_seed: None,
                efi_rng: Some(&a),
                ..base
            },
        ];
        for v in variants {
            assert_ne!(out(&v).unwrap(), o);
        }
        // Same inputs, same stream (a failure reproduces).
        assert_eq!(out(&base).unwrap(), o);
        assert_eq!(
            Entropy::gather(&base).sources().to_string(),
            "rng-seed 32 bytes, EFI_RNG_PROTOCOL 32 bytes, RNDR 32 bytes"
        );
    }

    #[test]
    fn the_stream_moves_on() {
        let a = [1u8; 32];
        let mut e = Entropy::gather(&EntropyInputs {
            dt_rng_seed: Some(&a),
            ..Default::default()
        });
        let mut x = [0u8; 32];
        let mut y = [0u8; 32];
        e.fill(&mut x).unwrap();
        e.fill(&mut y).unwrap();
        assert_ne!(x, y);
    }
}
