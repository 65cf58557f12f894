//! `awcp-executor`: a standalone AWCP executor.
//!
//! ```text
//! awcp-executor --listen 127.0.0.1:10200 --state-dir /var/lib/awcp-executor --demo
//! awcp-executor --agent-cmd 'my-agent --prompt-file {prompt_file}' --auth-token s3cret
//! awcp-executor --listen 0.0.0.0:10200 --auth-token s3cret   # a network address needs a token
//! awcp-executor --config executor.json      # keys are flag names: {"listen": "...", "max-concurrent": 3}
//! awcp-executor --runtime smol              # the same executor on smol instead of tokio
//! awcp-executor --tls-cert cert.pem --tls-key key.pem --client-ca clients-ca.pem \
//!     --public-url https://exec.example:10200   # TLS, client certificates required
//! ```
//! Every flag can also be set through the environment (`AWCP_LISTEN`, `AWCP_WORK_ROOT`, …).
//!
//! The state directory (default `$AWCP_HOME/executor`, `~/.awcp/executor`) holds the journal;
//! the work root (default `<state>/work`) holds one directory per delegation. Both are locked:
//! a second executor on either refuses to start. At start-up only what the journal records is
//! cleaned up (orphaned task process groups, work directories); nothing else is deleted.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use awcp_aip_cli::{ClientTlsArgs, RuntimeChoice, ServerArgs};
use awcp_driver::card::Skill;
use awcp_driver::executor::tunnel::TunnelOptions;
use awcp_driver::security::ExecutorExposure;
use awcp_driver::{AgentCard, Driver, ExecutorHandle, ExecutorOptions};
use awcp_proto::engine::executor::RequiredAuth;
use awcp_proto::{AuthType, ExecutorConfig};
use awcp_transports::{ArchiveExecutor, CommandRunner, DemoRunner, TaskRunner};
use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "awcp-executor",
    version,
    about = "Serve AWCP delegations: run tasks on lent workspaces"
)]
struct Args {
    /// Address to listen on (port 0 picks a free port; the URL is printed).
    #[arg(long, env = "AWCP_LISTEN", default_value = "127.0.0.1:10200")]
    listen: SocketAddr,
    /// Root of the work directories (each delegation gets `<root>/<id>`); default
    /// `<state-dir>/work`. Locked while the executor runs; only directories the executor
    /// created and recorded are ever removed from it.
    #[arg(long, env = "AWCP_WORK_ROOT")]
    work_root: Option<PathBuf>,
    /// State directory (assignment journal, downloads, snapshots); default
    /// `$AWCP_HOME/executor` or `~/.awcp/executor`. Locked while the executor runs.
    #[arg(long, env = "AWCP_EXECUTOR_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Command that does the work, e.g. 'my-agent --prompt-file {prompt_file}'.
    ///
    /// Split like a shell line but run without a shell, in the task's work directory, in its
    /// own process group. Placeholders: {prompt_file} (a file holding the prompt), {work_dir},
    /// {description}, {delegation_id}. Environment: AWCP_PROMPT, AWCP_PROMPT_FILE,
    /// AWCP_WORK_DIR, AWCP_DELEGATION_ID, AWCP_ACCESS_MODE (ro|rw), AWCP_EXPIRES_AT (RFC 3339);
    /// the prompt is also on standard input. Each stdout line is a progress message for the
    /// delegator; exit status 0 is success and the last stdout line is the summary; any other
    /// status fails the task (TASK_FAILED) with the tail of stderr. The whole process group is
    /// killed on cancel, at lease end, at shutdown and as soon as the command exits. What the
    /// command leaves in the work directory is the result.
    #[arg(long, env = "AWCP_AGENT_CMD")]
    agent_cmd: Option<String>,
    /// What the agent command's environment holds besides the AWCP_* variables: only PATH,
    /// HOME, USER, LOGNAME, SHELL, LANG, LANGUAGE, LC_*, TERM, TZ and TMPDIR of this process
    /// (never AWCP_AUTH_TOKEN or other secrets of the executor), plus each --agent-env: NAME
    /// (or PREFIX*) passes that variable from this process, NAME=VALUE sets it. An agent that
    /// needs an API key gets it with e.g. `--agent-env ANTHROPIC_API_KEY`.
    #[arg(long = "agent-env", env = "AWCP_AGENT_ENV", value_delimiter = ',')]
    agent_env: Vec<String>,
    /// Use the built-in demo runner (lists files into AWCP_NOTES.md); the default without --agent-cmd.
    #[arg(long)]
    demo: bool,
    /// Most live delegations at once.
    #[arg(long, env = "AWCP_MAX_CONCURRENT", default_value_t = 5)]
    max_concurrent: usize,
    /// Longest lease granted, in seconds.
    #[arg(long, env = "AWCP_MAX_TTL", default_value_t = 3600)]
    max_ttl: u64,
    /// Refuse read-write delegations (they are downgraded to read-only).
    #[arg(long)]
    read_only: bool,
    /// Require this credential (bearer token or API key) from delegators, on every endpoint.
    /// Without it the executor only listens on loopback addresses (see --insecure-no-auth).
    /// Prefer --auth-token-file or the environment: a command line is readable in `ps`.
    #[arg(long, env = "AWCP_AUTH_TOKEN", hide_env_values = true)]
    auth_token: Option<String>,
    /// Read the --auth-token from this file (its first line) instead.
    #[arg(long, env = "AWCP_AUTH_TOKEN_FILE", conflicts_with = "auth_token")]
    auth_token_file: Option<PathBuf>,
    /// Credential type accepted with --auth-token: `bearer` (Authorization: Bearer),
    /// `api-key` (X-API-Key) or `any`; enforced on every endpoint.
    #[arg(long, env = "AWCP_AUTH_TYPE", default_value = "any",
          value_parser = ["any", "bearer", "api-key", "api_key"])]
    auth_type: String,
    /// Listen on a non-loopback address without --auth-token (anyone who can reach it can run
    /// tasks here). Only for networks protected otherwise.
    #[arg(long, env = "AWCP_INSECURE_NO_AUTH")]
    insecure_no_auth: bool,
    /// Seconds an accepted delegation may wait for START before its slot is freed.
    #[arg(long, env = "AWCP_START_TIMEOUT", default_value_t = 60)]
    start_timeout: u64,
    /// Seconds a multi-round delegation may wait between rounds (for CONTINUE or CLOSE)
    /// before the executor closes it and frees its work directory.
    #[arg(long, env = "AWCP_ROUND_IDLE_TIMEOUT", default_value_t = 900, value_parser = clap::value_parser!(u64).range(1..))]
    round_idle_timeout: u64,
    /// End every round of a delegator that negotiates no extensions (the TypeScript
    /// reference) with `round_done` and wait for CONTINUE or CLOSE, as the reference's `dev`
    /// branch does, so its delegators can continue a delegation. A delegator of the
    /// reference's released version then waits for --round-idle-timeout before it sees the end.
    #[arg(long, env = "AWCP_REFERENCE_ROUNDS")]
    reference_rounds: bool,
    /// Largest request body in bytes (inline archives).
    #[arg(long, env = "AWCP_MAX_BODY", default_value_t = 256 * 1024 * 1024)]
    max_body_bytes: u64,
    /// With --auth-token: largest body read from a request without a credential header; larger
    /// ones get 401 (after their upload is read and thrown away). A START for a delegation
    /// whose INVITE carried the credential in its `auth` field (the reference delegator's way)
    /// is read whole, up to --max-body.
    #[arg(long, env = "AWCP_MAX_UNAUTHENTICATED_BODY", default_value_t = 1024 * 1024)]
    max_unauthenticated_body: u64,
    /// Agent name on the A2A card.
    #[arg(long, env = "AWCP_NAME", default_value = "awcp-rs executor")]
    name: String,
    /// What this executor is for, on its agent card and `GET /` (e.g. "Runs Claude Code on
    /// Python repositories"), so a delegator or an LLM reading the card can pick it.
    #[arg(long, env = "AWCP_CARD_DESCRIPTION")]
    card_description: Option<String>,
    /// A skill on the agent card, as 'NAME: DESCRIPTION' (repeatable). Default: one generic
    /// "Workspace task" skill.
    #[arg(long = "card-skill", value_parser = parse_skill)]
    card_skills: Vec<Skill>,
    /// JSON config file whose keys are flag names.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Also serve the sshfs transport (mounts under the work root; needs sshfs and /dev/fuse).
    #[arg(long, env = "AWCP_SSHFS")]
    sshfs: bool,
    /// Refuse the storage transport (served by default: the workspace and the result are
    /// objects the delegator presigned; this executor needs no credential of its own).
    #[arg(long, env = "AWCP_NO_STORAGE")]
    no_storage: bool,
    /// Refuse the git transport (served by default when `git` runs: the workspace is cloned
    /// from the delegator's branch, the result pushed back to it).
    #[arg(long, env = "AWCP_NO_GIT")]
    no_git: bool,
    /// The name the git transport commits results as.
    #[arg(long, env = "AWCP_GIT_NAME", default_value = "AWCP Executor")]
    git_name: String,
    /// The e-mail address the git transport commits results as.
    #[arg(long, env = "AWCP_GIT_EMAIL", default_value = "executor@awcp.local")]
    git_email: String,
    /// Async runtime to run on.
    #[arg(long, env = "AWCP_RUNTIME", value_enum, default_value_t)]
    runtime: RuntimeChoice,
    /// The base URL delegators reach this executor at (behind a proxy, a TLS terminator or
    /// NAT), used in snapshot URLs and the agent card. Default: the origin each delegator used.
    #[arg(long, env = "AWCP_PUBLIC_URL", value_parser = awcp_aip_cli::parse_public_url)]
    public_url: Option<String>,
    /// Derive snapshot URLs from Forwarded / X-Forwarded-Proto / X-Forwarded-Host (only behind
    /// a reverse proxy that sets them; any client can send them).
    #[arg(long, env = "AWCP_TRUST_FORWARDED_HEADERS")]
    trust_forwarded_headers: bool,
    /// Without a token: further host names delegators reach this executor by. Requests whose
    /// Host header names anything else (but an IP address, localhost or the --public-url
    /// host) are refused, as a DNS-rebinding web page's would be.
    #[arg(
        long = "allowed-host",
        visible_alias = "allow-host",
        env = "AWCP_EXECUTOR_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    allowed_hosts: Vec<String>,
    /// Also serve delegators through a relay: dial its tunnel endpoint (`ws://` or `wss://`,
    /// e.g. wss://relay.example/tunnel) and take the public URL it gives (behind NAT; see
    /// README, "Executors behind NAT"). The listener keeps serving locally.
    #[arg(long, env = "AWCP_EXECUTOR_TUNNEL", value_name = "URL")]
    tunnel: Option<String>,
    /// The token the relay's operator registered for this executor (prefer
    /// --tunnel-token-file: a flag's value is visible in the process list). Not needed when
    /// the relay registered this executor's client certificate instead (--client-cert and
    /// --client-key, over wss://; --ca-file to trust a private relay CA).
    #[arg(long, env = "AWCP_EXECUTOR_TUNNEL_TOKEN", hide_env_values = true)]
    tunnel_token: Option<String>,
    /// A file holding the tunnel token (its first line).
    #[arg(
        long,
        env = "AWCP_EXECUTOR_TUNNEL_TOKEN_FILE",
        conflicts_with = "tunnel_token"
    )]
    tunnel_token_file: Option<PathBuf>,
    #[command(flatten)]
    server: ServerArgs,
    #[command(flatten)]
    client: ClientTlsArgs,
    /// Less logging.
    #[arg(long, short)]
    quiet: bool,
    /// Log line format on stderr.
    #[arg(long, env = "AWCP_LOG_FORMAT", value_enum, default_value_t)]
    log_format: awcp_aip_cli::LogFormat,
    /// Print a shell completion script for awcp-executor (bash, zsh, fish, elvish,
    /// powershell) and exit.
    #[arg(long, value_name = "SHELL")]
    completions: Option<clap_complete::Shell>,
}

fn main() {
    let mut args: Args = awcp_aip_cli::parse_command(awcp_aip_cli::with_default_env(
        <Args as clap::CommandFactory>::command(),
        "AWCP_",
    ));
    if let Some(shell) = args.completions {
        use clap::CommandFactory;
        let mut cmd = Args::command();
        clap_complete::generate(shell, &mut cmd, "awcp-executor", &mut std::io::stdout());
        return;
    }
    awcp_aip_cli::init_logging(args.quiet, args.log_format);
    args.auth_token = awcp_aip_cli::token_or_file(
        args.auth_token.take(),
        args.auth_token_file.as_deref(),
        "--auth-token-file",
    );
    args.tunnel_token = awcp_aip_cli::token_or_file(
        args.tunnel_token.take(),
        args.tunnel_token_file.as_deref(),
        "--tunnel-token-file",
    );
    if let Some(url) = &args.tunnel {
        let target = awcp_driver::ws::parse_ws_url(url).unwrap_or_else(|e| {
            eprintln!("error: --tunnel: {e}");
            std::process::exit(2);
        });
        // Without a token the client certificate is the credential (AUTH then carries an
        // empty token); it is presented only over TLS.
        if args.tunnel_token.is_none() {
            if args.client.client_cert.is_none() {
                eprintln!(
                    "error: --tunnel needs --tunnel-token-file or --tunnel-token, or a client \
                     certificate the relay registered (--client-cert/--client-key, wss://)"
                );
                std::process::exit(2);
            }
            if !target.tls {
                eprintln!(
                    "error: --tunnel {url}: a client certificate is presented only over \
                     wss://; use a wss:// URL or a tunnel token"
                );
                std::process::exit(2);
            }
        }
    }
    awcp_aip_cli::run_on!(args.runtime, run(args));
}

async fn run<R: Driver>(args: Args) {
    // Decide about exposure before anything else: a refused address is never bound.
    match awcp_driver::security::executor_exposure(
        args.listen,
        args.auth_token.is_some(),
        args.insecure_no_auth,
    ) {
        ExecutorExposure::Ok => {}
        ExecutorExposure::Warn(m) => tracing::warn!("{m}"),
        ExecutorExposure::Refuse(m) => {
            eprintln!("error: {m}");
            std::process::exit(2);
        }
    }
    let id_seed = match awcp_driver::security::random_bytes::<8>() {
        Ok(b) => u64::from_le_bytes(b),
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    // Absolute: what the agent and the journal see must not depend on the directory the
    // executor was started in.
    let absolute = |p: PathBuf| std::path::absolute(&p).unwrap_or(p);
    let state_dir = absolute(
        args.state_dir
            .clone()
            .unwrap_or_else(|| awcp_aip_cli::default_state_dir("executor")),
    );
    // Private to this instance: the state directory is locked.
    let work_root = absolute(
        args.work_root
            .clone()
            .unwrap_or_else(|| state_dir.join("work")),
    );
    let made = {
        use std::os::unix::fs::DirBuilderExt;
        // Its user's alone, whatever the umask (a world-writable work root is refused).
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&work_root)
    };
    if let Err(e) = made {
        eprintln!(
            "error: cannot create work root {}: {e}",
            work_root.display()
        );
        std::process::exit(2);
    }
    let runner: Arc<dyn TaskRunner> = match (&args.agent_cmd, args.demo) {
        (Some(cmd), false) => {
            let (pass, set) =
                awcp_transports::parse_agent_env(&args.agent_env).unwrap_or_else(|e| {
                    eprintln!("error: {e}");
                    std::process::exit(2);
                });
            // The PATH the agent's exec searches: its own if --agent-env sets one, else ours.
            let agent_path = set
                .iter()
                .rev()
                .find(|(k, _)| k == "PATH")
                .map(|(_, v)| OsString::from(v))
                .or_else(|| std::env::var_os("PATH"));
            match CommandRunner::new(cmd) {
                Ok(r) => {
                    for warning in awcp_aip_cli::agent_check::agent_command_warnings(
                        cmd,
                        agent_path.as_deref(),
                    ) {
                        tracing::warn!("{warning}");
                    }
                    Arc::new(
                        set.into_iter()
                            .fold(r.pass_env(pass), |r, (k, v)| r.set_env(k, v)),
                    )
                }
                Err(e) => {
                    eprintln!("error: --agent-cmd: {e}");
                    std::process::exit(2);
                }
            }
        }
        _ => Arc::new(DemoRunner),
    };
    let auth = args.auth_token.clone().map(|credential| RequiredAuth {
        types: match args.auth_type.as_str() {
            "bearer" => vec![AuthType::Bearer],
            "api-key" | "api_key" => vec![AuthType::ApiKey],
            _ => Vec::new(),
        },
        credential,
    });
    let mut transports = vec![awcp_proto::TransportKind::Archive];
    if !args.no_storage {
        transports.push(awcp_proto::TransportKind::Storage);
    }
    if args.sshfs {
        transports.push(awcp_proto::TransportKind::Sshfs);
    }
    // Repositories and key files live in the state directory, never in a work directory.
    let git = (!args.no_git).then(|| {
        awcp_transports::git::GitExecutor::new(state_dir.join("git")).identity(
            awcp_transports::git::Identity {
                name: args.git_name.clone(),
                email: args.git_email.clone(),
            },
        )
    });
    let git = git.filter(
        |g| match awcp_transports::ExecutorTransport::check_dependency(g) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!("git transport not offered: {e}");
                false
            }
        },
    );
    if git.is_some() {
        transports.push(awcp_proto::TransportKind::Git);
    }
    let engine = ExecutorConfig {
        transports,
        work_root: work_root.to_string_lossy().into_owned(),
        max_concurrent: args.max_concurrent,
        max_ttl_seconds: args.max_ttl,
        allow_rw: !args.read_only,
        auth,
        start_timeout: std::time::Duration::from_secs(args.start_timeout),
        idle_timeout: std::time::Duration::from_secs(args.round_idle_timeout),
        reference_rounds: args.reference_rounds,
        id_seed,
        ..ExecutorConfig::default()
    };
    let mut opts = ExecutorOptions::new(engine, Arc::new(ArchiveExecutor::default()), runner);
    opts.max_body_bytes = args.max_body_bytes;
    opts.max_unauthenticated_body_bytes = args.max_unauthenticated_body;
    opts.engine.public_url = args.public_url.clone();
    opts.trust_forwarded_headers = args.trust_forwarded_headers;
    opts.allowed_hosts = args.allowed_hosts.clone();
    opts.client_tls = args.client.client_tls().unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(2);
    });
    let opts_client_tls = opts.client_tls.clone();
    let server = args.server.server_options().unwrap_or_else(|e| {
        eprintln!("error: {e}");
        std::process::exit(2);
    });
    if args.sshfs {
        // Credential files live in the state directory, never inside a mount.
        let keys = state_dir.join("sshfs-keys");
        let sshfs =
            awcp_transports::SshfsExecutor::new(awcp_transports::SshfsExecutorConfig::new(keys));
        if let Err(e) = awcp_transports::ExecutorTransport::check_dependency(&sshfs) {
            tracing::warn!("sshfs transport enabled but unusable: {e}");
        }
        opts.extra_transports.push(Arc::new(sshfs));
    }
    opts.git = git.map(Arc::new);
    opts.state_dir = Some(state_dir.clone());
    let default_card = AgentCard::default();
    opts.card = AgentCard {
        name: args.name.clone(),
        description: args
            .card_description
            .clone()
            .unwrap_or(default_card.description),
        skills: if args.card_skills.is_empty() {
            default_card.skills
        } else {
            args.card_skills.clone()
        },
        url: None,
    };
    let executor = match ExecutorHandle::try_start(R::default(), opts) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    let listener = match std::net::TcpListener::bind(args.listen) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: cannot listen on {}: {e}", args.listen);
            std::process::exit(2);
        }
    };
    let local = listener.local_addr().expect("bound socket has an address");
    // Before the URL is printed: whoever reads it may send SIGTERM at once.
    let signal = R::shutdown_signal();
    // The first stdout line is the URL, so scripts and tests can read it.
    println!(
        "awcp-executor listening on {}://{local}/awcp",
        server.scheme()
    );
    tracing::info!(work_root = %work_root.display(), state_dir = %state_dir.display(), runtime = R::NAME, containment = %awcp_transports::contain::mechanism(), "executor ready");
    let ex2 = executor.clone();
    let shutdown = Box::pin(async move {
        signal.await;
        tracing::info!(
            "shutting down: failing in-flight delegations and releasing their resources"
        );
        ex2.shutdown().await;
    });
    let tunnel = args.tunnel.clone().map(|url| TunnelOptions {
        url,
        token: args.tunnel_token.clone().unwrap_or_default(),
        tls: opts_client_tls.clone(),
    });
    let serve = R::serve_executor_with(listener, executor.clone(), server, shutdown);
    let Some(tunnel) = tunnel else {
        if let Err(e) = serve.await {
            eprintln!("error: server failed: {e}");
            std::process::exit(1);
        }
        return;
    };
    // The tunnel runs beside the listener; it ends by itself only when the relay refuses
    // its token (retrying cannot help), which ends the executor.
    let tunnel = awcp_driver::executor::tunnel::run_tunnel(
        R::default(),
        executor.clone(),
        tunnel,
        futures::future::pending::<()>(),
    );
    match futures::future::select(serve, std::pin::pin!(tunnel)).await {
        futures::future::Either::Left((Err(e), _)) => {
            eprintln!("error: server failed: {e}");
            std::process::exit(1);
        }
        futures::future::Either::Left((Ok(()), _)) => {}
        futures::future::Either::Right((r, _)) => {
            let e = r.err().map(|e| e.to_string()).unwrap_or_default();
            eprintln!("error: tunnel: {e}");
            executor.shutdown().await;
            std::process::exit(1);
        }
    }
}

/// `--card-skill 'NAME: DESCRIPTION'`.
fn parse_skill(s: &str) -> Result<Skill, String> {
    Skill::parse(s)
}
