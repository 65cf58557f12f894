//! The delegator side: one task owns the [`Delegator`] engine and executes its outputs (HTTP
//! to the executor, SSE, transports on the blocking pool); applications talk to it through a
//! [`DelegatorHandle`].

pub mod daemon;
mod execute;
mod git;
mod local_objects;
mod params;
mod receive;
mod run;
mod snapshots;
mod startup;
mod storage;
mod transport;

use git::Via;
pub(crate) use params::first_line;
pub use params::{DelegateParams, DelegatorError, DelegatorOptions};
use run::OutBody;
use startup::{lock_state_dir, recover_interrupted_applies};
use storage::{baseline_file, load_baseline, random_id, scan, store_snapshot};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use awcp_proto::engine::auth::SecretDigest;
use awcp_proto::engine::delegator::EventProblem;
use awcp_proto::engine::delegator::{
    ArchiveDelivery, DelegateRequest, DelegationRecord, DelegationView, FetchedResult, Journaling,
    Outbound, PrepareFailure, RequestFailure, ResultSource, ScanFailure, StoreFailure,
};
use awcp_proto::engine::{SnapshotMode, WorkspaceStats};
use awcp_proto::http_binding::{self as wire_http, ArchiveUrlRefusal};
use awcp_proto::wire::divert::attach_diverted_result;
use awcp_proto::{
    decode_event, encode_message_owned, encode_message_split, sse, AccessMode, Auth, DelegationId,
    Delegator, DelegatorConfig, DelegatorEvent, DelegatorInput, DelegatorOutput, Dialect,
    ErrorInfo, Resource, SnapshotEvent, SnapshotId, TaskSpec, Timestamp, TransportHandle,
    TransportKind,
};
use awcp_transports::archive::{ArchiveOutput, ArchiveSource, Delivery, Layout};
pub use awcp_transports::snapshot::{ChangeKind, FileChange, Preview, PreviewLimits};
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

use crate::incoming::{receive_diverted, InlineArchive, ReceiveError};
use crate::net::{self, ResponseBody};
use crate::runtime::{blocking, sleep_until, Runtime};

type Reply<T> = oneshot::Sender<Result<T, DelegatorError>>;

/// How many progress lines a delegator keeps per delegation ([`DelegatorHandle::output_tail`]).
pub const OUTPUT_TAIL_LINES: usize = 40;
/// Of how many delegations at most (the least recently reporting one is dropped first).
const TAILS_KEPT: usize = 256;

enum Cmd {
    Delegate(DelegateParams, Reply<DelegationId>),
    Cancel(DelegationId, Reply<()>),
    Apply(DelegationId, SnapshotId, Reply<()>),
    Preview(DelegationId, SnapshotId, PreviewLimits, Reply<Preview>),
    Discard(DelegationId, SnapshotId, Reply<()>),
    Get(DelegationId, oneshot::Sender<Option<DelegationView>>),
    List(oneshot::Sender<Vec<DelegationView>>),
    /// The local directories lent by a delegation (resource name, path).
    Sources(DelegationId, oneshot::Sender<Vec<(String, PathBuf)>>),
    /// The last progress lines of a delegation.
    OutputTail(DelegationId, oneshot::Sender<Vec<String>>),
    /// Subscribes and answers a delegation's last progress lines in the same turn.
    SubscribeWithTail(
        DelegationId,
        mpsc::UnboundedSender<DelegatorEvent>,
        oneshot::Sender<Vec<String>>,
    ),
    Wait(DelegationId, oneshot::Sender<Option<DelegationView>>),
    /// Answered once the round running ends (`idle`) or the delegation ends.
    WaitRound(DelegationId, oneshot::Sender<Option<DelegationView>>),
    Continue(DelegationId, TaskSpec, Reply<u64>),
    Close(DelegationId, Reply<()>),
    Subscribe(mpsc::UnboundedSender<DelegatorEvent>),
    Input(DelegatorInput),
    Stop(oneshot::Sender<()>),
    Transferred(Transfer),
    SubscribeTransfers(mpsc::UnboundedSender<Transfer>),
    /// A prepare wrote `id`'s archive for URL delivery to this file (sent before its
    /// `TransportPrepared`, so the file is known when the engine grants the URL).
    ArchiveFile(DelegationId, PathBuf),
    /// The archive server asks for the archive whose URL token has this digest: the engine
    /// decides ([`Delegator::redeem_archive_url`]); the answer is the file to send.
    RedeemArchive(SecretDigest, oneshot::Sender<Option<PathBuf>>),
    /// The archive server asks for a storage object of the local provider: the engine decides
    /// ([`Delegator::redeem_object_url`]); the answer is the file to send or write.
    RedeemObject(
        SecretDigest,
        awcp_proto::engine::delegator::ObjectUse,
        oneshot::Sender<Option<local_objects::ObjectTarget>>,
    ),
    /// The archive server asks for a served git repository: the engine decides
    /// ([`Delegator::redeem_repository_url`]); the answer is the repository's name.
    RedeemRepository(
        SecretDigest,
        awcp_proto::engine::delegator::RepositoryUse,
        oneshot::Sender<Option<(String, u64)>>,
    ),
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

/// A cheap handle to a running delegator.
#[derive(Clone)]
pub struct DelegatorHandle {
    tx: mpsc::UnboundedSender<Cmd>,
    sleep: Arc<dyn Fn(Duration) -> crate::runtime::BoxFuture<()> + Send + Sync>,
    /// Runs a closure on the runtime's blocking pool (file writes of the local objects).
    pool: local_objects::Pool,
    /// Where served git repositories are, and the state directory (their request bodies).
    git_root: PathBuf,
    state_dir: PathBuf,
    /// Journal records found at start but not loaded (id → why), e.g. written by a newer
    /// release. Their files are left untouched.
    unloaded: Arc<BTreeMap<String, String>>,
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
    /// interrupted (see `awcp_transports::snapshot::recover_interrupted`), removes the archives
    /// a previous process left, then restores the journal's delegations.
    pub fn try_start<R: Runtime>(
        rt: R,
        opts: DelegatorOptions,
    ) -> Result<DelegatorHandle, DelegatorError> {
        let (tx, rx) = mpsc::unbounded();
        let lock = lock_state_dir(&opts.state_dir)?;
        // Archives are never recorded: whatever a previous process left here (served by URL
        // or waiting to be streamed) can no longer be sent.
        let _ = std::fs::remove_dir_all(opts.state_dir.join("archives"));
        // Nor are results being received: an event stream cut by the stop is replayed.
        let _ = std::fs::remove_dir_all(opts.state_dir.join(receive::INCOMING));
        // Nor are the local provider's objects (their grants die with the process).
        let _ = std::fs::remove_dir_all(opts.state_dir.join(local_objects::LOCAL_OBJECTS));
        let journal = crate::executor::journal::Journal::at(opts.state_dir.join("delegations"))
            .with_history(opts.state_dir.join(HISTORY));
        // A delegator that never reads its history does not forget what is in it: ended
        // retentions are swept by age instead (at most daily).
        for id in journal.sweep_history(opts.engine.retention) {
            let _ = std::fs::remove_file(storage::baseline_file(&opts.state_dir, &id));
        }
        // URL delivery needs somewhere executors can fetch from.
        let mut config = opts.engine.clone();
        config.serve_archives = opts.archive_base_url.is_some();
        let mut engine = Delegator::new(config);
        let records = journal.load();
        let mut specs = BTreeMap::new();
        for r in &records {
            if let Some((id, sources)) = DelegationRecord::sources_of(r) {
                specs.insert(id, resource_specs(sources));
            }
        }
        let recovered = recover_interrupted_applies(&specs);
        let mut unloaded = BTreeMap::new();
        let records: Vec<DelegationRecord> = records
            .iter()
            .filter_map(|r| match DelegationRecord::from_json(r) {
                Ok(r) => Some(r),
                Err(e) => {
                    tracing::warn!("journal record skipped: {e}");
                    if let Some(id) = r.get("id").and_then(|v| v.as_str()) {
                        unloaded.insert(id.to_owned(), e.to_string());
                    }
                    None
                }
            })
            .collect();
        let n = engine.restore(rt.now(), &records, &recovered);
        let touched = records.iter().map(|r| r.id.clone()).collect();
        if n > 0 {
            tracing::info!(restored = n, "delegations restored from the journal");
        }
        let git = opts
            .git
            .clone()
            .unwrap_or_else(|| git::default_git(&opts.state_dir));
        let git_root = git.config().root.clone();
        let state_dir = opts.state_dir.clone();
        let lp = Loop {
            git,
            rt: rt.clone(),
            // Executors answer without Nagle delays (this project's; the reference on Node.js
            // 18+): the requests of a delegation share connections, and at most the engine's
            // number of them is in flight to one executor.
            http: agent_rt::HttpClient::new(rt.clone(), opts.client_tls.clone())
                .keep_alive(true)
                .max_requests_per_peer(engine.config().max_requests_per_executor),
            engine,
            tx: tx.clone(),
            opts: Arc::new(opts),
            journal,
            specs,
            baselines: Arc::default(),
            streams: BTreeMap::new(),
            waiters: BTreeMap::new(),
            round_waiters: BTreeMap::new(),
            subscribers: Vec::new(),
            tails: BTreeMap::new(),
            transfer_subscribers: Vec::new(),
            archive_files: BTreeMap::new(),
            unclaimed_results: Vec::new(),
            lock: Some(lock),
            farewells: Vec::new(),
            written: Default::default(),
            touched,
            history_loaded: false,
        };
        rt.spawn(Box::pin(lp.run(rx)));
        let rt2 = rt.clone();
        Ok(DelegatorHandle {
            tx,
            sleep: Arc::new(move |d| rt2.sleep(d)),
            pool: local_objects::pool(rt.clone()),
            git_root,
            state_dir,
            unloaded: Arc::new(unloaded),
        })
    }

    /// Why the journal record of `id` in the state directory was not loaded at start (for
    /// example, it was written by a newer release), if it was found and skipped. The file is
    /// kept as it is; a delegator that understands it can load it.
    pub fn unloaded_record(&self, id: &DelegationId) -> Option<&str> {
        self.unloaded.get(id.as_str()).map(String::as_str)
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

    /// What applying a staged snapshot would do, without doing it: the files it would add,
    /// modify and delete (with unified diffs of text files, within `limits`), the local edits
    /// it would conflict with, and what it would refuse. Only a pending snapshot of a
    /// read-write delegation can be previewed; the workspace is only read.
    pub async fn preview_snapshot(
        &self,
        id: &DelegationId,
        sid: &SnapshotId,
        limits: PreviewLimits,
    ) -> Result<Preview, DelegatorError> {
        self.call(|r| Cmd::Preview(id.clone(), sid.clone(), limits, r))
            .await
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

    /// The local directories `id` lends (resource name, path), as far as this process knows
    /// them (empty for an unknown or forgotten delegation).
    pub async fn sources(&self, id: &DelegationId) -> Vec<(String, PathBuf)> {
        let (tx, rx) = oneshot::channel();
        if self
            .tx
            .unbounded_send(Cmd::Sources(id.clone(), tx))
            .is_err()
        {
            return Vec::new();
        }
        rx.await.unwrap_or_default()
    }

    /// The last progress lines the executor reported for `id` (at most [`OUTPUT_TAIL_LINES`],
    /// oldest first), as far as this process saw them: what a dashboard shows of a
    /// delegation opened while it runs.
    pub async fn output_tail(&self, id: &DelegationId) -> Vec<String> {
        let (tx, rx) = oneshot::channel();
        if self
            .tx
            .unbounded_send(Cmd::OutputTail(id.clone(), tx))
            .is_err()
        {
            return Vec::new();
        }
        rx.await.unwrap_or_default()
    }

    /// Waits until the delegation has ended (terminal and everything released) and returns
    /// its final view. Errors: [`DelegatorError::Usage`] with
    /// [`UsageError::UnknownDelegation`](awcp_proto::engine::UsageError::UnknownDelegation)
    /// for an id this delegator does not know, [`DelegatorError::Closed`] if the delegator
    /// stopped before it ended (its journal lets a new handle resume and wait again).
    pub async fn wait(&self, id: &DelegationId) -> Result<DelegationView, DelegatorError> {
        self.wait_for(id, Cmd::Wait).await
    }

    /// Starts the next round of an idle multi-round delegation (one kept open with
    /// [`DelegateParams::keep_open`] whose round ended) with `task`, in the executor's same
    /// work directory; returns the round's number. [`Self::wait_round`] waits for its end.
    pub async fn continue_delegation(
        &self,
        id: &DelegationId,
        task: TaskSpec,
    ) -> Result<u64, DelegatorError> {
        self.call(|r| Cmd::Continue(id.clone(), task, r)).await
    }

    /// Ends an idle multi-round delegation (CLOSE); [`Self::wait`] waits until everything
    /// is released.
    pub async fn close(&self, id: &DelegationId) -> Result<(), DelegatorError> {
        self.call(|r| Cmd::Close(id.clone(), r)).await
    }

    /// Waits until the delegation's running round has ended (it is `idle`, ready for
    /// [`Self::continue_delegation`] or [`Self::close`]) or the delegation has ended, and
    /// returns its view then. Returns at once if it is idle or ended already.
    pub async fn wait_round(&self, id: &DelegationId) -> Result<DelegationView, DelegatorError> {
        self.wait_for(id, Cmd::WaitRound).await
    }

    /// Sends the waiting command `cmd` for `id` and awaits its view.
    async fn wait_for(
        &self,
        id: &DelegationId,
        cmd: fn(DelegationId, oneshot::Sender<Option<DelegationView>>) -> Cmd,
    ) -> Result<DelegationView, DelegatorError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .unbounded_send(cmd(id.clone(), tx))
            .map_err(|_| DelegatorError::Closed)?;
        match rx.await {
            Ok(Some(v)) => Ok(v),
            Ok(None) => Err(DelegatorError::Usage(
                awcp_proto::engine::UsageError::UnknownDelegation(id.clone()),
            )),
            Err(_) => Err(DelegatorError::Closed),
        }
    }

    /// Stops the engine task without touching the delegations: their journal records let a
    /// new [`DelegatorHandle`] on the same state directory resume them (reconnecting to the
    /// executor). Requests already sent that tell an executor something final (the ack that
    /// lets it forget a result, a cancel, an ERROR) are let finish first, for at most
    /// [`DelegatorConfig::request_timeout`]. In-flight transport work may still finish in the
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

    /// [`Self::events`] together with `id`'s last progress lines ([`Self::output_tail`]), taken
    /// at the same moment: every line is either in the tail or on the stream, never in both
    /// and never in neither.
    pub async fn events_with_tail(
        &self,
        id: &DelegationId,
    ) -> (mpsc::UnboundedReceiver<DelegatorEvent>, Vec<String>) {
        let (tx, rx) = mpsc::unbounded();
        let (reply, tail) = oneshot::channel();
        let _ = self
            .tx
            .unbounded_send(Cmd::SubscribeWithTail(id.clone(), tx, reply));
        (rx, tail.await.unwrap_or_default())
    }

    /// The archive listener's handler (one-time archive URLs only) as an
    /// [`agent_rt::Handler`] ([`Self::handle_archive_http`]).
    pub fn archive_handler(&self) -> agent_rt::Handler {
        let d = self.clone();
        agent_rt::Handler::new(move |req| d.handle_archive_http(req))
    }

    /// Answers one request to the delegator's archive listener: `GET /archives/{token}`, a
    /// one-time, delegation-bound, expiring archive URL (executors fetch URL-mode workspaces
    /// there), and the storage transport's local objects (`GET /objects/{token}/workspace.zip`,
    /// `PUT /objects/{token}/result.zip`; see `local_objects`). Everything else is 404: the
    /// daemon API is never served here (it has its own listener, [`daemon::DaemonApi`]).
    /// Every driver's archive server calls this. Whether a token opens an archive or an
    /// object is the engine's decision ([`Delegator::redeem_archive_url`],
    /// [`Delegator::redeem_object_url`]: once, before the lease ends, never after release); a
    /// stopped delegator answers 404.
    pub fn handle_archive_http<B>(
        &self,
        req: http::Request<B>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = http::Response<ResponseBody>> + Send>>
    where
        B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
        B::Error: std::fmt::Display + Send,
    {
        fn not_found(why: ArchiveUrlRefusal) -> http::Response<ResponseBody> {
            let (status, body) = wire_http::reject_archive_url(why);
            net::json_response(status, body)
        }
        if let Some((token, git_path, use_)) = git::parse_git_request(
            req.method(),
            req.uri().path(),
            req.uri().query().unwrap_or(""),
        ) {
            let (tx, rx) = oneshot::channel();
            let _ =
                self.tx
                    .unbounded_send(Cmd::RedeemRepository(SecretDigest::of(&token), use_, tx));
            let (pool, root, state) = (
                self.pool.clone(),
                self.git_root.clone(),
                self.state_dir.clone(),
            );
            return Box::pin(async move {
                match rx.await {
                    Ok(Some(repo)) => git::serve(&pool, root, state, repo, git_path, req).await,
                    Ok(None) | Err(_) => not_found(ArchiveUrlRefusal::Refused),
                }
            });
        }
        if let Some((token, use_)) =
            local_objects::parse_object_request(req.method(), req.uri().path())
        {
            let (tx, rx) = oneshot::channel();
            let _ = self
                .tx
                .unbounded_send(Cmd::RedeemObject(SecretDigest::of(&token), use_, tx));
            let pool = self.pool.clone();
            return Box::pin(async move {
                match rx.await {
                    Ok(Some(target)) => match use_ {
                        awcp_proto::engine::delegator::ObjectUse::GetWorkspace => {
                            crate::executor::file_response_pub(target.path)
                        }
                        awcp_proto::engine::delegator::ObjectUse::PutResult => {
                            local_objects::receive_put(&pool, req.into_body(), target).await
                        }
                    },
                    Ok(None) | Err(_) => not_found(ArchiveUrlRefusal::Refused),
                }
            });
        }
        let asked = match req.uri().path().strip_prefix("/archives/") {
            None => Err(ArchiveUrlRefusal::NotAnArchiveUrl),
            Some(_) if req.method() != Method::GET => Err(ArchiveUrlRefusal::Refused),
            Some(token) => {
                let (tx, rx) = oneshot::channel();
                let _ = self
                    .tx
                    .unbounded_send(Cmd::RedeemArchive(SecretDigest::of(token), tx));
                Ok(rx)
            }
        };
        Box::pin(async move {
            match asked {
                Err(what) => not_found(what),
                Ok(rx) => match rx.await {
                    Ok(Some(path)) => crate::executor::file_response_pub(path),
                    Ok(None) | Err(_) => not_found(ArchiveUrlRefusal::Refused),
                },
            }
        })
    }
}

struct Loop<R: Runtime> {
    /// The git transport's repositories (the options', or served ones under the state dir).
    git: Arc<awcp_transports::git::GitDelegator>,
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
    /// Waiting for the end of a round (or of the delegation).
    round_waiters: BTreeMap<DelegationId, Vec<oneshot::Sender<Option<DelegationView>>>>,
    subscribers: Vec<mpsc::UnboundedSender<DelegatorEvent>>,
    /// The last progress lines of each delegation seen ([`DelegatorHandle::output_tail`]),
    /// dropped when it is forgotten; at most [`TAILS_KEPT`] delegations.
    tails: BTreeMap<DelegationId, std::collections::VecDeque<String>>,
    transfer_subscribers: Vec<mpsc::UnboundedSender<Transfer>>,
    /// Archive files written for URL delivery, by delegation (removed at release).
    archive_files: BTreeMap<DelegationId, PathBuf>,
    /// Inline results received into files (in [`receive::INCOMING`]) and fed to the engine in the
    /// current turn: those the engine does not store are deleted after the turn.
    unclaimed_results: Vec<String>,
    /// The state directory's lock, held while the engine runs.
    lock: Option<std::fs::File>,
    /// Requests that tell an executor something final (ack, cancel, ERROR) still in flight,
    /// and deletions of settled results' git branches: [`DelegatorHandle::stop`] lets them
    /// finish.
    farewells: Vec<oneshot::Receiver<()>>,
    /// The record last written of each delegation, and which are not synced yet.
    written: crate::executor::journal::Written,
    /// Delegations whose record was written (or restored) since the end of the last turn:
    /// those the engine then says are settled move to the history (see [`HISTORY`]).
    touched: std::collections::BTreeSet<DelegationId>,
    /// Whether the history was restored into the engine (on the first request that may need
    /// a delegation from it).
    history_loaded: bool,
}

/// The resources a record's `sources` name (the driver's part of the record).
fn resource_specs(sources: Vec<awcp_proto::engine::delegator::SourceEntry>) -> Vec<ResourceSpec> {
    sources
        .into_iter()
        .map(|x| ResourceSpec {
            name: x.name,
            source_path: PathBuf::from(x.path),
            mode: x.mode,
        })
        .collect()
}

/// Where a delegator keeps the records of settled delegations
/// ([`Delegator::is_settled`]), under its state directory: out of what start-up reads, so a
/// start costs what is live rather than every delegation of the retention period. They are
/// restored on the first request that may ask about one of them (a list, or a delegation the
/// engine does not know), and removed when their retention ends.
pub const HISTORY: &str = "ended";
