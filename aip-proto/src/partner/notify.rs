//! Notifications (§6.3): `notification/set|get|delete` manage configurations,
//! `notification/start` subscribes a task to one, and every state change (filtered by
//! `notifyOnStates`) queues a POST of the bare task to the configuration's URL.
//!
//! Deliveries to one configuration go out one at a time and in order, so a receiver never
//! sees an older state after a newer one. A failed attempt (non-2xx, no answer, or no outcome
//! within the attempt timeout) is retried with doubling backoff; after the last attempt, or
//! when the configuration is deleted, the notification is given up with an event. Every queued
//! notification ends in exactly one [`super::PartnerEvent::NotificationDelivered`] or
//! [`super::PartnerEvent::NotificationGaveUp`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde_json::json;

use super::{DeliveryOutcome, GiveUpReason, Partner, PartnerEvent, PartnerOutput, PartnerTimer};
use crate::engine::{Clock as _, DeliveryId, RequestId};
use crate::error::{ErrorCode, RpcError};
use crate::wire::{
    encode_error, encode_result, encode_task, NotificationConfig, NotificationIdParams, RpcId,
    TaskState,
};

#[derive(Debug)]
struct Pending {
    state: TaskState,
    body: Vec<u8>,
    attempts: u32,
}

#[derive(Debug, Default)]
struct Queue {
    pending: VecDeque<Pending>,
    in_flight: Option<DeliveryId>,
}

/// Configurations, queues and attempts in flight.
#[derive(Debug, Default)]
pub(crate) struct Notifier {
    configs: BTreeMap<String, NotificationConfig>,
    by_task: BTreeMap<String, BTreeSet<String>>,
    queues: BTreeMap<(String, String), Queue>,
    attempts: BTreeMap<DeliveryId, (String, String)>,
    next_delivery: u64,
    /// Notifications ever queued.
    queued_total: u64,
}

impl Notifier {
    pub(crate) fn queued_total(&self) -> u64 {
        self.queued_total
    }

    pub(crate) fn pending(&self) -> usize {
        self.queues.values().map(|q| q.pending.len()).sum()
    }

    /// Drops a purged task's configurations (its queued notifications still go out).
    pub(crate) fn forget_task(&mut self, task_id: &str) {
        for id in self.by_task.remove(task_id).unwrap_or_default() {
            self.configs.remove(&id);
        }
    }

    fn config_of(&self, task_id: &str, id: &str) -> Option<&NotificationConfig> {
        self.configs.get(id).filter(|c| c.task_id == task_id)
    }
}

fn valid_url(url: &str) -> bool {
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    (lower.starts_with("http://") && url.len() > 7)
        || (lower.starts_with("https://") && url.len() > 8)
}

impl Partner {
    pub(super) fn notification_set(&mut self, r: RequestId, id: &RpcId, mut c: NotificationConfig) {
        if !valid_url(&c.url) {
            let e = RpcError::new(ErrorCode::InvalidParams)
                .with_data(json!("url must be an http(s) URL"));
            return self.respond(r, encode_error(id, &e));
        }
        let n = &mut self.notifier;
        let existing =
            c.id.as_ref()
                .and_then(|i| n.configs.get(i))
                .map(|o| o.task_id.clone());
        if existing.is_none() {
            let per_task = n.by_task.get(&c.task_id).map_or(0, BTreeSet::len);
            if per_task >= self.config.max_notification_configs_per_task
                || n.configs.len() >= self.config.max_notification_configs
            {
                let e = RpcError::with_message(
                    ErrorCode::InternalError,
                    "too many notification configurations",
                );
                return self.respond(r, encode_error(id, &e));
            }
        }
        let cid = match c.id.clone() {
            Some(i) => i,
            None => self.ids.next("notification"),
        };
        c.id = Some(cid.clone());
        let n = &mut self.notifier;
        if let Some(old_task) = existing {
            if let Some(s) = n.by_task.get_mut(&old_task) {
                s.remove(&cid);
            }
        }
        n.by_task
            .entry(c.task_id.clone())
            .or_default()
            .insert(cid.clone());
        n.configs.insert(cid, c.clone());
        self.respond(r, encode_result(id, &c));
    }

    fn selected(&self, p: &NotificationIdParams) -> Vec<String> {
        let all = self.notifier.by_task.get(&p.task_id);
        match &p.notification_config_id {
            Some(i) => all
                .filter(|s| s.contains(i))
                .map(|_| vec![i.clone()])
                .unwrap_or_default(),
            None => all.map(|s| s.iter().cloned().collect()).unwrap_or_default(),
        }
    }

    pub(super) fn notification_get(&mut self, r: RequestId, id: &RpcId, p: &NotificationIdParams) {
        let list: Vec<&NotificationConfig> = self
            .selected(p)
            .iter()
            .filter_map(|i| self.notifier.configs.get(i))
            .collect();
        let body = encode_result(id, &list);
        self.respond(r, body);
    }

    pub(super) fn notification_delete(
        &mut self,
        r: RequestId,
        id: &RpcId,
        p: &NotificationIdParams,
    ) {
        for cid in self.selected(p) {
            self.notifier.configs.remove(&cid);
            if let Some(s) = self.notifier.by_task.get_mut(&p.task_id) {
                s.remove(&cid);
                if s.is_empty() {
                    self.notifier.by_task.remove(&p.task_id);
                }
            }
            // Queued notifications to a deleted configuration are given up now (the one in
            // flight is given up when its outcome arrives).
            let key = (p.task_id.clone(), cid);
            if let Some(q) = self.notifier.queues.get_mut(&key) {
                let keep = usize::from(q.in_flight.is_some());
                let dropped: Vec<Pending> = q.pending.drain(keep..).collect();
                if q.pending.is_empty() {
                    self.notifier.queues.remove(&key);
                }
                self.core.timers.cancel(&PartnerTimer::NotificationRetry(
                    key.0.clone(),
                    key.1.clone(),
                ));
                for d in dropped {
                    self.gave_up(&key.0, &key.1, d, GiveUpReason::ConfigDeleted);
                }
            }
        }
        self.respond(r, encode_result(id, &json!({ "success": true })));
    }

    /// Whether `config_id` is a configuration of `task_id`.
    pub(super) fn has_config(&self, task_id: &str, config_id: &str) -> bool {
        self.notifier.config_of(task_id, config_id).is_some()
    }

    /// Queues a notification of `state` for every subscription of the task that wants it.
    pub(super) fn notify_state(&mut self, task_id: &str, state: TaskState) {
        let Some(t) = self.tasks.get(task_id) else {
            return;
        };
        if t.notify.is_empty() {
            return;
        }
        let dialect = t.dialect;
        let wanted: Vec<String> = t
            .notify
            .iter()
            .filter(|(_, states)| states.is_empty() || states.contains(&state))
            .map(|(c, _)| c.clone())
            .collect();
        if wanted.is_empty() {
            return;
        }
        let Some(result) = self.result_of(task_id, None) else {
            return;
        };
        let body = encode_task(&result, dialect);
        for cid in wanted {
            let key = (task_id.to_owned(), cid.clone());
            let max = self.config.max_queued_notifications.max(1);
            self.notifier.queued_total += 1;
            let dropped = {
                let q = self.notifier.queues.entry(key.clone()).or_default();
                q.pending.push_back(Pending {
                    state,
                    body: body.clone(),
                    attempts: 0,
                });
                // Beyond the bound, the oldest not in flight is given up.
                (q.pending.len() > max)
                    .then(|| q.pending.remove(usize::from(q.in_flight.is_some())))
                    .flatten()
            };
            if let Some(old) = dropped {
                self.gave_up(task_id, &cid, old, GiveUpReason::QueueFull);
            }
            let idle = self
                .notifier
                .queues
                .get(&key)
                .is_some_and(|q| q.in_flight.is_none())
                && !self.core.timers.is_set(&PartnerTimer::NotificationRetry(
                    key.0.clone(),
                    key.1.clone(),
                ));
            if idle {
                self.send_next(task_id, &cid);
            }
        }
    }

    /// Sends the head of a queue.
    pub(super) fn send_next(&mut self, task_id: &str, cid: &str) {
        let key = (task_id.to_owned(), cid.to_owned());
        let Some(q) = self.notifier.queues.get(&key) else {
            return;
        };
        if q.in_flight.is_some() || q.pending.is_empty() {
            return;
        }
        let Some(c) = self.notifier.config_of(task_id, cid).cloned() else {
            // Deleted (or purged with its task): give everything up.
            let q = self.notifier.queues.remove(&key).unwrap_or_default();
            for p in q.pending {
                self.gave_up(task_id, cid, p, GiveUpReason::ConfigDeleted);
            }
            return;
        };
        self.notifier.next_delivery += 1;
        let d = DeliveryId(self.notifier.next_delivery);
        let Some(q) = self.notifier.queues.get_mut(&key) else {
            return;
        };
        let Some(head) = q.pending.front_mut() else {
            return;
        };
        head.attempts += 1;
        let body = head.body.clone();
        q.in_flight = Some(d);
        self.notifier.attempts.insert(d, key);
        let at = self.core.at(self.config.notification_retry.attempt_timeout);
        self.core
            .timers
            .set(PartnerTimer::NotificationTimeout(d), at);
        self.push(PartnerOutput::Notify {
            delivery: d,
            url: c.url,
            token: c.token,
            body,
        });
    }

    pub(super) fn on_delivery_result(&mut self, d: DeliveryId, outcome: DeliveryOutcome) {
        let Some(key) = self.notifier.attempts.remove(&d) else {
            return;
        };
        self.core
            .timers
            .cancel(&PartnerTimer::NotificationTimeout(d));
        let (task_id, cid) = key.clone();
        let Some(q) = self.notifier.queues.get_mut(&key) else {
            return;
        };
        q.in_flight = None;
        let ok = matches!(outcome, DeliveryOutcome::Status(s) if (200..300).contains(&s));
        let attempts = q.pending.front().map_or(0, |p| p.attempts);
        let policy = self.config.notification_retry;
        let deleted = self.notifier.config_of(&task_id, &cid).is_none();
        if ok || deleted || attempts >= policy.attempts.max(1) {
            let Some(q) = self.notifier.queues.get_mut(&key) else {
                return;
            };
            let Some(head) = q.pending.pop_front() else {
                return;
            };
            if q.pending.is_empty() {
                self.notifier.queues.remove(&key);
            }
            if ok {
                self.event(PartnerEvent::NotificationDelivered {
                    task_id: self.shared_id(&task_id),
                    config_id: cid.clone(),
                    state: head.state,
                });
            } else {
                let why = if deleted {
                    GiveUpReason::ConfigDeleted
                } else {
                    GiveUpReason::Exhausted
                };
                self.gave_up(&task_id, &cid, head, why);
            }
            self.send_next(&task_id, &cid);
        } else {
            let at = self.core.at(policy.backoff(attempts));
            self.core
                .timers
                .set(PartnerTimer::NotificationRetry(task_id, cid), at);
        }
    }

    fn gave_up(&mut self, task_id: &str, cid: &str, p: Pending, reason: GiveUpReason) {
        self.event(PartnerEvent::NotificationGaveUp {
            task_id: self.shared_id(task_id),
            config_id: cid.to_owned(),
            state: p.state,
            attempts: p.attempts,
            reason,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::valid_url;

    #[test]
    fn only_http_urls_are_receivers() {
        assert!(valid_url("http://127.0.0.1:9/n"));
        assert!(valid_url("HTTPS://leader.example/n"));
        assert!(!valid_url("http://"));
        assert!(!valid_url("file:///etc/passwd"));
        assert!(!valid_url("gopher://x"));
        assert!(!valid_url(""));
    }
}
