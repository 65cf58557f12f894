//! The protocol clock: wall-clock time that never runs backwards and never stalls.
//!
//! Protocol engines take `now` as a value and keep every timer (retry backoff, event-buffer
//! and result retention, leases) as a deadline on it. Fed straight from the wall clock, a
//! clock set back (by an operator, an NTP step, a restored VM) would hold every pending
//! deadline for as long as the clock was set back: a retry due in 2 s would wait an hour and
//! 2 s. The protocol clock instead
//!
//! - **advances with the monotonic clock** ([`Instant`]) between two readings, so a wall clock
//!   set back is ignored: deadlines keep their distance in real time;
//! - **follows the wall clock forward**: when the wall clock is ahead of it (a clock set
//!   forward, or time spent suspended, which the monotonic clock does not count), it jumps to
//!   the wall clock, so a lease whose end a peer wrote as wall-clock time is never overrun.
//!
//! A lease received as a wall-clock instant is therefore compared once against this clock and
//! then runs on monotonic time. After the wall clock was set back by Δ, timestamps this
//! process writes run Δ ahead of its wall clock (and leases it holds end up to Δ early),
//! until the wall clock catches up: the safe direction for a lease.
//!
//! One protocol clock per process: every driver reads the same one ([`protocol_time`]).

use std::sync::Mutex;
use std::time::{Instant, SystemTime};

use crate::runtime::Runtime;

/// The protocol clock's state: its last reading and the monotonic instant of that reading.
///
/// [`ProtocolClock::advance`] is the whole rule, a pure function of the readings it is given
/// (tested without touching the system clock); [`protocol_time`] feeds it the runtime's wall
/// clock and [`Instant::now`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ProtocolClock {
    last: Option<(SystemTime, Instant)>,
}

impl ProtocolClock {
    /// A clock that has not been read yet (its first reading is the wall clock).
    pub const fn new() -> Self {
        ProtocolClock { last: None }
    }

    /// The protocol time for a reading of the wall clock (`wall`) and the monotonic clock
    /// (`mono`): the last protocol time carried forward by the monotonic time elapsed since,
    /// or `wall` if that is later. Never earlier than a previous answer.
    pub fn advance(&mut self, wall: SystemTime, mono: Instant) -> SystemTime {
        let now = match self.last {
            None => wall,
            Some((t, m)) => {
                let carried = t
                    .checked_add(mono.saturating_duration_since(m))
                    .unwrap_or(t);
                carried.max(wall)
            }
        };
        // A monotonic reading taken before the last one (two threads racing) must not pull
        // the base back: keep the later instant.
        let base = match self.last {
            Some((_, m)) if m > mono => m,
            Some(_) | None => mono,
        };
        self.last = Some((now, base));
        now
    }
}

static CLOCK: Mutex<ProtocolClock> = Mutex::new(ProtocolClock::new());

/// This process's protocol time, from `rt`'s wall clock ([`Runtime::wall_clock`]) and the
/// monotonic clock: what drivers hand their engines as `now`. Non-decreasing across every
/// caller in the process.
pub fn protocol_time<R: Runtime>(rt: &R) -> SystemTime {
    let mut clock = CLOCK.lock().unwrap_or_else(|e| e.into_inner());
    let wall = rt.wall_clock();
    clock.advance(wall, Instant::now())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    const HOUR: Duration = Duration::from_secs(3600);

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000 + secs)
    }

    #[test]
    fn a_wall_clock_set_back_does_not_stop_protocol_time() {
        let mut c = ProtocolClock::new();
        let m0 = Instant::now();
        assert_eq!(c.advance(at(0), m0), at(0));
        // Two seconds later the wall clock is set back an hour: time still moves on by two.
        let m1 = m0 + Duration::from_secs(2);
        assert_eq!(c.advance(at(2) - HOUR, m1), at(2));
        // And keeps moving at the monotonic rate while the wall clock stays behind.
        let m2 = m1 + Duration::from_secs(3);
        assert_eq!(c.advance(at(5) - HOUR, m2), at(5));
    }

    #[test]
    fn a_wall_clock_set_forward_or_a_suspend_is_followed() {
        let mut c = ProtocolClock::new();
        let m0 = Instant::now();
        c.advance(at(0), m0);
        // Suspended for an hour: the monotonic clock moved one second, the wall clock an hour.
        let m1 = m0 + Duration::from_secs(1);
        assert_eq!(c.advance(at(0) + HOUR, m1), at(0) + HOUR);
        // From there it advances with the monotonic clock again.
        assert_eq!(
            c.advance(at(0) + HOUR, m1 + Duration::from_secs(4)),
            at(4) + HOUR
        );
    }

    #[test]
    fn readings_out_of_order_never_move_time_back() {
        let mut c = ProtocolClock::new();
        let m0 = Instant::now();
        let m1 = m0 + Duration::from_secs(5);
        let t1 = c.advance(at(5), m1);
        // A reading taken earlier (another thread) arrives late.
        let t2 = c.advance(at(0), m0);
        assert!(t2 >= t1);
        // The base stayed at the later instant: nothing is counted twice.
        assert_eq!(c.advance(at(0), m1 + Duration::from_secs(1)), at(6));
    }

    #[test]
    fn protocol_time_is_non_decreasing() {
        let rt = crate::TokioRuntime;
        let mut last = protocol_time(&rt);
        for _ in 0..1000 {
            let t = protocol_time(&rt);
            assert!(t >= last);
            last = t;
        }
    }
}
