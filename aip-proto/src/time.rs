//! Wall-clock time as a value that remembers how it was written.
//!
//! AIP timestamps (`sentAt`, `stateChangedAt`) are ISO 8601 / RFC 3339 strings. Peers write them
//! differently: the spec's examples use `+08:00` without fractions, the Python SDK writes UTC
//! `+00:00` with microseconds, others write `Z` and milliseconds. The SDK's `get` filter even
//! compares them *as strings*. So a [`Timestamp`] keeps both the instant (for ordering and
//! timers) and the presentation (offset and number of fractional digits), and re-encodes a
//! decoded value exactly as it came.
//!
//! * Equality and ordering look at the instant only: `12:00:00+08:00 == 04:00:00Z`.
//! * Decoding accepts `T`, `t` or a space between date and time, 0–9 fractional digits (more
//!   are truncated to nanoseconds), `Z`/`z`, `±HH:MM`, `±HHMM`, and, leniently, no offset at
//!   all (read as UTC and written back without one). Leap second `:60` is read as `:59`.
//! * Times the engines create are UTC with microseconds and `+00:00`, like the SDK.
//!
//! The civil-date arithmetic and the RFC 3339 grammar are `engine_basics::time`'s, shared with
//! AWCP's timestamps.

use core::cmp::Ordering;
use core::fmt;
use core::hash::{Hash, Hasher};
use core::time::Duration;

use engine_basics::time::civil_from_days;

/// How the UTC offset is written (`Absent`: no offset written, a naive time read as UTC).
use engine_basics::time::UtcOffset as Offset;

/// An instant with the way it is written (offset and fractional digits).
#[derive(Clone, Copy)]
pub struct Timestamp {
    /// Seconds since the Unix epoch (UTC).
    secs: i64,
    /// Nanoseconds within the second.
    nanos: u32,
    offset: Offset,
    /// Fractional digits to write (0–9).
    frac: u8,
}

/// A timestamp string could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid timestamp {0:?}: expected RFC 3339 such as 2025-09-01T11:58:00+08:00")]
pub struct TimestampError(pub String);

impl Timestamp {
    /// The Unix epoch, written `1970-01-01T00:00:00.000000+00:00`.
    pub const UNIX_EPOCH: Timestamp = Timestamp {
        secs: 0,
        nanos: 0,
        offset: Offset::Minutes(0),
        frac: 6,
    };

    /// From milliseconds since the Unix epoch; written in UTC with microseconds (`+00:00`).
    pub const fn from_unix_millis(ms: u64) -> Self {
        Timestamp {
            secs: (ms / 1000) as i64,
            nanos: ((ms % 1000) * 1_000_000) as u32,
            offset: Offset::Minutes(0),
            frac: 6,
        }
    }

    /// From microseconds since the Unix epoch; written in UTC with microseconds (`+00:00`).
    pub const fn from_unix_micros(us: u64) -> Self {
        Timestamp {
            secs: (us / 1_000_000) as i64,
            nanos: ((us % 1_000_000) * 1000) as u32,
            offset: Offset::Minutes(0),
            frac: 6,
        }
    }

    /// Milliseconds since the Unix epoch (0 for earlier instants).
    pub fn as_unix_millis(self) -> u64 {
        if self.secs < 0 {
            return 0;
        }
        (self.secs as u64)
            .saturating_mul(1000)
            .saturating_add(u64::from(self.nanos / 1_000_000))
    }

    /// The same instant written in UTC with microseconds and `+00:00` (the engines' form).
    pub fn to_utc(self) -> Self {
        Timestamp {
            offset: Offset::Minutes(0),
            frac: 6,
            ..self
        }
    }

    /// `self + d`, saturating; keeps the presentation.
    pub fn saturating_add(self, d: Duration) -> Self {
        let mut nanos = u64::from(self.nanos) + u64::from(d.subsec_nanos());
        let mut secs = self
            .secs
            .saturating_add(i64::try_from(d.as_secs()).unwrap_or(i64::MAX));
        if nanos >= 1_000_000_000 {
            nanos -= 1_000_000_000;
            secs = secs.saturating_add(1);
        }
        Timestamp {
            secs,
            nanos: nanos as u32,
            ..self
        }
    }

    /// The time from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Timestamp) -> Duration {
        if self <= earlier {
            return Duration::ZERO;
        }
        let (mut s, mut n) = (self.secs - earlier.secs, i64::from(self.nanos));
        n -= i64::from(earlier.nanos);
        if n < 0 {
            n += 1_000_000_000;
            s -= 1;
        }
        Duration::new(s as u64, n as u32)
    }

    /// Formats as RFC 3339 in the timestamp's own presentation.
    pub fn to_rfc3339(self) -> String {
        self.to_string()
    }

    /// Parses an RFC 3339 date-time (see the module docs for what is accepted).
    pub fn parse_rfc3339(s: &str) -> Result<Self, TimestampError> {
        parse(s).ok_or_else(|| TimestampError(s.chars().take(64).collect()))
    }

    fn key(&self) -> (i64, u32) {
        (self.secs, self.nanos)
    }
}

impl PartialEq for Timestamp {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Timestamp {}

impl PartialOrd for Timestamp {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Timestamp {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

impl Hash for Timestamp {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.key().hash(state);
    }
}

impl Default for Timestamp {
    fn default() -> Self {
        Timestamp::UNIX_EPOCH
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Timestamp({self})")
    }
}

/// `"00"` to `"99"`, back to back.
const DIGIT_PAIRS: [u8; 200] = {
    let mut t = [0u8; 200];
    let mut i = 0;
    while i < 100 {
        t[2 * i] = b'0' + (i / 10) as u8;
        t[2 * i + 1] = b'0' + (i % 10) as u8;
        i += 1;
    }
    t
};

impl Timestamp {
    /// Writes the RFC 3339 form into `buf` (at most 35 bytes) and returns its length. Hand
    /// written: `core::fmt` made encoding a reply several times slower (see BENCHMARKS.md).
    pub(crate) fn write_to(&self, buf: &mut [u8; 40]) -> usize {
        /// `v`'s last `width` decimal digits at `at`, two at a time.
        fn put(buf: &mut [u8; 40], at: usize, mut v: u64, width: usize) {
            let mut i = width;
            while i >= 2 {
                i -= 2;
                let p = (v % 100) as usize * 2;
                buf[at + i] = DIGIT_PAIRS[p];
                buf[at + i + 1] = DIGIT_PAIRS[p + 1];
                v /= 100;
            }
            if i == 1 {
                buf[at] = b'0' + (v % 10) as u8;
            }
        }
        let off_secs = match self.offset {
            Offset::Minutes(m) => i64::from(m) * 60,
            Offset::Zulu | Offset::Absent => 0,
        };
        let local = self.secs + off_secs;
        let days = local.div_euclid(86_400);
        let sod = local.rem_euclid(86_400) as u64;
        let (y, m, d) = civil_from_days(days);
        // Years outside 0..=9999 cannot be parsed back anyway; clamp to four digits.
        put(buf, 0, y.clamp(0, 9999) as u64, 4);
        buf[4] = b'-';
        put(buf, 5, u64::from(m), 2);
        buf[7] = b'-';
        put(buf, 8, u64::from(d), 2);
        buf[10] = b'T';
        put(buf, 11, sod / 3600, 2);
        buf[13] = b':';
        put(buf, 14, (sod / 60) % 60, 2);
        buf[16] = b':';
        put(buf, 17, sod % 60, 2);
        let mut n = 19;
        if self.frac > 0 {
            let frac = usize::from(self.frac.min(9));
            buf[n] = b'.';
            put(
                buf,
                n + 1,
                u64::from(self.nanos / 10u32.pow(9 - frac as u32)),
                frac,
            );
            n += 1 + frac;
        }
        match self.offset {
            Offset::Zulu => {
                buf[n] = b'Z';
                n += 1;
            }
            Offset::Absent => {}
            Offset::Minutes(m) => {
                buf[n] = if m < 0 { b'-' } else { b'+' };
                let a = u64::from(m.unsigned_abs());
                put(buf, n + 1, a / 60, 2);
                buf[n + 3] = b':';
                put(buf, n + 4, a % 60, 2);
                n += 6;
            }
        }
        n
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut buf = [0u8; 40];
        let n = self.write_to(&mut buf);
        // Only ASCII digits and punctuation were written.
        f.write_str(core::str::from_utf8(&buf[..n]).map_err(|_| fmt::Error)?)
    }
}

impl core::str::FromStr for Timestamp {
    type Err = TimestampError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Timestamp::parse_rfc3339(s)
    }
}

impl serde::Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut buf = [0u8; 40];
        let n = self.write_to(&mut buf);
        s.serialize_str(core::str::from_utf8(&buf[..n]).map_err(serde::ser::Error::custom)?)
    }
}

impl<'de> serde::Deserialize<'de> for Timestamp {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Timestamp;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an RFC 3339 timestamp string")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Timestamp, E> {
                Timestamp::parse_rfc3339(v).map_err(E::custom)
            }
        }
        d.deserialize_str(V)
    }
}

/// The shared RFC 3339 grammar (`engine_basics::time`), kept as it was written.
fn parse(s: &str) -> Option<Timestamp> {
    let d = engine_basics::time::parse_rfc3339(s)?;
    Some(Timestamp {
        secs: d.unix_secs,
        nanos: d.nanos,
        offset: d.offset,
        frac: d.frac_digits,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn spec_example_reencodes_exactly() {
        for s in [
            "2025-09-01T11:58:00+08:00",
            "2025-09-01T03:58:00.123456+00:00",
            "2026-03-04T05:06:07.089Z",
            "2025-09-01T11:58:00-05:30",
            "2025-09-01T11:58:00.5",
        ] {
            assert_eq!(Timestamp::parse_rfc3339(s).unwrap().to_rfc3339(), s);
        }
    }

    #[test]
    fn equality_is_by_instant_across_offsets() {
        let a = Timestamp::parse_rfc3339("2025-09-01T11:58:00+08:00").unwrap();
        let b = Timestamp::parse_rfc3339("2025-09-01T03:58:00.000000+00:00").unwrap();
        let c = Timestamp::parse_rfc3339("2025-09-01T03:58:00Z").unwrap();
        assert_eq!(a, b);
        assert_eq!(b, c);
        assert_eq!(a.as_unix_millis(), 1_756_699_080_000);
        let later = Timestamp::parse_rfc3339("2025-09-01T03:58:00.000001Z").unwrap();
        assert!(later > a);
        assert_eq!(later.saturating_duration_since(a), Duration::from_micros(1));
    }

    #[test]
    fn lenient_forms_are_accepted() {
        let z = Timestamp::parse_rfc3339("2025-09-01T03:58:00Z").unwrap();
        for s in [
            "2025-09-01t03:58:00z",
            "2025-09-01 03:58:00+00:00",
            "2025-09-01T11:58:00+0800",
            "2025-09-01T03:58:00.0000000001Z",
            "2025-09-01T03:58:00",
            "2025-09-01T03:58:60Z",
        ] {
            let t = Timestamp::parse_rfc3339(s).unwrap();
            assert!(
                t.saturating_duration_since(z) < Duration::from_secs(60),
                "{s}"
            );
        }
    }

    #[test]
    fn garbage_is_refused() {
        for s in [
            "",
            "2025",
            "2025-13-01T00:00:00Z",
            "2025-02-29T00:00:00Z",
            "2025-09-01T24:00:00Z",
            "2025-09-01T03:58:00.Z",
            "2025-09-01T03:58:00Zjunk",
            "2025-09-01T03:58:00+8",
            "2025/09/01T03:58:00Z",
        ] {
            assert!(Timestamp::parse_rfc3339(s).is_err(), "{s}");
        }
    }

    #[test]
    fn engine_times_are_utc_microseconds() {
        let t = Timestamp::from_unix_millis(1_756_699_080_123);
        assert_eq!(t.to_rfc3339(), "2025-09-01T03:58:00.123000+00:00");
        assert_eq!(
            t.saturating_add(Duration::from_micros(1_877_000))
                .as_unix_millis(),
            1_756_699_082_000
        );
    }

    proptest! {
        #[test]
        fn rfc3339_round_trips(us in 0u64..253_402_300_799_999_999, off in -1439i16..1440, frac in 0u8..10) {
            let t = Timestamp { offset: Offset::Minutes(off), frac, ..Timestamp::from_unix_micros(us) };
            let back = Timestamp::parse_rfc3339(&t.to_rfc3339()).unwrap();
            prop_assert_eq!(back.to_rfc3339(), t.to_rfc3339());
            if frac >= 6 {
                prop_assert_eq!(back, t);
            }
        }

        /// The hand-written digits are what `core::fmt` writes.
        #[test]
        fn written_as_core_fmt_writes(us in 0u64..253_402_300_799_999_999, off in -1439i16..1440, frac in 0u8..10) {
            let t = Timestamp { offset: Offset::Minutes(off), frac, ..Timestamp::from_unix_micros(us) };
            let local = t.secs + i64::from(off) * 60;
            let (y, m, d) = civil_from_days(local.div_euclid(86_400));
            let sod = local.rem_euclid(86_400);
            let mut want = format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}", sod / 3600, sod / 60 % 60, sod % 60);
            if frac > 0 {
                let digits = format!("{:09}", t.nanos);
                want.push('.');
                want.push_str(&digits[..usize::from(frac)]);
            }
            let a = off.unsigned_abs();
            want.push_str(&format!("{}{:02}:{:02}", if off < 0 { '-' } else { '+' }, a / 60, a % 60));
            prop_assert_eq!(t.to_rfc3339(), want);
        }

        #[test]
        fn parse_never_panics(s in ".{0,40}") {
            let _ = Timestamp::parse_rfc3339(&s);
        }
    }
}
