//! Event ids and `Last-Event-ID` on the executor's event stream over HTTP (WIRE.md §4.6):
//! every event is one `id:` line and one `data:` line; a subscriber that comes back with
//! `Last-Event-ID: n` gets the events after `n`, each exactly once.
//!
//! Each scenario runs on the tokio and on the smol driver; everything binds 127.0.0.1.

#[allow(dead_code, unused_macros)]
mod conformance;

use std::sync::Arc;
use std::time::Duration;

use conformance::security::{archive_invite, call, read_event_stream, reference_start};
use conformance::*;

/// The events of an SSE body: each one's id and `type`. Asserts what a reference delegator
/// relies on (WIRE.md §4.4): exactly one line starting with `data: ` per event.
fn events_of(body: &str) -> Vec<(Option<u64>, String)> {
    body.split("\n\n")
        .filter(|block| block.lines().any(|l| !l.starts_with(':') && !l.is_empty()))
        .map(|block| {
            let data: Vec<&str> = block
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .collect();
            assert_eq!(data.len(), 1, "one data line per event: {block:?}");
            let id = block
                .lines()
                .find_map(|l| l.strip_prefix("id: "))
                .map(|v| v.parse().expect("a numeric id"));
            let json: serde_json::Value = serde_json::from_str(data[0]).unwrap();
            (id, json["type"].as_str().unwrap_or_default().to_owned())
        })
        .collect()
}

async fn a_stream_resumed_after_an_id_carries_each_later_event_once<R: TestRuntime>() {
    let ex = start_executor::<R>(Arc::new(EditRunner), |_| {}).await;
    let id = "dlg_0e1d2c3b4a5968778695a4b3c2d1e0f1";
    let json = || {
        let mut h = auth_headers::<R>();
        h.push(("content-type", "application/json".into()));
        h
    };
    let (s, body) = call::<R>(
        http::Method::POST,
        &ex.peer,
        &json(),
        Some(archive_invite(id, "Edit the files.")),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let events_url = format!("{}/awcp/tasks/{id}/events", ex.base);
    let resumed = |n: u64| {
        let mut h = auth_headers::<R>();
        h.push(("last-event-id", n.to_string()));
        let url = events_url.clone();
        async move { events_of(&read_event_stream::<R>(&url, &h).await) }
    };
    // Subscribed "after 0": whenever it attaches, it gets every event from the first.
    let first = spawn::<R, _>(resumed(0));
    let ws = workspace();
    let (s, body) = call::<R>(
        http::Method::POST,
        &ex.peer,
        &json(),
        Some(reference_start(id, ws.path())),
    )
    .await;
    assert_eq!(s, 200, "{body}");
    let first = timeout::<R, _>(Duration::from_secs(60), first)
        .await
        .expect("the event stream ended");
    // Ids 1, 2, … in order, ending with `done`.
    let ids: Vec<Option<u64>> = first.iter().map(|(i, _)| *i).collect();
    let want: Vec<Option<u64>> = (1..=first.len() as u64).map(Some).collect();
    assert_eq!(ids, want, "{first:?}");
    assert_eq!(
        first.last().map(|(_, t)| t.as_str()),
        Some("done"),
        "{first:?}"
    );
    assert!(first.len() >= 2, "{first:?}");

    // After 1: everything that followed, exactly once.
    assert_eq!(resumed(1).await, first[1..].to_vec());
    // After the last: nothing more (the stream just ends).
    assert_eq!(resumed(first.len() as u64).await, vec![]);
    // Without the header: the replay a late subscriber gets, with the same ids.
    let late = events_of(&read_event_stream::<R>(&events_url, &auth_headers::<R>()).await);
    assert!(
        late.iter().all(|e| first.contains(e)) && late.last() == first.last(),
        "{late:?} vs {first:?}"
    );
}

macro_rules! on_both_runtimes {
    ($($name:ident),* $(,)?) => {
        mod tokio_driver {
            $(
                #[test]
                fn $name() {
                    <awcp_tokio::TokioRuntime as awcp_driver::Driver>::block_on(
                        super::$name::<awcp_tokio::TokioRuntime>(),
                    );
                }
            )*
        }
        mod smol_driver {
            $(
                #[test]
                fn $name() {
                    <awcp_smol::SmolRuntime as awcp_driver::Driver>::block_on(
                        super::$name::<awcp_smol::SmolRuntime>(),
                    );
                }
            )*
        }
    };
}

on_both_runtimes!(a_stream_resumed_after_an_id_carries_each_later_event_once);
