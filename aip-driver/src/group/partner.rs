//! The group partner driver: [`GroupPartnerHandle`] joins groups (by the JSON-RPC `group`
//! method or through its inbox), runs one [`GroupMember`] engine per group on its own broker
//! connection, and lets the application move tasks.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use agent_rt::body::{full, ResponseBody};
use agent_rt::Runtime;
use aip_proto::group::wire::{AmqpConfig, GroupInfo, InvitationErrorBody, ServerConfig};
use aip_proto::group::{
    connection_failed, decode_inbox_message, inbox_queue_name, invitation_error, join_rpc_failed,
    join_rpc_joined, judge_inbox_invitation, queue_name, read_join_rpc, BrokerLink, GroupMember,
    InboxInvitation, InboxMessage, JoinRpc, LeaveReason, MemberConfig, MemberEvent, MemberOutput,
    Publish,
};
use aip_proto::{Dialect, Product, Timestamp, UsageError};
use futures::channel::{mpsc, oneshot};
use futures::StreamExt;
use serde_json::{json, Value};

use crate::group::amqp::{AmqpTls, Declare};
use crate::group::run::{Call, Out, Runner, Side};
use crate::group::GroupError;
use crate::now;

/// Decides whether to take an invitation (`true`: join).
pub type InvitationPolicy = Arc<dyn Fn(&GroupInfo) -> bool + Send + Sync>;

/// Everything a group partner needs.
#[derive(Clone)]
pub struct GroupPartnerOptions {
    /// This partner's AIC.
    pub partner_id: String,
    /// The dialect to publish in (v02 unless the group speaks v01.00).
    pub dialect: Dialect,
    /// Whether to take an invitation.
    pub policy: InvitationPolicy,
    /// Unacked deliveries per group.
    pub prefetch: u16,
    /// Act on task commands that mention nobody (see [`MemberConfig::act_on_unaddressed`]).
    pub act_on_unaddressed: Option<bool>,
    /// TLS for `amqps://` brokers: trusted CA and this partner's client certificate, which
    /// logs in with SASL EXTERNAL when an invitation carries no `accessToken`.
    pub broker_tls: AmqpTls,
}

impl GroupPartnerOptions {
    /// A v02 partner that takes every invitation.
    pub fn new(partner_id: &str) -> Self {
        GroupPartnerOptions {
            partner_id: partner_id.into(),
            dialect: Dialect::V2,
            policy: Arc::new(|_| true),
            prefetch: 64,
            act_on_unaddressed: None,
            broker_tls: AmqpTls::default(),
        }
    }
}

impl std::fmt::Debug for GroupPartnerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupPartnerOptions")
            .field("partner_id", &self.partner_id)
            .field("dialect", &self.dialect)
            .finish_non_exhaustive()
    }
}

/// What the partner reports, per group.
#[derive(Clone, Debug, PartialEq)]
pub enum GroupPartnerEvent {
    /// Joined a group (queue declared, bound, consumed; `connected:true` published).
    Joined {
        /// The group.
        group_id: String,
        /// Its leader.
        leader: String,
    },
    /// From a group's engine.
    Group {
        /// The group.
        group_id: String,
        /// The event.
        event: Box<MemberEvent>,
    },
    /// Left a group (queue deleted, connection closed).
    Left {
        /// The group.
        group_id: String,
        /// Why.
        reason: LeaveReason,
    },
    /// An invitation was refused (policy) or could not be taken (broker unreachable,
    /// expired).
    InvitationRefused {
        /// The group.
        group_id: String,
        /// Why.
        reason: String,
    },
    /// A group's broker connection came back (queue re-declared and consumed).
    Reconnected {
        /// The group.
        group_id: String,
    },
    /// A group's broker connection was lost; reconnecting.
    Disconnected {
        /// The group.
        group_id: String,
        /// Why.
        reason: String,
    },
}

/// What [`GroupPartnerEvent`]s arrive on.
pub type GroupPartnerEvents = mpsc::UnboundedReceiver<GroupPartnerEvent>;

pub(crate) struct MemberSide {
    engine: GroupMember,
    queue: String,
    group_id: String,
    buf: std::collections::VecDeque<Out<GroupPartnerEvent>>,
}

impl Side for MemberSide {
    type Event = GroupPartnerEvent;

    fn declarations(&self) -> Vec<Declare> {
        vec![Declare::GroupQueue {
            queue: self.queue.clone(),
            exchange: self.engine.config().exchange.clone(),
        }]
    }

    fn delivery(&mut self, now: Timestamp, _queue: &str, body: &[u8]) {
        self.engine.handle_delivery(now, body);
    }

    fn poll(&mut self) -> Option<Out<GroupPartnerEvent>> {
        if let Some(o) = self.buf.pop_front() {
            return Some(o);
        }
        let g = self.group_id.clone();
        match self.engine.poll_output()? {
            MemberOutput::Publish(p) => Some(Out::Publish(p)),
            MemberOutput::Event(event) => Some(Out::Event(GroupPartnerEvent::Group {
                group_id: g,
                event: Box::new(event),
            })),
            MemberOutput::Leave(reason) => {
                self.buf
                    .push_back(Out::Leave(vec![self.queue.clone()], None));
                Some(Out::Event(GroupPartnerEvent::Left {
                    group_id: g,
                    reason,
                }))
            }
        }
    }

    fn poll_timeout(&self) -> Option<Timestamp> {
        self.engine.poll_timeout()
    }

    fn timeout(&mut self, _now: Timestamp) {}

    fn reconnected(&mut self, now: Timestamp) {
        self.engine.reconnected(now);
    }

    fn link_lost(&mut self, now: Timestamp) {
        self.engine.link_lost(now);
    }

    fn connect_failed(&mut self, now: Timestamp) {
        self.engine.connect_failed(now);
    }

    fn connect_due(&self, now: Timestamp) -> bool {
        self.engine.connect_due(now)
    }

    fn link_event(up: bool, reason: String) -> GroupPartnerEvent {
        // The group id is filled in by the forwarding task.
        if up {
            GroupPartnerEvent::Reconnected {
                group_id: String::new(),
            }
        } else {
            GroupPartnerEvent::Disconnected {
                group_id: String::new(),
                reason,
            }
        }
    }
}

/// The inbox listener's side: invitations are handed to the join task; rejections are
/// published from here.
struct InboxSide {
    queue: String,
    invitations: mpsc::UnboundedSender<InboxInvitation>,
    out: std::collections::VecDeque<Publish>,
    /// The inbox has no engine of its own: its link's reconnect timer.
    link: BrokerLink,
}

impl Side for InboxSide {
    type Event = GroupPartnerEvent;

    fn declarations(&self) -> Vec<Declare> {
        vec![Declare::Inbox(self.queue.clone())]
    }

    fn delivery(&mut self, _now: Timestamp, _queue: &str, body: &[u8]) {
        if let Ok(InboxMessage::Invitation(inv)) = decode_inbox_message(body) {
            let _ = self.invitations.unbounded_send(inv);
        }
    }

    fn poll(&mut self) -> Option<Out<GroupPartnerEvent>> {
        self.out.pop_front().map(Out::Publish)
    }

    fn poll_timeout(&self) -> Option<Timestamp> {
        self.link.deadline()
    }

    fn timeout(&mut self, _now: Timestamp) {}

    fn reconnected(&mut self, _now: Timestamp) {
        self.link.connected();
    }

    fn link_lost(&mut self, now: Timestamp) {
        self.link.lost(now);
    }

    fn connect_failed(&mut self, now: Timestamp) {
        self.link.attempt_failed(now);
    }

    fn connect_due(&self, now: Timestamp) -> bool {
        self.link.connect_due(now)
    }

    fn link_event(up: bool, reason: String) -> GroupPartnerEvent {
        let group_id = "(inbox)".to_owned();
        if up {
            GroupPartnerEvent::Reconnected { group_id }
        } else {
            GroupPartnerEvent::Disconnected { group_id, reason }
        }
    }
}

type Groups = Arc<Mutex<BTreeMap<String, mpsc::UnboundedSender<Call<MemberSide>>>>>;

/// A cheap handle to a group partner.
#[derive(Clone)]
pub struct GroupPartnerHandle<R: Runtime> {
    rt: R,
    opts: GroupPartnerOptions,
    groups: Groups,
    events: mpsc::UnboundedSender<GroupPartnerEvent>,
    seed: Arc<std::sync::atomic::AtomicU64>,
}

impl<R: Runtime> std::fmt::Debug for GroupPartnerHandle<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupPartnerHandle")
            .field("partner_id", &self.opts.partner_id)
            .finish_non_exhaustive()
    }
}

/// Percent-encodes one URL component (user, password, vhost).
fn encode_component(s: &str) -> String {
    let mut o = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            o.push(b as char);
        } else {
            o.push_str(&format!("%{b:02X}"));
        }
    }
    o
}

/// `amqp://user:password@host:port/vhost` with the parts percent-encoded.
pub fn amqp_url(host: &str, port: u16, vhost: &str, user: &str, password: &str) -> String {
    format!(
        "amqp://{}:{}@{}:{port}/{}",
        encode_component(user),
        encode_component(password),
        host,
        encode_component(vhost)
    )
}

impl<R: Runtime> GroupPartnerHandle<R> {
    /// A partner with no group yet.
    pub fn new(rt: R, opts: GroupPartnerOptions) -> (Self, GroupPartnerEvents) {
        let (tx, rx) = mpsc::unbounded();
        let seed = crate::seed_or_random(0);
        let h = GroupPartnerHandle {
            rt,
            opts,
            groups: Arc::new(Mutex::new(BTreeMap::new())),
            events: tx,
            seed: Arc::new(std::sync::atomic::AtomicU64::new(seed)),
        };
        (h, rx)
    }

    /// This partner's AIC.
    pub fn partner_id(&self) -> &str {
        &self.opts.partner_id
    }

    /// The groups it is in.
    pub fn groups(&self) -> Vec<String> {
        self.groups
            .lock()
            .map(|g| g.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// Joins a group on the broker at `url`: declares and binds the member queue on the
    /// leader's exchange, consumes it, announces `connected:true`. Returns the queue name.
    pub async fn join(
        &self,
        url: &str,
        group: &GroupInfo,
        amqp: &AmqpConfig,
    ) -> Result<String, GroupError> {
        let me = self.opts.partner_id.clone();
        let gid = group.group_id.clone();
        if self.groups.lock().is_ok_and(|g| g.contains_key(&gid)) {
            return Ok(queue_name(&group.leader.aic, &gid, &me));
        }
        let mut cfg = MemberConfig::new(&me, &group.leader.aic, &gid);
        cfg.exchange = amqp.exchange.clone();
        cfg.dialect = self.opts.dialect;
        cfg.act_on_unaddressed = self.opts.act_on_unaddressed;
        cfg.id_seed = self
            .seed
            .fetch_add(0x9E37_79B9_7F4A_7C15, std::sync::atomic::Ordering::Relaxed);
        let queue = queue_name(&group.leader.aic, &gid, &me);
        let (ev_tx, mut ev_rx) = mpsc::unbounded();
        let runner = Runner {
            rt: self.rt.clone(),
            url: url.to_owned(),
            tls: self.opts.broker_tls.clone(),
            name: format!("agent-{me}"),
            prefetch: self.opts.prefetch,
            side: MemberSide {
                engine: GroupMember::joined(now(&self.rt), cfg),
                queue: queue.clone(),
                group_id: gid.clone(),
                buf: Default::default(),
            },
            events: ev_tx,
        };
        let first = runner.open().await?;
        let (tx, rx) = mpsc::unbounded();
        if let Ok(mut g) = self.groups.lock() {
            g.insert(gid.clone(), tx);
        }
        let _ = self.events.unbounded_send(GroupPartnerEvent::Joined {
            group_id: gid.clone(),
            leader: group.leader.aic.clone(),
        });
        self.rt.spawn(Box::pin(runner.run(first, rx)));
        // Forward the group's events, naming the group; forget it once its loop ends.
        let (events, groups, g2) = (self.events.clone(), self.groups.clone(), gid);
        self.rt.spawn(Box::pin(async move {
            while let Some(e) = ev_rx.next().await {
                let e = match e {
                    GroupPartnerEvent::Reconnected { .. } => GroupPartnerEvent::Reconnected {
                        group_id: g2.clone(),
                    },
                    GroupPartnerEvent::Disconnected { reason, .. } => {
                        GroupPartnerEvent::Disconnected {
                            group_id: g2.clone(),
                            reason,
                        }
                    }
                    other => other,
                };
                if let GroupPartnerEvent::Left { .. } = &e {
                    if let Ok(mut g) = groups.lock() {
                        g.remove(&g2);
                    }
                }
                let _ = events.unbounded_send(e);
            }
            if let Ok(mut g) = groups.lock() {
                g.remove(&g2);
            }
        }));
        Ok(queue)
    }

    /// Answers one JSON-RPC `group` request body (the invitation by RPC): joins, and
    /// replies with the shape the SDK 2.1.0 leader accepts, or with -32020 (refused by
    /// policy) / -32021 (could not connect) / -32600 (not a `group` request). What to answer
    /// is the engine's ([`read_join_rpc`]); this connects.
    pub async fn handle_join_rpc(&self, body: &[u8]) -> Vec<u8> {
        let (id, params) = match read_join_rpc(body, |g| (self.opts.policy)(g)) {
            JoinRpc::Answer {
                body,
                refused_group,
            } => {
                if let Some(group_id) = refused_group {
                    let _ = self
                        .events
                        .unbounded_send(GroupPartnerEvent::InvitationRefused {
                            group_id,
                            reason: "policy".into(),
                        });
                }
                return body;
            }
            JoinRpc::Join { id, params } => (id, params),
        };
        let url = match server_url(&params.server, &self.opts.broker_tls) {
            Ok(u) => u,
            Err(e) => return join_rpc_failed(&id, Value::String(e)),
        };
        match self.join(&url, &params.group, &params.amqp).await {
            Ok(_) => {
                let pid = format!("pid-{}", std::process::id());
                join_rpc_joined(&id, &self.opts.partner_id, &params, &pid)
            }
            Err(e) => join_rpc_failed(
                &id,
                json!({"host":params.server.host,"port":params.server.port,"reason":e.to_string()}),
            ),
        }
    }

    /// The `group` JSON-RPC endpoint as an [`agent_rt::Handler`] (every path, POST).
    pub fn join_handler(&self) -> agent_rt::Handler {
        let h = self.clone();
        agent_rt::Handler::new(move |req: http::Request<agent_rt::body::RequestBody>| {
            let h = h.clone();
            async move {
                let body = agent_rt::body::read_body(req.into_body(), 1 << 20)
                    .await
                    .map(|b| b.to_vec())
                    .unwrap_or_default();
                let out = h.handle_join_rpc(&body).await;
                http::Response::builder()
                    .status(200)
                    .header("content-type", "application/json")
                    .body::<ResponseBody>(full(out))
                    .expect("static headers are valid")
            }
        })
    }

    /// Listens on this partner's inbox (`inbox_{AIC}` on `inbox.topic`) at `url` and joins
    /// the groups it is invited to there (on the same broker), or sends the leader a
    /// `group-invitation-error` (expired, refused by policy, connection failed).
    pub async fn listen_inbox(&self, url: &str) -> Result<(), GroupError> {
        let (inv_tx, mut inv_rx) = mpsc::unbounded();
        let runner = Runner {
            rt: self.rt.clone(),
            url: url.to_owned(),
            tls: self.opts.broker_tls.clone(),
            name: format!("inbox-{}", self.opts.partner_id),
            prefetch: 16,
            side: InboxSide {
                queue: inbox_queue_name(&self.opts.partner_id),
                invitations: inv_tx,
                out: Default::default(),
                link: BrokerLink::new(),
            },
            events: self.events.clone(),
        };
        let first = runner.open().await?;
        let (tx, rx) = mpsc::unbounded::<Call<InboxSide>>();
        self.rt.spawn(Box::pin(runner.run(first, rx)));
        let h = self.clone();
        let url = url.to_owned();
        self.rt.spawn(Box::pin(async move {
            while let Some(inv) = inv_rx.next().await {
                let gid = inv.group.group_id.clone();
                let refuse = |reason: String, e: InvitationErrorBody| {
                    let p = invitation_error(&h.opts.partner_id, &inv, e);
                    let _ = tx.unbounded_send(Box::new(move |s: &mut InboxSide, _| {
                        s.out.push_back(p);
                    }));
                    let _ = h
                        .events
                        .unbounded_send(GroupPartnerEvent::InvitationRefused {
                            group_id: gid.clone(),
                            reason,
                        });
                };
                if let Err(r) = judge_inbox_invitation(now(&h.rt), &inv, |g| (h.opts.policy)(g)) {
                    refuse(r.reason, r.error);
                    continue;
                }
                if let Err(e) = h.join(&url, &inv.group, &inv.amqp).await {
                    refuse(
                        e.to_string(),
                        connection_failed(Value::String(e.to_string())),
                    );
                }
            }
        }));
        Ok(())
    }

    async fn call<T: Send + 'static>(
        &self,
        group_id: &str,
        f: impl FnOnce(&mut GroupMember, Timestamp) -> T + Send + 'static,
    ) -> Result<T, GroupError> {
        let tx = self
            .groups
            .lock()
            .ok()
            .and_then(|g| g.get(group_id).cloned())
            .ok_or_else(|| GroupError::NotInGroup(group_id.to_owned()))?;
        let (rtx, rrx) = oneshot::channel();
        let call: Call<MemberSide> = Box::new(move |s: &mut MemberSide, now| {
            let _ = rtx.send(f(&mut s.engine, now));
        });
        tx.unbounded_send(call).map_err(|_| GroupError::Stopped)?;
        rrx.await.map_err(|_| GroupError::Stopped)
    }

    async fn step(
        &self,
        group_id: &str,
        f: impl FnOnce(&mut GroupMember, Timestamp) -> Result<(), UsageError> + Send + 'static,
    ) -> Result<(), GroupError> {
        Ok(self.call(group_id, f).await??)
    }

    /// Accepts a started task.
    pub async fn accept(&self, group_id: &str, task_id: &str) -> Result<(), GroupError> {
        let t = task_id.to_owned();
        self.step(group_id, move |m, now| m.accept(now, &t)).await
    }

    /// Rejects a started task.
    pub async fn reject(
        &self,
        group_id: &str,
        task_id: &str,
        reason: &str,
    ) -> Result<(), GroupError> {
        let (t, r) = (task_id.to_owned(), reason.to_owned());
        self.step(group_id, move |m, now| m.reject(now, &t, &r))
            .await
    }

    /// accepted → working.
    pub async fn start_working(&self, group_id: &str, task_id: &str) -> Result<(), GroupError> {
        let t = task_id.to_owned();
        self.step(group_id, move |m, now| m.start_working(now, &t))
            .await
    }

    /// working → awaiting-input.
    pub async fn request_input(
        &self,
        group_id: &str,
        task_id: &str,
        question: &str,
    ) -> Result<(), GroupError> {
        let (t, q) = (task_id.to_owned(), question.to_owned());
        self.step(group_id, move |m, now| m.request_input(now, &t, &q))
            .await
    }

    /// working → awaiting-completion with products.
    pub async fn submit(
        &self,
        group_id: &str,
        task_id: &str,
        products: Vec<Product>,
    ) -> Result<(), GroupError> {
        let t = task_id.to_owned();
        self.step(group_id, move |m, now| m.submit(now, &t, products))
            .await
    }

    /// working → failed.
    pub async fn fail(
        &self,
        group_id: &str,
        task_id: &str,
        reason: &str,
    ) -> Result<(), GroupError> {
        let (t, r) = (task_id.to_owned(), reason.to_owned());
        self.step(group_id, move |m, now| m.fail(now, &t, &r)).await
    }

    /// Leaves a group on the partner's own initiative.
    pub async fn leave(&self, group_id: &str) -> Result<(), GroupError> {
        self.call(group_id, |m, now| m.leave(now, None)).await
    }

    /// Whether the partner is muted in a group.
    pub async fn is_muted(&self, group_id: &str) -> Result<bool, GroupError> {
        self.call(group_id, |m, _| m.is_muted()).await
    }
}

/// The `server` of a `group` RPC invitation telling partners to reach the broker at `url`:
/// for `amqp://user:password@host:port/vhost` (or `amqps://` with a user) its user and
/// password become the `accessToken` `"user:password"` (PLAIN); for an `amqps://` URL without
/// a user, or with `auth_mechanism=external`, there is no `accessToken`: partners log in with
/// their own client certificate (SASL EXTERNAL).
pub fn server_config(url: &str) -> Result<ServerConfig, String> {
    let u: lapin::uri::AMQPUri = url.parse()?;
    let tls = url.starts_with("amqps://");
    let external =
        tls && (!crate::group::amqp::names_user(url) || url.contains("auth_mechanism=external"));
    Ok(ServerConfig {
        host: u.authority.host,
        port: u.authority.port,
        vhost: u.vhost,
        access_token: (!external).then(|| {
            format!(
                "{}:{}",
                u.authority.userinfo.username, u.authority.userinfo.password
            )
        }),
    })
}

/// The broker URL of an RPC invitation's `server`. With an `accessToken` `"user:password"`:
/// PLAIN, over TLS (`amqps://`) when `tls` is configured. Without one: TLS with this
/// partner's client certificate and SASL EXTERNAL (an error if `tls` has no certificate).
pub fn server_url(s: &ServerConfig, tls: &AmqpTls) -> Result<String, String> {
    let configured = tls.has_identity() || tls.ca_pem.is_some();
    match s.plain_credentials()? {
        Some((u, p)) => {
            let url = amqp_url(&s.host, s.port, &s.vhost, u, p);
            Ok(if configured {
                url.replacen("amqp://", "amqps://", 1)
            } else {
                url
            })
        }
        None if tls.has_identity() => Ok(format!(
            "amqps://{}:{}/{}?auth_mechanism=external",
            s.host,
            s.port,
            encode_component(&s.vhost)
        )),
        None => Err(
            "no accessToken: the invitation asks for TLS with a client certificate (SASL EXTERNAL), \
             and this partner has none configured (broker_tls, or --amqp-cert/--amqp-key)"
                .into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_config_and_server_url_round_trip() {
        let s = server_config("amqp://guest:p%40ss@127.0.0.1:5999/%2f").unwrap();
        assert_eq!(
            (s.host.as_str(), s.port, s.vhost.as_str()),
            ("127.0.0.1", 5999, "/")
        );
        assert_eq!(s.access_token.as_deref(), Some("guest:p@ss"));
        let s = server_config(&amqp_url("h", 5672, "acps", "u", "p")).unwrap();
        let plain = AmqpTls::default();
        assert_eq!(server_url(&s, &plain).unwrap(), "amqp://u:p@h:5672/acps");
        assert!(server_config("http://nope").is_err());
    }

    fn with_cert() -> AmqpTls {
        AmqpTls {
            ca_pem: Some("CA".into()),
            identity: Some((b"cert".to_vec(), b"key".to_vec())),
        }
    }

    #[test]
    fn an_amqps_broker_without_a_user_invites_with_external_and_partners_log_in_with_their_certificate(
    ) {
        // The leader's URL names no user: the invitation carries no accessToken.
        let s = server_config("amqps://broker.example:5671/acps").unwrap();
        assert_eq!(s.access_token, None);
        assert_eq!((s.port, s.vhost.as_str()), (5671, "acps"));
        let s2 =
            server_config("amqps://u:p@broker.example:5671/acps?auth_mechanism=external").unwrap();
        assert_eq!(s2.access_token, None);
        // A partner with a certificate logs in with EXTERNAL; without one it says what is missing.
        assert_eq!(
            server_url(&s, &with_cert()).unwrap(),
            "amqps://broker.example:5671/acps?auth_mechanism=external"
        );
        let e = server_url(&s, &AmqpTls::default()).unwrap_err();
        assert!(e.contains("client certificate"), "{e}");
        // A token over TLS stays PLAIN, on amqps.
        let s = server_config("amqps://u:p@broker.example:5671/acps").unwrap();
        assert_eq!(s.access_token.as_deref(), Some("u:p"));
        assert_eq!(
            server_url(&s, &with_cert()).unwrap(),
            "amqps://u:p@broker.example:5671/acps"
        );
    }

    #[test]
    fn login_url_adds_external_only_for_a_userless_amqps_url_with_a_certificate() {
        let t = with_cert();
        assert_eq!(
            t.login_url("amqps://h:5671/acps"),
            "amqps://h:5671/acps?auth_mechanism=external"
        );
        assert_eq!(
            t.login_url("amqps://h:5671/acps?heartbeat=10"),
            "amqps://h:5671/acps?heartbeat=10&auth_mechanism=external"
        );
        for same in [
            "amqps://u:p@h:5671/acps",
            "amqps://h:5671/acps?auth_mechanism=plain",
            "amqp://h:5672/acps",
        ] {
            assert_eq!(t.login_url(same), same);
        }
        assert_eq!(
            AmqpTls::default().login_url("amqps://h:5671/acps"),
            "amqps://h:5671/acps"
        );
    }
}
