//! Wall-clock times as HTTP and JSON spell them: the `Date` header's
//! IMF-fixdate (RFC 7231 7.1.1.1, e.g. `Tue, 01 Dec 2026 13:45:00 GMT`) and
//! RFC 3339 UTC (`2026-12-01T13:45:00Z`), from the Unix milliseconds the
//! hypervisor's WALL_CLOCK call returns.

pub use pinfold_abi::civil_from_days;

struct Parts {
    year: i64,
    month: u32,
    day: u32,
    weekday: usize,
    hour: u64,
    minute: u64,
    second: u64,
}

fn parts(unix_ms: u64) -> Parts {
    let secs = unix_ms / 1000;
    let days = (secs / 86_400) as i64;
    let (year, month, day) = civil_from_days(days);
    let rem = secs % 86_400;
    Parts {
        year,
        month,
        day,
        // 1970-01-01 was a Thursday.
        weekday: ((days + 4) % 7) as usize,
        hour: rem / 3600,
        minute: rem / 60 % 60,
        second: rem % 60,
    }
}

const WEEKDAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// The `Date` header's value (IMF-fixdate).
pub fn imf_fixdate(unix_ms: u64) -> String {
    let p = parts(unix_ms);
    format!(
        "{}, {:02} {} {:04} {:02}:{:02}:{:02} GMT",
        WEEKDAYS[p.weekday],
        p.day,
        MONTHS[p.month as usize - 1],
        p.year,
        p.hour,
        p.minute,
        p.second
    )
}

/// RFC 3339 in UTC, whole seconds.
pub fn rfc3339(unix_ms: u64) -> String {
    let p = parts(unix_ms);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        p.year, p.month, p.day, p.hour, p.minute, p.second
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn imf_fixdate_matches_rfc_7231s_example_and_known_dates() {
        // RFC 7231 7.1.1.1: 784111777 is Sun, 06 Nov 1994 08:49:37 GMT.
        assert_eq!(
            imf_fixdate(784_111_777_000),
            "Sun, 06 Nov 1994 08:49:37 GMT"
        );
        assert_eq!(imf_fixdate(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(
            imf_fixdate(1_796_132_700_999),
            "Tue, 01 Dec 2026 13:45:00 GMT",
            "milliseconds are dropped, not rounded"
        );
        assert_eq!(
            imf_fixdate(1_709_164_800_000),
            "Thu, 29 Feb 2024 00:00:00 GMT"
        );
        assert_eq!(
            imf_fixdate(951_868_799_000),
            "Tue, 29 Feb 2000 23:59:59 GMT"
        );
        assert_eq!(
            imf_fixdate(4_107_542_400_000),
            "Mon, 01 Mar 2100 00:00:00 GMT"
        );
    }

    #[test]
    fn rfc3339_is_utc_with_a_z() {
        assert_eq!(rfc3339(1_796_132_700_000), "2026-12-01T13:45:00Z");
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(253_402_300_799_000), "9999-12-31T23:59:59Z");
    }

    #[test]
    fn every_day_follows_the_one_before() {
        let mut prev = civil_from_days(-1);
        for days in 0..200_000 {
            let (y, m, d) = civil_from_days(days);
            let next_day = (prev.0, prev.1, prev.2 + 1);
            let next_month = (prev.0, prev.1 + 1, 1);
            let next_year = (prev.0 + 1, 1, 1);
            assert!(
                [next_day, next_month, next_year].contains(&(y, m, d)),
                "{prev:?} -> {:?}",
                (y, m, d)
            );
            prev = (y, m, d);
        }
    }
}
