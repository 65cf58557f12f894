//! The broker link as the group engines see it: up, or lost and to be connected again at a
//! time this back-off decides (at once after a loss, then 100 ms after a failed attempt,
//! doubling to at most 2 s; back to the start once a connection comes up). The driver asks
//! [`BrokerLink::connect_due`] before it connects and sleeps until the engine's
//! `poll_timeout`, which includes [`BrokerLink::deadline`].

use std::time::Duration;

use crate::time::Timestamp;

/// The wait after the first failed attempt.
pub const FIRST_RETRY: Duration = Duration::from_millis(100);
/// The longest wait between two attempts.
pub const MAX_RETRY: Duration = Duration::from_secs(2);

/// What a group engine's driver feeds it about its broker link, as the input of the canonical
/// drive loop ([`crate::drive`]): the engines ([`GroupLeader`](crate::group::GroupLeader),
/// [`GroupMember`](crate::group::GroupMember)) take it through
/// [`Engine::handle`](crate::drive::Engine::handle).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LinkInput {
    /// A message arrived on `queue` (the engine tells its own queues apart: a leader's inbox
    /// from its group queue).
    Delivery {
        /// The queue it was consumed from.
        queue: String,
        /// The message body.
        body: Vec<u8>,
    },
    /// The connection came back, everything declared again.
    Reconnected,
    /// The connection was lost.
    Lost,
    /// An attempt to connect again failed.
    ConnectFailed,
}

/// The link's state and its reconnect timer (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerLink {
    up: bool,
    retry_at: Option<Timestamp>,
    delay: Duration,
}

impl Default for BrokerLink {
    fn default() -> Self {
        BrokerLink::new()
    }
}

impl BrokerLink {
    /// A link that is up (engines are made once the driver connected).
    pub fn new() -> Self {
        BrokerLink {
            up: true,
            retry_at: None,
            delay: FIRST_RETRY,
        }
    }

    /// The link was lost at `now`: try again at once.
    pub fn lost(&mut self, now: Timestamp) {
        if self.up {
            self.up = false;
            self.retry_at = Some(now);
            self.delay = FIRST_RETRY;
        }
    }

    /// An attempt to connect failed at `now`: the next one after the back-off.
    pub fn attempt_failed(&mut self, now: Timestamp) {
        self.up = false;
        self.retry_at = Some(now.saturating_add(self.delay));
        self.delay = (self.delay * 2).min(MAX_RETRY);
    }

    /// A connection came up.
    pub fn connected(&mut self) {
        *self = BrokerLink::new();
    }

    /// Whether the link is up.
    pub fn is_up(&self) -> bool {
        self.up
    }

    /// Whether to try to connect at `now`.
    pub fn connect_due(&self, now: Timestamp) -> bool {
        !self.up && self.retry_at.is_some_and(|at| at <= now)
    }

    /// When the next attempt is due, while the link is down.
    pub fn deadline(&self) -> Option<Timestamp> {
        if self.up {
            None
        } else {
            self.retry_at
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_back_off_from_100_ms_to_2_s_and_start_again_once_connected() {
        let t0 = Timestamp::UNIX_EPOCH.saturating_add(Duration::from_secs(1000));
        let mut l = BrokerLink::new();
        assert!(l.is_up());
        assert_eq!((l.deadline(), l.connect_due(t0)), (None, false));
        l.lost(t0);
        assert_eq!(l.deadline(), Some(t0));
        assert!(l.connect_due(t0));
        let mut now = t0;
        let mut waits = Vec::new();
        for _ in 0..7 {
            l.attempt_failed(now);
            let next = l.deadline().unwrap();
            assert!(!l.connect_due(now), "due again before its back-off");
            waits.push(next.saturating_duration_since(now).as_millis());
            now = next;
            assert!(l.connect_due(now));
        }
        assert_eq!(waits, [100, 200, 400, 800, 1600, 2000, 2000]);
        // A second loss report while down changes nothing.
        l.attempt_failed(now);
        let next = l.deadline();
        l.lost(now);
        assert_eq!(l.deadline(), next);
        l.connected();
        assert_eq!((l.is_up(), l.deadline()), (true, None));
        l.lost(now);
        l.attempt_failed(now);
        assert_eq!(l.deadline(), Some(now.saturating_add(FIRST_RETRY)));
    }
}
