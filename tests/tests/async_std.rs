//! async-std programs use awcp-smol: async-std runs on smol's reactor (async-io) and blocking
//! pool, so the smol driver's executor and delegator work inside `async_std::task::block_on`,
//! with their servers spawned as async-std tasks.

#[allow(dead_code, unused_macros)]
mod conformance;

use std::sync::Arc;
use std::time::Duration;

use awcp_driver::{DelegatorHandle, DelegatorOptions, ExecutorHandle, ExecutorOptions};
use awcp_proto::{DelegationState, ExecutorConfig};
use awcp_smol::SmolRuntime;
use awcp_transports::{ArchiveDelegator, ArchiveDelegatorConfig, ArchiveExecutor, TaskRunner};
use conformance::*;

async fn executor(runner: Arc<dyn TaskRunner>, dir: &std::path::Path) -> (ExecutorHandle, String) {
    let opts = ExecutorOptions::new(
        ExecutorConfig {
            work_root: dir.to_string_lossy().into_owned(),
            ..ExecutorConfig::default()
        },
        Arc::new(ArchiveExecutor::default()),
        runner,
    );
    let handle = ExecutorHandle::start(SmolRuntime, opts);
    let listener = smol::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    handle.set_public_url(format!("http://{addr}"));
    async_std::task::spawn(awcp_smol::serve(
        listener,
        awcp_smol::executor_service(handle.clone()),
        std::future::pending(),
    ));
    (handle, format!("http://{addr}/awcp"))
}

#[test]
fn smol_driver_inside_async_std_delegates_applies_and_cancels() {
    async_std::task::block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let (_edit, edit_peer) = executor(Arc::new(EditRunner), &dir.path().join("w1")).await;
        let gate = GateRunner::default();
        let (gated, gated_peer) = executor(Arc::new(gate.clone()), &dir.path().join("w2")).await;

        // A delegator serving archive URLs, its server an async-std task.
        let state = dir.path().join("state");
        let transport = ArchiveDelegator::new(ArchiveDelegatorConfig::new(state.join("exports")));
        let mut opts = DelegatorOptions::new(Arc::new(transport), state);
        let listener = smol::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        opts.archive_base_url = Some(format!("http://{}", listener.local_addr().unwrap()));
        let dg = DelegatorHandle::start(SmolRuntime, opts);
        async_std::task::spawn(awcp_smol::serve(
            listener,
            awcp_smol::archive_service(dg.clone()),
            std::future::pending(),
        ));

        let ws = workspace();
        let id = dg
            .delegate(params::<SmolRuntime>(&edit_peer, ws.path()))
            .await
            .unwrap();
        let v = async_std::future::timeout(Duration::from_secs(60), dg.wait(&id))
            .await
            .expect("delegation ended in time")
            .unwrap();
        assert_eq!(v.state, DelegationState::Completed, "{v:?}");
        assert_edited(ws.path());

        let ws = workspace();
        let before = tree(ws.path());
        let id = dg
            .delegate(params::<SmolRuntime>(&gated_peer, ws.path()))
            .await
            .unwrap();
        gate.started().await;
        dg.cancel(&id).await.unwrap();
        let v = async_std::future::timeout(Duration::from_secs(60), dg.wait(&id))
            .await
            .expect("cancel ended in time")
            .unwrap();
        assert_eq!(v.state, DelegationState::Cancelled);
        wait_idle::<SmolRuntime>(&gated, &dir.path().join("w2")).await;
        assert!(gate.saw_cancel.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(tree(ws.path()), before);
    });
}
