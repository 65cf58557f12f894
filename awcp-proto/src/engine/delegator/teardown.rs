//! Ending a delegation: cancel (the application) and abandon (this side gives up), then after a
//! terminal transition close the stream, acknowledge the result once it is safe, release the
//! transport, end exactly once, and forget after the retention.

use super::*;

impl Delegator {
    /// Cancels a delegation: the executor is told, resources are released.
    pub fn cancel(&mut self, now: Timestamp, id: &DelegationId) -> Result<(), UsageError> {
        self.tick(now);
        let d = self.get_mut(id)?;
        if d.state().is_terminal() {
            return Err(UsageError::InvalidState(format!(
                "delegation {id} is already {}",
                d.state()
            )));
        }
        let tell_executor = d.state() != DelegationState::Created;
        let peer = d.peer.clone();
        self.transition(
            now,
            id,
            DelegationTransition::Cancel,
            Some(ErrorInfo::bare(
                ErrorCode::Cancelled,
                "cancelled by the delegator",
            )),
        );
        if tell_executor {
            self.core.outputs.push_back(DelegatorOutput::SendCancel {
                id: id.clone(),
                peer,
            });
        }
        self.wind_down(now, id);
        Ok(())
    }

    /// Fails a delegation from our side, telling the executor if it may know about it.
    pub(super) fn abandon(&mut self, now: Timestamp, id: &DelegationId, error: ErrorInfo) {
        let tell = matches!(
            self.state(id),
            Some(
                DelegationState::Invited
                    | DelegationState::Accepted
                    | DelegationState::Started
                    | DelegationState::Running
                    | DelegationState::Idle
            )
        );
        if self.transition(
            now,
            id,
            DelegationTransition::SendError,
            Some(error.clone()),
        ) && tell
        {
            self.send_error(id, error);
        }
        self.wind_down(now, id);
    }

    /// After a terminal transition: close the stream, release the transport, end when idle.
    pub(super) fn wind_down(&mut self, now: Timestamp, id: &DelegationId) {
        let Some(d) = self.delegations.get_mut(id) else {
            return;
        };
        let Phase::Finishing(f) = &mut d.phase else {
            return; // not terminal, or ended already
        };
        if f.close_stream {
            f.close_stream = false;
            self.core
                .outputs
                .push_back(DelegatorOutput::CloseEventStream { id: id.clone() });
        }
        self.maybe_end(now, id);
    }

    /// Ends a finished delegation once nothing is in flight: acknowledges the result when it
    /// is safe, releases the transport, then emits `Ended` (exactly once) and arms the
    /// retention.
    pub(super) fn maybe_end(&mut self, now: Timestamp, id: &DelegationId) {
        let Some(d) = self.delegations.get_mut(id) else {
            return;
        };
        let busy = d.ops_in_flight() > 0;
        let result_safe = d.result_safe();
        let Phase::Finishing(f) = &mut d.phase else {
            return; // not terminal, or ended already
        };
        if busy || f.awaiting.is_some() || f.closing {
            return;
        }
        // The ack lets the executor forget the result: only once every snapshot is stored
        // (or applied, or discarded by policy) and nothing announced is missing.
        if f.heard_terminal && !f.ack_sent && result_safe {
            f.ack_sent = true;
            self.core.outputs.push_back(DelegatorOutput::SendAck {
                id: id.clone(),
                peer: d.peer.clone(),
            });
        }
        match f.transport {
            Release::Held => {
                f.transport = Release::Releasing;
                self.archive_grants.revoke(id);
                self.core
                    .outputs
                    .push_back(DelegatorOutput::ReleaseTransport { id: id.clone() });
                return;
            }
            Release::Preparing | Release::Releasing => return,
            Release::Free => {}
        }
        d.phase = Phase::Ended {
            start_sent: f.start_sent,
            heard_terminal: f.heard_terminal,
        };
        d.updated_at = now;
        let ev = DelegatorEvent::Ended {
            id: id.clone(),
            state: d.state(),
            result: d.result.clone(),
            error: d.error.clone().map(Box::new),
        };
        tracing::debug!(delegation = %id, state = %d.state(), "delegation ended");
        self.core.outputs.push_back(DelegatorOutput::Event(ev));
        self.core.timers.set(
            (id.clone(), Timer::Forget),
            now.saturating_add(self.config.retention),
        );
    }

    pub(super) fn forget(&mut self, id: &DelegationId) {
        let Some(d) = self.delegations.remove(id) else {
            return;
        };
        self.core.timers.cancel_all(id);
        self.core
            .outputs
            .push_back(DelegatorOutput::Event(DelegatorEvent::Forgotten {
                id: id.clone(),
            }));
        // Everything still in the store goes: pending snapshots, and also those applied from
        // the store or whose apply failed (their bytes stay stored until it is forgotten).
        for sid in d.stored {
            self.core
                .outputs
                .push_back(DelegatorOutput::DeleteStoredSnapshot {
                    id: id.clone(),
                    snapshot_id: sid,
                });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::delegator::tests::{drain, events, id, running, t};

    fn count(out: &[DelegatorOutput], f: impl Fn(&DelegatorOutput) -> bool) -> usize {
        out.iter().filter(|o| f(o)).count()
    }

    #[test]
    fn cancel_tells_the_executor_releases_once_and_ends_once() {
        let mut d = running(SnapshotMode::Auto);
        d.cancel(t(5), &id()).unwrap();
        let out = drain(&mut d);
        assert_eq!(
            count(&out, |o| matches!(o, DelegatorOutput::SendCancel { .. })),
            1
        );
        assert_eq!(
            count(&out, |o| matches!(
                o,
                DelegatorOutput::CloseEventStream { .. }
            )),
            1
        );
        assert_eq!(
            count(&out, |o| matches!(
                o,
                DelegatorOutput::ReleaseTransport { .. }
            )),
            1
        );
        assert!(!d.get(&id()).unwrap().ended, "not ended before the release");
        assert!(d.cancel(t(6), &id()).is_err(), "a second cancel is refused");
        for _ in 0..2 {
            d.handle(
                t(7),
                DelegatorInput::TransportReleased {
                    id: id(),
                    warnings: vec![],
                },
            )
            .unwrap();
        }
        let out = drain(&mut d);
        let ended = events(&out)
            .into_iter()
            .filter(|e| matches!(e, DelegatorEvent::Ended { .. }))
            .count();
        assert_eq!(ended, 1);
        assert_eq!(d.get(&id()).unwrap().state, DelegationState::Cancelled);
        assert!(!out
            .iter()
            .any(|o| matches!(o, DelegatorOutput::SendAck { .. })));
    }
}
