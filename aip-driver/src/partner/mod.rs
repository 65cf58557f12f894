//! The partner side: one task owns the [`Partner`] engine and executes its outputs; the HTTP
//! handler ([`PartnerHandle::handle_http`]) and the application talk to it through a channel.
//!
//! The application reads [`PartnerEvents`] (a task started, was continued, ended, …) and
//! moves tasks with the handle's methods; each is one engine call, answered at once.
//!
//! Streams: each open stream buffers at most [`PartnerOptions::stream_queue`] frames for its
//! client. A client that falls that far behind is cut off (its stream closes cleanly); a
//! leader resumes with `re-stream` from the last event it saw, so nothing is lost and a slow
//! reader costs the partner a bounded amount of memory.

pub(crate) mod http;

use std::collections::BTreeMap;
use std::time::Duration;

use agent_rt::{ClientTls, HttpClient, Runtime};
use aip_proto::engine::{DeliveryId, HttpResponse, RequestId};
use aip_proto::partner::{
    DeliveryOutcome, Partner, PartnerConfig, PartnerEvent, PartnerInput, PartnerOutput,
};
use aip_proto::{DataItem, Product, TaskResult, TaskState, Timestamp, UsageError};
use bytes::Bytes;
use futures::channel::{mpsc, oneshot};

use aip_proto::drive::{self, Wake};

use crate::{next_wake, now, Woke};

/// Everything a partner needs.
#[derive(Clone, Debug)]
pub struct PartnerOptions {
    /// Engine policy (partner id, timeouts, limits, stream buffer, notification retries).
    pub engine: PartnerConfig,
    /// Where the AIP endpoints live: `""` serves `/rpc`, `/stream`, `/notification/…`;
    /// `"/aip"` serves `/aip/rpc`, … (and `/aip` itself as an `rpc` endpoint).
    pub base_path: String,
    /// TLS settings for notification POSTs to `https` receivers (private CA, client
    /// certificate).
    pub client_tls: ClientTls,
    /// Frames buffered per open stream before a client that does not read is cut off.
    pub stream_queue: usize,
    /// Which requests are refused as ones a web page made a browser send (cross-site, DNS
    /// rebinding); by default every `Host` that is not an IP address or `localhost`.
    pub guard: aip_proto::http::RequestGuard,
}

impl Default for PartnerOptions {
    fn default() -> Self {
        PartnerOptions {
            engine: PartnerConfig::default(),
            base_path: String::new(),
            client_tls: ClientTls::default(),
            stream_queue: 1024,
            guard: aip_proto::http::RequestGuard::default(),
        }
    }
}

/// Why an application call did nothing.
#[derive(Debug, thiserror::Error)]
pub enum PartnerError {
    /// The engine refused it (unknown task, a transition the table does not have, …).
    #[error(transparent)]
    Usage(#[from] UsageError),
    /// The partner's engine task has stopped.
    #[error("the partner has stopped")]
    Stopped,
}

/// Counts of what a partner holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartnerStatus {
    /// Tasks held (live and ended, not yet purged).
    pub tasks: usize,
    /// Open streams.
    pub open_streams: usize,
    /// Notifications queued or in flight.
    pub pending_notifications: usize,
}

/// What the engine tells the application, in order. Read it (or drop it: events are then
/// discarded).
pub type PartnerEvents = mpsc::UnboundedReceiver<PartnerEvent>;

type EngineFn = Box<dyn FnOnce(&mut Partner, Timestamp) + Send>;

enum Cmd {
    Request {
        body: Vec<u8>,
        reply: oneshot::Sender<Reply>,
    },
    Engine(EngineFn),
}

enum Internal {
    Delivered {
        delivery: DeliveryId,
        outcome: DeliveryOutcome,
    },
}

/// How the engine answered a request.
pub(crate) enum Reply {
    Full(HttpResponse),
    Stream(mpsc::Receiver<Bytes>),
}

/// A cheap handle to a running partner.
#[derive(Clone)]
pub struct PartnerHandle {
    tx: mpsc::UnboundedSender<Cmd>,
    base_path: String,
    max_request_bytes: usize,
    guard: std::sync::Arc<aip_proto::http::RequestGuard>,
}

impl std::fmt::Debug for PartnerHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartnerHandle")
            .field("base_path", &self.base_path)
            .finish_non_exhaustive()
    }
}

impl PartnerHandle {
    /// Starts the engine task on `rt`. It runs until every handle is dropped.
    ///
    /// An `id_seed` of 0 (the default) is replaced by a random one ([`crate::seed_or_random`]):
    /// it keys the engine's maps of leader-chosen task ids.
    pub fn spawn<R: Runtime>(rt: R, mut opts: PartnerOptions) -> (PartnerHandle, PartnerEvents) {
        opts.engine.id_seed = crate::seed_or_random(opts.engine.id_seed);
        let (tx, rx) = mpsc::unbounded();
        let (events_tx, events_rx) = mpsc::unbounded();
        let (internal_tx, internal_rx) = mpsc::unbounded();
        let handle = PartnerHandle {
            tx,
            base_path: opts.base_path.trim_end_matches('/').to_owned(),
            max_request_bytes: opts.engine.max_request_bytes,
            guard: std::sync::Arc::new(opts.guard.clone()),
        };
        let lp = Loop {
            client: HttpClient::new(rt.clone(), opts.client_tls),
            attempt_timeout: opts.engine.notification_retry.attempt_timeout,
            engine: Partner::new(opts.engine),
            rt: rt.clone(),
            internal: internal_tx,
            events: events_tx,
            pending: BTreeMap::new(),
            streams: BTreeMap::new(),
            queue: opts.stream_queue.max(1),
            next_request: 0,
            closed: Vec::new(),
        };
        rt.spawn(Box::pin(lp.run(rx, internal_rx)));
        (handle, events_rx)
    }

    /// The base path the endpoints are served under.
    pub fn base_path(&self) -> &str {
        &self.base_path
    }

    /// Runs `f` on the engine in its task (with the current time) and returns what it
    /// returns; the outputs are executed after it. Several application calls in one `f` are
    /// atomic: e.g. with `auto_accept` off, accepting, working and submitting inside one `f`
    /// on [`PartnerEvent::StartRequested`] answers the start with awaiting-completion and its
    /// products, as partners that do the work inside the call (the SDK's) do. Keep `f` short:
    /// the engine serves nobody while it runs.
    pub async fn with_engine<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Partner, Timestamp) -> T + Send + 'static,
    ) -> Result<T, PartnerError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .unbounded_send(Cmd::Engine(Box::new(move |p, now| {
                let _ = tx.send(f(p, now));
            })))
            .map_err(|_| PartnerError::Stopped)?;
        rx.await.map_err(|_| PartnerError::Stopped)
    }

    /// One application call on task `task_id`.
    async fn task_call<T: Send + 'static>(
        &self,
        task_id: &str,
        f: impl FnOnce(&mut Partner, Timestamp, &str) -> Result<T, UsageError> + Send + 'static,
    ) -> Result<T, PartnerError> {
        let id = task_id.to_owned();
        Ok(self.with_engine(move |p, now| f(p, now, &id)).await??)
    }

    pub(crate) async fn request(&self, body: Vec<u8>) -> Option<Reply> {
        let (reply, rx) = oneshot::channel();
        self.tx.unbounded_send(Cmd::Request { body, reply }).ok()?;
        rx.await.ok()
    }

    /// Accepts a start that waits for a decision (`auto_accept` off).
    pub async fn accept(&self, task_id: &str) -> Result<(), PartnerError> {
        self.task_call(task_id, move |p, now, id| p.accept(now, id))
            .await
    }

    /// Rejects a start that waits for a decision, with an optional reason.
    pub async fn reject(&self, task_id: &str, items: Vec<DataItem>) -> Result<(), PartnerError> {
        self.task_call(task_id, move |p, now, id| p.reject(now, id, items))
            .await
    }

    /// accepted → working.
    pub async fn start_working(&self, task_id: &str) -> Result<TaskState, PartnerError> {
        self.task_call(task_id, move |p, now, id| p.start_working(now, id))
            .await
    }

    /// Progress without a state change (a status event to stream subscribers).
    pub async fn progress(&self, task_id: &str, items: Vec<DataItem>) -> Result<(), PartnerError> {
        self.task_call(task_id, move |p, now, id| p.progress(now, id, items))
            .await
    }

    /// One product chunk on the stream, recorded in the task's products.
    pub async fn product_chunk(
        &self,
        task_id: &str,
        product: Product,
        append: bool,
        last_chunk: bool,
    ) -> Result<TaskState, PartnerError> {
        self.task_call(task_id, move |p, now, id| {
            p.product_chunk(now, id, product, append, last_chunk)
        })
        .await
    }

    /// working → awaiting-input, with the question in `items`.
    pub async fn request_input(
        &self,
        task_id: &str,
        items: Vec<DataItem>,
    ) -> Result<TaskState, PartnerError> {
        self.task_call(task_id, move |p, now, id| p.request_input(now, id, items))
            .await
    }

    /// Adds products and moves working → awaiting-completion (or failed, past
    /// `maxProductsBytes`).
    pub async fn submit(
        &self,
        task_id: &str,
        products: Vec<Product>,
        items: Vec<DataItem>,
    ) -> Result<TaskState, PartnerError> {
        self.task_call(task_id, move |p, now, id| {
            p.submit(now, id, products, items)
        })
        .await
    }

    /// working → failed, with the reason in `items`.
    pub async fn fail(
        &self,
        task_id: &str,
        items: Vec<DataItem>,
    ) -> Result<TaskState, PartnerError> {
        self.task_call(task_id, move |p, now, id| p.fail(now, id, items))
            .await
    }

    /// The task as a reply would show it (`None`: unknown, or its start is undecided).
    pub async fn task(&self, task_id: &str) -> Result<Option<TaskResult>, PartnerError> {
        let id = task_id.to_owned();
        self.with_engine(move |p, _| p.snapshot(&id)).await
    }

    /// What the partner holds.
    pub async fn status(&self) -> Result<PartnerStatus, PartnerError> {
        self.with_engine(|p, _| PartnerStatus {
            tasks: p.task_count(),
            open_streams: p.open_streams(),
            pending_notifications: p.pending_notifications(),
        })
        .await
    }
}

struct Loop<R: Runtime> {
    rt: R,
    engine: Partner,
    client: HttpClient<R>,
    attempt_timeout: Duration,
    internal: mpsc::UnboundedSender<Internal>,
    events: mpsc::UnboundedSender<PartnerEvent>,
    /// Requests waiting for their answer.
    pending: BTreeMap<RequestId, oneshot::Sender<Reply>>,
    /// Open streams.
    streams: BTreeMap<RequestId, mpsc::Sender<Bytes>>,
    queue: usize,
    next_request: u64,
    /// Streams found closed while executing, fed back as inputs after the turn.
    closed: Vec<RequestId>,
}

impl<R: Runtime> drive::Host for Loop<R> {
    type Engine = Partner;
    fn engine(&mut self) -> Option<&mut Partner> {
        Some(&mut self.engine)
    }
    fn execute(&mut self, output: PartnerOutput) {
        Loop::execute(self, output);
    }
}

impl<R: Runtime> Loop<R> {
    /// The canonical drive loop ([`aip_proto::drive`]): one turn per wake-up; a stream found
    /// closed while executing is fed back as the input of the next turn.
    async fn run(
        mut self,
        mut rx: mpsc::UnboundedReceiver<Cmd>,
        mut internal: mpsc::UnboundedReceiver<Internal>,
    ) {
        let mut wake = Wake::Drained;
        loop {
            let at = now(&self.rt);
            let mut deadline = drive::turn(&mut self, at, wake);
            while let Some(request) = self.closed.pop() {
                let closed = Wake::Input(PartnerInput::StreamClosed { request });
                deadline = drive::turn(&mut self, at, closed);
            }
            // A request the engine answered as it arrived leaves no sender behind; one whose
            // client went away before the answer is dropped with its sender here.
            self.pending.retain(|_, tx| !tx.is_canceled());
            wake = match next_wake(&self.rt, deadline, &mut rx, &mut internal).await {
                Woke::Cmd(c) => self.on_cmd(c),
                Woke::Internal(Internal::Delivered { delivery, outcome }) => {
                    Wake::Input(PartnerInput::NotificationResult { delivery, outcome })
                }
                Woke::Timer => Wake::Timeout,
                Woke::Stop => break,
            };
        }
        tracing::debug!("partner stopped: every handle was dropped");
    }

    /// What a command wakes the engine with: a request as its input, an application call made
    /// here (then only drained).
    fn on_cmd(&mut self, cmd: Cmd) -> Wake<PartnerInput> {
        match cmd {
            Cmd::Request { body, reply } => {
                self.next_request += 1;
                let request = RequestId(self.next_request);
                self.pending.insert(request, reply);
                Wake::Input(PartnerInput::Request { request, body })
            }
            Cmd::Engine(f) => {
                f(&mut self.engine, now(&self.rt));
                Wake::Drained
            }
        }
    }

    fn execute(&mut self, o: PartnerOutput) {
        match o {
            PartnerOutput::Respond { request, response } => {
                if let Some(tx) = self.pending.remove(&request) {
                    let _ = tx.send(Reply::Full(response));
                }
            }
            PartnerOutput::StartStream { request } => {
                let (tx, rx) = mpsc::channel(self.queue);
                let sent = self
                    .pending
                    .remove(&request)
                    .is_some_and(|p| p.send(Reply::Stream(rx)).is_ok());
                if sent {
                    self.streams.insert(request, tx);
                } else {
                    self.closed.push(request);
                }
            }
            PartnerOutput::StreamData { request, data } => {
                if let Some(tx) = self.streams.get_mut(&request) {
                    if let Err(e) = tx.try_send(Bytes::from(data)) {
                        if e.is_full() {
                            tracing::debug!(?request, "stream client too slow; closing its stream");
                        }
                        self.streams.remove(&request);
                        self.closed.push(request);
                    }
                }
            }
            PartnerOutput::EndStream { request } => {
                self.streams.remove(&request);
            }
            PartnerOutput::Notify {
                delivery,
                url,
                token,
                body,
            } => self.notify(delivery, url, token, body),
            PartnerOutput::Event(e) => {
                let _ = self.events.unbounded_send(e);
            }
        }
    }

    fn notify(&mut self, delivery: DeliveryId, url: String, token: String, body: Vec<u8>) {
        let client = self.client.clone();
        let tx = self.internal.clone();
        let timeout = self.attempt_timeout;
        self.rt.spawn(Box::pin(async move {
            let headers = aip_proto::http::notification_headers(&token);
            let outcome = match client
                .request(
                    ::http::Method::POST,
                    &url,
                    &headers,
                    Some(Bytes::from(body)),
                    timeout,
                    64 * 1024,
                )
                .await
            {
                Ok((status, _)) => aip_proto::http::delivery_outcome(status),
                Err(e) => DeliveryOutcome::Failed(e.to_string()),
            };
            let _ = tx.unbounded_send(Internal::Delivered { delivery, outcome });
        }));
    }
}
