//! AIP group mode at scale against a real RabbitMQ node (the test harness's own node, on free
//! loopback ports): one leader and `--partners N` (default 50) of our partners in one group,
//! all in this process on tokio, each partner on its own broker connection (plus one for its
//! inbox, through which it was invited).
//!
//! Per round the leader publishes one `start` mentioning `"all"`; every partner answers
//! accepted → working → awaiting-completion (three results, each fanned out to every queue of
//! the group). Measured: the time from the publish until the leader holds N
//! awaiting-completion results (median and p95 over `--rounds R`, default 30), messages
//! through the broker per second (publishes, and deliveries = publishes × queues), and
//! memory per member (RSS growth of this process and of the broker's Erlang VM while the N
//! partners joined, divided by N).
//!
//! `cargo bench -p aip-driver --bench group_scale` (`-- --partners N
//! --rounds R`). Needs Debian's `rabbitmq-server`. Without `--bench` (as `cargo test
//! --benches` runs it) the case is tiny.

#[path = "../tests/common/rabbit.rs"]
mod rabbit;

use std::time::{Duration, Instant};

use agent_rt::{Host, TokioRuntime};
use aip_driver::group::{
    GroupLeaderEvent, GroupLeaderHandle, GroupLeaderOptions, GroupPartnerEvent, GroupPartnerEvents,
    GroupPartnerHandle, GroupPartnerOptions,
};
use aip_proto::group::{GroupCommand, LeaderConfig, LeaderEvent, MemberEvent};
use aip_proto::{CommandKind, Mentions, Product, TaskState};
use futures::StreamExt;

fn arg(flag: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn aic(n: usize) -> String {
    format!(
        "1.2.156.3088.1.1.9.{}.1.{n:04}",
        std::process::id() % 100_000
    )
}

async fn echo(p: GroupPartnerHandle<TokioRuntime>, mut events: GroupPartnerEvents) {
    while let Some(e) = events.next().await {
        if let GroupPartnerEvent::Group { group_id, event } = e {
            if let MemberEvent::TaskStarted { task_id, .. } = *event {
                let _ = p.accept(&group_id, &task_id).await;
                let _ = p.start_working(&group_id, &task_id).await;
                let _ = p
                    .submit(&group_id, &task_id, vec![Product::text("answer", "ok")])
                    .await;
            }
        }
    }
}

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let n = arg("--partners", if full { 50 } else { 3 });
    let rounds = arg("--rounds", if full { 30 } else { 2 });
    let Some(b) = rabbit::Broker::start() else {
        eprintln!("rabbitmq-server is not installed: nothing measured");
        return;
    };
    let beam = b.beam_pid();
    <TokioRuntime as Host>::block_on(async move {
        let rt = TokioRuntime;
        let group = format!("scale-{}", std::process::id());
        let mut cfg = LeaderConfig::new(&aic(0), &group);
        cfg.status_timeout = Duration::from_secs(30);
        let (l, mut ev) = GroupLeaderHandle::spawn(rt, GroupLeaderOptions::new(&b.url(), cfg))
            .await
            .expect("leader");
        let (me0, beam0) = (rss_kb(std::process::id()), beam.map_or(0, rss_kb));
        let t_join = Instant::now();
        let mut keep = Vec::new();
        for i in 1..=n {
            let (p, events) = GroupPartnerHandle::new(rt, GroupPartnerOptions::new(&aic(i)));
            p.listen_inbox(&b.url()).await.expect("inbox");
            rt_spawn(echo(p.clone(), events));
            l.invite_inbox(&aic(i)).await.expect("invite");
            keep.push(p);
        }
        let mut joined = 0;
        while joined < n {
            if let Some(GroupLeaderEvent::Group(LeaderEvent::MemberJoined { .. })) = ev.next().await
            {
                joined += 1;
            }
        }
        let join_time = t_join.elapsed();
        let (me1, beam1) = (rss_kb(std::process::id()), beam.map_or(0, rss_kb));

        let mut times = Vec::new();
        let t_all = Instant::now();
        for r in 0..rounds {
            let task = format!("t-{r}");
            let t0 = Instant::now();
            l.send(GroupCommand::new(CommandKind::Start, &task, "s", Mentions::All).text("go"))
                .await
                .unwrap();
            let mut done = 0;
            while done < n {
                match ev.next().await {
                    Some(GroupLeaderEvent::Group(LeaderEvent::TaskUpdate { result, .. }))
                        if result.task_id == task
                            && result.status.state == TaskState::AwaitingCompletion =>
                    {
                        done += 1
                    }
                    Some(_) => {}
                    None => panic!("leader stopped"),
                }
            }
            times.push(t0.elapsed());
        }
        let total = t_all.elapsed().as_secs_f64();
        times.sort();
        let pct = |p: f64| times[((times.len() - 1) as f64 * p).round() as usize];
        let publishes = rounds * (1 + 3 * n);
        let deliveries = publishes * (n + 1);
        println!("group_scale: {n} partners, {rounds} rounds (tokio, one broker on loopback)");
        println!(
            "  join {n} partners by inbox: {:.2} s",
            join_time.as_secs_f64()
        );
        println!(
            "  fan-out of one start + {n} awaiting-completion results: median {:.1} ms, p95 {:.1} ms",
            pct(0.5).as_secs_f64() * 1e3,
            pct(0.95).as_secs_f64() * 1e3
        );
        println!(
            "  through the broker: {:.0} publishes/s, {:.0} deliveries/s",
            publishes as f64 / total,
            deliveries as f64 / total
        );
        println!(
            "  memory per member: this process {:.0} KiB, broker {:.0} KiB (RSS growth / {n})",
            (me1.saturating_sub(me0)) as f64 / n as f64,
            (beam1.saturating_sub(beam0)) as f64 / n as f64
        );
        l.disband().await.unwrap();
    });
}

fn rt_spawn(f: impl std::future::Future<Output = ()> + Send + 'static) {
    use agent_rt::Runtime;
    TokioRuntime.spawn(Box::pin(f));
}
