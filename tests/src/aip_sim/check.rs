//! The invariants, checked on every event of both engines and at the end of the run.

use std::collections::BTreeMap;

use aip_proto::leader::{CallError, LeaderEvent, Ticket};
use aip_proto::partner::PartnerEvent;
use aip_proto::state::{is_allowed, is_reachable};
use aip_proto::{ErrorCode, Method, TaskState};

use super::world::World;

/// How long after its deadline (leader clock) a task may still be live: the cancel's attempts
/// (3 × 5 s), their backoff and slow messages.
pub const GRACE_MS: u64 = 30_000;

#[derive(Debug, Default)]
struct PartnerTaskLog {
    state: Option<TaskState>,
    ended: bool,
}

#[derive(Debug)]
struct LeaderTaskLog {
    partner: usize,
    delivery: u8,
    started_ms: u64,
    deadline_ms: u64,
    state: Option<TaskState>,
    ended: bool,
    /// World time when the leader's clock passed the deadline, if a clock jump did it.
    deadline_passed: Option<u64>,
}

/// What the checker remembers.
#[derive(Debug, Default)]
pub struct Checker {
    partner: BTreeMap<(usize, String), PartnerTaskLog>,
    leader: BTreeMap<String, LeaderTaskLog>,
    /// Notification POSTs the receiver answered 200.
    pub receiver_took: u64,
    delivered: u64,
    gave_up: u64,
    /// The latest leader clock the engine was given (ms).
    pub(crate) leader_clock_max: u64,
    /// Tickets of the leader application's commands → answers received.
    tickets: BTreeMap<u64, u32>,
}

impl Checker {
    pub(crate) fn leader_started(
        &mut self,
        task: &str,
        partner: usize,
        delivery: u8,
        now_ms: u64,
        deadline_ms: u64,
    ) {
        self.leader.insert(
            task.to_owned(),
            LeaderTaskLog {
                partner,
                delivery,
                started_ms: now_ms,
                deadline_ms,
                state: None,
                ended: false,
                deadline_passed: None,
            },
        );
    }

    /// The leader application sent a command under `ticket`.
    pub(crate) fn ticket_issued(&mut self, ticket: Ticket) {
        self.tickets.insert(ticket.0, 0);
    }

    pub(crate) fn partner_event(
        &mut self,
        _w: &World,
        p: usize,
        e: &PartnerEvent,
    ) -> Result<(), String> {
        match e {
            PartnerEvent::StateChanged {
                task_id,
                from,
                to,
                cause,
            } => {
                let t = self.partner.entry((p, task_id.to_string())).or_default();
                if t.ended {
                    return Err(format!(
                        "p{p} {task_id}: {from:?} -> {to} after the task ended"
                    ));
                }
                if t.state != *from {
                    return Err(format!(
                        "p{p} {task_id}: change from {from:?}, but the task was {:?}",
                        t.state
                    ));
                }
                if !is_allowed(*from, *cause, *to) {
                    return Err(format!(
                        "p{p} {task_id}: {from:?} -{cause:?}-> {to} is not in the table"
                    ));
                }
                t.state = Some(*to);
            }
            PartnerEvent::TaskEnded { task_id, state } => {
                let t = self.partner.entry((p, task_id.to_string())).or_default();
                if t.ended || t.state != Some(*state) || !state.is_terminal() {
                    return Err(format!(
                        "p{p} {task_id}: TaskEnded({state}) in {:?}, ended before: {}",
                        t.state, t.ended
                    ));
                }
                t.ended = true;
            }
            PartnerEvent::TaskPurged { task_id } => {
                let ended = self
                    .partner
                    .get(&(p, task_id.to_string()))
                    .is_none_or(|t| t.ended);
                if !ended {
                    return Err(format!("p{p} {task_id}: purged while live"));
                }
            }
            PartnerEvent::NotificationDelivered { .. } => self.delivered += 1,
            PartnerEvent::NotificationGaveUp { .. } => self.gave_up += 1,
            PartnerEvent::StartRequested { .. }
            | PartnerEvent::TaskStarted { .. }
            | PartnerEvent::TaskContinued { .. } => {}
        }
        Ok(())
    }

    pub(crate) fn leader_event(&mut self, w: &World, e: &LeaderEvent) -> Result<(), String> {
        match e {
            LeaderEvent::Answered {
                task_id, ticket, ..
            } => {
                let n = self
                    .tickets
                    .get_mut(&ticket.0)
                    .ok_or_else(|| format!("leader {task_id}: answer to unknown {ticket:?}"))?;
                *n += 1;
                if *n > 1 {
                    return Err(format!("leader {task_id}: {ticket:?} answered twice"));
                }
            }
            LeaderEvent::StateChanged {
                task_id,
                from,
                status,
            } => {
                let t = self
                    .leader
                    .get_mut(task_id)
                    .ok_or_else(|| format!("event for unknown task {task_id}"))?;
                if t.ended {
                    return Err(format!("leader {task_id}: {} after the end", status.state));
                }
                if t.state != *from {
                    return Err(format!(
                        "leader {task_id}: change from {from:?}, but it saw {:?}",
                        t.state
                    ));
                }
                if !is_reachable(t.state, status.state) {
                    return Err(format!(
                        "leader {task_id}: {:?} -> {} cannot happen",
                        t.state, status.state
                    ));
                }
                t.state = Some(status.state);
                // Products are final in awaiting-completion: the leader has them, however it
                // follows the task (reply, stream chunks, notification).
                if status.state == TaskState::AwaitingCompletion {
                    let at_partner = w.partners[t.partner].task(task_id);
                    if let Some(pv) =
                        at_partner.filter(|v| v.state == Some(TaskState::AwaitingCompletion))
                    {
                        let mine = w.leader.task(task_id).map(|v| v.products.to_vec());
                        if mine.as_deref() != Some(pv.products) {
                            return Err(format!(
                                "leader {task_id}: awaiting-completion with products {mine:?}, the partner has {:?}",
                                pv.products
                            ));
                        }
                    }
                }
                if status.state.is_terminal() {
                    let at_partner = w.partners[t.partner].task(task_id).and_then(|v| v.state);
                    if at_partner.is_some_and(|s| s != status.state) {
                        return Err(format!(
                            "leader {task_id}: saw {} but the partner has {at_partner:?}",
                            status.state
                        ));
                    }
                }
            }
            LeaderEvent::TaskEnded { task_id, .. } | LeaderEvent::TaskAbandoned { task_id, .. } => {
                let clock = self.leader_clock_max;
                let t = self
                    .leader
                    .get_mut(task_id)
                    .ok_or_else(|| format!("end of unknown task {task_id}"))?;
                if t.ended {
                    return Err(format!("leader {task_id}: ended twice"));
                }
                t.ended = true;
                // The deadline is on the leader's clock; in world time it passed when a clock
                // jump carried the clock over it, or (no jump) `clock - deadline` ago.
                let deadline = t.started_ms + t.deadline_ms;
                if clock > deadline {
                    let passed = t
                        .deadline_passed
                        .unwrap_or(w.now.saturating_sub(clock - deadline));
                    if w.now > passed + GRACE_MS {
                        return Err(format!(
                            "leader {task_id}: ended {} ms after its deadline (grace {GRACE_MS} ms)",
                            w.now - passed
                        ));
                    }
                }
                if t.delivery == 1 {
                    if let Some(v) = w.leader.task(task_id) {
                        if !v.stream_lost && v.event_seqs.windows(2).any(|s| s[1] != s[0] + 1) {
                            return Err(format!(
                                "leader {task_id}: stream events lost: {:?}",
                                v.event_seqs
                            ));
                        }
                    }
                }
            }
            LeaderEvent::PeerMisbehaved { task_id, detail } => {
                return Err(format!("leader {task_id}: partner misbehaved: {detail}"))
            }
            // Allowed refusals: -32001 (the partner purged the task), and -32602 for a re-sent
            // notification/start whose configuration was purged with its task (a clock jump
            // can carry a partner past its retention while the leader still retries).
            LeaderEvent::CallFailed {
                task_id,
                method,
                error: CallError::Rpc(e),
                ..
            } if e.code != ErrorCode::TaskNotFound
                && !(e.code == ErrorCode::InvalidParams
                    && *method == Method::NotificationStart) =>
            {
                return Err(format!(
                    "leader {task_id}: the partner refused {}: {e}",
                    method.as_str()
                ))
            }
            _ => {}
        }
        Ok(())
    }

    /// The leader's clock is now `clock`; note the deadlines it jumped over at world time `now`.
    pub(crate) fn leader_clock(&mut self, clock: u64, now: u64, jumped: bool) {
        self.leader_clock_max = self.leader_clock_max.max(clock);
        if jumped {
            for t in self.leader.values_mut() {
                if t.deadline_passed.is_none()
                    && self.leader_clock_max > t.started_ms + t.deadline_ms
                {
                    t.deadline_passed = Some(now);
                }
            }
        }
    }

    /// At the end: everything ended, nothing left over.
    pub(crate) fn finish(&self, w: &World) -> Result<(), String> {
        if let Some((t, _)) = self.tickets.iter().find(|(_, n)| **n != 1) {
            return Err(format!("leader: ticket {t} never answered"));
        }
        for (task, t) in &self.leader {
            if !t.ended {
                return Err(format!("leader {task} never ended (saw {:?})", t.state));
            }
        }
        for ((p, task), t) in &self.partner {
            if !t.ended {
                return Err(format!(
                    "p{p} {task} never reached a terminal state ({:?})",
                    t.state
                ));
            }
        }
        for (i, p) in w.partners.iter().enumerate() {
            if p.pending_notifications() != 0 {
                return Err(format!(
                    "p{i}: {} notifications neither delivered nor given up",
                    p.pending_notifications()
                ));
            }
            if p.open_streams() != 0 || p.task_count() != 0 {
                return Err(format!(
                    "p{i}: {} streams and {} tasks left",
                    p.open_streams(),
                    p.task_count()
                ));
            }
        }
        if w.leader.calls_in_flight() != 0 || w.leader.task_count() != 0 {
            return Err(format!(
                "leader: {} calls and {} tasks left",
                w.leader.calls_in_flight(),
                w.leader.task_count()
            ));
        }
        let queued: u64 = w.partners.iter().map(|p| p.notifications_queued()).sum();
        if queued != self.delivered + self.gave_up {
            return Err(format!(
                "{queued} notifications queued, {} delivered, {} given up",
                self.delivered, self.gave_up
            ));
        }
        if self.delivered > self.receiver_took {
            return Err(format!(
                "{} notifications delivered, but the receiver took {}",
                self.delivered, self.receiver_took
            ));
        }
        if !w.calls.is_empty() || !w.streams.is_empty() {
            return Err(format!(
                "requests never answered: {:?}, streams open: {:?}",
                w.calls, w.streams
            ));
        }
        Ok(())
    }

    /// Notifications delivered and given up.
    pub fn notifications(&self) -> (u64, u64) {
        (self.delivered, self.gave_up)
    }
}
