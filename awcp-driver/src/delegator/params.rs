//! What a delegator is started with ([`DelegatorOptions`]), what a delegation is asked with
//! ([`DelegateParams`]), and how a call on the handle fails ([`DelegatorError`]).

use super::*;

/// Everything a delegator needs.
pub struct DelegatorOptions {
    /// Engine settings.
    pub engine: DelegatorConfig,
    /// The data-plane transport (archive by default).
    pub transport: Arc<dyn DelegatorTransport>,
    /// Live transports (e.g. sshfs), used when a delegation asks for their kind.
    pub extra_transports: Vec<Arc<dyn DelegatorTransport>>,
    /// State directory: staged snapshots, archives for URL mode, downloads.
    pub state_dir: PathBuf,
    /// Where peers can fetch archives this delegator serves (URL mode), e.g.
    /// `https://delegator.example:3100` (`--public-url`). `None`: archives always travel
    /// inline. An unspecified host (`http://0.0.0.0:3100`, a server bound to every interface)
    /// is replaced per delegation by the local address that reaches the executor.
    pub archive_base_url: Option<String>,
    /// TLS settings for talking to executors (`https` peers: private CA, client certificate).
    pub client_tls: agent_rt::ClientTls,
    /// The object store of the `storage` transport (`None`: storage delegations fail to
    /// prepare with "not configured").
    pub object_store: Option<Arc<awcp_transports::storage::S3Store>>,
    /// The `git` transport's settings (`None`: repositories under `<state>/git`, served by
    /// this delegator on its archive listener, so `archive_base_url` must be set).
    pub git: Option<Arc<awcp_transports::git::GitDelegator>>,
}

impl DelegatorOptions {
    /// Options with defaults.
    pub fn new(transport: Arc<dyn DelegatorTransport>, state_dir: impl Into<PathBuf>) -> Self {
        DelegatorOptions {
            engine: DelegatorConfig::default(),
            transport,
            extra_transports: Vec::new(),
            state_dir: state_dir.into(),
            archive_base_url: None,
            client_tls: agent_rt::ClientTls::default(),
            object_store: None,
            git: None,
        }
    }
}

/// What to delegate.
#[derive(Clone, Debug)]
pub struct DelegateParams {
    /// The executor's AWCP URL (`http://host:port/awcp`).
    pub peer: String,
    /// The task.
    pub task: TaskSpec,
    /// Directories to lend.
    pub resources: Vec<ResourceSpec>,
    /// Lease length.
    pub ttl_seconds: u64,
    /// Access.
    pub access_mode: AccessMode,
    /// Snapshot policy.
    pub snapshot_mode: SnapshotMode,
    /// Credential for the executor.
    pub auth: Option<Auth>,
    /// The executor's dialect.
    pub dialect: Dialect,
    /// Data plane.
    pub transport: TransportKind,
    /// A caller-chosen id (else random).
    pub id: Option<DelegationId>,
    /// Lend secret-looking files (`.env`, private keys, credentials; WIRE.md §9) instead of
    /// refusing the delegation with `SENSITIVE_FILES`. Off by default.
    pub allow_sensitive: bool,
    /// Keep the delegation open after its first round for more
    /// ([`DelegatorHandle::continue_delegation`], [`DelegatorHandle::close`]; WIRE.md §17).
    /// Off by default.
    pub keep_open: bool,
}

impl DelegateParams {
    /// A single-directory delegation of `prompt` (the task's full instructions) with defaults
    /// (1 h, `rw`, auto snapshots, archive). Its description, the short label lists and logs
    /// show, is the prompt's first line (at most 80 characters) until [`Self::description`]
    /// sets one: the two are never positional, so they cannot be swapped by accident.
    pub fn new(
        peer: impl Into<String>,
        dir: impl Into<PathBuf>,
        prompt: impl Into<String>,
    ) -> Self {
        let prompt = prompt.into();
        DelegateParams {
            peer: peer.into(),
            task: TaskSpec {
                description: first_line(&prompt, 80),
                prompt,
            },
            resources: vec![ResourceSpec {
                name: awcp_proto::ResourceName::new("workspace").expect("valid"),
                source_path: dir.into(),
                mode: AccessMode::Rw,
            }],
            ttl_seconds: 3600,
            access_mode: AccessMode::Rw,
            snapshot_mode: SnapshotMode::Auto,
            auth: None,
            dialect: Dialect::Reference,
            transport: TransportKind::Archive,
            id: None,
            allow_sensitive: false,
            keep_open: false,
        }
    }

    /// Sets the task's description: the short label lists, logs and the executor's agent see
    /// beside the prompt.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.task.description = description.into();
        self
    }
}

/// The first non-empty line of `text`, trimmed, at most `max` characters (`…` when cut).
pub(crate) fn first_line(text: &str, max: usize) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    if line.chars().count() <= max {
        return line.to_owned();
    }
    let mut cut: String = line.chars().take(max.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod params_tests {
    use super::*;

    #[test]
    fn the_description_is_named_and_defaults_to_the_prompts_first_line() {
        let p = DelegateParams::new("http://e/awcp", "/w", "\n  Fix the loader.  \nDetails…");
        assert_eq!(p.task.description, "Fix the loader.");
        assert_eq!(p.task.prompt, "\n  Fix the loader.  \nDetails…");
        let p = p.description("Tidy CSV loader");
        assert_eq!(p.task.description, "Tidy CSV loader");
        let long = "x".repeat(200);
        let d = DelegateParams::new("http://e/awcp", "/w", long)
            .task
            .description;
        assert_eq!(d.chars().count(), 80);
        assert!(d.ends_with('…'));
    }
}

/// Why a call on the handle failed.
#[derive(Debug, thiserror::Error)]
pub enum DelegatorError {
    /// The engine refused the call.
    #[error("{0}")]
    Usage(#[from] awcp_proto::engine::UsageError),
    /// A protocol error (admission, executor decline...).
    #[error("{0}")]
    Protocol(ErrorInfo),
    /// The delegator task is gone.
    #[error("the delegator is shut down")]
    Closed,
    /// No delegation id could be drawn from the OS random source.
    #[error("{0}")]
    Random(#[from] crate::security::RandomUnavailable),
    /// Another delegator (another process, or another handle in this one) uses the state
    /// directory: two engines on one journal would resume, abandon and apply each other's
    /// delegations.
    #[error(
        "the state directory {} is in use by another delegator{}",
        .dir.display(),
        .holder.map(|p| format!(" (process {p})")).unwrap_or_default()
    )]
    StateDirInUse {
        /// The state directory.
        dir: PathBuf,
        /// The process id recorded by the holder, if readable.
        holder: Option<u32>,
    },
    /// The state directory cannot be used.
    #[error("state directory {}: {source}", .dir.display())]
    StateDir {
        /// The state directory.
        dir: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}
