//! ICC_SGI1R_EL1 decoding and the check that a guest's SGIs only reach its own vCPUs.
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
}
