//! AWCP's timers on the shared table ([`engine_basics::timers`]): a delegation has at most one
//! timer of each kind, keyed `(delegation, kind)`, so all of one delegation's timers are
//! neighbours in key order.

use engine_basics::timers::{Reason, TimerTable};

use crate::id::DelegationId;
use crate::time::Timestamp;

/// What both engines hold for the drive contract: outputs, the clock, and the timers keyed
/// `(delegation, kind)`.
pub(crate) type Core<K, O> = engine_basics::timers::Core<(DelegationId, K), O, Timestamp>;

/// A kind of delegation timer ([`super::delegator::Timer`], [`super::executor::ExecutorTimer`]).
pub(crate) trait TimerKind: Ord + Copy + Reason {
    /// `Output`: the reason `poll_timeout` gives while outputs are queued ("drain them now").
    /// Never armed, and first in order, so `(id, OUTPUT)` starts the range of `id`'s timers.
    const OUTPUT: Self;
}

/// What AWCP adds to the shared table.
pub(crate) trait DelegationTimers {
    /// Cancels all of `id`'s timers.
    fn cancel_all(&mut self, id: &DelegationId);
}

impl<K: TimerKind> DelegationTimers for TimerTable<(DelegationId, K), Timestamp> {
    fn cancel_all(&mut self, id: &DelegationId) {
        let from = (id.clone(), K::OUTPUT);
        let last = self
            .range(&from..)
            .take_while(|((owner, _), _)| owner == id)
            .last()
            .map(|((_, kind), _)| *kind);
        if let Some(last) = last {
            self.cancel_range(from..=(id.clone(), last));
        }
    }
}

/// When to wake an engine and why: [`TimerKind::OUTPUT`] while outputs are queued, else the
/// next timer's kind.
pub(crate) fn next_wake<K: TimerKind, O>(core: &Core<K, O>) -> Option<(Timestamp, K)> {
    core.next_wake()
        .map(|(at, key)| (at, key.map_or(K::OUTPUT, |(_, kind)| *kind)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::engine::delegator::Timer;
    use crate::engine::executor::ExecutorTimer;

    fn id(n: u8) -> DelegationId {
        DelegationId::new(format!("dlg_{n}")).unwrap()
    }

    #[test]
    fn cancel_all_cancels_one_delegations_timers_only() {
        let mut t = TimerTable::new();
        let at = Timestamp::from_unix_millis;
        for n in 1..=3 {
            t.set((id(n), Timer::Lease), at(10));
            t.set((id(n), Timer::Forget), at(5));
            t.set((id(n), Timer::Reconnect), at(7));
        }
        t.cancel_all(&id(2));
        t.cancel_all(&id(9));
        assert_eq!(t.len(), 6);
        assert!(t.deadline(&(id(2), Timer::Lease)).is_none());
        assert_eq!(t.deadline(&(id(3), Timer::Forget)), Some(at(5)));
        let mut core: Core<Timer, ()> = Core::default();
        core.timers = t;
        assert_eq!(next_wake(&core), Some((at(5), Timer::Forget)));
        core.outputs.push_back(());
        assert_eq!(next_wake(&core), Some((Timestamp::EPOCH, Timer::Output)));
    }

    #[test]
    fn output_sorts_before_every_kind() {
        for t in [
            Timer::Lease,
            Timer::SetupGrace,
            Timer::Reconnect,
            Timer::Forget,
        ] {
            assert!(Timer::OUTPUT < t, "{t:?}");
        }
        for t in [
            ExecutorTimer::StartDeadline,
            ExecutorTimer::Lease,
            ExecutorTimer::StopGrace,
            ExecutorTimer::Retention,
        ] {
            assert!(ExecutorTimer::OUTPUT < t, "{t:?}");
        }
    }
}
