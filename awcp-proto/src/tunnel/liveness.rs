//! Keepalive and reconnect timing: when to ping, when a silent connection is dead, and how long
//! an executor waits before dialling again.
//!
//! **Keepalive** (both machines, one connection each): every frame received, of any kind,
//! WebSocket pongs included, is proof of life. A side that has heard nothing for
//! [`KeepaliveConfig::ping_interval`] (and has not pinged in that time) pings: a `PING{id}`
//! under the extension (answered by `PONG{id}`), a WebSocket ping control frame to a reference
//! peer (its WebSocket library answers with a pong by itself; the reference's own `PING`
//! frame is never answered). A side that has heard nothing for
//! [`KeepaliveConfig::idle_timeout`] closes the connection as dead.
//!
//! **Back-off** ([`BackoffConfig`]): after a failed attempt or a lost connection the executor
//! waits `d/2 + random(0..=d/2)` with `d = min(max, initial × 2^(attempt−1))`, the random part
//! from the seed the caller gave, so that executors cut off together do not come back
//! together. The count starts again at the next `AUTH_OK`.

use core::time::Duration;

use engine_basics::ids::SplitMix64;

use crate::time::Timestamp;

/// Keepalive timing of one connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeepaliveConfig {
    /// Ping after this long without hearing anything (default 15 s: below the 30–60 s idle
    /// timeouts of common proxies and NATs).
    pub ping_interval: Duration,
    /// Declare the connection dead after this long without hearing anything (default 45 s:
    /// three pings unanswered).
    pub idle_timeout: Duration,
}

impl Default for KeepaliveConfig {
    fn default() -> Self {
        KeepaliveConfig {
            ping_interval: Duration::from_secs(15),
            idle_timeout: Duration::from_secs(45),
        }
    }
}

/// What a keepalive deadline asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Keepalive {
    /// Nothing is due.
    Nothing,
    /// Send a ping with this id.
    Ping(u64),
    /// Silent for too long: the connection is dead.
    Dead,
}

/// One connection's keepalive state.
#[derive(Clone, Debug)]
pub(crate) struct Liveness {
    config: KeepaliveConfig,
    last_heard: Timestamp,
    last_ping: Timestamp,
    next_id: u64,
    outstanding: Option<(u64, Timestamp)>,
    rtt: Option<Duration>,
}

impl Liveness {
    /// A connection just opened at `now` (counts as heard).
    pub(crate) fn new(config: KeepaliveConfig, now: Timestamp) -> Self {
        Liveness {
            config,
            last_heard: now,
            last_ping: now,
            next_id: 1,
            outstanding: None,
            rtt: None,
        }
    }

    /// Something arrived at `now`.
    pub(crate) fn heard(&mut self, now: Timestamp) {
        self.last_heard = self.last_heard.max(now);
    }

    /// A `PONG{id}` arrived at `now`.
    pub(crate) fn pong(&mut self, id: u64, now: Timestamp) {
        if let Some((sent_id, at)) = self.outstanding {
            if sent_id == id {
                self.rtt = Some(now.saturating_duration_since(at));
                self.outstanding = None;
            }
        }
    }

    /// The latest round-trip time a `PONG` measured.
    pub(crate) fn rtt(&self) -> Option<Duration> {
        self.rtt
    }

    /// When [`Liveness::poll`] has something to do next.
    pub(crate) fn deadline(&self) -> Timestamp {
        let ping_at = self
            .last_heard
            .max(self.last_ping)
            .saturating_add(self.config.ping_interval);
        let dead_at = self.last_heard.saturating_add(self.config.idle_timeout);
        ping_at.min(dead_at)
    }

    /// What is due at `now`.
    pub(crate) fn poll(&mut self, now: Timestamp) -> Keepalive {
        if now >= self.last_heard.saturating_add(self.config.idle_timeout) {
            return Keepalive::Dead;
        }
        let ping_at = self
            .last_heard
            .max(self.last_ping)
            .saturating_add(self.config.ping_interval);
        if now < ping_at {
            return Keepalive::Nothing;
        }
        let id = self.next_id;
        self.next_id += 1;
        self.last_ping = now;
        self.outstanding = Some((id, now));
        Keepalive::Ping(id)
    }
}

/// The executor's reconnect policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackoffConfig {
    /// The delay before the first retry, before jitter (default 1 s).
    pub initial: Duration,
    /// The most any delay grows to, before jitter (default 60 s).
    pub max: Duration,
    /// Give up after this many consecutive failed attempts; `None` (the default) never gives
    /// up. (The reference gives up after 5, at 3 s × attempt.)
    pub max_attempts: Option<u32>,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        BackoffConfig {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(60),
            max_attempts: None,
        }
    }
}

impl BackoffConfig {
    /// The delay before retry number `attempt` (1 for the first retry): half the exponential
    /// delay, plus a random part of up to the other half drawn from `rng`.
    pub(crate) fn delay(&self, attempt: u32, rng: &mut SplitMix64) -> Duration {
        let base = u64::try_from(self.initial.as_millis()).unwrap_or(u64::MAX);
        let cap = u64::try_from(self.max.as_millis()).unwrap_or(u64::MAX);
        let shift = attempt.saturating_sub(1).min(63);
        let full = base.checked_shl(shift).filter(|d| d >> shift == base);
        let full = full.unwrap_or(u64::MAX).min(cap);
        let half = full / 2;
        let jitter = rng.next_u64() % (full - half + 1);
        Duration::from_millis(half + jitter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: u64) -> Timestamp {
        Timestamp::from_unix_millis(s * 1000)
    }

    #[test]
    fn a_silent_connection_is_pinged_then_declared_dead() {
        let mut l = Liveness::new(KeepaliveConfig::default(), at(0));
        assert_eq!(l.deadline(), at(15));
        assert_eq!(l.poll(at(14)), Keepalive::Nothing);
        assert_eq!(l.poll(at(15)), Keepalive::Ping(1));
        assert_eq!(l.deadline(), at(30));
        l.heard(at(20));
        l.pong(1, at(20));
        assert_eq!(l.rtt(), Some(Duration::from_secs(5)));
        assert_eq!(l.deadline(), at(35));
        assert_eq!(l.poll(at(35)), Keepalive::Ping(2));
        assert_eq!(l.poll(at(50)), Keepalive::Ping(3));
        assert_eq!(l.deadline(), at(65));
        assert_eq!(l.poll(at(65)), Keepalive::Dead);
    }

    #[test]
    fn back_off_doubles_with_jitter_up_to_the_cap() {
        let cfg = BackoffConfig::default();
        let mut rng = SplitMix64::new(7);
        for attempt in 1..=40u32 {
            let d = cfg.delay(attempt, &mut rng).as_millis() as u64;
            let full = (1000u64 << (attempt - 1).min(20)).min(60_000);
            assert!(d >= full / 2 && d <= full, "attempt {attempt}: {d}");
        }
        assert!(cfg.delay(u32::MAX, &mut rng) <= cfg.max);
    }
}
