//! The lease and the other timers: expiry, the setup grace period, reconnects, purge.

use super::*;

impl Delegator {
    pub(super) fn expire(&mut self, now: Timestamp, id: &DelegationId) {
        let err = ErrorInfo::new(ErrorCode::Expired, "the lease expired");
        let tell = self.state(id) != Some(DelegationState::Invited)
            || self
                .delegations
                .get(id)
                .is_some_and(|d| d.invited_at.is_some());
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
                    self.core.timers.set(id, Timer::SetupGrace, at);
                }
                _ => {}
            },
            Timer::SetupGrace => {
                if state == DelegationState::Started {
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
                let d = self.delegations.get_mut(id).expect("state exists");
                if !state.is_terminal() && d.stream == Stream::Closed && !d.heard_terminal {
                    d.stream = Stream::Opening;
                    let peer = d.req.peer.clone();
                    self.core
                        .outputs
                        .push_back(DelegatorOutput::OpenEventStream {
                            id: id.clone(),
                            peer,
                        });
                }
            }
            Timer::Purge => self.purge(id),
        }
    }
}
