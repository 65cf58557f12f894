//! Deterministic simulation of group mode: one `GroupLeader`, three `GroupMember`s and a
//! fanout "broker" that loses, duplicates and reorders deliveries, and whose queues vanish
//! when a member's or the leader's connection crashes (as auto-delete queues do). Members
//! also crash as processes: the engine is lost with its queue and either restarts empty (a
//! fresh `GroupMember::joined`, as a restarted partner rejoins) or is gone for good. After
//! the faulty phase the network heals and the drivers' reconnect hooks run.
//!
//! Invariants, for every seed: no member incarnation starts a task twice; a member never
//! acts on a task it was not mentioned for; the leader's view of a (task, member) only moves
//! forward; after healing, the leader's view equals every mentioned member's own state (for
//! a restarted member: of the tasks sent after its restart; what it had before died with
//! it), restarted members are connected, and a member gone for good is not-connected once
//! the status deadline passed.
//!
//! `AIP_GROUP_SIM_SEEDS` seeds (10,000 by default).

use std::collections::BTreeMap;

use aip_proto::group::{
    Connection, GroupCommand, GroupLeader, GroupMember, LeaderConfig, LeaderOutput, MemberConfig,
    MemberEvent, MemberOutput,
};
use aip_proto::state::is_reachable;
use aip_proto::{CommandKind, Mentions, Product, TaskState, Timestamp};

const L: &str = "1.2.156.3088.1.1.1.1.1.0";
const MEMBERS: [&str; 3] = [
    "1.2.156.3088.1.1.1.1.1.1",
    "1.2.156.3088.1.1.1.1.1.2",
    "1.2.156.3088.1.1.1.1.1.3",
];
const G: &str = "sim";

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, pct: u64) -> bool {
        self.below(100) < pct
    }
}

/// Who receives: 0 = leader, 1..=3 = members.
struct World {
    rng: Rng,
    now: u64,
    leader: GroupLeader,
    members: Vec<GroupMember>,
    /// In-flight deliveries (destination, body).
    net: Vec<(usize, Vec<u8>)>,
    faulty: bool,
    /// Per member: its incarnation (bumped by a process restart), the number of tasks sent
    /// before its last restart, and whether it is gone for good.
    incarnation: Vec<u32>,
    restarted_after: Vec<usize>,
    gone: Vec<bool>,
    tasks: usize,
    starts: BTreeMap<(usize, u32, String), u32>,
    mentioned: BTreeMap<String, Vec<usize>>,
    leader_view: BTreeMap<(String, String), TaskState>,
}

impl World {
    fn ts(&self) -> Timestamp {
        Timestamp::from_unix_millis(1_800_000_000_000 + self.now)
    }

    fn publish(&mut self, body: Vec<u8>) {
        for dest in 0..=MEMBERS.len() {
            if dest > 0 && self.gone[dest - 1] {
                continue; // its queue went with it
            }
            if self.faulty && self.rng.chance(10) {
                continue; // lost
            }
            self.net.push((dest, body.clone()));
            if self.faulty && self.rng.chance(10) {
                self.net.push((dest, body.clone())); // duplicated
            }
        }
    }

    fn collect(&mut self) {
        while let Some(o) = self.leader.poll_output() {
            if let LeaderOutput::Publish(p) = o {
                if p.exchange == self.leader.exchange() {
                    self.publish(p.body);
                }
            }
        }
        for i in 0..self.members.len() {
            if self.gone[i] {
                continue;
            }
            let mut started = Vec::new();
            while let Some(o) = self.members[i].poll_output() {
                match o {
                    MemberOutput::Publish(p) => self.publish(p.body),
                    MemberOutput::Event(MemberEvent::TaskStarted { task_id, .. }) => {
                        started.push(task_id)
                    }
                    _ => {}
                }
            }
            for t in started {
                let n = self
                    .starts
                    .entry((i, self.incarnation[i], t.clone()))
                    .or_default();
                *n += 1;
                assert_eq!(*n, 1, "member {i} started {t} twice");
                assert!(
                    self.mentioned[&t].contains(&i),
                    "member {i} started {t} without a mention"
                );
                let now = self.ts();
                let m = &mut self.members[i];
                m.accept(now, &t).unwrap();
                if self.rng.chance(80) {
                    m.start_working(now, &t).unwrap();
                    m.submit(now, &t, vec![Product::text("p", "x")]).unwrap();
                }
            }
        }
    }

    fn check_leader_view(&mut self) {
        for t in self.mentioned.keys() {
            for (p, r) in self.leader.results(t) {
                let key = (t.clone(), p.to_owned());
                let new = r.status.state;
                if let Some(&old) = self.leader_view.get(&key) {
                    assert!(
                        old == new || is_reachable(Some(old), new),
                        "leader view of {key:?} went {old} → {new}"
                    );
                }
                self.leader_view.insert(key, new);
            }
        }
    }

    fn deliver_one(&mut self) {
        if self.net.is_empty() {
            return;
        }
        let i = if self.faulty {
            self.rng.below(self.net.len() as u64) as usize // reordered
        } else {
            0
        };
        let (dest, body) = self.net.remove(i);
        self.now += 1;
        let now = self.ts();
        if dest == 0 {
            self.leader.handle_delivery(now, &body);
        } else {
            self.members[dest - 1].handle_delivery(now, &body);
        }
        self.collect();
        self.check_leader_view();
    }

    /// A connection crash: the queue (and what was in it) is gone; the driver reconnects.
    fn crash(&mut self, who: usize) {
        self.net.retain(|(d, _)| *d != who);
        let now = self.ts();
        if who == 0 {
            self.leader.reconnected(now);
        } else {
            self.members[who - 1].reconnected(now);
        }
        self.collect();
    }

    /// A member process crash: its engine and queue are lost; it restarts empty and
    /// rejoins, or (`gone`) never comes back.
    fn process_crash(&mut self, i: usize, gone: bool, seed: u64) {
        self.net.retain(|(d, _)| *d != i + 1);
        if gone {
            self.gone[i] = true;
            return;
        }
        self.incarnation[i] += 1;
        self.restarted_after[i] = self.tasks;
        let mut c = MemberConfig::new(MEMBERS[i], L, G);
        c.id_seed = seed
            .wrapping_mul(31)
            .wrapping_add(i as u64)
            .wrapping_add(u64::from(self.incarnation[i]) << 40);
        let now = self.ts();
        self.members[i] = GroupMember::joined(now, c);
        self.collect();
    }

    fn quiesce(&mut self) {
        let mut guard = 0;
        while !self.net.is_empty() {
            self.deliver_one();
            guard += 1;
            assert!(guard < 100_000, "no quiescence");
        }
    }
}

/// Runs one seed; returns (some member restarted, some member gone for good).
fn run(seed: u64) -> (bool, bool) {
    let t0 = Timestamp::from_unix_millis(1_800_000_000_000);
    let mut cfg = LeaderConfig::new(L, G);
    cfg.id_seed = seed;
    let mut leader = GroupLeader::new(t0, cfg).unwrap();
    let mut members = Vec::new();
    for (i, m) in MEMBERS.iter().enumerate() {
        leader.invite_inbox(t0, m).unwrap();
        let mut c = MemberConfig::new(m, L, G);
        c.id_seed = seed.wrapping_mul(31).wrapping_add(i as u64);
        members.push(GroupMember::joined(t0, c));
    }
    let mut w = World {
        rng: Rng(seed),
        now: 0,
        leader,
        members,
        net: Vec::new(),
        faulty: false,
        incarnation: vec![0; MEMBERS.len()],
        restarted_after: vec![0; MEMBERS.len()],
        gone: vec![false; MEMBERS.len()],
        tasks: 0,
        starts: BTreeMap::new(),
        mentioned: BTreeMap::new(),
        leader_view: BTreeMap::new(),
    };
    w.collect();
    w.quiesce(); // everyone joined
    w.faulty = true;
    let mut tasks = 0;
    for _ in 0..60 {
        match w.rng.below(10) {
            0..=1 if tasks < 4 => {
                tasks += 1;
                w.tasks = tasks as usize;
                let task = format!("t{tasks}");
                let (mentions, who): (Mentions, Vec<usize>) = match w.rng.below(3) {
                    0 => (Mentions::All, vec![1, 2, 3]),
                    1 => {
                        let i = w.rng.below(3) as usize;
                        (Mentions::List(vec![MEMBERS[i].into()]), vec![i + 1])
                    }
                    _ => (
                        Mentions::List(vec![MEMBERS[0].into(), MEMBERS[2].into()]),
                        vec![1, 3],
                    ),
                };
                w.mentioned
                    .insert(task.clone(), who.iter().map(|i| i - 1).collect());
                let cmd = GroupCommand::new(CommandKind::Start, &task, "s", mentions).text("go");
                let now = w.ts();
                w.leader.send(now, cmd).unwrap();
                w.collect();
            }
            2 if tasks > 0 => {
                let task = format!("t{}", 1 + w.rng.below(tasks));
                let done = w.leader.partners_in(&task, TaskState::AwaitingCompletion);
                if let Some(p) = done.into_iter().next() {
                    let cmd = GroupCommand::new(
                        CommandKind::Complete,
                        &task,
                        "s",
                        Mentions::List(vec![p]),
                    );
                    let now = w.ts();
                    w.leader.send(now, cmd).unwrap();
                    w.collect();
                }
            }
            3 => {
                let who = w.rng.below(4) as usize;
                if who > 0 && w.gone[who - 1] {
                    continue;
                }
                w.crash(who);
            }
            4 if w.rng.chance(25) => {
                let i = w.rng.below(3) as usize;
                if !w.gone[i] {
                    // At most one member leaves for good.
                    let gone = !w.gone.contains(&true) && w.rng.chance(30);
                    w.process_crash(i, gone, seed);
                }
            }
            _ => {
                for _ in 0..w.rng.below(6) {
                    w.deliver_one();
                }
            }
        }
    }
    // Heal: nothing is lost any more; the status round makes everyone catch up.
    w.faulty = false;
    w.quiesce();
    for _ in 0..3 {
        let now = w.ts();
        w.leader.get_status(now, Mentions::All).unwrap();
        w.collect();
        w.quiesce();
    }
    // The status deadline passes: whoever did not answer is not-connected.
    w.now += 60_000;
    let now = w.ts();
    w.leader.handle_timeout(now);
    for (i, m) in MEMBERS.iter().enumerate() {
        let c = w.leader.member(m).map(|v| v.connection);
        let want = if w.gone[i] {
            Connection::NotConnected
        } else {
            Connection::Connected
        };
        assert_eq!(
            c,
            Some(want),
            "seed {seed}: member {i} (gone: {})",
            w.gone[i]
        );
    }
    for (task, who) in w.mentioned.clone() {
        let n: usize = task[1..].parse().unwrap();
        for i in who {
            if w.gone[i] || n <= w.restarted_after[i] {
                continue; // died with the process
            }
            let mine = w.members[i].task_state(&task);
            let seen = w.leader.result(&task, MEMBERS[i]).map(|r| r.state());
            assert!(mine.is_some(), "seed {seed}: member {i} never got {task}");
            assert_eq!(
                seen, mine,
                "seed {seed}: leader's view of {task} at member {i}"
            );
        }
    }
    (w.incarnation.iter().any(|&n| n > 0), w.gone.contains(&true))
}

#[test]
fn group_mode_survives_loss_duplication_reordering_and_crashes() {
    let seeds: u64 = std::env::var("AIP_GROUP_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(10_000);
    let (mut restarted, mut gone) = (0u64, 0u64);
    for seed in 0..seeds {
        match std::panic::catch_unwind(|| run(seed)) {
            Ok((r, g)) => {
                restarted += u64::from(r);
                gone += u64::from(g);
            }
            Err(_) => panic!(
                "seed {seed} failed (rerun: AIP_GROUP_SIM_SEEDS={} and look at seed {seed})",
                seed + 1
            ),
        }
    }
    eprintln!("{seeds} seeds: {restarted} with a member process restarted, {gone} with one gone");
    if seeds >= 1000 {
        assert!(
            restarted > seeds / 10 && gone > seeds / 50,
            "process crashes too rare to mean anything: {restarted} restarted, {gone} gone"
        );
    }
}
