//! Cross-runtime end-to-end: a tokio delegator with a smol executor and a smol delegator with
//! a tokio executor, each runtime on its own thread serving its side over loopback HTTP: a full
//! archive delegation (by URL, so each side is also the other's client) with the snapshot
//! applied, then a cancel.

#[allow(dead_code, unused_macros)]
mod conformance;

use std::sync::Arc;
use std::time::Duration;

use awcp_proto::DelegationState;
use awcp_smol::SmolRuntime;
use awcp_tokio::TokioRuntime;
use conformance::*;

/// Runs the executor side on its own thread with runtime `E` and the delegator side on the
/// test thread with runtime `D`.
fn delegation_then_cancel<D: TestRuntime, E: TestRuntime>() {
    let gate = GateRunner::default();
    let (exec_tx, exec_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = async_channel::bounded::<()>(1);
    let executor_side = {
        let gate = gate.clone();
        std::thread::spawn(move || {
            E::block_on(async move {
                let edit = start_executor::<E>(Arc::new(EditRunner), |_| {}).await;
                let gated = start_executor::<E>(Arc::new(gate), |_| {}).await;
                exec_tx.send((edit, gated)).unwrap();
                // Keep this runtime (and the executors' tasks) alive until the test is done.
                let _ = stop_rx.recv().await;
            })
        })
    };
    let (edit, gated) = exec_rx.recv().unwrap();

    D::block_on(async {
        let dg = start_delegator::<D>(true, |_| {}).await;

        // Full delegation: archive fetched by URL from D's server, delta snapshot by URL from
        // E's server, applied to the source directory.
        let ws = workspace();
        let v = run_to_end::<D>(&dg.handle, params::<D>(&edit.peer, ws.path())).await;
        assert_eq!(v.state, DelegationState::Completed, "{v:?}");
        assert_eq!(
            v.snapshots[0].status,
            awcp_proto::engine::delegator::SnapshotStatus::Applied
        );
        assert_edited(ws.path());
        wait_released::<D>(&edit).await;

        // Cancel while the runner works.
        let ws = workspace();
        let before = tree(ws.path());
        let id = dg
            .handle
            .delegate(params::<D>(&gated.peer, ws.path()))
            .await
            .unwrap();
        gate.started().await;
        dg.handle.cancel(&id).await.unwrap();
        let v = timeout::<D, _>(Duration::from_secs(60), dg.handle.wait(&id))
            .await
            .expect("cancel ended in time")
            .unwrap();
        assert_eq!(v.state, DelegationState::Cancelled);
        wait_released::<D>(&gated).await;
        assert!(gate.saw_cancel.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(tree(ws.path()), before);
    });

    drop(stop_tx);
    executor_side.join().unwrap();
    drop((edit, gated));
}

#[test]
fn tokio_delegator_with_smol_executor() {
    delegation_then_cancel::<TokioRuntime, SmolRuntime>();
}

#[test]
fn smol_delegator_with_tokio_executor() {
    delegation_then_cancel::<SmolRuntime, TokioRuntime>();
}
