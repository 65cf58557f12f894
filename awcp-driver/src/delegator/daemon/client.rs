//! A Rust client for the daemon API.

use super::*;

/// A Rust client for the daemon API.
#[derive(Clone)]
pub struct DaemonClient<R: Runtime> {
    http: net::HttpClient<R>,
    base: String,
    timeout: Duration,
    token: Option<String>,
}

/// A daemon call failed.
#[derive(Debug, thiserror::Error)]
#[error(
    "{}{message}{}",
    code.as_ref().map(|c| format!("{c}: ")).unwrap_or_default(),
    hint.as_ref().map(|h| format!(" (hint: {h})")).unwrap_or_default()
)]
pub struct DaemonError {
    /// HTTP status (0 if the request failed).
    pub status: u16,
    /// The error text.
    pub message: String,
    /// The AWCP error code, if any.
    pub code: Option<String>,
    /// A hint.
    pub hint: Option<String>,
}

impl<R: Runtime> DaemonClient<R> {
    /// A client for the daemon at `base` (`http://127.0.0.1:3100`), sending no token (set
    /// one with [`Self::with_token`]). Connections are kept alive between calls (clones share
    /// them): a `delegate` then `wait` costs the daemon one connection, not two.
    pub fn new(rt: R, base: impl Into<String>) -> Self {
        DaemonClient {
            http: net::HttpClient::new(rt, net::ClientTls::default()).keep_alive(true),
            base: base.into().trim_end_matches('/').to_owned(),
            timeout: Duration::from_secs(30),
            token: None,
        }
    }

    /// Sends `token` (the daemon's, from `<state>/daemon.token`) with every request.
    pub fn with_token(mut self, token: Option<String>) -> Self {
        self.token = token;
        self
    }

    /// The same client with these TLS settings (an `https` daemon with a private CA, or one
    /// that requires a client certificate).
    pub fn with_tls(mut self, tls: net::ClientTls) -> Self {
        self.http = net::HttpClient::new(self.http.runtime().clone(), tls).keep_alive(true);
        self
    }

    /// The daemon could not be reached (`e`), and what to do.
    fn unreachable(&self, e: impl std::fmt::Display) -> DaemonError {
        DaemonError {
            status: 0,
            message: e.to_string(),
            code: None,
            hint: Some(format!(
                "is the daemon running at {}? Start one with `awcp daemon`, or delegate without --daemon (in this process)",
                self.base
            )),
        }
    }

    /// `Authorization: Bearer <token>`, if the client has a token.
    fn auth_headers(&self) -> Vec<(&'static str, String)> {
        self.token
            .iter()
            .map(|t| ("authorization", format!("Bearer {t}")))
            .collect()
    }

    /// Calls the daemon and reads its answer as a `T`.
    async fn call<T: serde::de::DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
        timeout: Duration,
    ) -> Result<T, DaemonError> {
        let url = format!("{}{path}", self.base);
        let auth = self.auth_headers();
        let r = self
            .http
            .request(method, &url, &auth, body, timeout, 64 * 1024 * 1024)
            .await
            .map_err(|e| self.unreachable(e))?;
        if (200..300).contains(&r.0) {
            return serde_json::from_slice(&r.1).map_err(|e| DaemonError {
                status: r.0,
                message: format!("unexpected answer from the daemon at {}: {e}", self.base),
                code: None,
                hint: Some("Is --daemon-url an `awcp daemon` of this version?".into()),
            });
        }
        let v: Value = serde_json::from_slice(&r.1).unwrap_or(Value::Null);
        if let Some(e) = self.not_a_daemon(r.0, timeout).await {
            Err(e)
        } else {
            Err(DaemonError {
                status: r.0,
                message: v
                    .get("error")
                    .and_then(Value::as_str)
                    .unwrap_or("request failed")
                    .to_owned(),
                code: v.get("code").and_then(Value::as_str).map(str::to_owned),
                hint: match (r.0, &self.token) {
                    (401, None) => Some("no daemon token was found: pass --daemon-token, or the daemon's --state-dir so its daemon.token is read".into()),
                    (401, Some(_)) => Some("the daemon token was refused: is it the token of the daemon at this URL (its --state-dir)?".into()),
                    _ => v.get("hint").and_then(Value::as_str).map(str::to_owned),
                },
            })
        }
    }

    /// After a refusal a daemon would not give: whether `base` is something else, an AWCP
    /// executor (its `GET /` says so, or the URL ends in `/awcp`), and the error that says so.
    async fn not_a_daemon(&self, status: u16, timeout: Duration) -> Option<DaemonError> {
        if !matches!(status, 401 | 403 | 404 | 405) {
            return None;
        }
        let executor = self.base.ends_with("/awcp")
            || match self
                .http
                .request(
                    Method::GET,
                    &format!("{}/", self.base),
                    &[],
                    None,
                    timeout,
                    64 * 1024,
                )
                .await
            {
                Ok((200, body)) => serde_json::from_slice::<Value>(&body)
                    .is_ok_and(|v| v["service"] == "awcp executor"),
                Ok(_) | Err(_) => false,
            };
        executor.then(|| DaemonError {
            status,
            message: format!(
                "{} is an AWCP executor, not a delegator daemon",
                self.base
            ),
            code: None,
            hint: Some(
                "Give an executor to `awcp delegate --peer URL`; --daemon-url names a running `awcp daemon` (e.g. http://127.0.0.1:3100)."
                    .into(),
            ),
        })
    }

    /// `POST /delegate`: starts a delegation (answers once it has started); returns its id.
    /// [`api::DelegateBody::from_params`] builds the body from [`DelegateParams`].
    pub async fn delegate(&self, body: &api::DelegateBody) -> Result<String, DaemonError> {
        let body = serde_json::to_vec(body).map_err(|e| DaemonError {
            status: 0,
            message: format!("encoding the request: {e}"),
            code: None,
            hint: None,
        })?;
        let v: api::Delegated = self
            .call(
                Method::POST,
                "/delegate",
                Some(Bytes::from(body)),
                Duration::from_secs(600),
            )
            .await?;
        Ok(v.delegation_id)
    }

    /// `GET /delegation/{id}`: the delegation's record.
    pub async fn get(&self, id: &str) -> Result<api::Record, DaemonError> {
        self.call(
            Method::GET,
            &format!("/delegation/{id}"),
            None,
            self.timeout,
        )
        .await
    }

    /// `GET /delegation/{id}/wait?timeout=S`: the record once the delegation has ended (an
    /// error with status 408 if it is still running after `timeout`).
    pub async fn wait(&self, id: &str, timeout: Duration) -> Result<api::Record, DaemonError> {
        let path = format!("/delegation/{id}/wait?timeout={}", timeout.as_secs());
        self.call(Method::GET, &path, None, timeout + Duration::from_secs(5))
            .await
    }

    /// `GET /delegation/{id}/wait?until=round&timeout=S`: the record once the running round
    /// has ended (`idle`) or the delegation has (408 if neither within `timeout`).
    pub async fn wait_round(
        &self,
        id: &str,
        timeout: Duration,
    ) -> Result<api::Record, DaemonError> {
        let path = format!(
            "/delegation/{id}/wait?until=round&timeout={}",
            timeout.as_secs()
        );
        self.call(Method::GET, &path, None, timeout + Duration::from_secs(5))
            .await
    }

    /// `POST /delegation/{id}/continue`: starts the next round of an idle multi-round
    /// delegation; returns its number.
    pub async fn continue_delegation(
        &self,
        id: &str,
        task: &api::Task,
    ) -> Result<u64, DaemonError> {
        let body = serde_json::to_vec(&api::ContinueBody { task: task.clone() }).map_err(|e| {
            DaemonError {
                status: 0,
                message: format!("encoding the request: {e}"),
                code: None,
                hint: None,
            }
        })?;
        let v: api::Continued = self
            .call(
                Method::POST,
                &format!("/delegation/{id}/continue"),
                Some(Bytes::from(body)),
                self.timeout,
            )
            .await?;
        Ok(v.round)
    }

    /// `POST /delegation/{id}/close`: ends an idle multi-round delegation.
    pub async fn close(&self, id: &str) -> Result<(), DaemonError> {
        self.call::<serde::de::IgnoredAny>(
            Method::POST,
            &format!("/delegation/{id}/close"),
            None,
            self.timeout,
        )
        .await
        .map(|_| ())
    }

    /// `GET /delegations`: every delegation the daemon knows.
    pub async fn list(&self) -> Result<api::Delegations, DaemonError> {
        self.call(Method::GET, "/delegations", None, self.timeout)
            .await
    }

    /// `DELETE /delegation/{id}`.
    pub async fn cancel(&self, id: &str) -> Result<(), DaemonError> {
        self.call::<serde::de::IgnoredAny>(
            Method::DELETE,
            &format!("/delegation/{id}"),
            None,
            self.timeout,
        )
        .await
        .map(|_| ())
    }

    /// `GET /delegation/{id}/events`: the delegation's live events, the current state first,
    /// ending after [`api::LiveEvent::Ended`] (or when the connection to the daemon drops).
    pub async fn events(
        &self,
        id: &str,
    ) -> Result<futures::stream::BoxStream<'static, api::LiveEvent>, DaemonError> {
        let url = format!("{}/delegation/{id}/events", self.base);
        let mut headers = self.auth_headers();
        headers.push(("accept", "text/event-stream".into()));
        let resp = net::with_timeout(
            self.http.runtime(),
            self.timeout,
            self.http.send(Method::GET, &url, &headers, None),
        )
        .await
        .map_err(|e| self.unreachable(e))?;
        if !resp.status().is_success() {
            // Answer with the daemon's own error for this route.
            return Err(self
                .call::<serde::de::IgnoredAny>(
                    Method::GET,
                    &format!("/delegation/{id}"),
                    None,
                    self.timeout,
                )
                .await
                .err()
                .unwrap_or(DaemonError {
                    status: resp.status().as_u16(),
                    message: format!(
                        "the daemon refused the event stream (HTTP {})",
                        resp.status()
                    ),
                    code: None,
                    hint: None,
                }));
        }
        let body = resp.into_body();
        let events = futures::stream::unfold(
            (
                body,
                awcp_proto::sse::SseDecoder::default(),
                std::collections::VecDeque::new(),
            ),
            |(mut body, mut dec, mut ready)| async move {
                loop {
                    if let Some(v) = ready.pop_front() {
                        return Some((v, (body, dec, ready)));
                    }
                    let frame = body.frame().await?.ok()?;
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    dec.push(&data);
                    while let Some(ev) = dec.next_event() {
                        if let Some(v) = ev.ok().and_then(|e| serde_json::from_str(&e.data).ok()) {
                            ready.push_back(v);
                        }
                    }
                }
            },
        );
        Ok(Box::pin(events))
    }

    /// `GET /delegation/{id}/snapshots`: its snapshots, oldest first.
    pub async fn snapshots(&self, id: &str) -> Result<api::Snapshots, DaemonError> {
        self.call(
            Method::GET,
            &format!("/delegation/{id}/snapshots"),
            None,
            self.timeout,
        )
        .await
    }

    /// `POST /delegation/{id}/snapshots/{sid}/apply`.
    pub async fn apply(&self, id: &str, sid: &str) -> Result<(), DaemonError> {
        self.call::<serde::de::IgnoredAny>(
            Method::POST,
            &format!("/delegation/{id}/snapshots/{sid}/apply"),
            None,
            Duration::from_secs(600),
        )
        .await
        .map(|_| ())
    }

    /// `GET /delegation/{id}/snapshots/{sid}/diff?max_bytes=N`: what applying the snapshot
    /// would do (files added, modified, deleted with unified diffs; conflicts; refusals).
    pub async fn diff(
        &self,
        id: &str,
        sid: &str,
        max_bytes: usize,
    ) -> Result<crate::delegator::Preview, DaemonError> {
        self.call(
            Method::GET,
            &format!("/delegation/{id}/snapshots/{sid}/diff?max_bytes={max_bytes}"),
            None,
            Duration::from_secs(600),
        )
        .await
    }

    /// `POST /delegation/{id}/snapshots/{sid}/discard`.
    pub async fn discard(&self, id: &str, sid: &str) -> Result<(), DaemonError> {
        self.call::<serde::de::IgnoredAny>(
            Method::POST,
            &format!("/delegation/{id}/snapshots/{sid}/discard"),
            None,
            self.timeout,
        )
        .await
        .map(|_| ())
    }

    /// `POST /ui/code`: a one-time link that signs a browser in to the daemon's dashboard
    /// (valid for two minutes, once).
    pub async fn dashboard_link(&self) -> Result<String, DaemonError> {
        #[derive(serde::Deserialize)]
        struct Code {
            code: String,
        }
        let c: Code = self
            .call(Method::POST, "/ui/code", None, self.timeout)
            .await?;
        Ok(format!("{}/ui/login?code={}", self.base, c.code))
    }

    /// `GET /health`.
    pub async fn health(&self) -> Result<(), DaemonError> {
        self.call::<serde::de::IgnoredAny>(Method::GET, "/health", None, Duration::from_secs(5))
            .await
            .map(|_| ())
    }
}
