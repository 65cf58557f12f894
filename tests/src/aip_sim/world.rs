//! The simulated world: clocks, the network between the engines (with faults), and the main
//! loop. The applications are in [`super::apps`], the invariants in [`super::check`].

use std::collections::BTreeMap;
use std::time::Duration;

use aip_proto::engine::{CallId, DeliveryId, RequestId, RetryPolicy};
use aip_proto::leader::{Leader, LeaderConfig, LeaderInput, LeaderOutput, PartnerEndpoint};
use aip_proto::partner::{DeliveryOutcome, Partner, PartnerConfig, PartnerInput, PartnerOutput};
use aip_proto::{Dialect, Timestamp};

use super::apps::{Apps, Step};
use super::check::Checker;
use super::{AipSimConfig, Failure};
use crate::sim::rng::Rng;

/// Epoch of the simulated wall clocks (2025-09-01T04:00:00Z).
const BASE_MS: i64 = 1_756_699_200_000;
/// No run may last longer than this (virtual ms).
const HARD_LIMIT_MS: u64 = 3_600_000;
const MAX_STEPS: usize = 2_000_000;

/// What happens at a point of simulated time.
#[derive(Debug)]
pub(crate) enum Ev {
    ToPartner(usize, PartnerInput),
    ToLeader(LeaderInput),
    App(Step),
    /// Once a second while faults may happen.
    Tick,
}

/// What a finished run reports.
#[derive(Debug, Default)]
pub struct Summary {
    /// Steps taken.
    pub steps: usize,
    /// Simulated end (ms).
    pub end_ms: u64,
    /// Counters.
    pub stats: BTreeMap<&'static str, u64>,
    /// The trace (if traced).
    pub trace: String,
}

/// The world of one run.
pub struct World {
    pub(crate) cfg: AipSimConfig,
    pub(crate) rng: Rng,
    /// World time (ms since the start).
    pub now: u64,
    /// Clock offsets (ms): index 0 the leader, then the partners.
    offsets: Vec<i64>,
    /// The leader.
    pub leader: Leader,
    /// The partners.
    pub partners: Vec<Partner>,
    queue: BTreeMap<(u64, u64), Ev>,
    seq: u64,
    /// Partner request → leader call.
    pub(crate) calls: BTreeMap<(usize, RequestId), CallId>,
    /// Leader call → partner requests (a duplicated request has two).
    pub(crate) call_reqs: BTreeMap<CallId, Vec<(usize, RequestId)>>,
    /// Open streams at the partners, and the time the last frame of each is delivered (FIFO).
    pub(crate) streams: BTreeMap<(usize, RequestId), u64>,
    /// Duplicated copies of requests: the partner handles them, but nobody reads the answer.
    dups: std::collections::BTreeSet<(usize, RequestId)>,
    /// Leader receiver request → the partner's delivery.
    receiver: BTreeMap<RequestId, (usize, DeliveryId)>,
    pub(crate) receiver_down_until: u64,
    next_request: u64,
    /// Faults stop here (then the run settles).
    fault_end: u64,
    pub(crate) apps: Apps,
    /// The invariant checker (its counters are readable after a run).
    pub check: Checker,
    /// Counters.
    pub stats: BTreeMap<&'static str, u64>,
    trace: Vec<String>,
}

impl World {
    /// A world for `cfg`.
    pub fn new(cfg: AipSimConfig) -> Self {
        let rng = Rng::new(cfg.seed);
        let mut leader = Leader::new(LeaderConfig {
            leader_id: "leader".into(),
            calls: RetryPolicy {
                attempts: 3,
                first_backoff: Duration::from_secs(1),
                max_backoff: Duration::from_secs(4),
                attempt_timeout: Duration::from_secs(5),
            },
            poll_interval: Some(Duration::from_secs(3)),
            fallback_poll_interval: Duration::from_secs(8),
            restream: RetryPolicy {
                attempts: 3,
                first_backoff: Duration::from_millis(500),
                max_backoff: Duration::from_secs(2),
                attempt_timeout: Duration::from_secs(5),
            },
            stream_idle_timeout: Duration::from_secs(30),
            task_timeout: None,
            retention: Duration::from_secs(20),
            notification_url: Some("http://leader/notify".into()),
            id_seed: cfg.seed,
            ..LeaderConfig::default()
        });
        let partners = cfg
            .partners
            .iter()
            .enumerate()
            .map(|(i, &(v1, auto, buffer))| {
                let dialect = if v1 { Dialect::V1 } else { Dialect::V2 };
                leader.add_partner(
                    format!("p{i}"),
                    PartnerEndpoint {
                        url: format!("http://p{i}/aip/rpc"),
                        dialect,
                    },
                );
                Partner::new(PartnerConfig {
                    partner_id: format!("p{i}"),
                    auto_accept: auto,
                    default_response_timeout: Duration::from_secs(2),
                    default_awaiting_input_timeout: Some(Duration::from_secs(30)),
                    default_awaiting_completion_timeout: Some(Duration::from_secs(30)),
                    retention: Duration::from_secs(20),
                    stream_buffer: buffer,
                    keepalive: Some(Duration::from_secs(5)),
                    notification_retry: RetryPolicy {
                        attempts: 4,
                        first_backoff: Duration::from_millis(500),
                        max_backoff: Duration::from_secs(4),
                        attempt_timeout: Duration::from_secs(3),
                    },
                    id_seed: cfg.seed.wrapping_add(i as u64 + 1),
                    ..PartnerConfig::default()
                })
            })
            .collect::<Vec<_>>();
        let fault_end = cfg
            .tasks
            .iter()
            .map(|t| t.at_ms + t.deadline_ms)
            .max()
            .unwrap_or(0)
            + 5_000;
        let n = partners.len();
        World {
            apps: Apps::new(&cfg),
            check: Checker::default(),
            rng,
            now: 0,
            offsets: vec![0; n + 1],
            leader,
            partners,
            queue: BTreeMap::new(),
            seq: 0,
            calls: BTreeMap::new(),
            call_reqs: BTreeMap::new(),
            streams: BTreeMap::new(),
            dups: Default::default(),
            receiver: BTreeMap::new(),
            receiver_down_until: 0,
            next_request: 0,
            fault_end,
            stats: BTreeMap::new(),
            trace: Vec::new(),
            cfg,
        }
    }

    /// The clock of node `n` (0: leader, 1..: partners).
    pub(crate) fn clock(&self, n: usize) -> Timestamp {
        let ms = BASE_MS + self.now as i64 + self.offsets[n];
        Timestamp::from_unix_millis(ms.max(0) as u64)
    }

    fn world_time(&self, n: usize, t: Timestamp) -> u64 {
        let ms = t.as_unix_millis() as i64 - BASE_MS - self.offsets[n];
        ms.max(self.now as i64) as u64
    }

    pub(crate) fn at(&mut self, t: u64, ev: Ev) {
        self.seq += 1;
        self.queue.insert((t, self.seq), ev);
    }

    pub(crate) fn stat(&mut self, k: &'static str) {
        *self.stats.entry(k).or_insert(0) += 1;
    }

    pub(crate) fn log(&mut self, f: impl FnOnce() -> String) {
        if self.cfg.trace {
            let line = format!("{:>7} {}", self.now, f());
            self.trace.push(line);
        }
    }

    /// Network latency of one message.
    fn latency(&mut self) -> u64 {
        if self.rng.chance(self.cfg.faults.slow) {
            self.stat("slow message");
            self.rng.range(1_000, 8_000)
        } else {
            self.rng.range(1, 40)
        }
    }

    fn fail(&self, message: String) -> Box<Failure> {
        Box::new(Failure {
            seed: self.cfg.seed,
            at_ms: self.now,
            message,
            trace_tail: self.trace.iter().rev().take(60).rev().cloned().collect(),
        })
    }

    /// Runs to the end and checks every invariant.
    pub fn run(&mut self) -> Result<Summary, Box<Failure>> {
        for (i, t) in self.cfg.tasks.clone().iter().enumerate() {
            self.at(t.at_ms, Ev::App(Step::LeaderStart(i)));
        }
        self.at(1_000, Ev::Tick);
        let mut steps = 0;
        loop {
            steps += 1;
            self.drain().map_err(|m| self.fail(m))?;
            if steps > MAX_STEPS {
                return Err(self.fail("too many steps".into()));
            }
            let mut wakes: Vec<(u64, usize)> = Vec::new();
            if let Some(t) = self.leader.poll_timeout() {
                wakes.push((self.world_time(0, t), 0));
            }
            for (i, p) in self.partners.iter().enumerate() {
                if let Some(t) = p.poll_timeout() {
                    wakes.push((self.world_time(i + 1, t), i + 1));
                }
            }
            let head = self.queue.keys().next().map(|(t, _)| *t);
            let next = wakes.iter().map(|(t, _)| *t).chain(head).min();
            let Some(next) = next else { break };
            if next > HARD_LIMIT_MS {
                return Err(self.fail(format!("the run does not settle (next wake at {next} ms)")));
            }
            self.now = self.now.max(next);
            if head.is_some_and(|h| h <= self.now) {
                let Some((_, ev)) = self.queue.pop_first() else {
                    break;
                };
                self.apply(ev).map_err(|m| self.fail(m))?;
            } else {
                for (t, n) in wakes {
                    if t <= self.now {
                        let c = self.clock(n);
                        match n {
                            0 => {
                                self.check.leader_clock(c.as_unix_millis(), self.now, false);
                                self.leader.handle_timeout(c)
                            }
                            i => self.partners[i - 1].handle_timeout(c),
                        }
                    }
                }
            }
        }
        self.drain().map_err(|m| self.fail(m))?;
        let check = std::mem::take(&mut self.check);
        let done = check.finish(self);
        self.check = check;
        done.map_err(|m| self.fail(m))?;
        Ok(Summary {
            steps,
            end_ms: self.now,
            stats: self.stats.clone(),
            trace: self.trace.join("\n"),
        })
    }

    /// The trace so far.
    pub fn trace_text(&self) -> String {
        self.trace.join("\n")
    }

    fn apply(&mut self, ev: Ev) -> Result<(), String> {
        match ev {
            Ev::ToPartner(p, input) => {
                self.log(|| format!("p{p} <- {}", brief_partner(&input)));
                let c = self.clock(p + 1);
                self.partners[p].handle(c, input);
            }
            Ev::ToLeader(input) => {
                self.log(|| format!("L <- {}", brief_leader(&input)));
                let c = self.clock(0);
                self.check.leader_clock(c.as_unix_millis(), self.now, false);
                self.leader.handle(c, input);
            }
            Ev::App(step) => self.app_step(step),
            Ev::Tick => self.tick(),
        }
        Ok(())
    }

    /// Random faults, once a second.
    fn tick(&mut self) {
        let f = self.cfg.faults.clone();
        if self.rng.chance(f.stream_cut) && !self.streams.is_empty() {
            let i = self.rng.below(self.streams.len() as u64) as usize;
            if let Some(&(p, r)) = self.streams.keys().nth(i) {
                self.stat("stream cut");
                self.log(|| format!("FAULT cut stream p{p}/{}", r.0));
                self.cut_stream(p, r);
            }
        }
        if self.rng.chance(f.receiver_down) {
            self.stat("receiver down");
            self.receiver_down_until = self.now + self.rng.range(1_000, 20_000);
            self.log(|| "FAULT notification receiver down".into());
        }
        if self.rng.chance(f.clock_jump) {
            let n = self.rng.below(self.offsets.len() as u64) as usize;
            let delta = if self.rng.chance(800) {
                self.rng.range(1_000, 60_000) as i64
            } else {
                -(self.rng.range(1_000, 5_000) as i64)
            };
            self.stat("clock jump");
            self.offsets[n] += delta;
            if n == 0 {
                let c = self.leader_clock_ms();
                self.check.leader_clock(c, self.now, true);
            }
            self.log(|| format!("FAULT clock of node {n} jumps {delta} ms"));
        }
        if self.now + 1_000 < self.fault_end {
            self.at(self.now + 1_000, Ev::Tick);
        }
    }

    /// Cuts a stream: both ends notice; frames in flight are lost.
    pub(crate) fn cut_stream(&mut self, p: usize, r: RequestId) {
        self.streams.remove(&(p, r));
        self.at(
            self.now,
            Ev::ToPartner(p, PartnerInput::StreamClosed { request: r }),
        );
        if let Some(call) = self.calls.remove(&(p, r)) {
            self.call_reqs.remove(&call);
            let t = self.now + 1;
            self.at(t, Ev::ToLeader(LeaderInput::StreamEnded { call }));
        }
    }

    /// Executes every output of every engine, checking events as they come.
    fn drain(&mut self) -> Result<(), String> {
        loop {
            let mut any = false;
            while let Some(o) = self.leader.poll_output() {
                any = true;
                self.leader_output(o)?;
            }
            for p in 0..self.partners.len() {
                while let Some(o) = self.partners[p].poll_output() {
                    any = true;
                    self.partner_output(p, o)?;
                }
            }
            if !any {
                return Ok(());
            }
        }
    }

    fn leader_output(&mut self, o: LeaderOutput) -> Result<(), String> {
        match o {
            LeaderOutput::Send { call, request } => {
                let p = partner_of(&request.url)
                    .ok_or_else(|| format!("send to unknown URL {}", request.url))?;
                self.log(|| {
                    format!(
                        "L -> p{p} {} #{}",
                        request.url.rsplit("/aip/").next().unwrap_or(""),
                        call.0
                    )
                });
                if self.rng.chance(self.cfg.faults.req_loss) {
                    self.stat("request lost");
                    return Ok(());
                }
                let copies = if self.rng.chance(self.cfg.faults.dup) {
                    2
                } else {
                    1
                };
                for copy in 0..copies {
                    self.next_request += 1;
                    let r = RequestId(self.next_request);
                    if copy == 0 {
                        self.calls.insert((p, r), call);
                        self.call_reqs.entry(call).or_default().push((p, r));
                    } else {
                        self.stat("request duplicated");
                        self.dups.insert((p, r));
                    }
                    let t = self.now + self.latency();
                    self.at(
                        t,
                        Ev::ToPartner(
                            p,
                            PartnerInput::Request {
                                request: r,
                                body: request.body.clone(),
                            },
                        ),
                    );
                }
            }
            LeaderOutput::Abort { call } => {
                for (p, r) in self.call_reqs.remove(&call).unwrap_or_default() {
                    self.calls.remove(&(p, r));
                    if self.streams.remove(&(p, r)).is_some() {
                        let t = self.now + self.latency();
                        self.at(
                            t,
                            Ev::ToPartner(p, PartnerInput::StreamClosed { request: r }),
                        );
                    }
                }
            }
            LeaderOutput::RespondNotification { request, status } => {
                if status == 200 {
                    self.check.receiver_took += 1;
                }
                if let Some((p, delivery)) = self.receiver.remove(&request) {
                    if self.rng.chance(self.cfg.faults.notify_resp_loss) {
                        self.stat("notification answer lost");
                        return Ok(());
                    }
                    let t = self.now + self.latency();
                    let outcome = DeliveryOutcome::Status(status);
                    self.at(
                        t,
                        Ev::ToPartner(p, PartnerInput::NotificationResult { delivery, outcome }),
                    );
                }
            }
            LeaderOutput::Event(e) => {
                self.log(|| format!("L event {e:?}").chars().take(220).collect());
                let check = std::mem::take(&mut self.check);
                let mut check = check;
                let r = check.leader_event(self, &e);
                self.check = check;
                r?;
                self.leader_app(&e);
            }
        }
        Ok(())
    }

    fn partner_output(&mut self, p: usize, o: PartnerOutput) -> Result<(), String> {
        if let PartnerOutput::Respond { request, .. }
        | PartnerOutput::StartStream { request }
        | PartnerOutput::StreamData { request, .. }
        | PartnerOutput::EndStream { request } = &o
        {
            if self.dups.contains(&(p, *request)) {
                // Nobody reads a duplicate's answer; its stream's reader is gone at once.
                match o {
                    PartnerOutput::Respond { request, .. }
                    | PartnerOutput::EndStream { request } => {
                        self.dups.remove(&(p, request));
                    }
                    PartnerOutput::StartStream { request } => {
                        self.dups.remove(&(p, request));
                        let t = self.now + 1;
                        self.at(t, Ev::ToPartner(p, PartnerInput::StreamClosed { request }));
                    }
                    _ => {}
                }
                return Ok(());
            }
        }
        match o {
            PartnerOutput::Respond { request, response } => {
                let Some(call) = self.calls.remove(&(p, request)) else {
                    return Ok(());
                };
                if self.rng.chance(self.cfg.faults.resp_loss) {
                    self.stat("response lost");
                    return Ok(());
                }
                let t = self.now + self.latency();
                let input = LeaderInput::Response {
                    call,
                    status: response.status,
                    content_type: Some(response.content_type.into()),
                    body: response.body,
                };
                self.at(t, Ev::ToLeader(input));
            }
            PartnerOutput::StartStream { request } => {
                if self.calls.contains_key(&(p, request)) {
                    self.streams.insert((p, request), self.now);
                    self.stat("stream opened");
                }
            }
            PartnerOutput::StreamData { request, data } => {
                let Some(&call) = self.calls.get(&(p, request)) else {
                    return Ok(());
                };
                // One connection is ordered: frames never overtake each other. Bytes arrive
                // in random pieces.
                let mut t = self.now + self.latency();
                let last = self.streams.get(&(p, request)).copied().unwrap_or(0);
                t = t.max(last);
                let mut rest = &data[..];
                while !rest.is_empty() {
                    let n = if self.rng.chance(300) {
                        self.rng.range(1, rest.len() as u64) as usize
                    } else {
                        rest.len()
                    };
                    let (piece, tail) = rest.split_at(n);
                    self.at(
                        t,
                        Ev::ToLeader(LeaderInput::StreamChunk {
                            call,
                            data: piece.to_vec(),
                        }),
                    );
                    rest = tail;
                }
                self.streams.insert((p, request), t);
            }
            PartnerOutput::EndStream { request } => {
                let last = self.streams.remove(&(p, request)).unwrap_or(self.now);
                if let Some(call) = self.calls.remove(&(p, request)) {
                    self.call_reqs.remove(&call);
                    let t = (self.now + self.latency()).max(last);
                    self.at(t, Ev::ToLeader(LeaderInput::StreamEnded { call }));
                }
            }
            PartnerOutput::Notify {
                delivery,
                token,
                body,
                url,
            } => {
                if url != "http://leader/notify" {
                    return Err(format!("notification to unexpected URL {url}"));
                }
                let t = self.now + self.latency();
                if self.now < self.receiver_down_until {
                    let outcome = DeliveryOutcome::Failed("connection refused".into());
                    self.at(
                        t,
                        Ev::ToPartner(p, PartnerInput::NotificationResult { delivery, outcome }),
                    );
                    return Ok(());
                }
                self.next_request += 1;
                let r = RequestId(self.next_request);
                self.receiver.insert(r, (p, delivery));
                self.at(
                    t,
                    Ev::ToLeader(LeaderInput::Notification {
                        request: r,
                        token: Some(token),
                        body,
                    }),
                );
            }
            PartnerOutput::Event(e) => {
                self.log(|| format!("p{p} event {e:?}").chars().take(220).collect());
                let mut check = std::mem::take(&mut self.check);
                let r = check.partner_event(self, p, &e);
                self.check = check;
                r?;
                self.partner_app(p, &e);
            }
        }
        Ok(())
    }
}

fn partner_of(url: &str) -> Option<usize> {
    let host = url.strip_prefix("http://p")?;
    host.split('/').next()?.parse().ok()
}

fn brief_partner(i: &PartnerInput) -> String {
    match i {
        PartnerInput::Request { request, body } => {
            format!(
                "request {} {}",
                request.0,
                String::from_utf8_lossy(&body[..body.len().min(160)])
            )
        }
        other => format!("{other:?}"),
    }
}

fn brief_leader(i: &LeaderInput) -> String {
    let cut = |b: &[u8]| String::from_utf8_lossy(&b[..b.len().min(160)]).into_owned();
    match i {
        LeaderInput::Response {
            call, status, body, ..
        } => format!("response #{} {status} {}", call.0, cut(body)),
        LeaderInput::StreamChunk { call, data } => format!("chunk #{} {}", call.0, cut(data)),
        LeaderInput::Notification { body, .. } => format!("notification {}", cut(body)),
        other => format!("{other:?}"),
    }
}
