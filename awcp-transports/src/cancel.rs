//! A cheap, clonable cancellation flag for long transport work.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::error::TransportError;

/// A shared flag the driver sets to ask long-running work (packing, extracting, scanning,
/// applying, a task) to stop at the next check point.
#[derive(Clone, Debug, Default)]
pub struct CancelFlag(Arc<AtomicBool>);

impl CancelFlag {
    /// A flag that is not set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks the work to stop.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether [`CancelFlag::cancel`] was called on this flag or a clone of it.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }

    /// `Err(TransportError::Cancelled)` once the flag is set.
    pub fn check(&self) -> Result<(), TransportError> {
        if self.is_cancelled() {
            Err(TransportError::Cancelled)
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_the_flag() {
        let a = CancelFlag::new();
        let b = a.clone();
        assert!(a.check().is_ok());
        b.cancel();
        assert!(a.is_cancelled());
        assert!(matches!(a.check(), Err(TransportError::Cancelled)));
    }
}
