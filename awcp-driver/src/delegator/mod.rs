//! The delegator side: one task owns the [`Delegator`] engine and executes its outputs (HTTP
//! to the executor, SSE, transports on the blocking pool); applications talk to it through a
//! [`DelegatorHandle`].

pub mod daemon;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use awcp_proto::engine::delegator::{
    DelegateRequest, DelegationRecord, DelegationView, Outbound, RequestFailure,
};
use awcp_proto::engine::{SnapshotMode, WorkspaceStats};
use awcp_proto::http as wire_http;
use awcp_proto::{
    decode_event, encode_message, feature, sse, AccessMode, Auth, DelegationId, Delegator,
    DelegatorConfig, DelegatorEvent, DelegatorInput, DelegatorOutput, Dialect, ErrorCode,
    ErrorInfo, Resource, SnapshotEvent, SnapshotId, TaskSpec, Timestamp, TransportHandle,
    TransportKind,
};
use awcp_transports::archive::{ArchiveOutput, ArchiveSource, Delivery, Layout};
use awcp_transports::{
    ApplyRequest, Baseline, CancelFlag, DelegatorTransport, ExportViewKind, PrepareRequest,
    ResourceSpec,
};
use bytes::Bytes;
use futures::channel::{mpsc, oneshot};
use futures::future::{AbortHandle, Abortable, Either};
use futures::StreamExt;
use http::Method;
use http_body_util::BodyExt;

use crate::net::{self, ResponseBody};
use crate::runtime::{blocking, sleep_until, Runtime};

/// Everything a delegator needs.
pub struct DelegatorOptions {
    /// Engine settings.
    pub engine: DelegatorConfig,
    /// The data-plane transport (archive by default).
    pub transport: Arc<dyn DelegatorTransport>,
    /// Live transports (e.g. sshfs), used when a delegation asks for their kind.
    pub extra_transports: Vec<Arc<dyn DelegatorTransport>>,
    /// State directory: staged snapshots, archives for URL mode, downloads.
    pub state_dir: PathBuf,
    /// Timeout of INVITE/START/ERROR/cancel/ack requests (30 s).
    pub request_timeout: Duration,
    /// Where peers can fetch archives this delegator serves (URL mode), e.g.
    /// `https://delegator.example:3100` (`--public-url`). `None`: archives always travel
    /// inline. An unspecified host (`http://0.0.0.0:3100`, a server bound to every interface)
    /// is replaced per delegation by the local address that reaches the executor.
    pub archive_base_url: Option<String>,
    /// TLS settings for talking to executors (`https` peers: private CA, client certificate).
    pub client_tls: agent_rt::ClientTls,
    /// Largest snapshot accepted.
    pub max_snapshot_bytes: u64,
}

impl DelegatorOptions {
    /// Options with defaults.
    pub fn new(transport: Arc<dyn DelegatorTransport>, state_dir: impl Into<PathBuf>) -> Self {
        DelegatorOptions {
            engine: DelegatorConfig::default(),
            transport,
            extra_transports: Vec::new(),
            state_dir: state_dir.into(),
            request_timeout: Duration::from_secs(30),
            archive_base_url: None,
            client_tls: agent_rt::ClientTls::default(),
            max_snapshot_bytes: 1024 * 1024 * 1024,
        }
    }
}

/// What to delegate.
#[derive(Clone, Debug)]
pub struct DelegateParams {
    /// The executor's AWCP URL (`http://host:port/awcp`).
    pub peer: String,
    /// The task.
    pub task: TaskSpec,
    /// Directories to lend.
    pub resources: Vec<ResourceSpec>,
    /// Lease length.
    pub ttl_seconds: u64,
    /// Access.
    pub access_mode: AccessMode,
    /// Snapshot policy.
    pub snapshot_mode: SnapshotMode,
    /// Credential for the executor.
    pub auth: Option<Auth>,
    /// The executor's dialect.
    pub dialect: Dialect,
    /// Data plane.
    pub transport: TransportKind,
    /// A caller-chosen id (else random).
    pub id: Option<DelegationId>,
    /// Lend secret-looking files (`.env`, private keys, credentials; WIRE.md §9) instead of
    /// refusing the delegation with `SENSITIVE_FILES`. Off by default.
    pub allow_sensitive: bool,
}

impl DelegateParams {
    /// A single-directory delegation with defaults (1 h, `rw`, auto snapshots, archive).
    pub fn new(
        peer: impl Into<String>,
        dir: impl Into<PathBuf>,
        description: &str,
        prompt: &str,
    ) -> Self {
        DelegateParams {
            peer: peer.into(),
            task: TaskSpec {
                description: description.into(),
                prompt: prompt.into(),
            },
            resources: vec![ResourceSpec {
                name: awcp_proto::ResourceName::new("workspace").expect("valid"),
                source_path: dir.into(),
                mode: AccessMode::Rw,
            }],
            ttl_seconds: 3600,
            access_mode: AccessMode::Rw,
            snapshot_mode: SnapshotMode::Auto,
            auth: None,
            dialect: Dialect::Reference,
            transport: TransportKind::Archive,
            id: None,
            allow_sensitive: false,
        }
    }
}

/// Why a call on the handle failed.
#[derive(Debug, thiserror::Error)]
pub enum DelegatorError {
    /// The engine refused the call.
    #[error("{0}")]
    Usage(#[from] awcp_proto::engine::UsageError),
    /// A protocol error (admission, executor decline...).
    #[error("{0}")]
    Protocol(ErrorInfo),
    /// The delegator task is gone.
    #[error("the delegator is shut down")]
    Closed,
    /// No delegation id could be drawn from the OS random source.
    #[error("{0}")]
    Random(#[from] crate::security::RandomUnavailable),
    /// Another delegator (another process, or another handle in this one) uses the state
    /// directory: two engines on one journal would resume, abandon and apply each other's
    /// delegations.
    #[error(
        "the state directory {} is in use by another delegator{}",
        .dir.display(),
        .holder.map(|p| format!(" (process {p})")).unwrap_or_default()
    )]
    StateDirInUse {
        /// The state directory.
        dir: PathBuf,
        /// The process id recorded by the holder, if readable.
        holder: Option<u32>,
    },
    /// The state directory cannot be used.
    #[error("state directory {}: {source}", .dir.display())]
    StateDir {
        /// The state directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

type Reply<T> = oneshot::Sender<Result<T, DelegatorError>>;

enum Cmd {
    Delegate(DelegateParams, Reply<DelegationId>),
    Cancel(DelegationId, Reply<()>),
    Apply(DelegationId, SnapshotId, Reply<()>),
    Discard(DelegationId, SnapshotId, Reply<()>),
    Get(DelegationId, oneshot::Sender<Option<DelegationView>>),
    List(oneshot::Sender<Vec<DelegationView>>),
    Wait(DelegationId, oneshot::Sender<Option<DelegationView>>),
    Subscribe(mpsc::UnboundedSender<DelegatorEvent>),
    Input(DelegatorInput),
    Stop(oneshot::Sender<()>),
    Transferred(Transfer),
    SubscribeTransfers(mpsc::UnboundedSender<Transfer>),
}

/// Bytes moved for a delegation, for progress displays.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transfer {
    /// The delegation.
    pub id: DelegationId,
    /// `"workspace archive"` (sent) or `"snapshot"` (received).
    pub what: &'static str,
    /// Size in bytes.
    pub bytes: u64,
}

/// Archives served by URL: SHA-256 of the URL's token (hex) → (delegation, file, expiry).
/// Keyed by digest so a lookup's timing says nothing about the tokens.
type ArchiveTable = Arc<Mutex<BTreeMap<String, (DelegationId, PathBuf, Timestamp)>>>;

fn token_key(token: &str) -> String {
    awcp_proto::engine::auth::SecretDigest::of(token).to_hex()
}

/// A cheap handle to a running delegator.
#[derive(Clone)]
pub struct DelegatorHandle {
    tx: mpsc::UnboundedSender<Cmd>,
    archives: ArchiveTable,
    now: Arc<dyn Fn() -> Timestamp + Send + Sync>,
    sleep: Arc<dyn Fn(Duration) -> crate::runtime::BoxFuture<()> + Send + Sync>,
}

/// Takes the exclusive lock of a delegator state directory (`<dir>/lock`, flock(2); released
/// when the file is closed, also when the process dies) and records our process id in it.
fn lock_state_dir(dir: &Path) -> Result<std::fs::File, DelegatorError> {
    let io_err = |source| DelegatorError::StateDir {
        dir: dir.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io_err)?;
    match crate::lockfile::lock_pid_file(&dir.join("lock")).map_err(io_err)? {
        crate::lockfile::PidLock::Held(f) => Ok(f),
        crate::lockfile::PidLock::InUse(holder) => Err(DelegatorError::StateDirInUse {
            dir: dir.to_path_buf(),
            holder,
        }),
    }
}

/// Finishes or rolls back every apply a previous process left interrupted, for every
/// delegation in the journal (`specs`: their resources), and removes their staging; see
/// [`awcp_transports::snapshot::recover_interrupted`]. Runs before the engine restores
/// anything, so each workspace is entirely old or entirely new when delegations resume.
fn recover_interrupted_applies(specs: &BTreeMap<DelegationId, Vec<ResourceSpec>>) {
    for (id, resources) in specs {
        let roots: Vec<PathBuf> = resources.iter().map(|r| r.source_path.clone()).collect();
        match awcp_transports::snapshot::recover_interrupted(&roots, id.as_str()) {
            Ok(awcp_transports::snapshot::Recovery::Nothing) => {}
            Ok(r) => tracing::info!(delegation = %id, recovery = ?r, "interrupted apply recovered"),
            Err(e) => tracing::error!(
                delegation = %id,
                "recovering an interrupted apply failed (the workspace may be half applied; \
                 applying the snapshot again retries the recovery): {e}"
            ),
        }
    }
}

impl DelegatorHandle {
    /// Starts the engine task on `rt`. See [`Self::try_start`].
    ///
    /// # Panics
    /// If the state directory is in use by another delegator or unusable.
    pub fn start<R: Runtime>(rt: R, opts: DelegatorOptions) -> DelegatorHandle {
        Self::try_start(rt, opts).unwrap_or_else(|e| panic!("cannot start the delegator: {e}"))
    }

    /// Starts the engine task on `rt`, owning the state directory: it takes the directory's
    /// exclusive lock (refusing with [`DelegatorError::StateDirInUse`] while another delegator
    /// holds it), then, before anything else, recovers every apply a previous process left
    /// interrupted (see `awcp_transports::snapshot::recover_interrupted`), then restores the
    /// journal's delegations.
    pub fn try_start<R: Runtime>(
        rt: R,
        opts: DelegatorOptions,
    ) -> Result<DelegatorHandle, DelegatorError> {
        let (tx, rx) = mpsc::unbounded();
        let archives: ArchiveTable = Arc::default();
        let lock = lock_state_dir(&opts.state_dir)?;
        let journal = crate::executor::journal::Journal::at(opts.state_dir.join("delegations"));
        let mut engine = Delegator::new(opts.engine.clone());
        let records = journal.load();
        let mut specs = BTreeMap::new();
        for r in &records {
            if let (Some(id), Some(sources)) = (
                r.get("id")
                    .and_then(|v| v.as_str())
                    .and_then(|s| DelegationId::new(s).ok()),
                r.get("sources").and_then(|v| v.as_array()),
            ) {
                let list: Vec<ResourceSpec> = sources
                    .iter()
                    .filter_map(|x| {
                        Some(ResourceSpec {
                            name: awcp_proto::ResourceName::new(x.get("name")?.as_str()?).ok()?,
                            source_path: PathBuf::from(x.get("path")?.as_str()?),
                            mode: AccessMode::parse(x.get("mode")?.as_str()?)?,
                        })
                    })
                    .collect();
                specs.insert(id, list);
            }
        }
        recover_interrupted_applies(&specs);
        let records: Vec<DelegationRecord> = records
            .iter()
            .filter_map(|r| match DelegationRecord::from_json(r) {
                Ok(r) => Some(r),
                Err(e) => {
                    tracing::warn!("journal record skipped: {e}");
                    None
                }
            })
            .collect();
        let n = engine.restore(rt.now(), &records);
        if n > 0 {
            tracing::info!(restored = n, "delegations restored from the journal");
        }
        let lp = Loop {
            rt: rt.clone(),
            http: agent_rt::HttpClient::new(rt.clone(), opts.client_tls.clone()),
            engine,
            tx: tx.clone(),
            opts: Arc::new(opts),
            journal,
            specs,
            baselines: Arc::default(),
            streams: BTreeMap::new(),
            waiters: BTreeMap::new(),
            subscribers: Vec::new(),
            transfer_subscribers: Vec::new(),
            archives: archives.clone(),
            lock: Some(lock),
            farewells: Vec::new(),
        };
        rt.spawn(Box::pin(lp.run(rx)));
        let rt2 = rt.clone();
        let rt3 = rt.clone();
        Ok(DelegatorHandle {
            tx,
            archives,
            now: Arc::new(move || rt2.now()),
            sleep: Arc::new(move |d| rt3.sleep(d)),
        })
    }

    /// A future that completes after `d` on the handle's runtime.
    pub fn timer(&self, d: Duration) -> crate::runtime::BoxFuture<()> {
        (self.sleep)(d)
    }

    async fn call<T>(&self, make: impl FnOnce(Reply<T>) -> Cmd) -> Result<T, DelegatorError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .unbounded_send(make(tx))
            .map_err(|_| DelegatorError::Closed)?;
        rx.await.map_err(|_| DelegatorError::Closed)?
    }

    /// Starts a delegation; returns its id at once (follow it with [`Self::wait`] or
    /// [`Self::events`]).
    pub async fn delegate(&self, params: DelegateParams) -> Result<DelegationId, DelegatorError> {
        self.call(|r| Cmd::Delegate(params, r)).await
    }

    /// Cancels a delegation.
    pub async fn cancel(&self, id: &DelegationId) -> Result<(), DelegatorError> {
        self.call(|r| Cmd::Cancel(id.clone(), r)).await
    }

    /// Applies a staged snapshot (completes when applied or failed).
    pub async fn apply_snapshot(
        &self,
        id: &DelegationId,
        sid: &SnapshotId,
    ) -> Result<(), DelegatorError> {
        self.call(|r| Cmd::Apply(id.clone(), sid.clone(), r)).await
    }

    /// Discards a staged snapshot.
    pub async fn discard_snapshot(
        &self,
        id: &DelegationId,
        sid: &SnapshotId,
    ) -> Result<(), DelegatorError> {
        self.call(|r| Cmd::Discard(id.clone(), sid.clone(), r))
            .await
    }

    /// One delegation.
    pub async fn get(&self, id: &DelegationId) -> Option<DelegationView> {
        let (tx, rx) = oneshot::channel();
        self.tx.unbounded_send(Cmd::Get(id.clone(), tx)).ok()?;
        rx.await.ok()?
    }

    /// Every delegation.
    pub async fn list(&self) -> Vec<DelegationView> {
        let (tx, rx) = oneshot::channel();
        if self.tx.unbounded_send(Cmd::List(tx)).is_err() {
            return Vec::new();
        }
        rx.await.unwrap_or_default()
    }

    /// Waits until the delegation has ended (terminal and everything released).
    pub async fn wait(&self, id: &DelegationId) -> Option<DelegationView> {
        let (tx, rx) = oneshot::channel();
        self.tx.unbounded_send(Cmd::Wait(id.clone(), tx)).ok()?;
        rx.await.ok()?
    }

    /// Stops the engine task without touching the delegations: their journal records let a
    /// new [`DelegatorHandle`] on the same state directory resume them (reconnecting to the
    /// executor). Requests already sent that tell an executor something final (the ack that
    /// lets it forget a result, a cancel, an ERROR) are let finish first, for at most
    /// [`DelegatorOptions::request_timeout`]. In-flight transport work may still finish in the
    /// background.
    pub async fn stop(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.unbounded_send(Cmd::Stop(tx)).is_ok() {
            let _ = rx.await;
        }
    }

    /// A stream of transfer sizes (workspace archive sent, snapshot received).
    pub fn transfers(&self) -> mpsc::UnboundedReceiver<Transfer> {
        let (tx, rx) = mpsc::unbounded();
        let _ = self.tx.unbounded_send(Cmd::SubscribeTransfers(tx));
        rx
    }

    /// A stream of every engine event (progress displays, logs).
    pub fn events(&self) -> mpsc::UnboundedReceiver<DelegatorEvent> {
        let (tx, rx) = mpsc::unbounded();
        let _ = self.tx.unbounded_send(Cmd::Subscribe(tx));
        rx
    }

    /// The archive listener's handler (one-time archive URLs only) as an
    /// [`agent_rt::Handler`] ([`Self::handle_archive_http`]).
    pub fn archive_handler(&self) -> agent_rt::Handler {
        let d = self.clone();
        agent_rt::Handler::new(move |req| {
            let r = d.handle_archive_http(&req);
            async move { r }
        })
    }

    /// Answers one request to the delegator's archive listener: `GET /archives/{token}`, a
    /// one-time, delegation-bound, expiring archive URL (executors fetch URL-mode workspaces
    /// there). Everything else is 404: the daemon API is never served here (it has its own
    /// listener, [`daemon::DaemonApi`]). Every driver's archive server calls this.
    pub fn handle_archive_http<B>(&self, req: &http::Request<B>) -> http::Response<ResponseBody> {
        let not_found = |what: &str| {
            net::json_response(
                404,
                wire_http::reject(404, None, ErrorInfo::new(ErrorCode::NotFound, what)).1,
            )
        };
        let Some(token) = req.uri().path().strip_prefix("/archives/") else {
            return not_found("this listener serves one-time archive URLs only");
        };
        if req.method() != Method::GET {
            return not_found("unknown, used or expired archive URL");
        }
        let entry = self
            .archives
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&token_key(token));
        let now = (self.now)();
        match entry {
            Some((_, path, expires)) if now < expires => crate::executor::file_response_pub(path),
            _ => not_found("unknown, used or expired archive URL"),
        }
    }
}

struct Loop<R: Runtime> {
    rt: R,
    http: agent_rt::HttpClient<R>,
    engine: Delegator,
    tx: mpsc::UnboundedSender<Cmd>,
    opts: Arc<DelegatorOptions>,
    journal: crate::executor::journal::Journal,
    specs: BTreeMap<DelegationId, Vec<ResourceSpec>>,
    baselines: Arc<Mutex<BTreeMap<DelegationId, Baseline>>>,
    streams: BTreeMap<DelegationId, AbortHandle>,
    waiters: BTreeMap<DelegationId, Vec<oneshot::Sender<Option<DelegationView>>>>,
    subscribers: Vec<mpsc::UnboundedSender<DelegatorEvent>>,
    transfer_subscribers: Vec<mpsc::UnboundedSender<Transfer>>,
    archives: ArchiveTable,
    /// The state directory's lock, held while the engine runs.
    lock: Option<std::fs::File>,
    /// Requests that tell an executor something final (ack, cancel, ERROR) still in flight:
    /// [`DelegatorHandle::stop`] lets them finish.
    farewells: Vec<oneshot::Receiver<()>>,
}

impl<R: Runtime> Loop<R> {
    async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Cmd>) {
        loop {
            self.drain();
            let sleep = match self.engine.poll_timeout() {
                Some((t, why)) => {
                    tracing::trace!(reason = why.as_str(), "next wake-up");
                    sleep_until(&self.rt, t)
                }
                None => self.rt.sleep(Duration::from_secs(3600)),
            };
            match futures::future::select(rx.next(), sleep).await {
                Either::Left((Some(Cmd::Stop(done)), _)) => {
                    // Leave delegations as they are: the journal lets a new process resume.
                    for (_, h) in std::mem::take(&mut self.streams) {
                        h.abort();
                    }
                    // An ack, cancel or ERROR already sent reaches the executor before the
                    // process may exit (bounded by the request timeout).
                    let farewells = std::mem::take(&mut self.farewells);
                    if !farewells.is_empty() {
                        let all = futures::future::join_all(farewells);
                        let bound = self.rt.sleep(self.opts.request_timeout);
                        let _ = futures::future::select(all, bound).await;
                    }
                    // Released before `stop` returns, so a new handle can take over at once.
                    drop(self.lock.take());
                    let _ = done.send(());
                    break;
                }
                Either::Left((Some(cmd), _)) => self.on_cmd(cmd),
                Either::Left((None, _)) => break,
                Either::Right(_) => self.engine.handle_timeout(self.rt.now()),
            }
        }
    }

    fn now(&self) -> Timestamp {
        self.rt.now()
    }

    fn on_cmd(&mut self, cmd: Cmd) {
        let now = self.now();
        match cmd {
            Cmd::Delegate(p, reply) => {
                let id = match p.id.clone().map_or_else(random_id, Ok) {
                    Ok(id) => id,
                    Err(e) => {
                        let _ = reply.send(Err(e.into()));
                        return;
                    }
                };
                let resources = p
                    .resources
                    .iter()
                    .map(|r| Resource {
                        name: r.name.clone(),
                        kind: "fs".into(),
                        mode: r.mode,
                    })
                    .collect();
                let req = DelegateRequest {
                    id: id.clone(),
                    peer: p.peer,
                    dialect: p.dialect,
                    task: p.task,
                    ttl_seconds: p.ttl_seconds,
                    access_mode: p.access_mode,
                    resources,
                    transport: p.transport,
                    snapshot_mode: p.snapshot_mode,
                    auth: p.auth,
                    allow_sensitive: p.allow_sensitive,
                };
                let r = self.engine.delegate(now, req).map(|_| id.clone());
                if r.is_ok() {
                    self.specs.insert(id.clone(), p.resources);
                    // Journalled at once: a crash never loses a delegation the caller has an
                    // id for (a restarted delegator ends it cleanly).
                    self.persist(&id);
                }
                let _ = reply.send(r.map_err(Into::into));
            }
            Cmd::Cancel(id, reply) => {
                let _ = reply.send(self.engine.cancel(now, &id).map_err(Into::into));
            }
            Cmd::Apply(id, sid, reply) => {
                let _ = reply.send(
                    self.engine
                        .apply_snapshot(now, &id, &sid)
                        .map_err(Into::into),
                );
            }
            Cmd::Discard(id, sid, reply) => {
                let _ = reply.send(
                    self.engine
                        .discard_snapshot(now, &id, &sid)
                        .map_err(Into::into),
                );
            }
            Cmd::Get(id, reply) => {
                let _ = reply.send(self.engine.get(&id));
            }
            Cmd::List(reply) => {
                let all = self
                    .engine
                    .list()
                    .into_iter()
                    .filter_map(|(id, _)| self.engine.get(&id))
                    .collect();
                let _ = reply.send(all);
            }
            Cmd::Wait(id, reply) => match self.engine.get(&id) {
                None => {
                    let _ = reply.send(None);
                }
                Some(v) if v.ended => {
                    let _ = reply.send(Some(v));
                }
                Some(_) => self.waiters.entry(id).or_default().push(reply),
            },
            Cmd::Subscribe(tx) => self.subscribers.push(tx),
            Cmd::Stop(_) => {}
            Cmd::Transferred(t) => self
                .transfer_subscribers
                .retain(|s| s.unbounded_send(t.clone()).is_ok()),
            Cmd::SubscribeTransfers(tx) => self.transfer_subscribers.push(tx),
            Cmd::Input(i) => {
                if let Err(e) = self.engine.handle(now, i) {
                    tracing::debug!("input ignored: {e}");
                }
            }
        }
    }

    fn feed(&self) -> impl Fn(DelegatorInput) + Send + Sync + Clone + 'static {
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

    /// The headers a request to `url` for `id` carries: the credential, if the engine says
    /// `url` gets it.
    fn credential_headers(&self, id: &DelegationId, url: &str) -> Vec<(&'static str, String)> {
        self.engine.credential_header(id, url).into_iter().collect()
    }

    /// The admission limits (configured once, in the engine) and whether `id` may lend
    /// secret-looking files: what the transport re-checks when it packs.
    fn admission_of(&self, id: &DelegationId) -> (awcp_proto::AdmissionLimits, bool) {
        let allow = self
            .engine
            .get(id)
            .is_some_and(|v| v.request.allow_sensitive);
        (self.engine.config().admission, allow)
    }

    fn post(&mut self, id: DelegationId, to: Outbound, url: String, body: Option<String>) {
        let http = self.http.clone();
        let feed = self.feed();
        let headers = self.credential_headers(&id, &url);
        let timeout = self.opts.request_timeout;
        let max_reply = self.engine.config().max_reply_bytes;
        let farewell = if to.is_farewell() {
            self.farewells
                .retain_mut(|r| matches!(r.try_recv(), Ok(None)));
            let (tx, rx) = oneshot::channel();
            self.farewells.push(rx);
            Some(tx)
        } else {
            None
        };
        self.rt.spawn(Box::pin(async move {
            let hdrs: Vec<(&str, String)> = headers.iter().map(|(k, v)| (*k, v.clone())).collect();
            let reply = match http
                .request(
                    Method::POST,
                    &url,
                    &hdrs,
                    body.map(Bytes::from),
                    timeout,
                    max_reply,
                )
                .await
            {
                Ok((status, body)) => wire_http::decode_reply(status, &body),
                Err(e) => awcp_proto::engine::delegator::Reply::Failed(RequestFailure::Network(
                    e.to_string(),
                )),
            };
            feed(DelegatorInput::Reply { id, to, reply });
            if let Some(tx) = farewell {
                let _ = tx.send(());
            }
        }));
    }

    fn execute(&mut self, out: DelegatorOutput) {
        match out {
            DelegatorOutput::ScanWorkspace { id } => {
                let specs = self.specs.get(&id).cloned().unwrap_or_default();
                let feed = self.feed();
                let rt = self.rt.clone();
                self.rt.spawn(Box::pin(async move {
                    let result = blocking(&rt, move || scan(&specs)).await;
                    feed(DelegatorInput::ScanCompleted { id, result });
                }));
            }
            DelegatorOutput::SendMessage {
                id,
                to,
                peer,
                message,
                dialect,
            } => {
                let body = encode_message(&message, dialect);
                self.post(id, to, peer, Some(body));
            }
            DelegatorOutput::SendCancel { id, peer } => {
                let url = wire_http::cancel_url(&peer, &id);
                self.post(id, Outbound::Cancel, url, None);
            }
            DelegatorOutput::SendAck { id, peer } => {
                let url = wire_http::ack_url(&peer, &id);
                self.post(id, Outbound::Ack, url, None);
            }
            DelegatorOutput::PrepareTransport {
                id,
                transport,
                access_mode,
                expires_at,
                dialect,
                features,
            } if transport.is_live() => {
                let specs = self.specs.get(&id).cloned().unwrap_or_default();
                let (admission, allow_sensitive) = self.admission_of(&id);
                let t = self
                    .opts
                    .extra_transports
                    .iter()
                    .find(|t| t.kind() == transport)
                    .cloned();
                let feed = self.feed();
                let rt = self.rt.clone();
                self.rt.spawn(Box::pin(async move {
                    let did = id.clone();
                    let result = blocking(&rt, move || {
                        let t = t.ok_or_else(|| {
                            ErrorInfo::new(
                                ErrorCode::TransportError,
                                format!("transport {} is not configured", transport.as_str()),
                            )
                        })?;
                        let req = PrepareRequest {
                            delegation_id: &did,
                            resources: &specs,
                            access_mode,
                            export: ExportViewKind::default(),
                            delivery: Delivery::Inline,
                            layout: if dialect == Dialect::Seed {
                                Layout::Flat
                            } else {
                                Layout::PerResource
                            },
                            admission: Some(admission),
                            allow_sensitive,
                        };
                        let _ = features;
                        t.prepare_live(&req, expires_at, &CancelFlag::new())
                            .map_err(|e| e.to_error_info())
                    })
                    .await;
                    feed(DelegatorInput::TransportPrepared { id, result });
                }));
            }
            DelegatorOutput::PrepareTransport {
                id,
                transport: _,
                access_mode,
                expires_at,
                dialect,
                features,
            } => {
                let specs = self.specs.get(&id).cloned().unwrap_or_default();
                let (admission, allow_sensitive) = self.admission_of(&id);
                let t = self.opts.transport.clone();
                let feed = self.feed();
                let rt = self.rt.clone();
                let by_url = features.iter().any(|f| f == feature::ARCHIVE_URL)
                    && self.opts.archive_base_url.is_some();
                let base = self.opts.archive_base_url.clone();
                let peer = self.engine.get(&id).map(|v| v.request.peer);
                let dir = self.opts.state_dir.join("archives");
                let archives = self.archives.clone();
                let baselines = self.baselines.clone();
                let baseline_file = self.baseline_file(&id);
                let note = self.tx.clone();
                self.rt.spawn(Box::pin(async move {
                    let did = id.clone();
                    let result = blocking(&rt, move || {
                        let delivery = if by_url {
                            std::fs::create_dir_all(&dir).map_err(|e| {
                                ErrorInfo::new(
                                    ErrorCode::TransportError,
                                    format!("archive dir: {e}"),
                                )
                            })?;
                            Delivery::File(dir)
                        } else {
                            Delivery::Inline
                        };
                        let req = PrepareRequest {
                            delegation_id: &did,
                            resources: &specs,
                            access_mode,
                            export: ExportViewKind::default(),
                            delivery,
                            layout: if dialect == Dialect::Seed {
                                Layout::Flat
                            } else {
                                Layout::PerResource
                            },
                            admission: Some(admission),
                            allow_sensitive,
                        };
                        let prepared = t
                            .prepare(&req, &CancelFlag::new())
                            .map_err(|e| e.to_error_info())?;
                        let _ = note.unbounded_send(Cmd::Transferred(Transfer {
                            id: did.clone(),
                            what: "workspace archive",
                            bytes: prepared.archive.size_bytes(),
                        }));
                        // Persisted before START: an apply after a restart still compares
                        // against what was sent.
                        if let (Some(dir), Ok(json)) = (
                            baseline_file.parent(),
                            serde_json::to_vec(&prepared.baseline),
                        ) {
                            crate::executor::journal::write_atomic(
                                dir,
                                &format!("{did}.json"),
                                &json,
                            )
                            .map_err(|e| {
                                // Nothing prepared may outlive a failed prepare.
                                let _ = t.release(&did);
                                ErrorInfo::new(
                                    ErrorCode::TransportError,
                                    format!("persisting the baseline: {e}"),
                                )
                            })?;
                        }
                        baselines
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(did.clone(), prepared.baseline.clone());
                        Ok::<_, ErrorInfo>(match prepared.archive {
                            ArchiveOutput::Inline(h) => TransportHandle::Archive(h),
                            ArchiveOutput::File(f) => {
                                let token = crate::security::random_token().map_err(|e| {
                                    ErrorInfo::new(ErrorCode::TransportError, e.to_string())
                                })?;
                                let base = match (base.as_deref(), peer.as_deref()) {
                                    (Some(b), Some(p)) => agent_rt::origin::concrete_base_for(b, p),
                                    (b, _) => b.unwrap_or("").to_owned(),
                                };
                                let url =
                                    format!("{}/archives/{token}", base.trim_end_matches('/'));
                                archives.lock().unwrap_or_else(|p| p.into_inner()).insert(
                                    token_key(&token),
                                    (did.clone(), f.path.clone(), expires_at),
                                );
                                TransportHandle::Archive(f.handle_for_url(url))
                            }
                        })
                    })
                    .await;
                    feed(DelegatorInput::TransportPrepared { id, result });
                }));
            }
            DelegatorOutput::OpenEventStream { id, peer } => self.open_stream(id, peer),
            DelegatorOutput::CloseEventStream { id } => {
                if let Some(h) = self.streams.remove(&id) {
                    h.abort();
                }
            }
            DelegatorOutput::FetchResult { id, peer } => {
                let http = self.http.clone();
                let feed = self.feed();
                let url = wire_http::result_url(&peer, &id);
                let headers = self.credential_headers(&id, &url);
                let timeout = self.opts.request_timeout;
                let limit = self.opts.max_snapshot_bytes * 2;
                self.rt.spawn(Box::pin(async move {
                    let hdrs: Vec<(&str, String)> =
                        headers.iter().map(|(k, v)| (*k, v.clone())).collect();
                    let result = match http
                        .request(Method::GET, &url, &hdrs, None, timeout, limit)
                        .await
                    {
                        Ok((_, body)) => serde_json::from_slice::<serde_json::Value>(&body)
                            .map_err(|e| format!("bad result body: {e}"))
                            .and_then(|v| wire_http::decode_result(&id, &v))
                            .map_err(RequestFailure::Unusable),
                        Err(e) => Err(RequestFailure::Network(e.to_string())),
                    };
                    feed(DelegatorInput::ResultFetched { id, result });
                }));
            }
            DelegatorOutput::ApplySnapshot { id, snapshot_id } => self.apply(id, snapshot_id),
            DelegatorOutput::StoreSnapshot { id, snapshot } => {
                let http = self.http.clone();
                let feed = self.feed();
                let dir = self.snapshot_dir(&id);
                let limit = self.opts.max_snapshot_bytes;
                let download_timeout = self.engine.config().snapshot_download_timeout;
                let headers = snapshot
                    .data
                    .url
                    .as_deref()
                    .map(|u| self.credential_headers(&id, u))
                    .unwrap_or_default();
                let note = self.tx.clone();
                self.rt.spawn(Box::pin(async move {
                    let sid = snapshot.snapshot_id.clone();
                    let result =
                        store_snapshot(&http, &dir, &snapshot, &headers, limit, download_timeout)
                            .await
                            .map(|bytes| {
                                let _ = note.unbounded_send(Cmd::Transferred(Transfer {
                                    id: id.clone(),
                                    what: "snapshot",
                                    bytes,
                                }));
                            });
                    feed(DelegatorInput::SnapshotStored {
                        id,
                        snapshot_id: sid,
                        result,
                    });
                }));
            }
            DelegatorOutput::DeleteStoredSnapshot { id, snapshot_id } => {
                let dir = self.snapshot_dir(&id);
                let _ = std::fs::remove_file(dir.join(format!("{snapshot_id}.zip")));
                let _ = std::fs::remove_file(dir.join(format!("{snapshot_id}.zip.part")));
                let _ = std::fs::remove_file(dir.join(format!("{snapshot_id}.json")));
                let _ = std::fs::remove_dir(&dir);
            }
            DelegatorOutput::ReleaseTransport { id } => {
                // Release is idempotent: every transport forgets what it holds for `id`.
                let mut ts = vec![self.opts.transport.clone()];
                ts.extend(self.opts.extra_transports.iter().cloned());
                let feed = self.feed();
                let rt = self.rt.clone();
                self.archives
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .retain(|_, (d, path, _)| {
                        if *d == id {
                            let _ = std::fs::remove_file(path);
                            false
                        } else {
                            true
                        }
                    });
                self.rt.spawn(Box::pin(async move {
                    let did = id.clone();
                    let warnings = blocking(&rt, move || {
                        let mut warnings = Vec::new();
                        for t in ts {
                            match t.release(&did) {
                                Ok(report) => warnings.extend(report.warnings),
                                Err(e) => {
                                    tracing::warn!(delegation = %did, "release failed: {e}");
                                    warnings.push(format!("releasing the workspace failed: {e}"));
                                }
                            }
                        }
                        for w in &warnings {
                            tracing::warn!(delegation = %did, "{w}");
                        }
                        warnings
                    })
                    .await;
                    feed(DelegatorInput::TransportReleased { id, warnings });
                }));
            }
            DelegatorOutput::Event(ev) => self.on_event(ev),
        }
    }

    fn snapshot_dir(&self, id: &DelegationId) -> PathBuf {
        self.opts.state_dir.join("snapshots").join(id.as_str())
    }

    /// Where the baseline of `id` (what was sent, for three-way applies) is persisted.
    fn baseline_file(&self, id: &DelegationId) -> PathBuf {
        baseline_file(&self.opts.state_dir, id)
    }

    fn open_stream(&mut self, id: DelegationId, peer: String) {
        if let Some(h) = self.streams.remove(&id) {
            h.abort();
        }
        let (handle, reg) = AbortHandle::new_pair();
        self.streams.insert(id.clone(), handle);
        let http = self.http.clone();
        let feed = self.feed();
        let url = wire_http::events_url(&peer, &id);
        let headers = self.credential_headers(&id, &url);
        let open_timeout = self.engine.config().event_stream_open_timeout;
        let fut = async move {
            let mut hdrs: Vec<(&str, String)> =
                headers.iter().map(|(k, v)| (*k, v.clone())).collect();
            hdrs.push(("accept", "text/event-stream".into()));
            let resp = net::with_timeout(
                http.runtime(),
                open_timeout,
                http.send(Method::GET, &url, &hdrs, None),
            )
            .await;
            let resp = match resp {
                Ok(r) if r.status().is_success() => r,
                Ok(r) => {
                    return feed(DelegatorInput::EventStreamClosed {
                        id,
                        reason: Some(format!("HTTP {}", r.status())),
                    })
                }
                Err(e) => {
                    return feed(DelegatorInput::EventStreamClosed {
                        id,
                        reason: Some(e.to_string()),
                    })
                }
            };
            feed(DelegatorInput::EventStreamOpened { id: id.clone() });
            let mut body = resp.into_body();
            let mut dec = sse::SseDecoder::default();
            let reason = loop {
                match body.frame().await {
                    None => break None,
                    Some(Err(e)) => break Some(e.to_string()),
                    Some(Ok(frame)) => {
                        let Ok(data) = frame.into_data() else {
                            continue;
                        };
                        dec.push(&data);
                        while let Some(ev) = dec.next_event() {
                            match ev {
                                Ok(ev) => match decode_event(ev.data.as_bytes()) {
                                    Ok((event, _)) if event.delegation_id == id => {
                                        feed(DelegatorInput::TaskEvent { event })
                                    }
                                    Ok(_) => {
                                        tracing::warn!(delegation = %id, "event for another delegation ignored")
                                    }
                                    Err(e) => {
                                        tracing::warn!(delegation = %id, "undecodable event skipped: {e}")
                                    }
                                },
                                Err(e) => tracing::warn!(delegation = %id, "SSE framing: {e}"),
                            }
                        }
                    }
                }
            };
            feed(DelegatorInput::EventStreamClosed { id, reason });
        };
        self.rt.spawn(Box::pin(async move {
            let _ = Abortable::new(fut, reg).await;
        }));
    }

    /// Applies the stored snapshot `sid` (see [`DelegatorOutput::ApplySnapshot`]).
    fn apply(&mut self, id: DelegationId, sid: SnapshotId) {
        let rt = self.rt.clone();
        let feed = self.feed();
        let t = self.opts.transport.clone();
        let specs = self.specs.get(&id).cloned().unwrap_or_default();
        let view = self.engine.get(&id);
        let access = view
            .as_ref()
            .map(|v| v.access_mode)
            .unwrap_or(AccessMode::Ro);
        let layout = match view.as_ref().map(|v| v.request.dialect) {
            Some(Dialect::Seed) => Layout::Flat,
            _ => Layout::PerResource,
        };
        let baselines = self.baselines.clone();
        let baseline_file = self.baseline_file(&id);
        let dir = self.snapshot_dir(&id);
        let limits = self.opts.engine.admission;
        self.rt.spawn(Box::pin(async move {
            let did = id.clone();
            let s = sid.clone();
            let result = blocking(&rt, move || {
                // The base the delegator sent: in memory, or persisted at prepare.
                let baseline = baselines
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get(&did)
                    .cloned()
                    .or_else(|| load_baseline(&baseline_file));
                let file = dir.join(format!("{s}.zip"));
                let checksum = std::fs::read(dir.join(format!("{s}.json")))
                    .ok()
                    .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
                    .and_then(|m| m.get("checksum")?.as_str().map(str::to_owned));
                let req = ApplyRequest {
                    delegation_id: did.as_str(),
                    source: ArchiveSource::File(&file),
                    expected_checksum: checksum.as_deref(),
                    resources: &specs,
                    access_mode: access,
                    baseline: baseline.as_ref(),
                    layout: Some(layout),
                    limits: Some(limits),
                };
                t.apply_snapshot(req, &CancelFlag::new())
                    .map(|report| {
                        tracing::info!(delegation = %did, snapshot = %s, written = report.written.len(), deleted = report.deleted.len(), "snapshot applied");
                    })
                    .map_err(|e| e.apply_error_info())
            })
            .await;
            feed(DelegatorInput::SnapshotApplied {
                id,
                snapshot_id: sid,
                result,
            });
        }));
    }

    fn persist(&self, id: &DelegationId) {
        match self.engine.record(id).map(|r| r.to_json()) {
            Some(mut rec) => {
                if let Some(specs) = self.specs.get(id) {
                    rec["sources"] = serde_json::Value::Array(
                        specs
                            .iter()
                            .map(|s| {
                                serde_json::json!({
                                    "name": s.name.as_str(),
                                    "path": s.source_path.to_string_lossy(),
                                    "mode": s.mode.as_str(),
                                })
                            })
                            .collect(),
                    );
                }
                self.journal.write(id, &rec);
            }
            None => self.journal.remove(id),
        }
    }

    fn on_event(&mut self, ev: DelegatorEvent) {
        match &ev {
            DelegatorEvent::StateChanged { id, .. }
            | DelegatorEvent::Snapshot { id, .. }
            | DelegatorEvent::Ended { id, .. } => self.persist(id),
            DelegatorEvent::Forgotten { id } => {
                self.journal.remove(id);
                self.specs.remove(id);
                let _ = std::fs::remove_file(self.baseline_file(id));
            }
            DelegatorEvent::Progress { .. } | DelegatorEvent::PeerMisbehaved { .. } => {}
        }
        if let DelegatorEvent::Ended {
            id, state, error, ..
        } = &ev
        {
            tracing::info!(delegation = %id, %state, error = ?error.as_ref().map(|e| e.code.as_str()), "delegation ended");
            self.baselines
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(id);
            let view = self.engine.get(id);
            for w in self.waiters.remove(id).unwrap_or_default() {
                let _ = w.send(view.clone());
            }
        }
        self.subscribers
            .retain(|s| s.unbounded_send(ev.clone()).is_ok());
    }
}

fn scan(specs: &[ResourceSpec]) -> Result<WorkspaceStats, ErrorInfo> {
    for s in specs {
        match std::fs::metadata(&s.source_path) {
            Err(_) => {
                return Err(ErrorInfo::new(
                    ErrorCode::WorkspaceNotFound,
                    format!("workspace {} does not exist", s.source_path.display()),
                ))
            }
            Ok(m) if !m.is_dir() => {
                return Err(ErrorInfo::new(
                    ErrorCode::WorkspaceInvalid,
                    format!("workspace {} is not a directory", s.source_path.display()),
                ))
            }
            Ok(_) => {}
        }
    }
    awcp_transports::scan(specs, &Default::default(), &CancelFlag::new())
        .map_err(|e| e.to_error_info())
}

/// Stores a snapshot durably under `dir`: `<sid>.zip` (written to a temporary name, fsynced,
/// renamed) and `<sid>.json` (its summary and checksum). Returns the size of the ZIP.
async fn store_snapshot<R: Runtime>(
    http: &agent_rt::HttpClient<R>,
    dir: &Path,
    snap: &SnapshotEvent,
    headers: &[(&'static str, String)],
    limit: u64,
    download_timeout: Duration,
) -> Result<u64, ErrorInfo> {
    let rt = http.runtime();
    let fail = |m: String| ErrorInfo {
        code: ErrorCode::TransportError,
        message: m,
        hint: Some(
            "The result could not be stored locally, so it was not applied and the executor was \
             not acknowledged (it keeps the result until its retention ends): check the \
             delegator's state directory (disk space, permissions) and its connection to the \
             executor."
                .into(),
        ),
    };
    let d = dir.to_path_buf();
    blocking(rt, move || std::fs::create_dir_all(d))
        .await
        .map_err(|e| {
            fail(format!(
                "creating the snapshot store {}: {e}",
                dir.display()
            ))
        })?;
    let zip = dir.join(format!("{}.zip", snap.snapshot_id));
    let part = dir.join(format!("{}.zip.part", snap.snapshot_id));
    let size = match (&snap.data.base64, &snap.data.url) {
        (Some(b), _) => {
            let bytes =
                awcp_transports::archive::decode_base64(b).map_err(|e| e.to_error_info())?;
            let n = bytes.len() as u64;
            let p = part.clone();
            blocking(rt, move || {
                use std::io::Write;
                let mut f = std::fs::File::create(&p)?;
                f.write_all(&bytes)?;
                f.sync_all()
            })
            .await
            .map_err(|e| fail(format!("writing the snapshot: {e}")))?;
            n
        }
        (None, Some(url)) => http
            .download(url, headers, part.clone(), limit, download_timeout)
            .await
            .map_err(|e| fail(format!("fetching the snapshot: {e}")))?,
        (None, None) => return Err(fail("snapshot carries no data".into())),
    };
    let meta = serde_json::json!({
        "snapshotId": snap.snapshot_id.as_str(),
        "summary": snap.summary,
        "highlights": snap.highlights,
        "checksum": snap.checksum,
        "metadata": snap.metadata,
    });
    let (d, name) = (dir.to_path_buf(), format!("{}.json", snap.snapshot_id));
    blocking(rt, move || {
        std::fs::rename(&part, &zip)?;
        crate::executor::journal::write_atomic(&d, &name, meta.to_string().as_bytes())
    })
    .await
    .map_err(|e| fail(format!("storing the snapshot: {e}")))?;
    Ok(size)
}

/// `<state>/baselines/<id>.json`.
fn baseline_file(state_dir: &Path, id: &DelegationId) -> PathBuf {
    state_dir.join("baselines").join(format!("{id}.json"))
}

/// The baseline persisted at `path`, if readable.
fn load_baseline(path: &Path) -> Option<Baseline> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// A fresh delegation id from the OS random source (no fallback: it stands for a credential
/// with executors that bind INVITE's credential to the id).
fn random_id() -> Result<DelegationId, crate::security::RandomUnavailable> {
    Ok(DelegationId::from_random(crate::security::random_bytes()?))
}

#[allow(dead_code)]
fn _types(_: ResponseBody) {}
