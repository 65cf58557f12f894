use std::time::Duration;

use super::*;
use crate::wire::{CommandKind, Dialect, Mentions, Product, TaskState};

const L: &str = "1.2.156.3088.1.1.1.1.1.L";
const A: &str = "1.2.156.3088.1.1.1.1.1.A";
const B: &str = "1.2.156.3088.1.1.1.1.1.B";
const C: &str = "1.2.156.3088.1.1.1.1.1.C";
const G: &str = "g-1";

fn t(s: u64) -> Timestamp {
    Timestamp::from_unix_millis(1_800_000_000_000 + s * 1000)
}

/// A fanout "broker" in memory: every published group message goes to every party.
struct Net {
    leader: GroupLeader,
    members: Vec<GroupMember>,
    events: Vec<(String, MemberEvent)>,
    leader_events: Vec<LeaderEvent>,
    left: Vec<(String, LeaveReason)>,
    /// Every group message the leader published.
    leader_published: Vec<GroupMessage>,
}

impl Net {
    fn new(partners: &[&str]) -> Net {
        let leader = GroupLeader::new(t(0), LeaderConfig::new(L, G)).unwrap();
        let mut n = Net {
            leader,
            members: Vec::new(),
            events: Vec::new(),
            leader_events: Vec::new(),
            left: Vec::new(),
            leader_published: Vec::new(),
        };
        for p in partners {
            n.leader.invite_inbox(t(0), p).unwrap();
            let cfg = MemberConfig::new(p, L, G);
            assert_eq!(cfg.exchange, n.leader.exchange());
            n.members.push(GroupMember::joined(t(0), cfg));
        }
        n.pump(t(0));
        n
    }

    fn pump(&mut self, now: Timestamp) {
        loop {
            let mut bodies = Vec::new();
            while let Some(o) = self.leader.poll_output() {
                match o {
                    LeaderOutput::Publish(p) => {
                        if let Ok((m, _)) = decode_group_message(&p.body) {
                            self.leader_published.push(m);
                        }
                        bodies.push(p.body)
                    }
                    LeaderOutput::Event(e) => self.leader_events.push(e),
                }
            }
            for m in &mut self.members {
                while let Some(o) = m.poll_output() {
                    match o {
                        MemberOutput::Publish(p) => bodies.push(p.body),
                        MemberOutput::Event(e) => {
                            self.events.push((m.config().partner_id.clone(), e))
                        }
                        MemberOutput::Leave(r) => {
                            self.left.push((m.config().partner_id.clone(), r))
                        }
                    }
                }
            }
            if bodies.is_empty() {
                return;
            }
            for b in bodies {
                self.leader.handle_delivery(now, &b);
                for m in &mut self.members {
                    m.handle_delivery(now, &b);
                }
            }
        }
    }

    fn member(&mut self, p: &str) -> &mut GroupMember {
        self.members
            .iter_mut()
            .find(|m| m.config().partner_id == p)
            .unwrap()
    }

    fn started(&self) -> Vec<String> {
        self.events
            .iter()
            .filter(|(_, e)| matches!(e, MemberEvent::TaskStarted { .. }))
            .map(|(p, _)| p.clone())
            .collect()
    }
}

fn start(n: &mut Net, task: &str, mentions: Option<Mentions>) {
    let mut c = GroupCommand::new(CommandKind::Start, task, "s-1", Mentions::All).text("go");
    c.mentions = mentions;
    n.leader.send(t(1), c).unwrap();
    n.pump(t(1));
}

#[test]
fn members_announce_themselves_and_the_leader_sees_them_connected() {
    let n = Net::new(&[A, B, C]);
    for p in [A, B, C] {
        assert_eq!(
            n.leader.member(p).unwrap().connection,
            Connection::Connected
        );
    }
    assert_eq!(
        n.leader_events
            .iter()
            .filter(|e| matches!(e, LeaderEvent::MemberJoined { .. }))
            .count(),
        3
    );
}

#[test]
fn mentions_one_several_all_and_nobody() {
    let mut n = Net::new(&[A, B, C]);
    start(&mut n, "t1", Some(Mentions::List(vec![B.into()])));
    assert_eq!(n.started(), vec![B.to_owned()]);
    n.events.clear();
    start(&mut n, "t2", Some(Mentions::List(vec![A.into(), C.into()])));
    assert_eq!(n.started(), vec![A.to_owned(), C.to_owned()]);
    n.events.clear();
    start(&mut n, "t3", Some(Mentions::All));
    assert_eq!(n.started().len(), 3);
    n.events.clear();
    // v02 (the SDK): absent and [] both mean "act".
    start(&mut n, "t4", None);
    assert_eq!(n.started().len(), 3);
    n.events.clear();
    start(&mut n, "t5", Some(Mentions::List(vec![])));
    assert_eq!(n.started().len(), 3);
}

#[test]
fn v1_members_leave_unaddressed_commands_to_the_application() {
    let mut cfg = MemberConfig::new(A, L, G);
    cfg.dialect = Dialect::V1;
    let mut m = GroupMember::joined(t(0), cfg.clone());
    while m.poll_output().is_some() {}
    let body = br#"{"type":"message","id":"m1","sentAt":"2025-09-01T12:00:00+08:00","senderRole":"leader","senderId":"1.2.156.3088.1.1.1.1.1.L","command":"start","dataItems":[],"taskId":"t","groupId":"g-1","sessionId":"s"}"#;
    m.handle_delivery(t(1), body);
    assert_eq!(
        m.poll_output(),
        None,
        "v01.00: nobody mentioned, not acted on by default"
    );
    cfg.act_on_unaddressed = Some(true);
    let mut m = GroupMember::joined(t(0), cfg);
    while m.poll_output().is_some() {}
    m.handle_delivery(t(1), body);
    assert!(matches!(
        m.poll_output(),
        Some(MemberOutput::Event(MemberEvent::TaskStarted {
            mention: Mention::Nobody,
            ..
        }))
    ));
}

#[test]
fn a_task_runs_to_completed_through_the_same_machine_as_direct_mode() {
    let mut n = Net::new(&[A, B]);
    start(&mut n, "t", Some(Mentions::All));
    for p in [A, B] {
        n.member(p).accept(t(2), "t").unwrap();
        n.member(p).start_working(t(2), "t").unwrap();
    }
    n.member(A)
        .submit(t(2), "t", vec![Product::text("p", "a")])
        .unwrap();
    n.member(B).reject(t(2), "x", "no").unwrap_err();
    n.member(B).fail(t(2), "t", "broken").unwrap();
    // working → completed is not a partner step.
    assert!(n.member(A).accept(t(2), "t").is_err());
    n.pump(t(2));
    assert_eq!(
        n.leader
            .partners_in("t", TaskState::AwaitingCompletion)
            .len(),
        1
    );
    assert_eq!(n.leader.partners_in("t", TaskState::Failed).len(), 1);
    n.leader
        .send(
            t(3),
            GroupCommand::new(
                CommandKind::Complete,
                "t",
                "s-1",
                Mentions::List(vec![A.into()]),
            ),
        )
        .unwrap();
    n.pump(t(3));
    assert_eq!(n.member(A).task_state("t"), Some(TaskState::Completed));
    assert_eq!(
        n.leader.result("t", A).unwrap().state(),
        TaskState::Completed
    );
    assert_eq!(
        n.leader
            .result("t", A)
            .unwrap()
            .products
            .as_ref()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn echoes_and_duplicates_are_dropped_and_stale_results_ignored() {
    let mut n = Net::new(&[A]);
    start(&mut n, "t", Some(Mentions::All));
    n.member(A).accept(t(2), "t").unwrap();
    let mut accepted = None;
    while let Some(o) = n.member(A).poll_output() {
        if let MemberOutput::Publish(p) = o {
            accepted = Some(p.body);
        }
    }
    let accepted = accepted.unwrap();
    n.leader.handle_delivery(t(2), &accepted);
    n.member(A).start_working(t(3), "t").unwrap();
    n.pump(t(3));
    let before = n.leader_events.len();
    // The broker redelivers the old `accepted`: nothing changes.
    n.leader.handle_delivery(t(4), &accepted);
    assert_eq!(n.leader_events.len(), before);
    assert_eq!(n.leader.result("t", A).unwrap().state(), TaskState::Working);
    // A duplicate start (same message) does not start a second task.
    n.events.clear();
    let mut c = TaskCommandProbe::start(&mut n.leader);
    n.member(A).handle_delivery(t(4), &c);
    n.member(A).handle_delivery(t(4), &c);
    n.pump(t(4));
    assert_eq!(n.started().len(), 1);
    // Its own echo is dropped: the member never sees its own results as input.
    c.clear();
}

struct TaskCommandProbe;
impl TaskCommandProbe {
    fn start(l: &mut GroupLeader) -> Vec<u8> {
        l.send(
            t(4),
            GroupCommand::new(CommandKind::Start, "t2", "s", Mentions::All),
        )
        .unwrap();
        let mut body = None;
        while let Some(o) = l.poll_output() {
            if let LeaderOutput::Publish(p) = o {
                body = Some(p.body);
            }
        }
        body.unwrap()
    }
}

#[test]
fn mute_holds_results_until_unmute_and_leave_and_disband_end_membership() {
    let mut n = Net::new(&[A, B, C]);
    n.leader.mute(t(1), B).unwrap();
    n.pump(t(1));
    assert!(n.member(B).is_muted());
    assert!(n.leader.member(B).unwrap().muted);
    start(&mut n, "t", Some(Mentions::All));
    n.member(B).accept(t(2), "t").unwrap();
    n.pump(t(2));
    assert!(n.leader.result("t", B).is_none(), "muted: held");
    let before = n.leader_published.len();
    n.leader.unmute(t(3), B).unwrap();
    n.pump(t(3));
    assert_eq!(
        n.leader.result("t", B).unwrap().state(),
        TaskState::Accepted
    );
    // The start B had not answered went out again to B alone (issue 48 item 6): partners that
    // do not drop a repeated id must not run it twice.
    let again: Vec<_> = n.leader_published[before..]
        .iter()
        .filter_map(|m| match m {
            GroupMessage::Command(c) if c.task_id.as_deref() == Some("t") => Some(c),
            _ => None,
        })
        .collect();
    assert!(!again.is_empty(), "B never got the start again");
    for c in again {
        assert_eq!(
            c.mentions,
            Some(Mentions::List(vec![B.to_owned()])),
            "{c:?}"
        );
    }

    n.leader.remove(t(4), A).unwrap();
    n.pump(t(4));
    assert_eq!(n.left, vec![(A.to_owned(), LeaveReason::Asked)]);
    assert_eq!(n.leader.member(A).unwrap().connection, Connection::Left);

    n.member(C).leave(t(5), None);
    n.pump(t(5));
    assert_eq!(n.leader.member(C).unwrap().connection, Connection::Left);

    n.leader.disband(t(6)).unwrap();
    n.pump(t(6));
    assert!(n.left.contains(&(B.to_owned(), LeaveReason::Disbanded)));
    assert!(n
        .leader
        .send(
            t(7),
            GroupCommand::new(CommandKind::Start, "x", "s", Mentions::All)
        )
        .is_err());
}

/// A command published again to one member (same id, narrowed mentions) does not make the
/// other members drop the original later: a copy meant for someone else is not remembered.
#[test]
fn a_copy_meant_for_another_member_does_not_hide_the_original() {
    let mut n = Net::new(&[A, B]);
    let mut c = GroupCommand::new(CommandKind::Start, "t-copy", "s-1", Mentions::All).text("go");
    c.mentions = Some(Mentions::All);
    n.leader.send(t(1), c).unwrap();
    let mut original = None;
    while let Some(o) = n.leader.poll_output() {
        if let LeaderOutput::Publish(p) = o {
            if let Ok((GroupMessage::Command(cmd), dialect)) = decode_group_message(&p.body) {
                original = Some((cmd, dialect, p.body));
            }
        }
    }
    let (cmd, dialect, body) = original.expect("the start was published");
    let for_a = crate::TaskCommand {
        mentions: Some(Mentions::List(vec![A.to_owned()])),
        ..cmd
    };
    let copy = encode_group_message(&GroupMessage::Command(for_a), dialect);
    n.member(B).handle_delivery(t(1), &copy);
    n.member(B).handle_delivery(t(1), &body);
    n.pump(t(1));
    assert!(
        n.events.iter().any(|(p, e)| p == B
            && matches!(e, MemberEvent::TaskStarted { task_id, .. } if task_id == "t-copy")),
        "B dropped the original as a duplicate of a copy meant for A: {:?}",
        n.events
    );
}

#[test]
fn a_silent_member_becomes_not_connected_after_the_status_deadline() {
    let mut n = Net::new(&[A, B]);
    n.members.retain(|m| m.config().partner_id != B); // B is SIGKILLed
    n.leader.get_status(t(1), Mentions::All).unwrap();
    n.pump(t(1));
    let due = n.leader.poll_timeout().unwrap();
    assert_eq!(due, t(1).saturating_add(Duration::from_secs(5)));
    n.leader.handle_timeout(due);
    assert_eq!(
        n.leader.member(A).unwrap().connection,
        Connection::Connected
    );
    assert_eq!(
        n.leader.member(B).unwrap().connection,
        Connection::NotConnected
    );
    assert!(n
        .leader
        .poll_output()
        .is_some_and(|o| o == LeaderOutput::Event(LeaderEvent::MemberLost { partner: B.into() })));
}

#[test]
fn invitations_by_rpc_and_inbox() {
    let mut l = GroupLeader::new(t(0), LeaderConfig::new(L, G)).unwrap();
    let server = wire::ServerConfig {
        host: "127.0.0.1".into(),
        port: 5672,
        vhost: "/".into(),
        access_token: Some("guest:guest".into()),
    };
    let req = l.invite_rpc(t(0), A, server).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&req).unwrap();
    assert_eq!(v["method"], "group");
    assert_eq!(v["params"]["amqp"]["exchange"], l.exchange());
    assert_eq!(v["params"]["server"]["accessToken"], "guest:guest");
    let params: JoinParams = serde_json::from_value(v["params"].clone()).unwrap();
    let reply = join_reply(A, &params, "pid-1");
    assert_eq!(reply.queue_name, queue_name(L, G, A));
    let body =
        serde_json::to_vec(&serde_json::json!({"jsonrpc":"2.0","id":v["id"],"result":reply}))
            .unwrap();
    l.handle_invite_reply(t(1), A, &body);
    assert_eq!(l.member(A).unwrap().connection, Connection::Connected);

    // Inbox: a rejection with the right token ends the invitation.
    let token = l.invite_inbox(t(2), B).unwrap();
    let Some(LeaderOutput::Event(_)) = l.poll_output() else {
        panic!()
    };
    let Some(LeaderOutput::Publish(p)) = l.poll_output() else {
        panic!()
    };
    assert_eq!(
        (p.exchange.as_str(), p.routing_key.clone()),
        ("inbox.topic", inbox_queue_name(B))
    );
    let InboxMessage::Invitation(inv) = decode_inbox_message(&p.body).unwrap() else {
        panic!()
    };
    assert!(check_invitation(t(2), &inv).is_ok());
    assert!(
        check_invitation(t(2 + 300 + 31), &inv).is_err(),
        "expired past the skew"
    );
    let err = invitation_error(
        B,
        &inv,
        wire::InvitationErrorBody {
            code: -32020,
            message: "no".into(),
            data: None,
        },
    );
    assert_eq!(err.routing_key, inbox_queue_name(L));
    assert_eq!(inv.invitation_token, token);
    l.handle_inbox(t(3), &err.body);
    assert_eq!(l.member(B).unwrap().connection, Connection::Left);
    assert!(matches!(
        l.poll_output(),
        Some(LeaderOutput::Event(LeaderEvent::InvitationRejected {
            code: -32020,
            ..
        }))
    ));

    // An inbox invitation nobody answers expires.
    l.invite_inbox(t(4), C).unwrap();
    while l.poll_output().is_some() {}
    l.handle_timeout(t(4 + 300));
    assert_eq!(l.member(C).unwrap().connection, Connection::Left);
}

#[test]
fn management_messages_in_both_dialects() {
    // v01.00 seed example.
    let v1 = br#"{"type":"group-mgmt-message","id":"mgmt-msg-5678","sentAt":"2025-09-01T12:30:00+08:00","senderRole":"leader","senderId":"L","groupMgmtCommand":"leave-group","mentions":["P"]}"#;
    let (m, d) = decode_group_message(v1).unwrap();
    assert_eq!(d, Dialect::V1);
    let GroupMessage::Mgmt(c) = &m else { panic!() };
    assert_eq!(c.command, MgmtKind::LeaveGroup);
    assert_eq!(
        decode_group_message(&encode_group_message(&m, Dialect::V1))
            .unwrap()
            .0,
        m
    );
    let v1r = br#"{"type":"group-mgmt-message","id":"x","senderRole":"partner","senderId":"P","groupMemberStatus":{"connected":false,"muted":false}}"#;
    assert!(matches!(
        decode_group_message(v1r).unwrap().0,
        GroupMessage::MgmtResult(_)
    ));
    // v02 (SDK).
    let v2 = br#"{"type":"group-mgmt-command","id":"m","sentAt":"2026-01-01T00:00:00+00:00","senderRole":"leader","senderId":"L","mentions":"all","dataItems":[],"groupId":"g","command":"disband"}"#;
    let (m, d) = decode_group_message(v2).unwrap();
    assert_eq!(d, Dialect::V2);
    let enc = encode_group_message(&m, Dialect::V2);
    let v: serde_json::Value = serde_json::from_slice(&enc).unwrap();
    assert_eq!(v["type"], "group-mgmt-command");
    assert_eq!(v["command"], "disband");
    assert_eq!(v["mentions"], "all");
    assert!(decode_group_message(b"{\"type\":\"group-mgmt-result\"}").is_err());
    assert!(decode_group_message(b"not json").is_err());
}

#[test]
fn a_command_lost_with_a_queue_is_published_again_when_the_member_reconnects() {
    let mut n = Net::new(&[A, B]);
    // B's queue is gone (broker restart): it misses the start.
    n.leader
        .send(
            t(1),
            GroupCommand::new(CommandKind::Start, "t", "s", Mentions::All),
        )
        .unwrap();
    let mut bodies = Vec::new();
    while let Some(o) = n.leader.poll_output() {
        if let LeaderOutput::Publish(p) = o {
            bodies.push(p.body);
        }
    }
    for b in &bodies {
        n.member(A).handle_delivery(t(1), b);
    }
    n.pump(t(1));
    assert_eq!(n.started(), vec![A.to_owned()]);
    n.member(A).accept(t(2), "t").unwrap();
    n.pump(t(2));
    // B reconnects: it announces itself; the leader republishes the start (A, which
    // answered, drops the copy: no second task).
    n.member(B).reconnected(t(3));
    n.pump(t(3));
    assert_eq!(n.started(), vec![A.to_owned(), B.to_owned()]);
    n.member(B).accept(t(4), "t").unwrap();
    n.pump(t(4));
    assert_eq!(n.leader.partners_in("t", TaskState::Accepted).len(), 2);
    // A later status round does not start anything again.
    n.leader.get_status(t(5), Mentions::All).unwrap();
    n.pump(t(5));
    assert_eq!(n.started().len(), 2);
}

#[test]
fn only_invited_members_join_and_a_member_that_left_must_be_invited_again() {
    let mut l = GroupLeader::new(t(0), LeaderConfig::new(L, G)).unwrap();
    let mut stranger = GroupMember::joined(t(0), MemberConfig::new(A, L, G));
    let Some(MemberOutput::Publish(p)) = stranger.poll_output() else {
        panic!()
    };
    l.handle_delivery(t(1), &p.body);
    assert!(l.member(A).is_none());
    assert_eq!(l.poll_output(), None);
}

/// The reconnect back-off is the engines' timer: a lost link is due at once, a failed attempt
/// moves the engine's `poll_timeout` by the back-off, and a connection ends the timer.
#[test]
fn a_lost_broker_link_is_an_engine_timer_on_both_sides() {
    let mut n = Net::new(&[A]);
    let before = n.leader.poll_timeout();
    n.leader.link_lost(t(5));
    assert!(n.leader.connect_due(t(5)));
    n.leader.connect_failed(t(5));
    assert!(!n.leader.connect_due(t(5)));
    let retry = t(5).saturating_add(Duration::from_millis(100));
    assert_eq!(
        n.leader.poll_timeout(),
        Some(before.map_or(retry, |b| b.min(retry)))
    );
    assert!(n.leader.connect_due(retry));
    n.leader.reconnected(retry);
    assert!(!n.leader.connect_due(t(9)));
    // What is due now is the status the reconnect asked for, not another attempt.
    assert!(n.leader.poll_timeout().is_some_and(|at| at > retry));

    let m = &mut n.members[0];
    assert_eq!(m.poll_timeout(), None);
    m.link_lost(t(6));
    assert_eq!(m.poll_timeout(), Some(t(6)));
    m.connect_failed(t(6));
    m.connect_failed(t(6).saturating_add(Duration::from_millis(100)));
    assert_eq!(
        m.poll_timeout(),
        Some(t(6).saturating_add(Duration::from_millis(300)))
    );
    m.reconnected(t(7));
    assert_eq!((m.poll_timeout(), m.connect_due(t(9))), (None, false));
}
