//! Logs carry the delegation id as a span field (issue 15, item 8): every log line a
//! delegation's background work emits — in the drivers' spawned futures and in the blocking
//! transport work they hand off — is inside a `delegation{id=…}` span, on both sides (the
//! engines' and the loops' own lines name it as the `delegation` field). Runs one real
//! delegation (tokio driver, loopback HTTP) with a global JSON subscriber.

#[allow(dead_code, unused_macros)]
mod conformance;

use std::io::Write;
use std::sync::{Arc, Mutex};

use awcp_driver::Driver;
use awcp_proto::DelegationState;
use awcp_tokio::TokioRuntime;
use conformance::*;

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn log_lines_about_a_delegation_are_in_its_span() {
    let logs = Captured::default();
    let writer = logs.clone();
    tracing_subscriber::fmt()
        .json()
        .with_max_level(tracing_subscriber::filter::LevelFilter::DEBUG)
        .with_writer(move || writer.clone())
        .init();
    let id = TokioRuntime::block_on(async {
        let ex = start_executor::<TokioRuntime>(Arc::new(EditRunner), |_| {}).await;
        let dg = start_delegator::<TokioRuntime>(false, |_| {}).await;
        let ws = workspace();
        let v = run_to_end::<TokioRuntime>(&dg.handle, params::<TokioRuntime>(&ex.peer, ws.path()))
            .await;
        assert_eq!(v.state, DelegationState::Completed, "{v:?}");
        v.request.id
    });
    let text = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let in_span = |v: &serde_json::Value| {
        v["spans"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|s| s["name"] == "delegation" && s["id"] == id.as_str())
    };
    // Emitted by the archive transport on a blocking thread, on each side, naming no
    // delegation field of the driver's own: the span carries it.
    for message in ["archive prepared", "snapshot applied"] {
        let line = lines
            .iter()
            .find(|v| v["fields"]["message"] == message)
            .unwrap_or_else(|| panic!("no {message:?} line in:\n{text}"));
        assert!(
            in_span(line),
            "{message:?} is not in the delegation's span: {line}"
        );
    }
}
