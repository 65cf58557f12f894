//! The group partner driver: [`GroupPartnerHandle`] joins groups (by the JSON-RPC `group`
//! method or through its inbox), runs one [`GroupMember`] engine per group on its own broker
//! connection, and lets the application move tasks.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use agent_rt::body::{full, ResponseBody};
use agent_rt::Runtime;
use aip_proto::group::wire::{AmqpConfig, GroupInfo, InvitationErrorBody};
use aip_proto::group::{
    connection_failed, inbox_queue_name, invitation_error, join_rpc_failed, join_rpc_joined,
    judge_inbox_invitation, queue_name, read_join_rpc, BrokerLink, GroupMember, JoinRpc,
    LeaveReason, MemberConfig, MemberEvent,
};
use aip_proto::{Dialect, Product, Timestamp, UsageError};
use futures::channel::{mpsc, oneshot};
use futures::StreamExt;
use serde_json::{json, Value};

use crate::group::amqp::AmqpTls;
use crate::group::run::{Call, Runner};
use crate::group::GroupError;
use crate::now;

mod broker_url;
mod side;

pub use broker_url::{amqp_url, server_config, server_url};
use side::{InboxSide, MemberSide};

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
    /// Which requests to the `group` JSON-RPC endpoint are refused as ones a web page made a
    /// browser send (a page must not make a local partner join its broker).
    pub guard: aip_proto::http::RequestGuard,
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
            guard: aip_proto::http::RequestGuard::default(),
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
                if let Some(r) = crate::partner::http::refuse_web_request(&h.opts.guard, &req) {
                    return http::Response::builder()
                        .status(r.status)
                        .header("content-type", r.content_type)
                        .body::<ResponseBody>(full(r.body))
                        .expect("static headers are valid");
                }
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
