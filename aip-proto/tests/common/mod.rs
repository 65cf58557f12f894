//! A two-engine in-memory harness: one [`Leader`] and one [`Partner`] joined by a simulated
//! HTTP network with latency, in virtual time. `step` delivers the next message or fires the
//! next timer; faults are one field away (`lose_requests`, `receiver_down`, `cut_streams`).
//!
//! The mapping between the engines is exactly what a driver does: a leader `Send` becomes a
//! partner `Request`, a partner `Respond`/`StreamData`/`EndStream` becomes a leader
//! `Response`/`StreamChunk`/`StreamEnded`, a partner `Notify` becomes a leader
//! `Notification`, and the leader's `RespondNotification` status goes back as the delivery's
//! outcome.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use aip_proto::engine::{CallId, DeliveryId, RequestId};
use aip_proto::leader::{
    Leader, LeaderConfig, LeaderEvent, LeaderInput, LeaderOutput, PartnerEndpoint,
};
use aip_proto::partner::{
    DeliveryOutcome, Partner, PartnerConfig, PartnerEvent, PartnerInput, PartnerOutput,
};
use aip_proto::{Dialect, Timestamp};

enum Msg {
    ToPartner(PartnerInput),
    ToLeader(LeaderInput),
}

/// A leader and a partner on a simulated network.
pub struct Pair {
    pub leader: Leader,
    pub partner: Partner,
    pub now: Timestamp,
    pub latency: Duration,
    /// The next this many leader requests vanish (no answer; the leader's timeout notices).
    pub lose_requests: usize,
    /// Notification POSTs are answered 503.
    pub receiver_down: bool,
    pub leader_events: Vec<LeaderEvent>,
    pub partner_events: Vec<PartnerEvent>,
    /// Every notification POST the receiver got (status answered).
    pub notifications: Vec<u16>,
    queue: BTreeMap<(Timestamp, u64), Msg>,
    seq: u64,
    req_to_call: BTreeMap<RequestId, CallId>,
    call_to_req: BTreeMap<CallId, RequestId>,
    streaming: BTreeSet<RequestId>,
    receiver: BTreeMap<RequestId, DeliveryId>,
    next_request: u64,
}

pub fn t0() -> Timestamp {
    Timestamp::from_unix_millis(1_756_699_080_000)
}

impl Pair {
    /// A leader and a partner (registered at the leader as `"p"`, speaking `dialect`).
    pub fn new(leader: LeaderConfig, partner: PartnerConfig, dialect: Dialect) -> Self {
        let mut l = Leader::new(leader);
        l.add_partner(
            "p",
            PartnerEndpoint {
                url: "http://partner/aip/rpc".into(),
                dialect,
            },
        );
        Pair {
            leader: l,
            partner: Partner::new(partner),
            now: t0(),
            latency: Duration::from_millis(5),
            lose_requests: 0,
            receiver_down: false,
            leader_events: Vec::new(),
            partner_events: Vec::new(),
            notifications: Vec::new(),
            queue: BTreeMap::new(),
            seq: 0,
            req_to_call: BTreeMap::new(),
            call_to_req: BTreeMap::new(),
            streaming: BTreeSet::new(),
            receiver: BTreeMap::new(),
            next_request: 0,
        }
    }

    fn schedule(&mut self, m: Msg) {
        self.seq += 1;
        self.queue
            .insert((self.now.saturating_add(self.latency), self.seq), m);
    }

    fn request_id(&mut self) -> RequestId {
        self.next_request += 1;
        RequestId(self.next_request)
    }

    /// Executes every queued output of both engines.
    pub fn drain(&mut self) {
        loop {
            let mut any = false;
            while let Some(o) = self.leader.poll_output() {
                any = true;
                self.leader_output(o);
            }
            while let Some(o) = self.partner.poll_output() {
                any = true;
                self.partner_output(o);
            }
            if !any {
                return;
            }
        }
    }

    fn leader_output(&mut self, o: LeaderOutput) {
        match o {
            LeaderOutput::Send { call, request } => {
                if self.lose_requests > 0 {
                    self.lose_requests -= 1;
                    return;
                }
                let r = self.request_id();
                self.req_to_call.insert(r, call);
                self.call_to_req.insert(call, r);
                self.schedule(Msg::ToPartner(PartnerInput::Request {
                    request: r,
                    body: request.body,
                }));
            }
            LeaderOutput::Abort { call } => {
                if let Some(r) = self.call_to_req.remove(&call) {
                    self.req_to_call.remove(&r);
                    if self.streaming.remove(&r) {
                        self.schedule(Msg::ToPartner(PartnerInput::StreamClosed { request: r }));
                    }
                }
            }
            LeaderOutput::RespondNotification { request, status } => {
                self.notifications.push(status);
                if let Some(delivery) = self.receiver.remove(&request) {
                    let outcome = DeliveryOutcome::Status(status);
                    self.schedule(Msg::ToPartner(PartnerInput::NotificationResult {
                        delivery,
                        outcome,
                    }));
                }
            }
            LeaderOutput::Event(e) => self.leader_events.push(e),
        }
    }

    fn partner_output(&mut self, o: PartnerOutput) {
        match o {
            PartnerOutput::Respond { request, response } => {
                if let Some(call) = self.req_to_call.remove(&request) {
                    self.call_to_req.remove(&call);
                    self.schedule(Msg::ToLeader(LeaderInput::Response {
                        call,
                        status: response.status,
                        content_type: Some(response.content_type.into()),
                        body: response.body,
                    }));
                }
            }
            PartnerOutput::StartStream { request } => {
                self.streaming.insert(request);
            }
            PartnerOutput::StreamData { request, data } => {
                if let Some(call) = self.req_to_call.get(&request).copied() {
                    self.schedule(Msg::ToLeader(LeaderInput::StreamChunk { call, data }));
                }
            }
            PartnerOutput::EndStream { request } => {
                self.streaming.remove(&request);
                if let Some(call) = self.req_to_call.remove(&request) {
                    self.call_to_req.remove(&call);
                    self.schedule(Msg::ToLeader(LeaderInput::StreamEnded { call }));
                }
            }
            PartnerOutput::Notify {
                delivery,
                token,
                body,
                ..
            } => {
                if self.receiver_down {
                    let outcome = DeliveryOutcome::Status(503);
                    self.schedule(Msg::ToPartner(PartnerInput::NotificationResult {
                        delivery,
                        outcome,
                    }));
                } else {
                    let r = self.request_id();
                    self.receiver.insert(r, delivery);
                    self.schedule(Msg::ToLeader(LeaderInput::Notification {
                        request: r,
                        token: Some(token),
                        body,
                    }));
                }
            }
            PartnerOutput::Event(e) => self.partner_events.push(e),
        }
    }

    /// Delivers the next message or fires the next timer. `false` when nothing is left.
    pub fn step(&mut self) -> bool {
        self.drain();
        let next = [
            self.queue.keys().next().map(|(t, _)| *t),
            self.leader.poll_timeout(),
            self.partner.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(next) = next else { return false };
        if next > self.now {
            self.now = next;
        }
        if let Some(key) = self
            .queue
            .keys()
            .next()
            .copied()
            .filter(|(t, _)| *t <= self.now)
        {
            match self.queue.remove(&key) {
                Some(Msg::ToPartner(i)) => self.partner.handle(self.now, i),
                Some(Msg::ToLeader(i)) => self.leader.handle(self.now, i),
                None => {}
            }
        } else {
            self.leader.handle_timeout(self.now);
            self.partner.handle_timeout(self.now);
        }
        self.drain();
        true
    }

    /// Steps until `done` holds (panics after `max` steps).
    pub fn run_until(&mut self, max: usize, mut done: impl FnMut(&Pair) -> bool) {
        for _ in 0..max {
            if done(self) {
                return;
            }
            if !self.step() {
                break;
            }
        }
        assert!(done(self), "condition not reached by t={:?}", self.now);
    }

    /// Cuts every open stream (both ends notice).
    pub fn cut_streams(&mut self) {
        for r in std::mem::take(&mut self.streaming) {
            self.schedule(Msg::ToPartner(PartnerInput::StreamClosed { request: r }));
            if let Some(call) = self.req_to_call.remove(&r) {
                self.call_to_req.remove(&call);
                self.schedule(Msg::ToLeader(LeaderInput::StreamEnded { call }));
            }
        }
    }

    /// Partner events of one kind, taken out of the log.
    pub fn take_partner_events(&mut self) -> Vec<PartnerEvent> {
        std::mem::take(&mut self.partner_events)
    }

    /// Whether the network and both engines are idle but for far timers.
    pub fn in_flight(&self) -> usize {
        self.queue.len()
    }
}
