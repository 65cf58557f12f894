//! `aip`: an AIP leader on the command line (direct mode, both dialects).
//!
//! ```text
//! export AIP_PARTNER=http://127.0.0.1:10300/rpc
//! aip stream "plan a trip to Rome"          # start, print live events until it awaits or ends
//! aip start --task t-1 "plan a trip"        # start and print the first answer
//! aip start --wait "plan a trip"            # …and follow it (polling) until it awaits or ends
//! aip continue t-1 "three days"             # more input
//! aip complete t-1                          # accept the products
//! aip cancel t-1
//! aip get t-1                               # the task with its histories
//! aip stream --attach t-1                   # replay and follow an existing task's stream
//! aip notify --listen 127.0.0.1:0 "hello"   # a notification receiver; print what it receives
//! aip --json get t-1                        # one JSON object per line
//!
//! # group mode (RabbitMQ): create a group, then one command per stdin line (see below)
//! aip group --broker amqp://guest:guest@127.0.0.1:5672/%2f --group g-1 --leader-id 1.2.156.3088.1.1.1.1.1.0000
//!   invite 1.2.156.3088.1.1.1.1.1.0001 http://127.0.0.1:10301/group/rpc
//!   invite-inbox 1.2.156.3088.1.1.1.1.1.0002
//!   start t-1 all summarize the report         # mentions: all, or AIC[,AIC...]
//!   complete t-1 1.2.156.3088.1.1.1.1.1.0001
//!   status | mute AIC | unmute AIC | remove AIC | members | disband
//! ```
//! `aip group` prints the group's events live (joins, status, every member's results);
//! the console's commands are documented in `awcp_aip_cli::aip_group`.
//! Exit status: 0 when the partner answered (following a task: when it reached
//! awaiting-input, awaiting-completion or completed); 1 when the partner answered an error, a
//! start was rejected or failed, or a followed task failed, was rejected or canceled; 2 on bad
//! usage.

use std::path::PathBuf;
use std::time::Duration;

use agent_rt::Host;
use aip_driver::aip_proto::leader::{
    AttachTask, Delivery, LeaderConfig, LeaderEvent, PartnerEndpoint, StartTask,
};
use aip_driver::aip_proto::{
    encode_task, DataItem, Dialect, Product, TaskResult, TaskState, Timestamp,
};
use aip_driver::{LeaderError, LeaderEvents, LeaderHandle, LeaderOptions};
use awcp_aip_cli::{ClientTlsArgs, RuntimeChoice};
use clap::{Parser, Subcommand};
use futures::StreamExt;
use serde_json::json;

#[derive(Parser, Debug)]
#[command(name = "aip", version, about = "Talk to AIP partners as a leader")]
struct Args {
    /// JSON config file whose keys are flag names (command line, then environment, then file).
    #[arg(long, global = true)]
    config: Option<std::path::PathBuf>,
    /// The partner's rpc endpoint (its ACS endPoints[].url), e.g. http://127.0.0.1:10300/rpc.
    #[arg(long, short, env = "AIP_PARTNER", global = true)]
    partner: Option<String>,
    /// The partner's dialect: v2 (acps-sdk 2.x, the default) or v1 (the v01.00 seed).
    #[arg(long, env = "AIP_DIALECT", default_value = "v2", global = true, value_parser = parse_dialect)]
    dialect: Dialect,
    /// This leader's id (AIC), the `senderId` of its commands.
    #[arg(long, env = "AIP_LEADER_ID", default_value = "aip-cli", global = true)]
    leader_id: String,
    /// The session of new tasks (default: a fresh one).
    #[arg(long, env = "AIP_SESSION", global = true)]
    session: Option<String>,
    /// Print one JSON object per line instead of text.
    #[arg(long, global = true)]
    json: bool,
    /// Give up on a call after this many seconds without an answer (each of 3 attempts); a
    /// stream silent this long is resumed.
    #[arg(long, default_value_t = 30, global = true)]
    timeout: u64,
    /// Async runtime to run on.
    #[arg(long, env = "AIP_RUNTIME", value_enum, default_value_t, global = true)]
    runtime: RuntimeChoice,
    #[command(flatten)]
    tls: ClientTlsArgs,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Lead a group over RabbitMQ: create it, then read commands from stdin (invite,
    /// invite-inbox, start/continue/complete/cancel TASK MENTIONS TEXT, status, mute,
    /// unmute, remove, members, disband) and print its events live. End of input disbands.
    Group {
        /// The broker: amqp://user:password@host:port/vhost (partners invited by RPC are
        /// given the same credentials).
        #[arg(long, env = "AIP_BROKER")]
        broker: String,
        /// The group id ([A-Za-z0-9-], at most 128).
        #[arg(long)]
        group: String,
        /// Seconds `status` waits before a silent member counts as lost.
        #[arg(long, default_value_t = 5)]
        status_timeout: u64,
        /// TLS to an amqps:// broker and the client certificate for SASL EXTERNAL.
        #[command(flatten)]
        amqp: awcp_aip_cli::AmqpTlsArgs,
    },
    /// Start a task and print the partner's first answer.
    Start {
        /// The task id (default: a fresh one).
        #[arg(long)]
        task: Option<String>,
        /// Follow the task (polling with get) until it awaits input or completion, or ends.
        #[arg(long)]
        wait: bool,
        /// The request.
        #[arg(required_unless_present = "text_file")]
        text: Vec<String>,
        /// Read the request from this file (`-`: standard input) instead: for requests too
        /// large for a command line.
        #[arg(long, value_name = "PATH", conflicts_with = "text")]
        text_file: Option<PathBuf>,
    },
    /// Send more input to a task (awaiting input, or awaiting completion to ask for changes).
    Continue {
        /// The task.
        task: String,
        /// The input.
        #[arg(required_unless_present = "text_file")]
        text: Vec<String>,
        /// Read the input from this file (`-`: standard input) instead.
        #[arg(long, value_name = "PATH", conflicts_with = "text")]
        text_file: Option<PathBuf>,
    },
    /// Accept a task's products (awaiting-completion → completed).
    Complete {
        /// The task.
        task: String,
    },
    /// Cancel a task.
    Cancel {
        /// The task.
        task: String,
    },
    /// Print a task with its histories.
    Get {
        /// The task.
        task: String,
        /// Write the files among its products (file data items sent inline) into this
        /// directory, each under its own name (a name that would leave the directory, or that
        /// exists there already, is refused, never overwritten).
        #[arg(long, value_name = "DIR")]
        save: Option<PathBuf>,
    },
    /// Start a task on a stream (or follow an existing one with --attach) and print its
    /// events live until it awaits input or completion, or ends.
    Stream {
        /// The task id of a new task (default: a fresh one).
        #[arg(long, conflicts_with = "attach")]
        task: Option<String>,
        /// Follow this existing task instead: its stream is replayed from the first event.
        #[arg(long)]
        attach: Option<String>,
        /// The request (for a new task).
        #[arg(required_unless_present_any = ["attach", "text_file"])]
        text: Vec<String>,
        /// Read the request from this file (`-`: standard input) instead.
        #[arg(long, value_name = "PATH", conflicts_with_all = ["text", "attach"])]
        text_file: Option<PathBuf>,
    },
    /// Run a notification receiver, start a task that reports to it, and print each
    /// notification until the task awaits input or completion, or ends.
    Notify {
        /// Where the receiver listens (port 0 picks a free one).
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: std::net::SocketAddr,
        /// The receiver URL the partner is given (default: `http://<listen address>/notify`).
        #[arg(long)]
        receiver_url: Option<String>,
        /// The task id (default: a fresh one).
        #[arg(long)]
        task: Option<String>,
        /// The request.
        #[arg(required_unless_present = "text_file")]
        text: Vec<String>,
        /// Read the request from this file (`-`: standard input) instead.
        #[arg(long, value_name = "PATH", conflicts_with = "text")]
        text_file: Option<PathBuf>,
    },
}

impl Cmd {
    /// The request text of `start`, `continue`, `stream` and `notify` ([`request_text`]);
    /// empty for the other commands.
    fn request(&self) -> Result<String, String> {
        match self {
            Cmd::Start {
                text, text_file, ..
            }
            | Cmd::Continue {
                text, text_file, ..
            }
            | Cmd::Stream {
                text, text_file, ..
            }
            | Cmd::Notify {
                text, text_file, ..
            } => request_text(text, text_file.as_deref()),
            _ => Ok(String::new()),
        }
    }
}

/// The request text: the words given, or the file (`-`: standard input).
fn request_text(text: &[String], file: Option<&std::path::Path>) -> Result<String, String> {
    let Some(path) = file else {
        return Ok(text.join(" "));
    };
    let read = if path == std::path::Path::new("-") {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s).map(|_| s)
    } else {
        std::fs::read_to_string(path)
    };
    let s = read.map_err(|e| format!("cannot read the request from {}: {e}", path.display()))?;
    Ok(s.strip_suffix('\n').unwrap_or(&s).to_owned())
}

fn parse_dialect(s: &str) -> Result<Dialect, String> {
    match s.to_ascii_lowercase().as_str() {
        "v1" | "1" | "01.00" => Ok(Dialect::V1),
        "v2" | "2" | "02.00" | "02.01" | "02.02" => Ok(Dialect::V2),
        other => Err(format!("unknown dialect {other:?} (use v1 or v2)")),
    }
}

fn main() {
    // The shared TLS and server flags read AIP variables here, not AWCP ones.
    let args: Args = awcp_aip_cli::parse_with_env_prefix("AIP_", "AIP_");
    awcp_aip_cli::init_logging(true, awcp_aip_cli::LogFormat::Text);
    let code = awcp_aip_cli::run_on!(args.runtime, run(args));
    std::process::exit(code);
}

fn usage(msg: &str) -> i32 {
    eprintln!("error: {msg}");
    2
}

fn fresh(kind: &str) -> String {
    format!("{kind}-{:016x}", awcp_aip_cli::random_seed())
}

/// How the CLI prints.
struct Out {
    json: bool,
}

impl Out {
    fn line(&self, v: serde_json::Value, text: String) {
        awcp_aip_cli::print_line(self.json, &v, &text);
    }

    fn items(items: &[DataItem]) -> String {
        items
            .iter()
            .map(|d| match d {
                DataItem::Text { text, .. } => text.clone(),
                DataItem::File {
                    name, bytes, uri, ..
                } => format!(
                    "[file {}{}]",
                    name.as_deref().unwrap_or("?"),
                    match (bytes, uri) {
                        (Some(b), _) => format!(
                            ", {} bytes",
                            b.len() / 4 * 3 - b.bytes().rev().take_while(|&c| c == b'=').count()
                        ),
                        (None, Some(u)) => format!(" at {u}"),
                        _ => String::new(),
                    }
                ),
                DataItem::Data { data, .. } => data.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn product_text(p: &Product) -> String {
        format!("product {}: {}", p.id, Self::items(&p.data_items))
    }

    fn result(&self, t: &TaskResult) {
        let v: serde_json::Value =
            serde_json::from_slice(&encode_task(t, Dialect::V2)).unwrap_or_default();
        let mut text = format!("task {}: {}", t.task_id, t.status.state);
        if let Some(items) = t.status.data_items.as_deref().filter(|i| !i.is_empty()) {
            text.push_str(&format!("\n  {}", Self::items(items).replace('\n', "\n  ")));
        }
        for p in t.products.iter().flatten() {
            text.push('\n');
            text.push_str(&Self::product_text(p));
        }
        if let Some(h) = t.status_history.as_deref().filter(|h| !h.is_empty()) {
            let states: Vec<&str> = h.iter().map(|s| s.state.as_str()).collect();
            text.push_str(&format!("\nhistory: {}", states.join(" -> ")));
        }
        self.line(
            json!({"event": "result", "taskId": t.task_id, "result": v}),
            text,
        );
    }

    fn error(&self, task: &str, e: &LeaderError) {
        let code = e.rpc_error().map(|r| r.code.code());
        self.line(
            json!({"event": "error", "taskId": task, "code": code, "message": e.to_string()}),
            format!("task {task}: error: {e}"),
        );
    }

    /// A live event; `true` once the task needs the user or has ended.
    fn event(&self, task: &str, e: &LeaderEvent) -> Option<TaskState> {
        match e {
            LeaderEvent::StateChanged {
                task_id, status, ..
            } if task_id == task => {
                let items = status.data_items.as_deref().unwrap_or_default();
                let mut text = format!("[{}]", status.state);
                if !items.is_empty() {
                    text.push(' ');
                    text.push_str(&Self::items(items));
                }
                self.line(
                    json!({"event": "state", "taskId": task, "status": status}),
                    text,
                );
                let s = status.state;
                (s.is_terminal()
                    || matches!(s, TaskState::AwaitingInput | TaskState::AwaitingCompletion))
                .then_some(s)
            }
            LeaderEvent::Progress { task_id, status } if task_id == task => {
                let items = status.data_items.as_deref().unwrap_or_default();
                self.line(
                    json!({"event": "progress", "taskId": task, "status": status}),
                    format!("  {}", Self::items(items).replace('\n', "\n  ")),
                );
                None
            }
            LeaderEvent::ProductChunk { task_id, chunk } if task_id == task => {
                self.line(
                    json!({"event": "product-chunk", "taskId": task, "product": chunk.product,
                           "append": chunk.append, "lastChunk": chunk.last_chunk}),
                    Self::product_text(&chunk.product),
                );
                None
            }
            LeaderEvent::StreamDropped {
                task_id,
                will_retry,
            } if task_id == task => {
                self.line(
                    json!({"event": "stream-dropped", "taskId": task, "willRetry": will_retry}),
                    format!(
                        "(stream dropped{})",
                        if *will_retry { "; resuming" } else { "" }
                    ),
                );
                None
            }
            LeaderEvent::StreamLost { task_id, error } if task_id == task => {
                self.line(
                    json!({"event": "stream-lost", "taskId": task, "error": error.to_string()}),
                    format!("(no stream from the partner: {error}; following by polling)"),
                );
                None
            }
            LeaderEvent::TaskAbandoned { task_id, reason } if task_id == task => {
                self.line(
                    json!({"event": "abandoned", "taskId": task, "reason": reason.to_string()}),
                    format!("task {task}: abandoned ({reason})"),
                );
                Some(TaskState::Failed)
            }
            _ => None,
        }
    }
}

fn exit_code(state: TaskState) -> i32 {
    match state {
        TaskState::Failed | TaskState::Rejected | TaskState::Canceled => 1,
        _ => 0,
    }
}

async fn run<R: Host>(args: Args) -> i32 {
    if let Cmd::Group {
        broker,
        group,
        status_timeout,
        amqp,
    } = &args.cmd
    {
        let broker_tls = match amqp.amqp_tls() {
            Ok(t) => t,
            Err(e) => {
                eprintln!("error: {e}");
                return 2;
            }
        };
        let client_tls = match args.tls.client_tls() {
            Ok(t) => t,
            Err(e) => {
                eprintln!("error: {e}");
                return 2;
            }
        };
        let cli = awcp_aip_cli::aip_group::LeaderCli {
            broker: broker.clone(),
            broker_tls,
            client_tls,
            group: group.clone(),
            leader_id: args.leader_id.clone(),
            json: args.json,
            status_timeout: Duration::from_secs((*status_timeout).max(1)),
        };
        return awcp_aip_cli::aip_group::leader::<R>(cli).await;
    }
    let Some(partner) = args.partner.clone() else {
        return usage("no partner: give --partner URL or set AIP_PARTNER");
    };
    let client_tls = match args.tls.client_tls() {
        Ok(t) => t,
        Err(e) => return usage(&e),
    };
    let out = Out { json: args.json };
    let follows = matches!(args.cmd, Cmd::Start { wait: true, .. });
    let mut engine = LeaderConfig {
        leader_id: args.leader_id.clone(),
        poll_interval: follows.then(|| Duration::from_millis(500)),
        task_timeout: None,
        id_seed: awcp_aip_cli::random_seed(),
        ..LeaderConfig::default()
    };
    engine.calls.attempt_timeout = Duration::from_secs(args.timeout.max(1));
    // A stream silent for `--timeout` (no event, no keepalive) is noticed then and resumed.
    engine.stream_idle_timeout = engine.calls.attempt_timeout;
    let (leader, events) = LeaderHandle::spawn(
        R::default(),
        LeaderOptions {
            engine,
            client_tls,
            ..LeaderOptions::default()
        },
    );
    let endpoint = PartnerEndpoint {
        url: partner,
        dialect: args.dialect,
    };
    if leader.add_partner("p", endpoint.clone()).await.is_err() {
        return 1;
    }
    let mut since = None;
    let session = args.session.clone().unwrap_or_else(|| fresh("session"));
    // A task of an earlier run keeps its own session: without `--session` the leader learns
    // it from the partner's first answer (see `learn_session`).
    let known_session = args.session.clone().unwrap_or_default();
    let attach = |task: String, delivery: Delivery| AttachTask {
        partner: "p".into(),
        task_id: task,
        session_id: known_session.clone(),
        delivery,
        deadline: None,
    };
    // The request of start/continue/stream/notify, read once (empty for the other commands).
    let text = match args.cmd.request() {
        Ok(t) => t,
        Err(e) => return usage(&e),
    };
    match args.cmd {
        Cmd::Group { .. } => usage("group is handled above"),
        Cmd::Start { task, wait, .. } => {
            let task = task.unwrap_or_else(|| fresh("task"));
            let start = StartTask::new("p", task.clone(), session.clone(), text);
            let r = leader.start(start).await;
            if !wait || r.is_err() {
                return answer(&out, &task, r);
            }
            follow(&out, &leader, events, &task, since).await
        }
        Cmd::Continue { task, .. } => {
            if leader
                .attach(attach(task.clone(), Delivery::Rpc))
                .await
                .is_err()
            {
                return 1;
            }
            if let Err(code) = learn_session(&out, &leader, &task, args.session.is_none()).await {
                return code;
            }
            let items = vec![DataItem::text(text)];
            answer(&out, &task, leader.continue_task(&task, items).await)
        }
        Cmd::Complete { task } => {
            let a = attach(task, Delivery::Rpc);
            one_shot(&out, &leader, a, "complete", args.session.is_none()).await
        }
        Cmd::Cancel { task } => {
            let a = attach(task, Delivery::Rpc);
            one_shot(&out, &leader, a, "cancel", args.session.is_none()).await
        }
        Cmd::Get { task, save: None } => {
            one_shot(&out, &leader, attach(task, Delivery::Rpc), "get", false).await
        }
        Cmd::Get {
            task,
            save: Some(dir),
        } => {
            if let Err(e) = leader.attach(attach(task.clone(), Delivery::Rpc)).await {
                return usage(&e.to_string());
            }
            let r = leader.get(&task).await;
            let saved = match &r {
                Ok(t) => save_files(&out, t, &dir),
                Err(_) => 0,
            };
            answer(&out, &task, r).max(saved)
        }
        Cmd::Stream {
            task,
            attach: existing,
            ..
        } => {
            let task = match existing {
                Some(t) => {
                    // Where the task is now: the replay shows its history, and following stops
                    // at an awaiting or final state no older than this.
                    let (probe, _) = LeaderHandle::spawn(R::default(), LeaderOptions::default());
                    let _ = probe.add_partner("p", endpoint.clone()).await;
                    let _ = probe.attach(attach(t.clone(), Delivery::Rpc)).await;
                    match probe.get(&t).await {
                        Ok(now) => since = Some(now.status.state_changed_at),
                        Err(e) => {
                            out.error(&t, &e);
                            return 1;
                        }
                    }
                    if let Err(e) = leader.attach(attach(t.clone(), Delivery::Stream)).await {
                        return usage(&e.to_string());
                    }
                    t
                }
                None => {
                    let task = task.unwrap_or_else(|| fresh("task"));
                    let start = StartTask {
                        delivery: Delivery::Stream,
                        ..StartTask::new("p", task.clone(), session.clone(), text)
                    };
                    spawn_start::<R>(&leader, start);
                    task
                }
            };
            follow(&out, &leader, events, &task, since).await
        }
        Cmd::Notify {
            listen,
            receiver_url,
            task,
            ..
        } => {
            let listener = match std::net::TcpListener::bind(listen) {
                Ok(l) => l,
                Err(e) => return usage(&format!("cannot listen on {listen}: {e}")),
            };
            let local = listener.local_addr().expect("bound socket has an address");
            let url = receiver_url.unwrap_or_else(|| format!("http://{local}/notify"));
            let (stop_tx, stop_rx) = futures::channel::oneshot::channel::<()>();
            let serve = aip_driver::serve_notifications(
                R::default(),
                listener,
                &leader,
                agent_rt::ServerOptions::default(),
                async move {
                    let _ = stop_rx.await;
                },
            );
            R::default().spawn(Box::pin(async move {
                if let Err(e) = serve.await {
                    eprintln!("error: the notification receiver failed: {e}");
                }
            }));
            out.line(
                json!({"event": "receiver", "url": url}),
                format!("receiving notifications at {url}"),
            );
            let task = task.unwrap_or_else(|| fresh("task"));
            let start = StartTask {
                delivery: Delivery::Notification {
                    url: Some(url),
                    token: None,
                    states: Vec::new(),
                },
                ..StartTask::new("p", task.clone(), session.clone(), text)
            };
            spawn_start::<R>(&leader, start);
            let code = follow(&out, &leader, events, &task, since).await;
            let _ = stop_tx.send(());
            code
        }
    }
}

/// Starts a task in the background: `follow` prints its answer (as events) or its error.
fn spawn_start<R: Host>(leader: &LeaderHandle, start: StartTask) {
    let leader = leader.clone();
    R::default().spawn(Box::pin(async move {
        let _ = leader.start(start).await;
    }));
}

/// Writes the inline files among `t`'s products into `dir` (created if missing), printing
/// each; the exit code (1 if one could not be written).
fn save_files(out: &Out, t: &TaskResult, dir: &std::path::Path) -> i32 {
    use base64::Engine as _;
    if let Err(e) = std::fs::create_dir_all(dir) {
        eprintln!("error: cannot create {}: {e}", dir.display());
        return 1;
    }
    let mut code = 0;
    for p in t.products.iter().flatten() {
        for item in &p.data_items {
            let DataItem::File {
                name,
                bytes: Some(b64),
                ..
            } = item
            else {
                continue;
            };
            let name = name.clone().unwrap_or_else(|| format!("{}.bin", p.id));
            // Its own name only: no directories, nothing that leaves `dir`.
            let plain = std::path::Path::new(&name)
                .file_name()
                .is_some_and(|f| f == name.as_str())
                && name != ".."
                && name != ".";
            let path = dir.join(&name);
            let written = if !plain {
                Err(format!("{name:?} is not a plain file name"))
            } else {
                base64::engine::general_purpose::STANDARD
                    .decode(b64)
                    .map_err(|e| format!("{name}: not base64: {e}"))
                    .and_then(|bytes| {
                        use std::io::Write as _;
                        std::fs::OpenOptions::new()
                            .write(true)
                            .create_new(true)
                            .open(&path)
                            .and_then(|mut f| f.write_all(&bytes))
                            .map(|()| bytes.len())
                            .map_err(|e| format!("{}: {e}", path.display()))
                    })
            };
            match written {
                Ok(n) => out.line(
                    json!({"event": "saved", "taskId": t.task_id, "product": p.id,
                           "path": path.display().to_string(), "bytes": n}),
                    format!("saved {} ({n} bytes)", path.display()),
                ),
                Err(e) => {
                    eprintln!("error: not saved: {e}");
                    code = 1;
                }
            }
        }
    }
    code
}

/// Prints an answer; the exit code (1 for an error, or a start the partner rejected or
/// failed at once).
fn answer(out: &Out, task: &str, r: Result<TaskResult, LeaderError>) -> i32 {
    match r {
        Ok(t) => {
            out.result(&t);
            i32::from(matches!(
                t.status.state,
                TaskState::Rejected | TaskState::Failed
            ))
        }
        Err(e) => {
            out.error(task, &e);
            1
        }
    }
}

/// Without `--session`, asks the partner for the task first, so that the command carries
/// the task's own session (the leader takes it from the answer); `Err` holds the exit code.
async fn learn_session(
    out: &Out,
    leader: &LeaderHandle,
    task: &str,
    unknown: bool,
) -> Result<(), i32> {
    if !unknown {
        return Ok(());
    }
    match leader.get(task).await {
        Ok(_) => Ok(()),
        Err(e) => {
            out.error(task, &e);
            Err(1)
        }
    }
}

async fn one_shot(
    out: &Out,
    leader: &LeaderHandle,
    a: AttachTask,
    what: &str,
    session_unknown: bool,
) -> i32 {
    let task = a.task_id.clone();
    if let Err(e) = leader.attach(a).await {
        return usage(&e.to_string());
    }
    if let Err(code) = learn_session(out, leader, &task, session_unknown).await {
        return code;
    }
    let r = match what {
        "complete" => leader.complete(&task).await,
        "cancel" => leader.cancel(&task).await,
        _ => leader.get(&task).await,
    };
    answer(out, &task, r)
}

/// Prints the task's events until it awaits the user or ends (in a state entered at or after
/// `since`, if given: a replayed stream shows older ones); the exit code.
async fn follow(
    out: &Out,
    leader: &LeaderHandle,
    mut events: LeaderEvents,
    task: &str,
    since: Option<Timestamp>,
) -> i32 {
    // The channel holds every event since the leader started, so nothing is missed.
    // Products already shown piece by piece (stream chunks) are not listed again at the end.
    let mut chunked = std::collections::HashSet::new();
    while let Some(e) = events.next().await {
        if let LeaderEvent::ProductChunk { task_id, chunk } = &e {
            if task_id == task {
                chunked.insert(chunk.product.id.clone());
            }
        }
        if let LeaderEvent::Answered {
            task_id,
            outcome: Err(error),
            ..
        } = &e
        {
            if task_id == task {
                out.line(
                    json!({"event": "error", "taskId": task, "message": error.to_string()}),
                    format!("task {task}: error: {error}"),
                );
                return 1;
            }
        }
        let old = matches!(&e, LeaderEvent::StateChanged { status, .. }
            if since.is_some_and(|t| status.state_changed_at < t));
        if let Some(state) = out.event(task, &e).filter(|_| !old) {
            if let Ok(Some(s)) = leader.task(task).await {
                for p in s.products.iter().filter(|p| !chunked.contains(&p.id)) {
                    out.line(
                        json!({"event": "product", "taskId": task, "product": p}),
                        Out::product_text(p),
                    );
                }
            }
            return exit_code(state);
        }
    }
    1
}
