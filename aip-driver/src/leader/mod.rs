//! The leader side: one task owns the [`Leader`] engine and executes its outputs (HTTP calls,
//! streams read frame by frame, aborts, answers to notification POSTs).
//!
//! Commands resolve with the partner's answer ([`LeaderEvent::Answered`] of the engine);
//! everything else the engine does on its own (re-streams, polling, retries with the same
//! message id, deadlines) and reports in [`LeaderEvents`].

mod receiver;

use std::collections::BTreeMap;

use agent_rt::{ClientTls, HttpClient, Runtime};
use aip_proto::engine::{CallId, RequestId};
use aip_proto::leader::{
    AbandonReason, AttachTask, CallError, HttpRequest, Leader, LeaderConfig, LeaderEvent,
    LeaderInput, LeaderOutput, PartnerEndpoint, StartTask, Ticket,
};
use aip_proto::{
    DataItem, Product, RpcResult, TaskCommand, TaskResult, TaskState, TaskStatus, Timestamp,
    UsageError,
};
use bytes::Bytes;
use futures::channel::{mpsc, oneshot};
use http_body_util::BodyExt;

use aip_proto::drive::{self, Wake};

use crate::{next_wake, now, Woke};

/// Everything a leader needs.
#[derive(Clone, Debug)]
pub struct LeaderOptions {
    /// Engine policy (leader id, retries, polling, re-streams, deadlines, receiver URL).
    pub engine: LeaderConfig,
    /// TLS settings for `https` partners (private CA, client certificate for mTLS).
    pub client_tls: ClientTls,
    /// Largest non-stream answer read.
    pub max_response_bytes: u64,
}

impl Default for LeaderOptions {
    fn default() -> Self {
        LeaderOptions {
            engine: LeaderConfig::default(),
            client_tls: ClientTls::default(),
            max_response_bytes: 64 * 1024 * 1024,
        }
    }
}

/// Why a command has no task to show.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// The engine refused it (unknown partner or task, the task has ended, …).
    #[error(transparent)]
    Usage(#[from] UsageError),
    /// The partner answered with an error, or did not answer (after the retries).
    #[error("{0}")]
    Call(CallError),
    /// A v01.00 partner answered with a `Message` instead of a `Task`.
    #[error("the partner answered with a message, not a task")]
    NotATask(Box<TaskCommand>),
    /// The leader's engine task has stopped.
    #[error("the leader has stopped")]
    Stopped,
}

impl LeaderError {
    /// The JSON-RPC error the partner answered with, if that is what happened.
    pub fn rpc_error(&self) -> Option<&aip_proto::RpcError> {
        match self {
            LeaderError::Call(CallError::Rpc(e)) => Some(e),
            _ => None,
        }
    }
}

/// A task as the leader observes it (an owned copy of the engine's view).
#[derive(Clone, Debug, PartialEq)]
pub struct TaskSnapshot {
    /// The task id.
    pub id: String,
    /// The partner.
    pub partner: String,
    /// The observed state (`None` before the first answer).
    pub state: Option<TaskState>,
    /// The observed status.
    pub status: Option<TaskStatus>,
    /// The products as last received.
    pub products: Vec<Product>,
    /// The newest stream event accepted (0: none).
    pub last_event_seq: u64,
    /// Whether the leader follows the task no more.
    pub ended: bool,
    /// Why it was abandoned, if it was.
    pub abandoned: Option<AbandonReason>,
    /// Whether the stream could not be resumed (the task is polled instead).
    pub stream_lost: bool,
}

/// What the engine reports, in order. Read it (or drop it: events are then discarded).
pub type LeaderEvents = mpsc::UnboundedReceiver<LeaderEvent>;

type Answer = Result<TaskResult, LeaderError>;
type EngineFn = Box<dyn FnOnce(&mut Leader, Timestamp) + Send>;
type CommandFn = Box<dyn FnOnce(&mut Leader, Timestamp) -> Result<Ticket, UsageError> + Send>;

enum Cmd {
    Engine(EngineFn),
    Command {
        f: CommandFn,
        reply: oneshot::Sender<Answer>,
    },
    Notification {
        token: Option<String>,
        body: Vec<u8>,
        reply: oneshot::Sender<u16>,
    },
}

/// A cheap handle to a running leader.
#[derive(Clone)]
pub struct LeaderHandle {
    tx: mpsc::UnboundedSender<Cmd>,
}

impl std::fmt::Debug for LeaderHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderHandle").finish_non_exhaustive()
    }
}

impl LeaderHandle {
    /// Starts the engine task on `rt`. It runs until every handle is dropped; then its calls
    /// and streams are dropped too.
    ///
    /// An `id_seed` of 0 (the default) is replaced by a random one ([`crate::seed_or_random`]):
    /// the notification tokens the leader mints come from it.
    pub fn spawn<R: Runtime>(rt: R, mut opts: LeaderOptions) -> (LeaderHandle, LeaderEvents) {
        opts.engine.id_seed = crate::seed_or_random(opts.engine.id_seed);
        let (tx, rx) = mpsc::unbounded();
        let (events_tx, events_rx) = mpsc::unbounded();
        let (internal_tx, internal_rx) = mpsc::unbounded();
        let lp = Loop {
            client: HttpClient::new(rt.clone(), opts.client_tls),
            engine: Leader::new(opts.engine),
            rt: rt.clone(),
            internal: internal_tx,
            events: events_tx,
            aborts: BTreeMap::new(),
            waiters: BTreeMap::new(),
            notifications: BTreeMap::new(),
            next_request: 0,
            max_response_bytes: opts.max_response_bytes,
        };
        rt.spawn(Box::pin(lp.run(rx, internal_rx)));
        (LeaderHandle { tx }, events_rx)
    }

    async fn with_engine<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Leader, Timestamp) -> T + Send + 'static,
    ) -> Result<T, LeaderError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .unbounded_send(Cmd::Engine(Box::new(move |l, now| {
                let _ = tx.send(f(l, now));
            })))
            .map_err(|_| LeaderError::Stopped)?;
        rx.await.map_err(|_| LeaderError::Stopped)
    }

    async fn command(
        &self,
        f: impl FnOnce(&mut Leader, Timestamp) -> Result<Ticket, UsageError> + Send + 'static,
    ) -> Answer {
        let (reply, rx) = oneshot::channel();
        self.tx
            .unbounded_send(Cmd::Command {
                f: Box::new(f),
                reply,
            })
            .map_err(|_| LeaderError::Stopped)?;
        rx.await.map_err(|_| LeaderError::Stopped)?
    }

    /// Registers (or updates) a partner.
    pub async fn add_partner(
        &self,
        id: impl Into<String>,
        endpoint: PartnerEndpoint,
    ) -> Result<(), LeaderError> {
        let id = id.into();
        self.with_engine(move |l, _| l.add_partner(id, endpoint))
            .await
    }

    /// Starts a task; resolves with the partner's first answer (the `rpc` or
    /// `notification/start` reply, or the stream's first event).
    pub async fn start(&self, task: StartTask) -> Answer {
        self.command(move |l, now| l.start(now, task)).await
    }

    /// Follows a task started elsewhere (see [`Leader::attach`]).
    pub async fn attach(&self, task: AttachTask) -> Result<(), LeaderError> {
        Ok(self
            .with_engine(move |l, now| l.attach(now, task))
            .await??)
    }

    /// `continue` with more input; resolves with the answer.
    pub async fn continue_task(&self, task_id: &str, items: Vec<DataItem>) -> Answer {
        let id = task_id.to_owned();
        self.command(move |l, now| l.continue_task(now, &id, items))
            .await
    }

    /// `complete`; resolves with the answer.
    pub async fn complete(&self, task_id: &str) -> Answer {
        let id = task_id.to_owned();
        self.command(move |l, now| l.complete(now, &id)).await
    }

    /// `cancel`; resolves with the answer.
    pub async fn cancel(&self, task_id: &str) -> Answer {
        let id = task_id.to_owned();
        self.command(move |l, now| l.cancel(now, &id)).await
    }

    /// `get` with full histories; resolves with the answer.
    pub async fn get(&self, task_id: &str) -> Answer {
        let id = task_id.to_owned();
        self.command(move |l, now| l.get(now, &id)).await
    }

    /// Opens (or resumes) a task's stream now.
    pub async fn open_stream(&self, task_id: &str) -> Result<(), LeaderError> {
        let id = task_id.to_owned();
        Ok(self
            .with_engine(move |l, now| l.open_stream(now, &id))
            .await??)
    }

    /// The task as observed (`None`: unknown or forgotten after its retention).
    pub async fn task(&self, task_id: &str) -> Result<Option<TaskSnapshot>, LeaderError> {
        let id = task_id.to_owned();
        self.with_engine(move |l, _| {
            l.task(&id).map(|v| TaskSnapshot {
                id: v.id.to_owned(),
                partner: v.partner.to_owned(),
                state: v.state,
                status: v.status.cloned(),
                products: v.products.to_vec(),
                last_event_seq: v.last_event_seq,
                ended: v.ended,
                abandoned: v.abandoned.cloned(),
                stream_lost: v.stream_lost,
            })
        })
        .await
    }

    /// Calls in flight or waiting for a retry, and open streams.
    pub async fn calls_in_flight(&self) -> Result<usize, LeaderError> {
        self.with_engine(|l, _| l.calls_in_flight()).await
    }

    pub(crate) async fn notification(&self, token: Option<String>, body: Vec<u8>) -> Option<u16> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .unbounded_send(Cmd::Notification { token, body, reply })
            .ok()?;
        rx.await.ok()
    }
}

struct Loop<R: Runtime> {
    rt: R,
    engine: Leader,
    client: HttpClient<R>,
    internal: mpsc::UnboundedSender<LeaderInput>,
    events: mpsc::UnboundedSender<LeaderEvent>,
    /// Calls in flight: dropping the sender stops the call.
    aborts: BTreeMap<CallId, oneshot::Sender<()>>,
    /// Commands waiting for their answer.
    waiters: BTreeMap<Ticket, oneshot::Sender<Answer>>,
    /// Notification POSTs waiting for their status.
    notifications: BTreeMap<RequestId, oneshot::Sender<u16>>,
    next_request: u64,
    max_response_bytes: u64,
}

impl<R: Runtime> drive::Host for Loop<R> {
    type Engine = Leader;
    fn engine(&mut self) -> Option<&mut Leader> {
        Some(&mut self.engine)
    }
    fn execute(&mut self, output: LeaderOutput) {
        Loop::execute(self, output);
    }
}

impl<R: Runtime> Loop<R> {
    /// The canonical drive loop ([`aip_proto::drive`]): one turn per wake-up.
    async fn run(
        mut self,
        mut rx: mpsc::UnboundedReceiver<Cmd>,
        mut internal: mpsc::UnboundedReceiver<LeaderInput>,
    ) {
        let mut wake = Wake::Drained;
        loop {
            let at = now(&self.rt);
            let deadline = drive::turn(&mut self, at, wake);
            wake = match next_wake(&self.rt, deadline, &mut rx, &mut internal).await {
                Woke::Cmd(c) => self.on_cmd(c),
                Woke::Internal(input) => self.on_input(input),
                Woke::Timer => Wake::Timeout,
                Woke::Stop => break,
            };
        }
        tracing::debug!("leader stopped: every handle was dropped");
    }

    /// An answer of a call: the call is over, so is its abort sender.
    fn on_input(&mut self, input: LeaderInput) -> Wake<LeaderInput> {
        if let LeaderInput::Response { call, .. }
        | LeaderInput::StreamEnded { call }
        | LeaderInput::Failed { call, .. } = &input
        {
            self.aborts.remove(call);
        }
        Wake::Input(input)
    }

    /// What a command wakes the engine with: a notification POST as its input, an
    /// application call made here (then only drained).
    fn on_cmd(&mut self, cmd: Cmd) -> Wake<LeaderInput> {
        let now = now(&self.rt);
        match cmd {
            Cmd::Engine(f) => f(&mut self.engine, now),
            Cmd::Command { f, reply } => match f(&mut self.engine, now) {
                Ok(ticket) => {
                    self.waiters.insert(ticket, reply);
                }
                Err(e) => {
                    let _ = reply.send(Err(LeaderError::Usage(e)));
                }
            },
            Cmd::Notification { token, body, reply } => {
                self.next_request += 1;
                let request = RequestId(self.next_request);
                self.notifications.insert(request, reply);
                return Wake::Input(LeaderInput::Notification {
                    request,
                    token,
                    body,
                });
            }
        }
        Wake::Drained
    }

    fn execute(&mut self, o: LeaderOutput) {
        match o {
            LeaderOutput::Send { call, request } => self.send(call, request),
            LeaderOutput::Abort { call } => {
                self.aborts.remove(&call);
            }
            LeaderOutput::RespondNotification { request, status } => {
                if let Some(tx) = self.notifications.remove(&request) {
                    let _ = tx.send(status);
                }
            }
            LeaderOutput::Event(e) => {
                if let LeaderEvent::Answered {
                    ticket, outcome, ..
                } = &e
                {
                    if let Some(tx) = self.waiters.remove(ticket) {
                        let _ = tx.send(match outcome {
                            Ok(RpcResult::Task(t)) => Ok((**t).clone()),
                            Ok(RpcResult::Message(m)) => Err(LeaderError::NotATask(m.clone())),
                            Err(e) => Err(LeaderError::Call(e.clone())),
                        });
                    }
                }
                let _ = self.events.unbounded_send(e);
            }
        }
    }

    /// Runs one call in the background: a whole answer, or a stream read chunk by chunk.
    fn send(&mut self, call: CallId, request: HttpRequest) {
        let (abort_tx, abort_rx) = oneshot::channel::<()>();
        self.aborts.insert(call, abort_tx);
        let client = self.client.clone();
        let tx = self.internal.clone();
        let limit = self.max_response_bytes;
        let work = async move {
            let headers: Vec<(&str, String)> = aip_proto::http::request_headers(&request)
                .iter()
                .map(|(k, v)| (*k, (*v).to_owned()))
                .collect();
            let resp = match client
                .send(
                    ::http::Method::POST,
                    &request.url,
                    &headers,
                    Some(Bytes::from(request.body)),
                )
                .await
            {
                Ok(r) => r,
                Err(e) => {
                    let reason = e.to_string();
                    let _ = tx.unbounded_send(LeaderInput::Failed { call, reason });
                    return;
                }
            };
            let status = resp.status().as_u16();
            let content_type = resp
                .headers()
                .get(::http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            if status == 200 && aip_proto::http::is_event_stream(content_type.as_deref()) {
                let mut body = resp.into_body();
                while let Some(frame) = body.frame().await {
                    let Ok(frame) = frame else { break };
                    if let Ok(data) = frame.into_data() {
                        let data = data.to_vec();
                        if tx
                            .unbounded_send(LeaderInput::StreamChunk { call, data })
                            .is_err()
                        {
                            return;
                        }
                    }
                }
                let _ = tx.unbounded_send(LeaderInput::StreamEnded { call });
                return;
            }
            let input = match agent_rt::body::read_body(resp.into_body(), limit).await {
                Ok(body) => LeaderInput::Response {
                    call,
                    status,
                    content_type,
                    body: body.to_vec(),
                },
                Err(e) => LeaderInput::Failed {
                    call,
                    reason: format!("reading the answer: {e}"),
                },
            };
            let _ = tx.unbounded_send(input);
        };
        self.rt.spawn(Box::pin(async move {
            let work = std::pin::pin!(work);
            // The call ends when its work does, or when the loop drops its abort sender.
            let _ = futures::future::select(work, abort_rx).await;
        }));
    }
}
