//! The one task that owns the [`Executor`] engine: feeds it commands and results, executes its
//! outputs, sleeps until its next deadline. Outputs are executed by family: responses and
//! event streams here, work directories in `work_dirs.rs`, the agent in `tasks.rs`, snapshots
//! in `snapshots.rs`.

mod snapshots;
mod tasks;
mod work_dirs;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use awcp_proto::engine::drive::{self, Wake};
use awcp_proto::engine::executor::{CaptureFailure, Response, SnapshotDelivery};
use awcp_proto::engine::{Journaling, RequestId, StreamId, TaskHandle, TaskOutcome};
use awcp_proto::{
    encode_event, sse, DelegationId, Executor, ExecutorEvent, ExecutorInput, ExecutorOutput,
    TaskFailure, TransportKind,
};
use awcp_transports::archive::Delivery;
use awcp_transports::{CancelFlag, ExecutorTransport, TaskContext, TaskGroup, TaskRunner};
use bytes::Bytes;
use futures::channel::{mpsc, oneshot};
use futures::future::Either;
use futures::StreamExt;

use crate::runtime::{blocking, sleep_until, Runtime};

#[allow(unused_imports)]
use super::recovery::*;
#[allow(unused_imports)]
use super::workspace::*;
#[allow(unused_imports)]
use super::*;

pub(super) struct Loop<R: Runtime> {
    pub(super) rt: R,
    pub(super) engine: Executor,
    pub(super) tx: mpsc::UnboundedSender<Cmd>,
    /// The primary transport first, then the extra ones.
    pub(super) transports: Vec<Arc<dyn ExecutorTransport>>,
    /// The git transport, if served ([`super::ExecutorOptions::git`]).
    pub(super) git: Option<Arc<awcp_transports::git::GitExecutor>>,
    /// Which transport each assignment uses (from allocation to release).
    pub(super) kinds: BTreeMap<DelegationId, TransportKind>,
    pub(super) runner: Arc<dyn TaskRunner>,
    pub(super) http: agent_rt::HttpClient<R>,
    /// Downloads and captured snapshots of this instance.
    pub(super) scratch: PathBuf,
    pub(super) pending: BTreeMap<RequestId, oneshot::Sender<Response>>,
    /// Each open event stream's queue (bounded: `stream_queue_events`).
    pub(super) streams: BTreeMap<StreamId, EventQueue>,
    pub(super) cancels: BTreeMap<DelegationId, CancelFlag>,
    pub(super) snapshots: SnapshotFiles,
    /// The last lines of each agent's output (the dashboard's).
    pub(super) tails: super::OutputTails,
    pub(super) next_id: u64,
    pub(super) journal: Option<journal::Journal>,
    /// The record last written of each assignment, and which are not synced yet
    /// ([`Journaling`]).
    pub(super) written: journal::Written,
    /// Application subscribers of engine events ([`ExecutorHandle::events`]).
    pub(super) event_subscribers: Vec<mpsc::UnboundedSender<ExecutorEvent>>,
    /// Archive files received with a START and not yet handed to a setup: deleted after the
    /// turn that handled the START if the engine did not set up from them.
    pub(super) unclaimed_archives: Vec<String>,
    /// The work root and state directory stay locked while the loop runs.
    pub(super) _locks: Vec<lock::DirLock>,
}

impl<R: Runtime> drive::Host for Loop<R> {
    type Engine = Executor;
    fn engine(&mut self) -> Option<&mut Executor> {
        Some(&mut self.engine)
    }
    fn execute(&mut self, output: ExecutorOutput) {
        Loop::execute(self, output);
    }
}

impl<R: Runtime> Loop<R> {
    /// Runs `fut` in the background inside `span` (a delegation's, [`crate::delegation_span`]):
    /// every log line it and its blocking work emit carry the delegation id.
    fn spawn_in(
        &self,
        span: tracing::Span,
        fut: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        use tracing::Instrument;
        self.rt.spawn(Box::pin(fut.instrument(span)));
    }

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

    pub(super) async fn run(
        mut self,
        mut rx: mpsc::UnboundedReceiver<Cmd>,
        deferred: Vec<ExecutorOutput>,
    ) {
        let mut shutdown: Option<oneshot::Sender<()>> = None;
        for out in deferred {
            self.execute(out);
        }
        // The canonical loop (awcp_proto::engine::drive): one turn, then wait for a command or
        // the deadline.
        let mut wake = Wake::Drained;
        loop {
            let now = self.rt.now();
            let deadline = drive::turn(&mut self, now, wake);
            for f in self.unclaimed_archives.drain(..) {
                let _ = std::fs::remove_file(f);
            }
            if let Some(tx) = shutdown.take() {
                if self.engine.live_count() == 0 {
                    self.sync_journal();
                    let _ = tx.send(());
                } else {
                    shutdown = Some(tx);
                }
            }
            let sleep = match deadline {
                Some(t) => sleep_until(&self.rt, t),
                None => self.rt.sleep(Duration::from_secs(3600)),
            };
            wake = match futures::future::select(rx.next(), sleep).await {
                Either::Left((Some(Cmd::Shutdown(tx)), _)) => {
                    self.engine.shutdown(self.rt.now());
                    shutdown = Some(tx);
                    Wake::Drained
                }
                Either::Left((Some(Cmd::Input(input)), _)) => Wake::Input(input),
                Either::Left((Some(cmd), _)) => {
                    self.on_cmd(cmd);
                    Wake::Drained
                }
                Either::Left((None, _)) => break,
                Either::Right(_) => Wake::Timeout,
            };
        }
        self.sync_journal();
    }

    /// Writes the record of `id` as the engine has it (ahead: synced before the next output
    /// that needs it), or removes it once the engine forgot the assignment.
    fn journal_record(&mut self, id: &DelegationId) {
        let Some(j) = &self.journal else {
            return;
        };
        match self
            .engine
            .assignment_record(id)
            .map(|r| serde_json::to_string(&r))
        {
            Some(Ok(text)) => self.written.write(j, id, text, false),
            Some(Err(e)) => {
                tracing::warn!(delegation = %id, "journal record not encodable: {e}");
            }
            None => self.written.remove(j, id),
        }
    }

    /// Makes every record written since its last sync durable (the journaling rule of
    /// [`ExecutorOutput::journaling`]: before an output the delegator sees or that changes
    /// files, and before the loop stops).
    fn sync_journal(&mut self) {
        if let Some(j) = &self.journal {
            self.written.sync_all(j);
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
                if let Request::Message(m, _) = &body {
                    if let Some(f) = m.start_archive().and_then(|a| a.local_file.as_deref()) {
                        self.unclaimed_archives.push(f.to_owned());
                    }
                }
                self.input(ExecutorInput::Request {
                    request,
                    credential,
                    origin,
                    body,
                });
            }
            Cmd::Subscribe {
                id,
                credential,
                last_event_id,
                verdict,
            } => {
                if let Err(e) = self.engine.authorize(Some(&id), credential.as_ref()) {
                    let _ = verdict.send(Err(e));
                    return;
                }
                // One sender: the channel holds its buffer plus one.
                let queue = self.engine.config().stream_queue_events.max(1);
                let (tx, events) = mpsc::channel(queue - 1);
                let cut = Arc::new(AtomicBool::new(false));
                let _ = verdict.send(Ok(EventFeed {
                    events,
                    cut: cut.clone(),
                }));
                let stream = StreamId(self.next_id);
                self.next_id += 1;
                self.streams.insert(stream, EventQueue { tx, cut });
                self.input(ExecutorInput::Subscribe {
                    stream,
                    id,
                    credential,
                    last_event_id,
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
            Cmd::Overview(tx) => {
                let _ = tx.send(self.engine.overview());
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
            Cmd::MessageBodyLimit {
                id,
                credential,
                announced,
                limits,
                verdict,
            } => {
                let _ = verdict.send(self.engine.message_body_limit(
                    id.as_ref(),
                    credential.as_ref(),
                    announced,
                    limits,
                ));
            }
            Cmd::Shutdown(_) => {}
            Cmd::SetPublicUrl(u) => self.engine.set_public_url(u),
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

    fn execute(&mut self, out: ExecutorOutput) {
        if out.journaling() == Journaling::Sync {
            self.sync_journal();
        }
        if let Some(id) = out.journaled() {
            self.journal_record(&id.clone());
        }
        match out {
            ExecutorOutput::Respond { request, response } => {
                if let Some(tx) = self.pending.remove(&request) {
                    let _ = tx.send(response);
                }
            }
            ExecutorOutput::StreamEvent {
                stream,
                event,
                dialect,
                event_id,
            } => {
                // A result in a file is sent from it by the response, in order. Each event is
                // one `data:` line, after its `id:` line (WIRE.md §4.6).
                let chunk = match awcp_proto::encode_event_split(&event, dialect) {
                    Some(split) => StreamChunk::Split(split, event_id),
                    None => StreamChunk::Text(Bytes::from(sse::encode_with_id(
                        event_id,
                        &encode_event(&event, dialect),
                    ))),
                };
                // A full queue (the subscriber stopped reading) cuts the stream off: the
                // response sends what is queued, then breaks (see `EventFeed`).
                let sent = self.streams.get_mut(&stream).map(|q| q.tx.try_send(chunk));
                let gone = match sent {
                    Some(Err(e)) if e.is_full() => {
                        tracing::info!(?stream, "event stream cut: its subscriber stopped reading");
                        if let Some(q) = self.streams.get(&stream) {
                            q.cut.store(true, Ordering::Release);
                        }
                        true
                    }
                    Some(Err(_)) => true,
                    Some(Ok(())) | None => false,
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
            } => self.allocate_work_dir(id, work_dir, transport),
            ExecutorOutput::SetupTransport {
                id,
                work_dir,
                handle,
                access_mode,
                resources,
            } => self.setup_transport(id, work_dir, handle, access_mode, resources),
            ExecutorOutput::RunTask {
                id,
                task_dir,
                task,
                expires_at,
                access_mode,
                round,
                earlier,
            } => self.run_task(TaskContext {
                delegation_id: id,
                work_dir: PathBuf::from(task_dir),
                description: task.description,
                prompt: task.prompt,
                expires_at,
                access_mode,
                round,
                earlier,
            }),
            ExecutorOutput::StopTask { id } => self.stop_task(id),
            ExecutorOutput::CaptureSnapshot {
                id,
                work_dir,
                snapshot_id,
                kind,
                delivery,
            } => self.capture(id, work_dir, snapshot_id, kind, delivery),
            ExecutorOutput::Release {
                id,
                work_dir,
                transport,
            } => self.release(id, work_dir, transport),
            ExecutorOutput::RemoveEmptyWorkDir { id, work_dir } => {
                self.remove_empty_work_dir(id, work_dir)
            }
            ExecutorOutput::EndTask { id, handle } => self.end_task(id, handle),
            ExecutorOutput::DropSnapshot { id, snapshot_id } => self.drop_snapshot(id, snapshot_id),
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
                crate::log_ended(id, *state, error.as_ref(), "assignment ended");
            }
            ExecutorEvent::Forgotten { id } => {
                tracing::debug!(delegation = %id, "assignment forgotten");
                self.tails
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(id);
            }
            ExecutorEvent::PeerMisbehaved { id, reason } => {
                tracing::warn!(delegation = %id, ?reason, "the delegator broke the protocol");
            }
            ExecutorEvent::RecordChanged { .. } => {}
        }
    }
}
