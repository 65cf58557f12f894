//! The git transport on the delegator (the mechanisms are `awcp_transports::git`): the packed
//! workspace becomes the base commit, pushed to the remote or served by this delegator; a
//! result branch becomes a stored delta snapshot; the repository (and, once its results are
//! settled, the remote branch) goes at release and at start-up.
//!
//! Served repositories: `<base>/git/<token>/repo.git` on the archive listener, one
//! unguessable token per delegation; whether a request may fetch or push is the engine's
//! decision ([`awcp_proto::Delegator::redeem_repository_url`]: until the lease ends, pushes
//! only to a read-write delegation, nothing after release). `git http-backend` answers; the
//! request body is received into a file (size-capped) and the answer is streamed from one.

use super::*;
use awcp_proto::engine::delegator::RepositoryUse;
use awcp_transports::git::GitDelegator;

/// How a prepared archive reaches the executor ([`Loop::prepare_archive`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Via {
    /// The archive transport (inline or by URL).
    Archive,
    /// Uploaded to the object store; its URLs valid until this time.
    Storage(Timestamp),
    /// Written as the base commit of a git repository.
    Git,
}

/// Under the state directory: request and response bodies of served repositories.
const GIT_HTTP: &str = "git-http";

/// The git repositories' default settings: under `<state>/git`, served by this delegator.
pub(super) fn default_git(state_dir: &Path) -> Arc<GitDelegator> {
    Arc::new(GitDelegator::new(
        awcp_transports::git::GitDelegatorConfig::served(state_dir.join("git")),
    ))
}

/// On the blocking pool: writes the packed workspace `f` as `id`'s base commit (the ZIP goes
/// either way) and builds the handle: the remote's URL, or a token URL of this delegator's
/// (whose digest the engine grants).
pub(super) fn prepare(
    git: &GitDelegator,
    base: Option<&str>,
    id: &DelegationId,
    f: awcp_transports::archive::ArchiveFile,
    workspace_root: Option<PathBuf>,
) -> Result<(TransportHandle, Option<SecretDigest>), PrepareFailure> {
    let served = git.config().remote.is_none();
    let r = (|| {
        if served && base.is_none() {
            return Err(PrepareFailure::NotConfigured(TransportKind::Git));
        }
        let now = crate::dashboard::now().as_unix_millis() / 1000;
        let prepared = git
            .prepare(id.as_str(), &f.path, workspace_root.as_deref(), now)
            .map_err(|e| PrepareFailure::Transport(e.to_error_info()))?;
        let (repo_url, token) = match (&git.config().remote, base) {
            (Some(remote), _) => (remote.clone(), None),
            (None, Some(base)) => {
                let token = crate::security::random_token()
                    .map_err(|e| PrepareFailure::Local(format!("repository URL token: {e}")))?;
                let url = format!("{}/git/{token}/repo.git", base.trim_end_matches('/'));
                (url, Some(SecretDigest::of(&token)))
            }
            (None, None) => unreachable!("checked above"),
        };
        let auth = match &git.config().executor_auth {
            Some(a) if !served => Some(a.clone()),
            _ => Some(awcp_proto::wire::GitAuth::None),
        };
        let handle = TransportHandle::Git(awcp_proto::wire::GitHandle {
            repo_url,
            base_branch: prepared.branch,
            base_commit: prepared.commit,
            auth,
        });
        Ok((handle, token))
    })();
    let _ = std::fs::remove_file(&f.path);
    if r.is_err() {
        let _ = git.release(id.as_str(), false);
    }
    r
}

impl<R: Runtime> Loop<R> {
    /// [`DelegatorOutput::StoreSnapshot`] of a git branch: its change, written as a delta
    /// snapshot ZIP where the store keeps `<sid>.zip`, with the local edits made since the
    /// delegation started merged into the files the executor also modified where they do not
    /// overlap (the apply writes a merged file only if its local version is still the one
    /// merged).
    pub(super) fn store_git(
        &mut self,
        id: DelegationId,
        snapshot: Box<SnapshotEvent>,
        result: awcp_proto::wire::GitResult,
    ) {
        let git = self.git.clone();
        let feed = self.feed();
        let rt = self.rt.clone();
        let dir = self.snapshot_dir(&id);
        let limits = awcp_transports::archive::ExtractLimits {
            max_total_bytes: self.engine.config().max_snapshot_bytes,
            ..Default::default()
        };
        let local = self.local_workspace(&id);
        let note = self.tx.clone();
        self.spawn_in(crate::delegation_span(&id), async move {
            let sid = snapshot.snapshot_id.clone();
            let (did, s2) = (id.clone(), sid.clone());
            let result = blocking(&rt, move || {
                std::fs::create_dir_all(&dir)
                    .map_err(|e| StoreFailure::Local(format!("snapshot dir: {e}")))?;
                let zip = dir.join(format!("{s2}.zip"));
                let delta = git
                    .result_zip(did.as_str(), &result, &zip, &limits, &local)
                    .map_err(|e| StoreFailure::Archive(e.to_error_info()))?;
                awcp_transports::durable::sync_dir(&dir)
                    .map_err(|e| StoreFailure::Local(format!("snapshot dir: {e}")))?;
                if !delta.merged.is_empty() {
                    tracing::info!(merged = ?delta.merged, "local edits merged into the result");
                }
                Ok(delta.total_bytes)
            })
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
        });
    }

    /// What of `id`'s workspace a result may write (its `rw` resources, in an `rw`
    /// delegation), as the result's paths map onto it: where a git result's local edits are
    /// merged from. None once a result of `id` was applied: local files are merged against
    /// the base commit, which is what the apply checks them against (the baseline) only
    /// until then (a later round's baseline is the workspace as the last apply left it, and a
    /// merge against the base would undo what a later round reverted).
    fn local_workspace(&self, id: &DelegationId) -> awcp_transports::git::result::LocalWorkspace {
        use awcp_proto::engine::delegator::SnapshotStatus;
        use awcp_transports::git::result::LocalWorkspace;
        let (Some(layout), Some(view)) = (self.engine.layout(id), self.engine.get(id)) else {
            return LocalWorkspace::None;
        };
        let applied = view
            .snapshots
            .iter()
            .any(|s| s.status == SnapshotStatus::Applied);
        if view.access_mode != AccessMode::Rw || applied {
            return LocalWorkspace::None;
        }
        let roots = self
            .specs
            .get(id)
            .into_iter()
            .flatten()
            .filter(|s| s.mode == AccessMode::Rw);
        LocalWorkspace::new(
            layout,
            roots.map(|s| (s.name.as_str().to_owned(), s.source_path.clone())),
        )
    }

    /// At release: `id`'s repository goes, and its branches on the remote: the base branch,
    /// and the result's once its results are settled (the engine's word), unless branches
    /// are kept.
    pub(super) fn release_git(&self, id: &DelegationId) -> impl FnOnce() -> Option<String> {
        let git = self.git.clone();
        // Settled, or unknown (a repository a crash left, of a delegation no record names).
        let delete_branch = !self.engine.results_await_review(id);
        let bodies = bodies_dir(&self.opts.state_dir, id.as_str());
        let id = id.clone();
        move || {
            // Request bodies still arriving for its repository (a client holding a push
            // open): its URL is revoked, nothing will read them.
            let _ = std::fs::remove_dir_all(&bodies);
            if !git.repository(id.as_str()).exists() {
                return None;
            }
            git.release(id.as_str(), delete_branch)
                .err()
                .map(|e| format!("releasing the git repository failed: {e}"))
        }
    }

    /// [`DelegatorOutput::ResultsSettled`]: the result branch a release kept for review goes
    /// with the repository that names its remote (if there is one: a served repository, or
    /// branches kept with `--keep-branch`, left nothing).
    pub(super) fn settle_git(&mut self, id: DelegationId) {
        if !self.git.repository(id.as_str()).exists() {
            return;
        }
        let job = self.release_git(&id);
        let rt = self.rt.clone();
        // `stop` lets it finish (an `awcp apply` process exits right after the apply).
        let (done, rx) = oneshot::channel();
        self.farewells.push(rx);
        self.spawn_in(crate::delegation_span(&id), async move {
            if let Some(w) = blocking(&rt, job).await {
                tracing::warn!("{w}");
            }
            let _ = done.send(());
        });
    }

    /// At start-up: releases the repositories of delegations that are over (what a crash
    /// left between prepare and release).
    pub(super) fn sweep_git(&mut self) {
        // Request and response bodies of a previous process: nothing reads them any more.
        let _ = std::fs::remove_dir_all(self.opts.state_dir.join(GIT_HTTP));
        let found = self.git.repositories().into_iter();
        let over = self
            .engine
            .repositories_to_release(found.filter_map(|id| DelegationId::new(id).ok()));
        if over.is_empty() {
            return;
        }
        let jobs: Vec<_> = over.iter().map(|id| self.release_git(id)).collect();
        let rt = self.rt.clone();
        self.spawn_in(tracing::info_span!("git sweep"), async move {
            blocking(&rt, move || {
                for job in jobs {
                    if let Some(w) = job() {
                        tracing::warn!("{w}");
                    }
                }
            })
            .await;
        });
    }

    /// `Cmd::RedeemRepository`: the engine decides; the answer is the repository's name
    /// under the git root, and the largest request body it takes (a push of the result: the
    /// snapshot size limit).
    pub(super) fn redeem_repository(
        &mut self,
        now: Timestamp,
        token: &SecretDigest,
        use_: RepositoryUse,
    ) -> Option<(String, u64)> {
        match self.engine.redeem_repository_url(now, token, use_) {
            Ok(id) => Some((format!("{id}.git"), self.engine.config().max_snapshot_bytes)),
            Err(why) => {
                tracing::debug!("repository URL refused: {why}");
                None
            }
        }
    }
}

/// `<state>/git-http/<id>`: the request and response bodies of `id`'s served repository
/// (removed at its release, and all of them at start-up).
fn bodies_dir(state_dir: &Path, id: &str) -> PathBuf {
    state_dir.join(GIT_HTTP).join(id)
}

/// What a request under `/git/` asks: its token, the git path after `repo.git/`, and the use
/// (`None`: not a smart-HTTP request of a served repository).
pub(super) fn parse_git_request(
    method: &Method,
    path: &str,
    query: &str,
) -> Option<(String, String, RepositoryUse)> {
    let rest = path.strip_prefix("/git/")?;
    let (token, rest) = rest.split_once('/')?;
    let git_path = rest.strip_prefix("repo.git/")?;
    if token.is_empty()
        || !awcp_transports::git::serve::is_smart_path(method.as_str(), git_path, query)
    {
        return None;
    }
    let push = git_path == "git-receive-pack" || query == "service=git-receive-pack";
    let use_ = if push {
        RepositoryUse::Push
    } else {
        RepositoryUse::Fetch
    };
    Some((token.to_owned(), git_path.to_owned(), use_))
}

/// Answers one smart-HTTP request for the repository `repo` (a name under the git root),
/// whose body may hold at most `limit` bytes.
pub(super) async fn serve<B>(
    pool: &local_objects::Pool,
    git_root: PathBuf,
    state_dir: PathBuf,
    (repo, limit): (String, u64),
    git_path: String,
    req: http::Request<B>,
) -> http::Response<ResponseBody>
where
    B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: std::fmt::Display + Send,
{
    let (ctype, cenc, proto) = {
        let header = |n: &str| {
            req.headers()
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        (
            header("content-type"),
            header("content-encoding"),
            header("git-protocol"),
        )
    };
    let method = req.method().as_str().to_owned();
    let query = req.uri().query().unwrap_or("").to_owned();
    let dir = bodies_dir(&state_dir, repo.strip_suffix(".git").unwrap_or(&repo));
    let Ok(nonce) = crate::security::random_token() else {
        return status(http::StatusCode::INTERNAL_SERVER_ERROR);
    };
    let body_in = dir.join(format!("{nonce}.in"));
    let body_out = dir.join(format!("{nonce}.out"));
    let has_body = method == "POST";
    if has_body {
        if let Err(s) = local_objects::write_body(pool, req.into_body(), &body_in, limit).await {
            let p = body_in.clone();
            local_objects::off(pool, move || std::fs::remove_file(p))
                .await
                .ok();
            return status(s);
        }
    }
    let (bi, bo) = (body_in.clone(), body_out.clone());
    let answer = local_objects::off(pool, move || {
        let _ = std::fs::create_dir_all(&dir);
        let git = awcp_transports::git::Git::new();
        let r = awcp_transports::git::serve::run(
            &git,
            &awcp_transports::git::serve::CgiRequest {
                project_root: &git_root,
                path_info: &format!("/{repo}/{git_path}"),
                method: &method,
                query: &query,
                content_type: ctype.as_deref(),
                content_encoding: cenc.as_deref(),
                git_protocol: proto.as_deref(),
                body: has_body.then_some(bi.as_path()),
                allow_push: true,
            },
            &bo,
        );
        let _ = std::fs::remove_file(&bi);
        let r = r.map(|cgi| {
            // Opened, then unlinked: the answer streams from the open file.
            let mut resp = crate::executor::file_response_pub(cgi.body.clone());
            let _ = std::fs::remove_file(&cgi.body);
            *resp.status_mut() =
                http::StatusCode::from_u16(cgi.status).unwrap_or(http::StatusCode::BAD_GATEWAY);
            let h = resp.headers_mut();
            h.remove(http::header::CONTENT_TYPE);
            for (k, v) in cgi.headers {
                if let (Ok(k), Ok(v)) = (
                    http::header::HeaderName::from_bytes(k.as_bytes()),
                    http::HeaderValue::from_str(&v),
                ) {
                    if k != http::header::CONTENT_LENGTH {
                        h.insert(k, v);
                    }
                }
            }
            resp
        });
        if r.is_err() {
            let _ = std::fs::remove_file(&bo);
        }
        r
    })
    .await;
    match answer {
        Ok(resp) => resp,
        Err(e) => {
            tracing::warn!("serving a git repository: {e}");
            status(http::StatusCode::INTERNAL_SERVER_ERROR)
        }
    }
}

fn status(s: http::StatusCode) -> http::Response<ResponseBody> {
    let mut resp = http::Response::new(net::full(Bytes::new()));
    *resp.status_mut() = s;
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_smart_http_requests_of_a_token_repository_are_git_requests() {
        let q = "service=git-upload-pack";
        assert_eq!(
            parse_git_request(&Method::GET, "/git/tok/repo.git/info/refs", q),
            Some(("tok".into(), "info/refs".into(), RepositoryUse::Fetch))
        );
        assert_eq!(
            parse_git_request(&Method::POST, "/git/tok/repo.git/git-receive-pack", ""),
            Some(("tok".into(), "git-receive-pack".into(), RepositoryUse::Push))
        );
        assert_eq!(
            parse_git_request(
                &Method::GET,
                "/git/tok/repo.git/info/refs",
                "service=git-receive-pack"
            )
            .map(|r| r.2),
            Some(RepositoryUse::Push)
        );
        for (m, p, q) in [
            (Method::GET, "/git//repo.git/info/refs", q),
            (Method::GET, "/git/tok/other.git/info/refs", q),
            (Method::GET, "/git/tok/repo.git/HEAD", ""),
            (Method::GET, "/git/tok/repo.git/config", ""),
            (Method::PUT, "/git/tok/repo.git/git-receive-pack", ""),
            (Method::GET, "/objects/tok/workspace.zip", ""),
        ] {
            assert_eq!(parse_git_request(&m, p, q), None, "{m} {p}");
        }
    }
}
