//! Multi-round delegations (WIRE.md §17): `round_done` ends a round and leaves the delegation
//! `idle`; the application continues it (CONTINUE, a new lease) or closes it (CLOSE); an idle
//! delegation nobody continues is closed after [`DelegatorConfig::idle_timeout`].
//!
//! A delegation asks for rounds with [`DelegateRequest::keep_open`], which offers the
//! `multi-round` extension in INVITE. An executor of the reference's `dev` branch ends every
//! task with `round_done` whether asked or not: a delegation that did not ask for rounds takes
//! that round's result and closes at once, so it completes instead of waiting for its lease.

use super::*;
use crate::wire::{Close, Continue, RoundDoneEvent};

impl Delegator {
    /// Whether `id` is between rounds with its last round settled: `idle`, and every
    /// snapshot of the round stored and (in `auto` mode) applied or failed. What a caller
    /// waiting for a round's end waits for.
    pub fn round_settled(&self, id: &DelegationId) -> bool {
        self.delegations.get(id).is_some_and(|d| {
            d.state() == DelegationState::Idle
                && d.ops_in_flight() == 0
                && matches!(d.applies, Applies::Idle)
                && !d.replay_awaited
        })
    }

    /// Starts the next round of an idle delegation (one whose round ended with `round_done`):
    /// sends CONTINUE with `task` and a new lease of the delegation's length, in the same
    /// executor work directory. Returns the round's number (2 for the first continue).
    pub fn continue_delegation(
        &mut self,
        now: Timestamp,
        id: &DelegationId,
        task: TaskSpec,
    ) -> Result<u64, UsageError> {
        self.tick(now);
        let max_ttl = self.get_mut(id)?.accept.as_ref().and_then(|a| {
            a.constraints
                .and_then(|c| c.max_ttl_seconds)
                .filter(|m| *m > 0)
        });
        let d = self.get_mut(id)?;
        if d.state() != DelegationState::Idle {
            return Err(UsageError::InvalidState(format!(
                "delegation {id} is {}; only an idle one (its round ended) can continue",
                d.state()
            )));
        }
        let ttl = max_ttl.map_or(d.req.ttl_seconds, |m| m.min(d.req.ttl_seconds));
        let expires_at = now.saturating_add(Duration::from_secs(ttl));
        d.round = d.round.saturating_add(1);
        d.expires_at = Some(expires_at);
        d.last_progress = None;
        let round = d.round;
        let message = Message::Continue(Continue {
            delegation_id: id.clone(),
            task,
            round,
            lease: Some(ActiveLease {
                expires_at,
                access_mode: d.access,
            }),
        });
        let (peer, dialect) = (d.peer.clone(), d.req.dialect);
        self.core.timers.cancel(&(id.clone(), Timer::Idle));
        self.transition(now, id, DelegationTransition::SendContinue, None);
        self.core.timers.set((id.clone(), Timer::Lease), expires_at);
        self.core.outputs.push_back(DelegatorOutput::SendMessage {
            id: id.clone(),
            to: Outbound::Continue,
            peer,
            message: Box::new(message),
            dialect,
        });
        Ok(round)
    }

    /// Ends an idle delegation (CLOSE): the executor releases the work directory, this side
    /// the transport. A running round is cancelled with [`Delegator::cancel`] instead.
    pub fn close(&mut self, now: Timestamp, id: &DelegationId) -> Result<(), UsageError> {
        self.tick(now);
        let d = self.get_mut(id)?;
        if d.state() != DelegationState::Idle {
            return Err(UsageError::InvalidState(format!(
                "delegation {id} is {}; only an idle one (its round ended) can be closed \
                 (cancel a running one)",
                d.state()
            )));
        }
        self.send_close(now, id);
        Ok(())
    }

    /// CLOSE from `idle`: completed, the executor told, then winding down (the executor is
    /// acknowledged once it confirmed the CLOSE).
    pub(super) fn send_close(&mut self, now: Timestamp, id: &DelegationId) {
        let Some(d) = self.delegations.get(id) else {
            return;
        };
        let (peer, dialect) = (d.peer.clone(), d.req.dialect);
        self.core.timers.cancel(&(id.clone(), Timer::Idle));
        if !self.transition(now, id, DelegationTransition::SendClose, None) {
            return;
        }
        if let Some(Phase::Finishing(f)) = self.delegations.get_mut(id).map(|d| &mut d.phase) {
            f.closing = true;
        }
        self.core.outputs.push_back(DelegatorOutput::SendMessage {
            id: id.clone(),
            to: Outbound::Close,
            peer,
            message: Box::new(Message::Close(Close {
                delegation_id: id.clone(),
            })),
            dialect,
        });
        self.wind_down(now, id);
    }

    /// `round_done`: the round's outcome is the delegation's result so far; the delegation is
    /// `idle` until continued or closed, or closed at once if it did not ask for rounds.
    pub(super) fn on_round_done(&mut self, now: Timestamp, id: &DelegationId, r: RoundDoneEvent) {
        if self.state(id) == Some(DelegationState::Started) {
            // A round cannot end before it ran: the executor skipped `status`.
            self.setup_complete(now, id);
        }
        let Some(d) = self.delegations.get_mut(id) else {
            return;
        };
        if d.state() != DelegationState::Running {
            // A replay of the round that left it idle (after a restart, the replay of a
            // snapshot that was being stored has arrived now), or too late.
            if d.state() == DelegationState::Idle && r.round >= d.round {
                d.replay_awaited = false;
            }
            return;
        }
        if r.round < d.round {
            // A replay of an earlier round's end (the stream joined while the executor was
            // idle, and CONTINUE went out meanwhile): not this round's.
            return;
        }
        if let Some((_, failures)) = d.phase.stream_mut() {
            *failures = 0;
        }
        if let Some(missing) = r
            .recommended_snapshot_id
            .as_ref()
            .filter(|s| !d.req.transport.is_live() && !d.snapshots.contains(s))
        {
            d.warnings.push(format!(
                "round {} named snapshot {missing}, which never arrived",
                r.round
            ));
        }
        d.result = Some(TaskOutcome {
            summary: r.summary,
            highlights: r.highlights,
        });
        let keep_open = d.req.keep_open;
        self.core.timers.cancel(&(id.clone(), Timer::Lease));
        self.transition(now, id, DelegationTransition::ReceiveRoundDone, None);
        if keep_open {
            let at = now.saturating_add(self.config.idle_timeout);
            self.core.timers.set((id.clone(), Timer::Idle), at);
        } else {
            // Rounds this delegation did not ask for (a reference `dev` executor ends every
            // task so): take the round as the result and close.
            self.send_close(now, id);
        }
    }

    /// The idle time is over: close.
    pub(super) fn on_idle_timeout(&mut self, now: Timestamp, id: &DelegationId) {
        let Some(d) = self.delegations.get_mut(id) else {
            return;
        };
        if d.state() != DelegationState::Idle {
            return;
        }
        d.warnings.push(format!(
            "closed after {} s without a next round",
            self.config.idle_timeout.as_secs()
        ));
        self.send_close(now, id);
    }

    /// The executor answered CONTINUE: a refusal (or a request that never reached it) leaves
    /// the delegation idle, the round not started; any other failure may have started it, so
    /// the round's lease decides.
    pub(super) fn on_continue_reply(&mut self, now: Timestamp, id: &DelegationId, reply: Reply) {
        let Some(d) = self.delegations.get_mut(id) else {
            return;
        };
        if d.state() != DelegationState::Running {
            return;
        }
        let why = match reply {
            Reply::Ok | Reply::Accept(_) => return,
            Reply::Error(e) => e.to_string(),
            Reply::Failed(RequestFailure::Unreachable(e)) => e,
            Reply::Failed(other) => {
                tracing::info!(delegation = %id, "CONTINUE got no answer: {other}");
                return;
            }
        };
        d.warnings
            .push(format!("the executor refused round {}: {why}", d.round));
        d.round = d.round.saturating_sub(1).max(1);
        self.core.timers.cancel(&(id.clone(), Timer::Lease));
        if self.transition(now, id, DelegationTransition::ContinueRefused, None) {
            let at = now.saturating_add(self.config.idle_timeout);
            self.core.timers.set((id.clone(), Timer::Idle), at);
        }
    }

    /// The executor answered CLOSE: once it confirmed, it is acknowledged (it may forget the
    /// delegation).
    pub(super) fn on_close_reply(&mut self, now: Timestamp, id: &DelegationId, reply: Reply) {
        let Some(d) = self.delegations.get_mut(id) else {
            return;
        };
        let confirmed = matches!(reply, Reply::Ok);
        if !confirmed {
            d.warnings.push(match reply {
                Reply::Error(e) => format!("the executor refused CLOSE: {e}"),
                Reply::Failed(f) => format!("CLOSE did not reach the executor: {f}"),
                Reply::Ok | Reply::Accept(_) => "unexpected answer to CLOSE".into(),
            });
        }
        if let Phase::Finishing(f) = &mut d.phase {
            f.closing = false;
            if confirmed {
                f.heard_terminal = true;
            }
        }
        self.maybe_end(now, id);
    }
}
