//! The storage transport's local provider: with no bucket configured, a delegator that serves
//! archives (`archive_base_url`) is its own object store. The handle names
//! `<base>/objects/<token>/workspace.zip` (GET) and `<base>/objects/<token>/result.zip` (PUT),
//! one unguessable token for both; whether a request may do what it asks is the engine's
//! decision ([`awcp_proto::Delegator::redeem_object_url`]: each once, before the lease ends,
//! never after release). The result is written to `<state>/objects-local/<id>-result.zip`
//! (size-capped, synced, renamed into place), where the snapshot store takes it from.

use super::*;
use awcp_proto::engine::delegator::ObjectUse;

/// Under the state directory: results PUT by executors (removed at release and at start).
pub(super) const LOCAL_OBJECTS: &str = "objects-local";

/// The route of a token's object, relative to the archive listener's base URL.
pub(super) fn object_path(token: &str, use_: ObjectUse) -> String {
    match use_ {
        ObjectUse::GetWorkspace => format!("/objects/{token}/workspace.zip"),
        ObjectUse::PutResult => format!("/objects/{token}/result.zip"),
    }
}

/// What a request under `/objects/` asks: its token and use (`None`: no such route).
pub(super) fn parse_object_request(method: &Method, path: &str) -> Option<(String, ObjectUse)> {
    let rest = path.strip_prefix("/objects/")?;
    let (token, file) = rest.split_once('/')?;
    let use_ = match (method, file) {
        (&Method::GET, "workspace.zip") => ObjectUse::GetWorkspace,
        (&Method::PUT, "result.zip") => ObjectUse::PutResult,
        _ => return None,
    };
    (!token.is_empty()).then(|| (token.to_owned(), use_))
}

/// A runtime's blocking pool, behind the handle (which is not generic over the runtime).
pub(super) type Pool =
    Arc<dyn Fn(Box<dyn FnOnce() + Send>) -> crate::runtime::BoxFuture<()> + Send + Sync>;

/// `rt`'s blocking pool as a [`Pool`].
pub(super) fn pool<R: Runtime>(rt: R) -> Pool {
    Arc::new(move |f| blocking(&rt, f))
}

/// Runs `f` on `pool`; its result.
pub(super) async fn off<T: Send + 'static>(
    pool: &Pool,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = oneshot::channel();
    pool(Box::new(move || {
        let _ = tx.send(f());
    }))
    .await;
    rx.await.expect("the pool runs what it is given")
}

/// Where the engine's answer to an object request points: the file to send or write, and for
/// a PUT the most bytes it may hold.
pub(super) struct ObjectTarget {
    pub(super) path: PathBuf,
    pub(super) limit: u64,
}

impl<R: Runtime> Loop<R> {
    /// `Cmd::RedeemObject`: the engine decides; the answer names the file.
    pub(super) fn redeem_object(
        &mut self,
        now: Timestamp,
        token: &SecretDigest,
        use_: ObjectUse,
    ) -> Option<ObjectTarget> {
        let id = match self.engine.redeem_object_url(now, token, use_) {
            Ok(id) => id,
            Err(why) => {
                tracing::debug!("storage object URL refused: {why}");
                return None;
            }
        };
        match use_ {
            ObjectUse::GetWorkspace => self.archive_files.get(&id).map(|p| ObjectTarget {
                path: p.clone(),
                limit: 0,
            }),
            ObjectUse::PutResult => Some(ObjectTarget {
                path: local_result_file(&self.opts.state_dir, &id),
                limit: self.engine.config().max_snapshot_bytes,
            }),
        }
    }
}

/// `<state>/objects-local/<id>-result.zip`.
pub(super) fn local_result_file(state_dir: &Path, id: &DelegationId) -> PathBuf {
    state_dir
        .join(LOCAL_OBJECTS)
        .join(format!("{id}-result.zip"))
}

/// Removes `id`'s local result object (and a partial one). Idempotent.
pub(super) fn remove_local_result(state_dir: &Path, id: &DelegationId) {
    let f = local_result_file(state_dir, id);
    let _ = std::fs::remove_file(&f);
    let _ = std::fs::remove_file(f.with_extension("zip.part"));
}

/// Writes a PUT body into `target` (through `<name>.part`, synced, renamed): at most
/// `target.limit` bytes, or the partial file goes and the answer is 413.
pub(super) async fn receive_put<B>(
    pool: &Pool,
    body: B,
    target: ObjectTarget,
) -> http::Response<ResponseBody>
where
    B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: std::fmt::Display + Send,
{
    let part = target.path.with_extension("zip.part");
    let status = match write_body(pool, body, &part, target.limit).await {
        Ok(()) => {
            let (p, f) = (part.clone(), target.path.clone());
            match off(pool, move || std::fs::rename(p, f)).await {
                Ok(()) => http::StatusCode::OK,
                Err(_) => http::StatusCode::INTERNAL_SERVER_ERROR,
            }
        }
        Err(status) => status,
    };
    if status != http::StatusCode::OK {
        let _ = off(pool, move || std::fs::remove_file(part)).await;
    }
    let mut resp = http::Response::new(net::full(Bytes::new()));
    *resp.status_mut() = status;
    resp
}

pub(super) async fn write_body<B>(
    pool: &Pool,
    mut body: B,
    part: &Path,
    limit: u64,
) -> Result<(), http::StatusCode>
where
    B: http_body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: std::fmt::Display + Send,
{
    use std::io::Write;
    let p = part.to_path_buf();
    let file = off(pool, move || {
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d)?;
        }
        std::fs::File::create(&p)
    })
    .await
    .map_err(|_| http::StatusCode::INTERNAL_SERVER_ERROR)?;
    let mut file = Some(file);
    let mut total = 0u64;
    let mut batch: Vec<Bytes> = Vec::new();
    let mut batched = 0usize;
    loop {
        let frame = body.frame().await;
        let last = frame.is_none();
        if let Some(frame) = frame {
            let frame = frame.map_err(|_| http::StatusCode::BAD_REQUEST)?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            total += data.len() as u64;
            if total > limit {
                return Err(http::StatusCode::PAYLOAD_TOO_LARGE);
            }
            batched += data.len();
            batch.push(data);
            if batched < agent_rt::client::WRITE_BATCH {
                continue;
            }
        }
        let mut f = file.take().ok_or(http::StatusCode::INTERNAL_SERVER_ERROR)?;
        let pieces = std::mem::take(&mut batch);
        batched = 0;
        let f = off(pool, move || {
            for p in &pieces {
                f.write_all(p)?;
            }
            if last {
                f.sync_all()?;
            }
            Ok::<_, std::io::Error>(f)
        })
        .await
        .map_err(|_| http::StatusCode::INTERNAL_SERVER_ERROR)?;
        if last {
            return Ok(());
        }
        file = Some(f);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_two_object_routes_with_their_methods_are_objects() {
        let t = "0123abcd";
        assert_eq!(
            parse_object_request(&Method::GET, &object_path(t, ObjectUse::GetWorkspace)),
            Some((t.to_owned(), ObjectUse::GetWorkspace))
        );
        assert_eq!(
            parse_object_request(&Method::PUT, &object_path(t, ObjectUse::PutResult)),
            Some((t.to_owned(), ObjectUse::PutResult))
        );
        for (m, p) in [
            (Method::PUT, "/objects/0123abcd/workspace.zip"),
            (Method::GET, "/objects/0123abcd/result.zip"),
            (Method::GET, "/objects//workspace.zip"),
            (Method::GET, "/objects/0123abcd/other.zip"),
            (Method::GET, "/archives/0123abcd"),
        ] {
            assert_eq!(parse_object_request(&m, p), None, "{m} {p}");
        }
    }
}
