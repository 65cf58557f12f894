//! Interop with the public Python SDK, `acps-sdk==2.1.0` from PyPI, in both directions:
//!
//! - the SDK's `AipRpcClient` drives our partner (served on loopback by this test) through
//!   start → awaiting-completion → complete, continue, cancel, get and an unknown task
//!   (`tests/sdk/sdk_leader.py`);
//! - our leader drives an SDK partner (its FastAPI router served by uvicorn on a free
//!   loopback port, `tests/sdk/sdk_partner.py`) the same way.
//!
//! The SDK lives in a virtualenv under `<target>/aip-venv` (made here if missing; `.ci/run`
//! makes it up front). Where `python3 -m venv` or PyPI is unavailable the tests are skipped
//! with a notice, unless `AIP_REQUIRE_SDK_TEST=1` (set by `.ci/run`), which makes that a
//! failure.

mod common;

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;

use agent_rt::{ClientTls, Host, ServerOptions, TokioRuntime};
use aip_driver::partner::PartnerOptions;
use aip_proto::leader::{AttachTask, Delivery, StartTask};
use aip_proto::{DataItem, Dialect, ErrorCode, TaskState};
use common::*;

const SDK: &str = "acps-sdk==2.1.0";

fn required() -> bool {
    std::env::var("AIP_REQUIRE_SDK_TEST").is_ok_and(|v| v == "1")
}

fn show(o: &Output) -> String {
    format!(
        "status: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `<target>`: the test binary lives in `<target>/<profile>/deps`.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.ancestors()
        .nth(3)
        .expect("<target>/<profile>/deps/<test>")
        .to_path_buf()
}

/// The venv's python with the SDK and uvicorn, made once per test process; `Err` says why
/// it cannot be had.
fn python() -> Result<PathBuf, String> {
    static PY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PY.get_or_init(|| {
        let venv = target_dir().join("aip-venv");
        let python = venv.join("bin").join("python");
        let ready = |py: &Path| {
            Command::new(py)
                .args(["-c", "import acps_sdk.aip.aip_rpc_client, uvicorn, fastapi"])
                .output()
                .is_ok_and(|o| o.status.success())
        };
        if python.exists() && ready(&python) {
            return Ok(python);
        }
        match Command::new("python3")
            .arg("-m")
            .arg("venv")
            .arg(&venv)
            .output()
        {
            Ok(o) if o.status.success() => {}
            Ok(o) => return Err(format!("python3 -m venv failed\n{}", show(&o))),
            Err(e) => return Err(format!("python3 not found: {e}")),
        }
        let o = Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                SDK,
                "uvicorn",
            ])
            .output()
            .map_err(|e| format!("run pip: {e}"))?;
        if !o.status.success() || !ready(&python) {
            return Err(format!("pip install {SDK} uvicorn failed\n{}", show(&o)));
        }
        Ok(python)
    })
    .clone()
}

/// The python to run, or `None` after a notice (a panic when the test is required).
fn python_or_skip(test: &str) -> Option<PathBuf> {
    match python() {
        Ok(p) => Some(p),
        Err(why) if required() => panic!("the acps-sdk interop test cannot run: {why}"),
        Err(why) => {
            eprintln!("SKIPPED {test}: {why} (set AIP_REQUIRE_SDK_TEST=1 to make this fatal)");
            None
        }
    }
}

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/sdk")
        .join(name)
}

/// A child process killed and reaped when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

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
        let states: Vec<TaskState> = g.status_history.unwrap().iter().map(|s| s.state).collect();
        assert_eq!(
            states,
            [
                TaskState::Accepted,
                TaskState::Working,
                TaskState::AwaitingInput,
                TaskState::Working,
                TaskState::AwaitingCompletion
            ]
        );
        let c = l.cancel("t-2").await.unwrap();
        assert_eq!(c.status.state, TaskState::Canceled);

        l.attach(AttachTask {
            partner: "p".into(),
            task_id: "t-unknown".into(),
            session_id: "s".into(),
            delivery: Delivery::Rpc,
            deadline: None,
        })
        .await
        .unwrap();
        let e = l.get("t-unknown").await.unwrap_err();
        assert_eq!(
            e.rpc_error().map(|e| e.code),
            Some(ErrorCode::TaskNotFound),
            "{e}"
        );
    });
}
