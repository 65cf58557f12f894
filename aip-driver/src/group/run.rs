//! The loop shared by the leader and the member drivers: one engine, one [`Link`], its
//! consumers; reconnect with re-declaration after the broker goes away.
//!
//! Delivery guarantees: a delivery is acked only after the engine took it **and** every
//! message the engine published in answer was confirmed by the broker. A connection lost in
//! between leaves the delivery unacked (the broker redelivers it: the engines drop the
//! duplicate by message id) and the unconfirmed messages queued: they are published again,
//! in order, on the next connection (receivers drop the ones that had got through). Engine
//! state (members, tasks) lives in the engine and survives any number of reconnects, and so
//! does the decision when to try to connect again (the engine's reconnect timer: the loop
//! connects when the engine says it is due and otherwise sleeps until its `poll_timeout`).

use std::collections::VecDeque;
use std::time::Duration;

use agent_rt::Runtime;
use aip_proto::group::Publish;
use aip_proto::Timestamp;
use futures::channel::{mpsc, oneshot};
use futures::stream::{BoxStream, SelectAll};
use futures::{FutureExt, StreamExt};

use crate::group::amqp::{Declare, Delivery, Link};
use crate::now;

/// What an engine hands the loop.
pub(crate) enum Out<E> {
    Publish(Publish),
    Event(E),
    /// Delete these queues, close, and stop (then signal the sender, if any).
    Leave(Vec<String>, Option<oneshot::Sender<()>>),
}

/// An engine the loop can drive.
pub(crate) trait Side: Send + 'static {
    type Event: Send + 'static;
    /// Declarations on every (re)connect; each one's queue is consumed.
    fn declarations(&self) -> Vec<Declare>;
    fn delivery(&mut self, now: Timestamp, queue: &str, body: &[u8]);
    fn poll(&mut self) -> Option<Out<Self::Event>>;
    fn poll_timeout(&self) -> Option<Timestamp>;
    fn timeout(&mut self, now: Timestamp);
    /// The link came back (everything declared again).
    fn reconnected(&mut self, now: Timestamp);
    /// The link was lost.
    fn link_lost(&mut self, now: Timestamp);
    /// An attempt to connect again failed.
    fn connect_failed(&mut self, now: Timestamp);
    /// Whether to try to connect now (the engine's back-off, [`aip_proto::group::BrokerLink`]).
    fn connect_due(&self, now: Timestamp) -> bool;
    /// The event for "the link is up" (`true`) or "lost, reconnecting" (`false`).
    fn link_event(up: bool, detail: String) -> Self::Event;
}

/// A call into the engine from a handle.
pub(crate) type Call<S> = Box<dyn FnOnce(&mut S, Timestamp) + Send>;

pub(crate) struct Runner<R, S: Side> {
    pub rt: R,
    pub url: String,
    pub tls: crate::group::amqp::AmqpTls,
    pub name: String,
    pub prefetch: u16,
    pub side: S,
    pub events: mpsc::UnboundedSender<S::Event>,
}

enum Woke<S: Side> {
    Delivery(String, Box<Delivery>),
    Lost(String),
    Call(Option<Call<S>>),
    Timer,
}

type Leave = (Vec<String>, Option<oneshot::Sender<()>>);

type Deliveries = SelectAll<BoxStream<'static, (String, lapin::Result<Delivery>)>>;

impl<R: Runtime, S: Side> Runner<R, S> {
    /// Connects and declares.
    pub async fn open(&self) -> Result<(Link, Deliveries), crate::group::amqp::AmqpError> {
        let link = Link::connect(&self.url, &self.name, self.prefetch, &self.tls).await?;
        let mut all = SelectAll::new();
        for (i, d) in self.side.declarations().iter().enumerate() {
            link.declare(d).await?;
            if let Some(q) = d.queue() {
                let c = link.consume(q, &format!("{}-{i}", self.name)).await?;
                let q = q.to_owned();
                all.push(c.map(move |d| (q.clone(), d)).boxed());
            }
        }
        Ok((link, all))
    }

    /// Runs until every handle is gone or the engine leaves. `first` is a link opened by
    /// the caller (so a first connection error reaches it).
    pub async fn run(
        mut self,
        first: (Link, Deliveries),
        mut calls: mpsc::UnboundedReceiver<Call<S>>,
    ) {
        let mut link: Option<(Link, Deliveries)> = Some(first);
        let mut pending: VecDeque<Publish> = VecDeque::new();
        let mut unacked: Vec<Delivery> = Vec::new();
        let mut leave: Option<Leave> = None;
        loop {
            self.drain(&mut pending, &mut leave);
            if link.is_none() {
                if self.side.connect_due(now(&self.rt)) {
                    match self.open().await {
                        Ok(l) => {
                            link = Some(l);
                            self.side.reconnected(now(&self.rt));
                            let _ = self
                                .events
                                .unbounded_send(S::link_event(true, "reconnected".into()));
                        }
                        Err(e) => {
                            tracing::debug!(error = %e, "AMQP reconnect failed");
                            self.side.connect_failed(now(&self.rt));
                            continue;
                        }
                    }
                } else {
                    // Down: wait for the engine's next timer (the reconnect among them) or a
                    // call.
                    let mut sleep = self.sleep_until_due().fuse();
                    futures::select_biased! {
                        c = calls.next() => match c {
                            Some(f) => f(&mut self.side, now(&self.rt)),
                            None => return,
                        },
                        _ = sleep => self.side.timeout(now(&self.rt)),
                    }
                    continue;
                }
            }
            // Outputs of `reconnected` first.
            self.drain(&mut pending, &mut leave);
            let Some((l, deliveries)) = link.as_mut() else {
                continue;
            };
            let mut lost = None;
            while let Some(p) = pending.front() {
                match l.publish(p).await {
                    Ok(()) => {
                        pending.pop_front();
                    }
                    Err(e) => {
                        lost = Some(e.to_string());
                        break;
                    }
                }
            }
            if lost.is_none() {
                for d in unacked.drain(..) {
                    if let Err(e) = l.ack(&d).await {
                        lost = Some(e.to_string());
                        break;
                    }
                }
            }
            if let Some(why) = lost {
                self.lost(&mut link, &mut unacked, why);
                continue;
            }
            if let Some((queues, done)) = leave.take() {
                for q in queues {
                    let _ = l.delete_queue(&q).await;
                }
                l.close().await;
                if let Some(done) = done {
                    let _ = done.send(());
                }
                return;
            }
            let mut sleep = self.sleep_until_due().fuse();
            let woke = futures::select_biased! {
                d = deliveries.next() => match d {
                    Some((q, Ok(d))) => Woke::Delivery(q, Box::new(d)),
                    Some((_, Err(e))) => Woke::Lost(e.to_string()),
                    None => Woke::Lost("consumers ended".into()),
                },
                c = calls.next() => Woke::Call(c),
                _ = sleep => Woke::Timer,
            };
            drop(sleep);
            match woke {
                Woke::Delivery(q, d) => {
                    self.side.delivery(now(&self.rt), &q, &d.data);
                    unacked.push(*d);
                }
                Woke::Lost(why) => self.lost(&mut link, &mut unacked, why),
                Woke::Call(Some(f)) => f(&mut self.side, now(&self.rt)),
                Woke::Call(None) => {
                    l.close().await;
                    return;
                }
                Woke::Timer => self.side.timeout(now(&self.rt)),
            }
        }
    }

    /// Sleeps until the engine's next timer (an hour when it has none).
    fn sleep_until_due(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        match self.side.poll_timeout() {
            Some(at) => self.rt.sleep(at.saturating_duration_since(now(&self.rt))),
            None => self.rt.sleep(Duration::from_secs(3600)),
        }
    }

    fn drain(&mut self, pending: &mut VecDeque<Publish>, leave: &mut Option<Leave>) {
        while let Some(o) = self.side.poll() {
            match o {
                Out::Publish(p) => pending.push_back(p),
                Out::Event(e) => {
                    let _ = self.events.unbounded_send(e);
                }
                Out::Leave(q, done) => *leave = Some((q, done)),
            }
        }
    }

    fn lost(
        &mut self,
        link: &mut Option<(Link, Deliveries)>,
        unacked: &mut Vec<Delivery>,
        why: String,
    ) {
        tracing::info!(%why, "AMQP link lost; reconnecting");
        // Unacked deliveries come back from the broker; their engine effects are kept and
        // the redelivery is dropped as a duplicate.
        unacked.clear();
        *link = None;
        self.side.link_lost(now(&self.rt));
        let _ = self.events.unbounded_send(S::link_event(false, why));
    }
}
