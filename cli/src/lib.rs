//! Shared helpers for the example binaries: logging, JSON config files, progress display.

pub mod agent_check;
pub mod aip_agent;
pub mod aip_group;
pub mod diff_view;
pub mod retry;
mod term;

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;

use awcp_driver::delegator::daemon::api::LiveEvent;
use awcp_proto::engine::delegator::{DelegationView, SnapshotStatus};
use awcp_proto::{DelegationId, DelegatorEvent};

/// Exit codes of the `awcp` CLI (README "Exit codes"). Scripts can tell apart a task that
/// failed from a result that was not applied from a peer that could not be reached.
pub mod exit {

    /// The delegation completed; its result was applied (or staged on purpose, or there was
    /// nothing to apply). Also: any other command succeeded.
    pub const OK: i32 = 0;
    /// Anything else went wrong (an I/O error, a daemon that answered with an error).
    pub const OTHER: i32 = 1;
    /// Usage error: bad flags or arguments, a workspace that does not exist or is not a
    /// directory, a call the delegation's state does not allow.
    pub const USAGE: i32 = 2;
    /// The delegation failed: declined, refused at admission, task failed, expired or
    /// cancelled.
    pub const FAILED: i32 = 3;
    /// The task completed but its result was NOT applied (kept staged with the reason, or it
    /// could not be stored); nothing of it was written.
    pub const NOT_APPLIED: i32 = 4;
    /// The executor (or the daemon) could not be reached.
    pub const UNREACHABLE: i32 = 5;

    /// The exit code for an AWCP error code ending a delegation or refusing a request.
    pub fn for_code(code: &str) -> i32 {
        match code {
            "WORKSPACE_NOT_FOUND" | "WORKSPACE_INVALID" => USAGE,
            "TIMEOUT" | "UNREACHABLE" | "SSE_FAILED" => UNREACHABLE,
            _ => FAILED,
        }
    }

    /// The exit code for a delegation record (its `outcome`, see the daemon's record).
    pub fn for_record(v: &awcp_driver::delegator::daemon::api::Record) -> i32 {
        if v.state == "idle" {
            // A round of a multi-round delegation ended: was its result applied?
            let failed = v
                .snapshots
                .iter()
                .any(|s| s.status == "failed" || (s.status == "pending" && s.error.is_some()));
            return if failed { NOT_APPLIED } else { OK };
        }
        match v.outcome.status.as_str() {
            "completed" | "staged" => OK,
            "not_applied" => NOT_APPLIED,
            "unreachable" => UNREACHABLE,
            "failed" => v
                .error
                .as_ref()
                .map_or(FAILED, |e| for_code(e.code.as_str())),
            _ => OTHER,
        }
    }

    /// The exit code for a failed daemon call.
    pub fn for_daemon_error(e: &awcp_driver::delegator::daemon::DaemonError) -> i32 {
        match (e.status, e.code.as_deref()) {
            (0, _) => UNREACHABLE,
            (_, Some(code)) => for_code(code),
            (400 | 404 | 405 | 409, None) => USAGE,
            _ => OTHER,
        }
    }
}

/// The async runtime a binary runs on (`--runtime`, `AWCP_RUNTIME`). Both run the same
/// engine; see `awcp_driver::Driver`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum RuntimeChoice {
    /// tokio (axum servers).
    #[default]
    Tokio,
    /// smol (hyper servers on smol's I/O); async-std programs share its reactor.
    Smol,
}

/// Runs `$run::<R>($args)` on the chosen runtime's `Driver::block_on`, where `$run` is an
/// `async fn` generic over `R: awcp_driver::Driver`.
#[macro_export]
macro_rules! run_on {
    ($choice:expr, $run:ident($($arg:expr),* $(,)?)) => {
        match $choice {
            $crate::RuntimeChoice::Tokio => <awcp_tokio::TokioRuntime as awcp_driver::Driver>::block_on(
                $run::<awcp_tokio::TokioRuntime>($($arg),*),
            ),
            $crate::RuntimeChoice::Smol => <awcp_smol::SmolRuntime as awcp_driver::Driver>::block_on(
                $run::<awcp_smol::SmolRuntime>($($arg),*),
            ),
        }
    };
}

/// Logs to stderr through `tracing`, filtered by `RUST_LOG` (default `info`, or `warn` if
/// `quiet`).
pub fn init_logging(quiet: bool, format: LogFormat) {
    init_logging_with(if quiet { "warn" } else { "info" }, format);
}

/// The default log filter of a command that prints its own outcome (`awcp delegate`,
/// `status`, …): what the engine and driver log about a delegation (its end, its error, a
/// snapshot left pending) is in the record the command prints, so only their errors are
/// logged, and warnings of the rest; `RUST_LOG` shows more.
pub const CLIENT_LOG_FILTER: &str = "warn,awcp_proto=error,awcp_driver=error";

/// Logs to stderr through `tracing`, filtered by `RUST_LOG`, else by `default` (an
/// `EnvFilter` directive such as `info` or [`CLIENT_LOG_FILTER`]).
pub fn init_logging_with(default: &str, format: LogFormat) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(term::LogWriter::default)
        .with_target(false);
    let _ = match format {
        // Colour only for a person at a terminal; never escape codes in a file or a pipe.
        LogFormat::Text => b
            .with_ansi(colour(std::io::stderr().is_terminal()))
            .try_init(),
        // One JSON object per line, span fields (e.g. the delegation id) included.
        LogFormat::Json => b.json().with_current_span(true).try_init(),
    };
}

/// How log lines on stderr are written (`--log-format`, `AWCP_LOG_FORMAT`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines (coloured only when stderr is a terminal).
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

/// Whether output to a terminal (`tty`) may be coloured: never when `NO_COLOR` is set to a
/// non-empty value (<https://no-color.org>), nor into a file or a pipe.
pub fn colour(tty: bool) -> bool {
    tty && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// `cmd` and its subcommands with every environment variable that starts with `from` renamed
/// to start with `to` instead: the argument groups shared by all binaries (TLS, server limits)
/// name `AWCP_…` variables, and the AIP binaries read them as `AIP_…`, so that each binary
/// has one naming scheme and an exported `AWCP_…` value never configures an AIP binary.
pub fn with_env_prefix(cmd: clap::Command, from: &str, to: &str) -> clap::Command {
    rename_env_where(cmd, from, to, &|_| true)
}

/// `cmd` and its subcommands with the environment variables in `names` renamed from the
/// prefix `from` to `to` (arguments with other variables keep theirs).
pub fn rename_env(cmd: clap::Command, names: &[&str], from: &str, to: &str) -> clap::Command {
    rename_env_where(cmd, from, to, &|env| names.contains(&env))
}

/// The renaming of [`with_env_prefix`] and [`rename_env`], for the variables `pick` accepts.
fn rename_env_where(
    cmd: clap::Command,
    from: &str,
    to: &str,
    pick: &dyn Fn(&str) -> bool,
) -> clap::Command {
    let renames: Vec<(clap::Id, &'static str)> = cmd
        .get_arguments()
        .filter_map(|a| {
            let env = a.get_env()?.to_str()?;
            let rest = env.strip_prefix(from).filter(|_| pick(env))?;
            // Leaked once per argument at start-up: clap keeps `&'static` names.
            let renamed: &'static str = Box::leak(format!("{to}{rest}").into_boxed_str());
            Some((a.get_id().clone(), renamed))
        })
        .collect();
    each_subcommand(set_envs(cmd, renames), |c, _| {
        rename_env_where(c, from, to, pick)
    })
}

/// `cmd` with the environment variable of each argument in `envs` set.
fn set_envs(cmd: clap::Command, envs: Vec<(clap::Id, &'static str)>) -> clap::Command {
    envs.into_iter()
        .fold(cmd, |cmd, (id, env)| cmd.mut_arg(id, |a| a.env(env)))
}

/// `cmd` with `f` applied to each of its subcommands (given with its name).
fn each_subcommand(
    cmd: clap::Command,
    mut f: impl FnMut(clap::Command, &str) -> clap::Command,
) -> clap::Command {
    let subs: Vec<String> = cmd
        .get_subcommands()
        .map(|c| c.get_name().to_owned())
        .collect();
    subs.into_iter()
        .fold(cmd, |cmd, name| cmd.mut_subcommand(&name, |c| f(c, &name)))
}

/// `cmd` with a `--completions SHELL` flag, if it has none (the same on every binary).
pub fn with_completions_flag(cmd: clap::Command) -> clap::Command {
    if cmd
        .get_arguments()
        .any(|a| a.get_long() == Some("completions"))
    {
        return cmd;
    }
    cmd.arg(
        clap::Arg::new("completions")
            .long("completions")
            .value_name("SHELL")
            .value_parser(clap::value_parser!(clap_complete::Shell))
            .help("Print shell completions for this command (bash, zsh, fish, elvish, powershell) and exit"),
    )
}

/// With `--completions SHELL` first on the command line (`argv[1]`), prints `cmd`'s
/// completions for that shell and exits: before anything else is parsed, so that a command
/// with a required subcommand or argument gives them too.
pub fn completions_if_asked(cmd: &mut clap::Command, argv: Vec<String>) {
    let shell = match argv.get(1).map(String::as_str) {
        Some("--completions") => argv.get(2).cloned(),
        Some(a) => a.strip_prefix("--completions=").map(str::to_owned),
        None => None,
    };
    let Some(shell) = shell else { return };
    let Ok(shell) = <clap_complete::Shell as std::str::FromStr>::from_str(&shell) else {
        eprintln!(
            "error: --completions: unknown shell {shell:?} (bash, zsh, fish, elvish, powershell)"
        );
        std::process::exit(2);
    };
    let name = cmd.get_name().to_owned();
    clap_complete::generate(shell, cmd, name, &mut std::io::stdout());
    std::process::exit(0);
}

/// `cmd` with a variable for every long flag that has none: `prefix` and the flag's name in
/// upper case (`--max-bytes` of the `diff` subcommand: `AWCP_DIFF_MAX_BYTES`; a top-level flag
/// without the subcommand's name). A name another flag of the command already reads is left
/// out rather than shared; `--config`, `--completions`, `--help` and `--version` get none.
pub fn with_default_env(cmd: clap::Command, prefix: &str) -> clap::Command {
    fn taken(cmd: &clap::Command, out: &mut std::collections::BTreeSet<String>) {
        for a in cmd.get_arguments() {
            if let Some(e) = a.get_env().and_then(|e| e.to_str()) {
                out.insert(e.to_owned());
            }
        }
        for c in cmd.get_subcommands() {
            taken(c, out);
        }
    }
    fn walk(
        cmd: clap::Command,
        prefix: &str,
        taken: &mut std::collections::BTreeSet<String>,
    ) -> clap::Command {
        let mut named: Vec<(clap::Id, &'static str)> = Vec::new();
        for a in cmd.get_arguments() {
            let Some(long) = a.get_long() else { continue };
            if a.get_env().is_some() || ["config", "completions", "help", "version"].contains(&long)
            {
                continue;
            }
            let name = format!("{prefix}{}", long.replace('-', "_").to_uppercase());
            if taken.insert(name.clone()) {
                named.push((a.get_id().clone(), Box::leak(name.into_boxed_str())));
            }
        }
        each_subcommand(set_envs(cmd, named), |c, name| {
            let sub_prefix = format!("{prefix}{}_", name.replace('-', "_").to_uppercase());
            walk(c, &sub_prefix, taken)
        })
    }
    let mut names = std::collections::BTreeSet::new();
    taken(&cmd, &mut names);
    walk(cmd, prefix, &mut names)
}

/// The variables of the server flags ([`ServerArgs`]) and `--public-url`: `awcp-executor`
/// reads them as `AWCP_…`, and `awcp` (its `delegate` archive server and its daemon) as
/// `AWCP_DELEGATOR_…`, so that a value exported for one never configures the other.
pub const SERVER_ENV: &[&str] = &[
    "AWCP_TLS_CERT",
    "AWCP_TLS_KEY",
    "AWCP_CLIENT_CA",
    "AWCP_HEADER_READ_TIMEOUT",
    "AWCP_IDLE_TIMEOUT",
    "AWCP_BODY_READ_TIMEOUT",
    "AWCP_MAX_CONNECTIONS",
    "AWCP_PUBLIC_URL",
];

/// Parses the process's arguments as `C` with [`with_env_prefix`] applied (`AWCP_` → `to`),
/// a variable for every other flag ([`with_default_env`], prefix `own`), and the JSON file of
/// `--config` merged in ([`args_with_config_for`]).
pub fn parse_with_env_prefix<C: clap::Parser>(to: &str, own: &str) -> C {
    let cmd = with_default_env(with_env_prefix(C::command(), "AWCP_", to), own);
    parse_command(cmd)
}

/// Parses the process's arguments (with `--config` merged in) as `C` by `cmd`, a form of
/// `C::command()` with variables renamed or added.
pub fn parse_command<C: clap::FromArgMatches>(cmd: clap::Command) -> C {
    let mut cmd = with_completions_flag(cmd);
    completions_if_asked(&mut cmd, std::env::args().collect());
    let argv = args_with_config_for(&cmd, "--config");
    let mut matches = cmd.get_matches_from(argv);
    C::from_arg_matches_mut(&mut matches).unwrap_or_else(|e| e.exit())
}

/// The process's arguments with the JSON config file named by `config_flag` (`--config FILE`
/// or `--config=FILE`) merged in, for `C`'s parser: precedence is flags, then environment,
/// then the file. Exits with status 2 and a message naming the file and the key when the
/// file is unreadable, not a JSON object, or has a key that is not a flag of the command.
pub fn args_with_config<C: clap::CommandFactory>(config_flag: &str) -> Vec<String> {
    args_with_config_for(&C::command(), config_flag)
}

/// [`args_with_config`] for a command built at run time (e.g. with renamed variables).
pub fn args_with_config_for(cmd: &clap::Command, config_flag: &str) -> Vec<String> {
    let args: Vec<String> = std::env::args().collect();
    match merge_config(
        cmd,
        args,
        config_flag,
        |name| std::env::var_os(name).is_some(),
        |path| std::fs::read_to_string(path).map_err(|e| e.to_string()),
    ) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    }
}

/// [`args_with_config`] without the process: `env_set` says whether an environment variable
/// is set, `read` reads the file.
pub fn merge_config(
    cmd: &clap::Command,
    args: Vec<String>,
    config_flag: &str,
    env_set: impl Fn(&str) -> bool,
    read: impl Fn(&str) -> Result<String, String>,
) -> Result<Vec<String>, String> {
    // Where the file is named, and the arguments without it.
    let mut path = None;
    let mut rest = Vec::new();
    let mut it = args.into_iter();
    let argv0 = it.next().unwrap_or_default();
    while let Some(a) = it.next() {
        if a == config_flag {
            path = Some(
                it.next()
                    .ok_or_else(|| format!("{config_flag} needs a file"))?,
            );
        } else if let Some(p) = a.strip_prefix(&format!("{config_flag}=")) {
            path = Some(p.to_owned());
        } else {
            rest.push(a);
        }
    }
    let Some(path) = path else {
        return Ok(std::iter::once(argv0).chain(rest).collect());
    };
    let text = read(&path).map_err(|e| format!("cannot read config file {path}: {e}"))?;
    let v: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("config file {path} is not valid JSON: {e}"))?;
    let obj = v
        .as_object()
        .ok_or_else(|| format!("config file {path} must be a JSON object of flag names"))?;
    // The subcommand, if any, stays first; the file's flags go right after it.
    let sub_at = rest
        .iter()
        .position(|a| !a.starts_with('-'))
        .filter(|&i| cmd.find_subcommand(&rest[i]).is_some());
    let sub = sub_at.and_then(|i| cmd.find_subcommand(&rest[i]));
    let mut from_file = Vec::new();
    for (key, val) in obj {
        let long = key.replace('_', "-");
        let arg = sub
            .into_iter()
            .flat_map(|s| s.get_arguments())
            .chain(cmd.get_arguments())
            .find(|a| a.get_long() == Some(long.as_str()))
            .ok_or_else(|| {
                format!("config file {path}: unknown key {key:?} (keys are the command's long flag names)")
            })?;
        let flag = format!("--{long}");
        let on_command_line = rest
            .iter()
            .any(|a| *a == flag || a.starts_with(&format!("{flag}=")));
        let in_environment = arg.get_env().and_then(|e| e.to_str()).is_some_and(&env_set);
        if on_command_line || in_environment {
            continue;
        }
        match val {
            serde_json::Value::Bool(true) => from_file.push(flag),
            serde_json::Value::Bool(false) | serde_json::Value::Null => {}
            serde_json::Value::String(s) => from_file.extend([flag, s.clone()]),
            serde_json::Value::Array(items) => {
                for item in items {
                    let item = item
                        .as_str()
                        .map_or_else(|| item.to_string(), str::to_owned);
                    from_file.extend([flag.clone(), item]);
                }
            }
            other => from_file.extend([flag, other.to_string()]),
        }
    }
    let split = sub_at.map_or(0, |i| i + 1);
    let mut out = vec![argv0];
    out.extend(rest[..split].iter().cloned());
    out.extend(from_file);
    out.extend(rest[split..].iter().cloned());
    Ok(out)
}

#[cfg(test)]
mod config_tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Parser, Debug)]
    struct Cli {
        #[arg(long, env = "T_PEER")]
        peer: Option<String>,
        #[arg(long)]
        quiet: bool,
        #[arg(long)]
        config: Option<String>,
    }

    fn merged(args: &[&str], file: &str, env: &[&str]) -> Result<Cli, String> {
        let args = args.iter().map(|a| (*a).to_owned()).collect();
        let file = file.to_owned();
        let a = merge_config(
            &Cli::command(),
            args,
            "--config",
            |n| env.contains(&n),
            move |_| Ok(file.clone()),
        )?;
        Cli::try_parse_from(a).map_err(|e| e.to_string())
    }

    #[test]
    fn flags_beat_the_environment_which_beats_the_file() {
        let file = r#"{"peer": "http://file", "quiet": true}"#;
        let c = merged(&["x", "--config", "f.json"], file, &[]).unwrap();
        assert_eq!(c.peer.as_deref(), Some("http://file"));
        assert!(c.quiet);
        // The environment wins over the file: the file's value is not passed at all.
        let a = merge_config(
            &Cli::command(),
            vec!["x".into(), "--config=f.json".into()],
            "--config",
            |n| n == "T_PEER",
            |_| Ok(file.to_owned()),
        )
        .unwrap();
        assert!(!a.contains(&"http://file".to_owned()), "{a:?}");
        let c = merged(
            &["x", "--config=f.json", "--peer", "http://flag"],
            file,
            &["T_PEER"],
        )
        .unwrap();
        assert_eq!(c.peer.as_deref(), Some("http://flag"));
    }

    #[test]
    fn an_unknown_key_names_the_file_and_the_key() {
        let e = merged(&["x", "--config", "conf.json"], r#"{"peers": "x"}"#, &[]).unwrap_err();
        assert!(e.contains("conf.json") && e.contains("\"peers\""), "{e}");
        let e = merged(&["x", "--config", "c.json"], "[1]", &[]).unwrap_err();
        assert!(e.contains("JSON object"), "{e}");
    }
}

/// Prints live progress of one delegation on stderr (a single updating line on a terminal,
/// whose clock keeps running while the executor is silent).
pub struct Progress {
    id: DelegationId,
    started: Instant,
    tty: bool,
    json: bool,
    /// The line last shown (without its clock), redrawn each second by the clock thread.
    last: std::sync::Arc<std::sync::Mutex<Option<String>>>,
    /// Tells the clock thread to stop.
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Progress {
    /// Progress for `id`; `json` prints nothing (scripts read stdout).
    pub fn new(id: DelegationId, json: bool) -> Self {
        let p = Progress {
            id,
            started: Instant::now(),
            tty: std::io::stderr().is_terminal(),
            json,
            last: Default::default(),
            stop: Default::default(),
        };
        if p.tty && !json {
            // The clock: redraws the line with the time elapsed, once a second, until finish.
            let (last, stop, started) = (p.last.clone(), p.stop.clone(), p.started);
            std::thread::spawn(move || loop {
                std::thread::sleep(std::time::Duration::from_secs(1));
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                // Drawn under the lock, so nothing is drawn once `finish` has cleared it.
                let line = last.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(line) = line.as_ref() {
                    let elapsed = started.elapsed().as_secs_f32();
                    term::draw_progress(&format!("[{elapsed:6.1}s] {line}"));
                }
            });
        }
        p
    }

    /// Shows one engine event if it is about this delegation (in-process).
    pub fn show(&self, ev: &DelegatorEvent) {
        if let Some((id, v)) = LiveEvent::of(ev) {
            if *id == self.id {
                self.show_event(&v);
            }
        }
    }

    /// Shows a transfer size (in-process).
    pub fn transfer(&self, t: &awcp_driver::delegator::Transfer) {
        if t.id == self.id {
            self.show_event(&LiveEvent::transfer(t));
        }
    }

    /// Shows one live event as the daemon streams it (`GET /delegation/{id}/events`); the
    /// in-process path goes through the same type, so both show the same lines.
    pub fn show_event(&self, v: &LiveEvent) {
        if self.json {
            return;
        }
        let Some(line) = progress_line(v) else {
            return;
        };
        let elapsed = self.started.elapsed().as_secs_f32();
        if self.tty {
            let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
            term::draw_progress(&format!("[{elapsed:6.1}s] {line}"));
            *last = Some(line);
        } else {
            eprintln!("[{elapsed:6.1}s] {line}");
        }
    }

    /// Ends the progress line (and its clock).
    pub fn finish(&self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = None;
        if self.tty && !self.json {
            term::end_progress();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The progress line of one live event (`None`: nothing to show, e.g. the end, which the
/// final record reports).
pub fn progress_line(v: &LiveEvent) -> Option<String> {
    Some(match v {
        LiveEvent::State { state } => format!("state: {state}"),
        LiveEvent::Progress { message, .. } => {
            format!("executor: {}", message.as_deref().unwrap_or("working"))
        }
        LiveEvent::Snapshot {
            snapshot_id,
            status,
        } => format!("snapshot {snapshot_id}: {status}"),
        LiveEvent::Transfer { what, bytes } => format!("{what}: {}", human_bytes(*bytes)),
        LiveEvent::ConnectionLost {
            reason,
            retry_in_ms,
        } => format!(
            "connection to the executor lost{}; reconnecting in {:.0} s…",
            reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default(),
            *retry_in_ms as f64 / 1000.0
        ),
        LiveEvent::PeerMisbehaved { reason } => {
            format!("the executor broke the protocol: {reason}")
        }
        LiveEvent::Ended { .. } | LiveEvent::Unknown => return None,
    })
}

/// Shows `id`'s live progress from the daemon until `done` resolves (the caller's wait for
/// the final record), then returns its output. Progress stops quietly if the stream cannot be
/// opened or drops: the wait decides the outcome.
pub async fn follow_daemon<R: awcp_driver::Runtime, T>(
    client: &awcp_driver::delegator::daemon::DaemonClient<R>,
    id: &str,
    json: bool,
    done: impl std::future::Future<Output = T>,
) -> T {
    use futures::{FutureExt, StreamExt};
    let progress = DelegationId::new(id)
        .ok()
        .map(|did| Progress::new(did, json));
    let mut done = std::pin::pin!(done.fuse());
    let mut events = match (&progress, client.events(id).await) {
        (Some(_), Ok(s)) => s.fuse(),
        _ => futures::stream::empty().boxed().fuse(),
    };
    let out = loop {
        futures::select! {
            out = done => break out,
            v = events.next() => if let (Some(v), Some(p)) = (v, &progress) { p.show_event(&v) },
        }
    };
    if let Some(p) = &progress {
        p.finish();
    }
    out
}

/// Follows one delegation to its end with a [`Progress`] display. Subscribe before delegating
/// so no early event is missed.
pub struct Follow {
    events: futures::channel::mpsc::UnboundedReceiver<DelegatorEvent>,
    transfers: futures::channel::mpsc::UnboundedReceiver<awcp_driver::delegator::Transfer>,
}

impl Follow {
    /// Subscribes to `d`'s events and transfers.
    pub fn subscribe(d: &awcp_driver::DelegatorHandle) -> Self {
        Follow {
            events: d.events(),
            transfers: d.transfers(),
        }
    }

    /// Shows progress until delegation `id` ends and returns its final view (`None` if the
    /// delegator stopped). When `interrupt` resolves, the delegation is cancelled (once) and
    /// followed to its end.
    pub async fn until_end(
        mut self,
        d: &awcp_driver::DelegatorHandle,
        id: &DelegationId,
        json: bool,
        interrupt: impl std::future::Future<Output = ()>,
    ) -> Option<DelegationView> {
        use futures::{FutureExt, StreamExt};
        let progress = Progress::new(id.clone(), json);
        let mut waiter = std::pin::pin!(d.wait(id).fuse());
        let mut interrupt = std::pin::pin!(interrupt.fuse());
        let view = loop {
            futures::select! {
                v = waiter => break v,
                ev = self.events.next() => if let Some(ev) = ev { progress.show(&ev) },
                t = self.transfers.next() => if let Some(t) = t { progress.transfer(&t) },
                _ = interrupt => {
                    if !json {
                        eprintln!("\ninterrupted: cancelling {id}");
                    }
                    let _ = d.cancel(id).await;
                }
            }
        };
        progress.finish();
        view.ok()
    }
}

/// A human summary of a finished delegation.
pub fn describe(v: &DelegationView) -> String {
    let mut s = format!("delegation {} {}\n", v.request.id, v.state);
    if let Some(r) = &v.result {
        s.push_str(&format!("summary: {}\n", r.summary));
        if !r.highlights.is_empty() {
            s.push_str(&format!("highlights: {}\n", r.highlights.join(", ")));
        }
    }
    if let Some(e) = &v.error {
        s.push_str(&format!("error: {} {}\n", e.code, e.message));
        if let Some(h) = &e.hint {
            s.push_str(&format!("hint: {h}\n"));
        }
    }
    for w in &v.warnings {
        s.push_str(&format!("warning: {w}\n"));
    }
    for snap in &v.snapshots {
        let extra = match (&snap.status, &snap.error) {
            (SnapshotStatus::Failed(e), _) => format!(" (not stored: {e})"),
            (_, Some(e)) => format!(" (not applied: {e})"),
            _ => String::new(),
        };
        s.push_str(&format!(
            "snapshot {}: {}{extra}\n",
            snap.id,
            snap.status.as_str()
        ));
        s.push_str(&changed_lines(&snap.changed));
        s.push_str(&left_out_lines(&snap.left_out));
    }
    let not_shipped: Vec<(String, String)> = v
        .not_shipped
        .iter()
        .map(|n| (n.path.clone(), n.reason.as_str().to_owned()))
        .collect();
    s.push_str(&not_shipped_lines(&not_shipped, v.not_shipped_count));
    s
}

/// How many changed files the terminal lists (the JSON record has up to 500).
const CHANGED_LISTED: usize = 40;

/// `changed (3 files):` and one `  path` or `  path (deleted)` line each (at most 40, then
/// `  … and N more`), for what an apply wrote; empty when it changed nothing.
pub fn changed_lines(entries: &[String]) -> String {
    changed_lines_titled(entries, "changed")
}

/// [`changed_lines`] with its own first word (`Changed` in a sentence-cased report).
pub fn changed_lines_titled(entries: &[String], title: &str) -> String {
    let (listed, total) = awcp_transports::snapshot::changed_total(entries);
    if listed.is_empty() {
        return String::new();
    }
    let plural = if total == 1 { "" } else { "s" };
    let mut s = format!("{title} ({total} file{plural}):\n");
    for e in listed.iter().take(CHANGED_LISTED) {
        s.push_str(&format!("  {e}\n"));
    }
    if total > CHANGED_LISTED {
        s.push_str(&format!("  … and {} more\n", total - CHANGED_LISTED));
    }
    s
}

/// `not written from the result (2): repo/.git/hooks/x (refused), …` lines for what an
/// applied result held that its apply left out (empty when it wrote everything).
pub fn left_out_lines(entries: &[String]) -> String {
    if entries.is_empty() {
        return String::new();
    }
    let mut s = format!("not written from the result ({}):\n", entries.len());
    for e in entries {
        s.push_str(&format!("  {e}\n"));
    }
    s
}

#[cfg(test)]
mod changed_tests {
    #[test]
    fn changed_files_are_listed_and_long_lists_cut() {
        assert_eq!(super::changed_lines(&[]), "");
        let one = super::changed_lines(&["ws/a.txt".into()]);
        assert_eq!(one, "changed (1 file):\n  ws/a.txt\n");
        let two = super::changed_lines(&["ws/a.txt".into(), "ws/b.txt (deleted)".into()]);
        assert_eq!(
            two,
            "changed (2 files):\n  ws/a.txt\n  ws/b.txt (deleted)\n"
        );
        let mut many: Vec<String> = (0..500).map(|i| format!("ws/{i}")).collect();
        many.push("… and 20 more".into());
        let text = super::changed_lines(&many);
        assert!(text.starts_with("changed (520 files):\n"), "{text}");
        assert!(text.ends_with("  ws/39\n  … and 480 more\n"), "{text}");
    }
}

#[cfg(test)]
mod left_out_tests {
    #[test]
    fn left_out_entries_are_listed() {
        assert_eq!(super::left_out_lines(&[]), "");
        let lines = super::left_out_lines(&[
            "ws/.git/hooks/post-checkout (refused)".into(),
            "ws/link (dropped)".into(),
        ]);
        assert_eq!(
            lines,
            "not written from the result (2):\n  ws/.git/hooks/post-checkout (refused)\n  ws/link (dropped)\n"
        );
    }
}

/// `not shipped (3): a (symlink), build/ (ignored), …` lines for what a delegation left out
/// (empty when everything was shipped).
pub fn not_shipped_lines(entries: &[(String, String)], total: u64) -> String {
    if entries.is_empty() {
        return String::new();
    }
    let mut s = format!("not shipped ({total}):\n");
    for (path, reason) in entries {
        s.push_str(&format!("  {path} ({reason})\n"));
    }
    let more = total.saturating_sub(entries.len() as u64);
    if more > 0 {
        s.push_str(&format!("  … and {more} more\n"));
    }
    s
}

/// `1.2 MB`-style sizes.
pub fn human_bytes(n: u64) -> String {
    const K: f64 = 1024.0;
    let f = n as f64;
    if f >= K * K * K {
        format!("{:.1} GB", f / (K * K * K))
    } else if f >= K * K {
        format!("{:.1} MB", f / (K * K))
    } else if f >= K {
        format!("{:.1} KB", f / K)
    } else {
        format!("{n} B")
    }
}

/// `--ca-file`, `--client-cert`, `--client-key`: how the binaries' HTTP clients trust servers
/// and identify themselves (https executors, daemons and archive servers).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct ClientTlsArgs {
    /// Trust this CA certificate (PEM) for https peers, in addition to the system's roots
    /// (repeatable).
    #[arg(long, env = "AWCP_CA_FILE", global = true)]
    pub ca_file: Vec<std::path::PathBuf>,
    /// Present this client certificate (PEM) to servers that require one (mTLS).
    #[arg(long, env = "AWCP_CLIENT_CERT", global = true, requires = "client_key")]
    pub client_cert: Option<std::path::PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(long, env = "AWCP_CLIENT_KEY", global = true, requires = "client_cert")]
    pub client_key: Option<std::path::PathBuf>,
}

impl ClientTlsArgs {
    /// The client TLS settings, or why the files are unusable.
    pub fn client_tls(&self) -> Result<agent_rt::ClientTls, String> {
        if self.ca_file.is_empty() && self.client_cert.is_none() {
            return Ok(agent_rt::ClientTls::default());
        }
        agent_rt::ClientTls::new(&agent_rt::ClientTlsOptions {
            ca_files: self.ca_file.clone(),
            no_public_roots: false,
            client_cert: self.client_cert.clone(),
            client_key: self.client_key.clone(),
        })
        .map_err(|e| e.to_string())
    }
}

/// `--amqp-ca`, `--amqp-cert`, `--amqp-key`: TLS to an `amqps://` broker in group mode, and
/// the client certificate that logs in with SASL EXTERNAL (AIP v02.01: the broker takes the
/// user from the certificate, e.g. its CN is the AIC).
#[derive(clap::Args, Clone, Debug, Default)]
pub struct AmqpTlsArgs {
    /// Group mode: trust this CA certificate (PEM) for the amqps:// broker, in addition to
    /// the system's roots.
    #[arg(long, env = "AIP_AMQP_CA")]
    pub amqp_ca: Option<std::path::PathBuf>,
    /// Group mode: present this client certificate (PEM) to the broker. With an amqps:// URL
    /// without a user (and for RPC invitations without an accessToken) it is the login: SASL
    /// EXTERNAL.
    #[arg(long, env = "AIP_AMQP_CERT", requires = "amqp_key")]
    pub amqp_cert: Option<std::path::PathBuf>,
    /// The broker client certificate's private key (PEM).
    #[arg(long, env = "AIP_AMQP_KEY", requires = "amqp_cert")]
    pub amqp_key: Option<std::path::PathBuf>,
}

impl AmqpTlsArgs {
    /// The broker TLS settings, or why the files are unusable.
    pub fn amqp_tls(&self) -> Result<aip_driver::group::AmqpTls, String> {
        aip_driver::group::AmqpTls::from_files(
            self.amqp_ca.as_deref(),
            self.amqp_cert.as_deref(),
            self.amqp_key.as_deref(),
        )
    }
}

/// `--tls-cert`, `--tls-key`, `--client-ca` and the server limits: how a binary's server
/// (executor, daemon, archive server) serves.
#[derive(clap::Args, Clone, Debug)]
pub struct ServerArgs {
    /// Serve TLS with this certificate chain (PEM, leaf first).
    #[arg(long, env = "AWCP_TLS_CERT", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The TLS certificate's private key (PEM).
    #[arg(long, env = "AWCP_TLS_KEY", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
    /// Require client certificates signed by this CA (PEM): mTLS. Needs --tls-cert.
    #[arg(long, env = "AWCP_CLIENT_CA", requires = "tls_cert")]
    pub client_ca: Option<std::path::PathBuf>,
    /// Seconds a client may take to send a request's head (and the TLS handshake).
    #[arg(long, env = "AWCP_HEADER_READ_TIMEOUT", default_value_t = 30)]
    pub header_read_timeout: u64,
    /// Seconds a kept-alive connection may sit idle between requests.
    #[arg(long, env = "AWCP_IDLE_TIMEOUT", default_value_t = 60)]
    pub idle_timeout: u64,
    /// Base seconds allowed for a request body (plus one second per 16 KiB received).
    #[arg(long, env = "AWCP_BODY_READ_TIMEOUT", default_value_t = 60)]
    pub body_read_timeout: u64,
    /// Most connections open at once (the oldest idle one is closed to make room). An
    /// executor raises it to 2 × --max-concurrent + 64 if lower.
    #[arg(long, env = "AWCP_MAX_CONNECTIONS", default_value_t = 512)]
    pub max_connections: usize,
}

impl ServerArgs {
    /// The server settings, or why the TLS files are unusable.
    pub fn server_options(&self) -> Result<agent_rt::ServerOptions, String> {
        let secs = |s: u64| (s > 0).then(|| std::time::Duration::from_secs(s));
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(
                agent_rt::ServerTls::new(&agent_rt::ServerTlsOptions {
                    cert: cert.clone(),
                    key: key.clone(),
                    client_ca: self.client_ca.clone(),
                    client_cert_optional: false,
                })
                .map_err(|e| e.to_string())?,
            ),
            _ => None,
        };
        Ok(agent_rt::ServerOptions {
            tls,
            header_read_timeout: secs(self.header_read_timeout),
            idle_timeout: secs(self.idle_timeout),
            body_read_timeout: secs(self.body_read_timeout),
            max_connections: self.max_connections.max(1),
            ..agent_rt::ServerOptions::default()
        })
    }
}

/// A `--public-url` value: an `http(s)://host[:port]` base without a trailing slash.
pub fn parse_public_url(s: &str) -> Result<String, String> {
    if s.trim() != s || s.is_empty() {
        return Err(format!("{s:?} is not an http(s)://host[:port] URL"));
    }
    let u: http::Uri = s.parse().map_err(|e| format!("{s:?}: {e}"))?;
    match (u.scheme_str(), u.host()) {
        (Some("http" | "https"), Some(_)) => Ok(s.trim_end_matches('/').to_owned()),
        _ => Err(format!("{s:?} is not an http(s)://host[:port] URL")),
    }
}

/// A `--peer` value: an executor's `http(s)://host[:port]` URL, checked while the flags are
/// parsed; its AWCP path (`/awcp`) is added when only the base URL is given.
pub fn parse_peer_url(s: &str) -> Result<String, String> {
    let base = parse_public_url(s).map_err(|_| {
        format!(
            "{s:?} is not an executor URL: expected http(s)://host[:port]/awcp (awcp-executor prints it when it starts)"
        )
    })?;
    Ok(awcp_proto::http_binding::awcp_url(&base))
}

/// Prints one stdout line, flushed: `v` as JSON when `json` (the CLIs' `--json`), else
/// `text`.
pub fn print_line(json: bool, v: &serde_json::Value, text: &str) {
    use std::io::Write;
    let mut o = std::io::stdout().lock();
    let _ = if json {
        writeln!(o, "{v}")
    } else {
        writeln!(o, "{text}")
    };
    let _ = o.flush();
}

/// 64 random bits from the operating system (engine id seeds: notification tokens and ids
/// are as unguessable as their seed). Fails closed: without OS randomness the program exits
/// with an error rather than run on guessable ids.
pub fn random_seed() -> u64 {
    let mut b = [0u8; 8];
    if let Err(e) = getrandom::fill(&mut b) {
        eprintln!("error: the operating system's random source failed: {e}");
        std::process::exit(2);
    }
    u64::from_le_bytes(b)
}

/// The default state directory of `role` (`executor` or `delegator`): `$AWCP_HOME/<role>`,
/// else `~/.awcp/<role>`, else `<tmp>/awcp/<role>` without a home.
pub fn default_state_dir(role: &str) -> PathBuf {
    std::env::var_os("AWCP_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".awcp")))
        .unwrap_or_else(|| std::env::temp_dir().join("awcp"))
        .join(role)
}

/// Reads a secret from `path` (a `--…-token-file` flag): its first line, trimmed. A token on
/// the command line is readable by every user in `ps`; one in a file is not. Refuses an empty
/// file; warns when the file is readable by other users.
pub fn read_token_file(path: &std::path::Path) -> Result<String, String> {
    use std::os::unix::fs::PermissionsExt;
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("reading the token file {}: {e}", path.display()))?;
    let token = text.lines().next().unwrap_or("").trim().to_owned();
    if token.is_empty() {
        return Err(format!("the token file {} is empty", path.display()));
    }
    if let Ok(m) = std::fs::metadata(path) {
        if m.permissions().mode() & 0o077 != 0 {
            tracing::warn!(
                file = %path.display(),
                "the token file is readable by other users (chmod 600 it)"
            );
        }
    }
    Ok(token)
}

/// `token`, or the contents of `file` when that is given instead; exits with status 2 and a
/// message when the file cannot be used.
pub fn token_or_file(
    token: Option<String>,
    file: Option<&std::path::Path>,
    flag: &str,
) -> Option<String> {
    match file {
        None => token,
        Some(f) => match read_token_file(f) {
            Ok(t) => Some(t),
            Err(e) => {
                eprintln!("error: {flag}: {e}");
                std::process::exit(2);
            }
        },
    }
}

/// Opens `url` in the desktop's browser where one can exist (macOS, Windows, or a Linux
/// session with a display and `xdg-open`); `true` if a browser was asked to. Never waits for
/// the browser, and never runs anything on a machine without a display.
pub fn open_in_browser(url: &str) -> bool {
    let program: Option<(&str, Vec<&str>)> = if cfg!(target_os = "macos") {
        Some(("open", vec![url]))
    } else if cfg!(windows) {
        Some(("explorer", vec![url]))
    } else if std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some()
    {
        Some(("xdg-open", vec![url]))
    } else {
        None
    };
    let Some((program, args)) = program else {
        return false;
    };
    std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .is_ok()
}
