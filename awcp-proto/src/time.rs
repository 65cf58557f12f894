//! Wall-clock time as a value.
//!
//! The engine never reads a clock: every input carries `now` as a [`Timestamp`], and leases are
//! absolute [`Timestamp`]s. `now` must never go backwards and must keep advancing in real time
//! even when the host's wall clock is set back, or every deadline (retry backoff, retention,
//! leases) would wait out the difference: the drivers feed the protocol clock
//! (`agent_rt::clock::protocol_time`, the wall clock followed forward but not backward), so a
//! lease a peer wrote as wall-clock time is compared once and then runs on monotonic time. On the wire, time is an ISO-8601/RFC 3339 string in UTC with
//! milliseconds and `Z` (`2026-03-04T05:06:07.089Z`); decoding also accepts no or more
//! fractional digits and numeric offsets (`+08:00`).
//!
//! The civil-date arithmetic and the RFC 3339 grammar are `engine_basics::time`'s, shared with
//! AIP's timestamps.

use core::fmt;
use core::time::Duration;

use engine_basics::time::civil_from_days;

/// Milliseconds since the Unix epoch (UTC). Totally ordered, cheap to copy.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(u64);

/// A timestamp string could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid timestamp {0:?}: expected RFC 3339 such as 2026-03-04T05:06:07.089Z")]
pub struct TimestampError(pub String);

impl Timestamp {
    /// The Unix epoch.
    pub const EPOCH: Timestamp = Timestamp(0);
    /// The latest representable time (used as "never").
    pub const MAX: Timestamp = Timestamp(u64::MAX);

    /// From milliseconds since the Unix epoch.
    pub const fn from_unix_millis(ms: u64) -> Self {
        Timestamp(ms)
    }

    /// Milliseconds since the Unix epoch.
    pub const fn as_unix_millis(self) -> u64 {
        self.0
    }

    /// `self + d`, saturating at [`Timestamp::MAX`].
    pub fn saturating_add(self, d: Duration) -> Self {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Timestamp(self.0.saturating_add(ms))
    }

    /// `self - d`, saturating at the epoch.
    pub fn saturating_sub(self, d: Duration) -> Self {
        let ms = u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Timestamp(self.0.saturating_sub(ms))
    }

    /// The time from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_duration_since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }

    /// Formats as `YYYY-MM-DDTHH:MM:SS.mmmZ`.
    pub fn to_rfc3339(self) -> String {
        match self.rfc3339_ascii() {
            Some(b) => String::from_utf8_lossy(&b).into_owned(),
            None => self.to_string(),
        }
    }

    /// The RFC 3339 text as fixed-width ASCII, for years 0–9999 (every other year goes through
    /// `fmt`); written digit by digit, as timestamps are on every event the engines encode.
    pub(crate) fn rfc3339_ascii(self) -> Option<[u8; 24]> {
        let ms = self.0 % 1000;
        let secs = self.0 / 1000;
        let days = i64::try_from(secs / 86_400).ok()?;
        let sod = secs % 86_400;
        let (y, m, d) = civil_from_days(days);
        let y = u64::try_from(y).ok().filter(|y| *y <= 9999)?;
        let mut b = *b"0000-00-00T00:00:00.000Z";
        let fields: [(usize, usize, u64); 7] = [
            (0, 4, y),
            (5, 7, u64::from(m)),
            (8, 10, u64::from(d)),
            (11, 13, sod / 3600),
            (14, 16, (sod / 60) % 60),
            (17, 19, sod % 60),
            (20, 23, ms),
        ];
        for (start, end, mut n) in fields {
            for slot in b.get_mut(start..end)?.iter_mut().rev() {
                // `n % 10` is a single digit.
                *slot = b'0' + (n % 10) as u8;
                n /= 10;
            }
        }
        Some(b)
    }

    /// Parses an RFC 3339 date-time (`Z` or a numeric offset, optional fraction).
    pub fn parse_rfc3339(s: &str) -> Result<Self, TimestampError> {
        parse(s).ok_or_else(|| TimestampError(s.chars().take(64).collect()))
    }
}

/// Written as its RFC 3339 text ([`Timestamp::to_rfc3339`]).
impl serde::Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.rfc3339_ascii() {
            // Digits, `-`, `:`, `.`, `T` and `Z`: ASCII.
            Some(text) => s.serialize_str(core::str::from_utf8(&text).unwrap_or_default()),
            None => s.collect_str(self),
        }
    }
}

/// Read from RFC 3339 text ([`Timestamp::parse_rfc3339`]).
impl<'de> serde::Deserialize<'de> for Timestamp {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Timestamp::parse_rfc3339(&text).map_err(serde::de::Error::custom)
    }
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Timestamp({self})")
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(b) = self.rfc3339_ascii() {
            return f.write_str(core::str::from_utf8(&b).map_err(|_| fmt::Error)?);
        }
        let ms = self.0 % 1000;
        let secs = self.0 / 1000;
        let days = (secs / 86_400) as i64;
        let sod = secs % 86_400;
        let (y, m, d) = civil_from_days(days);
        write!(
            f,
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
            sod / 3600,
            (sod / 60) % 60,
            sod % 60
        )
    }
}

impl core::str::FromStr for Timestamp {
    type Err = TimestampError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Timestamp::parse_rfc3339(s)
    }
}

/// The shared RFC 3339 grammar (`engine_basics::time`), read as AWCP requires: an offset
/// must be written (`Z` or `±HH:MM`), the instant is not before 1970, and digits past the
/// milliseconds are dropped. Whitespace around the text is ignored.
fn parse(s: &str) -> Option<Timestamp> {
    let d = engine_basics::time::parse_rfc3339(s.trim())?;
    if d.offset == engine_basics::time::UtcOffset::Absent {
        return None;
    }
    let secs = u64::try_from(d.unix_secs).ok()?;
    Some(Timestamp(
        secs.checked_mul(1000)?
            .checked_add(u64::from(d.nanos / 1_000_000))?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn formats_the_reference_example() {
        let t = Timestamp::parse_rfc3339("2026-03-04T05:06:07.089Z").unwrap();
        assert_eq!(t.to_rfc3339(), "2026-03-04T05:06:07.089Z");
        assert_eq!(t.as_unix_millis(), 1_772_600_767_089);
    }

    #[test]
    fn years_past_9999_are_written_in_full() {
        let t = Timestamp::from_unix_millis(253_402_300_800_000);
        assert_eq!(t.to_rfc3339(), "10000-01-01T00:00:00.000Z");
        assert_eq!(t.to_string(), t.to_rfc3339());
        let last = Timestamp::from_unix_millis(253_402_300_799_999);
        assert_eq!(last.to_rfc3339(), "9999-12-31T23:59:59.999Z");
        assert_eq!(Timestamp::EPOCH.to_rfc3339(), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn accepts_offsets_and_short_fractions() {
        let z = Timestamp::parse_rfc3339("2026-02-01T13:00:00.000Z").unwrap();
        assert_eq!(Timestamp::parse_rfc3339("2026-02-01T13:00:00Z").unwrap(), z);
        assert_eq!(
            Timestamp::parse_rfc3339("2026-02-01T21:00:00+08:00").unwrap(),
            z
        );
        assert_eq!(
            Timestamp::parse_rfc3339("2026-02-01T13:00:00.0000001Z").unwrap(),
            z
        );
        assert_eq!(
            Timestamp::parse_rfc3339("2026-02-01T13:00:00.5Z")
                .unwrap()
                .as_unix_millis()
                - z.as_unix_millis(),
            500
        );
    }

    #[test]
    fn rejects_garbage() {
        for s in [
            "",
            "2026",
            "2026-13-01T00:00:00Z",
            "2026-02-30T00:00:00Z",
            "2026-02-01T24:00:00Z",
            "2026-02-01T13:00:00",
            "2026-02-01T13:00:00.Z",
            "2026-02-01T13:00:00Zjunk",
            "1969-12-31T23:59:59Z",
        ] {
            assert!(Timestamp::parse_rfc3339(s).is_err(), "{s}");
        }
    }

    proptest! {
        #[test]
        fn rfc3339_round_trips(ms in 0u64..253_402_300_799_999) {
            let t = Timestamp::from_unix_millis(ms);
            prop_assert_eq!(Timestamp::parse_rfc3339(&t.to_rfc3339()).unwrap(), t);
        }

        #[test]
        fn parse_never_panics(s in ".{0,40}") {
            let _ = Timestamp::parse_rfc3339(&s);
        }
    }
}
