//! What a delegator is configured with, and what an application asks it to delegate.

use super::*;

/// Delegator settings. `Default` gives the reference's defaults (WIRE.md §9).
#[derive(Clone, Debug)]
pub struct DelegatorConfig {
    /// Admission limits.
    pub admission: AdmissionLimits,
    /// How long the executor is asked to keep a finished assignment, and how long this engine
    /// keeps an ended delegation before forgetting it (7 days).
    pub retention: Duration,
    /// Extra time after lease expiry a delegation in `started` (executor still setting up) is
    /// given before it is abandoned with `EXPIRED`.
    pub setup_grace: Duration,
    /// SSE reconnect attempts before falling back to polling `GET …/result`.
    pub sse_reconnect_attempts: u32,
    /// Back-off unit between reconnect attempts (attempt n waits n × this).
    pub sse_backoff: Duration,
    /// Once reconnects are exhausted the delegator asks `GET …/result`; if the task is still
    /// running, it waits this long before opening the event stream again.
    pub result_poll_interval: Duration,
    /// How long the driver waits for the event stream's response headers before reporting
    /// `EventStreamClosed` (30 s).
    pub event_stream_open_timeout: Duration,
    /// The largest answer body to INVITE, START, ERROR, cancel or ack the driver reads
    /// (16 MiB); a larger one is a failed request.
    pub max_reply_bytes: u64,
    /// How long downloading a snapshot from the URL the executor names may take, and reading
    /// a `GET …/result` body, which may carry the snapshot inline (10 min).
    pub snapshot_download_timeout: Duration,
    /// How long an INVITE, START, ERROR, cancel, ack or `GET …/result` request may take
    /// before it is a failed request (30 s; for `GET …/result`, until the head of its answer);
    /// also how long a stopping driver lets the requests
    /// that tell an executor something final (ack, cancel, ERROR) finish.
    pub request_timeout: Duration,
    /// How many INVITE, START, ERROR, cancel and ack requests to one executor may be in
    /// flight at once (32; 0 is taken as 1); the others wait for one to finish, within their
    /// [`request_timeout`](Self::request_timeout). Over HTTP/1.1 each is a connection with
    /// buffers at both ends: a thousand delegations starting at once would otherwise open a
    /// thousand connections (event streams are not counted: each delegation keeps one).
    pub max_requests_per_executor: usize,
    /// The largest snapshot accepted, inline or downloaded (1 GiB).
    pub max_snapshot_bytes: u64,
    /// The largest `GET …/result` body read (2 GiB: it may carry inline snapshots as base64;
    /// the snapshot's text is decoded into a file as it arrives, the rest of the JSON may be
    /// [`max_reply_bytes`](Self::max_reply_bytes)).
    pub max_result_bytes: u64,
    /// Protocol extensions this delegator offers in INVITE.
    pub features: Vec<Feature>,
    /// This delegator runs an archive server executors can reach, so an executor that agrees
    /// to the `archive-url` extension gets its archive by a one-time URL
    /// ([`ArchiveDelivery::ByUrl`]) instead of inline. The drivers set it from whether an
    /// archive base URL is configured (`--serve-archives`). Default: false.
    pub serve_archives: bool,
    /// How long a multi-round delegation may stay `idle` (its round ended, no CONTINUE yet)
    /// before it is closed (5 min, as the reference's `idleTimeoutMs`).
    pub idle_timeout: Duration,
}

impl DelegatorConfig {
    /// The most base64 text an inline result (a `snapshot` event's `snapshotBase64`, a
    /// `done` event's `resultBase64`) may have: [`max_snapshot_bytes`](Self::max_snapshot_bytes)
    /// encoded. A driver reading an event stream drops an event with more.
    pub fn max_inline_result_text(&self) -> u64 {
        self.max_snapshot_bytes.div_ceil(3).saturating_mul(4)
    }
}

impl Default for DelegatorConfig {
    fn default() -> Self {
        DelegatorConfig {
            admission: AdmissionLimits::default(),
            retention: Duration::from_millis(604_800_000),
            setup_grace: Duration::from_secs(60),
            sse_reconnect_attempts: 3,
            sse_backoff: Duration::from_secs(2),
            result_poll_interval: Duration::from_secs(5),
            event_stream_open_timeout: Duration::from_secs(30),
            max_reply_bytes: 16 * 1024 * 1024,
            snapshot_download_timeout: Duration::from_secs(600),
            request_timeout: Duration::from_secs(30),
            max_requests_per_executor: 32,
            max_snapshot_bytes: 1024 * 1024 * 1024,
            max_result_bytes: 2 * 1024 * 1024 * 1024,
            features: vec![
                Feature::DeltaSnapshots,
                Feature::ArchiveUrl,
                Feature::GitRootLayout,
            ],
            serve_archives: false,
            idle_timeout: Duration::from_secs(300),
        }
    }
}

/// A request to delegate a workspace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DelegateRequest {
    /// The delegation id (the caller mints it, e.g. [`DelegationId::from_random`]).
    pub id: DelegationId,
    /// The executor's AWCP URL (`http://host:port/awcp`), opaque to the engine.
    pub peer: String,
    /// The dialect the executor speaks.
    pub dialect: Dialect,
    /// The task.
    pub task: TaskSpec,
    /// Requested lease length.
    pub ttl_seconds: u64,
    /// Requested access.
    pub access_mode: AccessMode,
    /// Exported resources (names and modes; the sources stay with the driver).
    pub resources: Vec<Resource>,
    /// Data-plane transport.
    pub transport: TransportKind,
    /// What to do with snapshots.
    pub snapshot_mode: SnapshotMode,
    /// Credential for the executor.
    pub auth: Option<Auth>,
    /// Lend secret-looking files (`.env`, private keys, …; WIRE.md §9) instead of refusing
    /// the delegation with `SENSITIVE_FILES`.
    pub allow_sensitive: bool,
    /// Keep the delegation open after its first round (WIRE.md §17): offer the `multi-round`
    /// extension, and when a round ends stay `idle` for
    /// [`Delegator::continue_delegation`] or [`Delegator::close`] instead of closing.
    pub keep_open: bool,
}
