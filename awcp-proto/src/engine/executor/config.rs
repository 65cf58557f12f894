//! Executor policy: [`ExecutorConfig`] and which work roots are refused.

use std::time::Duration;

use crate::wire::{Feature, SandboxProfile, TransportKind};

use super::auth::RequiredAuth;

/// Executor policy. `Default` gives the reference's defaults (WIRE.md §9).
///
/// # Before production
///
/// The defaults are for trying it out on one machine, and say so:
/// - **`auth: None`**: any process that reaches the listener can delegate. Set
///   [`RequiredAuth`] for anything beyond a loopback address (`awcp-executor` refuses to listen
///   elsewhere without a token, and warns on loopback: `awcp_driver::security::executor_exposure`
///   is that check, for an embedding to call with its own listen address).
/// - **`work_root: /tmp/awcp/workspaces`**: shared by every executor started with the
///   default; the driver locks it, so a second default executor on the machine refuses to
///   start. Give each executor its own directory (not a system directory or `$HOME`: those
///   are refused).
/// - **`id_seed: 0`**: the engine draws no randomness; `0` means "the driver draws a random
///   seed at start" (`awcp_driver::ExecutorHandle::start` does), so snapshot ids differ
///   between executors. Set one only for reproducible tests.
#[derive(Clone, Debug)]
pub struct ExecutorConfig {
    /// Root of all work directories; an assignment's is `{work_root}/{delegationId}`.
    pub work_root: String,
    /// Most assignments alive at once (pending, active, or still releasing); more → `DECLINED`.
    pub max_concurrent: usize,
    /// Longest lease granted; longer requests are capped (ACCEPT `maxTtlSeconds`).
    pub max_ttl_seconds: u64,
    /// Whether `ro` delegations are allowed.
    pub allow_ro: bool,
    /// Whether `rw` delegations are allowed (if not, `rw` requests are downgraded to `ro`).
    pub allow_rw: bool,
    /// Retention used when the INVITE names none.
    pub default_retention: Duration,
    /// Cap on the retention a delegator may ask for.
    pub max_retention: Duration,
    /// Declared sandbox (all `true` by default, like the reference).
    pub sandbox: SandboxProfile,
    /// Accept every INVITE that passes policy; otherwise the application decides through
    /// `ExecutorEvent::InviteReceived`.
    pub auto_accept: bool,
    /// Credential required from delegators (see [`crate::engine::auth`] for which credential
    /// authorises which request).
    pub auth: Option<RequiredAuth>,
    /// How long an accepted assignment waits for START before it is dropped and its slot
    /// freed (never longer than its lease). Pending assignments hold slots, so this keeps
    /// stalled or abandoned INVITEs from exhausting `max_concurrent`.
    pub start_timeout: Duration,
    /// Transports this executor serves; the first is used when INVITE names none.
    pub transports: Vec<TransportKind>,
    /// Protocol extensions this executor supports.
    pub features: Vec<Feature>,
    /// How long a task may take to stop after `ExecutorOutput::StopTask` before its
    /// resources are released anyway.
    pub stop_grace: Duration,
    /// How long fetching START's archive from the URL the delegator names may take (10 min);
    /// longer is `TRANSPORT_ERROR` ([`SetupFailure::Fetch`](super::SetupFailure::Fetch)).
    pub archive_download_timeout: Duration,
    /// Events queued for one event-stream subscriber that is not reading them (1,024). One
    /// more closes that stream, as if the subscriber had gone
    /// ([`ExecutorInput::StreamClosed`](super::ExecutorInput)): a subscriber that stopped
    /// reading cannot grow the executor's memory. It loses at most progress: on subscribing
    /// again (the delegator reconnects, with `Last-Event-ID`) it gets what is still in the
    /// replay buffer ([`ExecutorConfig::replay_events`]) and later events, and a snapshot and
    /// the end are replayed to late subscribers.
    pub stream_queue_events: usize,
    /// Seed for snapshot ids.
    /// (`0`: the driver draws a random one at start.)
    pub id_seed: u64,
    /// The base URL delegators reach this executor at (`--public-url`, e.g. behind a proxy):
    /// snapshot URLs start there. `None`: each delegation's snapshot URLs start at the origin
    /// its delegator used (see [`ExecutorInput::Request::origin`](super::ExecutorInput)).
    /// [`Executor::set_public_url`](super::Executor::set_public_url) sets it later (after
    /// binding port 0).
    pub public_url: Option<String>,
    /// How long a multi-round assignment may stay idle (its round ended, no CONTINUE or
    /// CLOSE) before the executor closes it itself (15 min: longer than a delegator's own
    /// idle timeout, so the delegator normally decides).
    pub idle_timeout: Duration,
    /// Give rounds to delegators that negotiate no extensions at all, as the reference's `dev`
    /// branch expects (it has no negotiation): their rounds end with `round_done` and wait
    /// for CONTINUE or CLOSE, or the idle timeout. Off by default: a delegator of the
    /// reference's released branch does not know `round_done` and would wait for `done`
    /// until the idle timeout.
    pub reference_rounds: bool,
    /// How many of an assignment's last events are kept for a subscriber that resumes with
    /// `Last-Event-ID` (WIRE.md §4.6; 256). `0` keeps none: a resuming subscriber is told
    /// only what a late one is (the retained snapshot, `round_done` or terminal event).
    pub replay_events: usize,
    /// How many bytes of events (text fields, an inline archive's base64 above all) the
    /// replay buffer of one assignment holds at most (1 MiB). An event larger than this is not
    /// kept (a snapshot's archive can always be fetched with `GET …/result`).
    pub replay_bytes: usize,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        ExecutorConfig {
            work_root: "/tmp/awcp/workspaces".to_owned(),
            max_concurrent: 5,
            max_ttl_seconds: 3600,
            allow_ro: true,
            allow_rw: true,
            default_retention: Duration::from_millis(604_800_000),
            max_retention: Duration::from_millis(604_800_000),
            sandbox: SandboxProfile {
                cwd_only: Some(true),
                allow_network: Some(true),
                allow_exec: Some(true),
            },
            auto_accept: true,
            auth: None,
            start_timeout: Duration::from_secs(60),
            transports: vec![TransportKind::Archive],
            features: vec![
                Feature::DeltaSnapshots,
                Feature::ArchiveUrl,
                Feature::MultiRound,
                Feature::GitRootLayout,
            ],
            stop_grace: Duration::from_secs(10),
            archive_download_timeout: Duration::from_secs(600),
            stream_queue_events: 1024,
            id_seed: 0,
            public_url: None,
            idle_timeout: Duration::from_secs(900),
            reference_rounds: false,
            replay_events: 256,
            replay_bytes: 1 << 20,
        }
    }
}

impl ExecutorConfig {
    /// The bounds of each assignment's replay buffer.
    pub(crate) fn replay_limits(&self) -> super::event_log::ReplayLimits {
        super::event_log::ReplayLimits {
            events: self.replay_events,
            bytes: self.replay_bytes,
        }
    }

    /// The fewest connections the executor's server must accept at once so that every
    /// delegation it admits can reach it: a delegation holds its event stream open while it
    /// sends START (and later downloads and acknowledges snapshots), so up to two each, plus
    /// room for INVITEs and status requests. A server capped lower can deadlock: streams fill
    /// it while the STARTs they wait for queue behind them.
    pub fn connections_needed(&self) -> usize {
        self.max_concurrent.saturating_mul(2).saturating_add(64)
    }
}

/// Directories that must never be an executor's work root (AWCP v1 §7.1: "never accept a
/// system-sensitive path such as /home, /etc or ~").
const SYSTEM_DIRS: &[&str] = &[
    "/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib64", "/opt", "/proc", "/root",
    "/run", "/sbin", "/srv", "/sys", "/usr", "/var",
];

/// Why a work root whose permission bits are `mode` must not be used: one every user may
/// write to (`/tmp`, or any directory of mode `o+w`) lets another user plant or swap
/// directories where the executor puts delegated workspaces.
pub fn work_root_mode_refusal(work_root: &str, mode: u32) -> Option<String> {
    (mode & 0o002 != 0).then(|| {
        format!(
            "{work_root} is writable by every user; give the executor a directory of its own \
             (not /tmp), writable by its user only"
        )
    })
}

/// Why `work_root` (absolute, with symlinks resolved) must not be an executor's work root, if
/// it must not: the file-system root, a system directory, or the user's `home`.
pub fn work_root_refusal(work_root: &str, home: Option<&str>) -> Option<String> {
    let norm = |p: &str| {
        let t = p.trim_end_matches('/');
        if t.is_empty() {
            "/".to_owned()
        } else {
            t.to_owned()
        }
    };
    let root = norm(work_root);
    if SYSTEM_DIRS.contains(&root.as_str()) {
        return Some(format!(
            "{root} is a system directory; give the executor a directory of its own"
        ));
    }
    if home.map(norm).is_some_and(|h| h == root) {
        return Some(format!(
            "{root} is the home directory; give the executor a directory of its own"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::work_root_mode_refusal;

    #[test]
    fn a_world_writable_work_root_is_refused() {
        assert!(work_root_mode_refusal("/tmp", 0o1777).is_some());
        assert!(work_root_mode_refusal("/srv/w", 0o777).is_some());
        assert!(work_root_mode_refusal("/srv/w", 0o775).is_none());
        assert!(work_root_mode_refusal("/srv/w", 0o700).is_none());
    }
}
