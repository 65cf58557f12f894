//! Requests to the partner: decode, route by method, and apply task commands (§6).
//!
//! Answers that are decided here (errors) go out at once; replies that show a task are queued
//! as [`super::task::LazyReply`] and rendered when polled. A request about a task whose start
//! still waits for its decision is held and answered after the decision.

use std::sync::Arc;

use serde_json::json;

use super::task::LazyReply;
use super::{Held, Partner, PartnerEvent, PartnerOutput, PartnerTimer, Queued};
use crate::engine::{Clock as _, HttpResponse, RequestId};
use crate::error::{ErrorCode, RpcError};
use crate::state::command_effect;
use crate::wire::{
    decode_request, encode_error, encode_stream_event, encode_task_response, CommandKind,
    EventData, Header, Method, Params, Request, RpcId, StreamEvent, TaskCommand, TaskResult,
    TaskState, TaskStatus,
};

impl Partner {
    pub(super) fn on_request(&mut self, r: RequestId, body: &[u8]) {
        if body.len() > self.config.max_request_bytes {
            let e = RpcError::with_message(ErrorCode::InvalidRequest, "request body too large");
            self.push(PartnerOutput::Respond {
                request: r,
                response: HttpResponse {
                    status: 413,
                    content_type: "application/json",
                    body: encode_error(&RpcId::Null, &e),
                },
            });
            return;
        }
        match decode_request(body) {
            Ok(req) => self.dispatch(r, req),
            Err(e) => self.respond(r, encode_error(&e.id, &e.error)),
        }
    }

    fn error(&mut self, r: RequestId, id: &RpcId, e: RpcError) {
        self.respond(r, encode_error(id, &e));
    }

    fn invalid(&mut self, r: RequestId, id: &RpcId, detail: &str) {
        self.error(
            r,
            id,
            RpcError::new(ErrorCode::InvalidParams).with_data(json!(detail)),
        );
    }

    fn dispatch(&mut self, r: RequestId, req: Request) {
        match (&req.method, &req.params) {
            (Method::Rpc | Method::Stream | Method::NotificationStart, Params::Command(_)) => {
                if req.method == Method::NotificationStart && !self.config.notifications {
                    return self.error(
                        r,
                        &req.id,
                        RpcError::new(ErrorCode::NotificationNotSupported),
                    );
                }
                self.command(r, req)
            }
            (Method::NotificationSet | Method::NotificationGet | Method::NotificationDelete, _)
                if !self.config.notifications =>
            {
                self.error(
                    r,
                    &req.id,
                    RpcError::new(ErrorCode::NotificationNotSupported),
                )
            }
            (Method::NotificationSet, Params::NotificationSet(c)) => {
                let c = c.clone();
                self.notification_set(r, &req.id, c)
            }
            (Method::NotificationGet, Params::NotificationId(p)) => {
                let p = p.clone();
                self.notification_get(r, &req.id, &p)
            }
            (Method::NotificationDelete, Params::NotificationId(p)) => {
                let p = p.clone();
                self.notification_delete(r, &req.id, &p)
            }
            (Method::Group, _) => {
                self.error(r, &req.id, RpcError::new(ErrorCode::GroupNotSupported))
            }
            (Method::Other(m), _) => {
                let e = RpcError::new(ErrorCode::MethodNotFound).with_data(json!(m));
                self.error(r, &req.id, e)
            }
            // decode_request pairs each method with its params; anything else is malformed.
            _ => self.invalid(r, &req.id, "params do not fit the method"),
        }
    }

    /// `rpc`, `stream` and `notification/start`.
    fn command(&mut self, r: RequestId, mut req: Request) {
        let Params::Command(c) = &mut req.params else {
            return;
        };
        let kind = c.command.clone();
        match (&kind, &req.method) {
            (Some(CommandKind::ReStream), Method::Stream) => {}
            (Some(CommandKind::ReStream), _) => {
                return self.invalid(r, &req.id, "re-stream is a command of method stream")
            }
            (Some(CommandKind::Other(k)), _) => {
                return self.invalid(r, &req.id, &format!("unknown command {k:?}"))
            }
            (None, _) => return self.invalid(r, &req.id, "missing field `command`"),
            (Some(_), Method::NotificationStart) if kind != Some(CommandKind::Start) => {
                return self.invalid(r, &req.id, "notification/start needs command start")
            }
            _ => {}
        }
        // The id the partner holds for a known task (shared, not copied).
        let task_id: Arc<str> = match (&c.task_id, &kind) {
            (Some(t), _) if !t.is_empty() => self.shared_id(t),
            (_, Some(CommandKind::Start)) => {
                let t = self.ids.next("task");
                let shared = Arc::from(t.as_str());
                // Not shared yet (just decoded): no copy is made.
                Arc::make_mut(c).task_id = Some(t);
                shared
            }
            _ => {
                return self.invalid(
                    r,
                    &req.id,
                    "taskId is required for commands other than start",
                )
            }
        };
        // notification/start: the subscription, attached now or when the task is created.
        let mut subscription = None;
        if req.method == Method::NotificationStart {
            let Some(p) = c.notification_start_params() else {
                return self.invalid(r, &req.id, "missing commandParams.notificationConfigId");
            };
            if !self.has_config(&task_id, &p.notification_config_id) {
                return self.invalid(r, &req.id, "unknown notificationConfigId for this task");
            }
            match self.tasks.get_mut(&task_id) {
                Some(t) => {
                    t.notify.retain(|(cid, _)| *cid != p.notification_config_id);
                    t.notify
                        .push((p.notification_config_id, p.notify_on_states));
                }
                None => subscription = Some((p.notification_config_id, p.notify_on_states)),
            }
        }
        let resent_after_purge = self
            .tombstones
            .get(&*task_id)
            .is_some_and(|start| *start == c.id);
        match self.tasks.get_mut(&task_id) {
            None if resent_after_purge => {
                let e = RpcError::task_not_found(&task_id).with_data(
                    json!({"taskId": &*task_id, "details": "the task ended and was purged"}),
                );
                self.error(r, &req.id, e)
            }
            None if kind == Some(CommandKind::Start) => {
                if self.tasks.len() >= self.config.max_tasks && !self.purge_oldest_ended() {
                    return self.reject_unstored(r, req, &task_id);
                }
                let dialect = req.dialect;
                // The task keeps the start command; the request holds the same one.
                self.new_task(Arc::clone(&task_id), Arc::clone(c), dialect);
                if let Some(t) = self.tasks.get_mut(&task_id) {
                    t.notify.extend(subscription);
                }
                if self.config.auto_accept {
                    // Accepted at once: answered right after the decision (as it would be
                    // from the queue of held requests, which stays empty).
                    let _ = self.decide(&task_id, TaskState::Accepted, None);
                    self.answer_command(r, req, true);
                } else {
                    if let Some(t) = self.tasks.get_mut(&task_id) {
                        t.held.push_back(Held {
                            request: r,
                            req,
                            created: true,
                        });
                    }
                    let timeout = self
                        .tasks
                        .get(&task_id)
                        .and_then(|t| t.params.response_timeout)
                        .unwrap_or(self.config.default_response_timeout);
                    let at = self.core.at(timeout);
                    let key = PartnerTimer::ResponseTimeout(Arc::clone(&task_id));
                    self.arm(key, at);
                    if let Some(command) = self.start_command(&task_id) {
                        self.event(PartnerEvent::StartRequested {
                            task_id: Arc::clone(&task_id),
                            command,
                        });
                    }
                }
            }
            None => self.error(r, &req.id, RpcError::task_not_found(&task_id)),
            Some(t) if t.machine.state().is_none() => t.held.push_back(Held {
                request: r,
                req,
                created: false,
            }),
            Some(_) => self.answer_command(r, req, false),
        }
    }

    /// Applies a command to a decided task and answers it. `created`: this request created
    /// the task (its start is already applied).
    pub(super) fn answer_command(&mut self, r: RequestId, req: Request, created: bool) {
        let Params::Command(c) = req.params else {
            return;
        };
        let Some(task_id) = c.task_id.as_deref().map(|t| self.shared_id(t)) else {
            return;
        };
        let kind = c.command.clone().unwrap_or(CommandKind::Get);
        // A re-sent start (same message id as the one that created the task) is answered like
        // the original: on a stream, everything from the first event.
        let resent_start = kind == CommandKind::Start
            && self.tasks.get(&task_id).is_some_and(|t| {
                t.history.front().is_some_and(|s| s.id == c.id) && t.log.is_complete()
            });
        let (restream, get) = match kind {
            CommandKind::ReStream => (c.restream_params().last_event_seq, None),
            CommandKind::Get => (None, Some(c.get_params())),
            _ => (None, None),
        };
        if !created {
            self.apply(&task_id, c, &kind);
        }
        match (req.method, kind) {
            (Method::Stream, CommandKind::ReStream) => {
                self.restream(r, &task_id, req.id, req.dialect, restream)
            }
            (Method::Stream, _) if created || resent_start => {
                self.subscribe(r, &task_id, req.id, req.dialect, 0)
            }
            (Method::Stream, _) => self.subscribe_with_snapshot(r, &task_id, req.id, req.dialect),
            (_, _) => self.core.outputs.push_back(Queued::Reply(LazyReply {
                request: r,
                id: req.id,
                task_id,
                dialect: req.dialect,
                get,
            })),
        }
    }

    /// What a command does to a decided task (nothing, when the table has no row for it).
    fn apply(&mut self, task_id: &str, c: Arc<TaskCommand>, kind: &CommandKind) {
        if matches!(kind, CommandKind::Get | CommandKind::ReStream) {
            return;
        }
        let max = self.config.max_history;
        let Some(t) = self.tasks.get_mut(task_id) else {
            return;
        };
        let Some(state) = t.machine.state() else {
            return;
        };
        if !t.record(Arc::clone(&c), max) {
            return; // re-sent: applied already
        }
        let Some((cause, to)) = command_effect(state, kind) else {
            return;
        };
        if self.transition(task_id, cause, to, None).is_ok() && *kind == CommandKind::Continue {
            self.event(PartnerEvent::TaskContinued {
                task_id: self.shared_id(task_id),
                command: c,
            });
        }
    }

    /// Makes room by purging the ended task that ended first (O(log n): ended tasks are
    /// indexed by the time they ended).
    fn purge_oldest_ended(&mut self) -> bool {
        match self.ended.first().map(|(_, id)| Arc::clone(id)) {
            Some(id) => {
                self.purge(&id);
                true
            }
            None => false,
        }
    }

    /// At capacity: a rejected task is answered but not stored.
    fn reject_unstored(&mut self, r: RequestId, req: Request, task_id: &str) {
        let Params::Command(c) = &req.params else {
            return;
        };
        let mut header = Header::partner(
            self.ids.next("result"),
            self.core.now(),
            self.config.partner_id.clone(),
        );
        header.session_id = c.session_id.clone();
        let mut status = TaskStatus::new(TaskState::Rejected, self.core.now());
        status.data_items = Some(vec![crate::wire::DataItem::text(
            "the partner is at capacity",
        )]);
        let result = TaskResult {
            header,
            task_id: task_id.to_owned(),
            status,
            products: Some(Vec::new()),
            command_history: None,
            status_history: None,
        };
        if req.method == Method::Stream {
            let ev = StreamEvent {
                seq: 1,
                data: EventData::Task(result),
            };
            let frame = crate::sse::frame(&encode_stream_event(&req.id, &ev, req.dialect));
            self.push(PartnerOutput::StartStream { request: r });
            self.push(PartnerOutput::StreamData {
                request: r,
                data: frame,
            });
            self.push(PartnerOutput::EndStream { request: r });
        } else {
            self.respond(r, encode_task_response(&req.id, &result, req.dialect));
        }
    }
}
