//! The executor's event stream and the result fallback: `status`, `snapshot`, `done`, `error`,
//! reconnects with back-off, and `GET …/result` once reconnects are exhausted.

use super::*;

impl Delegator {
    pub(super) fn on_stream_closed(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        reason: Option<String>,
    ) -> Result<(), UsageError> {
        let attempts = self.config.sse_reconnect_attempts;
        let backoff = self.config.sse_backoff;
        let d = self.get_mut(id)?;
        let state = d.state();
        // Only an accepted, started or running delegation uses a stream (a finished one closed
        // it, and the executor that said its last word is not listened to again).
        let heard = d.phase.heard_terminal();
        let Some((stream, stream_failures)) = d.phase.stream_mut() else {
            return Ok(());
        };
        if *stream == Stream::Closed {
            return Ok(());
        }
        *stream = Stream::Closed;
        if heard {
            return Ok(());
        }
        *stream_failures += 1;
        let failures = *stream_failures;
        tracing::debug!(delegation = %id, failures, reason = reason.as_deref().unwrap_or(""), "event stream closed");
        if failures <= attempts {
            let wait = backoff * failures;
            self.core
                .timers
                .set((id.clone(), Timer::Reconnect), now.saturating_add(wait));
            self.core
                .outputs
                .push_back(DelegatorOutput::Event(DelegatorEvent::ConnectionLost {
                    id: id.clone(),
                    reason,
                    retry_in: wait,
                }));
        } else if state == DelegationState::Accepted {
            self.abandon(
                now,
                id,
                ErrorInfo::new(
                    ErrorCode::SseFailed,
                    format!(
                        "could not open the event stream: {}",
                        reason.unwrap_or_else(|| "closed".into())
                    ),
                ),
            );
        } else {
            let peer = d.peer.clone();
            self.core.outputs.push_back(DelegatorOutput::FetchResult {
                id: id.clone(),
                peer,
            });
        }
        Ok(())
    }

    pub(super) fn on_task_event(
        &mut self,
        now: Timestamp,
        event: TaskEvent,
        event_id: Option<u64>,
    ) -> Result<(), UsageError> {
        let id = event.delegation_id.clone();
        let d = self.get_mut(&id)?;
        if let Some((stream @ Stream::Opening, _)) = d.phase.stream_mut() {
            *stream = Stream::Open;
        }
        let state = d.state();
        if !d.phase.start_sent() {
            return Ok(()); // events before START are noise (or a previous incarnation)
        }
        if let Some(n) = event_id {
            // A resumed stream (WIRE.md §4.6): what was taken already is not taken twice.
            match d.last_event_id {
                Some(last) if n <= last => {
                    tracing::debug!(delegation = %id, event_id = n, last, "duplicate event skipped");
                    return Ok(());
                }
                Some(last) if n > last + 1 => {
                    // Events were evicted at the executor: a missed snapshot is fetched with
                    // `GET …/result` when `done` names it (see `on_done`).
                    tracing::info!(delegation = %id, event_id = n, last, "events missed while the stream was down");
                }
                _ => {}
            }
            d.last_event_id = Some(n);
        }
        match event.kind {
            TaskEventKind::Status(s) => {
                if let Some((_, failures)) = d.phase.stream_mut() {
                    *failures = 0;
                }
                if let Some(m) = &s.message {
                    d.last_progress = Some(clip(m, MAX_PROGRESS_BYTES).to_owned());
                }
                if state == DelegationState::Started {
                    self.setup_complete(now, &id);
                }
                self.core
                    .outputs
                    .push_back(DelegatorOutput::Event(DelegatorEvent::Progress {
                        id: id.clone(),
                        message: s.message,
                        progress: s.progress,
                    }));
            }
            TaskEventKind::Snapshot(snap) => {
                if state == DelegationState::Started {
                    self.setup_complete(now, &id);
                }
                self.on_snapshot(now, &id, snap);
            }
            TaskEventKind::Done(done) => self.on_done(now, &id, done),
            TaskEventKind::RoundDone(r) => self.on_round_done(now, &id, r),
            TaskEventKind::Error(e) => {
                self.get_mut(&id)?.phase.hear_terminal();
                if matches!(
                    state,
                    DelegationState::Started | DelegationState::Running | DelegationState::Idle
                ) {
                    self.receive_error(now, &id, e);
                }
                self.wind_down(now, &id);
            }
        }
        Ok(())
    }

    /// An error from the executor. Its own lease expiry (`EXPIRED`) expires the delegation
    /// where the table allows it, so both sides agree on `expired`.
    pub(super) fn receive_error(&mut self, now: Timestamp, id: &DelegationId, e: ErrorInfo) {
        let can_expire = self
            .delegations
            .get(id)
            .is_some_and(|d| d.machine.can(DelegationTransition::Expire));
        let event = if e.code == ErrorCode::Expired && can_expire {
            DelegationTransition::Expire
        } else {
            DelegationTransition::ReceiveError
        };
        self.transition(now, id, event, Some(e));
    }

    pub(super) fn setup_complete(&mut self, now: Timestamp, id: &DelegationId) {
        self.transition(now, id, DelegationTransition::SetupComplete, None);
        if self
            .delegations
            .get(id)
            .is_some_and(|d| d.asking_after_lease)
        {
            // Restored after the lease: the replay goes on to say how the task ended; the
            // setup grace timer decides if it does not.
            return;
        }
        self.core.timers.cancel(&(id.clone(), Timer::SetupGrace));
        if let Some(exp) = self.delegations.get(id).and_then(|d| d.expires_at) {
            if now >= exp {
                self.expire(now, id);
            } else {
                self.core.timers.set((id.clone(), Timer::Lease), exp);
            }
        }
    }

    /// The executor's `done` (or a result fetched instead): the outcome, then the announced
    /// snapshot if it is still missing, then winding down.
    pub(super) fn on_done(&mut self, now: Timestamp, id: &DelegationId, mut done: DoneEvent) {
        let Some(d) = self.delegations.get_mut(id) else {
            return;
        };
        d.phase.hear_terminal();
        let state = d.state();
        if state == DelegationState::Started {
            self.setup_complete(now, id);
        }
        if self.state(id) == Some(DelegationState::Idle) {
            // Between rounds: the executor closed the delegation itself (its idle time ran
            // out). The last round's outcome stays the result.
            if let Some(d) = self.delegations.get_mut(id) {
                if d.result.is_none() {
                    d.result = Some(TaskOutcome {
                        summary: std::mem::take(&mut done.summary),
                        highlights: std::mem::take(&mut done.highlights),
                    });
                }
            }
            self.core.timers.cancel(&(id.clone(), Timer::Idle));
            self.transition(now, id, DelegationTransition::ReceiveDone, None);
            self.wind_down(now, id);
            return;
        }
        if self.state(id) != Some(DelegationState::Running) {
            self.wind_down(now, id);
            return;
        }
        // [S]: the result archive rides on `done`; treat it as a recommended snapshot.
        // Taken, not copied: an inline result can be the size of the workspace (the driver
        // may have received it into a file instead).
        let inline = done.result_base64.take();
        let file = done.result_local_file.take();
        if inline.is_some() || file.is_some() {
            self.on_snapshot(
                now,
                id,
                SnapshotEvent {
                    snapshot_id: result_snapshot_id(),
                    summary: done.summary.clone(),
                    highlights: done.highlights.clone(),
                    data: ArchiveData {
                        base64: if file.is_some() { None } else { inline },
                        url: None,
                        local_file: file,
                        local_file_sha256: None,
                    },
                    checksum: None,
                    recommended: Some(true),
                    metadata: BTreeMap::new(),
                },
            );
        }
        let Some(d) = self.delegations.get_mut(id) else {
            return;
        };
        d.result = Some(TaskOutcome {
            summary: std::mem::take(&mut done.summary),
            highlights: std::mem::take(&mut done.highlights),
        });
        let wanted = done
            .recommended_snapshot_id
            .take()
            .or_else(|| done.snapshot_ids.pop());
        let live = d.req.transport.is_live();
        let need_fetch = match &wanted {
            Some(s) => {
                !live
                    && d.access == AccessMode::Rw
                    && d.req.snapshot_mode != SnapshotMode::Discard
                    && !d.snapshots.contains(s)
            }
            None => false,
        };
        let peer = d.peer.clone();
        self.transition(now, id, DelegationTransition::ReceiveDone, None);
        if need_fetch {
            if let Some(Phase::Finishing(f)) = self.delegations.get_mut(id).map(|d| &mut d.phase) {
                f.awaiting = wanted;
            }
            self.core.outputs.push_back(DelegatorOutput::FetchResult {
                id: id.clone(),
                peer,
            });
        }
        self.wind_down(now, id);
    }

    pub(super) fn on_result(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        result: Result<FetchedResult, RequestFailure>,
    ) -> Result<(), UsageError> {
        self.get_mut(id)?;
        if let Err(RequestFailure::Unusable(detail)) = &result {
            let reason = PeerMisbehavior::UnusableResult {
                detail: detail.clone(),
            };
            self.peer_misbehaved(id, reason);
        }
        let d = self.get_mut(id)?;
        let state = d.state();
        match result {
            Ok(FetchedResult::Completed { outcome, snapshot }) => {
                if let Some(snap) = snapshot {
                    if state == DelegationState::Started {
                        self.setup_complete(now, id);
                    }
                    // When re-fetching an announced snapshot, adopt the announced id.
                    let mut snap = *snap;
                    if let Some(awaited) = self.get_mut(id)?.phase.awaiting() {
                        snap.snapshot_id = awaited.clone();
                    }
                    self.on_snapshot(now, id, snap);
                }
                if matches!(
                    self.state(id),
                    Some(
                        DelegationState::Started | DelegationState::Running | DelegationState::Idle
                    )
                ) {
                    self.on_done(
                        now,
                        id,
                        DoneEvent {
                            summary: outcome.summary,
                            highlights: outcome.highlights,
                            snapshot_ids: Vec::new(),
                            recommended_snapshot_id: None,
                            result_base64: None,
                            result_local_file: None,
                        },
                    );
                } else {
                    let d = self.get_mut(id)?;
                    if let Some(sid) = d.phase.take_awaiting() {
                        d.result_error = Some(ErrorInfo::new(
                            ErrorCode::TransportError,
                            format!("the executor's result no longer carries snapshot {sid}"),
                        ));
                    }
                    self.wind_down(now, id);
                }
            }
            Ok(FetchedResult::Error(e)) => {
                d.phase.hear_terminal();
                if let Some(sid) = d.phase.take_awaiting() {
                    d.result_error = Some(ErrorInfo::new(
                        ErrorCode::TransportError,
                        format!(
                            "the executor announced snapshot {sid} but then reported an error: {e}"
                        ),
                    ));
                }
                if matches!(
                    state,
                    DelegationState::Started | DelegationState::Running | DelegationState::Idle
                ) {
                    self.receive_error(now, id, e);
                }
                self.wind_down(now, id);
            }
            Ok(FetchedResult::NotFound) => {
                if let Some(sid) = d.phase.take_awaiting() {
                    d.result_error = Some(ErrorInfo::new(
                        ErrorCode::NotFound,
                        format!("the executor announced snapshot {sid} but no longer has it"),
                    ));
                }
                if matches!(
                    state,
                    DelegationState::Started | DelegationState::Running | DelegationState::Idle
                ) {
                    d.phase.hear_terminal();
                    self.transition(
                        now,
                        id,
                        DelegationTransition::ReceiveError,
                        Some(ErrorInfo::new(
                            ErrorCode::NotFound,
                            "the executor no longer knows this delegation (restarted or purged)",
                        )),
                    );
                }
                self.wind_down(now, id);
            }
            Ok(FetchedResult::Running) | Ok(FetchedResult::NotApplicable) | Err(_) => {
                if let Some(sid) = d.phase.take_awaiting() {
                    // Could not get the announced snapshot; give up on it (without an ack, so
                    // the executor keeps it).
                    let why = match result {
                        Err(e) => e.to_string(),
                        Ok(_) => "the executor did not hand it out".into(),
                    };
                    d.result_error = Some(ErrorInfo::new(
                        ErrorCode::TransportError,
                        format!("could not fetch the announced snapshot {sid}: {why}"),
                    ));
                    self.wind_down(now, id);
                } else if !state.is_terminal() {
                    // Try the stream again after a while.
                    if let Some((_, failures)) = d.phase.stream_mut() {
                        *failures = 0;
                    }
                    let at = now.saturating_add(self.config.result_poll_interval);
                    self.core.timers.set((id.clone(), Timer::Reconnect), at);
                }
            }
        }
        Ok(())
    }
}

/// The longest progress message a delegation keeps for its view.
const MAX_PROGRESS_BYTES: usize = 1024;

/// `s` cut to at most `max` bytes, on a character boundary.
fn clip(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::delegator::tests::{drain, events, id, running, t};
    use crate::wire::{StatusEvent, TaskStatus};

    fn closed() -> DelegatorInput {
        DelegatorInput::EventStreamClosed {
            id: id(),
            reason: Some("reset".into()),
        }
    }

    #[test]
    fn a_closed_stream_is_reopened_after_a_growing_back_off_then_the_result_is_asked() {
        let cfg = DelegatorConfig::default();
        let mut d = running(SnapshotMode::Auto);
        let mut now = t(10);
        for attempt in 1..=cfg.sse_reconnect_attempts {
            d.handle(now, closed()).unwrap();
            // The application is told, with the delay of the next attempt.
            assert_eq!(
                drain(&mut d),
                vec![DelegatorOutput::Event(DelegatorEvent::ConnectionLost {
                    id: id(),
                    reason: Some("reset".into()),
                    retry_in: cfg.sse_backoff * attempt,
                })]
            );
            let (at, why) = d.poll_timeout().unwrap();
            assert_eq!(why, Timer::Reconnect);
            assert_eq!(at, now.saturating_add(cfg.sse_backoff * attempt));
            d.handle_timeout(at);
            assert!(matches!(
                drain(&mut d).as_slice(),
                [DelegatorOutput::OpenEventStream { .. }]
            ));
            now = at;
        }
        d.handle(now, closed()).unwrap();
        assert!(matches!(
            drain(&mut d).as_slice(),
            [DelegatorOutput::FetchResult { .. }]
        ));
    }

    #[test]
    fn an_unusable_result_answer_is_the_executors_fault_and_the_stream_is_tried_again() {
        let mut d = running(SnapshotMode::Auto);
        let result = Err(RequestFailure::Unusable("bad result body".into()));
        d.handle(t(10), DelegatorInput::ResultFetched { id: id(), result })
            .unwrap();
        let out = drain(&mut d);
        assert!(events(&out).iter().any(|e| matches!(
            e,
            DelegatorEvent::PeerMisbehaved {
                reason: PeerMisbehavior::UnusableResult { .. },
                ..
            }
        )));
        assert_eq!(d.poll_timeout().map(|(_, why)| why), Some(Timer::Reconnect));
        assert_eq!(d.get(&id()).unwrap().state, DelegationState::Running);
    }

    /// A progress `status` event carrying SSE id `n` (if any).
    fn progress(message: &str, n: Option<u64>) -> DelegatorInput {
        let DelegatorInput::TaskEvent { event, .. } =
            crate::engine::delegator::tests::event(TaskEventKind::Status(StatusEvent {
                status: TaskStatus::Progress,
                message: Some(message.into()),
                progress: None,
            }))
        else {
            unreachable!()
        };
        DelegatorInput::TaskEvent { event, event_id: n }
    }

    /// The progress messages among `out`.
    fn progress_told(out: &[DelegatorOutput]) -> Vec<String> {
        events(out)
            .iter()
            .filter_map(|e| match e {
                DelegatorEvent::Progress { message, .. } => message.clone(),
                DelegatorEvent::StateChanged { .. }
                | DelegatorEvent::Snapshot { .. }
                | DelegatorEvent::PeerMisbehaved { .. }
                | DelegatorEvent::ConnectionLost { .. }
                | DelegatorEvent::Forgotten { .. }
                | DelegatorEvent::Ended { .. } => None,
            })
            .collect()
    }

    #[test]
    fn events_with_an_id_not_above_the_last_one_taken_are_skipped() {
        let mut d = running(SnapshotMode::Auto);
        let mut told = Vec::new();
        for (m, n) in [("a", 1), ("b", 2), ("a again", 1), ("b again", 2), ("c", 3)] {
            d.handle(t(10), progress(m, Some(n))).unwrap();
            told.extend(progress_told(&drain(&mut d)));
        }
        assert_eq!(told, vec!["a", "b", "c"]);
        // A gap (events the executor no longer had) is taken as it comes.
        d.handle(t(11), progress("f", Some(6))).unwrap();
        assert_eq!(progress_told(&drain(&mut d)), vec!["f"]);
    }

    #[test]
    fn events_without_ids_are_all_taken_as_before() {
        let mut d = running(SnapshotMode::Auto);
        let mut told = Vec::new();
        for m in ["a", "a"] {
            d.handle(t(10), progress(m, None)).unwrap();
            told.extend(progress_told(&drain(&mut d)));
        }
        assert_eq!(told, vec!["a", "a"]);
    }

    #[test]
    fn a_reopened_stream_asks_to_resume_after_the_last_event_taken() {
        let mut d = running(SnapshotMode::Auto);
        for n in 1..=3 {
            d.handle(t(10), progress("p", Some(n))).unwrap();
        }
        d.handle(t(10), progress("old", Some(2))).unwrap();
        drain(&mut d);
        d.handle(t(20), closed()).unwrap();
        drain(&mut d);
        let (at, _) = d.poll_timeout().unwrap();
        d.handle_timeout(at);
        assert!(
            matches!(
                drain(&mut d).as_slice(),
                [DelegatorOutput::OpenEventStream {
                    last_event_id: Some(3),
                    ..
                }]
            ),
            "resumes after 3"
        );
        // What the resumed stream replays of what it had is skipped; the rest is taken.
        d.handle(at, DelegatorInput::EventStreamOpened { id: id() })
            .unwrap();
        d.handle(at, progress("dup", Some(3))).unwrap();
        d.handle(at, progress("new", Some(4))).unwrap();
        assert_eq!(progress_told(&drain(&mut d)), vec!["new"]);
    }

    #[test]
    fn a_stream_that_never_carried_an_id_is_reopened_without_one() {
        let mut d = running(SnapshotMode::Auto);
        d.handle(t(10), progress("p", None)).unwrap();
        d.handle(t(20), closed()).unwrap();
        drain(&mut d);
        let (at, _) = d.poll_timeout().unwrap();
        d.handle_timeout(at);
        assert!(matches!(
            drain(&mut d).as_slice(),
            [DelegatorOutput::OpenEventStream {
                last_event_id: None,
                ..
            }]
        ));
    }

    #[test]
    fn an_executor_that_forgot_the_delegation_ends_it_with_not_found() {
        let mut d = running(SnapshotMode::Auto);
        d.handle(
            t(10),
            DelegatorInput::ResultFetched {
                id: id(),
                result: Ok(FetchedResult::NotFound),
            },
        )
        .unwrap();
        drain(&mut d);
        let v = d.get(&id()).unwrap();
        assert_eq!(v.state, DelegationState::Error);
        assert_eq!(v.error.unwrap().code, ErrorCode::NotFound);
    }
}
