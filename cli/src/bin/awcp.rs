//! `awcp`: the delegator CLI and daemon.
//!
//! ```text
//! awcp delegate ./project --peer http://127.0.0.1:10200/awcp --prompt "add tests"
//! awcp daemon --listen 127.0.0.1:3100
//! awcp delegate ./project --peer … --prompt … --daemon --background
//! awcp list | status ID | wait ID | cancel ID | snapshots ID | apply ID SID | discard ID SID
//! awcp delegate … --daemon --rounds; awcp continue ID --prompt "next"; awcp close ID
//! awcp delegate … --max-total-bytes 200000000 --max-file-bytes 80000000   # admission limits
//! awcp delegate … --allow-sensitive      # lend .env, private keys, … deliberately
//! ```
//! The daemon's API needs its token (created at first start in `<state-dir>/daemon.token`,
//! mode 0600); the client commands read it from the same `--state-dir`, or take
//! `--daemon-token`.
//! `--json` prints machine-readable results on stdout; progress goes to stderr.
//! `--runtime smol` (or `AWCP_RUNTIME=smol`) runs it on smol instead of tokio.
//! `status`, `snapshots`, `apply` and `discard` with `--state-dir DIR` work in-process on that
//! state directory instead of asking the daemon.
//!
//! Exit codes (see [`awcp_aip_cli::exit`]): 0 completed (applied, staged, or nothing to
//! apply), 1 other error, 2 usage error, 3 delegation failed, 4 result NOT applied, 5 executor
//! or daemon unreachable.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use awcp_aip_cli::retry::{DaemonTokenSource, RetryTarget};
use awcp_aip_cli::{exit, ClientTlsArgs, RuntimeChoice, ServerArgs};
use awcp_driver::delegator::daemon::{api, DaemonAccess, DaemonApi, DaemonClient};
use awcp_driver::{DelegateParams, DelegatorHandle, DelegatorOptions, Driver};
use awcp_proto::engine::SnapshotMode;
use awcp_proto::{AccessMode, AdmissionLimits, Auth, AuthType, TransportKind};
use awcp_transports::{
    ArchiveDelegator, ArchiveDelegatorConfig, EscapingSymlinks, SshfsDelegator,
    SshfsDelegatorConfig,
};
use clap::{Parser, Subcommand};
use serde_json::{json, Value};

#[derive(Parser, Debug)]
#[command(
    name = "awcp",
    version,
    about = "Delegate a local directory to an AWCP executor"
)]
struct Cli {
    /// The delegator daemon (for list/status/cancel/snapshots, and delegate --daemon).
    #[arg(
        long,
        global = true,
        env = "AWCP_DAEMON_URL",
        default_value = "http://127.0.0.1:3100"
    )]
    daemon_url: String,
    /// The daemon's token (default: read from `<state-dir>/daemon.token`). For `awcp daemon`:
    /// use this token instead of the one in the state directory.
    #[arg(long, global = true, env = "AWCP_DAEMON_TOKEN", hide_env_values = true)]
    daemon_token: Option<String>,
    /// Read the --daemon-token from this file (its first line) instead: a command line is
    /// readable in `ps`.
    #[arg(
        long,
        global = true,
        env = "AWCP_DAEMON_TOKEN_FILE",
        conflicts_with = "daemon_token"
    )]
    daemon_token_file: Option<PathBuf>,
    /// State directory: the daemon's (journal, exports, token), the in-process delegator's,
    /// and where client commands find the daemon token (default `$AWCP_HOME/delegator` or
    /// `~/.awcp/delegator`).
    #[arg(long, global = true, env = "AWCP_STATE_DIR")]
    state_dir: Option<PathBuf>,
    /// Machine-readable output on stdout.
    #[arg(long, global = true)]
    json: bool,
    /// JSON config file whose keys are flag names.
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    /// Less logging.
    #[arg(long, short, global = true)]
    quiet: bool,
    /// Log line format on stderr.
    #[arg(
        long,
        global = true,
        env = "AWCP_LOG_FORMAT",
        value_enum,
        default_value_t
    )]
    log_format: awcp_aip_cli::LogFormat,
    /// Async runtime to run on.
    #[arg(long, global = true, env = "AWCP_RUNTIME", value_enum, default_value_t)]
    runtime: RuntimeChoice,
    #[command(flatten)]
    client: ClientTlsArgs,
    #[command(subcommand)]
    cmd: Cmd,
}

/// The admission limits (WIRE.md §9): the one place they are set for a delegator. They apply
/// to the workspace before it is lent and to results before they are applied.
/// The object store of the `storage` transport (S3-compatible). Credentials and the region
/// come from the variables and files the AWS tools read (`AWS_ACCESS_KEY_ID`,
/// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_PROFILE`, `AWS_REGION`,
/// `AWS_ENDPOINT_URL`, `~/.aws/credentials`); they never reach an executor, which gets
/// presigned URLs only.
#[derive(clap::Args, Clone, Debug, Default)]
struct S3Args {
    /// The bucket workspaces and results go through (also AWCP_S3_BUCKET).
    #[arg(long)]
    s3_bucket: Option<String>,
    /// A prefix for the objects' keys, e.g. `team-a/` (also AWCP_S3_PREFIX).
    #[arg(long)]
    s3_prefix: Option<String>,
    /// The store's endpoint, e.g. `http://127.0.0.1:9000` (also AWS_ENDPOINT_URL; default:
    /// AWS's for the region).
    #[arg(long)]
    s3_endpoint: Option<String>,
}

/// Where the `git` transport's delegation branches go. Without a remote, a delegator that
/// serves archives (`--serve-archives`) serves each delegation's repository itself.
#[derive(clap::Args, Clone, Debug, Default)]
struct GitArgs {
    /// The remote `--transport git` pushes `awcp/<delegation-id>` to (only that branch, never
    /// forced), with your own git credentials and configuration; executors clone from it and
    /// push their work to the same branch.
    #[arg(long)]
    git_remote: Option<String>,
    /// A file holding a token executors get for that remote (sent in the handle as
    /// `auth: {type: "token"}`; HTTP Basic on their side). Without it they get none.
    #[arg(long, requires = "git_remote")]
    git_executor_token_file: Option<PathBuf>,
    /// For an SSH remote: a file holding the private key executors get for it (OpenSSH
    /// format, not encrypted; a deploy key of that repository). Sent in the handle as
    /// `auth: {type: "ssh"}`; executors keep it in a 0600 file until release.
    #[arg(
        long,
        requires = "git_remote",
        conflicts_with = "git_executor_token_file"
    )]
    git_executor_ssh_key_file: Option<PathBuf>,
    /// The SSH remote's host public key executors pin (e.g. a copy of the server's
    /// `/etc/ssh/ssh_host_ed25519_key.pub`); without it they check the host against their
    /// own `known_hosts`. Never unchecked.
    #[arg(long, requires = "git_executor_ssh_key_file")]
    git_host_key_file: Option<PathBuf>,
    /// Keep each delegation's branches on the remote after release (by default the base
    /// branch `awcp/<id>-base` goes, and the result's `awcp/<id>` once its results were
    /// applied or discarded; a result that was not applied keeps it).
    #[arg(long, requires = "git_remote")]
    keep_branch: bool,
}

impl GitArgs {
    /// The git transport's settings (repositories under `<state>/git`).
    fn delegator(&self, state_dir: &Path) -> Arc<awcp_transports::git::GitDelegator> {
        let read = |flag: &str, f: &Path| {
            std::fs::read_to_string(f)
                .unwrap_or_else(|e| fail(format!("--{flag} {}: {e}", f.display())))
        };
        let token = self.git_executor_token_file.as_ref().map(|f| {
            awcp_proto::wire::GitAuth::Token(read("git-executor-token-file", f).trim().to_owned())
        });
        let ssh = self.git_executor_ssh_key_file.as_ref().map(|f| {
            let key = read("git-executor-ssh-key-file", f);
            let host = (self.git_host_key_file.as_deref()).map(|h| read("git-host-key-file", h));
            awcp_transports::git::ssh_auth(&key, host.as_deref())
                .unwrap_or_else(|e| fail(format!("git transport: {e}")))
        });
        Arc::new(awcp_transports::git::GitDelegator::new(
            awcp_transports::git::GitDelegatorConfig {
                root: state_dir.join("git"),
                remote: self.git_remote.clone(),
                executor_auth: token.or(ssh),
                keep_branch: self.keep_branch,
            },
        ))
    }
}

impl S3Args {
    /// The store, if a bucket is named (here or in the environment); exits on a bad setup.
    fn store(&self) -> Option<Arc<awcp_transports::storage::S3Store>> {
        use awcp_transports::storage::{S3Config, S3Store, StorageConfigError};
        let home = std::env::var_os("HOME").map(PathBuf::from);
        match S3Config::from_env(
            self.s3_bucket.clone(),
            self.s3_prefix.clone(),
            self.s3_endpoint.clone(),
            &|k| std::env::var(k).ok(),
            home.as_deref(),
        ) {
            Ok(c) => Some(Arc::new(
                S3Store::new(&c).unwrap_or_else(|e| fail(format!("storage transport: {e}"))),
            )),
            Err(StorageConfigError::NoBucket) => None,
            Err(e) => fail(format!("storage transport: {e}")),
        }
    }
}

#[derive(clap::Args, Debug, Clone, Copy)]
struct AdmissionArgs {
    /// Most bytes a workspace (or a result) may hold in all.
    #[arg(long, env = "AWCP_MAX_TOTAL_BYTES", default_value_t = AdmissionLimits::default().max_total_bytes)]
    max_total_bytes: u64,
    /// Most files a workspace (or a result) may hold.
    #[arg(long, env = "AWCP_MAX_FILE_COUNT", default_value_t = AdmissionLimits::default().max_file_count)]
    max_file_count: u64,
    /// Largest single file a workspace (or a result) may hold, in bytes.
    #[arg(long, env = "AWCP_MAX_FILE_BYTES", default_value_t = AdmissionLimits::default().max_single_file_bytes)]
    max_file_bytes: u64,
}

impl AdmissionArgs {
    fn limits(self) -> AdmissionLimits {
        AdmissionLimits {
            max_total_bytes: self.max_total_bytes,
            max_file_count: self.max_file_count,
            max_single_file_bytes: self.max_file_bytes,
        }
    }
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Delegate DIR to an executor and wait for the result (applied per --snapshot-mode).
    Delegate {
        /// The directory to lend.
        dir: PathBuf,
        /// The executor's AWCP URL (`http://host:port/awcp`; the base URL works too).
        #[arg(long, env = "AWCP_PEER", value_parser = awcp_aip_cli::parse_peer_url)]
        peer: String,
        /// What the executor should do.
        #[arg(
            long,
            required_unless_present = "prompt_file",
            conflicts_with = "prompt_file"
        )]
        prompt: Option<String>,
        /// Read the prompt from this file (`-`: standard input).
        #[arg(long, value_name = "FILE")]
        prompt_file: Option<PathBuf>,
        /// Short label (defaults to the prompt's first line).
        #[arg(long)]
        description: Option<String>,
        /// Lease length in seconds.
        #[arg(long, default_value_t = 3600, value_parser = clap::value_parser!(u64).range(1..))]
        ttl: u64,
        /// Lend read-only.
        #[arg(long)]
        ro: bool,
        /// What to do with the result: apply it (`auto`), keep it for `awcp apply` (`staged`),
        /// or drop it (`discard`).
        #[arg(long, default_value = "auto", value_parser = ["auto", "staged", "discard"])]
        snapshot_mode: String,
        /// Credential for the executor (bearer token). Prefer --token-file or the environment:
        /// a command line is readable in `ps`.
        #[arg(long, env = "AWCP_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// Read the --token from this file (its first line) instead.
        #[arg(long, env = "AWCP_TOKEN_FILE", conflicts_with = "token")]
        token_file: Option<PathBuf>,
        /// Send the credential as an API key instead of a bearer token.
        #[arg(long)]
        api_key: bool,
        /// Go through the daemon instead of delegating in-process.
        #[arg(long)]
        daemon: bool,
        /// With --daemon: return the id at once instead of waiting.
        #[arg(long)]
        background: bool,
        /// Keep the delegation open for more rounds (`awcp continue`, `awcp close`): wait only
        /// for the first round's end (its result applied per --snapshot-mode). Needs --daemon,
        /// which holds the delegation between rounds; closed after 5 min without a round.
        #[arg(long, alias = "keep-open", requires = "daemon")]
        rounds: bool,
        /// Serve the archive by URL from this address (URL mode) instead of inlining it. This
        /// listener answers one-time archive URLs only.
        #[arg(long)]
        serve_archives: Option<SocketAddr>,
        /// With --serve-archives: the base URL the executor reaches the archive server at
        /// (behind NAT or a proxy). Default: its address (the route's source address if it
        /// listens on 0.0.0.0).
        #[arg(long, value_parser = awcp_aip_cli::parse_public_url, requires = "serve_archives")]
        public_url: Option<String>,
        /// TLS and limits of the archive server.
        #[command(flatten)]
        server: ServerArgs,
        /// Lend over SSHFS (live) instead of an archive. A JSON file with `host`, `port`,
        /// `user`, `jailRoot`, `principalsDir`, `hostPublicKey` and optionally `caDir` (the
        /// directory of the CA key sshd trusts; default `<state dir>/sshfs`) and
        /// `escapingSymlinks` (`keep`, `report` (default) or `remove`; see `awcp sshfs setup`).
        /// Any number of delegating processes and a daemon can share one jail.
        #[arg(long)]
        sshfs_config: Option<PathBuf>,
        /// The data plane: `archive`, `sshfs` (implied by --sshfs-config; with --daemon, the
        /// daemon must have been started with --sshfs-config), `storage` (an S3-compatible
        /// bucket: --s3-bucket; with --daemon, the daemon's) or `git` (commits on a branch:
        /// --git-remote, or the repository served by this delegator with --serve-archives).
        #[arg(long)]
        transport: Option<String>,
        /// The bucket of `--transport storage`.
        #[command(flatten)]
        s3: S3Args,
        /// The remote of `--transport git`.
        #[command(flatten)]
        git: GitArgs,
        /// Lend secret-looking files (.env, private keys, credentials.json, …) instead of
        /// refusing with SENSITIVE_FILES. Listing them in .awcpignore keeps them home instead.
        #[arg(long)]
        allow_sensitive: bool,
        /// Ask for the result inline in the event stream, as a reference executor sends it
        /// (this delegator does not offer the `archive-url` extension, so the executor does
        /// not serve the result by URL). For interoperability checks and measurements.
        #[arg(long)]
        inline_results: bool,
        /// Admission limits of the in-process delegator (with --daemon, the daemon's own
        /// flags apply).
        #[command(flatten)]
        admission: AdmissionArgs,
    },
    /// Run the delegator daemon (HTTP API; archive URLs on their own listener).
    Daemon {
        /// Address the API listens on. Anything but a loopback address needs TLS or
        /// --insecure-plain-http.
        #[arg(long, env = "AWCP_DAEMON_LISTEN", default_value = "127.0.0.1:3100")]
        listen: SocketAddr,
        /// Seconds a delegation kept open with `delegate --rounds` may wait between rounds
        /// before the daemon closes it (CLOSE to the executor).
        #[arg(long, env = "AWCP_DAEMON_ROUND_IDLE_TIMEOUT", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
        round_idle_timeout: u64,
        /// Also lend over SSHFS (requests with `"transport": "sshfs"`); the same JSON file as
        /// `delegate --sshfs-config`.
        #[arg(long)]
        sshfs_config: Option<PathBuf>,
        /// Also lend through an S3-compatible bucket (requests with `"transport": "storage"`)
        /// when one is named.
        #[command(flatten)]
        s3: S3Args,
        /// Where `"transport": "git"` delegations' branches go (without a remote, with
        /// --serve-archives, the daemon serves the repositories).
        #[command(flatten)]
        git: GitArgs,
        /// Admission limits of every delegation the daemon makes.
        #[command(flatten)]
        admission: AdmissionArgs,
        /// Serve workspaces by one-time URL (URL mode) from this address, where executors can
        /// reach it; this listener answers archive URLs only. Without it archives are inlined.
        #[arg(long, env = "AWCP_SERVE_ARCHIVES")]
        serve_archives: Option<SocketAddr>,
        /// With --serve-archives: the base URL executors reach the archive URLs at (behind NAT
        /// or a proxy). Default: its address (the route's source address if it listens on
        /// 0.0.0.0).
        #[arg(long, env = "AWCP_PUBLIC_URL", value_parser = awcp_aip_cli::parse_public_url)]
        public_url: Option<String>,
        /// Further host names clients reach the API by (the Host header check refuses others).
        #[arg(
            long = "allowed-host",
            env = "AWCP_ALLOWED_HOSTS",
            value_delimiter = ','
        )]
        allowed_hosts: Vec<String>,
        /// Serve the API on a non-loopback address over plain HTTP (its token and workspace
        /// paths cross the network in clear text). Only for networks protected otherwise.
        #[arg(long, env = "AWCP_INSECURE_PLAIN_HTTP")]
        insecure_plain_http: bool,
        /// TLS and limits of the daemon's servers (the API and, with --serve-archives, the
        /// archive listener).
        #[command(flatten)]
        server: ServerArgs,
    },
    /// List delegations.
    List,
    /// Show one delegation.
    Status {
        /// Delegation id.
        id: String,
        /// Read it from this state directory (in-process) instead of the daemon.
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
    /// Wait until a delegation ends.
    Wait {
        /// Delegation id.
        id: String,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 3600)]
        timeout: u64,
    },
    /// Start the next round of a delegation kept open with `delegate --rounds` (its round
    /// ended), in the executor's same work directory; waits for the round's end.
    Continue {
        /// Delegation id.
        id: String,
        /// What the executor should do in this round (its full instructions).
        #[arg(
            long,
            required_unless_present = "prompt_file",
            conflicts_with = "prompt_file"
        )]
        prompt: Option<String>,
        /// Read the prompt from this file (`-`: standard input).
        #[arg(long, value_name = "FILE")]
        prompt_file: Option<PathBuf>,
        /// Short label (defaults to the prompt's first line).
        #[arg(long)]
        description: Option<String>,
        /// Return at once instead of waiting for the round's end.
        #[arg(long)]
        background: bool,
        /// Give up waiting after this many seconds.
        #[arg(long, default_value_t = 3600)]
        timeout: u64,
    },
    /// Print a one-time link to the daemon's dashboard in the browser (and open it where a
    /// desktop browser exists): delegations live, staged results as diffs, apply or discard.
    /// The link works once, for two minutes; the browser then holds a session cookie, never
    /// the daemon token.
    Dashboard {
        /// Only print the link.
        #[arg(long)]
        no_open: bool,
    },
    /// End a delegation kept open with `delegate --rounds` (between rounds): the executor
    /// releases its work directory; waits until everything is released.
    Close {
        /// Delegation id.
        id: String,
        /// Return at once instead of waiting for the end.
        #[arg(long)]
        background: bool,
    },
    /// Cancel a delegation.
    Cancel {
        /// Delegation id.
        id: String,
    },
    /// List a delegation's snapshots.
    Snapshots {
        /// Delegation id.
        id: String,
        /// Read them from this state directory (in-process) instead of the daemon.
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
    /// Review before apply: what applying a pending snapshot would do (files added, modified
    /// and deleted, unified diffs of text files, local edits it conflicts with). Nothing is
    /// written.
    Diff {
        /// Delegation id.
        id: String,
        /// Snapshot id (default: the pending one, the recommended one if several).
        snapshot: Option<String>,
        /// Read it in-process from this state directory instead of through the daemon.
        #[arg(long)]
        state_dir: Option<PathBuf>,
        /// At most this many bytes of diff text (files past it are listed without their
        /// diff).
        #[arg(long, default_value_t = 256 * 1024)]
        max_bytes: usize,
    },
    /// Apply a staged (pending) snapshot: one staged on purpose, or one whose apply failed.
    Apply {
        /// Delegation id.
        id: String,
        /// Snapshot id.
        snapshot: String,
        /// Apply it in-process from this state directory instead of through the daemon.
        #[arg(long)]
        state_dir: Option<PathBuf>,
        /// Admission limits the result is held to when applied in-process (raise them to apply
        /// a result refused as too large; through the daemon, the daemon's own flags apply).
        #[command(flatten)]
        admission: AdmissionArgs,
    },
    /// Discard a staged (pending) snapshot.
    Discard {
        /// Delegation id.
        id: String,
        /// Snapshot id.
        snapshot: String,
        /// Discard it in-process in this state directory instead of through the daemon.
        #[arg(long)]
        state_dir: Option<PathBuf>,
    },
    /// Print a shell completion script for awcp, e.g. `awcp completions bash >
    /// ~/.local/share/bash-completion/completions/awcp`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// SSHFS transport administration.
    Sshfs {
        #[command(subcommand)]
        cmd: SshfsCmd,
    },
}

#[derive(Subcommand, Debug)]
enum SshfsCmd {
    /// Create the CA (if missing) and print the sshd configuration the SSHFS transport needs
    /// (or write it with --write). Then: create the SFTP login user, the jail (root-owned, mode
    /// 0711) and the principals directory, and reload sshd. sshd accepts a ChrootDirectory only
    /// if it and every directory above it are root-owned and not writable by group or others:
    /// the jail must not be under /tmp or another world-writable directory.
    Setup {
        /// The SFTP login user certificates are issued for.
        #[arg(long, default_value = "awcp")]
        user: String,
        /// The jail (sshd ChrootDirectory; exports are bind-mounted inside). It and every
        /// directory above it must be root-owned and not group/world-writable (not /tmp).
        #[arg(long, default_value = "/srv/awcp-jail")]
        jail_root: PathBuf,
        /// Where the principals files live (root-owned path). The CA key lives in
        /// `<state-dir>/sshfs/ca`.
        #[arg(long, default_value = "/etc/ssh/awcp-principals")]
        principals_dir: PathBuf,
        /// Render a standalone sshd config listening here (instead of a snippet).
        #[arg(long)]
        standalone: Option<SocketAddr>,
        /// Host key for --standalone.
        #[arg(long, default_value = "/etc/ssh/ssh_host_ed25519_key")]
        host_key: PathBuf,
        /// Write the configuration to this file instead of printing it.
        #[arg(long)]
        write: Option<PathBuf>,
    },
}

fn fail(msg: impl std::fmt::Display) -> ! {
    fail_with(exit::OTHER, msg)
}

fn fail_with(code: i32, msg: impl std::fmt::Display) -> ! {
    eprintln!("error: {msg}");
    std::process::exit(code);
}

fn usage(msg: impl std::fmt::Display) -> ! {
    fail_with(exit::USAGE, msg)
}

/// The prompt from `--prompt`, or from `--prompt-file` (`-`: standard input); an empty one is
/// a usage error.
fn read_prompt(prompt: Option<String>, file: Option<&std::path::Path>) -> String {
    let text = match (prompt, file) {
        (Some(p), _) => p,
        (None, Some(f)) if f == std::path::Path::new("-") => {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
                .unwrap_or_else(|e| usage(format!("reading the prompt from standard input: {e}")));
            s
        }
        (None, Some(f)) => std::fs::read_to_string(f)
            .unwrap_or_else(|e| usage(format!("--prompt-file {}: {e}", f.display()))),
        (None, None) => {
            usage("give the task with --prompt TEXT or --prompt-file FILE (- for stdin)")
        }
    };
    if text.trim().is_empty() {
        usage("the prompt is empty");
    }
    text
}

fn fail_daemon(e: awcp_driver::delegator::daemon::DaemonError) -> ! {
    fail_with(exit::for_daemon_error(&e), e)
}

fn fail_delegator(e: awcp_driver::DelegatorError) -> ! {
    use awcp_driver::DelegatorError;
    let code = match &e {
        DelegatorError::Usage(_) => exit::USAGE,
        DelegatorError::Protocol(info) => exit::for_code(info.code.as_str()),
        DelegatorError::Closed
        | DelegatorError::StateDirInUse { .. }
        | DelegatorError::StateDir { .. }
        | DelegatorError::Random(_) => exit::OTHER,
    };
    fail_with(code, e)
}

/// Tells the user (on stderr) how a delegation that did not fully succeed turned out and what
/// to do; `retry` is what a printed command needs to reach the same delegator.
fn explain(v: &api::Record, retry: &RetryTarget) {
    let o = &v.outcome;
    let id = &v.id;
    let code = |e: Option<&awcp_proto::ErrorInfo>| {
        e.map(|e| e.code.as_str().to_owned()).unwrap_or_default()
    };
    let message =
        |e: Option<&awcp_proto::ErrorInfo>| e.map(|e| e.message.clone()).unwrap_or_default();
    let hint = |e: Option<&awcp_proto::ErrorInfo>| {
        if let Some(h) = e.and_then(|e| e.hint.as_deref()) {
            eprintln!("hint: {h}");
        }
    };
    let err = o.error.as_ref();
    match o.status.as_str() {
        "staged" => {
            // The pending snapshot (the recommended one if several).
            let pending = v
                .snapshots
                .iter()
                .filter(|x| x.status == "pending")
                .max_by_key(|x| x.recommended)
                .map(|x| &x.id);
            if let Some(sid) = o.snapshot_id.as_ref().or(pending) {
                eprintln!(
                    "The result is staged, the workspace untouched. Review it:\n    {}\nthen apply it:\n    {}\nor discard it:\n    {}",
                    retry.command(&format!("diff {id} {sid}")),
                    retry.command(&format!("apply {id} {sid}")),
                    retry.command(&format!("discard {id} {sid}"))
                );
                if let Some(note) = &retry.note {
                    eprintln!("{note}");
                }
            }
        }
        "not_applied" => {
            eprintln!(
                "error: the result was NOT applied: {} {}",
                code(err),
                message(err)
            );
            hint(err);
            match &o.snapshot_id {
                Some(sid) => {
                    eprintln!(
                        "Nothing of it was written. The snapshot is kept. Fix the cause, then apply it:\n    {}\nor discard it:\n    {}",
                        retry.command(&format!("apply {id} {sid}")),
                        retry.command(&format!("discard {id} {sid}"))
                    );
                    if let Some(note) = &retry.note {
                        eprintln!("{note}");
                    }
                }
                None => eprintln!(
                    "Nothing of it was written, and the executor was not acknowledged: it keeps the result until its retention ends ({}/tasks/{id}/result).",
                    v.executor_url.trim_end_matches('/')
                ),
            }
        }
        // The record printed above already says the error and its hint: only where.
        "unreachable" => eprintln!("the executor at {} could not be reached", v.executor_url),
        "failed"
            if v.error
                .as_ref()
                .is_some_and(|e| e.code.as_str() == "AUTH_FAILED") =>
        {
            eprintln!(
                "to pass it: `awcp delegate --token TOKEN` (add --api-key if the executor expects an API key)"
            );
        }
        _ => {}
    }
}

/// The SSHFS delegator transport from a JSON config (keys in `--sshfs-config`'s help).
fn sshfs_delegator(path: &std::path::Path, state_dir: &std::path::Path) -> SshfsDelegator {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| fail(format!("{}: {e}", path.display())));
    let v: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| fail(format!("{}: {e}", path.display())));
    let s = |k: &str| {
        v.get(k)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| fail(format!("--sshfs-config: `{k}` (string) is required")))
    };
    let port = v.get("port").and_then(Value::as_u64).unwrap_or(22);
    // Every delegator on this jail must sign with the CA sshd trusts.
    let ca_dir = match v.get("caDir") {
        None => state_dir.join("sshfs"),
        Some(d) => d
            .as_str()
            .map(PathBuf::from)
            .unwrap_or_else(|| fail("--sshfs-config: `caDir` must be a path")),
    };
    let mut config = SshfsDelegatorConfig::new(
        ca_dir,
        s("principalsDir"),
        s("jailRoot"),
        awcp_proto::SshEndpoint {
            host: s("host"),
            port: u16::try_from(port).unwrap_or_else(|_| fail("--sshfs-config: bad port")),
            user: s("user"),
        },
        s("hostPublicKey"),
    );
    if let Some(p) = v.get("escapingSymlinks") {
        config.escaping_symlinks =
            p.as_str()
                .and_then(EscapingSymlinks::parse)
                .unwrap_or_else(|| {
                    fail("--sshfs-config: `escapingSymlinks` must be keep, report or remove")
                });
    }
    SshfsDelegator::new(config).unwrap_or_else(|e| fail(format!("sshfs transport: {e}")))
}

fn delegator<R: Driver>(
    state_dir: PathBuf,
    archive_base: Option<String>,
    sshfs: Option<SshfsDelegator>,
    admission: AdmissionLimits,
    client_tls: agent_rt::ClientTls,
) -> DelegatorHandle {
    let tweaks = Tweaks::default();
    delegator_with::<R>(
        state_dir,
        archive_base,
        sshfs,
        admission,
        client_tls,
        tweaks,
    )
}

/// What a delegator may be started with beyond the defaults.
#[derive(Clone, Debug, Default)]
struct Tweaks {
    /// The storage transport's bucket.
    object_store: Option<Arc<awcp_transports::storage::S3Store>>,
    /// The git transport's settings.
    git: Option<Arc<awcp_transports::git::GitDelegator>>,
    /// Ask for results inline (`--inline-results`).
    inline_results: bool,
    /// How long a multi-round delegation may stay idle (`--round-idle-timeout`).
    round_idle_timeout: Option<Duration>,
}

/// [`delegator`] with `tweaks`.
fn delegator_with<R: Driver>(
    state_dir: PathBuf,
    archive_base: Option<String>,
    sshfs: Option<SshfsDelegator>,
    admission: AdmissionLimits,
    client_tls: agent_rt::ClientTls,
    tweaks: Tweaks,
) -> DelegatorHandle {
    let transport = ArchiveDelegator::new(ArchiveDelegatorConfig::new(state_dir.join("exports")));
    let mut opts = DelegatorOptions::new(Arc::new(transport), state_dir);
    opts.engine.admission = admission;
    if let Some(t) = tweaks.round_idle_timeout {
        opts.engine.idle_timeout = t;
    }
    if tweaks.inline_results {
        opts.engine
            .features
            .retain(|f| f != awcp_proto::feature::ARCHIVE_URL);
    }
    opts.archive_base_url = archive_base;
    opts.client_tls = client_tls;
    opts.object_store = tweaks.object_store.clone();
    opts.git = tweaks.git.clone();
    if let Some(t) = sshfs {
        opts.extra_transports.push(Arc::new(t));
    }
    DelegatorHandle::try_start(R::default(), opts).unwrap_or_else(|e| {
        if matches!(e, awcp_driver::DelegatorError::StateDirInUse { .. }) {
            fail(format!(
                "{e}; go through that delegator (e.g. `--daemon` for a running `awcp daemon`) \
                 or use another --state-dir"
            ))
        }
        fail(e)
    })
}

/// `v` as one line of JSON (`--json`) or as `human` renders it.
fn print_value<T: serde::Serialize>(json: bool, v: &T, human: impl FnOnce(&T) -> String) {
    if json {
        println!("{}", serde_json::to_string(v).unwrap_or_default());
    } else {
        print!("{}", human(v));
    }
}

fn main() {
    // The server flags read AWCP_DELEGATOR_… here (awcp-executor reads AWCP_…).
    let cmd = awcp_aip_cli::rename_env(
        <Cli as clap::CommandFactory>::command(),
        awcp_aip_cli::SERVER_ENV,
        "AWCP_",
        "AWCP_DELEGATOR_",
    );
    let mut cli: Cli = awcp_aip_cli::parse_command(awcp_aip_cli::with_default_env(cmd, "AWCP_"));
    if let Cmd::Completions { shell } = cli.cmd {
        use clap::CommandFactory;
        clap_complete::generate(shell, &mut Cli::command(), "awcp", &mut std::io::stdout());
        return;
    }
    // The daemon logs what happens; a command that prints its outcome logs only what its
    // output does not say (see CLIENT_LOG_FILTER).
    let filter = match (&cli.cmd, cli.quiet || cli.json) {
        (Cmd::Daemon { .. }, false) => "info",
        (Cmd::Daemon { .. }, true) => "warn",
        _ => awcp_aip_cli::CLIENT_LOG_FILTER,
    };
    awcp_aip_cli::init_logging_with(filter, cli.log_format);
    // Where the daemon token comes from (a token in no file is resolved against the state
    // directory in `run`), for the commands printed later; never the token itself.
    let token_source = match (&cli.daemon_token_file, &cli.daemon_token) {
        (Some(file), _) => DaemonTokenSource::File(file.clone()),
        (None, Some(t)) if std::env::var("AWCP_DAEMON_TOKEN").is_ok_and(|e| e == *t) => {
            DaemonTokenSource::Environment
        }
        (None, Some(_)) => DaemonTokenSource::CommandLine,
        (None, None) => DaemonTokenSource::None,
    };
    cli.daemon_token = awcp_aip_cli::token_or_file(
        cli.daemon_token.take(),
        cli.daemon_token_file.as_deref(),
        "--daemon-token-file",
    );
    if let Cmd::Delegate {
        token, token_file, ..
    } = &mut cli.cmd
    {
        *token = awcp_aip_cli::token_or_file(token.take(), token_file.as_deref(), "--token-file");
    }
    awcp_aip_cli::run_on!(cli.runtime, run(cli, token_source));
}

async fn run<R: Driver>(cli: Cli, token_source: DaemonTokenSource) {
    let state_dir = cli
        .state_dir
        .clone()
        .unwrap_or_else(|| awcp_aip_cli::default_state_dir("delegator"));
    // What a printed `awcp apply …` needs to reach the daemon with the same token: a token
    // read from the state directory (or given, but also in it) is found in its file there.
    let state_dir_token = awcp_driver::security::read_daemon_token(&state_dir);
    let in_state_dir = match token_source {
        DaemonTokenSource::None => state_dir_token.is_some(),
        DaemonTokenSource::CommandLine => {
            state_dir_token.is_some() && state_dir_token == cli.daemon_token
        }
        DaemonTokenSource::File(_)
        | DaemonTokenSource::Environment
        | DaemonTokenSource::StateDir { .. } => false,
    };
    let token_source = if in_state_dir {
        DaemonTokenSource::StateDir {
            dir: state_dir.clone(),
            default: cli.state_dir.is_none(),
        }
    } else {
        token_source
    };
    let daemon_retry = RetryTarget::daemon(
        &cli.daemon_url,
        &token_source,
        std::env::var_os("AWCP_STATE_DIR").is_some_and(|v| !v.is_empty()),
    );
    let client_tls = cli.client.client_tls().unwrap_or_else(|e| fail(e));
    let client = DaemonClient::new(R::default(), cli.daemon_url.clone())
        .with_tls(client_tls.clone())
        .with_token(
            cli.daemon_token
                .clone()
                .or_else(|| awcp_driver::security::read_daemon_token(&state_dir)),
        );
    match cli.cmd {
        Cmd::Delegate {
            dir,
            peer,
            prompt,
            prompt_file,
            description,
            ttl,
            ro,
            snapshot_mode,
            token,
            token_file: _,
            api_key,
            daemon,
            background,
            rounds,
            serve_archives,
            public_url,
            server,
            sshfs_config,
            transport,
            s3,
            git,
            allow_sensitive,
            inline_results,
            admission,
        } => {
            let prompt = read_prompt(prompt, prompt_file.as_deref());
            let dir = std::fs::canonicalize(&dir)
                .unwrap_or_else(|e| usage(format!("{}: {e} (WORKSPACE_NOT_FOUND)", dir.display())));
            let description = description.unwrap_or_else(|| {
                prompt
                    .lines()
                    .next()
                    .unwrap_or("task")
                    .chars()
                    .take(80)
                    .collect()
            });
            let mode = SnapshotMode::parse(&snapshot_mode)
                .unwrap_or_else(|| usage("--snapshot-mode must be auto, staged or discard"));
            let access = if ro { AccessMode::Ro } else { AccessMode::Rw };
            let auth = token.map(|credential| Auth {
                auth_type: if api_key {
                    AuthType::ApiKey
                } else {
                    AuthType::Bearer
                },
                credential,
                metadata: Default::default(),
            });
            let transport = match (transport.as_deref(), &sshfs_config) {
                (None, None) | (Some("archive"), None) => TransportKind::Archive,
                (None, Some(_)) | (Some("sshfs"), _) => TransportKind::Sshfs,
                (Some("storage"), None) => TransportKind::Storage,
                (Some("git"), None) => TransportKind::Git,
                (Some("archive" | "storage" | "git"), Some(_)) => {
                    usage("--sshfs-config lends over sshfs")
                }
                (Some(t), _) => usage(format!(
                    "--transport {t}: use archive, sshfs, storage or git"
                )),
            };
            if transport == TransportKind::Git
                && !daemon
                && git.git_remote.is_none()
                && serve_archives.is_none()
            {
                usage(
                    "--transport git needs --git-remote, or --serve-archives to serve the \
                     repository from this delegator",
                );
            }
            let git = (!daemon).then(|| git.delegator(&state_dir));
            // Storage goes through a bucket, or (none named) this delegator serves the
            // objects itself on its archive listener (the local provider).
            let object_store = if transport == TransportKind::Storage && !daemon {
                let store = s3.store();
                if store.is_none() && serve_archives.is_none() {
                    usage(
                        "--transport storage needs a bucket (--s3-bucket or AWCP_S3_BUCKET), \
                         or --serve-archives to serve the objects from this delegator",
                    );
                }
                store
            } else {
                None
            };
            if daemon && sshfs_config.is_some() {
                usage(
                    "with --daemon, the daemon's sshfs transport is configured by \
                     `awcp daemon --sshfs-config`; pass --transport sshfs",
                );
            }
            if !daemon && transport == TransportKind::Sshfs && sshfs_config.is_none() {
                usage("--transport sshfs needs --sshfs-config (or --daemon)");
            }
            let mut params = DelegateParams::new(peer, dir, prompt).description(description);
            params.allow_sensitive = allow_sensitive;
            params.transport = transport;
            params.ttl_seconds = ttl;
            params.access_mode = access;
            params.resources[0].mode = access;
            params.snapshot_mode = mode;
            params.auth = auth;
            params.keep_open = rounds;
            if daemon {
                let body = api::DelegateBody::from_params(&params).unwrap_or_else(|e| usage(e));
                let id = client
                    .delegate(&body)
                    .await
                    .unwrap_or_else(|e| fail_daemon(e));
                if background {
                    print_value(cli.json, &json!({"delegationId": id}), |_| {
                        format!("{id}\n")
                    });
                    return;
                }
                let limit = Duration::from_secs(ttl + 120);
                let until = async {
                    if rounds {
                        client.wait_round(&id, limit).await
                    } else {
                        client.wait(&id, limit).await
                    }
                };
                let v = awcp_aip_cli::follow_daemon(&client, &id, cli.json, until)
                    .await
                    .unwrap_or_else(|e| fail_daemon(e));
                print_value(cli.json, &v, human_record);
                explain(&v, &daemon_retry);
                exit_for(&v);
                return;
            }
            let sshfs = sshfs_config.map(|p| sshfs_delegator(&p, &state_dir));
            let mut archive_base = None;
            if let Some(addr) = serve_archives {
                let listener = std::net::TcpListener::bind(addr)
                    .unwrap_or_else(|e| fail(format!("--serve-archives {addr}: {e}")));
                let server = server.server_options().unwrap_or_else(|e| fail(e));
                let local = listener.local_addr().expect("bound");
                archive_base =
                    Some(public_url.unwrap_or_else(|| format!("{}://{local}", server.scheme())));
                let d = delegator_with::<R>(
                    state_dir.clone(),
                    archive_base.clone(),
                    sshfs,
                    admission.limits(),
                    client_tls,
                    Tweaks {
                        inline_results,
                        object_store: object_store.clone(),
                        git: git.clone(),
                        ..Tweaks::default()
                    },
                );
                R::default().spawn_archive_server_with(listener, d.clone(), server);
                run_delegate::<R>(d, params, cli.json, &state_dir).await;
                return;
            }
            let d = delegator_with::<R>(
                state_dir.clone(),
                archive_base,
                sshfs,
                admission.limits(),
                client_tls,
                Tweaks {
                    inline_results,
                    object_store,
                    git,
                    ..Tweaks::default()
                },
            );
            run_delegate::<R>(d, params, cli.json, &state_dir).await;
        }
        Cmd::Daemon {
            listen,
            round_idle_timeout,
            sshfs_config,
            s3,
            git,
            serve_archives,
            admission,
            public_url,
            allowed_hosts,
            insecure_plain_http,
            server,
        } => {
            let server = server.server_options().unwrap_or_else(|e| fail(e));
            if let Some(why) = awcp_driver::security::daemon_listen_refusal(
                listen,
                server.tls.is_some(),
                insecure_plain_http,
            ) {
                fail(why);
            }
            if public_url.is_some() && serve_archives.is_none() {
                fail("--public-url names the archive listener: add --serve-archives");
            }
            let token = match cli.daemon_token.clone() {
                Some(t) => t,
                None => awcp_driver::security::load_or_create_daemon_token(&state_dir)
                    .unwrap_or_else(|e| {
                        fail(format!("daemon token in {}: {e}", state_dir.display()))
                    }),
            };
            let listener = std::net::TcpListener::bind(listen)
                .unwrap_or_else(|e| fail(format!("cannot listen on {listen}: {e}")));
            let local = listener.local_addr().expect("bound");
            let archives = serve_archives.map(|addr| {
                let l = std::net::TcpListener::bind(addr)
                    .unwrap_or_else(|e| fail(format!("--serve-archives {addr}: {e}")));
                let base = public_url.clone().unwrap_or_else(|| {
                    format!("{}://{}", server.scheme(), l.local_addr().expect("bound"))
                });
                (l, base)
            });
            let sshfs = sshfs_config.map(|p| sshfs_delegator(&p, &state_dir));
            let d = delegator_with::<R>(
                state_dir.clone(),
                archives.as_ref().map(|a| a.1.clone()),
                sshfs,
                admission.limits(),
                client_tls,
                Tweaks {
                    round_idle_timeout: Some(Duration::from_secs(round_idle_timeout)),
                    object_store: s3.store(),
                    git: Some(git.delegator(&state_dir)),
                    ..Tweaks::default()
                },
            );
            if let Some((l, base)) = archives {
                tracing::info!(%base, "serving one-time archive URLs");
                R::default().spawn_archive_server_with(l, d.clone(), server.clone());
            }
            let api = DaemonApi::new(
                d,
                DaemonAccess {
                    token,
                    listen: local,
                    allowed_hosts,
                },
            );
            // Before the URL is printed: whoever reads it may send SIGTERM at once.
            let signal = R::shutdown_signal();
            println!("awcp daemon listening on {}://{local}", server.scheme());
            tracing::info!(
                token_file = %awcp_driver::security::daemon_token_path(&state_dir).display(),
                "clients authenticate with the daemon token"
            );
            if let Err(e) = R::serve_daemon_with(listener, api, server, signal).await {
                fail(e);
            }
        }
        Cmd::Sshfs {
            cmd:
                SshfsCmd::Setup {
                    user,
                    jail_root,
                    principals_dir,
                    standalone,
                    host_key,
                    write,
                },
        } => {
            use awcp_transports::sshfs::{
                check_chroot_path, ensure_ca, sshd_config, SshdConfigParams,
            };
            if let Err(e) = check_chroot_path(&jail_root) {
                fail(format!("--jail-root: {e}"));
            }
            let state = state_dir.join("sshfs");
            let ca = state.join("ca");
            ensure_ca(&ca).unwrap_or_else(|e| fail(format!("CA key {}: {e}", ca.display())));
            let next = format!(
                "next (as root): useradd -r -M -d /nonexistent -s /usr/sbin/nologin -p '*' {user}; \
                 install -d -m 0711 {jail}; install -d -m 0755 {principals}; then reload sshd.\n\
                 note: {req}.",
                jail = jail_root.display(),
                principals = principals_dir.display(),
                req = awcp_transports::sshfs::CHROOT_REQUIREMENT,
            );
            let text = sshd_config(&SshdConfigParams {
                user,
                ca_public_key: ca.with_extension("pub"),
                principals_dir,
                jail_root,
                standalone: standalone.map(|a| (a.ip().to_string(), a.port(), host_key)),
            });
            eprintln!("{next}");
            match write {
                Some(path) => {
                    std::fs::write(&path, text)
                        .unwrap_or_else(|e| fail(format!("{}: {e}", path.display())));
                    eprintln!("wrote {}", path.display());
                }
                None => print!("{text}"),
            }
        }
        Cmd::List => {
            let v = client.list().await.unwrap_or_else(|e| fail_daemon(e));
            print_value(cli.json, &v, |v| {
                table(
                    v.delegations
                        .iter()
                        .map(|d| [d.id.as_str(), &d.state, &d.description]),
                    "no delegations",
                )
            });
        }
        Cmd::Status { id, state_dir } => {
            let v = match state_dir {
                Some(dir) => local_record::<R>(dir, &id, client_tls).await,
                None => client.get(&id).await.unwrap_or_else(|e| fail_daemon(e)),
            };
            print_value(cli.json, &v, human_record);
        }
        Cmd::Wait { id, timeout } => {
            let v = awcp_aip_cli::follow_daemon(
                &client,
                &id,
                cli.json,
                client.wait(&id, Duration::from_secs(timeout)),
            )
            .await
            .unwrap_or_else(|e| fail_daemon(e));
            print_value(cli.json, &v, human_record);
            explain(&v, &daemon_retry);
            exit_for(&v);
        }
        Cmd::Continue {
            id,
            prompt,
            prompt_file,
            description,
            background,
            timeout,
        } => {
            let prompt = read_prompt(prompt, prompt_file.as_deref());
            let task = api::Task {
                description: description.unwrap_or_default(),
                prompt,
            };
            let round = client
                .continue_delegation(&id, &task)
                .await
                .unwrap_or_else(|e| fail_daemon(e));
            if background {
                print_value(cli.json, &json!({"ok": true, "round": round}), |_| {
                    format!("round {round} of {id} started\n")
                });
                return;
            }
            let v = awcp_aip_cli::follow_daemon(
                &client,
                &id,
                cli.json,
                client.wait_round(&id, Duration::from_secs(timeout)),
            )
            .await
            .unwrap_or_else(|e| fail_daemon(e));
            print_value(cli.json, &v, human_record);
            explain(&v, &daemon_retry);
            exit_for(&v);
        }
        Cmd::Dashboard { no_open } => {
            let link = client
                .dashboard_link()
                .await
                .unwrap_or_else(|e| fail_daemon(e));
            let opened = !no_open && awcp_aip_cli::open_in_browser(&link);
            print_value(cli.json, &json!({"url": link, "opened": opened}), |_| {
                format!(
                    "{link}\n(one-time link, valid for 2 minutes{})\n",
                    if opened {
                        "; opened in your browser"
                    } else {
                        ""
                    }
                )
            });
        }
        Cmd::Close { id, background } => {
            client.close(&id).await.unwrap_or_else(|e| fail_daemon(e));
            if background {
                print_value(cli.json, &json!({"ok": true}), |_| format!("closed {id}\n"));
                return;
            }
            let v = client
                .wait(&id, Duration::from_secs(600))
                .await
                .unwrap_or_else(|e| fail_daemon(e));
            print_value(cli.json, &v, human_record);
            explain(&v, &daemon_retry);
            exit_for(&v);
        }
        Cmd::Cancel { id } => {
            client.cancel(&id).await.unwrap_or_else(|e| fail_daemon(e));
            print_value(cli.json, &json!({"ok": true}), |_| {
                format!("cancelled {id}\n")
            });
        }
        Cmd::Snapshots { id, state_dir } => {
            let v = match state_dir {
                Some(dir) => api::Snapshots {
                    snapshots: local_record::<R>(dir, &id, client_tls).await.snapshots,
                },
                None => client
                    .snapshots(&id)
                    .await
                    .unwrap_or_else(|e| fail_daemon(e)),
            };
            print_value(cli.json, &v, |v| {
                table(
                    v.snapshots
                        .iter()
                        .map(|s| [s.id.as_str(), &s.status, &s.summary]),
                    "no snapshots",
                )
            });
        }
        Cmd::Diff {
            id,
            snapshot,
            state_dir,
            max_bytes,
        } => {
            let local = state_dir
                .map(|dir| delegator::<R>(dir, None, None, AdmissionLimits::default(), client_tls));
            let sid = match snapshot {
                Some(s) => s,
                None => {
                    let list = match &local {
                        Some(d) => d
                            .get(&parse_id(&id))
                            .await
                            .map(|v| api::Record::of(&v).snapshots)
                            .unwrap_or_else(|| usage(format!("unknown delegation {id}"))),
                        None => {
                            client
                                .snapshots(&id)
                                .await
                                .unwrap_or_else(|e| fail_daemon(e))
                                .snapshots
                        }
                    };
                    awcp_aip_cli::diff_view::pick_pending(&list).unwrap_or_else(|e| usage(e))
                }
            };
            let v = match local {
                Some(d) => {
                    let limits = awcp_driver::PreviewLimits {
                        max_diff_bytes: max_bytes,
                        ..Default::default()
                    };
                    let r = d
                        .preview_snapshot(&parse_id(&id), &parse_snapshot(&sid), limits)
                        .await;
                    d.stop().await;
                    r.unwrap_or_else(|e| usage(e.to_string()))
                }
                None => client
                    .diff(&id, &sid, max_bytes)
                    .await
                    .unwrap_or_else(|e| fail_daemon(e)),
            };
            print_value(cli.json, &v, awcp_aip_cli::diff_view::render);
        }
        Cmd::Apply {
            id,
            snapshot,
            state_dir,
            admission,
        } => {
            let applied = match state_dir {
                Some(dir) => {
                    let d = delegator::<R>(dir, None, None, admission.limits(), client_tls);
                    let did = parse_id(&id);
                    let r = d
                        .apply_snapshot_and_wait(&did, &parse_snapshot(&snapshot))
                        .await;
                    let note = unloaded_note(&d, &did);
                    d.stop().await;
                    r.map_err(|e| match e {
                        awcp_driver::DelegatorError::Protocol(info) => {
                            (exit::NOT_APPLIED, info.to_string())
                        }
                        other => (exit::USAGE, format!("{other}{note}")),
                    })
                }
                None => client.apply(&id, &snapshot).await.map_err(|e| {
                    let code = match (e.status, &e.code) {
                        (400, Some(_)) => exit::NOT_APPLIED,
                        _ => exit::for_daemon_error(&e),
                    };
                    (code, e.to_string())
                }),
            };
            if let Err((code, msg)) = applied {
                if code == exit::NOT_APPLIED {
                    fail_with(
                        code,
                        format!("snapshot {snapshot} was NOT applied (it stays pending): {msg}"),
                    );
                }
                fail_with(code, msg);
            }
            print_value(cli.json, &json!({"ok": true}), |_| {
                format!("applied {snapshot}\n")
            });
        }
        Cmd::Completions { .. } => {}
        Cmd::Discard {
            id,
            snapshot,
            state_dir,
        } => {
            match state_dir {
                Some(dir) => {
                    let d = delegator::<R>(dir, None, None, AdmissionLimits::default(), client_tls);
                    let did = parse_id(&id);
                    let r = d.discard_snapshot(&did, &parse_snapshot(&snapshot)).await;
                    let note = unloaded_note(&d, &did);
                    d.stop().await;
                    if let Err(e) = r {
                        if note.is_empty() {
                            fail_delegator(e);
                        }
                        usage(format!("{e}{note}"));
                    }
                }
                None => client
                    .discard(&id, &snapshot)
                    .await
                    .unwrap_or_else(|e| fail_daemon(e)),
            }
            print_value(cli.json, &json!({"ok": true}), |_| {
                format!("discarded {snapshot}\n")
            });
        }
    }
}

/// The record of delegation `id` from the state directory `dir`, in-process (after the
/// start-up recovery of interrupted applies).
async fn local_record<R: Driver>(dir: PathBuf, id: &str, tls: agent_rt::ClientTls) -> api::Record {
    let shown = dir.display().to_string();
    let d = delegator::<R>(dir, None, None, AdmissionLimits::default(), tls);
    let did = parse_id(id);
    let v = d.get(&did).await.map(|v| api::Record::of(&v));
    let note = unloaded_note(&d, &did);
    d.stop().await;
    v.unwrap_or_else(|| {
        usage(format!(
            "unknown delegation {id} in state directory {shown}{note} (hint: give the --state-dir the delegation ran with; without --state-dir, the daemon's delegations are asked for)"
        ))
    })
}

/// Why the state directory's record of `id` was not loaded, as a suffix for an "unknown
/// delegation" error (empty when there is no such record).
fn unloaded_note(d: &DelegatorHandle, id: &awcp_proto::DelegationId) -> String {
    d.unloaded_record(id)
        .map(|why| {
            format!(
                ": its journal record was found but not loaded ({why}); the file is kept for the release that wrote it"
            )
        })
        .unwrap_or_default()
}

fn parse_id(s: &str) -> awcp_proto::DelegationId {
    awcp_proto::DelegationId::new(s).unwrap_or_else(|e| usage(format!("delegation id: {e}")))
}

fn parse_snapshot(s: &str) -> awcp_proto::SnapshotId {
    awcp_proto::SnapshotId::new(s).unwrap_or_else(|e| usage(format!("snapshot id: {e}")))
}

/// How long `awcp delegate` waits at its end for the final requests to the executor (the
/// ack that lets it forget the result, an ERROR, a cancel).
const FINAL_REQUEST_GRACE: Duration = Duration::from_secs(3);

async fn run_delegate<R: Driver>(
    d: DelegatorHandle,
    params: DelegateParams,
    json: bool,
    state_dir: &std::path::Path,
) {
    let follow = awcp_aip_cli::Follow::subscribe(&d);
    let id = d
        .delegate(params)
        .await
        .unwrap_or_else(|e| fail_delegator(e));
    let view = follow.until_end(&d, &id, json, R::shutdown_signal()).await;
    // Lets the ack (or cancel, ERROR) reach the executor before the process exits, for a
    // short while: an executor that answers takes milliseconds, and one that never answered
    // (the delegation ended on its TIMEOUT) must not hold the command for another request
    // timeout. What it was not told, its own lease ends.
    let stop = d.stop();
    let grace = R::default().sleep(FINAL_REQUEST_GRACE);
    futures::future::select(Box::pin(stop), grace).await;
    let Some(view) = view else {
        fail("the delegation disappeared");
    };
    let v = api::Record::of(&view);
    if json {
        println!("{}", serde_json::to_string(&v).unwrap_or_default());
    } else {
        print!("{}", awcp_aip_cli::describe(&view));
    }
    explain(&v, &RetryTarget::state_dir(state_dir));
    exit_for(&v);
}

/// One line per row, three columns, or `empty` when there are no rows.
fn table<'a>(rows: impl IntoIterator<Item = [&'a str; 3]>, empty: &str) -> String {
    let mut s = String::new();
    for [a, b, c] in rows {
        s.push_str(&format!("{a}  {b:10}  {c}\n"));
    }
    if s.is_empty() {
        s = format!("{empty}\n");
    }
    s
}

fn human_record(v: &api::Record) -> String {
    let mut s = format!("delegation {} {}\n", v.id, v.state);
    if v.round > 1 || v.state == "idle" {
        s.push_str(&format!("round: {}\n", v.round));
        if v.state == "idle" {
            s.push_str(&format!(
                "next: awcp continue {} --prompt …   or   awcp close {}\n",
                v.id, v.id
            ));
        }
    }
    if let (Some(p), false) = (&v.last_progress, v.ended) {
        s.push_str(&format!("executor: {p}\n"));
    }
    if let Some(r) = &v.result {
        s.push_str(&format!("summary: {}\n", r.summary));
    }
    if let Some(e) = &v.error {
        s.push_str(&format!("error: {} {}\n", e.code.as_str(), e.message));
        if let Some(h) = &e.hint {
            s.push_str(&format!("hint: {h}\n"));
        }
    }
    for w in &v.warnings {
        s.push_str(&format!("warning: {w}\n"));
    }
    for x in &v.snapshots {
        let why = match (x.status.as_str(), &x.error) {
            ("failed", Some(e)) => format!(" (not stored: {})", e.message),
            (_, Some(e)) => format!(" (not applied: {})", e.message),
            _ => String::new(),
        };
        s.push_str(&format!("snapshot {}: {}{why}\n", x.id, x.status));
        s.push_str(&awcp_aip_cli::changed_lines(&x.changed));
        s.push_str(&awcp_aip_cli::left_out_lines(&x.left_out));
    }
    let not_shipped: Vec<(String, String)> = v
        .not_shipped
        .iter()
        .map(|x| (x.path.clone(), x.reason.clone()))
        .collect();
    s.push_str(&awcp_aip_cli::not_shipped_lines(
        &not_shipped,
        v.not_shipped_count,
    ));
    // Between rounds the delegation is not over; the `next:` line says what follows.
    if !v.outcome.message.is_empty() && v.state != "idle" {
        s.push_str(&format!("outcome: {}\n", v.outcome.message));
    }
    s
}

/// Exits with the code of a delegation record's outcome, unless it is 0.
fn exit_for(v: &api::Record) {
    let code = exit::for_record(v);
    if code != exit::OK {
        std::process::exit(code);
    }
}
