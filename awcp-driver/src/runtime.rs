//! The runtime trait the driver core is generic over: [`agent_rt::Runtime`] (spawn, blocking
//! pool, sleep, TCP, wall clock) plus the AWCP view of the protocol clock. Every `agent_rt::Runtime`
//! (tokio, smol) is an AWCP [`Runtime`].

use std::time::UNIX_EPOCH;

use awcp_proto::Timestamp;

pub use agent_rt::runtime::{blocking, BorrowedFuture, BoxFuture};

/// What the driver core needs from an async runtime: [`agent_rt::Runtime`], with the wall
/// clock as a protocol timestamp.
pub trait Runtime: agent_rt::Runtime {
    /// The protocol clock as a protocol timestamp ([`agent_rt::clock::protocol_time`]: the
    /// wall clock followed forward, never backward, so a clock set back stalls no timer).
    fn now(&self) -> Timestamp {
        let ms = agent_rt::clock::protocol_time(self)
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        Timestamp::from_unix_millis(ms)
    }
}

impl<T: agent_rt::Runtime> Runtime for T {}

/// Sleeps until `at` (immediately if it is past).
pub fn sleep_until<R: Runtime>(rt: &R, at: Timestamp) -> BoxFuture<()> {
    let d = at.saturating_duration_since(rt.now());
    rt.sleep(d)
}
