//! `aip-partner`: any command-line agent as an AIP partner (direct mode: rpc, stream,
//! notification; both dialects).
//!
//! ```text
//! aip-partner --listen 127.0.0.1:10300 -- my-agent --flag      # the request arrives on stdin
//! aip-partner -- sh -c 'read q; echo "thinking about $q"; echo "42" > "$AIP_OUTPUT_DIR/answer.txt"'
//! aip-partner --tls-cert cert.pem --tls-key key.pem --client-ca leaders-ca.pem -- my-agent   # mTLS
//! ```
//! Stdout lines become status updates, a line `AIP-ASK: question` asks the leader for input
//! (the answer arrives as the next stdin line), and when the command exits its stdout and
//! the files it wrote to `$AIP_OUTPUT_DIR` are the task's products (see `aip_agent`).
//! The first stdout line is `aip-partner listening on <rpc URL>`.
//!
//! Group mode (RabbitMQ): `--group` serves the `group` JSON-RPC invitation instead of the
//! direct-mode endpoints, and `--inbox-broker URL` also takes invitations from the
//! partner's inbox on that broker. Each group task mentioning this partner runs the command
//! once with the request on stdin (see `awcp_aip_cli::aip_group`):
//!
//! ```text
//! aip-partner --group --id 1.2.156.3088.1.1.1.1.1.1 --listen 127.0.0.1:10301 -- my-agent
//! aip-partner --group --id 1.2.156.3088.1.1.1.1.1.2 --listen 127.0.0.1:0 \
//!     --inbox-broker amqp://guest:guest@127.0.0.1:5672/%2f -- my-agent
//! ```
//! The first stdout line is then `aip-partner group rpc on <URL>` (https with `--tls-cert`).
//! With `--amqp-cert`/`--amqp-key` (and `--amqp-ca`) it reaches `amqps://` brokers and logs
//! in with its certificate (SASL EXTERNAL) when an invitation carries no `accessToken`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use agent_rt::Host;
use aip_driver::aip_proto::partner::PartnerConfig;
use aip_driver::{PartnerHandle, PartnerOptions};
use awcp_aip_cli::aip_agent::{self, AgentCommand};
use awcp_aip_cli::{ClientTlsArgs, RuntimeChoice, ServerArgs};
use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "aip-partner",
    version,
    about = "Serve a command-line agent as an AIP partner"
)]
struct Args {
    /// JSON config file whose keys are flag names (command line, then environment, then file).
    #[arg(long)]
    config: Option<std::path::PathBuf>,
    /// Address to listen on (port 0 picks a free port; the URL is printed).
    #[arg(long, env = "AIP_LISTEN", default_value = "127.0.0.1:10300")]
    listen: SocketAddr,
    /// Path the endpoints are served under (`/rpc`, `/stream`, `/notification/…` below it).
    #[arg(long, env = "AIP_BASE_PATH", default_value = "")]
    base_path: String,
    /// This partner's id (AIC), the `senderId` of its results.
    #[arg(long, env = "AIP_PARTNER_ID", default_value = "aip-partner")]
    id: String,
    /// Where task work directories are made (default: a directory under the system's temp dir).
    #[arg(long, env = "AIP_WORK_ROOT")]
    work_root: Option<PathBuf>,
    /// The stdout prefix by which the agent asks the leader a question.
    #[arg(long, env = "AIP_ASK_MARKER", default_value = "AIP-ASK: ")]
    ask_marker: String,
    /// Largest output file sent inline as a product, in bytes.
    #[arg(long, env = "AIP_MAX_FILE_BYTES", default_value_t = 8 * 1024 * 1024)]
    max_file_bytes: u64,
    /// Seconds a task may wait for input before it is canceled.
    #[arg(long, default_value_t = 3600)]
    input_timeout: u64,
    /// Seconds a task may wait for completion before it is completed.
    #[arg(long, default_value_t = 3600)]
    completion_timeout: u64,
    /// Async runtime to run on.
    #[arg(long, env = "AIP_RUNTIME", value_enum, default_value_t)]
    runtime: RuntimeChoice,
    #[command(flatten)]
    server: ServerArgs,
    /// Further host names leaders reach this partner by. Unless clients must present a
    /// certificate (--client-ca), requests whose Host header names anything else (but an IP
    /// address or localhost) are refused, as a DNS-rebinding web page's would be; requests with
    /// an Origin header or a body that is not application/json are always refused.
    #[arg(
        long = "allowed-host",
        visible_alias = "allow-host",
        env = "AIP_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    allowed_hosts: Vec<String>,
    /// TLS for notification POSTs to https receivers.
    #[command(flatten)]
    client: ClientTlsArgs,
    /// Group mode: take `group` invitations (JSON-RPC on --listen, and the inbox with
    /// --inbox-broker) and run the command for each group task that mentions this partner.
    #[arg(long)]
    group: bool,
    /// Group mode: also listen on this partner's inbox (inbox_{id}) on this broker,
    /// amqp://user:password@host:port/vhost.
    #[arg(long, env = "AIP_INBOX_BROKER", requires = "group")]
    inbox_broker: Option<String>,
    /// Group mode: TLS to amqps:// brokers and the client certificate for SASL EXTERNAL.
    #[command(flatten)]
    amqp: awcp_aip_cli::AmqpTlsArgs,
    /// Less logging.
    #[arg(long, short)]
    quiet: bool,
    /// What the agent's environment holds besides the AIP_* variables: only PATH, HOME,
    /// USER, LOGNAME, SHELL, LANG, LANGUAGE, LC_*, TERM, TZ and TMPDIR of this process (never
    /// its broker URL, TLS settings or other secrets), plus each --agent-env: NAME (or
    /// PREFIX*) passes that variable from this process, NAME=VALUE sets it.
    #[arg(long = "agent-env", env = "AIP_AGENT_ENV", value_delimiter = ',')]
    agent_env: Vec<String>,
    /// The agent command and its arguments (after `--`).
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// Which requests the partner refuses as a web page's: `Host` is checked unless every client
/// must present a certificate, which a page cannot.
fn request_guard(args: &Args) -> aip_driver::aip_proto::http::RequestGuard {
    aip_driver::aip_proto::http::RequestGuard {
        check_host: args.server.client_ca.is_none(),
        allowed_hosts: args.allowed_hosts.clone(),
    }
}

fn main() {
    // The shared TLS and server flags read AIP variables here, not AWCP ones.
    let args: Args = awcp_aip_cli::parse_with_env_prefix("AIP_", "AIP_PARTNER_");
    awcp_aip_cli::init_logging(args.quiet, awcp_aip_cli::LogFormat::Text);
    awcp_aip_cli::run_on!(args.runtime, run(args));
}

fn fatal(msg: String) -> ! {
    eprintln!("error: {msg}");
    std::process::exit(2)
}

async fn run<R: Host>(args: Args) {
    let (env_pass, env_set) =
        awcp_transports::parse_agent_env(&args.agent_env).unwrap_or_else(|e| {
            eprintln!("error: {e}");
            std::process::exit(2);
        });
    let mut argv = args.command.clone();
    // The command runs in the task's work directory: resolve a relative path now.
    if argv[0].contains('/') {
        if let Ok(abs) = std::fs::canonicalize(&argv[0]) {
            argv[0] = abs.to_string_lossy().into_owned();
        }
    }
    let work_root = args.work_root.clone().unwrap_or_else(|| {
        std::env::temp_dir().join(format!("aip-partner-{}", std::process::id()))
    });
    if let Err(e) = std::fs::create_dir_all(&work_root) {
        fatal(format!("cannot create {}: {e}", work_root.display()));
    }
    if args.group {
        let listener = std::net::TcpListener::bind(args.listen)
            .unwrap_or_else(|e| fatal(format!("cannot listen on {}: {e}", args.listen)));
        let cli = awcp_aip_cli::aip_group::PartnerCli {
            id: args.id.clone(),
            listener,
            server: args.server.server_options().unwrap_or_else(|e| fatal(e)),
            broker_tls: args.amqp.amqp_tls().unwrap_or_else(|e| fatal(e)),
            inbox_broker: args.inbox_broker.clone(),
            guard: request_guard(&args),
            cmd: Arc::new(AgentCommand {
                argv,
                work_root: work_root.clone(),
                ask_marker: args.ask_marker.clone(),
                max_file_bytes: args.max_file_bytes,
                env_pass: env_pass.clone(),
                env_set: env_set.clone(),
            }),
        };
        let code = awcp_aip_cli::aip_group::partner::<R>(cli).await;
        if args.work_root.is_none() {
            let _ = std::fs::remove_dir_all(&work_root);
        }
        std::process::exit(code);
    }
    let server = args.server.server_options().unwrap_or_else(|e| fatal(e));
    let client_tls = args.client.client_tls().unwrap_or_else(|e| fatal(e));
    let engine = PartnerConfig {
        partner_id: args.id.clone(),
        default_awaiting_input_timeout: Some(Duration::from_secs(args.input_timeout)),
        default_awaiting_completion_timeout: Some(Duration::from_secs(args.completion_timeout)),
        id_seed: awcp_aip_cli::random_seed(),
        ..PartnerConfig::default()
    };
    let base_path = args.base_path.trim_end_matches('/').to_owned();
    let (partner, events) = PartnerHandle::spawn(
        R::default(),
        PartnerOptions {
            engine,
            base_path: base_path.clone(),
            client_tls,
            guard: request_guard(&args),
            ..PartnerOptions::default()
        },
    );
    let listener = std::net::TcpListener::bind(args.listen)
        .unwrap_or_else(|e| fatal(format!("cannot listen on {}: {e}", args.listen)));
    let local = listener.local_addr().expect("bound socket has an address");
    // Before the URL is printed: whoever reads it may send SIGTERM at once.
    let signal = R::shutdown_signal();
    // The first stdout line is the URL, so scripts and tests can read it.
    println!(
        "aip-partner listening on {}://{local}{base_path}/rpc",
        server.scheme()
    );
    tracing::info!(runtime = R::NAME, work_root = %work_root.display(), containment = %awcp_transports::contain::mechanism(), "partner ready");
    let cmd = Arc::new(AgentCommand {
        argv,
        work_root: work_root.clone(),
        ask_marker: args.ask_marker.clone(),
        max_file_bytes: args.max_file_bytes,
        env_pass,
        env_set,
    });
    let (stop_tx, stop_rx) = futures::channel::oneshot::channel::<()>();
    let serve = aip_driver::serve_partner(R::default(), listener, &partner, server, async move {
        let _ = stop_rx.await;
    });
    let app = aip_agent::run(R::default(), partner, events, cmd, signal);
    let server_task = async move {
        let r = serve.await;
        if let Err(e) = &r {
            eprintln!("error: server failed: {e}");
        }
        r
    };
    // The application returns on SIGINT/SIGTERM after killing every agent; then the server
    // stops (requests in flight finish).
    let (_, served) = futures::join!(
        async move {
            app.await;
            let _ = stop_tx.send(());
        },
        server_task
    );
    if args.work_root.is_none() {
        let _ = std::fs::remove_dir_all(&work_root);
    }
    if served.is_err() {
        std::process::exit(1);
    }
}
