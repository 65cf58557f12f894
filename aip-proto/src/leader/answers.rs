//! What becomes of a call's attempt: its answer (a command's result or message, or the
//! notification configuration), a failure or a timeout; retries with backoff, giving up,
//! and the bookkeeping once a call is over.

use super::calls::Call;
use super::view::Ended;
use super::{AbandonReason, CallError, Leader, LeaderEvent, LeaderOutput, LeaderTimer};
use crate::engine::{CallId, Clock as _};
use crate::error::ErrorCode;
use crate::wire::{
    decode_response, decode_rpc_response, CommandKind, Method, NotificationConfig, RpcId, RpcResult,
};

/// HTTP statuses worth another attempt.
fn retryable(status: u16) -> bool {
    matches!(status, 408 | 429 | 502 | 503 | 504)
}

impl Leader {
    pub(super) fn on_failed(&mut self, c: CallId, reason: String) {
        if self.streams.contains_key(&c) {
            return self.on_stream_broken(c);
        }
        let Some(n) = self.attempts.remove(&c) else {
            return;
        };
        self.core.timers.cancel(&LeaderTimer::CallTimeout(c));
        self.retry_or_fail(n, CallError::Transport(reason));
    }

    pub(super) fn on_attempt_timeout(&mut self, c: CallId) {
        let Some(n) = self.attempts.remove(&c) else {
            return;
        };
        self.push(LeaderOutput::Abort { call: c });
        self.retry_or_fail(n, CallError::Timeout);
    }

    fn retry_or_fail(&mut self, n: u64, error: CallError) {
        let Some(call) = self.calls.get_mut(&n) else {
            return;
        };
        let policy = self.config.calls;
        if call.attempts < policy.attempts.max(1) {
            let wait = policy.backoff(call.attempts);
            call.last_error = Some(error);
            let at = self.core.at(wait);
            self.core.timers.set(LeaderTimer::CallRetry(n), at);
        } else if let Some(call) = self.calls.remove(&n) {
            self.call_failed(call, error);
        }
    }

    pub(super) fn on_response(
        &mut self,
        c: CallId,
        status: u16,
        content_type: Option<&str>,
        body: &[u8],
    ) {
        if self.streams.contains_key(&c) {
            return self.on_stream_response(c, status, body);
        }
        let _ = content_type;
        let Some(n) = self.attempts.remove(&c) else {
            return;
        };
        self.core.timers.cancel(&LeaderTimer::CallTimeout(c));
        if retryable(status) {
            return self.retry_or_fail(n, CallError::http(status, body));
        }
        let Some(call) = self.calls.remove(&n) else {
            return;
        };
        match call.method {
            Method::NotificationSet => self.on_set_answer(call, status, body),
            _ => self.on_command_answer(call, status, body),
        }
    }

    fn on_command_answer(&mut self, call: Call, status: u16, body: &[u8]) {
        let task_id = call.task_id.clone();
        let resp = match decode_rpc_response(body) {
            Ok(r) => r,
            Err(_) if !(200..300).contains(&status) => {
                return self.call_failed(call, CallError::http(status, body));
            }
            Err(e) => return self.call_failed(call, CallError::Decode(e)),
        };
        let id_ok = resp.id == call.rpc_id || (resp.id == RpcId::Null && resp.outcome.is_err());
        if !id_ok {
            let detail = format!("id {} answers request {}", resp.id, call.rpc_id);
            return self.call_failed(call, CallError::Mismatch(detail));
        }
        match resp.outcome {
            Ok((RpcResult::Task(t), _)) => {
                self.apply_result(&task_id, (*t).clone(), false);
                self.answer_call(&call, Ok(RpcResult::Task(t)));
            }
            Ok((RpcResult::Message(m), _)) => {
                self.event(LeaderEvent::Message {
                    task_id: task_id.clone(),
                    message: m.clone(),
                });
                self.answer_call(&call, Ok(RpcResult::Message(m)));
            }
            Err(e) => return self.call_failed(call, CallError::Rpc(e)),
        }
        self.after_call(&call);
    }

    fn on_set_answer(&mut self, call: Call, status: u16, body: &[u8]) {
        match decode_response::<NotificationConfig>(body) {
            Ok(r) => match r.outcome {
                Ok(c) => {
                    let cid = c.id.unwrap_or_default();
                    self.send_start(&call.task_id, Method::NotificationStart, Some(&cid));
                }
                Err(e) => self.call_failed(call, CallError::Rpc(e)),
            },
            Err(e) if (200..300).contains(&status) => self.call_failed(call, CallError::Decode(e)),
            Err(_) => self.call_failed(call, CallError::http(status, body)),
        }
    }

    fn call_failed(&mut self, call: Call, error: CallError) {
        let task_id = call.task_id.clone();
        let unknown = matches!(&error, CallError::Rpc(e) if e.code == ErrorCode::TaskNotFound);
        self.event(LeaderEvent::CallFailed {
            task_id: task_id.clone(),
            method: call.method.clone(),
            command: call.command.clone(),
            error: error.clone(),
        });
        self.answer_call(&call, Err(error));
        let live = self.tasks.get(&task_id).is_some_and(|t| t.ended.is_none());
        if unknown && live {
            self.end(&task_id, Ended::Abandoned(AbandonReason::UnknownAtPartner));
            return;
        }
        if call.method == Method::NotificationSet {
            // No notifications: start plainly and poll.
            self.send_start(&task_id, Method::Rpc, None);
        }
        self.after_call(&call);
    }

    /// Bookkeeping once a call is over.
    fn after_call(&mut self, call: &Call) {
        let task_id = &call.task_id;
        let Some(t) = self.tasks.get_mut(task_id) else {
            return;
        };
        if call.command == Some(CommandKind::Get) {
            t.get_in_flight = false;
        }
        let (deadline_hit, live) = (t.deadline_hit, t.ended.is_none());
        if deadline_hit && live && call.command == Some(CommandKind::Cancel) {
            // The cancel at the deadline got through without ending the task, or failed.
            self.end(task_id, Ended::Abandoned(AbandonReason::Deadline));
            return;
        }
        if call.command == Some(CommandKind::Get) {
            self.arm_poll(task_id);
        }
    }
}
