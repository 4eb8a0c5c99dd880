//! The wall clock: what time it was when the hypervisor booted, and the
//! counter value read at that moment, so any later counter value gives the
//! time (the management ABI's WALL_CLOCK call).
//!
//! The platform reads one source once at boot and hands the raw reading
//! here; this module decides which reading counts. UEFI's GetTime (read
//! before ExitBootServices) comes first, then the PL031 RTC the host
//! description names ("arm,pl031": RTCDR at offset 0 is seconds since the
//! Unix epoch). The RTC is only read at boot, before any partition runs:
//! it stays an ordinary device region a plan may assign.

use crate::dtb::HostDevice;

/// The fields of `EFI_TIME` (UEFI 2.10, 8.3 GetTime) the conversion reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct EfiTime {
    /// 1900..=9999.
    pub year: u16,
    /// 1..=12.
    pub month: u8,
    /// 1..=31 (the month's length).
    pub day: u8,
    pub hour: u8,
    pub minute: u8,
    pub second: u8,
    pub nanosecond: u32,
    /// Minutes, -1440..=1440, with UTC = local time - time_zone, or
    /// [`EFI_UNSPECIFIED_TIMEZONE`] (taken as UTC).
    pub time_zone: i16,
}

/// `EFI_UNSPECIFIED_TIMEZONE`: the time is local time of an unknown zone.
/// Taken as UTC, which is what edk2 on QEMU reports from the host clock.
pub const EFI_UNSPECIFIED_TIMEZONE: i16 = 0x07FF;

/// Days in `month` (1..=12) of `year`, Gregorian.
pub const fn days_in_month(year: u32, month: u32) -> u32 {
    match month {
        2 if (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to the Gregorian date (H. Hinnant's
/// `days_from_civil`); `month` 1..=12. Negative before 1970.
pub const fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Seconds since the Unix epoch of an `EFI_TIME`, or None when a field is
/// out of its range (a month 13, a 30 February, a second 60, a zone beyond
/// a day) or the time is before 1970.
pub fn efi_time_to_unix(t: &EfiTime) -> Option<u64> {
    let (year, month, day) = (u32::from(t.year), u32::from(t.month), u32::from(t.day));
    let valid = (1900..=9999).contains(&year)
        && (1..=12).contains(&month)
        && (1..=days_in_month(year, month)).contains(&day)
        && t.hour < 24
        && t.minute < 60
        && t.second < 60
        && t.nanosecond < 1_000_000_000
        && (t.time_zone == EFI_UNSPECIFIED_TIMEZONE || (-1440..=1440).contains(&t.time_zone));
    if !valid {
        return None;
    }
    let zone = if t.time_zone == EFI_UNSPECIFIED_TIMEZONE {
        0
    } else {
        i64::from(t.time_zone) * 60
    };
    let secs = days_from_civil(i64::from(year), month, day) * 86_400
        + i64::from(t.hour) * 3600
        + i64::from(t.minute) * 60
        + i64::from(t.second)
        - zone;
    u64::try_from(secs).ok()
}

/// Where the boot time came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockSource {
    /// UEFI runtime service GetTime, before ExitBootServices.
    EfiGetTime,
    /// The PL031's RTCDR.
    Pl031,
}

/// The time at one counter value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WallClock {
    /// Milliseconds since the Unix epoch when the counter read `counter`.
    pub unix_ms: u64,
    pub counter: u64,
    pub source: ClockSource,
}

impl WallClock {
    /// Milliseconds since the Unix epoch at counter value `now` of a
    /// counter ticking at `freq` Hz.
    pub fn unix_ms_at(&self, now: u64, freq: u64) -> u64 {
        let ticks = now.saturating_sub(self.counter) as u128;
        let elapsed = ticks * 1000 / u128::from(freq.max(1));
        self.unix_ms
            .saturating_add(u64::try_from(elapsed).unwrap_or(u64::MAX))
    }
}

/// The boot time, from GetTime's reading if it converts, else the RTC's
/// (a zero RTCDR is an RTC nobody set), each with the counter value read
/// with it. `rtc` reads the RTC; it is called only when GetTime gave
/// nothing usable.
pub fn choose(
    efi: Option<(EfiTime, u64)>,
    rtc: impl FnOnce() -> Option<(u32, u64)>,
) -> Option<WallClock> {
    let from_efi = efi.and_then(|(t, counter)| {
        Some(WallClock {
            unix_ms: efi_time_to_unix(&t)? * 1000 + u64::from(t.nanosecond / 1_000_000),
            counter,
            source: ClockSource::EfiGetTime,
        })
    });
    from_efi.or_else(|| {
        rtc()
            .filter(|&(secs, _)| secs != 0)
            .map(|(secs, counter)| WallClock {
                unix_ms: u64::from(secs) * 1000,
                counter,
                source: ClockSource::Pl031,
            })
    })
}

/// The PL031's registers: an enabled "arm,pl031" of the host's devices
/// (`HostInfo::devices`, from the DT or the ACPI board table). Searched
/// from the end, where QEMU's DT and the board table put it (after the 32
/// virtio-mmio nodes): a few hundred instructions less on every boot.
pub fn pl031(devices: &[HostDevice]) -> Option<u64> {
    devices
        .iter()
        .rev()
        .find(|d| d.enabled && d.compatible.iter().any(|c| c == "arm,pl031"))
        .and_then(|d| d.regs.first())
        .filter(|&&(_, size)| size >= 4)
        .map(|&(base, _)| base)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec;

    fn t(year: u16, month: u8, day: u8, hour: u8, minute: u8, second: u8) -> EfiTime {
        EfiTime {
            year,
            month,
            day,
            hour,
            minute,
            second,
            nanosecond: 0,
            time_zone: EFI_UNSPECIFIED_TIMEZONE,
        }
    }

    #[test]
    fn known_dates_convert() {
        assert_eq!(efi_time_to_unix(&t(1970, 1, 1, 0, 0, 0)), Some(0));
        assert_eq!(efi_time_to_unix(&t(2000, 1, 1, 0, 0, 0)), Some(946_684_800));
        // `date -u -d 2026-12-01T13:45:00 +%s`
        assert_eq!(
            efi_time_to_unix(&t(2026, 12, 1, 13, 45, 0)),
            Some(1_796_132_700)
        );
        assert_eq!(
            efi_time_to_unix(&t(2038, 1, 19, 3, 14, 8)),
            Some(1 << 31),
            "past the 32-bit signed limit"
        );
        assert_eq!(
            efi_time_to_unix(&t(9999, 12, 31, 23, 59, 59)),
            Some(253_402_300_799)
        );
    }

    #[test]
    fn leap_years_follow_the_gregorian_rules() {
        // 2024 leap, 2100 not (century), 2000 leap (400), 1900 not.
        assert_eq!(
            efi_time_to_unix(&t(2024, 2, 29, 0, 0, 0)),
            Some(1_709_164_800)
        );
        assert_eq!(
            efi_time_to_unix(&t(2024, 3, 1, 0, 0, 0)),
            Some(1_709_164_800 + 86_400)
        );
        assert_eq!(efi_time_to_unix(&t(2023, 2, 29, 0, 0, 0)), None);
        assert_eq!(efi_time_to_unix(&t(2100, 2, 29, 0, 0, 0)), None);
        assert_eq!(
            efi_time_to_unix(&t(2000, 2, 29, 0, 0, 0)),
            Some(951_782_400)
        );
        assert_eq!(
            efi_time_to_unix(&t(2100, 3, 1, 0, 0, 0)),
            Some(4_107_542_400)
        );
        // Every day of 1970..2400 is one more than the day before.
        let mut expect = 0i64;
        for year in 1970u32..2400 {
            for month in 1..=12 {
                for day in 1..=days_in_month(year, month) {
                    assert_eq!(days_from_civil(year.into(), month, day), expect);
                    expect += 1;
                }
            }
        }
    }

    #[test]
    fn bad_fields_are_refused() {
        let good = t(2026, 12, 1, 13, 45, 0);
        let bad = [
            EfiTime { month: 0, ..good },
            EfiTime { month: 13, ..good },
            EfiTime { day: 0, ..good },
            EfiTime { day: 32, ..good },
            EfiTime {
                month: 4,
                day: 31,
                ..good
            },
            EfiTime { hour: 24, ..good },
            EfiTime { minute: 60, ..good },
            EfiTime { second: 60, ..good },
            EfiTime {
                nanosecond: 1_000_000_000,
                ..good
            },
            EfiTime {
                time_zone: 1441,
                ..good
            },
            EfiTime {
                time_zone: -1441,
                ..good
            },
            EfiTime { year: 1899, ..good },
            EfiTime {
                year: 10000,
                ..good
            },
            // Valid EFI, but before the epoch.
            t(1969, 12, 31, 23, 59, 59),
            EfiTime::default(),
        ];
        for b in bad {
            assert_eq!(efi_time_to_unix(&b), None, "{b:?}");
        }
    }

    #[test]
    fn a_time_zone_is_subtracted() {
        // 14:45 at UTC+60 minutes is 13:45 UTC.
        let local = EfiTime {
            time_zone: 60,
            ..t(2026, 12, 1, 14, 45, 0)
        };
        assert_eq!(efi_time_to_unix(&local), Some(1_796_132_700));
        let utc = EfiTime {
            time_zone: 0,
            ..t(2026, 12, 1, 13, 45, 0)
        };
        assert_eq!(efi_time_to_unix(&utc), Some(1_796_132_700));
    }

    #[test]
    fn efi_comes_first_then_the_rtc() {
        let efi = EfiTime {
            nanosecond: 250_000_000,
            ..t(2026, 12, 1, 13, 45, 0)
        };
        let got = choose(Some((efi, 7)), || panic!("the RTC is not read")).unwrap();
        assert_eq!(
            got,
            WallClock {
                unix_ms: 1_796_132_700_250,
                counter: 7,
                source: ClockSource::EfiGetTime
            }
        );
        // A reading that does not convert falls back to the RTC.
        let got = choose(Some((EfiTime::default(), 7)), || Some((1_796_132_700, 9))).unwrap();
        assert_eq!(
            (got.unix_ms, got.counter, got.source),
            (1_796_132_700_000, 9, ClockSource::Pl031)
        );
        assert_eq!(choose(None, || Some((0, 9))), None, "an unset RTC");
        assert_eq!(choose(None, || None), None);
    }

    #[test]
    fn later_counter_values_add_elapsed_time() {
        let c = WallClock {
            unix_ms: 1_000,
            counter: 500,
            source: ClockSource::Pl031,
        };
        let freq = 62_500_000;
        assert_eq!(c.unix_ms_at(500, freq), 1_000);
        assert_eq!(c.unix_ms_at(500 + 3 * freq + freq / 2, freq), 4_500);
        assert_eq!(c.unix_ms_at(0, freq), 1_000, "a counter before the reading");
        assert_eq!(
            c.unix_ms_at(u64::MAX, 0),
            u64::MAX,
            "no frequency: no panic"
        );
    }

    #[test]
    fn the_rtc_is_an_enabled_pl031() {
        let device = |path: &str, compatible: &str, enabled: bool| HostDevice {
            path: path.to_string(),
            compatible: vec![compatible.to_string(), "arm,primecell".to_string()],
            regs: vec![(0x901_0000, 0x1000)],
            spis: vec![34],
            enabled,
            smmu_model: Default::default(),
        };
        assert_eq!(pl031(&[]), None);
        let mut devices = vec![
            device("/pl011@9000000", "arm,pl011", true),
            device("/pl031@9010000", "arm,pl031", false),
        ];
        assert_eq!(pl031(&devices), None, "disabled");
        devices[1].enabled = true;
        assert_eq!(pl031(&devices), Some(0x901_0000));
    }
}
