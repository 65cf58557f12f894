//! The leader's streams: SSE bytes in, events out, de-duplicated by `eventSeq` per task, and
//! resumed with `re-stream` after a drop.
//!
//! Within one connection `eventSeq` must increase (an event that does not is reported and
//! ignored). Across connections, an event at or below the newest accepted `eventSeq` is a
//! replay and is dropped. A stream that ends, breaks or stays silent past
//! [`super::LeaderConfig::stream_idle_timeout`] before the task ended is resumed after a
//! backoff with `re-stream` and the newest accepted `eventSeq` (while no event arrived at all,
//! the start itself is re-sent: partners answer a re-sent start like the original). When that
//! is impossible (events expired, no stream support, attempts exhausted) the task is polled.

use super::view::Ended;
use super::{
    AbandonReason, CallError, HttpRequest, Leader, LeaderEvent, LeaderOutput, LeaderTimer,
};
use crate::engine::{CallId, Clock as _};
use crate::error::ErrorCode;
use crate::sse::SseDecoder;
use crate::wire::{
    decode_rpc_response, decode_stream_event, encode_command_request, CommandKind, Method,
    RpcResult,
};

/// One open stream connection.
#[derive(Debug)]
pub(crate) struct StreamConn {
    task_id: String,
    decoder: SseDecoder,
    /// The newest `eventSeq` on this connection.
    conn_last: u64,
}

impl Leader {
    /// The first stream of a task: `stream` with the start command.
    pub(super) fn open_start_stream(&mut self, task_id: &str) {
        let Some(t) = self.tasks.get(task_id) else {
            return;
        };
        let (d, items) = (t.dialect, t.data_items.clone());
        let params = t.params.to_params(d);
        let c = self.command(task_id, CommandKind::Start, items, Some(params));
        let rpc_id = self.rpc_id();
        let body = encode_command_request(&rpc_id, &Method::Stream, &c, d);
        if let Some(t) = self.tasks.get_mut(task_id) {
            t.start_body = Some(body.clone());
        }
        self.open_stream_call(task_id, body);
    }

    /// Resumes (or opens) a task's stream now: the application's way to ask for live events.
    pub fn open_stream(
        &mut self,
        now: crate::time::Timestamp,
        task_id: &str,
    ) -> Result<(), crate::error::UsageError> {
        self.core.advance(now);
        self.live(task_id)?;
        self.reconnect(task_id);
        Ok(())
    }

    /// `re-stream` after the newest accepted event (or the start again, if none came).
    pub(super) fn reconnect(&mut self, task_id: &str) {
        let Some(t) = self.tasks.get(task_id) else {
            return;
        };
        if t.ended.is_some() || t.stream.is_some() {
            return;
        }
        let body = match (&t.start_body, t.last_seq) {
            (Some(b), 0) => b.clone(),
            _ => {
                let (d, last) = (t.dialect, t.last_seq);
                let mut params = crate::wire::JsonObject::new();
                params.insert(
                    "lastEventSeq".into(),
                    if last == 0 {
                        serde_json::Value::Null
                    } else {
                        last.into()
                    },
                );
                let c = self.command(task_id, CommandKind::ReStream, Vec::new(), None);
                let c = crate::wire::TaskCommand {
                    command_params: Some(params),
                    ..c
                };
                let rpc_id = self.rpc_id();
                encode_command_request(&rpc_id, &Method::Stream, &c, d)
            }
        };
        self.open_stream_call(task_id, body);
    }

    fn open_stream_call(&mut self, task_id: &str, body: Vec<u8>) {
        let Some(url) = self.url_of(task_id, &Method::Stream) else {
            return;
        };
        let call = self.new_attempt();
        self.streams.insert(
            call,
            StreamConn {
                task_id: task_id.to_owned(),
                decoder: SseDecoder::new(self.config.max_stream_event_bytes),
                conn_last: 0,
            },
        );
        if let Some(t) = self.tasks.get_mut(task_id) {
            t.stream = Some(call);
        }
        let at = self.core.at(self.config.stream_idle_timeout);
        self.core
            .timers
            .set(LeaderTimer::StreamIdle(task_id.to_owned()), at);
        self.push(LeaderOutput::Send {
            call,
            request: HttpRequest {
                url,
                event_stream: true,
                body,
            },
        });
    }

    pub(super) fn on_stream_chunk(&mut self, call: CallId, data: &[u8]) {
        let Some(conn) = self.streams.get_mut(&call) else {
            return;
        };
        conn.decoder.push(data);
        let task_id = conn.task_id.clone();
        let frames: Vec<_> = std::iter::from_fn(|| conn.decoder.next_event()).collect();
        let at = self.core.at(self.config.stream_idle_timeout);
        self.core
            .timers
            .set(LeaderTimer::StreamIdle(task_id.clone()), at);
        for f in frames {
            if !self.streams.contains_key(&call) {
                break; // closed by an error frame
            }
            match f {
                Ok(ev) => self.on_frame(call, &task_id, ev.data.as_bytes()),
                Err(e) => self.event(LeaderEvent::PeerMisbehaved {
                    task_id: task_id.clone(),
                    detail: format!("stream: {e}"),
                }),
            }
        }
    }

    fn on_frame(&mut self, call: CallId, task_id: &str, data: &[u8]) {
        let resp = match decode_stream_event(data) {
            Ok(r) => r,
            Err(e) => {
                return self.event(LeaderEvent::PeerMisbehaved {
                    task_id: task_id.to_owned(),
                    detail: format!("stream event: {e}"),
                })
            }
        };
        let (ev, _) = match resp.outcome {
            Ok(ev) => ev,
            Err(e) => {
                // An error frame (expired events, or anything else) ends this stream for good.
                self.drop_stream(call);
                return self.stream_lost(task_id, CallError::Rpc(e));
            }
        };
        let Some(conn) = self.streams.get_mut(&call) else {
            return;
        };
        if ev.seq <= conn.conn_last {
            let detail = format!("eventSeq {} after {} on one stream", ev.seq, conn.conn_last);
            return self.event(LeaderEvent::PeerMisbehaved {
                task_id: task_id.to_owned(),
                detail,
            });
        }
        conn.conn_last = ev.seq;
        if ev.data.task_id().is_some_and(|id| id != task_id) {
            return self.event(LeaderEvent::PeerMisbehaved {
                task_id: task_id.to_owned(),
                detail: "stream event about another task".into(),
            });
        }
        let Some(t) = self.tasks.get_mut(task_id) else {
            return;
        };
        t.restream_attempts = 0;
        if !t.accept_seq(ev.seq) {
            return; // replayed: seen before
        }
        self.apply_event(task_id, ev.data);
    }

    /// The stream ended (the partner closed it, or it broke).
    pub(super) fn on_stream_ended(&mut self, call: CallId) {
        self.on_stream_broken(call);
    }

    pub(super) fn on_stream_broken(&mut self, call: CallId) {
        let Some(conn) = self.streams.remove(&call) else {
            return;
        };
        self.after_stream(&conn.task_id, call);
    }

    pub(super) fn on_stream_idle(&mut self, task_id: &str) {
        let Some(call) = self.tasks.get(task_id).and_then(|t| t.stream) else {
            return;
        };
        self.drop_stream(call);
        self.after_stream(task_id, call);
    }

    /// Closes a connection from our side.
    pub(super) fn drop_stream(&mut self, call: CallId) {
        if let Some(conn) = self.streams.remove(&call) {
            if let Some(t) = self.tasks.get_mut(&conn.task_id) {
                if t.stream == Some(call) {
                    t.stream = None;
                }
            }
            self.core
                .timers
                .cancel(&LeaderTimer::StreamIdle(conn.task_id));
            self.push(LeaderOutput::Abort { call });
        }
    }

    /// After a connection is gone: resume it if the task is live.
    fn after_stream(&mut self, task_id: &str, call: CallId) {
        let Some(t) = self.tasks.get_mut(task_id) else {
            return;
        };
        if t.stream == Some(call) {
            t.stream = None;
        }
        self.core
            .timers
            .cancel(&LeaderTimer::StreamIdle(task_id.to_owned()));
        if t.ended.is_some() || t.stream_lost {
            return;
        }
        t.restream_attempts += 1;
        let attempts = t.restream_attempts;
        let policy = self.config.restream;
        let will_retry = attempts <= policy.attempts;
        self.event(LeaderEvent::StreamDropped {
            task_id: task_id.to_owned(),
            will_retry,
        });
        if will_retry {
            let at = self.core.at(policy.backoff(attempts));
            self.core
                .timers
                .set(LeaderTimer::Restream(task_id.to_owned()), at);
        } else {
            self.stream_lost(
                task_id,
                CallError::Transport("re-stream attempts exhausted".into()),
            );
        }
    }

    /// The stream cannot be resumed: poll instead, starting now.
    fn stream_lost(&mut self, task_id: &str, error: CallError) {
        let Some(t) = self.tasks.get_mut(task_id) else {
            return;
        };
        if t.ended.is_some() {
            return;
        }
        t.stream_lost = true;
        self.event(LeaderEvent::StreamLost {
            task_id: task_id.to_owned(),
            error,
        });
        self.poll_task(task_id);
    }

    /// A stream call answered with a plain response (an error, or a partner without SSE).
    pub(super) fn on_stream_response(&mut self, call: CallId, status: u16, body: &[u8]) {
        let Some(conn) = self.streams.remove(&call) else {
            return;
        };
        let task_id = conn.task_id;
        if let Some(t) = self.tasks.get_mut(&task_id) {
            if t.stream == Some(call) {
                t.stream = None;
            }
        }
        self.core
            .timers
            .cancel(&LeaderTimer::StreamIdle(task_id.clone()));
        if matches!(status, 408 | 429 | 502 | 503 | 504) {
            return self.after_stream(&task_id, call);
        }
        let unstarted = self.tasks.get(&task_id).is_some_and(|t| {
            t.start_ticket.is_some() && t.status.is_none() && t.last_seq == 0 && t.ended.is_none()
        });
        if unstarted && matches!(status, 404 | 405 | 501) {
            // The partner has no stream endpoint, so the start never reached it: start over
            // rpc and follow by polling instead of abandoning a task that never began.
            if let Some(t) = self.tasks.get_mut(&task_id) {
                t.stream_lost = true;
                t.start_body = None;
            }
            self.event(LeaderEvent::StreamLost {
                task_id: task_id.clone(),
                error: CallError::http(status, body),
            });
            self.send_start(&task_id, Method::Rpc, None);
            self.arm_poll(&task_id);
            return;
        }
        match decode_rpc_response(body) {
            Ok(r) => match r.outcome {
                Ok((RpcResult::Task(t), _)) => {
                    self.apply_result(&task_id, *t, false);
                    self.stream_lost(
                        &task_id,
                        CallError::Mismatch("a task instead of a stream".into()),
                    );
                }
                Ok((RpcResult::Message(m), _)) => {
                    self.event(LeaderEvent::Message {
                        task_id: task_id.clone(),
                        message: m.clone(),
                    });
                    self.answer_start(&task_id, Ok(RpcResult::Message(m)));
                }
                Err(e) if e.code == ErrorCode::TaskNotFound => {
                    let live = self.tasks.get(&task_id).is_some_and(|t| t.ended.is_none());
                    if live {
                        self.event(LeaderEvent::CallFailed {
                            task_id: task_id.clone(),
                            method: Method::Stream,
                            command: None,
                            error: CallError::Rpc(e.clone()),
                        });
                        self.answer_start(&task_id, Err(CallError::Rpc(e)));
                        self.end(&task_id, Ended::Abandoned(AbandonReason::UnknownAtPartner));
                    }
                }
                Err(e) => self.stream_lost(&task_id, CallError::Rpc(e)),
            },
            Err(e) => {
                let error = if (200..300).contains(&status) {
                    CallError::Decode(e)
                } else {
                    CallError::http(status, body)
                };
                self.stream_lost(&task_id, error);
            }
        }
    }
}
