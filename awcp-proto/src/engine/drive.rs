//! The canonical drive loop, shared by both runtime drivers (`awcp-driver`, under tokio and
//! smol) and by the deterministic simulation.
//!
//! An engine has no clock, no I/O and no threads: something else decides when it runs. Each
//! turn does one thing to it and then takes everything it wants done, in this order:
//!
//! ```text
//! loop {
//!     1. feed what woke us: one input (`handle(now, input)`), the deadline
//!        (`handle_timeout(now)`), or nothing when an application call was just made;
//!     2. drain `poll_output()` until it returns None, executing every output
//!        (executing starts work; its result comes back later as an input);
//!     3. ask `poll_timeout()` for the next deadline;
//!     4. wait for the next input or that deadline, whichever comes first.
//! }
//! ```
//!
//! [`turn`] is steps 1–3; step 4 is the driver's, with its runtime (a select over its input
//! channel and a sleep until the deadline) or the simulation's virtual clock. Never skip step
//! 2: an output left in the queue is work nobody does, and the deadline of step 3 is only
//! right once the queue is empty. Feeding the timeout early is harmless (nothing is due yet);
//! feeding it late only delays what was due.

use crate::time::Timestamp;

use super::delegator::{Delegator, DelegatorInput, DelegatorOutput};
use super::executor::{Executor, ExecutorInput, ExecutorOutput};
use super::UsageError;

/// A sans-IO engine, as [`turn`] drives it ([`Delegator`] and [`Executor`]).
pub trait Engine {
    /// What the driver feeds it.
    type Input;
    /// What it asks the driver to do.
    type Output;
    /// Feeds one input at `now`.
    fn handle(&mut self, now: Timestamp, input: Self::Input) -> Result<(), UsageError>;
    /// Fires every timer due at `now`.
    fn handle_timeout(&mut self, now: Timestamp);
    /// The next thing to do, if any.
    fn poll_output(&mut self) -> Option<Self::Output>;
    /// When [`Engine::handle_timeout`] must be called next, if ever.
    fn next_deadline(&self) -> Option<Timestamp>;
}

impl Engine for Delegator {
    type Input = DelegatorInput;
    type Output = DelegatorOutput;
    fn handle(&mut self, now: Timestamp, input: DelegatorInput) -> Result<(), UsageError> {
        Delegator::handle(self, now, input)
    }
    fn handle_timeout(&mut self, now: Timestamp) {
        Delegator::handle_timeout(self, now);
    }
    fn poll_output(&mut self) -> Option<DelegatorOutput> {
        Delegator::poll_output(self)
    }
    fn next_deadline(&self) -> Option<Timestamp> {
        self.poll_timeout().map(|(at, _)| at)
    }
}

impl Engine for Executor {
    type Input = ExecutorInput;
    type Output = ExecutorOutput;
    fn handle(&mut self, now: Timestamp, input: ExecutorInput) -> Result<(), UsageError> {
        Executor::handle(self, now, input)
    }
    fn handle_timeout(&mut self, now: Timestamp) {
        Executor::handle_timeout(self, now);
    }
    fn poll_output(&mut self) -> Option<ExecutorOutput> {
        Executor::poll_output(self)
    }
    fn next_deadline(&self) -> Option<Timestamp> {
        self.poll_timeout().map(|(at, _)| at)
    }
}

/// What woke the loop (step 1 of the [module's loop](self)).
#[derive(Debug)]
pub enum Wake<I> {
    /// An input arrived.
    Input(I),
    /// The deadline [`turn`] returned last was reached.
    Timeout,
    /// The driver just called the engine directly (an application call such as
    /// `delegate` or `cancel`): only drain.
    Drained,
}

/// Whoever executes an engine's outputs: a runtime driver or the simulation's host model.
pub trait Host {
    /// The engine it drives.
    type Engine: Engine;
    /// The engine, unless it is down (a crashed host in the simulation).
    fn engine(&mut self) -> Option<&mut Self::Engine>;
    /// Carries out one output (step 2).
    fn execute(&mut self, output: <Self::Engine as Engine>::Output);
    /// The engine refused an input (a driver bug or a stale completion): reported, not fatal.
    /// By default logged at debug level.
    fn refused(&mut self, error: UsageError) {
        tracing::debug!("input ignored: {error}");
    }
}

/// One turn of the loop (steps 1–3): feeds `wake` at `now`, executes every output, and returns
/// the next deadline (`None`: wait for an input only; also when the engine is down).
pub fn turn<H: Host>(
    host: &mut H,
    now: Timestamp,
    wake: Wake<<H::Engine as Engine>::Input>,
) -> Option<Timestamp> {
    let refused = match (host.engine(), wake) {
        (None, _) => return None,
        (Some(engine), Wake::Input(input)) => engine.handle(now, input).err(),
        (Some(engine), Wake::Timeout) => {
            engine.handle_timeout(now);
            None
        }
        (Some(_), Wake::Drained) => None,
    };
    if let Some(e) = refused {
        host.refused(e);
    }
    while let Some(output) = host.engine().and_then(Engine::poll_output) {
        host.execute(output);
    }
    host.engine().and_then(|e| e.next_deadline())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A counter engine: input n queues n outputs; a timeout at 10 queues one; refuses 0.
    #[derive(Default)]
    struct Toy {
        queue: Vec<u32>,
        deadline: Option<Timestamp>,
    }

    impl Engine for Toy {
        type Input = u32;
        type Output = u32;
        fn handle(&mut self, _now: Timestamp, n: u32) -> Result<(), UsageError> {
            if n == 0 {
                return Err(UsageError::InvalidRequest("zero".into()));
            }
            self.queue.extend(1..=n);
            self.deadline = Some(Timestamp::from_unix_millis(10));
            Ok(())
        }
        fn handle_timeout(&mut self, now: Timestamp) {
            if self.deadline.is_some_and(|d| d <= now) {
                self.deadline = None;
                self.queue.push(99);
            }
        }
        fn poll_output(&mut self) -> Option<u32> {
            (!self.queue.is_empty()).then(|| self.queue.remove(0))
        }
        fn next_deadline(&self) -> Option<Timestamp> {
            self.deadline
        }
    }

    #[derive(Default)]
    struct ToyHost {
        engine: Option<Toy>,
        done: Vec<u32>,
        refused: u32,
    }

    impl Host for ToyHost {
        type Engine = Toy;
        fn engine(&mut self) -> Option<&mut Toy> {
            self.engine.as_mut()
        }
        fn execute(&mut self, output: u32) {
            self.done.push(output);
        }
        fn refused(&mut self, _error: UsageError) {
            self.refused += 1;
        }
    }

    #[test]
    fn a_turn_feeds_drains_everything_and_returns_the_next_deadline() {
        let mut h = ToyHost {
            engine: Some(Toy::default()),
            ..ToyHost::default()
        };
        let t = |ms| Timestamp::from_unix_millis(ms);
        assert_eq!(turn(&mut h, t(0), Wake::Input(3)), Some(t(10)));
        assert_eq!(h.done, [1, 2, 3]);
        assert_eq!(
            turn(&mut h, t(5), Wake::Timeout),
            Some(t(10)),
            "not due yet"
        );
        assert_eq!(turn(&mut h, t(10), Wake::Timeout), None);
        assert_eq!(h.done, [1, 2, 3, 99]);
        assert_eq!(turn(&mut h, t(11), Wake::Input(0)), None);
        assert_eq!(h.refused, 1);
        h.engine = None;
        assert_eq!(turn(&mut h, t(12), Wake::Input(1)), None, "a down engine");
        assert_eq!(h.done.len(), 4);
    }
}
