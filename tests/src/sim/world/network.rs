//! The network model: HTTP calls with latency, loss and timeouts, and event streams that
//! can be cut.

use super::*;

impl World {
    pub(super) fn send_call(
        &mut self,
        exec: usize,
        id: DelegationId,
        kind: CallKind,
        body: Request,
    ) {
        self.next_call += 1;
        let call = self.next_call;
        self.log(|| format!("call {call} {kind:?} {id} -> exec{exec}"));
        self.calls.insert(call, Call { exec, id, kind });
        let f = self.cfg.faults.clone();
        if self.rng.chance(f.req_loss) {
            self.log(|| format!("call {call} lost"));
            self.bump("request lost");
        } else {
            // The known engine bug `sim::KNOWN_BUG_LATE_DUPLICATE_CONTINUE`: no duplicate CONTINUE.
            let no_dup = self.cfg.known_bugs.late_duplicate_continue
                && kind == CallKind::Out(Outbound::Continue);
            let copies = if self.rng.chance(f.dup) && !no_dup {
                self.bump("request duplicated");
                2
            } else {
                1
            };
            for _ in 0..copies {
                let at = self.now + self.latency();
                self.schedule(
                    at,
                    Ev::CallArrive {
                        call,
                        exec,
                        body: body.clone(),
                    },
                );
            }
        }
        self.schedule(
            self.now + HTTP_TIMEOUT_MS,
            Ev::CallFail {
                call,
                why: "timeout",
            },
        );
    }

    pub(super) fn answer(&mut self, call: u64, resp: Result<Response, &'static str>) {
        let Some(c) = self.calls.remove(&call) else {
            return; // answered already (duplicate, or the timeout won)
        };
        self.log(|| {
            format!(
                "call {call} answered: {}",
                match &resp {
                    Ok(r) => response_summary(r),
                    Err(w) => format!("failed ({w})"),
                }
            )
        });
        let _ = c.exec;
        match c.kind {
            CallKind::Out(to) => {
                let reply = match resp {
                    Ok(Response::Accept(a, _)) => Reply::Accept(Box::new(a)),
                    Ok(Response::Error { message, .. }) => Reply::Error(message.error),
                    Ok(Response::Ok | Response::Cancelled) => Reply::Ok,
                    Ok(Response::Result(_)) => {
                        Reply::Failed(RequestFailure::Unusable("unexpected result body".into()))
                    }
                    Err(w) => Reply::Failed(request_failure(w)),
                };
                if let Reply::Error(e) = &reply {
                    if e.code == ErrorCode::Declined && to == Outbound::Invite {
                        self.declined += 1;
                        self.bump("invite declined");
                    }
                }
                if to == Outbound::Invite && matches!(reply, Reply::Accept(_)) {
                    let i = self.idx(&c.id);
                    self.dels[i].accepted = true;
                }
                self.del_input(DelegatorInput::Reply {
                    id: c.id,
                    to,
                    reply,
                });
            }
            CallKind::Fetch => {
                let result = match resp {
                    Ok(Response::Result(b)) => Ok(match b.status {
                        ResultStatus::Running => FetchedResult::Running,
                        ResultStatus::Completed => FetchedResult::Completed {
                            outcome: b.outcome.unwrap_or_default(),
                            snapshot: b.snapshot.map(Box::new),
                        },
                        ResultStatus::Error => FetchedResult::Error(
                            b.error
                                .unwrap_or_else(|| ErrorInfo::new(ErrorCode::TaskFailed, "failed")),
                        ),
                        ResultStatus::NotFound => FetchedResult::NotFound,
                    }),
                    Ok(Response::Error { status: 404, .. }) => Ok(FetchedResult::NotFound),
                    Ok(r) => Err(RequestFailure::Unusable(format!(
                        "unexpected answer {}",
                        response_summary(&r)
                    ))),
                    Err(w) => Err(request_failure(w)),
                };
                self.del_input(DelegatorInput::ResultFetched { id: c.id, result });
            }
        }
    }

    // ------------------------------------------------------------------------------------
    // SSE

    pub(super) fn stream_arrive(&mut self, s: u64) {
        let Some(st) = self.streams.get(&s) else {
            return; // the delegator closed it meanwhile
        };
        let (exec, id, last_event_id) = (st.exec, st.id.clone(), st.resume_after);
        if self.execs[exec].engine.is_none() {
            self.push_stream(s, StreamItem::Closed("connection refused"));
            return;
        }
        let inc = self.execs[exec].inc;
        if last_event_id.is_some() {
            self.bump("sse resumed");
        }
        self.streams.get_mut(&s).expect("exists").subscribed = Some(inc);
        self.push_stream(s, StreamItem::Opened);
        self.exec_input(
            exec,
            ExecutorInput::Subscribe {
                stream: StreamId(s),
                credential: self.credential_for(&id),
                id,
                last_event_id,
            },
        );
    }

    /// Schedules `item` on connection `s`, after everything already sent on it.
    pub(super) fn push_stream(&mut self, s: u64, item: StreamItem) {
        let lat = self.latency().min(2_000);
        let Some(st) = self.streams.get_mut(&s) else {
            return;
        };
        let at = (self.now + lat).max(st.fifo_at);
        st.fifo_at = at;
        self.schedule(at, Ev::StreamDeliver(s, item));
    }

    pub(super) fn stream_deliver(&mut self, s: u64, item: StreamItem) {
        let Some(st) = self.streams.get(&s) else {
            return;
        };
        let id = st.id.clone();
        let resume_after = st.resume_after;
        if self.cur_stream.get(&id) != Some(&s) {
            return;
        }
        match item {
            StreamItem::Opened => self.del_input(DelegatorInput::EventStreamOpened { id }),
            StreamItem::Event(ev, event_id) => {
                self.log(|| format!("sse {s} {} for {id}", ev.kind.type_str()));
                if let (Some(n), Some(e)) = (resume_after, event_id) {
                    if e <= n {
                        // WIRE.md §4.6: a resumed stream carries only what came after.
                        self.violate(format!(
                            "{id}: stream {s} resumed after event {n} carried event {e} again"
                        ));
                    }
                }
                if let awcp_proto::TaskEventKind::RoundDone(r) = &ev.kind {
                    let i = self.idx(&id);
                    let running = self
                        .delegator
                        .get(&id)
                        .filter(|v| v.state == DelegationState::Running && v.round > r.round);
                    if running.is_some() {
                        // The known engine bug (`sim::KNOWN_BUG_STALE_ROUND_DONE`).
                        self.log(|| format!("{id}: stale round_done of round {}", r.round));
                        self.bump("stale round_done reached a running delegation (known bug)");
                        self.dels[i].stale_round_done = true;
                    }
                    self.dels[i].last_round_done =
                        Some((r.round, r.recommended_snapshot_id.clone(), self.del_inc));
                }
                self.del_input(DelegatorInput::TaskEvent {
                    event: ev,
                    event_id,
                });
            }
            StreamItem::Closed(why) => {
                self.cur_stream.remove(&id);
                self.streams.remove(&s);
                self.log(|| format!("sse {s} closed ({why})"));
                self.del_input(DelegatorInput::EventStreamClosed {
                    id,
                    reason: Some(why.to_owned()),
                });
            }
        }
    }

    /// The executor side of stream `s` notices its connection is gone (if it had accepted it).
    pub(super) fn exec_notices_cut(&mut self, s: u64, st: &SimStream) {
        if let Some(inc) = st.subscribed {
            self.exec_local(
                st.exec,
                inc,
                ExecutorInput::StreamClosed {
                    stream: StreamId(s),
                },
            );
        }
    }

    /// The connection breaks: both sides notice, whatever was in flight is lost.
    pub(super) fn cut(&mut self, s: u64) {
        let Some(st) = self.streams.remove(&s) else {
            return;
        };
        self.bump("sse cut");
        self.log(|| format!("sse {s} of {} cut", st.id));
        self.exec_notices_cut(s, &st);
        if self.cur_stream.get(&st.id) == Some(&s) {
            self.cur_stream.remove(&st.id);
            self.del_input(DelegatorInput::EventStreamClosed {
                id: st.id,
                reason: Some("connection reset".into()),
            });
        }
    }

    // ------------------------------------------------------------------------------------
    // Executor crash
}

/// A failed call as a driver reports it: a timeout, a refused connection, or another breakage.
fn request_failure(why: &str) -> RequestFailure {
    match why {
        "timeout" => RequestFailure::TimedOut(why.to_owned()),
        "connection refused" => RequestFailure::Unreachable(why.to_owned()),
        _ => RequestFailure::Network(why.to_owned()),
    }
}
