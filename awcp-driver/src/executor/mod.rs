//! The executor side: one task owns the [`Executor`] engine and executes its outputs; HTTP
//! handlers talk to it through a channel ([`ExecutorHandle`]).

mod event_loop;
mod http;
pub mod journal;
pub mod lock;
mod recovery;
pub mod tunnel;
mod workspace;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use awcp_proto::engine::auth::BodyLimits;
use awcp_proto::engine::executor::{
    work_root_refusal, Credential, Request, RequiredAuth, Response,
};
use awcp_proto::engine::{StreamId, UsageError};
use awcp_proto::{DelegationId, ErrorInfo, Executor, ExecutorConfig, ExecutorEvent, ExecutorInput};
use awcp_transports::{ExecutorTransport, TaskRunner};
use bytes::Bytes;
use futures::channel::{mpsc, oneshot};

use crate::card::AgentCard;
use crate::runtime::Runtime;

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
    /// The git transport (list `git` in `engine.transports` too): it sets up from its handle
    /// and pushes results itself, so the loop holds it by its type.
    pub git: Option<Arc<awcp_transports::git::GitExecutor>>,
    /// The agent that does the work.
    pub runner: Arc<dyn TaskRunner>,
    /// Largest request body accepted (START carries inline archives).
    pub max_body_bytes: u64,
    /// With auth on: largest body read from a request without a credential header (1 MiB).
    /// Such requests are INVITEs and, from reference delegators (which send no header),
    /// STARTs with inline archives; anything larger is refused, except a message whose first
    /// 64 KiB name a delegation its INVITE bound without a header (read up to
    /// `max_body_bytes`).
    pub max_unauthenticated_body_bytes: u64,
    /// SSE keepalive interval (≤ 30 s).
    pub keepalive: Duration,
    /// Honour `Forwarded` / `X-Forwarded-Proto` / `X-Forwarded-Host` when deriving a
    /// delegation's origin (set this behind a reverse proxy that sets them).
    pub trust_forwarded_headers: bool,
    /// TLS settings for fetching archives by URL from delegators (`https` archive servers:
    /// private CA, client certificate).
    pub client_tls: agent_rt::ClientTls,
    /// The A2A agent card served at `/.well-known/agent-card.json`.
    pub card: AgentCard,
    /// Where assignment records are journalled (None: not durable, and nothing a crashed
    /// predecessor left is cleaned up). Also holds downloads and captured snapshots.
    pub state_dir: Option<PathBuf>,
    /// Without a credential configured: further host names the executor is reached by. A
    /// request whose `Host` is a name other than these, `localhost` and the public URL's host
    /// is refused (421), as a DNS-rebinding web page's would be (IP addresses always pass;
    /// see [`awcp_proto::http_binding::refuse_foreign_host`]).
    pub allowed_hosts: Vec<String>,
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
            git: None,
            runner,
            max_body_bytes: 256 * 1024 * 1024,
            max_unauthenticated_body_bytes: 1024 * 1024,
            keepalive: Duration::from_secs(15),
            trust_forwarded_headers: false,
            client_tls: agent_rt::ClientTls::default(),
            card: AgentCard::default(),
            state_dir: None,
            allowed_hosts: Vec::new(),
        }
    }
}

pub(crate) enum Cmd {
    Request {
        credential: Option<Credential>,
        body: Request,
        reply: oneshot::Sender<Response>,
        /// The origin the peer used ([`ExecutorInput::Request::origin`](awcp_proto::ExecutorInput)).
        origin: Option<String>,
    },
    Subscribe {
        id: DelegationId,
        credential: Option<Credential>,
        /// The `Last-Event-ID` header, if it was a number.
        last_event_id: Option<u64>,
        /// The stream's events (a queue of `stream_queue_events`), or why the subscription
        /// was refused (before the response status is chosen).
        verdict: oneshot::Sender<Result<EventFeed, ErrorInfo>>,
    },
    StreamClosed(StreamId),
    Input(ExecutorInput),
    Status(oneshot::Sender<awcp_proto::engine::executor::ExecutorStatus>),
    Overview(oneshot::Sender<Vec<awcp_proto::engine::executor::AssignmentSummary>>),
    /// May this credential download this snapshot? (The engine decides.)
    AuthorizeSnapshot {
        id: DelegationId,
        snapshot_id: String,
        credential: Option<Credential>,
        verdict: oneshot::Sender<Result<(), (u16, ErrorInfo)>>,
    },
    /// Which body limit applies to a message without a credential header whose first bytes
    /// name `id`? (The engine decides: `Executor::message_body_limit`.)
    MessageBodyLimit {
        id: Option<DelegationId>,
        credential: Option<Credential>,
        announced: Option<u64>,
        limits: BodyLimits,
        verdict: oneshot::Sender<Result<u64, (u16, ErrorInfo)>>,
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

/// Under the executor's scratch directory: captured results sent inline (from the file),
/// removed at start.
const INLINE_RESULTS: &str = "inline-results";

/// Files of captured snapshots (served by URL or sent inline), keyed by (delegation,
/// snapshot).
pub(crate) type SnapshotFiles = Arc<Mutex<BTreeMap<(String, String), PathBuf>>>;

/// How many of an agent's last output lines the executor keeps for its dashboard.
pub const OUTPUT_TAIL_LINES: usize = 40;

/// The last lines each running agent printed ([`OUTPUT_TAIL_LINES`] each), for the dashboard;
/// dropped when the assignment is forgotten.
pub(crate) type OutputTails =
    Arc<Mutex<BTreeMap<DelegationId, std::collections::VecDeque<String>>>>;

/// One assignment and the tail of its agent's output ([`ExecutorHandle::overview`]).
#[derive(Clone, Debug)]
pub struct TaskOverview {
    /// What the engine says of it.
    pub summary: awcp_proto::engine::executor::AssignmentSummary,
    /// The agent's last output lines, oldest first.
    pub output_tail: Vec<String>,
}

/// A cheap handle to a running executor: mount [`ExecutorHandle::handle_http`] in any HTTP
/// server (awcp-tokio and awcp-smol do).
#[derive(Clone)]
pub struct ExecutorHandle {
    tx: mpsc::UnboundedSender<Cmd>,
    opts: Arc<SharedOpts>,
    snapshots: SnapshotFiles,
    tails: OutputTails,
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
    /// Host names allowed besides IP addresses, localhost and the public URL's host.
    pub allowed_hosts: Vec<String>,
    pub connections_needed: usize,
    /// The dashboard's sessions (with auth on), made at its first request (the cookie is
    /// named after the port that request came to).
    pub dashboard_sessions: std::sync::OnceLock<crate::dashboard::session::Sessions>,
    /// Where received archives are written (`{scratch}/downloads`).
    pub downloads: PathBuf,
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
        let tails: OutputTails = Arc::default();
        let mut work_root = PathBuf::from(&opts.engine.work_root);
        let unusable = |path: &Path, reason: String| StartError::Unusable {
            what: "work root",
            path: path.to_owned(),
            reason,
        };
        // A work root the executor makes is its user's alone (whatever the umask).
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&work_root)
                .map_err(|e| unusable(&work_root, e.to_string()))?;
        }
        work_root =
            std::fs::canonicalize(&work_root).map_err(|e| unusable(&work_root, e.to_string()))?;
        let home = std::env::var_os("HOME")
            .and_then(|h| std::fs::canonicalize(h).ok())
            .map(|h| h.to_string_lossy().into_owned());
        if let Some(why) = work_root_refusal(&work_root.to_string_lossy(), home.as_deref()) {
            return Err(unusable(&work_root, why));
        }
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&work_root)
                .map_err(|e| unusable(&work_root, e.to_string()))?
                .permissions()
                .mode();
            if let Some(why) = awcp_proto::engine::executor::work_root_mode_refusal(
                &work_root.to_string_lossy(),
                mode,
            ) {
                return Err(unusable(&work_root, why));
            }
        }
        let mut locks = vec![lock::DirLock::directory(&work_root, "work root")?];
        if let Some(state) = &opts.state_dir {
            locks.push(lock::DirLock::state_dir(state)?);
        }
        // Absolute from here on: the agent's AWCP_WORK_DIR and every journalled path must not
        // depend on the directory the executor was started in.
        let mut opts = opts;
        opts.engine.work_root = work_root.to_string_lossy().into_owned();
        if let Some(state) = &opts.state_dir {
            opts.state_dir = Some(std::fs::canonicalize(state).unwrap_or_else(|_| state.clone()));
        }
        let mut transports = vec![opts.transport.clone()];
        transports.extend(opts.extra_transports.iter().cloned());
        if let Some(g) = &opts.git {
            transports.push(g.clone());
        }
        // Scratch space of this instance: downloads in flight and snapshots served by URL.
        let scratch = match &opts.state_dir {
            Some(s) => s.clone(),
            None => work_root.join(".awcp"),
        };
        // Only ever ours (the work root and state directory are locked): downloads and
        // received archives a crash interrupted.
        let _ = std::fs::remove_dir_all(scratch.join("downloads"));
        // Results captured to be sent inline, never journaled: no assignment a restart
        // restores still names one.
        let _ = std::fs::remove_dir_all(scratch.join(INLINE_RESULTS));
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
            public_url: std::sync::RwLock::new(opts.engine.public_url.clone()),
            trust_forwarded_headers: opts.trust_forwarded_headers,
            allowed_hosts: opts.allowed_hosts.clone(),
            connections_needed: opts.engine.connections_needed(),
            dashboard_sessions: std::sync::OnceLock::new(),
            downloads: scratch.join("downloads"),
        });
        let journal = opts.state_dir.map(journal::Journal::new);
        let mut config = opts.engine.clone();
        // The engine draws no randomness: a seed of 0 (the default) would give every executor
        // the same snapshot ids.
        config.id_seed = agent_rt::seed_or_random(config.id_seed);
        let mut engine = Executor::new(config);
        let mut deferred = Vec::new();
        if let Some(j) = &journal {
            let records = j.load();
            let restored = engine.restore_records(rt.now(), &records);
            let mut n = 0;
            // Persist what restoring changed (in-flight work is now failed). A record that was
            // not restored is the only copy of what it describes: it stays as it is.
            for (r, result) in records.iter().zip(restored) {
                match result {
                    Ok(id) => {
                        n += 1;
                        match engine.record(&id) {
                            Some(rec) => j.write(&id, &rec),
                            None => j.remove(&id),
                        }
                    }
                    Err(e) => {
                        let id = r.get("id").and_then(|v| v.as_str()).unwrap_or("?");
                        tracing::warn!(
                            delegation = id,
                            "journal record skipped and kept as it is: {e}"
                        );
                    }
                }
            }
            if n > 0 {
                tracing::info!(restored = n, "assignments restored from the journal");
            }
            deferred = recover(&rt, &mut engine, j, &transports);
        }
        let lp = Loop {
            rt: rt.clone(),
            engine,
            tx: tx.clone(),
            transports,
            git: opts.git.clone(),
            kinds: BTreeMap::new(),
            runner: opts.runner,
            http: agent_rt::HttpClient::new(rt.clone(), opts.client_tls),
            scratch,
            pending: BTreeMap::new(),
            streams: BTreeMap::new(),
            cancels: BTreeMap::new(),
            snapshots: snapshots.clone(),
            tails: tails.clone(),
            next_id: 1,
            journal,
            event_subscribers: Vec::new(),
            unclaimed_archives: Vec::new(),
            written: Default::default(),
            _locks: locks,
        };
        rt.spawn(Box::pin(lp.run(rx, deferred)));
        Ok(ExecutorHandle {
            tx,
            opts: shared,
            snapshots,
            tails,
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

    /// The fewest connections a server in front of this executor must accept at once
    /// ([`awcp_proto::engine::executor::ExecutorConfig::connections_needed`]);
    /// `Driver::serve_executor_with` raises a lower `max_connections` to it.
    pub fn connections_needed(&self) -> usize {
        self.opts.connections_needed
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

    /// Every retained assignment with the tail of its agent's output (the executor's
    /// dashboard); empty once the executor stopped.
    pub async fn overview(&self) -> Vec<TaskOverview> {
        let (tx, rx) = oneshot::channel();
        if self.tx.unbounded_send(Cmd::Overview(tx)).is_err() {
            return Vec::new();
        }
        let all = rx.await.unwrap_or_default();
        let tails = self.tails.lock().unwrap_or_else(|p| p.into_inner());
        all.into_iter()
            .map(|summary| TaskOverview {
                output_tail: tails
                    .get(&summary.id)
                    .map(|t| t.iter().cloned().collect())
                    .unwrap_or_default(),
                summary,
            })
            .collect()
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

    /// A request from a peer that used `origin` (the engine binds it to the delegation of an
    /// INVITE or START it accepts).
    pub(crate) async fn request_from(
        &self,
        credential: Option<Credential>,
        body: Request,
        origin: Option<String>,
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
        last_event_id: Option<u64>,
    ) -> Option<Result<EventFeed, ErrorInfo>> {
        let (verdict, answer) = oneshot::channel();
        self.tx
            .unbounded_send(Cmd::Subscribe {
                id,
                credential,
                last_event_id,
                verdict,
            })
            .ok()?;
        answer.await.ok()
    }
}

/// What an event stream's response sends next: SSE text, or an event whose inline result is
/// a file (its text is written from the file as the response is sent, never held).
/// What an event stream's response reads: the events the loop queues for it, and whether the
/// loop cut it off (its subscriber stopped reading and the queue filled). A cut stream ends
/// broken, not cleanly: a reference delegator takes a clean end without `done` or `error` as
/// a finished stream and would wait for the task's end forever; a broken one it reports as
/// lost (`SSE_FAILED`), and ours subscribes again.
pub(crate) struct EventFeed {
    pub(crate) events: mpsc::Receiver<StreamChunk>,
    pub(crate) cut: Arc<std::sync::atomic::AtomicBool>,
}

/// The loop's end of an event stream (see [`EventFeed`]).
pub(crate) struct EventQueue {
    pub(crate) tx: mpsc::Sender<StreamChunk>,
    pub(crate) cut: Arc<std::sync::atomic::AtomicBool>,
}

pub(crate) enum StreamChunk {
    /// Framed SSE text.
    Text(Bytes),
    /// One event around its result file (`id:`, `data: ` and the blank line not included),
    /// and its id.
    Split(awcp_proto::SplitMessage, Option<u64>),
}

use self::event_loop::Loop;
use self::recovery::recover;
