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

use core::convert::Infallible;

use agent_rt::Runtime;
use aip_proto::drive::{self, Engine, Host, Wake};
use aip_proto::group::{LinkInput, Publish};
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

/// An engine the loop can drive: an [`Engine`] of the canonical drive loop fed with its broker
/// link's [`LinkInput`]s, whose outputs are [`Out`]s with events of type `E`.
pub(crate) trait Side<E>:
    Engine<Input = LinkInput, Output = Out<E>, Time = Timestamp, Refusal = Infallible> + Send + 'static
{
    /// Declarations on every (re)connect; each one's queue is consumed.
    fn declarations(&self) -> Vec<Declare>;
    /// Whether to try to connect now (the engine's back-off, [`aip_proto::group::BrokerLink`]).
    fn connect_due(&self, now: Timestamp) -> bool;
    /// The event for "the link is up" (`true`) or "lost, reconnecting" (`false`).
    fn link_event(up: bool, detail: String) -> E;
}

/// A call into the engine from a handle.
pub(crate) type Call<S> = Box<dyn FnOnce(&mut S, Timestamp) + Send>;

pub(crate) struct Runner<R, S, E> {
    pub rt: R,
    pub url: String,
    pub tls: crate::group::amqp::AmqpTls,
    pub name: String,
    pub prefetch: u16,
    pub side: S,
    pub events: mpsc::UnboundedSender<E>,
}

/// The loop's [`Host`]: executing an output queues a publish, forwards an event or records
/// the leave; the loop then publishes, acks and leaves on its link.
struct Executed<S, E> {
    side: S,
    events: mpsc::UnboundedSender<E>,
    /// Published in order once the link takes them (again after a reconnect).
    pending: VecDeque<Publish>,
    leave: Option<Leave>,
}

impl<E: Send + 'static, S: Side<E>> Host for Executed<S, E> {
    type Engine = S;
    fn engine(&mut self) -> Option<&mut S> {
        Some(&mut self.side)
    }
    fn execute(&mut self, output: Out<E>) {
        match output {
            Out::Publish(p) => self.pending.push_back(p),
            Out::Event(e) => {
                let _ = self.events.unbounded_send(e);
            }
            Out::Leave(q, done) => self.leave = Some((q, done)),
        }
    }
}

enum Woke<S> {
    Delivery(String, Box<Delivery>),
    Lost(String),
    Call(Option<Call<S>>),
    Timer,
}

type Leave = (Vec<String>, Option<oneshot::Sender<()>>);

type Deliveries = SelectAll<BoxStream<'static, (String, lapin::Result<Delivery>)>>;

impl<R: Runtime, E: Send + 'static, S: Side<E>> Runner<R, S, E> {
    /// Connects and declares.
    pub async fn open(&self) -> Result<(Link, Deliveries), crate::group::amqp::AmqpError> {
        open(&self.url, &self.name, self.prefetch, &self.tls, &self.side).await
    }

    /// Runs until every handle is gone or the engine leaves. `first` is a link opened by
    /// the caller (so a first connection error reaches it). Each wake-up is one turn of the
    /// canonical drive loop ([`aip_proto::drive`]); between turns the loop publishes what the
    /// engine queued, acks what it took, and (re)connects when the engine says it is due.
    pub async fn run(self, first: (Link, Deliveries), mut calls: mpsc::UnboundedReceiver<Call<S>>) {
        let Runner {
            rt,
            url,
            tls,
            name,
            prefetch,
            side,
            events,
        } = self;
        let mut host = Executed {
            side,
            events,
            pending: VecDeque::new(),
            leave: None,
        };
        let mut link: Option<(Link, Deliveries)> = Some(first);
        let mut unacked: Vec<Delivery> = Vec::new();
        let mut wake = Wake::Drained;
        loop {
            let deadline = drive::turn(
                &mut host,
                now(&rt),
                std::mem::replace(&mut wake, Wake::Drained),
            );
            let Some((l, deliveries)) = link.as_mut() else {
                if host.side.connect_due(now(&rt)) {
                    match open(&url, &name, prefetch, &tls, &host.side).await {
                        Ok(l) => {
                            link = Some(l);
                            let _ = host
                                .events
                                .unbounded_send(S::link_event(true, "reconnected".into()));
                            wake = Wake::Input(LinkInput::Reconnected);
                        }
                        Err(e) => {
                            tracing::debug!(error = %e, "AMQP reconnect failed");
                            wake = Wake::Input(LinkInput::ConnectFailed);
                        }
                    }
                } else {
                    // Down: wait for the engine's next timer (the reconnect among them) or a
                    // call.
                    let mut sleep = sleep_until(&rt, deadline).fuse();
                    futures::select_biased! {
                        c = calls.next() => match c {
                            Some(f) => f(&mut host.side, now(&rt)),
                            None => return,
                        },
                        _ = sleep => wake = Wake::Timeout,
                    }
                }
                continue;
            };
            let mut lost = None;
            while let Some(p) = host.pending.front() {
                match l.publish(p).await {
                    Ok(()) => {
                        host.pending.pop_front();
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
                wake = link_lost(&host.events, &mut link, &mut unacked, why, S::link_event);
                continue;
            }
            if let Some((queues, done)) = host.leave.take() {
                for q in queues {
                    let _ = l.delete_queue(&q).await;
                }
                l.close().await;
                if let Some(done) = done {
                    let _ = done.send(());
                }
                return;
            }
            let mut sleep = sleep_until(&rt, deadline).fuse();
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
            wake = match woke {
                Woke::Delivery(queue, mut d) => {
                    // The body goes to the engine; the delivery stays for its ack.
                    let body = std::mem::take(&mut d.data);
                    unacked.push(*d);
                    Wake::Input(LinkInput::Delivery { queue, body })
                }
                Woke::Lost(why) => {
                    link_lost(&host.events, &mut link, &mut unacked, why, S::link_event)
                }
                Woke::Call(Some(f)) => {
                    f(&mut host.side, now(&rt));
                    Wake::Drained
                }
                Woke::Call(None) => {
                    l.close().await;
                    return;
                }
                Woke::Timer => Wake::Timeout,
            };
        }
    }
}

/// Connects to `url` and declares (and consumes) what `side` needs.
async fn open<E, S: Side<E>>(
    url: &str,
    name: &str,
    prefetch: u16,
    tls: &crate::group::amqp::AmqpTls,
    side: &S,
) -> Result<(Link, Deliveries), crate::group::amqp::AmqpError> {
    let link = Link::connect(url, name, prefetch, tls).await?;
    let mut all = SelectAll::new();
    for (i, d) in side.declarations().iter().enumerate() {
        link.declare(d).await?;
        if let Some(q) = d.queue() {
            let c = link.consume(q, &format!("{name}-{i}")).await?;
            let q = q.to_owned();
            all.push(c.map(move |d| (q.clone(), d)).boxed());
        }
    }
    Ok((link, all))
}

/// Sleeps until `deadline` (an hour when there is none).
fn sleep_until<R: Runtime>(
    rt: &R,
    deadline: Option<Timestamp>,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    match deadline {
        Some(at) => rt.sleep(at.saturating_duration_since(now(rt))),
        None => rt.sleep(Duration::from_secs(3600)),
    }
}

/// The link is gone: forget it and what it had not acked (the broker redelivers those; their
/// engine effects are kept and the redelivery is dropped as a duplicate), tell the
/// application, and wake the engine with [`LinkInput::Lost`].
fn link_lost<E>(
    events: &mpsc::UnboundedSender<E>,
    link: &mut Option<(Link, Deliveries)>,
    unacked: &mut Vec<Delivery>,
    why: String,
    link_event: fn(bool, String) -> E,
) -> Wake<LinkInput> {
    tracing::info!(%why, "AMQP link lost; reconnecting");
    unacked.clear();
    *link = None;
    let _ = events.unbounded_send(link_event(false, why));
    Wake::Input(LinkInput::Lost)
}
