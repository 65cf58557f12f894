//! `awcp-mcp`: an MCP server over stdio that lets any MCP client (Claude Desktop/Code, Cursor,
//! Cline, …) delegate a local directory to an AWCP executor.
//!
//! ```text
//! awcp-mcp --peers http://127.0.0.1:10200          # its own in-process daemon
//! awcp-mcp --daemon-url http://127.0.0.1:3100      # use a running `awcp daemon`
//! awcp-mcp --log-file /tmp/awcp-mcp.log            # logs to a file
//! ```
//! Each server owns its in-process daemon: on a free loopback port, with its own state
//! directory (a private temporary one, removed on exit, unless `--state-dir` names one whose
//! journal a later server restores). So two clients' servers never share one, and background
//! delegations end with the server; only a daemon named by `--daemon-url` keeps them.
//! The external daemon's token is read from `<state-dir>/daemon.token` (written there by
//! `awcp daemon` on the same state directory), or given with `--daemon-token`.
//!
//! Tools (WIRE.md §12): `delegate`, `delegate_output`, `delegate_cancel`, `delegate_snapshots`,
//! `delegate_apply_snapshot`, `delegate_discard_snapshot`, `delegate_list`, `delegate_recover`,
//! and for a delegation kept open for more rounds (`delegate` with `keep_open`, WIRE.md §17)
//! `delegate_continue` and `delegate_close`. Stdout carries the MCP protocol only; logs go to
//! stderr or `--log-file`.

mod peers;
mod progress;
mod tools;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use awcp_driver::delegator::daemon::{DaemonAccess, DaemonApi, DaemonClient};
use awcp_driver::net::ClientTls;
use awcp_driver::{DelegatorHandle, DelegatorOptions};
use awcp_tokio::TokioRuntime;
use awcp_transports::git::{GitDelegator, GitDelegatorConfig};
use awcp_transports::{ArchiveDelegator, ArchiveDelegatorConfig};
use clap::Parser;
use rmcp::ServiceExt;

/// Command line of `awcp-mcp`.
#[derive(Parser, Debug)]
#[command(
    name = "awcp-mcp",
    version,
    about = "MCP server (stdio) for delegating workspaces to AWCP executors"
)]
pub struct Cli {
    /// JSON config file whose keys are flag names (command line, then environment, then file).
    #[arg(long)]
    config: Option<std::path::PathBuf>,
    /// Use a running delegator daemon (e.g. `awcp daemon`) instead of starting one in-process.
    #[arg(long, env = "AWCP_DAEMON_URL")]
    daemon_url: Option<String>,
    /// Port of the in-process daemon on 127.0.0.1 (0, the default, picks a free port). The
    /// daemon is this server's own; to share one, run `awcp daemon` and pass --daemon-url.
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// Executors to advertise in the `delegate` tool (comma-separated base or AWCP URLs).
    #[arg(long, value_delimiter = ',')]
    peers: Vec<String>,
    /// State directory of the daemon. In-process daemon: its journal, so a later server on the
    /// same directory restores its delegations (default: a private temporary directory,
    /// removed on exit). With --daemon-url: where that daemon's `daemon.token` is read
    /// (default `$AWCP_HOME/delegator` or `~/.awcp/delegator`).
    #[arg(long, env = "AWCP_MCP_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// The daemon's token, instead of the one in the state directory.
    #[arg(long, env = "AWCP_DAEMON_TOKEN", hide_env_values = true)]
    daemon_token: Option<String>,
    /// Read the --daemon-token from this file (its first line) instead: a command line is
    /// readable in `ps`.
    #[arg(long, env = "AWCP_DAEMON_TOKEN_FILE", conflicts_with = "daemon_token")]
    daemon_token_file: Option<PathBuf>,
    /// Serve workspaces by one-time URL (URL mode) from this address, where executors can
    /// reach it (in-process daemon only; without it archives are inlined).
    #[arg(long)]
    serve_archives: Option<std::net::SocketAddr>,
    /// The remote `delegate` with `transport: "git"` pushes each delegation's branch
    /// `awcp/<delegation-id>` to (only that branch, never forced; your own git credentials and
    /// configuration apply), for executors to clone and push to (in-process daemon only;
    /// without it, with --serve-archives, the daemon serves the repositories itself).
    #[arg(long)]
    git_remote: Option<String>,
    /// Write logs to this file (appended) instead of stderr.
    #[arg(long)]
    log_file: Option<PathBuf>,
    /// Default snapshot mode: auto, staged or discard.
    #[arg(long, default_value = "auto", value_parser = ["auto", "staged", "discard"])]
    snapshot_mode: String,
    /// Longest a foreground `delegate` call waits, in seconds, before it returns the delegation
    /// id (state running) for `delegate_output`: keep it below the MCP client's request
    /// timeout (60 s in common clients).
    #[arg(long, env = "AWCP_MCP_FOREGROUND_BUDGET", default_value_t = 45, value_parser = clap::value_parser!(u64).range(1..))]
    foreground_budget: u64,
    /// Default lease length in seconds.
    #[arg(long, default_value_t = 3600)]
    default_ttl: u64,
    /// Default access mode: ro or rw.
    #[arg(long, default_value = "rw", value_parser = ["ro", "rw"])]
    default_access_mode: String,
    /// Default transport (the in-process daemon has archive, storage with a bucket or
    /// --serve-archives, git with --git-remote or --serve-archives).
    #[arg(long, default_value = "archive", value_parser = ["archive", "sshfs", "storage", "git"])]
    transport: String,
    /// When the MCP client disconnects, cancel the delegations the in-process daemon still
    /// runs. Off by default, so `delegate_recover` in a later session can still ask the executor
    /// about them.
    #[arg(long)]
    cancel_on_exit: bool,
    /// Admission limit of the in-process daemon: most bytes a workspace (or a result) holds.
    #[arg(long, env = "AWCP_MAX_TOTAL_BYTES", default_value_t = awcp_proto::AdmissionLimits::default().max_total_bytes)]
    max_total_bytes: u64,
    /// Admission limit of the in-process daemon: most files.
    #[arg(long, env = "AWCP_MAX_FILE_COUNT", default_value_t = awcp_proto::AdmissionLimits::default().max_file_count)]
    max_file_count: u64,
    /// Admission limit of the in-process daemon: largest single file, in bytes.
    #[arg(long, env = "AWCP_MAX_FILE_BYTES", default_value_t = awcp_proto::AdmissionLimits::default().max_single_file_bytes)]
    max_file_bytes: u64,
    /// How to trust https executors and daemons (and identify to them).
    #[command(flatten)]
    client: awcp_aip_cli::ClientTlsArgs,
}

fn fail(msg: impl std::fmt::Display) -> ! {
    tracing::error!("{msg}");
    eprintln!("awcp-mcp: error: {msg}");
    std::process::exit(2);
}

fn init_logging(file: Option<&PathBuf>) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(false);
    let r = match file {
        Some(path) => match std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            Ok(f) => b.with_writer(std::sync::Mutex::new(f)).try_init(),
            Err(e) => {
                eprintln!("awcp-mcp: cannot open --log-file {}: {e}", path.display());
                std::process::exit(2);
            }
        },
        None => b.with_writer(std::io::stderr).try_init(),
    };
    let _ = r;
}

/// The daemon to talk to.
struct Daemon {
    url: String,
    token: Option<String>,
    /// The in-process delegator, if this server owns one.
    in_process: Option<DelegatorHandle>,
    /// The in-process delegator lends over storage too (a bucket in the environment, or
    /// `--serve-archives` for the local provider).
    storage: bool,
    /// The in-process delegator lends over git too (`--git-remote`, or `--serve-archives` for
    /// repositories it serves itself) and `git` runs.
    git: bool,
    /// The private state directory of the in-process daemon (removed when dropped).
    _private_state: Option<tempfile::TempDir>,
}

/// The daemon to talk to: the one `--daemon-url` names, or this server's own.
async fn daemon(cli: &Cli, tls: &ClientTls) -> Daemon {
    if let Some(url) = &cli.daemon_url {
        let state_dir = cli
            .state_dir
            .clone()
            .unwrap_or_else(|| awcp_aip_cli::default_state_dir("delegator"));
        let url = url.trim_end_matches('/').to_owned();
        let token = cli
            .daemon_token
            .clone()
            .or_else(|| awcp_driver::security::read_daemon_token(&state_dir));
        match DaemonClient::new(TokioRuntime, url.clone())
            .with_tls(tls.clone())
            .with_token(token.clone())
            .health()
            .await
        {
            Ok(()) => tracing::info!(%url, "using the running delegator daemon"),
            Err(e) => {
                tracing::warn!(%url, error = %e, "the daemon does not answer (or refuses the token); tools will fail until it does")
            }
        }
        for (flag, given) in [
            ("--serve-archives", cli.serve_archives.is_some()),
            ("--git-remote", cli.git_remote.is_some()),
        ] {
            if given {
                tracing::warn!(
                    "{flag} is ignored with --daemon-url: the daemon's own settings apply"
                );
            }
        }
        return Daemon {
            url,
            token,
            in_process: None,
            storage: false,
            git: false,
            _private_state: None,
        };
    }
    let (state_dir, private) = match &cli.state_dir {
        Some(d) => (d.clone(), None),
        None => {
            let t = tempfile::Builder::new()
                .prefix("awcp-mcp-")
                .tempdir()
                .unwrap_or_else(|e| fail(format!("cannot create a private state directory: {e}")));
            (t.path().to_path_buf(), Some(t))
        }
    };
    let listener = match tokio::net::TcpListener::bind(("127.0.0.1", cli.port)).await {
        Ok(l) => l,
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => fail(format!(
            "port {} is in use; leave --port out (a free port is picked), or to share a running \
             daemon pass --daemon-url http://127.0.0.1:{}",
            cli.port, cli.port
        )),
        Err(e) => fail(format!("cannot listen on 127.0.0.1:{}: {e}", cli.port)),
    };
    let local = listener.local_addr().expect("bound socket has an address");
    let url = format!("http://{local}");
    if let Err(e) = std::fs::create_dir_all(&state_dir) {
        fail(format!(
            "cannot create state dir {}: {e}",
            state_dir.display()
        ));
    }
    let token = match cli.daemon_token.clone() {
        Some(t) => t,
        None => awcp_driver::security::load_or_create_daemon_token(&state_dir)
            .unwrap_or_else(|e| fail(format!("daemon token in {}: {e}", state_dir.display()))),
    };
    let transport = ArchiveDelegator::new(ArchiveDelegatorConfig::new(state_dir.join("exports")));
    let mut opts = DelegatorOptions::new(Arc::new(transport), state_dir.clone());
    let archives = cli.serve_archives.map(|addr| {
        let l = std::net::TcpListener::bind(addr)
            .unwrap_or_else(|e| fail(format!("--serve-archives {addr}: {e}")));
        let base = format!("http://{}", l.local_addr().expect("bound"));
        (l, base)
    });
    opts.archive_base_url = archives.as_ref().map(|a| a.1.clone());
    // The storage transport: the bucket the environment names (AWCP_S3_BUCKET and the AWS
    // variables), else the local provider where archives are served.
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    match awcp_transports::storage::S3Config::from_env(
        None,
        None,
        None,
        &|k| std::env::var(k).ok(),
        home.as_deref(),
    ) {
        Ok(c) => match awcp_transports::storage::S3Store::new(&c) {
            Ok(s) => opts.object_store = Some(Arc::new(s)),
            Err(e) => fail(format!("storage transport: {e}")),
        },
        Err(awcp_transports::storage::StorageConfigError::NoBucket) => {}
        Err(e) => fail(format!("storage transport: {e}")),
    }
    let storage = opts.object_store.is_some() || opts.archive_base_url.is_some();
    // The git transport: branches pushed to --git-remote, else repositories this delegator
    // serves on its archive listener (the driver's default, under `<state>/git`). Offered
    // where one of those works and `git` runs.
    let git = Arc::new(GitDelegator::new(GitDelegatorConfig {
        root: state_dir.join("git"),
        remote: cli.git_remote.clone(),
        executor_auth: None,
        keep_branch: false,
    }));
    let git_offered = (git.config().remote.is_some() || opts.archive_base_url.is_some())
        && match git.check() {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(error = %e, "git does not run: the git transport is not offered");
                false
            }
        };
    opts.git = cli.git_remote.is_some().then_some(git);
    opts.engine.admission = awcp_proto::AdmissionLimits {
        max_total_bytes: cli.max_total_bytes,
        max_file_count: cli.max_file_count,
        max_single_file_bytes: cli.max_file_bytes,
    };
    opts.client_tls = tls.clone();
    let d = DelegatorHandle::try_start(TokioRuntime, opts).unwrap_or_else(|e| {
        fail(format!(
            "in-process daemon: {e}; point --daemon-url at the delegator that holds it, or use \
             another --state-dir"
        ))
    });
    if let Some((l, base)) = archives {
        tracing::info!(%base, "serving one-time archive URLs");
        awcp_driver::Driver::spawn_archive_server(&TokioRuntime, l, d.clone());
    }
    let api = DaemonApi::new(
        d.clone(),
        DaemonAccess {
            token: token.clone(),
            listen: local,
            allowed_hosts: Vec::new(),
        },
    );
    tokio::spawn(async move {
        if let Err(e) = awcp_tokio::serve_daemon(listener, api, std::future::pending()).await {
            tracing::error!(error = %e, "in-process daemon stopped");
        }
    });
    tracing::info!(%url, state_dir = %state_dir.display(), "in-process delegator daemon listening");
    Daemon {
        url,
        token: Some(token),
        in_process: Some(d),
        storage,
        git: git_offered,
        _private_state: private,
    }
}

/// Cancels what the in-process daemon still runs (its state dies with this process).
async fn cancel_running(client: &DaemonClient<TokioRuntime>) {
    let Ok(list) = client.list().await else {
        return;
    };
    for d in list.delegations {
        if ["completed", "error", "cancelled", "expired"].contains(&d.state.as_str()) {
            continue;
        }
        tracing::info!(id = %d.id, "cancelling on exit");
        let _ = client.cancel(&d.id).await;
    }
}

#[tokio::main]
async fn main() {
    let mut cli: Cli = awcp_aip_cli::parse_command(awcp_aip_cli::with_default_env(
        <Cli as clap::CommandFactory>::command(),
        "AWCP_MCP_",
    ));
    init_logging(cli.log_file.as_ref());
    cli.daemon_token = awcp_aip_cli::token_or_file(
        cli.daemon_token.take(),
        cli.daemon_token_file.as_deref(),
        "--daemon-token-file",
    );
    let tls = cli.client.client_tls().unwrap_or_else(|e| fail(e));
    let daemon = daemon(&cli, &tls).await;
    let in_process = daemon.in_process.clone();
    let found = peers::discover(&cli.peers, &tls).await;
    let defaults = tools::Defaults {
        ttl_seconds: cli.default_ttl,
        access_mode: cli.default_access_mode.clone(),
        snapshot_mode: cli.snapshot_mode.clone(),
        transport: cli.transport.clone(),
        transports: in_process.as_ref().map(|_| {
            let mut t = vec!["archive".to_owned()];
            if daemon.storage {
                t.push("storage".to_owned());
            }
            if daemon.git {
                t.push("git".to_owned());
            }
            t
        }),
        foreground_budget: Duration::from_secs(cli.foreground_budget),
        survives_exit: in_process.is_none(),
    };
    let hub = in_process.as_ref().map(progress::Hub::start);
    let server = tools::AwcpMcp::new(
        &daemon.url,
        daemon.token.clone(),
        defaults,
        &found,
        tls,
        hub,
    );
    let client = server.client().clone();
    tracing::info!(peers = found.len(), "awcp-mcp serving MCP on stdio");
    let service = match server.serve(rmcp::transport::stdio()).await {
        Ok(s) => s,
        Err(e) => fail(format!("MCP initialisation failed: {e}")),
    };
    let quit = service.waiting().await;
    tracing::info!(?quit, "MCP client disconnected");
    if let Some(d) = &in_process {
        if cli.cancel_on_exit {
            let _ = tokio::time::timeout(Duration::from_secs(5), cancel_running(&client)).await;
        }
        // Flush the journal before the private state directory goes.
        let _ = tokio::time::timeout(Duration::from_secs(5), d.stop()).await;
    }
    drop(daemon);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// README's MCP client configuration parses and its args are accepted by this CLI.
    #[test]
    fn readme_mcp_config_is_valid() {
        let readme = include_str!("../../../../README.md");
        let start = readme
            .find("<!-- mcp-config -->")
            .expect("README has the <!-- mcp-config --> marker before the MCP snippet");
        let rest = &readme[start..];
        let open = rest
            .find("```json")
            .expect("a ```json block after the marker")
            + 7;
        let close = rest[open..].find("```").expect("closing fence") + open;
        let v: serde_json::Value =
            serde_json::from_str(&rest[open..close]).expect("the snippet is JSON");
        let server = &v["mcpServers"]["awcp"];
        assert_eq!(server["command"], "awcp-mcp");
        let mut argv = vec!["awcp-mcp".to_owned()];
        for a in server["args"].as_array().expect("args array") {
            argv.push(a.as_str().expect("string arg").to_owned());
        }
        let cli = Cli::try_parse_from(&argv).expect("README args parse");
        assert!(!cli.peers.is_empty(), "the snippet names a peer");
    }

    #[test]
    fn peers_split_on_commas() {
        let cli = Cli::try_parse_from([
            "awcp-mcp",
            "--peers",
            "http://a:1,http://b:2",
            "--port",
            "0",
        ])
        .unwrap();
        assert_eq!(cli.peers, vec!["http://a:1", "http://b:2"]);
        assert_eq!(cli.port, 0);
    }

    #[test]
    fn git_remote_parses_and_leaves_the_default_transport() {
        let cli = Cli::try_parse_from([
            "awcp-mcp",
            "--git-remote",
            "https://git.example/team/scratch.git",
        ])
        .unwrap();
        assert_eq!(
            cli.git_remote.as_deref(),
            Some("https://git.example/team/scratch.git")
        );
        assert_eq!(cli.transport, "archive");
    }

    #[test]
    fn tls_flags_parse() {
        let cli = Cli::try_parse_from([
            "awcp-mcp",
            "--ca-file",
            "ca.pem",
            "--client-cert",
            "me.pem",
            "--client-key",
            "me.key",
        ])
        .unwrap();
        assert_eq!(cli.client.ca_file, vec![PathBuf::from("ca.pem")]);
        assert!(Cli::try_parse_from(["awcp-mcp", "--client-cert", "me.pem"]).is_err());
        // Missing files are reported, not ignored.
        assert!(cli.client.client_tls().is_err());
    }
}
