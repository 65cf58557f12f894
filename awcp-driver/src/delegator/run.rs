//! The engine task: one loop owns the [`Delegator`] engine, feeds it commands, inputs and
//! timeouts, drains its outputs, journals its records and tells subscribers.

use awcp_proto::engine::delegator::SourceEntry;
use awcp_proto::engine::drive::{self, Wake};

use super::*;

impl<R: Runtime> drive::Host for Loop<R> {
    type Engine = Delegator;
    fn engine(&mut self) -> Option<&mut Delegator> {
        Some(&mut self.engine)
    }
    fn execute(&mut self, output: DelegatorOutput) {
        Loop::execute(self, output);
    }
}

impl<R: Runtime> Loop<R> {
    /// Runs `fut` in the background inside `span` (a delegation's, [`crate::delegation_span`]):
    /// every log line it and its blocking work emit carry the delegation id.
    pub(super) fn spawn_in(
        &self,
        span: tracing::Span,
        fut: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        use tracing::Instrument;
        self.rt.spawn(Box::pin(fut.instrument(span)));
    }

    pub(super) async fn run(mut self, mut rx: mpsc::UnboundedReceiver<Cmd>) {
        // The canonical loop (awcp_proto::engine::drive): one turn, then wait for a command or
        // the deadline.
        let mut wake = Wake::Drained;
        self.sweep_objects();
        self.sweep_git();
        loop {
            let now = self.rt.now();
            let deadline = drive::turn(&mut self, now, wake);
            self.retire_settled();
            for f in self.unclaimed_results.drain(..) {
                let _ = std::fs::remove_file(f);
            }
            let sleep = match deadline {
                Some(t) => {
                    if let Some((_, why)) = self.engine.poll_timeout() {
                        tracing::trace!(reason = why.as_str(), "next wake-up");
                    }
                    sleep_until(&self.rt, t)
                }
                None => self.rt.sleep(Duration::from_secs(3600)),
            };
            wake = match futures::future::select(rx.next(), sleep).await {
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
                        let bound = self.rt.sleep(self.engine.config().request_timeout);
                        let _ = futures::future::select(all, bound).await;
                    }
                    self.sync_journal();
                    // Released before `stop` returns, so a new handle can take over at once.
                    drop(self.lock.take());
                    let _ = done.send(());
                    break;
                }
                Either::Left((Some(Cmd::Input(input)), _)) => {
                    if let Some(f) = input.received_file() {
                        self.unclaimed_results.push(f.to_owned());
                    }
                    Wake::Input(input)
                }
                Either::Left((Some(cmd), _)) => {
                    self.on_cmd(cmd);
                    Wake::Drained
                }
                Either::Left((None, _)) => break,
                Either::Right(_) => Wake::Timeout,
            };
        }
    }

    pub(super) fn now(&self) -> Timestamp {
        self.rt.now()
    }

    /// Moves the records of delegations that settled in the last turn to the history
    /// ([`super::HISTORY`]); their baselines (kept for applies) go too.
    fn retire_settled(&mut self) {
        for id in std::mem::take(&mut self.touched) {
            if self.engine.is_settled(&id) {
                self.written.retire(&self.journal, &id);
                let _ = std::fs::remove_file(self.baseline_file(&id));
            }
        }
    }

    /// Restores the history into the engine, once, before a request that may be about a
    /// delegation in it (`id` unknown to the engine, or every one for a list).
    fn load_history(&mut self, id: Option<&DelegationId>) {
        if self.history_loaded || id.is_some_and(|id| self.engine.get(id).is_some()) {
            return;
        }
        self.history_loaded = true;
        let mut records = Vec::new();
        for v in self.journal.load_history() {
            let Ok(r) = DelegationRecord::from_json(&v) else {
                tracing::warn!("history record skipped: not a record this delegator reads");
                continue;
            };
            if self.engine.get(&r.id).is_some() {
                continue;
            }
            if let Some((id, sources)) = DelegationRecord::sources_of(&v) {
                self.specs
                    .entry(id)
                    .or_insert_with(|| super::resource_specs(sources));
            }
            records.push(r);
        }
        let n = self.engine.restore_history(self.now(), &records);
        tracing::debug!(restored = n, "history restored");
    }

    pub(super) fn on_cmd(&mut self, cmd: Cmd) {
        let now = self.now();
        match &cmd {
            Cmd::List(_) => self.load_history(None),
            // A caller's own id may be one the history holds: refused as taken, as a live one
            // is, rather than a second delegation under the same id.
            Cmd::Delegate(p, _) if p.id.is_some() => {
                let id = p.id.clone();
                self.load_history(id.as_ref());
            }
            Cmd::Cancel(id, _)
            | Cmd::Apply(id, _, _)
            | Cmd::Preview(id, _, _, _)
            | Cmd::Discard(id, _, _)
            | Cmd::Get(id, _)
            | Cmd::Sources(id, _)
            | Cmd::Wait(id, _)
            | Cmd::WaitRound(id, _)
            | Cmd::Continue(id, _, _)
            | Cmd::Close(id, _) => {
                let id = id.clone();
                self.load_history(Some(&id));
            }
            _ => {}
        }
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
                    keep_open: p.keep_open,
                };
                let r = self.engine.delegate(now, req).map(|_| id.clone());
                if r.is_ok() {
                    self.specs.insert(id.clone(), p.resources);
                    // Journalled durably at once: a crash never loses a delegation the
                    // caller has an id for (a restarted delegator ends it cleanly).
                    self.persist(&id, true);
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
            Cmd::Preview(id, sid, limits, reply) => match self.engine.preview_snapshot(&id, &sid) {
                Ok(plan) => self.preview(id, sid, plan, limits, reply),
                Err(e) => {
                    let _ = reply.send(Err(e.into()));
                }
            },
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
            Cmd::OutputTail(id, reply) => {
                let _ = reply.send(self.tail_of(&id));
            }
            Cmd::Sources(id, reply) => {
                let sources = self.specs.get(&id).map_or_else(Vec::new, |specs| {
                    specs
                        .iter()
                        .map(|s| (s.name.as_str().to_owned(), s.source_path.clone()))
                        .collect()
                });
                let _ = reply.send(sources);
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
            Cmd::WaitRound(id, reply) => match self.engine.get(&id) {
                None => {
                    let _ = reply.send(None);
                }
                Some(v) if v.ended || self.engine.round_settled(&id) => {
                    let _ = reply.send(Some(v));
                }
                Some(_) => self.round_waiters.entry(id).or_default().push(reply),
            },
            Cmd::Continue(id, task, reply) => {
                let _ = reply.send(
                    self.engine
                        .continue_delegation(now, &id, task)
                        .map_err(Into::into),
                );
            }
            Cmd::Close(id, reply) => {
                let _ = reply.send(self.engine.close(now, &id).map_err(Into::into));
            }
            Cmd::Subscribe(tx) => self.subscribers.push(tx),
            Cmd::SubscribeWithTail(id, tx, reply) => {
                self.subscribers.push(tx);
                let _ = reply.send(self.tail_of(&id));
            }
            Cmd::Stop(_) => {}
            Cmd::Transferred(t) => self
                .transfer_subscribers
                .retain(|s| s.unbounded_send(t.clone()).is_ok()),
            Cmd::SubscribeTransfers(tx) => self.transfer_subscribers.push(tx),
            Cmd::ArchiveFile(id, path) => {
                self.archive_files.insert(id, path);
            }
            Cmd::RedeemArchive(token, reply) => {
                let file = match self.engine.redeem_archive_url(now, &token) {
                    Ok(id) => self.archive_files.get(&id).cloned(),
                    Err(why) => {
                        tracing::debug!("archive URL refused: {why}");
                        None
                    }
                };
                let _ = reply.send(file);
            }
            Cmd::RedeemObject(token, use_, reply) => {
                let _ = reply.send(self.redeem_object(now, &token, use_));
            }
            Cmd::RedeemRepository(token, use_, reply) => {
                let _ = reply.send(self.redeem_repository(now, &token, use_));
            }
            Cmd::Input(i) => {
                if let Err(e) = self.engine.handle(now, i) {
                    tracing::debug!("input ignored: {e}");
                }
            }
        }
    }

    pub(super) fn feed(&self) -> impl Fn(DelegatorInput) + Send + Sync + Clone + 'static {
        let tx = self.tx.clone();
        move |i| {
            let _ = tx.unbounded_send(Cmd::Input(i));
        }
    }

    /// The headers a request to `url` for `id` carries: the credential, if the engine says
    /// `url` gets it.
    pub(super) fn credential_headers(
        &self,
        id: &DelegationId,
        url: &str,
    ) -> Vec<(&'static str, String)> {
        self.engine
            .credential_for(id, url)
            .map(awcp_proto::http_binding::credential_header)
            .into_iter()
            .collect()
    }

    /// The admission limits (configured once, in the engine) and whether `id` may lend
    /// secret-looking files: what the transport re-checks when it packs.
    pub(super) fn admission_of(&self, id: &DelegationId) -> (awcp_proto::AdmissionLimits, bool) {
        let allow = self
            .engine
            .get(id)
            .is_some_and(|v| v.request.allow_sensitive);
        (self.engine.config().admission, allow)
    }

    pub(super) fn post(&mut self, id: DelegationId, to: Outbound, url: String, body: OutBody) {
        let http = self.http.clone();
        let feed = self.feed();
        let headers = self.credential_headers(&id, &url);
        let timeout = self.engine.config().request_timeout;
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
        let rt = self.rt.clone();
        self.spawn_in(crate::delegation_span(&id), async move {
            let hdrs: Vec<(&str, String)> = headers.iter().map(|(k, v)| (*k, v.clone())).collect();
            let reply = match body.into_client_body(&rt).await {
                Err(e) => awcp_proto::engine::delegator::Reply::Failed(e),
                Ok(body) => match http
                    .request_body(Method::POST, &url, &hdrs, body, timeout, max_reply)
                    .await
                {
                    Ok((status, body)) => wire_http::decode_reply(status, &body),
                    Err(e) => {
                        awcp_proto::engine::delegator::Reply::Failed(net::request_failure(&e))
                    }
                },
            };
            feed(DelegatorInput::Reply { id, to, reply });
            if let Some(tx) = farewell {
                let _ = tx.send(());
            }
        });
    }

    /// Where inline results are received (see [`super::receive::INCOMING`]).
    pub(super) fn incoming_dir(&self) -> PathBuf {
        self.opts.state_dir.join(super::receive::INCOMING)
    }

    pub(super) fn snapshot_dir(&self, id: &DelegationId) -> PathBuf {
        self.opts.state_dir.join("snapshots").join(id.as_str())
    }

    /// Where the baseline of `id` (what was sent, for three-way applies) is persisted.
    pub(super) fn baseline_file(&self, id: &DelegationId) -> PathBuf {
        baseline_file(&self.opts.state_dir, id)
    }

    /// What the journal does for `out` before it is executed, as the engine says.
    pub(super) fn journal_for(&mut self, out: &DelegatorOutput) {
        let id = out.delegation_id();
        match out.journaling() {
            Journaling::Write => self.persist(&id.clone(), false),
            Journaling::Sync => self.persist(&id.clone(), true),
            Journaling::Remove => self.remove_record(&id.clone()),
            Journaling::None => {}
        }
    }

    /// Writes the current record of `id` unless it is the one last written, and makes it
    /// durable if `durable`.
    pub(super) fn persist(&mut self, id: &DelegationId, durable: bool) {
        self.touched.insert(id.clone());
        match self.engine.record(id) {
            Some(mut rec) => {
                // The engine never sees paths: the sources are the driver's to keep.
                if let Some(specs) = self.specs.get(id) {
                    rec.sources = specs
                        .iter()
                        .map(|s| SourceEntry {
                            name: s.name.clone(),
                            path: s.source_path.to_string_lossy().into_owned(),
                            mode: s.mode,
                        })
                        .collect();
                }
                let text = match rec.to_json_string() {
                    Ok(t) => t,
                    Err(e) => {
                        tracing::warn!(delegation = %id, "journal record not encodable: {e}");
                        return;
                    }
                };
                self.written.write(&self.journal, id, text, durable);
            }
            None => self.remove_record(id),
        }
    }

    fn remove_record(&mut self, id: &DelegationId) {
        self.written.remove(&self.journal, id);
    }

    /// Makes every record written since its last sync durable (before the process stops).
    pub(super) fn sync_journal(&mut self) {
        self.written.sync_all(&self.journal);
    }

    pub(super) fn on_event(&mut self, ev: DelegatorEvent) {
        if let DelegatorEvent::Forgotten { id } = &ev {
            self.specs.remove(id);
            let _ = std::fs::remove_file(self.baseline_file(id));
        }
        let id = ev.delegation_id();
        if self.round_waiters.contains_key(id) && self.engine.round_settled(id) {
            let view = self.engine.get(id);
            for w in self.round_waiters.remove(id).unwrap_or_default() {
                let _ = w.send(view.clone());
            }
        }
        if let DelegatorEvent::Ended {
            id, state, error, ..
        } = &ev
        {
            for w in self.round_waiters.remove(id).unwrap_or_default() {
                let _ = w.send(self.engine.get(id));
            }
            crate::log_ended(id, *state, error.as_deref(), "delegation ended");
            self.baselines
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(id);
            let view = self.engine.get(id);
            for w in self.waiters.remove(id).unwrap_or_default() {
                let _ = w.send(view.clone());
            }
        }
        self.keep_tail(&ev);
        self.subscribers
            .retain(|s| s.unbounded_send(ev.clone()).is_ok());
    }

    /// The last progress lines of `id`, oldest first.
    fn tail_of(&self, id: &DelegationId) -> Vec<String> {
        self.tails
            .get(id)
            .map(|t| t.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Keeps the last progress lines of each delegation (a dashboard's, not the protocol's).
    fn keep_tail(&mut self, ev: &DelegatorEvent) {
        match ev {
            DelegatorEvent::Progress {
                id,
                message: Some(m),
                ..
            } => {
                if !self.tails.contains_key(id) && self.tails.len() >= super::TAILS_KEPT {
                    // Past the cap, another delegation's lines go (ids are random: an
                    // arbitrary one; its page then shows only what arrives live).
                    if let Some(first) = self.tails.keys().next().cloned() {
                        self.tails.remove(&first);
                    }
                }
                let tail = self.tails.entry(id.clone()).or_default();
                if tail.len() == super::OUTPUT_TAIL_LINES {
                    tail.pop_front();
                }
                tail.push_back(m.clone());
            }
            DelegatorEvent::Forgotten { id } => {
                self.tails.remove(id);
            }
            _ => {}
        }
    }
}

/// What a POST to the executor carries.
pub(super) enum OutBody {
    None,
    Text(String),
    /// START around an archive file, streamed as base64.
    Split(awcp_proto::SplitMessage),
}

impl OutBody {
    /// The request body; a split message's file is read and encoded on the blocking pool
    /// while the request is sent, a few pieces at a time.
    async fn into_client_body<R: Runtime>(
        self,
        rt: &R,
    ) -> Result<agent_rt::ClientBody, awcp_proto::engine::delegator::RequestFailure> {
        let split = match self {
            OutBody::None => return Ok(agent_rt::ClientBody::empty()),
            OutBody::Text(t) => return Ok(agent_rt::ClientBody::full(Bytes::from(t))),
            OutBody::Split(s) => s,
        };
        let path = split.file.clone();
        let opened = blocking(rt, move || {
            let f = std::fs::File::open(&path)?;
            let len = f.metadata()?.len();
            Ok::<_, std::io::Error>((f, len))
        })
        .await;
        let (file, len) = opened.map_err(|e| {
            awcp_proto::engine::delegator::RequestFailure::Local(format!(
                "reading the workspace archive: {e}"
            ))
        })?;
        let (tx, rx) = mpsc::channel(4);
        let body = agent_rt::ClientBody::streamed(split.body_len(len), rx);
        rt.spawn(Box::pin(blocking(rt, move || {
            crate::outgoing::stream_split(split, file, tx);
        })));
        Ok(body)
    }
}
