//! Interop with the public Python SDK, `acps-sdk==2.1.0` from PyPI, in both directions:
//!
//! - the SDK's `AipRpcClient` drives our partner (served on loopback by this test) through
//!   start → awaiting-completion → complete, continue, cancel, get and an unknown task
//!   (`tests/sdk/sdk_leader.py`);
//! - our leader drives an SDK partner (its FastAPI router served by uvicorn on a free
//!   loopback port, `tests/sdk/sdk_partner.py`) the same way.
//!
//! The SDK's virtualenv and the skip rules: `common/sdk.rs`. The group-mode interop (the
//! SDK's group leader and partners over RabbitMQ) is in `group.rs`.

mod common;

use std::io::BufRead;
use std::process::{Command, Stdio};

use agent_rt::{ClientTls, Host, ServerOptions, TokioRuntime};
use aip_driver::partner::PartnerOptions;
use aip_proto::leader::StartTask;
use aip_proto::{DataItem, Dialect, TaskState};
use common::sdk::*;
use common::*;

#[test]
fn the_sdk_leader_drives_our_partner() {
    let Some(python) = python_or_skip("the_sdk_leader_drives_our_partner") else {
        return;
    };
    <TokioRuntime as Host>::block_on(async move {
        let s = partner_server::<TokioRuntime>(ServerOptions::default(), PartnerOptions::default());
        let url = format!("{}/rpc", s.base);
        let o = tokio::process::Command::new(&python)
            .arg(script("sdk_leader.py"))
            .arg(&url)
            .kill_on_drop(true)
            .output()
            .await
            .expect("run the SDK leader");
        assert!(o.status.success(), "the SDK leader failed\n{}", show(&o));
        // The SDK's tasks are the partner's own.
        let t = s
            .handle
            .task("t-py-2")
            .await
            .unwrap()
            .expect("t-py-2 is held");
        assert_eq!(t.status.state, TaskState::Canceled);
    });
}

#[test]
fn our_leader_drives_the_sdk_partner() {
    let Some(python) = python_or_skip("our_leader_drives_the_sdk_partner") else {
        return;
    };
    let mut child = Command::new(&python)
        .arg(script("sdk_partner.py"))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the SDK partner");
    let stdout = child.stdout.take().expect("stdout");
    let _partner = Proc(child);
    let mut line = String::new();
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .expect("the SDK partner prints its URL");
    let url = line
        .trim()
        .strip_prefix("LISTENING ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_owned();
    <TokioRuntime as Host>::block_on(async move {
        let rt = TokioRuntime;
        let (l, mut ev) =
            leader::<TokioRuntime>(leader_config(), ClientTls::default(), &url, Dialect::V2).await;

        // The SDK partner does the work inside the start call.
        let r = l
            .start(StartTask::new("p", "t-1", "s", "hello sdk"))
            .await
            .unwrap();
        assert_eq!(
            (r.task_id.as_str(), r.status.state),
            ("t-1", TaskState::AwaitingCompletion)
        );
        assert_eq!(
            r.header.sender_id.as_deref(),
            Some("server"),
            "the SDK's TaskManager signs as 'server'"
        );
        assert_eq!(
            product_text(r.products.as_deref().unwrap(), "answer").as_deref(),
            Some("echo: hello sdk")
        );
        let snap = l.task("t-1").await.unwrap().unwrap();
        assert_eq!(snap.state, Some(TaskState::AwaitingCompletion));
        let done = l.complete("t-1").await.unwrap();
        assert_eq!(done.status.state, TaskState::Completed);

        l.start(StartTask::new("p", "t-2", "s", "ask me"))
            .await
            .unwrap();
        wait_state(&rt, &mut ev, "t-2", TaskState::AwaitingInput).await;
        let r = l
            .continue_task("t-2", vec![DataItem::text("Rome")])
            .await
            .unwrap();
        assert_eq!(r.status.state, TaskState::AwaitingCompletion);
        assert_eq!(
            product_text(r.products.as_deref().unwrap(), "answer").as_deref(),
            Some("echo: Rome")
        );
        let g = l.get("t-2").await.unwrap();
        assert_eq!(history(g), ASKED_ONCE);
        let c = l.cancel("t-2").await.unwrap();
        assert_eq!(c.status.state, TaskState::Canceled);

        assert_unknown_task(&l, "t-unknown").await;
    });
}
