//! The applications on both sides: what a partner's agent does with its tasks, and what the
//! leader's user does with the results. All choices come from the run's generator.

use std::collections::BTreeMap;
use std::time::Duration;

use aip_proto::leader::{Delivery, LeaderEvent, StartTask};
use aip_proto::partner::PartnerEvent;
use aip_proto::{DataItem, Product, StartParams, TaskState};

use super::world::{Ev, World};
use super::AipSimConfig;

/// A scheduled application action.
#[derive(Debug)]
pub(crate) enum Step {
    /// The leader starts task `i` of the plan.
    LeaderStart(usize),
    /// The leader acts on a task.
    Leader(String, Act),
    /// A partner decides a start (accept?).
    Decide(usize, String, bool),
    /// A partner begins working.
    Work(usize, String),
    /// A partner streams product chunk `n` (1 or 2).
    Chunk(usize, String, u8),
    /// A partner finishes a round of work.
    Finish(usize, String),
}

/// A leader action.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Act {
    Continue,
    Complete,
    Cancel,
}

/// Per-task application memory.
#[derive(Debug, Default)]
pub(crate) struct Apps {
    continues: BTreeMap<String, u32>,
    inputs: BTreeMap<(usize, String), u32>,
}

impl Apps {
    pub(crate) fn new(_cfg: &AipSimConfig) -> Self {
        Apps::default()
    }
}

impl World {
    fn later(&mut self, lo: u64, hi: u64, step: Step) {
        let t = self.now + self.rng.range(lo, hi);
        self.at(t, Ev::App(step));
    }

    pub(crate) fn app_step(&mut self, step: Step) {
        match step {
            Step::LeaderStart(i) => self.leader_start(i),
            Step::Leader(task, act) => {
                let now = self.clock(0);
                self.check
                    .leader_clock(now.as_unix_millis(), self.now, false);
                let r = match act {
                    Act::Continue => {
                        *self.apps.continues.entry(task.clone()).or_default() += 1;
                        self.leader.continue_task(
                            now,
                            &task,
                            vec![DataItem::text("more detail, please")],
                        )
                    }
                    Act::Complete => self.leader.complete(now, &task),
                    Act::Cancel => self.leader.cancel(now, &task),
                };
                if let Ok(t) = r {
                    self.check.ticket_issued(t);
                }
                self.log(|| format!("L app {act:?} {task}: {r:?}"));
            }
            Step::Decide(p, task, accept) => {
                let now = self.clock(p + 1);
                let r = if accept {
                    self.partners[p].accept(now, &task)
                } else {
                    self.partners[p].reject(now, &task, vec![DataItem::text("not my skill")])
                };
                self.log(|| format!("p{p} app decide {accept} {task}: {r:?}"));
            }
            Step::Work(p, task) => {
                let now = self.clock(p + 1);
                let r = self.partners[p].start_working(now, &task);
                self.log(|| format!("p{p} app work {task}: {r:?}"));
                if r.is_ok() {
                    if self.rng.chance(300) {
                        self.later(50, 500, Step::Chunk(p, task, 1));
                    } else {
                        self.later(100, 3_000, Step::Finish(p, task));
                    }
                }
            }
            Step::Chunk(p, task, n) => {
                let now = self.clock(p + 1);
                let chunk = Product::text("report", format!("part {n} of the report"));
                let r = self.partners[p].product_chunk(now, &task, chunk, n > 1, n == 2);
                self.log(|| format!("p{p} app chunk {n} {task}: {r:?}"));
                if r == Ok(TaskState::Working) {
                    if n < 2 {
                        self.later(50, 500, Step::Chunk(p, task, n + 1));
                    } else {
                        self.later(100, 2_000, Step::Finish(p, task));
                    }
                }
            }
            Step::Finish(p, task) => self.partner_finish(p, task),
        }
    }

    fn partner_finish(&mut self, p: usize, task: String) {
        let now = self.clock(p + 1);
        let roll = self.rng.below(100);
        let inputs = self
            .apps
            .inputs
            .get(&(p, task.clone()))
            .copied()
            .unwrap_or(0);
        let r = match roll {
            0..=59 => {
                let size = if self.rng.chance(200) { 600 } else { 40 };
                let product = Product::text("answer", "x".repeat(size));
                self.partners[p]
                    .submit(now, &task, vec![product], vec![])
                    .map(|_| ())
            }
            60..=79 if inputs < 2 => {
                *self.apps.inputs.entry((p, task.clone())).or_default() += 1;
                self.partners[p]
                    .request_input(now, &task, vec![DataItem::text("which city?")])
                    .map(|_| ())
            }
            60..=89 => {
                let r = self.partners[p].progress(now, &task, vec![DataItem::text("half way")]);
                if r.is_ok() {
                    self.later(100, 2_000, Step::Finish(p, task.clone()));
                }
                r
            }
            _ => self.partners[p]
                .fail(now, &task, vec![DataItem::text("the data source is down")])
                .map(|_| ()),
        };
        self.log(|| format!("p{p} app finish({roll}) {task}: {r:?}"));
    }

    fn leader_start(&mut self, i: usize) {
        let plan = self.cfg.tasks[i].clone();
        let task_id = format!("t{i}");
        let delivery = match plan.delivery {
            0 => Delivery::Rpc,
            1 => Delivery::Stream,
            _ => Delivery::Notification {
                url: None,
                token: None,
                states: plan.notify_on.iter().map(|s| TaskState::ALL[*s]).collect(),
            },
        };
        let start = StartTask {
            partner: format!("p{}", plan.partner),
            task_id: task_id.clone(),
            session_id: "session-1".into(),
            data_items: vec![DataItem::text(format!("task {i}: plan a trip"))],
            params: StartParams {
                response_timeout: None,
                awaiting_input_timeout: Some(Duration::from_millis(plan.awaiting_ms)),
                awaiting_completion_timeout: Some(Duration::from_millis(plan.awaiting_ms)),
                max_products_bytes: plan.max_bytes,
            },
            delivery,
            deadline: Some(Duration::from_millis(plan.deadline_ms)),
        };
        let now = self.clock(0);
        self.check
            .leader_clock(now.as_unix_millis(), self.now, false);
        let r = self.leader.start(now, start);
        self.log(|| format!("L app start {task_id}: {r:?}"));
        if let Ok(t) = r {
            self.check.ticket_issued(t);
            let lc = self.check.leader_clock_max;
            self.check
                .leader_started(&task_id, plan.partner, plan.delivery, lc, plan.deadline_ms);
            if self.rng.chance(100) {
                self.later(0, 10_000, Step::Leader(task_id, Act::Cancel));
            }
        }
    }

    pub(crate) fn leader_clock_ms(&self) -> u64 {
        self.clock(0).as_unix_millis()
    }

    /// The leader's user reacts to what it sees.
    pub(crate) fn leader_app(&mut self, e: &LeaderEvent) {
        let LeaderEvent::StateChanged {
            task_id, status, ..
        } = e
        else {
            return;
        };
        let roll = self.rng.below(100);
        let continues = self.apps.continues.get(task_id).copied().unwrap_or(0);
        let act = match (status.state, roll) {
            (TaskState::AwaitingInput, 0..=79) => Some(Act::Continue),
            (TaskState::AwaitingInput, 80..=89) => Some(Act::Cancel),
            (TaskState::AwaitingCompletion, 0..=64) => Some(Act::Complete),
            (TaskState::AwaitingCompletion, 65..=79) if continues < 2 => Some(Act::Continue),
            (TaskState::AwaitingCompletion, 65..=79) => Some(Act::Complete),
            (TaskState::AwaitingCompletion, 80..=84) => Some(Act::Cancel),
            _ => None,
        };
        if let Some(act) = act {
            self.later(0, 2_000, Step::Leader(task_id.clone(), act));
        }
    }

    /// The partner's agent reacts to what it is told.
    pub(crate) fn partner_app(&mut self, p: usize, e: &PartnerEvent) {
        match e {
            PartnerEvent::StartRequested { task_id, .. } => {
                let accept = !self.rng.chance(150);
                self.later(0, 3_000, Step::Decide(p, task_id.to_string(), accept));
            }
            PartnerEvent::TaskStarted { task_id, .. } => {
                self.later(0, 800, Step::Work(p, task_id.to_string()));
            }
            PartnerEvent::TaskContinued { task_id, .. } => {
                self.later(100, 2_000, Step::Finish(p, task_id.to_string()));
            }
            _ => {}
        }
    }
}
