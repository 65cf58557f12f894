//! The lease and the other timers: expiry, the setup grace period, reconnects, forgetting.

use super::*;

/// Why the delegator wants to be woken: the reason [`Delegator::poll_timeout`] reports with its
/// deadline (log it; the driver does nothing different per reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Timer {
    /// Outputs are queued: drain [`Delegator::poll_output`] now (not an armed timer; keep it
    /// first: the range of one delegation's timers starts at it).
    Output,
    /// A lease ends: expire the delegation (an executor still setting up gets a grace period).
    Lease,
    /// The grace period after the lease end is over and the executor is still setting up:
    /// abandon the delegation with `EXPIRED`.
    SetupGrace,
    /// Reopen the event stream: the back-off after it closed, or the wait after a result poll
    /// found the task still running.
    Reconnect,
    /// The retention after the end is over: forget the delegation (and its stored bytes).
    Forget,
    /// A multi-round delegation stayed idle too long: close it.
    Idle,
}

impl Timer {
    /// A short name for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Timer::Output => "output",
            Timer::Lease => "lease",
            Timer::SetupGrace => "setup grace",
            Timer::Reconnect => "reconnect",
            Timer::Forget => "forget",
            Timer::Idle => "idle",
        }
    }
}

impl engine_basics::timers::Reason for Timer {
    fn reason(&self) -> &'static str {
        self.as_str()
    }
}

impl crate::engine::timers::TimerKind for Timer {
    const OUTPUT: Timer = Timer::Output;
}

impl Delegator {
    pub(super) fn expire(&mut self, now: Timestamp, id: &DelegationId) {
        let err = ErrorInfo::new(ErrorCode::Expired, "the lease expired");
        // An invitation restored after a restart may never have reached the executor; any other
        // delegation past `created` may be known to it.
        let tell = self.delegations.get(id).is_some_and(|d| match d.phase {
            Phase::Inviting { invited_at } => invited_at.is_some(),
            Phase::Accepted { .. }
            | Phase::Started { .. }
            | Phase::Finishing(_)
            | Phase::Ended { .. } => true,
        });
        if self.transition(now, id, DelegationTransition::Expire, Some(err.clone())) && tell {
            self.send_error(id, err);
        }
        self.wind_down(now, id);
    }

    pub(super) fn on_timer(&mut self, now: Timestamp, id: &DelegationId, timer: Timer) {
        let Some(state) = self.state(id) else {
            return;
        };
        match timer {
            Timer::Lease => match state {
                DelegationState::Invited | DelegationState::Accepted | DelegationState::Running => {
                    self.expire(now, id)
                }
                DelegationState::Started => {
                    // Cannot expire while the executor sets up: give it a grace period.
                    let at = now.saturating_add(self.config.setup_grace);
                    self.core.timers.set((id.clone(), Timer::SetupGrace), at);
                }
                // Not armed before the invitation, disarmed by the terminal transition and
                // between rounds.
                DelegationState::Created
                | DelegationState::Idle
                | DelegationState::Completed
                | DelegationState::Error
                | DelegationState::Cancelled
                | DelegationState::Expired => {}
            },
            Timer::SetupGrace => {
                let asking = self
                    .delegations
                    .get(id)
                    .is_some_and(|d| d.asking_after_lease);
                if asking && state == DelegationState::Running {
                    // Restored after the lease: the executor did not report the task finished.
                    self.expire(now, id);
                } else if state == DelegationState::Started {
                    self.abandon(
                        now,
                        id,
                        ErrorInfo::new(
                            ErrorCode::Expired,
                            "the lease expired before the executor finished setting up",
                        ),
                    );
                }
            }
            Timer::Reconnect => {
                let Some(d) = self.delegations.get_mut(id) else {
                    return;
                };
                let heard = d.phase.heard_terminal();
                if let (Some((stream @ Stream::Closed, _)), false) = (d.phase.stream_mut(), heard) {
                    *stream = Stream::Opening;
                    let peer = d.peer.clone();
                    let last_event_id = d.last_event_id;
                    self.core
                        .outputs
                        .push_back(DelegatorOutput::OpenEventStream {
                            id: id.clone(),
                            peer,
                            last_event_id,
                        });
                }
            }
            Timer::Forget => self.forget(id),
            Timer::Idle => self.on_idle_timeout(now, id),
            // Never armed: `poll_timeout`'s reason for queued outputs.
            Timer::Output => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::delegator::tests::{drain, id, invited, running, started, t};

    #[test]
    fn a_lease_ending_while_the_executor_sets_up_gets_a_grace_period_then_expired() {
        let mut d = started(SnapshotMode::Auto);
        let (lease, why) = d.poll_timeout().unwrap();
        assert_eq!(why, Timer::Lease);
        d.handle_timeout(lease);
        assert!(drain(&mut d).is_empty(), "never expired while setting up");
        assert_eq!(d.get(&id()).unwrap().state, DelegationState::Started);
        let (grace, why) = d.poll_timeout().unwrap();
        assert_eq!(why, Timer::SetupGrace);
        assert_eq!(
            grace,
            lease.saturating_add(DelegatorConfig::default().setup_grace)
        );
        d.handle_timeout(grace);
        let out = drain(&mut d);
        let v = d.get(&id()).unwrap();
        assert_eq!(v.state, DelegationState::Error);
        assert_eq!(v.error.unwrap().code, ErrorCode::Expired);
        assert!(out.iter().any(|o| matches!(
            o,
            DelegatorOutput::SendMessage {
                to: Outbound::Error,
                ..
            }
        )));
    }

    #[test]
    fn poll_timeout_names_queued_output_then_the_lease() {
        let mut d = invited();
        assert_eq!(
            d.poll_timeout().map(|(_, why)| why),
            Some(Timer::Lease),
            "invited: the lease is the next reason to wake"
        );
        d.cancel(t(2), &id()).unwrap();
        assert_eq!(d.poll_timeout(), Some((t(2), Timer::Output)));
        drain(&mut d);
    }

    #[test]
    fn an_early_timeout_does_nothing_and_the_lease_expires_a_running_delegation() {
        let mut d = running(SnapshotMode::Auto);
        let (at, why) = d.poll_timeout().unwrap();
        assert_eq!(why, Timer::Lease);
        d.handle_timeout(t(2));
        assert!(drain(&mut d).is_empty());
        d.handle_timeout(at);
        let out = drain(&mut d);
        assert_eq!(d.get(&id()).unwrap().state, DelegationState::Expired);
        assert!(out.iter().any(|o| matches!(
            o,
            DelegatorOutput::SendMessage {
                to: Outbound::Error,
                ..
            }
        )));
    }

    #[test]
    fn an_ended_delegation_is_forgotten_after_its_retention() {
        let mut d = invited();
        d.cancel(t(2), &id()).unwrap();
        drain(&mut d);
        let (at, why) = d.poll_timeout().unwrap();
        assert_eq!(why, Timer::Forget);
        assert_eq!(
            at,
            t(2).saturating_add(DelegatorConfig::default().retention)
        );
        d.handle_timeout(at);
        let out = drain(&mut d);
        assert!(out
            .iter()
            .any(|o| matches!(o, DelegatorOutput::Event(DelegatorEvent::Forgotten { .. }))));
        assert!(d.get(&id()).is_none());
    }
}
