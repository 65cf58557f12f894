//! AIP group mode on the command line: the `aip group` leader console and the
//! `aip-partner --group` application.
//!
//! **Leader** ([`leader`]): creates the group on the broker, then reads one command per
//! stdin line and prints what happens in the group as it happens (one line per event, or
//! one JSON object per line with `--json`). End of input disbands the group.
//!
//! ```text
//! invite AIC URL                 # by the `group` JSON-RPC method at the partner's URL
//! invite-inbox AIC               # through the partner's inbox (inbox_{AIC} on inbox.topic)
//! start TASK MENTIONS TEXT...    # MENTIONS: all, or AIC[,AIC...]
//! continue TASK MENTIONS TEXT...
//! complete TASK MENTIONS
//! cancel TASK MENTIONS
//! status [MENTIONS]              # get-status (default all); silent members become lost
//! mute AIC | unmute AIC | remove AIC
//! members                        # every member's connection and mute state
//! disband                        # the SDK's dissolve: every member leaves; then exit
//! ```
//!
//! Events: `joined AIC`, `status AIC connected|not-connected muted|unmuted`, `lost AIC`,
//! `left AIC`, `result AIC TASK STATE[: text]`, `invitation-rejected AIC CODE MESSAGE`,
//! `invitation-expired AIC`, `broker disconnected: …` / `broker reconnected`. Each command
//! answers `ok COMMAND [id]` or `error: …`.
//!
//! **Partner** ([`partner`]): serves the `group` JSON-RPC method (any path) and, with a
//! broker URL, listens on its inbox; for each task started with a mention of it (or of
//! all), runs the agent command with the request on stdin (one line, then end of input) in
//! a work directory of its own: exit 0 submits its stdout as the product `result` (plus the
//! files written to `$AIP_OUTPUT_DIR`), any other exit fails the task. A task completed or
//! canceled while its command runs has the command killed. Group tasks have no follow-up
//! input: a `continue` is logged and ignored.

use std::collections::BTreeMap;
use std::io::{BufRead, Read, Write};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_rt::{blocking, Host, Runtime};
use aip_driver::aip_proto::group::{
    GroupCommand, LeaderConfig, LeaderEvent, MemberEvent, MgmtKind,
};
use aip_driver::aip_proto::{CommandKind, DataItem, Mentions, Product, TaskResult};
use aip_driver::group::{
    server_config, AmqpTls, GroupLeaderEvent, GroupLeaderHandle, GroupLeaderOptions,
    GroupPartnerEvent, GroupPartnerHandle, GroupPartnerOptions,
};
use futures::channel::mpsc;
use futures::{FutureExt, StreamExt};
use serde_json::json;

use awcp_transports::contain::Jail;

use crate::aip_agent::{file_products, make_task_dir, prompt_env, prompt_file, AgentCommand};

/// What `aip group` needs.
#[derive(Clone, Debug)]
pub struct LeaderCli {
    /// `amqp://user:password@host:port/vhost`, or `amqps://host:port/vhost` with a client
    /// certificate in `broker_tls` (SASL EXTERNAL; partners invited by RPC then log in with
    /// their own certificates).
    pub broker: String,
    /// TLS for an `amqps://` broker.
    pub broker_tls: AmqpTls,
    /// TLS for `group` RPC invitations to https partners (`--ca-file`, client certificate).
    pub client_tls: agent_rt::ClientTls,
    /// The group id (`[A-Za-z0-9-]{1,128}`).
    pub group: String,
    /// The leader's AIC.
    pub leader_id: String,
    /// One JSON object per line.
    pub json: bool,
    /// How long `status` waits for an answer before a member counts as lost.
    pub status_timeout: Duration,
}

struct Out {
    json: bool,
}

impl Out {
    fn line(&self, v: serde_json::Value, text: String) {
        crate::print_line(self.json, &v, &text);
    }

    fn event(&self, e: &GroupLeaderEvent) {
        let (v, t) = match e {
            GroupLeaderEvent::Group(LeaderEvent::MemberJoined { partner }) => (
                json!({"event":"joined","partner":partner}),
                format!("joined {partner}"),
            ),
            GroupLeaderEvent::Group(LeaderEvent::MemberStatus { partner, status }) => (
                json!({"event":"status","partner":partner,"connected":status.connected,"muted":status.muted}),
                format!(
                    "status {partner} {} {}",
                    if status.connected {
                        "connected"
                    } else {
                        "not-connected"
                    },
                    if status.muted { "muted" } else { "unmuted" }
                ),
            ),
            GroupLeaderEvent::Group(LeaderEvent::MemberLost { partner }) => (
                json!({"event":"lost","partner":partner}),
                format!("lost {partner}"),
            ),
            GroupLeaderEvent::Group(LeaderEvent::MemberLeft { partner }) => (
                json!({"event":"left","partner":partner}),
                format!("left {partner}"),
            ),
            GroupLeaderEvent::Group(LeaderEvent::TaskUpdate { partner, result }) => {
                let text = result_text(result);
                let mut t = format!(
                    "result {partner} {} {}",
                    result.task_id, result.status.state
                );
                if !text.is_empty() {
                    t.push_str(": ");
                    t.push_str(&text.replace('\n', " "));
                }
                (
                    json!({"event":"result","partner":partner,"taskId":result.task_id,
                           "state":result.status.state.as_str(),"text":text}),
                    t,
                )
            }
            GroupLeaderEvent::Group(LeaderEvent::InvitationRejected {
                partner,
                code,
                message,
            }) => (
                json!({"event":"invitation-rejected","partner":partner,"code":code,"message":message}),
                format!("invitation-rejected {partner} {code} {message}"),
            ),
            GroupLeaderEvent::Group(LeaderEvent::InvitationExpired { partner }) => (
                json!({"event":"invitation-expired","partner":partner}),
                format!("invitation-expired {partner}"),
            ),
            GroupLeaderEvent::Disconnected(why) => (
                json!({"event":"disconnected","reason":why}),
                format!("broker disconnected: {why}"),
            ),
            GroupLeaderEvent::Reconnected => (
                json!({"event":"reconnected"}),
                "broker reconnected".to_owned(),
            ),
        };
        self.line(v, t);
    }
}

/// The text of a result's products (or, without products, of its status).
fn result_text(r: &TaskResult) -> String {
    let items: Vec<&DataItem> = match r.products.as_deref().filter(|p| !p.is_empty()) {
        Some(ps) => ps.iter().flat_map(|p| p.data_items.iter()).collect(),
        None => r.status.data_items.iter().flatten().collect(),
    };
    items
        .into_iter()
        .filter_map(DataItem::as_text)
        .collect::<Vec<_>>()
        .join("\n")
}

fn parse_mentions(s: &str) -> Mentions {
    if s.eq_ignore_ascii_case("all") {
        Mentions::All
    } else {
        Mentions::List(
            s.split(',')
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect(),
        )
    }
}

/// Stdin lines, read on a thread of their own.
fn stdin_lines() -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.unbounded_send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Runs the leader console until `disband` or the end of stdin. Returns the exit status:
/// 0 after a disband, 1 when the broker cannot be reached or the group stopped, 2 on bad
/// arguments.
pub async fn leader<R: Host>(cli: LeaderCli) -> i32 {
    let out = Out { json: cli.json };
    let server = match server_config(&cli.broker) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: bad broker URL {:?}: {e}", cli.broker);
            return 2;
        }
    };
    let mut cfg = LeaderConfig::new(&cli.leader_id, &cli.group);
    cfg.status_timeout = cli.status_timeout;
    cfg.id_seed = crate::random_seed();
    let mut opts = GroupLeaderOptions::new(&cli.broker, cfg);
    opts.broker_tls = cli.broker_tls.clone();
    opts.client_tls = cli.client_tls.clone();
    let (l, mut events) = match GroupLeaderHandle::spawn(R::default(), opts).await {
        Ok(x) => x,
        Err(e) => {
            eprintln!("error: cannot create the group: {e}");
            return 1;
        }
    };
    out.line(
        json!({"event":"created","groupId":cli.group,"exchange":l.exchange()}),
        format!("group {} created (exchange {})", cli.group, l.exchange()),
    );
    let mut lines = stdin_lines();
    let session = format!("session-{:016x}", crate::random_seed());
    loop {
        let line = futures::select! {
            e = events.next() => match e {
                Some(e) => { out.event(&e); continue; }
                None => { eprintln!("error: the group stopped"); return 1; }
            },
            l = lines.next() => l,
        };
        let Some(line) = line else {
            // End of input: disband.
            return match l.disband().await {
                Ok(()) => {
                    out.line(json!({"ok":"disband"}), "ok disband".into());
                    0
                }
                Err(e) => {
                    eprintln!("error: disband: {e}");
                    1
                }
            };
        };
        let words: Vec<&str> = line.split_whitespace().collect();
        let Some(&verb) = words.first() else { continue };
        let arg = |i: usize| words.get(i).copied();
        let rest = |i: usize| words.get(i..).map(|w| w.join(" ")).unwrap_or_default();
        let task_cmd = |kind: CommandKind| -> Result<GroupCommand, String> {
            let (Some(task), Some(m)) = (arg(1), arg(2)) else {
                return Err(format!("usage: {verb} TASK MENTIONS [TEXT...]"));
            };
            let mut c = GroupCommand::new(kind, task, &session, parse_mentions(m));
            let text = rest(3);
            if !text.is_empty() {
                c = c.text(&text);
            }
            Ok(c)
        };
        let r: Result<String, String> = match verb {
            "invite" => match (arg(1), arg(2)) {
                (Some(p), Some(url)) => l
                    .invite_rpc(p, url, server.clone())
                    .await
                    .map(|()| p.to_owned())
                    .map_err(|e| e.to_string()),
                _ => Err("usage: invite AIC URL".into()),
            },
            "invite-inbox" => match arg(1) {
                Some(p) => l.invite_inbox(p).await.map_err(|e| e.to_string()),
                None => Err("usage: invite-inbox AIC".into()),
            },
            "start" | "continue" | "complete" | "cancel" => {
                let kind = match verb {
                    "start" => CommandKind::Start,
                    "continue" => CommandKind::Continue,
                    "complete" => CommandKind::Complete,
                    _ => CommandKind::Cancel,
                };
                match task_cmd(kind) {
                    Ok(c) => l.send(c).await.map_err(|e| e.to_string()),
                    Err(e) => Err(e),
                }
            }
            "status" => l
                .get_status(arg(1).map(parse_mentions).unwrap_or(Mentions::All))
                .await
                .map_err(|e| e.to_string()),
            "mute" | "unmute" | "remove" => match arg(1) {
                Some(p) => {
                    let kind = match verb {
                        "mute" => MgmtKind::Mute,
                        "unmute" => MgmtKind::Unmute,
                        _ => MgmtKind::LeaveGroup,
                    };
                    l.mgmt(kind, Mentions::List(vec![p.to_owned()]))
                        .await
                        .map_err(|e| e.to_string())
                }
                None => Err(format!("usage: {verb} AIC")),
            },
            "members" => match l.members().await {
                Ok(ms) => {
                    for (aic, m) in ms {
                        out.line(
                            json!({"event":"member","partner":aic,
                                   "connection":format!("{:?}", m.connection),"muted":m.muted}),
                            format!(
                                "member {aic} {:?} {}",
                                m.connection,
                                if m.muted { "muted" } else { "unmuted" }
                            ),
                        );
                    }
                    Ok(String::new())
                }
                Err(e) => Err(e.to_string()),
            },
            "disband" => {
                return match l.disband().await {
                    Ok(()) => {
                        out.line(json!({"ok":"disband"}), "ok disband".into());
                        0
                    }
                    Err(e) => {
                        eprintln!("error: disband: {e}");
                        1
                    }
                }
            }
            other => Err(format!("unknown command {other:?}")),
        };
        match r {
            Ok(id) => out.line(
                json!({"ok": verb, "id": id}),
                format!("ok {verb} {id}").trim_end().to_owned(),
            ),
            Err(e) => out.line(json!({"error": e, "command": verb}), format!("error: {e}")),
        }
    }
}

/// What `aip-partner --group` needs.
pub struct PartnerCli {
    /// This partner's AIC.
    pub id: String,
    /// Where the `group` JSON-RPC method is served.
    pub listener: std::net::TcpListener,
    /// How it is served (TLS, mTLS, limits).
    pub server: agent_rt::ServerOptions,
    /// TLS for `amqps://` brokers and the client certificate for SASL EXTERNAL.
    pub broker_tls: AmqpTls,
    /// The broker whose inbox to listen on (`None`: RPC invitations only).
    pub inbox_broker: Option<String>,
    /// Which requests to the `group` endpoint are refused as a web page's.
    pub guard: aip_driver::aip_proto::http::RequestGuard,
    /// The agent command.
    pub cmd: Arc<AgentCommand>,
}

/// The jail of each running command, by (group, task): ending one kills every process its
/// task started.
type Running = Arc<Mutex<BTreeMap<(String, String), Arc<Mutex<Jail>>>>>;

/// Ends a task's jail (every process it started).
fn end_jail(jail: &Mutex<Jail>) {
    jail.lock().unwrap_or_else(|p| p.into_inner()).end();
}

/// Runs the group partner until SIGINT/SIGTERM; every command still running is killed.
pub async fn partner<R: Host>(cli: PartnerCli) -> i32 {
    let rt = R::default();
    let mut opts = GroupPartnerOptions::new(&cli.id);
    opts.broker_tls = cli.broker_tls.clone();
    opts.guard = cli.guard.clone();
    let (p, mut events) = GroupPartnerHandle::new(rt.clone(), opts);
    let scheme = cli.server.scheme();
    let local = match cli.listener.local_addr() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            return 1;
        }
    };
    let (stop_tx, stop_rx) = futures::channel::oneshot::channel::<()>();
    let serve = agent_rt::serve(
        rt.clone(),
        cli.listener,
        p.join_handler(),
        cli.server,
        async move {
            let _ = stop_rx.await;
        },
    );
    rt.spawn(Box::pin(async move {
        if let Err(e) = serve.await {
            eprintln!("error: server failed: {e}");
        }
    }));
    println!("aip-partner group rpc on {scheme}://{local}/group/rpc");
    if let Some(url) = &cli.inbox_broker {
        if let Err(e) = p.listen_inbox(url).await {
            eprintln!("error: cannot listen on the inbox: {e}");
            return 1;
        }
        println!("aip-partner inbox inbox_{} ready", cli.id);
    }
    let _ = std::io::stdout().flush();
    let running: Running = Arc::default();
    // Every input of each task so far (the start's text, then each continue's).
    let mut inputs: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    let mut shutdown = R::shutdown_signal().fuse();
    loop {
        let e = futures::select! {
            e = events.next() => e,
            _ = shutdown => None,
        };
        let Some(e) = e else { break };
        match e {
            GroupPartnerEvent::Joined { group_id, leader } => {
                println!("joined {group_id} (leader {leader})");
            }
            GroupPartnerEvent::Left { group_id, reason } => {
                println!("left {group_id} ({reason:?})");
            }
            GroupPartnerEvent::InvitationRefused { group_id, reason } => {
                println!("refused {group_id}: {reason}");
            }
            GroupPartnerEvent::Group { group_id, event } => match *event {
                MemberEvent::TaskStarted {
                    task_id, command, ..
                } => {
                    println!("task {group_id} {task_id} started");
                    let prompt = text_of(&command);
                    let key = (group_id.clone(), task_id.clone());
                    inputs.insert(key, vec![prompt.clone()]);
                    rt.spawn(Box::pin(run_task(
                        rt.clone(),
                        p.clone(),
                        cli.cmd.clone(),
                        running.clone(),
                        group_id,
                        task_id,
                        vec![prompt],
                        false,
                    )));
                }
                MemberEvent::Continued { task_id, command } => {
                    // As in direct mode: the agent runs again with every input so far.
                    println!("task {group_id} {task_id} continued");
                    let key = (group_id.clone(), task_id.clone());
                    let all = inputs.entry(key).or_default();
                    all.push(text_of(&command));
                    rt.spawn(Box::pin(run_task(
                        rt.clone(),
                        p.clone(),
                        cli.cmd.clone(),
                        running.clone(),
                        group_id,
                        task_id,
                        all.clone(),
                        true,
                    )));
                }
                MemberEvent::Completed { task_id } | MemberEvent::Canceled { task_id } => {
                    println!("task {group_id} {task_id} ended");
                    inputs.remove(&(group_id.clone(), task_id.clone()));
                    if let Some(jail) = running
                        .lock()
                        .ok()
                        .and_then(|mut r| r.remove(&(group_id, task_id)))
                    {
                        end_jail(&jail);
                    }
                }
                MemberEvent::Muted(m) => {
                    println!("{} in {group_id}", if m { "muted" } else { "unmuted" })
                }
            },
            _ => {}
        }
        let _ = std::io::stdout().flush();
    }
    let jails: Vec<_> = running
        .lock()
        .map(|mut r| std::mem::take(&mut *r))
        .unwrap_or_default()
        .into_values()
        .collect();
    for jail in jails {
        end_jail(&jail);
    }
    let _ = stop_tx.send(());
    0
}

/// The text of a task command's items, one per line.
fn text_of(command: &aip_driver::aip_proto::TaskCommand) -> String {
    let parts: Vec<&str> = command
        .items()
        .iter()
        .filter_map(DataItem::as_text)
        .collect();
    parts.join("\n")
}

/// Runs the agent for a task with `inputs` (the start's text first), one per line on stdin,
/// and submits what it made. A first run accepts the task first; a run after a `continue`
/// (`continued`) finds it working already.
#[allow(clippy::too_many_arguments)]
async fn run_task<R: Runtime>(
    rt: R,
    p: GroupPartnerHandle<R>,
    cmd: Arc<AgentCommand>,
    running: Running,
    group: String,
    task: String,
    inputs: Vec<String>,
    continued: bool,
) {
    let prompt = inputs.first().cloned().unwrap_or_default();
    if !continued {
        if let Err(e) = p.accept(&group, &task).await {
            tracing::warn!(%task, "accept: {e}");
            return;
        }
        let _ = p.start_working(&group, &task).await;
    }
    let dir = match make_task_dir(&cmd.work_root, &format!("{group}/{task}")) {
        Ok(dir) => dir,
        Err(e) => {
            let _ = p
                .fail(
                    &group,
                    &task,
                    &format!("cannot create the work directory: {e}"),
                )
                .await;
            return;
        }
    };
    let out_dir = dir.join("out");
    let key = (group.clone(), task.clone());
    let (c2, d2, od2, r2, k2) = (
        cmd.clone(),
        dir.clone(),
        out_dir.clone(),
        running.clone(),
        key.clone(),
    );
    let (g2, t2) = (group.clone(), task.clone());
    let outcome = blocking(&rt, move || -> Result<(String, bool, String), String> {
        let mut command = Command::new(&c2.argv[0]);
        command
            .args(&c2.argv[1..])
            .current_dir(&d2)
            .env_clear()
            .envs(awcp_transports::agent_environment(
                &c2.env_pass,
                &c2.env_set,
            ))
            .env("AIP_GROUP_ID", &g2)
            .env("AIP_TASK_ID", &t2)
            .env("AIP_OUTPUT_DIR", &od2)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let prompt_path =
            prompt_file(&d2, &prompt).map_err(|e| format!("cannot write the prompt file: {e}"))?;
        prompt_env(&mut command, &prompt, &prompt_path);
        // Everything the agent starts stays in the task's jail and ends with it.
        let mut jail = Jail::new(format!("AIP_TASK_ID={t2}"));
        let cannot_run = |e: std::io::Error| format!("cannot run {}: {e}", c2.argv[0]);
        let mut child = jail.spawn(&mut command).map_err(cannot_run)?;
        let jail = Arc::new(Mutex::new(jail));
        if let Ok(mut r) = r2.lock() {
            r.insert(k2.clone(), jail.clone());
        }
        if let Some(mut stdin) = child.stdin.take() {
            // On a thread: a request larger than the pipe must not block reading the output.
            let lines: Vec<String> = inputs.iter().map(|i| i.replace('\n', " ")).collect();
            std::thread::spawn(move || {
                for line in lines {
                    if writeln!(stdin, "{line}").is_err() {
                        break;
                    }
                }
            });
        }
        let stderr = child.stderr.take();
        let err_thread = std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut e) = stderr {
                let _ = e.read_to_end(&mut buf);
            }
            buf
        });
        let stdout = child.stdout.take();
        let out_thread = std::thread::spawn(move || {
            let mut text = String::new();
            if let Some(mut o) = stdout {
                let _ = o.read_to_string(&mut text);
            }
            text
        });
        let status = child
            .wait()
            .map_err(|e| format!("waiting for the agent: {e}"))?;
        // Whatever the agent left behind goes with it (and with it, any hold on its output).
        end_jail(&jail);
        let stdout = out_thread.join().unwrap_or_default();
        let killed = r2
            .lock()
            .map(|mut r| r.remove(&k2).is_none())
            .unwrap_or(false);
        let err = err_thread
            .join()
            .map(|b| {
                let start = b.len().saturating_sub(2000);
                String::from_utf8_lossy(&b[start..]).trim().to_owned()
            })
            .unwrap_or_default();
        if killed {
            return Err(String::new());
        }
        Ok((
            stdout,
            status.success(),
            format!("the agent exited with {status}: {err}"),
        ))
    })
    .await;
    match outcome {
        Ok((stdout, true, _)) => {
            let mut products = vec![Product::text("result", stdout.trim_end())];
            let max = cmd.max_file_bytes;
            products.extend(blocking(&rt, move || file_products(&out_dir, max)).await);
            if let Err(e) = p.submit(&group, &task, products).await {
                tracing::warn!(%task, "submit: {e}");
            }
        }
        Ok((_, false, why)) => {
            let _ = p.fail(&group, &task, &why).await;
        }
        Err(why) if why.is_empty() => {} // ended while running
        Err(why) => {
            let _ = p.fail(&group, &task, &why).await;
        }
    }
    let _ = blocking(&rt, move || std::fs::remove_dir_all(&dir)).await;
}
