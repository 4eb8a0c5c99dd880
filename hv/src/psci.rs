//! Decodes a guest's HVC (x0..x3) into a typed PSCI, SMCCC or Pinfold call,
//! and keeps each vCPU's PSCI power state without locks.
//!
//! Function IDs and return codes: PSCI (Arm DEN0022, 1.1) and the SMC
//! Calling Convention (Arm DEN0028, 1.1+). A function ID is W0: the upper
//! half of X0 is ignored. For SMC32 calls (bit 30 clear) the upper halves of
//! the argument registers are UNKNOWN per SMCCC, so they are dropped.

use core::sync::atomic::{AtomicU8, Ordering};

/// PSCI 1.1, as PSCI_VERSION returns it (major << 16 | minor).
pub const PSCI_VERSION_1_1: u64 = 0x0001_0001;
/// SMCCC 1.1, as SMCCC_VERSION returns it.
pub const SMCCC_VERSION_1_1: u64 = 0x0001_0001;

// PSCI return codes (DEN0022 5.2.2), in X0 as a signed 64-bit value.
pub const SUCCESS: i64 = 0;
pub const NOT_SUPPORTED: i64 = -1;
pub const INVALID_PARAMETERS: i64 = -2;
pub const DENIED: i64 = -3;
pub const ALREADY_ON: i64 = -4;
pub const ON_PENDING: i64 = -5;
pub const INTERNAL_FAILURE: i64 = -6;
pub const NOT_PRESENT: i64 = -7;
pub const DISABLED: i64 = -8;
pub const INVALID_ADDRESS: i64 = -9;

// AFFINITY_INFO results (DEN0022 5.7).
pub const AFFINITY_INFO_ON: i64 = 0;
pub const AFFINITY_INFO_OFF: i64 = 1;
pub const AFFINITY_INFO_ON_PENDING: i64 = 2;

/// MIGRATE_INFO_TYPE result: no Trusted OS that needs migrating, which is
/// what a guest's (virtual) firmware has.
pub const MIGRATE_INFO_TYPE_NOT_REQUIRED: i64 = 2;

/// CPU_SUSPEND power_state bit 16 (original format): 0 = standby, 1 =
/// powerdown. We implement standby only (DEN0022 5.4.2).
pub const POWER_STATE_TYPE_POWERDOWN: u64 = 1 << 16;

/// Function IDs (W0) this module knows: the virtual board's.
pub use pinfold_vboard::fid;

/// SMCCC function ID bit 30: SMC64/HVC64 calling convention.
const FID_SMC64: u32 = 1 << 30;
/// Bits [23:16] must be zero in a fast call; [15:0] is the function number.
const FID_VENDOR_HYP_MASK: u32 = !0x4000_FFFF;

/// One hypercall from a guest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Call {
    PsciVersion,
    CpuSuspend {
        power_state: u64,
        entry: u64,
        context_id: u64,
    },
    CpuOff,
    CpuOn {
        target_mpidr: u64,
        entry: u64,
        context_id: u64,
    },
    AffinityInfo {
        target_mpidr: u64,
        lowest_level: u64,
    },
    MigrateInfoType,
    SystemOff,
    SystemReset,
    PsciFeatures {
        fid: u32,
    },
    SmcccVersion,
    SmcccArchFeatures {
        fid: u32,
    },
    /// Pinfold's vendor-specific hypervisor calls. Numbers 0xFF00..=0xFFFF
    /// are SMCCC's general queries (call count, UID, revision); Linux probes
    /// UID 0x8600_FF01 to detect KVM, so the dispatcher must answer
    /// NOT_SUPPORTED (or our UID) to those rather than fault.
    Pinfold {
        fid: u32,
        args: [u64; 3],
    },
    /// Anything else; the caller answers NOT_SUPPORTED.
    Unknown {
        fid: u32,
    },
}

/// Decodes the guest's X0..X3 at an HVC.
#[inline(always)]
pub fn decode(x0: u64, x1: u64, x2: u64, x3: u64) -> Call {
    let fid = x0 as u32;
    // SMC32 arguments are W registers: drop the UNKNOWN upper halves. Only
    // the calls with arguments pay for it.
    let arg = |x: u64| {
        if fid & FID_SMC64 != 0 {
            x
        } else {
            u64::from(x as u32)
        }
    };
    let (a1, a2, a3) = (|| arg(x1), || arg(x2), || arg(x3));
    match fid {
        fid::PSCI_VERSION => Call::PsciVersion,
        fid::CPU_SUSPEND_32 | fid::CPU_SUSPEND_64 => Call::CpuSuspend {
            power_state: a1(),
            entry: a2(),
            context_id: a3(),
        },
        fid::CPU_OFF => Call::CpuOff,
        fid::CPU_ON_32 | fid::CPU_ON_64 => Call::CpuOn {
            target_mpidr: a1(),
            entry: a2(),
            context_id: a3(),
        },
        fid::AFFINITY_INFO_32 | fid::AFFINITY_INFO_64 => Call::AffinityInfo {
            target_mpidr: a1(),
            lowest_level: a2(),
        },
        fid::MIGRATE_INFO_TYPE => Call::MigrateInfoType,
        fid::SYSTEM_OFF => Call::SystemOff,
        fid::SYSTEM_RESET => Call::SystemReset,
        fid::PSCI_FEATURES => Call::PsciFeatures { fid: x1 as u32 },
        fid::SMCCC_VERSION => Call::SmcccVersion,
        fid::SMCCC_ARCH_FEATURES => Call::SmcccArchFeatures { fid: x1 as u32 },
        _ if fid & FID_VENDOR_HYP_MASK == fid::PINFOLD_32_BASE => Call::Pinfold {
            fid,
            args: [a1(), a2(), a3()],
        },
        _ => Call::Unknown { fid },
    }
}

/// The answer to a call that only asks (versions, features, migration
/// type) or is satisfied without doing anything (CPU_SUSPEND to standby: a
/// WFI's worth of waiting, done natively by the guest's next WFI); None for
/// a call that acts. Needs only the function ID and x1, so the trap path
/// answers these without decoding further.
#[inline]
pub fn query(x0: u64, x1: u64) -> Option<i64> {
    match x0 as u32 {
        fid::PSCI_VERSION => Some(PSCI_VERSION_1_1 as i64),
        fid::SMCCC_VERSION => Some(SMCCC_VERSION_1_1 as i64),
        fid::PSCI_FEATURES => Some(psci_features(x1 as u32)),
        fid::SMCCC_ARCH_FEATURES => Some(smccc_arch_features(x1 as u32)),
        fid::MIGRATE_INFO_TYPE => Some(MIGRATE_INFO_TYPE_NOT_REQUIRED),
        fid::CPU_SUSPEND_32 | fid::CPU_SUSPEND_64 => Some(SUCCESS),
        _ => None,
    }
}

/// PSCI_FEATURES: 0 (with no feature flags: original power_state format,
/// platform-coordinated mode) for what we implement, NOT_SUPPORTED
/// otherwise. SMCCC_VERSION is included because DEN0028 makes
/// PSCI_FEATURES(SMCCC_VERSION) the way to discover SMCCC 1.1; Linux
/// relies on it before using SMCCC_ARCH_FEATURES.
pub fn psci_features(fid: u32) -> i64 {
    match fid {
        fid::PSCI_VERSION
        | fid::PSCI_FEATURES
        | fid::CPU_ON_32
        | fid::CPU_ON_64
        | fid::CPU_OFF
        | fid::AFFINITY_INFO_32
        | fid::AFFINITY_INFO_64
        | fid::SYSTEM_OFF
        | fid::SYSTEM_RESET
        | fid::MIGRATE_INFO_TYPE
        | fid::CPU_SUSPEND_32
        | fid::CPU_SUSPEND_64
        | fid::SMCCC_VERSION => SUCCESS,
        _ => NOT_SUPPORTED,
    }
}

/// SMCCC_ARCH_FEATURES. The Spectre workarounds answer NOT_SUPPORTED: a
/// hypervisor on affected hardware must instead forward the firmware's
/// answer and call, which is the arch code's business.
pub fn smccc_arch_features(fid: u32) -> i64 {
    match fid {
        fid::SMCCC_VERSION | fid::SMCCC_ARCH_FEATURES => SUCCESS,
        _ => NOT_SUPPORTED,
    }
}

/// Whether `entry` can be a CPU_ON entry point of a partition whose RAM is
/// `ram_size` bytes at IPA `ram_ipa`: an instruction (4-byte aligned) in
/// that RAM. Anything else would start the vCPU on an instruction abort
/// whose injection (VBAR_EL1 is reset) faults again, a fault storm on that
/// CPU for ever; PSCI answers INVALID_ADDRESS (DEN0022 5.6.2).
pub fn entry_point_valid(entry: u64, ram_ipa: u64, ram_size: u64) -> bool {
    entry.is_multiple_of(4) && entry >= ram_ipa && entry - ram_ipa < ram_size
}

/// A vCPU's PSCI power state, as other vCPUs see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum PowerState {
    Off = 0,
    /// Claimed by a CPU_ON, not yet running the guest.
    OnPending = 1,
    On = 2,
}

impl PowerState {
    /// The AFFINITY_INFO answer for a vCPU in this state.
    pub const fn affinity_info(self) -> i64 {
        match self {
            PowerState::On => AFFINITY_INFO_ON,
            PowerState::Off => AFFINITY_INFO_OFF,
            PowerState::OnPending => AFFINITY_INFO_ON_PENDING,
        }
    }

    fn from_raw(raw: u8) -> PowerState {
        match raw {
            0 => PowerState::Off,
            1 => PowerState::OnPending,
            // Only this module stores, and only the three values.
            _ => PowerState::On,
        }
    }
}

/// The power state of one vCPU: read by any CPU (AFFINITY_INFO), claimed by
/// the CPU that issues CPU_ON, and set by the vCPU's own pCPU. Lock-free so
/// that no CPU ever waits on another's PSCI call.
#[derive(Debug)]
pub struct VcpuPower(AtomicU8);

impl VcpuPower {
    pub const fn new_off() -> Self {
        VcpuPower(AtomicU8::new(PowerState::Off as u8))
    }

    /// For a partition's boot vCPU, which starts running without a CPU_ON.
    pub const fn new_on() -> Self {
        VcpuPower(AtomicU8::new(PowerState::On as u8))
    }

    pub fn state(&self) -> PowerState {
        PowerState::from_raw(self.0.load(Ordering::Acquire))
    }

    /// CPU_ON's claim: Off -> OnPending, exactly once among racing callers.
    /// Fails with ALREADY_ON or ON_PENDING as PSCI requires. The winner then
    /// posts the entry point to the target's mailbox.
    pub fn try_claim_on(&self) -> Result<(), i64> {
        self.0
            .compare_exchange(
                PowerState::Off as u8,
                PowerState::OnPending as u8,
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .map(|_| ())
            .map_err(|raw| match PowerState::from_raw(raw) {
                PowerState::OnPending => ON_PENDING,
                _ => ALREADY_ON,
            })
    }

    /// The vCPU has started running the guest.
    pub fn set_on(&self) {
        self.0.store(PowerState::On as u8, Ordering::Release);
    }

    /// The vCPU called CPU_OFF (or its partition stopped).
    pub fn set_off(&self) {
        self.0.store(PowerState::Off as u8, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_point_must_be_an_aligned_address_in_ram() {
        let (base, size) = (0x4000_0000, 64 << 20);

        assert!(entry_point_valid(base, base, size));
        assert!(entry_point_valid(base + size - 4, base, size));
        assert!(!entry_point_valid(base + size, base, size));
        assert!(!entry_point_valid(base - 4, base, size));
        assert!(!entry_point_valid(0, base, size));
        assert!(!entry_point_valid(base + 2, base, size));
        assert!(!entry_point_valid(u64::MAX - 3, base, size));
    }

    const JUNK_HIGH: u64 = 0xDEAD_BEEF_0000_0000;

    #[test]
    fn psci_version_ignores_upper_half_of_x0() {
        assert_eq!(decode(JUNK_HIGH | 0x8400_0000, 0, 0, 0), Call::PsciVersion);
    }

    #[test]
    fn cpu_on_64_keeps_full_width_arguments() {
        let call = decode(
            0xC400_0003,
            0x0000_0001_0000_0102,
            0xFFFF_0000_4008_0000,
            0x1234_5678_9ABC,
        );

        assert_eq!(
            call,
            Call::CpuOn {
                target_mpidr: 0x0000_0001_0000_0102,
                entry: 0xFFFF_0000_4008_0000,
                context_id: 0x1234_5678_9ABC
            }
        );
    }

    #[test]
    fn cpu_on_32_drops_unknown_upper_halves_of_arguments() {
        let call = decode(
            0x8400_0003,
            JUNK_HIGH | 1,
            JUNK_HIGH | 0x4008_0000,
            JUNK_HIGH | 7,
        );

        assert_eq!(
            call,
            Call::CpuOn {
                target_mpidr: 1,
                entry: 0x4008_0000,
                context_id: 7
            }
        );
    }

    #[test]
    fn cpu_suspend_both_forms_decode() {
        let expected = Call::CpuSuspend {
            power_state: 0,
            entry: 0x4000_1000,
            context_id: 3,
        };

        assert_eq!(decode(0x8400_0001, 0, 0x4000_1000, 3), expected);
        assert_eq!(decode(0xC400_0001, 0, 0x4000_1000, 3), expected);
    }

    #[test]
    fn affinity_info_both_forms_decode() {
        let expected = Call::AffinityInfo {
            target_mpidr: 0x101,
            lowest_level: 0,
        };

        assert_eq!(decode(0x8400_0004, 0x101, 0, 0), expected);
        assert_eq!(decode(0xC400_0004, 0x101, 0, 0), expected);
    }

    #[test]
    fn argumentless_psci_calls_decode() {
        assert_eq!(decode(0x8400_0002, 0, 0, 0), Call::CpuOff);
        assert_eq!(decode(0x8400_0006, 0, 0, 0), Call::MigrateInfoType);
        assert_eq!(decode(0x8400_0008, 0, 0, 0), Call::SystemOff);
        assert_eq!(decode(0x8400_0009, 0, 0, 0), Call::SystemReset);
    }

    #[test]
    fn sixty_four_bit_form_of_a_32_bit_only_call_is_unknown() {
        assert_eq!(
            decode(0xC400_0002, 0, 0, 0),
            Call::Unknown { fid: 0xC400_0002 }
        );
    }

    #[test]
    fn feature_queries_carry_the_queried_fid() {
        assert_eq!(
            decode(0x8400_000A, 0xC400_0003, 0, 0),
            Call::PsciFeatures { fid: 0xC400_0003 }
        );
        assert_eq!(
            decode(0x8000_0001, 0x8000_8000, 0, 0),
            Call::SmcccArchFeatures { fid: 0x8000_8000 }
        );
        assert_eq!(decode(0x8000_0000, 0, 0, 0), Call::SmcccVersion);
    }

    #[test]
    fn vendor_hypervisor_range_is_pinfold_in_both_widths() {
        assert_eq!(
            decode(0xC600_0042, 1, JUNK_HIGH, 3),
            Call::Pinfold {
                fid: 0xC600_0042,
                args: [1, JUNK_HIGH, 3]
            }
        );
        assert_eq!(
            decode(0x8600_FF01, JUNK_HIGH | 9, 0, 0),
            Call::Pinfold {
                fid: 0x8600_FF01,
                args: [9, 0, 0]
            }
        );
    }

    #[test]
    fn neighbouring_service_ranges_are_not_pinfold() {
        // OEN 5 (standard hypervisor), OEN 7, reserved bits 23:16, and a
        // yielding (non-fast) call to OEN 6.
        for fid in [0xC500_0000u32, 0xC700_0000, 0xC601_0000, 0x4600_0000] {
            assert_eq!(decode(u64::from(fid), 0, 0, 0), Call::Unknown { fid });
        }
    }

    #[test]
    fn psci_features_reports_implemented_calls_only() {
        for fid in [
            0x8400_0000,
            0x8400_000A,
            0xC400_0003,
            0x8400_0002,
            0xC400_0004,
            0x8400_0008,
            0x8400_0009,
            0x8400_0006,
            0xC400_0001,
            0x8000_0000,
        ] {
            assert_eq!(psci_features(fid), SUCCESS, "{fid:#x}");
        }
        for fid in [
            0x8400_000E,
            0xC400_000E,
            0x8400_0012,
            0x8400_0005,
            0xC600_0000,
        ] {
            assert_eq!(psci_features(fid), NOT_SUPPORTED, "{fid:#x}");
        }
    }

    #[test]
    fn smccc_arch_features_refuses_workarounds() {
        assert_eq!(smccc_arch_features(fid::SMCCC_ARCH_FEATURES), SUCCESS);
        assert_eq!(smccc_arch_features(fid::SMCCC_VERSION), SUCCESS);
        assert_eq!(
            smccc_arch_features(fid::SMCCC_ARCH_WORKAROUND_1),
            NOT_SUPPORTED
        );
        assert_eq!(
            smccc_arch_features(fid::SMCCC_ARCH_WORKAROUND_2),
            NOT_SUPPORTED
        );
        assert_eq!(
            smccc_arch_features(fid::SMCCC_ARCH_WORKAROUND_3),
            NOT_SUPPORTED
        );
        assert_eq!(smccc_arch_features(fid::SMCCC_ARCH_SOC_ID), NOT_SUPPORTED);
    }

    #[test]
    fn return_codes_have_spec_values() {
        assert_eq!(
            [
                SUCCESS,
                NOT_SUPPORTED,
                INVALID_PARAMETERS,
                DENIED,
                ALREADY_ON,
                ON_PENDING,
                INTERNAL_FAILURE
            ],
            [0, -1, -2, -3, -4, -5, -6]
        );
        assert_eq!(NOT_SUPPORTED as u64, u64::MAX);
    }

    #[test]
    fn claiming_an_off_vcpu_makes_it_on_pending() {
        let power = VcpuPower::new_off();

        assert_eq!(power.try_claim_on(), Ok(()));
        assert_eq!(power.state(), PowerState::OnPending);
        assert_eq!(power.state().affinity_info(), AFFINITY_INFO_ON_PENDING);
    }

    #[test]
    fn second_claim_before_start_reports_on_pending() {
        let power = VcpuPower::new_off();
        power.try_claim_on().unwrap();

        assert_eq!(power.try_claim_on(), Err(ON_PENDING));
    }

    #[test]
    fn claim_of_running_vcpu_reports_already_on() {
        let power = VcpuPower::new_off();
        power.try_claim_on().unwrap();
        power.set_on();

        assert_eq!(power.try_claim_on(), Err(ALREADY_ON));
        assert_eq!(power.state().affinity_info(), AFFINITY_INFO_ON);
    }

    #[test]
    fn vcpu_can_be_claimed_again_after_cpu_off() {
        let power = VcpuPower::new_on();
        power.set_off();

        assert_eq!(power.state().affinity_info(), AFFINITY_INFO_OFF);
        assert_eq!(power.try_claim_on(), Ok(()));
    }

    #[test]
    fn racing_claims_have_exactly_one_winner() {
        use std::sync::Arc;
        use std::vec::Vec;
        let power = Arc::new(VcpuPower::new_off());

        let handles: Vec<_> = (0..8)
            .map(|_| {
                let power = Arc::clone(&power);
                std::thread::spawn(move || power.try_claim_on())
            })
            .collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();

        assert_eq!(results.iter().filter(|r| r.is_ok()).count(), 1);
        assert!(results
            .iter()
            .all(|r| *r == Ok(()) || *r == Err(ON_PENDING)));
    }
}
