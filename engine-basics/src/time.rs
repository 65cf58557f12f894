//! Calendar arithmetic and the RFC 3339 grammar both engines read. Each engine keeps its own
//! timestamp type (AWCP: milliseconds, written with `Z`; AIP: the instant with the way it was
//! written), built on these.
//!
//! The civil-date arithmetic is the days-from-civil algorithm (H. Hinnant): a few lines,
//! proptested below, and no date crate.

/// How a date-time's UTC offset was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UtcOffset {
    /// `Z` (or `z`).
    Zulu,
    /// `±HH:MM` or `±HHMM`: minutes east of UTC.
    Minutes(i16),
    /// No offset at all (a naive time; read as UTC by whoever accepts it).
    Absent,
}

impl UtcOffset {
    /// Seconds east of UTC (0 for `Z` and for no offset).
    pub fn seconds(self) -> i64 {
        match self {
            UtcOffset::Minutes(m) => i64::from(m) * 60,
            UtcOffset::Zulu | UtcOffset::Absent => 0,
        }
    }
}

/// A parsed RFC 3339 date-time: the instant and how it was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DateTime {
    /// Seconds since the Unix epoch (UTC; negative before 1970).
    pub unix_secs: i64,
    /// Nanoseconds within the second (fractional digits past the ninth are dropped).
    pub nanos: u32,
    /// The offset as written.
    pub offset: UtcOffset,
    /// How many fractional digits were written (0–9; more count as 9).
    pub frac_digits: u8,
}

/// Parses `YYYY-MM-DD(T|t| )HH:MM:SS[.fraction][Z|z|±HH:MM|±HHMM]`, with nothing around it. A
/// leap second (`:60`) is read as `:59`. `None` for anything else, never a panic.
pub fn parse_rfc3339(s: &str) -> Option<DateTime> {
    let b = s.as_bytes();
    let (year, month, day) = (digits(b, 0, 4)?, digits(b, 5, 2)?, digits(b, 8, 2)?);
    let (hour, minute, second) = (digits(b, 11, 2)?, digits(b, 14, 2)?, digits(b, 17, 2)?);
    let at = |i: usize| b.get(i).copied();
    if at(4) != Some(b'-')
        || at(7) != Some(b'-')
        || !matches!(at(10), Some(b'T' | b't' | b' '))
        || at(13) != Some(b':')
        || at(16) != Some(b':')
    {
        return None;
    }
    if !(1..=12).contains(&month)
        || day == 0
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut i = 19;
    let (mut nanos, mut frac_digits) = (0u32, 0u8);
    if at(i) == Some(b'.') {
        i += 1;
        let start = i;
        while let Some(c) = at(i).filter(u8::is_ascii_digit) {
            if i - start < 9 {
                nanos = nanos * 10 + u32::from(c - b'0');
                frac_digits += 1;
            }
            i += 1;
        }
        if i == start {
            return None;
        }
        nanos *= 10u32.pow(9 - u32::from(frac_digits));
    }
    let offset = match at(i) {
        None => UtcOffset::Absent,
        Some(b'Z' | b'z') => {
            i += 1;
            UtcOffset::Zulu
        }
        Some(sign @ (b'+' | b'-')) => {
            let oh = digits(b, i + 1, 2)?;
            let colon = usize::from(at(i + 3) == Some(b':'));
            let om = digits(b, i + 3 + colon, 2)?;
            if oh > 23 || om > 59 {
                return None;
            }
            i += 5 + colon;
            // At most 23 * 60 + 59.
            let v = i16::try_from(oh * 60 + om).ok()?;
            UtcOffset::Minutes(if sign == b'-' { -v } else { v })
        }
        Some(_) => return None,
    };
    if i != b.len() {
        return None;
    }
    let days = days_from_civil(i64::from(year), month, day);
    let unix_secs =
        days * 86_400 + i64::from(hour) * 3600 + i64::from(minute) * 60 + i64::from(second.min(59))
            - offset.seconds();
    Some(DateTime {
        unix_secs,
        nanos,
        offset,
        frac_digits,
    })
}

/// Days since 1970-01-01 of the proleptic Gregorian date `y-m-d`.
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (i64::from(m) + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The proleptic Gregorian date `(year, month, day)` of `z` days since 1970-01-01.
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = if z >= 0 { z } else { z - 146_096 } / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    // Both in range by construction: 1..=31 and 1..=12.
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// The `n` ASCII digits of `b` at `start` as a number.
fn digits(b: &[u8], start: usize, n: usize) -> Option<u32> {
    let s = b.get(start..start.checked_add(n)?)?;
    s.iter().try_fold(0u32, |v, &c| {
        c.is_ascii_digit().then(|| v * 10 + u32::from(c - b'0'))
    })
}

fn days_in_month(y: u32, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        _ => 28,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_peers_write_is_read() {
        let base = parse_rfc3339("2025-09-01T03:58:00Z").map(|d| d.unix_secs);
        for s in [
            "2025-09-01T11:58:00+08:00",
            "2025-09-01T11:58:00+0800",
            "2025-09-01 03:58:00z",
            "2025-09-01t03:58:00.000000+00:00",
            "2025-09-01T03:58:00",
            "2025-08-31T23:58:00-04:00",
        ] {
            assert_eq!(parse_rfc3339(s).map(|d| d.unix_secs), base, "{s}");
        }
        let d = parse_rfc3339("2025-09-01T03:58:00.1234567891Z").unwrap();
        assert_eq!((d.nanos, d.frac_digits), (123_456_789, 9));
        let leap = parse_rfc3339("2016-12-31T23:59:60Z").unwrap();
        assert_eq!(leap, parse_rfc3339("2016-12-31T23:59:59Z").unwrap());
        assert_eq!(
            parse_rfc3339("2025-09-01T03:58:00").unwrap().offset,
            UtcOffset::Absent
        );
    }

    #[test]
    fn malformed_text_is_refused_without_panicking() {
        for s in [
            "",
            "2026",
            "2026-13-01T00:00:00Z",
            "2026-02-29T00:00:00Z",
            "2026-02-01T24:00:00Z",
            "2026-02-01T13:00:00.Z",
            "2026-02-01T13:00:00Zjunk",
            "2026-02-01T13:00:00+24:00",
            "2026-02-01X13:00:00Z",
            "2026-02-01T13:00:00+",
            "２０２６-02-01T13:00:00Z",
        ] {
            assert_eq!(parse_rfc3339(s), None, "{s}");
        }
    }

    #[test]
    fn civil_dates_round_trip() {
        for z in [-800_000i64, -1, 0, 1, 59, 60, 11_016, 2_932_896] {
            let (y, m, d) = civil_from_days(z);
            assert_eq!(days_from_civil(y, m, d), z, "{z}");
        }
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
    }
}
