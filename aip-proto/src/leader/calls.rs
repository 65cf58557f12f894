//! Calls out: the application's commands and their tickets, the calls that carry them and
//! their attempts; polling; the deadline; and notification setup (`notification/set` then
//! `notification/start`). What becomes of an attempt is in `answers`.

use serde_json::json;

use super::view::LeaderTask;
use super::{
    AttachTask, CallError, Delivery, HttpRequest, Leader, LeaderEvent, LeaderOutput, LeaderTimer,
    StartTask, Ticket,
};
use crate::engine::{CallId, Clock as _};
use crate::error::UsageError;
use crate::http::method_url;
use crate::wire::{
    encode_command_request, encode_notification_set, CommandKind, DataItem, Dialect, GetParams,
    JsonObject, Method, NotificationConfig, RpcId, RpcResult, SenderRole, TaskCommand,
};

/// One logical call (its attempts share the body, so the partner sees the same message id).
#[derive(Debug)]
pub(crate) struct Call {
    pub(super) task_id: String,
    pub(super) method: Method,
    pub(super) command: Option<CommandKind>,
    pub(super) rpc_id: RpcId,
    url: String,
    body: Vec<u8>,
    pub(super) attempts: u32,
    pub(super) last_error: Option<CallError>,
    /// The application's ticket (commands other than `start`, which the task tracks).
    pub(super) ticket: Option<Ticket>,
}

impl Leader {
    /// Starts a task at a partner. The start's answer arrives as [`LeaderEvent::Answered`]
    /// with the returned ticket.
    pub fn start(
        &mut self,
        now: crate::time::Timestamp,
        s: StartTask,
    ) -> Result<Ticket, UsageError> {
        self.core.advance(now);
        let endpoint = self
            .partners
            .get(&s.partner)
            .ok_or_else(|| UsageError::UnknownPartner(s.partner.clone()))?;
        if self.tasks.contains_key(&s.task_id) {
            return Err(UsageError::TaskExists(s.task_id));
        }
        let notification = match &s.delivery {
            Delivery::Notification { url, token, .. } => {
                let url = url
                    .clone()
                    .or_else(|| self.config.notification_url.clone())
                    .ok_or_else(|| {
                        UsageError::Unsupported("notification task without a receiver URL".into())
                    })?;
                let token = token.clone().unwrap_or_else(|| self.ids.secret());
                Some((url, token))
            }
            Delivery::Rpc | Delivery::Stream => None,
        };
        let dialect = endpoint.dialect;
        let ticket = self.ticket();
        let task = LeaderTask {
            id: s.task_id.clone(),
            partner: s.partner.clone(),
            session_id: s.session_id.clone(),
            dialect,
            delivery: s.delivery.clone(),
            params: s.params.clone(),
            data_items: s.data_items.clone(),
            status: None,
            products: Vec::new(),
            last_seq: 0,
            seqs: Vec::new(),
            stream: None,
            start_body: None,
            restream_attempts: 0,
            stream_lost: false,
            get_in_flight: false,
            deadline_hit: false,
            notification_token: notification.as_ref().map(|(_, t)| t.clone()),
            newest_sent: None,
            start_ticket: Some(ticket),
            ended: None,
        };
        let id = s.task_id.clone();
        self.tasks.insert(id.clone(), task);
        self.arm_deadline(&id, s.deadline);
        match notification {
            Some((url, token)) => {
                self.tokens.insert(token.clone(), id.clone());
                let config = NotificationConfig {
                    id: None,
                    url,
                    token,
                    task_id: id.clone(),
                };
                let rpc_id = self.rpc_id();
                let body = encode_notification_set(&rpc_id, &config);
                self.call(&id, Method::NotificationSet, None, rpc_id, body, None);
            }
            None if s.delivery == Delivery::Stream => self.open_start_stream(&id),
            None => self.send_start(&id, Method::Rpc, None),
        }
        self.arm_poll(&id);
        Ok(ticket)
    }

    /// Follows a task that exists at a partner without starting it (its state is unknown
    /// until the first answer: send a [`Leader::get`], or for [`Delivery::Stream`] the
    /// stream opens with `re-stream` from the first event).
    pub fn attach(&mut self, now: crate::time::Timestamp, a: AttachTask) -> Result<(), UsageError> {
        self.core.advance(now);
        let endpoint = self
            .partners
            .get(&a.partner)
            .ok_or_else(|| UsageError::UnknownPartner(a.partner.clone()))?;
        if self.tasks.contains_key(&a.task_id) {
            return Err(UsageError::TaskExists(a.task_id));
        }
        if matches!(a.delivery, Delivery::Notification { .. }) {
            return Err(UsageError::Unsupported(
                "notifications for an attached task".into(),
            ));
        }
        let task = LeaderTask {
            id: a.task_id.clone(),
            partner: a.partner.clone(),
            session_id: a.session_id.clone(),
            dialect: endpoint.dialect,
            delivery: a.delivery.clone(),
            params: Default::default(),
            data_items: Vec::new(),
            status: None,
            products: Vec::new(),
            last_seq: 0,
            seqs: Vec::new(),
            stream: None,
            start_body: None,
            restream_attempts: 0,
            stream_lost: false,
            get_in_flight: false,
            deadline_hit: false,
            notification_token: None,
            newest_sent: None,
            start_ticket: None,
            ended: None,
        };
        let id = a.task_id;
        self.tasks.insert(id.clone(), task);
        self.arm_deadline(&id, a.deadline);
        if a.delivery == Delivery::Stream {
            self.reconnect(&id);
        }
        self.arm_poll(&id);
        Ok(())
    }

    fn arm_deadline(&mut self, task_id: &str, deadline: Option<std::time::Duration>) {
        if let Some(d) = deadline.or(self.config.task_timeout) {
            let at = self.core.at(d);
            self.core
                .timers
                .set(LeaderTimer::Deadline(task_id.to_owned()), at);
        }
    }

    /// A command of the application to a live task, under a new ticket.
    fn app_command(
        &mut self,
        now: crate::time::Timestamp,
        task_id: &str,
        kind: CommandKind,
        items: Vec<DataItem>,
    ) -> Result<Ticket, UsageError> {
        self.core.advance(now);
        self.live(task_id)?;
        let t = self.ticket();
        self.send_command(task_id, kind, items, None, Some(t));
        Ok(t)
    }

    fn ticket(&mut self) -> Ticket {
        self.next_ticket += 1;
        Ticket(self.next_ticket)
    }

    /// Answers the application's ticket for the start of `task_id`, if it waits.
    pub(super) fn answer_start(&mut self, task_id: &str, outcome: Result<RpcResult, CallError>) {
        let Some(ticket) = self
            .tasks
            .get_mut(task_id)
            .and_then(|t| t.start_ticket.take())
        else {
            return;
        };
        self.event(LeaderEvent::Answered {
            task_id: task_id.to_owned(),
            ticket,
            command: CommandKind::Start,
            outcome,
        });
    }

    /// Answers the ticket of `call`, if it has one.
    pub(super) fn answer_call(&mut self, call: &Call, outcome: Result<RpcResult, CallError>) {
        if call.command == Some(CommandKind::Start) {
            return self.answer_start(&call.task_id, outcome);
        }
        if let (Some(ticket), Some(command)) = (call.ticket, call.command.clone()) {
            self.event(LeaderEvent::Answered {
                task_id: call.task_id.clone(),
                ticket,
                command,
                outcome,
            });
        }
    }

    /// `continue` with more input.
    pub fn continue_task(
        &mut self,
        now: crate::time::Timestamp,
        task_id: &str,
        items: Vec<DataItem>,
    ) -> Result<Ticket, UsageError> {
        self.app_command(now, task_id, CommandKind::Continue, items)
    }

    /// `complete` (the products are accepted).
    pub fn complete(
        &mut self,
        now: crate::time::Timestamp,
        task_id: &str,
    ) -> Result<Ticket, UsageError> {
        self.app_command(now, task_id, CommandKind::Complete, Vec::new())
    }

    /// `cancel`.
    pub fn cancel(
        &mut self,
        now: crate::time::Timestamp,
        task_id: &str,
    ) -> Result<Ticket, UsageError> {
        self.app_command(now, task_id, CommandKind::Cancel, Vec::new())
    }

    /// `get` with full histories (the answer arrives as [`LeaderEvent::Result`]).
    pub fn get(
        &mut self,
        now: crate::time::Timestamp,
        task_id: &str,
    ) -> Result<Ticket, UsageError> {
        self.core.advance(now);
        if !self.tasks.contains_key(task_id) {
            return Err(UsageError::UnknownTask(task_id.to_owned()));
        }
        let d = self.tasks.get(task_id).map_or(Dialect::V2, |t| t.dialect);
        let params = GetParams::default().to_params(d);
        let t = self.ticket();
        self.send_command(task_id, CommandKind::Get, Vec::new(), Some(params), Some(t));
        Ok(t)
    }

    pub(super) fn rpc_id(&mut self) -> RpcId {
        self.next_call += 1;
        RpcId::Str(self.next_call.to_string())
    }

    /// A command of this leader for `task_id`.
    pub(super) fn command(
        &mut self,
        task_id: &str,
        kind: CommandKind,
        items: Vec<DataItem>,
        params: Option<JsonObject>,
    ) -> TaskCommand {
        // An attached task's unknown session (empty) is left out: `sessionId` is optional on
        // a command, and a made-up one would name another session.
        let session = self
            .tasks
            .get(task_id)
            .map(|t| t.session_id.clone())
            .filter(|s| !s.is_empty());
        TaskCommand {
            id: self.ids.next("cmd"),
            sent_at: self.core.now(),
            sender_role: SenderRole::Leader,
            sender_id: self.config.leader_id.clone(),
            mentions: None,
            command: Some(kind),
            command_params: params.filter(|p| !p.is_empty()),
            data_items: (!items.is_empty()).then_some(items),
            task_id: Some(task_id.to_owned()),
            group_id: None,
            session_id: session,
        }
    }

    fn send_command(
        &mut self,
        task_id: &str,
        kind: CommandKind,
        items: Vec<DataItem>,
        params: Option<JsonObject>,
        ticket: Option<Ticket>,
    ) {
        let Some(d) = self.tasks.get(task_id).map(|t| t.dialect) else {
            return;
        };
        if kind == CommandKind::Get {
            if let Some(t) = self.tasks.get_mut(task_id) {
                t.get_in_flight = true;
            }
        }
        let c = self.command(task_id, kind.clone(), items, params);
        let rpc_id = self.rpc_id();
        let body = encode_command_request(&rpc_id, &Method::Rpc, &c, d);
        self.call(task_id, Method::Rpc, Some(kind), rpc_id, body, ticket);
    }

    /// The start command (rpc, or notification/start with the configuration id).
    pub(super) fn send_start(&mut self, task_id: &str, method: Method, notification: Option<&str>) {
        let Some(t) = self.tasks.get(task_id) else {
            return;
        };
        let (d, items) = (t.dialect, t.data_items.clone());
        let mut params = t.params.to_params(d);
        if let (Some(cid), Delivery::Notification { states, .. }) = (notification, &t.delivery) {
            params.insert("notificationConfigId".into(), json!(cid));
            if !states.is_empty() {
                let s: Vec<&str> = states.iter().map(|s| s.as_str()).collect();
                params.insert("notifyOnStates".into(), json!(s));
            }
        }
        let c = self.command(task_id, CommandKind::Start, items, Some(params));
        let rpc_id = self.rpc_id();
        let body = encode_command_request(&rpc_id, &method, &c, d);
        self.call(
            task_id,
            method,
            Some(CommandKind::Start),
            rpc_id,
            body,
            None,
        );
    }

    fn call(
        &mut self,
        task_id: &str,
        method: Method,
        command: Option<CommandKind>,
        rpc_id: RpcId,
        body: Vec<u8>,
        ticket: Option<Ticket>,
    ) {
        let Some(url) = self.url_of(task_id, &method) else {
            return;
        };
        self.next_call += 1;
        let n = self.next_call;
        self.calls.insert(
            n,
            Call {
                task_id: task_id.to_owned(),
                method,
                command,
                rpc_id,
                url,
                body,
                attempts: 0,
                last_error: None,
                ticket,
            },
        );
        self.send_attempt(n);
    }

    /// The URL of `method` at the partner of `task_id`.
    pub(super) fn url_of(&self, task_id: &str, method: &Method) -> Option<String> {
        let t = self.tasks.get(task_id)?;
        let endpoint = self.partners.get(&t.partner)?;
        Some(method_url(&endpoint.url, method))
    }

    pub(super) fn new_attempt(&mut self) -> CallId {
        self.next_attempt += 1;
        CallId(self.next_attempt)
    }

    /// Sends (again) call `n`.
    pub(super) fn send_attempt(&mut self, n: u64) {
        let c = self.new_attempt();
        let Some(call) = self.calls.get_mut(&n) else {
            return;
        };
        call.attempts += 1;
        let request = HttpRequest {
            url: call.url.clone(),
            event_stream: false,
            body: call.body.clone(),
        };
        self.attempts.insert(c, n);
        let at = self.core.at(self.config.calls.attempt_timeout);
        self.core.timers.set(LeaderTimer::CallTimeout(c), at);
        self.push(LeaderOutput::Send { call: c, request });
    }

    /// Arms the poll timer if the task is followed by polling.
    pub(super) fn arm_poll(&mut self, task_id: &str) {
        let Some(t) = self.tasks.get(task_id) else {
            return;
        };
        if t.ended.is_some() {
            return;
        }
        let every = match (&t.delivery, t.stream_lost) {
            (Delivery::Rpc, _) => self.config.poll_interval,
            (Delivery::Stream, false) => None,
            (Delivery::Stream, true) | (Delivery::Notification { .. }, _) => {
                Some(self.config.fallback_poll_interval)
            }
        };
        if let Some(d) = every {
            let at = self.core.at(d);
            self.core
                .timers
                .set(LeaderTimer::Poll(task_id.to_owned()), at);
        }
    }

    /// A light `get`: only history newer than what is known.
    pub(super) fn poll_task(&mut self, task_id: &str) {
        let Some(t) = self.tasks.get(task_id) else {
            return;
        };
        if t.ended.is_some() || t.get_in_flight {
            return;
        }
        let params = GetParams {
            last_command_sent_at: Some(self.core.now()),
            last_state_changed_at: t.status.as_ref().map(|s| s.state_changed_at),
        }
        .to_params(t.dialect);
        self.send_command(task_id, CommandKind::Get, Vec::new(), Some(params), None);
    }

    /// The deadline: cancel; if that does not end the task, it is abandoned.
    pub(super) fn on_deadline(&mut self, task_id: &str) {
        let Some(t) = self.tasks.get_mut(task_id) else {
            return;
        };
        if t.ended.is_some() {
            return;
        }
        t.deadline_hit = true;
        self.send_command(task_id, CommandKind::Cancel, Vec::new(), None, None);
    }
}
