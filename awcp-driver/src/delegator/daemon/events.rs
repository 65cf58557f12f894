//! `GET /delegation/{id}/events`: a delegation's live events as server-sent events, so a
//! client of the daemon (`awcp delegate --daemon`, `awcp wait`) shows the same progress as the
//! in-process path. The first event is the current state; the stream ends after `ended`.

use futures::stream::{self, StreamExt};

use super::api::LiveEvent;
use super::*;

/// Streams `id`'s events (see [`LiveEvent`]), or 404. With `tail`, the stream starts with
/// the delegation's last progress lines (up to [`crate::delegator::OUTPUT_TAIL_LINES`], taken
/// as the subscription starts: none missed, none twice) instead of only the last one.
pub(super) async fn stream(
    d: &DelegatorHandle,
    id: DelegationId,
    tail: bool,
) -> http::Response<ResponseBody> {
    // Subscribe first, then look: nothing that happens in between is missed.
    let (events, lines) = if tail {
        d.events_with_tail(&id).await
    } else {
        (d.events(), Vec::new())
    };
    let transfers = d.transfers();
    let Some(v) = d.get(&id).await else {
        return super::not_found(&id);
    };
    let mut first = vec![LiveEvent::State {
        state: v.state.as_str().into(),
    }];
    let progress = |m: &String| LiveEvent::Progress {
        message: Some(m.clone()),
        progress: None,
    };
    if tail {
        first.extend(lines.iter().map(progress));
    } else if let (Some(m), false) = (&v.last_progress, v.ended) {
        first.push(progress(m));
    }
    if v.ended {
        first.push(LiveEvent::ended(v.state, v.error.as_ref()));
    }
    let (a, b) = (id.clone(), id);
    let live = stream::select(
        events.filter_map(move |e| {
            let v = LiveEvent::of(&e).filter(|(i, _)| **i == a).map(|(_, v)| v);
            futures::future::ready(v)
        }),
        transfers
            .filter(move |t| futures::future::ready(t.id == b))
            .map(|t| LiveEvent::transfer(&t)),
    );
    let body = stream::iter(first)
        .chain(live)
        .scan(false, |done, v| {
            if *done {
                return futures::future::ready(None);
            }
            *done = matches!(v, LiveEvent::Ended { .. });
            futures::future::ready(Some(v))
        })
        .map(|v| {
            Ok::<_, crate::net::BoxError>(hyper::body::Frame::data(Bytes::from(
                awcp_proto::sse::encode_data(&serde_json::to_string(&v).unwrap_or_default()),
            )))
        });
    http::Response::builder()
        .status(200)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(BodyExt::boxed_unsync(http_body_util::StreamBody::new(body)))
        .expect("static headers are valid")
}
