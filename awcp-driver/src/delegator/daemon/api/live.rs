//! A delegation's live events (`GET /delegation/{id}/events`).

use awcp_proto::{DelegationId, DelegationState, DelegatorEvent, ErrorInfo};
use serde::{Deserialize, Serialize};

use crate::delegator::Transfer;

/// One live event of a delegation (`GET /delegation/{id}/events`, one SSE `data:` object
/// each), as `awcp` shows it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum LiveEvent {
    /// The delegation entered `state`.
    State {
        /// The new state.
        state: String,
    },
    /// The executor reported progress.
    Progress {
        /// What it said.
        #[serde(default)]
        message: Option<String>,
        /// Its progress figure, if any.
        #[serde(default)]
        progress: Option<f64>,
    },
    /// A snapshot arrived or changed status.
    Snapshot {
        /// Which.
        #[serde(rename = "snapshotId")]
        snapshot_id: String,
        /// Its status.
        status: String,
    },
    /// Bytes moved (an archive sent, a snapshot received).
    Transfer {
        /// What moved.
        what: String,
        /// How many bytes.
        bytes: u64,
    },
    /// The executor's event stream broke; the delegator reconnects.
    ConnectionLost {
        /// Why it broke.
        #[serde(default)]
        reason: Option<String>,
        /// When the next attempt is, in milliseconds.
        #[serde(rename = "retryInMs", default)]
        retry_in_ms: u64,
    },
    /// The executor broke the protocol.
    PeerMisbehaved {
        /// What it did.
        reason: String,
    },
    /// The delegation ended (the last event of a stream).
    Ended {
        /// Its final state.
        state: String,
        /// Why it failed, if it did.
        #[serde(default)]
        error: Option<ErrorInfo>,
    },
    /// An event a newer daemon sends that this client does not know.
    #[serde(other)]
    Unknown,
}

impl LiveEvent {
    /// The live event of an engine event, with the delegation it is about; `None` for what
    /// is not news to a person (a forgotten record).
    pub fn of(ev: &DelegatorEvent) -> Option<(&DelegationId, LiveEvent)> {
        Some(match ev {
            DelegatorEvent::StateChanged { id, to, .. } => (
                id,
                LiveEvent::State {
                    state: to.as_str().into(),
                },
            ),
            DelegatorEvent::Progress {
                id,
                message,
                progress,
            } => (
                id,
                LiveEvent::Progress {
                    message: message.clone(),
                    progress: *progress,
                },
            ),
            DelegatorEvent::Snapshot {
                id,
                snapshot_id,
                status,
            } => (
                id,
                LiveEvent::Snapshot {
                    snapshot_id: snapshot_id.as_str().into(),
                    status: status.as_str().into(),
                },
            ),
            DelegatorEvent::ConnectionLost {
                id,
                reason,
                retry_in,
            } => (
                id,
                LiveEvent::ConnectionLost {
                    reason: reason.clone(),
                    retry_in_ms: u64::try_from(retry_in.as_millis()).unwrap_or(u64::MAX),
                },
            ),
            DelegatorEvent::PeerMisbehaved { id, reason } => (
                id,
                LiveEvent::PeerMisbehaved {
                    reason: reason.to_string(),
                },
            ),
            DelegatorEvent::Ended {
                id, state, error, ..
            } => (id, LiveEvent::ended(*state, error.as_deref())),
            DelegatorEvent::Forgotten { .. } => return None,
        })
    }

    /// The end of a delegation in `state`.
    pub fn ended(state: DelegationState, error: Option<&ErrorInfo>) -> Self {
        LiveEvent::Ended {
            state: state.as_str().into(),
            error: error.cloned(),
        }
    }

    /// A transfer as a live event.
    pub fn transfer(t: &Transfer) -> Self {
        LiveEvent::Transfer {
            what: t.what.to_string(),
            bytes: t.bytes,
        }
    }
}
