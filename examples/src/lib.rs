//! Runnable examples of embedding the awcp-rs crates; the programs are the `[[example]]`
//! targets beside this package's manifest (`cargo run -p awcp-examples --example NAME`).
//!
//! This library holds what the two delegator examples (`delegator_tokio`, `delegator_smol`)
//! share and what has nothing to do with their runtime: their arguments, the sample project
//! they lend, and how they print events and the outcome. Each example keeps its runtime's
//! part (starting the delegator and, if no executor is given, one in-process) in its own file.

use std::path::{Path, PathBuf};

use awcp::proto::engine::delegator::DelegationView;
use awcp::proto::DelegatorEvent;
use awcp::DelegationState;

/// `[--executor URL] [DIR]` of a delegator example; `Err` is the message to print (`what`
/// for `--help`).
pub fn parse_args(what: &str) -> Result<(Option<String>, Option<PathBuf>), String> {
    let mut executor = None;
    let mut dir = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--executor" => {
                executor = Some(args.next().ok_or("--executor needs a URL")?);
            }
            "-h" | "--help" => return Err(what.into()),
            _ if a.starts_with('-') => return Err(format!("unknown option {a}")),
            _ if dir.is_none() => dir = Some(PathBuf::from(a)),
            _ => return Err(format!("unexpected argument {a}")),
        }
    }
    Ok((executor, dir))
}

/// A small project to lend: `<base>/sample-project` with a README and a source file.
pub fn sample_project(base: &Path) -> PathBuf {
    let d = base.join("sample-project");
    std::fs::create_dir_all(d.join("src")).expect("sample project");
    std::fs::write(d.join("README.md"), "# Sample project\n").expect("sample file");
    std::fs::write(d.join("src/main.py"), "print('hello')\n").expect("sample file");
    d
}

/// One line per delegator event.
pub fn show(ev: &DelegatorEvent) {
    match ev {
        DelegatorEvent::StateChanged { id, from, to } => println!("[{id}] {from} -> {to}"),
        DelegatorEvent::Progress {
            id,
            message,
            progress,
        } => {
            let pct = progress.map(|p| format!(" ({:.0}%)", p * 100.0));
            let msg = message.as_deref().unwrap_or("");
            println!("[{id}] progress: {msg}{}", pct.unwrap_or_default());
        }
        DelegatorEvent::Snapshot {
            id,
            snapshot_id,
            status,
        } => println!("[{id}] snapshot {snapshot_id}: {status:?}"),
        DelegatorEvent::ConnectionLost { id, retry_in, .. } => {
            println!("[{id}] connection lost, retrying in {retry_in:?}")
        }
        DelegatorEvent::Ended { id, state, .. } => println!("[{id}] ended: {state}"),
        other => println!("{other:?}"),
    }
}

/// Prints the final view (state, the executor's summary, the snapshots and what became of
/// them) and the notes the demo agent wrote into `dir`; whether the delegation completed.
pub fn print_outcome(view: &DelegationView, dir: &Path) -> bool {
    println!("state: {}", view.state);
    if let Some(r) = &view.result {
        println!("summary: {}", r.summary);
        for h in &r.highlights {
            println!("highlight: {h}");
        }
    }
    if let Some(e) = &view.error {
        println!("error: {} {}", e.code, e.message);
    }
    for s in &view.snapshots {
        println!("snapshot {}: {:?}", s.id, s.status);
    }
    if let Ok(notes) = std::fs::read_to_string(dir.join("AWCP_NOTES.md")) {
        println!("\n--- AWCP_NOTES.md, applied to the workspace ---\n{notes}");
    }
    view.state == DelegationState::Completed
}
