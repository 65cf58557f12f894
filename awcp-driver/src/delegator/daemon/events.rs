//! `GET /delegation/{id}/events`: a delegation's live events as server-sent events, so a
//! client of the daemon (`awcp delegate --daemon`, `awcp wait`) shows the same progress as the
//! in-process path. The first event is the current state; the stream ends after `ended`.

use futures::stream::{self, StreamExt};

use super::json::{event_json, transfer_json};
use super::*;

/// Streams `id`'s events (see [`event_json`]), or 404.
pub(super) async fn stream(d: &DelegatorHandle, id: DelegationId) -> http::Response<ResponseBody> {
    // Subscribe first, then look: nothing that happens in between is missed.
    let events = d.events();
    let transfers = d.transfers();
    let Some(v) = d.get(&id).await else {
        return super::not_found(&id);
    };
    let mut first = vec![json!({"type": "state", "state": v.state.as_str()})];
    if v.ended {
        first.push(json!({"type": "ended", "state": v.state.as_str(),
            "error": v.error.as_ref().map(|e| json!({"code": e.code.as_str(), "message": e.message}))}));
    }
    let (a, b) = (id.clone(), id);
    let live = stream::select(
        events.filter_map(move |e| {
            let v = event_json(&e).filter(|(i, _)| **i == a).map(|(_, v)| v);
            futures::future::ready(v)
        }),
        transfers
            .filter(move |t| futures::future::ready(t.id == b))
            .map(|t| transfer_json(&t)),
    );
    let body = stream::iter(first)
        .chain(live)
        .scan(false, |done, v| {
            if *done {
                return futures::future::ready(None);
            }
            *done = v["type"] == "ended";
            futures::future::ready(Some(v))
        })
        .map(|v| {
            Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(Bytes::from(
                awcp_proto::sse::encode_data(&v.to_string()),
            )))
        });
    http::Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(BodyExt::boxed_unsync(http_body_util::StreamBody::new(body)))
        .expect("static headers are valid")
}
