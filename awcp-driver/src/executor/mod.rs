//! The executor side: one task owns the [`Executor`] engine and executes its outputs; HTTP
//! handlers talk to it through a channel ([`ExecutorHandle`]).

mod http;
pub mod journal;
pub mod lock;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use awcp_proto::engine::auth::BodyLimits;
use awcp_proto::engine::executor::{
    work_root_refusal, Credential, Request, RequiredAuth, Response,
};
use awcp_proto::engine::{
    CapturedSnapshot, RequestId, StreamId, TaskHandle, TaskOutcome, UsageError,
};
use awcp_proto::{
    encode_event, sse, AllocationFailure, DelegationId, ErrorCode, ErrorInfo, Executor,
    ExecutorConfig, ExecutorEvent, ExecutorInput, ExecutorOutput, TaskFailure, TransportHandle,
    TransportKind, WorkspaceLayout,
};
use awcp_transports::archive::{ArchiveOutput, ArchiveSource, Delivery};
use awcp_transports::{
    CancelFlag, ExecutorTransport, Orphans, SetupRequest, TaskContext, TaskGroup, TaskRunner,
};
use bytes::Bytes;
use futures::channel::{mpsc, oneshot};
use futures::future::Either;
use futures::StreamExt;

use crate::card::AgentCard;
use crate::runtime::{blocking, sleep_until, Runtime};

pub use self::http::SNAPSHOT_ROUTE;
pub use self::lock::StartError;

/// Streams a file as an HTTP response with flat memory (used for archive URLs).
pub(crate) fn file_response_pub(path: PathBuf) -> ::http::Response<crate::net::ResponseBody> {
    self::http::file_response(path)
}

/// Everything an executor needs.
pub struct ExecutorOptions {
    /// Engine policy (work root, limits, auth, transports).
    pub engine: ExecutorConfig,
    /// The data-plane transport.
    pub transport: Arc<dyn ExecutorTransport>,
    /// Further transports (e.g. sshfs), chosen by the kind the delegator asks for; list their
    /// kinds in `engine.transports` too.
    pub extra_transports: Vec<Arc<dyn ExecutorTransport>>,
    /// The agent that does the work.
    pub runner: Arc<dyn TaskRunner>,
    /// Largest request body accepted (START carries inline archives).
    pub max_body_bytes: u64,
    /// With auth on: largest body read from a request without a credential header (1 MiB).
    /// Such requests are INVITEs and, from reference delegators (which send no header),
    /// STARTs with inline archives; anything larger is refused from its headers.
    pub max_unauthenticated_body_bytes: u64,
    /// SSE keepalive interval (≤ 30 s).
    pub keepalive: Duration,
    /// Base URL peers reach this executor at (`https://host:port`), for snapshot URLs
    /// (`--public-url`). `None`: each delegation's snapshot URLs are built from the origin its
    /// delegator used (the connection's scheme and the `Host` header of its INVITE/START; see
    /// [`agent_rt::origin`]).
    pub public_url: Option<String>,
    /// Honour `Forwarded` / `X-Forwarded-Proto` / `X-Forwarded-Host` when deriving a
    /// delegation's origin (set this behind a reverse proxy that sets them).
    pub trust_forwarded_headers: bool,
    /// TLS settings for fetching archives by URL from delegators (`https` archive servers:
    /// private CA, client certificate).
    pub client_tls: agent_rt::ClientTls,
    /// Timeout for fetching an archive by URL.
    pub download_timeout: Duration,
    /// The A2A agent card served at `/.well-known/agent-card.json`.
    pub card: AgentCard,
    /// Where assignment records are journalled (None: not durable, and nothing a crashed
    /// predecessor left is cleaned up). Also holds downloads and captured snapshots.
    pub state_dir: Option<PathBuf>,
}

impl ExecutorOptions {
    /// Options with defaults around the given engine config, transport and runner.
    pub fn new(
        engine: ExecutorConfig,
        transport: Arc<dyn ExecutorTransport>,
        runner: Arc<dyn TaskRunner>,
    ) -> Self {
        ExecutorOptions {
            engine,
            transport,
            extra_transports: Vec::new(),
            runner,
            max_body_bytes: 256 * 1024 * 1024,
            max_unauthenticated_body_bytes: 1024 * 1024,
            keepalive: Duration::from_secs(15),
            public_url: None,
            trust_forwarded_headers: false,
            client_tls: agent_rt::ClientTls::default(),
            download_timeout: Duration::from_secs(600),
            card: AgentCard::default(),
            state_dir: None,
        }
    }
}

pub(crate) enum Cmd {
    Request {
        credential: Option<Credential>,
        body: Request,
        reply: oneshot::Sender<Response>,
        /// The origin the peer used, remembered for the delegation if the request succeeds.
        origin: Option<(DelegationId, String)>,
    },
    Subscribe {
        id: DelegationId,
        credential: Option<Credential>,
        tx: mpsc::UnboundedSender<Bytes>,
        /// Whether the subscription was authorised (before the response status is chosen).
        verdict: oneshot::Sender<Result<(), ErrorInfo>>,
    },
    StreamClosed(StreamId),
    Input(ExecutorInput),
    Status(oneshot::Sender<awcp_proto::engine::executor::ExecutorStatus>),
    /// May this credential download this snapshot? (The engine decides.)
    AuthorizeSnapshot {
        id: DelegationId,
        snapshot_id: String,
        credential: Option<Credential>,
        verdict: oneshot::Sender<Result<(), (u16, ErrorInfo)>>,
    },
    Shutdown(oneshot::Sender<()>),
    SetPublicUrl(String),
    /// The application's decision on an INVITE (`auto_accept` off).
    Decide {
        id: DelegationId,
        /// `None` accepts; `Some(reason)` declines.
        decline: Option<ErrorInfo>,
        reply: oneshot::Sender<Result<(), UsageError>>,
    },
    /// Forward every engine event to this channel from now on.
    Events(mpsc::UnboundedSender<ExecutorEvent>),
}

/// Files of captured snapshots served by URL, keyed by (delegation, snapshot).
pub(crate) type SnapshotFiles = Arc<Mutex<BTreeMap<(String, String), PathBuf>>>;

/// A cheap handle to a running executor: mount [`ExecutorHandle::handle_http`] in any HTTP
/// server (awcp-tokio and awcp-smol do).
#[derive(Clone)]
pub struct ExecutorHandle {
    tx: mpsc::UnboundedSender<Cmd>,
    opts: Arc<SharedOpts>,
    snapshots: SnapshotFiles,
}

pub(crate) struct SharedOpts {
    pub sleep: Arc<dyn Fn(Duration) -> crate::runtime::BoxFuture<()> + Send + Sync>,
    /// The credential required, for judging headers before a body is read.
    pub auth: Option<RequiredAuth>,
    pub limits: BodyLimits,
    pub keepalive: Duration,
    pub card: AgentCard,
    /// The configured public URL (also set by [`ExecutorHandle::set_public_url`]).
    pub public_url: std::sync::RwLock<Option<String>>,
    pub trust_forwarded_headers: bool,
}

impl ExecutorHandle {
    /// Starts the engine task on `rt`, like [`ExecutorHandle::try_start`].
    ///
    /// # Panics
    /// If the executor cannot start: another executor holds its work root or state directory,
    /// or the work root is a system or home directory ([`StartError`]).
    pub fn start<R: Runtime>(rt: R, opts: ExecutorOptions) -> ExecutorHandle {
        Self::try_start(rt, opts).unwrap_or_else(|e| panic!("awcp executor: {e}"))
    }

    /// Starts the engine task on `rt`.
    ///
    /// First it takes an exclusive lock on the work root and the state directory (refusing
    /// with [`StartError::InUse`] if another executor holds either), then restores the journal
    /// and, before anything is served, cleans up what a crashed predecessor recorded: it ends
    /// the task process groups and releases the work directories of its assignments. Nothing
    /// else in the work root is touched.
    pub fn try_start<R: Runtime>(
        rt: R,
        opts: ExecutorOptions,
    ) -> Result<ExecutorHandle, StartError> {
        let (tx, rx) = mpsc::unbounded();
        let snapshots: SnapshotFiles = Arc::default();
        let mut work_root = PathBuf::from(&opts.engine.work_root);
        let unusable = |path: &Path, reason: String| StartError::Unusable {
            what: "work root",
            path: path.to_owned(),
            reason,
        };
        std::fs::create_dir_all(&work_root).map_err(|e| unusable(&work_root, e.to_string()))?;
        work_root =
            std::fs::canonicalize(&work_root).map_err(|e| unusable(&work_root, e.to_string()))?;
        let home = std::env::var_os("HOME")
            .and_then(|h| std::fs::canonicalize(h).ok())
            .map(|h| h.to_string_lossy().into_owned());
        if let Some(why) = work_root_refusal(&work_root.to_string_lossy(), home.as_deref()) {
            return Err(unusable(&work_root, why));
        }
        let mut locks = vec![lock::DirLock::directory(&work_root, "work root")?];
        if let Some(state) = &opts.state_dir {
            locks.push(lock::DirLock::state_dir(state)?);
        }
        let mut transports = vec![opts.transport.clone()];
        transports.extend(opts.extra_transports.iter().cloned());
        // Scratch space of this instance: downloads in flight and snapshots served by URL.
        let scratch = match &opts.state_dir {
            Some(s) => s.clone(),
            None => work_root.join(".awcp"),
        };
        if opts.state_dir.is_some() {
            // Only ever ours: a download interrupted by a crash.
            let _ = std::fs::remove_dir_all(scratch.join("downloads"));
        }
        let rt2 = rt.clone();
        let shared = Arc::new(SharedOpts {
            sleep: Arc::new(move |d| rt2.sleep(d)),
            auth: opts.engine.auth.clone(),
            limits: BodyLimits {
                max: opts.max_body_bytes,
                unauthenticated: opts.max_unauthenticated_body_bytes,
            },
            keepalive: opts.keepalive,
            card: opts.card.clone(),
            public_url: std::sync::RwLock::new(opts.public_url.clone()),
            trust_forwarded_headers: opts.trust_forwarded_headers,
        });
        let journal = opts.state_dir.map(journal::Journal::new);
        let mut engine = Executor::new(opts.engine.clone());
        let mut deferred = Vec::new();
        if let Some(j) = &journal {
            let records = j.load();
            let n = engine.restore(rt.now(), &records);
            if n > 0 {
                tracing::info!(restored = n, "assignments restored from the journal");
            }
            // Persist what restoring changed (in-flight work is now failed).
            for r in &records {
                if let Some(id) = r
                    .get("id")
                    .and_then(|v| v.as_str())
                    .and_then(|s| DelegationId::new(s).ok())
                {
                    match engine.record(&id) {
                        Some(rec) => j.write(&id, &rec),
                        None => j.remove(&id),
                    }
                }
            }
            deferred = recover(&rt, &mut engine, j, &transports);
        }
        let lp = Loop {
            rt: rt.clone(),
            engine,
            tx: tx.clone(),
            transports,
            kinds: BTreeMap::new(),
            runner: opts.runner,
            public_url: opts.public_url,
            origins: BTreeMap::new(),
            pending_origins: BTreeMap::new(),
            http: agent_rt::HttpClient::new(rt.clone(), opts.client_tls),
            download_timeout: opts.download_timeout,
            scratch,
            pending: BTreeMap::new(),
            streams: BTreeMap::new(),
            cancels: BTreeMap::new(),
            snapshots: snapshots.clone(),
            next_id: 1,
            journal,
            event_subscribers: Vec::new(),
            _locks: locks,
        };
        rt.spawn(Box::pin(lp.run(rx, deferred)));
        Ok(ExecutorHandle {
            tx,
            opts: shared,
            snapshots,
        })
    }

    /// Tells the engine the externally reachable base URL (after binding port 0).
    pub fn set_public_url(&self, url: impl Into<String>) {
        let url = url.into();
        *self
            .opts
            .public_url
            .write()
            .unwrap_or_else(|p| p.into_inner()) = Some(url.clone());
        let _ = self.tx.unbounded_send(Cmd::SetPublicUrl(url));
    }

    /// The executor's endpoints as an [`agent_rt::Handler`] for agent-rt's server (or any
    /// server: [`ExecutorHandle::handle_http`] takes any body).
    pub fn http_handler(&self) -> agent_rt::Handler {
        let ex = self.clone();
        agent_rt::Handler::new(move |req| {
            let ex = ex.clone();
            async move { ex.handle_http(req).await }
        })
    }

    /// Current counts (`GET /awcp/status`).
    pub async fn status(&self) -> Option<awcp_proto::engine::executor::ExecutorStatus> {
        let (tx, rx) = oneshot::channel();
        self.tx.unbounded_send(Cmd::Status(tx)).ok()?;
        rx.await.ok()
    }

    /// Every engine event from now on ([`ExecutorEvent::InviteReceived`] with `needs_decision`
    /// when `auto_accept` is off, state changes, endings). `None` once the executor stopped.
    pub fn events(&self) -> Option<mpsc::UnboundedReceiver<ExecutorEvent>> {
        let (tx, rx) = mpsc::unbounded();
        self.tx.unbounded_send(Cmd::Events(tx)).ok()?;
        Some(rx)
    }

    /// Accepts an INVITE waiting for the application's decision (`auto_accept` off; see
    /// [`ExecutorHandle::events`]). `Err` if it is not waiting for one, or the executor stopped.
    pub async fn accept_invite(&self, id: &DelegationId) -> Result<(), UsageError> {
        self.decide(id, None).await
    }

    /// Declines an INVITE waiting for the application's decision; the delegator gets `reason`.
    pub async fn decline_invite(
        &self,
        id: &DelegationId,
        reason: ErrorInfo,
    ) -> Result<(), UsageError> {
        self.decide(id, Some(reason)).await
    }

    async fn decide(
        &self,
        id: &DelegationId,
        decline: Option<ErrorInfo>,
    ) -> Result<(), UsageError> {
        let stopped = || UsageError::InvalidState("the executor has stopped".into());
        let (reply, answer) = oneshot::channel();
        self.tx
            .unbounded_send(Cmd::Decide {
                id: id.clone(),
                decline,
                reply,
            })
            .map_err(|_| stopped())?;
        answer.await.map_err(|_| stopped())?
    }

    /// Fails every live assignment (subscribers get an error event, tasks are stopped) and
    /// waits until their resources are released.
    pub async fn shutdown(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.unbounded_send(Cmd::Shutdown(tx)).is_ok() {
            let _ = rx.await;
        }
    }

    pub(crate) async fn request(
        &self,
        credential: Option<Credential>,
        body: Request,
    ) -> Option<Response> {
        self.request_from(credential, body, None).await
    }

    /// A request whose success binds `origin` (the URL its sender used) to the delegation.
    pub(crate) async fn request_from(
        &self,
        credential: Option<Credential>,
        body: Request,
        origin: Option<(DelegationId, String)>,
    ) -> Option<Response> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .unbounded_send(Cmd::Request {
                credential,
                body,
                reply: tx,
                origin,
            })
            .ok()?;
        rx.await.ok()
    }

    /// Whether `credential` may download snapshot `snapshot_id` of `id` (the engine's
    /// decision; `Err` carries the HTTP status and error).
    pub(crate) async fn authorize_snapshot(
        &self,
        id: DelegationId,
        snapshot_id: String,
        credential: Option<Credential>,
    ) -> Option<Result<(), (u16, ErrorInfo)>> {
        let (verdict, answer) = oneshot::channel();
        self.tx
            .unbounded_send(Cmd::AuthorizeSnapshot {
                id,
                snapshot_id,
                credential,
                verdict,
            })
            .ok()?;
        answer.await.ok()
    }

    /// Subscribes to a delegation's events; `Err` if the engine refuses the credential.
    pub(crate) async fn subscribe(
        &self,
        id: DelegationId,
        credential: Option<Credential>,
    ) -> Option<Result<mpsc::UnboundedReceiver<Bytes>, ErrorInfo>> {
        let (tx, rx) = mpsc::unbounded();
        let (verdict, answer) = oneshot::channel();
        self.tx
            .unbounded_send(Cmd::Subscribe {
                id,
                credential,
                tx,
                verdict,
            })
            .ok()?;
        Some(answer.await.ok()?.map(|()| rx))
    }
}

/// Start-up recovery: executes what [`Executor::restore`] asked for about a crashed
/// predecessor's assignments, before anything is served: ends recorded task groups, releases
/// recorded work directories, journals the outcome. Other outputs are returned for the loop.
fn recover<R: Runtime>(
    rt: &R,
    engine: &mut Executor,
    journal: &journal::Journal,
    transports: &[Arc<dyn ExecutorTransport>],
) -> Vec<ExecutorOutput> {
    let mut deferred = Vec::new();
    let mut inputs = Vec::new();
    loop {
        while let Some(out) = engine.poll_output() {
            match out {
                ExecutorOutput::EndTask { id, handle } => {
                    end_task(&id, &handle);
                    inputs.push(ExecutorInput::TaskFinished {
                        id,
                        result: Err(TaskFailure::Stopped),
                    });
                }
                ExecutorOutput::Release {
                    id,
                    work_dir,
                    transport,
                } => {
                    let t = transport_for(transports, &transport);
                    let result = release_work_dir(&*t, &transport, &work_dir);
                    inputs.push(ExecutorInput::Released { id, result });
                }
                ExecutorOutput::RemoveEmptyWorkDir { id, work_dir } => {
                    // Never anything inside: it may be someone else's directory.
                    let _ = std::fs::remove_dir(&work_dir);
                    inputs.push(ExecutorInput::Released { id, result: Ok(()) });
                }
                ExecutorOutput::Event(ev) => {
                    if let Some(id) = event_id(&ev) {
                        match engine.record(id) {
                            Some(rec) => journal.write(id, &rec),
                            None => journal.remove(id),
                        }
                    }
                }
                other => deferred.push(other),
            }
        }
        if inputs.is_empty() {
            return deferred;
        }
        for i in inputs.drain(..) {
            if let Err(e) = engine.handle(rt.now(), i) {
                tracing::debug!("recovery input ignored: {e}");
            }
        }
    }
}

/// Ends the process group a crashed predecessor recorded for `id`, if it is verifiably the
/// task's (see [`TaskGroup::end_orphaned`]).
fn end_task(id: &DelegationId, handle: &TaskHandle) {
    let Some(group) = TaskGroup::from_handle(&handle.0) else {
        tracing::warn!(delegation = %id, handle = %handle.0, "unreadable task record; nothing ended");
        return;
    };
    match group.end_orphaned(id.as_str()) {
        Orphans::Ended(n) => {
            tracing::info!(delegation = %id, pgid = group.pgid, processes = n, "ended the task a crash left running")
        }
        Orphans::Gone => {}
        Orphans::NotOurs => {
            tracing::warn!(delegation = %id, pgid = group.pgid, "recorded process group now belongs to someone else; left alone")
        }
        Orphans::Unverifiable => {
            tracing::warn!(delegation = %id, pgid = group.pgid, "cannot verify the recorded process group on this platform; left alone")
        }
    }
}

/// Detaches the transport from `work_dir` and removes it, never recursing into a mount.
fn release_work_dir(
    t: &dyn ExecutorTransport,
    kind: &TransportKind,
    work_dir: &str,
) -> Result<(), ErrorInfo> {
    let p = Path::new(work_dir);
    if !kind.is_live() && is_mount_point(p) {
        tracing::warn!(path = %p.display(), "work directory is a mount point; left in place");
        return Ok(());
    }
    match t.release(p) {
        // Never recurse into a work directory that may still be a mount.
        Err(e) => {
            tracing::warn!("release of {work_dir} failed: {e}");
            Err(e.to_error_info())
        }
        Ok(()) => {
            if !is_mount_point(p) {
                let _ = std::fs::remove_dir_all(p);
            }
            Ok(())
        }
    }
}

/// The transport serving `kind` (the first one if none does: it refuses the handle).
fn transport_for(
    transports: &[Arc<dyn ExecutorTransport>],
    kind: &TransportKind,
) -> Arc<dyn ExecutorTransport> {
    transports
        .iter()
        .find(|t| t.kind() == *kind)
        .unwrap_or(&transports[0])
        .clone()
}

/// The assignment an event is about, if its record should be written.
fn event_id(ev: &ExecutorEvent) -> Option<&DelegationId> {
    match ev {
        ExecutorEvent::InviteReceived { id, .. }
        | ExecutorEvent::StateChanged { id, .. }
        | ExecutorEvent::RecordChanged { id }
        | ExecutorEvent::Ended { id, .. }
        | ExecutorEvent::Forgotten { id } => Some(id),
    }
}

/// Whether `p` is a mount point (its device differs from its parent's).
fn is_mount_point(p: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (
        std::fs::symlink_metadata(p),
        p.parent().map(std::fs::metadata),
    ) {
        (Ok(m), Some(Ok(pm))) => m.dev() != pm.dev(),
        _ => false,
    }
}

struct Loop<R: Runtime> {
    rt: R,
    engine: Executor,
    tx: mpsc::UnboundedSender<Cmd>,
    /// The primary transport first, then the extra ones.
    transports: Vec<Arc<dyn ExecutorTransport>>,
    /// Which transport each assignment uses (from allocation to release).
    kinds: BTreeMap<DelegationId, TransportKind>,
    runner: Arc<dyn TaskRunner>,
    public_url: Option<String>,
    /// The origin each delegation's delegator reached us at (when no public URL is set).
    origins: BTreeMap<DelegationId, String>,
    /// Origins of requests the engine has not answered yet.
    pending_origins: BTreeMap<RequestId, (DelegationId, String)>,
    http: agent_rt::HttpClient<R>,
    download_timeout: Duration,
    /// Downloads and captured snapshots of this instance.
    scratch: PathBuf,
    pending: BTreeMap<RequestId, oneshot::Sender<Response>>,
    streams: BTreeMap<StreamId, mpsc::UnboundedSender<Bytes>>,
    cancels: BTreeMap<DelegationId, CancelFlag>,
    snapshots: SnapshotFiles,
    next_id: u64,
    journal: Option<journal::Journal>,
    /// Application subscribers of engine events ([`ExecutorHandle::events`]).
    event_subscribers: Vec<mpsc::UnboundedSender<ExecutorEvent>>,
    /// The work root and state directory stay locked while the loop runs.
    _locks: Vec<lock::DirLock>,
}

impl<R: Runtime> Loop<R> {
    /// The transport serving `kind` (the primary one if none does: it refuses the handle).
    fn transport_for(&self, kind: &TransportKind) -> Arc<dyn ExecutorTransport> {
        transport_for(&self.transports, kind)
    }

    /// The transport assignment `id` was allocated with.
    fn transport_of(&self, id: &DelegationId) -> Arc<dyn ExecutorTransport> {
        match self.kinds.get(id) {
            Some(k) => self.transport_for(k),
            None => self.transports[0].clone(),
        }
    }

    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Cmd>, deferred: Vec<ExecutorOutput>) {
        let mut shutdown: Option<oneshot::Sender<()>> = None;
        for out in deferred {
            self.execute(out);
        }
        loop {
            self.drain();
            if let Some(tx) = shutdown.take() {
                if self.engine.live_count() == 0 {
                    let _ = tx.send(());
                } else {
                    shutdown = Some(tx);
                }
            }
            let sleep = match self.engine.poll_timeout() {
                Some(t) => sleep_until(&self.rt, t),
                None => self.rt.sleep(Duration::from_secs(3600)),
            };
            match futures::future::select(rx.next(), sleep).await {
                Either::Left((Some(cmd), _)) => {
                    if let Cmd::Shutdown(tx) = cmd {
                        self.engine.shutdown(self.rt.now());
                        shutdown = Some(tx);
                    } else {
                        self.on_cmd(cmd);
                    }
                }
                Either::Left((None, _)) => break,
                Either::Right(_) => self.engine.handle_timeout(self.rt.now()),
            }
        }
    }

    fn input(&mut self, input: ExecutorInput) {
        if let Err(e) = self.engine.handle(self.rt.now(), input) {
            tracing::debug!("input ignored: {e}");
        }
    }

    fn on_cmd(&mut self, cmd: Cmd) {
        match cmd {
            Cmd::Request {
                credential,
                body,
                reply,
                origin,
            } => {
                let request = RequestId(self.next_id);
                self.next_id += 1;
                self.pending.insert(request, reply);
                if let Some(o) = origin {
                    self.pending_origins.insert(request, o);
                }
                self.input(ExecutorInput::Request {
                    request,
                    credential,
                    body,
                });
            }
            Cmd::Subscribe {
                id,
                credential,
                tx,
                verdict,
            } => {
                if let Err(e) = self.engine.authorize(Some(&id), credential.as_ref()) {
                    let _ = verdict.send(Err(e));
                    return;
                }
                let _ = verdict.send(Ok(()));
                let stream = StreamId(self.next_id);
                self.next_id += 1;
                self.streams.insert(stream, tx);
                self.input(ExecutorInput::Subscribe {
                    stream,
                    id,
                    credential,
                });
            }
            Cmd::StreamClosed(stream) => {
                self.streams.remove(&stream);
                self.input(ExecutorInput::StreamClosed { stream });
            }
            Cmd::Input(i) => self.input(i),
            Cmd::Status(tx) => {
                let _ = tx.send(self.engine.status());
            }
            Cmd::AuthorizeSnapshot {
                id,
                snapshot_id,
                credential,
                verdict,
            } => {
                let _ = verdict.send(self.engine.authorize_snapshot_download(
                    &id,
                    &snapshot_id,
                    credential.as_ref(),
                ));
            }
            Cmd::Shutdown(_) => {}
            Cmd::SetPublicUrl(u) => self.public_url = Some(u),
            Cmd::Decide { id, decline, reply } => {
                let now = self.rt.now();
                let r = match decline {
                    None => self.engine.accept_invite(now, &id),
                    Some(reason) => self.engine.decline_invite(now, &id, reason),
                };
                let _ = reply.send(r);
            }
            Cmd::Events(tx) => self.event_subscribers.push(tx),
        }
    }

    fn feed(&self) -> impl Fn(ExecutorInput) + Send + Sync + Clone + 'static {
        let tx = self.tx.clone();
        move |i| {
            let _ = tx.unbounded_send(Cmd::Input(i));
        }
    }

    fn drain(&mut self) {
        while let Some(out) = self.engine.poll_output() {
            self.execute(out);
        }
    }

    fn execute(&mut self, out: ExecutorOutput) {
        match out {
            ExecutorOutput::Respond { request, response } => {
                if let Some((id, origin)) = self.pending_origins.remove(&request) {
                    if !matches!(response, Response::Error { .. })
                        && self.engine.record(&id).is_some()
                    {
                        self.origins.insert(id, origin);
                    }
                }
                if let Some(tx) = self.pending.remove(&request) {
                    let _ = tx.send(response);
                }
            }
            ExecutorOutput::StreamEvent {
                stream,
                event,
                dialect,
            } => {
                let bytes = Bytes::from(sse::encode_data(&encode_event(&event, dialect)));
                let gone = match self.streams.get(&stream) {
                    Some(tx) => tx.unbounded_send(bytes).is_err(),
                    None => false,
                };
                if gone {
                    self.streams.remove(&stream);
                    let _ = self.tx.unbounded_send(Cmd::StreamClosed(stream));
                }
            }
            ExecutorOutput::CloseStream { stream } => {
                self.streams.remove(&stream);
            }
            ExecutorOutput::AllocateWorkDir {
                id,
                work_dir,
                transport,
            } => {
                let t = self.transport_for(&transport);
                self.kinds.insert(id.clone(), transport);
                let feed = self.feed();
                let rt = self.rt.clone();
                self.rt.spawn(Box::pin(async move {
                    let result = blocking(&rt, move || allocate(&*t, Path::new(&work_dir))).await;
                    feed(ExecutorInput::WorkDirAllocated { id, result });
                }));
            }
            ExecutorOutput::SetupTransport {
                id,
                work_dir,
                handle,
                access_mode,
                resources,
            } => {
                let t = self.transport_for(&handle.kind());
                let feed = self.feed();
                let cancel = CancelFlag::new();
                self.cancels.insert(id.clone(), cancel.clone());
                let downloads = self.scratch.join("downloads");
                let timeout = self.download_timeout;
                let http = self.http.clone();
                self.rt.spawn(Box::pin(async move {
                    let result = setup(
                        &http,
                        t,
                        &id,
                        work_dir,
                        *handle,
                        access_mode,
                        resources,
                        downloads,
                        timeout,
                        cancel,
                    )
                    .await;
                    feed(ExecutorInput::SetupCompleted { id, result });
                }));
            }
            ExecutorOutput::RunTask {
                id,
                task_dir,
                task,
                expires_at,
                access_mode,
            } => {
                let runner = self.runner.clone();
                let feed = self.feed();
                let rt = self.rt.clone();
                let cancel = CancelFlag::new();
                self.cancels.insert(id.clone(), cancel.clone());
                let ctx = TaskContext {
                    delegation_id: id.clone(),
                    work_dir: PathBuf::from(task_dir),
                    description: task.description,
                    prompt: task.prompt,
                    expires_at,
                    access_mode,
                };
                self.rt.spawn(Box::pin(async move {
                    let pf = feed.clone();
                    let sf = feed.clone();
                    let pid = id.clone();
                    let sid = id.clone();
                    let c2 = cancel.clone();
                    let result = blocking(&rt, move || {
                        let progress = move |m: String| {
                            pf(ExecutorInput::TaskProgress {
                                id: pid.clone(),
                                message: Some(m),
                                progress: None,
                            })
                        };
                        // Journalled, so that a restarted executor can end the group.
                        let spawned = move |g: TaskGroup| {
                            sf(ExecutorInput::TaskSpawned {
                                id: sid.clone(),
                                handle: TaskHandle(g.to_handle()),
                            })
                        };
                        runner.run_tracked(&ctx, &progress, &spawned, &c2)
                    })
                    .await;
                    let result = match result {
                        Ok(o) => Ok(TaskOutcome {
                            summary: o.summary,
                            highlights: o.highlights,
                        }),
                        // What the runner says after it was stopped is not the task's failure.
                        Err(_) if cancel.is_cancelled() => Err(TaskFailure::Stopped),
                        Err(f) => Err(f),
                    };
                    feed(ExecutorInput::TaskFinished { id, result });
                }));
            }
            ExecutorOutput::StopTask { id } => {
                if let Some(c) = self.cancels.get(&id) {
                    c.cancel();
                }
            }
            ExecutorOutput::CaptureSnapshot {
                id,
                work_dir,
                snapshot_id,
                kind,
                inline,
            } => {
                let t = self.transport_of(&id);
                let feed = self.feed();
                let rt = self.rt.clone();
                let dir = self.scratch.join("snapshots");
                let url_base = if inline {
                    None
                } else {
                    self.public_url
                        .clone()
                        .or_else(|| self.origins.get(&id).cloned())
                };
                let files = self.snapshots.clone();
                let kind = match kind {
                    awcp_proto::engine::SnapshotKind::Full => awcp_transports::SnapshotKind::Full,
                    awcp_proto::engine::SnapshotKind::Delta => awcp_transports::SnapshotKind::Delta,
                };
                self.rt.spawn(Box::pin(async move {
                    let sid = snapshot_id.clone();
                    let did = id.clone();
                    let result = blocking(&rt, move || {
                        let delivery = match &url_base {
                            Some(_) => {
                                let d = dir.join(did.as_str());
                                std::fs::create_dir_all(&d).map_err(|e| {
                                    ErrorInfo::new(
                                        ErrorCode::TaskFailed,
                                        format!("snapshot dir: {e}"),
                                    )
                                })?;
                                Delivery::File(d)
                            }
                            None => Delivery::Inline,
                        };
                        let snap = t
                            .capture(Path::new(&work_dir), kind, &delivery, &CancelFlag::new())
                            .map_err(|e| e.to_error_info())?;
                        Ok::<_, ErrorInfo>(to_captured(
                            snap,
                            &did,
                            &sid,
                            url_base.as_deref(),
                            &files,
                        ))
                    })
                    .await;
                    feed(ExecutorInput::SnapshotCaptured { id, result });
                }));
            }
            ExecutorOutput::Release {
                id,
                work_dir,
                transport,
            } => {
                self.origins.remove(&id);
                self.cancels.remove(&id);
                self.kinds.remove(&id);
                let t = self.transport_for(&transport);
                let feed = self.feed();
                let rt = self.rt.clone();
                self.rt.spawn(Box::pin(async move {
                    let result =
                        blocking(&rt, move || release_work_dir(&*t, &transport, &work_dir)).await;
                    feed(ExecutorInput::Released { id, result });
                }));
            }
            ExecutorOutput::RemoveEmptyWorkDir { id, work_dir } => {
                // Never anything inside: it may be someone else's directory.
                let _ = std::fs::remove_dir(&work_dir);
                let _ = self
                    .tx
                    .unbounded_send(Cmd::Input(ExecutorInput::Released { id, result: Ok(()) }));
            }
            ExecutorOutput::EndTask { id, handle } => {
                let feed = self.feed();
                let rt = self.rt.clone();
                self.rt.spawn(Box::pin(async move {
                    let did = id.clone();
                    blocking(&rt, move || end_task(&did, &handle)).await;
                    feed(ExecutorInput::TaskFinished {
                        id,
                        result: Err(TaskFailure::Stopped),
                    });
                }));
            }
            ExecutorOutput::DropSnapshot { id, snapshot_id } => {
                let key = (id.to_string(), snapshot_id.to_string());
                let path = self
                    .snapshots
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&key)
                    // Captured before a restart: where capture puts it.
                    .or_else(|| {
                        let p = self
                            .scratch
                            .join("snapshots")
                            .join(id.as_str())
                            .join(format!("{snapshot_id}.zip"));
                        p.exists().then_some(p)
                    });
                if let Some(p) = path {
                    let _ = std::fs::remove_file(&p);
                    if let Some(parent) = p.parent() {
                        let _ = std::fs::remove_dir(parent);
                    }
                }
            }
            ExecutorOutput::Event(ev) => self.on_event(ev),
        }
    }

    fn on_event(&mut self, ev: ExecutorEvent) {
        self.event_subscribers
            .retain(|tx| tx.unbounded_send(ev.clone()).is_ok());
        match &ev {
            ExecutorEvent::InviteReceived { id, invite, .. } => {
                tracing::info!(delegation = %id, task = %invite.task.description, "invitation");
            }
            ExecutorEvent::StateChanged { id, from, to } => {
                tracing::info!(delegation = %id, %from, %to, "assignment state");
            }
            ExecutorEvent::Ended { id, state, error } => {
                tracing::info!(delegation = %id, %state, error = ?error.as_ref().map(|e| e.code.as_str()), "assignment ended");
            }
            ExecutorEvent::Forgotten { id } => {
                tracing::debug!(delegation = %id, "assignment forgotten");
            }
            ExecutorEvent::RecordChanged { .. } => {}
        }
        if let (Some(j), Some(id)) = (&self.journal, event_id(&ev)) {
            match self.engine.record(id) {
                Some(rec) => j.write(id, &rec),
                None => j.remove(id),
            }
        }
    }
}

/// Checks the transport's dependency and creates the (empty) work directory; reports what it
/// found, the engine decides the error code.
fn allocate(t: &dyn ExecutorTransport, work_dir: &Path) -> Result<(), AllocationFailure> {
    t.check_dependency()
        .map_err(|e| AllocationFailure::DependencyMissing {
            message: e.to_string(),
            hint: e.hint.clone(),
        })?;
    if let Ok(mut rd) = std::fs::read_dir(work_dir) {
        if rd.next().is_some() {
            return Err(AllocationFailure::NotEmpty);
        }
    }
    std::fs::create_dir_all(work_dir).map_err(|e| AllocationFailure::CannotCreate(e.to_string()))
}

/// The engine's name for the layout a transport found.
fn layout_of(l: awcp_transports::archive::Layout) -> WorkspaceLayout {
    match l {
        awcp_transports::archive::Layout::PerResource => WorkspaceLayout::PerResource,
        awcp_transports::archive::Layout::Flat => WorkspaceLayout::Flat,
    }
}

#[allow(clippy::too_many_arguments)]
async fn setup<R: Runtime>(
    http: &agent_rt::HttpClient<R>,
    t: Arc<dyn ExecutorTransport>,
    id: &DelegationId,
    work_dir: String,
    handle: TransportHandle,
    access: awcp_proto::AccessMode,
    resources: Vec<awcp_proto::Resource>,
    downloads: PathBuf,
    timeout: Duration,
    cancel: CancelFlag,
) -> Result<WorkspaceLayout, ErrorInfo> {
    let rt = http.runtime();
    if handle.kind().is_live() {
        return blocking(rt, move || {
            t.setup_live(Path::new(&work_dir), &handle, access, &cancel)
                // A live mount shows the delegator's export view: one directory per resource.
                .map(|()| WorkspaceLayout::PerResource)
                .map_err(|e| e.to_error_info())
        })
        .await;
    }
    let TransportHandle::Archive(h) = handle else {
        return Err(ErrorInfo::new(
            ErrorCode::SetupFailed,
            format!(
                "transport {} is not served by this executor",
                handle.kind().as_str()
            ),
        ));
    };
    let names: Vec<_> = resources.into_iter().map(|r| r.name).collect();
    if h.data.base64.is_some() {
        return blocking(rt, move || {
            let req = SetupRequest::from_inline_handle(Path::new(&work_dir), &h, access, &names)
                .expect("inline data checked");
            t.setup(req, &cancel)
                .map(|r| layout_of(r.layout))
                .map_err(|e| e.to_error_info())
        })
        .await;
    }
    let Some(url) = h.data.url.clone() else {
        return Err(ErrorInfo::new(
            ErrorCode::SetupFailed,
            "archive handle carries no data",
        ));
    };
    let d2 = downloads.clone();
    blocking(rt, move || std::fs::create_dir_all(d2))
        .await
        .map_err(|e| ErrorInfo::new(ErrorCode::SetupFailed, format!("downloads dir: {e}")))?;
    let file = downloads.join(format!("{id}.zip"));
    let limit = h.size_bytes.unwrap_or(u64::MAX / 2).saturating_add(1);
    http.download(&url, &[], file.clone(), limit, timeout)
        .await
        .map_err(|e| {
            ErrorInfo::new(
                ErrorCode::TransportError,
                format!("fetching the archive: {e}"),
            )
        })?;
    blocking(rt, move || {
        let req = SetupRequest {
            work_dir: Path::new(&work_dir),
            source: ArchiveSource::File(&file),
            expected_checksum: Some(&h.checksum),
            access_mode: access,
            resources: &names,
        };
        let r = t
            .setup(req, &cancel)
            .map(|r| layout_of(r.layout))
            .map_err(|e| e.to_error_info());
        let _ = std::fs::remove_file(&file);
        r
    })
    .await
}

fn to_captured(
    snap: awcp_transports::CapturedSnapshot,
    id: &DelegationId,
    sid: &awcp_proto::SnapshotId,
    url_base: Option<&str>,
    files: &SnapshotFiles,
) -> CapturedSnapshot {
    use serde_json::json;
    let mut metadata = BTreeMap::new();
    metadata.insert("fileCount".to_owned(), json!(snap.file_count));
    metadata.insert("totalBytes".to_owned(), json!(snap.total_bytes));
    metadata.insert("changedFiles".to_owned(), json!(snap.changed));
    if snap.kind == awcp_transports::SnapshotKind::Delta {
        metadata.insert("delta".to_owned(), json!(true));
        metadata.insert("deletedFiles".to_owned(), json!(snap.deleted));
    }
    match snap.archive {
        ArchiveOutput::Inline(h) => CapturedSnapshot {
            data: h.data,
            checksum: Some(h.checksum),
            metadata,
        },
        ArchiveOutput::File(mut f) => {
            // Take the file over from the transport (its release removes what it captured):
            // the engine keeps snapshots until ack or retention (DropSnapshot).
            let owned = f.path.with_file_name(format!("{sid}.zip"));
            if std::fs::rename(&f.path, &owned).is_ok() {
                f.path = owned;
            }
            let url = format!(
                "{}{}",
                url_base.unwrap_or("").trim_end_matches('/'),
                SNAPSHOT_ROUTE
                    .replace("{id}", id.as_str())
                    .replace("{sid}", sid.as_str())
            );
            files
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert((id.to_string(), sid.to_string()), f.path.clone());
            CapturedSnapshot {
                data: awcp_proto::ArchiveData {
                    base64: None,
                    url: Some(url),
                },
                checksum: Some(f.checksum),
                metadata,
            }
        }
    }
}
