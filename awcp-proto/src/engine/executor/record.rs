//! The durable record of an assignment ([`AssignmentRecord`], journalled by the driver) and
//! what a restarted executor does with the records its predecessor left.
//!
//! ## Versions
//! * **0** (no `version` field): the format before records were types. Records from before
//!   `allocated`/`released` were journalled were written after allocation (both default to
//!   `true`); records from before credentials were digested carry the clear-text
//!   `credential` (bound to headers).
//! * **1** ([`RECORD_VERSION`]): `version` added; the fields are otherwise those of 0.
//!
//! A record of a newer version than this build understands is skipped (never half-read) and
//! reported as [`AssignmentRecordError::TooNew`], so the driver can leave it on disk for the
//! release that wrote it.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::engine::{Journaling, TaskHandle, TaskOutcome};
use crate::error::{ErrorCode, ErrorInfo};
use crate::id::DelegationId;
use crate::state::{AssignmentMachine, AssignmentState, AssignmentTransition};
use crate::time::Timestamp;
use crate::wire::{Dialect, DoneEvent, Message, TaskEvent, TaskEventKind, TransportKind};

use super::assignment::{Assignment, ExecutorTimer as Timer, Phase};
use super::auth::{Binding, BoundCredential, SecretDigest};
use super::{Executor, ExecutorEvent, ExecutorOutput};

/// The record version this build writes.
pub const RECORD_VERSION: u32 = 1;

fn yes() -> bool {
    true
}

/// Why a journal record was not restored ([`Executor::restore_records`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AssignmentRecordError {
    /// Not an assignment record this build can read (a required field is missing, has the
    /// wrong type, or names an unknown state or an undecodable INVITE).
    #[error("malformed assignment record: {0}")]
    Malformed(String),
    /// Written by a newer executor: left alone, never half-read.
    #[error("assignment record version {0} is newer than this executor understands")]
    TooNew(u32),
}

/// One assignment's journal record (JSON; field names as written since version 0).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AssignmentRecord {
    /// Format version (absent in version 0).
    #[serde(default)]
    pub version: u32,
    /// The delegation id.
    pub id: String,
    /// The INVITE as received (without its credential), encoded in its dialect. Shared: it
    /// never changes, and a record is taken at every journaled step.
    pub invite: crate::wire::JsonText,
    /// `reference` or `seed`.
    pub dialect: String,
    /// The spec state (`pending`, `active`, `completed`, `error`).
    pub state: String,
    /// The work directory.
    pub work_dir: String,
    /// What verifies the bound credential; never the secret itself.
    #[serde(default)]
    pub auth: Option<RecordedAuth>,
    /// Version 0 before digests: the clear-text credential (read, never written).
    #[serde(default, skip_serializing)]
    pub credential: Option<String>,
    /// Retention of the result.
    #[serde(default)]
    pub retention_ms: Option<u64>,
    /// Lease end (Unix ms).
    #[serde(default)]
    pub expires_at: Option<u64>,
    /// When it ended (Unix ms).
    #[serde(default)]
    pub completed_at: Option<u64>,
    /// Whether the work directory was allocated (absent: yes).
    #[serde(default = "yes")]
    pub allocated: bool,
    /// Whether everything is released (absent: yes).
    #[serde(default = "yes")]
    pub released: bool,
    /// The transport that set the workspace up.
    #[serde(default)]
    pub transport: Option<String>,
    /// The running task's OS handle.
    #[serde(default)]
    pub task: Option<String>,
    /// The error, if it failed.
    #[serde(default)]
    pub error: Option<ErrorInfo>,
    /// The task's outcome, if it succeeded.
    #[serde(default)]
    pub outcome: Option<RecordedOutcome>,
    /// A URL-mode snapshot event (reference dialect); inline bytes are never recorded.
    #[serde(default)]
    pub snapshot_event: Option<serde_json::Value>,
    /// The id of the snapshot captured to be sent inline, whose bytes are not recorded: a
    /// restarted executor then reports the result lost (`TASK_FAILED`) rather than a completed
    /// task without it, which a delegator would read as a task that changed nothing. Absent:
    /// none (or a record of an earlier release, restored as before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline_snapshot_id: Option<String>,
}

/// The digest and binding of the credential an INVITE was authenticated with.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedAuth {
    /// SHA-256 of the secret, hex.
    pub sha256: String,
    /// `header` or `delegation_id`.
    pub binding: String,
}

/// A task outcome in a record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedOutcome {
    /// Summary.
    #[serde(default)]
    pub summary: String,
    /// Highlights.
    #[serde(default)]
    pub highlights: Vec<String>,
}

impl AssignmentRecord {
    /// Reads a record of any known version (migrating older ones, see the module docs).
    pub fn from_json(v: &serde_json::Value) -> Result<AssignmentRecord, AssignmentRecordError> {
        let version = v
            .get("version")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0);
        if version > u64::from(RECORD_VERSION) {
            return Err(AssignmentRecordError::TooNew(
                u32::try_from(version).unwrap_or(u32::MAX),
            ));
        }
        let mut r: AssignmentRecord = serde_json::from_value(v.clone())
            .map_err(|e| AssignmentRecordError::Malformed(e.to_string()))?;
        // 0 → 1: a clear-text credential becomes its digest, bound to headers (as version 0
        // required one on every request).
        if r.auth.is_none() {
            if let Some(c) = r.credential.take() {
                r.auth = Some(RecordedAuth {
                    sha256: SecretDigest::of(&c).to_hex(),
                    binding: Binding::Header.as_str().to_owned(),
                });
            }
        }
        r.credential = None;
        r.version = RECORD_VERSION;
        Ok(r)
    }

    /// [`AssignmentRecord::from_json`] without the reason: `None` if the record does not
    /// decode or is of a newer version.
    pub fn from_value(v: &serde_json::Value) -> Option<AssignmentRecord> {
        AssignmentRecord::from_json(v).ok()
    }

    fn bound(&self) -> Option<BoundCredential> {
        let a = self.auth.as_ref()?;
        Some(BoundCredential {
            digest: SecretDigest::from_hex(&a.sha256)?,
            binding: Binding::parse(&a.binding)?,
        })
    }
}

impl ExecutorEvent {
    /// The assignment the event is about.
    pub fn delegation_id(&self) -> &DelegationId {
        match self {
            ExecutorEvent::InviteReceived { id, .. }
            | ExecutorEvent::StateChanged { id, .. }
            | ExecutorEvent::RecordChanged { id }
            | ExecutorEvent::Ended { id, .. }
            | ExecutorEvent::Forgotten { id }
            | ExecutorEvent::PeerMisbehaved { id, .. } => id,
        }
    }
}

impl ExecutorOutput {
    /// The assignment whose record the journal writes or removes for this output (an event
    /// whose [`ExecutorOutput::journaling`] is [`Journaling::Write`] or
    /// [`Journaling::Remove`]): written if the engine still has it
    /// ([`Executor::assignment_record`]), removed if not.
    pub fn journaled(&self) -> Option<&DelegationId> {
        match (self, self.journaling()) {
            (ExecutorOutput::Event(ev), Journaling::Write | Journaling::Remove) => {
                Some(ev.delegation_id())
            }
            _ => None,
        }
    }

    /// What the journal does for this output before it is executed (see [`Journaling`]): an
    /// event that changes an assignment's record writes it, without a sync; every output the
    /// delegator sees (a response, a stream event or its end) or that creates, changes or
    /// deletes files or processes first makes every record written since durable.
    pub fn journaling(&self) -> Journaling {
        match self {
            ExecutorOutput::Event(ExecutorEvent::InviteReceived { .. })
            | ExecutorOutput::Event(ExecutorEvent::StateChanged { .. })
            | ExecutorOutput::Event(ExecutorEvent::RecordChanged { .. })
            | ExecutorOutput::Event(ExecutorEvent::Ended { .. }) => Journaling::Write,
            ExecutorOutput::Event(ExecutorEvent::Forgotten { .. }) => Journaling::Remove,
            ExecutorOutput::Event(ExecutorEvent::PeerMisbehaved { .. }) => Journaling::None,
            // Seen by the delegator.
            ExecutorOutput::Respond { .. }
            | ExecutorOutput::StreamEvent { .. }
            | ExecutorOutput::CloseStream { .. }
            // Create, change or delete files or processes that only a record leads a
            // restarted executor to (or that an older record still names).
            | ExecutorOutput::AllocateWorkDir { .. }
            | ExecutorOutput::SetupTransport { .. }
            | ExecutorOutput::RunTask { .. }
            | ExecutorOutput::StopTask { .. }
            | ExecutorOutput::CaptureSnapshot { .. }
            | ExecutorOutput::Release { .. }
            | ExecutorOutput::RemoveEmptyWorkDir { .. }
            | ExecutorOutput::EndTask { .. }
            | ExecutorOutput::DropSnapshot { .. } => Journaling::Sync,
        }
    }
}

impl Executor {
    /// The typed journal record of one assignment; `None` for unknown ids. Inline snapshots
    /// are not recorded, only their id (their bytes can be many MB; a file the driver streams
    /// them from is not kept across a restart); URL-mode snapshot events are.
    pub fn assignment_record(&self, id: &DelegationId) -> Option<AssignmentRecord> {
        let a = self.assignments.get(id)?;
        let captured = a
            .snapshot
            .as_deref()
            .and_then(super::assignment::snapshot_of);
        let inline = captured.filter(|s| s.data.base64.is_some() || s.data.local_file.is_some());
        let snapshot_event = a
            .snapshot
            .as_ref()
            .filter(|_| captured.is_some() && inline.is_none())
            .map(|ev| crate::wire::event_to_value(ev, Dialect::Reference));
        let inline_snapshot_id = inline.map(|s| s.snapshot_id.to_string());
        Some(AssignmentRecord {
            version: RECORD_VERSION,
            id: id.as_str().to_owned(),
            invite: a
                .invite_record
                .get_or_init(|| {
                    crate::wire::JsonText::of_message_ref(
                        crate::wire::encode::MessageRef::Invite(&a.invite),
                        a.dialect,
                    )
                })
                .clone(),
            dialect: if a.dialect == Dialect::Seed {
                "seed"
            } else {
                "reference"
            }
            .to_owned(),
            state: a.state().as_str().to_owned(),
            work_dir: a.work_dir.clone(),
            auth: a.auth.map(|b| RecordedAuth {
                sha256: b.digest.to_hex(),
                binding: b.binding.as_str().to_owned(),
            }),
            credential: None,
            retention_ms: Some(u64::try_from(a.retention.as_millis()).unwrap_or(u64::MAX)),
            expires_at: a.expires_at.map(Timestamp::as_unix_millis),
            completed_at: a.completed_at.map(Timestamp::as_unix_millis),
            allocated: a.phase.allocated(),
            released: a.released(),
            transport: Some(a.transport.as_str().to_owned()),
            task: a.phase.task().map(|t| t.0.clone()),
            error: a.error.clone(),
            outcome: a.outcome.as_ref().map(|o| RecordedOutcome {
                summary: o.summary.clone(),
                highlights: o.highlights.clone(),
            }),
            snapshot_event,
            inline_snapshot_id,
        })
    }

    /// [`Executor::assignment_record`] as JSON, for a journal (atomic write-then-rename is the
    /// driver's job).
    pub fn record(&self, id: &DelegationId) -> Option<serde_json::Value> {
        serde_json::to_value(self.assignment_record(id)?).ok()
    }

    /// Restores assignments from journal records after a restart. Terminal ones are kept for
    /// late subscribers and `GET …/result` until ack or retention; ones that were pending or
    /// active are failed cleanly (`TASK_FAILED`, "the executor restarted") so a reconnecting
    /// delegator learns what happened instead of `NOT_FOUND`, and so are completed ones whose
    /// result was to be sent inline (not kept across a restart): a completed task without its
    /// snapshot would read as one that changed nothing. What a record says the crashed
    /// predecessor still held is cleaned up through the usual outputs: a recorded task is ended
    /// ([`ExecutorOutput::EndTask`], answered with `TaskFinished`), then a recorded work
    /// directory (`{work_root}/{id}` of this configuration only) is released
    /// ([`ExecutorOutput::Release`]); each ends with [`super::ExecutorEvent::Ended`]. Returns
    /// how many records were restored; see [`Executor::restore_records`] for which.
    pub fn restore(&mut self, now: Timestamp, records: &[serde_json::Value]) -> usize {
        self.restore_records(now, records)
            .iter()
            .filter(|r| r.is_ok())
            .count()
    }

    /// [`Executor::restore`], answering for each record (in order) the id it restored or why
    /// it did not. A driver journals back only the restored ones: a record that was not
    /// restored (say, written by a newer release after a downgrade) is the only copy of what
    /// it describes, so it stays on disk as it is.
    pub fn restore_records(
        &mut self,
        now: Timestamp,
        records: &[serde_json::Value],
    ) -> Vec<Result<DelegationId, AssignmentRecordError>> {
        self.tick(now);
        records
            .iter()
            .map(|v| {
                let r = AssignmentRecord::from_json(v)?;
                self.restore_one(now, &r)
            })
            .collect()
    }

    fn restore_one(
        &mut self,
        now: Timestamp,
        r: &AssignmentRecord,
    ) -> Result<DelegationId, AssignmentRecordError> {
        let bad = |what: String| AssignmentRecordError::Malformed(what);
        let id = DelegationId::new(&r.id).map_err(|e| bad(format!("id {:?}: {e}", r.id)))?;
        let (Message::Invite(invite), dialect) =
            crate::wire::decode_message(r.invite.get().as_bytes())
                .map_err(|e| bad(format!("invite: {e}")))?
        else {
            return Err(bad("invite: not an INVITE".to_owned()));
        };
        let state =
            AssignmentState::parse(&r.state).ok_or_else(|| bad(format!("state {:?}", r.state)))?;
        let outcome = r.outcome.clone().map(|o| TaskOutcome {
            summary: o.summary,
            highlights: o.highlights,
        });
        let snapshot = r
            .snapshot_event
            .as_ref()
            .filter(|s| !s.is_null())
            .and_then(|s| serde_json::to_vec(s).ok())
            .and_then(|b| crate::wire::decode_event(&b).ok())
            .map(|(ev, _)| Arc::new(ev));
        let retention = Duration::from_millis(r.retention_ms.unwrap_or(604_800_000));
        // Completed, but its result was to be sent inline and is not kept: say it is lost.
        let result_lost = state == AssignmentState::Completed
            && snapshot.is_none()
            && r.inline_snapshot_id.is_some();
        let state = if result_lost {
            AssignmentState::Error
        } else {
            state
        };
        let mut machine = AssignmentMachine::restore(state);
        let mut error = r.error.clone();
        if result_lost {
            error = Some(ErrorInfo::new(
                ErrorCode::TaskFailed,
                "the executor restarted before the delegator received the task's result \
                 (sent inline, which is not kept across a restart); the result is lost",
            ));
        }
        let mut completed_at = r.completed_at.map(Timestamp::from_unix_millis);
        if state == AssignmentState::Idle {
            // Between rounds: every round's result was delivered; the restarted executor
            // closes the delegation (its `done` tells a reconnecting delegator).
            machine
                .apply(AssignmentTransition::Close)
                .map_err(|e| bad(format!("state {:?}: {e}", r.state)))?;
            completed_at = Some(now);
        } else if !state.is_terminal() {
            let event = if state == AssignmentState::Active {
                AssignmentTransition::TaskFail
            } else {
                AssignmentTransition::Cancel
            };
            machine
                .apply(event)
                .map_err(|e| bad(format!("state {:?}: {e}", r.state)))?;
            error = Some(ErrorInfo::new(
                ErrorCode::TaskFailed,
                "the executor restarted while the delegation was in flight; its work is lost",
            ));
            completed_at = Some(now);
        }
        let terminal_kind = match machine.state() {
            AssignmentState::Completed => {
                let o = outcome.clone().unwrap_or_default();
                let sid = snapshot
                    .as_deref()
                    .and_then(super::assignment::snapshot_of)
                    .map(|s| s.snapshot_id.clone());
                TaskEventKind::Done(DoneEvent {
                    summary: o.summary,
                    highlights: o.highlights,
                    snapshot_ids: sid.iter().cloned().collect(),
                    recommended_snapshot_id: sid,
                    result_base64: None,
                    result_local_file: None,
                })
            }
            AssignmentState::Pending
            | AssignmentState::Active
            | AssignmentState::Idle
            | AssignmentState::Error => TaskEventKind::Error(
                error
                    .clone()
                    .unwrap_or_else(|| ErrorInfo::new(ErrorCode::TaskFailed, "the task failed")),
            ),
        };
        let terminal_event = Arc::new(TaskEvent {
            delegation_id: id.clone(),
            timestamp: completed_at.unwrap_or(now),
            kind: terminal_kind,
        });
        let transport = r
            .transport
            .as_deref()
            .map(TransportKind::parse)
            .or_else(|| invite.transport.clone())
            .unwrap_or(TransportKind::Archive);
        let access = invite.lease.access_mode;
        let ttl = Duration::from_secs(invite.lease.ttl_seconds.min(self.config.max_ttl_seconds));
        let work_dir = r.work_dir.clone();
        let allocated = r.allocated;
        let mut released = r.released;
        if !released && work_dir != self.work_dir_for(&id) {
            // Only `{work_root}/{id}` of this configuration is ours to remove.
            tracing::warn!(delegation = %id, work_dir, "recorded work directory is outside the work root; left in place");
            released = true;
        }
        // An allocation in flight at the crash: the directory may exist, empty.
        let interrupted_allocation = !released && !allocated;
        let released = released || !allocated;
        let task = r.task.clone().map(TaskHandle);
        // What the crashed predecessor held: its task first, then its work directory.
        let phase = match (&task, released, interrupted_allocation) {
            (Some(t), _, _) => Phase::Stopping {
                task: Some(t.clone()),
                holds_work_dir: !released,
            },
            (None, false, _) => Phase::Idle,
            (None, true, true) => Phase::Releasing { unstopped: None },
            (None, true, false) => Phase::Released { unstopped: None },
        };
        // As admission agreed them.
        let features = crate::wire::Feature::agreed(&invite.features, &self.config.features);
        self.assignments.insert(
            id.clone(),
            Box::new(Assignment {
                rounds: features.contains(&crate::wire::Feature::MultiRound),
                round: 1,
                round_done: None,
                task_dir: None,
                round_task: None,
                upload_url: None,
                pushes_result: false,
                earlier: Default::default(),
                events: Default::default(),
                features,
                invite: std::sync::Arc::new(invite),
                invite_record: Default::default(),
                dialect,
                machine,
                phase,
                work_dir: work_dir.clone(),
                auth: r.bound(),
                transport,
                access,
                ttl,
                retention,
                invite_requests: Vec::new(),
                accept: None,
                started_at: None,
                expires_at: r.expires_at.map(Timestamp::from_unix_millis),
                release_error: None,
                subscribers: BTreeSet::new(),
                outcome,
                error,
                snapshot,
                acked: false,
                terminal_event: Some(terminal_event),
                completed_at,
                origin: None,
            }),
        );
        if let Some(handle) = task {
            self.push(ExecutorOutput::EndTask {
                id: id.clone(),
                handle,
            });
            self.core.timers.set(
                (id.clone(), Timer::StopGrace),
                now.saturating_add(self.config.stop_grace),
            );
        } else if !released {
            self.release(&id);
        } else if interrupted_allocation {
            self.push(ExecutorOutput::RemoveEmptyWorkDir {
                id: id.clone(),
                work_dir,
            });
            return Ok(id);
        }
        if !released {
            // The retention starts once the release is done (see `Released`).
            return Ok(id);
        }
        let until = completed_at
            .unwrap_or(now)
            .saturating_add(retention)
            .max(now);
        self.core.timers.set((id.clone(), Timer::Retention), until);
        Ok(id)
    }
}
