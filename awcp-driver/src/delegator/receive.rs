//! Receiving results: the executor's event stream and `GET …/result`. A result archive inline
//! in either (`snapshotBase64`, `resultBase64`) is decoded into a file in the state
//! directory's `incoming` as it arrives, never held in memory; the loop hands it to the store
//! if the engine stores it, and deletes it otherwise.

use super::*;

/// Under the state directory: inline results being received (never recorded; removed at
/// start).
pub(super) const INCOMING: &str = "incoming";

impl<R: Runtime> Loop<R> {
    /// Opens `GET …/events` of `id`, resuming after event `last_event_id` if `Some`
    /// (WIRE.md §4.6: sent as `Last-Event-ID`; the engine skips what it already has).
    pub(super) fn open_stream(
        &mut self,
        id: DelegationId,
        peer: std::sync::Arc<str>,
        last_event_id: Option<u64>,
    ) {
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
        let max_event_json =
            usize::try_from(self.engine.config().max_reply_bytes).unwrap_or(usize::MAX);
        let max_result_text = self.engine.config().max_inline_result_text();
        let incoming = self.incoming_dir();
        let span = crate::delegation_span(&id);
        let fut = async move {
            let mut hdrs: Vec<(&str, String)> =
                headers.iter().map(|(k, v)| (*k, v.clone())).collect();
            hdrs.push(("accept", "text/event-stream".into()));
            if let Some(n) = last_event_id {
                hdrs.push(("last-event-id", n.to_string()));
            }
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
            // A result archive inline in an event (`snapshotBase64`, `resultBase64`) goes to a
            // file in `incoming` as it arrives; the rest of the event is decoded as usual.
            let mut dec = sse::DivertingSseDecoder::new(max_event_json, max_result_text);
            let mut pieces = Vec::new();
            let mut result = EventResult::new(incoming);
            let reason = loop {
                let data = match body.frame().await {
                    None => break None,
                    Some(Err(e)) => break Some(e.to_string()),
                    Some(Ok(frame)) => match frame.into_data() {
                        Ok(data) => data,
                        Err(_) => continue,
                    },
                };
                dec.push(&data, &mut pieces);
                for piece in pieces.drain(..) {
                    match piece {
                        sse::SsePiece::ArchiveText(text) => result.text(&id, &text).await,
                        sse::SsePiece::Event {
                            data,
                            diverted,
                            id: event_id,
                        } => {
                            let (file, failed) = result.end(&id, diverted).await;
                            let event_id = event_id.as_deref().and_then(sse::parse_event_id);
                            on_event(&id, data.as_bytes(), event_id, file, failed, &feed);
                        }
                        sse::SsePiece::Dropped(why) => {
                            // Ends the event: its partial file goes.
                            let _ = result.end(&id, false).await;
                            tracing::warn!(delegation = %id, "event dropped: {why}");
                        }
                    }
                }
            };
            result.give_up().await;
            feed(DelegatorInput::EventStreamClosed { id, reason });
        };
        self.spawn_in(span, async move {
            let _ = Abortable::new(fut, reg).await;
        });
    }

    /// `GET …/result` of `id` (see [`DelegatorOutput::FetchResult`]).
    pub(super) fn fetch_result(&mut self, id: DelegationId, peer: std::sync::Arc<str>) {
        let http = self.http.clone();
        let feed = self.feed();
        let url = wire_http::result_url(&peer, &id);
        let headers = self.credential_headers(&id, &url);
        let config = self.engine.config();
        let limits = ResultLimits {
            answer_within: config.request_timeout,
            body_within: config.snapshot_download_timeout,
            body: config.max_result_bytes,
            json: usize::try_from(config.max_reply_bytes).unwrap_or(usize::MAX),
            archive_text: config.max_inline_result_text(),
        };
        let incoming = self.incoming_dir();
        self.spawn_in(crate::delegation_span(&id), async move {
            let hdrs: Vec<(&str, String)> = headers.iter().map(|(k, v)| (*k, v.clone())).collect();
            let result = fetch(&http, &url, &hdrs, &id, limits, incoming).await;
            // The loop deletes a result file the engine does not store.
            feed(DelegatorInput::ResultFetched { id, result });
        });
    }
}

/// The inline result of the event being read from a stream, received into a file in
/// `incoming` as its text arrives.
struct EventResult {
    incoming: PathBuf,
    archive: Option<InlineArchive>,
    /// Receiving it failed: the event is dropped when it ends.
    failed: bool,
}

impl EventResult {
    fn new(incoming: PathBuf) -> Self {
        EventResult {
            incoming,
            archive: None,
            failed: false,
        }
    }

    /// More of the current event's archive text.
    async fn text(&mut self, id: &DelegationId, text: &[u8]) {
        if self.failed {
            return;
        }
        let incoming = &self.incoming;
        let a = self
            .archive
            .get_or_insert_with(|| InlineArchive::new(incoming.clone(), ".awcp-result-"));
        if let Err(e) = a.text(text).await {
            tracing::warn!(delegation = %id, "inline result not received: {e}");
            self.failed = true;
            self.give_up().await;
        }
    }

    /// The current event ended: its result file, if it had one (`diverted`), and whether
    /// receiving it failed. Ready for the next event.
    async fn end(&mut self, id: &DelegationId, diverted: bool) -> (Option<PathBuf>, bool) {
        let file = match self.archive.take() {
            Some(a) if diverted && !self.failed => match a.finish().await {
                // Its hash is not used: the store and the apply check the file as they read it.
                Ok(f) => Some(f.path),
                Err(e) => {
                    tracing::warn!(delegation = %id, "inline result not received: {e}");
                    self.failed = true;
                    None
                }
            },
            Some(a) => {
                a.abandon().await;
                None
            }
            None => None,
        };
        (file, std::mem::take(&mut self.failed))
    }

    /// Deletes the current event's partial file (it failed, or the stream ended).
    async fn give_up(&mut self) {
        if let Some(a) = self.archive.take() {
            a.abandon().await;
        }
    }
}

/// One event read from `id`'s stream/// One event read from `id`'s stream, its inline result (if it had one) already in `file`:
/// decoded and fed to the engine, or dropped (the file with it). An event whose result could
/// not be received is dropped whole: fed without it, a `done` would look like one without a
/// result.
fn on_event(
    id: &DelegationId,
    data: &[u8],
    event_id: Option<u64>,
    file: Option<PathBuf>,
    failed: bool,
    feed: &impl Fn(DelegatorInput),
) {
    let discard = |file: &Option<PathBuf>| {
        if let Some(f) = file {
            let _ = std::fs::remove_file(f);
        }
    };
    if failed {
        tracing::warn!(delegation = %id, "event dropped: its inline result could not be received");
        return discard(&file);
    }
    // What the engine does with an event it cannot take is its decision (it reports the
    // executor's misbehaviour and reads on).
    let unusable = |problem| {
        discard(&file);
        feed(DelegatorInput::UnusableEvent {
            id: id.clone(),
            problem,
        });
    };
    let mut event = match decode_event(data) {
        Ok((event, _)) => event,
        Err(e) => return unusable(EventProblem::Undecodable(e.to_string())),
    };
    if event.delegation_id != *id {
        return unusable(EventProblem::OtherDelegation(event.delegation_id));
    }
    if let Some(f) = &file {
        if !attach_diverted_result(&mut event, &f.to_string_lossy()) {
            discard(&file);
        }
    }
    // The loop deletes a result file the engine does not store.
    feed(DelegatorInput::TaskEvent {
        event: Box::new(event),
        event_id,
    });
}

/// The bounds of one `GET …/result`.
#[derive(Clone, Copy)]
struct ResultLimits {
    /// For the response head.
    answer_within: Duration,
    /// For the whole body.
    body_within: Duration,
    /// Bytes of body in all.
    body: u64,
    /// Bytes of JSON besides an inline snapshot.
    json: usize,
    /// Bytes of the inline snapshot's base64 text.
    archive_text: u64,
}

/// `GET …/result` of `id`: an inline `snapshotBase64` is decoded into a new file in
/// `incoming` as it arrives (never held in memory), the rest decoded as usual.
async fn fetch<R: Runtime>(
    http: &agent_rt::HttpClient<R>,
    url: &str,
    headers: &[(&str, String)],
    id: &DelegationId,
    limits: ResultLimits,
    incoming: PathBuf,
) -> Result<FetchedResult, RequestFailure> {
    let rt = http.runtime();
    let resp = net::with_timeout(
        rt,
        limits.answer_within,
        http.send(Method::GET, url, headers, None),
    )
    .await
    .map_err(|e| net::request_failure(&e))?;
    let status = resp.status().as_u16();
    let body = http_body_util::Limited::new(
        resp.into_body(),
        usize::try_from(limits.body).unwrap_or(usize::MAX),
    );
    let div = awcp_proto::wire::divert::ArchiveTextDiverter::for_results(limits.json);
    let read = receive_diverted(body, div, limits.archive_text, incoming, ".awcp-result-");
    let received = net::with_timeout(rt, limits.body_within, async { Ok(read.await) })
        .await
        .map_err(|e| net::request_failure(&e))?;
    let (json, file) = match received {
        Ok((json, file)) => (json, file.map(|f| f.path)),
        Err(ReceiveError::Body(e)) => {
            return Err(RequestFailure::Network(format!("reading the result: {e}")))
        }
        Err(ReceiveError::Archive(why)) => {
            return Err(RequestFailure::Unusable(format!("bad result body: {why}")))
        }
        Err(ReceiveError::Local(why)) => {
            return Err(RequestFailure::Local(format!(
                "receiving the result: {why}"
            )))
        }
    };
    let discard = |file: &Option<PathBuf>| {
        if let Some(f) = file {
            let _ = std::fs::remove_file(f);
        }
    };
    if let Some(failure) = wire_http::gateway_failure(status, &json) {
        discard(&file);
        return Err(failure);
    }
    let mut result = match serde_json::from_slice::<serde_json::Value>(&json)
        .map_err(|e| format!("bad result body: {e}"))
        .and_then(|v| wire_http::decode_result(id, &v))
    {
        Ok(r) => r,
        Err(why) => {
            discard(&file);
            return Err(RequestFailure::Unusable(why));
        }
    };
    if let Some(f) = &file {
        if !wire_http::attach_diverted_result_body(&mut result, &f.to_string_lossy()) {
            discard(&file);
        }
    }
    Ok(result)
}
