//! The group leader driver: [`GroupLeaderHandle`].

use std::collections::BTreeMap;
use std::time::Duration;

use core::convert::Infallible;

use agent_rt::{ClientTls, HttpClient, Runtime};
use aip_proto::drive::Engine;
use aip_proto::group::wire::ServerConfig;
use aip_proto::group::{
    Connection, GroupCommand, GroupLeader, LeaderConfig, LeaderEvent, LeaderOutput, LinkInput,
    MgmtKind,
};
use aip_proto::{Mentions, TaskResult, TaskState, Timestamp, UsageError};
use bytes::Bytes;
use futures::channel::{mpsc, oneshot};

use crate::group::amqp::{AmqpTls, Declare};
use crate::group::run::{Call, Out, Runner, Side};
use crate::group::GroupError;
use crate::now;

/// Everything a group leader needs.
#[derive(Clone, Debug)]
pub struct GroupLeaderOptions {
    /// The broker: `amqp://user:password@host:port/vhost`, or `amqps://host:port/vhost` with a
    /// client certificate in [`Self::broker_tls`] (SASL EXTERNAL).
    pub broker_url: String,
    /// TLS for an `amqps://` broker: trusted CA and this leader's client certificate.
    pub broker_tls: AmqpTls,
    /// The group (leader id, group id, dialect, status deadline, invitation lifetime).
    pub engine: LeaderConfig,
    /// Unacked deliveries the broker may push at once.
    pub prefetch: u16,
    /// TLS for the `group` JSON-RPC invitation to `https` partners.
    pub client_tls: ClientTls,
    /// Deadline of one RPC invitation.
    pub invite_timeout: Duration,
}

impl GroupLeaderOptions {
    /// Defaults for a group on `broker_url`.
    pub fn new(broker_url: &str, engine: LeaderConfig) -> Self {
        GroupLeaderOptions {
            broker_url: broker_url.into(),
            broker_tls: AmqpTls::default(),
            engine,
            prefetch: 256,
            client_tls: ClientTls::default(),
            invite_timeout: Duration::from_secs(30),
        }
    }
}

/// What the leader reports.
#[derive(Clone, Debug, PartialEq)]
pub enum GroupLeaderEvent {
    /// From the engine.
    Group(LeaderEvent),
    /// The broker connection came back (everything re-declared).
    Reconnected,
    /// The broker connection was lost; reconnecting.
    Disconnected(String),
}

/// What [`GroupLeaderEvent`]s arrive on.
pub type GroupLeaderEvents = mpsc::UnboundedReceiver<GroupLeaderEvent>;

/// A member as [`GroupLeaderHandle::members`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberSnapshot {
    /// Connection.
    pub connection: Connection,
    /// Muted.
    pub muted: bool,
}

pub(crate) struct LeaderSide {
    engine: GroupLeader,
    leave_after: Option<(Vec<String>, oneshot::Sender<()>)>,
}

impl Engine for LeaderSide {
    type Input = LinkInput;
    type Output = Out<GroupLeaderEvent>;
    type Time = Timestamp;
    type Refusal = Infallible;

    fn handle(&mut self, now: Timestamp, input: LinkInput) -> Result<(), Infallible> {
        Engine::handle(&mut self.engine, now, input)
    }

    fn handle_timeout(&mut self, now: Timestamp) {
        self.engine.handle_timeout(now);
    }

    fn poll_output(&mut self) -> Option<Out<GroupLeaderEvent>> {
        match self.engine.poll_output() {
            Some(LeaderOutput::Publish(p)) => Some(Out::Publish(p)),
            Some(LeaderOutput::Event(e)) => Some(Out::Event(GroupLeaderEvent::Group(e))),
            None => self
                .leave_after
                .take()
                .map(|(q, done)| Out::Leave(q, Some(done))),
        }
    }

    fn next_deadline(&self) -> Option<Timestamp> {
        self.engine.poll_timeout()
    }
}

impl Side<GroupLeaderEvent> for LeaderSide {
    fn declarations(&self) -> Vec<Declare> {
        vec![
            Declare::GroupExchange(self.engine.exchange()),
            Declare::GroupQueue {
                queue: self.engine.queue(),
                exchange: self.engine.exchange(),
            },
            Declare::Inbox(self.engine.inbox_queue()),
        ]
    }

    fn connect_due(&self, now: Timestamp) -> bool {
        self.engine.connect_due(now)
    }

    fn link_event(up: bool, detail: String) -> GroupLeaderEvent {
        if up {
            GroupLeaderEvent::Reconnected
        } else {
            GroupLeaderEvent::Disconnected(detail)
        }
    }
}

/// A cheap handle to a running group leader. The group lives until every handle is dropped
/// (or [`GroupLeaderHandle::disband`]).
#[derive(Clone)]
pub struct GroupLeaderHandle<R: Runtime> {
    tx: mpsc::UnboundedSender<Call<LeaderSide>>,
    client: HttpClient<R>,
    invite_timeout: Duration,
    exchange: String,
    queue: String,
}

impl<R: Runtime> std::fmt::Debug for GroupLeaderHandle<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GroupLeaderHandle")
            .field("exchange", &self.exchange)
            .finish_non_exhaustive()
    }
}

impl<R: Runtime> GroupLeaderHandle<R> {
    /// Connects, declares the group exchange, the leader's queue and inbox, and starts the
    /// engine task on `rt`. A first connection failure is returned; later ones are retried.
    ///
    /// An `id_seed` of 0 (the default) is replaced by a random one ([`crate::seed_or_random`]).
    pub async fn spawn(
        rt: R,
        mut opts: GroupLeaderOptions,
    ) -> Result<(Self, GroupLeaderEvents), GroupError> {
        opts.engine.id_seed = crate::seed_or_random(opts.engine.id_seed);
        let start = now(&rt);
        let engine = GroupLeader::new(start, opts.engine)?;
        let (events_tx, events_rx) = mpsc::unbounded();
        let exchange = engine.exchange();
        let queue = engine.queue();
        let runner = Runner {
            rt: rt.clone(),
            url: opts.broker_url,
            tls: opts.broker_tls,
            name: format!("leader-{}", engine.config().leader_id),
            prefetch: opts.prefetch,
            side: LeaderSide {
                engine,
                leave_after: None,
            },
            events: events_tx,
        };
        let first = runner.open().await?;
        let (tx, rx) = mpsc::unbounded();
        rt.spawn(Box::pin(runner.run(first, rx)));
        let handle = GroupLeaderHandle {
            tx,
            client: HttpClient::new(rt, opts.client_tls),
            invite_timeout: opts.invite_timeout,
            exchange,
            queue,
        };
        Ok((handle, events_rx))
    }

    /// The group exchange.
    pub fn exchange(&self) -> &str {
        &self.exchange
    }

    /// The leader's queue.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    async fn call<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut GroupLeader, Timestamp) -> T + Send + 'static,
    ) -> Result<T, GroupError> {
        let (tx, rx) = oneshot::channel();
        let call: Call<LeaderSide> = Box::new(move |s: &mut LeaderSide, now| {
            let _ = tx.send(f(&mut s.engine, now));
        });
        self.tx
            .unbounded_send(call)
            .map_err(|_| GroupError::Stopped)?;
        rx.await.map_err(|_| GroupError::Stopped)
    }

    /// Invites `partner` with the JSON-RPC `group` method at `rpc_url` (its group RPC
    /// endpoint) telling it to reach the broker at `server`. Resolves once the partner
    /// answered: `Ok` when it joined, [`GroupError::Rejected`] with its error otherwise.
    pub async fn invite_rpc(
        &self,
        partner: &str,
        rpc_url: &str,
        server: ServerConfig,
    ) -> Result<(), GroupError> {
        let p = partner.to_owned();
        let body = self
            .call(move |e, now| e.invite_rpc(now, &p, server))
            .await??;
        let reply = self
            .client
            .request(
                http::Method::POST,
                rpc_url,
                &[],
                Some(Bytes::from(body)),
                self.invite_timeout,
                1 << 20,
            )
            .await;
        let body = match reply {
            Ok((_, b)) => b.to_vec(),
            Err(e) => {
                // The engine learns of the failure as a rejection with a transport reason.
                serde_json::to_vec(&serde_json::json!({"jsonrpc":"2.0","id":null,
                    "error":{"code":-32021,"message":format!("invitation not delivered: {e}")}}))
                .unwrap_or_default()
            }
        };
        let p = partner.to_owned();
        self.call(move |e, now| {
            e.handle_invite_reply(now, &p, &body);
            match e.member(&p).map(|m| m.connection) {
                Some(Connection::Connected) => Ok(()),
                _ => Err(GroupError::Rejected(
                    serde_json::from_slice::<serde_json::Value>(&body)
                        .ok()
                        .and_then(|v| v.get("error").cloned())
                        .map(|e| e.to_string())
                        .unwrap_or_default(),
                )),
            }
        })
        .await?
    }

    /// Invites `partner` through its inbox (`inbox.topic`, key `inbox_{partner}`). The
    /// outcome arrives as events (`MemberJoined`, `InvitationRejected`, `InvitationExpired`).
    /// Returns the invitation token.
    pub async fn invite_inbox(&self, partner: &str) -> Result<String, GroupError> {
        let p = partner.to_owned();
        Ok(self.call(move |e, now| e.invite_inbox(now, &p)).await??)
    }

    /// Publishes a task command; returns its message id.
    pub async fn send(&self, cmd: GroupCommand) -> Result<String, GroupError> {
        Ok(self.call(move |e, now| e.send(now, cmd)).await??)
    }

    /// Publishes a management command.
    pub async fn mgmt(&self, kind: MgmtKind, mentions: Mentions) -> Result<String, GroupError> {
        Ok(self
            .call(move |e, now| e.mgmt(now, kind, mentions, None))
            .await??)
    }

    /// `get-status`: members that do not answer within the status deadline become
    /// [`Connection::NotConnected`].
    pub async fn get_status(&self, mentions: Mentions) -> Result<String, GroupError> {
        self.mgmt(MgmtKind::GetStatus, mentions).await
    }

    /// `mute` one member.
    pub async fn mute(&self, partner: &str) -> Result<String, GroupError> {
        self.mgmt(MgmtKind::Mute, Mentions::List(vec![partner.into()]))
            .await
    }

    /// `unmute` one member.
    pub async fn unmute(&self, partner: &str) -> Result<String, GroupError> {
        self.mgmt(MgmtKind::Unmute, Mentions::List(vec![partner.into()]))
            .await
    }

    /// `leave-group` to one member.
    pub async fn remove(&self, partner: &str) -> Result<String, GroupError> {
        self.mgmt(MgmtKind::LeaveGroup, Mentions::List(vec![partner.into()]))
            .await
    }

    /// `disband` (the SDK's dissolve): every member leaves; the leader's queue is deleted
    /// once the command is confirmed, and the auto-delete exchange goes with the last queue.
    pub async fn disband(&self) -> Result<(), GroupError> {
        self.call(|e, now| e.disband(now)).await??;
        let (tx, rx) = oneshot::channel();
        let queue = self.queue.clone();
        let call: Call<LeaderSide> = Box::new(move |s: &mut LeaderSide, _| {
            s.leave_after = Some((vec![queue], tx));
        });
        self.tx
            .unbounded_send(call)
            .map_err(|_| GroupError::Stopped)?;
        let _ = rx.await;
        Ok(())
    }

    /// Every member's connection and mute state.
    pub async fn members(&self) -> Result<BTreeMap<String, MemberSnapshot>, GroupError> {
        self.call(|e, _| {
            e.members()
                .iter()
                .map(|(a, m)| {
                    let s = MemberSnapshot {
                        connection: m.connection,
                        muted: m.muted,
                    };
                    (a.clone(), s)
                })
                .collect()
        })
        .await
    }

    /// The latest result of every member for `task_id`.
    pub async fn results(&self, task_id: &str) -> Result<BTreeMap<String, TaskResult>, GroupError> {
        let t = task_id.to_owned();
        self.call(move |e, _| {
            e.results(&t)
                .map(|(p, r)| (p.to_owned(), r.clone()))
                .collect()
        })
        .await
    }

    /// Members whose latest result for `task_id` is in `state`.
    pub async fn partners_in(
        &self,
        task_id: &str,
        state: TaskState,
    ) -> Result<Vec<String>, GroupError> {
        let t = task_id.to_owned();
        self.call(move |e, _| e.partners_in(&t, state).into_iter().collect())
            .await
    }
}

impl From<UsageError> for GroupError {
    fn from(e: UsageError) -> Self {
        GroupError::Usage(e)
    }
}
