//! The canonical drive loop, shared by every driver of every engine (AWCP's delegator and
//! executor, AIP's partner, leader and group engines, under tokio and smol) and by the
//! deterministic simulations.
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
//!     3. ask the engine for its next deadline;
//!     4. wait for the next input or that deadline, whichever comes first.
//! }
//! ```
//!
//! [`turn`] is steps 1–3; step 4 is the driver's, with its runtime (a select over its input
//! channels and a sleep until the deadline) or the simulation's virtual clock. Never skip step
//! 2: an output left in the queue is work nobody does, and the deadline of step 3 is only
//! right once the queue is empty. Feeding the timeout early is harmless (nothing is due yet);
//! feeding it late only delays what was due.
//!
//! What executing an output learns at once (a stream found closed while writing to it) is
//! not fed back from inside [`Host::execute`]: the host keeps it and feeds it as the input of
//! the next turn, so every input goes through step 1.

use core::fmt::Display;

/// A sans-IO engine, as [`turn`] drives it.
pub trait Engine {
    /// What the driver feeds it.
    type Input;
    /// What it asks the driver to do.
    type Output;
    /// Its clock's type (each engine has its own timestamp).
    type Time: Copy;
    /// Why it refuses an input ([`core::convert::Infallible`] for an engine that takes every
    /// input).
    type Refusal: Display;
    /// Feeds one input at `now`.
    fn handle(&mut self, now: Self::Time, input: Self::Input) -> Result<(), Self::Refusal>;
    /// Fires every timer due at `now`.
    fn handle_timeout(&mut self, now: Self::Time);
    /// The next thing to do, if any.
    fn poll_output(&mut self) -> Option<Self::Output>;
    /// When [`Engine::handle_timeout`] must be called next, if ever.
    fn next_deadline(&self) -> Option<Self::Time>;
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

/// Whoever executes an engine's outputs: a runtime driver or a simulation's host model.
pub trait Host {
    /// The engine it drives.
    type Engine: Engine;
    /// The engine, unless it is down (a crashed host in a simulation).
    fn engine(&mut self) -> Option<&mut Self::Engine>;
    /// Carries out one output (step 2).
    fn execute(&mut self, output: <Self::Engine as Engine>::Output);
    /// The engine refused an input (a driver bug or a stale completion): reported, not fatal.
    /// By default logged at debug level.
    fn refused(&mut self, error: <Self::Engine as Engine>::Refusal) {
        tracing::debug!("input ignored: {error}");
    }
}

/// The time type of a host's engine.
pub type TimeOf<H> = <<H as Host>::Engine as Engine>::Time;

/// The input type of a host's engine.
pub type InputOf<H> = <<H as Host>::Engine as Engine>::Input;

/// One turn of the loop (steps 1–3): feeds `wake` at `now`, executes every output, and returns
/// the next deadline (`None`: wait for an input only; also when the engine is down).
pub fn turn<H: Host>(host: &mut H, now: TimeOf<H>, wake: Wake<InputOf<H>>) -> Option<TimeOf<H>> {
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
        deadline: Option<u64>,
    }

    impl Engine for Toy {
        type Input = u32;
        type Output = u32;
        type Time = u64;
        type Refusal = &'static str;
        fn handle(&mut self, _now: u64, n: u32) -> Result<(), &'static str> {
            if n == 0 {
                return Err("zero");
            }
            self.queue.extend(1..=n);
            self.deadline = Some(10);
            Ok(())
        }
        fn handle_timeout(&mut self, now: u64) {
            if self.deadline.is_some_and(|d| d <= now) {
                self.deadline = None;
                self.queue.push(99);
            }
        }
        fn poll_output(&mut self) -> Option<u32> {
            (!self.queue.is_empty()).then(|| self.queue.remove(0))
        }
        fn next_deadline(&self) -> Option<u64> {
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
        fn refused(&mut self, _error: &'static str) {
            self.refused += 1;
        }
    }

    #[test]
    fn a_turn_feeds_drains_everything_and_returns_the_next_deadline() {
        let mut h = ToyHost {
            engine: Some(Toy::default()),
            ..ToyHost::default()
        };
        assert_eq!(turn(&mut h, 0, Wake::Input(3)), Some(10));
        assert_eq!(h.done, [1, 2, 3]);
        assert_eq!(turn(&mut h, 5, Wake::Timeout), Some(10), "not due yet");
        assert_eq!(turn(&mut h, 10, Wake::Timeout), None);
        assert_eq!(h.done, [1, 2, 3, 99]);
        assert_eq!(turn(&mut h, 11, Wake::Input(0)), None);
        assert_eq!(h.refused, 1);
        h.engine = None;
        assert_eq!(turn(&mut h, 12, Wake::Input(1)), None, "a down engine");
        assert_eq!(h.done.len(), 4);
    }
}
