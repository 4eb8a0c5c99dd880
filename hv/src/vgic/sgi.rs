//! ICC_SGI1R_EL1 decoding and the check that a guest's SGIs only reach its own vCPUs.
//!
//! [`SgiMap`] is the resolution precomputed per partition for the trap path:
//! Pinfold gives vCPU i the affinity Aff0 = i in one cluster
//! (`pinfold_vboard::vcpu_mpidr`), so a target list resolves with a shift
//! and a mask instead of a search per target bit. [`resolve`] is the
//! general form (any affinities), used when a partition's are not that
//! layout and as the tests' reference.
//!
//! With HCR_EL2.IMO set, an EL1 write to ICC_SGI1R_EL1 traps to EL2 (GICv3
//! spec 12.2.21). The arch code hands us the written value; we name the
//! target vCPUs of the sending partition and count the targets that are not
//! among them, which are dropped: no partition can interrupt another.

/// A decoded ICC_SGI1R_EL1 write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SgiRequest {
    /// The SGI, INTID 0..15.
    pub intid: u8,
    pub targets: SgiTargets,
}

/// Which PEs an SGI is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SgiTargets {
    /// IRM == 1: every PE but the sender.
    AllButSelf,
    /// IRM == 0: the PEs Aff3.Aff2.Aff1.<Aff0> with Aff0 = rs * 16 + b for
    /// every bit b set in `target_list`.
    List {
        aff3: u8,
        aff2: u8,
        aff1: u8,
        rs: u8,
        target_list: u16,
    },
}

/// Decode ICC_SGI1R_EL1: TargetList [15:0], Aff1 [23:16], INTID [27:24],
/// Aff2 [39:32], IRM [40], RS [47:44], Aff3 [55:48].
pub fn decode_sgi1r(value: u64) -> SgiRequest {
    let intid = ((value >> 24) & 0xF) as u8;
    let targets = if value >> 40 & 1 == 1 {
        SgiTargets::AllButSelf
    } else {
        SgiTargets::List {
            aff3: (value >> 48) as u8,
            aff2: (value >> 32) as u8,
            aff1: (value >> 16) as u8,
            rs: ((value >> 44) & 0xF) as u8,
            target_list: value as u16,
        }
    };
    SgiRequest { intid, targets }
}

/// Where an SGI goes within the sending partition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SgiResolution {
    /// Bit i set: deliver to vCPU i of this partition.
    pub vcpus: u64,
    /// Targets named that are not vCPUs of this partition (dropped; a
    /// nonzero count is the guest's mistake, worth a rate-limited log).
    pub outside: u32,
}

/// Resolve `req`, sent by vCPU `self_index`, against the partition's vCPU
/// affinities. A partition has at most 64 vCPUs (the configuration is
/// validated for that); entries beyond index 63 are never targeted.
/// Always inlined, as [`SgiMap::resolve`] (a call here gives `send_sgi` a
/// full stack frame on every SGI).
#[inline(always)]
pub fn resolve(req: &SgiRequest, vcpu_mpidrs: &[u64], self_index: usize) -> SgiResolution {
    let mut res = SgiResolution::default();
    match req.targets {
        SgiTargets::AllButSelf => {
            for i in (0..vcpu_mpidrs.len().min(64)).filter(|&i| i != self_index) {
                res.vcpus |= 1 << i;
            }
        }
        SgiTargets::List {
            aff3,
            aff2,
            aff1,
            rs,
            target_list,
        } => {
            let upper = u64::from(aff3) << 32 | u64::from(aff2) << 16 | u64::from(aff1) << 8;
            for b in (0..16u8).filter(|b| target_list & (1 << b) != 0) {
                // RS counts groups of 16 Aff0 values (GICv3 spec 12.2.21);
                // RS <= 15 keeps Aff0 within a byte.
                let affinity = upper | u64::from(rs * 16 + b);
                match vcpu_index(vcpu_mpidrs, affinity) {
                    Some(i) if i < 64 => res.vcpus |= 1 << i,
                    _ => res.outside += 1,
                }
            }
        }
    }
    res
}

/// A partition's SGI routing, precomputed from its vCPU affinities.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SgiMap {
    /// vCPU i has affinity 0.0.0.i for every i (and at most 64 vCPUs).
    dense: bool,
    /// One bit per vCPU.
    all: u64,
}

impl SgiMap {
    pub fn new(vcpu_mpidrs: &[u64]) -> Self {
        let n = vcpu_mpidrs.len().min(64);
        let dense = vcpu_mpidrs.len() <= 64
            && vcpu_mpidrs
                .iter()
                .enumerate()
                .all(|(i, m)| m & super::MPIDR_AFFINITY_MASK == i as u64);
        SgiMap {
            dense,
            all: if n == 64 { u64::MAX } else { (1 << n) - 1 },
        }
    }

    /// Whether vCPU i has affinity 0.0.0.i for every i (Aff0 alone names
    /// a target).
    pub fn dense(&self) -> bool {
        self.dense
    }

    /// Resolve an ICC_SGI1R_EL1 `value` written by vCPU `self_index` of the
    /// partition whose vCPU affinities (the ones this map was made from)
    /// are `vcpu_mpidrs`: the SGI's INTID and where it goes. Always inlined
    /// into the exit's `send_sgi`: with two `Hw` instantiations of the exit
    /// code (the platform's GICv3 and GICv5 views) LLVM otherwise calls it
    /// out of line, 23 more instructions per SGI on the GICv3 path
    /// (`cargo xtask bench`, SGI round trip 699 -> 745).
    #[inline(always)]
    pub fn resolve(
        &self,
        vcpu_mpidrs: &[u64],
        value: u64,
        self_index: usize,
    ) -> (u8, SgiResolution) {
        let intid = ((value >> 24) & 0xF) as u8;
        if !self.dense {
            return (
                intid,
                resolve(&decode_sgi1r(value), vcpu_mpidrs, self_index),
            );
        }
        if value >> 40 & 1 == 1 {
            let me = if self_index < 64 { 1 << self_index } else { 0 };
            let res = SgiResolution {
                vcpus: self.all & !me,
                outside: 0,
            };
            return (intid, res);
        }
        let target_list = value & 0xFFFF;
        // Aff1 [23:16], Aff2 [39:32], Aff3 [55:48] must be 0; RS [47:44]
        // picks the group of 16 Aff0 values.
        let cluster = value & (0xFF << 16 | 0xFF << 32 | 0xFF << 48);
        let rs = (value >> 44) & 0xF;
        let (vcpus, missed) = if cluster == 0 && rs < 4 {
            let shift = rs * 16;
            let vcpus = (target_list << shift) & self.all;
            (vcpus, target_list & !(vcpus >> shift))
        } else {
            (0, target_list)
        };
        // Counting needs no instruction on the common path (the arm64
        // population count is a SIMD instruction the EL2 image cannot use).
        let outside = if missed == 0 { 0 } else { missed.count_ones() };
        (intid, SgiResolution { vcpus, outside })
    }
}

/// The index of the vCPU whose MPIDR affinity is `affinity` (MPIDR layout).
pub(crate) fn vcpu_index(vcpu_mpidrs: &[u64], affinity: u64) -> Option<usize> {
    vcpu_mpidrs
        .iter()
        .position(|m| m & super::MPIDR_AFFINITY_MASK == affinity & super::MPIDR_AFFINITY_MASK)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Four vCPUs in two clusters (Aff1 = cluster); bit 31 of MPIDR_EL1
    /// (RES1) set to check that only the affinity fields are compared.
    const MPIDRS: [u64; 4] = [0x8000_0000, 0x8000_0001, 0x8000_0100, 0x8000_0101];

    fn list(aff1: u8, target_list: u16) -> SgiRequest {
        SgiRequest {
            intid: 1,
            targets: SgiTargets::List {
                aff3: 0,
                aff2: 0,
                aff1,
                rs: 0,
                target_list,
            },
        }
    }

    #[test]
    fn decode_sgi1r_extracts_every_list_field() {
        let value = 0x12u64 << 48 | 0x3 << 44 | 0x34 << 32 | 0xB << 24 | 0x56 << 16 | 0xA5A5;

        let req = decode_sgi1r(value);

        assert_eq!(
            req,
            SgiRequest {
                intid: 0xB,
                targets: SgiTargets::List {
                    aff3: 0x12,
                    aff2: 0x34,
                    aff1: 0x56,
                    rs: 3,
                    target_list: 0xA5A5
                },
            }
        );
    }

    #[test]
    fn decode_sgi1r_with_irm_targets_all_but_self() {
        let req = decode_sgi1r(1 << 40 | 5 << 24 | 0xFFFF);

        assert_eq!(
            req,
            SgiRequest {
                intid: 5,
                targets: SgiTargets::AllButSelf
            }
        );
    }

    #[test]
    fn resolve_list_names_vcpus_by_affinity() {
        let res = resolve(&list(1, 0b11), &MPIDRS, 0);

        assert_eq!(
            res,
            SgiResolution {
                vcpus: 0b1100,
                outside: 0
            }
        );
    }

    #[test]
    fn target_outside_partition_is_counted_and_never_in_mask() {
        // Aff0 = 2 and 3 in cluster 0 do not exist in this partition.
        let res = resolve(&list(0, 0b1101), &MPIDRS, 1);

        assert_eq!(
            res,
            SgiResolution {
                vcpus: 0b0001,
                outside: 2
            }
        );
    }

    #[test]
    fn target_in_unknown_cluster_is_outside() {
        let req = SgiRequest {
            intid: 0,
            targets: SgiTargets::List {
                aff3: 1,
                aff2: 0,
                aff1: 0,
                rs: 0,
                target_list: 0b1,
            },
        };

        let res = resolve(&req, &MPIDRS, 0);

        assert_eq!(
            res,
            SgiResolution {
                vcpus: 0,
                outside: 1
            }
        );
    }

    #[test]
    fn all_but_self_excludes_the_sender() {
        let req = SgiRequest {
            intid: 0,
            targets: SgiTargets::AllButSelf,
        };

        let res = resolve(&req, &MPIDRS, 2);

        assert_eq!(
            res,
            SgiResolution {
                vcpus: 0b1011,
                outside: 0
            }
        );
    }

    #[test]
    fn range_selector_reaches_aff0_above_15() {
        let mpidrs = [0x00, 0x11]; // Aff0 = 0 and Aff0 = 17
        let req = SgiRequest {
            intid: 0,
            targets: SgiTargets::List {
                aff3: 0,
                aff2: 0,
                aff1: 0,
                rs: 1,
                target_list: 0b10,
            },
        };

        let res = resolve(&req, &mpidrs, 0);

        assert_eq!(
            res,
            SgiResolution {
                vcpus: 0b10,
                outside: 0
            }
        );
    }

    #[test]
    fn sgi_to_self_by_list_is_delivered() {
        let res = resolve(&decode_sgi1r(3 << 24 | 0b1), &MPIDRS, 0);

        assert_eq!(res.vcpus, 0b1);
    }

    fn dense(n: usize) -> alloc::vec::Vec<u64> {
        (0..n).map(|i| 0x8000_0000 | i as u64).collect()
    }

    #[test]
    fn the_precomputed_map_agrees_with_the_general_resolution() {
        // Every field combination that matters, for a few partition sizes
        // and senders, against `resolve` as the reference.
        let mut values = alloc::vec::Vec::new();
        for irm in [0u64, 1] {
            for rs in [0u64, 1, 3, 4, 15] {
                for aff1 in [0u64, 1] {
                    for aff3 in [0u64, 2] {
                        for tl in [0u64, 1, 0b1010, 0xFFFF, 0x8001] {
                            values.push(
                                aff3 << 48 | rs << 44 | irm << 40 | aff1 << 16 | 7 << 24 | tl,
                            );
                        }
                    }
                }
            }
        }
        for n in [1, 2, 4, 17, 64] {
            let mpidrs = dense(n);
            let map = SgiMap::new(&mpidrs);
            assert!(map.dense);
            for me in [0, n - 1] {
                for &v in &values {
                    let (intid, res) = map.resolve(&mpidrs, v, me);
                    assert_eq!(intid, 7);
                    assert_eq!(
                        res,
                        resolve(&decode_sgi1r(v), &mpidrs, me),
                        "{n} vCPUs, sender {me}, value {v:#x}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_map_of_other_affinities_falls_back_to_the_general_resolution() {
        let map = SgiMap::new(&MPIDRS);
        assert!(!map.dense);

        let (_, res) = map.resolve(&MPIDRS, 1 << 16 | 0b11, 0);

        assert_eq!(res.vcpus, 0b1100);
    }
}
