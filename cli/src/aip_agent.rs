//! `aip-partner`'s application: any command-line agent as an AIP partner.
//!
//! Per task, the command runs in a work directory of its own (`<work-root>/<task>`), with the
//! request text on its stdin (one line per input; stdin stays open) and these variables:
//! `AIP_TASK_ID`, `AIP_SESSION_ID`, `AIP_PROMPT_FILE` (a file holding the request text, as
//! sent), `AIP_PROMPT` (the request text itself, only up to [`MAX_PROMPT_ENV`] bytes: the
//! kernel refuses larger environment strings) and `AIP_OUTPUT_DIR` (files written there
//! become products).
//!
//! - Every stdout line is a status update (progress on the stream and in `get`).
//! - A line starting with the ask marker (`AIP-ASK: `) puts the task in awaiting-input with
//!   the rest of the line as the question; the leader's `continue` text is written to stdin
//!   as the next line.
//! - When the command exits 0, its stdout (without the questions) is the product `result`
//!   and every file in `AIP_OUTPUT_DIR` a product of its own (inline base64): the task awaits
//!   completion. Any other exit fails the task with the end of stderr.
//! - A `continue` after the command exited runs it again, with every input so far on stdin.
//! - When the task ends (complete, cancel, timeout), a command still running is killed with
//!   every process it started (it runs in a jail of its own: [`awcp_transports::contain`]) and
//!   the work directory removed. A command that exits leaves nothing running either.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use awcp_transports::contain::JailedChild;
use std::sync::Arc;

use agent_rt::{blocking, Runtime};
use aip_driver::aip_proto::partner::PartnerEvent;
use aip_driver::aip_proto::{DataItem, Product};
use aip_driver::{PartnerEvents, PartnerHandle};
use awcp_transports::contain::Jail;
use base64::Engine as _;
use futures::channel::{mpsc, oneshot};
use futures::{FutureExt, StreamExt};

/// How the agent command is run.
#[derive(Clone, Debug)]
pub struct AgentCommand {
    /// The program and its arguments.
    pub argv: Vec<String>,
    /// Where task work directories are made.
    pub work_root: PathBuf,
    /// The stdout prefix of a question (awaiting-input).
    pub ask_marker: String,
    /// Largest file turned into a product (bigger ones are listed by name only).
    pub max_file_bytes: u64,
    /// Variables (names, or prefixes ending in `*`) passed from this process's environment
    /// besides [`awcp_transports::AGENT_ENV`]; nothing else of it reaches the agent.
    pub env_pass: Vec<String>,
    /// Variables set for the agent.
    pub env_set: Vec<(String, String)>,
}

enum Msg {
    Continue(String),
    End,
}

/// Runs the application until `events` ends or `shutdown` resolves; then every command still
/// running is killed and every work directory removed before it returns.
pub async fn run<R: Runtime>(
    rt: R,
    partner: PartnerHandle,
    mut events: PartnerEvents,
    cmd: Arc<AgentCommand>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let mut tasks: BTreeMap<String, (mpsc::UnboundedSender<Msg>, oneshot::Receiver<()>)> =
        BTreeMap::new();
    let mut shutdown = std::pin::pin!(shutdown.fuse());
    loop {
        let ev = futures::select! {
            e = events.next() => e,
            _ = shutdown => None,
        };
        let Some(ev) = ev else { break };
        match ev {
            PartnerEvent::TaskStarted { task_id, command } => {
                let (tx, rx) = mpsc::unbounded();
                let (done_tx, done_rx) = oneshot::channel();
                let prompt = text_of(command.items());
                let session = command.session_id.clone().unwrap_or_default();
                let fut = task_loop(
                    rt.clone(),
                    partner.clone(),
                    cmd.clone(),
                    task_id.to_string(),
                    session,
                    prompt,
                    rx,
                );
                rt.spawn(Box::pin(async move {
                    fut.await;
                    let _ = done_tx.send(());
                }));
                tasks.insert(task_id.to_string(), (tx, done_rx));
            }
            PartnerEvent::TaskContinued { task_id, command } => {
                if let Some((tx, _)) = tasks.get(&*task_id) {
                    let _ = tx.unbounded_send(Msg::Continue(text_of(command.items())));
                }
            }
            PartnerEvent::TaskEnded { task_id, .. } => {
                if let Some((tx, _)) = tasks.remove(&*task_id) {
                    let _ = tx.unbounded_send(Msg::End);
                }
            }
            _ => {}
        }
    }
    // Stop every task and wait until its command is gone.
    for (_, (tx, done)) in std::mem::take(&mut tasks) {
        let _ = tx.unbounded_send(Msg::End);
        let _ = done.await;
    }
}

fn text_of(items: &[DataItem]) -> String {
    items
        .iter()
        .filter_map(DataItem::as_text)
        .collect::<Vec<_>>()
        .join("\n")
}

/// A task id as a directory name (other characters become `_`, plus a hash of the id so two
/// ids never share a directory).
pub(crate) fn dir_name(task_id: &str) -> String {
    let clean: String = task_id
        .chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in task_id.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{clean}-{h:016x}")
}

/// Makes a new work directory for one task under `root`, with an `out` directory inside.
/// Its name starts with [`dir_name`] of `key` and ends with a random suffix, and it is
/// created exclusively: two partners sharing a work root, or one task id arriving from two
/// leaders, never share a directory, so one task's clean-up never removes another's files.
pub(crate) fn make_task_dir(root: &Path, key: &str) -> std::io::Result<PathBuf> {
    let dir = tempfile::Builder::new()
        .prefix(&format!("{}.", dir_name(key)))
        .tempdir_in(root)?
        .keep();
    if let Err(e) = std::fs::create_dir(dir.join("out")) {
        let _ = std::fs::remove_dir_all(&dir);
        return Err(e);
    }
    Ok(dir)
}

/// The longest request text also passed in `AIP_PROMPT` (bytes): one environment string may
/// not exceed 128 KiB (`MAX_ARG_STRLEN`), and the whole environment shares `ARG_MAX` with the
/// arguments. A longer text is only in `AIP_PROMPT_FILE` and on stdin; `AIP_PROMPT` is then
/// unset.
pub const MAX_PROMPT_ENV: usize = 64 * 1024;

/// Writes the request text to `.aip-prompt.txt` in the task's work directory `dir` (beside
/// `out/`, so it is no product; removed with the directory), for `AIP_PROMPT_FILE`.
pub(crate) fn prompt_file(dir: &Path, prompt: &str) -> std::io::Result<PathBuf> {
    let path = dir.join(".aip-prompt.txt");
    std::fs::write(&path, prompt)?;
    Ok(path)
}

/// The prompt variables of an agent's environment: `AIP_PROMPT_FILE`, and `AIP_PROMPT` while
/// the text fits ([`MAX_PROMPT_ENV`]).
pub(crate) fn prompt_env(cmd: &mut Command, prompt: &str, file: &Path) {
    cmd.env("AIP_PROMPT_FILE", file);
    if prompt.len() <= MAX_PROMPT_ENV {
        cmd.env("AIP_PROMPT", prompt);
    }
}

/// A child in its task's jail ([`awcp_transports::contain`]): if dropped while running, every
/// process the task started (its group, its cgroup or recorded descendants) is killed and the
/// child reaped.
struct Running {
    child: Option<JailedChild>,
    jail: Option<Jail>,
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut jail) = self.jail.take() {
            jail.end();
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

async fn write_line<R: Runtime>(rt: &R, stdin: File, text: String) -> Option<File> {
    blocking(rt, move || {
        let mut stdin = stdin;
        let mut line = text.replace('\n', " ");
        line.push('\n');
        stdin
            .write_all(line.as_bytes())
            .and_then(|_| stdin.flush())
            .ok()?;
        Some(stdin)
    })
    .await
}

#[allow(clippy::too_many_arguments)]
async fn task_loop<R: Runtime>(
    rt: R,
    p: PartnerHandle,
    cmd: Arc<AgentCommand>,
    task_id: String,
    session: String,
    prompt: String,
    mut inbox: mpsc::UnboundedReceiver<Msg>,
) {
    let dir = match make_task_dir(&cmd.work_root, &task_id) {
        Ok(dir) => dir,
        Err(e) => {
            fail(
                &p,
                &task_id,
                format!("cannot create the work directory: {e}"),
            )
            .await;
            return;
        }
    };
    let out_dir = dir.join("out");
    if p.start_working(&task_id).await.is_err() {
        let _ = std::fs::remove_dir_all(&dir);
        return;
    }
    let prompt_path = match prompt_file(&dir, &prompt) {
        Ok(p) => p,
        Err(e) => {
            fail(&p, &task_id, format!("cannot write the prompt file: {e}")).await;
            let _ = std::fs::remove_dir_all(&dir);
            return;
        }
    };
    let mut inputs = vec![prompt.clone()];
    'runs: loop {
        let mut spawned = Command::new(&cmd.argv[0]);
        spawned
            .args(&cmd.argv[1..])
            .current_dir(&dir)
            .env_clear()
            .envs(awcp_transports::agent_environment(
                &cmd.env_pass,
                &cmd.env_set,
            ))
            .env("AIP_TASK_ID", &task_id)
            .env("AIP_SESSION_ID", &session)
            .env("AIP_OUTPUT_DIR", &out_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        prompt_env(&mut spawned, &prompt, &prompt_path);
        // Everything the agent starts stays in the task's jail and ends with it.
        let mut jail = Jail::new(format!("AIP_TASK_ID={task_id}"));
        let spawned = jail.spawn(&mut spawned);
        let mut child = match spawned {
            Ok(c) => Running {
                child: Some(c),
                jail: Some(jail),
            },
            Err(e) => {
                fail(&p, &task_id, format!("cannot run {}: {e}", cmd.argv[0])).await;
                break 'runs;
            }
        };
        let c = child.child.as_mut().expect("running");
        let (stdout, stderr, stdin) = (c.stdout.take(), c.stderr.take(), c.stdin.take());
        let mut stdin = stdin;
        for input in &inputs {
            stdin = match stdin {
                Some(s) => write_line(&rt, s, input.clone()).await,
                None => None,
            };
        }
        let (line_tx, mut lines) = mpsc::unbounded::<String>();
        if let Some(out) = stdout {
            rt.spawn(blocking(&rt, move || {
                for line in std::io::BufReader::new(out).lines() {
                    let Ok(line) = line else { break };
                    if line_tx.unbounded_send(line).is_err() {
                        break;
                    }
                }
            }));
        }
        let stderr_tail = blocking(&rt, move || {
            let mut buf = Vec::new();
            if let Some(mut e) = stderr {
                let _ = e.read_to_end(&mut buf);
            }
            let start = buf.len().saturating_sub(2000);
            String::from_utf8_lossy(&buf[start..]).trim().to_owned()
        });
        let mut output: Vec<String> = Vec::new();
        loop {
            futures::select! {
                l = lines.next() => match l {
                    Some(line) => match line.strip_prefix(cmd.ask_marker.as_str()) {
                        Some(q) => {
                            let q = vec![DataItem::text(q.trim())];
                            if let Err(e) = p.request_input(&task_id, q).await {
                                tracing::warn!(task = %task_id, "the agent asked, but: {e}");
                            }
                        }
                        None => {
                            let _ = p.progress(&task_id, vec![DataItem::text(line.clone())]).await;
                            output.push(line);
                        }
                    },
                    None => break,
                },
                m = inbox.next() => match m {
                    Some(Msg::Continue(t)) => {
                        inputs.push(t.clone());
                        stdin = match stdin {
                            Some(s) => write_line(&rt, s, t).await,
                            None => None,
                        };
                    }
                    Some(Msg::End) | None => {
                        drop(child); // killed and reaped
                        break 'runs;
                    }
                },
            }
        }
        // stdout closed: the agent is done.
        drop(stdin);
        let (Some(c), Some(mut jail)) = (child.child.take(), child.jail.take()) else {
            break;
        };
        let status = blocking(&rt, move || {
            let mut c = c;
            let status = c.wait();
            // Whatever the agent left behind goes with it.
            jail.end();
            status
        })
        .await;
        let tail = stderr_tail.await;
        match status {
            Ok(s) if s.success() => {
                let mut products = vec![Product {
                    name: Some("result".into()),
                    ..Product::text("result", output.join("\n"))
                }];
                let (od, max) = (out_dir.clone(), cmd.max_file_bytes);
                products.extend(blocking(&rt, move || file_products(&od, max)).await);
                if let Err(e) = p.submit(&task_id, products, vec![]).await {
                    tracing::warn!(task = %task_id, "submit: {e}");
                }
            }
            Ok(s) => {
                let why = format!("the agent exited with {s}: {tail}");
                fail(&p, &task_id, why).await;
            }
            Err(e) => fail(&p, &task_id, format!("waiting for the agent: {e}")).await,
        }
        // Done: wait for a continue (run again) or the end of the task.
        match inbox.next().await {
            Some(Msg::Continue(t)) => {
                inputs.push(t);
                if p.task(&task_id).await.ok().flatten().is_none() {
                    break;
                }
            }
            Some(Msg::End) | None => break,
        }
    }
    let _ = blocking(&rt, move || std::fs::remove_dir_all(&dir)).await;
}

async fn fail(p: &PartnerHandle, task_id: &str, why: String) {
    tracing::warn!(task = %task_id, "{why}");
    let _ = p.fail(task_id, vec![DataItem::text(why)]).await;
}

/// Every regular file directly in `dir` as a product (inline base64 up to `max` bytes).
pub(crate) fn file_products(dir: &Path, max: u64) -> Vec<Product> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|path| {
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            let bytes = (size <= max)
                .then(|| std::fs::read(&path).ok())
                .flatten()
                .map(|b| base64::engine::general_purpose::STANDARD.encode(b));
            let description = bytes
                .is_none()
                .then(|| format!("{size} bytes, over the inline limit of {max}"));
            Product {
                id: format!("file:{name}"),
                name: Some(name.clone()),
                description,
                data_items: vec![DataItem::File {
                    name: Some(name.clone()),
                    mime_type: Some(mime_of(&name).into()),
                    uri: None,
                    bytes,
                    metadata: None,
                }],
            }
        })
        .collect()
}

fn mime_of(name: &str) -> &'static str {
    match name.rsplit('.').next().unwrap_or("") {
        "txt" | "log" => "text/plain",
        "md" => "text/markdown",
        "json" => "application/json",
        "html" | "htm" => "text/html",
        "csv" => "text/csv",
        "pdf" => "application/pdf",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        _ => "application/octet-stream",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_ids_become_distinct_safe_directory_names() {
        let a = dir_name("../../etc/passwd");
        assert!(!a.contains('/') && !a.contains(".."), "{a}");
        assert_ne!(dir_name("a/b"), dir_name("a_b"));
        assert!(dir_name(&"x".repeat(500)).len() < 100);
    }

    /// Two partners on one work root both get task `t-1` (the CI failure of stop 26: one
    /// removed the shared directory while the other was starting its command in it).
    #[test]
    fn one_task_id_twice_gets_two_directories_and_one_removal_spares_the_other() {
        let root = tempfile::tempdir().unwrap();
        let a = make_task_dir(root.path(), "g/t-1").unwrap();
        let b = make_task_dir(root.path(), "g/t-1").unwrap();
        assert_ne!(a, b);
        assert!(a.join("out").is_dir() && b.join("out").is_dir());
        assert!(a
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with(&dir_name("g/t-1")));
        std::fs::remove_dir_all(&a).unwrap();
        assert!(b.join("out").is_dir());
    }
}
