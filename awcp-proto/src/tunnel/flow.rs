//! Flow control of one extension stream's body: the sender may send only as many bytes as
//! the receiver granted; the receiver grants more as its consumer takes bytes.
//!
//! * Each side announces in the handshake the window it gives every stream it receives a
//!   body on (`AUTH.window`, `AUTH_OK.window`): a sender starts with that much credit.
//! * The receiver counts bytes its local consumer has taken (the driver reports them); once
//!   they reach half the window it sends `WINDOW{stream, increment}` with all of them. So the
//!   bytes a receiver holds for a stream (received, not yet consumed) never exceed its window.
//! * Receiving more than the credit granted, or a grant that takes the credit past
//!   [`MAX_WINDOW`], is a violation: the receiver resets the stream.
//!
//! [`SendFlow`] is the sender's half, [`RecvFlow`] the receiver's. The sender's local side
//! (the driver reading the body) is paced the same way: it is told how many bytes it may feed
//! (`…Credit` outputs), may overshoot by the one chunk it holds, and the overshoot waits in
//! [`SendFlow`] until credit arrives: what a machine buffers for a body is bounded by one
//! chunk.

use std::collections::VecDeque;

use super::codec::DataFrame;
use super::frames::{StreamNo, MAX_DATA_PAYLOAD, MAX_WINDOW};

/// A flow-control violation by the peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Violation {
    /// More bytes than granted.
    Overrun,
    /// A grant past [`MAX_WINDOW`].
    Overflow,
}

impl Violation {
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Violation::Overrun => "flow control: more bytes than granted",
            Violation::Overflow => "flow control: window over 2^31-1",
        }
    }
}

/// The local side fed a body chunk it had no allowance for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct NoCredit;

/// The sending half of one body.
#[derive(Debug)]
pub(crate) struct SendFlow {
    /// Bytes the peer granted that were not sent yet.
    credit: u64,
    /// Bytes fed by the local side, not sent yet (waiting for credit), oldest first; the
    /// first chunk's bytes before `front_sent` were sent.
    queued: VecDeque<Vec<u8>>,
    front_sent: usize,
    queued_bytes: u64,
    /// Allowance told to the local side and not used yet.
    promised: u64,
    /// The local side ended the body.
    end_queued: bool,
    /// The END frame was produced.
    finished: bool,
}

impl SendFlow {
    /// A sender with the peer's initial window as credit.
    pub(crate) fn new(initial_credit: u32) -> Self {
        SendFlow {
            credit: u64::from(initial_credit),
            queued: VecDeque::new(),
            front_sent: 0,
            queued_bytes: 0,
            promised: 0,
            end_queued: false,
            finished: false,
        }
    }

    /// The peer granted `increment` more bytes.
    pub(crate) fn grant(&mut self, increment: u32) -> Result<(), Violation> {
        let credit = self.credit + u64::from(increment);
        if credit > u64::from(MAX_WINDOW) {
            return Err(Violation::Overflow);
        }
        self.credit = credit;
        Ok(())
    }

    /// The local side feeds `bytes`. Refused when it has no allowance left (a chunk may
    /// overshoot the allowance, a second may not); an empty chunk is always taken.
    pub(crate) fn push(&mut self, bytes: Vec<u8>) -> Result<(), NoCredit> {
        if bytes.is_empty() {
            return Ok(());
        }
        if self.promised == 0 || self.end_queued {
            return Err(NoCredit);
        }
        let n = bytes.len() as u64;
        self.promised = self.promised.saturating_sub(n);
        self.queued_bytes += n;
        self.queued.push_back(bytes);
        Ok(())
    }

    /// The local side ended the body.
    pub(crate) fn finish(&mut self) {
        self.end_queued = true;
        self.promised = 0;
    }

    /// The next binary frame the credit allows, if any (at most [`MAX_DATA_PAYLOAD`] bytes;
    /// the END flag on the frame that carries the body's last bytes, or on an empty frame).
    pub(crate) fn next_frame(&mut self, stream: StreamNo) -> Option<Vec<u8>> {
        if self.finished {
            return None;
        }
        if self.queued_bytes == 0 {
            if self.end_queued {
                self.finished = true;
                return Some(DataFrame::encode_parts(stream, true, &[]));
            }
            return None;
        }
        if self.credit == 0 {
            return None;
        }
        let front = self.queued.front()?;
        let left = front.len() - self.front_sent;
        let n = left
            .min(MAX_DATA_PAYLOAD)
            .min(usize::try_from(self.credit).unwrap_or(usize::MAX));
        let last = n == left && self.queued.len() == 1 && self.end_queued;
        let frame =
            DataFrame::encode_parts(stream, last, &front[self.front_sent..self.front_sent + n]);
        self.credit -= n as u64;
        self.queued_bytes -= n as u64;
        if n == left {
            self.queued.pop_front();
            self.front_sent = 0;
        } else {
            self.front_sent += n;
        }
        if last {
            self.finished = true;
        }
        Some(frame)
    }

    /// New allowance for the local side, if the credit leaves room beyond what is queued
    /// and already promised (and the body is still open).
    pub(crate) fn allowance(&mut self) -> Option<u64> {
        if self.end_queued {
            return None;
        }
        let room = self
            .credit
            .checked_sub(self.queued_bytes)?
            .checked_sub(self.promised)?;
        if room == 0 {
            return None;
        }
        self.promised += room;
        Some(room)
    }

    /// Bytes fed and not sent yet.
    pub(crate) fn queued_bytes(&self) -> u64 {
        self.queued_bytes
    }

    /// Whether the END frame was produced.
    pub(crate) fn is_finished(&self) -> bool {
        self.finished
    }

    /// The credit left (tests).
    #[cfg(test)]
    pub(crate) fn credit(&self) -> u64 {
        self.credit
    }
}

/// The receiving half of one body.
#[derive(Debug)]
pub(crate) struct RecvFlow {
    window: u64,
    /// Bytes the peer may still send.
    available: u64,
    /// Bytes received and handed on, not yet consumed.
    buffered: u64,
    /// Bytes consumed, not yet granted back.
    unacked: u64,
}

impl RecvFlow {
    /// A receiver that granted `window` bytes.
    pub(crate) fn new(window: u32) -> Self {
        RecvFlow {
            window: u64::from(window),
            available: u64::from(window),
            buffered: 0,
            unacked: 0,
        }
    }

    /// `n` bytes arrived.
    pub(crate) fn receive(&mut self, n: usize) -> Result<(), Violation> {
        let n = n as u64;
        if n > self.available {
            return Err(Violation::Overrun);
        }
        self.available -= n;
        self.buffered += n;
        Ok(())
    }

    /// The local consumer took `n` bytes (at most what is buffered counts): the increment to
    /// grant, once half the window is waiting to be granted back.
    pub(crate) fn consumed(&mut self, n: u64) -> Option<u32> {
        let n = n.min(self.buffered);
        self.buffered -= n;
        self.unacked += n;
        if self.unacked == 0 || self.unacked < self.window / 2 {
            return None;
        }
        // `unacked` ≤ window ≤ MAX_WINDOW.
        let inc = u32::try_from(self.unacked).ok()?;
        self.available += self.unacked;
        self.unacked = 0;
        Some(inc)
    }

    /// The most bytes this stream can make the receiver hold: what the peer may still send
    /// plus what is held now.
    pub(crate) fn committed(&self) -> u64 {
        self.available + self.buffered
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(s: &mut SendFlow) -> Vec<DataFrame> {
        std::iter::from_fn(|| s.next_frame(1))
            .map(|b| DataFrame::decode(b).unwrap())
            .collect()
    }

    #[test]
    fn a_sender_stops_at_its_credit_and_resumes_on_a_grant() {
        let mut s = SendFlow::new(100);
        assert_eq!(s.allowance(), Some(100));
        assert_eq!(s.allowance(), None);
        // One chunk may overshoot the allowance; the next is refused.
        s.push(vec![7; 250]).unwrap();
        assert_eq!(s.push(vec![1]), Err(NoCredit));
        let frames = drain(&mut s);
        assert_eq!(frames.len(), 1);
        assert_eq!(frames[0].payload.len(), 100);
        assert_eq!(s.queued_bytes(), 150);
        assert_eq!(s.allowance(), None);
        s.grant(100).unwrap();
        assert_eq!(drain(&mut s)[0].payload.len(), 100);
        s.grant(200).unwrap();
        assert_eq!(drain(&mut s)[0].payload.len(), 50);
        assert_eq!(s.allowance(), Some(150));
        s.finish();
        let end = drain(&mut s);
        assert_eq!(end.len(), 1);
        assert!(end[0].end && end[0].payload.is_empty());
        assert!(s.is_finished());
        assert!(drain(&mut s).is_empty());
    }

    #[test]
    fn the_end_flag_rides_on_the_last_bytes_and_frames_are_capped() {
        let mut s = SendFlow::new(MAX_WINDOW);
        s.allowance();
        s.push(vec![0; MAX_DATA_PAYLOAD + 10]).unwrap();
        s.finish();
        let frames = drain(&mut s);
        assert_eq!(frames.len(), 2);
        assert_eq!(frames[0].payload.len(), MAX_DATA_PAYLOAD);
        assert!(!frames[0].end);
        assert_eq!(frames[1].payload.len(), 10);
        assert!(frames[1].end);
        assert_eq!(
            s.credit(),
            u64::from(MAX_WINDOW) - MAX_DATA_PAYLOAD as u64 - 10
        );
    }

    #[test]
    fn grants_past_the_maximum_are_violations() {
        let mut s = SendFlow::new(MAX_WINDOW - 1);
        assert_eq!(s.grant(1), Ok(()));
        assert_eq!(s.grant(1), Err(Violation::Overflow));
    }

    #[test]
    fn a_receiver_grants_back_at_half_its_window_and_catches_overruns() {
        let mut r = RecvFlow::new(1000);
        r.receive(600).unwrap();
        assert_eq!(r.consumed(400), None);
        assert_eq!(r.consumed(100), Some(500));
        assert_eq!(r.committed(), 900 + 100);
        r.receive(900).unwrap();
        assert_eq!(r.receive(1), Err(Violation::Overrun));
        // Consuming more than was received counts only what was.
        assert_eq!(r.consumed(5000), Some(1000));
    }
}
